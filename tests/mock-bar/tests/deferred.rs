//! Deferred mode (plain-memory BAR semantics): writes latch, work happens on
//! poll; doorbells coalesce and sweeps find the work; the device thread.

mod common;
use common::*;
use mock_bar::regs::{self, op};
use mock_bar::{Config, Fabric, Mode, TestMemory};
use std::time::{Duration, Instant};

fn deferred() -> Harness {
    Harness::with_config(
        Config { mode: Mode::Deferred, ..Config::default() },
        TestMemory::new(),
        Fabric::new(),
        0x1_0000_0000,
    )
}

/// A 64-entry CQP SQ and a minimal CQP host context naming it (SQ size
/// code 5 in bits 11:8, the SQ base, 1 in word 4 bits 31:16 as
/// `Harness::create_cqp` writes), with the context's upper half
/// already in CCQPHIGH: the caller's CCQPLOW write is what creates.
/// Returns (SQ, context) addresses.
fn stage_cqp(h: &mut Harness) -> (u64, u64) {
    let sq = h.alloc(64 * 64, 4096);
    let ctx = h.alloc(64, 64);
    h.mem.set64(ctx, f(5, 11, 8));
    h.mem.set64(ctx + 8, sq);
    h.mem.set64(ctx + 32, f(1, 31, 16));
    h.wr(regs::CCQPHIGH, (ctx >> 32) as u32);
    (sq, ctx)
}

#[test]
fn writes_latch_and_poll_does_the_work() {
    let mut h = deferred();
    let (sq, ctx) = stage_cqp(&mut h);
    h.fabric.poll();
    assert_eq!(h.rd(regs::CCQPSTATUS), 0, "HIGH alone does not create");
    h.wr(regs::CCQPLOW, ctx as u32);
    assert_eq!(h.rd(regs::CCQPSTATUS), 0, "nothing before the poll");
    assert_eq!(h.rd(regs::CCQPLOW), ctx as u32, "plain memory reads back");
    h.fabric.poll();
    assert_eq!(h.rd(regs::CCQPSTATUS), 1);
    h.cqp_sq = sq;
    h.cqp_size = 64;
    h.post(nop());
    assert_eq!(h.rd(regs::CQPTAIL), 0);
    assert!(h.fabric.poll());
    assert_eq!(h.rd(regs::CQPTAIL), 1);
    assert!(!h.fabric.poll(), "nothing left");
    let st = h.dev(|d| d.status_registers());
    assert!(st.contains(&(regs::CQPTAIL, 1)) && st.contains(&(regs::CCQPSTATUS, 1)));
}

fn nop() -> [u64; 8] {
    [0, 0, 0, hdr(op::NOP, 0), 0, 0, 0, 0]
}

#[test]
fn coalesced_doorbells_are_found_by_the_sweep() {
    let mut h = deferred();
    h.auto_poll = true;
    h.bring_up();
    let (mut tx, stag) = h.loopback_mr();
    let mut a = h.create_qp(10, 1, 3, 4, 5, 5, 11, 2);
    let mut b = h.create_qp(11, 1, 3, 4, 5, 5, 10, 2);
    h.auto_poll = false;
    let sg = Sge { addr: 0, stag, len: 4 };
    h.write_sq(&mut a, &|v| sq_frag_wqe(sqop::WRITE, stag, 0x100, &[sg], None, true, v));
    h.write_sq(&mut b, &|v| sq_frag_wqe(sqop::WRITE, stag, 0x200, &[sg], None, true, v));
    // two doorbells, one visible value change (the second QP id overwrote the first)
    h.fabric.mmio_write32(h.id, regs::WQEALLOC, 10);
    h.fabric.mmio_write32(h.id, regs::WQEALLOC, 11);
    h.fabric.poll();
    assert!(h.poll_cq(&mut tx).is_some());
    assert!(h.poll_cq(&mut tx).is_some(), "both QPs' work found");
    // work without any doorbell change is found and counted
    h.write_sq(&mut a, &|v| sq_frag_wqe(sqop::WRITE, stag, 0x300, &[sg], None, true, v));
    h.fabric.poll();
    assert!(h.poll_cq(&mut tx).is_some());
    assert_eq!(
        h.dev(|d| d.counters().work_without_doorbell),
        1,
        "the first sweep had a doorbell change, this one not"
    );
}

#[test]
fn arming_is_seen_from_the_shadow_sequence_number() {
    let mut h = deferred();
    h.auto_poll = true;
    h.bring_up();
    let cq = h.create_cq(3, 32);
    let ceq = h.ceq0.as_ref().unwrap().pa;
    // new ARM_SEQ_NUM + ARM_NEXT in the shadow, no CQARM write at all
    h.mem.set64(cq.shadow + 32, 1 << 14 | f(1, 17, 16));
    h.fabric.poll();
    assert_eq!(h.dev(|d| d.cq(3).unwrap().arm), mock_bar::device::Arm::Next);
    assert_eq!(h.mem.get64(ceq), 0);
}

#[test]
fn device_thread_answers_on_its_own() {
    let mut h = deferred();
    let _t = h.fabric.spawn_device_thread(Duration::from_micros(50));
    let (sq, ctx) = stage_cqp(&mut h);
    h.wr(regs::CCQPLOW, ctx as u32);
    let wait = |h: &Harness, off: u32, want: u32| {
        let t0 = Instant::now();
        while h.rd(off) != want {
            assert!(t0.elapsed() < Duration::from_secs(5), "device thread never answered");
            std::thread::yield_now();
        }
    };
    wait(&h, regs::CCQPSTATUS, 1);
    h.cqp_sq = sq;
    h.cqp_size = 64;
    for i in 1..=3 {
        h.post(nop());
        wait(&h, regs::CQPTAIL, i);
    }
}
