//! The scenario runner and this round's scenarios.
//!
//! Each scenario prints `PASS name (N us)`, `FAIL name: reason` or
//! `SKIP name: reason` on COM1 (`irdma_boot::contract`). Scenarios share a
//! [`Ctx`]: discovery fills in the device the later ones use.

// Failure reasons are fixed-capacity strings (no allocator to box them in);
// they are only built on the failure path, so their size costs nothing.
#![allow(clippy::result_large_err)]

use core::fmt::Write;
use core::ptr::NonNull;
use core::time::Duration;

use irdma_boot::contract::{self, MAILBOX};
use irdma_boot::memmap;
use irdma_hal::dma::wait_until;
use irdma_hal::pci::{self, BarInfo, ConfigSpace, Identity};
use irdma_hal::regs::MIN_BAR_SIZE;
use irdma_hal::{Bar, BufferDirection, Dma, DmaError, Hal, MmioBar};

use super::hal::{self, BootHal};
use super::pci::Cs;
use super::serial::println;
use super::start_info::StartInfo;
use super::{arch, clock, paging};

/// A failure or skip reason.
pub type Msg = heapless::String<160>;

fn msg(args: core::fmt::Arguments<'_>) -> Msg {
    let mut s = Msg::new();
    let _ = s.write_fmt(args);
    s
}

macro_rules! bail {
    ($($a:tt)*) => { return Err(msg(format_args!($($a)*))) };
}

macro_rules! ensure {
    ($cond:expr, $($a:tt)*) => { if !$cond { bail!($($a)*) } };
}

mod bringup;
mod cm;
mod irq;
mod lan;
mod nvme;
mod peer;
mod verbs;

/// How a scenario that did not fail ended.
pub enum Outcome {
    /// It ran and every check held.
    Pass,
    /// It could not run here (the reason says why).
    Skip(Msg),
}

/// Runs scenarios and counts the results.
pub struct Runner {
    passed: u32,
    failed: u32,
    skipped: u32,
}

impl Runner {
    /// A runner with no results yet.
    pub fn new() -> Self {
        Runner { passed: 0, failed: 0, skipped: 0 }
    }

    /// Runs one scenario and prints its line.
    pub fn run(&mut self, name: &str, f: impl FnOnce() -> Result<Outcome, Msg>) {
        let (r, cycles) = Self::measure(f);
        self.report(name, r, cycles);
    }

    /// Runs a scenario, returning its result and its TSC cycles.
    pub fn measure(f: impl FnOnce() -> Result<Outcome, Msg>) -> (Result<Outcome, Msg>, u64) {
        let t0 = arch::rdtsc();
        let r = f();
        (r, arch::rdtsc().wrapping_sub(t0))
    }

    /// Counts and prints a result (the clock must be running by now).
    pub fn report(&mut self, name: &str, r: Result<Outcome, Msg>, cycles: u64) {
        let us = clock::cycles_to_duration(cycles).as_micros();
        match r {
            Ok(Outcome::Pass) => {
                self.passed += 1;
                println!("PASS {name} ({us} us)");
                #[cfg(feature = "defmt")]
                defmt::info!("scenario {=str} passed in {=u64} us", name, us as u64);
            }
            Ok(Outcome::Skip(why)) => {
                self.skipped += 1;
                println!("SKIP {name}: {why}");
                #[cfg(feature = "defmt")]
                defmt::warn!("scenario {=str} skipped: {=str}", name, why.as_str());
            }
            Err(why) => {
                self.failed += 1;
                println!("FAIL {name}: {why}");
                #[cfg(feature = "defmt")]
                defmt::error!("scenario {=str} failed: {=str}", name, why.as_str());
            }
        }
    }

    /// (passed, failed, skipped).
    pub fn totals(&self) -> (u32, u32, u32) {
        (self.passed, self.failed, self.skipped)
    }
}

/// Which kind of function was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A real GEN_2 PF (its BAR0 is the register space).
    E810,
    /// The model's ivshmem-plain stand-in (BAR2 backed by the BAR file).
    Model,
}

/// The device discovery found, BAR mapped.
pub struct Device {
    /// Its configuration space.
    pub cs: Cs,
    /// Real hardware or the model.
    pub kind: Kind,
    /// The BAR as probed.
    pub bar: BarInfo,
    /// The mapped BAR.
    pub mmio: MmioBar,
}

