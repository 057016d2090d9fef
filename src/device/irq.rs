//! The device side of interrupt-driven completion: programming the causes
//! and vectors, the handler entry, the arm decision (see `crate::irq` for
//! the design and sources).

use irdma_hal::{Bar, BufferDirection, Dma, Hal, regs};

use crate::cqp::cmd::CreateCeq;
use crate::device::{Ceq, Device, MAX_CQS};
use crate::irq::{
    ARMED_NEXT, ARMED_SOLICITED, CCQ_CTX, CEQE_VALID, CQ_SLOTS, CeqCons, CeqIrq, IrqConfig,
    IrqReport, IrqState, IrqStats, IrqVectors, MAX_CEQ_ITR_US, MAX_IRQ_CEQS, UNARMED, cause_value,
    ena_value,
};
use crate::uk::sync::{AtomicU64, Ordering};

const _: () = assert!(CQ_SLOTS == MAX_CQS as usize);

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// Programs the interrupt causes and enables the vectors (end of
    /// probe, when [`crate::device::ProbeOptions::interrupts`] is set):
    /// CEQ 0 (created at probe) and the AEQ, then CEQs 1.. created through
    /// the CQP, one per further vector (hw.c: irdma_setup_ceqs). The LAN
    /// info was checked to carry at least one vector.
    pub(crate) fn setup_interrupts(&mut self, cfg: IrqConfig) {
        let m = self.lan.msix;
        let shared = cfg.shared || m.count < 2;
        // `probe` checked `first + 2 <= GLINT_DYN_CTL_COUNT`; vectors past
        // the array are not used.
        let usable = m.count.min(regs::GLINT_DYN_CTL_COUNT.saturating_sub(m.first));
        // spec A.8 (hw.c: irdma_setup_ceqs): min(vectors, MAX_CEQS) CEQs,
        // one fewer when entry `first` carries only the AEQ.
        let nceqs = (u32::from(usable).min(self.max_ceqs) as usize)
            .saturating_sub(usize::from(!shared))
            .clamp(1, MAX_IRQ_CEQS);
        let ceq0_vec = if shared { m.first } else { m.first.saturating_add(1) };
        let v = IrqVectors { aeq: m.first, ceq: ceq0_vec };
        let Some(ceq) = self.ceq.as_ref() else { return };
        if !Self::irq_view_ceq(&mut self.irq, 0, ceq.cmd.elem_cnt, &ceq._ring, ceq0_vec) {
            return;
        }
        self.irq.itr_us = cfg.ceq_itr_us.min(MAX_CEQ_ITR_US);
        self.irq.vectors = Some(v);
        self.irq.nceqs = 1;
        if let Some(off) = regs::glint_ceqctl(0) {
            self.bar.write32(off, cause_value(ceq0_vec));
        }
        self.enable_vector(ceq0_vec);
        self.bar.write32(regs::PFINT_AEQCTL, cause_value(v.aeq));
        if !shared {
            self.enable_vector(v.aeq);
        }
        // CEQs 1..: through the CQP, as Linux does once CEQ 0 and the AEQ
        // exist (hw.c: irdma_setup_ceqs, irdma_create_ceq). A CEQ that
        // cannot be created ends the list (CQs may only name the CEQs
        // that exist); a timed-out create keeps its ring for teardown.
        for id in 1..nceqs {
            let vector = ceq0_vec.saturating_add(id as u16);
            if !self.create_irq_ceq(id as u16, vector) {
                break;
            }
            self.irq.nceqs = id + 1;
            if let Some(off) = regs::glint_ceqctl(id as u16) {
                self.bar.write32(off, cause_value(vector));
            }
            self.enable_vector(vector);
        }
    }

    /// CQP completions by interrupt (spec interrupts.md A.3, A.6): with
    /// `on`, arms the CCQ (it reports to CEQ 0) now and again after every
    /// CQP wait that consumed a CQE, so each CQP op raises CEQ 0's vector;
    /// the handler counts the event ([`IrqReport::ccq`],
    /// [`IrqStats::ccq_events`]) and acks it. The CQP waits stay polled,
    /// Linux's safety net. Off by default (Linux arms it at the end of
    /// bring-up, hw.c: irdma_ctrl_init_hw): no caller sleeps on the CQP
    /// here, so the arm would only add one interrupt per CQP op. Returns
    /// whether CCQ interrupts are now on (false without interrupts, or
    /// without a CCQ).
    pub fn set_ccq_interrupts(&self, on: bool) -> bool {
        if self.irq.vectors.is_none() {
            return false;
        }
        let mut g = self.cqp.lock();
        let Some(c) = g.as_mut() else { return false };
        c.set_ccq_interrupts(on);
        c.ccq_interrupts()
    }

    /// Points the handler's view of CEQ `slot` at `ring` (`entries` CEQEs)
    /// on `vector`. False if the ring is smaller than that.
    fn irq_view_ceq(
        irq: &mut IrqState,
        slot: usize,
        entries: u32,
        ring: &Dma<H>,
        vector: u16,
    ) -> bool {
        let bytes = entries as usize * 8;
        if bytes > ring.len() {
            return false;
        }
        let Some(base) = core::ptr::NonNull::new(ring.vaddr().as_ptr().cast::<u64>()) else {
            return false;
        };
        let Some(c) = irq.ceqs.get_mut(slot) else { return false };
        // SAFETY: page-aligned DMA memory valid for `bytes` bytes (checked
        // against its length above). The ring does not move with the `Dma`
        // value and stays in `self.ceq` (slot 0) or `self.irq_ceqs` (slot
        // i at index i − 1) until `teardown` (which has `&mut self`)
        // empties every view (`teardown_interrupts`, its first step) before
        // taking the rings out; only atomic qword loads are made through
        // the view, and it never leaves the device.
        c.view = unsafe { crate::uk::QueueMem::from_raw(base, bytes / 8) };
        c.entries = entries;
        // Head 0, polarity 1 (ctrl.c: irdma_sc_ceq_init).
        c.cons = CeqCons(AtomicU64::new(1));
        c.vector = vector;
        true
    }

    /// CREATE_CEQ for CEQ `id` (≥ 1) with as many entries as CEQ 0 (hw.c:
    /// irdma_create_ceq sizes every CEQ by the CQ count) and its handler
    /// view on `vector`. False if it could not be created.
    fn create_irq_ceq(&mut self, id: u16, vector: u16) -> bool {
        let Some(entries) = self.ceq.as_ref().map(|c| c.cmd.elem_cnt) else { return false };
        if self.irq_ceqs.is_full() {
            return false;
        }
        let Ok(ring) = Dma::<H>::with_bytes(entries as usize * 8, BufferDirection::DeviceToDriver)
        else {
            return false;
        };
        let cmd = CreateCeq::contiguous(id, entries, ring.paddr(), self.lan.vsi_num);
        if let Err(e) = self.exec(cmd) {
            // After a timeout the device may write CEQEs there: kept.
            self.keep_if_owned(&e, ring);
            return false;
        }
        if !Self::irq_view_ceq(&mut self.irq, usize::from(id), entries, &ring, vector) {
            // Cannot happen (the ring was sized above); the CEQ is still
            // destroyed at teardown.
            let _ = self.irq_ceqs.push(Ceq { _ring: ring, cmd });
            return false;
        }
        self.control_bytes += ring.len() as u64;
        // `is_full` was checked above.
        let _ = self.irq_ceqs.push(Ceq { _ring: ring, cmd });
        true
    }

    /// Disables the vectors and the CEQ causes; forgets the CEQ views
    /// (start of teardown, before the AEQ and the CEQs are destroyed).
    pub(crate) fn teardown_interrupts(&mut self) {
        let Some(v) = self.irq.vectors.take() else { return };
        if let Some(c) = self.cqp.get_mut().as_mut() {
            c.set_ccq_interrupts(false);
        }
        let n = self.irq.nceqs;
        for (id, c) in self.irq.ceqs.iter_mut().enumerate().take(n) {
            if let Some(off) = regs::glint_dyn_ctl(c.vector) {
                self.bar.write32(off, 0);
            }
            if let Some(off) = regs::glint_ceqctl(id as u16) {
                self.bar.write32(off, 0);
            }
            c.view = crate::uk::QueueMem::empty();
            c.entries = 0;
        }
        if let Some(off) = regs::glint_dyn_ctl(v.aeq) {
            self.bar.write32(off, 0);
        }
        self.irq.nceqs = 0;
    }

    fn enable_vector(&self, n: u16) {
        let Some(v) = self.irq.vectors else { return };
        // icrdma_hw.c: icrdma_ena_irq: the throttle applies to CEQ vectors
        // that are not the AEQ's.
        let itr = if n != v.aeq { self.irq.itr_us } else { 0 };
        if let Some(off) = regs::glint_dyn_ctl(n) {
            self.bar.write32(off, ena_value(itr));
        }
    }

    /// The number of CEQs in use (CEQ 0 included; 0 without interrupts).
    /// A CQ may name any of them at create ([`crate::verbs::CqOptions`]).
    pub fn irq_ceq_count(&self) -> usize {
        self.irq.nceqs
    }

    /// The MSI-X table index CEQ `ceq` reports to, if it exists.
    pub fn ceq_vector(&self, ceq: u16) -> Option<u16> {
        self.irq.live_ceqs().get(usize::from(ceq)).map(|c| c.vector)
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
            ccq_events: self.irq.ccq_events.load(Ordering::Relaxed),
        }
    }

    /// The interrupt handler entry for MSI-X table index `vector` (see the
    /// module docs): drains the CEQ on this vector (each vector carries at
    /// most one, spec A.8), processes the AEQ if it is on this vector, then
    /// re-enables the vector. Bounded (one CEQ ring's worth of entries),
    /// allocation-free, safe to run while other threads poll, post or call
    /// it too. A vector this device does not use is ignored.
    pub fn handle_interrupt(&self, vector: u16) -> IrqReport {
        let mut rep = IrqReport::default();
        let Some(v) = self.irq.vectors else { return rep };
        let ceq = self.irq.live_ceqs().iter().find(|c| c.vector == vector);
        let busy = match ceq {
            Some(c) => &c.busy,
            None if vector == v.aeq => &self.irq.aeq_busy,
            None => return rep,
        };
        if busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            rep.busy = true;
            return rep;
        }
        self.irq.interrupts.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = ceq {
            self.drain_ceq(c, &mut rep);
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
        busy.store(false, Ordering::Release);
        rep
    }

    /// Consumes one CEQ (ctrl.c: irdma_sc_process_ceq; hw.c:
    /// irdma_process_ceq). The caller holds its `busy`.
    fn drain_ceq(&self, ceq: &CeqIrq, rep: &mut IrqReport) {
        let irq = &self.irq;
        let n = ceq.entries;
        if n == 0 {
            return;
        }
        let c = ceq.cons.0.load(Ordering::Relaxed);
        let (mut head, mut pol) = ((c >> 1) as u32 % n, c & 1 == 1);
        let mut count = 0u32;
        for _ in 0..n {
            // One 64-bit load: no barrier between VALID and the context
            // (spec A.2 item 8).
            let w = ceq.view.read(head as usize);
            if (w & CEQE_VALID != 0) != pol {
                break;
            }
            head += 1;
            if head == n {
                head = 0;
                pol = !pol;
            }
            count += 1;
            let ctx = w & !CEQE_VALID;
            // A zero context is an entry scrubbed after a CQ destroy
            // (ctrl.c: irdma_sc_cleanup_ceqes): skipped, not acked.
            if ctx == 0 {
                continue;
            }
            if ctx == CCQ_CTX {
                // A CQP completion (spec A.6): CQACK with the CCQ's id 0
                // (irdma_sc_cq_ack inside irdma_sc_process_ceq); the CQP's
                // waiters poll the CCQ, which re-arms after a drain that
                // consumed a CQE (`Cqp::set_ccq_interrupts`).
                self.bar.write32(regs::CQACK, 0);
                irq.acks.fetch_add(1, Ordering::Relaxed);
                irq.ccq_events.fetch_add(1, Ordering::Relaxed);
                rep.ccq = true;
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
        ceq.cons.0.store(u64::from(head) << 1 | u64::from(pol), Ordering::Relaxed);
        rep.ceqes += count;
        irq.ceqes.fetch_add(u64::from(count), Ordering::Relaxed);
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
