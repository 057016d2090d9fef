extern crate std;
use super::*;
use crate::uk::loom_bounded as bounded;
use crate::uk::mem::CheckedSlot;
use crate::uk::sq::SqOp;
use crate::wr::{SendFlags, SendWr, Sge, WrOpcode};
use loom::sync::Arc;
use std::vec::Vec;

/// Ring memory whose every access loom sees: the qwords as atomics
/// (relaxed loads and stores, `publish` a release store), and for the
/// body qwords (0–2 of each quantum; qword 3 carries the valid bit and
/// is read while being written by design) a loom cell that every read
/// and write also touches, so loom reports a body store that does not
/// happen after the previous lap's stores and reads of that qword (a
/// slot reused before it was released).
struct LoomMem(Vec<AtomicU64>, Vec<loom::cell::UnsafeCell<()>>);

impl LoomMem {
    fn new(qwords: usize) -> Self {
        LoomMem(
            (0..qwords).map(|_| AtomicU64::new(0)).collect(),
            (0..qwords).map(|_| loom::cell::UnsafeCell::new(())).collect(),
        )
    }

    /// The body qword `i`'s cell (`None` for qword 3 of a quantum).
    fn body(&self, i: usize) -> Option<&loom::cell::UnsafeCell<()>> {
        if i % QUANTUM_QWORDS == 3 { None } else { self.1.get(i) }
    }
}

impl Words for LoomMem {
    type Slot<'m> = CheckedSlot<'m, LoomMem>;
    fn slot(&self, base: usize, len: usize) -> CheckedSlot<'_, LoomMem> {
        CheckedSlot::new(self, base, len)
    }
    fn qwords(&self) -> usize {
        self.0.len()
    }
    fn read(&self, i: usize) -> u64 {
        if let Some(c) = self.body(i) {
            c.with(|_| ());
        }
        self.0.get(i).map_or(0, |a| a.load(Ordering::Relaxed))
    }
    fn write(&self, i: usize, v: u64) {
        if let Some(c) = self.body(i) {
            c.with_mut(|_| ());
        }
        if let Some(a) = self.0.get(i) {
            a.store(v, Ordering::Relaxed)
        }
    }
    fn publish(&self, i: usize, v: u64) {
        // dma_wmb + store == a release store in the model.
        if let Some(a) = self.0.get(i) {
            a.store(v, Ordering::Release)
        }
    }
}

type Shared = MpSq<LoomMem, Vec<MpTrk>>;

/// The one-byte SGE of WR `id` (address `id`, key `id`).
fn sge(id: u64) -> Sge {
    Sge { addr: id, length: 1, lkey: id as u32 }
}

/// A signaled RDMA WRITE `id` of `sg` to remote address `id`, rkey `id`:
/// the WR the `post_send` models post.
fn write(id: u64, sg: &[Sge]) -> SendWr<'_> {
    SendWr {
        wr_id: id,
        opcode: WrOpcode::RdmaWrite { remote_addr: id, rkey: id as u32 },
        flags: SendFlags::SIGNALED,
        sg_list: sg,
    }
}

/// A model (at most `bound` preemptions, [`bounded`]) over a new ring of
/// `quanta` quanta in each execution.
fn on_ring(bound: usize, quanta: usize, f: impl Fn(Arc<Shared>) + Sync + Send + 'static) {
    bounded(bound, move || f(ring(quanta)));
}

/// Producers `a` and `b` (WR id, SGE count) on clones of `sq`, the
/// observer checking `start..end` while they run, then both joined.
fn two_producers(sq: &Arc<Shared>, a: (u64, usize), b: (u64, usize), start: u32, end: u32) {
    let (sa, sb) = (sq.clone(), sq.clone());
    let ta = loom::thread::spawn(move || produce(&sa, a.0, a.1));
    let tb = loom::thread::spawn(move || produce(&sb, b.0, b.1));
    let_producers_run();
    observe(sq, start, end);
    ta.join().unwrap();
    tb.join().unwrap();
}

fn ring(quanta: usize) -> Arc<Shared> {
    let mem = LoomMem::new(quanta * 4);
    let trk = (0..quanta).map(|_| MpTrk::new()).collect();
    Arc::new(MpSq::new(mem, trk, quanta as u32, 13, 101, 7).unwrap())
}

