//! Fault injection: every CQP op of probe and of a verbs workload failing
//! once (model `fail_cqp_op`) gives its typed error with the hardware codes,
//! leaks nothing, and leaves the device usable; a hung CQP gives Timeout.

mod common;

use common::*;
use irdma::cqp::CqpError;
use irdma::device::{CloseError, ProbeCause, ProbeStep};

// The codes the injected failure carries: chosen by the test (the model
// echoes them), so nothing here depends on a code only the model invents.
const MAJ: u16 = 0xF001;
const MIN: u16 = 0x0042;
/// "Invalid state" (spec control-path §2.6 CQP error table: major 0xFFFF,
/// minor 0x8002): a spec-defined code, the model's answer to a second
/// COMMIT_FPM_VAL.
const INVALID_STATE: (u16, u16) = (0xFFFF, 0x8002);

fn ops(bar: &ModelBar) -> u64 {
    bar.with_device(|d| d.counters().cqp_ops)
}

#[test]
fn every_probe_op_failing_is_reported_and_torn_down() {
    let _g = lock();
    let base = FakeHal::live_pages();
    // How many CQP ops a probe issues.
    let bar = ModelBar::standalone(Config::default());
    let before = ops(&bar);
    let dev = probe(&bar).unwrap();
    let total = ops(&bar) - before;
    dev.close().unwrap();
    assert!(total >= 12, "probe issued {total} ops");
    let mut steps = Vec::new();
    let (mut reprobed, mut need_reset) = (0, 0);
    for n in 0..total {
        let bar = ModelBar::standalone(Config::default());
        bar.with_device(|d| d.faults().fail_cqp_op = Some((n as u32, MAJ, MIN)));
        let err = probe(&bar).err().unwrap_or_else(|| panic!("op {n} failing must fail probe"));
        assert_eq!(err.hw_codes(), Some((MAJ, MIN)), "op {n}: {err:?}");
        assert_eq!(FakeHal::live_pages(), base, "op {n}: memory back after {err:?}");
        steps.push(err.step);
        // Everything the device knew of was torn down.
        bar.with_device(|d| {
            assert!(d.cqp().is_none(), "op {n}: CQP destroyed");
            assert!(d.sds().is_empty(), "op {n}: SDs cleared");
            assert!(d.cq(0).is_none() && d.ceq(0).is_none() && d.aeq().is_none(), "op {n}");
            assert!(d.ws_node(0).is_none(), "op {n}: WS tree removed");
        });
        if bar.with_device(|d| d.hmc_ready()) {
            // SHMC_PAGES_ALLOCATED was accepted: the function refuses a
            // second COMMIT_FPM_VAL until it is reset (a LAN-side function
            // reset, `LanOps::request_reset`).
            let e = probe(&bar).err().expect("no re-commit without a reset");
            assert_eq!((e.step, e.hw_codes()), (ProbeStep::CommitFpm, Some(INVALID_STATE)));
            need_reset += 1;
            // After the function-level reset the LAN side would do, it is
            // usable again.
            bar.with_device(|d| d.reset());
            let dev = probe(&bar).unwrap_or_else(|e| panic!("probe after reset (op {n}): {e:?}"));
            dev.close().unwrap();
        } else {
            reprobed += 1;
            // The device is usable again: a clean probe on the same function.
            let dev = probe(&bar).unwrap_or_else(|e| panic!("re-probe after op {n}: {e:?}"));
            assert!(bar.with_device(|d| d.hmc_ready()));
            dev.close().unwrap();
        }
        assert_eq!(FakeHal::live_pages(), base);
    }
    // Both halves of the sequence were exercised: failures before
    // SHMC_PAGES_ALLOCATED (the function can be probed again) and after it
    // (it needs a LAN-side reset). How many ops fall in each half depends on
    // how many SDs the model's FPM values make the driver back.
    assert!(reprobed >= 3 && need_reset >= 3, "{reprobed} re-probed, {need_reset} need a reset");
    for s in [
        ProbeStep::QueryFeatures,
        ProbeStep::QueryFpm,
        ProbeStep::CommitFpm,
        ProbeStep::BackHmc,
        ProbeStep::ShmcPagesAllocated,
        ProbeStep::CreateCcq,
        ProbeStep::CreateCeq,
        ProbeStep::CreateAeq,
        ProbeStep::WorkScheduler,
    ] {
        assert!(steps.contains(&s), "no failure reported at {s:?}: {steps:?}");
    }
}

