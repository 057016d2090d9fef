//! QPs: CQP QP ops, SQ processing on WQEALLOC, RQ consumption, the wire,
//! and protection checks on every local and remote access.
//!
//! Sources: spec control-path §4.3.4–4.3.6, §4.3.25, §5, §6.2, §7.2, §7.4,
//! §8.2; data-path §1, §2, §5.

use crate::bits::{bit, get, le64, put};
use crate::cqp::{FlushWqe, QpWqe};
use crate::device::{Completion, Device, OpResult, Pbl, QueueMem};
use crate::fault::Event;
use crate::hmc;
use crate::regs::{ae, err, qps};
use crate::wire::{self, op as bop, syndrome};
use crate::wqe::{self, Frag, Payload, SqOp};

/// Access rights bits (spec control-path §5.3).
pub mod rights {
    /// Local read.
    pub const LOCAL_READ: u8 = 0x01;
    /// Local write.
    pub const LOCAL_WRITE: u8 = 0x02;
    /// Remote read.
    pub const REMOTE_READ: u8 = 0x04;
    /// Remote write.
    pub const REMOTE_WRITE: u8 = 0x08;
}

/// IB BTH opcodes the model reports in RQ CQEs (GEN_2 RoCE reports the BTH
/// opcode, spec data-path §5.6; values from include/rdma/ib_pack.h).
pub mod bth {
    /// SEND_ONLY.
    pub const SEND_ONLY: u8 = 0x04;
    /// SEND_ONLY_WITH_IMMEDIATE.
    pub const SEND_ONLY_IMM: u8 = 0x05;
    /// RDMA_WRITE_ONLY_WITH_IMMEDIATE.
    pub const WRITE_ONLY_IMM: u8 = 0x0B;
    /// SEND_ONLY_WITH_INVALIDATE.
    pub const SEND_ONLY_INV: u8 = 0x17;
}

/// The fields of one CQE as the device writes it (spec data-path §5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[allow(missing_docs)]
pub struct Cqe {
    /// PAYLDLEN (+0 [31:0]).
    pub payload_len: u32,
    /// PSN/RTT/timestamp (+0 [63:32]); the model writes 0.
    pub stat_raw: u32,
    /// QP completion context (+8).
    pub ctx: u64,
    /// Invalidated STag or UD source QPN (+16 [31:0]).
    pub inv_stag: u32,
    /// QP id (+16 [55:32]).
    pub qp_id: u32,
    pub minor: u16,
    pub major: u16,
    /// WQE index in quanta (+24 [46:32]).
    pub wqe_idx: u32,
    pub ext: bool,
    pub push_dropped: bool,
    pub srq: bool,
    /// STAG (RC) / IPV4 (UD), +24 [53].
    pub stag_or_ipv4: bool,
    pub solicited: bool,
    pub error: bool,
    pub op: u8,
    /// SQ (1) or RQ (0) completion.
    pub sq: bool,
    pub valid: bool,
}

impl Cqe {
    /// An error CQE of QP `qp_id` (completion context `ctx`) for the WQE
    /// at `wqe_idx` with `(major, minor)` (data-path §5.5).
    fn error(ctx: u64, qp_id: u32, (major, minor): (u16, u16), wqe_idx: u32) -> Self {
        Self { ctx, qp_id, minor, major, wqe_idx, error: true, ..Self::default() }
    }
}

impl Cqe {
    /// The four words.
    pub fn words(&self) -> [u64; 4] {
        [
            self.payload_len as u64 | (self.stat_raw as u64) << 32,
            self.ctx,
            self.inv_stag as u64 | put(self.qp_id as u64, 55, 32),
            put(self.minor as u64, 15, 0)
                | put(self.major as u64, 31, 16)
                | put(self.wqe_idx as u64, 46, 32)
                | put(self.ext as u64, 50, 50)
                | put(self.push_dropped as u64, 51, 51)
                | put(self.srq as u64, 52, 52)
                | put(self.stag_or_ipv4 as u64, 53, 53)
                | put(self.solicited as u64, 54, 54)
                | put(self.error as u64, 55, 55)
                | put(self.op as u64, 61, 56)
                | put(self.sq as u64, 62, 62)
                | put(self.valid as u64, 63, 63),
        ]
    }

    /// The extension words of an extended CQE carrying only an immediate.
    pub fn ext_imm_words(imm: u64, valid: bool) -> [u64; 4] {
        [imm, 0, 0, put(1, 62, 62) | put(valid as u64, 63, 63)]
    }

    /// The extension of a UD receive CQE (spec data-path §5.2): immediate
    /// (+0), source MAC +16 [47:0], VLAN tag +16 [63:48], and the
    /// UDVLANVALID [60] / UDSMACVALID [61] / IMMVALID [62] flags at +24.
    pub fn ext_ud_words(imm: Option<u64>, smac: u64, vlan: Option<u16>, valid: bool) -> [u64; 4] {
        [
            imm.unwrap_or(0),
            0,
            put(smac, 47, 0) | put(vlan.unwrap_or(0) as u64, 63, 48),
            put(vlan.is_some() as u64, 60, 60)
                | put(1, 61, 61)
                | put(imm.is_some() as u64, 62, 62)
                | put(valid as u64, 63, 63),
        ]
    }
}

/// A QP as the device keeps it.
#[derive(Clone, Debug)]
pub struct Qp {
    /// QP number.
    pub id: u32,
    /// Hardware state (spec control-path §7.4).
    pub state: u8,
    /// SQ memory.
    pub sq: QueueMem,
    /// SQ size in quanta.
    pub sq_quanta: u32,
    /// RQ memory.
    pub rq: QueueMem,
    /// RQ WQEs.
    pub rq_wqes: u32,
    /// log2(RQ WQE size in quanta).
    pub rq_shift: u32,
    /// Shadow area PA.
    pub shadow: u64,
    /// PD.
    pub pd: u32,
    /// Send CQ.
    pub tx_cq: u32,
    /// Receive CQ.
    pub rx_cq: u32,
    /// Remote QPN.
    pub dest_qp: u32,
    /// Destination IPv4 (or IPv6 word 3).
    pub dest_ip: u32,
    /// Local IPv4 (or IPv6 word 3).
    pub local_ip: u32,
    /// ARP index of the next hop.
    pub arp_idx: u16,
    /// ORDSIZE (@160 [7:0]), taken only with ORDVALID (spec control-path
    /// §4.3.5); 0 until then, and a READ with ORD 0 fails.
    pub ord: u8,
    /// IRDSIZE (@160 [18:16]) as encoded in the context: 0 = 4, 1 = 16,
    /// 2 = 64, 3 = 128, 4 = 256 read-response entries (spec control-path
    /// §7.2; Linux writes roundup_pow2(2 × IRD), ctrl.c:
    /// irdma_sc_get_encoded_ird_size). Taken from every context the QP is
    /// created or modified with; the model keeps it for tests (what the CM
    /// negotiated reaches the device) and does not bound incoming READs by
    /// it (the spec does not say what the device does past it).
    pub ird_enc: u8,
    /// SNDMSS (@48 [29:16]).
    pub mss: u32,
    /// QSHANDLE (@176 [25:16]).
    pub qs_handle: u16,
    /// Completion context (@168).
    pub compl_ctx: u64,
    /// RNR retry limit (7 = infinite).
    pub rnr_retry: u8,
    /// Transport retry limit: REXMIT_THRESH @128 [53:48] (wire §1.9, §4.8:
    /// spent by PSN-sequence NAKs; 7 is not infinite).
    pub retry_cnt: u8,
    /// Fast-register enable.
    pub fastreg: bool,
    /// Remote read enable (RDOK).
    pub rd_ok: bool,
    /// Remote write enable (WRRDRSPOK).
    pub wr_ok: bool,
    /// Next SQ quantum the device processes.
    pub sq_tail: u32,
    /// Expected SQ valid bit.
    pub sq_pol: bool,
    /// Next RQ WQE the device consumes.
    pub rq_head: u32,
    /// Expected RQ valid bit.
    pub rq_pol: bool,
    /// RNR NAKs seen for the WQE at `sq_tail`.
    pub rnr_count: u8,
    /// The WQE at `sq_tail` waits for the peer to post a receive.
    pub stalled: bool,
    /// Wire fields from the context (wire §1.9); `dst_mac` is filled from
    /// the ARP entry when a frame is sent.
    pub path: wire::Path,
    /// Next request PSN: PSNNXT @80 [23:0], taken on RTR → RTS.
    pub psn_nxt: u32,
    /// Expected request PSN: EPSN @88 [23:0], taken on entering RTR.
    pub epsn: u32,
    /// Responder message sequence number (wire §4.3), 0 at RTR.
    pub msn: u32,
    /// Responder: packets of a multi-packet message accepted in sequence
    /// before a gap (kept until the requester resends the rest, wire §4.7).
    pub rx_partial: Vec<wire::Packet>,
    /// Responder: a PSN-sequence NAK was sent for the current ePSN; further
    /// out-of-sequence packets are dropped silently until the ePSN arrives
    /// (wire §4.7).
    pub nak_latched: bool,
    /// Responder: the READ requests answered most recently (at most
    /// [`READ_HISTORY`]), kept so that a duplicate of one is answered again
    /// (wire §4.7).
    pub reads: Vec<SavedRead>,
    /// QPTYPE of its CREATE_QP: 3 RoCE RC, 4 RoCE UD (the GSI QP is a UD
    /// QP with id 1).
    pub qp_type: u8,
    /// Q_Key (@64 [63:32]); UD receives must carry it (wire §5.1).
    pub qkey: u32,
}

impl Qp {
    /// The RQ head moves past one receive (its valid-bit polarity flips at
    /// the wrap).
    fn advance_rq(&mut self) {
        self.rq_head = (self.rq_head + 1) % self.rq_wqes.max(1);
        if self.rq_head == 0 {
            self.rq_pol = !self.rq_pol;
        }
    }
}

/// How many answered READ requests a responder QP remembers for duplicate
/// detection. Model choice: rxe keeps `max_dest_rd_atomic` of them (RXE
/// `rxe_resp.c → rxe_prepare_res`); GEN_2's IRDSIZE (context @160
/// [18:16]) is not decoded by the model, so it keeps a fixed 16.
pub const READ_HISTORY: usize = 16;

/// A READ request a responder QP answered (wire §4.6, §4.7): its first
/// PSN, the PSNs it consumed, and its RETH.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SavedRead {
    /// PSN of the READ request (= of its first response).
    pub psn: u32,
    /// PSNs it consumed (its response packets, at least 1).
    pub n: u32,
    /// RETH virtual address.
    pub addr: u64,
    /// RETH R_Key.
    pub rkey: u32,
    /// RETH DMA length.
    pub len: u64,
}

/// What crosses the wire.
#[derive(Clone, Debug)]
pub(crate) enum Request {
    Write { src_qpn: u32, addr: u64, rkey: u32, data: Vec<u8>, imm: Option<u64>, solicited: bool },
    Send { src_qpn: u32, data: Vec<u8>, imm: Option<u64>, solicited: bool, invalidate: Option<u32> },
    Read { src_qpn: u32, addr: u64, rkey: u32, len: u64 },
}

/// The responder's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Response {
    Ack,
    ReadData(Vec<u8>),
    RnrNak,
    /// Remote access error (bad rkey, rights, bounds).
    NakAccess,
    /// Invalid request (wrong QP, state).
    NakInvalid,
    /// Remote operational error (e.g. receive too small).
    NakOp,
    /// PSN sequence error: the responder expects this PSN (wire §4.4).
    NakSeq(u32),
}

/// What a responder made of the request frames that reached it.
enum Rx {
    /// A whole message, in sequence (packets accepted earlier included).
    Message(Vec<wire::Packet>),
    /// A gap: answer with one PSN-sequence NAK carrying this (expected)
    /// PSN (wire §4.7).
    Gap(u32),
    /// Only duplicates of SEND/WRITE packets already executed: answer with
    /// an ACK for ePSN − 1 and the current MSN, without executing them
    /// again (wire §4.7, rxe `rxe_resp.c: duplicate_request`).
    Duplicate,
    /// A duplicate READ request that is the same as, or a subset of, a
    /// READ already answered: its responses are generated again from the
    /// duplicate's PSN (wire §4.7, §4.6).
    ReplayRead(SavedRead),
    /// A packet in the middle of a message asked for an ACK (AckReq, wire
    /// §4.3): ACK its PSN, with the current MSN.
    AckMid(u32),
    /// A packet at the ePSN that cannot follow the packets before it (a
    /// MIDDLE/LAST with no FIRST, a FIRST/ONLY inside a message, another
    /// kind's MIDDLE/LAST) or an opcode the model does not execute as a
    /// responder: invalid request, NAK 0x61 with its PSN (wire §4.4).
    Invalid(u32),
    /// Nothing to answer: every frame dropped, or the message is not
    /// complete yet.
    Nothing,
}

