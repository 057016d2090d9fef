//! One E810 RDMA function: register file, CQP engine, CQ/CEQ/AEQ delivery.
//! The data path (SQ/RQ processing, the wire) is in `datapath.rs`.

use std::collections::{BTreeMap, VecDeque};

use crate::bits::{bit, get, le64, put, set_le64};
use crate::cqp::{self, CqWqe, CqpOp, EqWqe, StagWqe};
use crate::fault::{Counters, Event, FaultPlan};
use crate::hmc::{self, FpmConfig, Layout, Sd, SdTable};
use crate::mem::{Fault, Memory, read_u64, write_u64};
use crate::regs::{self, ae, err, qps};

/// Static configuration of a modelled function.
/// A CQE held back by the fault plan: (CQ, CQE, extension, solicited).
pub(crate) type HeldCqe = (u32, [u64; 4], Option<[u64; 4]>, bool);

#[derive(Clone, Debug)]
pub struct Config {
    /// HMC function id of the PF (`pf_id`).
    pub hmc_fn_id: u8,
    /// What QUERY_FPM_VAL reports.
    pub fpm: FpmConfig,
    /// Firmware version in QUERY_RDMA_FEATURES entry 0.
    pub fw_major: u16,
    /// Firmware minor version.
    pub fw_minor: u16,
    /// Feature entries after entry 0: (type, info [47:0]).
    pub features: Vec<(u16, u64)>,
    /// GLPCI_LBARCTRL value (PE_DB_SIZE in [5:4]).
    pub lbarctrl: u32,
    /// Value of GLPE_CPUSTATUS0/1/2.
    pub cpustatus: u32,
    /// First queue-set handle handed out by WS leaf adds.
    pub first_qs_handle: u16,
    /// PCI function number (PF_FUNC_RID [2:0]).
    pub pci_function: u8,
    /// How doorbells are seen (see [`Mode`]).
    pub mode: Mode,
    /// UPDATE_PE_SDS entries must carry PMSDPARTSEL = 1 and, when set,
    /// PMSDBPCOUNT = 512, and a direct SD must be 2 MiB aligned (spec
    /// control-path §3.6; whether hardware needs the alignment is an open
    /// question, §11 item 6, hence an option). Off by default.
    pub strict_sds: bool,
    /// The LAN firmware (admin queue) of the function; see [`crate::lan`].
    pub lan: crate::lan::LanConfig,
}

/// How the device learns about doorbells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Every doorbell write is processed before the write returns (the
    /// in-process transport sees each write exactly).
    #[default]
    Strict,
    /// The BAR behaves like plain memory: writes only latch values, and the
    /// work happens in [`Device::poll`] (a device thread, or the
    /// shared-memory host loop). Doorbells coalesce, so every poll sweeps
    /// every live queue; AEQALLOC credits cannot be counted, so AEQ flow
    /// control is off.
    Deferred,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            hmc_fn_id: 0,
            fpm: FpmConfig::default(),
            fw_major: 1,
            fw_minor: 7,
            // type 32 = FTN_FLAGS, no atomics (type.h: enum irdma_feature_type)
            features: vec![(32, 0)],
            lbarctrl: 2 << 4,
            cpustatus: 0x80,
            first_qs_handle: 8,
            pci_function: 0,
            strict_sds: false,
            mode: Mode::Strict,
            lan: crate::lan::LanConfig::default(),
        }
    }
}

/// Where a queue's memory is: contiguous, or pages listed by level-1 PBLEs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueMem {
    /// Physically contiguous at this bus address.
    Phys(u64),
    /// 4 KiB pages whose addresses are PBLEs starting at this index.
    Pbl(u32),
}

/// CQ arm state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Not armed.
    None,
    /// Event on the next completion.
    Next,
    /// Event on the next solicited (or error) completion.
    Solicited,
}

/// A CQ as the device keeps it.
#[derive(Clone, Debug)]
pub struct Cq {
    /// CQ id.
    pub id: u32,
    /// Ring memory.
    pub ring: QueueMem,
    /// Entries.
    pub size: u32,
    /// Shadow area PA.
    pub shadow: u64,
    /// CQ context ([62:0] of CREATE_CQ @8), echoed in CEQEs and AEQEs.
    pub ctx: u64,
    /// CEQ id if CEQIDVALID.
    pub ceq: Option<u32>,
    /// CHKOVERFLOW.
    pub check_overflow: bool,
    /// Next slot the device writes.
    pub prod: u32,
    /// Valid bit for the current pass (first pass 1).
    pub pol: bool,
    /// Arm state.
    pub arm: Arm,
    /// CQEs dropped because the ring was full (the first one) or because
    /// the CQ was already in error (the rest).
    pub overflows: u64,
    /// The CQ overflowed: CQ_OPERATION_ERROR was raised once and the CQ
    /// writes no further CQE until it is destroyed (spec control-path §8,
    /// AE 0x0203 → IB_EVENT_CQ_ERR; that the CQ then stays in error is the
    /// IB meaning of a CQ overrun — the spec does not say how hardware
    /// resumes, so the model never does).
    pub error: bool,
    /// ARM_SEQ_NUM of the last arm request seen.
    pub arm_seq: u8,
    /// Completed MODIFY_CQ resizes (spec control-path §4.3.3). While the
    /// shadow area's SW_CQ_SELECT [13:0] (@32) differs from this count
    /// (mod 2^14), the shadow head (@0) still belongs to an old ring (spec
    /// data-path §5.7) and the new ring counts as unconsumed.
    pub resizes: u16,
}

/// A CEQ.
#[derive(Clone, Debug)]
pub struct Ceq {
    /// Ring memory.
    pub ring: QueueMem,
    /// Entries (8 bytes each).
    pub size: u32,
    /// Next slot.
    pub prod: u32,
    /// Pass polarity.
    pub pol: bool,
}

/// The AEQ.
#[derive(Clone, Debug)]
pub struct Aeq {
    /// Ring memory.
    pub ring: QueueMem,
    /// Entries (16 bytes each).
    pub size: u32,
    /// Next slot.
    pub prod: u32,
    /// Pass polarity.
    pub pol: bool,
    /// Entries written and not yet returned through AEQALLOC.
    pub outstanding: u32,
    /// An entry was dropped because the ring was full; the next one carries OVERFLOW.
    pub overflowed: bool,
}

/// The CQP as created by the CCQPLOW write.
#[derive(Clone, Debug)]
pub struct Cqp {
    /// Host-context PA.
    pub ctx_pa: u64,
    /// SQ ring PA.
    pub sq_pa: u64,
    /// SQ entries.
    pub size: u32,
    /// Completion context (host context @24), echoed in CCQ CQEs.
    pub compl_ctx: u64,
    /// Next WQE index the device processes.
    pub tail: u32,
    /// Expected valid bit at `tail`.
    pub pol: bool,
    /// Host-context words as read at create.
    pub ctx: [u64; 8],
}

/// A memory region / window entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stag {
    /// Full 24-bit STag index (STag >> 8) the entry was created with.
    pub index: u32,
    /// Key byte; `None` until registered (ALLOC_STAG leaves it open).
    pub key: Option<u8>,
    /// PD id.
    pub pd: u32,
    /// VA (VA-based) or first-byte offset (zero-based).
    pub va: u64,
    /// Length in bytes.
    pub len: u64,
    /// VA-based (else zero-based).
    pub va_based: bool,
    /// Access rights (5-bit field, spec control-path §5.3).
    pub rights: u8,
    /// Page size in bytes.
    pub page_size: u64,
    /// Translation.
    pub pbl: Pbl,
    /// True when the STag may be used (registered and not invalidated).
    pub valid: bool,
    /// True for a memory window.
    pub is_mw: bool,
    /// The decoded CQP WQE (ALLOC_STAG or REG_MR) that created the entry,
    /// as the device received it. The spec says what Linux writes there
    /// (control-path §4.3.7, §4.3.9) but not what the device does with a
    /// field Linux leaves out (e.g. an ALLOC_STAG PBL chunk before a
    /// FAST_REGISTER): the model keeps the WQE for tests to judge against
    /// the vendor's values and does not act on those fields, except
    /// REMACCENABLED: without it remote access is refused (see
    /// `Device::translate`, a model choice).
    pub created_by: crate::cqp::StagWqe,
}

/// How an MR's pages are found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pbl {
    /// Contiguous from this PA (first page).
    Level0(u64),
    /// Level 1: page i address is PBLE[first + i].
    Level1(u32),
    /// Level 2: PBLE[root + i/512] holds a leaf PBLE index.
    Level2(u32),
}

/// A work-scheduler node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WsNode {
    /// Parent id.
    pub parent: u16,
    /// Leaf.
    pub leaf: bool,
    /// Enabled.
    pub enabled: bool,
    /// Queue-set handle (leaves).
    pub qs_handle: u16,
}

/// Result of one CQP op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Completion {
    /// OPRETVAL.
    pub ret: u32,
    /// Major error code (0 = success).
    pub major: u16,
    /// Minor code.
    pub minor: u16,
}

impl Completion {
    pub(crate) fn ok(ret: u32) -> Self {
        Self { ret, major: 0, minor: 0 }
    }
    pub(crate) fn err(major: u16, minor: u16) -> Self {
        Self { ret: 0, major, minor }
    }
    pub(crate) fn bad() -> Self {
        Self::err(err::MAJ_GENERIC, err::MODEL_MIN_BAD_FIELD)
    }
    /// Whether the op failed.
    pub fn is_err(&self) -> bool {
        self.major != 0
    }
}

