//! The device: bring-up (`Device::probe`), the resources every verbs object
//! draws from, and teardown.
//!
//! [`Device::probe`] follows spec control-path §9.2 steps 1–13 in order:
//! firmware ready, doorbell size, CQP create, QUERY_RDMA_FEATURES,
//! QUERY_FPM_VAL → [`size_hmc`] → COMMIT_FPM_VAL, direct 2 MiB backing for
//! every non-PBLE SD with UPDATE_PE_SDS (≤ 11 entries per op, overflow buffer
//! through the CQP engine), SHMC_PAGES_ALLOCATED, CCQ, CEQ 0, the PBLE pool
//! with its first chunk backed, the AEQ, and the work-scheduler tree whose
//! leaf gives the queue-set handle QP contexts carry. If a step fails,
//! everything created so far is torn down in Linux's order (hw.c:
//! irdma_ctrl_deinit_hw: AEQ, CEQ 0, CCQ, HMC SDs, CQP) and only then is the
//! DMA memory freed — what the device did not confirm it released is
//! quarantined instead (see the crate docs' "Safety contract"); the
//! [`ProbeError`] names the step and carries the hardware major/minor codes
//! when the device gave some.
//!
//! Locking: the CQP sits behind a [`spin::Mutex`] shared by every control
//! call; resource tables behind another; the AEQ behind a third (order:
//! AEQ → resources → CQP). Nothing on the data path (`post_send`,
//! `post_recv`, `poll_cq`) takes any of them — it only reads the per-QP
//! error flags, which are atomics.

pub(crate) mod compl;
pub(crate) mod events;
mod hmc;
mod irq;
mod quarantine;

use core::error::Error;
use core::fmt::{self, Display, Formatter};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use core::time::Duration;

use irdma_hal::cqp::{
    AEQE_BYTES, CCQ_CQE_BYTES, CQP_WQE_BYTES, FPM_BUF_BYTES, SDBUF_BYTES_PER_SLOT,
};
use irdma_hal::regs;
use irdma_hal::{Bar, BufferDirection, Dma, DmaError, Hal, PAGE_SIZE};

use crate::Phrase;
use crate::cqp::cmd::{
    CommitFpmVal, CreateAeq, CreateCeq, DestroyAeq, DestroyCeq, Limits, QueryFpmVal,
    QueryRdmaFeatures, QueueAddr, ShmcPagesAllocated, WsNode, WsNodeOp,
};
use crate::cqp::ctx::{HMC_OBJ_COUNT, encode_fpm_commit};
use crate::cqp::decode::{DecodeError, FpmCommit, FpmQuery, RingConsumer};
use crate::cqp::engine::{CcqConfig, Completion, CqpError, Timeouts, device_may_own};
use crate::cqp::{Cqp, CqpConfig};
use crate::lan::{LanError, LanInfo, LanInfoError, LanOps};
use crate::res::bitmap::IdBitmap;
use crate::res::hmc::Footprint;
use crate::res::pble::PblePool;
use crate::res::{
    FpmCaps, HmcError, HmcLayout, HmcObj, IdError, PbleError, Profile, StagTable, size_hmc,
};

/// Defined with the flight recorder's events (a plain type below the device).
pub use crate::flight::ProbeStep;
pub use hmc::MAX_BACKED_SDS;
pub(crate) use hmc::{BackError, SdStore};
pub(crate) use quarantine::Quarantine;
pub use quarantine::{QUARANTINE_SLOTS, Quarantined};

/// QP ids the driver tracks (committed counts above are left unused).
pub const MAX_QPS: u32 = 256;
/// CQ ids the driver tracks.
pub const MAX_CQS: u32 = 256;
/// PD ids the driver hands out.
pub const MAX_PDS: u32 = 4096;
/// MR (STag) indexes the driver tracks.
pub const MAX_MRS: u32 = 4096;
/// ARP-cache entries the driver tracks.
pub const MAX_ARP: u32 = 256;
/// Free/used runs the PBLE pool tracks.
pub const PBLE_RUNS: usize = 1024;
/// Fast-register MRs ([`crate::verbs::FastRegMr`]) a device keeps at once:
/// each has a record the safe post paths check every REG_MR WR against.
pub const MAX_FR_MRS: usize = 512;

pub(crate) const QP_WORDS: usize = (MAX_QPS / 64) as usize;
pub(crate) const CQ_WORDS: usize = (MAX_CQS / 64) as usize;
pub(crate) const PD_WORDS: usize = (MAX_PDS / 64) as usize;
pub(crate) const MR_WORDS: usize = (MAX_MRS / 64) as usize;
pub(crate) const ARP_WORDS: usize = (MAX_ARP / 64) as usize;
/// Most address handles the driver tracks (ids below the committed FSIAV
/// count and this).
pub const MAX_AHS: u32 = 1024;
pub(crate) const AH_WORDS: usize = (MAX_AHS / 64) as usize;
/// Rings a resize replaced that may still hold CQEs, oldest first (uverbs.c
/// / verbs.c `resize_list`). A further resize while this many are pending
/// is refused with [`VerbsError::InvalidState`]; polling retires them.
/// Defined with the device's resize list; re-exported as
/// `verbs::MAX_PENDING_RESIZES`.
///
/// [`VerbsError::InvalidState`]: crate::verbs::VerbsError::InvalidState
pub const MAX_PENDING_RESIZES: usize = 4;

/// Entries of the static neighbour table ([`Device::add_neighbour`]).
pub const MAX_NEIGHBOURS: usize = 64;

/// Bytes of the QUERY_RDMA_FEATURES buffer (Linux: 34 entries × 8; spec §4.3.23).
const FEATURES_BYTES: usize = 272;
/// Offsets in the scratch page: FPM query, FPM commit, features.
const SCRATCH_QUERY: usize = 0;
const SCRATCH_COMMIT: usize = 256;
const SCRATCH_FEATURES: usize = 512;

/// Why a step failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ProbeCause {
    /// A CQP operation (or the CQP itself) failed; hardware codes inside.
    Cqp(CqpError),
    /// DMA memory could not be had.
    Dma(DmaError),
    /// The firmware never reported ready; the last CPUSTATUS values.
    FirmwareNotReady([u32; 3]),
    /// PE_DB_SIZE is neither 1 nor 2 (doorbells disabled); the register value.
    DoorbellDisabled(u32),
    /// A device buffer did not decode.
    Decode(DecodeError),
    /// HMC sizing or layout failed.
    Hmc(HmcError),
    /// The PBLE pool could not be set up.
    Pble(PbleError),
    /// The LAN information is unusable.
    Lan(LanInfoError),
    /// A LAN-side call ([`LanOps`]) failed.
    LanOp(LanError),
    /// An id table could not be sized.
    Ids(IdError),
    /// More SDs than [`MAX_BACKED_SDS`].
    Capacity,
}

/// A failed probe: where and why. Everything created before was torn down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ProbeError {
    /// The step.
    pub step: ProbeStep,
    /// The cause.
    pub cause: ProbeCause,
}

impl ProbeError {
    /// The hardware (major, minor) codes, when the device reported some.
    pub fn hw_codes(&self) -> Option<(u16, u16)> {
        match self.cause {
            ProbeCause::Cqp(e) => cqp_codes(e),
            _ => None,
        }
    }
}

/// Why a teardown was not clean. It always finishes; memory the device
/// confirmed it released is freed, the rest is quarantined (see
/// [`CloseError::Quarantined`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CloseError {
    /// A CQP destroy op failed or the CQP did not answer.
    Cqp(CqpError),
    /// A LAN-side call failed.
    Lan(LanError),
    /// Memory the device may still use was not freed: it is leaked on
    /// purpose (only a function reset makes it reusable; see
    /// [`Device::close_after_reset`]). Reported in preference to the
    /// failure that caused it, which the failing call already returned.
    Quarantined(Quarantined),
}

/// The hardware (major, minor) codes of a CQP error, if any.
pub fn cqp_codes(e: CqpError) -> Option<(u16, u16)> {
    match e {
        CqpError::OpFailed { major, minor, .. } | CqpError::CreateFailed { major, minor } => {
            Some((major, minor))
        }
        _ => None,
    }
}

fn fail<T>(step: ProbeStep, cause: ProbeCause) -> Result<T, ProbeError> {
    Err(ProbeError { step, cause })
}

impl From<BackError> for ProbeCause {
    fn from(e: BackError) -> Self {
        match e {
            BackError::Dma(d) => ProbeCause::Dma(d),
            BackError::Cqp(c) => ProbeCause::Cqp(c),
            BackError::Capacity => ProbeCause::Capacity,
        }
    }
}

/// How to bring the device up, beyond the [`Profile`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeOptions {
    /// CQP SQ size (power of two 4..=2048; Linux 2048).
    pub cqp_sq_size: u32,
    /// CQP wait budgets (Linux's by default, spec §2.8).
    pub timeouts: Timeouts,
    /// How long to wait for the firmware (Linux: 15 reads 100 ms apart).
    pub fw_ready_timeout: Duration,
    /// First STag key byte (Linux draws a random one). `None` (the default):
    /// derived per device at probe by [`crate::res::default_key_seed`] from
    /// `H::now()` and the function's identity (PF id, VSI, MAC), so keys
    /// differ across boots and between the devices of one boot. `Some` for a
    /// value of the caller's (e.g. from a hardware RNG).
    pub stag_key_seed: Option<u8>,
    /// Interrupt-driven completion (issue #31, [`crate::irq`]): `Some`
    /// creates CEQs 1.. (one per further vector), programs the CEQ and
    /// AEQ causes onto `LanInfo::msix` vectors and enables them at the end
    /// of probe; teardown disables them and destroys the CEQs. `None`
    /// (the default): polled mode, nothing interrupt-related is written.
    /// `Some` with `msix.count == 0`, or `msix.first` within two of the
    /// end of the GLINT_DYN_CTL array, fails probe with
    /// `LanInfoError::NoVectors`.
    pub interrupts: Option<crate::irq::IrqConfig>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            cqp_sq_size: 2048,
            timeouts: Timeouts::default(),
            fw_ready_timeout: Duration::from_millis(
                regs::PE_READY_MAX_READS as u64 * regs::PE_READY_INTERVAL_MS,
            ),
            stag_key_seed: None,
            interrupts: None,
        }
    }
}

