//! The wire between QPs: RoCEv2 frames built from the QP context
//! (shared/spec/rocev2-wire.md), checked by the receiver, recorded in a
//! capture.

mod common;
use common::*;
use mock_bar::regs;
use mock_bar::wire::{self, op};

const MAC: u64 = ARP_MAC;

struct Setup {
    h: Harness,
    a: TQp,
    b: TQp,
    tx_a: TCq,
    buf: u64,
    cap: wire::Capture,
}

fn setup() -> Setup {
    let mut h = Harness::new();
    let QpPair { a, b, cqs: [tx_a, ..], buf } = h.qp_pair(0x4000, 0x4000, 2);
    let cap = wire::Capture::new();
    h.dev(|d| d.set_capture(Some(cap.clone())));
    Setup { h, a, b, tx_a, buf, cap }
}

fn sge(off: u64, len: u32) -> Sge {
    Sge { addr: VA + off, stag: STAG, len }
}

/// QPs 12 and 13, each other's peer (CQs 3..=6, like the setup's pair),
/// with `prepare` applied to their contexts before both go to RTS; the
/// harness stops at idle from then on.
fn second_pair(s: &mut Setup, prepare: impl FnOnce(&mut TQp, &mut TQp)) -> (TQp, TQp) {
    s.h.stop_at_idle = true;
    let mut c = s.h.create_qp(12, PD, 3, 4, IP, IP, 13, 2);
    let mut d = s.h.create_qp(13, PD, 5, 6, IP, IP, 12, 2);
    prepare(&mut c, &mut d);
    s.h.bring_to_rts(&c);
    s.h.bring_to_rts(&d);
    (c, d)
}

fn parsed(cap: &wire::Capture) -> Vec<wire::Parsed> {
    cap.frames().iter().map(|f| wire::parse(f).expect("every captured frame parses")).collect()
}

/// wire §4.1: 2500 bytes at MSS 1024 = FIRST (RETH, total length),
/// MIDDLE and LAST, consecutive PSNs from the context's PSNNXT, AckReq on the last;
/// one ACK (syndrome 0x1F, MSN 1) for the last PSN.
#[test]
fn a_long_write_is_segmented_and_acked() {
    let mut s = setup();
    s.h.mem.fill(s.buf, &vec![0x5A; 2500]);
    s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(sqop::WRITE, STAG, VA + 0x1000, &[sge(0, 2500)], None, true, v)
    });
    assert!(!s.h.poll_cq(&mut s.tx_a).expect("completes").error);
    let f = parsed(&s.cap);
    let ops: Vec<u8> = f.iter().map(|p| p.pkt.opcode).collect();
    assert_eq!(ops, [op::WRITE_FIRST, op::WRITE_MIDDLE, op::WRITE_LAST, op::ACK]);
    assert_eq!(f[0].pkt.reth, Some((VA + 0x1000, STAG, 2500)));
    assert_eq!(f[1].pkt.reth, None);
    let lens: Vec<usize> = f.iter().map(|p| p.pkt.payload.len()).collect();
    assert_eq!(lens, [1024, 1024, 452, 0]);
    let psns: Vec<u32> = f.iter().map(|p| p.pkt.psn).collect();
    assert_eq!(psns, [0, 1, 2, 2]);
    assert_eq!(f.iter().map(|p| p.pkt.ack_req).collect::<Vec<_>>(), [false, false, true, false]);
    assert_eq!(f[3].pkt.aeth, Some((0x1F, 1)));
    assert_eq!(f[3].pkt.dest_qp, 10);
    assert!(f.iter().all(|p| p.dst_mac == MAC.to_be_bytes()[2..] && p.dport == 4791));
    assert_eq!(s.h.dev(|d| d.qp(10).unwrap().psn_nxt), 3);
    assert_eq!(s.h.dev(|d| d.qp(11).unwrap().epsn), 3);
    // a READ of 2100 bytes: one request, PSNs 3..=5 in three responses
    s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(sqop::READ, STAG, VA + 0x1000, &[sge(0x3000, 2100)], None, true, v)
    });
    assert!(!s.h.poll_cq(&mut s.tx_a).expect("completes").error);
    let f = parsed(&s.cap);
    let ops: Vec<(u8, u32)> = f[4..].iter().map(|p| (p.pkt.opcode, p.pkt.psn)).collect();
    assert_eq!(
        ops,
        [
            (op::READ_REQ, 3),
            (op::READ_RESP_FIRST, 3),
            (op::READ_RESP_MIDDLE, 4),
            (op::READ_RESP_LAST, 5)
        ]
    );
    assert_eq!(s.h.mem.bytes(s.buf + 0x3000, 2100), vec![0x5A; 2100]);
    assert_eq!(s.h.dev(|d| d.qp(10).unwrap().psn_nxt), 6);
}

