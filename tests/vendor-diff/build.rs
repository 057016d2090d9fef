//! Compiles the vendor's `uk.c`, `ctrl.c`, `icrdma_hw.c`, `uda.c` and `hmc.c`
//! (unmodified) with the project's shim headers and `shim/glue.c` /
//! `shim/ctrl_glue.c` / `shim/hmc_glue.c`, when `IRDMA_VENDOR_DIR` names an extracted
//! `linux-source-6.1` tree (`cargo xtask vendor-diff` fetches and sets it).
//! The LAN side (src/lan.rs): the vendor's ice `ice_controlq.c`,
//! `ice_common.c` and `ice_sched.c`, unmodified, `#include`d by
//! `shim/ice/glue.c` (one translation unit, so their static functions are
//! reachable), with `shim/ice/include`. ice_lib.c's VSI-context builders
//! (src/lan_vsi.rs) are cut verbatim out of it, see `build_ice_lib.rs`.
//! The rw side (src/rw.rs): core `rw.c` and `mr_pool.c`, see `build_rw.rs`.
//! Without it the crate builds without the C side and the harness reports
//! that the vendor sources were not fetched.

use std::path::PathBuf;

#[path = "build_ice_lib.rs"]
mod build_ice_lib;
#[path = "build_rw.rs"]
mod build_rw;

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
        "hmc.c",
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
        // hmc.c is #included by hmc_glue.c (its index-limit helpers are
        // static), unmodified; the HMC area (src/hmc.rs).
        .file(manifest.join("shim/hmc_glue.c"))
        .include(manifest.join("shim/include"))
        .include(&irdma)
        .vendor_compile("irdma_vendor_uk");
    build_ice(&dir, &manifest);
    build_rw::build_rw(&dir, &manifest);
    println!("cargo::rustc-cfg=vendor_c");
}

/// The options every vendor library here is compiled with: the vendor's
/// own warnings silenced (their code is compiled unmodified) and
/// `-fno-strict-aliasing`, as the kernel builds it.
trait VendorCompile {
    fn vendor_compile(&mut self, lib: &str);
}

impl VendorCompile for cc::Build {
    fn vendor_compile(&mut self, lib: &str) {
        self.warnings(false).flag_if_supported("-fno-strict-aliasing").compile(lib);
    }
}

/// The vendor's ice admin-queue files (Linux 6.1
/// drivers/net/ethernet/intel/ice). `ice_switch.c` and `ice_fltr.c` are
/// compiled in their own unit (`shim/ice/switch_glue.c`, which predefines
/// `ice.h`'s include guard and supplies the little of it they use);
/// `ice_lib.c` is not compiled whole: its VSI-context builders are cut out
/// of it (`build_ice_lib.rs`) and compiled in `shim/ice/lib_glue.c`.
fn build_ice(dir: &std::path::Path, manifest: &std::path::Path) {
    let ice = dir.join("drivers/net/ethernet/intel/ice");
    assert!(
        ice.join("ice_controlq.c").is_file(),
        "vendor-diff: {} missing (a tree extracted before the LAN area joined): \
         run `cargo xtask vendor-diff`, which re-extracts it",
        ice.display()
    );
    for f in ["ice_controlq.c", "ice_common.c", "ice_sched.c", "ice_switch.c", "ice_fltr.c"] {
        println!("cargo::rerun-if-changed={}", ice.join(f).display());
    }
    let lib_cut = build_ice_lib::cut_ice_lib(&ice);
    // glue.c #includes ice_controlq.c, ice_common.c and ice_sched.c
    cc::Build::new()
        .file(manifest.join("shim/ice/glue.c"))
        // ice_switch.c and ice_fltr.c, #included unmodified (src/lan_switch.rs)
        .file(manifest.join("shim/ice/switch_glue.c"))
        // ice_lib.c's VSI-context builders, cut out verbatim (src/lan_vsi.rs)
        .file(manifest.join("shim/ice/lib_glue.c"))
        .include(&lib_cut)
        // shim/ice/include first: its linux/*.h stand in for the kernel's
        .include(manifest.join("shim/ice/include"))
        .include(dir.join("include"))
        .include(&ice)
        .vendor_compile("irdma_vendor_ice");
}