/// DMA memory the device holds (bytes), for [`Device::footprint`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DeviceFootprint {
    /// HMC sizing: static SDs and the PBLE pool's first/maximum backing.
    pub hmc: Footprint,
    /// CQP SQ, host context, SD overflow buffer, CCQ ring and shadow, CEQ 0,
    /// AEQ and the scratch page for the FPM/feature buffers.
    pub control_bytes: u64,
    /// Bytes held right now (static SDs, PBLE chunks backed so far,
    /// control, and `quarantined.bytes`).
    pub current_bytes: u64,
    /// Memory and ids kept because the device may still use them (a timed
    /// out or refused destroy, a timed-out create); see [`Quarantined`].
    pub quarantined: Quarantined,
    /// The device needs a function reset ([`Device::needs_reset`]).
    pub needs_reset: bool,
}

/// What the device can do (`ib_device_attr`, the part callers need).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DeviceCaps {
    /// QP ids usable by callers (committed, capped by [`MAX_QPS`]).
    pub max_qp: u32,
    /// CQ ids usable (committed, capped by [`MAX_CQS`]).
    pub max_cq: u32,
    /// MR indexes usable.
    pub max_mr: u32,
    /// PDs.
    pub max_pd: u32,
    /// Largest WR count of one work queue (GEN_2: 32768 quanta, spec
    /// data-path §3.3; the reported count depends on the SGE count).
    pub max_qp_wr_quanta: u32,
    /// SGEs per WR (GEN_2: 13; Linux's module default lowers it to 6).
    pub max_sge: u32,
    /// Inline bytes (101).
    pub max_inline: u32,
    /// CQEs per CQ (spec §2.2: 1048575).
    pub max_cqe: u32,
    /// Outstanding RDMA READs per QP (GEN_2: 8/8).
    pub max_ord: u8,
    /// Incoming RDMA READs per QP.
    pub max_ird: u8,
    /// Pages of one MR (spec §5.5; bounded by the PBLE pool too).
    pub max_mr_pages: u32,
    /// Largest MR in bytes (2^45).
    pub max_mr_size: u64,
}

/// One QP as the control path tracks it (for AEQ-driven MODIFY_QP(ERROR)).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct QpRecord {
    pub live: bool,
    pub ctx_pa: u64,
    pub shadow_pa: u64,
    /// QPTYPE of its CQP ops (0 = not recorded: RoCE RC).
    pub qp_type: u8,
}

/// One live fast-register MR as the post paths check REG_MR WRs against
/// it (issue #12): its STag index, its own PBL (level-1 run or level-2
/// root), and how many pages `map_pages` / `map_mr_pages` armed for the
/// next FAST_REG.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FrRecord {
    pub stag_idx: u32,
    /// The level-1 run's first PBLE, or the level-2 root's.
    pub first_pble: u32,
    /// PBL level: 1 or 2.
    pub level: u8,
    /// Level 2: a fingerprint of the leaf runs' first indexes, in order, so
    /// a leaf list read back from the root PBLEs is checked before the rw
    /// path writes through it (0 for level 1).
    pub leaf_tag: u64,
    pub max_pages: u32,
    /// Pages written by the last map, valid for exactly one REG_MR WR (0:
    /// nothing armed; a REG_MR WR is refused).
    pub mapped: u32,
}

/// One ARP-cache entry and how many QPs use it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ArpSlot {
    pub mac: [u8; 6],
    pub refs: u32,
}

/// Id tables sized from the commit.
pub(crate) struct Ids {
    pub pds: IdBitmap<PD_WORDS>,
    pub qps: IdBitmap<QP_WORDS>,
    pub cqs: IdBitmap<CQ_WORDS>,
    pub arp_ids: IdBitmap<ARP_WORDS>,
    pub arp: [ArpSlot; MAX_ARP as usize],
    pub stags: StagTable<MR_WORDS>,
    pub pble: PblePool<PBLE_RUNS>,
    pub qp_rec: [QpRecord; MAX_QPS as usize],
    /// Live QPs (send + receive) completing to each CQ: a CQ with users is
    /// not destroyed (typed refusal; its `Drop` defers the destroy).
    pub cq_refs: [u16; MAX_CQS as usize],
    /// Live QPs and MRs of each PD: its id is not reused while it has users.
    pub pd_refs: [u16; MAX_PDS as usize],
    /// PDs dropped while in use: the id is freed when the last user goes.
    pub pd_orphan: [u64; PD_WORDS],
    /// Live fast-register MRs, sorted by STag index.
    pub fr: heapless::Vec<FrRecord, MAX_FR_MRS>,
    /// Address-handle ids (index 0 reserved).
    pub ah_ids: IdBitmap<AH_WORDS>,
    /// QP 1 (GSI) is live.
    pub gsi: bool,
    /// The static neighbour table: IP → MAC.
    pub neigh: heapless::Vec<(crate::lan::IpAddr, [u8; 6]), MAX_NEIGHBOURS>,
}

/// A CQ dropped while QPs still completed to it: destroyed when the last
/// of them is (or at teardown). Its memory stays with the device till then:
/// the current ring, the shadow area and every ring a resize replaced that
/// was not yet retired (the device holds the CQ, and so every ring it was
/// given for it, until DESTROY_CQ completes; issue #28 item 5).
pub(crate) struct DeferredCq<H: Hal> {
    pub cmd: crate::cqp::cmd::CreateCq,
    pub ring: Dma<H>,
    pub shadow: Dma<H>,
    pub old: heapless::Vec<Dma<H>, MAX_PENDING_RESIZES>,
}

impl<H: Hal> DeferredCq<H> {
    /// Every buffer of the CQ, for the quarantine when its DESTROY_CQ
    /// failed (or never ran).
    pub(crate) fn into_bufs(self) -> impl Iterator<Item = Dma<H>> {
        [self.ring, self.shadow].into_iter().chain(self.old)
    }
}

/// CQs whose destroy waits for their QPs; beyond that, quarantined.
pub(crate) const DEFERRED_CQS: usize = 16;

/// Everything behind the resource lock.
pub(crate) struct Resources<H: Hal> {
    pub sds: SdStore<H>,
    pub ids: Option<Ids>,
    pub deferred_cqs: heapless::Vec<DeferredCq<H>, DEFERRED_CQS>,
}

pub(crate) struct Ceq<H: Hal> {
    /// Owned for the device; never polled (CQs are not armed in polled mode).
    pub _ring: Dma<H>,
    pub cmd: CreateCeq,
}

pub(crate) struct AeqRing<H: Hal> {
    pub ring: Dma<H>,
    pub cons: RingConsumer,
    pub cmd: CreateAeq,
    /// Overflow seen (Linux then asks for a reset).
    pub overflowed: bool,
    /// Events a CQ poll consumed (and acted on) that the caller has not
    /// yet read with `Device::poll_async_events`, oldest first.
    pub pending: heapless::Deque<events::AsyncEvent, { events::PENDING_EVENTS }>,
    /// Events dropped from `pending` because it was full.
    pub pending_lost: u32,
}

/// The work-scheduler nodes created at probe (ws.c: irdma_ws_add).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WsTree {
    /// Nodes created, in order: root, VSI, leaf.
    pub created: u8,
    /// TEID of the leaf's queue set in the LAN Tx scheduler, if registered.
    pub qset_teid: Option<u32>,
    /// The VSI's RDMA filter was turned on.
    pub filter_on: bool,
    pub vsi_node: u16,
    pub leaf_node: u16,
    pub qs_handle: u16,
    pub tc: u8,
    pub leaf_enabled: bool,
}

/// A control-path spin lock: [`spin::Mutex`] whose blocking `lock` is one
/// out-of-line copy per guarded type instead of a compare-exchange spin
/// loop inlined at each of the ~60 control-path call sites (code size,
/// issue #16). `try_lock` and `get_mut` stay inline. Not for the data path.
pub(crate) struct CtlLock<T>(spin::Mutex<T>);

impl<T> CtlLock<T> {
    pub(crate) const fn new(v: T) -> Self {
        CtlLock(spin::Mutex::new(v))
    }

    /// Spins until the lock is free, as [`spin::Mutex::lock`].
    #[inline(never)]
    pub(crate) fn lock(&self) -> spin::MutexGuard<'_, T> {
        self.0.lock()
    }

    #[inline]
    pub(crate) fn try_lock(&self) -> Option<spin::MutexGuard<'_, T>> {
        self.0.try_lock()
    }

    #[inline]
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.0.get_mut()
    }
}

/// A brought-up E810 RDMA function. See the module docs.
pub struct Device<H: Hal, B: Bar + Clone> {
    pub(crate) bar: B,
    pub(crate) lan: LanInfo,
    pub(crate) cqp: CtlLock<Option<Cqp<H, B>>>,
    pub(crate) res: CtlLock<Resources<H>>,
    pub(crate) aeq: CtlLock<Option<AeqRing<H>>>,
    /// A view of the AEQ ring (`aeq`'s `ring`, set at probe, emptied at
    /// teardown before the ring goes; empty without an AEQ), read without
    /// the lock by
    /// [`Device::aeq_may_hold_entry`].
    pub(crate) aeq_view: crate::uk::QueueMem<'static>,
    /// Where the AEQ consumer stands, for the lock-free peek: the qword
    /// index of the next AEQE's VALID word (`head * 2 + 1`) shifted left by
    /// one, the expected polarity in bit 0. Written under the `aeq` lock
    /// whenever the consumer moves.
    pub(crate) aeq_next: AtomicU64,
    pub(crate) ceq: Option<Ceq<H>>,
    /// CEQs 1.. (interrupt mode, one per further vector), CEQ `i` at
    /// index `i − 1`; destroyed at teardown before CEQ 0.
    pub(crate) irq_ceqs: heapless::Vec<Ceq<H>, { crate::irq::MAX_IRQ_CEQS - 1 }>,
    /// MAX_CEQS from QUERY_FPM_VAL.
    pub(crate) max_ceqs: u32,
    scratch: Option<Dma<H>>,
    pub(crate) layout: Option<HmcLayout>,
    pub(crate) ws: WsTree,
    pub(crate) qp_err: [AtomicBool; MAX_QPS as usize],
    /// Per live QP: `count << 32 | (send_cq + 1) << 16 | (recv_cq + 1)`,
    /// `count` being its completion context's creation count (the upper
    /// 32 bits of the context, `Device::next_compl_ctx`); 0 = none. Lets a CQ poll tell a
    /// completion of a live QP it cannot resolve (kept for a later poll)
    /// from one of a destroyed QP (dropped) — even when a later QP has the
    /// same number.
    pub(crate) qp_cqs: [AtomicU64; MAX_QPS as usize],
    ctx_gen: AtomicU32,
    /// Per QP number: the completion half of a plain QP, where `Cq::poll`
    /// finds it (`verbs::table`).
    pub(crate) qp_compl: [compl::ComplSlot; MAX_QPS as usize],
    /// How many `qp_err` flags are set (the poll's software flush scans
    /// the table only when some QP is in error).
    qps_in_error: AtomicU32,
    /// Per CQ id: the device reported the CQ unusable (AE
    /// CQ_OPERATION_ERROR / LCE_CQ_CATASTROPHIC, [`Device::cq_failed`]).
    /// Cleared when the id is given to a new CQ. One bit per CQ id.
    cq_dead: [AtomicU64; CQ_WORDS],
    pub(crate) max_ird: u8,
    /// Buffers and ids the device may still use (see [`Quarantine`]).
    /// A leaf lock: nothing else is taken while it is held.
    pub(crate) quarantine: CtlLock<Quarantine<H>>,
    /// A CQP op timed out or something was quarantined: CQP calls now fail
    /// with [`CqpError::NeedsReset`] without touching the device.
    pub(crate) needs_reset: AtomicBool,
    /// The device is gone (surprise removal: CQPTAIL read all-ones). Set
    /// with `needs_reset` and every `qp_err` flag, so a CQ poll completes
    /// every outstanding WR as flushed, in software.
    pub(crate) gone: AtomicBool,
    /// Recent control-path events (see [`crate::flight`]).
    pub(crate) flight: CtlLock<crate::flight::FlightRecorder>,
    /// Interrupt state (vectors, CEQ consumer, per-CQ arm/event/waker).
    pub(crate) irq: crate::irq::IrqState,
    fw_version: (u16, u16),
    features: u64,
    opts: ProbeOptions,
    control_bytes: u64,
}

