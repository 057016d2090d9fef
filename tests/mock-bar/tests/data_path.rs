//! Data path on one device (loopback) and across a fabric: every executed
//! opcode, RQ consumption, CQEs, RNR, arming, and the MR translation levels.

mod common;
use common::*;
use mock_bar::regs::{self, ae, qps};

struct Setup {
    h: Harness,
    a: TQp,
    b: TQp,
    tx_a: TCq,
    rx_a: TCq,
    tx_b: TCq,
    rx_b: TCq,
    buf: u64,
}

fn setup() -> Setup {
    setup_rnr(2)
}

fn setup_rnr(rnr: u8) -> Setup {
    let mut h = Harness::new();
    let QpPair { a, b, cqs: [tx_a, rx_a, tx_b, rx_b], buf } = h.qp_pair(0x4000, 0x4000, rnr);
    Setup { h, a, b, tx_a, rx_a, tx_b, rx_b, buf }
}

fn sge(off: u64, len: u32) -> Sge {
    Sge { addr: VA + off, stag: STAG, len }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect()
}

#[test]
fn rdma_write_moves_data_and_completes_signaled_only() {
    let mut s = setup();
    let data = pattern(300, 1);
    s.h.mem.fill(s.buf, &data);
    // WRITE 300 bytes from offset 0 to offset 0x1000 (two SGEs, even count → pad)
    let idx = s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(sqop::WRITE, STAG, VA + 0x1000, &[sge(0, 100), sge(100, 200)], None, true, v)
    });
    assert_eq!(s.h.mem.bytes(s.buf + 0x1000, 300), data);
    let c = s.h.poll_cq(&mut s.tx_a).expect("signaled WRITE completes");
    assert!(c.sq && !c.error);
    assert_eq!((c.op, c.wqe_idx, c.qp, c.ctx), (sqop::WRITE, idx, 10, QP_CTX_BASE + 10));
    // unsignaled: no CQE, but the data moves
    s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(sqop::WRITE, STAG, VA + 0x2000, &[sge(0, 16)], None, false, v)
    });
    assert_eq!(s.h.mem.bytes(s.buf + 0x2000, 16), data[..16]);
    assert!(s.h.poll_cq(&mut s.tx_a).is_none());
    assert!(s.h.poll_cq(&mut s.rx_b).is_none(), "plain WRITE consumes no receive");
    // QP shadow @0 reports the hardware SQ tail
    assert_eq!(s.h.mem.get64(s.a.shadow) & 0x7FFF, s.a.sq_head as u64);
}

#[test]
fn write_with_immediate_consumes_a_receive_and_reports_imm() {
    let mut s = setup();
    s.h.post_recv(&mut s.b, &[sge(0x3000, 64)]);
    s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(sqop::WRITE, STAG, VA + 0x1000, &[sge(0, 8)], Some(0xABCD_1234), true, v)
    });
    let r = s.h.poll_cq(&mut s.rx_b).expect("RQ CQE");
    assert!(!r.sq && r.ext);
    assert_eq!(r.imm, Some(0xABCD_1234));
    assert_eq!(r.op, 0x0B, "BTH RDMA_WRITE_ONLY_WITH_IMMEDIATE");
    assert_eq!(r.len, 0, "no payload lands in the receive buffer");
    assert!(s.h.poll_cq(&mut s.tx_a).is_some());
}

#[test]
fn send_scatters_into_receive_sges_with_imm_and_solicited() {
    let mut s = setup();
    let data = pattern(100, 9);
    s.h.mem.fill(s.buf, &data);
    let r0 = s.h.post_recv(&mut s.b, &[sge(0x2000, 40), sge(0x2100, 80)]);
    s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(sqop::SEND_SOL, 0, 0, &[sge(0, 100)], Some(77), true, v)
    });
    assert_eq!(s.h.mem.bytes(s.buf + 0x2000, 40), data[..40]);
    assert_eq!(s.h.mem.bytes(s.buf + 0x2100, 60), data[40..]);
    let c = s.h.poll_cq(&mut s.rx_b).expect("receive completion");
    assert_eq!((c.len, c.qp, c.imm, c.solicited, c.op), (100, 11, Some(77), true, 0x05));
    assert_eq!(c.wqe_idx, r0 << 1, "RQ index in quanta");
    assert_eq!(c.ctx, QP_CTX_BASE + 11);
    let t = s.h.poll_cq(&mut s.tx_a).expect("send completion");
    assert_eq!(t.op, sqop::SEND_SOL);
}

