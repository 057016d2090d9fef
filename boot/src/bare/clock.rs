//! Time from the TSC, calibrated against the legacy PIT.
//!
//! Choice: the image calibrates the TSC itself (PIT channel 2 one-shot over
//! 10 ms, three times, gate via port 0x61), so it needs nothing from the host and works
//! the same under KVM, TCG and on hardware. The host's TSC rate, which
//! xtask writes into the mailbox, is only used to cross-check the
//! calibration (the `clock` scenario). The TSC is assumed invariant.

use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;

use super::arch::{inb, outb, rdtsc};

/// PIT input clock in Hz.
const PIT_HZ: u64 = 1_193_182;
/// Calibration window: 10 ms of PIT ticks.
const PIT_TICKS: u16 = 11_932;

static TSC_HZ: AtomicU64 = AtomicU64::new(0);
static TSC_ORIGIN: AtomicU64 = AtomicU64::new(0);

/// Measures the TSC rate with the PIT: the median of three windows, so one
/// window disturbed by the host scheduler (QEMU's vCPU thread descheduled
/// mid-window) does not skew it. `None` if no window worked.
pub fn calibrate() -> Option<u64> {
    let mut v = [0u64; 3];
    for slot in v.iter_mut() {
        *slot = calibrate_once()?;
    }
    v.sort_unstable();
    Some(v[1])
}

/// One 10 ms PIT window; `None` if the PIT never reached its terminal count
/// (no PIT) or the result is implausible.
fn calibrate_once() -> Option<u64> {
    let gate = inb(0x61);
    outb(0x61, (gate & !0x02) | 0x01); // gate high, speaker off
    outb(0x43, 0xb0); // channel 2, lo/hi byte, mode 0, binary
    outb(0x42, PIT_TICKS as u8);
    outb(0x42, (PIT_TICKS >> 8) as u8);
    let start = rdtsc();
    let mut end = start;
    let mut done = false;
    // Bounded: give up after ~2^34 cycles (seconds at any plausible rate).
    while end.wrapping_sub(start) < 1 << 34 {
        if inb(0x61) & 0x20 != 0 {
            done = true;
            break;
        }
        end = rdtsc();
    }
    outb(0x61, gate);
    let cycles = end.wrapping_sub(start);
    let hz = (cycles as u128 * PIT_HZ as u128 / PIT_TICKS as u128) as u64;
    (done && (100_000_000..=100_000_000_000).contains(&hz)).then_some(hz)
}

/// Starts the clock at `hz`; time 0 is now.
pub fn start(hz: u64) {
    TSC_ORIGIN.store(rdtsc(), Ordering::Relaxed);
    TSC_HZ.store(hz, Ordering::Relaxed);
}

/// The calibrated rate (0 before [`start`]).
pub fn hz() -> u64 {
    TSC_HZ.load(Ordering::Relaxed)
}

/// Converts TSC cycles to a duration (zero before [`start`]).
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
    cycles_to_duration(rdtsc().saturating_sub(TSC_ORIGIN.load(Ordering::Relaxed)))
}
