//! Host DMA memory as the device model touches it in host tests: through
//! the same access model the driver uses (issue #28).
//!
//! The driver accesses DMA memory only as atomic accesses of aligned 8-byte
//! words (irdma-hal's `Dma` and `irdma::uk::QueueMem`). The model reaches
//! the same memory from another thread — the device thread
//! (`Fabric::spawn_device_thread`), or inside one driver thread's doorbell
//! write while another driver thread fills the same ring — so its accesses
//! must be of the same kind: in Rust's memory model a non-atomic access
//! racing an atomic one, or two racing atomic accesses of different sizes to
//! overlapping bytes, is undefined behaviour. The copies here are therefore
//! written independently of the hal (the model side never depends on the
//! driver or its hal) to the same rule: every access is one atomic access of
//! the aligned u64 holding the bytes; a load extracts the bytes wanted; a
//! word written whole is one store; a word written in part is one
//! compare-exchange loop that keeps its other bytes.
//!
//! Orderings: stores are `Release` and loads `Acquire`, so the model's DMA
//! is seen in the order it was issued, as a device's is — the driver's
//! `dma_rmb` (an acquire fence) after it reads a CQE's valid bit then
//! orders the rest of the entry (spec data-path §1.8 for the driver's side;
//! interrupts.md, host loop step 7: the CQE is written before the CEQE).
//! On x86_64 these are the same plain `mov`s as relaxed accesses.

use std::sync::atomic::{AtomicU64, Ordering};

/// The atomic u64 at `addr & !7`.
///
/// # Safety
///
/// The aligned word holding `addr` is valid for reads and writes for the
/// caller's use, and every concurrent access to it is an aligned 8-byte
/// atomic.
unsafe fn word<'a>(addr: usize) -> &'a AtomicU64 {
    // The bus address is the host address of memory whose provenance
    // FakeHal exposed when it handed the address out.
    let p = std::ptr::with_exposed_provenance_mut::<u64>(addr & !7);
    // SAFETY: aligned down to 8, valid and only accessed atomically (the
    // caller).
    unsafe { AtomicU64::from_ptr(p) }
}

/// Copies `buf.len()` bytes at host address `addr` into `buf`, one atomic
/// load per aligned word.
///
/// # Safety
///
/// Every aligned 8-byte word holding a byte of `addr..addr + buf.len()` is
/// valid for reads and writes, and every concurrent access to those words is
/// an aligned 8-byte atomic (the driver's DMA access model). `buf` is not
/// inside that range.
pub(crate) unsafe fn load_bytes(addr: usize, buf: &mut [u8]) {
    let mut done = 0;
    while done < buf.len() {
        let at = addr + done;
        let first = at % 8;
        let n = (8 - first).min(buf.len() - done);
        // SAFETY: the word holding `at` is one of the caller's words.
        let b = u64::from_le(unsafe { word(at) }.load(Ordering::Acquire)).to_le_bytes();
        if let (Some(d), Some(s)) = (buf.get_mut(done..done + n), b.get(first..first + n)) {
            d.copy_from_slice(s);
        }
        done += n;
    }
}

/// Copies `data` to host address `addr`: words covered whole are one atomic
/// store, a word covered in part one atomic read-modify-write that keeps
/// its other bytes.
///
/// # Safety
///
/// As [`load_bytes`], for `addr..addr + data.len()`.
pub(crate) unsafe fn store_bytes(addr: usize, data: &[u8]) {
    let mut done = 0;
    while done < data.len() {
        let at = addr + done;
        let first = at % 8;
        let n = (8 - first).min(data.len() - done);
        let mut b = [0u8; 8];
        if let (Some(d), Some(s)) = (b.get_mut(first..first + n), data.get(done..done + n)) {
            d.copy_from_slice(s);
        }
        let bits = u64::from_le_bytes(b);
        // SAFETY: the word holding `at` is one of the caller's words.
        let w = unsafe { word(at) };
        if n == 8 {
            w.store(bits.to_le(), Ordering::Release);
        } else {
            // n < 8 and first + n <= 8: the mask is bytes first..first + n.
            let mask = ((1u64 << (8 * n)) - 1) << (8 * first);
            let _ = w.fetch_update(Ordering::AcqRel, Ordering::Acquire, |raw| {
                Some(((u64::from_le(raw) & !mask) | bits).to_le())
            });
        }
        done += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Byte semantics around word boundaries, against a plain copy.
    #[test]
    fn copies_match_a_byte_copy() {
        let base: Vec<u8> = (0..40u8).map(|i| i ^ 0x3c).collect();
        for off in 0..17 {
            for len in 0..17 {
                let mut mem = [0u64; 5];
                let a = mem.as_mut_ptr() as usize;
                let src: Vec<u8> = (0..len as u8).map(|i| 0x80 | i).collect();
                let mut want = base.clone();
                want[off..off + len].copy_from_slice(&src);
                let mut got = [0u8; 40];
                let mut part = vec![0u8; len];
                // SAFETY: `mem` is 40 bytes of 8-aligned words, accessed
                // only here, on this thread.
                unsafe {
                    store_bytes(a, &base);
                    store_bytes(a + off, &src);
                    load_bytes(a, &mut got);
                    load_bytes(a + off, &mut part);
                }
                assert_eq!(got[..], want[..], "store of {len} bytes at {off}");
                assert_eq!(part[..], want[off..off + len], "load of {len} bytes at {off}");
            }
        }
    }
}
