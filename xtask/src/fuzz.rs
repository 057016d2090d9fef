//! The leg `fuzz`: the cargo-fuzz targets in `fuzz/` (its own workspace),
//! each run for a short time; any crash fails the leg.
//!
//! Installs what it needs on a fresh machine, printing each command: the
//! nightly toolchain (`rustup toolchain install nightly --profile minimal`)
//! and cargo-fuzz (`cargo install cargo-fuzz --locked`). An installed
//! nightly is used as it is (no update).
//!
//! Seeds are generated, not committed: a few hand-made inputs per target,
//! and for `conformance_json` one small document per vector schema cut from
//! the vector files. The corpus grows in `fuzz/corpus/` (ignored by git).
//! `XTASK_FUZZ_SECS` sets the seconds per target (default 15).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::Value;

use crate::util::{root, status_bounded};

/// The targets, in run order.
pub const TARGETS: &[&str] = &[
    "cqe_poll",
    "ccq_cqe",
    "aeqe",
    "fpm_hmc",
    "model_wqe",
    "conformance_json",
    "cm_mad",
    "aeq_device",
    "nvmet_capsule",
];

fn fuzz_dir() -> PathBuf {
    root().join("fuzz")
}

/// Runs `prog args` (output streamed), printing it first.
fn run_loud(prog: &str, args: &[&str], dir: &Path) -> Result<(), String> {
    println!("xtask fuzz: running `{prog} {}`", args.join(" "));
    let what = format!("{prog} {}", args.join(" "));
    let st = status_bounded(Command::new(prog).args(args).current_dir(dir), &what)?;
    if st.success() { Ok(()) } else { Err(format!("`{what}` exited with {st}")) }
}

