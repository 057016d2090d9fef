//! Completion by interrupt in QEMU (issue #31): the model process raises
//! MSI-X interrupts through QEMU's `ivshmem-doorbell` (it is the ivshmem
//! server; `cargo xtask qemu --irq`, on x86_64 and aarch64), the core
//! halts in `Cq::wait` until one arrives.
//!
//! Guest side (spec interrupts.md part C; the interrupt controller in
//! `x86` / `aarch64` below this module):
//!
//! * `irq_setup`, before the device is probed: the interrupt controller
//!   set up (x86_64: the legacy 8259s remapped to 0x20/0x28 and masked,
//!   C.4; the xAPIC enabled, SVR = 0x1FF, TPR 0, C.3, its page mapped
//!   uncached. aarch64 `virt`: the GICv2 distributor and CPU interface,
//!   the GICv2m frame's SPIs, C.8); MSI-X on the function (C.1): Memory +
//!   Bus Master, the table's BAR assigned if firmware left it unassigned
//!   (always on aarch64), function mask + enable, table entry `n` (device
//!   vector `n`) = the controller's message for entry `n` (x86_64:
//!   0xFEE0_0000 | APIC ID << 12, data [`idt::IRQ_BASE`] + n, fixed,
//!   edge, C.2; aarch64: MSI_SETSPI_NS of the v2m frame, data = its first
//!   SPI + n), unmasked, then the function mask cleared. The driver is
//!   then probed with `ProbeOptions::interrupts` (AEQ on entry
//!   [`contract::IRQ_FIRST`], CEQ 0 on the next). Interrupts stay masked
//!   (x86_64 IF = 0, aarch64 PSTATE.I = 1) except inside the halt, so one
//!   raised during the polled scenarios waits in the APIC / GIC until the
//!   first halt (the driver re-enables its vector then).
//! * The halt given to `Cq::wait`: with interrupts masked, run the
//!   driver's handler for every entry whose interrupt was taken
//!   (`idt::take_pending`; the handler runs here, not in the interrupt,
//!   see `idt`), return if woken, else halt until an interrupt with no
//!   window for a lost wake-up (x86_64 `sti; hlt`, C.6; aarch64 `wfi`
//!   with the IRQ still masked, then unmask to take it, C.8) and mask
//!   again. A one-shot timer (x86_64 the local-APIC timer, aarch64 the
//!   generic virtual timer; both report as entry [`TIMER_ENTRY`]) bounds
//!   each halt to [`WATCHDOG_MS`], so a lost interrupt shows as a failure
//!   after [`WAIT`] instead of a hung guest.
//! * The model completes the work while the core is halted: before each
//!   post the guest asks it to pause ([`contract::FAULT_PAUSE`]), so the
//!   post, the arm and the halt all happen before the device runs.
//!
//! Without MSI-X (the default `ivshmem-plain` run) every line here skips.

use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;

use irdma::lan::MsixInfo;
use irdma_boot::contract;
use irdma_hal::MmioBar;

use super::{Ctx, Msg, Outcome, Runner, msg};
use crate::bare::scenarios::verbs::Dev;
use crate::bare::start_info::StartInfo;

#[cfg(target_arch = "aarch64")]
#[path = "irq/aarch64.rs"]
mod plat;
#[cfg(target_arch = "x86_64")]
#[path = "irq/x86.rs"]
mod plat;

/// The scenario lines after `device_probe` (`irq_setup` runs before it).
pub const NAMES: [&str; 2] = ["irq_write_send", "irq_idle"];

static ON: AtomicBool = AtomicBool::new(false);

/// Whether `irq_setup` enabled MSI-X: the device is probed with interrupts.
pub fn enabled() -> bool {
    ON.load(Ordering::Acquire)
}

/// The vectors the LAN side hands the RDMA layer (none without MSI-X).
pub fn msix() -> MsixInfo {
    if enabled() {
        MsixInfo { first: contract::IRQ_FIRST, count: 2 }
    } else {
        MsixInfo { first: 0, count: 0 }
    }
}

