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

mod close;
pub(crate) mod compl;
pub(crate) mod events;
pub(crate) mod hmc;
mod irq;
mod probe;
mod quarantine;
mod state;

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

impl<H: Hal, B: Bar + Clone> Device<H, B> {
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

crate::error::wrapping!(ProbeCause source { Cqp, Dma, Decode, Hmc, Pble, Lan, LanOp, Ids });

crate::error::wrapping!(ProbeError, "probe failed at {}: {}", step, cause);

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
