//! A QP's data-path half (SQ + RQ + completion context) and the verbs-level
//! entry points: `post_send`, `post_recv`, `poll_cq`, `req_notify_cq`.

use irdma_hal::Bar;

use super::cq::{CompStatus, CqPollInfo, CqRing, Fast, PollError, QueueType, flush_code};
use super::rq::{Rq, RqError};
use super::sq::{Hot2Wqe, HotWqe, SendKind, SendQueue, Sq, SqError, SqOp, SqPost};
use crate::wr::{RecvWr, SendFlags, SendWr, WcOpcode, WcStatus, WorkCompletion, WrOpcode};
use irdma_hal::wqe::{frag, op};

/// The transport of a QP, as far as the data path cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum QpKind {
    /// Reliable connected (RoCEv2 RC).
    Rc,
    /// Unreliable datagram.
    Ud,
}

/// What [`QpUk::post_send_with`] does with the other half of a split QP
/// ([`super::link::QpLink`]): publish the head before ringing the doorbell,
/// and learn the consumer's tail when the ring looks full. Defined beside
/// the post that takes it; re-exported as `uk::link::Publish`.
pub trait Publish {
    /// Makes the SQ head visible to the consumer half (release).
    fn publish(&self, sq: &Sq<'_>);

    /// The SQ looked full: learn the consumer half's tail (acquire) and
    /// say whether there is anything to learn (a retry may then fit). The
    /// producer's copy of the tail is only ever behind the consumer's, so
    /// reading it only here is on the safe side: a post between refreshes
    /// sees less room, never more. This replaces a load per post with one
    /// per time the ring fills.
    fn refresh(&self, sq: &mut Sq<'_>) -> bool;

    /// Whether `wr` may be posted. Asked only on the general path, for
    /// each WR it posts: the hot shapes (`hot_from_wr`, `hot2_from_wr`)
    /// are never REG_MR, so a chain of hot WRs pays nothing for it. A
    /// refused WR stops the post at its index with
    /// [`SqError::NotAdmitted`] (the WRs before it are posted). The verbs
    /// layer checks REG_MR WRs against its fast-register records here.
    #[inline(always)]
    fn admit(&self, wr: &SendWr<'_>) -> bool {
        let _ = wr;
        true
    }
}

/// An unsplit QP: nothing to publish, nothing to learn.
impl Publish for () {
    #[inline(always)]
    fn publish(&self, _sq: &Sq<'_>) {}

    #[inline(always)]
    fn refresh(&self, _sq: &mut Sq<'_>) -> bool {
        false
    }
}

/// The data-path state of one QP. `S` is its send queue: the single-owner
/// [`Sq`] (default) or a shared `&MpSq`.
pub struct QpUk<'a, S: SendQueue = Sq<'a>> {
    /// Send queue.
    pub sq: S,
    /// Receive queue.
    pub rq: Rq<'a>,
    ctx: u64,
    /// `ctx` for the fast poll path's lookup; 0 (matches no CQE the fast
    /// path takes) for a UD QP and while `destroy_pending` is set, so the
    /// fast path needs no test of its own for either.
    fast_ctx: u64,
    kind: QpKind,
    in_error: bool,
    /// An SQ CQE reported that a push WQE was dropped (push is never used on
    /// E810; uk.c: irdma_uk_cq_poll_cmpl sets it on SQ CQEs only).
    pub push_dropped: bool,
    /// The vendor's `push_mode` ("the last WQE went through a push page").
    /// The driver never maps a push page, so nothing sets it; an SQ CQE with
    /// PSHDROP clears it as uk.c: irdma_uk_cq_poll_cmpl does.
    pub push_mode: bool,
    /// A flush CQE for the SQ reported a WR (uk.c: irdma_uk_cq_poll_cmpl sets
    /// it only after finding one; a flush CQE on an empty SQ leaves it).
    pub sq_flush_seen: bool,
    /// A flush CQE for the RQ reported a WR (same rule as `sq_flush_seen`).
    pub rq_flush_seen: bool,
    /// A flush was seen and the SQ was empty after it (uk.c:
    /// irdma_uk_cq_poll_cmpl, `sq_flush_complete`).
    pub sq_flush_complete: bool,
    /// A flush was seen and the RQ was empty after it (`rq_flush_complete`).
    pub rq_flush_complete: bool,
    /// The QP is being destroyed ([`QpUk::set_destroy_pending`]).
    destroy_pending: bool,
    /// The SQ / RQ was flushed in software ([`QpUk::mark_sw_flushed`]):
    /// every later CQE of that queue is dropped.
    sw_flushed: (bool, bool),
    /// On an RQ error CQE that is not a flush, park the CQ head and report
    /// every outstanding receive with that error (the kernel's behaviour,
    /// default `true`); `false` reports one receive and moves on (rdma-core's).
    pub park_on_rq_error: bool,
}

/// Resolves a CQE's completion context (QP context +168, echoed in CQE
/// qword +8) to the QP that owns it. A context of 0 never resolves.
pub trait QpLookup<'a, S: SendQueue = Sq<'a>> {
    /// The QP whose completion context is `ctx`.
    fn lookup(&mut self, ctx: u64) -> Option<&mut QpUk<'a, S>>;

    /// Whether a CQE for `ctx`, which [`QpLookup::lookup`] did not resolve,
    /// belongs to a live QP of this CQ that the caller did not pass: it is
    /// then left in place for a later poll (`PollError::Unlisted`) instead
    /// of being dropped as the vendor drops an unknown context.
    fn holds(&mut self, _ctx: u64) -> bool {
        false
    }

    /// [`QpLookup::lookup`] for the fast poll path: never a UD QP (its
    /// completions carry the sender's fields, which only the general path
    /// decodes) nor one being destroyed. Implementations compare
    /// [`QpUk::fast_ctx`] instead of [`QpUk::ctx`], which costs RC polls
    /// nothing. `sq` says which queue the CQE is for (else the RQ): the
    /// fast path retires on that queue only, so a split QP's consumer half
    /// (`uk::link`) need only learn that queue's producer position.
    fn lookup_fast(&mut self, ctx: u64, sq: bool) -> Option<&mut QpUk<'a, S>> {
        let _ = sq;
        self.lookup(ctx).filter(|q| q.fast_ctx == ctx)
    }

    /// The out-of-line part of [`poll_cq`] (everything but its inline first
    /// CQE): polls into `wc` and returns how many. A lookup that is a view
    /// built per call (`uk::link::Linked`) passes a copy of itself, so its
    /// caller's value never has its address taken and stays in registers
    /// on the inline path.
    #[inline(always)]
    fn poll_rest(&mut self, cq: &mut CqRing<'_>, wc: &mut [WorkCompletion]) -> usize {
        poll_cq_some(cq, self, wc)
    }
}

impl<'a, S: SendQueue> QpLookup<'a, S> for QpUk<'a, S> {
    fn lookup(&mut self, ctx: u64) -> Option<&mut QpUk<'a, S>> {
        if ctx == self.ctx { Some(self) } else { None }
    }
    fn lookup_fast(&mut self, ctx: u64, _sq: bool) -> Option<&mut QpUk<'a, S>> {
        if ctx == self.fast_ctx { Some(self) } else { None }
    }
}

