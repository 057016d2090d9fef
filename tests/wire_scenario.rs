//! The `cargo xtask wire` scenario (issue #15): two model devices, the
//! driver posting every RC operation the model supports, an RNR NAK, a
//! frame lost on the wire (PSN-sequence NAK and go-back-N resend) and a
//! remote access error, every frame on the fabric recorded. With `WIRE_PCAP=FILE` set it writes the capture to
//! FILE and, next to it, `FILE.expect.tsv`: per frame, the fields that
//! follow from what the driver posted (UDP source port, opcode, BTH dest
//! QP, PSN, RETH VA / R_Key / DMA length, AETH syndrome), for the tshark
//! comparison.
//! Without the variable it still runs and checks the frame sequence.
//!
//! Wire facts: shared/spec/rocev2-wire.md (§1.5 UDP source port, §2
//! opcodes, §4.1 segmentation,
//! §4.2 PSNs, §4.3 ACKs, §4.4 syndromes, §4.6 READ responses).

mod common;
mod e2e_common;

use e2e_common::*;
use irdma::verbs::{AhAttr, GSI_QKEY};
use mock_bar::wire;

const RNR_SYNDROME: u8 = 0x2E; // the model's RNR NAK (timer code 14), wire §4.5

/// One expected frame.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Exp {
    sport: u16,
    opcode: u8,
    dest_qp: u32,
    psn: u32,
    reth: Option<(u64, u32, u32)>,
    syndrome: Option<u8>,
    /// DETH (UD): Q_Key, source QPN.
    deth: Option<(u32, u32)>,
}

/// One connection's expectations: the PSN each end sends next.
struct Conn {
    a_qpn: u32,
    b_qpn: u32,
    psn: u32,
    mtu: u32,
    /// The UDP source port both ends use (the rule is symmetric).
    sport: u16,
}

/// wire §1.5, written out here from the spec (not the driver's code): the
/// UDP source port irdma derives at RTR from the AV's flow label and the
/// two QPNs (Linux `rdma_get_udp_sport`).
fn spec_sport(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let label = if flow_label != 0 {
        flow_label
    } else {
        let mut v = u64::from(lqpn) * u64::from(rqpn);
        v ^= v >> 20;
        v ^= v >> 40;
        (v & 0xF_FFFF) as u32
    };
    (((label & 0x3FFF) ^ ((label & 0xF_C000) >> 14)) | 0xC000) as u16
}

fn psn(p: u32, i: u32) -> u32 {
    p.wrapping_add(i) & 0xFF_FFFF
}

impl Conn {
    fn n(&self, len: u32) -> u32 {
        len.div_ceil(self.mtu).max(1)
    }

    fn req(&self, i: u32, opcode: u8, reth: Option<(u64, u32, u32)>) -> Exp {
        Exp {
            sport: self.sport,
            opcode,
            dest_qp: self.b_qpn,
            psn: psn(self.psn, i),
            reth,
            syndrome: None,
            deth: None,
        }
    }

    fn ack(&self, at: u32, syndrome: u8) -> Exp {
        Exp {
            sport: self.sport,
            opcode: 0x11,
            dest_qp: self.a_qpn,
            psn: at,
            reth: None,
            syndrome: Some(syndrome),
            deth: None,
        }
    }

    /// WRITE (wire §2: 0x06–0x0B; RETH on FIRST/ONLY with the total length).
    fn write(&mut self, out: &mut Vec<Exp>, len: u32, va: u64, rkey: u32, imm: bool) {
        let n = self.n(len);
        for i in 0..n {
            let op = match (i == 0, i + 1 == n, imm) {
                (true, true, false) => 0x0A,
                (true, true, true) => 0x0B,
                (true, false, _) => 0x06,
                (false, false, _) => 0x07,
                (false, true, false) => 0x08,
                (false, true, true) => 0x09,
            };
            out.push(self.req(i, op, (i == 0).then_some((va, rkey, len))));
        }
        out.push(self.ack(psn(self.psn, n - 1), 0x1F));
        self.psn = psn(self.psn, n);
    }

