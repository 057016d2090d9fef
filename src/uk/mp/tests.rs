extern crate std;
use super::*;
use crate::uk::mem::QueueMem;
use crate::uk::sq::{Sq, SqOp};
use crate::uk::tests::NopBar;
use crate::wr::Sge;
use core::ptr::NonNull;
use std::vec;
use std::vec::Vec;

fn view(v: &mut [u64]) -> QueueMem<'_> {
    // SAFETY: the vector is borrowed mutably for the view's lifetime.
    unsafe { QueueMem::from_raw(NonNull::new(v.as_mut_ptr()).unwrap(), v.len()) }
}

/// A shared SQ of `size` quanta (13 fragments, 101 inline bytes, QP 7)
/// over leaked memory: the queue every test here posts on.
fn test_mp(size: u32) -> MpSq<QueueMem<'static>, &'static [MpTrk]> {
    let b: &'static mut [u64] = Vec::leak(vec![0u64; size as usize * 4]);
    let tb: &'static [MpTrk] = Vec::leak((0..size).map(|_| MpTrk::new()).collect());
    MpSq::new(view(b), tb, size, 13, 101, 7).unwrap()
}

/// A signaled RDMA WRITE (remote address 0, rkey 1) of `sg`.
fn write_wr(wr_id: u64, sg: &[Sge]) -> crate::wr::SendWr<'_> {
    use crate::wr::{SendFlags, SendWr, WrOpcode};
    SendWr {
        wr_id,
        opcode: WrOpcode::RdmaWrite { remote_addr: 0, rkey: 1 },
        flags: SendFlags::SIGNALED,
        sg_list: sg,
    }
}

/// Posts one NOP WQE (one quantum) for each of `ids`, as its `wr_id`.
fn post_nops(mp: &MpSq<QueueMem<'static>, &'static [MpTrk]>, ids: core::ops::Range<u64>) {
    for i in ids {
        mp.post(&SqPost::new(i, SqOp::Nop)).unwrap();
    }
}

