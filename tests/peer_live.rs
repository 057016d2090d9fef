//! Host sides of the live scenarios against a Linux Soft-RoCE guest
//! (`cargo xtask peer run SCENARIO`, issue #34). Each test owns the model
//! (in-process, its Ethernet port on the address the guest's `-netdev
//! dgram` sends to) and writes the pcap of the wire. They are `#[ignore]`d:
//! they need the guest that `cargo xtask peer run` boots beside them, which
//! passes the addresses in `PEER_MODEL_ADDR` / `PEER_GUEST_ADDR` and the
//! capture path in `PEER_PCAP`.

mod common;
mod e2e_common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e_common::*;
use mock_bar::{Fabric, Port, PortConfig};

fn env_addr(k: &str) -> SocketAddr {
    std::env::var(k)
        .unwrap_or_else(|_| panic!("{k} not set: run through `cargo xtask peer run`"))
        .parse()
        .unwrap_or_else(|e| panic!("{k}: {e}"))
}

/// fd00::a (the model, A) and fd00::b (the guest, B) for the IPv6
/// scenarios.
const V6_A: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a];
const V6_B: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0b];

/// Whether the scenario runs over IPv6 (`PEER_IPV6=1`).
fn ipv6() -> bool {
    std::env::var("PEER_IPV6").is_ok_and(|v| v == "1")
}

/// (ours, the guest's) IP for the scenario.
fn ips() -> (IpAddr, IpAddr) {
    if ipv6() { (IpAddr::V6(V6_A), IpAddr::V6(V6_B)) } else { (IpAddr::V4(A.ip), IpAddr::V4(B.ip)) }
}

/// The guest as the CM addresses it from A: its MAC and address (of the
/// family [`ips`] picks), hop limit 64, on `vlan`.
fn guest_addr(vlan: Option<u16>) -> MadAddr {
    let (ours, theirs) = ips();
    MadAddr {
        peer_ip: theirs,
        local_ip: ours,
        peer_mac: B.mac,
        vlan,
        hop_limit: 64,
        traffic_class: 0,
    }
}

/// A port with A's MAC, IPv4 and fd00::a on the addresses the xtask gave.
fn guest_port(fabric: &Fabric) -> Arc<Port> {
    let mut cfg = PortConfig::new(A.mac);
    cfg.ipv4 = vec![A.ip];
    cfg.ipv6 = vec![V6_A];
    cfg.local = env_addr("PEER_MODEL_ADDR");
    cfg.remote = Some(env_addr("PEER_GUEST_ADDR"));
    // a TCG guest answers in milliseconds, but may stall for a while
    cfg.rc_timeout = Duration::from_secs(2);
    fabric.attach_port(Port::bind(cfg).expect("bind the model's port"))
}

fn write_pcap(c: &mock_bar::wire::Capture) {
    if let Ok(p) = std::env::var("PEER_PCAP") {
        c.write_pcap(std::path::Path::new(&p)).expect("write the pcap");
        println!("host: {} frames in {p}", c.len());
    }
}

/// `arp`: the guest's `arping` asks for 10.0.0.1 three times; the port
/// answers each with A's MAC.
#[test]
#[ignore = "needs the Linux guest of `cargo xtask peer run arp`"]
fn peer_arp() {
    let fabric = Fabric::new();
    let cap = fabric.capture();
    let port = guest_port(&fabric);
    let t0 = Instant::now();
    while port.counters().arp_replies < 3 && t0.elapsed() < Duration::from_secs(200) {
        if fabric.pump_port() == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    write_pcap(&cap);
    let c = port.counters();
    println!("host: port counters {c:?}");
    assert!(c.arp_replies >= 3, "{c:?}");
    assert_eq!(c.drops.total(), 0, "{c:?}");
}

// ---------------------------------------------------------------------
// rping (rdma-core librdmacm/examples/rping.c) against the driver
// ---------------------------------------------------------------------

use irdma::cm::rdma_cm::{PortSpace, gid_of, guid_from_mac};
use irdma::cm::{
    AcceptParams, Cm, CmConfig, CmEvent, CmTiming, ConnId, ConnectParams, MadAddr, QP1_RECV_BYTES,
    Qp1Transport,
};

type T<'d> = Qp1Transport<'d, FakeHal, ModelBar>;
type TestCm = Cm<4, 1>;

/// rping's default port (rping.c: main; `irdma_rping`).
const RPING_PORT: u16 = irdma_rping::PORT;
/// The ping size: rping's `-S` (default 64, rping.c: main), from
/// `PEER_RPING_SIZE` (the scenario gives both sides the same value; a size
/// above the path MTU makes every READ and WRITE multi-packet).
fn rping_size() -> usize {
    std::env::var("PEER_RPING_SIZE").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
}
/// How long a server side waits for the guest's connect request.
const REQ_WAIT: (Duration, &str) = (Duration::from_secs(120), "no connect request");
/// Pings per run (`-C 3` on the Linux side).
const PINGS: usize = 3;
/// Offsets in the one registered page: rping's start_buf (the READ
/// source), rdma_buf (the WRITE sink), send_buf and recv_buf (each a
/// 16-byte `struct rping_rdma_info`: be64 addr, be32 rkey, be32 size).
const START: usize = 0;
const RDMA: usize = 0x3000;
const SENDB: usize = 0x6000;
const RECVB: usize = 0x6400;
/// Pages of the registered region (sizes up to `RDMA - START`).
const PAGES: usize = 8;

/// The netdev MTU the driver is probed with (`PEER_LAN_MTU`, default 1500)
/// and the path MTU its connect asks for (`PEER_PATH_MTU`, default 1024).
fn env_num(k: &str, default: u32) -> u32 {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Device A probed with the scenario's MTU.
fn probe_a(bar: &ModelBar) -> Dev {
    let lan = LanInfo::single_tc(0, 6, A.mac, env_num("PEER_LAN_MTU", 1500));
    Device::probe_with(bar.clone(), lan, Profile::SMALL, opts()).expect("probe")
}

/// The host side of a live rping: the driver on device A, its CM over QP1,
/// the model's port plugged into the guest, the wire recorded.
struct Live<'d> {
    bar: &'d ModelBar,
    cm: TestCm,
    t: T<'d>,
    t0: Instant,
    events: Vec<CmEvent>,
    pending: Vec<WorkCompletion>,
}

impl<'d> Live<'d> {
    fn new(bar: &'d ModelBar, dev: &'d Dev) -> Self {
        let b = buf((16 * QP1_RECV_BYTES + 8 * 256).div_ceil(4096));
        let t = Qp1Transport::new(dev, b, 16, 8).expect("QP1 transport");
        let cfg = CmConfig {
            ca_guid: guid_from_mac(A.mac),
            hi_tid: 7,
            id_seed: 0x5150,
            local_ips: [Some(IpAddr::V4(A.ip)), Some(IpAddr::V6(V6_A)), None, None],
            ca_ack_delay: 0,
            timing: CmTiming::default(),
        };
        Live {
            bar,
            cm: TestCm::new(cfg),
            t,
            t0: Instant::now(),
            events: Vec::new(),
            pending: Vec::new(),
        }
    }

    fn now(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    /// Steps for `secs` seconds: timers run, late frames are answered.
    fn run_for(&mut self, secs: u64) {
        let until = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < until {
            self.step();
        }
    }

    /// Frames from the guest in, CM timers and MADs out; new CM events are
    /// appended to `events` and returned.
    fn step(&mut self) -> Vec<CmEvent> {
        let n = self.bar.fabric().pump_port();
        let now = self.now();
        let mut new = Vec::new();
        while let Some(e) = self.cm.poll(now, &mut self.t) {
            new.push(e);
        }
        self.events.extend_from_slice(&new);
        if n == 0 && new.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        new
    }

    /// Steps until a connect request comes (panics with `what` after
    /// `within`), checks it came through `listen` if given, and accepts it
    /// onto `qp` as rping's server does (responder resources and initiator
    /// depth 1, starting PSN `psn`), the QP moved to RTS; returns its id.
    fn accept_one(
        &mut self,
        qp: &mut TQp<'_>,
        psn: u32,
        (within, what): (Duration, &str),
        listen: Option<irdma::cm::ListenId>,
    ) -> ConnId {
        let deadline = Instant::now() + within;
        loop {
            assert!(Instant::now() < deadline, "{what}: {:?}", self.events);
            for e in self.step() {
                if let CmEvent::ConnectRequest { id, info } = e {
                    if let Some(l) = listen {
                        assert_eq!(info.listen, l, "the REQ came through the same listener");
                    }
                    let acc = AcceptParams {
                        responder_resources: 1,
                        initiator_depth: 1,
                        ..AcceptParams::new(qp.qp_num(), psn)
                    };
                    self.cm.accept_params(id, &acc).unwrap().apply(qp).expect("QP to RTS");
                    let now = self.now();
                    self.cm.accept(now, id, &acc, &mut self.t).unwrap();
                    return id;
                }
            }
        }
    }

    /// Steps until `n` completions arrived on `cq` (60 s at most) and
    /// returns them; it polls no more than it still needs, so completions
    /// after those `n` stay on the CQ.
    fn take(&mut self, cq: &mut TCq<'_>, n: usize) -> Vec<WorkCompletion> {
        let mut got: Vec<WorkCompletion> = Vec::new();
        let until = Instant::now() + Duration::from_secs(60);
        while got.len() < n {
            assert!(Instant::now() < until, "{} of {n} completions: {got:?}", got.len());
            self.step();
            let mut wc = [empty_wc(); 8];
            let k = cq.poll(&mut wc[..(n - got.len()).min(8)]);
            got.extend_from_slice(&wc[..k]);
        }
        got
    }

    /// Steps until a completion of kind `op` arrived on `s`'s CQ (60 s
    /// at most) and returns it; completions of other kinds polled on the
    /// way are kept for later calls.
    fn wc(&mut self, s: &mut Side<'_>, op: WcOpcode) -> WorkCompletion {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(i) = self.pending.iter().position(|w| w.opcode == op) {
                let w = self.pending.remove(i);
                assert_eq!(w.status, WcStatus::Success, "{w:?}");
                return w;
            }
            assert!(
                Instant::now() < deadline,
                "no {op:?} completion (have {:?}); CM events {:?}",
                self.pending,
                self.events
            );
            self.step();
            let mut wc = [empty_wc(); 8];
            let k = s.cq.poll(&mut wc);
            self.pending.extend_from_slice(&wc[..k]);
        }
    }
}

/// rping's side of a connection (client or server, rping.c): an RC QP on
/// a CQ of 16, the registered pages of its buffers, the first receive of
/// an advertisement posted; and the ping size, checked to fit.
fn rping_side(dev: &Dev) -> (Side<'_>, Region<'_>, usize) {
    let mut s = Side::new(dev, A, 16, cap(8));
    let r = s.region(PAGES, 0);
    let size = rping_size();
    assert!((16..=RDMA - START).contains(&size), "ping size {size}");
    recv_advert(&mut s, &r);
    (s, r, size)
}

/// Posts the receive (wr_id 100) of the peer's next advertisement or
/// go-ahead: 16 bytes at [`RECVB`].
fn recv_advert(s: &mut Side<'_>, r: &Region<'_>) {
    let sge = [r.sge(RECVB, 16)];
    s.qp.post_recv(&[RecvWr { wr_id: 100, sg_list: &sge }]).unwrap();
}

/// rping's 16-byte buffer advertisement (rping.c: rping_format_send).
fn advert(r: &Region<'_>, off: usize, len: usize) -> [u8; 16] {
    irdma_rping::Advert { addr: r.addr() + off as u64, rkey: r.mr.rkey(), len: len as u32 }.encode()
}

/// rping's ping text for round `ping` (`irdma_rping::fill_ping`).
fn ping_text(ping: usize, size: usize) -> Vec<u8> {
    let mut v = vec![0; size];
    irdma_rping::fill_ping(ping, &mut v);
    v
}

/// The client's advertisement: (address, rkey, size).
fn decode_advert(a: &[u8]) -> (u64, u32, usize) {
    let a = irdma_rping::Advert::decode(a).expect("a 16-byte rping advertisement");
    (a.addr, a.rkey, a.len as usize)
}

/// Every RoCEv2 frame of the capture parses with a correct ICRC and
/// lengths (the project's own check, `mock_bar::wire::check_frames`, the
/// same the model process applies to the unikernel's wire; tshark runs in
/// the xtask).
fn check_capture(cap: &mock_bar::wire::Capture) {
    let c = mock_bar::wire::check_frames(&cap.frames());
    assert_eq!(c.bad, 0, "{c}");
    println!("host: {} RoCEv2 frames, every ICRC correct", c.roce);
}

/// Writes the pcap when the test ends, pass or fail. Frames a harness
/// injected broken on purpose (indices in `broken`) are left out of it
/// (the capture judges would rightly fail them) and written to
/// `injected.pcap` beside it.
struct PcapOnDrop(mock_bar::wire::Capture, std::cell::RefCell<std::collections::BTreeSet<usize>>);

