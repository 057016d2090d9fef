//! Atomics for the lock-free SQ and the split QP halves: `core`'s, or
//! loom's in the loom model
//! (`RUSTFLAGS="--cfg loom" cargo test -p irdma --lib loom`).

#[cfg(all(test, loom))]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering, fence};

#[cfg(not(all(test, loom)))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering, fence};
