//! UD and GSI (QP 1) end to end on two model devices: address handles
//! through the CQP, UD SEND frames (BTH + DETH) on the model's wire, the
//! 40-byte GRH area and the UD completion fields on receipt, Q_Key
//! mismatches dropped and counted, the neighbour table feeding MANAGE_ARP.

mod common;
mod e2e_common;

use e2e_common::*;
use irdma::verbs::{Ah, AhAttr, GRH_BYTES, GSI_QKEY, gid_of, ip_of_gid};

type TAh<'d> = Ah<'d, FakeHal, ModelBar>;

const QKEY: u32 = 0x0123_4567;

/// A UD (or GSI) QP driven to RTS the way Linux does: INIT with the Q_Key,
/// RTR with nothing, RTS with the send PSN.
struct Ud<'d> {
    qp: TQp<'d>,
    cq: TCq<'d>,
    pd: TPd<'d>,
    dev: &'d Dev,
    addr: Addr,
}

impl<'d> Ud<'d> {
    fn new(dev: &'d Dev, addr: Addr, gsi: bool, qkey: u32) -> Self {
        let sq_psn = if gsi { 0 } else { 0x5d1f0b };
        let (pd, cq, qp) = ud_qp(dev, gsi, cap(16), (qkey, sq_psn));
        Ud { qp, cq, pd, dev, addr }
    }

    /// A on `da` and B on `db`, both of one kind (`gsi`) and Q_Key.
    fn pair((da, db): (&'d Dev, &'d Dev), gsi: bool, qkey: u32) -> (Self, Self) {
        (Ud::new(da, A, gsi, qkey), Ud::new(db, B, gsi, qkey))
    }

    fn ah(&self, to: Addr) -> TAh<'d> {
        self.pd.create_ah(&AhAttr::new(IpAddr::V4(to.ip), IpAddr::V4(self.addr.ip))).expect("ah")
    }

    fn poll(&mut self, n: usize) -> Vec<WorkCompletion> {
        poll_n(&mut self.cq, n)
    }

    fn recv(&mut self, r: &Region<'_>, off: u64, len: u32, wr_id: u64) {
        let sge = [Sge { addr: r.addr() + off, length: len, lkey: r.key() }];
        self.qp.post_recv(&[RecvWr { wr_id, sg_list: &sge }]).expect("post_recv");
    }

    fn send(&mut self, r: &Region<'_>, len: u32, ah: &TAh<'_>, qpn: u32, qkey: u32, wr_id: u64) {
        let sge = [Sge { addr: r.addr(), length: len, lkey: r.key() }];
        let wr = signaled(
            wr_id,
            WrOpcode::UdSend { ah: ah.id(), remote_qpn: qpn, remote_qkey: qkey, imm: None },
            &sge,
        );
        self.qp.post_send(&[wr]).expect("post_send");
    }

    fn region(&self, pages: usize, seed: u8) -> Region<'d> {
        let b = buf(pages);
        let _ = fill(&b, seed);
        let mr = reg(self.dev, &self.pd, b.paddr(), (pages * 4096) as u64, &pages_of(&b), false);
        Region { mr, buf: b }
    }
}

fn counters(bar: &ModelBar) -> mock_bar::Counters {
    bar.with_device(|d| d.counters().clone())
}

/// Checks a received UD buffer: 20 zero bytes, the IPv4 header from `src`
/// to `dst`, then `payload`.
fn check_ipv4_grh(got: &[u8], src: Addr, dst: Addr, payload: &[u8]) {
    assert_eq!(&got[..20], &[0u8; 20], "IPv4: the first 20 GRH bytes are unused (zero)");
    let ip = &got[20..40];
    assert_eq!(ip[0], 0x45, "IPv4 header, no options");
    assert_eq!(ip[9], 17, "UDP");
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, 20 + 8 + 12 + 8 + payload.len() + 4);
    assert_eq!(&ip[12..16], &src.ip, "source IP");
    assert_eq!(&ip[16..20], &dst.ip, "destination IP");
    assert_eq!(&got[GRH_BYTES as usize..], payload, "payload after the GRH area");
}

