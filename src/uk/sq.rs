//! The send queue: WQE encoding for every GEN_2 operation, the quanta ring
//! with the 8-quanta chunk rule and NOP padding, and `sq_wrtrk` tracking.
//!
//! The encoder here is the only one in the driver: the verbs `post_send`, the
//! multi-producer path and the conformance runner all go through
//! `encode_body` / [`Sq::post`].

#[cfg(all(test, loom))]
extern crate std;

use core::marker::PhantomData;
use core::ptr::NonNull;
use irdma_hal::barrier::wmb;
use irdma_hal::wqe::{QUANTUM_QWORDS, SQ_CHUNK_QUANTA, fastreg, frag, inline, op, send16, sq_hdr};

use irdma_hal::{Bar, regs};

use super::mem::{QueueMem, Words, WqeSlot};
use super::sizing::{MAX_FRAGS, MAX_WQ_QUANTA, SQ_FREE_RESERVE, inline_data_size_to_quanta};
use crate::wr::{Access, PageSize, RegMrWr, Sge};

/// One `sq_wrtrk` entry, kept for the quantum where a WQE starts
/// (spec data-path §2.3; user.h: irdma_sq_uk_wr_trk_info).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SqWrTrk {
    /// The WR's cookie.
    pub wr_id: u64,
    /// Total bytes (sum of SGE lengths, or the inline length).
    pub wr_len: u32,
    /// Quanta the WQE occupies (1 for a NOP pad).
    pub quanta: u8,
    /// Whether the WQE asked for a completion.
    pub signaled: bool,
}

/// The SEND flavours (opcode 0x03–0x06, spec data-path §1.9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendKind {
    /// Raise a solicited event at the responder.
    pub solicited: bool,
    /// Invalidate `stag_to_inv` at the responder.
    pub invalidate: bool,
}

impl SendKind {
    /// The WQE opcode.
    pub const fn opcode(self) -> u8 {
        match (self.solicited, self.invalidate) {
            (false, false) => op::SEND,
            (false, true) => op::SEND_INV,
            (true, false) => op::SEND_SOL,
            (true, true) => op::SEND_SOL_INV,
        }
    }
}

/// What one SQ WQE does (uk level: the fields of `irdma_post_sq_info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqOp<'s> {
    /// RDMA WRITE (opcode 0x00, or 0x0D when solicited).
    Write {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Solicited-event variant.
        solicited: bool,
        /// Local buffers.
        sges: &'s [Sge],
        /// Copy the payload into the WQE (see [`Sq::enable_inline`]).
        inline: bool,
    },
    /// RDMA READ (0x01, or 0x0B with local invalidate).
    Read {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// READ with local invalidate.
        local_inv: bool,
        /// Local sink buffers.
        sges: &'s [Sge],
    },
    /// SEND (0x03–0x06).
    Send {
        /// Solicited / invalidate flavour.
        kind: SendKind,
        /// STag the responder invalidates (`invalidate` flavours).
        stag_to_inv: u32,
        /// UD: Q_Key.
        qkey: u32,
        /// UD: destination QPN (24 bits).
        dest_qp: u32,
        /// UD: address handle index.
        ah_id: u32,
        /// UD: UDP header flag (shares bit 61 with the local fence).
        udp_hdr: bool,
        /// UD: L4 length (4 bits).
        l4len: u8,
        /// Local buffers.
        sges: &'s [Sge],
        /// Copy the payload into the WQE.
        inline: bool,
    },
    /// LOCAL INVALIDATE of `stag` (0x0A).
    LocalInv {
        /// STag to invalidate.
        stag: u32,
    },
    /// FAST REGISTER (0x09), `IB_WR_REG_MR`.
    FastReg(RegMrWr),
    /// NOP (0x0C).
    Nop,
    /// Atomics: refused on E810 (no `IRDMA_FEATURE_ATOMIC_OPS`, spec §1.6).
    Atomic,
    /// BIND MW: refused by the E810 kernel path (spec §6.1).
    BindMw,
}

/// One SQ post (uk level, `irdma_post_sq_info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqPost<'s> {
    /// Cookie returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SqOp<'s>,
    /// Generate a CQE.
    pub signaled: bool,
    /// Read fence.
    pub read_fence: bool,
    /// Local fence.
    pub local_fence: bool,
    /// Ask for an RTT report.
    pub report_rtt: bool,
    /// Immediate data (WRITE and SEND only).
    pub imm: Option<u32>,
}

impl<'s> SqPost<'s> {
    /// A post with no flags.
    pub const fn new(wr_id: u64, op: SqOp<'s>) -> Self {
        SqPost {
            wr_id,
            op,
            signaled: false,
            read_fence: false,
            local_fence: false,
            report_rtt: false,
            imm: None,
        }
    }
}

/// Why a WQE was not posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SqError {
    /// More SGEs than the QP allows (vendor `-EINVAL`).
    TooManySges,
    /// Inline payload longer than the QP's `max_inline_data` (vendor `-EINVAL`).
    InlineTooLong,
    /// Inline requested on a QP that did not call [`Sq::enable_inline`].
    InlineNotEnabled,
    /// Immediate data on an operation that cannot carry it.
    ImmNotAllowed,
    /// A field value does not fit the hardware field (e.g. MR length ≥ 2^41,
    /// or remote-atomic access on E810).
    InvalidField,
    /// Not enough free quanta, counting NOP padding (vendor `-ENOMEM`).
    Full,
    /// An operation E810 does not support (atomics, memory windows).
    Unsupported,
    /// The caller's admission check refused the WR
    /// ([`Publish::admit`](super::qp::Publish::admit): the verbs layer's
    /// check of a REG_MR against its fast-register records).
    NotAdmitted,
}

/// Why an SQ could not be set up over the given memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SqConfigError {
    /// Ring size not a power of two in 8..=32768 quanta.
    BadSize,
    /// The memory region is smaller than the ring.
    MemoryTooSmall,
    /// The tracking slice has fewer entries than the ring has quanta.
    TrackingTooSmall,
    /// `max_frags` above 13 or `max_inline` above 101.
    BadLimits,
}

/// Where a WQE went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostedWqe {
    /// First quantum of the WQE (after padding).
    pub wqe_idx: u32,
    /// Quanta of the WQE.
    pub quanta: u32,
    /// NOP quanta written before it.
    pub pad: u32,
    /// The valid bit it was written with.
    pub valid: bool,
}

/// Size of a validated post.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqeSize {
    /// Quanta.
    pub quanta: u32,
    /// Bytes tracked for the completion.
    pub wr_len: u32,
}

/// Qword index (in the WQE) of fragment slot `k` (spec data-path §1.5):
/// slot 0 at byte 0, slot k ≥ 1 at byte 32 + 16 (k − 1).
#[inline(always)]
const fn frag_qword(k: usize) -> usize {
    if k == 0 { 0 } else { 2 * k + 2 }
}

/// The window of the WQE (`quanta` quanta) at quantum `idx` of `mem`.
#[inline(always)]
pub fn wqe_slot<M: Words + ?Sized>(mem: &M, idx: u32, quanta: u32) -> M::Slot<'_> {
    mem.slot(idx as usize * QUANTUM_QWORDS, quanta as usize * QUANTUM_QWORDS)
}

