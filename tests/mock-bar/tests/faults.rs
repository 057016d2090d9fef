//! Fault injection: every knob of `FaultPlan`, and the trace.

mod common;
use common::*;
use mock_bar::Event;
use mock_bar::regs::{self, ae, op, qps};

fn nop() -> [u64; 8] {
    [0, 0, 0, hdr(op::NOP, 0), 0, 0, 0, 0]
}

#[test]
fn nth_cqp_op_fails_with_chosen_codes_and_is_not_executed() {
    let mut h = Harness::new();
    h.bring_up();
    h.dev(|d| d.faults().fail_cqp_op = Some((1, 0xF001, 0x0042)));
    h.op_ok(nop());
    let ring = h.alloc(32 * 32, 256);
    let sh = h.alloc(64, 64);
    let c = h.op(Harness::create_cq_wqe(5, 32, ring, sh, 1, Some(0)));
    assert!(c.error);
    assert_eq!((c.major, c.minor), (0xF001, 0x0042));
    assert_eq!(h.rd(regs::CQPERRCODES), 0xF001_0042);
    assert!(h.dev(|d| d.cq(5).is_none()), "the failed op had no effect");
    h.op_ok(Harness::create_cq_wqe(5, 32, ring, sh, 1, Some(0)));
}

#[test]
fn hung_cqp_does_not_answer_until_released() {
    let mut h = Harness::new();
    assert_eq!(h.create_cqp(64), 1);
    h.dev(|d| d.faults().cqp_hang = true);
    h.post(nop());
    h.post(nop());
    for _ in 0..5 {
        assert_eq!(h.rd(regs::CQPTAIL), 0, "no progress while hung");
    }
    h.dev(|d| d.faults().cqp_hang = false);
    h.post(nop());
    assert_eq!(h.rd(regs::CQPTAIL), 3, "all three processed after the hang");
}

#[test]
fn delayed_completion_shows_up_after_n_polls() {
    let mut h = Harness::new();
    h.create_cqp(64);
    h.dev(|d| d.faults().cqp_delay_polls = 3);
    h.post(nop());
    assert_eq!(h.rd(regs::CQPTAIL), 0);
    assert_eq!(h.rd(regs::CQPTAIL), 0);
    assert_eq!(h.rd(regs::CQPTAIL), 1, "third poll sees it");
}

#[test]
fn surprise_removal_reads_all_ones_and_stops_dma() {
    let mut h = Harness::new();
    h.bring_up();
    let faults_before = h.dev(|d| d.counters().clone());
    h.dev(|d| d.faults().removed = true);
    for r in [regs::GLPE_CPUSTATUS0, regs::CQPTAIL, regs::CCQPSTATUS, regs::GLPCI_LBARCTRL] {
        assert_eq!(h.rd(r), u32::MAX);
    }
    let ring = h.alloc(32 * 32, 256);
    let sh = h.alloc(64, 64);
    h.post(Harness::create_cq_wqe(5, 32, ring, sh, 1, Some(0)));
    assert!(h.ccq_poll().is_none(), "no completion written");
    let after = h.dev(|d| d.counters().clone());
    assert_eq!(after.cqp_ops, faults_before.cqp_ops, "no op executed");
    assert_eq!(after.cqes, faults_before.cqes);
}

#[test]
fn lost_doorbell_leaves_work_until_the_next_one() {
    let mut h = Harness::new();
    h.bring_up();
    h.dev(|d| d.faults().lose_doorbells = 1);
    h.post(nop());
    assert!(h.ccq_poll().is_none(), "doorbell lost");
    assert_eq!(h.dev(|d| d.counters().lost_doorbells), 1);
    h.post(nop());
    assert!(h.ccq_poll().is_some());
    assert!(h.ccq_poll().is_some(), "both WQEs processed by the second doorbell");
}

#[test]
fn dropped_cqp_completion_still_executes() {
    let mut h = Harness::new();
    h.bring_up();
    h.dev(|d| d.faults().drop_cqp_completions = 1);
    let ring = h.alloc(32 * 32, 256);
    let sh = h.alloc(64, 64);
    let tail = h.rd(regs::CQPTAIL);
    h.post(Harness::create_cq_wqe(5, 32, ring, sh, 1, Some(0)));
    assert!(h.ccq_poll().is_none());
    assert_eq!(h.rd(regs::CQPTAIL), tail + 1);
    assert!(h.dev(|d| d.cq(5).is_some()));
}

