//! Leg `newcomer` (issue #29): the README's first command, `cargo xtask
//! qemu`, as a newcomer runs it — a clean clone of the committed tree, an
//! empty target dir, and a rustup home of its own that holds only the
//! pinned toolchain's host parts (no bare-metal targets, no clippy or
//! rustfmt). The demo must install what it lacks and pass.
//!
//! The rustup home is private so the leg never removes targets from the
//! toolchain the rest of the suite (or a developer's other checkouts) is
//! building with; its self-update is disabled so the leg cannot replace the
//! machine's `rustup`. It downloads the toolchain (~600 MB unpacked) from
//! rustup's distribution server, and deletes all of it at the end.

use std::path::Path;
use std::process::Command;

use crate::util::{root, status_bounded};

const BARE: [&str; 2] = crate::BARE_TARGETS;

/// The `channel` of `rust-toolchain.toml`.
fn pinned_channel(repo: &Path) -> Result<String, String> {
    let f = repo.join("rust-toolchain.toml");
    let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("channel"))
        .filter_map(|r| r.trim_start().strip_prefix('='))
        .map(|v| v.trim().trim_matches('"').to_string())
        .next()
        .ok_or_else(|| format!("{}: no channel", f.display()))
}

/// A command with the outer cargo's and rustup's choices removed, so what
/// runs is what a newcomer's shell would run, with `home` as rustup home.
fn fresh(program: &str, home: &Path, dir: &Path) -> Command {
    let mut c = Command::new(program);
    c.current_dir(dir).env("RUSTUP_HOME", home);
    for v in [
        "RUSTUP_TOOLCHAIN",
        "CARGO",
        "RUSTC",
        "RUSTDOC",
        "RUSTC_WRAPPER",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "CARGO_MANIFEST_DIR",
    ] {
        c.env_remove(v);
    }
    c
}

fn installed_targets(home: &Path, dir: &Path) -> Result<Vec<String>, String> {
    let out = fresh("rustup", home, dir)
        .args(["target", "list", "--installed"])
        .output()
        .map_err(|e| format!("cannot run rustup: {e}"))?;
    if !out.status.success() {
        return Err(format!("rustup target list: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim().to_string()).collect())
}

pub fn leg() -> Result<String, String> {
    let work = root().join("target").join("newcomer");
    let r = run(&work);
    let _ = std::fs::remove_dir_all(&work);
    r
}

fn run(work: &Path) -> Result<String, String> {
    let _ = std::fs::remove_dir_all(work);
    let home = work.join("rustup-home");
    let clone = work.join("clone");
    std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    std::fs::write(
        home.join("settings.toml"),
        "version = \"12\"\nprofile = \"minimal\"\nauto_self_update = \"disable\"\n",
    )
    .map_err(|e| format!("rustup settings: {e}"))?;

    let st = Command::new("git")
        .args(["clone", "--quiet"])
        .arg(root())
        .arg(&clone)
        .status()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !st.success() {
        return Err(format!("git clone exited with {st}"));
    }
    let channel = pinned_channel(&clone)?;
    let st = status_bounded(
        fresh("rustup", &home, work).args([
            "toolchain",
            "install",
            &channel,
            "--profile",
            "minimal",
            "--no-self-update",
        ]),
        "rustup toolchain install",
    )?;
    if !st.success() {
        return Err(format!("rustup toolchain install {channel} exited with {st}"));
    }
    let before = installed_targets(&home, &clone)?;
    if let Some(t) = BARE.iter().find(|t| before.iter().any(|b| b == *t)) {
        return Err(format!("the fresh toolchain already has {t}: the leg would prove nothing"));
    }

    let t0 = std::time::Instant::now();
    let st = status_bounded(
        fresh("cargo", &home, &clone).args(["xtask", "qemu", "--quiet"]),
        "cargo xtask qemu (newcomer)",
    )?;
    if !st.success() {
        return Err(format!(
            "`cargo xtask qemu` in a clean clone with a fresh toolchain exited with {st}"
        ));
    }
    let after = installed_targets(&home, &clone)?;
    let missing: Vec<_> = BARE.iter().filter(|t| !after.iter().any(|a| a == *t)).collect();
    if !missing.is_empty() {
        return Err(format!("the demo passed but {missing:?} are still not installed"));
    }
    Ok(format!(
        "clean clone, fresh {channel} without {}: `cargo xtask qemu` installed them and passed in {:.0}s",
        BARE.join("/"),
        t0.elapsed().as_secs_f64()
    ))
}
