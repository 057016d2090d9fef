//! **Low-level API** (a verbs user needs only [`crate::prelude`]).
//!
//! The Control QP: command builders, host contexts, decoders and the engine.
//!
//! * [`cmd`] — one typed value per CQP operation the E810 RoCE driver uses;
//!   each encodes its eight WQE words (all but the valid bit) into a
//!   `&mut [u64; 8]`, refusing inputs wider than their field with
//!   [`EncodeError::TooWide`] instead of truncating them.
//! * [`ctx`] — host memory the device reads: the CQP host context, the RoCE
//!   QP host context and the FPM commit buffer.
//! * [`decode`] — what the device writes: CCQ CQEs, FPM query and commit
//!   buffers, AEQEs.
//! * [`engine`] — the CQP itself: SQ ring, doorbell, create handshake,
//!   completions by register polling and by CCQ, typestate commands.
//!
//! This file only declares and re-exports (it sits with the engine, the
//! highest of its children); [`EncodeError`] and the field helpers are in
//! `encode.rs`, below every encoder (issue #29).
//!
//! Layouts are the `irdma_hal::cqp` field tables; every builder cites the
//! spec section and vendor function it follows.

pub mod cmd;
pub mod ctx;
pub mod decode;
mod encode;
pub mod engine;
mod names;

pub use crate::error::Phrase;
pub use names::FieldName;

pub use encode::EncodeError;
pub(crate) use encode::{fit, flag};

pub use cmd::CqpCommand;
pub use engine::{Completed, Cqp, CqpConfig, CqpError, Posted};
