//! Memory regions: REG_MR with PBL level 0/1/2 written into the HMC PBLE
//! memory (spec control-path §4.3.9, §5, §6), DEALLOC_STAG, re-registration
//! with a rotated key byte, and fast-register MRs (ALLOC_STAG, §4.3.7,
//! holding a level-1 PBL, or level 2 when no level-1 run fits, which each
//! FAST_REGISTER WQE names) for the `rw` layer's [`crate::rw::MrPool`].

use irdma_hal::{Bar, BufferDirection, Dma, Hal};

use super::error::Quantity;
use super::error::VerbsError;
use super::pd::Pd;
use crate::Phrase;
use crate::cqp::cmd::{AllocStag, DeallocStag, MrPages, Pbl, RegMr};
use crate::cqp::engine::device_may_own;
use crate::device::Device;
use crate::device::FrRecord;
use crate::res::pble::{
    LEAF_ENTRIES, PblNeed, PbleAlloc, PbleLayout, PblePolicy, PbleRun, pbl_level,
};
use crate::res::{AccessRights, Stag, mr_access_rights};
use crate::rw::FrMr;
use crate::uk::mem::dma_slice;
use crate::wr::{Access, PageSize, RegMrWr, SendWr, WrOpcode};

/// Defined with the error that names it ([`VerbsError::TooLong`]).
pub use super::error::MAX_MR_SIZE;

/// What to register (`ib_reg_mr` with the pages already pinned and mapped).
#[derive(Clone, Copy, Debug)]
pub struct MrDesc<'p> {
    /// IOVA of the first byte (VA-based), or its offset in the first page
    /// when `zero_based` (then SGEs address the region from 0).
    pub iova: u64,
    /// Length in bytes.
    pub length: u64,
    /// Page size of `pages`.
    pub page_size: PageSize,
    /// Bus address of every page, in order, each aligned to `page_size`.
    pub pages: &'p [u64],
    /// Zero-based (VABASEDTO = 0) instead of VA-based.
    pub zero_based: bool,
    /// Access rights.
    pub access: Access,
}

/// What a new PBL's page entries start as.
#[derive(Clone, Copy)]
enum Fill<'a> {
    /// These page addresses (`reg_mr`).
    Pages(&'a [u64]),
    /// This many zeroed entries (`alloc_mr`: nothing mapped yet).
    Zeros(u32),
}

/// Zeroes for [`Fill::Zeros`], one leaf's worth at a time.
static ZERO_LEAF: [u64; LEAF_ENTRIES as usize] = [0; LEAF_ENTRIES as usize];

/// Writes `n` zero entries from PBLE `first` (one run).
fn write_zero_run<H: Hal>(
    sds: &crate::device::SdStore<H>,
    layout: &PbleLayout,
    first: u32,
    n: u32,
) -> bool {
    let mut at = 0u32;
    while at < n {
        let k = (n - at).min(LEAF_ENTRIES);
        let ok = first.checked_add(at).is_some_and(|i| {
            sds.write_pble_run(layout, i, ZERO_LEAF.get(..k as usize).unwrap_or(&[]))
        });
        if !ok {
            return false;
        }
        at += k;
    }
    true
}

