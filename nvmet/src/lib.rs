//! An NVMe-over-RDMA target (issue #32) built, as a user would build it, on
//! the `irdma` driver's public API: the RDMA-CM listener on port 4420, one RC
//! QP per NVMe queue, keyed SGLs through `irdma::rw`, one subsystem with one
//! RAM-backed namespace, and the discovery controller. `no_std`, no
//! allocator, no panics on any path a host's bytes can reach. Facts:
//! `shared/spec/nvme-rdma-target.md` (cited there as K / RT / B; the Linux
//! 6.1 host and its nvmet are the reference).
//!
//! Two layers, joined by the small contract in this file:
//!
//! * [`wire`] and [`ctrl`] — the **command layer**: capsules (SQE, CQE,
//!   SGL descriptors) and the controllers (Fabrics Connect / Property
//!   Get/Set, Identify, features, keep-alive, AER, log pages, Read / Write /
//!   Flush / Write Zeroes, discovery). It never touches the device: for each
//!   capsule it answers with a [`Step`] — respond now (after writing data to
//!   the host), fetch data from the host first, or hold the command.
//! * [`rdma`] — the **transport**: the RDMA-CM private data (REQ / REP / REJ),
//!   the queues' QPs, receive buffers and per-command scratch buffers, the
//!   RDMA READ / WRITE chains of a [`Xfer`], the response SEND (with
//!   invalidate when the command asked for it), teardown. It implements no
//!   NVMe semantics: it calls a [`Commands`] implementation.
#![no_std]
#![deny(missing_docs)]

pub mod ctrl;
pub mod ram;
pub mod rdma;
pub mod wire;

pub use ram::RamDisk;

/// The NVMe/RDMA service port (spec §1.1: IANA 4420, `NVME_RDMA_IP_PORT`).
pub const PORT: u16 = 4420;

/// Bytes of target-side scratch memory per command slot (one receive
/// buffer = one command in flight): large enough for the largest admin
/// data transfer the command layer produces or consumes (Identify 4096 B,
/// a log page piece, the 1024 B Connect data). The command layer refuses
/// (Invalid Field) a transfer to or from scratch that is larger.
pub const SCRATCH: usize = 4096;

/// The transport's handle of one connected queue (one RC QP). Opaque to
/// the command layer, which maps it to (controller, QID) after Connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QueueId(pub u16);

/// A command slot of a queue: the receive buffer the capsule arrived in.
/// The command's scratch buffer belongs to the slot; the slot is busy
/// from the capsule until its response was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot(pub u16);

/// What the transport learnt from the RDMA-CM connect request (spec §1.2;
/// already validated by the transport: RECFMT 0, admin HSQSIZE + 1 ≤ 32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueInfo {
    /// QID from the private data (0 = admin).
    pub qid: u16,
    /// Submission queue entries (HSQSIZE + 1): the receives posted.
    pub sq_entries: u16,
    /// Host receive entries for responses (HRQSIZE).
    pub hrqsize: u16,
}

/// A keyed SGL descriptor (spec §2.3: types 0x40 / 0x4F): host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keyed {
    /// Remote virtual address.
    pub addr: u64,
    /// Length in bytes (24 bits on the wire).
    pub len: u32,
    /// The rkey.
    pub key: u32,
    /// Subtype 0xF: the host asks for remote invalidation of `key`.
    pub invalidate: bool,
}

/// Target-side memory of one transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Local {
    /// The command slot's scratch buffer from byte `off` ([`SCRATCH`]).
    Scratch {
        /// Byte offset in the slot's scratch buffer.
        off: u32,
    },
    /// The namespace's backing memory ([`RamDisk`]) from byte `off`.
    Namespace {
        /// Byte offset in the namespace.
        off: u64,
    },
}

/// One data transfer between host memory and target memory, `len` bytes
/// (≤ `remote.len`; exactly it for every command the command layer
/// accepts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Xfer {
    /// Where the data lives on the target.
    pub local: Local,
    /// Where it lives on the host.
    pub remote: Keyed,
    /// Bytes to move.
    pub len: u32,
}