/// State shared by the scenarios.
#[derive(Default)]
pub struct Ctx {
    /// Set by `pci_discovery`.
    pub device: Option<Device>,
}

/// ivshmem-plain ids and BAR (notes/qemu-mock-bar.md §2).
const IVSHMEM: (u16, u16) = (0x1af4, 0x1110);
const IVSHMEM_BAR: u8 = 2;
/// E810 register BAR.
const E810_BAR: u8 = 0;
/// Where a BAR goes when firmware left it unassigned (qboot on x86_64,
/// always on aarch64 virt): `arch::BAR_WINDOW`.
const ASSIGN_BASE: u64 = arch::BAR_WINDOW.0;
const ASSIGN_LIMIT: u64 = arch::BAR_WINDOW.1;

/// Runs every scenario of this round. `hand_lan` (`-append lan=hand`):
/// probe with a hand-filled `LanInfo` instead of the LAN bring-up (the
/// `lan_*` lines then skip). `peer`: the live run the command line asks
/// for (`irdma_boot::peercfg`); with one, the verbs and CM scenarios skip
/// (their traffic must not reach the Linux peer) and the `peer_*` one runs.
pub fn run_all(
    r: &mut Runner,
    info: Option<&StartInfo>,
    hand_lan: bool,
    peer: Result<Option<irdma_boot::peercfg::PeerCfg>, irdma_boot::peercfg::PeerCfgError>,
) {
    let mut ctx = Ctx::default();
    let pool_ok = init_pool(info);
    // Discovery runs before the clock: the host's TSC rate is in the BAR.
    let (found, cycles) = Runner::measure(|| pci_discovery(&mut ctx));
    let source = start_clock(&ctx);
    r.report("pci_discovery", found, cycles);
    r.run("bar_rw", || bar_rw(&ctx));
    r.run("model_ping", || model_ping(&ctx));
    r.run("dma_pool", || pool_ok.clone().and_then(|()| dma_pool()));
    r.run("clock", || clock_check(source));
    // MSI-X, IDT and local APIC before the device is probed (interrupt
    // runs only): the probe enables the vectors.
    irq::setup(r, &ctx, info);
    let mut b = bringup::Bringup::new(&ctx);
    b.run(r);
    // The device the verbs scenarios use: from a cold PF through the LAN
    // layer, one line per step (or probed with a hand-filled LanInfo).
    let pool0 = (hal::stats().live_pages, hal::bad_frees());
    let probed = if hand_lan {
        let why = msg(format_args!("lan=hand: LanInfo filled by hand"));
        for n in lan::FAULTS.iter().chain(lan::STEPS[..lan::STEPS.len() - 1].iter().map(|s| &s.1)) {
            r.run(n, || Ok(Outcome::Skip(why.clone())));
        }
        verbs::probe_by_hand(r, bringup::model_bar(&ctx))
    } else {
        lan::run(r, bringup::model_bar(&ctx)).map(verbs::Probed::Lan)
    };
    verbs::run(r, bringup::model_bar(&ctx), probed, b.injected(), pool0, peer);
    r.run("stack", stack_check);
}

unsafe extern "C" {
    static boot_stack: u8;
    static boot_stack_top: u8;
}

/// The boot stack's high-water mark: it starts zeroed (.bss), so the lowest
/// non-zero word is as deep as any call went. Fails above 7/8 of the stack
/// (there is no guard page: an overflow corrupts the page tables below).
fn stack_check() -> Result<Outcome, Msg> {
    let lo = core::ptr::addr_of!(boot_stack) as usize;
    let hi = core::ptr::addr_of!(boot_stack_top) as usize;
    let mut p = lo;
    while p < hi {
        // SAFETY: `lo..hi` is the boot stack, 16-byte aligned .bss memory of
        // this image; the words below the current stack pointer are not in
        // use, and a volatile read of the ones above only observes them.
        if unsafe { core::ptr::read_volatile(p as *const u64) } != 0 {
            break;
        }
        p += 8;
    }
    let (used, size) = (hi - p, hi - lo);
    println!("  stack: {} KiB of {} KiB used at most", used / 1024, size / 1024);
    ensure!(used <= size / 8 * 7, "stack use {used} B is within 1/8 of its {size} B");
    Ok(Outcome::Pass)
}

