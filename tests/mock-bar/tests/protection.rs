//! Protection on every local and remote access: each violation moves the
//! offending QP to ERROR and raises the matching AE (spec control-path §5,
//! §8.2), without a CQE or a panic; QP/MR op validation.

mod common;
use common::*;
use mock_bar::regs::{ae, err, op, qps};

struct S {
    h: Harness,
    a: TQp,
    b: TQp,
    tx_a: TCq,
    buf: u64,
}

fn setup(rights: u8) -> S {
    let mut h = Harness::new();
    // local MR with everything (the first page), and a "remote" MR with `rights`
    let QpPair { a, b, cqs: [tx_a, ..], buf } = h.qp_pair(0x2000, 0x1000, 2);
    h.reg_mr0(0x8000_0644, PD, VA + 0x1000, buf + 0x1000, 0x1000, rights);
    S { h, a, b, tx_a, buf }
}

fn local(off: u64, len: u32) -> Sge {
    Sge { addr: VA + off, stag: STAG, len }
}

/// Posts one WRITE from A and returns the AEs raised (code, qp).
fn write(s: &mut S, sg: Sge, rkey: u32, raddr: u64, len_ok: bool) -> Vec<(u16, u32)> {
    let _ = len_ok;
    s.h.post_send(&mut s.a, |v| sq_frag_wqe(sqop::WRITE, rkey, raddr, &[sg], None, true, v));
    let mut v = Vec::new();
    while let Some(a) = s.h.aeq_poll() {
        v.push((a.0, a.2));
    }
    v
}

fn assert_local_fault(code: u16, sg: Sge) {
    let mut s = setup(0x0F);
    let aes = write(&mut s, sg, 0x8000_0644, VA + 0x1000, true);
    assert_eq!(aes, vec![(code, 10)]);
    assert_eq!(s.h.dev(|d| d.qp(10).unwrap().state), qps::ERROR);
    assert!(s.h.poll_cq(&mut s.tx_a).is_none(), "no CQE: software flushes");
    assert_eq!(s.h.dev(|d| d.qp(11).unwrap().state), qps::RTS, "nothing reached the peer");
}

#[test]
fn local_lkey_checks() {
    assert_local_fault(ae::AMP_BAD_STAG_KEY, Sge { stag: STAG ^ 1, ..local(0, 8) });
    assert_local_fault(ae::AMP_UNALLOCATED_STAG, Sge { stag: 0x8000_0700, ..local(0, 8) });
    // same slot (low 14 index bits), other upper bits
    assert_local_fault(ae::AMP_BAD_STAG_INDEX, Sge { stag: 0x4000_0533, ..local(0, 8) });
    assert_local_fault(ae::AMP_BOUNDS_VIOLATION, local(0xFF8, 16));
    assert_local_fault(ae::AMP_BOUNDS_VIOLATION, Sge { addr: VA - 1, ..local(0, 8) });
    assert_local_fault(ae::AMP_TO_WRAP, Sge { addr: u64::MAX - 2, ..local(0, 8) });
}

#[test]
fn local_pd_and_rights_checks() {
    let mut s = setup(0x0F);
    // an MR of another PD
    s.h.reg_mr0(0x8000_0722, PD + 1, VA, s.buf, 0x1000, 0x0F);
    let aes =
        write(&mut s, Sge { stag: 0x8000_0722, ..local(0, 8) }, 0x8000_0644, VA + 0x1000, true);
    assert_eq!(aes, vec![(ae::AMP_BAD_PD, 10)]);
    // a receive into an MR without LOCAL_WRITE
    let mut s = setup(0x0F);
    s.h.reg_mr0(0x8000_0723, PD, VA, s.buf, 0x1000, 0x01);
    s.h.post_recv(&mut s.b, &[Sge { stag: 0x8000_0723, ..local(0, 8) }]);
    s.h.post_send(&mut s.a, |v| sq_frag_wqe(sqop::SEND, 0, 0, &[local(0, 8)], None, true, v));
    let mut aes = Vec::new();
    while let Some(a) = s.h.aeq_poll() {
        aes.push((a.0, a.1, a.2));
    }
    assert_eq!(
        aes,
        vec![
            (ae::AMP_RIGHTS_VIOLATION, ae::SRC_RQ, 11),
            (ae::IB_REMOTE_ACCESS_ERROR, ae::SRC_SQ, 10)
        ]
    );
}