/// Runs `f`; if it fails, the error must carry the injected codes, and the
/// retry must succeed.
fn retry<T>(what: &str, mut f: impl FnMut() -> Result<T, VerbsError>, hit: &mut bool) -> T {
    match f() {
        Ok(v) => v,
        Err(e) => {
            assert_eq!(e.hw_codes(), Some((MAJ, MIN)), "{what}: {e:?}");
            *hit = true;
            f().unwrap_or_else(|e| panic!("{what} retry: {e:?}"))
        }
    }
}

/// A verbs workload whose every step is retried once.
fn workload(dev: &Dev, hit: &mut bool) {
    let pd = dev.alloc_pd().unwrap();
    let mut cq = retry("create_cq", || dev.create_cq(32), hit);
    let mut qa = retry(
        "create_qp",
        || dev.create_qp(&pd, &mut QpInitAttr { send_cq: &cq, recv_cq: &cq, cap: cap(8) }),
        hit,
    );
    let mut qb = retry(
        "create_qp",
        || dev.create_qp(&pd, &mut QpInitAttr { send_cq: &cq, recv_cq: &cq, cap: cap(8) }),
        hit,
    );
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    retry("init", || qa.modify(&QpAttr::new(QpState::Init)), hit);
    retry("init", || qb.modify(&QpAttr::new(QpState::Init)), hit);
    for (q, peer) in [(&mut qa, nb), (&mut qb, na)] {
        let mut rtr = QpAttr::new(QpState::Rtr);
        rtr.dest_qp = peer;
        rtr.av = Some(AddressVector {
            dest_mac: A.mac,
            dest_ip: IpAddr::V4(A.ip),
            src_ip: IpAddr::V4(A.ip),
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            vlan: None,
        });
        retry("rtr", || q.modify(&rtr), hit);
        retry("rts", || q.modify(&QpAttr::new(QpState::Rts)), hit);
    }
    let b = buf(3);
    let mut rev = pages_of(&b);
    rev.reverse();
    let d = |pages| MrDesc {
        iova: 0x1000_0000,
        length: 3 * 4096,
        page_size: PageSize::Size4K,
        pages,
        zero_based: false,
        access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    };
    let pages = pages_of(&b);
    let (d0, d1) = (d(&pages), d(&rev));
    let reg = |desc: &MrDesc<'_>| {
        // SAFETY: the pages are `b`'s, declared before the MRs and so
        // dropped after them; the model only touches live `FakeHal` memory.
        unsafe { dev.reg_mr(&pd, desc) }
    };
    let mut mr0 = retry("reg_mr level 0", || reg(&d0), hit);
    let mut mr1 = retry("reg_mr level 1", || reg(&d1), hit);
    let mut fr = retry("alloc_mr", || dev.alloc_mr(&pd, 16), hit);
    // The workload still moves data after its failures.
    let data = fill(&b, 1);
    let sge = [Sge { addr: 0x1000_0000, length: 100, lkey: mr0.lkey() }];
    let wr = signaled(7, write_op(0x1000_0000 + 8192, mr1.rkey()), &sge);
    qa.post_send(&[wr]).unwrap();
    let wc = poll_n(&mut cq, 1);
    assert_eq!(wc[0].status, WcStatus::Success, "{wc:?}");
    // mr1 maps IOVA page 2 to physical page 0.
    assert_eq!(read(&b, 0, 100), data[..100].to_vec());
    retry("dereg fr", || fr.dereg(), hit);
    retry("dereg 1", || mr1.dereg(), hit);
    retry("dereg 0", || mr0.dereg(), hit);
    retry("destroy qp", || qa.destroy(), hit);
    retry("destroy qp", || qb.destroy(), hit);
    retry("destroy cq", || cq.destroy(), hit);
}

#[test]
fn every_verbs_op_failing_is_typed_leak_free_and_recoverable() {
    let _g = lock();
    let base = FakeHal::live_pages();
    let (bar, dev) = one_device(Config::default(), Profile::SMALL);
    let usage = dev.resource_usage();
    let pages = FakeHal::live_pages();
    let before = ops(&bar);
    let mut hit = false;
    workload(&dev, &mut hit);
    assert!(!hit);
    let total = ops(&bar) - before;
    // PBLE chunks stay backed once added (as in Linux): settle that first.
    let usage_after_first = dev.resource_usage();
    assert_eq!(usage_after_first.qps, usage.qps);
    let pages_after_first = FakeHal::live_pages();
    assert!(pages_after_first >= pages);
    for n in 0..total {
        bar.with_device(|d| d.faults().fail_cqp_op = Some((n as u32, MAJ, MIN)));
        let mut hit = false;
        workload(&dev, &mut hit);
        assert!(hit, "op {n} of {total} was not hit");
        assert_eq!(dev.resource_usage(), usage_after_first, "op {n}: ids back");
        assert_eq!(FakeHal::live_pages(), pages_after_first, "op {n}: memory back");
    }
    dev.close().unwrap();
    assert_eq!(FakeHal::live_pages(), base);
}

