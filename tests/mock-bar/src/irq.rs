//! Interrupts: CEQ/AEQ causes, per-vector enable (GLINT_DYN_CTL), the
//! pending latch, optional ITR moderation, CQACK counting, and in-process
//! delivery to an [`InterruptSink`] a host test installs
//! ([`crate::Device::set_interrupt_sink`]).
//!
//! Written from `shared/spec/interrupts.md` part A and control-path §1.4,
//! §7.1, §8. The rules, and which of them are inferred:
//!
//! * **Causes** (spec A.1, A.11 item 3; icrdma_hw.c: icrdma_cfg_ceq;
//!   ctrl.c: irdma_cfg_aeq): a CEQE written to CEQ `c` raises "event on
//!   vector MSIX_INDX" of GLINT_CEQCTL(c) if its CAUSE_ENA [30] is set; an
//!   AEQE does the same through PFINT_AEQCTL. A cause that is not enabled
//!   raises nothing (the entry is still written).
//! * **Vector gating** (A.9, inferred from Linux never masking at the start
//!   of its handler): an event on vector `n` fires only while INTENA [0] of
//!   GLINT_DYN_CTL(n) is set. Firing clears INTENA in the register (the
//!   model's compare-exchange on the 32-bit word; in-process a plain store
//!   under the device lock), so the driver's next INTENA = 1 write is a
//!   visible change. An event while INTENA = 0 latches "pending"; the
//!   write that sets INTENA again fires at once if something is pending —
//!   unless CLEARPBA [1] is set in that write and every queue on the
//!   vector is empty ([`IrqModel::clearpba_drops_when_empty`], on by
//!   default; inferred, spec A.9 "keep it configurable"). "Empty" for a
//!   CEQ is CEQEs written == CQACKs received for CQs of that CEQ (the CEQ
//!   has no head doorbell, control-path §11 item 9, so the acks are the
//!   only consumer signal — a plausible role, A.11 item 5, inferred); for
//!   the AEQ, no entry outstanding (AEQALLOC credits, A.7).
//! * **Moderation** (A.10): with INTERVAL [16:5] ≠ 0 in DYN_CTL(n), a
//!   vector that fired does not fire again until INTERVAL × 2 µs have
//!   passed; an event in that window is latched with a deadline and fires
//!   when [`crate::Device::tick_interrupts`] (called on every register
//!   access, by [`crate::Device::poll`] and by tests) finds the deadline
//!   passed and INTENA set. Off by default (INTERVAL 0), as in Linux.
//!   GLINT_RATE (INTRL) is stored but not modelled.
//! * **CQACK** (A.2 step 5, A.11 item 5): each write is counted; its only
//!   modelled effect is the CEQ emptiness above. Its device-side effect is
//!   not visible in Linux.
//! * **Deferred mode** (plain-memory BAR): DYN_CTL writes latch, so the
//!   INTENA check runs in [`crate::Device::poll`]; CQACK writes coalesce
//!   and cannot be counted, so there CLEARPBA never drops a pending event
//!   (a spurious interrupt is harmless; a lost one is not).
//! * **Delivery**: in-process only. The CQE and CEQE are in memory before
//!   the sink is signalled (A.11 item 7). The sink never calls back into
//!   the device (it is signalled under the device lock): a test's "CPU"
//!   thread waits on it and then runs the driver's handler. Into a QEMU
//!   guest the shared-memory host takes the raised vectors from a sink and
//!   writes them to the guest's ivshmem-doorbell eventfds as MSI-X
//!   interrupts (`crate::shm`, `crate::ivshmem`; spec part B).
//! * **Reset**: [`crate::Device::reset`] clears the causes, vectors and
//!   counters but keeps the sink and the CLEARPBA knob (test wiring, not
//!   device state).

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// GLINT_DYN_CTL(n) (control-path §1.3 row 10: 0x0016_0000 + 4·n).
pub fn dyn_ctl(n: u32) -> u32 {
    0x0016_0000 + 4 * n
}

