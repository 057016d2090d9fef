//! CQP WQE decoding: the 64-byte WQE → a typed op, as the device reads it.
//! One function per layout of spec control-path §3.7, §3.8, §4.3 (ctrl.c
//! builders named there). The device executes the decoded ops; the tests
//! check this decoder against the vendor-built WQEs in cqp-vectors.json.

use crate::bits::{bit, get};
use crate::regs::op;

/// CREATE/DESTROY/MODIFY_CQ fields (spec control-path §4.3.1–4.3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[allow(missing_docs)]
pub struct CqWqe {
    pub size: u32,
    /// CQ context [62:0] (Linux: object address >> 1).
    pub ctx: u64,
    pub shadow_read_threshold: u32,
    /// CQ id [18:0] (+ CQID_HIGH [52:50] << 22 on CREATE; GEN_2 keeps it 0).
    pub id: u32,
    pub ceq_id: u32,
    pub lpbl_size: u8,
    pub check_overflow: bool,
    pub virtual_map: bool,
    pub ceqe_mask: bool,
    pub ceq_id_valid: bool,
    pub tph_en: bool,
    pub avoid_mem_cflct: bool,
    pub pasid_valid: bool,
    pub ring_pa: u64,
    pub shadow_pa: u64,
    pub first_pble: u32,
    pub tph_val: u8,
    pub vsi: u16,
    pub pasid: u32,
    /// MODIFY_CQ: CQRESIZE.
    pub resize: bool,
}

/// CREATE/DESTROY CEQ and AEQ fields (spec control-path §4.3.14–4.3.17).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[allow(missing_docs)]
pub struct EqWqe {
    /// CEQ id (0 for the AEQ).
    pub id: u32,
    /// Entries.
    pub size: u32,
    pub ring_pa: u64,
    pub first_pble: u32,
    pub lpbl_size: u8,
    pub virtual_map: bool,
    pub itr_no_expire: bool,
    pub tph_en: bool,
    pub tph_val: u8,
    pub vsi: u16,
    pub pasid_valid: bool,
    pub pasid: u32,
}

/// ALLOC_STAG / REG_MR / DEALLOC_STAG fields (spec control-path §4.3.7–4.3.10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[allow(missing_docs)]
pub struct StagWqe {
    /// VA (VA-based) or first-byte offset.
    pub va: u64,
    pub len: u64,
    /// PD id [63:46] | PDID_HI [61:56] of @16 << 18.
    pub pd: u32,
    pub key: u8,
    /// STag index (STag >> 8).
    pub index: u32,
    pub pa: u64,
    pub hmc_fn_idx: u16,
    pub non_cached: bool,
    pub first_pble: u32,
    pub mr: bool,
    pub mw_type1: bool,
    pub lpbl_size: u8,
    pub page_size: u8,
    pub rights: u8,
    pub remote_access: bool,
    pub placement: u8,
    pub va_based: bool,
    pub use_hmc_fn_idx: bool,
    pub remote_atomics: bool,
    pub skip_flush: bool,
}

/// CREATE/MODIFY/DESTROY_QP fields (spec control-path §4.3.4–4.3.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[allow(missing_docs)]
pub struct QpWqe {
    pub id: u32,
    pub ctx_pa: u64,
    pub shadow_pa: u64,
    pub new_mss: u16,
    pub term_len: u8,
    pub ord_valid: bool,
    pub tcp_ctx_valid: bool,
    pub cached_var_valid: bool,
    pub virtual_map: bool,
    pub force_loopback: bool,
    pub cq_num_valid: bool,
    pub qp_type: u8,
    pub mac_valid: bool,
    pub mss_change: bool,
    pub ignore_mw_bound: bool,
    pub remove_hash: bool,
    pub term_act: u8,
    pub reset_con: bool,
    pub arp_valid: bool,
    pub next_state: u8,
}

