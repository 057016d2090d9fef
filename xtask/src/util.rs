//! Helpers shared by the xtask commands.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// When the running leg must be finished (set by `cargo xtask test`); child
/// processes still running then are killed with their whole process group.
static DEADLINE: Mutex<Option<Instant>> = Mutex::new(None);

/// Sets (or clears) the deadline of the leg about to run.
pub fn set_deadline(d: Option<Instant>) {
    if let Ok(mut g) = DEADLINE.lock() {
        *g = d;
    }
}

fn deadline() -> Option<Instant> {
    DEADLINE.lock().ok().and_then(|g| *g)
}

/// Runs `cmd` (output streamed) in its own process group and waits for it,
/// but not past the leg's deadline: then the whole group (cargo and the
/// test binaries it started) is killed and the run is an error.
pub fn status_bounded(cmd: &mut Command, what: &str) -> Result<ExitStatus, String> {
    cmd.process_group(0);
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {what}: {e}"))?;
    let pgid = child.id();
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Ok(st),
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for {what}: {e}")),
        }
        if deadline().is_some_and(|d| Instant::now() >= d) {
            // The group id is the child's pid (process_group(0)).
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{pgid}")]).status();
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{what} killed: the leg's time limit passed"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

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
    let status = status_bounded(Command::new(cargo).args(args).current_dir(root()), "cargo")?;
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
    let status = status_bounded(
        Command::new(cargo)
            .args([
                "test",
                "-p",
                "irdma",
                "--lib",
                "--release",
                "--target-dir",
                "target/loom",
                "loom",
            ])
            .env("RUSTFLAGS", "--cfg loom")
            .current_dir(root()),
        "cargo (loom)",
    )?;
    if status.success() { Ok(String::new()) } else { Err(format!("loom tests failed: {status}")) }
}