#[test]
fn inline_send_and_inline_write() {
    let mut s = setup();
    let data = pattern(70, 3);
    s.h.post_recv(&mut s.b, &[sge(0x2000, 128)]);
    s.h.post_send(&mut s.a, |v| sq_inline_wqe(sqop::SEND, 0, 0, &data, true, v));
    assert_eq!(s.h.mem.bytes(s.buf + 0x2000, 70), data);
    assert_eq!(s.h.poll_cq(&mut s.rx_b).unwrap().len, 70);
    let d2 = pattern(101, 5);
    s.h.post_send(&mut s.a, |v| sq_inline_wqe(sqop::WRITE, STAG, VA + 0x3000, &d2, true, v));
    assert_eq!(s.h.mem.bytes(s.buf + 0x3000, 101), d2);
}

#[test]
fn rdma_read_fetches_remote_data() {
    let mut s = setup();
    let data = pattern(200, 4);
    s.h.mem.fill(s.buf + 0x1000, &data);
    s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(
            sqop::READ,
            STAG,
            VA + 0x1000,
            &[sge(0x3000, 150), sge(0x3800, 50)],
            None,
            true,
            v,
        )
    });
    assert_eq!(s.h.mem.bytes(s.buf + 0x3000, 150), data[..150]);
    assert_eq!(s.h.mem.bytes(s.buf + 0x3800, 50), data[150..]);
    assert_eq!(s.h.poll_cq(&mut s.tx_a).unwrap().op, sqop::READ);
}

#[test]
fn send_with_invalidate_invalidates_the_responder_stag() {
    let mut s = setup();
    // a second MR to invalidate
    let other = 0x8000_0644;
    s.h.reg_mr0(other, PD, VA, s.buf, 0x4000, ALL);
    s.h.post_recv(&mut s.b, &[sge(0x2000, 16)]);
    s.h.post_send(&mut s.a, |v| sq_frag_wqe(sqop::SEND_INV, other, 0, &[sge(0, 8)], None, true, v));
    let c = s.h.poll_cq(&mut s.rx_b).unwrap();
    assert!(c.stag_inv);
    assert_eq!(c.inv_stag, other);
    assert_eq!(c.op, 0x17);
    assert!(!s.h.dev(|d| d.stag(other >> 8).unwrap().valid));
}

#[test]
fn nop_padding_and_ring_wrap_keep_polarity() {
    let mut s = setup();
    // 64-quantum SQ: post 3-quantum WRITEs until wrapping twice
    for i in 0..60u32 {
        s.h.post_send(&mut s.a, |v| {
            sq_frag_wqe(
                sqop::WRITE,
                STAG,
                VA + 0x1000,
                &[sge(0, 4), sge(4, 4), sge(8, 4), sge(12, 4)],
                None,
                true,
                v,
            )
        });
        let c = s.h.poll_cq(&mut s.tx_a).unwrap_or_else(|| panic!("WQE {i} not executed"));
        assert!(!c.error);
    }
    assert_eq!(s.h.dev(|d| d.qp(10).unwrap().sq_pol), s.a.sq_pol ^ (s.a.sq_head == 0));
}

#[test]
fn rnr_stalls_until_a_receive_is_posted() {
    let mut s = setup();
    s.h.post_send(&mut s.a, |v| sq_frag_wqe(sqop::SEND, 0, 0, &[sge(0, 8)], None, true, v));
    assert!(s.h.poll_cq(&mut s.tx_a).is_none(), "no receive: RNR");
    assert_eq!(s.h.dev(|d| d.counters().rnr_naks), 1);
    s.h.post_recv(&mut s.b, &[sge(0x2000, 8)]);
    s.h.ring(&s.a); // any doorbell retries stalled work
    assert!(s.h.poll_cq(&mut s.tx_a).is_some());
    assert!(s.h.poll_cq(&mut s.rx_b).is_some());
    assert_eq!(s.h.dev(|d| d.qp(10).unwrap().state), qps::RTS);
}

