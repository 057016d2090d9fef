//! The shared-memory transport (for QEMU): the BAR is a file QEMU exposes as
//! an ivshmem-plain BAR2, guest RAM is a second file (file offset = guest
//! physical address, with the 4 GiB hole folded as QEMU does). The model is a
//! host process that polls. See `shared/notes/qemu-mock-bar.md`.
//!
//! A plain-memory BAR has no side effects, so the device runs in
//! [`Mode::Deferred`]: the host copies changed driver-written registers into
//! the device, calls [`Device::poll`], and writes the device's status
//! registers back into the BAR file. Files are accessed with positional
//! reads/writes (`pread`/`pwrite`), which share the page cache with QEMU's
//! `MAP_SHARED` mapping; no `unsafe` and no dependency. A register or WQE
//! header word is read with one 8- or 4-byte positional read; the model does
//! not guard against a torn read of a word the guest is writing at that
//! instant (x86_64 and aarch64 guests store such aligned words with one
//! single-copy-atomic instruction).
//!
//! Each [`ShmHost::step`] costs a handful of system calls: the watched
//! registers are read in six positional reads, the LAN admin-queue block
//! and PFGEN_CTRL in two more, and only status registers the device
//! changed are written back (all nine are compared with the BAR after a
//! CQP handshake and every 256 rounds).
//!
//! [`Harness`] is the model's side of the `cargo xtask qemu` mailbox (layout
//! in [`mailbox`], the `shm-contract` crate boot/src/contract.rs re-exports): HOST_MAGIC, ping/pong,
//! fault and reset requests mapped onto [`crate::FaultPlan`] and
//! [`Device::reset`], the CQP counters, and the shutdown flag. The
//! `mock-bar-shm` binary runs it in harness mode.
//!
//! **Interrupts** (issue #31, spec interrupts.md B.6 layout 1): with
//! [`ShmHost::attach_interrupts`] (harness mode: `IRDMA_IVSHMEM_SOCK` and
//! `IRDMA_IRQ_VECTORS` set, QEMU's device is then `ivshmem-doorbell` with
//! the model as its server, [`crate::ivshmem`]) each step also copies the
//! interrupt registers the driver wrote — GLINT_DYN_CTL(0..N),
//! GLINT_CEQCTL(0..N), PFINT_AEQCTL — into the device, and after the poll
//! delivers every vector the device raised: DYN_CTL(v) with INTENA cleared
//! (the device's rule on firing, `crate::irq`) is written back into the
//! BAR **before** the guest's eventfd of v is written, so the driver's
//! re-enable, which can only follow the interrupt, is never overwritten.
//! No compare-exchange is needed for that: between a clear and the
//! interrupt it announces the driver does not write DYN_CTL(v) (it writes
//! it at enable, at the end of its handler and at teardown). CQACK writes
//! coalesce in a plain-memory BAR and are not copied (as for every
//! deferred device, `crate::irq`). A vector raised before QEMU connected,
//! or at or beyond N, is counted as undelivered.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::wire::Capture;

use crate::device::{Config, Device, Mode};
use crate::fabric::Fabric;
use crate::irq::{self as irqm, InterruptSink};
use crate::ivshmem::{self, Doorbell};
use crate::mem::{Fault, Memory};
use crate::{lan, regs};

/// Guest RAM in a file: offset = GPA below `below_4g`, GPA − 4 GiB +
/// `below_4g` above 4 GiB (notes/qemu-mock-bar.md §3) — with GPA counted
/// from the RAM base ([`FileMemory::with_base`]: 0 on x86 PCs, 0x4000_0000
/// on QEMU's Arm `virt` machine, where RAM starts at 1 GiB).
#[derive(Debug)]
pub struct FileMemory {
    file: File,
    size: u64,
    below_4g: u64,
    base: u64,
}

impl FileMemory {
    /// Wraps an open RAM file of `size` bytes; RAM starts at GPA 0.
    pub fn new(file: File, size: u64, below_4g: u64) -> Self {
        Self { file, size, below_4g: below_4g.min(size), base: 0 }
    }

    /// The same, for a machine whose RAM starts at guest-physical `base`:
    /// file offset = GPA − `base` (a DMA address below `base` faults).
    pub fn with_base(mut self, base: u64) -> Self {
        self.base = base;
        self
    }

    fn offset(&self, gpa: u64, len: usize) -> Option<u64> {
        const FOUR_G: u64 = 1 << 32;
        let gpa = gpa.checked_sub(self.base)?;
        let off = if gpa < self.below_4g {
            gpa
        } else if gpa >= FOUR_G {
            gpa - FOUR_G + self.below_4g
        } else {
            return None; // the PCI hole
        };
        let end = off.checked_add(len as u64)?;
        let limit = if gpa < self.below_4g { self.below_4g } else { self.size };
        (end <= limit).then_some(off)
    }
}

impl Memory for FileMemory {
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), Fault> {
        let fault = Fault { addr: pa, len: buf.len(), write: false };
        let off = self.offset(pa, buf.len()).ok_or(fault)?;
        self.file.read_exact_at(buf, off).map_err(|_| fault)
    }

    fn write(&self, pa: u64, data: &[u8]) -> Result<(), Fault> {
        let fault = Fault { addr: pa, len: data.len(), write: true };
        let off = self.offset(pa, data.len()).ok_or(fault)?;
        self.file.write_all_at(data, off).map_err(|_| fault)
    }
}

