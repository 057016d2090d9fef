//! Issue #35: every work request completes, even when the device cannot
//! flush. When the hardware cannot be asked to flush a QP — the CQP hung
//! (the device needs a reset), the CQP timed out on the flush itself, the
//! device is gone, or the device reported the QP's CQ unusable (a
//! catastrophic CQ error) — `Cq::poll` (and `poll_shared` / `CqPoller`)
//! completes every outstanding SQ and RQ WR with `WrFlushErr`, in posting
//! order, exactly once, in software; hardware CQEs that arrive for those
//! queues afterwards are dropped. Then the QP and its CQ are destroyed (or,
//! for a device that needs a reset, closed after the reset) and every page
//! and id comes back.
//!
//! Each path is run on a plain `Qp` polled on the posting thread, on a
//! plain `Qp` with separate send and receive CQs posted on one thread and
//! polled on another, and on a `SharedQp` (polled with `poll_shared` or a
//! `CqPoller`).

mod common;
mod e2e_common;

use e2e_common::*;
use irdma::aeq::AsyncEventKind;
use irdma::cqp::CqpError;
use irdma::verbs::PostErrorKind;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// A CQP op hangs (another op than the flush): the device needs a
    /// reset; then the QP is moved to ERROR (no CQP op is sent).
    Hang,
    /// MODIFY_QP(ERROR) runs, FLUSH_WQES hangs: the flush op times out.
    FlushTimeout,
    /// Surprise removal.
    Removal,
    /// The device reports the CQ unusable (LCE_CQ_CATASTROPHIC).
    DeadCq,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavor {
    /// A plain QP, one CQ, posted and polled on this thread.
    Plain,
    /// A plain QP with separate send and receive CQs, posted on one thread
    /// and polled on another.
    Split,
    /// A shared QP, polled with `poll_shared` (or a `CqPoller`).
    Shared,
}

/// Either QP flavour behind one interface.
enum AnyQp<'d> {
    Plain(TQp<'d>),
    Shared(TShared<'d>),
}

impl<'d> AnyQp<'d> {
    fn qp_num(&self) -> u32 {
        match self {
            AnyQp::Plain(q) => q.qp_num(),
            AnyQp::Shared(q) => q.qp_num(),
        }
    }
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), irdma::verbs::PostError> {
        match self {
            AnyQp::Plain(q) => q.post_send(wrs),
            AnyQp::Shared(q) => q.post_send(wrs),
        }
    }
    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), irdma::verbs::PostError> {
        match self {
            AnyQp::Plain(q) => q.post_recv(wrs),
            AnyQp::Shared(q) => q.post_recv(wrs),
        }
    }
    fn modify(&mut self, a: &QpAttr) -> Result<(), VerbsError> {
        match self {
            AnyQp::Plain(q) => q.modify(a),
            AnyQp::Shared(q) => q.modify(a),
        }
    }
    fn destroy(&mut self) -> Result<(), VerbsError> {
        match self {
            AnyQp::Plain(q) => q.destroy(),
            AnyQp::Shared(q) => q.destroy(),
        }
    }
}

/// Everything `cqs` (and the shared QP, if any) gives until `idle` empty
/// polls in a row; `poller` picks a `CqPoller` over `poll_shared`.
fn drain<'d>(cqs: &mut [TCq<'d>], qp: &AnyQp<'d>, poller: bool) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    for cq in cqs.iter_mut() {
        out.extend(match qp {
            AnyQp::Plain(_) => poll_until_with(|w| cq.poll(w), usize::MAX, 20),
            AnyQp::Shared(s) if poller => {
                let mut p = cq.poller::<1>();
                p.register(s).expect("register");
                poll_until_with(|w| p.poll(w), usize::MAX, 20)
            }
            AnyQp::Shared(s) => {
                poll_until_with(|w| cq.poll_shared([s], w).unwrap(), usize::MAX, 20)
            }
        });
    }
    out
}

/// `(wr_id, status)` of the completions of one queue (receives have ids
/// 20 to 29), in the order they came.
fn queue(got: &[WorkCompletion], recv: bool) -> Vec<(u64, WcStatus)> {
    got.iter()
        .filter(|c| (20..30).contains(&c.wr_id) == recv)
        .map(|c| (c.wr_id, c.status))
        .collect()
}

