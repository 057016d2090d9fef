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
//! Layouts are the `irdma_hal::cqp` field tables; every builder cites the
//! spec section and vendor function it follows.

pub mod cmd;
pub mod ctx;
pub mod decode;
pub mod engine;

use irdma_hal::Field;

pub use cmd::CqpCommand;
pub use engine::{Completed, Cqp, CqpConfig, CqpError, Posted};

/// Why a command, context or buffer could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum EncodeError {
    /// `value` does not fit the hardware field `field` (at most `max`).
    TooWide {
        /// Name of the input.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The largest value the field holds.
        max: u64,
    },
    /// The input is not one the hardware accepts (e.g. a page size other than
    /// 4 KiB / 2 MiB / 1 GiB); `what` names it.
    Invalid {
        /// What was wrong.
        what: &'static str,
    },
}

/// `v` placed in `f`, or [`EncodeError::TooWide`] naming `name`.
#[inline]
pub(crate) fn fit(f: Field, v: u64, name: &'static str) -> Result<u64, EncodeError> {
    f.prep_checked(v).ok_or(EncodeError::TooWide { field: name, value: v, max: f.max() })
}

/// A one-bit flag placed in `f`.
#[inline]
pub(crate) fn flag(f: Field, on: bool) -> u64 {
    if on { f.mask() } else { 0 }
}
