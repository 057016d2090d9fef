//! Exception vectors (VBAR_EL1, installed by the entry stub before anything
//! else runs): every exception prints what happened on the PL011 and leaves
//! QEMU with `EXIT_EXCEPTION` (status 253), so a fault can never look like
//! a pass. Interrupts stay masked (DAIF), so only synchronous exceptions and
//! SErrors can arrive.

use irdma_boot::contract::EXIT_EXCEPTION;

use super::serial::println;

// 16 entries of 0x80 bytes: {current EL with SP0, current EL with SPx,
// lower EL AArch64, lower EL AArch32} × {sync, IRQ, FIQ, SError}. Each puts
// its index in x0 and calls `boot_exception(index, esr, elr, far)` on the
// current stack (the image never leaves EL1, never switches stacks).
core::arch::global_asm!(
    r#"
    .section .text.vectors, "ax"
    .p2align 11
    .global boot_vectors
boot_vectors:
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
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
    "#
);

/// The vectors are installed by the entry stub; nothing to do here (kept
/// for the shared `kmain`).
pub fn init() {}

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
