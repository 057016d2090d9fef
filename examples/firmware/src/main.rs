//! A bare-metal firmware example for `irdma`: what a SmartNIC/DPU core or a
//! unikernel does to use the E810's RDMA engine with no OS and no allocator.
//!
//! * [`pool`] — a `Hal` on a static, identity-mapped DMA page pool with a
//!   bitmap allocator, and a monotonic clock (TSC on x86_64, the generic
//!   timer on aarch64);
//! * [`platform`] — the entry point, the panic handler, a console, and the
//!   few facts only the platform knows (where BAR0 is mapped, the LAN
//!   function's identity, the peer's attributes);
//! * [`flow`] — the driver: `Device::probe` on an owned `MmioBar`, PD, CQ,
//!   RC QP, MRs, connect to the given peer, RDMA WRITE + SEND, poll, one
//!   `rdma_rw` READ through SGEs, and teardown, reporting each step.
//!
//! Build: `cargo build -p irdma-firmware-example --target x86_64-unknown-none`
//! (or `aarch64-unknown-none`); `cargo xtask test firmware-example` builds
//! both. On the host the crate is an empty program (so that workspace-wide
//! `cargo test` keeps working). The host twin that actually runs, against
//! two model devices, is `cargo run --example host_loopback`.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod flow;
#[cfg(target_os = "none")]
mod platform;
#[cfg(target_os = "none")]
mod pool;

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "irdma-firmware-example is bare-metal firmware: build it with \
         --target x86_64-unknown-none or aarch64-unknown-none"
    );
}
