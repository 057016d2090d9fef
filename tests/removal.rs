//! Surprise removal and CQP hangs (issue #19): a device that disappears
//! (every register reads all-ones, writes and DMA stop: model
//! `FaultPlan::removed`) is detected by the next control call within its
//! CQP timeout, or by `Device::check_presence`; afterwards every public
//! entry point returns a typed error at once (`CqpError::DeviceGone`,
//! `PostErrorKind::DeviceGone`), a CQ poll completes every outstanding WR as
//! flushed, exactly once, and close completes, quarantining what the device
//! was given. A hung CQP gives `Timeout`, then `NeedsReset` from every
//! control entry point, without touching the device.

mod common;
mod e2e_common;

use e2e_common::*;
use irdma::cqp::CqpError;
use irdma::device::CloseError;
use irdma::rw::{Direction, RwCtx, RwPostError, SgEntry};
use irdma::verbs::PostErrorKind;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

const GONE: VerbsError = VerbsError::Cqp(CqpError::DeviceGone);

fn gone_post(e: irdma::verbs::PostError) {
    assert_eq!((e.bad_wr, e.kind), (0, PostErrorKind::DeviceGone), "{e:?}");
}

/// Removal found by a control call (`by_control`) or by the watchdog call
/// `check_presence`; then every entry point.
fn removal_case(by_control: bool) {
    let _g = lock();
    let base = FakeHal::live_pages();
    {
        let (bar_a, _bar_b, da, db) = two_devices(Profile::SMALL);
        let (mut a, mut b) = linked(&da, &db, 32, cap(16));
        let mut src = a.region(1, 3);
        let dst = b.region(1, 0);
        let mut fr = da.alloc_mr(&a.pd, 4).expect("alloc_mr");
        // Traffic before: it works.
        let sge = [src.sge(0, 64)];
        a.qp.post_send(&[signaled(1, write_op(dst.addr(), dst.key()), &sge)]).unwrap();
        assert_eq!(a.one().status, WcStatus::Success);

        bar_a.with_device(|d| d.faults().removed = true);
        // Posted after the removal, before anyone noticed: the doorbells go
        // nowhere. Two sends (one unsignaled) and three receives.
        let rsge = [src.sge(100, 64)];
        a.qp.post_send(&[
            SendWr {
                wr_id: 10,
                opcode: write_op(dst.addr(), dst.key()),
                flags: SendFlags::NONE,
                sg_list: &sge,
            },
            signaled(11, write_op(dst.addr() + 64, dst.key()), &sge),
        ])
        .expect("not detected yet: posted");
        for id in 20..23 {
            a.qp.post_recv(&[RecvWr { wr_id: id, sg_list: &rsge }]).expect("posted");
        }
        let mut wc = [empty_wc(); 16];
        assert_eq!(a.cq.poll(&mut wc), 0, "nothing completes yet");
        assert!(!da.is_gone());

        let t = Instant::now();
        if by_control {
            // The next control call finds out, within its CQP timeout
            // (50 ms in these tests).
            assert_eq!(da.create_cq(8).err(), Some(GONE));
        } else {
            assert_eq!(da.check_presence(), Err(CqpError::DeviceGone));
        }
        assert!(t.elapsed() < Duration::from_secs(2), "detected in {:?}", t.elapsed());
        assert!(da.is_gone() && da.needs_reset());
        assert!(!db.is_gone(), "the peer is still there");
        assert_eq!(db.check_presence(), Ok(()));

        // Every outstanding WR completes as flushed, once.
        let got = poll_n(&mut a.cq, 5);
        let mut ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![10, 11, 20, 21, 22], "{got:?}");
        assert!(got.iter().all(|w| w.status == WcStatus::WrFlushErr), "{got:?}");
        assert_eq!(a.cq.poll(&mut wc), 0, "nothing twice");
        assert_eq!(a.qp.state(), QpState::Error);

        // Every entry point now returns a typed error at once.
        let t = Instant::now();
        gone_post(a.qp.post_send(&[signaled(30, write_op(dst.addr(), 0), &sge)]).unwrap_err());
        gone_post(a.qp.post_recv(&[RecvWr { wr_id: 31, sg_list: &rsge }]).unwrap_err());
        assert_eq!(a.cq.poll(&mut wc), 0);
        assert_eq!(da.alloc_pd().err(), Some(GONE));
        assert_eq!(da.create_cq(8).err(), Some(GONE));
        let mut attr = QpInitAttr { send_cq: &a.cq, recv_cq: &a.cq, cap: cap(16) };
        assert_eq!(da.create_qp(&a.pd, &mut attr).err(), Some(GONE));
        let mut sattr = QpInitAttr { send_cq: &a.cq, recv_cq: &a.cq, cap: cap(16) };
        assert_eq!(da.create_shared_qp(&a.pd, &mut sattr).err(), Some(GONE));
        let b2 = buf(1);
        let p = [b2.paddr()];
        let d = va_desc(b2.paddr(), 4096, &p, ALL);
        // SAFETY: `b2` outlives the call; the device is gone.
        assert_eq!(unsafe { da.reg_mr(&a.pd, &d) }.err(), Some(GONE));
        assert_eq!(da.alloc_mr(&a.pd, 4).err(), Some(GONE));
        // SAFETY: the pages are `b2`'s, which outlives `fr`.
        assert_eq!(unsafe { fr.map_pages(&[b2.paddr()]) }, Err(GONE));
        let mut rts = QpAttr::new(QpState::Rts);
        rts.sq_psn = 1;
        assert!(a.qp.modify(&rts).is_err(), "no transition out of ERROR");
        assert_eq!(da.check_presence(), Err(CqpError::DeviceGone));
        let mut ev = [NO_EVENT; 4];
        assert_eq!(da.poll_async_events(&mut ev), 0);
        // rdma_rw: the context builds its chain; the post is refused.
        {
            let mut rw: RwFixture<1, 4> = RwFixture::new(false, a.qp.cap().max_send_sge, &[]);
            let mut data = vec![7u8; 256];
            let mut sg = [SgEntry::new(NonNull::from(&mut data[..]))];
            let mut ctx: RwCtx<4, 4> = RwCtx::new();
            // SAFETY: `data` outlives the context, destroyed below.
            let n =
                unsafe { rw.init(&mut ctx, &mut sg, (dst.addr(), dst.key()), Direction::ToDevice) }
                    .expect("init is host-only");
            assert!(n >= 1);
            match ctx.post(&mut a.qp, &mut rw.pool, 40, &[]) {
                Err(RwPostError::Post { bad: 0, err: PostErrorKind::DeviceGone }) => {}
                r => panic!("rw post after removal: {r:?}"),
            }
            // SAFETY: nothing was posted.
            unsafe { ctx.destroy::<FakeHal, 1, 4>(&mut rw.pool, &mut sg) }.expect("destroy");
        }
        // Destroy of every object: typed error, memory kept.
        assert_eq!(fr.dereg(), Err(GONE));
        assert_eq!(src.mr.dereg(), Err(GONE));
        assert_eq!(a.qp.destroy(), Err(GONE));
        assert_eq!(a.cq.destroy(), Err(GONE));
        assert!(t.elapsed() < Duration::from_secs(1), "no call waited: {:?}", t.elapsed());
        // (The caller's own pages may go: the device is gone.)
        drop(src);
        let held = FakeHal::live_pages();
        drop(fr);
        drop(a);
        // The rings, contexts and MR tables the device was given: kept.
        assert_eq!(FakeHal::live_pages(), held, "nothing the device was given is freed");
        let q = match da.close() {
            Err(CloseError::Quarantined(q)) => q,
            r => panic!("close of a gone device must report the quarantine: {r:?}"),
        };
        assert!(q.bytes > 0 && q.ids > 0, "{q:?}");
        // The peer is unaffected.
        b.nothing();
        drop(b);
        drop(dst);
        db.close().expect("peer closes cleanly");
        // The LAN side resets the function: the quarantine may go now.
        bar_a.with_device(|d| {
            d.faults().removed = false;
            d.reset()
        });
        drop(b2);
        bar_a.expect_counter(ErrorCounter::CqesDropped);
    }
    // The quarantine was leaked on purpose (`close`, not
    // `close_after_reset`): as many pages as it reported are still live.
    assert!(FakeHal::live_pages() > base);
}

