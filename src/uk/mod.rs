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
//! * [`cq`] — the CQ ring: CQE layout, status codes, arming, resize;
//! * `poll` — CQE decoding, retirement, flush replay ([`CqRing::poll_one`],
//!   above the QP whose WQEs it retires);
//! * [`link`] — a plain QP split into a producer and a consumer half, so a
//!   CQ is polled without the QP (`QpLink`, the SPSC protocol);
//! * [`qp`] — [`QpUk`] and `post_send` / `post_recv` / `poll_cq` /
//!   `req_notify_cq`.
//!
//! Hardware facts are from `spec/irdma-gen2-data-path.md` §1–5, which cites
//! the Intel driver's and rdma-core's `uk.c`/`defs.h`.

/// The four position accessors of a ring with free-running `head`/`tail`
/// (`Sq`, `Rq`) that the split producer/consumer halves exchange through
/// [`link`]; one definition for both queue types.
macro_rules! split_positions {
    () => {
        /// The free-running head (what a producer half publishes).
        #[inline(always)]
        pub(crate) fn head_pos(&self) -> u32 {
            self.head
        }

        /// The free-running tail (what a consumer half publishes).
        #[inline(always)]
        pub(crate) fn tail_pos(&self) -> u32 {
            self.tail
        }

        /// A producer half learns how far its consumer half retired.
        #[inline(always)]
        pub(crate) fn set_tail_pos(&mut self, tail: u32) {
            self.tail = tail;
        }

        /// A consumer half learns how far its producer half posted.
        #[inline(always)]
        pub(crate) fn set_head_pos(&mut self, head: u32) {
            self.head = head;
        }
    };
}

pub mod cq;
pub mod link;
pub mod mem;
pub mod mp;
mod poll;
pub mod qp;
pub mod rq;
pub mod sizing;
pub mod sq;
pub(crate) mod sync;

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

/// Runs loom's model of `f` with at most `bound` preemptions (the loom
/// tests of `link` and `mp`).
#[cfg(all(test, loom))]
fn loom_bounded(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(bound);
    b.max_branches = 100_000;
    b.check(f);
}