    /// SEND (wire §2: 0x00–0x05, 0x16, 0x17).
    fn send(&mut self, out: &mut Vec<Exp>, len: u32, imm: bool, inv: bool) {
        let n = self.n(len);
        for i in 0..n {
            let op = match (i == 0, i + 1 == n) {
                (true, false) => 0x00,
                (false, false) => 0x01,
                (first, true) => match (inv, imm) {
                    (true, _) => [0x16, 0x17][first as usize],
                    (false, true) => [0x03, 0x05][first as usize],
                    (false, false) => [0x02, 0x04][first as usize],
                },
            };
            out.push(self.req(i, op, None));
        }
        out.push(self.ack(psn(self.psn, n - 1), 0x1F));
        self.psn = psn(self.psn, n);
    }

    /// READ (wire §4.6): one request, n responses with PSNs p…p+n−1, AETH
    /// on all but MIDDLE.
    fn read(&mut self, out: &mut Vec<Exp>, len: u32, va: u64, rkey: u32) {
        let n = self.n(len);
        out.push(self.req(0, 0x0C, Some((va, rkey, len))));
        for i in 0..n {
            let op = match (i == 0, i + 1 == n) {
                (true, true) => 0x10,
                (true, false) => 0x0D,
                (false, false) => 0x0E,
                (false, true) => 0x0F,
            };
            out.push(Exp {
                sport: self.sport,
                opcode: op,
                dest_qp: self.a_qpn,
                psn: psn(self.psn, i),
                reth: None,
                syndrome: (op != 0x0E).then_some(0x1F),
                deth: None,
            });
        }
        self.psn = psn(self.psn, n);
    }
}

struct Path {
    v6: bool,
    vlan: Option<u16>,
    mtu: u32,
    tc: u8,
    flow_label: u32,
    psn: u32,
}

fn ip_of(a: Addr, v6: bool) -> IpAddr {
    if v6 {
        let mut b = [0u8; 16];
        b[0] = 0xfd;
        b[15] = a.mac[5];
        IpAddr::V6(b)
    } else {
        IpAddr::V4(a.ip)
    }
}

fn connect_path(qp: &mut TQp<'_>, me: Addr, peer: Addr, peer_qpn: u32, p: &Path) {
    qp.modify(&QpAttr::new(QpState::Init)).expect("init");
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.dest_qp = peer_qpn;
    rtr.rq_psn = p.psn;
    rtr.path_mtu = p.mtu;
    rtr.av = Some(AddressVector {
        dest_mac: peer.mac,
        dest_ip: ip_of(peer, p.v6),
        src_ip: ip_of(me, p.v6),
        hop_limit: 64,
        traffic_class: p.tc,
        flow_label: p.flow_label,
        vlan: p.vlan,
    });
    qp.modify(&rtr).expect("rtr");
    let mut rts = QpAttr::new(QpState::Rts);
    rts.sq_psn = p.psn;
    qp.modify(&rts).expect("rts");
}

fn cap() -> QpCap {
    QpCap { max_inline_data: 101, ..qp_cap(32, 32, 4, 4) }
}

fn ok(wc: &WorkCompletion, what: &str) {
    assert_eq!(wc.status, WcStatus::Success, "{what}: {wc:?}");
}