/// A packet for another node (kept for diagnostics by the fabric).
#[derive(Clone, Debug)]
pub struct Packet {
    /// Destination IP.
    pub dst_ip: u32,
    /// Destination QPN.
    pub dst_qpn: u32,
}

/// Other devices reachable from this one.
pub(crate) trait Peers {
    /// A UD datagram: handed to the device whose UD QP owns its destination
    /// MAC. `Some(delivered)` if a device claimed it, `None` if none did
    /// (the datagram is lost).
    fn deliver_datagram(&mut self, frame: &[u8]) -> Option<bool> {
        let _ = frame;
        None
    }

    /// Puts `frames` (one request, wire §4.1 segmented) on the wire to the
    /// device owning `(ip, qpn)`; returns that device's answer and the
    /// frames carrying it, or `None` if no such QP exists anywhere or the
    /// receiver dropped the frames (the packet is lost).
    fn deliver(
        &mut self,
        ip: u32,
        qpn: u32,
        src_qpn: u32,
        frames: &[Vec<u8>],
    ) -> Option<(Response, Vec<Vec<u8>>)>;
}

/// No other devices.
pub(crate) struct NoPeers;

impl Peers for NoPeers {
    fn deliver(
        &mut self,
        _ip: u32,
        _qpn: u32,
        _src_qpn: u32,
        _frames: &[Vec<u8>],
    ) -> Option<(Response, Vec<Vec<u8>>)> {
        None
    }
}

/// A 48-bit MAC (byte 0 most significant, as MANAGE_ARP and MACADDRESS
/// hold it) as bytes.
fn mac_bytes(v: u64) -> [u8; 6] {
    let b = v.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

/// 24-bit PSN arithmetic (wire §4.2).
fn psn_add(p: u32, n: u32) -> u32 {
    p.wrapping_add(n) & 0xFF_FFFF
}

/// Serial PSN order (wire §4.2): whether `a` is later than `b`.
fn psn_later(a: u32, b: u32) -> bool {
    let d = a.wrapping_sub(b) & 0xFF_FFFF;
    d != 0 && d < 1 << 23
}

/// Whether a request opcode ends a message (LAST/ONLY kinds and the
/// one-packet READ Request, wire §2).
fn ends_message(opcode: u8) -> bool {
    use bop::*;
    matches!(
        opcode,
        SEND_LAST
            | SEND_LAST_IMM
            | SEND_ONLY
            | SEND_ONLY_IMM
            | WRITE_LAST
            | WRITE_LAST_IMM
            | WRITE_ONLY
            | WRITE_ONLY_IMM
            | READ_REQ
            | SEND_LAST_INV
            | SEND_ONLY_INV
    )
}

/// Whether request opcode `op` may follow `prev`, the last packet taken of
/// an unfinished message (`None`: none), in one RC request stream (wire
/// §2, §4.1; RXE `rxe_resp.c → check_op_seq`). The model's responder
/// executes SEND, WRITE and READ only: anything else is an invalid request.
fn op_follows(prev: Option<u8>, op: u8) -> bool {
    use bop::*;
    match prev {
        Some(SEND_FIRST | SEND_MIDDLE) => {
            matches!(op, SEND_MIDDLE | SEND_LAST | SEND_LAST_IMM | SEND_LAST_INV)
        }
        Some(WRITE_FIRST | WRITE_MIDDLE) => {
            matches!(op, WRITE_MIDDLE | WRITE_LAST | WRITE_LAST_IMM)
        }
        _ => matches!(
            op,
            SEND_FIRST
                | SEND_ONLY
                | SEND_ONLY_IMM
                | SEND_ONLY_INV
                | WRITE_FIRST
                | WRITE_ONLY
                | WRITE_ONLY_IMM
                | READ_REQ
        ),
    }
}

/// Number of packets of an `len`-byte message at `mss` (wire §4.1).
fn packets(len: u64, mss: u32) -> u32 {
    len.div_ceil(mss.max(1) as u64).max(1) as u32
}

/// Segments one request into transport packets starting at `psn` (wire
/// §4.1, §2; AckReq on the last packet, §4.3; SE only on the last packet
/// of a SEND or of a WRITE with immediate, §1.6). Returns the packets and
/// the PSNs the request consumes (a READ: one per response packet, §4.2).
fn segment(req: &Request, dest_qp: u32, psn: u32, mss: u32) -> (Vec<wire::Packet>, u32) {
    let base = wire::Packet { dest_qp, ..wire::Packet::default() };
    // One packet per MSS of `d` (one empty packet for no data), each with
    // its PSN, AckReq on the last, and its opcode out of the message kind's
    // `[ONLY, FIRST, MIDDLE, LAST]`; `shape(first, last, packet)` adds the
    // headers.
    let each =
        |d: &[u8], ops: [u8; 4], shape: &dyn Fn(bool, bool, wire::Packet) -> wire::Packet| {
            let parts: Vec<Vec<u8>> = if d.is_empty() {
                vec![Vec::new()]
            } else {
                d.chunks(mss.max(1) as usize).map(<[u8]>::to_vec).collect()
            };
            let n = parts.len();
            let v: Vec<wire::Packet> = parts
                .into_iter()
                .enumerate()
                .map(|(i, payload)| {
                    let (first, last) = (i == 0, i + 1 == n);
                    let opcode = match (first, last) {
                        (true, true) => ops[0],
                        (true, false) => ops[1],
                        (false, false) => ops[2],
                        (false, true) => ops[3],
                    };
                    let p = wire::Packet {
                        opcode,
                        ack_req: last,
                        psn: psn_add(psn, i as u32),
                        payload,
                        ..base.clone()
                    };
                    shape(first, last, p)
                })
                .collect();
            (v, n as u32)
        };
    match req {
        Request::Read { addr, rkey, len, .. } => {
            let p = wire::Packet {
                opcode: bop::READ_REQ,
                ack_req: true,
                psn,
                reth: Some((*addr, *rkey, *len as u32)),
                ..base
            };
            (vec![p], packets(*len, mss))
        }
        Request::Write { addr, rkey, data, imm, solicited, .. } => {
            let (only, last_op) = match imm {
                Some(_) => (bop::WRITE_ONLY_IMM, bop::WRITE_LAST_IMM),
                None => (bop::WRITE_ONLY, bop::WRITE_LAST),
            };
            let ops = [only, bop::WRITE_FIRST, bop::WRITE_MIDDLE, last_op];
            each(data, ops, &|first, last, p| wire::Packet {
                se: last && imm.is_some() && *solicited,
                reth: first.then_some((*addr, *rkey, data.len() as u32)),
                imm: imm.filter(|_| last).map(|v| v as u32),
                ..p
            })
        }
        Request::Send { data, imm, solicited, invalidate, .. } => {
            let (only, last_op) = match (invalidate, imm) {
                (Some(_), _) => (bop::SEND_ONLY_INV, bop::SEND_LAST_INV),
                (None, Some(_)) => (bop::SEND_ONLY_IMM, bop::SEND_LAST_IMM),
                (None, None) => (bop::SEND_ONLY, bop::SEND_LAST),
            };
            each(data, [only, bop::SEND_FIRST, bop::SEND_MIDDLE, last_op], &|_, last, p| {
                wire::Packet {
                    se: last && *solicited,
                    imm: imm.filter(|_| last && invalidate.is_none()).map(|v| v as u32),
                    ieth: invalidate.filter(|_| last),
                    ..p
                }
            })
        }
    }
}

/// Reassembles a request from its packets, enforcing the opcode sequence
/// and the lengths (wire §4.1: FIRST/MIDDLE exactly the MSS, LAST 1..MSS,
/// ONLY ≤ MSS, a WRITE's total equal to its RETH length). `None` = the
/// sequence is not one well-formed message (model: dropped and counted;
/// a real responder would NAK "invalid request", wire §4.4).
fn reassemble(pkts: &[wire::Packet], src_qpn: u32, mss: u32) -> Option<Request> {
    let (first, last) = (pkts.first()?, pkts.last()?);
    let n = pkts.len();
    for (i, p) in pkts.iter().enumerate() {
        let full = i + 1 < n;
        if (full && p.payload.len() != mss as usize) || p.payload.len() > mss as usize {
            return None;
        }
        if !full && n > 1 && p.payload.is_empty() {
            return None;
        }
    }
    let data: Vec<u8> = pkts.iter().flat_map(|p| p.payload.iter().copied()).collect();
    let mid_ok = |want: u8| pkts[1..n.saturating_sub(1)].iter().all(|p| p.opcode == want);
    match first.opcode {
        bop::READ_REQ if n == 1 => {
            let (addr, rkey, len) = first.reth?;
            Some(Request::Read { src_qpn, addr, rkey, len: len as u64 })
        }
        bop::WRITE_ONLY | bop::WRITE_ONLY_IMM | bop::WRITE_FIRST => {
            let ok = if n == 1 {
                first.opcode != bop::WRITE_FIRST
            } else {
                first.opcode == bop::WRITE_FIRST
                    && mid_ok(bop::WRITE_MIDDLE)
                    && matches!(last.opcode, bop::WRITE_LAST | bop::WRITE_LAST_IMM)
            };
            let (addr, rkey, len) = first.reth?;
            if !ok || len as usize != data.len() {
                return None;
            }
            Some(Request::Write {
                src_qpn,
                addr,
                rkey,
                data,
                imm: last.imm.map(u64::from),
                solicited: last.se,
            })
        }
        bop::SEND_ONLY | bop::SEND_ONLY_IMM | bop::SEND_ONLY_INV | bop::SEND_FIRST => {
            let ok = if n == 1 {
                first.opcode != bop::SEND_FIRST
            } else {
                first.opcode == bop::SEND_FIRST
                    && mid_ok(bop::SEND_MIDDLE)
                    && matches!(
                        last.opcode,
                        bop::SEND_LAST | bop::SEND_LAST_IMM | bop::SEND_LAST_INV
                    )
            };
            ok.then(|| Request::Send {
                src_qpn,
                data,
                imm: last.imm.map(u64::from),
                solicited: last.se,
                invalidate: last.ieth,
            })
        }
        _ => None,
    }
}

/// Responder: the packets that answer a message `pkts` (first PSN `first`)
/// the responder executed with `resp`, at MSN `msn`.
fn message_answer(
    resp: &Response,
    base: wire::Packet,
    pkts: &[wire::Packet],
    first: u32,
    msn: u32,
    mss: u32,
) -> Vec<wire::Packet> {
    let last = psn_add(first, pkts.len() as u32 - 1);
    match resp {
        Response::Ack => {
            vec![wire::Packet { psn: last, aeth: Some((syndrome::ACK, msn)), ..base }]
        }
        Response::ReadData(d) => read_responses(&base, first, msn, d, mss),
        r => {
            let (syn, psn) = match r {
                // the packet that needed a receive WQE: SEND First/Only,
                // WRITE-with-immediate Last/Only (wire §4.4)
                Response::RnrNak => {
                    let at = if pkts[0].opcode == bop::SEND_FIRST || pkts.len() == 1 {
                        first
                    } else {
                        last
                    };
                    (syndrome::RNR_NAK, at)
                }
                Response::NakAccess => (syndrome::NAK_ACCESS, first),
                Response::NakInvalid => (syndrome::NAK_INVALID, first),
                _ => (syndrome::NAK_OP, first),
            };
            vec![wire::Packet { psn, aeth: Some((syn, msn)), ..base }]
        }
    }
}

/// The READ responses carrying `data` from `psn` on, segmented at `mss`
/// (wire §4.6): First/Middle/Last or one Only, AETH (ACK, `msn`) on all
/// but Middle; an empty READ is one Only with no payload.
fn read_responses(
    base: &wire::Packet,
    psn: u32,
    msn: u32,
    data: &[u8],
    mss: u32,
) -> Vec<wire::Packet> {
    let parts: Vec<&[u8]> =
        if data.is_empty() { vec![&[]] } else { data.chunks(mss.max(1) as usize).collect() };
    let n = parts.len();
    parts
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let opcode = match (i == 0, i + 1 == n) {
                (true, true) => bop::READ_RESP_ONLY,
                (true, false) => bop::READ_RESP_FIRST,
                (false, false) => bop::READ_RESP_MIDDLE,
                (false, true) => bop::READ_RESP_LAST,
            };
            wire::Packet {
                opcode,
                psn: psn_add(psn, i as u32),
                aeth: (opcode != bop::READ_RESP_MIDDLE).then_some((syndrome::ACK, msn)),
                payload: c.to_vec(),
                ..base.clone()
            }
        })
        .collect()
}

