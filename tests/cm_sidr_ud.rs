//! SIDR over the driver's real QP1 on two model devices, then UD traffic
//! with what it resolved — `udaddy`'s exchange, driver ↔ driver: B listens
//! on RDMA_PS_UDP port 7174 with a UD QP of Q_Key RDMA_UDP_QKEY; A resolves
//! the service (SIDR_REQ → SIDR_REP carrying B's QPN and Q_Key), sends 10
//! datagrams of 100 bytes with that QPN and Q_Key, and B answers each to the
//! source QPN its completions report.

mod cm_common;
mod common;
mod e2e_common;

use cm_common::{cm_config, mad_path};
use e2e_common::*;
use irdma::cm::mad::{AttrId, CmMad, CmMsg};
use irdma::cm::rdma_cm::{PortSpace, UDP_QKEY};
use irdma::cm::{
    Cm, CmConfig, CmEvent, MadAddr, QP1_RECV_BYTES, Qp1Transport, SidrAcceptParams, SidrParams,
};
use irdma::verbs::{Ah, AhAttr, GRH_BYTES, GSI_QKEY};

type T<'d> = Qp1Transport<'d, FakeHal, ModelBar>;
type TAh<'d> = Ah<'d, FakeHal, ModelBar>;

const PORT: u16 = 7174;
/// udaddy's defaults (`message_count` 10, `message_size` 100).
const COUNT: u64 = 10;
const SIZE: u32 = 100;

fn cm_cfg(a: Addr, seed: u32) -> CmConfig {
    cm_config(a.mac, a.ip, 3, seed)
}

/// A UD QP in RTS with the Q_Key of the UDP port space (as rdma_create_qp
/// on a UD id does).
fn ud(dev: &Dev) -> UdEnd<'_> {
    UdEnd::new(dev, false, cap(16), (UDP_QKEY, 0))
}

impl<'d> UdEnd<'d> {
    /// The AH of a MAD path (the SIDR exchange's addresses and MAC).
    fn ah(&self, to: &MadAddr) -> TAh<'d> {
        let mut a = AhAttr::new(to.peer_ip, to.local_ip);
        a.dest_mac = Some(to.peer_mac);
        self.pd.create_ah(&a).expect("ah")
    }

    fn region(&self, seed: u8) -> Region<'d> {
        let b = buf(4);
        let _ = fill(&b, seed);
        let mr = reg(self.dev, &self.pd, b.paddr(), 4 * 4096, &pages_of(&b), false);
        Region { mr, buf: b }
    }

    fn recv(&mut self, r: &Region<'_>, slot: u64) {
        let off = slot * 256;
        let sge = [Sge { addr: r.addr() + off, length: GRH_BYTES + SIZE, lkey: r.key() }];
        self.qp.post_recv(&[RecvWr { wr_id: 100 + slot, sg_list: &sge }]).expect("post_recv");
    }

    fn send(&mut self, r: &Region<'_>, slot: u64, ah: &TAh<'_>, qpn: u32, qkey: u32) {
        let sge = [Sge { addr: r.addr() + slot * 256, length: SIZE, lkey: r.key() }];
        let wr = signaled(
            slot,
            WrOpcode::UdSend { ah: ah.id(), remote_qpn: qpn, remote_qkey: qkey, imm: None },
            &sge,
        );
        self.qp.post_send(&[wr]).expect("post_send");
    }
}

fn qp1(dev: &Dev) -> T<'_> {
    let b = buf((16 * QP1_RECV_BYTES + 8 * 256).div_ceil(4096));
    Qp1Transport::new(dev, b, 16, 8).expect("QP1 transport")
}

