//! `mock-bar-cm`: the model process of `cargo xtask qemu` with a CM peer.
//!
//! It is `mock-bar-shm` in harness mode (same environment, same options:
//! `[--poll spin|hybrid] [--max-secs N] [--pcap FILE] [--warm]`, see
//! `mock_bar::shm::run_harness`) plus a second model device on the same
//! wire ([`mock_bar::Fabric`], joined with `ShmHost::join`), driven on a
//! host thread by the real irdma driver (testkit's `FakeHal` + `ModelBar`).
//! That driver runs the IB CM over its QP1 (`Qp1Transport`) as the guest's
//! peer for the unikernel's `cm_connect_active` / `cm_connect_passive`
//! scenarios:
//!
//! * it listens on RDMA_PS_TCP port `CM_PEER_PORT`; a connection from the
//!   guest gets a QP and a region named in the REP's private data; the
//!   guest SENDs and WRITEs, the peer checks every byte against
//!   `contract::cm_byte`, and answers the guest's DREQ;
//! * on a guest request in the mailbox (`MB_CM_REQ_SEQ`) it connects to the
//!   guest's `CM_GUEST_PORT` (its region in the REQ's private data), checks
//!   the data the same way, then disconnects (DREQ).
//!
//! Its state, verified and closed counts and the first error go to the
//! mailbox (`MB_CM_*` of `irdma_boot::contract`), so the guest's scenario
//! lines report them; it prints `cm-peer: …` lines. The peer's device is in
//! deferred mode: the harness loop polls it with the guest's device.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use irdma::cm::rdma_cm::{PortSpace, guid_from_mac};
use irdma::cm::{
    AcceptParams, Cm, CmConfig, CmEvent, CmTiming, ConnId, ConnectParams, MadAddr, QP1_RECV_BYTES,
    Qp1Transport, ReqInfo,
};
use irdma::device::{Device, ProbeOptions};
use irdma::lan::LanInfo;
use irdma::res::Profile;
use irdma::verbs::{Cq, IpAddr, Mr, MrDesc, Pd, Qp, QpCap, QpInitAttr};
use irdma::wr::{Access, PageSize, RecvWr, Sge, WcOpcode, WcStatus, WorkCompletion};
use irdma_boot::contract as c;
use irdma_hal::{BufferDirection, Dma};
use irdma_testkit::{FakeHal, FakeHalMemory, ModelBar};
use mock_bar::shm::{self, HarnessOpts, PollMode, Tick};
use mock_bar::{Config, Fabric, Mode};

type Dev = Device<FakeHal, ModelBar>;
type PeerCm = Cm<4, 1>;
type T<'d> = Qp1Transport<'d, FakeHal, ModelBar>;

/// The peer's end of the mailbox: positional reads and writes of the BAR
/// file (QEMU maps it shared).
struct Mailbox(File);

impl Mailbox {
    fn r32(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        match self.0.read_exact_at(&mut b, (c::MAILBOX + off) as u64) {
            Ok(()) => u32::from_le_bytes(b),
            Err(_) => 0,
        }
    }
    fn r64(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        match self.0.read_exact_at(&mut b, (c::MAILBOX + off) as u64) {
            Ok(()) => u64::from_le_bytes(b),
            Err(_) => 0,
        }
    }
    fn w32(&self, off: usize, v: u32) {
        let _ = self.0.write_all_at(&v.to_le_bytes(), (c::MAILBOX + off) as u64);
    }
}

/// One connection's objects on the peer. Field order is drop order.
struct Conn<'d> {
    id: Option<ConnId>,
    /// 1: the guest connected (active scenario); 2: we connected.
    which: u32,
    qp: Qp<'d, FakeHal, ModelBar>,
    cq: Cq<'d, FakeHal, ModelBar>,
    mr: Mr<'d, FakeHal, ModelBar>,
    _pd: Pd<'d, FakeHal, ModelBar>,
    buf: Dma<FakeHal>,
    verified: bool,
    since: Instant,
}

/// Where the guest's SEND lands in the region (after the WRITE target).
const RECV_OFF: usize = c::CM_WRITE_BYTES;

