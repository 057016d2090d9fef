//! `Display` and `core::error::Error` for every public error type of the
//! driver, kept in one place so they read alike: a short lower-case phrase,
//! with the wrapped error's own message after a colon (and as
//! [`source`](core::error::Error::source)).

use core::error::Error;
use core::fmt::{self, Display, Formatter};

use crate::cqp::decode::{DecodeError, FeaturesError};
use crate::cqp::engine::CqpError;
use crate::cqp::{EncodeError, FieldName};
use crate::device::{CloseError, ProbeCause, ProbeError, ProbeStep};
use crate::ice::AqError;
use crate::ice::bringup::BringUpError;
use crate::ice::cmd::CmdError;
use crate::ice::desc::rc;
use crate::lan::{LanError, LanInfoError};
use crate::res::{AccessError, HmcError, IdError, PbleError, StagError};
use crate::rw::{RwError, RwPostError};
use crate::uk::cq::CqConfigError;
use crate::uk::qp::{PostRecvError, PostSendError};
use crate::uk::rq::RqConfigError;
use crate::uk::sq::SqConfigError;
use crate::uk::{PollError, RqError, SqError};
use crate::verbs::{PostError, PostErrorKind, Quantity, VerbsError};

/// A fixed phrase an error carries (what was invalid, what timed out),
/// held as one pointer to a `&'static str` instead of the two words of the
/// `&str` itself, so the error types that carry one stay at two words
/// (BENCHMARKS.md, `.text` sixth pass). Built with
/// [`Phrase::new`]`(&"text")`; compares, prints and formats as its text.
#[derive(Clone, Copy)]
pub struct Phrase(&'static &'static str);

impl Phrase {
    /// The phrase `text` (pass `&"literal"`).
    pub const fn new(text: &'static &'static str) -> Self {
        Phrase(text)
    }

    /// The text.
    pub const fn as_str(self) -> &'static str {
        self.0
    }
}

impl PartialEq for Phrase {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}
impl Eq for Phrase {}

impl PartialEq<&str> for Phrase {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Debug for Phrase {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Display for Phrase {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Phrase {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "{=str}", self.as_str())
    }
}

impl Display for FieldName {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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

impl PartialEq<&str> for FieldName {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

/// `Display` by a fixed phrase per variant, and an `Error` without source.
macro_rules! phrases {
    ($ty:ty { $($pat:pat => $msg:expr),+ $(,)? }) => {
        impl Display for $ty {
            fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
                f.write_str(match self { $($pat => $msg),+ })
            }
        }
        impl Error for $ty {}
    };
}

phrases!(LanInfoError {
    LanInfoError::BadPfId => "PF id beyond the 3-bit PF_FUNC_RID field",
    LanInfoError::BadVsi => "VSI number beyond the 10-bit hardware field",
    LanInfoError::UnsupportedGeneration => "not an RDMA GEN_2 function",
    LanInfoError::NotPrivileged => "the function is not privileged (VF)",
    LanInfoError::BadQos => "traffic-class count or UP-to-TC map unusable",
    LanInfoError::BadMac => "MAC address is multicast or zero",
    LanInfoError::BadMtu => "MTU outside 576..=9728",
});

impl Display for LanError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            LanError::Command(code) => write!(f, "LAN admin-queue command failed with code {code}"),
            LanError::NoResources => f.write_str("LAN side has no resources left"),
            LanError::NotReady => f.write_str("LAN side not ready"),
            LanError::InUse => f.write_str("the RDMA device still uses it"),
        }
    }
}
impl Error for LanError {}

impl Display for AqError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            AqError::BadConfig => f.write_str("admin-queue ring or buffer size out of range"),
            AqError::Dma(e) => write!(f, "admin-queue ring memory: {e}"),
            AqError::RegisterReadback => f.write_str("admin-queue base address did not read back"),
            AqError::NotRunning => f.write_str("admin queue not running"),
            AqError::BadBuffer => f.write_str("admin-queue buffer empty or larger than a slot"),
            AqError::ResetOngoing => f.write_str("admin-queue command refused: reset in progress"),
            AqError::HeadOutOfRange(h) => write!(f, "admin-queue head {h} beyond the ring"),
            AqError::RingFull => f.write_str("admin queue full"),
            AqError::Timeout { opcode, critical: true } => {
                write!(f, "admin command {opcode:#06x} timed out; firmware critical error")
            }
            AqError::Timeout { opcode, critical: false } => {
                write!(f, "admin command {opcode:#06x} timed out")
            }
            AqError::Firmware { opcode, code } => {
                write!(f, "admin command {opcode:#06x} failed: {} ({code})", rc::name(*code))
            }
            AqError::ResponseTooLong { datalen, capacity } => {
                write!(f, "admin response of {datalen} bytes exceeds the {capacity}-byte buffer")
            }
            AqError::EventError { opcode, code } => {
                write!(f, "admin event {opcode:#06x} carried error {} ({code})", rc::name(*code))
            }
        }
    }
}
impl Error for AqError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            AqError::Dma(e) => Some(e),
            _ => None,
        }
    }
}