#[test]
fn remote_rkey_checks_fail_both_sides() {
    for (rights, rkey, raddr, len, code) in [
        (0x03u8, 0x8000_0644u32, VA + 0x1000, 8u32, ae::AMP_RIGHTS_VIOLATION), // no remote write
        (0x0F, 0x8000_0645, VA + 0x1000, 8, ae::AMP_BAD_STAG_KEY),
        (0x0F, 0x8000_0644, VA + 0x1FFC, 8, ae::AMP_BOUNDS_VIOLATION),
        (0x0F, 0x8000_0A44, VA + 0x1000, 8, ae::AMP_UNALLOCATED_STAG),
    ] {
        let mut s = setup(rights);
        let before = s.h.mem.bytes(s.buf + 0x1000, 0x1000);
        let aes = write(&mut s, local(0, len), rkey, raddr, true);
        assert_eq!(
            aes,
            vec![(code, 11), (ae::IB_REMOTE_ACCESS_ERROR, 10)],
            "rights {rights:#x} rkey {rkey:#x}"
        );
        assert_eq!(s.h.mem.bytes(s.buf + 0x1000, 0x1000), before, "nothing written");
        assert_eq!(
            s.h.dev(|d| (d.qp(10).unwrap().state, d.qp(11).unwrap().state)),
            (qps::ERROR, qps::ERROR)
        );
    }
}

#[test]
fn remote_read_needs_remote_read_right() {
    let mut s = setup(0x0B); // local r/w + remote write, no remote read
    s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(sqop::READ, 0x8000_0644, VA + 0x1000, &[local(0, 8)], None, true, v)
    });
    assert_eq!(s.h.aeq_poll().map(|a| (a.0, a.2)), Some((ae::AMP_RIGHTS_VIOLATION, 11)));
}

#[test]
fn zero_based_mr_bounds() {
    let mut s = setup(0x0F);
    // zero-based: IOVA 0 is the first byte (first-byte offset 0x10)
    s.h.op_ok(Harness::reg_mr_wqe(0x8000_0B01, PD, 0x10, 0x100, 0x0F, 0, s.buf + 0x1000, 0, false));
    s.h.mem.fill(s.buf, b"zerobased");
    s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(sqop::WRITE, 0x8000_0B01, 0xFA, &[local(0, 9)], None, true, v)
    });
    assert_eq!(s.h.aeq_poll().map(|a| a.0), Some(ae::AMP_BOUNDS_VIOLATION), "0xFA + 9 > 0x100");
    let mut s = setup(0x0F);
    s.h.op_ok(Harness::reg_mr_wqe(0x8000_0B01, PD, 0x10, 0x100, 0x0F, 0, s.buf + 0x1000, 0, false));
    s.h.mem.fill(s.buf, b"zerobased");
    s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(sqop::WRITE, 0x8000_0B01, 0x20, &[local(0, 9)], None, true, v)
    });
    assert_eq!(s.h.mem.bytes(s.buf + 0x1000 + 0x10 + 0x20, 9), b"zerobased");
}

#[test]
fn dma_fault_on_a_registered_but_unmapped_page_is_catastrophic_not_a_panic() {
    let mut s = setup(0x0F);
    // MR whose PA points at memory the host never mapped
    s.h.reg_mr0(0x8000_0C01, PD, VA, 0x66_0000_0000, 0x1000, 0x0F);
    let aes = write(&mut s, local(0, 8), 0x8000_0C01, VA, true);
    assert_eq!(aes, vec![(ae::LCE_QP_CATASTROPHIC, 11), (ae::IB_REMOTE_ACCESS_ERROR, 10)]);
}

#[test]
fn malformed_wqe_raises_unexpected_opcode() {
    let mut s = setup(0x0F);
    s.h.post_send(&mut s.a, |v| vec![0, 0, 0, f(0x3E, 37, 32) | (v as u64) << 63]);
    assert_eq!(
        s.h.aeq_poll().map(|a| (a.0, a.1, a.2)),
        Some((ae::WQE_UNEXPECTED_OPCODE, ae::SRC_SQ, 10))
    );
    // a second quantum without its valid bit
    let mut s = setup(0x0F);
    s.h.post_send(&mut s.a, |v| {
        let mut w = sq_frag_wqe(
            sqop::WRITE,
            0x8000_0644,
            VA + 0x1000,
            &[local(0, 4), local(4, 4)],
            None,
            true,
            v,
        );
        w[7] &= !(1 << 63);
        w
    });
    assert_eq!(s.h.aeq_poll().map(|a| a.0), Some(ae::WQE_UNEXPECTED_OPCODE));
}

