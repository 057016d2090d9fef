//! Port I/O, the TSC, and leaving QEMU through isa-debug-exit.

use x86_64::instructions::port::Port;

/// How the image was booted (for the first console line).
pub const BOOT: &str = "PVH";
/// Guest-physical start of RAM (the RAM file's offset 0).
pub const RAM_BASE: u64 = 0;
/// Where a BAR goes when firmware left it unassigned (qboot): inside the
/// q35 PCI hole, above guest RAM, below the IOAPIC/LAPIC.
pub const BAR_WINDOW: (u64, u64) = (0xe000_0000, 0xfec0_0000);

/// Writes a byte to an I/O port.
pub fn outb(port: u16, v: u8) {
    // SAFETY: the ports used by this image (COM1/COM2, PIT, PCI config,
    // isa-debug-exit) have no memory-safety effects.
    unsafe { Port::<u8>::new(port).write(v) }
}

/// Reads a byte from an I/O port.
pub fn inb(port: u16) -> u8 {
    // SAFETY: as in `outb`.
    unsafe { Port::<u8>::new(port).read() }
}

/// Writes a dword to an I/O port.
pub fn outl(port: u16, v: u32) {
    // SAFETY: as in `outb`.
    unsafe { Port::<u32>::new(port).write(v) }
}

/// Reads a dword from an I/O port.
pub fn inl(port: u16) -> u32 {
    // SAFETY: as in `outb`.
    unsafe { Port::<u32>::new(port).read() }
}

/// The time-stamp counter.
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no side effects and is always available on x86_64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Raises a CPU exception on purpose (`-append fault`).
pub fn raise_exception() -> ! {
    // SAFETY: UD2 raises #UD on purpose; the IDT handler exits.
    unsafe { core::arch::asm!("ud2", options(noreturn)) }
}

/// Ends the run: QEMU exits with status `(code << 1) | 1`
/// (`irdma_boot::contract`). Halts forever if the device is absent.
pub fn exit(code: u32) -> ! {
    outl(irdma_boot::contract::DEBUG_EXIT_PORT, code);
    loop {
        x86_64::instructions::interrupts::disable();
        x86_64::instructions::hlt();
    }
}
