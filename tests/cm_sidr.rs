//! SIDR (issue #34, `udaddy`): two CM instances over the in-memory QP1
//! wire of `cm_common`. The active side resolves a UDP-port-space service
//! id to the passive side's UD QPN and Q_Key; unknown services, refusals,
//! lost and duplicated SIDR MADs, timeouts and malformed SIDR MADs.

mod cm_common;

use cm_common::*;
use irdma::cm::mad::{self, AttrId, CmMad, CmMsg, MAD_SIZE, SidrRep, SidrReq, sidr_status};
use irdma::cm::rdma_cm::{CmaHdr, PortSpace, UDP_QKEY, rej, service_id};
use irdma::cm::{
    CmError, CmEvent, CmState, ConnId, Ignored, SIDR_LINGER_INTERVALS, SidrAcceptParams, SidrParams,
};
use irdma::verbs::IpAddr;

const UDADDY_PORT: u16 = 7174;

fn sidr_params(private_data: &[u8]) -> SidrParams<'_> {
    SidrParams {
        peer: path_a_to_b(),
        port_space: PortSpace::Udp,
        dst_port: UDADDY_PORT,
        src_port: 50000,
        private_data,
    }
}

/// A pair whose B listens on RDMA_PS_UDP port 7174 (and TCP 4420).
fn pair() -> Pair {
    let mut p = Pair::new();
    p.b.listen(PortSpace::Udp, UDADDY_PORT, None).expect("listen UDP");
    p
}

fn sidr_requests(p: &Pair) -> Vec<ConnId> {
    p.events
        .iter()
        .filter_map(|(s, e)| match e {
            CmEvent::SidrRequest { id, .. } if *s == 'b' => Some(*id),
            _ => None,
        })
        .collect()
}

fn accept(p: &mut Pair, id: ConnId, qpn: u32) {
    let a = SidrAcceptParams { qpn, qkey: UDP_QKEY, private_data: b"ud-ok" };
    p.b.sidr_accept(p.now, id, &a, &mut p.tb).expect("sidr_accept");
}

#[test]
fn sidr_resolves_the_ud_qpn_and_qkey_with_the_wire_format_of_linux() {
    let mut p = pair();
    let id = p.a.sidr_resolve(p.now, &sidr_params(b"hi udaddy"), &mut p.ta).unwrap();
    assert_eq!(p.a.state(id), CmState::SidrReqSent);
    p.settle();
    let reqs = sidr_requests(&p);
    assert_eq!(reqs.len(), 1, "{:?}", p.events);
    let info = first_event!(p, _, CmEvent::SidrRequest { info, .. } => *info).unwrap();
    assert_eq!(info.local_port, UDADDY_PORT);
    assert_eq!(info.hdr.src_port, 50000);
    assert_eq!((info.hdr.src, info.hdr.dst), (IpAddr::V4(IP_A), IpAddr::V4(IP_B)));
    assert_eq!(&info.private_data[..9], b"hi udaddy");
    assert_eq!(info.peer.peer_mac, MAC_A);
    accept(&mut p, reqs[0], 0xABCDE);
    p.settle();
    let got = first_event!(p, 'a', CmEvent::SidrResolved { id, qpn, qkey, private_data } =>
        (*id, *qpn, *qkey, *private_data));
    let (rid, qpn, qkey, pd) = got.expect("SidrResolved on A");
    assert_eq!((rid, qpn, qkey), (id, 0xABCDE, 0x0123_4567));
    assert_eq!(&pd[..5], b"ud-ok");
    assert_eq!(p.a.state(id), CmState::Idle, "the active slot is free");
    assert_eq!(p.a.active_connections(), 0);

    // the SIDR_REQ: C12 table 119 offsets (MAD offset = data + 24)
    let req = p.sent_of('a', AttrId::SidrReq);
    assert_eq!(req.len(), 1);
    let (m, b) = req[0];
    assert_eq!(&b[..4], &[1, 7, 2, 3], "base 1, class CM, version 2, Send");
    assert_eq!(&b[16..18], &[0x00, 0x17]);
    assert_eq!(m.hdr.tid, mad::form_tid(1, id.0), "TID as for a REQ");
    assert_eq!(u32::from_be_bytes(b[24..28].try_into().unwrap()), id.0, "Request ID = our id");
    assert_eq!(&b[28..30], &[0xFF, 0xFF], "P_Key");
    assert_eq!(&b[30..32], &[0, 0], "reserved");
    assert_eq!(u64::from_be_bytes(b[32..40].try_into().unwrap()), 0x0000_0000_0111_1C06);
    assert_eq!(service_id(PortSpace::Udp, UDADDY_PORT), 0x0000_0000_0111_1C06);
    assert_eq!(b[40], 0, "cma_hdr version");
    assert_eq!(b[41], 0x40, "cma_hdr IPv4");
    assert_eq!(&b[42..44], &50000u16.to_be_bytes());
    assert_eq!(&b[56..60], &IP_A);
    assert_eq!(&b[72..76], &IP_B);
    assert_eq!(&b[76..85], b"hi udaddy", "user data after the 36-byte cma_hdr");

    // the SIDR_REP: C12 table 120
    let rep = p.sent_of('b', AttrId::SidrRep);
    assert_eq!(rep.len(), 1);
    let (m, b) = rep[0];
    assert_eq!(&b[16..18], &[0x00, 0x18]);
    assert_eq!(m.hdr.tid, mad::form_tid(1, id.0), "TID of the SIDR_REQ echoed");
    assert_eq!(u32::from_be_bytes(b[24..28].try_into().unwrap()), id.0, "Request ID echoed");
    assert_eq!(b[28], 0, "status success");
    assert_eq!(b[29], 0, "no additional information");
    assert_eq!(&b[32..35], &[0x0A, 0xBC, 0xDE], "QPN, 24 bits");
    assert_eq!(u64::from_be_bytes(b[36..44].try_into().unwrap()), 0x0000_0000_0111_1C06);
    assert_eq!(&b[44..48], &[0x01, 0x23, 0x45, 0x67], "Q_Key");
    assert_eq!(&b[120..125], b"ud-ok", "private data at data 96");
    assert!(b[125..].iter().all(|&x| x == 0));

    // B forgets the answered request after the linger time, without an event
    let n = p.events.len();
    p.run_until(4096 * SIDR_LINGER_INTERVALS + 1);
    assert_eq!(p.events.len(), n);
    assert_eq!(p.b.active_connections(), 0);
}

