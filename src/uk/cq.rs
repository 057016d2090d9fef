//! The completion queue ring: CQE status and flush codes, the poll result
//! types, the valid-bit head, shadow-area head, arming and resize (spec
//! data-path §5; uk.c: irdma_uk_cq_request_notification). CQE decoding, SQ/RQ
//! retirement and the flush replay with a parked head (uk.c:
//! irdma_uk_cq_poll_cmpl) are `CqRing` methods in `uk/poll.rs`, above the QP
//! whose WQEs they retire.

use irdma_hal::barrier::wmb;
use irdma_hal::wqe::{QUANTUM_QWORDS, SHADOW_QWORDS, cqe, shadow};
use irdma_hal::{Bar, regs};

use super::mem::{QueueMem, RawSlot, WqeSlot};
use crate::wr::WorkCompletion;

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
    pub(super) mem: QueueMem<'a>,
    shadow: QueueMem<'a>,
    /// Ring size in qwords (slots × 4).
    size_q: u32,
    /// Qword index of the head CQE (slot × 4): indexes the ring directly.
    pub(super) head_q: u32,
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
    pub(super) fn next(&self, i: u32) -> u32 {
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
    pub(super) fn head_cqe(&self) -> RawSlot<'_> {
        // SAFETY: `head_q + 4 <= size_q <= mem.qwords()` by the type's
        // invariant (`head_q` a multiple of 4 below `size_q`, memory size
        // checked in `CqRing::new`).
        unsafe { self.mem.slot_unchecked(self.head_q as usize, QUANTUM_QWORDS) }
    }

    /// Whether CQE qword 3 `q3` carries the expected valid bit.
    #[inline(always)]
    pub(super) fn is_new(&self, q3: u64) -> bool {
        const _: () = assert!(cqe::VALID.mask() == 1 << 63);
        (q3 ^ self.valid) as i64 >= 0
    }

    /// Whether a new CQE is waiting at the head.
    #[inline(always)]
    pub fn has_cqe(&self) -> bool {
        self.is_new(self.head_cqe().get(3))
    }

    /// Moves the head past the current CQE (and its extension) and publishes
    /// the head in shadow +0 (RC uk.c writes it after every CQE).
    #[inline(always)]
    pub(super) fn consume(&mut self, ext: bool) {
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