#[test]
fn error_cqe_on_the_nth_wqe() {
    let (mut h, mut q, mut tx, stag) = knob_setup();
    h.dev(|d| d.faults().fail_wqe = Some((1, 0x0003, 0x0005)));
    post_writes(&mut h, &mut q, stag, 3);
    assert!(!h.poll_cq(&mut tx).unwrap().error);
    let e = h.poll_cq(&mut tx).unwrap();
    assert!(e.error);
    assert_eq!((e.major, e.minor, e.op, e.wqe_idx), (3, 5, sqop::WRITE, 1));
    assert!(h.poll_cq(&mut tx).is_none(), "the QP stopped");
    assert_eq!(h.dev(|d| d.qp(10).unwrap().state), qps::ERROR);
    assert_eq!(h.aeq_poll().map(|a| a.0), Some(ae::LCE_QP_CATASTROPHIC));
}

#[test]
fn trace_records_what_the_device_did() {
    let mut h = Harness::new();
    h.bring_up();
    let idx = h.post(nop());
    let t: Vec<Event> = h.dev(|d| d.trace().cloned().collect());
    assert!(t.iter().any(|e| matches!(e, Event::CqpCreated { .. })));
    assert!(
        t.iter()
            .any(|e| matches!(e, Event::CqpOp { idx: i, opcode: 0x24, major: 0, .. } if *i == idx))
    );
    assert!(t.iter().any(|e| matches!(e, Event::Cqe { cq: 0, .. })));
    assert!(t.iter().any(|e| matches!(e, Event::RegWrite { off: regs::CQPDB, .. })));
}

#[test]
fn aeq_overflow_sets_the_overflow_bit_on_the_next_entry() {
    let mut h = Harness::new();
    h.create_cqp(64);
    h.back_hmc();
    h.create_ccq();
    assert!(!h.create_ceq(0, 16).error);
    assert!(!h.create_aeq(2).error);
    h.op_ok([0, 0, 1, hdr(op::MANAGE_ARP, 1 | 1 << 42), 0, 0, 0, 0]);
    h.create_cq(3, 32);
    h.create_cq(4, 32);
    h.create_qp(10, 1, 3, 4, 5, 5, 10, 2);
    // GEN_AE (FLUSH_WQES with GENERATE_AE only): AE code 0x0208, source SQ
    let gen_ae = [0, 0x0208 | f(5, 19, 16), 0, hdr(op::FLUSH_WQES, 10 | 1 << 59), 0, 0, 0, 0];
    for _ in 0..3 {
        h.op_ok(gen_ae);
    }
    assert_eq!(h.dev(|d| d.counters().aeqes), 2);
    assert_eq!(h.dev(|d| d.counters().aeqes_dropped), 1, "ring full: third AE lost");
    // consume both (aeq_poll writes AEQALLOC), then the next AE says OVERFLOW
    assert_eq!(h.aeq_poll().map(|a| (a.0, a.1, a.2)), Some((0x0208, 5, 10)));
    assert!(h.aeq_poll().is_some());
    h.op_ok(gen_ae);
    let r = h.aeq.as_ref().unwrap();
    let w1 = h.mem.get64(r.pa + r.head as u64 * 16 + 8);
    assert_eq!(g(w1, 33, 33), 1, "OVERFLOW bit");
    assert_eq!(g(w1, 56, 54), qps::RTS as u64, "IWSTATE");
}

#[test]
fn critical_error_and_function_reset() {
    let mut h = Harness::new();
    h.bring_up();
    assert_eq!(h.rd(regs::GLPE_CRITERR), 0);
    h.dev(|d| d.faults().critical_error = 0x0001_0001);
    assert_eq!(h.rd(regs::GLPE_CRITERR), 0x0001_0001);
    let ops = h.dev(|d| d.counters().cqp_ops);
    h.dev(|d| d.reset());
    assert_eq!(h.rd(regs::GLPE_CRITERR), 0, "reset clears the error");
    assert_eq!(h.rd(regs::CCQPSTATUS), 0, "CQP gone");
    assert!(h.dev(|d| d.cq(0).is_none() && d.fpm_layout().is_none() && d.sds().is_empty()));
    assert_eq!(h.dev(|d| d.counters().cqp_ops), ops, "counters kept");
    assert!(h.dev(|d| d.trace_dump()).contains("Reset"));
    // and the driver can bring it up again from scratch
    h.ccq = None;
    h.bring_up();
    h.op_ok(nop());
}