/// A BAR file.
#[derive(Debug)]
pub struct FileBar {
    file: File,
    size: u64,
}

impl FileBar {
    /// Wraps an open BAR file of `size` bytes.
    pub fn new(file: File, size: u64) -> Self {
        Self { file, size }
    }
    /// 32-bit read (all-ones outside the file or on error).
    pub fn read32(&self, off: u32) -> u32 {
        let mut b = [0u8; 4];
        if off as u64 + 4 > self.size || self.file.read_exact_at(&mut b, off as u64).is_err() {
            return u32::MAX;
        }
        u32::from_le_bytes(b)
    }
    /// 32-bit write (dropped outside the file).
    pub fn write32(&self, off: u32, v: u32) {
        if off as u64 + 4 <= self.size {
            let _ = self.file.write_all_at(&v.to_le_bytes(), off as u64);
        }
    }
    /// 64-bit write, one positional write (dropped outside the file).
    pub fn write64(&self, off: u32, v: u64) {
        if off as u64 + 8 <= self.size {
            let _ = self.file.write_all_at(&v.to_le_bytes(), off as u64);
        }
    }
    /// Reads `buf.len()` bytes at `off` with one positional read; `false`
    /// (and `buf` untouched) outside the file or on error.
    pub fn read_block(&self, off: u32, buf: &mut [u8]) -> bool {
        let fits = (off as u64).checked_add(buf.len() as u64).is_some_and(|e| e <= self.size);
        fits && self.file.read_exact_at(buf, off as u64).is_ok()
    }
    /// Size of the file in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
}

/// Creates (or truncates and zeroes) a file of `size` bytes: QEMU keeps
/// stale contents of memory-backend files, so every run starts clean.
pub fn create_zeroed(path: &Path, size: u64) -> io::Result<File> {
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
    f.set_len(size)?;
    Ok(f)
}

/// Registers the driver writes and the device acts on.
const WATCHED: [u32; 8] = [
    regs::CCQPHIGH,
    regs::CCQPLOW,
    regs::CQPDB,
    regs::WQEALLOC,
    regs::CQARM,
    regs::AEQALLOC,
    regs::DB_ADDR_OFFSET,
    regs::DB_ADDR_OFFSET + 64,
];

/// LAN admin-queue and reset registers the guest writes
/// (`crate::lan`), in the order the host applies changes: bases and lengths,
/// heads, the ARQ tail, then the ATQ tail (which makes the firmware work),
/// then PFGEN_CTRL. The host also writes back the values the firmware
/// changed (heads, LEN firmware bits, everything after a reset).
const AQ_REGS: [u32; 11] = [
    lan::reg::ATQBAL,
    lan::reg::ATQBAH,
    lan::reg::ARQBAL,
    lan::reg::ARQBAH,
    lan::reg::ATQLEN,
    lan::reg::ARQLEN,
    lan::reg::ATQH,
    lan::reg::ARQH,
    lan::reg::ARQT,
    lan::reg::ATQT,
    lan::reg::PFGEN_CTRL,
];

/// LAN status registers the host publishes (read-only for the guest).
const LAN_STATUS: [u32; 4] =
    [lan::reg::GLGEN_RSTAT, lan::reg::GLNVM_ULD, lan::reg::GL_MNG_FWSM, lan::reg::PFGEN_PORTNUM];

/// How the host loop waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollMode {
    /// Spin (one whole core).
    Spin,
    /// Spin while busy; after 200 µs idle, sleep 100 µs between checks.
    Hybrid,
}

/// The host side: one deferred device between a BAR file and a RAM file.
pub struct ShmHost {
    /// The device (inspect counters and trace after the run).
    pub device: Device,
    bar: FileBar,
    last: [u32; 8],
    /// Rounds since the status registers were last compared with the BAR.
    quiet_rounds: u32,
    /// The status registers as last published.
    published: [(u32, u32); 9],
    /// [`AQ_REGS`] as last seen in (or written to) the BAR.
    aq_seen: [u32; 11],
    /// [`LAN_STATUS`] as last published.
    lan_published: [u32; 4],
    /// Other devices on the device's wire ([`ShmHost::join`]).
    peers: Option<Arc<Fabric>>,
    /// Interrupt delivery ([`ShmHost::attach_interrupts`]).
    irq: Option<ShmIrq>,
}

/// Interrupt delivery through an ivshmem doorbell (see the module docs).
struct ShmIrq {
    doorbell: Arc<OnceLock<Doorbell>>,
    vectors: u32,
    sink: Arc<InterruptSink>,
    dyn_seen: Vec<u32>,
    ceqctl_seen: Vec<u32>,
    aeqctl_seen: u32,
    stats: IrqDelivery,
}

/// What [`ShmHost`] did with the device's interrupts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IrqDelivery {
    /// Eventfd writes made (one per interrupt the device raised on a
    /// connected vector).
    pub signals: u64,
    /// Interrupts raised before QEMU connected, or whose eventfd write failed.
    pub undelivered: u64,
}

/// Watched registers close enough to share one positional read: (first
/// offset, length in bytes). Each read costs a system call, the loop's
/// main expense.
const SPANS: [(u32, usize); 6] = [
    (regs::CQPDB, 4),
    (regs::CQARM, 4),
    (regs::AEQALLOC, 4),
    (regs::WQEALLOC, 4),
    (regs::CCQPLOW, (regs::CCQPHIGH - regs::CCQPLOW) as usize + 4),
    (regs::DB_ADDR_OFFSET, 68),
];

