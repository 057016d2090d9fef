//! Event queue commands: CEQ and AEQ create and destroy.

use irdma_hal::cqp::{eq, op};

use super::common::hw_limits::{
    MAX_AEQ_ENTRIES, MAX_CEQ_ENTRIES, MIN_AEQ_ENTRIES, MIN_CEQ_ENTRIES,
};
use super::common::*;
use crate::cqp::{EncodeError, FieldName, Phrase, fit, flag};

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

impl CreateCeq {
    /// A CEQ of `elem_cnt` entries on a contiguous ring at `ring_pa` for
    /// VSI `vsi_idx`, as the driver creates every CEQ (hw.c:
    /// irdma_create_ceq, irdma_sc_ceq_init: no TPH, no PASID, the ITR
    /// expires).
    pub fn contiguous(ceq_id: u16, elem_cnt: u32, ring_pa: u64, vsi_idx: u16) -> Self {
        Self {
            ceq_id,
            elem_cnt,
            mem: QueueAddr::contiguous(ring_pa),
            tph_en: false,
            tph_val: 0,
            itr_no_expire: false,
            vsi_idx,
            pasid_valid: false,
            pasid: 0,
        }
    }
}

/// An event queue's entry count within the device's `min..=max` (`none`
/// says what a count below `min` is); see [`in_range`].
fn elem_cnt_in(n: u32, min: u32, max: u32, none: &'static &'static str) -> Result<(), EncodeError> {
    in_range(n.into(), min, max, FieldName::ElemCnt, Phrase::new(none))
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
        elem_cnt_in(self.elem_cnt, MIN_CEQ_ENTRIES, MAX_CEQ_ENTRIES, &"CEQ with no entries")?;
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
        elem_cnt_in(self.elem_cnt, MIN_AEQ_ENTRIES, MAX_AEQ_ENTRIES, &"AEQ with no entries")?;
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