impl PcapOnDrop {
    /// The capture without the frames injected broken.
    fn kept(&self) -> mock_bar::wire::Capture {
        self.split().0
    }

    /// (kept, injected broken).
    fn split(&self) -> (mock_bar::wire::Capture, mock_bar::wire::Capture) {
        let (kept, broken) = (mock_bar::wire::Capture::new(), mock_bar::wire::Capture::new());
        let b = self.1.borrow();
        for (i, f) in self.0.frames().into_iter().enumerate() {
            if b.contains(&i) { broken.push(f) } else { kept.push(f) }
        }
        (kept, broken)
    }
}

impl Drop for PcapOnDrop {
    fn drop(&mut self) {
        let (kept, broken) = self.split();
        write_pcap(&kept);
        if let Ok(p) = std::env::var("PEER_PCAP")
            && !broken.is_empty()
        {
            let p = std::path::Path::new(&p).with_file_name("injected.pcap");
            broken.write_pcap(&p).expect("write the pcap");
            println!("host: {} injected frames in {}", broken.len(), p.display());
        }
    }
}

/// Prints the kinds of CM events the host side saw.
fn print_events(live: &Live<'_>) {
    let kinds: Vec<String> = live
        .events
        .iter()
        .map(|e| format!("{e:?}").split([' ', '{']).next().unwrap_or("").to_string())
        .collect();
    println!("host: CM events {kinds:?}");
}

/// The end of every live scenario: the capture judged (ICRC of every
/// RoCEv2 frame) and not one frame dropped by the model's port.
fn judge_wire(bar: &ModelBar, wire: &PcapOnDrop) {
    check_capture(&wire.0);
    let c = bar.fabric().port().unwrap().counters();
    println!("host: port counters {c:?}");
    assert_eq!(c.drops.total(), 0, "{c:?}");
}

fn live_setup() -> (ModelBar, PcapOnDrop) {
    let bar = ModelBar::standalone(small_fn_config());
    let cap = bar.fabric().capture();
    let _port = guest_port(bar.fabric());
    (bar, PcapOnDrop(cap, Default::default()))
}

/// One live scenario: the model with its port on the guest's wire
/// ([`live_setup`]), device A probed, the CM over QP1 ([`Live`]); `f` plays
/// the host side, then the CM events are printed and the wire judged
/// ([`judge_wire`]).
fn live_test(f: fn(&PcapOnDrop, &Dev, &mut Live<'_>)) {
    let (bar, wire) = live_setup();
    let dev = probe_a(&bar);
    let mut live = Live::new(&bar, &dev);
    f(&wire, &dev, &mut live);
    print_events(&live);
    judge_wire(&bar, &wire);
}

/// The `#[ignore]`d tests of the live scenarios that are one
/// [`live_test`] each: `$name` (the xtask runs it by name beside the guest
/// `$guest`) plays `$body`.
macro_rules! live_peers {
    ($($name:ident, $guest:literal, $body:ident;)*) => {$(
        #[test]
        #[ignore = $guest]
        fn $name() {
            live_test($body);
        }
    )*};
}

live_peers! {
    peer_rping_driver_client, "needs the Linux guest of `cargo xtask peer run rping-linux-server`", rping_driver_client;
    peer_rping_driver_server, "needs the Linux guest of `cargo xtask peer run rping-linux-client`", rping_driver_server;
    peer_reject, "needs the Linux guest of `cargo xtask peer run reject`", reject;
    peer_ucmatose_driver_server, "needs the Linux guest of `cargo xtask peer run ucmatose-linux-client`", ucmatose_driver_server;
    peer_udaddy_driver_server, "needs the Linux guest of `cargo xtask peer run udaddy-linux-client`", udaddy_driver_server;
    peer_udaddy_driver_client, "needs the Linux guest of `cargo xtask peer run udaddy-linux-server`", udaddy_driver_client;
}

/// `rping-linux-server`: Linux `rping -s` listens; the driver connects
/// through the CM over QP1 (retrying while the server is not up yet),
/// then plays rping's client: SEND the start buffer's advertisement, the
/// server READs it and says go-ahead, SEND the sink's advertisement, the
/// server WRITEs the data back and says go-ahead; compare; three rounds,
/// then DREQ.
fn rping_driver_client(_: &PcapOnDrop, dev: &Dev, live: &mut Live<'_>) {
    let (mut s, r, size) = rping_side(dev);
    // `PEER_VLAN`: the guest's addresses are on an 802.1Q interface
    let peer = guest_addr(std::env::var("PEER_VLAN").ok().and_then(|v| v.parse().ok()));
    // connect, again every second while the server is not listening yet
    let mut id: Option<ConnId> = None;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut attempt = 0u16;
    loop {
        assert!(Instant::now() < deadline, "no connection: {:?}", live.events);
        if id.is_none() {
            let cp = ConnectParams {
                src_port: 40000 + attempt,
                responder_resources: 1,
                initiator_depth: 1,
                path_mtu: env_num("PEER_PATH_MTU", 1024),
                ..ConnectParams::new(peer, PortSpace::Tcp, RPING_PORT, s.qp.qp_num(), 0x1234)
            };
            let now = live.now();
            id = Some(live.cm.connect(now, &cp, &mut live.t).expect("connect"));
            attempt += 1;
        }
        let mut done = false;
        for e in live.step() {
            match e {
                CmEvent::Connected { id: cid, params, .. } => {
                    params.apply(&mut s.qp).expect("QP to RTS");
                    live.cm.ready_to_use(cid, &mut live.t).unwrap();
                    done = true;
                }
                CmEvent::Rejected { .. } | CmEvent::TimedOut { .. } => {
                    println!("host: {e:?}; again in 1 s");
                    id = None;
                    live.run_for(1);
                }
                _ => {}
            }
        }
        if done {
            break;
        }
    }
    let id = id.unwrap();
    println!("host: connected after {} attempt(s)", attempt);
    for ping in 0..PINGS {
        let text = ping_text(ping, size);
        r.put(START, &text);
        r.put(RDMA, &vec![0; size]);
        // the start buffer's advertisement; the server READs, then go-ahead
        r.put(SENDB, &advert(&r, START, size));
        s.qp.post_send(&[signaled(1, WrOpcode::Send, &[r.sge(SENDB, 16)])]).unwrap();
        live.wc(&mut s, WcOpcode::Send);
        assert_eq!(live.wc(&mut s, WcOpcode::Recv).byte_len, 16);
        recv_advert(&mut s, &r);
        // the sink's advertisement; the server WRITEs, then go-ahead
        r.put(SENDB, &advert(&r, RDMA, size));
        s.qp.post_send(&[signaled(2, WrOpcode::Send, &[r.sge(SENDB, 16)])]).unwrap();
        live.wc(&mut s, WcOpcode::Send);
        assert_eq!(live.wc(&mut s, WcOpcode::Recv).byte_len, 16);
        recv_advert(&mut s, &r);
        assert_eq!(r.bytes(RDMA, size), text, "ping {ping}: the server's WRITE");
        println!("host: ping data: {}", String::from_utf8_lossy(&text[..size.min(72) - 1]));
    }
    s.qp.modify(&QpAttr::new(QpState::Error)).unwrap();
    let now = live.now();
    live.cm.disconnect(now, id, &mut live.t).unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until && live.cm.active_connections() > 0 {
        live.step();
        if live.events.iter().any(|e| matches!(e, CmEvent::TimewaitExit { .. })) {
            break;
        }
    }
}

/// `rping-linux-client`: the driver listens on rping's port and plays
/// rping's server; Linux `rping -c -V` connects, and validates the data
/// that came back.
fn rping_driver_server(_: &PcapOnDrop, dev: &Dev, live: &mut Live<'_>) {
    let (mut s, r, size) = rping_side(dev);
    live.cm.listen(PortSpace::Tcp, RPING_PORT, Some(ips().0)).unwrap();
    let id = live.accept_one(&mut s.qp, 0x4321, REQ_WAIT, None);
    let mut pings = 0;
    while pings < PINGS {
        // the client's start buffer: READ it
        assert_eq!(live.wc(&mut s, WcOpcode::Recv).byte_len, 16);
        let a = r.bytes(RECVB, 16);
        let (addr, rkey, len) = decode_advert(&a);
        assert_eq!(len, size, "the client's ping size");
        recv_advert(&mut s, &r);
        s.qp.post_send(&[signaled(3, read_op(addr, rkey), &[r.sge(RDMA, len)])]).unwrap();
        live.wc(&mut s, WcOpcode::RdmaRead);
        let data = r.bytes(RDMA, len);
        println!("host: server ping data: {}", String::from_utf8_lossy(&data[..len.min(72) - 1]));
        // go ahead
        s.qp.post_send(&[signaled(4, WrOpcode::Send, &[r.sge(SENDB, 16)])]).unwrap();
        live.wc(&mut s, WcOpcode::Send);
        // the client's sink: WRITE the data back (strlen + 1, as rping)
        assert_eq!(live.wc(&mut s, WcOpcode::Recv).byte_len, 16);
        let a = r.bytes(RECVB, 16);
        let (addr, rkey) = {
            let (addr, rkey, _) = decode_advert(&a);
            (addr, rkey)
        };
        recv_advert(&mut s, &r);
        let n = irdma_rping::text_len(&data);
        s.qp.post_send(&[signaled(5, write_op(addr, rkey), &[r.sge(RDMA, n)])]).unwrap();
        live.wc(&mut s, WcOpcode::RdmaWrite);
        s.qp.post_send(&[signaled(6, WrOpcode::Send, &[r.sge(SENDB, 16)])]).unwrap();
        live.wc(&mut s, WcOpcode::Send);
        pings += 1;
    }
    // the client disconnects: DREQ in, DREP out
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        let mut disc = false;
        for e in live.step() {
            if let CmEvent::Disconnected { id: d, .. } = e {
                assert_eq!(d, id);
                s.qp.modify(&QpAttr::new(QpState::Error)).unwrap();
                let now = live.now();
                live.cm.disconnect(now, d, &mut live.t).unwrap();
                disc = true;
            }
        }
        if disc {
            break;
        }
    }
    // let the DREP leave and the guest finish
    live.run_for(2);
    let dreq = live.events.iter().any(|e| matches!(e, CmEvent::Disconnected { .. }));
    assert!(dreq, "no DREQ: {:?}", live.events);
}

