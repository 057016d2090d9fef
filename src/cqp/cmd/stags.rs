//! STag commands: allocate, register (MR), deallocate.

use irdma_hal::cqp::{op, stag};

use super::common::*;
use crate::cqp::{EncodeError, FieldName, Phrase, fit, flag};

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

/// A length of 0 only with the "all memory" flag; otherwise
/// [`EncodeError::Invalid`] saying `what` (the check ALLOC_STAG and REG_MR
/// share).
fn len_or_all_memory(
    total_len: u64,
    all_memory: bool,
    what: &'static &'static str,
) -> Result<(), EncodeError> {
    if total_len == 0 && !all_memory {
        return Err(EncodeError::Invalid { what: Phrase::new(what) });
    }
    Ok(())
}

impl CqpCommand for AllocStag {
    const OPCODE: u8 = op::ALLOC_STAG;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        len_or_all_memory(self.total_len, self.all_memory, &"zero-length STag without all_memory")?;
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

impl RegMr {
    /// Every field zero or off: a contiguous MR at bus address 0, 4 KiB
    /// pages, no rights, and none of the options (remote atomics, non-cached,
    /// HMC function index, placement type, all memory) — the base a
    /// registration overrides with struct-update syntax (`..RegMr::DEFAULT`).
    pub const DEFAULT: RegMr = RegMr {
        stag_idx: 0,
        stag_key: 0,
        pd_id: 0,
        va: 0,
        total_len: 0,
        page_size: PageSize::Size4K,
        pages: MrPages::Contiguous(0),
        va_based: false,
        access_rights: 0,
        remote_atomics: false,
        non_cached: false,
        use_hmc_fn_index: false,
        hmc_fn_index: 0,
        placement_type: 0,
        all_memory: false,
    };
}

impl CqpCommand for RegMr {
    const OPCODE: u8 = op::REG_MR;
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError> {
        len_or_all_memory(self.total_len, self.all_memory, &"zero-length MR without all_memory")?;
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
