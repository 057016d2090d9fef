//! DMA memory, address translation and time: what the embedder provides.
//!
//! The names and semantics of [`Hal`] follow the `virtio-drivers` crate's
//! `Hal` trait, so that unikernel authors who have ported one driver already
//! know how to port this one. Two differences: allocation and sharing return
//! a [`Result`] (the driver turns exhaustion into a typed error, never a
//! panic), and the trait carries the monotonic clock every CQP wait needs.

use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;

/// A physical (bus) address as the device sees it.
pub type PhysAddr = u64;

/// The page size DMA allocations are counted in.
pub const PAGE_SIZE: usize = 4096;

/// Which way a buffer's contents move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum BufferDirection {
    /// The driver writes, the device reads.
    DriverToDevice,
    /// The device writes, the driver reads.
    DeviceToDriver,
    /// Both read and write.
    Both,
}

/// DMA memory could not be provided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DmaError {
    /// The platform has no memory left for the request.
    NoMemory,
    /// The buffer cannot be made visible to the device (e.g. no IOMMU slot).
    NotShareable,
}

/// The platform services the driver needs.
///
/// # Safety
///
/// Implementations must satisfy the contract of each method:
///
/// * [`dma_alloc`](Hal::dma_alloc) returns `pages` physically contiguous,
///   zeroed, page-aligned pages, mapped at the returned virtual address and
///   reachable by the device at the returned physical address, exclusively
///   owned by the caller until [`dma_dealloc`](Hal::dma_dealloc);
/// * [`share`](Hal::share) returns an address at which the device can access
///   the buffer for the given direction until [`unshare`](Hal::unshare); on a
///   platform with bounce buffers `unshare` copies device-written data back;
/// * [`mmio_phys_to_virt`](Hal::mmio_phys_to_virt) returns a mapping with
///   device (uncached) attributes;
/// * [`now`](Hal::now) never goes backwards.
///
/// The driver relies on these for memory safety.
///
/// # Example
///
/// A platform with identity-mapped RAM and a fixed region set aside for
/// DMA: a bump allocator over it (a real one also frees, e.g. a page
/// bitmap), no IOMMU (sharing is the identity), and a clock. Here the
/// region is a static array and the clock `std`'s, so the example runs on
/// a host.
///
/// ```
/// use core::ptr::NonNull;
/// use core::sync::atomic::{AtomicUsize, Ordering};
/// use core::time::Duration;
/// use irdma_hal::{BufferDirection, Dma, DmaError, Hal, PAGE_SIZE, PhysAddr};
///
/// #[repr(C, align(4096))]
/// struct Region([u8; 16 * PAGE_SIZE]);
/// static mut REGION: Region = Region([0; 16 * PAGE_SIZE]);
/// static NEXT: AtomicUsize = AtomicUsize::new(0);
///
/// struct Platform;
///
/// // SAFETY: the pages handed out are contiguous, page-aligned, zeroed (the
/// // region starts zeroed and no page is handed out twice), identity-mapped
/// // (physical = virtual on this platform); `share` is the identity because
/// // there is no IOMMU; the clock is monotonic.
/// unsafe impl Hal for Platform {
///     fn dma_alloc(pages: usize, _: BufferDirection) -> Result<(PhysAddr, NonNull<u8>), DmaError> {
///         let first = NEXT.fetch_add(pages, Ordering::Relaxed);
///         if first + pages > 16 {
///             return Err(DmaError::NoMemory);
///         }
///         // SAFETY: in bounds (checked above); no reference to REGION exists.
///         let p = unsafe { (&raw mut REGION.0).cast::<u8>().add(first * PAGE_SIZE) };
///         let v = NonNull::new(p).ok_or(DmaError::NoMemory)?;
///         Ok((p as PhysAddr, v))
///     }
///     unsafe fn dma_dealloc(_: PhysAddr, _: NonNull<u8>, _: usize) {}
///     unsafe fn share(buf: NonNull<[u8]>, _: BufferDirection) -> Result<PhysAddr, DmaError> {
///         Ok(buf.cast::<u8>().as_ptr() as PhysAddr)
///     }
///     unsafe fn unshare(_: PhysAddr, _: NonNull<[u8]>, _: BufferDirection) {}
///     fn now() -> Duration {
///         static T0: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
///         T0.get_or_init(std::time::Instant::now).elapsed()
///     }
/// }
///
/// let ring = Dma::<Platform>::new(2, BufferDirection::Both).unwrap();
/// assert_eq!(ring.paddr() % PAGE_SIZE as u64, 0);
/// assert_eq!(ring.read_u64(8), Some(0), "zeroed");
/// assert!(Dma::<Platform>::new(15, BufferDirection::Both).is_err(), "the region is 16 pages");
/// ```
pub unsafe trait Hal {
    /// Allocates `pages` contiguous zeroed pages of DMA memory.
    fn dma_alloc(
        pages: usize,
        direction: BufferDirection,
    ) -> Result<(PhysAddr, NonNull<u8>), DmaError>;

