//! Raw queue memory: where a ring's entries live.
//!
//! A ring is placed anywhere the caller likes — a [`Dma`] allocation for a
//! real QP/CQ, or plain host memory for the conformance runner and unit tests
//! (including ring sizes smaller than any real GEN_2 queue). The device may
//! write this memory at any time, and several cores may write it at once
//! (the shared SQ), so it is accessed only through relaxed atomic loads and
//! stores of whole aligned qwords, never through Rust references or plain
//! (or volatile) accesses, which would be a data race (issue #12), nor
//! through atomics of another size, which racing an 8-byte access are
//! undefined behaviour too (issue #28). This is the one access model of all
//! DMA memory (see [`Dma`]'s docs), so a view and the `Dma` accessors of the
//! same memory may be used side by side from any threads. On x86_64 and
//! aarch64 a relaxed 64-bit atomic load or store is the same single `mov` /
//! `ldr` / `str` a volatile access compiles to, so the data path costs the same.

use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};

/// Relaxed atomic load of the little-endian qword at `p`.
///
/// # Safety
///
/// `p` is 8-byte aligned and valid for reads and writes for the duration of
/// the call, and every concurrent access to it is atomic (the contract of
/// [`QueueMem::from_raw`]).
#[inline(always)]
unsafe fn load(p: *mut u64) -> u64 {
    // SAFETY: aligned and valid (the caller); all accesses atomic, so
    // `from_ptr`'s rule against racing non-atomic accesses holds.
    u64::from_le(unsafe { AtomicU64::from_ptr(p) }.load(Ordering::Relaxed))
}

/// Relaxed atomic store of `v` as a little-endian qword at `p`.
///
/// # Safety
///
/// As [`load`].
#[inline(always)]
unsafe fn store(p: *mut u64, v: u64) {
    // SAFETY: as in `load`.
    unsafe { AtomicU64::from_ptr(p) }.store(v.to_le(), Ordering::Relaxed)
}

use irdma_hal::barrier::dma_wmb;
use irdma_hal::{Dma, Hal};

/// The quanta of one WQE in a ring: qword stores confined to them.
pub trait WqeSlot {
    /// Stores qword `i` of the WQE (dropped outside it).
    fn put(&self, i: usize, v: u64);
    /// Stores the qword carrying the WQE's valid bit: every store before it
    /// becomes visible to the device first (`dma_wmb`, spec data-path §1.8).
    fn publish(&self, i: usize, v: u64);
}

/// Qword-addressed ring memory the one WQE encoder writes into: real queue
/// memory ([`QueueMem`]) or, in the loom model, memory whose accesses loom
/// can see.
pub trait Words {
    /// A WQE's window into this memory.
    type Slot<'m>: WqeSlot
    where
        Self: 'm;
    /// Length in qwords.
    fn qwords(&self) -> usize;
    /// Loads qword `i` (0 out of range).
    fn read(&self, i: usize) -> u64;
    /// Stores qword `i` (dropped out of range).
    fn write(&self, i: usize, v: u64);
    /// Stores the qword carrying an entry's valid bit, after `dma_wmb`.
    #[inline(always)]
    fn publish(&self, i: usize, v: u64) {
        dma_wmb();
        self.write(i, v);
    }
    /// The `len` qwords from qword `base` (an empty window if they are not
    /// all inside the memory).
    fn slot(&self, base: usize, len: usize) -> Self::Slot<'_>;
}

/// A window of [`QueueMem`], bounds-checked once when it is made.
pub struct RawSlot<'m> {
    ptr: *mut u64,
    len: usize,
    _mem: PhantomData<&'m [u64]>,
}

impl RawSlot<'_> {
    /// Atomic load of qword `i` of the window (little-endian), 0 outside it.
    #[inline(always)]
    pub fn get(&self, i: usize) -> u64 {
        if i < self.len {
            // SAFETY: `i < len`, and the window is inside the region promised
            // by `from_raw` (checked by `slot`, or by `slot_unchecked`'s
            // caller), which is aligned and accessed only atomically.
            unsafe { load(self.ptr.add(i)) }
        } else {
            0
        }
    }
}

impl WqeSlot for RawSlot<'_> {
    #[inline(always)]
    fn put(&self, i: usize, v: u64) {
        if i < self.len {
            #[cfg(feature = "barrier-trace")]
            irdma_hal::barrier::trace_store(self.ptr.wrapping_add(i) as usize, v);
            // SAFETY: `i < len` and `slot` checked `base + len <= qwords`,
            // so the store is inside the region promised by `from_raw`,
            // which is aligned and accessed only atomically.
            unsafe { store(self.ptr.add(i), v) }
        }
    }
    #[inline(always)]
    fn publish(&self, i: usize, v: u64) {
        dma_wmb();
        self.put(i, v);
    }
}