impl<'a, S: SendQueue> QpLookup<'a, S> for [QpUk<'a, S>] {
    fn lookup(&mut self, ctx: u64) -> Option<&mut QpUk<'a, S>> {
        self.iter_mut().find(|q| q.ctx == ctx)
    }
    fn lookup_fast(&mut self, ctx: u64, _sq: bool) -> Option<&mut QpUk<'a, S>> {
        self.iter_mut().find(|q| q.fast_ctx == ctx)
    }
}

/// `post_send` failed at `bad_wr` (the index of the first WR not posted; the
/// ones before it are posted and the doorbell was rung for them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PostSendError {
    /// Index of the first WR not posted.
    pub bad_wr: usize,
    /// Why.
    pub kind: SqError,
}

/// `post_recv` failed at `bad_wr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PostRecvError {
    /// Index of the first WR not posted.
    pub bad_wr: usize,
    /// Why.
    pub kind: RqError,
}

/// Maps a verbs send WR to the uk post (spec data-path §6.1; verbs.c:
/// irdma_post_send): SIGNALED → signaled, FENCE → read fence (and, for
/// REG_MR, local fence too), LOCAL_INV forces the local fence.
///
/// A UD SEND carries its address in [`WrOpcode::UdSend`] (AH index, remote
/// Q_Key, remote QPN → AHID, DESTQKEY, DESTQPN); a plain `Send` on a UD QP
/// has those fields 0, and `UdSend` on an RC QP is refused; `RdmaReadInv`'s
/// `inv_key` is not encoded (the kernel does not pass it either: the device
/// invalidates the STag of the read's local SGE, spec data-path §10.12);
/// INLINE is honoured for WRITE and SEND only.
#[inline(always)]
pub fn sq_post_from_wr<'s>(wr: &SendWr<'s>, kind: QpKind) -> SqPost<'s> {
    let f = wr.flags;
    let inline = f.contains(SendFlags::INLINE);
    let sol = f.contains(SendFlags::SOLICITED);
    let sges = wr.sg_list;
    let send = |k: SendKind, stag: u32| SqOp::Send {
        kind: k,
        stag_to_inv: stag,
        qkey: 0,
        dest_qp: 0,
        ah_id: 0,
        udp_hdr: false,
        l4len: 0,
        sges,
        inline,
    };
    let mut imm = None;
    let mut local_fence = f.contains(SendFlags::LOCAL_FENCE);
    // UD QPs cannot be written to or read from (qp caps: RoCE UD =
    // SEND_WITH_IMM only): those become a refused operation.
    let rc = kind != QpKind::Ud;
    let op = match wr.opcode {
        WrOpcode::RdmaWrite { remote_addr, rkey } if rc => {
            SqOp::Write { remote_addr, rkey, solicited: sol, sges, inline }
        }
        WrOpcode::RdmaWriteImm { remote_addr, rkey, imm: i } if rc => {
            imm = Some(i);
            SqOp::Write { remote_addr, rkey, solicited: sol, sges, inline }
        }
        WrOpcode::RdmaRead { remote_addr, rkey } if rc => {
            SqOp::Read { remote_addr, rkey, local_inv: false, sges }
        }
        WrOpcode::RdmaReadInv { remote_addr, rkey, .. } if rc => {
            SqOp::Read { remote_addr, rkey, local_inv: true, sges }
        }
        WrOpcode::Send => send(SendKind { solicited: sol, invalidate: false }, 0),
        WrOpcode::SendImm { imm: i } => {
            imm = Some(i);
            send(SendKind { solicited: sol, invalidate: false }, 0)
        }
        WrOpcode::SendInv { inv_key } => {
            send(SendKind { solicited: sol, invalidate: true }, inv_key)
        }
        WrOpcode::LocalInv { inv_key } => {
            local_fence = true;
            SqOp::LocalInv { stag: inv_key }
        }
        WrOpcode::RegMr(r) => {
            local_fence |= f.contains(SendFlags::FENCE);
            SqOp::FastReg(r)
        }
        WrOpcode::UdSend { ah, remote_qpn, remote_qkey, imm: i } if !rc => {
            imm = i;
            SqOp::Send {
                kind: SendKind { solicited: sol, invalidate: false },
                stag_to_inv: 0,
                qkey: remote_qkey,
                dest_qp: remote_qpn,
                ah_id: ah,
                udp_hdr: false,
                l4len: 0,
                sges,
                inline,
            }
        }
        WrOpcode::AtomicCmpSwap | WrOpcode::AtomicFetchAdd => SqOp::Atomic,
        WrOpcode::RdmaWrite { .. }
        | WrOpcode::RdmaWriteImm { .. }
        | WrOpcode::RdmaRead { .. }
        | WrOpcode::RdmaReadInv { .. }
        | WrOpcode::UdSend { .. }
        | WrOpcode::BindMw => SqOp::BindMw,
    };
    SqPost {
        wr_id: wr.wr_id,
        op,
        signaled: f.contains(SendFlags::SIGNALED),
        read_fence: f.contains(SendFlags::FENCE),
        local_fence,
        report_rtt: false,
        imm,
    }
}

