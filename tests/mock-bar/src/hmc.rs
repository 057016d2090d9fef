//! HMC / FPM: object sizes the device reports, the layout it commits, the SD
//! table the driver programs, and FPM-address translation through it.
//!
//! spec control-path §3 (ctrl.c: irdma_sc_parse_fpm_query_buf,
//! irdma_sc_parse_fpm_commit_buf; hmc.c: irdma_add_sd_table_entry).

use std::collections::BTreeMap;

use crate::bits::{get, put};
use crate::mem::{Fault, Memory, read_u64};

/// Number of HMC object types on GEN_2 (spec control-path §3.2).
pub const OBJ_TYPES: usize = 21;
/// Object type indexes used by the model.
pub const QP: usize = 0;
/// CQ object.
pub const CQ: usize = 1;
/// ARP cache object.
pub const ARP: usize = 4;
/// APBVT object (not queried; size 8192, count 1).
pub const APBVT: usize = 5;
/// MR / STag object.
pub const MR: usize = 6;
/// PBLE object (8 bytes each).
pub const PBLE: usize = 14;
/// Address handles (FSIAV, object 13; spec control-path §3.5 table).
pub const FSIAV: usize = 13;
/// SD size (hmc.h: IRDMA_HMC_DIRECT_BP_SIZE).
pub const SD_SIZE: u64 = 0x20_0000;

/// Query-buffer word offset per object type; `None` = not queried (APBVT).
/// spec control-path §3.2/§3.3.
pub const QUERY_OFF: [Option<usize>; OBJ_TYPES] = [
    Some(8),
    Some(16),
    Some(24),
    Some(32),
    Some(40),
    None,
    Some(48),
    Some(56),
    Some(64),
    Some(72),
    Some(80),
    Some(88),
    Some(96),
    Some(104),
    Some(112),
    Some(128),
    Some(136),
    Some(144),
    Some(152),
    Some(160),
    Some(168),
];
/// Commit-buffer word offset per object type (spec control-path §3.2).
pub const COMMIT_OFF: [usize; OBJ_TYPES] =
    [0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 128, 136, 144, 152, 160, 168];

/// Free-list objects whose query word carries a *block size* of the parent
/// object in [63:32] and whose own object size Linux fixes at 4 bytes:
/// (free-list type, parent type). spec control-path §3.3.
const FREE_LISTS: [(usize, usize); 4] = [(8, 7), (10, 9), (16, 15), (20, 19)];

/// What QUERY_FPM_VAL reports. Defaults are plausible, not measured.
#[derive(Clone, Debug)]
pub struct FpmConfig {
    /// Max count per object type.
    pub max_cnt: [u32; OBJ_TYPES],
    /// log2(object size in bytes) for generic objects.
    pub log2_size: [u8; OBJ_TYPES],
    /// Block sizes reported in the free-list words, for XF, Q1, RRF, OOISC
    /// (in that order; Q1's must be non-zero or Linux fails).
    pub block_size: [u32; 4],
    /// FIRST_PE_SD_INDEX.
    pub first_pe_sd: u32,
    /// MAX_PE_SDS.
    pub max_pe_sds: u32,
    /// MAX_CEQS.
    pub max_ceqs: u32,
    /// HT multiplier.
    pub ht_multiplier: u32,
    /// Timer bucket.
    pub timer_bucket: u32,
}

