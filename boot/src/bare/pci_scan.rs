//! The bus scan both architectures' `pci` modules run over their own
//! configuration-space mechanism (port I/O on x86_64, the ECAM on aarch64).

use irdma_hal::pci::{self, ConfigSpace, Identity};

/// Calls `found` for every function of buses `0..=last_bus` that answers,
/// in bus order; `cs(bus, dev, func)` is that function's configuration
/// space. Functions 1..8 are probed only on a multi-function device
/// (HEADER_TYPE bit 7 of function 0).
pub fn scan<C: ConfigSpace>(
    last_bus: u8,
    cs: impl Fn(u8, u8, u8) -> C,
    mut found: impl FnMut(C, Identity),
) {
    for bus in 0..=last_bus {
        for dev in 0..32u8 {
            let f0 = cs(bus, dev, 0);
            let Some(id) = pci::identity(&f0) else { continue };
            let header = (f0.read32(pci::cfg::HEADER_TYPE) >> 16) as u8;
            found(f0, id);
            if header & 0x80 != 0 {
                for func in 1..8u8 {
                    let f = cs(bus, dev, func);
                    if let Some(id) = pci::identity(&f) {
                        found(f, id);
                    }
                }
            }
        }
    }
}
