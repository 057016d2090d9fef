//! The full driver in the guest: `Device::probe` over the BAR, MRs of each
//! PBL level, two RC QPs connected through the model's loopback, RDMA
//! WRITE/READ/SEND with every byte checked, a 1 MiB `rdma_rw` READ and WRITE
//! through a fast-registered MR, post/poll timing, and teardown with the DMA
//! pool back where it started. Ends with a summary table (`  | ` lines).

use core::ptr::NonNull;
use core::time::Duration;

use irdma::device::{Device, ProbeOptions};
use irdma::lan::LanInfo;
use irdma::res::Profile;
use irdma::rw::{DeviceAttrs, Direction, MrPool, RwCtx, RwQp, SgEntry};
use irdma::verbs::{
    AddressVector, Cq, FastRegMr, IpAddr, Mr, MrDesc, Pd, Qp, QpAttr, QpCap, QpInitAttr, QpState,
};
use irdma::wr::{
    Access, PageSize, RecvWr, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
use irdma_hal::{BufferDirection, Dma, Hal, MmioBar};

use super::{Msg, Outcome, Runner, msg};
use crate::bare::hal::{self, BootHal};
use crate::bare::serial::println;
use crate::bare::{arch, clock};

pub(super) type Dev<'b> = Device<BootHal, &'b MmioBar>;
pub(super) type TQp<'d, 'b> = Qp<'d, BootHal, &'b MmioBar>;
pub(super) type TCq<'d, 'b> = Cq<'d, BootHal, &'b MmioBar>;
pub(super) type TMr<'d, 'b> = Mr<'d, BootHal, &'b MmioBar>;
pub(super) type TPd<'d, 'b> = Pd<'d, BootHal, &'b MmioBar>;
pub(super) type Buf = Dma<BootHal>;

/// The node's MAC when `LanInfo` is filled by hand (`lan=hand`; otherwise
/// the firmware's, from the LAN bring-up). Both QPs: loopback.
const HAND_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const IP: [u8; 4] = [10, 0, 0, 1];
/// Enough PBLEs for a level-2 MR (more pages than one SD of PBLEs holds).
pub(super) const PROFILE: Profile = Profile { pbles: 1 << 20, ..Profile::SMALL };
/// Pages of the level-2 MR: one more than a level-1 run can hold.
const L2_PAGES: usize = 262_145;
/// Bytes of the rw transfers.
const RW_BYTES: usize = 1 << 20;
/// Signaled WRITEs of the post/poll timing.
const TIMED: usize = 200;
const WAIT: Duration = Duration::from_secs(2);

/// One row of the summary table.
#[derive(Clone, Copy)]
struct Row {
    name: &'static str,
    ops: u64,
    bytes: u64,
    post: u64,
    poll: u64,
}

/// Post/poll accounting of one scenario.
#[derive(Default)]
struct Meter {
    ops: u64,
    bytes: u64,
    post_cycles: u64,
    posts: u64,
    poll_cycles: u64,
    polled: u64,
}

impl Meter {
    fn row(&self, name: &'static str) -> Row {
        Row {
            name,
            ops: self.ops,
            bytes: self.bytes,
            post: self.post_cycles.checked_div(self.posts).unwrap_or(0),
            poll: self.poll_cycles.checked_div(self.polled).unwrap_or(0),
        }
    }
}

pub(super) const EMPTY_WC: WorkCompletion =
    WorkCompletion { status: WcStatus::GeneralErr, ..WorkCompletion::EMPTY };

pub(super) fn buf(pages: usize) -> Result<Buf, Msg> {
    Dma::new(pages, BufferDirection::Both).map_err(|e| msg(format_args!("{pages} pages: {e:?}")))
}

/// Byte `i` of pattern `seed`.
fn pat(seed: u8, i: usize) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(seed).wrapping_add((i >> 12) as u8)
}

pub(super) fn fill(b: &Buf, seed: u8) {
    let mut chunk = [0u8; 512];
    for off in (0..b.len()).step_by(chunk.len()) {
        for (j, c) in chunk.iter_mut().enumerate() {
            *c = pat(seed, off + j);
        }
        let n = chunk.len().min(b.len() - off);
        let _ = b.write_bytes(off, &chunk[..n]);
    }
}

/// Checks `len` bytes of `b` at `off` against pattern `seed` from `from`.
pub(super) fn check(b: &Buf, off: usize, len: usize, seed: u8, from: usize) -> Result<(), Msg> {
    let mut chunk = [0u8; 512];
    let mut done = 0;
    while done < len {
        let n = chunk.len().min(len - done);
        ensure!(b.read_bytes(off + done, &mut chunk[..n]), "read outside the buffer");
        for (j, c) in chunk[..n].iter().enumerate() {
            let want = pat(seed, from + done + j);
            ensure!(*c == want, "byte {}: {c:#04x}, expected {want:#04x}", done + j);
        }
        done += n;
    }
    Ok(())
}

pub(super) fn pages_of(b: &Buf, out: &mut [u64]) -> usize {
    let n = b.pages().min(out.len());
    for (i, p) in out.iter_mut().take(n).enumerate() {
        *p = b.paddr() + (i * 4096) as u64;
    }
    n
}

/// `Device::reg_mr` with every access the scenarios need.
///
/// # Safety
///
/// As for `Device::reg_mr`: `pages` are pool pages the caller owns, which
/// stay allocated until the returned MR is deregistered.
pub(super) unsafe fn reg<'d, 'b>(
    dev: &'d Dev<'b>,
    pd: &TPd<'d, 'b>,
    iova: u64,
    len: u64,
    pages: &[u64],
    zero_based: bool,
) -> Result<TMr<'d, 'b>, Msg> {
    let d = MrDesc {
        iova,
        length: len,
        page_size: PageSize::Size4K,
        pages,
        zero_based,
        access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    };
    // SAFETY: forwarded to the caller (this function's contract).
    unsafe { dev.reg_mr(pd, &d) }.map_err(|e| msg(format_args!("reg_mr: {e:?}")))
}

/// The most pages [`reg_buf`] maps (one 1 MiB `rw` region).
const MAX_REG_PAGES: usize = RW_BYTES / 4096;

/// Where [`reg_buf`] puts a buffer's pages.
#[derive(Clone, Copy)]
pub(super) enum Map {
    /// At the buffer's bus address, in order (a level-0 MR).
    Identity,
    /// At this IOVA, in order.
    At(u64),
    /// At this IOVA, last page first (the device walks a level-1 PBL).
    Reversed(u64),
    /// Zero-based (IOVA 0), in order.
    ZeroBased,
}

