//! Issue #28 item 2: a device-written SQ WQE index is checked against the
//! outstanding window before its tracking entry is read.
//!
//! On a split QP (`uk::link`) the producer half writes the tracking entry
//! of every free slot while the consumer half polls: a CQE naming a free
//! slot must be refused without touching that entry, or the consumer reads
//! what the producer is writing (a data race, which Miri reports here).

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::uk::link::{Linked, QpLink};

/// A split pair over `w`: the producer half, its consumer half (same
/// context), the CQ, and their link.
fn split(w: &mut World) -> (QpUk<'_>, QpUk<'_>, CqRing<'_>, QpLink) {
    let (prod, cq) = w.parts(QpKind::Rc);
    // SAFETY: each test keeps to the split protocol: `prod` only posts,
    // `cons` only retires, and positions cross only through the link.
    let (s, r) = unsafe { (prod.sq.split_consumer(), prod.rq.split_consumer()) };
    let cons = QpUk::new(s, r, CTX, QpKind::Rc);
    let link = QpLink::new(&prod.sq, &prod.rq);
    (prod, cons, cq, link)
}

/// The race of the issue, pinned: the consumer half polls a CQE naming the
/// producer's next (free) slot, and only then — ordered by nothing but a
/// relaxed flag, so no happens-before edge joins the two — the producer
/// posts into that slot. Checking the index after reading the entry makes
/// the poll's read and the post's write race (Miri: "Data race detected");
/// checking first never reads it. Either way the CQE is refused and the
/// real completions around it are delivered.
#[test]
fn split_cqe_naming_the_free_slot_is_refused_before_the_read() {
    let mut w = World::new();
    let (mut prod, mut cons, mut cq, link) = split(&mut w);
    let one = [SGE];
    let wrs = [
        write_wr(10, SendFlags::NONE, &one),
        write_wr(11, SendFlags::NONE, &one),
        write_wr(12, SendFlags::SIGNALED, &one),
    ];
    prod.post_send_with(&NopBar, &wrs, &link).unwrap();
    // Slot 0: a stray CQE naming quantum 3, the producer's next slot (the
    // consumer half sees head 3: outside the window by one). Slot 1: the
    // real CQE of WR 12.
    hw_cqe(&cq, 0, true, 3, 0, 0, 0);
    hw_cqe(&cq, 1, true, 2, 0, 0, 0);
    let polled = AtomicBool::new(false);
    /// Sets the flag when the poll is over, even if it panicked (so the
    /// producer never waits for ever: the scope then reports the panic).
    struct Done<'f>(&'f AtomicBool);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            let _done = Done(&polled);
            let mut wc = [WC0; 4];
            let n = poll_cq(&mut cq, &mut Linked { link: &link, qp: &mut cons }, &mut wc);
            link.consumer_end(&cons);
            assert_eq!(n, 1, "the stray CQE gives nothing, the real one its WR");
            assert_eq!((wc[0].wr_id, wc[0].status), (12, WcStatus::Success));
        });
        // Relaxed: this orders nothing (on purpose), it only makes the
        // post come after the poll in time.
        while !polled.load(Ordering::Relaxed) {
            std::thread::yield_now();
        }
        prod.post_send_with(&NopBar, &[write_wr(13, SendFlags::SIGNALED, &one)], &link).unwrap();
    });
    // The WR posted into the slot the stray CQE named completes normally.
    hw_cqe(&cq, 2, true, 3, 0, 0, 0);
    let mut wc = [WC0; 4];
    let n = poll_cq(&mut cq, &mut Linked { link: &link, qp: &mut cons }, &mut wc);
    assert_eq!((n, wc[0].wr_id), (1, 13));
    assert_eq!(cons.sq.used(), 0);
}

/// How a test polls one CQE.
#[derive(Clone, Copy, Debug)]
enum How {
    /// `poll_cq`: the fast path, the general one when it declines.
    Fast,
    /// `poll_cq` through the general decoder only.
    General,
    /// `CqRing::poll_one`: the typed error itself.
    One,
}

const HOWS: [How; 3] = [How::Fast, How::General, How::One];

