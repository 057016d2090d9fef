//! Multi-producer RC QPs: [`SharedQp`], whose send queue is a
//! [`crate::uk::MpSq`] over the QP's own ring, so any number of threads post
//! through `&SharedQp` at once without a lock.
//!
//! What is shared and what is not:
//!
//! * `post_send(&self)` — lock-free while the QP is healthy, and no
//!   producer waits for another (reserve → fill → publish → one doorbell
//!   per call, see [`crate::uk::mp`]).
//!   Once the QP is in ERROR, posts *try* the QP's small spin lock, so
//!   they never race the software flush of the poller, and return
//!   `PostErrorKind::Busy` instead of spinning when it is held (safe from
//!   an interrupt handler);
//! * `post_recv(&self)` and [`Cq::poll_shared`] take that lock (the RQ and
//!   the completion bookkeeping stay single-owner behind it);
//! * `modify`, `destroy` need `&mut self`: no post runs concurrently.
//!
//! Created by the same control path as [`Device::create_qp`]; only the send
//! queue object differs.

use irdma_hal::{Bar, BufferDirection, Dma, Hal};

use super::cq::Cq;
use super::error::VerbsError;
use super::error::{PostError, PostErrorKind};
use super::lookup::QpSlot;
use super::pd::Pd;
use super::qp::{Qp, QpAttr, QpCap, QpInitAttr, QpState};
use crate::Phrase;
use crate::device::Device;
use crate::uk::mem::{HeapRef, dma_slice};
use crate::uk::mp::PostGate;
use crate::uk::qp::sq_post_from_wr;
use crate::uk::{MpSq, MpTrk, QpKind, QueueMem, Sq};
use crate::wr::{RecvWr, SendWr, WorkCompletion};

/// The shared send queue of a [`SharedQp`]: over the QP's ring, tracking in
/// host memory the QP owns. Never handed to safe code: its ring view is
/// `'static` only because the QP keeps the memory alive, and its
/// `post_send`/`complete_at`/`retire_oldest` would bypass the QP's checks.
pub(crate) type SharedSq = MpSq<QueueMem<'static>, &'static [MpTrk]>;

/// A snapshot of a shared SQ's counters, for diagnostics
/// ([`SharedQp::send_queue_stats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedSqStats {
    /// Outstanding (reserved, not retired) quanta.
    pub used: u32,
    /// The end of the contiguous run of published quanta from the tail
    /// (free-running; `uk::MpSq::published`).
    pub published: u32,
    /// Ring index of the tail.
    pub tail: u32,
    /// Ring size in quanta.
    pub size: u32,
}

pub(super) type InnerQp<'d, H, B> = Qp<'d, H, B, HeapRef<SharedSq>>;

/// Defined with the device table's slot locks, which it bounds too.
pub use super::table::BUSY_TRIES;

