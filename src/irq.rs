//! Interrupt-driven completion (issue #31, host slice). This file: the
//! plain types, the per-CQ state and [`AtomicWaker`]; the device side is
//! in `device/irq.rs`, the waits in `verbs/wait.rs`. Overview: CEQ 0 and the AEQ
//! on MSI-X vectors, the interrupt handler entry, arming like the kernel,
//! and the two ways to sleep on a CQ — `Cq::wait` (firmware without an
//! executor: drain → arm → check → halt) and `Cq::completion` (a
//! `core::future::Future` woken from the handler through a per-CQ
//! [`AtomicWaker`]).
//!
//! Opt-in: [`crate::device::ProbeOptions::interrupts`] = `Some(IrqConfig)`.
//! Without it nothing here touches the device and polling is unchanged.
//!
//! # Vector plan (spec interrupts.md A.8; hw.c: irdma_save_msix_info,
//! irdma_setup_ceq_0, irdma_cfg_aeq_vector)
//!
//! CEQ 0 is created at probe; with interrupts, CEQs 1.. are created
//! through the CQP at the end of probe, one per further vector:
//! min(`msix.count`, MAX_CEQS, [`MAX_IRQ_CEQS`]) CEQs, one fewer when
//! unshared. With one vector, or [`IrqConfig::shared`], entry `first`
//! carries the AEQ **and** CEQ 0 and entry `first + i` CEQ `i`; otherwise
//! entry `first` carries only the AEQ and entry `first + 1 + i` CEQ `i`.
//! Each vector carries at most one CEQ (no fan-in on GEN_2). A CQ reports
//! to CEQ 0 unless created with [`crate::verbs::CqOptions::ceq`]
//! (`Device::create_cq_with`); `Device::ceq_vector` names its vector. A
//! CEQ that cannot be created ends the list (fewer CEQs, probe still
//! succeeds; a timed-out create is kept for teardown). Teardown destroys
//! CEQs 1.. (last first) after the AEQ and before CEQ 0.
//!
//! # The CCQ on CEQ 0 (spec A.3, A.6; ctrl.c: irdma_sc_ccq_arm)
//!
//! With interrupts the CCQ is created with a context of its own
//! (`CCQ_CTX`) so its CEQEs are told from CQs'. `Device::set_ccq_interrupts`
//! (off by default; Linux arms it at the end of bring-up) arms it, and the
//! CQP re-arms it after every wait that consumed a CQE (never after an
//! empty one); a CQP completion then raises CEQ 0's vector and the handler
//! acks it (CQACK 0) and reports [`IrqReport::ccq`]. The CQP waits stay
//! polled — the safety net Linux keeps too.
//!
//! # What is programmed
//!
//! * GLINT_CEQCTL(i) = CAUSE_ENA | MSIX_INDX | ITR_INDX 3, then the vector
//!   enabled (icrdma_hw.c: icrdma_cfg_ceq, icrdma_ena_irq);
//! * PFINT_AEQCTL = CAUSE_ENA | MSIX_INDX | ITR_INDX 3, then its vector
//!   enabled unless shared with CEQ 0 (ctrl.c: irdma_cfg_aeq; hw.c:
//!   irdma_cfg_aeq_vector);
//! * enable / re-enable: GLINT_DYN_CTL(n) = INTENA | CLEARPBA | ITR_INDX 0
//!   | INTERVAL, INTERVAL = CEQ throttle / 2 µs only on a CEQ vector that
//!   is not the AEQ's (icrdma_hw.c: icrdma_ena_irq);
//! * teardown: GLINT_DYN_CTL(n) = 0 for every vector used
//!   (icrdma_hw.c: icrdma_disable_irq) and GLINT_CEQCTL(i) = 0, before the
//!   AEQ and CEQs are destroyed (DESTROY_AEQ itself clears PFINT_AEQCTL).
//!
//! # The handler (`Device::handle_interrupt`)
//!
//! As Linux's bottom halves (hw.c: irdma_process_ceq, irdma_process_aeq,
//! irdma_dpc): CEQ first, then the AEQ if on that vector, then the vector
//! is re-enabled — nothing is written at the start (the device masks the
//! vector when it fires, A.9). Each CEQE: VALID against the software
//! polarity, advance (polarity flips on wrap), a zero context (scrubbed) is
//! skipped, else CQACK ← CQ id **before** the CQ's `armed` flag is cleared,
//! its event flag set and its waker woken (ctrl.c: irdma_sc_process_ceq,
//! irdma_sc_cq_ack). At most one ring's worth of CEQEs per call. A second
//! caller while one is draining returns at once without re-enabling (the
//! first re-enables when done). It never allocates and never waits for a
//! lock on the CEQ path; the AEQ part is today's
//! `Device::poll_async_events` path (QP errors issue MODIFY_QP and
//! FLUSH_WQES through the CQP), so call the handler from a bottom half (as
//! Linux's tasklet), not from a hard-IRQ context that may have interrupted
//! a CQP holder on the same core. An AEQ pass that consumed something wakes
//! every CQ (software-flushed WRs produce no CQE, hence no CEQE).
//!
//! # Arming (verbs.c: irdma_req_notify_cq; core/cq.c)
//!
//! `Cq::req_notify` issues the hardware arm only when the CQ's `armed`
//! flag goes from unarmed to armed, or to upgrade a solicited arm to
//! next-completion; the handler clears the flag. It returns whether a CQE
//! is already in the ring after arming (IB_CQ_REPORT_MISSED_EVENTS): the
//! device writes a CEQE only for CQEs written after the arm, so a CQE that
//! landed between the last poll and the arm is found only by this check.

