//! Everything that only exists on the bare-metal target.

pub mod arch;
pub mod clock;
#[cfg(feature = "defmt")]
pub mod dlog;
pub mod entry;
pub mod hal;
pub mod idt;
pub mod paging;
pub mod pci;
pub mod scenarios;
pub mod serial;
pub mod start_info;

use irdma_boot::contract::{EXIT_FAIL, EXIT_PANIC, EXIT_PASS};
use serial::println;

/// Called by the entry stub in 64-bit mode with the PVH start info.
#[unsafe(no_mangle)]
extern "C" fn kmain(start_info: u64) -> ! {
    serial::init(serial::COM1);
    #[cfg(feature = "defmt")]
    serial::init(serial::COM2);
    idt::init();
    println!("irdma-boot: PVH start_info={start_info:#x}");
    let info = start_info::StartInfo::new(start_info);
    let mut cmdline = [0u8; 128];
    let cmd = info.as_ref().map(|i| i.cmdline(&mut cmdline)).unwrap_or("");
    if !cmd.is_empty() {
        println!("cmdline: {cmd}");
    }
    // Self-tests of the failure paths (xtask checks the exit statuses):
    // `fault` → CPU exception, `panic` → panic handler, `fail` → a failing
    // scenario.
    if cmd.split(' ').any(|w| w == "fault") {
        println!("cmdline asks for a CPU exception");
        // SAFETY: UD2 raises #UD on purpose; the IDT handler exits.
        unsafe { core::arch::asm!("ud2") };
    }
    if cmd.split(' ').any(|w| w == "panic") {
        panic!("panic requested on the command line");
    }

    let mut runner = scenarios::Runner::new();
    scenarios::run_all(&mut runner, info.as_ref());
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
