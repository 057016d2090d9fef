//! The LAN side of an E810 PF, for hosts where no `ice` driver runs (issue
//! #17): the admin queue to the firmware and the typed commands that make
//! the PF ready for RDMA (spec ice-lan-for-rdma §1, §2, §5).
//!
//! Where something else owns the LAN side (Linux `ice`, a hypervisor), the
//! hand-off types in [`crate::lan`] stay the way in: fill a
//! [`LanInfo`](crate::lan::LanInfo) and implement
//! [`LanOps`](crate::lan::LanOps) yourself. This module is only linked when
//! used.
//!
//! * [`bringup`] — [`E810::bring_up`]: one call from a cold PF to a
//!   ready [`Device`](crate::device::Device), and the [`LanOps`](crate::lan::LanOps) of this layer;
//! * [`desc`] — the 32-byte descriptor, flags, opcodes, return codes, the
//!   queue's own Queue Shutdown command and the answer byte readers;
//! * [`aq`] — the engine: ATQ/ARQ rings in DMA memory, head-polled
//!   completion, CRIT on timeout, EBUSY retry, ARQ events;
//! * [`caps`] — device and function capabilities, every field ice parses
//!   (and the capability element both parsers walk);
//! * [`cmd`] — one typed command per opcode, with range checks, and the
//!   parsers of the answers;
//! * [`sched`] — the Tx scheduler branch and RDMA queue sets;
//! * [`switch`] — the MAC and broadcast switch rules;
//! * [`regs`] — the registers.

pub mod aq;
pub mod bringup;
pub mod caps;
pub mod cmd;
pub mod desc;
pub mod regs;
pub mod sched;
pub mod switch;

pub use aq::{AdminQueue, AqConfig, AqError, AqTimeouts, Event};
pub use bringup::{BringUpError, BringUpOptions, DdpPolicy, E810, IceLan, Progress};
pub use desc::{Desc, Opcode};
