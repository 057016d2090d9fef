//! The x86_64 interrupt controller of the `irq_*` scenarios (spec
//! interrupts.md C.2–C.6): the legacy 8259s off, the xAPIC on, MSI
//! messages to the boot CPU's APIC, the local-APIC timer as the watchdog,
//! and `sti; hlt` as the halt.

use core::fmt;

use x86_64::instructions::interrupts;
use x86_64::registers::model_specific::Msr;

use super::super::{Msg, msg};
use super::{TIMER_ENTRY, WATCHDOG_MS};
use crate::bare::idt::{self, IRQ_BASE, SPURIOUS};
use crate::bare::start_info::StartInfo;
use crate::bare::{arch, paging};

/// IA32_APIC_BASE (SDM; spec C.3): global enable [11], base [51:12].
const IA32_APIC_BASE: u32 = 0x1B;
const APIC_ENABLE: u64 = 1 << 11;
/// xAPIC register offsets (spec C.3; SDM "Local APIC").
const APIC_ID: u64 = 0x20;
const APIC_TPR: u64 = 0x80;
const APIC_EOI: u64 = 0xB0;
const APIC_SVR: u64 = 0xF0;
const APIC_LVT_TIMER: u64 = 0x320;
const APIC_TIMER_INIT: u64 = 0x380;
const APIC_TIMER_DIV: u64 = 0x3E0;
/// QEMU's local-APIC timer counts at 1 GHz (hw/intc/apic_common.c,
/// APIC bus cycle 1 ns) with divide-by-1.
const APIC_TIMER_HZ: u64 = 1_000_000_000;

static APIC: spin::Once<u64> = spin::Once::new();

fn apic_write(reg: u64, v: u32) {
    if let Some(base) = APIC.get() {
        // SAFETY: `init` mapped the xAPIC page uncached before setting
        // APIC; `reg` is one of the 32-bit registers above.
        unsafe { core::ptr::write_volatile((base + reg) as *mut u32, v) };
    }
}

fn apic_read(reg: u64) -> u32 {
    match APIC.get() {
        // SAFETY: as in `apic_write`.
        Some(base) => unsafe { core::ptr::read_volatile((base + reg) as *const u32) },
        None => 0,
    }
}

/// Remaps the 8259s away from the exception vectors, then masks them
/// (spec C.4).
fn pic_off() {
    for (port, v) in [
        (0x20, 0x11),
        (0xA0, 0x11),
        (0x21, 0x20),
        (0xA1, 0x28),
        (0x21, 0x04),
        (0xA1, 0x02),
        (0x21, 0x01),
        (0xA1, 0x01),
        (0x21, 0xFF),
        (0xA1, 0xFF),
    ] {
        arch::outb(port, v);
    }
}

/// The set-up local APIC: where MSI-X entry `n` sends its message.
pub(super) struct Controller {
    id: u32,
    apic: u64,
}

impl Controller {
    /// (address, data) of MSI-X entry `n` (spec C.2: physical destination
    /// APIC `id`, fixed delivery, edge, vector [`IRQ_BASE`] + n).
    pub(super) fn message(&self, n: u32) -> (u64, u32) {
        (u64::from(0xFEE0_0000 | self.id << 12), u32::from(IRQ_BASE) + n)
    }
}

impl fmt::Display for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "APIC {} vectors {IRQ_BASE:#x}..; 8259 masked, xAPIC {:#x} on",
            self.id, self.apic
        )
    }
}

/// The 8259s off, the xAPIC on with the watchdog timer masked.
pub(super) fn init(_info: Option<&StartInfo>) -> Result<Controller, Msg> {
    pic_off();
    let msr = Msr::new(IA32_APIC_BASE);
    // SAFETY: reading IA32_APIC_BASE has no side effects.
    let base = unsafe { msr.read() };
    if base & APIC_ENABLE == 0 {
        let mut m = Msr::new(IA32_APIC_BASE);
        // SAFETY: sets the global enable, keeping the base (SDM).
        unsafe { m.write(base | APIC_ENABLE) };
    }
    let apic = base & 0x000F_FFFF_FFFF_F000;
    // SAFETY: the xAPIC page is device memory (0xFEE0_0000), outside
    // the image and the DMA pool; nothing references it.
    unsafe { paging::map_uc(apic, 4096) }.map_err(|e| msg(format_args!("map xAPIC: {e:?}")))?;
    APIC.call_once(|| apic);
    apic_write(APIC_TPR, 0);
    apic_write(APIC_SVR, 0x100 | u32::from(SPURIOUS));
    // The watchdog: one-shot, masked until a halt arms it.
    apic_write(APIC_TIMER_DIV, 0xB);
    apic_write(APIC_LVT_TIMER, 1 << 16 | (u32::from(IRQ_BASE) + TIMER_ENTRY));
    idt::set_eoi_register(apic + APIC_EOI);
    let id = apic_read(APIC_ID) >> 24;
    Ok(Controller { id, apic })
}

/// One halt (IF = 0 on entry and exit): arms the watchdog, `sti; hlt`
/// (atomic: an interrupt after the caller's check still ends the halt;
/// C.6), `cli`, disarms. Returns the TSC cycles halted.
pub(super) fn halt() -> u64 {
    apic_write(APIC_LVT_TIMER, u32::from(IRQ_BASE) + TIMER_ENTRY);
    apic_write(APIC_TIMER_INIT, (APIC_TIMER_HZ / 1000) as u32 * WATCHDOG_MS);
    let h0 = arch::rdtsc();
    interrupts::enable_and_hlt();
    let h1 = arch::rdtsc();
    interrupts::disable();
    apic_write(APIC_TIMER_INIT, 0);
    apic_write(APIC_LVT_TIMER, 1 << 16 | (u32::from(IRQ_BASE) + TIMER_ENTRY));
    h1.wrapping_sub(h0)
}

/// Interrupts on a vector that is neither an MSI-X entry nor the timer:
/// none reach code (their IDT gates are not present: #NP, fatal).
pub(super) fn stray() -> u64 {
    0
}
