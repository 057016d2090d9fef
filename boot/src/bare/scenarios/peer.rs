//! Live runs against a Linux Soft-RoCE peer (issue #34, stage two): the
//! model process's Ethernet port (`mock-bar-shm --port`) carries the
//! device's frames to a Linux guest that `cargo xtask peer run peer_rping_*`
//! boots beside this image. The command line says which run and every
//! address (`irdma_boot::peercfg`); without `peer=` both scenarios skip.
//!
//! * `peer_rping_server`: the image listens on rping's port and plays
//!   rping's server for Linux `rping -c -V -C n`: READ the client's start
//!   buffer (its text is checked here too), go-ahead, WRITE it back into the
//!   client's sink, go-ahead; n rounds; the client's DREQ is answered.
//! * `peer_rping_client`: Linux `rping -s -V` listens; the image connects
//!   (again after a REJ or a timeout while the server is not up yet) and
//!   plays rping's client: advertise the start buffer, go-ahead, advertise
//!   the sink, go-ahead, compare; n rounds; then DREQ.
//!
//! rping's conventions come from `irdma_rping` (shared with the host-side
//! live test, `tests/peer_live.rs`). Every wait is bounded by `Hal::now`;
//! the bounds are generous: the peer runs under TCG on a shared core.

use core::time::Duration;

use irdma::cm::rdma_cm::{PortSpace, guid_from_mac};
use irdma::cm::{
    AcceptParams, Cm, CmConfig, CmEvent, CmTiming, ConnId, ConnectParams, MadAddr, QP1_RECV_BYTES,
    Qp1Transport,
};
use irdma::verbs::{IpAddr, QpAttr, QpState};
use irdma::wr::{RecvWr, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode};
use irdma_boot::peercfg::{PeerCfg, PeerCfgError, Role};
use irdma_hal::{Hal, MmioBar};
use irdma_rping::{ADVERT_LEN, Advert};

use super::verbs::{
    Buf, Dev, EMPTY_WC, Map, SIDE_CAP, TCq, TMr, TPd, TQp, buf, rc_objects, reg_buf,
};
use super::{Msg, Outcome, Runner, msg};
use crate::bare::hal::BootHal;
use crate::bare::serial::println;

type PeerCm = Cm<2, 1>;
type T<'d, 'b> = Qp1Transport<'d, BootHal, &'b MmioBar>;

/// The live scenarios (one line each on every run): rping both ways and
/// the NVMe-over-RDMA target (`super::nvme`).
pub const NAMES: [&str; 3] = ["peer_rping_server", "peer_rping_client", super::nvme::NAME];

/// How long one step (a completion, a CM answer) may take.
const STEP: Duration = Duration::from_secs(60);
/// How long the first connection may take (the Linux guest boots under TCG
/// next to this image: 7–10 s when it has a core, more when shared).
const CONNECT: Duration = Duration::from_secs(150);
/// Pause between connection attempts of the client.
const RETRY: Duration = Duration::from_secs(1);

/// Offsets in the registered buffer: the start buffer (READ source), the
/// sink (WRITE target), the 16-byte send and receive buffers.
const START: usize = 0;
const SINK: usize = 0x3000;
const SENDB: usize = 0x6000;
const RECVB: usize = 0x6400;
const PAGES: usize = 7;

/// Runs (or skips) both scenarios on `dev` as `cfg` says.
pub fn run(r: &mut Runner, dev: &Dev<'_>, cfg: Result<Option<PeerCfg>, PeerCfgError>) {
    let cfg = match cfg {
        Ok(Some(c)) => c,
        Ok(None) => {
            for n in NAMES {
                r.run(n, || Ok(Outcome::Skip(msg(format_args!("no peer= on the command line")))));
            }
            return;
        }
        Err(e) => {
            for n in NAMES {
                r.run(n, || Err(msg(format_args!("command line: {e:?}"))));
            }
            return;
        }
    };
    let roles = [
        (NAMES[0], Role::RpingServer),
        (NAMES[1], Role::RpingClient),
        (NAMES[2], Role::NvmeTarget),
    ];
    for (name, role) in roles {
        if role == cfg.role && role == Role::NvmeTarget {
            r.run(name, || super::nvme::scenario(dev, &cfg));
        } else if role == cfg.role {
            r.run(name, || scenario(dev, &cfg));
        } else {
            r.run(name, || Ok(Outcome::Skip(msg(format_args!("this run is {:?}", cfg.role)))));
        }
    }
}

