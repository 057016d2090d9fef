//! Joins the driver to the device model: [`ModelBar`] implements the
//! driver's `Bar` by forwarding every register access to a model `Device`
//! (in-process, strict: each doorbell write is processed before it returns),
//! and [`FakeHalMemory`] is the model's DMA view of host memory, limited to
//! live `FakeHal` allocations and shares (bus address == host virtual
//! address), so a bad address from the driver becomes a model fault instead
//! of a segfault.

use std::sync::Arc;

use irdma_hal::Bar;
use mock_bar::{Config, Device, DeviceId, Fabric, Fault, Memory};

use crate::FakeHal;

/// The driver's BAR backed by a model device on a [`Fabric`].
#[derive(Clone, Debug)]
pub struct ModelBar {
    fabric: Arc<Fabric>,
    id: DeviceId,
}

impl ModelBar {
    /// A BAR for device `id` of `fabric`.
    pub fn new(fabric: Arc<Fabric>, id: DeviceId) -> Self {
        Self { fabric, id }
    }

    /// A fresh device (config `cfg`, DMA through [`FakeHalMemory`]) on its
    /// own fabric.
    pub fn standalone(cfg: Config) -> Self {
        let fabric = Fabric::new();
        let id = fabric.add(Device::new(cfg, Box::new(FakeHalMemory)));
        Self { fabric, id }
    }

    /// Adds another device (DMA through [`FakeHalMemory`]) to this BAR's
    /// fabric and returns a BAR for it: the two can connect QPs.
    pub fn add_peer(&self, cfg: Config) -> Self {
        let id = self.fabric.add(Device::new(cfg, Box::new(FakeHalMemory)));
        Self { fabric: self.fabric.clone(), id }
    }

    /// The fabric (for stepping and inspection).
    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.fabric
    }

    /// Runs `f` on the model device (inspection, fault injection).
    pub fn with_device<R>(&self, f: impl FnOnce(&mut Device) -> R) -> R {
        self.fabric.with(self.id, f).expect("ModelBar names a device of its fabric")
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
/// `FakeHal` allocations or shares ([`FakeHal::contains`]).
///
/// The model runs synchronously inside the driver's register accesses, so
/// a buffer the driver gave the device stays allocated while the device
/// uses it unless the driver frees memory the device still owns — exactly
/// the bug class these tests look for; such an access is refused here
/// whenever the free happened before the access.
#[derive(Clone, Copy, Debug, Default)]
pub struct FakeHalMemory;

impl Memory for FakeHalMemory {
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), Fault> {
        let fault = Fault { addr: pa, len: buf.len(), write: false };
        if buf.is_empty() {
            return Ok(());
        }
        if !FakeHal::contains(pa, buf.len()) {
            return Err(fault);
        }
        // SAFETY: `contains` proved [pa, pa + len) lies inside one live
        // FakeHal allocation or bounce buffer, whose bus address is its host
        // address; `buf` is a distinct Rust buffer, so the ranges do not
        // overlap. Raw-pointer copy: no reference into DMA memory is formed.
        unsafe {
            std::ptr::copy_nonoverlapping(pa as usize as *const u8, buf.as_mut_ptr(), buf.len())
        };
        Ok(())
    }

    fn write(&self, pa: u64, data: &[u8]) -> Result<(), Fault> {
        let fault = Fault { addr: pa, len: data.len(), write: true };
        if data.is_empty() {
            return Ok(());
        }
        if !FakeHal::contains(pa, data.len()) {
            return Err(fault);
        }
        // SAFETY: as in `read`: the destination range is inside a live
        // FakeHal allocation/share (bus address == host address) and does
        // not overlap `data`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), pa as usize as *mut u8, data.len()) };
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
