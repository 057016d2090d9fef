//! Exception vectors (VBAR_EL1, installed by the entry stub before anything
//! else runs): every exception prints what happened on the PL011 and leaves
//! QEMU with `EXIT_EXCEPTION` (status 253), so a fault can never look like
//! a pass — except the IRQ of the current EL with SPx (the only IRQ entry
//! this image can take: it never leaves EL1 and always runs on SP_EL1).
//!
//! Device interrupts (issue #31; spec interrupts.md C.8): the interrupt
//! scenarios set up the GICv2 and hand [`set_gic`] its CPU interface, the
//! first INTID of the MSI-X entries (the GICv2m frame's SPIs) and the
//! watchdog timer's INTID. The IRQ entry saves every register the Rust
//! code may clobber, calls `boot_irq`, which acknowledges (GICC_IAR),
//! records the entry in [`take_pending`] and counts it, then ends it
//! (GICC_EOIR), and `eret`s. As on x86_64 the driver's handler runs later,
//! outside the interrupt, from the halted waiter. IRQs are masked
//! (PSTATE.I) everywhere except around the waiter's `wfi`, so the entry is
//! never nested. Before [`set_gic`] an IRQ is fatal like any exception.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use irdma_boot::contract::EXIT_EXCEPTION;

use super::serial::println;

