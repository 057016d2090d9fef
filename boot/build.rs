//! Passes the repository's `linker.ld` (and, with the `defmt` feature,
//! defmt's `defmt.x`) to the bare-metal image only.
//!
//! The path must be absolute: cargo runs rustc from varying directories
//! (notes/qemu-mock-bar.md, "Flags").

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let script = std::path::Path::new(&manifest).join("..").join("linker.ld");
    println!("cargo:rerun-if-changed={}", script.display());
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        let script = script.canonicalize().unwrap_or(script);
        println!("cargo:rustc-link-arg-bins=-T{}", script.display());
        // defmt's build script puts defmt.x on the link search path.
        if std::env::var_os("CARGO_FEATURE_DEFMT").is_some() {
            println!("cargo:rustc-link-arg-bins=-Tdefmt.x");
        }
    }
}
