//! Asynchronous events: the polled AEQ, decoded (by
//! [`crate::cqp::decode::Aeqe`]) into typed events, with Linux's actions for
//! RoCE (spec control-path §8.2; hw.c: irdma_process_aeq): a QP error moves
//! the QP to ERROR and flushes it so every outstanding WR completes.
//!
//! The event types are defined with the device that queues them
//! (`device/events.rs`) and re-exported here.

use core::sync::atomic::Ordering;

use irdma_hal::barrier::dma_rmb;
use irdma_hal::cqp::{AEQE_BYTES, aeqe};
use irdma_hal::{Bar, Hal, regs};

use crate::cqp::decode::Aeqe;
use crate::device::Device;
use crate::device::events::aeq_next_word;
pub use crate::device::events::{AsyncEvent, AsyncEventKind, PENDING_EVENTS};
use crate::uk::cq::ae_to_flush_code;

/// AE codes that are access errors (spec §8.2 table, "event ACCESS_ERR").
fn is_access(code: u16) -> bool {
    matches!(code, 0x0102..=0x010A | 0x011C | 0x020D)
}

/// AE codes Linux ignores for RoCE or never routes to a QP/CQ (spec §8.2).
fn is_ignored(code: u16) -> bool {
    matches!(code, 0x050C | 0x0603 | 0x0520 | 0x0901)
}