/// The [`HotWqe`] shape of a verbs WR, if it has one: one SGE, no INLINE,
/// and RDMA WRITE or READ on an RC QP, or SEND /
/// SEND_INV on any QP (a verbs `SendWr` carries no UD address, so those
/// fields are 0). Exactly what [`sq_post_from_wr`] + the general encoder
/// produce for these WRs (`verbs_hot_path_equals_general` proves it).
#[inline(always)]
pub(crate) fn hot_from_wr<'s>(wr: &SendWr<'s>, kind: QpKind) -> Option<HotWqe<'s>> {
    let f = wr.flags;
    let [sge] = wr.sg_list else { return None };
    // Inline, or a length FRAG_LEN cannot hold: the general path decides.
    if f.contains(SendFlags::INLINE) | !frag::LEN.fits(sge.length.into()) {
        return None;
    }
    let sol = f.contains(SendFlags::SOLICITED);
    // RDMA WRITE, the bulk of the data path, is one compare of the tag.
    // The `black_box(())` on the other shapes' path (no instruction, only
    // opaque to the optimiser) keeps LLVM from folding that compare back
    // into the jump table of their `match` (issue #33: 6 instructions per
    // WRITE of a chain, 1 per other shape; `core::hint::cold_path` would
    // say it directly, but is stable only since Rust 1.95, above the
    // crate's MSRV). Only the code's speed depends on it.
    let (qw2, stag, opc) = if let WrOpcode::RdmaWrite { remote_addr, rkey } = wr.opcode {
        if kind != QpKind::Rc {
            return None;
        }
        (remote_addr, rkey, if sol { op::RDMA_WRITE_SOL } else { op::RDMA_WRITE })
    } else {
        core::hint::black_box(());
        match wr.opcode {
            WrOpcode::RdmaRead { remote_addr, rkey } if kind == QpKind::Rc => {
                (remote_addr, rkey, op::RDMA_READ)
            }
            WrOpcode::Send => (0, 0, SendKind { solicited: sol, invalidate: false }.opcode()),
            WrOpcode::SendInv { inv_key } => {
                (0, inv_key, SendKind { solicited: sol, invalidate: true }.opcode())
            }
            _ => return None,
        }
    };
    Some(HotWqe { wr_id: wr.wr_id, qw2, stag, opc, sge, flags: hdr_flag_bits(f) })
}

