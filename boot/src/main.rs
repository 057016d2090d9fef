//! The irdma unikernel image.
//!
//! Built for `x86_64-unknown-none`, it is booted by QEMU (`-kernel`, PVH) and
//! runs the driver against the device model behind a PCI BAR. On the host
//! this crate builds an empty program so that `cargo test --workspace` covers
//! the whole workspace; the image itself arrives with the QEMU work.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod bare {
    /// Entry symbol until the PVH stub exists: halt forever.
    #[unsafe(no_mangle)]
    pub extern "C" fn _start() -> ! {
        loop {
            x86_64::instructions::hlt();
        }
    }

    #[panic_handler]
    fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
        loop {
            x86_64::instructions::hlt();
        }
    }
}

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("irdma-boot is a bare-metal image: run `cargo xtask qemu`.");
}
