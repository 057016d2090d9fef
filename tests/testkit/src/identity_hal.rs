//! A `Hal` that maps every buffer to its own address and touches nothing:
//! for code that only needs `share`/`unshare` (the rw layer's decisions and
//! chains), where the test supplies made-up bus addresses.
//!
//! Accounting and failure injection are per thread (each test runs on its
//! own thread, so counts are exact): [`IdentityHal::reset`] arms a failure of
//! the Nth `share` of this thread and zeroes the counters, [`IdentityHal::arm`]
//! re-arms it mid-session keeping the live count; [`IdentityHal::live`] is
//! shares minus unshares. [`IdentityHal::set_offset`] adds a constant to
//! every bus address (a harness whose other side maps buffers that way).

use std::cell::Cell;
use std::ptr::NonNull;
use std::time::Duration;

use irdma_hal::{BufferDirection, DmaError, Hal, PhysAddr};

thread_local! {
    static CALLS: Cell<u64> = const { Cell::new(0) };
    static FAIL_AT: Cell<u64> = const { Cell::new(0) };
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static OFFSET: Cell<u64> = const { Cell::new(0) };
}

/// See the module docs.
#[derive(Clone, Copy, Debug, Default)]
pub struct IdentityHal;

impl IdentityHal {
    /// Zeroes this thread's counters and makes its `fail_at`-th next `share`
    /// fail (1 = the very next; 0 = never).
    /// The bus-address offset goes back to 0.
    pub fn reset(fail_at: u64) {
        Self::arm(fail_at);
        LIVE.set(0);
        OFFSET.set(0);
    }

    /// As [`IdentityHal::reset`] for the `share` count and the armed failure
    /// only: buffers still shared stay counted in [`IdentityHal::live`].
    pub fn arm(fail_at: u64) {
        CALLS.set(0);
        FAIL_AT.set(fail_at);
    }

    /// From now on (until the next reset) `share` returns the buffer's
    /// address plus `offset` (wrapping) on this thread.
    pub fn set_offset(offset: u64) {
        OFFSET.set(offset);
    }

    /// `share` calls on this thread since the last reset (failed ones too).
    pub fn calls() -> u64 {
        CALLS.get()
    }

    /// Buffers shared and not unshared on this thread since the last reset.
    pub fn live() -> i64 {
        LIVE.get()
    }
}

// SAFETY: nothing is allocated or dereferenced: `dma_alloc` always fails,
// `share` computes an address from the one it is given and `unshare` only
// counts, so no memory is ever accessed through this Hal.
unsafe impl Hal for IdentityHal {
    fn dma_alloc(_: usize, _: BufferDirection) -> Result<(PhysAddr, NonNull<u8>), DmaError> {
        Err(DmaError::NoMemory)
    }
    unsafe fn dma_dealloc(_: PhysAddr, _: NonNull<u8>, _: usize) {}
    unsafe fn mmio_phys_to_virt(_: PhysAddr, _: usize) -> NonNull<u8> {
        NonNull::dangling()
    }
    unsafe fn share(buffer: NonNull<[u8]>, _: BufferDirection) -> Result<PhysAddr, DmaError> {
        let n = CALLS.get() + 1;
        CALLS.set(n);
        if FAIL_AT.get() == n {
            return Err(DmaError::NotShareable);
        }
        LIVE.set(LIVE.get() + 1);
        Ok((buffer.cast::<u8>().as_ptr() as u64).wrapping_add(OFFSET.get()))
    }
    unsafe fn unshare(_: PhysAddr, _: NonNull<[u8]>, _: BufferDirection) {
        LIVE.set(LIVE.get() - 1);
    }
    fn now() -> Duration {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_fails_the_nth_share() {
        IdentityHal::reset(2);
        let mut b = [0u8; 4];
        let nn = NonNull::from(&mut b[..]);
        // SAFETY: nothing is accessed through IdentityHal.
        let pa = unsafe { IdentityHal::share(nn, BufferDirection::Both) }.unwrap();
        assert_eq!(pa, b.as_ptr() as u64);
        // SAFETY: as above.
        assert!(unsafe { IdentityHal::share(nn, BufferDirection::Both) }.is_err());
        assert_eq!(IdentityHal::live(), 1);
        // SAFETY: as above.
        unsafe { IdentityHal::unshare(pa, nn, BufferDirection::Both) };
        assert_eq!(IdentityHal::live(), 0);
    }

    #[test]
    fn arm_keeps_the_live_count_and_the_offset_moves_addresses() {
        IdentityHal::reset(0);
        IdentityHal::set_offset(0x1000);
        let mut b = [0u8; 4];
        let nn = NonNull::from(&mut b[..]);
        // SAFETY: nothing is accessed through IdentityHal.
        let pa = unsafe { IdentityHal::share(nn, BufferDirection::Both) }.unwrap();
        assert_eq!(pa, b.as_ptr() as u64 + 0x1000);
        IdentityHal::arm(1);
        assert_eq!((IdentityHal::calls(), IdentityHal::live()), (0, 1));
        // SAFETY: as above.
        assert!(unsafe { IdentityHal::share(nn, BufferDirection::Both) }.is_err());
        IdentityHal::reset(0);
        // SAFETY: as above.
        let pa = unsafe { IdentityHal::share(nn, BufferDirection::Both) }.unwrap();
        assert_eq!((pa, IdentityHal::live()), (b.as_ptr() as u64, 1));
    }
}