/// [`reg`] over every page of `b` (at most [`MAX_REG_PAGES`]), laid out
/// as `map` says.
///
/// # Safety
///
/// As for [`reg`]: `b` stays allocated until the returned MR is
/// deregistered (declare it before the MR, or after it in a struct).
pub(super) unsafe fn reg_buf<'d, 'b>(
    dev: &'d Dev<'b>,
    pd: &TPd<'d, 'b>,
    b: &Buf,
    map: Map,
) -> Result<TMr<'d, 'b>, Msg> {
    let mut all = [0u64; MAX_REG_PAGES];
    let n = pages_of(b, &mut all);
    ensure!(n == b.pages(), "{} pages: more than reg_buf maps", b.pages());
    let pages = &mut all[..n];
    let (iova, zero_based) = match map {
        Map::Identity => (b.paddr(), false),
        Map::At(iova) => (iova, false),
        Map::Reversed(iova) => {
            pages.reverse();
            (iova, false)
        }
        Map::ZeroBased => (0, true),
    };
    // SAFETY: `pages` are `b`'s, which the caller keeps allocated until the
    // MR is deregistered (this function's contract).
    unsafe { reg(dev, pd, iova, (n * 4096) as u64, pages, zero_based) }
}

/// [`reg_buf`] over `src` and `dst`, both [`Map::Identity`].
///
/// # Safety
///
/// As for [`reg_buf`], for both buffers.
unsafe fn reg_pair<'d, 'b>(
    dev: &'d Dev<'b>,
    pd: &TPd<'d, 'b>,
    src: &Buf,
    dst: &Buf,
) -> Result<(TMr<'d, 'b>, TMr<'d, 'b>), Msg> {
    // SAFETY: forwarded to the caller (this function's contract).
    let smr = unsafe { reg_buf(dev, pd, src, Map::Identity) }?;
    // SAFETY: as above, for `dst`.
    Ok((smr, unsafe { reg_buf(dev, pd, dst, Map::Identity) }?))
}

/// The QP capacities of one connection's side in the CM and peer
/// scenarios: 8 WRs of one SGE each way, no inline data.
pub(super) const SIDE_CAP: QpCap =
    QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };

/// A PD, a CQ of `cqe` entries and an RC QP with `cap` on them (the QP
/// comes back in RESET).
pub(super) fn rc_objects<'d, 'b>(
    dev: &'d Dev<'b>,
    cqe: u32,
    cap: QpCap,
) -> Result<(TPd<'d, 'b>, TCq<'d, 'b>, TQp<'d, 'b>), Msg> {
    let e = |e| msg(format_args!("{e:?}"));
    let pd = dev.alloc_pd().map_err(e)?;
    let cq = dev.create_cq(cqe).map_err(e)?;
    let mut attr = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap };
    let qp = dev.create_qp(&pd, &mut attr).map_err(e)?;
    Ok((pd, cq, qp))
}

/// INIT → RTR → RTS towards `peer` on this node (loopback).
fn connect(qp: &mut TQp<'_, '_>, peer: u32, mac: [u8; 6]) -> Result<(), Msg> {
    let e = |e| msg(format_args!("modify: {e:?}"));
    qp.modify(&QpAttr::new(QpState::Init)).map_err(e)?;
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.dest_qp = peer;
    rtr.rq_psn = 100;
    rtr.path_mtu = 1024;
    rtr.av = Some(AddressVector {
        dest_mac: mac,
        dest_ip: IpAddr::V4(IP),
        src_ip: IpAddr::V4(IP),
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        vlan: None,
    });
    qp.modify(&rtr).map_err(e)?;
    let mut rts = QpAttr::new(QpState::Rts);
    rts.sq_psn = 100;
    qp.modify(&rts).map_err(e)
}

/// Polls `cq` until one completion arrives; the cycles of the poll call that
/// returned it go to `m`.
fn poll_one<'d, 'b>(cq: &mut TCq<'d, 'b>, m: &mut Meter) -> Result<WorkCompletion, Msg> {
    let end = BootHal::now() + WAIT;
    loop {
        let mut wc = [EMPTY_WC; 1];
        let t0 = arch::rdtsc();
        let n = cq.poll(&mut wc);
        let dt = arch::rdtsc().wrapping_sub(t0);
        if n == 1 {
            m.poll_cycles += dt;
            m.polled += 1;
            return Ok(wc[0]);
        }
        ensure!(BootHal::now() < end, "no completion within {WAIT:?}");
        BootHal::relax();
    }
}

fn post<'d, 'b>(qp: &mut TQp<'d, 'b>, wr: SendWr<'_>, m: &mut Meter) -> Result<(), Msg> {
    let t0 = arch::rdtsc();
    let r = qp.post_send(&[wr]);
    m.post_cycles += arch::rdtsc().wrapping_sub(t0);
    m.posts += 1;
    m.ops += 1;
    r.map_err(|e| msg(format_args!("post_send: {e:?}")))
}

/// Posts one signaled `opcode` WR from `sge` on `o.q1` and waits for its
/// `want` completion.
fn post_wait(
    o: &mut Objs<'_, '_>,
    m: &mut Meter,
    wr_id: u64,
    opcode: WrOpcode,
    sge: &[Sge],
    want: WcOpcode,
) -> Result<(), Msg> {
    let wr = SendWr { wr_id, opcode, flags: SendFlags::SIGNALED, sg_list: sge };
    post(&mut o.q1, wr, m)?;
    expect(poll_one(&mut o.cq, m)?, wr_id, want)
}

pub(super) fn expect(wc: WorkCompletion, id: u64, op: WcOpcode) -> Result<(), Msg> {
    ensure!(
        (wc.wr_id, wc.status, wc.opcode) == (id, WcStatus::Success, op),
        "completion {:?} {:?} {:?}, expected {id} Success {op:?}",
        wc.wr_id,
        wc.status,
        wc.opcode
    );
    Ok(())
}

/// CQP failures `verbs_fault_injection` injects.
const VERBS_INJECTED: u64 = 2;

/// The device the verbs scenarios run on.
// One value per run, on the stack; there is no allocator to box the PF.
#[allow(clippy::large_enum_variant)]
pub enum Probed<'b> {
    /// From the LAN bring-up of a cold PF (the default).
    Lan(super::lan::Pf<'b>),
    /// From `Device::probe_with` and a hand-filled `LanInfo` (`lan=hand`).
    Hand(Dev<'b>),
}

impl<'b> Probed<'b> {
    fn device(&self) -> &Dev<'b> {
        match self {
            Probed::Lan(pf) => &pf.device,
            Probed::Hand(d) => d,
        }
    }

    fn close(self) -> Result<(), Msg> {
        match self {
            Probed::Lan(pf) => pf.shut_down().map_err(|e| msg(format_args!("shut_down: {e:?}"))),
            Probed::Hand(d) => d.close().map_err(|e| msg(format_args!("close: {e:?}"))),
        }
    }
}

