//! A `Hal` for host tests.
//!
//! * DMA pages come from the host heap; the bus address is the host virtual
//!   address, so a device model in the same process can reach them.
//! * Every allocation and share is recorded in a process-wide registry;
//!   [`FakeHal::live_pages`] and [`FakeHal::live_shares`] let a test prove it
//!   freed everything, and [`FakeHal::contains`] lets a model refuse DMA to
//!   memory the driver never gave it.
//! * `share` bounces through a copy (like a swiotlb/IOMMU platform): data the
//!   device writes reaches the caller's buffer only at `unshare`, so a
//!   forgotten `unshare` shows up as missing data in the test.
//! * Failure injection: [`FakeHal::fail_alloc_after`] and
//!   [`FakeHal::fail_share_after`] make the Nth next call fail.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use irdma_hal::{BufferDirection, DmaError, Hal, PAGE_SIZE, PhysAddr};

#[derive(Default)]
struct Registry {
    /// Allocations: bus address → pages.
    allocs: BTreeMap<u64, usize>,
    /// Shares: bounce-buffer bus address → (caller buffer address, len).
    shares: BTreeMap<u64, (usize, usize)>,
}

static REGISTRY: Mutex<Registry> =
    Mutex::new(Registry { allocs: BTreeMap::new(), shares: BTreeMap::new() });
/// Calls left before an injected allocation failure (negative: none armed).
static FAIL_ALLOC: AtomicI64 = AtomicI64::new(-1);
static FAIL_SHARE: AtomicI64 = AtomicI64::new(-1);

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Decrements an injection counter; true when this call must fail.
fn injected(counter: &AtomicI64) -> bool {
    let mut cur = counter.load(Ordering::SeqCst);
    loop {
        if cur < 0 {
            return false;
        }
        match counter.compare_exchange(cur, cur - 1, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => return cur == 0,
            Err(now) => cur = now,
        }
    }
}

/// Like Linux's `dma_alloc_coherent`, whose buffers are aligned to the
/// smallest page order covering the size (Documentation/core-api/dma-api.rst):
/// a 2 MiB direct HMC SD comes back 2 MiB aligned, as the model's
/// `Config::strict_sds` can demand.
fn layout(pages: usize) -> Layout {
    let size = pages.max(1) * PAGE_SIZE;
    // the alignment is a power of two ≥ PAGE_SIZE, the size a multiple of it
    // up to the alignment
    Layout::from_size_align(size, size.next_power_of_two()).expect("page layout")
}

/// The host-test `Hal`. See the module docs.
#[derive(Clone, Copy, Debug, Default)]
pub struct FakeHal;

impl FakeHal {
    /// Pages currently allocated through this Hal (all threads).
    pub fn live_pages() -> usize {
        registry().allocs.values().sum()
    }

    /// Buffers currently shared and not yet unshared (all threads).
    pub fn live_shares() -> usize {
        registry().shares.len()
    }

    /// Whether `len` bytes at bus address `pa` lie inside one live
    /// allocation or share: what a model may touch.
    pub fn contains(pa: u64, len: usize) -> bool {
        let reg = registry();
        let Some(end) = pa.checked_add(len as u64) else { return false };
        let in_alloc = reg
            .allocs
            .range(..=pa)
            .next_back()
            .is_some_and(|(&base, &pages)| end <= base + (pages * PAGE_SIZE) as u64);
        let in_share = reg
            .shares
            .range(..=pa)
            .next_back()
            .is_some_and(|(&base, &(_, blen))| end <= base + blen as u64);
        in_alloc || in_share
    }

    /// A copy of every live allocation and bounce buffer (bus address,
    /// contents), in address order: all the memory any model device of this
    /// process can reach, for before/after comparisons ("not one byte
    /// written outside the target").
    ///
    /// Only meaningful while no device writes concurrently (in-process,
    /// strict models: the device runs inside the driver's register writes).
    pub fn snapshot() -> Vec<(u64, Vec<u8>)> {
        let reg = registry();
        let allocs = reg.allocs.iter().map(|(&a, &pages)| (a, pages * PAGE_SIZE));
        let shares = reg.shares.iter().map(|(&a, &(_, len))| (a, len));
        let mut v: Vec<(u64, Vec<u8>)> = allocs
            .chain(shares)
            .map(|(a, len)| {
                let mut bytes = vec![0u8; len];
                // SAFETY: the registry lock is held, so the allocation or
                // bounce buffer at `a` (page-aligned whole pages) is live for
                // `len` bytes (bus address == host address) and cannot be
                // freed meanwhile; it is DMA memory, accessed only as aligned
                // 8-byte atomics, as `load_bytes` does.
                unsafe { crate::host_words::load_bytes(a as usize, &mut bytes) };
                (a, bytes)
            })
            .collect();
        v.sort_by_key(|e| e.0);
        v
    }

    /// Makes the `n`th next `dma_alloc` (0 = the very next) fail.
    pub fn fail_alloc_after(n: u32) {
        FAIL_ALLOC.store(n as i64, Ordering::SeqCst);
    }

    /// Makes the `n`th next `share` (0 = the very next) fail.
    pub fn fail_share_after(n: u32) {
        FAIL_SHARE.store(n as i64, Ordering::SeqCst);
    }

    /// Disarms both injections.
    pub fn clear_failures() {
        FAIL_ALLOC.store(-1, Ordering::SeqCst);
        FAIL_SHARE.store(-1, Ordering::SeqCst);
    }
}

fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

