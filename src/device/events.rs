//! The asynchronous-event types the device queues for its caller
//! ([`AsyncEvent`], re-exported as `aeq::AsyncEvent`) and the AEQ consumer
//! position word. The AEQ servicing itself (`crate::aeq`, `impl Device`) sits
//! beside the device and imports these; the device imports nothing from it
//! (issue #29).

use irdma_hal::cqp::AEQE_BYTES;

/// The value of `Device::aeq_next` for a consumer at entry `head` that
/// expects VALID = `polarity`: the qword index of that entry's VALID word
/// (offset 8 of a 16-byte AEQE, spec control-path §8.2), shifted left by
/// one, the polarity in bit 0.
pub(crate) fn aeq_next_word(head: u32, polarity: bool) -> u64 {
    let qword = u64::from(head) * (AEQE_BYTES as u64 / 8) + 1;
    (qword << 1) | u64::from(polarity)
}

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

/// Events a CQ poll may consume and act on before the caller reads them
/// with [`Device::poll_async_events`](super::Device::poll_async_events); beyond this the oldest are dropped
/// (counted by [`Device::async_events_lost`](super::Device::async_events_lost)). The actions (QP to ERROR,
/// flush) are never dropped, only the report.
pub const PENDING_EVENTS: usize = 32;
