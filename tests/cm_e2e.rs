//! The CM driving real RC QPs: two model devices, a CM per device (MADs
//! over the in-memory QP1 stand-in of `tests/cm_common`; `tests/cm_qp1.rs`
//! runs the same over the driver's real QP1), the QPs moved INIT → RTR → RTS only with the
//! `ConnParams` the CM derived (`ConnParams::apply`), then SEND and WRITE
//! traffic on the model's wire, disconnect (QP to ERROR, DREQ/DREP) and
//! timewait; repeated over fresh QPs.

mod cm_common;
mod common;
mod e2e_common;

use std::cell::RefCell;
use std::rc::Rc;

use cm_common::{Port, Wire, cm_config, mad_path, nvme_connect};
use e2e_common::*;
use irdma::cm::rdma_cm::PortSpace;
use irdma::cm::{Cm, CmConfig, CmEvent, CmState, ConnId, ConnectParams};

fn cm_cfg(a: Addr, seed: u32) -> CmConfig {
    cm_config(a.mac, a.ip, 7, seed)
}

type TestCm = Cm<4, 1>;

/// The two ports of one in-memory wire and a CM behind each (id seeds
/// `seeds`), B's listening on the NVMe/RDMA port 4420 of its address.
fn cms_on_a_wire(seeds: (u32, u32)) -> ((Port, TestCm), (Port, TestCm)) {
    let wire = Rc::new(RefCell::new(Wire::default()));
    let ta = Port { me: 'a', mac: A.mac, wire: wire.clone() };
    let tb = Port { me: 'b', mac: B.mac, wire };
    let mut cmb = TestCm::new(cm_cfg(B, seeds.1));
    cmb.listen(PortSpace::Tcp, 4420, Some(IpAddr::V4(B.ip))).unwrap();
    ((ta, TestCm::new(cm_cfg(A, seeds.0))), (tb, cmb))
}

