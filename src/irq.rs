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
//! One CEQ exists (CEQ 0, created at probe; every CQ reports to it). With
//! one vector, or [`IrqConfig::shared`], entry `msix.first` carries the AEQ
//! **and** CEQ 0; otherwise entry `first` carries the AEQ and `first + 1`
//! CEQ 0. More CEQs (one per further vector) are not created yet.
//!
//! # What is programmed
//!
//! * GLINT_CEQCTL(0) = CAUSE_ENA | MSIX_INDX | ITR_INDX 3, then the vector
//!   enabled (icrdma_hw.c: icrdma_cfg_ceq, icrdma_ena_irq);
//! * PFINT_AEQCTL = CAUSE_ENA | MSIX_INDX | ITR_INDX 3, then its vector
//!   enabled unless shared with CEQ 0 (ctrl.c: irdma_cfg_aeq; hw.c:
//!   irdma_cfg_aeq_vector);
//! * enable / re-enable: GLINT_DYN_CTL(n) = INTENA | CLEARPBA | ITR_INDX 0
//!   | INTERVAL, INTERVAL = CEQ throttle / 2 µs only on a CEQ vector that
//!   is not the AEQ's (icrdma_hw.c: icrdma_ena_irq);
//! * teardown: GLINT_DYN_CTL(n) = 0 for every vector used
//!   (icrdma_hw.c: icrdma_disable_irq) and GLINT_CEQCTL(0) = 0, before the
//!   AEQ and CEQ are destroyed (DESTROY_AEQ itself clears PFINT_AEQCTL).
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

/// Everything interrupt-related the device keeps.
pub(crate) struct IrqState {
    pub(crate) vectors: Option<IrqVectors>,
    pub(crate) itr_us: u16,
    /// View of CEQ 0's ring (set when interrupts are configured; emptied
    /// at teardown before the ring goes).
    pub(crate) ceq_view: crate::uk::QueueMem<'static>,
    pub(crate) ceq_entries: u32,
    pub(crate) cons: CeqCons,
    /// Held by the one call draining the CEQ/AEQ (try-lock only).
    pub(crate) busy: AtomicBool,
    pub(crate) cqs: [CqIrq; CQ_SLOTS],
    pub(crate) interrupts: AtomicU64,
    pub(crate) ceqes: AtomicU64,
    pub(crate) acks: AtomicU64,
}

impl IrqState {
    pub(crate) fn new() -> Self {
        IrqState {
            vectors: None,
            itr_us: 0,
            ceq_view: crate::uk::QueueMem::empty(),
            ceq_entries: 0,
            cons: CeqCons(AtomicU64::new(1)),
            busy: AtomicBool::new(false),
            cqs: core::array::from_fn(|_| CqIrq {
                armed: AtomicU32::new(UNARMED),
                event: AtomicBool::new(false),
                waker: AtomicWaker::new(),
            }),
            interrupts: AtomicU64::new(0),
            ceqes: AtomicU64::new(0),
            acks: AtomicU64::new(0),
        }
    }

    pub(crate) fn cq(&self, id: u32) -> Option<&CqIrq> {
        self.cqs.get(id as usize)
    }
}

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
            let count: &'static AtomicUsize =
                std::boxed::Box::leak(std::boxed::Box::new(AtomicUsize::new(0)));
            let aw = Arc::new(AtomicWaker::new());
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
            let count: &'static AtomicUsize =
                std::boxed::Box::leak(std::boxed::Box::new(AtomicUsize::new(0)));
            let aw = Arc::new(AtomicWaker::new());
            let a2 = aw.clone();
            let t = loom::thread::spawn(move || a2.wake());
            aw.register(&counting(count));
            aw.wake();
            t.join().unwrap();
            assert!(count.load(Ordering::SeqCst) >= 1, "the last wake after register woke it");
        });
    }
}
