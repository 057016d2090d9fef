//! `CqPoller`: `ib_poll_cq` without listing the QPs on every poll. Eight
//! shared QPs on one CQ, traffic on all, one `poller.poll(&mut wc)` loop
//! sees every completion exactly once; a QP destroyed with completions
//! pending has them dropped; a QP moved to ERROR completes every WR once
//! (hardware and software flush); other threads post while the poller
//! polls (bounded).

mod common;
mod e2e_common;

use e2e_common::*;
use irdma::uk::SqError;
use irdma::verbs::{CqPoller, PostError, PostErrorKind};

type TPoller<'c, 'q, 'd, const N: usize> = CqPoller<'c, 'q, 'd, FakeHal, ModelBar, N>;

// The poller may move to the polling thread.
const _: () = {
    const fn send<T: Send>() {}
    send::<TPoller<'static, 'static, 'static, 8>>();
};

const QPS: usize = 8;

fn qcap(n: u32) -> QpCap {
    qp_cap(n, n, 1, 1)
}

/// A shared QP on A and the QP on B it is connected to.
type Peer<'a, 'b> = (TShared<'a>, TQp<'b>);

/// Two shared QPs on A's CQ, each connected to its own QP on B, and a
/// one-page region on each side (A's the source, B's the destination).
fn two_shared_peers<'a, 'b>(
    a: (&'a Dev, &TPd<'a>, &TCq<'a>),
    b: (&'b Dev, &TPd<'b>, &TCq<'b>),
) -> (Peer<'a, 'b>, Peer<'a, 'b>, Region<'a>, Region<'b>) {
    let (q1, q2) = (shared_peer(a, b), shared_peer(a, b));
    (q1, q2, region_on(a.0, a.1, 1), region_on(b.0, b.1, 1))
}

/// Eight shared QPs on A's one CQ, each connected to its own QP on B.
/// Every A QP posts signaled RDMA WRITEs and receives SENDs from B; one
/// `poll` loop over the CQ, no QP list, sees each send and receive
/// completion exactly once and nothing more.
#[test]
fn eight_qps_one_cq_every_completion_once() {
    const WRITES: u64 = 6;
    const SENDS: u64 = 3;
    let _g = lock();
    let (_ba, _bb, da, db) = two_devices(Profile::SMALL);
    let ((pa, mut cq), (pb, mut cb)) = pd_cq_pairs(&da, 256, &db, 256);
    let (ends_a, ends_b) = ((&da, &pa, &cq), (&db, &pb, &cb));
    let (qa, mut qb): (Vec<_>, Vec<_>) = (0..QPS).map(|_| shared_peer(ends_a, ends_b)).unzip();
    let f = FanIn::new(&da, &pa, &db, &pb, QPS * SENDS as usize);
    for (i, a) in qa.iter().enumerate() {
        a.post_recv(&fan_in_recvs(&f.recv_sg, i, SENDS)).expect("post_recv");
    }
    let mut poller: TPoller<'_, '_, '_, QPS> = cq.poller();
    for a in &qa {
        poller.register(a).expect("register");
    }
    poller.register(&qa[3]).expect("registering again does nothing");
    assert_eq!(poller.len(), QPS);
    let post = |a: &TShared<'_>, w: &[SendWr<'_>]| a.post_send(w).expect("post_send");
    post_fan_in(&f, qa.iter(), post, &mut qb, (WRITES, SENDS));
    let qpns: Vec<u32> = qa.iter().map(|a| a.qp_num()).collect();
    check_fan_in(|wc| poller.poll(wc), &qpns, (WRITES, SENDS));
    assert_eq!(poller.unlisted_qp(), None);
    drop(poller);
    // B's side completes too (plain QPs, through `Cq::poll`).
    let gb = poll_n(&mut cb, QPS * SENDS as usize);
    assert_eq!(gb.len(), QPS * SENDS as usize);
}

/// A registered QP's CQEs that arrive after it was destroyed are dropped,
/// the other QP's are all delivered; a plain QP on the same CQ that cannot
/// be registered stops the poll and is named, its completion kept.
#[test]
fn destroyed_qp_dropped_unregistered_qp_kept() {
    let _g = lock();
    let (_ba, _bb, da, db) = two_devices(Profile::SMALL);
    let ((pa, mut cq), (pb, cb)) = pd_cq_pairs(&da, 64, &db, 64);
    let (ends_a, ends_b) = ((&da, &pa, &cq), (&db, &pb, &cb));
    let ((mut q1, _b1), (q2, _b2), src, dst) = two_shared_peers(ends_a, ends_b);
    let (mut plain, _b3) = rc_peer(ends_a, ends_b);
    let sg = [src.sge(0, 16)];
    let wr = |k: u64| signaled(k, write_op(dst.addr(), dst.key()), &sg);
    q1.post_send(&[wr(1), wr(2), wr(3)]).expect("post");
    q2.post_send(&[wr(11), wr(12)]).expect("post");
    // q1 goes with three CQEs in the ring.
    q1.destroy().expect("destroy");
    {
        let mut p: TPoller<'_, '_, '_, 2> = cq.poller();
        assert!(matches!(p.register(&q1), Err(VerbsError::Invalid { .. })), "destroyed");
        p.register(&q2).expect("register");
        let got = poll_until_with(|wc| p.poll(wc), 3, 10);
        let ids: Vec<(u32, u64)> = got.iter().map(|c| (c.qp_num, c.wr_id)).collect();
        assert_eq!(ids, [(q2.qp_num(), 11), (q2.qp_num(), 12)]);
        assert_eq!(p.unlisted_qp(), None);
    }
    // A plain QP's completion: kept, named, then received by a listed poll.
    plain.post_send(&[wr(21)]).expect("post");
    q2.post_send(&[wr(13)]).expect("post");
    {
        let mut p: TPoller<'_, '_, '_, 2> = cq.poller();
        p.register(&q2).expect("register");
        let mut wc = [empty_wc(); 4];
        assert_eq!(p.poll(&mut wc), 0);
        assert_eq!(p.unlisted_qp(), Some(plain.qp_num()));
        assert_eq!(p.poll(&mut wc), 0, "kept, not consumed");
    }
    let got = poll_n(&mut cq, 1);
    assert_eq!((got[0].qp_num, got[0].wr_id), (plain.qp_num(), 21));
    let q3 = shared_qp(&da, &pa, &cq, qcap(4));
    let other = da.create_cq(8).expect("cq");
    let q4 = shared_qp(&da, &pa, &other, qcap(4));
    let mut p: TPoller<'_, '_, '_, 1> = cq.poller();
    p.register(&q2).expect("register");
    let got = poll_until_with(|wc| p.poll(wc), 2, 10);
    let ids: Vec<(u32, u64)> = got.iter().map(|c| (c.qp_num, c.wr_id)).collect();
    assert_eq!(ids, [(q2.qp_num(), 13)]);
    // Capacity and foreign QPs are refused.
    assert!(matches!(p.register(&q3), Err(VerbsError::AboveLimit { .. })));
    assert!(matches!(p.register(&q4), Err(VerbsError::Invalid { .. })));
}

/// A registered QP moved to ERROR: WRs posted before and after complete
/// exactly once (hardware flush CQEs, then the software flush of WRs the
/// hardware did not flush), unsignaled ones included; the other registered
/// QP's completions are unaffected.
#[test]
fn errored_qp_flushed_exactly_once() {
    let _g = lock();
    let (_ba, _bb, da, db) = two_devices(Profile::SMALL);
    let ((pa, mut cq), (pb, cb)) = pd_cq_pairs(&da, 64, &db, 64);
    let (ends_a, ends_b) = ((&da, &pa, &cq), (&db, &pb, &cb));
    let ((mut q1, _b1), (q2, _b2), src, dst) = two_shared_peers(ends_a, ends_b);
    let inbox = region_on(&da, &pa, 1);
    let sg = [src.sge(0, 16)];
    let batch = |base: u64| mixed_writes(base, &dst, &sg);
    let rsg = [inbox.sge(0, 64)];
    q1.post_recv(&[RecvWr { wr_id: 90, sg_list: &rsg }, RecvWr { wr_id: 91, sg_list: &rsg }])
        .expect("post_recv");
    q1.post_send(&batch(0)).expect("post");
    q1.modify(&QpAttr::new(QpState::Error)).expect("error");
    q1.post_send(&batch(10)).expect("post in error");
    q2.post_send(&batch(20)).expect("post");
    let mut p: TPoller<'_, '_, '_, 2> = cq.poller();
    p.register(&q2).expect("register");
    p.register(&q1).expect("register");
    let got = poll_until_with(|wc| p.poll(wc), usize::MAX, 10);
    once(&got);
    let of = |qpn: u32| -> Vec<(u64, WcStatus)> {
        let mut v: Vec<_> =
            got.iter().filter(|c| c.qp_num == qpn).map(|c| (c.wr_id, c.status)).collect();
        v.sort_unstable_by_key(|x| x.0);
        v
    };
    // q1: the first batch either completed (signaled ones) before the
    // error or was flushed (every WR); the second batch and both receives
    // are flushed, each once.
    let g1 = of(q1.qp_num());
    for id in 10..16 {
        assert!(g1.contains(&(id, WcStatus::WrFlushErr)), "{id} missing: {g1:?}");
    }
    for id in [90, 91] {
        assert!(g1.contains(&(id, WcStatus::WrFlushErr)), "{id} missing: {g1:?}");
    }
    for id in 0..6u64 {
        let n = g1.iter().filter(|x| x.0 == id).count();
        let signaled = !(id % 2 == 1 && id % 3 != 2);
        assert!(n == 1 || (n == 0 && !signaled), "wr {id}: {g1:?}");
    }
    // 21 and 25 are unsignaled (the batch's rule).
    assert_eq!(of(q2.qp_num()), [20, 22, 23, 24].map(|i| (i, WcStatus::Success)));
    assert_eq!(q1.send_queue_stats().used, 0);
    let mut wc = [empty_wc(); 4];
    assert_eq!(p.poll(&mut wc), 0);
}

/// Two threads post signaled WRITEs into four registered shared QPs (the
/// device runs on its own thread) while this thread polls the CQ through
/// the poller only. Every WR completes once; the loop is bounded.
#[test]
fn post_on_threads_while_polling() {
    const THREADS: usize = 2;
    const N: u64 = 150;
    const Q: usize = 4;
    let _g = lock();
    let (_bar_a, _bar_b, _thread, da, db) = threaded_devices(Profile::SMALL);
    let ((pa, mut cq), (pb, cb)) = pd_cq_pairs(&da, 256, &db, 64);
    let mut qa: Vec<TShared<'_>> = (0..Q).map(|_| shared_qp(&da, &pa, &cq, qcap(16))).collect();
    let mut qb: Vec<TQp<'_>> = (0..Q).map(|_| create_qp(&db, &pb, &cb, 4)).collect();
    for (a, b) in qa.iter_mut().zip(qb.iter_mut()) {
        let (na, nb) = (a.qp_num(), b.qp_num());
        connect_shared(a, A, B, nb);
        connect(b, B, A, na).expect("connect b");
    }
    let src = region_on(&da, &pa, 1);
    let dst = region_on(&db, &pb, 1);
    let mut poller: TPoller<'_, '_, '_, Q> = cq.poller();
    for a in &qa {
        poller.register(a).expect("register");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut got = Vec::new();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (qa, src, dst) = (&qa, &src, &dst);
            s.spawn(move || {
                let sg = [src.sge(t * 64, 32)];
                for i in 0..N {
                    let qp = &qa[(i as usize + t) % Q];
                    let w = signaled(((t as u64) << 32) | i, write_op(dst.addr(), dst.key()), &sg);
                    loop {
                        match qp.post_send(&[w]) {
                            Ok(()) => break,
                            Err(PostError { kind: PostErrorKind::Sq(SqError::Full), .. }) => {
                                assert!(std::time::Instant::now() < deadline, "SQ stayed full");
                                std::thread::yield_now();
                            }
                            Err(e) => panic!("post_send: {e:?}"),
                        }
                    }
                }
            });
        }
        let want = THREADS * N as usize;
        while got.len() < want && std::time::Instant::now() < deadline {
            let mut wc = [empty_wc(); 8];
            let k = poller.poll(&mut wc);
            got.extend_from_slice(&wc[..k]);
            if k == 0 {
                std::thread::yield_now();
            }
        }
    });
    assert_eq!(got.len(), THREADS * N as usize, "bounded poll did not see every WR");
    assert!(got.iter().all(|c| c.status == WcStatus::Success));
    let m = once(&got);
    for t in 0..THREADS as u64 {
        for i in 0..N {
            let qpn = qa[(i as usize + t as usize) % Q].qp_num();
            assert_eq!(m.get(&(qpn, (t << 32) | i, "RdmaWrite".into())), Some(&1));
        }
    }
}