/// A QP under test, as a poll of its CQ sees it.
trait Harness {
    /// SQ size in quanta.
    fn size(&self) -> u32;
    /// Posts a chain of WRs (all fit).
    fn post(&mut self, wrs: &[SendWr<'_>]);
    /// One poll of `cq`.
    fn poll(&mut self, cq: &mut CqRing<'_>, how: How) -> Polled;
    /// The SQ's tail index and outstanding quanta as the poller sees them.
    fn window(&mut self) -> (u32, u32);
}

/// What one poll gave: the number of completions and the first one (a
/// two-entry array was polled), or `poll_one`'s error.
type Polled = Result<(usize, WorkCompletion), PollError>;

fn poll_with<'q, S: super::super::sq::SendQueue, L: super::super::qp::QpLookup<'q, S>>(
    cq: &mut CqRing<'_>,
    look: &mut L,
    how: How,
) -> Polled {
    let mut wc = [WC0; 2];
    let n = match how {
        How::Fast => poll_cq(cq, look, &mut wc),
        How::General => super::super::qp::poll_cq_general(cq, look, &mut wc),
        How::One => {
            let i = cq.poll_one(look)?;
            wc[0] = super::super::qp::to_work_completion(&i, QpKind::Rc);
            1
        }
    };
    Ok((n, wc[0]))
}

/// A single-owner QP (`QpUk<Sq>`, unsplit).
struct Single<'a>(QpUk<'a>);

impl Harness for Single<'_> {
    fn size(&self) -> u32 {
        self.0.sq.size()
    }
    fn post(&mut self, wrs: &[SendWr<'_>]) {
        self.0.post_send(&NopBar, wrs).unwrap();
    }
    fn poll(&mut self, cq: &mut CqRing<'_>, how: How) -> Polled {
        poll_with(cq, &mut self.0, how)
    }
    fn window(&mut self) -> (u32, u32) {
        (self.0.sq.tail(), self.0.sq.used())
    }
}

/// A split QP: the producer half posts, the consumer half polls.
struct Split<'a> {
    prod: QpUk<'a>,
    cons: QpUk<'a>,
    link: QpLink,
}

impl Harness for Split<'_> {
    fn size(&self) -> u32 {
        self.prod.sq.size()
    }
    fn post(&mut self, wrs: &[SendWr<'_>]) {
        self.prod.post_send_with(&NopBar, wrs, &self.link).unwrap();
    }
    fn poll(&mut self, cq: &mut CqRing<'_>, how: How) -> Polled {
        let r = poll_with(cq, &mut Linked { link: &self.link, qp: &mut self.cons }, how);
        self.link.consumer_end(&self.cons);
        r
    }
    fn window(&mut self) -> (u32, u32) {
        self.link.consumer_begin(&mut self.cons);
        (self.cons.sq.tail(), self.cons.sq.used())
    }
}

type SharedSq<'m> = super::super::mp::MpSq<QueueMem<'m>, &'m [super::super::mp::MpTrk]>;

/// A QP on a shared multi-producer SQ (`QpUk<&MpSq>`).
struct Shared<'a, 'm>(QpUk<'a, &'m SharedSq<'m>>);

impl Harness for Shared<'_, '_> {
    fn size(&self) -> u32 {
        self.0.sq.size()
    }
    fn post(&mut self, wrs: &[SendWr<'_>]) {
        self.0.sq.post_send(&NopBar, QpKind::Rc, wrs).unwrap();
    }
    fn poll(&mut self, cq: &mut CqRing<'_>, how: How) -> Polled {
        poll_with(cq, &mut self.0, how)
    }
    fn window(&mut self) -> (u32, u32) {
        use super::super::sq::SendQueue;
        (SendQueue::tail(&self.0.sq), SendQueue::used(&self.0.sq))
    }
}

/// Writes an SQ CQE of `CTX` naming `wqe_idx` at the CQ's head, with the
/// valid bit the CQ expects there (as the device writes one, spec
/// data-path §5.1–5.2); opcode 0 (RDMA WRITE), no error.
fn sq_cqe(cq: &CqRing<'_>, wqe_idx: u32) {
    let b = cq.head() as usize * 4;
    let m = cq.mem();
    m.write(b, 0);
    m.write(b + 1, CTX);
    m.write(b + 2, cqe::QPID.prep(QP_ID.into()));
    m.write(
        b + 3,
        cqe::VALID.prep(cq.polarity().into()) | cqe::SQ.prep(1) | cqe::WQEIDX.prep(wqe_idx.into()),
    );
}

/// A CQE naming `idx` is refused by every poll path: consumed, no
/// completion (`poll_one`: `NoQp`), the window unchanged.
fn refused(h: &mut dyn Harness, cq: &mut CqRing<'_>, idx: u32, what: &str) {
    let before = h.window();
    for how in HOWS {
        let head = cq.head();
        sq_cqe(cq, idx);
        let got = h.poll(cq, how);
        let want = match how {
            How::One => Err(PollError::NoQp),
            How::Fast | How::General => Ok(0),
        };
        let n = got.map(|(n, _)| n);
        assert_eq!(n, want, "{what} (index {idx}, window {before:?}, {how:?}): {got:?}");
        assert_ne!(cq.head(), head, "{what}: the CQE is consumed");
        assert_eq!(h.window(), before, "{what} ({how:?}): nothing retired");
    }
}

/// A CQE naming `idx` completes `wr_id` (through `how`) and leaves `used`
/// quanta outstanding.
fn completes(h: &mut dyn Harness, cq: &mut CqRing<'_>, idx: u32, how: How, wr_id: u64, used: u32) {
    let before = h.window();
    sq_cqe(cq, idx);
    let got = h.poll(cq, how);
    assert_eq!(got.map(|(n, _)| n), Ok(1), "index {idx}, window {before:?}, {how:?}");
    let wc = got.map_or(WC0, |(_, wc)| wc);
    assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::Success), "{how:?}");
    assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::RdmaWrite, SGE.length));
    assert_eq!(h.window().1, used, "index {idx}, window {before:?}, {how:?}");
}

