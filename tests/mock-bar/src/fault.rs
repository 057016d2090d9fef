//! Fault injection, counters and the trace.

use crate::mem::Fault;

/// What to break. Every countdown counts from the moment it is set:
/// `Some((0, ..))` hits the very next occurrence.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    /// Surprise removal: every register read returns all-ones, writes are
    /// dropped, no DMA happens.
    pub removed: bool,
    /// The CQP stops answering: CQPDB writes are ignored (CQPTAIL stays).
    pub cqp_hang: bool,
    /// The CQP stops answering from the Nth CQPDB write on (0 = the next):
    /// that write and every later one are ignored, as with `cqp_hang`.
    pub hang_cqp_at: Option<u32>,
    /// CQP work is started only after this many further register reads
    /// (a late completion); 0 = immediate.
    pub cqp_delay_polls: u32,
    /// Fail the Nth CQP op (not executed) with (major, minor).
    pub fail_cqp_op: Option<(u32, u16, u16)>,
    /// The next N doorbell writes (CQPDB or WQEALLOC) are lost.
    pub lose_doorbells: u32,
    /// The next N CCQ completions are not written (the op still executes).
    pub drop_cqp_completions: u32,
    /// The Nth SQ WQE executed completes with an error CQE (major, minor)
    /// and its QP goes to ERROR.
    pub fail_wqe: Option<(u32, u16, u16)>,
    /// Value of GLPE_CRITERR (0 = none; Linux treats 0x0001_024D as a
    /// non-fatal Q1 resource condition and anything else as fatal).
    pub critical_error: u32,
    /// An SQ WQE that fails with a QP-fatal AE also gets its own error CQE
    /// (major 0xFFFE = IRDMA_SRQFLUSH_RSVD_MAJOR_ERR, minor = the AE code;
    /// spec data-path §5.5) and the SQ moves past it, besides the AE.
    pub error_cqe_on_fatal: bool,
    /// FLUSH_WQES writes up to this many flush CQEs per queue, one per
    /// outstanding WQE from the head (0 or 1: one, as GEN_2; spec data-path
    /// §5.5 — GEN_3 firmware writes them all).
    pub flush_cqes_per_queue: u32,
    /// WQE index written in the first SQ flush CQE instead of the SQ head.
    pub flush_sq_wqe_idx: Option<u32>,
    /// The next successful SQ CQE is preceded by a stray copy of it whose
    /// WQE index is moved by this many quanta (modulo the SQ size): a CQE
    /// naming a WQE the driver may not have outstanding (issue #28). Not
    /// something the spec says GEN_2 does: a corrupted completion, to judge
    /// how the driver bounds a device-written index.
    pub stray_sq_cqe: Option<i64>,
    /// CQEs of this QP are held back inside the device (up to the count)
    /// and written after the next CQE of another QP on the same CQ, or at
    /// [`crate::Device::step`] — completions of QPs sharing a CQ arrive
    /// interleaved and late. (Strict mode: a deferred device's poll does not
    /// release them.)
    pub hold_cqes_of_qp: Option<(u32, u32)>,
    /// The next N SQ doorbells are acted on late: the WQEs are read at the
    /// next [`crate::Device::step`] (or the next doorbell), not at the write
    /// (strict mode; deferred devices sweep every queue anyway).
    pub late_sq_doorbells: u32,
    /// The next N CQE writes fail as a DMA fault would: nothing written,
    /// AE LCE_CQ_CATASTROPHIC (0x0702) for the CQ.
    pub fail_cqe_writes: u32,
    /// A catastrophic CQ error: the next CQE write to this CQ fails as with
    /// `fail_cqe_writes` (nothing written, AE LCE_CQ_CATASTROPHIC 0x0702
    /// for the CQ, spec control-path §8.2) and the CQ stays in error: no
    /// later CQE is written to it (each dropped and counted, as after an
    /// overflow's CQ_OPERATION_ERROR). The spec does not say what a device
    /// does with a CQ after 0x0702; the model stops using it (Linux raises
    /// IB_EVENT_CQ_ERR, after which the CQ is unusable). DESTROY_CQ still
    /// works.
    pub kill_cq: Option<u32>,
    /// The Nth frame this device sends (0 = the next) has the byte at the
    /// given offset XORed with 0x01 on the wire (after it is built and
    /// recorded in the capture as built); offsets past the end hit the
    /// last byte (the ICRC).
    pub flip_frame_byte: Option<(u32, usize)>,
    /// LAN admin queue: the Nth command from now (0 = the next) is never
    /// completed, nor any after it, until a reset (ATQH stays put).
    pub aq_hang_at: Option<u32>,
    /// LAN admin queue: firmware critical error — ATQLEN and ARQLEN read
    /// with CRIT (bit 30) and no command completes while set.
    pub aq_crit: bool,
    /// LAN admin queue: the next command with this opcode fails with this
    /// firmware return code (not executed).
    pub aq_fail_opcode: Option<(u16, u16)>,
    /// LAN admin queue: at the Nth command from now a global reset happens
    /// instead (the command never completes; the AQ is torn down and
    /// GLGEN_RSTAT / GLNVM_ULD show the reset for `LanConfig::reset_reads`
    /// reads).
    pub aq_reset_at: Option<u32>,
    /// The Nth request frame this device sends as a requester (0 = the
    /// next; READ responses and ACKs/NAKs are not counted) is lost on the
    /// wire: recorded in the capture as sent, never delivered (trace
    /// `Event::FrameLost`, counter `frames_lost`). A lost frame
    /// followed by another frame of the same message draws a PSN-sequence
    /// NAK and a go-back-N resend (wire §4.7, §4.8); the model has no ACK
    /// timer, so losing the last (or only) frame of a message ends as
    /// when nobody answers: LLP_TOO_MANY_RETRIES.
    pub drop_request_frame: Option<u32>,
    /// The Nth UD datagram this device sends (0 = the next) is lost on the
    /// wire: recorded in the capture as sent, never delivered (counter
    /// `frames_lost`); the sender's completion is a success, as UD is
    /// unreliable (wire §4.1).
    pub drop_datagram: Option<u32>,
}