/// The RDMA layer's probe options of the demo (both paths).
pub(super) fn probe_options() -> ProbeOptions {
    let mut o = ProbeOptions::default();
    o.timeouts.create = WAIT;
    o.timeouts.poll_registers = WAIT;
    o.timeouts.ccq = WAIT;
    o.fw_ready_timeout = WAIT;
    o.stag_key_seed = Some(arch::rdtsc() as u8);
    // Interrupt runs (the device has MSI-X, `super::irq`): CEQ 0 and the
    // AEQ on their own vectors.
    if super::irq::enabled() {
        o.interrupts = Some(irdma::irq::IrqConfig { shared: false, ceq_itr_us: 0 });
    }
    o
}

/// `lan=hand`: the `device_probe` line with a hand-filled `LanInfo`, for
/// hosts where something else owns the LAN side (the model must be warm:
/// `--model-arg --warm`, or the cold PF gates the traffic).
pub fn probe_by_hand<'b>(r: &mut Runner, bar: Result<&'b MmioBar, Msg>) -> Result<Probed<'b>, Msg> {
    let bar = match bar {
        Ok(b) => b,
        Err(why) => {
            r.run("device_probe", || Ok(Outcome::Skip(why.clone())));
            return Err(why);
        }
    };
    let mut dev = None;
    r.run("device_probe", || {
        // The bring-up scenarios committed the FPM already; a function
        // accepts one commit per reset, so reset it as the LAN driver would.
        super::bringup::request_fault(bar, irdma_boot::contract::FAULT_FUNCTION_RESET, 0, 0, 0)?;
        let mut lan = LanInfo::single_tc(0, 6, HAND_MAC, 1500);
        lan.msix = super::irq::msix();
        let d = Device::probe_with(bar, lan, PROFILE, probe_options())
            .map_err(|e| msg(format_args!("probe: {e:?}")))?;
        let f = d.footprint();
        println!(
            "  device_probe: hand-filled LanInfo, after a function reset; firmware {}.{}, \
             qs_handle {}, holds {} KiB of DMA ({} KiB control)",
            d.fw_version().0,
            d.fw_version().1,
            d.qs_handle(),
            f.current_bytes / 1024,
            f.control_bytes / 1024
        );
        dev = Some(d);
        Ok(Outcome::Pass)
    });
    dev.map(Probed::Hand).ok_or_else(|| msg(format_args!("device_probe failed")))
}

/// The CM scenarios (`super::cm`), run after the verbs scenarios.
const CM_NAMES: [&str; 2] = ["cm_connect_active", "cm_connect_passive"];

/// The verbs scenarios `run` reports, in order (`device_close` last).
const NAMES: [&str; 12] = [
    "verbs_objects",
    "mr_levels",
    "rc_write_read_send",
    "rc_post_poll_timing",
    "rc_batch_timing",
    "verbs_fault_injection",
    "rw_1mib_read",
    "rw_1mib_write",
    "cq_resize",
    "rc_error_completion",
    "verbs_teardown",
    "device_close",
];

/// Runs the verbs scenarios on `probed` (its `device_probe` line is
/// printed already) against `bar` (`Err`: skip them all, saying why);
/// `injected` CQP errors were injected before (the model must report
/// exactly those plus this module's, no other failed op). `live0` and
/// `bad0`: the pool before the device existed.
pub fn run(
    r: &mut Runner,
    bar: Result<&MmioBar, Msg>,
    probed: Result<Probed<'_>, Msg>,
    injected: u64,
    (live0, bad0): (usize, u64),
    peer: Result<Option<irdma_boot::peercfg::PeerCfg>, irdma_boot::peercfg::PeerCfgError>,
) {
    // a live run against a Linux peer: only its scenario uses the device
    let live_run = matches!(peer, Ok(Some(_)));
    let all = || {
        NAMES
            .iter()
            .chain(CM_NAMES.iter())
            .chain(super::peer::NAMES.iter())
            .chain(super::irq::NAMES.iter())
    };
    let bar = match bar {
        Ok(b) => b,
        Err(why) => {
            for n in all() {
                r.run(n, || Ok(Outcome::Skip(why.clone())));
            }
            return;
        }
    };
    let mut rows: heapless::Vec<Row, 12> = heapless::Vec::new();
    let mut probed = probed.ok();
    match probed.as_ref() {
        Some(p) => run_device(r, p.device(), bar, live_run, peer, &mut rows),
        None => {
            for n in all().filter(|&&n| n != "device_close") {
                r.run(n, || bail!("no device (device_probe failed)"));
            }
        }
    }
    // Every verbs object is gone now; the device goes last (with the LAN
    // side: PE filter off, qsets removed, VSI freed, admin queue off).
    let want_errors = injected + if live_run { 0 } else { VERBS_INJECTED };
    r.run("device_close", || close(probed.take(), bar, (live0, bad0), want_errors));
    print_table(&rows);
}

/// `run` with a device: the verbs and CM scenarios (skipped in a
/// `live_run`), the peer scenarios, the interrupt scenarios (skipped in a
/// `live_run`).
fn run_device(
    r: &mut Runner,
    d: &Dev<'_>,
    bar: &MmioBar,
    live_run: bool,
    peer: Result<Option<irdma_boot::peercfg::PeerCfg>, irdma_boot::peercfg::PeerCfgError>,
    rows: &mut heapless::Vec<Row, 12>,
) {
    let why = msg(format_args!("live run against a Linux peer (peer=)"));
    if live_run {
        for n in NAMES[..NAMES.len() - 1].iter().chain(CM_NAMES.iter()) {
            r.run(n, || Ok(Outcome::Skip(why.clone())));
        }
    } else {
        run_on(r, d, rows);
        // Connections through the CM with the model process's peer,
        // on the device the verbs scenarios left clean.
        super::cm::run(r, d, bar);
    }
    // The live runs with a Linux peer on the model's Ethernet port
    // (skipped without `peer=`).
    super::peer::run(r, d, peer);
    // Completion by interrupt (skipped without MSI-X or a live run).
    if live_run {
        super::irq::skip_all(r, &why);
    } else {
        super::irq::run(r, d, bar);
    }
}

/// `device_close`: closes the device, then the pool must be back at
/// `live0` pages with `bad0` refused frees, and the model must have seen no
/// DMA fault and exactly `want_errors` failed CQP ops.
fn close(
    probed: Option<Probed<'_>>,
    bar: &MmioBar,
    (live0, bad0): (usize, u64),
    want_errors: u64,
) -> Result<Outcome, Msg> {
    let p = need(probed, "device")?;
    p.close()?;
    let live = hal::stats().live_pages;
    ensure!(live == live0, "leak: {live} live pool pages, {live0} before the device");
    ensure!(hal::bad_frees() == bad0, "the pool refused a free");
    let m = super::bringup::model_counters(bar)?;
    ensure!(m.dma_faults == 0, "the model saw {} DMA faults", m.dma_faults);
    ensure!(
        m.errors == want_errors,
        "the model failed {} CQP ops, {want_errors} were injected",
        m.errors
    );
    println!(
        "  device_close: pool balanced ({live} pages live, peak {} MiB of {} MiB this run), \
         the model ran {} CQP ops, {} failed",
        hal::stats().peak_pages / 256,
        hal::pool_pages() / 256,
        m.ops,
        m.errors
    );
    Ok(Outcome::Pass)
}