#[inline(always)]
fn put_frag<S: WqeSlot>(slot: &S, k: usize, sge: Option<&Sge>, valid: bool) {
    // spec data-path §1.4 (uk.c: irdma_set_fragment): address, then
    // STAG | LEN | VALID; a null fragment carries only the valid bit.
    let q = frag_qword(k);
    let (addr, w) = match sge {
        Some(s) => (s.addr, frag::STAG.prep(s.lkey.into()) | frag::LEN.prep(s.length.into())),
        None => (0, 0),
    };
    slot.put(q, addr);
    slot.put(q + 1, w | frag::VALID.prep(valid as u64));
}

/// Writes immediate data (if any) and the SGEs with GEN_2 padding; returns
/// ADDFRAGCNT (spec data-path §1.5).
#[inline(always)]
fn put_sges<S: WqeSlot>(slot: &S, sges: &[Sge], imm: Option<u32>, valid: bool) -> u64 {
    let mut k = 0;
    if let Some(imm) = imm {
        // Immediate takes slot 0: qword +0, +8 not written.
        slot.put(0, imm.into());
        k = 1;
    } else if sges.is_empty() {
        put_frag(slot, 0, None, valid);
    }
    for s in sges {
        put_frag(slot, k, Some(s), valid);
        k += 1;
    }
    let mut add = k.saturating_sub(1) as u64;
    if k != 0 && k.is_multiple_of(2) {
        // GEN_2: pad fragment so the WQE ends with a valid bit, counted.
        put_frag(slot, k, None, valid);
        add += 1;
    }
    add
}

/// Inline payload gathered from the SGEs (at most 101 bytes on GEN_2).
struct InlineBuf {
    buf: [u8; inline::MAX_BYTES],
    len: usize,
}

/// Gathers an inline payload from SGEs whose addresses are CPU addresses.
///
/// # Safety
///
/// Each SGE's `addr..addr + length` must be readable CPU memory.
unsafe fn gather_inline(sges: &[Sge], total: usize) -> InlineBuf {
    let mut b = InlineBuf { buf: [0; inline::MAX_BYTES], len: 0 };
    for s in sges {
        let n = s.length as usize;
        let Some(dst) = b.buf.get_mut(b.len..b.len.saturating_add(n)) else { break };
        if n != 0 {
            // SAFETY: the caller promises the SGE range is readable CPU memory;
            // `dst` has exactly `n` bytes and does not overlap it (stack buffer).
            unsafe {
                core::ptr::copy_nonoverlapping(s.addr as usize as *const u8, dst.as_mut_ptr(), n)
            };
        }
        b.len += n;
    }
    b.len = b.len.min(total);
    b
}

/// Writes an inline payload (spec data-path §1.7; uk.c: irdma_copy_inline_data):
/// bytes 0..7 at WQE bytes 8..15, then 31 bytes per further quantum whose
/// byte 31 is the valid byte.
fn put_inline<S: WqeSlot>(slot: &S, data: &[u8], quanta: u32, valid: bool) {
    let mut w = [0u8; 8];
    let first = data.len().min(inline::FIRST_QUANTUM_BYTES);
    if let (Some(d), Some(s)) = (w.get_mut(..first), data.get(..first)) {
        d.copy_from_slice(s);
    }
    slot.put(1, u64::from_le_bytes(w));
    let rest = data.get(first..).unwrap_or(&[]);
    let valid_byte = (valid as u8) << inline::VALID_SHIFT;
    for q in 1..quanta as usize {
        let start = (q - 1) * inline::PER_QUANTUM_BYTES;
        let mut bytes = [0u8; 32];
        let chunk = rest.get(start..).unwrap_or(&[]);
        let n = chunk.len().min(inline::PER_QUANTUM_BYTES);
        if let (Some(d), Some(s)) = (bytes.get_mut(..n), chunk.get(..n)) {
            d.copy_from_slice(s);
        }
        bytes[31] = valid_byte;
        for (i, c) in bytes.chunks_exact(8).enumerate() {
            let mut x = [0u8; 8];
            x.copy_from_slice(c);
            slot.put(q * QUANTUM_QWORDS + i, u64::from_le_bytes(x));
        }
    }
}

/// Limits an SQ enforces on posts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqLimits {
    /// `max_sq_frag_cnt` (requested `max_send_sge`, ≤ 13).
    pub max_frags: u32,
    /// `max_inline_data` (≤ 101).
    pub max_inline: u32,
    /// Inline payload addresses are trusted CPU addresses.
    pub inline_enabled: bool,
}

/// Bits of a UD SEND's AH index the driver accepts. The header field is
/// 24:0 in Intel's out-of-tree defs.h but 16:0 in Linux 6.1's in-tree
/// `drivers/infiniband/hw/irdma/defs.h` (`IRDMAQPSQ_AHID`, spec data-path
/// §1.4 table), which truncates a wider index silently; the driver takes
/// the width both agree on and refuses more (`SqError::InvalidField`). Its
/// own AH table is far smaller (`device::MAX_AHS`). Found by the
/// vendor-diff harness (issue #30).
pub const AH_ID_BITS: u32 = 17;

/// Validates a post and sizes it (spec data-path §1.2, §6.1 errors).
#[inline(always)]
pub fn size_post(p: &SqPost<'_>, lim: &SqLimits) -> Result<WqeSize, SqError> {
    let imm = p.imm.is_some() as u32;
    let (sges, inline) = match p.op {
        SqOp::Write { sges, inline, .. } => (sges, inline),
        // An AH index the two vendor widths would encode differently is
        // refused, never truncated (see `AH_ID_BITS`).
        SqOp::Send { ah_id, .. } if ah_id >> AH_ID_BITS != 0 => {
            return Err(SqError::InvalidField);
        }
        SqOp::Send { sges, inline, .. } => (sges, inline),
        SqOp::Read { sges, .. } if imm == 0 => (sges, false),
        _ => return size_other(p, imm),
    };
    // `max_frags` ≤ 13 (checked when the SQ was made), so SGEs + immediate
    // ≤ 14 fragments always fit the quanta table (≤ 8 quanta).
    if sges.len() > lim.max_frags as usize {
        return Err(SqError::TooManySges);
    }
    let mut len = 0u32;
    if !inline {
        for s in sges {
            // FRAG_LEN is 31 bits (spec data-path §1.4); never truncate.
            if !frag::LEN.fits(s.length.into()) {
                return Err(SqError::InvalidField);
            }
            len = len.wrapping_add(s.length);
        }
        return Ok(WqeSize { quanta: (sges.len() as u32 + imm) / 2 + 1, wr_len: len });
    }
    if !lim.inline_enabled {
        return Err(SqError::InlineNotEnabled);
    }
    for s in sges {
        len = match len.checked_add(s.length) {
            Some(l) if l <= lim.max_inline => l,
            _ => return Err(SqError::InlineTooLong),
        };
    }
    Ok(WqeSize { quanta: inline_data_size_to_quanta(len), wr_len: len })
}

/// [`size_post`] for the operations without SGEs (and refused ones).
#[cold]
fn size_other(p: &SqPost<'_>, imm: u32) -> Result<WqeSize, SqError> {
    match p.op {
        SqOp::Read { .. } => Err(SqError::ImmNotAllowed),
        SqOp::LocalInv { .. } | SqOp::Nop | SqOp::FastReg(_) if imm != 0 => {
            Err(SqError::ImmNotAllowed)
        }
        SqOp::FastReg(r) => {
            if !fastreg::STAGLEN.fits(r.length)
                || r.access.contains(Access::REMOTE_ATOMIC)
                || r.access.contains(Access::MW_BIND)
                || r.pbl_level > 2
                || r.first_pble_index >= 1 << 28
            {
                return Err(SqError::InvalidField);
            }
            Ok(WqeSize { quanta: 1, wr_len: 0 })
        }
        SqOp::LocalInv { .. } | SqOp::Nop => Ok(WqeSize { quanta: 1, wr_len: 0 }),
        SqOp::Write { .. } | SqOp::Send { .. } | SqOp::Atomic | SqOp::BindMw => {
            Err(SqError::Unsupported)
        }
    }
}