/// Producer `id` posts a WRITE of `nsge` SGEs whose every id-bearing
/// field (rkey, remote address, each lkey) is `id`.
fn produce(sq: &Shared, id: u64, nsge: usize) {
    let sges: Vec<Sge> = (0..nsge).map(|_| sge(id)).collect();
    let op = SqOp::Write {
        remote_addr: id,
        rkey: id as u32,
        solicited: false,
        sges: &sges,
        inline: false,
    };
    sq.post(&SqPost::new(id, op)).unwrap();
}

/// The device's view at one instant of quanta `start..end`: walking in
/// ring order like the device (stop at the first quantum without this
/// lap's valid bit), every valid WQE has its whole body (headers are
/// read with acquire: the `dma_wmb` before them is a release). In this
/// model every fragment has length 1 and every WQE a distinct id;
/// positions are free-running (lap = position / size).
///
/// Returns the ids of the WQEs the device may execute, in ring order.
fn observe(sq: &Shared, start: u32, end: u32) -> Vec<u64> {
    let n = sq.size();
    let word = |pos: u32| sq.mem().0[(pos % n) as usize * 4 + 3].load(Ordering::Acquire);
    let valid = |pos: u32, w: u64| (w >> 63 != 0) == (pos / n).is_multiple_of(2);
    let mut seen = Vec::new();
    let mut cur = start;
    while cur < end {
        let idx = (cur % n) as usize;
        let h = word(cur);
        if !valid(cur, h) {
            break;
        }
        if sq_hdr::OPCODE.get(h) as u8 == op::NOP {
            cur += 1;
            continue;
        }
        let id = sq_hdr::REMSTAG.get(h);
        assert_eq!(sq.mem().read(idx * 4 + 2), id, "partly written WQE (remote address)");
        assert_eq!(sq.mem().read(idx * 4 + 1) & 0xffff_ffff, id, "partly written SGE 0");
        let quanta = sq_hdr::ADDFRAGCNT.get(h) as u32 / 2 + 1;
        for q in 1..quanta {
            let f = word(cur + q);
            assert_eq!(f & 0xffff_ffff, id, "partly written fragment");
            assert!(valid(cur + q, f), "fragment valid bit missing");
        }
        assert!(!seen.contains(&id), "seen twice");
        seen.push(id);
        cur += quanta;
    }
    seen
}

/// After all producers finished: everything is published, each id once,
/// and completing them in ring order retires the whole ring.
fn settle(sq: &Shared, start: u32, end: u32, ids: &[u64]) {
    let seen = observe(sq, start, end);
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ids);
    assert_eq!(sq.published(), end);
    let mut cur = start;
    for id in seen {
        loop {
            let h = sq.mem().read((cur % sq.size()) as usize * 4 + 3);
            if sq_hdr::OPCODE.get(h) as u8 != op::NOP {
                break;
            }
            cur += 1;
        }
        let t = sq.complete_at(cur % sq.size()).expect("published WQE completes");
        assert_eq!(t.wr_id, id);
        cur += u32::from(t.quanta);
    }
    assert_eq!(sq.used(), 0);
}

/// Called by the observing thread (the device, the completer) right
/// after spawning the producers. loom 0.7 keeps only the last access
/// of each atomic for its race detection, so a producer's own `head`
/// load before its CAS hides the race with the observer's earlier load
/// and the producers were never run first (tokio-rs/loom#166, #392):
/// these models passed having explored almost nothing. Yielding lets
/// the producers run, and the observer is then scheduled back at every
/// point the bounded search tries.
fn let_producers_run() {
    loom::thread::yield_now();
}

#[test]
fn loom_two_producers_publish_whole_wqes() {
    on_ring(3, 8, |sq| {
        two_producers(&sq, (1, 1), (2, 1), 0, 2);
        settle(&sq, 0, 2, &[1, 2]);
    });
}

#[test]
fn loom_padding_published_with_its_wqe() {
    // Head at 6 of a 16-quanta ring: a 2-quanta WQE (3 SGEs) and a
    // 1-quantum one. If the small one reserves first (6), the big one
    // needs a NOP pad at 7 and lands at 8..9; the pad is published in
    // order with it. Otherwise the big one sits at 6..7 and the small one at 8.
    on_ring(2, 16, |sq| {
        for i in 0..6 {
            sq.post(&SqPost::new(100 + i, SqOp::Nop)).unwrap();
        }
        assert!(sq.complete_at(5).is_some());
        two_producers(&sq, (1, 3), (2, 1), 6, 10);
        let end = sq.published();
        assert!(end == 9 || end == 10, "pad only when the big WQE crosses the chunk");
        settle(&sq, 6, end, &[1, 2]);
    });
}