fn need<T>(v: Option<T>, what: &str) -> Result<T, Msg> {
    v.ok_or_else(|| msg(format_args!("no {what} (an earlier scenario failed)")))
}

fn print_table(rows: &[Row]) {
    let ns = |c: u64| clock::cycles_to_duration(c).as_nanos();
    println!(
        "  | cycles/post: per WR posted (rw: per rdma_rw_ctx_post call); cycles/poll: per \
         completion, over the poll_cq calls that returned any. A scenario's first post/poll \
         includes TCG translating that code; the two timing rows are the steady state."
    );
    println!(
        "  | {:<20} {:>5} {:>9} {:>11} {:>9} {:>11} {:>9}",
        "scenario", "ops", "bytes", "cycles/post", "ns/post", "cycles/poll", "ns/poll"
    );
    for r in rows {
        println!(
            "  | {:<20} {:>5} {:>9} {:>11} {:>9} {:>11} {:>9}",
            r.name,
            r.ops,
            r.bytes,
            r.post,
            ns(r.post),
            r.poll,
            ns(r.poll)
        );
    }
}

/// The objects the data scenarios share. Field order is drop order: QPs
/// before their CQ (the device refuses to destroy a CQ a QP still uses).
pub(super) struct Objs<'d, 'b> {
    pub(super) q1: TQp<'d, 'b>,
    pub(super) q2: TQp<'d, 'b>,
    pub(super) cq: TCq<'d, 'b>,
    pub(super) pd: TPd<'d, 'b>,
}

pub(super) fn objects<'d, 'b>(dev: &'d Dev<'b>) -> Result<Objs<'d, 'b>, Msg> {
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 0,
    };
    let (pd, cq, mut q1) = rc_objects(dev, 256, cap)?;
    let mut a2 = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap };
    let mut q2 = dev.create_qp(&pd, &mut a2).map_err(|e| msg(format_args!("{e:?}")))?;
    let (n1, n2) = (q1.qp_num(), q2.qp_num());
    let mac = dev.lan_info().mac;
    connect(&mut q1, n2, mac)?;
    connect(&mut q2, n1, mac)?;
    ensure!(q1.state() == QpState::Rts && q2.state() == QpState::Rts, "QPs not in RTS");
    println!(
        "  verbs_objects: PD {}, CQ {}, RC QPs {n1} <-> {n2} (loopback), RTS",
        pd.id(),
        cq.id()
    );
    Ok(Objs { q1, q2, cq, pd })
}

fn run_on<'b>(r: &mut Runner, dev: &Dev<'b>, rows: &mut heapless::Vec<Row, 12>) {
    let failed0 = r.totals().1;
    run_scenarios(r, dev, rows);
    if r.totals().1 > failed0 {
        print_flight(dev);
    }
}

/// A scenario failed: what the device did last (its flight recorder).
fn print_flight(dev: &Dev<'_>) {
    println!("  flight recorder (oldest first):");
    for rec in dev.flight_recorder() {
        println!("    {} {:?}", rec.seq, rec.event);
    }
    dev.log_flight_recorder();
}

fn run_scenarios<'b>(r: &mut Runner, dev: &Dev<'b>, rows: &mut heapless::Vec<Row, 12>) {
    let before = dev.resource_usage();
    let mut objs = None;
    r.run("verbs_objects", || {
        objs = Some(objects(dev)?);
        Ok(Outcome::Pass)
    });
    let Some(o) = objs.as_mut() else {
        // every scenario after `verbs_objects` but `device_close`
        for n in &NAMES[1..NAMES.len() - 1] {
            r.run(n, || bail!("no QPs (verbs_objects failed)"));
        }
        return;
    };
    // The metered scenarios: a row of the table each.
    let metered: [(&str, Metered); 4] = [
        ("mr_levels", mr_levels),
        ("rc_write_read_send", write_read_send),
        ("rc_post_poll_timing", timing),
        ("rc_batch_timing", batch_timing),
    ];
    for (name, scenario) in metered {
        let mut m = Meter::default();
        r.run(name, || scenario(dev, o, &mut m).map(|()| Outcome::Pass));
        let _ = rows.push(m.row(name));
    }
    r.run("verbs_fault_injection", || verbs_faults(dev, o).map(|()| Outcome::Pass));
    for (name, dir) in
        [("rw_1mib_read", Direction::FromDevice), ("rw_1mib_write", Direction::ToDevice)]
    {
        let mut m = Meter::default();
        r.run(name, || rw_transfer(dev, o, dir, &mut m).map(|()| Outcome::Pass));
        let _ = rows.push(m.row(name));
    }
    r.run("cq_resize", || cq_resize(dev, o).map(|()| Outcome::Pass));
    // Last on these QPs: it leaves the sender in ERROR.
    r.run("rc_error_completion", || error_completion(dev, o).map(|()| Outcome::Pass));
    r.run("verbs_teardown", || {
        let mut o = need(objs.take(), "verbs objects")?;
        let e = |what: &str, e| msg(format_args!("destroy {what}: {e:?}"));
        o.q1.destroy().map_err(|x| e("QP 1", x))?;
        o.q2.destroy().map_err(|x| e("QP 2", x))?;
        o.cq.destroy().map_err(|x| e("CQ", x))?;
        drop(o);
        // PBLE chunks stay backed once added (as in Linux): SDs may grow.
        let now = dev.resource_usage();
        let same = irdma::verbs::ResourceUsage { backed_sds: before.backed_sds, ..now };
        ensure!(same == before, "ids or PBLEs still in use: {now:?}, before {before:?}");
        println!("  verbs_teardown: QPs, CQ, PD destroyed; every id and PBLE back");
        Ok(Outcome::Pass)
    });
}

/// A scenario whose posts and polls go into a row of the summary table.
type Metered = for<'d, 'b> fn(&'d Dev<'b>, &mut Objs<'d, 'b>, &mut Meter) -> Result<(), Msg>;

