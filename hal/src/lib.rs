//! Hardware abstraction for the `irdma` driver.
//!
//! Everything the driver needs from the machine it runs on, and nothing more:
//!
//! * [`bar`] — typed 32/64-bit access to the device's BAR0 ([`Bar`]), with a
//!   volatile-pointer implementation for mapped MMIO ([`MmioBar`]);
//! * [`regs`] — the GEN_2 (E810) register map and register field layouts;
//! * [`field`] — bit-field descriptors used by every hardware table (registers,
//!   WQEs, contexts), checked at compile time;
//! * [`dma`] — the [`Hal`] trait (DMA memory, address translation, a monotonic
//!   clock) and [`Dma`], a DMA buffer that frees itself;
//! * [`barrier`] — the two orderings the data path needs, per architecture;
//! * [`pci`] — configuration-space access, BAR probing and sizing, and the
//!   table of E810-family device ids.
//!
//! The crate is `no_std`, never allocates and never panics on a path that
//! device data or caller input can reach.
#![no_std]
#![deny(missing_docs)]

// The barrier trace (tests only) keeps its log in a thread-local `Vec`.
#[cfg(feature = "barrier-trace")]
extern crate std;

pub mod bar;
pub mod barrier;
pub mod cqp;
pub mod dma;
mod error;
pub mod field;
pub mod pci;
pub mod regs;
pub mod wqe;

pub use bar::{Bar, MmioBar};
pub use dma::{BufferDirection, Dma, DmaError, Hal, PAGE_SIZE, PhysAddr};
pub use field::Field;
