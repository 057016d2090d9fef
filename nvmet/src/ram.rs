//! The namespace's backing memory: a physically contiguous region that the
//! device reads and writes by DMA (RDMA READ data lands in it, RDMA WRITEs
//! take data from it) while the CPU copies in-capsule data into it and
//! zeroes ranges of it.
//!
//! Soundness: no Rust reference ever covers the region. Every CPU access
//! goes through relaxed atomics (bytes, or aligned 8-byte words in the
//! middle of a range), so a host that lets a DMA transfer and a CPU copy
//! touch the same bytes gets undefined *data*, never undefined behaviour —
//! the discipline of `irdma_hal::dma::Dma`.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// A RAM namespace's memory (see the module docs).
#[derive(Debug)]
pub struct RamDisk {
    base: NonNull<u8>,
    len: u64,
    phys: u64,
}

// SAFETY: the region is only accessed through atomics (module docs), so
// sharing and sending the handle between threads is sound.
unsafe impl Send for RamDisk {}
// SAFETY: as above.
unsafe impl Sync for RamDisk {}

impl RamDisk {
    /// A disk over `len` bytes at `base`, whose physical (DMA) address is
    /// `phys` (contiguous, page-aligned when it is to be registered).
    ///
    /// # Safety
    ///
    /// `base..base + len` is valid for reads and writes, aligned to 8
    /// bytes, for as long as the `RamDisk` and every memory registration
    /// over it live; nothing else accesses it except through `RamDisk`
    /// handles over it (this one, or others made by `new` for the same
    /// region: the command layer owns one, the transport borrows another)
    /// or the device's DMA at `phys..phys + len`.
    pub unsafe fn new(base: NonNull<u8>, len: u64, phys: u64) -> RamDisk {
        RamDisk { base, len, phys }
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Physical (DMA) address of byte 0.
    pub fn phys(&self) -> u64 {
        self.phys
    }

    /// Virtual address of byte 0 (for a memory registration's iova).
    pub fn vaddr(&self) -> NonNull<u8> {
        self.base
    }

    fn range(&self, off: u64, n: usize) -> Option<usize> {
        let end = off.checked_add(n as u64)?;
        (end <= self.len).then_some(off as usize)
    }

    /// Copies `out.len()` bytes from `off`; `false` (nothing copied) when
    /// the range does not fit.
    pub fn read(&self, off: u64, out: &mut [u8]) -> bool {
        let Some(at) = self.range(off, out.len()) else { return false };
        for (i, b) in out.iter_mut().enumerate() {
            *b = self.byte(at + i).load(Ordering::Relaxed);
        }
        true
    }

    /// Copies `data` to `off`; `false` (nothing written) when it does not fit.
    pub fn write(&self, off: u64, data: &[u8]) -> bool {
        let Some(at) = self.range(off, data.len()) else { return false };
        for (i, &b) in data.iter().enumerate() {
            self.byte(at + i).store(b, Ordering::Relaxed);
        }
        true
    }

    /// Zeroes `len` bytes from `off`; `false` (nothing written) when the
    /// range does not fit.
    pub fn zero(&self, off: u64, len: u64) -> bool {
        let Ok(n) = usize::try_from(len) else { return false };
        let Some(mut at) = self.range(off, n) else { return false };
        let end = at + n;
        while at < end && at % 8 != 0 {
            self.byte(at).store(0, Ordering::Relaxed);
            at += 1;
        }
        while at + 8 <= end {
            // SAFETY: `at` is 8-aligned from an 8-aligned base (`new`'s
            // contract) and `at + 8 <= len`; only atomics touch the region.
            unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(at).cast::<u64>()) }
                .store(0, Ordering::Relaxed);
            at += 8;
        }
        while at < end {
            self.byte(at).store(0, Ordering::Relaxed);
            at += 1;
        }
        true
    }

    fn byte(&self, at: usize) -> &AtomicU8 {
        debug_assert!((at as u64) < self.len);
        // SAFETY: callers pass `at < len` (checked by `range`); the region
        // is valid for the handle's life and only accessed atomically.
        unsafe { AtomicU8::from_ptr(self.base.as_ptr().add(at)) }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;

    fn disk(words: &mut [u64]) -> RamDisk {
        let p = NonNull::new(words.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: the test's words outlive the disk and are used only through it.
        unsafe { RamDisk::new(p, (words.len() * 8) as u64, 0x1000) }
    }

    #[test]
    fn copies_are_bounds_checked_and_round_trip() {
        let mut w = vec![0u64; 8];
        let d = disk(&mut w);
        assert!(d.write(3, b"hello"));
        let mut out = [0u8; 5];
        assert!(d.read(3, &mut out));
        assert_eq!(&out, b"hello");
        assert!(!d.write(60, b"hello"), "past the end");
        assert!(!d.read(u64::MAX - 1, &mut out), "overflowing offset");
        assert!(d.write(59, b"hello"));
    }

    #[test]
    fn zero_clears_exactly_the_range() {
        let mut w = vec![u64::MAX; 8];
        let d = disk(&mut w);
        assert!(d.zero(5, 40));
        let mut all = [0u8; 64];
        assert!(d.read(0, &mut all));
        for (i, b) in all.iter().enumerate() {
            assert_eq!(*b == 0, (5..45).contains(&i), "byte {i}");
        }
        assert!(!d.zero(60, 5));
        assert!(!d.zero(0, u64::MAX));
    }
}
