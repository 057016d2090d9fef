//! Memory the device may still own, kept instead of freed.
//!
//! The policy (issue #12 item 2; the crate docs' "Safety contract"): DMA
//! memory the device was told about is freed only after the device confirmed
//! it let go (a successful destroy, dealloc or SD clear), or after a function
//! reset. When neither happened — a create or destroy timed out, a destroy
//! was refused inside `Drop`, teardown found the CQP dead — the buffer is
//! moved here: kept alive, counted, reported by
//! [`Device::footprint`](super::Device::footprint), and the device is marked
//! as needing a reset. Ids the device may still use (QP, CQ, STag indexes,
//! PBLEs) are likewise not returned to their tables; they are counted here.
//!
//! The quarantine never frees. When the [`Device`](super::Device) goes away
//! with buffers in it they are leaked on purpose (`core::mem::forget`), since
//! only a function reset makes them safe to reuse, and the driver cannot see
//! one complete. A caller that did reset the function can get them freed
//! with the `unsafe` [`Device::close_after_reset`](super::Device::close_after_reset).

use irdma_hal::{Dma, Hal};

/// Buffers the quarantine holds; beyond that they are leaked at once (still
/// counted).
pub const QUARANTINE_SLOTS: usize = 64;

/// What is quarantined, for [`DeviceFootprint`](super::DeviceFootprint).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Quarantined {
    /// DMA bytes kept (or leaked) because the device may still use them.
    pub bytes: u64,
    /// How many buffers.
    pub buffers: u32,
    /// Of those, leaked at once because the quarantine was full.
    pub overflowed: u32,
    /// Ids (QP, CQ, STag indexes, PBLEs) not returned to their tables.
    pub ids: u32,
}

pub(crate) struct Quarantine<H: Hal> {
    held: heapless::Vec<Dma<H>, QUARANTINE_SLOTS>,
    stats: Quarantined,
}

impl<H: Hal> Quarantine<H> {
    pub const fn new() -> Self {
        Quarantine { held: heapless::Vec::new(), stats: Quarantined::default_const() }
    }

    /// Keeps `d` (or, when full, leaks it); counts it.
    #[inline(never)] // cold, called from many error paths (code size)
    pub fn put(&mut self, d: Dma<H>) {
        self.stats.bytes = self.stats.bytes.saturating_add(d.len() as u64);
        self.stats.buffers = self.stats.buffers.saturating_add(1);
        if let Err(d) = self.held.push(d) {
            self.stats.overflowed = self.stats.overflowed.saturating_add(1);
            core::mem::forget(d);
        }
    }

    /// Counts memory leaked elsewhere (e.g. inside the CQP engine) because
    /// the device may still use it.
    pub fn count_leaked(&mut self, bytes: u64, buffers: u32) {
        self.stats.bytes = self.stats.bytes.saturating_add(bytes);
        self.stats.buffers = self.stats.buffers.saturating_add(buffers);
        self.stats.overflowed = self.stats.overflowed.saturating_add(buffers);
    }

    /// Counts `n` ids that stay allocated.
    pub fn count_ids(&mut self, n: u32) {
        self.stats.ids = self.stats.ids.saturating_add(n);
    }

    pub fn stats(&self) -> Quarantined {
        self.stats
    }

    pub fn is_empty(&self) -> bool {
        self.stats == Quarantined::default()
    }

    /// Frees what is held (after a function reset only).
    pub fn release_after_reset(&mut self) {
        self.held.clear();
        self.stats = Quarantined::default();
    }
}

impl Quarantined {
    const fn default_const() -> Self {
        Quarantined { bytes: 0, buffers: 0, overflowed: 0, ids: 0 }
    }
}

impl<H: Hal> Drop for Quarantine<H> {
    fn drop(&mut self) {
        // Never free: the device may still read or write these pages.
        while let Some(d) = self.held.pop() {
            core::mem::forget(d);
        }
    }
}
