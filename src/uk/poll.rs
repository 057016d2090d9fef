//! Polling a CQ: [`CqRing::poll_fast`] (the common CQE straight into a
//! [`WorkCompletion`]) and [`CqRing::poll_one`] (every CQE, decoded into a
//! [`CqPollInfo`]), with the SQ flush replay they share. The ring itself
//! (`cq.rs`) sits below the QP; polling retires WQEs of the QP a CQE names
//! ([`QpLookup`]), so it sits above both (issue #29: memory → SQ, RQ, CQ →
//! QP → poll → link).

use irdma_hal::barrier::dma_rmb;
use irdma_hal::wqe::{cqe, op};

use super::cq::{
    CompStatus, CqPollInfo, CqRing, Fast, PollError, QueueType, ae_to_flush_code, flush_code,
};
use super::qp::{QpLookup, QpUk, wc_opcode_sq};
use super::sq::SendQueue;
use crate::wr::{WcOpcode, WcStatus, WorkCompletion};

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

impl<'a> CqRing<'a> {
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
        if ext && !self.read_ext(&mut info) {
            return Err(PollError::Empty);
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
        if dropped_for(qp, info.q_type) {
            self.consume(ext);
            return Err(PollError::NoQp);
        }
        if info.push_dropped && info.q_type == QueueType::Sq {
            // "cease posting push mode on push drop": SQ CQEs only.
            qp.push_mode = false;
            qp.push_dropped = true;
        }
        if info.error {
            q3 = self.error_status(base, q3, qp, &mut info);
        }
        info.qp_ctx = ctx;
        info.op_type = cqe::OP.get(q3) as u8;
        let wqe_idx = cqe::WQEIDX.get(q3) as u32;
        let remaining = match info.q_type {
            QueueType::Rq => complete_rq(qp, &mut info, q0, q2, q3),
            QueueType::Sq if info.comp_status == CompStatus::Flushed => {
                complete_sq_flush(qp, &mut info, wqe_idx)
            }
            QueueType::Sq => complete_sq(qp, &mut info, wqe_idx),
        };
        let remaining = match remaining {
            Ok(r) => r,
            Err(e) => {
                self.consume(ext);
                return Err(e);
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

    /// [`Self::poll_one`]'s read of a CQE's extension (the next slot, GEN_2):
    /// immediate data, UD source MAC and VLAN into `info`; `false` if the
    /// extension is not written yet.
    #[inline(always)]
    fn read_ext(&self, info: &mut CqPollInfo) -> bool {
        // GEN_2: the extension is the next slot; when that slot wrapped to
        // 0 it carries the next pass's valid bit.
        let nx = self.next(self.head_q);
        let eb = nx as usize;
        let e3 = self.mem.read(eb + 3);
        if cqe::EXT_VALID.is_set(e3) ^ (nx == 0) != self.polarity() {
            return false;
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
        true
    }

    /// [`Self::poll_one`]'s status of an error CQE (spec data-path §5.5):
    /// flushed, a UD SQ "CIE" that is no error, or unknown, into `info`;
    /// returns QW3, rewritten to the general flush cause once a specific
    /// one was reported.
    #[inline(always)]
    fn error_status<S: SendQueue>(
        &mut self,
        base: usize,
        mut q3: u64,
        qp: &QpUk<'_, S>,
        info: &mut CqPollInfo,
    ) -> u64 {
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
        q3
    }
}

/// [`CqRing::poll_one`]: whether a CQE of `qp`'s `q_type` queue is dropped
/// (`PollError::NoQp`) because the QP is being destroyed or that queue was
/// flushed in software.
#[inline(always)]
fn dropped_for<S: SendQueue>(qp: &QpUk<'_, S>, q_type: QueueType) -> bool {
    if qp.destroy_pending() {
        // uk.c: irdma_uk_cq_poll_cmpl: `!qp || qp->destroy_pending` is
        // -EFAULT with the head moved; like the kernel copy (README),
        // nothing else is filled and the CQE is not rewritten.
        return true;
    }
    let sw = qp.sw_flushed();
    // The queue was flushed in software (`QpUk::mark_sw_flushed`): its WRs
    // all completed already; a hardware CQE arriving now is dropped, never
    // a second completion (utils.c: irdma_generate_flush_completions runs
    // only once the hardware will write no more for the QP; the driver
    // cannot wait for that when the device cannot be asked to flush).
    (q_type == QueueType::Sq && sw.0) || (q_type == QueueType::Rq && sw.1)
}

/// [`CqRing::poll_one`]'s completion of a successful or failed (not
/// flushed) SQ CQE: the WR at its WQE index.
#[inline(always)]
fn complete_sq<S: SendQueue>(
    qp: &mut QpUk<'_, S>,
    info: &mut CqPollInfo,
    wqe_idx: u32,
) -> Result<Option<u32>, PollError> {
    let Some(t) = qp.sq.complete_at(wqe_idx) else {
        return Err(PollError::NoQp);
    };
    info.wr_id = t.wr_id;
    if info.comp_status == CompStatus::Success {
        info.bytes_xfered = t.wr_len;
    }
    Ok(None)
}

/// [`CqRing::poll_one`]'s completion of an RQ CQE: the receive it names, or
/// the oldest on a flush or error (replay); `Some(tail)` to park the CQE
/// on while receives remain to flush.
#[inline(always)]
fn complete_rq<S: SendQueue>(
    qp: &mut QpUk<'_, S>,
    info: &mut CqPollInfo,
    q0: u64,
    q2: u64,
    q3: u64,
) -> Result<Option<u32>, PollError> {
    let wqe_idx = cqe::WQEIDX.get(q3) as u32;
    let replay = info.comp_status != CompStatus::Success;
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
    Ok(if park && qp.rq.used() != 0 { Some(qp.rq.tail()) } else { None })
}

/// [`CqRing::poll_one`]'s completion of a flushed SQ CQE: the oldest
/// signaled WR (replay); `Some(tail)` to park the CQE on while WRs remain.
/// Out of line: only a flush gets here (code size).
#[inline(never)]
fn complete_sq_flush<S: SendQueue>(
    qp: &mut QpUk<'_, S>,
    info: &mut CqPollInfo,
    wqe_idx: u32,
) -> Result<Option<u32>, PollError> {
    if !qp.sq_flush_seen && info.minor_err != flush_code::GENERAL {
        skip_unsignaled_before(&mut qp.sq, wqe_idx);
    }
    let Some((opc, t)) = sq_replay(qp) else {
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
    Ok(Some(qp.sq.used()).filter(|u| *u != 0).map(|_| qp.sq.tail()))
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