#[test]
fn sidr_for_an_unlistened_service_gets_status_1_and_a_refusal_status_2() {
    let mut p = Pair::new(); // B listens on TCP 4420 only
    let id = p.a.sidr_resolve(p.now, &sidr_params(b""), &mut p.ta).unwrap();
    p.settle();
    let rej = first_event!(p, 'a', CmEvent::SidrRejected { id, status, .. } => (*id, *status));
    assert_eq!(rej, Some((id, sidr_status::UNSUPPORTED)), "{:?}", p.events);
    assert_eq!(p.a.active_connections() + p.b.active_connections(), 0);
    assert!(sidr_requests(&p).is_empty());

    // a listener, refused by the application: status 2, private data kept
    let mut p = pair();
    let id = p.a.sidr_resolve(p.now, &sidr_params(b""), &mut p.ta).unwrap();
    p.settle();
    let r = sidr_requests(&p)[0];
    p.b.sidr_reject(p.now, r, b"go away", &mut p.tb).unwrap();
    assert_eq!(
        p.b.sidr_reject(p.now, r, b"", &mut p.tb),
        Err(CmError::InvalidState(CmState::SidrRepSent))
    );
    p.settle();
    let got = first_event!(p, 'a', CmEvent::SidrRejected { id, status, private_data } =>
        (*id, *status, private_data[..7].to_vec()));
    assert_eq!(got, Some((id, sidr_status::REJECT, b"go away".to_vec())));
}

/// A hand-made SIDR_REQ from A's address to B.
fn raw_sidr_req(request_id: u32, sid: u64, hdr: [u8; 36]) -> [u8; MAD_SIZE] {
    let mut pd = [0u8; mad::pdata::SIDR_REQ];
    pd[..36].copy_from_slice(&hdr);
    let m = CmMad::new(
        0x77,
        CmMsg::SidrReq(SidrReq { request_id, pkey: 0xFFFF, service_id: sid, private_data: pd }),
    );
    let mut b = [0u8; MAD_SIZE];
    m.encode(&mut b).unwrap();
    b
}

