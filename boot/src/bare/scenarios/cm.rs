//! Connections through the IB CM with a peer on the model's wire: the
//! model process `mock-bar-cm` runs a second device, driven on the host by
//! the irdma driver, whose CM listens on `CM_PEER_PORT` and, on request,
//! connects to the guest (`irdma_boot::contract`, `MB_CM_*`).
//!
//! * `cm_connect_active`: the guest connects (REQ → REP → RTU over both
//!   QP1s), its RC QP reaches RTS from the REP alone, it WRITEs into the
//!   region the REP's private data names and SENDs; the peer checks every
//!   byte (`MB_CM_VERIFIED`); the guest disconnects (DREQ → DREP).
//! * `cm_connect_passive`: the guest listens on `CM_GUEST_PORT` and asks
//!   the peer to connect; it accepts the REQ (the peer's region in its
//!   private data), gets the RTU, WRITEs and SENDs, the peer checks and
//!   disconnects, the guest answers the DREQ.
//!
//! Every wait is bounded by `Hal::now`; a peer error (`MB_CM_ERROR`) or a
//! timeout is a `FAIL` line saying which. Without a peer (`MB_CM_PEER` 0:
//! plain `mock-bar-shm`) both skip.

use core::time::Duration;

use irdma::cm::rdma_cm::{PortSpace, guid_from_mac};
use irdma::cm::{
    AcceptParams, Cm, CmConfig, CmEvent, CmTiming, ConnId, ConnectParams, MadAddr, QP1_RECV_BYTES,
    Qp1Transport,
};
use irdma::verbs::IpAddr;
use irdma::wr::{SendFlags, SendWr, Sge, WcOpcode, WrOpcode};
use irdma_boot::contract::{self as c, MAILBOX};
use irdma_hal::{Bar, Hal, MmioBar};

use super::verbs::{Dev, EMPTY_WC, Map, SIDE_CAP, TCq, TMr, TPd, TQp, buf, rc_objects, reg_buf};
use super::{Msg, Outcome, Runner, msg};
use crate::bare::hal::BootHal;
use crate::bare::serial::println;

type GuestCm = Cm<2, 1>;
type T<'d, 'b> = Qp1Transport<'d, BootHal, &'b MmioBar>;

/// How long a CM exchange or the peer's check may take (TCG is slow; the
/// CM's own REQ/REP retries are seconds apart).
const STEP: Duration = Duration::from_secs(20);
/// How long the peer may still be probing its device.
const PEER_START: Duration = Duration::from_secs(30);

/// Runs the two CM scenarios on `dev` (the mailbox is in `bar`).
pub fn run(r: &mut Runner, dev: &Dev<'_>, bar: &MmioBar) {
    r.run("cm_connect_active", || scenario(dev, bar, true));
    r.run("cm_connect_passive", || scenario(dev, bar, false));
}

fn ms() -> u64 {
    BootHal::now().as_millis() as u64
}

fn mb32(bar: &MmioBar, off: usize) -> u32 {
    bar.read32(MAILBOX + off)
}

/// Waits until the peer is ready: `Ok(false)` when the model has none.
fn peer_ready(bar: &MmioBar) -> Result<bool, Msg> {
    let end = BootHal::now() + PEER_START;
    loop {
        match mb32(bar, c::MB_CM_PEER) {
            0 => return Ok(false),
            c::CM_PEER_READY => return Ok(true),
            c::CM_PEER_FAILED => bail!("the CM peer failed (MB_CM_ERROR {})", peer_error(bar)),
            c::CM_PEER_STARTING => {}
            v => bail!("MB_CM_PEER holds {v:#x}, not a peer state"),
        }
        ensure!(BootHal::now() < end, "the CM peer was not ready within {PEER_START:?}");
        BootHal::relax();
    }
}

fn peer_error(bar: &MmioBar) -> &'static str {
    match mb32(bar, c::MB_CM_ERROR) {
        0 => "none",
        c::CM_ERR_DATA => "data mismatch",
        c::CM_ERR_PROTOCOL => "CM or verbs error",
        c::CM_ERR_TIMEOUT => "timeout",
        _ => "unknown",
    }
}

/// Waits until mailbox word `off` reaches `want`; a peer error ends it.
fn wait_peer(bar: &MmioBar, off: usize, want: u32, what: &str) -> Result<(), Msg> {
    let end = BootHal::now() + STEP;
    loop {
        if mb32(bar, c::MB_CM_ERROR) != 0 || mb32(bar, c::MB_CM_PEER) == c::CM_PEER_FAILED {
            bail!("the CM peer reported an error ({}) waiting for {what}", peer_error(bar));
        }
        if mb32(bar, off) >= want {
            return Ok(());
        }
        ensure!(BootHal::now() < end, "no {what} from the CM peer within {STEP:?}");
        BootHal::relax();
    }
}

