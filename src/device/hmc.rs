//! Host memory behind the HMC: the 2 MiB direct SDs of the static objects
//! and the on-demand PBLE chunks (direct or paged), their UPDATE_PE_SDS
//! programming, and PBLE writes through that memory.
//!
//! Spec control-path §3.6 (SD/PD programming), §3.7 (UPDATE_PE_SDS), §6.1
//! (PBLE chunks); hw.c: irdma_create_hmc_objs, hmc.c: irdma_add_sd_table_entry,
//! irdma_add_pd_table_entry, irdma_invalidate_pf_hmc_pd; pble.c: add_pble_prm.

use irdma_hal::regs::{self, field as rf};
use irdma_hal::{Bar, BufferDirection, Dma, DmaError, Hal};

use crate::Phrase;
use crate::cqp::Cqp;
use crate::cqp::cmd::{MAX_SD_ENTRIES, SdEntry, UpdatePeSds};
use crate::cqp::engine::CqpError;
use crate::res::HmcLayout;
use crate::res::pble::{PDS_PER_SD, PbleChunk, PbleLayout, SD_SIZE, SdKind};

/// Most SDs one device backs (static objects plus PBLE chunks). A profile
/// whose committed HMC needs more is refused at probe with a typed error.
pub const MAX_BACKED_SDS: usize = 128;

const SD_PAGES: usize = (SD_SIZE as usize) / irdma_hal::PAGE_SIZE;

/// One backed SD.
pub(crate) struct SdBacking<H: Hal> {
    /// SD index.
    pub sd: u32,
    /// Direct: `mem` is the 2 MiB buffer. Paged: `pd_page` holds the PD
    /// entries and `mem` the data pages of slots `first_slot..`.
    pub kind: SdKind,
    pub pd_page: Option<Dma<H>>,
    pub mem: Dma<H>,
    pub first_slot: u32,
    /// Programmed into the device (UPDATE_PE_SDS completed).
    pub programmed: bool,
}

/// Why backing failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BackError {
    Dma(DmaError),
    Cqp(CqpError),
    Capacity,
}

crate::error::wrapping!(BackError from { DmaError => Dma, CqpError => Cqp });

/// The backed SDs of one function.
pub(crate) struct SdStore<H: Hal> {
    pub sds: heapless::Vec<SdBacking<H>, MAX_BACKED_SDS>,
    pub hmc_fn_id: u8,
}

impl<H: Hal> SdStore<H> {
    pub fn new(hmc_fn_id: u8) -> Self {
        SdStore { sds: heapless::Vec::new(), hmc_fn_id }
    }

    pub fn get(&self, sd: u32) -> Option<&SdBacking<H>> {
        self.sds.iter().find(|b| b.sd == sd)
    }

    /// Bytes of host memory held.
    pub fn bytes(&self) -> u64 {
        self.sds
            .iter()
            .map(|b| (b.mem.len() + b.pd_page.as_ref().map_or(0, |p| p.len())) as u64)
            .sum()
    }

    /// Allocates 2 MiB direct backing for every static SD (non-PBLE objects,
    /// in Linux's creation order) and programs them with UPDATE_PE_SDS, at
    /// most 11 entries per op (hw.c: irdma_create_hmc_objs; spec §3.6, §3.7).
    pub fn back_static<B: Bar>(
        &mut self,
        layout: &HmcLayout,
        cqp: &mut Cqp<H, B>,
    ) -> Result<(), BackError> {
        let mut batch: heapless::Vec<SdEntry, MAX_SD_ENTRIES> = heapless::Vec::new();
        let mut first_unprogrammed = self.sds.len();
        for sd in layout.static_sds() {
            let mem = Dma::<H>::new(SD_PAGES, BufferDirection::Both)?;
            let entry = SdEntry::set(sd_u16(sd)?, mem.paddr(), true)
                .map_err(|e| BackError::Cqp(CqpError::Encode(e)))?;
            self.sds
                .push(SdBacking {
                    sd,
                    kind: SdKind::Direct,
                    pd_page: None,
                    mem,
                    first_slot: 0,
                    programmed: false,
                })
                .map_err(|_| BackError::Capacity)?;
            if batch.push(entry).is_err() {
                return Err(BackError::Capacity);
            }
            if batch.is_full() {
                self.program(cqp, &batch, first_unprogrammed)?;
                first_unprogrammed = self.sds.len();
                batch.clear();
            }
        }
        if !batch.is_empty() {
            self.program(cqp, &batch, first_unprogrammed)?;
        }
        Ok(())
    }