fn from_a() -> irdma::cm::MadAddr {
    let p = path_a_to_b();
    irdma::cm::MadAddr { peer_ip: p.local_ip, local_ip: p.peer_ip, peer_mac: MAC_A, ..p }
}

fn good_hdr() -> [u8; 36] {
    CmaHdr { src_port: 1, src: IpAddr::V4(IP_A), dst: IpAddr::V4(IP_B) }.encode()
}

/// The SIDR_REP statuses B sent, in order.
fn rep_statuses(p: &Pair) -> Vec<u8> {
    p.sent_of('b', AttrId::SidrRep)
        .into_iter()
        .map(|(m, _)| match m.msg {
            CmMsg::SidrRep(r) => r.status,
            _ => unreachable!(),
        })
        .collect()
}

#[test]
fn sidr_reqs_rdma_cm_would_refuse_get_status_2_and_rc_reqs_to_a_ud_service_rej_28() {
    let mut p = pair();
    let now = p.now;
    let src = from_a();
    let udp = service_id(PortSpace::Udp, UDADDY_PORT);
    // bad cma_hdr version
    let mut h = good_hdr();
    h[0] = 1;
    let r = p.b.on_mad(now, &src, &raw_sidr_req(1, udp, h), &mut p.tb);
    assert_eq!(r, Err(Ignored::SidrRejected(sidr_status::REJECT)));
    // cma_hdr destination is not the address it arrived at
    let h = CmaHdr { src_port: 1, src: IpAddr::V4(IP_A), dst: IpAddr::V4([192, 0, 2, 9]) }.encode();
    let r = p.b.on_mad(now, &src, &raw_sidr_req(2, udp, h), &mut p.tb);
    assert_eq!(r, Err(Ignored::SidrRejected(sidr_status::REJECT)));
    // a loopback source
    let h = CmaHdr { src_port: 1, src: IpAddr::V4([127, 0, 0, 1]), dst: IpAddr::V4(IP_B) }.encode();
    let r = p.b.on_mad(now, &src, &raw_sidr_req(3, udp, h), &mut p.tb);
    assert_eq!(r, Err(Ignored::SidrRejected(sidr_status::REJECT)));
    // a SIDR_REQ for the TCP (RC) listener: wrong QP type
    let tcp = service_id(PortSpace::Tcp, 4420);
    let r = p.b.on_mad(now, &src, &raw_sidr_req(4, tcp, good_hdr()), &mut p.tb);
    assert_eq!(r, Err(Ignored::SidrRejected(sidr_status::REJECT)));
    // unknown service id
    let r = p.b.on_mad(now, &src, &raw_sidr_req(5, udp + 1, good_hdr()), &mut p.tb);
    assert_eq!(r, Err(Ignored::SidrRejected(sidr_status::UNSUPPORTED)));
    assert_eq!(rep_statuses(&p), [2, 2, 2, 2, 1]);
    assert_eq!(p.b.active_connections(), 0);
    // every refusal echoes the request id and service id
    let reps = p.sent_of('b', AttrId::SidrRep);
    let ids: Vec<(u32, u64)> = reps
        .iter()
        .map(|(m, _)| match m.msg {
            CmMsg::SidrRep(r) => (r.request_id, r.service_id),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(ids, [(1, udp), (2, udp), (3, udp), (4, tcp), (5, udp + 1)]);

    // an RC REQ to the UDP-port-space service: REJ 28 (wrong QP type)
    let mut cp = connect_params(b"");
    cp.port_space = PortSpace::Udp;
    cp.dst_port = UDADDY_PORT;
    p.a.connect(p.now, &cp, &mut p.ta).unwrap();
    p.settle();
    assert!(
        p.events.iter().any(|(s, e)| *s == 'a'
            && matches!(e, CmEvent::Rejected { reason: rej::CONSUMER_DEFINED, .. })),
        "{:?}",
        p.events
    );
    assert!(!p.events.iter().any(|(_, e)| matches!(e, CmEvent::ConnectRequest { .. })));
}

#[test]
fn sidr_req_is_retransmitted_identically_then_times_out() {
    let mut p = pair();
    p.set_drop(|from, _| from == 'a'); // nothing reaches B
    let id = p.a.sidr_resolve(p.now, &sidr_params(b"x"), &mut p.ta).unwrap();
    p.run_until(4096 * 15 + 100);
    assert_eq!(p.a.state(id), CmState::SidrReqSent, "still retrying after 15 intervals");
    assert_eq!(p.count('a', |e| matches!(e, CmEvent::TimedOut { .. })), 0);
    p.run_until(4096);
    let reqs = p.sent_of('a', AttrId::SidrReq);
    assert_eq!(reqs.len(), 16, "1 + max CM retries (15)");
    assert!(reqs.iter().all(|(_, b)| *b == reqs[0].1), "every retransmission identical");
    assert_eq!(p.count('a', |e| *e == CmEvent::TimedOut { id }), 1);
    assert_eq!(p.a.active_connections(), 0);
    assert_eq!(p.a.stats().retransmits, 15);
}

#[test]
fn a_lost_sidr_rep_is_answered_again_and_a_duplicate_req_is_not_a_new_request() {
    let mut p = pair();
    p.drop_first('b', AttrId::SidrRep); // the first SIDR_REP is lost
    let id = p.a.sidr_resolve(p.now, &sidr_params(b""), &mut p.ta).unwrap();
    p.settle();
    // the caller has not answered: a retransmitted SIDR_REQ is dropped
    p.run_until(4096);
    assert_eq!(sidr_requests(&p).len(), 1);
    assert_eq!(p.sent_of('a', AttrId::SidrReq).len(), 2);
    assert!(p.sent_of('b', AttrId::SidrRep).is_empty());
    let r = sidr_requests(&p)[0];
    accept(&mut p, r, 0x55);
    p.settle();
    assert_eq!(p.a.state(id), CmState::SidrReqSent, "the REP was lost");
    // the next retransmission gets the same REP again
    p.run_until(4096);
    let sent = p.sent_of('b', AttrId::SidrRep);
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].1, sent[1].1, "the same SIDR_REP bytes");
    assert_eq!(sidr_requests(&p).len(), 1, "never a second SidrRequest");
    let ok = p.count('a', |e| matches!(e, CmEvent::SidrResolved { qpn: 0x55, .. }));
    assert_eq!(ok, 1, "{:?}", p.events);
}