/// A window of any [`Words`] memory, checked on every store.
pub struct CheckedSlot<'m, M: ?Sized> {
    mem: &'m M,
    base: usize,
    len: usize,
}

impl<'m, M: Words + ?Sized> CheckedSlot<'m, M> {
    /// The `len` qwords from `base` of `mem`.
    pub fn new(mem: &'m M, base: usize, len: usize) -> Self {
        CheckedSlot { mem, base, len }
    }
}

impl<M: Words + ?Sized> WqeSlot for CheckedSlot<'_, M> {
    #[inline(always)]
    fn put(&self, i: usize, v: u64) {
        if i < self.len {
            self.mem.write(self.base + i, v);
        }
    }
    #[inline(always)]
    fn publish(&self, i: usize, v: u64) {
        if i < self.len {
            self.mem.publish(self.base + i, v);
        }
    }
}

impl Words for QueueMem<'_> {
    type Slot<'m>
        = RawSlot<'m>
    where
        Self: 'm;
    #[inline(always)]
    fn qwords(&self) -> usize {
        QueueMem::qwords(self)
    }
    #[inline(always)]
    fn read(&self, i: usize) -> u64 {
        QueueMem::read(self, i)
    }
    #[inline(always)]
    fn write(&self, i: usize, v: u64) {
        QueueMem::write(self, i, v)
    }
    #[inline(always)]
    fn slot(&self, base: usize, len: usize) -> RawSlot<'_> {
        let ok = base.checked_add(len).is_some_and(|e| e <= self.qwords);
        let base = if ok { base } else { 0 };
        RawSlot {
            // SAFETY: `base <= qwords` (checked, or 0), so the pointer stays
            // inside or one past the region.
            ptr: unsafe { self.base.as_ptr().add(base) },
            len: if ok { len } else { 0 },
            _mem: PhantomData,
        }
    }
}

/// A borrowed region of queue memory, counted in 64-bit qwords.
///
/// Every access is bounds-checked: an index past the end reads 0 and drops
/// the write (device data can never turn into an out-of-bounds access).
#[derive(Debug)]
pub struct QueueMem<'a> {
    base: NonNull<u64>,
    qwords: usize,
    _mem: PhantomData<&'a [u64]>,
}

// SAFETY: the region is only accessed through atomic qword loads/stores,
// which are sound from any thread.
unsafe impl Send for QueueMem<'_> {}
// SAFETY: as above; concurrent accesses through `&QueueMem` are relaxed
// atomic accesses (no data race), with ordering provided by the callers'
// fences (the lock-free SQ path relies on this).
unsafe impl Sync for QueueMem<'_> {}

impl<'a> QueueMem<'a> {
    /// Wraps `qwords` qwords at `base`.
    ///
    /// # Safety
    ///
    /// `base` must be 8-byte aligned and valid for reads and writes of
    /// `qwords * 8` bytes for `'a`, and during `'a` the CPU may access that
    /// memory only as atomic accesses of aligned 8-byte words (through
    /// `QueueMem` views, `Dma` accessors or `AtomicU64`s): no Rust
    /// references to it as plain integers, no plain or volatile accesses, no
    /// atomics of another size (issue #28). (The device may access it at
    /// any time.)
    pub unsafe fn from_raw(base: NonNull<u64>, qwords: usize) -> Self {
        QueueMem { base, qwords, _mem: PhantomData }
    }

    /// A view of nothing: every read gives 0, every write is dropped.
    pub const fn empty() -> Self {
        QueueMem { base: NonNull::dangling(), qwords: 0, _mem: PhantomData }
    }

    /// A view of `bytes` bytes of `dma` starting at byte `offset` (both
    /// multiples of 8), or `None` if that is not inside the allocation.
    pub fn from_dma<H: Hal>(dma: &'a Dma<H>, offset: usize, bytes: usize) -> Option<Self> {
        if !offset.is_multiple_of(8) || !bytes.is_multiple_of(8) {
            return None;
        }
        if offset.checked_add(bytes)? > dma.len() {
            return None;
        }
        // SAFETY: `offset < len` (or bytes == 0 and offset <= len) keeps the
        // pointer inside or one past the allocation.
        let p = unsafe { dma.vaddr().as_ptr().add(offset) };
        let base = NonNull::new(p.cast::<u64>())?;
        // SAFETY: a `Dma` is page-aligned, zeroed DMA memory valid for the
        // borrow `'a`; `offset` is 8-aligned; `Dma` never hands out references
        // to its contents (only atomic accessors), matching our contract.
        Some(unsafe { Self::from_raw(base, bytes / 8) })
    }

