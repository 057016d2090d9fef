//! Conformance vectors from the vendor's own code (issue #30: "the harness
//! can regenerate them (same seeds give the same files) so the repo's
//! copies and the harness never drift").
//!
//! - `--write-vectors DIR [--seed N] [--cases N]` ([`write_vectors`]):
//!   writes `<area>-vectors.json` for every area of [`AREAS`], in the
//!   published schema of that file (`tests/conformance/README.md`), with
//!   every expected value taken from running the vendor code compiled by
//!   this crate on the harness's seeded inputs. `meta` names the generator,
//!   the seed, the case count and the source package version. The output
//!   is a pure function of (seed, cases, vendor package): no addresses of
//!   host memory, no time, sorted keys, so the same seed and count give
//!   byte-identical files.
//! - `--rederive DIR` ([`rederive`]): for every case of each published
//!   file in DIR whose inputs the harness can express, runs the vendor code
//!   on the case's inputs and compares the result with the recorded
//!   expectation; prints per file `N re-derived identical, M differ, K not
//!   expressible (why)`.
//!
//! An area is one row of [`AREAS`]: its file name, its generator and its
//! re-deriver (the rw area joins with one row and one module).

use std::path::Path;

use serde_json::Value;

/// Puts fields of `$k` into a case's inputs through `$put(key, value)`,
/// each under its own name behind an optional key prefix: `dec [..]` as a
/// JSON number, `hex [..]` as a `0x` string ([`hx`]).
macro_rules! put_fields {
    ($put:ident, $k:expr;) => {};
    ($put:ident, $k:expr; dec $pre:literal [$($f:ident)*] $($rest:tt)*) => {
        $($put(concat!($pre, stringify!($f)), $k.$f.into());)*
        put_fields!($put, $k; $($rest)*)
    };
    ($put:ident, $k:expr; hex $pre:literal [$($f:ident)*] $($rest:tt)*) => {
        $($put(concat!($pre, stringify!($f)), $crate::regen::hx($k.$f));)*
        put_fields!($put, $k; $($rest)*)
    };
    ($put:ident, $k:expr; $how:ident [$($f:ident)*] $($rest:tt)*) => {
        put_fields!($put, $k; $how "" [$($f)*] $($rest)*)
    };
}

/// The struct `$T` read back from a case's inputs: the fields in braces as
/// written, then groups of fields read through `$fit!(key)` (the input
/// into the field's type, or why not) from the input of the field's own
/// name behind an optional key prefix.
macro_rules! fit_fields {
    (@ $fit:ident, $($T:ident)::+ { $($acc:tt)* }) => {
        $($T)::+ { $($acc)* }
    };
    (@ $fit:ident, $($T:ident)::+ { $($acc:tt)* } $pre:literal [$($g:ident)*] $($rest:tt)*) => {
        fit_fields!(@ $fit, $($T)::+ {
            $($acc)* $($g: $fit!(concat!($pre, stringify!($g))),)*
        } $($rest)*)
    };
    (@ $fit:ident, $($T:ident)::+ { $($acc:tt)* } [$($g:ident)*] $($rest:tt)*) => {
        fit_fields!(@ $fit, $($T)::+ { $($acc)* } "" [$($g)*] $($rest)*)
    };
    ($fit:ident, $($T:ident)::+ { $($f:ident $(: $e:expr)?),* $(,)? } $($groups:tt)*) => {
        fit_fields!(@ $fit, $($T)::+ { $($f $(: $e)?,)* } $($groups)*)
    };
}

mod aeqe;
mod ccq;
mod cqp;
mod datapath;
mod dpcq;
mod dpmisc;
mod lan;
mod qpc;
mod rw;

/// One written file.
pub struct Written {
    pub doc: Value,
    /// Cases (vectors) in it.
    pub count: usize,
}

/// What re-deriving one published file found.
#[derive(Default, Debug)]
pub struct Rederived {
    pub identical: usize,
    /// Of `identical`: equal once the bytes the kernel's pre-clear wrote
    /// are left out (datapath only, see `datapath::preclear_only`).
    pub preclear: usize,
    pub differ: Vec<String>,
    /// Documented differences (kernel vs userspace copy, Linux 6.1 vs the
    /// published source, already listed in deviations.toml): reason → cases.
    pub kernel_vs_user: std::collections::BTreeMap<String, usize>,
    /// Reason → cases.
    pub not_expressible: std::collections::BTreeMap<String, usize>,
}

impl Rederived {
    pub fn line(&self) -> String {
        let known = self.kernel_vs_user.values().sum::<usize>();
        let mut s = format!(
            "{} re-derived identical, {} differ ({} of them documented differences), {} not expressible",
            self.identical,
            self.differ.len() + known,
            known,
            self.not_expressible.values().sum::<usize>()
        );
        for (why, n) in &self.kernel_vs_user {
            s.push_str(&format!("\n    documented: {n} × {why}"));
        }
        if self.preclear > 0 {
            s.push_str(&format!(
                "\n    of the identical: {} once the kernel pre-clear's bytes (uk.c irdma_clr_wqes, rings under 256 quanta) are left out of the mask",
                self.preclear
            ));
        }
        for (why, n) in &self.not_expressible {
            s.push_str(&format!("\n    not expressible: {n} × {why}"));
        }
        s
    }

