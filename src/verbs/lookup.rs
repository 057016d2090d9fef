//! CQ polls of shared QPs: the caller's list of locked QPs ([`QpSlot`]s)
//! that a poll resolves completions through (`Cq::poll_slots`, used by
//! `SharedQp::poll_shared`). Plain QPs are found through the device's table
//! instead (`table.rs`). Sits above the CQ and the QP it joins.

use core::marker::PhantomData;

use irdma_hal::{Bar, Hal};

use super::cq::Cq;
use super::qp::Qp;
use super::table::PollQps;
use crate::device::Device;
use crate::uk::{QpLookup, QpUk, SendQueue};
use crate::wr::WorkCompletion;

/// Something that may give access to a QP while a CQ is polled: the
/// locked inside of a shared QP. (A plain `Qp` is never a slot: its
/// completion half is reached only through the device's table, and its
/// own `uk` only posts.)
pub(super) trait QpSlot<'d, H: Hal, B: Bar + Clone, S: SendQueue> {
    /// The QP, if this slot holds one.
    fn qp(&mut self) -> Option<&mut Qp<'d, H, B, S>>;
}

/// Looks QPs up by completion context for [`crate::uk::poll_cq`].
struct Lookup<'x, 'd, H: Hal, B: Bar + Clone, S: SendQueue, Q: QpSlot<'d, H, B, S>, F> {
    qps: &'x mut [Q],
    dev: &'d Device<H, B>,
    cq: u32,
    /// QP number of a live QP of this CQ that was not passed, if the poll
    /// stopped at one of its CQEs.
    held: Option<u32>,
    /// Whether the software flush of a QP may run now.
    may_flush: F,
    _t: PhantomData<QpType<'d, H, B, S>>,
}

/// Names the QP type a [`Lookup`] resolves to (variance-neutral).
type QpType<'d, H, B, S> = fn() -> Qp<'d, H, B, S>;

impl<'d, H: Hal, B: Bar + Clone, S: SendQueue, Q: QpSlot<'d, H, B, S>, F> QpLookup<'static, S>
    for Lookup<'_, 'd, H, B, S, Q, F>
{
    fn lookup(&mut self, ctx: u64) -> Option<&mut QpUk<'static, S>> {
        self.qps
            .iter_mut()
            .filter_map(|q| q.qp())
            .find(|q| q.alive() && q.compl_ctx() == ctx)
            .map(|q| q.uk_mut())
    }

    fn lookup_fast(&mut self, ctx: u64, _sq: bool) -> Option<&mut QpUk<'static, S>> {
        self.qps
            .iter_mut()
            .filter_map(|q| q.qp())
            .find(|q| q.alive() && q.fast_compl_ctx() == ctx)
            .map(|q| q.uk_mut())
    }

    /// A live QP of this CQ with this completion context (its number in
    /// the low bits, see `create_qp_inner`) that was not listed.
    fn holds(&mut self, ctx: u64) -> bool {
        let live = self.dev.live_ctx_on_cq(ctx, self.cq);
        self.held = live;
        live.is_some()
    }
}

impl<'d, H: Hal, B: Bar + Clone, S: SendQueue, Q: QpSlot<'d, H, B, S>, F: Fn(u32) -> bool>
    PollQps<S> for Lookup<'_, 'd, H, B, S, Q, F>
{
    fn sync_errors(&mut self) {
        for q in self.qps.iter_mut().filter_map(|q| q.qp()) {
            q.sync_error();
        }
    }

    fn held(&self) -> Option<u32> {
        self.held
    }

    fn flush(&mut self, wc: &mut [WorkCompletion]) -> usize {
        let mut n = 0;
        for q in self.qps.iter_mut().filter_map(|q| q.qp()) {
            if !(self.may_flush)(q.qp_num()) {
                continue;
            }
            if let Some(rest) = wc.get_mut(n..) {
                n += q.flush_software(self.cq, rest);
            }
        }
        n
    }
}

impl<'d, H: Hal, B: Bar + Clone> Cq<'d, H, B> {
    /// A poll of a CQ of shared QPs, resolved among `qps` (locked by the
    /// caller); `may_flush(qp_num)` says whether the software flush of
    /// that QP may run now.
    pub(super) fn poll_slots<S: SendQueue, Q: QpSlot<'d, H, B, S>>(
        &mut self,
        qps: &mut [Q],
        wc: &mut [WorkCompletion],
        may_flush: impl Fn(u32) -> bool,
    ) -> usize {
        let mut look = Lookup {
            qps,
            dev: self.device(),
            cq: self.id(),
            held: None,
            may_flush,
            _t: PhantomData,
        };
        self.poll_with(&mut look, wc)
    }
}
