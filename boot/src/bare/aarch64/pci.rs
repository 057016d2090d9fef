//! PCIe configuration space through QEMU `virt`'s ECAM (memory-mapped, 4 KiB
//! per function) behind `irdma_hal::pci::ConfigSpace`, and a bus scan.
//!
//! The ECAM base comes from the DTB's `pci-host-ecam-generic` node when the
//! loader passed one; otherwise QEMU ≥ 5.0's default for `-M virt` with
//! `highmem-ecam` (0x40_1000_0000, 256 buses). The low ECAM (0x3f00_0000,
//! 16 buses) is what `highmem=off` machines use. Both lie in GiBs the entry
//! stub maps Device-nGnRE.

use core::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use irdma_hal::pci::{ConfigSpace, Identity};

/// Default high ECAM of `-M virt` (QEMU 7.2's DTB: /pcie@10000000 reg).
pub const DEFAULT_ECAM: (u64, u64) = (0x40_1000_0000, 0x1000_0000);

static ECAM_BASE: AtomicU64 = AtomicU64::new(DEFAULT_ECAM.0);
static LAST_BUS: AtomicU8 = AtomicU8::new(255);

/// Uses the ECAM at `base` of `size` bytes (1 MiB per bus); refuses a
/// range the identity map does not cover as Device memory.
pub fn set_ecam(base: u64, size: u64) -> bool {
    let buses = size >> 20;
    let ok = buses > 0
        && super::paging::is_uncached(base)
        && super::paging::is_uncached(base + size - 1);
    if ok {
        ECAM_BASE.store(base, Ordering::Relaxed);
        LAST_BUS.store((buses.min(256) - 1) as u8, Ordering::Relaxed);
    }
    ok
}

/// The ECAM in use (base, last bus).
pub fn ecam() -> (u64, u8) {
    (ECAM_BASE.load(Ordering::Relaxed), LAST_BUS.load(Ordering::Relaxed))
}

/// One function's configuration space in the ECAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EcamCs {
    /// Bus number.
    pub bus: u8,
    /// Device number (0..32).
    pub dev: u8,
    /// Function number (0..8).
    pub func: u8,
}

/// The configuration-space handle of this architecture.
pub type Cs = EcamCs;

impl EcamCs {
    /// The dword's address in the ECAM, `None` for a bus past the ECAM's
    /// last bus (which would address whatever lies above the ECAM).
    fn address(&self, offset: u16) -> Option<*mut u32> {
        if self.bus > LAST_BUS.load(Ordering::Relaxed) {
            return None;
        }
        let a = ECAM_BASE.load(Ordering::Relaxed)
            + ((self.bus as u64) << 20
                | ((self.dev & 0x1f) as u64) << 15
                | ((self.func & 7) as u64) << 12
                | (offset & 0xffc) as u64);
        Some(a as *mut u32)
    }
}

impl ConfigSpace for EcamCs {
    /// All-ones (no function) for a bus the ECAM does not cover.
    fn read32(&self, offset: u16) -> u32 {
        match self.address(offset) {
            // SAFETY: the address is a dword inside this function's 4 KiB of
            // the ECAM (the bus is within the range `set_ecam` accepted),
            // which the identity map covers as Device-nGnRE; config reads
            // have no memory-safety effects.
            Some(p) => unsafe { core::ptr::read_volatile(p) },
            None => u32::MAX,
        }
    }
    /// Dropped for a bus the ECAM does not cover.
    fn write32(&self, offset: u16, value: u32) {
        if let Some(p) = self.address(offset) {
            // SAFETY: as in `read32`; config writes change device state
            // (BARs, COMMAND) that the callers own, never memory.
            unsafe { core::ptr::write_volatile(p, value) }
        }
    }
}

impl core::fmt::Display for EcamCs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:02x}:{:02x}.{}", self.bus, self.dev, self.func)
    }
}

/// Calls `found` for every function that answers, in bus order.
pub fn scan(found: impl FnMut(EcamCs, Identity)) {
    super::pci_scan::scan(
        LAST_BUS.load(Ordering::Relaxed),
        |bus, dev, func| EcamCs { bus, dev, func },
        found,
    );
}