#[test]
fn loom_three_producers() {
    // Preemption bound 1 keeps the three-producer model tractable (a few
    // seconds); the two-producer models run with bounds 2–3.
    on_ring(1, 8, |sq| {
        let hs: Vec<_> = (1..=3u64)
            .map(|id| {
                let s = sq.clone();
                loom::thread::spawn(move || produce(&s, id, 1))
            })
            .collect();
        let_producers_run();
        observe(&sq, 0, 3);
        for h in hs {
            h.join().unwrap();
        }
        settle(&sq, 0, 3, &[1, 2, 3]);
    });
}

/// Moves head and tail to `at` (completing `at` NOPs), so that the next
/// posts start there (e.g. just before the wrap).
fn advance(sq: &Shared, at: u32) {
    for i in 0..at {
        sq.post(&SqPost::new(1000 + u64::from(i), SqOp::Nop)).unwrap();
    }
    if at > 0 {
        assert!(sq.complete_at(at - 1).is_some());
    }
}

/// The completer against two producers across the ring wrap: a CQE
/// naming the second reservation (position 8 = ring index 0, lap 1)
/// arrives at any moment. It is accepted only once both WQEs before and
/// at it are published, and then hands back a tracking entry one of the
/// producers wrote — never the stale one of lap 0 (the old bound, the
/// reservation head, accepted it while the producer was still filling).
#[test]
fn loom_completer_bounded_by_publication_across_the_wrap() {
    on_ring(2, 8, |sq| {
        advance(&sq, 7);
        let a = sq.clone();
        let b = sq.clone();
        let ta = loom::thread::spawn(move || produce(&a, 1, 1));
        let tb = loom::thread::spawn(move || produce(&b, 2, 1));
        let_producers_run();
        let early = sq.complete_at(0);
        if let Some(t) = early {
            assert!(t.wr_id == 1 || t.wr_id == 2, "stale tracking entry {}", t.wr_id);
        }
        ta.join().unwrap();
        tb.join().unwrap();
        match early {
            Some(_) => assert_eq!(sq.used(), 0),
            None => settle(&sq, 7, 9, &[1, 2]),
        }
    });
}

/// The completer (the CQ poller) in a thread of its own, spinning on
/// `take` until it hands back an entry while `main` produces WQE 1 at
/// position 0: the entry taken is the one the producer wrote (wr_id 1,
/// length 1), never the ring's initial one (wr_id 0, length 0). `take` is `complete_at(0)`
/// or `retire_oldest()`.
///
/// Why the completer is its own thread and the stale entry was stored
/// by another one: loom 0.7 lets a relaxed load return an older store
/// only if the loading thread has not itself seen that store before its
/// last `yield_now` (`rt/atomic.rs`, `match_load_to_stores`,
/// `is_seen_before_yield`: the progress rule for spin loops). A
/// completer that wrote or read the old entry and then yielded (as the
/// `main` completers of the models above do) can never read it stale,
/// with or without the fence. Here the completer's first load of the
/// entry comes after the header load that saw the valid bit, and the
/// old entry was stored by `main` (`MpTrk::new`), so without the
/// acquire fence loom offers both stores to the relaxed entry load.
/// (Checked: with a `peek(0)` and a `yield_now` added at the start of
/// the completer, the model passes with the `complete_at` fence
/// deleted.) The ring memory is `LoomMem`: relaxed header loads, a
/// release store for `dma_wmb` + header store, so nothing but the
/// fence orders the entry load after the header load.
fn completer_takes_the_producers_entry(take: fn(&Shared) -> Option<SqWrTrk>) {
    on_ring(2, 8, move |sq| {
        let c = sq.clone();
        let completer = loom::thread::spawn(move || {
            loop {
                if let Some(t) = take(&c) {
                    return t;
                }
                loom::thread::yield_now();
            }
        });
        produce(&sq, 1, 1);
        let t = completer.join().unwrap();
        assert_eq!(t.wr_id, 1, "stale tracking entry");
        assert_eq!(t.wr_len, 1, "stale tracking meta");
        assert_eq!(sq.used(), 0);
    });
}

/// [`completer_takes_the_producers_entry`] through `complete_at`: fails
/// ("stale tracking entry": the completer read wr_id 0) when the
/// `fence(Ordering::Acquire)` in `MpSq::complete_at` is deleted —
/// checked by deleting it and running this model — and passes with it.
#[test]
fn loom_complete_at_fence_orders_the_entry_after_the_header() {
    completer_takes_the_producers_entry(|sq| sq.complete_at(0));
}