/// `reject`: the driver listens on rping's port only; Linux connects to
/// the next port, which nobody listens on. The driver's CM answers the REQ
/// with a REJ (reason 8, invalid service ID) that Linux reports as
/// `RDMA_CM_EVENT_REJECTED, error 8`; no connection is left on our side.
fn reject(wire: &PcapOnDrop, _: &Dev, live: &mut Live<'_>) {
    use irdma::cm::mad::{AttrId, CmMad};
    live.cm.listen(PortSpace::Tcp, RPING_PORT, Some(IpAddr::V4(A.ip))).unwrap();
    let rejs = || {
        wire.0
            .frames()
            .iter()
            .filter_map(|f| mock_bar::wire::parse(f).ok())
            .filter(|p| p.pkt.opcode == 0x64 && p.src_mac == A.mac)
            .filter_map(|p| {
                let mad: &[u8; 256] = p.pkt.payload.as_slice().try_into().ok()?;
                let m = CmMad::decode(mad).ok()?;
                (AttrId::from_u16(m.hdr.attr_id) == Some(AttrId::Rej)).then_some(())
            })
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while rejs() == 0 {
        assert!(Instant::now() < deadline, "no REJ sent; CM events {:?}", live.events);
        live.step();
    }
    // the guest reports it and powers off; answer whatever else comes
    live.run_for(3);
    println!("host: {} REJ sent, CM events {:?}", rejs(), live.events);
    assert!(live.events.is_empty(), "no connection request reaches the application");
    assert_eq!(live.cm.active_connections(), 0);
}

/// cmatose.c defaults: port 7471, 10 messages of 100 bytes; both
/// scenarios run it with `-c 2` (connections).
mod cmatose {
    pub const PORT: u16 = 7471;
    pub const CONNS: usize = 2;
    pub const MSGS: usize = 10;
    pub const SIZE: usize = 100;
}

/// `ucmatose-linux-client`: Linux `ucmatose -s 10.0.0.1 -c 2` (rdma-core
/// librdmacm/examples/cmatose.c) opens two connections; the driver accepts
/// both (10 receives of 100 bytes posted on each first), SENDs 10 messages
/// of 100 bytes on each once both are established, takes Linux's 10
/// replies on each, then disconnects both (DREQ; Linux answers DREP).
fn ucmatose_driver_server(_: &PcapOnDrop, dev: &Dev, live: &mut Live<'_>) {
    use cmatose::{CONNS, MSGS, PORT, SIZE};
    live.cm.listen(PortSpace::Tcp, PORT, Some(ips().0)).unwrap();
    let mut sides: Vec<(Side<'_>, Region<'_>, ConnId)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut established = 0;
    while established < CONNS {
        assert!(Instant::now() < deadline, "connections: {:?}", live.events);
        for e in live.step() {
            match e {
                CmEvent::ConnectRequest { id, .. } => {
                    let mut s = Side::new(dev, A, 64, cap(16));
                    let r = s.region(1, sides.len() as u8);
                    for i in 0..MSGS {
                        let sge = [r.sge(2048 + i * 128, SIZE)];
                        s.qp.post_recv(&[RecvWr { wr_id: 200 + i as u64, sg_list: &sge }]).unwrap();
                    }
                    let acc = AcceptParams {
                        responder_resources: 1,
                        initiator_depth: 1,
                        ..AcceptParams::new(s.qp.qp_num(), 0x100 * (sides.len() as u32 + 1))
                    };
                    let p = live.cm.accept_params(id, &acc).unwrap();
                    p.apply(&mut s.qp).expect("QP to RTS");
                    let now = live.now();
                    live.cm.accept(now, id, &acc, &mut live.t).unwrap();
                    sides.push((s, r, id));
                }
                CmEvent::Established { .. } => established += 1,
                _ => {}
            }
        }
    }
    println!("host: {CONNS} connections established");
    for (k, (s, r, _)) in sides.iter_mut().enumerate() {
        let msg: Vec<u8> = (0..SIZE).map(|i| (i + k) as u8).collect();
        r.put(0, &msg);
        for i in 0..MSGS {
            s.qp.post_send(&[signaled(i as u64, WrOpcode::Send, &[r.sge(0, SIZE)])]).unwrap();
        }
    }
    for (s, _, _) in sides.iter_mut() {
        for _ in 0..MSGS {
            live.wc(s, WcOpcode::Send);
        }
        for _ in 0..MSGS {
            assert_eq!(live.wc(s, WcOpcode::Recv).byte_len, SIZE as u32);
        }
        assert!(live.pending.is_empty(), "{:?}", live.pending);
    }
    println!("host: {} SENDs each way on each connection", MSGS);
    for (s, _, id) in sides.iter_mut() {
        s.qp.modify(&QpAttr::new(QpState::Error)).unwrap();
        let now = live.now();
        live.cm.disconnect(now, *id, &mut live.t).unwrap();
    }
    let until = Instant::now() + Duration::from_secs(30);
    let disconnected = |ev: &[CmEvent]| {
        ev.iter().filter(|e| matches!(e, CmEvent::Disconnected { timed_out: false, .. })).count()
    };
    while Instant::now() < until && disconnected(&live.events) < CONNS {
        live.step();
    }
    live.run_for(2);
    assert_eq!(disconnected(&live.events), CONNS, "every DREQ answered: {:?}", live.events);
}

/// `ucmatose-linux-server`: Linux `ucmatose -c 2` (no `-s`: the server,
/// librdmacm examples/cmatose.c `run_server`) listens on port 7471; the
/// driver plays cmatose's client (`run_client`): for each of the two
/// connections a PD, a CQ and an RC QP with 10 receives of 100 bytes
/// posted before the REQ (`route_handler` → `post_recvs`), the REQ with
/// cmatose's `retry_count` 5 (again every second while the server is not
/// listening yet); once both are connected, the server's 10 SENDs are
/// received on each, then 10 SENDs of 100 bytes go back on each
/// (`sending replies`). The server then disconnects every connection
/// (DREQ from Linux); the driver answers each with a DREP
/// (cmatose `cma_handler`, RDMA_CM_EVENT_DISCONNECTED → `rdma_disconnect`),
/// the timewaits end, and every resource comes back.
#[test]
#[ignore = "needs the Linux guest of `cargo xtask peer run ucmatose-linux-server`"]
fn peer_ucmatose_driver_client() {
    use cmatose::{CONNS, MSGS, PORT, SIZE};
    let (bar, wire) = live_setup();
    let dev = probe_a(&bar);
    // once, so that lazily backed tables (PBLE chunks) are not counted
    drop(Side::new(&dev, A, 64, cap(16)).region(1, 0));
    let base = (dev.resource_usage(), FakeHal::live_pages());
    let mut live = Live::new(&bar, &dev);
    let with_qp1 = dev.resource_usage();
    let peer = guest_addr(None);
    // one cmatose node per connection: its QP, CQ, PD and message buffer,
    // the receives posted before the REQ
    let mut sides: Vec<(Side<'_>, Region<'_>)> = Vec::new();
    for k in 0..CONNS {
        let mut s = Side::new(&dev, A, 64, cap(16));
        let r = s.region(1, k as u8);
        for i in 0..MSGS {
            let sge = [r.sge(2048 + i * 128, SIZE)];
            s.qp.post_recv(&[RecvWr { wr_id: 200 + i as u64, sg_list: &sge }]).unwrap();
        }
        sides.push((s, r));
    }
    // connect every node, each again a second after a REJ or a timeout
    let mut ids: [Option<ConnId>; CONNS] = [None; CONNS];
    let mut connected = [false; CONNS];
    let mut retry_at = [Instant::now(); CONNS];
    let mut attempts = 0u16;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !connected.iter().all(|&c| c) {
        assert!(Instant::now() < deadline, "connections: {:?}", live.events);
        for k in 0..CONNS {
            if ids[k].is_none() && !connected[k] && Instant::now() >= retry_at[k] {
                let cp = ConnectParams {
                    peer,
                    port_space: PortSpace::Tcp,
                    dst_port: PORT,
                    src_port: 41000 + attempts,
                    qpn: sides[k].0.qp.qp_num(),
                    starting_psn: 0x1000 * (k as u32 + 1),
                    // cmatose.c `route_handler`
                    responder_resources: 1,
                    initiator_depth: 1,
                    retry_count: 5,
                    rnr_retry_count: 7,
                    path_mtu: env_num("PEER_PATH_MTU", 1024),
                    srq: false,
                    private_data: &[],
                };
                let now = live.now();
                ids[k] = Some(live.cm.connect(now, &cp, &mut live.t).expect("connect"));
                attempts += 1;
            }
        }
        for e in live.step() {
            let id = match e {
                CmEvent::Connected { id, .. }
                | CmEvent::Rejected { id, .. }
                | CmEvent::TimedOut { id } => id,
                _ => continue,
            };
            let k = ids.iter().position(|&i| i == Some(id)).expect("an event of one of ours");
            match e {
                CmEvent::Connected { id, params, .. } => {
                    params.apply(&mut sides[k].0.qp).expect("QP to RTS");
                    live.cm.ready_to_use(id, &mut live.t).unwrap();
                    connected[k] = true;
                }
                _ => {
                    println!("host: connection {k}: {e:?}; again in 1 s");
                    ids[k] = None;
                    retry_at[k] = Instant::now() + Duration::from_secs(1);
                }
            }
        }
    }
    let ids: Vec<ConnId> = ids.into_iter().map(Option::unwrap).collect();
    println!("host: {CONNS} connections after {attempts} REQ(s)");
    // Steps until `n` completions of kind `op` arrived on node `k`; every
    // completion must be a success and of that kind (cmatose polls the
    // receives, then the sends).
    let take = |live: &mut Live<'_>, s: &mut Side<'_>, n: usize, op: WcOpcode| {
        let got = live.take(&mut s.cq, n);
        assert!(got.iter().all(|w| w.status == WcStatus::Success && w.opcode == op), "{got:?}");
        got
    };
    // `receiving data transfers`: the server's 10 SENDs on each
    for (k, (s, _)) in sides.iter_mut().enumerate() {
        let got = take(&mut live, s, MSGS, WcOpcode::Recv);
        let mut wr: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
        wr.sort();
        assert_eq!(wr, (200..200 + MSGS as u64).collect::<Vec<_>>(), "connection {k}");
        assert!(got.iter().all(|w| w.byte_len == SIZE as u32), "connection {k}: {got:?}");
    }
    println!("host: {MSGS} SENDs received on each connection");
    // `sending replies`: 10 SENDs of 100 bytes on each (sq_sig_all)
    for (k, (s, r)) in sides.iter_mut().enumerate() {
        let msg: Vec<u8> = (0..SIZE).map(|i| (i + k) as u8).collect();
        r.put(0, &msg);
        for i in 0..MSGS {
            s.qp.post_send(&[signaled(i as u64, WrOpcode::Send, &[r.sge(0, SIZE)])]).unwrap();
        }
    }
    for (k, (s, _)) in sides.iter_mut().enumerate() {
        let got = take(&mut live, s, MSGS, WcOpcode::Send);
        let wr: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
        assert_eq!(wr, (0..MSGS as u64).collect::<Vec<_>>(), "connection {k}: in order");
    }
    println!("host: {MSGS} SENDs sent on each connection");
    // the server's DREQs (some may have come while our SENDs completed):
    // each answered with a DREP, the QP to ERROR first
    let mut answered = [false; CONNS];
    let mut seen = 0;
    let until = Instant::now() + Duration::from_secs(60);
    while !answered.iter().all(|&a| a) {
        assert!(Instant::now() < until, "no DREQ from the server: {:?}", live.events);
        let new = live.events[seen..].to_vec();
        seen = live.events.len();
        if new.is_empty() {
            live.step();
        }
        for e in new {
            if let CmEvent::Disconnected { id, timed_out } = e {
                let k = ids.iter().position(|&i| i == id).expect("a DREQ for one of ours");
                assert!(!timed_out && !answered[k], "{e:?}");
                sides[k].0.qp.modify(&QpAttr::new(QpState::Error)).unwrap();
                let now = live.now();
                live.cm.disconnect(now, id, &mut live.t).unwrap();
                answered[k] = true;
            }
        }
    }
    println!("host: the server's {CONNS} DREQs answered");
    // the timewaits end, nothing else is on the way
    let until = Instant::now() + Duration::from_secs(30);
    while live.cm.active_connections() > 0 && Instant::now() < until {
        live.step();
    }
    live.run_for(2);
    print_events(&live);
    assert_eq!(live.cm.active_connections(), 0, "every connection left the CM table");
    let count = |f: fn(&CmEvent) -> bool| live.events.iter().filter(|e| f(e)).count();
    assert_eq!(count(|e| matches!(e, CmEvent::Connected { .. })), CONNS, "{:?}", live.events);
    assert_eq!(
        count(|e| matches!(e, CmEvent::Disconnected { timed_out: false, .. })),
        CONNS,
        "one DREQ per connection: {:?}",
        live.events
    );
    assert_eq!(count(|e| matches!(e, CmEvent::TimewaitExit { .. })), CONNS, "{:?}", live.events);
    // every WR completed exactly once: nothing left to flush
    for (s, _) in sides.iter_mut() {
        s.nothing();
    }
    judge_wire(&bar, &wire);
    // every resource comes back: the connections' QPs, CQs, MRs and PDs
    // at once; the AH (and ARP entry) QP1 caches for the peer's MADs goes
    // with the transport
    drop(sides);
    resources_back(&live, &dev, with_qp1, "the connections'");
    drop(live);
    assert_eq!((dev.resource_usage(), FakeHal::live_pages()), base, "every resource and page back");
}

/// Every WR the host side posted, by wr_id: a completion must name one of
/// them, and each only once.
#[derive(Default)]
struct Posted {
    open: std::collections::BTreeMap<u64, &'static str>,
    next: u64,
    done: Vec<WorkCompletion>,
}

impl Posted {
    fn id(&mut self, what: &'static str) -> u64 {
        self.next += 1;
        self.open.insert(self.next, what);
        self.next
    }
    fn complete(&mut self, w: &WorkCompletion) {
        assert!(
            self.open.remove(&w.wr_id).is_some(),
            "completion of a WR not outstanding (unknown or completed twice): {w:?}"
        );
        self.done.push(*w);
    }
    /// One step of `live`, then what `s`'s CQ brings: each completion
    /// recorded, and kept in order in `live.pending` (a poll may bring the
    /// next wait's completion too); returns how many came.
    fn step(&mut self, live: &mut Live<'_>, s: &mut Side<'_>) -> usize {
        live.step();
        let mut wc = [empty_wc(); 8];
        let k = s.cq.poll(&mut wc);
        wc[..k].iter().for_each(|w| self.complete(w));
        live.pending.extend_from_slice(&wc[..k]);
        k
    }
    /// Posts a receive of rping's advertisement (16 bytes at [`RECVB`] of
    /// `r`) under a new id.
    fn recv(&mut self, s: &mut Side<'_>, r: &Region<'_>) {
        let sge = [r.sge(RECVB, 16)];
        s.qp.post_recv(&[RecvWr { wr_id: self.id("recv"), sg_list: &sge }]).unwrap();
    }
    /// Steps and takes what `s`'s CQ brings until no WR is outstanding
    /// (`within` at most).
    fn drain(&mut self, live: &mut Live<'_>, s: &mut Side<'_>, within: Duration) {
        let until = Instant::now() + within;
        while !self.open.is_empty() && Instant::now() < until {
            live.step();
            let mut wc = [empty_wc(); 8];
            let k = s.cq.poll(&mut wc);
            wc[..k].iter().for_each(|w| self.complete(w));
        }
    }
}

/// rping's server with every WR recorded (as `peer_rping_driver_server`
/// plays it, but with a CQ of 32): its side, the registered pages of its
/// buffers, `rq` receives posted, the guest's connection accepted.
fn rping_accept<'d>(
    live: &mut Live<'_>,
    dev: &'d Dev,
    rq: usize,
) -> (Side<'d>, Region<'d>, Posted, ConnId) {
    let mut s = Side::new(dev, A, 32, cap(8));
    let r = s.region(PAGES, 0);
    let mut p = Posted::default();
    for _ in 0..rq {
        p.recv(&mut s, &r);
    }
    let id = live.accept_one(&mut s.qp, 0x4321, REQ_WAIT, None);
    (s, r, p, id)
}