/// Writes every qword of a validated WQE except the header and returns the
/// header, to be stored after [`dma_wmb`] (spec data-path §1.6–1.8).
///
/// `p` must have passed [`size_post`] with the SQ's limits (that is what
/// makes an inline post's CPU addresses trusted), and `quanta` must be the
/// value it returned.
#[inline(always)]
pub(crate) fn encode_body<S: WqeSlot>(p: &SqPost<'_>, slot: &S, valid: bool, quanta: u32) -> u64 {
    // Hot path: one-quantum RDMA WRITE/READ with one SGE, no immediate, not
    // inline — straight-line stores, same layout as the general encoder
    // (`hot_path_equals_general_encoder`).
    if let Some(h) = HotWqe::from_post(p) {
        return encode_hot(&h, slot, valid);
    }
    // Two quanta, three fragment slots (2–3 SGEs, immediate): the encoder
    // of the verbs two-quanta fast path, so the conformance runner (which
    // posts through here) judges it too.
    if let Some(h) = Hot2Wqe::from_post(p) {
        return encode_hot2(&h, slot, valid);
    }
    encode_general(p, slot, valid, quanta)
}

/// A one-quantum WQE with exactly one SGE, no immediate, not inline and no
/// RTT report: RDMA WRITE/READ and (RC or zero-address UD) SEND. These have
/// the same layout (spec data-path §1.4–1.6; uk.c: irdma_uk_rdma_write,
/// irdma_uk_rdma_read, irdma_uk_send with one fragment): fragment 0 in
/// qwords 0–1, qword 2 the remote address (0 for a SEND without UD
/// address), header = REMSTAG | OPCODE | fence/signal bits | VALID;
/// ADDFRAGCNT 0, no pad fragment (one fragment is odd).
#[derive(Clone, Copy, Debug)]
pub(crate) struct HotWqe<'s> {
    /// The WR's cookie.
    pub wr_id: u64,
    /// Qword 2: remote address (WRITE/READ) or 0 (SEND).
    pub qw2: u64,
    /// REMSTAG: rkey, or the STag to invalidate (SEND_INV).
    pub stag: u32,
    /// WQE opcode.
    pub opc: u8,
    /// The one SGE.
    pub sge: &'s Sge,
    /// READFENCE | LOCALFENCE | SIGCOMPL, already in header position.
    pub flags: u64,
}

impl<'s> HotWqe<'s> {
    /// Header bits of the fence/signal flags.
    #[inline(always)]
    pub(crate) const fn flag_bits(read_fence: bool, local_fence: bool, signaled: bool) -> u64 {
        sq_hdr::READFENCE.prep(read_fence as u64)
            | sq_hdr::LOCALFENCE.prep(local_fence as u64)
            | sq_hdr::SIGCOMPL.prep(signaled as u64)
    }

    /// The hot shape of a uk post, if it has one (WRITE/READ only here: a
    /// uk SEND may carry UD fields).
    #[inline(always)]
    fn from_post(p: &SqPost<'s>) -> Option<Self> {
        if p.imm.is_some() || p.report_rtt {
            return None;
        }
        let (remote_addr, rkey, opc, sge) = match p.op {
            SqOp::Write { remote_addr, rkey, solicited: false, sges: [s], inline: false } => {
                (remote_addr, rkey, op::RDMA_WRITE, s)
            }
            SqOp::Read { remote_addr, rkey, local_inv: false, sges: [s] } => {
                (remote_addr, rkey, op::RDMA_READ, s)
            }
            _ => return None,
        };
        Some(HotWqe {
            wr_id: p.wr_id,
            qw2: remote_addr,
            stag: rkey,
            opc,
            sge,
            flags: Self::flag_bits(p.read_fence, p.local_fence, p.signaled),
        })
    }

    /// Whether the WQE asks for a completion.
    #[inline(always)]
    pub(crate) fn signaled(&self) -> bool {
        self.flags & sq_hdr::SIGCOMPL.prep(1) != 0
    }
}

/// Writes qwords 0–2 of a [`HotWqe`] and returns its header.
#[inline(always)]
pub(crate) fn encode_hot<S: WqeSlot>(h: &HotWqe<'_>, slot: &S, valid: bool) -> u64 {
    let s = h.sge;
    slot.put(0, s.addr);
    slot.put(
        1,
        frag::STAG.prep(s.lkey.into())
            | frag::LEN.prep(s.length.into())
            | frag::VALID.prep(valid as u64),
    );
    slot.put(2, h.qw2);
    sq_hdr::REMSTAG.prep(h.stag.into())
        | sq_hdr::OPCODE.prep(h.opc.into())
        | h.flags
        | sq_hdr::VALID.prep(valid as u64)
}

/// A two-quanta RDMA WRITE/READ or SEND with three fragment slots: 2–3
/// SGEs, or 1–2 SGEs after an immediate (WRITE/SEND only), not inline, no
/// RTT report. Slot 0 is qwords 0–1 (or the immediate in qword 0, qword 1
/// not written), slots 1–2 qwords 4–7; with two fragments slot 2 is the
/// GEN_2 pad fragment (address 0, valid bit only), so ADDFRAGCNT is 2
/// either way (spec data-path §1.4–1.5; uk.c: irdma_uk_rdma_write,
/// irdma_uk_send, irdma_uk_rdma_read with 2–3 fragments). Qword 2 and the
/// header as for [`HotWqe`], plus IMMDATAFLAG.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hot2Wqe {
    /// The WR's cookie.
    pub wr_id: u64,
    /// Qword 2: remote address (WRITE/READ) or 0 (SEND).
    pub qw2: u64,
    /// REMSTAG: rkey, or the STag to invalidate (SEND_INV).
    pub stag: u32,
    /// WQE opcode.
    pub opc: u8,
    /// Immediate data (WRITE/SEND only); then `frags[0]` is unused.
    pub imm: Option<u32>,
    /// Address and STAG | LEN (no valid bit) of each fragment slot; the
    /// pad is `(0, 0)`. Built by [`Hot2Wqe::frags`].
    pub frags: [(u64, u64); 3],
    /// SGEs in the WQE (2 or 3, or 1–2 with `imm`).
    pub sges: u8,
    /// Sum of the SGE lengths (wrapping, as `size_post`).
    pub wr_len: u32,
    /// READFENCE | LOCALFENCE | SIGCOMPL, already in header position.
    pub flags: u64,
}

/// The fragment slots of a [`Hot2Wqe`] (address, STAG | LEN), the OR of
/// the SGE lengths and their wrapping sum.
pub(crate) type Hot2Frags = ([(u64, u64); 3], u32, u32);

/// Address and STAG | LEN of a fragment (spec data-path §1.4).
#[inline(always)]
const fn frag_words(s: &Sge) -> (u64, u64) {
    (s.addr, frag::STAG.prep(s.lkey as u64) | frag::LEN.prep(s.length as u64))
}

