//! Per-QP and per-CQ state the control path sets and the data path reads
//! (atomics: ERROR flags, bound CQs, completion contexts, dead CQs).

use super::*;

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// Whether the control path moved QP `qpn` to ERROR (data path: atomic).
    pub fn qp_in_error(&self, qpn: u32) -> bool {
        self.qp_err.get(qpn as usize).is_some_and(|f| f.load(Ordering::Acquire))
    }

    /// Records (or, with `None`, forgets) the CQs live QP `qpn` completes
    /// to and its completion context.
    /// (CQ ids are below `MAX_CQS`, so each fits its 16 bits.)
    pub(crate) fn bind_qp_cqs(&self, qpn: u32, cqs: Option<(u32, u32, u64)>) {
        if let Some(slot) = self.qp_cqs.get(qpn as usize) {
            let id = |c: u32| u64::from(c.min(0xfffe)) + 1;
            let v = cqs.map_or(0, |(s, r, ctx)| ctx >> 32 << 32 | id(s) << 16 | id(r));
            slot.store(v, Ordering::Release);
        }
    }

    /// A fresh completion context for a QP numbered `qpn`: the number in
    /// the low 32 bits, a creation count (never 0) above.
    pub(crate) fn next_compl_ctx(&self, qpn: u32) -> u64 {
        let g = self.ctx_gen.fetch_add(1, Ordering::Relaxed).wrapping_add(1).max(1);
        u64::from(g) << 32 | u64::from(qpn)
    }

    /// The number of the live QP whose completion context is `ctx`, if it
    /// completes to CQ `cq`.
    pub(crate) fn live_ctx_on_cq(&self, ctx: u64, cq: u32) -> Option<u32> {
        let qpn = ctx as u32;
        let v = self.qp_cqs.get(qpn as usize)?.load(Ordering::Acquire);
        (v >> 32 == ctx >> 32 && uses_cq(v, cq)).then_some(qpn)
    }

    /// Whether live QP `qpn` completes to CQ `cq`.
    pub(crate) fn qp_uses_cq(&self, qpn: u32, cq: u32) -> bool {
        let v = self.qp_cqs.get(qpn as usize).map_or(0, |f| f.load(Ordering::Acquire));
        uses_cq(v, cq)
    }

    #[inline(never)]
    pub(crate) fn set_qp_error(&self, qpn: u32, on: bool) {
        if let Some(f) = self.qp_err.get(qpn as usize)
            && f.swap(on, Ordering::AcqRel) != on
        {
            if on {
                self.qps_in_error.fetch_add(1, Ordering::AcqRel);
            } else {
                self.qps_in_error.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Whether any QP's error flag is set.
    pub(crate) fn any_qp_in_error(&self) -> bool {
        self.qps_in_error.load(Ordering::Acquire) != 0
    }

    /// Whether the device reported CQ `cq` unusable (see
    /// [`crate::verbs::Cq::is_dead`]).
    pub(crate) fn cq_is_dead(&self, cq: u32) -> bool {
        let bit = 1u64 << (cq % 64);
        self.cq_dead.get((cq / 64) as usize).is_some_and(|w| w.load(Ordering::Acquire) & bit != 0)
    }

    /// Sets (a CQ error event) or clears (a new CQ got the id) CQ `cq`'s
    /// dead flag.
    pub(crate) fn set_cq_dead(&self, cq: u32, dead: bool) {
        let bit = 1u64 << (cq % 64);
        if let Some(w) = self.cq_dead.get((cq / 64) as usize) {
            if dead {
                w.fetch_or(bit, Ordering::AcqRel);
            } else {
                w.fetch_and(!bit, Ordering::AcqRel);
            }
        }
    }

    /// Whether live QP `qpn` completes to a dead CQ (send or receive).
    /// Asked only on the error path (a post to a QP in error).
    pub(crate) fn qp_on_dead_cq(&self, qpn: u32) -> bool {
        let v = self.qp_cqs.get(qpn as usize).map_or(0, |f| f.load(Ordering::Acquire));
        bound_cqs(v).into_iter().flatten().any(|c| self.cq_is_dead(c))
    }

    /// The device reported CQ `cq` unusable (AE 0x0203 CQ_OPERATION_ERROR
    /// or 0x0702 LCE_CQ_CATASTROPHIC; spec control-path §8.2, Linux raises
    /// IB_EVENT_CQ_ERR for both, hw.c: irdma_process_aeq): the CQ is marked
    /// dead, and every live QP completing to it (send or receive side) is
    /// moved to ERROR and flushed — through the CQP when it answers (the
    /// device then stops working on those QPs), in software in any case:
    /// its completions could not be written. The CQ's poll delivers what
    /// its ring already holds and then the software flush of those QPs;
    /// posts to them are refused ([`crate::verbs::PostErrorKind::CqDead`]).
    /// The caller destroys the QPs and the CQ and creates new ones.
    /// Unknown or free CQ ids are ignored.
    pub(crate) fn cq_failed(&self, cq: u32) {
        let live = {
            let res = self.res.lock();
            res.ids.as_ref().is_some_and(|i| i.cqs.is_in_use(cq))
        };
        if !live {
            return;
        }
        self.set_cq_dead(cq, true);
        for qpn in 0..MAX_QPS {
            if !self.qp_uses_cq(qpn, cq) {
                continue;
            }
            let rec = {
                let res = self.res.lock();
                res.ids.as_ref().and_then(|i| i.qp_rec.get(qpn as usize).copied())
            };
            let Some(rec) = rec.filter(|r| r.live) else { continue };
            let g = crate::uk::cq::flush_code::GENERAL;
            // Already in error: its flush (hardware or software) is under
            // way; the data path's software flush covers the rest.
            if !self.qp_in_error(qpn) {
                let _ = self.qp_to_error(qpn, rec.ctx_pa, rec.shadow_pa, (g, g));
            }
            // Whatever the CQP said, the queues on the dead CQ are flushed
            // in software (their hardware flush CQEs cannot be written).
            self.set_qp_error(qpn, true);
        }
    }
}

/// Whether a `qp_cqs` word names CQ `cq` as its send or receive CQ.
fn uses_cq(v: u64, cq: u32) -> bool {
    bound_cqs(v).contains(&Some(cq))
}

/// The send and receive CQ ids a `qp_cqs` slot holds (`bind_qp_cqs`: each
/// id + 1 in 16 bits, 0 = none), `None` for an empty slot.
fn bound_cqs(v: u64) -> [Option<u32>; 2] {
    let cq = |x: u64| (x & 0xffff).checked_sub(1).map(|c| c as u32);
    [cq(v >> 16), cq(v)]
}