/// Posts `posts` on a single-owner SQ and on a shared SQ (64 quanta each;
/// `inline`: both take inline data): the same results, and the same ring
/// bytes (not all zero).
fn same_bytes(inline: bool, posts: &[SqPost<'_>]) {
    let mut a = vec![0u64; 64 * 4];
    let mut ta = vec![SqWrTrk::default(); 64];
    let mut sq = Sq::new(view(&mut a), &mut ta, 64, 13, 101, 7).unwrap();
    let mut mp = test_mp(64);
    if inline {
        // SAFETY: the callers' inline SGEs point into data alive and
        // readable for the posts.
        unsafe {
            sq.enable_inline();
            mp.enable_inline();
        }
    }
    for p in posts {
        assert_eq!(sq.post(p), mp.post(p));
    }
    let sq_mem: Vec<u64> = (0..256).map(|i| sq.mem().read(i)).collect();
    let mp_mem: Vec<u64> = (0..256).map(|i| mp.mem().read(i)).collect();
    assert_eq!(sq_mem, mp_mem);
    assert!(sq_mem.iter().any(|w| *w != 0));
}

/// The shared path writes exactly the bytes the single-owner path does.
#[test]
fn same_bytes_as_single_owner_sq() {
    let sges: Vec<Sge> = (0..13).map(|i| Sge { addr: i, length: 10, lkey: i as u32 }).collect();
    let posts: Vec<SqPost<'_>> = [1usize, 13, 2, 5, 13, 1, 3]
        .into_iter()
        .map(|n| {
            let op = SqOp::Write {
                remote_addr: 9,
                rkey: 3,
                solicited: false,
                sges: &sges[..n],
                inline: false,
            };
            let mut p = SqPost::new(n as u64, op);
            p.imm = (n == 13).then_some(0xab);
            p.signaled = true;
            p
        })
        .collect();
    same_bytes(false, &posts);
}

/// Inline WQEs too: the shared path writes the single-owner bytes.
#[test]
fn same_inline_bytes_as_single_owner_sq() {
    let data: Vec<u8> = (0..101u8).map(|i| i.wrapping_mul(37) | 1).collect();
    let base = data.as_ptr() as u64;
    let sges: Vec<Vec<Sge>> = [(1usize, 20u32), (2, 32), (1, 101), (2, 8)]
        .into_iter()
        .map(|(n, len)| {
            (0..n as u64)
                .map(|i| Sge { addr: base + i * 50, length: len / n as u32, lkey: 0 })
                .collect()
        })
        .collect();
    let posts: Vec<SqPost<'_>> = sges
        .iter()
        .map(|sges| {
            let len: u32 = sges.iter().map(|s| s.length).sum();
            let op = SqOp::Write { remote_addr: 9, rkey: 3, solicited: false, sges, inline: true };
            let mut p = SqPost::new(u64::from(len), op);
            p.signaled = true;
            p
        })
        .collect();
    same_bytes(true, &posts);
}

/// `MpSq::post_send` (hot path for one-SGE WRITE/READ/SEND/SEND_INV)
/// writes what the single-owner general encoder writes: ring, tracking,
/// errors, over flags, SGE counts, both QP kinds, pads and a full ring.
#[test]
#[cfg_attr(miri, ignore = "exhaustive flags × ops × kinds: too slow under Miri")]
fn hot_post_send_same_as_general_encoder() {
    use crate::uk::qp::sq_post_from_wr;
    use crate::wr::WrOpcode;
    // `s0` is a hot SGE; `s1`'s length is past the largest message
    // (refused by both paths).
    let s0 = [Sge { addr: 0x7f00_1234_5678, length: 0x0765_4321, lkey: 0xab_cdef }];
    let s1 = [Sge { addr: 0x7f00_1234_5678, length: 0x8765_4321, lkey: 0xab_cdef }];
    let s2 = [s1[0], Sge { addr: 0x10, length: 3, lkey: 9 }];
    let ops: Vec<WrOpcode> = crate::uk::tests::HOT_OPS
        .into_iter()
        .chain([WrOpcode::LocalInv { inv_key: 0x77 }])
        .collect();
    let wrs = crate::uk::tests::every_wr(&ops, &[&s0[..], &s1[..], &s2[..], &[][..]]);
    for kind in [QpKind::Rc, QpKind::Ud] {
        for max_frags in [0, 13] {
            let (mut ma, mut ta) = (vec![0u64; 16 * 4], vec![SqWrTrk::default(); 16]);
            let mut mb = vec![0u64; 16 * 4];
            let tb: Vec<MpTrk> = (0..16).map(|_| MpTrk::new()).collect();
            let mut sq = Sq::new(view(&mut ma), &mut ta, 16, max_frags, 0, 7).unwrap();
            let mp = MpSq::new(view(&mut mb), &tb[..], 16, max_frags, 0, 7).unwrap();
            // Chains of 1, 2, 1 and 3 WRs in turn (one WR takes its own
            // path; the single ones meet every SGE list).
            let mut rest = &wrs[..];
            for c in 0.. {
                if rest.is_empty() {
                    break;
                }
                let (chain, r) = rest.split_at([1, 2, 1, 3][c % 4].min(rest.len()));
                rest = r;
                let got = mp.post_send(&NopBar, kind, chain);
                let mut want = Ok(());
                for (i, wr) in chain.iter().enumerate() {
                    if let Err(e) = sq.post_general(&sq_post_from_wr(wr, kind)) {
                        want = Err(PostSendError { bad_wr: i, kind: e });
                        break;
                    }
                }
                assert_eq!(got, want, "chain {c} ({kind:?}, max_frags {max_frags})");
                assert_eq!(mp.used(), sq.used(), "chain {c}");
                for q in 0..16 * 4 {
                    assert_eq!(mp.mem().read(q), sq.mem().read(q), "chain {c} qword {q}");
                }
                // The outstanding entries, WQE start by WQE start (inner
                // quanta are marked 0 by both).
                assert_eq!(mp.tail(), sq.tail(), "chain {c}");
                let mut p = mp.tail();
                let end = p + mp.used();
                while p < end {
                    let t = tb[(p % 16) as usize].load();
                    assert_eq!(Some(&t), sq.trk(p % 16), "chain {c} trk {p}");
                    p += u32::from(t.quanta.max(1));
                }
                if c % 7 == 6 {
                    while mp.retire_oldest().is_some() {}
                    while sq.retire_oldest().is_some() {}
                }
            }
        }
    }
}

/// Two cores post to one shared SQ; the CQ poller (through `QpUk<&MpSq>`)
/// completes every WR exactly once, then a flush CQE replays the rest.
#[test]
fn shared_sq_completes_through_the_cq() {
    use crate::uk::cq::CqRing;
    use crate::uk::qp::{QpKind, QpUk, poll_cq};
    use crate::uk::rq::Rq;
    use crate::wr::{WcStatus, WorkCompletion};
    use irdma_hal::wqe::cqe;
    extern crate std;

    let mp = test_mp(512);
    let sg = [Sge { addr: 1, length: 10, lkey: 2 }];
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let mp = &mp;
            s.spawn(move || {
                for i in 0..20u64 {
                    let wr = write_wr((t << 8) | i, &sg);
                    mp.post_send(&NopBar, QpKind::Rc, &[wr]).unwrap();
                }
            });
        }
    });
    let mut rqm = vec![0u64; 8 * 4];
    let mut ids = vec![0u64; 8];
    let mut cqm = vec![0u64; 64 * 4];
    let mut sh = vec![0u64; 8];
    let rq = Rq::new(view(&mut rqm), &mut ids, 8, 0, 1).unwrap();
    let mut cq = CqRing::new(view(&mut cqm), view(&mut sh), 64, 3).unwrap();
    let mut qp = QpUk::new(&mp, rq, 0x77, QpKind::Rc);
    // The device completes the first 30 WQEs (all 1 quantum) in order...
    let cqe_at = |cq: &CqRing<'_>, slot: usize, idx: u64, major: u64| {
        cq.mem().write(slot * 4 + 1, 0x77);
        cq.mem().write(
            slot * 4 + 3,
            cqe::VALID.prep(1)
                | cqe::SQ.prep(1)
                | cqe::WQEIDX.prep(idx)
                | cqe::ERROR.prep((major != 0) as u64)
                | cqe::MAJERR.prep(major)
                | cqe::MINERR.prep(1),
        );
    };
    for i in 0..30 {
        cqe_at(&cq, i, i as u64, 0);
    }
    // ...then the QP errors: one flush CQE for the rest.
    cqe_at(&cq, 30, 0, 1);
    let mut wc = [WorkCompletion::EMPTY; 64];
    let n = poll_cq(&mut cq, &mut qp, &mut wc);
    assert_eq!(n, 40);
    assert!(wc[..30].iter().all(|c| c.status == WcStatus::Success));
    assert!(wc[30..40].iter().all(|c| c.status == WcStatus::WrFlushErr));
    let mut got: Vec<u64> = wc[..n].iter().map(|c| c.wr_id).collect();
    got.sort_unstable();
    let mut want: Vec<u64> = (0..2u64).flat_map(|t| (0..20).map(move |i| (t << 8) | i)).collect();
    want.sort_unstable();
    assert_eq!(got, want, "every WR exactly once");
    assert_eq!(mp.used(), 0);
}

