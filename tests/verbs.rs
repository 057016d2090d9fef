//! Two model devices on one fabric, one RC QP each: WRITE, READ and SEND
//! checked byte for byte, MRs of each PBL level, stale rkeys, flushes.

mod common;

use common::*;

#[test]
fn write_read_send_between_two_devices() {
    let _g = lock();
    let base = FakeHal::live_pages();
    let bar_a = ModelBar::standalone(Config::default());
    let bar_b = bar_a.add_peer(Config::default());
    {
        let da = probe_as(&bar_a, A, Profile::SMALL);
        let db = probe_as(&bar_b, B, Profile::SMALL);
        let (pa, pb) = (da.alloc_pd().unwrap(), db.alloc_pd().unwrap());
        let (mut ca, mut cb) = (da.create_cq(64).unwrap(), db.create_cq(64).unwrap());
        let mut qa = create_qp(&da, &pa, &ca, 32);
        let mut qb = create_qp(&db, &pb, &cb, 32);
        assert!(qa.cap().max_send_wr >= 32 && qa.cap().max_recv_sge >= 2);
        let (na, nb) = (qa.qp_num(), qb.qp_num());
        connect(&mut qa, A, B, nb).unwrap();
        connect(&mut qb, B, A, na).unwrap();
        assert_eq!(qa.state(), QpState::Rts);

        // A: source (level 0, contiguous), B: target (level 1: pages reversed).
        let src = buf(4);
        let dst = buf(4);
        let data = fill(&src, 7);
        let src_mr = reg(&da, &pa, src.paddr(), 4 * 4096, &pages_of(&src), false);
        assert_eq!(src_mr.pbl_level(), 0);
        let mut rev = pages_of(&dst);
        rev.reverse();
        let iova_b = 0x7000_0000u64;
        let dst_mr = reg(&db, &pb, iova_b, 4 * 4096, &rev, false);
        assert_eq!(dst_mr.pbl_level(), 1);
        assert_eq!(dst_mr.pble_entry(0), Some(rev[0]), "PBLE holds the page address");

        // RDMA WRITE of 6000 bytes starting 100 bytes into B's region.
        let sge = [Sge { addr: src.paddr(), length: 6000, lkey: src_mr.lkey() }];
        let wr = SendWr {
            wr_id: 1,
            opcode: WrOpcode::RdmaWrite { remote_addr: iova_b + 100, rkey: dst_mr.rkey() },
            flags: SendFlags::SIGNALED,
            sg_list: &sge,
        };
        qa.post_send(&[wr]).unwrap();
        let wc = poll_n(&mut ca, &mut [&mut qa], 1);
        assert_eq!(wc.len(), 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].status, wc[0].opcode),
            (1, WcStatus::Success, WcOpcode::RdmaWrite)
        );
        // IOVA page i lives in physical page 3 - i.
        let mut got = Vec::new();
        for off in 100..6100usize {
            let page = off / 4096;
            got.push(read(&dst, (3 - page) * 4096 + off % 4096, 1)[0]);
        }
        assert_eq!(got, data[..6000].to_vec(), "WRITE landed byte for byte through the PBL");

        // RDMA READ back 5000 bytes from B into A's second half.
        let back = buf(2);
        let back_mr = reg(&da, &pa, back.paddr(), 8192, &pages_of(&back), false);
        let sge = [Sge { addr: back.paddr(), length: 5000, lkey: back_mr.lkey() }];
        let wr = SendWr {
            wr_id: 2,
            opcode: WrOpcode::RdmaRead { remote_addr: iova_b + 100, rkey: dst_mr.rkey() },
            flags: SendFlags::SIGNALED,
            sg_list: &sge,
        };
        qa.post_send(&[wr]).unwrap();
        let wc = poll_n(&mut ca, &mut [&mut qa], 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].status, wc[0].opcode),
            (2, WcStatus::Success, WcOpcode::RdmaRead)
        );
        assert_eq!(read(&back, 0, 5000), data[..5000].to_vec(), "READ byte for byte");

        // SEND from A into a receive B posted (zero-based MR on B).
        let rbuf = buf(1);
        let rmr = reg(&db, &pb, 0, 4096, &pages_of(&rbuf), true);
        let rsge = [Sge { addr: 0, length: 4096, lkey: rmr.lkey() }];
        qb.post_recv(&[RecvWr { wr_id: 30, sg_list: &rsge }]).unwrap();
        let sge = [Sge { addr: src.paddr() + 8192, length: 777, lkey: src_mr.lkey() }];
        let wr =
            SendWr { wr_id: 3, opcode: WrOpcode::Send, flags: SendFlags::SIGNALED, sg_list: &sge };
        qa.post_send(&[wr]).unwrap();
        let wc = poll_n(&mut ca, &mut [&mut qa], 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (3, WcStatus::Success));
        let wc = poll_n(&mut cb, &mut [&mut qb], 1);
        assert_eq!(wc.len(), 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
            (30, WcStatus::Success, WcOpcode::Recv, 777)
        );
        assert_eq!(wc[0].qp_num, nb);
        assert_eq!(read(&rbuf, 0, 777), data[8192..8192 + 777].to_vec(), "SEND byte for byte");
    }
    assert_eq!(FakeHal::live_pages(), base, "everything freed");
}