impl Hot2Wqe {
    /// The fragment slots of `sges` after an optional immediate, with the
    /// OR and the (wrapping) sum of their lengths, if they are two or three
    /// slots. The OR tells whether every length fits FRAG_LEN.
    #[inline(always)]
    pub(crate) fn frags(sges: &[Sge], imm: bool) -> Option<Hot2Frags> {
        const PAD: (u64, u64) = (0, 0);
        let f = frag_words;
        Some(match (imm, sges) {
            (false, [a, b]) => {
                ([f(a), f(b), PAD], a.length | b.length, a.length.wrapping_add(b.length))
            }
            (false, [a, b, c]) => (
                [f(a), f(b), f(c)],
                a.length | b.length | c.length,
                a.length.wrapping_add(b.length).wrapping_add(c.length),
            ),
            (true, [a]) => ([PAD, f(a), PAD], a.length, a.length),
            (true, [a, b]) => {
                ([PAD, f(a), f(b)], a.length | b.length, a.length.wrapping_add(b.length))
            }
            _ => return None,
        })
    }
}

impl Hot2Wqe {
    /// The two-quanta shape of a uk post, if it has one: non-inline RDMA
    /// WRITE, RDMA READ without immediate, or SEND without UD address
    /// fields, with two or three fragment slots, no RTT report.
    #[inline(always)]
    fn from_post(p: &SqPost<'_>) -> Option<Self> {
        if p.report_rtt {
            return None;
        }
        let (qw2, stag, opc, sges) = match p.op {
            SqOp::Write { remote_addr, rkey, solicited, sges, inline: false } => {
                let opc = if solicited { op::RDMA_WRITE_SOL } else { op::RDMA_WRITE };
                (remote_addr, rkey, opc, sges)
            }
            SqOp::Read { remote_addr, rkey, local_inv: false, sges } if p.imm.is_none() => {
                (remote_addr, rkey, op::RDMA_READ, sges)
            }
            SqOp::Send {
                kind,
                stag_to_inv,
                qkey: 0,
                dest_qp: 0,
                ah_id: 0,
                udp_hdr: false,
                l4len: 0,
                sges,
                inline: false,
            } => (0, stag_to_inv, kind.opcode(), sges),
            _ => return None,
        };
        let (frags, or_len, wr_len) = Self::frags(sges, p.imm.is_some())?;
        if !frag::LEN.fits(or_len.into()) {
            return None;
        }
        Some(Hot2Wqe {
            wr_id: p.wr_id,
            qw2,
            stag,
            opc,
            imm: p.imm,
            frags,
            sges: sges.len() as u8,
            wr_len,
            flags: HotWqe::flag_bits(p.read_fence, p.local_fence, p.signaled),
        })
    }
}

/// Writes qwords 0–2 and 4–7 of a [`Hot2Wqe`] and returns its header:
/// the bytes the general encoder writes for it
/// (`uk::tests::verbs_hot_path_equals_general`).
#[inline(always)]
pub(crate) fn encode_hot2<S: WqeSlot>(h: &Hot2Wqe, slot: &S, valid: bool) -> u64 {
    let v = frag::VALID.prep(valid as u64);
    let [f0, f1, f2] = h.frags;
    let imm = match h.imm {
        Some(i) => {
            // Immediate in slot 0: qword 0 only, qword 1 not written.
            slot.put(0, i.into());
            sq_hdr::IMMDATAFLAG.prep(1)
        }
        None => {
            slot.put(0, f0.0);
            slot.put(1, f0.1 | v);
            0
        }
    };
    slot.put(2, h.qw2);
    slot.put(frag_qword(1), f1.0);
    slot.put(frag_qword(1) + 1, f1.1 | v);
    slot.put(frag_qword(2), f2.0);
    slot.put(frag_qword(2) + 1, f2.1 | v);
    sq_hdr::REMSTAG.prep(h.stag.into())
        | sq_hdr::OPCODE.prep(h.opc.into())
        | sq_hdr::ADDFRAGCNT.prep(2)
        | imm
        | h.flags
        | sq_hdr::VALID.prep(valid as u64)
}

/// The general encoder for every operation (see [`encode_body`]).
#[inline(never)]
fn encode_general<S: WqeSlot>(p: &SqPost<'_>, slot: &S, valid: bool, quanta: u32) -> u64 {
    let common = sq_hdr::READFENCE.prep(p.read_fence as u64)
        | sq_hdr::LOCALFENCE.prep(p.local_fence as u64)
        | sq_hdr::SIGCOMPL.prep(p.signaled as u64)
        | sq_hdr::VALID.prep(valid as u64);
    let imm_hdr = sq_hdr::IMMDATAFLAG.prep(p.imm.is_some() as u64)
        | sq_hdr::REPORTRTT.prep(p.report_rtt as u64);
    match p.op {
        SqOp::Write { remote_addr, rkey, solicited, sges, inline } => {
            // uk.c: irdma_uk_rdma_write / irdma_uk_inline_rdma_write
            let opc = if solicited { op::RDMA_WRITE_SOL } else { op::RDMA_WRITE };
            slot.put(2, remote_addr);
            let body = if inline {
                inline_body(p, sges, slot, quanta, valid)
            } else {
                sq_hdr::ADDFRAGCNT.prep(put_sges(slot, sges, p.imm, valid))
            };
            sq_hdr::REMSTAG.prep(rkey.into())
                | sq_hdr::OPCODE.prep(opc.into())
                | body
                | imm_hdr
                | common
        }
        SqOp::Read { remote_addr, rkey, local_inv, sges } => {
            // uk.c: irdma_uk_rdma_read
            let opc = if local_inv { op::RDMA_READ_LOC_INV } else { op::RDMA_READ };
            slot.put(2, remote_addr);
            let add = put_sges(slot, sges, None, valid);
            sq_hdr::REMSTAG.prep(rkey.into())
                | sq_hdr::OPCODE.prep(opc.into())
                | sq_hdr::ADDFRAGCNT.prep(add)
                | sq_hdr::REPORTRTT.prep(p.report_rtt as u64)
                | common
        }
        SqOp::Send { kind, stag_to_inv, qkey, dest_qp, ah_id, udp_hdr, l4len, sges, inline } => {
            // uk.c: irdma_uk_send / irdma_uk_inline_send
            slot.put(2, send16::DESTQKEY.prep(qkey.into()) | send16::DESTQPN.prep(dest_qp.into()));
            let body = if inline {
                inline_body(p, sges, slot, quanta, valid)
            } else {
                sq_hdr::ADDFRAGCNT.prep(put_sges(slot, sges, p.imm, valid))
            };
            sq_hdr::REMSTAG.prep(stag_to_inv.into())
                | sq_hdr::AHID.prep(ah_id.into())
                | sq_hdr::OPCODE.prep(kind.opcode().into())
                | sq_hdr::UDPHEADER.prep(udp_hdr as u64)
                | sq_hdr::L4LEN.prep(l4len.into())
                | body
                | imm_hdr
                | common
        }
        SqOp::LocalInv { stag } => {
            // uk.c: irdma_uk_stag_local_invalidate — the fragment valid bit is
            // written as 0, not the polarity (spec §1.6, uncertainty 2).
            slot.put(0, 0);
            slot.put(1, frag::STAG.prep(stag.into()));
            slot.put(2, 0);
            sq_hdr::OPCODE.prep(op::INV_STAG.into()) | common
        }
        SqOp::FastReg(r) => fast_reg_body(&r, slot) | common,
        SqOp::Nop | SqOp::Atomic | SqOp::BindMw => {
            // uk.c: irdma_nop (Atomic/BindMw never get here: size_post refuses them).
            slot.put(0, 0);
            slot.put(1, 0);
            slot.put(2, 0);
            sq_hdr::OPCODE.prep(op::NOP.into())
                | sq_hdr::SIGCOMPL.prep(p.signaled as u64)
                | sq_hdr::VALID.prep(valid as u64)
        }
    }
}

