//! CQP command builders: one typed value per CQP operation.
//!
//! Each command writes its eight WQE words into a `&mut [u64; 8]` — every
//! word, so the slot holds nothing stale — with the opcode in the header
//! (@24) but **not** the valid bit: the engine adds the current polarity and
//! stores the header last, after a write barrier (spec §2.5).
//!
//! Wherever the vendor driver ORs a value into a word without a mask or lets
//! `FIELD_PREP` truncate it, these builders range-check instead and return
//! [`EncodeError::TooWide`] (spec §12 items 1–5). Ids are also checked
//! against the committed HMC counts in [`Limits`], as the vendor does.

use irdma_hal::Field;
use irdma_hal::cqp::{ah, arp, cq, eq, hdr, hmc, mcast, op, qp, stag, ws};

use super::{EncodeError, FieldName, Phrase, fit, flag};

/// Object counts the builders check ids against (the vendor refuses ids at
/// or above the committed HMC count, e.g. ctrl.c: irdma_sc_qp_create,
/// irdma_sc_cq_create, irdma_sc_mr_reg_non_shared).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Committed QP count.
    pub qp_count: u32,
    /// Committed CQ count.
    pub cq_count: u32,
    /// Committed PBLE count.
    pub pble_count: u32,
    /// Number of CEQs the function has (query-FPM MAX_CEQS).
    pub ceq_count: u32,
}

impl Limits {
    /// No limits beyond the field widths (before the HMC is sized).
    pub const NONE: Limits = Limits {
        qp_count: u32::MAX,
        cq_count: u32::MAX,
        pble_count: u32::MAX,
        ceq_count: u32::MAX,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Self::NONE
    }
}

/// What a builder may need besides its own fields.
#[derive(Debug)]
pub struct Env {
    /// Id limits.
    pub limits: Limits,
    /// Bus address of this WQE's 128-byte UPDATE_PE_SDS overflow slot
    /// (`sdbuf` + WQE index × 128, spec §3.7); 0 when there is none.
    pub sdbuf_pa: u64,
    /// The overflow slot's contents, written by UPDATE_PE_SDS; the engine
    /// copies them to `sdbuf_pa` before posting.
    pub sdbuf: [u64; 16],
    /// Number of words of `sdbuf` the builder wrote.
    pub sdbuf_words: usize,
}

impl Env {
    /// An environment with the given limits and no overflow buffer.
    pub fn new(limits: Limits) -> Self {
        Env { limits, sdbuf_pa: 0, sdbuf: [0; 16], sdbuf_words: 0 }
    }
}

/// A CQP operation that can be placed in a CQP SQ slot.
pub trait CqpCommand {
    /// Hardware opcode (spec §4.1).
    const OPCODE: u8;

    /// Writes all eight WQE words; the header (@24) carries the opcode and
    /// the op's fields but not the valid bit.
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError>;

    /// Register writes the vendor issues before ringing the doorbell for this
    /// op, as `(BAR offset, value)` (only DESTROY_AEQ has one: PFINT_AEQCTL ← 0,
    /// ctrl.c: irdma_sc_aeq_destroy).
    fn pre_post_writes(&self) -> &'static [(usize, u32)] {
        &[]
    }
}

fn header(opcode: u8) -> u64 {
    hdr::OPCODE.prep(opcode as u64)
}

fn below(v: u64, limit: u32, name: FieldName) -> Result<(), EncodeError> {
    if v < limit as u64 { Ok(()) } else { Err(above_max(name, v, limit.saturating_sub(1))) }
}

/// [`EncodeError::AboveMax`].
fn above_max(field: FieldName, value: u64, max: u32) -> EncodeError {
    EncodeError::AboveMax { field, max, value }
}

/// GEN_2 sizes the vendor range-checks in its `*_init` functions (user.h:
/// IRDMA_MIN/MAX_CEQ_ENTRIES, IRDMA_MIN/MAX_AEQ_ENTRIES, IRDMA_MIN/MAX_CQ_SIZE;
/// ctrl.c: irdma_sc_dev_init sets them as `hw_attrs`). They are device
/// maxima, narrower than the WQE fields (CEQSIZE 22 bits, CQSIZE 21 bits).
pub mod hw_limits {
    /// Fewest CEQEs (irdma_sc_ceq_init).
    pub const MIN_CEQ_ENTRIES: u32 = 1;
    /// Most CEQEs on GEN_2 (irdma_sc_ceq_init).
    pub const MAX_CEQ_ENTRIES: u32 = 262_143;
    /// Fewest AEQEs (irdma_sc_aeq_init).
    pub const MIN_AEQ_ENTRIES: u32 = 1;
    /// Most AEQEs on GEN_2 (irdma_sc_aeq_init).
    pub const MAX_AEQ_ENTRIES: u32 = 524_287;
    /// Fewest CCQ entries (irdma_sc_ccq_init, `min_hw_cq_size`).
    pub const MIN_CQ_SIZE: u32 = 1;
    /// Most CCQ entries (irdma_sc_ccq_init, `max_hw_cq_size`).
    pub const MAX_CQ_SIZE: u32 = 1_048_575;
}

/// `v` within `min..=max`: above is [`EncodeError::TooWide`] naming `name`,
/// below is [`EncodeError::Invalid`] with `low` (the vendor: -EINVAL).
fn in_range(v: u64, min: u32, max: u32, name: FieldName, low: Phrase) -> Result<(), EncodeError> {
    if v > max as u64 {
        Err(above_max(name, v, max))
    } else if v < min as u64 {
        Err(EncodeError::Invalid { what: low })
    } else {
        Ok(())
    }
}

/// A region described by PBLEs: level (the LPBLSIZE value: 1 = level 1,
/// 3 = level 2 for MRs) and the first (or root) PBLE index (spec §6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pbl {
    /// LPBLSIZE value.
    pub level: u8,
    /// First PBLE index (< 2^28).
    pub first_index: u32,
}

// ---------------------------------------------------------------- NOP

/// NOP (0x24): header only (ctrl.c: irdma_sc_cqp_nop; spec §4.3.24).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nop;

impl CqpCommand for Nop {
    const OPCODE: u8 = op::NOP;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        *wqe = [0; 8];
        wqe[3] = header(Self::OPCODE);
        Ok(())
    }
}

// ---------------------------------------------------------------- QPs

/// QP states written to NEXTIWSTATE (defs.h: IRDMA_QP_STATE_*; spec §7.4).
pub mod qp_state {
    #![allow(missing_docs)]
    pub const INVALID: u8 = 0;
    pub const IDLE: u8 = 1;
    pub const RTS: u8 = 2;
    pub const SQD: u8 = 3;
    pub const RTR: u8 = 4;
    pub const TERMINATE: u8 = 5;
    pub const ERROR: u8 = 6;
}

/// QP types (defs.h: IRDMA_QP_TYPE_*).
pub mod qp_type {
    #![allow(missing_docs)]
    pub const IWARP: u8 = 1;
    pub const UDA: u8 = 2;
    pub const ROCE_RC: u8 = 3;
    pub const ROCE_UD: u8 = 4;
}

fn qp_id_checked(id: u32, env: &Env) -> Result<u64, EncodeError> {
    let v = fit(qp::QPID, id as u64, FieldName::QpId)?;
    below(id as u64, env.limits.qp_count, FieldName::QpId)?;
    Ok(v)
}

/// CREATE_QP (0x00) — ctrl.c: irdma_sc_qp_create; spec §4.3.4.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateQp {
    /// QP id (< 2^24 and < the committed QP count).
    pub qp_id: u32,
    /// QP type ([`qp_type`]).
    pub qp_type: u8,
    /// SQ/RQ described by PBLEs.
    pub virtual_map: bool,
    /// Bus address of the 256-byte QP host context.
    pub host_ctx_pa: u64,
    /// Bus address of the QP shadow (doorbell) area.
    pub shadow_area_pa: u64,
    /// ORD valid.
    pub ord_valid: bool,
    /// TCP context valid (iWARP).
    pub tcp_ctx_valid: bool,
    /// CQ numbers valid.
    pub cq_num_valid: bool,
    /// ARP index valid.
    pub arp_cache_idx_valid: bool,
    /// MAC valid.
    pub mac_valid: bool,
    /// Force loopback.
    pub force_loopback: bool,
    /// Next state ([`qp_state`]); Linux creates in IDLE.
    pub next_state: u8,
}

impl CqpCommand for CreateQp {
    const OPCODE: u8 = op::CREATE_QP;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        let h = header(Self::OPCODE)
            | qp_id_checked(self.qp_id, env)?
            | flag(qp::ORDVALID, self.ord_valid)
            | flag(qp::TOECTXVALID, self.tcp_ctx_valid)
            | flag(qp::VQ, self.virtual_map)
            | flag(qp::FORCELOOPBACK, self.force_loopback)
            | flag(qp::CQNUMVALID, self.cq_num_valid)
            | fit(qp::QPTYPE, self.qp_type as u64, FieldName::QpType)?
            | flag(qp::MACVALID, self.mac_valid)
            | flag(qp::ARPTABIDXVALID, self.arp_cache_idx_valid)
            | fit(qp::NEXTIWSTATE, self.next_state as u64, FieldName::NextState)?;
        *wqe = [0, 0, self.host_ctx_pa, h, 0, self.shadow_area_pa, 0, 0];
        Ok(())
    }
}

/// MODIFY_QP (0x01) — ctrl.c: irdma_sc_qp_modify; spec §4.3.5.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModifyQp {
    /// QP id.
    pub qp_id: u32,
    /// QP type.
    pub qp_type: u8,
    /// SQ/RQ described by PBLEs.
    pub virtual_map: bool,
    /// Bus address of the (rewritten) host context.
    pub host_ctx_pa: u64,
    /// Bus address of the shadow area.
    pub shadow_area_pa: u64,
    /// Target state ([`qp_state`]).
    pub next_state: u8,
    /// ORD valid (→RTS).
    pub ord_valid: bool,
    /// TCP context valid.
    pub tcp_ctx_valid: bool,
    /// Cached variables valid.
    pub cached_var_valid: bool,
    /// CQ numbers valid (→RTR, →RTS).
    pub cq_num_valid: bool,
    /// ARP index valid (→RTR, →RTS).
    pub arp_cache_idx_valid: bool,
    /// MAC valid.
    pub mac_valid: bool,
    /// MSS change.
    pub mss_change: bool,
    /// Remove hash entry.
    pub remove_hash_idx: bool,
    /// Reset the TCP connection.
    pub reset_tcp_conn: bool,
    /// With TERMINATE: do not send FIN (TERMACT bit 0).
    pub dont_send_fin: bool,
    /// With TERMINATE: do not send TERM (TERMACT bit 1).
    pub dont_send_term: bool,
    /// Force loopback.
    pub force_loopback: bool,
    /// New MSS (< 2^14).
    pub new_mss: u16,
    /// Terminate length (used only with TERMINATE).
    pub termlen: u8,
}

