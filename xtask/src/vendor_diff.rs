//! `cargo xtask vendor-diff [--seed N] [--cases N]` (and
//! `--write-vectors DIR` / `--rederive [DIR]`, `vendor_vectors.rs`) and the suite leg
//! `vendor-diff` (issue #30): the vendor's own data-path, control-path
//! (HMC sizing and SD programming included), LAN admin-queue and core rw code
//! against the driver's, through `tests/vendor-diff`. `--cases N` scales
//! every area (one HMC case per two post cases); a long soak is the same command
//! with a large N and another seed.
//!
//! Fetches the Debian source package named in
//! `tests/vendor-diff/VENDOR_VERSION` with `apt-get download` into a cache
//! outside the repository (`$IRDMA_VENDOR_CACHE`, else
//! `$XDG_CACHE_HOME/irdma-vendor`, else `~/.cache/irdma-vendor`), extracts
//! only the irdma driver's files, stamps the directory with the version and
//! builds and runs the harness with `IRDMA_VENDOR_DIR` pointing at it.
//! Nothing fetched enters the repository.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::util::{self, SysPackage, root, status_bounded};

/// The leg's fixed seed and case count: about a minute on this machine.
const LEG_SEED: u64 = 0x1a2b_3c4d;
const LEG_CASES: u64 = 20_000;

pub(crate) const CC: SysPackage = SysPackage {
    program: "cc",
    what: "a C compiler",
    apt: "gcc",
    dnf: "gcc",
    pacman: "gcc",
    brew: "gcc",
};
const DPKG_DEB: SysPackage = SysPackage {
    program: "dpkg-deb",
    what: "dpkg-deb",
    apt: "dpkg",
    dnf: "dpkg",
    pacman: "dpkg",
    brew: "dpkg",
};
const XZ: SysPackage =
    SysPackage { program: "xz", what: "xz", apt: "xz-utils", dnf: "xz", pacman: "xz", brew: "xz" };

/// `(package, version)` from `tests/vendor-diff/VENDOR_VERSION`.
fn wanted() -> Result<(String, String), String> {
    let f = root().join("tests/vendor-diff/VENDOR_VERSION");
    let s = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
    let mut it = s.split_whitespace();
    match (it.next(), it.next()) {
        (Some(p), Some(v)) => Ok((p.into(), v.into())),
        _ => Err(format!("{}: want `PACKAGE VERSION`", f.display())),
    }
}

fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("IRDMA_VENDOR_CACHE") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into())).join(".cache")
    });
    base.join("irdma-vendor")
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let st = status_bounded(cmd, what)?;
    if st.success() { Ok(()) } else { Err(format!("{what} exited with {st}")) }
}

/// The extracted, version-stamped vendor tree (fetched on first use).
pub fn vendor_tree() -> Result<PathBuf, String> {
    let (pkg, ver) = wanted()?;
    let stamp_text = format!("{pkg} {ver}");
    let cache = cache_dir();
    let dir = cache.join(format!("src-{ver}"));
    let uk = dir.join("drivers/infiniband/hw/irdma/uk.c");
    // a tree extracted before the LAN area joined has no ice directory
    let ice = dir.join("drivers/net/ethernet/intel/ice/ice_controlq.c");
    // nor one before the rw area joined core/rw.c
    let rw = dir.join("drivers/infiniband/core/rw.c");
    let stamp = dir.join("VENDOR_VERSION");
    if uk.is_file()
        && ice.is_file()
        && rw.is_file()
        && std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == stamp_text)
    {
        return Ok(dir);
    }
    std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let deb = cache.join(format!("{pkg}_{ver}_all.deb"));
    if !deb.is_file() {
        download(&cache, &pkg, &ver)?;
    }
    let tmp = cache.join(format!("src-{ver}.partial"));
    extract(&deb, &tmp, &pkg)?;
    std::fs::write(tmp.join("VENDOR_VERSION"), format!("{stamp_text}\n"))
        .map_err(|e| format!("stamp: {e}"))?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&tmp, &dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// `apt-get download`s the package into `cache` (after an `apt-get update`
/// when the first try fails).
fn download(cache: &Path, pkg: &str, ver: &str) -> Result<(), String> {
    let spec = format!("{pkg}={ver}");
    eprintln!("xtask vendor-diff: apt-get download {spec} into {}", cache.display());
    let get = |c: &Path| {
        run(Command::new("apt-get").args(["download", &spec]).current_dir(c), "apt-get download")
    };
    if get(cache).is_err() {
        // a fresh machine's package lists may not know the version yet
        eprintln!("xtask vendor-diff: retrying after apt-get update");
        run(Command::new("apt-get").arg("update"), "apt-get update")?;
        get(cache).map_err(|e| {
            format!(
                "{e}: the harness was written against {pkg} {ver} exactly \
                 (tests/vendor-diff/VENDOR_VERSION); this machine's apt cannot fetch it"
            )
        })?;
    }
    Ok(())
}

