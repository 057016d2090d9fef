//! Fault injection: every CQP op of probe and of a verbs workload failing
//! once (model `fail_cqp_op`) gives its typed error with the hardware codes,
//! leaks nothing, and leaves the device usable; a hung CQP gives Timeout.

mod common;

use common::*;
use irdma::cqp::CqpError;
use irdma::device::{ProbeCause, ProbeStep};

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
    let mut mr0 = retry("reg_mr level 0", || dev.reg_mr(&pd, &d(&pages)), hit);
    let mut mr1 = retry("reg_mr level 1", || dev.reg_mr(&pd, &d(&rev)), hit);
    let mut fr = retry("alloc_mr", || dev.alloc_mr(&pd, 16), hit);
    // The workload still moves data after its failures.
    let data = fill(&b, 1);
    let sge = [Sge { addr: 0x1000_0000, length: 100, lkey: mr0.lkey() }];
    let wr = SendWr {
        wr_id: 7,
        opcode: WrOpcode::RdmaWrite { remote_addr: 0x1000_0000 + 8192, rkey: mr1.rkey() },
        flags: SendFlags::SIGNALED,
        sg_list: &sge,
    };
    qa.post_send(&[wr]).unwrap();
    let wc = poll_n(&mut cq, &mut [&mut qa, &mut qb], 1);
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
    let bar = ModelBar::standalone(Config::default());
    let dev = probe_as(&bar, A, Profile::SMALL);
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
    assert_eq!(FakeHal::live_pages(), base);

    // After probe: a verb times out; the device is then dead but tears down.
    let bar = ModelBar::standalone(Config::default());
    let dev = probe(&bar).unwrap();
    bar.with_device(|d| d.faults().cqp_hang = true);
    let t = std::time::Instant::now();
    let e = dev.create_cq(8).err().expect("hang must fail create_cq");
    assert!(matches!(e, VerbsError::Cqp(CqpError::Timeout { .. })), "{e:?}");
    assert!(t.elapsed() < std::time::Duration::from_secs(2));
    assert!(dev.close().is_err(), "teardown reports the dead CQP");
    assert_eq!(FakeHal::live_pages(), base, "memory freed even so");
}