impl CqpCommand for ModifyQp {
    const OPCODE: u8 = op::MODIFY_QP;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        let terminate = self.next_state == qp_state::TERMINATE;
        let (term_actions, term_len) = if terminate {
            // TERMLEN only when a TERM is sent (ctrl.c: irdma_sc_qp_modify).
            let len = if self.dont_send_term { 0 } else { self.termlen as u64 };
            (self.dont_send_fin as u64 | (self.dont_send_term as u64) << 1, len)
        } else {
            (0, 0)
        };
        let w8 = fit(qp::NEWMSS, self.new_mss as u64, FieldName::NewMss)?
            | fit(qp::TERMLEN, term_len, FieldName::Termlen)?;
        let h = header(Self::OPCODE)
            | qp_id_checked(self.qp_id, env)?
            | flag(qp::ORDVALID, self.ord_valid)
            | flag(qp::TOECTXVALID, self.tcp_ctx_valid)
            | flag(qp::CACHEDVARVALID, self.cached_var_valid)
            | flag(qp::VQ, self.virtual_map)
            | flag(qp::FORCELOOPBACK, self.force_loopback)
            | flag(qp::CQNUMVALID, self.cq_num_valid)
            | fit(qp::QPTYPE, self.qp_type as u64, FieldName::QpType)?
            | flag(qp::MACVALID, self.mac_valid)
            | flag(qp::MSSCHANGE, self.mss_change)
            | flag(qp::REMOVEHASHENTRY, self.remove_hash_idx)
            | qp::TERMACT.prep(term_actions)
            | flag(qp::RESETCON, self.reset_tcp_conn)
            | flag(qp::ARPTABIDXVALID, self.arp_cache_idx_valid)
            | fit(qp::NEXTIWSTATE, self.next_state as u64, FieldName::NextState)?;
        *wqe = [0, w8, self.host_ctx_pa, h, 0, self.shadow_area_pa, 0, 0];
        Ok(())
    }
}

/// DESTROY_QP (0x02) — ctrl.c: irdma_sc_qp_destroy; spec §4.3.6.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DestroyQp {
    /// QP id.
    pub qp_id: u32,
    /// QP type.
    pub qp_type: u8,
    /// Bus address of the host context.
    pub host_ctx_pa: u64,
    /// Bus address of the shadow area.
    pub shadow_area_pa: u64,
    /// Ignore memory-window bindings.
    pub ignore_mw_bnd: bool,
    /// Remove the hash entry (Linux: 1).
    pub remove_hash_idx: bool,
}

impl CqpCommand for DestroyQp {
    const OPCODE: u8 = op::DESTROY_QP;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        let h = header(Self::OPCODE)
            | qp_id_checked(self.qp_id, env)?
            | fit(qp::QPTYPE, self.qp_type as u64, FieldName::QpType)?
            | flag(qp::IGNOREMWBOUND, self.ignore_mw_bnd)
            | flag(qp::REMOVEHASHENTRY, self.remove_hash_idx);
        *wqe = [0, 0, self.host_ctx_pa, h, 0, self.shadow_area_pa, 0, 0];
        Ok(())
    }
}

/// Flush codes reported in the flushed CQEs (major, minor).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushCodes {
    /// SQ (major, minor).
    pub sq: (u16, u16),
    /// RQ (major, minor).
    pub rq: (u16, u16),
}

/// FLUSH_WQES (0x22) — ctrl.c: irdma_sc_qp_flush_wqes; spec §4.3.25.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushWqes {
    /// QP id.
    pub qp_id: u32,
    /// Flush the SQ.
    pub flush_sq: bool,
    /// Flush the RQ.
    pub flush_rq: bool,
    /// Codes to report (USERFLCODE); only the flushed queues' codes are written.
    pub user_codes: Option<FlushCodes>,
    /// Also generate an AE with (code, source).
    pub generate_ae: Option<(u16, u8)>,
}

impl CqpCommand for FlushWqes {
    const OPCODE: u8 = op::FLUSH_WQES;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        use qp::flush::*;
        if !self.flush_sq && !self.flush_rq {
            // Linux: -EALREADY (ctrl.c: irdma_sc_qp_flush_wqes).
            return Err(EncodeError::Invalid { what: Phrase::new(&"flush of neither SQ nor RQ") });
        }
        let mut w16 = 0;
        if let Some(c) = self.user_codes {
            if self.flush_sq {
                w16 |= SQMJERR.prep(c.sq.0 as u64) | SQMNERR.prep(c.sq.1 as u64);
            }
            if self.flush_rq {
                w16 |= RQMJERR.prep(c.rq.0 as u64) | RQMNERR.prep(c.rq.1 as u64);
            }
        }
        let mut w8 = 0;
        if let Some((code, src)) = self.generate_ae {
            w8 = AECODE.prep(code as u64) | fit(AESOURCE, src as u64, FieldName::AeSrc)?;
        }
        let h = header(Self::OPCODE)
            | qp_id_checked(self.qp_id, env)?
            | flag(GENERATE_AE, self.generate_ae.is_some())
            | flag(USERFLCODE, self.user_codes.is_some())
            | flag(FLUSHSQ, self.flush_sq)
            | flag(FLUSHRQ, self.flush_rq);
        *wqe = [0, w8, w16, h, 0, 0, 0, 0];
        Ok(())
    }
}

/// The QP's flush bookkeeping (`qp->flush_sq`, `qp->flush_rq` of ctrl.c:
/// irdma_sc_qp_flush_wqes): a queue is flushed at most once until the
/// bookkeeping is reset (hw.c: irdma_flush_wqes clears it only for a
/// re-flush, which the E810 driver never issues).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushState {
    /// The SQ was flushed.
    pub sq: bool,
    /// The RQ was flushed.
    pub rq: bool,
}

impl FlushState {
    /// What to post for a flush request, as irdma_sc_qp_flush_wqes decides:
    /// only the queues not yet flushed are flushed (and only their codes
    /// written), and they are recorded as flushed. When no queue is left
    /// (both already flushed, or neither requested) nothing is posted and
    /// the state is unchanged: [`EncodeError::Invalid`] (vendor `-EALREADY`,
    /// "Additional flush request ignored").
    pub fn request(&mut self, f: FlushWqes) -> Result<FlushWqes, EncodeError> {
        let sq = f.flush_sq && !self.sq;
        let rq = f.flush_rq && !self.rq;
        if !sq && !rq {
            return Err(EncodeError::Invalid {
                what: Phrase::new(&"flush: no queue left to flush (-EALREADY)"),
            });
        }
        self.sq |= sq;
        self.rq |= rq;
        Ok(FlushWqes { flush_sq: sq, flush_rq: rq, ..f })
    }
}

/// GEN_AE (0x22 with GENERATE_AE) — ctrl.c: irdma_sc_gen_ae; spec §4.3.25.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GenAe {
    /// QP id.
    pub qp_id: u32,
    /// AE code.
    pub ae_code: u16,
    /// AE source (< 16).
    pub ae_src: u8,
}

impl CqpCommand for GenAe {
    const OPCODE: u8 = op::FLUSH_WQES;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        use qp::flush::*;
        let w8 =
            AECODE.prep(self.ae_code as u64) | fit(AESOURCE, self.ae_src as u64, FieldName::AeSrc)?;
        let h = header(Self::OPCODE) | qp_id_checked(self.qp_id, env)? | GENERATE_AE.mask();
        *wqe = [0, w8, 0, h, 0, 0, 0, 0];
        Ok(())
    }
}

/// UPLOAD_CONTEXT (0x13) — ctrl.c: irdma_sc_qp_upload_context; spec §4.3.26.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UploadContext {
    /// QP id.
    pub qp_id: u32,
    /// QP type (< 16).
    pub qp_type: u8,
    /// Bus address of the buffer the context is written to.
    pub buf_pa: u64,
    /// Freeze the QP.
    pub freeze_qp: bool,
    /// Raw format.
    pub raw_format: bool,
}

impl CqpCommand for UploadContext {
    const OPCODE: u8 = op::UPLOAD_CONTEXT;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        let h = header(Self::OPCODE)
            | qp_id_checked(self.qp_id, env)?
            | fit(qp::upload::QPTYPE, self.qp_type as u64, FieldName::QpType)?
            | flag(qp::upload::RAWFORMAT, self.raw_format)
            | flag(qp::upload::FREEZEQP, self.freeze_qp);
        *wqe = [0, 0, self.buf_pa, h, 0, 0, 0, 0];
        Ok(())
    }
}

/// SUSPEND_QP (0x29): header only — ctrl.c: irdma_sc_suspend_qp; spec §12
/// item 8. Completion is followed by AE 0x0900 QP_SUSPEND_COMPLETE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SuspendQp {
    /// QP id.
    pub qp_id: u32,
}

impl CqpCommand for SuspendQp {
    const OPCODE: u8 = op::SUSPEND_QP;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        *wqe = [0, 0, 0, header(Self::OPCODE) | qp_id_checked(self.qp_id, env)?, 0, 0, 0, 0];
        Ok(())
    }
}

/// RESUME_QP (0x2A) — ctrl.c: irdma_sc_resume_qp; spec §12 item 8.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResumeQp {
    /// QP id.
    pub qp_id: u32,
    /// Queue-set handle to resume on.
    pub qs_handle: u16,
}

impl CqpCommand for ResumeQp {
    const OPCODE: u8 = op::RESUME_QP;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        let h = header(Self::OPCODE) | qp_id_checked(self.qp_id, env)?;
        let w16 = qp::RESUME_QSHANDLE.prep(self.qs_handle as u64);
        *wqe = [0, 0, w16, h, 0, 0, 0, 0];
        Ok(())
    }
}

// ---------------------------------------------------------------- CQs

/// Where a queue's ring is, as the CQ/CEQ/AEQ WQEs describe it: a bus
/// address (level 0) or a PBL (VIRTMAP with LPBLSIZE and the first PBLE
/// index). The vendor writes LPBLSIZE whatever VIRTMAP says, so the fields are
/// kept apart as it keeps them (ctrl.c: irdma_sc_cq_create,
/// irdma_sc_ceq_create, irdma_sc_aeq_create).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueAddr {
    /// Ring bus address (used when not virtually mapped).
    pub pa: u64,
    /// Ring described by PBLEs.
    pub virtual_map: bool,
    /// LPBLSIZE (1 = level 1).
    pub pbl_chunk_size: u8,
    /// First PBLE index (< 2^28).
    pub first_pbl_index: u32,
}

impl QueueAddr {
    /// A physically contiguous ring at `pa`.
    pub fn contiguous(pa: u64) -> Self {
        QueueAddr { pa, ..Default::default() }
    }
    /// A ring described by a level-1 PBL starting at PBLE `first_index`.
    pub fn pbl(first_index: u32) -> Self {
        QueueAddr { pa: 0, virtual_map: true, pbl_chunk_size: 1, first_pbl_index: first_index }
    }
    fn lpbl(&self, f: Field) -> Result<u64, EncodeError> {
        fit(f, self.pbl_chunk_size as u64, FieldName::PblChunkSize)
    }
    /// @32 of a create: the address unless virtually mapped.
    fn create_pa(&self) -> u64 {
        if self.virtual_map { 0 } else { self.pa }
    }
    /// @48 of a create: the PBLE index only when virtually mapped.
    fn create_pbl(&self, f: Field, env: &Env) -> Result<u64, EncodeError> {
        if self.virtual_map { pbl_index_checked(f, self.first_pbl_index, env) } else { Ok(0) }
    }
    /// An event queue keeps its PBL fields only when virtually mapped:
    /// unlike a CQ's, the vendor's EQ init drops the chunk size and first
    /// PBLE index of a contiguous ring, so its create and destroy WQEs carry
    /// LPBLSIZE 0 and index 0 (ctrl.c: irdma_sc_ceq_init, irdma_sc_aeq_init).
    fn eq(&self) -> Self {
        if self.virtual_map {
            *self
        } else {
            QueueAddr { pbl_chunk_size: 0, first_pbl_index: 0, ..*self }
        }
    }
}

