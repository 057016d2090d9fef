//! The completion queue: CQE decoding, SQ/RQ retirement, flush replay with a
//! parked head, shadow-area head, and arming (spec data-path §5; uk.c:
//! irdma_uk_cq_poll_cmpl, irdma_uk_cq_request_notification).

use irdma_hal::barrier::{dma_rmb, wmb};
use irdma_hal::wqe::{QUANTUM_QWORDS, SHADOW_QWORDS, cqe, op, shadow};
use irdma_hal::{Bar, regs};

use super::mem::{QueueMem, RawSlot, WqeSlot};
use super::qp::{QpLookup, QpUk, wc_opcode_sq};
use super::sq::SendQueue;
use crate::wr::{WcOpcode, WcStatus, WorkCompletion};

/// `enum irdma_flush_opcode` (spec data-path §5.5; user.h).
pub mod flush_code {
    /// FLUSH_GENERAL_ERR.
    pub const GENERAL: u16 = 1;
    /// FLUSH_PROT_ERR.
    pub const PROT: u16 = 2;
    /// FLUSH_REM_ACCESS_ERR.
    pub const REM_ACCESS: u16 = 3;
    /// FLUSH_LOC_QP_OP_ERR.
    pub const LOC_QP_OP: u16 = 4;
    /// FLUSH_REM_OP_ERR.
    pub const REM_OP: u16 = 5;
    /// FLUSH_LOC_LEN_ERR.
    pub const LOC_LEN: u16 = 6;
    /// FLUSH_FATAL_ERR.
    pub const FATAL: u16 = 7;
    /// FLUSH_RETRY_EXC_ERR.
    pub const RETRY_EXC: u16 = 8;
    /// FLUSH_MW_BIND_ERR.
    pub const MW_BIND: u16 = 9;
    /// FLUSH_REM_INV_REQ_ERR.
    pub const REM_INV_REQ: u16 = 10;
    /// FLUSH_RNR_RETRY_EXC_ERR.
    pub const RNR_RETRY_EXC: u16 = 11;
}

/// Maps an asynchronous-event code to a flush code (spec data-path §5.5
/// table; user.h: irdma_ae_to_qp_err_code).
pub const fn ae_to_flush_code(ae: u16) -> u16 {
    use flush_code::*;
    match ae {
        0x108 | 0x103 | 0x109 | 0x102 | 0x105 | 0x104 | 0x106 | 0x107 | 0x10A | 0x11C => PROT,
        0x133 | 0x20A => LOC_QP_OP,
        0x134 | 0x132 | 0x135 | 0x305 | 0x303 => LOC_LEN,
        0x112 | 0x20D => REM_ACCESS,
        0x118 | 0x11B | 0x119 | 0x114 => MW_BIND,
        0x50A => RETRY_EXC,
        0x208 => REM_INV_REQ,
        0x507 | 0x505 | 0x316 | 0x318 | 0x20E => REM_OP,
        0x50F => RNR_RETRY_EXC,
        0x700 | 0x703 | 0x704 | 0x705 => FATAL,
        _ => GENERAL,
    }
}

/// uk-level completion status (`enum irdma_cmpl_status`, the values GEN_2
/// polling produces).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CompStatus {
    /// `IRDMA_COMPL_STATUS_SUCCESS` (0).
    #[default]
    Success,
    /// `IRDMA_COMPL_STATUS_FLUSHED` (1).
    Flushed,
    /// `IRDMA_COMPL_STATUS_UNKNOWN`: an error that is not a flush.
    Unknown,
}

/// Which queue a completion is for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum QueueType {
    /// Receive queue (CQE bit 62 = 0).
    #[default]
    Rq,
    /// Send queue.
    Sq,
}