#[cfg(not(all(test, loom)))]
use core::cell::UnsafeCell;
use core::task::Waker;

use irdma_hal::regs;

use crate::uk::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering};

#[cfg(all(test, loom))]
use loom::sync::atomic::AtomicUsize;

#[cfg(not(all(test, loom)))]
use core::sync::atomic::AtomicUsize;

/// The opt-in interrupt configuration given at probe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct IrqConfig {
    /// Entry `msix.first` carries both the AEQ and CEQ 0 (Linux's "shared"
    /// mode, spec A.8). Forced when the LAN side gave one vector.
    pub shared: bool,
    /// CEQ interrupt throttle in µs (OOT configfs `ceq_itr`, 0–8160, 0 =
    /// off, the default): GLINT_DYN_CTL INTERVAL = this / 2 on the CEQ
    /// vector when it is not the AEQ's (icrdma_hw.c: icrdma_ena_irq).
    pub ceq_itr_us: u16,
}

/// Largest CEQ throttle (µs): INTERVAL is 12 bits of 2 µs (configfs.c:
/// ceq_itr_store caps at 8160).
pub const MAX_CEQ_ITR_US: u16 = 8160;

/// The vectors in use once interrupts are configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct IrqVectors {
    /// MSI-X table index carrying the AEQ.
    pub aeq: u16,
    /// MSI-X table index carrying CEQ 0 (= `aeq` when shared).
    pub ceq: u16,
}

/// What one `Device::handle_interrupt` call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct IrqReport {
    /// CEQEs consumed (scrubbed ones included).
    pub ceqes: u32,
    /// CQs signalled (event flag set, waker woken).
    pub cqs: u32,
    /// CEQEs whose context named no CQ id of this driver (ignored).
    pub unknown: u32,
    /// AEQEs were consumed (and acted on) on this vector.
    pub aeq: bool,
    /// A CEQE named the CCQ: a CQP op completed (spec A.6).
    pub ccq: bool,
    /// Another call was draining this vector: nothing done, the vector is
    /// re-enabled by that call.
    pub busy: bool,
    /// The vector was re-enabled.
    pub reenabled: bool,
}

/// Counters the handler keeps (all calls).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct IrqStats {
    /// Handler calls on a configured vector.
    pub interrupts: u64,
    /// CEQEs consumed.
    pub ceqes: u64,
    /// CQACK writes.
    pub acks: u64,
    /// CEQEs that named the CCQ (a CQP completion raised CEQ 0).
    pub ccq_events: u64,
}

/// Per-CQ slots: one per CQ id (the device's `MAX_CQS`, checked there).
pub(crate) const CQ_SLOTS: usize = 256;