/// CREATE_CQ (0x03), also the CCQ — ctrl.c: irdma_sc_cq_create,
/// irdma_sc_ccq_create; spec §4.3.1, §2.7.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateCq {
    /// CQ id (< 2^19 and < the committed CQ count; 0 is the CCQ).
    pub cq_id: u32,
    /// Number of CQEs (< 2^21).
    pub cq_size: u32,
    /// CQ context value returned in CEQEs and AEQEs (< 2^63).
    pub cq_ctx: u64,
    /// Shadow read threshold (< 2^18).
    pub shadow_read_threshold: u32,
    /// CEQ this CQ reports to (CEQIDVALID), id < 1024.
    pub ceq_id: Option<u16>,
    /// ENCEQEMASK.
    pub ceqe_mask: bool,
    /// CHKOVERFLOW.
    pub check_overflow: bool,
    /// Ring.
    pub ring: QueueAddr,
    /// Shadow-area bus address.
    pub shadow_area_pa: u64,
    /// TPHEN.
    pub tph_en: bool,
    /// TPH value.
    pub tph_val: u8,
    /// 64-byte CQEs (not on GEN_2).
    pub avoid_mem_cflct: bool,
    /// PASID_VALID.
    pub pasid_valid: bool,
    /// PASID (< 2^20).
    pub pasid: u32,
    /// VSI index.
    pub vsi_idx: u16,
}

impl CreateCq {
    /// The CCQ's own checks (ctrl.c: irdma_sc_ccq_init): 1 ≤ entries ≤
    /// `max_hw_cq_size` (1,048,575; the field holds 2^21 − 1). A CQ made by
    /// irdma_sc_cq_create has no size check in the vendor code; the CCQ
    /// create path ([`super::Cqp::create_ccq`]) calls this before posting.
    pub fn check_ccq(&self) -> Result<(), EncodeError> {
        in_range(
            self.cq_size.into(),
            hw_limits::MIN_CQ_SIZE,
            hw_limits::MAX_CQ_SIZE,
            FieldName::CqSize,
            Phrase::new(&"CCQ with no entries"),
        )
    }
}

fn ceq_checked(ceq: Option<u16>, env: &Env) -> Result<u64, EncodeError> {
    match ceq {
        Some(c) => {
            below(c as u64, env.limits.ceq_count, FieldName::CeqId)?;
            Ok(fit(cq::CEQID, c as u64, FieldName::CeqId)? | cq::CEQIDVALID.mask())
        }
        None => Ok(0),
    }
}

fn cq_id_checked(id: u32, env: &Env) -> Result<u64, EncodeError> {
    let v = fit(cq::CQID, id as u64, FieldName::CqId)?;
    below(id as u64, env.limits.cq_count, FieldName::CqId)?;
    Ok(v)
}

fn pbl_index_checked(f: Field, idx: u32, env: &Env) -> Result<u64, EncodeError> {
    let v = fit(f, idx as u64, FieldName::FirstPblIndex)?;
    below(idx as u64, env.limits.pble_count, FieldName::FirstPblIndex)?;
    Ok(v)
}

fn ctx63(v: u64) -> Result<u64, EncodeError> {
    fit(cq::CQCTX, v, FieldName::CqCtx)
}

impl CqpCommand for CreateCq {
    const OPCODE: u8 = op::CREATE_CQ;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        let (lpbl, w32, w48) = (
            self.ring.lpbl(cq::LPBLSIZE)?,
            self.ring.create_pa(),
            self.ring.create_pbl(cq::FIRSTPMPBLIDX, env)?,
        );
        let h = header(Self::OPCODE)
            | cq_id_checked(self.cq_id, env)?
            | ceq_checked(self.ceq_id, env)?
            | lpbl
            | flag(cq::CHKOVERFLOW, self.check_overflow)
            | flag(cq::VIRTMAP, self.ring.virtual_map)
            | flag(cq::ENCEQEMASK, self.ceqe_mask)
            | flag(cq::TPHEN, self.tph_en)
            | flag(cq::AVOIDMEMCNFLCT, self.avoid_mem_cflct)
            | flag(cq::PASID_VALID, self.pasid_valid);
        let w56 = cq::TPHVAL.prep(self.tph_val as u64)
            | cq::VSIIDX.prep(self.vsi_idx as u64)
            | fit(cq::PASID, self.pasid as u64, FieldName::Pasid)?;
        *wqe = [
            fit(cq::CQSIZE, self.cq_size as u64, FieldName::CqSize)?,
            ctx63(self.cq_ctx)?,
            fit(
                cq::SHADOW_READ_THRESHOLD,
                self.shadow_read_threshold as u64,
                FieldName::ShadowReadThreshold,
            )?,
            h,
            w32,
            self.shadow_area_pa,
            w48,
            w56,
        ];
        Ok(())
    }
}

/// DESTROY_CQ (0x05) of an ordinary CQ — ctrl.c: irdma_sc_cq_destroy; spec
/// §4.3.2. The flags must be those given at create.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DestroyCq {
    /// CQ id.
    pub cq_id: u32,
    /// CQ size.
    pub cq_size: u32,
    /// CQ context.
    pub cq_ctx: u64,
    /// CEQ id, if CEQIDVALID.
    pub ceq_id: Option<u16>,
    /// ENCEQEMASK.
    pub ceqe_mask: bool,
    /// Ring (as at create; only the PBL fields are used).
    pub ring: QueueAddr,
    /// Shadow-area bus address.
    pub shadow_area_pa: u64,
    /// TPHEN.
    pub tph_en: bool,
    /// AVOIDMEMCNFLCT.
    pub avoid_mem_cflct: bool,
    /// PASID_VALID.
    pub pasid_valid: bool,
    /// PASID (< 2^20).
    pub pasid: u32,
}

/// DESTROY_CQ with the create-time values (ctrl.c: irdma_sc_cq_destroy).
pub(crate) fn destroy_cq_cmd(c: &CreateCq) -> DestroyCq {
    DestroyCq {
        cq_id: c.cq_id,
        cq_size: c.cq_size,
        cq_ctx: c.cq_ctx,
        ceq_id: c.ceq_id,
        ceqe_mask: c.ceqe_mask,
        ring: c.ring,
        shadow_area_pa: c.shadow_area_pa,
        tph_en: c.tph_en,
        avoid_mem_cflct: c.avoid_mem_cflct,
        pasid_valid: c.pasid_valid,
        pasid: c.pasid,
    }
}

impl CqpCommand for DestroyCq {
    const OPCODE: u8 = op::DESTROY_CQ;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        let (lpbl, w48) = (
            self.ring.lpbl(cq::LPBLSIZE)?,
            if self.ring.virtual_map {
                fit(cq::FIRSTPMPBLIDX, self.ring.first_pbl_index as u64, FieldName::FirstPblIndex)?
            } else {
                0
            },
        );
        let h = header(Self::OPCODE)
            | cq_id_checked(self.cq_id, env)?
            | ceq_checked(self.ceq_id, env)?
            | lpbl
            | flag(cq::VIRTMAP, self.ring.virtual_map)
            | flag(cq::ENCEQEMASK, self.ceqe_mask)
            | flag(cq::TPHEN, self.tph_en)
            | flag(cq::AVOIDMEMCNFLCT, self.avoid_mem_cflct)
            | flag(cq::PASID_VALID, self.pasid_valid);
        *wqe = [
            fit(cq::CQSIZE, self.cq_size as u64, FieldName::CqSize)?,
            ctx63(self.cq_ctx)?,
            0,
            h,
            0,
            self.shadow_area_pa,
            w48,
            fit(cq::PASID, self.pasid as u64, FieldName::Pasid)?,
        ];
        Ok(())
    }
}

/// DESTROY_CQ (0x05) of the CCQ — ctrl.c: irdma_sc_ccq_destroy; spec §4.3.2
/// (no PBL, PASID or @48/@56; register-polled).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DestroyCcq {
    /// CCQ size.
    pub cq_size: u32,
    /// CCQ context.
    pub cq_ctx: u64,
    /// CEQ id, if CEQIDVALID.
    pub ceq_id: Option<u16>,
    /// ENCEQEMASK.
    pub ceqe_mask: bool,
    /// Shadow-area bus address.
    pub shadow_area_pa: u64,
    /// TPHEN.
    pub tph_en: bool,
    /// AVOIDMEMCNFLCT.
    pub avoid_mem_cflct: bool,
}

impl CqpCommand for DestroyCcq {
    const OPCODE: u8 = op::DESTROY_CQ;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        let h = header(Self::OPCODE)
            | ceq_checked(self.ceq_id, env)?
            | flag(cq::ENCEQEMASK, self.ceqe_mask)
            | flag(cq::TPHEN, self.tph_en)
            | flag(cq::AVOIDMEMCNFLCT, self.avoid_mem_cflct);
        *wqe = [
            fit(cq::CQSIZE, self.cq_size as u64, FieldName::CqSize)?,
            ctx63(self.cq_ctx)?,
            0,
            h,
            0,
            self.shadow_area_pa,
            0,
            0,
        ];
        Ok(())
    }
}

/// MODIFY_CQ (0x04, resize) — ctrl.c: irdma_sc_cq_modify; spec §4.3.3.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModifyCq {
    /// CQ id.
    pub cq_id: u32,
    /// CQ context.
    pub cq_ctx: u64,
    /// New number of CQEs.
    pub new_size: u32,
    /// New shadow read threshold.
    pub new_shadow_read_threshold: u32,
    /// CQRESIZE.
    pub resize: bool,
    /// New ring bus address (written as given).
    pub new_ring_pa: u64,
    /// New first PBLE index (written as given, < 2^28).
    pub new_first_pbl_index: u32,
    /// New LPBLSIZE.
    pub new_pbl_level: u8,
    /// New ring is virtually mapped.
    pub new_virtual_map: bool,
    /// CHKOVERFLOW.
    pub check_overflow: bool,
    /// ENCEQEMASK (as at create).
    pub ceqe_mask: bool,
    /// TPHEN.
    pub tph_en: bool,
    /// TPH value.
    pub tph_val: u8,
    /// AVOIDMEMCNFLCT.
    pub avoid_mem_cflct: bool,
    /// PASID_VALID.
    pub pasid_valid: bool,
    /// PASID (< 2^20).
    pub pasid: u32,
    /// VSI index.
    pub vsi_idx: u16,
    /// Shadow-area bus address.
    pub shadow_area_pa: u64,
}