impl Display for BringUpError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            BringUpError::ResetTimeout(step) => {
                write!(f, "PF bring-up: wait timed out at {step:?}")
            }
            BringUpError::FirmwareRecovery => f.write_str("PF bring-up: firmware in recovery mode"),
            BringUpError::Command(step, e) => write!(f, "PF bring-up at {step:?}: {e}"),
            BringUpError::RdmaDisabled => {
                f.write_str("PF bring-up: RDMA disabled (no capability or more than 4 PFs)")
            }
            BringUpError::NoDdpPackage => {
                f.write_str("PF bring-up: no DDP package active and none supplied")
            }
            BringUpError::NoMac => f.write_str("PF bring-up: firmware reports no LAN MAC"),
            BringUpError::LinkDown => f.write_str("PF bring-up: link stayed down"),
            BringUpError::BadOptions(why) => write!(f, "PF bring-up options refused: {why}"),
            BringUpError::MsixOutOfRange { available } => {
                write!(f, "PF bring-up: MSI-X vectors beyond the function's {available}")
            }
            BringUpError::Probe(e) => write!(f, "PF bring-up: RDMA probe failed: {e}"),
        }
    }
}
impl Error for BringUpError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            BringUpError::Command(_, e) => Some(e),
            BringUpError::Probe(e) => Some(e),
            _ => None,
        }
    }
}

impl Display for CmdError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            CmdError::Aq(e) => write!(f, "admin command failed: {e}"),
            CmdError::Invalid(why) => write!(f, "admin command refused: {why}"),
            CmdError::BadResponse(why) => write!(f, "firmware answer unusable: {why}"),
            CmdError::TcFull => f.write_str("scheduler TC node has no room for more children"),
            CmdError::InUse => f.write_str("a live RDMA device holds the VSI"),
            CmdError::Exists => f.write_str("the rule already forwards to this VSI"),
            CmdError::NotFound => f.write_str("firmware has no such switch rule or list"),
            CmdError::TableFull => f.write_str("the driver's filter table is full"),
            CmdError::ApiTooNew { major, minor } => {
                write!(f, "firmware AQ API {major}.{minor} is newer than 1.x")
            }
        }
    }
}
impl Error for CmdError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            CmdError::Aq(e) => Some(e),
            _ => None,
        }
    }
}

phrases!(SqError {
    SqError::TooManySges => "more SGEs than the QP allows",
    SqError::InlineTooLong => "inline payload longer than the QP's max_inline_data",
    SqError::InlineNotEnabled => "inline requested on a QP without inline support",
    SqError::ImmNotAllowed => "immediate data on an operation that cannot carry it",
    SqError::InvalidField => "a value does not fit its WQE field",
    SqError::Full => "send queue full",
    SqError::Unsupported => "operation not supported on E810",
});

phrases!(RqError {
    RqError::TooManySges => "more SGEs than the QP allows",
    RqError::Full => "receive queue full",
    RqError::InvalidField => "an SGE length does not fit the 31-bit fragment length",
});

phrases!(SqConfigError {
    SqConfigError::BadSize => "SQ size not a power of two in 8..=32768 quanta",
    SqConfigError::MemoryTooSmall => "SQ memory smaller than the ring",
    SqConfigError::TrackingTooSmall => "SQ tracking slice smaller than the ring",
    SqConfigError::BadLimits => "SQ max_frags above 13 or max_inline above 101",
});

phrases!(RqConfigError {
    RqConfigError::BadSize => "RQ size not a power of two in 2..=32768, or shift above 3",
    RqConfigError::MemoryTooSmall => "RQ memory smaller than the ring",
    RqConfigError::TrackingTooSmall => "RQ wr_id slice smaller than the ring",
    RqConfigError::BadLimits => "RQ max_frags above 13 or above the WQE stride",
});