#[test]
fn duplicate_stale_and_foreign_sidr_reps_are_ignored() {
    let mut p = pair();
    let id = p.a.sidr_resolve(p.now, &sidr_params(b""), &mut p.ta).unwrap();
    p.settle();
    let r = sidr_requests(&p)[0];
    accept(&mut p, r, 0x66);
    p.settle();
    let (_, rep) = p.sent_of('b', AttrId::SidrRep)[0];
    assert_eq!(p.count('a', |e| matches!(e, CmEvent::SidrResolved { .. })), 1);
    // the same REP again: the request is gone
    let src = path_a_to_b();
    assert_eq!(p.a.on_mad(p.now, &src, &rep, &mut p.ta), Err(Ignored::Stale));
    // a REP for an outstanding request but another service id, or another
    // request id, is not its answer
    p.set_drop(|from, _| from == 'a');
    let id2 = p.a.sidr_resolve(p.now, &sidr_params(b""), &mut p.ta).unwrap();
    assert_ne!(id, id2);
    let mut m = CmMad::decode(&rep).unwrap();
    let CmMsg::SidrRep(ref mut x) = m.msg else { unreachable!() };
    x.request_id = id2.0;
    x.service_id ^= 1;
    let mut b = [0u8; MAD_SIZE];
    m.encode(&mut b).unwrap();
    assert_eq!(p.a.on_mad(p.now, &src, &b, &mut p.ta), Err(Ignored::Stale));
    let CmMsg::SidrRep(ref mut x) = m.msg else { unreachable!() };
    x.service_id ^= 1;
    x.request_id = id2.0 ^ 0x8000_0000;
    m.encode(&mut b).unwrap();
    assert_eq!(p.a.on_mad(p.now, &src, &b, &mut p.ta), Err(Ignored::Stale));
    assert_eq!(p.a.state(id2), CmState::SidrReqSent);
    // the right one; a Q_Key of 0 becomes RDMA_UDP_QKEY (cma_set_qkey)
    let CmMsg::SidrRep(ref mut x) = m.msg else { unreachable!() };
    x.request_id = id2.0;
    x.qkey = 0;
    m.encode(&mut b).unwrap();
    let ev = p.a.on_mad(p.now, &src, &b, &mut p.ta).unwrap();
    assert!(
        matches!(ev, Some(CmEvent::SidrResolved { id, qpn: 0x66, qkey: UDP_QKEY, .. }) if id == id2)
    );
    // and B sent nothing for any of this
    assert_eq!(p.sent_of('b', AttrId::SidrRep).len(), 1);
    // a SIDR_REP naming an RC connection (to the same service id) is stale
    let mut cp = connect_params(b"");
    cp.port_space = PortSpace::Udp;
    cp.dst_port = UDADDY_PORT;
    let rc = p.a.connect(p.now, &cp, &mut p.ta).unwrap();
    let CmMsg::SidrRep(ref mut x) = m.msg else { unreachable!() };
    x.request_id = rc.0;
    m.encode(&mut b).unwrap();
    assert_eq!(p.a.on_mad(p.now, &src, &b, &mut p.ta), Err(Ignored::Stale));
    assert_eq!(p.a.state(rc), CmState::ReqSent);
}

