//! The plain, bottom-layer pieces of the driver's errors: [`Phrase`] (the
//! fixed text an error carries) and the `phrases!` macro that gives an error
//! enum `Display` by one fixed phrase per variant and an `Error` without
//! source.
//!
//! Each error type keeps its `Display` and `core::error::Error` beside the
//! type, in the layer that raises it (issue #29), so this file imports
//! nothing of the driver's. They all read alike: a short lower-case
//! phrase, with the wrapped error's own message after a colon (and as
//! [`source`](core::error::Error::source)).

use core::fmt::{self, Display, Formatter};

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

/// `Display` by a fixed phrase per variant, and an `Error` without source
/// (used as `crate::error::phrases!(Type { Type::A => "…", … })` beside
/// the error type).
macro_rules! phrases {
    ($ty:ty { $($pat:pat => $msg:expr),+ $(,)? }) => {
        impl ::core::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(match self { $($pat => $msg),+ })
            }
        }
        impl ::core::error::Error for $ty {}
    };
}
pub(crate) use phrases;

/// `Display` as `$fmt` over two fields, the second a wrapped error, and an
/// `Error` whose source is that wrapped error (used as
/// `crate::error::wrapping!(Type, "… {} …: {}", where_field, cause_field)`
/// beside the error type).
///
/// The other form, `crate::error::wrapping!(Enum from { Inner => Variant, … })`,
/// gives an error enum one `From<Inner>` per variant that wraps another
/// error (one line a variant instead of a five-line impl each); the enum's
/// `Display` stays beside it, written out.
///
/// And `crate::error::wrapping!(Enum source { Variant, … })` gives an error
/// enum an `Error` whose source is the error those tuple variants wrap
/// (none for the other variants).
macro_rules! wrapping {
    ($ty:ident source { $($variant:ident),+ $(,)? }) => {
        impl ::core::error::Error for $ty {
            fn source(&self) -> Option<&(dyn ::core::error::Error + 'static)> {
                match self {
                    $($ty::$variant(e) => Some(e),)+
                    _ => None,
                }
            }
        }
    };
    ($ty:ident from { $($inner:ty => $variant:ident),+ $(,)? }) => {
        $(
            impl From<$inner> for $ty {
                fn from(e: $inner) -> Self {
                    $ty::$variant(e)
                }
            }
        )+
    };
    ($ty:ty, $fmt:literal, $at:ident, $cause:ident) => {
        impl ::core::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                write!(f, $fmt, self.$at, self.$cause)
            }
        }
        impl ::core::error::Error for $ty {
            fn source(&self) -> Option<&(dyn ::core::error::Error + 'static)> {
                Some(&self.$cause)
            }
        }
    };
}
pub(crate) use wrapping;

/// `Display` by the type's `name()` (a `&'static str`) and `PartialEq<&str>`
/// against it, for the field-like enums errors name (used as
/// `crate::error::named!(Type)` beside the type).
macro_rules! named {
    ($ty:ty) => {
        impl ::core::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.name())
            }
        }
        impl PartialEq<&str> for $ty {
            fn eq(&self, other: &&str) -> bool {
                self.name() == *other
            }
        }
    };
}
pub(crate) use named;

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::{String, ToString};
    use std::vec::Vec;

    use core::error::Error;

    use super::Phrase;
    use crate::cqp::decode::{DecodeError, FeaturesError};
    use crate::cqp::engine::CqpError;
    use crate::cqp::{EncodeError, FieldName};
    use crate::device::{CloseError, ProbeCause, ProbeError, ProbeStep};
    use crate::lan::{LanError, LanInfoError};
    use crate::res::HmcObj;
    use crate::res::{AccessError, HmcError, IdError, PbleError, StagError};
    use crate::rw::{RwError, RwPostError};
    use crate::uk::cq::CqConfigError;
    use crate::uk::qp::{PostRecvError, PostSendError};
    use crate::uk::rq::RqConfigError;
    use crate::uk::sq::SqConfigError;
    use crate::uk::{PollError, RqError, SqError};
    use crate::verbs::{PostError, PostErrorKind, Quantity, VerbsError};
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