/// Issue #16: the producers' `head` and the completer's `tail` sit on
/// cache lines of their own, apart from each other and from the
/// read-mostly fields every post reads (with them on one line, each
/// reservation took that line from the other cores: 2 threads ran at
/// about a third of one thread's rate with one WR per post).
#[test]
fn head_and_tail_have_cache_lines_of_their_own() {
    let mp = test_mp(8);
    let block = |p: *const u8| p as usize / 128;
    let head = block((&*mp.head as *const AtomicU32).cast());
    let tail = block((&*mp.tail as *const AtomicU32).cast());
    assert_ne!(head, tail);
    let shared: [*const u8; 6] = [
        (&mp.mask as *const u32).cast(),
        (&mp.cap as *const u32).cast(),
        (&mp.lap as *const u32).cast(),
        (&mp.qp_id as *const u32).cast(),
        (&mp.lim as *const SqLimits).cast(),
        (&mp.mem as *const QueueMem<'_>).cast(),
    ];
    for p in shared {
        assert_ne!(block(p), head);
        assert_ne!(block(p), tail);
    }
}

/// Flush replay and the software flush retire with `retire_oldest`
/// while producers may be between reserve and publish: a reserved,
/// unpublished WQE (tracking entry and header not written yet) must not
/// be retired — it would report a stale entry and lose the real one.
#[test]
fn retire_oldest_stops_at_unpublished_reservation() {
    let mp = test_mp(8);
    mp.post(&SqPost::new(1, SqOp::Nop)).unwrap();
    // A producer reserved one quantum and was preempted before filling it.
    assert_eq!(mp.reserve(1), Ok((1, 0)));
    assert_eq!(mp.retire_oldest().map(|(i, _, t)| (i, t.wr_id)), Some((0, 1)));
    assert_eq!(mp.retire_oldest(), None, "unpublished WQE retired");
    assert_eq!(mp.used(), 1, "the reservation stays outstanding");
}

/// A producer stalled after `reserve` finishes: fills and publishes
/// its reservation (`start`, `pad`) as NOP `wr_id`. (`'static` memory:
/// `fill_publish`'s encoder closure is higher-ranked over the slot
/// lifetime.)
fn finish_nop(
    mp: &MpSq<QueueMem<'static>, &'static [MpTrk]>,
    (start, pad): (u32, u32),
    wr_id: u64,
    signaled: bool,
) -> PostedWqe {
    let t = SqWrTrk { wr_id, wr_len: 0, quanta: 1, signaled };
    mp.fill_publish(start, pad, t, |slot, valid| {
        encode_body(&SqPost::new(wr_id, SqOp::Nop), slot, valid, 1)
    })
}

/// Issue #12: a bogus or early CQE naming a reserved, unwritten WQE —
/// or a published one behind it — is refused. (Accepting it retired the
/// reservation, after which a second producer filled the same slot.)
#[test]
fn complete_at_refuses_unpublished_and_what_lies_behind_it() {
    let mp = test_mp(8);
    mp.post(&SqPost::new(1, SqOp::Nop)).unwrap();
    // A producer reserved quantum 1 and was preempted before filling it.
    let (start, pad) = mp.reserve(1).unwrap();
    assert_eq!((start, pad), (1, 0));
    mp.post(&SqPost::new(3, SqOp::Nop)).unwrap();
    assert_eq!(mp.complete_at(1), None, "reserved, unwritten WQE completed");
    assert_eq!(mp.complete_at(2), None, "WQE behind an unwritten one completed");
    assert_eq!(mp.used(), 3);
    assert_eq!(mp.published(), 1);
    assert_eq!(mp.complete_at(0).map(|t| t.wr_id), Some(1));
    // The space of the reservation was not handed out again: 6 more fit
    // (positions 3..=8), then the ring is full.
    post_nops(&mp, 10..16);
    assert_eq!(mp.post(&SqPost::new(99, SqOp::Nop)), Err(SqError::Full));
    // The stalled producer finishes: everything behind it completes.
    let p = finish_nop(&mp, (start, pad), 2, true);
    assert_eq!(p.wqe_idx, 1);
    assert_eq!(mp.published(), 9);
    assert_eq!(mp.complete_at(6).map(|t| t.wr_id), Some(13));
    assert_eq!(mp.used(), 2);
    assert_eq!(mp.complete_at(1), None, "not outstanding");
    assert_eq!(mp.complete_at(0).map(|t| t.wr_id), Some(15), "across the wrap");
    assert_eq!(mp.used(), 0);
}

/// The completer's scan reads the ring in two pieces when the range
/// wraps: an unpublished quantum in the second piece (the new lap) stops
/// `complete_at` and `published()` just as one in the first does.
#[test]
fn scan_across_the_wrap_stops_at_an_unpublished_quantum() {
    let mp = test_mp(8);
    post_nops(&mp, 0..6);
    assert_eq!(mp.complete_at(5).map(|t| t.wr_id), Some(5));
    post_nops(&mp, 6..8);
    // Position 8 (ring index 0, the next lap) reserved, not filled.
    let (start, pad) = mp.reserve(1).unwrap();
    assert_eq!((start, pad), (8, 0));
    assert_eq!(mp.post(&SqPost::new(9, SqOp::Nop)).map(|p| p.wqe_idx), Ok(1));
    assert_eq!(mp.published(), 8, "the walk stops at the new lap's hole");
    assert_eq!(mp.complete_at(1), None, "retired across an unpublished quantum");
    assert_eq!(mp.used(), 4);
    finish_nop(&mp, (start, pad), 8, true);
    assert_eq!(mp.published(), 10);
    assert_eq!(mp.complete_at(1).map(|t| t.wr_id), Some(9));
    assert_eq!(mp.used(), 0);
}

/// Issue #12: a producer stalled between reserve and publish does not
/// stop another producer from returning (lock-free publication). The
/// other WQE is valid in the ring at once, but the device's in-order
/// walk (and so `published()` and `complete_at`) reaches it only when
/// the stalled reservation is published. Bounded: the other producer
/// runs on a thread the test waits for with a deadline.
#[test]
fn stalled_producer_does_not_block_another() {
    use std::sync::mpsc;
    let mp: &'static MpSq<QueueMem<'static>, &'static [MpTrk]> =
        std::boxed::Box::leak(std::boxed::Box::new(test_mp(16)));
    let (start, pad) = mp.reserve(1).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(mp.post(&SqPost::new(2, SqOp::Nop)));
    });
    let r = rx.recv_timeout(std::time::Duration::from_secs(20));
    let p = r.expect("the second producer waited for the stalled one").unwrap();
    assert_eq!(p.wqe_idx, 1);
    assert!(sq_hdr::VALID.is_set(mp.mem().read(4 + 3)), "its header is stored");
    assert_eq!(mp.published(), 0, "but the device's walk stops at the stalled one");
    assert_eq!(mp.complete_at(1), None);
    assert_eq!(mp.retire_oldest(), None);
    finish_nop(mp, (start, pad), 1, false);
    assert_eq!(mp.published(), 2);
    assert_eq!(mp.complete_at(1).map(|t| t.wr_id), Some(2));
    assert_eq!(mp.used(), 0);
}

