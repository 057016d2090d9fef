//! The PBLE pool: physical-buffer-list entries in the HMC PBLE object.
//!
//! The PBLE object (HMC type 14, 8 bytes per entry) is one range of the
//! function's FPM space; an MR or queue whose memory is not physically
//! contiguous gets a run of its entries, which the driver fills with page
//! addresses (spec control-path §6). This module does the bookkeeping only:
//!
//! * [`PbleLayout`] — where the usable entries are in FPM space, and which
//!   2 MiB SD / 4 KiB PD page each entry lives in, so the driver can back a
//!   chunk on demand and program UPDATE_PE_SDS (spec §3.6, §6.1);
//! * [`PblePool`] — a first-fit allocator over a fixed-capacity list of free
//!   runs, coalescing on free, giving level-1 and level-2 PBLs (spec §6.2).
//!
//! Rules kept from Linux, so every allocation is one Linux could also make:
//!
//! * the first usable entry is the first one on a 4 KiB FPM boundary, and
//!   only whole 4 KiB pages of entries (512) are used (pble.c:
//!   irdma_hmc_init_pble, add_pble_prm);
//! * runs are handed out in 64-byte units of 8 entries (pble.h: PBLE_SHIFT;
//!   utils.c: irdma_prm_get_pbles);
//! * a run never crosses a 2 MiB SD boundary: Linux takes runs from one
//!   "chunk", and a chunk is never larger than the rest of one SD (pble.c:
//!   add_pble_prm);
//! * level 1 is tried first; level 2 only when level 1 cannot be placed and
//!   the list has more than 512 entries; queue memory is level 1 only
//!   (pble.c: get_lvl1_lvl2_pble, irdma_get_pble; verbs.c: irdma_handle_q_mem);
//! * a level-2 PBL is a root run of ceil(N/512) entries, each holding the
//!   PBLE **index** of a leaf run of 512 entries (the last one may be
//!   shorter) (pble.c: get_lvl2_pble).
//!
//! Level 0 (physically contiguous memory, no PBL at all) needs nothing from
//! the pool; [`pbl_level`] states the whole rule.

/// Bytes per PBLE (spec control-path §6.1; ctrl.c: irdma_sc_parse_fpm_query_buf).
pub const PBLE_SIZE: u64 = 8;
/// PBLEs per 4 KiB page (pble.h: PBLE_PER_PAGE).
pub const PBLES_PER_PAGE: u32 = 512;
/// Bytes of an SD: 2 MiB (hmc.h: IRDMA_HMC_DIRECT_BP_SIZE).
pub const SD_SIZE: u64 = 0x20_0000;
/// Bytes of a PD page: 4 KiB (hmc.h: IRDMA_HMC_PAGED_BP_SIZE).
pub const PD_PAGE_SIZE: u64 = 0x1000;
/// PD entries in one SD (hmc.h: IRDMA_HMC_PD_CNT_IN_SD).
pub const PDS_PER_SD: u32 = 512;
/// PBLEs per SD.
pub const PBLES_PER_SD: u32 = (SD_SIZE / PBLE_SIZE) as u32;
/// Allocation unit: 8 PBLEs = 64 bytes (pble.h: PBLE_SHIFT = 6).
pub const PBLE_GRANULE: u32 = 8;
/// Entries per level-2 leaf (pble.c: get_lvl2_pble).
pub const LEAF_ENTRIES: u32 = PBLES_PER_PAGE;

/// Why a PBLE operation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PbleError {
    /// A PBL of zero entries.
    ZeroEntries,
    /// More entries than any PBL of the allowed levels can hold (a level-1
    /// run is limited to one SD, a level-2 root too).
    TooLarge,
    /// No free run can hold the request: the pool is exhausted or too
    /// fragmented.
    NoSpace,
    /// The fixed-capacity run table is full (too many live runs).
    TooManyRuns,
    /// The caller's leaf buffer is shorter than the level-2 PBL needs.
    LeafBufferTooSmall,
    /// Free of a run that is not allocated (double free), misaligned, or
    /// outside the pool.
    NotAllocated,
    /// The PBLE object's base/count from the commit do not describe a usable
    /// FPM range (address overflow).
    BadLayout,
}

/// How an SD that holds PBLEs is backed (spec control-path §3.6, table "SD
/// type for PBLE chunks").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SdKind {
    /// One 2 MiB physically contiguous buffer (PMSDTYPE = 1).
    Direct,
    /// A 4 KiB PD page whose entries point at 4 KiB data pages (PMSDTYPE = 0).
    Paged,
}

/// The part of one SD the PBLE pool uses: the unit Linux backs at once
/// (a "chunk", pble.c: add_pble_prm).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PbleChunk {
    /// SD index (FPM address / 2 MiB), the index UPDATE_PE_SDS programs.
    pub sd_index: u32,
    /// Absolute PD index (FPM address / 4 KiB) of the chunk's first page.
    pub first_pd: u32,
    /// Number of 4 KiB pages (1..=512).
    pub pages: u32,
    /// First PBLE index in the chunk.
    pub first_index: u32,
    /// Number of PBLEs in the chunk (pages × 512).
    pub count: u32,
    /// How Linux backs the SD when it is not valid yet: direct when the chunk
    /// is the whole SD, paged otherwise (pble.c: irdma_get_type). When the SD
    /// is already valid (for example shared with a non-PBLE object, which is
    /// always direct), the existing backing is used as it is (pble.c:
    /// add_pble_prm).
    pub kind: SdKind,
}

