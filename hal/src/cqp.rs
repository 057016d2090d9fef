//! Control-QP layouts of the GEN_2 (E810) RDMA engine: CQP SQ WQE words, the
//! CQP host context, the RoCE QP host context, CCQ CQEs, the FPM query and
//! commit buffers and AEQEs, as [`Field`] tables.
//!
//! Source: spec control-path §2.3–§2.6, §3.3–§3.8, §4, §7.2, §8.2 and §12
//! (which take them from the Intel driver's `defs.h`, `icrdma_hw.h` and the
//! builders in `ctrl.c`). Word names are byte offsets ("@24" = the u64 at
//! byte 24). Every table ends with a `const` disjointness check, so a typo
//! that makes two fields share a bit fails the build.

use crate::field::{Field, assert_disjoint};

/// Size of one CQP SQ WQE in bytes (type.h: struct irdma_cqp_sq_wqe).
pub const CQP_WQE_BYTES: usize = 64;
/// Byte offset of the header word of every CQP WQE (spec §2.5).
pub const CQP_HEADER_WORD: usize = 3;
/// Smallest CQP SQ (ctrl.c: irdma_sc_cqp_init).
pub const CQP_SQ_MIN: u32 = 4;
/// Largest CQP SQ (defs.h: IRDMA_CQP_SW_SQSIZE_2048).
pub const CQP_SQ_MAX: u32 = 2048;
/// Size of a CCQ CQE in bytes (user.h: IRDMA_CQE_SIZE).
pub const CCQ_CQE_BYTES: usize = 32;
/// Bytes of UPDATE_PE_SDS overflow buffer per CQP SQ slot
/// (defs.h: IRDMA_UPDATE_SD_BUFF_SIZE).
pub const SDBUF_BYTES_PER_SLOT: usize = 128;
/// FPM query / commit buffer size (user.h: IRDMA_QUERY_FPM_BUF_SIZE,
/// IRDMA_COMMIT_FPM_BUF_SIZE).
pub const FPM_BUF_BYTES: usize = 192;
/// QP host context size (user.h: IRDMA_QP_CTX_SIZE).
pub const QP_CTX_BYTES: usize = 256;
/// AEQE size (user.h: IRDMA_AEQE_SIZE).
pub const AEQE_BYTES: usize = 16;

/// CQP opcodes (hardware values, defs.h: IRDMA_CQP_OP_*; spec §4.1).
pub mod op {
    #![allow(missing_docs)]
    pub const CREATE_QP: u8 = 0x00;
    pub const MODIFY_QP: u8 = 0x01;
    pub const DESTROY_QP: u8 = 0x02;
    pub const CREATE_CQ: u8 = 0x03;
    pub const MODIFY_CQ: u8 = 0x04;
    pub const DESTROY_CQ: u8 = 0x05;
    pub const ALLOC_STAG: u8 = 0x09;
    pub const REG_MR: u8 = 0x0A;
    pub const DEALLOC_STAG: u8 = 0x0D;
    pub const MANAGE_ARP: u8 = 0x0F;
    pub const QUERY_RDMA_FEATURES: u8 = 0x12;
    pub const UPLOAD_CONTEXT: u8 = 0x13;
    pub const CREATE_CEQ: u8 = 0x16;
    pub const DESTROY_CEQ: u8 = 0x18;
    pub const CREATE_AEQ: u8 = 0x19;
    pub const DESTROY_AEQ: u8 = 0x1B;
    pub const CREATE_ADDR_HANDLE: u8 = 0x1C;
    pub const MODIFY_ADDR_HANDLE: u8 = 0x1D;
    pub const DESTROY_ADDR_HANDLE: u8 = 0x1E;
    pub const UPDATE_PE_SDS: u8 = 0x1F;
    pub const QUERY_FPM_VAL: u8 = 0x20;
    pub const COMMIT_FPM_VAL: u8 = 0x21;
    pub const FLUSH_WQES: u8 = 0x22;
    pub const NOP: u8 = 0x24;
    pub const CREATE_MCAST_GRP: u8 = 0x26;
    pub const MODIFY_MCAST_GRP: u8 = 0x27;
    pub const DESTROY_MCAST_GRP: u8 = 0x28;
    pub const SUSPEND_QP: u8 = 0x29;
    pub const RESUME_QP: u8 = 0x2A;
    pub const SHMC_PAGES_ALLOCATED: u8 = 0x2B;
    pub const WORK_SCHED_NODE: u8 = 0x2C;
}

/// Header word @24, common to every CQP WQE (defs.h: IRDMA_CQPSQ_OPCODE,
/// IRDMA_CQPSQ_WQEVALID; spec §2.5).
pub mod hdr {
    use super::Field;
    /// Opcode.
    pub const OPCODE: Field = Field::bits(37, 32);
    /// Valid bit = CQP SQ polarity.
    pub const WQEVALID: Field = Field::bit(63);
}

/// CREATE/MODIFY/DESTROY_QP, FLUSH_WQES, GEN_AE, UPLOAD_CONTEXT
/// (defs.h: IRDMA_CQPSQ_QP_*, IRDMA_CQPSQ_FWQE_*, IRDMA_CQPSQ_UCTX_*;
/// spec §4.3.4–§4.3.6, §4.3.25, §4.3.26).
pub mod qp {
    use super::Field;
    /// @24 QP id (the vendor ORs it raw; we range-check instead, §12 item 3).
    pub const QPID: Field = Field::bits(23, 0);
    /// @24 ORD valid.
    pub const ORDVALID: Field = Field::bit(42);
    /// @24 TCP (TOE) context valid.
    pub const TOECTXVALID: Field = Field::bit(43);
    /// @24 cached variables valid (MODIFY).
    pub const CACHEDVARVALID: Field = Field::bit(44);
    /// @24 SQ/RQ described by PBLEs.
    pub const VQ: Field = Field::bit(45);
    /// @24 force loopback.
    pub const FORCELOOPBACK: Field = Field::bit(46);
    /// @24 CQ numbers valid.
    pub const CQNUMVALID: Field = Field::bit(47);
    /// @24 QP type (3 = RoCE RC, 4 = RoCE UD).
    pub const QPTYPE: Field = Field::bits(50, 48);
    /// @24 MAC valid.
    pub const MACVALID: Field = Field::bit(51);
    /// @24 MSS change (MODIFY).
    pub const MSSCHANGE: Field = Field::bit(52);
    /// @24 ignore MW bound (DESTROY).
    pub const IGNOREMWBOUND: Field = Field::bit(54);
    /// @24 remove hash entry.
    pub const REMOVEHASHENTRY: Field = Field::bit(55);
    /// @24 terminate actions (MODIFY to TERMINATE).
    pub const TERMACT: Field = Field::bits(57, 56);
    /// @24 reset connection.
    pub const RESETCON: Field = Field::bit(58);
    /// @24 ARP table index valid.
    pub const ARPTABIDXVALID: Field = Field::bit(59);
    /// @24 next state.
    pub const NEXTIWSTATE: Field = Field::bits(62, 60);
    /// @8 new MSS (MODIFY).
    pub const NEWMSS: Field = Field::bits(45, 32);
    /// @8 terminate length (MODIFY).
    pub const TERMLEN: Field = Field::bits(51, 48);

