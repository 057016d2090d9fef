//! `mock-bar-shm`: the device model as a host process for QEMU.
//!
//! ```text
//! mock-bar-shm --bar /dev/shm/mock-bar --bar-size 16M --ram /dev/shm/mock-ram --ram-size 256M \
//!     [--below-4g SIZE] [--poll spin|hybrid] [-- qemu-system-x86_64 ...]
//! ```
//! Creates (zeroes) both files, serves the BAR until the child exits (or
//! forever without a child), prints the device counters, and exits with the
//! child's status. Pin this process and QEMU to different CPUs.

use std::process::{Command, ExitCode};
use std::sync::atomic::Ordering;

use mock_bar::Config;
use mock_bar::shm::{self, FileBar, FileMemory, PollMode, ShmHost};

fn parse_size(s: &str) -> Option<u64> {
    let (num, mul) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n = match num.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok()?,
        None => num.parse().ok()?,
    };
    n.checked_mul(mul)
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: mock-bar-shm --bar FILE --bar-size SIZE --ram FILE --ram-size SIZE \
         [--below-4g SIZE] [--poll spin|hybrid] [-- COMMAND ARGS...]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (opts, child) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (&args[..], &args[args.len()..]),
    };
    let get = |k: &str| opts.iter().position(|a| a == k).and_then(|i| opts.get(i + 1));
    let (Some(bar), Some(bar_size), Some(ram), Some(ram_size)) = (
        get("--bar"),
        get("--bar-size").and_then(|s| parse_size(s)),
        get("--ram"),
        get("--ram-size").and_then(|s| parse_size(s)),
    ) else {
        return usage();
    };
    if bar_size < 8 << 20 || !bar_size.is_power_of_two() {
        eprintln!(
            "mock-bar-shm: the BAR must be a power of two ≥ 8 MiB (registers reach 0x7F0040)"
        );
        return ExitCode::from(2);
    }
    let below_4g = get("--below-4g").and_then(|s| parse_size(s)).unwrap_or(ram_size.min(2 << 30));
    let mode = match get("--poll").map(String::as_str) {
        None | Some("hybrid") => PollMode::Hybrid,
        Some("spin") => PollMode::Spin,
        Some(_) => return usage(),
    };
    let files = shm::create_zeroed(bar.as_ref(), bar_size)
        .and_then(|b| Ok((b, shm::create_zeroed(ram.as_ref(), ram_size)?)));
    let (bar_f, ram_f) = match files {
        Ok(f) => f,
        Err(e) => {
            eprintln!("mock-bar-shm: cannot create the files: {e}");
            return ExitCode::from(1);
        }
    };
    let host = ShmHost::new(
        Config::default(),
        FileBar::new(bar_f, bar_size),
        FileMemory::new(ram_f, ram_size, below_4g),
    );
    let (stop, handle) = shm::spawn(host, mode);
    let status = if let Some((cmd, rest)) = child.split_first() {
        match Command::new(cmd).args(rest).status() {
            Ok(s) => s.code().unwrap_or(1),
            Err(e) => {
                eprintln!("mock-bar-shm: cannot run {cmd}: {e}");
                1
            }
        }
    } else {
        // no child: serve until killed
        loop {
            std::thread::park();
        }
    };
    stop.store(true, Ordering::Release);
    match handle.join() {
        Ok(host) => eprintln!("mock-bar-shm: {:?}", host.device.counters()),
        Err(_) => eprintln!("mock-bar-shm: device thread panicked"),
    }
    ExitCode::from(status.clamp(0, 255) as u8)
}
