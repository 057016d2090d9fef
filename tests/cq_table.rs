//! `Cq::poll(&mut wc)` like `ib_poll_cq`: plain QPs are found through the
//! device's table (`verbs::table`), never listed. Many QPs on one CQ (with
//! separate send and receive CQs on the peer), every completion exactly
//! once; a QP destroyed while its CQEs are still in the CQ; flushes under
//! a concurrent poster; posting on one thread while another polls.

mod common;
mod e2e_common;

use e2e_common::*;
use irdma::uk::SqError;
use irdma::verbs::PostErrorKind;
use std::sync::atomic::{AtomicBool, Ordering};

// A QP and a CQ may each move to their own thread.
const _: () = {
    const fn send<T: Send>() {}
    send::<TQp<'static>>();
    send::<TCq<'static>>();
};

const QPS: usize = 8;

/// Eight plain QPs on A's one CQ, each connected to its own QP on B (B's
/// QPs send to one CQ and receive on another). A's QPs post RDMA WRITEs and
/// receive B's SENDs; `poll(&mut wc)` with no QP list sees each completion
/// exactly once, on both devices.
#[test]
fn many_plain_qps_on_one_cq_polled_without_listing_them() {
    const WRITES: u64 = 6;
    const SENDS: u64 = 3;
    with_two_devices(|_, _, da, db| {
        let ((pa, mut cq), (pb, mut scq)) = pd_cq_pairs(da, 256, db, 64);
        let mut rcq = db.create_cq(64).expect("recv cq b");
        let mut qa: Vec<TQp<'_>> = (0..QPS).map(|_| create_qp(da, &pa, &cq, 16)).collect();
        let mut qb: Vec<TQp<'_>> = (0..QPS)
            .map(|_| {
                let cap = qp_cap(16, 16, 1, 1);
                let mut attr = QpInitAttr { send_cq: &scq, recv_cq: &rcq, cap };
                db.create_qp(&pb, &mut attr).expect("qp b")
            })
            .collect();
        for (a, b) in qa.iter_mut().zip(qb.iter_mut()) {
            connect_both(a, A, b, B);
        }
        let f = FanIn::new(da, &pa, db, &pb, QPS * SENDS as usize);
        for (i, a) in qa.iter_mut().enumerate() {
            a.post_recv(&fan_in_recvs(&f.recv_sg, i, SENDS)).expect("post_recv");
        }
        let post = |a: &mut TQp<'_>, w: &[SendWr<'_>]| a.post_send(w).expect("post_send");
        post_fan_in(&f, qa.iter_mut(), post, &mut qb, (WRITES, SENDS));
        let qpns: Vec<u32> = qa.iter().map(|a| a.qp_num()).collect();
        check_fan_in(|wc| cq.poll(wc), &qpns, (WRITES, SENDS));
        assert_eq!(cq.unlisted_qp(), None);
        // B: sends on its send CQ only, nothing on the receive CQ.
        let gs = poll_until_with(|wc| scq.poll(wc), QPS * SENDS as usize + 1, 20);
        assert_eq!(gs.len(), QPS * SENDS as usize);
        let m = once(&gs);
        for b in &qb {
            for k in 0..SENDS {
                assert_eq!(m.get(&(b.qp_num(), 500 + k, "Send".into())), Some(&1));
            }
        }
        assert_eq!(rcq.poll(&mut [empty_wc(); 4]), 0);
        drop((qa, qb, f));
    });
}

