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
//! tail with acquire before posting; the consumer reads the heads with
//! acquire before each CQE and publishes its tails with release after
//! the entries it retired were read. A stale copy is always on the safe
//! side: the producer sees less room, the consumer fewer outstanding WQEs
//! — and a CQE can only name a WQE whose head was published before the
//! doorbell that made the device run it. This is the SPSC protocol the
//! hardware ring itself uses; posting stays lock-free (one acquire load
//! and one release store per call, plain `mov`s on x86_64).
//!
//! The consumer half is found through a [`Slot`] (one per QP number on the
//! device): a pointer plus a small lock that only pollers and
//! register/unregister take — never a poster. Unregistering waits for the
//! lock, so once it returns no poller holds the pointer and the memory
//! behind it may go. Pollers only *try* the lock (a bounded number of
//! times): a poll never waits without bound.

use core::ptr::NonNull;

use super::qp::QpUk;
use super::rq::Rq;
use super::sq::Sq;
use super::sync::{AtomicBool, AtomicPtr, AtomicU32, Ordering};

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
    pub(crate) fn new(sq: &Sq<'_>, rq: &Rq<'_>) -> Self {
        QpLink {
            sq_head: AtomicU32::new(sq.head_pos()),
            sq_tail: AtomicU32::new(sq.tail_pos()),
            rq_head: AtomicU32::new(rq.head_pos()),
            rq_tail: AtomicU32::new(rq.tail_pos()),
        }
    }

    /// Producer, before posting sends: the consumer's SQ tail.
    #[inline(always)]
    pub(crate) fn sq_begin(&self, sq: &mut Sq<'_>) {
        sq.set_tail_pos(self.sq_tail.load(Ordering::Acquire));
    }

    /// Producer, before posting receives: the consumer's RQ tail.
    #[inline(always)]
    pub(crate) fn rq_begin(&self, rq: &mut Rq<'_>) {
        rq.set_tail_pos(self.rq_tail.load(Ordering::Acquire));
    }

    /// Producer, after writing receives: publish the RQ head.
    #[inline(always)]
    pub(crate) fn rq_publish(&self, rq: &Rq<'_>) {
        self.rq_head.store(rq.head_pos(), Ordering::Release);
    }

    /// Consumer, before each CQE: the producer's heads.
    #[inline(always)]
    pub(crate) fn consumer_begin(&self, qp: &mut QpUk<'_>) {
        qp.sq.set_head_pos(self.sq_head.load(Ordering::Acquire));
        qp.rq.set_head_pos(self.rq_head.load(Ordering::Acquire));
    }

    /// Consumer, after retiring: publish the tails.
    #[inline(always)]
    pub(crate) fn consumer_end(&self, qp: &QpUk<'_>) {
        self.sq_tail.store(qp.sq.tail_pos(), Ordering::Release);
        self.rq_tail.store(qp.rq.tail_pos(), Ordering::Release);
    }
}

/// What `QpUk::post_send_with` does before ringing the doorbell.
pub trait Publish {
    /// Makes the SQ head visible to the consumer half (release).
    fn publish(&self, sq: &Sq<'_>);
}

/// An unsplit QP: nothing to publish.
impl Publish for () {
    #[inline(always)]
    fn publish(&self, _sq: &Sq<'_>) {}
}

impl Publish for QpLink {
    #[inline(always)]
    fn publish(&self, sq: &Sq<'_>) {
        self.sq_head.store(sq.head_pos(), Ordering::Release);
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
    pub(crate) fn new() -> Self {
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