/// The guest's RC side of one connection. Field order is drop order: the
/// MR before its buffer, the QP before its CQ and PD.
struct Side<'d, 'b> {
    qp: TQp<'d, 'b>,
    cq: TCq<'d, 'b>,
    mr: TMr<'d, 'b>,
    _pd: TPd<'d, 'b>,
    src: super::verbs::Buf,
}

/// Where the WRITE's source starts in `src` (after the SEND's).
const WRITE_OFF: usize = c::CM_SEND_BYTES;

fn side<'d, 'b>(dev: &'d Dev<'b>, nonce: u64, conn: u32) -> Result<Side<'d, 'b>, Msg> {
    let (pd, cq, qp) = rc_objects(dev, 16, SIDE_CAP)?;
    const PAGES: usize = (c::CM_SEND_BYTES + c::CM_WRITE_BYTES).div_ceil(4096);
    let src = buf(PAGES)?;
    let mut chunk = [0u8; 256];
    for (what, base, len) in [(0u32, 0, c::CM_SEND_BYTES), (1, WRITE_OFF, c::CM_WRITE_BYTES)] {
        for at in (0..len).step_by(chunk.len()) {
            let n = chunk.len().min(len - at);
            for (j, b) in chunk[..n].iter_mut().enumerate() {
                *b = c::cm_byte(nonce, conn, what, at + j);
            }
            ensure!(src.write_bytes(base + at, &chunk[..n]), "fill outside the buffer");
        }
    }
    // SAFETY: `src` goes into `Side`, which drops it after the MR (field
    // order).
    let mr = unsafe { reg_buf(dev, &pd, &src, Map::Identity) }?;
    Ok(Side { qp, cq, mr, _pd: pd, src })
}

impl Side<'_, '_> {
    /// WRITE the pattern into the peer's region, then SEND (RC ordering:
    /// the peer sees the SEND after the WRITE was placed); both signaled.
    fn traffic(&mut self, pdata: &[u8]) -> Result<(), Msg> {
        let Some(r) = pdata.get(..c::CM_REGION_PDATA) else { bail!("short private data") };
        let word = |a: usize, n: usize| r.get(a..a + n);
        let (Some(addr), Some(rkey), Some(len)) = (word(0, 8), word(8, 4), word(12, 4)) else {
            bail!("private data too short for a region")
        };
        let mut a = [0u8; 8];
        a.copy_from_slice(addr);
        let addr = u64::from_le_bytes(a);
        let rkey = u32::from_le_bytes([rkey[0], rkey[1], rkey[2], rkey[3]]);
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]);
        ensure!(len as usize >= c::CM_WRITE_BYTES, "peer region of {len} B too small");
        let lkey = self.mr.lkey();
        let base = self.src.paddr();
        let wsge = [Sge { addr: base + WRITE_OFF as u64, length: c::CM_WRITE_BYTES as u32, lkey }];
        let ssge = [Sge { addr: base, length: c::CM_SEND_BYTES as u32, lkey }];
        let wrs = [
            SendWr {
                wr_id: 1,
                opcode: WrOpcode::RdmaWrite { remote_addr: addr, rkey },
                flags: SendFlags::SIGNALED,
                sg_list: &wsge,
            },
            SendWr { wr_id: 2, opcode: WrOpcode::Send, flags: SendFlags::SIGNALED, sg_list: &ssge },
        ];
        self.qp.post_send(&wrs).map_err(|e| msg(format_args!("post_send: {e:?}")))?;
        let end = BootHal::now() + STEP;
        let mut seen = 0;
        while seen < 2 {
            let mut wc = [EMPTY_WC; 2];
            let n = self.cq.poll(&mut wc);
            for w in wc.iter().take(n) {
                let want = if seen == 0 { (1, WcOpcode::RdmaWrite) } else { (2, WcOpcode::Send) };
                ensure!(
                    (w.wr_id, w.opcode) == want && w.status == irdma::wr::WcStatus::Success,
                    "completion {} {:?} {:?}, expected {want:?} Success",
                    w.wr_id,
                    w.opcode,
                    w.status
                );
                seen += 1;
            }
            ensure!(BootHal::now() < end, "{seen} of 2 completions within {STEP:?}");
        }
        Ok(())
    }
}