/// A scenario that always fails (`-append fail`), so the failure report
/// and exit code are tested end to end.
pub fn injected_failure() -> Result<Outcome, Msg> {
    bail!("requested by the command line")
}

/// Where the TSC rate came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockSource {
    /// The harness mailbox (host-measured).
    Host(u64),
    /// PIT calibration.
    Pit(u64),
    /// The rate the architecture states (aarch64: CNTFRQ_EL0).
    Counter(u64),
    /// Neither worked: a nominal 1 GHz, and `clock` fails.
    Nominal,
}

fn start_clock(ctx: &Ctx) -> ClockSource {
    let host = match &ctx.device {
        Some(d) if d.kind == Kind::Model => d.mmio.read64(MAILBOX + contract::MB_HOST_TSC_HZ),
        _ => 0,
    };
    let source = if let Some(hz) = clock::architectural_hz() {
        ClockSource::Counter(hz)
    } else if clock::plausible(host) {
        ClockSource::Host(host)
    } else {
        clock::calibrate().map_or(ClockSource::Nominal, ClockSource::Pit)
    };
    clock::start(match source {
        ClockSource::Host(hz) | ClockSource::Pit(hz) | ClockSource::Counter(hz) => hz,
        ClockSource::Nominal => 1_000_000_000,
    });
    source
}

fn init_pool(info: Option<&StartInfo>) -> Result<(), Msg> {
    let Some(info) = info else { bail!("no boot info (PVH start info or DTB): no memory map") };
    let base = hal::POOL_BASE;
    let size = contract::DMA_POOL_SIZE;
    if !memmap::ram_covers(info.memmap(), base, size) {
        for reg in info.memmap() {
            println!("  e820 {:#x}+{:#x} type {}", reg.addr, reg.size, reg.kind);
        }
        bail!("DMA pool {base:#x}+{size:#x} is not RAM in the memory map");
    }
    // The pool must not overlap the image (code, data, bss, stack).
    let kernel_end = core::ptr::addr_of!(__kernel_end) as u64;
    ensure!(kernel_end <= base, "image ends at {kernel_end:#x}, inside the DMA pool");
    match hal::init_pool() {
        Some(pages) if pages as u64 * 4096 == size => Ok(()),
        other => bail!("pool init gave {other:?} pages"),
    }
}

unsafe extern "C" {
    static __kernel_end: u8;
}