/// Level 0 (contiguous), level 1 (pages out of order) and level 2 (more
/// pages than one level-1 run) MRs, each written through once.
fn mr_levels<'d, 'b>(dev: &'d Dev<'b>, o: &mut Objs<'d, 'b>, m: &mut Meter) -> Result<(), Msg> {
    let src = buf(4)?;
    fill(&src, 3);
    // SAFETY: `src` is declared earlier in this function and so dropped
    // after the MR (deregistered in its `Drop`).
    let l0 = unsafe { reg_buf(dev, &o.pd, &src, Map::Identity) }?;
    ensure!(l0.pbl_level() == 0, "contiguous MR at level {}", l0.pbl_level());
    let dst = buf(4)?;
    let iova1 = 0x7000_0000u64;
    // SAFETY: as for `l0`, with `dst`.
    let l1 = unsafe { reg_buf(dev, &o.pd, &dst, Map::Reversed(iova1)) }?;
    ensure!(l1.pbl_level() == 1, "scattered MR at level {}", l1.pbl_level());
    let last = dst.paddr() + 3 * 4096;
    ensure!(l1.pble_entry(0) == Some(last), "PBLE 0 does not hold the last page");

    // Level 2: IOVA page i maps to physical page i % 2 of `phys`; the page
    // list itself lives in pool memory (no allocator here).
    let phys = buf(2)?;
    let list = buf((L2_PAGES * 8).div_ceil(4096))?;
    for i in 0..L2_PAGES {
        list.write_u64(i * 8, phys.paddr() + ((i % 2) * 4096) as u64);
    }
    // SAFETY: `list` is L2_PAGES × 8 bytes (or more) of initialised, 8-byte
    // aligned pool memory that lives until the end of this function and is
    // not written while the slice exists.
    let l2_pages = unsafe {
        core::slice::from_raw_parts(list.vaddr().as_ptr().cast::<u64>().cast_const(), L2_PAGES)
    };
    let free_before = dev.resource_usage().pble_free;
    // SAFETY: the pages are `phys`'s, declared earlier in this function and
    // so dropped after the MR (deregistered in its `Drop`).
    let l2 = unsafe { reg(dev, &o.pd, 0, L2_PAGES as u64 * 4096, l2_pages, true) }?;
    ensure!(l2.pbl_level() == 2, "{L2_PAGES}-page MR at level {}", l2.pbl_level());
    ensure!(l2.pble_entry(262_144) == Some(phys.paddr()), "level-2 PBLE of the last page");

    // One WRITE into each of level 1 and level 2, from level 0.
    for (i, (remote, rkey)) in
        [(iova1 + 4096 + 8, l1.rkey()), (262_143 * 4096 + 16, l2.rkey())].into_iter().enumerate()
    {
        let sge = [Sge { addr: src.paddr() + 64 * i as u64, length: 64, lkey: l0.lkey() }];
        let write = WrOpcode::RdmaWrite { remote_addr: remote, rkey };
        post_wait(o, m, 10 + i as u64, write, &sge, WcOpcode::RdmaWrite)?;
        m.bytes += 64;
    }
    // IOVA page 1 of the level-1 MR is physical page 2 (reversed).
    check(&dst, 2 * 4096 + 8, 64, 3, 0).map_err(|e| msg(format_args!("level 1: {e}")))?;
    // IOVA page 262143 is odd: physical page 1 of `phys`.
    check(&phys, 4096 + 16, 64, 3, 64).map_err(|e| msg(format_args!("level 2: {e}")))?;
    let mut z = [0u8; 64];
    ensure!(phys.read_bytes(16, &mut z) && z == [0; 64], "level 2: even page written");
    drop(l2);
    ensure!(dev.resource_usage().pble_free == free_before, "PBLEs of the level-2 MR not returned");
    println!("  mr_levels: levels 0, 1, 2 ({L2_PAGES} pages); WRITEs landed through each");
    Ok(())
}

/// RDMA WRITE 6000 B into a level-1 MR, READ 5000 B back, SEND 777 B.
fn write_read_send<'d, 'b>(
    dev: &'d Dev<'b>,
    o: &mut Objs<'d, 'b>,
    m: &mut Meter,
) -> Result<(), Msg> {
    let src = buf(4)?;
    fill(&src, 7);
    // SAFETY: `src` is declared earlier in this function and so dropped
    // after the MR (deregistered in its `Drop`).
    let smr = unsafe { reg_buf(dev, &o.pd, &src, Map::Identity) }?;
    let dst = buf(4)?;
    let iova = 0x7100_0000u64;
    // SAFETY: as for `smr`, with `dst`.
    let dmr = unsafe { reg_buf(dev, &o.pd, &dst, Map::Reversed(iova)) }?;
    let sge = [Sge { addr: src.paddr(), length: 6000, lkey: smr.lkey() }];
    let write = WrOpcode::RdmaWrite { remote_addr: iova + 100, rkey: dmr.rkey() };
    post_wait(o, m, 1, write, &sge, WcOpcode::RdmaWrite)?;
    m.bytes += 6000;
    // IOVA page p lives in physical page 3 - p.
    let mut off = 100usize;
    while off < 6100 {
        let page = off / 4096;
        let n = (4096 - off % 4096).min(6100 - off);
        check(&dst, (3 - page) * 4096 + off % 4096, n, 7, off - 100)
            .map_err(|e| msg(format_args!("WRITE: {e}")))?;
        off += n;
    }
    read_back(dev, o, m, iova + 100, dmr.rkey())?;
    let sge = [Sge { addr: src.paddr() + 8192, length: 777, lkey: smr.lkey() }];
    send_recv(dev, o, m, &sge)?;
    println!(
        "  rc_write_read_send: WRITE 6000 B through a level-1 MR, READ 5000 B, SEND 777 B; every byte checked"
    );
    Ok(())
}

/// `write_read_send`'s READ: 5000 B from `remote_addr` (pattern 7 from its
/// first byte) into a fresh region, checked.
fn read_back<'d, 'b>(
    dev: &'d Dev<'b>,
    o: &mut Objs<'d, 'b>,
    m: &mut Meter,
    remote_addr: u64,
    rkey: u32,
) -> Result<(), Msg> {
    let back = buf(2)?;
    // SAFETY: `back` is declared earlier in this function and so dropped
    // after the MR (deregistered in its `Drop`).
    let bmr = unsafe { reg_buf(dev, &o.pd, &back, Map::Identity) }?;
    let sge = [Sge { addr: back.paddr(), length: 5000, lkey: bmr.lkey() }];
    let read = WrOpcode::RdmaRead { remote_addr, rkey };
    post_wait(o, m, 2, read, &sge, WcOpcode::RdmaRead)?;
    m.bytes += 5000;
    check(&back, 0, 5000, 7, 0).map_err(|e| msg(format_args!("READ: {e}")))
}

