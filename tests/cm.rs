//! The CM (issue #18 part 2): MAD encoders/decoders against the fact
//! sheet's worked example, RDMA-CM helpers, and two CM instances talking
//! through an in-memory QP1 wire with loss injection.

mod cm_common;

use cm_common::*;
use irdma::cm::mad::{
    self, AttrId, CmMad, CmMsg, Drep, Dreq, MAD_SIZE, MadError, Mra, Rej, Rep, Rtu, form_tid,
};
use irdma::cm::rdma_cm::{
    self, CmaHdr, PortSpace, cm_ack_timeout, cm_ms, flow_label, guid_from_mac, rej, service_id,
    service_id_parts,
};
use irdma::cm::{CmError, CmEvent, CmState, ConnId, Ignored};
use irdma::verbs::{IpAddr, QpState};

/// Shared spec ib-cm-rocev2.md §7.2, the 256-byte REQ.
const WORKED_REQ: &str = "
01 07 02 03 00 00 00 00 00 00 00 01 1a 2b 3c 4d
00 10 00 00 00 00 00 00 1a 2b 3c 4d 00 00 00 00
00 00 00 00 01 06 11 44 b6 96 91 ff fe aa bb 01
00 00 00 00 00 00 00 00 00 00 42 08 00 00 00 08
00 00 00 a1 12 34 56 a7 ff ff 37 f0 ff ff ff ff
00 00 00 00 00 00 00 00 00 00 ff ff c0 00 02 01
00 00 00 00 00 00 00 00 00 00 ff ff c0 00 02 02
75 14 40 00 00 40 00 98 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
00 00 00 00 00 40 c0 00 00 00 00 00 00 00 00 00
00 00 00 00 c0 00 02 01 00 00 00 00 00 00 00 00
00 00 00 00 c0 00 02 02 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00";

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect()
}

fn first_sent(p: &Pair, from: char, attr: AttrId) -> Option<(CmMad, [u8; MAD_SIZE])> {
    p.sent_of(from, attr).into_iter().next()
}

/// The first REJ side `from` sent; panics when there is none.
fn first_rej(p: &Pair, from: char) -> Rej {
    match first_sent(p, from, AttrId::Rej).map(|(m, _)| m.msg) {
        Some(CmMsg::Rej(r)) => r,
        other => panic!("no REJ from {from}: {other:?}"),
    }
}

fn sent_count(p: &Pair, from: char, attr: AttrId) -> usize {
    p.sent_of(from, attr).len()
}

#[test]
fn worked_example_req_is_byte_exact() {
    // §7: 192.0.2.1:49152 → 192.0.2.2:4420, comm id 0x1A2B3C4D (seed
    // chosen so that the first id is it), hi_tid 1, QPN 0x42, PSN 0x123456.
    let mut p = Pair::new();
    p.set_drop(|_, _| true);
    let id = p.a.connect(0, &connect_params(b""), &mut p.ta).unwrap();
    assert_eq!(id, ConnId(0x1A2B_3C4D));
    let (m, bytes) = first_sent(&p, 'a', AttrId::Req).expect("a REQ was sent");
    let want = hex(WORKED_REQ);
    assert_eq!(want.len(), 256);
    for (i, (g, w)) in bytes.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "MAD byte {i:#04x}: got {g:#04x}, spec §7.2 has {w:#04x}");
    }
    // and it decodes back to the same fields
    assert_eq!(m.hdr.tid, 0x0000_0001_1A2B_3C4D);
    let CmMsg::Req(r) = m.msg else { panic!("not a REQ") };
    assert_eq!(r.service_id, 0x0000_0000_0106_1144);
    assert_eq!(r.local_ca_guid, 0xB696_91FF_FEAA_BB01);
    assert_eq!(r.primary.flow_label, 0x75144);
    assert_eq!(r.primary.local_ack_timeout, 19);
    assert_eq!((r.path_mtu, r.rnr_retry_count, r.max_cm_retries), (3, 7, 15));
    let h = CmaHdr::decode(&r.private_data).unwrap();
    assert_eq!(h.src_port, 49152);
    assert_eq!((h.src, h.dst), (IpAddr::V4(IP_A), IpAddr::V4(IP_B)));
    assert!(r.private_data[36..].iter().all(|&x| x == 0));
    let mut again = [0u8; MAD_SIZE];
    m.encode(&mut again).unwrap();
    assert_eq!(again, bytes);
}

#[test]
fn worked_example_constants() {
    assert_eq!(service_id(PortSpace::Tcp, 4420), 0x0000_0000_0106_1144);
    assert_eq!(service_id_parts(0x0106_1144), Some((PortSpace::Tcp, 4420)));
    assert_eq!(service_id_parts(0x1_0106_1144), None);
    assert_eq!(service_id_parts(0x0999_1144), None);
    assert_eq!(guid_from_mac(MAC_A), 0xB696_91FF_FEAA_BB01);
    assert_eq!(flow_label(49152, 4420), 0x75144);
    assert_eq!(cm_ack_timeout(0, 18), 19);
    assert_eq!(cm_ack_timeout(16, 16), 18);
    assert_eq!(cm_ack_timeout(0, 16), 17);
    assert_eq!(cm_ack_timeout(30, 2), 30);
    assert_eq!(cm_ack_timeout(0, 31), 31);
    assert_eq!(cm_ms(20), 4096);
    assert_eq!(cm_ms(24), 65536);
    assert_eq!(cm_ms(3), 1);
    assert_eq!(form_tid(1, 0x1A2B_3C4D), 0x0000_0001_1A2B_3C4D);
    assert_eq!(rdma_cm::mtu_bytes(3), Some(1024));
    assert_eq!(rdma_cm::mtu_bytes(6), None);
    assert_eq!(rdma_cm::mtu_enum(4096), Some(5));
}

fn roundtrip(msg: CmMsg) {
    let m = CmMad::new(0xDEAD_BEEF_0000_0001, msg);
    let mut b = [0u8; MAD_SIZE];
    m.encode(&mut b).unwrap();
    assert_eq!(&b[..4], &[1, 7, 2, 3]);
    assert_eq!(u16::from_be_bytes([b[16], b[17]]), msg.attr_id() as u16);
    assert_eq!(CmMad::decode(&b).unwrap(), m);
}

/// An MRA from comm id 3 to 4, no private data.
fn mra_3_to_4(msg_mraed: u8, service_timeout: u8) -> Mra {
    Mra { local_comm_id: 3, remote_comm_id: 4, msg_mraed, service_timeout, private_data: [0; 222] }
}

/// A DREQ from comm id 5 to 6 for `remote_qpn`, no private data.
fn dreq_5_to_6(remote_qpn: u32) -> Dreq {
    Dreq { local_comm_id: 5, remote_comm_id: 6, remote_qpn, private_data: [0; 220] }
}