fn pci_discovery(ctx: &mut Ctx) -> Result<Outcome, Msg> {
    let mut gen2: Option<(Cs, Identity)> = None;
    let mut model: Option<(Cs, Identity)> = None;
    let mut count = 0u32;
    super::pci::scan(|cs, id| {
        count += 1;
        println!("  pci {cs} {:04x}:{:04x} class {:06x}", id.vendor, id.device, id.class);
        if gen2.is_none() && pci::is_gen2_rdma(id.vendor, id.device) {
            gen2 = Some((cs, id));
        }
        if model.is_none() && (id.vendor, id.device) == IVSHMEM {
            model = Some((cs, id));
        }
    });
    ensure!(count > 0, "no PCI function answered at all");
    let (cs, kind, index) = match (gen2, model) {
        (Some((cs, _)), _) => (cs, Kind::E810, E810_BAR),
        (None, Some((cs, _))) => (cs, Kind::Model, IVSHMEM_BAR),
        (None, None) => bail!("neither a GEN_2 PF nor ivshmem 1af4:1110 among {count} functions"),
    };
    let mut bar = match pci::probe_bar(&cs, index) {
        Ok(b) => b,
        Err(e) => bail!("{cs} BAR{index}: {e:?}"),
    };
    println!(
        "  using {kind:?} at {cs}: BAR{index} {:#x} size {:#x} 64-bit={} prefetch={}",
        bar.addr, bar.size, bar.is64, bar.prefetchable
    );
    ensure!(bar.size.is_power_of_two(), "BAR size {:#x} not a power of two", bar.size);
    ensure!(bar.size >= MIN_BAR_SIZE as u64, "BAR {:#x} below the driver's minimum", bar.size);
    if bar.addr == 0 {
        let addr = ASSIGN_BASE.next_multiple_of(bar.size);
        ensure!(
            addr.checked_add(bar.size).is_some_and(|e| e <= ASSIGN_LIMIT),
            "BAR unassigned and {:#x} bytes do not fit the hole",
            bar.size
        );
        pci::set_bar_addr(&cs, index, &bar, addr);
        bar = match pci::probe_bar(&cs, index) {
            Ok(b) => b,
            Err(e) => bail!("re-probe after assignment: {e:?}"),
        };
        ensure!(bar.addr == addr, "assigned {addr:#x}, reads back {:#x}", bar.addr);
        println!("  firmware left the BAR unassigned: placed it at {addr:#x}");
    }
    pci::enable(&cs);
    let cmd = cs.read16(pci::cfg::COMMAND);
    let want = pci::cfg::CMD_MEM | pci::cfg::CMD_BUS_MASTER;
    ensure!(cmd & want == want, "COMMAND {cmd:#06x} lacks MEM|BUS_MASTER after enable");
    ensure!(
        bar.addr.checked_add(bar.size).is_some_and(|e| e <= paging::MAP_LIMIT),
        "BAR {:#x} beyond what the image can map",
        bar.addr
    );
    let Ok(len) = usize::try_from(bar.size) else { bail!("BAR size overflows usize") };
    let base = {
        // SAFETY: the range is this device's BAR (probed above), which no
        // Rust reference points into, and it lies in the PCI hole, not in
        // the image or the DMA pool.
        unsafe { BootHal::mmio_phys_to_virt(bar.addr, len) }
    };
    ensure!(
        paging::is_uncached(bar.addr),
        "BAR mapping is not uncached (x86_64 PCD|PWT, aarch64 Device)"
    );
    ensure!(paging::is_uncached(bar.addr + bar.size - 1), "BAR end not uncached");
    let Some(base) = NonNull::new(base.as_ptr()) else { bail!("null BAR mapping") };
    // SAFETY: `base..base + len` is the BAR, mapped uncached for the rest of
    // the run (the mapping is never undone); base is 2 MiB aligned at least.
    let mmio = unsafe { MmioBar::new(base, len) };
    ctx.device = Some(Device { cs, kind, bar, mmio });
    Ok(Outcome::Pass)
}

fn model_bar(ctx: &Ctx) -> Result<Option<&MmioBar>, Msg> {
    match &ctx.device {
        None => bail!("no device (pci_discovery failed)"),
        Some(d) if d.kind == Kind::Model => {
            // The BAR is still where discovery left it, decoding, same size.
            let now = pci::probe_bar(&d.cs, IVSHMEM_BAR);
            ensure!(now == Ok(d.bar), "BAR moved or changed: {now:?} vs {:?}", d.bar);
            ensure!(d.mmio.len() as u64 == d.bar.size, "mapping length != BAR size");
            Ok(Some(&d.mmio))
        }
        Some(_) => Ok(None),
    }
}

fn bar_rw(ctx: &Ctx) -> Result<Outcome, Msg> {
    let Some(bar) = model_bar(ctx)? else {
        return Ok(Outcome::Skip(msg(format_args!("real device: no harness mailbox"))));
    };
    let mb = |off: usize| MAILBOX + off;
    let nonce = bar.read64(mb(contract::MB_NONCE));
    ensure!(nonce != 0, "mailbox nonce is 0: the BAR is not the harness's file");
    // Width and byte order through MmioBar.
    let s = mb(contract::MB_SCRATCH);
    bar.write32(s, 0x1234_5678);
    bar.write32(s + 4, 0xcafe_babe);
    ensure!(bar.read32(s) == 0x1234_5678, "read32 after write32: {:#x}", bar.read32(s));
    let both = bar.read64(s);
    ensure!(both == 0xcafe_babe_1234_5678, "read64 of two u32 writes: {both:#x}");
    bar.write64(s + 8, 0x0123_4567_89ab_cdef);
    ensure!(bar.read32(s + 8) == 0x89ab_cdef, "low half of write64");
    ensure!(bar.read32(s + 12) == 0x0123_4567, "high half of write64");
    // The hal's bounds: past the BAR reads all-ones and writes nothing.
    ensure!(bar.read32(bar.len()) == u32::MAX, "read past the BAR did not give all-ones");
    ensure!(bar.read32(s + 2) == u32::MAX, "misaligned read was not refused");
    // The pattern the host checks in the BAR file after the run.
    for i in 0..contract::SCRATCH_WORDS {
        bar.write64(s + 8 * i, contract::pattern(nonce, i as u64));
    }
    for i in 0..contract::SCRATCH_WORDS {
        let got = bar.read64(s + 8 * i);
        let want = contract::pattern(nonce, i as u64);
        ensure!(got == want, "scratch word {i}: {got:#x} != {want:#x}");
    }
    bar.write64(mb(contract::MB_ECHO), contract::echo(nonce));
    bar.write32(mb(contract::MB_GUEST_MAGIC), contract::GUEST_MAGIC);
    ensure!(bar.read32(mb(contract::MB_GUEST_MAGIC)) == contract::GUEST_MAGIC, "magic readback");
    Ok(Outcome::Pass)
}

