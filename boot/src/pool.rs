//! A page-granular, first-fit DMA page pool over a fixed physical region.
//!
//! Bookkeeping lives outside the region (two bitmaps of `W` words, in the
//! image's `.bss`), so the region itself only ever holds DMA buffers. Every
//! free is checked: the range must be exactly one live allocation, which
//! catches double frees and wrong sizes instead of corrupting the pool.

/// Bytes per page.
pub const PAGE: u64 = 4096;

/// Why a free was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeError {
    /// Address not page-aligned, outside the pool, or zero pages.
    OutOfPool,
    /// The range is not exactly one live allocation (double free, wrong
    /// size, or a pointer into the middle of an allocation).
    NotAnAllocation,
}

/// Counters for accounting checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Pages currently allocated.
    pub live_pages: usize,
    /// Successful allocations so far.
    pub allocs: u64,
    /// Successful frees so far.
    pub frees: u64,
    /// Allocation requests refused for lack of a large enough free run.
    pub failed_allocs: u64,
    /// Most pages allocated at once since the last reset.
    pub peak_pages: usize,
}

/// A pool of up to `64 * W` pages starting at `base`.
#[derive(Debug)]
pub struct PagePool<const W: usize> {
    base: u64,
    pages: usize,
    used: [u64; W],
    /// Bit set on the first page of every live allocation.
    start: [u64; W],
    stats: PoolStats,
}

impl<const W: usize> PagePool<W> {
    /// Capacity in pages of any pool of this type.
    pub const CAPACITY: usize = W * 64;

    /// An empty pool that hands out nothing (until [`reset`](Self::reset)).
    pub const fn empty() -> Self {
        PagePool { base: 0, pages: 0, used: [0; W], start: [0; W], stats: zero_stats() }
    }

    /// Makes the pool manage `bytes / PAGE` pages at `base` (page-aligned),
    /// capped at the capacity; forgets every earlier allocation. Returns the
    /// page count, or `None` if `base` is not page-aligned.
    pub fn reset(&mut self, base: u64, bytes: u64) -> Option<usize> {
        if !base.is_multiple_of(PAGE) {
            return None;
        }
        let pages = usize::try_from(bytes / PAGE).unwrap_or(usize::MAX).min(Self::CAPACITY);
        // The last page must be addressable.
        base.checked_add(pages as u64 * PAGE)?;
        *self = Self::empty();
        self.base = base;
        self.pages = pages;
        Some(pages)
    }

    /// First physical address of the pool.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Number of pages managed.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// Accounting counters.
    pub fn stats(&self) -> PoolStats {
        self.stats
    }

    /// Whether `phys..phys + len` lies inside the pool.
    pub fn contains(&self, phys: u64, len: u64) -> bool {
        let end = self.base + self.pages as u64 * PAGE;
        phys >= self.base && phys.checked_add(len).is_some_and(|e| e <= end)
    }