    pub(crate) fn known(&mut self, why: &str) {
        *self.kernel_vs_user.entry(why.into()).or_default() += 1;
    }

    pub(crate) fn skip(&mut self, why: &str) {
        *self.not_expressible.entry(why.into()).or_default() += 1;
    }

    /// Compares the re-derived `got` with the recorded `want`, ignoring
    /// `ignore` keys (top level of both objects).
    pub(crate) fn compare(&mut self, name: &str, got: &Value, want: &Value, ignore: &[&str]) {
        match first_diff(got, want, ignore, "") {
            None => self.identical += 1,
            Some(d) => self.differ.push(format!("{name}: {d}")),
        }
    }
}

/// The first difference between two JSON values (numbers and `0x` strings
/// compared as numbers), `None` when equal; `ignore` applies at the top.
pub(crate) fn first_diff(got: &Value, want: &Value, ignore: &[&str], at: &str) -> Option<String> {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            let keys: std::collections::BTreeSet<&String> = g.keys().chain(w.keys()).collect();
            for k in keys {
                if ignore.contains(&k.as_str()) {
                    continue;
                }
                let here = format!("{at}.{k}");
                match (g.get(k), w.get(k)) {
                    (Some(a), Some(b)) => {
                        if let Some(d) = first_diff(a, b, &[], &here) {
                            return Some(d);
                        }
                    }
                    (None, Some(b)) => return Some(format!("{here}: missing, recorded {b}")),
                    (Some(a), None) => return Some(format!("{here}: {a}, not recorded")),
                    (None, None) => {}
                }
            }
            None
        }
        (Value::Array(g), Value::Array(w)) => {
            if g.len() != w.len() {
                return Some(format!("{at}: {} entries, recorded {}", g.len(), w.len()));
            }
            g.iter()
                .zip(w)
                .enumerate()
                .find_map(|(i, (a, b))| first_diff(a, b, &[], &format!("{at}[{i}]")))
        }
        _ => match (num(got), num(want)) {
            (Some(a), Some(b)) if a == b => None,
            _ if got == want => None,
            _ => Some(format!("{at}: {got}, recorded {want}")),
        },
    }
}

/// A JSON number, `0x` string, decimal string or bool as a number.
pub(crate) fn num(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| n.as_i64().map(|x| x as u64)),
        Value::String(s) => match s.trim().strip_prefix("0x") {
            Some(x) => u64::from_str_radix(x, 16).ok(),
            None => s.trim().parse().ok(),
        },
        Value::Bool(b) => Some(u64::from(*b)),
        _ => None,
    }
}

/// `"0x…"` with at least `digits` hex digits.
pub(crate) fn h(v: u64, digits: usize) -> Value {
    Value::String(format!("0x{v:0digits$x}"))
}

/// `"0x…"` of any unsigned field (the inputs' hex form).
pub(crate) fn hx(v: impl Into<u64>) -> Value {
    h(v.into(), 1)
}

pub(crate) fn h8(v: u64) -> Value {
    h(v, 8)
}

pub(crate) fn h16(v: u64) -> Value {
    h(v, 16)
}

/// The vendor package the C side was built from (`VENDOR_VERSION`).
pub(crate) fn source() -> String {
    include_str!("../../VENDOR_VERSION").trim().to_string()
}

/// An area: the file it writes, its generator (seed, cases) and its
/// re-deriver of a published file of the same schema.
pub struct Area {
    pub file: &'static str,
    pub generate: fn(u64, u64) -> Result<Written, String>,
    pub rederive: fn(&Value) -> Rederived,
}

/// Every area the harness writes.
pub const AREAS: &[Area] = &[
    Area {
        file: "datapath-vectors.json",
        generate: datapath::generate,
        rederive: datapath::rederive,
    },
    Area { file: "cqp-vectors.json", generate: cqp::generate, rederive: cqp::rederive },
    Area { file: "cqp-ud-vectors.json", generate: cqp::generate_ud, rederive: cqp::rederive },
    Area { file: "lan-aq-vectors.json", generate: lan::generate, rederive: lan::rederive },
    Area { file: "rw-vectors.json", generate: rw::generate, rederive: rw::rederive },
];

/// The text of a document as written: two-space indented, keys sorted,
/// one trailing newline.
pub fn render(doc: &Value) -> Result<String, String> {
    let mut s = serde_json::to_string_pretty(doc).map_err(|e| e.to_string())?;
    s.push('\n');
    Ok(s)
}

