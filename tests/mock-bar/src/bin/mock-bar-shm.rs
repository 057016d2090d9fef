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
//! **Ethernet port** (harness mode, issue #34): `--port 127.0.0.1:P`
//! plugs an Ethernet port (`mock_bar::port`: one frame per UDP datagram,
//! QEMU's `-netdev dgram` contract) into the served device's wire, with the
//! device's MAC; `--port-peer ADDR` is where its frames go (else the
//! source of the first datagram), each `--port-ip IP` an address it
//! answers ARP / neighbour solicitations for, `--port-rc-timeout-ms` and
//! `--port-rc-retries` the RC request timeout and resends toward the peer
//! (defaults 1000 ms, 3), `--port-window` the packets of a long request
//! sent before it waits for an ACK (default 32). At exit it prints the port's counters and judges
//! the capture (`--pcap`): every RoCEv2 frame must parse with a right ICRC,
//! else status 1.
//!
//! ```text
//! IRDMA_BAR_FILE=… mock-bar-shm --port 127.0.0.1:40000 --port-peer 127.0.0.1:40001 \
//!     --port-ip 10.0.0.1 --pcap wire.pcap
//! ```
//!
//! **Interrupts** (harness mode, issue #31): with `IRDMA_IVSHMEM_SOCK`
//! (a socket path) and `IRDMA_IRQ_VECTORS` (N) in the environment it is
//! also the ivshmem server of QEMU's `ivshmem-doorbell,vectors=N` device:
//! it listens before HOST_MAGIC, hands QEMU the BAR file as the shared
//! memory, and raises the device's vectors 0..N as MSI-X interrupts
//! through the guest's eventfds (`mock_bar::ivshmem`, `mock_bar::shm`).
//! `cargo xtask qemu --irq` sets both.
//!
//! `--pcap FILE` (both modes; `cargo xtask qemu --pcap FILE` passes it)
//! records every RoCEv2 frame the device puts on its wire — loopback RC
//! traffic between the guest's QPs, built from their QP contexts (module
//! `mock_bar::wire`) — and writes them as a classic pcap when the model
//! exits.

use std::process::{Command, ExitCode};
use std::sync::atomic::Ordering;
use std::time::Duration;

use std::net::IpAddr;

use mock_bar::shm::{self, FileBar, FileMemory, HarnessOpts, PollMode, ShmHost, Tick, parse_size};
use mock_bar::wire::Capture;
use mock_bar::{Config, PortConfig};

fn usage() -> ExitCode {
    eprintln!(
        "usage: mock-bar-shm --bar FILE --bar-size SIZE --ram FILE --ram-size SIZE \
         [--below-4g SIZE] [--ram-base ADDR] [--poll spin|hybrid] [--pcap FILE] [-- COMMAND ARGS...]\n   or: IRDMA_BAR_FILE=… \
         mock-bar-shm [--poll spin|hybrid] [--max-secs N] [--pcap FILE] [--warm] \
         [--port ADDR [--port-peer ADDR] [--port-ip IP]... [--port-rc-timeout-ms N] [--port-rc-retries N] [--port-window N]]   (harness mode, see the docs)"
    );
    ExitCode::from(2)
}

/// The harness mode's Ethernet port (`--port ADDR` and its companions),
/// `None` without `--port`.
fn port_config(opts: &[String]) -> Result<Option<PortConfig>, String> {
    let get = |k: &str| opts.iter().position(|a| a == k).and_then(|i| opts.get(i + 1));
    let Some(local) = get("--port") else {
        if opts.iter().any(|a| a.starts_with("--port-")) {
            return Err("--port-… options need --port ADDR".into());
        }
        return Ok(None);
    };
    // the MAC is the served device's (`HarnessOpts::port`)
    let mut pc = PortConfig::new([0; 6]);
    pc.local = local.parse().map_err(|e| format!("--port {local}: {e}"))?;
    if let Some(r) = get("--port-peer") {
        pc.remote = Some(r.parse().map_err(|e| format!("--port-peer {r}: {e}"))?);
    }
    for (i, a) in opts.iter().enumerate() {
        if a != "--port-ip" {
            continue;
        }
        let v = opts.get(i + 1).ok_or("--port-ip needs an address")?;
        match v.parse::<IpAddr>().map_err(|e| format!("--port-ip {v}: {e}"))? {
            IpAddr::V4(a) => pc.ipv4.push(a.octets()),
            IpAddr::V6(a) => pc.ipv6.push(a.octets()),
        }
    }
    if let Some(ms) = get("--port-rc-timeout-ms") {
        let ms: u64 = ms.parse().map_err(|e| format!("--port-rc-timeout-ms {ms}: {e}"))?;
        pc.rc_timeout = Duration::from_millis(ms);
    }
    if let Some(n) = get("--port-rc-retries") {
        pc.rc_retries = n.parse().map_err(|e| format!("--port-rc-retries {n}: {e}"))?;
    }
    if let Some(n) = get("--port-window") {
        pc.window = n.parse().map_err(|e| format!("--port-window {n}: {e}"))?;
    }
    Ok(Some(pc))
}

