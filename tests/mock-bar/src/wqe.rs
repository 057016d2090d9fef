//! SQ and RQ WQE decoding, GEN_2, as the device reads them.
//!
//! Pure functions on the WQE's 64-bit words (little-endian values as they
//! sit in memory, starting at the WQE's first quantum). Sources: spec
//! data-path §1.3–1.7, §1.9, §2.1 (uk.c: irdma_uk_rdma_write, irdma_uk_send,
//! irdma_uk_rdma_read, irdma_uk_inline_*, irdma_set_fragment,
//! irdma_uk_post_receive; ctrl.c: irdma_sc_mr_fast_register).

use crate::bits::{bit, get};

/// SQ opcodes (spec data-path §1.9, defs.h: IRDMAQP_OP_*).
#[allow(missing_docs)]
pub mod opc {
    pub const RDMA_WRITE: u8 = 0x00;
    pub const RDMA_READ: u8 = 0x01;
    pub const SEND: u8 = 0x03;
    pub const SEND_INV: u8 = 0x04;
    pub const SEND_SOL: u8 = 0x05;
    pub const SEND_SOL_INV: u8 = 0x06;
    pub const BIND_MW: u8 = 0x08;
    pub const FAST_REGISTER: u8 = 0x09;
    pub const LOCAL_INVALIDATE: u8 = 0x0A;
    pub const RDMA_READ_LOC_INV: u8 = 0x0B;
    pub const NOP: u8 = 0x0C;
    pub const RDMA_WRITE_SOL: u8 = 0x0D;
    pub const ATOMIC_FETCH_ADD: u8 = 0x0F;
    pub const ATOMIC_COMPARE_SWAP: u8 = 0x11;
}

/// Maximum inline bytes on GEN_2 (user.h: IRDMA_MAX_INLINE_DATA_SIZE).
pub const MAX_INLINE: usize = 101;
/// Maximum fragments per WQE on GEN_2 (icrdma_hw.h: ICRDMA_MAX_WQ_FRAGMENT_COUNT).
pub const MAX_FRAGS: usize = 13;

/// One scatter/gather fragment (spec data-path §1.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frag {
    /// Address (IOVA within the MR named by `stag`).
    pub addr: u64,
    /// Local STag (lkey).
    pub stag: u32,
    /// Length in bytes (31 bits).
    pub len: u32,
}

impl Frag {
    fn at(w: &[u64], i: usize) -> Option<Frag> {
        let a = *w.get(i)?;
        let b = *w.get(i + 1)?;
        Some(Frag { addr: a, stag: get(b, 31, 0) as u32, len: get(b, 62, 32) as u32 })
    }
    fn is_null(&self) -> bool {
        self.addr == 0 && self.stag == 0 && self.len == 0
    }
}

/// Where the data of a WRITE or SEND comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// Gathered from local memory.
    Sges(Vec<Frag>),
    /// Carried in the WQE.
    Inline(Vec<u8>),
}