// SAFETY: pages come from the global allocator, zeroed, page-aligned and
// exclusively owned until `dma_dealloc`; shares are bounce buffers allocated
// here and copied back at `unshare`; `now` is `Instant`-based (monotonic).
unsafe impl Hal for FakeHal {
    fn dma_alloc(
        pages: usize,
        _direction: BufferDirection,
    ) -> Result<(PhysAddr, NonNull<u8>), DmaError> {
        if pages == 0 || injected(&FAIL_ALLOC) {
            return Err(DmaError::NoMemory);
        }
        // SAFETY: the layout has a non-zero size.
        let p = NonNull::new(unsafe { alloc_zeroed(layout(pages)) }).ok_or(DmaError::NoMemory)?;
        registry().allocs.insert(p.as_ptr() as u64, pages);
        Ok((p.as_ptr() as u64, p))
    }

    unsafe fn dma_dealloc(paddr: PhysAddr, vaddr: NonNull<u8>, pages: usize) {
        let known = registry().allocs.remove(&paddr);
        assert_eq!(known, Some(pages), "dma_dealloc of memory this Hal did not allocate");
        // SAFETY: allocated in `dma_alloc` with this layout and not freed before
        // (the registry entry was present).
        unsafe { dealloc(vaddr.as_ptr(), layout(pages)) };
    }

    unsafe fn mmio_phys_to_virt(paddr: PhysAddr, _size: usize) -> NonNull<u8> {
        NonNull::new(paddr as *mut u8).expect("null MMIO address")
    }

    unsafe fn share(
        buffer: NonNull<[u8]>,
        direction: BufferDirection,
    ) -> Result<PhysAddr, DmaError> {
        if injected(&FAIL_SHARE) {
            return Err(DmaError::NotShareable);
        }
        let len = buffer.len();
        let pages = len.div_ceil(PAGE_SIZE).max(1);
        // SAFETY: non-zero size.
        let bounce =
            NonNull::new(unsafe { alloc_zeroed(layout(pages)) }).ok_or(DmaError::NoMemory)?;
        if direction != BufferDirection::DeviceToDriver {
            // SAFETY: the caller guarantees `buffer` is valid for reads; the
            // bounce buffer is at least `len` bytes and does not overlap it.
            unsafe {
                std::ptr::copy_nonoverlapping(buffer.as_ptr() as *const u8, bounce.as_ptr(), len)
            };
        }
        registry()
            .shares
            .insert(bounce.as_ptr() as u64, (buffer.as_ptr() as *mut u8 as usize, len));
        Ok(bounce.as_ptr() as u64)
    }

    unsafe fn unshare(paddr: PhysAddr, buffer: NonNull<[u8]>, direction: BufferDirection) {
        let entry = registry().shares.remove(&paddr);
        let (orig, len) = entry.expect("unshare of an address this Hal did not share");
        assert_eq!(orig, buffer.as_ptr() as *mut u8 as usize, "unshare with another buffer");
        assert_eq!(len, buffer.len(), "unshare with another length");
        if direction != BufferDirection::DriverToDevice {
            let mut data = vec![0u8; len];
            // SAFETY: the bounce buffer (page-aligned whole pages) holds
            // `len` bytes; it is DMA memory, accessed only as aligned 8-byte
            // atomics (by the device model too), as `load_bytes` does.
            unsafe { crate::host_words::load_bytes(paddr as usize, &mut data) };
            // SAFETY: the caller's buffer is valid for `len` bytes of writes
            // per `share`'s contract; `data` is a fresh allocation.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), buffer.as_ptr() as *mut u8, len)
            };
        }
        let pages = len.div_ceil(PAGE_SIZE).max(1);
        // SAFETY: allocated in `share` with this layout.
        unsafe { dealloc(paddr as *mut u8, layout(pages)) };
    }

    fn now() -> Duration {
        epoch().elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use irdma_hal::Dma;

    // The registry is process-wide; keep these in one test so counts are exact.
    #[test]
    fn accounting_bounce_and_injection() {
        let base = FakeHal::live_pages();
        let d = Dma::<FakeHal>::new(3, BufferDirection::Both).unwrap();
        assert_eq!(FakeHal::live_pages(), base + 3);
        assert!(FakeHal::contains(d.paddr(), 3 * PAGE_SIZE));
        assert!(!FakeHal::contains(d.paddr(), 3 * PAGE_SIZE + 1));
        drop(d);
        assert_eq!(FakeHal::live_pages(), base);

        let mut buf = [1u8, 2, 3, 4];
        let nn = NonNull::from(&mut buf[..]);
        // SAFETY: `buf` lives until the unshare below.
        let pa = unsafe { FakeHal::share(nn, BufferDirection::Both) }.unwrap();
        assert_ne!(pa, buf.as_ptr() as u64, "share must bounce");
        assert!(FakeHal::contains(pa, 4));
        // The "device" writes the bounce buffer.
        // SAFETY: `pa` is a live 4-byte bounce buffer.
        unsafe { (pa as *mut u8).write(9) };
        assert_eq!(buf[0], 1, "not visible before unshare");
        // SAFETY: matches the share above.
        unsafe { FakeHal::unshare(pa, NonNull::from(&mut buf[..]), BufferDirection::Both) };
        assert_eq!(buf, [9, 2, 3, 4]);

        FakeHal::fail_alloc_after(1);
        let ok = Dma::<FakeHal>::new(1, BufferDirection::Both);
        assert!(ok.is_ok());
        assert_eq!(Dma::<FakeHal>::new(1, BufferDirection::Both).unwrap_err(), DmaError::NoMemory);
        assert!(Dma::<FakeHal>::new(1, BufferDirection::Both).is_ok(), "one-shot");
        FakeHal::fail_share_after(0);
        // SAFETY: would be unshared on success; it fails.
        let r = unsafe { FakeHal::share(NonNull::from(&mut buf[..]), BufferDirection::Both) };
        assert!(r.is_err());
        FakeHal::clear_failures();
    }
}
