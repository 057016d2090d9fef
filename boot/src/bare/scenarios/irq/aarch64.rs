//! The aarch64 interrupt controller of the `irq_*` scenarios: QEMU `virt`'s
//! default GICv2 with its GICv2m MSI frame (spec interrupts.md C.8), the
//! generic virtual timer as the watchdog, and `wfi` as the halt.
//!
//! * Where: the DTB's `intc` node (distributor, CPU interface), its `v2m`
//!   child (the MSI frame) and the `timer` node's virtual-timer PPI; the
//!   C.8 addresses (0x0800_0000, 0x0801_0000, 0x0802_0000; QEMU
//!   hw/arm/virt.c `base_memmap`) and INTID 27 (virt.h
//!   `ARCH_TIMER_VIRT_IRQ` 11 + 16) when the DTB says nothing.
//! * Which SPIs: MSI_TYPER of the frame (Linux irq-gic-v2m.c:
//!   `V2M_MSI_TYPER` at 0x008, base [25:16], count [9:0]; QEMU 7.2 `virt`
//!   reads 0x0050_0040, SPIs 80..143). MSI-X entry `n` writes its data,
//!   INTID base + n, to MSI_SETSPI_NS (frame + 0x040; irq-gic-v2m.c
//!   `V2M_MSI_SETSPI_NS`), and the frame pulses that SPI.
//! * The distributor (GICv2 architecture spec, IHI 0048B, 4.3; C.8 "the
//!   smallest MSI path"), per SPI: pending cleared (GICD_ICPENDR),
//!   priority 0xA0 (GICD_IPRIORITYR), CPU interface 0 (GICD_ITARGETSR: on
//!   a GICv2 an SPI with no target is never forwarded; QEMU's GIC with one
//!   CPU forwarded to CPU 0 even without the write, observed), edge
//!   (GICD_ICFGR), enabled (GICD_ISENABLER); the timer PPI enabled with
//!   the same priority; GICD_CTLR = 1. The CPU interface (4.4): GICC_PMR
//!   0xF0, GICC_CTLR = 1. No security extensions on `virt` without
//!   `secure=on`: everything is Group 0, signalled as IRQ (FIQEn 0).
//! * The halt: the IRQ stays masked (PSTATE.I) while the waiter checks its
//!   flag; `wfi` then sleeps unless an interrupt is pending — WFI wake-up
//!   events include an IRQ whatever PSTATE.I says (Arm ARM, DDI 0487,
//!   "Wait for Interrupt" / "WFI wake-up events"; spec C.8) — so one that
//!   arrived after the check ends the `wfi` at once; `msr daifclr, #2`
//!   then takes it (the vector's `boot_irq` acknowledges, records, ends
//!   it), `msr daifset, #2` masks again. PSTATE.{D,A,I,F} writes by MSR
//!   DAIFSet/DAIFClr need no context synchronisation to affect later
//!   instructions; the `isb` only bounds where the IRQ is taken.

use core::fmt;

use super::super::{Msg, msg};
use super::{TIMER_ENTRY, WATCHDOG_MS};
use crate::bare::start_info::StartInfo;
use crate::bare::{arch, idt, paging};

/// C.8 / hw/arm/virt.c `base_memmap`: VIRT_GIC_DIST, VIRT_GIC_CPU,
/// VIRT_GIC_V2M.
const DEFAULT_DIST: u64 = 0x0800_0000;
const DEFAULT_CPU: u64 = 0x0801_0000;
const DEFAULT_V2M: u64 = 0x0802_0000;
/// include/hw/arm/virt.h ARCH_TIMER_VIRT_IRQ (PPI 11) as an INTID.
const DEFAULT_VIRT_TIMER: u32 = 16 + 11;