pub(crate) type OpResult = Result<Completion, Completion>;

/// The modelled device. See the crate docs for the register-level contract.
pub struct Device {
    pub(crate) cfg: Config,
    pub(crate) mem: Box<dyn Memory>,
    /// Node id on a fabric (0 when standalone).
    pub(crate) node: u32,
    // register file
    ccqphigh: u32,
    ccqplow: u32,
    ccqpstatus: u32,
    cqptail_err: bool,
    cqperrcodes: u32,
    pub(crate) other_regs: BTreeMap<u32, u32>,
    pub(crate) cqp: Option<Cqp>,
    pub(crate) fpm: Option<Layout>,
    pub(crate) sds: SdTable,
    pub(crate) shmc_done: bool,
    pub(crate) cqs: BTreeMap<u32, Cq>,
    pub(crate) ceqs: BTreeMap<u32, Ceq>,
    pub(crate) aeq: Option<Aeq>,
    pub(crate) qps: BTreeMap<u32, crate::datapath::Qp>,
    /// STag table by slot.
    pub(crate) stags: BTreeMap<u32, Stag>,
    pub(crate) arp: BTreeMap<u16, u64>,
    pub(crate) ahs: BTreeMap<u32, crate::cqp::AhWqe>,
    pub(crate) ws: BTreeMap<u16, WsNode>,
    next_qs: u16,
    pub(crate) faults: FaultPlan,
    pub(crate) counters: Counters,
    pub(crate) trace: VecDeque<Event>,
    /// Packets for other nodes, taken by the fabric.
    pub(crate) outbox: VecDeque<crate::datapath::Packet>,
    /// Where this device's frames are recorded ([`Device::set_capture`]).
    pub(crate) capture: Option<crate::wire::Capture>,
    /// IPv4 identification of the next frame (wire §1.3: any value; the
    /// model counts up per device).
    pub(crate) ip_id: u16,
    /// Drop requests whose PSN is not the responder's expected PSN
    /// ([`Device::set_strict_psn`]).
    pub(crate) strict_psn: bool,
    /// CQP doorbell seen while completions are being delayed.
    delayed_cqpdb: Option<(u32, u32)>,
    /// CQEs held back by `FaultPlan::hold_cqes_of_qp`: (CQ, CQE, extension,
    /// solicited).
    pub(crate) held_cqes: Vec<HeldCqe>,
    /// SQ doorbells acted on late (`FaultPlan::late_sq_doorbells`).
    pub(crate) late_sq: Vec<u32>,
    /// Deferred mode: values last acted on (CCQPHIGH/LOW pair, CQPDB, WQEALLOC, CQARM).
    seen: (u64, Option<u32>, Option<u32>, Option<u32>),
    pending_ccqp: Option<u64>,
    /// The LAN firmware (admin queue, VSIs, scheduler, link).
    pub(crate) lan: crate::lan::Firmware,
    /// Interrupt causes, vectors, moderation ([`crate::irq`]).
    pub(crate) irq: crate::irq::IrqModel,
}

/// The fields of one AEQE (spec control-path §8.2, GEN_2 layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Aeqe {
    /// Completion context (QP context @168, or the CQ context).
    pub ctx: u64,
    /// QP or CQ id (19 bits: [17:0] + bit 18 in QPCQID_HI).
    pub id: u32,
    /// WQE index [32:18].
    pub wqe_idx: u32,
    /// OVERFLOW [33].
    pub overflow: bool,
    /// AECODE [45:34].
    pub code: u16,
    /// AESRC [53:50].
    pub src: u8,
    /// IWSTATE [56:54].
    pub state: u8,
    /// VALID [63].
    pub valid: bool,
}

impl Aeqe {
    /// The two 64-bit words the device writes.
    pub fn words(&self) -> [u64; 2] {
        let w1 = put(self.id as u64, 17, 0)
            | put(self.wqe_idx as u64, 32, 18)
            | put(self.overflow as u64, 33, 33)
            | put(self.code as u64, 45, 34)
            | put((self.id >> 18) as u64, 46, 46)
            | put(self.src as u64, 53, 50)
            | put(self.state as u64, 56, 54)
            | put(self.valid as u64, 63, 63);
        [self.ctx, w1]
    }
}

/// The four words of a CCQ CQE (spec control-path §2.6 (b)).
pub fn ccq_cqe_words(ctx: u64, r: Completion, wqe_idx: u32, valid: bool) -> [u64; 4] {
    let w3 = put(r.minor as u64, 15, 0)
        | put(r.major as u64, 31, 16)
        | put(wqe_idx as u64, 46, 32)
        | put(r.is_err() as u64, 55, 55)
        | put(1, 62, 62)
        | put(valid as u64, 63, 63);
    [0, ctx, r.ret as u64, w3]
}

/// Trace capacity (oldest events are dropped).
pub const TRACE_CAP: usize = 4096;

impl Device {
    /// A device in its reset state, using `mem` for every DMA access.
    pub fn new(cfg: Config, mem: Box<dyn Memory>) -> Self {
        // Deferred mode cannot see every PFHMC_PDINV write (writes latch),
        // so PD entries are read live there.
        let cache_pds = cfg.mode == Mode::Strict;
        let lan = crate::lan::Firmware::new(cfg.lan.clone());
        Self {
            irq: crate::irq::IrqModel::new(),
            lan,
            cfg,
            mem,
            node: 0,
            ccqphigh: 0,
            ccqplow: 0,
            ccqpstatus: 0,
            cqptail_err: false,
            cqperrcodes: 0,
            other_regs: BTreeMap::new(),
            cqp: None,
            fpm: None,
            sds: SdTable { cache_pds, ..SdTable::default() },
            shmc_done: false,
            cqs: BTreeMap::new(),
            ceqs: BTreeMap::new(),
            aeq: None,
            qps: BTreeMap::new(),
            stags: BTreeMap::new(),
            arp: BTreeMap::new(),
            ahs: BTreeMap::new(),
            ws: BTreeMap::new(),
            next_qs: 0,
            faults: FaultPlan::default(),
            counters: Counters::default(),
            trace: VecDeque::new(),
            outbox: VecDeque::new(),
            capture: None,
            ip_id: 1,
            strict_psn: true,
            delayed_cqpdb: None,
            held_cqes: Vec::new(),
            late_sq: Vec::new(),
            seen: (0, None, None, None),
            pending_ccqp: None,
        }
    }

    /// Function-level reset: every object, the CQP, the HMC programming and
    /// all register values go back to their reset state (as after a CORER
    /// the LAN driver requested). Counters, trace and the fault plan are
    /// kept, except surprise removal, which a reset does not undo; so are
    /// the capture and the PSN mode ([`Device::set_strict_psn`]).
    pub fn reset(&mut self) {
        let mem = std::mem::replace(&mut self.mem, Box::new(crate::mem::TestMemory::new()));
        let mut fresh = Device::new(self.cfg.clone(), mem);
        fresh.node = self.node;
        fresh.counters = std::mem::take(&mut self.counters);
        fresh.trace = std::mem::take(&mut self.trace);
        fresh.faults = std::mem::take(&mut self.faults);
        fresh.faults.critical_error = 0;
        // test-harness settings, not device state
        fresh.strict_psn = self.strict_psn;
        fresh.capture = self.capture.take();
        // where interrupts are delivered is wiring, not device state: a
        // reset clears the causes and vectors, not the sink
        fresh.irq.sink = self.irq.sink.take();
        fresh.irq.clearpba_drops_when_empty = self.irq.clearpba_drops_when_empty;
        *self = fresh;
        self.record(Event::Reset);
    }

    /// PF software reset (PFGEN_CTRL.PFSWR, spec ice-lan-for-rdma §1.7): as
    /// [`Device::reset`], except that the LAN firmware keeps what a PFR
    /// keeps (the DDP package and the cleared PXE mode, spec §2.5, §2.8),
    /// and PFSWR reads set for `LanConfig::reset_reads` register reads.
    pub fn pf_reset(&mut self) {
        let keep = self.lan.persistent();
        self.reset();
        self.lan = crate::lan::Firmware::with_persistent(self.cfg.lan.clone(), keep);
        self.lan.begin_reset(true);
    }

    /// A global reset (CORER-like) as the LAN side sees it: [`Device::reset`]
    /// plus GLGEN_RSTAT.DEVSTATE ≠ 0 and the GLNVM_ULD done bits clear for
    /// `LanConfig::reset_reads` register reads.
    pub fn global_reset(&mut self) {
        self.reset();
        self.lan.begin_reset(false);
    }

    /// The LAN firmware (inspection).
    pub fn lan(&self) -> &crate::lan::Firmware {
        &self.lan
    }

    /// The link partner goes away or comes back (a link event is posted to
    /// the ARQ when enabled).
    pub fn set_link(&mut self, up: bool) {
        self.lan.set_link(up, &*self.mem, &mut self.counters);
        self.after_lan();
    }