/// GLINT_CEQCTL(ceq) (control-path §1.3 row 17: 0x0015_C000 + 4·ceq).
pub fn ceqctl(ceq: u32) -> u32 {
    0x0015_C000 + 4 * ceq
}

/// GLINT_RATE(n) (control-path §1.3 row 22: 0x0015_A000 + 4·n).
pub fn rate(n: u32) -> u32 {
    0x0015_A000 + 4 * n
}

/// Number of GLINT_DYN_CTL / GLINT_CEQCTL registers (0..2047).
pub const VECTORS: u32 = 2048;

/// DYN_CTL.INTENA [0].
pub const INTENA: u32 = 1;
/// DYN_CTL.CLEARPBA [1].
pub const CLEARPBA: u32 = 1 << 1;
/// CEQCTL / AEQCTL CAUSE_ENA [30].
pub const CAUSE_ENA: u32 = 1 << 30;

/// DYN_CTL.INTERVAL [16:5] (2 µs units).
pub fn interval(dyn_ctl: u32) -> u32 {
    dyn_ctl >> 5 & 0xFFF
}

/// The vector a CEQCTL / AEQCTL value names, if its cause is enabled.
pub fn cause_vector(ctl: u32) -> Option<u32> {
    (ctl & CAUSE_ENA != 0).then_some(ctl & 0x7FF)
}

/// Where a host test receives the model's interrupts: per vector, how many
/// were raised and how many are not yet taken, with a condition variable
/// to sleep on (the "CPU" halted until an interrupt).
#[derive(Default)]
pub struct InterruptSink {
    state: Mutex<BTreeMap<u32, (u64, u64)>>,
    /// When each vector was last raised (latency measurements).
    stamps: Mutex<BTreeMap<u32, Instant>>,
    cv: Condvar,
}

