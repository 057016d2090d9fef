//! The conformance vector files the model's vector tests read.

use serde_json::Value;

/// `file` from `$IRDMA_CONFORMANCE_DIR`, else from the repo's copy in
/// `tests/conformance/`, parsed. Panics when it is missing or not JSON:
/// these tests must not pass without their vectors.
pub fn load(file: &str) -> Value {
    let dir = std::env::var_os("IRDMA_CONFORMANCE_DIR").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance"),
        std::path::PathBuf::from,
    );
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("conformance vectors missing at {}: {e} — this test needs them and must not pass without", path.display())
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file} is not valid JSON: {e}"))
}