fn countdown(slot: &mut Option<(u32, u16, u16)>) -> Option<(u16, u16)> {
    let (n, major, minor) = (*slot)?;
    if n == 0 {
        *slot = None;
        Some((major, minor))
    } else {
        *slot = Some((n - 1, major, minor));
        None
    }
}

impl FaultPlan {
    pub(crate) fn cqp_error_for(&mut self, _nth: u64) -> Option<(u16, u16)> {
        countdown(&mut self.fail_cqp_op)
    }
    pub(crate) fn wqe_error(&mut self) -> Option<(u16, u16)> {
        countdown(&mut self.fail_wqe)
    }
    pub(crate) fn take_lost_doorbell(&mut self) -> bool {
        if self.lose_doorbells > 0 {
            self.lose_doorbells -= 1;
            true
        } else {
            false
        }
    }
    pub(crate) fn take_dropped_cqp_completion(&mut self) -> bool {
        if self.drop_cqp_completions > 0 {
            self.drop_cqp_completions -= 1;
            true
        } else {
            false
        }
    }
}

/// Counters of device activity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Counters {
    pub mmio_reads: u64,
    pub mmio_writes: u64,
    pub cqp_doorbells: u64,
    pub cqp_ops: u64,
    pub cqp_errors: u64,
    /// CQPDB pointed past a WQE whose valid bit was not the pass polarity.
    pub cqp_invalid_wqes: u64,
    pub cqes: u64,
    pub cqes_dropped: u64,
    pub ceqes: u64,
    pub ceqes_dropped: u64,
    pub aeqes: u64,
    pub aeqes_dropped: u64,
    pub dma_faults: u64,
    pub lost_doorbells: u64,
    /// Doorbells naming no existing object.
    pub bad_doorbells: u64,
    /// SQ doorbells that found no new WQE.
    pub idle_doorbells: u64,
    pub sq_wqes: u64,
    pub rq_wqes: u64,
    /// SQ/RQ WQEs refused as malformed (bad opcode, odd ADDFRAGCNT, more
    /// than 13 SGEs, crossing an 8-quanta chunk, missing valid bit).
    pub invalid_wqes: u64,
    pub packets: u64,
    pub rnr_naks: u64,
    /// Frames the receiver dropped: malformed, bad ICRC, or destination
    /// MAC / IP / UDP port / QP / P_Key / PSN not matching its QP context
    /// (see [`crate::wire::Drop`]).
    pub wire_drops: u64,
    /// The same drops by reason.
    pub wire_drop_reasons: crate::wire::DropCounts,
    /// UD datagrams dropped for a Q_Key that is not the QP's (rocev2-wire
    /// §5.1; also counted in `wire_drops`).
    pub qkey_violations: u64,
    /// UD datagrams accepted on the wire but not delivered: no receive
    /// posted, receive too small, QP not in RTR/RTS (UD has no RNR NAK;
    /// the spec is silent on the device's counter, so this is the model's).
    pub ud_drops: u64,
    /// Request frames whose PSN was not the responder's expected PSN,
    /// executed anyway (only with `Device::set_strict_psn(false)`).
    pub psn_mismatches: u64,
    /// Request frames lost on the wire by `FaultPlan::drop_request_frame`.
    pub frames_lost: u64,
    /// PSN-sequence NAKs (syndrome 0x60) sent by this device's responders.
    pub seq_naks: u64,
    /// Request packets sent again after a PSN-sequence NAK (go-back-N).
    pub retransmitted: u64,
    /// Deferred mode: SQ work found by a sweep with no WQEALLOC change.
    pub work_without_doorbell: u64,
    /// LAN admin-queue commands completed.
    pub aq_commands: u64,
    /// Of those, completed with a nonzero return code.
    pub aq_errors: u64,
    /// ATQT writes ignored because the ring was not usable (disabled, bad
    /// length, unaligned base, tail or head out of range).
    pub aq_bad_ring: u64,
    /// ARQ events delivered.
    pub arq_events: u64,
    /// ARQ events lost (no free posted slot, ring not usable).
    pub arq_dropped: u64,
    /// Cold PF: SQ WQEs not sent because no qset is registered for the
    /// QP's qs_handle.
    pub lan_gated_wqes: u64,
    /// Cold PF: RoCE frames dropped because no VSI has the PE filter on.
    pub pe_filter_drops: u64,
}

/// One thing the device did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Event {
    RegWrite {
        off: u32,
        val: u32,
    },
    CqpCreated {
        ctx_pa: u64,
    },
    CqpNotValid {
        idx: u32,
    },
    CqpOp {
        idx: u32,
        opcode: u8,
        ret: u32,
        major: u16,
        minor: u16,
    },
    Cqe {
        cq: u32,
        slot: u32,
        w3: u64,
    },
    CqArm {
        cq: u32,
        word: u64,
    },
    Ceqe {
        ceq: u32,
        cq_ctx: u64,
    },
    /// An MSI-X vector was signalled (see [`crate::irq`]).
    Interrupt {
        vector: u32,
    },
    Aeqe {
        code: u16,
        src: u8,
        id: u32,
        written: bool,
    },
    Wqe {
        qp: u32,
        idx: u32,
        opcode: u8,
    },
    Recv {
        qp: u32,
        idx: u32,
        len: u64,
    },
    DmaFault(Fault),
    /// A LAN admin-queue command completed.
    AqCmd {
        slot: u32,
        opcode: u16,
        retval: u16,
    },
    WireDrop {
        qp: u32,
        why: crate::wire::Drop,
    },
    FrameLost {
        qp: u32,
        psn: u32,
    },
    Reset,
}
