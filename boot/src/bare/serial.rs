//! 16550 UART text console on COM1 (polled, 115200 8N1).

use super::arch::{inb, outb};

/// COM1 base port.
pub const COM1: u16 = 0x3f8;
/// COM2 base port (defmt frames with the `defmt` feature).
#[cfg_attr(not(feature = "defmt"), allow(dead_code))]
pub const COM2: u16 = 0x2f8;

/// Programs a UART: 115200 baud, 8N1, FIFOs on, no interrupts.
pub fn init(base: u16) {
    outb(base + 1, 0x00); // IER: no interrupts
    outb(base + 3, 0x80); // LCR: DLAB
    outb(base, 0x01); // divisor 1 = 115200
    outb(base + 1, 0x00);
    outb(base + 3, 0x03); // 8N1
    outb(base + 2, 0xc7); // FIFO on, cleared
    outb(base + 4, 0x03); // DTR | RTS
}

/// Writes bytes, waiting for the transmitter (bounded, so a missing UART
/// cannot hang the image).
pub fn write_bytes(base: u16, bytes: &[u8]) {
    for &b in bytes {
        let mut spins = 0u32;
        while inb(base + 5) & 0x20 == 0 && spins < 100_000 {
            spins += 1;
        }
        outb(base, b);
    }
}

pub(crate) use super::console::println;
