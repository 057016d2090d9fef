//! Two CM instances over an in-memory QP1 "wire" with loss injection
//! (shared by `tests/cm.rs` and `tests/cm_wire.rs`).
#![allow(dead_code)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use irdma::cm::mad::{AttrId, CmMad, CmMsg, MAD_SIZE};
use irdma::cm::rdma_cm::PortSpace;
use irdma::cm::rdma_cm::guid_from_mac;
use irdma::cm::{
    AcceptParams, Cm, CmConfig, CmEvent, CmTiming, ConnId, ConnectParams, MadAddr, MadTransport,
};
use irdma::verbs::IpAddr;

/// The first event of `$pair` (in order) on a side matching `$side` (`'a'`,
/// `'b'` or `_`) that matches `$pat`, as `Some($out)`. A macro because a
/// variant pattern cannot be a function's argument.
#[allow(unused_macros)]
macro_rules! first_event {
    ($pair:expr, $side:pat, $pat:pat => $out:expr) => {
        $pair.events.iter().find_map(|(s, e)| match (*s, e) {
            ($side, $pat) => Some($out),
            _ => None,
        })
    };
}
#[allow(unused_imports)]
pub(crate) use first_event;

pub const MAC_A: [u8; 6] = [0xb4, 0x96, 0x91, 0xaa, 0xbb, 0x01];
pub const MAC_B: [u8; 6] = [0xb4, 0x96, 0x91, 0xaa, 0xbb, 0x02];
pub const IP_A: [u8; 4] = [192, 0, 2, 1];
pub const IP_B: [u8; 4] = [192, 0, 2, 2];

/// A frame on the in-memory wire.
#[derive(Clone, Debug)]
pub struct Sent {
    /// Who sent it ('a' or 'b').
    pub from: char,
    /// The address the sender gave.
    pub to: MadAddr,
    /// The MAD.
    pub mad: [u8; MAD_SIZE],
    /// Dropped by the loss rule.
    pub dropped: bool,
}

type Rule = Box<dyn FnMut(char, &CmMad) -> bool>;

/// The shared wire: two inboxes, a log of every send, a loss rule.
#[derive(Default)]
pub struct Wire {
    pub inbox_a: VecDeque<(MadAddr, [u8; MAD_SIZE])>,
    pub inbox_b: VecDeque<(MadAddr, [u8; MAD_SIZE])>,
    pub log: Vec<Sent>,
    pub drop: Option<Rule>,
}

/// One side's transport.
pub struct Port {
    pub me: char,
    pub mac: [u8; 6],
    pub wire: Rc<RefCell<Wire>>,
}

impl MadTransport for Port {
    type Error = ();
    fn send(&mut self, to: &MadAddr, mad: &[u8; MAD_SIZE]) -> Result<(), ()> {
        let mut w = self.wire.borrow_mut();
        let decoded = CmMad::decode(mad).expect("the CM sent a MAD it cannot decode");
        let me = self.me;
        let dropped = w.drop.as_mut().is_some_and(|f| f(me, &decoded));
        w.log.push(Sent { from: me, to: *to, mad: *mad, dropped });
        if !dropped {
            // what the receiver's QP1 reports: the reversed path
            let src = MadAddr {
                peer_ip: to.local_ip,
                local_ip: to.peer_ip,
                peer_mac: self.mac,
                vlan: to.vlan,
                hop_limit: to.hop_limit,
                traffic_class: to.traffic_class,
            };
            if me == 'a' {
                w.inbox_b.push_back((src, *mad))
            } else {
                w.inbox_a.push_back((src, *mad))
            }
        }
        Ok(())
    }
    fn recv(&mut self, buf: &mut [u8; MAD_SIZE]) -> Option<MadAddr> {
        let mut w = self.wire.borrow_mut();
        let q = if self.me == 'a' { &mut w.inbox_a } else { &mut w.inbox_b };
        let (src, m) = q.pop_front()?;
        *buf = m;
        Some(src)
    }
}