/// CREATE/MODIFY/DESTROY_ADDR_HANDLE fields (uda.c: irdma_sc_access_ah;
/// layout in shared/spec/rocev2-wire.md §5.2 and conformance/README.md "UD
/// control-path vectors"). IP words are as the WQE holds them: `[0]` most
/// significant, IPv4 in `[0]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[allow(missing_docs)]
pub struct AhWqe {
    /// Local MAC (@0 [63:16]).
    pub mac: u64,
    /// PD: @8 [63:48] | @16 [27:20] << 16.
    pub pd: u32,
    pub tc: u8,
    pub vlan_tag: u16,
    pub arp_idx: u16,
    pub hop_limit: u8,
    pub flow_label: u32,
    pub idx: u32,
    pub ipv4: bool,
    pub insert_vlan: bool,
    pub loopback: bool,
    pub dest_ip: [u32; 4],
    pub src_ip: [u32; 4],
}

/// FLUSH_WQES fields (spec control-path §4.3.25).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[allow(missing_docs)]
pub struct FlushWqe {
    /// QP id (header [23:0]).
    pub qp: u32,
    /// GENERATE_AE (header [59]): post `ae_code`/`ae_src` for the QP.
    pub generate_ae: bool,
    pub ae_code: u16,
    pub ae_src: u8,
    /// USERFLCODE (header [60]): flush CQEs carry the codes below.
    pub user_codes: bool,
    pub sq_major: u16,
    pub sq_minor: u16,
    pub rq_major: u16,
    pub rq_minor: u16,
    /// FLUSHSQ (header [61]), FLUSHRQ (header [62]).
    pub flush_sq: bool,
    pub flush_rq: bool,
}

/// A decoded CQP WQE.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum CqpOp {
    Nop,
    QueryFeatures {
        buf: u64,
        len: u32,
    },
    QueryFpm {
        fn_id: u16,
        buf: u64,
    },
    CommitFpm {
        fn_id: u16,
        buf: u64,
        buf_size: u32,
        flush_timer_disable: bool,
    },
    /// Entries carried in the WQE (cmd, data) and the overflow buffer.
    UpdateSds {
        fn_id: u8,
        entries: Vec<(u32, u64)>,
        overflow_pa: u64,
        overflow_cnt: u8,
    },
    Shmc {
        fn_id: u16,
    },
    CreateCq(CqWqe),
    ModifyCq(CqWqe),
    DestroyCq(CqWqe),
    CreateCeq(EqWqe),
    DestroyCeq(EqWqe),
    CreateAeq(EqWqe),
    DestroyAeq(EqWqe),
    ManageArp {
        idx: u16,
        valid: bool,
        permanent: bool,
        query: bool,
        mac: u64,
        reach_max: u32,
    },
    WsNode {
        id: u16,
        parent: u16,
        node_op: u8,
        tc: u8,
        prio_type: u8,
        leaf: bool,
        enable: bool,
        weight: u8,
        vsi: u16,
    },
    AllocStag(StagWqe),
    RegMr(StagWqe),
    DeallocStag(StagWqe),
    CreateQp(QpWqe),
    ModifyQp(QpWqe),
    DestroyQp(QpWqe),
    FlushWqes(FlushWqe),
    CreateAh(AhWqe),
    ModifyAh(AhWqe),
    DestroyAh(AhWqe),
    /// An opcode the model does not implement.
    Other(u8),
}

fn cq(w: &[u64; 8], create: bool) -> CqWqe {
    let h = w[3];
    let id =
        if create { (get(h, 18, 0) | get(h, 52, 50) << 22) as u32 } else { get(h, 18, 0) as u32 };
    CqWqe {
        size: get(w[0], 20, 0) as u32,
        ctx: get(w[1], 62, 0),
        shadow_read_threshold: get(w[2], 17, 0) as u32,
        id,
        ceq_id: (get(h, 31, 22) | if create { get(h, 59, 54) << 10 } else { 0 }) as u32,
        lpbl_size: get(h, 45, 44) as u8,
        check_overflow: bit(h, 46),
        virtual_map: bit(h, 47),
        ceqe_mask: bit(h, 48),
        ceq_id_valid: bit(h, 49),
        tph_en: bit(h, 60),
        avoid_mem_cflct: bit(h, 61),
        pasid_valid: bit(h, 62),
        ring_pa: w[4],
        shadow_pa: w[5],
        first_pble: get(w[6], 27, 0) as u32,
        tph_val: get(w[7], 7, 0) as u8,
        vsi: get(w[7], 23, 8) as u16,
        pasid: get(w[7], 51, 32) as u32,
        resize: bit(h, 43),
    }
}

