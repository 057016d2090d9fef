//! Conformance vectors from the vendor harness (issue #30: "the harness can
//! regenerate them (same seeds give the same files) so the repo's copies
//! and the harness never drift").
//!
//! - `cargo xtask vendor-diff --write-vectors DIR [--seed N] [--cases N]`
//!   writes `<area>-vectors.json` into DIR from the vendor code
//!   (`tests/vendor-diff/src/regen`).
//! - `cargo xtask vendor-diff --rederive [DIR]` re-derives the published
//!   files in DIR (default `tests/conformance`) from the vendor code and
//!   prints per file how many cases came out identical, differ, or cannot
//!   be expressed.
//! - The `vendor-diff` leg regenerates the repo's harness set
//!   ([`HARNESS_DIR`], [`SEED`], [`CASES`]) into `target/` and fails on any
//!   byte of drift, and re-derives the published copies (failing on an
//!   unexplained difference); the `conformance-harness-*` legs run the
//!   driver against the harness set (`conformance::HARNESS`).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::util::{self, root, status_bounded};
use crate::vendor_diff::{CC, vendor_tree};

/// Where the repo keeps the harness-generated set, from the root (defined
/// beside its reader, the conformance runner, which the fuzz target also
/// compiles without this module).
pub use crate::conformance::HARNESS_DIR;
/// Its seed and per-area case count (the conformance legs run it in
/// seconds).
pub const SEED: u64 = 0x1a2b_3c4d;
pub const CASES: u64 = 48;

/// Runs the harness binary with `args` (fetching and building the vendor
/// side first).
fn harness(args: &[String], what: &str) -> Result<(), String> {
    util::ensure_program(&CC)?;
    let dir = vendor_tree()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut c = Command::new(cargo);
    c.args(["run", "--quiet", "-p", "vendor-diff", "--"])
        .args(args)
        .env("IRDMA_VENDOR_DIR", &dir)
        .current_dir(root());
    let st = status_bounded(&mut c, what)?;
    if st.success() { Ok(()) } else { Err(format!("{what} exited with {st}")) }
}

/// Writes every area's file into `dir`.
pub fn write(dir: &Path, seed: u64, cases: u64) -> Result<(), String> {
    let args = [
        "--write-vectors".to_string(),
        dir.display().to_string(),
        "--seed".into(),
        seed.to_string(),
        "--cases".into(),
        cases.to_string(),
    ];
    harness(&args, "vendor-diff --write-vectors")
}

/// Re-derives the published files in `dir`; `Err` on an unexplained
/// difference (the harness prints the report).
pub fn rederive(dir: &Path) -> Result<(), String> {
    harness(&["--rederive".into(), dir.display().to_string()], "vendor-diff --rederive")
}

/// The first line where two texts differ (1-based), for the message.
fn first_line_diff(a: &str, b: &str) -> usize {
    a.lines()
        .zip(b.lines())
        .position(|(x, y)| x != y)
        .unwrap_or(a.lines().count().min(b.lines().count()))
        + 1
}

/// Compares the freshly written `fresh` directory with the repo's set.
pub fn compare(fresh: &Path, repo: &Path) -> Result<usize, String> {
    let json = |d: &Path| -> Result<Vec<String>, String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .map_err(|e| format!("{}: {e}", d.display()))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .collect();
        v.sort();
        Ok(v)
    };
    let (want, have) = (json(fresh)?, json(repo)?);
    let regen = format!(
        "regenerate with `cargo xtask vendor-diff --write-vectors {HARNESS_DIR} --seed {SEED:#x} --cases {CASES}` \
         and commit the result if the change is meant"
    );
    let mut problems = Vec::new();
    for n in &want {
        let a = std::fs::read_to_string(fresh.join(n)).map_err(|e| format!("{n}: {e}"))?;
        match std::fs::read_to_string(repo.join(n)) {
            Err(_) => problems.push(format!("{HARNESS_DIR}/{n}: missing (the harness writes it)")),
            Ok(b) if a != b => problems.push(format!(
                "{HARNESS_DIR}/{n}: drifted from the harness (first difference at line {})",
                first_line_diff(&a, &b)
            )),
            Ok(_) => {}
        }
    }
    for n in have.iter().filter(|n| !want.contains(n)) {
        problems.push(format!("{HARNESS_DIR}/{n}: not written by the harness"));
    }
    if problems.is_empty() {
        Ok(want.len())
    } else {
        Err(format!("{}; {regen}", problems.join("; ")))
    }
}

