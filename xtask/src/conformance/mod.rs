//! `cargo xtask conformance FILE…`: the driver's real code against the
//! golden vectors in `tests/conformance/` (see its README for the schemas).
//!
//! The schema of a file is recognised from its contents; each schema has its
//! own runner module. A runner prints one line per failing case with the
//! first differing word, skip reasons, and ends with
//! `N passed, M failed, K skipped`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;

mod cqp;
mod datapath;
mod lan;
mod rw;

/// Conformance legs of `cargo xtask test`: (leg name, vector file name).
/// A schema joins this list when the driver code it covers exists.
pub const SUITE: &[(&str, &str)] = &[
    ("conformance-datapath", "datapath-vectors.json"),
    ("conformance-cqp", "cqp-vectors.json"),
    ("conformance-cqp-ud", "cqp-ud-vectors.json"),
    ("conformance-rw", "rw-vectors.json"),
    ("conformance-lan", "lan-aq-vectors.json"),
];

/// Legs over the harness-generated set in `tests/conformance/harness/`
/// (written by `cargo xtask vendor-diff --write-vectors`, checked for drift
/// by the `vendor-diff` leg): (leg name, file name). The rw area joins when
/// the harness generates it.
pub const HARNESS: &[(&str, &str)] = &[
    ("conformance-harness-datapath", "datapath-vectors.json"),
    ("conformance-harness-cqp", "cqp-vectors.json"),
    ("conformance-harness-cqp-ud", "cqp-ud-vectors.json"),
    ("conformance-harness-lan", "lan-aq-vectors.json"),
    ("conformance-harness-rw", "rw-vectors.json"),
];

/// A `conformance-harness-*` leg: the named file of the harness set
/// ([`harness_dir`]).
pub fn run_harness_leg(file: &str) -> Result<String, String> {
    let dir = harness_dir_from(std::env::var_os("IRDMA_CONFORMANCE_DIR"));
    let t = run_file(&dir.join(file))?;
    let line = format!("{} ({})", t.line(), dir.display());
    if t.failed == 0 && t.passed > 0 { Ok(line) } else { Err(line) }
}

/// Where the repo keeps the vendor-diff harness's generated set, from the
/// root (`cargo xtask vendor-diff --write-vectors`, `vendor_vectors.rs`).
pub const HARNESS_DIR: &str = "tests/conformance/harness";

/// Where the harness-generated set is read from, given
/// `$IRDMA_CONFORMANCE_DIR`: its `harness/` folder when the variable is set
/// and that folder exists (a set regenerated elsewhere, laid out like
/// `tests/conformance/`), else the repo's `tests/conformance/harness` (a
/// published set alone has no harness folder; the harness legs then keep
/// judging the repo's generated files).
pub fn harness_dir_from(env: Option<std::ffi::OsString>) -> PathBuf {
    if let Some(d) = env {
        let h = PathBuf::from(d).join("harness");
        if h.is_dir() {
            return h;
        }
    }
    crate::util::root().join(HARNESS_DIR)
}

/// Totals of one run.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Cases that matched.
    pub passed: usize,
    /// Cases that differed.
    pub failed: usize,
    /// Cases skipped, each with a printed reason.
    pub skipped: usize,
}

impl Tally {
    /// The closing line.
    pub fn line(&self) -> String {
        format!("{} passed, {} failed, {} skipped", self.passed, self.failed, self.skipped)
    }

    /// Counts one case's verdict: a failure is printed at once
    /// (`FAIL name: why`), a skip's reason handed back (the runner prints
    /// those at once or after the failures).
    fn count(&mut self, name: &str, o: Outcome) -> Option<String> {
        match o {
            Outcome::Pass => self.passed += 1,
            Outcome::Fail(why) => {
                self.failed += 1;
                println!("FAIL {name}: {why}");
            }
            Outcome::Skip(why) => {
                self.skipped += 1;
                return Some(why);
            }
        }
        None
    }
}

/// The verdict on one case (the LAN and rw runners).
enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
}

/// A vector's number: a JSON integer (a negative one as its two's-complement
/// `u64`), a `"0x…"` or decimal string, or a bool; anything else is `None`.
/// Shared by the CQP and LAN runners, whose vectors spell numbers all ways.
fn num(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| n.as_i64().map(|x| x as u64)),
        Value::String(s) => {
            let s = s.trim();
            if let Some(h) = s.strip_prefix("0x") {
                u64::from_str_radix(h, 16).ok()
            } else {
                s.parse().ok()
            }
        }
        Value::Bool(b) => Some(u64::from(*b)),
        _ => None,
    }
}

/// Where the vectors live: `$IRDMA_CONFORMANCE_DIR`, else the repo's copy
/// in `tests/conformance/`.
pub fn vector_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("IRDMA_CONFORMANCE_DIR") {
        return PathBuf::from(d);
    }
    crate::util::root().join("tests").join("conformance")
}

/// Which schema a parsed file follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// `datapath-vectors.json`: SQ/RQ WQEs, rings, CQEs.
    Datapath,
    /// `cqp-vectors.json`: CQP WQEs, host contexts, decoders.
    Cqp,
    /// `rw-vectors.json`: rdma_rw decisions and WR chains.
    Rw,
    /// `lan-aq-vectors.json`: the LAN side's admin queue.
    Lan,
}