pub(crate) const UNARMED: u32 = 0;
pub(crate) const ARMED_SOLICITED: u32 = 1;
pub(crate) const ARMED_NEXT: u32 = 2;

/// Per CQ id: the kernel's `armed` flag and `last_notify`, the event flag
/// the handler sets, and the waker it wakes.
pub(crate) struct CqIrq {
    pub(crate) armed: AtomicU32,
    pub(crate) event: AtomicBool,
    pub(crate) waker: AtomicWaker,
}

/// The CEQ consumer: head and expected polarity, `head << 1 | polarity`.
/// Moved only by the holder of [`IrqState::busy`].
pub(crate) struct CeqCons(pub(crate) AtomicU64);

/// Most CEQs the driver creates (CEQ 0 included): one per MSI-X vector
/// given, capped here (bounded, allocation-free state) and by the device's
/// MAX_CEQS (hw.c: irdma_setup_ceqs).
pub const MAX_IRQ_CEQS: usize = 8;

/// One CEQ as the handler sees it: a view of its ring, its consumer and
/// the vector it reports to.
pub(crate) struct CeqIrq {
    /// View of the CEQ's ring (set when interrupts are configured; emptied
    /// at teardown before the ring goes).
    pub(crate) view: crate::uk::QueueMem<'static>,
    pub(crate) entries: u32,
    pub(crate) cons: CeqCons,
    /// MSI-X table index of this CEQ.
    pub(crate) vector: u16,
    /// Held by the one call draining this CEQ's vector (try-lock only).
    pub(crate) busy: AtomicBool,
}

impl CeqIrq {
    fn new() -> Self {
        CeqIrq {
            view: crate::uk::QueueMem::empty(),
            entries: 0,
            cons: CeqCons(AtomicU64::new(1)),
            vector: 0,
            busy: AtomicBool::new(false),
        }
    }
}

/// Everything interrupt-related the device keeps.
pub(crate) struct IrqState {
    pub(crate) vectors: Option<IrqVectors>,
    pub(crate) itr_us: u16,
    /// CEQ `i` in slot `i`; the first `nceqs` are in use.
    pub(crate) ceqs: [CeqIrq; MAX_IRQ_CEQS],
    pub(crate) nceqs: usize,
    /// The `busy` flag of the AEQ's vector when no CEQ shares it.
    pub(crate) aeq_busy: AtomicBool,
    pub(crate) cqs: [CqIrq; CQ_SLOTS],
    pub(crate) interrupts: AtomicU64,
    pub(crate) ceqes: AtomicU64,
    pub(crate) acks: AtomicU64,
    /// CEQEs that named the CCQ.
    pub(crate) ccq_events: AtomicU64,
}

impl IrqState {
    pub(crate) fn new() -> Self {
        IrqState {
            vectors: None,
            itr_us: 0,
            ceqs: core::array::from_fn(|_| CeqIrq::new()),
            nceqs: 0,
            aeq_busy: AtomicBool::new(false),
            cqs: core::array::from_fn(|_| CqIrq {
                armed: AtomicU32::new(UNARMED),
                event: AtomicBool::new(false),
                waker: AtomicWaker::new(),
            }),
            interrupts: AtomicU64::new(0),
            ceqes: AtomicU64::new(0),
            acks: AtomicU64::new(0),
            ccq_events: AtomicU64::new(0),
        }
    }

    pub(crate) fn cq(&self, id: u32) -> Option<&CqIrq> {
        self.cqs.get(id as usize)
    }

    /// The CEQs in use.
    pub(crate) fn live_ceqs(&self) -> &[CeqIrq] {
        self.ceqs.get(..self.nceqs).unwrap_or(&[])
    }
}

/// The CQ context the CCQ is created with when interrupts are on, so its
/// CEQEs are told from those of CQs (whose context is their id < 2^19);
/// any non-zero 63-bit cookie works (spec interrupts.md A.2 step 2).
pub(crate) const CCQ_CTX: u64 = 0x4343_5100_0000;

