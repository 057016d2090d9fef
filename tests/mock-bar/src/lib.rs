//! A register-level model of the Intel E810 RDMA engine (irdma GEN_2).
//!
//! Written from `../shared/spec/` independently of the driver: it never
//! imports `irdma` or `irdma-hal`.