phrases!(CqConfigError {
    CqConfigError::BadSize => "CQ size below 2 or above 2^21 entries",
    CqConfigError::MemoryTooSmall => "CQ ring or shadow memory too small",
});

phrases!(PollError {
    PollError::Empty => "no new completion",
    PollError::Drained => "a flush completion for an already drained queue",
    PollError::NoQp => "a completion of an unknown QP or WQE was dropped",
    PollError::Unlisted => "the next completion belongs to a QP the caller did not pass",
});

impl Display for PostSendError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "send WR {} not posted: {}", self.bad_wr, self.kind)
    }
}
impl Error for PostSendError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.kind)
    }
}

impl Display for PostRecvError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "receive WR {} not posted: {}", self.bad_wr, self.kind)
    }
}
impl Error for PostRecvError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.kind)
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

impl Display for PostError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "WR {} not posted: {}", self.bad_wr, self.kind)
    }
}
impl Error for PostError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.kind)
    }
}

phrases!(IdError {
    IdError::Exhausted => "every id is in use",
    IdError::OutOfRange => "id beyond the table's capacity",
    IdError::NotAllocated => "free of an id that is not allocated",
    IdError::Reserved => "the id is reserved",
    IdError::AlreadyAllocated => "the id is already in use",
    IdError::BadCapacity => "id table capacity unusable",
});

phrases!(PbleError {
    PbleError::ZeroEntries => "a PBL of zero entries",
    PbleError::TooLarge => "more PBL entries than any allowed level holds",
    PbleError::NoSpace => "PBLE pool exhausted or too fragmented",
    PbleError::TooManyRuns => "PBLE run table full",
    PbleError::LeafBufferTooSmall => "level-2 leaf buffer too small",
    PbleError::NotAllocated => "free of a PBLE run that is not allocated",
    PbleError::BadLayout => "PBLE object range from the commit is unusable",
});

impl Display for StagError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            StagError::Id(e) => write!(f, "STag index: {e}"),
            StagError::StaleKey => f.write_str("stale or forged STag key"),
        }
    }
}
impl Error for StagError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            StagError::Id(e) => Some(e),
            StagError::StaleKey => None,
        }
    }
}

phrases!(AccessError {
    AccessError::RemoteAtomic => "remote atomic access is not supported on E810",
    AccessError::MwBind => "memory-window bind access is not supported",
    AccessError::RemoteWriteNeedsLocalWrite => "remote write requires local write",
    AccessError::UnknownFlags => "unknown access flag bits",
});

impl Display for HmcError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            HmcError::ZeroQ1BlockSize => f.write_str("Q1 block size is 0"),
            HmcError::ZeroXfBlockSize => f.write_str("XF block size is 0"),
            HmcError::ZeroRrfBlockSize => f.write_str("RRF block size is 0"),
            HmcError::ZeroOoiscfBlockSize => f.write_str("OOISCF block size is 0"),
            HmcError::NoQps => f.write_str("no QPs offered or asked for"),
            HmcError::DoesNotFit { needed, available } => {
                write!(f, "HMC objects need {needed} SDs, {available} available")
            }
            HmcError::Overflow => f.write_str("HMC count or FPM address overflows"),
            HmcError::Overlap(a, b) => write!(f, "HMC objects {a:?} and {b:?} overlap"),
            HmcError::Misaligned(o) => write!(f, "HMC object {o:?} base not 512-byte aligned"),
        }
    }
}
impl Error for HmcError {}

impl Display for EncodeError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        // One format for both width and maximum refusals.
        match (self, self.too_wide()) {
            (_, Some((field, value, max))) => {
                write!(f, "{field} = {value:#x} does not fit its field (max {max:#x})")
            }
            (EncodeError::Invalid { what }, None) => write!(f, "invalid command input: {what}"),
            (EncodeError::TooWide { .. } | EncodeError::AboveMax { .. }, None) => Ok(()),
        }
    }
}
impl Error for EncodeError {}

