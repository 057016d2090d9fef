//! The aarch64 identity map (built by the entry stub, 1 GiB level-1
//! blocks): checks and additions for MMIO.
//!
//! RAM (GiB 1) is Normal write-back; the low GiB (PL011, PCIe MMIO window,
//! low ECAM) and GiB 256 (high ECAM) are Device-nGnRE. [`map_uc`] accepts a
//! range already mapped Device and maps unmapped GiBs below [`MAP_LIMIT`]
//! as Device; it refuses a range that touches Normal memory (RAM).

use core::ptr::{addr_of, addr_of_mut};

const VALID_BLOCK: u64 = 0b01;
const AF: u64 = 1 << 10;
const PXN: u64 = 1 << 53;
const UXN: u64 = 1 << 54;
/// AttrIndx field (MAIR index): 0 = Device-nGnRE, 1 = Normal WB.
const ATTR_MASK: u64 = 0b111 << 2;
const ATTR_DEVICE: u64 = 0 << 2;
const GIB: u64 = 1 << 30;
/// Highest address (exclusive) the 39-bit VA space reaches.
pub const MAP_LIMIT: u64 = 512 * GIB;

unsafe extern "C" {
    static mut boot_l1: [u64; 512];
}

/// Why a range could not be mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// Empty range, or past [`MAP_LIMIT`].
    OutOfRange,
    /// The range shares a 1 GiB block with Normal memory (RAM).
    Normal,
}

fn entry(index: usize) -> u64 {
    // SAFETY: a read of the image's level-1 table; index < 512 (callers
    // bound it by MAP_LIMIT); single CPU, no concurrent writer.
    unsafe { (*addr_of!(boot_l1))[index] }
}

/// Maps `phys..phys + len` identity as Device-nGnRE (1 GiB granularity).
///
/// # Safety
///
/// The range must be device memory (a BAR) that no Rust reference points
/// into; unmapped GiBs it covers become Device blocks.
pub unsafe fn map_uc(phys: u64, len: u64) -> Result<(), MapError> {
    let end = phys.checked_add(len).filter(|&e| len != 0 && e <= MAP_LIMIT);
    let Some(end) = end else { return Err(MapError::OutOfRange) };
    let (first, last) = ((phys / GIB) as usize, ((end - 1) / GIB) as usize);
    for i in first..=last {
        let e = entry(i);
        if e & VALID_BLOCK != 0 && e & ATTR_MASK != ATTR_DEVICE {
            return Err(MapError::Normal);
        }
    }
    for i in first..=last {
        if entry(i) & VALID_BLOCK == 0 {
            // SAFETY: single-threaded boot code; the table is a static of
            // the image that only this module and the entry stub touch; the
            // GiB was unmapped, so no live access goes through it. The
            // barriers make the walker see the new entry.
            unsafe {
                (*addr_of_mut!(boot_l1))[i] = (i as u64 * GIB) | AF | PXN | UXN | VALID_BLOCK;
                core::arch::asm!("dsb ishst", "tlbi vmalle1", "dsb ish", "isb", options(nostack));
            }
        }
    }
    Ok(())
}

/// The attribute bits of the block that maps `phys` (for checks), if any.
pub fn entry_flags(phys: u64) -> Option<u64> {
    let index = usize::try_from(phys / GIB).ok().filter(|&i| i < 512)?;
    let e = entry(index);
    // Everything but the output address (bits 47:30).
    (e & VALID_BLOCK != 0).then_some(e & !0x0000_ffff_c000_0000)
}

/// Whether `phys` is mapped as Device memory (the x86_64 image's
/// "uncached").
pub fn is_uncached(phys: u64) -> bool {
    entry_flags(phys).is_some_and(|f| f & ATTR_MASK == ATTR_DEVICE)
}
