//! PCI configuration mechanism #1 (ports 0xCF8/0xCFC) behind
//! `irdma_hal::pci::ConfigSpace`, and a bus scan.

use irdma_hal::pci::{ConfigSpace, Identity};

use super::arch::{inl, outl};

const CONFIG_ADDRESS: u16 = 0xcf8;
const CONFIG_DATA: u16 = 0xcfc;

/// One function's configuration space through port I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortCs {
    /// Bus number.
    pub bus: u8,
    /// Device number (0..32).
    pub dev: u8,
    /// Function number (0..8).
    pub func: u8,
}

/// The configuration-space handle of this architecture.
pub type Cs = PortCs;

impl PortCs {
    fn address(&self, offset: u16) -> u32 {
        0x8000_0000
            | (self.bus as u32) << 16
            | ((self.dev & 0x1f) as u32) << 11
            | ((self.func & 7) as u32) << 8
            | (offset & 0xfc) as u32
    }
}

impl ConfigSpace for PortCs {
    fn read32(&self, offset: u16) -> u32 {
        outl(CONFIG_ADDRESS, self.address(offset));
        inl(CONFIG_DATA)
    }
    fn write32(&self, offset: u16, value: u32) {
        outl(CONFIG_ADDRESS, self.address(offset));
        outl(CONFIG_DATA, value);
    }
}

impl core::fmt::Display for PortCs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:02x}:{:02x}.{}", self.bus, self.dev, self.func)
    }
}

/// Calls `found` for every function that answers, in bus order.
pub fn scan(found: impl FnMut(PortCs, Identity)) {
    super::pci_scan::scan(255, |bus, dev, func| PortCs { bus, dev, func }, found);
}