fn ms() -> u64 {
    BootHal::now().as_millis() as u64
}

/// The RC side: QP, CQ, one region. Field order is drop order.
struct Side<'d, 'b> {
    qp: TQp<'d, 'b>,
    cq: TCq<'d, 'b>,
    mr: TMr<'d, 'b>,
    _pd: TPd<'d, 'b>,
    mem: Buf,
    /// Completions polled while waiting for another kind.
    pending: heapless::Vec<WorkCompletion, 16>,
}

fn side<'d, 'b>(dev: &'d Dev<'b>) -> Result<Side<'d, 'b>, Msg> {
    let (pd, cq, qp) = rc_objects(dev, 16, SIDE_CAP)?;
    let mem = buf(PAGES)?;
    // SAFETY: `mem` goes into `Side`, which drops it after the MR (field
    // order).
    let mr = unsafe { reg_buf(dev, &pd, &mem, Map::Identity) }?;
    Ok(Side { qp, cq, mr, _pd: pd, mem, pending: heapless::Vec::new() })
}

impl Side<'_, '_> {
    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge { addr: self.mem.paddr() + off as u64, length: len as u32, lkey: self.mr.lkey() }
    }

    fn advert(&self, off: usize, len: usize) -> [u8; ADVERT_LEN] {
        Advert { addr: self.mem.paddr() + off as u64, rkey: self.mr.rkey(), len: len as u32 }
            .encode()
    }

    fn post_recv(&mut self) -> Result<(), Msg> {
        let sg = [self.sge(RECVB, ADVERT_LEN)];
        self.qp
            .post_recv(&[RecvWr { wr_id: 100, sg_list: &sg }])
            .map_err(|e| msg(format_args!("post_recv: {e:?}")))
    }

    fn post(&mut self, wr_id: u64, opcode: WrOpcode, off: usize, len: usize) -> Result<(), Msg> {
        let sg = [self.sge(off, len)];
        let wr = SendWr { wr_id, opcode, flags: SendFlags::SIGNALED, sg_list: &sg };
        self.qp.post_send(&[wr]).map_err(|e| msg(format_args!("post_send: {e:?}")))
    }

    /// Fills `off..off + size` with ping `ping`'s text.
    fn fill(&self, off: usize, ping: usize, size: usize) -> Result<(), Msg> {
        let mut chunk = [0u8; 256];
        for at in (0..size).step_by(chunk.len()) {
            let n = chunk.len().min(size - at);
            for (j, b) in chunk[..n].iter_mut().enumerate() {
                *b = irdma_rping::ping_byte(ping, size, at + j).unwrap_or(0);
            }
            ensure!(self.mem.write_bytes(off + at, &chunk[..n]), "fill outside the buffer");
        }
        Ok(())
    }

    /// Whether `off..off + size` holds ping `ping`'s text (rping's `-V`).
    fn check(&self, off: usize, ping: usize, size: usize) -> Result<(), Msg> {
        let mut chunk = [0u8; 256];
        for at in (0..size).step_by(chunk.len()) {
            let n = chunk.len().min(size - at);
            ensure!(self.mem.read_bytes(off + at, &mut chunk[..n]), "read outside the buffer");
            for (j, &got) in chunk[..n].iter().enumerate() {
                let want = irdma_rping::ping_byte(ping, size, at + j).unwrap_or(0);
                ensure!(got == want, "ping {ping}: byte {} is {got:#04x}, not {want:#04x}", at + j);
            }
        }
        Ok(())
    }

    fn read(&self, off: usize, out: &mut [u8]) -> Result<(), Msg> {
        ensure!(self.mem.read_bytes(off, out), "read outside the buffer");
        Ok(())
    }
}

