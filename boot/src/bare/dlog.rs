//! defmt global logger: rzcobs frames on COM2 (`-serial file:…` in QEMU),
//! decoded on the host by `cargo xtask qemu --defmt` with the image's ELF.
//!
//! The image runs on one CPU with interrupts off, so the only possible
//! re-entrance is a fault while logging; `acquire` then panics, as the
//! `defmt::Logger` contract asks (the panic handler prints on COM1).

use core::ptr::addr_of_mut;
use core::sync::atomic::{AtomicBool, Ordering};

use super::serial::{COM2, write_bytes};

#[defmt::global_logger]
struct Logger;

static TAKEN: AtomicBool = AtomicBool::new(false);
static mut ENCODER: defmt::Encoder = defmt::Encoder::new();

fn out(bytes: &[u8]) {
    write_bytes(COM2, bytes);
}

// SAFETY: `acquire`/`release` bracket every frame and `TAKEN` makes the
// encoder exclusive (single CPU, interrupts off: no concurrent caller).
unsafe impl defmt::Logger for Logger {
    fn acquire() {
        if TAKEN.swap(true, Ordering::Acquire) {
            panic!("defmt logger re-entered");
        }
        // SAFETY: exclusive access to ENCODER while TAKEN is held.
        unsafe { (*addr_of_mut!(ENCODER)).start_frame(out) }
    }

    unsafe fn flush() {}

    unsafe fn release() {
        // SAFETY: called once per acquire, so TAKEN is held.
        unsafe { (*addr_of_mut!(ENCODER)).end_frame(out) };
        TAKEN.store(false, Ordering::Release);
    }

    unsafe fn write(bytes: &[u8]) {
        // SAFETY: called between acquire and release, so TAKEN is held.
        unsafe { (*addr_of_mut!(ENCODER)).write(bytes, out) }
    }
}

defmt::timestamp!("{=u64:us}", super::clock::now().as_micros() as u64);
