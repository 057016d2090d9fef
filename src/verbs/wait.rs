//! Sleeping on a CQ: the blocking [`Cq::wait`] and the `async`
//! [`Cq::completion`], both woken by `Device::handle_interrupt` (see
//! `crate::irq` for the design and sources).

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};

use irdma_hal::{Bar, Hal};

use crate::irq::CqIrq;
use crate::uk::sync::Ordering;
use crate::verbs::Cq;
use crate::wr::WorkCompletion;

impl<'d, H: Hal, B: Bar + Clone> Cq<'d, H, B> {
    fn irq_slot(&self) -> Option<&'d CqIrq> {
        self.device().irq.cq(self.id())
    }

    /// Blocks until this CQ has completions and returns how many were
    /// written to `wc`, halting the core in between (firmware without an
    /// executor). Each round: poll; if empty, arm ([`Cq::req_notify`],
    /// next completion) and, if a CQE landed meanwhile, poll again; else
    /// call `halt(woken)`. `halt` must return once `woken()` is true (an
    /// interrupt reached [`Device::handle_interrupt`](crate::device::Device::handle_interrupt) for this CQ); it may
    /// return earlier. On x86_64 firmware that calls this with interrupts
    /// disabled: `|woken| if woken() { sti() } else { sti_hlt() }` and
    /// `cli()` after (the `sti; hlt` pair is atomic, so an interrupt
    /// between the check and the halt still ends the halt); on aarch64
    /// `wfi` with the interrupt masked by PSTATE.I the same way.
    ///
    /// Returns 0 without halting when `wc` is empty, the CQ is destroyed or
    /// the device is gone and nothing is left to deliver.
    pub fn wait(
        &mut self,
        wc: &mut [WorkCompletion],
        mut halt: impl FnMut(&dyn Fn() -> bool),
    ) -> usize {
        if wc.is_empty() {
            return 0;
        }
        loop {
            let n = self.poll(wc);
            if n > 0 {
                return n;
            }
            if !self.is_alive() || self.device().is_gone() {
                return 0;
            }
            let slot = self.irq_slot();
            if let Some(s) = slot {
                s.event.store(false, Ordering::Release);
            }
            // The poll-after-arm rule (spec A.5): a CQE that arrived between
            // the poll above and the arm produces no CEQE; only this check
            // finds it.
            if self.req_notify(false) {
                continue;
            }
            match slot {
                Some(s) => halt(&|| s.event.load(Ordering::Acquire)),
                None => halt(&|| true),
            }
        }
    }

    /// An `async` completion: resolves to the number of completions
    /// written to `wc` (at least one), woken from
    /// [`Device::handle_interrupt`](crate::device::Device::handle_interrupt) through this CQ's waker. For a no_std
    /// executor (e.g. embassy); the executor's `Waker` must be callable from
    /// wherever the handler runs.
    pub fn completion<'a>(
        &'a mut self,
        wc: &'a mut [WorkCompletion],
    ) -> CqCompletion<'a, 'd, H, B> {
        CqCompletion { cq: self, wc }
    }
}

/// The future of [`Cq::completion`].
pub struct CqCompletion<'a, 'd, H: Hal, B: Bar + Clone> {
    cq: &'a mut Cq<'d, H, B>,
    wc: &'a mut [WorkCompletion],
}

impl<H: Hal, B: Bar + Clone> Future for CqCompletion<'_, '_, H, B> {
    type Output = usize;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
        let this = self.get_mut();
        if this.wc.is_empty() {
            return Poll::Ready(0);
        }
        // Two rounds at most (bounded work per poll).
        for _ in 0..2 {
            let n = this.cq.poll(this.wc);
            if n > 0 {
                return Poll::Ready(n);
            }
            if !this.cq.is_alive() || this.cq.device().is_gone() {
                return Poll::Ready(0);
            }
            // The waker goes in before the arm, so a CEQE consumed right
            // after the arm finds it.
            let Some(slot) = this.cq.irq_slot() else { return Poll::Ready(0) };
            slot.waker.register(cx.waker());
            if !this.cq.req_notify(false) {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
