//! The engine against a small scripted fake device written here (the real
//! device model lives in tests/mock-bar and is used end to end later).
//!
//! The fake reads the CQP host context at CCQPLOW, consumes SQ WQEs on
//! CQPDB — refusing any whose valid bit is not the pass polarity — and
//! completes them through CQPTAIL or, once a CREATE_CQ for CQ 0 was seen,
//! through CCQ CQEs it writes itself.

extern crate std;

use std::collections::HashMap;
use std::sync::Mutex;
use std::vec::Vec;

use irdma_hal::cqp::{cq as cqf, hdr, op};
use irdma_testkit::FakeHal;

use super::*;
use crate::cqp::cmd::{
    DestroyAeq, FlushWqes, QueryFpmVal, QueryRdmaFeatures, QueueAddr, WsNode, WsNodeOp,
};

/// Times the register-poll completion path issued its read barrier.
pub(super) static COMPLETION_RMB: core::sync::atomic::AtomicUsize =
    core::sync::atomic::AtomicUsize::new(0);

#[derive(Default)]
pub(crate) struct Dev {
    regs: HashMap<usize, u32>,
    pub(crate) writes: Vec<(usize, u32)>,
    sq_pa: u64,
    sq_size: u32,
    tail: u32,
    pass: bool,
    ctx24: u64,
    /// (ring pa, entries, head, polarity)
    ccq: Option<(u64, u32, u32, bool)>,
    create_status: u32,
    errcodes: u32,
    fail: Option<(u8, u16, u16)>,
    hang: bool,
    ret_val: u32,
    /// Minor code of successful CQEs (FLUSH_WQES reports 2/3 there).
    ok_minor: u16,
    opcodes: Vec<u8>,
    bad_valid: usize,
    /// Completions held back (CCQ mode) to deliver in reverse order.
    reverse: bool,
    held: Vec<(u32, u8)>,
    /// CQPTAIL reads before a CQPDB write is acted on (0 = at once): a
    /// device that polls, like the model behind a shared-memory BAR.
    lag: u32,
    /// A latched doorbell and the reads left until it is processed.
    pending_db: Option<(u32, u32)>,
    /// Added to the WQE index written in CCQ CQEs (a misbehaving device).
    idx_add: u32,
}

pub(crate) struct FakeDev(Mutex<Dev>);

fn rd(pa: u64) -> u64 {
    // SAFETY: FakeHal's bus address is the host address of a live DMA
    // allocation the engine owns for as long as it talks to this device.
    unsafe { (pa as *const u64).read_volatile() }
}
fn wr(pa: u64, v: u64) {
    // SAFETY: as in `rd`; the engine gave this memory to the device.
    unsafe { (pa as *mut u64).write_volatile(v) }
}

impl FakeDev {
    pub(crate) fn new() -> Self {
        FakeDev(Mutex::new(Dev { create_status: 1, ..Default::default() }))
    }
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Dev) -> R) -> R {
        f(&mut self.0.lock().unwrap())
    }
}

impl Dev {
    fn complete(&mut self, idx: u32, opcode: u8) {
        let fail = self.fail.filter(|f| f.0 == opcode);
        match self.ccq.as_mut() {
            Some((ring, entries, head, pol)) => {
                let base = *ring + *head as u64 * 32;
                let mut w24 =
                    (idx.wrapping_add(self.idx_add) as u64 & 0x7fff) << 32 | (*pol as u64) << 63;
                if let Some((_, maj, min)) = fail {
                    w24 |= 1 << 55 | (maj as u64) << 16 | min as u64;
                } else {
                    w24 |= self.ok_minor as u64;
                }
                wr(base + 8, self.ctx24);
                wr(base + 16, self.ret_val as u64);
                wr(base + 24, w24);
                *head += 1;
                if *head == *entries {
                    *head = 0;
                    *pol = !*pol;
                }
            }
            None => {
                if let Some((_, maj, min)) = fail {
                    self.regs.insert(regs::CQPERRCODES, (maj as u32) << 16 | min as u32);
                    let t = self.regs.get(&regs::CQPTAIL).copied().unwrap_or(0);
                    self.regs.insert(regs::CQPTAIL, t | 1 << 31);
                } else {
                    self.regs.insert(regs::CQPTAIL, (idx + 1) % self.sq_size);
                }
            }
        }
    }

