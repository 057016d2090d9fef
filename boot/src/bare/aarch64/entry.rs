//! aarch64 entry for QEMU's `virt` machine (`-kernel` ELF).
//!
//! QEMU loads the ELF at its link address (boot/aarch64.ld: 0x4020_0000,
//! 2 MiB into RAM, which starts at 0x4000_0000; the DTB goes at the start of
//! RAM, below the image) and jumps to `_start` at EL1 with the MMU and caches
//! off. The stub parks every CPU but 0, installs the exception vectors,
//! zeroes `.bss`, enables FP/SIMD (CPACR_EL1.FPEN: rustc's aarch64 target
//! uses NEON registers), builds the identity map (boot_l1, 1 GiB blocks)
//! and turns the MMU on, sets the stack and calls `kmain(x0)`.
//!
//! Identity map (TTBR0_EL1, 4 KiB granule, T0SZ = 25: 39-bit VA, the walk
//! starts at level 1, so each level-1 entry is a 1 GiB block):
//!
//! | GiB | range | attributes |
//! |---|---|---|
//! | 0 | 0 .. 0x4000_0000: flash, GIC, PL011 (0x0900_0000), PCIe 32-bit MMIO window (0x1000_0000 .. 0x3eff_0000), low ECAM (0x3f00_0000) | Device-nGnRE, execute-never |
//! | 1 | 0x4000_0000 .. 0x8000_0000: RAM (image, DTB, DMA pool) | Normal write-back, inner shareable |
//! | 256 | 0x40_0000_0000 .. 0x40_4000_0000: high ECAM (0x40_1000_0000, QEMU ≥ 5.0 with `highmem-ecam`) | Device-nGnRE, execute-never |
//!
//! Every other entry is invalid, so a stray access faults (and the vector
//! exits with the exception status). `paging::map_uc` can add Device blocks
//! for BARs placed elsewhere.

core::arch::global_asm!(
    r#"
    .section .text.boot, "ax"
    .global _start
_start:
    mov x19, x0                 /* DTB address, if the loader passed one */
    mrs x1, mpidr_el1
    and x1, x1, #0xff
    cbnz x1, 9f                 /* only CPU 0 runs (QEMU uses -smp 1) */

    adrp x1, boot_vectors
    add x1, x1, :lo12:boot_vectors
    msr vbar_el1, x1

    /* zero .bss (page tables, stack and statics live there) */
    adrp x1, __bss_start
    add x1, x1, :lo12:__bss_start
    adrp x2, __bss_end
    add x2, x2, :lo12:__bss_end
1:
    cmp x1, x2
    b.hs 2f
    stp xzr, xzr, [x1], #16
    b 1b
2:
    /* FP/SIMD at EL1 and EL0: CPACR_EL1.FPEN = 0b11 */
    mov x1, #(3 << 20)
    msr cpacr_el1, x1
    isb

    /* level-1 table: GiB 0 and 256 Device, GiB 1 Normal (see above) */
    adrp x3, boot_l1
    add x3, x3, :lo12:boot_l1
    ldr x1, =0x0060000000000401 /* block | AF | AttrIndx 0 (Device) | PXN | UXN */
    str x1, [x3, #0]
    ldr x1, =0x0000000040000705 /* 1 GiB | block | AF | SH inner | AttrIndx 1 (Normal) */
    str x1, [x3, #8]
    ldr x1, =0x0060004000000401 /* 256 GiB | Device, as GiB 0 */
    str x1, [x3, #(256 * 8)]

    /* MAIR: attr0 = 0x04 Device-nGnRE, attr1 = 0xff Normal WB RW-allocate */
    ldr x1, =0xff04
    msr mair_el1, x1
    /* TCR: T0SZ 25, IRGN0/ORGN0 WB-WA, SH0 inner, TG0 4 KiB, EPD1 (no
       TTBR1 walks), IPS 40 bits (the high ECAM is at 0x40_1000_0000) */
    ldr x1, =0x200803519
    msr tcr_el1, x1
    msr ttbr0_el1, x3
    dsb ish
    tlbi vmalle1
    dsb ish
    isb
    /* SCTLR: M (MMU), C (data cache), I (instruction cache); A (alignment
       check) off */
    mrs x1, sctlr_el1
    ldr x2, =0x1005
    orr x1, x1, x2
    bic x1, x1, #2
    msr sctlr_el1, x1
    isb

    adrp x1, boot_stack_top
    add x1, x1, :lo12:boot_stack_top
    mov sp, x1
    mov x29, xzr
    mov x0, x19
    bl kmain
9:
    wfe
    b 9b
    .ltorg

    .section .bss.boot_tables, "aw", @nobits
    .p2align 12
    .global boot_l1
boot_l1:
    .skip 4096
    .p2align 4
    .global boot_stack
    .global boot_stack_top
boot_stack:
    /* 4 MiB, as on x86_64: a Device is built and moved by value in probe,
       the NVMe target's transport in peer_nvmet. */
    .skip 4096 * 1024
boot_stack_top:
    "#
);
