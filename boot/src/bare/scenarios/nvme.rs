//! `peer_nvmet` (issue #32): the image serves an NVMe-over-RDMA target to
//! the Linux host that `cargo xtask peer run peer_nvmet` boots beside it —
//! the `irdma_nvmet` crate (its command layer `ctrl::Target` and its
//! transport `rdma::Transport` on the driver's public API) with one RAM
//! namespace of `ns_mib=` MiB, `nvme_io_queues=` I/O queues, 4 KiB of
//! in-capsule data, the discovery controller, on the RDMA-CM port 4420.
//!
//! Two vendor-specific admin opcodes (NVMe Base §5: opcodes C0h–FFh are
//! vendor specific) are the run's test hooks, answered here and never seen
//! by the command layer: `0xC0` restarts the target's controllers (every
//! queue of every controller is disconnected; the host's recovery
//! reconnects; the RAM and its data stay), `0xC1` ends the run once no
//! queue is left. The image then checks that every queue, QP, registration
//! and page came back and prints the transport's counters.

use core::ptr::NonNull;
use core::time::Duration;

use irdma::cm::{QP1_RECV_BYTES, Qp1Transport};
use irdma_boot::peercfg::{MAX_IO_QUEUES, NVME_SUBNQN as SUBNQN, PeerCfg};
use irdma_hal::{Hal, MmioBar};
use irdma_nvmet::ctrl::{Config as CtrlConfig, Target, TrAddr};
use irdma_nvmet::rdma::{Config, Transport};
use irdma_nvmet::{Commands, Event, QueueId, QueueInfo, RamDisk, Response, Slot, Step};

use super::verbs::{Dev, buf};
use super::{Msg, Outcome, msg};
use crate::bare::hal::{self, BootHal};
use crate::bare::serial::println;

/// The scenario line.
pub const NAME: &str = "peer_nvmet";

/// Queues at once: the discovery controller's admin queue, the I/O
/// controller's admin queue and its I/O queues.
const Q: usize = 2 + MAX_IO_QUEUES as usize;
/// Slots per queue: the 6.1 host's I/O depth (spec §1.4: 128).
const D: usize = 128;
/// CM connections: closed ones sit in timewait while the host reconnects.
const C: usize = 2 * Q;
/// Controllers at once (discovery + I/O, and a new association while the
/// old one is torn down).
const CTRLS: usize = 4;
/// In-capsule data bytes per receive (IOCCSZ = (64 + 4096) / 16 = 260, as
/// nvmet's default; spec §1.4).
const INLINE: u32 = 4096;
/// The restart and end hooks (module docs).
const OPC_RESTART: u8 = 0xC0;
const OPC_FINISH: u8 = 0xC1;
/// How long after the restart's response the queues are dropped.
const RESTART_DELAY_MS: u64 = 200;
/// The longest the run may take (the Linux script's whole run under TCG).
const LIMIT: Duration = Duration::from_secs(800);
/// 2 MiB: the disk is registered with 2 MiB pages (`rdma::MAX_REG_PAGES`).
const ALIGN: usize = 2 << 20;

type Mad<'d, 'b> = Qp1Transport<'d, BootHal, &'b MmioBar>;
type Tp<'d, 'b> = Transport<'d, BootHal, &'b MmioBar, Mad<'d, 'b>, Q, D, C>;

fn ms() -> u64 {
    BootHal::now().as_millis() as u64
}

/// The command layer with the run's two hooks in front of it.
struct Hooked<X> {
    inner: X,
    /// Queues the transport opened, and whether each is an admin queue.
    open: heapless::Vec<(QueueId, bool), Q>,
    events: heapless::Deque<Event, 32>,
    /// When the restart's disconnects go out: a moment after its response
    /// was posted, so the SEND leaves before the QPs go to ERROR.
    restart_at: Option<u64>,
    finish: bool,
    restarts: u32,
}