/// Longest a `Cq::wait` may take before the scenario fails.
const WAIT: Duration = Duration::from_secs(2);
/// Longest single halt (the watchdog timer).
const WATCHDOG_MS: u32 = 50;
/// The `idt` entry the watchdog timer reports as (not a device vector:
/// [`contract::IRQ_VECTORS`] entries are 0..3).
const TIMER_ENTRY: u32 = 3;
/// How long the model pauses before each post (µs).
const PAUSE_US: u32 = 20_000;
/// WRITEs of `irq_idle`.
const IDLE_ROUNDS: u32 = 5;

/// `irq_setup` (before the probe).
pub fn setup(r: &mut Runner, ctx: &Ctx, info: Option<&StartInfo>) {
    r.run("irq_setup", || common::setup(ctx, info));
}

/// Skips every line of [`NAMES`].
pub fn skip_all(r: &mut Runner, why: &Msg) {
    for n in NAMES {
        r.run(n, || Ok(Outcome::Skip(why.clone())));
    }
}

/// The interrupt scenarios on the probed device.
pub fn run(r: &mut Runner, dev: &Dev<'_>, bar: &MmioBar) {
    if !enabled() || dev.irq_vectors().is_none() {
        let why = if enabled() {
            msg(format_args!("the device was probed without interrupts"))
        } else {
            msg(format_args!("no MSI-X (ivshmem-plain): run `cargo xtask qemu --irq`"))
        };
        return skip_all(r, &why);
    }
    r.run(NAMES[0], || common::write_send(dev, bar).map(|()| Outcome::Pass));
    r.run(NAMES[1], || common::idle(dev, bar).map(|()| Outcome::Pass));
}

/// What both architectures share: MSI-X on the function, the waits and the
/// scenarios; the interrupt controller and the halt come from `plat`.
mod common {
    use core::sync::atomic::Ordering;

    use irdma::wr::{RecvWr, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode};
    use irdma_boot::contract::{self, MAILBOX};
    use irdma_hal::pci::{self, ConfigSpace};
    use irdma_hal::{Bar, Hal, MmioBar};

    use super::super::bringup::{model_counters, request_fault};
    use super::super::verbs::{
        Buf, Dev, EMPTY_WC, Map, Objs, TCq, TMr, buf, check, expect, fill, objects, reg_buf,
    };
    use super::super::{Ctx, Kind, Msg, Outcome, msg};
    use super::{IDLE_ROUNDS, ON, PAUSE_US, TIMER_ENTRY, WAIT, plat};
    use crate::bare::hal::BootHal;
    use crate::bare::idt;
    use crate::bare::serial::println;
    use crate::bare::start_info::StartInfo;
    use crate::bare::{arch, clock, paging};

    /// MSI-X capability ID (PCI §6.8.2).
    const CAP_MSIX: u8 = 0x11;
    /// Message Control: enable [15], function mask [14].
    const MC_ENABLE: u16 = 1 << 15;
    const MC_MASK: u16 = 1 << 14;

    fn find_cap(cs: &impl ConfigSpace, id: u8) -> Option<u16> {
        // Status [4]: capability list present; pointer at 0x34.
        if cs.read32(0x04) >> 16 & 0x10 == 0 {
            return None;
        }
        let mut at = (cs.read32(0x34) & 0xFC) as u16;
        for _ in 0..48 {
            if at < 0x40 {
                return None;
            }
            let w = cs.read32(at);
            if w as u8 == id {
                return Some(at);
            }
            at = (w >> 8 & 0xFC) as u16;
        }
        None
    }