/// The GLINT_DYN_CTL value that enables vector `n` (icrdma_hw.c:
/// icrdma_ena_irq): INTENA, CLEARPBA, ITR_INDX 0, INTERVAL in 2 µs units.
pub(crate) fn ena_value(interval_us: u16) -> u32 {
    use regs::field::{DYN_CTL_CLEARPBA, DYN_CTL_INTENA, DYN_CTL_INTERVAL};
    let iv = u64::from(interval_us.min(MAX_CEQ_ITR_US) / 2);
    (DYN_CTL_INTENA.prep(1) | DYN_CTL_CLEARPBA.prep(1) | DYN_CTL_INTERVAL.prep(iv)) as u32
}

/// GLINT_CEQCTL / PFINT_AEQCTL value: CAUSE_ENA, MSIX_INDX, ITR_INDX 3
/// (icrdma_hw.c: icrdma_cfg_ceq; ctrl.c: irdma_cfg_aeq).
pub(crate) fn cause_value(vector: u16) -> u32 {
    use regs::field::{INTCTL_CAUSE_ENA, INTCTL_ITR_INDX, INTCTL_MSIX_INDX};
    (INTCTL_CAUSE_ENA.prep(1) | INTCTL_MSIX_INDX.prep(vector.into()) | INTCTL_ITR_INDX.prep(3))
        as u32
}

/// CEQE VALID [63]; the CQ context is [62:0] (spec control-path §8.1;
/// defs.h: IRDMA_CEQE_VALID, IRDMA_CEQE_CQCTX).
pub(crate) const CEQE_VALID: u64 = 1 << 63;

const WAITING: usize = 0;
const REGISTERING: usize = 1;
const WAKING: usize = 2;

/// A `Waker` slot one task registers in and an interrupt handler wakes,
/// without a lock and without waiting (the same state machine as
/// `futures`' `AtomicWaker`, written here for no_std without
/// dependencies). `wake` from an interrupt that preempted `register` on the
/// same core never spins: `register` sees the WAKING bit and wakes itself.
pub struct AtomicWaker {
    state: AtomicUsize,
    waker: Cell,
}

#[cfg(all(test, loom))]
type Cell = loom::cell::UnsafeCell<Option<Waker>>;
#[cfg(not(all(test, loom)))]
type Cell = UnsafeCell<Option<Waker>>;

// SAFETY: the `waker` cell is only accessed by the one thread that moved
// `state` from WAITING to REGISTERING (in `register`) or set WAKING from
// WAITING (in `take`); those transitions exclude each other, and `Waker`
// is `Send + Sync`.
unsafe impl Sync for AtomicWaker {}
// SAFETY: as above; the slot owns a `Waker`, which is `Send`.
unsafe impl Send for AtomicWaker {}

impl Default for AtomicWaker {
    fn default() -> Self {
        Self::new()
    }
}

impl AtomicWaker {
    /// An empty slot.
    #[cfg(not(all(test, loom)))]
    pub const fn new() -> Self {
        AtomicWaker { state: AtomicUsize::new(WAITING), waker: UnsafeCell::new(None) }
    }

    /// An empty slot.
    #[cfg(all(test, loom))]
    pub fn new() -> Self {
        AtomicWaker { state: AtomicUsize::new(WAITING), waker: Cell::new(None) }
    }

    fn with_slot<R>(&self, f: impl FnOnce(&mut Option<Waker>) -> R) -> R {
        #[cfg(all(test, loom))]
        {
            // SAFETY: see the callers: the state machine gives this thread
            // the slot alone.
            self.waker.with_mut(|p| f(unsafe { &mut *p }))
        }
        #[cfg(not(all(test, loom)))]
        {
            // SAFETY: see the callers: the state machine gives this thread
            // the slot alone.
            f(unsafe { &mut *self.waker.get() })
        }
    }

