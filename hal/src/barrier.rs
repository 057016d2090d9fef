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
//! other loads (TSO), so rules 1 and 3 need no instruction: they are Rust
//! release/acquire fences, which emit nothing on x86_64 but hold the compiler
//! back and give the CPU-side protocol (e.g. the shared SQ's tracking entries)
//! its happens-before edge in Rust's memory model. Rule 2 is `sfence` on
//! x86_64, as Linux's x86 `wmb()` (`arch/x86/include/asm/barrier.h`): a
//! doorbell page may be mapped write-combining ([`crate::Bar`] allows it), and
//! write-combining stores are not ordered after earlier write-back stores
//! without it. On aarch64 the `dmb`/`dsb` forms Linux uses are issued. Other
//! architectures (and Miri, which cannot run inline assembly) fall back to
//! atomic fences.

#[allow(unused_imports)]
use core::sync::atomic::{Ordering, fence};

/// Orders DMA-memory stores before later DMA-memory stores (body → valid bit).
#[inline(always)]
pub fn dma_wmb() {
    #[cfg(any(target_arch = "x86_64", miri))]
    fence(Ordering::Release);
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: a barrier instruction; no memory is accessed.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64", miri)))]
    fence(Ordering::Release);
}

/// Orders DMA-memory loads: the valid bit before the rest of the entry.
#[inline(always)]
pub fn dma_rmb() {
    #[cfg(any(target_arch = "x86_64", miri))]
    fence(Ordering::Acquire);
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: a barrier instruction; no memory is accessed.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64", miri)))]
    fence(Ordering::Acquire);
}

/// Orders memory stores before a following MMIO (doorbell) write.
#[inline(always)]
pub fn wmb() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a barrier instruction (SSE2, present on every x86_64 CPU; the
    // assembler needs no target feature for it); no memory is accessed. Not
    // `nomem`: it must also hold the compiler's stores back.
    unsafe {
        core::arch::asm!("sfence", options(nostack, preserves_flags))
    };
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: a barrier instruction; no memory is accessed.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags))
    };
    #[cfg(any(not(any(target_arch = "x86_64", target_arch = "aarch64")), miri))]
    fence(Ordering::SeqCst);
}

/// Full fence: stores before loads, e.g. publishing a head and then reading
/// a shadow area the device writes.
#[inline(always)]
pub fn mb() {
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: a barrier instruction; no memory is accessed.
    unsafe {
        core::arch::asm!("dsb sy", options(nostack, preserves_flags))
    };
    #[cfg(any(not(target_arch = "aarch64"), miri))]
    fence(Ordering::SeqCst);
}