#[test]
fn rnr_retry_exhausted_fails_the_qp_then_flush_reports() {
    let mut s = setup_rnr(1);
    s.h.post_send(&mut s.a, |v| sq_frag_wqe(sqop::SEND, 0, 0, &[sge(0, 8)], None, true, v));
    s.h.dev(|d| d.step());
    assert_eq!(s.h.dev(|d| d.qp(10).unwrap().state), qps::ERROR);
    let (code, src, id, ctx) = s.h.aeq_poll().expect("AE");
    assert_eq!((code, src, id, ctx), (ae::LLP_TOO_MANY_RNRS, ae::SRC_SQ, 10, QP_CTX_BASE + 10));
    // driver: modify → ERROR, then FLUSH_WQES SQ with user codes
    assert!(!s.h.modify_qp(&s.a, 6).error);
    let c = s.h.op([
        0,
        0,
        f(1, 63, 48) | f(11, 47, 32),
        hdr(regs::op::FLUSH_WQES, 10 | 1 << 60 | 1 << 61),
        0,
        0,
        0,
        0,
    ]);
    assert!(!c.error);
    assert_eq!(c.minor, regs::err::MIN_SQ_FLUSHED);
    let fc = s.h.poll_cq(&mut s.tx_a).expect("flush CQE");
    assert!(fc.error && fc.sq);
    assert_eq!((fc.major, fc.minor, fc.op), (1, 11, sqop::SEND));
}

#[test]
fn flush_needs_error_state() {
    let mut s = setup();
    let c = s.h.op([0, 0, 0, hdr(regs::op::FLUSH_WQES, 10 | 1 << 61), 0, 0, 0, 0]);
    assert_eq!((c.major, c.minor), (regs::err::MAJ_GENERIC, regs::err::MIN_INVALID_STATE));
    // RQ flush with a posted receive
    s.h.post_recv(&mut s.a, &[sge(0, 8)]);
    s.h.modify_qp(&s.a, 6);
    let c = s.h.op([0, 0, 0, hdr(regs::op::FLUSH_WQES, 10 | 1 << 62), 0, 0, 0, 0]);
    assert_eq!(c.minor, regs::err::MIN_RQ_FLUSHED);
    let fc = s.h.poll_cq(&mut s.rx_a).expect("RQ flush CQE");
    assert!(fc.error && !fc.sq && fc.major == 1);
}

#[test]
fn cq_arm_raises_one_ceqe_and_solicited_arm_waits_for_solicited() {
    let mut s = setup();
    let ceq = s.h.ceq0.as_ref().map(|r| r.pa).unwrap();
    // arm rx_b for the next completion (shadow @32 ARM_NEXT, then CQARM)
    s.h.mem.set64(s.rx_b.shadow + 32, 1 << 14 | 1 << 15 | f(1, 17, 16));
    s.h.wr(regs::CQARM, 6);
    for _ in 0..2 {
        s.h.post_recv(&mut s.b, &[sge(0x2000, 8)]);
        s.h.post_send(&mut s.a, |v| sq_frag_wqe(sqop::SEND, 0, 0, &[sge(0, 8)], None, true, v));
    }
    let e0 = s.h.mem.get64(ceq);
    assert_eq!(e0 >> 63, 1, "CEQE valid");
    assert_eq!(e0 & !(1 << 63), 0xCC00 + 6, "CQ context");
    assert_eq!(s.h.mem.get64(ceq + 8), 0, "one arm, one CEQE");
    // solicited-only arm: a plain SEND raises nothing, a solicited one does
    s.h.mem.set64(s.rx_b.shadow + 32, 1 << 15 | f(2, 17, 16));
    s.h.wr(regs::CQARM, 6);
    s.h.post_recv(&mut s.b, &[sge(0x2000, 8)]);
    s.h.post_send(&mut s.a, |v| sq_frag_wqe(sqop::SEND, 0, 0, &[sge(0, 8)], None, true, v));
    assert_eq!(s.h.mem.get64(ceq + 8), 0);
    s.h.post_recv(&mut s.b, &[sge(0x2000, 8)]);
    s.h.post_send(&mut s.a, |v| sq_frag_wqe(sqop::SEND_SOL, 0, 0, &[sge(0, 8)], None, true, v));
    assert_eq!(s.h.mem.get64(ceq + 8) >> 63, 1);
    assert_eq!(s.h.dev(|d| d.counters().ceqes), 2);
}

#[test]
fn cq_overflow_is_detected_from_the_shadow_consumer_index() {
    let mut s = setup();
    // tx_a has 32 entries; never consume: the 32nd completion overflows
    for _ in 0..32 {
        s.h.post_send(&mut s.a, |v| {
            sq_frag_wqe(sqop::WRITE, STAG, VA + 0x1000, &[sge(0, 4)], None, true, v)
        });
    }
    assert_eq!(s.h.dev(|d| d.cq(3).unwrap().overflows), 1);
    let (code, src, id, _) = s.h.aeq_poll().expect("AE");
    assert_eq!((code, src, id), (ae::CQ_OPERATION_ERROR, ae::SRC_CQ, 3));
}

