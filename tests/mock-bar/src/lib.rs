//! A register-level model of the Intel E810 RDMA engine (irdma GEN_2).
//!
//! Written from `shared/spec/` independently of the driver: it never
//! imports `irdma` or `irdma-hal` and has its own field decoding, so an
//! encoding mistake in the driver shows up as a failing test.
//!
//! # Shape
//!
//! * [`Memory`] — the device's only way to DMA. A refused access is a
//!   [`Fault`]; the model turns it into an error completion, an AE or a
//!   dropped write, never a panic. [`TestMemory`] is a region-based memory
//!   for model tests; the testkit provides one backed by `FakeHal`.
//! * [`Device`] — one PF: `mmio_read32`/`mmio_write32` at BAR0 offsets.
//!   Strict step mode: CQPDB, WQEALLOC and CQARM writes are processed
//!   synchronously before the write returns, so every doorbell is seen.
//! * [`Fabric`] — devices joined by a wire, behind one lock; use it (even for
//!   one device) when several handles share a device. RC QPs are connected
//!   by (destination IP, destination QPN) from the QP context: loopback on
//!   one device, or across devices on one fabric; in-order, lossless.
//! * [`FaultPlan`] — fault injection; [`Counters`] and a bounded trace of
//!   [`Event`]s record what the device did.
//!
//! # What is modelled
//!
//! * Register file: GLPE_CPUSTATUS0/1/2 = 0x80, GLPCI_LBARCTRL PE_DB_SIZE = 2
//!   (8 MiB), PF_FUNC_RID; CCQPHIGH/CCQPLOW create handshake (host context
//!   validated: SQ size encoding, 512-B aligned SQ, HW_MAJVER = 1) →
//!   CCQPSTATUS = 1 or bit 31 + CQPERRCODES; writing 0/0 destroys.
//!   CQPTAIL = next WQE index [10:0] + OP_ERR [31] of the last op;
//!   CQPERRCODES of the last failure. Unknown in-range registers are plain
//!   storage; reads outside the BAR return all-ones.
//! * CQP: WQEs processed from the internal tail up to the CQPDB value,
//!   each only if its valid bit equals the pass polarity (first pass 1).
//!   Once CQ 0 (the CCQ) exists, every op writes a CCQ CQE (context from host
//!   context @24, OPRETVAL, WQE index, major/minor, ERROR, SQ, valid).
//!   Ops: NOP, QUERY_RDMA_FEATURES, QUERY_FPM_VAL, COMMIT_FPM_VAL,
//!   UPDATE_PE_SDS (incl. the overflow buffer), SHMC_PAGES_ALLOCATED (checks
//!   every non-PBLE object is backed), CREATE/DESTROY CQ (incl. the CCQ),
//!   CREATE/DESTROY CEQ/AEQ, MANAGE_ARP, WORK_SCHED_NODE (leaf add returns a
//!   queue-set handle), ALLOC_STAG, REG_MR (PBL levels 0/1/2 through PBLEs in
//!   HMC memory), DEALLOC_STAG, CREATE_QP (RoCE RC), MODIFY_QP (state
//!   machine of spec §7.4), DESTROY_QP, FLUSH_WQES/GEN_AE. Others complete
//!   with an error. Objects are checked against the committed FPM counts and
//!   their context memory must be backed by programmed SDs/PDs.
//! * Data path: SQ WQEs found by valid bit on WQEALLOC (or the user doorbell
//!   page), every GEN_2 opcode decoded ([`wqe`]); WRITE(+IMM), READ,
//!   SEND(+IMM/+INV, solicited), LOCAL_INV, FAST_REGISTER, NOP executed;
//!   BIND_MW and atomics raise WQE_UNEXPECTED_OPCODE. RQ WQEs consumed by
//!   valid bit (no doorbell). CQEs with polarity, immediates (extended CQE),
//!   invalidated STag, solicited flag, BTH opcode for RQ completions. CQ
//!   arming (shadow @32 + CQARM) → one CEQE; AEQEs for async errors.
//! * Protection on every access: STag index and key byte, registered and not
//!   invalidated, PD, rights, VA-based/zero-based bounds; violations move the
//!   QP to ERROR and raise the AMP_* AE (remote side: NAK → the requester
//!   gets IB_REMOTE_ACCESS_ERROR). No receive posted → RNR NAK; the WQE is
//!   retried on later doorbells or [`Device::step`], and after RNR_RETRY
//!   attempts (7 = forever) the QP fails with LLP_TOO_MANY_RNRS. Errors
//!   produce no CQE by themselves (as on GEN_2): after MODIFY_QP(ERROR) a
//!   FLUSH_WQES writes one flush CQE per queue with work (software replays).
//!
//! # Not modelled (or model choices)
//!
//! * Error codes the sources do not give are model choices
//!   ([`regs::err`] `MODEL_*`). The STag → MR slot reduction, the meaning of
//!   ENCEQEMASK (the model raises CEQEs only when armed) and level-0 MR
//!   addressing (first page PA + in-region offset) are inferred.
//! * Not modelled: UD QPs, SRQ, memory windows, atomics, MODIFY_CQ, push
//!   pages, statistics, interrupts/MSI-X, timers and retransmission, packet
//!   loss, device-thread and shared-memory transports.

#![allow(clippy::needless_range_loop)]

mod bits;
pub mod cqp;
pub mod datapath;
pub mod device;
pub mod fabric;
pub mod fault;
pub mod hmc;
pub mod mem;
pub mod regs;
pub mod shm;
pub mod wqe;

pub use device::{Aeqe, Config, Device, Mode, ccq_cqe_words};
pub use fabric::{DeviceId, DeviceThread, Fabric};
pub use fault::{Counters, Event, FaultPlan};
pub use mem::{Fault, Memory, TestMemory};