/// Everything one polled CQE says (uk level, `struct irdma_cq_poll_info`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqPollInfo {
    /// The WR's cookie.
    pub wr_id: u64,
    /// The QP completion context (CQE qword +8).
    pub qp_ctx: u64,
    /// Bytes: tracked length for SQ, PAYLDLEN for RQ.
    pub bytes_xfered: u32,
    /// QP number (CQE +16 bits 55:32).
    pub qp_id: u32,
    /// UD source QPN (CQE +16 bits 31:0).
    pub ud_src_qpn: u32,
    /// Immediate data (valid when `imm_valid`).
    pub imm_data: u32,
    /// Invalidated STag (valid when `stag_invalid_set`).
    pub inv_stag: u32,
    /// Status.
    pub comp_status: CompStatus,
    /// Major error code (errors only).
    pub major_err: u16,
    /// Minor error code (errors only; a flush code after mapping).
    pub minor_err: u16,
    /// UD VLAN tag.
    pub ud_vlan: u16,
    /// UD source MAC.
    pub ud_smac: u64,
    /// SQ: the WQE opcode; RQ on GEN_2 RoCE: the BTH opcode.
    pub op_type: u8,
    /// Queue.
    pub q_type: QueueType,
    /// CQE bit 53 on an RQ completion (RC: invalidate; UD: IPv4).
    pub stag_invalid_set: bool,
    /// Push WQE was dropped.
    pub push_dropped: bool,
    /// Error completion.
    pub error: bool,
    /// Solicited event.
    pub solicited_event: bool,
    /// CQE bit 53 (UD: IPv4).
    pub ipv4: bool,
    /// `ud_vlan` is valid.
    pub ud_vlan_valid: bool,
    /// `ud_smac` is valid.
    pub ud_smac_valid: bool,
    /// `imm_data` is valid.
    pub imm_valid: bool,
    /// CQE +0 bits 63:32 (PSN/RTT/timestamp).
    pub stat_raw: u32,
}

/// Why a poll returned no completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PollError {
    /// No new CQE (vendor `-ENOENT`); nothing consumed.
    Empty,
    /// A CQE was consumed but reports nothing: a flush CQE for an already
    /// drained queue (vendor `-ENOENT` after consuming).
    Drained,
    /// A CQE was consumed and dropped: its QP context is unknown or null
    /// (vendor `-EFAULT`), or its WQE index is not an outstanding WQE.
    NoQp,
    /// Nothing consumed: the next CQE belongs to a live QP of this CQ the
    /// caller did not pass ([`super::QpLookup::holds`]); poll again with it.
    Unlisted,
}

/// Why a CQ could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CqConfigError {
    /// Size below 2 or above 2^21 entries.
    BadSize,
    /// Ring or shadow memory too small.
    MemoryTooSmall,
}

/// Status and opcode of a successful SQ completion from the top byte of CQE
/// qword 3 (OP in bits 61:56, so the byte is OP plus the SQ and valid bits):
/// [`wc_opcode_sq`] as a table (an opcode the verbs never post is
/// `GeneralErr`/`Send`, as `to_work_completion` reports it).
#[inline(always)]
fn sq_wc_status_opcode(q3: u64) -> (WcStatus, WcOpcode) {
    const TABLE: [(WcStatus, WcOpcode); 256] = {
        let mut t = [(WcStatus::GeneralErr, WcOpcode::Send); 256];
        let mut i = 0;
        while i < 256 {
            if let Some(o) = wc_opcode_sq((i & 63) as u8) {
                t[i] = (WcStatus::Success, o);
            }
            i += 1;
        }
        t
    };
    const _: () = assert!(cqe::OP.lo == 56 && cqe::OP.hi() == 61);
    TABLE[(q3 >> 56) as u8 as usize]
}

/// What [`CqRing::poll_fast`] did.
pub(crate) enum Fast {
    /// Polled one CQE into this completion.
    Done(WorkCompletion),
    /// No new CQE.
    Empty,
    /// A CQE the fast path does not take; nothing was consumed or changed.
    Slow,
}

/// A completion queue over 32-byte CQEs.
///
/// Invariant: `head_q` is a multiple of 4 below `size_q` (it starts at 0
/// and only `CqRing::next` moves it) and `mem.qwords() >= size_q` (checked by
/// [`CqRing::new`]), so the CQE at the head is inside the ring without a check.
pub struct CqRing<'a> {
    mem: QueueMem<'a>,
    shadow: QueueMem<'a>,
    /// Ring size in qwords (slots × 4).
    size_q: u32,
    /// Qword index of the head CQE (slot × 4): indexes the ring directly.
    head_q: u32,
    /// The expected valid bit in CQE-qword-3 position: `cqe::VALID.mask()`
    /// or 0, so "new CQE" is one XOR and a sign test.
    valid: u64,
    cq_id: u32,
}