#[test]
fn mr_level1_and_level2_translate_through_hmc_pbles() {
    let mut s = setup();
    // three scattered 4 KiB pages
    let pages: Vec<u64> = (0..3).map(|_| s.h.alloc(0x1000, 0x1000)).collect();
    for (i, p) in pages.iter().enumerate() {
        let pa = s.h.pble_pa(100 + i as u64);
        s.h.mem.set64(pa, *p);
    }
    let l1 = 0x8000_0777;
    let va = 0x5000_0000_0800u64; // starts mid-page: first-byte offset 0x800
    s.h.op_ok(Harness::reg_mr_wqe(l1, PD, va, 0x2000, ALL, 1, 0, 100, true));
    let data = pattern(0x2000, 11);
    s.h.mem.fill(s.buf, &data);
    s.h.post_send(&mut s.a, |v| sq_frag_wqe(sqop::WRITE, l1, va, &[sge(0, 0x2000)], None, true, v));
    assert!(!s.h.poll_cq(&mut s.tx_a).unwrap().error);
    assert_eq!(s.h.mem.bytes(pages[0] + 0x800, 0x800), data[..0x800]);
    assert_eq!(s.h.mem.bytes(pages[1], 0x1000), data[0x800..0x1800]);
    assert_eq!(s.h.mem.bytes(pages[2], 0x800), data[0x1800..]);
    // level 2: root PBLE 200 → leaf block at 300
    s.h.mem.set64(s.h.pble_pa(200), 300);
    s.h.mem.set64(s.h.pble_pa(300), pages[2]);
    s.h.mem.set64(s.h.pble_pa(301), pages[0]);
    let l2 = 0x8000_0888;
    s.h.op_ok(Harness::reg_mr_wqe(l2, PD, 0, 0x2000, ALL, 3, 0, 200, false));
    s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(sqop::READ, l2, 0x0FF0, &[sge(0x3000, 0x20)], None, true, v)
    });
    assert!(!s.h.poll_cq(&mut s.tx_a).unwrap().error);
    let mut want = s.h.mem.bytes(pages[2] + 0xFF0, 0x10);
    want.extend(s.h.mem.bytes(pages[0], 0x10));
    assert_eq!(
        s.h.mem.bytes(s.buf + 0x3000, 0x20),
        want,
        "zero-based, crossing into the second leaf page"
    );
}

#[test]
fn fast_register_then_local_invalidate() {
    let mut s = setup();
    let page = s.h.alloc(0x1000, 0x1000);
    s.h.mem.set64(s.h.pble_pa(50), page);
    let fr = 0x8000_0900u32; // index 0x80_0009, key 0
    // ALLOC_STAG (FRMR form): not usable yet
    s.h.op_ok([
        0,
        f(0x1000, 45, 0) | f(PD as u64, 63, 46),
        f(fr as u64 >> 8, 31, 8),
        hdr(regs::op::ALLOC_STAG, 1 << 43 | 1 << 53),
        0,
        0,
        0,
        0,
    ]);
    let key = 0x5Au32;
    let stag = fr | key;
    // fast-register with key 0x5A, 1 page
    s.h.post_send(&mut s.a, |v| sq_fast_reg(stag, 0x9000_0000, 0x1000, 50, ALL, v));
    assert!(!s.h.poll_cq(&mut s.tx_a).unwrap().error);
    s.h.post_send(&mut s.a, |v| sq_inline_wqe(sqop::WRITE, stag, 0x9000_0010, b"hello", true, v));
    assert_eq!(s.h.mem.bytes(page + 0x10, 5), b"hello");
    s.h.poll_cq(&mut s.tx_a).unwrap();
    // local invalidate on B's side (same PD), then the remote write faults
    s.h.post_send(&mut s.b, |v| sq_local_inv(stag, true, v));
    assert!(!s.h.poll_cq(&mut s.tx_b).unwrap().error);
    s.h.post_send(&mut s.a, |v| sq_inline_wqe(sqop::WRITE, stag, 0x9000_0010, b"again", true, v));
    assert_eq!(s.h.dev(|d| d.qp(11).unwrap().state), qps::ERROR, "responder QP failed");
    assert_eq!(s.h.dev(|d| d.qp(10).unwrap().state), qps::ERROR, "requester got a NAK");
    let mut aes = Vec::new();
    while let Some(a) = s.h.aeq_poll() {
        aes.push((a.0, a.2));
    }
    assert_eq!(aes, vec![(ae::AMP_INVALID_STAG, 11), (ae::IB_REMOTE_ACCESS_ERROR, 10)]);
}