impl CqpCommand for ModifyCq {
    const OPCODE: u8 = op::MODIFY_CQ;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        let h = header(Self::OPCODE)
            | cq_id_checked(self.cq_id, env)?
            | flag(cq::CQRESIZE, self.resize)
            | fit(cq::LPBLSIZE, self.new_pbl_level as u64, FieldName::PblLevel)?
            | flag(cq::CHKOVERFLOW, self.check_overflow)
            | flag(cq::VIRTMAP, self.new_virtual_map)
            | flag(cq::ENCEQEMASK, self.ceqe_mask)
            | flag(cq::TPHEN, self.tph_en)
            | flag(cq::AVOIDMEMCNFLCT, self.avoid_mem_cflct)
            | flag(cq::PASID_VALID, self.pasid_valid);
        let w56 = cq::TPHVAL.prep(self.tph_val as u64)
            | cq::VSIIDX.prep(self.vsi_idx as u64)
            | fit(cq::PASID, self.pasid as u64, FieldName::Pasid)?;
        *wqe = [
            fit(cq::CQSIZE, self.new_size as u64, FieldName::CqSize)?,
            ctx63(self.cq_ctx)?,
            fit(
                cq::SHADOW_READ_THRESHOLD,
                self.new_shadow_read_threshold as u64,
                FieldName::ShadowReadThreshold,
            )?,
            h,
            self.new_ring_pa,
            self.shadow_area_pa,
            if self.resize && self.new_virtual_map {
                pbl_index_checked(cq::FIRSTPMPBLIDX, self.new_first_pbl_index, env)?
            } else {
                fit(cq::FIRSTPMPBLIDX, self.new_first_pbl_index as u64, FieldName::FirstPblIndex)?
            },
            w56,
        ];
        Ok(())
    }
}

// ---------------------------------------------------------------- STags

/// Page sizes of an MR: the one type the verbs use too (`crate::wr`).
pub use crate::wr::PageSize;

/// HPAGESIZE of a page size (type.h: enum irdma_page_size; spec §5.5).
fn page_code(p: PageSize) -> u64 {
    match p {
        PageSize::Size4K => 0,
        PageSize::Size2M => 1,
        PageSize::Size1G => 2,
    }
}

/// Access-right bits of the ARIGHTS field (user.h: IRDMA_ACCESS_FLAGS_*; spec §5.3).
pub mod access {
    #![allow(missing_docs)]
    pub const LOCAL_READ: u8 = 0x01;
    pub const LOCAL_WRITE: u8 = 0x02;
    pub const REMOTE_READ: u8 = 0x04;
    pub const REMOTE_WRITE: u8 = 0x08;
    pub const BIND_WINDOW: u8 = 0x10;
}

fn pd_words(pd_id: u32) -> Result<u64, EncodeError> {
    // PDID_HI (pd >> 18) is always 0 for ids that fit PDID (spec §12 item 5).
    fit(stag::PDID, pd_id as u64, FieldName::PdId)
}

fn stag_idx(idx: u32) -> Result<u64, EncodeError> {
    fit(stag::IDX, idx as u64, FieldName::StagIdx)
}

/// ALLOC_STAG (0x09), memory-region form — ctrl.c: irdma_sc_alloc_stag;
/// spec §4.3.7.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStag {
    /// STag index (STag >> 8, < 2^24).
    pub stag_idx: u32,
    /// PD id (< 2^18).
    pub pd_id: u32,
    /// Total length (< 2^46); 0 only with `all_memory`.
    pub total_len: u64,
    /// Page size.
    pub page_size: PageSize,
    /// Access rights ([`access`], < 32).
    pub access_rights: u8,
    /// REMACCENABLED.
    pub remote_access: bool,
    /// USEHMCFNIDX.
    pub use_hmc_fn_index: bool,
    /// HMC function index (@40).
    pub hmc_fn_index: u16,
    /// Placement type (< 16).
    pub placement_type: u8,
    /// PBL chunk (LPBLSIZE and first PBLE index), when given.
    pub pbl: Option<Pbl>,
    /// The "all memory" software flag: allows `total_len` 0 (not encoded).
    pub all_memory: bool,
}

impl CqpCommand for AllocStag {
    const OPCODE: u8 = op::ALLOC_STAG;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        if self.total_len == 0 && !self.all_memory {
            return Err(EncodeError::Invalid {
                what: Phrase::new(&"zero-length STag without all_memory"),
            });
        }
        let (lpbl, w48) = match self.pbl {
            Some(p) => (
                fit(stag::LPBLSIZE, p.level as u64, FieldName::PblLevel)?,
                pbl_index_checked(stag::FIRSTPMPBLIDX, p.first_index, env)?,
            ),
            None => (0, 0),
        };
        let h = header(Self::OPCODE)
            | stag::MR.mask()
            | lpbl
            | stag::HPAGESIZE.prep(page_code(self.page_size))
            | fit(stag::ARIGHTS, self.access_rights as u64, FieldName::AccessRights)?
            | flag(stag::REMACCENABLED, self.remote_access)
            | fit(stag::PLACEMENTTYPE, self.placement_type as u64, FieldName::PlacementType)?
            | flag(stag::USEHMCFNIDX, self.use_hmc_fn_index);
        *wqe = [
            0,
            fit(stag::STAGLEN, self.total_len, FieldName::TotalLen)? | pd_words(self.pd_id)?,
            stag_idx(self.stag_idx)?,
            h,
            0,
            stag::HMCFNIDX.prep(self.hmc_fn_index as u64),
            w48,
            0,
        ];
        Ok(())
    }
}

/// Where a registered MR's pages are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MrPages {
    /// Level 0: physically contiguous at this bus address (@32).
    Contiguous(u64),
    /// Level 1 (LPBLSIZE 1) or 2 (LPBLSIZE 3) PBL.
    Pbl(Pbl),
}

/// REG_MR (0x0A), non-shared — ctrl.c: irdma_sc_mr_reg_non_shared; spec §4.3.9.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegMr {
    /// STag index (STag >> 8).
    pub stag_idx: u32,
    /// Key byte (STag & 0xff).
    pub stag_key: u8,
    /// PD id (< 2^18).
    pub pd_id: u32,
    /// IOVA of the first byte.
    pub va: u64,
    /// Length in bytes (< 2^46); 0 only with `all_memory`.
    pub total_len: u64,
    /// Page size.
    pub page_size: PageSize,
    /// Pages.
    pub pages: MrPages,
    /// VA-based (VABASEDTO) rather than zero-based.
    pub va_based: bool,
    /// Access rights ([`access`]).
    pub access_rights: u8,
    /// REMOTE_ATOMIC_EN.
    pub remote_atomics: bool,
    /// NON_CACHED.
    pub non_cached: bool,
    /// USEHMCFNIDX.
    pub use_hmc_fn_index: bool,
    /// HMC function index (@40).
    pub hmc_fn_index: u16,
    /// Placement type (< 16).
    pub placement_type: u8,
    /// The "all memory" software flag: allows `total_len` 0 (not encoded).
    pub all_memory: bool,
}

impl CqpCommand for RegMr {
    const OPCODE: u8 = op::REG_MR;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        if self.total_len == 0 && !self.all_memory {
            return Err(EncodeError::Invalid {
                what: Phrase::new(&"zero-length MR without all_memory"),
            });
        }
        // Zero-based MRs carry the first-byte offset in the page (spec §5.5).
        let w0 = if self.va_based { self.va } else { self.va & (self.page_size.bytes() - 1) };
        let (lpbl, w32, w48) = match self.pages {
            MrPages::Contiguous(pa) => (0, pa, 0),
            MrPages::Pbl(p) => (
                fit(stag::LPBLSIZE, p.level as u64, FieldName::PblLevel)?,
                0,
                pbl_index_checked(stag::FIRSTPMPBLIDX, p.first_index, env)?,
            ),
        };
        let remote = self.access_rights & (access::REMOTE_READ | access::REMOTE_WRITE) != 0;
        let h = header(Self::OPCODE)
            | stag::MR.mask()
            | lpbl
            | stag::HPAGESIZE.prep(page_code(self.page_size))
            | fit(stag::ARIGHTS, self.access_rights as u64, FieldName::AccessRights)?
            | flag(stag::REMACCENABLED, remote)
            | fit(stag::PLACEMENTTYPE, self.placement_type as u64, FieldName::PlacementType)?
            | flag(stag::VABASEDTO, self.va_based)
            | flag(stag::USEHMCFNIDX, self.use_hmc_fn_index)
            | flag(stag::REMOTE_ATOMIC_EN, self.remote_atomics);
        *wqe = [
            w0,
            fit(stag::STAGLEN, self.total_len, FieldName::TotalLen)? | pd_words(self.pd_id)?,
            stag::KEY.prep(self.stag_key as u64) | stag_idx(self.stag_idx)?,
            h,
            w32,
            stag::HMCFNIDX.prep(self.hmc_fn_index as u64) | flag(stag::NON_CACHED, self.non_cached),
            w48,
            0,
        ];
        Ok(())
    }
}

/// DEALLOC_STAG (0x0D) — ctrl.c: irdma_sc_dealloc_stag; spec §4.3.10.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeallocStag {
    /// STag index.
    pub stag_idx: u32,
    /// PD id.
    pub pd_id: u32,
    /// An MR (true) or a memory window.
    pub mr: bool,
    /// SKIPFLUSH (MRs describing queue memory).
    pub skip_flush: bool,
}

impl CqpCommand for DeallocStag {
    const OPCODE: u8 = op::DEALLOC_STAG;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        let h =
            header(Self::OPCODE) | flag(stag::SKIPFLUSH, self.skip_flush) | flag(stag::MR, self.mr);
        *wqe = [0, pd_words(self.pd_id)?, stag_idx(self.stag_idx)?, h, 0, 0, 0, 0];
        Ok(())
    }
}

// ---------------------------------------------------------------- HMC

/// QUERY_FPM_VAL (0x20) — ctrl.c: irdma_sc_query_fpm_val; spec §4.3.11.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueryFpmVal {
    /// HMC function id.
    pub hmc_fn_id: u16,
    /// Bus address of the 192-byte query buffer.
    pub buf_pa: u64,
}

impl CqpCommand for QueryFpmVal {
    const OPCODE: u8 = op::QUERY_FPM_VAL;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        let w16 = hmc::HMCFNID.prep(self.hmc_fn_id as u64);
        *wqe = [0, 0, w16, header(Self::OPCODE), self.buf_pa, 0, 0, 0];
        Ok(())
    }
}

/// COMMIT_FPM_VAL (0x21) — ctrl.c: irdma_sc_commit_fpm_val; spec §4.3.12.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitFpmVal {
    /// HMC function id.
    pub hmc_fn_id: u16,
    /// Bus address of the 192-byte commit buffer.
    pub buf_pa: u64,
    /// HW_FLUSH_TIMER_DISABLE (Linux `periodic_flush`, false on GEN_2).
    pub flush_timer_disable: bool,
}

impl CqpCommand for CommitFpmVal {
    const OPCODE: u8 = op::COMMIT_FPM_VAL;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        let h = header(Self::OPCODE)
            | hmc::CFPM_BUFSIZE.prep(irdma_hal::cqp::FPM_BUF_BYTES as u64)
            | flag(hmc::CFPM_FLUSH_TIMER_DISABLE, self.flush_timer_disable);
        let w16 = hmc::HMCFNID.prep(self.hmc_fn_id as u64);
        *wqe = [0, 0, w16, h, self.buf_pa, 0, 0, 0];
        Ok(())
    }
}

/// SHMC_PAGES_ALLOCATED (0x2B) — ctrl.c: irdma_sc_static_hmc_pages_allocated;
/// spec §3.8.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShmcPagesAllocated {
    /// HMC function id.
    pub hmc_fn_id: u16,
}

impl CqpCommand for ShmcPagesAllocated {
    const OPCODE: u8 = op::SHMC_PAGES_ALLOCATED;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        let w16 = hmc::HMCFNID.prep(self.hmc_fn_id as u64);
        *wqe = [0, 0, w16, header(Self::OPCODE), 0, 0, 0, 0];
        Ok(())
    }
}