    fn doorbell(&mut self, head: u32) {
        if self.hang {
            return;
        }
        while self.tail != head % self.sq_size.max(1) {
            let idx = self.tail;
            if idx == 0 {
                self.pass = !self.pass;
            }
            let base = self.sq_pa + idx as u64 * 64;
            let h = rd(base + 24);
            if hdr::WQEVALID.is_set(h) != self.pass {
                self.bad_valid += 1;
                if idx == 0 {
                    self.pass = !self.pass;
                }
                return;
            }
            self.tail = (idx + 1) % self.sq_size;
            let opcode = hdr::OPCODE.get(h) as u8;
            self.opcodes.push(opcode);
            if opcode == op::CREATE_CQ && cqf::CQID.get(h) == 0 {
                self.ccq = Some((rd(base + 32), rd(base) as u32, 0, true));
            }
            let ccq_destroy = opcode == op::DESTROY_CQ && cqf::CQID.get(h) == 0;
            if ccq_destroy {
                self.ccq = None;
            }
            if self.reverse && self.ccq.is_some() {
                self.held.push((idx, opcode));
            } else {
                self.complete(idx, opcode);
            }
        }
    }

    fn release_reversed(&mut self) {
        while let Some((idx, opcode)) = self.held.pop() {
            self.complete(idx, opcode);
        }
    }
}

impl Bar for FakeDev {
    fn read32(&self, offset: usize) -> u32 {
        self.with(|d| {
            if let (regs::CQPTAIL, Some((head, left))) = (offset, d.pending_db) {
                if left == 0 {
                    d.pending_db = None;
                    d.doorbell(head);
                } else {
                    d.pending_db = Some((head, left - 1));
                }
            }
            d.regs.get(&offset).copied().unwrap_or(0)
        })
    }
    fn write32(&self, offset: usize, value: u32) {
        self.with(|d| {
            d.writes.push((offset, value));
            d.regs.insert(offset, value);
            match offset {
                regs::CCQPLOW => {
                    if value == 0 {
                        d.regs.insert(regs::CCQPSTATUS, 0);
                        return;
                    }
                    let hi = d.regs.get(&regs::CCQPHIGH).copied().unwrap_or(0) as u64;
                    let pa = hi << 32 | value as u64;
                    let w0 = rd(pa);
                    d.sq_pa = rd(pa + 8);
                    d.ctx24 = rd(pa + 24);
                    d.sq_size = 1 << (irdma_hal::cqp::cqp_ctx::SQSIZE.get(w0) + 1);
                    d.tail = 0;
                    d.pass = false;
                    let s = d.create_status;
                    d.regs.insert(regs::CCQPSTATUS, s);
                    let e = d.errcodes;
                    d.regs.insert(regs::CQPERRCODES, e);
                }
                regs::CQPDB if d.lag > 0 => d.pending_db = Some((value, d.lag)),
                regs::CQPDB => d.doorbell(value),
                _ => {}
            }
        })
    }
}

/// A CQP of `sq` slots with its (Linux-sized) CCQ on `dev`, which then
/// behaves as `fault` sets it.
fn ccq_then(dev: &FakeDev, sq: u32, fault: impl FnOnce(&mut Dev)) -> Cqp<FakeHal, &FakeDev> {
    let mut cqp = Cqp::<FakeHal, &FakeDev>::create(dev, &cfg(sq)).unwrap();
    cqp.create_ccq(CcqConfig::linux(sq)).unwrap();
    dev.with(fault);
    cqp
}

pub(crate) fn cfg(sq: u32) -> CqpConfig {
    let mut c = CqpConfig::gen2_roce(sq);
    c.completion_ctx = 0xc0ff_ee00;
    c.timeouts = Timeouts {
        create: Duration::from_millis(5),
        poll_registers: Duration::from_millis(5),
        ccq: Duration::from_millis(20),
    };
    c
}

