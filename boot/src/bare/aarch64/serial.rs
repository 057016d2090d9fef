//! PL011 text console of QEMU's `virt` machine (0x0900_0000, polled).
//! QEMU's PL011 transmits without being programmed.

/// PL011 base (DTB: /pl011@9000000), mapped Device-nGnRE by the entry stub.
pub const COM1: usize = 0x0900_0000;
const DR: usize = 0x00;
const FR: usize = 0x18;
/// FR: transmit FIFO full.
const FR_TXFF: u32 = 1 << 5;

/// Nothing to program on QEMU (kept for the shared `kmain`).
pub fn init(_base: usize) {}

/// Writes bytes, waiting (bounded) while the transmit FIFO is full.
pub fn write_bytes(base: usize, bytes: &[u8]) {
    for &b in bytes {
        let mut spins = 0u32;
        // SAFETY: `base` is the PL011, identity-mapped as Device memory;
        // its FR and DR registers have no memory-safety effects.
        unsafe {
            while core::ptr::read_volatile((base + FR) as *const u32) & FR_TXFF != 0
                && spins < 100_000
            {
                spins += 1;
            }
            core::ptr::write_volatile((base + DR) as *mut u32, b as u32);
        }
    }
}

pub(crate) use super::console::println;