/// The device's usage is `with_qp1` again (as with only QP1 up) once
/// `what` (a possessive: "the connections'") QPs, CQs, MRs and PDs are
/// gone, but for the address handle (and its ARP entry) that QP1 may cache
/// for the peer's MADs, which goes with the transport.
fn resources_back(live: &Live<'_>, dev: &Dev, with_qp1: irdma::verbs::ResourceUsage, what: &str) {
    let held = live.t.ahs_held() as u32;
    let mut u = dev.resource_usage();
    println!("host: after {what} QP/CQ/MR/PD: {u:?}, {held} AH cached by QP1");
    assert!(held <= 1, "QP1 caches one AH for the one peer");
    (u.ahs, u.arp) = (u.ahs - held, u.arp - held);
    assert_eq!(u, with_qp1, "{what} resources back");
}

/// `peer-vanishes`: Linux `rping -c -V` talks to the driver (rping's
/// server, as `rping-linux-client`) and after 20 pings the guest powers
/// off (`poweroff -f`: no DREQ, no last ACK). The host side keeps four
/// receives posted all along; when the peer is gone (a WR fails, or
/// nothing for 4 s) it posts three more sends. Judged: every posted WR
/// completes exactly once — success before, retry-exceeded/flush after
/// (the model's requester gives up after its resends, the QP goes to
/// ERROR, the rest is flushed) — the DREQ times out, the connection
/// leaves the CM table, the QP, CQ, MR, PD and pages all come back, and
/// the listener is still there for the next connection.
#[test]
#[ignore = "needs the Linux guest of `cargo xtask peer run peer-vanishes`"]
fn peer_vanishes_mid_transfer() {
    vanish(false);
}

/// `peer-vanishes-then-reconnects`: `peer-vanishes`, and then the next
/// connection. Once everything of the vanished peer is back, the host side
/// prints [`NEXT_PEER`]; the xtask, which saw the first guest power off,
/// then boots the guest a second time (same initramfs, same MAC and IP,
/// fresh rxe, the same CA GUID and addresses), and it runs
/// `rping -c -V -C 3`. The driver accepts it on the listener the
/// vanished connection came through, plays rping's server with every
/// READ's data checked against rping's ping text (Linux's `-V` checks what
/// we WRITE back), answers the client's DREQ, and every WR of the second
/// connection completes exactly once and every resource comes back again.
#[test]
#[ignore = "needs the Linux guests of `cargo xtask peer run peer-vanishes-then-reconnects`"]
fn peer_vanishes_then_reconnects() {
    vanish(true);
}

/// The line the host side of `peer-vanishes-then-reconnects` prints when
/// the vanished peer's connection and resources are all gone and it waits
/// for the next client (`cargo xtask peer` boots the second guest on it).
const NEXT_PEER: &str = "host: ready for the next peer";

/// The body of `peer_vanishes_*`: with `reconnect`, a second client is
/// accepted on the same listener after the first vanished.
fn vanish(reconnect: bool) {
    const RQ: usize = 4;
    let (bar, wire) = live_setup();
    let dev = probe_a(&bar);
    // once, so that lazily backed tables (PBLE chunks) are not counted
    drop(Side::new(&dev, A, 16, cap(8)).region(PAGES, 0));
    let base = (dev.resource_usage(), FakeHal::live_pages());
    let mut live = Live::new(&bar, &dev);
    let with_qp1 = dev.resource_usage();
    let listen = live.cm.listen(PortSpace::Tcp, RPING_PORT, Some(ips().0)).unwrap();
    let (mut s, r, mut p, id) = rping_accept(&mut live, &dev, RQ);
    // Waits for a successful `op`; `None` once a WR failed or nothing
    // came for 4 s (the peer answers a ping in milliseconds).
    let wait = |live: &mut Live<'_>, s: &mut Side<'_>, p: &mut Posted, op: WcOpcode| {
        let mut last = Instant::now();
        loop {
            if p.step(live, s) > 0 {
                last = Instant::now();
            }
            if live.pending.iter().any(|w| w.status != WcStatus::Success) {
                return None;
            }
            if let Some(i) = live.pending.iter().position(|w| w.opcode == op) {
                return Some(live.pending.remove(i));
            }
            if last.elapsed() > Duration::from_secs(4) {
                return None;
            }
        }
    };
    let mut pings = 0;
    let mut sink = (0u64, 0u32);
    // rping's server loop (as in `peer_rping_driver_server`) until the peer
    // is gone
    while wait(&mut live, &mut s, &mut p, WcOpcode::Recv).is_some() {
        let a = r.bytes(RECVB, 16);
        let (addr, rkey, len) = decode_advert(&a);
        assert_eq!(len, rping_size(), "the client's ping size");
        p.recv(&mut s, &r);
        let _ = s.qp.post_send(&[signaled(p.id("read"), read_op(addr, rkey), &[r.sge(RDMA, len)])]);
        let Some(_) = wait(&mut live, &mut s, &mut p, WcOpcode::RdmaRead) else { break };
        let _ = s.qp.post_send(&[signaled(p.id("send"), WrOpcode::Send, &[r.sge(SENDB, 16)])]);
        let Some(_) = wait(&mut live, &mut s, &mut p, WcOpcode::Send) else { break };
        let Some(_) = wait(&mut live, &mut s, &mut p, WcOpcode::Recv) else { break };
        let a = r.bytes(RECVB, 16);
        sink = {
            let (addr, rkey, _) = decode_advert(&a);
            (addr, rkey)
        };
        p.recv(&mut s, &r);
        let data = r.bytes(RDMA, len);
        let n = irdma_rping::text_len(&data);
        let sge = [r.sge(RDMA, n)];
        let _ = s.qp.post_send(&[signaled(p.id("write"), write_op(sink.0, sink.1), &sge)]);
        let Some(_) = wait(&mut live, &mut s, &mut p, WcOpcode::RdmaWrite) else { break };
        let _ = s.qp.post_send(&[signaled(p.id("send"), WrOpcode::Send, &[r.sge(SENDB, 16)])]);
        let Some(_) = wait(&mut live, &mut s, &mut p, WcOpcode::Send) else { break };
        pings += 1;
    }
    println!("host: {pings} pings, then the peer was gone; {} WRs not yet completed", p.open.len());
    assert!(pings >= 1, "the peer vanished before the first ping: {:?}", live.events);
    // more send-queue work toward the vanished peer: the first is resent
    // until the model gives up (or meets an ERROR QP), the rest flushed
    let (w1, w2, w3) = (p.id("send"), p.id("write"), p.id("send"));
    let (msg, data) = ([r.sge(SENDB, 16)], [r.sge(RDMA, 16)]);
    let wrs = [
        signaled(w1, WrOpcode::Send, &msg),
        signaled(w2, write_op(sink.0, sink.1), &data),
        signaled(w3, WrOpcode::Send, &msg),
    ];
    if let Err(e) = s.qp.post_send(&wrs) {
        // refused, so never posted: not owed a completion
        println!("host: post_send after the peer left: {e:?}");
        for w in [w1, w2, w3] {
            p.open.remove(&w);
        }
    }
    s.qp.modify(&QpAttr::new(QpState::Error)).unwrap();
    let now = live.now();
    live.cm.disconnect(now, id, &mut live.t).unwrap();
    // every outstanding WR completes (flush), and nothing more after that
    p.drain(&mut live, &mut s, Duration::from_secs(30));
    assert!(p.open.is_empty(), "WRs never completed: {:?}", p.open);
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        let mut wc = [empty_wc(); 8];
        let k = s.cq.poll(&mut wc);
        wc[..k].iter().for_each(|w| p.complete(w));
    }
    let ok = p.done.iter().filter(|w| w.status == WcStatus::Success).count();
    let failed: Vec<_> = p.done.iter().filter(|w| w.status != WcStatus::Success).collect();
    println!(
        "host: {} WRs posted, each completed once: {ok} success, {} failed {:?}",
        p.next,
        failed.len(),
        failed.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>()
    );
    assert_eq!(p.done.len() as u64, p.next, "every posted WR completed exactly once");
    assert!(
        failed.iter().filter(|w| w.opcode == WcOpcode::Recv).count() >= RQ,
        "the receives still posted were flushed: {failed:?}"
    );
    assert!(
        failed.iter().any(|w| w.opcode != WcOpcode::Recv),
        "send-queue work toward the vanished peer failed: {failed:?}"
    );
    // the DREQ to a vanished peer is resent, times out, timewait ends
    let until = Instant::now() + Duration::from_secs(150);
    while live.cm.active_connections() > 0 && Instant::now() < until {
        live.step();
    }
    print_events(&live);
    assert_eq!(live.cm.active_connections(), 0, "the connection left the CM table");
    assert!(
        live.events.iter().any(|e| matches!(e, CmEvent::Disconnected { timed_out: true, .. })),
        "our DREQ went unanswered (the peer vanished without a word): {:?}",
        live.events
    );
    // the listener is still there for the next connection
    assert_eq!(
        live.cm.listen(PortSpace::Tcp, RPING_PORT, Some(ips().0)),
        Err(irdma::cm::CmError::AlreadyListening)
    );
    // every resource comes back: the QP, CQ, MR and PD of the connection
    // at once; the address handle (and its ARP entry) that QP1 caches
    // for the peer's MADs goes with the transport
    drop(r);
    drop(s);
    resources_back(&live, &dev, with_qp1, "the vanished connection's");
    if reconnect {
        rping_again(&mut live, &dev, listen);
        resources_back(&live, &dev, with_qp1, "the second connection's");
    }
    live.cm.unlisten(listen).unwrap();
    judge_wire(&bar, &wire);
    drop(live);
    assert_eq!((dev.resource_usage(), FakeHal::live_pages()), base, "every resource and page back");
}

