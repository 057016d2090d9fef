//! A plain QP split in two halves so a CQ can be polled without the QP
//! (`ib_poll_cq` with only the CQ; ARCHITECTURE.md, "Polling a CQ without
//! listing its QPs"):
//!
//! * the **producer half** (`post_send` / `post_recv`, owned by the QP
//!   object) writes WQEs and tracking entries and moves the heads;
//! * the **consumer half** (the CQ poller) reads tracking entries and moves
//!   the tails, and keeps the flush state.
//!
//! Each half keeps its own copy of both counters of each queue ([`Sq`],
//! [`Rq`] unchanged) and learns the other's through a [`QpLink`]: the
//! producer publishes its head with release after the WQEs and entries
//! below it are written (before the doorbell), and reads the consumer's
//! tail with acquire only when its ring looks full ([`Publish::refresh`];
//! receives read it before each post); the consumer reads the head of the
//! CQE's queue with acquire before each CQE (both heads on the general
//! path and before a flush) and publishes its tails with release once per
//! poll, after the entries it retired were read. A stale copy is always
//! on the safe side: the producer sees less room, the consumer fewer
//! outstanding WQEs — and a CQE can only name a WQE whose head was
//! published before the doorbell that made the device run it. This is the
//! SPSC protocol the hardware ring itself uses; posting stays lock-free
//! (one release store per call, plain `mov`s on x86_64, and one acquire
//! load each time the ring fills).
//!
//! The consumer half is found through a `Slot` (one per QP number on the
//! device): a pointer plus a small lock that only pollers and
//! register/unregister take — never a poster. Unregistering waits for the
//! lock, so once it returns no poller holds the pointer and the memory
//! behind it may go. Pollers only *try* the lock (a bounded number of
//! times): a poll never waits without bound.

use core::ptr::NonNull;

pub use super::qp::Publish;
use super::qp::QpUk;
use super::rq::Rq;
use super::sq::Sq;
use super::sync::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use crate::wr::WorkCompletion;

/// The positions the two halves of a split QP publish to each other.
#[derive(Debug)]
pub struct QpLink {
    sq_head: AtomicU32,
    sq_tail: AtomicU32,
    rq_head: AtomicU32,
    rq_tail: AtomicU32,
}

impl QpLink {
    /// A link for halves now at `sq`'s and `rq`'s positions.
    pub fn new(sq: &Sq<'_>, rq: &Rq<'_>) -> Self {
        QpLink {
            sq_head: AtomicU32::new(sq.head_pos()),
            sq_tail: AtomicU32::new(sq.tail_pos()),
            rq_head: AtomicU32::new(rq.head_pos()),
            rq_tail: AtomicU32::new(rq.tail_pos()),
        }
    }

    /// Producer: the consumer's SQ tail now (`QpUk::post_send_with` needs
    /// no call: it learns the tail when the ring looks full,
    /// [`Publish::refresh`]).
    #[inline(always)]
    pub fn sq_begin(&self, sq: &mut Sq<'_>) {
        sq.set_tail_pos(self.sq_tail.load(Ordering::Acquire));
    }

    /// Producer, before posting receives: the consumer's RQ tail.
    #[inline(always)]
    pub fn rq_begin(&self, rq: &mut Rq<'_>) {
        rq.set_tail_pos(self.rq_tail.load(Ordering::Acquire));
    }

    /// Producer, after writing receives: publish the RQ head.
    #[inline(always)]
    pub fn rq_publish(&self, rq: &Rq<'_>) {
        self.rq_head.store(rq.head_pos(), Ordering::Release);
    }

    /// Consumer, before each CQE: the producer's heads.
    #[inline(always)]
    pub fn consumer_begin(&self, qp: &mut QpUk<'_>) {
        qp.sq.set_head_pos(self.sq_head.load(Ordering::Acquire));
        qp.rq.set_head_pos(self.rq_head.load(Ordering::Acquire));
    }

    /// Consumer, before a CQE of one queue (the fast poll path,
    /// [`super::QpLookup::lookup_fast`]): that queue's producer head only
    /// (`sq`, else the RQ's). The other queue's copy stays as it was: stale
    /// is the safe side (fewer outstanding WQEs), and it is refreshed
    /// before anything retires on that queue.
    #[inline(always)]
    pub fn consumer_begin_one(&self, qp: &mut QpUk<'_>, sq: bool) {
        if sq {
            qp.sq.set_head_pos(self.sq_head.load(Ordering::Acquire));
        } else {
            qp.rq.set_head_pos(self.rq_head.load(Ordering::Acquire));
        }
    }

