//! Soak: 100,000 mixed operations (WRITE, READ, SEND, SEND+IMM, WRITE+IMM)
//! of random sizes and 1–13 SGEs between QP A (device A) and QP B (device
//! B), both ways, in batches whose WRs are mostly unsignaled, over small
//! rings so every SQ, RQ and CQ wraps many times; each CQ carries its QP's
//! send and receive completions interleaved. A host reference model of
//! each side's local, target and receive buffers is updated in posting
//! order (each QP executes in order); every byte is compared, and every
//! completion is accounted for exactly once.
//!
//! `IRDMA_SOAK_OPS` overrides the operation count; `IRDMA_SOAK_SEED` the seed.

mod common;
mod e2e_common;

use e2e_common::*;
use std::collections::{BTreeSet, VecDeque};

const LOCAL_PAGES: usize = 16;
const REMOTE_PAGES: usize = 16;
const RECV_PAGES: usize = 16;
/// Largest message (and the capacity of every receive).
const MAX_MSG: usize = 16 * 1024;

fn ops() -> u64 {
    std::env::var("IRDMA_SOAK_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000)
}

fn seed() -> u64 {
    std::env::var("IRDMA_SOAK_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_0e2e)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Write,
    WriteImm,
    Read,
    Send,
    SendImm,
}

/// What a side expects for one of its signaled WRs.
struct Expect {
    wr_id: u64,
    opcode: WcOpcode,
    len: u32,
}

/// A receive posted on a side, in RQ order.
struct Posted {
    wr_id: u64,
    sg: Vec<Sge>,
}

/// What a side expects for one of its receives: wr_id, opcode, byte_len
/// (not checked for WRITE+IMM), imm.
type ExpectRq = (u64, WcOpcode, Option<u32>, Option<u32>);

/// Every side's target region: pages mapped in reverse order behind IOVA
/// `REMOTE_IOVA` (a level-1 PBL), read back in IOVA order.
const REMOTE_IOVA: u64 = 0x4000_0000;

fn remote_range(mem: &Buf, off: usize, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let mut at = off;
    while at < off + len {
        let page = at / 4096;
        let n = (4096 - at % 4096).min(off + len - at);
        v.extend(read(mem, (REMOTE_PAGES - 1 - page) * 4096 + at % 4096, n));
        at += n;
    }
    v
}

/// One side of the soak: its QP, its three buffers with their references,
/// and what it waits for.
struct Node<'d> {
    local: Region<'d>,
    target_mr: TMr<'d>,
    target: Buf,
    recv: Region<'d>,
    local_ref: Vec<u8>,
    target_ref: Vec<u8>,
    recv_ref: Vec<u8>,
    posted: VecDeque<Posted>,
    expect_sq: VecDeque<Expect>,
    expect_rq: VecDeque<ExpectRq>,
    unsignaled: BTreeSet<u64>,
    sq_outstanding: usize,
    touched_local: Vec<(usize, usize)>,
    touched_target: Vec<(usize, usize)>,
    touched_recv: Vec<(usize, usize)>,
    signaled_done: u64,
    recvs_done: u64,
    // Last: the MRs above are deregistered before the QP, CQ and PD go.
    side: Side<'d>,
}

impl<'d> Node<'d> {
    fn new(side: Side<'d>, seed: u8) -> Self {
        let local = side.region(LOCAL_PAGES, seed);
        let target = buf(REMOTE_PAGES);
        let _ = fill(&target, seed.wrapping_add(1));
        let mut rev = pages_of(&target);
        rev.reverse();
        let target_mr =
            reg(side.dev, &side.pd, REMOTE_IOVA, (REMOTE_PAGES * 4096) as u64, &rev, false);
        assert_eq!(target_mr.pbl_level(), 1);
        let recv = side.region(RECV_PAGES, seed.wrapping_add(2));
        Node {
            local_ref: local.all(),
            target_ref: remote_range(&target, 0, REMOTE_PAGES * 4096),
            recv_ref: recv.all(),
            side,
            local,
            target_mr,
            target,
            recv,
            posted: VecDeque::new(),
            expect_sq: VecDeque::new(),
            expect_rq: VecDeque::new(),
            unsignaled: BTreeSet::new(),
            sq_outstanding: 0,
            touched_local: Vec::new(),
            touched_target: Vec::new(),
            touched_recv: Vec::new(),
            signaled_done: 0,
            recvs_done: 0,
        }
    }

    /// Host writes to the local buffer (only while nothing is in flight).
    fn refresh(&mut self, rng: &mut Rng) {
        refresh_local(&mut self.local_ref, &self.local, rng);
    }

    /// Tops the RQ up to 24 receives (only right after a poll: consumed
    /// receives hold their slots until polled).
    fn top_up(&mut self, rng: &mut Rng, next_id: &mut u64) {
        while self.posted.len() < 24 {
            let n = rng.range(1, 4) as usize;
            let sg = sges(rng, self.recv.addr(), self.recv.key(), self.recv_ref.len(), n, MAX_MSG);
            let id = *next_id;
            *next_id += 1;
            self.side.qp.post_recv(&[RecvWr { wr_id: id, sg_list: &sg }]).expect("post_recv");
            self.posted.push_back(Posted { wr_id: id, sg });
        }
    }

    /// Polls until every expected completion arrived (SQ and RQ ones share
    /// the CQ), checking each against its queue's front.
    fn collect(&mut self, deferred: bool) {
        let mut wc = [empty_wc(); 64];
        let since = std::time::Instant::now();
        let qpn = self.side.qp.qp_num();
        while !self.expect_sq.is_empty() || !self.expect_rq.is_empty() {
            let n = self.side.cq.poll(&mut wc);
            if n == 0 {
                assert!(
                    deferred && since.elapsed() < WAIT,
                    "QP {qpn}: missing completions: SQ {:?}, RQ {:?}",
                    self.expect_sq.front().map(|e| e.wr_id),
                    self.expect_rq.front()
                );
                std::thread::yield_now();
            }
            for c in &wc[..n] {
                assert!(!self.unsignaled.contains(&c.wr_id), "unsignaled WR completed: {c:?}");
                assert_eq!((c.status, c.qp_num), (WcStatus::Success, qpn), "{c:?}");
                if matches!(c.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
                    let (id, op, len, imm) =
                        self.expect_rq.pop_front().unwrap_or_else(|| panic!("extra {c:?}"));
                    assert_eq!(
                        (c.wr_id, c.opcode, c.imm_data, c.invalidated_rkey),
                        (id, op, imm, None),
                        "{c:?}"
                    );
                    if let Some(len) = len {
                        assert_eq!(c.byte_len, len, "{c:?}");
                    }
                    self.recvs_done += 1;
                } else {
                    let e = self.expect_sq.pop_front().unwrap_or_else(|| panic!("extra {c:?}"));
                    assert_eq!(
                        (c.wr_id, c.opcode, c.byte_len),
                        (e.wr_id, e.opcode, e.len),
                        "{c:?}"
                    );
                    self.signaled_done += 1;
                }
            }
        }
        let mut extra = [empty_wc(); 4];
        let n = self.side.cq.poll(&mut extra);
        assert_eq!(n, 0, "nothing twice: {:?}", &extra[..n]);
        // Every batch ends signaled: all WRs are retired now.
        self.unsignaled.clear();
        self.sq_outstanding = 0;
    }

    /// Compares what was touched since the last check, or everything.
    fn check(&mut self, all: bool, what: &str) {
        for (o, n) in self.touched_target.drain(..) {
            same(&remote_range(&self.target, o, n), &self.target_ref[o..o + n], what);
        }
        for (o, n) in self.touched_local.drain(..) {
            same(&self.local.bytes(o, n), &self.local_ref[o..o + n], what);
        }
        for (o, n) in self.touched_recv.drain(..) {
            same(&self.recv.bytes(o, n), &self.recv_ref[o..o + n], what);
        }
        if all {
            same(&self.local.all(), &self.local_ref, &format!("{what}: local"));
            let t = remote_range(&self.target, 0, REMOTE_PAGES * 4096);
            same(&t, &self.target_ref, &format!("{what}: target"));
            same(&self.recv.all(), &self.recv_ref, &format!("{what}: receive buffer"));
        }
    }
}

/// Posts one batch of 1..=8 WRs from `req` to `resp`; the last is
/// signaled, others sometimes. Both references are updated in posting
/// order, which is the order the device executes them in.
fn batch(
    req: &mut Node<'_>,
    resp: &mut Node<'_>,
    rng: &mut Rng,
    next_id: &mut u64,
    k: usize,
    stats: &mut [u64; 5],
) {
    let rkey = resp.target_mr.rkey();
    let mut wr_sges: Vec<Vec<Sge>> = Vec::with_capacity(k);
    let mut ops: Vec<(u64, WrOpcode, SendFlags)> = Vec::with_capacity(k);
    for j in 0..k {
        let kind = match rng.range(0, 4) {
            0 => Kind::Write,
            1 => Kind::WriteImm,
            2 => Kind::Read,
            3 => Kind::Send,
            _ => Kind::SendImm,
        };
        stats[kind as usize] += 1;
        let len = match rng.range(0, 9) {
            0 => rng.range(1, 16),
            1..=6 => rng.range(1, 4096),
            _ => rng.range(1, MAX_MSG as u64),
        } as usize;
        // Up to 13 SGEs (plus the immediate: 14 fragments).
        let n = (rng.range(1, 13) as usize).min(len);
        let base = req.local.addr();
        let sg = sges(rng, base, req.local.key(), req.local_ref.len(), n, len);
        let id = *next_id;
        *next_id += 1;
        let signal = j == k - 1 || rng.range(0, 5) == 0;
        let flags = if signal { SendFlags::SIGNALED } else { SendFlags::NONE };
        let imm = rng.next_u64() as u32;
        let roff = rng.range(0, (resp.target_ref.len() - len) as u64) as usize;
        let remote_addr = REMOTE_IOVA + roff as u64;
        let (op, wc_op) = match kind {
            Kind::Write | Kind::WriteImm => {
                let d = gather_ref(&req.local_ref, base, &sg);
                resp.target_ref[roff..roff + len].copy_from_slice(&d);
                resp.touched_target.push((roff, len));
                if kind == Kind::WriteImm {
                    let p = resp.posted.pop_front().expect("a receive is posted");
                    // byte_len of a WRITE-with-imm receive is not checked.
                    resp.expect_rq.push_back((p.wr_id, WcOpcode::RecvRdmaWithImm, None, Some(imm)));
                    (WrOpcode::RdmaWriteImm { remote_addr, rkey, imm }, WcOpcode::RdmaWrite)
                } else {
                    (WrOpcode::RdmaWrite { remote_addr, rkey }, WcOpcode::RdmaWrite)
                }
            }
            Kind::Read => {
                let d = resp.target_ref[roff..roff + len].to_vec();
                scatter_ref(&mut req.local_ref, base, &sg, &d);
                req.touched_local
                    .extend(sg.iter().map(|s| ((s.addr - base) as usize, s.length as usize)));
                (WrOpcode::RdmaRead { remote_addr, rkey }, WcOpcode::RdmaRead)
            }
            Kind::Send | Kind::SendImm => {
                let d = gather_ref(&req.local_ref, base, &sg);
                let p = resp.posted.pop_front().expect("a receive is posted");
                scatter_ref(&mut resp.recv_ref, resp.recv.addr(), &p.sg, &d);
                // The bytes the message lands on (not the whole receive).
                let (rbase, mut left) = (resp.recv.addr(), d.len());
                for s in &p.sg {
                    let n = (s.length as usize).min(left);
                    if n > 0 {
                        resp.touched_recv.push(((s.addr - rbase) as usize, n));
                    }
                    left -= n;
                }
                let imm = (kind == Kind::SendImm).then_some(imm);
                resp.expect_rq.push_back((p.wr_id, WcOpcode::Recv, Some(len as u32), imm));
                match imm {
                    Some(imm) => (WrOpcode::SendImm { imm }, WcOpcode::Send),
                    None => (WrOpcode::Send, WcOpcode::Send),
                }
            }
        };
        if signal {
            req.expect_sq.push_back(Expect { wr_id: id, opcode: wc_op, len: len as u32 });
        } else {
            req.unsignaled.insert(id);
        }
        wr_sges.push(sg);
        ops.push((id, op, flags));
    }
    let wrs = send_wrs(&ops, &wr_sges);
    // At most 3 batches between polls: they fit the SQ.
    assert!(req.sq_outstanding + k <= req.side.qp.cap().max_send_wr as usize);
    req.side.qp.post_send(&wrs).expect("post_send");
    req.sq_outstanding += k;
}

#[test]
fn soak_100k_mixed_ops_against_a_reference_model() {
    soak(ops(), false);
}

/// The same traffic with both model devices in deferred mode (plain-memory
/// BAR: doorbells only latch) run by a device thread: the device works
/// concurrently with the driver posting and polling. Fewer operations
/// (`IRDMA_SOAK_DEFERRED_OPS`, default 20,000).
#[test]
fn soak_deferred_device_thread() {
    let n = std::env::var("IRDMA_SOAK_DEFERRED_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    soak(n, true);
}

/// How long a completion may take to show up (deferred mode runs the
/// device on another thread).
const WAIT: std::time::Duration = std::time::Duration::from_secs(10);

fn soak(total_ops: u64, deferred: bool) {
    let _g = lock();
    let base_pages = FakeHal::live_pages();
    let t = std::time::Instant::now();
    let mut rng = Rng::new(seed());
    let mut stats = [0u64; 5];
    let mut batches = 0u64;
    let (sq_depth, rq_depth, counters, done_sig, done_recv);
    {
        let mut cfg = small_fn_config();
        if deferred {
            cfg.mode = mock_bar::Mode::Deferred;
        }
        let bar_a = ModelBar::standalone(cfg.clone());
        let bar_b = bar_a.add_peer(cfg);
        // Declared before the devices: stops after they are closed.
        let _thread = deferred
            .then(|| bar_a.fabric().spawn_device_thread(std::time::Duration::from_micros(20)));
        let da = probe_threaded_as(&bar_a, A, Profile::SMALL);
        let db = probe_threaded_as(&bar_b, B, Profile::SMALL);
        let cap = qp_cap(24, 24, 13, 4);
        // Small CQs: up to 24 send and 24 receive completions land between
        // two polls; they wrap every few polls.
        let (sa, sb) = linked(&da, &db, 48, cap);
        sq_depth = sa.qp.cap().max_send_wr as usize;
        rq_depth = sa.qp.cap().max_recv_wr as usize;
        assert!(sq_depth >= 24 && rq_depth >= 24);
        let c0 = |bar: &ModelBar| bar.with_device(|d| (d.counters().sq_wqes, d.counters().rq_wqes));
        let (a0, b0) = (c0(&bar_a), c0(&bar_b));
        let mut na = Node::new(sa, 1);
        let mut nb = Node::new(sb, 101);

        let mut next_id = 1u64;
        let mut done = 0u64;
        let mut unpolled = 0usize;
        let mut poll_after = 1usize;
        let mut last_full = 0u64;
        while done < total_ops {
            if unpolled == 0 {
                na.refresh(&mut rng);
                nb.refresh(&mut rng);
                na.top_up(&mut rng, &mut next_id);
                nb.top_up(&mut rng, &mut next_id);
            }
            let k = (rng.range(1, 8) as usize).min((total_ops - done) as usize);
            if rng.range(0, 1) == 0 {
                batch(&mut na, &mut nb, &mut rng, &mut next_id, k, &mut stats);
            } else {
                batch(&mut nb, &mut na, &mut rng, &mut next_id, k, &mut stats);
            }
            done += k as u64;
            batches += 1;
            unpolled += 1;
            if unpolled < poll_after && done < total_ops {
                continue;
            }
            unpolled = 0;
            poll_after = rng.range(1, 3) as usize;
            na.collect(deferred);
            nb.collect(deferred);
            let all = batches / 64 != last_full || done >= total_ops;
            last_full = batches / 64;
            na.check(all, &format!("A after batch {batches}"));
            nb.check(all, &format!("B after batch {batches}"));
        }
        na.side.nothing();
        nb.side.nothing();
        let (a1, b1) = (c0(&bar_a), c0(&bar_b));
        counters = (a1.0 - a0.0, a1.1 - a0.1, b1.0 - b0.0, b1.1 - b0.1);
        assert_eq!(counters.1, na.recvs_done, "A's device consumed exactly the receives completed");
        assert_eq!(counters.3, nb.recvs_done, "B's device consumed exactly the receives completed");
        assert!(counters.0 + counters.2 >= total_ops, "every WR executed (incl. NOPs)");
        done_sig = na.signaled_done + nb.signaled_done;
        done_recv = na.recvs_done + nb.recvs_done;
    }
    assert_eq!(FakeHal::live_pages(), base_pages, "every page freed");
    eprintln!(
        "soak (deferred: {deferred}): {total_ops} ops ({stats:?} W/WI/R/S/SI) in {batches} \
         batches; {done_sig} signaled completions; {done_recv} receives; SQ {sq_depth} WRs, \
         RQ {rq_depth} WRs; SQ WQEs (incl. NOPs) A {} B {}, receives A {} B {}; {:?}",
        counters.0,
        counters.2,
        counters.1,
        counters.3,
        t.elapsed()
    );
    assert_eq!(stats.iter().sum::<u64>(), total_ops);
    assert!(done_sig >= batches && done_recv > total_ops / 2);
}