/// One segment-descriptor update of UPDATE_PE_SDS (hmc.h: struct
/// irdma_update_sd_entry; spec §3.6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SdEntry {
    /// Command word (SD index | PMSDPARTSEL | PMSDWR), < 2^32.
    pub cmd: u32,
    /// Data word (address | BP count | type | valid), 0 to clear.
    pub data: u64,
}

impl SdEntry {
    /// The SD index in the command word (bits 14:0; `SdEntry::set`'s
    /// source). A `const`: `Field::bits` called at run time was not inlined,
    /// its two asserts came with it (code size).
    const SD_INDEX: Field = Field::bits(14, 0);

    /// Programs SD `sd_index` with a backing page at `pa` (4 KiB aligned):
    /// direct (2 MiB buffer) or paged (PD page) — hmc.c: irdma_set_sd_entry.
    pub fn set(sd_index: u16, pa: u64, direct: bool) -> Result<Self, EncodeError> {
        use irdma_hal::cqp::sd::*;
        if pa & 0xfff != 0 {
            return Err(EncodeError::Invalid {
                what: Phrase::new(&"SD page address not 4 KiB aligned"),
            });
        }
        let cmd = fit(Self::SD_INDEX, sd_index as u64, FieldName::SdIndex)?
            | CMD_PMSDPARTSEL.mask()
            | CMD_PMSDWR.mask();
        let data = (pa & DATA_ADDR.mask())
            | DATA_PMSDBPCOUNT.prep(512)
            | flag(DATA_PMSDTYPE, direct)
            | DATA_PMSDVALID.mask();
        Ok(SdEntry { cmd: cmd as u32, data })
    }

    /// Clears SD `sd_index` — hmc.c: irdma_clr_sd_entry.
    pub fn clear(sd_index: u16) -> Result<Self, EncodeError> {
        use irdma_hal::cqp::sd::*;
        let cmd = fit(Self::SD_INDEX, sd_index as u64, FieldName::SdIndex)?
            | CMD_PMSDPARTSEL.mask()
            | CMD_PMSDWR.mask();
        Ok(SdEntry { cmd: cmd as u32, data: 0 })
    }
}

/// Most SD entries one UPDATE_PE_SDS carries (hmc.h: IRDMA_MAX_SD_ENTRIES).
pub const MAX_SD_ENTRIES: usize = 11;

/// UPDATE_PE_SDS (0x1F) — ctrl.c: cqp_sds_wqe_fill; spec §3.7.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpdatePeSds<'a> {
    /// HMC function id (< 64).
    pub hmc_fn_id: u8,
    /// At most 11 entries; entries beyond the third go to the overflow buffer.
    pub entries: &'a [SdEntry],
}

impl CqpCommand for UpdatePeSds<'_> {
    const OPCODE: u8 = op::UPDATE_PE_SDS;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        let n = self.entries.len();
        if n > MAX_SD_ENTRIES {
            return Err(above_max(FieldName::SdEntries, n as u64, MAX_SD_ENTRIES as u32));
        }
        let fnid = fit(hmc::UPESD_HMCFNID, self.hmc_fn_id as u64, FieldName::HmcFnId)?;
        *wqe = [0; 8];
        let mut h = header(Self::OPCODE);
        let mut w16 = fnid;
        if n > 3 {
            if env.sdbuf_pa == 0 || env.sdbuf_pa & !hmc::UPESD_SDBUF_PA.mask() != 0 {
                return Err(EncodeError::Invalid {
                    what: Phrase::new(&"no 64-byte-aligned SD overflow buffer"),
                });
            }
            w16 |= env.sdbuf_pa;
            h |= hmc::UPESD_ENTRY_COUNT.prep((n - 3) as u64);
            env.sdbuf = [0; 16];
            for (i, e) in self.entries.iter().skip(3).enumerate() {
                if let Some(pair) = env.sdbuf.get_mut(2 * i..2 * i + 2) {
                    pair[0] = e.cmd as u64;
                    pair[1] = e.data;
                }
            }
            env.sdbuf_words = 2 * (n - 3);
        }
        for (i, e) in self.entries.iter().take(3).enumerate() {
            let cmd = e.cmd as u64 | if i > 0 { hmc::UPESD_ENTRY_VALID.mask() } else { 0 };
            let at = if i == 0 { 0 } else { 2 + 2 * i };
            if let Some(pair) = wqe.get_mut(at..at + 2) {
                pair[0] = cmd;
                pair[1] = e.data;
            }
        }
        wqe[2] = w16;
        wqe[3] = h;
        Ok(())
    }
}

/// QUERY_RDMA_FEATURES (0x12) — ctrl.c: irdma_sc_query_rdma_features; spec §4.3.23.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueryRdmaFeatures {
    /// Bus address of the response buffer.
    pub buf_pa: u64,
    /// Its length in bytes (Linux: 272).
    pub buf_len: u32,
}

impl CqpCommand for QueryRdmaFeatures {
    const OPCODE: u8 = op::QUERY_RDMA_FEATURES;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        let h = header(Self::OPCODE) | hmc::QRF_BUF_LEN.prep(self.buf_len as u64);
        *wqe = [0, 0, 0, h, self.buf_pa, 0, 0, 0];
        Ok(())
    }
}

// ---------------------------------------------------------------- CEQ / AEQ

/// CREATE_CEQ (0x16) — ctrl.c: irdma_sc_ceq_create; spec §4.3.14.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateCeq {
    /// CEQ id (< 1024 and < MAX_CEQS).
    pub ceq_id: u16,
    /// Number of 8-byte CEQEs (< 2^22).
    pub elem_cnt: u32,
    /// Ring.
    pub mem: QueueAddr,
    /// TPHEN.
    pub tph_en: bool,
    /// TPH value.
    pub tph_val: u8,
    /// ITRNOEXPIRE.
    pub itr_no_expire: bool,
    /// VSI index.
    pub vsi_idx: u16,
    /// PASID_VALID.
    pub pasid_valid: bool,
    /// PASID (< 2^20).
    pub pasid: u32,
}

/// The CEQ id and its limit check.
fn ceq_id_hdr(id: u16, env: &Env) -> Result<u64, EncodeError> {
    below(id as u64, env.limits.ceq_count, FieldName::CeqId)?;
    fit(eq::CEQID, id as u64, FieldName::CeqId)
}

impl CqpCommand for CreateCeq {
    const OPCODE: u8 = op::CREATE_CEQ;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        // ctrl.c: irdma_sc_ceq_init: min/max_hw_ceq_size (a device maximum
        // below the 22-bit field).
        in_range(
            self.elem_cnt.into(),
            hw_limits::MIN_CEQ_ENTRIES,
            hw_limits::MAX_CEQ_ENTRIES,
            FieldName::ElemCnt,
            Phrase::new(&"CEQ with no entries"),
        )?;
        let mem = self.mem.eq();
        let h = header(Self::OPCODE)
            | ceq_id_hdr(self.ceq_id, env)?
            | mem.lpbl(eq::LPBLSIZE)?
            | flag(eq::VMAP, mem.virtual_map)
            | flag(eq::ITRNOEXPIRE, self.itr_no_expire)
            | flag(eq::TPHEN, self.tph_en)
            | flag(eq::PASID_VALID, self.pasid_valid);
        let w56 = eq::TPHVAL.prep(self.tph_val as u64)
            | eq::VSIIDX.prep(self.vsi_idx as u64)
            | fit(eq::PASID, self.pasid as u64, FieldName::Pasid)?;
        let (w32, w48) = (mem.create_pa(), mem.create_pbl(eq::FIRSTPMPBLIDX, env)?);
        *wqe = [
            0,
            0,
            fit(eq::CEQSIZE, self.elem_cnt as u64, FieldName::ElemCnt)?,
            h,
            w32,
            0,
            w48,
            w56,
        ];
        Ok(())
    }
}

/// DESTROY_CEQ (0x18) — ctrl.c: irdma_sc_ceq_destroy; spec §4.3.15. Give the
/// values used at create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DestroyCeq {
    /// CEQ id.
    pub ceq_id: u16,
    /// Number of CEQEs.
    pub elem_cnt: u32,
    /// Ring.
    pub mem: QueueAddr,
    /// TPHEN.
    pub tph_en: bool,
    /// PASID_VALID.
    pub pasid_valid: bool,
    /// PASID (< 2^20).
    pub pasid: u32,
}

impl CqpCommand for DestroyCeq {
    const OPCODE: u8 = op::DESTROY_CEQ;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        // The vendor writes the PBLE index whatever VMAP says (ctrl.c:
        // irdma_sc_ceq_destroy), but its init kept one only with VMAP.
        let mem = self.mem.eq();
        let w48 = fit(eq::FIRSTPMPBLIDX, mem.first_pbl_index as u64, FieldName::FirstPblIndex)?;
        let h = header(Self::OPCODE)
            | ceq_id_hdr(self.ceq_id, env)?
            | mem.lpbl(eq::LPBLSIZE)?
            | flag(eq::VMAP, mem.virtual_map)
            | flag(eq::TPHEN, self.tph_en)
            | flag(eq::PASID_VALID, self.pasid_valid);
        let w56 = fit(eq::PASID, self.pasid as u64, FieldName::Pasid)?;
        *wqe =
            [0, 0, fit(eq::CEQSIZE, self.elem_cnt as u64, FieldName::ElemCnt)?, h, 0, 0, w48, w56];
        Ok(())
    }
}

/// CREATE_AEQ (0x19) — ctrl.c: irdma_sc_aeq_create; spec §4.3.16.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateAeq {
    /// Number of 16-byte AEQEs (< 2^19).
    pub elem_cnt: u32,
    /// Ring.
    pub mem: QueueAddr,
    /// PASID_VALID.
    pub pasid_valid: bool,
    /// PASID (< 2^20).
    pub pasid: u32,
}

#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn aeq_words(
    opcode: u8,
    elem_cnt: u32,
    mem: QueueAddr,
    pasid: (bool, u32),
    with_pa: bool,
    wqe: &mut [u64; 8],
    env: &Env,
) -> Result<(), EncodeError> {
    // Create: address unless VMAP, PBLE index only with VMAP; destroy: no
    // address, PBLE index as init kept it (ctrl.c: irdma_sc_aeq_create,
    // irdma_sc_aeq_destroy, irdma_sc_aeq_init).
    let mem = mem.eq();
    let (w32, w48) = if with_pa {
        (mem.create_pa(), mem.create_pbl(eq::FIRSTPMPBLIDX, env)?)
    } else {
        (0, fit(eq::FIRSTPMPBLIDX, mem.first_pbl_index as u64, FieldName::FirstPblIndex)?)
    };
    let h = header(opcode)
        | mem.lpbl(eq::LPBLSIZE)?
        | flag(eq::VMAP, mem.virtual_map)
        | flag(eq::PASID_VALID, pasid.0);
    let w56 = fit(eq::PASID, pasid.1 as u64, FieldName::Pasid)?;
    *wqe = [0, 0, fit(eq::AEQECNT, elem_cnt as u64, FieldName::ElemCnt)?, h, w32, 0, w48, w56];
    Ok(())
}

impl CqpCommand for CreateAeq {
    const OPCODE: u8 = op::CREATE_AEQ;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        // ctrl.c: irdma_sc_aeq_init: min/max_hw_aeq_size.
        in_range(
            self.elem_cnt.into(),
            hw_limits::MIN_AEQ_ENTRIES,
            hw_limits::MAX_AEQ_ENTRIES,
            FieldName::ElemCnt,
            Phrase::new(&"AEQ with no entries"),
        )?;
        aeq_words(
            Self::OPCODE,
            self.elem_cnt,
            self.mem,
            (self.pasid_valid, self.pasid),
            true,
            wqe,
            env,
        )
    }
}