fn eq(w: &[u64; 8], ceq: bool) -> EqWqe {
    let h = w[3];
    EqWqe {
        id: if ceq { (get(h, 9, 0) | get(h, 15, 10) << 10) as u32 } else { 0 },
        size: if ceq { get(w[2], 21, 0) } else { get(w[2], 18, 0) } as u32,
        ring_pa: w[4],
        first_pble: get(w[6], 27, 0) as u32,
        lpbl_size: get(h, 45, 44) as u8,
        virtual_map: bit(h, 47),
        itr_no_expire: ceq && bit(h, 46),
        tph_en: bit(h, 60),
        tph_val: get(w[7], 7, 0) as u8,
        vsi: get(w[7], 23, 8) as u16,
        pasid_valid: bit(h, 62),
        pasid: get(w[7], 51, 32) as u32,
    }
}

fn stag(w: &[u64; 8]) -> StagWqe {
    let h = w[3];
    StagWqe {
        va: w[0],
        len: get(w[1], 45, 0),
        pd: (get(w[1], 63, 46) | get(w[2], 61, 56) << 18) as u32,
        key: get(w[2], 7, 0) as u8,
        index: get(w[2], 31, 8) as u32,
        pa: w[4],
        hmc_fn_idx: get(w[5], 15, 0) as u16,
        non_cached: bit(w[5], 55),
        first_pble: get(w[6], 27, 0) as u32,
        skip_flush: bit(h, 40),
        mw_type1: bit(h, 42),
        mr: bit(h, 43),
        lpbl_size: get(h, 45, 44) as u8,
        page_size: get(h, 47, 46) as u8,
        rights: get(h, 52, 48) as u8,
        remote_access: bit(h, 53),
        placement: get(h, 57, 54) as u8,
        va_based: bit(h, 59),
        use_hmc_fn_idx: bit(h, 60),
        remote_atomics: bit(h, 61),
    }
}

fn qp(w: &[u64; 8]) -> QpWqe {
    let h = w[3];
    QpWqe {
        id: get(h, 23, 0) as u32,
        ctx_pa: w[2],
        shadow_pa: w[5],
        new_mss: get(w[1], 45, 32) as u16,
        term_len: get(w[1], 51, 48) as u8,
        ord_valid: bit(h, 42),
        tcp_ctx_valid: bit(h, 43),
        cached_var_valid: bit(h, 44),
        virtual_map: bit(h, 45),
        force_loopback: bit(h, 46),
        cq_num_valid: bit(h, 47),
        qp_type: get(h, 50, 48) as u8,
        mac_valid: bit(h, 51),
        mss_change: bit(h, 52),
        ignore_mw_bound: bit(h, 54),
        remove_hash: bit(h, 55),
        term_act: get(h, 57, 56) as u8,
        reset_con: bit(h, 58),
        arp_valid: bit(h, 59),
        next_state: get(h, 62, 60) as u8,
    }
}

fn ah(w: &[u64; 8]) -> AhWqe {
    let h = w[3];
    let ipv4 = bit(h, 59);
    let hi = |v: u64| get(v, 63, 32) as u32;
    let lo = |v: u64| get(v, 31, 0) as u32;
    let ip = |lo_w: u64, hi_w: u64| {
        if ipv4 { [lo(lo_w), 0, 0, 0] } else { [hi(hi_w), lo(hi_w), hi(lo_w), lo(lo_w)] }
    };
    AhWqe {
        mac: get(w[0], 63, 16),
        pd: (get(w[1], 63, 48) | get(w[2], 27, 20) << 16) as u32,
        tc: get(w[1], 39, 32) as u8,
        vlan_tag: get(w[1], 15, 0) as u16,
        arp_idx: get(w[2], 63, 48) as u16,
        hop_limit: get(w[2], 39, 32) as u8,
        flow_label: get(w[2], 19, 0) as u32,
        idx: get(h, 23, 0) as u32,
        ipv4,
        insert_vlan: bit(h, 60),
        loopback: bit(h, 62),
        dest_ip: ip(w[4], w[5]),
        src_ip: ip(w[6], w[7]),
    }
}

/// The opcode of a CQP WQE (header @24 [37:32]).
pub fn opcode(w: &[u64; 8]) -> u8 {
    get(w[3], 37, 32) as u8
}