#[test]
fn sidr_over_qp1_then_udaddy_traffic_both_ways() {
    leak_checked(|| {
        let (ba, bb, da, db) = two_devices(Profile::SMALL);
        let frames = ba.fabric().capture();
        let (mut ta, mut tb) = (qp1(&da), qp1(&db));
        let mut ca: Cm<4, 1> = Cm::new(cm_cfg(A, 0x0A00));
        let mut cb: Cm<4, 1> = Cm::new(cm_cfg(B, 0x0B00));
        cb.listen(PortSpace::Udp, PORT, None).unwrap();
        let mut ua = ud(&da);
        let mut ub = ud(&db);
        let path = mad_path(A.ip, B.ip, B.mac);
        let p = SidrParams {
            peer: path,
            port_space: PortSpace::Udp,
            dst_port: PORT,
            src_port: 40000,
            private_data: b"",
        };
        let id = ca.sidr_resolve(0, &p, &mut ta).unwrap();
        let mut resolved = None;
        let mut peer_of_b = None;
        for _ in 0..1000 {
            while let Some(e) = cb.poll(0, &mut tb) {
                if let CmEvent::SidrRequest { id, info } = e {
                    assert_eq!(info.peer.peer_mac, A.mac);
                    peer_of_b = Some(info.peer);
                    let acc =
                        SidrAcceptParams { qpn: ub.qp.qp_num(), qkey: UDP_QKEY, private_data: b"" };
                    cb.sidr_accept(0, id, &acc, &mut tb).unwrap();
                }
            }
            if let Some(CmEvent::SidrResolved { id: rid, qpn, qkey, .. }) = ca.poll(0, &mut ta) {
                assert_eq!(rid, id);
                resolved = Some((qpn, qkey));
                break;
            }
        }
        let (qpn, qkey) = resolved.expect("SIDR resolved");
        assert_eq!((qpn, qkey), (ub.qp.qp_num(), UDP_QKEY));
        let peer_of_b = peer_of_b.expect("B saw the request");

        // A → B: COUNT datagrams; B answers each to the source QPN
        let (sa, ra) = (ua.region(1), ua.region(0));
        let (sb, rb) = (ub.region(2), ub.region(0));
        let ah_ab = ua.ah(&path);
        let ah_ba = ub.ah(&peer_of_b);
        for i in 0..COUNT {
            ub.recv(&rb, i);
            ua.recv(&ra, i);
        }
        for i in 0..COUNT {
            ua.send(&sa, i, &ah_ab, qpn, qkey);
        }
        let wc = poll_n(&mut ub.cq, COUNT as usize);
        assert_eq!(wc.len(), COUNT as usize, "{wc:?}");
        for (i, w) in wc.iter().enumerate() {
            assert_eq!((w.status, w.byte_len), (WcStatus::Success, GRH_BYTES + SIZE), "{w:?}");
            let ud = w.ud.expect("UD fields");
            assert_eq!(ud.src_qp, ua.qp.qp_num(), "the source QPN udaddy answers to");
            let slot = w.wr_id - 100;
            let got = read(&rb.buf, (slot * 256 + u64::from(GRH_BYTES)) as usize, SIZE as usize);
            let want = read(&sa.buf, (slot * 256) as usize, SIZE as usize);
            assert_eq!(got, want, "datagram {i}");
            ub.send(&sb, slot, &ah_ba, ud.src_qp, UDP_QKEY);
        }
        let wc = poll_n(&mut ua.cq, 2 * COUNT as usize);
        let recvs = wc.iter().filter(|w| w.opcode == WcOpcode::Recv).count();
        let sends = wc.iter().filter(|w| w.opcode == WcOpcode::Send).count();
        assert_eq!((recvs, sends), (COUNT as usize, COUNT as usize), "{wc:?}");
        assert!(wc.iter().all(|w| w.status == WcStatus::Success));
        assert_eq!(poll_n(&mut ub.cq, COUNT as usize).len(), COUNT as usize, "B's sends");

        // the wire: one SIDR_REQ from A, one SIDR_REP from B, on QP1
        let cm: Vec<([u8; 6], AttrId)> = frames
            .frames()
            .iter()
            .filter_map(|f| mock_bar::wire::parse(f).ok())
            .filter(|p| p.pkt.dest_qp == 1)
            .map(|p| {
                assert_eq!(p.pkt.deth, Some((GSI_QKEY, 1)));
                let m = CmMad::decode(&p.pkt.payload).expect("a CM MAD");
                if let CmMsg::SidrRep(r) = m.msg {
                    assert_eq!((r.qpn, r.qkey, r.status), (qpn, UDP_QKEY, 0));
                }
                (p.src_mac, m.msg.attr_id())
            })
            .collect();
        assert_eq!(cm, [(A.mac, AttrId::SidrReq), (B.mac, AttrId::SidrRep)]);
        let ud_frames = frames
            .frames()
            .iter()
            .filter_map(|f| mock_bar::wire::parse(f).ok())
            .filter(|p| p.pkt.deth.is_some_and(|(k, _)| k == UDP_QKEY))
            .count();
        assert_eq!(ud_frames, 2 * COUNT as usize, "every datagram carried Q_Key 0x01234567");
        drop((ah_ab, ah_ba, sa, ra, sb, rb, ua, ub));
        ta.destroy().unwrap();
        tb.destroy().unwrap();
        drop((ta, tb));
        ba.finish();
        bb.finish();
    });
}