/// The second client of `peer_vanishes_then_reconnects`: prints
/// [`NEXT_PEER`], accepts the next REQ (it must come through `listen`),
/// plays rping's server for [`PINGS`] pings with the READ data checked,
/// answers the client's DREQ and waits for the timewait to end. Every WR
/// posted completes exactly once; the side is dropped on return.
fn rping_again(live: &mut Live<'_>, dev: &Dev, listen: irdma::cm::ListenId) {
    let mut s = Side::new(dev, A, 16, cap(8));
    let r = s.region(PAGES, 0);
    let size = rping_size();
    let mut p = Posted::default();
    p.recv(&mut s, &r);
    live.events.clear();
    live.pending.clear();
    println!("{NEXT_PEER}");
    // the second guest boots and connects in 7–15 s; the xtask waits 75 s
    // after it powered off before it kills this side
    let within = (Duration::from_secs(60), "no second connect request");
    let id = live.accept_one(&mut s.qp, 0x5432, within, Some(listen));
    println!("host: the next peer's REQ accepted on the same listener");
    // `Live::wc` (successful completions only), each recorded once
    let wc = |live: &mut Live<'_>, s: &mut Side<'_>, p: &mut Posted, op| {
        let w = live.wc(s, op);
        p.complete(&w);
        w
    };
    for ping in 0..PINGS {
        assert_eq!(wc(live, &mut s, &mut p, WcOpcode::Recv).byte_len, 16);
        let (addr, rkey, len) = decode_advert(&r.bytes(RECVB, 16));
        assert_eq!(len, size, "the client's ping size");
        p.recv(&mut s, &r);
        s.qp.post_send(&[signaled(p.id("read"), read_op(addr, rkey), &[r.sge(RDMA, len)])])
            .unwrap();
        wc(live, &mut s, &mut p, WcOpcode::RdmaRead);
        let data = r.bytes(RDMA, len);
        // a fresh rping process: its pings count from 0 again
        irdma_rping::check_ping(ping, &data)
            .unwrap_or_else(|m| panic!("ping {ping} of the second client: {m:?}"));
        println!("host: server ping data: {}", String::from_utf8_lossy(&data[..len.min(72) - 1]));
        s.qp.post_send(&[signaled(p.id("send"), WrOpcode::Send, &[r.sge(SENDB, 16)])]).unwrap();
        wc(live, &mut s, &mut p, WcOpcode::Send);
        assert_eq!(wc(live, &mut s, &mut p, WcOpcode::Recv).byte_len, 16);
        let (addr, rkey, _) = decode_advert(&r.bytes(RECVB, 16));
        p.recv(&mut s, &r);
        let n = irdma_rping::text_len(&data);
        s.qp.post_send(&[signaled(p.id("write"), write_op(addr, rkey), &[r.sge(RDMA, n)])])
            .unwrap();
        wc(live, &mut s, &mut p, WcOpcode::RdmaWrite);
        s.qp.post_send(&[signaled(p.id("send"), WrOpcode::Send, &[r.sge(SENDB, 16)])]).unwrap();
        wc(live, &mut s, &mut p, WcOpcode::Send);
    }
    println!("host: {PINGS} pings with the next peer");
    // the client's DREQ: the QP to ERROR, DREP out, the timewait ends
    let deadline = Instant::now() + Duration::from_secs(30);
    'dreq: loop {
        assert!(Instant::now() < deadline, "no DREQ from the next peer: {:?}", live.events);
        for e in live.step() {
            if let CmEvent::Disconnected { id: d, timed_out } = e {
                assert_eq!((d, timed_out), (id, false));
                s.qp.modify(&QpAttr::new(QpState::Error)).unwrap();
                let now = live.now();
                live.cm.disconnect(now, d, &mut live.t).unwrap();
                break 'dreq;
            }
        }
    }
    // the receive still posted is flushed, and nothing completes twice
    let until = Instant::now() + Duration::from_secs(30);
    while (!p.open.is_empty() || live.cm.active_connections() > 0) && Instant::now() < until {
        live.step();
        let mut w = [empty_wc(); 8];
        let k = s.cq.poll(&mut w);
        w[..k].iter().for_each(|w| p.complete(w));
    }
    for w in std::mem::take(&mut live.pending) {
        p.complete(&w);
    }
    print_events(live);
    assert!(p.open.is_empty(), "WRs of the second connection never completed: {:?}", p.open);
    assert_eq!(p.done.len() as u64, p.next, "every posted WR completed exactly once");
    let failed: Vec<_> = p.done.iter().filter(|w| w.status != WcStatus::Success).collect();
    assert!(
        failed.iter().all(|w| w.opcode == WcOpcode::Recv && w.status == WcStatus::WrFlushErr),
        "only the last receive is flushed: {failed:?}"
    );
    assert_eq!(live.cm.active_connections(), 0, "the second connection left the CM table");
    s.nothing();
    println!("host: {} WRs of the second connection, each completed once", p.next);
}

/// udaddy.c defaults: port 7174, 10 messages of 100 bytes.
mod udaddy {
    pub const PORT: u16 = 7174;
    pub const MSGS: u64 = 10;
    pub const SIZE: u32 = 100;
}

/// udaddy's node on the driver: a UD QP in RTS with the UDP port space's
/// Q_Key, SQ PSN 0, and [`udaddy::MSGS`] receives of a GRH and
/// [`udaddy::SIZE`] bytes posted, 256 bytes apart in its region.
fn udaddy_qp(dev: &Dev) -> (TPd<'_>, TCq<'_>, TQp<'_>, Region<'_>) {
    use irdma::cm::rdma_cm::UDP_QKEY;
    use irdma::verbs::GRH_BYTES;
    use udaddy::{MSGS, SIZE};
    let (pd, cq, mut qp) = ud_qp(dev, false, cap(16), (UDP_QKEY, 0));
    let b = buf(4);
    let mr = reg(dev, &pd, b.paddr(), 4 * 4096, &pages_of(&b), false);
    let r = Region { mr, buf: b };
    for i in 0..MSGS {
        let sge = [Sge { addr: r.addr() + i * 256, length: GRH_BYTES + SIZE, lkey: r.key() }];
        qp.post_recv(&[RecvWr { wr_id: 100 + i, sg_list: &sge }]).unwrap();
    }
    (pd, cq, qp, r)
}

/// [`udaddy::MSGS`] signaled SEND_WITH_IMM datagrams of [`udaddy::SIZE`]
/// bytes from offset 3000 of `r` to `(qpn, qkey)` through `ah`, wr_ids from
/// 0; the immediate is our QPN (udaddy replies to be32toh(imm), udaddy.c
/// `create_reply_ah`).
fn udaddy_sends(
    qp: &mut TQp<'_>,
    r: &Region<'_>,
    ah: &irdma::verbs::Ah<'_, FakeHal, ModelBar>,
    (qpn, qkey): (u32, u32),
) {
    use udaddy::{MSGS, SIZE};
    for i in 0..MSGS {
        let sge = [Sge { addr: r.addr() + 3000, length: SIZE, lkey: r.key() }];
        let opcode = WrOpcode::UdSend {
            ah: ah.id(),
            remote_qpn: qpn,
            remote_qkey: qkey,
            imm: Some(qp.qp_num()),
        };
        let wr = SendWr { wr_id: i, opcode, flags: SendFlags::SIGNALED, sg_list: &sge };
        qp.post_send(&[wr]).unwrap();
    }
}

/// `udaddy-linux-client`: Linux `udaddy -s 10.0.0.1` resolves the driver's
/// RDMA_PS_UDP port 7174 by SIDR and plays udaddy's client; the driver
/// plays udaddy's server (librdmacm examples/udaddy.c `run_server`): a UD
/// QP with Q_Key RDMA_UDP_QKEY and 10 receives of 40 + 100 bytes posted,
/// the SIDR_REP with its QPN, 10 SEND_WITH_IMM datagrams received (immediate
/// = the client's QPN), then 10 replies to that QPN, signaled.
fn udaddy_driver_server(_: &PcapOnDrop, dev: &Dev, live: &mut Live<'_>) {
    use irdma::cm::SidrAcceptParams;
    use irdma::cm::rdma_cm::UDP_QKEY;
    use irdma::verbs::{AhAttr, GRH_BYTES};
    use udaddy::{MSGS, PORT, SIZE};
    live.cm.listen(PortSpace::Udp, PORT, Some(ips().0)).unwrap();
    let (pd, mut cq, mut qp, r) = udaddy_qp(dev);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut peer = None;
    while peer.is_none() {
        assert!(Instant::now() < deadline, "no SIDR_REQ: {:?}", live.events);
        for e in live.step() {
            if let CmEvent::SidrRequest { id, info } = e {
                let acc = SidrAcceptParams { qpn: qp.qp_num(), qkey: UDP_QKEY, private_data: &[] };
                let now = live.now();
                live.cm.sidr_accept(now, id, &acc, &mut live.t).unwrap();
                println!(
                    "host: SIDR_REQ from {:?} port {}, answered with QPN {}",
                    info.hdr.src, info.hdr.src_port, acc.qpn
                );
                peer = Some(info.peer);
            }
        }
    }
    let peer = peer.unwrap();
    let got = live.take(&mut cq, MSGS as usize);
    let mut client_qpn = None;
    for w in &got {
        assert_eq!((w.opcode, w.status), (WcOpcode::Recv, WcStatus::Success), "{w:?}");
        assert_eq!(w.byte_len, GRH_BYTES + SIZE, "{w:?}");
        let ud = w.ud.expect("UD fields");
        let imm = w.imm_data.expect("SEND_WITH_IMM");
        assert!(imm == ud.src_qp || imm.swap_bytes() == ud.src_qp, "imm {imm:#x} vs {ud:?}");
        assert_eq!(*client_qpn.get_or_insert(ud.src_qp), ud.src_qp);
    }
    let client_qpn = client_qpn.unwrap();
    println!("host: {MSGS} datagrams from QPN {client_qpn}, replying");
    let mut ah = AhAttr::new(peer.peer_ip, peer.local_ip);
    ah.dest_mac = Some(peer.peer_mac);
    ah.vlan = peer.vlan;
    let ah = pd.create_ah(&ah).expect("ah");
    r.put(3000, &[0x5a; SIZE as usize]);
    udaddy_sends(&mut qp, &r, &ah, (client_qpn, UDP_QKEY));
    let got = live.take(&mut cq, MSGS as usize);
    assert!(got.iter().all(|w| w.opcode == WcOpcode::Send && w.status == WcStatus::Success));
    live.run_for(2);
}

/// `udaddy-linux-server`: Linux `udaddy` listens on RDMA_PS_UDP port 7174;
/// the driver resolves it by SIDR (again every second while it is not
/// listening yet: SIDR_REP status 1) and plays udaddy's client
/// (examples/udaddy.c `run_client`): 10 SEND_WITH_IMM datagrams of 100
/// bytes to the resolved QPN and Q_Key, immediate = our QPN (the server
/// answers to it), then the server's 10 replies received.
fn udaddy_driver_client(_: &PcapOnDrop, dev: &Dev, live: &mut Live<'_>) {
    use irdma::cm::SidrParams;
    use irdma::cm::rdma_cm::UDP_QKEY;
    use irdma::verbs::{AhAttr, GRH_BYTES};
    use udaddy::{MSGS, PORT, SIZE};
    let (pd, mut cq, mut qp, r) = udaddy_qp(dev);
    let peer = guest_addr(None);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut pending = false;
    let mut retry_at = Instant::now();
    let mut attempt = 0u16;
    let (qpn, qkey) = loop {
        assert!(Instant::now() < deadline, "not resolved: {:?}", live.events);
        if !pending && Instant::now() >= retry_at {
            let sp = SidrParams {
                peer,
                port_space: PortSpace::Udp,
                dst_port: PORT,
                src_port: 41000 + attempt,
                private_data: &[],
            };
            let now = live.now();
            live.cm.sidr_resolve(now, &sp, &mut live.t).expect("sidr_resolve");
            pending = true;
            attempt += 1;
        }
        let mut got = None;
        for e in live.step() {
            match e {
                CmEvent::SidrResolved { qpn, qkey, .. } => got = Some((qpn, qkey)),
                CmEvent::SidrRejected { .. } | CmEvent::TimedOut { .. } => {
                    pending = false;
                    retry_at = Instant::now() + Duration::from_secs(1);
                }
                _ => {}
            }
        }
        if let Some(g) = got {
            break g;
        }
    };
    println!("host: SIDR resolved after {attempt} attempt(s): QPN {qpn}, Q_Key {qkey:#x}");
    assert_eq!(qkey, UDP_QKEY);
    let mut ah = AhAttr::new(peer.peer_ip, peer.local_ip);
    ah.dest_mac = Some(peer.peer_mac);
    let ah = pd.create_ah(&ah).expect("ah");
    let msg: Vec<u8> = (0..SIZE).map(|i| i as u8).collect();
    r.put(3000, &msg);
    udaddy_sends(&mut qp, &r, &ah, (qpn, qkey));
    let got = live.take(&mut cq, 2 * MSGS as usize);
    assert!(got.iter().all(|w| w.status == WcStatus::Success), "{got:?}");
    let recvs: Vec<_> = got.iter().filter(|w| w.opcode == WcOpcode::Recv).collect();
    assert_eq!(recvs.len(), MSGS as usize, "{got:?}");
    for w in recvs {
        assert_eq!(w.byte_len, GRH_BYTES + SIZE);
        assert_eq!(w.ud.map(|u| u.src_qp), Some(qpn), "{w:?}");
    }
    println!("host: {MSGS} datagrams sent, {MSGS} replies received");
    live.run_for(2);
}

// ---------------------------------------------------------------------
// perftest with `-R` (linux-rdma/perftest, tag v4.5-0.17 = Debian 12's
// perftest 4.5+0.17-1) against the driver
// ---------------------------------------------------------------------
//
// With `-R` perftest makes two RDMA-CM connections to the same port
// (perftest_parameters.c: parser sets use_rdma_cm with work_rdma_cm): a
// "comm" RC QP (create_comm_struct: tx/rx depth 1, one receive of
// sizeof(struct pingpong_dest) = 56 bytes) that replaces the TCP socket,
// then the test's own QP (create_rdma_cm_connection). Every exchange on
// the comm QP is lock-step (perftest_communication.c: ctx_xchg_data_rdma,
// ctx_hand_shake): the client SENDs then waits for a RECV, the server
// waits for a RECV then SENDs; each side reposts its one receive before it
// SENDs again. The exchanges, in order (write_bw.c / read_bw.c /
// send_bw.c: main):
//  E1 version string (16 bytes, exchange_versions), E2 cycle_buffer and E3
//  cache line size (be32 each, check_sys_data), E4 the MTU as "%d" of
//  enum ibv_mtu in 2 bytes (check_mtu), E5 pingpong_dest (not yet filled),
//  the data connection, E6 pingpong_dest, E7-E9 pingpong_dest (qpn, psn,
//  rkey, vaddr, gid: set_up_connection; be32/be64 fields, rdma_write_keys).
//  WRITE/READ: the client runs, then E10 handshake, E11-E15 the bw report
//  (size, iters, peak, average, msg rate: be64 / byte-swapped doubles,
//  xchg_bw_reports), E16 handshake (ctx_close_connection).
//  SEND: the server posts its receives, E10 handshake, the client runs,
//  E11 handshake (ctx_close_connection); no report exchange.
// Then the client DREQs the data connection and waits for the DREP
// (rdma_cm_disconnect_nodes); both destroy their ids (the kernel CM sends
// a DREQ for an id destroyed while connected).

