//! The rw area's C side (included by build.rs): the vendor's Linux 6.1
//! `drivers/infiniband/core/rw.c` and `mr_pool.c`, unmodified, `#include`d
//! by `shim/rw/glue.c` (one translation unit) with `shim/rw/include` and the
//! vendor's own `include/rdma/rw.h` / `mr_pool.h`. `ib_sg_to_pages` (the
//! page-list walk every fast-register driver's `map_mr_sg` calls) is cut
//! verbatim out of `core/verbs.c` into `OUT_DIR/vd_ib_sg_to_pages.c`:
//! verbs.c as a whole needs most of the RDMA core.

use std::path::Path;

use super::VendorCompile;

pub fn build_rw(dir: &Path, manifest: &Path) {
    let core = dir.join("drivers/infiniband/core");
    assert!(
        core.join("rw.c").is_file() && core.join("verbs.c").is_file(),
        "vendor-diff: {} has no rw.c / verbs.c (a tree extracted before the rw area joined): \
         run `cargo xtask vendor-diff`, which re-extracts it",
        core.display()
    );
    for f in ["rw.c", "mr_pool.c", "verbs.c"] {
        println!("cargo::rerun-if-changed={}", core.join(f).display());
    }
    let verbs = std::fs::read_to_string(core.join("verbs.c")).expect("core/verbs.c");
    let start = verbs
        .find("int ib_sg_to_pages(struct ib_mr *mr,")
        .expect("vendor-diff: ib_sg_to_pages not found in core/verbs.c");
    let end_mark = "EXPORT_SYMBOL(ib_sg_to_pages);";
    let end = verbs[start..]
        .find(end_mark)
        .map(|e| start + e + end_mark.len())
        .expect("vendor-diff: ib_sg_to_pages has no EXPORT_SYMBOL in core/verbs.c");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let cut = out.join("rw_cut");
    std::fs::create_dir_all(&cut).expect("OUT_DIR/rw_cut");
    std::fs::write(
        cut.join("vd_ib_sg_to_pages.c"),
        format!(
            "/* cut verbatim from drivers/infiniband/core/verbs.c by build_rw.rs */\n{}\n",
            &verbs[start..end]
        ),
    )
    .expect("write vd_ib_sg_to_pages.c");
    cc::Build::new()
        .file(manifest.join("shim/rw/glue.c"))
        // shim/rw/include first: its linux/*.h and rdma/ib_verbs.h stand
        // in for the kernel's; rdma/rw.h and rdma/mr_pool.h are the vendor's
        .include(manifest.join("shim/rw/include"))
        .include(dir.join("include"))
        .include(&core)
        .include(&cut)
        .vendor_compile("irdma_vendor_rw");
}