impl Payload {
    /// Total length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Payload::Sges(v) => v.iter().map(|f| f.len as u64).sum(),
            Payload::Inline(v) => v.len() as u64,
        }
    }
    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A decoded SQ operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SqOp {
    /// RDMA WRITE (opcode 0x00 / 0x0D).
    Write {
        /// Remote address.
        remote_addr: u64,
        /// Remote STag.
        rkey: u32,
        /// Immediate data (32-bit value in the low half).
        imm: Option<u64>,
        /// WRITE with solicited event (0x0D).
        solicited: bool,
        /// Data.
        payload: Payload,
    },
    /// RDMA READ (0x01 / 0x0B).
    Read {
        /// Remote address.
        remote_addr: u64,
        /// Remote STag.
        rkey: u32,
        /// Local sinks.
        sges: Vec<Frag>,
        /// READ with local invalidate (0x0B).
        local_invalidate: bool,
    },
    /// SEND family (0x03..0x06).
    Send {
        /// Immediate data.
        imm: Option<u64>,
        /// Solicited event (0x05 / 0x06).
        solicited: bool,
        /// STag to invalidate at the responder (0x04 / 0x06).
        invalidate: Option<u32>,
        /// Data.
        payload: Payload,
        /// UD: Q_Key (+16 [31:0]).
        qkey: u32,
        /// UD: destination QPN (+16 [55:32]).
        dest_qp: u32,
        /// UD: address-handle index, header [24:0] (spec data-path §1.3:
        /// the same low bits as the STag to invalidate).
        ah_id: u32,
    },
    /// BIND_MW (0x08).
    BindMw {
        /// Parent MR STag.
        mr_stag: u32,
        /// Window STag.
        mw_stag: u32,
        /// Window VA (0 if zero-based).
        va: u64,
        /// Window length.
        len: u64,
        /// Access rights field.
        rights: u8,
        /// VA-based window.
        va_based: bool,
        /// Type-1 window.
        type1: bool,
    },
    /// FAST_REGISTER (0x09).
    FastRegister {
        /// Key byte.
        key: u8,
        /// STag index (STag >> 8).
        index: u32,
        /// VA or first-byte offset.
        va: u64,
        /// Region length.
        len: u64,
        /// First PBLE index (28 bits, split lo/hi in the WQE).
        first_pble: u32,
        /// LPBLSIZE (1 = level 1, 3 = level 2).
        pbl_level: u8,
        /// HPAGESIZE (0 4K, 1 2M, 2 1G).
        page_size: u8,
        /// Access rights.
        rights: u8,
        /// VA-based.
        va_based: bool,
    },
    /// LOCAL_INVALIDATE (0x0A).
    LocalInvalidate {
        /// STag to invalidate.
        stag: u32,
    },
    /// NOP (0x0C).
    Nop,
    /// Atomic fetch-and-add (0x0F).
    FetchAdd {
        /// Local result buffer.
        local: Frag,
        /// Remote address.
        remote_addr: u64,
        /// Remote STag.
        rkey: u32,
        /// Value to add.
        add: u64,
    },
    /// Atomic compare-and-swap (0x11).
    CompareSwap {
        /// Local result buffer.
        local: Frag,
        /// Remote address.
        remote_addr: u64,
        /// Remote STag.
        rkey: u32,
        /// Swap value.
        swap: u64,
        /// Compare value.
        compare: u64,
    },
}

/// A decoded SQ WQE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqWqe {
    /// The operation.
    pub op: SqOp,
    /// Raw opcode field.
    pub opcode: u8,
    /// Size in 32-byte quanta.
    pub quanta: u32,
    /// SIGCOMPL.
    pub signaled: bool,
    /// READFENCE.
    pub read_fence: bool,
    /// LOCALFENCE (UDPHEADER for UD).
    pub local_fence: bool,
    /// REPORTRTT (not for FAST_REGISTER, where the bit belongs to HPAGESIZE).
    pub report_rtt: bool,
    /// PUSHWQE.
    pub push: bool,
}

/// Why a WQE could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WqeError {
    /// Opcode not defined for GEN_2 SQs.
    BadOpcode(u8),
    /// More fragments than 8 quanta can hold, or more SGEs than the GEN_2
    /// maximum of 13 (spec data-path §3, ICRDMA_MAX_WQ_FRAGMENT_COUNT).
    TooManyFrags(u8),
    /// ADDFRAGCNT is odd: on GEN_2 the pad fragment is counted, so a valid
    /// value is always 2 × (quanta − 1) (spec data-path §1.5).
    OddFragCount(u8),
    /// The WQE starts at quanta `start % 8` and needs `quanta`: it would
    /// cross an 8-quanta chunk (spec data-path §1.10, chunk rule).
    CrossesChunk { start: u32, quanta: u32 },
    /// Inline length above the GEN_2 maximum.
    InlineTooLong(u8),
    /// An extra quantum's valid bit does not match the header's.
    MissingValid(u32),
    /// Fewer words than the WQE needs.
    Truncated,
}

