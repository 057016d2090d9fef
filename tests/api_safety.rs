//! Issue #28 items 5 and 6: memory a resized CQ's old rings occupy stays
//! with the device until its (deferred) DESTROY_CQ completes, and a CQ poll
//! refuses a shared QP of another device.

mod common;
mod e2e_common;

use e2e_common::*;
use irdma::verbs::{WqInitAttr, WqType};
use mock_bar::device::QueueMem;

/// The QPs these tests create: a few one-SGE WRs each way.
const CAP: QpCap = qp_cap(16, 16, 1, 1);

/// Bytes of the ring `create_cq(4)` makes: (4 + 1) × 2 entries of 32 bytes.
const RING4: usize = 10 * 32;

/// A CQ resized (its old ring kept for CQEs still in it) and then dropped
/// while a QP still completes to it: the DESTROY_CQ waits for the QP, and
/// until it ran every ring the device was given — the old one included —
/// stays allocated. Once the QP is destroyed the CQ is destroyed and every
/// page comes back.
#[test]
fn resized_cq_dropped_under_a_live_qp_keeps_its_old_ring_until_destroyed() {
    with_small_device(|bar, dev| {
        let (pd, mut cq) = pd_cq(dev, 4);
        let id = cq.id();
        let mut qp = create_qp(dev, &pd, &cq, 8);
        let ring = bar.with_device(|d| d.cq(id).map(|c| c.ring));
        let Some(QueueMem::Phys(old)) = ring else { panic!("contiguous ring: {ring:?}") };
        assert!(FakeHal::contains(old, RING4));
        cq.resize(64).unwrap();
        assert_eq!(cq.pending_resizes(), 1, "the old ring is kept");
        let before_drop = FakeHal::live_pages();
        drop(cq);
        // DESTROY_CQ deferred: the device still holds the CQ (and so every
        // ring it was given for it).
        assert!(bar.with_device(|d| d.cq(id).is_some()), "the CQ still exists in the device");
        assert!(
            FakeHal::contains(old, RING4),
            "the old ring was freed while the device still holds the CQ"
        );
        assert_eq!(FakeHal::live_pages(), before_drop, "nothing freed before DESTROY_CQ");
        qp.destroy().unwrap();
        assert!(bar.with_device(|d| d.cq(id).is_none()), "destroyed with its last QP");
        assert!(FakeHal::live_pages() < before_drop, "the CQ's rings came back");
    });
}

/// `Cq::poll_shared` and `CqPoller::register` with a shared QP of another
/// device are refused with a typed error, nothing consumed; a QP of the
/// same device on another CQ is refused by the poller and harmless to
/// `poll_shared`.
#[test]
fn a_cq_refuses_a_shared_qp_of_another_device() {
    leak_checked(|| {
        let (_bar_a, _bar_b, da, db) = two_devices_with(Config::default(), Profile::SMALL);
        let ((pa, mut ca), (pb, cb)) = pd_cq_pairs(&da, 64, &db, 64);
        let ca2 = da.create_cq(64).unwrap();
        let cap = CAP;
        let mut qa = shared_qp(&da, &pa, &ca, cap);
        let mut qa2 = shared_qp(&da, &pa, &ca2, cap);
        let mut qb = shared_qp(&db, &pb, &cb, cap);
        // The two devices number their QPs alike: B's QP has A's number,
        // so only the device tells them apart.
        assert_eq!(qa.qp_num(), qb.qp_num(), "same QP number on both devices");
        let (na, nb) = (qa.qp_num(), qb.qp_num());
        connect_shared(&mut qa, A, B, nb);
        connect_shared(&mut qb, B, A, na);

        let (src, dst) = (region_on(&da, &pa, 1), region_on(&db, &pb, 1));
        let sge = [src.sge(0, 64)];
        let wr = signaled(7, write_op(dst.addr(), dst.key()), &sge);
        qa.post_send(&[wr]).unwrap();

        let foreign = VerbsError::Invalid { what: irdma::Phrase::new(&"QP of another device") };
        let mut wc = [empty_wc(); 4];
        assert_eq!(ca.poll_shared([&qb], &mut wc), Err(foreign));
        assert_eq!(ca.poll_shared([&qa, &qb], &mut wc), Err(foreign), "one foreign QP is enough");
        // A QP of this device on another CQ: no CQE of this CQ names it,
        // so a poll listing it is harmless (it is only locked); the poller
        // refuses to register it.
        assert_eq!(ca.poll_shared([&qa2], &mut wc), Ok(0));
        let other_cq = VerbsError::Invalid { what: irdma::Phrase::new(&"QP not on this CQ") };
        {
            let mut p = ca.poller::<2>();
            assert_eq!(p.register(&qb), Err(foreign));
            assert_eq!(p.register(&qa2), Err(other_cq));
            assert!(p.is_empty());
            p.register(&qa).unwrap();
        }
        // Nothing was consumed: A's completion comes to A's QP.
        let mut got = 0;
        for _ in 0..100 {
            got += ca.poll_shared([&qa], &mut wc[got..]).unwrap();
            if got > 0 {
                break;
            }
        }
        assert_eq!(got, 1);
        assert_eq!((wc[0].wr_id, wc[0].qp_num, wc[0].status), (7, na, WcStatus::Success));
        for q in [&mut qa, &mut qa2, &mut qb] {
            q.destroy().unwrap();
        }
    });
}