impl Default for FpmConfig {
    fn default() -> Self {
        let mut max_cnt = [0u32; OBJ_TYPES];
        let mut log2_size = [6u8; OBJ_TYPES];
        let table: [(usize, u32, u8); OBJ_TYPES] = [
            (0, 16384, 9),    // QP
            (1, 32768, 6),    // CQ
            (2, 0, 6),        // SRQ
            (3, 1 << 20, 5),  // HTE
            (4, 2048, 6),     // ARP
            (5, 1, 13),       // APBVT (not reported)
            (6, 1 << 18, 6),  // MR
            (7, 1 << 20, 6),  // XF
            (8, 1 << 20, 2),  // XFFL
            (9, 1 << 20, 6),  // Q1
            (10, 1 << 20, 2), // Q1FL
            (11, 1 << 16, 3), // TIMER
            (12, 1024, 6),    // FSIMC
            (13, 1024, 6),    // FSIAV
            (14, 1 << 22, 3), // PBLE
            (15, 1 << 20, 6), // RRF
            (16, 1 << 20, 2), // RRFFL
            (17, 16384, 6),   // HDR
            (18, 4096, 6),    // MD
            (19, 2048, 6),    // OOISC (Linux commits the max for RoCE)
            (20, 64, 2),      // OOISCFFL (likewise)
        ];
        for (t, c, s) in table {
            max_cnt[t] = c;
            log2_size[t] = s;
        }
        Self {
            max_cnt,
            log2_size,
            block_size: [64; 4],
            first_pe_sd: 0,
            max_pe_sds: 512,
            max_ceqs: 64,
            ht_multiplier: 4,
            timer_bucket: 128,
        }
    }
}

impl FpmConfig {
    /// Object size in bytes as both sides compute it (Linux fixes PBLE at 8,
    /// free lists at 4, APBVT at 8192 — ctrl.c: irdma_sc_parse_fpm_query_buf).
    pub fn obj_size(&self, t: usize) -> u64 {
        if t == PBLE {
            8
        } else if t == APBVT {
            8192
        } else if FREE_LISTS.iter().any(|&(fl, _)| fl == t) {
            4
        } else {
            1u64 << self.log2_size.get(t).copied().unwrap_or(6).min(40)
        }
    }

    /// The 192-byte QUERY_FPM_VAL buffer (spec control-path §3.3).
    pub fn query_buf(&self) -> [u8; 192] {
        let mut b = [0u8; 192];
        let mut set = |off: usize, v: u64| crate::bits::set_le64(&mut b, off, v);
        set(0, put(self.first_pe_sd as u64, 13, 0) | put(self.max_pe_sds as u64, 44, 32));
        for t in 0..OBJ_TYPES {
            let Some(off) = QUERY_OFF[t] else { continue };
            let hi = if let Some(k) = FREE_LISTS.iter().position(|&(fl, _)| fl == t) {
                self.block_size[k] as u64
            } else if t == PBLE {
                0
            } else {
                self.log2_size[t] as u64
            };
            set(off, self.max_cnt[t] as u64 | (hi << 32));
        }
        set(
            120,
            put(self.max_ceqs as u64, 9, 0)
                | put(self.ht_multiplier as u64, 19, 16)
                | put(self.timer_bucket as u64, 47, 32),
        );
        b
    }
}

/// The committed FPM layout.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// Object base in FPM space (bytes, multiple of 512).
    pub base: [u64; OBJ_TYPES],
    /// Committed count.
    pub cnt: [u64; OBJ_TYPES],
    /// Object size in bytes.
    pub size: [u64; OBJ_TYPES],
}

impl Layout {
    /// FPM byte address of element `i` of object `t`, if `i` < count.
    pub fn addr(&self, t: usize, i: u64) -> Option<u64> {
        if i >= *self.cnt.get(t)? {
            return None;
        }
        self.base[t].checked_add(i.checked_mul(self.size[t])?)
    }

    /// One past the last FPM byte used by any object.
    pub fn end(&self) -> u64 {
        (0..OBJ_TYPES).map(|t| self.base[t] + self.cnt[t] * self.size[t]).max().unwrap_or(0)
    }
}

/// Why a commit was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitError {
    /// A count exceeds the queried maximum.
    CountTooLarge(usize),
    /// The layout needs more SDs than MAX_PE_SDS.
    TooManySds,
}

