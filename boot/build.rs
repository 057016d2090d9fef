//! Passes the linker script to the bare-metal image only: the repository's
//! `linker.ld` on x86_64 (and, with the `defmt` feature, defmt's `defmt.x`),
//! `boot/aarch64.ld` on aarch64.
//!
//! The path must be absolute: cargo runs rustc from varying directories
//! (notes/qemu-mock-bar.md, "Flags").

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let manifest = std::path::Path::new(&manifest);
    let x86 = manifest.join("..").join("linker.ld");
    let arm = manifest.join("aarch64.ld");
    for s in [&x86, &arm] {
        println!("cargo:rerun-if-changed={}", s.display());
    }
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        let script = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
            Ok("aarch64") => arm,
            _ => x86,
        };
        let script = script.canonicalize().unwrap_or(script);
        println!("cargo:rustc-link-arg-bins=-T{}", script.display());
        // defmt's build script puts defmt.x on the link search path.
        if std::env::var_os("CARGO_FEATURE_DEFMT").is_some() {
            println!("cargo:rustc-link-arg-bins=-Tdefmt.x");
        }
    }
}