    /// The MSI-X table's BAR `bir`: its address and whether this call
    /// assigned it — in `arch::BAR_WINDOW`, above the device's register BAR
    /// (`used`), when firmware left it unassigned (aarch64 `virt` has no
    /// firmware that assigns BARs; SeaBIOS does on x86_64).
    fn table_bar(cs: &impl ConfigSpace, bir: u8, used: &pci::BarInfo) -> Result<(u64, bool), Msg> {
        let raw = u64::from(cs.read32(pci::cfg::BAR0 + 4 * u16::from(bir)) & !0xF);
        if raw != 0 {
            return Ok((raw, false));
        }
        let bar = pci::probe_bar(cs, bir).map_err(|e| msg(format_args!("BAR{bir}: {e:?}")))?;
        let (lo, hi) = arch::BAR_WINDOW;
        let used_end = used.addr.saturating_add(used.size);
        let start = if used.addr >= lo && used_end <= hi { used_end } else { lo };
        let addr = start.checked_next_multiple_of(bar.size).unwrap_or(u64::MAX);
        let end = addr.checked_add(bar.size);
        ensure!(
            end.is_some_and(|e| e <= hi && (e <= used.addr || addr >= used_end)),
            "MSI-X BAR{bir} unassigned and {:#x} bytes do not fit the window",
            bar.size
        );
        let command = cs.read16(pci::cfg::COMMAND);
        cs.write16(pci::cfg::COMMAND, command & !pci::cfg::CMD_MEM);
        pci::set_bar_addr(cs, bir, &bar, addr);
        cs.write16(pci::cfg::COMMAND, command);
        let got = pci::probe_bar(cs, bir).map_err(|e| msg(format_args!("BAR{bir}: {e:?}")))?;
        ensure!(got.addr == addr, "MSI-X BAR{bir}: assigned {addr:#x}, reads back {:#x}", got.addr);
        Ok((addr, true))
    }

    pub(super) fn setup(ctx: &Ctx, info: Option<&StartInfo>) -> Result<Outcome, Msg> {
        let Some(d) = ctx.device.as_ref() else {
            return Ok(Outcome::Skip(msg(format_args!("no device (pci_discovery failed)"))));
        };
        if d.kind != Kind::Model {
            return Ok(Outcome::Skip(msg(format_args!("real hardware: not wired yet"))));
        }
        let cs = &d.cs;
        let Some(cap) = find_cap(cs, CAP_MSIX) else {
            return Ok(Outcome::Skip(msg(format_args!(
                "no MSI-X capability (ivshmem-plain): run `cargo xtask qemu --irq`"
            ))));
        };
        let mc = (cs.read32(cap) >> 16) as u16;
        let entries = u32::from(mc & 0x7FF) + 1;
        ensure!(
            entries >= contract::IRQ_VECTORS,
            "MSI-X table has {entries} entries, want {}",
            contract::IRQ_VECTORS
        );
        let table = cs.read32(cap + 4);
        let (bir, off) = (table & 7, u64::from(table & !7));
        ensure!(bir < 6, "MSI-X table in BIR {bir}");
        let raw = cs.read32(pci::cfg::BAR0 + 4 * bir as u16);
        ensure!(raw & 1 == 0 && raw & 6 == 0, "MSI-X BAR{bir} {raw:#x} is not 32-bit memory");
        let (bar, assigned) = table_bar(cs, bir as u8, &d.bar)?;
        let table = bar + off;
        // SAFETY: the MSI-X table BAR is device memory in the PCI hole, away
        // from the image and the DMA pool; nothing references it.
        unsafe { paging::map_uc(table, 16 * u64::from(entries)) }
            .map_err(|e| msg(format_args!("map MSI-X table: {e:?}")))?;

        let ctl = plat::init(info)?;

        pci::enable(cs);
        cs.write16(cap + 2, mc | MC_ENABLE | MC_MASK);
        for n in 0..contract::IRQ_VECTORS {
            let e = table + 16 * u64::from(n);
            let (addr, data) = ctl.message(n);
            let words = [addr as u32, (addr >> 32) as u32, data, 0];
            for (i, w) in words.iter().enumerate() {
                // SAFETY: entry `n` < `entries` of the table mapped above;
                // 32-bit accesses as MSI-X requires.
                unsafe { core::ptr::write_volatile((e + 4 * i as u64) as *mut u32, *w) };
            }
        }
        cs.write16(cap + 2, (mc | MC_ENABLE) & !MC_MASK);
        ON.store(true, Ordering::Release);
        println!(
            "  irq_setup: MSI-X {entries} entries at BAR{bir} {bar:#x}+{off:#x}{}; entries 0..{} -> \
             {ctl}",
            if assigned { " (assigned here)" } else { "" },
            contract::IRQ_VECTORS
        );
        Ok(Outcome::Pass)
    }

