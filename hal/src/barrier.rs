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

/// One barrier: traced as `$event` (feature `barrier-trace`), then the
/// aarch64 instruction `$arm` (Linux's arm64 form), or on every other
/// architecture (and Miri) an atomic fence of `$fallback` ordering.
macro_rules! barrier {
    ($event:ident, $arm:literal, $fallback:ident) => {{
        #[cfg(feature = "barrier-trace")]
        trace::record(trace::Event::$event);
        #[cfg(all(target_arch = "aarch64", not(miri)))]
        // SAFETY: a barrier instruction; no memory is accessed.
        unsafe {
            core::arch::asm!($arm, options(nostack, preserves_flags))
        };
        #[cfg(any(not(target_arch = "aarch64"), miri))]
        fence(Ordering::$fallback);
    }};
}

/// Orders DMA-memory stores before later DMA-memory stores (body → valid bit).
#[inline(always)]
pub fn dma_wmb() {
    barrier!(DmaWmb, "dmb oshst", Release)
}

/// Orders DMA-memory loads: the valid bit before the rest of the entry.
#[inline(always)]
pub fn dma_rmb() {
    barrier!(DmaRmb, "dmb oshld", Acquire)
}

/// Orders memory stores before a following MMIO (doorbell) write.
#[inline(always)]
pub fn wmb() {
    #[cfg(feature = "barrier-trace")]
    trace::record(trace::Event::Wmb);
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
    barrier!(Mb, "dsb sy", SeqCst)
}

/// Records a store to DMA memory in the barrier trace (only with the
/// `barrier-trace` feature; otherwise nothing, and compiled away).
#[inline(always)]
pub fn trace_store(addr: usize, value: u64) {
    #[cfg(feature = "barrier-trace")]
    trace::record(trace::Event::Store { addr, value });
    #[cfg(not(feature = "barrier-trace"))]
    let _ = (addr, value);
}

/// Test support (feature `barrier-trace`): a per-thread log of the barriers
/// above, of stores to ring memory (the driver's queue memory and [`crate::Dma`]
/// call [`trace_store`]) and of MMIO writes a test's `Bar` records, so a test
/// can check a barrier sits between a WQE's body and its valid bit, and
/// between the ring and the doorbell. Nothing is logged until [`trace::start`].
#[cfg(feature = "barrier-trace")]
pub mod trace {
    use core::cell::RefCell;
    use std::vec::Vec;

    /// One traced event.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Event {
        /// A 64-bit store to DMA memory at `addr`.
        Store {
            /// Host address stored to.
            addr: usize,
            /// Value stored.
            value: u64,
        },
        /// [`super::dma_wmb`].
        DmaWmb,
        /// [`super::dma_rmb`].
        DmaRmb,
        /// [`super::wmb`].
        Wmb,
        /// [`super::mb`].
        Mb,
        /// A 32-bit MMIO write (recorded by a test's `Bar` with [`mmio`]).
        Mmio {
            /// BAR offset.
            offset: usize,
            /// Value written.
            value: u32,
        },
    }

    std::thread_local! {
        static LOG: RefCell<Option<Vec<Event>>> = const { RefCell::new(None) };
    }

    /// Starts (or restarts) logging on this thread.
    pub fn start() {
        LOG.with(|l| *l.borrow_mut() = Some(Vec::new()));
    }

    /// Stops logging on this thread and returns what was logged.
    pub fn take() -> Vec<Event> {
        LOG.with(|l| l.borrow_mut().take()).unwrap_or_default()
    }

    /// Logs `e` if logging is on for this thread.
    pub fn record(e: Event) {
        LOG.with(|l| {
            if let Some(v) = l.borrow_mut().as_mut() {
                v.push(e);
            }
        });
    }

    /// Logs an MMIO write (for test `Bar`s).
    pub fn mmio(offset: usize, value: u32) {
        record(Event::Mmio { offset, value });
    }
}