/// A flipped ICRC byte is caught by the receiver (wire §3), counted, and
/// the request is lost: the requester gives up (LLP_TOO_MANY_RETRIES).
#[test]
fn a_corrupted_frame_is_dropped_and_counted() {
    let mut s = setup();
    s.h.dev(|d| d.faults().flip_frame_byte = Some((0, usize::MAX)));
    s.h.post_send(&mut s.a, |v| sq_frag_wqe(sqop::WRITE, STAG, VA, &[sge(0, 4)], None, true, v));
    assert_eq!(s.h.dev(|d| d.counters().wire_drops), 1);
    assert!(s.h.dev(|d| {
        d.trace().any(|e| matches!(e, mock_bar::Event::WireDrop { qp: 11, why: wire::Drop::Icrc }))
    }));
    assert_eq!(s.h.aeq_poll().map(|a| a.0), Some(0x050A));
    // the capture holds the frame as sent, which is fine
    assert!(wire::parse(&s.cap.frames()[0]).is_ok());
    let _ = &s.b;
}

/// The destination MAC comes from the ARP entry the context names; a frame
/// to another MAC is not taken (the responder's MACADDRESS differs).
#[test]
fn a_frame_to_the_wrong_mac_is_dropped() {
    let mut s = setup();
    s.h.op_ok([
        0,
        0,
        0x0299_9999_9999,
        hdr(regs::op::MANAGE_ARP, 1 | 1 << 42 | 1 << 43),
        0,
        0,
        0,
        0,
    ]);
    s.h.post_send(&mut s.a, |v| sq_frag_wqe(sqop::WRITE, STAG, VA, &[sge(0, 4)], None, true, v));
    assert_eq!(s.h.dev(|d| d.counters().wire_drops), 1);
    assert!(s.h.dev(|d| {
        d.trace().any(|e| matches!(e, mock_bar::Event::WireDrop { why: wire::Drop::Mac, .. }))
    }));
    assert_eq!(s.h.aeq_poll().map(|a| a.0), Some(0x050A));
}

/// A PSN the responder does not expect (its EPSN, taken from the context
/// at RTR) is dropped and counted — by default (strict PSN). An earlier one
/// is a duplicate: not executed, re-ACKed with EPSN − 1 and the current MSN
/// (wire §4.7), which the requester (expecting an ACK for its own PSN)
/// drops in turn.
#[test]
fn an_unexpected_psn_is_dropped() {
    let mut s = setup();
    let (mut c, _d) = second_pair(&mut s, |_, d| d.ctx[11] = 7); // EPSN 7, while 12 starts at PSNNXT 0
    s.h.post_send(&mut c, |v| sq_frag_wqe(sqop::WRITE, STAG, VA, &[sge(0, 4)], None, true, v));
    assert!(s.h.dev(|d| {
        d.trace().any(|e| matches!(e, mock_bar::Event::WireDrop { qp: 13, why: wire::Drop::Psn }))
    }));
    // the responder's PSN drop, then the requester's drop of the re-ACK
    assert_eq!(s.h.dev(|d| d.counters().wire_drops), 2);
    assert_eq!(s.h.dev(|d| d.counters().wire_drop_reasons.psn), 2);
    // an earlier PSN (a duplicate for the responder) draws no NAK, but an ACK
    assert_eq!(s.h.dev(|d| d.counters().seq_naks), 0);
    let acks: Vec<_> = s
        .cap
        .frames()
        .iter()
        .filter_map(|f| wire::parse(f).ok())
        .filter(|p| p.pkt.opcode == wire::op::ACK)
        .map(|p| (p.pkt.dest_qp, p.pkt.psn, p.pkt.aeth))
        .collect();
    assert_eq!(acks, vec![(12, 6, Some((wire::syndrome::ACK, 0)))]);
    assert_eq!(s.h.aeq_poll().map(|a| a.0), Some(0x050A));
}