// 16 entries of 0x80 bytes: {current EL with SP0, current EL with SPx,
// lower EL AArch64, lower EL AArch32} × {sync, IRQ, FIQ, SError}. Each puts
// its index in x0 and calls `boot_exception(index, esr, elr, far)` on the
// current stack (the image never leaves EL1, never switches stacks); entry
// 5 (current EL with SPx, IRQ; offset 0x280) goes to `boot_irq_entry`.
//
// The IRQ frame: x0..x18, x29, x30, ELR_EL1, SPSR_EL1, FPSR, FPCR (25
// words, 208 B with the padding) and q0..q31 (512 B at sp + 208): the
// target uses NEON, and the interrupted code may hold live values in any vector register (AAPCS64
// only has a callee keep the low halves of v8..v15). SP is 16-byte aligned
// at every instruction of compiled code (AAPCS64; the target has no red
// zone: `disable-redzone` in its spec), so the frame is too.
core::arch::global_asm!(
    r#"
    .section .text.vectors, "ax"
    .p2align 11
    .global boot_vectors
boot_vectors:
    .irp n, 0,1,2,3,4
    .p2align 7
    mov x0, #\n
    b boot_vector_common
    .endr
    .p2align 7
    b boot_irq_entry
    .irp n, 6,7,8,9,10,11,12,13,14,15
    .p2align 7
    mov x0, #\n
    b boot_vector_common
    .endr

boot_vector_common:
    mrs x1, esr_el1
    mrs x2, elr_el1
    mrs x3, far_el1
    mov x4, sp
    and x4, x4, #~15
    mov sp, x4
    bl boot_exception
1:
    wfe
    b 1b

boot_irq_entry:
    sub sp, sp, #720
    stp x0, x1, [sp, #0]
    stp x2, x3, [sp, #16]
    stp x4, x5, [sp, #32]
    stp x6, x7, [sp, #48]
    stp x8, x9, [sp, #64]
    stp x10, x11, [sp, #80]
    stp x12, x13, [sp, #96]
    stp x14, x15, [sp, #112]
    stp x16, x17, [sp, #128]
    stp x18, x29, [sp, #144]
    mrs x0, elr_el1
    mrs x1, spsr_el1
    stp x30, x0, [sp, #160]
    mrs x0, fpsr
    mrs x2, fpcr
    stp x1, x0, [sp, #176]
    str x2, [sp, #192]
    add x0, sp, #208
    stp q0, q1, [x0, #0]
    stp q2, q3, [x0, #32]
    stp q4, q5, [x0, #64]
    stp q6, q7, [x0, #96]
    stp q8, q9, [x0, #128]
    stp q10, q11, [x0, #160]
    stp q12, q13, [x0, #192]
    stp q14, q15, [x0, #224]
    stp q16, q17, [x0, #256]
    stp q18, q19, [x0, #288]
    stp q20, q21, [x0, #320]
    stp q22, q23, [x0, #352]
    stp q24, q25, [x0, #384]
    stp q26, q27, [x0, #416]
    stp q28, q29, [x0, #448]
    stp q30, q31, [x0, #480]
    bl boot_irq
    add x0, sp, #208
    ldp q0, q1, [x0, #0]
    ldp q2, q3, [x0, #32]
    ldp q4, q5, [x0, #64]
    ldp q6, q7, [x0, #96]
    ldp q8, q9, [x0, #128]
    ldp q10, q11, [x0, #160]
    ldp q12, q13, [x0, #192]
    ldp q14, q15, [x0, #224]
    ldp q16, q17, [x0, #256]
    ldp q18, q19, [x0, #288]
    ldp q20, q21, [x0, #320]
    ldp q22, q23, [x0, #352]
    ldp q24, q25, [x0, #384]
    ldp q26, q27, [x0, #416]
    ldp q28, q29, [x0, #448]
    ldp q30, q31, [x0, #480]
    ldr x2, [sp, #192]
    ldp x1, x0, [sp, #176]
    msr fpcr, x2
    msr fpsr, x0
    msr spsr_el1, x1
    ldp x30, x0, [sp, #160]
    msr elr_el1, x0
    ldp x18, x29, [sp, #144]
    ldp x16, x17, [sp, #128]
    ldp x14, x15, [sp, #112]
    ldp x12, x13, [sp, #96]
    ldp x10, x11, [sp, #80]
    ldp x8, x9, [sp, #64]
    ldp x6, x7, [sp, #48]
    ldp x4, x5, [sp, #32]
    ldp x2, x3, [sp, #16]
    ldp x0, x1, [sp, #0]
    add sp, sp, #720
    eret
    "#
);

/// The vectors are installed by the entry stub; nothing to do here (kept
/// for the shared `kmain`).
pub fn init() {}

/// MSI-X entries with a pending bit (entry `n` = INTID `msi_base + n`);
/// the same count as the x86_64 stubs.
pub const IRQ_STUBS: usize = 4;
/// GICC_IAR / GICC_EOIR (GICv2 architecture spec IHI 0048B, 4.4; spec
/// interrupts.md C.8): the acknowledge and end-of-interrupt registers of
/// the CPU interface. INTIDs 1020..1023 are special (1023 = spurious) and
/// take no EOI.
const GICC_IAR: u64 = 0x0C;
const GICC_EOIR: u64 = 0x10;
const INTID_SPECIAL: u32 = 1020;

/// Entries whose interrupt was taken and not yet [`take_pending`] (bit n =
/// entry n).
static PENDING: AtomicU32 = AtomicU32::new(0);
/// Interrupts taken, per entry.
static TAKEN: [AtomicU64; IRQ_STUBS] = [const { AtomicU64::new(0) }; IRQ_STUBS];
/// The GIC CPU interface (0 until [`set_gic`]).
static GICC: AtomicU64 = AtomicU64::new(0);
/// INTID of entry 0.
static MSI_BASE: AtomicU32 = AtomicU32::new(0);
/// The watchdog timer's INTID and the entry it reports as (`intid << 16 |
/// entry`).
static TIMER: AtomicU32 = AtomicU32::new(0);
/// INTIDs `boot_irq` acknowledged that were neither (counted, ended).
static STRAY: AtomicU64 = AtomicU64::new(0);

/// Entries taken since the last call (bit n = entry n).
pub fn take_pending() -> u32 {
    PENDING.swap(0, Ordering::AcqRel)
}

/// Interrupts of entry `n` taken since boot.
pub fn taken(n: usize) -> u64 {
    TAKEN.get(n).map_or(0, |t| t.load(Ordering::Relaxed))
}

/// Interrupts with an INTID that is neither an MSI-X entry nor the timer.
pub fn stray() -> u64 {
    STRAY.load(Ordering::Relaxed)
}

/// Enables the IRQ entry: `gicc` is the GICv2 CPU interface (mapped
/// Device), INTID `msi_base + n` is MSI-X entry `n`, INTID `timer_intid`
/// (the virtual timer's PPI) reports as entry `timer_entry`, after
/// `boot_irq` masked the timer (CNTV_CTL_EL0.IMASK) so its level-sensitive
/// output drops before the EOI.
pub fn set_gic(gicc: u64, msi_base: u32, timer_intid: u32, timer_entry: u32) {
    MSI_BASE.store(msi_base, Ordering::Relaxed);
    TIMER.store(timer_intid << 16 | (timer_entry & 0xFFFF), Ordering::Relaxed);
    GICC.store(gicc, Ordering::Release);
}

/// Called by the IRQ entry (IRQs masked, on the interrupted stack).
#[unsafe(no_mangle)]
extern "C" fn boot_irq() {
    let gicc = GICC.load(Ordering::Acquire);
    if gicc == 0 {
        println!("EXCEPTION vector=5 (irq) before the GIC was set up");
        super::arch::exit(EXIT_EXCEPTION)
    }
    // SAFETY: `set_gic` was given the GICv2 CPU interface, which the
    // identity map covers as Device memory; reading GICC_IAR acknowledges
    // the highest-priority pending interrupt (no memory effects).
    let iar = unsafe { core::ptr::read_volatile((gicc + GICC_IAR) as *const u32) };
    let intid = iar & 0x3FF;
    if intid >= INTID_SPECIAL {
        return;
    }
    let timer = TIMER.load(Ordering::Relaxed);
    let base = MSI_BASE.load(Ordering::Relaxed);
    let entry = if intid == timer >> 16 {
        // SAFETY: masks the virtual timer's output (CNTV_CTL_EL0: ENABLE
        // [0], IMASK [1]); the waiter re-arms it before its next halt.
        unsafe {
            core::arch::asm!("msr cntv_ctl_el0, {}", "isb", in(reg) 0b11u64, options(nostack))
        };
        Some(timer & 0xFFFF)
    } else {
        intid.checked_sub(base).filter(|&n| (n as usize) < IRQ_STUBS)
    };
    match entry {
        Some(n) => {
            PENDING.fetch_or(1 << (n & 31), Ordering::AcqRel);
            if let Some(t) = TAKEN.get(n as usize) {
                t.fetch_add(1, Ordering::Relaxed);
            }
        }
        None => {
            STRAY.fetch_add(1, Ordering::Relaxed);
        }
    }
    // SAFETY: as above; writing the acknowledged IAR value to GICC_EOIR
    // ends that interrupt (priority drop and deactivation, GICC_CTLR.EOImode
    // 0).
    unsafe { core::ptr::write_volatile((gicc + GICC_EOIR) as *mut u32, iar) };
}

const KINDS: [&str; 4] = ["sync", "irq", "fiq", "serror"];

/// Called by the vectors; never returns.
#[unsafe(no_mangle)]
extern "C" fn boot_exception(index: u64, esr: u64, elr: u64, far: u64) -> ! {
    if super::arch::exiting() {
        // The exit itself trapped (QEMU without -semihosting): power off
        // rather than recurse.
        println!("EXCEPTION while exiting (esr={esr:#x}): powering off");
        super::arch::power_off()
    }
    let kind = KINDS[(index & 3) as usize];
    let ec = (esr >> 26) & 0x3f;
    println!(
        "EXCEPTION vector={index} ({kind}) esr={esr:#x} (EC {ec:#x}) elr={elr:#x} far={far:#x}"
    );
    super::arch::exit(EXIT_EXCEPTION)
}
