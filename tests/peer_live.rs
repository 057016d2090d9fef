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

use irdma::cm::rdma_cm::{PortSpace, guid_from_mac};
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
            let mut wc = [EMPTY_WC; 8];
            let k = s.cq.poll(&mut wc);
            self.pending.extend_from_slice(&wc[..k]);
        }
    }
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

/// Writes the pcap when the test ends, pass or fail.
struct PcapOnDrop(mock_bar::wire::Capture);

impl Drop for PcapOnDrop {
    fn drop(&mut self) {
        write_pcap(&self.0);
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
    (bar, PcapOnDrop(cap))
}

/// `rping-linux-server`: Linux `rping -s` listens; the driver connects
/// through the CM over QP1 (retrying while the server is not up yet),
/// then plays rping's client: SEND the start buffer's advertisement, the
/// server READs it and says go-ahead, SEND the sink's advertisement, the
/// server WRITEs the data back and says go-ahead; compare; three rounds,
/// then DREQ.
#[test]
#[ignore = "needs the Linux guest of `cargo xtask peer run rping-linux-server`"]
fn peer_rping_driver_client() {
    let (bar, wire) = live_setup();
    let dev = probe_a(&bar);
    let mut live = Live::new(&bar, &dev);
    let mut s = Side::new(&dev, A, 16, cap(8));
    let r = s.region(PAGES, 0);
    let size = rping_size();
    assert!((16..=RDMA - START).contains(&size), "ping size {size}");
    let recv = [r.sge(RECVB, 16)];
    s.qp.post_recv(&[RecvWr { wr_id: 100, sg_list: &recv }]).unwrap();
    let (ours, theirs) = ips();
    let peer = MadAddr {
        peer_ip: theirs,
        local_ip: ours,
        peer_mac: B.mac,
        // `PEER_VLAN`: the guest's addresses are on an 802.1Q interface
        vlan: std::env::var("PEER_VLAN").ok().and_then(|v| v.parse().ok()),
        hop_limit: 64,
        traffic_class: 0,
    };
    // connect, again every second while the server is not listening yet
    let mut id: Option<ConnId> = None;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut attempt = 0u16;
    loop {
        assert!(Instant::now() < deadline, "no connection: {:?}", live.events);
        if id.is_none() {
            let cp = ConnectParams {
                peer,
                port_space: PortSpace::Tcp,
                dst_port: RPING_PORT,
                src_port: 40000 + attempt,
                qpn: s.qp.qp_num(),
                starting_psn: 0x1234,
                responder_resources: 1,
                initiator_depth: 1,
                retry_count: 7,
                rnr_retry_count: 7,
                path_mtu: env_num("PEER_PATH_MTU", 1024),
                srq: false,
                private_data: &[],
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
                    let until = Instant::now() + Duration::from_secs(1);
                    while Instant::now() < until {
                        live.step();
                    }
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
        s.qp.post_recv(&[RecvWr { wr_id: 100, sg_list: &recv }]).unwrap();
        // the sink's advertisement; the server WRITEs, then go-ahead
        r.put(SENDB, &advert(&r, RDMA, size));
        s.qp.post_send(&[signaled(2, WrOpcode::Send, &[r.sge(SENDB, 16)])]).unwrap();
        live.wc(&mut s, WcOpcode::Send);
        assert_eq!(live.wc(&mut s, WcOpcode::Recv).byte_len, 16);
        s.qp.post_recv(&[RecvWr { wr_id: 100, sg_list: &recv }]).unwrap();
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
    print_events(&live);
    judge_wire(&bar, &wire);
}

/// `rping-linux-client`: the driver listens on rping's port and plays
/// rping's server; Linux `rping -c -V` connects, and validates the data
/// that came back.
#[test]
#[ignore = "needs the Linux guest of `cargo xtask peer run rping-linux-client`"]
fn peer_rping_driver_server() {
    let (bar, wire) = live_setup();
    let dev = probe_a(&bar);
    let mut live = Live::new(&bar, &dev);
    let mut s = Side::new(&dev, A, 16, cap(8));
    let r = s.region(PAGES, 0);
    let size = rping_size();
    assert!((16..=RDMA - START).contains(&size), "ping size {size}");
    let recv = [r.sge(RECVB, 16)];
    s.qp.post_recv(&[RecvWr { wr_id: 100, sg_list: &recv }]).unwrap();
    live.cm.listen(PortSpace::Tcp, RPING_PORT, Some(ips().0)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let id = loop {
        assert!(Instant::now() < deadline, "no connect request: {:?}", live.events);
        let mut got = None;
        for e in live.step() {
            if let CmEvent::ConnectRequest { id, .. } = e {
                let acc = AcceptParams {
                    qpn: s.qp.qp_num(),
                    starting_psn: 0x4321,
                    responder_resources: 1,
                    initiator_depth: 1,
                    rnr_retry_count: 7,
                    srq: false,
                    private_data: &[],
                };
                let p = live.cm.accept_params(id, &acc).unwrap();
                p.apply(&mut s.qp).expect("QP to RTS");
                let now = live.now();
                live.cm.accept(now, id, &acc, &mut live.t).unwrap();
                got = Some(id);
            }
        }
        if let Some(id) = got {
            break id;
        }
    };
    let mut pings = 0;
    while pings < PINGS {
        // the client's start buffer: READ it
        assert_eq!(live.wc(&mut s, WcOpcode::Recv).byte_len, 16);
        let a = r.bytes(RECVB, 16);
        let (addr, rkey, len) = decode_advert(&a);
        assert_eq!(len, size, "the client's ping size");
        s.qp.post_recv(&[RecvWr { wr_id: 100, sg_list: &recv }]).unwrap();
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
        s.qp.post_recv(&[RecvWr { wr_id: 100, sg_list: &recv }]).unwrap();
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
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        live.step();
    }
    print_events(&live);
    assert!(live.events.iter().any(|e| matches!(e, CmEvent::Disconnected { .. })), "no DREQ");
    judge_wire(&bar, &wire);
}

/// `reject`: the driver listens on rping's port only; Linux connects to
/// the next port, which nobody listens on. The driver's CM answers the REQ
/// with a REJ (reason 8, invalid service ID) that Linux reports as
/// `RDMA_CM_EVENT_REJECTED, error 8`; no connection is left on our side.
#[test]
#[ignore = "needs the Linux guest of `cargo xtask peer run reject`"]
fn peer_reject() {
    use irdma::cm::mad::{AttrId, CmMad};
    let (bar, wire) = live_setup();
    let dev = probe_a(&bar);
    let mut live = Live::new(&bar, &dev);
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
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        live.step();
    }
    println!("host: {} REJ sent, CM events {:?}", rejs(), live.events);
    assert!(live.events.is_empty(), "no connection request reaches the application");
    assert_eq!(live.cm.active_connections(), 0);
    judge_wire(&bar, &wire);
}

/// `ucmatose-linux-client`: Linux `ucmatose -s 10.0.0.1 -c 2` (rdma-core
/// librdmacm/examples/cmatose.c) opens two connections; the driver accepts
/// both (10 receives of 100 bytes posted on each first), SENDs 10 messages
/// of 100 bytes on each once both are established, takes Linux's 10
/// replies on each, then disconnects both (DREQ; Linux answers DREP).
#[test]
#[ignore = "needs the Linux guest of `cargo xtask peer run ucmatose-linux-client`"]
fn peer_ucmatose_driver_server() {
    /// cmatose.c defaults: port 7471, 10 messages of 100 bytes.
    const PORT: u16 = 7471;
    const CONNS: usize = 2;
    const MSGS: usize = 10;
    const SIZE: usize = 100;
    let (bar, wire) = live_setup();
    let dev = probe_a(&bar);
    let mut live = Live::new(&bar, &dev);
    live.cm.listen(PortSpace::Tcp, PORT, Some(ips().0)).unwrap();
    let mut sides: Vec<(Side<'_>, Region<'_>, ConnId)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut established = 0;
    while established < CONNS {
        assert!(Instant::now() < deadline, "connections: {:?}", live.events);
        for e in live.step() {
            match e {
                CmEvent::ConnectRequest { id, .. } => {
                    let mut s = Side::new(&dev, A, 64, cap(16));
                    let r = s.region(1, sides.len() as u8);
                    for i in 0..MSGS {
                        let sge = [r.sge(2048 + i * 128, SIZE)];
                        s.qp.post_recv(&[RecvWr { wr_id: 200 + i as u64, sg_list: &sge }]).unwrap();
                    }
                    let acc = AcceptParams {
                        qpn: s.qp.qp_num(),
                        starting_psn: 0x100 * (sides.len() as u32 + 1),
                        responder_resources: 1,
                        initiator_depth: 1,
                        rnr_retry_count: 7,
                        srq: false,
                        private_data: &[],
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
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        live.step();
    }
    print_events(&live);
    assert_eq!(disconnected(&live.events), CONNS, "every DREQ answered");
    judge_wire(&bar, &wire);
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
    const RQ: usize = 4;
    let (bar, wire) = live_setup();
    let dev = probe_a(&bar);
    // once, so that lazily backed tables (PBLE chunks) are not counted
    drop(Side::new(&dev, A, 16, cap(8)).region(PAGES, 0));
    let base = (dev.resource_usage(), FakeHal::live_pages());
    let mut live = Live::new(&bar, &dev);
    let with_qp1 = dev.resource_usage();
    let listen = live.cm.listen(PortSpace::Tcp, RPING_PORT, Some(ips().0)).unwrap();
    let mut s = Side::new(&dev, A, 32, cap(8));
    let r = s.region(PAGES, 0);
    let recv = [r.sge(RECVB, 16)];
    let mut p = Posted::default();
    for _ in 0..RQ {
        s.qp.post_recv(&[RecvWr { wr_id: p.id("recv"), sg_list: &recv }]).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let id = 'req: loop {
        assert!(Instant::now() < deadline, "no connect request: {:?}", live.events);
        for e in live.step() {
            if let CmEvent::ConnectRequest { id, .. } = e {
                let acc = AcceptParams {
                    qpn: s.qp.qp_num(),
                    starting_psn: 0x4321,
                    responder_resources: 1,
                    initiator_depth: 1,
                    rnr_retry_count: 7,
                    srq: false,
                    private_data: &[],
                };
                live.cm.accept_params(id, &acc).unwrap().apply(&mut s.qp).expect("QP to RTS");
                let now = live.now();
                live.cm.accept(now, id, &acc, &mut live.t).unwrap();
                break 'req id;
            }
        }
    };
    // Waits for a successful `op`; `None` once a WR failed or nothing
    // came for 4 s (the peer answers a ping in milliseconds).
    let wait = |live: &mut Live<'_>, s: &mut Side<'_>, p: &mut Posted, op: WcOpcode| {
        let mut last = Instant::now();
        loop {
            live.step();
            let mut wc = [EMPTY_WC; 8];
            let k = s.cq.poll(&mut wc);
            for w in &wc[..k] {
                p.complete(w);
                last = Instant::now();
            }
            // kept in order: a poll may bring the next step's completion too
            live.pending.extend_from_slice(&wc[..k]);
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
        s.qp.post_recv(&[RecvWr { wr_id: p.id("recv"), sg_list: &recv }]).unwrap();
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
        s.qp.post_recv(&[RecvWr { wr_id: p.id("recv"), sg_list: &recv }]).unwrap();
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
    let until = Instant::now() + Duration::from_secs(30);
    while !p.open.is_empty() && Instant::now() < until {
        live.step();
        let mut wc = [EMPTY_WC; 8];
        let k = s.cq.poll(&mut wc);
        wc[..k].iter().for_each(|w| p.complete(w));
    }
    assert!(p.open.is_empty(), "WRs never completed: {:?}", p.open);
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        let mut wc = [EMPTY_WC; 8];
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
    live.cm.unlisten(listen).unwrap();
    judge_wire(&bar, &wire);
    // every resource comes back: the QP, CQ, MR and PD of the connection
    // at once; the address handle (and its ARP entry) that QP1 caches
    // for the peer's MADs goes with the transport
    drop(r);
    drop(s);
    let held = live.t.ahs_held() as u32;
    let mut u = dev.resource_usage();
    println!("host: after the connection's QP/CQ/MR/PD: {u:?}, {held} AH cached by QP1");
    assert!(held <= 1, "QP1 caches one AH for the one peer");
    (u.ahs, u.arp) = (u.ahs - held, u.arp - held);
    assert_eq!(u, with_qp1, "the connection's resources back");
    drop(live);
    assert_eq!((dev.resource_usage(), FakeHal::live_pages()), base, "every resource and page back");
}