/// The CM and its QP1.
struct Live<'d, 'b> {
    cm: PeerCm,
    t: T<'d, 'b>,
    /// A DREQ came in (the connection it ended).
    disconnected: Option<ConnId>,
}

impl Live<'_, '_> {
    /// Runs the CM once; returns its next event (a disconnect is also
    /// remembered in `disconnected`).
    fn event(&mut self) -> Option<CmEvent> {
        let ev = self.cm.poll(ms(), &mut self.t);
        if let Some(CmEvent::Disconnected { id, .. }) = ev {
            self.disconnected = Some(id);
        }
        ev
    }

    /// Polls `s`'s CQ and the CM (answering whatever comes) until a
    /// completion of `op` arrives; a failed completion, or none after the
    /// peer disconnected, ends it with an error.
    fn wc(
        &mut self,
        s: &mut Side<'_, '_>,
        op: WcOpcode,
        what: &str,
    ) -> Result<WorkCompletion, Msg> {
        let end = BootHal::now() + STEP;
        loop {
            let mut wc = [EMPTY_WC; 4];
            let n = s.cq.poll(&mut wc);
            for w in wc.iter().take(n) {
                ensure!(s.pending.push(*w).is_ok(), "{what}: too many completions pending");
            }
            if let Some(i) = s.pending.iter().position(|w| w.opcode == op) {
                let w = s.pending.remove(i);
                ensure!(w.status == WcStatus::Success, "{what}: {:?} {:?}", w.opcode, w.status);
                return Ok(w);
            }
            ensure!(self.disconnected.is_none(), "{what}: the peer disconnected first");
            ensure!(BootHal::now() < end, "{what}: no {op:?} completion within {STEP:?}");
            if self.event().is_none() && n == 0 {
                BootHal::relax();
            }
        }
    }
}

/// The CM's configuration on the node with `mac` at `cfg`'s address, its
/// transaction ids tagged `hi_tid`.
pub(super) fn cm_config(mac: [u8; 6], cfg: &PeerCfg, hi_tid: u32) -> CmConfig {
    CmConfig {
        ca_guid: guid_from_mac(mac),
        hi_tid,
        id_seed: (crate::bare::arch::rdtsc() as u32) | 1,
        local_ips: [Some(IpAddr::V4(cfg.ip)), None, None, None],
        ca_ack_delay: 0,
        timing: CmTiming::default(),
    }
}

fn scenario(dev: &Dev<'_>, cfg: &PeerCfg) -> Result<Outcome, Msg> {
    let mac = dev.lan_info().mac;
    let qbuf = buf((8 * QP1_RECV_BYTES + 4 * 256).div_ceil(4096))?;
    let t = Qp1Transport::new(dev, qbuf, 8, 4).map_err(|e| msg(format_args!("QP1: {e:?}")))?;
    let mut live = Live { cm: PeerCm::new(cm_config(mac, cfg, 0x0b01)), t, disconnected: None };
    let mut s = side(dev)?;
    let r = match cfg.role {
        Role::RpingServer => server(&mut live, &mut s, cfg),
        Role::RpingClient => client(&mut live, &mut s, cfg),
        Role::NvmeTarget => Err(msg(format_args!("not an rping run"))),
    };
    // Whatever happened: the data QP first, then QP1 (its AHs and buffers).
    drop(s);
    let Live { cm, mut t, .. } = live;
    let d = t.destroy().map_err(|e| msg(format_args!("destroy QP1: {e:?}")));
    let retransmits = cm.stats().retransmits;
    r?;
    d?;
    println!(
        "  peer_rping_{}: {} pings of {} B with Linux at {}.{}.{}.{} verified, {} CM retransmits",
        if cfg.role == Role::RpingServer { "server" } else { "client" },
        cfg.count,
        cfg.size,
        cfg.peer_ip[0],
        cfg.peer_ip[1],
        cfg.peer_ip[2],
        cfg.peer_ip[3],
        retransmits
    );
    Ok(Outcome::Pass)
}