/// Status registers are compared with the BAR (one read each) after a CQP
/// handshake write and at least this often; in between only the values the
/// device changed are written. A guest overwrite of a status register at
/// any other time heals within this many rounds.
const REPUBLISH_ROUNDS: u32 = 256;

impl ShmHost {
    /// A device (forced to [`Mode::Deferred`]) serving `bar`, DMA to `ram`.
    pub fn new(mut cfg: Config, bar: FileBar, ram: FileMemory) -> Self {
        cfg.mode = Mode::Deferred;
        let device = Device::new(cfg, Box::new(ram));
        let published = device.status_registers();
        let mut h = Self {
            device,
            bar,
            last: [0; 8],
            quiet_rounds: 0,
            published,
            aq_seen: [0; 11],
            lan_published: [0; 4],
            peers: None,
            irq: None,
        };
        h.publish();
        h.publish_lan(true);
        h
    }

    /// Puts the served device on `fabric`'s wire: from now on each
    /// [`ShmHost::step`] polls it and the fabric's devices together
    /// ([`Fabric::poll_joined`]), so a second device (driven by a host-side
    /// driver through the fabric, in [`Mode::Deferred`]) can exchange frames
    /// with the guest's.
    pub fn join(&mut self, fabric: Arc<Fabric>) {
        self.peers = Some(fabric);
    }

    /// Delivers the device's interrupts on vectors `0..vectors` through the
    /// doorbell once `doorbell` is set (QEMU connected; see the module
    /// docs). Vectors are capped at [`ivshmem::MAX_VECTORS`].
    pub fn attach_interrupts(&mut self, doorbell: Arc<OnceLock<Doorbell>>, vectors: u32) {
        let vectors = vectors.min(ivshmem::MAX_VECTORS);
        let sink = InterruptSink::new();
        self.device.set_interrupt_sink(sink.clone());
        self.irq = Some(ShmIrq {
            doorbell,
            vectors,
            sink,
            dyn_seen: vec![0; vectors as usize],
            ceqctl_seen: vec![0; vectors as usize],
            aeqctl_seen: 0,
            stats: IrqDelivery::default(),
        });
    }

    /// Interrupt delivery counters (`None` without
    /// [`ShmHost::attach_interrupts`]).
    pub fn irq_delivery(&self) -> Option<IrqDelivery> {
        self.irq.as_ref().map(|i| i.stats)
    }

    /// Copies changed GLINT_DYN_CTL / GLINT_CEQCTL (0..N) and PFINT_AEQCTL
    /// values from the BAR into the device (three positional reads). A
    /// value the device changed itself (a reset clears them, DESTROY_AEQ
    /// clears PFINT_AEQCTL) is written into the BAR first, as the register
    /// would read on hardware.
    fn sync_irq_regs(&mut self) {
        let Some(irq) = self.irq.as_mut() else { return };
        let n = irq.vectors as usize;
        let mut buf = [0u8; 4 * ivshmem::MAX_VECTORS as usize];
        let Some(b) = buf.get_mut(..4 * n) else { return };
        for (base, seen) in
            [(irqm::dyn_ctl(0), &mut irq.dyn_seen), (irqm::ceqctl(0), &mut irq.ceqctl_seen)]
        {
            for (i, last) in seen.iter_mut().enumerate() {
                let off = base + 4 * i as u32;
                let dv = self.device.reg(off);
                if dv != *last {
                    self.bar.write32(off, dv);
                    *last = dv;
                }
            }
            if !self.bar.read_block(base, b) {
                continue;
            }
            for (i, (w, last)) in b.chunks_exact(4).zip(seen.iter_mut()).enumerate() {
                let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                if v != *last {
                    *last = v;
                    self.device.mmio_write32(base + 4 * i as u32, v);
                }
            }
        }
        let dv = self.device.reg(regs::PFINT_AEQCTL);
        if dv != irq.aeqctl_seen {
            self.bar.write32(regs::PFINT_AEQCTL, dv);
            irq.aeqctl_seen = dv;
        }
        let v = self.bar.read32(regs::PFINT_AEQCTL);
        if v != irq.aeqctl_seen {
            irq.aeqctl_seen = v;
            self.device.mmio_write32(regs::PFINT_AEQCTL, v);
        }
    }

    /// Signals every vector the device raised since the last call: DYN_CTL
    /// as the device left it (INTENA clear) into the BAR, then the eventfd.
    fn deliver_irqs(&mut self) {
        let Some(irq) = self.irq.as_mut() else { return };
        for v in 0..irq.vectors {
            if !irq.sink.take(v) {
                continue;
            }
            let off = irqm::dyn_ctl(v);
            let val = self.device.reg(off);
            self.bar.write32(off, val);
            if let Some(seen) = irq.dyn_seen.get_mut(v as usize) {
                *seen = val;
            }
            // `signal` fences (Release) before the eventfd write: the CQE,
            // the CEQE and this DYN_CTL are in the files before QEMU can
            // inject the MSI (spec A.11 item 7).
            match irq.doorbell.get() {
                Some(d) if d.signal(v) => irq.stats.signals += 1,
                _ => irq.stats.undelivered += 1,
            }
        }
    }