/// perftest's port (perftest_parameters.h: DEF_PORT).
const PT_PORT: u16 = 18515;
/// sizeof(struct pingpong_dest) (perftest_resources.h): lid, out_reads,
/// qpn, psn, rkey (5 × 4), 4 bytes of padding, vaddr (8), gid (16), srqn,
/// gid_index (2 × 4).
const PT_DEST: usize = 56;
/// The version we claim: configure.ac AC_INIT of v4.5-0.17. perftest
/// refuses a peer below 5.70 (check_version_compatibility).
const PT_VERSION: &str = "6.06";
/// Iterations (`-n` in the scenarios' command lines).
const PT_ITERS: usize = 100;
/// Our cycle buffer (a page) and cache line (perftest_parameters.h
/// DEF_CACHE_LINE_SIZE); each side takes the larger of the two.
const PT_CYCLE: u32 = 4096;
const PT_CACHE_LINE: u32 = 64;
/// Work requests the driver keeps in flight as perftest's client.
const PT_WINDOW: usize = 16;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum PtVerb {
    Write,
    Read,
    Send,
}

/// `struct pingpong_dest` as rdma_write_keys sends it (big-endian fields).
#[derive(Debug, Clone, Copy, Default)]
struct PtDest {
    out_reads: u32,
    qpn: u32,
    psn: u32,
    rkey: u32,
    vaddr: u64,
    gid: [u8; 16],
}

impl PtDest {
    fn encode(&self) -> [u8; PT_DEST] {
        let mut b = [0u8; PT_DEST];
        b[4..8].copy_from_slice(&self.out_reads.to_be_bytes());
        b[8..12].copy_from_slice(&self.qpn.to_be_bytes());
        b[12..16].copy_from_slice(&self.psn.to_be_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        b[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        b[32..48].copy_from_slice(&self.gid);
        b
    }

    fn decode(b: &[u8]) -> PtDest {
        assert_eq!(b.len(), PT_DEST, "a pingpong_dest is {PT_DEST} bytes: {b:02x?}");
        let u32_at = |o: usize| u32::from_be_bytes(b[o..o + 4].try_into().unwrap());
        PtDest {
            out_reads: u32_at(4),
            qpn: u32_at(8),
            psn: u32_at(12),
            rkey: u32_at(16),
            vaddr: u64::from_be_bytes(b[24..32].try_into().unwrap()),
            gid: b[32..48].try_into().unwrap(),
        }
    }
}

/// Steps until a completion of kind `op` is on `s`'s CQ (60 s at most);
/// completions of other kinds polled on the way wait in `pend`. Unlike
/// [`Live::wc`] the pending list is per QP (perftest uses two).
fn pt_wc(
    live: &mut Live<'_>,
    s: &mut Side<'_>,
    pend: &mut Vec<WorkCompletion>,
    op: WcOpcode,
) -> WorkCompletion {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(i) = pend.iter().position(|w| w.opcode == op) {
            let w = pend.remove(i);
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            return w;
        }
        assert!(
            Instant::now() < deadline,
            "no {op:?} completion (have {pend:?}); CM events {:?}",
            live.events
        );
        live.step();
        let mut wc = [empty_wc(); 16];
        let k = s.cq.poll(&mut wc);
        pend.extend_from_slice(&wc[..k]);
    }
}

/// perftest's comm QP: the driver's end of the lock-step exchange.
struct PtComm<'d> {
    s: Side<'d>,
    r: Region<'d>,
    client: bool,
    pend: Vec<WorkCompletion>,
}

/// Offsets in the comm QP's page: the one receive buffer, the send buffer.
const PT_RECV: usize = 0;
const PT_SENDB: usize = 2048;

impl PtComm<'_> {
    fn post_recv(&mut self) {
        let sge = [self.r.sge(PT_RECV, PT_DEST)];
        self.s.qp.post_recv(&[RecvWr { wr_id: 1, sg_list: &sge }]).unwrap();
    }

    fn send(&mut self, live: &mut Live<'_>, mine: &[u8]) {
        self.r.put(PT_SENDB, mine);
        let sge = [self.r.sge(PT_SENDB, mine.len())];
        self.s.qp.post_send(&[signaled(2, WrOpcode::Send, &sge)]).unwrap();
        pt_wc(live, &mut self.s, &mut self.pend, WcOpcode::Send);
    }

    fn recv(&mut self, live: &mut Live<'_>) -> Vec<u8> {
        let w = pt_wc(live, &mut self.s, &mut self.pend, WcOpcode::Recv);
        let v = self.r.bytes(PT_RECV, w.byte_len as usize);
        self.post_recv();
        v
    }

    /// One exchange (ctx_xchg_data_rdma): ours out, theirs back.
    fn xchg(&mut self, live: &mut Live<'_>, mine: &[u8]) -> Vec<u8> {
        if self.client {
            self.send(live, mine);
            self.recv(live)
        } else {
            let v = self.recv(live);
            self.send(live, mine);
            v
        }
    }

    /// An exchange whose content is checked for its size only.
    fn xchg_len(&mut self, live: &mut Live<'_>, mine: &[u8]) -> Vec<u8> {
        let v = self.xchg(live, mine);
        assert_eq!(v.len(), mine.len(), "exchange of {} bytes got {v:02x?}", mine.len());
        v
    }
}

/// Index of the first event from `seen` on that `pick` accepts; `seen`
/// moves past every event looked at.
fn pt_next_event<R>(
    live: &mut Live<'_>,
    seen: &mut usize,
    what: &str,
    secs: u64,
    mut pick: impl FnMut(&CmEvent) -> Option<R>,
) -> Option<R> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        while *seen < live.events.len() {
            let e = live.events[*seen];
            *seen += 1;
            if let Some(r) = pick(&e) {
                return Some(r);
            }
        }
        if Instant::now() >= deadline {
            println!("host: no {what} in {secs} s");
            return None;
        }
        live.step();
    }
}

/// Accepts the next connection request on the listener with `qp`.
fn pt_accept(live: &mut Live<'_>, seen: &mut usize, qp: &mut TQp<'_>, psn: u32) -> ConnId {
    let id = pt_next_event(live, seen, "connect request", 120, |e| match e {
        CmEvent::ConnectRequest { id, .. } => Some(*id),
        _ => None,
    })
    .unwrap_or_else(|| panic!("no connect request: {:?}", live.events));
    let acc = AcceptParams::new(qp.qp_num(), psn);
    live.cm.accept_params(id, &acc).unwrap().apply(qp).expect("QP to RTS");
    let now = live.now();
    live.cm.accept(now, id, &acc, &mut live.t).unwrap();
    id
}

/// Connects `qp` to perftest's server, again every `again_ms` while it is
/// not listening yet (REJ 8 or no answer), for `secs` at most.
fn pt_connect(
    live: &mut Live<'_>,
    seen: &mut usize,
    qp: &mut TQp<'_>,
    psn: u32,
    src_port: &mut u16,
    again_ms: u64,
    secs: u64,
) -> ConnId {
    let peer = guest_addr(None);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut attempts = 0;
    loop {
        assert!(Instant::now() < deadline, "no connection: {:?}", live.events);
        let cp = ConnectParams {
            src_port: *src_port,
            path_mtu: env_num("PEER_PATH_MTU", 1024),
            ..ConnectParams::new(peer, PortSpace::Tcp, PT_PORT, qp.qp_num(), psn)
        };
        *src_port += 1;
        attempts += 1;
        let now = live.now();
        let id = live.cm.connect(now, &cp, &mut live.t).expect("connect");
        // the CM resends the REQ while the guest boots, then times out
        let left = deadline.saturating_duration_since(Instant::now()).as_secs().max(1);
        let r = pt_next_event(live, seen, "answer to our REQ", left, |e| match e {
            CmEvent::Connected { id: c, params, .. } if *c == id => Some(Ok(*params)),
            CmEvent::Rejected { id: c, .. } | CmEvent::TimedOut { id: c, .. } if *c == id => {
                Some(Err(format!("{e:?}")))
            }
            _ => None,
        });
        match r {
            Some(Ok(params)) => {
                params.apply(qp).expect("QP to RTS");
                live.cm.ready_to_use(id, &mut live.t).unwrap();
                println!("host: connected to port {PT_PORT} after {attempts} attempt(s)");
                return id;
            }
            Some(Err(e)) => println!("host: {e}; again in {again_ms} ms"),
            None => panic!("our REQ went unanswered: {:?}", live.events),
        }
        let until = Instant::now() + Duration::from_millis(again_ms);
        while Instant::now() < until {
            live.step();
        }
    }
}