/// The [`Hot2Wqe`] shape of a verbs WR, if it has one: no INLINE, and RDMA
/// WRITE / READ (RC QP) or SEND / SEND_INV with 2–3 SGEs, or RDMA WRITE with
/// immediate (RC QP) / SEND with immediate with 1–2 SGEs, every SGE length
/// below 2^31. Exactly what [`sq_post_from_wr`] + the general encoder
/// produce for these WRs (`verbs_hot_path_equals_general` proves it, on
/// 0xA5-filled rings).
#[inline(always)]
pub(crate) fn hot2_from_wr(wr: &SendWr<'_>, kind: QpKind) -> Option<Hot2Wqe> {
    let f = wr.flags;
    let sol = f.contains(SendFlags::SOLICITED);
    let rc = kind == QpKind::Rc;
    let write = if sol { op::RDMA_WRITE_SOL } else { op::RDMA_WRITE };
    let send = SendKind { solicited: sol, invalidate: false }.opcode();
    let (qw2, stag, opc, imm) = match wr.opcode {
        WrOpcode::RdmaWrite { remote_addr, rkey } if rc => (remote_addr, rkey, write, None),
        WrOpcode::RdmaWriteImm { remote_addr, rkey, imm } if rc => {
            (remote_addr, rkey, write, Some(imm))
        }
        WrOpcode::RdmaRead { remote_addr, rkey } if rc => (remote_addr, rkey, op::RDMA_READ, None),
        WrOpcode::Send => (0, 0, send, None),
        WrOpcode::SendImm { imm } => (0, 0, send, Some(imm)),
        WrOpcode::SendInv { inv_key } => {
            (0, inv_key, SendKind { solicited: sol, invalidate: true }.opcode(), None)
        }
        _ => return None,
    };
    let (frags, or_len, wr_len) = Hot2Wqe::frags(wr.sg_list, imm.is_some())?;
    // Inline, or a length FRAG_LEN cannot hold: the general path decides.
    if f.contains(SendFlags::INLINE) | !frag::LEN.fits(or_len.into()) {
        return None;
    }
    Some(Hot2Wqe {
        wr_id: wr.wr_id,
        qw2,
        stag,
        opc,
        imm,
        frags,
        sges: wr.sg_list.len() as u8,
        wr_len,
        flags: hdr_flag_bits(f),
    })
}

/// Header READFENCE | LOCALFENCE | SIGCOMPL for FENCE (bit 0), SIGNALED
/// (bit 1) and LOCAL_FENCE (bit 4) of a send's flags: a table indexed by
/// those three bits, built with [`HotWqe::flag_bits`] (the mapping of
/// [`sq_post_from_wr`] for non-REG_MR, non-LOCAL_INV WRs).
#[inline(always)]
fn hdr_flag_bits(f: SendFlags) -> u64 {
    const TABLE: [u64; 8] = {
        let mut t = [0; 8];
        let mut i = 0;
        while i < 8 {
            t[i] = HotWqe::flag_bits(i & 1 != 0, i & 4 != 0, i & 2 != 0);
            i += 1;
        }
        t
    };
    const _: () = assert!(SendFlags::FENCE.0 == 1 && SendFlags::SIGNALED.0 == 2);
    const _: () = assert!(SendFlags::LOCAL_FENCE.0 == 1 << 4);
    let i = (f.0 & 3) | ((f.0 >> 2) & 4);
    TABLE[i as usize & 7]
}

/// Verbs opcode of an SQ completion (spec data-path §5.6; verbs.h:
/// set_ib_wc_op_sq); `None` for opcodes the verbs never post.
pub const fn wc_opcode_sq(op_type: u8) -> Option<WcOpcode> {
    match op_type {
        op::RDMA_WRITE | op::RDMA_WRITE_SOL => Some(WcOpcode::RdmaWrite),
        op::RDMA_READ | op::RDMA_READ_LOC_INV => Some(WcOpcode::RdmaRead),
        op::SEND | op::SEND_SOL | op::SEND_INV | op::SEND_SOL_INV => Some(WcOpcode::Send),
        op::FAST_REG => Some(WcOpcode::RegMr),
        op::INV_STAG => Some(WcOpcode::LocalInv),
        _ => None,
    }
}