/// An RC QP whose send side takes posts from several threads at once
/// (`SharedQp: Sync`). What locks is described in `src/verbs/shared.rs`.
pub struct SharedQp<'d, H: Hal, B: Bar + Clone> {
    /// The QP; its `uk.sq` is `sq`. Locked by receives, the poller, and
    /// posts while the QP is in error.
    inner: spin::Mutex<InnerQp<'d, H, B>>,
    /// Lives in host memory owned by `inner` (never moved, freed when
    /// `inner` is dropped, which needs `&mut self`).
    sq: HeapRef<SharedSq>,
    dev: &'d Device<H, B>,
    id: u32,
    cap: QpCap,
    /// Mirrors `inner.alive`; changes only under `&mut self`.
    alive: bool,
    /// Lock-free posts in progress (the poller's software flush waits for 0).
    gate: PostGate,
}

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// `ib_create_qp` for an RC QP whose send queue is shared by several
    /// producers ([`SharedQp`]): exactly [`Device::create_qp`] (same
    /// sizes, context and CREATE_QP), with the SQ ring driven by an
    /// [`MpSq`]. Inline sends stay refused; see
    /// [`Device::create_shared_qp_inline`].
    pub fn create_shared_qp<'d>(
        &'d self,
        pd: &Pd<'d, H, B>,
        attr: &mut QpInitAttr<'_, 'd, H, B>,
    ) -> Result<SharedQp<'d, H, B>, VerbsError> {
        self.create_shared(pd, attr, false)
    }

    /// [`Device::create_shared_qp`] with inline sends allowed.
    ///
    /// # Safety
    ///
    /// As [`Qp::enable_inline`]: the `addr` of every SGE of every inline WR
    /// posted on the QP must be a CPU address readable for `length` bytes
    /// during the post.
    pub unsafe fn create_shared_qp_inline<'d>(
        &'d self,
        pd: &Pd<'d, H, B>,
        attr: &mut QpInitAttr<'_, 'd, H, B>,
    ) -> Result<SharedQp<'d, H, B>, VerbsError> {
        self.create_shared(pd, attr, true)
    }

    fn create_shared<'d>(
        &'d self,
        pd: &Pd<'d, H, B>,
        attr: &mut QpInitAttr<'_, 'd, H, B>,
        inline: bool,
    ) -> Result<SharedQp<'d, H, B>, VerbsError> {
        let mut sq_ref: Option<HeapRef<SharedSq>> = None;
        let qp =
            self.create_qp_inner(pd, attr, None, super::qp::Transport::Rc, |sq: Sq<'static>| {
                let r = shared_sq::<H>(&sq, inline)?;
                sq_ref = Some(r.0);
                Ok((r.0, Some((r.1, r.2))))
            })?;
        let sq = sq_ref.ok_or(VerbsError::Invalid { what: Phrase::new(&"shared SQ") })?;
        Ok(SharedQp {
            id: qp.qp_num(),
            cap: qp.cap(),
            alive: true,
            inner: spin::Mutex::new(qp),
            sq,
            dev: self,
            gate: PostGate::new(),
        })
    }
}

/// A shared SQ and the two host-memory allocations holding its tracking
/// array and the queue object.
type SharedSqParts<H> = (HeapRef<SharedSq>, Dma<H>, Dma<H>);

/// Builds the [`SharedSq`] over `sq`'s ring with `sq`'s size and limits:
/// the tracking array and the queue object itself live in two host-memory
/// allocations handed back with it (never given to the device).
fn shared_sq<H: Hal>(sq: &Sq<'static>, inline: bool) -> Result<SharedSqParts<H>, VerbsError> {
    let size = sq.size();
    let lim = sq.limits();
    let trk_mem = Dma::<H>::with_bytes(
        size as usize * core::mem::size_of::<MpTrk>(),
        BufferDirection::DriverToDevice,
    )?;
    // SAFETY: `trk_mem` goes into the QP's memory next to the queue that
    // uses it and is freed only when the QP (and so every user of the view)
    // is gone; all-zero bytes are valid `MpTrk`s (two atomic integers).
    let trk = unsafe { dma_slice::<H, MpTrk>(&trk_mem, size as usize) }
        .ok_or(VerbsError::Invalid { what: Phrase::new(&"shared SQ tracking") })?;
    // Entries start as `MpTrk::new()` (one quantum), as the uk layer expects.
    for t in trk.iter_mut() {
        *t = MpTrk::new();
    }
    let mut mp = MpSq::new(
        // SAFETY: the alias lives in the `SharedSq` the QP owns next to
        // the ring and is never handed out (`SharedSq` is crate-private
        // and `SharedQp` lends no reference to it), so it is not used
        // after the ring memory is freed with the QP.
        unsafe { sq.mem().alias() },
        &*trk,
        size,
        lim.max_frags,
        lim.max_inline,
        sq.qp_id(),
    )
    .map_err(|_| VerbsError::Invalid { what: Phrase::new(&"shared SQ") })?;
    if inline {
        // SAFETY: the caller of `create_shared_qp_inline` took on the
        // inline contract for every post on this QP.
        unsafe { mp.enable_inline() };
    }
    let obj_mem =
        Dma::<H>::with_bytes(core::mem::size_of::<SharedSq>(), BufferDirection::DriverToDevice)?;
    if core::mem::size_of::<SharedSq>() > obj_mem.len()
        || core::mem::align_of::<SharedSq>() > irdma_hal::PAGE_SIZE
    {
        return Err(VerbsError::Invalid { what: Phrase::new(&"shared SQ object") });
    }
    let p = obj_mem.vaddr().as_ptr().cast::<SharedSq>();
    // SAFETY: `p` is page-aligned (so aligned for `SharedSq`), the
    // allocation is large enough (checked above) and exclusively ours.
    unsafe { p.write(mp) };
    // SAFETY: initialised just above; the memory is owned by the QP next to
    // the queue, never moves, and outlives every use of the pointer (the
    // QP's `uk` and `SharedQp::sq`, both gone before the QP memory is
    // freed); it changes only through the queue's atomics. `SharedSq` has
    // no drop glue worth running (views and atomics), so freeing the memory
    // without dropping it leaks nothing.
    let r = unsafe { HeapRef::new(obj_mem.vaddr().cast::<SharedSq>()) };
    Ok((r, trk_mem, obj_mem))
}