    const _: () = super::assert_disjoint(&[
        QPID,
        super::hdr::OPCODE,
        ORDVALID,
        TOECTXVALID,
        CACHEDVARVALID,
        VQ,
        FORCELOOPBACK,
        CQNUMVALID,
        QPTYPE,
        MACVALID,
        MSSCHANGE,
        IGNOREMWBOUND,
        REMOVEHASHENTRY,
        TERMACT,
        RESETCON,
        ARPTABIDXVALID,
        NEXTIWSTATE,
        super::hdr::WQEVALID,
    ]);
    const _: () = super::assert_disjoint(&[NEWMSS, TERMLEN]);

    /// FLUSH_WQES / GEN_AE header flags and words (defs.h: IRDMA_CQPSQ_FWQE_*).
    pub mod flush {
        use super::Field;
        /// @24 generate an AE.
        pub const GENERATE_AE: Field = Field::bit(59);
        /// @24 use the flush codes of @16.
        pub const USERFLCODE: Field = Field::bit(60);
        /// @24 flush the SQ.
        pub const FLUSHSQ: Field = Field::bit(61);
        /// @24 flush the RQ.
        pub const FLUSHRQ: Field = Field::bit(62);
        /// @8 AE code.
        pub const AECODE: Field = Field::bits(15, 0);
        /// @8 AE source.
        pub const AESOURCE: Field = Field::bits(19, 16);
        /// @16 RQ minor flush code.
        pub const RQMNERR: Field = Field::bits(15, 0);
        /// @16 RQ major flush code.
        pub const RQMJERR: Field = Field::bits(31, 16);
        /// @16 SQ minor flush code.
        pub const SQMNERR: Field = Field::bits(47, 32);
        /// @16 SQ major flush code.
        pub const SQMJERR: Field = Field::bits(63, 48);
        const _: () = super::super::assert_disjoint(&[
            super::QPID,
            super::super::hdr::OPCODE,
            GENERATE_AE,
            USERFLCODE,
            FLUSHSQ,
            FLUSHRQ,
            super::super::hdr::WQEVALID,
        ]);
        const _: () = super::super::assert_disjoint(&[AECODE, AESOURCE]);
        const _: () = super::super::assert_disjoint(&[RQMNERR, RQMJERR, SQMNERR, SQMJERR]);
    }

    /// @16 of RESUME_QP: queue-set handle (defs.h:
    /// IRDMA_CQPSQ_RESUMEQP_QSHANDLE; spec §12 item 8).
    pub const RESUME_QSHANDLE: Field = Field::bits(15, 0);

    /// UPLOAD_CONTEXT header (defs.h: IRDMA_CQPSQ_UCTX_*; spec §4.3.26).
    pub mod upload {
        use super::Field;
        /// @24 QP type (4 bits here).
        pub const QPTYPE: Field = Field::bits(51, 48);
        /// @24 raw format.
        pub const RAWFORMAT: Field = Field::bit(61);
        /// @24 freeze the QP.
        pub const FREEZEQP: Field = Field::bit(62);
        const _: () = super::super::assert_disjoint(&[
            super::QPID,
            super::super::hdr::OPCODE,
            QPTYPE,
            RAWFORMAT,
            FREEZEQP,
            super::super::hdr::WQEVALID,
        ]);
    }
}

/// CREATE/MODIFY/DESTROY_CQ (defs.h: IRDMA_CQPSQ_CQ_*; icrdma_hw.h GEN_2
/// masks; spec §4.3.1–§4.3.3).
pub mod cq {
    use super::Field;
    /// @0 CQ size (number of CQEs).
    pub const CQSIZE: Field = Field::bits(20, 0);
    /// @8 CQ context (returned in CEQEs / AEQEs).
    pub const CQCTX: Field = Field::bits(62, 0);
    /// @16 shadow read threshold.
    pub const SHADOW_READ_THRESHOLD: Field = Field::bits(17, 0);
    /// @24 CQ id (GEN_2 width, icrdma_hw.h: ICRDMA_CQPSQ_CQ_CQID).
    pub const CQID: Field = Field::bits(18, 0);
    /// @24 CEQ id (GEN_2, icrdma_hw.h: ICRDMA_CQPSQ_CQ_CEQID).
    pub const CEQID: Field = Field::bits(31, 22);
    /// @24 resize (MODIFY).
    pub const CQRESIZE: Field = Field::bit(43);
    /// @24 PBL level.
    pub const LPBLSIZE: Field = Field::bits(45, 44);
    /// @24 check overflow.
    pub const CHKOVERFLOW: Field = Field::bit(46);
    /// @24 ring described by PBLEs.
    pub const VIRTMAP: Field = Field::bit(47);
    /// @24 CEQE mask.
    pub const ENCEQEMASK: Field = Field::bit(48);
    /// @24 CEQ id valid.
    pub const CEQIDVALID: Field = Field::bit(49);
    /// @24 TPH enable.
    pub const TPHEN: Field = Field::bit(60);
    /// @24 64-byte CQEs (not on GEN_2).
    pub const AVOIDMEMCNFLCT: Field = Field::bit(61);
    /// @24 PASID valid.
    pub const PASID_VALID: Field = Field::bit(62);
    /// @48 first PBLE index.
    pub const FIRSTPMPBLIDX: Field = Field::bits(27, 0);
    /// @56 TPH value.
    pub const TPHVAL: Field = Field::bits(7, 0);
    /// @56 VSI index.
    pub const VSIIDX: Field = Field::bits(23, 8);
    /// @56 PASID.
    pub const PASID: Field = Field::bits(51, 32);