    /// Stores `w` to be woken by the next [`AtomicWaker::wake`]. If a wake
    /// runs meanwhile, `w` is woken at once instead (no wake-up lost).
    pub fn register(&self, w: &Waker) {
        match self.state.compare_exchange(
            WAITING,
            REGISTERING,
            Ordering::Acquire,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                // The slot is ours (REGISTERING excludes `take`).
                self.with_slot(|s| match s {
                    Some(old) if old.will_wake(w) => {}
                    _ => *s = Some(w.clone()),
                });
                if let Err(actual) = self.state.compare_exchange(
                    REGISTERING,
                    WAITING,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    // A wake came in (state REGISTERING | WAKING): it could
                    // not take the waker, so wake it here.
                    debug_assert_eq!(actual, REGISTERING | WAKING);
                    let w = self.with_slot(|s| s.take());
                    self.state.swap(WAITING, Ordering::AcqRel);
                    if let Some(w) = w {
                        w.wake();
                    }
                }
            }
            // A wake is running now: it may have missed `w`.
            Err(WAKING) => w.wake_by_ref(),
            // Another register (a misuse: one task per slot) is running.
            Err(_) => w.wake_by_ref(),
        }
    }

    /// Takes the registered waker, if any and no register is running.
    pub fn take(&self) -> Option<Waker> {
        match self.state.fetch_or(WAKING, Ordering::AcqRel) {
            WAITING => {
                // The slot is ours (WAKING set from WAITING).
                let w = self.with_slot(|s| s.take());
                self.state.fetch_and(!WAKING, Ordering::Release);
                w
            }
            // A register is running (it wakes, seeing WAKING), or another
            // wake is.
            _ => None,
        }
    }

    /// Wakes the registered waker, if any.
    pub fn wake(&self) {
        if let Some(w) = self.take() {
            w.wake();
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    extern crate std;
    use super::AtomicWaker;
    use core::task::{RawWaker, RawWakerVTable, Waker};
    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicUsize, Ordering};

    /// A wake counter for [`counting`] (leaked: the waker holds it as a
    /// `'static` pointer) and an empty waker slot, both new in each
    /// execution of the model.
    fn fresh() -> (&'static AtomicUsize, Arc<AtomicWaker>) {
        let count = std::boxed::Box::leak(std::boxed::Box::new(AtomicUsize::new(0)));
        (count, Arc::new(AtomicWaker::new()))
    }

    // A waker counting its wakes in a leaked loom atomic.
    fn counting(count: &'static AtomicUsize) -> Waker {
        fn clone(p: *const ()) -> RawWaker {
            RawWaker::new(p, &VTABLE)
        }
        fn wake(p: *const ()) {
            // SAFETY: `p` is the `&'static AtomicUsize` given to `counting`.
            unsafe { &*(p as *const AtomicUsize) }.fetch_add(1, Ordering::SeqCst);
        }
        fn drop(_: *const ()) {}
        static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake, drop);
        // SAFETY: the vtable functions uphold the RawWaker contract for a
        // `&'static` pointer (no ownership, cloning copies the pointer).
        unsafe { Waker::from_raw(RawWaker::new(count as *const _ as *const (), &VTABLE)) }
    }

    /// A task that registers and then checks its condition never misses a
    /// wake that set the condition: either the check sees it or the waker
    /// is woken.
    #[test]
    fn loom_register_then_check_never_misses_a_wake() {
        loom::model(|| {
            let (count, aw) = fresh();
            let flag = Arc::new(loom::sync::atomic::AtomicBool::new(false));
            let (a2, f2) = (aw.clone(), flag.clone());
            let waker_thread = loom::thread::spawn(move || {
                f2.store(true, Ordering::SeqCst);
                a2.wake();
            });
            aw.register(&counting(count));
            let seen = flag.load(Ordering::SeqCst);
            waker_thread.join().unwrap();
            assert!(seen || count.load(Ordering::SeqCst) == 1, "wake-up lost");
        });
    }

    /// Two wakes racing one register: the slot is never used by two
    /// threads at once (loom checks the cell) and at most the registered
    /// waker is woken once per wake that found it.
    #[test]
    fn loom_concurrent_wakes_and_register() {
        loom::model(|| {
            let (count, aw) = fresh();
            let a2 = aw.clone();
            let t = loom::thread::spawn(move || a2.wake());
            aw.register(&counting(count));
            aw.wake();
            t.join().unwrap();
            assert!(count.load(Ordering::SeqCst) >= 1, "the last wake after register woke it");
        });
    }
}