/// The same through `retire_oldest` (flush replay), whose header check
/// and fence are `published_at`'s: fails when the
/// `fence(Ordering::Acquire)` in `MpSq::published_at` is deleted (checked
/// the same way) and passes with it.
#[test]
fn loom_published_at_fence_orders_the_entry_after_the_header() {
    completer_takes_the_producers_entry(|sq| sq.retire_oldest().map(|(_, _, t)| t));
}

/// Slot reuse across the ring wrap, released only through `tail`:
/// `main` posts WR 1 at position 7 (ring index 7) and a 7-quanta WR 2
/// at 8..14 after the reuser started, fills the ring, retires both
/// with `complete`, then raises a *relaxed* flag; the reuser, which
/// waits for that flag (it carries no ordering) and retries while the
/// ring looks full, posts WR 3 with `post` at position 15 — ring index
/// 7 again. Its body stores must happen after `main`'s stores of WR 1
/// there (`LoomMem`'s cells report them otherwise): the only edge is
/// the completer's release CAS on `tail` and the producer's acquire
/// load of it before it reserves.
fn reuse_waits_for_the_tail(complete: fn(&Shared), post: fn(&Shared) -> bool) {
    use loom::sync::atomic::AtomicBool;
    on_ring(2, 8, move |sq| {
        advance(&sq, 7);
        let go = Arc::new(AtomicBool::new(false));
        let (b, g) = (sq.clone(), go.clone());
        let reuser = loom::thread::spawn(move || {
            while !g.load(Ordering::Relaxed) {
                loom::thread::yield_now();
            }
            while !post(&b) {
                loom::thread::yield_now();
            }
        });
        produce(&sq, 1, 1);
        produce(&sq, 2, 13);
        assert_eq!(sq.used(), 8);
        complete(&sq);
        assert_eq!(sq.used(), 0);
        go.store(true, Ordering::Relaxed);
        reuser.join().unwrap();
        assert_eq!(sq.complete_at(7).map(|t| t.wr_id), Some(3));
    });
}

/// WR 3 in [`reuse_waits_for_the_tail`], posted by `post` (`reserve`)
/// or a one-WR `post_send` (`reserve_one`; `reserve_run` before branch
/// `mpratio`); false while the ring looks full.
fn post_3(sq: &Shared) -> bool {
    let sges = [sge(3)];
    let op = SqOp::Write { remote_addr: 3, rkey: 3, solicited: false, sges: &sges, inline: false };
    match sq.post(&SqPost::new(3, op)) {
        Ok(_) => true,
        Err(e) => {
            assert_eq!(e, SqError::Full);
            false
        }
    }
}

fn post_send_3(sq: &Shared) -> bool {
    let sg = [sge(3)];
    match sq.post_send(&LoomBar(AtomicU32::new(0)), QpKind::Rc, &[write(3, &sg)]) {
        Ok(()) => true,
        Err(e) => {
            assert_eq!(e.kind, SqError::Full);
            false
        }
    }
}

/// [`reuse_waits_for_the_tail`] with `complete_at` and `post`: fails
/// (loom: causality violation on a body qword of ring index 7) when
/// the `Release` of `complete_at`'s `tail` CAS or the `Acquire` of
/// `reserve`'s `tail` load is made `Relaxed` (checked by making each
/// change and running this model); passes as written.
#[test]
fn loom_slot_reused_only_after_complete_at_released_it() {
    reuse_waits_for_the_tail(|sq| assert_eq!(sq.complete_at(0).map(|t| t.wr_id), Some(2)), post_3);
}

/// The same with `retire_oldest` (twice) and `post_send`: fails when
/// the `Release` of `retire_oldest`'s `tail` CAS or the `Acquire` of
/// `reserve_one`'s `tail` load (the one-WR `post_send`'s reservation;
/// `reserve_run`'s before branch `mpratio`) is made `Relaxed` (checked
/// the same way); passes as written.
#[test]
fn loom_slot_reused_only_after_retire_oldest_released_it() {
    reuse_waits_for_the_tail(
        |sq| {
            assert_eq!(sq.retire_oldest().map(|(i, _, t)| (i, t.wr_id)), Some((7, 1)));
            assert_eq!(sq.retire_oldest().map(|(i, _, t)| (i, t.wr_id)), Some((0, 2)));
        },
        post_send_3,
    );
}

/// A register block whose doorbell the model can see: each WQEALLOC
/// write is a release increment (the `wmb` before it orders the ring
/// stores; the device reads the ring after it).
struct LoomBar(AtomicU32);