/// A fingerprint of a level-2 PBL's leaf runs (FNV-1a over their first
/// indexes, in order), kept in the fast-register record so a leaf list read
/// back from the root PBLEs is known to be this MR's before anything is
/// written through it.
pub(crate) fn leaf_tag(firsts: impl Iterator<Item = u32>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in firsts {
        for b in f.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// A PBL taken from the pool, with the host memory that remembers a level-2
/// PBL's leaf runs (DMA pages the device never sees).
struct HeldPbl<H: Hal> {
    alloc: PbleAlloc,
    leaves: Option<Dma<H>>,
    nleaves: usize,
}

impl<H: Hal> HeldPbl<H> {
    #[inline(never)]
    fn leaves(&self) -> &[PbleRun] {
        let Some(d) = self.leaves.as_ref() else { return &[] };
        let fits =
            self.nleaves.checked_mul(core::mem::size_of::<PbleRun>()).is_some_and(|b| b <= d.len());
        if !fits {
            return &[];
        }
        // SAFETY: the allocation holds `nleaves` runs (checked to fit;
        // page-aligned, so aligned for `PbleRun`; zeroed or written by the
        // pool, every bit pattern valid), lives as long as `self` and is
        // never given to the device. A shared view: several may be alive at
        // once (a `&mut` view per call would invalidate the earlier ones),
        // and nothing writes the runs while `self` is borrowed.
        unsafe { core::slice::from_raw_parts(d.vaddr().as_ptr().cast::<PbleRun>(), self.nleaves) }
    }
}

/// A registered memory region (`ib_mr`): lkey = rkey = the STag.
///
/// # Example
///
/// Two contiguous pages: a level-0 MR (no PBL):
///
/// ```
/// # use irdma::prelude::*;
/// # use irdma_testkit::{FakeHal, ModelBar};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let bar = ModelBar::standalone(mock_bar::Config::default());
/// # let lan = LanInfo::single_tc(0, 6, [2, 0, 0, 0, 0, 0x0a], 1500);
/// # let dev: Device<FakeHal, ModelBar> = Device::probe(bar, lan, Profile::SMALL)?;
/// let pd = dev.alloc_pd()?;
/// let mem = Dma::<FakeHal>::new(2, BufferDirection::Both)?;
/// let pages = [mem.paddr(), mem.paddr() + 4096];
/// // SAFETY: `mem` outlives the MR and backs nothing else meanwhile.
/// let mr = unsafe { dev.reg_mr(&pd, &MrDesc {
///     iova: mem.paddr(), // VA-based: SGE addresses are bus addresses
///     length: 8192,
///     page_size: PageSize::Size4K,
///     pages: &pages,
///     zero_based: false,
///     access: Access::LOCAL_WRITE | Access::REMOTE_READ,
/// }) }?;
/// assert_eq!(mr.lkey(), mr.rkey());
/// assert_eq!(mr.pbl_level(), 0);
/// # Ok(())
/// # }
/// ```
pub struct Mr<'d, H: Hal, B: Bar + Clone> {
    dev: &'d Device<H, B>,
    stag: Stag,
    pd: u32,
    reg: RegMr,
    pbl: Option<HeldPbl<H>>,
    level: u8,
    alive: bool,
}

/// Reads back the PBLE of `pbl` on `dev` that holds page `page`.
fn read_pble<H: Hal, B: Bar + Clone>(
    dev: &Device<H, B>,
    pbl: &HeldPbl<H>,
    page: u32,
) -> Option<u64> {
    let idx = pbl.alloc.entry_index(pbl.leaves(), page)?;
    let res = dev.res.lock();
    let layout = *res.ids.as_ref()?.pble.layout();
    res.sds.read_pble(&layout, idx)
}

/// Writes a PBL's entries (spec §6.2): level 1 = the page addresses (or
/// zeros); level 2 = root entries holding the leaves' first PBLE indexes,
/// each leaf its share of the page addresses (pble.c: get_lvl2_pble).
/// `false` if an entry lies outside the backed SDs.
fn write_pbl<H: Hal>(
    sds: &crate::device::SdStore<H>,
    layout: &PbleLayout,
    held: &HeldPbl<H>,
    fill: Fill<'_>,
) -> bool {
    let run = |first: u32, part: Fill<'_>| match part {
        Fill::Pages(p) => sds.write_pble_run(layout, first, p),
        Fill::Zeros(k) => write_zero_run(sds, layout, first, k),
    };
    match held.alloc {
        PbleAlloc::Level1(r) => run(r.first, fill),
        PbleAlloc::Level2 { root, .. } => {
            let lv = held.leaves();
            let roots = lv.iter().enumerate().all(|(j, leaf)| {
                let idx = root.first.wrapping_add(j as u32);
                sds.write_pble(layout, idx, leaf.first.into())
            });
            roots
                && lv.iter().enumerate().all(|(j, leaf)| {
                    let part = match fill {
                        Fill::Pages(p) => {
                            Fill::Pages(p.chunks(LEAF_ENTRIES as usize).nth(j).unwrap_or(&[]))
                        }
                        Fill::Zeros(_) => Fill::Zeros(leaf.count),
                    };
                    run(leaf.first, part)
                })
        }
    }
}

/// What `reg_mr` registers, from a checked [`MrDesc`].
struct MrLayout<'p> {
    /// The pages the length needs (extra ones are ignored).
    pages: &'p [u64],
    first_page: u64,
    /// Each page right after the previous (verbs.c:
    /// irdma_check_mr_contiguous): level 0.
    contiguous: bool,
    npages: u32,
    rights: AccessRights,
}