/// Doorbell round trips through the BAR file with a host model process
/// (the plumbing the out-of-process device model uses).
fn model_ping(ctx: &Ctx) -> Result<Outcome, Msg> {
    const ROUNDS: usize = 200;
    let Some(bar) = model_bar(ctx)? else {
        return Ok(Outcome::Skip(msg(format_args!("real device: no harness mailbox"))));
    };
    if bar.read32(MAILBOX + contract::MB_HOST_MAGIC) != contract::HOST_MAGIC {
        return Ok(Outcome::Skip(msg(format_args!("no host model process"))));
    }
    let mut cycles = [0u64; ROUNDS];
    for (i, slot) in cycles.iter_mut().enumerate() {
        let seq = i as u32 + 1;
        let t0 = arch::rdtsc();
        bar.write32(MAILBOX + contract::MB_PING, seq);
        let deadline = BootHal::now() + Duration::from_secs(2);
        let answered = wait_until::<BootHal>(deadline, || {
            bar.read32(MAILBOX + contract::MB_PONG) == contract::pong(seq)
        });
        ensure!(answered, "no pong for ping {seq} within 2 s");
        *slot = arch::rdtsc().wrapping_sub(t0);
    }
    cycles.sort_unstable();
    let ns = |c: u64| clock::cycles_to_duration(c).as_nanos();
    println!(
        "  model_ping: {ROUNDS} round trips: min {} ns, median {} ns, max {} ns",
        ns(cycles[0]),
        ns(cycles[ROUNDS / 2]),
        ns(cycles[ROUNDS - 1])
    );
    Ok(Outcome::Pass)
}

fn check_zero_and_fill(d: &Dma<BootHal>, tag: u64) -> Result<(), Msg> {
    ensure!(d.paddr().is_multiple_of(4096), "paddr {:#x} not page-aligned", d.paddr());
    ensure!(d.paddr() == d.vaddr().as_ptr() as u64, "not identity-mapped");
    ensure!(hal::in_pool(d.paddr(), d.len() as u64), "{:#x} outside the pool", d.paddr());
    for off in (0..d.len()).step_by(8) {
        ensure!(d.read_u64(off) == Some(0), "not zeroed at {:#x}+{off:#x}", d.paddr());
        d.write_u64(off, contract::pattern(tag, off as u64));
    }
    Ok(())
}

fn check_pattern(d: &Dma<BootHal>, tag: u64) -> Result<(), Msg> {
    for off in (0..d.len()).step_by(8) {
        let want = contract::pattern(tag, off as u64);
        ensure!(d.read_u64(off) == Some(want), "pattern {tag} broken at {:#x}+{off:#x}", d.paddr());
    }
    Ok(())
}

fn overlaps(a: &Dma<BootHal>, b: &Dma<BootHal>) -> bool {
    a.paddr() < b.paddr() + b.len() as u64 && b.paddr() < a.paddr() + a.len() as u64
}

