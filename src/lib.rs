//! `irdma`: a `no_std`, allocation-free driver for the RDMA engine of the
//! Intel E810 (irdma "GEN_2").
//!
//! See `ARCHITECTURE.md` for the map of layers. In short: [`irdma_hal`]
//! provides register access and DMA; this crate brings the engine up through
//! the Control QP, manages HMC, STags and PBLEs, and gives a verbs layer and
//! the Linux-style `rdma_rw` layer on top of lock-free WQE rings.
#![no_std]
#![deny(missing_docs)]

pub use irdma_hal as hal;

#[macro_use]
mod log;

pub mod aeq;
pub mod cqp;
pub mod device;
pub mod flight;
pub mod lan;
pub mod res;
pub mod rw;
pub mod uk;
pub mod verbs;
pub mod wr;