fn case(path: Path, flavor: Flavor) {
    leak_checked(|| {
        let (bar_a, _bar_b, da, db) = two_devices(Profile::SMALL);
        let usage0 = da.resource_usage();
        let pa = da.alloc_pd().expect("pd");
        let mut cqs: Vec<TCq<'_>> = vec![da.create_cq(64).expect("cq")];
        if flavor == Flavor::Split {
            cqs.push(da.create_cq(64).expect("recv cq"));
        }
        let recv_cq = cqs.len() - 1;
        let mut qp = {
            let mut attr = QpInitAttr { send_cq: &cqs[0], recv_cq: &cqs[recv_cq], cap: cap(16) };
            match flavor {
                Flavor::Shared => AnyQp::Shared(da.create_shared_qp(&pa, &mut attr).expect("qp")),
                _ => AnyQp::Plain(da.create_qp(&pa, &mut attr).expect("qp")),
            }
        };
        let mut b = Side::new(&db, B, 64, cap(16));
        match &mut qp {
            AnyQp::Plain(q) => connect(q, A, B, b.qp.qp_num()).expect("connect a"),
            AnyQp::Shared(q) => connect_shared(q, A, B, b.qp.qp_num()),
        }
        let qpn = qp.qp_num();
        connect(&mut b.qp, B, A, qpn).expect("connect b");
        let src = buf(1);
        let src_mr = reg(&da, &pa, src.paddr(), 4096, &pages_of(&src), false);
        let dst = b.region(1, 0);
        let sge = [Sge { addr: src.paddr(), length: 64, lkey: src_mr.lkey() }];
        let rsge = [Sge { addr: src.paddr() + 1024, length: 256, lkey: src_mr.lkey() }];
        let write = |id: u64, signaled: bool| SendWr {
            wr_id: id,
            opcode: write_op(dst.addr() + 64 * (id % 8), dst.key()),
            flags: if signaled { SendFlags::SIGNALED } else { SendFlags::NONE },
            sg_list: &sge,
        };
        let poller = matches!(path, Path::Hang | Path::DeadCq);
        let send_cq_id = cqs[0].id();

        // Healthy traffic first.
        qp.post_send(&[write(1, true)]).expect("post");
        let got = drain(&mut cqs, &qp, poller);
        assert_eq!(queue(&got, false), vec![(1, WcStatus::Success)], "{got:?}");

        // The outstanding work, posted on another thread for `Split`.
        let held = matches!(path, Path::Hang | Path::FlushTimeout);
        let post_work = |qp: &mut AnyQp<'_>| {
            let recvs: Vec<RecvWr<'_>> =
                (20..24).map(|id| RecvWr { wr_id: id, sg_list: &rsge }).collect();
            qp.post_recv(&recvs).expect("post_recv");
            if held {
                // Executed, its CQE held in the device: it arrives only
                // after the software flush (then dropped).
                bar_a.with_device(|d| d.faults().hold_cqes_of_qp = Some((qpn, 100)));
                qp.post_send(&[write(9, true)]).expect("post held");
            }
            if path == Path::DeadCq {
                // The next CQE of the send CQ cannot be written: the device
                // reports the CQ unusable and writes nothing more to it.
                bar_a.with_device(|d| d.faults().kill_cq = Some(send_cq_id));
                qp.post_send(&[write(10, false), write(11, true), write(12, true)]).expect("post");
            } else {
                // The doorbell is lost: the device never sees these.
                bar_a.with_device(|d| d.faults().lose_doorbells = 1);
                qp.post_send(&[write(10, false), write(11, true)]).expect("post");
            }
        };
        if flavor == Flavor::Split {
            std::thread::scope(|s| {
                s.spawn(|| post_work(&mut qp)).join().expect("poster");
            });
        } else {
            post_work(&mut qp);
        }
        // A dead CQ is found by this poll (the AEQ is serviced when the
        // ring is empty), which flushes at once; otherwise nothing yet.
        let early = drain(&mut cqs, &qp, poller);
        assert!(path == Path::DeadCq || early.is_empty(), "nothing completes yet: {early:?}");

        // The device can no longer flush the QP.
        match path {
            Path::Hang => {
                bar_a.with_device(|d| d.faults().cqp_hang = true);
                let e = da.create_cq(8).err().expect("the CQP hangs");
                assert!(matches!(e, VerbsError::Cqp(CqpError::Timeout { .. })), "{e:?}");
                assert!(da.needs_reset());
                // No CQP op is sent: the QP goes to ERROR in software.
                qp.modify(&QpAttr::new(QpState::Error)).expect("to ERROR without the CQP");
            }
            Path::FlushTimeout => {
                // The CQP answers MODIFY_QP and hangs on FLUSH_WQES.
                bar_a.with_device(|d| d.faults().hang_cqp_at = Some(1));
                qp.modify(&QpAttr::new(QpState::Error)).expect("to ERROR, flushed in software");
                assert!(da.needs_reset(), "the flush op timed out");
            }
            Path::Removal => {
                bar_a.with_device(|d| d.faults().removed = true);
                assert_eq!(da.check_presence(), Err(CqpError::DeviceGone));
            }
            Path::DeadCq => {}
        }

        // Every outstanding WR completes, flushed, once, in posting order
        // per queue, polled on another thread for `Split`.
        let mut got = early;
        got.extend(if flavor == Flavor::Split {
            std::thread::scope(|s| s.spawn(|| drain(&mut cqs, &qp, poller)).join().expect("poll"))
        } else {
            drain(&mut cqs, &qp, poller)
        });
        let f = WcStatus::WrFlushErr;
        let sq: Vec<(u64, WcStatus)> = match (held, path) {
            (_, Path::DeadCq) => vec![(10, f), (11, f), (12, f)],
            (true, _) => vec![(9, f), (10, f), (11, f)],
            (false, _) => vec![(10, f), (11, f)],
        };
        assert_eq!(queue(&got, false), sq, "{path:?} {flavor:?}: {got:?}");
        assert_eq!(queue(&got, true), (20..24).map(|id| (id, f)).collect::<Vec<_>>(), "{got:?}");
        assert!(got.iter().all(|c| c.qp_num == qpn), "{got:?}");
        if flavor == Flavor::Split {
            // Each queue on its own CQ.
            let on_send = poll_until_with(|w| cqs[0].poll(w), usize::MAX, 5);
            assert!(on_send.is_empty(), "{on_send:?}");
        }

        // Late hardware CQEs (the held one, written now) never reach the
        // caller; nothing completes twice.
        bar_a.with_device(|d| d.step());
        let late = drain(&mut cqs, &qp, poller);
        assert!(late.is_empty(), "{path:?} {flavor:?}: {late:?}");

        match path {
            Path::DeadCq => {
                let mut ev = [NO_EVENT; 8];
                let n = da.poll_async_events(&mut ev);
                let cq_err: Vec<_> =
                    ev[..n].iter().filter(|e| e.kind == AsyncEventKind::CqError).collect();
                assert_eq!(cq_err.len(), 1, "{:?}", &ev[..n]);
                assert_eq!((cq_err[0].ae_code, cq_err[0].id), (0x0702, cqs[0].id()));
                assert!(cqs[0].is_dead());
                assert_eq!(flavor == Flavor::Split, !cqs[recv_cq].is_dead());
                // Posting to a QP on a dead CQ is refused, typed.
                let e = qp.post_send(&[write(30, true)]).unwrap_err();
                assert_eq!((e.bad_wr, e.kind), (0, PostErrorKind::CqDead));
                let e = qp.post_recv(&[RecvWr { wr_id: 31, sg_list: &rsge }]).unwrap_err();
                assert_eq!((e.bad_wr, e.kind), (0, PostErrorKind::CqDead));
                // Destroy QP and CQs; a new CQ and QP work.
                qp.destroy().expect("destroy qp");
                for mut cq in cqs.drain(..) {
                    cq.destroy().expect("destroy dead cq");
                }
                let mut cq = da.create_cq(64).expect("new cq");
                assert!(!cq.is_dead());
                let mut q = create_qp(&da, &pa, &cq, 8);
                let mut b2 = create_qp(&db, &b.pd, &b.cq, 8);
                connect_both(&mut q, A, &mut b2, B);
                q.post_send(&[write(40, true)]).expect("post on the new QP");
                let got = poll_until_with(|w| cq.poll(w), usize::MAX, 20);
                assert_eq!(queue(&got, false), vec![(40, WcStatus::Success)], "{got:?}");
                drop((q, b2, cq, src_mr, pa));
                let ids = |u: irdma::verbs::ResourceUsage| (u.pds, u.qps, u.cqs, u.mrs, u.arp);
                assert_eq!(ids(da.resource_usage()), ids(usage0), "every id back");
                drop((qp, cqs, src));
                da.close().expect("a healthy device closes");
                // The killed CQE and those after it, the hardware flush's
                // among them, were never written.
                bar_a.expect_counter(ErrorCounter::CqesDropped);
            }
            _ => {
                if path != Path::Removal {
                    // Posts after the software flush are taken and flushed.
                    qp.post_send(&[write(50, true)]).expect("posted in ERROR");
                    let got = drain(&mut cqs, &qp, poller);
                    assert_eq!(queue(&got, false), vec![(50, f)], "{got:?}");
                }
                drop((qp, cqs, src_mr, pa));
                reset_and_close(&bar_a, da);
                drop(src);
            }
        }
        drop((b, dst));
        db.close().expect("peer closes cleanly");
    });
}