impl<'d> Conn<'d> {
    fn new(dev: &'d Dev, which: u32) -> Result<Self, String> {
        let e = |what: &'static str| move |x: irdma::verbs::VerbsError| format!("{what}: {x:?}");
        let pd = dev.alloc_pd().map_err(e("alloc_pd"))?;
        let cq = dev.create_cq(16).map_err(e("create_cq"))?;
        let cap = QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let mut attr = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap };
        let qp = dev.create_qp(&pd, &mut attr).map_err(e("create_qp"))?;
        let pages = (RECV_OFF + c::CM_SEND_BYTES).div_ceil(4096);
        let buf =
            Dma::<FakeHal>::new(pages, BufferDirection::Both).map_err(|x| format!("dma: {x:?}"))?;
        let list: Vec<u64> = (0..pages).map(|i| buf.paddr() + (i * 4096) as u64).collect();
        let d = MrDesc {
            iova: buf.paddr(),
            length: (pages * 4096) as u64,
            page_size: PageSize::Size4K,
            pages: &list,
            zero_based: false,
            access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        };
        // SAFETY: the pages are `buf`'s, which outlives the MR (`Conn`
        // drops `mr` before `buf`: field order).
        let mr = unsafe { dev.reg_mr(&pd, &d) }.map_err(e("reg_mr"))?;
        let mut conn = Conn {
            id: None,
            which,
            qp,
            cq,
            mr,
            _pd: pd,
            buf,
            verified: false,
            since: Instant::now(),
        };
        let sge = [Sge {
            addr: conn.buf.paddr() + RECV_OFF as u64,
            length: c::CM_SEND_BYTES as u32,
            lkey: conn.mr.lkey(),
        }];
        conn.qp
            .post_recv(&[RecvWr { wr_id: 7, sg_list: &sge }])
            .map_err(|x| format!("post_recv: {x:?}"))?;
        Ok(conn)
    }

    /// The private data naming our region: address, rkey, length.
    fn region_pdata(&self) -> [u8; c::CM_REGION_PDATA] {
        let mut p = [0u8; c::CM_REGION_PDATA];
        p[..8].copy_from_slice(&self.buf.paddr().to_le_bytes());
        p[8..12].copy_from_slice(&self.mr.lkey().to_le_bytes());
        p[12..].copy_from_slice(&(c::CM_WRITE_BYTES as u32).to_le_bytes());
        p
    }

    fn accept_params<'p>(&self, psn: u32, pdata: &'p [u8]) -> AcceptParams<'p> {
        AcceptParams { private_data: pdata, ..AcceptParams::new(self.qp.qp_num(), psn) }
    }

    /// Polls the CQ; on the guest's SEND checks it and the WRITE before it.
    fn check(&mut self, nonce: u64) -> Result<bool, String> {
        let mut wc = [WorkCompletion::default(); 2];
        let n = self.cq.poll(&mut wc);
        let Some(w) = wc.get(..n).and_then(|w| w.first()) else { return Ok(false) };
        if (w.wr_id, w.status, w.opcode) != (7, WcStatus::Success, WcOpcode::Recv) {
            return Err(format!("unexpected completion {w:?}"));
        }
        if w.byte_len as usize != c::CM_SEND_BYTES {
            return Err(format!("SEND of {} bytes, expected {}", w.byte_len, c::CM_SEND_BYTES));
        }
        // RC ordering: the WRITE posted before the SEND is placed by now.
        for (what, off, len) in [(0u32, RECV_OFF, c::CM_SEND_BYTES), (1, 0, c::CM_WRITE_BYTES)] {
            let mut got = vec![0u8; len];
            if !self.buf.read_bytes(off, &mut got) {
                return Err("region read failed".into());
            }
            if let Some(j) = (0..len).find(|&j| got[j] != c::cm_byte(nonce, self.which, what, j)) {
                let kind = if what == 0 { "SEND" } else { "WRITE" };
                return Err(format!(
                    "{kind} byte {j} is {:#04x}, expected {:#04x}",
                    got[j],
                    c::cm_byte(nonce, self.which, what, j)
                ));
            }
        }
        self.verified = true;
        Ok(true)
    }
}

fn probe_opts() -> ProbeOptions {
    let mut o = ProbeOptions { cqp_sq_size: 64, ..ProbeOptions::default() };
    // The harness loop (another thread) executes each CQP op.
    let long = Duration::from_secs(5);
    (o.timeouts.ccq, o.timeouts.poll_registers, o.timeouts.create) = (long, long, long);
    o
}