/// `write_read_send`'s SEND of `sge` (pattern 7 from byte 8192) from `q1`
/// into a receive posted on `q2`: both completions once, the bytes checked.
fn send_recv<'d, 'b>(
    dev: &'d Dev<'b>,
    o: &mut Objs<'d, 'b>,
    m: &mut Meter,
    sge: &[Sge; 1],
) -> Result<(), Msg> {
    let rbuf = buf(1)?;
    // SAFETY: `rbuf` is declared earlier in this function and so dropped
    // after the MR (deregistered in its `Drop`).
    let rmr = unsafe { reg_buf(dev, &o.pd, &rbuf, Map::ZeroBased) }?;
    let rsge = [Sge { addr: 0, length: 4096, lkey: rmr.lkey() }];
    o.q2.post_recv(&[RecvWr { wr_id: 30, sg_list: &rsge }])
        .map_err(|e| msg(format_args!("post_recv: {e:?}")))?;
    m.ops += 1;
    let wr = SendWr { wr_id: 3, opcode: WrOpcode::Send, flags: SendFlags::SIGNALED, sg_list: sge };
    post(&mut o.q1, wr, m)?;
    let len = sge[0].length;
    let n2 = o.q2.qp_num();
    let mut got_send = false;
    let mut got_recv = false;
    while !(got_send && got_recv) {
        let wc = poll_one(&mut o.cq, m)?;
        match (wc.wr_id, wc.status, wc.opcode) {
            (3, WcStatus::Success, WcOpcode::Send) if !got_send => got_send = true,
            (30, WcStatus::Success, WcOpcode::Recv) if !got_recv => {
                ensure!(wc.byte_len == len && wc.qp_num == n2, "receive {wc:?}");
                got_recv = true;
            }
            _ => bail!("unexpected completion {wc:?}"),
        }
    }
    m.bytes += u64::from(len);
    check(&rbuf, 0, len as usize, 7, 8192).map_err(|e| msg(format_args!("SEND: {e}")))
}

/// `TIMED` signaled 64-byte WRITEs, one at a time: cycles per post and per
/// completing poll.
fn timing<'d, 'b>(dev: &'d Dev<'b>, o: &mut Objs<'d, 'b>, m: &mut Meter) -> Result<(), Msg> {
    let src = buf(1)?;
    let dst = buf(1)?;
    fill(&src, 9);
    // SAFETY: `src` and `dst` are declared earlier in this function and so
    // dropped after the MRs (deregistered in their `Drop`).
    let (smr, dmr) = unsafe { reg_pair(dev, &o.pd, &src, &dst) }?;
    let t0 = arch::rdtsc();
    for i in 0..TIMED {
        let off = (i % 64) * 64;
        let sge = [Sge { addr: src.paddr() + off as u64, length: 64, lkey: smr.lkey() }];
        let wr = SendWr {
            wr_id: 1000 + i as u64,
            opcode: WrOpcode::RdmaWrite { remote_addr: dst.paddr() + off as u64, rkey: dmr.rkey() },
            flags: SendFlags::SIGNALED,
            sg_list: &sge,
        };
        post(&mut o.q1, wr, m)?;
        expect(poll_one(&mut o.cq, m)?, 1000 + i as u64, WcOpcode::RdmaWrite)?;
        m.bytes += 64;
    }
    let total = arch::rdtsc().wrapping_sub(t0);
    check(&dst, 0, 4096, 9, 0)?;
    println!(
        "  rc_post_poll_timing: {TIMED} WRITEs, {} cycles per round trip ({} ns)",
        total / TIMED as u64,
        clock::cycles_to_duration(total / TIMED as u64).as_nanos()
    );
    Ok(())
}

/// `BATCHES` batches of `BATCH` signaled 128-byte WRITEs, each batch one
/// `post_send` call, completions polled 16 at a time: cycles per WR posted
/// and per completion polled, amortised.
fn batch_timing<'d, 'b>(dev: &'d Dev<'b>, o: &mut Objs<'d, 'b>, m: &mut Meter) -> Result<(), Msg> {
    const BATCH: usize = 32;
    const BATCHES: usize = 8;
    const LEN: usize = 128;
    let src = buf(1)?;
    let dst = buf(1)?;
    fill(&src, 13);
    // SAFETY: `src` and `dst` are declared earlier in this function and so
    // dropped after the MRs (deregistered in their `Drop`).
    let (smr, dmr) = unsafe { reg_pair(dev, &o.pd, &src, &dst) }?;
    let sges: [[Sge; 1]; BATCH] = core::array::from_fn(|i| {
        [Sge { addr: src.paddr() + (i * LEN) as u64, length: LEN as u32, lkey: smr.lkey() }]
    });
    let t0 = arch::rdtsc();
    for b in 0..BATCHES {
        let base = 2000 + (b * BATCH) as u64;
        let wrs: [SendWr<'_>; BATCH] = core::array::from_fn(|i| SendWr {
            wr_id: base + i as u64,
            opcode: WrOpcode::RdmaWrite {
                remote_addr: dst.paddr() + (i * LEN) as u64,
                rkey: dmr.rkey(),
            },
            flags: SendFlags::SIGNALED,
            sg_list: &sges[i],
        });
        let t = arch::rdtsc();
        let r = o.q1.post_send(&wrs);
        m.post_cycles += arch::rdtsc().wrapping_sub(t);
        m.posts += BATCH as u64;
        m.ops += BATCH as u64;
        r.map_err(|e| msg(format_args!("batch {b}: post_send: {e:?}")))?;
        let mut got = 0usize;
        let end = BootHal::now() + WAIT;
        while got < BATCH {
            let mut wc = [EMPTY_WC; 16];
            let t = arch::rdtsc();
            let n = o.cq.poll(&mut wc);
            let dt = arch::rdtsc().wrapping_sub(t);
            if n > 0 {
                m.poll_cycles += dt;
                m.polled += n as u64;
            }
            for w in wc.iter().take(n) {
                expect(*w, base + got as u64, WcOpcode::RdmaWrite)?;
                got += 1;
            }
            ensure!(
                got == BATCH || BootHal::now() < end,
                "batch {b}: {got} of {BATCH} completions"
            );
        }
        m.bytes += (BATCH * LEN) as u64;
    }
    let total = arch::rdtsc().wrapping_sub(t0);
    check(&dst, 0, BATCH * LEN, 13, 0)?;
    let per = total / (BATCH * BATCHES) as u64;
    println!(
        "  rc_batch_timing: {BATCHES} x {BATCH} WRITEs of {LEN} B, {per} cycles per WR end to end \
         ({} ns)",
        clock::cycles_to_duration(per).as_nanos()
    );
    Ok(())
}

