//! The verbs' errors: [`VerbsError`] and the [`Quantity`] its limits name,
//! each with `Display` (issue #29: errors beside their layer).

use core::error::Error;
use core::fmt::{self, Display, Formatter};
use irdma_hal::DmaError;

use crate::Phrase;
use crate::cqp::engine::CqpError;
use crate::device::cqp_codes;
use crate::res::{AccessError, IdError, PbleError, StagError};

/// Largest MR (spec §5.5: 2^45 bytes), the limit of [`VerbsError::TooLong`].
pub const MAX_MR_SIZE: u64 = 1 << 45;

/// Why a verb failed.
///
/// Sixteen bytes (a pinned unit test keeps it so), as are `Result<u32,
/// VerbsError>` and `Result<(), VerbsError>`: the limit names are a
/// one-byte [`Quantity`], phrases a one-pointer [`Phrase`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum VerbsError {
    /// The CQP op failed (hardware major/minor inside) or timed out.
    Cqp(CqpError),
    /// DMA memory could not be had.
    Dma(DmaError),
    /// Every id of that kind is in use (or another id-table refusal).
    Id(IdError),
    /// STag bookkeeping refused.
    Stag(StagError),
    /// The PBLE pool refused.
    Pble(PbleError),
    /// The access flags cannot be granted.
    Access(AccessError),
    /// A requested size is above what the device allows.
    AboveLimit {
        /// What.
        what: Quantity,
        /// Largest allowed.
        max: u32,
        /// Requested (a count above `u32::MAX` is reported as `u32::MAX`).
        requested: u32,
    },
    /// An MR length above [`MAX_MR_SIZE`] (2^45 bytes, a
    /// limit wider than [`AboveLimit`](Self::AboveLimit)'s `max`).
    TooLong {
        /// The length asked for.
        length: u64,
    },
    /// An argument is unusable; `what` says which.
    Invalid {
        /// What.
        what: Phrase,
    },
    /// The transition is not allowed from the QP's current state.
    InvalidState,
    /// The object was destroyed.
    Destroyed,
    /// The object still has users (a CQ that live QPs complete to); destroy
    /// them first. Dropping it instead defers its destroy until they go.
    InUse {
        /// What.
        what: Quantity,
        /// How many users.
        users: u32,
    },
    /// More PBLE SDs than the driver tracks.
    Capacity,
}

/// What a [`VerbsError::AboveLimit`] or [`VerbsError::InUse`] is about, one byte (a `&'static str`
/// would make every `Result<_, VerbsError>` eight bytes larger).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(u8)]
#[non_exhaustive]
pub enum Quantity {
    /// `cqe`
    Cqe,
    /// `length`
    Length,
    /// `max_pages`
    MaxPages,
    /// `max_sge`
    MaxSge,
    /// `max_wr`
    MaxWr,
    /// `neighbour entries`
    NeighbourEntries,
    /// `pages`
    Pages,
    /// `registered QPs`
    RegisteredQPs,
    /// `max_inline_data`
    MaxInlineData,
    /// `max_recv_sge`
    MaxRecvSge,
    /// `max_recv_wr`
    MaxRecvWr,
    /// `max_send_sge`
    MaxSendSge,
    /// `max_send_wr`
    MaxSendWr,
    /// `GSI QP 1`
    GsiQp1,
    /// `CQ with live QPs`
    CqWithLiveQps,
}

impl Quantity {
    /// Its name, e.g. `"max_send_sge"`.
    pub const fn name(self) -> &'static str {
        match self {
            Quantity::Cqe => "cqe",
            Quantity::Length => "length",
            Quantity::MaxPages => "max_pages",
            Quantity::MaxSge => "max_sge",
            Quantity::MaxWr => "max_wr",
            Quantity::NeighbourEntries => "neighbour entries",
            Quantity::Pages => "pages",
            Quantity::RegisteredQPs => "registered QPs",
            Quantity::MaxInlineData => "max_inline_data",
            Quantity::MaxRecvSge => "max_recv_sge",
            Quantity::MaxRecvWr => "max_recv_wr",
            Quantity::MaxSendSge => "max_send_sge",
            Quantity::MaxSendWr => "max_send_wr",
            Quantity::GsiQp1 => "GSI QP 1",
            Quantity::CqWithLiveQps => "CQ with live QPs",
        }
    }
}

impl VerbsError {
    /// The hardware (major, minor) codes, if the device reported some.
    pub fn hw_codes(&self) -> Option<(u16, u16)> {
        match self {
            VerbsError::Cqp(e) => cqp_codes(*e),
            _ => None,
        }
    }
}

impl From<CqpError> for VerbsError {
    fn from(e: CqpError) -> Self {
        VerbsError::Cqp(e)
    }
}
impl From<DmaError> for VerbsError {
    fn from(e: DmaError) -> Self {
        VerbsError::Dma(e)
    }
}
impl From<IdError> for VerbsError {
    fn from(e: IdError) -> Self {
        VerbsError::Id(e)
    }
}
impl From<StagError> for VerbsError {
    fn from(e: StagError) -> Self {
        VerbsError::Stag(e)
    }
}
impl From<PbleError> for VerbsError {
    fn from(e: PbleError) -> Self {
        VerbsError::Pble(e)
    }
}
impl From<AccessError> for VerbsError {
    fn from(e: AccessError) -> Self {
        VerbsError::Access(e)
    }
}
impl From<crate::device::BackError> for VerbsError {
    fn from(e: crate::device::BackError) -> Self {
        match e {
            crate::device::BackError::Dma(d) => VerbsError::Dma(d),
            crate::device::BackError::Cqp(c) => VerbsError::Cqp(c),
            crate::device::BackError::Capacity => VerbsError::Capacity,
        }
    }
}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

impl Display for Quantity {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl PartialEq<&str> for Quantity {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

impl Display for VerbsError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            VerbsError::Cqp(e) => e.fmt(f),
            VerbsError::Dma(e) => e.fmt(f),
            VerbsError::Id(e) => e.fmt(f),
            VerbsError::Stag(e) => e.fmt(f),
            VerbsError::Pble(e) => e.fmt(f),
            VerbsError::Access(e) => e.fmt(f),
            VerbsError::AboveLimit { what, requested, max } => {
                write!(f, "{what} {requested} above the device limit {max}")
            }
            VerbsError::TooLong { length } => {
                let max = MAX_MR_SIZE;
                write!(f, "length {length} above the device limit {max}")
            }
            VerbsError::Invalid { what } => write!(f, "invalid argument: {what}"),
            VerbsError::InvalidState => f.write_str("not allowed in the QP's current state"),
            VerbsError::Destroyed => f.write_str("the object was destroyed"),
            VerbsError::Capacity => f.write_str("more PBLE SDs than the driver tracks"),
            VerbsError::InUse { what, users } => write!(f, "{what}: {users} users left"),
        }
    }
}

impl Error for VerbsError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            VerbsError::Cqp(e) => e.source(),
            VerbsError::Dma(e) => e.source(),
            VerbsError::Id(e) => e.source(),
            VerbsError::Stag(e) => e.source(),
            VerbsError::Pble(e) => e.source(),
            VerbsError::Access(e) => e.source(),
            _ => None,
        }
    }
}
