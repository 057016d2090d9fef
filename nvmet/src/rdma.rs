//! The NVMe/RDMA transport (spec `nvme-rdma-target.md` §1, §2.4, §3): the
//! RDMA-CM listener on port 4420, one RC QP per NVMe queue, receive buffers
//! posted before the accept, keyed-SGL transfers through `irdma::rw`, the
//! 16-byte response SENDs (with invalidate when asked), teardown.
//!
//! It implements no NVMe semantics: each capsule goes to a [`Commands`]
//! implementation, which answers with a [`Step`].
//!
//! # Resources
//!
//! [`Transport::new`] takes everything up front: a PD, one memory
//! registration over the [`RamDisk`], and per queue slot (`Q` of them) one
//! DMA region from the Hal, registered once, holding `D` command slots of
//! a [`SCRATCH`] buffer, a receive buffer (64 B + the in-capsule size,
//! rounded up to 64) and a 16-B response buffer. A connection takes a free
//! queue slot and creates its CQ and RC QP; when the queue closes, every
//! work request completes (flushed) first, then [`Commands::queue_closed`]
//! is called, the QP and CQ are destroyed and the queue slot is free at
//! once. A queue whose QP the device refused to destroy keeps its buffers
//! forever (the device may still write them): it is never reused
//! ([`Stats::poisoned`]).
//!
//! # The local side of a transfer
//!
//! The target's memory (namespace and scratch) is registered once, so a
//! transfer needs no mapping: each [`Xfer`] becomes an `RwCtx` through
//! [`RwCtx::init_bvec`] with an [`IovaMapper`] that translates addresses
//! inside a registration to the registration's addresses (its lkey is the
//! context's `local_dma_lkey`): one RDMA READ or WRITE WR with one SGE per
//! command. The local range is handed over as two segments because rw.c
//! maps a single segment with `dma_map` unconditionally (the IOVA decision
//! needs `nr_bvec > 1`, rw.c `rdma_rw_ctx_init_bvec`); the driver's rw
//! layer has no entry point for memory the caller registered itself.
//!
//! # Flow per command (spec §3; nvmet `t/rdma.c`)
//!
//! RECV → [`Commands::capsule`] → [`Step::Fetch`]: the READ chain (its last
//! WR signalled), then [`Commands::fetched`] → a new step;
//! [`Step::Respond`]: the slot's receive is re-posted (nvmet
//! `nvmet_rdma_queue_response` re-posts before the SEND), then one post of
//! the WRITE chain with the SEND chained behind it, only the SEND signalled
//! (`rdma_rw_ctx_wrs(..., chain_wr = send)`), or the SEND alone;
//! SEND_WITH_INVALIDATE when [`Response::invalidate`] is set (§2.4). A
//! capsule that lands in a re-posted receive before the previous SEND of
//! the slot completed waits for that completion (the slot's scratch and
//! response buffers are still the device's). [`Step::Held`] keeps the slot
//! until [`Event::Respond`].
//!
//! Errors (§3 step 1 and 6): a WR that fails (not a flush), a receive
//! shorter than 64 bytes, a QP the device moved to ERROR, a DREQ, a REP
//! that timed out, a post the QP refused, or a step the transport cannot
//! carry out (a transfer out of range) close the queue: QP to ERROR,
//! `rdma_disconnect` (DREQ, or DREP for the host's DREQ), flush, teardown.
//! The failures among them (not the DREQ, the REP timeout or a REJ) reach
//! the command layer as [`Commands::queue_failed`] just before
//! [`Commands::queue_closed`]: nvmet deletes the controller then (§3).

use core::ptr::NonNull;

use irdma::cm::rdma_cm::{PortSpace, REQ_USER_DATA};
use irdma::cm::{
    AcceptParams, Cm, CmConfig, CmError, CmEvent, ConnId, MAX_RD_ATOMIC, MadTransport,
};
use irdma::device::Device;
use irdma::rw::{
    BioVec, BvecIter, DeviceAttrs, Direction, IovaMapper, MrPool, RwCtx, RwQp, rdma_rw_max_send_wr,
};
use irdma::verbs::{Cq, Mr, MrDesc, Pd, Qp, QpAttr, QpCap, QpInitAttr, QpState, VerbsError};
use irdma::wr::{
    Access, PageSize, RecvWr, SendFlags, SendWr, Sge, WcStatus, WorkCompletion, WrOpcode,
};
use irdma_hal::{Bar, BufferDirection, Dma, DmaError, Hal};

use crate::{
    Commands, Event, Local, PORT, QueueId, QueueInfo, RamDisk, Response, SCRATCH, Slot, Step, Xfer,
};

/// Bytes of the NVMe/RDMA CM private data the transport reads (spec §1.2:
/// `struct nvme_rdma_cm_req`, 32 bytes).
pub const REQ_PDATA: usize = 32;
/// Bytes of a submission queue entry (spec §2.1).
pub const SQE: usize = 64;
/// Bytes of a response capsule (spec §2.2).
pub const CQE: usize = 16;
/// Admin queue depth limit (spec §1.2: `NVME_AQ_DEPTH`, nvmet rejects
/// admin HSQSIZE + 1 > 32 with STS 4).
pub const ADMIN_DEPTH: u16 = 32;
/// Largest in-capsule data size a receive buffer may carry.
pub const MAX_INLINE: u32 = SCRATCH as u32;
/// Pages one registration's page list may have (a 4 KiB stack array).
pub const MAX_REG_PAGES: usize = 512;

/// NVMe/RDMA REJ status codes (spec §1.3, RT Fig. 11, `nvme-rdma.h`).
pub mod sts {
    /// Invalid private data length.
    pub const INVALID_PRIVATE_DATA_LENGTH: u16 = 1;
    /// Invalid RECFMT.
    pub const INVALID_RECFMT: u16 = 2;
    /// Invalid QID.
    pub const INVALID_QID: u16 = 3;
    /// Invalid HSQSIZE.
    pub const INVALID_HSQSIZE: u16 = 4;
    /// Invalid HRQSIZE.
    pub const INVALID_HRQSIZE: u16 = 5;
    /// No resources.
    pub const NO_RESOURCES: u16 = 6;
}