/// `reg_mr`'s checks of a description: a non-empty length within
/// [`MAX_MR_SIZE`], pages aligned to the page size and enough of them to
/// cover the offset in the first page plus the length, no overflowing
/// address range, access flags the device can express.
fn mr_layout<'p>(d: &MrDesc<'p>) -> Result<MrLayout<'p>, VerbsError> {
    let pbytes = d.page_size.bytes();
    if d.length == 0 || d.pages.is_empty() {
        return Err(VerbsError::Invalid { what: Phrase::new(&"empty MR") });
    }
    if d.length > MAX_MR_SIZE {
        return Err(VerbsError::TooLong { length: d.length });
    }
    if d.pages.iter().any(|p| p % pbytes != 0) {
        return Err(VerbsError::Invalid {
            what: Phrase::new(&"page address not aligned to the page size"),
        });
    }
    // The pages must cover [offset in first page, + length).
    let first_off = d.iova % pbytes;
    let need = first_off
        .checked_add(d.length)
        .map(|e| e.div_ceil(pbytes))
        .ok_or(VerbsError::Invalid { what: Phrase::new(&"iova + length overflows") })?;
    if (d.pages.len() as u64) < need {
        return Err(VerbsError::Invalid {
            what: Phrase::new(&"fewer pages than the length needs"),
        });
    }
    if !d.zero_based && d.iova.checked_add(d.length).is_none() {
        return Err(VerbsError::Invalid { what: Phrase::new(&"iova + length overflows") });
    }
    let rights = mr_access_rights(d.access)?;
    let pages = d.pages.get(..need as usize).unwrap_or(d.pages);
    let Some(&first_page) = pages.first() else {
        return Err(VerbsError::Invalid { what: Phrase::new(&"empty MR") });
    };
    let contiguous = pages
        .iter()
        .enumerate()
        .all(|(i, p)| first_page.checked_add(i as u64 * pbytes) == Some(*p));
    let npages = u32::try_from(pages.len())
        .map_err(|_| VerbsError::Invalid { what: Phrase::new(&"more than 2^32 - 1 pages") })?;
    Ok(MrLayout { pages, first_page, contiguous, npages, rights })
}

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// Takes a PBL for the entries `fill` describes from the pool, backs the
    /// SDs it lands in (UPDATE_PE_SDS, pble.c: add_pble_prm) and writes the
    /// entries: level 1 = page addresses; level 2 = root entries holding
    /// leaf PBLE indexes, leaves holding page addresses (spec §6.2; pble.c:
    /// get_lvl2_pble). A fast-register MR's entries start zeroed
    /// ([`Fill::Zeros`]); `irdma_set_page` (verbs.c) fills them later.
    fn take_pbl(&self, fill: Fill<'_>, policy: PblePolicy) -> Result<HeldPbl<H>, VerbsError> {
        let n = match fill {
            Fill::Pages(pages) => u32::try_from(pages.len()).map_err(|_| VerbsError::Invalid {
                what: Phrase::new(&"more than 2^32 - 1 pages"),
            })?,
            Fill::Zeros(n) => n,
        };
        let nleaves = n.div_ceil(LEAF_ENTRIES) as usize;
        let mut leaves = if policy == PblePolicy::Level1OrLevel2 && n > LEAF_ENTRIES {
            Some(Dma::<H>::with_bytes(
                nleaves * core::mem::size_of::<PbleRun>(),
                BufferDirection::DriverToDevice,
            )?)
        } else {
            None
        };
        let mut res = self.res.lock();
        let res = &mut *res;
        let ids = res.ids.as_mut().ok_or(VerbsError::Destroyed)?;
        let mut empty: [PbleRun; 0] = [];
        let buf: &mut [PbleRun] = match leaves.as_ref() {
            Some(d) => {
                // SAFETY: `leaves` is owned by the returned `HeldPbl`, zeroed,
                // never shared with the device; `PbleRun` is valid all-zero.
                unsafe { dma_slice::<H, PbleRun>(d, nleaves) }.ok_or(VerbsError::Capacity)?
            }
            None => &mut empty,
        };
        let alloc = ids.pble.alloc(n, policy, buf)?;
        if alloc.level() == 1 {
            // Level 1 after all: the leaf list is not needed (host memory
            // the device never saw).
            leaves = None;
        }
        let nleaves = if leaves.is_some() { nleaves } else { 0 };
        let held = HeldPbl { alloc, leaves, nleaves };
        let layout = *ids.pble.layout();
        let back = {
            let mut r = Ok(());
            for chunk in alloc.chunks(&layout, held.leaves()) {
                r = self.with_cqp(|c| {
                    res.sds.back_pble_chunk(&chunk, c).map_err(|e| match e {
                        crate::device::BackError::Cqp(c) => c,
                        crate::device::BackError::Dma(d) => crate::cqp::engine::CqpError::Dma(d),
                        crate::device::BackError::Capacity => {
                            crate::cqp::engine::CqpError::Protocol {
                                what: Phrase::new(&"SD table full"),
                            }
                        }
                    })
                });
                if r.is_err() {
                    break;
                }
            }
            r
        };
        let written = back.is_ok() && write_pbl(&res.sds, &layout, &held, fill);
        if !written {
            let _ = ids.pble.free(&held.alloc, held.leaves());
            return Err(match back {
                Err(e) => e.into(),
                Ok(()) => VerbsError::Capacity,
            });
        }
        Ok(held)
    }

    fn put_pbl(&self, pbl: &HeldPbl<H>) {
        if let Some(ids) = self.res.lock().ids.as_mut() {
            let _ = ids.pble.free(&pbl.alloc, pbl.leaves());
        }
    }

    /// DEALLOC_STAG of an MR's STag (verbs.c: irdma_hwdereg_mr); used by
    /// dereg and rereg of regular and fast-register MRs.
    fn dealloc_mr_stag(&self, stag: Stag, pd: u32) -> Result<(), VerbsError> {
        let d =
            DeallocStag { stag_idx: stag.index_field(), pd_id: pd, mr: true, skip_flush: false };
        self.exec_cmd(d)?;
        Ok(())
    }

    /// After a REG_MR / ALLOC_STAG / DEALLOC_STAG the device did not
    /// confirm: the STag index and the PBLEs stay allocated (the device may
    /// still translate through them), counted in the quarantine; the level-2
    /// leaf list is host memory the device never saw, kept with them.
    fn quarantine_mr(&self, pbl: Option<HeldPbl<H>>) {
        let ids = 1 + u32::from(pbl.is_some());
        if let Some(leaves) = pbl.and_then(|p| p.leaves) {
            self.quarantine(leaves);
        }
        self.quarantine_ids(ids);
    }

    fn put_stag(&self, stag: Stag) {
        if let Some(ids) = self.res.lock().ids.as_mut() {
            let _ = ids.stags.free(stag);
        }
    }

    /// `ib_reg_mr` (verbs.c: irdma_reg_user_mr_type_mem, irdma_hwreg_mr):
    /// level 0 when the pages are physically contiguous (one page, or each
    /// page right after the previous, verbs.c: irdma_check_mr_contiguous),
    /// otherwise level 1, or level 2 when no level-1 run fits and there are
    /// more than 512 pages (pble.c: irdma_get_pble).
    ///
    /// # Safety
    ///
    /// The device is given `d.pages` as bus addresses and will read and
    /// write them (locally through `lkey`, remotely through `rkey` when
    /// `d.access` allows it) until the MR is deregistered. The caller
    /// guarantees that every page `d.pages` names is memory the caller owns,
    /// mapped for the device in both directions the access flags allow, and
    /// that it stays allocated and is not reused for anything else until the
    /// returned [`Mr`] is deregistered ([`Mr::dereg`] returned `Ok`, or the
    /// `Mr` was dropped after a successful deregistration) — or, if the
    /// registration was quarantined (the device needs a reset,
    /// [`Device::needs_reset`]), until the function was reset. A remote
    /// WRITE through an MR over freed pages corrupts whatever reuses them.
    pub unsafe fn reg_mr<'d>(
        &'d self,
        pd: &Pd<'d, H, B>,
        d: &MrDesc<'_>,
    ) -> Result<Mr<'d, H, B>, VerbsError> {
        self.own(pd.device(), &"PD of another device")?;
        let MrLayout { pages, first_page, contiguous, npages, rights } = mr_layout(d)?;
        let stag = {
            let mut res = self.res.lock();
            res.ids.as_mut().ok_or(VerbsError::Destroyed)?.stags.alloc()?
        };
        let (mr_pages, pbl, level) = match pbl_level(npages, contiguous) {
            PblNeed::Level0 => (MrPages::Contiguous(first_page), None, 0),
            PblNeed::Pbl(_) => {
                match self.take_pbl(Fill::Pages(pages), PblePolicy::Level1OrLevel2) {
                    Ok(p) => {
                        let pb =
                            Pbl { level: p.alloc.lpbl_size(), first_index: p.alloc.first_index() };
                        let lvl = p.alloc.level();
                        (MrPages::Pbl(pb), Some(p), lvl)
                    }
                    Err(e) => {
                        self.put_stag(stag);
                        return Err(e);
                    }
                }
            }
        };
        let reg = RegMr {
            stag_idx: stag.index_field(),
            stag_key: stag.key(),
            pd_id: pd.id(),
            va: d.iova,
            total_len: d.length,
            page_size: d.page_size,
            pages: mr_pages,
            va_based: !d.zero_based,
            access_rights: rights.bits(),
            // Linux's kernel MRs: no remote atomics, cached, no HMC
            // function index, placement 0, not all-memory.
            ..RegMr::DEFAULT
        };
        if let Err(e) = self.exec_cmd(reg) {
            if device_may_own(&e) {
                self.quarantine_mr(pbl);
                return Err(e.into());
            }
            if let Some(p) = pbl.as_ref() {
                self.put_pbl(p);
            }
            self.put_stag(stag);
            return Err(e.into());
        }
        self.hold(Some(pd.id()), &[]);
        Ok(Mr { dev: self, stag, pd: pd.id(), reg, pbl, level, alive: true })
    }
}

