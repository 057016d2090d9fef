//! **Low-level API** (a verbs user needs only [`crate::prelude`]).
//!
//! The data path ("uk" in the vendor's naming): WQE encoding exactly as GEN_2
//! hardware reads it, SQ/RQ rings with valid-bit polarity, CQ polling with
//! error/flush mapping, CQ arming, and the verbs entry points on top.
//!
//! * [`mem`] — [`QueueMem`], a ring's memory (DMA or plain host memory);
//! * [`sizing`] — quanta/shift/depth arithmetic;
//! * [`sq`] — the one SQ WQE encoder, the quanta ring, NOP padding, tracking;
//! * [`mp`] — the shared multi-producer SQ (reserve → fill → publish, no
//!   producer waiting for another → doorbell) on the same encoder;
//! * [`rq`] — receive WQEs;
//! * [`cq`] — CQE decoding, retirement, flush replay, arming;
//! * [`link`] — a plain QP split into a producer and a consumer half, so a
//!   CQ is polled without the QP (`QpLink`, the SPSC protocol);
//! * [`qp`] — [`QpUk`] and `post_send` / `post_recv` / `poll_cq` /
//!   `req_notify_cq`.
//!
//! Hardware facts are from `spec/irdma-gen2-data-path.md` §1–5, which cites
//! the Intel driver's and rdma-core's `uk.c`/`defs.h`.

pub mod cq;
pub mod link;
pub mod mem;
pub mod mp;
pub mod qp;
pub mod rq;
pub mod sizing;
pub mod sq;
mod sync;

pub use cq::{CompStatus, CqPollInfo, CqRing, PollError, QueueType};
pub use link::{Linked, Publish, QpLink};
pub use mem::{QueueMem, Words, WqeSlot};
pub use mp::{MpSq, MpTrk};
pub use qp::{
    PostRecvError, PostSendError, QpKind, QpLookup, QpUk, poll_cq, req_notify_cq,
    to_work_completion,
};
pub use rq::{Rq, RqError};
pub use sq::{SendKind, SendQueue, Sq, SqError, SqOp, SqPost, SqWrTrk};

#[cfg(test)]
mod tests;
