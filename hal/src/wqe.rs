//! GEN_2 (E810) data-path layouts: SQ/RQ WQE words, CQE words, shadow areas
//! and opcode values.
//!
//! Source: spec data-path §1.3–1.9 (SQ WQE header, fragments, per-opcode
//! words), §2.1 (RQ WQE), §4.3 (shadow areas) and §5.2 (CQE), which take the
//! bit ranges from the Intel driver's `defs.h` (`IRDMAQPSQ_*`, `IRDMACQ_*`,
//! `IRDMA_CQ_*`, `IRDMA_CQ_DBSA_*`) and rdma-core's `providers/irdma/defs.h`.
//! Every WQE/CQE word is a little-endian 64-bit qword; "+N" is its byte offset
//! in the entry.
//!
//! Several hardware fields share bits (e.g. `REMSTAG`/`AHID`,
//! `LOCALFENCE`/`UDPHEADER`, `INLINEDATALEN`/`STAGRIGHTS`); each `const`
//! disjointness check below covers the set of fields one kind of WQE uses
//! together.

use crate::field::{Field, assert_disjoint};

/// Bytes in one SQ/RQ quantum (`IRDMA_QP_WQE_MIN_SIZE`, spec data-path §1.1).
pub const QUANTUM_BYTES: usize = 32;
/// Qwords in one quantum (`IRDMA_WQE_SIZE`, spec data-path §1.1).
pub const QUANTUM_QWORDS: usize = 4;
/// Largest SQ WQE in quanta on GEN_2 (`IRDMA_MAX_QUANTA_PER_WR`,
/// `max_hw_sq_chunk`; spec data-path §1.1). A WQE never crosses a chunk of
/// this many quanta (spec data-path §1.10).
pub const SQ_CHUNK_QUANTA: u32 = 8;
/// Bytes in one GEN_2 CQE (`IRDMA_CQE_SIZE` qwords; spec data-path §5.1).
pub const CQE_BYTES: usize = 32;
/// Qwords in one CQ/QP shadow area (`IRDMA_SHADOW_AREA_SIZE`; spec data-path §3.3).
pub const SHADOW_QWORDS: usize = 8;

/// Byte offset of the header qword in the first quantum (spec data-path §1.3).
pub const HDR_OFFSET: usize = 24;

/// SQ WQE header qword (+24) fields (spec data-path §1.3; defs.h `IRDMAQPSQ_*`).
pub mod sq_hdr {
    use super::*;

    /// `IRDMAQPSQ_REMSTAG` \[31:0\]: rkey, or STag to invalidate for SEND_INV.
    pub const REMSTAG: Field = Field::bits(31, 0);
    /// `IRDMAQPSQ_AHID` \[24:0\]: address handle index, UD SEND only; OR-ed
    /// into the same low bits as `REMSTAG` (spec data-path §1.3, uncertainty 4).
    pub const AHID: Field = Field::bits(24, 0);
    /// `IRDMAQPSQ_OPCODE` \[37:32\] (values in [`super::op`]).
    pub const OPCODE: Field = Field::bits(37, 32);
    /// `IRDMAQPSQ_ADDFRAGCNT` \[41:38\]: additional fragment count (§1.5).
    pub const ADDFRAGCNT: Field = Field::bits(41, 38);
    /// `IRDMAQPSQ_L4LEN` \[45:42\]: UD/raw L4 length.
    pub const L4LEN: Field = Field::bits(45, 42);
    /// `IRDMAQPSQ_REPORTRTT` \[46\].
    pub const REPORTRTT: Field = Field::bit(46);
    /// `IRDMAQPSQ_IMMDATAFLAG` \[47\]: immediate data in qword +0.
    pub const IMMDATAFLAG: Field = Field::bit(47);
    /// `IRDMAQPSQ_INLINEDATALEN` \[55:48\]: inline byte count.
    pub const INLINEDATALEN: Field = Field::bits(55, 48);
    /// `IRDMAQPSQ_PUSHWQE` \[56\].
    pub const PUSHWQE: Field = Field::bit(56);
    /// `IRDMAQPSQ_INLINEDATAFLAG` \[57\].
    pub const INLINEDATAFLAG: Field = Field::bit(57);
    /// `IRDMAQPSQ_READFENCE` \[60\].
    pub const READFENCE: Field = Field::bit(60);
    /// `IRDMAQPSQ_LOCALFENCE` \[61\] (also `IRDMAQPSQ_UDPHEADER` for UD sends).
    pub const LOCALFENCE: Field = Field::bit(61);
    /// `IRDMAQPSQ_UDPHEADER` \[61\]: same bit as [`LOCALFENCE`].
    pub const UDPHEADER: Field = Field::bit(61);
    /// `IRDMAQPSQ_SIGCOMPL` \[62\]: generate a CQE.
    pub const SIGCOMPL: Field = Field::bit(62);
    /// `IRDMAQPSQ_VALID` \[63\]: the SQ polarity.
    pub const VALID: Field = Field::bit(63);