    /// The [`AQ_REGS`] as the BAR holds them: one read of the AQ block
    /// (0x80000..0x80484) and one of PFGEN_CTRL.
    fn read_aq(&self) -> [u32; 11] {
        let mut v = self.aq_seen;
        let mut b = [0u8; 0x484];
        if self.bar.read_block(lan::reg::ATQBAL, &mut b) {
            for (i, off) in AQ_REGS.iter().enumerate() {
                if let Some(rel) = off.checked_sub(lan::reg::ATQBAL).map(|r| r as usize)
                    && let Some(w) = b.get(rel..rel + 4)
                {
                    v[i] = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                }
            }
        }
        v[10] = self.bar.read32(lan::reg::PFGEN_CTRL);
        v
    }

    /// Copies the AQ registers the guest changed into the device.
    fn apply_aq(&mut self) -> bool {
        let now = self.read_aq();
        let mut changed = false;
        for (i, off) in AQ_REGS.iter().enumerate() {
            if now[i] != self.aq_seen[i] {
                self.aq_seen[i] = now[i];
                self.device.mmio_write32(*off, now[i]);
                changed = true;
            }
        }
        changed
    }

    /// Writes back the AQ registers whose device value differs from the
    /// BAR, and the LAN status registers (all of them when `all`).
    fn publish_lan(&mut self, all: bool) {
        let crit = self.device.faults.aq_crit;
        for (i, off) in AQ_REGS.iter().enumerate() {
            let v = self.device.lan.peek(*off, crit).unwrap_or(0);
            if v != self.aq_seen[i] {
                self.aq_seen[i] = v;
                self.bar.write32(*off, v);
            }
        }
        for (i, off) in LAN_STATUS.iter().enumerate() {
            let v = self.device.lan.peek(*off, crit).unwrap_or(0);
            if all || v != self.lan_published[i] {
                self.lan_published[i] = v;
                self.bar.write32(*off, v);
            }
        }
    }

    /// The current values of the [`WATCHED`] registers, read span by span.
    fn read_watched(&self) -> [u32; 8] {
        let mut v = [u32::MAX; 8];
        let mut buf = [0u8; 256];
        for (start, len) in SPANS {
            let Some(b) = buf.get_mut(..len) else { continue };
            if !self.bar.read_block(start, b) {
                continue;
            }
            for (i, off) in WATCHED.iter().enumerate() {
                if let Some(rel) = off.checked_sub(start).map(|r| r as usize)
                    && let Some(w) = b.get(rel..rel + 4)
                {
                    v[i] = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                }
            }
        }
        v
    }

    /// Writes the device's status registers into the BAR where they differ
    /// from the BAR (one read each).
    fn publish(&mut self) {
        self.published = self.device.status_registers();
        for (off, v) in self.published {
            if self.bar.read32(off) != v {
                self.bar.write32(off, v);
            }
        }
    }

    /// Writes the status registers that changed since the last publish (no
    /// reads: the BAR is assumed to hold what was published).
    fn publish_changes(&mut self) {
        let now = self.device.status_registers();
        for ((off, v), (_, was)) in now.iter().zip(self.published.iter()) {
            if v != was {
                self.bar.write32(*off, *v);
            }
        }
        self.published = now;
    }

    /// One round: copy changed doorbells in, poll, publish. Returns whether
    /// the device did anything.
    pub fn step(&mut self) -> bool {
        let (mut changed, mut handshake) = (false, false);
        for (i, (off, v)) in WATCHED.iter().zip(self.read_watched()).enumerate() {
            if v != self.last[i] {
                self.last[i] = v;
                self.device.mmio_write32(*off, v);
                changed = true;
                // CQP create/destroy: the guest also wrote CQPTAIL and
                // CCQPSTATUS, so the BAR may no longer hold what we published.
                handshake |= *off == regs::CCQPHIGH || *off == regs::CCQPLOW;
            }
        }
        changed |= self.apply_aq();
        self.sync_irq_regs();
        let work = match &self.peers {
            Some(f) => f.poll_joined(&mut self.device),
            None => self.device.poll(),
        };
        self.deliver_irqs();
        self.device.lan.tick();
        self.publish_lan(false);
        self.quiet_rounds += 1;
        if handshake || self.quiet_rounds >= REPUBLISH_ROUNDS {
            self.quiet_rounds = 0;
            self.publish();
        } else {
            self.publish_changes();
        }
        work || changed
    }

    /// The BAR file.
    pub fn bar(&self) -> &FileBar {
        &self.bar
    }

    /// Serves until `stop` is set.
    pub fn serve(&mut self, stop: &AtomicBool, mode: PollMode) {
        self.serve_with(
            mode,
            |_| {
                if stop.load(Ordering::Acquire) { Tick::Stop } else { Tick::Idle }
            },
        );
    }