/// [`encode_general`]'s FAST_REG WQE (ctrl.c: irdma_sc_mr_fast_register,
/// kernel mapping of verbs.c: irdma_post_send IB_WR_REG_MR, always
/// VA-based): QW0–2 written to `slot`, the header without the fences,
/// signal and valid bits.
#[inline(always)]
fn fast_reg_body<S: WqeSlot>(r: &RegMrWr, slot: &S) -> u64 {
    slot.put(0, r.iova);
    slot.put(1, fastreg::FIRSTPMPBLIDXHI.prep(u64::from(r.first_pble_index) >> 16));
    slot.put(
        2,
        fastreg::STAGLEN.prep(r.length)
            | fastreg::FIRSTPMPBLIDXLO.prep(u64::from(r.first_pble_index)),
    );
    let page = match r.page_size {
        PageSize::Size4K => 0,
        PageSize::Size2M => 1,
        PageSize::Size1G => 2,
    };
    let lpbl = match r.pbl_level {
        1 => 1,
        2 => 3,
        _ => 0,
    };
    sq_hdr::STAGKEY.prep(u64::from(r.key & 0xff))
        | sq_hdr::STAGINDEX.prep(u64::from(r.key >> 8))
        | sq_hdr::OPCODE.prep(op::FAST_REG.into())
        | sq_hdr::LPBLSIZE.prep(lpbl)
        | sq_hdr::HPAGESIZE.prep(page)
        | sq_hdr::STAGRIGHTS.prep(mr_rights(r.access))
        | sq_hdr::VABASEDTO.prep(1)
}

/// STAGRIGHTS for a fast-registered MR (spec data-path §1.6; verbs.c:
/// irdma_get_mr_access, user.h IRDMA_ACCESS_FLAGS_*): local read 0x01 always,
/// local write 0x02, remote write 0x0A, remote read 0x05.
pub const fn mr_rights(a: Access) -> u64 {
    let mut r = 0x01;
    if a.contains(Access::LOCAL_WRITE) {
        r |= 0x02;
    }
    if a.contains(Access::REMOTE_WRITE) {
        r |= 0x0A;
    }
    if a.contains(Access::REMOTE_READ) {
        r |= 0x05;
    }
    r
}

fn inline_body<S: WqeSlot>(
    p: &SqPost<'_>,
    sges: &[Sge],
    slot: &S,
    quanta: u32,
    valid: bool,
) -> u64 {
    if let Some(imm) = p.imm {
        slot.put(0, imm.into());
    }
    let total = sges.iter().fold(0usize, |a, s| a.saturating_add(s.length as usize));
    // SAFETY: inline posts are only sized (and so only reach here) on an SQ
    // whose owner called the unsafe `Sq::enable_inline`, promising that inline
    // SGE addresses are readable CPU memory; `size_post` bounded the total.
    let data = unsafe { gather_inline(sges, total.min(inline::MAX_BYTES)) };
    let bytes = data.buf.get(..data.len).unwrap_or(&[]);
    put_inline(slot, bytes, quanta, valid);
    sq_hdr::INLINEDATAFLAG.prep(1) | sq_hdr::INLINEDATALEN.prep(data.len as u64)
}

/// Writes a one-quantum NOP pad (uk.c: irdma_nop_1): body zero, header last.
#[inline(always)]
pub fn write_nop_pad<S: WqeSlot>(slot: &S, valid: bool) {
    slot.put(0, 0);
    slot.put(1, 0);
    slot.put(2, 0);
    slot.publish(3, sq_hdr::OPCODE.prep(op::NOP.into()) | sq_hdr::VALID.prep(valid as u64));
}

/// The completion side of a send queue: what the CQ poller needs to retire
/// WQEs (implemented by the single-owner [`Sq`] and by `&MpSq`).
pub trait SendQueue {
    /// QP id (doorbell value; reported in software flush completions).
    fn qp_id(&self) -> u32;
    /// Outstanding quanta.
    fn used(&self) -> u32;
    /// Ring index of the tail.
    fn tail(&self) -> u32;
    /// Retires through the WQE starting at ring index `wqe_idx`. Only the
    /// bits of `wqe_idx` under the ring's mask count (a ring has at most
    /// 32768 quanta: bits 15 and up are ignored; the fast poll path passes
    /// the CQE's qword 3 shifted, unmasked).
    fn complete_at(&mut self, wqe_idx: u32) -> Option<SqWrTrk>;
    /// Retires the oldest WQE: its ring index, opcode and tracking entry.
    fn retire_oldest(&mut self) -> Option<(u32, u8, SqWrTrk)>;
    /// Quanta from the tail to ring index `wqe_idx`, if it is outstanding.
    fn offset_of(&self, wqe_idx: u32) -> Option<u32>;
    /// The tracking entry at ring index `idx` (no retirement).
    fn peek(&self, idx: u32) -> Option<SqWrTrk>;
}

impl SendQueue for Sq<'_> {
    #[inline]
    fn qp_id(&self) -> u32 {
        Sq::qp_id(self)
    }
    #[inline]
    fn used(&self) -> u32 {
        Sq::used(self)
    }
    #[inline]
    fn tail(&self) -> u32 {
        Sq::tail(self)
    }
    #[inline]
    fn complete_at(&mut self, wqe_idx: u32) -> Option<SqWrTrk> {
        Sq::complete_at(self, wqe_idx)
    }
    #[inline]
    fn retire_oldest(&mut self) -> Option<(u32, u8, SqWrTrk)> {
        Sq::retire_oldest(self)
    }
    fn offset_of(&self, wqe_idx: u32) -> Option<u32> {
        let d = wqe_idx.wrapping_sub(self.tail) & self.mask;
        (d < self.used()).then_some(d)
    }
    fn peek(&self, idx: u32) -> Option<SqWrTrk> {
        self.trk(idx).copied()
    }
}

/// The single-owner send queue.
///
/// Head and tail are free-running quanta counters (`index = counter & mask`),
/// so a full ring and an empty one are told apart and the valid bit of any
/// position is `pass & 1 == 0` (the first pass writes 1, spec data-path §3.1).
///
/// Invariant (checked by [`Sq::new`], fields never reassigned): `mask + 1`
/// is the ring size, `trk.len() >= mask + 1` and
/// `mem.qwords() >= (mask + 1) * 4`; the hot post path relies on it to index
/// without checks. A tracking entry has `quanta >= 1` at a WQE start (and
/// where nothing was posted yet) and 0 at an inner quantum of a WQE.
pub struct Sq<'a> {
    mem: QueueMem<'a>,
    /// The tracking array (`mask + 1` entries at least), reached through a
    /// raw pointer so a split pair ([`Sq::split_consumer`]) can share it.
    trk: NonNull<SqWrTrk>,
    _trk: PhantomData<&'a mut [SqWrTrk]>,
    log2: u8,
    mask: u32,
    head: u32,
    tail: u32,
    cap: u32,
    /// `cap`, or 0 when `lim.max_frags` is 0 (no SGE may be posted): the
    /// one-SGE hot post tests both with one compare ([`Sq::post_hot`]).
    hot_cap: u32,
    lim: SqLimits,
    qp_id: u32,
    /// Loom model only: one loom cell per tracking entry, touched by every
    /// entry read and write of this SQ and of the halves split from it, so
    /// loom sees the plain-memory array ([`Sq::loom_track_entries`]).
    #[cfg(all(test, loom))]
    loom_cells: Option<&'static [loom::cell::UnsafeCell<()>]>,
}

