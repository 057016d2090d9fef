//! Early IDT: every CPU exception prints what happened on COM1 and leaves
//! QEMU with `EXIT_EXCEPTION` (status 253), so a fault can never look like a
//! pass (a triple fault would exit 0; notes/qemu-mock-bar.md pitfall 5).

use core::ptr::addr_of;

use irdma_boot::contract::EXIT_EXCEPTION;
use x86_64::VirtAddr;
use x86_64::instructions::tables::lidt;
use x86_64::structures::DescriptorTablePointer;

use super::serial::println;

// Stubs for vectors 0..32: push a dummy error code where the CPU pushes
// none, push the vector, and call `exception(vector, frame)` with the stack
// pointing at [vector, error, rip, cs, rflags, rsp, ss].
core::arch::global_asm!(
    r#"
    .macro EXC_NOERR n
    .p2align 4
exc_stub_\n:
    push $0
    push $\n
    jmp exc_common
    .endm
    .macro EXC_ERR n
    .p2align 4
exc_stub_\n:
    push $\n
    jmp exc_common
    .endm

    .text
    EXC_NOERR 0
    EXC_NOERR 1
    EXC_NOERR 2
    EXC_NOERR 3
    EXC_NOERR 4
    EXC_NOERR 5
    EXC_NOERR 6
    EXC_NOERR 7
    EXC_ERR 8
    EXC_NOERR 9
    EXC_ERR 10
    EXC_ERR 11
    EXC_ERR 12
    EXC_ERR 13
    EXC_ERR 14
    EXC_NOERR 15
    EXC_NOERR 16
    EXC_ERR 17
    EXC_NOERR 18
    EXC_NOERR 19
    EXC_NOERR 20
    EXC_ERR 21
    EXC_NOERR 22
    EXC_NOERR 23
    EXC_NOERR 24
    EXC_NOERR 25
    EXC_NOERR 26
    EXC_NOERR 27
    EXC_NOERR 28
    EXC_ERR 29
    EXC_ERR 30
    EXC_NOERR 31
exc_common:
    mov (%rsp), %rdi
    mov %rsp, %rsi
    and $-16, %rsp
    call boot_exception
3:
    hlt
    jmp 3b

    .section .rodata.exc_stubs, "a"
    .p2align 3
    .global exc_stub_table
exc_stub_table:
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    .quad exc_stub_\n
    .endr
    "#,
    options(att_syntax)
);

unsafe extern "C" {
    static exc_stub_table: [u64; 32];
}

/// One 16-byte interrupt gate.
#[derive(Clone, Copy)]
#[repr(C)]
struct Gate {
    off_lo: u16,
    selector: u16,
    ist: u8,
    attr: u8,
    off_mid: u16,
    off_hi: u32,
    reserved: u32,
}

#[repr(C, align(16))]
struct Idt([Gate; 32]);

static IDT: spin::Once<Idt> = spin::Once::new();

/// Builds and loads the IDT.
pub fn init() {
    let idt = IDT.call_once(|| {
        // SAFETY: `exc_stub_table` is an initialised read-only table defined
        // in the assembly above.
        let stubs = unsafe { &*addr_of!(exc_stub_table) };
        let mut gates =
            [Gate { off_lo: 0, selector: 0, ist: 0, attr: 0, off_mid: 0, off_hi: 0, reserved: 0 };
                32];
        for (g, &addr) in gates.iter_mut().zip(stubs.iter()) {
            *g = Gate {
                off_lo: addr as u16,
                selector: 0x08, // the stub's 64-bit code segment
                ist: 0,
                attr: 0x8e, // present, DPL 0, 64-bit interrupt gate
                off_mid: (addr >> 16) as u16,
                off_hi: (addr >> 32) as u32,
                reserved: 0,
            };
        }
        Idt(gates)
    });
    let ptr = DescriptorTablePointer {
        limit: (core::mem::size_of::<Idt>() - 1) as u16,
        base: VirtAddr::new(idt as *const Idt as u64),
    };
    // SAFETY: the IDT lives in a static (never freed or moved) and every
    // gate points at a stub above.
    unsafe { lidt(&ptr) };
}

/// Called by the stubs; never returns.
#[unsafe(no_mangle)]
extern "C" fn boot_exception(vector: u64, frame: *const u64) -> ! {
    // SAFETY: the stub passes its stack pointer, under which the CPU pushed
    // [error, rip, cs, rflags, rsp, ss] after our vector.
    let (error, rip) = unsafe { (frame.add(1).read(), frame.add(2).read()) };
    let cr2 = x86_64::registers::control::Cr2::read_raw();
    println!("EXCEPTION vector={vector} error={error:#x} rip={rip:#x} cr2={cr2:#x}");
    super::arch::exit(EXIT_EXCEPTION)
}