/// Every quantum of every lap carries that lap's valid bit in its word
/// 3 (headers, fragments, inline quanta, pads), which is what
/// `published_at` relies on: a WQE start never reads as published from a
/// stale word of an earlier lap.
#[test]
fn every_quantum_carries_its_laps_valid_bit() {
    let mut mp = test_mp(32);
    // SAFETY: every inline SGE below points at `data`, live for the posts.
    unsafe { mp.enable_inline() };
    let data = [0x5au8; 101];
    let sges: Vec<Sge> = (0..13).map(|i| Sge { addr: i, length: 10, lkey: i as u32 }).collect();
    let inl = [Sge { addr: data.as_ptr() as u64, length: 101, lkey: 0 }];
    let mut pos = 0u32;
    // Under Miri 40 posts still wrap the 32-quanta ring several times.
    for n in 0..if cfg!(miri) { 40 } else { 200 } {
        let op = match n % 4 {
            0 => SqOp::Nop,
            1 => SqOp::Write {
                remote_addr: 1,
                rkey: 2,
                solicited: false,
                sges: &sges[..n % 13 + 1],
                inline: false,
            },
            2 => {
                SqOp::Write { remote_addr: 1, rkey: 2, solicited: false, sges: &inl, inline: true }
            }
            _ => SqOp::Write {
                remote_addr: 1,
                rkey: 2,
                solicited: false,
                sges: &sges[..2],
                inline: false,
            },
        };
        let p = mp.post(&SqPost::new(n as u64, op)).unwrap();
        let end = pos + p.pad + p.quanta;
        for q in pos..end {
            let w = mp.mem().read((q & 31) as usize * 4 + 3);
            assert_eq!(w >> 63 != 0, (q >> 5) & 1 == 0, "post {n}: quantum {q}");
        }
        pos = end;
        assert_eq!(mp.published(), pos);
        assert!(mp.complete_at(p.wqe_idx).is_some());
    }
}