/// Creating a QP, an MR, a fast-register MR or a WQ with a PD or CQ of
/// another device is refused with a typed error, and nothing is taken: the
/// other device's ids mean nothing here, and the reference this device
/// would count (keeping the PD id or the CQ alive under the QP) would be
/// the other device's.
#[test]
fn objects_of_another_device_are_refused_at_create() {
    leak_checked(|| {
        let (_bar_a, _bar_b, da, db) = two_devices_with(Config::default(), Profile::SMALL);
        let (pa, pb) = (da.alloc_pd().unwrap(), db.alloc_pd().unwrap());
        let (ca, cb) = (da.create_cq(16).unwrap(), db.create_cq(16).unwrap());
        let usage = da.resource_usage();
        let cap = CAP;
        let invalid = |e: VerbsError, what: &str| match e {
            VerbsError::Invalid { what: w } => assert_eq!(w.as_str(), what),
            other => panic!("{what}: {other:?}"),
        };
        let qp = |pd, s, r| da.create_qp(pd, &mut QpInitAttr { send_cq: s, recv_cq: r, cap });
        invalid(qp(&pb, &ca, &ca).err().unwrap(), "PD of another device");
        invalid(qp(&pa, &cb, &ca).err().unwrap(), "send CQ of another device");
        invalid(qp(&pa, &ca, &cb).err().unwrap(), "receive CQ of another device");
        let shared = da.create_shared_qp(&pa, &mut QpInitAttr { send_cq: &cb, recv_cq: &ca, cap });
        invalid(shared.err().unwrap(), "send CQ of another device");
        invalid(da.alloc_mr(&pb, 4).err().unwrap(), "PD of another device");
        let mem = buf(1);
        let pages = pages_of(&mem);
        let desc = va_desc(mem.paddr(), 4096, &pages, Access::LOCAL_WRITE);
        // SAFETY: `mem` outlives the call, and nothing is registered (refused).
        invalid(unsafe { da.reg_mr(&pb, &desc) }.err().unwrap(), "PD of another device");
        let mut wa = WqInitAttr { wq_type: WqType::Rq, max_wr: 4, max_sge: 1, cq: &cb };
        invalid(da.create_wq(&mut wa).err().unwrap(), "CQ of another device");
        assert_eq!(da.resource_usage(), usage, "nothing taken on A");
        // The same calls with A's own objects work.
        let ok = qp(&pa, &ca, &ca).unwrap();
        drop(ok);
        drop((ca, cb, pa, pb));
        da.close().unwrap();
        db.close().unwrap();
    });
}
