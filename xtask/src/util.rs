//! Helpers shared by the xtask commands.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
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

/// Runs `cargo ARGS` in the workspace root with the variables `envs` set
/// and its output streamed; its exit status.
pub fn cargo_with(args: &[&str], envs: &[(&str, &str)]) -> Result<ExitStatus, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    Command::new(cargo)
        .args(args)
        .envs(envs.iter().copied())
        .current_dir(root())
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))
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
/// (the `Dma` accessors, mixed sizes across threads included), the device
/// model's DMA racing the driver (testkit), and the driver's ring (`uk::`,
/// split and shared SQ paths), decoder (`cqp::decode`), verbs, `rdma_rw`,
/// device and LAN unit tests, in its own target dir. Installs what it needs on a fresh machine (the
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
            // Leaks are not undefined behaviour, and the shared-SQ tests
            // leak their ring on purpose (a thread that may outlive a
            // failing test uses it). Weak-memory emulation stays on: every
            // access to DMA memory is one aligned 8-byte atomic (issue #28),
            // so there are no mixed-size accesses for it to trip over, and it
            // finds a missing read barrier (`uk::mp` threads test).
            .env("MIRIFLAGS", "-Zmiri-ignore-leaks")
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
    // The device model's DMA (FakeHalMemory) racing the driver's accessors.
    run(&["miri", "test", "-p", "irdma-testkit", "--test", "model_bar", "model_access"])?;
    // The driver's own unit tests where its unsafe code is: the rings, the
    // decoders, the verbs objects over a probed device on the model (a QP
    // dropped inside a call that took it by value: UB while its pointers
    // into its own memory were `&'static`), rdma_rw's contexts and the
    // device, admin-queue and LAN code. The property tests (thousands of
    // cases each) are left to the native run; `cqp::engine`'s register
    // polling tests wait on real time, which Miri stretches past their
    // timeouts.
    run(&[
        "miri",
        "test",
        "-p",
        "irdma",
        "--lib",
        "--",
        "uk::",
        "cqp::decode",
        "verbs::",
        "rw::",
        "device::",
        "ice::",
        "lan::",
        "--skip",
        "proptests",
        "--skip",
        "props",
    ])?;
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

/// Leg `doc`: the API docs of the driver and its hal build with rustdoc
/// warnings denied (broken or private intra-doc links, bad HTML, …), and
/// the driver's doc examples run.
pub fn doc() -> Result<String, String> {
    let args = ["doc", "--no-deps", "-p", "irdma", "-p", "irdma-hal"];
    let status = cargo_with(&args, &[("RUSTDOCFLAGS", "-D warnings")])?;
    if !status.success() {
        return Err(format!("cargo doc with RUSTDOCFLAGS=\"-D warnings\" failed: {status}"));
    }
    self::cargo(&["test", "--quiet", "--doc", "-p", "irdma", "-p", "irdma-hal"])?;
    Ok("no rustdoc warnings; doc examples pass".into())
}

/// Leg `example-host`: `cargo run --example host_loopback` exits 0 and
/// prints each of its steps, then its closing line.
pub fn example_host() -> Result<String, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .args(["run", "--quiet", "-p", "irdma", "--example", "host_loopback"])
        .current_dir(root())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    print!("{text}");
    check_example_output(&text, out.status.success())
}

/// What [`example_host`] accepts: a successful exit, the steps `[ 1/N]` to
/// `[N/N]` in order, and `all N steps passed` at the end.
fn check_example_output(text: &str, exited_ok: bool) -> Result<String, String> {
    if !exited_ok {
        return Err("host_loopback exited with failure".into());
    }
    let steps: Vec<(u32, u32)> = text
        .lines()
        .filter_map(|l| l.strip_prefix('[')?.split_once(']')?.0.split_once('/'))
        .filter_map(|(k, n)| Some((k.trim().parse().ok()?, n.trim().parse().ok()?)))
        .collect();
    let n = steps.first().map_or(0, |s| s.1);
    let in_order = steps.iter().enumerate().all(|(i, &(k, m))| k as usize == i + 1 && m == n);
    if n == 0 || steps.len() != n as usize || !in_order {
        return Err(format!("host_loopback printed steps {steps:?}, not 1..=N in order"));
    }
    let last = text.lines().last().unwrap_or("");
    if last != format!("host_loopback: all {n} steps passed") {
        return Err(format!("host_loopback ended with {last:?}"));
    }
    Ok(format!("{n} steps printed, exit 0"))
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

/// The first `cmd` on `PATH`.
pub fn which(cmd: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(cmd)).find(|p| p.is_file())
}