impl<X: Commands> Hooked<X> {
    fn hook(&mut self, q: QueueId, capsule: &[u8], now_ms: u64) -> Option<Step> {
        let (&opc, admin) = (capsule.first()?, self.open.iter().any(|&(o, a)| o == q && a));
        if !admin || !matches!(opc, OPC_RESTART | OPC_FINISH) || capsule.len() < 64 {
            return None;
        }
        // A CQE with the command's CID and status 0 (spec §2.2).
        let mut cqe = [0u8; 16];
        cqe[12..14].copy_from_slice(capsule.get(2..4)?);
        if opc == OPC_RESTART {
            self.restarts += 1;
            self.restart_at = Some(now_ms + RESTART_DELAY_MS);
        } else {
            self.finish = true;
        }
        Some(Step::Respond { rsp: Response { cqe, invalidate: None }, write: None })
    }
}

impl<X: Commands> Commands for Hooked<X> {
    fn queue_opened(&mut self, q: QueueId, info: QueueInfo) -> Result<(), u16> {
        self.inner.queue_opened(q, info)?;
        if self.open.push((q, info.qid == 0)).is_err() {
            self.inner.queue_closed(q);
            return Err(irdma_nvmet::rdma::sts::NO_RESOURCES);
        }
        Ok(())
    }

    fn queue_failed(&mut self, q: QueueId) {
        self.inner.queue_failed(q);
    }

    fn queue_closed(&mut self, q: QueueId) {
        self.open.retain(|&(o, _)| o != q);
        self.inner.queue_closed(q);
    }

    fn capsule(
        &mut self,
        q: QueueId,
        slot: Slot,
        capsule: &[u8],
        scratch: &mut [u8],
        now_ms: u64,
    ) -> Step {
        match self.hook(q, capsule, now_ms) {
            Some(s) => s,
            None => self.inner.capsule(q, slot, capsule, scratch, now_ms),
        }
    }

    fn fetched(
        &mut self,
        q: QueueId,
        slot: Slot,
        ok: bool,
        scratch: &mut [u8],
        now_ms: u64,
    ) -> Step {
        self.inner.fetched(q, slot, ok, scratch, now_ms)
    }

    fn poll(&mut self, now_ms: u64) -> Option<Event> {
        if self.restart_at.is_some_and(|t| now_ms >= t) {
            self.restart_at = None;
            for &(o, _) in &self.open {
                let _ = self.events.push_back(Event::Disconnect(o));
            }
        }
        self.events.pop_front().or_else(|| self.inner.poll(now_ms))
    }
}

/// Runs the target until the host's `0xC1` and the end of every queue.
pub fn scenario(dev: &Dev<'_>, cfg: &PeerCfg) -> Result<Outcome, Msg> {
    let pages0 = hal::stats().live_pages;
    let ns_bytes = cfg.ns_mib as usize * (1 << 20);
    // One DMA region for the disk, 2 MiB-aligned inside it.
    let region = buf((ns_bytes + ALIGN) / 4096)?;
    let pad = (ALIGN - (region.paddr() as usize % ALIGN)) % ALIGN;
    let base = NonNull::new(region.vaddr().as_ptr().wrapping_add(pad))
        .ok_or_else(|| msg(format_args!("disk address")))?;
    // The disk, the target and the transport live in this block; the
    // region under the disk outlives them all.
    let (r, queues_left) = {
        // SAFETY: `base..base + ns_bytes` lies inside `region` (pad < ALIGN),
        // which outlives the disk, the target and the transport (all gone at
        // the end of this block); it is 2 MiB-aligned, so 8-byte aligned; nothing else in the
        // image touches `region`.
        let disk = unsafe { RamDisk::new(base, ns_bytes as u64, region.paddr() + pad as u64) };
        run_target(dev, cfg, &disk)?
    };
    drop(region);
    r?;
    ensure!(queues_left == 0, "{queues_left} queues still open");
    let pages = hal::stats().live_pages;
    ensure!(pages == pages0, "{} DMA pages not given back", pages.saturating_sub(pages0));
    Ok(Outcome::Pass)
}