fn dma_pool() -> Result<Outcome, Msg> {
    let dir = BufferDirection::Both;
    let before = hal::stats();
    let bad_before = hal::bad_frees();
    let a = Dma::<BootHal>::new(1, dir).map_err(|e| msg(format_args!("alloc 1: {e:?}")))?;
    let b = Dma::<BootHal>::new(3, dir).map_err(|e| msg(format_args!("alloc 3: {e:?}")))?;
    let c = Dma::<BootHal>::with_bytes(16 * 4096 - 1, dir)
        .map_err(|e| msg(format_args!("alloc 16: {e:?}")))?;
    ensure!(c.pages() == 16, "with_bytes rounded to {} pages", c.pages());
    ensure!(!overlaps(&a, &b) && !overlaps(&a, &c) && !overlaps(&b, &c), "allocations overlap");
    check_zero_and_fill(&a, 1)?;
    check_zero_and_fill(&b, 2)?;
    check_zero_and_fill(&c, 3)?;
    check_pattern(&a, 1)?;
    check_pattern(&b, 2)?;
    check_pattern(&c, 3)?;
    let live = hal::stats().live_pages;
    ensure!(live == before.live_pages + 20, "live pages {live}, expected +20");

    // Freeing makes the hole reusable, and reused memory comes back zeroed.
    let hole = b.paddr();
    drop(b);
    let d = Dma::<BootHal>::new(2, dir).map_err(|e| msg(format_args!("alloc 2: {e:?}")))?;
    ensure!(d.paddr() == hole, "first fit: got {:#x}, hole at {hole:#x}", d.paddr());
    check_zero_and_fill(&d, 4)?;
    check_pattern(&a, 1)?;
    check_pattern(&c, 3)?;

    // Exhaustion is an error, not a panic; so is an empty request.
    let too_many = hal::pool_pages() + 1;
    ensure!(
        Dma::<BootHal>::new(too_many, dir).err() == Some(DmaError::NoMemory),
        "allocating {too_many} pages did not fail with NoMemory"
    );
    ensure!(Dma::<BootHal>::new(0, dir).err() == Some(DmaError::NoMemory), "0 pages accepted");

    // share() is the identity on this platform.
    let buf = [0u8; 64];
    let slice = NonNull::from(&buf[..]);
    // SAFETY: `buf` outlives the share/unshare pair and nothing writes it.
    let shared = unsafe { BootHal::share(slice, BufferDirection::DriverToDevice) };
    ensure!(shared == Ok(buf.as_ptr() as u64), "share is not the identity: {shared:?}");
    // SAFETY: the matching unshare of the share above.
    unsafe { BootHal::unshare(buf.as_ptr() as u64, slice, BufferDirection::DriverToDevice) };

    let (a_phys, a_pages) = (a.paddr(), a.pages());
    drop((a, c, d));
    let after = hal::stats();
    ensure!(after.live_pages == before.live_pages, "leak: {} live pages", after.live_pages);
    ensure!(
        after.allocs - before.allocs == after.frees - before.frees,
        "allocs {} vs frees {}",
        after.allocs - before.allocs,
        after.frees - before.frees
    );
    ensure!(hal::bad_frees() == bad_before, "the pool refused a free");
    ensure!(hal::try_free(a_phys, a_pages).is_err(), "double free accepted");
    Ok(Outcome::Pass)
}

fn clock_check(source: ClockSource) -> Result<Outcome, Msg> {
    match source {
        ClockSource::Host(hz) => println!("  clock: TSC {} kHz, from the host", hz / 1000),
        ClockSource::Pit(hz) => println!("  clock: TSC {} kHz, by the PIT", hz / 1000),
        ClockSource::Counter(hz) => {
            println!("  clock: counter {} kHz, from CNTFRQ_EL0", hz / 1000)
        }
        ClockSource::Nominal => bail!("no host TSC rate and the PIT calibration failed"),
    }
    let mut last = BootHal::now();
    for _ in 0..1000 {
        let t = BootHal::now();
        ensure!(t >= last, "now() went backwards");
        last = t;
    }
    let start = BootHal::now();
    let timed_out = !wait_until::<BootHal>(start + Duration::from_millis(2), || false);
    let waited = BootHal::now() - start;
    ensure!(timed_out, "wait_until on a false condition returned true");
    ensure!(waited >= Duration::from_millis(2), "timeout after only {waited:?}");
    ensure!(waited < Duration::from_secs(1), "2 ms timeout took {waited:?}");
    let mut n = 0;
    let done = wait_until::<BootHal>(BootHal::now() + Duration::from_secs(1), || {
        n += 1;
        n == 3
    });
    ensure!(done && n == 3, "wait_until missed a condition that became true");
    Ok(Outcome::Pass)
}