    // Fast-register (spec data-path §1.6, FAST REGISTER; ctrl.c:
    // irdma_sc_mr_fast_register).
    /// `IRDMAQPSQ_STAGKEY` \[7:0\]: key byte of the STag.
    pub const STAGKEY: Field = Field::bits(7, 0);
    /// `IRDMAQPSQ_STAGINDEX` \[31:8\]: STag index.
    pub const STAGINDEX: Field = Field::bits(31, 8);
    /// `IRDMAQPSQ_LPBLSIZE` \[45:44\]: PBL level.
    pub const LPBLSIZE: Field = Field::bits(45, 44);
    /// `IRDMAQPSQ_HPAGESIZE` \[47:46\]: 0 = 4 KiB, 1 = 2 MiB, 2 = 1 GiB.
    pub const HPAGESIZE: Field = Field::bits(47, 46);
    /// `IRDMAQPSQ_STAGRIGHTS` \[52:48\].
    pub const STAGRIGHTS: Field = Field::bits(52, 48);
    /// `IRDMAQPSQ_VABASEDTO` \[53\]: 1 = VA-based.
    pub const VABASEDTO: Field = Field::bit(53);
    /// `IRDMAQPSQ_REMOTE_ATOMICS_EN` \[55\].
    pub const REMOTE_ATOMICS_EN: Field = Field::bit(55);

    /// Fields of an RDMA WRITE/READ/SEND header.
    pub const DATA_HDR: [Field; 13] = [
        REMSTAG,
        OPCODE,
        ADDFRAGCNT,
        L4LEN,
        REPORTRTT,
        IMMDATAFLAG,
        INLINEDATALEN,
        PUSHWQE,
        INLINEDATAFLAG,
        READFENCE,
        LOCALFENCE,
        SIGCOMPL,
        VALID,
    ];
    /// Fields of a fast-register header.
    pub const FASTREG_HDR: [Field; 13] = [
        STAGKEY,
        STAGINDEX,
        OPCODE,
        LPBLSIZE,
        HPAGESIZE,
        STAGRIGHTS,
        VABASEDTO,
        REMOTE_ATOMICS_EN,
        PUSHWQE,
        READFENCE,
        LOCALFENCE,
        SIGCOMPL,
        VALID,
    ];
    const _: () = assert_disjoint(&DATA_HDR);
    const _: () = assert_disjoint(&FASTREG_HDR);
    const _: () = assert!(AHID.lo == REMSTAG.lo && AHID.hi() < REMSTAG.hi());
    const _: () = assert!(UDPHEADER.lo == LOCALFENCE.lo);
}

/// A 16-byte fragment (SGE) in a WQE: address qword, then this qword
/// (spec data-path §1.4; uk.c: irdma_set_fragment; defs.h `IRDMAQPSQ_FRAG_*`).
pub mod frag {
    use super::*;

    /// `IRDMAQPSQ_FRAG_STAG` \[31:0\]: the SGE lkey.
    pub const STAG: Field = Field::bits(31, 0);
    /// `IRDMAQPSQ_FRAG_LEN` \[62:32\]: the SGE length (31 bits).
    pub const LEN: Field = Field::bits(62, 32);
    /// `IRDMAQPSQ_FRAG_VALID` \[63\]: the WQE polarity.
    pub const VALID: Field = Field::bit(63);
    const _: () = assert_disjoint(&[STAG, LEN, VALID]);
}

