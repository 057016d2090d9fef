//! The image's `irdma_hal::Hal`: a static DMA page pool in guest RAM.
//!
//! Physical = virtual everywhere (identity map), so `share` returns the
//! buffer's own address and `unshare` has nothing to copy back. The pool
//! region ([`POOL_BASE`]: `contract::DMA_POOL_BASE` into RAM, 128 MiB) holds
//! only DMA buffers, never code; the host device model reaches it at
//! RAM-file offset = address − `arch::RAM_BASE`.

use core::ptr::NonNull;
use core::time::Duration;

use irdma_boot::contract::{DMA_POOL_BASE, DMA_POOL_SIZE};
use irdma_boot::pool::{FreeError, PAGE, PagePool, PoolStats};
use irdma_hal::{BufferDirection, DmaError, Hal, PhysAddr};

use super::{arch, clock, paging};

/// Guest-physical base of the DMA pool: `DMA_POOL_BASE` bytes into RAM.
pub const POOL_BASE: u64 = arch::RAM_BASE + DMA_POOL_BASE;

/// Bitmap words: 512 × 64 pages = 128 MiB.
const POOL_WORDS: usize = 512;

static POOL: spin::Mutex<PagePool<POOL_WORDS>> = spin::Mutex::new(PagePool::empty());
/// Frees the pool refused (double free, wrong size): a driver bug.
static BAD_FREES: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Hands the pool region to the allocator; call once the memory map says
/// it is RAM. Returns the page count.
pub fn init_pool() -> Option<usize> {
    POOL.lock().reset(POOL_BASE, DMA_POOL_SIZE)
}

/// Pool counters.
pub fn stats() -> PoolStats {
    POOL.lock().stats()
}

/// Pages managed by the pool.
pub fn pool_pages() -> usize {
    POOL.lock().pages()
}

/// Whether `phys..phys + len` lies in the pool.
pub fn in_pool(phys: u64, len: u64) -> bool {
    POOL.lock().contains(phys, len)
}

/// Frees the pool refused so far.
pub fn bad_frees() -> u64 {
    BAD_FREES.load(core::sync::atomic::Ordering::Relaxed)
}

/// Frees through the checked path, reporting the refusal (for tests).
pub fn try_free(phys: u64, pages: usize) -> Result<(), FreeError> {
    POOL.lock().free(phys, pages)
}

/// The unikernel's platform services.
pub struct BootHal;

// SAFETY: `dma_alloc` hands out page-aligned, zeroed, contiguous pages of the
// pool, exclusively (the pool bitmap records them until freed), identity
// mapped so the returned physical address is the device address; `share`
// returns the identity address of memory that is RAM in the RAM file;
// `mmio_phys_to_virt` maps the range uncached (x86_64) or Device (aarch64);
// `now` is the TSC or the generic timer's virtual counter, monotonic.
unsafe impl Hal for BootHal {
    fn dma_alloc(
        pages: usize,
        _direction: BufferDirection,
    ) -> Result<(PhysAddr, NonNull<u8>), DmaError> {
        let phys = POOL.lock().alloc(pages).ok_or(DmaError::NoMemory)?;
        let ptr = NonNull::new(phys as *mut u8).ok_or(DmaError::NoMemory)?;
        // SAFETY: the pages are in the identity-mapped pool region and now
        // exclusively ours; `pages * PAGE` does not overflow (it fitted).
        unsafe { core::ptr::write_bytes(ptr.as_ptr(), 0, pages * PAGE as usize) };
        Ok((phys, ptr))
    }

    unsafe fn dma_dealloc(paddr: PhysAddr, _vaddr: NonNull<u8>, pages: usize) {
        if POOL.lock().free(paddr, pages).is_err() {
            BAD_FREES.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        }
    }

    unsafe fn mmio_phys_to_virt(paddr: PhysAddr, size: usize) -> NonNull<u8> {
        // SAFETY: the caller owns the MMIO range (a BAR), per the trait.
        let mapped = unsafe { paging::map_uc(paddr, size as u64) };
        match (mapped, NonNull::new(paddr as *mut u8)) {
            (Ok(()), Some(p)) => p,
            // The trait has no error path, and BAR discovery refuses BARs
            // this image cannot map before any driver runs: stop loudly.
            _ => {
                super::serial::println!("FATAL: cannot map MMIO {paddr:#x}+{size:#x}");
                super::arch::exit(irdma_boot::contract::EXIT_FAIL)
            }
        }
    }

    unsafe fn share(
        buffer: NonNull<[u8]>,
        _direction: BufferDirection,
    ) -> Result<PhysAddr, DmaError> {
        Ok(buffer.as_ptr() as *mut u8 as u64)
    }

    unsafe fn unshare(_paddr: PhysAddr, _buffer: NonNull<[u8]>, _direction: BufferDirection) {}

    fn now() -> Duration {
        clock::now()
    }
}