impl<H: Hal, B: Bar + Clone> Mr<'_, H, B> {
    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.stag.0
    }

    /// The remote key (the same STag).
    pub fn rkey(&self) -> u32 {
        self.stag.0
    }

    /// The PBL level used: 0, 1 or 2.
    pub fn pbl_level(&self) -> u8 {
        self.level
    }

    /// The PBLE holding the first page address (levels 1 and 2).
    pub fn first_page_pble(&self) -> Option<u32> {
        let p = self.pbl.as_ref()?;
        p.alloc.entry_index(p.leaves(), 0)
    }

    /// Reads back the PBLE that holds page `page` (diagnostics and tests:
    /// what the device will read from HMC memory).
    pub fn pble_entry(&self, page: u32) -> Option<u64> {
        read_pble(self.dev, self.pbl.as_ref()?, page)
    }

    /// Re-registers the same pages under a new key byte: DEALLOC_STAG, then
    /// REG_MR with the index's next key (spec §5.1–5.2; [`StagTable::rotate`]).
    /// An rkey handed out before stops working.
    ///
    /// [`StagTable::rotate`]: crate::res::StagTable::rotate
    pub fn rereg(&mut self) -> Result<(), VerbsError> {
        if !self.alive {
            return Err(VerbsError::Destroyed);
        }
        self.dev.dealloc_mr_stag(self.stag, self.pd)?;
        let next = {
            let mut res = self.dev.res.lock();
            res.ids.as_mut().ok_or(VerbsError::Destroyed)?.stags.rotate(self.stag)?
        };
        self.stag = next;
        let reg = RegMr { stag_idx: next.index_field(), stag_key: next.key(), ..self.reg };
        match self.dev.exec_cmd(reg) {
            Ok(()) => {
                self.reg = reg;
                Ok(())
            }
            Err(e) if device_may_own(&e) => {
                // The new registration may be live: keep STag and PBLEs.
                self.alive = false;
                self.dev.quarantine_mr(self.pbl.take());
                Err(e.into())
            }
            Err(e) => {
                // Deregistered in hardware: release everything now.
                self.release();
                Err(e.into())
            }
        }
    }

    fn release(&mut self) {
        self.alive = false;
        if let Some(p) = self.pbl.take() {
            self.dev.put_pbl(&p);
        }
        self.dev.put_stag(self.stag);
        self.dev.release_refs(Some(self.pd), &[]);
    }

    /// `ib_dereg_mr`: DEALLOC_STAG (verbs.c: irdma_hwdereg_mr), then the PBL
    /// and the STag index go back (its key byte moves on at the next use).
    pub fn dereg(&mut self) -> Result<(), VerbsError> {
        if !self.alive {
            return Ok(());
        }
        self.dev.dealloc_mr_stag(self.stag, self.pd)?;
        self.release();
        Ok(())
    }
}