impl PbleChunk {
    /// Slot of the chunk's first page within its SD (0..512): the first
    /// PD-entry slot of a paged SD, as PFHMC_PDINV's PMPDIDX takes it
    /// (hmc.c: irdma_invalidate_pf_hmc_pd).
    pub const fn rel_pd(&self) -> u32 {
        self.first_pd % PDS_PER_SD
    }
}

/// Where one PBLE lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PbleLocation {
    /// FPM byte address.
    pub fpm_addr: u64,
    /// SD index.
    pub sd_index: u32,
    /// Absolute PD index (FPM address / 4 KiB).
    pub pd_index: u32,
    /// Byte offset inside the SD's 2 MiB (direct SD: offset into its buffer).
    pub sd_offset: u32,
    /// Byte offset inside the 4 KiB page (paged SD: offset into the page of
    /// PD slot `pd_index % 512`).
    pub page_offset: u32,
}

/// Usable PBLE index range of a committed PBLE object.
///
/// PBLE indexes are relative to the object's base, as the hardware takes
/// them (FIRSTPMPBLIDX, level-2 root entries; pble.c: fpm_to_idx).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PbleLayout {
    base: u64,
    first: u32,
    count: u32,
}

const fn round_up_u32(v: u32, to: u32) -> Option<u32> {
    match v.checked_add(to - 1) {
        Some(x) => Some(x / to * to),
        None => None,
    }
}

impl PbleLayout {
    /// The layout of a PBLE object committed at FPM byte address `base` with
    /// `committed` entries: entries before the first 4 KiB boundary are
    /// skipped and only whole pages of 512 entries are used (pble.c:
    /// irdma_hmc_init_pble, add_pble_prm).
    pub const fn new(base: u64, committed: u32) -> Result<Self, PbleError> {
        let misalign = base % PD_PAGE_SIZE;
        let skip = if misalign == 0 { 0 } else { ((PD_PAGE_SIZE - misalign) / PBLE_SIZE) as u32 };
        let usable =
            if committed > skip { (committed - skip) / PBLES_PER_PAGE * PBLES_PER_PAGE } else { 0 };
        // The whole range, plus one SD of margin for boundary arithmetic,
        // must be addressable.
        let end = skip as u64 + usable as u64;
        match base.checked_add(end * PBLE_SIZE + 2 * SD_SIZE) {
            Some(_) => {}
            None => return Err(PbleError::BadLayout),
        }
        if !base.is_multiple_of(8) {
            return Err(PbleError::BadLayout);
        }
        Ok(PbleLayout { base, first: skip, count: usable })
    }

    /// FPM byte address of PBLE 0 (the object's base).
    pub const fn base(&self) -> u64 {
        self.base
    }

    /// First usable PBLE index.
    pub const fn first_index(&self) -> u32 {
        self.first
    }

    /// Number of usable PBLEs (a multiple of 512).
    pub const fn count(&self) -> u32 {
        self.count
    }

    /// One past the last usable PBLE index.
    pub const fn end_index(&self) -> u32 {
        // Cannot overflow: checked in `new` through the u64 address.
        self.first + self.count
    }

    /// Whether `index` is a usable PBLE index.
    pub const fn contains(&self, index: u32) -> bool {
        index >= self.first && index < self.end_index()
    }

    /// FPM byte address of PBLE `index`.
    pub const fn fpm_addr(&self, index: u32) -> Option<u64> {
        if !self.contains(index) {
            return None;
        }
        Some(self.base + index as u64 * PBLE_SIZE)
    }

    /// Where PBLE `index` lives (hmc.c: irdma_find_sd_index_limit,
    /// irdma_find_pd_index_limit).
    pub const fn locate(&self, index: u32) -> Option<PbleLocation> {
        let fpm = match self.fpm_addr(index) {
            Some(a) => a,
            None => return None,
        };
        let sd = fpm / SD_SIZE;
        let pd = fpm / PD_PAGE_SIZE;
        if sd > u32::MAX as u64 || pd > u32::MAX as u64 {
            return None;
        }
        Some(PbleLocation {
            fpm_addr: fpm,
            sd_index: sd as u32,
            pd_index: pd as u32,
            sd_offset: (fpm % SD_SIZE) as u32,
            page_offset: (fpm % PD_PAGE_SIZE) as u32,
        })
    }

    /// The first index at or after `index` that starts a new SD (or
    /// `end_index` if none before it).
    fn next_sd_boundary(&self, index: u32) -> u32 {
        let fpm = self.base.saturating_add(index as u64 * PBLE_SIZE);
        let next = (fpm / SD_SIZE).saturating_add(1).saturating_mul(SD_SIZE);
        let idx = next.saturating_sub(self.base) / PBLE_SIZE;
        if idx >= self.end_index() as u64 { self.end_index() } else { idx as u32 }
    }

    fn same_sd(&self, a: u32, b: u32) -> bool {
        let fa = self.base.saturating_add(a as u64 * PBLE_SIZE);
        let fb = self.base.saturating_add(b as u64 * PBLE_SIZE);
        fa / SD_SIZE == fb / SD_SIZE
    }