macro_rules! cases {
    ($($name:ident: $path:ident, $flavor:ident;)*) => {
        $(
            #[test]
            fn $name() {
                case(Path::$path, Flavor::$flavor);
            }
        )*
    };
}

cases! {
    cqp_hang_plain: Hang, Plain;
    cqp_hang_split: Hang, Split;
    cqp_hang_shared_poller: Hang, Shared;
    flush_timeout_plain: FlushTimeout, Plain;
    flush_timeout_split: FlushTimeout, Split;
    flush_timeout_shared: FlushTimeout, Shared;
    removal_plain: Removal, Plain;
    removal_split: Removal, Split;
    removal_shared: Removal, Shared;
    dead_cq_plain: DeadCq, Plain;
    dead_cq_split: DeadCq, Split;
    dead_cq_shared_poller: DeadCq, Shared;
}

/// The rest of a late-CQE test, once the CQE of WR `held` (a receive when
/// `recv`, at ring index 0) is held in the device: the CQP hangs (the
/// device needs a reset), `q` goes to ERROR in software and the CQ gives
/// `held`'s flush. Then batches of `batch` WRs (ids from 1000) are `post`ed
/// in ERROR and each flushed at once, until the next WR lands on ring index
/// `ring` (= 0 again); the last batch runs up to and including that index.
/// Then the device writes the held CQE, and what the CQ gives must be the
/// last batch's flushes only: the late CQE completed nothing.
fn late_cqe<'d>(
    (bar, dev): (&ModelBar, &Dev),
    (q, cq): (&mut TQp<'d>, &mut TCq<'d>),
    (held, recv): (u64, bool),
    (ring, batch): (u64, u64),
    mut post: impl FnMut(&mut TQp<'d>, std::ops::Range<u64>),
) {
    bar.with_device(|d| d.faults().cqp_hang = true);
    assert!(dev.create_cq(8).is_err(), "the CQP hangs");
    q.modify(&QpAttr::new(QpState::Error)).expect("ERROR in software");
    let got = poll_until_with(|w| cq.poll(w), usize::MAX, 20);
    assert_eq!(queue(&got, recv), vec![(held, WcStatus::WrFlushErr)]);
    let mut next = 1u64;
    let mut id = 1000u64;
    while next + batch <= ring {
        post(q, id..id + batch);
        let got = poll_until_with(|w| cq.poll(w), usize::MAX, 20);
        assert_eq!(got.len() as u64, batch);
        assert!(got.iter().all(|c| c.status == WcStatus::WrFlushErr), "{got:?}");
        next += batch;
        id += batch;
    }
    let last = id..id + (ring - next + 1);
    post(q, last.clone());
    bar.with_device(|d| d.step());
    let got = poll_until_with(|w| cq.poll(w), usize::MAX, 20);
    // Ids outside 20..30 (receive or not): `queue(.., false)`.
    let want: Vec<(u64, WcStatus)> = last.map(|k| (k, WcStatus::WrFlushErr)).collect();
    assert_eq!(queue(&got, false), want, "the late CQE completed nothing");
}