/// Most AEQEs one call consumes (bounds the loop whatever the device writes).
const MAX_PER_CALL: u32 = 4096;

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// Reports up to `out.len()` asynchronous events and returns how many
    /// were written: first those a CQ poll already consumed and acted on
    /// (oldest first, see [`crate::verbs::Cq::poll`]), then new AEQEs,
    /// consumed while VALID matches the expected polarity, their number
    /// written to AEQALLOC (hw.c: irdma_process_aeq; ctrl.c:
    /// irdma_sc_repost_aeq_entries). QP error events move the QP to ERROR
    /// and flush it (MODIFY_QP, FLUSH_WQES with the AE's flush code,
    /// user.h: irdma_ae_to_qp_err_code) before returning; the QP's next
    /// `post_*`/`poll` sees the error.
    ///
    /// Calling it is optional for completions: [`crate::verbs::Cq::poll`]
    /// services the AEQ itself when its ring is empty. Call it to learn
    /// about events (at least every [`PENDING_EVENTS`] events, or the oldest
    /// reports are dropped).
    pub fn poll_async_events(&self, out: &mut [AsyncEvent]) -> usize {
        let mut aeq = self.aeq.lock();
        let Some(ring) = aeq.as_mut() else { return 0 };
        let mut n = 0;
        while n < out.len() {
            let Some(ev) = ring.pending.pop_front() else { break };
            if let Some(slot) = out.get_mut(n) {
                *slot = ev;
                n += 1;
            }
        }
        if n < out.len() {
            // Asked only while `out` has room, so no report is lost.
            self.consume_aeq(ring, |ev| match out.get_mut(n) {
                Some(slot) => {
                    *slot = ev;
                    n += 1;
                    n < out.len()
                }
                None => false,
            });
        }
        n
    }

    /// Called by a CQ poll that found its ring empty: if the AEQ holds an
    /// entry ([`Device::aeq_may_hold_entry`], no lock; then a try-lock and
    /// the same test under it),
    /// consumes every pending AEQE, acts on it as
    /// [`Device::poll_async_events`] does (QP to ERROR + flush) and keeps
    /// the report for the caller. Returns whether anything was consumed.
    /// Never waits for the AEQ lock: if another thread holds it, that
    /// thread is processing the AEQ.
    pub(crate) fn service_async_events(&self) -> bool {
        // Nothing at the consumer's head: no lock taken (the common case of
        // a CQ poll that found its ring empty).
        if !self.aeq_may_hold_entry() {
            return false;
        }
        let Some(mut aeq) = self.aeq.try_lock() else { return false };
        let Some(ring) = aeq.as_mut() else { return false };
        let base = ring.cons.head as usize * AEQE_BYTES;
        let w8 = ring.ring.read_u64(base + 8).unwrap_or(0);
        if Aeqe::decode(&[0, w8], ring.cons.polarity).is_none() {
            return false;
        }
        let mut lost = 0u32;
        let mut pend = core::mem::take(&mut ring.pending);
        let consumed = self.consume_aeq(ring, |ev| {
            if pend.is_full() {
                let _ = pend.pop_front();
                lost = lost.saturating_add(1);
            }
            let _ = pend.push_back(ev);
            true
        });
        ring.pending = pend;
        ring.pending_lost = ring.pending_lost.saturating_add(lost);
        consumed != 0
    }

    /// Whether the AEQE at the consumer's head may be valid: one relaxed
    /// load of where the consumer stands (`aeq_next`, written under the
    /// AEQ lock) and one atomic load of that entry's VALID word, no lock
    /// (the VALID-bit test of hw.c: irdma_process_aeq / ctrl.c:
    /// irdma_sc_get_next_aeqe). A `true` is re-checked under the lock by
    /// [`Device::service_async_events`]. A stale `aeq_next` (another thread
    /// consumed meanwhile) points at an entry already consumed, which still
    /// reads valid (a harmless `true`), unless the device has since
    /// rewritten it a whole ring later; then this poll misses the entry and
    /// a later one sees it (the consumer's store of its new position
    /// becomes visible to later loads; a thread that consumed the AEQ
    /// itself always sees its own). An index past the ring reads 0; without
    /// an AEQ (before probe created it, after teardown) the view is empty
    /// and `aeq_next` is 1 (polarity 1), so this is `false`.
    #[inline(always)]
    pub(crate) fn aeq_may_hold_entry(&self) -> bool {
        let next = self.aeq_next.load(Ordering::Relaxed);
        let w8 = self.aeq_view.read((next >> 1) as usize);
        // VALID (bit 63) equals the polarity in bit 0 of `next`.
        ((w8 >> aeqe::VALID.hi()) ^ next) & 1 == 0
    }

    /// Reports of events a CQ poll consumed that were dropped because
    /// [`PENDING_EVENTS`] were already waiting for
    /// [`Device::poll_async_events`].
    pub fn async_events_lost(&self) -> u32 {
        self.aeq.lock().as_ref().map_or(0, |a| a.pending_lost)
    }

    /// Consumes valid AEQEs (at most [`MAX_PER_CALL`]), acts on each and
    /// hands its report to `sink`, which returns whether to go on; writes
    /// AEQALLOC. Returns how many were consumed.
    fn consume_aeq(
        &self,
        ring: &mut crate::device::AeqRing<H>,
        mut sink: impl FnMut(AsyncEvent) -> bool,
    ) -> u32 {
        let mut consumed = 0u32;
        while consumed < MAX_PER_CALL {
            let base = ring.cons.head as usize * AEQE_BYTES;
            let w8 = ring.ring.read_u64(base + 8).unwrap_or(0);
            let Some(_) = Aeqe::decode(&[0, w8], ring.cons.polarity) else { break };
            dma_rmb();
            let w0 = ring.ring.read_u64(base).unwrap_or(0);
            let Some(e) = Aeqe::decode(&[w0, w8], ring.cons.polarity) else { break };
            ring.cons.advance();
            consumed += 1;
            if e.overflow {
                ring.overflowed = true;
            }
            let ev = self.handle_ae(&e);
            if !sink(ev) {
                break;
            }
        }
        if consumed != 0 {
            self.aeq_next
                .store(aeq_next_word(ring.cons.head, ring.cons.polarity), Ordering::Relaxed);
            self.bar.write32(regs::AEQALLOC, consumed);
        }
        consumed
    }

    fn handle_ae(&self, e: &Aeqe) -> AsyncEvent {
        self.record(crate::flight::FlightEvent::AsyncEvent {
            ae_code: e.ae_id,
            ae_src: e.ae_src,
            id: e.qp_cq_id,
        });
        let mut ev = AsyncEvent {
            kind: AsyncEventKind::Ignored,
            ae_code: e.ae_id,
            ae_src: e.ae_src,
            id: e.qp_cq_id,
            moved_to_error: false,
        };
        if e.overflow {
            ev.kind = AsyncEventKind::AeqOverflow;
            return ev;
        }
        if is_ignored(e.ae_id) {
            return ev;
        }
        if e.qp {
            if e.ae_id == 0x0900 {
                ev.kind = AsyncEventKind::QpSuspended;
                return ev;
            }
            // Only QPs the driver created (AEs for unknown QPs are dropped).
            let rec = {
                let res = self.res.lock();
                res.ids.as_ref().and_then(|i| i.qp_rec.get(e.qp_cq_id as usize).copied())
            };
            let Some(rec) = rec.filter(|r| r.live) else { return ev };
            ev.kind = if is_access(e.ae_id) {
                AsyncEventKind::QpAccessError
            } else {
                AsyncEventKind::QpFatal
            };
            if !self.qp_in_error(e.qp_cq_id) {
                // The AE's code goes to the queue AESRC names; the other
                // queue's WRs did nothing wrong and get the general flush
                // code (hw.c: irdma_set_flush_fields sets sq_flush_code /
                // rq_flush_code from the AE's SQ/RQ source; irdma_flush_wqes
                // uses the code only for those). No queue named: both.
                let c = ae_to_flush_code(e.ae_id);
                let g = crate::uk::cq::flush_code::GENERAL;
                let code = match (e.sq, e.rq) {
                    (true, false) => (c, g),
                    (false, true) => (g, c),
                    _ => (c, c),
                };
                ev.moved_to_error =
                    self.qp_to_error(e.qp_cq_id, rec.ctx_pa, rec.shadow_pa, code).is_ok();
            }
            return ev;
        }
        if e.cq {
            ev.kind = AsyncEventKind::CqError;
            // The two codes Linux turns into IB_EVENT_CQ_ERR (spec
            // control-path §8.2 table): the CQ cannot be used any more.
            if matches!(e.ae_id, 0x0203 | 0x0702) {
                self.cq_failed(e.qp_cq_id);
            }
        }
        ev
    }

    /// Whether the AEQ reported an overflow (Linux requests a reset then).
    pub fn aeq_overflowed(&self) -> bool {
        self.aeq.lock().as_ref().is_some_and(|a| a.overflowed)
    }
}