/// Computes the layout for committed `cnt` (objects in type order, each base
/// rounded up to 512 bytes — the granularity of the base field, §3.4).
pub fn commit(cfg: &FpmConfig, cnt: [u64; OBJ_TYPES]) -> Result<Layout, CommitError> {
    let mut l = Layout::default();
    let mut next = cfg.first_pe_sd as u64 * SD_SIZE;
    for t in 0..OBJ_TYPES {
        let max = if t == APBVT { 1 } else { cfg.max_cnt[t] as u64 };
        if cnt[t] > max {
            return Err(CommitError::CountTooLarge(t));
        }
        let size = cfg.obj_size(t);
        l.size[t] = size;
        l.cnt[t] = cnt[t];
        l.base[t] = next;
        if cnt[t] > 0 {
            let end = cnt[t]
                .checked_mul(size)
                .and_then(|b| b.checked_add(next))
                .ok_or(CommitError::TooManySds)?;
            next = end.div_ceil(512) * 512;
        }
    }
    let sds = next.div_ceil(SD_SIZE);
    if sds > cfg.first_pe_sd as u64 + cfg.max_pe_sds as u64 {
        return Err(CommitError::TooManySds);
    }
    Ok(l)
}

/// Encodes the commit buffer the device returns (spec control-path §3.4):
/// [63:32] base / 512, low bits the committed count (QP [20:0], CQ [19:0]).
pub fn commit_buf(l: &Layout) -> [u64; OBJ_TYPES] {
    let mut w = [0u64; OBJ_TYPES];
    for t in 0..OBJ_TYPES {
        let cnt = match t {
            QP => get(l.cnt[t], 20, 0),
            CQ => get(l.cnt[t], 19, 0),
            _ => get(l.cnt[t], 31, 0),
        };
        w[t] = ((l.base[t] / 512) << 32) | cnt;
    }
    w
}

/// One programmed segment descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sd {
    /// 2 MiB contiguous host buffer at this PA.
    Direct(u64),
    /// 4 KiB page of 512 PD entries at this PA.
    Paged(u64),
}

/// Why an FPM address did not translate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HmcFault {
    /// The SD is not programmed.
    NoSd(u64),
    /// The PD entry is not valid.
    NoPd(u64),
    /// Reading the PD entry faulted.
    Dma(Fault),
}

/// The SD table.
#[derive(Clone, Debug, Default)]
pub struct SdTable {
    /// Programmed SDs by index.
    pub sds: BTreeMap<u64, Sd>,
    /// Cache the PD entries of paged SDs (strict mode): the device loads
    /// all 512 when the SD is programmed and one again on each PFHMC_PDINV
    /// naming it (spec control-path §3.6: Linux writes PDINV after every PD
    /// entry it writes or clears); memory changes in between are not seen.
    /// Off: PD entries are read from memory on every translation.
    pub cache_pds: bool,
    /// Cached PD entries by SD index.
    pub pd_cache: BTreeMap<u64, Vec<u64>>,
}

/// PD entries per paged SD (hmc.h: IRDMA_HMC_PD_CNT_IN_SD).
pub const PDS_PER_SD: u64 = 512;

impl SdTable {
    /// Translates an FPM address to a bus address (spec control-path §3.1,
    /// §3.6: direct SD = base + offset; paged = PD entry (valid bit 0) + offset).
    pub fn translate(&self, mem: &dyn Memory, fpm: u64) -> Result<u64, HmcFault> {
        let sd = fpm / SD_SIZE;
        let off = fpm % SD_SIZE;
        match self.sds.get(&sd) {
            None => Err(HmcFault::NoSd(fpm)),
            Some(Sd::Direct(pa)) => Ok(pa.wrapping_add(off)),
            Some(Sd::Paged(pd_page)) => {
                let pde = if self.cache_pds {
                    self.pd_cache
                        .get(&sd)
                        .and_then(|v| v.get((off >> 12) as usize))
                        .copied()
                        .unwrap_or(0)
                } else {
                    read_u64(mem, pd_page.wrapping_add((off >> 12) * 8)).map_err(HmcFault::Dma)?
                };
                if pde & 1 == 0 {
                    return Err(HmcFault::NoPd(fpm));
                }
                Ok((pde & !0xFFF).wrapping_add(off & 0xFFF))
            }
        }
    }

