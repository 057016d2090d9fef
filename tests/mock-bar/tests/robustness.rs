//! Garbage in, no panic out: random CQP WQEs, random SQ/RQ WQEs, random
//! register writes and random host contexts against a brought-up device.
//! (Deterministic xorshift; a failure prints the seed and iteration.)

mod common;
use common::*;
use mock_bar::regs::{self, op};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Mostly-plausible values: small numbers, addresses near the harness's
    /// memory, or anything.
    fn word(&mut self, near: u64) -> u64 {
        match self.next() % 4 {
            0 => self.next() % 64,
            1 => near + (self.next() % 0x4000) * 8,
            2 => 0,
            _ => self.next(),
        }
    }
}

const OPS: [u8; 24] = [
    op::CREATE_QP,
    op::MODIFY_QP,
    op::DESTROY_QP,
    op::CREATE_CQ,
    op::MODIFY_CQ,
    op::DESTROY_CQ,
    op::ALLOC_STAG,
    op::REG_MR,
    op::DEALLOC_STAG,
    op::MANAGE_ARP,
    op::QUERY_RDMA_FEATURES,
    op::CREATE_CEQ,
    op::DESTROY_CEQ,
    op::CREATE_AEQ,
    op::DESTROY_AEQ,
    op::UPDATE_PE_SDS,
    op::QUERY_FPM_VAL,
    op::COMMIT_FPM_VAL,
    op::FLUSH_WQES,
    op::NOP,
    op::SHMC_PAGES_ALLOCATED,
    op::WORK_SCHED_NODE,
    0x3F,
    0x13,
];

#[test]
fn random_cqp_wqes_never_panic() {
    let mut h = Harness::new();
    h.bring_up();
    let scratch = h.alloc(0x20000, 4096);
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    for i in 0..4000 {
        // random bytes in the scratch area used as contexts/buffers
        for _ in 0..8 {
            let v = r.word(scratch);
            h.mem.set64(scratch + (r.next() % 0x4000) * 8, v);
        }
        let mut w = [0u64; 8];
        for x in w.iter_mut() {
            *x = r.word(scratch);
        }
        let opc = OPS[(r.next() % OPS.len() as u64) as usize];
        w[3] = (w[3] & !(0x3F << 32)) | (opc as u64) << 32;
        let before = h.rd(regs::CQPTAIL);
        h.post(w);
        // every op is answered: either a CCQ CQE or, if the CCQ is gone, CQPTAIL
        if h.ccq_poll().is_none() {
            let cqp_alive = h.dev(|d| d.cqp().is_some());
            let moved = h.rd(regs::CQPTAIL) != before;
            assert!(
                moved || !cqp_alive || h.dev(|d| d.cq(0).is_none()),
                "op {opc:#x} unanswered at iteration {i}"
            );
        }
    }
    assert!(h.dev(|d| d.counters().cqp_ops) >= 1000);
}

#[test]
fn random_sq_and_rq_wqes_and_doorbells_never_panic() {
    let mut h = Harness::new();
    h.bring_up();
    h.op_ok([0, 0, 1, hdr(op::MANAGE_ARP, 1 | 1 << 42), 0, 0, 0, 0]);
    h.create_cq(3, 64);
    h.create_cq(4, 64);
    let buf = h.alloc(0x4000, 4096);
    h.reg_mr0(0x0000_0511, 1, 0, buf, 0x4000, 0x0F);
    let mut r = Rng(0x1234_5678_9ABC_DEF1);
    for round in 0..40 {
        let mut a = h.create_qp(10, 1, 3, 4, 5, 5, 11, (round % 8) as u8);
        let mut b = h.create_qp(11, 1, 3, 4, 5, 5, 10, 7);
        for _ in 0..50 {
            let n = 1 + (r.next() % 8) as usize;
            let words: Vec<u64> = (0..n * 4)
                .map(|_| match r.next() % 3 {
                    0 => 0x0000_0511,
                    1 => r.next() % 0x5000,
                    _ => r.next(),
                })
                .collect();
            h.write_sq(&mut a, &|v| {
                let mut w = words.clone();
                for q in 0..n {
                    w[q * 4 + 3] = (w[q * 4 + 3] & !(1 << 63)) | (v as u64) << 63;
                }
                w
            });
            let sg = Sge {
                addr: r.next() % 0x5000,
                stag: if r.next().is_multiple_of(2) { 0x511 } else { r.next() as u32 },
                len: (r.next() % 0x2000) as u32,
            };
            h.post_recv(&mut b, &[sg]);
            match r.next() % 5 {
                0 => h.wr(regs::WQEALLOC, (r.next() % 20) as u32),
                1 => h.wr(regs::CQARM, (r.next() % 8) as u32),
                2 => h.dev(|d| d.step()),
                _ => h.ring(&a),
            }
        }
        // tear down whatever state the QPs are in: ERROR first, as Linux
        for q in [&a, &b] {
            h.modify_qp(q, 6);
            h.op([0, 0, q.ctx_pa, hdr(op::DESTROY_QP, q.id as u64 | f(3, 50, 48)), 0, 0, 0, 0]);
        }
        while h.aeq_poll().is_some() {}
    }
    assert!(h.dev(|d| d.counters().sq_wqes) > 0);
}

