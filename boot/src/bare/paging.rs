//! Uncached mappings for MMIO on top of the boot identity map.
//!
//! The entry stub identity-maps 0–4 GiB with write-back 2 MiB pages.
//! [`map_uc`] rewrites the 2 MiB entries covering a range with PCD|PWT (PAT
//! index 3 at power-on = UC), creating page directories for 4–8 GiB (where
//! firmware puts large 64-bit BARs) from a small static reserve.

use core::ptr::{addr_of, addr_of_mut};

use x86_64::VirtAddr;
use x86_64::instructions::tlb;
use x86_64::registers::control::Cr3;

const P: u64 = 1 << 0;
const RW: u64 = 1 << 1;
const PWT: u64 = 1 << 3;
const PCD: u64 = 1 << 4;
const PS: u64 = 1 << 7;
const HUGE: u64 = 2 << 20;
/// Highest address (exclusive) this module can map.
pub const MAP_LIMIT: u64 = 8 << 30;

unsafe extern "C" {
    static mut boot_pdpt: [u64; 512];
    static mut boot_pd: [u64; 2048];
}

#[repr(C, align(4096))]
struct HighPds([[u64; 512]; 4]);

/// Page directories for 4–8 GiB, filled on demand.
static mut HIGH_PDS: HighPds = HighPds([[0; 512]; 4]);

/// Why a range could not be mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// Empty range, or past [`MAP_LIMIT`].
    OutOfRange,
}

/// Maps `phys..phys + len` identity, uncached. Rounds out to 2 MiB.
///
/// # Safety
///
/// The range must be device memory (a BAR) that no Rust reference points
/// into, and must not overlap the image or the DMA pool: the 2 MiB pages
/// that cover it become uncached.
pub unsafe fn map_uc(phys: u64, len: u64) -> Result<(), MapError> {
    let end = phys.checked_add(len).filter(|&e| len != 0 && e <= MAP_LIMIT);
    let Some(end) = end else { return Err(MapError::OutOfRange) };
    let mut page = phys & !(HUGE - 1);
    while page < end {
        let index = (page / HUGE) as usize;
        let entry = page | P | RW | PS | PCD | PWT;
        // SAFETY: single-threaded boot code; the tables are statics of the
        // image that only this module and the entry stub touch, and indices
        // are bounded by MAP_LIMIT (< 2048 + 4 * 512).
        unsafe {
            if index < 2048 {
                (*addr_of_mut!(boot_pd))[index] = entry;
            } else {
                let hi = index - 2048;
                let (pd, slot) = (hi / 512, hi % 512);
                let pdpt_index = 4 + pd;
                let pd_phys = addr_of!(HIGH_PDS.0[pd]) as u64;
                let pdpt = &mut *addr_of_mut!(boot_pdpt);
                if pdpt[pdpt_index] & P == 0 {
                    pdpt[pdpt_index] = pd_phys | P | RW;
                }
                (*addr_of_mut!(HIGH_PDS.0[pd]))[slot] = entry;
            }
        }
        tlb::flush(VirtAddr::new(page));
        page += HUGE;
    }
    // A new PDPT entry is not covered by INVLPG of the leaf: reload CR3.
    let (frame, flags) = Cr3::read();
    // SAFETY: reloading the same top-level table only flushes the TLB.
    unsafe { Cr3::write(frame, flags) };
    Ok(())
}

/// The flags of the 2 MiB entry that maps `phys` (for checks), if mapped.
pub fn entry_flags(phys: u64) -> Option<u64> {
    let index = usize::try_from(phys / HUGE).ok()?;
    // SAFETY: reads of the image's page tables; nothing writes them
    // concurrently (single CPU, no interrupts).
    let e = unsafe {
        if index < 2048 {
            (*addr_of!(boot_pd))[index]
        } else {
            let hi = index - 2048;
            (*addr_of!(HIGH_PDS.0)).get(hi / 512)?[hi % 512]
        }
    };
    (e & P != 0).then_some(e & 0xfff)
}

/// Whether `phys` is mapped uncached (PCD|PWT).
pub fn is_uncached(phys: u64) -> bool {
    entry_flags(phys).is_some_and(|f| f & (PCD | PWT) == PCD | PWT)
}