    fn bit(map: &[u64; W], i: usize) -> bool {
        map.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    fn set(map: &mut [u64; W], i: usize, v: bool) {
        if let Some(w) = map.get_mut(i / 64) {
            if v {
                *w |= 1 << (i % 64);
            } else {
                *w &= !(1 << (i % 64));
            }
        }
    }

    /// Allocates `n` contiguous pages (first fit); returns the physical
    /// address of the first. The caller zeroes the memory.
    pub fn alloc(&mut self, n: usize) -> Option<u64> {
        if n == 0 || n > self.pages {
            self.stats.failed_allocs += 1;
            return None;
        }
        let mut run = 0;
        let mut i = 0;
        while i < self.pages {
            // Skip full words quickly.
            if run == 0 && i % 64 == 0 && self.used.get(i / 64) == Some(&u64::MAX) {
                i += 64;
                continue;
            }
            if Self::bit(&self.used, i) {
                run = 0;
            } else {
                run += 1;
                if run == n {
                    let first = i + 1 - n;
                    for p in first..=i {
                        Self::set(&mut self.used, p, true);
                    }
                    Self::set(&mut self.start, first, true);
                    self.stats.live_pages += n;
                    self.stats.peak_pages = self.stats.peak_pages.max(self.stats.live_pages);
                    self.stats.allocs += 1;
                    return Some(self.base + first as u64 * PAGE);
                }
            }
            i += 1;
        }
        self.stats.failed_allocs += 1;
        None
    }

    /// Frees the `n` pages at `phys`, which must be exactly one live
    /// allocation.
    pub fn free(&mut self, phys: u64, n: usize) -> Result<(), FreeError> {
        if n == 0 || !phys.is_multiple_of(PAGE) || !self.contains(phys, n as u64 * PAGE) {
            return Err(FreeError::OutOfPool);
        }
        let first = ((phys - self.base) / PAGE) as usize;
        let last = first + n - 1;
        let exact_start = Self::bit(&self.start, first);
        let all_used = (first..=last).all(|p| Self::bit(&self.used, p));
        let no_inner_start = (first + 1..=last).all(|p| !Self::bit(&self.start, p));
        // The page after the run must not belong to the same allocation.
        let ends_here = last + 1 >= self.pages
            || !Self::bit(&self.used, last + 1)
            || Self::bit(&self.start, last + 1);
        if !(exact_start && all_used && no_inner_start && ends_here) {
            return Err(FreeError::NotAnAllocation);
        }
        for p in first..=last {
            Self::set(&mut self.used, p, false);
        }
        Self::set(&mut self.start, first, false);
        self.stats.live_pages -= n;
        self.stats.frees += 1;
        Ok(())
    }

    /// Length in pages of the longest free run.
    pub fn largest_free_run(&self) -> usize {
        let (mut best, mut run) = (0, 0);
        for i in 0..self.pages {
            if Self::bit(&self.used, i) {
                run = 0;
            } else {
                run += 1;
                best = best.max(run);
            }
        }
        best
    }
}

const fn zero_stats() -> PoolStats {
    PoolStats { live_pages: 0, allocs: 0, frees: 0, failed_allocs: 0, peak_pages: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 0x400_0000;

    fn pool(pages: u64) -> PagePool<4> {
        let mut p = PagePool::<4>::empty();
        assert_eq!(p.reset(BASE, pages * PAGE), Some(pages as usize));
        p
    }

    #[test]
    fn empty_pool_hands_out_nothing() {
        let mut p = PagePool::<4>::empty();
        assert_eq!(p.alloc(1), None);
        assert_eq!(p.free(0, 1), Err(FreeError::OutOfPool));
        assert_eq!(p.stats().failed_allocs, 1);
    }

    #[test]
    fn reset_checks_alignment_and_caps_capacity() {
        let mut p = PagePool::<4>::empty();
        assert_eq!(p.reset(BASE + 1, PAGE), None);
        assert_eq!(p.reset(BASE, 1 << 30), Some(256));
        assert_eq!(p.reset(u64::MAX - PAGE + 1, 2 * PAGE), None);
    }

    #[test]
    fn first_fit_contiguous_and_balanced() {
        let mut p = pool(200);
        let a = p.alloc(1).unwrap();
        let b = p.alloc(70).unwrap(); // crosses a bitmap word
        let c = p.alloc(3).unwrap();
        assert_eq!((a, b, c), (BASE, BASE + PAGE, BASE + 71 * PAGE));
        assert_eq!(p.stats().live_pages, 74);
        p.free(b, 70).unwrap();
        // The hole is reused first fit.
        assert_eq!(p.alloc(2), Some(BASE + PAGE));
        assert_eq!(p.alloc(68), Some(BASE + 3 * PAGE));
        assert_eq!(p.alloc(127), None, "only 126 pages left after c");
        assert_eq!(p.largest_free_run(), 126);
        assert_eq!(p.alloc(126), Some(BASE + 74 * PAGE));
        assert_eq!(p.alloc(1), None);
        assert_eq!(p.stats().failed_allocs, 2);
        for (addr, n) in [(a, 1), (BASE + PAGE, 2), (BASE + 3 * PAGE, 68), (c, 3)] {
            p.free(addr, n).unwrap();
        }
        p.free(BASE + 74 * PAGE, 126).unwrap();
        let s = p.stats();
        assert_eq!((s.live_pages, s.allocs, s.frees), (0, 6, 6));
        // 1 + 2 + 68 + 3 + 126 pages were live at once; frees keep the peak.
        assert_eq!(s.peak_pages, 200);
        assert_eq!(p.largest_free_run(), 200);
    }

    #[test]
    fn bad_frees_are_refused_and_change_nothing() {
        let mut p = pool(16);
        let a = p.alloc(4).unwrap();
        let b = p.alloc(4).unwrap();
        assert_eq!(p.free(a, 3), Err(FreeError::NotAnAllocation), "too short");
        assert_eq!(p.free(a, 5), Err(FreeError::NotAnAllocation), "spills into b");
        assert_eq!(p.free(a + PAGE, 3), Err(FreeError::NotAnAllocation), "middle");
        assert_eq!(p.free(a + 1, 4), Err(FreeError::OutOfPool));
        assert_eq!(p.free(BASE + 14 * PAGE, 4), Err(FreeError::OutOfPool));
        assert_eq!(p.free(a, 0), Err(FreeError::OutOfPool));
        assert_eq!(p.stats().live_pages, 8);
        p.free(a, 4).unwrap();
        assert_eq!(p.free(a, 4), Err(FreeError::NotAnAllocation), "double free");
        p.free(b, 4).unwrap();
        assert_eq!(p.stats().live_pages, 0);
    }

    #[test]
    fn adjacent_allocations_free_independently() {
        let mut p = pool(8);
        let a = p.alloc(2).unwrap();
        let b = p.alloc(2).unwrap();
        assert_eq!(b, a + 2 * PAGE);
        // `a` is followed by the start of `b`, so freeing `a` alone is exact.
        p.free(a, 2).unwrap();
        assert!(p.contains(b, 2 * PAGE));
        assert!(!p.contains(BASE + 8 * PAGE, 1));
        p.free(b, 2).unwrap();
    }

    #[test]
    fn zero_and_oversized_requests_fail() {
        let mut p = pool(8);
        assert_eq!(p.alloc(0), None);
        assert_eq!(p.alloc(9), None);
        assert_eq!(p.alloc(usize::MAX), None);
        assert_eq!(p.alloc(8), Some(BASE));
    }
}
