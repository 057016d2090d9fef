//! Helpers shared by the fuzz targets (`mod common;` in each that uses them).

/// Little-endian 64-bit word `i` of `b`; bytes past its end read as zero,
/// so any input length yields whole words.
pub fn word(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    for (k, x) in w.iter_mut().enumerate() {
        *x = b.get(i * 8 + k).copied().unwrap_or(0);
    }
    u64::from_le_bytes(w)
}