#[test]
fn two_devices_on_a_fabric_exchange_sends_and_writes() {
    let mut h1 = Harness::new();
    let mut h2 = Harness::with_config(
        mock_bar::Config::default(),
        h1.mem.clone(),
        h1.fabric.clone(),
        0x9_0000_0000,
    );
    for h in [&mut h1, &mut h2] {
        h.bring_up();
        h.op_ok([
            0,
            0,
            0x0211_2233_4455,
            hdr(regs::op::MANAGE_ARP, 1 | 1 << 42 | 1 << 43),
            0,
            0,
            0,
            0,
        ]);
    }
    let (ip1, ip2) = (0x0A00_0001, 0x0A00_0002);
    let mut tx1 = h1.create_cq(3, 32);
    h1.create_cq(4, 32);
    h2.create_cq(3, 32);
    let mut rx2 = h2.create_cq(4, 32);
    let b1 = h1.alloc(0x1000, 0x1000);
    let b2 = h2.alloc(0x1000, 0x1000);
    h1.reg_mr0(STAG, PD, VA, b1, 0x1000, ALL);
    h2.reg_mr0(STAG, PD, VA, b2, 0x1000, ALL);
    // same QP number on both devices: routing is by IP
    let mut q1 = h1.create_qp(12, PD, 3, 4, ip1, ip2, 12, 2);
    let mut q2 = h2.create_qp(12, PD, 3, 4, ip2, ip1, 12, 2);
    let data = pattern(64, 2);
    h1.mem.fill(b1, &data);
    h2.post_recv(&mut q2, &[sge(0x100, 64)]);
    h1.post_send(&mut q1, |v| sq_frag_wqe(sqop::SEND, 0, 0, &[sge(0, 64)], None, true, v));
    assert_eq!(h2.mem.bytes(b2 + 0x100, 64), data);
    assert_eq!(h2.poll_cq(&mut rx2).unwrap().len, 64);
    assert!(!h1.poll_cq(&mut tx1).unwrap().error);
    h1.post_send(&mut q1, |v| {
        sq_frag_wqe(sqop::WRITE, STAG, VA + 0x800, &[sge(0, 32)], None, true, v)
    });
    assert_eq!(h2.mem.bytes(b2 + 0x800, 32), data[..32]);
    assert_eq!(h1.dev(|d| d.counters().packets), 2);
    assert_eq!(h2.dev(|d| d.counters().packets), 0);
    let _ = &mut q2;
}

#[test]
fn destination_nobody_owns_fails_with_retries_exceeded() {
    let mut h = Harness::new();
    h.bring_up();
    h.op_ok([0, 0, 1, hdr(regs::op::MANAGE_ARP, 1 | 1 << 42), 0, 0, 0, 0]);
    h.create_cq(3, 32);
    h.create_cq(4, 32);
    let buf = h.alloc(0x1000, 0x1000);
    h.reg_mr0(STAG, PD, VA, buf, 0x1000, ALL);
    let mut q = h.create_qp(10, PD, 3, 4, IP, 0x0B00_0001, 99, 2);
    h.post_send(&mut q, |v| sq_frag_wqe(sqop::WRITE, STAG, VA, &[sge(0, 4)], None, true, v));
    assert_eq!(h.aeq_poll().map(|a| a.0), Some(0x050A));
}

/// spec data-path §5.1: an extended CQE takes two slots. With one slot left
/// the whole CQE does not fit, so nothing is written (the lenient model
/// wrote both and wrapped onto the consumer: a silent loss), the CQ raises
/// CQ_OPERATION_ERROR and stays in error.
#[test]
fn an_extended_cqe_needs_two_free_slots_and_an_overflow_puts_the_cq_in_error() {
    let mut s = setup();
    let mut rx = s.h.create_cq(7, 4); // 3 usable slots
    let mut c = s.h.create_qp(12, PD, 3, 7, IP, IP, 13, 2);
    let mut d = s.h.create_qp(13, PD, 5, 6, IP, IP, 12, 2);
    for _ in 0..2 {
        s.h.post_recv(&mut c, &[sge(0x3000, 64)]);
        s.h.post_send(&mut d, |v| sq_frag_wqe(sqop::SEND, 0, 0, &[sge(0, 8)], None, false, v));
    }
    assert_eq!(s.h.dev(|d| d.cq(7).unwrap().prod), 2);
    s.h.post_recv(&mut c, &[sge(0x3000, 64)]);
    s.h.post_send(&mut d, |v| {
        sq_frag_wqe(sqop::WRITE, STAG, VA + 0x1000, &[sge(0, 8)], Some(5), false, v)
    });
    assert_eq!(s.h.dev(|d| d.cq(7).unwrap().overflows), 1);
    assert!(s.h.dev(|d| d.cq(7).unwrap().error));
    assert_eq!(s.h.mem.get64(rx.ring.pa + 3 * 32 + 24) >> 63, 0, "extension slot untouched");
    let (code, src, id, _) = s.h.aeq_poll().expect("AE");
    assert_eq!((code, src, id), (ae::CQ_OPERATION_ERROR, ae::SRC_CQ, 7));
    assert!(s.h.aeq_poll().is_none(), "one AE");
    // the two CQEs written before are intact; nothing after the overflow
    assert!(s.h.poll_cq(&mut rx).is_some_and(|c| !c.ext));
    assert!(s.h.poll_cq(&mut rx).is_some_and(|c| !c.ext));
    assert!(s.h.poll_cq(&mut rx).is_none());
    s.h.post_recv(&mut c, &[sge(0x3000, 64)]);
    s.h.post_send(&mut d, |v| sq_frag_wqe(sqop::SEND, 0, 0, &[sge(0, 8)], None, false, v));
    assert!(s.h.poll_cq(&mut rx).is_none(), "a CQ in error completes nothing more");
    assert_eq!(s.h.dev(|d| d.cq(7).unwrap().overflows), 2);
    assert!(s.h.aeq_poll().is_none(), "still one AE");
}