/// Checks an SQ configuration shared by [`Sq::new`] and the multi-producer
/// `MpSq::new`: `size` a power of two in 8..=32768 quanta, memory and
/// tracking large enough, limits within GEN_2's (spec data-path §1.1, §3).
/// Returns the usable capacity: real SQs keep 257 quanta free like the
/// vendor (`IRDMA_SQ_RING_FREE_QUANTA`); test-sized rings may fill up.
pub(crate) fn sq_config(
    size: u32,
    mem_qwords: usize,
    trk_len: usize,
    max_frags: u32,
    max_inline: u32,
) -> Result<u32, SqConfigError> {
    if !size.is_power_of_two() || !(SQ_CHUNK_QUANTA..=MAX_WQ_QUANTA).contains(&size) {
        return Err(SqConfigError::BadSize);
    }
    if mem_qwords < size as usize * QUANTUM_QWORDS {
        return Err(SqConfigError::MemoryTooSmall);
    }
    if trk_len < size as usize {
        return Err(SqConfigError::TrackingTooSmall);
    }
    if max_frags > MAX_FRAGS || max_inline as usize > inline::MAX_BYTES {
        return Err(SqConfigError::BadLimits);
    }
    Ok(if size > SQ_FREE_RESERVE { size - SQ_FREE_RESERVE } else { size })
}

impl<'a> Sq<'a> {
    /// An SQ of `size` quanta over `mem`, with one tracking entry per quantum.
    ///
    /// Real GEN_2 SQs are ≥ 512 quanta and keep 257 quanta free like the
    /// vendor (`IRDMA_SQ_RING_FREE_QUANTA`); smaller rings (test
    /// configurations only) may be filled completely.
    pub fn new(
        mem: QueueMem<'a>,
        trk: &'a mut [SqWrTrk],
        size: u32,
        max_frags: u32,
        max_inline: u32,
        qp_id: u32,
    ) -> Result<Self, SqConfigError> {
        let cap = sq_config(size, mem.qwords(), trk.len(), max_frags, max_inline)?;
        // Every tracking entry starts at one quantum; posts write 1..=8 at
        // a WQE's start and 0 at its inner quanta (`mark_inner`), which
        // `complete_at` refuses and the tail never reaches.
        for t in trk.iter_mut().take(size as usize) {
            *t = SqWrTrk { quanta: 1, ..SqWrTrk::default() };
        }
        Ok(Sq {
            mem,
            trk: NonNull::from(trk).cast(),
            _trk: PhantomData,
            log2: size.trailing_zeros() as u8,
            mask: size - 1,
            head: 0,
            tail: 0,
            cap,
            hot_cap: if max_frags == 0 { 0 } else { cap },
            lim: SqLimits { max_frags, max_inline, inline_enabled: false },
            qp_id,
            #[cfg(all(test, loom))]
            loom_cells: None,
        })
    }

    /// Loom model: from now on every tracking-entry read and write of this
    /// SQ, and of the consumer halves split from it afterwards, touches a
    /// loom cell of that entry, so loom reports an entry read and written
    /// by the two halves without a happens-before edge between them. The
    /// cells are leaked, like the models' rings.
    #[cfg(all(test, loom))]
    pub(crate) fn loom_track_entries(&mut self) {
        let cells: std::vec::Vec<_> =
            (0..=self.mask).map(|_| loom::cell::UnsafeCell::new(())).collect();
        self.loom_cells = Some(std::boxed::Box::leak(cells.into_boxed_slice()));
    }

    /// Loom model: the access to tracking entry `idx` (see
    /// [`Sq::loom_track_entries`]).
    #[cfg(all(test, loom))]
    fn loom_trk(&self, idx: u32, write: bool) {
        if let Some(c) = self.loom_cells.as_ref().and_then(|v| v.get(idx as usize)) {
            if write {
                c.with_mut(|_| ());
            } else {
                c.with(|_| ());
            }
        }
    }

    /// Allows inline posts.
    ///
    /// # Safety
    ///
    /// From now on, the `addr` of every SGE of every inline WR posted on this
    /// SQ must be a CPU address whose `length` bytes are readable for the
    /// duration of the post (the kernel's `IB_SEND_INLINE` contract). The
    /// bytes are copied with plain reads, so nothing (another thread, the
    /// device) may write them during the post: a payload in a `Dma` that
    /// may be written concurrently is copied out with its accessors first.
    pub unsafe fn enable_inline(&mut self) {
        self.lim.inline_enabled = true;
    }

    /// The posting limits.
    pub fn limits(&self) -> SqLimits {
        self.lim
    }

    /// Ring size in quanta.
    pub fn size(&self) -> u32 {
        self.mask + 1
    }

    /// QP id written to the doorbell.
    #[inline]
    pub fn qp_id(&self) -> u32 {
        self.qp_id
    }

    /// Ring index of the head (next quantum to write).
    pub fn head(&self) -> u32 {
        self.head & self.mask
    }

    /// Ring index of the tail (oldest outstanding quantum).
    #[inline]
    pub fn tail(&self) -> u32 {
        self.tail & self.mask
    }

    /// Outstanding quanta.
    #[inline]
    pub fn used(&self) -> u32 {
        self.head.wrapping_sub(self.tail)
    }

    /// Quanta a post may still use, padding included.
    pub fn free(&self) -> u32 {
        self.cap.saturating_sub(self.used())
    }

    /// The vendor's `swqe_polarity` (uk.c: flipped when a WQE lands in slot
    /// 0): the valid bit of the last quantum written, 0 before any post.
    pub fn swqe_polarity(&self) -> bool {
        self.valid_at(self.head.wrapping_sub(1))
    }

    /// The valid bit a WQE at free-running position `pos` carries.
    #[inline(always)]
    fn valid_at(&self, pos: u32) -> bool {
        (pos >> self.log2) & 1 == 0
    }

    /// The tracking entry at ring index `idx`.
    pub fn trk(&self, idx: u32) -> Option<&SqWrTrk> {
        #[cfg(all(test, loom))]
        self.loom_trk(idx & self.mask, false);
        // SAFETY: `idx & mask < size <= trk.len()` (the type's invariant);
        // the entry is not written while this shared borrow of `self` lives
        // (writes need `&mut self`; a split pair's producer never writes an
        // entry the consumer may read: `Sq::split_consumer`).
        Some(unsafe { &*self.trk_ptr(idx & self.mask) })
    }

    /// Pointer to tracking entry `idx` (`idx <= mask`).
    #[inline(always)]
    fn trk_ptr(&self, idx: u32) -> *mut SqWrTrk {
        debug_assert!(idx <= self.mask);
        // SAFETY: `idx <= mask < trk.len()`: in bounds of the array.
        unsafe { self.trk.as_ptr().add(idx as usize) }
    }

    /// Marks ring index `idx`, an inner quantum of the WQE being posted, as
    /// no WQE start (quanta 0): a CQE naming it is device garbage that
    /// [`Sq::complete_at`] refuses, where the entry left from an earlier
    /// lap would complete that lap's WR again and leave the tail inside
    /// this WQE (found by vendor-diff, seed 0xa11ce001 case 68403).
    ///
    /// # Safety
    ///
    /// `idx <= mask`, and the caller's post reserved the slot with the WQE.
    #[inline(always)]
    unsafe fn mark_inner(&mut self, idx: u32) {
        #[cfg(all(test, loom))]
        self.loom_trk(idx, true);
        // SAFETY: `idx <= mask < trk.len()` (this function's contract); the
        // slot is free, reserved like the WQE's first quantum (see `post`).
        unsafe { (&raw mut (*self.trk_ptr(idx)).quanta).write(0) };
    }

