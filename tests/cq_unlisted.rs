//! A CQ shared by a plain QP and a shared QP: `Cq::poll` resolves plain
//! QPs only (through the device's table), so it stops at the shared QP's
//! completion and keeps it (never consumed and lost), naming that QP;
//! `Cq::poll_shared` with the shared QP takes it (and stops at the plain
//! QP's in turn); a destroyed QP's leftover completion is dropped instead
//! of blocking the CQ.

mod common;
mod e2e_common;

use e2e_common::*;

#[test]
fn unlisted_live_qp_keeps_its_completions_destroyed_qp_does_not_block() {
    leak_checked(|| {
        let (_bar_a, _bar_b, da, db) = two_devices_with(Config::default(), Profile::SMALL);
        let ((pa, mut ca), (pb, cb)) = pd_cq_pairs(&da, 64, &db, 64);
        let mut qa1 = create_qp(&da, &pa, &ca, 16);
        let cap = qp_cap(16, 16, 1, 1);
        let mut qa2 = shared_qp(&da, &pa, &ca, cap);
        let mut qb1 = create_qp(&db, &pb, &cb, 16);
        let mut qb2 = create_qp(&db, &pb, &cb, 16);
        let (na1, na2, nb1, nb2) = (qa1.qp_num(), qa2.qp_num(), qb1.qp_num(), qb2.qp_num());
        connect(&mut qa1, A, B, nb1).unwrap();
        connect_shared(&mut qa2, A, B, nb2);
        connect(&mut qb1, B, A, na1).unwrap();
        connect(&mut qb2, B, A, na2).unwrap();

        let (src, dst) = (region_on(&da, &pa, 1), region_on(&db, &pb, 1));
        let sge = [src.sge(0, 64)];
        let write = |wr_id: u64| signaled(wr_id, write_op(dst.addr(), dst.key()), &sge);
        qa1.post_send(&[write(1)]).unwrap();
        qa2.post_send(&[write(2)]).unwrap();
        qa1.post_send(&[write(3)]).unwrap();

        // `poll`: qa1's first completion, then a stop at the shared qa2's.
        let mut wc = [empty_wc(); 8];
        let n = ca.poll(&mut wc);
        assert_eq!(n, 1);
        assert_eq!((wc[0].wr_id, wc[0].qp_num), (1, na1));
        assert_eq!(ca.unlisted_qp(), Some(na2), "the CQ names the QP it stopped at");
        // Polling again the same way loses nothing and returns nothing.
        assert_eq!(ca.poll(&mut wc), 0);
        assert_eq!(ca.unlisted_qp(), Some(na2));
        // `poll_shared` with qa2: its completion, then a stop at qa1's.
        let n = ca.poll_shared([&qa2], &mut wc).unwrap();
        assert_eq!(n, 1);
        assert_eq!((wc[0].wr_id, wc[0].qp_num, wc[0].status), (2, na2, WcStatus::Success));
        assert_eq!(ca.unlisted_qp(), Some(na1));
        let n = ca.poll(&mut wc);
        assert_eq!(n, 1);
        assert_eq!((wc[0].wr_id, wc[0].qp_num), (3, na1));
        assert_eq!(ca.unlisted_qp(), None);

        // A completion of a QP that is then destroyed is dropped, not held.
        qa2.post_send(&[write(4)]).unwrap();
        qa2.destroy().unwrap();
        qa1.post_send(&[write(5)]).unwrap();
        let n = ca.poll(&mut wc);
        assert_eq!(ca.unlisted_qp(), None);
        assert_eq!((n, wc[0].wr_id), (1, 5), "qa2's leftover CQE did not block qa1");
        drop(qa2);
        for q in [&mut qa1, &mut qb1, &mut qb2] {
            q.destroy().unwrap();
        }
    });
}