    /// The chunk (SD ∩ usable range) that holds PBLE `index`.
    pub fn chunk_of(&self, index: u32) -> Option<PbleChunk> {
        let loc = self.locate(index)?;
        let sd_start = loc.sd_index as u64 * SD_SIZE;
        let first_fpm = self.base + self.first as u64 * PBLE_SIZE;
        let end_fpm = self.base + self.end_index() as u64 * PBLE_SIZE;
        let lo = if sd_start > first_fpm { sd_start } else { first_fpm };
        let sd_end = sd_start + SD_SIZE;
        let hi = if sd_end < end_fpm { sd_end } else { end_fpm };
        // lo and hi are 4 KiB aligned: the usable range is whole pages from a
        // 4 KiB boundary.
        let pages = ((hi - lo) / PD_PAGE_SIZE) as u32;
        let first_index = ((lo - self.base) / PBLE_SIZE) as u32;
        let first_pd = (lo / PD_PAGE_SIZE) as u32;
        let kind = if first_pd.is_multiple_of(PDS_PER_SD) && pages == PDS_PER_SD {
            SdKind::Direct
        } else {
            SdKind::Paged
        };
        Some(PbleChunk {
            sd_index: loc.sd_index,
            first_pd,
            pages,
            first_index,
            count: pages * PBLES_PER_PAGE,
            kind,
        })
    }

    /// Every chunk of the pool, in FPM order (what backing the whole pool
    /// would take).
    pub fn chunks(&self) -> Chunks<'_> {
        Chunks { layout: self, next: self.first }
    }
}

/// Iterator over the chunks of a [`PbleLayout`].
#[derive(Clone, Debug)]
pub struct Chunks<'a> {
    layout: &'a PbleLayout,
    next: u32,
}

impl Iterator for Chunks<'_> {
    type Item = PbleChunk;
    fn next(&mut self) -> Option<PbleChunk> {
        let c = self.layout.chunk_of(self.next)?;
        self.next = c.first_index.saturating_add(c.count);
        Some(c)
    }
}

/// A run of consecutive PBLE indexes `first..first + count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PbleRun {
    /// First PBLE index.
    pub first: u32,
    /// Number of entries requested (the pool reserves it rounded up to 8).
    pub count: u32,
}

impl PbleRun {
    /// Entries the pool reserves for this run (count rounded up to 8).
    pub const fn reserved(&self) -> u32 {
        match round_up_u32(self.count, PBLE_GRANULE) {
            Some(v) => v,
            None => u32::MAX,
        }
    }
}

/// Which PBL levels an allocation may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PblePolicy {
    /// Level 1 only: queue memory (verbs.c: irdma_handle_q_mem).
    Level1Only,
    /// Level 1, falling back to level 2 for more than 512 entries: memory
    /// regions (pble.c: get_lvl1_lvl2_pble).
    Level1OrLevel2,
}

/// A PBL handed out by the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PbleAlloc {
    /// Level 1: the run holds the page addresses.
    Level1(PbleRun),
    /// Level 2: `root` holds, per leaf, the PBLE index of the leaf's first
    /// entry; the leaf runs are in the caller's buffer, `leaves` of them.
    Level2 {
        /// The root run (ceil(N / 512) entries).
        root: PbleRun,
        /// Number of leaf runs written to the caller's buffer.
        leaves: u32,
        /// Total page entries N.
        entries: u32,
    },
}

impl PbleAlloc {
    /// The PBL level, 1 or 2.
    pub const fn level(&self) -> u8 {
        match self {
            PbleAlloc::Level1(_) => 1,
            PbleAlloc::Level2 { .. } => 2,
        }
    }

    /// The LPBLSIZE value a WQE carries: 1 for level 1, 3 for level 2
    /// (spec control-path §6.2; verbs.c: irdma_hwreg_mr).
    pub const fn lpbl_size(&self) -> u8 {
        match self {
            PbleAlloc::Level1(_) => 1,
            PbleAlloc::Level2 { .. } => 3,
        }
    }

    /// The index a WQE carries as FIRSTPMPBLIDX: the level-1 run or the root.
    pub const fn first_index(&self) -> u32 {
        match self {
            PbleAlloc::Level1(r) => r.first,
            PbleAlloc::Level2 { root, .. } => root.first,
        }
    }

    /// Number of page entries the PBL holds.
    pub const fn entries(&self) -> u32 {
        match self {
            PbleAlloc::Level1(r) => r.count,
            PbleAlloc::Level2 { entries, .. } => *entries,
        }
    }

    /// The PBLE index that holds page `page` of the region (`leaves` is the
    /// caller's leaf buffer, ignored for level 1).
    pub fn entry_index(&self, leaves: &[PbleRun], page: u32) -> Option<u32> {
        if page >= self.entries() {
            return None;
        }
        match self {
            PbleAlloc::Level1(r) => r.first.checked_add(page),
            PbleAlloc::Level2 { leaves: n, .. } => {
                let leaf = leaves.get((page / LEAF_ENTRIES) as usize)?;
                if page / LEAF_ENTRIES >= *n {
                    return None;
                }
                leaf.first.checked_add(page % LEAF_ENTRIES)
            }
        }
    }
}

impl PbleAlloc {
    /// The chunks the PBL's runs live in (root first, then each leaf), so the
    /// driver can back those whose SD is not valid yet before writing the
    /// entries (pble.c: irdma_get_pble adds chunks on demand). A chunk shared
    /// by consecutive runs is yielded once; the driver's SD set
    /// ([`super::bitmap::SdSet`]) filters the rest.
    pub fn chunks<'a>(&self, layout: &'a PbleLayout, leaves: &'a [PbleRun]) -> AllocChunks<'a> {
        let (head, tail): (PbleRun, &'a [PbleRun]) = match *self {
            PbleAlloc::Level1(r) => (r, &[]),
            PbleAlloc::Level2 { root, leaves: n, .. } => {
                (root, leaves.get(..n as usize).unwrap_or(&[]))
            }
        };
        AllocChunks { layout, head: Some(head), tail, last: None }
    }
}