#[test]
fn create_handshake_order_and_host_context() {
    let dev = FakeDev::new();
    let cqp = Cqp::<FakeHal, &FakeDev>::create(&dev, &cfg(64)).unwrap();
    let pa = cqp.host_ctx_pa();
    let w = dev.with(|d| d.writes.clone());
    assert_eq!(
        w,
        [
            (regs::CQPTAIL, 0),
            (regs::CQPDB, 0),
            (regs::CCQPSTATUS, 0),
            (regs::CCQPHIGH, (pa >> 32) as u32),
            (regs::CCQPLOW, pa as u32),
        ]
    );
    assert_eq!(rd(pa), 5 << 8 | 2 << 3, "SQSIZE log2(64)-1, RoCE");
    assert_eq!(rd(pa + 8), cqp.sq_pa());
    assert_eq!(rd(pa + 24), 0xc0ff_ee00);
    assert_eq!(dev.with(|d| d.sq_size), 64);
    cqp.destroy().unwrap();
    let w = dev.with(|d| d.writes.clone());
    assert_eq!(&w[w.len() - 2..], &[(regs::CCQPHIGH, 0), (regs::CCQPLOW, 0)]);
}

#[test]
fn create_error_and_timeout_are_typed() {
    let dev = FakeDev::new();
    dev.with(|d| {
        d.create_status = 0x8000_0001;
        d.errcodes = 0x8001_1234;
    });
    let e = Cqp::<FakeHal, &FakeDev>::create(&dev, &cfg(64)).err();
    assert_eq!(e, Some(CqpError::CreateFailed { major: 0x8001, minor: 0x1234 }));
    let dev = FakeDev::new();
    dev.with(|d| d.create_status = 0);
    let e = Cqp::<FakeHal, &FakeDev>::create(&dev, &cfg(64)).err();
    assert!(matches!(e, Some(CqpError::Timeout { .. })));
    let dev = FakeDev::new();
    let e = Cqp::<FakeHal, &FakeDev>::create(&dev, &cfg(3)).err();
    assert!(matches!(e, Some(CqpError::Encode(EncodeError::Invalid { .. }))));
    assert!(dev.with(|d| d.writes.is_empty()), "refused before touching the device");
}

#[test]
fn register_polled_ops_polarity_and_doorbell() {
    let dev = FakeDev::new();
    let mut cqp = Cqp::<FakeHal, &FakeDev>::create(&dev, &cfg(4)).unwrap();
    // Three passes over a 4-slot ring: the device refuses a wrong valid bit.
    for n in 0..12u64 {
        let (slot, valid) = cqp.next_slot();
        assert_eq!(slot as u64, n % 4);
        assert_eq!(valid, (n / 4) % 2 == 0);
        let done = cqp.exec(Nop, 100 + n).unwrap();
        assert_eq!(done.info().scratch, 100 + n);
        assert_eq!(done.info().wqe_idx as u64, n % 4);
        let db = dev.with(|d| d.writes.iter().rev().find(|w| w.0 == regs::CQPDB).copied());
        assert_eq!(db, Some((regs::CQPDB, ((n + 1) % 4) as u32)));
    }
    assert_eq!(dev.with(|d| d.bad_valid), 0);
    assert_eq!(dev.with(|d| d.opcodes.len()), 12);
    // Only one command at a time before the CCQ exists.
    dev.with(|d| d.hang = true);
    let p = cqp.post(Nop, 0).unwrap();
    assert_eq!(cqp.post(Nop, 0).err(), Some(CqpError::Busy));
    assert!(matches!(cqp.wait(p), Err(CqpError::Timeout { .. })));
}

#[test]
fn register_polled_error_carries_codes() {
    let dev = FakeDev::new();
    dev.with(|d| d.fail = Some((op::NOP, 0xffff, 0x8002)));
    let mut cqp = Cqp::<FakeHal, &FakeDev>::create(&dev, &cfg(8)).unwrap();
    let e = cqp.exec(Nop, 0).err();
    assert_eq!(e, Some(CqpError::OpFailed { opcode: op::NOP, major: 0xffff, minor: 0x8002 }));
}

#[test]
fn register_polled_error_bit_of_the_previous_op_is_not_this_ops_result() {
    // A failed op leaves CQP_OP_ERR set until the device processes the next
    // doorbell; a device that polls (the model behind a shared-memory BAR)
    // does so a few reads later. The next op must not inherit the failure.
    let dev = FakeDev::new();
    let mut cqp = Cqp::<FakeHal, &FakeDev>::create(&dev, &cfg(8)).unwrap();
    dev.with(|d| d.fail = Some((op::NOP, 0xffff, 0x8002)));
    assert!(matches!(cqp.exec(Nop, 0), Err(CqpError::OpFailed { minor: 0x8002, .. })));
    dev.with(|d| {
        d.fail = None;
        d.lag = 3;
    });
    let done = cqp.exec(Nop, 7).expect("a stale error bit is not this op's failure");
    assert_eq!(done.info().scratch, 7);
    // Two failures in a row on a device that does not move WQTAIL when an op
    // fails: the second is still reported as a failure with its codes.
    dev.with(|d| d.fail = Some((op::NOP, 0xffff, 0x8006)));
    assert!(matches!(cqp.exec(Nop, 0), Err(CqpError::OpFailed { minor: 0x8006, .. })));
    assert!(matches!(cqp.exec(Nop, 0), Err(CqpError::OpFailed { minor: 0x8006, .. })));
    dev.with(|d| d.fail = None);
    assert!(cqp.exec(Nop, 0).is_ok(), "the CQP still works");
}

