//! Early IDT: every CPU exception prints what happened on COM1 and leaves
//! QEMU with `EXIT_EXCEPTION` (status 253), so a fault can never look like a
//! pass (a triple fault would exit 0; notes/qemu-mock-bar.md pitfall 5).
//!
//! Device interrupts (issue #31; spec interrupts.md C.5 option 1, C.7):
//! vectors [`IRQ_BASE`] + 0..[`IRQ_STUBS`] are MSI-X table entries 0..N of
//! the device. Their stubs save the caller-saved registers, call
//! `boot_irq(entry)` — which only records the entry in [`pending`] and
//! counts it, then writes the local APIC's EOI — and `iretq`. The driver's
//! handler runs later, outside the interrupt, from the halted waiter
//! (`Device::handle_interrupt` may issue CQP ops for AEQ work and must not
//! interrupt a CQP holder on this core). Vector 0xFF is the APIC's
//! spurious vector: `iretq` only, no EOI (C.3). The target has no red zone
//! and no SSE state (soft-float), so the stubs save only integer registers.

use core::ptr::addr_of;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

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

    .macro IRQ_STUB n
    .p2align 4
irq_stub_\n:
    push %rax
    push %rcx
    push %rdx
    push %rsi
    push %rdi
    push %r8
    push %r9
    push %r10
    push %r11
    cld
    mov $\n, %edi
    /* 5 frame words + 9 saved: rsp is 16-byte aligned here (the CPU
       aligned it before pushing the frame) */
    call boot_irq
    pop %r11
    pop %r10
    pop %r9
    pop %r8
    pop %rdi
    pop %rsi
    pop %rdx
    pop %rcx
    pop %rax
    iretq
    .endm
    IRQ_STUB 0
    IRQ_STUB 1
    IRQ_STUB 2
    IRQ_STUB 3
    .p2align 4
    .global irq_spurious
irq_spurious:
    iretq

    .section .rodata.exc_stubs, "a"
    .p2align 3
    .global exc_stub_table
exc_stub_table:
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    .quad exc_stub_\n
    .endr
    .global irq_stub_table
irq_stub_table:
    .quad irq_stub_0, irq_stub_1, irq_stub_2, irq_stub_3
    "#,
    options(att_syntax)
);

unsafe extern "C" {
    static exc_stub_table: [u64; 32];
    static irq_stub_table: [u64; IRQ_STUBS];
    fn irq_spurious();
}

/// IDT vector of MSI-X table entry 0 (entry `n` → `IRQ_BASE + n`).
pub const IRQ_BASE: u8 = 0x40;
/// MSI-X entries with a stub.
pub const IRQ_STUBS: usize = 4;
/// The local APIC's spurious vector (SVR [7:0]).
pub const SPURIOUS: u8 = 0xFF;

/// Entries whose interrupt was taken and not yet [`take_pending`] (bit n =
/// entry n).
static PENDING: AtomicU32 = AtomicU32::new(0);
/// Interrupts taken, per entry.
static TAKEN: [AtomicU64; IRQ_STUBS] = [const { AtomicU64::new(0) }; IRQ_STUBS];
/// The local APIC's EOI register (0 until `apic::init`).
static EOI: AtomicU64 = AtomicU64::new(0);

/// Entries taken since the last call (bit n = entry n).
pub fn take_pending() -> u32 {
    PENDING.swap(0, Ordering::AcqRel)
}

/// Interrupts of entry `n` taken since boot.
pub fn taken(n: usize) -> u64 {
    TAKEN.get(n).map_or(0, |t| t.load(Ordering::Relaxed))
}

/// Where `boot_irq` signals end of interrupt: the xAPIC EOI register.
pub fn set_eoi_register(addr: u64) {
    EOI.store(addr, Ordering::Release);
}

/// Called by the device-interrupt stubs (interrupts off, on the interrupted
/// stack).
#[unsafe(no_mangle)]
extern "C" fn boot_irq(entry: u64) {
    PENDING.fetch_or(1 << (entry & 31), Ordering::AcqRel);
    if let Some(t) = TAKEN.get(entry as usize) {
        t.fetch_add(1, Ordering::Relaxed);
    }
    let eoi = EOI.load(Ordering::Acquire);
    if eoi != 0 {
        // SAFETY: `set_eoi_register` was given the xAPIC's EOI register,
        // mapped uncached by `apic::init`; a 32-bit write of 0 is the EOI.
        unsafe { core::ptr::write_volatile(eoi as *mut u32, 0) };
    }
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
struct Idt([Gate; 256]);

fn gate(addr: u64) -> Gate {
    Gate {
        off_lo: addr as u16,
        selector: 0x08, // the stub's 64-bit code segment
        ist: 0,
        attr: 0x8e, // present, DPL 0, 64-bit interrupt gate
        off_mid: (addr >> 16) as u16,
        off_hi: (addr >> 32) as u32,
        reserved: 0,
    }
}

static IDT: spin::Once<Idt> = spin::Once::new();

/// Builds and loads the IDT.
pub fn init() {
    let idt = IDT.call_once(|| {
        // SAFETY: `exc_stub_table` is an initialised read-only table defined
        // in the assembly above.
        let stubs = unsafe { &*addr_of!(exc_stub_table) };
        // SAFETY: as above, defined in the assembly above.
        let irqs = unsafe { &*addr_of!(irq_stub_table) };
        let mut gates =
            [Gate { off_lo: 0, selector: 0, ist: 0, attr: 0, off_mid: 0, off_hi: 0, reserved: 0 };
                256];
        for (g, &addr) in gates.iter_mut().zip(stubs.iter()) {
            *g = gate(addr);
        }
        for (g, &addr) in gates.iter_mut().skip(IRQ_BASE as usize).zip(irqs.iter()) {
            *g = gate(addr);
        }
        gates[SPURIOUS as usize] = gate(irq_spurious as *const () as u64);
        Idt(gates)
    });
    let ptr = DescriptorTablePointer {
        limit: (core::mem::size_of::<Idt>() - 1) as u16,
        base: VirtAddr::new(idt as *const Idt as u64),
    };
    // SAFETY: the IDT lives in a static (never freed or moved) and every
    // present gate points at a stub above (the others are not present: a
    // stray vector raises #NP, which the exception stubs report).
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
