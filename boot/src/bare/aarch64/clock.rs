//! Time from the generic timer's virtual counter (CNTVCT_EL0) at the rate
//! CNTFRQ_EL0 states (QEMU virt: 62.5 MHz). The rate is architectural, so
//! neither the host's TSC rate nor a calibration is needed.

use super::arch::counter_hz;
pub use super::counter::{cycles_to_duration, now, start};

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