/// Iterator of [`PbleAlloc::chunks`].
#[derive(Clone, Debug)]
pub struct AllocChunks<'a> {
    layout: &'a PbleLayout,
    head: Option<PbleRun>,
    tail: &'a [PbleRun],
    last: Option<u32>,
}

impl Iterator for AllocChunks<'_> {
    type Item = PbleChunk;
    fn next(&mut self) -> Option<PbleChunk> {
        loop {
            let run = match self.head.take() {
                Some(r) => r,
                None => {
                    let (first, rest) = self.tail.split_first()?;
                    self.tail = rest;
                    *first
                }
            };
            // A run never crosses an SD, so its first entry names its chunk.
            let c = self.layout.chunk_of(run.first)?;
            if self.last != Some(c.sd_index) {
                self.last = Some(c.sd_index);
                return Some(c);
            }
        }
    }
}

/// The PBL level for a buffer of `pages` pages: 0 when it is physically
/// contiguous (the address goes straight into the WQE or context, no PBLEs),
/// otherwise 1 or 2 as the pool decides (spec control-path §6.2;
/// verbs.c: irdma_check_mr_contiguous, irdma_handle_q_mem).
pub const fn pbl_level(pages: u32, physically_contiguous: bool) -> PblNeed {
    if pages <= 1 || physically_contiguous { PblNeed::Level0 } else { PblNeed::Pbl(pages) }
}

/// What a buffer needs from the pool (see [`pbl_level`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PblNeed {
    /// No PBL: level 0.
    Level0,
    /// A PBL of this many entries.
    Pbl(u32),
}

/// First-fit PBLE allocator with at most `RUNS` tracked runs.
///
/// The free space is a sorted array of maximal (coalesced) free runs. Because
/// free runs are separated by allocated ones, there are never more than
/// (live runs + 1) of them, so the pool caps live runs at `RUNS − 1` and a
/// free can never overflow the table. A level-2 PBL uses 1 + ceil(N/512) runs.
///
/// Live runs are tracked too (same capacity), so freeing anything but exactly
/// a run the pool handed out and has not taken back — a double free, a
/// sub-range, a run of another pool — is refused with
/// [`PbleError::NotAllocated`].
#[derive(Clone, Debug)]
pub struct PblePool<const RUNS: usize> {
    layout: PbleLayout,
    free: [PbleRun; RUNS],
    nfree: usize,
    used: [PbleRun; RUNS],
    live: usize,
    free_entries: u32,
}

impl<const RUNS: usize> PblePool<RUNS> {
    /// An empty pool over `layout`. `RUNS` must be at least 2.
    pub fn new(layout: PbleLayout) -> Result<Self, PbleError> {
        if RUNS < 2 {
            return Err(PbleError::TooManyRuns);
        }
        let mut free = [PbleRun::default(); RUNS];
        let mut nfree = 0;
        if layout.count > 0
            && let Some(slot) = free.get_mut(0)
        {
            *slot = PbleRun { first: layout.first, count: layout.count };
            nfree = 1;
        }
        Ok(PblePool {
            layout,
            free,
            nfree,
            used: [PbleRun::default(); RUNS],
            live: 0,
            free_entries: layout.count,
        })
    }

    /// The pool's layout.
    pub const fn layout(&self) -> &PbleLayout {
        &self.layout
    }

    /// Free entries (in whole 8-entry units).
    pub const fn free_entries(&self) -> u32 {
        self.free_entries
    }

    /// Number of live (allocated) runs.
    pub const fn live_runs(&self) -> usize {
        self.live
    }

    /// Whether `count` entries from `first` lie inside one run the pool
    /// handed out and has not taken back (a check before writing PBLEs on
    /// a caller's behalf: never into free entries or across runs).
    pub fn is_live(&self, first: u32, count: u32) -> bool {
        let Some(end) = first.checked_add(count) else { return false };
        self.used
            .get(..self.live)
            .unwrap_or(&[])
            .iter()
            .any(|r| r.first <= first && r.first.checked_add(r.count).is_some_and(|e| end <= e))
    }

    /// The free runs, in index order.
    pub fn free_runs(&self) -> &[PbleRun] {
        self.free.get(..self.nfree).unwrap_or(&[])
    }

    /// Where a run of `reserved` entries would go under first fit, without
    /// allocating: (free-run slot, start index).
    fn find(&self, reserved: u32) -> Option<(usize, u32)> {
        if reserved == 0 || reserved > PBLES_PER_SD {
            return None;
        }
        for (slot, run) in self.free_runs().iter().enumerate() {
            let end = run.first.checked_add(run.count)?;
            let mut start = run.first;
            // Never cross an SD boundary (pble.c: add_pble_prm chunks).
            let last = start.checked_add(reserved - 1)?;
            if !self.layout.same_sd(start, last) {
                start = self.layout.next_sd_boundary(start);
            }
            if let Some(stop) = start.checked_add(reserved)
                && stop <= end
            {
                return Some((slot, start));
            }
        }
        None
    }

    /// Whether a level-1 run of `entries` entries could be placed now.
    pub fn can_fit_level1(&self, entries: u32) -> bool {
        match round_up_u32(entries, PBLE_GRANULE) {
            Some(r) => self.find(r).is_some(),
            None => false,
        }
    }

