//! The verbs' errors: [`VerbsError`] and the [`Quantity`] its limits name,
//! [`PostError`] and its [`PostErrorKind`], each with `Display` (issue #29: errors beside their layer).

use core::error::Error;
use core::fmt::{self, Display, Formatter};
use irdma_hal::DmaError;

use crate::Phrase;
use crate::cqp::engine::CqpError;
use crate::device::cqp_codes;
use crate::res::{AccessError, IdError, PbleError, StagError};
use crate::uk::{RqError, SqError};

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

crate::error::wrapping!(VerbsError from {
    CqpError => Cqp,
    DmaError => Dma,
    IdError => Id,
    StagError => Stag,
    PbleError => Pble,
    AccessError => Access,
});

impl From<crate::device::BackError> for VerbsError {
    fn from(e: crate::device::BackError) -> Self {
        match e {
            crate::device::BackError::Dma(d) => VerbsError::Dma(d),
            crate::device::BackError::Cqp(c) => VerbsError::Cqp(c),
            crate::device::BackError::Capacity => VerbsError::Capacity,
        }
    }
}

/// Why a post failed: at `bad_wr` (the ones before it are posted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PostError {
    /// Index of the first WR not posted.
    pub bad_wr: usize,
    /// Why.
    pub kind: PostErrorKind,
}

/// The reason of a [`PostError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PostErrorKind {
    /// The SQ refused the WR.
    Sq(SqError),
    /// The RQ refused the WR.
    Rq(RqError),
    /// The QP was destroyed.
    Destroyed,
    /// A REG_MR (fast-register) WR that does not name a live
    /// [`FastRegMr`](super::FastRegMr) of this device (its STag index, any
    /// key byte), its own PBL (level-1 run or level-2 root, at the level it
    /// was allocated with: `pbl_level` 1 or 2), 4 KiB pages, no more pages
    /// (from the IOVA's offset in its first page) than the last
    /// [`FastRegMr::map_pages`](super::FastRegMr::map_pages) (or the rw
    /// layer's map at post) wrote, and rights a fast-register WQE may grant
    /// (issue #12). Each map arms exactly one REG_MR WR. Nothing from this
    /// WR on was posted.
    FastReg,
    /// [`SharedQp::post_send`](super::SharedQp::post_send) on a QP in ERROR
    /// found the QP's lock held (by a poller, `post_recv`, or a post this
    /// core interrupted) after [`BUSY_TRIES`](super::BUSY_TRIES) tries and did not wait: nothing from
    /// `bad_wr` on was posted. Retry from a context that may wait, or drop the WRs (they
    /// would complete as flushed).
    Busy,
    /// The device is gone ([`Device::is_gone`](crate::device::Device::is_gone):
    /// surprise removal): nothing was posted. WRs posted before complete as
    /// flushed from [`Cq::poll`](super::Cq::poll).
    DeviceGone,
    /// The QP completes to a CQ the device reported unusable
    /// ([`Cq::is_dead`](super::Cq::is_dead)): nothing was posted. WRs
    /// posted before complete as flushed from that CQ's poll; destroy the
    /// QP and the CQ and create new ones.
    CqDead,
}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

crate::error::named!(Quantity);

impl Display for VerbsError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        // A wrapping variant shows the wrapped error's message as its own,
        // called directly: a `&dyn Error` here would pull every wrapped
        // type's whole `Error` vtable into the image (+2 KB of .text on
        // both bare-metal targets, measured with `cargo xtask size`).
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

impl Display for PostErrorKind {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            PostErrorKind::Sq(e) => e.fmt(f),
            PostErrorKind::Rq(e) => e.fmt(f),
            PostErrorKind::Destroyed => f.write_str("the QP was destroyed"),
            PostErrorKind::FastReg => f.write_str(
                "the REG_MR WR does not name a live fast-register MR of this device within \
                 the pages mapped for it",
            ),
            PostErrorKind::Busy => f.write_str("the QP's lock is held; not posted (would block)"),
            PostErrorKind::DeviceGone => {
                f.write_str("the device is gone (surprise removal); nothing posted")
            }
            PostErrorKind::CqDead => {
                f.write_str("a CQ of the QP was reported unusable by the device; nothing posted")
            }
        }
    }
}

impl Error for PostErrorKind {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            PostErrorKind::Sq(e) => Some(e),
            PostErrorKind::Rq(e) => Some(e),
            PostErrorKind::Destroyed
            | PostErrorKind::FastReg
            | PostErrorKind::Busy
            | PostErrorKind::DeviceGone
            | PostErrorKind::CqDead => None,
        }
    }
}

crate::error::wrapping!(PostError, "WR {} not posted: {}", bad_wr, kind);
