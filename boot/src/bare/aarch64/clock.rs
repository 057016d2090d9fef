//! Time from the generic timer's virtual counter (CNTVCT_EL0) at the rate
//! CNTFRQ_EL0 states (QEMU virt: 62.5 MHz). The rate is architectural, so
//! neither the host's TSC rate nor a calibration is needed.

use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;

use super::arch::{counter_hz, rdtsc};

static HZ: AtomicU64 = AtomicU64::new(0);
static ORIGIN: AtomicU64 = AtomicU64::new(0);

/// The counter rate the platform states, if plausible: the scenarios use
/// it instead of the host's TSC rate (which says nothing about this
/// counter).
pub fn architectural_hz() -> Option<u64> {
    Some(counter_hz()).filter(|&hz| plausible(hz))
}

/// There is nothing to calibrate against: the stated rate.
pub fn calibrate() -> Option<u64> {
    architectural_hz()
}

/// Whether `hz` could be a generic-timer rate (1 MHz to 10 GHz; Armv8.6
/// fixes 1 GHz, QEMU before 9.0 uses 62.5 MHz).
pub fn plausible(hz: u64) -> bool {
    (1_000_000..=10_000_000_000).contains(&hz)
}

/// Starts the clock at `hz`; time 0 is now.
pub fn start(hz: u64) {
    ORIGIN.store(rdtsc(), Ordering::Relaxed);
    HZ.store(hz, Ordering::Relaxed);
}

/// The rate (0 before [`start`]).
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