    const _: () = super::assert_disjoint(&[
        CQID,
        CEQID,
        super::hdr::OPCODE,
        CQRESIZE,
        LPBLSIZE,
        CHKOVERFLOW,
        VIRTMAP,
        ENCEQEMASK,
        CEQIDVALID,
        TPHEN,
        AVOIDMEMCNFLCT,
        PASID_VALID,
        super::hdr::WQEVALID,
    ]);
    const _: () = super::assert_disjoint(&[TPHVAL, VSIIDX, PASID]);
}

/// ALLOC_STAG / REG_MR / DEALLOC_STAG (defs.h: IRDMA_CQPSQ_STAG_*; spec
/// §4.3.7, §4.3.9, §4.3.10, §5).
pub mod stag {
    use super::Field;
    /// @8 length.
    pub const STAGLEN: Field = Field::bits(45, 0);
    /// @8 PD id (GEN_2, icrdma_hw.h: ICRDMA_CQPSQ_STAG_PDID).
    pub const PDID: Field = Field::bits(63, 46);
    /// @16 key byte.
    pub const KEY: Field = Field::bits(7, 0);
    /// @16 STag index (STag >> 8).
    pub const IDX: Field = Field::bits(31, 8);
    /// @16 PD id bits above 18 (always 0 on GEN_2, §12 item 5).
    pub const PDID_HI: Field = Field::bits(61, 56);
    /// @40 HMC function index.
    pub const HMCFNIDX: Field = Field::bits(15, 0);
    /// @40 non-cached (REG_MR).
    pub const NON_CACHED: Field = Field::bit(55);
    /// @48 first PBLE index.
    pub const FIRSTPMPBLIDX: Field = Field::bits(27, 0);
    /// @24 skip flush markers (DEALLOC).
    pub const SKIPFLUSH: Field = Field::bit(40);
    /// @24 MR (1) vs window (0).
    pub const MR: Field = Field::bit(43);
    /// @24 PBL level.
    pub const LPBLSIZE: Field = Field::bits(45, 44);
    /// @24 page size: 0 = 4 KiB, 1 = 2 MiB, 2 = 1 GiB.
    pub const HPAGESIZE: Field = Field::bits(47, 46);
    /// @24 access rights (§5.3).
    pub const ARIGHTS: Field = Field::bits(52, 48);
    /// @24 remote access enabled.
    pub const REMACCENABLED: Field = Field::bit(53);
    /// @24 placement type.
    pub const PLACEMENTTYPE: Field = Field::bits(57, 54);
    /// @24 VA-based (REG_MR).
    pub const VABASEDTO: Field = Field::bit(59);
    /// @24 use the HMC function index of @40.
    pub const USEHMCFNIDX: Field = Field::bit(60);
    /// @24 remote atomics (REG_MR).
    pub const REMOTE_ATOMIC_EN: Field = Field::bit(61);

    const _: () = super::assert_disjoint(&[STAGLEN, PDID]);
    const _: () = super::assert_disjoint(&[KEY, IDX, PDID_HI]);
    const _: () = super::assert_disjoint(&[HMCFNIDX, NON_CACHED]);
    const _: () = super::assert_disjoint(&[
        super::hdr::OPCODE,
        SKIPFLUSH,
        MR,
        LPBLSIZE,
        HPAGESIZE,
        ARIGHTS,
        REMACCENABLED,
        PLACEMENTTYPE,
        VABASEDTO,
        USEHMCFNIDX,
        REMOTE_ATOMIC_EN,
        super::hdr::WQEVALID,
    ]);
}

/// QUERY_FPM_VAL / COMMIT_FPM_VAL / SHMC_PAGES_ALLOCATED / UPDATE_PE_SDS /
/// QUERY_RDMA_FEATURES (spec §3.7, §3.8, §4.3.11, §4.3.12, §4.3.23).
pub mod hmc {
    use super::Field;
    /// @16 HMC function id (QUERY/COMMIT_FPM_VAL, SHMC_PAGES_ALLOCATED).
    pub const HMCFNID: Field = Field::bits(15, 0);
    /// @24 commit buffer size (COMMIT_FPM_VAL).
    pub const CFPM_BUFSIZE: Field = Field::bits(31, 0);
    /// @24 hardware flush-timer disable (COMMIT_FPM_VAL).
    pub const CFPM_FLUSH_TIMER_DISABLE: Field = Field::bit(43);
    /// @24 response buffer length (QUERY_RDMA_FEATURES).
    pub const QRF_BUF_LEN: Field = Field::bits(31, 0);
    /// @16 HMC function id of UPDATE_PE_SDS (GEN_2 width,
    /// icrdma_hw.h: ICRDMA_CQPSQ_UPESD_HMCFNID).
    pub const UPESD_HMCFNID: Field = Field::bits(5, 0);
    /// @16 overflow-buffer address (UPDATE_PE_SDS; low bits carry the fn id).
    pub const UPESD_SDBUF_PA: Field = Field::bits(63, 6);
    /// @24 number of entries in the overflow buffer (UPDATE_PE_SDS).
    pub const UPESD_ENTRY_COUNT: Field = Field::bits(3, 0);
    /// @32/@48 entry command (UPDATE_PE_SDS).
    pub const UPESD_SDCMD: Field = Field::bits(31, 0);
    /// @32/@48 entry valid (UPDATE_PE_SDS).
    pub const UPESD_ENTRY_VALID: Field = Field::bit(63);