#[test]
fn sidr_api_refuses_bad_input_with_typed_errors() {
    let mut p = pair();
    let mut s = sidr_params(&[0u8; 181]);
    assert_eq!(
        p.a.sidr_resolve(0, &s, &mut p.ta),
        Err(CmError::Mad(mad::MadError::PrivateData { len: 181, max: 180 }))
    );
    s.private_data = b"";
    s.port_space = PortSpace::Tcp;
    assert!(matches!(p.a.sidr_resolve(0, &s, &mut p.ta), Err(CmError::Invalid(_))));
    s.port_space = PortSpace::Udp;
    s.peer.peer_ip = IpAddr::V6([0xfe; 16]);
    assert!(matches!(p.a.sidr_resolve(0, &s, &mut p.ta), Err(CmError::Invalid(_))));
    assert!(p.sent().is_empty());
    // answers to no request, or with bad fields
    let a = SidrAcceptParams { qpn: 1, qkey: UDP_QKEY, private_data: b"" };
    assert_eq!(p.b.sidr_accept(0, ConnId(99), &a, &mut p.tb), Err(CmError::NotFound));
    let id = p.a.sidr_resolve(0, &sidr_params(b""), &mut p.ta).unwrap();
    p.settle();
    let r = sidr_requests(&p)[0];
    let big = SidrAcceptParams { qpn: 1 << 24, ..a };
    assert!(matches!(p.b.sidr_accept(0, r, &big, &mut p.tb), Err(CmError::Invalid(_))));
    let long = SidrAcceptParams { private_data: &[1; 137], ..a };
    assert!(matches!(p.b.sidr_accept(0, r, &long, &mut p.tb), Err(CmError::Mad(_))));
    // RC calls on SIDR slots are refused by state
    assert_eq!(p.b.reject(r, b"", &mut p.tb), Err(CmError::InvalidState(CmState::SidrReqRcvd)));
    assert_eq!(p.a.ready_to_use(id, &mut p.ta), Err(CmError::InvalidState(CmState::SidrReqSent)));
    // cancel drops an outstanding SIDR_REQ without a message
    let n = p.sent().len();
    p.a.cancel(id, &mut p.ta).unwrap();
    assert_eq!(p.sent().len(), n);
    assert_eq!(p.a.active_connections(), 0);
}