/// The CM configuration of the node at `mac`/`ip` (its GUID from the MAC):
/// transaction ids with `hi_tid` in the upper word, connection ids from
/// `seed`, default timing.
pub fn cm_config(mac: [u8; 6], ip: [u8; 4], hi_tid: u32, seed: u32) -> CmConfig {
    CmConfig {
        ca_guid: guid_from_mac(mac),
        hi_tid,
        id_seed: seed,
        local_ips: [Some(IpAddr::V4(ip)), None, None, None],
        ca_ack_delay: 0,
        timing: CmTiming::default(),
    }
}

pub fn cfg(mac: [u8; 6], ip: [u8; 4], seed: u32) -> CmConfig {
    cm_config(mac, ip, 1, seed)
}

pub const C: usize = 8;
pub type TestCm = Cm<C, 2>;

/// Two CMs and their ports; `now` in ms.
pub struct Pair {
    pub a: TestCm,
    pub b: TestCm,
    pub ta: Port,
    pub tb: Port,
    pub wire: Rc<RefCell<Wire>>,
    pub now: u64,
    /// Every event, in order, with its side.
    pub events: Vec<(char, CmEvent)>,
    /// Answer ConnectRequest with accept (else leave it).
    pub auto_accept: bool,
    /// Answer Connected with ready_to_use.
    pub auto_rtu: bool,
    /// Answer a peer's DREQ with disconnect (DREP).
    pub auto_drep: bool,
    pub qpn_a: u32,
    pub qpn_b: u32,
}

/// The IPv4 path from `local_ip` to `peer_ip` at `peer_mac`: no VLAN, hop
/// limit 64, traffic class 0.
pub fn mad_path(local_ip: [u8; 4], peer_ip: [u8; 4], peer_mac: [u8; 6]) -> MadAddr {
    MadAddr {
        peer_ip: IpAddr::V4(peer_ip),
        local_ip: IpAddr::V4(local_ip),
        peer_mac,
        vlan: None,
        hop_limit: 64,
        traffic_class: 0,
    }
}

pub fn path_a_to_b() -> MadAddr {
    mad_path(IP_A, IP_B, MAC_B)
}

/// A connect to the NVMe/RDMA port 4420 (TCP port space) along `path`
/// from `src_port` with private data "nvme": QP `qpn`, starting PSN `psn`.
pub fn nvme_connect(path: MadAddr, qpn: u32, psn: u32, src_port: u16) -> ConnectParams<'static> {
    ConnectParams {
        src_port,
        private_data: b"nvme",
        ..ConnectParams::new(path, PortSpace::Tcp, 4420, qpn, psn)
    }
}

pub fn connect_params(private_data: &[u8]) -> ConnectParams<'_> {
    ConnectParams {
        src_port: 49152,
        private_data,
        ..ConnectParams::new(path_a_to_b(), PortSpace::Tcp, 4420, 0x42, 0x123456)
    }
}

pub fn accept_params(qpn: u32) -> AcceptParams<'static> {
    AcceptParams {
        responder_resources: 4,
        initiator_depth: 6,
        rnr_retry_count: 5,
        private_data: b"welcome",
        ..AcceptParams::new(qpn, 0xABCDE)
    }
}

impl Pair {
    /// The id of the first `ConnectRequest` event (on either side).
    pub fn request_id(&self) -> Option<ConnId> {
        first_event!(self, _, CmEvent::ConnectRequest { id, .. } => *id)
    }

    /// A connects to B and both settle: A's id and B's id of the request.
    pub fn requested(&mut self) -> (ConnId, ConnId) {
        let ida = self.connect();
        self.settle();
        (ida, self.b_request())
    }

    /// The id of B's first `ConnectRequest` (B is the listener); panics
    /// when B saw none.
    pub fn b_request(&self) -> ConnId {
        first_event!(self, 'b', CmEvent::ConnectRequest { id, .. } => *id).expect("B saw the REQ")
    }