#[test]
fn every_message_roundtrips_with_its_field_positions() {
    let mut pd = [0u8; 196];
    pd[0] = 0xAA;
    pd[195] = 0x55;
    let rep = Rep {
        local_comm_id: 0x11223344,
        remote_comm_id: 0x55667788,
        local_qkey: 0,
        local_qpn: 0xABCDEF,
        vendor_id: 0x123456,
        local_eecn: 0x010203,
        starting_psn: 0xFEDCBA,
        responder_resources: 8,
        initiator_depth: 7,
        target_ack_delay: 31,
        failover_accepted: 2,
        flow_control: true,
        rnr_retry_count: 5,
        srq: true,
        local_ca_guid: 0x0102030405060708,
        private_data: pd,
    };
    roundtrip(CmMsg::Rep(rep));
    // REP positions (C12 table 110): QPN data 12..14, vendor id bytes
    // 15/19/23, PSN 20..22, byte 26 = tad<<3|fo<<1|e2e, byte 27 = rnr<<5|srq<<4
    let mut b = [0u8; MAD_SIZE];
    CmMad::new(0, CmMsg::Rep(rep)).encode(&mut b).unwrap();
    let d = |i: usize| b[24 + i];
    assert_eq!([d(12), d(13), d(14), d(15)], [0xAB, 0xCD, 0xEF, 0x12]);
    assert_eq!([d(16), d(17), d(18), d(19)], [0x01, 0x02, 0x03, 0x34]);
    assert_eq!([d(20), d(21), d(22), d(23)], [0xFE, 0xDC, 0xBA, 0x56]);
    assert_eq!([d(24), d(25), d(26), d(27)], [8, 7, 31 << 3 | 2 << 1 | 1, 5 << 5 | 1 << 4]);
    assert_eq!(d(36), 0xAA);
    assert_eq!(b[255], 0x55);

    let mut ari = [0u8; 72];
    ari[..8].copy_from_slice(&7u64.to_be_bytes());
    let rej = Rej {
        local_comm_id: 1,
        remote_comm_id: 2,
        msg_rejected: 1,
        ari_length: 8,
        reason: 28,
        ari,
        private_data: [9; 148],
    };
    roundtrip(CmMsg::Rej(rej));
    CmMad::new(0, CmMsg::Rej(rej)).encode(&mut b).unwrap();
    assert_eq!([b[32], b[33], b[34], b[35]], [1 << 6, 8 << 1, 0, 28]);
    assert_eq!(b[24 + 84], 9);

    let mra = mra_3_to_4(1, 24);
    roundtrip(CmMsg::Mra(mra));
    CmMad::new(0, CmMsg::Mra(mra)).encode(&mut b).unwrap();
    assert_eq!([b[32], b[33]], [1 << 6, 24 << 3]);

    let dreq = dreq_5_to_6(0x77);
    roundtrip(CmMsg::Dreq(dreq));
    CmMad::new(0, CmMsg::Dreq(dreq)).encode(&mut b).unwrap();
    assert_eq!([b[32], b[33], b[34], b[35]], [0, 0, 0x77, 0]);
    roundtrip(CmMsg::Drep(Drep { local_comm_id: 7, remote_comm_id: 8, private_data: [1; 224] }));
    roundtrip(CmMsg::Rtu(Rtu { local_comm_id: 9, remote_comm_id: 10, private_data: [2; 224] }));
}

#[test]
fn encoder_refuses_values_wider_than_their_field() {
    let dreq = dreq_5_to_6(1 << 24);
    let mut b = [0xEEu8; MAD_SIZE];
    assert_eq!(CmMad::new(0, CmMsg::Dreq(dreq)).encode(&mut b), Err(MadError::Field("remote QPN")));
    assert_eq!(b, [0xEE; MAD_SIZE], "nothing written on error");
    let mra = mra_3_to_4(4, 1);
    assert!(CmMad::new(0, CmMsg::Mra(mra)).encode(&mut b).is_err());
    assert_eq!(mad::private_data::<4>(b"12345"), Err(MadError::PrivateData { len: 5, max: 4 }));
    assert_eq!(mad::private_data::<4>(b"12").unwrap(), *b"12\0\0");
}

#[test]
fn decoder_refuses_what_linux_never_delivers() {
    let good = hex(WORKED_REQ);
    assert!(CmMad::decode(&good).is_ok());
    assert_eq!(CmMad::decode(&good[..255]), Err(MadError::Length(255)));
    assert_eq!(CmMad::decode(&[]), Err(MadError::Length(0)));
    let mut v = good.clone();
    v.push(0);
    assert_eq!(CmMad::decode(&v), Err(MadError::Length(257)));
    for (at, val, err) in [
        (0, 2, MadError::BaseVersion(2)),
        (1, 0x04, MadError::Class(0x04)),
        (2, 1, MadError::ClassVersion(1)),
        (3, 0x81, MadError::Method(0x81)),
        (17, 0x19, MadError::Attribute(0x19)),
    ] {
        let mut b = good.clone();
        b[at] = val;
        assert_eq!(CmMad::decode(&b), Err(err));
        // Display is a phrase
        assert!(!err.to_string().is_empty());
    }
}