    /// Length in qwords.
    #[inline(always)]
    pub fn qwords(&self) -> usize {
        self.qwords
    }

    /// Relaxed atomic load of qword `i` (little-endian), 0 when out of range.
    #[inline(always)]
    pub fn read(&self, i: usize) -> u64 {
        if i < self.qwords {
            // SAFETY: `i < qwords`, inside the aligned, atomically accessed
            // region promised by `from_raw`.
            unsafe { load(self.base.as_ptr().add(i)) }
        } else {
            0
        }
    }

    /// Relaxed atomic store of qword `i` (little-endian); dropped when out
    /// of range. Sound from several threads at once (issue #12).
    #[inline(always)]
    pub fn write(&self, i: usize, v: u64) {
        if i < self.qwords {
            #[cfg(feature = "barrier-trace")]
            irdma_hal::barrier::trace_store(self.base.as_ptr().wrapping_add(i) as usize, v);
            // SAFETY: `i < qwords`, inside the aligned, atomically accessed
            // region promised by `from_raw`.
            unsafe { store(self.base.as_ptr().add(i), v) }
        }
    }

    /// The `len` qwords from qword `base`, without the range check of
    /// [`Words::slot`].
    ///
    /// # Safety
    ///
    /// `base + len <= self.qwords()` (no overflow).
    #[inline(always)]
    pub(crate) unsafe fn slot_unchecked(&self, base: usize, len: usize) -> RawSlot<'_> {
        debug_assert!(base.checked_add(len).is_some_and(|e| e <= self.qwords));
        RawSlot {
            // SAFETY: the caller promises `base + len <= qwords`, so the
            // pointer stays inside or one past the region.
            ptr: unsafe { self.base.as_ptr().add(base) },
            len,
            _mem: PhantomData,
        }
    }

    /// A second view of the same memory with the same lifetime.
    ///
    /// Views only ever do atomic qword accesses, so aliasing views are as
    /// sound as the device's own accesses; what is unsafe is the lifetime.
    ///
    /// # Safety
    ///
    /// The alias must not be used after the memory is freed. For a view of
    /// `'a` borrowed memory that holds already; for a `QueueMem<'static>`
    /// made by an owner of the memory (`verbs::static_view`) the alias must
    /// stay inside that owner, like the original (issue #12: a public alias
    /// of a QP's ring outlived the QP).
    pub(crate) unsafe fn alias(&self) -> QueueMem<'a> {
        QueueMem { base: self.base, qwords: self.qwords, _mem: PhantomData }
    }
}

/// A shared reference to a `T` kept in host memory that the holder itself
/// owns (a [`Dma`] it frees when it is dropped), stored as a pointer.
///
/// A `&'static T` field there would be wrong, not just loose: every call
/// that takes the holder by value (`core::mem::drop(qp)`) would promise the
/// compiler that the memory stays allocated until it returns, and the drop
/// inside that call frees it (Miri: "deallocating while item is strongly
/// protected"). The shared reference is made only for the length of a
/// borrow of the `HeapRef` ([`core::ops::Deref`]).
#[derive(Debug)]
pub(crate) struct HeapRef<T>(NonNull<T>);

impl<T> Clone for HeapRef<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for HeapRef<T> {}

impl<T> HeapRef<T> {
    /// # Safety
    ///
    /// `*ptr` is an initialised `T` that stays allocated, and is changed
    /// only through interior mutability, for as long as this `HeapRef` or
    /// any copy of it is used.
    pub(crate) unsafe fn new(ptr: NonNull<T>) -> Self {
        HeapRef(ptr)
    }

    /// The pointer, for tables that hold it without a lifetime.
    pub(crate) fn as_ptr(self) -> NonNull<T> {
        self.0
    }
}

impl<T> core::ops::Deref for HeapRef<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: `new`'s contract: the `T` is live and only shared while
        // this value is in use, which the borrow of `self` covers.
        unsafe { self.0.as_ref() }
    }
}

// SAFETY: a `HeapRef<T>` only ever hands out `&T`, so sending or sharing it
// across threads is sound exactly when sharing a `&T` is: when `T: Sync`.
unsafe impl<T: Sync> Send for HeapRef<T> {}
// SAFETY: as for `Send`.
unsafe impl<T: Sync> Sync for HeapRef<T> {}

