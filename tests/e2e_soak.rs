//! Soak: 100,000 mixed operations (WRITE, READ, SEND, SEND+IMM, WRITE+IMM)
//! of random sizes and SGE counts from QP A (device A) to QP B (device B),
//! in batches whose WRs are mostly unsignaled, over small rings so the SQ,
//! RQ and both CQs wrap many times. A host reference model of A's local
//! buffer, B's target buffer and B's receive buffer is updated in posting
//! order (the model executes in order); every byte is compared, and every
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

/// `n` disjoint SGEs of `len` bytes in all inside `[0, area)` of a region at
/// bus address `base` with key `lkey`: the area is cut into `n` slots, and
/// piece `i` lies inside slot `i` (so a READ's scatter is order-free).
fn sges(rng: &mut Rng, base: u64, lkey: u32, area: usize, n: usize, len: usize) -> Vec<Sge> {
    let slot = area / n;
    // Split `len` into n positive parts, each at most `slot`.
    let mut parts = vec![1usize; n];
    let mut left = len - n;
    while left > 0 {
        let i = rng.range(0, n as u64 - 1) as usize;
        let room = slot - parts[i];
        if room == 0 {
            continue;
        }
        let add = (rng.range(1, left.min(room) as u64) as usize).min(left);
        parts[i] += add;
        left -= add;
    }
    parts
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let off = i * slot + rng.range(0, (slot - p) as u64) as usize;
            Sge { addr: base + off as u64, length: p as u32, lkey }
        })
        .collect()
}

fn gather_ref(mem: &[u8], base: u64, sg: &[Sge]) -> Vec<u8> {
    let mut v = Vec::new();
    for s in sg {
        let o = (s.addr - base) as usize;
        v.extend_from_slice(&mem[o..o + s.length as usize]);
    }
    v
}

/// What the requester expects for one signaled WR.
struct Expect {
    wr_id: u64,
    opcode: WcOpcode,
    len: u32,
}

/// A receive posted on B, in RQ order.
struct Posted {
    wr_id: u64,
    sg: Vec<Sge>,
}