/// A duplicate READ request `p` (its PSN earlier than the ePSN) against the
/// READs a responder answered (wire §4.7, RXE `rxe_resp.c →
/// duplicate_request`): the saved READ whose PSN range holds `p`'s PSN,
/// if `p` asks for the same R_Key and a VA range inside it — then the
/// READ to answer again, from `p`'s PSN. `None`: drop silently.
fn duplicate_read(reads: &[SavedRead], p: &wire::Packet, mss: u32) -> Option<SavedRead> {
    let (addr, rkey, len) = p.reth?;
    let len = len as u64;
    reads.iter().rev().find_map(|r| {
        let inside = p.psn.wrapping_sub(r.psn) & 0xFF_FFFF < r.n;
        let end = addr.checked_add(len)?;
        let subset = rkey == r.rkey && addr >= r.addr && end <= r.addr.checked_add(r.len)?;
        (inside && subset).then_some(SavedRead {
            psn: p.psn,
            n: packets(len, mss),
            addr,
            rkey,
            len,
        })
    })
}

impl Device {
    /// Executes an SQ WQE of a UD QP (wire §5.1): only SENDs (no
    /// invalidate); one UD SEND Only packet per message, built from the
    /// address handle the WQE names (rocev2-wire §5.2) and the QP context
    /// (UDP ports, P_Key, TVer), with a DETH carrying the WQE's Q_Key and
    /// this QP's number. Unreliable: the SEND completes whether or not a
    /// receiver takes it. Model choices where the spec is silent: a
    /// message longer than the QP's MSS is not sent (rxe's behaviour,
    /// wire §4.1) and counted in `ud_drops`; a missing AH, an AH of
    /// another PD, or a non-SEND opcode is WQE_UNEXPECTED_OPCODE; the PSN
    /// is the QP's PSNNXT, advanced per packet.
    fn exec_ud(&mut self, q: &Qp, w: &wqe::SqWqe, peers: &mut dyn Peers) -> Outcome {
        let SqOp::Send { imm, solicited, invalidate: None, payload, qkey, dest_qp, ah_id } = &w.op
        else {
            return match w.op {
                SqOp::Nop => Outcome::Done,
                _ => Outcome::Fatal(ae::WQE_UNEXPECTED_OPCODE),
            };
        };
        let Some(ah) = self.ahs.get(ah_id).copied().filter(|a| a.pd == q.pd) else {
            return Outcome::Fatal(ae::WQE_UNEXPECTED_OPCODE);
        };
        let data = match self.gather(q.pd, payload) {
            Ok(d) => d,
            Err(code) => return Outcome::Fatal(code),
        };
        let Some(&mac) = self.arp.get(&ah.arp_idx) else {
            return Outcome::Fatal(0x0401); // AE INVALID_ARP_ENTRY
        };
        if data.len() as u64 > u64::from(q.mss) {
            self.counters.ud_drops += 1;
            return Outcome::Done;
        }
        // AH words: [0] most significant, IPv4 in [0]; the path: IPv4 in [3]
        let ip = |a: [u32; 4]| if ah.ipv4 { [0, 0, 0, a[0]] } else { a };
        let path = wire::Path {
            src_mac: mac_bytes(ah.mac),
            dst_mac: mac_bytes(mac),
            vlan: ah.insert_vlan.then_some(ah.vlan_tag),
            ipv4: ah.ipv4,
            tos: ah.tc,
            ttl: ah.hop_limit,
            flow_label: ah.flow_label,
            src_ip: ip(ah.src_ip),
            dst_ip: ip(ah.dest_ip),
            ..q.path.clone()
        };
        let pkt = wire::Packet {
            opcode: if imm.is_some() { bop::UD_SEND_ONLY_IMM } else { bop::UD_SEND_ONLY },
            se: *solicited,
            dest_qp: *dest_qp,
            psn: q.psn_nxt,
            imm: imm.map(|v| get(v, 31, 0) as u32),
            deth: Some((*qkey, q.id)),
            payload: data,
            ..wire::Packet::default()
        };
        self.counters.packets += 1;
        if let Some(qm) = self.qps.get_mut(&q.id) {
            qm.psn_nxt = psn_add(q.psn_nxt, 1);
        }
        let lost = match self.faults.drop_datagram {
            Some(0) => {
                self.faults.drop_datagram = None;
                self.counters.frames_lost += 1;
                self.record(Event::FrameLost { qp: q.id, psn: q.psn_nxt });
                true
            }
            Some(n) => {
                self.faults.drop_datagram = Some(n - 1);
                false
            }
            None => false,
        };
        for f in self.emit(&path, &[pkt]) {
            if lost {
                continue;
            }
            if self.receive_datagram(&f).is_none() {
                let _ = peers.deliver_datagram(&f);
            }
        }
        Outcome::Done
    }

    /// Whether a UD QP of this device has `mac` as its source MAC.
    fn ud_mac(&self, mac: [u8; 6]) -> bool {
        self.qps.values().any(|q| q.qp_type == QPTYPE_UD && q.path.src_mac == mac)
    }

    /// Receive side of a UD datagram (wire §5.1, §5.3): `None` if its
    /// destination MAC is not one of this device's UD QPs (not for this
    /// device); else `Some(delivered)`. Checks: ICRC and lengths, a UD
    /// opcode with DETH, destination QP a UD QP with that MAC in
    /// RTR/RTS/SQD, UDP port 4791, TVer 0, P_Key, then Q_Key (mismatch:
    /// dropped, counted in `qkey_violations`). The UD context has no local
    /// IP, so the destination IP is not checked (model choice). The
    /// receive buffer gets the 40-byte GRH area (IPv4: 20 zero bytes then
    /// the IPv4 header as received; IPv6: the IPv6 header), then the
    /// payload; the CQE reports 40 + payload bytes, the source QPN, the
    /// IPv4 flag, the source MAC and VLAN (spec data-path §5.2).
    pub(crate) fn receive_datagram(&mut self, f: &[u8]) -> Option<bool> {
        let dst: [u8; 6] = f.get(0..6)?.try_into().ok()?;
        if !self.ud_mac(dst) {
            return None;
        }
        let p = match wire::parse(f) {
            Ok(p) => p,
            Err(why) => {
                self.wire_drop(0, why);
                return Some(false);
            }
        };
        let qpn = p.pkt.dest_qp;
        let q = match self.qps.get(&qpn) {
            Some(q) if q.qp_type == QPTYPE_UD && q.path.src_mac == dst => q.clone(),
            _ => {
                self.wire_drop(qpn, wire::Drop::Qp);
                return Some(false);
            }
        };
        let src_qpn = match ud_check(&p, &q) {
            Ok(s) => s,
            Err(why) => {
                if why == wire::Drop::Qkey {
                    self.counters.qkey_violations += 1;
                }
                self.wire_drop(qpn, why);
                return Some(false);
            }
        };
        if !matches!(q.state, qps::RTR | qps::RTS | qps::SQD) {
            self.counters.ud_drops += 1;
            return Some(false);
        }
        let data = ud_grh_and_payload(f, &p)?;
        if !self.ud_place(&q, &data) {
            return Some(false);
        }
        self.ud_complete(&q, &p, data.len(), src_qpn);
        Some(true)
    }

    /// [`Self::receive_datagram`]: `data` placed into the next receive WQE;
    /// `false` when it could not be (counted, or the QP went down).
    fn ud_place(&mut self, q: &Qp, data: &[u8]) -> bool {
        let Some(words) = self.rq_wqe(q) else {
            self.counters.ud_drops += 1;
            return false;
        };
        let frags = match wqe::decode_rq(&words) {
            Ok(f) => f,
            Err(_) => {
                self.counters.invalid_wqes += 1;
                self.qp_fatal(q.id, ae::WQE_UNEXPECTED_OPCODE, ae::SRC_RQ, q.rq_head);
                return false;
            }
        };
        let cap: u64 = frags.iter().map(|f| f.len as u64).sum();
        if data.len() as u64 > cap {
            self.counters.ud_drops += 1;
            return false;
        }
        if let Err(code) = self.scatter(q.pd, &frags, data) {
            self.qp_fatal(q.id, code, ae::SRC_RQ, q.rq_head);
            return false;
        }
        true
    }

    /// [`Self::receive_datagram`]: the receive WQE consumed and its
    /// completion (with the UD extension) posted.
    fn ud_complete(&mut self, q: &Qp, p: &wire::Parsed, len: usize, src_qpn: u32) {
        let idx = q.rq_head;
        self.consume_rq(q.id, idx, len as u64);
        let imm = p.pkt.imm.map(u64::from);
        let main = Cqe {
            payload_len: len as u32,
            ctx: q.compl_ctx,
            inv_stag: src_qpn,
            qp_id: q.id,
            wqe_idx: idx << q.rq_shift,
            ext: true,
            stag_or_ipv4: p.ipv4,
            solicited: p.pkt.se,
            // the model writes the RC SEND opcodes (spec silent for UD)
            op: if imm.is_some() { bop::SEND_ONLY_IMM } else { bop::SEND_ONLY },
            ..Cqe::default()
        }
        .words();
        let smac = u64::from_be_bytes([
            0,
            0,
            p.src_mac[0],
            p.src_mac[1],
            p.src_mac[2],
            p.src_mac[3],
            p.src_mac[4],
            p.src_mac[5],
        ]);
        let ext = Cqe::ext_ud_words(imm, smac, p.vlan, false);
        self.post_cqe_ext(q.rx_cq, main, ext, p.pkt.se);
    }
}

/// Responder, [`Device::accept_requests`]: frame `f` parsed and checked
/// against the path of QP `q` it is addressed to.
fn request_packet(f: &[u8], q: &Qp) -> Result<wire::Packet, wire::Drop> {
    wire::parse(f).and_then(|p| {
        wire::check_addressing(&p, &q.path)?;
        if p.pkt.dest_qp != q.id {
            return Err(wire::Drop::Qp);
        }
        Ok(p.pkt)
    })
}

/// [`Device::receive_datagram`]: a UD packet `p` checked against its QP
/// `q`; the source QPN, or why it is dropped.
fn ud_check(p: &wire::Parsed, q: &Qp) -> Result<u32, wire::Drop> {
    let Some((qkey, src_qpn)) = p.pkt.deth else { return Err(wire::Drop::Malformed) };
    if p.dport != wire::ROCE_PORT {
        return Err(wire::Drop::Port);
    }
    if p.tver != 0 {
        return Err(wire::Drop::Tver);
    }
    if !wire::pkey_match(p.pkey, q.path.pkey) {
        return Err(wire::Drop::Pkey);
    }
    if qkey != q.qkey {
        return Err(wire::Drop::Qkey);
    }
    Ok(src_qpn)
}

/// [`Device::receive_datagram`]: what a UD receive places, the GRH area
/// (from frame `f`) and then the payload.
fn ud_grh_and_payload(f: &[u8], p: &wire::Parsed) -> Option<Vec<u8>> {
    // wire §5.3: the GRH area
    let ip = if p.vlan.is_some() { 18 } else { 14 };
    let mut data = Vec::with_capacity(40 + p.pkt.payload.len());
    if p.ipv4 {
        data.extend_from_slice(&[0; 20]);
        data.extend_from_slice(f.get(ip..ip + 20)?);
    } else {
        data.extend_from_slice(f.get(ip..ip + 40)?);
    }
    data.extend_from_slice(&p.pkt.payload);
    Some(data)
}

/// QPTYPE values the model executes (spec control-path §4.3.4).
const QPTYPE_RC: u8 = 3;
const QPTYPE_UD: u8 = 4;

/// A local protection failure: the AE code to raise.
type Prot<T> = Result<T, u16>;

impl Device {
    /// The receive at the head of QP `qp`'s RQ (index `idx`) took a
    /// message of `len` bytes: the head moves on, and the receive is
    /// counted and recorded.
    fn consume_rq(&mut self, qp: u32, idx: u32, len: u64) {
        if let Some(qm) = self.qps.get_mut(&qp) {
            qm.advance_rq();
        }
        self.counters.rq_wqes += 1;
        self.record(Event::Recv { qp, idx, len });
    }

    /// A QP.
    pub fn qp(&self, id: u32) -> Option<&Qp> {
        self.qps.get(&id)
    }

    /// Whether this device terminates `(ip, qpn)`.
    pub(crate) fn owns(&self, ip: u32, qpn: u32) -> bool {
        self.qps.get(&qpn).is_some_and(|q| q.qp_type == QPTYPE_RC && q.local_ip == ip)
    }