/// Polls both CMs at `now`, reacting like an RDMA-CM application whose QPs
/// are `a` (active) and `b` (passive); returns the events seen.
fn pump(
    now: u64,
    (cma, ta, a): (&mut TestCm, &mut Port, &mut Side<'_>),
    (cmb, tb, b): (&mut TestCm, &mut Port, &mut Side<'_>),
    psn_b: u32,
) -> Vec<(char, CmEvent)> {
    pump_accepting(now, (cma, ta, a), (cmb, tb, b), psn_b, (8, 8))
}

/// [`pump`] with the passive application accepting with `(responder
/// resources, initiator depth)` = `accept`.
fn pump_accepting(
    now: u64,
    (cma, ta, a): (&mut TestCm, &mut Port, &mut Side<'_>),
    (cmb, tb, b): (&mut TestCm, &mut Port, &mut Side<'_>),
    psn_b: u32,
    accept: (u8, u8),
) -> Vec<(char, CmEvent)> {
    pump_cms(now, (cma, ta, &mut a.qp), (cmb, tb, &mut b.qp), psn_b, Some(accept))
}

#[test]
fn cm_connects_real_qps_that_then_carry_send_and_write() {
    let _g = lock();
    // a request with another PSN than the responder expects is NAKed and
    // never completes: wrongly crossed PSNs fail the traffic below
    let (ba, _bb, da, db) = two_strict_devices(Profile::SMALL);
    let frames = ba.fabric().capture();
    let ((mut ta, mut cma), (mut tb, mut cmb)) = cms_on_a_wire((0x1000, 0x2000));
    let mut rng = Rng::new(18);
    let mut now = 0u64;
    for round in 0..5u32 {
        let mut a = Side::new(&da, A, 16, cap(8));
        let mut b = Side::new(&db, B, 16, cap(8));
        // random 24-bit PSNs: a wrong crossing would make the model drop
        // every frame as out of sequence
        let (psn_a, psn_b) = (rng.range(0, 0xFF_FFFF) as u32, rng.range(0, 0xFF_FFFF) as u32);
        let path = mad_path(A.ip, B.ip, B.mac);
        let cp = nvme_connect(path, a.qp.qp_num(), psn_a, 50000 + round as u16);
        let ida: ConnId = cma.connect(now, &cp, &mut ta).unwrap();
        let ev = pump(now, (&mut cma, &mut ta, &mut a), (&mut cmb, &mut tb, &mut b), psn_b);
        let idb = request_id(&ev).expect("connect request");
        assert_eq!(cma.state(ida), CmState::Established, "round {round}");
        assert_eq!(cmb.state(idb), CmState::Established, "round {round}");
        assert_eq!(a.qp.state(), QpState::Rts);
        assert_eq!(b.qp.state(), QpState::Rts);

        // SEND A → B
        let (ra, rb) = send_a_to_b(&mut a, &mut b, &mut rng);
        // on the wire: A's SEND carries B's advertised starting PSN to B's QPN
        let send = frames
            .frames()
            .iter()
            .rev()
            .filter_map(|f| mock_bar::wire::parse(f).ok())
            .find(|p| p.pkt.opcode == 0x04)
            .expect("a SEND ONLY frame");
        assert_eq!((send.pkt.psn, send.pkt.dest_qp), (psn_b, b.qp.qp_num()), "round {round}");
        // WRITE B → A (the other direction's PSNs)
        write_b_to_a(&mut b, (&ra, &rb), &mut rng);

        // disconnect from A: QP to ERROR first, then DREQ
        a.qp.modify(&QpAttr::new(QpState::Error)).unwrap();
        cma.disconnect(now, ida, &mut ta).unwrap();
        pump(now, (&mut cma, &mut ta, &mut a), (&mut cmb, &mut tb, &mut b), psn_b);
        assert_eq!(cma.state(ida), CmState::Timewait);
        assert_eq!(cmb.state(idb), CmState::Timewait);
        now += 2048;
        let ev = pump(now, (&mut cma, &mut ta, &mut a), (&mut cmb, &mut tb, &mut b), psn_b);
        assert_eq!(ev.iter().filter(|(_, e)| matches!(e, CmEvent::TimewaitExit { .. })).count(), 2);
        assert_eq!(cma.active_connections() + cmb.active_connections(), 0);
        drop((ra, rb));
        now += 1;
    }
    assert_eq!(cma.stats().retransmits + cmb.stats().retransmits, 0);
}

/// What one negotiation left: each side's `ConnParams` (ORD, IRD) and the
/// model's view of each QP's context (ORDSIZE, IRDSIZE as encoded: IRD
/// 0–2 → 0, 3–8 → 1, spec control-path §7.2 / §12 item 6).
#[derive(Debug, PartialEq, Eq)]
struct Negotiated {
    a: (u8, u8),
    b: (u8, u8),
    a_ctx: (u8, u8),
    b_ctx: (u8, u8),
}

/// A connects offering `offer` = (responder resources, initiator depth), B
/// accepts with `accept`; both QPs reach RTS with what the CM derived.
fn negotiate(offer: (u8, u8), accept: (u8, u8)) -> Negotiated {
    let _g = lock();
    let (ba, bb, da, db) = two_devices(Profile::SMALL);
    let ((mut ta, mut cma), (mut tb, mut cmb)) = cms_on_a_wire((0x3000, 0x4000));
    let mut a = Side::new(&da, A, 16, cap(8));
    let mut b = Side::new(&db, B, 16, cap(8));
    let cp = ConnectParams {
        responder_resources: offer.0,
        initiator_depth: offer.1,
        ..nvme_connect(mad_path(A.ip, B.ip, B.mac), a.qp.qp_num(), 0x100, 50000)
    };
    let ida = cma.connect(0, &cp, &mut ta).unwrap();
    let ev =
        pump_accepting(0, (&mut cma, &mut ta, &mut a), (&mut cmb, &mut tb, &mut b), 0x200, accept);
    let idb = request_id(&ev).expect("connect request");
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Rts, QpState::Rts));
    let (pa, pb) = (cma.params(ida).unwrap(), cmb.params(idb).unwrap());
    let ctx = |bar: &ModelBar, qpn: u32| {
        bar.with_device(|d| d.qp(qpn).map(|q| (q.ord, q.ird_enc))).expect("the model has the QP")
    };
    Negotiated {
        a: (pa.max_rd_atomic, pa.max_dest_rd_atomic),
        b: (pb.max_rd_atomic, pb.max_dest_rd_atomic),
        a_ctx: ctx(&ba, a.qp.qp_num()),
        b_ctx: ctx(&bb, b.qp.qp_num()),
    }
}

/// The active side offers fewer than the passive side has (responder
/// resources 3, initiator depth 2 against 8 / 8): the passive side caps its
/// ORD to the offered responder resources and its IRD to the offered
/// initiator depth, in its QP context and in the REP, and the active side
/// keeps what it offered.
#[test]
fn passive_side_caps_ord_and_ird_to_the_offer() {
    let n = negotiate((3, 2), (8, 8));
    assert_eq!(
        n,
        Negotiated {
            // (ORD, IRD)
            a: (2, 3),
            b: (3, 2),
            a_ctx: (2, 1),
            b_ctx: (3, 0),
        }
    );
}

/// The passive side accepts with fewer than the active side offered
/// (responder resources 2, initiator depth 1 against 8 / 8): the active
/// side caps its ORD to the REP's responder resources and its IRD to the
/// REP's initiator depth.
#[test]
fn active_side_caps_ord_and_ird_to_the_rep() {
    let n = negotiate((8, 8), (2, 1));
    assert_eq!(n, Negotiated { a: (2, 1), b: (1, 2), a_ctx: (2, 0), b_ctx: (1, 0) });
}
