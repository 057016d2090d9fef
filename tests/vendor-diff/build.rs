//! Compiles the vendor's `uk.c`, `ctrl.c`, `icrdma_hw.c` and `uda.c`
//! (unmodified) with the project's shim headers and `shim/glue.c` /
//! `shim/ctrl_glue.c`, when `IRDMA_VENDOR_DIR` names an extracted
//! `linux-source-6.1` tree (`cargo xtask vendor-diff` fetches and sets it).
//! Without it the crate builds without the C side and the harness reports
//! that the vendor sources were not fetched.

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(vendor_c)");
    println!("cargo::rerun-if-env-changed=IRDMA_VENDOR_DIR");
    println!("cargo::rerun-if-changed=shim");
    println!("cargo::rerun-if-changed=VENDOR_VERSION");
    let Some(dir) = std::env::var_os("IRDMA_VENDOR_DIR") else { return };
    let dir = PathBuf::from(dir);
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let want = std::fs::read_to_string(manifest.join("VENDOR_VERSION"))
        .expect("tests/vendor-diff/VENDOR_VERSION");
    let stamp = dir.join("VENDOR_VERSION");
    let got = std::fs::read_to_string(&stamp).unwrap_or_default();
    if got.trim() != want.trim() {
        panic!(
            "vendor-diff: the glue was written against `{}`, but {} holds `{}`; \
             fetch that exact package (`cargo xtask vendor-diff` does)",
            want.trim(),
            dir.display(),
            got.trim()
        );
    }
    let irdma = dir.join("drivers/infiniband/hw/irdma");
    let uk = irdma.join("uk.c");
    assert!(uk.is_file(), "vendor-diff: {} missing", uk.display());
    for f in [
        "uk.c",
        "ctrl.c",
        "icrdma_hw.c",
        "defs.h",
        "user.h",
        "irdma.h",
        "osdep.h",
        "type.h",
        "hmc.h",
        "protos.h",
        "ws.h",
        "uda.h",
        "icrdma_hw.h",
    ] {
        println!("cargo::rerun-if-changed={}", irdma.join(f).display());
    }
    cc::Build::new()
        .file(&uk)
        .file(manifest.join("shim/glue.c"))
        // ctrl.c is #included by ctrl_glue.c (so its static builders are
        // reachable), icrdma_hw.c compiled as is: both unmodified.
        .file(manifest.join("shim/ctrl_glue.c"))
        .file(irdma.join("icrdma_hw.c"))
        .file(irdma.join("uda.c"))
        .include(manifest.join("shim/include"))
        .include(&irdma)
        .warnings(false)
        .flag_if_supported("-fno-strict-aliasing")
        .compile("irdma_vendor_uk");
    println!("cargo::rustc-cfg=vendor_c");
}