/// Distributor registers (IHI 0048B, table 4-1).
const GICD_CTLR: u64 = 0x000;
const GICD_TYPER: u64 = 0x004;
const GICD_ISENABLER: u64 = 0x100;
const GICD_ICPENDR: u64 = 0x280;
const GICD_IPRIORITYR: u64 = 0x400;
const GICD_ITARGETSR: u64 = 0x800;
const GICD_ICFGR: u64 = 0xC00;
/// Peripheral ID2 (IHI 0048B, 4.3.26 / table 4-29): ArchRev [7:4], 1 or
/// 2 on a GICv1/v2 (a GICv3 distributor has it at 0xFFE8).
const GICD_PIDR2: u64 = 0xFE8;
/// CPU interface registers (IHI 0048B, table 4-2).
const GICC_CTLR: u64 = 0x000;
const GICC_PMR: u64 = 0x004;
/// GICv2m frame (Linux irq-gic-v2m.c).
const V2M_MSI_TYPER: u64 = 0x008;
const V2M_MSI_SETSPI_NS: u64 = 0x040;

/// Priority of our interrupts, and the mask that lets them through
/// (lower value = higher priority; C.8).
const PRIORITY: u32 = 0xA0;
const PMR: u32 = 0xF0;
/// CNTV_CTL_EL0: ENABLE [0], IMASK [1] (Arm ARM, DDI 0487, register
/// description "CNTV_CTL_EL0").
const CNTV_ENABLE: u64 = 1;

fn read(addr: u64) -> u32 {
    // SAFETY: `addr` is a 32-bit register of the GIC or the v2m frame, in
    // a GiB the identity map covers as Device memory (checked in `init`);
    // register reads have no memory effects.
    unsafe { core::ptr::read_volatile(addr as *const u32) }
}

fn write(addr: u64, v: u32) {
    // SAFETY: as in `read`; the writes configure the interrupt controller,
    // never memory.
    unsafe { core::ptr::write_volatile(addr as *mut u32, v) }
}

/// Sets byte `id` of a byte-per-INTID register array (IPRIORITYR,
/// ITARGETSR) with a 32-bit read-modify-write.
fn set_byte(base: u64, id: u32, v: u32) {
    let (reg, shift) = (base + u64::from(id & !3), 8 * (id & 3));
    write(reg, read(reg) & !(0xFF << shift) | v << shift);
}

/// The set-up GICv2: where MSI-X entry `n` sends its message.
pub(super) struct Controller {
    dist: u64,
    cpu: u64,
    v2m: u64,
    spis: (u32, u32),
    timer: u32,
    from_dtb: bool,
}

impl Controller {
    /// (address, data) of MSI-X entry `n`: MSI_SETSPI_NS, first SPI + n.
    pub(super) fn message(&self, n: u32) -> (u64, u32) {
        (self.v2m + V2M_MSI_SETSPI_NS, self.spis.0 + n)
    }
}

impl fmt::Display for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "GICv2m MSI_SETSPI_NS {:#x}, SPIs {}..{} (MSI_TYPER); GICD {:#x}, GICC {:#x}; \
             watchdog INTID {} ({})",
            self.v2m + V2M_MSI_SETSPI_NS,
            self.spis.0,
            self.spis.0 + self.spis.1,
            self.dist,
            self.cpu,
            self.timer,
            if self.from_dtb { "DTB" } else { "C.8 defaults" }
        )
    }
}

/// Makes sure `addr` is mapped Device (GiB 0 is, on `virt`).
fn device(addr: u64, what: &str) -> Result<(), Msg> {
    if paging::is_uncached(addr) {
        return Ok(());
    }
    // SAFETY: `addr` is the interrupt controller's register frame (DTB or
    // C.8), device memory no Rust reference points into.
    unsafe { paging::map_uc(addr, 0x1_0000) }
        .map_err(|e| msg(format_args!("map the {what} at {addr:#x}: {e:?}")))
}