impl<H: Hal, B: Bar + Clone> Drop for Mr<'_, H, B> {
    fn drop(&mut self) {
        if self.dereg().is_err() {
            // The device may still use the STag and its PBLEs: keep them
            // allocated, counted in the quarantine.
            self.dev.quarantine_mr(self.pbl.take());
        }
    }
}

/// A fast-register MR (`ib_alloc_mr(IB_MR_TYPE_MEM_REG)`): an STag with a
/// PBL of `max_pages` entries — level 1, or level 2 when no level-1 run
/// fits and `max_pages` > 512 (irdma_kcompat.c: irdma_alloc_mr →
/// irdma_get_pble without lvl1_only; verbs.c: irdma_hw_alloc_stag) —
/// registered later by a FAST_REG WR. Hand
/// [`FastRegMr::fr_mr`] to the `rw` layer's pool, or use
/// [`FastRegMr::map_pages`] + [`FastRegMr::next_key`] directly.
pub struct FastRegMr<'d, H: Hal, B: Bar + Clone> {
    dev: &'d Device<H, B>,
    /// The STag as allocated (the index is what DEALLOC_STAG needs).
    stag: Stag,
    /// The key the next FAST_REG WR should carry.
    key: u32,
    pd: u32,
    max_pages: u32,
    pbl: Option<HeldPbl<H>>,
    alive: bool,
}

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// `ib_alloc_mr` for up to `max_pages` 4 KiB pages. The PBL is level 1
    /// when one run of `max_pages` entries fits, otherwise level 2 (more
    /// than 512 pages only), as for [`Device::reg_mr`] (pble.c:
    /// irdma_get_pble, get_lvl1_lvl2_pble).
    pub fn alloc_mr<'d>(
        &'d self,
        pd: &Pd<'d, H, B>,
        max_pages: u32,
    ) -> Result<FastRegMr<'d, H, B>, VerbsError> {
        self.own(pd.device(), &"PD of another device")?;
        const MAX: u32 = 262_144; // main.h: IRDMA_MAX_PAGES_PER_FMR (spec §5.5)
        if max_pages == 0 || max_pages > MAX {
            return Err(VerbsError::AboveLimit {
                what: Quantity::MaxPages,
                requested: max_pages,
                max: MAX,
            });
        }
        let stag = {
            let mut res = self.res.lock();
            res.ids.as_mut().ok_or(VerbsError::Destroyed)?.stags.alloc()?
        };
        // Zeroed page addresses until the first FAST_REG maps real ones.
        let held = match self.take_pbl(Fill::Zeros(max_pages), PblePolicy::Level1OrLevel2) {
            Ok(h) => h,
            Err(e) => {
                self.put_stag(stag);
                return Err(e);
            }
        };
        // The record the post paths check REG_MR WRs against (nothing
        // armed until the first map).
        let rec = FrRecord {
            stag_idx: stag.index(),
            first_pble: held.alloc.first_index(),
            level: held.alloc.level(),
            leaf_tag: leaf_tag(held.leaves().iter().map(|l| l.first)),
            max_pages,
            mapped: 0,
        };
        if !self.res.lock().ids.as_mut().is_some_and(|ids| ids.fr_insert(rec)) {
            self.put_pbl(&held);
            self.put_stag(stag);
            return Err(VerbsError::Capacity);
        }
        // What the vendor sends for a fast-register MR (verbs.c:
        // irdma_hw_alloc_stag; spec control-path §4.3.7): no access rights
        // and no PBL chunk (each FAST_REGISTER WQE carries its own rights,
        // PBL level and first PBLE), REMACCENABLED set so a FAST_REGISTER
        // may grant remote rights.
        let cmd = AllocStag {
            stag_idx: stag.index_field(),
            pd_id: pd.id(),
            total_len: u64::from(max_pages) * 4096,
            page_size: PageSize::Size4K,
            access_rights: 0,
            remote_access: true,
            use_hmc_fn_index: false,
            hmc_fn_index: 0,
            placement_type: 0,
            pbl: None,
            all_memory: false,
        };
        if let Err(e) = self.exec_cmd(cmd) {
            self.fr_remove(stag.index());
            if device_may_own(&e) {
                self.quarantine_mr(Some(held));
                return Err(e.into());
            }
            self.put_pbl(&held);
            self.put_stag(stag);
            return Err(e.into());
        }
        self.hold(Some(pd.id()), &[]);
        Ok(FastRegMr {
            dev: self,
            stag,
            key: stag.0,
            pd: pd.id(),
            max_pages,
            pbl: Some(held),
            alive: true,
        })
    }
}

