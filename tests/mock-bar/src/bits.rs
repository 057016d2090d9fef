//! Bit-field helpers, written for the model (independent of the driver's
//! `Field` tables). Ranges are inclusive `[hi:lo]` as in the spec.

/// Mask of `hi - lo + 1` ones starting at bit 0.
pub(crate) const fn ones(hi: u32, lo: u32) -> u64 {
    let w = hi - lo + 1;
    if w >= 64 { u64::MAX } else { (1u64 << w) - 1 }
}

/// Extracts bits `[hi:lo]` of `v`.
pub(crate) const fn get(v: u64, hi: u32, lo: u32) -> u64 {
    (v >> lo) & ones(hi, lo)
}

/// Bit `n` of `v`.
pub(crate) const fn bit(v: u64, n: u32) -> bool {
    (v >> n) & 1 == 1
}

/// Places `x` (truncated to the field width) at bits `[hi:lo]`.
pub(crate) const fn put(x: u64, hi: u32, lo: u32) -> u64 {
    (x & ones(hi, lo)) << lo
}

/// Little-endian u64 at byte `off` of `buf`; 0 when out of range.
pub(crate) fn le64(buf: &[u8], off: usize) -> u64 {
    match buf.get(off..off + 8) {
        Some(b) => {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        }
        None => 0,
    }
}

/// Stores `v` little-endian at byte `off` of `buf` (ignored when out of range).
pub(crate) fn set_le64(buf: &mut [u8], off: usize, v: u64) {
    if let Some(b) = buf.get_mut(off..off + 8) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        assert_eq!(get(0xc000_8380_00be_ef01, 37, 32), 0);
        assert_eq!(get(0xc000_8380_00be_ef01, 41, 38), 14);
        assert_eq!(put(0x1ff, 3, 0), 0xf);
        assert_eq!(ones(63, 0), u64::MAX);
        assert!(bit(1 << 63, 63));
        let mut b = [0u8; 16];
        set_le64(&mut b, 8, 0x0102_0304_0506_0708);
        assert_eq!(le64(&b, 8), 0x0102_0304_0506_0708);
        assert_eq!(le64(&b, 9), 0, "out of range reads 0");
    }
}
