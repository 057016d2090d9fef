//! `.text` the driver and hal take in the firmware example
//! (`examples/firmware`, probe + PD/CQ/QP/MR verbs + post/poll + rw).
//!
//! Method: build `irdma-firmware-example` for the target (release profile,
//! or with `LTO + opt-level "s"` through `CARGO_PROFILE_RELEASE_*` into a
//! separate target directory), read the ELF's symbol table, keep the defined
//! function symbols in executable sections, drop aliases (one per address),
//! demangle, and sum the sizes of those whose name starts with `irdma::`,
//! `irdma_hal::`, `<irdma::` or `<irdma_hal::` (inherent and trait methods
//! of the crates' types, generic instances included), plus the drop glue of
//! their types (`core::ptr::drop_in_place<irdma::…>`). Code LLVM inlined
//! into the firmware's own functions is not counted (with LTO that is most
//! of it), so the whole `.text` section is reported beside it.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};

use crate::util::root;

/// The measured firmware.
pub const FIRMWARE: &str = "irdma-firmware-example";

/// Which build.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// `--release` as the workspace defines it.
    Release,
    /// `--release` with `lto = true`, `opt-level = "s"`, `codegen-units = 1`.
    LtoS,
}

/// Bytes of code.
#[derive(Clone, Copy, Debug)]
pub struct TextSize {
    /// Functions of `irdma` and `irdma-hal`.
    pub driver: u64,
    /// The whole `.text` section.
    pub total: u64,
}

/// Build the firmware for `target` and measure it.
pub fn measure(target: &str, profile: Profile) -> Result<TextSize, String> {
    let elf = build(target, profile)?;
    let data = std::fs::read(&elf).map_err(|e| format!("{}: {e}", elf.display()))?;
    text_of(&data)
}

fn build(target: &str, profile: Profile) -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "-p", FIRMWARE, "--target", target, "--message-format=json"]);
    cmd.current_dir(root());
    if profile == Profile::LtoS {
        cmd.env("CARGO_PROFILE_RELEASE_LTO", "true")
            .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "s")
            .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
            .env("CARGO_TARGET_DIR", root().join("target").join("size-lto-s"));
    }
    let out = cmd.output().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("firmware build failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if v["reason"] == "compiler-artifact"
            && v["target"]["name"] == FIRMWARE
            && let Some(exe) = v["executable"].as_str()
        {
            return Ok(PathBuf::from(exe));
        }
    }
    Err("firmware binary not found in cargo's output".into())
}

/// Does this demangled name belong to the driver or the hal? Their
/// functions and methods, and the drop glue of their types.
pub fn is_driver(demangled: &str) -> bool {
    let n = demangled.strip_prefix("core::ptr::drop_in_place").unwrap_or(demangled);
    let n = n.strip_prefix('<').unwrap_or(n);
    n.starts_with("irdma::") || n.starts_with("irdma_hal::")
}

/// Measure an ELF image.
pub fn text_of(data: &[u8]) -> Result<TextSize, String> {
    let file = object::File::parse(data).map_err(|e| format!("not an object file: {e}"))?;
    let total = file.sections().filter(|s| s.name() == Ok(".text")).map(|s| s.size()).sum();
    let mut seen = BTreeSet::new();
    let mut driver = 0;
    for sym in file.symbols() {
        if sym.kind() != SymbolKind::Text || sym.is_undefined() || sym.size() == 0 {
            continue;
        }
        let in_text = sym
            .section_index()
            .and_then(|i| file.section_by_index(i).ok())
            .is_some_and(|s| s.kind() == SectionKind::Text);
        if !in_text || !seen.insert(sym.address()) {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if is_driver(&format!("{:#}", rustc_demangle::demangle(name))) {
            driver += sym.size();
        }
    }
    if total == 0 {
        return Err("no .text section".into());
    }
    Ok(TextSize { driver, total })
}

#[cfg(test)]
mod tests {
    use super::is_driver;

    #[test]
    fn driver_symbols() {
        assert!(is_driver("irdma::cqp::Cqp<H,B>::exec"));
        assert!(is_driver("<irdma::verbs::qp::Qp<H,B> as core::ops::drop::Drop>::drop"));
        assert!(is_driver("irdma_hal::wqe::encode"));
        assert!(!is_driver("irdma_firmware_example::flow::run"));
        assert!(!is_driver("<irdma_firmware_example::pool::Pool as irdma_hal::Hal>::alloc"));
        assert!(is_driver("core::ptr::drop_in_place<irdma::verbs::qp::Qp<P,M,S>>"));
        assert!(!is_driver("core::ptr::drop_in_place<irdma_firmware_example::pool::Pool>"));
        assert!(!is_driver("core::fmt::write"));
    }
}