/// A program from a system package, and the package's name per package
/// manager (QEMU now, tshark later).
#[derive(Clone, Copy, Debug)]
pub struct SysPackage {
    /// The program that must be on `PATH`.
    pub program: &'static str,
    /// What it is, for messages.
    pub what: &'static str,
    /// Debian/Ubuntu package.
    pub apt: &'static str,
    /// Fedora package.
    pub dnf: &'static str,
    /// Arch package.
    pub pacman: &'static str,
    /// Homebrew formula (only named, never run).
    pub brew: &'static str,
}

/// A package manager [`ensure_program`] can drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackageManager {
    /// `apt-get` (Debian, Ubuntu).
    Apt,
    /// `dnf` (Fedora).
    Dnf,
    /// `pacman` (Arch).
    Pacman,
}

impl PackageManager {
    /// The first one on `PATH`.
    pub fn detect() -> Option<Self> {
        [
            (PackageManager::Apt, "apt-get"),
            (PackageManager::Dnf, "dnf"),
            (PackageManager::Pacman, "pacman"),
        ]
        .into_iter()
        .find(|(_, p)| which(p).is_some())
        .map(|(m, _)| m)
    }
}

/// The commands that install `pkg` with `pm`, each an argv; with `sudo`
/// every command is prefixed by `sudo -n` (never prompts).
pub fn install_commands(pm: PackageManager, pkg: &SysPackage, sudo: bool) -> Vec<Vec<String>> {
    let cmds: Vec<Vec<&str>> = match pm {
        PackageManager::Apt => vec![
            vec!["apt-get", "update"],
            vec!["DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", pkg.apt],
        ],
        PackageManager::Dnf => vec![vec!["dnf", "install", "-y", pkg.dnf]],
        PackageManager::Pacman => vec![vec!["pacman", "-S", "--noconfirm", "--needed", pkg.pacman]],
    };
    cmds.into_iter()
        .map(|c| {
            // `sudo` resets the environment: pass assignments through `env`.
            let pre: &[&str] = match (sudo, c[0].contains('=')) {
                (false, _) => &[],
                (true, false) => &["sudo", "-n"],
                (true, true) => &["sudo", "-n", "env"],
            };
            pre.iter().chain(&c).map(|s| s.to_string()).collect()
        })
        .collect()
}

/// Runs one argv from [`install_commands`] (leading `NAME=value` words set
/// the environment), output streamed.
fn run_argv(argv: &[String]) -> Result<std::process::ExitStatus, String> {
    let n_env = argv.iter().take_while(|a| a.contains('=')).count();
    let (env, cmd) = argv.split_at(n_env);
    let (prog, args) = cmd.split_first().ok_or("empty command")?;
    let mut c = Command::new(prog);
    c.args(args);
    for kv in env {
        if let Some((k, v)) = kv.split_once('=') {
            c.env(k, v);
        }
    }
    c.status().map_err(|e| format!("cannot run {prog}: {e}"))
}

/// The one command a user without the rights to install runs by hand.
pub fn manual_command(pm: Option<PackageManager>, pkg: &SysPackage) -> String {
    match pm {
        Some(PackageManager::Apt) => format!(
            "sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y {}",
            pkg.apt
        ),
        Some(PackageManager::Dnf) => format!("sudo dnf install -y {}", pkg.dnf),
        Some(PackageManager::Pacman) => format!("sudo pacman -S --needed {}", pkg.pacman),
        None => format!(
            "install {} (Debian/Ubuntu `apt-get install {}`, Fedora `dnf install {}`, \
             Arch `pacman -S {}`, macOS `brew install {}`)",
            pkg.what, pkg.apt, pkg.dnf, pkg.pacman, pkg.brew
        ),
    }
}

/// Whether this process runs as root (uid 0).
fn is_root() -> bool {
    if let Ok(s) = std::fs::read_to_string("/proc/self/status")
        && let Some(uid) = s.lines().find_map(|l| l.strip_prefix("Uid:"))
    {
        return uid.split_whitespace().next() == Some("0");
    }
    output("id", &["-u"]).is_ok_and(|s| s.trim() == "0")
}