    /// Programs SD `sd` (or clears it with `None`), loading a paged SD's PD
    /// entries into the cache. A PD entry that cannot be read is cached as
    /// not valid.
    pub fn program(&mut self, mem: &dyn Memory, sd: u64, e: Option<Sd>) {
        self.pd_cache.remove(&sd);
        match e {
            Some(e) => {
                if let (true, Sd::Paged(page)) = (self.cache_pds, e) {
                    let v = (0..PDS_PER_SD)
                        .map(|i| read_u64(mem, page.wrapping_add(i * 8)).unwrap_or(0))
                        .collect();
                    self.pd_cache.insert(sd, v);
                }
                self.sds.insert(sd, e);
            }
            None => {
                self.sds.remove(&sd);
            }
        }
    }

    /// PFHMC_PDINV: reloads PD entry `pd` of SD `sd` from memory. Returns
    /// false if `sd` is not a programmed paged SD (nothing to invalidate).
    pub fn invalidate_pd(&mut self, mem: &dyn Memory, sd: u64, pd: u64) -> bool {
        let Some(Sd::Paged(page)) = self.sds.get(&sd).copied() else { return false };
        if let Some(slot) = self.pd_cache.get_mut(&sd).and_then(|v| v.get_mut(pd as usize)) {
            *slot = read_u64(mem, page.wrapping_add(pd * 8)).unwrap_or(0);
        }
        true
    }

    /// Whether `[fpm, fpm + len)` is backed (SD valid; for paged SDs every PD).
    pub fn backed(&self, mem: &dyn Memory, fpm: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        let mut a = fpm & !0xFFF;
        let end = fpm.saturating_add(len);
        while a < end {
            if self.translate(mem, a).is_err() {
                return false;
            }
            match a.checked_add(0x1000) {
                Some(n) => a = n,
                None => break,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_lays_out_in_type_order_and_refuses_too_much() {
        let cfg = FpmConfig::default();
        let mut cnt = [0u64; OBJ_TYPES];
        cnt[QP] = 3;
        cnt[CQ] = 5;
        cnt[PBLE] = 1000;
        let l = commit(&cfg, cnt).unwrap();
        assert_eq!(l.base[QP], 0);
        assert_eq!(l.base[CQ], 3 * 512);
        assert_eq!(l.base[PBLE], 3 * 512 + 512);
        assert_eq!(l.addr(CQ, 4), Some(3 * 512 + 4 * 64));
        assert_eq!(l.addr(CQ, 5), None);
        let w = commit_buf(&l);
        assert_eq!(w[CQ], (3u64 << 32) | 5);
        cnt[QP] = cfg.max_cnt[QP] as u64 + 1;
        assert_eq!(commit(&cfg, cnt).unwrap_err(), CommitError::CountTooLarge(QP));
    }

    #[test]
    fn query_buffer_fields() {
        let cfg = FpmConfig::default();
        let b = cfg.query_buf();
        let w = |o| crate::bits::le64(&b, o);
        assert_eq!(get(w(0), 44, 32), cfg.max_pe_sds as u64);
        assert_eq!(get(w(8), 31, 0), 16384);
        assert_eq!(get(w(8), 63, 32), 9);
        assert_eq!(get(w(80), 63, 32), 64, "Q1 block size must be non-zero");
        assert_eq!(get(w(120), 9, 0), cfg.max_ceqs as u64);
    }

    #[test]
    fn paged_sd_translation_reads_pd_entries() {
        let m = crate::mem::TestMemory::new();
        m.map(0x10_0000, 0x1000); // PD page
        m.set64(0x10_0000 + 8, 0x55_5000 | 1);
        let mut t = SdTable::default();
        t.sds.insert(1, Sd::Paged(0x10_0000));
        t.sds.insert(0, Sd::Direct(0x4000_0000));
        assert_eq!(t.translate(&m, 0x1234), Ok(0x4000_1234));
        assert_eq!(t.translate(&m, SD_SIZE + 0x1010), Ok(0x55_5010));
        assert_eq!(t.translate(&m, SD_SIZE + 0x2010), Err(HmcFault::NoPd(SD_SIZE + 0x2010)));
        assert_eq!(t.translate(&m, 2 * SD_SIZE), Err(HmcFault::NoSd(2 * SD_SIZE)));
        assert!(!t.backed(&m, SD_SIZE, 0x2000));
        assert!(t.backed(&m, SD_SIZE + 0x1000, 0x1000));
    }
}
