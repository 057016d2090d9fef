//! The irdma unikernel image.
//!
//! Built for `x86_64-unknown-none`, QEMU boots it with `-kernel` through the
//! PVH ELF note; built for `aarch64-unknown-none`, `qemu-system-aarch64 -M
//! virt` enters it at EL1 (ARCHITECTURE.md, "The aarch64 image"). It finds the device (an E810, else the model's ivshmem
//! stand-in), maps its BAR uncached, sets up a DMA pool and runs the
//! scenario suite, reporting on COM1 and through isa-debug-exit (see
//! `irdma_boot::contract`). Run it with `cargo xtask qemu`.
//!
//! On the host this crate builds an empty program so that
//! `cargo test --workspace` covers the whole workspace.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod bare;

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("irdma-boot is a bare-metal image: run `cargo xtask qemu`.");
}