#[test]
fn removal_found_by_a_control_call_then_every_entry_point_is_typed() {
    removal_case(true);
}

#[test]
fn removal_found_by_check_presence_then_every_entry_point_is_typed() {
    removal_case(false);
}

/// After removal, a close after the function reset frees everything,
/// quarantine included.
#[test]
fn removed_device_closed_after_reset_frees_everything() {
    leak_checked(|| {
        let (bar, dev) = one_device(small_fn_config(), Profile::SMALL);
        let (pd, cq) = pd_cq(&dev, 8);
        let qp = create_qp(&dev, &pd, &cq, 4);
        bar.with_device(|d| d.faults().removed = true);
        assert_eq!(dev.check_presence(), Err(CqpError::DeviceGone));
        drop((qp, cq, pd));
        assert!(dev.footprint().quarantined.bytes > 0, "QP and CQ memory quarantined");
        reset_and_close(&bar, dev);
    });
}

/// A hung CQP: `Timeout` within the configured budget, then `NeedsReset`
/// from every control entry point without waiting; the data path (the
/// device is still there) keeps working; close quarantines.
#[test]
fn hung_cqp_then_every_control_entry_point_needs_reset() {
    let _g = lock();
    let (bar_a, _bar_b, da, db) = two_devices(Profile::SMALL);
    let (mut a, b) = linked(&da, &db, 32, cap(16));
    let src = a.region(1, 3);
    let dst = b.region(1, 0);
    let mut fr = da.alloc_mr(&a.pd, 4).unwrap();
    bar_a.with_device(|d| d.faults().cqp_hang = true);
    let t = Instant::now();
    let e = da.create_cq(8).err().expect("hang");
    assert!(matches!(e, VerbsError::Cqp(CqpError::Timeout { .. })), "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(2));
    assert!(da.needs_reset() && !da.is_gone());
    assert_eq!(da.check_presence(), Err(CqpError::NeedsReset), "present, but needs a reset");
    const NR: VerbsError = VerbsError::Cqp(CqpError::NeedsReset);
    let t = Instant::now();
    assert_eq!(da.create_cq(8).err(), Some(NR));
    let mut attr = QpInitAttr { send_cq: &a.cq, recv_cq: &a.cq, cap: cap(16) };
    assert_eq!(da.create_qp(&a.pd, &mut attr).err(), Some(NR));
    let p = [src.addr()];
    let d = va_desc(src.addr(), 4096, &p, ALL);
    // SAFETY: `src` outlives the call.
    assert_eq!(unsafe { da.reg_mr(&a.pd, &d) }.err(), Some(NR));
    assert_eq!(da.alloc_mr(&a.pd, 4).err(), Some(NR));
    assert_eq!(fr.dereg(), Err(NR));
    assert!(t.elapsed() < Duration::from_millis(500), "no call waited: {:?}", t.elapsed());
    // The data path still runs.
    let sge = [src.sge(0, 32)];
    a.qp.post_send(&[signaled(1, write_op(dst.addr(), dst.key()), &sge)]).unwrap();
    assert_eq!(a.one().status, WcStatus::Success);
    assert_eq!(dst.bytes(0, 32), src.bytes(0, 32));
    // Moving a QP to ERROR needs no CQP op any more: the driver flushes it
    // in software (issue #35; `tests/swflush.rs`).
    assert_eq!(a.qp.modify(&QpAttr::new(QpState::Error)), Ok(()));
    a.qp.post_send(&[signaled(2, write_op(dst.addr(), dst.key()), &sge)]).unwrap();
    assert_eq!(a.one().status, WcStatus::WrFlushErr);
    drop(fr);
    drop(a);
    drop(src);
    assert!(matches!(da.close(), Err(CloseError::Quarantined(_))));
    drop(b);
    drop(dst);
    db.close().unwrap();
}

/// A shared QP after removal: `post_send(&self)` is refused with
/// `DeviceGone` at once (not queued for the software flush, as before),
/// `post_recv` too, and what was posted before the removal is flushed once
/// by `poll_shared`.
#[test]
fn shared_qp_posts_after_removal_are_device_gone() {
    let _g = lock();
    let base = FakeHal::live_pages();
    {
        let (bar_a, _bar_b, da, db) = two_devices(Profile::SMALL);
        let pa = da.alloc_pd().expect("pd");
        let mut ca = da.create_cq(32).expect("cq");
        let mut qa = shared_qp(&da, &pa, &ca, cap(16));
        let mut b = Side::new(&db, B, 32, cap(16));
        connect_shared(&mut qa, A, B, b.qp.qp_num());
        connect(&mut b.qp, B, A, qa.qp_num()).expect("connect b");
        let src = buf(1);
        let src_mr = reg(&da, &pa, src.paddr(), 4096, &pages_of(&src), false);
        let dst = b.region(1, 0);
        let sge = [Sge { addr: src.paddr(), length: 64, lkey: src_mr.lkey() }];
        let wr = |id| signaled(id, write_op(dst.addr(), dst.key()), &sge);
        qa.post_send(&[wr(1)]).expect("before the removal");
        let mut wc = [empty_wc(); 8];
        let got = poll_until_with(|w| ca.poll_shared([&qa], w).unwrap(), 1, 50);
        assert_eq!((got.len(), got[0].status), (1, WcStatus::Success), "{got:?}");

        bar_a.with_device(|d| d.faults().removed = true);
        qa.post_send(&[wr(2)]).expect("not detected yet: posted");
        assert_eq!(da.check_presence(), Err(CqpError::DeviceGone));
        gone_post(qa.post_send(&[wr(3)]).unwrap_err());
        let rsge = [Sge { addr: src.paddr() + 128, length: 64, lkey: src_mr.lkey() }];
        gone_post(qa.post_recv(&[RecvWr { wr_id: 4, sg_list: &rsge }]).unwrap_err());
        // WR 2 completes once, flushed; WR 3 was never taken.
        let got = poll_until_with(|w| ca.poll_shared([&qa], w).unwrap(), usize::MAX, 20);
        let ids: Vec<(u64, WcStatus)> = got.iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(ids, vec![(2, WcStatus::WrFlushErr)]);
        assert_eq!(ca.poll_shared([&qa], &mut wc).unwrap(), 0, "nothing twice");
        drop((qa, ca, src_mr, pa));
        reset_and_close(&bar_a, da);
        drop((b, dst));
        db.close().expect("peer closes cleanly");
    }
    assert_eq!(FakeHal::live_pages(), base, "every page back after the reset");
}
