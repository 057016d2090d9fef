//! The orderings the data path depends on, per architecture.
//!
//! Two rules from the vendor's datapath (spec data-path §1.8 and §4.5):
//!
//! 1. a WQE's body must be visible to the device before its header word with
//!    the valid bit ([`dma_wmb`], what Linux calls `dma_wmb()`);
//! 2. the valid bit (and every ring write) must be visible before the
//!    doorbell MMIO write that tells the device to look ([`wmb`], Linux's
//!    `wmb()` / `udma_to_device_barrier()`);
//!
//! and, on the completion side,
//!
//! 3. a CQE's valid bit is read before its other words ([`dma_rmb`]);
//! 4. a full fence between publishing state and reading a shadow area
//!    ([`mb`]).
//!
//! On x86_64, stores are not reordered with other stores and loads not with
//! other loads (TSO), and uncached MMIO writes are not reordered with earlier
//! write-back stores, so rules 1–3 only need the compiler held back. On
//! aarch64 the `dmb`/`dsb` forms Linux uses are issued. Other architectures
//! fall back to sequentially-consistent atomic fences.

#[allow(unused_imports)]
use core::sync::atomic::{Ordering, compiler_fence, fence};

/// Orders DMA-memory stores before later DMA-memory stores (body → valid bit).
#[inline(always)]
pub fn dma_wmb() {
    #[cfg(target_arch = "x86_64")]
    compiler_fence(Ordering::Release);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; no memory is accessed.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::Release);
}

/// Orders DMA-memory loads: the valid bit before the rest of the entry.
#[inline(always)]
pub fn dma_rmb() {
    #[cfg(target_arch = "x86_64")]
    compiler_fence(Ordering::Acquire);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; no memory is accessed.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::Acquire);
}

/// Orders memory stores before a following MMIO (doorbell) write.
#[inline(always)]
pub fn wmb() {
    #[cfg(target_arch = "x86_64")]
    compiler_fence(Ordering::SeqCst);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; no memory is accessed.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::SeqCst);
}

/// Full fence: stores before loads, e.g. publishing a head and then reading
/// a shadow area the device writes.
#[inline(always)]
pub fn mb() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; no memory is accessed.
    unsafe {
        core::arch::asm!("dsb sy", options(nostack, preserves_flags))
    };
    #[cfg(not(target_arch = "aarch64"))]
    fence(Ordering::SeqCst);
}