fn ms() -> u64 {
    use irdma_hal::Hal;
    FakeHal::now().as_millis() as u64
}

/// The peer's state while it serves the guest (what [`peer`]'s loop steps
/// share). Field order is drop order: the connection, then the CM, then
/// QP1, as the locals they were.
struct Peer<'d> {
    conn: Option<Conn<'d>>,
    cm: PeerCm,
    t: T<'d>,
    dev: &'d Dev,
    mb: &'d Mailbox,
    nonce: u64,
    last_req: u32,
    verified: u32,
    closed: u32,
}

impl<'d> Peer<'d> {
    /// One CM event at `now`.
    fn on_event(&mut self, now: u64, ev: CmEvent) -> Result<(), String> {
        match ev {
            CmEvent::ConnectRequest { id, info } => self.accept(now, id, &info)?,
            CmEvent::Established { .. } => println!("cm-peer: established (RTU)"),
            CmEvent::Connected { id, params, .. } => {
                let k = self
                    .conn
                    .as_mut()
                    .filter(|k| k.id == Some(id))
                    .ok_or("REP for no connection")?;
                params.apply(&mut k.qp).map_err(|e| format!("active QP to RTS: {e:?}"))?;
                self.cm.ready_to_use(id, &mut self.t).map_err(|e| format!("RTU: {e:?}"))?;
                println!("cm-peer: connected to the guest (REP, RTU sent)");
            }
            CmEvent::Disconnected { id, timed_out } => self.disconnected(now, id, timed_out)?,
            CmEvent::Rejected { reason, .. } => {
                return Err(format!("the guest rejected us (reason {reason})"));
            }
            CmEvent::TimedOut { .. } => return Err("REQ/REP retries ran out".into()),
            CmEvent::TimewaitExit { .. } => {}
            // no UDP-port-space listener and no SIDR_REQ of ours
            CmEvent::SidrRequest { .. }
            | CmEvent::SidrResolved { .. }
            | CmEvent::SidrRejected { .. } => return Err("a SIDR event".into()),
            // `CmEvent` is `#[non_exhaustive]`: a kind this peer does
            // not know is a failure, not something to skip silently
            other => return Err(format!("an unexpected CM event: {other:?}")),
        }
        Ok(())
    }

    /// The guest's REQ: a connection of ours for it, accepted.
    fn accept(&mut self, now: u64, id: ConnId, info: &ReqInfo) -> Result<(), String> {
        if self.conn.is_some() {
            return Err("a second connection while one is open".into());
        }
        let (cm, t) = (&mut self.cm, &mut self.t);
        let mut k = Conn::new(self.dev, 1)?;
        k.id = Some(id);
        let pd = k.region_pdata();
        let acc = k.accept_params(0x1234, &pd);
        let p = cm.accept_params(id, &acc).map_err(|e| format!("accept_params: {e:?}"))?;
        p.apply(&mut k.qp).map_err(|e| format!("passive QP to RTS: {e:?}"))?;
        cm.accept(now, id, &acc, t).map_err(|e| format!("accept: {e:?}"))?;
        println!(
            "cm-peer: accepted a REQ from QP {} ({:?} port {})",
            info.remote_qpn, info.peer.peer_ip, info.hdr.src_port
        );
        self.conn = Some(k);
        Ok(())
    }

    /// A DREQ or DREP: the connection closes (its data must have arrived).
    fn disconnected(&mut self, now: u64, id: ConnId, timed_out: bool) -> Result<(), String> {
        let k =
            self.conn.take().filter(|k| k.id == Some(id)).ok_or("DREQ/DREP for no connection")?;
        if timed_out {
            return Err("our DREQ was never answered".into());
        }
        // the guest's DREQ: answer it (a DREP to ours needs nothing)
        let _ = self.cm.disconnect(now, id, &mut self.t);
        if !k.verified {
            return Err(format!("connection {} closed before its data arrived", k.which));
        }
        drop(k);
        self.closed += 1;
        self.mb.w32(c::MB_CM_CLOSED, self.closed);
        println!("cm-peer: connection closed ({} so far)", self.closed);
        Ok(())
    }