/// A refused SQ WQE: not executed, no CQE, the QP in ERROR with
/// WQE_UNEXPECTED_OPCODE naming the WQE, counted as invalid.
fn assert_wqe_refused(s: &mut Setup, idx: u32) {
    assert_eq!(s.h.dev(|d| d.counters().invalid_wqes), 1);
    assert_eq!(s.h.dev(|d| d.qp(10).unwrap().state), qps::ERROR);
    let (code, src, id, _) = s.h.aeq_poll().expect("AE");
    assert_eq!((code, src, id), (ae::WQE_UNEXPECTED_OPCODE, ae::SRC_SQ, 10));
    assert_eq!(s.h.dev(|d| d.qp(10).unwrap().sq_tail), idx, "not consumed");
    assert!(s.h.poll_cq(&mut s.tx_a).is_none());
}

/// spec data-path §1.10: a WQE must not cross an 8-quanta chunk.
#[test]
fn an_sq_wqe_crossing_an_8_quanta_chunk_is_refused() {
    let mut s = setup();
    for _ in 0..6 {
        s.h.write_sq(&mut s.a, &|v| {
            sq_frag_wqe(sqop::WRITE, STAG, VA + 0x1000, &[sge(0, 4)], None, false, v)
        });
    }
    // 4 SGEs + pad = 3 quanta at index 6: quanta 6..8 cross the chunk
    let four = [sge(0, 4), sge(4, 4), sge(8, 4), sge(12, 4)];
    let idx = s.h.write_sq_unpadded(&mut s.a, &|v| {
        sq_frag_wqe(sqop::WRITE, STAG, VA + 0x1000, &four, None, true, v)
    });
    assert_eq!(idx, 6);
    s.h.ring(&s.a);
    assert_eq!(s.h.dev(|d| d.counters().sq_wqes), 6);
    assert_wqe_refused(&mut s, 6);
}

/// spec data-path §1.5: on GEN_2 ADDFRAGCNT counts the pad fragment, so it
/// is even; an odd value (the GEN_3 count) is refused.
#[test]
fn an_odd_addfragcnt_is_refused_on_gen2() {
    let mut s = setup();
    s.h.post_send(&mut s.a, |v| {
        let mut w =
            sq_frag_wqe(sqop::WRITE, STAG, VA + 0x1000, &[sge(0, 4), sge(4, 4)], None, true, v);
        // two SGEs, pad present, but ADDFRAGCNT = 1 (pad not counted)
        w[3] = (w[3] & !f(0xF, 41, 38)) | f(1, 41, 38);
        w
    });
    assert_wqe_refused(&mut s, 0);
}

/// spec data-path §3: at most 13 SGEs per WQE (ICRDMA_MAX_WQ_FRAGMENT_COUNT);
/// 14 fit 8 quanta but are refused. 13 SGEs and 13 SGEs + immediate pass.
#[test]
fn more_than_13_sges_are_refused() {
    let mut s = setup();
    let sges: Vec<Sge> = (0..14).map(|i| sge(i * 4, 4)).collect();
    s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(sqop::WRITE, STAG, VA + 0x1000, &sges[..13], None, true, v)
    });
    s.h.post_recv(&mut s.b, &[sge(0x3000, 64)]);
    s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(sqop::WRITE, STAG, VA + 0x1000, &sges[..13], Some(1), true, v)
    });
    assert!(s.h.poll_cq(&mut s.tx_a).is_some_and(|c| !c.error));
    assert!(s.h.poll_cq(&mut s.tx_a).is_some_and(|c| !c.error));
    assert_eq!(s.h.mem.bytes(s.buf + 0x1000, 52), s.h.mem.bytes(s.buf, 52));
    let idx = s
        .h
        .post_send(&mut s.a, |v| sq_frag_wqe(sqop::WRITE, STAG, VA + 0x1000, &sges, None, true, v));
    assert_wqe_refused(&mut s, idx);
}