    const _: () = super::assert_disjoint(&[
        CFPM_BUFSIZE,
        super::hdr::OPCODE,
        CFPM_FLUSH_TIMER_DISABLE,
        super::hdr::WQEVALID,
    ]);
    const _: () = super::assert_disjoint(&[UPESD_HMCFNID, UPESD_SDBUF_PA]);
    const _: () =
        super::assert_disjoint(&[UPESD_ENTRY_COUNT, super::hdr::OPCODE, super::hdr::WQEVALID]);
    const _: () = super::assert_disjoint(&[UPESD_SDCMD, UPESD_ENTRY_VALID]);
}

/// CREATE/DESTROY_CEQ and CREATE/DESTROY_AEQ (defs.h: IRDMA_CQPSQ_CEQ_*,
/// IRDMA_CQPSQ_AEQ_*; spec §4.3.14–§4.3.17).
pub mod eq {
    use super::Field;
    /// @16 CEQ size (CEQEs).
    pub const CEQSIZE: Field = Field::bits(21, 0);
    /// @16 AEQ entry count.
    pub const AEQECNT: Field = Field::bits(18, 0);
    /// @24 CEQ id.
    pub const CEQID: Field = Field::bits(9, 0);
    /// @24 PBL level.
    pub const LPBLSIZE: Field = Field::bits(45, 44);
    /// @24 ITR no-expire (CEQ).
    pub const ITRNOEXPIRE: Field = Field::bit(46);
    /// @24 virtually mapped.
    pub const VMAP: Field = Field::bit(47);
    /// @24 TPH enable (CEQ).
    pub const TPHEN: Field = Field::bit(60);
    /// @24 PASID valid.
    pub const PASID_VALID: Field = Field::bit(62);
    /// @48 first PBLE index (the vendor stores a full u32 here for most
    /// ops, §12 item 1; we keep indexes below 2^28 so both agree).
    pub const FIRSTPMPBLIDX: Field = Field::bits(27, 0);
    /// @56 TPH value (CEQ).
    pub const TPHVAL: Field = Field::bits(7, 0);
    /// @56 VSI index (CEQ).
    pub const VSIIDX: Field = Field::bits(23, 8);
    /// @56 PASID.
    pub const PASID: Field = Field::bits(51, 32);

    const _: () = super::assert_disjoint(&[
        CEQID,
        super::hdr::OPCODE,
        LPBLSIZE,
        ITRNOEXPIRE,
        VMAP,
        TPHEN,
        PASID_VALID,
        super::hdr::WQEVALID,
    ]);
    const _: () = super::assert_disjoint(&[TPHVAL, VSIIDX, PASID]);
}

/// MANAGE_ARP (defs.h: IRDMA_CQPSQ_MAT_*; spec §4.3.18).
pub mod arp {
    use super::Field;
    /// @8 reach max.
    pub const REACHMAX: Field = Field::bits(31, 0);
    /// @16 MAC, byte 0 in bits \[47:40\].
    pub const MACADDR: Field = Field::bits(47, 0);
    /// @24 ARP entry index.
    pub const ARPENTRYIDX: Field = Field::bits(11, 0);
    /// @24 entry valid (1 = add).
    pub const ENTRYVALID: Field = Field::bit(42);
    /// @24 permanent.
    pub const PERMANENT: Field = Field::bit(43);
    const _: () = super::assert_disjoint(&[
        ARPENTRYIDX,
        super::hdr::OPCODE,
        ENTRYVALID,
        PERMANENT,
        super::hdr::WQEVALID,
    ]);
}

/// CREATE/MODIFY/DESTROY_ADDR_HANDLE (uda_d.h: IRDMA_UDA_CQPSQ_MAV_*, built
/// by uda.c: irdma_sc_access_ah; layout in conformance/README.md, "UD
/// control-path vectors"). IP addresses: IPv6 destination @40 = word0<<32 |
/// word1, @32 = word2<<32 | word3; source @56/@48 likewise; IPv4 in the low
/// 32 bits of @32 (destination) and @48 (source).
pub mod ah {
    use super::Field;
    /// @0 local MAC, byte 0 in bits \[63:56\].
    pub const MACADDR: Field = Field::bits(63, 16);
    /// @8 PD index bits \[15:0\].
    pub const PDINDEXLO: Field = Field::bits(63, 48);
    /// @8 traffic class (DSCP << 2 | ECN).
    pub const TC: Field = Field::bits(39, 32);
    /// @8 VLAN tag (id | priority << 13).
    pub const VLANTAG: Field = Field::bits(15, 0);
    /// @16 ARP table index of the next hop.
    pub const ARPINDEX: Field = Field::bits(63, 48);
    /// @16 hop limit / TTL.
    pub const HOPLIMIT: Field = Field::bits(39, 32);
    /// @16 PD index bits \[23:16\].
    pub const PDINDEXHI: Field = Field::bits(27, 20);
    /// @16 flow label.
    pub const FLOWLABEL: Field = Field::bits(19, 0);
    /// @24 address-handle index.
    pub const AVIDX: Field = Field::bits(23, 0);
    /// @24 IPv4 addresses.
    pub const IPV4VALID: Field = Field::bit(59);
    /// @24 insert the VLAN tag.
    pub const INSERTVLANTAG: Field = Field::bit(60);
    /// @24 loopback (source address == destination address).
    pub const DOLOOPBACK: Field = Field::bit(62);
    const _: () = super::assert_disjoint(&[PDINDEXLO, TC, VLANTAG]);
    const _: () = super::assert_disjoint(&[ARPINDEX, HOPLIMIT, PDINDEXHI, FLOWLABEL]);
    const _: () = super::assert_disjoint(&[
        AVIDX,
        super::hdr::OPCODE,
        IPV4VALID,
        INSERTVLANTAG,
        DOLOOPBACK,
        super::hdr::WQEVALID,
    ]);
}

