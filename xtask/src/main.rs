//! `cargo xtask …` — the project's automation.
//!
//! * `test` — every leg of the suite, one line each, then `N passed, M failed`
//!   (the leg `miri` installs nightly's Miri through rustup if missing);
//! * `conformance FILE…` — check the driver against vendor-generated vectors;
//! * `qemu` — build the boot image and run its scenarios in QEMU;
//! * `bench` — instructions per data-path operation under callgrind;
//! * `wire FILE.pcap` — the driver's RC traffic between two model devices
//!   as RoCEv2 frames in a pcap (`--check FILE.pcap`: tshark + scapy);
//! * `soak --ops N --seed S` — the seeded fault soak (`tests/fault_soak.rs`);
//! * `peer build|run SCENARIO|list` — a Linux Soft-RoCE guest as the peer;
//! * `layers` — the driver's layer rule checked from its sources (`layers.rs`);
//! * `vendor-diff [--seed N] [--cases N]` — the vendor's uk.c (fetched at run
//!   time) against the driver's data path (`tests/vendor-diff`, issue #30);
//!
//! Run `cargo xtask help` for the list.

mod bench;
mod conformance;
mod fuzz;
mod layers;
mod newcomer;
mod nvme_wire;
mod peer;
mod qemu;
mod size;
mod soak;
mod util;
mod vendor_diff;
mod vendor_vectors;
mod wire;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use util::{cargo, root};

/// Bare-metal targets the driver and hal must build for.
pub const BARE_TARGETS: [&str; 2] = ["x86_64-unknown-none", "aarch64-unknown-none"];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = match args.split_first() {
        Some((c, r)) => (c.as_str(), r),
        None => ("help", &[][..]),
    };
    // Every command that builds something installs what it needs first: a
    // newcomer's first command may be `cargo xtask qemu` on a machine with
    // only the host target (issue #29). `rust-toolchain.toml` names the same
    // targets and components, but rustup installs those only with a new
    // toolchain, not into one that is already there.
    let builds = !matches!(cmd, "help" | "-h" | "--help" | "setup" | "test" | "layers");
    if builds && let Err(e) = util::ensure_toolchain(&BARE_TARGETS) {
        eprintln!("xtask {cmd}: cannot prepare the toolchain: {e}");
        return ExitCode::FAILURE;
    }
    match cmd {
        "test" => test(rest),
        "conformance" => conformance::main(rest),
        "qemu" => qemu::main(rest),
        "bench" => bench::main(rest),
        "size" => bench::size_main(),
        "wire" => wire::main(rest),
        "soak" => soak::main(rest),
        "peer" => peer::main(rest),
        "layers" => layers::main(rest),
        "vendor-diff" => vendor_diff::main(rest),
        "setup" => match util::ensure_toolchain(&BARE_TARGETS) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("setup: {e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n\
                 commands:\n  \
                 test                 run the whole suite (every leg), ends with `N passed, M failed`\n  \
                 test --list          list the legs\n  \
                 test LEG…            run only the named legs\n  \
                 conformance FILE…    check the driver against a conformance vector file\n  \
                 qemu [--help]        build the boot image and run its scenarios in QEMU (exit 33 = pass)\n  \
                 bench [--vs-vendor]  every figure as name=value: instructions per operation (callgrind), the vendor's uk.c beside them with issue #33's goals, .text, DMA footprint (--vs-vendor: only the instruction figures, the vendor's and the goals)\n  \
                 size                 only the .text figures (driver + hal in examples/firmware, both targets)\n  \
                 wire FILE.pcap       two model devices, the driver's RC traffic as RoCEv2 frames in a pcap\n  \
                 soak [--ops N] [--seed S]  seeded random verbs traffic under injected faults (release), prints ops=… faults=… lost=…\n  \
                 peer build|run SCENARIO|list  a Linux Soft-RoCE guest in QEMU as the peer (issue #34)\n  \
                 peer nvme-wire FILE  judge a capture with tshark's NVMe/RDMA dissector (issue #32)\n  \
                 layers [--print-known|--edges]  the layer rule: upward imports and import cycles in src/ against xtask/layers-known.txt\n  \
                 vendor-diff [--seed N] [--cases N]  the vendor's uk.c (linux-source-6.1, fetched) against the driver's data path\n  \
                 vendor-diff --write-vectors DIR [--seed N] [--cases N] | --rederive [DIR]  conformance vectors from the vendor code\n  \
                 setup                install the rustup targets and components the suite needs"
            );
            if cmd == "help" { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
    }
}

/// One leg of the suite.
struct Leg {
    name: &'static str,
    run: std::sync::Arc<dyn Fn() -> Result<String, String> + Send + Sync>,
}

fn leg(
    name: &'static str,
    run: impl Fn() -> Result<String, String> + Send + Sync + 'static,
) -> Leg {
    Leg { name, run: std::sync::Arc::new(run) }
}

