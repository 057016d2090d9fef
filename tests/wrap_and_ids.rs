//! Traffic across CQ wraps and AEQ events with high ids (issue #28, class
//! B): a CQ ring the driver goes around many times through `Cq::poll`, with
//! every completion checked (a valid bit that does not flip on wrap makes
//! the second lap re-read the first), and asynchronous events whose QP/CQ
//! id uses every bit of the AEQE id field (QPCQID_LOW [17:0] and QPCQID_HI
//! [46] of word @8 = id bit 18, spec control-path §8.2; ctrl.c:
//! irdma_sc_get_next_aeqe), decoded to the right id and, for live QPs and
//! CQs, acted on for the right object.

mod common;
mod e2e_common;

use e2e_common::*;
use irdma::aeq::{AsyncEvent, AsyncEventKind};

/// AE sources (spec control-path §8.2; defs.h: IRDMA_AE_SOURCE_*); the AE
/// codes are e2e_common's.
const SRC_CQ: u8 = 0x2;
const SRC_SQ: u8 = 0x5;

fn events(dev: &Dev) -> Vec<AsyncEvent> {
    let mut ev = [NO_EVENT; 16];
    let n = dev.poll_async_events(&mut ev);
    ev[..n].to_vec()
}

/// SENDs A → B through CQs of 4 entries (rings of (4 + 1) × 2 = 10 CQEs),
/// in batches of 3 so the wrap falls at every position of a batch, over
/// 12 laps of both rings: each SEND and each receive completes exactly
/// once, in order, with its own WR id, length and data.
#[test]
fn small_cqs_wrap_many_times_and_every_completion_is_seen_once() {
    let _g = lock();
    let (_ba, _bb, da, db) = two_devices(Profile::SMALL);
    let (mut a, mut b) = linked(&da, &db, 4, cap(8));
    let ring = (a.cq.cqe() + 1) * 2;
    assert_eq!(ring, 10);
    let src = a.region(1, 0);
    let dst = b.region(1, 0);
    let mut rng = Rng::new(28);
    let total = 12 * ring as u64;
    let mut next = 0u64;
    while next < total {
        let n = 3.min(total - next);
        let mut sent = Vec::new();
        let mut recvs = Vec::new();
        let mut sends = Vec::new();
        for k in 0..n {
            let id = next + k;
            let slot = (id % 32) as usize * 128;
            let len = 1 + (id as usize * 7) % 120;
            let msg = rng.bytes(len);
            src.put(slot, &msg);
            sent.push((id, slot, msg));
            recvs.push((1000 + id, [dst.sge(slot, 128)]));
            sends.push((id, [src.sge(slot, len)]));
        }
        let rwr: Vec<RecvWr<'_>> =
            recvs.iter().map(|(id, s)| RecvWr { wr_id: *id, sg_list: s }).collect();
        b.qp.post_recv(&rwr).unwrap();
        let swr: Vec<SendWr<'_>> =
            sends.iter().map(|(id, s)| signaled(*id, WrOpcode::Send, s)).collect();
        a.qp.post_send(&swr).unwrap();
        let wa = a.poll(n as usize);
        let wb = b.poll(n as usize);
        a.nothing();
        b.nothing();
        let ids_a: Vec<u64> = wa.iter().map(|w| w.wr_id).collect();
        let ids_b: Vec<u64> = wb.iter().map(|w| w.wr_id).collect();
        assert_eq!(ids_a, (next..next + n).collect::<Vec<_>>(), "send completions at {next}");
        assert_eq!(
            ids_b,
            (1000 + next..1000 + next + n).collect::<Vec<_>>(),
            "receive completions at {next}"
        );
        for (w, (_, slot, msg)) in wb.iter().zip(&sent) {
            assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::Recv), "{w:?}");
            assert_eq!(w.byte_len as usize, msg.len(), "{w:?}");
            assert_eq!(w.qp_num, b.qp.qp_num());
            assert_eq!(dst.bytes(*slot, msg.len()), *msg, "receive {}", w.wr_id);
        }
        for w in &wa {
            assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::Send), "{w:?}");
            assert_eq!(w.qp_num, a.qp.qp_num());
        }
        next += n;
    }
    // the rings went round: 12 laps each, on both devices
    assert_eq!(next, 120);
}