/// Writes every area's file into `dir`; returns one line per file.
pub fn write_vectors(dir: &Path, seed: u64, cases: u64) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut lines = Vec::new();
    let mut failed = Vec::new();
    for a in AREAS {
        let w = match (a.generate)(seed, cases) {
            Ok(w) => w,
            Err(e) => {
                failed.push(format!("{}: {e}", a.file));
                continue;
            }
        };
        let path = dir.join(a.file);
        std::fs::write(&path, render(&w.doc)?).map_err(|e| format!("{}: {e}", path.display()))?;
        lines.push(format!(
            "{}: {} vectors (seed {seed:#x}, {cases} cases)",
            path.display(),
            w.count
        ));
    }
    if failed.is_empty() {
        Ok(lines)
    } else {
        lines.iter().for_each(|l| println!("{l}"));
        Err(failed.join("; "))
    }
}

/// Re-derives every published file of [`AREAS`] found in `dir`; returns
/// one report per file and whether every compared case was identical.
pub fn rederive(dir: &Path) -> Result<(Vec<String>, bool), String> {
    let mut lines = Vec::new();
    let mut all_same = true;
    for a in AREAS {
        let path = dir.join(a.file);
        let Ok(text) = std::fs::read_to_string(&path) else {
            lines.push(format!("{}: absent", path.display()));
            continue;
        };
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let r = (a.rederive)(&v);
        all_same &= r.differ.is_empty();
        lines.push(format!("{}: {}", a.file, r.line()));
        for d in r.differ.iter().take(max_lines()) {
            lines.push(format!("    differs: {d}"));
        }
        if r.differ.len() > max_lines() {
            lines.push(format!("    … and {} more", r.differ.len() - max_lines()));
        }
    }
    Ok((lines, all_same))
}

/// How many differences a re-derivation prints per file
/// (`VENDOR_DIFF_MAX_LINES`, default 40).
fn max_lines() -> usize {
    std::env::var("VENDOR_DIFF_MAX_LINES").ok().and_then(|v| v.parse().ok()).unwrap_or(40)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Same seed and count, byte-identical text; another seed, another file.
    #[test]
    fn same_seed_same_bytes() {
        let _serial = crate::serial();
        for a in AREAS {
            let one = render(&(a.generate)(7, 12).expect("generates").doc).expect("renders");
            let two = render(&(a.generate)(7, 12).expect("generates").doc).expect("renders");
            assert_eq!(one, two, "{}: two runs of seed 7 differ", a.file);
            let other = render(&(a.generate)(8, 12).expect("generates").doc).expect("renders");
            assert_ne!(one, other, "{}: seeds 7 and 8 gave the same file", a.file);
        }
    }

    /// What the harness writes, it re-derives identically; a changed
    /// expectation is reported as a difference.
    #[test]
    fn written_files_rederive_and_a_change_is_caught() {
        let _serial = crate::serial();
        for a in AREAS {
            let w = (a.generate)(5, 48).expect("generates");
            let r = (a.rederive)(&w.doc);
            assert!(r.differ.is_empty() && r.kernel_vs_user.is_empty(), "{}: {r:?}", a.file);
            assert_eq!(r.identical, w.count, "{}: {r:?}", a.file);
            let mut doc = w.doc.clone();
            let hit = match a.file {
                "datapath-vectors.json" => {
                    doc["sq_cases"][0]["output"]["state_after"]["sq_head"].as_u64().map(|h| {
                        doc["sq_cases"][0]["output"]["state_after"]["sq_head"] = (h + 1).into()
                    })
                }
                "rw-vectors.json" => {
                    doc["cases"][0]["outputs"]["rounds"][0]["ret"] = 99.into();
                    Some(())
                }
                "lan-aq-vectors.json" => {
                    doc["cases"][0]["outputs"]["ret"] = 99.into();
                    Some(())
                }
                _ => doc["cases"]
                    .as_array_mut()
                    .and_then(|cs| cs.iter_mut().find(|c| c.get("wqe").is_some()))
                    .map(|c| c["wqe"]["words"][0] = h16(0x1234)),
            };
            assert!(hit.is_some(), "{}: nothing to change", a.file);
            let r = (a.rederive)(&doc);
            assert_eq!(r.differ.len(), 1, "{}: {r:?}", a.file);
        }
    }

    /// Nothing of the host leaks into a file: no heap or stack address
    /// (the CQ context is substituted, inline SGE addresses are the
    /// generated ones).
    #[test]
    fn no_host_addresses() {
        let _serial = crate::serial();
        let probe = Box::new(0u64);
        let heap = format!("{:x}", (&*probe as *const u64 as u64) >> 24);
        let cq = format!("{:016x}", cqp::glue_cq_ctx());
        for a in AREAS {
            let text = render(&(a.generate)(3, 64).expect("generates").doc).expect("renders");
            assert!(!text.contains(&heap), "{}: holds a heap address prefix {heap}", a.file);
            assert!(!text.contains(&cq), "{}: holds the glue's CQ address {cq}", a.file);
        }
    }
}