    /// Frees memory from [`dma_alloc`](Hal::dma_alloc).
    ///
    /// # Safety
    ///
    /// `paddr`, `vaddr` and `pages` must be exactly those of one earlier
    /// allocation that has not been freed, and the memory must no longer be
    /// accessed by the driver or the device.
    unsafe fn dma_dealloc(paddr: PhysAddr, vaddr: NonNull<u8>, pages: usize);

    /// Maps `size` bytes of MMIO at `paddr` and returns the virtual address.
    ///
    /// The driver itself never calls this: it is handed an already mapped
    /// [`Bar`](crate::Bar). It exists for the embedder's own set-up code and
    /// for parity with `virtio-drivers`' `Hal`. The default is the identity
    /// (virtual address = `paddr`; a `paddr` of 0 or one beyond the address
    /// space gives a dangling pointer); a platform that does not identity-map
    /// MMIO with device (uncached) attributes must override it.
    ///
    /// # Safety
    ///
    /// `paddr..paddr + size` must be an MMIO region the caller owns (a BAR of
    /// the device being driven).
    unsafe fn mmio_phys_to_virt(paddr: PhysAddr, size: usize) -> NonNull<u8> {
        let _ = size;
        usize::try_from(paddr)
            .ok()
            .and_then(|a| NonNull::new(core::ptr::with_exposed_provenance_mut(a)))
            .unwrap_or(NonNull::dangling())
    }

    /// Makes a caller-owned buffer visible to the device and returns its
    /// device address.
    ///
    /// # Safety
    ///
    /// `buffer` must be valid for the given direction until the matching
    /// [`unshare`](Hal::unshare), and must not be moved or freed before it.
    unsafe fn share(
        buffer: NonNull<[u8]>,
        direction: BufferDirection,
    ) -> Result<PhysAddr, DmaError>;

    /// Ends the device's access to a buffer from [`share`](Hal::share).
    ///
    /// # Safety
    ///
    /// `paddr`, `buffer` and `direction` must be exactly those of one earlier
    /// `share` that has not been unshared, and the device must be done with it.
    unsafe fn unshare(paddr: PhysAddr, buffer: NonNull<[u8]>, direction: BufferDirection);

    /// Monotonic time since an arbitrary origin; used for every timeout.
    fn now() -> Duration;

    /// Called while busy-waiting; a platform may pause, yield or step a model.
    fn relax() {
        core::hint::spin_loop();
    }
}

/// [`Hal::now`], out of line: the platform's clock read (often a counter
/// read and a division) is then one copy, not one per wait loop in the
/// control path (code size, issue #16).
#[inline(never)]
pub fn now<H: Hal>() -> Duration {
    H::now()
}

/// Busy-waits until `deadline` (from [`Hal::now`]) or until `done` is true.
/// Returns whether `done` became true.
pub fn wait_until<H: Hal>(deadline: Duration, mut done: impl FnMut() -> bool) -> bool {
    loop {
        if done() {
            return true;
        }
        if now::<H>() >= deadline {
            // One last look, so a completion that raced the clock is not lost.
            return done();
        }
        H::relax();
    }
}