/// Ids that set every bit of the 19-bit AEQE id, alone and together.
fn wide_ids() -> Vec<u32> {
    let mut v: Vec<u32> = (0..19).map(|b| 1u32 << b).collect();
    v.extend([0x7_FFFF, 0x4_0001, 0x3_FFFF, 0x2_AAAA, 0x5_5555, 0x6_0000]);
    v
}

/// CQ-sourced events with ids over the whole field come back as CQ errors
/// for exactly those ids; QP-sourced ones for QPs the driver does not have
/// are reported with their id and touch nothing.
#[test]
fn aeq_events_decode_every_bit_of_the_id() {
    let _g = lock();
    let (bar, dev) = one_device(small_fn_config(), Profile::SMALL);
    let _ = events(&dev);
    for chunk in wide_ids().chunks(4) {
        bar.with_device(|d| {
            for &id in chunk {
                d.inject_ae(CQ_OPERATION_ERROR, SRC_CQ, id);
                d.inject_ae(LCE_QP_CATASTROPHIC, SRC_SQ, id);
            }
        });
        let ev = events(&dev);
        let got: Vec<(AsyncEventKind, u16, u32, bool)> =
            ev.iter().map(|e| (e.kind, e.ae_code, e.id, e.moved_to_error)).collect();
        let want: Vec<(AsyncEventKind, u16, u32, bool)> = chunk
            .iter()
            .flat_map(|&id| {
                [
                    (AsyncEventKind::CqError, CQ_OPERATION_ERROR, id, false),
                    // no such QP: reported, not acted on
                    (AsyncEventKind::Ignored, LCE_QP_CATASTROPHIC, id, false),
                ]
            })
            .collect();
        assert_eq!(got, want);
    }
}

/// Every QP and CQ the profile allows (64 QPs, 128 CQs): an AE for the QP
/// with the highest id moves that QP — and no other — to ERROR, and a CQ
/// error names the CQ with the highest id.
#[test]
fn aeq_events_for_the_highest_qp_and_cq_ids_reach_those_objects() {
    let _g = lock();
    let (bar, dev) = one_device(small_fn_config(), Profile::SMALL);
    let pd = dev.alloc_pd().unwrap();
    let mut cqs = Vec::new();
    while let Ok(cq) = dev.create_cq(1) {
        cqs.push(cq);
    }
    let cq_max = cqs.iter().map(|c| c.id()).max().unwrap();
    assert!(cq_max >= 100, "CQ ids reach high: {cq_max}");
    let mut qps = Vec::new();
    loop {
        let mut attr = QpInitAttr { send_cq: &cqs[0], recv_cq: &cqs[0], cap: cap(2) };
        match dev.create_qp(&pd, &mut attr) {
            Ok(q) => qps.push(q),
            Err(_) => break,
        }
    }
    for q in qps.iter_mut() {
        q.modify(&QpAttr::new(QpState::Init)).unwrap();
    }
    let top = (0..qps.len()).max_by_key(|&i| qps[i].qp_num()).unwrap();
    let qp_max = qps[top].qp_num();
    assert!(qp_max >= 50, "QP ids reach high: {qp_max}");
    let _ = events(&dev);
    bar.with_device(|d| {
        d.inject_ae(LCE_QP_CATASTROPHIC, SRC_SQ, qp_max);
        d.inject_ae(CQ_OPERATION_ERROR, SRC_CQ, cq_max);
    });
    let ev: Vec<(AsyncEventKind, u32, bool)> =
        events(&dev).iter().map(|e| (e.kind, e.id, e.moved_to_error)).collect();
    assert_eq!(
        ev,
        vec![(AsyncEventKind::QpFatal, qp_max, true), (AsyncEventKind::CqError, cq_max, false)]
    );
    for (i, q) in qps.iter().enumerate() {
        let want = if i == top { QpState::Error } else { QpState::Init };
        assert_eq!(q.state(), want, "QP {}", q.qp_num());
    }
    drop(qps);
    drop(cqs);
}