    fn program<B: Bar>(
        &mut self,
        cqp: &mut Cqp<H, B>,
        entries: &[SdEntry],
        from: usize,
    ) -> Result<(), BackError> {
        cqp.exec_info(UpdatePeSds { hmc_fn_id: self.hmc_fn_id, entries }, 0)?;
        for b in self.sds.iter_mut().skip(from) {
            b.programmed = true;
        }
        Ok(())
    }

    /// Backs the SD of a PBLE chunk if it is not backed yet (pble.c:
    /// add_pble_prm): direct when the chunk is the whole SD, otherwise a PD
    /// page whose entries point at the chunk's 4 KiB pages (those pages are
    /// one contiguous allocation here; each PD entry still names its own
    /// page), each PD entry followed by PFHMC_PDINV (hmc.c:
    /// irdma_invalidate_pf_hmc_pd). Then UPDATE_PE_SDS for the SD.
    pub fn back_pble_chunk<B: Bar>(
        &mut self,
        chunk: &PbleChunk,
        cqp: &mut Cqp<H, B>,
    ) -> Result<(), BackError> {
        if self.get(chunk.sd_index).is_some() {
            return Ok(());
        }
        if self.sds.is_full() {
            return Err(BackError::Capacity);
        }
        let sd16 = sd_u16(chunk.sd_index)?;
        let backing = match chunk.kind {
            SdKind::Direct => {
                let mem = Dma::<H>::new(SD_PAGES, BufferDirection::Both)?;
                SdBacking {
                    sd: chunk.sd_index,
                    kind: SdKind::Direct,
                    pd_page: None,
                    mem,
                    first_slot: 0,
                    programmed: false,
                }
            }
            SdKind::Paged => {
                let pd_page = Dma::<H>::new(1, BufferDirection::DriverToDevice)?;
                let pages = chunk_page_count(chunk) as usize;
                let mem = Dma::<H>::new(pages, BufferDirection::Both)?;
                let first = chunk.rel_pd();
                let bar = cqp.bar();
                paged_chunk_steps(chunk, mem.paddr(), |step| match step {
                    PdStep::Entry { slot, value } => {
                        pd_page.write_u64(slot as usize * 8, value);
                    }
                    PdStep::Inv(v) => bar.write32(regs::PFHMC_PDINV, v),
                });
                SdBacking {
                    sd: chunk.sd_index,
                    kind: SdKind::Paged,
                    pd_page: Some(pd_page),
                    mem,
                    first_slot: first,
                    programmed: false,
                }
            }
        };
        let table_pa = backing.pd_page.as_ref().map_or(backing.mem.paddr(), |p| p.paddr());
        let entry = chunk_sd_entry(sd16, table_pa, backing.kind)
            .map_err(|e| BackError::Cqp(CqpError::Encode(e)))?;
        let entries = [entry];
        let r = cqp.exec_info(UpdatePeSds { hmc_fn_id: self.hmc_fn_id, entries: &entries }, 0);
        if let Err(e) = r
            && !crate::cqp::engine::device_may_own(&e)
        {
            return Err(e.into());
        }
        // Programmed, or the device may have taken the SD (a timeout): keep
        // the memory as programmed, so teardown clears or quarantines it
        // instead of freeing pages the device may use. One push for both
        // (code size).
        let mut backing = backing;
        backing.programmed = true;
        if let Err(b) = self.sds.push(backing) {
            // Capacity was checked above; were it full, leak rather than
            // free after a timeout.
            if r.is_err() {
                core::mem::forget(b);
            } else {
                return Err(BackError::Capacity);
            }
        }
        r.map(|_| ()).map_err(BackError::from)
    }