/// A QP destroyed while its completions are still in the CQ: they are
/// dropped (never delivered, never attributed to another QP — not even to
/// a new QP with the same number) and do not block the other QP's; its
/// memory goes with it, nothing leaks.
#[test]
fn destroyed_qp_with_cqes_in_the_cq() {
    with_two_devices(|_, _, da, db| {
        let ((pa, mut cq), (pb, cb)) = pd_cq_pairs(da, 64, db, 64);
        let (ends_a, ends_b) = ((da, &pa, &cq), (db, &pb, &cb));
        let (mut q1, b1) = rc_peer(ends_a, ends_b);
        let (mut q2, b2) = rc_peer(ends_a, ends_b);
        let src = region_on(da, &pa, 1);
        let dst = region_on(db, &pb, 1);
        let sg = [src.sge(0, 16)];
        let wr = |k: u64| signaled(k, write_op(dst.addr(), dst.key()), &sg);
        q1.post_send(&[wr(1), wr(2), wr(3)]).expect("post");
        q2.post_send(&[wr(11)]).expect("post");
        q1.post_send(&[wr(4)]).expect("post");
        // One of q1's completions is taken; three more stay in the ring.
        let mut wc = [empty_wc(); 1];
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!((wc[0].qp_num, wc[0].wr_id), (q1.qp_num(), 1));
        let n1 = q1.qp_num();
        q1.destroy().expect("destroy");
        drop(q1);
        // A new QP on the same CQ with q1's very number (ids rotate: create
        // and destroy until it comes round), with WRs outstanding at the
        // indexes q1's leftover CQEs name: those are still not its own.
        let mut q3 = None;
        for _ in 0..600 {
            let q = create_qp(da, &pa, &cq, 16);
            if q.qp_num() == n1 {
                q3 = Some(q);
                break;
            }
        }
        let mut q3 = q3.expect("QP number reused");
        let mut b3 = create_qp(db, &pb, &cb, 16);
        connect_both(&mut q3, A, &mut b3, B);
        q3.post_send(&[wr(21), wr(22), wr(23), wr(24)]).expect("post");
        let got = poll_until_with(|wc| cq.poll(wc), 6, 10);
        let ids: Vec<(u32, u64)> = got.iter().map(|c| (c.qp_num, c.wr_id)).collect();
        let want = [(q2.qp_num(), 11), (n1, 21), (n1, 22), (n1, 23), (n1, 24)];
        assert_eq!(ids, want, "q1's leftovers dropped, not given to its successor");
        assert!(got.iter().all(|c| c.status == WcStatus::Success), "{got:?}");
        assert_eq!(cq.unlisted_qp(), None);
        drop((q2, q3, b1, b2, b3, src, dst));
    });
}

/// A QP moved to ERROR with WRs outstanding, while another thread keeps
/// posting on it (without a doorbell, as in ERROR): the poller, which
/// never names the QP, completes every WR exactly once — hardware flush
/// CQEs (the receives) and the software flush (the late sends) share the
/// tails the poster does not touch.
#[test]
fn flush_exactly_once_while_another_thread_posts() {
    const LATE: u64 = 40;
    with_two_devices(|_, _, da, db| {
        let ((pa, mut cq), (pb, cb)) = pd_cq_pairs(da, 128, db, 64);
        let mut q = create_qp(da, &pa, &cq, 32);
        let mut b = create_qp(db, &pb, &cb, 32);
        connect_both(&mut q, A, &mut b, B);
        let src = region_on(da, &pa, 1);
        let inbox = region_on(da, &pa, 1);
        let dst = region_on(db, &pb, 1);
        let sg = [src.sge(0, 16)];
        let rsg = [inbox.sge(0, 64)];
        let recvs: Vec<RecvWr<'_>> =
            (0..4).map(|k| RecvWr { wr_id: 900 + k, sg_list: &rsg }).collect();
        q.post_recv(&recvs).expect("post_recv");
        let wr = |k: u64| signaled(k, write_op(dst.addr(), dst.key()), &sg);
        q.post_send(&[wr(1), wr(2)]).expect("post");
        q.modify(&QpAttr::new(QpState::Error)).expect("error");
        q.post_send(&[wr(3)]).expect("post in error");
        let stop = AtomicBool::new(false);
        let got = std::thread::scope(|s| {
            let poster = s.spawn(|| {
                let mut posted = 0u64;
                while posted < LATE && !stop.load(Ordering::Relaxed) {
                    match q.post_send(&[wr(100 + posted)]) {
                        Ok(()) => posted += 1,
                        // The poller has not retired enough yet: try again.
                        Err(e) => {
                            assert!(matches!(e.kind, PostErrorKind::Sq(SqError::Full)), "{e:?}")
                        }
                    }
                    std::thread::yield_now();
                }
                posted
            });
            let mut out = Vec::new();
            let mut quiet = 0;
            // 3 + 4 receives + LATE, polled while the poster runs.
            while out.len() < (7 + LATE) as usize && quiet < 100_000 {
                let mut wc = [empty_wc(); 3];
                let k = cq.poll(&mut wc);
                quiet = if k == 0 { quiet + 1 } else { 0 };
                out.extend_from_slice(&wc[..k]);
                if poster.is_finished() && k == 0 && quiet > 100 {
                    break;
                }
            }
            stop.store(true, Ordering::Relaxed);
            let posted = poster.join().expect("poster");
            assert_eq!(posted, LATE);
            out.extend(poll_until_with(|wc| cq.poll(wc), usize::MAX, 20));
            out
        });
        let m = once(&got);
        assert_eq!(got.len(), (7 + LATE) as usize, "{m:?}");
        // The device ran WRs 1 and 2 before the QP went to ERROR (the model
        // executes at the doorbell); everything after is flushed.
        for c in &got {
            let ok = c.wr_id == 1 || c.wr_id == 2;
            let want = if ok { WcStatus::Success } else { WcStatus::WrFlushErr };
            assert_eq!(c.status, want, "{c:?}");
        }
        for k in (1..=3).chain(100..100 + LATE) {
            assert_eq!(m.get(&(q.qp_num(), k, "RdmaWrite".into())), Some(&1), "{k}");
        }
        for k in 900..904 {
            assert_eq!(m.get(&(q.qp_num(), k, "Recv".into())), Some(&1), "{k}");
        }
        let mut wc = [empty_wc(); 4];
        assert_eq!(cq.poll(&mut wc), 0, "nothing twice");
        drop((q, b, src, inbox, dst));
    });
}