/// Qword +16 of a SEND WQE (spec data-path §1.6 SEND; defs.h
/// `IRDMAQPSQ_DESTQKEY`, `IRDMAQPSQ_DESTQPN`).
pub mod send16 {
    use super::*;
    /// `IRDMAQPSQ_DESTQKEY` \[31:0\].
    pub const DESTQKEY: Field = Field::bits(31, 0);
    /// `IRDMAQPSQ_DESTQPN` \[55:32\].
    pub const DESTQPN: Field = Field::bits(55, 32);
    const _: () = assert_disjoint(&[DESTQKEY, DESTQPN]);
}

/// Qwords +8 and +16 of a fast-register WQE (spec data-path §1.6; ctrl.c:
/// irdma_sc_mr_fast_register).
pub mod fastreg {
    use super::*;
    /// +8 `IRDMAQPSQ_FIRSTPMPBLIDXHI` \[11:0\]: bits 27:16 of the first PBLE index.
    pub const FIRSTPMPBLIDXHI: Field = Field::bits(11, 0);
    /// +8 `IRDMAQPSQ_PBLADDR` \[63:12\]: host PBL address >> 12 (kernel: 0).
    pub const PBLADDR: Field = Field::bits(63, 12);
    /// +16 `IRDMAQPSQ_STAGLEN` \[40:0\]: MR length.
    pub const STAGLEN: Field = Field::bits(40, 0);
    /// +16 `IRDMAQPSQ_FIRSTPMPBLIDXLO` \[63:48\]: low 16 bits of the first PBLE index.
    pub const FIRSTPMPBLIDXLO: Field = Field::bits(63, 48);
    const _: () = assert_disjoint(&[FIRSTPMPBLIDXHI, PBLADDR]);
    const _: () = assert_disjoint(&[STAGLEN, FIRSTPMPBLIDXLO]);
}

/// Inline data (spec data-path §1.7; uk.c: irdma_copy_inline_data).
pub mod inline {
    /// Payload bytes carried in the first quantum (at WQE bytes 8..15).
    pub const FIRST_QUANTUM_BYTES: usize = 8;
    /// Payload bytes per further quantum (byte 31 is the valid byte).
    pub const PER_QUANTUM_BYTES: usize = 31;
    /// Bit of the valid byte that holds the polarity (`IRDMA_INLINE_VALID_S`).
    pub const VALID_SHIFT: u8 = 7;
    /// Largest inline payload on GEN_2 (`IRDMA_MAX_INLINE_DATA_SIZE`, §1.7).
    pub const MAX_BYTES: usize = 101;
}

/// SQ WQE opcodes (spec data-path §1.9; defs.h `IRDMAQP_OP_*`).
pub mod op {
    /// RDMA WRITE (also with immediate).
    pub const RDMA_WRITE: u8 = 0x00;
    /// RDMA READ.
    pub const RDMA_READ: u8 = 0x01;
    /// SEND (also with immediate).
    pub const SEND: u8 = 0x03;
    /// SEND with invalidate.
    pub const SEND_INV: u8 = 0x04;
    /// SEND with solicited event.
    pub const SEND_SOL: u8 = 0x05;
    /// SEND with solicited event and invalidate.
    pub const SEND_SOL_INV: u8 = 0x06;
    /// BIND MW.
    pub const BIND_MW: u8 = 0x08;
    /// FAST REGISTER (non-shared MR).
    pub const FAST_REG: u8 = 0x09;
    /// LOCAL INVALIDATE.
    pub const INV_STAG: u8 = 0x0A;
    /// RDMA READ with local invalidate.
    pub const RDMA_READ_LOC_INV: u8 = 0x0B;
    /// NOP.
    pub const NOP: u8 = 0x0C;
    /// RDMA WRITE with solicited event.
    pub const RDMA_WRITE_SOL: u8 = 0x0D;
    /// ATOMIC FETCH-ADD.
    pub const ATOMIC_FETCH_ADD: u8 = 0x0F;
    /// ATOMIC COMPARE-SWAP.
    pub const ATOMIC_COMPARE_SWAP: u8 = 0x11;
}