/// Polls the CM until `f` says done; errors from `f` and the deadline end it.
fn pump(
    cm: &mut GuestCm,
    t: &mut T<'_, '_>,
    what: &str,
    mut f: impl FnMut(&mut GuestCm, &mut T<'_, '_>, CmEvent) -> Result<bool, Msg>,
) -> Result<(), Msg> {
    let end = BootHal::now() + STEP;
    loop {
        while let Some(ev) = cm.poll(ms(), t) {
            if f(cm, t, ev)? {
                return Ok(());
            }
        }
        ensure!(BootHal::now() < end, "{what}: nothing within {STEP:?}");
        BootHal::relax();
    }
}

fn cm_config(mac: [u8; 6]) -> CmConfig {
    CmConfig {
        ca_guid: guid_from_mac(mac),
        hi_tid: 0x0b00,
        id_seed: (crate::bare::arch::rdtsc() as u32) | 1,
        local_ips: [Some(IpAddr::V4(c::CM_GUEST_IP)), None, None, None],
        ca_ack_delay: 0,
        timing: CmTiming::default(),
    }
}

fn scenario(dev: &Dev<'_>, bar: &MmioBar, active: bool) -> Result<Outcome, Msg> {
    if !peer_ready(bar)? {
        return Ok(Outcome::Skip(msg(format_args!("the model process has no CM peer"))));
    }
    ensure!(mb32(bar, c::MB_CM_ERROR) == 0, "the CM peer reported {}", peer_error(bar));
    let nonce = bar.read64(MAILBOX + c::MB_NONCE);
    let conn = if active { 1 } else { 2 };
    let (verified0, closed0) = (mb32(bar, c::MB_CM_VERIFIED), mb32(bar, c::MB_CM_CLOSED));
    let mac = dev.lan_info().mac;
    let qbuf = buf((8 * QP1_RECV_BYTES + 4 * 256).div_ceil(4096))?;
    let mut t = Qp1Transport::new(dev, qbuf, 8, 4).map_err(|e| msg(format_args!("QP1: {e:?}")))?;
    let mut cm = GuestCm::new(cm_config(mac));
    let mut s = side(dev, nonce, conn)?;
    let r = if active {
        active_side(&mut cm, &mut t, &mut s, bar)
    } else {
        passive_side(&mut cm, &mut t, &mut s, bar, mac)
    };
    // Whatever happened: the data QP first, then QP1 (its AHs and buffers).
    drop(s);
    let d = t.destroy().map_err(|e| msg(format_args!("destroy QP1: {e:?}")));
    r?;
    d?;
    ensure!(
        mb32(bar, c::MB_CM_VERIFIED) == verified0 + 1,
        "the peer verified {} connections, expected {}",
        mb32(bar, c::MB_CM_VERIFIED),
        verified0 + 1
    );
    wait_peer(bar, c::MB_CM_CLOSED, closed0 + 1, "the close")?;
    let st = cm.stats();
    println!(
        "  cm_connect_{}: REQ/REP/RTU, WRITE {} B + SEND {} B checked by the peer, \
         DREQ/DREP; {} CM retransmits",
        if active { "active" } else { "passive" },
        c::CM_WRITE_BYTES,
        c::CM_SEND_BYTES,
        st.retransmits
    );
    Ok(Outcome::Pass)
}

/// The guest connects to the peer's port, sends, and disconnects.
fn active_side(
    cm: &mut GuestCm,
    t: &mut T<'_, '_>,
    s: &mut Side<'_, '_>,
    bar: &MmioBar,
) -> Result<(), Msg> {
    let verified0 = mb32(bar, c::MB_CM_VERIFIED);
    let cp = ConnectParams {
        src_port: 40000,
        private_data: b"irdma-boot",
        ..ConnectParams::new(
            MadAddr {
                peer_ip: IpAddr::V4(c::CM_PEER_IP),
                local_ip: IpAddr::V4(c::CM_GUEST_IP),
                peer_mac: c::CM_PEER_MAC,
                vlan: None,
                hop_limit: 64,
                traffic_class: 0,
            },
            PortSpace::Tcp,
            c::CM_PEER_PORT,
            s.qp.qp_num(),
            0x77,
        )
    };
    let id = cm.connect(ms(), &cp, t).map_err(|e| msg(format_args!("connect: {e:?}")))?;
    let mut region = [0u8; c::CM_REGION_PDATA];
    pump(cm, t, "REP", |cm, t, ev| match ev {
        CmEvent::Connected { id: i, params, private_data } if i == id => {
            params.apply(&mut s.qp).map_err(|e| msg(format_args!("QP to RTS: {e:?}")))?;
            cm.ready_to_use(id, t).map_err(|e| msg(format_args!("RTU: {e:?}")))?;
            region.copy_from_slice(&private_data[..c::CM_REGION_PDATA]);
            Ok(true)
        }
        CmEvent::Rejected { reason, .. } => bail!("the peer rejected the REQ: reason {reason}"),
        CmEvent::TimedOut { .. } => bail!("REQ retries ran out"),
        _ => Ok(false),
    })?;
    s.traffic(&region)?;
    wait_peer(bar, c::MB_CM_VERIFIED, verified0 + 1, "the data check")?;
    s.qp.modify(&irdma::verbs::QpAttr::new(irdma::verbs::QpState::Error))
        .map_err(|e| msg(format_args!("QP to ERROR: {e:?}")))?;
    cm.disconnect(ms(), id, t).map_err(|e| msg(format_args!("DREQ: {e:?}")))?;
    pump(cm, t, "DREP", |_, _, ev| match ev {
        CmEvent::Disconnected { id: i, timed_out: false } if i == id => Ok(true),
        CmEvent::Disconnected { timed_out: true, .. } => bail!("the DREQ was never answered"),
        _ => Ok(false),
    })
}