/// DESTROY_AEQ (0x1B) — ctrl.c: irdma_sc_aeq_destroy; spec §4.3.17. The
/// engine writes PFINT_AEQCTL ← 0 before posting it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DestroyAeq {
    /// Number of AEQEs (as at create).
    pub elem_cnt: u32,
    /// Ring (as at create).
    pub mem: QueueAddr,
    /// PASID_VALID.
    pub pasid_valid: bool,
    /// PASID (< 2^20).
    pub pasid: u32,
}

impl CqpCommand for DestroyAeq {
    const OPCODE: u8 = op::DESTROY_AEQ;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        aeq_words(
            Self::OPCODE,
            self.elem_cnt,
            self.mem,
            (self.pasid_valid, self.pasid),
            false,
            wqe,
            env,
        )
    }
    fn pre_post_writes(&self) -> &'static [(usize, u32)] {
        &[(irdma_hal::regs::PFINT_AEQCTL, 0)]
    }
}

// ---------------------------------------------------------------- ARP, WS

/// A MAC address as the CQP words carry it: byte 0 most significant
/// (irdma_kcompat.c: ether_addr_to_u64).
pub fn mac_to_u64(mac: [u8; 6]) -> u64 {
    mac.iter().fold(0u64, |acc, b| (acc << 8) | *b as u64)
}

/// MANAGE_ARP (0x0F) add/update — ctrl.c: irdma_sc_add_arp_cache_entry;
/// spec §4.3.18.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArpAdd {
    /// ARP table index (< 2^12; Linux reserves 0).
    pub arp_index: u16,
    /// Neighbour MAC.
    pub mac: [u8; 6],
    /// REACHMAX (Linux: 0).
    pub reach_max: u32,
    /// PERMANENT (Linux: 1).
    pub permanent: bool,
}

impl CqpCommand for ArpAdd {
    const OPCODE: u8 = op::MANAGE_ARP;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        let h = header(Self::OPCODE)
            | fit(arp::ARPENTRYIDX, self.arp_index as u64, FieldName::ArpIndex)?
            | arp::ENTRYVALID.mask()
            | flag(arp::PERMANENT, self.permanent);
        *wqe = [
            0,
            arp::REACHMAX.prep(self.reach_max as u64),
            arp::MACADDR.prep(mac_to_u64(self.mac)),
            h,
            0,
            0,
            0,
            0,
        ];
        Ok(())
    }
}

/// MANAGE_ARP (0x0F) delete — ctrl.c: irdma_sc_del_arp_cache_entry; spec §4.3.18.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArpDel {
    /// ARP table index.
    pub arp_index: u16,
}

impl CqpCommand for ArpDel {
    const OPCODE: u8 = op::MANAGE_ARP;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        let h = header(Self::OPCODE)
            | fit(arp::ARPENTRYIDX, self.arp_index as u64, FieldName::ArpIndex)?;
        *wqe = [0, 0, 0, h, 0, 0, 0, 0];
        Ok(())
    }
}

// ---------------------------------------------------------------- UD

/// An address handle as the device holds it (uda.h: struct irdma_ah_info;
/// built by uda.c: irdma_sc_access_ah). IP words are host order, `[0]` the
/// most significant word of an IPv6 address; IPv4 uses `[0]` only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AhInfo {
    /// Address-handle index (< 2^24).
    pub ah_idx: u32,
    /// Protection domain (< 2^24).
    pub pd_idx: u32,
    /// ARP-table index of the next hop (its MAC reaches the hardware only
    /// through that entry).
    pub dst_arp_index: u16,
    /// Destination IP.
    pub dest_ip: [u32; 4],
    /// Source IP.
    pub src_ip: [u32; 4],
    /// IPv6 flow label (< 2^20).
    pub flow_label: u32,
    /// VLAN tag (id | priority << 13); Linux passes 0x1000 (VLAN_N_VID)
    /// without a VLAN, written as it is.
    pub vlan_tag: u16,
    /// Insert the VLAN tag.
    pub insert_vlan_tag: bool,
    /// Traffic class (DSCP << 2 | ECN).
    pub tc_tos: u8,
    /// Hop limit / TTL.
    pub hop_ttl: u8,
    /// The **local** MAC (Linux copies the netdev address).
    pub mac: [u8; 6],
    /// IPv4 addresses.
    pub ipv4: bool,
    /// Loopback (Linux: source address == destination address).
    pub loopback: bool,
}

impl AhInfo {
    /// The AH WQE for `opcode`. The vendor checks nothing and cuts wider
    /// values to the field; the driver refuses them instead.
    fn encode(&self, opcode: u8, wqe: &mut [u64; 8]) -> Result<(), EncodeError> {
        const PD_IDX: Field = Field::bits(23, 0);
        let pd = fit(PD_IDX, self.pd_idx as u64, FieldName::PdIdx)?;
        let ip = |a: [u32; 4]| -> (u64, u64) {
            if self.ipv4 {
                (a[0] as u64, 0)
            } else {
                (
                    (a[2] as u64) << 32 | a[3] as u64, // low half
                    (a[0] as u64) << 32 | a[1] as u64, // high half
                )
            }
        };
        let (d_lo, d_hi) = ip(self.dest_ip);
        let (s_lo, s_hi) = ip(self.src_ip);
        *wqe = [
            ah::MACADDR.prep(mac_to_u64(self.mac)),
            ah::PDINDEXLO.prep(pd & 0xffff)
                | ah::TC.prep(self.tc_tos as u64)
                | ah::VLANTAG.prep(self.vlan_tag as u64),
            ah::ARPINDEX.prep(self.dst_arp_index as u64)
                | ah::HOPLIMIT.prep(self.hop_ttl as u64)
                | ah::PDINDEXHI.prep(pd >> 16)
                | fit(ah::FLOWLABEL, self.flow_label as u64, FieldName::FlowLabel)?,
            header(opcode)
                | fit(ah::AVIDX, self.ah_idx as u64, FieldName::AhIdx)?
                | flag(ah::IPV4VALID, self.ipv4)
                | flag(ah::INSERTVLANTAG, self.insert_vlan_tag)
                | flag(ah::DOLOOPBACK, self.loopback),
            d_lo,
            d_hi,
            s_lo,
            s_hi,
        ];
        Ok(())
    }
}

/// CREATE_ADDR_HANDLE (0x1C) — uda.c: irdma_sc_access_ah.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateAh(pub AhInfo);

/// MODIFY_ADDR_HANDLE (0x1D) — uda.c: irdma_sc_access_ah (Linux never
/// issues it; the layout is the create's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModifyAh(pub AhInfo);

/// DESTROY_ADDR_HANDLE (0x1E) — uda.c: irdma_sc_access_ah; Linux sends the
/// full AH info, as at create.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DestroyAh(pub AhInfo);

impl CqpCommand for CreateAh {
    const OPCODE: u8 = op::CREATE_ADDR_HANDLE;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        self.0.encode(Self::OPCODE, wqe)
    }
}

impl CqpCommand for ModifyAh {
    const OPCODE: u8 = op::MODIFY_ADDR_HANDLE;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        self.0.encode(Self::OPCODE, wqe)
    }
}

impl CqpCommand for DestroyAh {
    const OPCODE: u8 = op::DESTROY_ADDR_HANDLE;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        self.0.encode(Self::OPCODE, wqe)
    }
}

/// A multicast group (uda.h: struct irdma_mcast_grp_info; built by uda.c:
/// irdma_access_mcast_grp). The members live in a 64-byte context in host
/// memory ([`McastGrpInfo::ctx`]) that the caller writes at `ctx_pa` before
/// posting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct McastGrpInfo {
    /// Group index (< 4096; the vendor refuses more with -EINVAL).
    pub mg_id: u16,
    /// IPv4 group address.
    pub ipv4: bool,
    /// Group IP (host order, `[0]` most significant; IPv4 in `[0]`).
    pub dest_ip: [u32; 4],
    /// Group MAC.
    pub dest_mac: [u8; 6],
    /// VLAN id; Linux passes 0xFFFF with `vlan_valid` false off a VLAN.
    /// Without `vlan_valid` the low 12 bits are written as the vendor does
    /// (the hardware ignores them); with it, more than 12 bits is refused.
    pub vlan_id: u16,
    /// VLAN id valid.
    pub vlan_valid: bool,
    /// HMC function id (< 64).
    pub hmc_fn_id: u8,
    /// Queue-set handle (< 1024).
    pub qs_handle: u16,
    /// Bus address of the 64-byte group context.
    pub ctx_pa: u64,
}

/// One member slot of a multicast-group context.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct McastMember {
    /// Member QP id (< 2^18).
    pub qp_id: u32,
    /// Destination port (Linux: 0).
    pub dest_port: u16,
}

impl McastGrpInfo {
    /// The 64-byte group context for `members` (slots in table order; `None`
    /// = unused): valid members packed from entry 0, the rest zero, as
    /// uda.c: irdma_access_mcast_grp fills it.
    pub fn ctx(members: &[Option<McastMember>]) -> Result<[u64; 8], EncodeError> {
        let mut out = [0u64; mcast::CTX_ENTRIES];
        for (n, m) in members.iter().flatten().enumerate() {
            let Some(slot) = out.get_mut(n) else {
                return Err(above_max(
                    FieldName::McastMembers,
                    n as u64 + 1,
                    mcast::CTX_ENTRIES as u32,
                ));
            };
            *slot = fit(mcast::CTX_QPID, m.qp_id as u64, FieldName::MemberQpId)?
                | mcast::CTX_VALID.mask()
                | mcast::CTX_DESTPORT.prep(m.dest_port as u64);
        }
        Ok(out)
    }

    fn encode(&self, opcode: u8, wqe: &mut [u64; 8]) -> Result<(), EncodeError> {
        below(self.mg_id as u64, mcast::MAX_GROUPS, FieldName::MgId)?;
        let vlan = if self.vlan_valid {
            fit(mcast::VLANID, self.vlan_id as u64, FieldName::VlanId)?
        } else {
            mcast::VLANID.prep(self.vlan_id as u64)
        };
        let (lo, hi) = if self.ipv4 {
            (self.dest_ip[0] as u64, 0)
        } else {
            (
                (self.dest_ip[2] as u64) << 32 | self.dest_ip[3] as u64,
                (self.dest_ip[0] as u64) << 32 | self.dest_ip[1] as u64,
            )
        };
        *wqe = [
            mcast::DMAC.prep(mac_to_u64(self.dest_mac)),
            fit(mcast::HMCFNID, self.hmc_fn_id as u64, FieldName::HmcFnId)?,
            vlan | fit(mcast::QS_HANDLE, self.qs_handle as u64, FieldName::QsHandle)?,
            header(opcode)
                | mcast::MGIDX.prep(self.mg_id as u64)
                | flag(mcast::VLANVALID, self.vlan_valid)
                | flag(mcast::IPV4VALID, self.ipv4),
            self.ctx_pa,
            0,
            lo,
            hi,
        ];
        Ok(())
    }
}

/// CREATE_MCAST_GRP (0x26) — uda.c: irdma_access_mcast_grp.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateMcastGrp(pub McastGrpInfo);