/// One connection's traffic: WRITE, WRITE multi-packet, WRITE with
/// immediate, READ multi-packet, SEND, SEND multi-packet with immediate,
/// inline SEND.
fn traffic(a: &mut Side<'_>, b: &mut Side<'_>, c: &mut Conn, exp: &mut Vec<Exp>) {
    let src = a.region(3, 0x11);
    let dst = b.region(3, 0x22);
    let big = 2 * c.mtu + 100;
    // WRITE, single packet
    a.qp.post_send(&[signaled(1, write_op(dst.addr(), dst.key()), &[src.sge(0, 200)])]).unwrap();
    ok(&a.one(), "write");
    c.write(exp, 200, dst.addr(), dst.key(), false);
    // WRITE spanning three packets
    let va = dst.addr() + 16;
    a.qp.post_send(&[signaled(2, write_op(va, dst.key()), &[src.sge(0, big as usize)])]).unwrap();
    ok(&a.one(), "write big");
    c.write(exp, big, va, dst.key(), false);
    assert_eq!(dst.bytes(16, big as usize), src.bytes(0, big as usize));
    // WRITE with immediate: consumes a receive
    let rb = b.region(3, 0);
    b.qp.post_recv(&[RecvWr { wr_id: 10, sg_list: &[rb.sge(0, 64)] }]).unwrap();
    let op = WrOpcode::RdmaWriteImm { remote_addr: dst.addr(), rkey: dst.key(), imm: 0x1234_5678 };
    a.qp.post_send(&[signaled(3, op, &[src.sge(0, 48)])]).unwrap();
    ok(&a.one(), "write imm");
    ok(&b.one(), "write imm recv");
    c.write(exp, 48, dst.addr(), dst.key(), true);
    // READ spanning three responses
    let sink = a.region(3, 0);
    a.qp.post_send(&[signaled(4, read_op(dst.addr(), dst.key()), &[sink.sge(0, big as usize)])])
        .unwrap();
    ok(&a.one(), "read");
    c.read(exp, big, dst.addr(), dst.key());
    assert_eq!(sink.bytes(0, big as usize), dst.bytes(0, big as usize));
    // SEND (≥ 16 bytes: wire §6.5), then multi-packet SEND with immediate
    b.qp.post_recv(&[RecvWr { wr_id: 11, sg_list: &[rb.sge(0, 12288)] }]).unwrap();
    a.qp.post_send(&[signaled(5, WrOpcode::Send, &[src.sge(0, 100)])]).unwrap();
    ok(&a.one(), "send");
    ok(&b.one(), "send recv");
    c.send(exp, 100, false, false);
    b.qp.post_recv(&[RecvWr { wr_id: 12, sg_list: &[rb.sge(0, 12288)] }]).unwrap();
    let op = WrOpcode::SendImm { imm: 0xCAFE_F00D };
    a.qp.post_send(&[signaled(6, op, &[src.sge(0, big as usize)])]).unwrap();
    ok(&a.one(), "send imm");
    let r = b.one();
    ok(&r, "send imm recv");
    assert_eq!(r.byte_len, big);
    c.send(exp, big, true, false);
    // inline SEND
    // SAFETY: the inline SGE below addresses a live FakeHal buffer.
    unsafe { a.qp.enable_inline() };
    b.qp.post_recv(&[RecvWr { wr_id: 13, sg_list: &[rb.sge(0, 4096)] }]).unwrap();
    let wr = SendWr {
        wr_id: 7,
        opcode: WrOpcode::Send,
        flags: SendFlags(SendFlags::SIGNALED.0 | SendFlags::INLINE.0),
        sg_list: &[src.sge(0, 80)],
    };
    a.qp.post_send(&[wr]).unwrap();
    ok(&a.one(), "inline send");
    ok(&b.one(), "inline recv");
    c.send(exp, 80, false, false);
}

fn pair<'d>(da: &'d Dev, db: &'d Dev, p: &Path) -> (Side<'d>, Side<'d>, Conn) {
    let mut a = Side::new(da, A, 64, cap());
    let mut b = Side::new(db, B, 64, cap());
    let (na, nb) = (a.qp.qp_num(), b.qp.qp_num());
    connect_path(&mut a.qp, A, B, nb, p);
    connect_path(&mut b.qp, B, A, na, p);
    assert_eq!(spec_sport(p.flow_label, na, nb), spec_sport(p.flow_label, nb, na));
    let sport = spec_sport(p.flow_label, na, nb);
    (a, b, Conn { a_qpn: na, b_qpn: nb, psn: p.psn, mtu: p.mtu, sport })
}

/// One UD (or GSI) end ([`UdEnd::new`]: INIT with the Q_Key, RTR, RTS
/// with the send PSN).
impl<'d> UdEnd<'d> {
    fn one(&mut self) -> WorkCompletion {
        let wc = poll_n(&mut self.cq, 1);
        assert_eq!(wc.len(), 1, "{wc:?}");
        wc[0]
    }

    fn region(&self, seed: u8) -> Region<'d> {
        let b = buf(1);
        let _ = fill(&b, seed);
        let mr = reg(self.dev, &self.pd, b.paddr(), 4096, &pages_of(&b), false);
        Region { mr, buf: b }
    }
}

/// The CM REQ MAD of spec ib-cm-rocev2 §7.2 (tshark decodes QP1 payloads
/// as MADs; this one it decodes cleanly, §7.4).
const CM_REQ_MAD: &str = "01 07 02 03 00 00 00 00 00 00 00 01 1a 2b 3c 4d
    00 10 00 00 00 00 00 00 1a 2b 3c 4d 00 00 00 00 00 00 00 00 01 06 11 44
    b6 96 91 ff fe aa bb 01 00 00 00 00 00 00 00 00 00 00 42 08 00 00 00 08
    00 00 00 a1 12 34 56 a7 ff ff 37 f0 ff ff ff ff 00 00 00 00 00 00 00 00
    00 00 ff ff c0 00 02 01 00 00 00 00 00 00 00 00 00 00 ff ff c0 00 02 02
    75 14 40 00 00 40 00 98";