/// A chain's unused reserved quanta: handed back while no one reserved
/// after them, published as NOPs otherwise (never left unpublished, so
/// the completer and the device's walk get past them).
#[test]
fn release_run_hands_back_or_publishes_nops() {
    let mp = test_mp(8);
    assert_eq!(mp.reserve_run(3), Ok((0, 3)));
    mp.release_run(1, 3);
    assert_eq!(mp.used(), 1, "handed back: no one reserved after the run");
    assert_eq!(mp.reserve_run(2), Ok((1, 2)));
    assert_eq!(mp.reserve(1), Ok((3, 0)));
    mp.release_run(2, 3);
    assert_eq!(mp.used(), 4, "someone reserved after the run: not handed back");
    let h = mp.mem().read(2 * 4 + 3);
    assert_eq!(sq_hdr::OPCODE.get(h) as u8, op::NOP);
    assert!(sq_hdr::VALID.is_set(h), "the NOP carries this lap's valid bit");
    for (pos, id) in [(0u32, 10u64), (1, 11), (3, 13)] {
        let t = SqWrTrk { wr_id: id, wr_len: 0, quanta: 1, signaled: true };
        mp.fill_publish(pos, 0, t, |slot, valid| {
            encode_body(&SqPost::new(id, SqOp::Nop), slot, valid, 1)
        });
    }
    assert_eq!(mp.published(), 4);
    assert_eq!(mp.complete_at(3).map(|t| t.wr_id), Some(13));
    assert_eq!(mp.used(), 0);
    // The ring is whole again: 8 quanta fit, the 9th does not.
    assert_eq!(mp.reserve_run(9), Ok((4, 8)));
}

