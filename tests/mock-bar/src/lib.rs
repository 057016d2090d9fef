//! A register-level model of the Intel E810 RDMA engine (irdma GEN_2).
//!
//! Written from `shared/spec/` independently of the driver: it never
//! imports `irdma` or `irdma-hal` (checked by `cargo xtask test`) and has its
//! own field decoding, so an encoding mistake in the driver shows up as a
//! failing test instead of agreeing with itself. Its decoders are checked
//! against the vendor's own encoders (`tests/conformance/*.json`, see
//! `tests/vectors.rs` and `tests/cqp_vectors.rs`).
//!
//! # Shape
//!
//! * [`Memory`] — the device's only way to DMA. A refused access is a
//!   [`Fault`]; the model turns it into an error completion, an AE or a
//!   dropped write, never a panic. [`TestMemory`] is a region-based memory
//!   for model tests; `irdma_testkit::FakeHalMemory` only allows live
//!   `FakeHal` allocations; [`shm::FileMemory`] is guest RAM in a file.
//! * [`Device`] — one PF: `mmio_read32(off)` / `mmio_write32(off, v)` at
//!   BAR0 offsets, plus inspection (`cqp()`, `cq(id)`, `qp(id)`, `stag(idx)`,
//!   `fpm_layout()`, `sds()`, `counters()`, `trace()`) and `faults()`.
//! * [`Mode`] — [`Mode::Strict`] (default): CQPDB, WQEALLOC, CQARM and
//!   CCQPLOW writes are processed before the write returns, so every doorbell
//!   is seen exactly and tests are deterministic step by step.
//!   [`Mode::Deferred`]: plain-memory BAR semantics — writes latch, and
//!   [`Device::poll`] acts on changed values and sweeps every live queue
//!   (doorbells coalesce; work found without a doorbell change is counted;
//!   CQ arming is detected from ARM_SEQ_NUM in the shadow area; AEQ credit
//!   counting is off). Used by the device thread and the shm transport.
//! * [`Fabric`] — devices joined by a wire, behind one lock; use it (even
//!   for one device) when several handles share a device. RC traffic is
//!   RoCEv2 frames ([`wire`]) built from the QP context only; the frames go
//!   to the device that owns (destination IP word 3, BTH dest QP) — @32 /
//!   @64 in the context, the local IP is @184 — loopback on one device, or
//!   across devices on one fabric; in-order and lossless, and a request is
//!   answered before the doorbell write returns. [`Fabric::capture`]
//!   records every frame ([`wire::Capture::write_pcap`]).
//!   [`Fabric::spawn_device_thread`] runs
//!   [`Fabric::poll`] on a thread (deferred devices).
//! * [`port`] — the model's optional Ethernet port ([`Fabric::attach_port`]):
//!   a loopback UDP socket carrying one Ethernet frame per datagram (QEMU's
//!   `-netdev dgram` contract), so a Linux guest or a test's socket is a
//!   peer on the fabric's wire. Frames for destinations no device claims
//!   leave through it; arriving frames are checked as the hardware would
//!   (MAC, UDP 4791, IP checksum and lengths, ICRC, then the device's QP /
//!   P_Key / Q_Key / PSN checks), drops counted by reason
//!   ([`PortCounters`], [`Counters::wire_drop_reasons`]); ARP and IPv6
//!   neighbour solicitations for the port's addresses are answered.
//! * [`shm`] and the `mock-bar-shm` binary — the QEMU transport: BAR file
//!   (ivshmem-plain BAR2) and RAM file (offset = GPA, 4 GiB hole folded),
//!   positional file I/O, a host loop that copies doorbells in, polls, and
//!   publishes [`Device::status_registers`] back into the BAR.
//! * [`FaultPlan`] — fault injection: fail the Nth CQP op with a chosen
//!   major/minor, CQP hang, completions delayed by N register reads, dropped
//!   CCQ completions, surprise removal (all-ones reads, no DMA), lost
//!   doorbells, error CQE on the Nth SQ WQE, a GLPE_CRITERR value; an
//!   error CQE (major 0xFFFE, minor = AE code) for a WQE that fails with a
//!   QP-fatal AE, several flush CQEs per queue, a chosen WQE index in the SQ
//!   flush CQE, one QP's CQEs held back and written after another QP's,
//!   SQ doorbells acted on late, a chosen request frame lost on the wire
//!   (PSN-sequence NAK and go-back-N resend), failed CQE writes (AE
//!   LCE_CQ_CATASTROPHIC, also raised by a real DMA fault on a CQE), and
//!   [`Device::inject_ae`] for catastrophic events or stale QP ids;
//!   [`Device::reset`] is a function-level reset. [`Counters`] and a bounded
//!   trace of [`Event`]s record what the device did ([`Device::trace_dump`]
//!   prints it for a failing test).
//! * [`lan`] — the LAN firmware of the PF (ice admin queue), written from
//!   `shared/spec/ice-lan-for-rdma.md`: ATQ/ARQ registers and rings, the
//!   commands a bare PF needs before RDMA (version, clear PF config / PXE,
//!   capabilities, switch config, MAC, link with ARQ events, scheduler tree
//!   with a configurable layer count, VSI table and PE filter, RDMA qsets,
//!   switch rules, a synthetic DDP package), PFSWR / GLGEN_RSTAT / GLNVM_ULD
//!   resets and recovery mode; [`Config::lan`] configures it and
//!   [`Device::lan`] inspects it. AQ faults: `FaultPlan::aq_*`.
//! * [`wqe`] (SQ/RQ WQE decoder) and [`cqp`] (CQP WQE decoder) are public so
//!   tests can use them; [`Aeqe`] and [`ccq_cqe_words`] are the model's
//!   encoders for what it writes.
//!
//! # Example
//!
//! ```
//! use mock_bar::{regs, Config, Device, Fabric, TestMemory};
//!
//! let mem = TestMemory::new();
//! mem.map(0x1000, 0x1000); // CQP host context
//! mem.map(0x10_0000, 64 * 64); // CQP SQ, 64 entries
//! mem.set64(0x1000, 5 << 8); // SQSIZE = log2(64) - 1
//! mem.set64(0x1008, 0x10_0000);
//! mem.set64(0x1020, 1 << 16); // HW_MAJVER = 1 (GEN_2)
//! let fabric = Fabric::new();
//! let dev = fabric.add(Device::new(Config::default(), Box::new(mem.clone())));
//! assert_eq!(fabric.mmio_read32(dev, regs::GLPE_CPUSTATUS0), 0x80);
//! fabric.mmio_write32(dev, regs::CCQPHIGH, 0);
//! fabric.mmio_write32(dev, regs::CCQPLOW, 0x1000);
//! assert_eq!(fabric.mmio_read32(dev, regs::CCQPSTATUS), 1);
//! // a NOP (opcode 0x24) with the first pass's valid bit, then the doorbell
//! mem.set64(0x10_0000 + 24, 0x24 << 32 | 1 << 63);
//! fabric.mmio_write32(dev, regs::CQPDB, 1);
//! assert_eq!(fabric.mmio_read32(dev, regs::CQPTAIL), 1);
//! ```
//!
//! In driver tests, `irdma_testkit::ModelBar::standalone(Config::default())`
//! gives the driver's `Bar` on such a device with DMA limited to live
//! `FakeHal` memory; `ModelBar::with_device` reaches the model for
//! inspection and fault injection. The last clone of a `ModelBar` fails the
//! test if an error counter moved that the test did not declare with
//! `ModelBar::expect_counter`.
//!
//! # What is modelled
//!
//! * Register file: GLPE_CPUSTATUS0/1/2 = 0x80, GLPCI_LBARCTRL PE_DB_SIZE = 2
//!   (8 MiB), PF_FUNC_RID; CCQPHIGH/CCQPLOW create handshake (host context
//!   validated: SQSIZE encoding 4..2048, 512-B aligned SQ, HW_MAJVER = 1) →
//!   CCQPSTATUS = 1, or bit 31 + CQPERRCODES; writing 0/0 destroys.
//!   CQPTAIL = next WQE index [10:0] + OP_ERR [31] of the last op;
//!   CQPERRCODES of the last failure. Other in-range registers are plain
//!   storage; accesses outside the BAR read all-ones.
//! * CQP: WQEs processed from the internal tail up to the CQPDB value, each
//!   only if its valid bit equals the pass polarity (first pass 1); a stale
//!   WQE stops processing (counted). Once CQ 0 (the CCQ) exists, every op
//!   writes a CCQ CQE (context = host context @24, OPRETVAL, WQE index,
//!   major/minor, ERROR, SQ, valid with polarity); CREATE_CQ of the CCQ
//!   completes into the CCQ itself. Ops: NOP, QUERY_RDMA_FEATURES,
//!   QUERY_FPM_VAL (192-byte buffer from [`hmc::FpmConfig`]),
//!   COMMIT_FPM_VAL (counts checked against the maxima and MAX_PE_SDS; bases
//!   in type order, 512-B aligned), UPDATE_PE_SDS (incl. the overflow
//!   buffer; direct and paged SDs), SHMC_PAGES_ALLOCATED (checks every
//!   non-PBLE object is backed), CREATE/DESTROY CQ, CREATE/DESTROY CEQ and
//!   AEQ, MANAGE_ARP, WORK_SCHED_NODE (tree checks; leaf add returns a
//!   queue-set handle), ALLOC_STAG, REG_MR (PBL levels 0/1/2), DEALLOC_STAG
//!   (PD must match), CREATE_QP (RoCE RC and RoCE UD; the GSI QP is UD
//!   QP 1), CREATE/MODIFY/DESTROY_ADDR_HANDLE (index below the committed
//!   FSIAV count, unused on create, existing on modify/destroy), MODIFY_QP (state machine of spec
//!   §7.4; the context is re-read; the ARP index, ORD and CQ numbers are
//!   taken only with ARPTABIDXVALID / ORDVALID / CQNUMVALID; entering RTR
//!   or RTS needs an ARP entry at the QP's index, SNDMSS in 256..=4096 and
//!   QSHANDLE naming an enabled WS leaf — a UD QP only the WS leaf, its
//!   addresses come from AHs), DESTROY_QP (only in ERROR, or in
//!   IDLE — a QP never modified; refusing a live QP is a model choice, the
//!   spec only says Linux moves it to ERROR first), FLUSH_WQES and GEN_AE. Any
//!   other opcode completes with an error. Object ids are checked against
//!   the committed counts, and their HMC context memory must be backed by
//!   programmed SDs/PDs (else OBJCACHE error).
//! * HMC translation: PBLE i is read at FPM base[PBLE] + 8·i through the
//!   SD table (direct: base + offset; paged: PD entry with valid bit). In
//!   strict mode a paged SD's PD entries are cached: loaded when
//!   UPDATE_PE_SDS programs the SD and reloaded one by one by PFHMC_PDINV
//!   (PMSDIDX, PMSDPARTSEL = 1, PMPDIDX; without PARTSEL the write is
//!   counted in `bad_doorbells`), so a PD entry written or cleared without
//!   its PDINV is not seen (when the device really fetches PD entries is
//!   not documented; this is the strictest reading of Linux's "write, then
//!   invalidate"). Deferred mode reads PD entries live (latched writes
//!   cannot show every PDINV). [`Config::strict_sds`] additionally demands
//!   PMSDPARTSEL, PMSDBPCOUNT = 512 and 2 MiB-aligned direct SDs.
//! * Data path: SQ WQEs found by valid bit on WQEALLOC (or the user
//!   doorbell page +0), quanta from the header, extra quanta's valid bits
//!   checked, NOP padding; a WQE crossing an 8-quanta chunk, with an odd
//!   ADDFRAGCNT (GEN_2 counts the pad fragment) or more than 13 SGEs is
//!   refused — not executed, counted in `invalid_wqes`, QP to ERROR with
//!   WQE_UNEXPECTED_OPCODE (the AE code for a malformed WQE is a model
//!   choice: the spec names none); WRITE(+IMM, solicited), READ(+local invalidate),
//!   SEND(+IMM/+INV, solicited), inline forms, LOCAL_INV, FAST_REGISTER, NOP
//!   executed (a READ on a QP whose ORD is 0 raises
//!   RDMA_READ_WHILE_ORD_ZERO); BIND_MW and atomics raise
//!   WQE_UNEXPECTED_OPCODE. RQ WQEs
//!   consumed by valid bit (no doorbell). CQEs with polarity, WQE index in
//!   quanta, QP id, completion context (QP context @168), immediates
//!   (extended CQE in the next slot), invalidated STag, solicited flag, BTH
//!   opcode for RQ completions; CQ overflow checked against the shadow
//!   consumer index before anything is written, for every slot of the CQE
//!   (two for an extended one): a CQE that does not fit raises
//!   CQ_OPERATION_ERROR once and puts the CQ in error — it writes nothing
//!   more until destroyed (model choice: the spec names the AE and
//!   IB_EVENT_CQ_ERR but not how a CQ recovers). QP shadow @0 gets the SQ
//!   tail.
//!   CQ arming (shadow @32 + CQARM) → one CEQE (next or solicited/error);
//!   AEQEs (GEN_2 layout) with credits returned through AEQALLOC and the
//!   OVERFLOW bit after a drop. A new arm is a changed ARM_SEQ_NUM in the
//!   shadow word (CQARM only says which CQ to look at); only CQEs written
//!   after the arm count (the strict variant of spec interrupts.md A.4).
//! * Interrupts ([`irq`]): GLINT_CEQCTL / PFINT_AEQCTL causes, per-vector
//!   GLINT_DYN_CTL INTENA gating (cleared by the model when it fires),
//!   pending latch, CLEARPBA, optional ITR moderation, CQACK counting;
//!   delivered in-process to an [`InterruptSink`].
//! * The wire (`shared/spec/rocev2-wire.md`, module [`wire`]): each RC
//!   request is segmented at SNDMSS (First/Middle/Last, §4.1) into frames
//!   whose every field comes from the context (§1.9: ARP entry at ARPIDX →
//!   destination MAC, MACADDRESS, INSERTVLANTAG/VLANTAG, IPV4, TOS, TTL,
//!   FLOWLABEL, LOCAL_IPADDR/DESTIPADDR, SRCPORTNUM/DESTPORTNUM, PKEY,
//!   ROCE_TVER, DESTQP, PSNNXT), with RETH/ImmDt/IETH as the opcode needs
//!   (§2), AckReq on the last packet, ICRC (§3) and, on IPv6, a UDP
//!   checksum. The responder parses them and checks ICRC, lengths, pad,
//!   destination MAC (= its MACADDRESS), destination IP (its local IP
//!   words), UDP port 4791, TVer 0, P_Key (§1.6 rule), dest QP and PSN
//!   (= its EPSN, taken at RTR, then advanced per packet; strict by
//!   default, [`Device::set_strict_psn`]), then reassembles the request
//!   from the payloads (§4.1 length rules). Anything else is dropped,
//!   counted in `wire_drops` (trace [`Event::WireDrop`]) and the request is
//!   lost: the requester raises LLP_TOO_MANY_RETRIES. PSN sequence errors
//!   (§4.7): a request packet beyond the EPSN (a gap) is dropped and
//!   answered once by a NAK 0x60 carrying the EPSN (later out-of-sequence
//!   packets are dropped silently until the EPSN arrives); packets taken
//!   before the gap are kept; the requester goes back to the NAK's PSN and
//!   resends from there (go-back-N, §4.8), each NAK spending one retry of
//!   REXMIT_THRESH @128 [53:48] (exhausted: LLP_TOO_MANY_RETRIES; the
//!   budget is per message — when E810 restores it is not driver-visible,
//!   model choice — and 7 is seven retries, not infinite); a NAK
//!   PSN outside the request is no progress (LLP_TOO_MANY_RETRIES). A
//!   duplicate SEND/WRITE packet (earlier PSN) is not executed again and is
//!   re-ACKed with EPSN − 1 and the current MSN (§4.7); a duplicate READ
//!   request is dropped (the model keeps no READ to replay — its own
//!   requester never resends one). ACK (syndrome 0x1F, MSN, §4.3), RNR NAK (0x2E:
//!   the timer value E810 sends is not driver-visible, model choice), NAK
//!   0x61/0x62/0x63 and READ responses (First/Middle/Last with AETH on all
//!   but Middle, §4.6) travel back as frames the requester checks the same
//!   way. IPv4 ID counts up per device and DF is set (not in the context;
//!   model choice, §1.3). The UDP source port is sent as SRCPORTNUM says
//!   and never checked by the receiver (§1.5). Not modelled on the wire:
//!   ACK timeouts (the spec gives no GEN_2 unit for RTOMIN, §4.8: a lost
//!   frame that no later frame of its message reveals is never resent and
//!   ends as LLP_TOO_MANY_RETRIES), READ-response loss and partial READ
//!   re-requests (§4.6), duplicate ACKs, ACK coalescing.
//!
//!   Corrected when a real peer joined the wire ([`port`], issue #34): the
//!   model used to drop duplicates without an ACK, which its own requester
//!   never noticed; a Linux (rxe) requester whose ACK is lost resends the
//!   packet and, without the re-ACK, retries until its retry count is
//!   spent. rocev2-wire §4.7 (rxe `rxe_resp.c: duplicate_request`) says to
//!   re-ACK, so the model now does.
//! * UD (`rocev2-wire.md` §5): a UD QP executes SENDs only (no
//!   invalidate): one UD SEND Only (0x64/0x65) packet per message with a
//!   DETH (the WQE's Q_Key, the sending QP's number), addressed from the
//!   AH the WQE's AHID names (local MAC, ARP entry → destination MAC,
//!   VLAN, IP version, addresses, TOS, TTL, flow label; §5.2) and the QP
//!   context (UDP ports, P_Key, TVer); the PSN is the QP's PSNNXT, one per
//!   packet. Frames go to the device whose UD QP has the destination MAC
//!   as its MACADDRESS (destination QP = BTH DestQP). Receive checks ICRC,
//!   lengths, DETH (reserved byte 0), UDP port, TVer, P_Key, QP state and
//!   then the Q_Key: a mismatch is dropped silently and counted in
//!   `qkey_violations` and `wire_drops`. The receive buffer gets the
//!   40-byte GRH area (IPv4: 20 zero bytes, then the IPv4 header as
//!   received; IPv6: the IPv6 header; §5.3) and the payload; the extended
//!   CQE carries 40 + payload bytes, the source QPN (+16), the IPv4 flag
//!   (bit 53), the source MAC and VLAN. Model choices where the spec is
//!   silent: the destination IP of a UD datagram is not checked (a UD
//!   context has no local IP); no receive posted, a receive too small or a
//!   QP not in RTR/RTS/SQD drops the datagram (`ud_drops`; UD has no RNR
//!   NAK); a message longer than SNDMSS is not sent (rxe's behaviour) and
//!   counted in `ud_drops`; a missing AH or one of another PD is
//!   WQE_UNEXPECTED_OPCODE; the RQ CQE opcode of a UD receive is the RC
//!   SEND Only (with immediate) opcode. The UD SEND completes on the
//!   sender whether or not anyone took it.
//! * Protection on every access: STag index (slot and full 24-bit index),
//!   key byte, registered and not invalidated, PD, rights (local read for
//!   gathers, local write for scatters — receive buffers and READ sinks —,
//!   remote read/write, and for a remote access REMACCENABLED of the CQP WQE
//!   that created the STag; QP RDOK/WRRDRSPOK), VA-based (address is a VA)
//!   and zero-based (address is an offset from the first byte) bounds,
//!   address wrap. A violation moves the QP to
//!   ERROR and raises the AMP_* AE; a remote one also NAKs, and the requester
//!   gets IB_REMOTE_ACCESS_ERROR. No receive posted → RNR NAK; the WQE is
//!   retried on later doorbells or [`Device::step`]; after RNR_RETRY retries
//!   (7 = forever) LLP_TOO_MANY_RNRS. No destination → LLP_TOO_MANY_RETRIES.
//!   Errors write no CQE by themselves (as on GEN_2): after MODIFY_QP(ERROR)
//!   FLUSH_WQES writes one flush CQE per queue with work (user codes or
//!   major 1 / minor 1) and completes with minor 3 (SQ) or 2 (RQ).
//!
//! # Model choices and what is not modelled
//!
//! * Error codes the sources do not give are model choices
//!   ([`regs::err`] `MODEL_*`, major 0xFFFF). Inferred, not documented: the
//!   STag → MR slot reduction (low max(log2 MR count, 14) index bits),
//!   ENCEQEMASK (the model raises CEQEs only when armed), level-0 MR
//!   addressing (first page of the PA + offset from the VA's page start),
//!   zero-length MRs cover nothing, RQ BTH opcodes in CQEs. Where the spec
//!   gives only what Linux writes: an MR with remote rights but
//!   REMACCENABLED 0 refuses remote access (AMP_RIGHTS_VIOLATION), and a
//!   zero-based MR whose first-byte offset is not below its page size
//!   refuses every access (AMP_BOUNDS_VIOLATION).
//! * MODIFY_CQ resizes a CQ: new ring from slot 0, valid bit 1; the shadow
//!   head counts only once SW_CQ_SELECT reports every resize retired.
//! * Not modelled: multicast groups, SRQ, memory windows, atomics, push
//!   pages, statistics, MSI-X delivery into a QEMU guest, GLINT_RATE, timers (retransmission only
//!   after a PSN-sequence NAK), loss other than the fault knob, IPv6 routing (routing uses IP word 3; the receiver then checks
//!   all four words), iWARP.

#![allow(clippy::needless_range_loop)]
// Bit ranges are written `[hi:lo]` as in the spec, not as intra-doc links.
#![allow(rustdoc::broken_intra_doc_links)]

mod bits;
pub mod cqp;
pub mod datapath;
pub mod device;
pub mod fabric;
pub mod fault;
pub mod hmc;
pub mod irq;
pub mod ivshmem;
pub mod lan;
pub mod mem;
pub mod port;
pub mod regs;
pub mod shm;
pub mod wire;
pub mod wqe;

pub use device::{Aeqe, Config, Device, Mode, ccq_cqe_words};
pub use fabric::{DeviceId, DeviceThread, Fabric};
pub use fault::{Counters, Event, FaultPlan};
pub use irq::{InterruptSink, IrqCounters};
pub use mem::{Fault, Memory, TestMemory};
pub use port::{Port, PortConfig, PortCounters};