/// A DMA allocation that frees itself when dropped.
///
/// # Access model
///
/// The device may write the memory at any time and a `Dma` is `Sync`, so
/// two threads may access the same bytes at once (issue #12). No Rust
/// reference to its contents is ever handed out, and **every CPU access to
/// DMA memory is a relaxed atomic access of one aligned 8-byte word
/// (`AtomicU64` at an 8-aligned offset)**, whatever the accessor:
///
/// * [`read_u64`](Self::read_u64)/[`write_u64`](Self::write_u64) (and the
///   `u64s` forms) are one atomic load/store of that word;
/// * [`read_u32`](Self::read_u32) and [`read_bytes`](Self::read_bytes) load
///   the words that hold the bytes and extract them;
/// * [`write_u32`](Self::write_u32) and [`write_bytes`](Self::write_bytes)
///   store the words they cover whole and update a word they cover in part
///   with an atomic read-modify-write (a compare-exchange loop), so a
///   concurrent write of the word's other bytes is never lost.
///
/// Rust's memory model makes racing atomic accesses of different sizes to
/// overlapping bytes undefined behaviour (issue #28: a `write_u32` racing a
/// `read_u64` of the same word), so one size for every access is what makes
/// sharing a `Dma` between threads sound. Views made from it
/// (`irdma::uk::QueueMem`) and anything else that reaches the memory through
/// [`vaddr`](Self::vaddr) must follow the same rule (an allocation the
/// device is never told about and that is never accessed through these
/// accessors may instead hold its owner's typed objects, as the driver's
/// private bookkeeping does). Partial-word writes keep a concurrent device
/// write of the word's other bytes on cache-coherent DMA. Byte order is
/// little-endian throughout. On x86_64 and aarch64 the loads and stores
/// compile to the same plain instructions a volatile access does; only a
/// partial-word write costs a locked (or exclusive) read-modify-write.
pub struct Dma<H: Hal> {
    paddr: PhysAddr,
    vaddr: NonNull<u8>,
    pages: usize,
    _hal: PhantomData<H>,
}

// SAFETY: the allocation is exclusively owned by this value; all accesses are
// atomic and bounds-checked, so moving it to another thread is sound.
unsafe impl<H: Hal> Send for Dma<H> {}
// SAFETY: shared access only performs relaxed atomic loads, stores and
// read-modify-writes, all of one size (an aligned 8-byte word, see the access
// model above), which may race with each other without undefined behaviour.
unsafe impl<H: Hal> Sync for Dma<H> {}

impl<H: Hal> Dma<H> {
    /// Allocates `pages` zeroed pages.
    // Out of line, as `drop`: keeps the platform's allocator in one place.
    #[inline(never)]
    pub fn new(pages: usize, direction: BufferDirection) -> Result<Self, DmaError> {
        if pages == 0 {
            return Err(DmaError::NoMemory);
        }
        let (paddr, vaddr) = H::dma_alloc(pages, direction)?;
        Ok(Dma { paddr, vaddr, pages, _hal: PhantomData })
    }

    /// Allocates enough zeroed pages for `bytes` bytes.
    #[inline(never)]
    pub fn with_bytes(bytes: usize, direction: BufferDirection) -> Result<Self, DmaError> {
        Self::new(bytes.div_ceil(PAGE_SIZE).max(1), direction)
    }

    /// Device address of the first byte.
    pub fn paddr(&self) -> PhysAddr {
        self.paddr
    }

    /// CPU address of the first byte.
    pub fn vaddr(&self) -> NonNull<u8> {
        self.vaddr
    }