phrases!(DecodeError {
    DecodeError::Q1BlockSizeZero => "FPM buffer: Q1 block size is 0",
    DecodeError::XfBlockSizeZero => "FPM buffer: XF block size is 0",
    DecodeError::RrfBlockSizeZero => "FPM buffer: RRF block size is 0",
    DecodeError::OoiscfBlockSizeZero => "FPM buffer: OOISCF block size is 0",
    DecodeError::Overflow => "FPM buffer: base + count x size overflows",
});

impl Display for FeaturesError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            FeaturesError::TooFew(n) => write!(f, "RDMA features: {n} entries, need at least 2"),
            FeaturesError::BufferTooSmall { needed } => {
                write!(f, "RDMA features: buffer too small, {needed} entries needed")
            }
        }
    }
}
impl Error for FeaturesError {}

impl Display for CqpError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            CqpError::Encode(e) => write!(f, "CQP command refused: {e}"),
            CqpError::Dma(e) => write!(f, "CQP memory: {e}"),
            CqpError::Timeout { what } => write!(f, "CQP timed out waiting for {what}"),
            CqpError::CreateFailed { major, minor } => {
                write!(f, "CQP create failed (major {major:#x}, minor {minor:#x})")
            }
            CqpError::OpFailed { opcode, major, minor } => {
                write!(f, "CQP op {opcode:#x} failed (major {major:#x}, minor {minor:#x})")
            }
            CqpError::RingFull => f.write_str("CQP ring full"),
            CqpError::Busy => f.write_str("CQP busy (one command at a time before the CCQ)"),
            CqpError::Protocol { what } => write!(f, "CQP protocol violation: {what}"),
            CqpError::WrongBuffer => {
                f.write_str("result asked for a buffer the command did not name")
            }
            CqpError::BadFpmBuffer(e) => write!(f, "CQP: {e}"),
            CqpError::BadFeatures(e) => write!(f, "CQP: {e}"),
            CqpError::NeedsReset => {
                f.write_str("the function needs a reset before the CQP is used again")
            }
            CqpError::DeviceGone => {
                f.write_str("the device is gone (registers read all-ones: surprise removal)")
            }
        }
    }
}
impl Error for CqpError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            CqpError::Encode(e) => Some(e),
            CqpError::Dma(e) => Some(e),
            CqpError::BadFpmBuffer(e) => Some(e),
            CqpError::BadFeatures(e) => Some(e),
            _ => None,
        }
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
                let max = crate::verbs::MAX_MR_SIZE;
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

impl Display for RwError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            RwError::NothingToTransfer => f.write_str("nothing to transfer after the offset"),
            RwError::InvalidArgument => f.write_str("invalid rdma_rw argument"),
            RwError::MapFailed => f.write_str("buffer could not be shared with the device"),
            RwError::NoCapacity => f.write_str("context storage or output slice too small"),
            RwError::PoolEmpty => f.write_str("MR pool empty"),
            RwError::Busy => f.write_str("context already initialised"),
            RwError::WrongContext => f.write_str("context not initialised or of the other kind"),
            RwError::IntegrityUnsupported => f.write_str("integrity offload not supported on E810"),
            RwError::Iova(e) => write!(f, "IOVA mapper failed ({e})"),
            RwError::WrongPool => f.write_str("context holds MRs of another MR pool"),
            RwError::StaleMr => {
                f.write_str("stale MR entry: the MR was returned or handed out again")
            }
        }
    }
}
impl Error for RwError {}

impl<E: Display> Display for RwPostError<E> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            RwPostError::Rw(e) => e.fmt(f),
            RwPostError::Post { bad, err } => write!(f, "chain WR {bad} not posted: {err}"),
        }
    }
}
impl<E: Error + 'static> Error for RwPostError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            RwPostError::Rw(e) => Some(e),
            RwPostError::Post { err, .. } => Some(err),
        }
    }
}

impl Display for ProbeStep {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProbeStep::LanInfo => "LAN information",
            ProbeStep::FirmwareReady => "firmware ready",
            ProbeStep::DoorbellSize => "doorbell size",
            ProbeStep::CqpCreate => "CQP create",
            ProbeStep::QueryFeatures => "QUERY_RDMA_FEATURES",
            ProbeStep::QueryFpm => "QUERY_FPM_VAL",
            ProbeStep::SizeHmc => "HMC sizing",
            ProbeStep::CommitFpm => "COMMIT_FPM_VAL",
            ProbeStep::BackHmc => "HMC backing",
            ProbeStep::ShmcPagesAllocated => "SHMC_PAGES_ALLOCATED",
            ProbeStep::CreateCcq => "CCQ create",
            ProbeStep::CreateCeq => "CEQ create",
            ProbeStep::PblePool => "PBLE pool",
            ProbeStep::CreateAeq => "AEQ create",
            ProbeStep::WorkScheduler => "work-scheduler tree",
            ProbeStep::Resources => "resource tables",
            ProbeStep::RdmaFilter => "RDMA filter",
        })
    }
}

