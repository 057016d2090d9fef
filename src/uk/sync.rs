//! Atomics for the lock-free SQ and the split QP halves: `core`'s, or
//! loom's in the loom model
//! (`RUSTFLAGS="--cfg loom" cargo test -p irdma --lib loom`).

#[cfg(all(test, loom))]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering, fence};

#[cfg(not(all(test, loom)))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering, fence};

/// A value alone on its cache lines: 128-byte aligned and sized, so a
/// neighbour written by another core never shares a line with it (two
/// 64-byte lines, because x86's adjacent-line prefetcher pulls lines in
/// pairs; some Arm cores have 128-byte lines).
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> core::ops::Deref for Padded<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.0
    }
}