/// B's target region: pages mapped in reverse order behind IOVA
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
    let (mut batches, mut signaled_n, mut recvs_done) = (0u64, 0u64, 0u64);
    let (sq_depth, rq_depth, sq_wqes, rq_wqes, cqes);
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
        let da = probe_as(&bar_a, A, Profile::SMALL);
        let db = probe_as(&bar_b, B, Profile::SMALL);
        let cap = QpCap {
            max_send_wr: 24,
            max_recv_wr: 24,
            max_send_sge: 13,
            max_recv_sge: 4,
            max_inline_data: 0,
        };
        // Small CQs: they wrap every few polls (up to 3 batches of 8 WRs
        // complete between two polls).
        let mut a = Side::new(&da, A, 32, cap);
        let mut b = Side::new(&db, B, 32, cap);
        link(&mut a, &mut b);
        sq_depth = a.qp.cap().max_send_wr as usize;
        rq_depth = b.qp.cap().max_recv_wr as usize;
        assert!(rq_depth >= 16);
        let (a_sq0, b_rq0) = (
            bar_a.with_device(|d| d.counters().sq_wqes),
            bar_b.with_device(|d| d.counters().rq_wqes),
        );

        let local = a.region(LOCAL_PAGES, 1);
        let remote = buf(REMOTE_PAGES);
        let _ = fill(&remote, 2);
        let mut rev = pages_of(&remote);
        rev.reverse();
        let remote_mr = reg(&db, &b.pd, REMOTE_IOVA, (REMOTE_PAGES * 4096) as u64, &rev, false);
        assert_eq!(remote_mr.pbl_level(), 1);
        let rkey = remote_mr.rkey();
        let recv = b.region(RECV_PAGES, 3);

        let mut local_ref = local.all();
        let mut remote_ref = remote_range(&remote, 0, REMOTE_PAGES * 4096);
        let mut recv_ref = recv.all();

        let mut next_id = 1u64;
        let mut posted_recvs: VecDeque<Posted> = VecDeque::new();
        let mut expect_sq: VecDeque<Expect> = VecDeque::new();
        let mut unsignaled: BTreeSet<u64> = BTreeSet::new();
        let mut done = 0u64;
        let mut wc = [EMPTY_WC; 64];
        let mut extra = [EMPTY_WC; 4];
        // Between polls: receive expectations, touched ranges, batches.
        let mut expect_rq: Vec<(u64, WcOpcode, Option<u32>, Option<u32>)> = Vec::new();
        let mut touched_remote: Vec<(usize, usize)> = Vec::new();
        let mut touched_local: Vec<(usize, usize)> = Vec::new();
        let mut unpolled = 0usize;
        let mut last_full = 0u64;
        let mut poll_after = 1usize;
        let mut sq_outstanding = 0usize;

        while done < total_ops {
            // Host writes to the local buffer between operations (only
            // when nothing is in flight: the device may still read it).
            if unpolled == 0 {
                let o = rng.range(0, (local_ref.len() - 512) as u64) as usize;
                let flen = rng.range(1, 512) as usize;
                let fresh = rng.bytes(flen);
                local_ref[o..o + fresh.len()].copy_from_slice(&fresh);
                local.put(o, &fresh);
            }

            // Keep 24 receives posted: enough for the batches up to the
            // next poll (≤ 3 × 8 WRs). Only right after a poll: receives
            // consumed but not yet polled still hold their RQ slots.
            while unpolled == 0 && posted_recvs.len() < 24 {
                let n = rng.range(1, 4) as usize;
                let sg = sges(&mut rng, recv.addr(), recv.key(), recv_ref.len(), n, MAX_MSG);
                let id = next_id;
                next_id += 1;
                b.qp.post_recv(&[RecvWr { wr_id: id, sg_list: &sg }]).expect("post_recv");
                posted_recvs.push_back(Posted { wr_id: id, sg });
            }

            // A batch of 1..=8 WRs; the last is signaled, others sometimes.
            // The reference is updated in posting order, which is the
            // order the device executes them in.
            let k = (rng.range(1, 8) as usize).min((total_ops - done) as usize);
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
                let max_n = 13;
                let n = (rng.range(1, max_n) as usize).min(len);
                let sg = sges(&mut rng, local.addr(), local.key(), local_ref.len(), n, len);
                let id = next_id;
                next_id += 1;
                let signal = j == k - 1 || rng.range(0, 5) == 0;
                let flags = if signal { SendFlags::SIGNALED } else { SendFlags::NONE };
                let imm = rng.next_u64() as u32;
                let roff = rng.range(0, (remote_ref.len() - len) as u64) as usize;
                let remote_addr = REMOTE_IOVA + roff as u64;
                let (op, wc_op) = match kind {
                    Kind::Write | Kind::WriteImm => {
                        let d = gather_ref(&local_ref, local.addr(), &sg);
                        remote_ref[roff..roff + len].copy_from_slice(&d);
                        touched_remote.push((roff, len));
                        if kind == Kind::WriteImm {
                            let p = posted_recvs.pop_front().expect("a receive is posted");
                            // byte_len of a WRITE-with-imm receive is not checked.
                            expect_rq.push((p.wr_id, WcOpcode::RecvRdmaWithImm, None, Some(imm)));
                            (WrOpcode::RdmaWriteImm { remote_addr, rkey, imm }, WcOpcode::RdmaWrite)
                        } else {
                            (WrOpcode::RdmaWrite { remote_addr, rkey }, WcOpcode::RdmaWrite)
                        }
                    }
                    Kind::Read => {
                        let d = remote_ref[roff..roff + len].to_vec();
                        scatter_ref(&mut local_ref, local.addr(), &sg, &d);
                        touched_local.extend(
                            sg.iter()
                                .map(|s| ((s.addr - local.addr()) as usize, s.length as usize)),
                        );
                        (WrOpcode::RdmaRead { remote_addr, rkey }, WcOpcode::RdmaRead)
                    }
                    Kind::Send | Kind::SendImm => {
                        let d = gather_ref(&local_ref, local.addr(), &sg);
                        let p = posted_recvs.pop_front().expect("a receive is posted");
                        scatter_ref(&mut recv_ref, recv.addr(), &p.sg, &d);
                        let imm = (kind == Kind::SendImm).then_some(imm);
                        expect_rq.push((p.wr_id, WcOpcode::Recv, Some(len as u32), imm));
                        match imm {
                            Some(imm) => (WrOpcode::SendImm { imm }, WcOpcode::Send),
                            None => (WrOpcode::Send, WcOpcode::Send),
                        }
                    }
                };
                if signal {
                    expect_sq.push_back(Expect { wr_id: id, opcode: wc_op, len: len as u32 });
                } else {
                    unsignaled.insert(id);
                }
                wr_sges.push(sg);
                ops.push((id, op, flags));
            }

            let wrs: Vec<SendWr<'_>> = ops
                .iter()
                .zip(wr_sges.iter())
                .map(|(&(wr_id, opcode, flags), sg)| SendWr { wr_id, opcode, flags, sg_list: sg })
                .collect();
            // At most 3 batches between polls: they fit the SQ.
            assert!(sq_outstanding + k <= sq_depth);
            a.qp.post_send(&wrs).expect("post_send");
            sq_outstanding += k;
            done += k as u64;
            batches += 1;
            unpolled += 1;
            if unpolled < poll_after && done < total_ops {
                continue;
            }
            unpolled = 0;
            poll_after = rng.range(1, 3) as usize;

            // Requester completions: exactly the signaled WRs, in order.
            let since = std::time::Instant::now();
            while !expect_sq.is_empty() {
                let n = a.cq.poll(&mut [&mut a.qp], &mut wc);
                if n == 0 {
                    assert!(
                        deferred && since.elapsed() < WAIT,
                        "missing completion {:?}",
                        expect_sq.front().map(|e| e.wr_id)
                    );
                    std::thread::yield_now();
                }
                for c in &wc[..n] {
                    assert!(!unsignaled.contains(&c.wr_id), "an unsignaled WR completed: {c:?}");
                    let e =
                        expect_sq.pop_front().unwrap_or_else(|| panic!("extra completion {c:?}"));
                    assert_eq!(
                        (c.wr_id, c.status, c.opcode, c.byte_len, c.qp_num),
                        (e.wr_id, WcStatus::Success, e.opcode, e.len, a.qp.qp_num()),
                        "{c:?}"
                    );
                    signaled_n += 1;
                }
            }
            assert_eq!(a.cq.poll(&mut [&mut a.qp], &mut extra), 0, "nothing twice");
            // Every batch ends signaled: all WRs are retired now.
            unsignaled.clear();
            sq_outstanding = 0;

            // Responder completions, in RQ order, each once.
            let mut got = Vec::new();
            let since = std::time::Instant::now();
            while got.len() < expect_rq.len() {
                let n = b.cq.poll(&mut [&mut b.qp], &mut wc);
                if n == 0 {
                    assert!(
                        deferred && since.elapsed() < WAIT,
                        "missing receive completions: {got:?} vs {expect_rq:?}"
                    );
                    std::thread::yield_now();
                }
                got.extend_from_slice(&wc[..n]);
            }
            assert_eq!(got.len(), expect_rq.len(), "{got:?}");
            assert_eq!(b.cq.poll(&mut [&mut b.qp], &mut extra), 0, "no extra receive completion");
            for (c, &(id, op, len, imm)) in got.iter().zip(expect_rq.iter()) {
                assert_eq!(
                    (c.wr_id, c.status, c.opcode, c.imm_data, c.invalidated_rkey),
                    (id, WcStatus::Success, op, imm, None),
                    "{c:?}"
                );
                if let Some(len) = len {
                    assert_eq!(c.byte_len, len, "{c:?}");
                }
            }
            recvs_done += got.len() as u64;
            expect_rq.clear();

            // Bytes: what the batches touched, at every poll (a later
            // batch may have overwritten a range: compared against the
            // reference of now, which is right either way); everything,
            // about every 64 batches and at the end.
            for (o, n) in touched_remote.drain(..) {
                same(
                    &remote_range(&remote, o, n),
                    &remote_ref[o..o + n],
                    &format!("batch {batches}"),
                );
            }
            for (o, n) in touched_local.drain(..) {
                same(&local.bytes(o, n), &local_ref[o..o + n], &format!("batch {batches}"));
            }
            if batches / 64 != last_full || done >= total_ops {
                last_full = batches / 64;
                same(&local.all(), &local_ref, &format!("local buffer after batch {batches}"));
                same(
                    &remote_range(&remote, 0, REMOTE_PAGES * 4096),
                    &remote_ref,
                    &format!("remote buffer after batch {batches}"),
                );
                same(&recv.all(), &recv_ref, &format!("receive buffer after batch {batches}"));
            }
        }
        a.nothing();
        b.nothing();
        sq_wqes = bar_a.with_device(|d| d.counters().sq_wqes) - a_sq0;
        rq_wqes = bar_b.with_device(|d| d.counters().rq_wqes) - b_rq0;
        cqes = bar_a.with_device(|d| d.counters().cqes);
        assert_eq!(rq_wqes, recvs_done, "the device consumed exactly the receives completed");
        assert!(sq_wqes >= total_ops, "every WR executed ({sq_wqes} WQEs incl. NOPs)");
        drop((remote_mr, remote));
    }
    assert_eq!(FakeHal::live_pages(), base_pages, "every page freed");
    eprintln!(
        "soak (deferred: {deferred}): {total_ops} ops ({stats:?} W/WI/R/S/SI) in {batches} batches; {signaled_n} signaled \
         completions; {recvs_done} receives; SQ {sq_depth} WRs, RQ {rq_depth} WRs (~{} RQ wraps), \
         {sq_wqes} SQ WQEs, {cqes} CQEs on A; {:?}",
        recvs_done / rq_depth as u64,
        t.elapsed()
    );
    assert_eq!(stats.iter().sum::<u64>(), total_ops);
    assert!(signaled_n >= batches && recvs_done > total_ops / 2);
}