/// The locked inside of a shared QP, as a slot of the CQ poller.
impl<'d, H: Hal, B: Bar + Clone> QpSlot<'d, H, B, HeapRef<SharedSq>>
    for Option<spin::MutexGuard<'_, InnerQp<'d, H, B>>>
{
    fn qp(&mut self) -> Option<&mut InnerQp<'d, H, B>> {
        self.as_deref_mut()
    }
}

impl<'d, H: Hal, B: Bar + Clone> SharedQp<'d, H, B> {
    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.id
    }

    /// The sizes the QP has (what create wrote back).
    pub fn cap(&self) -> QpCap {
        self.cap
    }

    /// The driver's view of the state.
    pub fn state(&self) -> QpState {
        self.inner.lock().state()
    }

    /// The shared send queue's counters, for diagnostics. (The queue itself
    /// is not handed out: a view of its ring would outlive the QP, and its
    /// methods would bypass the QP's checks; issue #12.) Neither of these
    /// compiles any more:
    ///
    /// ```compile_fail
    /// # use irdma::verbs::SharedQp;
    /// # use irdma::hal::{Bar, Hal};
    /// fn ring<H: Hal, B: Bar + Clone>(qp: &SharedQp<'_, H, B>) -> u32 {
    ///     qp.send_queue().used() // no queue object for safe code
    /// }
    /// ```
    ///
    /// ```compile_fail
    /// # use irdma::uk::QueueMem;
    /// fn keep(m: &QueueMem<'static>) -> QueueMem<'static> {
    ///     m.alias() // a 'static view that outlives its owner
    /// }
    /// ```
    pub fn send_queue_stats(&self) -> SharedSqStats {
        SharedSqStats {
            used: self.sq.used(),
            published: self.sq.published(),
            tail: self.sq.tail(),
            size: self.sq.size(),
        }
    }

    /// `ib_post_send` from any thread. Posts `wrs` in order, rings the
    /// doorbell once if any was posted; on the first WR the SQ refuses,
    /// returns its index (`bad_wr`, the ones before it stay posted) with the
    /// same errors as [`Qp::post_send`]. WRs of concurrent callers
    /// interleave, each caller's in its own order. In ERROR the WRs are
    /// queued without a doorbell and complete as flushed.
    ///
    /// REG_MR WRs are admitted as for [`Qp::post_send`]
    /// ([`PostErrorKind::FastReg`]).
    ///
    /// # Interrupt handlers and other contexts that must not wait
    ///
    /// While the QP is healthy this never waits for anything. In ERROR the
    /// WRs are queued under the QP's spin lock (so they never race the
    /// poller's software flush); that lock is only *tried*, a bounded
    /// number of times ([`BUSY_TRIES`]): if it stays held — by a poller,
    /// `post_recv`, another poster, or code this core interrupted — the call
    /// returns [`PostErrorKind::Busy`] with nothing from `bad_wr` on posted,
    /// instead of spinning without bound (which would deadlock an interrupt
    /// handler against the code it interrupted). Callers that may wait
    /// retry from `bad_wr`. So `post_send` may be called from
    /// an interrupt handler. (`post_recv`, `state` and [`Cq::poll_shared`]
    /// do wait for the lock: not from an interrupt handler that may have
    /// interrupted a holder.)
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        if !self.alive {
            return Err(PostError { bad_wr: 0, kind: PostErrorKind::Destroyed });
        }
        let ok = self.dev.admit_fast_regs(wrs);
        let head = wrs.get(..ok).unwrap_or(wrs);
        if !head.is_empty() {
            // The uk hot path (one-SGE shapes) plus one doorbell, unless
            // the QP is in error (`PostGate`, loom-modelled in `uk::mp`).
            let r = match self.gate.lock_free(
                || self.dev.qp_in_error(self.id),
                || self.sq.post_send(self.dev.regs(), QpKind::Rc, head),
            ) {
                Some(r) => r,
                // In error (or being flushed): a removed device or a dead
                // CQ takes nothing more (as `Qp::post_send`); otherwise the
                // WRs are queued for the software flush.
                None => {
                    super::qp::refuse_in_error(self.dev, self.id)?;
                    match self.try_lock_bounded() {
                        Some(_guard) => self.post_queued(head),
                        None => return Err(PostError { bad_wr: 0, kind: PostErrorKind::Busy }),
                    }
                }
            };
            r.map_err(|e| PostError { bad_wr: e.bad_wr, kind: PostErrorKind::Sq(e.kind) })?;
        }
        if ok < wrs.len() {
            return Err(PostError { bad_wr: ok, kind: PostErrorKind::FastReg });
        }
        Ok(())
    }

    /// The QP's lock for a post in ERROR: tried [`BUSY_TRIES`] times, never
    /// waited for without bound (a holder this core interrupted would never
    /// let go).
    fn try_lock_bounded(&self) -> Option<spin::MutexGuard<'_, InnerQp<'d, H, B>>> {
        for _ in 0..BUSY_TRIES {
            if let Some(g) = self.inner.try_lock() {
                return Some(g);
            }
            core::hint::spin_loop();
        }
        None
    }

    /// Posts in order without a doorbell (the QP is in ERROR).
    fn post_queued(&self, wrs: &[SendWr<'_>]) -> Result<(), crate::uk::PostSendError> {
        for (i, wr) in wrs.iter().enumerate() {
            self.sq
                .post(&sq_post_from_wr(wr, QpKind::Rc))
                .map_err(|kind| crate::uk::PostSendError { bad_wr: i, kind })?;
        }
        Ok(())
    }

    /// Whether the software flush may retire this QP's SQ now: no lock-free
    /// post is between reserve and publish. Called with the lock held.
    /// Whether this QP belongs to `cq`'s device ([`VerbsError::Invalid`]
    /// "QP of another device" otherwise; issue #28 item 6).
    pub(super) fn check_device(&self, cq: &Cq<'d, H, B>) -> Result<(), VerbsError> {
        cq.device().own(self.dev, &"QP of another device")
    }

    pub(super) fn may_flush(&self) -> bool {
        self.gate.may_flush()
    }

    /// The locked inside, for [`super::CqPoller`].
    pub(super) fn lock_inner(&self) -> spin::MutexGuard<'_, InnerQp<'d, H, B>> {
        self.inner.lock()
    }

    /// `ib_post_recv` (takes the QP lock).
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.inner.lock().post_recv(wrs)
    }

    /// `ib_modify_qp`, as [`Qp::modify`].
    pub fn modify(&mut self, attr: &QpAttr) -> Result<(), VerbsError> {
        self.inner.get_mut().modify(attr)
    }

    /// `ib_destroy_qp`, as [`Qp::destroy`]; afterwards posts fail with
    /// `Destroyed`. Memory is freed when the object is dropped.
    pub fn destroy(&mut self) -> Result<(), VerbsError> {
        let r = self.inner.get_mut().destroy();
        self.alive = self.inner.get_mut().alive();
        r
    }
}