/// `side` got its own SEND's completion (`ids.0`) and a receive (`ids.1`)
/// of `n` bytes from `src` (sent by `who.1` to `who.0`).
fn check_pair(
    side: &mut Ud<'_>,
    rx: &Region<'_>,
    src: &Region<'_>,
    who: (Addr, Addr),
    ids: (u64, u64),
    n: u32,
) {
    let (me, peer) = who;
    let wc = side.poll(2);
    assert_eq!(wc.len(), 2, "{wc:?}");
    let s = wc.iter().find(|w| w.opcode == WcOpcode::Send).expect("send wc");
    assert_eq!((s.wr_id, s.status), (ids.0, WcStatus::Success));
    let r = wc.iter().find(|w| w.opcode == WcOpcode::Recv).expect("recv wc");
    assert_eq!((r.wr_id, r.status, r.byte_len), (ids.1, WcStatus::Success, GRH_BYTES + n));
    let ud = r.ud.expect("UD fields");
    assert!(ud.ipv4);
    assert_eq!(ud.smac, Some(peer.mac), "source MAC");
    assert_eq!((ud.vlan_id, ud.sl), (None, 0));
    let payload = read(&src.buf, 0, n as usize);
    check_ipv4_grh(&read(&rx.buf, 0, (GRH_BYTES + n) as usize), peer, me, &payload);
}

#[test]
fn ud_send_both_ways_with_grh_and_ud_completion_fields() {
    with_two_devices(|ba, bb, da, db| {
        let (mut a, mut b) = Ud::pair((da, db), false, QKEY);
        assert!(a.qp.is_ud() && a.qp.qp_num() > 3);
        // A resolves B through its neighbour table; B names A's MAC itself.
        da.add_neighbour(IpAddr::V4(B.ip), B.mac).expect("neighbour");
        let ahs0 = da.ahs_in_use();
        let ah_ab = a.ah(B);
        let mut attr = AhAttr::new(IpAddr::V4(A.ip), IpAddr::V4(B.ip));
        attr.dest_mac = Some(A.mac);
        let ah_ba = b.pd.create_ah(&attr).expect("ah b→a");
        assert!(ah_ab.id() > 0 && ah_ab.arp_index() > 0);
        let (sa, sb) = (a.region(1, 3), b.region(1, 4));
        let (ra, rb) = (a.region(1, 0), b.region(1, 0));
        let n = 200u32;
        b.recv(&rb, 0, GRH_BYTES + n, 21);
        a.recv(&ra, 0, GRH_BYTES + n, 11);
        a.send(&sa, n, &ah_ab, b.qp.qp_num(), QKEY, 1);
        b.send(&sb, n, &ah_ba, a.qp.qp_num(), QKEY, 2);
        check_pair(&mut a, &ra, &sb, (A, B), (1, 11), n);
        check_pair(&mut b, &rb, &sa, (B, A), (2, 21), n);
        // the source QPNs, crosswise
        let (qa, qb) = (a.qp.qp_num(), b.qp.qp_num());
        b.recv(&rb, 0, GRH_BYTES + 8, 22);
        a.send(&sa, 8, &ah_ab, qb, QKEY, 3);
        let wc = b.poll(1);
        assert_eq!(wc[0].ud.map(|u| u.src_qp), Some(qa), "{wc:?}");
        assert_eq!(a.poll(1)[0].wr_id, 3);
        a.recv(&ra, 0, GRH_BYTES + 8, 12);
        b.send(&sb, 8, &ah_ba, qa, QKEY, 4);
        assert_eq!(a.poll(2).iter().find_map(|w| w.ud).map(|u| u.src_qp), Some(qb));
        assert_eq!(b.poll(1)[0].wr_id, 4);
        drop((ah_ab, ah_ba));
        assert_eq!(da.ahs_in_use(), ahs0, "every AH id back");
        ba.finish();
        bb.finish();
    });
}