/// A QP left IDLE after CREATE_QP, on the setup's CQs, peer QP 11.
fn idle_qp(s: &mut Setup, id: u32) -> TQp {
    s.h.stop_at_idle = true;
    let q = s.h.create_qp(id, PD, 3, 4, IP, IP, 11, 2);
    s.h.stop_at_idle = false;
    q
}

const ARPV: u64 = 1 << 59;
const CQNV: u64 = 1 << 47;
const ORDV: u64 = 1 << 42;

/// spec control-path §4.3.5: the ARP index is taken only with
/// ARPTABIDXVALID; at RTR the QP needs an ARP entry (§7.4).
#[test]
fn modify_qp_takes_the_arp_index_only_with_its_valid_bit() {
    let mut s = setup();
    let q = idle_qp(&mut s, 12);
    // the context names ARP entry 1, but without ARPTABIDXVALID the QP keeps
    // index 0 from CREATE_QP, which has no entry: refused
    assert!(s.h.modify_qp_with(&q, 4, CQNV).error);
    assert_eq!(s.h.dev(|d| d.qp(12).unwrap().state), qps::IDLE);
    assert!(!s.h.modify_qp_with(&q, 4, CQNV | ARPV).error);
    assert_eq!(s.h.dev(|d| d.qp(12).unwrap().arp_idx), 1);
    // an index with no entry, announced: refused
    let mut q2 = idle_qp(&mut s, 13);
    q2.ctx[6] = (q2.ctx[6] & !f(0xFFFF, 63, 48)) | f(9, 63, 48);
    assert!(s.h.modify_qp_with(&q2, 4, ARPV).error);
}

/// spec control-path §4.3.5: ORD is taken only with ORDVALID; a READ on a
/// QP whose ORD is 0 raises RDMA_READ_WHILE_ORD_ZERO (§8).
#[test]
fn modify_qp_takes_ord_only_with_its_valid_bit() {
    let mut s = setup();
    let mut q = idle_qp(&mut s, 12);
    assert!(!s.h.modify_qp_with(&q, 4, ARPV | CQNV).error);
    assert!(!s.h.modify_qp_with(&q, 2, ARPV | CQNV).error, "RTS without ORDVALID");
    assert_eq!(s.h.dev(|d| d.qp(12).unwrap().ord), 0);
    s.h.post_send(&mut q, |v| {
        sq_frag_wqe(sqop::READ, STAG, VA + 0x1000, &[sge(0, 8)], None, true, v)
    });
    let (code, src, id, _) = s.h.aeq_poll().expect("AE");
    assert_eq!((code, src, id), (ae::RDMA_READ_WHILE_ORD_ZERO, ae::SRC_SQ, 12));
    assert_eq!(s.h.dev(|d| d.qp(12).unwrap().state), qps::ERROR);
    // with ORDVALID the ORD of the context (8) is taken
    let q2 = idle_qp(&mut s, 13);
    assert!(!s.h.modify_qp_with(&q2, 4, ARPV | CQNV).error);
    assert!(!s.h.modify_qp_with(&q2, 2, ARPV | CQNV | ORDV).error);
    assert_eq!(s.h.dev(|d| d.qp(13).unwrap().ord), 8);
}

/// spec control-path §4.3.5: CQ numbers are taken only with CQNUMVALID.
#[test]
fn modify_qp_takes_cq_numbers_only_with_their_valid_bit() {
    let mut s = setup();
    let mut q = idle_qp(&mut s, 12);
    q.ctx[17] = 5 | f(6, 56, 32);
    assert!(!s.h.modify_qp_with(&q, 4, ARPV).error);
    assert_eq!(s.h.dev(|d| (d.qp(12).unwrap().tx_cq, d.qp(12).unwrap().rx_cq)), (3, 4));
    assert!(!s.h.modify_qp_with(&q, 2, ARPV | CQNV | ORDV).error);
    assert_eq!(s.h.dev(|d| (d.qp(12).unwrap().tx_cq, d.qp(12).unwrap().rx_cq)), (5, 6));
}