fn scratch() -> PathBuf {
    root().join("target").join("vendor-vectors-check")
}

/// The leg's part: no drift, and the published copies re-derive.
pub fn leg() -> Result<String, String> {
    let fresh = scratch();
    let _ = std::fs::remove_dir_all(&fresh);
    write(&fresh, SEED, CASES)?;
    let n = compare(&fresh, &root().join(HARNESS_DIR))?;
    rederive(&root().join("tests").join("conformance"))?;
    Ok(format!(
        "{n} harness vector files equal to a fresh regeneration; published copies re-derived"
    ))
}

/// `--write-vectors DIR` / `--rederive [DIR]` of `cargo xtask vendor-diff`;
/// `None` when `args` hold neither.
pub fn main(args: &[String]) -> Option<ExitCode> {
    let pos = args.iter().position(|a| a == "--write-vectors" || a == "--rederive")?;
    let write_mode = args[pos] == "--write-vectors";
    let (mut seed, mut cases) = (SEED, CASES);
    // DIR follows the mode flag; the rest are numeric options
    let dir = args.get(pos + 1).cloned();
    let rest: Vec<String> = args
        .iter()
        .enumerate()
        .filter(|(i, _)| !(pos..=pos + 1).contains(i))
        .map(|(_, a)| a.clone())
        .collect();
    if !util::parse_options(&rest, &mut [("--seed", &mut seed), ("--cases", &mut cases)]) {
        eprintln!(
            "usage: cargo xtask vendor-diff --write-vectors DIR [--seed N] [--cases N] | --rederive [DIR]"
        );
        return Some(ExitCode::FAILURE);
    }
    let r = if write_mode {
        match dir {
            Some(d) => write(Path::new(&d), seed, cases),
            None => Err("--write-vectors needs a directory".into()),
        }
    } else {
        rederive(&dir.map_or_else(|| root().join("tests").join("conformance"), PathBuf::from))
    };
    Some(match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask vendor-diff: {e}");
            ExitCode::FAILURE
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_named_with_its_line() {
        let base = std::env::temp_dir().join(format!("vdvec-compare-{}", std::process::id()));
        let (a, b) = (base.join("fresh"), base.join("repo"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("x-vectors.json"), "{\n  \"a\": 1\n}\n").unwrap();
        std::fs::write(b.join("x-vectors.json"), "{\n  \"a\": 1\n}\n").unwrap();
        assert_eq!(compare(&a, &b), Ok(1));
        std::fs::write(b.join("x-vectors.json"), "{\n  \"a\": 2\n}\n").unwrap();
        let e = compare(&a, &b).unwrap_err();
        assert!(e.contains("x-vectors.json: drifted") && e.contains("line 2"), "{e}");
        std::fs::write(b.join("x-vectors.json"), "{\n  \"a\": 1\n}\n").unwrap();
        std::fs::write(b.join("y-vectors.json"), "{}").unwrap();
        assert!(compare(&a, &b).unwrap_err().contains("y-vectors.json: not written"));
        std::fs::remove_file(b.join("y-vectors.json")).unwrap();
        std::fs::remove_file(b.join("x-vectors.json")).unwrap();
        assert!(compare(&a, &b).unwrap_err().contains("x-vectors.json: missing"));
        let _ = std::fs::remove_dir_all(&base);
    }
}