/// The value after option `k` in `opts`, if `k` is there.
fn opt<'a>(opts: &'a [String], k: &str) -> Option<&'a String> {
    opts.iter().position(|a| a == k).and_then(|i| opts.get(i + 1))
}

/// `--poll`: `hybrid` (the default) or `spin`; `None` for anything else.
fn poll_mode(opts: &[String]) -> Option<PollMode> {
    match opt(opts, "--poll").map(String::as_str) {
        None | Some("hybrid") => Some(PollMode::Hybrid),
        Some("spin") => Some(PollMode::Spin),
        Some(_) => None,
    }
}

/// Harness mode (`IRDMA_BAR_FILE` set, no `--bar`): [`shm::run_harness`]
/// with the options.
fn harness(opts: &[String]) -> ExitCode {
    let get = |k: &str| opt(opts, k);
    let Some(mode) = poll_mode(opts) else { return usage() };
    let max = match get("--max-secs").map(|s| s.parse::<u64>()) {
        None => 600,
        Some(Ok(n)) => n,
        Some(Err(_)) => return usage(),
    };
    let warm = opts.iter().any(|a| a == "--warm");
    let port = match port_config(opts) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("mock-bar-shm: {e}");
            return usage();
        }
    };
    let o = HarnessOpts {
        mode,
        max: Duration::from_secs(max),
        pcap: get("--pcap").cloned(),
        warm,
        port,
    };
    match shm::run_harness(&o, None, |_| Tick::Idle) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mock-bar-shm: {e}");
            ExitCode::from(1)
        }
    }
}

/// Standalone mode: the served device on files it creates, and how to
/// serve it; the exit code when the options or the files are wrong.
fn standalone_host(opts: &[String]) -> Result<(ShmHost, PollMode), ExitCode> {
    let get = |k: &str| opt(opts, k);
    let (Some(bar), Some(bar_size), Some(ram), Some(ram_size)) = (
        get("--bar"),
        get("--bar-size").and_then(|s| parse_size(s)),
        get("--ram"),
        get("--ram-size").and_then(|s| parse_size(s)),
    ) else {
        return Err(usage());
    };
    if bar_size < 8 << 20 || !bar_size.is_power_of_two() {
        eprintln!(
            "mock-bar-shm: the BAR must be a power of two ≥ 8 MiB (registers reach 0x7F0040)"
        );
        return Err(ExitCode::from(2));
    }
    let below_4g = get("--below-4g").and_then(|s| parse_size(s)).unwrap_or(ram_size.min(2 << 30));
    let ram_base = match get("--ram-base").map(|s| parse_size(s)) {
        None => 0,
        Some(Some(b)) => b,
        Some(None) => return Err(usage()),
    };
    let Some(mode) = poll_mode(opts) else { return Err(usage()) };
    let files = shm::create_zeroed(bar.as_ref(), bar_size)
        .and_then(|b| Ok((b, shm::create_zeroed(ram.as_ref(), ram_size)?)));
    let (bar_f, ram_f) = match files {
        Ok(f) => f,
        Err(e) => {
            eprintln!("mock-bar-shm: cannot create the files: {e}");
            return Err(ExitCode::from(1));
        }
    };
    let host = ShmHost::new(
        Config::default(),
        FileBar::new(bar_f, bar_size),
        FileMemory::new(ram_f, ram_size, below_4g).with_base(ram_base),
    );
    Ok((host, mode))
}

/// Standalone mode: serves the device on a thread while the child command
/// runs (or until killed, without one), then reports.
fn standalone(opts: &[String], child: &[String]) -> ExitCode {
    let get = |k: &str| opt(opts, k);
    let (mut host, mode) = match standalone_host(opts) {
        Ok(h) => h,
        Err(code) => return code,
    };
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
    if let Err(e) = shm::write_capture(get("--pcap").map(|s| s.as_ref()), cap.as_ref()) {
        eprintln!("mock-bar-shm: {e}");
        return ExitCode::from(1);
    }
    ExitCode::from(status.clamp(0, 255) as u8)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (opts, child) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (&args[..], &args[args.len()..]),
    };
    if opt(opts, "--bar").is_none() && std::env::var_os("IRDMA_BAR_FILE").is_some() {
        return harness(opts);
    }
    standalone(opts, child)
}