/// Status of a flushed completion from its flush code (spec data-path §5.6;
/// verbs.c: irdma_flush_err_to_ib_wc_status).
pub const fn flush_status(minor: u16) -> WcStatus {
    match minor {
        flush_code::PROT => WcStatus::LocProtErr,
        flush_code::REM_ACCESS => WcStatus::RemAccessErr,
        flush_code::LOC_QP_OP => WcStatus::LocQpOpErr,
        flush_code::REM_OP => WcStatus::RemOpErr,
        flush_code::LOC_LEN => WcStatus::LocLenErr,
        flush_code::GENERAL => WcStatus::WrFlushErr,
        flush_code::MW_BIND => WcStatus::MwBindErr,
        flush_code::REM_INV_REQ => WcStatus::RemInvReqErr,
        flush_code::RETRY_EXC => WcStatus::RetryExcErr,
        flush_code::RNR_RETRY_EXC => WcStatus::RnrRetryExcErr,
        _ => WcStatus::FatalErr,
    }
}

/// Converts a uk completion to a work completion (spec data-path §5.6;
/// verbs.c: irdma_process_cqe). The mapping:
///
/// * status: success → `Success`; flushed → [`flush_status`] of the minor
///   code (`FLUSH_GENERAL_ERR` → `WrFlushErr`, protection → `LocProtErr`, …);
///   any other error → `GeneralErr`; an SQ completion for an opcode the verbs
///   never post (NOP, bind, atomics) → `GeneralErr`;
/// * `vendor_err` = major << 16 | minor for errors, else 0;
/// * RQ opcode: BTH RDMA_WRITE_ONLY/LAST_WITH_IMMEDIATE (0x0B/0x09) →
///   `RecvRdmaWithImm`, else `Recv`;
/// * immediate data is a host-order integer end to end (the value the
///   sender put in its WR);
/// * invalidated rkey only on non-UD receives with CQE bit 53.
pub fn to_work_completion(i: &CqPollInfo, kind: QpKind) -> WorkCompletion {
    let mut status = match (i.error, i.comp_status) {
        (false, _) | (true, CompStatus::Success) => WcStatus::Success,
        (true, CompStatus::Flushed) => flush_status(i.minor_err),
        (true, CompStatus::Unknown) => WcStatus::GeneralErr,
    };
    let opcode = match i.q_type {
        QueueType::Sq => match wc_opcode_sq(i.op_type) {
            Some(o) => o,
            None => {
                status = WcStatus::GeneralErr;
                WcOpcode::Send
            }
        },
        QueueType::Rq => {
            if i.op_type == 0x0B || i.op_type == 0x09 {
                WcOpcode::RecvRdmaWithImm
            } else {
                WcOpcode::Recv
            }
        }
    };
    WorkCompletion {
        wr_id: i.wr_id,
        status,
        opcode,
        vendor_err: if i.error {
            (u32::from(i.major_err) << 16) | u32::from(i.minor_err)
        } else {
            0
        },
        byte_len: i.bytes_xfered,
        qp_num: i.qp_id,
        imm_data: if i.imm_valid { Some(i.imm_data) } else { None },
        invalidated_rkey: if i.q_type == QueueType::Rq && i.stag_invalid_set && kind != QpKind::Ud {
            Some(i.inv_stag)
        } else {
            None
        },
        solicited: i.solicited_event,
        ud: if kind == QpKind::Ud { Some(ud_wc(i)) } else { None },
    }
}

/// The UD fields of a completion (verbs.c: irdma_process_cqe): source QPN
/// and network type always; source MAC and VLAN (id only when non-zero,
/// priority as the service level) only on a completion without error.
/// Out of line: RC completions never call it.
#[cold]
#[inline(never)]
fn ud_wc(i: &CqPollInfo) -> crate::wr::UdWc {
    let ok = !i.error;
    let vlan = (ok && i.ud_vlan_valid).then_some(i.ud_vlan);
    crate::wr::UdWc {
        src_qp: i.ud_src_qpn,
        ipv4: i.ipv4,
        smac: (ok && i.ud_smac_valid).then(|| {
            let b = i.ud_smac.to_be_bytes();
            [b[2], b[3], b[4], b[5], b[6], b[7]]
        }),
        vlan_id: vlan.map(|v| v & 0xFFF).filter(|v| *v != 0),
        sl: vlan.map_or(0, |v| (v >> 13) as u8),
    }
}