    /// What the halts of one or more waits did.
    #[derive(Default)]
    struct Waits {
        /// Halts (`hlt` / `wfi`) executed.
        halts: u64,
        /// Counter cycles halted (x86_64 TSC inside `sti; hlt`, aarch64
        /// CNTVCT around `wfi` and taking the interrupt).
        halted: u64,
        /// TSC cycles inside `Cq::wait`.
        waited: u64,
        /// Driver handler calls (device entries taken).
        handled: u64,
        /// CQs the handler woke.
        woke: u64,
        /// Halts ended by the watchdog timer.
        watchdog: u64,
        /// A wait passed [`WAIT`] (a lost interrupt).
        timed_out: bool,
    }

    /// Runs the driver's handler for every device entry taken (interrupts
    /// masked).
    fn service(dev: &Dev<'_>, st: &mut Waits) {
        let p = idt::take_pending();
        if p & 1 << TIMER_ENTRY != 0 {
            st.watchdog += 1;
        }
        for n in 0..contract::IRQ_VECTORS {
            if n != TIMER_ENTRY && p & 1 << n != 0 {
                st.woke += u64::from(dev.handle_interrupt(n as u16).cqs);
                st.handled += 1;
            }
        }
    }

    /// `Cq::wait` with `plat::halt` as the halt (interrupts masked around
    /// it).
    fn wait(
        dev: &Dev<'_>,
        cq: &mut TCq<'_, '_>,
        wc: &mut [WorkCompletion],
        st: &mut Waits,
    ) -> usize {
        let t0 = arch::rdtsc();
        let end = BootHal::now() + WAIT;
        let n = cq.wait(wc, |woken| {
            loop {
                service(dev, st);
                if woken() || st.timed_out {
                    return;
                }
                if BootHal::now() > end {
                    // From here `Cq::wait` only polls: a completion whose
                    // interrupt was lost is still found, and reported.
                    st.timed_out = true;
                    return;
                }
                st.halts += 1;
                st.halted += plat::halt();
            }
        });
        st.waited += arch::rdtsc().wrapping_sub(t0);
        n
    }

    fn pause(bar: &MmioBar) -> Result<(), Msg> {
        request_fault(bar, contract::FAULT_PAUSE, PAUSE_US, 0, 0).map(|_| ())
    }

    /// The model's interrupt counters (fresh: read after a ping).
    struct ModelIrq {
        raised: u64,
        signals: u64,
        ceqes: u64,
        arms: u64,
    }

    fn model_irq(bar: &MmioBar) -> Result<ModelIrq, Msg> {
        model_counters(bar)?;
        Ok(ModelIrq {
            raised: bar.read64(MAILBOX + contract::MB_MODEL_IRQ_RAISED),
            signals: bar.read64(MAILBOX + contract::MB_MODEL_IRQ_SIGNALS),
            ceqes: bar.read64(MAILBOX + contract::MB_MODEL_IRQ_CEQES),
            arms: bar.read64(MAILBOX + contract::MB_MODEL_IRQ_ARMS),
        })
    }

    fn device_taken() -> u64 {
        (0..contract::IRQ_VECTORS)
            .filter(|n| *n != TIMER_ENTRY)
            .map(|n| idt::taken(n as usize))
            .sum()
    }

    /// Coalescing (spec B.5): the interrupts the guest took since boot are
    /// at most the eventfd writes the model made (both cumulative: an
    /// interrupt signalled during the polled scenarios waits in the APIC
    /// until the first halt).
    fn coalesced(m: &ModelIrq) -> Result<(), Msg> {
        let stray = plat::stray();
        ensure!(stray == 0, "{stray} interrupts on an unknown vector / INTID");
        let taken = device_taken();
        ensure!(
            taken <= m.signals,
            "{taken} interrupts taken since boot, the model signalled only {}",
            m.signals
        );
        Ok(())
    }

