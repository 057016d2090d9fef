//! The type of the device's table of plain QPs' completion halves
//! ([`Device::qp_compl`](super::Device::qp_compl), one slot per QP number).
//! The verbs build, register and poll them (`verbs::table`); the type sits
//! here, with the table that holds it, so the device imports nothing from
//! the verbs (issue #29).

use core::cell::UnsafeCell;

use crate::uk::QpUk;
use crate::uk::link::{QpLink, Slot};

/// One plain QP's completion half, in host memory the QP owns (never
/// moved, never given to the device).
pub(crate) struct QpCompl {
    /// The positions both halves publish.
    pub(crate) link: QpLink,
    pub(crate) qpn: u32,
    /// The QP's completion context (`Device::next_compl_ctx`).
    pub(crate) ctx: u64,
    pub(crate) send_cq: u32,
    pub(crate) recv_cq: u32,
    /// The consumer half. Reached only by a poller holding the QP's
    /// [`Slot`] in [`Device::qp_compl`](super::Device::qp_compl) (so by one
    /// thread at a time), and by nobody else while it is registered; the
    /// only code that reaches it is `verbs::table`.
    pub(crate) uk: UnsafeCell<QpUk<'static>>,
}

// SAFETY: `uk` is only reached under the slot lock (one thread at a time,
// with acquire/release on the lock); everything else is atomics or
// immutable.
unsafe impl Sync for QpCompl {}

/// The table slot type (one per QP number).
pub(crate) type ComplSlot = Slot<QpCompl>;
