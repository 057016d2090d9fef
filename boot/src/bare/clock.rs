//! Time from the TSC, at a rate the host states or the PIT measures.
//!
//! Choice (measured, see README): inside the QEMU harness the rate comes from
//! the host. xtask measures the host TSC against CLOCK_MONOTONIC and writes
//! it into the mailbox; under TCG (and KVM without TSC scaling) the guest
//! reads that same TSC. The PIT is the fallback when no host value exists
//! (hardware, or `cargo xtask qemu --no-host-tsc`): channel 2 one-shot over
//! 10 ms, median of three undisturbed windows. It is not trusted under TCG on
//! a loaded host: QEMU's PIT time lags while the vCPU thread is starved, and
//! windows came out 1.1–4.5× too long there.

use super::arch::{inb, outb, rdtsc};
pub use super::counter::{cycles_to_duration, now, start};

/// PIT input clock in Hz.
const PIT_HZ: u64 = 1_193_182;
/// Calibration window: 10 ms of PIT ticks.
const PIT_TICKS: u16 = 11_932;

/// Measures the TSC rate with the PIT: the median of up to three
/// undisturbed windows out of at most twelve tries; `None` if none worked.
///
/// Under TCG on a loaded host the vCPU thread can be descheduled right at a
/// PIT port access (the access wakes QEMU's main loop, pinned to the same
/// CPU). Both ends of each window are therefore bracketed by TSC reads, and
/// a window whose ends are uncertain by more than 1% is discarded.
pub fn calibrate() -> Option<u64> {
    let mut good = [0u64; 3];
    let mut n = 0;
    for _ in 0..12 {
        if let Some(slot) = good.get_mut(n)
            && let Some(hz) = calibrate_once()
        {
            *slot = hz;
            n += 1;
        }
    }
    let good = good.get_mut(..n)?;
    good.sort_unstable();
    good.get(n / 2).copied()
}

/// One 10 ms PIT window; `None` if the PIT never reached its terminal count
/// (no PIT), the window was disturbed, or the result is implausible.
fn calibrate_once() -> Option<u64> {
    let gate = inb(0x61);
    outb(0x61, (gate & !0x02) | 0x01); // gate high, speaker off
    outb(0x43, 0xb0); // channel 2, lo/hi byte, mode 0, binary
    outb(0x42, PIT_TICKS as u8);
    // Mode 0 counts from the write of the high byte: it happened in (a, b).
    let a = rdtsc();
    outb(0x42, (PIT_TICKS >> 8) as u8);
    let b = rdtsc();
    let mut prev = b;
    let mut result = None;
    // Bounded: give up after ~2^34 cycles (seconds at any plausible rate).
    while prev.wrapping_sub(a) < 1 << 34 {
        let out2 = inb(0x61) & 0x20 != 0;
        let d = rdtsc();
        if out2 {
            // The terminal count fell in (prev, d).
            let cycles = (prev / 2 + d / 2).wrapping_sub(a / 2 + b / 2);
            let uncertainty = b.wrapping_sub(a).wrapping_add(d.wrapping_sub(prev));
            if uncertainty.saturating_mul(100) <= cycles {
                result = Some(cycles);
            }
            break;
        }
        prev = d;
    }
    outb(0x61, gate);
    let hz = (result? as u128 * PIT_HZ as u128 / PIT_TICKS as u128) as u64;
    plausible(hz).then_some(hz)
}

/// A rate the architecture states (none on x86_64: the TSC rate comes
/// from the host or the PIT).
pub fn architectural_hz() -> Option<u64> {
    None
}

/// Whether `hz` could be a TSC rate (100 MHz to 100 GHz).
pub fn plausible(hz: u64) -> bool {
    (100_000_000..=100_000_000_000).contains(&hz)
}