/// A requester PSN later than the responder's EPSN is a gap: one
/// PSN-sequence NAK (0x60) carrying the EPSN (wire §4.7). The requester
/// cannot go back to a PSN before its request, so it gives up.
#[test]
fn a_later_psn_draws_a_sequence_nak_for_the_epsn() {
    let mut s = setup();
    let (mut c, _d) = second_pair(&mut s, |c, d| {
        c.ctx[10] = 9; // PSNNXT 9, while 13 expects 7
        d.ctx[11] = 7;
    });
    s.h.post_send(&mut c, |v| sq_frag_wqe(sqop::WRITE, STAG, VA, &[sge(0, 4)], None, true, v));
    let f = parsed(&s.cap);
    let got: Vec<_> = f.iter().map(|p| (p.pkt.opcode, p.pkt.psn, p.pkt.aeth)).collect();
    assert_eq!(got, [(op::WRITE_ONLY, 9, None), (op::ACK, 7, Some((0x60, 0)))]);
    assert_eq!(s.h.dev(|d| (d.counters().wire_drops, d.counters().seq_naks)), (1, 1));
    assert_eq!(s.h.aeq_poll().map(|a| a.0), Some(0x050A));
}

/// With strict PSN off, the mismatch is counted and the request executes.
#[test]
fn an_unexpected_psn_is_counted_when_strict_psn_is_off() {
    let mut s = setup();
    s.h.dev(|d| d.set_strict_psn(false));
    let (mut c, _d) = second_pair(&mut s, |_, d| d.ctx[11] = 7);
    s.h.post_send(&mut c, |v| sq_frag_wqe(sqop::WRITE, STAG, VA, &[sge(0, 4)], None, true, v));
    assert_eq!(s.h.dev(|d| (d.counters().wire_drops, d.counters().psn_mismatches)), (0, 1));
    assert_eq!(s.h.dev(|d| d.qp(13).unwrap().epsn), 1);
}

/// wire §4.7/§4.8: the MIDDLE packet of a three-packet WRITE is lost on
/// the wire. The responder takes FIRST, sees LAST's PSN beyond its ePSN,
/// drops it and sends one NAK 0x60 with the lost packet's PSN; the
/// requester goes back to that PSN and resends MIDDLE and LAST; the WRITE
/// lands once and completes once.
#[test]
fn a_lost_frame_draws_a_sequence_nak_and_a_go_back_n_resend() {
    let mut s = setup();
    let data: Vec<u8> = (0..2500u32).map(|i| (i * 7 + 1) as u8).collect();
    s.h.mem.fill(s.buf, &data);
    s.h.dev(|d| d.faults().drop_request_frame = Some(1));
    s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(sqop::WRITE, STAG, VA + 0x1000, &[sge(0, 2500)], None, true, v)
    });
    let c = s.h.poll_cq(&mut s.tx_a).expect("completes");
    assert!(!c.error);
    assert!(s.h.poll_cq(&mut s.tx_a).is_none(), "exactly one completion");
    assert_eq!(s.h.mem.bytes(s.buf + 0x1000, 2500), data);
    let f = parsed(&s.cap);
    let got: Vec<_> = f.iter().map(|p| (p.pkt.opcode, p.pkt.psn, p.pkt.aeth)).collect();
    assert_eq!(
        got,
        [
            (op::WRITE_FIRST, 0, None),
            (op::WRITE_MIDDLE, 1, None), // lost after the capture point
            (op::WRITE_LAST, 2, None),
            (op::ACK, 1, Some((0x60, 0))),
            (op::WRITE_MIDDLE, 1, None),
            (op::WRITE_LAST, 2, None),
            (op::ACK, 2, Some((0x1F, 1))),
        ]
    );
    // the resent frames are new frames (new IP ID, new ICRC) with the same
    // transport payload
    assert_eq!(f[4].pkt, f[1].pkt);
    assert_ne!(s.cap.frames()[4], s.cap.frames()[1]);
    let n = s.h.dev(|d| d.counters().clone());
    assert_eq!((n.frames_lost, n.seq_naks, n.retransmitted, n.wire_drops), (1, 1, 2, 1));
    assert_eq!(s.h.dev(|d| (d.qp(10).unwrap().psn_nxt, d.qp(11).unwrap().epsn)), (3, 3));
    assert!(s.h.aeq_poll().is_none());
    // the next message goes on from PSN 3
    s.h.post_send(&mut s.a, |v| sq_frag_wqe(sqop::WRITE, STAG, VA, &[sge(0, 4)], None, true, v));
    assert!(!s.h.poll_cq(&mut s.tx_a).expect("completes").error);
    assert_eq!(parsed(&s.cap).last().map(|p| (p.pkt.psn, p.pkt.aeth)), Some((3, Some((0x1F, 2)))));
}