impl InterruptSink {
    /// A new sink, shared with the device.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub(crate) fn raise(&self, v: u32) {
        let now = Instant::now();
        self.stamps.lock().unwrap_or_else(|e| e.into_inner()).insert(v, now);
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let e = s.entry(v).or_default();
        e.0 += 1;
        e.1 += 1;
        self.cv.notify_all();
    }

    /// Interrupts raised on vector `v` so far.
    pub fn raised(&self, v: u32) -> u64 {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.get(&v).map_or(0, |e| e.0)
    }

    /// When vector `v` was last raised: taken after the CQE and the CEQE
    /// are in memory, just before the "CPU" is signalled (for latency
    /// figures: CQE write → handler → woken task).
    pub fn last_raised_at(&self, v: u32) -> Option<Instant> {
        self.stamps.lock().unwrap_or_else(|e| e.into_inner()).get(&v).copied()
    }

    /// Takes every interrupt of vector `v` not yet taken; whether there was one.
    pub fn take(&self, v: u32) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.get_mut(&v).is_some_and(|e| std::mem::take(&mut e.1) > 0)
    }

    /// Sleeps until vector `v` has an interrupt not yet taken (then takes
    /// it and returns true) or `timeout` passed (false).
    pub fn wait(&self, v: u32, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(e) = s.get_mut(&v)
                && e.1 > 0
            {
                e.1 = 0;
                return true;
            }
            let now = Instant::now();
            if now >= end {
                return false;
            }
            s = self.cv.wait_timeout(s, end - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

/// What the interrupt logic did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IrqCounters {
    /// Interrupts signalled, all vectors.
    pub raised: u64,
    /// Events that found their vector disabled (INTENA 0) and latched.
    pub latched: u64,
    /// Events held back by ITR moderation.
    pub throttled: u64,
    /// Latched events dropped by a CLEARPBA re-enable with the queues empty.
    pub cleared: u64,
    /// Events whose cause was not enabled (no CAUSE_ENA): nothing raised.
    pub no_cause: u64,
    /// CQACK writes.
    pub acks: u64,
    /// CQACK writes naming no CQ bound to a CEQ.
    pub bad_acks: u64,
    /// Arm requests detected (ARM_SEQ_NUM changed).
    pub arms: u64,
    /// CQARM writes whose shadow word carried no new ARM_SEQ_NUM (ignored:
    /// CQARM is only a hint, spec A.4).
    pub stale_arms: u64,
    /// DYN_CTL writes of 0 (vector disabled, icrdma_disable_irq).
    pub disables: u64,
}

/// The device's interrupt state.
#[derive(Default)]
pub struct IrqModel {
    pub(crate) sink: Option<Arc<InterruptSink>>,
    /// Latched vectors: `None` = waiting for INTENA, `Some(t)` = held by
    /// moderation until `t`.
    pub(crate) pending: BTreeMap<u32, Option<Instant>>,
    pub(crate) last_fire: BTreeMap<u32, Instant>,
    /// Per CEQ: CEQEs written and not yet acknowledged through CQACK.
    pub(crate) unacked: BTreeMap<u32, u64>,
    /// Per vector: interrupts raised.
    pub(crate) per_vector: BTreeMap<u32, u64>,
    /// A CLEARPBA re-enable drops a latched event when the vector's queues
    /// are empty (default true; see the module docs).
    pub clearpba_drops_when_empty: bool,
    pub(crate) counters: IrqCounters,
}

impl IrqModel {
    pub(crate) fn new() -> Self {
        Self { clearpba_drops_when_empty: true, ..Self::default() }
    }
}

impl crate::Device {
    /// Installs the sink the device signals its interrupts to (in-process
    /// delivery for host tests). Without one, interrupts are still counted.
    pub fn set_interrupt_sink(&mut self, sink: Arc<InterruptSink>) {
        self.irq.sink = Some(sink);
    }

    /// Interrupt counters (see [`IrqCounters`]).
    pub fn irq_counters(&self) -> &IrqCounters {
        &self.irq.counters
    }

    /// Interrupts raised on vector `v`.
    pub fn interrupts_raised(&self, v: u32) -> u64 {
        self.irq.per_vector.get(&v).copied().unwrap_or(0)
    }

    /// The interrupt configuration knobs (CLEARPBA rule).
    pub fn irq_model(&mut self) -> &mut IrqModel {
        &mut self.irq
    }

    /// The current value of a 32-bit register as stored (interrupt
    /// registers: DYN_CTL with INTENA as the model left it).
    pub fn reg(&self, off: u32) -> u32 {
        self.other_regs.get(&off).copied().unwrap_or(0)
    }

    /// Fires vectors whose moderation window passed (INTENA set), and
    /// re-checks latched vectors against INTENA (deferred mode, where
    /// DYN_CTL writes only latch). Called on every register access and by
    /// [`crate::Device::poll`]; tests call it as a timer would.
    pub fn tick_interrupts(&mut self) {
        if self.irq.pending.is_empty() {
            return;
        }
        let now = Instant::now();
        let due: Vec<u32> = self
            .irq
            .pending
            .iter()
            .filter(|(_, t)| t.is_none_or(|t| t <= now))
            .map(|(v, _)| *v)
            .collect();
        for v in due {
            if self.reg(dyn_ctl(v)) & INTENA != 0 {
                self.fire(v);
            } else {
                self.irq.pending.insert(v, None);
            }
        }
    }

    /// A new entry in CEQ `ceq` (after the CEQE is in memory).
    pub(crate) fn ceq_event(&mut self, ceq: u32) {
        *self.irq.unacked.entry(ceq).or_default() += 1;
        match cause_vector(self.reg(ceqctl(ceq))) {
            Some(v) => self.vector_event(v),
            None => self.irq.counters.no_cause += 1,
        }
    }

    /// A new entry in the AEQ (after the AEQE is in memory).
    pub(crate) fn aeq_event(&mut self) {
        match cause_vector(self.reg(crate::regs::PFINT_AEQCTL)) {
            Some(v) => self.vector_event(v),
            None => self.irq.counters.no_cause += 1,
        }
    }

    fn vector_event(&mut self, v: u32) {
        let dc = self.reg(dyn_ctl(v));
        if dc & INTENA == 0 {
            self.irq.counters.latched += 1;
            let held = self.irq.pending.get(&v).copied().flatten();
            self.irq.pending.insert(v, held);
            return;
        }
        if let Some(until) = self.moderated_until(v, dc) {
            self.irq.counters.throttled += 1;
            self.irq.pending.insert(v, Some(until));
            return;
        }
        self.fire(v);
    }

    /// End of the moderation window of vector `v`, if it is still open.
    fn moderated_until(&self, v: u32, dc: u32) -> Option<Instant> {
        let iv = interval(dc);
        let last = self.irq.last_fire.get(&v)?;
        let until = *last + Duration::from_micros(2 * iv as u64);
        (iv > 0 && Instant::now() < until).then_some(until)
    }

    fn fire(&mut self, v: u32) {
        let off = dyn_ctl(v);
        let dc = self.reg(off);
        self.other_regs.insert(off, dc & !INTENA);
        self.irq.pending.remove(&v);
        self.irq.last_fire.insert(v, Instant::now());
        self.irq.counters.raised += 1;
        *self.irq.per_vector.entry(v).or_default() += 1;
        self.record(crate::Event::Interrupt { vector: v });
        if let Some(s) = self.irq.sink.as_ref() {
            s.raise(v);
        }
    }

    /// A GLINT_DYN_CTL(n) write (strict mode; stored already).
    pub(crate) fn dyn_ctl_written(&mut self, v: u32, val: u32) {
        if val == 0 {
            self.irq.counters.disables += 1;
        }
        if val & INTENA == 0 || !self.irq.pending.contains_key(&v) {
            return;
        }
        if val & CLEARPBA != 0
            && self.irq.clearpba_drops_when_empty
            && self.cfg.mode == crate::Mode::Strict
            && self.vector_queues_empty(v)
        {
            self.irq.pending.remove(&v);
            self.irq.counters.cleared += 1;
            return;
        }
        match self.moderated_until(v, val) {
            Some(until) => {
                self.irq.pending.insert(v, Some(until));
            }
            None => self.fire(v),
        }
    }

    /// Every CEQ and the AEQ whose cause names vector `v` is empty (see
    /// the module docs for what "empty" means without a CEQ head).
    fn vector_queues_empty(&self, v: u32) -> bool {
        let ceqs_empty = self.ceqs.keys().all(|c| {
            cause_vector(self.reg(ceqctl(*c))) != Some(v)
                || self.irq.unacked.get(c).copied().unwrap_or(0) == 0
        });
        let aeq_empty = cause_vector(self.reg(crate::regs::PFINT_AEQCTL)) != Some(v)
            || self.aeq.as_ref().is_none_or(|a| a.outstanding == 0);
        ceqs_empty && aeq_empty
    }

    /// A CQACK write (CQ id).
    pub(crate) fn cq_ack(&mut self, id: u32) {
        self.irq.counters.acks += 1;
        match self.cqs.get(&id).and_then(|c| c.ceq) {
            Some(ceq) => {
                let n = self.irq.unacked.entry(ceq).or_default();
                *n = n.saturating_sub(1);
            }
            None => self.irq.counters.bad_acks += 1,
        }
    }

    /// Whether a DYN_CTL offset; its vector.
    pub(crate) fn dyn_ctl_vector(off: u32) -> Option<u32> {
        let d = off.checked_sub(dyn_ctl(0))?;
        (d < 4 * VECTORS && d.is_multiple_of(4)).then_some(d / 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, Device, TestMemory};

    /// A function reset (the LAN fault scenarios of the QEMU run do one)
    /// clears the interrupt registers but keeps the sink: interrupts the
    /// driver enables afterwards are still delivered.
    #[test]
    fn the_sink_survives_a_reset() {
        let mut d = Device::new(Config::default(), Box::new(TestMemory::new()));
        let sink = InterruptSink::new();
        d.set_interrupt_sink(sink.clone());
        d.reset();
        d.mmio_write32(ceqctl(0), CAUSE_ENA | 2);
        d.mmio_write32(dyn_ctl(2), INTENA);
        d.ceq_event(0);
        assert_eq!(d.interrupts_raised(2), 1);
        assert_eq!(sink.raised(2), 1, "the interrupt reached the sink after the reset");
    }
}