    /// Serves until `tick` (called after every [`ShmHost::step`]) says
    /// [`Tick::Stop`]; [`Tick::Busy`] counts as activity for
    /// [`PollMode::Hybrid`].
    pub fn serve_with(&mut self, mode: PollMode, mut tick: impl FnMut(&mut ShmHost) -> Tick) {
        let mut idle_since = Instant::now();
        loop {
            let work = self.step();
            let t = tick(self);
            if t == Tick::Stop {
                return;
            }
            if work || t == Tick::Busy {
                idle_since = Instant::now();
            } else if mode == PollMode::Hybrid && idle_since.elapsed() > Duration::from_micros(200)
            {
                std::thread::sleep(Duration::from_micros(100));
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// What a [`ShmHost::serve_with`] callback saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tick {
    /// Nothing to do.
    Idle,
    /// It did something (keeps a hybrid poller spinning).
    Busy,
    /// Stop serving.
    Stop,
}

/// The harness mailbox of `cargo xtask qemu`: the `shm-contract` crate, the
/// one definition the unikernel (through boot/src/contract.rs) uses as well —
/// a crate of the wire contract only, so the model still depends on neither
/// the driver nor the unikernel. Offsets (`MB_*`) are from the mailbox base
/// (env `IRDMA_MAILBOX`), little-endian.
pub mod mailbox {
    pub use shm_contract::*;

    /// Bytes the model reads each round (one positional read): the guest
    /// and xtask words up to the CQP counters.
    pub const HEADER: usize = MB_CM_PEER;
    const _: () = assert!(HEADER >= MB_MODEL_DMA_FAULTS + 8 && HEADER <= MB_SCRATCH);
}

/// The model's side of the harness mailbox: announce, ping/pong, fault
/// requests, counters, shutdown.
#[derive(Debug)]
pub struct Harness {
    base: u32,
    last_ping: u32,
    last_fault: u32,
    published: [u64; 3],
    irq_published: [u64; 5],
    /// Pings answered.
    pub pings: u64,
    /// Fault requests applied.
    pub faults: u64,
}

fn word32(b: &[u8], o: usize) -> u32 {
    b.get(o..o + 4).map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Writes each counter of `now` that differs from what was last published
/// to its mailbox word `offs[i]` (mailbox at BAR offset `base`).
fn publish(host: &ShmHost, base: u32, now: &[u64], published: &mut [u64], offs: &[usize]) {
    for ((v, last), off) in now.iter().zip(published).zip(offs) {
        if v != last {
            host.bar().write64(base + *off as u32, *v);
            *last = *v;
        }
    }
}

impl Harness {
    /// BAR offset of mailbox word `off`.
    fn at(&self, off: usize) -> u32 {
        self.base + off as u32
    }

    /// The mailbox at BAR offset `base`.
    pub fn new(base: u32) -> Self {
        Self {
            base,
            last_ping: 0,
            last_fault: 0,
            published: [u64::MAX; 3],
            irq_published: [u64::MAX; 5],
            pings: 0,
            faults: 0,
        }
    }

    /// Writes the counters, then `HOST_MAGIC`: the model is serving.
    pub fn announce(&mut self, host: &ShmHost) {
        self.publish_counters(host);
        host.bar().write32(self.at(mailbox::MB_HOST_MAGIC), mailbox::HOST_MAGIC);
    }

    fn publish_counters(&mut self, host: &ShmHost) {
        let c = host.device.counters();
        let now = [c.cqp_ops, c.cqp_errors, c.dma_faults];
        let offs =
            [mailbox::MB_MODEL_CQP_OPS, mailbox::MB_MODEL_CQP_ERRORS, mailbox::MB_MODEL_DMA_FAULTS];
        publish(host, self.base, &now, &mut self.published, &offs);
        let Some(d) = host.irq_delivery() else { return };
        let ic = host.device.irq_counters();
        let now = [ic.raised, d.signals, c.ceqes, ic.arms, ic.latched];
        let offs = [
            mailbox::MB_MODEL_IRQ_RAISED,
            mailbox::MB_MODEL_IRQ_SIGNALS,
            mailbox::MB_MODEL_IRQ_CEQES,
            mailbox::MB_MODEL_IRQ_ARMS,
            mailbox::MB_MODEL_IRQ_LATCHED,
        ];
        publish(host, self.base, &now, &mut self.irq_published, &offs);
    }

    /// One round: counters, fault requests, ping, shutdown (checked last,
    /// so a request made before QEMU exited is still answered).
    pub fn service(&mut self, host: &mut ShmHost) -> Tick {
        self.publish_counters(host);
        let mut h = [0u8; mailbox::HEADER];
        if !host.bar().read_block(self.base, &mut h) {
            return Tick::Stop;
        }
        let mut t = Tick::Idle;
        let seq = word32(&h, mailbox::MB_FAULT_SEQ);
        if seq != 0 && seq != self.last_fault {
            self.last_fault = seq;
            let arg = word32(&h, mailbox::MB_FAULT_ARG);
            let codes = word32(&h, mailbox::MB_FAULT_CODES);
            let (applied, pause) =
                apply_fault(host, word32(&h, mailbox::MB_FAULT_KIND), arg, codes);
            self.faults += applied as u64;
            host.bar().write32(self.at(mailbox::MB_FAULT_RESULT), !applied as u32);
            host.bar().write32(self.at(mailbox::MB_FAULT_ACK), seq);
            t = Tick::Busy;
            if pause > 0 {
                std::thread::sleep(Duration::from_micros(pause.into()));
            }
        }
        let ping = word32(&h, mailbox::MB_PING);
        if ping != 0 && ping != self.last_ping {
            self.last_ping = ping;
            self.pings += 1;
            host.bar().write32(self.at(mailbox::MB_PONG), mailbox::pong(ping));
            t = Tick::Busy;
        }
        if word32(&h, mailbox::MB_SHUTDOWN) != 0 {
            return Tick::Stop;
        }
        t
    }
}

/// [`Harness::service`]: the fault request of kind `kind` (argument `arg`,
/// codes `codes`) applied to the device; whether it was known, and how long
/// to pause (µs, `FAULT_PAUSE` only).
fn apply_fault(host: &mut ShmHost, kind: u32, arg: u32, codes: u32) -> (bool, u32) {
    let mut pause = 0;
    let plan = host.device.faults();
    let applied = match kind {
        mailbox::FAULT_CLEAR => {
            *plan = crate::FaultPlan::default();
            true
        }
        mailbox::FAULT_FAIL_CQP_OP => {
            plan.fail_cqp_op = Some((arg, (codes >> 16) as u16, codes as u16));
            true
        }
        mailbox::FAULT_DROP_CQP_COMPLETIONS => {
            plan.drop_cqp_completions = arg;
            true
        }
        mailbox::FAULT_LOSE_DOORBELLS => {
            plan.lose_doorbells = arg;
            true
        }
        mailbox::FAULT_FUNCTION_RESET => {
            host.device.reset();
            true
        }
        mailbox::FAULT_FAIL_WQE => {
            plan.fail_wqe = Some((arg, (codes >> 16) as u16, codes as u16));
            true
        }
        mailbox::FAULT_AQ_HANG => {
            plan.aq_hang_at = Some(arg);
            true
        }
        mailbox::FAULT_AQ_CRIT => {
            plan.aq_crit = true;
            true
        }
        mailbox::FAULT_AQ_FAIL_OPCODE => {
            plan.aq_fail_opcode = Some(((codes >> 16) as u16, codes as u16));
            true
        }
        mailbox::FAULT_AQ_RESET => {
            plan.aq_reset_at = Some(arg);
            true
        }
        mailbox::FAULT_PAUSE => {
            pause = arg.min(mailbox::PAUSE_MAX_US);
            true
        }
        _ => false,
    };
    (applied, pause)
}

/// A size: decimal or 0x hex, with an optional K/M/G suffix.
pub fn parse_size(s: &str) -> Option<u64> {
    let (num, mul) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n = match num.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok()?,
        None => num.parse().ok()?,
    };
    n.checked_mul(mul)
}

pub fn env_num(name: &str) -> Result<u64, String> {
    let v = std::env::var(name).map_err(|_| format!("{name} is not set"))?;
    parse_size(&v).ok_or(format!("{name}={v}: not a size"))
}

pub fn open_existing(path: &str, size: u64) -> Result<std::fs::File, String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| format!("{path}: {e}"))?;
    let len = f.metadata().map_err(|e| format!("{path}: {e}"))?.len();
    if len != size {
        return Err(format!("{path} is {len} bytes, the environment says {size}"));
    }
    Ok(f)
}

/// Writes `cap` to `path` (when both are given) and says so.
pub fn write_capture(path: Option<&Path>, cap: Option<&Capture>) -> Result<(), String> {
    if let (Some(p), Some(c)) = (path, cap) {
        c.write_pcap(p).map_err(|e| format!("{}: {e}", p.display()))?;
        println!("mock-bar-shm: {} frames written to {}", c.len(), p.display());
    }
    Ok(())
}

/// How [`run_harness`] serves.
#[derive(Clone, Debug)]
pub struct HarnessOpts {
    /// How the loop waits.
    pub mode: PollMode,
    /// Give up (status 1) after this long without a shutdown.
    pub max: Duration,
    /// Write every frame of the device's wire here at the end.
    pub pcap: Option<String>,
    /// Start the PF with the LAN side counted as done.
    pub warm: bool,
    /// An Ethernet port ([`crate::port`]) for the served device's wire:
    /// frames for destinations no device of the model claims leave through
    /// it (to a Linux guest's `-netdev dgram`), frames that arrive are
    /// taken as the hardware would. Its MAC is replaced by the served
    /// device's (`LanConfig::mac`), the address the guest's LAN layer reads.
    pub port: Option<crate::PortConfig>,
}

/// The files and addresses `cargo xtask qemu` hands the model process in
/// its environment.
struct HarnessEnv {
    bar: String,
    ram: String,
    bar_size: u64,
    ram_size: u64,
    mailbox: u64,
    ram_base: u64,
}

impl HarnessEnv {
    /// Reads `IRDMA_BAR_FILE`, `IRDMA_RAM_FILE`, their sizes, the mailbox
    /// and the RAM base, and checks where the mailbox lies.
    fn read() -> Result<Self, String> {
        let bar = std::env::var("IRDMA_BAR_FILE").map_err(|_| "IRDMA_BAR_FILE is not set")?;
        let ram = std::env::var("IRDMA_RAM_FILE").map_err(|_| "IRDMA_RAM_FILE is not set")?;
        let (bar_size, ram_size) = (env_num("IRDMA_BAR_SIZE")?, env_num("IRDMA_RAM_SIZE")?);
        let mailbox = env_num("IRDMA_MAILBOX")?;
        let ram_base = match std::env::var_os("IRDMA_RAM_BASE") {
            Some(_) => env_num("IRDMA_RAM_BASE")?,
            None => 0,
        };
        // The register space (up to the doorbell page at 0x7F0040) lies below
        // the mailbox page, which lies inside the file.
        if mailbox < 8 << 20 || mailbox + 4096 > bar_size {
            return Err(format!("IRDMA_MAILBOX {mailbox:#x} not in [8 MiB, BAR size − 4 KiB]"));
        }
        Ok(HarnessEnv { bar, ram, bar_size, ram_size, mailbox, ram_base })
    }