    fn us(cycles: u64) -> u128 {
        clock::cycles_to_duration(cycles).as_micros()
    }

    /// One wait that must have halted and been ended by an interrupt.
    fn check_wait(what: &str, st: &Waits, halts0: u64, handled0: u64) -> Result<(), Msg> {
        ensure!(!st.timed_out, "{what}: no interrupt within {WAIT:?} (lost wake-up)");
        ensure!(st.halts > halts0, "{what}: completed before the core halted");
        ensure!(st.handled > handled0, "{what}: the core woke without a device interrupt");
        Ok(())
    }

    /// A WRITE and a SEND, each completed while the core halts, woken by
    /// the CEQ interrupt.
    pub(super) fn write_send(dev: &Dev<'_>, bar: &MmioBar) -> Result<(), Msg> {
        // Interrupts raised while IF was 0 (AEQ work of the polled
        // scenarios) are taken at the first halt; count from a clean state.
        let mut st = Waits::default();
        let m0 = model_irq(bar)?;
        let (taken0, stats0) = (device_taken(), dev.irq_stats());
        let mut o = objects(dev)?;
        let b = buf(1)?;
        fill(&b, 31);
        // SAFETY: `b` is declared before the MR and so dropped after it
        // (deregistered in its `Drop`).
        let mr = unsafe { reg_buf(dev, &o.pd, &b, Map::Identity) }?;
        let rsge = [Sge { addr: b.paddr() + 3072, length: 512, lkey: mr.lkey() }];
        o.q2.post_recv(&[RecvWr { wr_id: 20, sg_list: &rsge }])
            .map_err(|e| msg(format_args!("post_recv: {e:?}")))?;
        traffic(dev, bar, &mut o, &b, &mr, &mut st)?;

        let m1 = model_irq(bar)?;
        let (taken, stats) = (device_taken() - taken0, dev.irq_stats());
        let signals = m1.signals - m0.signals;
        coalesced(&m1)?;
        ensure!(st.woke >= 2, "the handler woke the CQ {} times, want ≥ 2", st.woke);
        let ceqes = stats.ceqes - stats0.ceqes;
        ensure!(ceqes >= 2, "the handler consumed {ceqes} CEQEs, want ≥ 2");
        drop(mr);
        drop(o);
        println!(
            "  irq_write_send: WRITE 256 B + SEND 300 B, 3 completions in 2 interrupt-woken waits; {} halts \
             ({} us halted of {} us waiting), {taken} interrupts taken, {} handler runs, \
             {} CQ wake-ups, {} CEQEs consumed; model: {} raised, {signals} signalled, {} CEQEs, \
             {} arms",
            st.halts,
            us(st.halted),
            us(st.waited),
            st.handled,
            st.woke,
            ceqes,
            m1.raised - m0.raised,
            m1.ceqes - m0.ceqes,
            m1.arms - m0.arms
        );
        Ok(())
    }

