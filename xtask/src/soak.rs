//! `cargo xtask soak --ops N --seed S` and the `soak` leg (issue #19).
//!
//! The engine is the test `fault_soak` in `tests/fault_soak.rs` (so a plain
//! `cargo test` runs a short one): seeded random verbs traffic between two
//! model devices with faults of every kind the model offers, checked
//! against a reference model. This runs it in a release build with the
//! given operation count and seed (`IRDMA_SOAK_OPS`, `IRDMA_SOAK_SEED`) and
//! prints its result line, `ops=… faults=… completions=… lost=…
//! duplicated=… leaked=…`.

use std::fs::File;
use std::process::{Command, ExitCode, Stdio};

use crate::util::{root, status_bounded};

/// Operations of the `soak` leg (release build; the `test` leg's debug
/// run of the same test does its own, shorter default).
const LEG_OPS: u64 = 100_000;
/// Seed of the `soak` leg and the default of `cargo xtask soak`.
pub const DEFAULT_SEED: u64 = 0x50a4_f417;

pub fn main(args: &[String]) -> ExitCode {
    let (mut ops, mut seed) = (LEG_OPS, DEFAULT_SEED);
    if !crate::util::parse_options(args, &mut [("--ops", &mut ops), ("--seed", &mut seed)]) {
        eprintln!(
            "usage: cargo xtask soak [--ops N] [--seed S]   (defaults: {LEG_OPS} ops, seed {DEFAULT_SEED:#x}; S may be hex 0x…)"
        );
        return ExitCode::FAILURE;
    }
    crate::util::exit_with(run(ops, seed), "soak")
}

/// Runs the soak; returns its result line (and fails if the test failed:
/// anything lost, duplicated, leaked, misordered or mismatched).
pub fn run(ops: u64, seed: u64) -> Result<String, String> {
    let out_path = root().join("target").join(format!("soak-{seed:x}-{ops}.out"));
    let _ = std::fs::create_dir_all(root().join("target"));
    let out = File::create(&out_path).map_err(|e| format!("{}: {e}", out_path.display()))?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "test",
        "--release",
        "-p",
        "irdma",
        "--test",
        "fault_soak",
        "--",
        "--exact",
        "fault_soak",
        "--nocapture",
    ])
    .env("IRDMA_SOAK_OPS", ops.to_string())
    .env("IRDMA_SOAK_SEED", seed.to_string())
    .current_dir(root())
    .stdout(Stdio::from(out));
    let status = status_bounded(&mut cmd, "cargo test --test fault_soak")?;
    let text = std::fs::read_to_string(&out_path).unwrap_or_default();
    let line = text
        .lines()
        .find(|l| l.starts_with("ops="))
        .map(|l| format!("seed={seed:#x} {l}"))
        .unwrap_or_default();
    if status.success() && !line.is_empty() {
        Ok(line)
    } else {
        Err(format!(
            "the soak failed ({status}); {}; output in {}",
            if line.is_empty() { "no result line" } else { &line },
            out_path.display()
        ))
    }
}

/// The `soak` leg: [`LEG_OPS`] operations from [`DEFAULT_SEED`].
pub fn leg() -> Result<String, String> {
    run(LEG_OPS, DEFAULT_SEED)
}