/// RQ WQE header qword (+24) (spec data-path §2.1; uk.c: irdma_uk_post_receive).
pub mod rq_hdr {
    use super::*;
    /// `IRDMAQPSQ_ADDFRAGCNT` \[41:38\].
    pub const ADDFRAGCNT: Field = Field::bits(41, 38);
    /// `IRDMAQPSQ_VALID` \[63\]: the RQ polarity.
    pub const VALID: Field = Field::bit(63);
    const _: () = assert_disjoint(&[ADDFRAGCNT, VALID]);
}

/// CQE words (spec data-path §5.2; defs.h `IRDMACQ_*`, `IRDMA_CQ_*`).
pub mod cqe {
    use super::*;

    /// +0 `IRDMACQ_PAYLDLEN` \[31:0\]: bytes received.
    pub const PAYLDLEN: Field = Field::bits(31, 0);
    /// +0 `IRDMACQ_TCPSQN_ROCEPSN_RTT_TS` \[63:32\].
    pub const TCPSQN_ROCEPSN_RTT_TS: Field = Field::bits(63, 32);
    const _: () = assert_disjoint(&[PAYLDLEN, TCPSQN_ROCEPSN_RTT_TS]);

    /// +16 `IRDMACQ_INVSTAG` \[31:0\] (also `IRDMACQ_UDSRCQPN`).
    pub const INVSTAG: Field = Field::bits(31, 0);
    /// +16 `IRDMACQ_UDSRCQPN` \[31:0\]: UD source QPN.
    pub const UDSRCQPN: Field = Field::bits(31, 0);
    /// +16 `IRDMACQ_QPID` \[55:32\].
    pub const QPID: Field = Field::bits(55, 32);
    const _: () = assert_disjoint(&[INVSTAG, QPID]);

    /// +24 `IRDMA_CQ_MINERR` \[15:0\].
    pub const MINERR: Field = Field::bits(15, 0);
    /// +24 `IRDMA_CQ_MAJERR` \[31:16\].
    pub const MAJERR: Field = Field::bits(31, 16);
    /// +24 `IRDMA_CQ_WQEIDX` \[46:32\].
    pub const WQEIDX: Field = Field::bits(46, 32);
    /// +24 `IRDMA_CQ_EXTCQE` \[50\].
    pub const EXTCQE: Field = Field::bit(50);
    /// +24 `IRDMACQ_PSHDROP` \[51\].
    pub const PSHDROP: Field = Field::bit(51);
    /// +24 `IRDMA_CQ_SRQ` \[52\].
    pub const SRQ: Field = Field::bit(52);
    /// +24 `IRDMACQ_STAG` \[53\] (same bit as `IRDMACQ_IPV4`).
    pub const STAG: Field = Field::bit(53);
    /// +24 `IRDMACQ_IPV4` \[53\].
    pub const IPV4: Field = Field::bit(53);
    /// +24 `IRDMACQ_SOEVENT` \[54\].
    pub const SOEVENT: Field = Field::bit(54);
    /// +24 `IRDMA_CQ_ERROR` \[55\].
    pub const ERROR: Field = Field::bit(55);
    /// +24 `IRDMACQ_OP` \[61:56\].
    pub const OP: Field = Field::bits(61, 56);
    /// +24 `IRDMA_CQ_SQ` \[62\]: 1 = SQ completion.
    pub const SQ: Field = Field::bit(62);
    /// +24 `IRDMA_CQ_VALID` \[63\].
    pub const VALID: Field = Field::bit(63);
    const _: () = assert_disjoint(&[
        MINERR, MAJERR, WQEIDX, EXTCQE, PSHDROP, SRQ, STAG, SOEVENT, ERROR, OP, SQ, VALID,
    ]);

    /// ext +0 `IRDMA_CQ_IMMDATALOW32` \[31:0\].
    pub const IMMDATALOW32: Field = Field::bits(31, 0);
    /// ext +16 `IRDMA_CQ_UDSMAC` \[47:0\].
    pub const UDSMAC: Field = Field::bits(47, 0);
    /// ext +16 `IRDMA_CQ_UDVLAN` \[63:48\].
    pub const UDVLAN: Field = Field::bits(63, 48);
    const _: () = assert_disjoint(&[UDSMAC, UDVLAN]);
    /// ext +24 `IRDMA_CQ_UDVLANVALID` \[60\].
    pub const UDVLANVALID: Field = Field::bit(60);
    /// ext +24 `IRDMA_CQ_UDSMACVALID` \[61\].
    pub const UDSMACVALID: Field = Field::bit(61);
    /// ext +24 `IRDMA_CQ_IMMVALID` \[62\].
    pub const IMMVALID: Field = Field::bit(62);
    /// ext +24 `IRDMA_CQ_VALID` \[63\].
    pub const EXT_VALID: Field = Field::bit(63);
    const _: () = assert_disjoint(&[UDVLANVALID, UDSMACVALID, IMMVALID, EXT_VALID]);