impl<'a> CqRing<'a> {
    /// A CQ of `size` CQE slots with its 64-byte shadow area.
    pub fn new(
        mem: QueueMem<'a>,
        shadow: QueueMem<'a>,
        size: u32,
        cq_id: u32,
    ) -> Result<Self, CqConfigError> {
        if !(2..=1 << 21).contains(&size) {
            return Err(CqConfigError::BadSize);
        }
        if mem.qwords() < size as usize * QUANTUM_QWORDS || shadow.qwords() < SHADOW_QWORDS {
            return Err(CqConfigError::MemoryTooSmall);
        }
        // Expected polarity starts at 1 on zeroed memory (spec data-path §3.1).
        Ok(CqRing {
            mem,
            shadow,
            size_q: size * QUANTUM_QWORDS as u32,
            head_q: 0,
            valid: cqe::VALID.mask(),
            cq_id,
        })
    }

    /// Current head slot.
    pub fn head(&self) -> u32 {
        self.head_q / QUANTUM_QWORDS as u32
    }

    /// Expected valid bit.
    pub fn polarity(&self) -> bool {
        self.valid != 0
    }

    /// CQ id written to CQARM.
    pub fn cq_id(&self) -> u32 {
        self.cq_id
    }

    /// The ring memory.
    pub fn mem(&self) -> &QueueMem<'a> {
        &self.mem
    }

    /// The shadow area.
    pub fn shadow(&self) -> &QueueMem<'a> {
        &self.shadow
    }

    #[inline(always)]
    fn next(&self, i: u32) -> u32 {
        let n = i + QUANTUM_QWORDS as u32;
        if n >= self.size_q { 0 } else { n }
    }

    #[inline(always)]
    fn advance(&mut self) {
        self.head_q = self.next(self.head_q);
        if self.head_q == 0 {
            self.valid ^= cqe::VALID.mask();
        }
    }

    /// The four qwords of the CQE at the head.
    #[inline(always)]
    fn head_cqe(&self) -> RawSlot<'_> {
        // SAFETY: `head_q + 4 <= size_q <= mem.qwords()` by the type's
        // invariant (`head_q` a multiple of 4 below `size_q`, memory size
        // checked in `CqRing::new`).
        unsafe { self.mem.slot_unchecked(self.head_q as usize, QUANTUM_QWORDS) }
    }

    /// Whether CQE qword 3 `q3` carries the expected valid bit.
    #[inline(always)]
    fn is_new(&self, q3: u64) -> bool {
        const _: () = assert!(cqe::VALID.mask() == 1 << 63);
        (q3 ^ self.valid) as i64 >= 0
    }

    /// Whether a new CQE is waiting at the head.
    #[inline(always)]
    pub fn has_cqe(&self) -> bool {
        self.is_new(self.head_cqe().get(3))
    }

    /// Polls the common CQE in one pass, straight into a [`WorkCompletion`]:
    /// no extension, no error, no push drop, a known QP and an outstanding
    /// WQE. Anything else is [`Fast::Slow`] with nothing changed, for
    /// [`CqRing::poll_one`]; the result is what `poll_one` +
    /// `to_work_completion` give for the same CQE (spec data-path §5.3–5.6;
    /// `fast_poll_equals_general` proves it).
    #[inline(always)]
    pub(crate) fn poll_fast<'q, S: SendQueue, L: QpLookup<'q, S> + ?Sized>(
        &mut self,
        qps: &mut L,
    ) -> Fast {
        let w = self.head_cqe();
        let q3 = w.get(3);
        if !self.is_new(q3) {
            return Fast::Empty;
        }
        dma_rmb();
        const SLOW: u64 = cqe::EXTCQE.mask() | cqe::ERROR.mask() | cqe::PSHDROP.mask();
        let ctx = w.get(1);
        if q3 & SLOW != 0 || ctx == 0 {
            return Fast::Slow;
        }
        // Not a UD QP, nor one being destroyed (`lookup_fast` matches
        // `QpUk::fast_ctx`, 0 for both): their CQEs take the general path.
        const _: () = assert!(cqe::SQ.mask() == 1 << 62);
        // SQ bit (62) as a sign test.
        let is_sq = ((q3 << 1) as i64) < 0;
        let Some(qp) = qps.lookup_fast(ctx, is_sq) else { return Fast::Slow };
        let q2 = w.get(2);
        let opc = cqe::OP.get(q3) as u8;
        let wc = if is_sq {
            // `complete_at` refuses an index past the ring, so the bits of
            // qword 3 above WQEIDX are cleared first.
            const _: () = assert!(cqe::WQEIDX.lo == 32 && cqe::WQEIDX.hi() == 46);
            let Some(t) = qp.sq.complete_at(cqe::WQEIDX.get(q3) as u32) else { return Fast::Slow };
            let (status, opcode) = sq_wc_status_opcode(q3);
            WorkCompletion {
                wr_id: t.wr_id,
                status,
                opcode,
                vendor_err: 0,
                byte_len: t.wr_len,
                qp_num: cqe::QPID.get(q2) as u32,
                imm_data: None,
                invalidated_rkey: None,
                solicited: cqe::SOEVENT.is_set(q3),
                ud: None,
            }
        } else {
            let wqe_idx = cqe::WQEIDX.get(q3) as u32;
            let shift = qp.rq.multiplier().trailing_zeros();
            let Some(wr_id) = qp.rq.complete_at(wqe_idx >> shift) else { return Fast::Slow };
            WorkCompletion {
                wr_id,
                status: WcStatus::Success,
                opcode: if opc == 0x0B || opc == 0x09 {
                    WcOpcode::RecvRdmaWithImm
                } else {
                    WcOpcode::Recv
                },
                vendor_err: 0,
                byte_len: cqe::PAYLDLEN.get(w.get(0)) as u32,
                qp_num: cqe::QPID.get(q2) as u32,
                imm_data: None,
                invalidated_rkey: if cqe::STAG.is_set(q3) && !qp.is_ud() {
                    Some(cqe::INVSTAG.get(q2) as u32)
                } else {
                    None
                },
                solicited: cqe::SOEVENT.is_set(q3),
                ud: None,
            }
        };
        self.consume(false);
        Fast::Done(wc)
    }

    /// Polls one CQE (spec data-path §5.3–5.5). `qps` resolves the CQE's
    /// completion context to the QP that owns it.
    pub fn poll_one<'q, S: SendQueue, L: QpLookup<'q, S> + ?Sized>(
        &mut self,
        qps: &mut L,
    ) -> Result<CqPollInfo, PollError> {
        let base = self.head_q as usize;
        let mut q3 = self.mem.read(base + 3);
        if !self.is_new(q3) {
            return Err(PollError::Empty);
        }
        dma_rmb();
        let mut info = CqPollInfo::default();
        let ext = cqe::EXTCQE.is_set(q3);
        if ext {
            // GEN_2: the extension is the next slot; when that slot wrapped to
            // 0 it carries the next pass's valid bit.
            let nx = self.next(self.head_q);
            let eb = nx as usize;
            let e3 = self.mem.read(eb + 3);
            if cqe::EXT_VALID.is_set(e3) ^ (nx == 0) != self.polarity() {
                return Err(PollError::Empty);
            }
            dma_rmb();
            info.imm_valid = cqe::IMMVALID.is_set(e3);
            if info.imm_valid {
                info.imm_data = cqe::IMMDATALOW32.get(self.mem.read(eb)) as u32;
            }
            info.ud_smac_valid = cqe::UDSMACVALID.is_set(e3);
            info.ud_vlan_valid = cqe::UDVLANVALID.is_set(e3);
            if info.ud_smac_valid || info.ud_vlan_valid {
                let e2 = self.mem.read(eb + 2);
                if info.ud_vlan_valid {
                    info.ud_vlan = cqe::UDVLAN.get(e2) as u16;
                }
                if info.ud_smac_valid {
                    info.ud_smac = cqe::UDSMAC.get(e2);
                }
            }
        }
        info.q_type = if cqe::SQ.is_set(q3) { QueueType::Sq } else { QueueType::Rq };
        info.error = cqe::ERROR.is_set(q3);
        info.push_dropped = cqe::PSHDROP.is_set(q3);
        info.ipv4 = cqe::IPV4.is_set(q3);
        let q0 = self.mem.read(base);
        let ctx = self.mem.read(base + 1);
        let q2 = self.mem.read(base + 2);
        info.stat_raw = cqe::TCPSQN_ROCEPSN_RTT_TS.get(q0) as u32;
        info.qp_id = cqe::QPID.get(q2) as u32;
        info.ud_src_qpn = cqe::UDSRCQPN.get(q2) as u32;
        info.solicited_event = cqe::SOEVENT.is_set(q3);
        let qp = if ctx == 0 { None } else { qps.lookup(ctx) };
        let Some(qp) = qp else {
            if ctx != 0 && qps.holds(ctx) {
                return Err(PollError::Unlisted);
            }
            self.consume(ext);
            return Err(PollError::NoQp);
        };
        if qp.destroy_pending() {
            // uk.c: irdma_uk_cq_poll_cmpl: `!qp || qp->destroy_pending` is
            // -EFAULT with the head moved; like the kernel copy (README),
            // nothing else is filled and the CQE is not rewritten.
            self.consume(ext);
            return Err(PollError::NoQp);
        }
        let sw = qp.sw_flushed();
        if (info.q_type == QueueType::Sq && sw.0) || (info.q_type == QueueType::Rq && sw.1) {
            // The queue was flushed in software (`QpUk::mark_sw_flushed`):
            // its WRs all completed already; a hardware CQE arriving now is
            // dropped, never a second completion (utils.c:
            // irdma_generate_flush_completions runs only once the hardware
            // will write no more for the QP; the driver cannot wait for that
            // when the device cannot be asked to flush).
            self.consume(ext);
            return Err(PollError::NoQp);
        }
        if info.push_dropped && info.q_type == QueueType::Sq {
            // "cease posting push mode on push drop": SQ CQEs only.
            qp.push_mode = false;
            qp.push_dropped = true;
        }
        if info.error {
            let major = cqe::MAJERR.get(q3) as u16;
            let minor = cqe::MINERR.get(q3) as u16;
            info.major_err = major;
            info.minor_err = minor;
            info.comp_status = if major == cqe::SRQFLUSH_RSVD_MAJOR_ERR {
                info.minor_err = ae_to_flush_code(minor);
                CompStatus::Flushed
            } else if major == cqe::FLUSH_MAJOR_ERR {
                CompStatus::Flushed
            } else if qp.is_ud() && info.q_type == QueueType::Sq && major & 0xF000 == 0xE000 {
                // UD SQ "CIE" signature: not an error (spec data-path §5.5).
                info.error = false;
                info.major_err = 0;
                info.minor_err = 0;
                CompStatus::Success
            } else {
                CompStatus::Unknown
            };
            if info.comp_status == CompStatus::Flushed && minor != flush_code::GENERAL {
                // Only the first completion reports the specific cause.
                q3 = cqe::MINERR.set(q3, flush_code::GENERAL.into());
                self.mem.write(base + 3, q3);
            }
        }
        info.qp_ctx = ctx;
        info.op_type = cqe::OP.get(q3) as u8;
        let wqe_idx = cqe::WQEIDX.get(q3) as u32;
        let replay = info.comp_status != CompStatus::Success;
        let remaining = match info.q_type {
            QueueType::Rq => {
                info.bytes_xfered = cqe::PAYLDLEN.get(q0) as u32;
                if cqe::STAG.is_set(q3) {
                    info.stag_invalid_set = true;
                    info.inv_stag = cqe::INVSTAG.get(q2) as u32;
                }
                let got = if replay {
                    // Flush, or an RQ error that is not a flush: report the
                    // oldest receive and park the head so every outstanding
                    // receive completes (kernel behaviour, README).
                    qp.rq.retire_oldest()
                } else {
                    qp.rq.complete_at(wqe_idx >> qp.rq.multiplier().trailing_zeros())
                };
                let Some(w) = got else {
                    self.consume(ext);
                    return Err(if replay { PollError::Drained } else { PollError::NoQp });
                };
                info.wr_id = w;
                if info.comp_status == CompStatus::Flushed {
                    // Set only once a WR was found (an empty RQ is ENOENT
                    // before these are touched).
                    qp.rq_flush_seen = true;
                    if qp.rq.used() == 0 {
                        qp.rq_flush_complete = true;
                    }
                }
                let park = info.comp_status == CompStatus::Flushed
                    || (info.comp_status == CompStatus::Unknown && qp.park_on_rq_error);
                if park && qp.rq.used() != 0 { Some(qp.rq.tail()) } else { None }
            }
            QueueType::Sq if info.comp_status == CompStatus::Flushed => {
                if !qp.sq_flush_seen && info.minor_err != flush_code::GENERAL {
                    skip_unsignaled_before(&mut qp.sq, wqe_idx);
                }
                let Some((opc, t)) = sq_replay(qp) else {
                    self.consume(ext);
                    return Err(PollError::Drained);
                };
                // uk.c: set after the replay found a WR; complete when the SQ
                // is empty after it.
                qp.sq_flush_seen = true;
                if qp.sq.used() == 0 {
                    qp.sq_flush_complete = true;
                }
                info.op_type = opc;
                info.wr_id = t.wr_id;
                info.bytes_xfered = t.wr_len;
                if opc == op::BIND_MW && info.minor_err == flush_code::PROT {
                    info.minor_err = flush_code::MW_BIND;
                }
                Some(qp.sq.used()).filter(|u| *u != 0).map(|_| qp.sq.tail())
            }
            QueueType::Sq => {
                let Some(t) = qp.sq.complete_at(wqe_idx) else {
                    self.consume(ext);
                    return Err(PollError::NoQp);
                };
                info.wr_id = t.wr_id;
                if info.comp_status == CompStatus::Success {
                    info.bytes_xfered = t.wr_len;
                }
                None
            }
        };
        match remaining {
            // Park: the next poll re-reads this CQE for the next flushed WR
            // (spec data-path §5.5, GEN_2).
            Some(tail) => self.mem.write(base + 3, cqe::WQEIDX.set(q3, tail.into())),
            None => self.consume(ext),
        }
        Ok(info)
    }

    /// Moves the head past the current CQE (and its extension) and publishes
    /// the head in shadow +0 (RC uk.c writes it after every CQE).
    #[inline(always)]
    fn consume(&mut self, ext: bool) {
        self.advance();
        if ext {
            self.advance();
        }
        // SAFETY: `CqRing::new` checked `shadow.qwords() >= SHADOW_QWORDS` (8)
        // and `shadow` never changes.
        let sh = unsafe { self.shadow.slot_unchecked(0, 1) };
        sh.put(0, shadow::CQ_CQEIDX.prep(self.head().into()));
    }

    /// Arms the CQ (spec data-path §5.7; uk.c: irdma_uk_cq_request_notification):
    /// bump the 2-bit sequence number in shadow +32, set ARM_NEXT_SE, set
    /// ARM_NEXT unless `solicited_only`, barrier, write the CQ id to CQARM.
    pub fn request_notification(&mut self, bar: &impl Bar, solicited_only: bool) {
        let w = self.shadow.read(shadow::CQ_ARM_OFFSET / 8);
        let seq = (shadow::CQ_ARM_SEQ_NUM.get(w) + 1) & 3;
        let nw = shadow::CQ_SW_CQ_SELECT.prep(shadow::CQ_SW_CQ_SELECT.get(w))
            | shadow::CQ_ARM_SEQ_NUM.prep(seq)
            | shadow::CQ_ARM_NEXT_SE.prep(1)
            | shadow::CQ_ARM_NEXT.prep(!solicited_only as u64);
        self.shadow.write(shadow::CQ_ARM_OFFSET / 8, nw);
        wmb();
        bar.write32(regs::CQARM, self.cq_id);
    }

    /// Reports `cnt` retired CQ buffers (completed resizes) to the device
    /// (spec data-path §5.7; uk.c: irdma_uk_cq_set_resized_cnt): adds `cnt`
    /// to `SW_CQ_SELECT` in shadow +32 (wrapping at its 14 bits, as the
    /// vendor's `FIELD_PREP` truncates), keeps the sequence number and both
    /// arm bits, rings nothing; the next arm carries the new select value.
    pub fn set_resized_cnt(&mut self, cnt: u16) {
        let w = self.shadow.read(shadow::CQ_ARM_OFFSET / 8);
        let sel = (shadow::CQ_SW_CQ_SELECT.get(w) as u16).wrapping_add(cnt);
        let nw = shadow::CQ_ARM_SEQ_NUM.prep(shadow::CQ_ARM_SEQ_NUM.get(w))
            | shadow::CQ_SW_CQ_SELECT.prep(sel.into())
            | shadow::CQ_ARM_NEXT_SE.prep(shadow::CQ_ARM_NEXT_SE.get(w))
            | shadow::CQ_ARM_NEXT.prep(shadow::CQ_ARM_NEXT.get(w));
        self.shadow.write(shadow::CQ_ARM_OFFSET / 8, nw);
    }

    /// Places the head at `head` with expected valid bit `polarity`: the
    /// software state of a CQ whose ring already holds `head` consumed
    /// entries (the vendor's `cq_ring.head` / `polarity`). A new ring after a
    /// resize starts at head 0, polarity 1 ([`CqRing::resize`]).
    pub fn set_position(&mut self, head: u32, polarity: bool) -> Result<(), CqConfigError> {
        let q = head.checked_mul(QUANTUM_QWORDS as u32).ok_or(CqConfigError::BadSize)?;
        if q >= self.size_q {
            return Err(CqConfigError::BadSize);
        }
        self.head_q = q;
        self.valid = if polarity { cqe::VALID.mask() } else { 0 };
        Ok(())
    }

    /// Moves this CQ to a new ring of `size` slots (uk.c:
    /// irdma_uk_cq_resize): head 0, expected polarity 1; the shadow area and
    /// CQ id stay. Returns the old ring, still positioned where polling
    /// stopped, so its pending CQEs can be drained first (uverbs.c:
    /// `resize_list`, verbs.c: irdma_resize_cq).
    pub fn resize(&mut self, mem: QueueMem<'a>, size: u32) -> Result<CqRing<'a>, CqConfigError> {
        if !(2..=1 << 21).contains(&size) {
            return Err(CqConfigError::BadSize);
        }
        if mem.qwords() < size as usize * QUANTUM_QWORDS {
            return Err(CqConfigError::MemoryTooSmall);
        }
        let old_mem = core::mem::replace(&mut self.mem, mem);
        // SAFETY: the alias has this CQ's own lifetime `'a`: for borrowed
        // memory the borrow checker holds it to the memory; a `'static` view
        // exists only through `QueueMem::from_raw` / `verbs::static_view`,
        // whose contracts cover every view derived from it (the verbs CQ
        // keeps the old ring's `CqRing` inside itself, beside the shadow's
        // owner).
        let shadow = unsafe { self.shadow.alias() };
        let old = CqRing {
            mem: old_mem,
            shadow,
            size_q: self.size_q,
            head_q: self.head_q,
            valid: self.valid,
            cq_id: self.cq_id,
        };
        self.size_q = size * QUANTUM_QWORDS as u32;
        self.head_q = 0;
        self.valid = cqe::VALID.mask();
        Ok(old)
    }
}

