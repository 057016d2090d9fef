//! Bit-field descriptors for hardware words.
//!
//! Every hardware layout the driver encodes (register fields, WQE words,
//! context words) is written as a table of [`Field`] constants next to a
//! citation of where the layout comes from. The constructors are `const` and
//! refuse impossible ranges at compile time, so a typo in a table fails the
//! build instead of corrupting a WQE.

/// A contiguous bit range `[hi:lo]` (inclusive) of a 64-bit little-endian word.
///
/// 32-bit registers use the same type with `hi < 32`.
///
/// The fields are public (layout tables name them in `const` asserts), so a
/// `Field` may be built by hand with any values. Every method is total on
/// such a value: the field is the bits of `lo..lo + width` that lie in the
/// 64-bit word (none when `lo > 63` or `width == 0`), and no method panics
/// or overflows, in debug builds either. For the tables' constants the
/// extra cases fold away at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Lowest bit of the field.
    pub lo: u8,
    /// Width in bits (1..=64).
    pub width: u8,
}

impl Field {
    /// The field `[hi:lo]`, as hardware documentation writes it.
    ///
    /// Evaluated in a `const` context this fails the build when `hi < lo` or
    /// `hi > 63`.
    pub const fn bits(hi: u8, lo: u8) -> Self {
        assert!(hi >= lo, "field: hi must be >= lo");
        assert!(hi < 64, "field: beyond bit 63");
        Field { lo, width: hi - lo + 1 }
    }

    /// The one-bit field `[n]`.
    pub const fn bit(n: u8) -> Self {
        Self::bits(n, n)
    }

    /// Highest bit of the field (clamped to bit 63; `lo` for an empty one).
    pub const fn hi(self) -> u8 {
        let h = self.lo.saturating_add(self.width.saturating_sub(1));
        if h > 63 { 63 } else { h }
    }

    /// The field's mask at its position in the word.
    pub const fn mask(self) -> u64 {
        if self.lo > 63 {
            return 0;
        }
        let ones = if self.width >= 64 { u64::MAX } else { (1u64 << self.width) - 1 };
        ones << self.lo
    }

    /// The largest value the field can hold.
    pub const fn max(self) -> u64 {
        if self.lo > 63 { 0 } else { self.mask() >> self.lo }
    }

    /// Whether `v` fits in the field without truncation.
    pub const fn fits(self, v: u64) -> bool {
        v <= self.max()
    }

    /// `v` placed at the field's position, truncated to its width (what the
    /// vendor's `FIELD_PREP` does). Use [`Field::prep_checked`] where the value
    /// comes from a caller.
    #[inline(always)]
    pub const fn prep(self, v: u64) -> u64 {
        if self.lo > 63 { 0 } else { (v << self.lo) & self.mask() }
    }

    /// `v` placed at the field's position, or `None` when it does not fit.
    #[inline(always)]
    pub const fn prep_checked(self, v: u64) -> Option<u64> {
        if self.fits(v) { Some(self.prep(v)) } else { None }
    }

    /// The field's value in `word`.
    #[inline(always)]
    pub const fn get(self, word: u64) -> u64 {
        if self.lo > 63 { 0 } else { (word & self.mask()) >> self.lo }
    }

    /// Whether a one-bit field is set in `word`.
    #[inline(always)]
    pub const fn is_set(self, word: u64) -> bool {
        word & self.mask() != 0
    }

    /// `word` with the field replaced by `v` (truncated to the field).
    #[inline(always)]
    pub const fn set(self, word: u64, v: u64) -> u64 {
        (word & !self.mask()) | self.prep(v)
    }

    /// Whether two fields share any bit.
    pub const fn overlaps(self, other: Field) -> bool {
        self.mask() & other.mask() != 0
    }
}

/// Fails the build when any two fields of a table overlap.
///
/// Use in a `const _: () = assert_disjoint(&[..]);` next to a layout table.
pub const fn assert_disjoint(fields: &[Field]) {
    let mut i = 0;
    while i < fields.len() {
        let mut j = i + 1;
        while j < fields.len() {
            assert!(!fields[i].overlaps(fields[j]), "fields overlap");
            j += 1;
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prep_get_roundtrip() {
        let f = Field::bits(37, 32);
        assert_eq!(f.width, 6);
        assert_eq!(f.mask(), 0x3f << 32);
        assert_eq!(f.prep(0x1f), 0x1f << 32);
        assert_eq!(f.get(f.prep(0x2b)), 0x2b);
        // Truncates like FIELD_PREP.
        assert_eq!(f.prep(0x41), 0x01 << 32);
        assert_eq!(f.prep_checked(0x40), None);
        assert_eq!(f.prep_checked(0x3f), Some(0x3f << 32));
    }

    #[test]
    fn full_and_single_bit() {
        let all = Field::bits(63, 0);
        assert_eq!(all.mask(), u64::MAX);
        assert_eq!(all.get(0xdead_beef_0000_0001), 0xdead_beef_0000_0001);
        let v = Field::bit(63);
        assert!(v.is_set(1 << 63));
        assert!(!v.is_set(1 << 62));
        assert_eq!(v.set(u64::MAX, 0), u64::MAX >> 1);
    }

    /// Issue #12: a hand-built `Field` (the fields are public) with values
    /// out of range used to panic in debug builds (shift overflow in
    /// `mask`/`prep`/`get`, add overflow in `hi`). Every method is total.
    #[test]
    fn hand_built_fields_never_panic() {
        let cases = [
            Field { lo: 70, width: 3 },
            Field { lo: 60, width: 10 },
            Field { lo: 0, width: 200 },
            Field { lo: 255, width: 255 },
            Field { lo: 5, width: 0 },
            Field { lo: 63, width: 1 },
        ];
        for f in cases {
            let m = f.mask();
            assert_eq!(f.prep(u64::MAX) & !m, 0, "{f:?}");
            assert_eq!(f.get(u64::MAX), f.max(), "{f:?}");
            assert!(f.hi() <= 63);
            let _ = (f.fits(u64::MAX), f.prep_checked(1), f.set(u64::MAX, 0), f.is_set(m));
        }
        assert_eq!(Field { lo: 70, width: 3 }.mask(), 0);
        assert_eq!(Field { lo: 60, width: 10 }.mask(), 0xf << 60);
        assert_eq!(Field { lo: 0, width: 200 }.mask(), u64::MAX);
        assert_eq!(Field { lo: 5, width: 0 }.mask(), 0);
        assert_eq!(Field { lo: 63, width: 1 }, Field::bit(63));
    }

    #[test]
    fn overlap_detection() {
        assert!(Field::bits(10, 0).overlaps(Field::bit(10)));
        assert!(!Field::bits(10, 0).overlaps(Field::bit(11)));
    }
}