/// CQP failures injected under verbs (through the mailbox): CREATE_CQ and
/// REG_MR fail with the chosen codes, nothing is leaked (ids, PBLEs, pool
/// pages), and the same verb succeeds right after.
fn verbs_faults<'d, 'b>(dev: &'d Dev<'b>, o: &mut Objs<'d, 'b>) -> Result<(), Msg> {
    // SAFETY: only the harness mailbox is written through this copy (at 8
    // MiB, outside the GEN_2 register space the device decodes).
    let bar = unsafe { *dev.bar() };
    let usage = dev.resource_usage();
    let live = hal::stats().live_pages;
    let fail_next = |major, minor| {
        super::bringup::request_fault(bar, irdma_boot::contract::FAULT_FAIL_CQP_OP, 0, major, minor)
    };
    fail_next(0xf001, 0x0055)?;
    match dev.create_cq(16) {
        Err(e) => ensure!(e.hw_codes() == Some((0xf001, 0x0055)), "create_cq: {e:?}"),
        Ok(_) => bail!("create_cq succeeded through an injected failure"),
    }
    ensure!(dev.resource_usage() == usage, "ids held after the failed create_cq");
    ensure!(hal::stats().live_pages == live, "pool pages held after the failed create_cq");
    let mut cq = dev.create_cq(16).map_err(|e| msg(format_args!("create_cq retry: {e:?}")))?;
    cq.destroy().map_err(|e| msg(format_args!("destroy_cq: {e:?}")))?;
    drop(cq);

    let b = buf(2)?;
    let mut pages = [0u64; 2];
    pages_of(&b, &mut pages);
    pages.reverse();
    let live = hal::stats().live_pages;
    fail_next(0xffff, 0x8002)?;
    let desc = MrDesc {
        iova: 0x6000_0000,
        length: 8192,
        page_size: PageSize::Size4K,
        pages: &pages,
        zero_based: false,
        access: Access::LOCAL_WRITE | Access::REMOTE_READ,
    };
    // SAFETY: the pages are `b`'s, declared above and dropped after the MR
    // (this attempt is refused by the injected failure in any case).
    match unsafe { dev.reg_mr(&o.pd, &desc) } {
        Err(e) => ensure!(e.hw_codes() == Some((0xffff, 0x8002)), "reg_mr: {e:?}"),
        Ok(_) => bail!("reg_mr succeeded through an injected failure"),
    }
    ensure!(dev.resource_usage() == usage, "ids or PBLEs held after the failed reg_mr");
    ensure!(hal::stats().live_pages == live, "pool pages held after the failed reg_mr");
    // SAFETY: the pages are `b`'s, declared above and so dropped after `mr`.
    let mr = unsafe { dev.reg_mr(&o.pd, &desc) }
        .map_err(|e| msg(format_args!("reg_mr retry: {e:?}")))?;
    ensure!(mr.pbl_level() == 1, "retried MR at level {}", mr.pbl_level());
    drop(mr);
    ensure!(dev.resource_usage() == usage, "ids or PBLEs held after dereg");
    println!(
        "  verbs_fault_injection: CREATE_CQ and REG_MR failed with the injected codes, nothing \
         held, both retried fine"
    );
    Ok(())
}

/// `ib_resize_cq` with completions still in the old ring (verbs.c:
/// irdma_resize_cq, MODIFY_CQ): they come first and once, then more
/// traffic than the old ring held lands in the new one, and the old ring is
/// retired.
fn cq_resize<'d, 'b>(dev: &'d Dev<'b>, o: &mut Objs<'d, 'b>) -> Result<(), Msg> {
    let src = buf(1)?;
    fill(&src, 9);
    // SAFETY: `src` is declared earlier in this function and so dropped
    // after the MR (deregistered in its `Drop`).
    let mr = unsafe { reg_buf(dev, &o.pd, &src, Map::Identity) }?;
    let sge = [Sge { addr: src.paddr(), length: 16, lkey: mr.lkey() }];
    let write = |i: u64| SendWr {
        wr_id: 0x5e00 + i,
        opcode: WrOpcode::RdmaWrite { remote_addr: src.paddr() + 1024 + 16 * i, rkey: mr.rkey() },
        flags: SendFlags::SIGNALED,
        sg_list: &sge,
    };
    let mut m = Meter::default();
    for i in 0..3 {
        post(&mut o.q1, write(i), &mut m)?;
    }
    let old = o.cq.cqe();
    o.cq.resize(old * 2).map_err(|e| msg(format_args!("resize: {e:?}")))?;
    ensure!(o.cq.pending_resizes() == 1, "old ring not kept");
    for i in 0..3 {
        let wc = poll_one(&mut o.cq, &mut m)?;
        expect(wc, 0x5e00 + i, WcOpcode::RdmaWrite)?;
    }
    // More than the old ring's 2 × (cqe + 1) entries, 40 at a time.
    let total = u64::from(old) * 2 + 8;
    let mut next = 3u64;
    while next < 3 + total {
        let batch = (3 + total - next).min(40);
        for i in next..next + batch {
            post(&mut o.q1, write(i % 64), &mut m)?;
        }
        for i in next..next + batch {
            let wc = poll_one(&mut o.cq, &mut m)?;
            expect(wc, 0x5e00 + i % 64, WcOpcode::RdmaWrite)?;
        }
        next += batch;
    }
    ensure!(o.cq.pending_resizes() == 0, "old ring not retired");
    let mut wc = [EMPTY_WC; 2];
    ensure!(o.cq.poll(&mut wc) == 0, "a completion came twice");
    println!(
        "  cq_resize: {old} -> {} CQEs with 3 completions pending; {} more through the new ring",
        o.cq.cqe(),
        total
    );
    Ok(())
}

/// The model completes the second of three WRITEs with a flush-class error
/// (REM_ACCESS, injected through the mailbox): the first completes, the
/// second reports `RemAccessErr`, and after `modify(ERROR)` the third is
/// flushed exactly once (spec data-path §5.5, §5.6).
fn error_completion<'d, 'b>(dev: &'d Dev<'b>, o: &mut Objs<'d, 'b>) -> Result<(), Msg> {
    use irdma::uk::cq::flush_code;
    use irdma_hal::wqe::cqe::FLUSH_MAJOR_ERR;
    // SAFETY: only the harness mailbox is written through this copy (at 8
    // MiB, outside the GEN_2 register space the device decodes).
    let bar = unsafe { *dev.bar() };
    let src = buf(1)?;
    let dst = buf(1)?;
    fill(&src, 5);
    // SAFETY: `src` and `dst` are declared earlier in this function and so
    // dropped after the MRs (deregistered in their `Drop`).
    let (smr, dmr) = unsafe { reg_pair(dev, &o.pd, &src, &dst) }?;
    super::bringup::request_fault(
        bar,
        irdma_boot::contract::FAULT_FAIL_WQE,
        1,
        FLUSH_MAJOR_ERR,
        flush_code::REM_ACCESS,
    )?;
    let sges: [[Sge; 1]; 3] = core::array::from_fn(|i| {
        [Sge { addr: src.paddr() + 64 * i as u64, length: 64, lkey: smr.lkey() }]
    });
    let wrs: [SendWr<'_>; 3] = core::array::from_fn(|i| SendWr {
        wr_id: 501 + i as u64,
        opcode: WrOpcode::RdmaWrite { remote_addr: dst.paddr() + 64 * i as u64, rkey: dmr.rkey() },
        flags: SendFlags::SIGNALED,
        sg_list: &sges[i],
    });
    o.q1.post_send(&wrs).map_err(|e| msg(format_args!("post_send: {e:?}")))?;
    let mut m = Meter::default();
    let first = poll_one(&mut o.cq, &mut m)?;
    expect(first, 501, WcOpcode::RdmaWrite)?;
    let second = poll_one(&mut o.cq, &mut m)?;
    ensure!(
        (second.wr_id, second.status) == (502, WcStatus::RemAccessErr),
        "second WRITE: {second:?}"
    );
    o.q1.modify(&QpAttr::new(QpState::Error)).map_err(|e| msg(format_args!("to ERROR: {e:?}")))?;
    let third = poll_one(&mut o.cq, &mut m)?;
    ensure!((third.wr_id, third.status) == (503, WcStatus::WrFlushErr), "third WRITE: {third:?}");
    let mut wc = [EMPTY_WC; 4];
    for _ in 0..100 {
        let n = o.cq.poll(&mut wc);
        ensure!(n == 0, "{n} more completions after the flush: {:?}", wc[0]);
    }
    ensure!(o.q1.state() == QpState::Error, "sender in {:?}", o.q1.state());
    // The first WRITE landed; the failed one and the flushed one did not.
    check(&dst, 0, 64, 5, 0).map_err(|e| msg(format_args!("first WRITE: {e}")))?;
    let mut rest = [0u8; 128];
    ensure!(dst.read_bytes(64, &mut rest) && rest == [0; 128], "a failed WRITE wrote data");
    println!(
        "  rc_error_completion: WRITE 1 ok, WRITE 2 RemAccessErr (injected), WRITE 3 flushed \
         once after modify(ERROR)"
    );
    Ok(())
}