/// CREATE/MODIFY/DESTROY_MCAST_GRP (uda_d.h: IRDMA_UDA_CQPSQ_MG_*, built by
/// uda.c: irdma_access_mcast_grp; layout in conformance/README.md). @0 the
/// group MAC \[47:0\]; @32 the 64-byte group context's bus address; IPv6
/// group address @56 = word0<<32 | word1, @48 = word2<<32 | word3; IPv4 in
/// the low 32 bits of @48.
pub mod mcast {
    use super::Field;
    /// @0 destination (group) MAC, byte 0 in bits \[47:40\].
    pub const DMAC: Field = Field::bits(47, 0);
    /// @8 HMC function id.
    pub const HMCFNID: Field = Field::bits(5, 0);
    /// @16 VLAN id.
    pub const VLANID: Field = Field::bits(43, 32);
    /// @16 queue-set handle.
    pub const QS_HANDLE: Field = Field::bits(9, 0);
    /// @24 multicast group index.
    pub const MGIDX: Field = Field::bits(12, 0);
    /// @24 VLAN id valid.
    pub const VLANVALID: Field = Field::bit(59);
    /// @24 IPv4 group address.
    pub const IPV4VALID: Field = Field::bit(60);
    /// Context entry: member QP id.
    pub const CTX_QPID: Field = Field::bits(17, 0);
    /// Context entry: valid.
    pub const CTX_VALID: Field = Field::bit(31);
    /// Context entry: destination port.
    pub const CTX_DESTPORT: Field = Field::bits(47, 32);
    /// Member slots in the 64-byte context (eight u64 entries;
    /// conformance/README.md, "UD control-path vectors").
    pub const CTX_ENTRIES: usize = 8;
    /// Group indices the vendor accepts (uda.c: irdma_access_mcast_grp
    /// refuses `mg_id` >= IRDMA_UDA_MAX_FSI_MGS = 4096).
    pub const MAX_GROUPS: u32 = 4096;
    const _: () = super::assert_disjoint(&[VLANID, QS_HANDLE]);
    const _: () = super::assert_disjoint(&[CTX_QPID, CTX_VALID, CTX_DESTPORT]);
    const _: () = super::assert_disjoint(&[
        MGIDX,
        super::hdr::OPCODE,
        VLANVALID,
        IPV4VALID,
        super::hdr::WQEVALID,
    ]);
}

/// WORK_SCHED_NODE (defs.h: IRDMA_CQPSQ_WS_*; spec §4.3.20).
pub mod ws {
    use super::Field;
    /// @32 weight.
    pub const WEIGHT: Field = Field::bits(38, 32);
    /// @32 VSI.
    pub const VSI: Field = Field::bits(63, 48);
    /// @24 node id.
    pub const NODEID: Field = Field::bits(13, 0);
    /// @24 parent id.
    pub const PARENTID: Field = Field::bits(29, 16);
    /// @24 node op (0 add, 1 modify, 2 delete).
    pub const NODEOP: Field = Field::bits(55, 52);
    /// @24 traffic class.
    pub const TC: Field = Field::bits(58, 56);
    /// @24 priority type.
    pub const PRIOTYPE: Field = Field::bits(60, 59);
    /// @24 leaf node.
    pub const NODETYPE: Field = Field::bit(61);
    /// @24 enable.
    pub const ENABLENODE: Field = Field::bit(62);
    const _: () = super::assert_disjoint(&[WEIGHT, VSI]);
    const _: () = super::assert_disjoint(&[
        NODEID,
        PARENTID,
        super::hdr::OPCODE,
        NODEOP,
        TC,
        PRIOTYPE,
        NODETYPE,
        ENABLENODE,
        super::hdr::WQEVALID,
    ]);
}

/// CQP host context (64 bytes; defs.h: IRDMA_CQPHC_*; spec §2.3).
pub mod cqp_ctx {
    use super::Field;
    /// @0 disable PFPDUs.
    pub const DISABLE_PFPDUS: Field = Field::bit(1);
    /// @0 RoCEv2 RTO policy.
    pub const ROCEV2_RTO_POLICY: Field = Field::bit(2);
    /// @0 protocol used (0 any, 1 iWARP, 2 RoCE).
    pub const PROTOCOL_USED: Field = Field::bits(4, 3);
    /// @0 encoded SQ size (log2(size) − 1).
    pub const SQSIZE: Field = Field::bits(11, 8);
    /// @0 structure version.
    pub const SVER: Field = Field::bits(31, 24);
    /// @0 CEQs per VF.
    pub const CEQPERVF: Field = Field::bits(39, 32);
    /// @16 HMC profile.
    pub const HMC_PROFILE: Field = Field::bits(2, 0);
    /// @16 remote endpoint tracking.
    pub const EN_REM_ENDPOINT_TRK: Field = Field::bit(3);
    /// @16 timer slots.
    pub const TMR_SLOT: Field = Field::bits(19, 16);
    /// @16 enabled VFs.
    pub const ENABLED_VFS: Field = Field::bits(37, 32);
    /// @32 hardware minor version.
    pub const HW_MINVER: Field = Field::bits(15, 0);
    /// @32 hardware major version (1 for GEN_2).
    pub const HW_MAJVER: Field = Field::bits(31, 16);
    /// @32 DCQCN minimum rate.
    pub const MIN_RATE: Field = Field::bits(51, 48);
    /// @32 DCQCN minimum decrease factor.
    pub const MIN_DEC_FACTOR: Field = Field::bits(59, 56);
    /// @48 DCQCN T.
    pub const DCQCN_T: Field = Field::bits(15, 0);
    /// @48 HAI factor.
    pub const HAI_FACTOR: Field = Field::bits(47, 32);
    /// @48 RAI factor.
    pub const RAI_FACTOR: Field = Field::bits(63, 48);
    /// @56 DCQCN B.
    pub const DCQCN_B: Field = Field::bits(24, 0);
    /// @56 DCQCN F.
    pub const DCQCN_F: Field = Field::bits(27, 25);
    /// @56 congestion-control configuration valid.
    pub const CC_CFG_VALID: Field = Field::bit(31);
    /// @56 R-reduce M period.
    pub const RREDUCE_MPERIOD: Field = Field::bits(63, 32);
    const _: () = super::assert_disjoint(&[
        DISABLE_PFPDUS,
        ROCEV2_RTO_POLICY,
        PROTOCOL_USED,
        SQSIZE,
        SVER,
        CEQPERVF,
    ]);
    const _: () =
        super::assert_disjoint(&[HMC_PROFILE, EN_REM_ENDPOINT_TRK, TMR_SLOT, ENABLED_VFS]);
    const _: () = super::assert_disjoint(&[HW_MINVER, HW_MAJVER, MIN_RATE, MIN_DEC_FACTOR]);
    const _: () = super::assert_disjoint(&[DCQCN_T, HAI_FACTOR, RAI_FACTOR]);
    const _: () = super::assert_disjoint(&[DCQCN_B, DCQCN_F, CC_CFG_VALID, RREDUCE_MPERIOD]);
}