/// A hardware CQE that arrives after the software flush names a ring slot
/// a later WR (posted in ERROR, never seen by the device) may occupy by
/// then: it must be dropped, not taken as that WR's success. The held CQE
/// of WR 9 (SQ index 0) is released once WRs posted after the flush have
/// wrapped the ring back to index 0.
#[test]
fn late_cqe_after_software_flush_never_completes_a_later_wr() {
    leak_checked(|| {
        let (bar_a, _bar_b, da, db) = two_devices(Profile::SMALL);
        let pa = da.alloc_pd().expect("pd");
        let mut cq = da.create_cq(512).expect("cq");
        let cap = cap(16);
        let mut q = create_qp(&da, &pa, &cq, 16);
        // One-SGE WRITEs take one quantum each: the ring holds `ring` WRs.
        let ring = irdma::uk::sizing::calc_sq(cap.max_send_wr, cap.max_send_sge, 0)
            .expect("sizing")
            .depth_quanta as u64;
        let mut b = Side::new(&db, B, 64, cap);
        connect_both(&mut q, A, &mut b.qp, B);
        let src = buf(1);
        let src_mr = reg(&da, &pa, src.paddr(), 4096, &pages_of(&src), false);
        let dst = b.region(1, 0);
        let sge = [Sge { addr: src.paddr(), length: 16, lkey: src_mr.lkey() }];
        let wr = |id: u64| signaled(id, write_op(dst.addr(), dst.key()), &sge);
        // WR 9 at SQ index 0 executes; its CQE is held in the device.
        bar_a.with_device(|d| d.faults().hold_cqes_of_qp = Some((q.qp_num(), 100)));
        q.post_send(&[wr(9)]).expect("post");
        // WRs posted in ERROR (no doorbell) and flushed until the SQ wraps
        // to index 0; then the device writes WR 9's success CQE.
        late_cqe((&bar_a, &da), (&mut q, &mut cq), (9, false), (ring, 64), |q, ids| {
            let wrs: Vec<SendWr<'_>> = ids.map(wr).collect();
            q.post_send(&wrs).expect("post in ERROR");
        });
        drop((q, cq, src_mr, pa));
        reset_and_close(&bar_a, da);
        drop((src, b, dst));
        db.close().expect("peer closes cleanly");
    });
}