/// rping's server: Linux `rping -c -V -C count` connects.
fn server(live: &mut Live<'_, '_>, s: &mut Side<'_, '_>, cfg: &PeerCfg) -> Result<(), Msg> {
    let size = cfg.size as usize;
    s.post_recv()?;
    live.cm
        .listen(PortSpace::Tcp, irdma_rping::PORT, Some(IpAddr::V4(cfg.ip)))
        .map_err(|e| msg(format_args!("listen: {e:?}")))?;
    println!("  peer_rping_server: listening on port {}", irdma_rping::PORT);
    let end = BootHal::now() + CONNECT;
    let id = loop {
        ensure!(BootHal::now() < end, "no connect request within {CONNECT:?}");
        let Some(ev) = live.event() else {
            BootHal::relax();
            continue;
        };
        if let CmEvent::ConnectRequest { id, info } = ev {
            ensure!(info.local_port == irdma_rping::PORT, "REQ for port {}", info.local_port);
            let acc = AcceptParams {
                responder_resources: 1,
                initiator_depth: 1,
                ..AcceptParams::new(s.qp.qp_num(), 0x4321)
            };
            let p = live.cm.accept_params(id, &acc).map_err(|e| msg(format_args!("{e:?}")))?;
            p.apply(&mut s.qp).map_err(|e| msg(format_args!("QP to RTS: {e:?}")))?;
            live.cm
                .accept(ms(), id, &acc, &mut live.t)
                .map_err(|e| msg(format_args!("accept: {e:?}")))?;
            break id;
        }
    };
    let mut adv = [0u8; ADVERT_LEN];
    for ping in 0..cfg.count as usize {
        // the client's start buffer: READ it
        let w = live.wc(s, WcOpcode::Recv, "start advert")?;
        ensure!(w.byte_len as usize == ADVERT_LEN, "advert of {} B", w.byte_len);
        s.read(RECVB, &mut adv)?;
        let a = Advert::decode(&adv).ok_or_else(|| msg(format_args!("bad advert")))?;
        ensure!(a.len as usize == size, "the client's ping size is {}, not {size}", a.len);
        s.post_recv()?;
        let rd = WrOpcode::RdmaRead { remote_addr: a.addr, rkey: a.rkey };
        s.post(3, rd, SINK, size)?;
        live.wc(s, WcOpcode::RdmaRead, "READ")?;
        s.check(SINK, ping, size)?;
        // go ahead
        s.post(4, WrOpcode::Send, SENDB, ADVERT_LEN)?;
        live.wc(s, WcOpcode::Send, "go-ahead")?;
        // the client's sink: WRITE the text back (strlen + 1, as rping)
        let w = live.wc(s, WcOpcode::Recv, "sink advert")?;
        ensure!(w.byte_len as usize == ADVERT_LEN, "advert of {} B", w.byte_len);
        s.read(RECVB, &mut adv)?;
        let a = Advert::decode(&adv).ok_or_else(|| msg(format_args!("bad advert")))?;
        s.post_recv()?;
        // the text ends at its NUL, the buffer's last byte (ping_byte)
        let wr = WrOpcode::RdmaWrite { remote_addr: a.addr, rkey: a.rkey };
        s.post(5, wr, SINK, size.min(a.len as usize))?;
        live.wc(s, WcOpcode::RdmaWrite, "WRITE")?;
        s.post(6, WrOpcode::Send, SENDB, ADVERT_LEN)?;
        live.wc(s, WcOpcode::Send, "go-ahead")?;
    }
    // the client disconnects: DREQ in, DREP out
    let end = BootHal::now() + STEP;
    while live.disconnected != Some(id) {
        ensure!(BootHal::now() < end, "no DREQ within {STEP:?}");
        if live.event().is_none() {
            BootHal::relax();
        }
    }
    s.qp.modify(&QpAttr::new(QpState::Error))
        .map_err(|e| msg(format_args!("QP to ERROR: {e:?}")))?;
    live.cm.disconnect(ms(), id, &mut live.t).map_err(|e| msg(format_args!("DREP: {e:?}")))?;
    // let the DREP leave before QP1 goes
    let until = BootHal::now() + Duration::from_millis(500);
    while BootHal::now() < until {
        let _ = live.event();
        BootHal::relax();
    }
    Ok(())
}