#[test]
fn hung_cqp_times_out() {
    let _g = lock();
    let base = FakeHal::live_pages();
    // During probe: the first op after the create handshake hangs.
    let bar = ModelBar::standalone(Config::default());
    bar.with_device(|d| d.faults().cqp_hang = true);
    let err = probe(&bar).err().expect("hang must fail probe");
    assert_eq!(err.step, ProbeStep::QueryFeatures);
    assert!(matches!(err.cause, ProbeCause::Cqp(CqpError::Timeout { .. })), "{err:?}");
    // The device may still read the CQP's rings and write the features
    // buffer: nothing of that is freed (issue #12 item 2).
    assert!(FakeHal::live_pages() > base, "CQP rings and scratch page kept");

    // After probe: a verb times out; the device now needs a reset, and what
    // the device may own is quarantined, never freed.
    let base = FakeHal::live_pages();
    let (bar, dev) = default_device();
    let held = dev.footprint().current_bytes;
    bar.with_device(|d| d.faults().cqp_hang = true);
    let t = std::time::Instant::now();
    let e = dev.create_cq(8).err().expect("hang must fail create_cq");
    assert!(matches!(e, VerbsError::Cqp(CqpError::Timeout { .. })), "{e:?}");
    assert!(t.elapsed() < std::time::Duration::from_secs(2));
    let f = dev.footprint();
    assert!(f.needs_reset && dev.needs_reset());
    // (8 + 1) × 2 CQEs of 32 B: one page; the shadow area: one page.
    assert_eq!((f.quarantined.bytes, f.quarantined.buffers, f.quarantined.ids), (8192, 2, 1));
    // Later CQP calls are refused at once, without touching the device.
    let t = std::time::Instant::now();
    let e = dev.create_cq(8).err().expect("needs a reset");
    assert_eq!(e, VerbsError::Cqp(CqpError::NeedsReset));
    assert!(t.elapsed() < std::time::Duration::from_millis(40));
    let q = match dev.close() {
        Err(CloseError::Quarantined(q)) => q,
        r => panic!("teardown must report the quarantine: {r:?}"),
    };
    // Everything the device knew of (SDs, CQP, CCQ, CEQ, AEQ, scratch) plus
    // the CQ is kept, and leaked on purpose: nothing else.
    assert_eq!(q.bytes, held + 8192);
    assert_eq!(FakeHal::live_pages() - base, (q.bytes / 4096) as usize, "nothing freed");
}

/// Probe with the CQP hanging at each op in turn: every step's memory the
/// device may own (the CQP rings, the CCQ, CEQ and AEQ rings, the SDs) is
/// kept, never freed (issue #12 item 2).
#[test]
fn probe_hanging_at_each_op_frees_nothing_the_device_may_own() {
    let _g = lock();
    let bar = ModelBar::standalone(Config::default());
    let before = bar.with_device(|d| d.counters().cqp_doorbells);
    let dev = probe(&bar).unwrap();
    let doorbells = bar.with_device(|d| d.counters().cqp_doorbells) - before;
    dev.close().unwrap();
    let mut leaked: Vec<(ProbeStep, usize)> = Vec::new();
    for n in 1..doorbells {
        let base = FakeHal::live_pages();
        let bar = ModelBar::standalone(Config::default());
        bar.with_device(|d| d.faults().hang_cqp_at = Some(n as u32));
        let err = probe(&bar).err().unwrap_or_else(|| panic!("hang at doorbell {n} must fail"));
        assert!(matches!(err.cause, ProbeCause::Cqp(CqpError::Timeout { .. })), "{n}: {err:?}");
        let kept = FakeHal::live_pages() - base;
        assert!(kept > 0, "doorbell {n} ({:?}): memory freed after a hang", err.step);
        leaked.push((err.step, kept));
    }
    eprintln!("pages kept per hung probe step: {leaked:?}");
    let at = |s: ProbeStep| leaked.iter().find(|(x, _)| *x == s).map(|(_, p)| *p);
    // Each ring created at a hung step is kept on top of what came before.
    for (s, prev) in [
        (ProbeStep::CreateCcq, ProbeStep::ShmcPagesAllocated),
        (ProbeStep::CreateCeq, ProbeStep::CreateCcq),
        (ProbeStep::CreateAeq, ProbeStep::CreateCeq),
    ] {
        let (Some(a), Some(b)) = (at(s), at(prev)) else { panic!("{s:?}/{prev:?}: {leaked:?}") };
        assert!(a > b, "{s:?} keeps its ring: {a} vs {b} pages");
    }
}