#[test]
fn qkey_mismatch_is_dropped_and_counted_and_the_receive_stays_posted() {
    let _g = lock();
    let (_ba, bb, da, db) = two_devices(Profile::SMALL);
    let (mut a, mut b) = Ud::pair((&da, &db), false, QKEY);
    da.add_neighbour(IpAddr::V4(B.ip), B.mac).expect("neighbour");
    let ah = a.ah(B);
    let (sa, rb) = (a.region(1, 7), b.region(1, 0));
    b.recv(&rb, 0, GRH_BYTES + 64, 5);
    // the receiver drops the datagram on purpose (counted, checked below)
    bb.expect_counter(ErrorCounter::WireDrops);
    let before = counters(&bb);
    a.send(&sa, 64, &ah, b.qp.qp_num(), QKEY ^ 1, 1);
    // UD is unreliable: the sender completes, the receiver sees nothing.
    assert_eq!(a.poll(1)[0].status, WcStatus::Success);
    assert!(b.poll(1).is_empty(), "a datagram with the wrong Q_Key is not delivered");
    let after = counters(&bb);
    assert_eq!(after.qkey_violations, before.qkey_violations + 1);
    assert_eq!(after.wire_drops, before.wire_drops + 1);
    assert_eq!(after.rq_wqes, before.rq_wqes, "no receive consumed");
    // The same receive takes the next, correct datagram.
    a.send(&sa, 64, &ah, b.qp.qp_num(), QKEY, 2);
    assert_eq!(a.poll(1)[0].wr_id, 2);
    let wc = b.poll(1);
    assert_eq!((wc.len(), wc[0].wr_id, wc[0].byte_len), (1, 5, GRH_BYTES + 64));
}

#[test]
fn gsi_qp1_to_qp1_of_the_peer() {
    let _g = lock();
    let (_ba, _bb, da, db) = two_devices(Profile::SMALL);
    let (mut a, mut b) = Ud::pair((&da, &db), true, GSI_QKEY);
    assert_eq!((a.qp.qp_num(), b.qp.qp_num()), (1, 1), "the GSI QP is hardware QP 1");
    // One GSI QP per device.
    let pd = da.alloc_pd().expect("pd");
    let cq = da.create_cq(8).expect("cq");
    let mut attr = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap: cap(4) };
    assert!(matches!(da.create_gsi_qp(&pd, &mut attr), Err(VerbsError::InUse { .. })));
    da.add_neighbour(IpAddr::V4(B.ip), B.mac).expect("neighbour");
    let ah = a.ah(B);
    let (sa, rb) = (a.region(1, 9), b.region(1, 0));
    // Linux posts QP1 receives of 40 + 256 bytes (one MAD after the GRH).
    b.recv(&rb, 0, GRH_BYTES + 256, 77);
    a.send(&sa, 256, &ah, 1, GSI_QKEY, 1);
    assert_eq!(a.poll(1)[0].status, WcStatus::Success);
    let wc = b.poll(1);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].wr_id, wc[0].qp_num, wc[0].byte_len), (77, 1, GRH_BYTES + 256));
    assert_eq!(wc[0].ud.map(|u| (u.src_qp, u.smac)), Some((1, Some(A.mac))));
    let payload = read(&sa.buf, 0, 256);
    check_ipv4_grh(&read(&rb.buf, 0, (GRH_BYTES + 256) as usize), A, B, &payload);
    drop(ah);
    drop(a);
    // QP 1 is free again once destroyed.
    let mut attr = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap: cap(4) };
    let again = da.create_gsi_qp(&pd, &mut attr).expect("GSI QP after the first is gone");
    assert_eq!(again.qp_num(), 1);
}