/// A response capsule to SEND (spec §2.2: always 16 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response {
    /// The CQE as it goes on the wire.
    pub cqe: [u8; 16],
    /// SEND_WITH_INVALIDATE carrying this rkey (spec §2.4: the command's
    /// keyed descriptor was 0x4F); `None` for a plain SEND.
    pub invalidate: Option<u32>,
}

/// The command layer's answer to a capsule or to fetched data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Send `rsp`; when `write` is given, RDMA WRITE that data to the host
    /// first, on the same QP, chained in front of the SEND (spec §3 step 5).
    Respond {
        /// The response.
        rsp: Response,
        /// Data to the host before the response.
        write: Option<Xfer>,
    },
    /// RDMA READ this data from the host first, then call
    /// [`Commands::fetched`] for the same slot (spec §3 step 4).
    Fetch(Xfer),
    /// The command is held (an Asynchronous Event Request): its response
    /// comes later through [`Commands::poll`]. Also the answer to a capsule
    /// too short to carry a CID (< 4 bytes): no response ever comes, the
    /// queue's [`Event::Disconnect`] does (`ctrl`'s module docs).
    Held,
}

/// Something the command layer wants from the transport on its own accord.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A held command completes: send `rsp` for `slot` of `q`.
    Respond {
        /// The queue.
        q: QueueId,
        /// The held command's slot.
        slot: Slot,
        /// Its response.
        rsp: Response,
    },
    /// Disconnect this queue (its controller is torn down: keep-alive
    /// expiry, a fatal error, a shutdown the host asked for is not one of
    /// them). The command layer forgets the queue when it returns this.
    Disconnect(QueueId),
}

/// The command layer as the transport sees it. Every method is bounded
/// work, no allocation, never panics; a host's bad bytes give an NVMe
/// status in the response, never an `Err`.
pub trait Commands {
    /// A connect request for a new queue `q` passed the transport's checks.
    /// `Err(status)` rejects it with that NVMe/RDMA REJ status (spec §1.3;
    /// e.g. 6 no resources).
    fn queue_opened(&mut self, q: QueueId, info: QueueInfo) -> Result<(), u16>;
    /// The queue is gone (disconnected by either side, QP error, or after
    /// an [`Event::Disconnect`]); its held commands are dropped. For the
    /// admin queue of a live controller this tears the controller down.
    fn queue_closed(&mut self, q: QueueId);
    /// The queue is closing because of an error — a work request that
    /// failed (not a flush), its QP moved to ERROR by the device, a
    /// protocol error the transport found — rather than a disconnect by
    /// either side; [`Commands::queue_closed`] follows at once. nvmet
    /// deletes the queue's controller then (spec §3 "Errors"). The default
    /// does nothing.
    fn queue_failed(&mut self, q: QueueId) {
        let _ = q;
    }
    /// A capsule arrived in `slot` of `q`: `capsule` is the received bytes
    /// (64-byte SQE, then in-capsule data, if any); `scratch` is the slot's
    /// [`SCRATCH`] bytes (no transfer in flight on it); `now_ms` a
    /// monotonic clock.
    fn capsule(
        &mut self,
        q: QueueId,
        slot: Slot,
        capsule: &[u8],
        scratch: &mut [u8],
        now_ms: u64,
    ) -> Step;
    /// The [`Step::Fetch`] of `slot` finished (`ok` false: the READ failed
    /// and the transport will tear the queue down; the answer is then
    /// ignored). `scratch` holds the fetched bytes for `Local::Scratch`.
    /// It must be the same buffer [`Commands::capsule`] got for this slot,
    /// unchanged but for the fetched bytes: the command layer keeps the
    /// fetching command's SQE in it (`ctrl`'s module docs).
    fn fetched(
        &mut self,
        q: QueueId,
        slot: Slot,
        ok: bool,
        scratch: &mut [u8],
        now_ms: u64,
    ) -> Step;
    /// Timers and held commands: the next event, if any (call until `None`).
    fn poll(&mut self, now_ms: u64) -> Option<Event>;
}