/// Parses the RDMA_CM_REQUEST private data (spec §1.2; nvmet
/// `nvmet_rdma_parse_cm_connect_req`): fewer than 32 bytes → STS 1, RECFMT
/// ≠ 0 → STS 2, an admin queue (QID 0) with HSQSIZE + 1 > 32 → STS 4.
/// CNTLID is ignored (the 6.1 host always sends 0). The bound of I/O queue
/// sizes is the caller's (the transport's slot count).
pub fn parse_req(pd: &[u8]) -> Result<QueueInfo, u16> {
    let Some(b) = pd.get(..REQ_PDATA) else { return Err(sts::INVALID_PRIVATE_DATA_LENGTH) };
    let le = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    if le(0) != 0 {
        return Err(sts::INVALID_RECFMT);
    }
    let qid = le(2);
    let hrqsize = le(4);
    let hsqsize = le(6);
    let sq_entries = hsqsize.checked_add(1).ok_or(sts::INVALID_HSQSIZE)?;
    if qid == 0 && sq_entries > ADMIN_DEPTH {
        return Err(sts::INVALID_HSQSIZE);
    }
    Ok(QueueInfo { qid, sq_entries, hrqsize })
}

/// The REJ private data (spec §1.3): RECFMT 0, STS, little-endian.
pub fn rej_pdata(status: u16) -> [u8; 4] {
    let s = status.to_le_bytes();
    [0, 0, s[0], s[1]]
}

/// The REP private data (spec §1.3, nvmet `nvmet_rdma_cm_accept`): RECFMT
/// 0, CRQSIZE = the receives posted (HSQSIZE + 1), 28 reserved bytes.
pub fn rep_pdata(crqsize: u16) -> [u8; REQ_PDATA] {
    let mut p = [0u8; REQ_PDATA];
    p[2..4].copy_from_slice(&crqsize.to_le_bytes());
    p
}

/// What [`Transport::new`] needs besides the device and the disk.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The CM's constant facts (GUID, addresses, timing).
    pub cm: CmConfig,
    /// In-capsule data bytes each receive buffer holds after the 64-byte
    /// SQE (0 allowed; ≤ [`MAX_INLINE`]). The command layer advertises
    /// IOCCSZ = (64 + this) / 16 (spec §1.4).
    pub inline_bytes: u32,
    /// Seed of the starting PSNs of accepted QPs.
    pub psn_seed: u32,
}

/// Why [`Transport::new`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// A verbs call (PD, memory registration) failed.
    Verbs(VerbsError),
    /// The CM refused to listen.
    Cm(CmError),
    /// DMA memory for the buffers could not be had.
    Dma(DmaError),
    /// A bad configuration (named).
    Config(&'static str),
}

impl From<VerbsError> for Error {
    fn from(e: VerbsError) -> Self {
        Error::Verbs(e)
    }
}

/// Counters (monotonic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connect requests accepted.
    pub accepted: u64,
    /// Connect requests rejected (any status).
    pub rejected: u64,
    /// Queues closed (resources back).
    pub closed: u64,
    /// Capsules handed to the command layer.
    pub capsules: u64,
    /// Response SENDs posted.
    pub responses: u64,
    /// Of which SEND_WITH_INVALIDATE.
    pub send_inv: u64,
    /// RDMA READ chains posted.
    pub reads: u64,
    /// RDMA WRITE chains posted.
    pub writes: u64,
    /// Work requests that failed (not flushed).
    pub wr_errors: u64,
    /// QPs found in ERROR by the device.
    pub qp_errors: u64,
    /// Queues closed for a protocol error (short capsule, bad step, post
    /// refused).
    pub fatal: u64,
    /// Queues established by their first receive before the RTU.
    pub early_established: u64,
    /// Completions that matched no outstanding work request.
    pub stray: u64,
    /// Signalled work requests posted (receives, READ chains, SENDs).
    pub wrs_posted: u64,
    /// Of which completed (success, error or flush): equal to
    /// `wrs_posted` whenever no queue is open or closing.
    pub wrs_completed: u64,
    /// Held-command responses for no held command.
    pub stray_events: u64,
    /// Queue slots lost because their QP could not be destroyed.
    pub poisoned: u64,
}

/// A registration seen as an IOMMU: the device address of a byte inside
/// `va..va + len` is its address in the registration (`iova + offset`),
/// reached through the registration's lkey.
#[derive(Clone, Copy, Debug)]
struct Window {
    va: usize,
    len: usize,
    iova: u64,
}

impl Window {
    fn translate(&self, seg: NonNull<[u8]>) -> Option<u64> {
        let p = seg.cast::<u8>().as_ptr() as usize;
        let off = p.checked_sub(self.va)?;
        let end = off.checked_add(seg.len())?;
        (end <= self.len).then_some(self.iova.wrapping_add(off as u64))
    }

    /// `len` bytes from `off` as a segment (no dereference).
    fn seg(&self, off: usize, len: usize) -> Option<NonNull<[u8]>> {
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        let p = NonNull::new((self.va as *mut u8).wrapping_add(off))?;
        Some(NonNull::slice_from_raw_parts(p, len))
    }
}

// SAFETY: a window is only built over memory registered for local access
// (`Transport::new`), with the registration's lkey as the contexts'
// `local_dma_lkey`; the registration outlives every context (contexts are
// destroyed, after their WRs completed, before the registration is
// deregistered in `Drop`), so a linked segment is reachable at the
// translated address until `destroy` and after it nothing is posted.
unsafe impl IovaMapper for Window {
    fn try_alloc(&mut self, first: NonNull<[u8]>, size: u64, _: BufferDirection) -> Option<u64> {
        let addr = self.translate(first)?;
        let start = addr.wrapping_sub(self.iova);
        (start.checked_add(size)? <= self.len as u64).then_some(addr)
    }

    fn link(
        &mut self,
        addr: u64,
        offset: u64,
        seg: NonNull<[u8]>,
        _: BufferDirection,
    ) -> Result<(), i32> {
        // Only contiguous segments of the window, each where the range says.
        match self.translate(seg) {
            Some(a) if Some(a) == addr.checked_add(offset) => Ok(()),
            _ => Err(-22),
        }
    }

    fn sync(&mut self, _: u64, _: u64) -> Result<(), i32> {
        Ok(())
    }

    fn destroy(&mut self, _: u64, _: u64, _: BufferDirection) {}
}

/// wr_id kinds (bits 19:16; the slot in bits 15:0; 0 = an unsignalled WR).
const K_RECV: u64 = 1;
const K_READ: u64 = 2;
const K_SEND: u64 = 3;

