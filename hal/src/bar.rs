//! Register access at BAR0 offsets.
//!
//! [`Bar`] is the transport-neutral interface the driver uses for every
//! register and doorbell. Two implementations exist: [`MmioBar`] for a mapped
//! PCI BAR (volatile pointers, never references into MMIO), and the device
//! model's in-process BAR used by the host tests (it lives with the tests so
//! that the model does not depend on this crate).

use core::ptr::NonNull;

use volatile::VolatilePtr;

/// Typed register access at byte offsets into BAR0.
///
/// Offsets are byte offsets from the start of the BAR; 32-bit accesses are
/// 4-byte aligned and 64-bit accesses 8-byte aligned. An implementation must
/// not panic: an access outside the BAR reads all-ones (what a PCIe read of a
/// removed device returns) and drops the write.
///
/// Methods take `&self`: registers are shared state and doorbells are written
/// from several cores at once, exactly as on hardware.
///
/// # Example
///
/// Besides [`MmioBar`], a `Bar` can be anything that answers register
/// accesses — a trace, a fault injector, a device model. A register file
/// that follows the all-ones rule:
///
/// ```
/// use core::sync::atomic::{AtomicU32, Ordering};
/// use irdma_hal::Bar;
///
/// struct Regs([AtomicU32; 64]);
///
/// impl Bar for Regs {
///     fn read32(&self, offset: usize) -> u32 {
///         self.0.get(offset / 4).map_or(u32::MAX, |r| r.load(Ordering::Relaxed))
///     }
///     fn write32(&self, offset: usize, value: u32) {
///         if let Some(r) = self.0.get(offset / 4) {
///             r.store(value, Ordering::Relaxed);
///         }
///     }
/// }
///
/// let bar = Regs([const { AtomicU32::new(0) }; 64]);
/// bar.write64(0x10, 0x1122_3344_5566_7788);
/// assert_eq!(bar.read32(0x10), 0x5566_7788, "low word first");
/// assert_eq!(bar.read64(0x10), 0x1122_3344_5566_7788);
/// assert_eq!(bar.read32(0x1000), u32::MAX, "outside the BAR");
/// ```
pub trait Bar {
    /// Reads the 32-bit register at `offset`.
    fn read32(&self, offset: usize) -> u32;
    /// Writes the 32-bit register at `offset`.
    fn write32(&self, offset: usize, value: u32);

    /// Reads a 64-bit value as two 32-bit reads, low word first.
    fn read64(&self, offset: usize) -> u64 {
        let lo = self.read32(offset) as u64;
        let hi = self.read32(offset + 4) as u64;
        lo | (hi << 32)
    }

    /// Writes a 64-bit value as two 32-bit writes, low word first.
    fn write64(&self, offset: usize, value: u64) {
        self.write32(offset, value as u32);
        self.write32(offset + 4, (value >> 32) as u32);
    }
}

impl<B: Bar + ?Sized> Bar for &B {
    #[inline(always)]
    fn read32(&self, offset: usize) -> u32 {
        (**self).read32(offset)
    }
    #[inline(always)]
    fn write32(&self, offset: usize, value: u32) {
        (**self).write32(offset, value)
    }
}

/// A BAR mapped into the address space, accessed through volatile pointers.
///
/// The mapping must be uncached (or write-combining for the doorbell page on
/// platforms that support it); how to map it is the embedder's business
/// (see `Hal::mmio_phys_to_virt`).
///
/// `MmioBar` is a handle (pointer and length): cloning it gives a second
/// handle to the same registers, which is what the driver does to keep one
/// for the CQP and one for the data path. Every access is a `&self` volatile
/// access, so two handles are no different from one shared by reference.
#[derive(Clone, Debug)]
pub struct MmioBar {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: `MmioBar` only performs volatile accesses to device registers, which
// are safe to issue from any core; it holds no thread-affine state.
unsafe impl Send for MmioBar {}
// SAFETY: as above; concurrent register accesses are what the device expects.
unsafe impl Sync for MmioBar {}

impl MmioBar {
    /// Wraps a mapped BAR of `len` bytes at `base`.
    ///
    /// ```
    /// use core::ptr::NonNull;
    /// use irdma_hal::{Bar, MmioBar};
    ///
    /// // On a platform: `Hal::mmio_phys_to_virt(bar0_phys, bar0_len)`. Here
    /// // plain memory stands in for the registers.
    /// let mut regs = vec![0u64; 512];
    /// let base = NonNull::new(regs.as_mut_ptr().cast::<u8>()).unwrap();
    /// // SAFETY: `regs` outlives `bar`, is 8-byte aligned, and is touched only
    /// // through `bar` while `bar` lives.
    /// let bar = unsafe { MmioBar::new(base, 4096) };
    /// bar.write32(0x40, 7);
    /// assert_eq!(bar.read32(0x40), 7);
    /// assert_eq!(bar.read32(4096), u32::MAX, "outside: all ones, as a removed device");
    /// drop(bar);
    /// assert_eq!(regs[8], 7);
    /// ```
    ///
    /// # Safety
    ///
    /// `base..base + len` must be a valid mapping of the device's BAR0 for as
    /// long as the returned value, any clone of it, and anything that borrows
    /// them live (the mapping is typically never undone), mapped
    /// with device (uncached) memory attributes, and `base` must be at least
    /// 8-byte aligned. Nothing else may create Rust references into it.
    pub unsafe fn new(base: NonNull<u8>, len: usize) -> Self {
        MmioBar { base, len }
    }