/// One perftest `-R` run with the driver as client (`client`) or server.
fn perftest_live(client: bool, verb: PtVerb) {
    let rcvbuf0 = udp_rcvbuf_errors();
    let (bar, wire) = live_setup();
    let dev = probe_a(&bar);
    let mut live = Live::new(&bar, &dev);
    let size = rping_size();
    let (ours, _) = ips();
    let mut seen = 0;
    let mut src_port = 41000;
    let listen = (!client).then(|| live.cm.listen(PortSpace::Tcp, PT_PORT, Some(ours)).unwrap());
    // the comm QP, its one receive posted before the connection
    let s = Side::new(&dev, A, 16, cap(4));
    let r = s.region(1, 0);
    let mut comm = PtComm { s, r, client, pend: Vec::new() };
    comm.post_recv();
    let comm_id = if client {
        pt_connect(&mut live, &mut seen, &mut comm.s.qp, 0x10, &mut src_port, 1000, 120)
    } else {
        pt_accept(&mut live, &mut seen, &mut comm.s.qp, 0x20)
    };
    // E1 version
    let mut v = [0u8; 16];
    v[..PT_VERSION.len()].copy_from_slice(PT_VERSION.as_bytes());
    let theirs = comm.xchg_len(&mut live, &v);
    let ver = String::from_utf8_lossy(&theirs[..theirs.iter().position(|&b| b == 0).unwrap_or(16)])
        .into_owned();
    println!("host: perftest version {ver} (we say {PT_VERSION})");
    assert!(ver.parse::<f64>().is_ok_and(|x| x >= 5.70), "perftest version {ver}");
    // E2, E3 cycle buffer and cache line
    comm.xchg_len(&mut live, &PT_CYCLE.to_be_bytes());
    comm.xchg_len(&mut live, &PT_CACHE_LINE.to_be_bytes());
    // E4 the MTU as enum ibv_mtu in decimal (IBV_MTU_256 = 1 … 4096 = 5)
    let mtu = env_num("PEER_PATH_MTU", 1024);
    let m = b'0' + (mtu / 256).trailing_zeros() as u8 + 1;
    let theirs = comm.xchg_len(&mut live, &[m, 0]);
    println!("host: MTU enum ours {} theirs {}", m as char, theirs[0] as char);
    // E5, the data connection, E6
    comm.xchg_len(&mut live, &[0; PT_DEST]);
    let mut ds = Side::new(&dev, A, 64, cap(32));
    let dr = ds.region(size.max(4096).div_ceil(4096), 0x5a);
    let data_id = if client {
        // perftest's server listens again only after E5: retry briefly
        pt_connect(&mut live, &mut seen, &mut ds.qp, 0x30, &mut src_port, 200, 60)
    } else {
        pt_accept(&mut live, &mut seen, &mut ds.qp, 0x40)
    };
    comm.xchg_len(&mut live, &[0; PT_DEST]);
    // E7-E9 the data QP's addresses
    let mine = PtDest {
        out_reads: 8,
        qpn: ds.qp.qp_num(),
        psn: 0x40,
        rkey: dr.mr.rkey(),
        vaddr: dr.addr(),
        gid: gid_of(ours),
    }
    .encode();
    let rem = PtDest::decode(&comm.xchg(&mut live, &mine));
    println!(
        "host: remote address: QPN {:#08x} PSN {:#08x} RKey {:#010x} VAddr {:#018x} GID {:02x?}",
        rem.qpn, rem.psn, rem.rkey, rem.vaddr, rem.gid
    );
    comm.xchg_len(&mut live, &mine);
    comm.xchg_len(&mut live, &mine);
    let mut dpend = Vec::new();
    let pattern: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
    let before = dr.bytes(0, size);
    match (client, verb) {
        (true, PtVerb::Send) => {
            comm.xchg_len(&mut live, &[0; PT_DEST]); // E10: the server's receives are up
            dr.put(0, &pattern);
            let secs = pt_run(&mut live, &mut ds, &mut dpend, size, |_| WrOpcode::Send, &dr);
            println!("host: driver's figures: {}", pt_figures(size, secs));
            comm.xchg_len(&mut live, &[0; PT_DEST]); // E11
        }
        (true, _) => {
            let op = move |_| match verb {
                PtVerb::Write => write_op(rem.vaddr, rem.rkey),
                _ => read_op(rem.vaddr, rem.rkey),
            };
            if verb == PtVerb::Write {
                dr.put(0, &pattern);
            }
            let secs = pt_run(&mut live, &mut ds, &mut dpend, size, op, &dr);
            println!("host: driver's figures: {}", pt_figures(size, secs));
            if verb == PtVerb::Read {
                assert_ne!(dr.bytes(0, size), before, "READ brought the server's buffer");
            }
            comm.xchg_len(&mut live, &[0; PT_DEST]); // E10
            // E11-E15 our report (the server prints it)
            let mb = (size * PT_ITERS) as f64 / secs / 1_048_576.0;
            let rate = PT_ITERS as f64 / secs / 1e6;
            for x in [size as u64, PT_ITERS as u64, mb.to_bits(), mb.to_bits(), rate.to_bits()] {
                comm.xchg_len(&mut live, &x.to_be_bytes());
            }
            comm.xchg_len(&mut live, &[0; PT_DEST]); // E16
        }
        (false, PtVerb::Send) => {
            let mut got = 0;
            let mut posted = 0;
            let post = |ds: &mut Side<'_>, posted: &mut usize| {
                let sge = [dr.sge(0, size)];
                ds.qp.post_recv(&[RecvWr { wr_id: 1000 + *posted as u64, sg_list: &sge }]).unwrap();
                *posted += 1;
            };
            while posted < PT_WINDOW.min(PT_ITERS) {
                post(&mut ds, &mut posted);
            }
            comm.xchg_len(&mut live, &[0; PT_DEST]); // E10
            while got < PT_ITERS {
                let w = pt_wc(&mut live, &mut ds, &mut dpend, WcOpcode::Recv);
                assert_eq!(w.wr_id, 1000 + got as u64, "receives complete in order, once");
                assert_eq!(w.byte_len as usize, size);
                got += 1;
                if posted < PT_ITERS {
                    post(&mut ds, &mut posted);
                }
            }
            println!("host: {got} SENDs of {size} bytes received");
            comm.xchg_len(&mut live, &[0; PT_DEST]); // E11
        }
        (false, _) => {
            comm.xchg_len(&mut live, &[0; PT_DEST]); // E10: the client is done
            let mut rep = Vec::new();
            for _ in 0..5 {
                rep.push(u64::from_be_bytes(comm.xchg_len(&mut live, &[0; 8]).try_into().unwrap()));
            }
            println!(
                "host: the client's report: {} bytes × {} iterations, peak {:.2} MB/s, \
                 average {:.2} MB/s, {:.6} Mpps",
                rep[0],
                rep[1],
                f64::from_bits(rep[2]),
                f64::from_bits(rep[3]),
                f64::from_bits(rep[4])
            );
            assert_eq!((rep[0], rep[1]), (size as u64, PT_ITERS as u64), "the client's run");
            comm.xchg_len(&mut live, &[0; PT_DEST]); // E16
            if verb == PtVerb::Write {
                assert_ne!(dr.bytes(0, size), before, "the client's WRITEs landed");
            }
        }
    }
    assert!(dpend.is_empty(), "completions left over: {dpend:?}");
    comm.s.nothing();
    ds.nothing();
    // the end: the client DREQs the data connection; both ids are
    // destroyed (a DREQ each from Linux; ours as client)
    let disc = |live: &Live<'_>, id: ConnId| {
        live.events.iter().any(|e| matches!(e, CmEvent::Disconnected { id: d, .. } if *d == id))
    };
    if client {
        for (qp, id) in [(&mut ds.qp, data_id), (&mut comm.s.qp, comm_id)] {
            qp.modify(&QpAttr::new(QpState::Error)).unwrap();
            let now = live.now();
            // the server may have sent its DREQ first (crossing DREQs)
            let _ = live.cm.disconnect(now, id, &mut live.t);
        }
    }
    // a DREQ of the peer may have come while the last exchange finished:
    // every event since the connections were made is looked at
    let until = Instant::now() + Duration::from_secs(30);
    let mut answered = Vec::new();
    loop {
        while seen < live.events.len() {
            let e = live.events[seen];
            seen += 1;
            if let CmEvent::Disconnected { id, .. } = e
                && !answered.contains(&id)
            {
                answered.push(id);
                let qp = if id == data_id { &mut ds.qp } else { &mut comm.s.qp };
                let _ = qp.modify(&QpAttr::new(QpState::Error));
                let now = live.now();
                // our DREP (or nothing, when it answers our own DREQ)
                let _ = live.cm.disconnect(now, id, &mut live.t);
            }
        }
        if Instant::now() >= until || (disc(&live, data_id) && disc(&live, comm_id)) {
            break;
        }
        live.step();
    }
    live.run_for(2);
    print_events(&live);
    assert!(disc(&live, data_id), "the data connection ended: {:?}", live.events);
    assert!(disc(&live, comm_id), "the comm connection ended: {:?}", live.events);
    if let Some(l) = listen {
        live.cm.unlisten(l).unwrap();
    }
    // bulk traffic overflows the host's UDP receive buffer (notes, "Frames
    // between processes"): a lost frame makes the model's responder drop
    // what follows until the EPSN comes again (NAK 0x60 once, rxe goes
    // back; rocev2-wire §4.7). Those PSN drops are expected here; every
    // other reason is not.
    let c = bar.with_device(|d| d.counters().clone());
    let lost = udp_rcvbuf_errors().saturating_sub(rcvbuf0);
    println!(
        "host: model wire drops {} {:?}; host UDP RcvbufErrors +{lost}",
        c.wire_drops, c.wire_drop_reasons
    );
    assert_eq!(c.wire_drops, c.wire_drop_reasons.psn, "only out-of-sequence drops");
    bar.expect_counter(ErrorCounter::WireDrops);
    judge_wire(&bar, &wire);
}

/// `Udp RcvbufErrors` of /proc/net/snmp (0 where unreadable).
fn udp_rcvbuf_errors() -> u64 {
    let t = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut udp = t.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(h), Some(v)) = (udp.next(), udp.next()) else { return 0 };
    h.split_whitespace()
        .zip(v.split_whitespace())
        .find(|(k, _)| *k == "RcvbufErrors")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// Posts `PT_ITERS` signaled WRs of `size` bytes (`op(i)`), at most
/// [`PT_WINDOW`] in flight; every one completes once, in order. Returns the
/// seconds from the first post to the last completion.
fn pt_run(
    live: &mut Live<'_>,
    ds: &mut Side<'_>,
    pend: &mut Vec<WorkCompletion>,
    size: usize,
    op: impl Fn(usize) -> WrOpcode,
    dr: &Region<'_>,
) -> f64 {
    let want = match op(0) {
        WrOpcode::RdmaWrite { .. } => WcOpcode::RdmaWrite,
        WrOpcode::RdmaRead { .. } => WcOpcode::RdmaRead,
        _ => WcOpcode::Send,
    };
    let t0 = Instant::now();
    let (mut posted, mut done) = (0, 0);
    while done < PT_ITERS {
        while posted < PT_ITERS && posted - done < PT_WINDOW {
            let sge = [dr.sge(0, size)];
            ds.qp.post_send(&[signaled(posted as u64, op(posted), &sge)]).unwrap();
            posted += 1;
        }
        let w = pt_wc(live, ds, pend, want);
        assert_eq!(w.wr_id, done as u64, "completions in order, each once");
        done += 1;
    }
    t0.elapsed().as_secs_f64()
}

/// The figures of a run, in perftest's units (MB = 2^20 bytes).
fn pt_figures(size: usize, secs: f64) -> String {
    format!(
        "{size} bytes × {PT_ITERS} in {:.3} s: {:.2} MB/s, {:.6} Mpps",
        secs,
        (size * PT_ITERS) as f64 / secs / 1_048_576.0,
        PT_ITERS as f64 / secs / 1e6
    )
}