/// Quanta of an SQ WQE from its header word alone (what the device must
/// fetch): spec data-path §1.2 tables.
pub fn sq_quanta(header: u64) -> Result<u32, WqeError> {
    let opcode = get(header, 37, 32) as u8;
    if bit(header, 57) {
        let len = get(header, 55, 48) as usize;
        if len > MAX_INLINE {
            return Err(WqeError::InlineTooLong(len as u8));
        }
        return Ok(if len <= 8 { 1 } else { 1 + (len - 8).div_ceil(31) as u32 });
    }
    match opcode {
        opc::BIND_MW | opc::FAST_REGISTER | opc::LOCAL_INVALIDATE | opc::NOP => Ok(1),
        opc::ATOMIC_FETCH_ADD | opc::ATOMIC_COMPARE_SWAP => Ok(2),
        opc::RDMA_WRITE
        | opc::RDMA_WRITE_SOL
        | opc::RDMA_READ
        | opc::RDMA_READ_LOC_INV
        | opc::SEND
        | opc::SEND_INV
        | opc::SEND_SOL
        | opc::SEND_SOL_INV => {
            let addfrag = get(header, 41, 38) as u32;
            let frags = addfrag + 1;
            if frags > 15 {
                return Err(WqeError::TooManyFrags(frags as u8));
            }
            // spec data-path §1.5: on GEN_2 ADDFRAGCNT counts the pad
            // fragment, so it is 2 × (quanta − 1), always even
            if addfrag % 2 == 1 {
                return Err(WqeError::OddFragCount(addfrag as u8));
            }
            Ok(frags / 2 + 1)
        }
        other => Err(WqeError::BadOpcode(other)),
    }
}

/// Word index of fragment slot `k` (slot 0 at byte 0, slot k ≥ 1 at byte
/// 32 + 16·(k − 1)): spec data-path §1.5.
fn slot_word(k: usize) -> usize {
    if k == 0 { 0 } else { 4 + 2 * (k - 1) }
}

/// Fragments in slots `first..=last`, dropping a trailing null pad fragment
/// (GEN_2 pads an even fragment count, §1.5).
fn frags(w: &[u64], first: usize, last: usize) -> Result<Vec<Frag>, WqeError> {
    let mut v = Vec::new();
    for k in first..=last {
        v.push(Frag::at(w, slot_word(k)).ok_or(WqeError::Truncated)?);
    }
    if v.last().is_some_and(Frag::is_null) {
        v.pop();
    }
    Ok(v)
}

/// Inline bytes: 8 at bytes 8..15, then 31 per extra quantum (§1.7).
fn inline_bytes(w: &[u64], len: usize) -> Result<Vec<u8>, WqeError> {
    let mut out = Vec::with_capacity(len);
    let first = w.get(1).ok_or(WqeError::Truncated)?.to_le_bytes();
    out.extend_from_slice(&first[..len.min(8)]);
    let mut q = 1;
    while out.len() < len {
        let mut quantum = [0u8; 32];
        for i in 0..4 {
            let word = *w.get(q * 4 + i).ok_or(WqeError::Truncated)?;
            quantum[i * 8..i * 8 + 8].copy_from_slice(&word.to_le_bytes());
        }
        let take = (len - out.len()).min(31);
        out.extend_from_slice(&quantum[..take]);
        q += 1;
    }
    Ok(out)
}

/// Decodes an SQ WQE. `w` starts at the first quantum and holds at least
/// `sq_quanta(w[3]) * 4` words. The header's valid bit is the caller's
/// business; here every extra quantum must carry the same valid bit in bit 63
/// of its last word (fragment valid bit or inline valid byte).
pub fn decode_sq(w: &[u64]) -> Result<SqWqe, WqeError> {
    let hdr = *w.get(3).ok_or(WqeError::Truncated)?;
    let quanta = sq_quanta(hdr)?;
    let valid = bit(hdr, 63);
    if w.len() < quanta as usize * 4 {
        return Err(WqeError::Truncated);
    }
    for q in 1..quanta {
        if bit(w[q as usize * 4 + 3], 63) != valid {
            return Err(WqeError::MissingValid(q));
        }
    }
    let opcode = get(hdr, 37, 32) as u8;
    let op = sq_op(w, hdr, opcode)?;
    let frag_ops = !matches!(opcode, opc::FAST_REGISTER | opc::BIND_MW);
    Ok(SqWqe {
        op,
        opcode,
        quanta,
        signaled: bit(hdr, 62),
        read_fence: bit(hdr, 60),
        local_fence: bit(hdr, 61),
        report_rtt: frag_ops && bit(hdr, 46),
        push: bit(hdr, 56),
    })
}

