//! The conformance runner's reader (`xtask/src/conformance`): fuzz bytes as
//! a vector document through `conformance::run_text` — JSON parse, schema
//! recognition, and every case's field reading and execution against the
//! driver's real code. The runner's modules are compiled in from xtask
//! (they need only irdma, irdma-hal, irdma-testkit and serde_json).
#![no_main]
#![allow(dead_code)]

use libfuzzer_sys::fuzz_target;

#[path = "../../xtask/src/conformance/mod.rs"]
mod conformance;

/// What the runner's `crate::util` provides (only `root`, for the vector
/// directory, which the fuzz target never reads).
mod util {
    pub fn root() -> std::path::PathBuf {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = conformance::run_text(text);
});
