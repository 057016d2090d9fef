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

/// `core::fmt` sink for the PL011 that turns `\n` into `\r\n`.
pub struct Console;

impl core::fmt::Write for Console {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for part in s.split_inclusive('\n') {
            match part.strip_suffix('\n') {
                Some(line) => {
                    write_bytes(COM1, line.as_bytes());
                    write_bytes(COM1, b"\r\n");
                }
                None => write_bytes(COM1, part.as_bytes()),
            }
        }
        Ok(())
    }
}

/// Prints to the PL011.
macro_rules! print {
    ($($arg:tt)*) => {{
        let _ = core::fmt::Write::write_fmt(&mut $crate::bare::serial::Console, format_args!($($arg)*));
    }};
}

/// Prints a line to the PL011.
macro_rules! println {
    () => { $crate::bare::serial::print!("\n") };
    ($($arg:tt)*) => {{
        $crate::bare::serial::print!($($arg)*);
        $crate::bare::serial::print!("\n");
    }};
}

pub(crate) use {print, println};
