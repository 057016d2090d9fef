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

/// The leg `miri`: Miri (nightly, through rustup) over the hal unit tests
/// and the driver's ring (`uk::`) and decoder (`cqp::decode`) unit tests,
/// in its own target dir. Installs what it needs on a fresh machine (the
/// nightly toolchain with the `miri` component, then `cargo miri setup`);
/// an installed nightly is used as it is (no update). Slow tests opt out
/// with `#[cfg_attr(miri, ignore)]`.
pub fn miri() -> Result<String, String> {
    let have_miri = Command::new("cargo")
        .args(["+nightly", "miri", "--version"])
        .current_dir(root())
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_miri {
        let installed = output("rustup", &["toolchain", "list"])?;
        if installed.lines().any(|l| l.starts_with("nightly")) {
            eprintln!("xtask: adding the miri component to nightly");
            output("rustup", &["component", "add", "miri", "rust-src", "--toolchain", "nightly"])?;
        } else {
            eprintln!("xtask: installing nightly with miri");
            output(
                "rustup",
                &[
                    "toolchain",
                    "install",
                    "nightly",
                    "--profile",
                    "minimal",
                    "--component",
                    "miri",
                    "--component",
                    "rust-src",
                ],
            )?;
        }
    }
    let run = |args: &[&str]| -> Result<(), String> {
        let status = Command::new("cargo")
            .arg("+nightly")
            .args(args)
            .env("CARGO_TARGET_DIR", root().join("target/miri"))
            // Miri's weak-memory emulation cannot follow mixed-size atomic
            // accesses (a `Dma` word written as u64 and read as u32 or
            // bytes) and stops with an internal error; data-race detection,
            // what this leg is for, stays on. Leaks are not undefined
            // behaviour, and the shared-SQ tests leak their ring on purpose
            // (a thread that may outlive a failing test uses it).
            .env("MIRIFLAGS", "-Zmiri-disable-weak-memory-emulation -Zmiri-ignore-leaks")
            .env_remove("RUSTFLAGS")
            .env_remove("RUSTC")
            .env_remove("RUSTDOC")
            .current_dir(root())
            .status()
            .map_err(|e| format!("cannot run cargo +nightly: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("cargo +nightly {} exited with {status}", args.join(" ")))
        }
    };
    run(&["miri", "setup"])?;
    run(&["miri", "test", "-p", "irdma-hal", "--lib"])?;
    run(&["miri", "test", "-p", "irdma", "--lib", "--", "uk::", "cqp::decode"])?;
    Ok(String::new())
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