    /// Clears every programmed SD (UPDATE_PE_SDS with PMSDVALID = 0, ≤ 11 per
    /// op; hmc.c: irdma_clr_sd_entry) so the device stops using the memory;
    /// returns the first error but keeps going. Memory is freed by the caller
    /// dropping the store.
    pub fn clear_all<B: Bar>(&mut self, cqp: &mut Cqp<H, B>) -> Result<(), CqpError> {
        // First the PD entries of every programmed paged SD: zeroed and
        // invalidated one by one, so the device drops the cached PDs before
        // their pages can be freed (hmc.c: irdma_sc_del_hmc_obj removes
        // every valid PD with irdma_remove_pd_bp before clearing the SDs).
        let bar = cqp.bar();
        for b in self.sds.iter().filter(|b| b.programmed && b.kind == SdKind::Paged) {
            let Some(pd_page) = b.pd_page.as_ref() else { continue };
            let sd = u16::try_from(b.sd).unwrap_or(u16::MAX);
            let pages = u32::try_from(b.mem.len() / irdma_hal::PAGE_SIZE).unwrap_or(PDS_PER_SD);
            paged_release_steps(sd, b.first_slot, pages, |step| match step {
                PdStep::Entry { slot, value } => {
                    pd_page.write_u64(slot as usize * 8, value);
                }
                PdStep::Inv(v) => bar.write32(regs::PFHMC_PDINV, v),
            });
        }
        let mut first_err = None;
        let mut batch: heapless::Vec<SdEntry, MAX_SD_ENTRIES> = heapless::Vec::new();
        let fn_id = self.hmc_fn_id;
        let mut flush = |batch: &mut heapless::Vec<SdEntry, MAX_SD_ENTRIES>,
                         first_err: &mut Option<CqpError>| {
            if batch.is_empty() {
                return;
            }
            if let Err(e) = cqp.exec_info(UpdatePeSds { hmc_fn_id: fn_id, entries: batch }, 0) {
                first_err.get_or_insert(e);
            }
            batch.clear();
        };
        for b in self.sds.iter_mut().filter(|b| b.programmed) {
            let direct = b.kind == SdKind::Direct;
            match u16::try_from(b.sd).ok().and_then(|s| SdEntry::clear(s, direct).ok()) {
                Some(e) => {
                    if batch.push(e).is_err() {
                        first_err
                            .get_or_insert(CqpError::Protocol { what: Phrase::new(&"SD batch") });
                    }
                }
                None => {
                    first_err.get_or_insert(CqpError::Protocol { what: Phrase::new(&"SD index") });
                }
            }
            b.programmed = false;
            if batch.is_full() {
                flush(&mut batch, &mut first_err);
            }
        }
        flush(&mut batch, &mut first_err);
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes PBLE `index` (a 64-bit value) through the host memory that backs
    /// it (spec §6.2: a PBLE is a raw 64-bit address or, for level-2 roots, a
    /// PBLE index). False if the PBLE's SD is not backed.
    pub fn write_pble(&self, layout: &PbleLayout, index: u32, value: u64) -> bool {
        let Some(loc) = layout.locate(index) else { return false };
        let Some(b) = self.get(loc.sd_index) else { return false };
        match b.kind {
            SdKind::Direct => b.mem.write_u64(loc.sd_offset as usize, value),
            SdKind::Paged => {
                let slot = loc.pd_index % PDS_PER_SD;
                let Some(rel) = slot.checked_sub(b.first_slot) else { return false };
                let off = rel as usize * irdma_hal::PAGE_SIZE + loc.page_offset as usize;
                b.mem.write_u64(off, value)
            }
        }
    }

    /// Writes `values` to the consecutive PBLEs from `first` (one SD lookup
    /// per SD crossed). False if any is not backed.
    pub fn write_pble_run(&self, layout: &PbleLayout, first: u32, values: &[u64]) -> bool {
        let mut cached: Option<(u32, &SdBacking<H>)> = None;
        for (i, v) in values.iter().enumerate() {
            let Some(loc) = u32::try_from(i)
                .ok()
                .and_then(|i| first.checked_add(i))
                .and_then(|x| layout.locate(x))
            else {
                return false;
            };
            let b = match cached {
                Some((sd, b)) if sd == loc.sd_index => b,
                _ => match self.get(loc.sd_index) {
                    Some(b) => {
                        cached = Some((loc.sd_index, b));
                        b
                    }
                    None => return false,
                },
            };
            let ok = match b.kind {
                SdKind::Direct => b.mem.write_u64(loc.sd_offset as usize, *v),
                SdKind::Paged => match (loc.pd_index % PDS_PER_SD).checked_sub(b.first_slot) {
                    Some(rel) => b.mem.write_u64(
                        rel as usize * irdma_hal::PAGE_SIZE + loc.page_offset as usize,
                        *v,
                    ),
                    None => false,
                },
            };
            if !ok {
                return false;
            }
        }
        true
    }

    /// Reads PBLE `index` back (tests, diagnostics).
    pub fn read_pble(&self, layout: &PbleLayout, index: u32) -> Option<u64> {
        let loc = layout.locate(index)?;
        let b = self.get(loc.sd_index)?;
        match b.kind {
            SdKind::Direct => b.mem.read_u64(loc.sd_offset as usize),
            SdKind::Paged => {
                let rel = (loc.pd_index % PDS_PER_SD).checked_sub(b.first_slot)?;
                b.mem.read_u64(rel as usize * irdma_hal::PAGE_SIZE + loc.page_offset as usize)
            }
        }
    }
}

fn sd_u16(sd: u32) -> Result<u16, BackError> {
    u16::try_from(sd).map_err(|_| BackError::Capacity)
}

/// Data pages a paged PBLE chunk's backing holds (1..=512; a chunk never
/// spans more than one SD, pble.c: add_pble_prm).
fn chunk_page_count(chunk: &PbleChunk) -> u32 {
    chunk.pages.clamp(1, PDS_PER_SD)
}

/// One host-memory or register write of backing or releasing a paged SD's
/// PD entries, in the order the driver performs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PdStep {
    /// Write `value` (page PA | 1 to add, 0 to remove) into PD-entry slot
    /// `slot` (0..512) of the SD's PD page (spec control-path §3.6).
    Entry {
        /// PD-entry slot.
        slot: u32,
        /// The 64-bit entry.
        value: u64,
    },
    /// Write `value` to PFHMC_PDINV.
    Inv(u32),
}