/// `complete_at` refuses a WQE whose tracking entry reaches past the
/// head (`d + q > avail`) and accepts one that ends at it; and refuses
/// everything while the head it reads is older than the tail (a head
/// snapshot from before another completer's retirement), although the
/// quanta it names are published and the tail CAS would succeed.
#[test]
fn complete_at_refuses_past_the_head_and_a_head_behind_the_tail() {
    let mp = test_mp(8);
    post_nops(&mp, 0..4);
    // The entry of the last WQE (position 3) says 2 quanta: one past the head.
    mp.trk[3].store(SqWrTrk { wr_id: 3, wr_len: 0, quanta: 2, signaled: true });
    assert_eq!(mp.complete_at(3), None, "retired past the head");
    assert_eq!(mp.used(), 4);
    mp.trk[3].store(SqWrTrk { wr_id: 3, wr_len: 0, quanta: 1, signaled: true });
    assert_eq!(mp.complete_at(1).map(|t| t.wr_id), Some(1));
    // A head older than the tail (2): quanta 2 and 3 are published.
    mp.head.store(1, Ordering::Relaxed);
    assert_eq!(mp.complete_at(2), None, "head behind the tail");
    assert_eq!(mp.complete_at(3), None, "head behind the tail");
    mp.head.store(4, Ordering::Relaxed);
    assert_eq!(mp.complete_at(3).map(|t| t.wr_id), Some(3));
    assert_eq!(mp.used(), 0);
}