/// [`decode_sq`]: the operation of opcode `opcode`, from the WQE `w` with
/// header `hdr`.
fn sq_op(w: &[u64], hdr: u64, opcode: u8) -> Result<SqOp, WqeError> {
    let remstag = get(hdr, 31, 0) as u32;
    let imm_flag = bit(hdr, 47);
    let addfrag = get(hdr, 41, 38) as usize;
    let imm = imm_flag.then_some(w[0]);
    Ok(match opcode {
        opc::RDMA_WRITE | opc::RDMA_WRITE_SOL => SqOp::Write {
            remote_addr: w[2],
            rkey: remstag,
            imm,
            solicited: opcode == opc::RDMA_WRITE_SOL,
            payload: sq_payload(w, hdr)?,
        },
        opc::RDMA_READ | opc::RDMA_READ_LOC_INV => SqOp::Read {
            remote_addr: w[2],
            rkey: remstag,
            sges: frags(w, 0, addfrag).and_then(limit_frags)?,
            local_invalidate: opcode == opc::RDMA_READ_LOC_INV,
        },
        opc::SEND | opc::SEND_INV | opc::SEND_SOL | opc::SEND_SOL_INV => SqOp::Send {
            imm,
            solicited: matches!(opcode, opc::SEND_SOL | opc::SEND_SOL_INV),
            invalidate: matches!(opcode, opc::SEND_INV | opc::SEND_SOL_INV).then_some(remstag),
            payload: sq_payload(w, hdr)?,
            qkey: get(w[2], 31, 0) as u32,
            dest_qp: get(w[2], 55, 32) as u32,
            ah_id: get(hdr, 24, 0) as u32,
        },
        opc::BIND_MW => SqOp::BindMw {
            mr_stag: get(w[1], 63, 32) as u32,
            mw_stag: get(w[1], 31, 0) as u32,
            va: w[0],
            len: w[2],
            rights: get(hdr, 52, 48) as u8,
            va_based: bit(hdr, 53),
            type1: bit(hdr, 54),
        },
        opc::FAST_REGISTER => SqOp::FastRegister {
            key: get(hdr, 7, 0) as u8,
            index: get(hdr, 31, 8) as u32,
            va: w[0],
            len: get(w[2], 40, 0),
            first_pble: ((get(w[1], 11, 0) << 16) | get(w[2], 63, 48)) as u32,
            pbl_level: get(hdr, 45, 44) as u8,
            page_size: get(hdr, 47, 46) as u8,
            rights: get(hdr, 52, 48) as u8,
            va_based: bit(hdr, 53),
        },
        opc::LOCAL_INVALIDATE => SqOp::LocalInvalidate { stag: get(w[1], 31, 0) as u32 },
        opc::NOP => SqOp::Nop,
        // An atomic's operands sit in its second quantum; with the inline
        // bit set the header claims one quantum, so `w` may end before them
        // (an index panic found by the `model_wqe` fuzz target).
        opc::ATOMIC_FETCH_ADD => SqOp::FetchAdd {
            local: Frag { addr: w[0], stag: get(w[1], 31, 0) as u32, len: 8 },
            remote_addr: w[2],
            rkey: remstag,
            add: *w.get(4).ok_or(WqeError::Truncated)?,
        },
        opc::ATOMIC_COMPARE_SWAP => SqOp::CompareSwap {
            local: Frag { addr: w[0], stag: get(w[1], 31, 0) as u32, len: 8 },
            remote_addr: w[2],
            rkey: remstag,
            swap: *w.get(4).ok_or(WqeError::Truncated)?,
            compare: *w.get(5).ok_or(WqeError::Truncated)?,
        },
        other => return Err(WqeError::BadOpcode(other)),
    })
}

/// [`decode_sq`]'s fragment limit. spec data-path §3: at most 13 SGEs per
/// WQE on GEN_2 (ICRDMA_MAX_WQ_FRAGMENT_COUNT); the immediate and the pad
/// fragment are not SGEs
fn limit_frags(v: Vec<Frag>) -> Result<Vec<Frag>, WqeError> {
    if v.len() > MAX_FRAGS { Err(WqeError::TooManyFrags(v.len() as u8)) } else { Ok(v) }
}

