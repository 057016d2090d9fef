//! The generic timer, leaving QEMU through semihosting, and the platform
//! constants of QEMU's `virt` machine.

use core::sync::atomic::{AtomicBool, Ordering};

/// How the image was booted (for the first console line).
pub const BOOT: &str = "aarch64 virt, DTB";
/// Guest-physical start of RAM on `virt` (the RAM file's offset 0).
pub const RAM_BASE: u64 = irdma_boot::contract::VIRT_RAM_BASE;
/// Where an unassigned BAR goes: the `virt` PCIe 32-bit MMIO window
/// (`ranges` of the DTB's pcie node; QEMU 7.2: 0x1000_0000 + 0x2eff_0000).
/// Nothing (no firmware) assigns BARs before a `-kernel` image runs.
pub const BAR_WINDOW: (u64, u64) = (0x1000_0000, 0x3eff_0000);

/// The virtual counter (CNTVCT_EL0), at [`counter_hz`]. Named like the
/// x86_64 TSC read so the scenarios share one name for "the cycle counter".
pub fn rdtsc() -> u64 {
    let v: u64;
    // SAFETY: reading CNTVCT_EL0 is allowed at EL1 and has no side effects;
    // the ISB keeps the read from being hoisted above earlier instructions.
    unsafe { core::arch::asm!("isb", "mrs {}, cntvct_el0", out(reg) v, options(nostack)) };
    v
}

/// The counter frequency the platform states (CNTFRQ_EL0).
pub fn counter_hz() -> u64 {
    let v: u64;
    // SAFETY: reading CNTFRQ_EL0 has no side effects.
    unsafe { core::arch::asm!("mrs {}, cntfrq_el0", out(reg) v, options(nostack, nomem)) };
    v
}

/// Raises a synchronous exception on purpose (`-append fault`).
pub fn raise_exception() -> ! {
    // SAFETY: UDF is permanently undefined: it traps to the vector table,
    // whose handler exits; nothing after it runs.
    unsafe { core::arch::asm!("udf #0", options(noreturn)) }
}

/// Set once `exit` ran: a semihosting call that traps (QEMU without
/// `-semihosting`) must not loop through the vectors.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Whether [`exit`] has started (an exception now must not call it again).
pub fn exiting() -> bool {
    EXITING.load(Ordering::Relaxed)
}

/// semihosting SYS_EXIT_EXTENDED.
const SYS_EXIT_EXTENDED: u32 = 0x20;
/// ADP_Stopped_ApplicationExit: the subcode is the exit status.
const ADP_STOPPED_APPLICATION_EXIT: u64 = 0x2_0026;

/// Ends the run: QEMU (`-semihosting`) exits with the status isa-debug-exit
/// gives on x86_64 for `code` (`irdma_boot::contract::qemu_status`: 33 =
/// pass). Without semihosting, falls back to PSCI SYSTEM_OFF (QEMU exits 0,
/// which xtask never takes for a pass), else spins.
pub fn exit(code: u32) -> ! {
    if !EXITING.swap(true, Ordering::Relaxed) {
        let block = [ADP_STOPPED_APPLICATION_EXIT, irdma_boot::contract::qemu_status(code) as u64];
        // SAFETY: the semihosting trap reads the two-word parameter block
        // (alive on this stack frame) and, as asked, ends the VM.
        unsafe {
            core::arch::asm!(
                "hlt #0xf000",
                in("w0") SYS_EXIT_EXTENDED,
                in("x1") block.as_ptr(),
                options(nostack)
            )
        };
    }
    power_off()
}

static PSCI_TRIED: AtomicBool = AtomicBool::new(false);

/// PSCI SYSTEM_OFF (QEMU exits 0: never a pass), tried once; then waits
/// forever (xtask's timeout ends the run).
pub fn power_off() -> ! {
    if !PSCI_TRIED.swap(true, Ordering::Relaxed) {
        // SAFETY: PSCI SYSTEM_OFF through HVC (the DTB's psci node says
        // method "hvc" on virt); it does not return when PSCI is present,
        // and traps to the vectors (which come back here) when it is not.
        unsafe { core::arch::asm!("hvc #0", in("x0") 0x8400_0008u64, options(nostack)) };
    }
    loop {
        // SAFETY: waiting for an event has no memory effects.
        unsafe { core::arch::asm!("wfe", options(nostack, nomem)) };
    }
}
