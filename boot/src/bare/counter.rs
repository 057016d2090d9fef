//! The monotonic clock both architectures build on a free-running counter
//! (`arch::rdtsc`: the TSC on x86_64, CNTVCT_EL0 on aarch64): an origin
//! and a rate, stored once by [`start`]. Each `clock` module finds the
//! rate its own way and re-exports these.

use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;

use super::arch::rdtsc;

static HZ: AtomicU64 = AtomicU64::new(0);
static ORIGIN: AtomicU64 = AtomicU64::new(0);

/// Starts the clock at `hz`; time 0 is now.
pub fn start(hz: u64) {
    ORIGIN.store(rdtsc(), Ordering::Relaxed);
    HZ.store(hz, Ordering::Relaxed);
}

/// The counter rate (0 before [`start`]).
pub fn hz() -> u64 {
    HZ.load(Ordering::Relaxed)
}

/// Converts counter ticks to a duration (zero before [`start`]).
pub fn cycles_to_duration(cycles: u64) -> Duration {
    let hz = hz();
    if hz == 0 {
        return Duration::ZERO;
    }
    let nanos = cycles as u128 * 1_000_000_000 / hz as u128;
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Monotonic time since [`start`].
pub fn now() -> Duration {
    cycles_to_duration(rdtsc().saturating_sub(ORIGIN.load(Ordering::Relaxed)))
}
