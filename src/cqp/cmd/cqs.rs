//! CQ commands: create (also the CCQ), destroy, modify.

use irdma_hal::cqp::{cq, op};

use super::common::*;
use crate::cqp::{EncodeError, FieldName, Phrase, fit, flag};

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
    /// create path ([`Cqp::create_ccq`](crate::cqp::Cqp::create_ccq)) calls this before posting.
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

fn ctx63(v: u64) -> Result<u64, EncodeError> {
    fit(cq::CQCTX, v, FieldName::CqCtx)
}

/// @0 the size and @8 the context, as every CQ command writes them.
fn size_ctx(size: u32, ctx: u64) -> Result<[u64; 2], EncodeError> {
    Ok([fit(cq::CQSIZE, size as u64, FieldName::CqSize)?, ctx63(ctx)?])
}

/// The ring flags of an ordinary CQ's header (ctrl.c: irdma_sc_cq_create,
/// irdma_sc_cq_modify, irdma_sc_cq_destroy set the same ones; DESTROY
/// without CHKOVERFLOW).
fn ring_flags(
    check_overflow: bool,
    virtual_map: bool,
    ceqe_mask: bool,
    tph_en: bool,
    avoid_mem_cflct: bool,
    pasid_valid: bool,
) -> u64 {
    flag(cq::CHKOVERFLOW, check_overflow)
        | flag(cq::VIRTMAP, virtual_map)
        | flag(cq::ENCEQEMASK, ceqe_mask)
        | flag(cq::TPHEN, tph_en)
        | flag(cq::AVOIDMEMCNFLCT, avoid_mem_cflct)
        | flag(cq::PASID_VALID, pasid_valid)
}

/// @16 the shadow read threshold and @56 the TPH value, VSI and PASID, as
/// CREATE_CQ and MODIFY_CQ write them.
fn threshold_tph(
    threshold: u32,
    tph_val: u8,
    vsi_idx: u16,
    pasid: u32,
) -> Result<(u64, u64), EncodeError> {
    let w16 = fit(cq::SHADOW_READ_THRESHOLD, threshold as u64, FieldName::ShadowReadThreshold)?;
    let w56 = cq::TPHVAL.prep(tph_val as u64)
        | cq::VSIIDX.prep(vsi_idx as u64)
        | fit(cq::PASID, pasid as u64, FieldName::Pasid)?;
    Ok((w16, w56))
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
            | ring_flags(
                self.check_overflow,
                self.ring.virtual_map,
                self.ceqe_mask,
                self.tph_en,
                self.avoid_mem_cflct,
                self.pasid_valid,
            );
        let [w0, w8] = size_ctx(self.cq_size, self.cq_ctx)?;
        let (w16, w56) =
            threshold_tph(self.shadow_read_threshold, self.tph_val, self.vsi_idx, self.pasid)?;
        *wqe = [w0, w8, w16, h, w32, self.shadow_area_pa, w48, w56];
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
            | ring_flags(
                false,
                self.ring.virtual_map,
                self.ceqe_mask,
                self.tph_en,
                self.avoid_mem_cflct,
                self.pasid_valid,
            );
        let [w0, w8] = size_ctx(self.cq_size, self.cq_ctx)?;
        let w56 = fit(cq::PASID, self.pasid as u64, FieldName::Pasid)?;
        *wqe = [w0, w8, 0, h, 0, self.shadow_area_pa, w48, w56];
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
        let [w0, w8] = size_ctx(self.cq_size, self.cq_ctx)?;
        *wqe = [w0, w8, 0, h, 0, self.shadow_area_pa, 0, 0];
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
            | ring_flags(
                self.check_overflow,
                self.new_virtual_map,
                self.ceqe_mask,
                self.tph_en,
                self.avoid_mem_cflct,
                self.pasid_valid,
            );
        let [w0, w8] = size_ctx(self.new_size, self.cq_ctx)?;
        let (w16, w56) =
            threshold_tph(self.new_shadow_read_threshold, self.tph_val, self.vsi_idx, self.pasid)?;
        *wqe = [
            w0,
            w8,
            w16,
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