/// A hang during QP create, MR registration and object teardown: the
/// queues, the STag and PBLEs, and dropped objects' rings are quarantined.
#[test]
fn verbs_hangs_quarantine_what_the_device_may_own() {
    let _g = lock();
    let (bar, dev) = default_device();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8).unwrap();
    // QP create hangs: rings, context and tracking memory kept, id kept.
    let usage = dev.resource_usage();
    let pages = FakeHal::live_pages();
    bar.with_device(|d| d.faults().cqp_hang = true);
    let mut attr = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap: cap(16) };
    let e = dev.create_qp(&pd, &mut attr).err().expect("hang");
    assert!(matches!(e, VerbsError::Cqp(CqpError::Timeout { .. })), "{e:?}");
    let q = dev.footprint().quarantined;
    eprintln!("create_qp hang: {q:?}, live +{}", FakeHal::live_pages() - pages);
    assert_eq!(q.ids, 1);
    assert!(q.bytes >= 3 * 4096, "{q:?}");
    assert_eq!(FakeHal::live_pages() - pages, (q.bytes / 4096) as usize, "none of it freed");
    assert_eq!(dev.resource_usage().qps, usage.qps + 1, "QP id not reused");
    // The CQ's destroy in Drop cannot run now: its memory joins the rest.
    let live = FakeHal::live_pages();
    drop(cq);
    let q2 = dev.footprint().quarantined;
    assert_eq!((q2.bytes - q.bytes, q2.ids - q.ids), (8192, 1));
    assert_eq!(FakeHal::live_pages(), live, "the CQ's ring and shadow are not freed");
    drop(pd);
    let _ = dev.close();

    // REG_MR hangs: STag and PBLEs stay allocated.
    let (bar, dev) = default_device();
    let pd = dev.alloc_pd().unwrap();
    let b = buf(3);
    // Three scattered pages: a level-1 PBL.
    let pages = [b.paddr(), b.paddr() + 2 * 4096, b.paddr() + 4096];
    let d = va_desc(b.paddr(), 3 * 4096, &pages, Access::LOCAL_WRITE);
    let usage = dev.resource_usage();
    bar.with_device(|d| d.faults().cqp_hang = true);
    // SAFETY: `b` outlives the device (dropped after `dev.close()` below),
    // so the quarantined registration never names freed pages; the model
    // only touches live `FakeHal` allocations.
    let e = unsafe { dev.reg_mr(&pd, &d) }.err().expect("hang");
    assert!(matches!(e, VerbsError::Cqp(CqpError::Timeout { .. })), "{e:?}");
    let u = dev.resource_usage();
    assert_eq!(u.mrs, usage.mrs + 1, "STag index not returned");
    assert!(u.pble_free < usage.pble_free, "PBLEs not returned");
    assert_eq!(dev.footprint().quarantined.ids, 2);
    drop(pd);
    let _ = dev.close();
    drop(b);

    // A destroy that times out in Drop: the QP's memory is quarantined.
    let (bar, dev) = default_device();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(8).unwrap();
    let qp = create_qp(&dev, &pd, &cq, 16);
    let pages = FakeHal::live_pages();
    bar.with_device(|d| d.faults().cqp_hang = true);
    drop(qp);
    let q = dev.footprint().quarantined;
    assert!(dev.needs_reset() && q.ids == 1 && q.bytes >= 3 * 4096, "{q:?}");
    assert_eq!(FakeHal::live_pages(), pages, "nothing freed");
    drop(cq);
    drop(pd);
    let _ = dev.close();
}

/// Teardown after a timed-out destroy: nothing the device knew of is freed;
/// after a function reset, `close_after_reset` frees it all.
#[test]
fn teardown_after_a_hang_quarantines_and_reset_releases() {
    let _g = lock();
    let base = FakeHal::live_pages();
    let (bar, dev) = default_device();
    let held = dev.footprint().current_bytes;
    bar.with_device(|d| d.faults().cqp_hang = true);
    let q = match dev.close() {
        Err(CloseError::Quarantined(q)) => q,
        r => panic!("{r:?}"),
    };
    assert_eq!(q.bytes, held, "AEQ, CEQ, CCQ, CQP rings, SDs, scratch: all kept");
    assert_eq!(FakeHal::live_pages() - base, (held / 4096) as usize);

    // With a reset: a verb hangs, the LAN side is asked for a reset on
    // close, and once it happened the memory can be freed.
    let base = FakeHal::live_pages();
    let (bar, dev) = default_device();
    bar.with_device(|d| d.faults().cqp_hang = true);
    assert!(dev.create_cq(8).is_err());
    assert!(dev.footprint().quarantined.bytes > 0);
    reset_and_close(&bar, dev);
    assert_eq!(FakeHal::live_pages(), base, "freed after the reset");
}