/// One teardown op on the CQP.
type CqpOp<'a, H, B> = dyn FnMut(&mut Cqp<H, B>) -> Result<(), CqpError> + 'a;

/// One CQP command of teardown, unless the device needs a reset
/// (non-generic over the command: one copy for every destroy).
#[inline(never)]
fn run_cmd<H: Hal, B: Bar>(
    cqp: &mut Option<Cqp<H, B>>,
    nr: &AtomicBool,
    cmd: &dyn crate::cqp::engine::DynCmd,
) -> Result<(), CqpError> {
    match cqp.as_mut() {
        Some(c) if !nr.load(Ordering::Acquire) => c.exec_dyn(cmd, 0).map(|_| ()),
        _ => Err(CqpError::NeedsReset),
    }
}

/// Teardown's bookkeeping of one step's result: whether it succeeded; an
/// error the device may own memory after marks it for reset, and the first
/// error (other than "needs a reset") is kept. Out of line: teardown runs
/// it after every step (code size).
#[inline(never)]
fn note_close(nr: &AtomicBool, first: &mut Option<CloseError>, r: Result<(), CqpError>) -> bool {
    if let Err(e) = r {
        if device_may_own(&e) {
            nr.store(true, Ordering::Release);
        }
        if e != CqpError::NeedsReset {
            first.get_or_insert(CloseError::Cqp(e));
        }
        false
    } else {
        true
    }
}

/// Teardown's fate of memory the device may still use: quarantined, or,
/// after a function reset (the device let go of everything), freed. Out of
/// line: teardown has seven such places (code size).
#[inline(never)]
fn keep_unless_reset<H: Hal>(quarantine: &mut Quarantine<H>, after_reset: bool, d: Dma<H>) {
    if !after_reset {
        quarantine.put(d);
    }
}

/// Teardown's running state: the CQP taken out of the device, whether the
/// device needs a reset, where memory it may still use goes, and the first
/// error.
struct Closing<'a, H: Hal, B: Bar> {
    cqp: Option<Cqp<H, B>>,
    nr: &'a AtomicBool,
    quarantine: &'a mut Quarantine<H>,
    after_reset: bool,
    first: Option<CloseError>,
}