const EMPTY_WC: WorkCompletion = WorkCompletion::EMPTY;

impl<'a, S: SendQueue> QpUk<'a, S> {
    /// A QP's data path. `ctx` is the completion context programmed into the
    /// QP context (+168); it must be non-zero and unique per CQ.
    pub fn new(sq: S, rq: Rq<'a>, ctx: u64, kind: QpKind) -> Self {
        QpUk {
            sq,
            rq,
            ctx,
            // A UD QP's CQEs carry the sender's fields: never the fast path.
            fast_ctx: if kind == QpKind::Ud { 0 } else { ctx },
            kind,
            in_error: false,
            push_dropped: false,
            push_mode: false,
            sq_flush_seen: false,
            rq_flush_seen: false,
            sq_flush_complete: false,
            rq_flush_complete: false,
            destroy_pending: false,
            sw_flushed: (false, false),
            park_on_rq_error: true,
        }
    }

    /// The completion context.
    pub fn ctx(&self) -> u64 {
        self.ctx
    }

    /// The completion context the fast poll path matches: `ctx`, or 0 for
    /// a UD QP and while the QP is being destroyed
    /// ([`QpLookup::lookup_fast`]).
    pub fn fast_ctx(&self) -> u64 {
        self.fast_ctx
    }

    /// Whether the QP is being destroyed ([`QpUk::set_destroy_pending`]).
    pub fn destroy_pending(&self) -> bool {
        self.destroy_pending
    }

    /// Marks the QP as being destroyed (or not): its CQEs are consumed and
    /// dropped ([`super::PollError::NoQp`], vendor `-EFAULT`) without
    /// touching its rings (uk.c: irdma_uk_cq_poll_cmpl, `destroy_pending`).
    /// While it is set the fast poll path's context ([`QpUk::fast_ctx`]) is
    /// 0, so those CQEs take the general path, which drops them.
    pub fn set_destroy_pending(&mut self, pending: bool) {
        self.destroy_pending = pending;
        self.update_fast_ctx();
    }

    /// `fast_ctx` from the kind, `destroy_pending` and the software-flush
    /// marks (all of which send CQEs to the general path).
    fn update_fast_ctx(&mut self) {
        let slow = self.destroy_pending
            || self.kind == QpKind::Ud
            || self.sw_flushed.0
            || self.sw_flushed.1;
        self.fast_ctx = if slow { 0 } else { self.ctx };
    }

    /// Marks the SQ (`sq`) and/or the RQ (`rq`) as flushed in software: from
    /// now on every CQE of that queue is consumed and dropped
    /// ([`super::PollError::NoQp`]) without touching the ring, so a hardware
    /// CQE that arrives after the software flush (the device could not be
    /// told to stop: a CQP that needs a reset, a dead CQ) never completes a
    /// WR a second time, nor a later WR that reuses its ring slot. A queue
    /// flushed in software stays so: its QP is in ERROR for good and every
    /// WR posted later completes through the software flush (Linux
    /// completes them with its flush worker too; utils.c:
    /// irdma_generate_flush_completions). While either mark is set
    /// [`QpUk::fast_ctx`] is 0, so the fast poll path needs no test.
    pub fn mark_sw_flushed(&mut self, sq: bool, rq: bool) {
        self.sw_flushed.0 |= sq;
        self.sw_flushed.1 |= rq;
        self.update_fast_ctx();
    }

    /// Whether the SQ / the RQ was flushed in software
    /// ([`QpUk::mark_sw_flushed`]).
    pub fn sw_flushed(&self) -> (bool, bool) {
        self.sw_flushed
    }

    /// Whether this is a UD QP.
    pub fn is_ud(&self) -> bool {
        self.kind == QpKind::Ud
    }

    /// The QP's transport.
    pub fn kind(&self) -> QpKind {
        self.kind
    }

    /// Marks the QP as in error (the control path moved it to ERROR): later
    /// posts are written but the doorbell is not rung, and
    /// [`QpUk::flush_outstanding`] completes everything with flush status
    /// (spec data-path §6.1).
    pub fn set_error(&mut self) {
        self.in_error = true;
    }

    /// Whether the QP is in error.
    pub fn in_error(&self) -> bool {
        self.in_error
    }

    /// `ib_post_recv`: posts receives in order (no doorbell exists for the RQ).
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostRecvError> {
        for (i, wr) in wrs.iter().enumerate() {
            self.rq.post(wr.wr_id, wr.sg_list).map_err(|kind| PostRecvError { bad_wr: i, kind })?;
        }
        Ok(())
    }