/// `close_with_lan` on a device that needs a reset asks the LAN side for it.
#[test]
fn close_with_lan_requests_the_reset() {
    struct Lan(u32);
    impl irdma::lan::LanOps for Lan {
        fn register_qset(&mut self, _: u16, _: u8, _: u16) -> Result<u32, irdma::lan::LanError> {
            Ok(7)
        }
        fn unregister_qset(&mut self, _: u16, _: u32) -> Result<(), irdma::lan::LanError> {
            Ok(())
        }
        fn set_rdma_filter(&mut self, _: u16, _: bool) -> Result<(), irdma::lan::LanError> {
            Ok(())
        }
        fn request_reset(&mut self) {
            self.0 += 1;
        }
    }
    let _g = lock();
    let (bar, dev) = default_device();
    let mut lan = Lan(0);
    bar.with_device(|d| d.faults().cqp_hang = true);
    assert!(dev.create_cq(8).is_err());
    assert!(matches!(dev.close_with_lan(&mut lan), Err(CloseError::Quarantined(_))));
    assert_eq!(lan.0, 1, "reset requested");
}

/// Each teardown op refused in turn (error codes, not a hang): the memory
/// that op should have released — the AEQ ring, the CEQ ring, the SDs — is
/// quarantined and reported; everything else is freed.
#[test]
fn a_refused_destroy_at_teardown_keeps_only_what_it_covers() {
    let _g = lock();
    let mut kept = Vec::new();
    for n in 0..32u32 {
        let base = FakeHal::live_pages();
        let (bar, dev) = default_device();
        bar.with_device(|d| d.faults().fail_cqp_op = Some((n, MAJ, MIN)));
        let r = dev.close();
        let live = FakeHal::live_pages() - base;
        match r {
            Err(CloseError::Quarantined(q)) => {
                assert_eq!(live, (q.bytes / 4096) as usize, "op {n}: only the quarantine stays");
                kept.push((n, q.buffers, live));
            }
            Err(CloseError::Cqp(e)) => {
                assert_eq!(irdma::device::cqp_codes(e), Some((MAJ, MIN)), "op {n}");
                assert_eq!(live, 0, "op {n}: {e:?} covers no memory: all freed");
            }
            Err(e @ CloseError::Lan(_)) => panic!("op {n}: {e:?}"),
            Ok(()) => {
                // Past the last teardown op.
                assert_eq!(live, 0);
                break;
            }
        }
    }
    eprintln!("teardown op refused → (op, buffers, pages) kept: {kept:?}");
    // WS leaf, VSI node, root cover no memory; the AEQ (op 3) and CEQ (op 4)
    // destroys one ring each.
    assert!(kept.iter().any(|k| k.0 == 3 && k.1 == 1), "AEQ ring: {kept:?}");
    assert!(kept.iter().any(|k| k.0 == 4 && k.1 == 1), "CEQ ring: {kept:?}");
    // A refused SD clear keeps every SD (2 MiB each), nothing else.
    assert!(kept.iter().any(|k| k.2 > 512 && k.2 % 512 == 0), "SDs: {kept:?}");
}

/// Issue #12 item 2 with CQ resize: a MODIFY_CQ that times out may already
/// have moved the device to the new ring, so the new ring is kept
/// (quarantined, counted by `footprint`), not freed; the CQ keeps working
/// state for its destroy, which then needs a reset.
#[test]
fn hung_resize_quarantines_the_new_ring() {
    let _g = lock();
    let (bar, dev) = default_device();
    let mut cq = dev.create_cq(8).unwrap();
    let pages = FakeHal::live_pages();
    bar.with_device(|d| d.faults().cqp_hang = true);
    let e = cq.resize(100).expect_err("hang");
    assert!(matches!(e, VerbsError::Cqp(CqpError::Timeout { .. })), "{e:?}");
    let q = dev.footprint().quarantined;
    // (100 + 1) × 2 entries of 32 bytes: two pages.
    assert_eq!(q.bytes, 8192, "{q:?}");
    assert_eq!(FakeHal::live_pages() - pages, 2, "the new ring is not freed");
    assert!(dev.needs_reset());
    drop(cq);
    let _ = dev.close();
}