/// spec control-path §7.2/§7.4/§4.3.20: at RTR the queue-set handle must be
/// an enabled work-scheduler leaf and SNDMSS a RoCE path MTU (256..=4096).
#[test]
fn rtr_needs_an_enabled_ws_leaf_and_an_mss_in_range() {
    let mut s = setup();
    let leaf = s.h.ws_leaf();
    let mut q = idle_qp(&mut s, 12);
    let set_qs = |q: &mut TQp, h: u16| q.ctx[22] = f(h as u64, 25, 16);
    let set_mss = |q: &mut TQp, m: u64| q.ctx[6] = (q.ctx[6] & !f(0x3FFF, 29, 16)) | f(m, 29, 16);
    set_qs(&mut q, leaf + 1); // no such leaf
    assert!(s.h.modify_qp_with(&q, 4, ARPV | CQNV).error);
    // a disabled leaf
    let ws = |nop: u64, en: bool| {
        [
            0,
            0,
            0,
            hdr(
                0x2C,
                2 | f(1, 29, 16) | f(nop, 55, 52) | f(1, 60, 59) | 1 << 61 | (en as u64) << 62,
            ),
            f(1, 38, 32),
            0,
            0,
            0,
        ]
    };
    s.h.op_ok(ws(1, false));
    set_qs(&mut q, leaf);
    assert!(s.h.modify_qp_with(&q, 4, ARPV | CQNV).error, "leaf disabled");
    s.h.op_ok(ws(1, true));
    for bad in [0, 128, 4097, 9000] {
        set_mss(&mut q, bad);
        assert!(s.h.modify_qp_with(&q, 4, ARPV | CQNV).error, "MSS {bad}");
    }
    set_mss(&mut q, 4096);
    assert!(!s.h.modify_qp_with(&q, 4, ARPV | CQNV).error);
    assert_eq!(s.h.dev(|d| d.qp(12).unwrap().state), qps::RTR);
}

/// Model choice (crate docs): DESTROY_QP of a live QP (RTR/RTS/SQD) is
/// refused; Linux moves it to ERROR first (spec control-path §4.3.6).
#[test]
fn destroy_qp_needs_error_or_a_never_used_idle_qp() {
    let mut s = setup();
    let destroy = |h: &mut Harness, q: &TQp| {
        h.op([0, 0, q.ctx_pa, hdr(0x02, q.id as u64 | f(3, 50, 48)), 0, q.shadow, 0, 0])
    };
    let c = destroy(&mut s.h, &s.a);
    assert!(c.error);
    assert_eq!(c.minor, regs::err::MIN_INVALID_STATE);
    assert!(s.h.dev(|d| d.qp(10).is_some()));
    assert!(!s.h.modify_qp(&s.a, 6).error);
    assert!(!destroy(&mut s.h, &s.a).error);
    assert!(s.h.dev(|d| d.qp(10).is_none()));
    let q = idle_qp(&mut s, 12);
    assert!(!destroy(&mut s.h, &q).error, "straight from CREATE_QP");
}

/// spec data-path §2.1: an RQ WQE's ADDFRAGCNT follows the §1.5 rule, so it
/// is even on GEN_2; an odd one is refused when a SEND needs the WQE.
#[test]
fn an_rq_wqe_with_an_odd_addfragcnt_is_refused() {
    let mut s = setup();
    s.b.rq_pol = !s.b.rq_pol; // what post_recv does at index 0
    let mut w = rq_wqe(&[sge(0x3000, 8), sge(0x3008, 8)], s.b.rq_pol, 64);
    w[3] = (w[3] & !f(0xF, 41, 38)) | f(1, 41, 38);
    for (i, v) in w.iter().enumerate() {
        s.h.mem.set64(s.b.rq_pa + i as u64 * 8, *v);
    }
    s.b.rq_head = 1;
    s.h.post_send(&mut s.a, |v| sq_frag_wqe(sqop::SEND, 0, 0, &[sge(0, 8)], None, true, v));
    assert_eq!(s.h.dev(|d| d.counters().invalid_wqes), 1);
    assert_eq!(s.h.dev(|d| d.qp(11).unwrap().state), qps::ERROR);
    let mut aes = Vec::new();
    while let Some((code, src, id, _)) = s.h.aeq_poll() {
        aes.push((code, src, id));
    }
    assert!(aes.contains(&(ae::WQE_UNEXPECTED_OPCODE, ae::SRC_RQ, 11)), "{aes:x?}");
    assert!(s.h.poll_cq(&mut s.rx_b).is_none());
}
