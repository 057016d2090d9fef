//! Host-testable parts of the irdma unikernel image.
//!
//! * [`contract`] — what the guest, `cargo xtask qemu` and the host-side
//!   device model agree on: the harness mailbox in the BAR file, the
//!   isa-debug-exit codes, the console line format;
//! * [`pool`] — the page-granular DMA pool allocator behind the image's
//!   [`irdma_hal::Hal`];
//! * [`memmap`] — checks against the PVH (`hvm_start_info`) memory map;
//! * [`peercfg`] — the command-line words of a live run against a Linux
//!   peer (`peer=rping-server ip=… peer_ip=… peer_mac=…`).
//!
//! The bare-metal parts (entry stub, paging, exception vectors, serial, PCI
//! config access, clock, exit) live in the binary and only build for
//! `x86_64-unknown-none` and `aarch64-unknown-none`.
#![no_std]
#![deny(missing_docs)]

pub mod contract;
pub mod memmap;
pub mod peercfg;
pub mod pool;