    /// Whether some RC QP of this device has `ip` (word 3) as its local
    /// address.
    pub(crate) fn has_local_ip(&self, ip: u32) -> bool {
        self.qps.values().any(|q| q.qp_type == QPTYPE_RC && q.local_ip == ip)
    }

    // ------------------------------------------------------------------
    // CQP QP ops
    // ------------------------------------------------------------------

    fn read_qp_ctx(&mut self, pa: u64) -> Result<[u64; 32], Completion> {
        let mut b = [0u8; 256];
        self.dma_read(pa, &mut b)
            .map_err(|_| Completion::err(err::MAJ_CNTXTCACHE, err::MODEL_MIN_DMA_FAULT))?;
        Ok(std::array::from_fn(|i| le64(&b, i * 8)))
    }

    /// Applies the context fields of spec control-path §7.2 to `q`.
    fn apply_ctx(&self, q: &mut Qp, c: &[u64; 32], w: &QpWqe) -> Result<(), Completion> {
        let (vq, cqnum_valid) = (w.virtual_map, w.cq_num_valid);
        let sq_enc = get(c[3], 15, 12) as u32;
        let rq_enc = get(c[3], 11, 8) as u32;
        let rq_shift = get(c[0], 9, 8) as u32;
        // 8..32768 quanta (spec data-path §3.3)
        if !(1..=13).contains(&sq_enc) || rq_enc > 13 || (1u32 << (rq_enc + 2)) < (1 << rq_shift) {
            return Err(Completion::bad());
        }
        q.sq_quanta = 1 << (sq_enc + 2);
        q.rq_shift = rq_shift;
        q.rq_wqes = (1 << (rq_enc + 2)) >> rq_shift;
        let (sq, rq) = if vq {
            let cnt = self.layout()?.cnt[hmc::PBLE];
            if c[1] >= cnt || c[2] >= cnt {
                return Err(Completion::bad());
            }
            (QueueMem::Pbl(c[1] as u32), QueueMem::Pbl(c[2] as u32))
        } else {
            if c[1] == 0 || c[2] == 0 {
                return Err(Completion::bad());
            }
            (QueueMem::Phys(c[1]), QueueMem::Phys(c[2]))
        };
        q.sq = sq;
        q.rq = rq;
        q.pd = (get(c[0], 21, 20) << 16 | get(c[7], 63, 48)) as u32;
        q.dest_ip = get(c[4], 31, 0) as u32;
        // spec control-path §4.3.5: ARPTABIDXVALID / ORDVALID / CQNUMVALID
        // say which of these context fields this op carries
        if w.arp_valid {
            q.arp_idx = get(c[6], 63, 48) as u16;
        }
        if w.ord_valid {
            q.ord = get(c[20], 7, 0) as u8;
        }
        q.ird_enc = get(c[20], 18, 16) as u8;
        q.mss = get(c[6], 29, 16) as u32;
        q.qs_handle = get(c[22], 25, 16) as u16;
        q.dest_qp = get(c[8], 23, 0) as u32;
        q.rnr_retry = get(c[16], 56, 54) as u8;
        q.retry_cnt = get(c[16], 53, 48) as u8;
        q.qkey = get(c[8], 63, 32) as u32;
        if cqnum_valid {
            let tx = get(c[17], 24, 0) as u32;
            let rx = get(c[17], 56, 32) as u32;
            if !self.cqs.contains_key(&tx) || !self.cqs.contains_key(&rx) || tx == 0 || rx == 0 {
                return Err(Completion::bad());
            }
            q.tx_cq = tx;
            q.rx_cq = rx;
        }
        q.wr_ok = bit(c[20], 20);
        q.rd_ok = bit(c[20], 21);
        q.fastreg = bit(c[20], 24);
        q.compl_ctx = c[21];
        q.local_ip = get(c[23], 31, 0) as u32;
        // wire §1.9: every field a frame carries
        let w32 = |v: u64, hi: bool| if hi { get(v, 63, 32) as u32 } else { get(v, 31, 0) as u32 };
        q.path = wire::Path {
            src_mac: mac_bytes(get(c[19], 63, 16)),
            dst_mac: [0; 6],
            vlan: bit(c[0], 5).then(|| get(c[6], 47, 32) as u16),
            ipv4: bit(c[0], 3),
            tos: get(c[3], 31, 24) as u8,
            ttl: get(c[3], 7, 0) as u8,
            flow_label: get(c[7], 19, 0) as u32,
            src_ip: [w32(c[24], true), w32(c[24], false), w32(c[23], true), w32(c[23], false)],
            dst_ip: [w32(c[5], true), w32(c[5], false), w32(c[4], true), w32(c[4], false)],
            sport: get(c[3], 47, 32) as u16,
            dport: get(c[3], 63, 48) as u16,
            pkey: get(c[7], 47, 32) as u16,
            tver: get(c[0], 63, 60) as u8,
        };
        Ok(())
    }

