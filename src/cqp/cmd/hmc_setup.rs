//! HMC set-up commands: FPM query and commit, SD updates, the RDMA feature query.

use irdma_hal::Field;
use irdma_hal::cqp::{hmc, op};

use super::common::*;
use crate::cqp::{EncodeError, FieldName, Phrase, fit, flag};

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

    /// Clears SD `sd_index`, programmed `direct` or paged — hmc.c:
    /// irdma_clr_sd_entry: the data word keeps PMSDBPCOUNT = 512 and the
    /// SD's type, only PMSDVALID and the address are 0 (spec §3.6: the BP
    /// count is 512 for set and clear alike).
    pub fn clear(sd_index: u16, direct: bool) -> Result<Self, EncodeError> {
        use irdma_hal::cqp::sd::*;
        let cmd = fit(Self::SD_INDEX, sd_index as u64, FieldName::SdIndex)?
            | CMD_PMSDPARTSEL.mask()
            | CMD_PMSDWR.mask();
        let data = DATA_PMSDBPCOUNT.prep(512) | flag(DATA_PMSDTYPE, direct);
        Ok(SdEntry { cmd: cmd as u32, data })
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