    pub fn new() -> Self {
        let wire = Rc::new(RefCell::new(Wire::default()));
        let mut b = TestCm::new(cfg(MAC_B, IP_B, 0x5555_0000));
        b.listen(PortSpace::Tcp, 4420, None).expect("listen");
        Pair {
            a: TestCm::new(cfg(MAC_A, IP_A, 0x1A2B_3C4C)),
            b,
            ta: Port { me: 'a', mac: MAC_A, wire: wire.clone() },
            tb: Port { me: 'b', mac: MAC_B, wire: wire.clone() },
            wire,
            now: 0,
            events: Vec::new(),
            auto_accept: true,
            auto_rtu: true,
            auto_drep: true,
            qpn_a: 0x42,
            qpn_b: 0x77,
        }
    }

    pub fn set_drop(&self, f: impl FnMut(char, &CmMad) -> bool + 'static) {
        self.wire.borrow_mut().drop = Some(Box::new(f));
    }

    /// Loses the first message of type `attr` that side `from` sends;
    /// everything else goes through.
    pub fn drop_first(&self, from: char, attr: AttrId) {
        let mut done = false;
        self.set_drop(move |f, m| {
            let hit = !done && f == from && m.msg.attr_id() == attr;
            done |= hit;
            hit
        });
    }

    /// Polls both sides until neither has anything to do at `now`,
    /// reacting to events as an RDMA-CM application would.
    pub fn settle(&mut self) {
        loop {
            let mut any = false;
            while let Some(e) = self.a.poll(self.now, &mut self.ta) {
                any = true;
                self.react('a', e);
            }
            while let Some(e) = self.b.poll(self.now, &mut self.tb) {
                any = true;
                self.react('b', e);
            }
            let w = self.wire.borrow();
            if !any && w.inbox_a.is_empty() && w.inbox_b.is_empty() {
                break;
            }
        }
    }

    fn react(&mut self, side: char, e: CmEvent) {
        self.events.push((side, e));
        let (cm, t) =
            if side == 'a' { (&mut self.a, &mut self.ta) } else { (&mut self.b, &mut self.tb) };
        match e {
            CmEvent::ConnectRequest { id, .. } if self.auto_accept => {
                let p = accept_params(self.qpn_b);
                cm.accept(self.now, id, &p, t).expect("accept");
            }
            CmEvent::Connected { id, .. } if self.auto_rtu => {
                cm.ready_to_use(id, t).expect("rtu");
            }
            CmEvent::Disconnected { id, timed_out: false } if self.auto_drep => {
                cm.disconnect(self.now, id, t).expect("drep");
            }
            _ => {}
        }
    }

    /// Advances time to each next deadline (at most `limit` ms ahead),
    /// settling at each.
    pub fn run_until(&mut self, limit: u64) {
        self.settle();
        let end = self.now + limit;
        loop {
            let next = [self.a.next_deadline(), self.b.next_deadline()].into_iter().flatten().min();
            match next {
                Some(d) if d <= end => {
                    self.now = self.now.max(d);
                    self.settle();
                }
                _ => break,
            }
        }
        self.now = end;
        self.settle();
    }

    pub fn connect(&mut self) -> ConnId {
        let p = connect_params(b"hello");
        let mut p = p;
        p.qpn = self.qpn_a;
        self.a.connect(self.now, &p, &mut self.ta).expect("connect")
    }

    pub fn sent(&self) -> Vec<Sent> {
        self.wire.borrow().log.clone()
    }

    /// The MADs of type `attr` side `from` sent (delivered or dropped), in
    /// order: decoded and as sent.
    pub fn sent_of(&self, from: char, attr: AttrId) -> Vec<(CmMad, [u8; MAD_SIZE])> {
        self.sent()
            .into_iter()
            .filter(|s| s.from == from)
            .map(|s| (CmMad::decode(&s.mad).unwrap(), s.mad))
            .filter(|(m, _)| m.msg.attr_id() == attr)
            .collect()
    }