    /// `IRDMA_FLUSH_MAJOR_ERR`: major code of a flush completion (§5.5).
    pub const FLUSH_MAJOR_ERR: u16 = 1;
    /// `IRDMA_SRQFLUSH_RSVD_MAJOR_ERR`: minor is an AE code (§5.5).
    pub const SRQFLUSH_RSVD_MAJOR_ERR: u16 = 0xFFFE;
}

/// Shadow-area words (spec data-path §4.3; defs.h `IRDMA_QP_DBSA_*`,
/// `IRDMA_CQ_DBSA_*`).
pub mod shadow {
    use super::*;
    /// QP shadow +0 `IRDMA_QP_DBSA_HW_SQ_TAIL` \[14:0\] (device-written).
    pub const QP_HW_SQ_TAIL: Field = Field::bits(14, 0);
    /// CQ shadow +0 `IRDMA_CQ_DBSA_CQEIDX` \[19:0\]: software CQ head.
    pub const CQ_CQEIDX: Field = Field::bits(19, 0);
    /// Byte offset of the CQ arm word in the CQ shadow area.
    pub const CQ_ARM_OFFSET: usize = 32;
    /// CQ shadow +32 `IRDMA_CQ_DBSA_SW_CQ_SELECT` \[13:0\].
    pub const CQ_SW_CQ_SELECT: Field = Field::bits(13, 0);
    /// CQ shadow +32 `IRDMA_CQ_DBSA_ARM_NEXT` \[14\].
    pub const CQ_ARM_NEXT: Field = Field::bit(14);
    /// CQ shadow +32 `IRDMA_CQ_DBSA_ARM_NEXT_SE` \[15\].
    pub const CQ_ARM_NEXT_SE: Field = Field::bit(15);
    /// CQ shadow +32 `IRDMA_CQ_DBSA_ARM_SEQ_NUM` \[17:16\].
    pub const CQ_ARM_SEQ_NUM: Field = Field::bits(17, 16);
    const _: () = assert_disjoint(&[CQ_SW_CQ_SELECT, CQ_ARM_NEXT, CQ_ARM_NEXT_SE, CQ_ARM_SEQ_NUM]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendor_header_example_decodes() {
        // Header of a WRITE-with-imm over 13 SGEs (14 fragments + pad) from the
        // published vectors: rkey 0x00beef01, ADDFRAGCNT 14, IMMDATAFLAG, SIGCOMPL, VALID.
        let h = 0xc000_8380_00be_ef01u64;
        assert_eq!(sq_hdr::REMSTAG.get(h), 0x00be_ef01);
        assert_eq!(sq_hdr::OPCODE.get(h), u64::from(op::RDMA_WRITE));
        assert_eq!(sq_hdr::ADDFRAGCNT.get(h), 14);
        assert!(sq_hdr::IMMDATAFLAG.is_set(h));
        assert!(sq_hdr::SIGCOMPL.is_set(h));
        assert!(sq_hdr::VALID.is_set(h));
        assert!(!sq_hdr::INLINEDATAFLAG.is_set(h));
    }

    #[test]
    fn cqe_fields_decode_a_flush_cqe() {
        let q3 = 0xc080_0000_0001_0001u64;
        assert!(cqe::VALID.is_set(q3));
        assert!(cqe::SQ.is_set(q3));
        assert!(cqe::ERROR.is_set(q3));
        assert_eq!(cqe::MAJERR.get(q3), 1);
        assert_eq!(cqe::MINERR.get(q3), 1);
        assert_eq!(cqe::WQEIDX.get(q3), 0);
        assert_eq!(cqe::QPID.get(0x0000_002a_0000_0000), 0x2a);
    }
}