/// A `&'static mut [T]` over a DMA allocation the device never sees, used as
/// fixed-capacity bookkeeping memory.
///
/// # Safety
///
/// `dma` must outlive every use of the slice, must not be handed to the
/// device, and `T` must be valid when all-zero (the pages are zeroed) and
/// need at most page alignment.
pub(crate) unsafe fn dma_slice<H: Hal, T>(dma: &Dma<H>, len: usize) -> Option<&'static mut [T]> {
    let bytes = len.checked_mul(core::mem::size_of::<T>())?;
    if bytes > dma.len() || core::mem::align_of::<T>() > irdma_hal::PAGE_SIZE {
        return None;
    }
    // SAFETY: the allocation is `dma.len()` ≥ `bytes` bytes, page-aligned
    // (so aligned for `T`), zeroed (valid `T`s per the caller), exclusively
    // owned by the caller's object and never shared with the device, and
    // outlives the slice per this function's contract.
    Some(unsafe { core::slice::from_raw_parts_mut(dma.vaddr().as_ptr().cast::<T>(), len) })
}

/// A `'static` view of `bytes` bytes of `dma` at `offset` for a uk ring.
///
/// # Safety
///
/// The caller keeps `dma` alive, unmoved in memory (a `Dma` never moves its
/// pages), for as long as the view or anything built on it is used, and
/// never lets the view escape the object that owns `dma`.
pub(crate) unsafe fn static_view<H: Hal>(
    dma: &Dma<H>,
    offset: usize,
    bytes: usize,
) -> Option<QueueMem<'static>> {
    if !offset.is_multiple_of(8)
        || !bytes.is_multiple_of(8)
        || offset.checked_add(bytes)? > dma.len()
    {
        return None;
    }
    // SAFETY: `offset + bytes <= len`, so the pointer stays inside the
    // allocation.
    let p = unsafe { dma.vaddr().as_ptr().add(offset) };
    let base = core::ptr::NonNull::new(p.cast::<u64>())?;
    // SAFETY: page-aligned DMA memory plus an 8-aligned offset, valid for
    // `bytes` bytes while the caller keeps `dma` alive (this function's
    // contract); only atomic qword accesses are made through the view.
    Some(unsafe { QueueMem::from_raw(base, bytes / 8) })
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn views_of_dma_memory() {
        use irdma_hal::BufferDirection;
        use irdma_testkit::FakeHal;
        let dma = Dma::<FakeHal>::with_bytes(64 * 32 + 64, BufferDirection::Both).unwrap();
        assert!(QueueMem::from_dma(&dma, 4, 8).is_none(), "misaligned offset");
        assert!(QueueMem::from_dma(&dma, 0, 12).is_none(), "partial qword");
        assert!(QueueMem::from_dma(&dma, 8, dma.len()).is_none(), "past the end");
        let shadow = QueueMem::from_dma(&dma, 64 * 32, 64).unwrap();
        assert_eq!(shadow.qwords(), 8);
        shadow.write(7, 0x55);
        shadow.write(8, 0x66);
        assert_eq!(dma.read_u64(64 * 32 + 56), Some(0x55));
        assert_eq!(dma.read_u64(64 * 32 + 64), Some(0), "write past the view dropped");
        // A WQE window that does not fit is empty: its stores are dropped.
        let w = shadow.slot(6, 4);
        w.put(0, 1);
        assert_eq!(shadow.read(6), 0);
    }

    #[test]
    fn bounds_checked_volatile_access() {
        let mut buf = [0u64; 4];
        let base = NonNull::new(buf.as_mut_ptr()).unwrap();
        // SAFETY: `buf` outlives `m` and is only accessed through it.
        let m = unsafe { QueueMem::from_raw(base, 4) };
        m.write(3, 0x1122_3344_5566_7788);
        m.write(4, 7);
        assert_eq!(m.read(3), 0x1122_3344_5566_7788);
        assert_eq!(m.read(4), 0);
        assert_eq!(m.read(usize::MAX), 0);
        assert_eq!(m.qwords(), 4);
    }

    /// Issue #12: `QueueMem` is `Sync` and `write(&self)` is safe, so two
    /// threads may store to the same qword (the shared SQ's producers and
    /// completer share one ring). With volatile stores that is a data race
    /// Miri reports as undefined behaviour; the accesses are atomic, so it
    /// is not (run under `cargo xtask test miri`).
    #[test]
    fn concurrent_writes_to_one_qword_are_not_a_data_race() {
        let mut buf = [0u64; 4];
        let base = NonNull::new(buf.as_mut_ptr()).unwrap();
        // SAFETY: `buf` outlives `m` and is only accessed through it.
        let m = unsafe { QueueMem::from_raw(base, 4) };
        std::thread::scope(|s| {
            for t in 1..=2u64 {
                let m = &m;
                s.spawn(move || {
                    for i in 0..4 {
                        m.write(3, t << 8 | i);
                        m.slot(0, 4).put(3, t);
                        let _ = m.read(3);
                    }
                });
            }
        });
        assert!(matches!(m.read(3), 1 | 2 | 0x103 | 0x203));
    }
}