/// The PFHMC_PDINV value that makes the device reload PD entry `slot` of SD
/// `sd`: PMSDIDX \[11:0\], PMSDPARTSEL \[15\] = 1, PMPDIDX \[24:16\] (hmc.c:
/// irdma_invalidate_pf_hmc_pd; irdma.h: IRDMA_PFHMC_PDINV_*). Both indices
/// are cut to their fields, as Linux's FIELD_PREP does (on removal Linux
/// passes the absolute PD index, which the 9-bit field reduces to the slot:
/// hmc.c irdma_remove_pd_bp).
pub fn pdinv_value(sd: u16, slot: u32) -> u32 {
    let v = rf::PDINV_PMSDIDX.prep(u64::from(sd) & rf::PDINV_PMSDIDX.max())
        | rf::PDINV_PMSDPARTSEL.mask()
        | rf::PDINV_PMPDIDX.prep(u64::from(slot) & rf::PDINV_PMPDIDX.max());
    v as u32
}

/// The writes that back a paged PBLE chunk whose data page `i` is at
/// `data_pa + i * 4 KiB`: for each page, its PD entry (PA | valid), then
/// PFHMC_PDINV for it (hmc.c: irdma_add_pd_table_entry, called per page by
/// pble.c: add_bp_pages). `SdStore::back_pble_chunk` performs exactly these.
pub fn paged_chunk_steps(chunk: &PbleChunk, data_pa: u64, mut emit: impl FnMut(PdStep)) {
    let sd = u16::try_from(chunk.sd_index).unwrap_or(u16::MAX);
    let first = chunk.rel_pd();
    for i in 0..chunk_page_count(chunk) {
        let slot = first.saturating_add(i);
        let pa = data_pa.saturating_add(u64::from(i) * irdma_hal::PAGE_SIZE as u64);
        emit(PdStep::Entry { slot, value: pa | 1 });
        emit(PdStep::Inv(pdinv_value(sd, slot)));
    }
}