#[test]
fn random_register_writes_never_panic() {
    let mut h = Harness::new();
    h.bring_up();
    let mut r = Rng(42);
    let offs = [
        regs::CQPDB,
        regs::CQPTAIL,
        regs::CCQPHIGH,
        regs::CCQPLOW,
        regs::CQARM,
        regs::CQACK,
        regs::AEQALLOC,
        regs::WQEALLOC,
        regs::CCQPSTATUS,
        regs::DB_ADDR_OFFSET,
        regs::DB_ADDR_OFFSET + 64,
        regs::PFHMC_PDINV,
    ];
    for _ in 0..20000 {
        let off = if r.next().is_multiple_of(10) {
            r.next() as u32
        } else {
            offs[(r.next() % offs.len() as u64) as usize]
        };
        h.wr(off, r.next() as u32);
        let _ = h.rd(r.next() as u32);
    }
}

#[test]
fn addresses_at_the_top_of_the_space_fault_instead_of_overflowing() {
    let mut h = Harness::new();
    let ctx = h.alloc(64, 64);
    h.mem.set64(ctx, f(5, 11, 8));
    h.mem.set64(ctx + 8, 0xFFFF_FFFF_FFFF_FE00); // SQ at the very top
    h.mem.set64(ctx + 32, f(1, 31, 16));
    h.wr(regs::CCQPHIGH, (ctx >> 32) as u32);
    h.wr(regs::CCQPLOW, ctx as u32);
    assert_eq!(h.rd(regs::CCQPSTATUS), 1);
    h.wr(regs::CQPTAIL, 0x7FF); // tail beyond the ring size
    h.wr(regs::CQPDB, 9);
    assert!(h.dev(|d| d.counters().dma_faults) >= 1);
    // a brought-up device with queues and MRs at the top of the space
    let mut h = Harness::new();
    h.bring_up();
    let top = 0xFFFF_FFFF_FFFF_F000u64;
    h.op(Harness::create_cq_wqe(3, 64, top, top + 0xF00, 1, Some(0)));
    h.op(Harness::create_cq_wqe(4, 64, top, top, 1, Some(0)));
    h.op([0, 0, 64, hdr(op::CREATE_CEQ, 5), top, 0, 0, 0]);
    h.op(Harness::reg_mr_wqe(
        0x0000_0611,
        1,
        u64::MAX - 0x10,
        0x1_0000_0000,
        0x0F,
        0,
        top,
        0,
        true,
    ));
    // PBLEs pointing at the top (level 2 root → leaf index near u64::MAX)
    h.mem.set64(h.pble_pa(10), u64::MAX - 3);
    h.mem.set64(h.pble_pa(20), top);
    h.op(Harness::reg_mr_wqe(0x0000_0711, 1, 0, 0x10_0000, 0x0F, 3, 0, 10, true));
    h.op(Harness::reg_mr_wqe(0x0000_0811, 1, 0, 0x10_0000, 0x0F, 1, 0, 20, true));
    h.op_ok([0, 0, 1, hdr(op::MANAGE_ARP, 1 | 1 << 42), 0, 0, 0, 0]);
    h.create_cq(5, 64);
    let mut q = h.create_qp(10, 1, 5, 5, 5, 5, 10, 2);
    for stag in [0x0611u32, 0x0711, 0x0811] {
        h.post_send(&mut q, |v| {
            sq_frag_wqe(
                sqop::WRITE,
                stag,
                0x10,
                &[Sge { addr: u64::MAX - 0x20, stag, len: 0x7FFF_FFFF }],
                None,
                true,
                v,
            )
        });
        h.post_send(&mut q, |v| {
            sq_frag_wqe(sqop::READ, stag, 0x10, &[Sge { addr: 0x20, stag, len: 64 }], None, true, v)
        });
    }
    h.wr(regs::CQARM, 3);
    h.wr(regs::CQARM, 4);
}