/// A leg's time limit. Generous: cold builds on a loaded 2-core machine
/// are slow (the `test` leg takes ~5 min warm on an idle one). Every limit
/// is multiplied by `XTASK_TIMEOUT_SCALE` (default 1) when set.
fn time_limit(name: &str) -> Duration {
    let mins = match name {
        "test" | "loom" | "clippy-host" => 40,
        "cycles-1000" | "qemu" | "build-boot-image" | "newcomer" => 30,
        n if n.starts_with("clippy-") || n.starts_with("build-") => 30,
        _ => 15,
    };
    let scale = std::env::var("XTASK_TIMEOUT_SCALE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(1.0);
    Duration::from_secs_f64(f64::from(mins) * 60.0 * scale)
}

/// Runs a leg on its own thread, bounded by its time limit: child
/// processes are killed at the limit (`util::status_bounded`), and a leg
/// that runs in-process and does not return is reported failed and left
/// behind (the process exits at the end of the suite).
fn run_bounded(l: &Leg) -> Result<String, String> {
    let limit = time_limit(l.name);
    util::set_deadline(Some(Instant::now() + limit));
    let (tx, rx) = std::sync::mpsc::channel();
    let run = l.run.clone();
    let _ = std::thread::Builder::new().name(l.name.into()).spawn(move || {
        let _ = tx.send(run());
    });
    // A little grace so a killed child's error is the one reported.
    let r = match rx.recv_timeout(limit + Duration::from_secs(10)) {
        Ok(r) => r,
        Err(_) => Err(format!(
            "timed out after {:.0} s (in-process leg left running)",
            limit.as_secs_f64()
        )),
    };
    util::set_deadline(None);
    r
}

fn legs() -> Vec<Leg> {
    let mut v = build_legs();
    v.extend(check_legs());
    v.extend(test_legs());
    v.extend(guest_legs());
    v.extend(conformance_legs());
    v
}

/// Formatting, lints and builds (the bare-metal targets, the boot image,
/// the firmware example).
fn build_legs() -> Vec<Leg> {
    let mut v = vec![
        leg("fmt", || cargo(&["fmt", "--all", "--check"])),
        leg("clippy-host", || {
            cargo(&["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"])
        }),
    ];
    for target in BARE_TARGETS {
        v.push(leg(leak(format!("clippy-{target}")), move || {
            cargo(&[
                "clippy",
                "-p",
                "irdma",
                "-p",
                "irdma-hal",
                "--target",
                target,
                "--",
                "-D",
                "warnings",
            ])
        }));
        v.push(leg(leak(format!("build-{target}")), move || {
            cargo(&["build", "-p", "irdma", "-p", "irdma-hal", "--release", "--target", target])
        }));
    }
    v.push(leg("build-boot-image", || {
        let t = "x86_64-unknown-none";
        cargo(&["clippy", "-p", "irdma-boot", "--target", t, "--", "-D", "warnings"])?;
        cargo(&["build", "-p", "irdma-boot", "--release", "--target", t])
    }));
    v.push(leg("firmware-example", || {
        for t in BARE_TARGETS {
            let p = "irdma-firmware-example";
            cargo(&["clippy", "-p", p, "--target", t, "--", "-D", "warnings"])?;
            cargo(&["build", "-p", p, "--release", "--target", t])?;
        }
        Ok(format!("examples/firmware built for {}", BARE_TARGETS.join(" and ")))
    }));
    v
}

/// Guards on what the tree is: benchmarks, model independence, layers,
/// packaging, the wire dissector, docs.
fn check_legs() -> Vec<Leg> {
    let mut v = Vec::new();
    // Instruction counts (+10 %) and driver `.text` (+5 %) against benches/baseline.txt.
    v.push(leg("bench-guard", bench::guard));
    v.push(leg("model-independence", util::check_model_independence));
    // The layer rule from the sources (issue #29): no new upward import or
    // import cycle, and no stale entry in xtask/layers-known.txt.
    v.push(leg("layers", layers::leg));
    // A dry run of publishing (issue #29): both crates packaged as a user
    // would get them and built from the package; nothing is uploaded.
    v.push(leg("package", || {
        cargo(&["package", "--quiet", "-p", "irdma-hal", "-p", "irdma", "--allow-dirty"])?;
        Ok("irdma-hal and irdma packaged and built from their .crate files".into())
    }));
    v.push(leg("wire", wire::run_leg));
    v.push(leg("doc", util::doc));
    v
}

/// The host test suites: the workspace tests, barrier trace, soak, cycles,
/// loom, the host example, miri.
fn test_legs() -> Vec<Leg> {
    let mut v = Vec::new();
    v.push(leg("test", || cargo(&["test", "--workspace", "--quiet"])));
    // Barrier placement: the hal logs barriers and ring stores (feature
    // `barrier-trace`, off in every other build so the data path is as
    // benchmarked).
    v.push(leg("barrier-trace", || {
        cargo(&[
            "test",
            "-p",
            "irdma",
            "--lib",
            "--quiet",
            "--features",
            "barrier-trace",
            "--",
            "barrier",
        ])
    }));
    // The seeded fault soak, 100,000 operations in a release build (the
    // `test` leg runs a short debug one).
    v.push(leg("soak", soak::leg));
    // The full 1,000 bring-up/teardown cycles of issue #4 (debug runs 100).
    v.push(leg("cycles-1000", || {
        cargo(&["test", "--release", "--quiet", "-p", "irdma", "--test", "cycles"])?;
        // the CM over QP1: 1,000 connect/disconnect cycles in release
        cargo(&["test", "--release", "--quiet", "-p", "irdma", "--test", "cm_qp1", "cycles"])
    }));
    v.push(leg("loom", util::loom));
    v.push(leg("example-host", util::example_host));
    v.push(leg("miri", util::miri));
    v
}

/// Runs in QEMU guests: the unikernel, the newcomer's first command, the
/// aarch64 image, the Linux peers.
fn guest_legs() -> Vec<Leg> {
    let mut v = Vec::new();
    v.push(leg("qemu", qemu::run_leg));
    // The README's first command from a clean clone with a fresh toolchain
    // that lacks the bare-metal targets (issue #29).
    v.push(leg("newcomer", newcomer::leg));
    v.push(leg("build-boot-image-aarch64", || {
        let t = "aarch64-unknown-none";
        cargo(&["clippy", "-p", "irdma-boot", "--target", t, "--", "-D", "warnings"])?;
        cargo(&["build", "-p", "irdma-boot", "--release", "--target", t])
    }));
    v.push(leg("qemu-aarch64", qemu::run_leg_aarch64));
    // a Linux Soft-RoCE guest as the peer (issue #34): arp, rping both ways
    v.push(leg("peer", peer::leg));
    // the NVMe/RDMA target (issue #32): Linux's nvmet-rdma between two
    // guests, then the unikernel's target with a Linux host, side by side
    v.push(leg("nvme", peer::nvme_leg));
    v
}

/// The conformance and differential legs, then fuzzing.
fn conformance_legs() -> Vec<Leg> {
    let mut v = Vec::new();
    v.push(leg("conformance-sync", util::conformance_sync));
    // The vendor's own uk.c against the driver's data path (issue #30):
    // fetched at run time, fixed seed.
    v.push(leg("vendor-diff", vendor_diff::leg));
    for (name, file) in conformance::SUITE {
        v.push(leg(name, move || conformance::run_leg(file)));
    }
    // the harness-generated set (tests/conformance/harness, issue #30)
    for (name, file) in conformance::HARNESS {
        v.push(leg(name, move || conformance::run_harness_leg(file)));
    }
    // cargo-fuzz targets (fuzz/, nightly), a short run each.
    v.push(leg("fuzz", fuzz::leg));
    v
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn test(args: &[String]) -> ExitCode {
    if let Err(e) = util::ensure_toolchain(&BARE_TARGETS) {
        eprintln!("xtask test: cannot prepare the toolchain: {e}");
        println!("0 passed, 1 failed");
        return ExitCode::FAILURE;
    }
    let all = legs();
    if args.iter().any(|a| a == "--list") {
        for l in &all {
            println!("{}", l.name);
        }
        return ExitCode::SUCCESS;
    }
    let selected: Vec<&Leg> = if args.is_empty() {
        all.iter().collect()
    } else {
        let unknown: Vec<_> = args.iter().filter(|a| !all.iter().any(|l| l.name == *a)).collect();
        if !unknown.is_empty() {
            eprintln!("unknown leg(s): {unknown:?}; see `cargo xtask test --list`");
            return ExitCode::FAILURE;
        }
        all.iter().filter(|l| args.iter().any(|a| a == l.name)).collect()
    };
    let _ = root();
    let mut results = Vec::new();
    for l in selected {
        println!("==> leg {}", l.name);
        let t = Instant::now();
        let r = run_bounded(l);
        let secs = t.elapsed().as_secs_f64();
        match &r {
            Ok(msg) => println!("<== leg {}: ok ({secs:.1}s){}", l.name, suffix(msg)),
            Err(msg) => println!("<== leg {}: FAILED ({secs:.1}s){}", l.name, suffix(msg)),
        }
        results.push((l.name, r.is_ok(), secs));
    }
    println!();
    println!("summary:");
    for (name, ok, secs) in &results {
        println!("  {:<34} {:>6} {secs:>7.1}s", name, if *ok { "ok" } else { "FAILED" });
    }
    let passed = results.iter().filter(|r| r.1).count();
    let failed = results.len() - passed;
    println!("{passed} passed, {failed} failed");
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn suffix(msg: &str) -> String {
    if msg.is_empty() { String::new() } else { format!(": {msg}") }
}