/// The writes that release the PD entries of a paged SD whose backed slots
/// are `first_slot..first_slot + pages`, before its SD is cleared: each
/// entry zeroed, then PFHMC_PDINV for it, in slot order (hmc.c:
/// irdma_sc_del_hmc_obj -> irdma_remove_pd_bp). `SdStore::clear_all`
/// performs exactly these.
pub fn paged_release_steps(sd: u16, first_slot: u32, pages: u32, mut emit: impl FnMut(PdStep)) {
    for i in 0..pages.min(PDS_PER_SD) {
        let slot = first_slot.saturating_add(i);
        emit(PdStep::Entry { slot, value: 0 });
        emit(PdStep::Inv(pdinv_value(sd, slot)));
    }
}

/// The UPDATE_PE_SDS entry that programs a PBLE chunk's SD: the 2 MiB
/// buffer (direct) or the PD page (paged) at `table_pa` (pble.c:
/// add_pble_prm -> hmc.c: irdma_hmc_sd_one).
pub fn chunk_sd_entry(
    sd: u16,
    table_pa: u64,
    kind: SdKind,
) -> Result<SdEntry, crate::cqp::EncodeError> {
    SdEntry::set(sd, table_pa, kind == SdKind::Direct)
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::vec::Vec;

    use irdma_hal::regs;
    use irdma_testkit::FakeHal;

    use super::*;
    use crate::cqp::engine::tests::{FakeDev, cfg};

    fn pdinvs(dev: &FakeDev) -> Vec<u32> {
        dev.with(|d| d.writes.iter().filter(|w| w.0 == regs::PFHMC_PDINV).map(|w| w.1).collect())
    }

    /// A paged PBLE chunk (SD 3, slots 100..105): backing writes each PD
    /// entry and its PDINV before the UPDATE_PE_SDS; teardown zeroes every
    /// entry and writes PDINV for it again before the SD clear (hmc.c:
    /// irdma_add_pd_table_entry, irdma_sc_del_hmc_obj -> irdma_remove_pd_bp),
    /// so no PD the device cached survives the pages being freed.
    #[test]
    fn paged_chunk_teardown_zeroes_and_invalidates_every_pd_before_the_sd_clear() {
        let dev = FakeDev::new();
        let mut cqp = Cqp::<FakeHal, &FakeDev>::create(&dev, &cfg(4)).unwrap();
        let mut store = SdStore::<FakeHal>::new(0);
        let chunk = PbleChunk {
            sd_index: 3,
            first_pd: 3 * PDS_PER_SD + 100,
            pages: 5,
            first_index: 0,
            count: 5 * 512,
            kind: SdKind::Paged,
        };
        store.back_pble_chunk(&chunk, &mut cqp).unwrap();
        let want: Vec<u32> = (100..105).map(|s| pdinv_value(3, s)).collect();
        assert_eq!(pdinvs(&dev), want);
        assert_eq!(want[0], 3 | 1 << 15 | 100 << 16);
        let b = store.get(3).unwrap();
        let pd = b.pd_page.as_ref().unwrap();
        for (i, s) in (100..105).enumerate() {
            let pa = b.mem.paddr() + i as u64 * 4096;
            assert_eq!(pd.read_u64(s * 8), Some(pa | 1));
        }
        dev.with(|d| d.writes.clear());
        store.clear_all(&mut cqp).unwrap();
        assert_eq!(pdinvs(&dev), want, "teardown invalidates every PD it backed");
        let pd = store.get(3).unwrap().pd_page.as_ref().unwrap();
        for s in 100..105 {
            assert_eq!(pd.read_u64(s * 8), Some(0));
        }
        // every PDINV precedes the doorbell of the SD clear
        let writes = dev.with(|d| d.writes.clone());
        let last_inv = writes.iter().rposition(|w| w.0 == regs::PFHMC_PDINV).unwrap();
        let db = writes.iter().position(|w| w.0 == regs::CQPDB).unwrap();
        assert!(last_inv < db);
    }
}