impl Display for ProbeCause {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            ProbeCause::Cqp(e) => e.fmt(f),
            ProbeCause::Dma(e) => e.fmt(f),
            ProbeCause::FirmwareNotReady([a, b, c]) => {
                write!(f, "firmware not ready (CPUSTATUS {a:#x} {b:#x} {c:#x})")
            }
            ProbeCause::DoorbellDisabled(v) => write!(f, "doorbells disabled (PE_DB_SIZE {v:#x})"),
            ProbeCause::Decode(e) => e.fmt(f),
            ProbeCause::Hmc(e) => e.fmt(f),
            ProbeCause::Pble(e) => e.fmt(f),
            ProbeCause::Lan(e) => e.fmt(f),
            ProbeCause::LanOp(e) => e.fmt(f),
            ProbeCause::Ids(e) => e.fmt(f),
            ProbeCause::Capacity => f.write_str("more SDs than the driver tracks"),
        }
    }
}
impl Error for ProbeCause {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            ProbeCause::Cqp(e) => Some(e),
            ProbeCause::Dma(e) => Some(e),
            ProbeCause::Decode(e) => Some(e),
            ProbeCause::Hmc(e) => Some(e),
            ProbeCause::Pble(e) => Some(e),
            ProbeCause::Lan(e) => Some(e),
            ProbeCause::LanOp(e) => Some(e),
            ProbeCause::Ids(e) => Some(e),
            _ => None,
        }
    }
}

impl Display for ProbeError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "probe failed at {}: {}", self.step, self.cause)
    }
}
impl Error for ProbeError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.cause)
    }
}

