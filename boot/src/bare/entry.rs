//! PVH entry: the ELF note QEMU's `-kernel` loader looks for, and the
//! 32-bit stub that enters long mode and calls `kmain`.
//!
//! At `boot32_pvh` the CPU is in 32-bit protected mode, paging off, flat
//! segments, `ebx` = physical address of `hvm_start_info` (Xen PVH boot ABI;
//! notes/qemu-mock-bar.md §1). The stub zeroes `.bss`, identity-maps 0–4 GiB
//! with 2 MiB pages (1 GiB pages need pdpe1gb, which TCG's qemu64 lacks),
//! enables PAE + long mode + paging, loads a 3-entry GDT and jumps to 64-bit
//! code, which sets the stack and calls `kmain(start_info)`.

core::arch::global_asm!(
    r#"
    .section .note.Xen, "a", @note
    .p2align 2
    .long 4, 4, 18              /* namesz, descsz, XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .p2align 2
    .long boot32_pvh
    .p2align 2

    .section .boot.text, "ax", @progbits
    .code32
    .global boot32_pvh
boot32_pvh:
    cli
    cld
    mov %ebx, %esi

    /* zero .bss (page tables, stack and statics live there) */
    mov $__bss_start, %edi
    mov $__bss_end, %ecx
    sub %edi, %ecx
    xor %eax, %eax
    rep stosb

    /* PML4[0] -> PDPT; PDPT[0..4] -> the four PDs */
    mov $boot_pdpt, %eax
    or $3, %eax
    mov %eax, boot_pml4
    mov $boot_pd, %eax
    or $3, %eax
    mov %eax, boot_pdpt
    add $4096, %eax
    mov %eax, boot_pdpt + 8
    add $4096, %eax
    mov %eax, boot_pdpt + 16
    add $4096, %eax
    mov %eax, boot_pdpt + 24

    /* 2048 PDEs: present | writable | 2 MiB page, identity */
    mov $boot_pd, %edi
    mov $0x83, %eax
    mov $2048, %ecx
1:
    mov %eax, (%edi)
    add $0x200000, %eax
    add $8, %edi
    dec %ecx
    jnz 1b

    mov %cr4, %eax
    or $0x20, %eax              /* PAE */
    mov %eax, %cr4
    mov $boot_pml4, %eax
    mov %eax, %cr3
    mov $0xC0000080, %ecx       /* EFER */
    rdmsr
    or $0x100, %eax             /* LME */
    wrmsr
    mov %cr0, %eax
    or $0x80000001, %eax        /* PG | PE */
    mov %eax, %cr0
    lgdt boot_gdt_ptr
    ljmp $0x08, $boot64

    .code64
boot64:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov %ax, %fs
    mov %ax, %gs
    mov $boot_stack_top, %rsp
    xor %ebp, %ebp
    mov %esi, %edi              /* zero-extends: kmain(start_info) */
    call kmain
2:
    cli
    hlt
    jmp 2b

    .section .rodata.boot_gdt, "a"
    .p2align 3
boot_gdt:
    .quad 0
    .quad 0x00AF9A000000FFFF    /* 0x08: 64-bit code */
    .quad 0x00CF92000000FFFF    /* 0x10: data */
boot_gdt_end:
    .p2align 2
boot_gdt_ptr:
    .word boot_gdt_end - boot_gdt - 1
    .long boot_gdt

    .section .bss.boot_tables, "aw", @nobits
    .p2align 12
    .global boot_pml4
boot_pml4:
    .skip 4096
    .global boot_pdpt
boot_pdpt:
    .skip 4096
    .global boot_pd
boot_pd:
    .skip 4096 * 4
    .p2align 4
    .global boot_stack
    .global boot_stack_top
boot_stack:
    /* 4 MiB: a Device (≈60 KiB, with the CQP inside) is built and moved by
       value during probe (256 KiB overflowed into the page tables below),
       and the NVMe target's transport (≈490 KiB, peer_nvmet) by value in
       its scenario: 1.9 MiB at most, measured by the `stack` scenario. */
    .skip 4096 * 1024
boot_stack_top:
    "#,
    options(att_syntax)
);