    /// Completes every outstanding WR of a QP in error with a flush status
    /// (`WrFlushErr`), SQ first (NOP pads skipped), then RQ; returns how many
    /// entries of `out` it filled. Call it once the CQ holds no more CQEs for
    /// this QP (what the kernel's flush worker does, spec data-path §5.5);
    /// hardware flush CQEs and this share the SQ/RQ tails, so every posted WR
    /// completes exactly once. Does nothing unless [`QpUk::set_error`] was called.
    pub fn flush_outstanding(&mut self, out: &mut [WorkCompletion]) -> usize {
        if !self.in_error {
            return 0;
        }
        self.mark_sw_flushed(true, true);
        let mut n = 0;
        let qp_num = self.sq.qp_id();
        let flushed = |wr_id, opcode, byte_len| WorkCompletion {
            wr_id,
            status: WcStatus::WrFlushErr,
            opcode,
            vendor_err: (1 << 16) | u32::from(flush_code::GENERAL),
            byte_len,
            qp_num,
            ..EMPTY_WC
        };
        while n < out.len() && self.sq.used() != 0 {
            let Some((_, opc, t)) = self.sq.retire_oldest() else { break };
            if opc == op::NOP && !t.signaled {
                continue;
            }
            if let Some(slot) = out.get_mut(n) {
                *slot = flushed(t.wr_id, wc_opcode_sq(opc).unwrap_or(WcOpcode::Send), t.wr_len);
                n += 1;
            }
        }
        while n < out.len() {
            let Some(w) = self.rq.retire_oldest() else { break };
            if let Some(slot) = out.get_mut(n) {
                *slot = flushed(w, WcOpcode::Recv, 0);
                n += 1;
            }
        }
        n
    }
}

