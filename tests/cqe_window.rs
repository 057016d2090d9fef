//! Issue #28 item 2, through the verbs: the device writes an SQ CQE whose
//! WQE index lies at an edge of the outstanding window (the model's
//! `FaultPlan::stray_sq_cqe`, a stray copy of a real CQE with its index
//! moved), lap after lap of the SQ ring, and a caller that only calls
//! `Cq::poll` on a split `Qp` (posting through the `Qp`, retiring through
//! the CQ) sees exactly what the index means: an index outside the window
//! gives nothing (the CQE is dropped, the poll path's `NoQp`) and every
//! real completion still arrives once; an index inside it completes the
//! WQE it names.

mod common;
mod e2e_common;

use e2e_common::*;

#[test]
fn stray_sq_cqes_at_the_window_edges_through_cq_poll() {
    leak_checked(|| {
        let (bar_a, _bar_b, da, db) = two_devices(Profile::SMALL);
        let cap = qp_cap(16, 4, 1, 1);
        let (mut a, b) = linked(&da, &db, 64, cap);
        let src = a.region(1, 5);
        let dst = b.region(1, 0);
        let qpn = a.qp.qp_num();
        // The ring size as the device has it (QP context).
        let size = bar_a.with_device(|d| d.qp(qpn).map(|q| q.sq_quanta)).expect("QP in the model");
        let sg = [src.sge(0, 64)];
        let (mut id, mut quanta, mut round) = (0u64, 0u32, 0u64);
        while quanta < 3 * size + size / 2 {
            // 2..=8 one-quantum WRITEs, the last signaled: the device
            // writes one CQE, naming the last (the window's last WQE).
            let k = 2 + (round * 3) % 7;
            let wrs: Vec<SendWr<'_>> = (0..k)
                .map(|i| SendWr {
                    wr_id: id + i,
                    opcode: write_op(dst.addr() + 64 * i, dst.key()),
                    flags: if i + 1 == k { SendFlags::SIGNALED } else { SendFlags::NONE },
                    sg_list: &sg,
                })
                .collect();
            let (first, last) = (id, id + k - 1);
            let k = k as i64;
            // (stray index relative to the real CQE's, what the caller sees)
            let (delta, want, what) = match round % 5 {
                0 => (1, vec![last], "at the head (the first free slot)"),
                1 => (2, vec![last], "just above the head"),
                2 => (-k, vec![last], "just below the tail"),
                3 => (0, vec![last], "at the last outstanding WQE (the real CQE is then stale)"),
                _ => (1 - k, vec![first, last], "at the tail (its unsignaled WR completes)"),
            };
            bar_a.with_device(|d| d.faults().stray_sq_cqe = Some(delta));
            a.qp.post_send(&wrs).unwrap();
            let wc = a.poll(want.len() + 1);
            let got: Vec<(u64, WcStatus)> = wc.iter().map(|c| (c.wr_id, c.status)).collect();
            let want: Vec<(u64, WcStatus)> = want.iter().map(|&w| (w, WcStatus::Success)).collect();
            assert_eq!(got, want, "round {round}: stray CQE {what}");
            assert!(wc.iter().all(|c| c.opcode == WcOpcode::RdmaWrite && c.qp_num == qpn));
            assert_eq!(
                bar_a.with_device(|d| d.faults().stray_sq_cqe),
                None,
                "the stray was written"
            );
            id += k as u64;
            quanta += k as u32;
            round += 1;
        }
        assert!(round >= 10, "every edge twice or more");
        a.nothing();
        assert_eq!(a.qp.state(), QpState::Rts, "the QP kept working");
        drop((src, dst));
    });
}