/// The GICv2 distributor and CPU interface set up for the first
/// [`contract::IRQ_VECTORS`](irdma_boot::contract::IRQ_VECTORS) SPIs of
/// the v2m frame and the virtual timer's PPI; IRQs stay masked (PSTATE.I)
/// until a halt.
pub(super) fn init(info: Option<&StartInfo>) -> Result<Controller, Msg> {
    // SAFETY: masking IRQs (PSTATE.I) has no memory effects.
    unsafe { core::arch::asm!("msr daifset, #2", options(nostack, nomem)) };
    let g = info.map(|i| i.gic()).unwrap_or_default();
    let from_dtb = g.dist.is_some() && g.cpu.is_some() && g.v2m.is_some();
    let (dist, cpu) = (g.dist.unwrap_or(DEFAULT_DIST), g.cpu.unwrap_or(DEFAULT_CPU));
    let Some(v2m) = g.v2m.or(info.is_none().then_some(DEFAULT_V2M)) else {
        bail!("the DTB's interrupt controller has no v2m MSI frame (gic-version=3: not supported)")
    };
    let timer = g.virt_timer.unwrap_or(DEFAULT_VIRT_TIMER);
    device(dist, "GIC distributor")?;
    device(cpu, "GIC CPU interface")?;
    device(v2m, "GICv2m frame")?;

    let rev = read(dist + GICD_PIDR2) >> 4 & 0xF;
    ensure!(matches!(rev, 1 | 2), "GICD_PIDR2 ArchRev {rev}: not a GICv2 distributor");
    let lines = 32 * ((read(dist + GICD_TYPER) & 0x1F) + 1);
    let typer = read(v2m + V2M_MSI_TYPER);
    let (base, count) = (typer >> 16 & 0x3FF, typer & 0x3FF);
    let want = irdma_boot::contract::IRQ_VECTORS;
    ensure!(
        base >= 32 && count >= want && base + count <= lines.min(1020),
        "MSI_TYPER {typer:#x}: SPIs {base}+{count}, want {want} within 32..{lines}"
    );
    ensure!((16..32).contains(&timer), "virtual timer INTID {timer} is not a PPI");

    for id in base..base + want {
        let (word, bit) = (u64::from(id / 32) * 4, 1 << (id % 32));
        write(dist + GICD_ICPENDR + word, bit);
        set_byte(dist + GICD_IPRIORITYR, id, PRIORITY);
        set_byte(dist + GICD_ITARGETSR, id, 0x01);
        let cfg = dist + GICD_ICFGR + u64::from(id / 16) * 4;
        write(cfg, read(cfg) | 2 << (2 * (id % 16)));
        write(dist + GICD_ISENABLER + word, bit);
    }
    set_byte(dist + GICD_IPRIORITYR, timer, PRIORITY);
    write(dist + GICD_ISENABLER, 1 << timer);
    write(dist + GICD_CTLR, 1);
    write(cpu + GICC_PMR, PMR);
    write(cpu + GICC_CTLR, 1);
    idt::set_gic(cpu, base, timer, TIMER_ENTRY);
    Ok(Controller { dist, cpu, v2m, spis: (base, count), timer, from_dtb })
}

/// One halt (IRQs masked on entry and exit): arms the watchdog, `wfi`,
/// takes what woke it, disarms. Returns the counter cycles halted.
pub(super) fn halt() -> u64 {
    let ticks = arch::counter_hz() / 1000 * u64::from(WATCHDOG_MS);
    let h0 = arch::rdtsc();
    // SAFETY: the virtual timer and PSTATE.I are this core's own state;
    // the IRQ the unmask lets in runs `boot_irq`, which saves and restores
    // every register it touches. `wfi` only waits.
    unsafe {
        core::arch::asm!(
            "msr cntv_tval_el0, {t}",
            "msr cntv_ctl_el0, {en}",
            "isb",
            "dsb sy",
            "wfi",
            "msr daifclr, #2",
            "isb",
            "msr daifset, #2",
            "msr cntv_ctl_el0, xzr",
            "isb",
            t = in(reg) ticks,
            en = in(reg) CNTV_ENABLE,
            options(nostack)
        )
    };
    arch::rdtsc().wrapping_sub(h0)
}

/// Interrupts with an INTID that is neither an MSI-X entry nor the timer.
pub(super) fn stray() -> u64 {
    idt::stray()
}