impl<H: Hal, B: Bar + Clone> FastRegMr<'_, H, B> {
    /// The MR as the `rw` pool takes it: its PBL level (1 or 2) and first
    /// PBLE (the level-1 run's, or the level-2 root's), what its REG_MR WRs
    /// carry (verbs.c: irdma_post_send, IB_WR_REG_MR).
    pub fn fr_mr(&self) -> FrMr {
        FrMr {
            key: self.key,
            max_pages: self.max_pages,
            first_pble_index: self.pbl.as_ref().map_or(0, |p| p.alloc.first_index()),
            pbl_level: self.pbl_level(),
        }
    }

    /// The PBL level: 1, or 2 when no level-1 run fitted at allocation
    /// (0 once deregistered).
    pub fn pbl_level(&self) -> u8 {
        self.pbl.as_ref().map_or(0, |p| p.alloc.level())
    }

    /// Reads back the PBLE that holds page `page` (diagnostics and tests:
    /// what the device will read from HMC memory after a map).
    pub fn pble_entry(&self, page: u32) -> Option<u64> {
        read_pble(self.dev, self.pbl.as_ref()?, page)
    }

    /// The key the next FAST_REG WR should register.
    pub fn key(&self) -> u32 {
        self.key
    }

    /// Moves the key byte on (`ib_inc_rkey`) for the next registration and
    /// returns the new key; a key registered before stops matching once the
    /// FAST_REG WR with the new one executes.
    pub fn next_key(&mut self) -> u32 {
        let idx = self.key & !0xff;
        let byte = (self.key as u8).wrapping_add(1);
        self.key = idx | u32::from(byte);
        self.key
    }

    /// Writes the page list the next FAST_REG WR maps into the MR's PBLEs
    /// (verbs.c: irdma_map_mr_sg → irdma_set_page: level 1 into the run,
    /// level 2 into the leaves, 512 pages each). Refused if it does not
    /// fit. The map arms exactly one REG_MR WR: the next one the safe post
    /// paths admit for this MR (covering at most `pages.len()` pages); any
    /// later REG_MR needs a new map ([`PostErrorKind::FastReg`] otherwise).
    ///
    /// # Safety
    ///
    /// After the FAST_REG WR that uses this list executes, the device reads
    /// and writes `pages` (4 KiB bus addresses) through the MR's key with the
    /// access the WR grants. The caller guarantees every page is memory it
    /// owns, mapped for the device, and stays allocated and unused for
    /// anything else until that registration is invalidated (a completed
    /// LOCAL_INV or a later FAST_REG with another list) or the MR is
    /// deregistered — or, if no REG_MR WR was admitted for the MR since,
    /// until a later map overwrote the list.
    ///
    /// [`PostErrorKind::FastReg`]: super::PostErrorKind::FastReg
    pub unsafe fn map_pages(&self, pages: &[u64]) -> Result<(), VerbsError> {
        if !self.alive {
            return Err(VerbsError::Destroyed);
        }
        if self.dev.is_gone() {
            return Err(VerbsError::Cqp(crate::cqp::CqpError::DeviceGone));
        }
        if pages.len() > self.max_pages as usize {
            return Err(VerbsError::AboveLimit {
                what: Quantity::Pages,
                requested: u32::try_from(pages.len()).unwrap_or(u32::MAX),
                max: self.max_pages,
            });
        }
        let Some(p) = self.pbl.as_ref() else { return Err(VerbsError::Destroyed) };
        let mut res = self.dev.res.lock();
        let res = &mut *res;
        let ids = res.ids.as_mut().ok_or(VerbsError::Destroyed)?;
        let layout = *ids.pble.layout();
        let rec = ids.fr_get_mut(self.stag.index()).ok_or(VerbsError::Destroyed)?;
        // Disarmed while the entries change; armed for one REG_MR after.
        rec.mapped = 0;
        let sds = &res.sds;
        let ok = match p.alloc {
            PbleAlloc::Level1(run) => sds.write_pble_run(&layout, run.first, pages),
            PbleAlloc::Level2 { .. } => {
                let lv = p.leaves();
                pages.chunks(LEAF_ENTRIES as usize).enumerate().all(|(j, part)| {
                    lv.get(j).is_some_and(|l| sds.write_pble_run(&layout, l.first, part))
                })
            }
        };
        if ok {
            rec.mapped = pages.len() as u32; // <= max_pages, checked above
            Ok(())
        } else {
            Err(VerbsError::Capacity)
        }
    }

    /// `ib_dereg_mr`: DEALLOC_STAG, then the PBL and the index go back.
    /// From the first call on, REG_MR WRs naming the MR are refused at post
    /// ([`PostErrorKind::FastReg`](super::PostErrorKind::FastReg)), even if
    /// the DEALLOC_STAG fails.
    pub fn dereg(&mut self) -> Result<(), VerbsError> {
        if !self.alive {
            return Ok(());
        }
        self.dev.fr_remove(self.stag.index());
        self.dev.dealloc_mr_stag(self.stag, self.pd)?;
        self.alive = false;
        if let Some(p) = self.pbl.take() {
            self.dev.put_pbl(&p);
        }
        self.dev.put_stag(self.stag);
        self.dev.release_refs(Some(self.pd), &[]);
        Ok(())
    }
}

