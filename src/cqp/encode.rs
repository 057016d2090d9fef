//! [`EncodeError`] and the field helpers every CQP encoder (`cmd`, `ctx`)
//! uses: a value placed in a hardware field, or refused when it does not
//! fit.

use core::error::Error;
use core::fmt::{self, Display, Formatter};
use irdma_hal::Field;

use super::FieldName;
use crate::error::Phrase;

/// Why a command, context or buffer could not be encoded.
///
/// Sixteen bytes (a pinned unit test keeps it so): the input is named by a
/// one-byte [`FieldName`], a field's maximum by its width, a refusal by a
/// one-pointer [`Phrase`], so `Result<_, EncodeError>` and
/// `Result<_, CqpError>` are two words (rustc 1.95 still returns them
/// through memory, but each `?` copies two words instead of four or five).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum EncodeError {
    /// `value` does not fit the `bits`-bit hardware field `field` (at most
    /// 2^`bits` − 1).
    TooWide {
        /// The input.
        field: FieldName,
        /// Width of the field in bits (1..=64).
        bits: u8,
        /// The value given.
        value: u64,
    },
    /// `value` is above `max`, the largest the device (or the driver's
    /// table) accepts for `field`, which is narrower than the WQE field.
    AboveMax {
        /// The input.
        field: FieldName,
        /// The largest value accepted.
        max: u32,
        /// The value given.
        value: u64,
    },
    /// The input is not one the hardware accepts (e.g. a page size other than
    /// 4 KiB / 2 MiB / 1 GiB); `what` names it.
    Invalid {
        /// What was wrong.
        what: Phrase,
    },
}

impl EncodeError {
    /// For [`TooWide`](Self::TooWide) and [`AboveMax`](Self::AboveMax): the
    /// input's name, the value given and the largest value accepted.
    pub fn too_wide(&self) -> Option<(&'static str, u64, u64)> {
        match *self {
            EncodeError::TooWide { field, bits, value } => {
                Some((field.name(), value, max_of(bits)))
            }
            EncodeError::AboveMax { field, max, value } => Some((field.name(), value, max.into())),
            EncodeError::Invalid { .. } => None,
        }
    }
}

/// 2^`bits` − 1 (all ones for 64 and above).
const fn max_of(bits: u8) -> u64 {
    if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 }
}

/// `v` placed in `f`, or [`EncodeError::TooWide`] naming `name`.
#[inline]
pub(crate) fn fit(f: Field, v: u64, name: FieldName) -> Result<u64, EncodeError> {
    f.prep_checked(v).ok_or(EncodeError::TooWide {
        field: name,
        bits: f.max().count_ones() as u8,
        value: v,
    })
}

/// A one-bit flag placed in `f`.
#[inline]
pub(crate) fn flag(f: Field, on: bool) -> u64 {
    if on { f.mask() } else { 0 }
}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

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
