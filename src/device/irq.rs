//! The device side of interrupt-driven completion: programming the causes
//! and vectors, the handler entry, the arm decision (see `crate::irq` for
//! the design and sources).

use irdma_hal::{Bar, Hal, regs};

use crate::device::{Device, MAX_CQS};
use crate::irq::{
    ARMED_NEXT, ARMED_SOLICITED, CEQE_VALID, CQ_SLOTS, CeqCons, IrqConfig, IrqReport, IrqStats,
    IrqVectors, MAX_CEQ_ITR_US, UNARMED, cause_value, ena_value,
};
use crate::uk::sync::{AtomicU64, Ordering};

const _: () = assert!(CQ_SLOTS == MAX_CQS as usize);

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// Programs the interrupt causes and enables the vectors (end of
    /// probe, when [`crate::device::ProbeOptions::interrupts`] is set).
    /// The LAN info was checked to carry at least one vector.
    pub(crate) fn setup_interrupts(&mut self, cfg: IrqConfig) {
        let m = self.lan.msix;
        let shared = cfg.shared || m.count < 2;
        // `probe` checked `first + 2 <= GLINT_DYN_CTL_COUNT`.
        let ceq_vec = if shared { m.first } else { m.first.saturating_add(1) };
        let v = IrqVectors { aeq: m.first, ceq: ceq_vec };
        let Some(ceq) = self.ceq.as_ref() else { return };
        let entries = ceq.cmd.elem_cnt;
        let bytes = entries as usize * 8;
        if bytes > ceq._ring.len() {
            return;
        }
        let Some(base) = core::ptr::NonNull::new(ceq._ring.vaddr().as_ptr().cast::<u64>()) else {
            return;
        };
        // SAFETY: page-aligned DMA memory valid for `bytes` bytes (checked
        // against its length above). The ring does not move with the `Dma`
        // value and stays in `self.ceq` until `teardown` (which has `&mut
        // self`) empties `ceq_view` (`teardown_interrupts`, its first step)
        // before taking it out; only atomic qword loads are made through
        // the view, and it never leaves the device.
        let view = unsafe { crate::uk::QueueMem::from_raw(base, bytes / 8) };
        let irq = &mut self.irq;
        irq.ceq_view = view;
        irq.ceq_entries = entries;
        // Head 0, polarity 1 (ctrl.c: irdma_sc_ceq_init).
        irq.cons = CeqCons(AtomicU64::new(1));
        irq.itr_us = cfg.ceq_itr_us.min(MAX_CEQ_ITR_US);
        irq.vectors = Some(v);
        if let Some(off) = regs::glint_ceqctl(0) {
            self.bar.write32(off, cause_value(v.ceq));
        }
        self.enable_vector(v.ceq);
        self.bar.write32(regs::PFINT_AEQCTL, cause_value(v.aeq));
        if !shared {
            self.enable_vector(v.aeq);
        }
    }

    /// Disables the vectors and the CEQ cause; forgets the CEQ view (start
    /// of teardown, before the AEQ and CEQ are destroyed).
    pub(crate) fn teardown_interrupts(&mut self) {
        let Some(v) = self.irq.vectors.take() else { return };
        for n in [v.ceq, v.aeq] {
            if let Some(off) = regs::glint_dyn_ctl(n) {
                self.bar.write32(off, 0);
            }
        }
        if let Some(off) = regs::glint_ceqctl(0) {
            self.bar.write32(off, 0);
        }
        self.irq.ceq_view = crate::uk::QueueMem::empty();
        self.irq.ceq_entries = 0;
    }

    fn enable_vector(&self, n: u16) {
        let Some(v) = self.irq.vectors else { return };
        // icrdma_hw.c: icrdma_ena_irq: the throttle applies to CEQ vectors
        // that are not the AEQ's.
        let itr = if n == v.ceq && n != v.aeq { self.irq.itr_us } else { 0 };
        if let Some(off) = regs::glint_dyn_ctl(n) {
            self.bar.write32(off, ena_value(itr));
        }
    }

    /// The vectors in use, if interrupts were configured at probe.
    pub fn irq_vectors(&self) -> Option<IrqVectors> {
        self.irq.vectors
    }

    /// Handler counters.
    pub fn irq_stats(&self) -> IrqStats {
        IrqStats {
            interrupts: self.irq.interrupts.load(Ordering::Relaxed),
            ceqes: self.irq.ceqes.load(Ordering::Relaxed),
            acks: self.irq.acks.load(Ordering::Relaxed),
        }
    }

    /// The interrupt handler entry for MSI-X table index `vector` (see the
    /// module docs): drains CEQ 0 if it is on this vector, processes the
    /// AEQ if it is, then re-enables the vector. Bounded (one CEQ ring's
    /// worth of entries), allocation-free, safe to run while other threads
    /// poll, post or call it too. A vector this device does not use is
    /// ignored.
    pub fn handle_interrupt(&self, vector: u16) -> IrqReport {
        let mut rep = IrqReport::default();
        let Some(v) = self.irq.vectors else { return rep };
        if vector != v.ceq && vector != v.aeq {
            return rep;
        }
        if self
            .irq
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            rep.busy = true;
            return rep;
        }
        self.irq.interrupts.fetch_add(1, Ordering::Relaxed);
        if vector == v.ceq {
            self.drain_ceq(&mut rep);
        }
        if vector == v.aeq && self.service_async_events() {
            rep.aeq = true;
            // QPs may have been flushed in software: no CQE, no CEQE.
            for c in self.irq.cqs.iter() {
                c.event.store(true, Ordering::Release);
                c.waker.wake();
            }
        }
        // Drain completely, then re-enable (A.9): an entry written since
        // the last read fires right after this write.
        self.enable_vector(vector);
        rep.reenabled = true;
        self.irq.busy.store(false, Ordering::Release);
        rep
    }

    /// Consumes CEQ 0 (ctrl.c: irdma_sc_process_ceq; hw.c:
    /// irdma_process_ceq). The caller holds `busy`.
    fn drain_ceq(&self, rep: &mut IrqReport) {
        let irq = &self.irq;
        let n = irq.ceq_entries;
        if n == 0 {
            return;
        }
        let c = irq.cons.0.load(Ordering::Relaxed);
        let (mut head, mut pol) = ((c >> 1) as u32 % n, c & 1 == 1);
        for _ in 0..n {
            // One 64-bit load: no barrier between VALID and the context
            // (spec A.2 item 8).
            let w = irq.ceq_view.read(head as usize);
            if (w & CEQE_VALID != 0) != pol {
                break;
            }
            head += 1;
            if head == n {
                head = 0;
                pol = !pol;
            }
            rep.ceqes += 1;
            let ctx = w & !CEQE_VALID;
            // A zero context is an entry scrubbed after a CQ destroy
            // (ctrl.c: irdma_sc_cleanup_ceqes): skipped, not acked.
            if ctx == 0 {
                continue;
            }
            // The CQ context given at CREATE_CQ is the CQ id.
            let Some(st) = u32::try_from(ctx).ok().and_then(|id| irq.cq(id).map(|s| (id, s)))
            else {
                rep.unknown += 1;
                continue;
            };
            // CQACK before the CQ's handler runs (ctrl.c: irdma_sc_cq_ack
            // inside irdma_sc_process_ceq).
            self.bar.write32(regs::CQACK, st.0);
            irq.acks.fetch_add(1, Ordering::Relaxed);
            st.1.armed.store(UNARMED, Ordering::Release);
            st.1.event.store(true, Ordering::Release);
            st.1.waker.wake();
            rep.cqs += 1;
        }
        irq.cons.0.store(u64::from(head) << 1 | u64::from(pol), Ordering::Relaxed);
        irq.ceqes.fetch_add(u64::from(rep.ceqes), Ordering::Relaxed);
    }

    /// The arm decision of `req_notify` for CQ `id` (verbs.c:
    /// irdma_req_notify_cq): whether the hardware arm is to be issued.
    pub(crate) fn cq_arm_decision(&self, id: u32, solicited_only: bool) -> bool {
        let Some(st) = self.irq.cq(id) else { return true };
        let want = if solicited_only { ARMED_SOLICITED } else { ARMED_NEXT };
        let mut cur = st.armed.load(Ordering::Acquire);
        loop {
            // Arm once; upgrade solicited → next; never downgrade.
            if cur != UNARMED && !(cur == ARMED_SOLICITED && want == ARMED_NEXT) {
                return false;
            }
            match st.armed.compare_exchange(cur, want, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// A new CQ with id `id`: no arm, no event, no waker left from an
    /// earlier CQ of that id.
    pub(crate) fn cq_irq_reset(&self, id: u32) {
        if let Some(st) = self.irq.cq(id) {
            st.armed.store(UNARMED, Ordering::Release);
            st.event.store(false, Ordering::Release);
            drop(st.waker.take());
        }
    }
}