#[test]
fn encode_error_leaves_ring_and_device_untouched() {
    let dev = FakeDev::new();
    let mut cqp = Cqp::<FakeHal, &FakeDev>::create(&dev, &cfg(8)).unwrap();
    let before = dev.with(|d| d.writes.len());
    let bad = WsNode { node_id: 0x4000, ..Default::default() };
    assert!(matches!(cqp.post(bad, 0), Err(CqpError::Encode(EncodeError::TooWide { .. }))));
    assert_eq!(dev.with(|d| d.writes.len()), before);
    assert_eq!(cqp.next_slot(), (0, true));
    assert_eq!(cqp.inflight(), 0);
}

#[test]
fn destroy_aeq_clears_aeqctl_before_doorbell() {
    let dev = FakeDev::new();
    let mut cqp = Cqp::<FakeHal, &FakeDev>::create(&dev, &cfg(8)).unwrap();
    let n = dev.with(|d| d.writes.len());
    let c = DestroyAeq {
        elem_cnt: 8,
        mem: QueueAddr::contiguous(0x1000),
        pasid_valid: false,
        pasid: 0,
    };
    cqp.exec(c, 0).unwrap();
    let w = dev.with(|d| d.writes[n..].to_vec());
    assert_eq!(w, [(regs::PFINT_AEQCTL, 0), (regs::CQPDB, 1)]);
}

#[test]
fn ccq_completions_ret_val_errors_and_wrap() {
    let dev = FakeDev::new();
    let mut cqp = Cqp::<FakeHal, &FakeDev>::create(&dev, &cfg(4)).unwrap();
    // A 5-entry CCQ on a 4-slot SQ: both rings wrap at different points.
    let ccq = CcqConfig { entries: 5, ..CcqConfig::linux(4) };
    cqp.create_ccq(ccq).unwrap();
    assert!(cqp.has_ccq());
    assert_eq!(dev.with(|d| d.opcodes.clone()), [op::CREATE_CQ]);
    dev.with(|d| d.ret_val = 0x55);
    for n in 0..13u64 {
        let leaf = WsNode { op: WsNodeOp::Add, node_id: 2, leaf: true, ..Default::default() };
        let done = cqp.exec(leaf, n).unwrap();
        assert_eq!(done.op_ret_val(), 0x55, "queue-set handle in OPRETVAL");
        assert_eq!(done.info().scratch, n);
    }
    assert_eq!(dev.with(|d| d.bad_valid), 0);
    // Shadow area @0 holds the CCQ consumer index: 14 CQEs consumed mod 5.
    let shadow = cqp.ccq.as_ref().map(|c| c.shadow.read_u64(0));
    assert_eq!(shadow, Some(Some(14 % 5)));
    dev.with(|d| d.fail = Some((op::WORK_SCHED_NODE, 0xf001, 2)));
    let e = cqp.exec(WsNode::default(), 0).err();
    assert_eq!(
        e,
        Some(CqpError::OpFailed { opcode: op::WORK_SCHED_NODE, major: 0xf001, minor: 2 })
    );
    dev.with(|d| d.fail = None);
    cqp.nop().unwrap();
    // CCQ destroy is register-polled and hands completions back to CQPTAIL.
    cqp.destroy_ccq().unwrap();
    assert!(!cqp.has_ccq());
    cqp.nop().unwrap();
    cqp.destroy().unwrap();
}