impl Display for CloseError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            CloseError::Cqp(e) => write!(f, "teardown not clean: {e}"),
            CloseError::Lan(e) => write!(f, "teardown not clean: {e}"),
            CloseError::Quarantined(q) => write!(
                f,
                "teardown kept {} bytes in {} buffers and {} ids the device may own (needs a reset)",
                q.bytes, q.buffers, q.ids
            ),
        }
    }
}
impl Error for CloseError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            CloseError::Cqp(e) => Some(e),
            CloseError::Lan(e) => Some(e),
            CloseError::Quarantined(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::{String, ToString};
    use std::vec::Vec;

    use super::*;
    use crate::res::HmcObj;
    use irdma_hal::DmaError;

    /// Every public error type formats to a non-empty phrase that is not its
    /// `Debug` form, and the wrappers carry their inner message.
    #[test]
    fn every_error_formats() {
        let cqp = CqpError::OpFailed { opcode: 0x0a, major: 0x8005, minor: 3 };
        let post = RwPostError::Post { bad: 4, err: SqError::Full };
        let probe = ProbeError { step: ProbeStep::CommitFpm, cause: ProbeCause::Cqp(cqp) };
        let kept = CloseError::Quarantined(Default::default());
        let all: Vec<(&dyn Error, String)> = std::vec![
            (&LanInfoError::BadMtu, std::format!("{:?}", LanInfoError::BadMtu)),
            (&LanError::Command(7), std::format!("{:?}", LanError::Command(7))),
            (&SqError::Full, "Full".into()),
            (&RqError::Full, "Full".into()),
            (&SqConfigError::BadSize, "BadSize".into()),
            (&RqConfigError::BadLimits, "BadLimits".into()),
            (&CqConfigError::MemoryTooSmall, "MemoryTooSmall".into()),
            (&PollError::Empty, "Empty".into()),
            (&PostSendError { bad_wr: 2, kind: SqError::Full }, String::new()),
            (&PostRecvError { bad_wr: 1, kind: RqError::TooManySges }, String::new()),
            (&PostError { bad_wr: 3, kind: PostErrorKind::Destroyed }, String::new()),
            (&PostErrorKind::Sq(SqError::Unsupported), String::new()),
            (&IdError::Exhausted, "Exhausted".into()),
            (&PbleError::NoSpace, "NoSpace".into()),
            (&StagError::StaleKey, "StaleKey".into()),
            (&AccessError::MwBind, "MwBind".into()),
            (&HmcError::Overlap(HmcObj::Qp, HmcObj::Cq), String::new()),
            (
                &EncodeError::TooWide { field: FieldName::QpId, bits: 18, value: 0x40000 },
                String::new()
            ),
            (
                &EncodeError::AboveMax { field: FieldName::CqId, max: 511, value: 512 },
                String::new()
            ),
            (&DecodeError::Overflow, "Overflow".into()),
            (&FeaturesError::TooFew(1), String::new()),
            (&cqp, String::new()),
            (&VerbsError::InvalidState, "InvalidState".into()),
            (&RwError::PoolEmpty, "PoolEmpty".into()),
            (&post, String::new()),
            (&ProbeCause::Capacity, "Capacity".into()),
            (&probe, String::new()),
            (&CloseError::Lan(LanError::NotReady), String::new()),
            (&kept, String::new()),
            (&CqpError::NeedsReset, "NeedsReset".into()),
            (&CqpError::DeviceGone, "DeviceGone".into()),
            (&PostErrorKind::DeviceGone, "DeviceGone".into()),
            (&PostErrorKind::CqDead, "CqDead".into()),
            (&VerbsError::InUse { what: Quantity::CqWithLiveQps, users: 2 }, String::new()),
            (&DmaError::NoMemory, "NoMemory".into()),
        ];
        for (e, debug) in all {
            let s = e.to_string();
            assert!(!s.is_empty() && s != debug, "{debug}: {s:?}");
        }
        assert_eq!(
            probe.to_string(),
            "probe failed at COMMIT_FPM_VAL: CQP op 0xa failed (major 0x8005, minor 0x3)"
        );
        assert_eq!(probe.source().map(|s| s.to_string()), Some(cqp.to_string()));
        assert_eq!(
            PostError { bad_wr: 1, kind: PostErrorKind::Sq(SqError::Full) }.to_string(),
            "WR 1 not posted: send queue full"
        );
        assert_eq!(
            EncodeError::TooWide { field: FieldName::QpId, bits: 18, value: 0x40000 }.to_string(),
            "qp_id = 0x40000 does not fit its field (max 0x3ffff)"
        );
        assert_eq!(
            EncodeError::AboveMax { field: FieldName::CqId, max: 511, value: 512 }.to_string(),
            "cq_id = 0x200 does not fit its field (max 0x1ff)"
        );
        assert_eq!(
            CqpError::Timeout { what: Phrase::new(&"CQP op (CCQ)") }.to_string(),
            "CQP timed out waiting for CQP op (CCQ)"
        );
        assert_eq!(
            VerbsError::AboveLimit { what: Quantity::MaxSendSge, requested: 14, max: 13 }
                .to_string(),
            "max_send_sge 14 above the device limit 13"
        );
        assert_eq!(
            VerbsError::TooLong { length: (1 << 45) + 1 }.to_string(),
            "length 35184372088833 above the device limit 35184372088832"
        );
        assert_eq!(
            VerbsError::InUse { what: Quantity::CqWithLiveQps, users: 2 }.to_string(),
            "CQ with live QPs: 2 users left"
        );
    }

    /// The control path's errors stay at two words, so each `?` copies two
    /// (BENCHMARKS.md, `.text` sixth pass): a field name is one
    /// byte, a phrase one pointer. A new variant with a wide payload fails
    /// here instead of growing every `?` of the driver.
    #[test]
    fn error_sizes_stay_pinned() {
        use core::mem::size_of;
        assert_eq!(size_of::<FieldName>(), 1);
        assert_eq!(size_of::<Phrase>(), size_of::<usize>());
        assert!(size_of::<EncodeError>() <= 16);
        assert!(size_of::<Result<u64, EncodeError>>() <= 16);
        assert!(size_of::<CqpError>() <= 16);
        assert!(size_of::<Result<(), CqpError>>() <= 16);
        assert!(size_of::<Result<u32, CqpError>>() <= 16);
        assert_eq!(size_of::<Quantity>(), 1);
        assert!(size_of::<VerbsError>() <= 16);
        assert!(size_of::<Result<(), VerbsError>>() <= 16);
        assert!(size_of::<Result<u32, VerbsError>>() <= 16);
    }
}
