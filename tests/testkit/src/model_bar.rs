//! Joins the driver to the device model: [`ModelBar`] implements the
//! driver's `Bar` by forwarding every register access to a model `Device`
//! (in-process, strict: each doorbell write is processed before it returns),
//! and [`FakeHalMemory`] is the model's DMA view of host memory, limited to
//! live `FakeHal` allocations and shares (bus address == host virtual
//! address), so a bad address from the driver becomes a model fault instead
//! of a segfault.

use std::sync::{Arc, Mutex};

use irdma_hal::Bar;
use mock_bar::{Config, Counters, Device, DeviceId, Fabric, Fault, Memory};

use crate::FakeHal;

/// A model counter that records something going wrong. Every driver test
/// ends with each of them unchanged since the [`ModelBar`] was made, unless
/// the test declared it with [`ModelBar::expect_counter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCounter {
    /// A device DMA access the memory refused.
    DmaFaults,
    /// A CQE the device could not write (no CQ, full or in-error CQ, fault).
    CqesDropped,
    /// A CEQE lost to a full CEQ or a fault.
    CeqesDropped,
    /// An AEQE lost to a full AEQ, a missing AEQ or a fault.
    AeqesDropped,
    /// A doorbell naming no object, or a malformed PFHMC_PDINV.
    BadDoorbells,
    /// CQPDB pointing past a CQP WQE without the pass's valid bit.
    CqpInvalidWqes,
    /// An SQ/RQ WQE the device refused as malformed.
    InvalidWqes,
    /// A frame a receiver dropped (malformed, bad ICRC, or an address,
    /// QP, P_Key or PSN not matching its QP context).
    WireDrops,
    /// An ATQ tail write the LAN firmware side ignored because the ring was
    /// not usable (disabled, bad length, unaligned base, tail or head out
    /// of range).
    AqBadRing,
}
// Not checked: `work_without_doorbell` (deferred mode). WQEALLOC latches, so
// two posters ringing the same QP number leave no change for the device to
// see; finding that work on a sweep is the transport, not a driver error.

impl ErrorCounter {
    /// Every error counter.
    pub const ALL: [Self; 9] = [
        Self::DmaFaults,
        Self::CqesDropped,
        Self::CeqesDropped,
        Self::AeqesDropped,
        Self::BadDoorbells,
        Self::CqpInvalidWqes,
        Self::InvalidWqes,
        Self::WireDrops,
        Self::AqBadRing,
    ];

    /// Its value in `c`.
    pub fn get(self, c: &Counters) -> u64 {
        match self {
            Self::DmaFaults => c.dma_faults,
            Self::CqesDropped => c.cqes_dropped,
            Self::CeqesDropped => c.ceqes_dropped,
            Self::AeqesDropped => c.aeqes_dropped,
            Self::BadDoorbells => c.bad_doorbells,
            Self::CqpInvalidWqes => c.cqp_invalid_wqes,
            Self::InvalidWqes => c.invalid_wqes,
            Self::WireDrops => c.wire_drops,
            Self::AqBadRing => c.aq_bad_ring,
        }
    }
}

#[derive(Debug)]
struct Check {
    baseline: Counters,
    expected: Vec<ErrorCounter>,
    done: bool,
}

/// The driver's BAR backed by a model device on a [`Fabric`].
///
/// When the last clone of a `ModelBar` is dropped (or at [`ModelBar::finish`])
/// it asserts that no [`ErrorCounter`] of its device moved since it was
/// made, except those the test declared with [`ModelBar::expect_counter`]:
/// a test that ends with a model error it did not ask for fails.
#[derive(Debug)]
pub struct ModelBar {
    fabric: Arc<Fabric>,
    id: DeviceId,
    check: Option<Arc<Mutex<Check>>>,
}

impl Clone for ModelBar {
    fn clone(&self) -> Self {
        Self { fabric: self.fabric.clone(), id: self.id, check: self.check.clone() }
    }
}

impl ModelBar {
    /// A BAR for device `id` of `fabric`.
    pub fn new(fabric: Arc<Fabric>, id: DeviceId) -> Self {
        let baseline = fabric.with(id, |d| d.counters().clone()).unwrap_or_default();
        let check = Check { baseline, expected: Vec::new(), done: false };
        Self { fabric, id, check: Some(Arc::new(Mutex::new(check))) }
    }

    /// A fresh device (config `cfg`, DMA through [`FakeHalMemory`]) on its
    /// own fabric.
    pub fn standalone(cfg: Config) -> Self {
        let fabric = Fabric::new();
        let id = fabric.add(Device::new(cfg, Box::new(FakeHalMemory)));
        Self::new(fabric, id)
    }

    /// Adds another device (DMA through [`FakeHalMemory`]) to this BAR's
    /// fabric and returns a BAR for it: the two can connect QPs.
    pub fn add_peer(&self, cfg: Config) -> Self {
        let id = self.fabric.add(Device::new(cfg, Box::new(FakeHalMemory)));
        Self::new(self.fabric.clone(), id)
    }