/// The target and its transport over `disk`, served until the host is done:
/// [`serve`]'s result and the queues still open. Both are gone (the
/// transport with QP1, which it owns, then the target) when this returns.
fn run_target(
    dev: &Dev<'_>,
    cfg: &PeerCfg,
    disk: &RamDisk,
) -> Result<(Result<(), Msg>, usize), Msg> {
    let ctrl_cfg = CtrlConfig {
        subnqn: SUBNQN,
        serial: "irdma0001",
        model: "irdma unikernel RAM",
        disk,
        lba_shift: 9,
        inline_bytes: INLINE,
        io_queues: cfg.io_queues as u16,
        port_id: 1,
        traddr: TrAddr::V4(cfg.ip),
        kas: 10,
    };
    let target =
        Target::<Q, CTRLS>::new(ctrl_cfg).map_err(|x| msg(format_args!("target: {x:?}")))?;
    let qbuf = buf((16 * QP1_RECV_BYTES + 8 * 256).div_ceil(4096))?;
    let mad = Qp1Transport::new(dev, qbuf, 16, 8).map_err(|x| msg(format_args!("QP1: {x:?}")))?;
    let cm = super::peer::cm_config(dev.lan_info().mac, cfg, 0x0e01);
    let tcfg = Config { cm, inline_bytes: INLINE, psn_seed: crate::bare::arch::rdtsc() as u32 };
    let mut tp: Tp<'_, '_> =
        Transport::new(dev, disk, mad, tcfg).map_err(|x| msg(format_args!("transport: {x:?}")))?;
    let mut cmds = Hooked {
        inner: target,
        open: heapless::Vec::new(),
        events: heapless::Deque::new(),
        restart_at: None,
        finish: false,
        restarts: 0,
    };
    println!(
        "  peer_nvmet: serving {SUBNQN} ({} MiB, {} I/O queues) on {}.{}.{}.{}:4420",
        cfg.ns_mib, cfg.io_queues, cfg.ip[0], cfg.ip[1], cfg.ip[2], cfg.ip[3]
    );
    let r = serve(&mut tp, &mut cmds);
    let s = tp.stats();
    println!(
        "  peer_nvmet: {} queues accepted, {} rejected, {} closed; {} capsules, {} responses ({} with invalidate), {} READ / {} WRITE chains, {} WR errors, {} restarts",
        s.accepted,
        s.rejected,
        s.closed,
        s.capsules,
        s.responses,
        s.send_inv,
        s.reads,
        s.writes,
        s.wr_errors,
        cmds.restarts
    );
    Ok((r, tp.open_queues()))
}

/// Polls the transport until the host's `0xC1` and the end of every queue
/// (or [`LIMIT`]), printing a line whenever a queue comes or goes or
/// something fails, so a run explains itself in the log.
fn serve<X: Commands + Controllers>(tp: &mut Tp<'_, '_>, cmds: &mut Hooked<X>) -> Result<(), Msg> {
    let end = BootHal::now() + LIMIT;
    let t0 = ms();
    let key = |s: irdma_nvmet::rdma::Stats, q: usize| {
        (s.accepted, s.rejected, s.closed, s.wr_errors, s.qp_errors, s.fatal, q)
    };
    let mut seen = key(tp.stats(), 0);
    loop {
        if !tp.poll(ms(), cmds) {
            BootHal::relax();
        }
        let s = tp.stats();
        let now = key(s, tp.open_queues());
        if now != seen {
            println!(
                "  peer_nvmet: +{} ms: {} queues open ({} accepted, {} rejected, {} closed), {} controllers; {} capsules, {} WR errors, {} QP errors, {} fatal",
                ms() - t0,
                tp.open_queues(),
                s.accepted,
                s.rejected,
                s.closed,
                cmds.inner.controllers(),
                s.capsules,
                s.wr_errors,
                s.qp_errors,
                s.fatal
            );
            seen = now;
        }
        if cmds.finish && tp.open_queues() == 0 {
            return Ok(());
        }
        if BootHal::now() >= end {
            return Err(msg(format_args!(
                "no 0xC1 end within {LIMIT:?} ({} queues open)",
                tp.open_queues()
            )));
        }
    }
}

/// How many controllers the command layer has (for the log lines).
trait Controllers {
    fn controllers(&self) -> usize;
}

impl<const Q: usize, const C: usize> Controllers for Target<'_, Q, C> {
    fn controllers(&self) -> usize {
        Target::controllers(self)
    }
}