impl Bar for LoomBar {
    fn read32(&self, _o: usize) -> u32 {
        0
    }
    fn write32(&self, o: usize, _v: u32) {
        if o == regs::WQEALLOC {
            self.0.fetch_add(1, Ordering::Release);
        }
    }
}

/// The doorbell: two producers post through `post_send` (one doorbell
/// each) while the device looks. Whenever the device has seen both
/// doorbells, its in-order walk reaches both WQEs, whatever order the
/// producers published in: the last doorbell comes after every header.
#[test]
fn loom_doorbells_cover_every_published_wqe() {
    on_ring(2, 8, |sq| {
        let bar = Arc::new(LoomBar(AtomicU32::new(0)));
        let hs: Vec<_> = (1..=2u64)
            .map(|id| {
                let (s, bar) = (sq.clone(), bar.clone());
                loom::thread::spawn(move || {
                    let sg = [sge(id)];
                    s.post_send(&*bar, QpKind::Rc, &[write(id, &sg)]).unwrap();
                })
            })
            .collect();
        let_producers_run();
        if bar.0.load(Ordering::Acquire) == 2 {
            assert_eq!(observe(&sq, 0, 2).len(), 2, "a doorbell before a header");
        }
        for h in hs {
            h.join().unwrap();
        }
        settle(&sq, 0, 2, &[1, 2]);
    });
}

/// Chains through `post_send`: producer A posts [hot 1, 3-SGE 2] (one
/// CAS reserves two quanta; the 3-SGE WR is not hot, so the unused
/// quantum is handed back, or published as a NOP if B reserved after
/// it), producer B posts [hot 3]. The device sees whole WQEs, A's in its
/// order; afterwards everything is published and completes once.
#[test]
fn loom_chain_reserves_once_and_releases_the_rest() {
    on_ring(2, 16, |sq| {
        let bar = Arc::new(LoomBar(AtomicU32::new(0)));
        let (a, bar_a) = (sq.clone(), bar.clone());
        let ta = loom::thread::spawn(move || {
            let (s1, s3) = ([sge(1)], [sge(2); 3]);
            a.post_send(&*bar_a, QpKind::Rc, &[write(1, &s1), write(2, &s3)]).unwrap();
        });
        let (b, bar_b) = (sq.clone(), bar.clone());
        let tb = loom::thread::spawn(move || {
            let s1 = [sge(3)];
            b.post_send(&*bar_b, QpKind::Rc, &[write(3, &s1)]).unwrap();
        });
        let_producers_run();
        let seen = observe(&sq, 0, 16);
        let (p1, p2) = (seen.iter().position(|&i| i == 1), seen.iter().position(|&i| i == 2));
        if let Some(p2) = p2 {
            assert!(p1.is_some_and(|p1| p1 < p2), "chain order");
        }
        ta.join().unwrap();
        tb.join().unwrap();
        assert_eq!(bar.0.load(Ordering::Acquire), 2);
        let end = sq.published();
        assert_eq!(end, sq.used(), "every reserved quantum published");
        settle(&sq, 0, end, &[1, 2, 3]);
    });
}

/// The shared QP's gate (`PostGate`, the real code of
/// `SharedQp::post_send` and `Cq::poll_shared`): a poster racing the
/// control path that sets the QP's error flag and the poller that then
/// flushes. The flush owns the SQ's retirement state (a loom cell): a
/// lock-free post that overlapped it would be a causality violation.
#[test]
fn loom_shared_qp_gate_never_lets_a_post_overlap_the_flush() {
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::AtomicBool;
    bounded(3, || {
        let gate = Arc::new(PostGate::new());
        let err = Arc::new(AtomicBool::new(false));
        let sq_state = Arc::new(UnsafeCell::new(0u32));
        let (g, e, st) = (gate.clone(), err.clone(), sq_state.clone());
        let poster = loom::thread::spawn(move || {
            // SAFETY: the model checks that this read never races the
            // flush's write (that is the property under test).
            g.lock_free(|| e.load(Ordering::Acquire), || st.with(|p| unsafe { *p }))
        });
        // The control path (set_qp_error) and then the poller.
        err.store(true, Ordering::Release);
        let_producers_run();
        if err.load(Ordering::Acquire) && gate.may_flush() {
            // SAFETY: as above.
            sq_state.with_mut(|p| unsafe { *p += 1 });
        }
        let _ = poster.join().unwrap();
    });
}
