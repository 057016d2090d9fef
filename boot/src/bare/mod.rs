//! Everything that only exists on the bare-metal target.
//!
//! The architecture-specific modules (`arch`, `clock`, `entry`, `idt`,
//! `paging`, `pci`, `serial`, `start_info`) have one file per architecture
//! with the same items: the x86_64 files sit here (PVH, port I/O, TSC,
//! isa-debug-exit), the aarch64 ones in `aarch64/` (QEMU `virt`: DTB, ECAM,
//! PL011, generic timer, semihosting exit). `console` (fmt over
//! `serial`), `counter` (the clock over `arch::rdtsc`), `hal`, `pci_scan`
//! (the bus scan over either `pci`), `scenarios` and the `kmain` below are
//! shared.

#[cfg(all(feature = "defmt", not(target_arch = "x86_64")))]
compile_error!("the defmt feature needs COM2: x86_64 only");

#[cfg_attr(target_arch = "aarch64", path = "aarch64/arch.rs")]
pub mod arch;
#[cfg_attr(target_arch = "aarch64", path = "aarch64/clock.rs")]
pub mod clock;
pub mod console;
pub mod counter;
#[cfg(feature = "defmt")]
pub mod dlog;
#[cfg_attr(target_arch = "aarch64", path = "aarch64/entry.rs")]
pub mod entry;
pub mod hal;
#[cfg_attr(target_arch = "aarch64", path = "aarch64/idt.rs")]
pub mod idt;
#[cfg_attr(target_arch = "aarch64", path = "aarch64/paging.rs")]
pub mod paging;
#[cfg_attr(target_arch = "aarch64", path = "aarch64/pci.rs")]
pub mod pci;
pub mod pci_scan;
pub mod scenarios;
#[cfg_attr(target_arch = "aarch64", path = "aarch64/serial.rs")]
pub mod serial;
#[cfg_attr(target_arch = "aarch64", path = "aarch64/start_info.rs")]
pub mod start_info;

use irdma_boot::contract::{EXIT_FAIL, EXIT_PANIC, EXIT_PASS};
use serial::println;

/// Called by the entry stub (x86_64: in 64-bit mode with the PVH start
/// info; aarch64: MMU on, with x0 as the loader left it, maybe the DTB).
#[unsafe(no_mangle)]
extern "C" fn kmain(start_info: u64) -> ! {
    serial::init(serial::COM1);
    #[cfg(feature = "defmt")]
    serial::init(serial::COM2);
    idt::init();
    println!("irdma-boot: {} start_info={start_info:#x}", arch::BOOT);
    let info = start_info::StartInfo::new(start_info);
    #[cfg(target_arch = "aarch64")]
    match info.as_ref() {
        Some(i) => {
            println!("DTB at {:#x}", i.addr());
            if let Some((base, size)) = i.ecam()
                && !pci::set_ecam(base, size)
            {
                println!("DTB ECAM {base:#x}+{size:#x} is not mapped: using the default");
            }
        }
        None => println!("no DTB: default ECAM, no command line, no memory map"),
    }
    #[cfg(target_arch = "aarch64")]
    {
        let (base, last_bus) = pci::ecam();
        println!("PCIe ECAM at {base:#x}, buses 0..={last_bus}");
    }
    let mut cmdline = [0u8; 256];
    let cmd = info.as_ref().map(|i| i.cmdline(&mut cmdline)).unwrap_or("");
    if !cmd.is_empty() {
        println!("cmdline: {cmd}");
    }
    // Self-tests of the failure paths (xtask checks the exit statuses):
    // `fault` → CPU exception, `panic` → panic handler, `fail` → a failing
    // scenario.
    if cmd.split(' ').any(|w| w == "fault") {
        println!("cmdline asks for a CPU exception");
        arch::raise_exception();
    }
    if cmd.split(' ').any(|w| w == "panic") {
        panic!("panic requested on the command line");
    }

    let mut runner = scenarios::Runner::new();
    let hand_lan = cmd.split(' ').any(|w| w == "lan=hand");
    let peer = irdma_boot::peercfg::parse(cmd);
    scenarios::run_all(&mut runner, info.as_ref(), hand_lan, peer);
    if cmd.split(' ').any(|w| w == "fail") {
        // Self-test of the failure report: one scenario that always fails.
        runner.run("injected", scenarios::injected_failure);
    }
    let (passed, failed, skipped) = runner.totals();
    println!("DONE passed={passed} failed={failed} skipped={skipped}");
    #[cfg(feature = "defmt")]
    defmt::info!("done: {=u32} passed, {=u32} failed, {=u32} skipped", passed, failed, skipped);
    arch::exit(if failed == 0 && passed > 0 { EXIT_PASS } else { EXIT_FAIL })
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    println!("PANIC: {info}");
    arch::exit(EXIT_PANIC)
}
