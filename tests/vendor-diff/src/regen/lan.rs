//! LAN vectors: not written yet.
use serde_json::Value;

use super::{Rederived, Written};

pub fn generate(_seed: u64, _cases: u64) -> Result<Written, String> {
    Err("not yet".into())
}

pub fn rederive(_v: &Value) -> Rederived {
    Rederived::default()
}
