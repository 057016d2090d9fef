//! `cargo xtask bench`: instructions per data-path operation under callgrind.
//!
//! Builds the `uk` bench binary (release), runs each case with N and 2N
//! iterations under `valgrind --tool=callgrind`, and prints
//! `name=value` with value = (Ir(2N) − Ir(N)) / N, so set-up cost cancels.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use crate::util::root;

/// (printed name, bench case, subtract this case's figure, iterations N).
const CASES: &[(&str, &str, Option<&str>, u64)] = &[
    ("post_write_1sge_doorbell_each", "post_write", None, 4096),
    ("post_write_1sge_doorbell_per32", "post_write_batch32", None, 4096),
    ("mp_post_write_1sge_doorbell_each", "mp_post_write", None, 4096),
    ("mp_post_write_1sge_doorbell_per32", "mp_post_write_batch32", None, 4096),
    ("poll_one_cqe", "poll_cqe", Some("poll_cqe_base"), 2048),
    ("poll_empty_cq", "poll_empty", None, 4096),
];

fn bench_binary() -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--release", "-p", "irdma", "--bench", "uk", "--message-format=json"])
        .current_dir(root())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("bench build failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if v["reason"] == "compiler-artifact"
            && v["target"]["name"] == "uk"
            && let Some(exe) = v["executable"].as_str()
        {
            return Ok(PathBuf::from(exe));
        }
    }
    Err("bench binary not found in cargo's output".into())
}

/// Total instructions (Ir) of one run under callgrind.
fn instructions(exe: &PathBuf, case: &str, n: u64) -> Result<u64, String> {
    let file = std::env::temp_dir().join(format!("irdma-cg-{case}-{n}-{}.out", std::process::id()));
    let out = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", file.display()))
        .arg(exe)
        .args([case, &n.to_string()])
        .output()
        .map_err(|e| format!("cannot run valgrind: {e}"))?;
    if !out.status.success() {
        return Err(format!("{case} {n} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let _ = std::fs::remove_file(&file);
    text.lines()
        .find_map(|l| l.strip_prefix("summary:").or_else(|| l.strip_prefix("totals:")))
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no summary line in callgrind output for {case}"))
}

fn per_op(exe: &PathBuf, case: &str, n: u64) -> Result<f64, String> {
    let a = instructions(exe, case, n)?;
    let b = instructions(exe, case, 2 * n)?;
    Ok(b.saturating_sub(a) as f64 / n as f64)
}

/// `cargo xtask bench`.
pub fn main() -> ExitCode {
    let exe = match bench_binary() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut ok = true;
    for (name, case, base, n) in CASES {
        let r = per_op(&exe, case, *n).and_then(|v| match base {
            Some(b) => per_op(&exe, b, *n).map(|w| v - w),
            None => Ok(v),
        });
        match r {
            Ok(v) => println!("{name}={v:.1}"),
            Err(e) => {
                eprintln!("bench {name}: {e}");
                ok = false;
            }
        }
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
