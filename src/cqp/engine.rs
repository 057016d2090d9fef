//! The CQP engine: the SQ ring, posting, the create handshake, and
//! completions — by register polling before the CCQ exists, by CCQ CQEs after.
//!
//! Commands are typestate values: [`Cqp::post`] turns a command into a
//! [`Posted`] (the only way to get one), [`Cqp::wait`] turns that into a
//! [`Completed`], and only a `Completed` yields the result (OPRETVAL, the
//! scratch cookie, the command back for decoding its buffers). Every wait is
//! bounded by a deadline from [`Hal::now`]; a hang is [`CqpError::Timeout`],
//! a hardware error is [`CqpError::OpFailed`] / [`CqpError::CreateFailed`]
//! with the major/minor codes.
//!
//! Sequences: spec §2.4 (create), §2.5 (posting), §2.6 (completions), §2.7
//! (CCQ); ctrl.c: irdma_sc_cqp_init, irdma_sc_cqp_create,
//! irdma_sc_cqp_post_sq, irdma_cqp_poll_registers, irdma_sc_ccq_get_cqe_info.

use core::error::Error;
use core::fmt::{self, Display, Formatter};
use core::marker::PhantomData;
use core::time::Duration;

use irdma_hal::barrier::{dma_rmb, dma_wmb, wmb};
use irdma_hal::cqp::{CCQ_CQE_BYTES, CQP_WQE_BYTES, SDBUF_BYTES_PER_SLOT, ccq, hdr};
use irdma_hal::regs::{self, field as rf};
use irdma_hal::{Bar, BufferDirection, Dma, DmaError, Hal};

use super::cmd::{
    CommitFpmVal, CqpCommand, CreateCq, DestroyCcq, Env, FlushWqes, Limits, Nop, QueryFpmVal,
    QueryRdmaFeatures, WsNode,
};
use super::ctx::{CqpHostCtx, Dcqcn, HMC_OBJ_COUNT};
use super::decode::{
    CcqCqe, DecodeError, FeaturesError, FpmCommit, FpmQuery, RdmaFeatures, RingConsumer,
};
use super::{EncodeError, Phrase};

/// Largest SQ the engine supports (and the size Linux uses).
pub const MAX_SQ: usize = irdma_hal::cqp::CQP_SQ_MAX as usize;

/// Wait budgets (defaults: Linux's, spec §2.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// CQP create/destroy handshake (CCQPSTATUS).
    pub create: Duration,
    /// A register-polled op (CQPTAIL).
    pub poll_registers: Duration,
    /// A CCQ-polled op.
    pub ccq: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            create: Duration::from_millis(10),
            poll_registers: Duration::from_millis(10),
            ccq: Duration::from_secs(1),
        }
    }
}

/// How to create the CQP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqpConfig {
    /// SQ size: a power of two, 4..=2048 (Linux: 2048).
    pub sq_size: u32,
    /// Completion context echoed in CCQ CQEs (host context @24).
    pub completion_ctx: u64,
    /// Host-context fields (HMC profile, timer slots, protocol, versions).
    pub hmc_profile: u8,
    /// Timer slots.
    pub timer_slots: u8,
    /// Protocol used (2 = RoCE only).
    pub protocol_used: u8,
    /// HW_MAJVER (1 on GEN_2).
    pub hw_maj_ver: u16,
    /// HW_MINVER.
    pub hw_min_ver: u16,
    /// Structure version.
    pub struct_ver: u8,
    /// Enabled VFs.
    pub ena_vf_count: u8,
    /// CEQs per VF.
    pub ceqs_per_vf: u8,
    /// DISABLE_PFPDUS.
    pub disable_packed: bool,
    /// ROCEV2_RTO_POLICY.
    pub rocev2_rto_policy: bool,
    /// EN_REM_ENDPOINT_TRK.
    pub en_rem_endpoint_trk: bool,
    /// DCQCN parameters.
    pub dcqcn: Dcqcn,
    /// Wait budgets.
    pub timeouts: Timeouts,
}

impl CqpConfig {
    /// Linux's GEN_2 RoCE configuration with an SQ of `sq_size`.
    pub fn gen2_roce(sq_size: u32) -> Self {
        let c = CqpHostCtx::gen2_roce(sq_size, 0, 0);
        CqpConfig {
            sq_size,
            completion_ctx: 0,
            hmc_profile: c.hmc_profile,
            timer_slots: c.timer_slots,
            protocol_used: c.protocol_used,
            hw_maj_ver: c.hw_maj_ver,
            hw_min_ver: c.hw_min_ver,
            struct_ver: 0,
            ena_vf_count: 0,
            ceqs_per_vf: 0,
            disable_packed: false,
            rocev2_rto_policy: false,
            en_rem_endpoint_trk: false,
            dcqcn: Dcqcn::default(),
            timeouts: Timeouts::default(),
        }
    }

    /// The host context for an SQ at `sq_pa`.
    pub fn host_ctx(&self, sq_pa: u64) -> CqpHostCtx {
        CqpHostCtx {
            sq_size: self.sq_size,
            sq_pa,
            completion_ctx: self.completion_ctx,
            struct_ver: self.struct_ver,
            hmc_profile: self.hmc_profile,
            ena_vf_count: self.ena_vf_count,
            ceqs_per_vf: self.ceqs_per_vf,
            timer_slots: self.timer_slots,
            disable_packed: self.disable_packed,
            rocev2_rto_policy: self.rocev2_rto_policy,
            en_rem_endpoint_trk: self.en_rem_endpoint_trk,
            protocol_used: self.protocol_used,
            hw_maj_ver: self.hw_maj_ver,
            hw_min_ver: self.hw_min_ver,
            dcqcn: self.dcqcn,
        }
    }
}