/// MODIFY_MCAST_GRP (0x27) — uda.c: irdma_access_mcast_grp.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModifyMcastGrp(pub McastGrpInfo);

/// DESTROY_MCAST_GRP (0x28) — uda.c: irdma_access_mcast_grp.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DestroyMcastGrp(pub McastGrpInfo);

impl CqpCommand for CreateMcastGrp {
    const OPCODE: u8 = op::CREATE_MCAST_GRP;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        self.0.encode(Self::OPCODE, wqe)
    }
}

impl CqpCommand for ModifyMcastGrp {
    const OPCODE: u8 = op::MODIFY_MCAST_GRP;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        self.0.encode(Self::OPCODE, wqe)
    }
}

impl CqpCommand for DestroyMcastGrp {
    const OPCODE: u8 = op::DESTROY_MCAST_GRP;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        self.0.encode(Self::OPCODE, wqe)
    }
}

/// Work-scheduler node operations (defs.h: enum irdma_ws_node_op).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WsNodeOp {
    /// Add.
    #[default]
    Add,
    /// Modify.
    Modify,
    /// Delete.
    Delete,
}

/// WORK_SCHED_NODE (0x2C) — ctrl.c: irdma_sc_manage_ws_node; spec §4.3.20.
/// A leaf add completes with the queue-set handle in OPRETVAL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WsNode {
    /// Operation.
    pub op: WsNodeOp,
    /// Node id (< 2^14).
    pub node_id: u16,
    /// Parent node id (< 2^14).
    pub parent_id: u16,
    /// VSI.
    pub vsi: u16,
    /// Leaf node.
    pub leaf: bool,
    /// Enabled.
    pub enable: bool,
    /// Priority type (1 weighted RR).
    pub prio_type: u8,
    /// Traffic class (< 8).
    pub tc: u8,
    /// Weight (< 128).
    pub weight: u8,
}

impl CqpCommand for WsNode {
    const OPCODE: u8 = op::WORK_SCHED_NODE;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        let op = match self.op {
            WsNodeOp::Add => 0,
            WsNodeOp::Modify => 1,
            WsNodeOp::Delete => 2,
        };
        let h = header(Self::OPCODE)
            | fit(ws::NODEID, self.node_id as u64, FieldName::NodeId)?
            | fit(ws::PARENTID, self.parent_id as u64, FieldName::ParentId)?
            | ws::NODEOP.prep(op)
            | fit(ws::TC, self.tc as u64, FieldName::Tc)?
            | fit(ws::PRIOTYPE, self.prio_type as u64, FieldName::PrioType)?
            | flag(ws::NODETYPE, self.leaf)
            | flag(ws::ENABLENODE, self.enable);
        let w32 =
            fit(ws::WEIGHT, self.weight as u64, FieldName::Weight)? | ws::VSI.prep(self.vsi as u64);
        *wqe = [0, 0, 0, h, w32, 0, 0, 0];
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc<C: CqpCommand>(c: &C) -> Result<[u64; 8], EncodeError> {
        let mut w = [0xdead_beef; 8];
        let mut env = Env::new(Limits::NONE);
        c.encode(&mut w, &mut env).map(|_| w)
    }

    fn too_wide(r: Result<[u64; 8], EncodeError>, name: &str) {
        match r.map_err(|e| e.too_wide()) {
            Err(Some((field, ..))) => assert_eq!(field, name),
            other => panic!("expected TooWide/AboveMax({name}), got {other:?}"),
        }
    }

    /// A contiguous event queue carries no PBL fields even when the caller
    /// left some in its QueueAddr: the vendor's EQ init drops them
    /// (ctrl.c: irdma_sc_ceq_init, irdma_sc_aeq_init). Found by the
    /// vendor-diff harness (tests/vendor-diff, ctrl.c).
    #[test]
    fn contiguous_eq_drops_pbl_fields() {
        let mem =
            QueueAddr { pa: 0x1000, virtual_map: false, pbl_chunk_size: 3, first_pbl_index: 7 };
        let lpbl = eq::LPBLSIZE.mask();
        let ceq = CreateCeq {
            ceq_id: 1,
            elem_cnt: 64,
            mem,
            tph_en: false,
            tph_val: 0,
            itr_no_expire: false,
            vsi_idx: 0,
            pasid_valid: false,
            pasid: 0,
        };
        let w = enc(&ceq).unwrap();
        assert_eq!((w[3] & lpbl, w[4], w[6]), (0, 0x1000, 0));
        let d = DestroyCeq {
            ceq_id: 1,
            elem_cnt: 64,
            mem,
            tph_en: false,
            pasid_valid: false,
            pasid: 0,
        };
        let w = enc(&d).unwrap();
        assert_eq!((w[3] & lpbl, w[6]), (0, 0));
        // and an index the PBLE field could not hold is not looked at
        let far = QueueAddr { first_pbl_index: u32::MAX, ..mem };
        assert!(enc(&DestroyCeq { mem: far, ..d }).is_ok());
        let a = CreateAeq { elem_cnt: 64, mem, pasid_valid: false, pasid: 0 };
        let w = enc(&a).unwrap();
        assert_eq!((w[3] & lpbl, w[4], w[6]), (0, 0x1000, 0));
        let w = enc(&DestroyAeq { elem_cnt: 64, mem, pasid_valid: false, pasid: 0 }).unwrap();
        assert_eq!((w[3] & lpbl, w[6]), (0, 0));
        // a virtually mapped one keeps them
        let vm = QueueAddr { virtual_map: true, ..mem };
        let w = enc(&DestroyAeq { elem_cnt: 64, mem: vm, pasid_valid: false, pasid: 0 }).unwrap();
        assert_eq!((w[3] & lpbl, w[6]), (eq::LPBLSIZE.prep(3), 7));
    }

    #[test]
    fn ah_layout_and_refusals() {
        let info = AhInfo {
            ah_idx: 0x12_3456,
            pd_idx: 0xab_cdef,
            dst_arp_index: 0x0102,
            dest_ip: [0x2001_0db8, 1, 2, 3],
            src_ip: [0xfe80_0000, 4, 5, 6],
            flow_label: 0xf_1234,
            vlan_tag: 0x2064,
            insert_vlan_tag: true,
            tc_tos: 0x68,
            hop_ttl: 0x40,
            mac: [0xb4, 0x96, 0x91, 1, 2, 3],
            ipv4: false,
            loopback: true,
        };
        let w = enc(&CreateAh(info)).unwrap();
        assert_eq!(w[0], 0xb496_9101_0203_0000);
        assert_eq!(w[1], 0xcdef_0068_0000_2064);
        assert_eq!(w[2], 0x0102_0040_0abf_1234);
        assert_eq!(w[3], 0x5000_001c_0012_3456);
        assert_eq!((w[4], w[5]), (0x2_0000_0003, 0x2001_0db8_0000_0001));
        assert_eq!((w[6], w[7]), (0x5_0000_0006, 0xfe80_0000_0000_0004));
        assert_eq!(enc(&DestroyAh(info)).unwrap()[3] >> 32 & 0x3f, 0x1e);
        assert_eq!(enc(&ModifyAh(info)).unwrap()[3] >> 32 & 0x3f, 0x1d);
        let v4 = AhInfo { ipv4: true, dest_ip: [0x0a00_0001, 9, 9, 9], ..info };
        let w = enc(&CreateAh(v4)).unwrap();
        assert_eq!((w[4], w[5], w[6] >> 32, w[7]), (0x0a00_0001, 0, 0, 0));
        too_wide(enc(&CreateAh(AhInfo { ah_idx: 1 << 24, ..info })), "ah_idx");
        too_wide(enc(&CreateAh(AhInfo { pd_idx: 1 << 24, ..info })), "pd_idx");
        too_wide(enc(&CreateAh(AhInfo { flow_label: 1 << 20, ..info })), "flow_label");
    }

    #[test]
    fn mcast_layout_ctx_and_refusals() {
        let g = McastGrpInfo {
            mg_id: 0xfff,
            ipv4: true,
            dest_ip: [0xe000_00fb, 0, 0, 0],
            dest_mac: [1, 0, 0x5e, 0, 0, 0xfb],
            vlan_id: 0xffff,
            vlan_valid: false,
            hmc_fn_id: 3,
            qs_handle: 0x3ff,
            ctx_pa: 0x1234_5000,
        };
        let w = enc(&CreateMcastGrp(g)).unwrap();
        assert_eq!(w[0], 0x0100_5e00_00fb);
        assert_eq!(w[1], 3);
        assert_eq!(w[2], 0xfff_0000_03ff);
        assert_eq!(w[3], 0x1000_0026_0000_0fff);
        assert_eq!((w[4], w[6], w[7]), (0x1234_5000, 0xe000_00fb, 0));
        too_wide(enc(&CreateMcastGrp(McastGrpInfo { mg_id: 4096, ..g })), "mg_id");
        too_wide(enc(&ModifyMcastGrp(McastGrpInfo { vlan_valid: true, ..g })), "vlan_id");
        too_wide(enc(&DestroyMcastGrp(McastGrpInfo { qs_handle: 0x400, ..g })), "qs_handle");
        let m = |qp_id| Some(McastMember { qp_id, dest_port: 0 });
        let ctx = McastGrpInfo::ctx(&[None, m(0x51), None, m(0x3ffff)]).unwrap();
        assert_eq!(ctx, [0x8000_0051, 0x8003_ffff, 0, 0, 0, 0, 0, 0]);
        too_wide(McastGrpInfo::ctx(&[m(1 << 18)]).map(|_| [0; 8]), "member qp_id");
        too_wide(McastGrpInfo::ctx(&[m(1); 9]).map(|_| [0; 8]), "mcast members");
    }

    #[test]
    fn nop_clears_every_word() {
        assert_eq!(enc(&Nop).unwrap(), [0, 0, 0, 0x24 << 32, 0, 0, 0, 0]);
    }

    #[test]
    fn qp_ids_at_or_above_2_24_are_refused() {
        let c = CreateQp { qp_id: 1 << 24, qp_type: 3, ..Default::default() };
        too_wide(enc(&c), "qp_id");
        let ok = CreateQp { qp_id: (1 << 24) - 1, qp_type: 3, next_state: 1, ..Default::default() };
        assert_eq!(enc(&ok).unwrap()[3], 0x1003_0000_00ff_ffff);
        too_wide(enc(&DestroyQp { qp_id: 1 << 24, ..Default::default() }), "qp_id");
        too_wide(enc(&ModifyQp { qp_id: 1 << 24, ..Default::default() }), "qp_id");
        too_wide(enc(&SuspendQp { qp_id: 1 << 24 }), "qp_id");
        too_wide(enc(&ResumeQp { qp_id: 1 << 24, qs_handle: 1 }), "qp_id");
        assert_eq!(enc(&ResumeQp { qp_id: 0x33, qs_handle: 18 }).unwrap()[2], 18);
        too_wide(
            enc(&FlushWqes { qp_id: u32::MAX, flush_sq: true, ..Default::default() }),
            "qp_id",
        );
        assert!(matches!(enc(&FlushWqes::default()), Err(EncodeError::Invalid { .. })));
    }

    #[test]
    fn qp_id_checked_against_committed_count() {
        let mut w = [0; 8];
        let mut env = Env::new(Limits { qp_count: 1024, ..Limits::NONE });
        let c = CreateQp { qp_id: 1024, ..Default::default() };
        assert_eq!(
            c.encode(&mut w, &mut env),
            Err(EncodeError::AboveMax { field: FieldName::QpId, max: 1023, value: 1024 })
        );
        let c = CreateQp { qp_id: 1023, ..Default::default() };
        assert!(c.encode(&mut w, &mut env).is_ok());
    }