/// The guest listens, asks the peer to connect, accepts, sends, and
/// answers the peer's DREQ.
fn passive_side(
    cm: &mut GuestCm,
    t: &mut T<'_, '_>,
    s: &mut Side<'_, '_>,
    bar: &MmioBar,
    mac: [u8; 6],
) -> Result<(), Msg> {
    let verified0 = mb32(bar, c::MB_CM_VERIFIED);
    cm.listen(PortSpace::Tcp, c::CM_GUEST_PORT, Some(IpAddr::V4(c::CM_GUEST_IP)))
        .map_err(|e| msg(format_args!("listen: {e:?}")))?;
    let mut m = [0u8; 8];
    m[..6].copy_from_slice(&mac);
    bar.write64(MAILBOX + c::MB_CM_GUEST_MAC, u64::from_le_bytes(m));
    bar.write32(MAILBOX + c::MB_CM_GUEST_IP, u32::from_le_bytes(c::CM_GUEST_IP));
    bar.write32(MAILBOX + c::MB_CM_REQ_KIND, c::CM_REQ_CONNECT);
    let seq = mb32(bar, c::MB_CM_REQ_SEQ).wrapping_add(1).max(1);
    bar.write32(MAILBOX + c::MB_CM_REQ_SEQ, seq);
    let mut region = [0u8; c::CM_REGION_PDATA];
    let mut conn: Option<ConnId> = None;
    pump(cm, t, "REQ and RTU", |cm, t, ev| match ev {
        CmEvent::ConnectRequest { id, info } => {
            ensure!(conn.is_none(), "a second REQ");
            ensure!(info.local_port == c::CM_GUEST_PORT, "REQ for port {}", info.local_port);
            ensure!(info.peer.peer_ip == IpAddr::V4(c::CM_PEER_IP), "REQ from {:?}", info.peer);
            region.copy_from_slice(&info.private_data[..c::CM_REGION_PDATA]);
            let acc =
                AcceptParams { private_data: b"ok", ..AcceptParams::new(s.qp.qp_num(), 0x99) };
            let p = cm.accept_params(id, &acc).map_err(|e| msg(format_args!("{e:?}")))?;
            p.apply(&mut s.qp).map_err(|e| msg(format_args!("QP to RTS: {e:?}")))?;
            cm.accept(ms(), id, &acc, t).map_err(|e| msg(format_args!("accept: {e:?}")))?;
            conn = Some(id);
            Ok(false)
        }
        CmEvent::Established { id } if Some(id) == conn => Ok(true),
        CmEvent::TimedOut { .. } => bail!("REP retries ran out (no RTU)"),
        _ => Ok(false),
    })?;
    let Some(id) = conn else { bail!("no connection") };
    s.traffic(&region)?;
    wait_peer(bar, c::MB_CM_VERIFIED, verified0 + 1, "the data check")?;
    pump(cm, t, "DREQ", |cm, t, ev| match ev {
        CmEvent::Disconnected { id: i, timed_out: false } if i == id => {
            s.qp.modify(&irdma::verbs::QpAttr::new(irdma::verbs::QpState::Error))
                .map_err(|e| msg(format_args!("QP to ERROR: {e:?}")))?;
            cm.disconnect(ms(), id, t).map_err(|e| msg(format_args!("DREP: {e:?}")))?;
            Ok(true)
        }
        _ => Ok(false),
    })
}