/// RoCE QP host context, GEN_2 (256 bytes; defs.h: IRDMAQPC_*; spec §7.2).
/// Each constant is `(byte offset of its word, field)`.
pub mod qpc {
    use super::Field;
    /// A context field: word byte offset and bit range.
    pub type CtxField = (usize, Field);
    /// IPv4.
    pub const IPV4: CtxField = (0, Field::bit(3));
    /// Insert VLAN tag.
    pub const INSERTVLANTAG: CtxField = (0, Field::bit(5));
    /// GSI QP.
    pub const ISQP1: CtxField = (0, Field::bit(6));
    /// RQ WQE size shift.
    pub const RQWQESIZE: CtxField = (0, Field::bits(9, 8));
    /// RQ error index valid.
    pub const ERR_RQ_IDX_VALID: CtxField = (0, Field::bit(19));
    /// PD id bits \[17:16\].
    pub const PDIDXHI: CtxField = (0, Field::bits(21, 20));
    /// DCTCP enable.
    pub const DC_TCP_EN: CtxField = (0, Field::bit(25));
    /// Receive TPH enable.
    pub const RCVTPHEN: CtxField = (0, Field::bit(28));
    /// Transmit TPH enable.
    pub const XMITTPHEN: CtxField = (0, Field::bit(29));
    /// RQ TPH enable.
    pub const RQTPHEN: CtxField = (0, Field::bit(30));
    /// SQ TPH enable.
    pub const SQTPHEN: CtxField = (0, Field::bit(31));
    /// Push page index.
    pub const PPIDX: CtxField = (0, Field::bits(41, 32));
    /// Push mode enable.
    pub const PMENA: CtxField = (0, Field::bit(47));
    /// RoCE transport version.
    pub const ROCE_TVER: CtxField = (0, Field::bits(63, 60));
    /// SQ address.
    pub const SQADDR: CtxField = (8, Field::bits(63, 0));
    /// RQ address.
    pub const RQADDR: CtxField = (16, Field::bits(63, 0));
    /// Hop limit.
    pub const TTL: CtxField = (24, Field::bits(7, 0));
    /// Encoded RQ size.
    pub const RQSIZE: CtxField = (24, Field::bits(11, 8));
    /// Encoded SQ size.
    pub const SQSIZE: CtxField = (24, Field::bits(15, 12));
    /// Traffic class.
    pub const TOS: CtxField = (24, Field::bits(31, 24));
    /// UDP source port.
    pub const SRCPORTNUM: CtxField = (24, Field::bits(47, 32));
    /// UDP destination port.
    pub const DESTPORTNUM: CtxField = (24, Field::bits(63, 48));
    /// Destination IP word 3 / IPv4.
    pub const DESTIPADDR3: CtxField = (32, Field::bits(31, 0));
    /// Destination IP word 2.
    pub const DESTIPADDR2: CtxField = (32, Field::bits(63, 32));
    /// Destination IP word 1.
    pub const DESTIPADDR1: CtxField = (40, Field::bits(31, 0));
    /// Destination IP word 0.
    pub const DESTIPADDR0: CtxField = (40, Field::bits(63, 32));
    /// Path MTU.
    pub const SNDMSS: CtxField = (48, Field::bits(29, 16));
    /// VLAN tag.
    pub const VLANTAG: CtxField = (48, Field::bits(47, 32));
    /// ARP index of the next hop.
    pub const ARPIDX: CtxField = (48, Field::bits(63, 48));
    /// Flow label.
    pub const FLOWLABEL: CtxField = (56, Field::bits(19, 0));
    /// ACK credits.
    pub const ACKCREDITS: CtxField = (56, Field::bits(24, 20));
    /// P_Key.
    pub const PKEY: CtxField = (56, Field::bits(47, 32));
    /// PD id bits \[15:0\].
    pub const PDIDX: CtxField = (56, Field::bits(63, 48));
    /// Destination QP.
    pub const DESTQP: CtxField = (64, Field::bits(23, 0));
    /// Q_Key.
    pub const QKEY: CtxField = (64, Field::bits(63, 32));
    /// Next send PSN.
    pub const PSNNXT: CtxField = (80, Field::bits(23, 0));
    /// LSN.
    pub const LSN: CtxField = (80, Field::bits(55, 32));
    /// Expected PSN.
    pub const EPSN: CtxField = (88, Field::bits(23, 0));
    /// PSN max.
    pub const PSNMAX: CtxField = (96, Field::bits(23, 0));
    /// PSN unacknowledged.
    pub const PSNUNA: CtxField = (96, Field::bits(55, 32));
    /// Congestion window.
    pub const CWNDROCE: CtxField = (112, Field::bits(55, 32));
    /// RQ error index.
    pub const ERR_RQ_IDX: CtxField = (128, Field::bits(46, 32));
    /// Retry count.
    pub const REXMIT_THRESH: CtxField = (128, Field::bits(53, 48));
    /// RNR retry.
    pub const RNRNAK_THRESH: CtxField = (128, Field::bits(56, 54));
    /// Minimum RTO.
    pub const RTOMIN: CtxField = (128, Field::bits(63, 57));
    /// Send CQ.
    pub const TXCQNUM: CtxField = (136, Field::bits(24, 0));
    /// Receive CQ.
    pub const RXCQNUM: CtxField = (136, Field::bits(56, 32));
    /// Statistics instance.
    pub const STAT_INDEX: CtxField = (144, Field::bits(6, 0));
    /// Source MAC.
    pub const MACADDRESS: CtxField = (152, Field::bits(63, 16));
    /// ORD size.
    pub const ORDSIZE: CtxField = (160, Field::bits(7, 0));
    /// Encoded IRD size.
    pub const IRDSIZE: CtxField = (160, Field::bits(18, 16));
    /// UD privileged CQ enable.
    pub const UDPRIVCQENABLE: CtxField = (160, Field::bit(19));
    /// Write/read-response OK.
    pub const WRRDRSPOK: CtxField = (160, Field::bit(20));
    /// Read OK.
    pub const RDOK: CtxField = (160, Field::bit(21));
    /// DCQCN enable.
    pub const DCQCNENABLE: CtxField = (160, Field::bit(22));
    /// Fast-register enable.
    pub const FASTREGEN: CtxField = (160, Field::bit(24));
    /// Privileged.
    pub const PRIVEN: CtxField = (160, Field::bit(25));
    /// Use the statistics instance.
    pub const USESTATSINSTANCE: CtxField = (160, Field::bit(26));
    /// TIMELY enable.
    pub const TIMELYENABLE: CtxField = (160, Field::bit(27));
    /// Firmware congestion control.
    pub const FW_CC_ENABLE: CtxField = (160, Field::bit(28));
    /// No ICRC on receive.
    pub const RCVNOICRC: CtxField = (160, Field::bit(31));
    /// QP completion context.
    pub const QPCOMPCTX: CtxField = (168, Field::bits(63, 0));
    /// SQ TPH value.
    pub const SQTPHVAL: CtxField = (176, Field::bits(7, 0));
    /// RQ TPH value.
    pub const RQTPHVAL: CtxField = (176, Field::bits(15, 8));
    /// Queue-set handle.
    pub const QSHANDLE: CtxField = (176, Field::bits(25, 16));
    /// Local IP word 3 / IPv4.
    pub const LOCAL_IPADDR3: CtxField = (184, Field::bits(31, 0));
    /// Local IP word 2.
    pub const LOCAL_IPADDR2: CtxField = (184, Field::bits(63, 32));
    /// Local IP word 1.
    pub const LOCAL_IPADDR1: CtxField = (192, Field::bits(31, 0));
    /// Local IP word 0.
    pub const LOCAL_IPADDR0: CtxField = (192, Field::bits(63, 32));
    /// TIMELY low threshold.
    pub const TLOW: CtxField = (200, Field::bits(39, 32));
    /// TIMELY high threshold.
    pub const THIGH: CtxField = (200, Field::bits(63, 52));
    /// Remote endpoint index.
    pub const REMENDPOINTIDX: CtxField = (208, Field::bits(16, 0));