    #[test]
    fn cq_ids_and_sizes_range_checked() {
        too_wide(enc(&CreateCq { cq_id: 1 << 19, ..Default::default() }), "cq_id");
        too_wide(enc(&DestroyCq { cq_id: 1 << 19, ..Default::default() }), "cq_id");
        too_wide(enc(&ModifyCq { cq_id: 1 << 19, ..Default::default() }), "cq_id");
        too_wide(enc(&CreateCq { cq_size: 1 << 21, ..Default::default() }), "cq_size");
        too_wide(enc(&CreateCq { ceq_id: Some(1024), ..Default::default() }), "ceq_id");
        too_wide(
            enc(&CreateCq { ring: QueueAddr::pbl(1 << 28), ..Default::default() }),
            "first_pbl_index",
        );
        let w =
            enc(&CreateCq { cq_id: (1 << 19) - 1, cq_size: 0x800, ..Default::default() }).unwrap();
        assert_eq!(w[3], 0x0000_0003_0007_ffff);
        assert_eq!(w[0], 0x800);
    }

    #[test]
    fn stag_inputs_range_checked() {
        let base = AllocStag { total_len: 4096, ..Default::default() };
        too_wide(enc(&AllocStag { pd_id: 1 << 18, ..base }), "pd_id");
        too_wide(enc(&AllocStag { stag_idx: 1 << 24, ..base }), "stag_idx");
        too_wide(enc(&AllocStag { total_len: 1 << 46, ..base }), "total_len");
        too_wide(enc(&AllocStag { access_rights: 0x20, ..base }), "access_rights");
        assert!(matches!(
            enc(&AllocStag { total_len: 0, ..base }),
            Err(EncodeError::Invalid { .. })
        ));
        let mr = RegMr {
            stag_idx: 1,
            stag_key: 2,
            pd_id: 3,
            va: 0x1234,
            total_len: 0x1000,
            page_size: PageSize::Size4K,
            pages: MrPages::Pbl(Pbl { level: 1, first_index: 1 << 28 }),
            va_based: true,
            access_rights: access::LOCAL_READ | access::REMOTE_WRITE,
            remote_atomics: false,
            non_cached: false,
            use_hmc_fn_index: false,
            hmc_fn_index: 0,
            placement_type: 0,
            all_memory: false,
        };
        too_wide(enc(&mr), "first_pbl_index");
        let w = enc(&RegMr { pages: MrPages::Contiguous(0x5000), ..mr }).unwrap();
        // VA-based, remote access enabled because of REMOTE_WRITE.
        assert_eq!(w[3], 0x0829_080a_0000_0000);
        assert_eq!(w[4], 0x5000);
        assert_eq!(w[2], 0x102);
    }

    #[test]
    fn arp_index_and_ws_ids_range_checked() {
        too_wide(enc(&ArpAdd { arp_index: 0x1000, ..Default::default() }), "arp_index");
        too_wide(enc(&ArpDel { arp_index: 0xffff }), "arp_index");
        too_wide(enc(&WsNode { node_id: 0x4000, ..Default::default() }), "node_id");
        too_wide(enc(&WsNode { weight: 0x80, ..Default::default() }), "weight");
        let w = enc(&ArpAdd {
            arp_index: 5,
            mac: [0, 0x11, 0x22, 0x33, 0x44, 0x55],
            reach_max: 0,
            permanent: true,
        })
        .unwrap();
        assert_eq!(w[2], 0x0011_2233_4455);
        assert_eq!(w[3], 0x0000_0c0f_0000_0005);
    }

    #[test]
    fn remaining_range_refusals() {
        too_wide(enc(&ModifyQp { new_mss: 0x4000, ..Default::default() }), "new_mss");
        too_wide(enc(&CreateQp { qp_type: 8, ..Default::default() }), "qp_type");
        too_wide(enc(&CreateQp { next_state: 8, ..Default::default() }), "next_state");
        too_wide(enc(&GenAe { ae_src: 16, ..Default::default() }), "ae_src");
        too_wide(
            enc(&CreateCq { shadow_read_threshold: 1 << 18, ..Default::default() }),
            "shadow_read_threshold",
        );
        too_wide(enc(&CreateCq { pasid: 1 << 20, ..Default::default() }), "pasid");
        too_wide(enc(&CreateCq { cq_ctx: 1 << 63, ..Default::default() }), "cq_ctx");
        let ring = QueueAddr { pbl_chunk_size: 4, ..Default::default() };
        too_wide(enc(&CreateCq { ring, ..Default::default() }), "pbl_chunk_size");
        let ceq = CreateCeq {
            ceq_id: 0,
            elem_cnt: 1 << 22,
            mem: QueueAddr::contiguous(0x1000),
            tph_en: false,
            tph_val: 0,
            itr_no_expire: false,
            vsi_idx: 0,
            pasid_valid: false,
            pasid: 0,
        };
        too_wide(enc(&ceq), "elem_cnt");
        too_wide(enc(&CreateCeq { elem_cnt: 1, ceq_id: 1024, ..ceq }), "ceq_id");
        let aeq = CreateAeq {
            elem_cnt: 1 << 19,
            mem: QueueAddr::contiguous(0x1000),
            pasid_valid: false,
            pasid: 0,
        };
        too_wide(enc(&aeq), "elem_cnt");
        too_wide(enc(&UploadContext { qp_type: 16, ..Default::default() }), "qp_type");
        too_wide(
            enc(&AllocStag { total_len: 1, placement_type: 16, ..Default::default() }),
            "placement_type",
        );
        // A CEQ id is also checked against the function's CEQ count.
        let mut w = [0; 8];
        let mut env = Env::new(Limits { ceq_count: 4, ..Limits::NONE });
        let r = CreateCeq { elem_cnt: 1, ceq_id: 4, ..ceq }.encode(&mut w, &mut env);
        assert_eq!(r.err().and_then(|e| e.too_wide()).map(|t| t.0), Some("ceq_id"));
    }

    #[test]
    fn update_pe_sds_spills_to_overflow_buffer() {
        let e: [SdEntry; 5] = core::array::from_fn(|i| SdEntry {
            cmd: 0x8000 | i as u32,
            data: (i as u64) << 21 | 1,
        });
        let mut w = [0; 8];
        let mut env = Env::new(Limits::NONE);
        let c = UpdatePeSds { hmc_fn_id: 3, entries: &e };
        assert!(matches!(c.encode(&mut w, &mut env), Err(EncodeError::Invalid { .. })));
        env.sdbuf_pa = 0x8000_0f80;
        c.encode(&mut w, &mut env).unwrap();
        assert_eq!(w[2], 0x8000_0f83);
        assert_eq!(w[3], 0x0000_001f_0000_0002);
        assert_eq!(w[4], 0x8000_0000_0000_8001);
        assert_eq!(env.sdbuf_words, 4);
        assert_eq!(&env.sdbuf[..4], &[0x8003, 3 << 21 | 1, 0x8004, 4 << 21 | 1]);
        let twelve = [SdEntry::default(); 12];
        too_wide(enc(&UpdatePeSds { hmc_fn_id: 0, entries: &twelve }), "sd_entries");
        too_wide(enc(&UpdatePeSds { hmc_fn_id: 64, entries: &e[..1] }), "hmc_fn_id");
        let s = SdEntry::set(7, 0x4000_0000, true).unwrap();
        assert_eq!(s.cmd, 0x8000_8007);
        assert_eq!(s.data, 0x4000_0000 | 512 << 2 | 2 | 1);
    }

    /// ctrl.c: irdma_sc_ceq_init / irdma_sc_aeq_init / irdma_sc_ccq_init
    /// check sizes against the device's min/max (user.h), not the field
    /// widths: a CEQ of 262,144..2^22-1 entries fits CEQSIZE but the vendor
    /// refuses it, and so do empty queues.
    #[test]
    fn eq_and_ccq_sizes_checked_against_the_device_range() {
        let ceq = CreateCeq {
            ceq_id: 0,
            elem_cnt: hw_limits::MAX_CEQ_ENTRIES,
            mem: QueueAddr::contiguous(0x1000),
            tph_en: false,
            tph_val: 0,
            itr_no_expire: false,
            vsi_idx: 0,
            pasid_valid: false,
            pasid: 0,
        };
        assert!(enc(&ceq).is_ok());
        too_wide(enc(&CreateCeq { elem_cnt: hw_limits::MAX_CEQ_ENTRIES + 1, ..ceq }), "elem_cnt");
        assert!(matches!(enc(&CreateCeq { elem_cnt: 0, ..ceq }), Err(EncodeError::Invalid { .. })));
        let aeq = CreateAeq {
            elem_cnt: 0,
            mem: QueueAddr::contiguous(0x1000),
            pasid_valid: false,
            pasid: 0,
        };
        assert!(matches!(enc(&aeq), Err(EncodeError::Invalid { .. })));
        assert!(enc(&CreateAeq { elem_cnt: hw_limits::MAX_AEQ_ENTRIES, ..aeq }).is_ok());
        let ccq = CreateCq { cq_size: hw_limits::MAX_CQ_SIZE, ..Default::default() };
        assert_eq!(ccq.check_ccq(), Ok(()));
        assert!(matches!(
            CreateCq { cq_size: 0, ..ccq }.check_ccq(),
            Err(EncodeError::Invalid { .. })
        ));
        assert!(matches!(
            CreateCq { cq_size: hw_limits::MAX_CQ_SIZE + 1, ..ccq }.check_ccq(),
            Err(EncodeError::AboveMax {
                field: FieldName::CqSize,
                max: hw_limits::MAX_CQ_SIZE,
                value: 1_048_576
            })
        ));
    }

    /// ctrl.c: irdma_sc_qp_flush_wqes: a queue already flushed is not flushed
    /// again (its codes are not written); with nothing left, -EALREADY and
    /// no WQE.
    #[test]
    fn flush_state_flushes_each_queue_once() {
        let req = FlushWqes {
            qp_id: 5,
            flush_sq: false,
            flush_rq: true,
            user_codes: Some(FlushCodes { sq: (1, 2), rq: (1, 3) }),
            generate_ae: None,
        };
        let mut st = FlushState::default();
        let f = st.request(req).unwrap();
        assert_eq!((f.flush_sq, f.flush_rq), (false, true));
        assert_eq!(st, FlushState { sq: false, rq: true });
        // Both requested: only the SQ is left.
        let f = st.request(FlushWqes { flush_sq: true, ..req }).unwrap();
        assert_eq!((f.flush_sq, f.flush_rq), (true, false));
        let w = enc(&f).unwrap();
        assert_eq!(w[2] & 0xffff_ffff, 0, "no RQ codes for a queue not flushed now");
        assert_eq!(w[2] >> 32, 0x0001_0002, "SQ codes written");
        // Nothing left: refused, state unchanged.
        let before = st;
        assert!(matches!(
            st.request(FlushWqes { flush_sq: true, ..req }),
            Err(EncodeError::Invalid { .. })
        ));
        assert_eq!(st, before);
        let mut fresh = FlushState::default();
        assert!(fresh.request(FlushWqes { flush_rq: false, ..req }).is_err(), "neither queue");
        assert_eq!(fresh, FlushState::default());
    }
}
