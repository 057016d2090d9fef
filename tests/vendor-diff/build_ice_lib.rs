//! The LAN VSI-context area's C side (included by build.rs): out of the
//! vendor's Linux 6.1 `drivers/net/ethernet/intel/ice/ice_lib.c`, fetched and
//! unmodified, the static functions that build a VSI context are cut verbatim
//! into `OUT_DIR/ice_lib_cut/vd_ice_lib_vsi_ctx.c`, which
//! `shim/ice/lib_glue.c` `#include`s: the contiguous run from
//! `ice_set_dflt_vsi_ctx` through `ice_vsi_init` (with
//! `ice_vsi_setup_q_map`, `ice_set_fd_vsi_ctx`, `ice_set_rss_vsi_ctx`,
//! `ice_chnl_vsi_setup_q_map` between them) and `ice_vsi_set_tc_cfg`.
//! ice_lib.c as a whole needs most of ice.h (see `shim/ice/switch_glue.c`).

use std::path::{Path, PathBuf};

/// The text from `start` (a function's first line) through the first
/// closing brace at column 0 after `last` (the last function's first line).
fn cut<'a>(src: &'a str, start: &str, last: &str) -> &'a str {
    let s =
        src.find(start).unwrap_or_else(|| panic!("vendor-diff: `{start}` not found in ice_lib.c"));
    let l = src[s..]
        .find(last)
        .map(|l| s + l)
        .unwrap_or_else(|| panic!("vendor-diff: `{last}` not found after `{start}` in ice_lib.c"));
    let e = src[l..]
        .find("\n}\n")
        .map(|e| l + e + 3)
        .unwrap_or_else(|| panic!("vendor-diff: `{last}` has no end in ice_lib.c"));
    &src[s..e]
}

/// Writes the cut file; returns the directory to add to the include path.
pub fn cut_ice_lib(ice: &Path) -> PathBuf {
    let f = ice.join("ice_lib.c");
    println!("cargo::rerun-if-changed={}", f.display());
    let src = std::fs::read_to_string(&f).unwrap_or_else(|e| {
        panic!(
            "vendor-diff: {}: {e} (run `cargo xtask vendor-diff`, which re-extracts the tree)",
            f.display()
        )
    });
    let ctx = cut(
        &src,
        "static void ice_set_dflt_vsi_ctx(struct ice_hw *hw, struct ice_vsi_ctx *ctxt)\n{",
        "static int ice_vsi_init(struct ice_vsi *vsi, bool init_vsi)\n{",
    );
    let tc = cut(
        &src,
        "static void ice_vsi_set_tc_cfg(struct ice_vsi *vsi)\n{",
        "static void ice_vsi_set_tc_cfg(struct ice_vsi *vsi)\n{",
    );
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dir = out.join("ice_lib_cut");
    std::fs::create_dir_all(&dir).expect("OUT_DIR/ice_lib_cut");
    std::fs::write(
        dir.join("vd_ice_lib_vsi_ctx.c"),
        format!(
            "/* cut verbatim from drivers/net/ethernet/intel/ice/ice_lib.c by build_ice_lib.rs */\n\
             {ctx}\n\n{tc}\n"
        ),
    )
    .expect("write vd_ice_lib_vsi_ctx.c");
    dir
}
