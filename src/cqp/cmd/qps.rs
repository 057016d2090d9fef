//! QP commands: create, modify, destroy, flush, AE generation, context
//! upload, suspend and resume.

use irdma_hal::cqp::{op, qp};

use super::common::*;
use crate::cqp::{EncodeError, FieldName, Phrase, fit, flag};

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