    /// Consumer, after retiring: publish the tails.
    #[inline(always)]
    pub fn consumer_end(&self, qp: &QpUk<'_>) {
        self.sq_tail.store(qp.sq.tail_pos(), Ordering::Release);
        self.rq_tail.store(qp.rq.tail_pos(), Ordering::Release);
    }
}

/// One split QP's consumer half as the lookup of a poll
/// ([`super::poll_cq`]): each CQE of its context reads the producer's head
/// of its queue first (both heads on the general path) — what
/// `verbs::Cq::poll` does per CQE once it holds the QP's slot (and what
/// `cargo xtask bench` measures as `poll_one_cqe_split`). Publish the
/// tails with [`QpLink::consumer_end`] after the poll.
pub struct Linked<'l, 'a> {
    /// The link of the pair.
    pub link: &'l QpLink,
    /// The consumer half.
    pub qp: &'l mut QpUk<'a>,
}

impl<'a> super::QpLookup<'a> for Linked<'_, 'a> {
    #[inline(always)]
    fn lookup(&mut self, ctx: u64) -> Option<&mut QpUk<'a>> {
        if ctx != self.qp.ctx() {
            return None;
        }
        self.link.consumer_begin(self.qp);
        Some(self.qp)
    }

    #[inline(always)]
    fn lookup_fast(&mut self, ctx: u64, sq: bool) -> Option<&mut QpUk<'a>> {
        // One reborrow, used for the head store and returned: returning
        // `self.qp` after the store would have the compiler reload the
        // pointer (and then the head) from the `Linked`, which it cannot
        // prove the store left alone.
        let qp = &mut *self.qp;
        if ctx != qp.fast_ctx() {
            return None;
        }
        self.link.consumer_begin_one(qp, sq);
        Some(qp)
    }

    #[inline(always)]
    fn poll_rest(&mut self, cq: &mut super::CqRing<'_>, wc: &mut [WorkCompletion]) -> usize {
        // A copy, so `self` (built per poll by the caller) has no address
        // taken and stays in registers on the inline path.
        let mut copy = Linked { link: self.link, qp: &mut *self.qp };
        super::qp::poll_cq_some(cq, &mut copy, wc)
    }
}

impl Publish for QpLink {
    #[inline(always)]
    fn publish(&self, sq: &Sq<'_>) {
        self.sq_head.store(sq.head_pos(), Ordering::Release);
    }

    #[inline]
    fn refresh(&self, sq: &mut Sq<'_>) -> bool {
        let t = self.sq_tail.load(Ordering::Acquire);
        let moved = t != sq.tail_pos();
        sq.set_tail_pos(t);
        moved
    }
}

/// Where pollers find one QP's consumer half: a pointer and a lock taken
/// by pollers and by (un)registration, never by posters.
#[derive(Debug)]
pub(crate) struct Slot<T> {
    locked: AtomicBool,
    ptr: AtomicPtr<T>,
}

/// Why [`Slot::try_acquire`] gave nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotMiss {
    /// Nothing registered.
    Empty,
    /// The lock stayed held (another poller, or a registration) for all
    /// the tries.
    Busy,
}

/// A held [`Slot`]: the registered pointer stays valid until it is dropped.
pub(crate) struct SlotGuard<'s, T> {
    slot: &'s Slot<T>,
    ptr: NonNull<T>,
}

impl<T> SlotGuard<'_, T> {
    /// The registered object (valid while the guard lives: unregistering
    /// waits for the guard).
    pub(crate) fn ptr(&self) -> NonNull<T> {
        self.ptr
    }
}

impl<T> Drop for SlotGuard<'_, T> {
    fn drop(&mut self) {
        self.slot.locked.store(false, Ordering::Release);
    }
}

impl<T> Slot<T> {
    /// An empty slot.
    pub fn new() -> Self {
        Slot { locked: AtomicBool::new(false), ptr: AtomicPtr::new(core::ptr::null_mut()) }
    }

