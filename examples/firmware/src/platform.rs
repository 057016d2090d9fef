//! What only the platform knows, and the glue to the machine: the entry
//! point, the panic handler, a console and the clock.
//!
//! The constants stand for values a real firmware gets from its boot
//! loader, its PCI enumeration, the `ice` LAN function and its control
//! plane; they are examples, not defaults.

use core::fmt::{self, Write};
use core::ptr::NonNull;
use core::time::Duration;

use irdma::lan::LanInfo;
use irdma_hal::MmioBar;

use crate::flow::{self, Peer};
use crate::pool::{self, PoolHal};

/// Where the platform mapped the E810's BAR0 (uncached, at its physical
/// address) and how long it is.
const BAR0: usize = 0xf800_0000;
const BAR0_LEN: usize = 32 << 20;

/// What the LAN side (`ice`) set up for RDMA: PF 0, VSI 6, this MAC, MTU.
const LAN: LanInfo = LanInfo::single_tc(0, 6, [0x02, 0x00, 0x00, 0x00, 0x00, 0x0a], 1500);
/// This function's IPv4 address.
const MY_IP: [u8; 4] = [10, 0, 0, 1];

/// The peer, as the control plane exchanged it out of band: its QP, its
/// address on the wire, and a buffer it registered for remote write/read
/// (with a receive posted for our SEND).
const PEER: Peer = Peer {
    qpn: 5,
    mac: [0x02, 0x00, 0x00, 0x00, 0x00, 0x0b],
    ip: [10, 0, 0, 2],
    addr: 0x1_0000_0000,
    rkey: 0x0000_4a01,
    len: 16 << 10,
};

/// The firmware's entry, called by the boot loader with a stack, the
/// memory identity-mapped and BAR0 mapped uncached.
#[unsafe(no_mangle)]
pub extern "C" fn _start() -> ! {
    let mut con = Console;
    let Some(base) = NonNull::new(core::ptr::with_exposed_provenance_mut::<u8>(BAR0)) else {
        halt()
    };
    // SAFETY: BAR0..BAR0 + BAR0_LEN is the device's BAR0, mapped uncached
    // by the platform before entry and never unmapped; it is 8-byte aligned
    // and no Rust reference into it exists.
    let bar = unsafe { MmioBar::new(base, BAR0_LEN) };
    match flow::run::<PoolHal, _>(bar, LAN, MY_IP, &PEER, pool::base(), &mut con) {
        Ok(()) => {
            let _ = writeln!(con, "firmware: all steps passed");
        }
        Err(e) => {
            let _ = writeln!(con, "firmware: failed: {e}");
        }
    }
    halt()
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let _ = writeln!(Console, "firmware: panic: {info}");
    halt()
}

fn halt() -> ! {
    loop {
        core::hint::spin_loop();
    }
}

/// Monotonic time since the counter started.
pub fn now() -> Duration {
    let (ticks, hz) = counter();
    let nanos = u128::from(ticks) * 1_000_000_000 / u128::from(hz.max(1));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// The TSC and its rate (the platform's: here a fixed 2 GHz).
#[cfg(target_arch = "x86_64")]
fn counter() -> (u64, u64) {
    // SAFETY: RDTSC only reads the time-stamp counter.
    (unsafe { core::arch::x86_64::_rdtsc() }, 2_000_000_000)
}

/// The generic timer's virtual count and its frequency.
#[cfg(target_arch = "aarch64")]
fn counter() -> (u64, u64) {
    let (ticks, hz): (u64, u64);
    // SAFETY: reading CNTVCT_EL0 and CNTFRQ_EL0 has no side effects; both
    // are readable at EL1 (and at EL0 when the kernel allows it).
    unsafe {
        core::arch::asm!(
            "isb",
            "mrs {t}, cntvct_el0",
            "mrs {f}, cntfrq_el0",
            t = out(reg) ticks,
            f = out(reg) hz,
            options(nomem, nostack, preserves_flags)
        );
    }
    (ticks, hz)
}

/// The console: COM1 on x86_64, the PL011 UART of QEMU's `virt` board on
/// aarch64 (both polled, output only).
struct Console;

impl Write for Console {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            put(b);
        }
        Ok(())
    }
}

#[cfg(target_arch = "x86_64")]
fn put(b: u8) {
    // SAFETY: writing a byte to COM1's data port (0x3f8) only transmits it;
    // it touches no memory.
    unsafe {
        core::arch::asm!("out dx, al", in("dx") 0x3f8u16, in("al") b, options(nomem, nostack, preserves_flags));
    }
}

#[cfg(target_arch = "aarch64")]
fn put(b: u8) {
    /// PL011 data register of QEMU `virt` (mapped as Device memory).
    const UART_DR: usize = 0x0900_0000;
    let dr = core::ptr::with_exposed_provenance_mut::<u32>(UART_DR);
    // SAFETY: UART_DR is the PL011's data register, mapped by the platform
    // as Device memory; a volatile 32-bit write transmits one byte.
    unsafe { dr.write_volatile(u32::from(b)) };
}