impl<'a> QpUk<'a, Sq<'a>> {
    /// `ib_post_send`: posts `wrs` in order and rings the doorbell once if any
    /// was posted. Stops at the first WR that cannot be posted and returns its
    /// index; the ones before it stay posted (verbs.c: irdma_post_send).
    #[inline(always)]
    pub fn post_send(&mut self, bar: &impl Bar, wrs: &[SendWr<'_>]) -> Result<(), PostSendError> {
        self.post_send_with(bar, wrs, &())
    }

    /// [`QpUk::post_send`] that publishes the SQ head through `p` before
    /// the doorbell (the producer half of a split QP, [`super::link`]).
    #[inline(always)]
    pub fn post_send_with<P: Publish>(
        &mut self,
        bar: &impl Bar,
        wrs: &[SendWr<'_>],
        p: &P,
    ) -> Result<(), PostSendError> {
        // One-quantum hot WRs are posted inline here; the first WR of
        // another shape (or the first refusal) hands the rest of the chain
        // to `post_send_more`.
        let kind = self.kind;
        let mut i = 0;
        while let Some(wr) = wrs.get(i) {
            let Some(h) = hot_from_wr(wr, kind) else { break };
            if self.sq.post_hot(&h).is_err() {
                break;
            }
            i += 1;
        }
        if i < wrs.len() {
            return self.post_send_more(bar, wrs, i, p);
        }
        if i != 0 {
            self.finish(bar, p);
        }
        Ok(())
    }

    /// The end of a post: the positions published to the consumer half,
    /// then the doorbell unless the QP is in ERROR (its WQEs wait for the
    /// flush).
    #[inline(always)]
    fn finish<B: Bar, P: Publish>(&self, bar: &B, p: &P) {
        p.publish(&self.sq);
        if !self.in_error {
            self.sq.ring_doorbell(bar);
        }
    }

    /// `post_send` from WR `start` on (the ones before it are posted): the
    /// two-quanta hot shape ([`Hot2Wqe`]: 2–3 SGEs, immediate) without
    /// `SqPost` or the general encoder; the first WR of another shape, or
    /// the first one `post_hot2` declines (a refusal, a chunk pad), hands
    /// the rest to `post_send_rest`, which re-checks it in full.
    #[inline(never)]
    fn post_send_more<B: Bar, P: Publish>(
        &mut self,
        bar: &B,
        wrs: &[SendWr<'_>],
        start: usize,
        p: &P,
    ) -> Result<(), PostSendError> {
        let kind = self.kind;
        let mut i = start;
        while let Some(wr) = wrs.get(i) {
            if !hot2_from_wr(wr, kind).is_some_and(|h| self.sq.post_hot2(&h)) {
                return self.post_send_rest(bar, wrs, i, p);
            }
            i += 1;
        }
        self.finish(bar, p);
        Ok(())
    }

    /// `post_send` from WR `start` on (the ones before it are posted): every
    /// WR through [`Sq::post`] and the general encoder (a hot WR encodes the
    /// same either way), then the doorbell if anything was posted.
    #[inline(never)]
    fn post_send_rest<B: Bar, P: Publish>(
        &mut self,
        bar: &B,
        wrs: &[SendWr<'_>],
        start: usize,
        p: &P,
    ) -> Result<(), PostSendError> {
        let mut res = Ok(());
        let mut posted = start;
        for (i, wr) in wrs.iter().enumerate().skip(start) {
            if !p.admit(wr) {
                res = Err(PostSendError { bad_wr: i, kind: SqError::NotAdmitted });
                break;
            }
            let post = sq_post_from_wr(wr, self.kind);
            // A split QP's producer learns the consumer's tail only when
            // the ring looks full (`Publish::refresh`), then tries again.
            let mut refreshed = false;
            let r = loop {
                let r = self.sq.post(&post);
                if matches!(r, Err(SqError::Full)) && !refreshed && p.refresh(&mut self.sq) {
                    refreshed = true;
                    continue;
                }
                break r;
            };
            if let Err(kind) = r {
                res = Err(PostSendError { bad_wr: i, kind });
                break;
            }
            posted += 1;
        }
        if posted != 0 {
            self.finish(bar, p);
        }
        res
    }
}

/// `ib_poll_cq`: fills `wc` with up to `wc.len()` completions and returns how
/// many. CQEs that report nothing (unknown QP, drained flush) are consumed
/// and skipped.
#[inline(always)]
pub fn poll_cq<'q, S: SendQueue, L: QpLookup<'q, S> + ?Sized>(
    cq: &mut CqRing<'_>,
    qps: &mut L,
    wc: &mut [WorkCompletion],
) -> usize {
    // The common polls are inline: "nothing there" is a single valid-bit
    // test, and one common CQE is `CqRing::poll_fast`; the rest is out of line.
    let Some(first) = wc.first_mut() else { return 0 };
    match cq.poll_fast(qps) {
        Fast::Empty => 0,
        Fast::Done(w) => {
            *first = w;
            match wc.get_mut(1..) {
                Some(rest) if !rest.is_empty() => 1 + qps.poll_rest(cq, rest),
                _ => 1,
            }
        }
        Fast::Slow => qps.poll_rest(cq, wc),
    }
}

#[inline(never)]
pub(crate) fn poll_cq_some<'q, S: SendQueue, L: QpLookup<'q, S> + ?Sized>(
    cq: &mut CqRing<'_>,
    qps: &mut L,
    wc: &mut [WorkCompletion],
) -> usize {
    poll_cq_with(cq, qps, wc, false)
}

/// The `poll_cq` loop: each CQE through [`CqRing::poll_fast`], or through the
/// general [`CqRing::poll_one`] + [`to_work_completion`] when the fast path
/// declines it (or always, with `general_only`, for tests).
#[inline(always)]
fn poll_cq_with<'q, S: SendQueue, L: QpLookup<'q, S> + ?Sized>(
    cq: &mut CqRing<'_>,
    qps: &mut L,
    wc: &mut [WorkCompletion],
    general_only: bool,
) -> usize {
    let mut n = 0;
    for slot in wc.iter_mut() {
        loop {
            if !general_only {
                match cq.poll_fast(qps) {
                    Fast::Done(w) => {
                        *slot = w;
                        break;
                    }
                    Fast::Empty => return n,
                    Fast::Slow => {}
                }
            }
            match cq.poll_one(qps) {
                Ok(info) => {
                    let kind = qps.lookup(info.qp_ctx).map_or(QpKind::Rc, |q| q.kind());
                    *slot = to_work_completion(&info, kind);
                    break;
                }
                Err(PollError::Empty | PollError::Unlisted) => return n,
                Err(PollError::Drained | PollError::NoQp) => {}
            }
        }
        n += 1;
    }
    n
}

/// [`poll_cq`] through the general decoder only (tests compare the two).
#[cfg(test)]
pub(crate) fn poll_cq_general<'q, S: SendQueue, L: QpLookup<'q, S> + ?Sized>(
    cq: &mut CqRing<'_>,
    qps: &mut L,
    wc: &mut [WorkCompletion],
) -> usize {
    poll_cq_with(cq, qps, wc, true)
}

/// `ib_req_notify_cq`: `solicited_only` = `IB_CQ_SOLICITED` alone, else
/// next completion (spec data-path §5.7).
pub fn req_notify_cq(cq: &mut CqRing<'_>, bar: &impl Bar, solicited_only: bool) {
    cq.request_notification(bar, solicited_only);
}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

crate::error::wrapping!(PostSendError, "send WR {} not posted: {}", bad_wr, kind);
crate::error::wrapping!(PostRecvError, "receive WR {} not posted: {}", bad_wr, kind);