#[test]
fn ccq_linux_config_of_a_huge_sq_size_is_refused_not_an_overflow() {
    // `sq_size + 2` overflowed (a debug-build panic) for caller input
    // near u32::MAX; now it saturates and create_ccq refuses the size.
    let ccq = CcqConfig::linux(u32::MAX);
    assert_eq!(ccq.entries, u32::MAX);
    assert_eq!(CcqConfig::linux(u32::MAX - 2).entries, u32::MAX);
    let dev = FakeDev::new();
    let mut cqp = Cqp::<FakeHal, &FakeDev>::create(&dev, &cfg(4)).unwrap();
    assert!(cqp.create_ccq(ccq).is_err());
    assert!(!cqp.has_ccq());
    assert!(dev.with(|d| d.opcodes.is_empty()), "nothing posted");
}

#[test]
fn out_of_order_ccq_completions_are_stashed_and_ring_full_is_typed() {
    let dev = FakeDev::new();
    let mut cqp = ccq_then(&dev, 4, |d| d.reverse = true);
    let a = cqp.post(Nop, 1).unwrap();
    let b = cqp.post(Nop, 2).unwrap();
    let c = cqp.post(Nop, 3).unwrap();
    assert_eq!(cqp.post(Nop, 4).err(), Some(CqpError::RingFull));
    dev.with(|d| d.release_reversed());
    // Waiting for the oldest consumes (and stashes) the two younger ones.
    assert_eq!(cqp.wait(a).unwrap().info().scratch, 1);
    assert_eq!(cqp.wait(c).unwrap().info().scratch, 3);
    assert_eq!(cqp.wait(b).unwrap().info().scratch, 2);
    assert_eq!(cqp.inflight(), 0);
    dev.with(|d| d.reverse = false);
    cqp.nop().unwrap();
}

#[test]
fn ccq_hang_is_a_timeout() {
    let dev = FakeDev::new();
    let mut cqp = ccq_then(&dev, 8, |d| d.hang = true);
    let p = cqp.post(Nop, 0).unwrap();
    assert_eq!(cqp.wait(p).err(), Some(CqpError::Timeout { what: Phrase::new(&"CQP op (CCQ)") }));
}

#[test]
fn shared_behind_a_spin_mutex() {
    let dev = FakeDev::new();
    let cqp: SharedCqp<FakeHal, &FakeDev> = spin::Mutex::new(Cqp::create(&dev, &cfg(16)).unwrap());
    cqp.lock().create_ccq(CcqConfig::linux(16)).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let cqp = &cqp;
            s.spawn(move || {
                for n in 0..25 {
                    let done = cqp.lock().exec(Nop, t * 100 + n).unwrap();
                    assert_eq!(done.info().scratch, t * 100 + n);
                }
            });
        }
    });
    assert_eq!(dev.with(|d| d.opcodes.len()), 1 + 100);
}

#[test]
fn completed_commands_yield_decoded_results() {
    let dev = FakeDev::new();
    let mut cqp = Cqp::<FakeHal, &FakeDev>::create(&dev, &cfg(8)).unwrap();
    // Pretend firmware wrote the FPM query buffer.
    let buf = Dma::<FakeHal>::new(1, BufferDirection::DeviceToDriver).unwrap();
    buf.write_u64(0, 4 << 32); // 4 SDs
    buf.write_u64(8, 9 << 32 | 1024); // 1024 QPs of 512 bytes
    buf.write_u64(80, 0x2000 << 32); // Q1 block size
    let done = cqp.exec(QueryFpmVal { hmc_fn_id: 0, buf_pa: buf.paddr() }, 0).unwrap();
    let q = done.decode(&buf, false).unwrap();
    assert_eq!((q.max_sds, q.obj[0].max_cnt, q.obj[0].size), (4, 1024, 512));
    let other = Dma::<FakeHal>::new(1, BufferDirection::DeviceToDriver).unwrap();
    assert_eq!(done.decode(&other, false).err(), Some(CqpError::WrongBuffer));
    buf.write_u64(80, 0);
    assert_eq!(
        done.decode(&buf, false).err(),
        Some(CqpError::BadFpmBuffer(crate::cqp::decode::DecodeError::Q1BlockSizeZero))
    );
    // Features: count 2, flags entry with atomics.
    buf.write_u64(0, 2 << 32 | 0x0001_0005);
    buf.write_u64(8, 32 << 48 | 1);
    let f = cqp.exec(QueryRdmaFeatures { buf_pa: buf.paddr(), buf_len: 272 }, 0).unwrap();
    let f = f.decode(&buf).unwrap();
    assert!(f.atomics() && (f.fw_major, f.fw_minor) == (1, 5));
    // CCQ: OPRETVAL and minor codes come back.
    cqp.create_ccq(CcqConfig::linux(8)).unwrap();
    dev.with(|d| d.ret_val = 0x1a);
    let leaf = cqp.exec(WsNode { leaf: true, ..Default::default() }, 0).unwrap();
    assert_eq!(leaf.qs_handle(), Some(0x1a));
    let fl = cqp.exec(FlushWqes { qp_id: 3, flush_sq: true, ..Default::default() }, 0).unwrap();
    assert_eq!(fl.outcome(), FlushOutcome { rq_flushed: false, sq_flushed: false });
    dev.with(|d| d.ok_minor = 3);
    let fl = cqp.exec(FlushWqes { qp_id: 3, flush_sq: true, ..Default::default() }, 0).unwrap();
    assert_eq!(fl.outcome(), FlushOutcome { rq_flushed: false, sq_flushed: true });
    dev.with(|d| d.ok_minor = 2);
    let fl = cqp.exec(FlushWqes { qp_id: 3, flush_rq: true, ..Default::default() }, 0).unwrap();
    assert_eq!(fl.outcome(), FlushOutcome { rq_flushed: true, sq_flushed: false });
}