/// [`decode_sq`]: the payload of a WRITE or SEND: inline bytes, or SGEs
/// (after the immediate, when there is one).
fn sq_payload(w: &[u64], hdr: u64) -> Result<Payload, WqeError> {
    let imm_flag = bit(hdr, 47);
    let inline = bit(hdr, 57);
    let addfrag = get(hdr, 41, 38) as usize;
    if inline {
        inline_bytes(w, get(hdr, 55, 48) as usize).map(Payload::Inline)
    } else if imm_flag {
        // slot 0 is the immediate; SGEs start at slot 1
        if addfrag == 0 {
            Ok(Payload::Sges(Vec::new()))
        } else {
            frags(w, 1, addfrag).and_then(limit_frags).map(Payload::Sges)
        }
    } else {
        frags(w, 0, addfrag).and_then(limit_frags).map(Payload::Sges)
    }
}

/// Decodes an RQ WQE (spec data-path §2.1): fragments at slots
/// `0..=ADDFRAGCNT`, each extra quantum's last word carrying the valid bit.
/// `w` holds the whole WQE stride.
pub fn decode_rq(w: &[u64]) -> Result<Vec<Frag>, WqeError> {
    let hdr = *w.get(3).ok_or(WqeError::Truncated)?;
    let valid = bit(hdr, 63);
    let addfrag = get(hdr, 41, 38) as usize;
    if addfrag + 1 > 15 {
        return Err(WqeError::TooManyFrags(addfrag as u8 + 1));
    }
    // spec data-path §2.1: same ADDFRAGCNT rule and GEN_2 pad counting as
    // §1.5, so the value is even
    if addfrag % 2 == 1 {
        return Err(WqeError::OddFragCount(addfrag as u8));
    }
    let frag_cnt = addfrag + 1;
    let quanta = frag_cnt / 2 + 1;
    if w.len() < quanta * 4 {
        return Err(WqeError::Truncated);
    }
    for q in 1..quanta {
        if bit(w[q * 4 + 3], 63) != valid {
            return Err(WqeError::MissingValid(q as u32));
        }
    }
    let v = frags(w, 0, addfrag)?;
    if v.len() > MAX_FRAGS {
        return Err(WqeError::TooManyFrags(v.len() as u8));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quanta_from_header() {
        assert_eq!(sq_quanta(0xc000_8380_00be_ef01), Ok(8)); // write+imm, 14 frags
        assert_eq!(sq_quanta(0xc265_0003_0000_0000), Ok(4)); // inline 101
        assert_eq!(sq_quanta(0xc266_0003_0000_0000), Err(WqeError::InlineTooLong(102)));
        assert_eq!(sq_quanta(0x8000_003f_0000_0000), Err(WqeError::BadOpcode(0x3f)));
        assert_eq!(sq_quanta(0x8000_03c0_0000_0000), Err(WqeError::TooManyFrags(16)));
    }

    #[test]
    fn missing_valid_bit_in_second_quantum_is_reported() {
        // WRITE with 2 SGEs + pad: the pad fragment lost its valid bit
        let w = [
            0x1000,
            0x8000_0010_0000_0001,
            0x2000,
            0x8000_0080_0000_0009,
            0x3000,
            0x8000_0010_0000_0001,
            0,
            0,
        ];
        assert_eq!(decode_sq(&w), Err(WqeError::MissingValid(1)));
    }

    /// Fuzz (`model_wqe`): an atomic with the inline bit set is one quantum
    /// by its header, and its operands (second quantum) were read past the
    /// end of `w`: an index panic. Now it is `Truncated`.
    #[test]
    fn inline_atomic_in_one_quantum_is_truncated_not_a_panic() {
        for op in [opc::ATOMIC_FETCH_ADD, opc::ATOMIC_COMPARE_SWAP] {
            let hdr = 1 << 63 | 1 << 57 | (op as u64) << 32;
            assert_eq!(sq_quanta(hdr), Ok(1));
            assert_eq!(decode_sq(&[0x1000, 5, 0x9000, hdr]).err(), Some(WqeError::Truncated));
            assert_eq!(
                decode_sq(&[0x1000, 5, 0x9000, hdr, 7]).is_ok(),
                op == opc::ATOMIC_FETCH_ADD
            );
        }
    }
}