    /// The served device on the BAR and RAM files.
    fn open_host(&self, warm: bool) -> Result<ShmHost, String> {
        // A cold PF (LanConfig::cold): the guest's LAN layer must create the
        // qset and turn the PE filter on before any RDMA traffic flows.
        let mut cfg = Config::default();
        cfg.lan.cold = !warm;
        Ok(ShmHost::new(
            cfg,
            FileBar::new(open_existing(&self.bar, self.bar_size)?, self.bar_size),
            // every GPA is below 4 GiB up to 2 GiB of RAM (q35)
            FileMemory::new(
                open_existing(&self.ram, self.ram_size)?,
                self.ram_size,
                self.ram_size.min(2 << 30),
            )
            .with_base(self.ram_base),
        ))
    }
}

/// [`run_harness`]'s wire: the port (on the peers' fabric or an empty one),
/// the capture, and the fabric joined. Returns the port and the capture.
fn harness_wire(
    host: &mut ShmHost,
    peers: Option<Arc<Fabric>>,
    port: &Option<crate::PortConfig>,
    pcap: Option<&Path>,
) -> Result<(Option<Arc<crate::Port>>, Option<Capture>), String> {
    // A port needs a fabric to hang on: the peers', or an empty one.
    let peers = match (peers, port) {
        (None, Some(_)) => Some(Fabric::new()),
        (p, _) => p,
    };
    let port = match (&peers, port) {
        (Some(f), Some(pc)) => {
            let mut pc = pc.clone();
            pc.mac = host.device.config().lan.mac;
            let p = crate::Port::bind(pc).map_err(|e| format!("port: {e}"))?;
            Some(f.attach_port(p))
        }
        _ => None,
    };
    let cap = pcap.map(|_| Capture::new());
    host.device.set_capture(cap.clone());
    if let Some(f) = peers {
        if let Some(c) = &cap {
            // the peers' frames go to the same capture
            f.record_into(c.clone());
        }
        host.join(f);
    }
    Ok((port, cap))
}

/// [`run_harness`]'s ivshmem server, when `IRDMA_IVSHMEM_SOCK` asks for one.
fn harness_interrupts(
    host: &mut ShmHost,
    env: &HarnessEnv,
) -> Result<Option<Arc<ivshmem::Server>>, String> {
    // Interrupts (issue #31): the model is the ivshmem server of QEMU's
    // ivshmem-doorbell device. It listens before HOST_MAGIC (QEMU, started
    // after it, reads the handshake inside device realize) and hands QEMU
    // the BAR file as the shared memory (spec interrupts.md B.6 layout 1).
    Ok(match std::env::var_os("IRDMA_IVSHMEM_SOCK") {
        Some(sock) => {
            let vectors = env_num("IRDMA_IRQ_VECTORS")? as u32;
            if vectors == 0 || vectors > ivshmem::MAX_VECTORS {
                return Err(format!("IRDMA_IRQ_VECTORS={vectors}: not in 1..=64"));
            }
            let server = Arc::new(
                ivshmem::Server::bind(Path::new(&sock))
                    .map_err(|e| format!("ivshmem socket {}: {e}", Path::new(&sock).display()))?,
            );
            let shm = open_existing(&env.bar, env.bar_size)?;
            let slot = Arc::new(OnceLock::new());
            host.attach_interrupts(slot.clone(), vectors);
            let s = server.clone();
            std::thread::spawn(move || match s.accept(&shm, vectors) {
                Ok(d) => {
                    println!("mock-bar-shm: ivshmem client connected, {vectors} vectors");
                    let _ = slot.set(d);
                }
                Err(e) => eprintln!("mock-bar-shm: ivshmem handshake failed: {e}"),
            });
            Some(server)
        }
        None => None,
    })
}

/// [`run_harness`]'s loop: the mailbox service and `each` every round until
/// a stop; returns the rounds served and why the run failed, if it did.
fn harness_serve(
    host: &mut ShmHost,
    h: &mut Harness,
    o: &HarnessOpts,
    t0: Instant,
    mut each: impl FnMut(&ShmHost) -> Tick,
) -> (u64, Option<String>) {
    let (mode, max) = (o.mode, o.max);
    let parent = std::os::unix::process::parent_id();
    let mut rounds = 0u64;
    let mut why = None;
    host.serve_with(mode, |host| {
        rounds += 1;
        let t = h.service(host);
        if t == Tick::Stop {
            return t;
        }
        let t = match each(host) {
            Tick::Stop => return Tick::Stop,
            Tick::Busy => Tick::Busy,
            Tick::Idle => t,
        };
        // Cheap checks, now and then: an orphaned model must not live on.
        if rounds.is_multiple_of(4096) {
            if t0.elapsed() > max {
                why = Some(format!("no shutdown within {} s", max.as_secs()));
                return Tick::Stop;
            }
            if std::os::unix::process::parent_id() != parent {
                why = Some("the parent process went away".to_string());
                return Tick::Stop;
            }
        }
        t
    });
    (rounds, why)
}

/// [`run_harness`]'s closing lines: the device's counters and the failed
/// CQP ops still in its trace.
fn harness_report_device(host: &ShmHost, h: &Harness, t0: Instant, rounds: u64) {
    let c = host.device.counters();
    println!(
        "mock-bar-shm: {:.2} s, {rounds} rounds, {} pings, {} fault requests; cqp_ops={} \
         cqp_errors={} cqp_doorbells={} cqes={} sq_wqes={} dma_faults={} invalid_cqp_wqes={} \
         packets={} wire_drops={} lan_cold={} aq_commands={} aq_errors={} lan_gated_wqes={} \
         pe_filter_drops={}",
        t0.elapsed().as_secs_f64(),
        h.pings,
        h.faults,
        c.cqp_ops,
        c.cqp_errors,
        c.cqp_doorbells,
        c.cqes,
        c.sq_wqes,
        c.dma_faults,
        c.cqp_invalid_wqes,
        c.packets,
        c.wire_drops,
        u8::from(host.device.config().lan.cold),
        c.aq_commands,
        c.aq_errors,
        c.lan_gated_wqes,
        c.pe_filter_drops,
    );
    // The failed CQP ops still in the trace: the first thing to look at when
    // a guest scenario reports an unexpected CQP error.
    for e in host.device.trace() {
        if let crate::Event::CqpOp { idx, opcode, major, minor, .. } = e
            && (*major != 0 || *minor != 0)
        {
            println!(
                "mock-bar-shm: CQP op {opcode:#04x} in slot {idx} failed {major:#06x}/{minor:#06x}"
            );
        }
    }
}

/// [`run_harness`]'s closing lines for the interrupts and the port, when
/// the run had them.
fn harness_report_links(host: &ShmHost, port: Option<&Arc<crate::Port>>) {
    if let Some(d) = host.irq_delivery() {
        let c = host.device.counters();
        let ic = host.device.irq_counters();
        println!(
            "mock-bar-shm: interrupts raised={} signals={} undelivered={} latched={} arms={} \
             ceqes={} disables={}",
            ic.raised, d.signals, d.undelivered, ic.latched, ic.arms, c.ceqes, ic.disables
        );
    }
    if let Some(p) = port {
        let c = p.counters();
        println!(
            "mock-bar-shm: port {} rx={} tx={} tx_no_peer={} delivered={} arp_replies={} \
             nd_replies={} not_roce={} unsolicited={} rc_timeouts={} windows={} drops={} {:?}",
            p.local_addr(),
            c.rx_frames,
            c.tx_frames,
            c.tx_no_peer,
            c.delivered,
            c.arp_replies,
            c.nd_replies,
            c.not_roce,
            c.unsolicited,
            c.rc_timeouts,
            c.windows,
            c.drops.total(),
            c.drops
        );
    }
}

/// Harness mode: the model process of `cargo xtask qemu` (the
/// `mock-bar-shm` binary's harness mode, see its docs). With `peers`, the
/// served device shares the wire with that fabric's devices
/// ([`ShmHost::join`]); `each` runs after every round, besides the
/// mailbox service (a [`Tick::Stop`] from it ends the run like a shutdown).
pub fn run_harness(
    o: &HarnessOpts,
    peers: Option<Arc<Fabric>>,
    each: impl FnMut(&ShmHost) -> Tick,
) -> Result<(), String> {
    let pcap = o.pcap.as_ref().map(Path::new);
    let env = HarnessEnv::read()?;
    let mut host = env.open_host(o.warm)?;
    let (port, cap) = harness_wire(&mut host, peers, &o.port, pcap)?;
    let _server = harness_interrupts(&mut host, &env)?;
    let mut h = Harness::new(env.mailbox as u32);
    h.announce(&host);
    let t0 = Instant::now();
    let (rounds, mut why) = harness_serve(&mut host, &mut h, o, t0, each);
    harness_report_device(&host, &h, t0, rounds);
    harness_report_links(&host, port.as_ref());
    write_capture(pcap, cap.as_ref())?;
    // The wire of a port run is judged like the host stage's
    // (tests/peer_live.rs): every RoCEv2 frame on it parses, ICRC right.
    if let (Some(_), Some(c)) = (&port, &cap) {
        let chk = crate::wire::check_frames(&c.frames());
        println!("mock-bar-shm: capture: {chk}");
        if let Some((i, d)) = chk.first_bad {
            why.get_or_insert(format!("capture frame {i}: {d:?}"));
        }
    }
    match why {
        Some(w) => Err(w),
        None => Ok(()),
    }
}

/// Runs [`ShmHost::serve`] on a thread until the returned flag is set.
pub fn spawn(
    mut host: ShmHost,
    mode: PollMode,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<ShmHost>) {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let h = std::thread::spawn(move || {
        host.serve(&s, mode);
        host
    });
    (stop, h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ram(tag: &str, size: u64) -> (std::path::PathBuf, File) {
        let path = std::env::temp_dir().join(format!("mock-bar-ram-{tag}-{}", std::process::id()));
        let f = create_zeroed(&path, size).unwrap();
        (path, f)
    }

    #[test]
    fn ram_base_shifts_the_file_offset() {
        // QEMU's Arm virt machine: RAM (the file) starts at GPA 1 GiB.
        let (path, f) = ram("base", 1 << 20);
        let m = FileMemory::new(f, 1 << 20, 1 << 20).with_base(0x4000_0000);
        m.write(0x4000_1000, &[0xab; 4]).unwrap();
        let mut b = [0u8; 4];
        m.file.read_exact_at(&mut b, 0x1000).unwrap();
        assert_eq!(b, [0xab; 4]);
        assert!(m.read(0x1000, &mut b).is_err(), "below the RAM base");
        assert!(m.read(0x4010_0000, &mut b).is_err(), "past the end of RAM");
        let _ = std::fs::remove_file(path);
        // Without a base, offset = GPA.
        let (path, f) = ram("zero", 1 << 20);
        let m = FileMemory::new(f, 1 << 20, 1 << 20);
        m.write(0x1000, &[0xcd; 4]).unwrap();
        m.file.read_exact_at(&mut b, 0x1000).unwrap();
        assert_eq!(b, [0xcd; 4]);
        let _ = std::fs::remove_file(path);
    }
}