/// A CQP failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CqpError {
    /// The command's inputs were refused before anything reached the device.
    Encode(EncodeError),
    /// DMA memory could not be had.
    Dma(DmaError),
    /// The device did not answer in time; `what` names the wait.
    Timeout {
        /// Which wait.
        what: Phrase,
    },
    /// CQP create failed (CCQPSTATUS.CCQP_ERR) with these CQPERRCODES.
    CreateFailed {
        /// Major code.
        major: u16,
        /// Minor code.
        minor: u16,
    },
    /// An operation completed with an error.
    OpFailed {
        /// Its opcode.
        opcode: u8,
        /// Major code.
        major: u16,
        /// Minor code.
        minor: u16,
    },
    /// No free SQ slot (size − 1 commands in flight).
    RingFull,
    /// Before the CCQ exists only one command may be in flight.
    Busy,
    /// The device reported something impossible (a completion for a slot
    /// with no command, a stash overflow); `what` says which.
    Protocol {
        /// What.
        what: Phrase,
    },
    /// A result buffer was asked for with a buffer the command did not name.
    WrongBuffer,
    /// The device filled an FPM buffer the vendor would refuse.
    BadFpmBuffer(DecodeError),
    /// An earlier CQP op timed out or device memory had to be quarantined:
    /// the function needs a reset before the CQP is used again (Linux sets
    /// `rf->reset` and asks the LAN driver for one: utils.c:
    /// irdma_wait_event / irdma_handle_cqp_op, main.c: irdma_request_reset).
    /// Nothing was sent to the device.
    NeedsReset,
    /// The device's QUERY_RDMA_FEATURES response was refused.
    BadFeatures(FeaturesError),
    /// The device is gone (surprise removal): CQPTAIL read all-ones, which
    /// a present device never returns (bits 30:11 are reserved, irdma.h:
    /// IRDMA_CQPTAIL_WQTAIL / IRDMA_CQPTAIL_CQP_OP_ERR), as a PCIe read of a
    /// removed function completes with all-ones. Like a timeout, the
    /// function needs a reset; memory it was given is quarantined.
    DeviceGone,
}

/// Whether a register value is what a read of a removed device returns
/// (all-ones) for a register with reserved bits (CQPTAIL).
pub(crate) fn reads_removed(v: u32) -> bool {
    v == u32::MAX
}

impl CqpError {
    /// Whether Linux treats this failure as non-critical (no function
    /// reset): major 0xFFFF with minor 0x8002 invalid state, 0x8006 flush
    /// with nothing pending, 0x8007 bad close, 0x8009 LLP closed, 0x800A
    /// reset not sent, 0x0200 failover pending; major 0xF002 minor 1
    /// (utils.c: irdma_noncrit_err_list; spec §2.6).
    pub fn is_noncritical(&self) -> bool {
        match *self {
            CqpError::OpFailed { major: 0xffff, minor, .. } => {
                matches!(minor, 0x8002 | 0x8006 | 0x8007 | 0x8009 | 0x800a | 0x0200)
            }
            CqpError::OpFailed { major: 0xf002, minor: 1, .. } => true,
            _ => false,
        }
    }
}

crate::error::wrapping!(CqpError from { EncodeError => Encode, DmaError => Dma });

/// What a completion reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// OPRETVAL (e.g. the queue-set handle of a WS leaf add).
    pub op_ret_val: u32,
    /// Minor code of a successful completion (FLUSH_WQES: 2 = RQ flushed,
    /// 3 = SQ flushed).
    pub minor: u16,
    /// The scratch cookie given to [`Cqp::post`].
    pub scratch: u64,
    /// SQ slot the command used.
    pub wqe_idx: u16,
}

/// A command in the SQ, not yet completed. Only [`Cqp::post`] makes one.
#[must_use = "a posted command must be waited for"]
#[derive(Debug)]
pub struct Posted<C> {
    cmd: C,
    idx: u16,
}

impl<C> Posted<C> {
    /// SQ slot the command occupies.
    pub fn wqe_idx(&self) -> u16 {
        self.idx
    }
}

/// A completed command and its result. Only [`Cqp::wait`] makes one.
#[derive(Debug)]
pub struct Completed<C> {
    cmd: C,
    info: Completion,
}

impl<C> Completed<C> {
    /// OPRETVAL.
    pub fn op_ret_val(&self) -> u32 {
        self.info.op_ret_val
    }
    /// Everything the completion reported.
    pub fn info(&self) -> Completion {
        self.info
    }
    /// The command, e.g. to decode the buffer it named.
    pub fn command(&self) -> &C {
        &self.cmd
    }
    /// The command back.
    pub fn into_command(self) -> C {
        self.cmd
    }
}

/// A command without its type, for the non-generic post (`CqpCommand`
/// has an associated const, so `dyn CqpCommand` does not exist): what
/// the ring work needs of a command.
pub(crate) trait DynCmd {
    /// [`CqpCommand::encode`].
    fn encode_dyn(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError>;
    /// [`CqpCommand::pre_post_writes`].
    fn pre_post_writes_dyn(&self) -> &'static [(usize, u32)];
}

/// A borrowed command as a [`DynCmd`].
pub(crate) struct Cmd<'a, C>(pub(crate) &'a C);

impl<C: CqpCommand> DynCmd for Cmd<'_, C> {
    fn encode_dyn(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        self.0.encode(wqe, env)
    }
    fn pre_post_writes_dyn(&self) -> &'static [(usize, u32)] {
        self.0.pre_post_writes()
    }
}

fn read_words<H: Hal, const N: usize>(buf: &Dma<H>) -> [u64; N] {
    let mut w = [0u64; N];
    for (i, x) in w.iter_mut().enumerate() {
        *x = buf.read_u64(8 * i).unwrap_or(0);
    }
    w
}

impl Completed<QueryFpmVal> {
    /// Decodes the query buffer the completed command named; `buf` must be
    /// that buffer. `manage_rsrc_ver2` comes from [`RdmaFeatures`].
    pub fn decode<H: Hal>(
        &self,
        buf: &Dma<H>,
        manage_rsrc_ver2: bool,
    ) -> Result<FpmQuery, CqpError> {
        if buf.paddr() != self.cmd.buf_pa || buf.len() < irdma_hal::cqp::FPM_BUF_BYTES {
            return Err(CqpError::WrongBuffer);
        }
        // The PF queries its own function: no SD is held back.
        FpmQuery::decode(&read_words::<H, 24>(buf), manage_rsrc_ver2, false)
            .map_err(CqpError::BadFpmBuffer)
    }
}

impl Completed<CommitFpmVal> {
    /// Decodes the committed counts and bases from the buffer the completed
    /// command named; `sizes` are the object sizes from the query.
    pub fn decode<H: Hal>(
        &self,
        buf: &Dma<H>,
        sizes: &[u64; HMC_OBJ_COUNT],
    ) -> Result<FpmCommit, CqpError> {
        if buf.paddr() != self.cmd.buf_pa || buf.len() < irdma_hal::cqp::FPM_BUF_BYTES {
            return Err(CqpError::WrongBuffer);
        }
        FpmCommit::decode(&read_words::<H, 24>(buf), sizes).map_err(CqpError::BadFpmBuffer)
    }
}