/// Recognises the schema of a vector file.
pub fn schema_of(v: &Value) -> Option<Schema> {
    if v.get("sq_cases").is_some() {
        return Some(Schema::Datapath);
    }
    let first = v.get("cases")?.as_array()?.first()?;
    if first.get("op").is_some() && first.get("vendor").is_some() {
        Some(Schema::Lan)
    } else if first.get("op").is_some() && first.get("builder").is_some() {
        Some(Schema::Cqp)
    } else if first.get("function").is_some() {
        Some(Schema::Rw)
    } else {
        None
    }
}

/// Runs one file and returns its tally, or why it could not run.
pub fn run_file(path: &Path) -> Result<Tally, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    run_text(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses a vector document and runs its cases: the reader without the
/// file (the fuzz target `conformance_json` calls this on fuzz bytes).
pub fn run_text(text: &str) -> Result<Tally, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    run_value(&v)
}

/// Runs a parsed vector document by its schema.
pub fn run_value(v: &Value) -> Result<Tally, String> {
    match schema_of(v) {
        Some(Schema::Datapath) => datapath::run(v),
        Some(Schema::Cqp) => cqp::run(v),
        Some(Schema::Rw) => Ok(rw::run(v)),
        Some(Schema::Lan) => lan::run(v),
        None => Err("unknown conformance schema".into()),
    }
}

/// A `cargo xtask test` leg: the named file from [`vector_dir`].
pub fn run_leg(file: &str) -> Result<String, String> {
    let path = vector_dir().join(file);
    let t = run_file(&path)?;
    if t.failed == 0 && t.passed > 0 { Ok(t.line()) } else { Err(t.line()) }
}

/// `cargo xtask conformance FILE…`.
pub fn main(files: &[String]) -> ExitCode {
    if files.is_empty() {
        eprintln!("usage: cargo xtask conformance FILE… (vectors: {})", vector_dir().display());
        return ExitCode::FAILURE;
    }
    let mut ok = true;
    for f in files {
        match run_file(Path::new(f)) {
            Ok(t) => {
                println!("{f}: {}", t.line());
                ok &= t.failed == 0;
            }
            Err(e) => {
                eprintln!("{e}");
                ok = false;
            }
        }
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_counts_each_verdict_and_hands_skips_back() {
        let mut t = Tally::default();
        assert_eq!(t.count("a", Outcome::Pass), None);
        assert_eq!(t.count("b", Outcome::Fail("x".into())), None);
        assert_eq!(t.count("c", Outcome::Skip("why".into())), Some("why".into()));
        assert_eq!(t, Tally { passed: 1, failed: 1, skipped: 1 });
    }

    /// `$IRDMA_CONFORMANCE_DIR/harness` is read when it exists; without
    /// the variable, or with a directory that has no harness folder, the
    /// repo's set.
    #[test]
    fn harness_legs_honour_the_conformance_dir() {
        let repo = crate::util::root().join(HARNESS_DIR);
        let base = std::env::temp_dir().join(format!("vdvec2-hdir-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        assert_eq!(harness_dir_from(None), repo);
        assert_eq!(harness_dir_from(Some(base.clone().into())), repo);
        std::fs::create_dir_all(base.join("harness")).unwrap();
        assert_eq!(harness_dir_from(Some(base.clone().into())), base.join("harness"));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn schemas_are_told_apart() {
        let v = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        assert_eq!(schema_of(&v(r#"{"sq_cases":[]}"#)), Some(Schema::Datapath));
        assert_eq!(schema_of(&v(r#"{"cases":[{"op":"x","builder":"y"}]}"#)), Some(Schema::Cqp));
        assert_eq!(schema_of(&v(r#"{"cases":[{"op":"x","vendor":["f"]}]}"#)), Some(Schema::Lan));
        assert_eq!(schema_of(&v(r#"{"cases":[{"function":"f"}]}"#)), Some(Schema::Rw));
        assert_eq!(schema_of(&v(r#"{"cases":[{}]}"#)), None);
    }

    /// Issue #30 (seed 77, `cq_script_2028`, `cq_script_4967`): a poll
    /// takes the second slot of an extended CQE for a CQE; its qword 1 is
    /// the published QP context, which the runner must map to its own QP
    /// as it does for a CQE's (else the driver drops it as `NoQp`).
    #[test]
    fn an_extension_slot_polled_as_a_cqe_is_our_qp() {
        let t = run_text(include_str!("fixtures/seed77-cq-ext-ctx.json")).expect("runs");
        assert_eq!((t.passed, t.failed, t.skipped), (2, 0, 0));
    }

    #[test]
    fn lan_runner_takes_hostile_geometry_without_panicking() {
        // a case whose registers and answers point past the ring must not
        // touch memory outside it (the fuzz target feeds arbitrary JSON)
        let doc = r#"{"cases":[{"op":"get_fw_ver","name":"x","vendor":["ice_aq_get_fw_ver"],
            "inputs":{"ring":{"sq_entries":4,"rq_entries":4,"sq_buf_size":64,"rq_buf_size":64,
                              "position":3,"arq_position":0},
                      "hw":{"mac_type":"E810"},"state":{"atqlen":"0x800003ff","atqh":3},
                      "arq_events":[{"opcode":"0x0607","buf":"ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"}]},
            "outputs":{"ret":0,"calls":[{"fn":"ice_aq_get_fw_ver","ret":0,"outputs":{}}],
                       "commands":[{"call":0,"slot":3,"desc":{"hex":""},
                                    "resp":{"desc":"03","buf":{"len":100000,"hex":"ff"}}}],
                       "reg_writes":[]}}]}"#;
        let t = run_text(doc).expect("runs");
        assert_eq!(t.passed + t.failed + t.skipped, 1);
    }
}