    /// The longest level-1 run that could be placed now.
    pub fn largest_level1(&self) -> u32 {
        let mut best = 0u32;
        for run in self.free_runs() {
            let mut at = run.first;
            let end = run.first.saturating_add(run.count);
            while at < end {
                let b = self.layout.next_sd_boundary(at);
                let stop = if b < end { b } else { end };
                best = best.max(stop - at);
                at = stop;
            }
        }
        best
    }

    fn carve(&mut self, slot: usize, start: u32, reserved: u32) -> Result<(), PbleError> {
        let run = *self.free.get(slot).ok_or(PbleError::NotAllocated)?;
        let before = PbleRun { first: run.first, count: start - run.first };
        let after_first = start + reserved;
        let after = PbleRun { first: after_first, count: run.first + run.count - after_first };
        match (before.count > 0, after.count > 0) {
            (false, false) => self.remove_free(slot),
            (true, false) => self.set_free(slot, before),
            (false, true) => self.set_free(slot, after),
            (true, true) => {
                self.set_free(slot, before);
                self.insert_free(slot + 1, after)?;
            }
        }
        let slot = self.used.get_mut(self.live).ok_or(PbleError::TooManyRuns)?;
        *slot = PbleRun { first: start, count: reserved };
        self.live += 1;
        self.free_entries -= reserved;
        Ok(())
    }

    fn set_free(&mut self, slot: usize, run: PbleRun) {
        if let Some(s) = self.free.get_mut(slot) {
            *s = run;
        }
    }

    #[inline(never)]
    fn remove_free(&mut self, slot: usize) {
        // The window `slot..nfree` is taken once (no panic path if `nfree`
        // were ever past the table) and shifted down by one.
        if slot < self.nfree
            && let Some(w) = self.free.get_mut(slot..self.nfree)
        {
            w.copy_within(1.., 0);
            self.nfree -= 1;
        }
    }

    #[inline(never)]
    fn insert_free(&mut self, slot: usize, run: PbleRun) -> Result<(), PbleError> {
        if self.nfree >= RUNS || slot > self.nfree {
            return Err(PbleError::TooManyRuns);
        }
        // The window `slot..=nfree` (inside the table: `nfree < RUNS`)
        // shifted up by one.
        let Some(w) = self.free.get_mut(slot..=self.nfree) else {
            return Err(PbleError::TooManyRuns);
        };
        let last = w.len() - 1;
        w.copy_within(..last, 1);
        self.nfree += 1;
        self.set_free(slot, run);
        Ok(())
    }

    /// One run of `entries` entries inside one SD.
    fn alloc_run(&mut self, entries: u32) -> Result<PbleRun, PbleError> {
        if entries == 0 {
            return Err(PbleError::ZeroEntries);
        }
        let reserved = round_up_u32(entries, PBLE_GRANULE).ok_or(PbleError::TooLarge)?;
        if reserved > PBLES_PER_SD {
            return Err(PbleError::TooLarge);
        }
        // Keep `live + 1 ≤ RUNS − 1` so frees can never overflow the table.
        if self.live + 2 > RUNS {
            return Err(PbleError::TooManyRuns);
        }
        let (slot, start) = self.find(reserved).ok_or(PbleError::NoSpace)?;
        self.carve(slot, start, reserved)?;
        Ok(PbleRun { first: start, count: entries })
    }

    /// Allocates a PBL for `entries` page addresses under `policy`, as Linux
    /// does (pble.c: irdma_get_pble): level 1 when one run fits; otherwise,
    /// if the policy allows it and `entries > 512`, level 2 with its leaf runs
    /// written to `leaves[..ceil(entries / 512)]`. On failure nothing stays
    /// allocated.
    pub fn alloc(
        &mut self,
        entries: u32,
        policy: PblePolicy,
        leaves: &mut [PbleRun],
    ) -> Result<PbleAlloc, PbleError> {
        if entries == 0 {
            return Err(PbleError::ZeroEntries);
        }
        let l1 = self.alloc_run(entries);
        match l1 {
            Ok(run) => return Ok(PbleAlloc::Level1(run)),
            Err(PbleError::TooManyRuns) => return Err(PbleError::TooManyRuns),
            Err(e) => {
                if policy == PblePolicy::Level1Only || entries <= PBLES_PER_PAGE {
                    return Err(e);
                }
            }
        }
        self.alloc_level2(entries, leaves)
    }