fn wr_id(kind: u64, slot: usize) -> u64 {
    kind << 16 | (slot as u64 & 0xFFFF)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SqWr {
    None,
    Read(Xfer),
    Send,
}

#[derive(Clone, Copy, Debug)]
struct SlotSt {
    recv_posted: bool,
    sq: SqWr,
    held: bool,
    ctx_live: bool,
    /// The live context's local side is the namespace (else scratch).
    ctx_ns: bool,
    /// A capsule (its byte count) that arrived while the slot's SEND was
    /// still outstanding.
    deferred: Option<u32>,
}

impl SlotSt {
    const IDLE: SlotSt = SlotSt {
        recv_posted: false,
        sq: SqWr::None,
        held: false,
        ctx_live: false,
        ctx_ns: false,
        deferred: None,
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QState {
    Free,
    Open,
    Closing,
    Poisoned,
}

type Ctx = RwCtx<2, 1>;

struct Queue<'d, H: Hal, B: Bar + Clone, const D: usize> {
    state: QState,
    conn: ConnId,
    established: bool,
    /// `queue_opened` accepted it: `queue_closed` is owed.
    opened: bool,
    /// Closing for an error (not a disconnect): `queue_failed` is owed.
    failed: bool,
    entries: usize,
    qp: Option<Qp<'d, H, B>>,
    cq: Option<Cq<'d, H, B>>,
    slots: [SlotSt; D],
    ctx: [Ctx; D],
    // Deregistered (in `Drop`) before `buf` may be freed.
    mr: Option<Mr<'d, H, B>>,
    buf: Option<Dma<H>>,
    win: Window,
    rwqp: RwQp,
}

/// Buffer layout of a queue region: scratch, receive, response per slot.
#[derive(Clone, Copy, Debug)]
struct Layout {
    slots: usize,
    recv_stride: usize,
}

impl Layout {
    fn scratch(&self, s: usize) -> usize {
        s * SCRATCH
    }
    fn recv(&self, s: usize) -> usize {
        self.slots * SCRATCH + s * self.recv_stride
    }
    fn rsp(&self, s: usize) -> usize {
        self.slots * (SCRATCH + self.recv_stride) + s * CQE
    }
    fn bytes(&self) -> usize {
        self.slots * (SCRATCH + self.recv_stride + CQE)
    }
}

/// The NVMe/RDMA transport: `Q` queues (RC QPs) of up to `D` command
/// slots each (so an I/O queue's HSQSIZE + 1 ≤ `D`; the admin queue needs
/// `D` ≥ 32), a CM of `C` connections (≥ 2 × `Q`: closed connections sit
/// in timewait while the host reconnects). See the module docs.
pub struct Transport<
    'd,
    H: Hal,
    B: Bar + Clone,
    T: MadTransport,
    const Q: usize,
    const D: usize,
    const C: usize,
> {
    // Field order is drop order: queues (QPs, CQs) before the
    // registrations, registrations before the memory, the PD last.
    queues: heapless::Vec<Queue<'d, H, B, D>, Q>,
    ns_mr: Option<Mr<'d, H, B>>,
    pd: Pd<'d, H, B>,
    dev: &'d Device<H, B>,
    ns_win: Window,
    ns_rwqp: RwQp,
    pool: MrPool<0, 0>,
    cm: Cm<C, 1>,
    mad: T,
    layout: Layout,
    psn: u32,
    now: u64,
    stats: Stats,
    capsule: [u8; SQE + SCRATCH],
    scratch: [u8; SCRATCH],
}

/// Largest page size of {2 MiB, 4 KiB} `phys` is aligned to, and the page
/// list of `len` bytes from it, into `out`; `None` if more than
/// [`MAX_REG_PAGES`] pages.
fn page_list(phys: u64, len: u64, out: &mut [u64; MAX_REG_PAGES]) -> Option<(PageSize, usize)> {
    let ps = if phys.is_multiple_of(PageSize::Size2M.bytes()) && len >= PageSize::Size2M.bytes() {
        PageSize::Size2M
    } else {
        PageSize::Size4K
    };
    if !phys.is_multiple_of(PageSize::Size4K.bytes()) {
        return None;
    }
    let n = usize::try_from(len.div_ceil(ps.bytes())).ok()?;
    let pages = out.get_mut(..n)?;
    for (i, p) in pages.iter_mut().enumerate() {
        *p = phys + i as u64 * ps.bytes();
    }
    Some((ps, n))
}

impl<'d, H: Hal, B: Bar + Clone, T: MadTransport, const Q: usize, const D: usize, const C: usize>
    Transport<'d, H, B, T, Q, D, C>
{
    /// Creates the transport on `dev`: a PD, the registration over `disk`
    /// (VA-based at its physical address, local access only), `Q` queue
    /// regions of DMA memory from the Hal (each registered once), and the
    /// listener on [`PORT`] (TCP port space, any address). `mad` carries
    /// the CM's MADs (the driver's [`irdma::cm::Qp1Transport`] on hardware).
    ///
    /// The disk must start on a 4 KiB boundary and span at most
    /// [`MAX_REG_PAGES`] pages (of 2 MiB when it starts on a 2 MiB
    /// boundary: up to 1 GiB); a queue region (`D` × (4096 + the receive
    /// buffer + 16) bytes) at most [`MAX_REG_PAGES`] 4 KiB pages.
    pub fn new(
        dev: &'d Device<H, B>,
        disk: &'d RamDisk,
        mad: T,
        cfg: Config,
    ) -> Result<Self, Error> {
        let layout = Self::check_config(&cfg)?;
        let caps = dev.caps();
        let pd = dev.alloc_pd()?;
        let mut pages = [0u64; MAX_REG_PAGES];

        let ns_len = usize::try_from(disk.len()).map_err(|_| Error::Config("disk too large"))?;
        let ns_mr = Self::register_disk(dev, &pd, disk, &mut pages)?;
        let ns_lkey = ns_mr.as_ref().map_or(0, |m| m.lkey());
        let ns_win = Window { va: disk.vaddr().as_ptr() as usize, len: ns_len, iova: disk.phys() };
        let attrs = |lkey| DeviceAttrs::e810_roce(caps.max_sge, caps.max_qp_wr_quanta, lkey);

        let mut queues = heapless::Vec::new();
        for _ in 0..Q {
            let q = Self::new_queue(dev, &pd, layout, &attrs, &mut pages)?;
            if queues.push(q).is_err() {
                return Err(Error::Config("queue count"));
            }
        }
        let mut cm = Cm::new(cfg.cm);
        cm.listen(PortSpace::Tcp, PORT, None).map_err(Error::Cm)?;
        Ok(Transport {
            queues,
            ns_mr,
            pd,
            dev,
            ns_win,
            ns_rwqp: RwQp::new(attrs(ns_lkey), false, 1),
            pool: MrPool::new(),
            cm,
            mad,
            layout,
            psn: cfg.psn_seed | 1,
            now: 0,
            stats: Stats::default(),
            capsule: [0; SQE + SCRATCH],
            scratch: [0; SCRATCH],
        })
    }

    /// [`Transport::new`]'s checks of the configuration and the type's
    /// counts; the queue-region layout.
    fn check_config(cfg: &Config) -> Result<Layout, Error> {
        if cfg.inline_bytes > MAX_INLINE {
            return Err(Error::Config("in-capsule size above MAX_INLINE"));
        }
        if D == 0 || D > 0xFFFF || Q == 0 || Q > 0xFFFF {
            return Err(Error::Config("queue or slot count out of range"));
        }
        if C < Q.saturating_mul(2) {
            // The type's docs: a host reconnecting every queue at once needs
            // a CM entry per new connection while the old ones sit in
            // timewait; a REQ that finds the table full is dropped.
            return Err(Error::Config("CM connections below 2 x queues"));
        }
        let recv_stride = (SQE + cfg.inline_bytes as usize).next_multiple_of(64);
        Ok(Layout { slots: D, recv_stride })
    }

    /// [`Transport::new`]'s registration over `disk` (VA-based at its
    /// physical address, local access only); `None` for an empty disk.
    fn register_disk(
        dev: &'d Device<H, B>,
        pd: &Pd<'d, H, B>,
        disk: &'d RamDisk,
        pages: &mut [u64; MAX_REG_PAGES],
    ) -> Result<Option<Mr<'d, H, B>>, Error> {
        Ok(if disk.is_empty() {
            None
        } else {
            let (ps, n) = page_list(disk.phys(), disk.len(), pages)
                .ok_or(Error::Config("disk not 4 KiB aligned or too many pages"))?;
            let d = MrDesc {
                iova: disk.phys(),
                length: disk.len(),
                page_size: ps,
                pages: pages.get(..n).unwrap_or(&[]),
                zero_based: false,
                access: Access::LOCAL_WRITE,
            };
            // SAFETY: the pages are the disk's (`RamDisk::new`'s contract:
            // valid and used only through the handle or the device's DMA
            // for as long as the handle and every registration over it
            // live); `disk` outlives `'d` and the MR is deregistered in
            // `Drop` (or, quarantined, kept until a reset, as the contract
            // says).
            Some(unsafe { dev.reg_mr(pd, &d) }?)
        })
    }

    /// One queue of [`Transport::new`]: its region of DMA memory from the
    /// Hal, registered once, and its R/W limits.
    fn new_queue(
        dev: &'d Device<H, B>,
        pd: &Pd<'d, H, B>,
        layout: Layout,
        attrs: &impl Fn(u32) -> DeviceAttrs,
        pages: &mut [u64; MAX_REG_PAGES],
    ) -> Result<Queue<'d, H, B, D>, Error> {
        let buf =
            Dma::<H>::with_bytes(layout.bytes(), BufferDirection::Both).map_err(Error::Dma)?;
        let (ps, n) = page_list(buf.paddr(), buf.len() as u64, pages)
            .ok_or(Error::Config("queue region has too many pages"))?;
        let d = MrDesc {
            iova: buf.paddr(),
            length: buf.len() as u64,
            page_size: ps,
            pages: pages.get(..n).unwrap_or(&[]),
            zero_based: false,
            access: Access::LOCAL_WRITE,
        };
        // SAFETY: the pages are `buf`'s, owned by the queue; the queue
        // keeps `buf` until its MR is deregistered (`Drop` leaks it
        // when the deregistration fails).
        let mr = unsafe { dev.reg_mr(pd, &d) }?;
        let win = Window { va: buf.vaddr().as_ptr() as usize, len: buf.len(), iova: buf.paddr() };
        let rwqp = RwQp::new(attrs(mr.lkey()), false, 1);
        let q = Queue {
            state: QState::Free,
            conn: ConnId(0),
            established: false,
            opened: false,
            failed: false,
            entries: 0,
            qp: None,
            cq: None,
            slots: [SlotSt::IDLE; D],
            ctx: [const { Ctx::new() }; D],
            mr: Some(mr),
            buf: Some(buf),
            win,
            rwqp,
        };
        Ok(q)
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The CM (states, counters).
    pub fn cm(&self) -> &Cm<C, 1> {
        &self.cm
    }

    /// The MAD transport.
    pub fn mad(&mut self) -> &mut T {
        &mut self.mad
    }

    /// Queues connected or closing (holding a QP).
    pub fn open_queues(&self) -> usize {
        self.queues.iter().filter(|q| matches!(q.state, QState::Open | QState::Closing)).count()
    }

    /// The QP number of queue `q`, while it has one.
    pub fn qp_num(&self, q: QueueId) -> Option<u32> {
        self.queues.get(usize::from(q.0))?.qp.as_ref().map(|qp| qp.qp_num())
    }

    /// The earliest time the CM has work, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        self.cm.next_deadline()
    }

    /// One bounded round of work at `now_ms`: CM events (connects,
    /// disconnects, retransmissions), each queue's completions (a bounded
    /// batch), the command layer's events, finished teardowns. Returns
    /// whether anything happened.
    pub fn poll(&mut self, now_ms: u64, cmds: &mut impl Commands) -> bool {
        self.now = now_ms;
        let mut any = false;
        for _ in 0..16 {
            let Some(ev) = self.cm.poll(now_ms, &mut self.mad) else { break };
            any = true;
            self.on_cm(ev, cmds);
        }
        for qi in 0..self.queues.len() {
            any |= self.poll_queue(qi, cmds);
        }
        for _ in 0..64 {
            let Some(ev) = cmds.poll(now_ms) else { break };
            any = true;
            self.on_event(ev, cmds);
        }
        for qi in 0..self.queues.len() {
            any |= self.try_finish(qi, cmds);
        }
        any
    }

    fn on_cm(&mut self, ev: CmEvent, cmds: &mut impl Commands) {
        match ev {
            CmEvent::ConnectRequest { id, info } => {
                self.on_connect(id, &info.private_data, cmds);
            }
            CmEvent::Established { id } => {
                if let Some(q) = self.queue_of(id) {
                    q.established = true;
                }
            }
            CmEvent::Disconnected { id, .. } | CmEvent::TimedOut { id } => {
                match self.queue_index_of(id) {
                    Some(qi) => self.begin_close(qi),
                    // Already closed: answer a DREQ (DREP) all the same.
                    None => {
                        let _ = self.cm.disconnect(self.now, id, &mut self.mad);
                    }
                }
            }
            CmEvent::Rejected { id, .. } => {
                if let Some(qi) = self.queue_index_of(id) {
                    self.begin_close(qi);
                }
            }
            _ => {}
        }
    }

    fn queue_index_of(&self, id: ConnId) -> Option<usize> {
        self.queues
            .iter()
            .position(|q| matches!(q.state, QState::Open | QState::Closing) && q.conn == id)
    }

    fn queue_of(&mut self, id: ConnId) -> Option<&mut Queue<'d, H, B, D>> {
        let i = self.queue_index_of(id)?;
        self.queues.get_mut(i)
    }

    fn reject(&mut self, id: ConnId, status: u16) {
        self.stats.rejected += 1;
        let _ = self.cm.reject(id, &rej_pdata(status), &mut self.mad);
    }

    fn next_psn(&mut self) -> u32 {
        // xorshift32: a different starting PSN per connection.
        let mut x = self.psn;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.psn = x;
        x & 0xFF_FFFF
    }

    fn on_connect(&mut self, id: ConnId, pd: &[u8; REQ_USER_DATA], cmds: &mut impl Commands) {
        let info = match parse_req(pd) {
            Ok(i) => i,
            Err(s) => return self.reject(id, s),
        };
        let n = usize::from(info.sq_entries);
        if n > D {
            return self.reject(id, sts::INVALID_HSQSIZE);
        }
        let Some(qi) = self.queues.iter().position(|q| q.state == QState::Free) else {
            return self.reject(id, sts::NO_RESOURCES);
        };
        let Some((cq, qp)) = self.queue_objects(n) else {
            return self.reject(id, sts::NO_RESOURCES);
        };
        let qid = QueueId(qi as u16);
        if let Err(s) = cmds.queue_opened(qid, info) {
            drop(qp);
            drop(cq);
            return self.reject(id, s);
        }
        let Some(q) = self.queues.get_mut(qi) else { return };
        q.state = QState::Open;
        q.conn = id;
        q.established = false;
        q.opened = true;
        q.failed = false;
        q.entries = n;
        q.slots = [SlotSt::IDLE; D];
        q.qp = Some(qp);
        q.cq = Some(cq);
        self.accept_queue(id, qi, info.sq_entries);
    }

    /// The CQ and QP of a queue of `n` entries (`None`: the device refused
    /// one; nothing is held then). QP sizing as nvmet (spec §1.5): one
    /// receive per SQ entry (+1), a send slot per response plus what each
    /// slot's rw context needs.
    fn queue_objects(&self, n: usize) -> Option<(Cq<'d, H, B>, Qp<'d, H, B>)> {
        let attrs = self.ns_rwqp.dev;
        let rw_wrs = rdma_rw_max_send_wr(&attrs, false, n as u32, false);
        let send = (n as u32).saturating_add(rw_wrs).saturating_add(1);
        let recv = n as u32 + 1;
        let cap = QpCap {
            max_send_wr: send,
            max_recv_wr: recv,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let cq = self.dev.create_cq(send + recv).ok()?;
        let mut attr = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap };
        let qp = self.dev.create_qp(&self.pd, &mut attr).ok()?;
        Some((cq, qp))
    }

    /// `on_connect` once queue `qi` holds its QP: the receives posted
    /// (spec §1.5: before the accept), the QP through INIT, RTR and RTS,
    /// and the REP sent; otherwise a reject and the queue closing.
    fn accept_queue(&mut self, id: ConnId, qi: usize, sq_entries: u16) {
        let Some(q) = self.queues.get_mut(qi) else { return };
        let n = q.entries;
        let mut ok = q.qp.as_mut().is_some_and(|qp| qp.modify(&QpAttr::new(QpState::Init)).is_ok());
        for s in 0..n {
            ok = ok && self.post_recv(qi, s);
        }
        let psn = self.next_psn();
        let rep = rep_pdata(sq_entries);
        let acc = AcceptParams {
            qpn: self.queues.get(qi).and_then(|q| q.qp.as_ref()).map_or(0, |qp| qp.qp_num()),
            starting_psn: psn,
            // spec §1.3: IRD 0 (the host never reads from the target);
            // ORD ≤ the host's responder resources (the CM clamps to it).
            responder_resources: 0,
            initiator_depth: MAX_RD_ATOMIC,
            rnr_retry_count: 7,
            srq: false,
            private_data: &rep,
        };
        let params = if ok { self.cm.accept_params(id, &acc).ok() } else { None };
        let moved = match (params, self.queues.get_mut(qi).and_then(|q| q.qp.as_mut())) {
            (Some(p), Some(qp)) => {
                // INIT was done above; RTR and RTS.
                let [_, rtr, rts] = p.qp_attrs();
                qp.modify(&rtr).is_ok() && qp.modify(&rts).is_ok()
            }
            _ => false,
        };
        if moved && self.cm.accept(self.now, id, &acc, &mut self.mad).is_ok() {
            self.stats.accepted += 1;
        } else {
            self.reject(id, sts::NO_RESOURCES);
            self.begin_close(qi);
        }
    }

    /// Posts slot `s`'s receive; false (and the queue closing) if refused.
    fn post_recv(&mut self, qi: usize, s: usize) -> bool {
        let layout = self.layout;
        let Some(q) = self.queues.get_mut(qi) else { return false };
        let Some(lkey) = q.mr.as_ref().map(|m| m.lkey()) else { return false };
        let sge = [Sge {
            addr: q.win.iova.wrapping_add(layout.recv(s) as u64),
            length: layout.recv_stride as u32,
            lkey,
        }];
        let ok = q.qp.as_mut().is_some_and(|qp| {
            qp.post_recv(&[RecvWr { wr_id: wr_id(K_RECV, s), sg_list: &sge }]).is_ok()
        });
        if ok {
            if let Some(st) = q.slots.get_mut(s) {
                st.recv_posted = true;
                self.stats.wrs_posted += 1;
            }
        } else {
            self.fatal(qi);
        }
        ok
    }

    fn fatal(&mut self, qi: usize) {
        if let Some(q) = self.queues.get_mut(qi).filter(|q| q.state == QState::Open) {
            q.failed = true;
            self.stats.fatal += 1;
        }
        self.begin_close(qi);
    }

    /// QP to ERROR, `rdma_disconnect` (DREQ, or the DREP of a received
    /// DREQ), held commands dropped; the flush then drains the queue.
    fn begin_close(&mut self, qi: usize) {
        let Some(q) = self.queues.get_mut(qi) else { return };
        if q.state != QState::Open {
            if q.state == QState::Closing {
                // A DREQ after our own close started: answer it.
                let _ = self.cm.disconnect(self.now, q.conn, &mut self.mad);
            }
            return;
        }
        q.state = QState::Closing;
        for s in q.slots.iter_mut() {
            s.held = false;
            s.deferred = None;
        }
        if let Some(qp) = q.qp.as_mut() {
            // A failed modify leaves the flush to the driver (its software
            // flush completes every WR when the device cannot).
            let _ = qp.modify(&QpAttr::new(QpState::Error));
        }
        let _ = self.cm.disconnect(self.now, q.conn, &mut self.mad);
    }

    /// Tears a drained closing queue down: contexts, `queue_closed`, QP,
    /// CQ. Returns whether it did.
    fn try_finish(&mut self, qi: usize, cmds: &mut impl Commands) -> bool {
        let Some(q) = self.queues.get_mut(qi) else { return false };
        if q.state != QState::Closing || q.slots.iter().any(|s| s.recv_posted || s.sq != SqWr::None)
        {
            return false;
        }
        for (st, ctx) in q.slots.iter_mut().zip(q.ctx.iter_mut()) {
            if st.ctx_live {
                let mut win = q.win;
                // SAFETY: every WR of the queue completed (flushed), so the
                // device is done with the transfer; `win` is the mapper
                // the context was initialised with (a copy: it is stateless).
                let _ = unsafe { ctx.destroy_bvec::<H, Window, 0, 0>(&mut self.pool, &mut win) };
                st.ctx_live = false;
            }
            *st = SlotSt::IDLE;
        }
        if q.opened {
            q.opened = false;
            if q.failed {
                cmds.queue_failed(QueueId(qi as u16));
            }
            cmds.queue_closed(QueueId(qi as u16));
        }
        let destroyed = q.qp.as_mut().is_none_or(|qp| qp.destroy().is_ok());
        q.qp = None;
        if let Some(mut cq) = q.cq.take() {
            let _ = cq.destroy();
        }
        self.stats.closed += 1;
        if destroyed {
            q.state = QState::Free;
        } else {
            // The device may still write the receive buffers: never reuse.
            q.state = QState::Poisoned;
            self.stats.poisoned += 1;
        }
        true
    }

    fn poll_queue(&mut self, qi: usize, cmds: &mut impl Commands) -> bool {
        let dev = self.dev;
        let Some(q) = self.queues.get_mut(qi) else { return false };
        if !matches!(q.state, QState::Open | QState::Closing) {
            return false;
        }
        if q.state == QState::Open && q.qp.as_ref().is_some_and(|qp| dev.qp_in_error(qp.qp_num())) {
            q.failed = true;
            self.stats.qp_errors += 1;
            self.begin_close(qi);
        }
        let mut wc = [WorkCompletion::default(); 16];
        let mut any = false;
        for _ in 0..4 {
            let Some(q) = self.queues.get_mut(qi) else { return any };
            let Some(cq) = q.cq.as_mut() else { return any };
            let n = cq.poll(&mut wc);
            for c in wc.iter().take(n) {
                self.on_wc(qi, c, cmds);
            }
            any |= n > 0;
            if n < wc.len() {
                break;
            }
        }
        any
    }

    fn on_wc(&mut self, qi: usize, c: &WorkCompletion, cmds: &mut impl Commands) {
        let kind = c.wr_id >> 16 & 0xF;
        let s = (c.wr_id & 0xFFFF) as usize;
        let flushed = c.status == WcStatus::WrFlushErr;
        let ok = c.status == WcStatus::Success;
        if !ok && !flushed {
            self.stats.wr_errors += 1;
        }
        let Some(q) = self.queues.get_mut(qi) else { return };
        let open = q.state == QState::Open;
        let Some(st) = q.slots.get_mut(s).filter(|_| s < q.entries) else {
            // An unsignalled WRITE (wr_id 0) reports only errors and flushes.
            if !ok && !flushed {
                self.fatal(qi);
            } else if c.wr_id != 0 {
                self.stats.stray += 1;
            }
            return;
        };
        match kind {
            K_RECV if st.recv_posted => {
                st.recv_posted = false;
                self.stats.wrs_completed += 1;
                self.recv_done(qi, s, c, open, cmds);
            }
            K_READ if matches!(st.sq, SqWr::Read(_)) => {
                st.sq = SqWr::None;
                self.stats.wrs_completed += 1;
                self.read_done(qi, s, ok, open, cmds);
            }
            K_SEND if st.sq == SqWr::Send => {
                st.sq = SqWr::None;
                self.stats.wrs_completed += 1;
                self.send_done(qi, s, ok, flushed, open, cmds);
            }
            _ => {
                if !ok && !flushed {
                    self.fatal(qi);
                } else {
                    self.stats.stray += 1;
                }
            }
        }
    }

    /// A receive completed (its slot's `recv_posted` already cleared): the
    /// capsule is run, or deferred while the slot's last send or read is
    /// outstanding or the slot is held.
    fn recv_done(
        &mut self,
        qi: usize,
        s: usize,
        c: &WorkCompletion,
        open: bool,
        cmds: &mut impl Commands,
    ) {
        if c.status != WcStatus::Success {
            if c.status != WcStatus::WrFlushErr {
                self.fatal(qi);
            }
            return;
        }
        if !open {
            return;
        }
        let Some(q) = self.queues.get_mut(qi) else { return };
        if !q.established {
            // spec §1.5: the first command before the RTU is the
            // connection's establishment (COMM_EST).
            q.established = true;
            self.stats.early_established += 1;
            let _ = self.cm.established(q.conn);
        }
        let Some(st) = q.slots.get_mut(s) else { return };
        if st.sq != SqWr::None || st.held {
            st.deferred = Some(c.byte_len);
            return;
        }
        self.on_capsule(qi, s, c.byte_len, cmds);
    }

    /// A READ of a command's data completed (the slot's SQ WR already
    /// cleared): the command layer gets the fetched data, or the failure.
    fn read_done(&mut self, qi: usize, s: usize, ok: bool, open: bool, cmds: &mut impl Commands) {
        self.end_ctx(qi, s);
        if !open {
            return;
        }
        if !ok {
            self.stage_scratch(qi, s);
            let _ = cmds.fetched(
                QueueId(qi as u16),
                Slot(s as u16),
                false,
                &mut self.scratch,
                self.now,
            );
            self.fatal(qi);
            return;
        }
        self.stage_scratch(qi, s);
        let step =
            cmds.fetched(QueueId(qi as u16), Slot(s as u16), true, &mut self.scratch, self.now);
        self.on_step(qi, s, step);
    }

    /// A response SEND completed (the slot's SQ WR already cleared): a
    /// capsule deferred behind it runs now.
    fn send_done(
        &mut self,
        qi: usize,
        s: usize,
        ok: bool,
        flushed: bool,
        open: bool,
        cmds: &mut impl Commands,
    ) {
        self.end_ctx(qi, s);
        if !ok {
            if !flushed {
                self.fatal(qi);
            }
            return;
        }
        let deferred = self.queues.get_mut(qi).and_then(|q| q.slots.get_mut(s)?.deferred.take());
        if let Some(n) = deferred
            && open
        {
            self.on_capsule(qi, s, n, cmds);
        }
    }

    /// The scratch staging buffer for [`Commands::fetched`]: the slot's whole
    /// scratch as [`Transport::fetch`] left it (what the command layer wrote
    /// in `capsule`, the fetched bytes over it), as the contract asks.
    fn stage_scratch(&mut self, qi: usize, s: usize) {
        let at = self.layout.scratch(s);
        let read = self
            .queues
            .get(qi)
            .and_then(|q| q.buf.as_ref())
            .is_some_and(|buf| buf.read_bytes(at, &mut self.scratch));
        if !read {
            self.scratch.fill(0);
        }
    }

    fn end_ctx(&mut self, qi: usize, s: usize) {
        let Some(q) = self.queues.get_mut(qi) else { return };
        let (Some(st), Some(ctx)) = (q.slots.get_mut(s), q.ctx.get_mut(s)) else { return };
        if st.ctx_live {
            let mut win = if st.ctx_ns { self.ns_win } else { q.win };
            // SAFETY: the context's WRs completed (the signalled one last,
            // in order on the send queue), so the device is done with it;
            // the mapper is the window it was initialised with.
            let _ = unsafe { ctx.destroy_bvec::<H, Window, 0, 0>(&mut self.pool, &mut win) };
            st.ctx_live = false;
        }
    }

    fn on_capsule(&mut self, qi: usize, s: usize, byte_len: u32, cmds: &mut impl Commands) {
        let n = byte_len as usize;
        // nvmet treats a capsule under 64 bytes as fatal (spec §3 step 1);
        // here the command layer answers it with an NVMe status (issue #32:
        // "a capsule shorter than its header" gets a status), or holds it and
        // asks for the disconnect when not even the CID is there.
        if n == 0 || n > self.layout.recv_stride {
            return self.fatal(qi);
        }
        let at = self.layout.recv(s);
        let Some(q) = self.queues.get(qi) else { return };
        let (Some(buf), Some(dst)) = (q.buf.as_ref(), self.capsule.get_mut(..n)) else { return };
        if !buf.read_bytes(at, dst) {
            return self.fatal(qi);
        }
        self.scratch.fill(0);
        self.stats.capsules += 1;
        let step = cmds.capsule(
            QueueId(qi as u16),
            Slot(s as u16),
            self.capsule.get(..n).unwrap_or(&[]),
            &mut self.scratch,
            self.now,
        );
        self.on_step(qi, s, step);
    }

    fn on_event(&mut self, ev: Event, _cmds: &mut impl Commands) {
        match ev {
            Event::Respond { q, slot, rsp } => {
                let (qi, s) = (usize::from(q.0), usize::from(slot.0));
                let held =
                    self.queues.get_mut(qi).filter(|q| q.state == QState::Open).and_then(|q| {
                        let st = q.slots.get_mut(s).filter(|_| s < q.entries)?;
                        core::mem::replace(&mut st.held, false).then_some(())
                    });
                if held.is_some() {
                    self.respond(qi, s, rsp, None);
                } else {
                    self.stats.stray_events += 1;
                }
            }
            Event::Disconnect(q) => {
                // The command layer forgets the queue now; no queue_closed.
                if let Some(qu) = self.queues.get_mut(usize::from(q.0))
                    && qu.state == QState::Open
                {
                    qu.opened = false;
                    self.begin_close(usize::from(q.0));
                }
            }
        }
    }

    fn on_step(&mut self, qi: usize, s: usize, step: Step) {
        match step {
            Step::Held => {
                if let Some(st) = self.queues.get_mut(qi).and_then(|q| q.slots.get_mut(s)) {
                    st.held = true;
                }
            }
            Step::Fetch(x) => self.fetch(qi, s, x),
            Step::Respond { rsp, write } => self.respond(qi, s, rsp, write),
        }
    }

    /// The window, rw QP limits and segment of a transfer's local side, if
    /// the transfer is one the transport can carry out.
    fn local(&self, qi: usize, s: usize, x: &Xfer) -> Option<(Window, RwQp, NonNull<[u8]>, bool)> {
        let len = x.len as usize;
        if x.len == 0 || x.len > x.remote.len {
            return None;
        }
        match x.local {
            Local::Scratch { off } => {
                let off = off as usize;
                if off.checked_add(len)? > SCRATCH {
                    return None;
                }
                let q = self.queues.get(qi)?;
                let seg = q.win.seg(self.layout.scratch(s) + off, len)?;
                Some((q.win, q.rwqp, seg, false))
            }
            Local::Namespace { off } => {
                self.ns_mr.as_ref()?;
                let seg = self.ns_win.seg(usize::try_from(off).ok()?, len)?;
                Some((self.ns_win, self.ns_rwqp, seg, true))
            }
        }
    }

    /// Initialises slot `s`'s context for `x` in `dir`; false if it cannot.
    fn init_ctx(&mut self, qi: usize, s: usize, x: &Xfer, dir: Direction) -> bool {
        let Some((mut win, rwqp, seg, ns)) = self.local(qi, s, x) else { return false };
        // Two segments (see the module docs): the IOVA decision.
        let half = seg.len() / 2;
        let (Some(a), Some(b)) = (sub(seg, 0, half), sub(seg, half, seg.len() - half)) else {
            return false;
        };
        let bv = [BioVec { buf: a }, BioVec { buf: b }];
        let iter = BvecIter { bi_size: x.len, bi_idx: 0, bi_bvec_done: 0 };
        let Some(q) = self.queues.get_mut(qi) else { return false };
        let (Some(st), Some(ctx)) = (q.slots.get_mut(s), q.ctx.get_mut(s)) else { return false };
        if st.ctx_live {
            return false;
        }
        // SAFETY: the segments lie inside a registration the transport
        // owns (or the disk, valid per `RamDisk::new`) and stay there until
        // `end_ctx`/`try_finish` destroy the context after its WRs
        // completed; the pool holds no MRs.
        let r = unsafe {
            ctx.init_bvec::<H, Window, 0, 0>(
                &rwqp,
                &mut self.pool,
                &mut win,
                &bv,
                bv.len(),
                iter,
                x.remote.addr,
                x.remote.key,
                dir,
            )
        };
        if r.is_ok() {
            st.ctx_live = true;
            st.ctx_ns = ns;
        }
        r.is_ok()
    }

    fn fetch(&mut self, qi: usize, s: usize, x: Xfer) {
        // The command layer's scratch goes to the slot's region first (the
        // READ then lands over its part of it): `fetched` gets it back
        // (the `Commands::fetched` contract).
        let layout = self.layout;
        let kept = self
            .queues
            .get(qi)
            .and_then(|q| q.buf.as_ref())
            .is_some_and(|buf| buf.write_bytes(layout.scratch(s), &self.scratch));
        if !kept || !self.init_ctx(qi, s, &x, Direction::FromDevice) {
            return self.fatal(qi);
        }
        let Some(q) = self.queues.get_mut(qi) else { return };
        let (Some(qp), Some(ctx), Some(st)) = (q.qp.as_mut(), q.ctx.get_mut(s), q.slots.get_mut(s))
        else {
            return;
        };
        st.sq = SqWr::Read(x);
        if ctx.post(qp, &mut self.pool, wr_id(K_READ, s), &[]).is_err() {
            // Nothing or part posted: the flush accounts for it (a READ
            // chain is one WR here, so nothing is outstanding).
            st.sq = SqWr::None;
            return self.fatal(qi);
        }
        self.stats.reads += 1;
        self.stats.wrs_posted += 1;
    }

    fn respond(&mut self, qi: usize, s: usize, rsp: Response, write: Option<Xfer>) {
        let layout = self.layout;
        let write = write.filter(|x| x.len > 0);
        if let Some(x) = write {
            if let Local::Scratch { off } = x.local {
                // The command layer filled the staging scratch in this call.
                let (off, len) = (off as usize, x.len as usize);
                let src = self.scratch.get(off..off.saturating_add(len));
                let q = self.queues.get(qi);
                let done = match (src, q.and_then(|q| q.buf.as_ref())) {
                    (Some(src), Some(buf)) => buf.write_bytes(layout.scratch(s) + off, src),
                    _ => false,
                };
                if !done {
                    return self.fatal(qi);
                }
            }
            if !self.init_ctx(qi, s, &x, Direction::ToDevice) {
                return self.fatal(qi);
            }
        }
        let Some(q) = self.queues.get(qi) else { return };
        let (Some(buf), Some(lkey)) = (q.buf.as_ref(), q.mr.as_ref().map(|m| m.lkey())) else {
            return;
        };
        if !buf.write_bytes(layout.rsp(s), &rsp.cqe) {
            return self.fatal(qi);
        }
        let sge =
            [Sge { addr: q.win.iova.wrapping_add(layout.rsp(s) as u64), length: CQE as u32, lkey }];
        // Re-post the receive before the response (nvmet
        // `nvmet_rdma_queue_response`); a capsule landing in it before the
        // SEND completes waits (`deferred`).
        if !q.slots.get(s).is_some_and(|st| st.recv_posted) && !self.post_recv(qi, s) {
            return;
        }
        let opcode = match rsp.invalidate {
            Some(inv_key) => WrOpcode::SendInv { inv_key },
            None => WrOpcode::Send,
        };
        let send =
            SendWr { wr_id: wr_id(K_SEND, s), opcode, flags: SendFlags::SIGNALED, sg_list: &sge };
        let Some(q) = self.queues.get_mut(qi) else { return };
        let (Some(qp), Some(ctx), Some(st)) = (q.qp.as_mut(), q.ctx.get_mut(s), q.slots.get_mut(s))
        else {
            return;
        };
        let posted = if write.is_some() {
            // spec §3 step 5: the WRITEs chained in front of the SEND, one
            // post, only the SEND signalled.
            ctx.post(qp, &mut self.pool, wr_id(K_SEND, s), &[send]).is_ok()
        } else {
            qp.post_send(&[send]).is_ok()
        };
        if !posted {
            // Whatever part was posted completes by the flush; the SEND,
            // the only signalled WR, was not posted.
            return self.fatal(qi);
        }
        st.sq = SqWr::Send;
        self.stats.responses += 1;
        self.stats.wrs_posted += 1;
        if write.is_some() {
            self.stats.writes += 1;
        }
        if rsp.invalidate.is_some() {
            self.stats.send_inv += 1;
        }
    }
}

/// A sub-range of a segment, without dereferencing it.
fn sub(buf: NonNull<[u8]>, off: usize, len: usize) -> Option<NonNull<[u8]>> {
    if off.checked_add(len)? > buf.len() {
        return None;
    }
    let p = NonNull::new(buf.cast::<u8>().as_ptr().wrapping_add(off))?;
    Some(NonNull::slice_from_raw_parts(p, len))
}

impl<H: Hal, B: Bar + Clone, T: MadTransport, const Q: usize, const D: usize, const C: usize> Drop
    for Transport<'_, H, B, T, Q, D, C>
{
    fn drop(&mut self) {
        for q in self.queues.iter_mut() {
            let mut poisoned = q.state == QState::Poisoned;
            if let Some(mut qp) = q.qp.take() {
                // DESTROY_QP ends the device's access to the buffers.
                poisoned |= qp.destroy().is_err();
            }
            drop(q.cq.take());
            let dereg = q.mr.as_mut().is_none_or(|m| m.dereg().is_ok());
            if poisoned || !dereg {
                // The device may still reach the region: never free it.
                core::mem::forget(q.buf.take());
            }
        }
        if let Some(m) = self.ns_mr.as_mut() {
            let _ = m.dereg();
        }
    }
}
