//! Atomics for the lock-free SQ: `core`'s, or loom's in the loom model
//! (`RUSTFLAGS="--cfg loom" cargo test -p irdma --lib loom`).

#[cfg(all(test, loom))]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

#[cfg(not(all(test, loom)))]
pub(crate) use core::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