/// UD traffic (wire §5): UD SEND Only over IPv4, over IPv6 with a VLAN
/// tag and traffic class, SEND Only with immediate back, then a MAD from
/// QP1 to the peer's QP1 with Q_Key 0x80010000.
fn ud_traffic(da: &Dev, db: &Dev, exp: &mut Vec<Exp>) {
    const QKEY: u32 = 0x0123_4567;
    let mut a = UdEnd::new(da, false, cap(), (QKEY, 0x5d_1f0b));
    let mut b = UdEnd::new(db, false, cap(), (QKEY, 77));
    let (na, nb) = (a.qp.qp_num(), b.qp.qp_num());
    // a UD QP never gets an address vector, so its source port stays the
    // 0xC000 irdma sets at create (rocev2-wire §1.5)
    let ud = |opcode, dest_qp, psn, src| Exp {
        sport: 0xC000,
        opcode,
        dest_qp,
        psn,
        reth: None,
        syndrome: None,
        deth: Some((if dest_qp == 1 { GSI_QKEY } else { QKEY }, src)),
    };
    let (sa, sb, ra, rb) = (a.region(5), b.region(6), a.region(0), b.region(0));
    let post = |end: &mut UdEnd<'_>, r: &Region<'_>, ah: u32, to: u32, qkey: u32, len: u32, imm| {
        let sge = [r.sge(0, len as usize)];
        let op = WrOpcode::UdSend { ah, remote_qpn: to, remote_qkey: qkey, imm };
        end.qp.post_send(&[signaled(1, op, &sge)]).unwrap();
        ok(&end.one(), "ud send");
    };
    let recv = |end: &mut UdEnd<'_>, r: &Region<'_>, len: u32| {
        end.qp.post_recv(&[RecvWr { wr_id: 2, sg_list: &[r.sge(0, len as usize)] }]).unwrap();
    };
    let ah4 = a.pd.create_ah(&AhAttr {
        dest_mac: Some(B.mac),
        ..AhAttr::new(IpAddr::V4(B.ip), IpAddr::V4(A.ip))
    });
    let ah4 = ah4.unwrap();
    recv(&mut b, &rb, 40 + 100);
    post(&mut a, &sa, ah4.id(), nb, QKEY, 100, None);
    let r = b.one();
    assert_eq!((r.status, r.byte_len, r.ud.map(|u| u.src_qp)), (WcStatus::Success, 140, Some(na)));
    exp.push(ud(0x64, nb, 0x5d_1f0b, na));
    let mut v6 = AhAttr::new(ip_of(B, true), ip_of(A, true));
    v6.dest_mac = Some(B.mac);
    v6.vlan = Some(100 | 3 << 13);
    v6.traffic_class = 0x68;
    v6.flow_label = 0x12345;
    let ah6 = a.pd.create_ah(&v6).unwrap();
    recv(&mut b, &rb, 40 + 64);
    post(&mut a, &sa, ah6.id(), nb, QKEY, 64, None);
    let r = b.one();
    assert_eq!(r.ud.map(|u| (u.ipv4, u.vlan_id, u.sl)), Some((false, Some(100), 3)), "{r:?}");
    exp.push(ud(0x64, nb, 0x5d_1f0c, na));
    let back = b.pd.create_ah(&AhAttr {
        dest_mac: Some(A.mac),
        ..AhAttr::new(IpAddr::V4(A.ip), IpAddr::V4(B.ip))
    });
    let back = back.unwrap();
    recv(&mut a, &ra, 40 + 48);
    post(&mut b, &sb, back.id(), na, QKEY, 48, Some(0xABCD));
    let r = a.one();
    assert_eq!((r.imm_data, r.ud.map(|u| u.src_qp)), (Some(0xABCD), Some(nb)));
    exp.push(ud(0x65, na, 77, nb));
    // QP1 → QP1: one 256-byte MAD after the 40-byte GRH area
    let mut ga = UdEnd::new(da, true, cap(), (GSI_QKEY, 0));
    let mut gb = UdEnd::new(db, true, cap(), (GSI_QKEY, 0));
    let mut mad: Vec<u8> =
        CM_REQ_MAD.split_whitespace().map(|w| u8::from_str_radix(w, 16).unwrap()).collect();
    mad.resize(256, 0);
    let (gs, gr) = (ga.region(0), gb.region(0));
    assert!(gs.buf.write_bytes(0, &mad));
    let gah = ga.pd.create_ah(&AhAttr {
        dest_mac: Some(B.mac),
        ..AhAttr::new(IpAddr::V4(B.ip), IpAddr::V4(A.ip))
    });
    let gah = gah.unwrap();
    recv(&mut gb, &gr, 40 + 256);
    post(&mut ga, &gs, gah.id(), 1, GSI_QKEY, 256, None);
    let r = gb.one();
    assert_eq!((r.qp_num, r.byte_len, r.ud.map(|u| u.src_qp)), (1, 296, Some(1)));
    assert_eq!(gr.bytes(40, 256), mad);
    exp.push(ud(0x64, 1, 0, 1));
}