/// The `rw` scenarios' MR pool: one fast-registration MR of 1 MiB.
type RwPool = MrPool<1, { RW_BYTES / 4096 }>;

/// A 1 MiB `rdma_rw` transfer through a fast-registered MR (one FAST_REG +
/// one RDMA READ or WRITE), every byte checked.
fn rw_transfer<'d, 'b>(
    dev: &'d Dev<'b>,
    o: &mut Objs<'d, 'b>,
    dir: Direction,
    m: &mut Meter,
) -> Result<(), Msg> {
    let pages = RW_BYTES / 4096;
    let remote = buf(pages)?;
    let local = buf(pages)?;
    let read = dir == Direction::FromDevice;
    let (seed, iova) = if read { (21u8, 0x9000_0000u64) } else { (22u8, 0x9800_0000u64) };
    let (src, dst) = if read { (&remote, &local) } else { (&local, &remote) };
    fill(src, seed);
    // SAFETY: `remote` is declared earlier in this function and so dropped
    // after the MR (deregistered in its `Drop`).
    let rmr = unsafe { reg_buf(dev, &o.pd, &remote, Map::At(iova)) }?;
    let mut fr =
        dev.alloc_mr(&o.pd, pages as u32).map_err(|e| msg(format_args!("alloc_mr: {e:?}")))?;
    let attrs = DeviceAttrs::e810_roce(13, 4096, 0);
    let rwqp = RwQp::new(attrs, true, o.q1.cap().max_send_sge);
    let mut pool: RwPool = MrPool::new();
    let n =
        pool.init(&attrs, true, 1, &[fr.fr_mr()]).map_err(|e| msg(format_args!("pool: {e:?}")))?;
    ensure!(n == 1, "pool took {n} MRs");
    let slice = NonNull::slice_from_raw_parts(local.vaddr(), local.len());
    let mut sg = [SgEntry::new(slice)];
    let mut ctx: RwCtx<4, 4> = RwCtx::new();
    // SAFETY: `local` is pool memory that outlives the transfer; `destroy`
    // runs below after the completion (or on the error paths before
    // returning), with the same `sg`.
    let wrs = unsafe {
        ctx.init::<BootHal, 1, { RW_BYTES / 4096 }>(
            &rwqp,
            &mut pool,
            &mut sg,
            0,
            iova,
            rmr.rkey(),
            dir,
        )
    };
    let want = if read { WcOpcode::RdmaRead } else { WcOpcode::RdmaWrite };
    let result = wrs
        .map_err(|e| msg(format_args!("rdma_rw_ctx_init: {e:?}")))
        .and_then(|wrs| rw_post(o, m, &mut ctx, &mut pool, &fr, wrs, want));
    // SAFETY: the transfer completed (or never started); same `sg` as init.
    let destroyed = unsafe { ctx.destroy::<BootHal, 1, { RW_BYTES / 4096 }>(&mut pool, &mut sg) };
    let cycles = result?;
    destroyed.map_err(|e| msg(format_args!("rdma_rw_ctx_destroy: {e:?}")))?;
    check(dst, 0, RW_BYTES, seed, 0)?;
    let mut back = 0;
    pool.cleanup(|_| back += 1).map_err(|e| msg(format_args!("pool cleanup: {e:?}")))?;
    fr.dereg().map_err(|e| msg(format_args!("dereg FR MR: {e:?}")))?;
    let us = clock::cycles_to_duration(cycles).as_micros().max(1);
    println!(
        "  {}: 1 MiB in {} WRs (FAST_REG + {}) in {us} us post to completion ({} MB/s), every \
         byte checked",
        if read { "rw_1mib_read" } else { "rw_1mib_write" },
        m.ops,
        if read { "RDMA READ" } else { "RDMA WRITE" },
        RW_BYTES as u128 / us
    );
    Ok(())
}

/// `rw_transfer` once `ctx` holds its `wrs` WRs: the pages the pool
/// collected go into `fr` (`ib_map_mr_sg`), the chain is posted as wr_id 77
/// and its `want` completion awaited. The cycles from post to completion.
fn rw_post(
    o: &mut Objs<'_, '_>,
    m: &mut Meter,
    ctx: &mut RwCtx<4, 4>,
    pool: &mut RwPool,
    fr: &FastRegMr<'_, BootHal, &MmioBar>,
    wrs: usize,
    want: WcOpcode,
) -> Result<u64, Msg> {
    ensure!(wrs >= 1, "no WRs");
    for i in 0..pool.len() {
        let p = pool.pages(i);
        if !p.is_empty() {
            // SAFETY: the pool collected pages of `rw_transfer`'s
            // `remote`/`local`, declared before `fr` and so alive until
            // after it is deregistered.
            unsafe { fr.map_pages(p) }.map_err(|e| msg(format_args!("map_pages: {e:?}")))?;
        }
    }
    let chain = ctx.chain_len() as u64;
    let t0 = arch::rdtsc();
    let r = ctx.post(&mut o.q1, pool, 77, &[]);
    m.post_cycles += arch::rdtsc().wrapping_sub(t0);
    m.posts += 1;
    m.ops += chain;
    r.map_err(|e| msg(format_args!("rdma_rw_ctx_post: {e:?}")))?;
    expect(poll_one(&mut o.cq, m)?, 77, want)?;
    m.bytes += RW_BYTES as u64;
    Ok(arch::rdtsc().wrapping_sub(t0))
}