impl<H: Hal, B: Bar + Clone> Drop for FastRegMr<'_, H, B> {
    fn drop(&mut self) {
        if self.dereg().is_err() {
            // As for `Mr`: STag and PBLEs stay allocated, counted.
            self.dev.quarantine_mr(self.pbl.take());
        }
    }
}

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// Writes `pages` into the PBL of the fast-register MR `mr` names
    /// (verbs.c: irdma_map_mr_sg → irdma_set_page: a level-1 run, or the
    /// leaves of a level-2 PBL, 512 pages each), for the rw layer's REG_MR
    /// (see [`crate::rw::PostSend::map_mr_pages`]), and arms that MR for one
    /// REG_MR WR, as [`FastRegMr::map_pages`] does. Refused unless `mr`
    /// names a live fast-register MR of this device (its STag index) with
    /// that MR's own first PBLE and level, and `pages` fits its size, so it
    /// never writes free entries or another MR's. A level-2 MR's leaves are
    /// read back from its root PBLEs and used only if each is a live run of
    /// the pool, of its leaf's length, and the list matches the fingerprint
    /// taken at allocation.
    ///
    /// # Safety
    ///
    /// `pages` must be addresses of pages the device may access with the
    /// rights the next REG_MR of `mr` grants, until that registration is
    /// invalidated (or the MR deregistered, or — no REG_MR admitted since —
    /// the list overwritten by a later map).
    pub(crate) unsafe fn write_fr_pages(&self, mr: &FrMr, pages: &[u64]) -> Result<(), VerbsError> {
        const BAD: VerbsError = VerbsError::Invalid { what: Phrase::new(&"fast-register MR") };
        let n = u32::try_from(pages.len()).map_err(|_| VerbsError::Capacity)?;
        if !matches!(mr.pbl_level, 1 | 2) {
            return Err(VerbsError::Invalid { what: Phrase::new(&"fast-register MR page list") });
        }
        let mut res = self.res.lock();
        let res = &mut *res;
        let ids = res.ids.as_mut().ok_or(VerbsError::Destroyed)?;
        let layout = *ids.pble.layout();
        // Only a live fast-register MR's own PBL, within its own size.
        let rec = match ids.fr_get_mut(mr.key >> 8) {
            Some(r)
                if r.first_pble == mr.first_pble_index
                    && r.level == mr.pbl_level
                    && n <= r.max_pages =>
            {
                r
            }
            _ => return Err(BAD),
        };
        rec.mapped = 0;
        let rec = *rec;
        if n == 0 {
            return Ok(());
        }
        let sds = &res.sds;
        let ok = if rec.level == 1 {
            sds.write_pble_run(&layout, rec.first_pble, pages)
        } else {
            // The leaf runs, from the root entries the driver wrote at
            // allocation (pble.c: get_lvl2_pble), checked before any write.
            let nleaves = rec.max_pages.div_ceil(LEAF_ENTRIES);
            let leaf = |j: u32| -> Option<u32> {
                let v = sds.read_pble(&layout, rec.first_pble.checked_add(j)?)?;
                let first = u32::try_from(v).ok()?;
                let len = if j + 1 == nleaves {
                    rec.max_pages - (nleaves - 1) * LEAF_ENTRIES
                } else {
                    LEAF_ENTRIES
                };
                ids.pble.is_live(first, len).then_some(first)
            };
            let mut all_live = true;
            let tag = leaf_tag((0..nleaves).map(|j| {
                let l = leaf(j);
                all_live &= l.is_some();
                l.unwrap_or(0)
            }));
            if !all_live || tag != rec.leaf_tag {
                return Err(BAD);
            }
            pages.chunks(LEAF_ENTRIES as usize).enumerate().all(|(j, part)| {
                leaf(j as u32).is_some_and(|l| sds.write_pble_run(&layout, l, part))
            })
        };
        if !ok {
            return Err(VerbsError::Capacity);
        }
        if let Some(r) = ids.fr_get_mut(rec.stag_idx) {
            r.mapped = n;
        }
        Ok(())
    }

    fn fr_remove(&self, stag_idx: u32) {
        if let Some(ids) = self.res.lock().ids.as_mut() {
            ids.fr_remove(stag_idx);
        }
    }

    /// Admits the REG_MR WRs of `wrs` (other opcodes cost one test each):
    /// returns how many WRs from the front may be posted — all of them, or
    /// up to the first REG_MR that does not name a live fast-register MR of
    /// this device as [`PostErrorKind::FastReg`] describes. Each admitted
    /// REG_MR consumes its MR's armed map, so the pages a map wrote are
    /// registered at most once by safe code (after the contract of that map
    /// ends, the stale entries are never used again).
    ///
    /// [`PostErrorKind::FastReg`]: super::PostErrorKind::FastReg
    #[inline]
    pub(crate) fn admit_fast_regs(&self, wrs: &[SendWr<'_>]) -> usize {
        for (i, wr) in wrs.iter().enumerate() {
            if let WrOpcode::RegMr(r) = &wr.opcode
                && !self.admit_fast_reg(r)
            {
                return i;
            }
        }
        wrs.len()
    }

    #[cold]
    fn admit_fast_reg(&self, r: &RegMrWr) -> bool {
        const PAGE: u64 = 4096;
        if r.page_size != PageSize::Size4K
            || r.access.contains(Access::REMOTE_ATOMIC)
            || r.access.contains(Access::MW_BIND)
        {
            return false;
        }
        // Pages the device reads from the PBL: from the IOVA's offset in
        // its first page through the last byte.
        let Some(pages) = (r.iova % PAGE).checked_add(r.length).map(|e| e.div_ceil(PAGE)) else {
            return false;
        };
        let mut res = self.res.lock();
        let Some(rec) = res.ids.as_mut().and_then(|ids| ids.fr_get_mut(r.key >> 8)) else {
            return false;
        };
        if rec.first_pble != r.first_pble_index
            || rec.level != r.pbl_level
            || pages > u64::from(rec.mapped)
        {
            return false;
        }
        rec.mapped = 0;
        true
    }
}

