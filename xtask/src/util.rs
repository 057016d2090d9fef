//! Helpers shared by the xtask commands.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (the parent of `xtask/`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Runs `cargo ARGS` in the workspace root with output streamed.
pub fn cargo(args: &[&str]) -> Result<String, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(args)
        .current_dir(root())
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(String::new())
    } else {
        Err(format!("cargo {} exited with {status}", args.join(" ")))
    }
}

/// Output of a command, or an error naming it.
pub fn output(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd)
        .args(args)
        .current_dir(root())
        .output()
        .map_err(|e| format!("cannot run {cmd}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Installs missing rustup targets and components; says exactly what is
/// missing when it cannot.
pub fn ensure_toolchain(targets: &[&str]) -> Result<(), String> {
    let installed = match output("rustup", &["target", "list", "--installed"]) {
        Ok(s) => s,
        Err(e) => {
            return Err(format!(
                "rustup is needed to add the targets {targets:?} ({e}); install rustup, or install those targets by hand"
            ));
        }
    };
    for t in targets {
        if !installed.lines().any(|l| l.trim() == *t) {
            eprintln!("xtask: installing rustup target {t}");
            output("rustup", &["target", "add", t])
                .map_err(|e| format!("missing rustup target {t} and could not add it: {e}"))?;
        }
    }
    let comps = output("rustup", &["component", "list", "--installed"])?;
    for c in ["clippy", "rustfmt"] {
        if !comps.lines().any(|l| l.starts_with(c)) {
            eprintln!("xtask: installing rustup component {c}");
            output("rustup", &["component", "add", c])
                .map_err(|e| format!("missing rustup component {c} and could not add it: {e}"))?;
        }
    }
    Ok(())
}

/// The device model must not depend on the driver or its hal, or it would
/// agree with their mistakes.
pub fn check_model_independence() -> Result<String, String> {
    let tree =
        output("cargo", &["tree", "-p", "mock-bar", "-e", "normal,build", "--prefix", "none"])?;
    let bad: Vec<&str> = tree
        .lines()
        .filter(|l| ["irdma ", "irdma-hal ", "irdma-boot "].iter().any(|p| l.starts_with(p)))
        .collect();
    if bad.is_empty() {
        Ok(format!(
            "mock-bar depends on {} crates, none of them irdma/irdma-hal/irdma-boot",
            tree.lines().count().saturating_sub(1)
        ))
    } else {
        Err(format!("mock-bar depends on {bad:?}"))
    }
}

/// The loom model of the lock-free SQ, in its own target directory so the
/// `--cfg loom` build does not evict the normal one.
pub fn loom() -> Result<String, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["test", "-p", "irdma", "--lib", "--release", "--target-dir", "target/loom", "loom"])
        .env("RUSTFLAGS", "--cfg loom")
        .current_dir(root())
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() { Ok(String::new()) } else { Err(format!("loom tests failed: {status}")) }
}

/// The published conformance vectors, when the shared folder sits beside the
/// checkout (CI places it there; a plain clone has none).
fn published_vectors() -> PathBuf {
    root().join("..").join("shared").join("conformance")
}

/// Leg `conformance-sync`: the repo's copy of the vectors
/// (`tests/conformance/`) is byte-identical to the published set beside the
/// checkout, file by file; skipped with a note when there is none.
pub fn conformance_sync() -> Result<String, String> {
    let published = published_vectors();
    if !published.is_dir() {
        let note = format!(
            "skipped: no published set at {} (nothing to compare the repo copy with)",
            published.display()
        );
        println!("conformance-sync: {note}");
        return Ok(note);
    }
    compare_dirs(&published, &root().join("tests").join("conformance"))
}

/// The vector files of a directory (`README.md` and `*.json`), sorted.
fn vector_files(dir: &Path) -> Result<Vec<String>, String> {
    let rd = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut names = Vec::new();
    for e in rd {
        let e = e.map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "README.md" || name.ends_with(".json") {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Compares the vector files of `published` and `copy`: every file of one
/// exists in the other with the same bytes. The error names each file that
/// differs or is missing.
pub fn compare_dirs(published: &Path, copy: &Path) -> Result<String, String> {
    let want = vector_files(published)?;
    let have = vector_files(copy)?;
    let mut problems = Vec::new();
    for name in &want {
        if !have.contains(name) {
            problems.push(format!("{name}: published but missing from {}", copy.display()));
            continue;
        }
        let a = std::fs::read(published.join(name)).map_err(|e| format!("{name}: {e}"))?;
        let b = std::fs::read(copy.join(name)).map_err(|e| format!("{name}: {e}"))?;
        if a != b {
            let at = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
            problems.push(format!(
                "{name} differs from {} (first difference at byte {at}; {} vs {} bytes)",
                published.join(name).display(),
                b.len(),
                a.len()
            ));
        }
    }
    for name in have.iter().filter(|n| !want.contains(n)) {
        problems.push(format!("{name}: in {} but not published", copy.display()));
    }
    if problems.is_empty() {
        Ok(format!("{} files identical to {}", want.len(), published.display()))
    } else {
        for p in &problems {
            eprintln!("conformance-sync: {p}");
        }
        Err(format!("{} (copy the published files into tests/conformance/)", problems.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::compare_dirs;

    fn dir(tag: &str, files: &[(&str, &[u8])]) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("xtask-sync-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for (n, b) in files {
            std::fs::write(d.join(n), b).unwrap();
        }
        d
    }

    #[test]
    fn sync_check_names_the_file_that_differs() {
        let a = dir("a", &[("README.md", b"r"), ("x.json", b"{1}"), ("notes.txt", b"n")]);
        let same = dir("same", &[("README.md", b"r"), ("x.json", b"{1}")]);
        let diff = dir("diff", &[("README.md", b"r"), ("x.json", b"{2}")]);
        let missing = dir("missing", &[("x.json", b"{1}")]);
        let extra = dir("extra", &[("README.md", b"r"), ("x.json", b"{1}"), ("y.json", b"")]);
        assert!(compare_dirs(&a, &same).unwrap().starts_with("2 files identical"));
        let e = compare_dirs(&a, &diff).unwrap_err();
        assert!(e.starts_with("x.json differs") && e.contains("byte 1"), "{e}");
        assert!(
            compare_dirs(&a, &missing).unwrap_err().starts_with("README.md: published but missing")
        );
        assert!(compare_dirs(&a, &extra).unwrap_err().starts_with("y.json: in "));
        for d in [a, same, diff, missing, extra] {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
