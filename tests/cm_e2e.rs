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

use cm_common::{Port, Wire};
use e2e_common::*;
use irdma::cm::rdma_cm::{PortSpace, guid_from_mac};
use irdma::cm::{
    AcceptParams, Cm, CmConfig, CmEvent, CmState, CmTiming, ConnId, ConnectParams, MadAddr,
};

fn cm_cfg(a: Addr, seed: u32) -> CmConfig {
    CmConfig {
        ca_guid: guid_from_mac(a.mac),
        hi_tid: 7,
        id_seed: seed,
        local_ips: [Some(IpAddr::V4(a.ip)), None, None, None],
        ca_ack_delay: 0,
        timing: CmTiming::default(),
    }
}

type TestCm = Cm<4, 1>;

/// Polls both CMs at `now`, reacting like an RDMA-CM application whose QPs
/// are `a` (active) and `b` (passive); returns the events seen.
fn pump(
    now: u64,
    (cma, ta, a): (&mut TestCm, &mut Port, &mut Side<'_>),
    (cmb, tb, b): (&mut TestCm, &mut Port, &mut Side<'_>),
    psn_b: u32,
) -> Vec<(char, CmEvent)> {
    let mut seen = Vec::new();
    loop {
        let mut any = false;
        while let Some(e) = cmb.poll(now, tb) {
            any = true;
            seen.push(('b', e));
            match e {
                CmEvent::ConnectRequest { id, info } => {
                    assert_eq!(info.remote_qpn, a.qp.qp_num());
                    let acc = AcceptParams {
                        qpn: b.qp.qp_num(),
                        starting_psn: psn_b,
                        responder_resources: 8,
                        initiator_depth: 8,
                        rnr_retry_count: 7,
                        srq: false,
                        private_data: b"ok",
                    };
                    // the QP reaches RTS before the REP (cma_accept_ib)
                    let p = cmb.accept_params(id, &acc).unwrap();
                    p.apply(&mut b.qp).expect("passive QP to RTS");
                    cmb.accept(now, id, &acc, tb).unwrap();
                }
                CmEvent::Disconnected { id, timed_out: false } => {
                    b.qp.modify(&QpAttr::new(QpState::Error)).unwrap();
                    cmb.disconnect(now, id, tb).unwrap();
                }
                _ => {}
            }
        }
        while let Some(e) = cma.poll(now, ta) {
            any = true;
            seen.push(('a', e));
            if let CmEvent::Connected { id, params, private_data } = e {
                assert_eq!(&private_data[..2], b"ok");
                params.apply(&mut a.qp).expect("active QP to RTS");
                cma.ready_to_use(id, ta).unwrap();
            }
        }
        if !any {
            return seen;
        }
    }
}

#[test]
fn cm_connects_real_qps_that_then_carry_send_and_write() {
    let _g = lock();
    let (ba, bb, da, db) = two_devices(Profile::SMALL);
    // a request with another PSN than the responder expects is NAKed and
    // never completes: wrongly crossed PSNs fail the traffic below
    for bar in [&ba, &bb] {
        bar.with_device(|d| d.set_strict_psn(true));
    }
    let frames = ba.fabric().capture();
    let wire = Rc::new(RefCell::new(Wire::default()));
    let mut ta = Port { me: 'a', mac: A.mac, wire: wire.clone() };
    let mut tb = Port { me: 'b', mac: B.mac, wire };
    let mut cma = TestCm::new(cm_cfg(A, 0x1000));
    let mut cmb = TestCm::new(cm_cfg(B, 0x2000));
    cmb.listen(PortSpace::Tcp, 4420, Some(IpAddr::V4(B.ip))).unwrap();
    let mut rng = Rng::new(18);
    let mut now = 0u64;
    for round in 0..5u32 {
        let mut a = Side::new(&da, A, 16, cap(8));
        let mut b = Side::new(&db, B, 16, cap(8));
        // random 24-bit PSNs: a wrong crossing would make the model drop
        // every frame as out of sequence
        let (psn_a, psn_b) = (rng.range(0, 0xFF_FFFF) as u32, rng.range(0, 0xFF_FFFF) as u32);
        let cp = ConnectParams {
            peer: MadAddr {
                peer_ip: IpAddr::V4(B.ip),
                local_ip: IpAddr::V4(A.ip),
                peer_mac: B.mac,
                vlan: None,
                hop_limit: 64,
                traffic_class: 0,
            },
            port_space: PortSpace::Tcp,
            dst_port: 4420,
            src_port: 50000 + round as u16,
            qpn: a.qp.qp_num(),
            starting_psn: psn_a,
            responder_resources: 8,
            initiator_depth: 8,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: 1024,
            srq: false,
            private_data: b"nvme",
        };
        let ida: ConnId = cma.connect(now, &cp, &mut ta).unwrap();
        let ev = pump(now, (&mut cma, &mut ta, &mut a), (&mut cmb, &mut tb, &mut b), psn_b);
        let idb = ev
            .iter()
            .find_map(|(_, e)| match e {
                CmEvent::ConnectRequest { id, .. } => Some(*id),
                _ => None,
            })
            .expect("connect request");
        assert_eq!(cma.state(ida), CmState::Established, "round {round}");
        assert_eq!(cmb.state(idb), CmState::Established, "round {round}");
        assert_eq!(a.qp.state(), QpState::Rts);
        assert_eq!(b.qp.state(), QpState::Rts);

        // SEND A → B
        let ra = a.region(1, 1);
        let rb = b.region(1, 2);
        let msg = rng.bytes(300);
        ra.put(0, &msg);
        b.qp.post_recv(&[RecvWr { wr_id: 10, sg_list: &[rb.sge(0, 4096)] }]).unwrap();
        a.qp.post_send(&[signaled(1, WrOpcode::Send, &[ra.sge(0, 300)])]).unwrap();
        let wa = a.one();
        let wb = b.one();
        assert_eq!((wa.status, wb.status), (WcStatus::Success, WcStatus::Success), "round {round}");
        assert_eq!(rb.bytes(0, 300), msg);
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
        let data = rng.bytes(2000);
        rb.put(1024, &data);
        b.qp.post_send(&[signaled(2, write_op(ra.addr() + 512, ra.key()), &[rb.sge(1024, 2000)])])
            .unwrap();
        assert_eq!(b.one().status, WcStatus::Success);
        assert_eq!(ra.bytes(512, 2000), data);

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