    /// The opcode in the header of the WQE at ring index `idx`.
    pub fn wqe_opcode(&self, idx: u32) -> u8 {
        let h = self.mem.read((idx & self.mask) as usize * QUANTUM_QWORDS + 3);
        sq_hdr::OPCODE.get(h) as u8
    }

    /// The ring memory (read-only use: tests and the conformance runner).
    pub fn mem(&self) -> &QueueMem<'a> {
        &self.mem
    }

    /// Posts one WQE without ringing the doorbell (uk.c: irdma_uk_* builders
    /// with `post_sq = false`): validate, reserve with NOP padding, record
    /// tracking, write the body, `dma_wmb`, write the header.
    #[inline(always)]
    pub fn post(&mut self, p: &SqPost<'_>) -> Result<PostedWqe, SqError> {
        self.post_with(p, false)
    }

    /// [`Sq::post`] with the general encoder only (tests prove the hot
    /// paths write the same WQEs).
    #[cfg(test)]
    pub(crate) fn post_general(&mut self, p: &SqPost<'_>) -> Result<PostedWqe, SqError> {
        self.post_with(p, true)
    }

    #[inline(always)]
    fn post_with(&mut self, p: &SqPost<'_>, general_only: bool) -> Result<PostedWqe, SqError> {
        let sz = size_post(p, &self.lim)?;
        let (pos, pad) = self.reserve(sz.quanta)?;
        let idx = pos & self.mask;
        #[cfg(all(test, loom))]
        self.loom_trk(idx, true);
        // SAFETY: `idx <= mask`; the slot is free (reserved above: the
        // consumer half, if any, has retired it and published that).
        unsafe {
            self.trk_ptr(idx).write(SqWrTrk {
                wr_id: p.wr_id,
                wr_len: sz.wr_len,
                quanta: sz.quanta as u8,
                signaled: p.signaled,
            })
        };
        for k in 1..sz.quanta {
            // SAFETY: a WQE is at most 8 quanta (`size_post`: 13 fragments
            // or 101 inline bytes at most, `sq_config`), `reserve` never
            // lets it cross an 8-quanta chunk (it pads with NOPs) and the
            // ring is whole chunks, so `idx + k <= mask`; the slot is
            // reserved with the WQE.
            unsafe { self.mark_inner(idx + k) };
        }
        let valid = self.valid_at(pos);
        let slot = wqe_slot(&self.mem, idx, sz.quanta);
        let hdr = if general_only {
            encode_general(p, &slot, valid, sz.quanta)
        } else {
            encode_body(p, &slot, valid, sz.quanta)
        };
        slot.publish(3, hdr);
        self.head = pos.wrapping_add(sz.quanta);
        Ok(PostedWqe { wqe_idx: idx, quanta: sz.quanta, pad, valid })
    }

    /// [`Sq::post`] for a [`HotWqe`]: same checks, tracking and stores, with
    /// what one quantum implies folded (it never crosses an 8-quanta chunk,
    /// so no NOP padding, spec data-path §1.10).
    #[inline(always)]
    pub(crate) fn post_hot(&mut self, h: &HotWqe<'_>) -> Result<(), SqError> {
        // One compare for both refusals (`hot_cap` is 0 when no SGE may be
        // posted), the same errors in the same order as `post`.
        if self.used() >= self.hot_cap {
            return Err(if self.lim.max_frags == 0 { SqError::TooManySges } else { SqError::Full });
        }
        let pos = self.head;
        let idx = (pos & self.mask) as usize;
        #[cfg(all(test, loom))]
        self.loom_trk(idx as u32, true);
        // SAFETY: `idx <= mask < size <= trk.len()`: `Sq::new` checked the
        // tracking length against the size that `mask` encodes, and neither
        // `trk` nor `mask` changes afterwards; the slot is free (see `post`:
        // `used < hot_cap <= cap`, `hot_cap` being `cap` or 0 since `new`).
        unsafe {
            self.trk_ptr(idx as u32).write(SqWrTrk {
                wr_id: h.wr_id,
                wr_len: h.sge.length,
                quanta: 1,
                signaled: h.signaled(),
            })
        };
        let valid = self.valid_at(pos);
        // SAFETY: `(idx + 1) * 4 <= size * 4 <= mem.qwords()`, checked by
        // `Sq::new` (and `mem`/`mask` never change afterwards).
        let slot = unsafe { self.mem.slot_unchecked(idx * QUANTUM_QWORDS, QUANTUM_QWORDS) };
        let hdr = encode_hot(h, &slot, valid);
        slot.publish(3, hdr);
        self.head = pos.wrapping_add(1);
        Ok(())
    }

    /// [`Sq::post`] for a [`Hot2Wqe`] when it needs no NOP padding: the
    /// same SGE-count and free-space checks, tracking and stores. Returns
    /// `false` (nothing written) when a check fails or the WQE would cross
    /// an 8-quanta chunk (spec data-path §1.10): the caller then posts the
    /// WR through [`Sq::post`], which pads or refuses it.
    #[inline(always)]
    pub(crate) fn post_hot2(&mut self, h: &Hot2Wqe) -> bool {
        let pos = self.head;
        let idx = pos & self.mask;
        if u32::from(h.sges) > self.lim.max_frags
            || idx % SQ_CHUNK_QUANTA == SQ_CHUNK_QUANTA - 1
            || self.used() + 2 > self.cap
        {
            return false;
        }
        #[cfg(all(test, loom))]
        self.loom_trk(idx, true);
        // SAFETY: `idx <= mask < size <= trk.len()` (see `post_hot`); the
        // slot is free (checked above, as in `post`).
        unsafe {
            self.trk_ptr(idx).write(SqWrTrk {
                wr_id: h.wr_id,
                wr_len: h.wr_len,
                quanta: 2,
                signaled: h.flags & sq_hdr::SIGCOMPL.prep(1) != 0,
            })
        };
        // SAFETY: `idx % 8 != 7` and the ring is whole 8-quanta chunks, so
        // `idx + 1 <= mask`; the slot is reserved with the WQE (checked
        // free above).
        unsafe { self.mark_inner(idx + 1) };
        let valid = self.valid_at(pos);
        // SAFETY: the ring size is a multiple of 8 and `idx % 8 != 7`, so
        // `idx + 2 <= size` and `(idx + 2) * 4 <= size * 4 <= mem.qwords()`
        // (checked by `Sq::new`; `mem`/`mask` never change afterwards).
        let slot =
            unsafe { self.mem.slot_unchecked(idx as usize * QUANTUM_QWORDS, 2 * QUANTUM_QWORDS) };
        let hdr = encode_hot2(h, &slot, valid);
        slot.publish(3, hdr);
        self.head = pos.wrapping_add(2);
        true
    }

    /// Reserves `quanta` quanta, writing NOP pads to the end of the current
    /// 8-quanta chunk first if the WQE would cross it (spec data-path §1.10;
    /// uk.c: irdma_qp_get_next_send_wqe). Returns the WQE's free-running
    /// position and the pad count.
    #[inline(always)]
    fn reserve(&mut self, quanta: u32) -> Result<(u32, u32), SqError> {
        let idx = self.head & self.mask;
        let room = SQ_CHUNK_QUANTA - (idx % SQ_CHUNK_QUANTA);
        let pad = if quanta <= room { 0 } else { room };
        if self.used().saturating_add(pad + quanta) > self.cap {
            return Err(SqError::Full);
        }
        for i in 0..pad {
            let pos = self.head.wrapping_add(i);
            let pi = pos & self.mask;
            #[cfg(all(test, loom))]
            self.loom_trk(pi, true);
            // SAFETY: `pi <= mask`; a reserved (free) slot, as in `post`.
            unsafe {
                self.trk_ptr(pi).write(SqWrTrk { wr_id: 0, wr_len: 0, quanta: 1, signaled: false })
            };
            write_nop_pad(&wqe_slot(&self.mem, pi, 1), self.valid_at(pos));
        }
        Ok((self.head.wrapping_add(pad), pad))
    }

    /// Rings the SQ doorbell: one 32-bit write of the QP id to WQEALLOC after
    /// a write barrier (spec data-path §4.2; uk.c: irdma_uk_qp_post_wr).
    #[inline(always)]
    pub fn ring_doorbell(&self, bar: &impl Bar) {
        wmb();
        bar.write32(regs::WQEALLOC, self.qp_id);
    }

    /// Retires through the WQE at ring index `wqe_idx` (a completion for it
    /// arrived): the tail moves past it, retiring every earlier unsignaled WQE
    /// and NOP (spec data-path §5.4). Returns its tracking entry, or `None`
    /// when `wqe_idx` is not an outstanding WQE start (device data is checked).
    ///
    /// The index is checked against the outstanding window *before* its
    /// tracking entry is read (issue #28): the entry of a free slot is the
    /// producer's to write, and on a split pair ([`Sq::split_consumer`]) the
    /// producer half may be writing it at this moment.
    #[inline]
    pub fn complete_at(&mut self, wqe_idx: u32) -> Option<SqWrTrk> {
        // An index past the ring is device garbage, not an alias of a slot
        // (the vendor indexes its tracking array with it unchecked; found by
        // vendor-diff, issue #30).
        if wqe_idx > self.mask {
            return None;
        }
        let d = wqe_idx.wrapping_sub(self.tail) & self.mask;
        let used = self.used();
        // The window: `d` quanta past the tail, on an outstanding quantum.
        if d >= used {
            return None;
        }
        // SAFETY: `wqe_idx & mask <= mask < size <= trk.len()` (the type's
        // invariant). `d < used`: the slot is outstanding, and no producer
        // writes the entry of an outstanding slot (posts write only slots
        // they reserved from the free ones, `Sq::split_consumer`).
        let e = unsafe { &*self.trk_ptr(wqe_idx & self.mask) };
        #[cfg(all(test, loom))]
        self.loom_trk(wqe_idx & self.mask, false);
        let t =
            SqWrTrk { wr_id: e.wr_id, wr_len: e.wr_len, quanta: e.quanta, signaled: e.signaled };
        // Refused in one test: `q == 0` (an inner quantum of a WQE, marked
        // by its post, not a WQE start) or `q > used - d` (the whole WQE
        // must be outstanding; `d < used`: no underflow, and `q - 1` wraps
        // to the maximum for 0). Free slots' entries are 1 or a posted
        // value, so this also refuses `d == used`: loosening the window
        // test above changes no result, it only brings back the read of a
        // free slot's entry, which the Miri and loom tests of a split pair
        // catch (`uk::tests::window`, `uk::link` loom tests).
        let q = u32::from(t.quanta);
        if q.wrapping_sub(1) >= used - d {
            return None;
        }
        self.tail = self.tail.wrapping_add(d + q);
        Some(t)
    }

    /// Retires the oldest outstanding WQE (flush replay, spec data-path §5.5)
    /// and returns its ring index, opcode and tracking entry; `None` when the
    /// SQ is empty.
    pub fn retire_oldest(&mut self) -> Option<(u32, u8, SqWrTrk)> {
        let used = self.used();
        if used == 0 {
            return None;
        }
        let idx = self.tail & self.mask;
        let t = *self.trk(idx)?;
        let q = u32::from(t.quanta).clamp(1, used);
        let opc = self.wqe_opcode(idx);
        self.tail = self.tail.wrapping_add(q);
        Some((idx, opc, t))
    }

    /// Marks everything posted as consumed (test/conformance set-up, like the
    /// vendor harness's `sq_ring.tail = sq_ring.head`).
    pub fn consume_all(&mut self) {
        self.tail = self.head;
    }

    split_positions!();

    /// The consumer half of a split pair: a second `Sq` over the same ring
    /// and tracking memory, at the same head and tail. `self` stays the
    /// producer half. See [`super::link`] for the protocol.
    ///
    /// # Safety
    ///
    /// Until one of the two is dropped: the producer half only posts
    /// (`post*`, `reserve`, `ring_doorbell`, its own counters) and the
    /// consumer half only retires (`complete_at`, `retire_oldest`,
    /// `offset_of`/`peek`/`trk` of outstanding entries, its own counters);
    /// the producer learns the consumer's tail only through
    /// `Sq::set_tail_pos` with a value the consumer published (release)
    /// after its last read of the entries it retired, read with acquire;
    /// the consumer learns the producer's head only through
    /// `Sq::set_head_pos` with a value the producer published (release)
    /// after writing the WQEs and entries below it, read with acquire.
    pub unsafe fn split_consumer(&self) -> Sq<'a> {
        Sq {
            // SAFETY: the alias lives no longer than `'a`, the memory's
            // own lifetime; ring accesses are atomic.
            mem: unsafe { self.mem.alias() },
            trk: self.trk,
            _trk: PhantomData,
            log2: self.log2,
            mask: self.mask,
            head: self.head,
            tail: self.tail,
            cap: self.cap,
            hot_cap: self.hot_cap,
            lim: self.lim,
            qp_id: self.qp_id,
            #[cfg(all(test, loom))]
            loom_cells: self.loom_cells,
        }
    }
}