impl Completed<QueryRdmaFeatures> {
    /// Decodes the response in the buffer the completed command named.
    pub fn decode<H: Hal>(&self, buf: &Dma<H>) -> Result<RdmaFeatures, CqpError> {
        if buf.paddr() != self.cmd.buf_pa || buf.len() < self.cmd.buf_len as usize {
            return Err(CqpError::WrongBuffer);
        }
        let w: [u64; irdma_hal::cqp::features::MAX_FEATURES] = read_words(buf);
        let n = (self.cmd.buf_len as usize / 8).min(w.len());
        RdmaFeatures::decode(w.get(..n).unwrap_or(&[])).map_err(CqpError::BadFeatures)
    }
}

impl Completed<WsNode> {
    /// The queue-set handle a leaf add returns in OPRETVAL (utils.c:
    /// irdma_cqp_ws_node_cmd), or `None` if it does not fit 16 bits.
    pub fn qs_handle(&self) -> Option<u16> {
        u16::try_from(self.info.op_ret_val).ok()
    }
}

/// What a completed FLUSH_WQES reports (hw.c: irdma_hw_flush_wqes; main.h:
/// IRDMA_CQP_COMPL_RQ_WQE_FLUSHED = 2, IRDMA_CQP_COMPL_SQ_WQE_FLUSHED = 3).
/// A requested queue that was not flushed had nothing pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushOutcome {
    /// RQ WQEs were flushed.
    pub rq_flushed: bool,
    /// SQ WQEs were flushed.
    pub sq_flushed: bool,
}

impl Completed<FlushWqes> {
    /// Which queue the device reports as flushed.
    pub fn outcome(&self) -> FlushOutcome {
        FlushOutcome { rq_flushed: self.info.minor == 2, sq_flushed: self.info.minor == 3 }
    }
}

/// How to create the CCQ (spec §2.7; Linux: 2050 entries, CEQ 0 ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CcqConfig {
    /// Number of 32-byte CQEs (Linux: SQ size + 2).
    pub entries: u32,
    /// CQ context value (CREATE_CQ @8).
    pub cq_ctx: u64,
    /// CEQ (CEQIDVALID); Linux names CEQ 0, created right after.
    pub ceq_id: Option<u16>,
    /// VSI index.
    pub vsi_idx: u16,
    /// Shadow read threshold (Linux: 16).
    pub shadow_read_threshold: u32,
}

impl CcqConfig {
    /// Linux's CCQ for an SQ of `sq_size` (`sq_size + 2` entries,
    /// saturating: a size past the CQ limit is refused by `create_ccq`).
    pub fn linux(sq_size: u32) -> Self {
        CcqConfig {
            entries: sq_size.saturating_add(2),
            cq_ctx: 0,
            ceq_id: Some(0),
            vsi_idx: 0,
            shadow_read_threshold: 16,
        }
    }
}

struct Ccq<H: Hal> {
    ring: Dma<H>,
    shadow: Dma<H>,
    cons: RingConsumer,
    cfg: CcqConfig,
}

/// The memory the device reads from the moment the create handshake
/// starts: the SQ ring, the host context, the UPDATE_PE_SDS overflow buffer.
struct Rings<H: Hal> {
    sq: Dma<H>,
    host_ctx: Dma<H>,
    sdbuf: Dma<H>,
}

/// A completion of one SQ slot.
type SlotResult = (u16, Result<Completion, CqpError>);

/// Completions seen for other slots while waiting for one.
const STASH: usize = 32;

/// The Control QP. Share it behind a [`spin::Mutex`] ([`SharedCqp`]).
pub struct Cqp<H: Hal, B: Bar> {
    bar: B,
    /// `None` once handed back ([`Cqp::destroy_into`]) or freed.
    mem: Option<Rings<H>>,
    sq_pa: u64,
    host_ctx_pa: u64,
    sdbuf_pa: u64,
    size: u32,
    head: u32,
    polarity: bool,
    inflight: u32,
    pending: [u64; MAX_SQ / 64],
    scratch: [u64; MAX_SQ],
    stash: heapless::Vec<SlotResult, STASH>,
    /// CQPTAIL.WQTAIL read before the last register-polled doorbell.
    pre_tail: u32,
    /// CQPTAIL.CQP_OP_ERR as read before the last register-polled post: a
    /// bit still set from an earlier failure says nothing about this op.
    pre_err: bool,
    ccq: Option<Ccq<H>>,
    /// The ring and shadow area of a CCQ whose CREATE_CQ timed out: the
    /// device may have taken them, so they are never freed here.
    lost_ccq: Option<Ccq<H>>,
    limits: Limits,
    timeouts: Timeouts,
    alive: bool,
    /// The device may read or write `mem` (from CCQPLOW until a confirmed
    /// destroy); when set at drop, the memory is leaked, not freed.
    device_owned: bool,
    /// Ops that ended since the owner last took them
    /// ([`Cqp::take_op_trace`]), oldest first; the oldest drop when full.
    trace: heapless::Deque<(u8, crate::flight::CqpOutcome), 8>,
    /// The CCQ is armed for interrupts (its CEQ raises a vector): re-arm
    /// after every wait that consumed a CCQ CQE (spec interrupts.md A.3).
    ccq_irq: bool,
    /// A CCQ CQE was consumed since the last arm.
    ccq_consumed: bool,
    _hal: PhantomData<H>,
}

/// A CQP shared by several callers.
pub type SharedCqp<H, B> = spin::Mutex<Cqp<H, B>>;

/// Orders a completion read from a register (CQPTAIL) before the reads of
/// the DMA buffers the completed op wrote: `dma_rmb` is `dmb oshld` on
/// aarch64 (load→load and load→store in the outer-shareable domain, which
/// covers an MMIO load followed by Normal-memory loads), a compiler fence on
/// x86_64, where loads are not reordered with loads.
#[inline(always)]
fn completion_rmb() {
    dma_rmb();
    #[cfg(test)]
    tests::COMPLETION_RMB.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
}

fn deadline<H: Hal>(budget: Duration) -> Duration {
    irdma_hal::dma::now::<H>().saturating_add(budget)
}