/// A chain reserves once for the WRs that fit: a full ring posts the
/// first ones and names the first that did not fit.
#[test]
fn chain_posts_what_fits_then_full() {
    let mp = test_mp(8);
    let sg = [Sge { addr: 1, length: 10, lkey: 2 }];
    let wr = write_wr(5, &sg);
    assert_eq!(mp.post_send(&NopBar, QpKind::Rc, &[wr; 3]), Ok(()));
    let r = mp.post_send(&NopBar, QpKind::Rc, &[wr; 7]);
    assert_eq!(r, Err(PostSendError { bad_wr: 5, kind: SqError::Full }));
    assert_eq!(mp.used(), 8);
    assert_eq!(mp.published(), 8);
}

/// `complete_at` scans valid bits, not tracking entries, up to the
/// named quantum: a CQE naming the second quantum of a 2-quanta WQE is
/// refused (its tracking entry is marked as no WQE start), on the first
/// lap (fresh entries say "one quantum") and after a wrap (a stale
/// entry of a one-quantum WQE of the lap before).
#[test]
fn complete_at_refuses_an_inner_quantum() {
    let mp = test_mp(8);
    let sges = [Sge { addr: 1, length: 1, lkey: 1 }; 3];
    let big = |id| {
        let op =
            SqOp::Write { remote_addr: 0, rkey: 1, solicited: false, sges: &sges, inline: false };
        let mut p = SqPost::new(id, op);
        p.signaled = true;
        p
    };
    // Lap 0: one-quantum WQEs at 0..3, retired; a 2-quanta one at 4..5.
    post_nops(&mp, 0..4);
    assert_eq!(mp.complete_at(3).map(|t| t.wr_id), Some(3));
    assert_eq!(mp.post(&big(10)).map(|p| (p.wqe_idx, p.quanta)), Ok((4, 2)));
    assert_eq!(mp.complete_at(5), None, "inner quantum completed");
    assert_eq!(mp.complete_at(4).map(|t| t.wr_id), Some(10));
    // Lap 1: 6, 7 and 0 one quantum, then a 2-quanta WQE at 1..2, whose
    // inner quantum 2 held a one-quantum WQE on lap 0.
    post_nops(&mp, 20..23);
    assert_eq!(mp.post(&big(30)).map(|p| (p.wqe_idx, p.quanta)), Ok((1, 2)));
    assert_eq!(mp.complete_at(2), None, "inner quantum completed after the wrap");
    assert_eq!(mp.complete_at(1).map(|t| t.wr_id), Some(30));
    assert_eq!(mp.used(), 0);
}

#[test]
fn full_and_complete() {
    let mp = test_mp(8);
    post_nops(&mp, 0..8);
    assert_eq!(mp.post(&SqPost::new(9, SqOp::Nop)), Err(SqError::Full));
    assert_eq!(mp.complete_at(2).map(|t| t.wr_id), Some(2));
    assert_eq!(mp.complete_at(2), None, "already retired");
    assert_eq!(mp.used(), 5);
    assert_eq!(mp.post(&SqPost::new(10, SqOp::Nop)).unwrap().wqe_idx, 0);
}