/// xorshift, for the garbage below.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn malformed_and_random_sidr_mads_never_panic_and_never_leak_slots() {
    let mut p = pair();
    let src = from_a();
    let udp = service_id(PortSpace::Udp, UDADDY_PORT);
    // wrong lengths
    let good = raw_sidr_req(1, udp, good_hdr());
    for n in [0, 24, 255, 257] {
        let mut v = good.to_vec();
        v.resize(n, 0);
        assert_eq!(
            p.b.on_mad(0, &src, &v, &mut p.tb),
            Err(Ignored::Malformed(mad::MadError::Length(n)))
        );
    }
    // a wrong method or class version on a SIDR attribute
    let mut b = good;
    b[3] = 0x81;
    assert!(matches!(p.b.on_mad(0, &src, &b, &mut p.tb), Err(Ignored::Malformed(_))));
    // random payloads under both SIDR attribute ids, to both sides, with the
    // listener's service id half the time
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut requests = 0;
    for i in 0..4000u32 {
        let mut b = [0u8; MAD_SIZE];
        for c in b.chunks_mut(8) {
            let r = rng.next().to_le_bytes();
            c.copy_from_slice(&r[..c.len()]);
        }
        b[..4].copy_from_slice(&[1, 7, 2, 3]);
        b[16..18].copy_from_slice(&[0, if i % 2 == 0 { 0x17 } else { 0x18 }]);
        if i % 4 == 0 {
            b[32..40].copy_from_slice(&udp.to_be_bytes());
            b[40..76].copy_from_slice(&good_hdr());
        }
        if let Ok(Some(CmEvent::SidrRequest { id, .. })) = p.b.on_mad(0, &src, &b, &mut p.tb) {
            requests += 1;
            p.b.sidr_reject(0, id, b"", &mut p.tb).unwrap();
        }
        // A has no request out and no UDP listener: nothing is an event
        let r = p.a.on_mad(0, &path_a_to_b(), &b, &mut p.ta);
        assert!(r.is_err(), "{r:?}");
    }
    assert!(requests > 0, "some random SIDR_REQs were valid");
    // every answered request lingers, then all slots come back
    p.now = 4096 * SIDR_LINGER_INTERVALS + 1;
    p.settle();
    assert_eq!(p.b.active_connections(), 0);
    assert_eq!(p.a.active_connections(), 0);
    // and the CM still works
    p.wire.borrow_mut().inbox_a.clear();
    p.wire.borrow_mut().inbox_b.clear();
    p.a.sidr_resolve(p.now, &sidr_params(b""), &mut p.ta).unwrap();
    p.settle();
    let r = *sidr_requests(&p).last().unwrap();
    accept(&mut p, r, 0x77);
    p.settle();
    assert_eq!(p.count('a', |e| matches!(e, CmEvent::SidrResolved { qpn: 0x77, .. })), 1);
}

#[test]
fn sidr_messages_roundtrip_with_their_field_positions() {
    let mut pd = [0u8; mad::pdata::SIDR_REP];
    pd[0] = 0xAA;
    pd[135] = 0x55;
    let mut info = [0u8; mad::pdata::SIDR_REP_INFO];
    info[71] = 0x33;
    let rep = SidrRep {
        request_id: 0x1122_3344,
        status: 4,
        info_length: 72,
        vendor_id: 0xA1B2C3,
        qpn: 0xABCDEF,
        service_id: 0x0000_0000_0111_1C06,
        qkey: 0x0123_4567,
        info,
        private_data: pd,
    };
    let m = CmMad::new(5, CmMsg::SidrRep(rep));
    let mut b = [0u8; MAD_SIZE];
    m.encode(&mut b).unwrap();
    assert_eq!(&b[24..28], &[0x11, 0x22, 0x33, 0x44]);
    assert_eq!((b[28], b[29]), (4, 72));
    assert_eq!(&b[30..32], &[0xA1, 0xB2], "vendor id high");
    assert_eq!(&b[32..35], &[0xAB, 0xCD, 0xEF]);
    assert_eq!(b[35], 0xC3, "vendor id low");
    assert_eq!(&b[44..48], &[0x01, 0x23, 0x45, 0x67]);
    assert_eq!(b[48 + 71], 0x33);
    assert_eq!((b[120], b[255]), (0xAA, 0x55));
    assert_eq!(CmMad::decode(&b).unwrap(), m);
    let mut bad = rep;
    bad.qpn = 1 << 24;
    assert!(CmMad::new(5, CmMsg::SidrRep(bad)).encode(&mut b).is_err());
    let mut bad = rep;
    bad.info_length = 73;
    assert!(CmMad::new(5, CmMsg::SidrRep(bad)).encode(&mut b).is_err());
    let req = raw_sidr_req(0xCAFE_F00D, 0x0111_1C06, good_hdr());
    let CmMsg::SidrReq(r) = CmMad::decode(&req).unwrap().msg else { panic!("not a SIDR_REQ") };
    assert_eq!((r.request_id, r.pkey, r.service_id), (0xCAFE_F00D, 0xFFFF, 0x0111_1C06));
    assert_eq!(&r.private_data[..36], &good_hdr());
}