    /// Acts on what the LAN firmware asked for and records its completions.
    fn after_lan(&mut self) {
        for f in std::mem::take(&mut self.lan.faulted) {
            self.record(Event::DmaFault(f));
        }
        for (slot, opcode, retval) in std::mem::take(&mut self.lan.completed) {
            self.record(Event::AqCmd { slot, opcode, retval });
        }
        match self.lan.reset_request.take() {
            Some(true) => self.pf_reset(),
            Some(false) => self.global_reset(),
            None => {}
        }
    }

    /// The trace as text, one event per line (for failing-test output).
    pub fn trace_dump(&self) -> String {
        let mut s = String::new();
        for e in &self.trace {
            s.push_str(&format!("{e:x?}\n"));
        }
        s
    }

    /// Configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    /// Counters of what the device did.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    /// The fault-injection plan (see [`FaultPlan`]).
    pub fn faults(&mut self) -> &mut FaultPlan {
        &mut self.faults
    }
    /// The most recent events, oldest first.
    pub fn trace(&self) -> impl Iterator<Item = &Event> {
        self.trace.iter()
    }
    /// The CQP, if created.
    pub fn cqp(&self) -> Option<&Cqp> {
        self.cqp.as_ref()
    }
    /// The committed FPM layout.
    pub fn fpm_layout(&self) -> Option<&Layout> {
        self.fpm.as_ref()
    }
    /// The programmed SDs.
    pub fn sds(&self) -> &BTreeMap<u64, Sd> {
        &self.sds.sds
    }
    /// Whether SHMC_PAGES_ALLOCATED completed.
    pub fn hmc_ready(&self) -> bool {
        self.shmc_done
    }
    /// A CQ.
    pub fn cq(&self, id: u32) -> Option<&Cq> {
        self.cqs.get(&id)
    }
    /// A CEQ.
    pub fn ceq(&self, id: u32) -> Option<&Ceq> {
        self.ceqs.get(&id)
    }
    /// The AEQ.
    pub fn aeq(&self) -> Option<&Aeq> {
        self.aeq.as_ref()
    }
    /// An STag entry by its 24-bit index.
    pub fn stag(&self, index: u32) -> Option<&Stag> {
        self.stags.get(&self.stag_slot(index)).filter(|s| s.index == index)
    }
    /// Records every frame this device sends into `c` (or stops).
    pub fn set_capture(&mut self, c: Option<crate::wire::Capture>) {
        self.capture = c;
    }

    /// Strict PSN checking, on by default: a request packet whose PSN is
    /// not the responder QP's expected PSN (EPSN from the context at RTR,
    /// then advanced per packet) is dropped and counted in `wire_drops`; a
    /// later PSN (a gap) draws one PSN-sequence NAK (wire §4.7), an earlier
    /// one (a duplicate) is dropped and, for SEND/WRITE, re-ACKed with
    /// EPSN − 1 (wire §4.7).
    /// `false` is the lenient mode for tests that deliberately connect QPs
    /// with different initial PSNs on each end: the first packet of a
    /// message then sets the expected PSN, the mismatch is counted in
    /// `psn_mismatches` and the request is executed. No driver test needs
    /// it today.
    pub fn set_strict_psn(&mut self, on: bool) {
        self.strict_psn = on;
    }

    /// An ARP entry (MAC as 48 bits, byte 0 most significant).
    pub fn arp_entry(&self, idx: u16) -> Option<u64> {
        self.arp.get(&idx).copied()
    }
    /// A work-scheduler node.
    pub fn ws_node(&self, id: u16) -> Option<&WsNode> {
        self.ws.get(&id)
    }

    pub(crate) fn record(&mut self, e: Event) {
        if self.trace.len() >= TRACE_CAP {
            self.trace.pop_front();
        }
        self.trace.push_back(e);
    }

    pub(crate) fn dma_fault(&mut self, f: Fault) {
        self.counters.dma_faults += 1;
        self.record(Event::DmaFault(f));
    }

    // ------------------------------------------------------------------
    // MMIO
    // ------------------------------------------------------------------

    /// A 32-bit register read at BAR0 offset `off`.
    pub fn mmio_read32(&mut self, off: u32) -> u32 {
        self.counters.mmio_reads += 1;
        if self.faults.removed {
            return u32::MAX;
        }
        self.tick_interrupts();
        if let Some((left, v)) = self.delayed_cqpdb {
            if left <= 1 {
                self.delayed_cqpdb = None;
                self.cqp_doorbell(v);
            } else {
                self.delayed_cqpdb = Some((left - 1, v));
            }
        }
        match off {
            regs::GLPE_CPUSTATUS0 | regs::GLPE_CPUSTATUS1 | regs::GLPE_CPUSTATUS2 => {
                self.cfg.cpustatus
            }
            regs::GLPCI_LBARCTRL => self.cfg.lbarctrl,
            regs::PF_FUNC_RID => self.cfg.pci_function as u32 & 7,
            regs::GLPE_CRITERR => self.faults.critical_error,
            regs::CCQPSTATUS => self.ccqpstatus,
            regs::CCQPHIGH => self.ccqphigh,
            regs::CCQPLOW => self.ccqplow,
            regs::CQPERRCODES => self.cqperrcodes,
            regs::CQPTAIL => {
                let tail = self.cqp.as_ref().map_or(0, |c| c.tail);
                (tail & 0x7FF) | ((self.cqptail_err as u32) << 31)
            }
            _ if let Some(v) = self.lan.read(off, self.faults.aq_crit) => v,
            _ if off >= regs::BAR_SIZE || !off.is_multiple_of(4) => u32::MAX,
            _ => self.other_regs.get(&off).copied().unwrap_or(0),
        }
    }

    /// A 32-bit register write at BAR0 offset `off`. Doorbells are processed
    /// before this returns (strict, deterministic mode).
    pub fn mmio_write32(&mut self, off: u32, v: u32) {
        self.mmio_write32_with(off, v, &mut crate::datapath::NoPeers)
    }

    /// [`Device::mmio_write32`] with access to other devices on a fabric.
    pub(crate) fn mmio_write32_with(
        &mut self,
        off: u32,
        v: u32,
        peers: &mut dyn crate::datapath::Peers,
    ) {
        self.counters.mmio_writes += 1;
        if self.faults.removed {
            return;
        }
        self.record(Event::RegWrite { off, val: v });
        self.tick_interrupts();
        if self.lan.write(off, v, &*self.mem, &mut self.faults, &mut self.counters) {
            self.after_lan();
            return;
        }
        if self.cfg.mode == Mode::Deferred {
            self.deferred_write(off, v);
            return;
        }
        match off {
            regs::CCQPHIGH => self.ccqphigh = v,
            regs::CCQPLOW => {
                self.ccqplow = v;
                self.cqp_create_or_destroy();
            }
            regs::CCQPSTATUS => self.ccqpstatus = v,
            regs::CQPTAIL => {
                // driver writes 0 at init: reset the device's view
                self.cqptail_err = false;
                if let Some(c) = self.cqp.as_mut() {
                    c.tail = (v & 0x7FF) % c.size;
                }
            }
            regs::CQPDB => self.cqpdb_written(v),
            regs::PFHMC_PDINV => self.pdinv_written(off, v),
            regs::WQEALLOC => self.wqealloc_written(v, peers),
            regs::CQARM => self.cq_arm(v & 0x7_FFFF),
            regs::CQACK => self.cq_ack(v & 0x7_FFFF),
            regs::AEQALLOC => {
                if let Some(a) = self.aeq.as_mut() {
                    a.outstanding = a.outstanding.saturating_sub(v);
                }
            }
            o if o == regs::DB_ADDR_OFFSET => self.sq_doorbell(v & 0xF_FFFF, peers),
            o if o == regs::DB_ADDR_OFFSET + 64 => self.cq_arm(v & 0x7_FFFF),
            o if let Some(n) = Self::dyn_ctl_vector(o) => {
                self.other_regs.insert(off, v);
                self.dyn_ctl_written(n, v);
            }
            _ if off >= regs::BAR_SIZE || !off.is_multiple_of(4) => {}
            _ => {
                self.other_regs.insert(off, v);
            }
        }
    }

    /// [`Self::mmio_write32_with`] in deferred mode: the write is latched,
    /// acted on later.
    fn deferred_write(&mut self, off: u32, v: u32) {
        match off {
            regs::CCQPHIGH => self.ccqphigh = v,
            regs::CCQPLOW => self.ccqplow = v,
            regs::CCQPSTATUS => self.ccqpstatus = v,
            regs::CQPTAIL if v == 0 => self.cqptail_err = false,
            _ if off >= regs::BAR_SIZE || !off.is_multiple_of(4) => {}
            _ => {
                self.other_regs.insert(off, v);
            }
        }
    }

    /// [`Self::mmio_write32_with`]: the CQP doorbell (unless the fault plan
    /// loses or delays it).
    fn cqpdb_written(&mut self, v: u32) {
        if self.faults.take_lost_doorbell() {
            self.counters.lost_doorbells += 1;
            return;
        }
        if self.faults.cqp_delay_polls > 0 {
            self.delayed_cqpdb = Some((self.faults.cqp_delay_polls, v));
            return;
        }
        self.cqp_doorbell(v)
    }