/// The device-returned WQE index at every edge of the outstanding window,
/// lap after lap: chains of 2..=12 one-quantum WRITEs (the last one
/// signaled), so the window starts at every offset and straddles the
/// ring's end. For each chain, in order:
///
/// * just below the tail, at the head (the first free slot) and just
///   above it: refused by every poll path;
/// * at the tail: its WR completes alone (a CQE may name an unsignaled
///   WQE; the device's word is taken, as uk.c does);
/// * the old tail, now just below the window: refused;
/// * at the last outstanding WQE: the rest retire, the signaled WR
///   completes;
/// * that index again (now below an empty window) and the head: refused.
fn edges(h: &mut dyn Harness, cq: &mut CqRing<'_>) {
    let n = h.size();
    let laps = if cfg!(miri) { 1 } else { 4 };
    let one = [SGE];
    let (mut id, mut quanta, mut round) = (0u64, 0u32, 0u32);
    while quanta < laps * n + n / 2 {
        let k = 2 + (round * 5) % 11;
        let ids: Vec<u64> = (id..id + u64::from(k)).collect();
        let wrs: Vec<SendWr<'_>> = ids
            .iter()
            .map(|&i| {
                write_wr(
                    i,
                    if i + 1 == id + u64::from(k) { SendFlags::SIGNALED } else { SendFlags::NONE },
                    &one,
                )
            })
            .collect();
        h.post(&wrs);
        let (tail, used) = h.window();
        assert_eq!(used, k, "round {round}");
        let at = |off: u32| (tail + off) % n;
        let how = HOWS[round as usize % 3];
        refused(h, cq, at(n - 1), "just below the tail");
        refused(h, cq, at(k), "at the head");
        refused(h, cq, at(k + 1), "just above the head");
        completes(h, cq, at(0), how, ids[0], k - 1);
        refused(h, cq, at(0), "the old tail, just below the window");
        completes(h, cq, at(k - 1), how, ids[k as usize - 1], 0);
        refused(h, cq, at(k - 1), "below the empty window");
        refused(h, cq, at(k), "the head of the empty window");
        id += u64::from(k);
        quanta += k;
        round += 1;
    }
    assert!(quanta / n >= laps, "the ring wrapped {laps} times");
}

#[test]
fn sq_window_edges_single_owner() {
    let mut w = World::new();
    let (qp, mut cq) = w.parts(QpKind::Rc);
    edges(&mut Single(qp), &mut cq);
}

#[test]
fn sq_window_edges_split() {
    let mut w = World::new();
    let (prod, cons, mut cq, link) = split(&mut w);
    edges(&mut Split { prod, cons, link }, &mut cq);
}

#[test]
fn sq_window_edges_shared() {
    use super::super::mp::{MpSq, MpTrk};
    let mut w = World::new();
    let trk: Vec<MpTrk> = (0..64).map(|_| MpTrk::new()).collect();
    let mut ring = vec![0u64; 64 * 4];
    let mp = MpSq::new(view(&mut ring), &trk[..], 64, 13, 101, QP_ID).unwrap();
    let rq = Rq::new(view(&mut w.rq), &mut w.wrid, 16, 1, 3).unwrap();
    let mut cq = CqRing::new(view(&mut w.cq), view(&mut w.sh), 16, 7).unwrap();
    edges(&mut Shared(QpUk::new(&mp, rq, CTX, QpKind::Rc)), &mut cq);
}