    /// The open connection's data checked once it arrived (and, when we
    /// opened it, closed); whether anything happened.
    fn check_conn(&mut self, now: u64) -> Result<bool, String> {
        let mut busy = false;
        let mb = self.mb;
        if let Some(k) = self.conn.as_mut() {
            // a failed check is a data error (the guest's line says so)
            let checked = !k.verified
                && k.check(self.nonce).inspect_err(|_| mb.w32(c::MB_CM_ERROR, c::CM_ERR_DATA))?;
            if checked {
                busy = true;
                self.verified += 1;
                mb.w32(c::MB_CM_VERIFIED, self.verified);
                println!("cm-peer: connection {}: SEND and WRITE data checked", k.which);
                if let (2, Some(id)) = (k.which, k.id) {
                    // we opened it: we close it
                    self.cm.disconnect(now, id, &mut self.t).map_err(|e| format!("DREQ: {e:?}"))?;
                }
            }
            if k.since.elapsed() > Duration::from_secs(60) {
                mb.w32(c::MB_CM_ERROR, c::CM_ERR_TIMEOUT);
                return Err(format!("connection {} did not finish within 60 s", k.which));
            }
        }
        Ok(busy)
    }

    /// A new guest request in the mailbox: we connect to the guest's port;
    /// whether there was one.
    fn guest_request(&mut self, now: u64) -> Result<bool, String> {
        let mb = self.mb;
        let seq = mb.r32(c::MB_CM_REQ_SEQ);
        if seq == 0 || seq == self.last_req {
            return Ok(false);
        }
        self.last_req = seq;
        if mb.r32(c::MB_CM_REQ_KIND) != c::CM_REQ_CONNECT {
            return Err(format!("unknown request kind {}", mb.r32(c::MB_CM_REQ_KIND)));
        }
        if self.conn.is_some() {
            return Err("connect request while a connection is open".into());
        }
        let mac = mb.r64(c::MB_CM_GUEST_MAC).to_le_bytes();
        let ip = mb.r32(c::MB_CM_GUEST_IP).to_le_bytes();
        let mut k = Conn::new(self.dev, 2)?;
        let pd = k.region_pdata();
        let cp = ConnectParams {
            src_port: 50000,
            private_data: &pd,
            ..ConnectParams::new(
                MadAddr {
                    peer_ip: IpAddr::V4(ip),
                    local_ip: IpAddr::V4(c::CM_PEER_IP),
                    peer_mac: [mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]],
                    vlan: None,
                    hop_limit: 64,
                    traffic_class: 0,
                },
                PortSpace::Tcp,
                c::CM_GUEST_PORT,
                k.qp.qp_num(),
                0x4321,
            )
        };
        k.id = Some(self.cm.connect(now, &cp, &mut self.t).map_err(|e| format!("connect: {e:?}"))?);
        println!("cm-peer: REQ sent to the guest's port {}", c::CM_GUEST_PORT);
        self.conn = Some(k);
        Ok(true)
    }
}