#[test]
fn cma_hdr_ipv6_and_refusals() {
    let v6a = IpAddr::V6([0x20, 0x01, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    let v6b = IpAddr::V6([0x20, 0x01, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    let h = CmaHdr { src_port: 7, src: v6a, dst: v6b };
    let e = h.encode();
    assert_eq!(e[1], 0x60);
    let mut pd = [0u8; 92];
    pd[..36].copy_from_slice(&e);
    assert_eq!(CmaHdr::decode(&pd), Ok(h));
    pd[0] = 1;
    assert_eq!(CmaHdr::decode(&pd), Err(rdma_cm::CmaHdrError::Version(1)));
    pd[0] = 0;
    pd[1] = 0x50;
    assert_eq!(CmaHdr::decode(&pd), Err(rdma_cm::CmaHdrError::IpVersion(0x50)));
}

/// A fresh pair that loses the first `attr` side `from` sends; A connects
/// and both settle. The pair and A's id.
fn connect_losing_first(from: char, attr: AttrId) -> (Pair, ConnId) {
    let mut p = Pair::new();
    p.drop_first(from, attr);
    let ida = p.connect();
    p.settle();
    (p, ida)
}

/// Connects A → B; returns A's and B's ids.
fn connected(p: &mut Pair) -> (ConnId, ConnId) {
    let (ida, idb) = p.requested();
    assert_eq!(p.a.state(ida), CmState::Established);
    assert_eq!(p.b.state(idb), CmState::Established);
    (ida, idb)
}

#[test]
fn connect_and_disconnect() {
    let mut p = Pair::new();
    let (ida, idb) = connected(&mut p);
    // B saw the request with the right addressing
    let info = first_event!(p, _, CmEvent::ConnectRequest { info, .. } => *info).unwrap();
    assert_eq!(info.hdr.src, IpAddr::V4(IP_A));
    assert_eq!(info.hdr.dst, IpAddr::V4(IP_B));
    assert_eq!((info.hdr.src_port, info.local_port), (49152, 4420));
    assert_eq!(&info.private_data[..5], b"hello");
    assert_eq!(info.remote_qpn, 0x42);
    // A's params from the REP, B's from the REQ: crossed
    let pa = p.a.params(ida).unwrap();
    let pb = p.b.params(idb).unwrap();
    assert_eq!((pa.remote_qpn, pb.remote_qpn), (0x77, 0x42));
    assert_eq!((pa.rq_psn, pa.sq_psn), (0x123456, 0xABCDE));
    assert_eq!((pb.rq_psn, pb.sq_psn), (0xABCDE, 0x123456));
    // B: IRD 4, ORD 6 → A: ORD 4 (B's responder resources), IRD 6
    assert_eq!((pb.max_dest_rd_atomic, pb.max_rd_atomic), (4, 6));
    assert_eq!((pa.max_rd_atomic, pa.max_dest_rd_atomic), (4, 6));
    // RNR retry: A uses the REP's (5), B the REQ's (7)
    assert_eq!((pa.rnr_retry, pb.rnr_retry), (5, 7));
    assert_eq!((pa.path_mtu, pb.path_mtu), (1024, 1024));
    assert_eq!((pa.local_ip, pa.remote_ip), (IpAddr::V4(IP_A), IpAddr::V4(IP_B)));
    assert_eq!((pb.local_ip, pb.remote_ip), (IpAddr::V4(IP_B), IpAddr::V4(IP_A)));
    assert_eq!((pa.remote_mac, pb.remote_mac), (MAC_B, MAC_A));
    assert_eq!(pa.flow_label, pb.flow_label);
    assert_eq!(
        (pa.local_port, pa.remote_port, pb.local_port, pb.remote_port),
        (49152, 4420, 4420, 49152)
    );
    // the REP's private data reached A
    let pd = first_event!(p, _, CmEvent::Connected { private_data, .. } => *private_data).unwrap();
    assert_eq!(&pd[..7], b"welcome");
    assert!(pd[7..].iter().all(|&x| x == 0));
    // RTU/REP/REQ each sent once
    assert_eq!(sent_count(&p, 'a', AttrId::Req), 1);
    assert_eq!(sent_count(&p, 'b', AttrId::Rep), 1);
    assert_eq!(sent_count(&p, 'a', AttrId::Rtu), 1);
    assert_eq!(p.count('b', |e| matches!(e, CmEvent::Established { .. })), 1);

    // disconnect from A: DREQ names B's QPN; B answers DREP
    p.a.disconnect(p.now, ida, &mut p.ta).unwrap();
    p.settle();
    let (dreq, _) = first_sent(&p, 'a', AttrId::Dreq).unwrap();
    let CmMsg::Dreq(d) = dreq.msg else { panic!() };
    assert_eq!(d.remote_qpn, 0x77);
    assert_eq!(dreq.hdr.tid, form_tid(1, ida.0));
    let (drep, _) = first_sent(&p, 'b', AttrId::Drep).unwrap();
    assert_eq!(drep.hdr.tid, dreq.hdr.tid, "DREP echoes the DREQ's TID");
    assert_eq!(p.a.state(ida), CmState::Timewait);
    assert_eq!(p.b.state(idb), CmState::Timewait);
    assert_eq!(p.count('a', |e| matches!(e, CmEvent::Disconnected { timed_out: false, .. })), 1);
    assert_eq!(p.count('b', |e| matches!(e, CmEvent::Disconnected { timed_out: false, .. })), 1);
    // timewait: ms(av.timeout) = ms(19) = 2048 on both sides
    p.run_until(2047);
    assert_eq!(p.a.active_connections() + p.b.active_connections(), 2);
    p.run_until(1);
    assert_eq!(p.a.active_connections() + p.b.active_connections(), 0);
    assert_eq!(p.count('a', |e| matches!(e, CmEvent::TimewaitExit { qpn: 0x42, .. })), 1);
    assert_eq!(p.count('b', |e| matches!(e, CmEvent::TimewaitExit { qpn: 0x77, .. })), 1);
    assert_eq!(p.a.stats().retransmits + p.b.stats().retransmits, 0);
}

#[test]
fn thousand_connect_disconnect_cycles_leave_the_tables_empty() {
    let mut p = Pair::new();
    let mut ids = std::collections::HashSet::new();
    for i in 0..1000u32 {
        // alternate who disconnects
        let (ida, idb) = connected(&mut p);
        assert!(ids.insert(ida.0), "comm ids are not reused while live");
        if i % 2 == 0 {
            p.a.disconnect(p.now, ida, &mut p.ta).unwrap();
        } else {
            p.b.disconnect(p.now, idb, &mut p.tb).unwrap();
        }
        p.settle();
        p.run_until(5000);
        assert_eq!(p.a.active_connections(), 0, "cycle {i}");
        assert_eq!(p.b.active_connections(), 0, "cycle {i}");
        p.clear_events();
        p.wire.borrow_mut().log.clear();
    }
    assert_eq!(p.a.stats().retransmits + p.b.stats().retransmits, 0);
    assert_eq!(p.a.stats().ignored + p.b.stats().ignored, 0);
}

#[test]
fn req_to_an_unlistened_service_is_rejected_with_reason_8() {
    let mut p = Pair::new();
    let mut cp = connect_params(b"");
    cp.dst_port = 4421;
    let ida = p.a.connect(p.now, &cp, &mut p.ta).unwrap();
    p.settle();
    let (m, _) = first_sent(&p, 'b', AttrId::Rej).expect("B sent a REJ");
    let CmMsg::Rej(r) = m.msg else { panic!() };
    assert_eq!(r.reason, rej::INVALID_SERVICE_ID);
    assert_eq!((r.local_comm_id, r.remote_comm_id, r.msg_rejected), (0, ida.0, 0));
    assert_eq!(m.hdr.tid, form_tid(1, ida.0), "TID of the rejected REQ");
    assert!(
        p.events.iter().any(|(s, e)| *s == 'a'
            && matches!(e, CmEvent::Rejected { id, reason: 8, .. } if *id == ida))
    );
    assert_eq!(p.b.active_connections(), 0);
    assert_eq!(p.a.active_connections(), 0, "REJ ends the attempt at once");
    assert_eq!(p.count('b', |e| matches!(e, CmEvent::ConnectRequest { .. })), 0);
}

#[test]
fn req_for_a_foreign_gid_or_bad_cma_hdr_is_rejected() {
    // Primary Remote Port GID not one of B's → REJ 12, ARI = B's GID 0
    let mut p = Pair::new();
    let mut cp = connect_params(b"");
    cp.peer.peer_ip = IpAddr::V4([192, 0, 2, 9]);
    p.a.connect(p.now, &cp, &mut p.ta).unwrap();
    p.settle();
    let r = first_rej(&p, 'b');
    assert_eq!(r.reason, rej::INVALID_GID);
    assert_eq!(r.ari_length, 16);
    assert_eq!(&r.ari[..16], &rdma_cm::gid_of(IpAddr::V4(IP_B)));
    assert!(p.events.iter().any(|(_, e)| matches!(e, CmEvent::Rejected { reason: 12, .. })));

    // a listener bound to another address → REJ 28 (RDMA-CM level)
    let mut p = Pair::new();
    p.b = TestCm::new(cfg(MAC_B, IP_B, 9));
    p.b.listen(PortSpace::Tcp, 4420, Some(IpAddr::V4([192, 0, 2, 3]))).unwrap();
    p.connect();
    p.settle();
    let r = first_rej(&p, 'b');
    assert_eq!(r.reason, rej::CONSUMER_DEFINED);
    assert!(r.private_data.iter().all(|&x| x == 0));

    // cma_hdr with version 1 → REJ 28, delivered by hand
    let mut p = Pair::new();
    p.set_drop(|_, _| true);
    p.connect();
    let mut req = p.sent()[0].mad;
    req[24 + 140] = 1;
    let src = path_a_to_b();
    let r = p.b.on_mad(0, &src, &req, &mut p.tb);
    assert_eq!(r, Err(Ignored::Rejected(rej::CONSUMER_DEFINED)));
}

#[test]
fn application_reject_carries_reason_28_and_private_data() {
    let mut p = Pair { auto_accept: false, ..Pair::new() };
    let ida = p.connect();
    p.settle();
    let idb = p.request_id().unwrap();
    assert_eq!(
        p.b.reject(idb, &[0u8; 149], &mut p.tb),
        Err(CmError::Mad(MadError::PrivateData { len: 149, max: 148 }))
    );
    p.b.reject(idb, b"busy", &mut p.tb).unwrap();
    p.settle();
    let got = first_event!(p, 'a', CmEvent::Rejected { id, reason, private_data } =>
        (*id, *reason, *private_data));
    let (id, reason, pd) = got.unwrap();
    assert_eq!((id, reason), (ida, 28));
    assert_eq!(&pd[..4], b"busy");
    let r = first_rej(&p, 'b');
    assert_eq!(r.local_comm_id, 0, "REJ from REQ_RCVD carries local id 0");
    assert_eq!(p.a.active_connections() + p.b.active_connections(), 0);
    assert_eq!(p.b.reject(idb, b"", &mut p.tb), Err(CmError::NotFound));
}

#[test]
fn lost_rep_is_recovered_by_retransmission() {
    let (mut p, ida) = connect_losing_first('b', AttrId::Rep);
    assert_eq!(p.a.state(ida), CmState::ReqSent);
    // B retransmits the REP after ms(REQ Local CM Response Timeout 20) = 4096
    // ms, before A's REQ timer (2·ms(18) + ms(20) = 6144 ms)
    p.run_until(4095);
    assert_eq!(p.a.state(ida), CmState::ReqSent);
    p.run_until(1);
    assert_eq!(p.a.state(ida), CmState::Established);
    assert_eq!(sent_count(&p, 'b', AttrId::Rep), 2);
    assert_eq!(sent_count(&p, 'a', AttrId::Req), 1);
    let reps = p.sent_of('b', AttrId::Rep);
    assert_eq!(reps[0].1, reps[1].1, "the identical REP is resent");
    assert_eq!(p.b.stats().retransmits, 1);
}

#[test]
fn lost_rtu_is_recovered_by_rep_retransmission_and_rtu_resend() {
    let (mut p, ida) = connect_losing_first('a', AttrId::Rtu);
    assert_eq!(p.a.state(ida), CmState::Established);
    assert_eq!(p.b.active_connections(), 1);
    let idb = p.request_id().unwrap();
    assert_eq!(p.b.state(idb), CmState::RepSent);
    p.run_until(4096);
    // B resent the REP, A (established) answered it with a second RTU
    assert_eq!(sent_count(&p, 'b', AttrId::Rep), 2);
    assert_eq!(sent_count(&p, 'a', AttrId::Rtu), 2);
    assert_eq!(p.b.state(idb), CmState::Established);
    assert_eq!(p.count('a', |e| matches!(e, CmEvent::Connected { .. })), 1, "no second event");
}

#[test]
fn a_peer_that_never_answers_times_out_after_the_retry_budget() {
    let mut p = Pair::new();
    p.set_drop(|from, _| from == 'a');
    let ida = p.connect();
    // 1 + 15 REQs, 6144 ms apart; the 16th interval ends at 16 × 6144
    p.run_until(16 * 6144 - 1);
    assert_eq!(p.a.state(ida), CmState::ReqSent);
    assert_eq!(sent_count(&p, 'a', AttrId::Req), 16);
    p.run_until(1);
    assert_eq!(p.a.state(ida), CmState::Idle);
    assert_eq!(p.count('a', |e| matches!(e, CmEvent::TimedOut { id } if *id == ida)), 1);
    assert_eq!(sent_count(&p, 'a', AttrId::Req), 16);
    assert_eq!(p.a.active_connections(), 0);
    // every retransmission is the identical REQ
    let reqs: Vec<_> = p.sent().into_iter().map(|s| s.mad).collect();
    assert!(reqs.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn an_mra_extends_the_wait() {
    let mut p = Pair::new();
    p.set_drop(|from, _| from == 'a');
    let ida = p.connect();
    // the peer MRAs the REQ with service timeout 24 (65536 ms)
    let mra = CmMad::new(
        form_tid(1, ida.0),
        CmMsg::Mra(Mra {
            local_comm_id: 0x99,
            remote_comm_id: ida.0,
            msg_mraed: 0,
            service_timeout: 24,
            private_data: [0; 222],
        }),
    );
    let mut b = [0u8; MAD_SIZE];
    mra.encode(&mut b).unwrap();
    // what A's QP1 reports for a MAD from B: the path A → B
    let from_b = path_a_to_b();
    assert_eq!(p.a.on_mad(0, &from_b, &b, &mut p.ta), Ok(None));
    assert_eq!(p.a.state(ida), CmState::MraReqRcvd);
    assert_eq!(p.a.on_mad(0, &from_b, &b, &mut p.ta), Err(Ignored::Duplicate));
    // no retransmission before 65536 + ms(av.timeout 19) = 67584 ms
    p.run_until(67583);
    assert_eq!(sent_count(&p, 'a', AttrId::Req), 1);
    p.run_until(1);
    assert_eq!(sent_count(&p, 'a', AttrId::Req), 2);
    // one extension per message: a second MRA is a counted duplicate and
    // the normal schedule (6144 ms) goes on (cm.c `cm_mra_handler`)
    assert_eq!(p.a.state(ida), CmState::MraReqRcvd);
    assert_eq!(p.a.on_mad(p.now, &from_b, &b, &mut p.ta), Err(Ignored::Duplicate));
    p.run_until(6144);
    assert_eq!(sent_count(&p, 'a', AttrId::Req), 3);
}

#[test]
fn duplicate_req_gets_the_delayed_mra_then_is_dropped() {
    let mut p = Pair { auto_accept: false, ..Pair::new() };
    p.connect();
    p.settle();
    let req = p.sent()[0].mad;
    let src = path_a_to_b();
    let before = p.sent().len();
    // REQ_RCVD (the caller has not answered): no second request, but the
    // MRA RDMA-CM armed is sent (spec §4.4, cm.c `cm_dup_req_handler`)
    assert_eq!(p.b.on_mad(p.now, &src, &req, &mut p.tb), Err(Ignored::Duplicate));
    assert_eq!(p.sent().len(), before + 1);
    assert_eq!(sent_count(&p, 'b', AttrId::Mra), 1);
    assert_eq!(p.b.active_connections(), 1);
    // REP_SENT: dropped too (the REP timer covers loss)
    let idb = p.request_id().unwrap();
    p.set_drop(|_, _| true);
    p.b.accept(p.now, idb, &accept_params(0x77), &mut p.tb).unwrap();
    let before = p.sent().len();
    assert_eq!(p.b.on_mad(p.now, &src, &req, &mut p.tb), Err(Ignored::Duplicate));
    assert_eq!(p.sent().len(), before);
    assert_eq!(p.count('b', |e| matches!(e, CmEvent::ConnectRequest { .. })), 1);
}

/// A's REQ TID (the first REQ it sent).
fn req_tid(p: &Pair) -> u64 {
    first_sent(p, 'a', AttrId::Req).unwrap().0.hdr.tid
}

#[test]
fn a_slow_accept_mras_the_retransmitted_req_and_the_active_side_waits() {
    // B's caller sits on the REQ past A's REQ timeout (2·ms(18) + ms(20) =
    // 6144 ms): A's retransmission gets B's delayed MRA (24), and A defers
    // its next REQ by 65536 + ms(av.timeout 19) ms (cm.c `cm_mra_handler`).
    // Without the MRA, A would give up after 16 × 6144 ms.
    let mut p = Pair { auto_accept: false, ..Pair::new() };
    let ida = p.connect();
    p.run_until(6143);
    assert_eq!(sent_count(&p, 'b', AttrId::Mra), 0);
    p.run_until(1);
    assert_eq!(sent_count(&p, 'a', AttrId::Req), 2);
    let (m, _) = first_sent(&p, 'b', AttrId::Mra).expect("B sent an MRA");
    let CmMsg::Mra(x) = m.msg else { panic!("not an MRA") };
    let idb = p.b_request();
    assert_eq!(
        (x.local_comm_id, x.remote_comm_id, x.msg_mraed, x.service_timeout),
        (idb.0, ida.0, 0, 24)
    );
    assert_eq!(m.hdr.tid, req_tid(&p), "the MRA of a REQ carries the REQ's TID");
    assert_eq!(p.b.state(idb), CmState::MraReqSent);
    assert_eq!(p.a.state(ida), CmState::MraReqRcvd);
    // no REQ until 6144 + 65536 + 2048 ms
    p.run_until(65536 + 2048 - 1);
    assert_eq!(sent_count(&p, 'a', AttrId::Req), 2);
    // past the point where 16 unanswered REQs would have ended it
    p.run_until(16 * 6144 - p.now + 1);
    assert_eq!(p.a.state(ida), CmState::MraReqRcvd);
    assert_eq!(p.count('a', |e| matches!(e, CmEvent::TimedOut { .. })), 0);
    // the caller finally accepts: connected
    p.b.accept(p.now, idb, &accept_params(p.qpn_b), &mut p.tb).unwrap();
    p.settle();
    assert_eq!((p.a.state(ida), p.b.state(idb)), (CmState::Established, CmState::Established));
}

#[test]
fn a_slow_rtu_mras_the_retransmitted_rep_and_the_passive_side_waits() {
    // A's caller has the REP but has not moved its QP / sent the RTU when
    // B's REP timer (ms(20) = 4096 ms) fires: the duplicate REP gets an MRA
    // of the REP (Message MRAed 1, Service Timeout 24; spec §4.3
    // MRA_REP_SENT, cm.c `cm_dup_rep_handler`), and B defers its next REP
    // by 65536 + ms(av.timeout 19) ms. Without it, B's 16 REPs run out at
    // 16 × 4096 ms and the connection is UNREACHABLE.
    let mut p = Pair { auto_rtu: false, ..Pair::new() };
    let (ida, idb) = p.requested();
    assert_eq!((p.a.state(ida), p.b.state(idb)), (CmState::RepRcvd, CmState::RepSent));
    p.run_until(4096);
    assert_eq!(sent_count(&p, 'b', AttrId::Rep), 2);
    let (m, _) = first_sent(&p, 'a', AttrId::Mra).expect("A sent an MRA");
    let CmMsg::Mra(x) = m.msg else { panic!("not an MRA") };
    assert_eq!(
        (x.local_comm_id, x.remote_comm_id, x.msg_mraed, x.service_timeout),
        (ida.0, idb.0, 1, 24)
    );
    assert_eq!(m.hdr.tid, req_tid(&p), "MRA-for-REP carries the active side's REQ TID");
    assert_eq!(p.b.state(idb), CmState::MraRepRcvd);
    p.run_until(65536 + 2048 - 1);
    assert_eq!(sent_count(&p, 'b', AttrId::Rep), 2, "no REP during the MRA's wait");
    assert_eq!(p.count('b', |e| matches!(e, CmEvent::TimedOut { .. })), 0);
    assert!(p.now > 16 * 4096);
    // the caller catches up: RTU, both established
    p.a.ready_to_use(ida, &mut p.ta).unwrap();
    p.settle();
    assert_eq!((p.a.state(ida), p.b.state(idb)), (CmState::Established, CmState::Established));
    assert_eq!(sent_count(&p, 'a', AttrId::Mra), 1);
}

#[test]
fn stale_and_foreign_mads_are_ignored() {
    let mut p = Pair::new();
    let (ida, idb) = connected(&mut p);
    let src = path_a_to_b();
    let enc = |m: CmMsg| {
        let mut b = [0u8; MAD_SIZE];
        CmMad::new(5, m).encode(&mut b).unwrap();
        b
    };
    // RTU, REP, DREP naming ids nobody has
    let rtu = enc(CmMsg::Rtu(Rtu { local_comm_id: 1, remote_comm_id: 2, private_data: [0; 224] }));
    assert_eq!(p.b.on_mad(p.now, &src, &rtu, &mut p.tb), Err(Ignored::Stale));
    let drep =
        enc(CmMsg::Drep(Drep { local_comm_id: 1, remote_comm_id: 2, private_data: [0; 224] }));
    assert_eq!(p.b.on_mad(p.now, &src, &drep, &mut p.tb), Err(Ignored::Stale));
    // a second RTU for the established connection: counted, dropped
    let rtu2 = enc(CmMsg::Rtu(Rtu {
        local_comm_id: ida.0,
        remote_comm_id: idb.0,
        private_data: [0; 224],
    }));
    assert_eq!(p.b.on_mad(p.now, &src, &rtu2, &mut p.tb), Err(Ignored::Duplicate));
    // a DREQ with a wrong remote QPN is silently dropped (cm_dreq_handler)
    let before = p.sent().len();
    let dreq = enc(CmMsg::Dreq(Dreq {
        local_comm_id: ida.0,
        remote_comm_id: idb.0,
        remote_qpn: 0x78,
        private_data: [0; 220],
    }));
    assert_eq!(p.b.on_mad(p.now, &src, &dreq, &mut p.tb), Err(Ignored::WrongQpn));
    assert_eq!(p.sent().len(), before);
    assert_eq!(p.b.state(idb), CmState::Established);
    // a DREQ for an unknown connection is answered with a DREP anyway
    let dreq = enc(CmMsg::Dreq(Dreq {
        local_comm_id: 0x1234,
        remote_comm_id: 0x5678,
        remote_qpn: 0x77,
        private_data: [0; 220],
    }));
    assert_eq!(p.b.on_mad(p.now, &src, &dreq, &mut p.tb), Err(Ignored::Stale));
    let last = p.sent().pop().unwrap();
    let m = CmMad::decode(&last.mad).unwrap();
    assert_eq!(m.hdr.tid, 5);
    assert!(matches!(
        m.msg,
        CmMsg::Drep(Drep { local_comm_id: 0x5678, remote_comm_id: 0x1234, .. })
    ));
    // non-CM and garbage
    let mut junk = rtu;
    junk[2] = 1;
    assert!(matches!(p.b.on_mad(p.now, &src, &junk, &mut p.tb), Err(Ignored::Malformed(_))));
    assert!(matches!(p.b.on_mad(p.now, &src, &[0; 10], &mut p.tb), Err(Ignored::Malformed(_))));
    assert_eq!(p.b.state(idb), CmState::Established);
    assert_eq!(p.a.state(ida), CmState::Established);
}

#[test]
fn repeated_dreq_in_timewait_gets_another_drep() {
    let mut p = Pair::new();
    let (ida, idb) = connected(&mut p);
    // B's DREP is lost: A retransmits the DREQ, B (in timewait) answers again
    p.drop_first('b', AttrId::Drep);
    p.a.disconnect(p.now, ida, &mut p.ta).unwrap();
    p.settle();
    assert_eq!(p.a.state(ida), CmState::DreqSent);
    assert_eq!(p.b.state(idb), CmState::Timewait);
    p.run_until(6144);
    assert_eq!(sent_count(&p, 'a', AttrId::Dreq), 2);
    assert_eq!(sent_count(&p, 'b', AttrId::Drep), 2);
    assert_eq!(p.a.state(ida), CmState::Timewait);
}

#[test]
fn dreq_without_answer_ends_in_timewait() {
    let mut p = Pair::new();
    let (ida, _) = connected(&mut p);
    p.set_drop(|_, _| true);
    p.a.disconnect(p.now, ida, &mut p.ta).unwrap();
    p.run_until(16 * 6144);
    assert_eq!(sent_count(&p, 'a', AttrId::Dreq), 16);
    assert_eq!(p.count('a', |e| matches!(e, CmEvent::Disconnected { timed_out: true, .. })), 1);
    p.run_until(2048);
    assert_eq!(p.a.active_connections(), 0);
}

#[test]
fn stale_qpn_gets_rej_10_and_the_old_connection_a_dreq() {
    let mut p = Pair::new();
    let (_ida, idb) = connected(&mut p);
    // A "reboots" (new ids) and reuses QPN 0x42 toward B
    p.a_reboots_and_reconnects();
    let rejs = p.msgs_from('b');
    assert!(matches!(rejs[0], CmMsg::Rej(Rej { reason: 10, .. })), "{rejs:?}");
    assert!(matches!(rejs[1], CmMsg::Dreq(_)), "{rejs:?}");
    assert_eq!(p.b.state(idb), CmState::DreqSent);
}

#[test]
fn api_refuses_bad_parameters_with_typed_errors() {
    let mut p = Pair::new();
    let mut cp = connect_params(&[0; 57]);
    assert_eq!(
        p.a.connect(0, &cp, &mut p.ta),
        Err(CmError::Mad(MadError::PrivateData { len: 57, max: 56 }))
    );
    cp.private_data = b"";
    cp.qpn = 1 << 24;
    assert!(matches!(p.a.connect(0, &cp, &mut p.ta), Err(CmError::Invalid(_))));
    cp.qpn = 5;
    cp.path_mtu = 1500;
    assert!(matches!(p.a.connect(0, &cp, &mut p.ta), Err(CmError::Invalid(_))));
    cp.path_mtu = 1024;
    cp.responder_resources = 9;
    assert!(matches!(p.a.connect(0, &cp, &mut p.ta), Err(CmError::Invalid(_))));
    cp.responder_resources = 1;
    cp.peer.local_ip = IpAddr::V6([0; 16]);
    assert!(matches!(p.a.connect(0, &cp, &mut p.ta), Err(CmError::Invalid(_))));
    assert!(p.sent().is_empty());
    assert_eq!(p.a.active_connections(), 0);
    // table full
    cp.peer = path_a_to_b();
    for _ in 0..C {
        p.a.connect(0, &cp, &mut p.ta).unwrap();
    }
    assert_eq!(p.a.connect(0, &cp, &mut p.ta), Err(CmError::TableFull));
    // state errors
    let id = ConnId(12345);
    assert_eq!(p.a.ready_to_use(id, &mut p.ta), Err(CmError::NotFound));
    assert_eq!(p.b.listen(PortSpace::Tcp, 4420, None), Err(irdma::cm::CmError::AlreadyListening));
    assert!(!CmError::TableFull.to_string().is_empty());
}

#[test]
fn params_become_the_verbs_modify_steps() {
    let mut p = Pair::new();
    let (ida, _) = connected(&mut p);
    let pa = p.a.params(ida).unwrap();
    let [init, rtr, rts] = pa.qp_attrs();
    assert_eq!(init.state, QpState::Init);
    assert_eq!(rtr.state, QpState::Rtr);
    assert_eq!((rtr.dest_qp, rtr.rq_psn, rtr.path_mtu), (0x77, 0x123456, 1024));
    assert_eq!(rtr.max_dest_rd_atomic, pa.max_dest_rd_atomic);
    let av = rtr.av.unwrap();
    assert_eq!((av.dest_mac, av.dest_ip, av.src_ip), (MAC_B, IpAddr::V4(IP_B), IpAddr::V4(IP_A)));
    assert_eq!((av.hop_limit, av.flow_label), (64, 0x75144));
    assert_eq!(rts.state, QpState::Rts);
    assert_eq!((rts.sq_psn, rts.retry_cnt, rts.rnr_retry, rts.max_rd_atomic), (0xABCDE, 7, 5, 4));
}

#[test]
fn a_rep_never_answered_times_out_on_the_passive_side() {
    let mut p = Pair::new();
    // A's RTUs and REQ retransmissions never reach B after the first REQ
    let mut reqs = 0;
    p.set_drop(move |from, m| {
        if from == 'a' && m.msg.attr_id() == AttrId::Req {
            reqs += 1;
            return reqs > 1;
        }
        from == 'a'
    });
    let (_, idb) = p.requested();
    assert_eq!(p.b.state(idb), CmState::RepSent);
    // 1 + REQ max CM retries (15) REPs, ms(REQ local CM response timeout 20)
    // = 4096 ms apart; no REJ on REP timeout (cm.c)
    p.run_until(16 * 4096 - 1);
    assert_eq!(p.b.state(idb), CmState::RepSent);
    p.run_until(1);
    assert_eq!(p.b.state(idb), CmState::Idle);
    assert_eq!(sent_count(&p, 'b', AttrId::Rep), 16);
    assert_eq!(sent_count(&p, 'b', AttrId::Rej), 0);
    assert_eq!(p.count('b', |e| matches!(e, CmEvent::TimedOut { id } if *id == idb)), 1);
}

#[test]
fn first_data_before_rtu_establishes_the_passive_side() {
    let mut p = Pair::new();
    p.set_drop(|from, m| from == 'a' && m.msg.attr_id() == AttrId::Rtu);
    let (_, idb) = p.requested();
    assert_eq!(p.b.state(idb), CmState::RepSent);
    // COMM_EST: a receive completion on the new QP
    p.b.established(idb).unwrap();
    assert_eq!(p.b.state(idb), CmState::Established);
    p.run_until(100_000);
    assert_eq!(sent_count(&p, 'b', AttrId::Rep), 1, "the REP timer stopped");
    assert_eq!(p.b.established(ConnId(1)), Err(CmError::NotFound));
}

#[test]
fn simultaneous_disconnect_ends_in_timewait_on_both_sides() {
    let mut p = Pair::new();
    let (ida, idb) = connected(&mut p);
    p.a.disconnect(p.now, ida, &mut p.ta).unwrap();
    p.b.disconnect(p.now, idb, &mut p.tb).unwrap();
    p.settle();
    assert_eq!(p.a.state(ida), CmState::Timewait);
    assert_eq!(p.b.state(idb), CmState::Timewait);
    assert_eq!(p.count('a', |e| matches!(e, CmEvent::Disconnected { .. })), 1);
    assert_eq!(p.count('b', |e| matches!(e, CmEvent::Disconnected { .. })), 1);
    p.run_until(2048);
    assert_eq!(p.a.active_connections() + p.b.active_connections(), 0);
    // disconnect on a finished connection is refused with a typed error
    assert_eq!(p.a.disconnect(p.now, ida, &mut p.ta), Err(CmError::NotFound));
}

#[test]
fn rej_on_an_established_connection_enters_timewait() {
    let mut p = Pair::new();
    let (ida, idb) = connected(&mut p);
    let rej = CmMad::new(
        0,
        CmMsg::Rej(Rej {
            local_comm_id: idb.0,
            remote_comm_id: ida.0,
            msg_rejected: 2,
            ari_length: 0,
            reason: rej::CONSUMER_DEFINED,
            ari: [0; 72],
            private_data: [0; 148],
        }),
    );
    let mut b = [0u8; MAD_SIZE];
    rej.encode(&mut b).unwrap();
    let src = path_a_to_b();
    // a REJ naming the wrong remote id is stale
    let mut wrong = b;
    wrong[24] ^= 1;
    assert_eq!(p.a.on_mad(p.now, &src, &wrong, &mut p.ta), Err(Ignored::Stale));
    let r = p.a.on_mad(p.now, &src, &b, &mut p.ta).unwrap();
    assert!(matches!(r, Some(CmEvent::Rejected { reason: 28, .. })));
    assert_eq!(p.a.state(ida), CmState::Timewait);
}

#[test]
fn ipv6_connect_and_disconnect() {
    let a6 = IpAddr::V6([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    let b6 = IpAddr::V6([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    let mut p = Pair::new();
    let mut cb = cfg(MAC_B, IP_B, 3);
    cb.local_ips[1] = Some(b6);
    p.b = TestCm::new(cb);
    p.b.listen(PortSpace::Tcp, 4420, None).unwrap();
    let mut cp = connect_params(b"v6");
    cp.peer.local_ip = a6;
    cp.peer.peer_ip = b6;
    let ida = p.a.connect(p.now, &cp, &mut p.ta).unwrap();
    p.settle();
    let idb = p.b_request();
    assert_eq!(p.a.state(ida), CmState::Established);
    let (m, _) = first_sent(&p, 'a', AttrId::Req).unwrap();
    let CmMsg::Req(r) = m.msg else { panic!() };
    assert_eq!(r.private_data[1], 0x60);
    assert_eq!(r.primary.remote_gid, rdma_cm::gid_of(b6));
    let pb = p.b.params(idb).unwrap();
    assert_eq!((pb.local_ip, pb.remote_ip), (b6, a6));
    p.b.disconnect(p.now, idb, &mut p.tb).unwrap();
    p.run_until(3000);
    assert_eq!(p.a.active_connections() + p.b.active_connections(), 0);
}

#[test]
fn stale_qpn_against_a_disconnecting_connection_gets_rej_10_only() {
    let mut p = Pair::new();
    let (ida, idb) = connected(&mut p);
    p.auto_drep = false;
    p.a.disconnect(p.now, ida, &mut p.ta).unwrap();
    p.settle();
    assert_eq!(p.b.state(idb), CmState::DreqRcvd);
    // A reboots and reuses QPN 0x42 while B still holds the old connection
    p.a_reboots_and_reconnects();
    let from_b = p.msgs_from('b');
    assert_eq!(from_b.len(), 1, "{from_b:?}");
    assert!(matches!(from_b[0], CmMsg::Rej(Rej { reason: 10, .. })));
    assert_eq!(p.b.state(idb), CmState::DreqRcvd, "no DREP sent on the app's behalf");
}

#[test]
fn active_cancel_sends_rej_timeout_that_the_passive_side_matches_by_guid() {
    let mut p = Pair { auto_accept: false, ..Pair::new() };
    let (ida, idb) = p.requested();
    assert_eq!(p.b.state(idb), CmState::ReqRcvd);
    p.a.cancel(ida, &mut p.ta).unwrap();
    p.settle();
    let r = first_rej(&p, 'a');
    assert_eq!((r.reason, r.ari_length, r.local_comm_id), (rej::TIMEOUT, 8, ida.0));
    assert_eq!(&r.ari[..8], &guid_from_mac(MAC_A).to_be_bytes());
    assert!(
        p.events.iter().any(|(s, e)| *s == 'b'
            && matches!(e, CmEvent::Rejected { id, reason: 4, .. } if *id == idb))
    );
    assert_eq!(p.a.active_connections() + p.b.active_connections(), 0);
    assert_eq!(p.a.cancel(ida, &mut p.ta), Err(CmError::NotFound));
}

#[test]
fn active_side_rejects_a_rep_it_cannot_use() {
    let mut p = Pair { auto_rtu: false, ..Pair::new() };
    let (ida, idb) = p.requested();
    assert_eq!(p.a.state(ida), CmState::RepRcvd);
    assert_eq!(p.b.state(idb), CmState::RepSent);
    // e.g. the QP refused the parameters
    assert_eq!(p.a.cancel(ida, &mut p.ta), Err(CmError::InvalidState(CmState::RepRcvd)));
    p.a.reject(ida, b"qp", &mut p.ta).unwrap();
    p.settle();
    let r = first_rej(&p, 'a');
    assert_eq!(
        (r.reason, r.msg_rejected, r.local_comm_id, r.remote_comm_id),
        (28, 1, ida.0, idb.0)
    );
    assert!(p.events.iter().any(|(s, e)| *s == 'b'
        && matches!(e, CmEvent::Rejected { id, reason: 28, private_data }
            if *id == idb && &private_data[..2] == b"qp")));
    assert_eq!(p.a.active_connections() + p.b.active_connections(), 0);
    p.run_until(100_000);
    assert_eq!(sent_count(&p, 'b', AttrId::Rep), 1, "B's REP timer stopped");
}

#[test]
fn passive_mra_defers_the_req_and_answers_duplicates() {
    let mut p = Pair { auto_accept: false, ..Pair::new() };
    let (ida, idb) = p.requested();
    assert_eq!(p.b.mra(ConnId(7), 24, &mut p.tb), Err(CmError::NotFound));
    p.b.mra(idb, 24, &mut p.tb).unwrap();
    p.settle();
    assert_eq!(p.b.state(idb), CmState::MraReqSent);
    assert_eq!(p.a.state(ida), CmState::MraReqRcvd);
    let (m, _) = first_sent(&p, 'b', AttrId::Mra).unwrap();
    let CmMsg::Mra(x) = m.msg else { panic!() };
    assert_eq!(
        (x.local_comm_id, x.remote_comm_id, x.msg_mraed, x.service_timeout),
        (idb.0, ida.0, 0, 24)
    );
    assert_eq!(m.hdr.tid, form_tid(1, ida.0));
    assert_eq!(p.b.mra(idb, 24, &mut p.tb), Err(CmError::InvalidState(CmState::MraReqSent)));
    // A waits ms(24) + ms(19) = 67584 ms, then resends the REQ; B answers
    // the duplicate with the MRA again
    p.run_until(67583);
    assert_eq!(sent_count(&p, 'a', AttrId::Req), 1);
    p.run_until(1);
    assert_eq!(sent_count(&p, 'a', AttrId::Req), 2);
    assert_eq!(sent_count(&p, 'b', AttrId::Mra), 2);
    assert_eq!(p.a.state(ida), CmState::MraReqRcvd);
    assert_eq!(p.count('b', |e| matches!(e, CmEvent::ConnectRequest { .. })), 1);
    // the application accepts in the end
    p.b.accept(p.now, idb, &accept_params(0x77), &mut p.tb).unwrap();
    p.settle();
    assert_eq!(p.a.state(ida), CmState::Established);
    assert_eq!(p.b.state(idb), CmState::Established);
}

#[test]
fn rdma_cm_address_rules() {
    use rdma_cm::{gid_of, ip_of_gid, unusable_addr};
    let v4 = IpAddr::V4(IP_A);
    assert_eq!(gid_of(v4), [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1]);
    assert_eq!(ip_of_gid(gid_of(v4)), v4);
    let v6 = IpAddr::V6([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
    assert_eq!(ip_of_gid(gid_of(v6)), v6);
    for bad in [[0, 0, 0, 0], [127, 0, 0, 1], [224, 0, 0, 1], [239, 1, 2, 3], [255; 4]] {
        assert!(unusable_addr(IpAddr::V4(bad)), "{bad:?}");
    }
    assert!(!unusable_addr(v4));
    let mut lo = [0u8; 16];
    lo[15] = 1;
    assert!(unusable_addr(IpAddr::V6(lo)));
    assert!(unusable_addr(IpAddr::V6([0; 16])));
    assert!(unusable_addr(IpAddr::V6([0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])));
    assert!(!unusable_addr(v6));
    // a REQ whose cma_hdr names a loopback source is refused with REJ 28
    let mut p = Pair::new();
    p.set_drop(|_, _| true);
    p.connect();
    let mut req = p.sent()[0].mad;
    req[24 + 140 + 4 + 12] = 127;
    assert_eq!(
        p.b.on_mad(0, &path_a_to_b(), &req, &mut p.tb),
        Err(Ignored::Rejected(rej::CONSUMER_DEFINED))
    );
    // and one for the UC transport too (cma_ib_check_req_qp_type)
    let mut req = p.sent()[0].mad;
    req[24 + 43] |= 1 << 1;
    assert_eq!(
        p.b.on_mad(0, &path_a_to_b(), &req, &mut p.tb),
        Err(Ignored::Rejected(rej::CONSUMER_DEFINED))
    );
    assert_eq!(p.b.active_connections(), 0);
}