/// Decodes a CQP WQE. Never fails: unknown opcodes are [`CqpOp::Other`].
pub fn decode(w: &[u64; 8]) -> CqpOp {
    let h = w[3];
    match opcode(w) {
        op::NOP => CqpOp::Nop,
        op::QUERY_RDMA_FEATURES => CqpOp::QueryFeatures { buf: w[4], len: get(h, 31, 0) as u32 },
        op::QUERY_FPM_VAL => CqpOp::QueryFpm { fn_id: get(w[2], 15, 0) as u16, buf: w[4] },
        op::COMMIT_FPM_VAL => CqpOp::CommitFpm {
            fn_id: get(w[2], 15, 0) as u16,
            buf: w[4],
            buf_size: get(h, 31, 0) as u32,
            flush_timer_disable: bit(h, 43),
        },
        op::UPDATE_PE_SDS => {
            let mut entries = vec![(get(w[0], 31, 0) as u32, w[1])];
            for (c, d) in [(w[4], w[5]), (w[6], w[7])] {
                if bit(c, 63) {
                    entries.push((get(c, 31, 0) as u32, d));
                }
            }
            CqpOp::UpdateSds {
                fn_id: get(w[2], 5, 0) as u8,
                entries,
                overflow_pa: w[2] & !0x3F,
                overflow_cnt: get(h, 3, 0) as u8,
            }
        }
        op::SHMC_PAGES_ALLOCATED => CqpOp::Shmc { fn_id: get(w[2], 15, 0) as u16 },
        op::CREATE_CQ => CqpOp::CreateCq(cq(w, true)),
        op::MODIFY_CQ => CqpOp::ModifyCq(cq(w, false)),
        op::DESTROY_CQ => CqpOp::DestroyCq(cq(w, false)),
        op::CREATE_CEQ => CqpOp::CreateCeq(eq(w, true)),
        op::DESTROY_CEQ => CqpOp::DestroyCeq(eq(w, true)),
        op::CREATE_AEQ => CqpOp::CreateAeq(eq(w, false)),
        op::DESTROY_AEQ => CqpOp::DestroyAeq(eq(w, false)),
        op::MANAGE_ARP => CqpOp::ManageArp {
            idx: get(h, 11, 0) as u16,
            valid: bit(h, 42),
            permanent: bit(h, 43),
            query: bit(h, 44),
            mac: get(w[2], 47, 0),
            reach_max: get(w[1], 31, 0) as u32,
        },
        op::WORK_SCHED_NODE => CqpOp::WsNode {
            id: get(h, 13, 0) as u16,
            parent: get(h, 29, 16) as u16,
            node_op: get(h, 55, 52) as u8,
            tc: get(h, 58, 56) as u8,
            prio_type: get(h, 60, 59) as u8,
            leaf: bit(h, 61),
            enable: bit(h, 62),
            weight: get(w[4], 38, 32) as u8,
            vsi: get(w[4], 63, 48) as u16,
        },
        op::ALLOC_STAG => CqpOp::AllocStag(stag(w)),
        op::REG_MR => CqpOp::RegMr(stag(w)),
        op::DEALLOC_STAG => CqpOp::DeallocStag(stag(w)),
        op::CREATE_QP => CqpOp::CreateQp(qp(w)),
        op::MODIFY_QP => CqpOp::ModifyQp(qp(w)),
        op::DESTROY_QP => CqpOp::DestroyQp(qp(w)),
        op::FLUSH_WQES => CqpOp::FlushWqes(FlushWqe {
            qp: get(h, 23, 0) as u32,
            generate_ae: bit(h, 59),
            ae_code: get(w[1], 15, 0) as u16,
            ae_src: get(w[1], 19, 16) as u8,
            user_codes: bit(h, 60),
            rq_minor: get(w[2], 15, 0) as u16,
            rq_major: get(w[2], 31, 16) as u16,
            sq_minor: get(w[2], 47, 32) as u16,
            sq_major: get(w[2], 63, 48) as u16,
            flush_sq: bit(h, 61),
            flush_rq: bit(h, 62),
        }),
        op::CREATE_ADDR_HANDLE => CqpOp::CreateAh(ah(w)),
        op::MODIFY_ADDR_HANDLE => CqpOp::ModifyAh(ah(w)),
        op::DESTROY_ADDR_HANDLE => CqpOp::DestroyAh(ah(w)),
        other => CqpOp::Other(other),
    }
}