    /// Every field, for the disjointness check below.
    pub const ALL: &[CtxField] = &[
        IPV4,
        INSERTVLANTAG,
        ISQP1,
        RQWQESIZE,
        ERR_RQ_IDX_VALID,
        PDIDXHI,
        DC_TCP_EN,
        RCVTPHEN,
        XMITTPHEN,
        RQTPHEN,
        SQTPHEN,
        PPIDX,
        PMENA,
        ROCE_TVER,
        SQADDR,
        RQADDR,
        TTL,
        RQSIZE,
        SQSIZE,
        TOS,
        SRCPORTNUM,
        DESTPORTNUM,
        DESTIPADDR3,
        DESTIPADDR2,
        DESTIPADDR1,
        DESTIPADDR0,
        SNDMSS,
        VLANTAG,
        ARPIDX,
        FLOWLABEL,
        ACKCREDITS,
        PKEY,
        PDIDX,
        DESTQP,
        QKEY,
        PSNNXT,
        LSN,
        EPSN,
        PSNMAX,
        PSNUNA,
        CWNDROCE,
        ERR_RQ_IDX,
        REXMIT_THRESH,
        RNRNAK_THRESH,
        RTOMIN,
        TXCQNUM,
        RXCQNUM,
        STAT_INDEX,
        MACADDRESS,
        ORDSIZE,
        IRDSIZE,
        UDPRIVCQENABLE,
        WRRDRSPOK,
        RDOK,
        DCQCNENABLE,
        FASTREGEN,
        PRIVEN,
        USESTATSINSTANCE,
        TIMELYENABLE,
        FW_CC_ENABLE,
        RCVNOICRC,
        QPCOMPCTX,
        SQTPHVAL,
        RQTPHVAL,
        QSHANDLE,
        LOCAL_IPADDR3,
        LOCAL_IPADDR2,
        LOCAL_IPADDR1,
        LOCAL_IPADDR0,
        TLOW,
        THIGH,
        REMENDPOINTIDX,
    ];

    const fn check(all: &[CtxField]) {
        let mut i = 0;
        while i < all.len() {
            assert!(all[i].0.is_multiple_of(8) && all[i].0 < super::QP_CTX_BYTES, "qpc word");
            let mut j = i + 1;
            while j < all.len() {
                assert!(all[i].0 != all[j].0 || !all[i].1.overlaps(all[j].1), "qpc overlap");
                j += 1;
            }
            i += 1;
        }
    }
    const _: () = check(ALL);
}

/// CCQ CQE (32 bytes; defs.h: IRDMA_CCQ_OPRETVAL, IRDMA_CQ_*; spec §2.6).
pub mod ccq {
    use super::Field;
    /// @16 op return value.
    pub const OPRETVAL: Field = Field::bits(31, 0);
    /// @24 minor error code.
    pub const MINERR: Field = Field::bits(15, 0);
    /// @24 major error code.
    pub const MAJERR: Field = Field::bits(31, 16);
    /// @24 index of the completed CQP SQ WQE.
    pub const WQEIDX: Field = Field::bits(46, 32);
    /// @24 error.
    pub const ERROR: Field = Field::bit(55);
    /// @24 SQ completion.
    pub const SQ: Field = Field::bit(62);
    /// @24 valid (CCQ polarity).
    pub const VALID: Field = Field::bit(63);
    const _: () = super::assert_disjoint(&[MINERR, MAJERR, WQEIDX, ERROR, SQ, VALID]);
    /// CQ shadow area @0: consumer index (defs.h: IRDMA_CQ_DBSA_CQEIDX).
    pub const DBSA_CQEIDX: Field = Field::bits(19, 0);
}