    fn alloc_level2(
        &mut self,
        entries: u32,
        leaves: &mut [PbleRun],
    ) -> Result<PbleAlloc, PbleError> {
        let nleaves = entries.div_ceil(LEAF_ENTRIES);
        if nleaves > PBLES_PER_SD {
            return Err(PbleError::TooLarge);
        }
        let out = leaves.get_mut(..nleaves as usize).ok_or(PbleError::LeafBufferTooSmall)?;
        // 1 root + nleaves leaves must fit under the live-run cap.
        if self.live + 1 + nleaves as usize + 1 > RUNS {
            return Err(PbleError::TooManyRuns);
        }
        let root = self.alloc_run(nleaves)?;
        let mut done = 0usize;
        let mut failure = None;
        for (i, slot) in out.iter_mut().enumerate() {
            let this = if (i as u32 + 1) == nleaves {
                entries - (nleaves - 1) * LEAF_ENTRIES
            } else {
                LEAF_ENTRIES
            };
            match self.alloc_run(this) {
                Ok(r) => {
                    *slot = r;
                    done += 1;
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failure {
            // Roll back: these runs were just allocated, so freeing cannot fail.
            for r in out.get(..done).unwrap_or(&[]) {
                let _ = self.free_run(*r);
            }
            let _ = self.free_run(root);
            return Err(e);
        }
        Ok(PbleAlloc::Level2 { root, leaves: nleaves, entries })
    }

    /// Checks that `run` is a live run: handed out and not taken back, inside
    /// the pool, aligned, and disjoint from every free run. Returns its
    /// reserved size, its free-list insertion point and its live-table slot.
    fn check_live(&self, run: PbleRun) -> Result<(u32, usize, usize), PbleError> {
        if run.count == 0 {
            return Err(PbleError::NotAllocated);
        }
        let reserved = round_up_u32(run.count, PBLE_GRANULE).ok_or(PbleError::NotAllocated)?;
        let end = run.first.checked_add(reserved).ok_or(PbleError::NotAllocated)?;
        if run.first < self.layout.first
            || end > self.layout.end_index()
            || !(run.first - self.layout.first).is_multiple_of(PBLE_GRANULE)
        {
            return Err(PbleError::NotAllocated);
        }
        // Insertion point: first free run starting after `run.first`.
        let runs = self.free_runs();
        let pos = runs.partition_point(|f| f.first <= run.first);
        if let Some(prev) = pos.checked_sub(1).and_then(|p| runs.get(p))
            && prev.first.saturating_add(prev.count) > run.first
        {
            return Err(PbleError::NotAllocated);
        }
        if let Some(next) = runs.get(pos)
            && next.first < end
        {
            return Err(PbleError::NotAllocated);
        }
        let k = self
            .used
            .get(..self.live)
            .unwrap_or(&[])
            .iter()
            .position(|u| u.first == run.first && u.count == reserved)
            .ok_or(PbleError::NotAllocated)?;
        Ok((reserved, pos, k))
    }

    fn free_run(&mut self, run: PbleRun) -> Result<(), PbleError> {
        let (reserved, pos, k) = self.check_live(run)?;
        let end = run.first + reserved;
        let merge_prev = pos
            .checked_sub(1)
            .and_then(|p| self.free.get(p).filter(|_| p < self.nfree))
            .is_some_and(|prev| prev.first + prev.count == run.first);
        let merge_next = pos < self.nfree && self.free.get(pos).is_some_and(|n| n.first == end);
        match (merge_prev, merge_next) {
            (true, true) => {
                let next_count = self.free.get(pos).map_or(0, |n| n.count);
                if let Some(prev) = self.free.get_mut(pos - 1) {
                    prev.count += reserved + next_count;
                }
                self.remove_free(pos);
            }
            (true, false) => {
                if let Some(prev) = self.free.get_mut(pos - 1) {
                    prev.count += reserved;
                }
            }
            (false, true) => {
                if let Some(next) = self.free.get_mut(pos) {
                    next.first = run.first;
                    next.count += reserved;
                }
            }
            (false, false) => {
                self.insert_free(pos, PbleRun { first: run.first, count: reserved })?
            }
        }
        self.live -= 1;
        // Swap-remove the live-table entry.
        let last = self.used.get(self.live).copied().unwrap_or_default();
        if let Some(u) = self.used.get_mut(k) {
            *u = last;
        }
        self.free_entries += reserved;
        Ok(())
    }

    /// Returns a PBL to the pool (`leaves` as filled by [`alloc`](Self::alloc)
    /// for level 2). Every run is checked before anything is freed: a double
    /// free, a foreign run or overlapping leaves are refused with
    /// [`PbleError::NotAllocated`] and change nothing.
    pub fn free(&mut self, alloc: &PbleAlloc, leaves: &[PbleRun]) -> Result<(), PbleError> {
        match alloc {
            PbleAlloc::Level1(run) => self.free_run(*run),
            PbleAlloc::Level2 { root, leaves: n, .. } => {
                let ls = leaves.get(..*n as usize).ok_or(PbleError::LeafBufferTooSmall)?;
                self.check_live(*root)?;
                for (i, a) in ls.iter().enumerate() {
                    self.check_live(*a)?;
                    if overlaps(*a, *root) {
                        return Err(PbleError::NotAllocated);
                    }
                    for b in ls.get(i + 1..).unwrap_or(&[]) {
                        if overlaps(*a, *b) {
                            return Err(PbleError::NotAllocated);
                        }
                    }
                }
                for l in ls {
                    self.free_run(*l)?;
                }
                self.free_run(*root)
            }
        }
    }
}

fn overlaps(a: PbleRun, b: PbleRun) -> bool {
    let ae = a.first.saturating_add(a.reserved());
    let be = b.first.saturating_add(b.reserved());
    a.first < be && b.first < ae
}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

crate::error::phrases!(PbleError {
    PbleError::ZeroEntries => "a PBL of zero entries",
    PbleError::TooLarge => "more PBL entries than any allowed level holds",
    PbleError::NoSpace => "PBLE pool exhausted or too fragmented",
    PbleError::TooManyRuns => "PBLE run table full",
    PbleError::LeafBufferTooSmall => "level-2 leaf buffer too small",
    PbleError::NotAllocated => "free of a PBLE run that is not allocated",
    PbleError::BadLayout => "PBLE object range from the commit is unusable",
});

#[cfg(test)]
mod tests {
    use super::*;

    const MIB2: u64 = SD_SIZE;

    #[test]
    fn layout_skips_to_4k_and_whole_pages() {
        // Base 512 bytes past a 4 KiB boundary: (4096 - 512) / 8 = 448 skipped.
        let l = PbleLayout::new(3 * MIB2 + 512, 448 + 1024 + 100).unwrap();
        assert_eq!(l.first_index(), 448);
        assert_eq!(l.count(), 1024);
        assert_eq!(l.fpm_addr(448), Some(3 * MIB2 + 4096));
        assert_eq!(l.fpm_addr(447), None);
        assert_eq!(l.fpm_addr(448 + 1024), None);
        let loc = l.locate(448 + 513).unwrap();
        assert_eq!(loc.sd_index, 3);
        assert_eq!(loc.pd_index, (3 * MIB2 / 4096) as u32 + 2);
        assert_eq!(loc.page_offset, 8);
        assert_eq!(loc.sd_offset, 2 * 4096 + 8);
        // Fewer entries than the skip: nothing usable.
        assert_eq!(PbleLayout::new(512, 10).unwrap().count(), 0);
        assert_eq!(PbleLayout::new(u64::MAX - 7, 1024), Err(PbleError::BadLayout));
        assert_eq!(PbleLayout::new(u64::MAX - 2 * SD_SIZE + 1, 1024), Err(PbleError::BadLayout));
        // Near the top of the address space but with the margin: fine.
        let top = PbleLayout::new((u64::MAX / SD_SIZE - 3) * SD_SIZE, 1024).unwrap();
        assert_eq!(top.count(), 1024);
        let mut p = PblePool::<4>::new(top).unwrap();
        assert!(p.alloc(1024, PblePolicy::Level1Only, &mut []).is_ok());
    }

    #[test]
    fn chunks_follow_the_sd_type_rule() {
        // Starts mid-SD (page 500 of SD 1), spans SD 2 fully, ends inside SD 3.
        let base = MIB2 + 500 * 4096;
        let l = PbleLayout::new(base, (12 + 512 + 3) * 512).unwrap();
        let mut it = l.chunks();
        let c0 = it.next().unwrap();
        assert_eq!((c0.sd_index, c0.pages, c0.kind, c0.rel_pd()), (1, 12, SdKind::Paged, 500));
        assert_eq!(c0.first_index, 0);
        let c1 = it.next().unwrap();
        assert_eq!((c1.sd_index, c1.pages, c1.kind, c1.rel_pd()), (2, 512, SdKind::Direct, 0));
        assert_eq!(c1.first_index, 12 * 512);
        let c2 = it.next().unwrap();
        assert_eq!((c2.sd_index, c2.pages, c2.kind), (3, 3, SdKind::Paged));
        assert_eq!(it.next(), None);
        assert_eq!(l.chunk_of(12 * 512 + 5), Some(c1));
    }

    fn pool<const N: usize>(entries: u32) -> PblePool<N> {
        PblePool::new(PbleLayout::new(0, entries).unwrap()).unwrap()
    }

    #[test]
    fn level1_first_fit_and_granule() {
        let mut p = pool::<16>(4096);
        let mut no = [];
        let a = p.alloc(3, PblePolicy::Level1Only, &mut no).unwrap();
        assert_eq!(a, PbleAlloc::Level1(PbleRun { first: 0, count: 3 }));
        let b = p.alloc(10, PblePolicy::Level1Only, &mut no).unwrap();
        // 3 entries reserve 8.
        assert_eq!(b.first_index(), 8);
        assert_eq!(p.free_entries(), 4096 - 8 - 16);
        p.free(&a, &[]).unwrap();
        assert_eq!(p.free(&a, &[]), Err(PbleError::NotAllocated));
        // First fit re-uses the hole.
        let c = p.alloc(8, PblePolicy::Level1Only, &mut no).unwrap();
        assert_eq!(c.first_index(), 0);
        p.free(&b, &[]).unwrap();
        p.free(&c, &[]).unwrap();
        assert_eq!(p.free_runs(), &[PbleRun { first: 0, count: 4096 }]);
        assert_eq!(p.live_runs(), 0);
    }

    #[test]
    fn runs_do_not_cross_sds() {
        // Two full SDs.
        let mut p = pool::<8>(2 * PBLES_PER_SD);
        assert_eq!(p.largest_level1(), PBLES_PER_SD);
        let a = p.alloc(PBLES_PER_SD - 512, PblePolicy::Level1Only, &mut []).unwrap();
        assert_eq!(a.first_index(), 0);
        // The free run spans the SD boundary but a level-1 run cannot.
        assert_eq!(p.largest_level1(), PBLES_PER_SD);
        assert!(p.can_fit_level1(PBLES_PER_SD));
        assert!(!p.can_fit_level1(PBLES_PER_SD + 1));
        // 1024 would cross into SD 1 from index 261632: goes to SD 1 instead.
        let b = p.alloc(1024, PblePolicy::Level1Only, &mut []).unwrap();
        assert_eq!(b.first_index(), PBLES_PER_SD);
        // The 512 left in SD 0 are still usable.
        let c = p.alloc(512, PblePolicy::Level1Only, &mut []).unwrap();
        assert_eq!(c.first_index(), PBLES_PER_SD - 512);
        let cb: heapless::Vec<PbleChunk, 2> = b.chunks(p.layout(), &[]).collect();
        assert_eq!((cb.len(), cb[0].sd_index, cb[0].kind), (1, 1, SdKind::Direct));
        // A level-2 PBL whose root and leaves sit in different SDs.
        let mut leaves = [PbleRun::default(); 2];
        let l2 =
            PbleAlloc::Level2 { root: PbleRun { first: 0, count: 2 }, leaves: 2, entries: 600 };
        leaves[0] = PbleRun { first: PBLES_PER_SD, count: 512 };
        leaves[1] = PbleRun { first: PBLES_PER_SD + 1024, count: 88 };
        let cs: heapless::Vec<u32, 4> =
            l2.chunks(p.layout(), &leaves).map(|c| c.sd_index).collect();
        assert_eq!(cs, [0u32, 1]);
        assert_eq!(
            p.alloc(PBLES_PER_SD + 8, PblePolicy::Level1Only, &mut []),
            Err(PbleError::TooLarge)
        );
    }

    #[test]
    fn level2_when_fragmented() {
        // 4 pages; fill, then free every other 512 so no 1024 run exists.
        let mut p = pool::<16>(4 * 512);
        let mut runs = [PbleAlloc::Level1(PbleRun::default()); 4];
        for r in runs.iter_mut() {
            *r = p.alloc(512, PblePolicy::Level1Only, &mut []).unwrap();
        }
        p.free(&runs[0], &[]).unwrap();
        p.free(&runs[2], &[]).unwrap();
        // 600 entries: level 1 impossible, level 1 only fails.
        assert_eq!(p.alloc(600, PblePolicy::Level1Only, &mut []), Err(PbleError::NoSpace));
        let mut leaves = [PbleRun::default(); 2];
        assert_eq!(
            p.alloc(600, PblePolicy::Level1OrLevel2, &mut leaves[..1]),
            Err(PbleError::LeafBufferTooSmall)
        );
        let a = p.alloc(600, PblePolicy::Level1OrLevel2, &mut leaves).unwrap();
        let PbleAlloc::Level2 { root, leaves: n, entries } = a else { panic!("not level 2") };
        assert_eq!((root.count, n, entries), (2, 2, 600));
        assert_eq!(a.lpbl_size(), 3);
        assert_eq!(leaves[0].count, 512);
        assert_eq!(leaves[1].count, 88);
        assert_eq!(root.first, 0);
        assert_eq!(leaves[0].first, 1024);
        assert_eq!(leaves[1].first, 8);
        assert_eq!(a.entry_index(&leaves, 513), Some(9));
        assert_eq!(a.entry_index(&leaves, 600), None);
        // A level-2 PBL of ≤ 512 entries is never made.
        assert_eq!(p.alloc(512, PblePolicy::Level1OrLevel2, &mut leaves), Err(PbleError::NoSpace));
        // All in one chunk (SD 0, 4 pages, paged): yielded once.
        let cs: heapless::Vec<PbleChunk, 4> = a.chunks(p.layout(), &leaves).collect();
        assert_eq!(cs.len(), 1);
        assert_eq!((cs[0].sd_index, cs[0].pages, cs[0].kind), (0, 4, SdKind::Paged));
        p.free(&a, &leaves).unwrap();
        assert_eq!(p.free(&a, &leaves), Err(PbleError::NotAllocated));
    }

    #[test]
    fn level2_failure_rolls_back() {
        let mut p = pool::<64>(3 * 512);
        let hold = p.alloc(512, PblePolicy::Level1Only, &mut []).unwrap();
        let _ = hold;
        let hold2 = p.alloc(512, PblePolicy::Level1Only, &mut []).unwrap();
        p.free(&hold, &[]).unwrap();
        // 1100 entries need root 3 + leaves 512+512+76 = 1112 > 1024 free.
        let before = p.free_entries();
        let mut leaves = [PbleRun::default(); 3];
        assert_eq!(p.alloc(1100, PblePolicy::Level1OrLevel2, &mut leaves), Err(PbleError::NoSpace));
        assert_eq!(p.free_entries(), before);
        assert_eq!(p.live_runs(), 1);
        p.free(&hold2, &[]).unwrap();
        assert_eq!(p.free_runs(), &[PbleRun { first: 0, count: 1536 }]);
    }

    #[test]
    fn run_table_cap_is_a_typed_error() {
        let mut p = pool::<3>(4096);
        let a = p.alloc(8, PblePolicy::Level1Only, &mut []).unwrap();
        let b = p.alloc(8, PblePolicy::Level1Only, &mut []).unwrap();
        assert_eq!(p.alloc(8, PblePolicy::Level1Only, &mut []), Err(PbleError::TooManyRuns));
        // Freeing the first makes two free runs; the table still copes.
        p.free(&a, &[]).unwrap();
        p.free(&b, &[]).unwrap();
        assert_eq!(p.free_runs().len(), 1);
        assert!(PblePool::<1>::new(PbleLayout::new(0, 512).unwrap()).is_err());
    }

    #[test]
    fn foreign_and_misaligned_runs_are_refused() {
        let mut p = pool::<8>(1024);
        let a = p.alloc(16, PblePolicy::Level1Only, &mut []).unwrap();
        let bad = [
            PbleRun { first: 4, count: 8 },
            PbleRun { first: 1024, count: 8 },
            PbleRun { first: 16, count: 8 },
            PbleRun { first: 0, count: 0 },
            PbleRun { first: u32::MAX - 3, count: 8 },
            // Sub-ranges of the live run [0, 16).
            PbleRun { first: 0, count: 8 },
            PbleRun { first: 8, count: 8 },
        ];
        for r in bad {
            assert_eq!(p.free(&PbleAlloc::Level1(r), &[]), Err(PbleError::NotAllocated), "{r:?}");
        }
        p.free(&a, &[]).unwrap();
    }

    #[test]
    fn pbl_level_rule() {
        assert_eq!(pbl_level(1, false), PblNeed::Level0);
        assert_eq!(pbl_level(100, true), PblNeed::Level0);
        assert_eq!(pbl_level(100, false), PblNeed::Pbl(100));
    }
}
