//! The firmware's `irdma_hal::Hal`: DMA pages from a static pool.
//!
//! The firmware runs identity-mapped (virtual = physical = bus address, no
//! IOMMU), so the pool's own addresses are what the device uses, `share`
//! is the identity and `unshare` has nothing to do. The pool is one static
//! array, 2 MiB aligned, so it can be registered as one MR of 2 MiB pages
//! whose lkey serves every local SGE (E810 has no local DMA lkey).

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::ptr::NonNull;
use core::time::Duration;

use irdma_hal::{BufferDirection, DmaError, Hal, PAGE_SIZE, PhysAddr};

/// Pool size: 128 MiB (HMC backing for `Profile::SMALL`, control queues,
/// the example's buffers; `Device::footprint` says what a profile takes).
pub const POOL_BYTES: usize = 128 << 20;
const POOL_PAGES: usize = POOL_BYTES / PAGE_SIZE;
/// The pool in 2 MiB pages (for the MR that covers it).
pub const POOL_HUGE_PAGES: usize = POOL_BYTES >> 21;

#[repr(C, align(2097152))]
struct PoolMem(UnsafeCell<MaybeUninit<[u8; POOL_BYTES]>>);

// SAFETY: the memory is only reached through pointers `dma_alloc` hands
// out, each range to one owner at a time (the bitmap below records it).
unsafe impl Sync for PoolMem {}

/// Uninitialised (it lives in .bss and costs nothing in the image); every
/// allocation is zeroed before it is handed out.
static MEM: PoolMem = PoolMem(UnsafeCell::new(MaybeUninit::uninit()));

/// One bit per 4 KiB page: set while allocated.
static USED: spin::Mutex<[u64; POOL_PAGES / 64]> = spin::Mutex::new([0; POOL_PAGES / 64]);

/// Bus (= virtual) address of the pool's first byte.
pub fn base() -> u64 {
    MEM.0.get() as u64
}

fn is_used(used: &[u64], page: usize) -> bool {
    used.get(page / 64).is_some_and(|w| w & (1 << (page % 64)) != 0)
}

fn mark(used: &mut [u64], first: usize, n: usize, on: bool) {
    for p in first..first + n {
        if let Some(w) = used.get_mut(p / 64) {
            if on {
                *w |= 1 << (p % 64);
            } else {
                *w &= !(1 << (p % 64));
            }
        }
    }
}

/// First fit: the index of `n` free contiguous pages, now marked used.
fn take(n: usize) -> Option<usize> {
    let mut used = USED.lock();
    let mut run = 0;
    for p in 0..POOL_PAGES {
        if is_used(&used[..], p) {
            run = 0;
            continue;
        }
        run += 1;
        if run == n {
            let first = p + 1 - n;
            mark(&mut used[..], first, n, true);
            return Some(first);
        }
    }
    None
}

/// The firmware's platform services.
pub struct PoolHal;

// SAFETY: `dma_alloc` returns `pages` contiguous, page-aligned pages of the
// static pool, zeroed, recorded in the bitmap until `dma_dealloc` (so never
// handed out twice); the firmware is identity-mapped without an IOMMU, so
// the virtual address is the device's address and `share` may return the
// buffer's own address; `now` reads a free-running counter that never goes
// backwards. `mmio_phys_to_virt` keeps the default (identity): the platform
// maps BAR0 uncached at its physical address.
unsafe impl Hal for PoolHal {
    fn dma_alloc(
        pages: usize,
        _direction: BufferDirection,
    ) -> Result<(PhysAddr, NonNull<u8>), DmaError> {
        if pages == 0 || pages > POOL_PAGES {
            return Err(DmaError::NoMemory);
        }
        let first = take(pages).ok_or(DmaError::NoMemory)?;
        // SAFETY: `first + pages <= POOL_PAGES`, so the offset stays inside
        // the static pool.
        let ptr = unsafe { MEM.0.get().cast::<u8>().add(first * PAGE_SIZE) };
        let ptr = NonNull::new(ptr).ok_or(DmaError::NoMemory)?;
        // SAFETY: the pages were just marked ours in the bitmap, so nothing
        // else writes them; the range lies inside the pool.
        unsafe { core::ptr::write_bytes(ptr.as_ptr(), 0, pages * PAGE_SIZE) };
        Ok((ptr.as_ptr() as u64, ptr))
    }

    unsafe fn dma_dealloc(paddr: PhysAddr, _vaddr: NonNull<u8>, pages: usize) {
        let Some(off) = paddr.checked_sub(base()) else { return };
        let first = off as usize / PAGE_SIZE;
        if first + pages <= POOL_PAGES {
            mark(&mut USED.lock()[..], first, pages, false);
        }
    }

    unsafe fn share(
        buffer: NonNull<[u8]>,
        _direction: BufferDirection,
    ) -> Result<PhysAddr, DmaError> {
        Ok(buffer.cast::<u8>().as_ptr() as u64)
    }

    unsafe fn unshare(_paddr: PhysAddr, _buffer: NonNull<[u8]>, _direction: BufferDirection) {}

    fn now() -> Duration {
        crate::platform::now()
    }
}