/// Under Miri (weak-memory emulation on, issue #28) a dozen posts per
/// producer: the same races, in a time Miri can afford.
#[test]
fn threads_publish_every_wqe_once_in_order() {
    extern crate std;
    use std::sync::atomic::{AtomicBool, Ordering as O};
    let mp = test_mp(512);
    let done = AtomicBool::new(false);
    let per = if cfg!(miri) { 12u64 } else { 300u64 };
    let seen = std::thread::scope(|s| {
        for t in 0..3u64 {
            let mp = &mp;
            s.spawn(move || {
                let sg = [Sge { addr: t, length: 1, lkey: t as u32 }];
                for i in 0..per {
                    let n = if i % 7 == 0 { 1 } else { 0 };
                    let sges = &[sg[0]; 13][..12 * n + 1];
                    let op = SqOp::Write {
                        remote_addr: t,
                        rkey: t as u32,
                        solicited: false,
                        sges,
                        inline: false,
                    };
                    while mp.post(&SqPost::new((t << 32) | i, op)).is_err() {
                        std::hint::spin_loop();
                    }
                }
            });
        }
        // The "device": consume in order, check each WQE is whole.
        let dev = s.spawn(|| {
            let mut cur = 0u32;
            let mut last = [None::<u64>; 3];
            let mut n = 0;
            while n < 3 * per {
                let idx = cur & 511;
                let h = mp.mem().read(idx as usize * 4 + 3);
                if ((h >> 63) != 0) != ((cur >> 9) & 1 == 0) {
                    std::hint::spin_loop();
                    continue;
                }
                // The body is read after the valid bit, as the device
                // does (the producers' `dma_wmb` pairs with this).
                irdma_hal::barrier::dma_rmb();
                let opc = sq_hdr::OPCODE.get(h) as u8;
                if opc == op::NOP {
                    cur += 1;
                    continue;
                }
                let id = sq_hdr::REMSTAG.get(h);
                assert_eq!(mp.mem().read(idx as usize * 4 + 2), id, "body before header");
                let t = mp.complete_at(idx).expect("published");
                let th = (t.wr_id >> 32) as usize;
                assert_eq!(th as u64, id);
                if let Some(prev) = last[th] {
                    assert!(t.wr_id == prev + 1, "per-producer order");
                }
                last[th] = Some(t.wr_id);
                cur += u32::from(t.quanta);
                n += 1;
            }
            done.store(true, O::SeqCst);
            n
        });
        dev.join().unwrap()
    });
    assert_eq!(seen, 3 * per);
    assert_eq!(mp.used(), 0);
}

/// The one-WR hot post folds the SGE limit into the free-space test (one
/// compare against `hot_cap`): with no SGE allowed it refuses with
/// TooManySges and reserves, writes and rings nothing; with SGEs allowed
/// it fills the ring to `cap` one WR at a time and then refuses with Full
/// (not TooManySges), still without reserving or ringing.
#[test]
fn one_hot_wr_refusals_from_one_compare() {
    use core::cell::Cell;
    struct Count(Cell<u32>);
    impl Bar for Count {
        fn read32(&self, _o: usize) -> u32 {
            0
        }
        fn write32(&self, _o: usize, _v: u32) {
            self.0.set(self.0.get() + 1);
        }
    }
    let sg = [Sge { addr: 1, length: 10, lkey: 2 }];
    let wr = write_wr(5, &sg);
    let bar = Count(Cell::new(0));
    let tb: Vec<MpTrk> = (0..8).map(|_| MpTrk::new()).collect();
    {
        let mut b = vec![0u64; 8 * 4];
        let mp = MpSq::new(view(&mut b), &tb[..], 8, 0, 0, 7).unwrap();
        let r = mp.post_send(&bar, QpKind::Rc, &[wr]);
        assert_eq!(r, Err(PostSendError { bad_wr: 0, kind: SqError::TooManySges }));
        assert_eq!((mp.used(), bar.0.get()), (0, 0));
        assert!((0..8 * 4).all(|q| mp.mem().read(q) == 0), "a refused WR wrote the ring");
    }
    let mut b = vec![0u64; 8 * 4];
    let mp = MpSq::new(view(&mut b), &tb[..], 8, 13, 0, 7).unwrap();
    let mut posted = 0;
    while mp.post_send(&bar, QpKind::Rc, &[wr]).is_ok() {
        posted += 1;
        assert!(posted <= 8, "posted past the ring");
    }
    assert_eq!(mp.used(), posted);
    assert_eq!(bar.0.get(), posted, "one doorbell per posted WR, none for the refusal");
    assert_eq!(posted, mp.cap);
    let r = mp.post_send(&bar, QpKind::Rc, &[wr]);
    assert_eq!(r, Err(PostSendError { bad_wr: 0, kind: SqError::Full }));
    assert_eq!((mp.used(), bar.0.get()), (posted, posted));
    // One retired, one more fits.
    assert_eq!(mp.complete_at(0).map(|t| t.wr_id), Some(5));
    assert_eq!(mp.post_send(&bar, QpKind::Rc, &[wr]), Ok(()));
    assert_eq!(mp.used(), posted);
}