impl<H: Hal, B: Bar> Cqp<H, B> {
    /// Allocates the SQ, host context and SD overflow buffer, then runs the
    /// create handshake: CQPTAIL, CQPDB, CCQPSTATUS ← 0; CCQPHIGH then
    /// CCQPLOW ← host-context address; poll CCQPSTATUS (spec §2.4).
    pub fn create(bar: B, cfg: &CqpConfig) -> Result<Self, CqpError> {
        CqpHostCtx::encoded_sq_size(cfg.sq_size)?;
        let size = cfg.sq_size as usize;
        let sq = Dma::<H>::with_bytes(size * CQP_WQE_BYTES, BufferDirection::DriverToDevice)?;
        let host_ctx = Dma::<H>::new(1, BufferDirection::DriverToDevice)?;
        let sdbuf =
            Dma::<H>::with_bytes(size * SDBUF_BYTES_PER_SLOT, BufferDirection::DriverToDevice)?;
        let mut words = [0u64; 8];
        cfg.host_ctx(sq.paddr()).encode(&mut words)?;
        host_ctx.write_u64s(0, &words);
        let (sq_pa, host_ctx_pa, sdbuf_pa) = (sq.paddr(), host_ctx.paddr(), sdbuf.paddr());
        let mut cqp = Cqp {
            bar,
            mem: Some(Rings { sq, host_ctx, sdbuf }),
            sq_pa,
            host_ctx_pa,
            sdbuf_pa,
            size: cfg.sq_size,
            head: 0,
            polarity: false,
            inflight: 0,
            pending: [0; MAX_SQ / 64],
            scratch: [0; MAX_SQ],
            stash: heapless::Vec::new(),
            ccq_irq: false,
            ccq_consumed: false,
            pre_tail: 0,
            pre_err: false,
            ccq: None,
            lost_ccq: None,
            trace: heapless::Deque::new(),
            limits: Limits::NONE,
            timeouts: cfg.timeouts,
            alive: false,
            device_owned: false,
            _hal: PhantomData,
        };
        // ctrl.c: irdma_sc_cqp_init (GEN_2 also zeroes CQPDB and CCQPSTATUS).
        cqp.bar.write32(regs::CQPTAIL, 0);
        cqp.bar.write32(regs::CQPDB, 0);
        cqp.bar.write32(regs::CCQPSTATUS, 0);
        wmb();
        let pa = cqp.host_ctx_pa;
        cqp.bar.write32(regs::CCQPHIGH, (pa >> 32) as u32);
        // From here the device may read the host context and the SQ: a
        // create that times out leaves them with the device (never freed).
        cqp.device_owned = true;
        cqp.bar.write32(regs::CCQPLOW, pa as u32);
        let end = deadline::<H>(cqp.timeouts.create);
        let mut status = 0;
        let bar = &cqp.bar;
        let ok = irdma_hal::dma::wait_until::<H>(end, || {
            status = bar.read32(regs::CCQPSTATUS);
            status != 0
        });
        if !ok {
            return Err(CqpError::Timeout { what: Phrase::new(&"CQP create (CCQPSTATUS)") });
        }
        if rf::CCQPSTATUS_ERR.is_set(status as u64) {
            // The device refused the CQP: it holds none of the memory.
            cqp.device_owned = false;
            let (major, minor) = cqp.err_codes();
            return Err(CqpError::CreateFailed { major, minor });
        }
        cqp.alive = true;
        Ok(cqp)
    }

    fn err_codes(&self) -> (u16, u16) {
        let e = self.bar.read32(regs::CQPERRCODES) as u64;
        (rf::CQPERRCODES_MAJOR.get(e) as u16, rf::CQPERRCODES_MINOR.get(e) as u16)
    }

    /// The BAR (the driver's own register writes: PFHMC_PDINV). Not public:
    /// a raw write can point the device at any memory.
    pub(crate) fn bar(&self) -> &B {
        &self.bar
    }

    /// SQ size.
    pub fn sq_size(&self) -> u32 {
        self.size
    }

    /// Bus address of the CQP host context.
    pub fn host_ctx_pa(&self) -> u64 {
        self.host_ctx_pa
    }

    /// Bus address of the SQ ring.
    pub fn sq_pa(&self) -> u64 {
        self.sq_pa
    }

    /// Bus address and length of the UPDATE_PE_SDS overflow buffer.
    pub fn sdbuf(&self) -> (u64, usize) {
        (self.sdbuf_pa, self.size as usize * SDBUF_BYTES_PER_SLOT)
    }

    /// The next slot a command will take and the valid bit it will carry.
    pub fn next_slot(&self) -> (u32, bool) {
        let pol = if self.head == 0 { !self.polarity } else { self.polarity };
        (self.head, pol)
    }

    /// Sets the id limits builders check against (after COMMIT_FPM_VAL).
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Whether completions come through the CCQ.
    pub fn has_ccq(&self) -> bool {
        self.ccq.is_some()
    }

    /// Commands in flight.
    pub fn inflight(&self) -> u32 {
        self.inflight
    }

    /// The eight words of SQ slot `idx` as the device sees them.
    pub fn sq_wqe(&self, idx: u32) -> Option<[u64; 8]> {
        if idx >= self.size {
            return None;
        }
        let base = idx as usize * CQP_WQE_BYTES;
        let mut w = [0u64; 8];
        for (i, x) in w.iter_mut().enumerate() {
            *x = self.mem.as_ref()?.sq.read_u64(base + 8 * i)?;
        }
        Some(w)
    }

    fn set_pending(&mut self, idx: u32, on: bool) -> bool {
        let Some(word) = self.pending.get_mut(idx as usize / 64) else { return false };
        let bit = 1u64 << (idx % 64);
        let was = *word & bit != 0;
        if on {
            *word |= bit
        } else {
            *word &= !bit
        }
        was
    }

    /// Encodes `cmd` into the next SQ slot (header last, after a write
    /// barrier, with the current polarity) and rings CQPDB with the new head
    /// (spec §2.5).
    ///
    /// Only the encoding is generic over the command; the checks and the
    /// ring work are the non-generic `post_check` and
    /// `post_encoded`, shared by every command type.
    pub fn post<C: CqpCommand>(&mut self, cmd: C, scratch: u64) -> Result<Posted<C>, CqpError> {
        let idx = self.post_dyn(&Cmd(&cmd), scratch)?;
        Ok(Posted { cmd, idx })
    }