#[test]
fn ipv6_ud_send_puts_the_ipv6_header_in_the_grh_area() {
    let _g = lock();
    let (_ba, _bb, da, db) = two_devices(Profile::SMALL);
    let (mut a, mut b) = Ud::pair((&da, &db), false, QKEY);
    let v6 = |last: u8| {
        let mut g = [0u8; 16];
        g[0] = 0xfd;
        g[15] = last;
        IpAddr::V6(g)
    };
    let mut attr = AhAttr::new(v6(2), v6(1));
    attr.dest_mac = Some(B.mac);
    attr.flow_label = 0x12345;
    attr.traffic_class = 0x68;
    let ah = a.pd.create_ah(&attr).expect("ah");
    let (sa, rb) = (a.region(1, 1), b.region(1, 0));
    b.recv(&rb, 0, GRH_BYTES + 32, 1);
    a.send(&sa, 32, &ah, b.qp.qp_num(), QKEY, 1);
    assert_eq!(a.poll(1)[0].status, WcStatus::Success);
    let wc = b.poll(1);
    assert_eq!(wc[0].ud.map(|u| u.ipv4), Some(false), "{wc:?}");
    let got = read(&rb.buf, 0, 72);
    let w0 = u32::from_be_bytes([got[0], got[1], got[2], got[3]]);
    assert_eq!(w0, 6 << 28 | 0x68 << 20 | 0x12345, "version, traffic class, flow label");
    assert_eq!(got[6], 17, "next header UDP");
    let (IpAddr::V6(s), IpAddr::V6(d)) = (v6(1), v6(2)) else { unreachable!() };
    assert_eq!(&got[8..24], &s);
    assert_eq!(&got[24..40], &d);
    assert_eq!(&got[40..72], &read(&sa.buf, 0, 32)[..]);
}

#[test]
fn ah_errors_and_accounting() {
    let _g = lock();
    let (_ba, _bb, da, _db) = two_devices(Profile::SMALL);
    let pd = da.alloc_pd().expect("pd");
    let before = da.resource_usage();
    // No neighbour entry and no MAC: refused, nothing allocated.
    let attr = AhAttr::new(IpAddr::V4(B.ip), IpAddr::V4(A.ip));
    assert!(matches!(pd.create_ah(&attr), Err(VerbsError::Invalid { .. })));
    let mut mixed = attr;
    mixed.src_ip = IpAddr::V6([0; 16]);
    mixed.dest_mac = Some(B.mac);
    assert!(matches!(pd.create_ah(&mixed), Err(VerbsError::Invalid { .. })));
    let mut wide = attr;
    wide.dest_mac = Some(B.mac);
    wide.flow_label = 1 << 20;
    assert!(matches!(pd.create_ah(&wide), Err(VerbsError::Invalid { .. })));
    assert_eq!(da.resource_usage(), before);
    // Two AHs to one MAC share one ARP entry; both gone, it is gone.
    da.add_neighbour(IpAddr::V4(B.ip), B.mac).expect("neighbour");
    assert_eq!(da.neighbour(IpAddr::V4(B.ip)), Some(B.mac));
    let mut x = pd.create_ah(&attr).expect("ah");
    let y = pd.create_ah(&attr).expect("ah");
    assert_ne!(x.id(), y.id());
    assert_eq!(x.arp_index(), y.arp_index());
    let mid = da.resource_usage();
    assert_eq!((mid.ahs, mid.arp), (before.ahs + 2, before.arp + 1));
    let (xi, yi) = (x.id(), y.id());
    _ba.with_device(|d| assert!(d.ah(xi).is_some() && d.ah(yi).is_some()));
    x.destroy().expect("destroy");
    _ba.with_device(|d| assert!(d.ah(xi).is_none() && d.ah(yi).is_some()));
    drop(y);
    assert_eq!(da.resource_usage(), before);
    assert!(da.remove_neighbour(IpAddr::V4(B.ip)));
    assert!(!da.remove_neighbour(IpAddr::V4(B.ip)));
    assert!(matches!(pd.create_ah(&attr), Err(VerbsError::Invalid { .. })));
    // GIDs of the interface addresses.
    assert_eq!(ip_of_gid(gid_of(IpAddr::V4(A.ip))), IpAddr::V4(A.ip));
}
