//! (placeholder: see the crate docs)