    /// [`Self::mmio_write32_with`]: PFHMC_PDINV invalidates a PD entry.
    fn pdinv_written(&mut self, off: u32, v: u32) {
        // spec control-path §1 table, §3.6:
        // PMSDIDX [11:0], PMSDPARTSEL [15] (1 for a PF), PMPDIDX
        // [24:16]. Linux writes PD entries (and PDINV) before the
        // UPDATE_PE_SDS that programs the SD, so a PDINV for an SD
        // not programmed yet invalidates nothing and is fine.
        let (sd, part, pd) = (v & 0xFFF, v >> 15 & 1, v >> 16 & 0x1FF);
        if part != 1 {
            self.counters.bad_doorbells += 1;
        } else {
            self.sds.invalidate_pd(&*self.mem, sd as u64, pd as u64);
        }
        self.other_regs.insert(off, v);
    }

    /// [`Self::mmio_write32_with`]: the SQ doorbell (unless the fault plan
    /// loses it or holds it back).
    fn wqealloc_written(&mut self, v: u32, peers: &mut dyn crate::datapath::Peers) {
        if self.faults.take_lost_doorbell() {
            self.counters.lost_doorbells += 1;
            return;
        }
        if self.faults.late_sq_doorbells > 0 {
            self.faults.late_sq_doorbells -= 1;
            self.late_sq.push(v & 0xF_FFFF);
            return;
        }
        self.sq_doorbell(v & 0xF_FFFF, peers)
    }

    /// Deferred mode: acts on latched register values and sweeps every live
    /// queue for new work (the device-thread and shared-memory transports
    /// call this in a loop). Returns whether anything was done. Work found
    /// on a queue without a doorbell change is counted in
    /// `Counters::work_without_doorbell` (a diagnostic, not an error: plain
    /// memory BARs coalesce doorbells).
    pub fn poll(&mut self) -> bool {
        self.poll_with(&mut crate::datapath::NoPeers)
    }

    pub(crate) fn poll_with(&mut self, peers: &mut dyn crate::datapath::Peers) -> bool {
        if self.faults.removed {
            return false;
        }
        let before = (self.counters.cqp_ops, self.counters.sq_wqes, self.counters.rq_wqes);
        let pair = ((self.ccqphigh as u64) << 32) | self.ccqplow as u64;
        // CCQPLOW is written last (ctrl.c: irdma_sc_cqp_create): act when it
        // changed, or when only CCQPHIGH changed and stayed for a whole poll
        if pair != self.seen.0 {
            if pair as u32 != self.seen.0 as u32 || self.pending_ccqp == Some(pair) {
                self.seen.0 = pair;
                self.pending_ccqp = None;
                self.cqp_create_or_destroy();
            } else {
                self.pending_ccqp = Some(pair);
            }
        }
        let reg = |d: &Self, off| d.other_regs.get(&off).copied();
        let db = reg(self, regs::CQPDB);
        if db.is_some() && db != self.seen.1 {
            if self.faults.take_lost_doorbell() {
                self.counters.lost_doorbells += 1;
            } else {
                self.seen.1 = db;
                self.cqp_doorbell(db.unwrap_or(0));
            }
        }
        let wa = reg(self, regs::WQEALLOC);
        let rang = wa.is_some() && wa != self.seen.2;
        self.seen.2 = wa;
        let arm = reg(self, regs::CQARM);
        self.seen.3 = arm;
        // Arm requests: ARM_SEQ_NUM in the shadow word changed. Taken before
        // the queues are swept: an arm the driver made before this poll
        // precedes every CQE the sweep writes, so those CQEs raise CEQEs
        // (spec interrupts.md A.4). Looked at after the sweep, an arm and a
        // WQE that arrived in the same round would leave the CQE unannounced
        // and a driver halted on it asleep for good.
        let cqs: Vec<(u32, u64, u8)> =
            self.cqs.values().map(|c| (c.id, c.shadow, c.arm_seq)).collect();
        for (id, shadow, seq) in cqs {
            if let Ok(w) = read_u64(&*self.mem, shadow.wrapping_add(32))
                && get(w, 17, 16) as u8 != seq
            {
                self.cq_arm(id);
            }
        }
        self.step_with(peers);
        self.tick_interrupts();
        let ids: Vec<u32> = self.qps.keys().copied().collect();
        for id in ids {
            let n = self.counters.sq_wqes;
            self.process_sq(id, peers);
            if self.counters.sq_wqes != n && !rang {
                self.counters.work_without_doorbell += 1;
            }
        }
        before != (self.counters.cqp_ops, self.counters.sq_wqes, self.counters.rq_wqes)
    }

    /// The registers a plain-memory BAR must show the driver (offset,
    /// value): the shared-memory host writes these into the BAR after each
    /// poll.
    pub fn status_registers(&self) -> [(u32, u32); 9] {
        let tail = self.cqp.as_ref().map_or(0, |c| c.tail);
        let removed = |v: u32| if self.faults.removed { u32::MAX } else { v };
        [
            (regs::GLPE_CPUSTATUS0, removed(self.cfg.cpustatus)),
            (regs::GLPE_CPUSTATUS1, removed(self.cfg.cpustatus)),
            (regs::GLPE_CPUSTATUS2, removed(self.cfg.cpustatus)),
            (regs::GLPCI_LBARCTRL, removed(self.cfg.lbarctrl)),
            (regs::PF_FUNC_RID, removed(self.cfg.pci_function as u32 & 7)),
            (regs::CCQPSTATUS, removed(self.ccqpstatus)),
            (regs::CQPTAIL, removed((tail & 0x7FF) | ((self.cqptail_err as u32) << 31))),
            (regs::CQPERRCODES, removed(self.cqperrcodes)),
            (regs::GLPE_CRITERR, removed(self.faults.critical_error)),
        ]
    }

    fn cqp_create_or_destroy(&mut self) {
        let pa = ((self.ccqphigh as u64) << 32) | self.ccqplow as u64;
        if pa == 0 {
            // destroy (ctrl.c: irdma_sc_cqp_destroy): CCQP_DONE clears
            self.cqp = None;
            self.ccqpstatus = 0;
            return;
        }
        let mut b = [0u8; 64];
        if let Err(f) = self.mem.read(pa, &mut b) {
            self.dma_fault(f);
            self.fail_create(err::MAJ_CNTXTCACHE, err::MODEL_MIN_DMA_FAULT);
            return;
        }
        let ctx: [u64; 8] = std::array::from_fn(|i| le64(&b, i * 8));
        // spec control-path §2.3: SQSIZE [11:8] = log2(size) − 1; sizes 4..2048
        let enc = get(ctx[0], 11, 8) as u32;
        let sq_pa = ctx[1];
        let hw_majver = get(ctx[4], 31, 16);
        if !(1..=10).contains(&enc) || sq_pa == 0 || !sq_pa.is_multiple_of(512) || hw_majver != 1 {
            self.fail_create(err::MAJ_GENERIC, err::MODEL_MIN_BAD_FIELD);
            return;
        }
        self.cqp = Some(Cqp {
            ctx_pa: pa,
            sq_pa,
            size: 1 << (enc + 1),
            compl_ctx: ctx[3],
            tail: 0,
            pol: true,
            ctx,
        });
        self.cqptail_err = false;
        self.ccqpstatus = 1;
        self.record(Event::CqpCreated { ctx_pa: pa });
    }

    fn fail_create(&mut self, major: u16, minor: u16) {
        self.ccqpstatus = 1 << 31;
        self.cqperrcodes = ((major as u32) << 16) | minor as u32;
    }

    // ------------------------------------------------------------------
    // CQP engine
    // ------------------------------------------------------------------

    fn cqp_doorbell(&mut self, v: u32) {
        self.counters.cqp_doorbells += 1;
        match self.faults.hang_cqp_at {
            Some(0) => {
                self.faults.hang_cqp_at = None;
                self.faults.cqp_hang = true;
            }
            Some(n) => self.faults.hang_cqp_at = Some(n - 1),
            None => {}
        }
        if self.faults.cqp_hang {
            return;
        }
        let Some(size) = self.cqp.as_ref().map(|c| c.size) else { return };
        let head = v % size;
        let mut budget = size;
        while let Some(c) = self.cqp.as_ref() {
            if c.tail == head || budget == 0 {
                break;
            }
            budget -= 1;
            let idx = c.tail;
            let pa = c.sq_pa.wrapping_add(idx as u64 * 64);
            let mut b = [0u8; 64];
            if let Err(f) = self.mem.read(pa, &mut b) {
                self.dma_fault(f);
                self.cqptail_err = true;
                self.cqperrcodes =
                    ((err::MAJ_GENERIC as u32) << 16) | err::MODEL_MIN_DMA_FAULT as u32;
                return;
            }
            let w: [u64; 8] = std::array::from_fn(|i| le64(&b, i * 8));
            if bit(w[3], 63) != c.pol {
                // not (yet) a valid WQE: the doorbell ran ahead of the ring
                self.counters.cqp_invalid_wqes += 1;
                self.record(Event::CqpNotValid { idx });
                return;
            }
            let opcode = get(w[3], 37, 32) as u8;
            let nth = self.counters.cqp_ops;
            self.counters.cqp_ops += 1;
            let r = match self.faults.cqp_error_for(nth) {
                Some((major, minor)) => Completion::err(major, minor),
                None => match self.exec_cqp(&w) {
                    Ok(c) | Err(c) => c,
                },
            };
            if let Some(c) = self.cqp.as_mut() {
                c.tail = (c.tail + 1) % c.size;
                if c.tail == 0 {
                    c.pol = !c.pol;
                }
            }
            self.complete_cqp(idx, opcode, r);
        }
    }