/// Extracts the harness's vendor files from `deb` into a fresh `tmp`.
fn extract(deb: &Path, tmp: &Path, pkg: &str) -> Result<(), String> {
    util::ensure_program(&DPKG_DEB)?;
    util::ensure_program(&XZ)?;
    let _ = std::fs::remove_dir_all(tmp);
    std::fs::create_dir_all(tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    // The .deb holds usr/src/linux-source-6.1.tar.xz; take only the irdma
    // and ice directories out of it, and the virtchnl header ice includes
    // and the rw area's core/rw.c, core/mr_pool.c with their two headers
    // (and core/verbs.c, for ib_sg_to_pages).
    let tarball = format!("./usr/src/{pkg}.tar.xz");
    let script = format!(
        "dpkg-deb --fsys-tarfile \"$1\" | tar -xO \"{tarball}\" | \
         tar -xJ -C \"$2\" --strip-components=1 --wildcards '{pkg}/drivers/infiniband/hw/irdma/*' \
         '{pkg}/drivers/net/ethernet/intel/ice/*' '{pkg}/include/linux/avf/*' \
         '{pkg}/drivers/infiniband/core/rw.c' '{pkg}/drivers/infiniband/core/mr_pool.c' \
         '{pkg}/drivers/infiniband/core/verbs.c' \
         '{pkg}/include/rdma/rw.h' '{pkg}/include/rdma/mr_pool.h'"
    );
    eprintln!(
        "xtask vendor-diff: extracting drivers/infiniband/hw/irdma and drivers/net/ethernet/intel/ice from {}",
        deb.display()
    );
    run(
        Command::new("sh").args(["-c", &script, "sh"]).arg(deb).arg(tmp),
        "extracting the vendor sources",
    )?;
    for f in [
        "drivers/infiniband/hw/irdma/uk.c",
        "drivers/net/ethernet/intel/ice/ice_controlq.c",
        "drivers/infiniband/core/rw.c",
    ] {
        if !tmp.join(f).is_file() {
            return Err(format!("{} has no {f}", deb.display()));
        }
    }
    Ok(())
}

/// Fetches, builds and runs the harness.
fn run_harness(seed: u64, cases: u64) -> Result<String, String> {
    util::ensure_program(&CC)?;
    let dir = vendor_tree()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let (s, n) = (seed.to_string(), cases.to_string());
    let mut c = Command::new(cargo);
    c.args(["run", "--quiet", "-p", "vendor-diff", "--", "--seed", &s, "--cases", &n])
        .env("IRDMA_VENDOR_DIR", &dir)
        .current_dir(root());
    let st = status_bounded(&mut c, "vendor-diff")?;
    if st.success() {
        Ok(format!("seed {seed:#x}, {cases} cases: no unexplained difference"))
    } else {
        Err(format!("vendor-diff exited with {st} (differences are printed above)"))
    }
}

/// The harness's own tests (its regression cases among them) with the
/// vendor code compiled in: without `IRDMA_VENDOR_DIR` the workspace's
/// `cargo test` compiles them out.
fn run_unit_tests() -> Result<String, String> {
    let dir = vendor_tree()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut c = Command::new(cargo);
    c.args(["test", "--quiet", "-p", "vendor-diff"])
        .env("IRDMA_VENDOR_DIR", &dir)
        .current_dir(root());
    let st = status_bounded(&mut c, "the vendor-diff tests")?;
    if st.success() {
        Ok("its tests pass with the vendor code".into())
    } else {
        Err(format!("cargo test -p vendor-diff (vendor code compiled in) exited with {st}"))
    }
}

/// The suite leg: a fixed seed and count, the harness's own tests, then
/// the vector files: the harness set regenerated without drift, the
/// published copies re-derived (`vendor_vectors`).
pub fn leg() -> Result<String, String> {
    let run = run_harness(LEG_SEED, LEG_CASES)?;
    let tests = run_unit_tests()?;
    let vectors = crate::vendor_vectors::leg()?;
    Ok(format!("{run}; {tests}; {vectors}"))
}

/// `cargo xtask vendor-diff [--seed N] [--cases N]`.
pub fn main(args: &[String]) -> ExitCode {
    if let Some(code) = crate::vendor_vectors::main(args) {
        return code;
    }
    let (mut seed, mut cases) = (LEG_SEED, LEG_CASES);
    if !util::parse_options(args, &mut [("--seed", &mut seed), ("--cases", &mut cases)]) {
        eprintln!("usage: cargo xtask vendor-diff [--seed N] [--cases N]");
        return ExitCode::FAILURE;
    }
    util::exit_with(run_harness(seed, cases), "xtask vendor-diff")
}