    /// [`Self::post`] without the command's type: the encoder is reached
    /// through a vtable, so the environment set-up, the
    /// checks and the ring work exist once for every command type.
    #[inline(never)]
    fn post_dyn(&mut self, cmd: &dyn DynCmd, scratch: u64) -> Result<u16, CqpError> {
        let sdbuf_pa = self.post_check()?;
        let mut env = Env::new(self.limits);
        env.sdbuf_pa = sdbuf_pa;
        let mut wqe = [0u64; 8];
        cmd.encode_dyn(&mut wqe, &mut env)?;
        Ok(self.post_encoded(&wqe, &env, cmd.pre_post_writes_dyn(), scratch))
    }

    /// The checks before a post; the bus address of the next slot's
    /// overflow buffer (the encoding environment's `sdbuf_pa`).
    #[inline(never)]
    fn post_check(&self) -> Result<u64, CqpError> {
        if !self.alive || self.mem.is_none() {
            return Err(CqpError::Protocol { what: Phrase::new(&"CQP not alive") });
        }
        if self.ccq.is_none() && self.inflight > 0 {
            return Err(CqpError::Busy);
        }
        if self.inflight + 1 >= self.size {
            return Err(CqpError::RingFull);
        }
        Ok(self.sdbuf_pa.wrapping_add(self.head as u64 * SDBUF_BYTES_PER_SLOT as u64))
    }

    /// Places an encoded WQE (and its overflow words) in the next slot and
    /// rings the doorbell; [`Self::post_check`] has checked there is room.
    /// Nothing is touched before the command has encoded successfully.
    #[inline(never)]
    fn post_encoded(
        &mut self,
        wqe: &[u64; 8],
        env: &Env,
        pre_post_writes: &[(usize, u32)],
        scratch: u64,
    ) -> u16 {
        let idx = self.head;
        let Some(mem) = self.mem.as_ref() else { return idx as u16 };
        let slot_sdbuf = idx as usize * SDBUF_BYTES_PER_SLOT;
        // One bounds check and one loop per run (code size: the 8-word
        // stores were unrolled, each with its own check).
        let n = env.sdbuf_words.min(env.sdbuf.len());
        mem.sdbuf.write_u64s(slot_sdbuf, env.sdbuf.get(..n).unwrap_or(&[]));
        // `size` is a power of two (`Cqp::create` refused anything else
        // through `encoded_sq_size`): a mask, no division and no
        // divide-by-zero panic path.
        self.head = (idx + 1) & self.size.wrapping_sub(1);
        if idx == 0 {
            self.polarity = !self.polarity;
        }
        if let Some(s) = self.scratch.get_mut(idx as usize) {
            *s = scratch;
        }
        let base = idx as usize * CQP_WQE_BYTES;
        // Every word but the header (written last, below), in order.
        let (before, rest) = wqe.split_at(irdma_hal::cqp::CQP_HEADER_WORD);
        mem.sq.write_u64s(base, before);
        mem.sq.write_u64s(base + 8 * (before.len() + 1), rest.get(1..).unwrap_or(&[]));
        dma_wmb();
        let h = hdr::WQEVALID.set(wqe[irdma_hal::cqp::CQP_HEADER_WORD], self.polarity as u64);
        mem.sq.write_u64(base + 8 * irdma_hal::cqp::CQP_HEADER_WORD, h);
        self.set_pending(idx, true);
        self.inflight += 1;
        for (off, v) in pre_post_writes {
            self.bar.write32(*off, *v);
        }
        if self.ccq.is_none() {
            let tail = self.bar.read32(regs::CQPTAIL) as u64;
            self.pre_tail = rf::CQPTAIL_WQTAIL.get(tail) as u32;
            self.pre_err = rf::CQPTAIL_OP_ERR.is_set(tail);
        }
        wmb();
        self.bar.write32(regs::CQPDB, self.head);
        idx as u16
    }

    /// Waits for `posted` to complete.
    pub fn wait<C>(&mut self, posted: Posted<C>) -> Result<Completed<C>, CqpError> {
        let Posted { cmd, idx } = posted;
        self.wait_slot(idx).map(|info| Completed { cmd, info })
    }

    /// Waits for slot `idx` and records its outcome in the op trace
    /// (non-generic: one copy for every command type).
    #[inline(never)]
    fn wait_slot(&mut self, idx: u16) -> Result<Completion, CqpError> {
        let opcode = self.opcode_at(idx);
        let r = if self.ccq.is_some() { self.wait_ccq(idx) } else { self.wait_registers(idx) };
        // Re-arm only after a drain that consumed a CQE; an empty one
        // leaves the earlier arm outstanding (hw.c: irdma_cqp_ce_handler).
        if self.ccq_irq && self.ccq_consumed {
            self.arm_ccq();
        }
        use crate::flight::CqpOutcome as O;
        let outcome = match &r {
            Ok(_) => O::Ok,
            Err(CqpError::OpFailed { major, minor, .. }) => {
                O::Failed { major: *major, minor: *minor }
            }
            Err(CqpError::Timeout { .. }) => O::Timeout,
            Err(_) => O::Error,
        };
        if self.trace.is_full() {
            let _ = self.trace.pop_front();
        }
        let _ = self.trace.push_back((opcode, outcome));
        r
    }

    /// The oldest op (opcode, outcome) that ended since the last call: what
    /// the device's flight recorder copies after each use of the CQP.
    pub(crate) fn take_op_trace(&mut self) -> Option<(u8, crate::flight::CqpOutcome)> {
        self.trace.pop_front()
    }

    /// Posts `cmd` and waits for it.
    pub fn exec<C: CqpCommand>(&mut self, cmd: C, scratch: u64) -> Result<Completed<C>, CqpError> {
        let info = self.exec_dyn(&Cmd(&cmd), scratch)?;
        Ok(Completed { cmd, info })
    }

    /// [`Self::exec`] when only the completion is wanted (the command is
    /// not moved into a [`Completed`]).
    #[inline]
    pub(crate) fn exec_info<C: CqpCommand>(
        &mut self,
        cmd: C,
        scratch: u64,
    ) -> Result<Completion, CqpError> {
        self.exec_dyn(&Cmd(&cmd), scratch)
    }

    /// [`Self::exec`] without the command's type (one copy for all).
    #[inline(never)]
    pub(crate) fn exec_dyn(
        &mut self,
        cmd: &dyn DynCmd,
        scratch: u64,
    ) -> Result<Completion, CqpError> {
        let idx = self.post_dyn(cmd, scratch)?;
        self.wait_slot(idx)
    }