    fn complete_cqp(&mut self, idx: u32, opcode: u8, r: Completion) {
        self.record(Event::CqpOp { idx, opcode, ret: r.ret, major: r.major, minor: r.minor });
        self.cqptail_err = r.is_err();
        if r.is_err() {
            self.counters.cqp_errors += 1;
            self.cqperrcodes = ((r.major as u32) << 16) | r.minor as u32;
        }
        if self.faults.take_dropped_cqp_completion() {
            return;
        }
        let ctx = self.cqp.as_ref().map_or(0, |c| c.compl_ctx);
        if self.cqs.contains_key(&0) {
            // spec control-path §2.6 (b): CCQ CQE (valid bit set by post_cqe)
            self.post_cqe(0, ccq_cqe_words(ctx, r, idx, false), false);
        }
    }

    fn exec_cqp(&mut self, w: &[u64; 8]) -> OpResult {
        match cqp::decode(w) {
            CqpOp::Nop => Ok(Completion::ok(0)),
            CqpOp::QueryFeatures { buf, len } => self.op_query_features(buf, len),
            CqpOp::QueryFpm { fn_id, buf } => self.op_query_fpm(fn_id, buf),
            CqpOp::CommitFpm { fn_id, buf, buf_size, .. } => {
                self.op_commit_fpm(fn_id, buf, buf_size)
            }
            CqpOp::UpdateSds { fn_id, entries, overflow_pa, overflow_cnt } => {
                self.op_update_sds(fn_id, entries, overflow_pa, overflow_cnt)
            }
            CqpOp::Shmc { fn_id } => self.op_shmc(fn_id),
            CqpOp::CreateCq(c) => self.op_create_cq(&c),
            CqpOp::DestroyCq(c) => self.op_destroy_cq(&c),
            CqpOp::CreateCeq(e) => self.op_create_ceq(&e),
            CqpOp::DestroyCeq(e) => self.op_destroy_ceq(&e),
            CqpOp::CreateAeq(e) => self.op_create_aeq(&e),
            CqpOp::DestroyAeq(_) => self.op_destroy_aeq(),
            CqpOp::ManageArp { idx, valid, mac, .. } => self.op_manage_arp(idx, valid, mac),
            CqpOp::WsNode { id, parent, node_op, leaf, enable, .. } => {
                self.op_ws_node(id, parent, node_op, leaf, enable)
            }
            CqpOp::AllocStag(st) => self.op_alloc_stag(&st),
            CqpOp::RegMr(st) => self.op_reg_mr(&st),
            CqpOp::DeallocStag(st) => self.op_dealloc_stag(&st),
            CqpOp::CreateQp(q) => self.op_create_qp(&q),
            CqpOp::ModifyQp(q) => self.op_modify_qp(&q),
            CqpOp::DestroyQp(q) => self.op_destroy_qp(&q),
            CqpOp::FlushWqes(f) => self.op_flush_wqes(&f),
            CqpOp::ModifyCq(c) => self.op_modify_cq(&c),
            CqpOp::CreateAh(a) => self.op_create_ah(&a),
            CqpOp::ModifyAh(a) => self.op_modify_ah(&a),
            CqpOp::DestroyAh(a) => self.op_destroy_ah(&a),
            CqpOp::Other(_) => {
                Err(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_UNSUPPORTED_OP))
            }
        }
    }

    fn dma_write(&mut self, pa: u64, data: &[u8]) -> Result<(), Completion> {
        self.mem.write(pa, data).map_err(|f| {
            self.dma_fault(f);
            Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_DMA_FAULT)
        })
    }

    pub(crate) fn dma_read(&mut self, pa: u64, buf: &mut [u8]) -> Result<(), Completion> {
        self.mem.read(pa, buf).map_err(|f| {
            self.dma_fault(f);
            Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_DMA_FAULT)
        })
    }

    fn check_fn(&self, fnid: u64) -> Result<(), Completion> {
        if fnid != self.cfg.hmc_fn_id as u64 { Err(Completion::bad()) } else { Ok(()) }
    }

    pub(crate) fn layout(&self) -> Result<&Layout, Completion> {
        self.fpm
            .as_ref()
            .filter(|_| self.shmc_done)
            .ok_or(Completion::err(err::MAJ_GENERIC, err::MIN_INVALID_STATE))
    }

    /// Object `t` element `i` exists in the committed layout and its context
    /// memory is backed by programmed SDs/PDs.
    pub(crate) fn check_obj(&self, t: usize, i: u64) -> Result<(), Completion> {
        let l = self.layout()?;
        let a = l.addr(t, i).ok_or(Completion::bad())?;
        if !self.sds.backed(&*self.mem, a, l.size[t]) {
            return Err(Completion::err(err::MAJ_OBJCACHE, err::MODEL_MIN_NO_BACKING));
        }
        Ok(())
    }

    // spec control-path §4.3.23
    fn op_query_features(&mut self, pa: u64, len: u32) -> OpResult {
        let len = len as usize;
        if len < 8 {
            return Err(Completion::bad());
        }
        let cnt = 1 + self.cfg.features.len();
        let mut b = Vec::with_capacity(cnt * 8);
        b.extend_from_slice(
            &(put(cnt as u64, 47, 32)
                | put(self.cfg.fw_major as u64, 31, 16)
                | self.cfg.fw_minor as u64)
                .to_le_bytes(),
        );
        for &(t, info) in &self.cfg.features {
            b.extend_from_slice(&(put(t as u64, 63, 48) | put(info, 47, 0)).to_le_bytes());
        }
        b.truncate(len / 8 * 8);
        self.dma_write(pa, &b)?;
        Ok(Completion::ok(0))
    }

    // spec control-path §4.3.11, §3.3
    fn op_query_fpm(&mut self, fn_id: u16, buf: u64) -> OpResult {
        self.check_fn(fn_id as u64)?;
        let b = self.cfg.fpm.query_buf();
        self.dma_write(buf, &b)?;
        Ok(Completion::ok(0))
    }

    // spec control-path §4.3.12, §3.4
    fn op_commit_fpm(&mut self, fn_id: u16, buf: u64, buf_size: u32) -> OpResult {
        self.check_fn(fn_id as u64)?;
        if buf_size < 192 {
            return Err(Completion::bad());
        }
        if self.shmc_done || !self.qps.is_empty() {
            return Err(Completion::err(err::MAJ_GENERIC, err::MIN_INVALID_STATE));
        }
        let mut b = [0u8; 192];
        self.dma_read(buf, &mut b)?;
        let mut cnt = [0u64; hmc::OBJ_TYPES];
        for (t, c) in cnt.iter_mut().enumerate() {
            *c = if t == hmc::APBVT { 1 } else { le64(&b, hmc::COMMIT_OFF[t]) };
        }
        let l = hmc::commit(&self.cfg.fpm, cnt).map_err(|_| Completion::bad())?;
        let words = hmc::commit_buf(&l);
        for (t, v) in words.iter().enumerate() {
            set_le64(&mut b, hmc::COMMIT_OFF[t], *v);
        }
        set_le64(&mut b, 120, 0);
        self.dma_write(buf, &b[..176])?;
        self.fpm = Some(l);
        Ok(Completion::ok(0))
    }

    // spec control-path §3.6, §3.7
    fn op_update_sds(
        &mut self,
        fn_id: u8,
        wqe_entries: Vec<(u32, u64)>,
        buf_pa: u64,
        extra: u8,
    ) -> OpResult {
        self.check_fn(fn_id as u64)?;
        let mut entries: Vec<(u64, u64)> =
            wqe_entries.into_iter().map(|(c, d)| (c as u64, d)).collect();
        let extra = extra as usize;
        if extra > 0 {
            let mut b = vec![0u8; extra * 16];
            self.dma_read(buf_pa, &mut b)?;
            for i in 0..extra {
                entries.push((get(le64(&b, i * 16), 31, 0), le64(&b, i * 16 + 8)));
            }
        }
        let limit = self.cfg.fpm.first_pe_sd as u64 + self.cfg.fpm.max_pe_sds as u64;
        // validate all first: the op is all-or-nothing
        for &(cmd, data) in &entries {
            if !bit(cmd, 31) || get(cmd, 12, 0) >= limit {
                return Err(Completion::bad());
            }
            // spec control-path §3.6: PMSDPARTSEL [15] = 1, PMSDBPCOUNT
            // [11:2] = 512 on set, direct SD = a 2 MiB buffer
            if self.cfg.strict_sds
                && (!bit(cmd, 15)
                    || bit(data, 0)
                        && (get(data, 11, 2) != 512
                            || bit(data, 1) && !(data & !0xFFF).is_multiple_of(hmc::SD_SIZE)))
            {
                return Err(Completion::bad());
            }
        }
        for (cmd, data) in entries {
            let sd = get(cmd, 12, 0);
            let e = bit(data, 0).then(|| {
                let pa = data & !0xFFF;
                if bit(data, 1) { Sd::Direct(pa) } else { Sd::Paged(pa) }
            });
            self.sds.program(&*self.mem, sd, e);
        }
        Ok(Completion::ok(0))
    }

    // spec control-path §3.8, §3.9: every SD touched by a non-PBLE object
    // with a non-zero count must be programmed by now (model check).
    fn op_shmc(&mut self, fn_id: u16) -> OpResult {
        self.check_fn(fn_id as u64)?;
        let l =
            self.fpm.as_ref().ok_or(Completion::err(err::MAJ_GENERIC, err::MIN_INVALID_STATE))?;
        for t in 0..hmc::OBJ_TYPES {
            if t == hmc::PBLE || l.cnt[t] == 0 {
                continue;
            }
            let first = l.base[t] / hmc::SD_SIZE;
            let last = (l.base[t] + l.cnt[t] * l.size[t] - 1) / hmc::SD_SIZE;
            for sd in first..=last {
                if !self.sds.sds.contains_key(&sd) {
                    return Err(Completion::err(err::MAJ_OBJCACHE, err::MODEL_MIN_NO_BACKING));
                }
            }
        }
        self.shmc_done = true;
        Ok(Completion::ok(0))
    }

    pub(crate) fn queue_mem(
        &self,
        virt: bool,
        lpbl: u64,
        pa: u64,
        first: u64,
    ) -> Result<QueueMem, Completion> {
        if virt {
            let l = self.layout()?;
            if lpbl != 1 || first >= l.cnt[hmc::PBLE] {
                return Err(Completion::bad());
            }
            Ok(QueueMem::Pbl(first as u32))
        } else if pa == 0 {
            Err(Completion::bad())
        } else {
            Ok(QueueMem::Phys(pa))
        }
    }

    // spec control-path §4.3.1
    fn op_create_cq(&mut self, c: &CqWqe) -> OpResult {
        let (size, id, ceq_valid, ceq) = (c.size, c.id, c.ceq_id_valid, c.ceq_id);
        self.check_obj(hmc::CQ, id as u64)?;
        if self.cqs.contains_key(&id) {
            return Err(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_IN_USE));
        }
        if size < 2 || c.shadow_pa == 0 || (ceq_valid && ceq >= self.cfg.fpm.max_ceqs) {
            return Err(Completion::bad());
        }
        let ring =
            self.queue_mem(c.virtual_map, c.lpbl_size as u64, c.ring_pa, c.first_pble as u64)?;
        self.cqs.insert(
            id,
            Cq {
                id,
                ring,
                size,
                shadow: c.shadow_pa,
                ctx: c.ctx,
                ceq: ceq_valid.then_some(ceq),
                check_overflow: c.check_overflow,
                prod: 0,
                pol: true,
                arm: Arm::None,
                overflows: 0,
                error: false,
                arm_seq: 0,
                resizes: 0,
            },
        );
        Ok(Completion::ok(0))
    }

    // spec control-path §4.3.3: MODIFY_CQ. With CQRESIZE the device moves to
    // the new ring at slot 0 with valid bit 1 (spec data-path §3.1, a fresh
    // ring) and takes CHKOVERFLOW and the read threshold from the WQE.
    fn op_modify_cq(&mut self, c: &CqWqe) -> OpResult {
        let id = c.id;
        if !self.cqs.contains_key(&id) {
            return Err(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_NO_OBJECT));
        }
        if !c.resize {
            if let Some(q) = self.cqs.get_mut(&id) {
                q.check_overflow = c.check_overflow;
            }
            return Ok(Completion::ok(0));
        }
        if c.size < 2 {
            return Err(Completion::bad());
        }
        let ring =
            self.queue_mem(c.virtual_map, c.lpbl_size as u64, c.ring_pa, c.first_pble as u64)?;
        if let Some(q) = self.cqs.get_mut(&id) {
            q.ring = ring;
            q.size = c.size;
            q.prod = 0;
            q.pol = true;
            q.check_overflow = c.check_overflow;
            q.resizes = q.resizes.wrapping_add(1) & 0x3fff;
        }
        Ok(Completion::ok(0))
    }

    // spec control-path §4.3.2
    fn op_destroy_cq(&mut self, c: &CqWqe) -> OpResult {
        let id = c.id;
        if !self.cqs.contains_key(&id) {
            return Err(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_NO_OBJECT));
        }
        if self.qps.values().any(|q| q.tx_cq == id || q.rx_cq == id) {
            return Err(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_IN_USE));
        }
        self.cqs.remove(&id);
        Ok(Completion::ok(0))
    }

    // spec control-path §4.3.14
    fn op_create_ceq(&mut self, e: &EqWqe) -> OpResult {
        let (id, size) = (e.id, e.size);
        if id >= self.cfg.fpm.max_ceqs || size == 0 {
            return Err(Completion::bad());
        }
        if self.ceqs.contains_key(&id) {
            return Err(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_IN_USE));
        }
        let ring =
            self.queue_mem(e.virtual_map, e.lpbl_size as u64, e.ring_pa, e.first_pble as u64)?;
        self.ceqs.insert(id, Ceq { ring, size, prod: 0, pol: true });
        Ok(Completion::ok(0))
    }

    fn op_destroy_ceq(&mut self, e: &EqWqe) -> OpResult {
        self.ceqs
            .remove(&e.id)
            .ok_or(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_NO_OBJECT))?;
        self.irq.unacked.remove(&e.id);
        Ok(Completion::ok(0))
    }

    // spec control-path §4.3.16
    fn op_create_aeq(&mut self, e: &EqWqe) -> OpResult {
        let size = e.size;
        if size == 0 {
            return Err(Completion::bad());
        }
        if self.aeq.is_some() {
            return Err(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_IN_USE));
        }
        let ring =
            self.queue_mem(e.virtual_map, e.lpbl_size as u64, e.ring_pa, e.first_pble as u64)?;
        self.aeq = Some(Aeq { ring, size, prod: 0, pol: true, outstanding: 0, overflowed: false });
        Ok(Completion::ok(0))
    }

    fn op_destroy_aeq(&mut self) -> OpResult {
        self.aeq.take().ok_or(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_NO_OBJECT))?;
        Ok(Completion::ok(0))
    }

    // spec control-path §4.3.18
    /// CREATE_ADDR_HANDLE (uda.c: irdma_sc_access_ah): the index must be
    /// below the committed FSIAV count and free. Model choices (the spec
    /// is silent): an AH whose ARP index has no entry is accepted (the
    /// entry is needed only when a datagram is sent), and the AH's fields
    /// are taken as the WQE gives them.
    pub fn ah(&self, idx: u32) -> Option<&crate::cqp::AhWqe> {
        self.ahs.get(&idx)
    }

    fn op_create_ah(&mut self, a: &crate::cqp::AhWqe) -> OpResult {
        self.check_obj(hmc::FSIAV, a.idx as u64)?;
        if self.ahs.contains_key(&a.idx) {
            return Err(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_IN_USE));
        }
        self.ahs.insert(a.idx, *a);
        Ok(Completion::ok(0))
    }

    /// MODIFY_ADDR_HANDLE: an existing AH takes the new fields.
    fn op_modify_ah(&mut self, a: &crate::cqp::AhWqe) -> OpResult {
        let slot = self
            .ahs
            .get_mut(&a.idx)
            .ok_or(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_NO_OBJECT))?;
        *slot = *a;
        Ok(Completion::ok(0))
    }

    /// DESTROY_ADDR_HANDLE: the AH must exist (Linux sends its full info;
    /// the model checks only the index).
    fn op_destroy_ah(&mut self, a: &crate::cqp::AhWqe) -> OpResult {
        self.ahs
            .remove(&a.idx)
            .map(|_| Completion::ok(0))
            .ok_or(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_NO_OBJECT))
    }

    fn op_manage_arp(&mut self, idx: u16, valid: bool, mac: u64) -> OpResult {
        let l =
            self.fpm.as_ref().ok_or(Completion::err(err::MAJ_GENERIC, err::MIN_INVALID_STATE))?;
        if idx as u64 >= l.cnt[hmc::ARP] {
            return Err(Completion::bad());
        }
        if valid {
            self.arp.insert(idx, mac);
        } else {
            self.arp.remove(&idx);
        }
        Ok(Completion::ok(0))
    }

    // spec control-path §4.3.20
    fn op_ws_node(
        &mut self,
        id: u16,
        parent: u16,
        node_op: u8,
        leaf: bool,
        enable: bool,
    ) -> OpResult {
        match node_op {
            0 => {
                if self.ws.contains_key(&id) {
                    return Err(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_IN_USE));
                }
                let root = id == parent && self.ws.is_empty();
                if !root && self.ws.get(&parent).is_none_or(|p| p.leaf) {
                    return Err(Completion::bad());
                }
                let qs_handle = if leaf {
                    let h = self.cfg.first_qs_handle.wrapping_add(self.next_qs) & 0x3FF;
                    self.next_qs = self.next_qs.wrapping_add(1);
                    h
                } else {
                    0
                };
                self.ws.insert(id, WsNode { parent, leaf, enabled: enable, qs_handle });
                Ok(Completion::ok(qs_handle as u32))
            }
            1 => {
                let n = self
                    .ws
                    .get_mut(&id)
                    .ok_or(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_NO_OBJECT))?;
                n.enabled = enable;
                Ok(Completion::ok(n.qs_handle as u32))
            }
            2 => {
                if !self.ws.contains_key(&id) {
                    return Err(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_NO_OBJECT));
                }
                if self.ws.iter().any(|(&k, n)| k != id && n.parent == id) {
                    return Err(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_IN_USE));
                }
                self.ws.remove(&id);
                Ok(Completion::ok(0))
            }
            _ => Err(Completion::bad()),
        }
    }

    /// MR-table slot of a 24-bit STag index: the low `max(ceil_log2(MR
    /// count), 14)` bits (spec control-path §5.1; the device's own reduction
    /// is not documented — §11.3 — this mirrors how Linux builds the index).
    pub(crate) fn stag_slot(&self, index: u32) -> u32 {
        let cnt = self.fpm.as_ref().map_or(1, |l| l.cnt[hmc::MR].max(1));
        let bits = (64 - (cnt - 1).leading_zeros()).max(14);
        index & ((1u32 << bits.min(24)) - 1)
    }

    fn new_stag_slot(&self, index: u32) -> Result<u32, Completion> {
        let slot = self.stag_slot(index);
        self.check_obj(hmc::MR, slot as u64)?;
        if self.stags.contains_key(&slot) {
            return Err(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_IN_USE));
        }
        Ok(slot)
    }

    fn page_size(code: u64) -> Result<u64, Completion> {
        match code {
            0 => Ok(4096),
            1 => Ok(2 << 20),
            2 => Ok(1 << 30),
            _ => Err(Completion::bad()),
        }
    }

    // spec control-path §4.3.7 / §4.3.8
    fn op_alloc_stag(&mut self, w: &StagWqe) -> OpResult {
        let index = w.index;
        let slot = self.new_stag_slot(index)?;
        let is_mr = w.mr;
        let level = w.lpbl_size;
        let first = w.first_pble;
        let pbl = match level {
            0 | 1 => Pbl::Level1(first),
            3 => Pbl::Level2(first),
            _ => return Err(Completion::bad()),
        };
        let stag = Stag {
            index,
            key: None,
            pd: w.pd,
            va: 0,
            len: w.len,
            va_based: true,
            rights: w.rights,
            page_size: Self::page_size(w.page_size as u64)?,
            pbl,
            valid: false,
            is_mw: !is_mr,
            created_by: *w,
        };
        self.stags.insert(slot, stag);
        Ok(Completion::ok(0))
    }

    // spec control-path §4.3.9
    fn op_reg_mr(&mut self, w: &StagWqe) -> OpResult {
        let index = w.index;
        let slot = self.new_stag_slot(index)?;
        let len = w.len;
        if len > 1 << 45 {
            return Err(Completion::bad());
        }
        let first = w.first_pble;
        let pble_cnt = self.layout()?.cnt[hmc::PBLE];
        let pbl = match w.lpbl_size {
            0 => Pbl::Level0(w.pa),
            1 => Pbl::Level1(first),
            3 => Pbl::Level2(first),
            _ => return Err(Completion::bad()),
        };
        if !matches!(pbl, Pbl::Level0(_)) && first as u64 >= pble_cnt {
            return Err(Completion::bad());
        }
        let stag = Stag {
            index,
            key: Some(w.key),
            pd: w.pd,
            va: w.va,
            len,
            va_based: w.va_based,
            rights: w.rights,
            page_size: Self::page_size(w.page_size as u64)?,
            pbl,
            valid: true,
            is_mw: false,
            created_by: *w,
        };
        self.stags.insert(slot, stag);
        Ok(Completion::ok(0))
    }

    // spec control-path §4.3.10
    fn op_dealloc_stag(&mut self, w: &StagWqe) -> OpResult {
        let (index, pd) = (w.index, w.pd);
        let slot = self.stag_slot(index);
        match self.stags.get(&slot) {
            Some(s) if s.index == index && s.pd == pd => {
                self.stags.remove(&slot);
                Ok(Completion::ok(0))
            }
            _ => Err(Completion::err(err::MAJ_GENERIC, err::MIN_STAG_INVALID)),
        }
    }

    // ------------------------------------------------------------------
    // CQ / CEQ / AEQ delivery
    // ------------------------------------------------------------------

    /// Bus address of byte `off` of a queue.
    pub(crate) fn queue_addr(&self, q: QueueMem, off: u64) -> Option<u64> {
        match q {
            QueueMem::Phys(pa) => pa.checked_add(off),
            QueueMem::Pbl(first) => {
                let page = self.read_pble(first as u64 + off / 4096)?;
                Some((page & !0xFFF).wrapping_add(off % 4096))
            }
        }
    }

    /// The bus address the device would use for FPM address `fpm` now
    /// (through its SD table and, for paged SDs, its PD cache).
    pub fn hmc_translate(&self, fpm: u64) -> Option<u64> {
        self.sds.translate(&*self.mem, fpm).ok()
    }

    /// Raises an AE as the device would (catastrophic events, events for a
    /// QP that no longer exists): code, AESRC and the QP/CQ id; the context
    /// word is the object's completion context, 0 if it does not exist.
    pub fn inject_ae(&mut self, code: u16, src: u8, id: u32) {
        let ctx = if src == ae::SRC_CQ {
            self.cqs.get(&id).map_or(0, |c| c.ctx)
        } else {
            self.qps.get(&id).map_or(0, |q| q.compl_ctx)
        };
        self.post_aeqe(code, src, id, ctx, 0);
    }

    /// Writes an AEQE of arbitrary content (fuzzing the driver's AEQ
    /// consumer): `w0` and `w1` as given, except bit 63 of `w1` (VALID,
    /// spec control-path §8.2), which is the ring's current polarity so the
    /// entry is consumed. Refused (counted as dropped) like any AEQE when
    /// there is no AEQ or it is full. Returns whether it was written.
    pub fn inject_raw_aeqe(&mut self, w0: u64, w1: u64) -> bool {
        let Some(q) = self.aeq.clone() else {
            self.counters.aeqes_dropped += 1;
            return false;
        };
        if q.outstanding >= q.size {
            self.counters.aeqes_dropped += 1;
            return false;
        }
        let w1 = (w1 & !(1 << 63)) | (u64::from(q.pol) << 63);
        let Some(pa) = self.queue_addr(q.ring, q.prod as u64 * 16) else {
            self.counters.aeqes_dropped += 1;
            return false;
        };
        if let Err(f) = write_u64(&*self.mem, pa, w0)
            .and_then(|_| write_u64(&*self.mem, pa.wrapping_add(8), w1))
        {
            self.dma_fault(f);
            return false;
        }
        self.counters.aeqes += 1;
        if let Some(a) = self.aeq.as_mut() {
            a.outstanding = a.outstanding.saturating_add(1);
            a.prod = (a.prod + 1) % a.size;
            if a.prod == 0 {
                a.pol = !a.pol;
            }
        }
        self.aeq_event();
        true
    }

    /// PBLE `i` through the HMC (spec control-path §6.1).
    pub(crate) fn read_pble(&self, i: u64) -> Option<u64> {
        let l = self.fpm.as_ref()?;
        let fpm = l.addr(hmc::PBLE, i)?;
        let pa = self.sds.translate(&*self.mem, fpm).ok()?;
        read_u64(&*self.mem, pa).ok()
    }

    /// Writes a CQE (valid bit set here, header word last) and raises a CEQE
    /// if the CQ is armed. Returns false if the CQE could not be written.
    pub(crate) fn post_cqe(&mut self, cq_id: u32, w: [u64; 4], solicited: bool) -> bool {
        self.post_cqe_with(cq_id, w, None, solicited)
    }

    /// Writes a CQE and, with `ext`, its extension in the next slot (spec
    /// data-path §5.1: an extended CQE continues in the next 32-byte slot).
    /// Room for every slot is checked before anything is written: a CQE
    /// that does not fit whole is not written at all, raises
    /// CQ_OPERATION_ERROR and puts the CQ in error (no further CQEs).
    pub(crate) fn post_cqe_with(
        &mut self,
        cq_id: u32,
        w: [u64; 4],
        ext: Option<[u64; 4]>,
        solicited: bool,
    ) -> bool {
        // CQ 0 is the CCQ: its CQEs are never held
        let qp = get(w[2], 55, 32) as u32;
        if let Some((hq, n)) = self.faults.hold_cqes_of_qp
            && cq_id != 0
            && hq == qp
            && n > 0
        {
            self.faults.hold_cqes_of_qp = (n > 1).then_some((hq, n - 1));
            self.held_cqes.push((cq_id, w, ext, solicited));
            return true;
        }
        let ok = self.write_cqe(cq_id, w, ext, solicited);
        if cq_id != 0
            && self.held_cqes.iter().any(|h| h.0 == cq_id && get(h.1[2], 55, 32) as u32 != qp)
        {
            self.release_held_cqes(Some(cq_id));
        }
        ok
    }

    /// Writes the CQEs held back (of CQ `cq`, or all), oldest first.
    pub(crate) fn release_held_cqes(&mut self, cq: Option<u32>) {
        let held = std::mem::take(&mut self.held_cqes);
        let (now, keep): (Vec<_>, Vec<_>) =
            held.into_iter().partition(|h| cq.is_none_or(|c| c == h.0));
        self.held_cqes = keep;
        for (c, w, e, sol) in now {
            self.write_cqe(c, w, e, sol);
        }
    }

    /// A CQE write that failed: nothing written, AE LCE_CQ_CATASTROPHIC
    /// (0x0702, spec control-path §8: CQ event IB_EVENT_CQ_ERR).
    fn cqe_write_failed(&mut self, cq_id: u32, ctx: u64) {
        self.counters.cqes_dropped += 1;
        self.post_aeqe(ae::LCE_CQ_CATASTROPHIC, ae::SRC_CQ, cq_id, ctx, 0);
    }

    fn write_cqe(
        &mut self,
        cq_id: u32,
        mut w: [u64; 4],
        ext: Option<[u64; 4]>,
        solicited: bool,
    ) -> bool {
        let Some(cq) = self.cqs.get(&cq_id).cloned() else {
            self.counters.cqes_dropped += 1;
            return false;
        };
        if cq.error {
            if let Some(c) = self.cqs.get_mut(&cq_id) {
                c.overflows += 1;
            }
            self.counters.cqes_dropped += 1;
            return false;
        }
        let slots = if ext.is_some() { 2 } else { 1 };
        if cq.check_overflow {
            // spec data-path §4.3: the device reads the consumer index from
            // shadow @0 (CQEIDX [19:0]); one slot always stays empty so a
            // full ring is distinguishable from an empty one.
            let sel = read_u64(&*self.mem, cq.shadow.wrapping_add(32))
                .map(|v| get(v, 13, 0) as u16)
                .unwrap_or(0);
            let cons = if sel == cq.resizes {
                read_u64(&*self.mem, cq.shadow).map(|v| get(v, 19, 0) as u32).unwrap_or(0) % cq.size
            } else {
                0
            };
            let used = (cq.prod + cq.size - cons) % cq.size;
            if used + slots > cq.size - 1 {
                if let Some(c) = self.cqs.get_mut(&cq_id) {
                    c.overflows += 1;
                    c.error = true;
                }
                self.counters.cqes_dropped += 1;
                // spec control-path §8: 0x0203 CQ_OPERATION_ERROR, AESRC CQ
                self.post_aeqe(ae::CQ_OPERATION_ERROR, ae::SRC_CQ, cq_id, cq.ctx, 0);
                return false;
            }
        }
        if self.faults.kill_cq == Some(cq_id) {
            self.faults.kill_cq = None;
            if let Some(c) = self.cqs.get_mut(&cq_id) {
                c.error = true;
            }
            self.cqe_write_failed(cq_id, cq.ctx);
            return false;
        }
        if self.faults.fail_cqe_writes > 0 {
            self.faults.fail_cqe_writes -= 1;
            self.cqe_write_failed(cq_id, cq.ctx);
            return false;
        }
        if let Some(mut ext) = ext {
            let next = (cq.prod + 1) % cq.size;
            let pol = if next == 0 { !cq.pol } else { cq.pol };
            ext[3] = (ext[3] & !(1 << 63)) | ((pol as u64) << 63);
            let Some(pa) = self.queue_addr(cq.ring, next as u64 * 32) else {
                self.counters.cqes_dropped += 1;
                return false;
            };
            for (i, v) in ext.iter().enumerate() {
                if let Err(f) = write_u64(&*self.mem, pa.wrapping_add(i as u64 * 8), *v) {
                    self.dma_fault(f);
                    self.cqe_write_failed(cq_id, cq.ctx);
                    return false;
                }
            }
        }
        w[3] = (w[3] & !(1 << 63)) | ((cq.pol as u64) << 63);
        let Some(pa) = self.queue_addr(cq.ring, cq.prod as u64 * 32) else {
            self.counters.cqes_dropped += 1;
            return false;
        };
        let mut body = [0u8; 24];
        for i in 0..3 {
            body[i * 8..i * 8 + 8].copy_from_slice(&w[i].to_le_bytes());
        }
        if let Err(f) =
            self.mem.write(pa, &body).and_then(|_| write_u64(&*self.mem, pa.wrapping_add(24), w[3]))
        {
            self.dma_fault(f);
            self.cqe_write_failed(cq_id, cq.ctx);
            return false;
        }
        self.counters.cqes += 1;
        self.record(Event::Cqe { cq: cq_id, slot: cq.prod, w3: w[3] });
        let error = bit(w[3], 55);
        if let Some(c) = self.cqs.get_mut(&cq_id) {
            for _ in 0..slots {
                c.prod = (c.prod + 1) % c.size;
                if c.prod == 0 {
                    c.pol = !c.pol;
                }
            }
            let fire = match c.arm {
                Arm::Next => true,
                Arm::Solicited => solicited || error,
                Arm::None => false,
            };
            if fire {
                c.arm = Arm::None;
                if let Some(ceq) = c.ceq {
                    let ctx = c.ctx;
                    self.post_ceqe(ceq, ctx);
                }
            }
        }
        true
    }

    fn cq_arm(&mut self, id: u32) {
        let Some(cq) = self.cqs.get(&id) else {
            self.counters.bad_doorbells += 1;
            return;
        };
        // spec data-path §5.7: shadow @32 ARM_NEXT [14], ARM_NEXT_SE [15]
        let word = match read_u64(&*self.mem, cq.shadow.wrapping_add(32)) {
            Ok(v) => v,
            Err(f) => {
                self.dma_fault(f);
                return;
            }
        };
        let arm = if bit(word, 14) {
            Arm::Next
        } else if bit(word, 15) {
            Arm::Solicited
        } else {
            Arm::None
        };
        // spec interrupts.md A.4: a new arm is a changed ARM_SEQ_NUM
        // [17:16]; CQARM only says which CQ to look at (a plain-memory BAR
        // coalesces repeated writes of one id), so a CQARM whose shadow
        // word carries the sequence number already seen arms nothing.
        let seq = get(word, 17, 16) as u8;
        if cq.arm_seq == seq {
            self.irq.counters.stale_arms += 1;
            return;
        }
        self.irq.counters.arms += 1;
        if let Some(c) = self.cqs.get_mut(&id) {
            c.arm_seq = seq;
            // an arm request never downgrades an existing next-completion arm
            if c.arm != Arm::Next {
                c.arm = arm;
            }
        }
        self.record(Event::CqArm { cq: id, word });
    }

    fn post_ceqe(&mut self, ceq_id: u32, cq_ctx: u64) {
        let Some(q) = self.ceqs.get(&ceq_id).cloned() else {
            self.counters.ceqes_dropped += 1;
            return;
        };
        let v = get(cq_ctx, 62, 0) | ((q.pol as u64) << 63);
        let ok = self.queue_addr(q.ring, q.prod as u64 * 8).map(|pa| write_u64(&*self.mem, pa, v));
        match ok {
            Some(Ok(())) => {}
            Some(Err(f)) => {
                self.dma_fault(f);
                return;
            }
            None => {
                self.counters.ceqes_dropped += 1;
                return;
            }
        }
        self.counters.ceqes += 1;
        self.record(Event::Ceqe { ceq: ceq_id, cq_ctx });
        if let Some(q) = self.ceqs.get_mut(&ceq_id) {
            q.prod = (q.prod + 1) % q.size;
            if q.prod == 0 {
                q.pol = !q.pol;
            }
        }
        self.ceq_event(ceq_id);
    }

    /// Writes an AEQE (spec control-path §8.2 GEN_2 layout).
    pub(crate) fn post_aeqe(&mut self, code: u16, src: u8, id: u32, ctx: u64, wqe_idx: u32) {
        let state = self.qps.get(&id).map_or(0, |q| q.state) as u64;
        let Some(q) = self.aeq.clone() else {
            self.counters.aeqes_dropped += 1;
            self.record(Event::Aeqe { code, src, id, written: false });
            return;
        };
        if self.cfg.mode == Mode::Strict && q.outstanding >= q.size {
            if let Some(a) = self.aeq.as_mut() {
                a.overflowed = true;
            }
            self.counters.aeqes_dropped += 1;
            self.record(Event::Aeqe { code, src, id, written: false });
            return;
        }
        let [_, w1] = Aeqe {
            ctx,
            id,
            wqe_idx,
            overflow: q.overflowed,
            code,
            src,
            state: if src == ae::SRC_CQ { 0 } else { state as u8 },
            valid: q.pol,
        }
        .words();
        let Some(pa) = self.queue_addr(q.ring, q.prod as u64 * 16) else {
            self.counters.aeqes_dropped += 1;
            return;
        };
        if let Err(f) = write_u64(&*self.mem, pa, ctx)
            .and_then(|_| write_u64(&*self.mem, pa.wrapping_add(8), w1))
        {
            self.dma_fault(f);
            return;
        }
        self.counters.aeqes += 1;
        self.record(Event::Aeqe { code, src, id, written: true });
        if let Some(a) = self.aeq.as_mut() {
            a.overflowed = false;
            a.outstanding = a.outstanding.saturating_add(1);
            a.prod = (a.prod + 1) % a.size;
            if a.prod == 0 {
                a.pol = !a.pol;
            }
        }
        self.aeq_event();
    }

    /// Moves a QP to ERROR and raises an AE for it (the "QP error path" of
    /// spec control-path §8.2 starts from this).
    pub(crate) fn qp_fatal(&mut self, qpn: u32, code: u16, src: u8, wqe_idx: u32) {
        let ctx = match self.qps.get_mut(&qpn) {
            Some(q) => {
                q.state = qps::ERROR;
                q.compl_ctx
            }
            None => return,
        };
        self.post_aeqe(code, src, qpn, ctx, wqe_idx);
    }
}