/// A self-connected QP on CQs 3 (tx) / 4 (rx) and its STag, for the knobs
/// and the error-CQE test.
fn knob_setup() -> (Harness, TQp, TCq, u32) {
    let mut h = Harness::new();
    h.bring_up();
    let (tx, stag) = h.loopback_mr();
    let q = h.create_qp(10, 1, 3, 4, 5, 5, 10, 2);
    (h, q, tx, stag)
}

/// `n` signalled 4-byte WRITEs (0 → 0x100 through `stag`) on `q`, each
/// posted with its doorbell.
fn post_writes(h: &mut Harness, q: &mut TQp, stag: u32, n: usize) {
    let sg = Sge { addr: 0, stag, len: 4 };
    for _ in 0..n {
        h.post_send(q, |v| sq_frag_wqe(sqop::WRITE, stag, 0x100, &[sg], None, true, v));
    }
}

#[test]
fn a_failed_cqe_write_raises_lce_cq_catastrophic() {
    let (mut h, mut q, mut tx, stag) = knob_setup();
    h.dev(|d| d.faults().fail_cqe_writes = 1);
    post_writes(&mut h, &mut q, stag, 2);
    assert_eq!(h.poll_cq(&mut tx).map(|c| c.wqe_idx), Some(1), "the first CQE was lost");
    assert!(h.poll_cq(&mut tx).is_none());
    let (code, src, id, _) = h.aeq_poll().expect("AE");
    assert_eq!((code, src, id), (ae::LCE_CQ_CATASTROPHIC, ae::SRC_CQ, 3));
    assert_eq!(h.dev(|d| d.counters().cqes_dropped), 1);
}

#[test]
fn a_killed_cq_raises_lce_cq_catastrophic_and_takes_no_more_cqes() {
    let (mut h, mut q, mut tx, stag) = knob_setup();
    h.dev(|d| d.faults().kill_cq = Some(3));
    post_writes(&mut h, &mut q, stag, 3);
    // Unlike `fail_cqe_writes`, no later CQE reaches the CQ.
    assert!(h.poll_cq(&mut tx).is_none(), "the CQ is in error");
    let (code, src, id, _) = h.aeq_poll().expect("AE");
    assert_eq!((code, src, id), (ae::LCE_CQ_CATASTROPHIC, ae::SRC_CQ, 3));
    assert!(h.aeq_poll().is_none(), "one AE");
    assert_eq!(h.dev(|d| d.counters().cqes_dropped), 3);
    assert_eq!(h.dev(|d| d.faults().kill_cq), None, "fired once");
}

#[test]
fn several_flush_cqes_and_a_chosen_flush_wqe_index() {
    let (mut h, mut q, mut tx, stag) = knob_setup();
    // three WQEs the device never reads (late doorbell), then ERROR + flush
    h.dev(|d| d.faults().late_sq_doorbells = 1);
    let sg = Sge { addr: 0, stag, len: 4 };
    for _ in 0..3 {
        h.write_sq(&mut q, &|v| sq_frag_wqe(sqop::WRITE, stag, 0x100, &[sg], None, true, v));
    }
    h.ring(&q);
    assert!(h.poll_cq(&mut tx).is_none(), "not read yet");
    assert!(!h.modify_qp(&q, 6).error);
    h.dev(|d| {
        d.faults().flush_cqes_per_queue = 8;
        d.faults().flush_sq_wqe_idx = Some(0x55);
    });
    let flush = [0, 0, 0, hdr(op::FLUSH_WQES, 10 | 1 << 61), 0, 0, 0, 0];
    h.op_ok(flush);
    let idx: Vec<u32> = std::iter::from_fn(|| h.poll_cq(&mut tx)).map(|c| c.wqe_idx).collect();
    assert_eq!(idx, vec![0x55, 1, 2], "one flush CQE per WQE, the first with the chosen index");
    // the late doorbell finds the QP in ERROR: nothing runs
    h.dev(|d| d.step());
    assert!(h.poll_cq(&mut tx).is_none());
    assert_eq!(h.dev(|d| d.counters().sq_wqes), 0);
}

#[test]
fn inject_ae_names_any_id() {
    let (mut h, _q, _tx, _) = knob_setup();
    h.dev(|d| d.inject_ae(ae::LCE_QP_CATASTROPHIC, ae::SRC_SQ, 77));
    assert_eq!(h.aeq_poll().map(|a| (a.0, a.2, a.3)), Some((ae::LCE_QP_CATASTROPHIC, 77, 0)));
}