/// The peer's life: probe, QP1, listen, serve the guest until shutdown.
fn peer(bar: ModelBar, mb: &Mailbox, nonce: u64) -> Result<(), String> {
    let lan = LanInfo::single_tc(0, 6, c::CM_PEER_MAC, 1500);
    let dev = Device::probe_with(bar, lan, Profile::SMALL, probe_opts())
        .map_err(|e| format!("probe: {e:?}"))?;
    let qbuf =
        Dma::<FakeHal>::new((16 * QP1_RECV_BYTES + 8 * 256).div_ceil(4096), BufferDirection::Both)
            .map_err(|e| format!("dma: {e:?}"))?;
    let t: T<'_> = Qp1Transport::new(&dev, qbuf, 16, 8).map_err(|e| format!("QP1: {e:?}"))?;
    let mut cm = PeerCm::new(CmConfig {
        ca_guid: guid_from_mac(c::CM_PEER_MAC),
        hi_tid: 0x0c0c,
        id_seed: 0x5eed,
        local_ips: [Some(IpAddr::V4(c::CM_PEER_IP)), None, None, None],
        ca_ack_delay: 0,
        timing: CmTiming::default(),
    });
    cm.listen(PortSpace::Tcp, c::CM_PEER_PORT, Some(IpAddr::V4(c::CM_PEER_IP)))
        .map_err(|e| format!("listen: {e:?}"))?;
    mb.w32(c::MB_CM_PEER, c::CM_PEER_READY);
    println!("cm-peer: ready, listening on port {}", c::CM_PEER_PORT);
    let mut p =
        Peer { conn: None, cm, t, dev: &dev, mb, nonce, last_req: 0, verified: 0, closed: 0 };
    loop {
        if mb.r32(c::MB_SHUTDOWN) != 0 {
            // The harness stops polling the devices now: destroying our
            // objects would only wait for CQP ops nobody executes. The
            // process exits right after.
            loop {
                std::thread::park();
            }
        }
        let now = ms();
        let mut busy = false;
        while let Some(ev) = p.cm.poll(now, &mut p.t) {
            busy = true;
            p.on_event(now, ev)?;
        }
        busy |= p.check_conn(now)?;
        busy |= p.guest_request(now)?;
        if !busy {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// The harness options (`--poll`, `--max-secs`, `--pcap`, `--warm`); the
/// exit code when one is wrong.
fn harness_opts(args: &[String]) -> Result<HarnessOpts, ExitCode> {
    let get = |k: &str| args.iter().position(|a| a == k).and_then(|i| args.get(i + 1));
    let mode = match get("--poll").map(String::as_str) {
        None | Some("hybrid") => PollMode::Hybrid,
        Some("spin") => PollMode::Spin,
        Some(m) => {
            eprintln!("mock-bar-cm: --poll {m}: spin or hybrid");
            return Err(ExitCode::from(2));
        }
    };
    let max = match get("--max-secs").map(|s| s.parse::<u64>()) {
        None => 600,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            eprintln!("mock-bar-cm: --max-secs needs a number");
            return Err(ExitCode::from(2));
        }
    };
    Ok(HarnessOpts {
        mode,
        max: Duration::from_secs(max),
        pcap: get("--pcap").cloned(),
        warm: args.iter().any(|a| a == "--warm"),
        port: None,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match harness_opts(&args) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let Some(bar_path) = std::env::var_os("IRDMA_BAR_FILE") else {
        eprintln!("mock-bar-cm: IRDMA_BAR_FILE is not set (harness mode only)");
        return ExitCode::from(2);
    };
    let open = || OpenOptions::new().read(true).write(true).open(&bar_path);
    let mb = match open() {
        Ok(f) => Mailbox(f),
        Err(e) => {
            eprintln!("mock-bar-cm: {}: {e}", bar_path.to_string_lossy());
            return ExitCode::from(1);
        }
    };
    // Written before the harness announces itself: a guest that sees
    // HOST_MAGIC knows a peer exists.
    mb.w32(c::MB_CM_PEER, c::CM_PEER_STARTING);
    let nonce = mb.r64(c::MB_NONCE);
    let fabric = Fabric::new();
    let mut cfg = Config::default();
    cfg.fpm.max_cnt[19] = 4096;
    cfg.fpm.max_cnt[20] = 4096;
    cfg.mode = Mode::Deferred;
    let id = fabric.add(mock_bar::Device::new(cfg, Box::new(FakeHalMemory)));
    let bar = ModelBar::new(fabric.clone(), id);
    let peer_thread = std::thread::spawn(move || {
        let r = peer(bar, &mb, nonce);
        if let Err(e) = &r {
            println!("cm-peer: FAILED: {e}");
            if mb.r32(c::MB_CM_ERROR) == 0 {
                mb.w32(c::MB_CM_ERROR, c::CM_ERR_PROTOCOL);
            }
            mb.w32(c::MB_CM_PEER, c::CM_PEER_FAILED);
        }
    });
    let r = shm::run_harness(&o, Some(Arc::clone(&fabric)), |_| Tick::Idle);
    // The peer device's own error counters (xtask checks them like the
    // served device's).
    if let Some(k) = fabric.with(id, |d| d.counters().clone()) {
        println!(
            "cm-peer: device counters: cqp={} packets={} wire_drops={} dma_faults={} \
             cqes_dropped={} invalid_wqes={}",
            k.cqp_ops, k.packets, k.wire_drops, k.dma_faults, k.cqes_dropped, k.invalid_wqes
        );
    }
    // The peer sees the shutdown flag and returns (its device objects are
    // destroyed through the fabric, which the harness no longer polls: do
    // not wait for that).
    drop(peer_thread);
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mock-bar-cm: {e}");
            ExitCode::from(1)
        }
    }
}
