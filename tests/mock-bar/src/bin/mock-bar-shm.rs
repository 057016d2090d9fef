//! `mock-bar-shm`: the device model as a host process for QEMU.
//!
//! ```text
//! mock-bar-shm --bar /dev/shm/mock-bar --bar-size 16M --ram /dev/shm/mock-ram --ram-size 256M \
//!     [--below-4g SIZE] [--ram-base ADDR] [--poll spin|hybrid] [--pcap FILE] \
//!     [-- qemu-system-x86_64 ...]
//! ```
//! Creates (zeroes) both files, serves the BAR until the child exits (or
//! forever without a child), prints the device counters, and exits with the
//! child's status. Pin this process and QEMU to different CPUs.
//!
//! **Harness mode** (`cargo xtask qemu` starts it so): with no `--bar` and
//! the environment `IRDMA_BAR_FILE`, `IRDMA_BAR_SIZE`, `IRDMA_RAM_FILE`,
//! `IRDMA_RAM_SIZE`, `IRDMA_MAILBOX` set, it opens the files xtask created
//! (without zeroing them: xtask wrote the nonce and TSC rate already),
//! serves the register space below the mailbox, writes `HOST_MAGIC` once
//! ready, answers pings, applies fault requests from the guest, publishes
//! its CQP counters, and exits 0 once xtask sets the shutdown flag
//! (`shm::Harness`; the layout is `shm::mailbox`). It gives up with status
//! 1 after `--max-secs` (default 600) or when its parent goes away. Its PF
//! starts cold (`LanConfig::cold`: no traffic until the guest's LAN layer
//! registered a qset and turned the PE filter on); `--warm` starts it with
//! the LAN side counted as done (for a guest that fills `LanInfo` by hand).
//!
//! Guest RAM starts at guest-physical 0 (x86 PCs) unless `--ram-base ADDR`
//! or, in harness mode, `IRDMA_RAM_BASE` says otherwise (QEMU's Arm `virt`
//! machine: 0x4000_0000): a DMA address `pa` is then file offset
//! `pa − ADDR`.
//!
//! ```text
//! IRDMA_BAR_FILE=… mock-bar-shm [--poll spin|hybrid] [--max-secs N] [--pcap FILE] [--warm]
//! ```
//!
//! `--pcap FILE` (both modes; `cargo xtask qemu --pcap FILE` passes it)
//! records every RoCEv2 frame the device puts on its wire — loopback RC
//! traffic between the guest's QPs, built from their QP contexts (module
//! `mock_bar::wire`) — and writes them as a classic pcap when the model
//! exits.

use std::process::{Command, ExitCode};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mock_bar::Config;
use mock_bar::shm::{self, FileBar, FileMemory, Harness, PollMode, ShmHost, Tick};
use mock_bar::wire::Capture;

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
         [--below-4g SIZE] [--ram-base ADDR] [--poll spin|hybrid] [--pcap FILE] [-- COMMAND ARGS...]\n   or: IRDMA_BAR_FILE=… \
         mock-bar-shm [--poll spin|hybrid] [--max-secs N] [--pcap FILE] [--warm]   (harness mode, see the docs)"
    );
    ExitCode::from(2)
}

fn env_num(name: &str) -> Result<u64, String> {
    let v = std::env::var(name).map_err(|_| format!("{name} is not set"))?;
    parse_size(&v).ok_or(format!("{name}={v}: not a size"))
}

fn open_existing(path: &str, size: u64) -> Result<std::fs::File, String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| format!("{path}: {e}"))?;
    let len = f.metadata().map_err(|e| format!("{path}: {e}"))?.len();
    if len != size {
        return Err(format!("{path} is {len} bytes, the environment says {size}"));
    }
    Ok(f)
}

/// Writes `cap` to `path` (when both are given) and says so.
fn write_capture(path: Option<&String>, cap: Option<&Capture>) -> Result<(), String> {
    if let (Some(p), Some(c)) = (path, cap) {
        c.write_pcap(p.as_ref()).map_err(|e| format!("{p}: {e}"))?;
        println!("mock-bar-shm: {} frames written to {p}", c.len());
    }
    Ok(())
}