#[test]
fn wire_scenario() {
    let _g = lock();
    let (ba, bb, da, db) = two_devices(Profile::SMALL);
    let cap = ba.fabric().capture();
    // strict PSN checking is the model's default: every request's PSN is
    // the responder's expected one
    let mut exp = Vec::new();
    let paths = [
        // IPv4, untagged, MTU 1024
        Path { v6: false, vlan: None, mtu: 1024, tc: 0, flow_label: 0, psn: 100 },
        // IPv6 with a VLAN tag (VID 100, priority 3), MTU 4096, DSCP 26,
        // flow label; PSNs wrap through 0xFFFFFF (wire §4.2)
        Path {
            v6: true,
            vlan: Some(100 | 3 << 13),
            mtu: 4096,
            tc: 0x68,
            flow_label: 0x12345,
            psn: 0xFF_FFFE,
        },
        // IPv4 tagged, MTU 4096
        Path { v6: false, vlan: Some(7), mtu: 4096, tc: 0x02, flow_label: 0, psn: 5000 },
        // IPv6 untagged, MTU 1024
        Path { v6: true, vlan: None, mtu: 1024, tc: 0, flow_label: 0, psn: 0 },
    ];
    for p in &paths {
        let (mut a, mut b, mut c) = pair(&da, &db, p);
        traffic(&mut a, &mut b, &mut c, &mut exp);
    }
    // SEND with invalidate of a fast-registered key at B
    {
        let p = Path { v6: false, vlan: None, mtu: 1024, tc: 0, flow_label: 0, psn: 300 };
        let (mut a, mut b, mut c) = pair(&da, &db, &p);
        let mem = buf(1);
        let mut fr = db.alloc_mr(&b.pd, 1).unwrap();
        // SAFETY: the model reaches host memory only through FakeHalMemory,
        // which refuses any address outside a live FakeHal allocation.
        unsafe { fr.map_pages(&pages_of(&mem)) }.unwrap();
        let key = fr.next_key();
        let r = fr_reg(&fr, key, ALL, (0x7000_0000, 4096));
        b.qp.post_send(&[signaled(1, WrOpcode::RegMr(r), &[])]).unwrap();
        ok(&b.one(), "reg mr");
        let src = a.region(1, 3);
        let rb = b.region(1, 0);
        b.qp.post_recv(&[RecvWr { wr_id: 2, sg_list: &[rb.sge(0, 4096)] }]).unwrap();
        let op = WrOpcode::SendInv { inv_key: fr.key() };
        a.qp.post_send(&[signaled(3, op, &[src.sge(0, 64)])]).unwrap();
        ok(&a.one(), "send inv");
        let r = b.one();
        assert_eq!(r.invalidated_rkey, Some(fr.key()));
        c.send(&mut exp, 64, false, true);
        // RNR: a SEND with no receive posted draws an RNR NAK; after the
        // receive is posted the retry goes through (same PSN, wire §4.4)
        a.qp.post_send(&[signaled(4, WrOpcode::Send, &[src.sge(0, 32)])]).unwrap();
        exp.push(c.req(0, 0x04, None));
        exp.push(c.ack(c.psn, RNR_SYNDROME));
        b.qp.post_recv(&[RecvWr { wr_id: 5, sg_list: &[rb.sge(0, 4096)] }]).unwrap();
        ba.fabric().step();
        ok(&a.one(), "send after rnr");
        ok(&b.one(), "recv after rnr");
        c.send(&mut exp, 32, false, false);
        // PSN sequence error (wire §4.7, §4.8): the MIDDLE frame of a
        // three-packet WRITE is lost on the wire (it is in the capture, as
        // sent); B drops LAST (beyond its ePSN) and NAKs 0x60 with the lost
        // PSN; A resends MIDDLE and LAST; one ACK, one completion
        bb.expect_counter(irdma_testkit::ErrorCounter::WireDrops);
        let drops = bb.with_device(|d| d.counters().wire_drops);
        let dst = b.region(1, 0);
        let len = 2 * c.mtu + 50;
        ba.with_device(|d| d.faults().drop_request_frame = Some(1));
        a.qp.post_send(&[signaled(
            7,
            write_op(dst.addr(), dst.key()),
            &[src.sge(0, len as usize)],
        )])
        .unwrap();
        ok(&a.one(), "write after sequence NAK");
        assert_eq!(dst.bytes(0, len as usize), src.bytes(0, len as usize));
        assert_eq!(bb.with_device(|d| d.counters().wire_drops), drops + 1, "LAST dropped once");
        let reth = Some((dst.addr(), dst.key(), len));
        exp.push(c.req(0, 0x06, reth));
        exp.push(c.req(1, 0x07, None));
        exp.push(c.req(2, 0x08, None));
        exp.push(c.ack(psn(c.psn, 1), 0x60));
        exp.push(c.req(1, 0x07, None));
        exp.push(c.req(2, 0x08, None));
        exp.push(c.ack(psn(c.psn, 2), 0x1F));
        c.psn = psn(c.psn, 3);
        // remote access error: WRITE with an R_Key B does not have
        let bad = rb.key() ^ 0x55;
        a.qp.post_send(&[signaled(6, write_op(0x1000, bad), &[src.sge(0, 16)])]).unwrap();
        let mut ev = [NO_EVENT; 8];
        let n = da.poll_async_events(&mut ev);
        assert!(ev[..n].iter().any(|e| e.id == c.a_qpn && e.moved_to_error), "{:?}", &ev[..n]);
        let wc = a.one();
        assert_eq!(wc.status, WcStatus::RemAccessErr, "{wc:?}");
        exp.push(c.req(0, 0x0A, Some((0x1000, bad, 16))));
        exp.push(c.ack(c.psn, 0x62));
    }
    ud_traffic(&da, &db, &mut exp);
    let frames = cap.frames();
    let got: Vec<Exp> = frames
        .iter()
        .map(|f| {
            let p = wire::parse(f).expect("every frame parses");
            Exp {
                sport: p.sport,
                opcode: p.pkt.opcode,
                dest_qp: p.pkt.dest_qp,
                psn: p.pkt.psn,
                reth: p.pkt.reth,
                syndrome: p.pkt.aeth.map(|a| a.0),
                deth: p.pkt.deth,
            }
        })
        .collect();
    for (i, (g, e)) in got.iter().zip(&exp).enumerate() {
        assert_eq!(g, e, "frame {}", i + 1);
    }
    assert_eq!(got.len(), exp.len(), "frame count");
    if let Ok(path) = std::env::var("WIRE_PCAP") {
        cap.write_pcap(std::path::Path::new(&path)).expect("write pcap");
        let mut tsv = String::new();
        for e in &exp {
            let (va, rkey, len) =
                e.reth.map_or((String::new(), String::new(), String::new()), |r| {
                    (r.0.to_string(), r.1.to_string(), r.2.to_string())
                });
            let syn = e.syndrome.map_or(String::new(), |s| s.to_string());
            let (qkey, sqp) = e
                .deth
                .map_or((String::new(), String::new()), |d| (d.0.to_string(), d.1.to_string()));
            tsv += &format!(
                "{}\t{}\t{}\t{}\t{va}\t{rkey}\t{len}\t{syn}\t{qkey}\t{sqp}\n",
                e.sport, e.opcode, e.dest_qp, e.psn
            );
        }
        std::fs::write(format!("{path}.expect.tsv"), tsv).expect("write expectations");
    }
    println!("wire: {} frames", frames.len());
}