#[test]
fn qp_state_machine_and_op_validation() {
    let mut s = setup(0x0F);
    // RTS → RTR is not a transition
    let c = s.h.modify_qp(&s.a, 4);
    assert_eq!((c.major, c.minor), (err::MAJ_GENERIC, err::MIN_INVALID_STATE));
    // RTS → SQD raises QP_SUSPEND_COMPLETE, SQD → RTS is fine
    assert!(!s.h.modify_qp(&s.a, 3).error);
    assert_eq!(s.h.aeq_poll().map(|a| (a.0, a.2)), Some((ae::QP_SUSPEND_COMPLETE, 10)));
    assert!(!s.h.modify_qp(&s.a, 2).error);
    // work posted while not in RTS waits
    assert!(!s.h.modify_qp(&s.a, 6).error);
    s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(sqop::WRITE, 0x8000_0644, VA + 0x1000, &[local(0, 4)], None, true, v)
    });
    assert!(s.h.poll_cq(&mut s.tx_a).is_none());
    // ERROR → RTS is not allowed
    assert!(s.h.modify_qp(&s.a, 2).error);
    // CQ in use by a QP cannot be destroyed
    let c = s.h.op([32, 0, 0, hdr(op::DESTROY_CQ, 3), 0, 0, 0, 0]);
    assert_eq!(c.minor, err::MODEL_MIN_IN_USE);
    // duplicate / out-of-range QP ids, unknown CQ, iWARP type (RoCE RC 3
    // and RoCE UD 4 are the types the model runs)
    let ctx = s.a.ctx_pa;
    let create = |id: u64, ty: u64| {
        [
            0,
            0,
            ctx,
            hdr(op::CREATE_QP, id | 1 << 47 | f(ty, 50, 48) | f(1, 62, 60)),
            0,
            0x1000,
            0,
            0,
        ]
    };
    assert_eq!(s.h.op(create(10, 3)).minor, err::MODEL_MIN_IN_USE);
    assert!(s.h.op(create(16, 3)).error, "QP id ≥ committed count");
    assert_eq!(s.h.op(create(12, 1)).minor, err::MODEL_MIN_UNSUPPORTED_OP);
    s.h.mem.set64(ctx + 136, 9 | f(9, 56, 32)); // CQ 9 does not exist
    assert_eq!(s.h.op(create(12, 3)).minor, err::MODEL_MIN_BAD_FIELD);
    // destroy
    assert!(!s.h.op([0, 0, ctx, hdr(op::DESTROY_QP, 10 | f(3, 50, 48)), 0, 0, 0, 0]).error);
    assert!(s.h.op([0, 0, ctx, hdr(op::DESTROY_QP, 10 | f(3, 50, 48)), 0, 0, 0, 0]).error);
}

#[test]
fn stag_ops_validate() {
    let mut s = setup(0x0F);
    // slot in use
    let c = s.h.op(Harness::reg_mr_wqe(STAG, PD, VA, 0x1000, 0x0F, 0, s.buf, 0, true));
    assert_eq!(c.minor, err::MODEL_MIN_IN_USE);
    // LPBLSIZE 2 is not an encoding; HPAGESIZE 3 neither; PBLE index beyond the pool
    assert!(s.h.op(Harness::reg_mr_wqe(0x8000_0D01, PD, VA, 0x1000, 0x0F, 2, 0, 0, true)).error);
    assert!(
        s.h.op(Harness::reg_mr_wqe(0x8000_0D01, PD, VA, 0x1000, 0x0F, 1, 0, 1 << 20, true)).error
    );
    let mut w = Harness::reg_mr_wqe(0x8000_0D01, PD, VA, 0x1000, 0x0F, 0, s.buf, 0, true);
    w[3] |= f(3, 47, 46);
    assert!(s.h.op(w).error);
    // MR index beyond the committed MR count (slot 64 of 64)
    assert!(
        s.h.op(Harness::reg_mr_wqe(0x0000_4001, PD, VA, 0x1000, 0x0F, 0, s.buf, 0, true)).error
    );
    // dealloc with the wrong PD fails, right PD works, twice fails
    let dealloc = |pd: u32| {
        [
            0,
            f(pd as u64, 63, 46),
            f(STAG as u64 >> 8, 31, 8),
            hdr(op::DEALLOC_STAG, 1 << 43),
            0,
            0,
            0,
            0,
        ]
    };
    assert_eq!(s.h.op(dealloc(PD + 1)).minor, err::MIN_STAG_INVALID);
    assert!(!s.h.op(dealloc(PD)).error);
    assert!(s.h.op(dealloc(PD)).error);
    assert!(s.h.dev(|d| d.stag(STAG >> 8).is_none()));
}