    fn opcode_at(&self, idx: u16) -> u8 {
        let w = self.mem.as_ref().and_then(|m| m.sq.read_u64(idx as usize * CQP_WQE_BYTES + 24));
        let w = w.unwrap_or(0);
        hdr::OPCODE.get(w) as u8
    }

    fn retire(&mut self, idx: u16) -> Result<u64, CqpError> {
        if !self.set_pending(idx as u32, false) {
            return Err(CqpError::Protocol {
                what: Phrase::new(&"completion for a slot with no command"),
            });
        }
        self.inflight = self.inflight.saturating_sub(1);
        Ok(self.scratch.get(idx as usize).copied().unwrap_or(0))
    }

    /// Register polling: CQPTAIL.WQTAIL moves (done) or CQP_OP_ERR is set
    /// (CQPERRCODES) — ctrl.c: irdma_cqp_poll_registers.
    fn wait_registers(&mut self, idx: u16) -> Result<Completion, CqpError> {
        let end = deadline::<H>(self.timeouts.poll_registers);
        let mut tail = 0u64;
        let pre = self.pre_tail as u64;
        let pre_err = self.pre_err;
        let bar = &self.bar;
        // Done when WQTAIL moved (the error bit then belongs to this op), or
        // when the error bit rose without a move. An error bit that was
        // already set before the doorbell is stale until the tail moves: a
        // device that has not yet seen the doorbell (or a shared-memory BAR
        // between polls) still shows the previous op's failure.
        let ok = irdma_hal::dma::wait_until::<H>(end, || {
            let raw = bar.read32(regs::CQPTAIL);
            tail = raw as u64;
            let moved = rf::CQPTAIL_WQTAIL.get(tail) != pre;
            reads_removed(raw) || moved || (rf::CQPTAIL_OP_ERR.is_set(tail) && !pre_err)
        });
        if reads_removed(tail as u32) {
            return Err(CqpError::DeviceGone);
        }
        // A device that leaves WQTAIL in place when an op fails, right after
        // an earlier failure, only shows the error bit: once the wait is
        // over, a set bit is this op's failure rather than a hang.
        if !ok && !rf::CQPTAIL_OP_ERR.is_set(tail) {
            return Err(CqpError::Timeout { what: Phrase::new(&"CQP op (CQPTAIL)") });
        }
        // The CQPTAIL read above said the op is done; what it wrote into
        // DMA memory (QUERY_RDMA_FEATURES, QUERY_FPM_VAL and COMMIT_FPM_VAL
        // buffers) is read after this returns. A bare MMIO load does not
        // order later Normal-memory loads on aarch64 (Linux's arm64 `readl`
        // does, with `__iormb` = `dma_rmb` after the load), so order them here.
        completion_rmb();
        let scratch = self.retire(idx)?;
        if rf::CQPTAIL_OP_ERR.is_set(tail) {
            let (major, minor) = self.err_codes();
            return Err(CqpError::OpFailed { opcode: self.opcode_at(idx), major, minor });
        }
        Ok(Completion { op_ret_val: 0, minor: 0, scratch, wqe_idx: idx })
    }

    /// Consumes one CCQ CQE if there is one; returns its slot and result.
    fn poll_ccq_once(&mut self) -> Result<Option<SlotResult>, CqpError> {
        let Some(ccq) = self.ccq.as_mut() else { return Ok(None) };
        let base = ccq.cons.head as usize * CCQ_CQE_BYTES;
        let Some(w24) = ccq.ring.read_u64(base + 24) else {
            return Err(CqpError::Protocol { what: Phrase::new(&"CCQ head outside its ring") });
        };
        if ccq::VALID.is_set(w24) != ccq.cons.polarity {
            return Ok(None);
        }
        dma_rmb();
        let mut words = [0u64; 4];
        // Word 3 was in the ring, so all four are (one check, one loop).
        ccq.ring.read_u64s(base, &mut words);
        let Some(cqe) = CcqCqe::decode(&words, ccq.cons.polarity) else { return Ok(None) };
        let head = ccq.cons.advance();
        ccq.shadow.write_u64(0, ccq::DBSA_CQEIDX.prep(head as u64));
        self.ccq_consumed = true;
        let idx = cqe.wqe_idx;
        if idx as u32 >= self.size {
            return Err(CqpError::Protocol {
                what: Phrase::new(&"CCQ CQE names a slot outside the SQ"),
            });
        }
        let scratch = self.retire(idx)?;
        let r = if cqe.error {
            Err(CqpError::OpFailed {
                opcode: self.opcode_at(idx),
                major: cqe.major,
                minor: cqe.minor,
            })
        } else {
            Ok(Completion { op_ret_val: cqe.op_ret_val, minor: cqe.minor, scratch, wqe_idx: idx })
        };
        Ok(Some((idx, r)))
    }

    fn wait_ccq(&mut self, idx: u16) -> Result<Completion, CqpError> {
        self.wait_ccq_or_registers(idx, false)
    }

    /// Waits for slot `idx` in the CCQ. With `watch_registers`, a failure
    /// reported only through CQPTAIL.CQP_OP_ERR (with WQTAIL moved past the
    /// pre-post value) also ends the wait: that is how a refused CREATE_CQ of
    /// the CCQ itself is reported, since it cannot complete into the CCQ it
    /// failed to create (ctrl.c: irdma_cqp_poll_registers reads CQPTAIL and
    /// CQPERRCODES on that path).
    fn wait_ccq_or_registers(
        &mut self,
        idx: u16,
        watch_registers: bool,
    ) -> Result<Completion, CqpError> {
        if let Some(pos) = self.stash.iter().position(|(i, _)| *i == idx) {
            return self.stash.swap_remove(pos).1;
        }
        let end = deadline::<H>(self.timeouts.ccq);
        loop {
            match self.poll_ccq_once()? {
                Some((i, r)) if i == idx => return r,
                Some(other) => {
                    if self.stash.push(other).is_err() {
                        return Err(CqpError::Protocol {
                            what: Phrase::new(&"too many unclaimed completions"),
                        });
                    }
                }
                None => {
                    if watch_registers {
                        let raw = self.bar.read32(regs::CQPTAIL);
                        if reads_removed(raw) {
                            return Err(CqpError::DeviceGone);
                        }
                        let tail = raw as u64;
                        let moved = rf::CQPTAIL_WQTAIL.get(tail) != self.pre_tail as u64;
                        if moved && rf::CQPTAIL_OP_ERR.is_set(tail) {
                            self.retire(idx)?;
                            let (major, minor) = self.err_codes();
                            let opcode = self.opcode_at(idx);
                            return Err(CqpError::OpFailed { opcode, major, minor });
                        }
                    }
                    if irdma_hal::dma::now::<H>() >= end {
                        // No completion in time: a removed device is told
                        // apart from a hung one by one register read.
                        if reads_removed(self.bar.read32(regs::CQPTAIL)) {
                            return Err(CqpError::DeviceGone);
                        }
                        return Err(CqpError::Timeout { what: Phrase::new(&"CQP op (CCQ)") });
                    }
                    H::relax();
                }
            }
        }
    }