/// The first flush CQE of an SQ that names a specific cause: the WQEs
/// between the tail and the CQE's WQE index executed without asking for a
/// completion (a signaled one would have had its own CQE before this one),
/// so they are retired silently and the cause lands on the WR that failed.
///
/// Linux replays from the tail and ignores the index (spec data-path §5.5,
/// uk.c: irdma_uk_cq_poll_cmpl), which reports the error on the oldest
/// unsignaled WR even though it succeeded. The index is only trusted when it
/// starts an outstanding WQE and nothing before it asked for a completion;
/// otherwise nothing is skipped and the replay is Linux's.
fn skip_unsignaled_before<S: SendQueue>(sq: &mut S, wqe_idx: u32) {
    let Some(d) = sq.offset_of(wqe_idx) else { return };
    let (mut off, mut idx, mut n) = (0u32, sq.tail(), 0u32);
    while off < d {
        let Some(t) = sq.peek(idx) else { return };
        if t.signaled {
            return;
        }
        let q = u32::from(t.quanta).max(1);
        off = off.saturating_add(q);
        idx = idx.wrapping_add(q);
        n += 1;
    }
    if off != d {
        return;
    }
    for _ in 0..n {
        if sq.retire_oldest().is_none() {
            return;
        }
    }
}

/// Flush replay on the SQ: retire from the tail, skipping NOP pads, and
/// report the first real WQE with its opcode read back from the ring.
fn sq_replay<S: SendQueue>(qp: &mut QpUk<'_, S>) -> Option<(u8, super::sq::SqWrTrk)> {
    loop {
        let (_, opc, t) = qp.sq.retire_oldest()?;
        if opc != op::NOP || t.signaled {
            return Some((opc, t));
        }
    }
}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

crate::error::phrases!(CqConfigError {
    CqConfigError::BadSize => "CQ size below 2 or above 2^21 entries",
    CqConfigError::MemoryTooSmall => "CQ ring or shadow memory too small",
});

crate::error::phrases!(PollError {
    PollError::Empty => "no new completion",
    PollError::Drained => "a flush completion for an already drained queue",
    PollError::NoQp => "a completion of an unknown QP or WQE was dropped",
    PollError::Unlisted => "the next completion belongs to a QP the caller did not pass",
});