    /// Size of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (it never is for a real device).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pointer for an access of `size` bytes at `offset`, if it is aligned
    /// and inside the mapping.
    #[inline(always)]
    fn ptr<T>(&self, offset: usize) -> Option<NonNull<T>> {
        let size = core::mem::size_of::<T>();
        if !offset.is_multiple_of(size) || offset.checked_add(size)? > self.len {
            return None;
        }
        // SAFETY: `offset + size <= len`, so the pointer stays inside the
        // mapping promised by `new`'s caller, and it is non-null because
        // `base` is.
        Some(unsafe { self.base.add(offset) }.cast())
    }
}

impl MmioBar {
    /// A volatile read of a `T` at `offset`; `None` outside the mapping or
    /// misaligned.
    #[inline(always)]
    fn load<T: Copy>(&self, offset: usize) -> Option<T> {
        let p = self.ptr::<T>(offset)?;
        // SAFETY: `ptr` checked bounds and alignment; the mapping is valid
        // for volatile access per `MmioBar::new`.
        Some(unsafe { VolatilePtr::new_read_only(p) }.read())
    }

    /// A volatile write of a `T` at `offset`; dropped outside the mapping or
    /// misaligned.
    #[inline(always)]
    fn store<T: Copy>(&self, offset: usize, value: T) {
        if let Some(p) = self.ptr::<T>(offset) {
            // SAFETY: as in `load`.
            unsafe { VolatilePtr::new(p) }.write(value)
        }
    }
}

impl Bar for MmioBar {
    #[inline(always)]
    fn read32(&self, offset: usize) -> u32 {
        self.load(offset).unwrap_or(u32::MAX)
    }

    #[inline(always)]
    fn write32(&self, offset: usize, value: u32) {
        self.store(offset, value)
    }

    #[inline(always)]
    fn read64(&self, offset: usize) -> u64 {
        self.load(offset).unwrap_or(u64::MAX)
    }

    #[inline(always)]
    fn write64(&self, offset: usize, value: u64) {
        self.store(offset, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmio_bar_reads_and_writes_memory() {
        let mut mem = [0u64; 8];
        let base = NonNull::new(mem.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: `mem` outlives `bar` and nothing else touches it meanwhile.
        let bar = unsafe { MmioBar::new(base, 64) };
        bar.write32(8, 0x1234_5678);
        bar.write64(16, 0xfeed_face_dead_beef);
        assert_eq!(bar.read32(8), 0x1234_5678);
        assert_eq!(bar.read64(16), 0xfeed_face_dead_beef);
        assert_eq!(bar.read32(20), 0xfeed_face);
        let _ = bar;
        assert_eq!(mem[1], 0x1234_5678);
    }

    #[test]
    fn a_clone_is_a_second_handle_to_the_same_registers() {
        let mut mem = [0u32; 4];
        let base = NonNull::new(mem.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: `mem` outlives `bar` and its clone; nothing else touches it.
        let bar = unsafe { MmioBar::new(base, 16) };
        let other = bar.clone();
        bar.write32(4, 0xabcd);
        assert_eq!(other.read32(4), 0xabcd);
        other.write32(8, 7);
        assert_eq!(bar.read32(8), 7);
        assert_eq!(other.len(), 16);
        let _ = (bar, other);
        assert_eq!(mem, [0, 0xabcd, 7, 0]);
    }

    /// `Hal::mmio_phys_to_virt` has a default: the identity.
    #[test]
    fn mmio_phys_to_virt_defaults_to_identity() {
        use crate::dma::{BufferDirection, DmaError, Hal, PhysAddr};
        use core::time::Duration;
        struct Minimal;
        // SAFETY: never allocates or shares anything (every call fails).
        unsafe impl Hal for Minimal {
            fn dma_alloc(
                _: usize,
                _: BufferDirection,
            ) -> Result<(PhysAddr, NonNull<u8>), DmaError> {
                Err(DmaError::NoMemory)
            }
            unsafe fn dma_dealloc(_: PhysAddr, _: NonNull<u8>, _: usize) {}
            unsafe fn share(_: NonNull<[u8]>, _: BufferDirection) -> Result<PhysAddr, DmaError> {
                Err(DmaError::NotShareable)
            }
            unsafe fn unshare(_: PhysAddr, _: NonNull<[u8]>, _: BufferDirection) {}
            fn now() -> Duration {
                Duration::ZERO
            }
        }
        // SAFETY: the returned pointer is only compared, never accessed.
        let p = unsafe { Minimal::mmio_phys_to_virt(0xfe00_0000, 0x80_0000) };
        assert_eq!(p.as_ptr() as usize, 0xfe00_0000);
    }

    #[test]
    fn out_of_range_reads_all_ones_and_drops_writes() {
        let mut mem = [0u32; 4];
        let base = NonNull::new(mem.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: as above.
        let bar = unsafe { MmioBar::new(base, 16) };
        assert_eq!(bar.read32(16), u32::MAX);
        assert_eq!(bar.read32(usize::MAX - 1), u32::MAX);
        assert_eq!(bar.read64(12), u64::MAX);
        bar.write32(16, 7);
        // Misaligned access is refused the same way.
        assert_eq!(bar.read32(2), u32::MAX);
        bar.write32(2, 7);
        let _ = bar;
        assert_eq!(mem, [0; 4]);
    }
}