    /// Creates the CCQ (CQ 0) and switches completions to it; the CREATE_CQ
    /// completion itself arrives in the new CCQ (ctrl.c:
    /// irdma_sc_ccq_create_done; spec §2.7).
    pub fn create_ccq(&mut self, cfg: CcqConfig) -> Result<(), CqpError> {
        if self.ccq.is_some() {
            return Err(CqpError::Protocol { what: Phrase::new(&"CCQ exists") });
        }
        if self.inflight > 0 {
            return Err(CqpError::Busy);
        }
        let probe = CreateCq { cq_size: cfg.entries, ..CreateCq::default() };
        probe.check_ccq().map_err(CqpError::Encode)?;
        let ring = Dma::<H>::with_bytes(
            (cfg.entries.max(1) as usize) * CCQ_CQE_BYTES,
            BufferDirection::DeviceToDriver,
        )?;
        let shadow = Dma::<H>::new(1, BufferDirection::Both)?;
        let cmd = CreateCq {
            cq_id: 0,
            cq_size: cfg.entries,
            cq_ctx: cfg.cq_ctx,
            shadow_read_threshold: cfg.shadow_read_threshold,
            ceq_id: cfg.ceq_id,
            ceqe_mask: false,
            check_overflow: true,
            ring: super::cmd::QueueAddr::contiguous(ring.paddr()),
            shadow_area_pa: shadow.paddr(),
            vsi_idx: cfg.vsi_idx,
            // no TPH, 32-byte CQEs, no PASID
            ..Default::default()
        };
        let posted = self.post(cmd, 0)?;
        self.ccq = Some(Ccq { ring, shadow, cons: RingConsumer::new(cfg.entries), cfg });
        match self.wait_ccq_or_registers(posted.idx, true) {
            Ok(_) => Ok(()),
            Err(e) => {
                // Fall back to registers. A refusal (error codes) means the
                // device did not take the CCQ and its memory can go; anything
                // else (a timeout) may have left the device writing into it,
                // so it is kept until the engine is handed back or leaked.
                let ccq = self.ccq.take();
                if device_may_own(&e) {
                    self.lost_ccq = ccq;
                }
                self.inflight = 0;
                self.pending = [0; MAX_SQ / 64];
                Err(e)
            }
        }
    }

    /// Turns CCQ interrupts on (arms the CCQ now, and again after every
    /// wait that consumed a CCQ CQE) or off. The waits stay polled — the
    /// arm only lets a CQP completion raise CEQ 0's vector (spec
    /// interrupts.md A.3, A.6; Linux also keeps polling as its safety net).
    pub fn set_ccq_interrupts(&mut self, on: bool) {
        self.ccq_irq = on && self.ccq.is_some();
        if self.ccq_irq {
            self.arm_ccq();
        }
    }

    /// Whether CCQ interrupts are on ([`Cqp::set_ccq_interrupts`]).
    pub fn ccq_interrupts(&self) -> bool {
        self.ccq_irq
    }

    /// Arms the CCQ (ctrl.c: irdma_sc_ccq_arm): in shadow +32 keep
    /// SW_CQ_SELECT and ARM_NEXT_SE as read, bump ARM_SEQ_NUM, set
    /// ARM_NEXT; barrier; CQ id 0 to CQARM.
    fn arm_ccq(&mut self) {
        use irdma_hal::wqe::shadow as sh;
        let Some(ccq) = self.ccq.as_ref() else { return };
        let Some(w) = ccq.shadow.read_u64(sh::CQ_ARM_OFFSET) else { return };
        let seq = (sh::CQ_ARM_SEQ_NUM.get(w) + 1) & 3;
        let nw = sh::CQ_SW_CQ_SELECT.prep(sh::CQ_SW_CQ_SELECT.get(w))
            | sh::CQ_ARM_SEQ_NUM.prep(seq)
            | sh::CQ_ARM_NEXT_SE.prep(sh::CQ_ARM_NEXT_SE.get(w))
            | sh::CQ_ARM_NEXT.prep(1);
        ccq.shadow.write_u64(sh::CQ_ARM_OFFSET, nw);
        dma_wmb();
        self.bar.write32(regs::CQARM, 0);
        self.ccq_consumed = false;
    }

    /// Destroys the CCQ (register-polled, ctrl.c: irdma_sc_ccq_destroy).
    pub fn destroy_ccq(&mut self) -> Result<(), CqpError> {
        let Some(ccq) = self.ccq.as_ref() else { return Ok(()) };
        if self.inflight > 0 {
            return Err(CqpError::Busy);
        }
        let cmd = DestroyCcq {
            cq_size: ccq.cfg.entries,
            cq_ctx: ccq.cfg.cq_ctx,
            ceq_id: ccq.cfg.ceq_id,
            ceqe_mask: false,
            shadow_area_pa: ccq.shadow.paddr(),
            tph_en: false,
            avoid_mem_cflct: false,
        };
        let keep = self.ccq.take();
        let r = self.exec_info(cmd, 0).map(|_| ());
        if r.is_err() {
            self.ccq = keep;
        }
        r
    }

    /// A NOP round trip (liveness check).
    pub fn nop(&mut self) -> Result<(), CqpError> {
        self.exec_info(Nop, 0).map(|_| ())
    }

    /// Destroys the CQP: CCQ first, then CCQPHIGH/CCQPLOW ← 0 and wait for
    /// CCQPSTATUS.CCQP_DONE to clear (ctrl.c: irdma_sc_cqp_destroy).
    ///
    /// The rings are freed only when the device confirmed the destroy; on
    /// failure they are leaked on purpose (the device may still read or
    /// write them). [`Cqp::destroy_into`] hands them back instead.
    pub fn destroy(mut self) -> Result<(), CqpError> {
        self.shutdown()
    }