#[test]
fn noncritical_errors_follow_linux_list() {
    let e = |major, minor| CqpError::OpFailed { opcode: 1, major, minor };
    assert!(e(0xffff, 0x8002).is_noncritical());
    assert!(e(0xffff, 0x0200).is_noncritical());
    assert!(e(0xf002, 1).is_noncritical());
    assert!(!e(0xffff, 0x8029).is_noncritical());
    assert!(!e(0xf001, 2).is_noncritical());
    assert!(!CqpError::Timeout { what: Phrase::new(&"x") }.is_noncritical());
}

#[test]
fn destroy_of_a_dead_device_still_releases_the_cqp() {
    let dev = FakeDev::new();
    let cqp = ccq_then(&dev, 8, |d| d.hang = true);
    let e = cqp.destroy().err();
    assert_eq!(e, Some(CqpError::Timeout { what: Phrase::new(&"CQP op (CQPTAIL)") }));
    let w = dev.with(|d| d.writes.clone());
    assert_eq!(&w[w.len() - 2..], &[(regs::CCQPHIGH, 0), (regs::CCQPLOW, 0)]);
}

/// ctrl.c: irdma_sc_ccq_get_cqe_info reads `scratch_array[wqe_idx]` for any
/// 15-bit index (past the SQ for an all-ones CQE); the engine refuses an
/// index outside its SQ with a typed error instead (stricter).
#[test]
fn ccq_cqe_naming_a_slot_outside_the_sq_is_a_protocol_error() {
    let dev = FakeDev::new();
    let mut cqp = ccq_then(&dev, 4, |d| d.idx_add = 0x7000);
    assert!(matches!(cqp.nop(), Err(CqpError::Protocol { .. })));
}

#[test]
fn register_polled_completion_orders_the_buffer_reads() {
    // Issue #12 item 5: between the CQPTAIL read that shows an op done and
    // the reads of the buffer it wrote there must be a read barrier
    // (`dma_rmb`: `dmb oshld` on aarch64). Other tests run in parallel and
    // may add to the counter; without the barrier nothing does.
    use core::sync::atomic::Ordering::Relaxed;
    let dev = FakeDev::new();
    let mut cqp = Cqp::<FakeHal, &FakeDev>::create(&dev, &cfg(8)).unwrap();
    let buf = Dma::<FakeHal>::new(1, BufferDirection::DeviceToDriver).unwrap();
    let before = COMPLETION_RMB.load(Relaxed);
    let done = cqp.exec(QueryFpmVal { hmc_fn_id: 0, buf_pa: buf.paddr() }, 0).unwrap();
    assert!(COMPLETION_RMB.load(Relaxed) > before, "no read barrier before the buffer is read");
    let _ = done.decode(&buf, false);
}

