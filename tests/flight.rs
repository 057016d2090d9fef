//! The flight recorder (issue #19): a fault leaves its trace on the device
//! — a refused CQP op with its opcode and codes, and an access error with
//! the async event, the QP's move to ERROR and its flush — readable with
//! `Device::flight_recorder`, oldest first.

mod common;
mod e2e_common;

use e2e_common::*;
use irdma::flight::{CqpOutcome, FlightEvent};

#[test]
fn a_refused_cqp_op_is_in_the_flight_recorder() {
    let _g = lock();
    let (bar, dev) = one_device(small_fn_config(), Profile::SMALL);
    let recs: Vec<_> = dev.flight_recorder().collect();
    assert!(
        recs.iter().any(|r| r.event == FlightEvent::Probe { failed_at: None }),
        "probe recorded: {recs:?}"
    );
    assert!(
        recs.iter().any(|r| matches!(r.event, FlightEvent::Cqp { outcome: CqpOutcome::Ok, .. })),
        "probe's CQP ops recorded: {recs:?}"
    );
    use irdma::device::ProbeStep;
    let steps: Vec<ProbeStep> = recs
        .iter()
        .filter_map(|r| match r.event {
            FlightEvent::ProbeStep { step } => Some(step),
            _ => None,
        })
        .collect();
    assert_eq!(steps.first(), Some(&ProbeStep::FirmwareReady), "{steps:?}");
    assert_eq!(steps.last(), Some(&ProbeStep::WorkScheduler), "{steps:?}");
    assert_eq!(steps.len(), 12, "{steps:?}");
    bar.with_device(|d| d.faults().fail_cqp_op = Some((0, 0xF001, 0x0042)));
    assert!(dev.create_cq(8).is_err());
    let last = dev.flight_recorder().last().expect("records");
    assert_eq!(
        last.event,
        FlightEvent::Cqp {
            opcode: irdma_hal::cqp::op::CREATE_CQ,
            outcome: CqpOutcome::Failed { major: 0xF001, minor: 0x0042 }
        }
    );
    // Sequence numbers are consecutive, oldest first.
    let seqs: Vec<u32> = dev.flight_recorder().map(|r| r.seq).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    dev.close().unwrap();
}

#[test]
fn an_access_error_leaves_event_state_and_flush_in_the_recorder() {
    let _g = lock();
    let (_ba, _bb, da, db) = two_devices(Profile::SMALL);
    let cap = qp_cap(8, 8, 1, 1);
    let (mut a, b) = linked(&da, &db, 32, cap);
    let src = a.region(1, 1);
    let dst = b.region(1, 0);
    let bad = [Sge { lkey: src.key() ^ 0x80, ..src.sge(0, 16) }];
    a.qp.post_send(&[signaled(1, write_op(dst.addr(), dst.key()), &bad)]).unwrap();
    let wc = a.poll(1);
    assert_eq!(wc.len(), 1, "{wc:?}");
    let qpn = a.qp.qp_num();
    let recs: Vec<FlightEvent> = da.flight_recorder().map(|r| r.event).collect();
    let at = |f: &dyn Fn(&FlightEvent) -> bool| recs.iter().position(f);
    let ae = at(&|e| matches!(e, FlightEvent::AsyncEvent { id, .. } if *id == qpn));
    let err =
        at(&|e| matches!(e, FlightEvent::QpState { qpn: q, state: QpState::Error } if *q == qpn));
    let flush = at(&|e| matches!(e, FlightEvent::Flush { qpn: q, .. } if *q == qpn));
    let rts =
        at(&|e| matches!(e, FlightEvent::QpState { qpn: q, state: QpState::Rts } if *q == qpn));
    assert!(
        rts.is_some() && ae.is_some() && err.is_some() && flush.is_some(),
        "RTS, AE, ERROR, flush recorded: {recs:?}"
    );
    assert!(rts < ae && ae < err && err < flush, "in order: {recs:?}");
    let modify_qp = irdma_hal::cqp::op::MODIFY_QP;
    assert!(
        recs[flush.unwrap()..].iter().any(|e| matches!(
            e,
            FlightEvent::Cqp { opcode, outcome: CqpOutcome::Ok } if *opcode == modify_qp
        )),
        "the MODIFY_QP(ERROR) after it: {recs:?}"
    );
}