    /// Number of pages.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.pages * PAGE_SIZE
    }

    /// Always false: a `Dma` holds at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    #[inline(always)]
    fn ptr<T>(&self, offset: usize) -> Option<*mut T> {
        let size = core::mem::size_of::<T>();
        if !offset.is_multiple_of(size) || offset.checked_add(size)? > self.len() {
            return None;
        }
        // SAFETY: in bounds of the allocation (checked above).
        Some(unsafe { self.vaddr.as_ptr().add(offset) }.cast())
    }

    /// Atomic read of the little-endian u64 at `offset` (8-aligned), or
    /// `None` out of bounds.
    #[inline(always)]
    pub fn read_u64(&self, offset: usize) -> Option<u64> {
        let p = self.ptr::<u64>(offset)?;
        // SAFETY: `ptr` checked bounds and alignment (8 = the alignment of
        // `AtomicU64` on every target with 64-bit atomics); the allocation
        // is live while `self` is, and is only ever accessed atomically.
        Some(u64::from_le(unsafe { AtomicU64::from_ptr(p) }.load(Ordering::Relaxed)))
    }

    /// Atomic write of a little-endian u64 at `offset` (8-aligned); returns
    /// false (and writes nothing) out of bounds.
    #[inline(always)]
    pub fn write_u64(&self, offset: usize, value: u64) -> bool {
        let Some(p) = self.ptr::<u64>(offset) else { return false };
        crate::barrier::trace_store(p as usize, value);
        // SAFETY: as in `read_u64`.
        unsafe { AtomicU64::from_ptr(p) }.store(value.to_le(), Ordering::Relaxed);
        true
    }

    /// The atomic word holding byte `offset` (the word at `offset & !7`):
    /// the one access unit of DMA memory, for the sub-word accessors; `None`
    /// out of bounds.
    #[inline(always)]
    fn word(&self, offset: usize) -> Option<&AtomicU64> {
        let p = self.ptr::<u64>(offset & !7)?;
        // SAFETY: `ptr` checked bounds and 8-alignment; the allocation is
        // live while `self` (and so the returned borrow) is, and every
        // access to it is an aligned 8-byte atomic (the access model above),
        // so no racing access of another size or a non-atomic one exists.
        Some(unsafe { AtomicU64::from_ptr(p) })
    }

    /// Replaces the bytes of the little-endian word at `offset & !7` that
    /// are set in `mask` with those of `bits` (already in place), in one
    /// atomic read-modify-write: a concurrent write of the word's other
    /// bytes (another thread or the device) is never lost.
    #[inline(always)]
    fn update_word(&self, offset: usize, mask: u64, bits: u64) -> bool {
        let Some(w) = self.word(offset) else { return false };
        // `fetch_update` retries its compare-exchange until no other store
        // came between its load and its store; the closure never refuses.
        let _ = w.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |raw| {
            Some(((u64::from_le(raw) & !mask) | (bits & mask)).to_le())
        });
        true
    }

    /// Atomic read of the little-endian u32 at `offset` (4-aligned): a load
    /// of the u64 that holds it.
    #[inline(always)]
    pub fn read_u32(&self, offset: usize) -> Option<u32> {
        if !offset.is_multiple_of(4) {
            return None;
        }
        let w = u64::from_le(self.word(offset)?.load(Ordering::Relaxed));
        Some((w >> (8 * (offset % 8))) as u32)
    }

    /// Atomic write of the little-endian u32 at `offset` (4-aligned): a
    /// read-modify-write of the u64 that holds it, the other half untouched.
    #[inline(always)]
    pub fn write_u32(&self, offset: usize, value: u32) -> bool {
        if !offset.is_multiple_of(4) {
            return false;
        }
        let shift = 8 * (offset % 8);
        self.update_word(offset, 0xffff_ffff << shift, u64::from(value) << shift)
    }

    /// Atomic reads of `dst.len()` consecutive little-endian u64s from
    /// `offset` (8-aligned); false, and `dst` untouched, unless all fit.
    // Out of line: one loop instead of an unrolled copy at each control-path
    // caller (code size, issue #16).
    #[inline(never)]
    pub fn read_u64s(&self, offset: usize, dst: &mut [u64]) -> bool {
        if !self.fits_u64s(offset, dst.len()) {
            return false;
        }
        for (i, x) in dst.iter_mut().enumerate() {
            *x = self.read_u64(offset + 8 * i).unwrap_or(0);
        }
        true
    }

    /// Atomic writes of `src` as consecutive little-endian u64s at `offset`
    /// (8-aligned); false, and nothing written, unless all fit.
    #[inline(never)] // as `read_u64s`
    pub fn write_u64s(&self, offset: usize, src: &[u64]) -> bool {
        if !self.fits_u64s(offset, src.len()) {
            return false;
        }
        for (i, w) in src.iter().enumerate() {
            self.write_u64(offset + 8 * i, *w);
        }
        true
    }

    fn fits_u64s(&self, offset: usize, n: usize) -> bool {
        offset.is_multiple_of(8)
            && n.checked_mul(8).and_then(|b| offset.checked_add(b)).is_some_and(|e| e <= self.len())
    }

    /// Copies `src` into the buffer at `offset`; false (and nothing
    /// written) if it does not fit. Words covered whole are atomic u64
    /// stores; a word covered in part (at either end) is updated by an
    /// atomic read-modify-write that keeps its other bytes.
    pub fn write_bytes(&self, offset: usize, src: &[u8]) -> bool {
        let Some(spans) = self.spans(offset, src.len()) else { return false };
        for (done, at, first, n) in spans {
            let mut b = [0u8; 8];
            if let (Some(d), Some(s)) = (b.get_mut(first..first + n), src.get(done..done + n)) {
                d.copy_from_slice(s);
            }
            let bits = u64::from_le_bytes(b);
            if n == 8 {
                let Some(w) = self.word(at) else { return false };
                w.store(bits.to_le(), Ordering::Relaxed);
            } else {
                // n < 8 and first + n <= 8: the mask covers bytes first..first+n.
                let mask = ((1u64 << (8 * n)) - 1) << (8 * first);
                if !self.update_word(at, mask, bits) {
                    return false;
                }
            }
        }
        true
    }

    /// Copies from the buffer at `offset` into `dst`; false (and `dst`
    /// untouched) if out of bounds. One atomic u64 load per word covered.
    pub fn read_bytes(&self, offset: usize, dst: &mut [u8]) -> bool {
        let Some(spans) = self.spans(offset, dst.len()) else { return false };
        for (done, at, first, n) in spans {
            let Some(w) = self.word(at) else { return false };
            let b = u64::from_le(w.load(Ordering::Relaxed)).to_le_bytes();
            if let (Some(d), Some(s)) = (dst.get_mut(done..done + n), b.get(first..first + n)) {
                d.copy_from_slice(s);
            }
        }
        true
    }

    /// `len` bytes at `offset` word by word, if they lie inside the buffer:
    /// for each 8-byte word they touch, (bytes before it, its buffer offset,
    /// its first byte within the word, its length).
    fn spans(
        &self,
        offset: usize,
        len: usize,
    ) -> Option<impl Iterator<Item = (usize, usize, usize, usize)>> {
        if offset.checked_add(len)? > self.len() {
            return None;
        }
        let mut done = 0;
        Some(core::iter::from_fn(move || {
            (done < len).then(|| {
                let at = offset + done;
                let first = at % 8;
                let n = (8 - first).min(len - done);
                let span = (done, at, first, n);
                done += n;
                span
            })
        }))
    }

    /// Zeroes the whole buffer.
    pub fn zero(&self) {
        for i in 0..self.len() / 8 {
            self.write_u64(i * 8, 0);
        }
    }
}