/// The RQ side of [`late_cqe_after_software_flush_never_completes_a_later_wr`]:
/// the held CQE of receive 20 (RQ index 0), whose message arrived before
/// the device needed a reset, is written once receives posted after the
/// software flush have wrapped the RQ back to index 0.
#[test]
fn late_receive_cqe_after_software_flush_never_completes_a_later_receive() {
    leak_checked(|| {
        let (bar_a, _bar_b, da, db) = two_devices(Profile::SMALL);
        let pa = da.alloc_pd().expect("pd");
        let mut cq = da.create_cq(256).expect("cq");
        let cap = cap(16);
        let mut q = create_qp(&da, &pa, &cq, 16);
        let ring = irdma::uk::sizing::calc_rq(cap.max_recv_wr, cap.max_recv_sge)
            .expect("sizing")
            .size as u64;
        let mut b = Side::new(&db, B, 64, cap);
        connect_both(&mut q, A, &mut b.qp, B);
        let inbox = buf(1);
        let inbox_mr = reg(&da, &pa, inbox.paddr(), 4096, &pages_of(&inbox), false);
        let rsge = [Sge { addr: inbox.paddr(), length: 256, lkey: inbox_mr.lkey() }];
        let recv = |id: u64| RecvWr { wr_id: id, sg_list: &rsge };
        let src = b.region(1, 5);
        // Receive 20 (RQ index 0) takes B's SEND; its CQE is held.
        q.post_recv(&[recv(20)]).expect("post_recv");
        bar_a.with_device(|d| d.faults().hold_cqes_of_qp = Some((q.qp_num(), 100)));
        let sg = [src.sge(0, 32)];
        b.qp.post_send(&[signaled(1, WrOpcode::Send, &sg)]).expect("send");
        assert_eq!(b.one().status, WcStatus::Success, "delivered");
        // Receives posted in ERROR and flushed until the RQ wraps to index
        // 0; then the device writes receive 20's success CQE.
        late_cqe((&bar_a, &da), (&mut q, &mut cq), (20, true), (ring, 8), |q, ids| {
            let wrs: Vec<RecvWr<'_>> = ids.map(recv).collect();
            q.post_recv(&wrs).expect("post_recv in ERROR");
        });
        drop((q, cq, inbox_mr, pa));
        reset_and_close(&bar_a, da);
        drop((inbox, src, b));
        db.close().expect("peer closes cleanly");
    });
}