/// Losing the FIRST packet: the responder NAKs at the message's first PSN
/// and the whole message is resent.
#[test]
fn a_lost_first_frame_resends_the_whole_message() {
    let mut s = setup();
    s.h.mem.fill(s.buf, &vec![0x3C; 2100]);
    s.h.dev(|d| d.faults().drop_request_frame = Some(0));
    s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(sqop::WRITE, STAG, VA + 0x2000, &[sge(0, 2100)], None, true, v)
    });
    assert!(!s.h.poll_cq(&mut s.tx_a).expect("completes").error);
    assert_eq!(s.h.mem.bytes(s.buf + 0x2000, 2100), vec![0x3C; 2100]);
    let f = parsed(&s.cap);
    let got: Vec<_> = f.iter().map(|p| (p.pkt.opcode, p.pkt.psn)).collect();
    assert_eq!(
        got,
        [
            (op::WRITE_FIRST, 0),
            (op::WRITE_MIDDLE, 1),
            (op::WRITE_LAST, 2),
            (op::ACK, 0),
            (op::WRITE_FIRST, 0),
            (op::WRITE_MIDDLE, 1),
            (op::WRITE_LAST, 2),
            (op::ACK, 2),
        ]
    );
    // one NAK only: MIDDLE and LAST after the gap, the latch holds
    assert_eq!(f[3].pkt.aeth, Some((0x60, 0)));
    assert_eq!(s.h.dev(|d| (d.counters().seq_naks, d.counters().wire_drops)), (1, 2));
    assert_eq!(s.h.dev(|d| d.counters().retransmitted), 3);
}

/// Each sequence NAK spends one transport retry (REXMIT_THRESH @128
/// [53:48], wire §1.9, §4.8): with a budget of 0 the first NAK ends in
/// LLP_TOO_MANY_RETRIES, nothing is resent, and the WRITE does not
/// complete.
#[test]
fn a_sequence_nak_with_no_retry_left_is_fatal() {
    let mut s = setup();
    let (mut c, _d) = second_pair(&mut s, |c, _| c.ctx[16] &= !(0x3F << 48)); // REXMIT_THRESH 0
    s.h.dev(|d| d.faults().drop_request_frame = Some(1));
    s.h.post_send(&mut c, |v| sq_frag_wqe(sqop::WRITE, STAG, VA, &[sge(0, 2100)], None, true, v));
    let ops: Vec<u8> = parsed(&s.cap).iter().map(|p| p.pkt.opcode).collect();
    assert_eq!(ops, [op::WRITE_FIRST, op::WRITE_MIDDLE, op::WRITE_LAST, op::ACK]);
    assert_eq!(s.h.dev(|d| d.counters().retransmitted), 0);
    assert_eq!(s.h.aeq_poll().map(|a| a.0), Some(0x050A));
}