    fn try_lock(&self) -> bool {
        self.locked.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    fn lock(&self) {
        while !self.try_lock() {
            core::hint::spin_loop();
            #[cfg(all(test, loom))]
            loom::thread::yield_now();
        }
    }

    /// Publishes `p` (waits for the lock).
    pub(crate) fn register(&self, p: NonNull<T>) {
        self.lock();
        self.ptr.store(p.as_ptr(), Ordering::Relaxed);
        self.locked.store(false, Ordering::Release);
    }

    /// Withdraws `p` (if it is the registered pointer; a later
    /// registration of the slot is left alone) and waits until no poller
    /// holds it: when this returns, nothing reached through the slot is in
    /// use.
    pub(crate) fn unregister(&self, p: NonNull<T>) {
        self.lock();
        if self.ptr.load(Ordering::Relaxed) == p.as_ptr() {
            self.ptr.store(core::ptr::null_mut(), Ordering::Relaxed);
        }
        self.locked.store(false, Ordering::Release);
    }

    /// The registered object, locked; tries the lock `tries` times (at
    /// least once) and never waits longer.
    pub(crate) fn try_acquire(&self, tries: u32) -> Result<SlotGuard<'_, T>, SlotMiss> {
        let mut n = 0;
        while !self.try_lock() {
            n += 1;
            if n >= tries {
                return Err(SlotMiss::Busy);
            }
            core::hint::spin_loop();
            #[cfg(all(test, loom))]
            loom::thread::yield_now();
        }
        match NonNull::new(self.ptr.load(Ordering::Relaxed)) {
            Some(ptr) => Ok(SlotGuard { slot: self, ptr }),
            None => {
                self.locked.store(false, Ordering::Release);
                Err(SlotMiss::Empty)
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    extern crate std;
    use super::*;
    use crate::uk::sq::SqWrTrk;
    use crate::uk::{QpKind, QueueMem, SqError};
    use crate::wr::{RecvWr, SendFlags, SendWr, Sge, WrOpcode};
    use std::boxed::Box;
    use std::sync::Arc;
    use std::vec;

    fn leak_view(qwords: usize) -> QueueMem<'static> {
        let v: &'static mut [u64] = Box::leak(vec![0u64; qwords].into_boxed_slice());
        // SAFETY: leaked, so it lives forever and is only reached through
        // this view (and its split alias).
        unsafe { QueueMem::from_raw(NonNull::new(v.as_mut_ptr()).unwrap(), qwords) }
    }

    /// A producer half (16-quanta SQ, 4-entry RQ) and its consumer half.
    fn pair() -> (QpUk<'static>, QpUk<'static>, Arc<QpLink>) {
        let trk: &'static mut [SqWrTrk] = Box::leak(vec![SqWrTrk::default(); 16].into());
        let wrid: &'static mut [u64] = Box::leak(vec![0u64; 4].into());
        let sq = Sq::new(leak_view(16 * 4), trk, 16, 1, 0, 3).unwrap();
        let rq = Rq::new(leak_view(4 * 4), wrid, 4, 0, 1).unwrap();
        let prod = QpUk::new(sq, rq, 3, QpKind::Rc);
        // SAFETY: the test keeps to the split protocol: `prod` only posts,
        // `cons` only retires, positions cross only through `link`.
        let (s, r) = unsafe { (prod.sq.split_consumer(), prod.rq.split_consumer()) };
        let cons = QpUk::new(s, r, 3, QpKind::Rc);
        let link = Arc::new(QpLink::new(&prod.sq, &prod.rq));
        (prod, cons, link)
    }

    struct NopBar;
    impl irdma_hal::Bar for NopBar {
        fn read32(&self, _o: usize) -> u32 {
            0
        }
        fn write32(&self, _o: usize, _v: u32) {}
    }

    /// The real post and retire code on two threads, the producer half
    /// filling the rings (and waiting for room) while the consumer half
    /// retires: every WR is seen once, in order, with its own wr_id and
    /// length. Under Miri this also checks the tracking arrays (plain
    /// memory written by one half and read by the other) for data races.
    #[test]
    fn split_halves_on_two_threads_see_every_wr_once() {
        const N: u64 = if cfg!(miri) { 40 } else { 2000 };
        let (mut prod, mut cons, link) = pair();
        let l2 = link.clone();
        let producer = std::thread::spawn(move || {
            let link = l2;
            let sge = [Sge { addr: 0x1000, length: 0, lkey: 1 }];
            let (mut s, mut r) = (0u64, 0u64);
            while s < N || r < N {
                if s < N {
                    let sg = [Sge { length: s as u32, ..sge[0] }];
                    let wr = SendWr {
                        wr_id: s,
                        opcode: WrOpcode::RdmaWrite { remote_addr: 0, rkey: 2 },
                        flags: SendFlags::SIGNALED,
                        sg_list: &sg,
                    };
                    // No `sq_begin`: the post learns the tail when full.
                    match prod.post_send_with(&NopBar, &[wr], &*link) {
                        Ok(()) => s += 1,
                        Err(e) => assert_eq!(e.kind, SqError::Full),
                    }
                }
                if r < N {
                    link.rq_begin(&mut prod.rq);
                    if prod.post_recv(&[RecvWr { wr_id: 1 << 32 | r, sg_list: &sge }]).is_ok() {
                        r += 1;
                    }
                    link.rq_publish(&prod.rq);
                }
                std::thread::yield_now();
            }
        });
        let (mut s, mut r) = (0u64, 0u64);
        while s < N || r < N {
            link.consumer_begin(&mut cons);
            while let Some((_, _, t)) = cons.sq.retire_oldest() {
                assert_eq!((t.wr_id, t.wr_len), (s, s as u32));
                s += 1;
            }
            while let Some(w) = cons.rq.retire_oldest() {
                assert_eq!(w, 1 << 32 | r);
                r += 1;
            }
            link.consumer_end(&cons);
            std::thread::yield_now();
        }
        producer.join().unwrap();
        link.consumer_begin(&mut cons);
        assert_eq!((cons.sq.used(), cons.rq.used()), (0, 0), "nothing twice");
    }

    /// A stale copy is on the safe side: the producer sees the ring full
    /// until the consumer publishes its tail, the consumer sees nothing
    /// until the producer publishes its head.
    #[test]
    fn stale_positions_are_conservative() {
        let (mut prod, mut cons, link) = pair();
        let sge = [Sge { addr: 0x1000, length: 8, lkey: 1 }];
        let wr = |k| SendWr {
            wr_id: k,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            sg_list: &sge,
        };
        // Without a publication the consumer sees nothing.
        prod.post_send(&NopBar, &[wr(0)]).unwrap();
        link.consumer_begin(&mut cons);
        assert_eq!(cons.sq.retire_oldest(), None);
        link.publish(&prod.sq);
        link.consumer_begin(&mut cons);
        assert_eq!(cons.sq.retire_oldest().map(|(_, _, t)| t.wr_id), Some(0));
        // Fill the ring: the producer sees no room until the tail comes.
        link.sq_begin(&mut prod.sq);
        let mut k = 1;
        while prod.post_send_with(&NopBar, &[wr(k)], &*link).is_ok() {
            k += 1;
        }
        assert_eq!(k, 16, "15 more fit: the retired slot is not free before the tail is published");
        link.consumer_begin(&mut cons);
        assert_eq!(cons.sq.retire_oldest().map(|(_, _, t)| t.wr_id), Some(1));
        link.sq_begin(&mut prod.sq);
        assert!(prod.post_send_with(&NopBar, &[wr(99)], &*link).is_err(), "tail not published");
        link.consumer_end(&cons);
        // No `sq_begin`: a post that finds the ring full learns the tail.
        assert!(prod.post_send_with(&NopBar, &[wr(99)], &*link).is_ok());
        // Two retired and published: room for exactly two.
        assert!(prod.post_send_with(&NopBar, &[wr(100)], &*link).is_ok());
        assert!(prod.post_send_with(&NopBar, &[wr(101)], &*link).is_err(), "full again");
    }

    /// The fast poll path refreshes only the head of the CQE's queue: the
    /// other queue's copy stays behind (the safe side) until its own CQE.
    #[test]
    fn consumer_begin_one_refreshes_one_queue() {
        let (mut prod, mut cons, link) = pair();
        let sge = [Sge { addr: 0x1000, length: 8, lkey: 1 }];
        let wr =
            SendWr { wr_id: 5, opcode: WrOpcode::Send, flags: SendFlags::SIGNALED, sg_list: &sge };
        prod.post_send_with(&NopBar, &[wr], &*link).unwrap();
        prod.post_recv(&[RecvWr { wr_id: 6, sg_list: &sge }]).unwrap();
        link.rq_publish(&prod.rq);
        link.consumer_begin_one(&mut cons, true);
        assert_eq!((cons.sq.used(), cons.rq.used()), (1, 0));
        link.consumer_begin_one(&mut cons, false);
        assert_eq!((cons.sq.used(), cons.rq.used()), (1, 1));
    }

    /// Unregistering waits for a poller holding the slot; afterwards the
    /// slot gives nothing, and a later registration is not undone by a
    /// stale unregister.
    #[test]
    fn slot_register_acquire_unregister() {
        let a = 1u32;
        let b = 2u32;
        let slot = Slot::new();
        assert_eq!(slot.try_acquire(1).err(), Some(SlotMiss::Empty));
        slot.register(NonNull::from(&a));
        {
            let g = slot.try_acquire(1).unwrap();
            // SAFETY: `a` outlives the guard.
            assert_eq!(unsafe { *g.ptr().as_ref() }, 1);
            assert_eq!(slot.try_acquire(3).err(), Some(SlotMiss::Busy));
        }
        slot.unregister(NonNull::from(&a));
        assert_eq!(slot.try_acquire(1).err(), Some(SlotMiss::Empty));
        slot.register(NonNull::from(&b));
        slot.unregister(NonNull::from(&a));
        // SAFETY: `b` outlives the guard.
        assert_eq!(slot.try_acquire(1).map(|g| unsafe { *g.ptr().as_ref() }).ok(), Some(2));
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    extern crate std;
    use super::*;
    use crate::uk::loom_bounded as bounded;
    use crate::uk::sq::{SqOp, SqPost, SqWrTrk};
    use crate::uk::{QpKind, QueueMem, SqError};
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;
    use std::boxed::Box;
    use std::vec;
    use std::vec::Vec;

    fn leak_view(qwords: usize) -> QueueMem<'static> {
        let v: &'static mut [u64] = Box::leak(vec![0u64; qwords].into_boxed_slice());
        // SAFETY: leaked; only reached through this view and its alias.
        unsafe { QueueMem::from_raw(NonNull::new(v.as_mut_ptr()).unwrap(), qwords) }
    }

    /// The SPSC protocol of a split SQ with the real `Sq` arithmetic and
    /// the real `QpLink`: the producer tries 11 posts into an 8-quanta ring
    /// (it gets past 8 only with room the consumer published, which it
    /// reads only when the ring looks full: `Publish::refresh`), the
    /// consumer retires in three rounds (refreshing the SQ head only, as
    /// the fast poll path does), then drains after the join. Each
    /// tracking write/read is mirrored in a loom cell at the same program
    /// point, so loom reports a race if a slot could be rewritten before
    /// the consumer read it, or read before it was written (the real array
    /// is plain memory loom cannot see; Miri checks that one in
    /// `tests::split_halves_on_two_threads_see_every_wr_once`). No thread
    /// spins, so the model is finite without yields.
    #[test]
    fn loom_split_sq_never_reuses_an_unread_slot() {
        const TRIES: u64 = 11;
        bounded(2, || {
            let trk: &'static mut [SqWrTrk] = Box::leak(vec![SqWrTrk::default(); 8].into());
            let wrid: &'static mut [u64] = Box::leak(vec![0u64; 2].into());
            let sq = Sq::new(leak_view(8 * 4), trk, 8, 1, 0, 3).unwrap();
            let rq = Rq::new(leak_view(2 * 4), wrid, 2, 0, 1).unwrap();
            let mut prod = QpUk::new(sq, rq, 3, QpKind::Rc);
            // SAFETY: the model keeps to the split protocol.
            let (s, r) = unsafe { (prod.sq.split_consumer(), prod.rq.split_consumer()) };
            let mut cons = QpUk::new(s, r, 3, QpKind::Rc);
            let link = Arc::new(QpLink::new(&prod.sq, &prod.rq));
            let cells: Arc<Vec<UnsafeCell<u64>>> =
                Arc::new((0..8).map(|_| UnsafeCell::new(u64::MAX)).collect());
            let (l2, c2) = (link.clone(), cells.clone());
            let t = loom::thread::spawn(move || {
                let mut k = 0;
                for _ in 0..TRIES {
                    // The producer learns the tail only when the ring looks
                    // full (`Publish::refresh`, as `post_send_with` does).
                    let post = SqPost::new(k, SqOp::Nop);
                    let mut r = prod.sq.post(&post);
                    if r == Err(SqError::Full) && l2.refresh(&mut prod.sq) {
                        r = prod.sq.post(&post);
                    }
                    match r {
                        Ok(p) => {
                            // SAFETY: loom checks this access for races.
                            c2[p.wqe_idx as usize].with_mut(|c| unsafe { *c = k });
                            l2.publish(&prod.sq);
                            k += 1;
                        }
                        Err(SqError::Full) => {}
                        Err(e) => panic!("{e:?}"),
                    }
                }
                k
            });
            let mut next = 0;
            let mut round = |cons: &mut QpUk<'static>| {
                // The fast poll path's refresh: the SQ head only.
                link.consumer_begin_one(cons, true);
                while let Some((idx, _, t)) = cons.sq.retire_oldest() {
                    assert_eq!(t.wr_id, next);
                    // SAFETY: loom checks this access for races.
                    let c = cells[idx as usize].with(|c| unsafe { *c });
                    assert_eq!(c, next);
                    next += 1;
                }
                link.consumer_end(cons);
            };
            for _ in 0..3 {
                round(&mut cons);
            }
            let posted = t.join().unwrap();
            round(&mut cons);
            assert!(posted >= 8, "the first 8 always fit");
            assert_eq!(next, posted, "every posted WQE retired once");
        });
    }

    /// Issue #28 item 2: the consumer half retires on CQEs naming its head
    /// (the first free slot as far as it knows) and the slot after it —
    /// device data — while the producer half posts into those slots; then
    /// a CQE naming its last outstanding WQE. The real `Sq` code on both
    /// sides, with every tracking-entry access mirrored in a loom cell
    /// (`Sq::loom_track_entries`): reading a free slot's entry before
    /// checking the index against the window races with the post writing
    /// it, and loom reports that. No thread spins.
    #[test]
    fn loom_split_sq_refuses_a_free_slot_before_reading_it() {
        bounded(2, || {
            let trk: &'static mut [SqWrTrk] = Box::leak(vec![SqWrTrk::default(); 8].into());
            let wrid: &'static mut [u64] = Box::leak(vec![0u64; 2].into());
            let mut sq = Sq::new(leak_view(8 * 4), trk, 8, 1, 0, 3).unwrap();
            sq.loom_track_entries();
            let rq = Rq::new(leak_view(2 * 4), wrid, 2, 0, 1).unwrap();
            let mut prod = QpUk::new(sq, rq, 3, QpKind::Rc);
            // SAFETY: the model keeps to the split protocol.
            let (s, r) = unsafe { (prod.sq.split_consumer(), prod.rq.split_consumer()) };
            let mut cons = QpUk::new(s, r, 3, QpKind::Rc);
            let link = Arc::new(QpLink::new(&prod.sq, &prod.rq));
            prod.sq.post(&SqPost::new(0, SqOp::Nop)).unwrap();
            link.publish(&prod.sq);
            let l2 = link.clone();
            let t = loom::thread::spawn(move || {
                for k in 1..3 {
                    prod.sq.post(&SqPost::new(k, SqOp::Nop)).unwrap();
                    l2.publish(&prod.sq);
                }
            });
            // The fast poll path's refresh: the SQ head only.
            link.consumer_begin_one(&mut cons, true);
            let used = cons.sq.used();
            assert!((1..=3).contains(&used), "{used}");
            let head = cons.sq.tail() + used;
            assert_eq!(cons.sq.complete_at(head), None, "the first free slot");
            assert_eq!(cons.sq.complete_at(head + 1), None, "just above the head");
            let last = cons.sq.complete_at(head - 1).map(|t| t.wr_id);
            assert_eq!(last, Some(u64::from(used) - 1), "the last outstanding");
            link.consumer_end(&cons);
            t.join().unwrap();
        });
    }

    struct Obj {
        data: UnsafeCell<u32>,
    }

    /// `unregister` against a poller on another thread: once it returns,
    /// the object may be freed (modelled by a write to its data) — loom
    /// reports a race if a poller could still be using it.
    #[test]
    fn loom_unregister_waits_for_the_poller() {
        bounded(3, || {
            let obj = Arc::new(Obj { data: UnsafeCell::new(0) });
            let slot = Arc::new(Slot::<Obj>::new());
            let p = NonNull::from(&*obj);
            slot.register(p);
            let (s2, o2) = (slot.clone(), obj.clone());
            let t = loom::thread::spawn(move || {
                let _keep = o2;
                for _ in 0..2 {
                    if let Ok(g) = s2.try_acquire(2) {
                        // SAFETY: registered, valid while `g` lives.
                        let o = unsafe { g.ptr().as_ref() };
                        // SAFETY: loom checks this access for races.
                        o.data.with_mut(|d| unsafe { *d += 1 });
                    }
                }
            });
            loom::thread::yield_now();
            slot.unregister(p);
            // "Free": nobody may touch the object any more.
            // SAFETY: loom checks this access for races.
            obj.data.with_mut(|d| unsafe { *d = 99 });
            assert!(slot.try_acquire(1).is_err());
            t.join().unwrap();
        });
    }
}