    /// Every message side `from` sent, decoded, in order.
    pub fn msgs_from(&self, from: char) -> Vec<CmMsg> {
        self.sent()
            .into_iter()
            .filter(|s| s.from == from)
            .map(|s| CmMad::decode(&s.mad).unwrap().msg)
            .collect()
    }

    /// A "reboots" (a CM with new ids) and connects to B again, reusing its
    /// QPN; B's answers are logged (the log starts empty), not delivered.
    pub fn a_reboots_and_reconnects(&mut self) {
        self.a = TestCm::new(cfg(MAC_A, IP_A, 0x7777));
        self.wire.borrow_mut().log.clear();
        self.set_drop(|from, _| from == 'b');
        self.connect();
        self.settle();
    }

    pub fn clear_events(&mut self) {
        self.events.clear();
    }

    pub fn count(&self, side: char, f: impl Fn(&CmEvent) -> bool) -> usize {
        self.events.iter().filter(|(s, e)| *s == side && f(e)).count()
    }
}

/// Whether `tool args` runs and succeeds (the capture checks skip without
/// tshark / scapy unless `CM_WIRE_REQUIRED` is set).
pub fn have(tool: &str, args: &[&str]) -> bool {
    std::process::Command::new(tool).args(args).output().is_ok_and(|o| o.status.success())
}

/// Whether `test`'s capture checks of `f` can run: tshark is there. Without
/// it they are skipped with a message, unless `CM_WIRE_REQUIRED` is set (the
/// `wire` leg), which makes a missing tshark a failure.
pub fn tshark_or_skip(test: &str, f: &str) -> bool {
    if have("tshark", &["--version"]) {
        return true;
    }
    assert!(
        std::env::var_os("CM_WIRE_REQUIRED").is_none(),
        "tshark missing and CM_WIRE_REQUIRED set"
    );
    eprintln!("{test}: tshark not installed, tool checks skipped ({f} written)");
    false
}

/// scapy's ICRC check of every frame of capture `f` (tests/wire/check_icrc.py):
/// its report (`N frames, ICRC ok`) with `nframes` frames; `None` when scapy
/// is missing and `CM_WIRE_REQUIRED` is not set (then the check is skipped
/// with a message from `test`).
pub fn scapy_icrc(test: &str, f: &str, nframes: usize) -> Option<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/wire/check_icrc.py");
    if !have("python3", &["-c", "import scapy.contrib.roce"]) {
        assert!(
            std::env::var_os("CM_WIRE_REQUIRED").is_none(),
            "scapy missing and CM_WIRE_REQUIRED set"
        );
        eprintln!("{test}: scapy not installed, ICRC check skipped");
        return None;
    }
    let o = std::process::Command::new("python3").args([script, f]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "scapy ICRC check failed: {out}");
    assert!(out.contains(&format!("{nframes} frames, ICRC ok")), "{out}");
    Some(out)
}

/// A tshark value as a number when it is one (hex or decimal).
pub fn num(v: &str) -> Option<u64> {
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// Runs tshark on capture `f` with the RoCE heuristics other dissectors
/// would steal disabled (rocev2-wire §6.4), IP checksums checked, `opts`
/// (further `-o` preferences) and `extra`; its stdout. Panics if tshark
/// fails.
pub fn tshark(f: &str, opts: &[&str], extra: &[&str]) -> String {
    let mut args = vec!["-n", "-r", f];
    args.extend([
        "--disable-heuristic",
        "rpcrdma_infiniband",
        "--disable-heuristic",
        "eth_over_ib",
        "--disable-heuristic",
        "mellanox_eoib",
        "-o",
        "ip.check_checksum:TRUE",
    ]);
    args.extend(opts);
    args.extend(extra);
    let o = std::process::Command::new("tshark").args(&args).output().expect("run tshark");
    assert!(o.status.success(), "tshark {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).expect("tshark output is UTF-8")
}