impl<H: Hal, B: Bar> Closing<'_, H, B> {
    /// Books one step's result (see [`note_close`]); whether it succeeded.
    fn note(&mut self, r: Result<(), CqpError>) -> bool {
        note_close(self.nr, &mut self.first, r)
    }

    /// Memory the device may still use (see [`keep_unless_reset`]).
    fn keep(&mut self, d: Dma<H>) {
        keep_unless_reset(self.quarantine, self.after_reset, d);
    }

    /// One CQP command (see [`run_cmd`]), booked; whether it succeeded.
    fn run_cmd(&mut self, cmd: &dyn crate::cqp::engine::DynCmd) -> bool {
        let r = run_cmd(&mut self.cqp, self.nr, cmd);
        self.note(r)
    }

    /// One CQP op, unless the device needs a reset.
    fn run(&mut self, op: &mut CqpOp<'_, H, B>) -> Result<(), CqpError> {
        match self.cqp.as_mut() {
            Some(c) if !self.nr.load(Ordering::Acquire) => op(c),
            _ => Err(CqpError::NeedsReset),
        }
    }

    /// Teardown's last step: after a reset the quarantine is freed; else,
    /// when the device needs a reset or memory is quarantined, the LAN
    /// driver is asked to reset the function. Returns what is still
    /// quarantined, else the first error.
    fn finish(self, ops: Option<&mut (dyn LanOps + '_)>) -> Result<(), CloseError> {
        let quarantine = self.quarantine;
        if self.after_reset {
            quarantine.release_after_reset();
        } else if (self.nr.load(Ordering::Acquire) || !quarantine.is_empty())
            && let Some(o) = ops
        {
            // What Linux does once it marked the function for reset (utils.c:
            // irdma_wait_event → rf->gen_ops.request_reset, main.c:
            // irdma_request_reset → the LAN driver resets the function); a
            // quarantine is only ever given back by a reset, too.
            o.request_reset();
        }
        if !quarantine.is_empty() {
            return Err(CloseError::Quarantined(quarantine.stats()));
        }
        match self.first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Teardown: destroys the CQs whose destroy waited for QPs that never went.
/// The command is built from the record in place; only the rings move out
/// (code size).
fn destroy_deferred_cqs<H: Hal, B: Bar>(res: &mut Resources<H>, cx: &mut Closing<'_, H, B>) {
    while let Some(d) = res.deferred_cqs.last().map(|c| crate::cqp::cmd::destroy_cq_cmd(&c.cmd)) {
        let done = cx.run_cmd(&crate::cqp::engine::Cmd(&d));
        if let Some(c) = res.deferred_cqs.pop()
            && !done
        {
            c.into_bufs().for_each(|d| cx.keep(d));
        }
    }
}

/// Teardown: deletes the work scheduler nodes, leaf, VSI node, root (ws.c:
/// irdma_ws_remove).
fn remove_ws_tree<H: Hal, B: Bar>(ws: &WsTree, vsi: u16, cx: &mut Closing<'_, H, B>) {
    let ids = [(ws.leaf_node, ws.vsi_node, true), (ws.vsi_node, 0, false), (0, 0, false)];
    for (k, (node, parent, leaf)) in ids.iter().enumerate() {
        if (ws.created as usize) < ids.len() - k {
            continue;
        }
        let del = WsNode {
            op: WsNodeOp::Delete,
            node_id: *node,
            parent_id: *parent,
            vsi,
            leaf: *leaf,
            enable: false,
            prio_type: 1,
            tc: if *leaf { ws.tc } else { 0 },
            weight: 1,
        };
        cx.run_cmd(&crate::cqp::engine::Cmd(&del));
    }
}

/// Teardown: destroys the AEQ, the interrupt CEQs 1.. and CEQ 0; each ring
/// is freed only after the device confirmed its destroy, otherwise kept.
fn destroy_event_queues<H: Hal, B: Bar, const N: usize>(
    aeq: &mut Option<AeqRing<H>>,
    irq_ceqs: &mut heapless::Vec<Ceq<H>, N>,
    ceq: &mut Option<Ceq<H>>,
    cx: &mut Closing<'_, H, B>,
) {
    if let Some(a) = aeq.as_ref() {
        let d =
            DestroyAeq { elem_cnt: a.cmd.elem_cnt, mem: a.cmd.mem, pasid_valid: false, pasid: 0 };
        let done = cx.run_cmd(&crate::cqp::engine::Cmd(&d));
        if let Some(ring) = aeq.take().map(|a| a.ring)
            && !done
        {
            cx.keep(ring);
        }
    }
    // CEQs 1.. before CEQ 0 (hw.c: irdma_del_ceqs, then irdma_del_ceq_0),
    // last created first.
    while let Some(c) = irq_ceqs.pop() {
        destroy_ceq(c, cx);
    }
    if let Some(c) = ceq.take() {
        destroy_ceq(c, cx);
    }
}

/// Teardown: DESTROY_CEQ for one CEQ; its ring is freed only if the device
/// confirmed, otherwise quarantined.
fn destroy_ceq<H: Hal, B: Bar>(c: Ceq<H>, cx: &mut Closing<'_, H, B>) {
    let d = DestroyCeq {
        ceq_id: c.cmd.ceq_id,
        elem_cnt: c.cmd.elem_cnt,
        mem: c.cmd.mem,
        tph_en: false,
        pasid_valid: false,
        pasid: 0,
    };
    if !cx.run_cmd(&crate::cqp::engine::Cmd(&d)) {
        cx.keep(c._ring);
    }
}

/// Teardown: destroys the CCQ (its memory stays in the engine until
/// [`close_cqp`] hands it back) and clears every SD. Returns whether the
/// device released the SDs.
fn stop_ccq_and_sds<H: Hal, B: Bar>(sds: &mut SdStore<H>, cx: &mut Closing<'_, H, B>) -> bool {
    let r = cx.run(&mut |c| c.destroy_ccq());
    cx.note(r);
    let mut sds_released = false;
    if !sds.sds.is_empty() {
        let r = cx.run(&mut |c| sds.clear_all(c));
        sds_released = cx.note(r);
    }
    sds_released
}

/// Teardown: destroys the CQP and takes back its memory (abandoned, all
/// kept, once the device needs a reset).
fn close_cqp<H: Hal, B: Bar>(cx: &mut Closing<'_, H, B>) {
    if let Some(c) = cx.cqp.take() {
        let (nr, quarantine, after_reset) = (cx.nr, &mut *cx.quarantine, cx.after_reset);
        let mut keep = |d: Dma<H>| keep_unless_reset(quarantine, after_reset, d);
        if nr.load(Ordering::Acquire) {
            c.abandon_into(&mut keep);
        } else {
            let r = c.destroy_into(&mut keep);
            note_close(nr, &mut cx.first, r);
        }
    }
}

/// Teardown, once nothing the device knows of is left (or it is kept):
/// forgets the ids, frees or keeps the SD backing pages, and keeps the
/// FPM/feature scratch buffer when the device needs a reset.
fn free_device_memory<H: Hal, B: Bar>(
    res: &mut Resources<H>,
    scratch: &mut Option<Dma<H>>,
    sds_released: bool,
    cx: &mut Closing<'_, H, B>,
) {
    res.ids = None;
    // Two loops, not one with the test inside (code size: LLVM
    // unswitched it into two copies of the whole body).
    if sds_released {
        while res.sds.sds.pop().is_some() {}
    } else {
        while let Some(b) = res.sds.sds.pop() {
            cx.keep(b.mem);
            if let Some(p) = b.pd_page {
                cx.keep(p);
            }
        }
    }
    if let Some(s) = scratch.take()
        && cx.nr.load(Ordering::Acquire)
    {
        // The device writes the FPM/feature buffers: an op on them may
        // not have finished.
        cx.keep(s);
    }
}

fn pages_bytes(bytes: usize) -> u64 {
    (bytes.div_ceil(PAGE_SIZE).max(1) * PAGE_SIZE) as u64
}

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// Brings the device up with default [`ProbeOptions`]. See the module docs.
    ///
    /// # Example
    ///
    /// ```
    /// # use irdma::prelude::*;
    /// # use irdma_testkit::{FakeHal, ModelBar};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let bar = ModelBar::standalone(mock_bar::Config::default());
    /// # let lan = LanInfo::single_tc(0, 6, [2, 0, 0, 0, 0, 0x0a], 1500);
    /// // On hardware: `unsafe { MmioBar::new(bar0, len) }` and your `Hal`.
    /// let dev: Device<FakeHal, ModelBar> = Device::probe(bar, lan, Profile::SMALL)?;
    /// println!("firmware {:?}, {} bytes of DMA", dev.fw_version(), dev.footprint().current_bytes);
    /// dev.close()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn probe(bar: B, lan: LanInfo, profile: Profile) -> Result<Self, ProbeError> {
        Self::probe_with(bar, lan, profile, ProbeOptions::default())
    }

    /// Brings the device up (spec control-path §9.2 steps 1–13). The queue
    /// set of the work-scheduler leaf is not registered with the LAN Tx
    /// scheduler and the VSI's RDMA filter is not touched: use
    /// [`Device::probe_with_lan`] where a LAN side exists.
    pub fn probe_with(
        bar: B,
        lan: LanInfo,
        profile: Profile,
        opts: ProbeOptions,
    ) -> Result<Self, ProbeError> {
        Self::probe_inner(bar, lan, profile, opts, None)
    }

    /// [`Device::probe_with`], plus the LAN-side calls Linux makes (spec
    /// control-path §2.1 rows 23–24, §4.3.20 step 4; main.c:
    /// irdma_lan_register_qset, irdma_probe): the work-scheduler leaf's
    /// queue set is registered with the LAN Tx scheduler before the leaf is
    /// enabled, and the VSI's RDMA filter is turned on last. Close with
    /// [`Device::close_with_lan`] to undo both.
    pub fn probe_with_lan(
        bar: B,
        lan: LanInfo,
        profile: Profile,
        opts: ProbeOptions,
        ops: &mut dyn LanOps,
    ) -> Result<Self, ProbeError> {
        Self::probe_inner(bar, lan, profile, opts, Some(ops))
    }

    fn probe_inner<'o>(
        bar: B,
        lan: LanInfo,
        profile: Profile,
        opts: ProbeOptions,
        mut ops: Option<&mut (dyn LanOps + 'o)>,
    ) -> Result<Self, ProbeError> {
        if let Err(e) = lan.validate() {
            return fail(ProbeStep::LanInfo, ProbeCause::Lan(e));
        }
        // At least one vector, and the two that may be used inside the
        // GLINT_DYN_CTL array.
        if opts.interrupts.is_some()
            && (lan.msix.count == 0
                || u32::from(lan.msix.first) + 2 > u32::from(regs::GLINT_DYN_CTL_COUNT))
        {
            return fail(ProbeStep::LanInfo, ProbeCause::Lan(LanInfoError::NoVectors));
        }
        let mut dev = Device {
            bar: bar.clone(),
            lan,
            cqp: CtlLock::new(None),
            res: CtlLock::new(Resources {
                sds: SdStore::new(lan.pf_id),
                ids: None,
                deferred_cqs: heapless::Vec::new(),
            }),
            aeq: CtlLock::new(None),
            aeq_view: crate::uk::QueueMem::empty(),
            aeq_next: AtomicU64::new(1),
            ceq: None,
            irq_ceqs: heapless::Vec::new(),
            max_ceqs: 1,
            scratch: None,
            layout: None,
            ws: WsTree::default(),
            qp_err: [const { AtomicBool::new(false) }; MAX_QPS as usize],
            cq_dead: [const { AtomicU64::new(0) }; CQ_WORDS],
            qp_cqs: [const { AtomicU64::new(0) }; MAX_QPS as usize],
            ctx_gen: AtomicU32::new(0),
            qp_compl: core::array::from_fn(|_| compl::ComplSlot::new()),
            qps_in_error: AtomicU32::new(0),
            max_ird: 8,
            quarantine: CtlLock::new(Quarantine::new()),
            needs_reset: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            flight: CtlLock::new(crate::flight::FlightRecorder::new()),
            irq: crate::irq::IrqState::new(),
            fw_version: (0, 0),
            features: 0,
            opts,
            control_bytes: 0,
        };
        let r = dev.bring_up(bar, &profile, ops.as_deref_mut());
        let failed_at = r.as_ref().err().map(|e| e.step);
        dev.record(crate::flight::FlightEvent::Probe { failed_at });
        match r {
            Ok(()) => Ok(dev),
            Err(e) => {
                // A step that timed out (UPDATE_PE_SDS, a PBLE chunk, ...)
                // leaves the device's state unknown: nothing it may own is
                // freed by the teardown.
                if let ProbeCause::Cqp(c) = e.cause
                    && device_may_own(&c)
                {
                    *dev.needs_reset.get_mut() = true;
                }
                let _ = dev.teardown(ops, false);
                Err(e)
            }
        }
    }

    /// Records the start of a probe step in the flight recorder.
    fn probe_step(&mut self, step: ProbeStep) {
        self.flight.get_mut().push(crate::flight::FlightEvent::ProbeStep { step });
    }

    fn bring_up<'o>(
        &mut self,
        bar: B,
        profile: &Profile,
        ops: Option<&mut (dyn LanOps + 'o)>,
    ) -> Result<(), ProbeError> {
        let mut step = ProbeStep::FirmwareReady;
        self.bring_up_steps(bar, profile, ops, &mut step)
            .map_err(|cause| ProbeError { step, cause })
    }

    /// Starts bring-up step `s`: the step a failure is reported in, and its
    /// flight-recorder event. Out of line (code size: 14 call sites).
    #[inline(never)]
    fn enter(&mut self, at: &mut ProbeStep, s: ProbeStep) {
        *at = s;
        self.probe_step(s);
    }

    /// The steps of [`Self::bring_up`]; a failure returns its cause only
    /// and `step` says where (the [`ProbeError`] is built once).
    fn bring_up_steps<'o>(
        &mut self,
        bar: B,
        profile: &Profile,
        mut ops: Option<&mut (dyn LanOps + 'o)>,
        step: &mut ProbeStep,
    ) -> Result<(), ProbeCause> {
        use ProbeStep as S;
        self.enter(step, S::FirmwareReady);
        self.wait_firmware_ready(&bar)?;
        self.enter(step, S::DoorbellSize);
        Self::check_doorbell_size(&bar)?;
        self.enter(step, S::CqpCreate);
        self.create_cqp(bar)?;
        self.enter(step, S::QueryFeatures);
        let (layout, max_ceqs) = self.size_and_commit_hmc(profile, step)?;
        let qp_cnt = layout.object(HmcObj::Qp).cnt;
        let cq_cnt = layout.object(HmcObj::Cq).cnt;
        let limits = Limits {
            qp_count: qp_cnt,
            cq_count: cq_cnt,
            pble_count: layout.object(HmcObj::Pble).cnt,
            ceq_count: max_ceqs,
        };
        self.cqp_mut().map_err(ProbeCause::Cqp)?.set_limits(limits);
        self.max_ceqs = max_ceqs;

        self.enter(step, S::BackHmc);
        // 7. Back every non-PBLE SD.
        {
            let res = self.res.get_mut();
            let cqp = self.cqp.get_mut().as_mut();
            let Some(cqp) = cqp else { return Err(ProbeCause::Capacity) };
            res.sds.back_static(&layout, cqp).map_err(ProbeCause::from)?;
        }
        self.enter(step, S::ShmcPagesAllocated);
        // 8. SHMC_PAGES_ALLOCATED.
        let fn_id = self.lan.pf_id as u16;
        self.exec(ShmcPagesAllocated { hmc_fn_id: fn_id }).map_err(ProbeCause::Cqp)?;
        self.enter(step, S::CreateCcq);
        // 9. CCQ (spec §2.7).
        let mut ccq = CcqConfig::linux(self.opts.cqp_sq_size);
        ccq.vsi_idx = self.lan.vsi_num;
        if self.opts.interrupts.is_some() {
            // Told apart from the CQs' contexts in CEQ 0 (`crate::irq`).
            ccq.cq_ctx = crate::irq::CCQ_CTX;
        }
        self.control_bytes += pages_bytes(ccq.entries as usize * CCQ_CQE_BYTES) + pages_bytes(64);
        self.cqp_mut().and_then(|c| c.create_ccq(ccq)).map_err(ProbeCause::Cqp)?;

        self.enter(step, S::CreateCeq);
        self.create_ceq0(cq_cnt)?;
        self.enter(step, S::PblePool);
        let pool = self.create_pble_pool(&layout)?;
        self.enter(step, S::CreateAeq);
        self.create_aeq(qp_cnt, cq_cnt)?;

        self.enter(step, S::WorkScheduler);
        // 13. Work-scheduler tree: root 0, VSI node, TC leaf → qs_handle,
        // then enable the leaf (ws.c: irdma_ws_add; spec §4.3.20).
        self.build_ws(ops.as_deref_mut())?;

        *step = S::Resources;
        self.build_tables(&layout, pool)?;
        // RDMA traffic to the VSI on, last (main.c: irdma_probe).
        if let Some(o) = ops {
            *step = S::RdmaFilter;
            o.set_rdma_filter(self.lan.vsi_num, true).map_err(ProbeCause::LanOp)?;
            self.ws.filter_on = true;
        }
        if let Some(cfg) = self.opts.interrupts {
            self.setup_interrupts(cfg);
        }
        info!("irdma: probe done");
        Ok(())
    }

    /// Bring-up step 1: the firmware reports ready (ctrl.c:
    /// irdma_wait_pe_ready).
    fn wait_firmware_ready(&self, bar: &B) -> Result<(), ProbeCause> {
        let end = irdma_hal::dma::now::<H>().saturating_add(self.opts.fw_ready_timeout);
        let mut st = [0u32; 3];
        let ready = irdma_hal::dma::wait_until::<H>(end, || {
            for (s, off) in st.iter_mut().zip(regs::GLPE_CPUSTATUS) {
                *s = bar.read32(off);
            }
            st.iter().all(|s| *s == regs::CPUSTATUS_READY)
        });
        if !ready {
            return Err(ProbeCause::FirmwareNotReady(st));
        }
        Ok(())
    }

    /// Bring-up step 2: doorbells are enabled (ctrl.c: irdma_sc_dev_init).
    fn check_doorbell_size(bar: &B) -> Result<(), ProbeCause> {
        let lbar = bar.read32(regs::GLPCI_LBARCTRL);
        if !matches!(regs::field::LBARCTRL_PE_DB_SIZE.get(u64::from(lbar)), 1 | 2) {
            return Err(ProbeCause::DoorbellDisabled(lbar));
        }
        Ok(())
    }

    /// Bring-up steps 3–4: the scratch page and the CQP.
    fn create_cqp(&mut self, bar: B) -> Result<(), ProbeCause> {
        let scratch = Dma::<H>::new(1, BufferDirection::Both).map_err(ProbeCause::Dma)?;
        self.scratch = Some(scratch);
        let mut cfg = CqpConfig::gen2_roce(self.opts.cqp_sq_size);
        cfg.timeouts = self.opts.timeouts;
        cfg.completion_ctx = 0x4951_5050; // echoed in CCQ CQEs; any non-zero value
        let sq = cfg.sq_size as usize;
        let cqp_bytes = pages_bytes(sq * CQP_WQE_BYTES)
            + pages_bytes(64)
            + pages_bytes(sq * SDBUF_BYTES_PER_SLOT);
        let cqp = match Cqp::<H, B>::create(bar, &cfg) {
            Ok(c) => c,
            Err(e) => {
                if device_may_own(&e) {
                    // The engine leaked its SQ, host context and overflow
                    // buffer (the device may be reading them): count them.
                    self.quarantine.get_mut().count_leaked(cqp_bytes, 3);
                    self.needs_reset.store(true, Ordering::Release);
                }
                return Err(ProbeCause::Cqp(e));
            }
        };
        self.control_bytes = cqp_bytes + pages_bytes(PAGE_SIZE);
        *self.cqp.get_mut() = Some(cqp);
        Ok(())
    }

    /// Bring-up steps 5–6 (the caller entered [`ProbeStep::QueryFeatures`]):
    /// QUERY_RDMA_FEATURES, QUERY_FPM_VAL → [`size_hmc`] → COMMIT_FPM_VAL,
    /// the committed layout (kept in `self.layout`) and the CEQ count the
    /// device allows; `step` moves through the sub-steps.
    fn size_and_commit_hmc(
        &mut self,
        profile: &Profile,
        step: &mut ProbeStep,
    ) -> Result<(HmcLayout, u32), ProbeCause> {
        let Some(scratch) = self.scratch.as_ref() else { return Err(ProbeCause::Capacity) };
        let (q_pa, c_pa, f_pa) = (
            scratch.paddr() + SCRATCH_QUERY as u64,
            scratch.paddr() + SCRATCH_COMMIT as u64,
            scratch.paddr() + SCRATCH_FEATURES as u64,
        );
        // 5. Features (ctrl.c: irdma_get_rdma_features).
        let manage_rsrc_ver2 = {
            let cmd = QueryRdmaFeatures { buf_pa: f_pa, buf_len: FEATURES_BYTES as u32 };
            self.exec(cmd).map_err(ProbeCause::Cqp)?;
            self.read_features()
        };

        self.enter(step, ProbeStep::QueryFpm);
        // 6. FPM query → sizing → commit.
        let query = {
            let fn_id = self.lan.pf_id as u16;
            self.exec(QueryFpmVal { hmc_fn_id: fn_id, buf_pa: q_pa }).map_err(ProbeCause::Cqp)?;
            let buf = self.scratch_words(SCRATCH_QUERY);
            // `match`, not `map_err`: the large `Ok` value is not repacked
            // (code size, here and below).
            match FpmQuery::decode(&buf, manage_rsrc_ver2, false) {
                Ok(q) => q,
                Err(e) => return Err(ProbeCause::Decode(e)),
            }
        };
        self.max_ird = query.max_hw_ird().min(u8::MAX as u16) as u8;
        let caps = FpmCaps::from(&query);
        *step = ProbeStep::SizeHmc;
        let counts = match size_hmc(&caps, profile) {
            Ok(c) => c,
            Err(e) => return Err(ProbeCause::Hmc(e)),
        };
        let mut commit_buf = [0u64; 24];
        encode_fpm_commit(&counts.cnt, &mut commit_buf);
        if let Some(s) = self.scratch.as_ref() {
            s.write_u64s(SCRATCH_COMMIT, &commit_buf);
        }
        let fn_id = self.lan.pf_id as u16;
        *step = ProbeStep::CommitFpm;
        self.exec(CommitFpmVal { hmc_fn_id: fn_id, buf_pa: c_pa, flush_timer_disable: false })
            .map_err(ProbeCause::Cqp)?;
        let sizes: [u64; HMC_OBJ_COUNT] = core::array::from_fn(|i| caps.obj[i].size);
        let committed = match FpmCommit::decode(&self.scratch_words(SCRATCH_COMMIT), &sizes) {
            Ok(c) => c,
            Err(e) => return Err(ProbeCause::Decode(e)),
        };
        let layout = match HmcLayout::new(&sizes, &committed.obj) {
            Ok(l) => l,
            Err(e) => return Err(ProbeCause::Hmc(e)),
        };
        self.layout = Some(layout);
        Ok((layout, u32::from(query.max_ceqs)))
    }

    /// Bring-up step 10: CEQ 0, min(committed CQ count, 262143) entries
    /// (hw.c: irdma_create_ceq).
    fn create_ceq0(&mut self, cq_cnt: u32) -> Result<(), ProbeCause> {
        let ceq_entries = cq_cnt.clamp(1, 262_143);
        let ring = Dma::<H>::with_bytes(ceq_entries as usize * 8, BufferDirection::DeviceToDriver)
            .map_err(ProbeCause::Dma)?;
        self.control_bytes += ring.len() as u64;
        let cmd = CreateCeq {
            ceq_id: 0,
            elem_cnt: ceq_entries,
            mem: QueueAddr::contiguous(ring.paddr()),
            tph_en: false,
            tph_val: 0,
            itr_no_expire: false,
            vsi_idx: self.lan.vsi_num,
            pasid_valid: false,
            pasid: 0,
        };
        let r = self.exec(cmd);
        // Keep the ring if the device may hold it, so teardown destroys it;
        // after a timeout it is quarantined, not freed.
        match r {
            Ok(_) => self.ceq = Some(Ceq { _ring: ring, cmd }),
            Err(e) => {
                self.keep_if_owned(&e, ring);
                return Err(ProbeCause::Cqp(e));
            }
        }
        Ok(())
    }

    /// Bring-up step 11: the PBLE pool; its first chunk is backed now
    /// (pble.c: irdma_hmc_init_pble), the rest on demand.
    fn create_pble_pool(&mut self, layout: &HmcLayout) -> Result<PblePool<PBLE_RUNS>, ProbeCause> {
        let pool = match PblePool::<PBLE_RUNS>::new(*layout.pble()) {
            Ok(p) => p,
            Err(e) => return Err(ProbeCause::Pble(e)),
        };
        if let Some(first) = layout.pble().chunks().next() {
            let res = self.res.get_mut();
            let Some(cqp) = self.cqp.get_mut().as_mut() else {
                return Err(ProbeCause::Capacity);
            };
            res.sds.back_pble_chunk(&first, cqp).map_err(ProbeCause::from)?;
        }
        Ok(pool)
    }

    /// Bring-up step 12: the AEQ, min(QP + CQ count, 524287) entries of 16 B
    /// (hw.c: irdma_create_aeq), and the view its polls read.
    fn create_aeq(&mut self, qp_cnt: u32, cq_cnt: u32) -> Result<(), ProbeCause> {
        let aeq_entries = qp_cnt.saturating_add(cq_cnt).clamp(1, 524_287);
        let ring = Dma::<H>::with_bytes(
            aeq_entries as usize * AEQE_BYTES,
            BufferDirection::DeviceToDriver,
        )
        .map_err(ProbeCause::Dma)?;
        self.control_bytes += ring.len() as u64;
        let cmd = CreateAeq {
            elem_cnt: aeq_entries,
            mem: QueueAddr::contiguous(ring.paddr()),
            pasid_valid: false,
            pasid: 0,
        };
        match self.exec(cmd) {
            Ok(_) => {
                *self.aeq.get_mut() = Some(AeqRing {
                    ring,
                    cons: RingConsumer::new(aeq_entries),
                    cmd,
                    overflowed: false,
                    pending: heapless::Deque::new(),
                    pending_lost: 0,
                });
                let aeq = self.aeq.get_mut().as_ref();
                // SAFETY: the ring's memory does not move with the `Dma`
                // value and stays in `self.aeq` until `teardown` (which has
                // `&mut self`) clears `aeq_view` before taking it out; the
                // view only makes atomic qword loads.
                let view = aeq.and_then(|a| unsafe {
                    crate::uk::mem::static_view(&a.ring, 0, a.ring.len() & !7)
                });
                self.aeq_view = view.unwrap_or_else(crate::uk::QueueMem::empty);
                // Entry 0's VALID word, polarity 1 (`RingConsumer::new`).
                *self.aeq_next.get_mut() = events::aeq_next_word(0, true);
            }
            Err(e) => {
                self.keep_if_owned(&e, ring);
                return Err(ProbeCause::Cqp(e));
            }
        }
        Ok(())
    }

    /// The software tables sized from the commit (hw.c:
    /// irdma_initialize_hw_rsrc).
    fn build_tables(
        &mut self,
        layout: &HmcLayout,
        pool: PblePool<PBLE_RUNS>,
    ) -> Result<(), ProbeCause> {
        let qp_cnt = layout.object(HmcObj::Qp).cnt;
        let cq_cnt = layout.object(HmcObj::Cq).cnt;
        // The fallible parts first, then the tables built where they live
        // (code size: `Ids` is not assembled on the stack and moved).
        let pds = match IdBitmap::pd_ids(MAX_PDS) {
            Ok(b) => b,
            Err(e) => return Err(ProbeCause::Ids(e)),
        };
        let qps = match IdBitmap::qp_ids(qp_cnt) {
            Ok(b) => b,
            Err(e) => return Err(ProbeCause::Ids(e)),
        };
        let cqs = match IdBitmap::cq_ids(cq_cnt) {
            Ok(b) => b,
            Err(e) => return Err(ProbeCause::Ids(e)),
        };
        let arp_ids = match IdBitmap::arp_ids(layout.object(HmcObj::Arp).cnt) {
            Ok(b) => b,
            Err(e) => return Err(ProbeCause::Ids(e)),
        };
        let stags = match StagTable::new(layout.object(HmcObj::Mr).cnt, self.stag_key_seed()) {
            Ok(t) => t,
            Err(_) => return Err(ProbeCause::Ids(IdError::BadCapacity)),
        };
        let ah_ids = match IdBitmap::ah_ids(layout.object(HmcObj::Fsiav).cnt.min(MAX_AHS)) {
            Ok(b) => b,
            Err(e) => return Err(ProbeCause::Ids(e)),
        };
        self.res.get_mut().ids = Some(Ids {
            pds,
            qps,
            cqs,
            arp_ids,
            arp: [ArpSlot::default(); MAX_ARP as usize],
            stags,
            pble: pool,
            qp_rec: [QpRecord::default(); MAX_QPS as usize],
            cq_refs: [0; MAX_CQS as usize],
            pd_refs: [0; MAX_PDS as usize],
            pd_orphan: [0; PD_WORDS],
            fr: heapless::Vec::new(),
            ah_ids,
            gsi: false,
            neigh: heapless::Vec::new(),
        });
        Ok(())
    }

    fn build_ws<'o>(&mut self, ops: Option<&mut (dyn LanOps + 'o)>) -> Result<(), ProbeCause> {
        let vsi = self.lan.vsi_num;
        let tc = self.lan.qos.tc_of(0).unwrap_or(0);
        let weight = |w: u8| w.clamp(1, 0x7f);
        let leaf_w = self.lan.qos.tc_info.get(tc as usize).map_or(1, |t| t.rel_bw);
        let (vsi_node, leaf_node) = (1u16, 2u16);
        self.ws = WsTree { vsi_node, leaf_node, tc, ..WsTree::default() };
        let nodes = [
            WsNode {
                op: WsNodeOp::Add,
                node_id: 0,
                parent_id: 0,
                vsi,
                leaf: false,
                enable: true,
                prio_type: 1,
                tc: 0,
                weight: 1,
            },
            WsNode {
                op: WsNodeOp::Add,
                node_id: vsi_node,
                parent_id: 0,
                vsi,
                leaf: false,
                enable: true,
                prio_type: 1,
                tc: 0,
                weight: weight(self.lan.qos.vport_rel_bw),
            },
            WsNode {
                op: WsNodeOp::Add,
                node_id: leaf_node,
                parent_id: vsi_node,
                vsi,
                leaf: true,
                enable: false,
                prio_type: 1,
                tc,
                weight: weight(leaf_w),
            },
        ];
        for n in nodes {
            let c = self.exec(n).map_err(ProbeCause::Cqp)?;
            self.ws.created += 1;
            if n.leaf {
                self.ws.qs_handle = (c.op_ret_val & 0x3ff) as u16;
            }
        }
        if let Some(o) = ops {
            let teid = o.register_qset(self.ws.qs_handle, tc, vsi).map_err(ProbeCause::LanOp)?;
            self.ws.qset_teid = Some(teid);
        }
        let enable = WsNode { op: WsNodeOp::Modify, enable: true, ..nodes[2] };
        self.exec(enable).map_err(ProbeCause::Cqp)?;
        self.ws.leaf_enabled = true;
        Ok(())
    }

    fn read_features(&mut self) -> bool {
        let Some(s) = self.scratch.as_ref() else { return false };
        let e0 = s.read_u64(SCRATCH_FEATURES).unwrap_or(0);
        // Entry 0: FEATURE_CNT [47:32], FW major [31:16], minor [15:0] (spec §4.3.23).
        self.fw_version = ((e0 >> 16) as u16, e0 as u16);
        let cnt = ((e0 >> 32) & 0xffff).min((FEATURES_BYTES / 8) as u64) as usize;
        let mut flags = 0;
        for i in 1..cnt {
            let e = s.read_u64(SCRATCH_FEATURES + 8 * i).unwrap_or(0);
            // Type 32 = FTN_FLAGS (type.h: enum irdma_feature_type).
            if e >> 48 == 32 {
                flags = e & 0xffff_ffff_ffff;
            }
        }
        self.features = flags;
        flags & (1 << 2) != 0
    }

    fn scratch_words(&self, off: usize) -> [u64; 24] {
        let mut w = [0u64; 24];
        if let (Some(s), Some(dst)) = (self.scratch.as_ref(), w.get_mut(..FPM_BUF_BYTES / 8)) {
            s.read_u64s(off, dst);
        }
        w
    }

    /// The CQP during probe (exclusive access; it exists after step 4).
    fn cqp_mut(&mut self) -> Result<&mut Cqp<H, B>, CqpError> {
        self.cqp.get_mut().as_mut().ok_or(CqpError::Protocol { what: Phrase::new(&"no CQP") })
    }

    /// Runs one command on the CQP during probe (refused once the device
    /// needs a reset; a timeout marks it so).
    fn exec<C: crate::cqp::CqpCommand>(&mut self, cmd: C) -> Result<Completion, CqpError> {
        self.exec_dyn(&crate::cqp::engine::Cmd(&cmd))
    }

    /// [`Self::exec`] without the command's type (one copy for all).
    #[inline(never)]
    fn exec_dyn(&mut self, cmd: &dyn crate::cqp::engine::DynCmd) -> Result<Completion, CqpError> {
        if *self.needs_reset.get_mut() {
            return Err(CqpError::NeedsReset);
        }
        let r = self.cqp_mut()?.exec_dyn(cmd, 0);
        if matches!(r, Err(CqpError::DeviceGone)) {
            self.mark_gone();
        }
        if let Some(c) = self.cqp.get_mut().as_mut() {
            let f = self.flight.get_mut();
            while let Some((opcode, outcome)) = c.take_op_trace() {
                f.push(crate::flight::FlightEvent::Cqp { opcode, outcome });
            }
        }
        if let Err(e) = &r
            && device_may_own(e)
        {
            *self.needs_reset.get_mut() = true;
        }
        r
    }

    /// Quarantines `d` if a command naming it ended with `e` and the device
    /// may therefore own it; otherwise frees it.
    fn keep_if_owned(&mut self, e: &CqpError, d: Dma<H>) {
        if device_may_own(e) {
            self.quarantine.get_mut().put(d);
            *self.needs_reset.get_mut() = true;
        }
    }

    /// Tears down whatever exists, in Linux's order (hw.c:
    /// irdma_ctrl_deinit_hw), freeing DMA only after the device confirmed it
    /// stopped using it; what it did not confirm is quarantined. Once the
    /// device needs a reset no CQP op is tried (Linux skips them when
    /// `rf->reset` is set) and everything it knew of is quarantined. With
    /// `after_reset` (the function was reset) nothing is sent and all memory,
    /// the quarantine included, is freed. Returns the first error; always
    /// finishes.
    fn teardown<'o>(
        &mut self,
        mut ops: Option<&mut (dyn LanOps + 'o)>,
        after_reset: bool,
    ) -> Result<(), CloseError> {
        let mut first: Option<CloseError> = None;
        self.teardown_interrupts();
        let ws = self.ws;
        if let Some(o) = ops.as_deref_mut()
            && !after_reset
        {
            self.release_lan(o, &mut first);
        }
        if after_reset {
            self.needs_reset.store(true, Ordering::Release);
        }
        let mut cx = Closing {
            cqp: self.cqp.get_mut().take(),
            nr: &self.needs_reset,
            quarantine: self.quarantine.get_mut(),
            after_reset,
            first,
        };
        // CQs whose destroy waited for QPs that never went (their destroy
        // failed): before the CEQ they report to (hw.c: CQs go first).
        destroy_deferred_cqs(self.res.get_mut(), &mut cx);
        remove_ws_tree(&ws, self.lan.vsi_num, &mut cx);
        // No lock-free peek may look at the AEQ ring from now on.
        self.aeq_view = crate::uk::QueueMem::empty();
        *self.aeq_next.get_mut() = 1;
        destroy_event_queues(self.aeq.get_mut(), &mut self.irq_ceqs, &mut self.ceq, &mut cx);
        let sds_released = stop_ccq_and_sds(&mut self.res.get_mut().sds, &mut cx);
        self.ws = WsTree::default();
        close_cqp(&mut cx);
        // Now nothing the device knows of is left, or it is kept above.
        free_device_memory(self.res.get_mut(), &mut self.scratch, sds_released, &mut cx);
        cx.finish(ops)
    }

    /// Teardown's first step: the LAN side lets go of RDMA (the VSI's RDMA
    /// filter off, the qset unregistered); an error is kept in `first`.
    fn release_lan(&mut self, o: &mut dyn LanOps, first: &mut Option<CloseError>) {
        let ws = self.ws;
        if ws.filter_on
            && let Err(e) = o.set_rdma_filter(self.lan.vsi_num, false)
        {
            first.get_or_insert(CloseError::Lan(e));
        }
        if let Some(teid) = ws.qset_teid
            && let Err(e) = o.unregister_qset(ws.qs_handle, teid)
        {
            first.get_or_insert(CloseError::Lan(e));
        }
    }

    /// Tears the device down (the AEQ, CEQ 0, CCQ, SDs, CQP, then memory).
    /// Every verbs object borrows the device, so none can be alive here.
    /// Memory the device did not confirm it released (and everything, once
    /// it needs a reset) is quarantined and leaked on purpose:
    /// [`CloseError::Quarantined`].
    ///
    /// A LAN-side registration made by [`Device::probe_with_lan`] is not
    /// undone here; use [`Device::close_with_lan`].
    pub fn close(mut self) -> Result<(), CloseError> {
        self.teardown(None, false)
    }

    /// Closes a device whose PCI function was reset: no CQP op is sent (the
    /// CQP, queues and SDs no longer exist in the device) and every buffer,
    /// quarantined ones included, is freed.
    ///
    /// # Safety
    ///
    /// The function was reset (an FLR or PF reset through the LAN driver,
    /// e.g. after [`LanOps::request_reset`], completed) after the last CQP
    /// op and after every buffer in the quarantine was handed to the device,
    /// so the device holds none of the bus addresses this device gave it and
    /// will not write to them again. Freeing while the device can still DMA
    /// into the pages lets it corrupt whatever reuses them.
    pub unsafe fn close_after_reset(mut self) {
        let _ = self.teardown(None, true);
    }

    /// Whether a CQP op timed out or memory had to be quarantined: CQP calls
    /// now fail with [`CqpError::NeedsReset`]; [`Device::close_with_lan`]
    /// asks the LAN side for the reset ([`LanOps::request_reset`]). Moving a
    /// QP to ERROR still works (no CQP op is sent): its outstanding WRs
    /// complete as flushed from [`crate::verbs::Cq::poll`], in software.
    pub fn needs_reset(&self) -> bool {
        self.needs_reset.load(Ordering::Acquire)
    }

    /// Keeps `d` in the quarantine and marks the device for reset.
    #[inline(never)] // cold, called from many error paths (code size)
    pub(crate) fn quarantine(&self, d: Dma<H>) {
        self.quarantine.lock().put(d);
        self.mark_needs_reset();
    }

    /// Counts `n` ids left allocated because the device may use them, and
    /// marks the device for reset.
    #[inline(never)]
    pub(crate) fn quarantine_ids(&self, n: u32) {
        self.quarantine.lock().count_ids(n);
        self.mark_needs_reset();
    }

    pub(crate) fn mark_needs_reset(&self) {
        self.needs_reset.store(true, Ordering::Release);
    }

    /// [`Device::close`], first turning the VSI's RDMA filter off and
    /// unregistering the queue set from the LAN Tx scheduler.
    ///
    /// If the device needs a reset ([`Device::needs_reset`]) no CQP op is
    /// tried, the memory is quarantined, and [`LanOps::request_reset`] is
    /// called last (Linux: main.c irdma_request_reset); so it is when a
    /// refused destroy left anything quarantined.
    pub fn close_with_lan(mut self, ops: &mut dyn LanOps) -> Result<(), CloseError> {
        self.teardown(Some(ops), false)
    }

    /// The BAR, for raw register access (diagnostics, platform glue).
    ///
    /// # Safety
    ///
    /// A register write can make the device DMA anywhere (a CQP or queue
    /// doorbell over a stale ring, an HMC SD pointing at arbitrary memory) or
    /// stop it. The caller guarantees it only reads registers, or writes only
    /// what does not change which memory the device uses or disturb the
    /// driver's rings and CQP (e.g. the model's harness mailbox outside the
    /// GEN_2 register space).
    pub unsafe fn bar(&self) -> &B {
        &self.bar
    }

    /// The BAR for the driver's own doorbells.
    pub(crate) fn regs(&self) -> &B {
        &self.bar
    }

    /// What the LAN side told probe.
    pub fn lan_info(&self) -> &LanInfo {
        &self.lan
    }

    /// The committed HMC layout.
    pub fn hmc_layout(&self) -> Option<&HmcLayout> {
        self.layout.as_ref()
    }

    /// Firmware version from QUERY_RDMA_FEATURES (major, minor).
    pub fn fw_version(&self) -> (u16, u16) {
        self.fw_version
    }

    /// FTN_FLAGS from QUERY_RDMA_FEATURES (bit 0 atomics allowed, bit 2
    /// MANAGE_RSRC_VER2; spec §4.3.23).
    pub fn feature_flags(&self) -> u64 {
        self.features
    }

    /// The queue-set handle of the work-scheduler leaf (QP contexts carry it).
    pub fn qs_handle(&self) -> u16 {
        self.ws.qs_handle
    }

    /// The DMA memory this device costs.
    pub fn footprint(&self) -> DeviceFootprint {
        let hmc = self.layout.map(|l| l.footprint()).unwrap_or(Footprint {
            static_sds: 0,
            static_bytes: 0,
            pble_initial_bytes: 0,
            pble_max_bytes: 0,
        });
        let sds = self.res.lock().sds.bytes();
        let quarantined = self.quarantine.lock().stats();
        DeviceFootprint {
            hmc,
            control_bytes: self.control_bytes,
            current_bytes: sds + self.control_bytes + quarantined.bytes,
            quarantined,
            needs_reset: self.needs_reset(),
        }
    }

    /// What callers may ask for.
    pub fn caps(&self) -> DeviceCaps {
        let l = self.layout;
        let cnt = |o: HmcObj| l.map_or(0, |l| l.object(o).cnt);
        DeviceCaps {
            max_qp: cnt(HmcObj::Qp).min(MAX_QPS),
            max_cq: cnt(HmcObj::Cq).min(MAX_CQS),
            max_mr: cnt(HmcObj::Mr).min(MAX_MRS),
            max_pd: MAX_PDS,
            max_qp_wr_quanta: crate::uk::sizing::MAX_WQ_QUANTA,
            max_sge: crate::uk::sizing::MAX_FRAGS,
            max_inline: irdma_hal::wqe::inline::MAX_BYTES as u32,
            max_cqe: 1_048_575,
            max_ord: self.max_ird,
            max_ird: self.max_ird,
            max_mr_pages: l.map_or(0, |l| l.pble().count()),
            max_mr_size: 1 << 45,
        }
    }

    /// The STag key seed: the caller's, or derived (see [`ProbeOptions`]).
    fn stag_key_seed(&self) -> u8 {
        self.opts.stag_key_seed.unwrap_or_else(|| {
            let l = &self.lan;
            let [v0, v1] = l.vsi_num.to_le_bytes();
            let [m0, m1, m2, m3, m4, m5] = l.mac;
            crate::res::default_key_seed(
                irdma_hal::dma::now::<H>(),
                &[l.pf_id, v0, v1, m0, m1, m2, m3, m4, m5],
            )
        })
    }

    /// Runs one command on the CQP ([`Self::with_cqp`] + [`Cqp::exec`]);
    /// only this shell is generic over the command type.
    #[inline]
    pub(crate) fn exec_cmd<C: crate::cqp::CqpCommand>(&self, cmd: C) -> Result<(), CqpError> {
        self.exec_cmd_dyn(&crate::cqp::engine::Cmd(&cmd))
    }

    /// [`Self::exec_cmd`] without the command's type (one copy for all).
    #[inline(never)]
    fn exec_cmd_dyn(&self, cmd: &dyn crate::cqp::engine::DynCmd) -> Result<(), CqpError> {
        self.with_cqp(|c| c.exec_dyn(cmd, 0).map(|_| ()))
    }

    /// Runs `f` with the CQP (shared by every control call).
    pub(crate) fn with_cqp<R>(
        &self,
        f: impl FnOnce(&mut Cqp<H, B>) -> Result<R, CqpError>,
    ) -> Result<R, CqpError> {
        if self.needs_reset() {
            return Err(if self.is_gone() { CqpError::DeviceGone } else { CqpError::NeedsReset });
        }
        let mut g = self.cqp.lock();
        match g.as_mut() {
            Some(c) => {
                let r = f(c);
                self.after_cqp(c, r.as_ref().err());
                r
            }
            None => Err(CqpError::Protocol { what: Phrase::new(&"device closed") }),
        }
    }

    /// What [`Self::with_cqp`] does after `f`, with the CQP lock held
    /// (non-generic: one copy for every caller): copy the op trace to the
    /// flight recorder, and mark the device for reset after a timeout.
    #[inline(never)]
    fn after_cqp(&self, c: &mut Cqp<H, B>, err: Option<&CqpError>) {
        // Lock order: CQP → flight recorder (nothing takes the
        // recorder's lock and then another).
        let mut fl = self.flight.lock();
        while let Some((opcode, outcome)) = c.take_op_trace() {
            fl.push(crate::flight::FlightEvent::Cqp { opcode, outcome });
        }
        drop(fl);
        // A timeout leaves the device's state unknown: Linux marks the
        // function for reset (utils.c: irdma_wait_event sets `rf->reset`
        // when the CQP made no progress).
        if matches!(err, Some(CqpError::Timeout { .. } | CqpError::DeviceGone)) {
            if matches!(err, Some(CqpError::DeviceGone)) {
                self.mark_gone();
            }
            self.mark_needs_reset();
        }
    }

    /// Marks the device gone: it needs a reset, and every QP counts as in
    /// ERROR (its flag in `qp_err`, which the data path already reads: no
    /// extra load on a healthy poll), so CQ polls flush in software.
    fn mark_gone(&self) {
        self.gone.store(true, Ordering::Release);
        self.needs_reset.store(true, Ordering::Release);
        // Through `set_qp_error`, so the count of QPs in error that lets a
        // CQ poll skip the software-flush scan counts them too.
        for qpn in 0..self.qp_err.len() {
            self.set_qp_error(qpn as u32, true);
        }
    }

    /// Whether the device was found gone (surprise removal): by a CQP op,
    /// or by [`Device::check_presence`]. From then on every control call
    /// fails with [`CqpError::DeviceGone`], `post_send` / `post_recv` with
    /// [`crate::verbs::PostErrorKind::DeviceGone`], and [`crate::verbs::Cq::poll`]
    /// completes every outstanding WR as flushed (`WrFlushErr`), each once;
    /// closing quarantines what the device was given
    /// ([`CloseError::Quarantined`]) unless the function was reset
    /// ([`Device::close_after_reset`]).
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// Reads one register (CQPTAIL) to learn whether the device is still
    /// there: a removed function reads all-ones ([`CqpError::DeviceGone`]);
    /// the device is then marked gone (see [`Device::is_gone`]). The data
    /// path reads no register, so a caller that only posts and polls and
    /// sees no completion for longer than it expects calls this (as a
    /// watchdog would); control calls detect removal themselves, within
    /// their CQP timeout. Returns [`CqpError::NeedsReset`] if the device
    /// needs a reset for another reason (a CQP timeout).
    pub fn check_presence(&self) -> Result<(), CqpError> {
        if self.is_gone() {
            return Err(CqpError::DeviceGone);
        }
        if crate::cqp::engine::reads_removed(self.bar.read32(regs::CQPTAIL)) {
            self.mark_gone();
            return Err(CqpError::DeviceGone);
        }
        if self.needs_reset() { Err(CqpError::NeedsReset) } else { Ok(()) }
    }

    /// Adds `event` to the flight recorder.
    #[inline(never)]
    pub(crate) fn record(&self, event: crate::flight::FlightEvent) {
        self.flight.lock().push(event);
    }

    /// The flight recorder: the last [`crate::flight::FLIGHT_EVENTS`]
    /// control-path events (CQP ops with opcode, outcome and codes; probe;
    /// asynchronous events; QP state changes; flushes), oldest first. A copy:
    /// reading never blocks recording for long and never allocates.
    pub fn flight_recorder(&self) -> crate::flight::FlightIter {
        self.flight.lock().snapshot()
    }

    /// Emits the flight recorder through `defmt` (one `error!` frame per
    /// record, oldest first); without the `defmt` feature it does nothing.
    pub fn log_flight_recorder(&self) {
        for r in self.flight_recorder() {
            error!("flight {}: {}", r.seq, r.event);
        }
    }

    /// Whether the control path moved QP `qpn` to ERROR (data path: atomic).
    pub fn qp_in_error(&self, qpn: u32) -> bool {
        self.qp_err.get(qpn as usize).is_some_and(|f| f.load(Ordering::Acquire))
    }

    /// Records (or, with `None`, forgets) the CQs live QP `qpn` completes
    /// to and its completion context.
    /// (CQ ids are below `MAX_CQS`, so each fits its 16 bits.)
    pub(crate) fn bind_qp_cqs(&self, qpn: u32, cqs: Option<(u32, u32, u64)>) {
        if let Some(slot) = self.qp_cqs.get(qpn as usize) {
            let id = |c: u32| u64::from(c.min(0xfffe)) + 1;
            let v = cqs.map_or(0, |(s, r, ctx)| ctx >> 32 << 32 | id(s) << 16 | id(r));
            slot.store(v, Ordering::Release);
        }
    }

    /// A fresh completion context for a QP numbered `qpn`: the number in
    /// the low 32 bits, a creation count (never 0) above.
    pub(crate) fn next_compl_ctx(&self, qpn: u32) -> u64 {
        let g = self.ctx_gen.fetch_add(1, Ordering::Relaxed).wrapping_add(1).max(1);
        u64::from(g) << 32 | u64::from(qpn)
    }

    /// The number of the live QP whose completion context is `ctx`, if it
    /// completes to CQ `cq`.
    pub(crate) fn live_ctx_on_cq(&self, ctx: u64, cq: u32) -> Option<u32> {
        let qpn = ctx as u32;
        let v = self.qp_cqs.get(qpn as usize)?.load(Ordering::Acquire);
        (v >> 32 == ctx >> 32 && uses_cq(v, cq)).then_some(qpn)
    }

    /// Whether live QP `qpn` completes to CQ `cq`.
    pub(crate) fn qp_uses_cq(&self, qpn: u32, cq: u32) -> bool {
        let v = self.qp_cqs.get(qpn as usize).map_or(0, |f| f.load(Ordering::Acquire));
        uses_cq(v, cq)
    }

    #[inline(never)]
    pub(crate) fn set_qp_error(&self, qpn: u32, on: bool) {
        if let Some(f) = self.qp_err.get(qpn as usize)
            && f.swap(on, Ordering::AcqRel) != on
        {
            if on {
                self.qps_in_error.fetch_add(1, Ordering::AcqRel);
            } else {
                self.qps_in_error.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Whether any QP's error flag is set.
    pub(crate) fn any_qp_in_error(&self) -> bool {
        self.qps_in_error.load(Ordering::Acquire) != 0
    }

    /// Whether the device reported CQ `cq` unusable (see
    /// [`crate::verbs::Cq::is_dead`]).
    pub(crate) fn cq_is_dead(&self, cq: u32) -> bool {
        let bit = 1u64 << (cq % 64);
        self.cq_dead.get((cq / 64) as usize).is_some_and(|w| w.load(Ordering::Acquire) & bit != 0)
    }

    /// Sets (a CQ error event) or clears (a new CQ got the id) CQ `cq`'s
    /// dead flag.
    pub(crate) fn set_cq_dead(&self, cq: u32, dead: bool) {
        let bit = 1u64 << (cq % 64);
        if let Some(w) = self.cq_dead.get((cq / 64) as usize) {
            if dead {
                w.fetch_or(bit, Ordering::AcqRel);
            } else {
                w.fetch_and(!bit, Ordering::AcqRel);
            }
        }
    }

    /// Whether live QP `qpn` completes to a dead CQ (send or receive).
    /// Asked only on the error path (a post to a QP in error).
    pub(crate) fn qp_on_dead_cq(&self, qpn: u32) -> bool {
        let v = self.qp_cqs.get(qpn as usize).map_or(0, |f| f.load(Ordering::Acquire));
        bound_cqs(v).into_iter().flatten().any(|c| self.cq_is_dead(c))
    }

    /// The device reported CQ `cq` unusable (AE 0x0203 CQ_OPERATION_ERROR
    /// or 0x0702 LCE_CQ_CATASTROPHIC; spec control-path §8.2, Linux raises
    /// IB_EVENT_CQ_ERR for both, hw.c: irdma_process_aeq): the CQ is marked
    /// dead, and every live QP completing to it (send or receive side) is
    /// moved to ERROR and flushed — through the CQP when it answers (the
    /// device then stops working on those QPs), in software in any case:
    /// its completions could not be written. The CQ's poll delivers what
    /// its ring already holds and then the software flush of those QPs;
    /// posts to them are refused ([`crate::verbs::PostErrorKind::CqDead`]).
    /// The caller destroys the QPs and the CQ and creates new ones.
    /// Unknown or free CQ ids are ignored.
    pub(crate) fn cq_failed(&self, cq: u32) {
        let live = {
            let res = self.res.lock();
            res.ids.as_ref().is_some_and(|i| i.cqs.is_in_use(cq))
        };
        if !live {
            return;
        }
        self.set_cq_dead(cq, true);
        for qpn in 0..MAX_QPS {
            if !self.qp_uses_cq(qpn, cq) {
                continue;
            }
            let rec = {
                let res = self.res.lock();
                res.ids.as_ref().and_then(|i| i.qp_rec.get(qpn as usize).copied())
            };
            let Some(rec) = rec.filter(|r| r.live) else { continue };
            let g = crate::uk::cq::flush_code::GENERAL;
            // Already in error: its flush (hardware or software) is under
            // way; the data path's software flush covers the rest.
            if !self.qp_in_error(qpn) {
                let _ = self.qp_to_error(qpn, rec.ctx_pa, rec.shadow_pa, (g, g));
            }
            // Whatever the CQP said, the queues on the dead CQ are flushed
            // in software (their hardware flush CQEs cannot be written).
            self.set_qp_error(qpn, true);
        }
    }
}

/// Whether a `qp_cqs` word names CQ `cq` as its send or receive CQ.
fn uses_cq(v: u64, cq: u32) -> bool {
    bound_cqs(v).contains(&Some(cq))
}

/// The send and receive CQ ids a `qp_cqs` slot holds (`bind_qp_cqs`: each
/// id + 1 in 16 bits, 0 = none), `None` for an empty slot.
fn bound_cqs(v: u64) -> [Option<u32>; 2] {
    let cq = |x: u64| (x & 0xffff).checked_sub(1).map(|c| c as u32);
    [cq(v >> 16), cq(v)]
}

impl<H: Hal, B: Bar + Clone> Drop for Device<H, B> {
    fn drop(&mut self) {
        // A quarantine left non-empty is leaked on purpose (`Quarantine`'s
        // `Drop` forgets its buffers).
        let _ = self.teardown(None, false);
    }
}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

impl Display for ProbeCause {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            ProbeCause::Cqp(e) => e.fmt(f),
            ProbeCause::Dma(e) => e.fmt(f),
            ProbeCause::FirmwareNotReady([a, b, c]) => {
                write!(f, "firmware not ready (CPUSTATUS {a:#x} {b:#x} {c:#x})")
            }
            ProbeCause::DoorbellDisabled(v) => write!(f, "doorbells disabled (PE_DB_SIZE {v:#x})"),
            ProbeCause::Decode(e) => e.fmt(f),
            ProbeCause::Hmc(e) => e.fmt(f),
            ProbeCause::Pble(e) => e.fmt(f),
            ProbeCause::Lan(e) => e.fmt(f),
            ProbeCause::LanOp(e) => e.fmt(f),
            ProbeCause::Ids(e) => e.fmt(f),
            ProbeCause::Capacity => f.write_str("more SDs than the driver tracks"),
        }
    }
}

impl Error for ProbeCause {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            ProbeCause::Cqp(e) => Some(e),
            ProbeCause::Dma(e) => Some(e),
            ProbeCause::Decode(e) => Some(e),
            ProbeCause::Hmc(e) => Some(e),
            ProbeCause::Pble(e) => Some(e),
            ProbeCause::Lan(e) => Some(e),
            ProbeCause::LanOp(e) => Some(e),
            ProbeCause::Ids(e) => Some(e),
            _ => None,
        }
    }
}

impl Display for ProbeError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "probe failed at {}: {}", self.step, self.cause)
    }
}

impl Error for ProbeError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.cause)
    }
}

impl Display for CloseError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            CloseError::Cqp(e) => write!(f, "teardown not clean: {e}"),
            CloseError::Lan(e) => write!(f, "teardown not clean: {e}"),
            CloseError::Quarantined(q) => write!(
                f,
                "teardown kept {} bytes in {} buffers and {} ids the device may own (needs a reset)",
                q.bytes, q.buffers, q.ids
            ),
        }
    }
}

impl Error for CloseError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            CloseError::Cqp(e) => Some(e),
            CloseError::Lan(e) => Some(e),
            CloseError::Quarantined(_) => None,
        }
    }
}