#[test]
fn timed_out_ccq_create_keeps_the_ccq_memory() {
    // Issue #12 item 2: a CREATE_CQ of the CCQ that times out may have left
    // the device writing into the ring; it must not be freed.
    let dev = FakeDev::new();
    let mut cqp = Cqp::<FakeHal, &FakeDev>::create(&dev, &cfg(8)).unwrap();
    dev.with(|d| d.hang = true);
    let e = cqp.create_ccq(CcqConfig::linux(8)).err();
    assert!(matches!(e, Some(CqpError::Timeout { .. })), "{e:?}");
    assert!(!cqp.has_ccq());
    let ring_bytes = (10 * CCQ_CQE_BYTES).div_ceil(4096) * 4096;
    let mut kept = Vec::new();
    // The CQP destroy handshake itself still works on this fake: the CQP's
    // own rings are confirmed released and freed; the lost CCQ's ring and
    // shadow area are not (nothing confirmed the device let go of them).
    cqp.destroy_into(&mut |d| kept.push(d.len())).unwrap();
    assert_eq!(kept, [ring_bytes, 4096]);
}

#[test]
fn confirmed_destroy_frees_and_refused_ccq_create_frees() {
    let dev = FakeDev::new();
    let mut cqp = Cqp::<FakeHal, &FakeDev>::create(&dev, &cfg(8)).unwrap();
    dev.with(|d| d.fail = Some((op::CREATE_CQ, 0xffff, 0x8001)));
    assert!(matches!(cqp.create_ccq(CcqConfig::linux(8)), Err(CqpError::OpFailed { .. })));
    dev.with(|d| d.fail = None);
    let mut kept = 0;
    cqp.destroy_into(&mut |_| kept += 1).unwrap();
    assert_eq!(kept, 0, "a refused create and a confirmed destroy keep nothing");
}

/// Barrier placement on the CQP (issue #19; feature `barrier-trace`): every
/// posted WQE's header word (valid bit) is stored after a `dma_wmb` that
/// follows its other seven words, and CQPDB is written after a `wmb`.
#[cfg(feature = "barrier-trace")]
#[test]
fn barrier_trace_cqp_wqe_publishes_after_dma_wmb_and_doorbell_after_wmb() {
    use irdma_hal::barrier::trace::{self, Event};
    /// Logs MMIO writes in the trace, then forwards to the fake.
    struct TraceDev<'a>(&'a FakeDev);
    impl Bar for TraceDev<'_> {
        fn read32(&self, offset: usize) -> u32 {
            self.0.read32(offset)
        }
        fn write32(&self, offset: usize, value: u32) {
            trace::mmio(offset, value);
            self.0.write32(offset, value);
        }
    }
    let dev = FakeDev::new();
    let bar = TraceDev(&dev);
    let mut cqp = Cqp::<FakeHal, &TraceDev<'_>>::create(&bar, &cfg(4)).unwrap();
    let sq = cqp.sq_pa() as usize;
    trace::start();
    for n in 0..3u64 {
        cqp.exec(Nop, n).unwrap();
    }
    let ev = trace::take();
    // FakeHal memory is identity-mapped: the SQ's bus address is its host address.
    let stride = CQP_WQE_BYTES;
    let mut dbs = 0;
    for (d, e) in ev.iter().enumerate() {
        if !matches!(e, Event::Mmio { offset: regs::CQPDB, .. }) {
            continue;
        }
        let slot = dbs;
        dbs += 1;
        let lo = sq + slot * stride;
        let hdr = lo + 8 * irdma_hal::cqp::CQP_HEADER_WORD;
        let h = ev[..d]
            .iter()
            .rposition(|e| matches!(e, Event::Store { addr, .. } if *addr == hdr))
            .expect("header stored before its doorbell");
        let body = ev[..h].iter().rposition(
            |e| matches!(e, Event::Store { addr, .. } if (lo..lo + stride).contains(addr) && *addr != hdr),
        );
        let from = body.map_or(0, |b| b + 1);
        assert!(
            ev[from..h].iter().any(|e| matches!(e, Event::DmaWmb | Event::Wmb | Event::Mb)),
            "WQE {slot}: no barrier between body and valid bit: {:?}",
            &ev[from.saturating_sub(1)..=h]
        );
        let last = ev[..d].iter().rposition(|e| matches!(e, Event::Store { .. })).unwrap_or(0);
        assert!(
            ev[last..d].iter().any(|e| matches!(e, Event::Wmb | Event::Mb)),
            "doorbell {slot}: no wmb after the last ring store: {:?}",
            &ev[last..=d]
        );
    }
    assert_eq!(dbs, 3, "{ev:?}");
}