    /// `write_send`'s traffic, each completed while the core halts: a WRITE
    /// of 256 B from offset 0 of `b` to offset 1024, then a SEND of 300 B
    /// from offset 512 into the receive at offset 3072.
    fn traffic(
        dev: &Dev<'_>,
        bar: &MmioBar,
        o: &mut Objs<'_, '_>,
        b: &Buf,
        mr: &TMr<'_, '_>,
        st: &mut Waits,
    ) -> Result<(), Msg> {
        pause(bar)?;
        let sge = [Sge { addr: b.paddr(), length: 256, lkey: mr.lkey() }];
        let wr = SendWr {
            wr_id: 10,
            opcode: WrOpcode::RdmaWrite { remote_addr: b.paddr() + 1024, rkey: mr.rkey() },
            flags: SendFlags::SIGNALED,
            sg_list: &sge,
        };
        o.q1.post_send(&[wr]).map_err(|e| msg(format_args!("post WRITE: {e:?}")))?;
        let mut wc = [EMPTY_WC; 4];
        let n = wait(dev, &mut o.cq, &mut wc, st);
        check_wait("WRITE", st, 0, 0)?;
        ensure!(n == 1, "WRITE: {n} completions");
        expect(wc[0], 10, WcOpcode::RdmaWrite)?;
        check(b, 1024, 256, 31, 0).map_err(|e| msg(format_args!("WRITE: {e}")))?;
        let (halts_w, handled_w) = (st.halts, st.handled);

        pause(bar)?;
        let sge = [Sge { addr: b.paddr() + 512, length: 300, lkey: mr.lkey() }];
        let wr =
            SendWr { wr_id: 11, opcode: WrOpcode::Send, flags: SendFlags::SIGNALED, sg_list: &sge };
        o.q1.post_send(&[wr]).map_err(|e| msg(format_args!("post SEND: {e:?}")))?;
        let (mut got_send, mut got_recv) = (false, false);
        while !(got_send && got_recv) {
            let n = wait(dev, &mut o.cq, &mut wc, st);
            ensure!(!st.timed_out, "SEND: no interrupt within {WAIT:?} (lost wake-up)");
            for c in wc.iter().take(n) {
                match (c.wr_id, c.status, c.opcode) {
                    (11, WcStatus::Success, WcOpcode::Send) if !got_send => got_send = true,
                    (20, WcStatus::Success, WcOpcode::Recv) if !got_recv => {
                        ensure!(c.byte_len == 300, "receive {c:?}");
                        got_recv = true;
                    }
                    _ => bail!("unexpected completion {c:?}"),
                }
            }
        }
        check_wait("SEND", st, halts_w, handled_w)?;
        check(b, 3072, 300, 31, 512).map_err(|e| msg(format_args!("SEND: {e}")))
    }

    /// The core is idle while it waits: [`IDLE_ROUNDS`] WRITEs the model
    /// completes after a pause; the TSC inside `sti; hlt` against the
    /// whole wait.
    pub(super) fn idle(dev: &Dev<'_>, bar: &MmioBar) -> Result<(), Msg> {
        let mut st = Waits::default();
        let m0 = model_irq(bar)?;
        let taken0 = device_taken();
        let mut o = objects(dev)?;
        let b = buf(1)?;
        // SAFETY: `b` is declared before the MR and so dropped after it
        // (deregistered in its `Drop`).
        let mr = unsafe { reg_buf(dev, &o.pd, &b, Map::Identity) }?;
        let mut wc = [EMPTY_WC; 2];
        for i in 0..u64::from(IDLE_ROUNDS) {
            let (h0, d0) = (st.halts, st.handled);
            pause(bar)?;
            let sge = [Sge { addr: b.paddr(), length: 64, lkey: mr.lkey() }];
            let wr = SendWr {
                wr_id: 100 + i,
                opcode: WrOpcode::RdmaWrite { remote_addr: b.paddr() + 2048, rkey: mr.rkey() },
                flags: SendFlags::SIGNALED,
                sg_list: &sge,
            };
            o.q1.post_send(&[wr]).map_err(|e| msg(format_args!("post: {e:?}")))?;
            let n = wait(dev, &mut o.cq, &mut wc, &mut st);
            check_wait("WRITE", &st, h0, d0)?;
            ensure!(n == 1, "round {i}: {n} completions");
            expect(wc[0], 100 + i, WcOpcode::RdmaWrite)?;
        }
        let m1 = model_irq(bar)?;
        let taken = device_taken() - taken0;
        let signals = m1.signals - m0.signals;
        coalesced(&m1)?;
        // The model pauses 20 ms per round: the core must have spent most
        // of each wait halted, not spinning.
        let pct = st.halted * 100 / st.waited.max(1);
        ensure!(pct >= 50, "halted only {pct}% of the waits");
        drop(mr);
        drop(o);
        println!(
            "  irq_idle: {IDLE_ROUNDS} WRITEs, each after a {} ms model pause: {} halts, \
             {taken} interrupts taken ({signals} signalled by the model), {} watchdog wakes; \
             halted {} us of {} us waiting ({pct}%)",
            PAUSE_US / 1000,
            st.halts,
            st.watchdog,
            us(st.halted),
            us(st.waited)
        );
        Ok(())
    }
}