/// rping's client: Linux `rping -s -V` listens.
fn client(live: &mut Live<'_, '_>, s: &mut Side<'_, '_>, cfg: &PeerCfg) -> Result<(), Msg> {
    let size = cfg.size as usize;
    s.post_recv()?;
    let (id, attempt) = connect(live, s, cfg)?;
    println!("  peer_rping_client: connected after {attempt} attempt(s)");
    for ping in 0..cfg.count as usize {
        s.fill(START, ping, size)?;
        // the start buffer's advertisement (the server READs it), then the
        // sink's (the server WRITEs it), each followed by a go-ahead
        for (wr_id, at, what) in [(1, START, "start advert"), (2, SINK, "sink advert")] {
            let a = s.advert(at, size);
            ensure!(s.mem.write_bytes(SENDB, &a), "advert outside the buffer");
            s.post(wr_id, WrOpcode::Send, SENDB, ADVERT_LEN)?;
            live.wc(s, WcOpcode::Send, what)?;
            live.wc(s, WcOpcode::Recv, "go-ahead")?;
            s.post_recv()?;
        }
        s.check(SINK, ping, size)?;
    }
    s.qp.modify(&QpAttr::new(QpState::Error))
        .map_err(|e| msg(format_args!("QP to ERROR: {e:?}")))?;
    live.cm.disconnect(ms(), id, &mut live.t).map_err(|e| msg(format_args!("DREQ: {e:?}")))?;
    let end = BootHal::now() + STEP;
    loop {
        ensure!(BootHal::now() < end, "no DREP within {STEP:?}");
        match live.event() {
            Some(CmEvent::Disconnected { id: d, timed_out: false }) if d == id => return Ok(()),
            Some(CmEvent::Disconnected { timed_out: true, .. }) => {
                bail!("the DREQ was never answered")
            }
            Some(_) => {}
            None => BootHal::relax(),
        }
    }
}

/// The client's connection to the listening `rping -s`: a REQ each second
/// until the server accepts (it may not be up yet), the QP to RTS, the RTU.
/// The connection and the REQs it took.
fn connect(
    live: &mut Live<'_, '_>,
    s: &mut Side<'_, '_>,
    cfg: &PeerCfg,
) -> Result<(ConnId, u16), Msg> {
    let peer = MadAddr {
        peer_ip: IpAddr::V4(cfg.peer_ip),
        local_ip: IpAddr::V4(cfg.ip),
        peer_mac: cfg.peer_mac,
        vlan: None,
        hop_limit: 64,
        traffic_class: 0,
    };
    let end = BootHal::now() + CONNECT;
    let mut attempt = 0u16;
    let mut id: Option<ConnId> = None;
    let id = loop {
        ensure!(BootHal::now() < end, "no connection within {CONNECT:?} ({attempt} attempts)");
        if id.is_none() {
            let cp = ConnectParams {
                src_port: 40000 + attempt,
                responder_resources: 1,
                initiator_depth: 1,
                ..ConnectParams::new(peer, PortSpace::Tcp, irdma_rping::PORT, s.qp.qp_num(), 0x1234)
            };
            id = Some(
                live.cm
                    .connect(ms(), &cp, &mut live.t)
                    .map_err(|e| msg(format_args!("connect: {e:?}")))?,
            );
            attempt += 1;
        }
        match live.event() {
            Some(CmEvent::Connected { id: cid, params, .. }) if Some(cid) == id => {
                params.apply(&mut s.qp).map_err(|e| msg(format_args!("QP to RTS: {e:?}")))?;
                live.cm
                    .ready_to_use(cid, &mut live.t)
                    .map_err(|e| msg(format_args!("RTU: {e:?}")))?;
                break cid;
            }
            Some(CmEvent::Rejected { .. } | CmEvent::TimedOut { .. }) => {
                // the server is not up yet: again in a second
                id = None;
                let until = BootHal::now() + RETRY;
                while BootHal::now() < until {
                    let _ = live.event();
                    BootHal::relax();
                }
            }
            Some(_) => {}
            None => BootHal::relax(),
        }
    };
    Ok((id, attempt))
}
