//! CQP command builders: one typed value per CQP operation.
//!
//! Each command writes its eight WQE words into a `&mut [u64; 8]` — every
//! word, so the slot holds nothing stale — with the opcode in the header
//! (@24) but **not** the valid bit: the engine adds the current polarity and
//! stores the header last, after a write barrier (spec §2.5).
//!
//! Wherever the vendor driver ORs a value into a word without a mask or lets
//! `FIELD_PREP` truncate it, these builders range-check instead and return
//! [`EncodeError::TooWide`](crate::cqp::EncodeError::TooWide) (spec §12 items 1–5). Ids are also checked
//! against the committed HMC counts in [`Limits`], as the vendor does.

//!
//! The builders are grouped by object, one file each (`cmd/qps.rs`,
//! `cqs.rs`, `stags.rs`, `hmc_setup.rs`, `eqs.rs`, `net.rs`), over what they
//! share (`common.rs`); every item is re-exported here.

mod common;
mod cqs;
mod eqs;
mod hmc_setup;
mod net;
mod qps;
mod stags;

pub use common::*;
pub use cqs::*;
pub use eqs::*;
pub use hmc_setup::*;
pub use net::*;
pub use qps::*;
pub use stags::*;

#[cfg(test)]
mod tests;