    /// The fabric (for stepping and inspection).
    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.fabric
    }

    /// Runs `f` on the model device (inspection, fault injection).
    pub fn with_device<R>(&self, f: impl FnOnce(&mut Device) -> R) -> R {
        self.fabric.with(self.id, f).expect("ModelBar names a device of its fabric")
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Check> {
        let c = self.check.as_ref().expect("ModelBar check present until drop");
        c.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Declares that this test expects `c` to move (an injected fault, a
    /// deliberate overflow): the end-of-test check ignores it. Returns the
    /// BAR for chaining.
    pub fn expect_counter(&self, c: ErrorCounter) -> &Self {
        let mut s = self.state();
        if !s.expected.contains(&c) {
            s.expected.push(c);
        }
        self
    }

    /// The error counters that moved and were not expected: (counter,
    /// increase).
    pub fn unexpected_errors(&self) -> Vec<(ErrorCounter, u64)> {
        let now = self.with_device(|d| d.counters().clone());
        let s = self.state();
        ErrorCounter::ALL
            .iter()
            .filter(|c| !s.expected.contains(c))
            .map(|&c| (c, c.get(&now).saturating_sub(c.get(&s.baseline))))
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    /// The end-of-test check, now: panics (with the model's trace) if an
    /// unexpected error counter moved. Later drops do not check again.
    pub fn finish(&self) {
        if self.state().done {
            return;
        }
        self.state().done = true;
        let bad = self.unexpected_errors();
        if !bad.is_empty() {
            let trace = self.with_device(|d| d.trace_dump());
            let tail: Vec<&str> = trace.lines().rev().take(40).collect();
            panic!(
                "model error counters moved that the test did not expect: {bad:?} \
                 (declare them with ModelBar::expect_counter); last trace events, newest first:\n{}",
                tail.join("\n")
            );
        }
    }
}

impl Drop for ModelBar {
    fn drop(&mut self) {
        let Some(check) = self.check.take() else { return };
        // the last clone checks; never a second panic while unwinding
        let Some(last) = Arc::into_inner(check) else { return };
        let state = last.into_inner().unwrap_or_else(|e| e.into_inner());
        if state.done || std::thread::panicking() {
            return;
        }
        let bar = ModelBar {
            fabric: self.fabric.clone(),
            id: self.id,
            check: Some(Arc::new(Mutex::new(state))),
        };
        bar.finish();
        // `bar` is done now: its own drop finds `done` and returns
    }
}

impl Bar for ModelBar {
    fn read32(&self, offset: usize) -> u32 {
        match u32::try_from(offset) {
            Ok(off) => self.fabric.mmio_read32(self.id, off),
            Err(_) => u32::MAX,
        }
    }

    fn write32(&self, offset: usize, value: u32) {
        if let Ok(off) = u32::try_from(offset) {
            self.fabric.mmio_write32(self.id, off, value);
        }
    }
}

/// Host memory as the model sees it in host tests: only inside live
/// `FakeHal` allocations or shares ([`FakeHal::contains`]), and only through
/// atomic accesses of aligned 8-byte words, the driver's access model for
/// DMA memory (`host_words`; issue #28).
///
/// The model runs synchronously inside the driver's register accesses, so
/// a buffer the driver gave the device stays allocated while the device
/// uses it unless the driver frees memory the device still owns — exactly
/// the bug class these tests look for; such an access is refused here
/// whenever the free happened before the access.
#[derive(Clone, Copy, Debug, Default)]
pub struct FakeHalMemory;

/// Whether a device access of `len` bytes at `pa` has anything to do:
/// `Ok(false)` when it is empty, `Ok(true)` when `[pa, pa + len)` lies inside
/// one live FakeHal allocation or bounce buffer, otherwise the fault.
fn in_fake_hal(pa: u64, len: usize, write: bool) -> Result<bool, Fault> {
    if len == 0 {
        return Ok(false);
    }
    if !FakeHal::contains(pa, len) {
        return Err(Fault { addr: pa, len, write });
    }
    Ok(true)
}

impl Memory for FakeHalMemory {
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), Fault> {
        if !in_fake_hal(pa, buf.len(), false)? {
            return Ok(());
        }
        // SAFETY: `in_fake_hal` (`FakeHal::contains`) proved [pa, pa + len)
        // lies inside one live FakeHal allocation or bounce buffer, whose bus
        // address is its host address; both are page-aligned whole pages, so
        // the aligned words holding those bytes are inside it too. The driver
        // accesses that memory only as aligned 8-byte atomics, as
        // `load_bytes` does (a plain copy here raced the driver's atomics:
        // issue #28); `buf` is a distinct Rust buffer.
        unsafe { crate::host_words::load_bytes(pa as usize, buf) };
        Ok(())
    }

    fn write(&self, pa: u64, data: &[u8]) -> Result<(), Fault> {
        if !in_fake_hal(pa, data.len(), true)? {
            return Ok(());
        }
        // SAFETY: as in `read`: the destination's words are inside a live
        // FakeHal allocation/share (bus address == host address), accessed
        // only as aligned 8-byte atomics, and do not overlap `data`.
        unsafe { crate::host_words::store_bytes(pa as usize, data) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // FakeHal's registry is process-wide and its own unit test counts pages
    // exactly, so tests that allocate live in tests/model_bar.rs.
    #[test]
    fn bar_forwards_to_the_model() {
        let bar = ModelBar::standalone(Config::default());
        assert_eq!(bar.read32(0x0050_BA5C), 0x80, "GLPE_CPUSTATUS0");
        assert_eq!(bar.read32(usize::MAX), u32::MAX);
        bar.write32(0x1000, 5);
        assert_eq!(bar.read32(0x1000), 5);
        bar.with_device(|d| d.faults().removed = true);
        assert_eq!(bar.read32(0x0050_BA5C), u32::MAX, "surprise removal reads all-ones");
    }
}