impl<H: Hal> Drop for Dma<H> {
    // Out of line: the platform's `dma_dealloc` would otherwise be inlined
    // at every place a `Dma` can be dropped (code size, issue #16).
    #[inline(never)]
    fn drop(&mut self) {
        // SAFETY: these are the values `dma_alloc` returned, freed once, and the
        // owner of a `Dma` guarantees the device no longer uses it by dropping.
        unsafe { H::dma_dealloc(self.paddr, self.vaddr, self.pages) }
    }
}

impl<H: Hal> core::fmt::Debug for Dma<H> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Dma").field("paddr", &self.paddr).field("pages", &self.pages).finish()
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use core::sync::atomic::{AtomicUsize, Ordering};
    use std::alloc::{Layout, alloc_zeroed, dealloc};

    static LIVE_PAGES: AtomicUsize = AtomicUsize::new(0);
    /// Tests that allocate through `HeapHal` run one at a time: the page
    /// count is global, and a test counting pages must not see another
    /// test's allocation (it did, as a flaky `left: 3, right: 2`).
    static HEAP: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn heap_lock() -> std::sync::MutexGuard<'static, ()> {
        HEAP.lock().unwrap_or_else(|e| e.into_inner())
    }

    struct HeapHal;
    // SAFETY: pages come from the global allocator, zeroed and page-aligned;
    // host memory is its own bus address in these tests.
    unsafe impl Hal for HeapHal {
        fn dma_alloc(
            pages: usize,
            _d: BufferDirection,
        ) -> Result<(PhysAddr, NonNull<u8>), DmaError> {
            let layout = Layout::from_size_align(pages * PAGE_SIZE, PAGE_SIZE).unwrap();
            // SAFETY: non-zero size (Dma::new refuses 0 pages).
            let p = NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or(DmaError::NoMemory)?;
            LIVE_PAGES.fetch_add(pages, Ordering::SeqCst);
            Ok((p.as_ptr() as u64, p))
        }
        unsafe fn dma_dealloc(_p: PhysAddr, v: NonNull<u8>, pages: usize) {
            let layout = Layout::from_size_align(pages * PAGE_SIZE, PAGE_SIZE).unwrap();
            // SAFETY: allocated above with the same layout.
            unsafe { dealloc(v.as_ptr(), layout) };
            LIVE_PAGES.fetch_sub(pages, Ordering::SeqCst);
        }
        unsafe fn mmio_phys_to_virt(p: PhysAddr, _s: usize) -> NonNull<u8> {
            NonNull::new(p as *mut u8).unwrap()
        }
        unsafe fn share(b: NonNull<[u8]>, _d: BufferDirection) -> Result<PhysAddr, DmaError> {
            Ok(b.as_ptr() as *mut u8 as u64)
        }
        unsafe fn unshare(_p: PhysAddr, _b: NonNull<[u8]>, _d: BufferDirection) {}
        fn now() -> Duration {
            Duration::ZERO
        }
    }

    #[test]
    fn dma_is_zeroed_bounds_checked_and_freed_on_drop() {
        let _g = heap_lock();
        let before = LIVE_PAGES.load(Ordering::SeqCst);
        {
            let d = Dma::<HeapHal>::with_bytes(5000, BufferDirection::Both).unwrap();
            assert_eq!(d.pages(), 2);
            assert_eq!(LIVE_PAGES.load(Ordering::SeqCst), before + 2);
            assert_eq!(d.read_u64(0), Some(0));
            assert!(d.write_u64(8184, 0x0102_0304_0506_0708));
            assert_eq!(d.read_u64(8184), Some(0x0102_0304_0506_0708));
            assert_eq!(d.read_u32(8188), Some(0x0102_0304));
            assert_eq!(d.read_u64(8192), None);
            assert_eq!(d.read_u64(4), None, "misaligned");
            assert!(!d.write_u64(8190, 1));
            let mut b = [0u8; 3];
            assert!(d.read_bytes(8184, &mut b));
            assert_eq!(b, [8, 7, 6]);
            assert!(!d.read_bytes(8190, &mut b));
            assert!(d.write_bytes(1, &[0xaa, 0xbb]));
            assert_eq!(d.read_u32(0), Some(0x00bb_aa00));
            assert!(!d.write_bytes(usize::MAX, &[1]));
            assert!(d.write_u64s(8168, &[1, 2, 3]));
            let mut w = [9u64; 3];
            assert!(d.read_u64s(8168, &mut w));
            assert_eq!(w, [1, 2, 3]);
            assert_eq!(d.read_u64(8176), Some(2));
            assert!(!d.read_u64s(8176, &mut w), "past the end");
            assert_eq!(w, [1, 2, 3], "untouched when refused");
            assert!(!d.read_u64s(4, &mut w), "misaligned");
            assert!(!d.write_u64s(8176, &[7, 7, 7]), "past the end");
            assert_eq!(d.read_u64(8176), Some(2), "nothing written when refused");
            assert!(!d.write_u64s(usize::MAX - 7, &[1]));
            assert!(d.read_u64s(0, &mut []));
            d.zero();
            assert_eq!(d.read_u64(8184), Some(0));
        }
        assert_eq!(LIVE_PAGES.load(Ordering::SeqCst), before);
        assert_eq!(Dma::<HeapHal>::new(0, BufferDirection::Both).unwrap_err(), DmaError::NoMemory);
    }

    /// The word-based sub-word accessors keep the byte semantics: every
    /// offset and length around word boundaries, against a plain byte copy.
    #[test]
    fn byte_and_u32_access_across_word_boundaries() {
        let _g = heap_lock();
        let d = Dma::<HeapHal>::new(1, BufferDirection::Both).unwrap();
        let base: std::vec::Vec<u8> = (0..48u8).map(|i| i ^ 0x5a).collect();
        for off in 0..20 {
            for len in 0..20 {
                let mut want = base.clone();
                let src: std::vec::Vec<u8> = (0..len as u8).map(|i| 0x80 | i).collect();
                want[off..off + len].copy_from_slice(&src);
                assert!(d.write_bytes(0, &base));
                assert!(d.write_bytes(off, &src));
                let mut got = [0u8; 48];
                assert!(d.read_bytes(0, &mut got));
                assert_eq!(got[..], want[..], "write_bytes({off}, {len} bytes)");
                let mut part = std::vec![0u8; len];
                assert!(d.read_bytes(off, &mut part));
                assert_eq!(part[..], want[off..off + len], "read_bytes({off}, {len})");
            }
        }
        assert!(d.write_u64(0, 0x8877_6655_4433_2211));
        assert!(d.write_u32(4, 0xddcc_bbaa));
        assert_eq!(d.read_u64(0), Some(0xddcc_bbaa_4433_2211));
        assert!(d.write_u32(0, 0x0403_0201));
        assert_eq!(d.read_u64(0), Some(0xddcc_bbaa_0403_0201));
        assert_eq!(d.read_u32(4), Some(0xddcc_bbaa));
        assert_eq!(d.read_u32(2), None, "misaligned");
        assert!(!d.write_u32(6, 1), "misaligned");
        assert!(!d.write_u32(PAGE_SIZE, 1), "past the end");
        assert_eq!(d.read_u32(PAGE_SIZE - 4), Some(0));
        assert!(!d.write_bytes(PAGE_SIZE - 1, &[1, 2]), "past the end");
        assert_eq!(d.read_u64(PAGE_SIZE - 8), Some(0), "nothing written when refused");
    }

    /// Issue #12: `Dma` is `Sync` and its accessors take `&self`, so two
    /// threads may store to the same word at once. With volatile (non-atomic)
    /// accesses that is a data race Miri reports as undefined behaviour; the
    /// accessors are atomic, so it is not (run under `cargo xtask test miri`).
    #[test]
    fn concurrent_access_to_one_word_is_not_a_data_race() {
        let _g = heap_lock();
        let d = Dma::<HeapHal>::new(1, BufferDirection::Both).unwrap();
        std::thread::scope(|s| {
            for t in 1..=2u64 {
                let d = &d;
                s.spawn(move || {
                    for i in 0..4 {
                        assert!(d.write_u64(0, t << 8 | i));
                        assert!(d.write_u32(8, t as u32));
                        assert!(d.write_bytes(16, &[t as u8]));
                        let _ = d.read_u64(0);
                        let mut b = [0u8; 1];
                        assert!(d.read_bytes(16, &mut b));
                    }
                });
            }
        });
        assert_eq!(d.read_u64(0).map(|v| v & 0xff), Some(3));
        assert!(matches!(d.read_u32(8), Some(1 | 2)));
    }

    /// Issue #28: two threads sharing one `&Dma` may access the same bytes
    /// with different accessors (a u32 or byte write racing a u64 read, and
    /// the other way round). Overlapping atomic accesses of different sizes
    /// are undefined behaviour in Rust's memory model (Miri: "overlapping
    /// unsynchronized atomic accesses must use the same access size"); every
    /// accessor is a whole aligned u64 access, so this is sound (run under
    /// `cargo xtask test miri`). Sub-word writes must also not lose a
    /// concurrent writer's bytes of the same word.
    #[test]
    fn mixed_size_access_to_one_word_is_sound() {
        let _g = heap_lock();
        let d = Dma::<HeapHal>::new(1, BufferDirection::Both).unwrap();
        std::thread::scope(|s| {
            let d = &d;
            s.spawn(move || {
                for i in 0..4u8 {
                    assert!(d.write_u32(0, 0x1111_1100 | u32::from(i)));
                    assert!(d.write_bytes(13, &[0xa0 | i, 0xb0 | i]));
                    let _ = d.read_u64(8);
                    let mut b = [0u8; 5];
                    assert!(d.read_bytes(5, &mut b));
                    let _ = d.read_u32(12);
                }
            });
            s.spawn(move || {
                for i in 0..4u8 {
                    let _ = d.read_u64(0);
                    let mut b = [0u8; 3];
                    assert!(d.read_bytes(1, &mut b));
                    let _ = d.read_u32(0);
                    assert!(d.write_u32(4, 0x2222_2200 | u32::from(i)));
                    assert!(d.write_bytes(8, &[0xc0 | i, 0xd0 | i, 0xe0 | i]));
                }
            });
        });
        // Each thread's last writes survive the other's writes to the same
        // word (no lost update of the bytes it did not write).
        assert_eq!(d.read_u64(0), Some(0x2222_2203_1111_1103));
        assert_eq!(d.read_u64(8), Some(0x00b3_a300_00e3_d3c3));
    }

    #[test]
    fn wait_until_reports_timeout_and_success() {
        // The test clock never advances: deadline zero expires at once.
        assert!(!wait_until::<HeapHal>(Duration::ZERO, || false));
        let mut n = 0;
        assert!(wait_until::<HeapHal>(Duration::from_secs(1), || {
            n += 1;
            n == 3
        }));
    }
}