impl<'d, H: Hal, B: Bar + Clone> Cq<'d, H, B> {
    /// `ib_poll_cq` for a CQ used by shared QPs: as [`Cq::poll`] (every WR
    /// completes exactly once, flush included), with `qps` the shared QPs on
    /// this CQ. Each is locked for the duration of the call (a QP listed
    /// twice is taken once), in an order that does not depend on the
    /// caller's (by address), so pollers listing the same QPs in different
    /// orders cannot deadlock (issue #12). Safe to run while other threads
    /// post; the software flush of a QP in error waits (for a later poll)
    /// until no lock-free post is in progress on it.
    ///
    /// Refused with [`VerbsError::Invalid`] ("QP of another device"),
    /// before anything is locked or consumed, when a listed QP belongs to
    /// another device: QP numbers and completion contexts are per device,
    /// so its lookups would take this device's completions. A QP of this
    /// device that does not complete to this CQ is accepted (and only
    /// locked): no CQE of this CQ names it, and its software flush covers
    /// only the sides on this CQ (none).
    pub fn poll_shared<const N: usize>(
        &mut self,
        qps: [&SharedQp<'d, H, B>; N],
        wc: &mut [WorkCompletion],
    ) -> Result<usize, VerbsError> {
        for q in &qps {
            q.check_device(self)?;
        }
        let addr = |i: usize| qps.get(i).map_or(0, |q| core::ptr::from_ref(*q) as usize);
        let mut order: [usize; N] = core::array::from_fn(|i| i);
        order.sort_unstable_by_key(|&i| addr(i));
        let mut slots: [Option<spin::MutexGuard<'_, InnerQp<'d, H, B>>>; N] =
            core::array::from_fn(|_| None);
        let mut prev = None;
        for &i in &order {
            let (Some(q), a) = (qps.get(i), addr(i)) else { continue };
            // Sorted by address: a QP listed twice is adjacent to itself.
            if prev == Some(a) {
                continue;
            }
            prev = Some(a);
            if let Some(s) = slots.get_mut(i) {
                *s = Some(q.inner.lock());
            }
        }
        Ok(self.poll_slots(&mut slots, wc, |qpn| {
            qps.iter().find(|q| q.id == qpn).is_none_or(|q| q.may_flush())
        }))
    }
}

/// The `rw` layer posts through a shared QP from any thread
/// (`rdma_rw_ctx_post` on `&SharedQp`): a chain stays in order, WRs of
/// other threads may interleave with it.
impl<H: Hal, B: Bar + Clone> crate::rw::PostSend for &SharedQp<'_, H, B> {
    type Error = PostErrorKind;
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), (usize, PostErrorKind)> {
        SharedQp::post_send(self, wrs).map_err(|e| (e.bad_wr, e.kind))
    }

    /// Writes the page list into the MR's PBL (level-1 run or level-2
    /// leaves) on this QP's device.
    unsafe fn map_mr_pages(
        &mut self,
        mr: &crate::rw::FrMr,
        pages: &[u64],
    ) -> Result<(), crate::rw::RwError> {
        // SAFETY: `pages` carries this method's contract, which is
        // `write_fr_pages`' whole contract (it checks `mr` itself).
        unsafe { self.dev.write_fr_pages(mr, pages) }.map_err(|_| crate::rw::RwError::MapFailed)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::verbs::QpInitAttr;
    use crate::wr::{SendFlags, WrOpcode};
    use core::sync::atomic::{AtomicBool, Ordering};

    /// Issue #12: in ERROR, `post_send` on a shared QP whose lock is held —
    /// here by this very thread, as when an interrupt handler posts on the
    /// core of a poller it interrupted — returns `Busy` instead of spinning
    /// forever. A watchdog aborts the process if it hangs (bounded).
    #[test]
    fn post_in_error_with_the_lock_held_is_busy_not_a_deadlock() {
        static DONE: AtomicBool = AtomicBool::new(false);
        std::thread::spawn(|| {
            for _ in 0..600 {
                std::thread::sleep(std::time::Duration::from_millis(100));
                if DONE.load(Ordering::Acquire) {
                    return;
                }
            }
            std::eprintln!("post_send on a shared QP in ERROR hung on its own lock");
            std::process::abort();
        });
        let dev = super::super::model_device(crate::res::Profile::SMALL);
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(16).unwrap();
        let cap = super::super::small_cap();
        let mut qp =
            dev.create_shared_qp(&pd, &mut QpInitAttr { send_cq: &cq, recv_cq: &cq, cap }).unwrap();
        qp.modify(&QpAttr::new(QpState::Error)).unwrap();
        let wr =
            SendWr { wr_id: 1, opcode: WrOpcode::Send, flags: SendFlags::SIGNALED, sg_list: &[] };
        {
            let _held = qp.inner.lock();
            assert_eq!(
                qp.post_send(&[wr]),
                Err(PostError { bad_wr: 0, kind: PostErrorKind::Busy })
            );
        }
        // Lock free again: queued for the flush as before.
        assert_eq!(qp.post_send(&[wr]), Ok(()));
        DONE.store(true, Ordering::Release);
        drop(qp);
        drop(cq);
        drop(pd);
    }
}