/// Harness mode: the model process of `cargo xtask qemu`.
fn harness(mode: PollMode, max: Duration, pcap: Option<&String>, warm: bool) -> Result<(), String> {
    let bar = std::env::var("IRDMA_BAR_FILE").map_err(|_| "IRDMA_BAR_FILE is not set")?;
    let ram = std::env::var("IRDMA_RAM_FILE").map_err(|_| "IRDMA_RAM_FILE is not set")?;
    let (bar_size, ram_size) = (env_num("IRDMA_BAR_SIZE")?, env_num("IRDMA_RAM_SIZE")?);
    let mailbox = env_num("IRDMA_MAILBOX")?;
    let ram_base = match std::env::var_os("IRDMA_RAM_BASE") {
        Some(_) => env_num("IRDMA_RAM_BASE")?,
        None => 0,
    };
    // The register space (up to the doorbell page at 0x7F0040) lies below
    // the mailbox page, which lies inside the file.
    if mailbox < 8 << 20 || mailbox + 4096 > bar_size {
        return Err(format!("IRDMA_MAILBOX {mailbox:#x} not in [8 MiB, BAR size − 4 KiB]"));
    }
    // A cold PF (LanConfig::cold): the guest's LAN layer must create the
    // qset and turn the PE filter on before any RDMA traffic flows.
    let mut cfg = Config::default();
    cfg.lan.cold = !warm;
    let mut host = ShmHost::new(
        cfg,
        FileBar::new(open_existing(&bar, bar_size)?, bar_size),
        // every GPA is below 4 GiB up to 2 GiB of RAM (q35)
        FileMemory::new(open_existing(&ram, ram_size)?, ram_size, ram_size.min(2 << 30))
            .with_base(ram_base),
    );
    let cap = pcap.map(|_| Capture::new());
    host.device.set_capture(cap.clone());
    let mut h = Harness::new(mailbox as u32);
    h.announce(&host);
    let (t0, parent) = (Instant::now(), std::os::unix::process::parent_id());
    let mut rounds = 0u64;
    let mut why = None;
    host.serve_with(mode, |host| {
        rounds += 1;
        let t = h.service(host);
        if t == Tick::Stop {
            return t;
        }
        // Cheap checks, now and then: an orphaned model must not live on.
        if rounds.is_multiple_of(4096) {
            if t0.elapsed() > max {
                why = Some(format!("no shutdown within {} s", max.as_secs()));
                return Tick::Stop;
            }
            if std::os::unix::process::parent_id() != parent {
                why = Some("the parent process went away".to_string());
                return Tick::Stop;
            }
        }
        t
    });
    let c = host.device.counters();
    println!(
        "mock-bar-shm: {:.2} s, {rounds} rounds, {} pings, {} fault requests; cqp_ops={} \
         cqp_errors={} cqp_doorbells={} cqes={} sq_wqes={} dma_faults={} invalid_cqp_wqes={} \
         packets={} wire_drops={} lan_cold={} aq_commands={} aq_errors={} lan_gated_wqes={} \
         pe_filter_drops={}",
        t0.elapsed().as_secs_f64(),
        h.pings,
        h.faults,
        c.cqp_ops,
        c.cqp_errors,
        c.cqp_doorbells,
        c.cqes,
        c.sq_wqes,
        c.dma_faults,
        c.cqp_invalid_wqes,
        c.packets,
        c.wire_drops,
        u8::from(host.device.config().lan.cold),
        c.aq_commands,
        c.aq_errors,
        c.lan_gated_wqes,
        c.pe_filter_drops,
    );
    // The failed CQP ops still in the trace: the first thing to look at when
    // a guest scenario reports an unexpected CQP error.
    for e in host.device.trace() {
        if let mock_bar::Event::CqpOp { idx, opcode, major, minor, .. } = e
            && (*major != 0 || *minor != 0)
        {
            println!(
                "mock-bar-shm: CQP op {opcode:#04x} in slot {idx} failed {major:#06x}/{minor:#06x}"
            );
        }
    }
    write_capture(pcap, cap.as_ref())?;
    match why {
        Some(w) => Err(w),
        None => Ok(()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (opts, child) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (&args[..], &args[args.len()..]),
    };
    let get = |k: &str| opts.iter().position(|a| a == k).and_then(|i| opts.get(i + 1));
    if get("--bar").is_none() && std::env::var_os("IRDMA_BAR_FILE").is_some() {
        let mode = match get("--poll").map(String::as_str) {
            None | Some("hybrid") => PollMode::Hybrid,
            Some("spin") => PollMode::Spin,
            Some(_) => return usage(),
        };
        let max = match get("--max-secs").map(|s| s.parse::<u64>()) {
            None => 600,
            Some(Ok(n)) => n,
            Some(Err(_)) => return usage(),
        };
        let warm = opts.iter().any(|a| a == "--warm");
        return match harness(mode, Duration::from_secs(max), get("--pcap"), warm) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mock-bar-shm: {e}");
                ExitCode::from(1)
            }
        };
    }
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
    let ram_base = match get("--ram-base").map(|s| parse_size(s)) {
        None => 0,
        Some(Some(b)) => b,
        Some(None) => return usage(),
    };
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
    let mut host = ShmHost::new(
        Config::default(),
        FileBar::new(bar_f, bar_size),
        FileMemory::new(ram_f, ram_size, below_4g).with_base(ram_base),
    );
    let cap = get("--pcap").map(|_| Capture::new());
    host.device.set_capture(cap.clone());
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
    if let Err(e) = write_capture(get("--pcap"), cap.as_ref()) {
        eprintln!("mock-bar-shm: {e}");
        return ExitCode::from(1);
    }
    ExitCode::from(status.clamp(0, 255) as u8)
}