fn quiet_ok(prog: &str, args: &[&str]) -> bool {
    Command::new(prog)
        .args(args)
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Nightly through rustup, and cargo-fuzz, when missing.
pub fn ensure_tools() -> Result<(), String> {
    let toolchains = crate::util::output("rustup", &["toolchain", "list"])?;
    if !toolchains.lines().any(|l| l.starts_with("nightly")) {
        run_loud("rustup", &["toolchain", "install", "nightly", "--profile", "minimal"], &root())?;
    }
    if !quiet_ok("cargo", &["fuzz", "--version"]) {
        run_loud("cargo", &["install", "cargo-fuzz", "--locked"], &root())?;
    }
    Ok(())
}

fn le_words(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// A document of the same schema as `v` holding at most one case per
/// distinct kind (`op`, `function`, or the datapath case arrays' first two).
fn cut_vectors(v: &Value) -> Option<Value> {
    let mut out = v.clone();
    let obj = out.as_object_mut()?;
    for key in ["sq_cases", "rq_cases", "cq_cases", "sq_misc_cases"] {
        if let Some(Value::Array(a)) = obj.get_mut(key) {
            a.truncate(2);
        }
    }
    if let Some(Value::Array(a)) = obj.get_mut("cases") {
        let mut seen = Vec::new();
        a.retain(|c| {
            let k = c.get("op").or_else(|| c.get("function")).cloned().unwrap_or(Value::Null);
            if seen.contains(&k) {
                false
            } else {
                seen.push(k);
                true
            }
        });
    }
    obj.remove("helpers");
    Some(out)
}

/// Writes the generated seeds of `target` into `dir`.
fn seeds(target: &str, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut s: Vec<Vec<u8>> = vec![Vec::new(), vec![0xff; 64]];
    match target {
        "cqe_poll" => {
            // RC, 3 sends, 2 receives; one valid SQ CQE, one RQ CQE.
            let mut v = vec![0b0100_0110, 4, 0, 1];
            v.extend(le_words(&[0, 0, 0x2a, 1 << 63 | 1 << 62 | 1]));
            v.extend(le_words(&[100, 0, 0x2a, 1 << 63]));
            s.push(v);
        }
        "ccq_cqe" => {
            let mut v = vec![4];
            v.extend(le_words(&[0, 0xc0de, 0, 1 << 63]));
            s.push(v);
        }
        "aeqe" => s.push(le_words(&[0x1234, 1 << 63 | 0x102 << 52 | 7])),
        // Consume by CQ poll then batches of 4; aim at the live QP; a QP
        // access error (0x0102) and an overflow-flagged entry.
        "aeq_device" => s.push({
            let mut v = vec![0b0000_0111, 1];
            // (AEQE word 1: code [45:34], source [53:50], overflow 33.)
            v.extend(le_words(&[0x1234, 0x102 << 34 | 1 << 50 | 7, 0, 1 << 33 | 0x50c << 34]));
            v
        }),
        "fpm_hmc" => s.push({
            let mut v = vec![0u8; 1 + 16];
            v[1] = 64;
            v[5] = 128;
            v[9] = 0x10;
            v.extend(le_words(&[1 << 32 | 8; 48]));
            v
        }),
        "model_wqe" => {
            s.push(le_words(&[0x1000, 100 | 5 << 32, 0, 1 << 63 | 0x0a << 32]));
            s.push(le_words(&[0, 0, 0, 1 << 63 | 1 << 57 | 20 << 48, 0, 0, 0, 1 << 63]));
        }
        "nvmet_capsule" => s.push(nvmet_capsule_seed()),
        "cm_mad" => s.extend(cm_mad_seeds()),
        "conformance_json" => s.extend(conformance_seeds()?),
        _ => {}
    }
    for (i, b) in s.iter().enumerate() {
        let p = dir.join(format!("seed-{i}"));
        std::fs::write(&p, b).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

/// The `nvmet_capsule` seed.
fn nvmet_capsule_seed() -> Vec<u8> {
    // 1 KiB in-capsule, 512-byte blocks, 4 I/O queues; then a
    // script (fuzz/fuzz_targets/nvmet_capsule.rs): open the admin
    // queue, Connect (fetch valid data), enable, Identify, open
    // QID 1, in-capsule Connect, keyed Write (+ fetched), Read,
    // AER, poll past the keep-alive.
    vec![
        0x10, 0, 3, //
        0, 0, 0, 31, //
        3, 0, 0, 0, 1, 0, 0, 0, 0, //
        4, 0, 0, 1, //
        3, 0, 1, 1, 2, 0, 0, //
        3, 0, 2, 2, 1, 0, 0, //
        0, 1, 1, 127, //
        3, 1, 0, 6, 3, 0, 0, //
        3, 1, 1, 5, 4, 0, 0, //
        4, 1, 1, 1, //
        3, 1, 2, 4, 5, 0, 0, //
        3, 0, 3, 7, 31, 0, 0, //
        6, 0, 5, 0, 0x10, 0x27, //
    ]
}

/// The `cm_mad` seeds, one per CM attribute.
fn cm_mad_seeds() -> Vec<Vec<u8>> {
    let mut s = Vec::new();
    // a CM MAD header (base 1, class CM, version 2, Send) with each
    // attribute id; a REQ to the listened TCP port 4420 with a
    // valid IPv4 cma_hdr and GIDs; the others name the target's
    // active connection (remote comm id 6)
    for attr in 0x10..=0x16u8 {
        let mut v = vec![0u8; 256];
        v[..4].copy_from_slice(&[1, 7, 2, 3]);
        v[17] = attr;
        if attr == 0x10 {
            v[24 + 12..24 + 16].copy_from_slice(&[0x01, 0x06, 0x11, 0x44]);
            v[24 + 50] = 0x37;
            v[24 + 66..24 + 72].copy_from_slice(&[0xff, 0xff, 192, 0, 2, 1]);
            v[24 + 82..24 + 88].copy_from_slice(&[0xff, 0xff, 192, 0, 2, 2]);
            v[24 + 141] = 0x40;
            v[24 + 156..24 + 160].copy_from_slice(&[192, 0, 2, 1]);
            v[24 + 172..24 + 176].copy_from_slice(&[192, 0, 2, 2]);
        } else {
            v[24 + 7] = 6;
        }
        s.push(v);
    }
    s
}

/// The `conformance_json` seeds: every suite file, cut down.
fn conformance_seeds() -> Result<Vec<Vec<u8>>, String> {
    let mut s = Vec::new();
    let vdir = crate::conformance::vector_dir();
    for (_, file) in crate::conformance::SUITE {
        let path = vdir.join(file);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(cut) = cut_vectors(&v) {
            s.push(cut.to_string().into_bytes());
        }
    }
    s.push(br#"{"cases":[{"op":"x","builder":"y"}]}"#.to_vec());
    Ok(s)
}

/// `Done N runs` from libFuzzer's output.
fn runs_of(log: &str) -> Option<u64> {
    log.lines().rev().find_map(|l| {
        let rest = l.trim().strip_prefix("Done ")?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The leg.
pub fn leg() -> Result<String, String> {
    // By default each target runs a fixed number of inputs from a fixed
    // seed on a fresh corpus, so the leg is deterministic (a run that
    // passed once passes again on the same tree); `XTASK_FUZZ_SECS` asks
    // for a time-bounded exploratory run on the kept corpus instead.
    let secs: Option<u64> =
        std::env::var("XTASK_FUZZ_SECS").ok().and_then(|s| s.parse().ok()).filter(|s| *s > 0);
    ensure_tools()?;
    let dir = fuzz_dir();
    let t = Instant::now();
    run_loud("cargo", &["+nightly", "fuzz", "build"], &dir)?;
    println!("xtask fuzz: targets built in {:.0} s", t.elapsed().as_secs_f64());
    let logs = dir.join("target").join("xtask-logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let mut counts = Vec::new();
    let mut failed = Vec::new();
    for target in TARGETS {
        let (runs, passed) = run_target(&dir, &logs, target, secs)?;
        if !passed {
            failed.push(*target);
        }
        counts.push(format!("{target} {}", runs.map_or("?".into(), |n| n.to_string())));
    }
    let summary = format!("executions: {}", counts.join(", "));
    if failed.is_empty() {
        Ok(summary)
    } else {
        Err(format!("crashed: {} ({summary}); see {}", failed.join(", "), logs.display()))
    }
}

/// Runs one target on fresh seeds (and a fresh corpus unless `secs` asks
/// for a timed run on the kept one): its run count and whether it passed.
fn run_target(
    dir: &Path,
    logs: &Path,
    target: &str,
    secs: Option<u64>,
) -> Result<(Option<u64>, bool), String> {
    let seed_dir = dir.join("target").join("seeds").join(target);
    seeds(target, &seed_dir)?;
    let corpus = match secs {
        Some(_) => dir.join("corpus").join(target),
        None => {
            let c = dir.join("target").join("corpus-fixed").join(target);
            let _ = std::fs::remove_dir_all(&c);
            c
        }
    };
    std::fs::create_dir_all(&corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
    let log = logs.join(format!("{target}.log"));
    let log_file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err_file = log_file.try_clone().map_err(|e| e.to_string())?;
    let budget = budget_arg(target, secs);
    // Conformance documents are longer than binary inputs; the seeds
    // (cut vector files, up to ~40 KB) must not be truncated.
    let max_len = format!("-max_len={}", if target == "conformance_json" { 65536 } else { 4096 });
    let args = [
        "+nightly",
        "fuzz",
        "run",
        target,
        corpus.to_str().unwrap_or_default(),
        seed_dir.to_str().unwrap_or_default(),
        "--",
        &budget,
        "-seed=1",
        &max_len,
        "-rss_limit_mb=2048",
        "-timeout=10",
        // The conformance runner prints a line per failing case.
        "-close_fd_mask=1",
    ];
    println!("xtask fuzz: running `cargo {}` (log: {})", args.join(" "), log.display());
    let st = status_bounded(
        Command::new("cargo").args(args).current_dir(dir).stdout(log_file).stderr(err_file),
        &format!("cargo fuzz run {target}"),
    )?;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let runs = runs_of(&text);
    println!(
        "xtask fuzz: {target}: {} runs ({}){}",
        runs.map_or("?".into(), |n| n.to_string()),
        secs.map_or_else(|| "fixed seed and count".into(), |s| format!("{s} s")),
        if st.success() { "" } else { " — CRASH" }
    );
    if !st.success() {
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        for l in tail.iter().rev() {
            println!("    {l}");
        }
    }
    Ok((runs, st.success()))
}

/// libFuzzer's budget for `target`: `secs` seconds, else a fixed count.
fn budget_arg(target: &str, secs: Option<u64>) -> String {
    match secs {
        Some(secs) => format!("-max_total_time={secs}"),
        // About 5–15 s each on this 2-core machine.
        None => format!(
            "-runs={}",
            match target {
                "fpm_hmc" => 5_000,
                // A probed device per process, objects per input.
                "aeq_device" => 5_000,
                "conformance_json" => 20_000,
                "cqe_poll" => 200_000,
                // Up to 64 commands per input (~15 s).
                "nvmet_capsule" => 200_000,
                _ => 400_000,
            }
        ),
    }
}