/// FPM query buffer (spec §3.3; defs.h: IRDMA_QUERY_FPM_*).
pub mod fpm_query {
    use super::Field;
    /// @0 first PE SD index.
    pub const FIRST_PE_SD_INDEX: Field = Field::bits(13, 0);
    /// @0 maximum PE SDs.
    pub const MAX_PE_SDS: Field = Field::bits(44, 32);
    /// Generic object word: maximum count.
    pub const MAX_CNT: Field = Field::bits(31, 0);
    /// Generic object word: log2 of the object size (and block sizes of the
    /// free-list words).
    pub const SIZE_LOG2: Field = Field::bits(63, 32);
    /// @120 maximum CEQs.
    pub const MAX_CEQS: Field = Field::bits(9, 0);
    /// @120 hash-table multiplier.
    pub const HTMULTIPLIER: Field = Field::bits(19, 16);
    /// @120 timer bucket.
    pub const TIMERBUCKET: Field = Field::bits(47, 32);
    /// @120 encoded maximum IRD (used only with MANAGE_RSRC_VER2).
    pub const MAX_IRD: Field = Field::bits(53, 50);
    const _: () = super::assert_disjoint(&[FIRST_PE_SD_INDEX, MAX_PE_SDS]);
    const _: () = super::assert_disjoint(&[MAX_CEQS, HTMULTIPLIER, TIMERBUCKET, MAX_IRD]);
}

/// FPM commit buffer (spec §3.4; defs.h: IRDMA_COMMIT_FPM_*).
pub mod fpm_commit {
    use super::Field;
    /// QP word: committed count.
    pub const QPCNT: Field = Field::bits(20, 0);
    /// CQ word: committed count (GEN_2, icrdma_hw.h: ICRDMA_COMMIT_FPM_CQCNT).
    pub const CQCNT: Field = Field::bits(19, 0);
    /// Other words: committed count.
    pub const CNT: Field = Field::bits(31, 0);
    /// Object base in 512-byte units.
    pub const BASE: Field = Field::bits(63, 32);
}

/// AEQE, GEN_2 (16 bytes; defs.h: IRDMA_AEQE_*; spec §8.2).
pub mod aeqe {
    use super::Field;
    /// @8 QP/CQ id bits \[17:0\].
    pub const QPCQID_LOW: Field = Field::bits(17, 0);
    /// @8 WQE index.
    pub const WQDESCIDX: Field = Field::bits(32, 18);
    /// @8 AEQ overflow.
    pub const OVERFLOW: Field = Field::bit(33);
    /// @8 AE code.
    pub const AECODE: Field = Field::bits(45, 34);
    /// @8 QP/CQ id bit 18.
    pub const QPCQID_HI: Field = Field::bit(46);
    /// @8 AE source.
    pub const AESRC: Field = Field::bits(53, 50);
    /// @8 QP state.
    pub const IWSTATE: Field = Field::bits(56, 54);
    /// @8 TCP state.
    pub const TCPSTATE: Field = Field::bits(60, 57);
    /// @8 Q2 data written.
    pub const Q2DATA: Field = Field::bits(62, 61);
    /// @8 valid.
    pub const VALID: Field = Field::bit(63);
    const _: () = super::assert_disjoint(&[
        QPCQID_LOW, WQDESCIDX, OVERFLOW, AECODE, QPCQID_HI, AESRC, IWSTATE, TCPSTATE, Q2DATA, VALID,
    ]);
    /// @0 of an SRQ-sourced AEQE: SRQ context (spec §8.2).
    pub const SRQ_CTX: Field = Field::bits(63, 6);
}

/// QUERY_RDMA_FEATURES response entries (defs.h: IRDMA_FEATURE_*; spec
/// §4.3.23). Entry 0 is the firmware-info entry.
pub mod features {
    use super::Field;
    /// Entry type (0 = FW info, 32 = FTN_FLAGS).
    pub const TYPE: Field = Field::bits(63, 48);
    /// Entry 0: number of entries.
    pub const CNT: Field = Field::bits(47, 32);
    /// Other entries: payload.
    pub const INFO: Field = Field::bits(47, 0);
    /// Entry 0: firmware major version.
    pub const FW_MAJOR: Field = Field::bits(31, 16);
    /// Entry 0: firmware minor version.
    pub const FW_MINOR: Field = Field::bits(15, 0);
    /// Type of the feature-flags entry (type.h: IRDMA_FTN_FLAGS).
    pub const TYPE_FTN_FLAGS: u16 = 32;
    /// Number of entry types the driver knows (type.h: IRDMA_MAX_FEATURES).
    pub const MAX_FEATURES: usize = 34;
    /// Fewest entries a valid response has (defs.h: IRDMA_MIN_FEATURES).
    pub const MIN_FEATURES: u16 = 2;
    /// FTN_FLAGS: remote atomics allowed (defs.h: IRDMA_ATOMICS_ALLOWED_BIT).
    pub const FLAG_ATOMICS: Field = Field::bit(0);
    /// FTN_FLAGS: MANAGE_RSRC_VER2 (defs.h: IRDMA_MANAGE_RSRC_VER2).
    pub const FLAG_MANAGE_RSRC_VER2: Field = Field::bit(2);
    const _: () = super::assert_disjoint(&[TYPE, CNT, FW_MAJOR, FW_MINOR]);
    const _: () = super::assert_disjoint(&[TYPE, INFO]);
}

/// UPDATE_PE_SDS entry layout (irdma.h: IRDMA_PFHMC_SD*; spec §3.6).
pub mod sd {
    use super::Field;
    /// cmd: partition select (1 for PF and VF alike).
    pub const CMD_PMSDPARTSEL: Field = Field::bit(15);
    /// cmd: write.
    pub const CMD_PMSDWR: Field = Field::bit(31);
    /// data: valid.
    pub const DATA_PMSDVALID: Field = Field::bit(0);
    /// data: type (0 paged, 1 direct).
    pub const DATA_PMSDTYPE: Field = Field::bit(1);
    /// data: backing-page count.
    pub const DATA_PMSDBPCOUNT: Field = Field::bits(11, 2);
    /// data: physical address bits \[63:12\].
    pub const DATA_ADDR: Field = Field::bits(63, 12);
    const _: () =
        super::assert_disjoint(&[DATA_PMSDVALID, DATA_PMSDTYPE, DATA_PMSDBPCOUNT, DATA_ADDR]);
}

const _: () = assert_disjoint(&[hdr::OPCODE, hdr::WQEVALID]);
