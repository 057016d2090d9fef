//! [`CqPoller`]: `ib_poll_cq` without passing the QPs on every poll. The
//! shared QPs of a CQ are registered once; [`CqPoller::poll`] resolves the
//! QP of each completion itself. See ARCHITECTURE.md, "Polling a CQ
//! without listing its QPs".

use irdma_hal::{Bar, Hal};

use super::cq::Cq;
use super::error::Quantity;
use super::error::VerbsError;
use super::shared::SharedQp;
use crate::Phrase;
use crate::wr::WorkCompletion;

/// A CQ together with the (up to `N`) shared QPs registered on it, polled
/// as `ib_poll_cq`: `poller.poll(&mut wc)`.
///
/// The poller borrows the CQ exclusively and each registered QP shared, so
/// other threads keep posting through `&SharedQp` (`SharedQp: Sync`) while
/// this one polls, and no registered QP can be destroyed (that needs
/// `&mut SharedQp`) while the poller lives: drop the poller first. A QP
/// destroyed with completions pending has them dropped by later polls, as
/// [`Cq::poll`] drops them.
///
/// Every WR completes exactly once, flushes included: a poll runs the same
/// code as [`Cq::poll_shared`] over the registered QPs. A completion of a
/// live QP of this CQ that is not registered (a plain [`super::Qp`], or a
/// shared QP not registered) stops the poll and is kept, named by
/// [`CqPoller::unlisted_qp`].
///
/// `Send`/`Sync` are the auto traits: the poller is `Send` when `&mut Cq`
/// and `&SharedQp` are (the CQ is `Send`, `SharedQp` is `Sync`), so it may
/// be moved to the polling thread; nothing in it is shared between threads
/// except through `SharedQp`'s own locks.
pub struct CqPoller<'c, 'q, 'd, H: Hal, B: Bar + Clone, const N: usize> {
    cq: &'c mut Cq<'d, H, B>,
    /// Registered QPs, sorted by address (the order `poll_shared` locks in,
    /// so two pollers never take two QP locks in opposite orders).
    qps: heapless::Vec<&'q SharedQp<'d, H, B>, N>,
}

impl<'d, H: Hal, B: Bar + Clone> Cq<'d, H, B> {
    /// A poller for this CQ with room for `N` registered shared QPs
    /// ([`CqPoller`]).
    pub fn poller<'c, 'q, const N: usize>(&'c mut self) -> CqPoller<'c, 'q, 'd, H, B, N> {
        CqPoller { cq: self, qps: heapless::Vec::new() }
    }
}

impl<'c, 'q, 'd, H: Hal, B: Bar + Clone, const N: usize> CqPoller<'c, 'q, 'd, H, B, N> {
    /// Registers `qp`, a live shared QP completing (send or receive side)
    /// to this CQ. Registering it again does nothing. Refused:
    /// [`VerbsError::Invalid`] if `qp` belongs to another device, is
    /// destroyed or does not use this CQ, [`VerbsError::AboveLimit`] if `N`
    /// QPs are registered.
    pub fn register(&mut self, qp: &'q SharedQp<'d, H, B>) -> Result<(), VerbsError> {
        qp.check_device(self.cq)?;
        if !self.cq.device().qp_uses_cq(qp.qp_num(), self.cq.id()) {
            return Err(VerbsError::Invalid { what: Phrase::new(&"QP not on this CQ") });
        }
        let addr = |q: &SharedQp<'d, H, B>| core::ptr::from_ref(q) as usize;
        let at = match self.qps.binary_search_by_key(&addr(qp), |q| addr(q)) {
            Ok(_) => return Ok(()),
            Err(at) => at,
        };
        self.qps.insert(at, qp).map_err(|_| VerbsError::AboveLimit {
            what: Quantity::RegisteredQPs,
            requested: u32::try_from(N).unwrap_or(u32::MAX).saturating_add(1),
            max: u32::try_from(N).unwrap_or(u32::MAX),
        })
    }

    /// Registered QPs.
    pub fn len(&self) -> usize {
        self.qps.len()
    }

    /// Whether no QP is registered.
    pub fn is_empty(&self) -> bool {
        self.qps.is_empty()
    }

    /// `ib_poll_cq`: fills `wc` and returns how many, resolving each
    /// completion's QP among the registered ones. Exactly [`Cq::poll_shared`]
    /// with the registered QPs: each is locked (in address order) for the
    /// call, so a `post_recv` on one of them waits for the poll; lock-free
    /// `post_send`s do not.
    pub fn poll(&mut self, wc: &mut [WorkCompletion]) -> usize {
        let qps = &self.qps;
        let mut slots: [Option<_>; N] = core::array::from_fn(|_| None);
        for (s, q) in slots.iter_mut().zip(qps.iter()) {
            *s = Some(q.lock_inner());
        }
        self.cq.poll_slots(&mut slots, wc, |qpn| {
            qps.iter().find(|q| q.qp_num() == qpn).is_none_or(|q| q.may_flush())
        })
    }

    /// As [`Cq::unlisted_qp`], after [`CqPoller::poll`].
    pub fn unlisted_qp(&self) -> Option<u32> {
        self.cq.unlisted_qp()
    }
}