    /// [`Cqp::destroy`], handing every buffer the device may still use to
    /// `keep` when the destroy was not confirmed (and any CCQ memory a
    /// timed-out CCQ create left with the device, always). On success the
    /// rest is freed.
    pub fn destroy_into(mut self, keep: &mut dyn FnMut(Dma<H>)) -> Result<(), CqpError> {
        let r = self.shutdown();
        self.surrender(keep);
        r
    }

    /// Gives up the CQP without telling the device (it needs a function
    /// reset, or was reset): every buffer the device may use goes to `keep`.
    /// Linux skips the CCQ, CEQ, AEQ and HMC destroys once `rf->reset` is set
    /// (hw.c: irdma_destroy_ccq, irdma_destroy_ceq, irdma_destroy_aeq,
    /// irdma_del_hmc_objects) and relies on the reset; this driver also
    /// skips the CQP's register handshake, since nothing it confirms would
    /// make the rest of the device's memory safe to free.
    pub fn abandon_into(mut self, keep: &mut dyn FnMut(Dma<H>)) {
        self.alive = false;
        self.surrender(keep);
    }

    /// Hands what the device may still use to `keep`; frees the rest.
    #[inline(never)] // one copy for its callers (code size)
    fn surrender(&mut self, keep: &mut dyn FnMut(Dma<H>)) {
        // The CCQ records stay in place; only their rings move out (code
        // size: no array of two whole records built and iterated).
        let owned = self.device_owned;
        for (k, slot) in [&mut self.lost_ccq, &mut self.ccq].into_iter().enumerate() {
            if (k == 0 || owned)
                && let Some(c) = slot.take()
            {
                keep(c.ring);
                keep(c.shadow);
            }
        }
        if self.device_owned
            && let Some(m) = self.mem.take()
        {
            keep(m.sq);
            keep(m.host_ctx);
            keep(m.sdbuf);
        }
        self.device_owned = false;
    }

    /// Bytes of DMA memory the engine holds that the device may use
    /// (SQ, host context, overflow buffer, CCQ ring and shadow, lost CCQ).
    pub fn dma_bytes(&self) -> u64 {
        let m = self.mem.as_ref().map_or(0, |m| m.sq.len() + m.host_ctx.len() + m.sdbuf.len());
        let c = |c: &Option<Ccq<H>>| c.as_ref().map_or(0, |c| c.ring.len() + c.shadow.len());
        (m + c(&self.ccq) + c(&self.lost_ccq)) as u64
    }

    fn shutdown(&mut self) -> Result<(), CqpError> {
        if !self.alive {
            return Ok(());
        }
        // Tear the CQP down even if the CCQ would not go: a dead device must
        // still be told to stop using the rings.
        let ccq = self.destroy_ccq();
        self.alive = false;
        self.bar.write32(regs::CCQPHIGH, 0);
        self.bar.write32(regs::CCQPLOW, 0);
        let end = deadline::<H>(self.timeouts.create);
        let bar = &self.bar;
        let ok = irdma_hal::dma::wait_until::<H>(end, || {
            !rf::CCQPSTATUS_DONE.is_set(bar.read32(regs::CCQPSTATUS) as u64)
        });
        ccq?;
        if ok {
            // Confirmed: the device no longer uses the CQP's memory.
            self.device_owned = false;
            Ok(())
        } else {
            Err(CqpError::Timeout { what: Phrase::new(&"CQP destroy (CCQPSTATUS)") })
        }
    }
}

/// Whether the device may still use memory named by a command that ended
/// with `e`: not when it refused with error codes, or when nothing reached
/// it; yes after a timeout or a completion that made no sense.
pub fn device_may_own(e: &CqpError) -> bool {
    match e {
        CqpError::Timeout { .. } | CqpError::Protocol { .. } | CqpError::DeviceGone => true,
        CqpError::Encode(_)
        | CqpError::Dma(_)
        | CqpError::CreateFailed { .. }
        | CqpError::OpFailed { .. }
        | CqpError::RingFull
        | CqpError::Busy
        | CqpError::NeedsReset
        | CqpError::WrongBuffer
        | CqpError::BadFpmBuffer(_)
        | CqpError::BadFeatures(_) => false,
    }
}

impl<H: Hal, B: Bar> Drop for Cqp<H, B> {
    fn drop(&mut self) {
        // Tell the device to stop using the rings before their memory is
        // freed. If it does not confirm, the memory is leaked on purpose:
        // freeing it could let the device write into reused pages.
        let _ = self.shutdown();
        let mut leak = |d: Dma<H>| core::mem::forget(d);
        self.surrender(&mut leak);
    }
}

#[cfg(test)]
pub(crate) mod tests;

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

impl Display for CqpError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            CqpError::Encode(e) => write!(f, "CQP command refused: {e}"),
            CqpError::Dma(e) => write!(f, "CQP memory: {e}"),
            CqpError::Timeout { what } => write!(f, "CQP timed out waiting for {what}"),
            CqpError::CreateFailed { major, minor } => {
                write!(f, "CQP create failed (major {major:#x}, minor {minor:#x})")
            }
            CqpError::OpFailed { opcode, major, minor } => {
                write!(f, "CQP op {opcode:#x} failed (major {major:#x}, minor {minor:#x})")
            }
            CqpError::RingFull => f.write_str("CQP ring full"),
            CqpError::Busy => f.write_str("CQP busy (one command at a time before the CCQ)"),
            CqpError::Protocol { what } => write!(f, "CQP protocol violation: {what}"),
            CqpError::WrongBuffer => {
                f.write_str("result asked for a buffer the command did not name")
            }
            CqpError::BadFpmBuffer(e) => write!(f, "CQP: {e}"),
            CqpError::BadFeatures(e) => write!(f, "CQP: {e}"),
            CqpError::NeedsReset => {
                f.write_str("the function needs a reset before the CQP is used again")
            }
            CqpError::DeviceGone => {
                f.write_str("the device is gone (registers read all-ones: surprise removal)")
            }
        }
    }
}

impl Error for CqpError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            CqpError::Encode(e) => Some(e),
            CqpError::Dma(e) => Some(e),
            CqpError::BadFpmBuffer(e) => Some(e),
            CqpError::BadFeatures(e) => Some(e),
            _ => None,
        }
    }
}