impl crate::device::Ids {
    fn fr_get_mut(&mut self, stag_idx: u32) -> Option<&mut FrRecord> {
        let i = self.fr.binary_search_by_key(&stag_idx, |r| r.stag_idx).ok()?;
        self.fr.get_mut(i)
    }

    fn fr_insert(&mut self, rec: FrRecord) -> bool {
        match self.fr.binary_search_by_key(&rec.stag_idx, |r| r.stag_idx) {
            Ok(i) => self.fr.get_mut(i).map(|r| *r = rec).is_some(),
            Err(i) => self.fr.insert(i, rec).is_ok(),
        }
    }

    fn fr_remove(&mut self, stag_idx: u32) {
        if let Ok(i) = self.fr.binary_search_by_key(&stag_idx, |r| r.stag_idx)
            && i < self.fr.len()
        {
            self.fr.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use irdma_testkit::FakeHal;
    use std::vec::Vec;

    /// Two views of a level-2 PBL's leaf list alive at once. Each
    /// `HeldPbl::leaves` call made a `&'static mut` over the same memory,
    /// which invalidates the earlier view (aliasing UB: fails under Miri,
    /// `cargo +nightly miri test -p irdma --lib held_pbl_leaf_views`).
    #[test]
    fn held_pbl_leaf_views_may_overlap() {
        let bytes = 4 * core::mem::size_of::<PbleRun>();
        let d = Dma::<FakeHal>::with_bytes(bytes, BufferDirection::DriverToDevice).unwrap();
        let held = HeldPbl::<FakeHal> {
            alloc: PbleAlloc::Level1(PbleRun { first: 0, count: 8 }),
            leaves: Some(d),
            nleaves: 3,
        };
        let a = held.leaves();
        let b = held.leaves();
        assert_eq!(a.len(), 3);
        assert_eq!(a, b);
        assert_eq!(a.first(), Some(&PbleRun::default()));
        // More runs than the memory holds: no view at all.
        let d = Dma::<FakeHal>::with_bytes(bytes, BufferDirection::DriverToDevice).unwrap();
        let over = HeldPbl::<FakeHal> {
            alloc: PbleAlloc::Level1(PbleRun { first: 0, count: 8 }),
            leaves: Some(d),
            nleaves: 4096 / core::mem::size_of::<PbleRun>() + 1,
        };
        assert!(over.leaves().is_empty());
    }

    /// The rw path finds a level-2 MR's leaves through its root PBLEs; a
    /// root entry that no longer names this MR's leaf (here: another live
    /// MR's run, which the pool alone would accept) is refused before any
    /// entry is written, by the fingerprint taken at allocation.
    #[test]
    fn rw_map_of_a_level2_mr_checks_the_leaves_read_back() {
        let profile = crate::res::Profile { pbles: 16 * 1024, ..crate::res::Profile::SMALL };
        let dev = super::super::model_device(profile);
        let pd = dev.alloc_pd().unwrap();
        // Fragment: 512-entry MRs until the pool is full, every other freed.
        let mut all = Vec::new();
        while let Ok(f) = dev.alloc_mr(&pd, 512) {
            all.push(f);
            assert!(all.len() < 256);
        }
        let mut holes = Vec::new();
        for (i, mut f) in all.into_iter().enumerate() {
            if i % 2 == 0 {
                f.dereg().unwrap();
            } else {
                holes.push(f);
            }
        }
        let fr = dev.alloc_mr(&pd, 600).unwrap();
        let mr = fr.fr_mr();
        assert_eq!(mr.pbl_level, 2);
        let victim = holes.first().unwrap();
        let victim_first = victim.fr_mr().first_pble_index;
        let pages: Vec<u64> = (1..=600u64).map(|i| i << 12).collect();
        // SAFETY: no REG_MR is posted; the addresses are never used.
        unsafe { dev.write_fr_pages(&mr, &pages) }.unwrap();
        assert_eq!(fr.pble_entry(599), Some(600 << 12));

        // Root entry 1 (leaf 1, 88 entries) redirected to the victim's run.
        let layout = *dev.res.lock().ids.as_ref().unwrap().pble.layout();
        let saved = dev.res.lock().sds.read_pble(&layout, mr.first_pble_index + 1).unwrap();
        assert!(dev.res.lock().sds.write_pble(
            &layout,
            mr.first_pble_index + 1,
            victim_first.into()
        ));
        // SAFETY: as above.
        let r = unsafe { dev.write_fr_pages(&mr, &pages) };
        assert_eq!(r, Err(VerbsError::Invalid { what: Phrase::new(&"fast-register MR") }));
        assert_eq!(victim.pble_entry(0), Some(0), "the other MR's entries untouched");
        // A root entry naming free entries: refused too.
        let free = dev.res.lock().ids.as_ref().unwrap().pble.free_runs().first().unwrap().first;
        assert!(dev.res.lock().sds.write_pble(&layout, mr.first_pble_index + 1, free.into()));
        // SAFETY: as above.
        assert!(unsafe { dev.write_fr_pages(&mr, &pages) }.is_err());
        // Restored: accepted again.
        assert!(dev.res.lock().sds.write_pble(&layout, mr.first_pble_index + 1, saved));
        // SAFETY: as above.
        unsafe { dev.write_fr_pages(&mr, &pages) }.unwrap();
    }
}
