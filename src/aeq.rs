//! Asynchronous events: the polled AEQ, decoded (by
//! [`crate::cqp::decode::Aeqe`]) into typed events, with Linux's actions for
//! RoCE (spec control-path §8.2; hw.c: irdma_process_aeq): a QP error moves
//! the QP to ERROR and flushes it so every outstanding WR completes.

use irdma_hal::barrier::dma_rmb;
use irdma_hal::cqp::AEQE_BYTES;
use irdma_hal::{Bar, Hal, regs};

use crate::cqp::decode::Aeqe;
use crate::device::Device;
use crate::uk::cq::ae_to_flush_code;

/// What an asynchronous event means to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AsyncEventKind {
    /// A protection error on a QP's access (AMP_* codes 0x0102–0x010A,
    /// 0x011C, and IB_REMOTE_ACCESS_ERROR 0x020D): `IB_EVENT_QP_ACCESS_ERR`.
    QpAccessError,
    /// Any other error of a QP ("QP error path" codes of spec §8.2):
    /// `IB_EVENT_QP_FATAL` / `IB_EVENT_QP_REQ_ERR`.
    QpFatal,
    /// The SQ drained after RTS → SQD (0x0900).
    QpSuspended,
    /// A CQ error (0x0203 CQ_OPERATION_ERROR, 0x0702 LCE_CQ_CATASTROPHIC):
    /// `IB_EVENT_CQ_ERR`.
    CqError,
    /// The AEQ overflowed (Linux then requests a function reset).
    AeqOverflow,
    /// An event Linux ignores or drops for RoCE (e.g. 0x050C, 0x0603,
    /// 0x0520), or one for a QP the driver does not know.
    Ignored,
}

/// One asynchronous event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AsyncEvent {
    /// Classification.
    pub kind: AsyncEventKind,
    /// The AE code (user.h: IRDMA_AE_*).
    pub ae_code: u16,
    /// AESRC.
    pub ae_src: u8,
    /// QP or CQ id.
    pub id: u32,
    /// The driver moved the QP to ERROR (MODIFY_QP + FLUSH_WQES) for it.
    pub moved_to_error: bool,
}

/// AE codes that are access errors (spec §8.2 table, "event ACCESS_ERR").
fn is_access(code: u16) -> bool {
    matches!(code, 0x0102..=0x010A | 0x011C | 0x020D)
}

/// AE codes Linux ignores for RoCE or never routes to a QP/CQ (spec §8.2).
fn is_ignored(code: u16) -> bool {
    matches!(code, 0x050C | 0x0603 | 0x0520 | 0x0901)
}

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// Consumes the pending AEQEs (while VALID matches the expected polarity),
    /// writes their number to AEQALLOC (hw.c: irdma_process_aeq; ctrl.c:
    /// irdma_sc_repost_aeq_entries), and reports up to `out.len()` of them;
    /// returns how many were written to `out`. QP error events move the QP
    /// to ERROR and flush it (MODIFY_QP, FLUSH_WQES with the AE's flush code,
    /// user.h: irdma_ae_to_qp_err_code) before returning; the QP's next
    /// `post_*`/`poll` sees the error.
    pub fn poll_async_events(&self, out: &mut [AsyncEvent]) -> usize {
        let mut n = 0;
        let mut consumed = 0u32;
        let mut aeq = self.aeq.lock();
        let Some(ring) = aeq.as_mut() else { return 0 };
        while n < out.len() {
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
            if let Some(slot) = out.get_mut(n) {
                *slot = ev;
                n += 1;
            }
        }
        if consumed != 0 {
            self.bar.write32(regs::AEQALLOC, consumed);
        }
        n
    }

    fn handle_ae(&self, e: &Aeqe) -> AsyncEvent {
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
                let code = ae_to_flush_code(e.ae_id);
                ev.moved_to_error =
                    self.qp_to_error(e.qp_cq_id, rec.ctx_pa, rec.shadow_pa, code).is_ok();
            }
            return ev;
        }
        if e.cq {
            ev.kind = AsyncEventKind::CqError;
        }
        ev
    }

    /// Whether the AEQ reported an overflow (Linux requests a reset then).
    pub fn aeq_overflowed(&self) -> bool {
        self.aeq.lock().as_ref().is_some_and(|a| a.overflowed)
    }
}