/// Healthy traffic: one thread owns the QPs and posts, another owns the CQ
/// and polls; every completion arrives exactly once, and the poster sees
/// room come back (the consumer's tails reach it through the link).
#[test]
fn post_on_one_thread_poll_on_another() {
    // More than an SQ holds (255 WRs), so the poster must wait for the
    // consumer's tail; the CQ holds every WR both SQs can have outstanding,
    // so a starved poller cannot overflow it.
    const ROUNDS: u64 = 600;
    with_two_devices(|_, _, da, db| {
        let ((pa, mut cq), (pb, cb)) = pd_cq_pairs(da, 1024, db, 64);
        let mut qa: Vec<TQp<'_>> = (0..2).map(|_| create_qp(da, &pa, &cq, 8)).collect();
        assert!(qa[0].cap().max_send_wr < ROUNDS as u32 / 2);
        let mut qb: Vec<TQp<'_>> = (0..2).map(|_| create_qp(db, &pb, &cb, 8)).collect();
        for (a, b) in qa.iter_mut().zip(qb.iter_mut()) {
            connect_both(a, A, b, B);
        }
        let src = region_on(da, &pa, 1);
        let dst = region_on(db, &pb, 1);
        let sg = [src.sge(0, 16)];
        let stop = AtomicBool::new(false);
        let nums: Vec<u32> = qa.iter().map(|q| q.qp_num()).collect();
        let got = std::thread::scope(|s| {
            let qa = &mut qa;
            let stop = &stop;
            let sg = &sg;
            let dst = &dst;
            s.spawn(move || {
                for k in 0..ROUNDS {
                    for q in qa.iter_mut() {
                        let wr = signaled(k, write_op(dst.addr(), dst.key()), sg);
                        loop {
                            match q.post_send(&[wr]) {
                                Ok(()) => break,
                                Err(e) => assert!(
                                    matches!(e.kind, PostErrorKind::Sq(SqError::Full)),
                                    "{e:?}"
                                ),
                            }
                            assert!(!stop.load(Ordering::Relaxed), "poller gave up");
                            std::thread::yield_now();
                        }
                    }
                }
            });
            let want = 2 * ROUNDS as usize;
            let mut out = Vec::new();
            let mut quiet = 0u64;
            while out.len() < want && quiet < 20_000_000 {
                let mut wc = [empty_wc(); 4];
                let k = cq.poll(&mut wc);
                quiet = if k == 0 { quiet + 1 } else { 0 };
                out.extend_from_slice(&wc[..k]);
            }
            stop.store(true, Ordering::Relaxed);
            out
        });
        let m = once(&got);
        assert_eq!(got.len(), 2 * ROUNDS as usize);
        assert!(got.iter().all(|c| c.status == WcStatus::Success), "{got:?}");
        for n in &nums {
            for k in 0..ROUNDS {
                assert_eq!(m.get(&(*n, k, "RdmaWrite".into())), Some(&1));
            }
        }
        drop((qa, qb, src, dst));
    });
}