/// Whether `sudo` works without a password (`sudo -n true`).
fn passwordless_sudo() -> bool {
    which("sudo").is_some()
        && Command::new("sudo")
            .args(["-n", "true"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// The path of `pkg.program`; installs its package first when it is missing
/// and this process may (root, or passwordless `sudo`) with apt-get, dnf or
/// pacman, printing each command it runs. Otherwise the error gives the one
/// command to run.
pub fn ensure_program(pkg: &SysPackage) -> Result<PathBuf, String> {
    if let Some(p) = which(pkg.program) {
        return Ok(p);
    }
    let pm = PackageManager::detect();
    let missing = format!("{} not found in PATH", pkg.program);
    let Some(manager) = pm else {
        return Err(format!("{missing}; {}", manual_command(None, pkg)));
    };
    let sudo = if is_root() {
        false
    } else if passwordless_sudo() {
        true
    } else {
        return Err(format!(
            "{missing}, and installing it needs root (not root, no passwordless sudo). Run:\n    {}",
            manual_command(pm, pkg)
        ));
    };
    eprintln!("xtask: {missing}; installing {}", pkg.what);
    for argv in install_commands(manager, pkg, sudo) {
        eprintln!("xtask: running `{}`", argv.join(" "));
        let status = run_argv(&argv)?;
        if !status.success() {
            return Err(format!(
                "`{}` exited with {status}; install {} by hand: {}",
                argv.join(" "),
                pkg.what,
                manual_command(pm, pkg)
            ));
        }
    }
    which(pkg.program).ok_or_else(|| {
        format!("{missing} even after installing {}; {}", pkg.what, manual_command(pm, pkg))
    })
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

/// A number from the command line: `0x…` hexadecimal or decimal, `_` (and
/// in decimal `,`) allowed as separators (`--seed`, `--cases`, `--ops`).
pub fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(&h.replace('_', ""), 16).ok(),
        None => s.replace(['_', ','], "").parse().ok(),
    }
}

/// Numeric options `--NAME N` (N as [`parse_u64`] reads it) into their
/// slots; false on an option not listed or a missing or bad number (the
/// caller prints its usage).
pub fn parse_options(args: &[String], slots: &mut [(&str, &mut u64)]) -> bool {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().and_then(|v| parse_u64(v));
        match (slots.iter_mut().find(|(name, _)| *name == a.as_str()), v) {
            (Some((_, slot)), Some(v)) => **slot = v,
            _ => return false,
        }
    }
    true
}

/// The end of a command that prints one result: the line on stdout and
/// success, or `WHO: error` on stderr and failure.
pub fn exit_with(r: Result<String, String>, who: &str) -> ExitCode {
    match r {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{who}: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{
        PackageManager, SysPackage, compare_dirs, install_commands, manual_command, parse_options,
    };

    #[test]
    fn options_fill_their_slots_and_refuse_the_rest() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (mut seed, mut cases) = (1, 2);
        let ok = parse_options(
            &args(&["--cases", "1_000", "--seed", "0x2a"]),
            &mut [("--seed", &mut seed), ("--cases", &mut cases)],
        );
        assert!(ok);
        assert_eq!((seed, cases), (0x2a, 1000));
        for bad in [&["--ops", "3"][..], &["--seed"], &["--seed", "x"]] {
            assert!(!parse_options(&args(bad), &mut [("--seed", &mut seed)]), "{bad:?}");
        }
        assert!(parse_options(&[], &mut [("--seed", &mut seed)]));
    }

    const Q: SysPackage = SysPackage {
        program: "qemu-system-x86_64",
        what: "QEMU",
        apt: "qemu-system-x86",
        dnf: "qemu-system-x86-core",
        pacman: "qemu-system-x86",
        brew: "qemu",
    };

    fn joined(pm: PackageManager, sudo: bool) -> Vec<String> {
        install_commands(pm, &Q, sudo).iter().map(|c| c.join(" ")).collect()
    }

    #[test]
    fn example_output_check() {
        use super::check_example_output as check;
        let good = "[ 1/2] a\n   detail\n[ 2/2] b\nhost_loopback: all 2 steps passed\n";
        assert!(check(good, true).is_ok());
        assert!(check(good, false).is_err());
        assert!(check("[ 1/2] a\nhost_loopback: all 2 steps passed", true).is_err());
        assert!(check("[ 2/2] b\n[ 1/2] a\nhost_loopback: all 2 steps passed", true).is_err());
        assert!(check("[ 1/2] a\n[ 2/2] b\nerror", true).is_err());
        assert!(check("", true).is_err());
    }

    #[test]
    fn install_commands_per_manager() {
        assert_eq!(
            joined(PackageManager::Apt, false),
            ["apt-get update", "DEBIAN_FRONTEND=noninteractive apt-get install -y qemu-system-x86"]
        );
        assert_eq!(
            joined(PackageManager::Apt, true),
            [
                "sudo -n apt-get update",
                "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y qemu-system-x86"
            ]
        );
        assert_eq!(
            joined(PackageManager::Dnf, true),
            ["sudo -n dnf install -y qemu-system-x86-core"]
        );
        assert_eq!(
            joined(PackageManager::Pacman, false),
            ["pacman -S --noconfirm --needed qemu-system-x86"]
        );
        assert_eq!(
            manual_command(Some(PackageManager::Apt), &Q),
            "sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y qemu-system-x86"
        );
        assert!(manual_command(None, &Q).contains("brew install qemu"));
    }

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