/// One `#[ignore]`d test per perftest run of `cargo xtask peer` (which runs
/// it by name against the guest `$guest`): `perftest_live` with the driver
/// as client (`true`) or server, for one verb.
macro_rules! perftest_peers {
    ($($(#[doc = $doc:literal])* $name:ident, $guest:literal, $client:literal, $verb:ident;)*) => {$(
        $(#[doc = $doc])*
        #[test]
        #[ignore = $guest]
        fn $name() {
            perftest_live($client, PtVerb::$verb);
        }
    )*};
}

perftest_peers! {
    /// `perftest-write-linux-server`: Linux `ib_write_bw -R` serves, the
    /// driver is its client (WRITEs to the server's buffer; reports the
    /// figures).
    peer_perftest_write_driver_client,
    "needs the Linux guest of `cargo xtask peer run perftest-write-linux-server`", true, Write;
    /// `perftest-read-linux-server`: the driver READs from Linux's buffer.
    peer_perftest_read_driver_client,
    "needs the Linux guest of `cargo xtask peer run perftest-read-linux-server`", true, Read;
    /// `perftest-send-linux-server`: the driver SENDs to Linux's receives.
    peer_perftest_send_driver_client,
    "needs the Linux guest of `cargo xtask peer run perftest-send-linux-server`", true, Send;
    /// `perftest-write-linux-client`: Linux `ib_write_bw -R` WRITEs into
    /// the driver's buffer.
    peer_perftest_write_driver_server,
    "needs the Linux guest of `cargo xtask peer run perftest-write-linux-client`", false, Write;
    /// `perftest-read-linux-client`: Linux READs from the driver's buffer.
    peer_perftest_read_driver_server,
    "needs the Linux guest of `cargo xtask peer run perftest-read-linux-client`", false, Read;
    /// `perftest-send-linux-client`: Linux SENDs to the driver's receives.
    peer_perftest_send_driver_server,
    "needs the Linux guest of `cargo xtask peer run perftest-send-linux-client`", false, Send;
}

// ---------------------------------------------------------------------
// Bad frames injected during a live run (issue #34)
// ---------------------------------------------------------------------

/// Pings of `rping-linux-client-badframes` (`-C 20` on the Linux side).
const BAD_PINGS: usize = 20;
/// The harness injects its frames once this many pings are done.
const INJECT_AFTER: usize = 5;

/// One injected frame: what it is, and what the model must do with it.
struct Injected {
    kind: &'static str,
    frame: Vec<u8>,
    /// The port's drop counters must move by exactly this.
    port: mock_bar::wire::DropCounts,
    /// The device's per-reason wire drops must move by exactly this.
    dev: mock_bar::wire::DropCounts,
    /// Whether the port hands it to a device (`delivered`).
    delivered: bool,
}

/// The harness's frames, each an altered copy of `send`, a SEND Only the
/// guest sent to the driver's QP and that the model has already ACKed
/// (rocev2-wire §1, §3, §4.7; the port's checks are in `mock_bar::port`):
/// bad ICRC → `icrc` drop; truncated in the BTH and in the payload, bad
/// IPv4 header checksum (§1.3) → `malformed`; wrong destination MAC
/// (§1.2) → `mac`; a DestQP no QP has (ICRC recomputed, it covers DestQP)
/// → `qp`; the unaltered copy, a stale-PSN duplicate → delivered, dropped
/// by the responder as `psn` and re-ACKed (§4.7), no second receive.
fn bad_frames(send: &[u8]) -> Vec<Injected> {
    use mock_bar::wire::{Drop as D, DropCounts, icrc, parse};
    let p = parse(send).expect("a captured frame of the guest");
    let l3 = if p.vlan.is_some() { 18 } else { 14 };
    let bth = l3 + if p.ipv4 { 20 } else { 40 } + 8;
    let n = send.len();
    let one = |d: D| {
        let mut c = DropCounts::default();
        c.add(d);
        c
    };
    let port = |kind, frame, d: D| Injected {
        kind,
        frame,
        port: one(d),
        dev: DropCounts::default(),
        delivered: false,
    };
    let mut v = Vec::new();
    let mut f = send.to_vec();
    f[n - 1] ^= 0x40;
    v.push(port("bad ICRC", f, D::Icrc));
    v.push(port("truncated mid-BTH", send[..bth + 6].to_vec(), D::Malformed));
    // BTH, then 8 bytes into the payload
    v.push(port("truncated mid-payload", send[..bth + 12 + 8].to_vec(), D::Malformed));
    let mut f = send.to_vec();
    let qpn = (p.pkt.dest_qp ^ 0x40_0000).to_be_bytes();
    f[bth + 5..bth + 8].copy_from_slice(&qpn[1..]);
    let c = icrc(&f).expect("ICRC");
    f[n - 4..].copy_from_slice(&c.to_le_bytes());
    v.push(port("wrong destination QPN", f, D::Qp));
    let mut f = send.to_vec();
    f[5] ^= 0x10;
    v.push(port("wrong destination MAC", f, D::Mac));
    if p.ipv4 {
        let mut f = send.to_vec();
        f[l3 + 10] ^= 0xFF;
        v.push(port("bad IPv4 header checksum", f, D::Malformed));
    }
    v.push(Injected {
        kind: "stale-PSN duplicate SEND",
        frame: send.to_vec(),
        port: DropCounts::default(),
        dev: one(D::Psn),
        delivered: true,
    });
    v
}

/// `rping-linux-client-badframes`: `rping-linux-client` with 20 pings
/// (the driver plays rping's server; every WR id is new, see [`Posted`]).
/// After five pings the host side sends toward the model's port, from a
/// socket of its own, the frames of [`bad_frames`] made from the last SEND
/// the guest sent, one at a time, each judged by exact counter deltas
/// before the next. Judged at the end: the run completes (rping's `-V`
/// verifies on the Linux side), 40 receives and every send-queue WR
/// succeeded exactly once, the receives still posted are flushed once,
/// and the port's and device's drop counters are exactly the injected
/// ones.
#[test]
#[ignore = "needs the Linux guest of `cargo xtask peer run rping-linux-client-badframes`"]
fn peer_rping_badframes() {
    const RQ: usize = 4;
    let (bar, wire) = live_setup();
    // the stale duplicate is a wire drop of the device (reason `psn`)
    bar.expect_counter(ErrorCounter::WireDrops);
    let dev = probe_a(&bar);
    let mut live = Live::new(&bar, &dev);
    live.cm.listen(PortSpace::Tcp, RPING_PORT, Some(ips().0)).unwrap();
    let size = rping_size();
    let (mut s, r, mut p, id) = rping_accept(&mut live, &dev, RQ);
    // a successful completion of `op` (every completion counted by wr_id)
    let wait = |live: &mut Live<'_>, s: &mut Side<'_>, p: &mut Posted, op: WcOpcode| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            p.step(live, s);
            let failed = live.pending.iter().find(|w| w.status != WcStatus::Success);
            assert!(failed.is_none(), "{failed:?}");
            if let Some(i) = live.pending.iter().position(|w| w.opcode == op) {
                return live.pending.remove(i);
            }
            assert!(Instant::now() < deadline, "no {op:?}; events {:?}", live.events);
        }
    };
    let port = bar.fabric().port().unwrap();
    let drops = |bar: &ModelBar| bar.with_device(|d| d.counters().wire_drop_reasons.clone());
    let inject = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut injected = 0;
    for ping in 0..BAD_PINGS {
        let w = wait(&mut live, &mut s, &mut p, WcOpcode::Recv);
        assert_eq!(w.byte_len, 16);
        let (addr, rkey, len) = decode_advert(&r.bytes(RECVB, 16));
        assert_eq!(len, size, "the client's ping size");
        p.recv(&mut s, &r);
        s.qp.post_send(&[signaled(p.id("read"), read_op(addr, rkey), &[r.sge(RDMA, len)])])
            .unwrap();
        wait(&mut live, &mut s, &mut p, WcOpcode::RdmaRead);
        s.qp.post_send(&[signaled(p.id("send"), WrOpcode::Send, &[r.sge(SENDB, 16)])]).unwrap();
        wait(&mut live, &mut s, &mut p, WcOpcode::Send);
        assert_eq!(wait(&mut live, &mut s, &mut p, WcOpcode::Recv).byte_len, 16);
        let (addr, rkey, _) = decode_advert(&r.bytes(RECVB, 16));
        p.recv(&mut s, &r);
        let data = r.bytes(RDMA, len);
        let n = irdma_rping::text_len(&data);
        s.qp.post_send(&[signaled(p.id("write"), write_op(addr, rkey), &[r.sge(RDMA, n)])])
            .unwrap();
        wait(&mut live, &mut s, &mut p, WcOpcode::RdmaWrite);
        s.qp.post_send(&[signaled(p.id("send"), WrOpcode::Send, &[r.sge(SENDB, 16)])]).unwrap();
        wait(&mut live, &mut s, &mut p, WcOpcode::Send);
        if ping + 1 == INJECT_AFTER {
            injected =
                inject_bad_frames(&mut live, &wire, &inject, port.local_addr(), s.qp.qp_num());
        }
    }
    // the client disconnects: DREQ in, DREP out
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until
        && !live.events.iter().any(|e| matches!(e, CmEvent::Disconnected { .. }))
    {
        live.step();
    }
    assert!(live.events.iter().any(|e| matches!(e, CmEvent::Disconnected { .. })), "no DREQ");
    s.qp.modify(&QpAttr::new(QpState::Error)).unwrap();
    let now = live.now();
    live.cm.disconnect(now, id, &mut live.t).unwrap();
    // the receives still posted are flushed; every WR completes once
    p.drain(&mut live, &mut s, Duration::from_secs(10));
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        live.step();
        let mut wc = [empty_wc(); 8];
        let k = s.cq.poll(&mut wc);
        wc[..k].iter().for_each(|w| p.complete(w));
    }
    print_events(&live);
    assert!(p.open.is_empty(), "WRs never completed: {:?}", p.open);
    let done = |op: WcOpcode, ok: bool| {
        p.done.iter().filter(|w| w.opcode == op && (w.status == WcStatus::Success) == ok).count()
    };
    let line = format!(
        "{} WRs posted, each completed once: {} receives, {} READs, {} WRITEs, {} SENDs, {} receives flushed",
        p.next,
        done(WcOpcode::Recv, true),
        done(WcOpcode::RdmaRead, true),
        done(WcOpcode::RdmaWrite, true),
        done(WcOpcode::Send, true),
        done(WcOpcode::Recv, false)
    );
    println!("host: {line}");
    assert_eq!(p.done.len() as u64, p.next, "{line}");
    assert_eq!(done(WcOpcode::Recv, true), 2 * BAD_PINGS, "no second receive: {line}");
    assert_eq!(done(WcOpcode::Recv, false), RQ, "{line}");
    assert_eq!(done(WcOpcode::RdmaRead, true), BAD_PINGS, "{line}");
    assert_eq!(done(WcOpcode::RdmaWrite, true), BAD_PINGS, "{line}");
    assert_eq!(done(WcOpcode::Send, true), 2 * BAD_PINGS, "{line}");
    // the whole run: exactly the injected drops, nothing else
    let c = port.counters();
    println!("host: port counters {c:?}");
    println!("host: device wire drops {:?}", drops(&bar));
    let want = mock_bar::wire::DropCounts {
        icrc: 1,
        malformed: if ipv6() { 2 } else { 3 },
        mac: 1,
        qp: 1,
        ..Default::default()
    };
    assert_eq!(c.drops, want, "the port's drops are the injected frames, by reason");
    let want = mock_bar::wire::DropCounts { psn: 1, ..Default::default() };
    assert_eq!(drops(&bar), want, "the device dropped the stale duplicate only");
    assert_eq!(injected, if ipv6() { 6 } else { 7 });
    check_capture(&wire.kept());
}

/// Sends the frames of [`bad_frames`] (made from the guest's last SEND to
/// `qpn` in the capture) from `sock` to the port at `to`, one at a time;
/// after each, steps the host side until the model took it and checks the
/// counters moved exactly as expected, and for the duplicate that the
/// next frame the model sent is the re-ACK (rocev2-wire §4.7: ACK with
/// ePSN − 1 and the current MSN — a repeat of the ACK of the last request
/// the model took).
/// Marks the broken frames in `wire` (left out of `wire.pcap`). Returns
/// how many frames were injected.
fn inject_bad_frames(
    live: &mut Live<'_>,
    wire: &PcapOnDrop,
    sock: &std::net::UdpSocket,
    to: SocketAddr,
    qpn: u32,
) -> usize {
    use mock_bar::wire::{op, parse};
    let bar = live.bar;
    let port = bar.fabric().port().unwrap();
    let frames = wire.0.frames();
    let guest_sends: Vec<(usize, mock_bar::wire::Parsed)> = frames
        .iter()
        .enumerate()
        .filter_map(|(i, f)| parse(f).ok().map(|p| (i, p)))
        .filter(|(_, p)| {
            p.src_mac == B.mac && p.pkt.dest_qp == qpn && p.pkt.opcode == op::SEND_ONLY
        })
        .collect();
    let (si, send) = guest_sends.last().expect("the guest sent SENDs");
    // ACKed already: the model answered it before its next frame
    assert!(
        frames[si + 1..].iter().filter_map(|f| parse(f).ok()).any(|a| a.src_mac == A.mac
            && a.pkt.opcode == op::ACK
            && !psn_before(a.pkt.psn, send.pkt.psn)),
        "the SEND was ACKed"
    );
    let kinds = bad_frames(&frames[*si]);
    for k in &kinds {
        let (c0, d0) =
            (port.counters(), bar.with_device(|d| d.counters().wire_drop_reasons.clone()));
        let at = wire.0.len();
        sock.send_to(&k.frame, to).expect("inject");
        let deadline = Instant::now() + Duration::from_secs(10);
        // the injected frame is in the capture once the port read it
        let idx = loop {
            live.step();
            if let Some(i) = wire.0.frames()[at..].iter().position(|f| *f == k.frame) {
                break at + i;
            }
            assert!(Instant::now() < deadline, "{}: the port never read it", k.kind);
        };
        // the port handles what it read before it reads more
        live.step();
        let (c1, d1) =
            (port.counters(), bar.with_device(|d| d.counters().wire_drop_reasons.clone()));
        let delta = |a: &mock_bar::wire::DropCounts, b: &mock_bar::wire::DropCounts| {
            let mut x = mock_bar::wire::DropCounts::default();
            for why in DROP_REASONS {
                for _ in 0..(a.get(why) - b.get(why)) {
                    x.add(why);
                }
            }
            x
        };
        let (port_d, dev_d) = (delta(&c1.drops, &c0.drops), delta(&d1, &d0));
        println!(
            "host: injected {}: expected port {:?} device {:?}; observed port {:?} device {:?}",
            k.kind,
            nonzero(&k.port),
            nonzero(&k.dev),
            nonzero(&port_d),
            nonzero(&dev_d)
        );
        assert_eq!(port_d, k.port, "{}: the port's drops", k.kind);
        assert_eq!(dev_d, k.dev, "{}: the device's drops", k.kind);
        assert!(c1.delivered > c0.delivered || !k.delivered, "{}: delivered", k.kind);
        if k.delivered {
            // ePSN − 1 is the last request the model took before the
            // duplicate (the guest may have sent its next SEND meanwhile):
            // the re-ACK repeats that request's ACK, PSN and MSN
            let seen = wire.0.frames();
            let broken = wire.1.borrow();
            let before: Vec<_> = seen[..idx]
                .iter()
                .enumerate()
                .filter(|(i, _)| !broken.contains(i))
                .filter_map(|(_, f)| parse(f).ok())
                .collect();
            let last = before
                .iter()
                .rfind(|p| {
                    p.src_mac == B.mac && p.pkt.dest_qp == qpn && p.pkt.opcode < op::READ_RESP_FIRST
                })
                .expect("the guest's last request");
            let ack = before
                .iter()
                .rfind(|a| {
                    a.src_mac == A.mac && a.pkt.opcode == op::ACK && a.pkt.psn == last.pkt.psn
                })
                .expect("its ACK");
            let re = seen[idx + 1..]
                .iter()
                .filter_map(|f| parse(f).ok())
                .find(|a| a.src_mac == A.mac)
                .expect("an answer to the duplicate");
            println!(
                "host: the duplicate of PSN {:#x} answered by opcode {:#x} PSN {:#x} AETH {:x?} \
                 (ePSN − 1 = {:#x}, whose ACK had AETH {:x?})",
                send.pkt.psn, re.pkt.opcode, re.pkt.psn, re.pkt.aeth, last.pkt.psn, ack.pkt.aeth
            );
            assert_eq!(
                (re.pkt.opcode, re.pkt.dest_qp, re.pkt.psn, re.pkt.aeth),
                (op::ACK, ack.pkt.dest_qp, ack.pkt.psn, ack.pkt.aeth),
                "re-ACKed with ePSN − 1 and the current MSN"
            );
        } else {
            wire.1.borrow_mut().insert(idx);
        }
    }
    kinds.len()
}

/// Every drop reason (for counter deltas).
const DROP_REASONS: [mock_bar::wire::Drop; 10] = {
    use mock_bar::wire::Drop::*;
    [Malformed, Icrc, Mac, Ip, Port, Qp, Pkey, Tver, Psn, Qkey]
};

/// The non-zero reasons of `c`.
fn nonzero(c: &mock_bar::wire::DropCounts) -> Vec<(mock_bar::wire::Drop, u64)> {
    DROP_REASONS.iter().map(|&w| (w, c.get(w))).filter(|&(_, n)| n > 0).collect()
}

/// Serial PSN order (rocev2-wire §4.2): whether `a` is earlier than `b`.
fn psn_before(a: u32, b: u32) -> bool {
    let d = b.wrapping_sub(a) & 0xFF_FFFF;
    d != 0 && d < 1 << 23
}