    // spec control-path §4.3.4
    pub(crate) fn op_create_qp(&mut self, w: &QpWqe) -> OpResult {
        let id = w.id;
        self.check_obj(hmc::QP, id as u64)?;
        if self.qps.contains_key(&id) {
            return Err(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_IN_USE));
        }
        // RoCE RC (QPTYPE 3) and RoCE UD (4, also the GSI QP 1); IDLE as the
        // first state; CQ numbers given
        if w.qp_type != QPTYPE_RC && w.qp_type != QPTYPE_UD {
            return Err(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_UNSUPPORTED_OP));
        }
        if w.next_state != qps::IDLE || !w.cq_num_valid || w.shadow_pa == 0 {
            return Err(Completion::bad());
        }
        let c = self.read_qp_ctx(w.ctx_pa)?;
        let mut q = Qp {
            id,
            state: qps::IDLE,
            sq: QueueMem::Phys(0),
            sq_quanta: 0,
            rq: QueueMem::Phys(0),
            rq_wqes: 0,
            rq_shift: 0,
            shadow: w.shadow_pa,
            pd: 0,
            tx_cq: 0,
            rx_cq: 0,
            dest_qp: 0,
            dest_ip: 0,
            local_ip: 0,
            arp_idx: 0,
            ord: 0,
            ird_enc: 0,
            mss: 0,
            qs_handle: 0,
            compl_ctx: 0,
            rnr_retry: 0,
            retry_cnt: 0,
            fastreg: false,
            rd_ok: false,
            wr_ok: false,
            sq_tail: 0,
            sq_pol: true,
            rq_head: 0,
            rq_pol: true,
            rnr_count: 0,
            stalled: false,
            path: wire::Path::default(),
            psn_nxt: 0,
            epsn: 0,
            msn: 0,
            rx_partial: Vec::new(),
            nak_latched: false,
            reads: Vec::new(),
            qp_type: w.qp_type,
            qkey: 0,
        };
        self.apply_ctx(&mut q, &c, w)?;
        self.qps.insert(id, q);
        Ok(Completion::ok(0))
    }

    // spec control-path §4.3.5, §7.4
    pub(crate) fn op_modify_qp(&mut self, w: &QpWqe) -> OpResult {
        let (id, next) = (w.id, w.next_state);
        let cur = self
            .qps
            .get(&id)
            .ok_or(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_NO_OBJECT))?
            .state;
        let allowed = matches!(
            (cur, next),
            (_, qps::ERROR)
                | (qps::IDLE, qps::IDLE | qps::RTR)
                | (qps::RTR, qps::RTR | qps::RTS)
                | (qps::RTS, qps::RTS | qps::SQD)
                | (qps::SQD, qps::SQD | qps::RTS)
        );
        if !allowed {
            return Err(Completion::err(err::MAJ_GENERIC, err::MIN_INVALID_STATE));
        }
        let c = self.read_qp_ctx(w.ctx_pa)?;
        let mut q = self.qps.get(&id).cloned().ok_or(Completion::bad())?;
        if next != qps::ERROR {
            self.apply_ctx(&mut q, &c, w)?;
            if next == qps::RTR || next == qps::RTS {
                self.check_path(&q)?;
            }
            // wire §1.9: EPSN (Linux rq_psn) at INIT → RTR, PSNNXT (sq_psn)
            // at RTR → RTS; later modifies keep the device's own counters
            if next == qps::RTR && cur != qps::RTR {
                q.epsn = get(c[11], 23, 0) as u32;
                q.msn = 0;
                q.rx_partial.clear();
                q.reads.clear();
                q.nak_latched = false;
            }
            if next == qps::RTS && cur == qps::RTR {
                q.psn_nxt = get(c[10], 23, 0) as u32;
            }
        }
        q.state = next;
        let ctx = q.compl_ctx;
        self.qps.insert(id, q);
        if next == qps::SQD {
            // SQ processing is synchronous, so the SQ is already drained
            self.post_aeqe(ae::QP_SUSPEND_COMPLETE, ae::SRC_SQ, id, ctx, 0);
        }
        Ok(Completion::ok(0))
    }

    /// What a QP needs to put packets on the wire, checked when it enters
    /// RTR or RTS (spec control-path §7.4: INIT → RTR supplies the ARP index,
    /// MTU and qs_handle, and Linux rebuilds them at RTS): an ARP entry at
    /// the QP's ARP index (§4.3.13, the destination MAC), SNDMSS within the
    /// RoCE path-MTU range 256..=4096 (§7.2), and QSHANDLE naming an enabled
    /// work-scheduler leaf (§4.3.20, §9 step 13).
    fn check_path(&self, q: &Qp) -> Result<(), Completion> {
        // A UD QP has no address in its context (each send names an AH):
        // only the scheduler leaf applies (model reading of spec
        // rocev2-wire §1.9/§5: the per-destination fields come from the AH).
        if q.qp_type == QPTYPE_UD {
            return if self.ws.values().any(|n| n.leaf && n.enabled && n.qs_handle == q.qs_handle) {
                Ok(())
            } else {
                Err(Completion::bad())
            };
        }
        if !self.arp.contains_key(&q.arp_idx) {
            return Err(Completion::bad());
        }
        if !(256..=4096).contains(&q.mss) {
            return Err(Completion::bad());
        }
        if !self.ws.values().any(|n| n.leaf && n.enabled && n.qs_handle == q.qs_handle) {
            return Err(Completion::bad());
        }
        Ok(())
    }

    // spec control-path §4.3.6. Linux moves a QP to ERROR before destroying
    // it unless it never left the create-time IDLE; the spec is silent on
    // what the device does with a live QP, so the model refuses DESTROY_QP
    // in RTR, RTS and SQD (model choice, in the crate docs).
    pub(crate) fn op_destroy_qp(&mut self, w: &QpWqe) -> OpResult {
        let q = self
            .qps
            .get(&w.id)
            .ok_or(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_NO_OBJECT))?;
        if !matches!(q.state, qps::ERROR | qps::IDLE) {
            return Err(Completion::err(err::MAJ_GENERIC, err::MIN_INVALID_STATE));
        }
        self.qps.remove(&w.id);
        Ok(Completion::ok(0))
    }

    // spec control-path §4.3.25; data-path §5.5: one flush CQE per queue
    // that has work, software replays the rest.
    pub(crate) fn op_flush_wqes(&mut self, f: &FlushWqe) -> OpResult {
        let &FlushWqe { qp: id, flush_sq, flush_rq, .. } = f;
        let q = self
            .qps
            .get(&id)
            .cloned()
            .ok_or(Completion::err(err::MAJ_GENERIC, err::MODEL_MIN_NO_OBJECT))?;
        if f.generate_ae {
            self.post_aeqe(f.ae_code, f.ae_src, id, q.compl_ctx, 0);
        }
        // without USERFLCODE: major 1 (flush), minor FLUSH_GENERAL_ERR (1)
        let (sq_maj, sq_min, rq_maj, rq_min) = if f.user_codes {
            (f.sq_major, f.sq_minor, f.rq_major, f.rq_minor)
        } else {
            (1, 1, 1, 1)
        };
        if (flush_sq || flush_rq) && q.state != qps::ERROR {
            return Err(Completion::err(err::MAJ_GENERIC, err::MIN_INVALID_STATE));
        }
        let mut minor = 0;
        // one flush CQE per queue (GEN_2), or up to `flush_cqes_per_queue`
        // walking the outstanding WQEs (fault plan)
        let per_queue = self.faults.flush_cqes_per_queue.max(1);
        let mut r = q.clone();
        for _ in 0..per_queue {
            if !(flush_rq && self.rq_wqe(&r).is_some()) {
                break;
            }
            let c = Cqe::error(q.compl_ctx, id, (rq_maj, rq_min), r.rq_head << r.rq_shift);
            self.post_cqe(q.rx_cq, c.words(), false);
            minor = err::MIN_RQ_FLUSHED;
            r.advance_rq();
        }
        let mut sq = q.clone();
        let mut first_idx = self.faults.flush_sq_wqe_idx.take();
        for _ in 0..per_queue {
            let Some(h) = flush_sq.then(|| self.sq_header(&sq)).flatten() else { break };
            if bit(h, 63) != sq.sq_pol {
                break;
            }
            let wqe_idx = first_idx.take().unwrap_or(sq.sq_tail);
            let c = Cqe {
                op: get(h, 37, 32) as u8,
                sq: true,
                ..Cqe::error(q.compl_ctx, id, (sq_maj, sq_min), wqe_idx)
            };
            self.post_cqe(q.tx_cq, c.words(), false);
            minor = err::MIN_SQ_FLUSHED;
            let n = wqe::sq_quanta(h).unwrap_or(1);
            sq.sq_tail = (sq.sq_tail + n) % sq.sq_quanta.max(1);
            if sq.sq_tail == 0 {
                sq.sq_pol = !sq.sq_pol;
            }
        }
        Ok(Completion { ret: 0, major: 0, minor })
    }

    // ------------------------------------------------------------------
    // SQ / RQ
    // ------------------------------------------------------------------

    fn sq_header(&self, q: &Qp) -> Option<u64> {
        let pa = self.queue_addr(q.sq, q.sq_tail as u64 * 32 + 24)?;
        crate::mem::read_u64(&*self.mem, pa).ok()
    }

    /// The RQ WQE at the device's head, if posted (valid bit matches).
    fn rq_wqe(&self, q: &Qp) -> Option<Vec<u64>> {
        if q.rq_wqes == 0 {
            return None;
        }
        let stride = 32u64 << q.rq_shift;
        let base = q.rq_head as u64 * stride;
        let mut words = Vec::new();
        for i in 0..stride / 8 {
            let pa = self.queue_addr(q.rq, base + i * 8)?;
            words.push(crate::mem::read_u64(&*self.mem, pa).ok()?);
        }
        (bit(*words.get(3)?, 63) == q.rq_pol).then_some(words)
    }

    /// Retries every QP stalled on an RNR NAK (called on each SQ doorbell;
    /// also available to tests as a "time passes" step).
    /// Held CQEs (`FaultPlan::hold_cqes_of_qp`) are written here too.
    pub fn step(&mut self) {
        self.step_with(&mut NoPeers);
        self.release_held_cqes(None);
    }

    pub(crate) fn step_with(&mut self, peers: &mut dyn Peers) {
        for qpn in std::mem::take(&mut self.late_sq) {
            if self.qps.contains_key(&qpn) {
                self.process_sq(qpn, peers);
            } else {
                self.counters.bad_doorbells += 1;
            }
        }
        let stalled: Vec<u32> = self.qps.values().filter(|q| q.stalled).map(|q| q.id).collect();
        for id in stalled {
            self.process_sq(id, peers);
        }
    }

    pub(crate) fn sq_doorbell(&mut self, qpn: u32, peers: &mut dyn Peers) {
        if !self.qps.contains_key(&qpn) {
            self.counters.bad_doorbells += 1;
            return;
        }
        self.step_with(peers);
        let before = self.counters.sq_wqes;
        self.process_sq(qpn, peers);
        if self.counters.sq_wqes == before {
            self.counters.idle_doorbells += 1;
        }
    }

    pub(crate) fn process_sq(&mut self, qpn: u32, peers: &mut dyn Peers) {
        loop {
            let Some(q) = self.qps.get(&qpn).cloned() else { return };
            if q.state != qps::RTS {
                return;
            }
            let Some(hdr) = self.sq_header(&q) else { return };
            if bit(hdr, 63) != q.sq_pol {
                return;
            }
            let idx = q.sq_tail;
            let Some(quanta) = self.sq_wqe_quanta(qpn, &q, hdr, idx) else { return };
            let Some(words) = self.read_sq_wqe(qpn, &q, idx, quanta) else { return };
            let w = match wqe::decode_sq(&words) {
                Ok(w) => w,
                Err(_) => {
                    self.invalid_sq_wqe(qpn, idx);
                    return;
                }
            };
            // cold PF (crate::lan): without a Tx-scheduler qset for the QP's
            // qs_handle nothing of this QP is scheduled; the WQE waits
            if self.cfg.lan.cold && self.lan.qset(q.qs_handle).is_none() {
                self.counters.lan_gated_wqes += 1;
                return;
            }
            self.record(Event::Wqe { qp: qpn, idx, opcode: w.opcode });
            let outcome = if let Some((major, minor)) = self.faults.wqe_error() {
                Outcome::Error(major, minor)
            } else {
                self.exec_sq(&q, &w, peers)
            };
            match outcome {
                Outcome::Stall => return self.sq_stall(qpn, &q, idx),
                Outcome::Fatal(code) => {
                    if self.faults.error_cqe_on_fatal {
                        // the failing WQE's own error CQE: major 0xFFFE
                        // (IRDMA_SRQFLUSH_RSVD_MAJOR_ERR), minor = AE code
                        // (spec data-path §5.5)
                        self.sq_error_cqe(qpn, &q, &w, (idx, quanta), (0xFFFE, code));
                    }
                    self.qp_fatal(qpn, code, ae::SRC_SQ, idx);
                    return;
                }
                Outcome::Error(major, minor) => {
                    self.sq_error_cqe(qpn, &q, &w, (idx, quanta), (major, minor));
                    self.qp_fatal(qpn, ae::LCE_QP_CATASTROPHIC, ae::SRC_SQ, idx);
                    return;
                }
                Outcome::Done => self.sq_done(qpn, &q, &w, idx, quanta),
            }
        }
    }

    /// [`Self::process_sq`]: the quanta of the WQE at `idx` (header `hdr`),
    /// or `None` after a malformed one was handled.
    fn sq_wqe_quanta(&mut self, qpn: u32, q: &Qp, hdr: u64, idx: u32) -> Option<u32> {
        // spec data-path §1.10 chunk rule: a WQE never crosses an
        // 8-quanta boundary (max_hw_sq_chunk = 8); software pads with
        // NOPs instead
        match wqe::sq_quanta(hdr).and_then(|n| {
            if idx % 8 + n > 8 {
                Err(wqe::WqeError::CrossesChunk { start: idx, quanta: n })
            } else {
                Ok(n)
            }
        }) {
            Ok(n) if idx + n <= q.sq_quanta => Some(n),
            _ => {
                self.invalid_sq_wqe(qpn, idx);
                None
            }
        }
    }

    /// [`Self::process_sq`]: the words of the WQE at `idx`, or `None` after
    /// a read that failed took the QP down.
    fn read_sq_wqe(&mut self, qpn: u32, q: &Qp, idx: u32, quanta: u32) -> Option<Vec<u64>> {
        let mut words = Vec::with_capacity(quanta as usize * 4);
        for i in 0..quanta as u64 * 4 {
            match self
                .queue_addr(q.sq, idx as u64 * 32 + i * 8)
                .map(|pa| crate::mem::read_u64(&*self.mem, pa))
            {
                Some(Ok(v)) => words.push(v),
                Some(Err(f)) => {
                    self.dma_fault(f);
                    self.qp_fatal(qpn, ae::LCE_QP_CATASTROPHIC, ae::SRC_SQ, idx);
                    return None;
                }
                None => {
                    self.qp_fatal(qpn, ae::LCE_QP_CATASTROPHIC, ae::SRC_SQ, idx);
                    return None;
                }
            }
        }
        Some(words)
    }

    /// [`Self::process_sq`]: the peer answered RNR NAK; the WQE waits, or
    /// the QP goes down once the RNR retries are spent.
    fn sq_stall(&mut self, qpn: u32, q: &Qp, idx: u32) {
        let Some(qm) = self.qps.get_mut(&qpn) else { return };
        qm.rnr_count = qm.rnr_count.saturating_add(1);
        qm.stalled = true;
        self.counters.rnr_naks += 1;
        if q.rnr_retry != 7 && qm.rnr_count > q.rnr_retry {
            qm.stalled = false;
            self.qp_fatal(qpn, ae::LLP_TOO_MANY_RNRS, ae::SRC_SQ, idx);
        }
    }

    /// [`Self::process_sq`]: the WQE at `idx` (`quanta` long) is consumed
    /// and completes with error `(major, minor)`.
    fn sq_error_cqe(
        &mut self,
        qpn: u32,
        q: &Qp,
        w: &wqe::SqWqe,
        (idx, quanta): (u32, u32),
        (major, minor): (u16, u16),
    ) {
        self.counters.sq_wqes += 1;
        self.advance_sq(qpn, quanta);
        let c = Cqe { op: w.opcode, sq: true, ..Cqe::error(q.compl_ctx, qpn, (major, minor), idx) };
        self.post_cqe(q.tx_cq, c.words(), false);
    }

    /// [`Self::process_sq`]: the WQE at `idx` (`quanta` long) is done; its
    /// CQE when signaled (and a stray one first, when the fault plan asks).
    fn sq_done(&mut self, qpn: u32, q: &Qp, w: &wqe::SqWqe, idx: u32, quanta: u32) {
        self.counters.sq_wqes += 1;
        self.advance_sq(qpn, quanta);
        if w.signaled {
            let c = Cqe {
                ctx: q.compl_ctx,
                qp_id: qpn,
                wqe_idx: idx,
                op: w.opcode,
                sq: true,
                ..Cqe::default()
            };
            if let Some(delta) = self.faults.stray_sq_cqe.take() {
                let moved = (i64::from(idx) + delta).rem_euclid(q.sq_quanta.max(1).into());
                let stray = Cqe { wqe_idx: moved as u32, ..c };
                self.post_cqe(q.tx_cq, stray.words(), false);
            }
            self.post_cqe(q.tx_cq, c.words(), false);
        }
    }

    /// A malformed SQ WQE (bad opcode, odd ADDFRAGCNT, too many SGEs,
    /// crossing a chunk, a missing valid bit): not executed, no CQE; the QP
    /// goes to ERROR with WQE_UNEXPECTED_OPCODE (spec control-path §8: the
    /// only WQE-format AE Linux names; model choice for the formats the
    /// spec gives no code for) and the WQE is counted.
    fn invalid_sq_wqe(&mut self, qpn: u32, idx: u32) {
        self.counters.invalid_wqes += 1;
        self.qp_fatal(qpn, ae::WQE_UNEXPECTED_OPCODE, ae::SRC_SQ, idx);
    }

    fn advance_sq(&mut self, qpn: u32, quanta: u32) {
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.stalled = false;
            q.rnr_count = 0;
            q.sq_tail = (q.sq_tail + quanta) % q.sq_quanta.max(1);
            if q.sq_tail == 0 {
                q.sq_pol = !q.sq_pol;
            }
            // QP shadow @0 HW_SQ_TAIL [14:0] (spec data-path §4.3)
            let (shadow, tail) = (q.shadow, q.sq_tail);
            let _ = crate::mem::write_u64(&*self.mem, shadow, tail as u64 & 0x7FFF);
        }
    }

    fn exec_sq(&mut self, q: &Qp, w: &wqe::SqWqe, peers: &mut dyn Peers) -> Outcome {
        if q.qp_type == QPTYPE_UD {
            return self.exec_ud(q, w, peers);
        }
        match &w.op {
            SqOp::Nop => Outcome::Done,
            SqOp::Write { remote_addr, rkey, imm, solicited, payload } => {
                let data = match self.gather(q.pd, payload) {
                    Ok(d) => d,
                    Err(code) => return Outcome::Fatal(code),
                };
                let req = Request::Write {
                    src_qpn: q.id,
                    addr: *remote_addr,
                    rkey: *rkey,
                    data,
                    imm: *imm,
                    solicited: *solicited,
                };
                self.transmit(q, req, peers)
            }
            SqOp::Send { imm, solicited, invalidate, payload, .. } => {
                let data = match self.gather(q.pd, payload) {
                    Ok(d) => d,
                    Err(code) => return Outcome::Fatal(code),
                };
                let req = Request::Send {
                    src_qpn: q.id,
                    data,
                    imm: *imm,
                    solicited: *solicited,
                    invalidate: *invalidate,
                };
                self.transmit(q, req, peers)
            }
            SqOp::Read { .. } => self.exec_read(q, &w.op, peers),
            SqOp::LocalInvalidate { stag } => match self.invalidate(*stag, q.pd) {
                Ok(()) => Outcome::Done,
                Err(code) => Outcome::Fatal(code),
            },
            SqOp::FastRegister { .. } => self.exec_fast_register(q, &w.op),
            SqOp::BindMw { .. } | SqOp::FetchAdd { .. } | SqOp::CompareSwap { .. } => {
                // memory windows and atomics are not modelled (no atomics
                // feature on GEN_2 by default)
                Outcome::Fatal(ae::WQE_UNEXPECTED_OPCODE)
            }
        }
    }

    /// [`Self::exec_sq`]: an RDMA READ (the dispatcher calls this for
    /// [`SqOp::Read`] only).
    fn exec_read(&mut self, q: &Qp, op: &SqOp, peers: &mut dyn Peers) -> Outcome {
        let SqOp::Read { remote_addr, rkey, sges, local_invalidate } = op else {
            return Outcome::Fatal(ae::WQE_UNEXPECTED_OPCODE);
        };
        // spec control-path §8: AE 0x0205 RDMA_READ_WHILE_ORD_ZERO
        if q.ord == 0 {
            return Outcome::Fatal(ae::RDMA_READ_WHILE_ORD_ZERO);
        }
        // check the sinks before asking the peer
        let len: u64 = sges.iter().map(|f| f.len as u64).sum();
        if let Err(code) = self.check_frags(q.pd, sges, rights::LOCAL_WRITE) {
            return Outcome::Fatal(code);
        }
        let req = Request::Read { src_qpn: q.id, addr: *remote_addr, rkey: *rkey, len };
        match self.transmit_raw(q, req, peers) {
            Ok(Response::ReadData(data)) => {
                if let Err(code) = self.scatter(q.pd, sges, &data) {
                    return Outcome::Fatal(code);
                }
                if let Some(f) = sges.first().filter(|_| *local_invalidate)
                    && let Err(code) = self.invalidate(f.stag, q.pd)
                {
                    return Outcome::Fatal(code);
                }
                Outcome::Done
            }
            Ok(r) => Self::nak_outcome(r),
            Err(o) => o,
        }
    }

    /// [`Self::exec_sq`]: a fast-register WQE (the dispatcher calls this
    /// for [`SqOp::FastRegister`] only).
    fn exec_fast_register(&mut self, q: &Qp, op: &SqOp) -> Outcome {
        let SqOp::FastRegister {
            key,
            index,
            va,
            len,
            first_pble,
            pbl_level,
            page_size,
            rights,
            va_based,
        } = op
        else {
            return Outcome::Fatal(ae::WQE_UNEXPECTED_OPCODE);
        };
        if !q.fastreg {
            return Outcome::Fatal(ae::PRIV_OPERATION_DENIED);
        }
        let slot = self.stag_slot(*index);
        let pble_cnt = self.fpm.as_ref().map_or(0, |l| l.cnt[hmc::PBLE]);
        let Some(s) = self.stags.get_mut(&slot) else {
            return Outcome::Fatal(ae::AMP_UNALLOCATED_STAG);
        };
        if s.index != *index {
            return Outcome::Fatal(ae::AMP_BAD_STAG_INDEX);
        }
        if s.valid || s.is_mw {
            return Outcome::Fatal(ae::AMP_INVALID_STAG);
        }
        if s.pd != q.pd {
            return Outcome::Fatal(ae::AMP_BAD_PD);
        }
        let pbl = match pbl_level {
            1 => Pbl::Level1(*first_pble),
            3 => Pbl::Level2(*first_pble),
            _ => return Outcome::Fatal(ae::WQE_UNEXPECTED_OPCODE),
        };
        let ps = match page_size {
            0 => 4096,
            1 => 2 << 20,
            2 => 1 << 30,
            _ => return Outcome::Fatal(ae::WQE_UNEXPECTED_OPCODE),
        };
        if *first_pble as u64 >= pble_cnt {
            return Outcome::Fatal(ae::AMP_BOUNDS_VIOLATION);
        }
        s.key = Some(*key);
        s.va = *va;
        s.len = *len;
        s.va_based = *va_based;
        s.rights = *rights;
        s.page_size = ps;
        s.pbl = pbl;
        s.valid = true;
        Outcome::Done
    }

    fn nak_outcome(r: Response) -> Outcome {
        match r {
            Response::Ack | Response::ReadData(_) => Outcome::Done,
            Response::RnrNak => Outcome::Stall,
            Response::NakAccess => Outcome::Fatal(ae::IB_REMOTE_ACCESS_ERROR),
            Response::NakInvalid => Outcome::Fatal(ae::IB_INVALID_REQUEST),
            Response::NakOp => Outcome::Fatal(ae::IB_REMOTE_OP_ERROR),
            // resolved by `transmit_raw` (go-back-N); one that escapes is a
            // resend budget spent
            Response::NakSeq(_) => Outcome::Fatal(ae::LLP_TOO_MANY_RETRIES),
        }
    }

    fn transmit(&mut self, q: &Qp, req: Request, peers: &mut dyn Peers) -> Outcome {
        match self.transmit_raw(q, req, peers) {
            Ok(r) => Self::nak_outcome(r),
            Err(o) => o,
        }
    }

    /// Sends one request over the wire as RoCEv2 frames built from `q`'s
    /// context and returns the response carried by the frames that come
    /// back. Loopback (the peer QP lives on this device) uses the same
    /// frames.
    fn transmit_raw(
        &mut self,
        q: &Qp,
        req: Request,
        peers: &mut dyn Peers,
    ) -> Result<Response, Outcome> {
        let Some(&mac) = self.arp.get(&q.arp_idx) else {
            return Err(Outcome::Fatal(0x0401)); // AE INVALID_ARP_ENTRY
        };
        self.counters.packets += 1;
        let mut path = q.path.clone();
        path.dst_mac = mac_bytes(mac);
        let (pkts, used) = segment(&req, q.dest_qp, q.psn_nxt, q.mss);
        let first_psn = q.psn_nxt;
        // nobody answers: the transport retries and gives up
        let lost = || Outcome::Fatal(ae::LLP_TOO_MANY_RETRIES);
        // wire §4.8: each PSN-sequence NAK spends one transport retry
        let mut retries = q.retry_cnt;
        let (mut from, mut resend) = (0usize, false);
        let resp = loop {
            let mut frames = self.emit(&path, pkts.get(from..).unwrap_or_default());
            if resend {
                self.counters.retransmitted += frames.len() as u64;
            }
            self.lose_request_frames(q.id, &pkts[from..], &mut frames);
            if frames.is_empty() {
                return Err(lost());
            }
            let reply = if self.owns(q.dest_ip, q.dest_qp) {
                self.receive(q.dest_qp, q.id, &frames)
            } else {
                self.outbox.push_back(Packet { dst_ip: q.dest_ip, dst_qpn: q.dest_qp });
                if self.outbox.len() > 64 {
                    self.outbox.pop_front();
                }
                peers.deliver(q.dest_ip, q.dest_qp, q.id, &frames)
            };
            let (resp, back) = reply.ok_or_else(lost)?;
            let resp = self.take_response(q, first_psn, used, &resp, &back).ok_or_else(lost)?;
            let Response::NakSeq(psn) = resp else { break resp };
            // wire §4.4: everything before `psn` is implicitly ACKed; go
            // back and resend from it (§4.8, go-back-N). A PSN outside this
            // request is not one the requester can resend: no progress.
            let k = psn.wrapping_sub(first_psn) & 0xFF_FFFF;
            if k as usize >= pkts.len() || retries == 0 {
                return Err(lost());
            }
            retries -= 1;
            from = k as usize;
            resend = true;
        };
        if resp != Response::RnrNak
            && let Some(qm) = self.qps.get_mut(&q.id)
        {
            qm.psn_nxt = psn_add(first_psn, used);
        }
        Ok(resp)
    }

    /// Applies `FaultPlan::drop_request_frame` to the request frames of
    /// `pkts` about to leave QP `qp`: a lost frame stays in the capture
    /// (recorded by [`Device::emit`]) but is not delivered.
    fn lose_request_frames(&mut self, qp: u32, pkts: &[wire::Packet], frames: &mut Vec<Vec<u8>>) {
        if self.faults.drop_request_frame.is_none() {
            return;
        }
        let mut kept = Vec::with_capacity(frames.len());
        for (f, p) in std::mem::take(frames).into_iter().zip(pkts) {
            match self.faults.drop_request_frame {
                Some(0) => {
                    self.faults.drop_request_frame = None;
                    self.counters.frames_lost += 1;
                    self.record(Event::FrameLost { qp, psn: p.psn });
                    continue;
                }
                Some(n) => self.faults.drop_request_frame = Some(n - 1),
                None => {}
            }
            kept.push(f);
        }
        *frames = kept;
    }

    /// Builds and records the frames of `pkts` on `path`.
    fn emit(&mut self, path: &wire::Path, pkts: &[wire::Packet]) -> Vec<Vec<u8>> {
        let mut out = Vec::with_capacity(pkts.len());
        for p in pkts {
            let f = wire::build(path, p, self.ip_id);
            self.ip_id = self.ip_id.wrapping_add(1);
            if let Some(c) = &self.capture {
                c.push(f.clone());
            }
            let mut f = f;
            match self.faults.flip_frame_byte {
                Some((0, off)) => {
                    let i = off.min(f.len() - 1);
                    f[i] ^= 1;
                    self.faults.flip_frame_byte = None;
                }
                Some((n, off)) => self.faults.flip_frame_byte = Some((n - 1, off)),
                None => {}
            }
            out.push(f);
        }
        out
    }

    /// Counts a dropped frame.
    fn wire_drop(&mut self, qp: u32, why: wire::Drop) {
        self.counters.wire_drops += 1;
        self.counters.wire_drop_reasons.add(why);
        self.record(Event::WireDrop { qp, why });
    }

    /// Cold PF (crate::lan): a RoCE frame reaches the RDMA engine only
    /// through a switch rule to a VSI with the PE filter on; `false` (the
    /// batch dropped, counted in `pe_filter_drops`) otherwise. Always
    /// `true` when the PF is not cold.
    fn pe_admits(&mut self, frames: &[Vec<u8>]) -> bool {
        if !self.cfg.lan.cold {
            return true;
        }
        let dst = frames.first().and_then(|f| wire::parse(f).ok()).map(|p| p.dst_mac);
        if dst.is_some_and(|m| self.lan.delivers_to_pe(m)) {
            return true;
        }
        self.counters.pe_filter_drops += 1;
        false
    }

    /// Parses and checks response frames arriving for local QP `qpn`
    /// against its context (`psn`: the PSN the first one must carry, the
    /// rest follow). `None` if any is dropped (counted).
    fn accept(&mut self, qpn: u32, frames: &[Vec<u8>], psn: u32) -> Option<Vec<wire::Packet>> {
        let own = self.qps.get(&qpn)?.path.clone();
        if !self.pe_admits(frames) {
            return None;
        }
        let mut out = Vec::with_capacity(frames.len());
        for (i, f) in frames.iter().enumerate() {
            let r = wire::parse(f).and_then(|p| {
                wire::check_addressing(&p, &own)?;
                if p.pkt.dest_qp != qpn {
                    return Err(wire::Drop::Qp);
                }
                if p.pkt.psn != psn_add(psn, i as u32) {
                    return Err(wire::Drop::Psn);
                }
                Ok(p.pkt)
            });
            match r {
                Ok(p) => out.push(p),
                Err(why) => {
                    self.wire_drop(qpn, why);
                    return None;
                }
            }
        }
        Some(out)
    }

    /// Responder side: checks request frames for QP `q` (addressing, then
    /// PSN against its ePSN, wire §4.7) and collects the packets of one
    /// message. A frame failing an addressing check loses the whole batch
    /// (counted, nothing answered). A packet with the ePSN is taken and the
    /// ePSN advances; a later PSN is dropped and, the first time, answered
    /// by a PSN-sequence NAK for the ePSN (the latch clears when the ePSN
    /// arrives); an earlier one (duplicate) is dropped (counted as a PSN
    /// drop) and, for SEND/WRITE, re-ACKed with ePSN − 1; a duplicate READ
    /// inside a saved one is answered again ([`Rx::ReplayRead`]); an
    /// AckReq inside a message is ACKed at once ([`Rx::AckMid`]) (wire
    /// §4.3, §4.7). Packets taken before a gap are kept in the QP
    /// until the rest of their message arrives. With strict PSN off
    /// ([`Device::set_strict_psn`]) the first packet of a message sets the
    /// ePSN instead (counted in `psn_mismatches`).
    fn accept_requests(&mut self, q: &Qp, frames: &[Vec<u8>]) -> Rx {
        let qpn = q.id;
        if !self.pe_admits(frames) {
            return Rx::Nothing;
        }
        let mut pkts = q.rx_partial.clone();
        let mut expect = q.epsn;
        let mut latched = q.nak_latched;
        let mut nak = None;
        let mut dup = false;
        let mut replay = None;
        for f in frames {
            let p = match request_packet(f, q) {
                Ok(p) => p,
                Err(why) => {
                    self.wire_drop(qpn, why);
                    return Rx::Nothing;
                }
            };
            if p.psn != expect && !self.strict_psn && pkts.is_empty() {
                self.counters.psn_mismatches += 1;
                expect = p.psn;
            }
            if p.psn == expect && !op_follows(pkts.last().map(|x| x.opcode), p.opcode) {
                let Some(qm) = self.qps.get_mut(&qpn) else { return Rx::Nothing };
                qm.rx_partial.clear();
                qm.nak_latched = false;
                return Rx::Invalid(p.psn);
            }
            if p.psn == expect {
                expect = psn_add(expect, 1);
                latched = false;
                pkts.push(p);
            } else {
                self.wire_drop(qpn, wire::Drop::Psn);
                if psn_later(p.psn, expect) {
                    if !latched {
                        latched = true;
                        nak = Some(expect);
                    }
                } else if p.opcode != bop::READ_REQ {
                    // wire §4.7: a duplicate SEND/WRITE is re-ACKed
                    dup = true;
                } else if let Some(r) = duplicate_read(&q.reads, &p, q.mss) {
                    // wire §4.7: a duplicate READ inside an answered one
                    // is answered again from its own PSN
                    replay = Some(r);
                }
            }
        }
        let complete = pkts.last().is_some_and(|p| ends_message(p.opcode));
        let Some(qm) = self.qps.get_mut(&qpn) else { return Rx::Nothing };
        qm.nak_latched = latched;
        if let Some(e) = nak {
            qm.rx_partial = pkts;
            qm.epsn = expect;
            return Rx::Gap(e);
        }
        if !complete {
            let taken = pkts.len() > qm.rx_partial.len();
            // wire §4.3: an AckReq on a packet inside a message (rxe sets
            // one after 64 packets without) is answered at once
            let ack_mid = pkts.last().filter(|p| taken && p.ack_req).map(|p| p.psn);
            qm.rx_partial = pkts;
            qm.epsn = expect;
            return match (ack_mid, replay) {
                (Some(psn), _) => Rx::AckMid(psn),
                (None, Some(r)) if !taken => Rx::ReplayRead(r),
                _ if dup && !taken => Rx::Duplicate,
                _ => Rx::Nothing,
            };
        }
        qm.rx_partial.clear();
        Rx::Message(pkts)
    }

    /// Requester side: checks the response frames for `q` and turns them
    /// into a [`Response`] (READ data from the READ response payloads).
    fn take_response(
        &mut self,
        q: &Qp,
        first_psn: u32,
        used: u32,
        resp: &Response,
        back: &[Vec<u8>],
    ) -> Option<Response> {
        let psn = match resp {
            Response::ReadData(_) => first_psn,
            // wire §4.3/§4.4: ACK → the last request packet; NAKs → the
            // offending packet's PSN (the model: the request's first)
            Response::Ack => psn_add(first_psn, used - 1),
            _ => back.first().and_then(|f| wire::parse(f).ok()).map_or(first_psn, |p| p.pkt.psn),
        };
        let pkts = self.accept(q.id, back, psn)?;
        match resp {
            Response::ReadData(_) => {
                if pkts.len() as u32 != used {
                    self.wire_drop(q.id, wire::Drop::Malformed);
                    return None;
                }
                Some(Response::ReadData(
                    pkts.iter().flat_map(|p| p.payload.iter().copied()).collect(),
                ))
            }
            _ => {
                let syn = pkts.first().and_then(|p| p.aeth).map(|a| a.0);
                Some(match syn {
                    Some(s) if s & 0x60 == 0 => Response::Ack,
                    Some(s) if s & 0x60 == 0x20 => Response::RnrNak,
                    Some(syndrome::NAK_PSN_SEQ) => Response::NakSeq(pkts.first()?.psn),
                    Some(syndrome::NAK_ACCESS) => Response::NakAccess,
                    Some(syndrome::NAK_INVALID) => Response::NakInvalid,
                    Some(_) => Response::NakOp,
                    None => {
                        self.wire_drop(q.id, wire::Drop::Malformed);
                        return None;
                    }
                })
            }
        }
    }

    /// Responder side of frames for local QP `qpn` from QP `src_qpn`:
    /// checks them against the QP's context (drops are counted and
    /// unanswered), reassembles the request, executes it and answers with
    /// frames built from the same context. RC frames carry no source QPN;
    /// `src_qpn` only feeds the model's "not this QP's peer" NAK.
    pub(crate) fn receive(
        &mut self,
        qpn: u32,
        src_qpn: u32,
        frames: &[Vec<u8>],
    ) -> Option<(Response, Vec<Vec<u8>>)> {
        let Some(q) = self.qps.get(&qpn).cloned() else {
            self.wire_drop(qpn, wire::Drop::Qp);
            return None;
        };
        if !matches!(q.state, qps::RTR | qps::RTS | qps::SQD) || q.dest_qp != src_qpn {
            return self.nak_not_connected(&q, src_qpn, frames);
        }
        // no way back without an ARP entry (RTR needs one; defensive)
        let mac = self.arp.get(&q.arp_idx).copied()?;
        let mut path = q.path.clone();
        path.dst_mac = mac_bytes(mac);
        let base = wire::Packet { opcode: bop::ACK, dest_qp: q.dest_qp, ..wire::Packet::default() };
        match self.accept_requests(&q, frames) {
            Rx::Message(pkts) => self.execute_message(qpn, src_qpn, &q, &path, base, &pkts),
            rx => self.answer_without_message(qpn, &q, &path, &base, rx),
        }
    }

    /// Responder, [`Self::receive`]: frames for a QP not connected to the
    /// sender.
    fn nak_not_connected(
        &mut self,
        q: &Qp,
        src_qpn: u32,
        frames: &[Vec<u8>],
    ) -> Option<(Response, Vec<Vec<u8>>)> {
        // a QP not connected to the sender: invalid request (model), the
        // NAK addressed back along the request's own path
        let p = wire::parse(frames.first()?).ok()?;
        let path = wire::Path {
            src_mac: p.dst_mac,
            dst_mac: p.src_mac,
            vlan: p.vlan,
            ipv4: p.ipv4,
            ttl: 64,
            src_ip: p.dst_ip,
            dst_ip: p.src_ip,
            sport: 0xC000,
            dport: wire::ROCE_PORT,
            pkey: p.pkey,
            ..wire::Path::default()
        };
        let nak = wire::Packet {
            opcode: bop::ACK,
            dest_qp: src_qpn,
            psn: p.pkt.psn,
            aeth: Some((syndrome::NAK_INVALID, q.msn)),
            ..wire::Packet::default()
        };
        Some((Response::NakInvalid, self.emit(&path, &[nak])))
    }

    /// Responder, [`Self::receive`]: the answer when the frames made no
    /// whole message (a gap, duplicates, a mid-message AckReq, a READ
    /// replay, an invalid request, or nothing). [`Rx::Message`] is the
    /// caller's ([`Self::execute_message`]) and never comes here.
    fn answer_without_message(
        &mut self,
        qpn: u32,
        q: &Qp,
        path: &wire::Path,
        base: &wire::Packet,
        rx: Rx,
    ) -> Option<(Response, Vec<Vec<u8>>)> {
        match rx {
            Rx::Gap(epsn) => {
                // wire §4.4/§4.7: NAK 0x60 with the expected PSN, current MSN
                self.counters.seq_naks += 1;
                let msn = self.qps.get(&qpn).map_or(q.msn, |x| x.msn);
                let nak = wire::Packet {
                    psn: epsn,
                    aeth: Some((syndrome::NAK_PSN_SEQ, msn)),
                    ..base.clone()
                };
                Some((Response::NakSeq(epsn), self.emit(path, &[nak])))
            }
            Rx::Duplicate => {
                let q = self.qps.get(&qpn).unwrap_or(q).clone();
                let ack = wire::Packet {
                    psn: psn_add(q.epsn, 0xFF_FFFF),
                    aeth: Some((syndrome::ACK, q.msn)),
                    ..base.clone()
                };
                Some((Response::Ack, self.emit(path, &[ack])))
            }
            Rx::AckMid(psn) => {
                let msn = self.qps.get(&qpn).map_or(q.msn, |x| x.msn);
                let ack = wire::Packet { psn, aeth: Some((syndrome::ACK, msn)), ..base.clone() };
                Some((Response::Ack, self.emit(path, &[ack])))
            }
            Rx::ReplayRead(r) => {
                // re-read from memory now (as rxe does); a region that has
                // gone since is not answered (model choice: the sheet only
                // says unknown duplicates are dropped)
                let data = if r.len == 0 {
                    Vec::new()
                } else {
                    let got = self
                        .translate(r.rkey, q.pd, r.addr, r.len, rights::REMOTE_READ)
                        .and_then(|c| self.copy_in(&c));
                    got.ok()?
                };
                let msn = self.qps.get(&qpn).map_or(q.msn, |x| x.msn);
                let out = read_responses(base, r.psn, msn, &data, q.mss);
                self.counters.retransmitted += out.len() as u64;
                Some((Response::ReadData(data), self.emit(path, &out)))
            }
            Rx::Invalid(psn) => Some(self.invalid_request(q, path, base, psn)),
            Rx::Nothing | Rx::Message(_) => None,
        }
    }

    /// Responder, [`Self::receive`]: a whole message reassembled, executed,
    /// the QP's ePSN/MSN (and READ history) advanced and the answer sent.
    fn execute_message(
        &mut self,
        qpn: u32,
        src_qpn: u32,
        q: &Qp,
        path: &wire::Path,
        base: wire::Packet,
        pkts: &[wire::Packet],
    ) -> Option<(Response, Vec<Vec<u8>>)> {
        let first = pkts.first()?.psn;
        let Some(req) = reassemble(pkts, src_qpn, q.mss) else {
            // wire §4.1/§4.4: a length error (or a RETH length that is not
            // the message's) is an invalid request, found when the message
            // is whole: NAK 0x61 with the message's first PSN
            if let Some(qm) = self.qps.get_mut(&qpn) {
                qm.epsn = first;
            }
            return Some(self.invalid_request(q, path, &base, first));
        };
        let saved = match &req {
            Request::Read { addr, rkey, len, .. } => Some(SavedRead {
                psn: first,
                n: packets(*len, q.mss),
                addr: *addr,
                rkey: *rkey,
                len: *len,
            }),
            _ => None,
        };
        let used = match &req {
            Request::Read { len, .. } => packets(*len, q.mss),
            _ => pkts.len() as u32,
        };
        let resp = self.respond(qpn, req);
        let msn = if matches!(resp, Response::Ack | Response::ReadData(_)) {
            (q.msn + 1) & 0xFF_FFFF
        } else {
            q.msn
        };
        if let Some(qm) = self.qps.get_mut(&qpn) {
            if resp == Response::RnrNak {
                // the whole message is resent later from its first PSN
                qm.epsn = first;
            } else {
                qm.epsn = psn_add(first, used);
                qm.msn = msn;
            }
            if let (Some(r), Response::ReadData(_)) = (saved, &resp) {
                if qm.reads.len() == READ_HISTORY {
                    qm.reads.remove(0);
                }
                qm.reads.push(r);
            }
        }
        let out = message_answer(&resp, base, pkts, first, msn, q.mss);
        let back = self.emit(path, &out);
        Some((resp, back))
    }

    /// Responder: an invalid request at `psn` (wire §4.4): the packet is
    /// dropped (counted `malformed`), answered with NAK 0x61 carrying its
    /// PSN and the current MSN, and the responder QP goes to error as
    /// rxe's does (RXE `rxe_resp.c → do_class_ac_error`; the AE is
    /// IB_INVALID_REQUEST, model choice — the sheet names none).
    fn invalid_request(
        &mut self,
        q: &Qp,
        path: &wire::Path,
        base: &wire::Packet,
        psn: u32,
    ) -> (Response, Vec<Vec<u8>>) {
        self.wire_drop(q.id, wire::Drop::Malformed);
        let msn = self.qps.get(&q.id).map_or(q.msn, |x| x.msn);
        let nak = wire::Packet { psn, aeth: Some((syndrome::NAK_INVALID, msn)), ..base.clone() };
        self.qp_fatal(q.id, ae::IB_INVALID_REQUEST, ae::SRC_RQ, 0);
        (Response::NakInvalid, self.emit(path, &[nak]))
    }

    /// Responder side of one request for local QP `qpn`.
    pub(crate) fn respond(&mut self, qpn: u32, req: Request) -> Response {
        let Some(q) = self.qps.get(&qpn).cloned() else { return Response::NakInvalid };
        let src = match &req {
            Request::Write { src_qpn, .. }
            | Request::Send { src_qpn, .. }
            | Request::Read { src_qpn, .. } => *src_qpn,
        };
        if !matches!(q.state, qps::RTR | qps::RTS | qps::SQD) || q.dest_qp != src {
            return Response::NakInvalid;
        }
        match req {
            Request::Write { addr, rkey, data, imm, solicited, .. } => {
                if !data.is_empty() {
                    if !q.wr_ok {
                        self.qp_fatal(qpn, ae::AMP_RIGHTS_VIOLATION, ae::SRC_IN_RDMA_WRITE, 0);
                        return Response::NakAccess;
                    }
                    let chunks = match self.translate(
                        rkey,
                        q.pd,
                        addr,
                        data.len() as u64,
                        rights::REMOTE_WRITE,
                    ) {
                        Ok(c) => c,
                        Err(code) => {
                            self.qp_fatal(qpn, code, ae::SRC_IN_RDMA_WRITE, 0);
                            return Response::NakAccess;
                        }
                    };
                    if let Err(code) = self.copy_out(&chunks, &data) {
                        self.qp_fatal(qpn, code, ae::SRC_IN_RDMA_WRITE, 0);
                        return Response::NakAccess;
                    }
                }
                match imm {
                    Some(imm) => self.deliver_recv(
                        &q,
                        &[],
                        Some(imm),
                        solicited,
                        None,
                        bth::WRITE_ONLY_IMM,
                        0,
                    ),
                    None => Response::Ack,
                }
            }
            Request::Send { data, imm, solicited, invalidate, .. } => {
                let op = if invalidate.is_some() {
                    bth::SEND_ONLY_INV
                } else if imm.is_some() {
                    bth::SEND_ONLY_IMM
                } else {
                    bth::SEND_ONLY
                };
                self.deliver_recv(&q, &data, imm, solicited, invalidate, op, data.len() as u64)
            }
            Request::Read { addr, rkey, len, .. } => {
                if len == 0 {
                    return Response::ReadData(Vec::new());
                }
                if !q.rd_ok {
                    self.qp_fatal(qpn, ae::AMP_RIGHTS_VIOLATION, ae::SRC_IN_READ_REQ, 0);
                    return Response::NakAccess;
                }
                match self
                    .translate(rkey, q.pd, addr, len, rights::REMOTE_READ)
                    .and_then(|c| self.copy_in(&c))
                {
                    Ok(d) => Response::ReadData(d),
                    Err(code) => {
                        self.qp_fatal(qpn, code, ae::SRC_IN_READ_REQ, 0);
                        Response::NakAccess
                    }
                }
            }
        }
    }

    /// Consumes one RQ WQE: scatters `data`, writes the RQ CQE.
    #[allow(clippy::too_many_arguments)]
    fn deliver_recv(
        &mut self,
        q: &Qp,
        data: &[u8],
        imm: Option<u64>,
        solicited: bool,
        invalidate: Option<u32>,
        op: u8,
        len: u64,
    ) -> Response {
        let Some(words) = self.rq_wqe(q) else { return Response::RnrNak };
        let frags = match wqe::decode_rq(&words) {
            Ok(f) => f,
            Err(_) => {
                self.counters.invalid_wqes += 1;
                self.qp_fatal(q.id, ae::WQE_UNEXPECTED_OPCODE, ae::SRC_RQ, q.rq_head);
                return Response::NakOp;
            }
        };
        let cap: u64 = frags.iter().map(|f| f.len as u64).sum();
        if (data.len() as u64) > cap {
            self.qp_fatal(q.id, ae::ROCE_REQ_LENGTH_ERROR, ae::SRC_RQ, q.rq_head);
            return Response::NakOp;
        }
        if let Err(code) = self.scatter(q.pd, &frags, data) {
            self.qp_fatal(q.id, code, ae::SRC_RQ, q.rq_head);
            return Response::NakAccess;
        }
        let mut inv_done = false;
        if let Some(stag) = invalidate {
            if let Err(code) = self.invalidate(stag, q.pd) {
                self.qp_fatal(q.id, code, ae::SRC_RQ, q.rq_head);
                return Response::NakInvalid;
            }
            inv_done = true;
        }
        let idx = q.rq_head;
        self.consume_rq(q.id, idx, len);
        // spec data-path §5.2: RQ CQE, WQE index in quanta
        let main = Cqe {
            payload_len: len as u32,
            ctx: q.compl_ctx,
            inv_stag: invalidate.unwrap_or(0),
            qp_id: q.id,
            wqe_idx: idx << q.rq_shift,
            ext: imm.is_some(),
            stag_or_ipv4: inv_done,
            solicited,
            op,
            ..Cqe::default()
        }
        .words();
        match imm {
            Some(v) => self.post_cqe_ext(
                q.rx_cq,
                main,
                Cqe::ext_imm_words(get(v, 31, 0), false),
                solicited,
            ),
            None => {
                self.post_cqe(q.rx_cq, main, solicited);
            }
        }
        Response::Ack
    }

    /// Writes an extended CQE: the extension in the next slot first (with
    /// that slot's own pass polarity), then the main CQE.
    fn post_cqe_ext(&mut self, cq_id: u32, main: [u64; 4], ext: [u64; 4], solicited: bool) {
        self.post_cqe_with(cq_id, main, Some(ext), solicited);
    }

    // ------------------------------------------------------------------
    // Protection
    // ------------------------------------------------------------------

    /// Translates `[addr, addr + len)` of STag `stag` to bus-address chunks,
    /// checking everything the device checks (spec control-path §5): the
    /// STag exists (index and key byte), is valid (registered, not
    /// invalidated), belongs to `pd`, grants `need`, and the range is within
    /// the region (VA-based or zero-based).
    ///
    /// Rights: `need` must be in the MR's ARIGHTS (REG_MR / ALLOC_STAG
    /// [52:48], or the FAST_REGISTER WQE's STAGRIGHTS, spec control-path
    /// §4.3.7, §4.3.9, §5.3; data-path §1.6). A remote need (REMOTE_READ /
    /// REMOTE_WRITE) also needs REMACCENABLED [53] of the CQP WQE that
    /// created the STag (REG_MR, or the ALLOC_STAG a FAST_REGISTER fills).
    /// The spec gives only what Linux writes there (ctrl.c:
    /// irdma_sc_mr_reg_non_shared, irdma_sc_alloc_stag), not what the device
    /// does with 0 and remote rights: the model takes the field at its name
    /// and refuses the remote access with AMP_RIGHTS_VIOLATION, the code of
    /// a missing right (model choice).
    ///
    /// Addressing: VA-based, `addr` is a VA in `[va, va + len)`; zero-based,
    /// `addr` is an offset in `[0, len)` and the MR's word @0 is the first
    /// byte's offset in its first page (spec control-path §4.3.9, §5.5;
    /// data-path §1.6). A zero-based MR whose first-byte offset is not below
    /// its page size (e.g. a whole VA written where the offset belongs) is
    /// outside what Linux ever writes and the spec does not say what the
    /// device makes of it: the model refuses every access to it with
    /// AMP_BOUNDS_VIOLATION (model choice) rather than guess.
    pub(crate) fn translate(
        &self,
        stag: u32,
        pd: u32,
        addr: u64,
        len: u64,
        need: u8,
    ) -> Prot<Vec<(u64, u64)>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let index = stag >> 8;
        let s = self.stags.get(&self.stag_slot(index)).ok_or(ae::AMP_UNALLOCATED_STAG)?;
        if s.index != index {
            return Err(ae::AMP_BAD_STAG_INDEX);
        }
        if s.key != Some(stag as u8) {
            return Err(ae::AMP_BAD_STAG_KEY);
        }
        if !s.valid || s.is_mw {
            return Err(ae::AMP_INVALID_STAG);
        }
        if s.pd != pd {
            return Err(ae::AMP_BAD_PD);
        }
        if s.rights & need != need {
            return Err(ae::AMP_RIGHTS_VIOLATION);
        }
        let remote = rights::REMOTE_READ | rights::REMOTE_WRITE;
        if need & remote != 0 && !s.created_by.remote_access {
            return Err(ae::AMP_RIGHTS_VIOLATION);
        }
        let end = addr.checked_add(len).ok_or(ae::AMP_TO_WRAP)?;
        let (off, fbo) = if s.va_based {
            if addr < s.va {
                return Err(ae::AMP_BOUNDS_VIOLATION);
            }
            (addr - s.va, s.va % s.page_size)
        } else {
            if s.va >= s.page_size {
                return Err(ae::AMP_BOUNDS_VIOLATION);
            }
            (addr, s.va)
        };
        let _ = end;
        if off.checked_add(len).is_none_or(|e| e > s.len) {
            return Err(ae::AMP_BOUNDS_VIOLATION);
        }
        let ps = s.page_size;
        let mut out = Vec::new();
        let mut pos = fbo + off;
        let mut left = len;
        while left > 0 {
            let page = pos / ps;
            let in_page = pos % ps;
            let n = (ps - in_page).min(left);
            let page_pa = match s.pbl {
                Pbl::Level0(pa) => {
                    (pa & !(ps - 1)).checked_add(page * ps).ok_or(ae::AMP_TO_WRAP)?
                }
                Pbl::Level1(first) => {
                    self.read_pble(first as u64 + page).ok_or(ae::LCE_QP_CATASTROPHIC)?
                }
                Pbl::Level2(root) => {
                    let leaf =
                        self.read_pble(root as u64 + page / 512).ok_or(ae::LCE_QP_CATASTROPHIC)?;
                    self.read_pble(leaf.checked_add(page % 512).ok_or(ae::LCE_QP_CATASTROPHIC)?)
                        .ok_or(ae::LCE_QP_CATASTROPHIC)?
                }
            };
            out.push(((page_pa & !(ps - 1)).wrapping_add(in_page), n));
            pos += n;
            left -= n;
        }
        Ok(out)
    }

    fn check_frags(&self, pd: u32, frags: &[Frag], need: u8) -> Prot<()> {
        for f in frags {
            self.translate(f.stag, pd, f.addr, f.len as u64, need)?;
        }
        Ok(())
    }

    fn copy_in(&self, chunks: &[(u64, u64)]) -> Prot<Vec<u8>> {
        let mut v = Vec::new();
        for &(pa, n) in chunks {
            let mut b = vec![0u8; n as usize];
            self.mem.read(pa, &mut b).map_err(|_| ae::LCE_QP_CATASTROPHIC)?;
            v.extend_from_slice(&b);
        }
        Ok(v)
    }

    fn copy_out(&self, chunks: &[(u64, u64)], data: &[u8]) -> Prot<()> {
        let mut at = 0usize;
        for &(pa, n) in chunks {
            let part = data.get(at..at + n as usize).ok_or(ae::LCE_QP_CATASTROPHIC)?;
            self.mem.write(pa, part).map_err(|_| ae::LCE_QP_CATASTROPHIC)?;
            at += n as usize;
        }
        Ok(())
    }

    /// Reads a payload from local memory (LOCAL_READ needed).
    fn gather(&self, pd: u32, p: &Payload) -> Prot<Vec<u8>> {
        match p {
            Payload::Inline(b) => Ok(b.clone()),
            Payload::Sges(frags) => {
                let mut v = Vec::new();
                for f in frags {
                    let c = self.translate(f.stag, pd, f.addr, f.len as u64, rights::LOCAL_READ)?;
                    v.extend(self.copy_in(&c)?);
                }
                Ok(v)
            }
        }
    }

    /// Writes `data` into local fragments in order (LOCAL_WRITE needed).
    fn scatter(&self, pd: u32, frags: &[Frag], data: &[u8]) -> Prot<()> {
        let mut at = 0usize;
        for f in frags {
            if at >= data.len() {
                break;
            }
            let n = (f.len as usize).min(data.len() - at);
            let c = self.translate(f.stag, pd, f.addr, n as u64, rights::LOCAL_WRITE)?;
            self.copy_out(&c, &data[at..at + n])?;
            at += n;
        }
        Ok(())
    }

    fn invalidate(&mut self, stag: u32, pd: u32) -> Prot<()> {
        let index = stag >> 8;
        let slot = self.stag_slot(index);
        let s = self.stags.get_mut(&slot).ok_or(ae::AMP_UNALLOCATED_STAG)?;
        if s.index != index {
            return Err(ae::AMP_BAD_STAG_INDEX);
        }
        if s.key != Some(stag as u8) {
            return Err(ae::AMP_BAD_STAG_KEY);
        }
        if s.pd != pd {
            return Err(ae::AMP_BAD_PD);
        }
        s.valid = false;
        Ok(())
    }
}

/// What executing one SQ WQE led to.
enum Outcome {
    Done,
    Stall,
    Fatal(u16),
    Error(u16, u16),
}