// SAFETY: `Sq` owns its tracking array like the `&'a mut [SqWrTrk]` it was
// made from (which is `Send`); the ring is atomic-access memory.
unsafe impl Send for Sq<'_> {}
// SAFETY: through `&Sq` the tracking array is only read, and never written
// meanwhile (writes need `&mut Sq`; a split pair's producer writes only
// entries the consumer does not read, `Sq::split_consumer`).
unsafe impl Sync for Sq<'_> {}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

crate::error::phrases!(SqError {
    SqError::TooManySges => "more SGEs than the QP allows",
    SqError::InlineTooLong => "inline payload longer than the QP's max_inline_data",
    SqError::InlineNotEnabled => "inline requested on a QP without inline support",
    SqError::ImmNotAllowed => "immediate data on an operation that cannot carry it",
    SqError::InvalidField => "a value does not fit its WQE field",
    SqError::Full => "send queue full",
    SqError::Unsupported => "operation not supported on E810",
    SqError::NotAdmitted => "refused by the caller's admission check",
});

crate::error::phrases!(SqConfigError {
    SqConfigError::BadSize => "SQ size not a power of two in 8..=32768 quanta",
    SqConfigError::MemoryTooSmall => "SQ memory smaller than the ring",
    SqConfigError::TrackingTooSmall => "SQ tracking slice smaller than the ring",
    SqConfigError::BadLimits => "SQ max_frags above 13 or max_inline above 101",
});

#[cfg(test)]
mod tests;
