//! Control path: the vendor's CQP WQE builders (ctrl.c, compiled unmodified
//! through `shim/ctrl_glue.c`) against the driver's `irdma::cqp::cmd`
//! encoders.
//!
//! Each case is one command with seeded random fields, in range and out of
//! range (values up to the vendor's C type, biased to the field edges), and
//! random committed HMC counts. The vendor builds its WQE with
//! `post_sq = false` into a 4-slot CQP SQ ring kept across the run, so the
//! ring wraps and the valid bit flips every four WQEs; the driver encodes
//! the same input. Compared: the return code (the vendor's `-EINVAL` against
//! the driver's `EncodeError`), all eight WQE words, and the vendor's valid
//! bit against the polarity rule the driver's engine follows (first pass 1,
//! flipped at every wrap: `Cqp::next_slot`; spec §2.5).
//!
//! Where the vendor accepts an input the driver refuses, the case must be
//! one of the listed deviations, and for a truncating vendor the bytes it
//! wrote must be exactly what the driver writes for the input with every
//! over-wide field cut to its width: the deviation is then the refusal
//! alone, never a different encoding.
//!
//! Where the vendor ORs a value into its word without a mask, the check is
//! the same with the raw value ORed into the driver's word for the cut
//! input; where Linux 6.1's field is narrower than the spec's (HMCFNIDX,
//! VSIIDX), the driver's word cut to 6.1's width must equal the vendor's.
//!
//! Commands covered: CREATE_QP, MODIFY_QP, DESTROY_QP (irdma_sc_qp_create /
//! _modify / _destroy), ALLOC_STAG, DEALLOC_STAG, REG_MR
//! (irdma_sc_alloc_stag / irdma_sc_dealloc_stag /
//! irdma_sc_mr_reg_non_shared), CREATE_CQ, DESTROY_CQ (irdma_sc_cq_create /
//! irdma_sc_cq_destroy), CREATE_CEQ, DESTROY_CEQ, CREATE_AEQ, DESTROY_AEQ
//! (irdma_sc_ceq_init / _aeq_init, whose checks the driver folds into its
//! builders, then irdma_sc_ceq_create / _destroy, irdma_sc_aeq_create /
//! _destroy); CREATE / MODIFY / DESTROY_ADDR_HANDLE (uda.c
//! irdma_sc_access_ah); WORK_SCHED_NODE (irdma_sc_manage_ws_node);
//! QUERY_FPM_VAL, COMMIT_FPM_VAL (irdma_sc_query_fpm_val /
//! irdma_sc_commit_fpm_val); and in `qpc.rs` the RoCE QP host context.

use core::ffi::c_int;

use irdma::cqp::EncodeError;
use irdma::cqp::cmd::{
    AhInfo, AllocStag, CommitFpmVal, CqpCommand, CreateAeq, CreateAh, CreateCeq, CreateCq,
    CreateQp, DeallocStag, DestroyAeq, DestroyAh, DestroyCeq, DestroyCq, DestroyQp, Env, Limits,
    ModifyAh, ModifyQp, MrPages, Pbl, QueryFpmVal, QueueAddr, RegMr, WsNode, WsNodeOp,
};
use irdma::wr::PageSize;

use crate::rng::Rng;

/// `struct vd_qp_cmd` (ctrl_glue.c), field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VdQpCmd {
    pub ctx_pa: u64,
    pub shadow_pa: u64,
    pub qp_id: u32,
    pub new_mss: u16,
    pub qp_type: u8,
    pub virtual_map: u8,
    pub next_state: u8,
    pub termlen: u8,
    pub ord_valid: u8,
    pub tcp_ctx_valid: u8,
    pub cached_var_valid: u8,
    pub cq_num_valid: u8,
    pub arp_cache_idx_valid: u8,
    pub mac_valid: u8,
    pub mss_change: u8,
    pub remove_hash_idx: u8,
    pub reset_tcp_conn: u8,
    pub dont_send_fin: u8,
    pub dont_send_term: u8,
    pub force_lpb: u8,
    pub ignore_mw_bnd: u8,
    pub pad: [u8; 7],
}

/// `struct vd_stag_cmd` (ctrl_glue.c).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VdStagCmd {
    pub total_len: u64,
    pub first_pm_pbl_idx: u64,
    pub chunk_size: u32,
    pub stag_idx: u32,
    pub page_size: u32,
    pub pd_id: u32,
    pub access_rights: u16,
    pub remote_access: u8,
    pub use_hmc_fcn_index: u8,
    pub all_memory: u8,
    pub hmc_fcn_index: u8,
    pub mr: u8,
    pub pad: u8,
}

/// `struct vd_cq_cmd` (ctrl_glue.c).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VdCqCmd {
    pub cq_pa: u64,
    pub shadow_pa: u64,
    pub cq_id: u32,
    pub cq_size: u32,
    pub ceq_id: u32,
    pub shadow_read_threshold: u32,
    pub first_pm_pbl_idx: u32,
    pub max_ceqs: u32,
    pub vsi_idx: u16,
    pub pbl_chunk_size: u8,
    pub tph_val: u8,
    pub ceqe_mask: u8,
    pub virtual_map: u8,
    pub check_overflow: u8,
    pub ceq_id_valid: u8,
    pub tph_en: u8,
    pub avoid_mem_cflct: u8,
    pub pad: [u8; 4],
}

/// `struct vd_mr_cmd` (ctrl_glue.c).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VdMrCmd {
    pub reg_addr_pa: u64,
    pub va: u64,
    pub total_len: u64,
    pub page_size: u32,
    pub chunk_size: u32,
    pub first_pm_pbl_index: u32,
    pub stag_idx: u32,
    pub pd_id: u32,
    pub access_rights: u16,
    pub va_based: u8,
    pub stag_key: u8,
    pub use_hmc_fcn_index: u8,
    pub hmc_fcn_index: u8,
    pub all_memory: u8,
    pub pad: [u8; 5],
}

/// `struct vd_eq_cmd` (ctrl_glue.c).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VdEqCmd {
    pub pa: u64,
    pub elem_cnt: u32,
    pub ceq_id: u32,
    pub first_pm_pbl_idx: u32,
    pub max_ceqs: u32,
    pub vsi_idx: u16,
    pub virtual_map: u8,
    pub tph_en: u8,
    pub itr_no_expire: u8,
    pub pbl_chunk_size: u8,
    pub tph_val: u8,
    pub pad: u8,
}

/// `struct vd_ah_cmd` (ctrl_glue.c).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VdAhCmd {
    pub pd_idx: u32,
    pub dst_arpindex: u32,
    pub dest_ip_addr: [u32; 4],
    pub src_ip_addr: [u32; 4],
    pub flow_label: u32,
    pub ah_idx: u32,
    pub vlan_tag: u16,
    pub insert_vlan_tag: u8,
    pub tc_tos: u8,
    pub hop_ttl: u8,
    pub mac_addr: [u8; 6],
    pub ipv4_valid: u8,
    pub do_lpbk: u8,
    pub pad: [u8; 6],
}

/// `struct vd_misc_cmd` (ctrl_glue.c).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VdMiscCmd {
    pub pa: u64,
    pub id: u16,
    pub vsi: u16,
    pub parent_id: u16,
    pub type_leaf: u8,
    pub enable: u8,
    pub prio_type: u8,
    pub tc: u8,
    pub weight: u8,
    pub hmc_fn_id: u8,
}

#[repr(C)]
struct VdCqp {
    _p: [u8; 0],
}

unsafe extern "C" {
    fn vd_cqp_new(sq_size: u32, ret: *mut c_int) -> *mut VdCqp;
    fn vd_cqp_free(c: *mut VdCqp);
    fn vd_cqp_set_counts(c: *mut VdCqp, qp: u32, cq: u32, pble: u32);
    fn vd_cqp_head(c: *mut VdCqp) -> u32;
    fn vd_cqp_take(c: *mut VdCqp, idx: u32, out: *mut u64);
    fn vd_qp_create_cmd(c: *mut VdCqp, k: *const VdQpCmd) -> c_int;
    fn vd_qp_modify_cmd(c: *mut VdCqp, k: *const VdQpCmd) -> c_int;
    fn vd_qp_destroy_cmd(c: *mut VdCqp, k: *const VdQpCmd) -> c_int;
    fn vd_alloc_stag_cmd(c: *mut VdCqp, k: *const VdStagCmd) -> c_int;
    fn vd_dealloc_stag_cmd(c: *mut VdCqp, k: *const VdStagCmd) -> c_int;
    fn vd_cq_ctx() -> u64;
    fn vd_cq_create_cmd(c: *mut VdCqp, k: *const VdCqCmd) -> c_int;
    fn vd_cq_destroy_cmd(c: *mut VdCqp, k: *const VdCqCmd) -> c_int;
    fn vd_mr_reg_cmd(c: *mut VdCqp, k: *const VdMrCmd) -> c_int;
    fn vd_eq_cmd(c: *mut VdCqp, k: *const VdEqCmd, op: u32) -> c_int;
    fn vd_ah_cmd(c: *mut VdCqp, k: *const VdAhCmd, op: u32) -> c_int;
    fn vd_misc_cmd(c: *mut VdCqp, k: *const VdMiscCmd, op: u32) -> c_int;
}

/// One control-path case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmd {
    CreateQp(VdQpCmd),
    ModifyQp(VdQpCmd),
    DestroyQp(VdQpCmd),
    AllocStag(VdStagCmd),
    DeallocStag(VdStagCmd),
    RegMr(VdMrCmd),
    CreateCq(VdCqCmd),
    DestroyCq(VdCqCmd),
    CreateCeq(VdEqCmd),
    DestroyCeq(VdEqCmd),
    CreateAeq(VdEqCmd),
    DestroyAeq(VdEqCmd),
    /// CREATE / MODIFY / DESTROY_ADDR_HANDLE (op 0, 1, 2).
    Ah(VdAhCmd, u32),
    /// WORK_SCHED_NODE add / modify / delete (op 0, 1, 2), QUERY_FPM_VAL
    /// (3), COMMIT_FPM_VAL (4).
    Misc(VdMiscCmd, u32),
}

/// A command and the committed HMC counts it is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtrlCase {
    pub cmd: Cmd,
    pub qp_count: u32,
    pub cq_count: u32,
    pub pble_count: u32,
}

/// Commands per kind compared equal / refused by both.
pub mod stats {
    use std::sync::atomic::{AtomicU64, Ordering};

    pub static POSTED: [AtomicU64; 16] = [const { AtomicU64::new(0) }; 16];
    pub static REFUSED: [AtomicU64; 16] = [const { AtomicU64::new(0) }; 16];
    pub static WRAPS: AtomicU64 = AtomicU64::new(0);
    const NAMES: [&str; 16] = [
        "CREATE_QP",
        "MODIFY_QP",
        "DESTROY_QP",
        "ALLOC_STAG",
        "DEALLOC_STAG",
        "REG_MR",
        "CREATE_CQ",
        "DESTROY_CQ",
        "CREATE_CEQ",
        "DESTROY_CEQ",
        "CREATE_AEQ",
        "DESTROY_AEQ",
        "CREATE/MODIFY/DESTROY_AH",
        "WORK_SCHED_NODE",
        "QUERY_FPM_VAL",
        "COMMIT_FPM_VAL",
    ];

    pub fn line() -> String {
        let mut s = String::from("CQP WQEs equal (built / refused by both):");
        for (i, n) in NAMES.iter().enumerate() {
            let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
            s += &format!(" {n} {}/{}", g(&POSTED[i]), g(&REFUSED[i]));
        }
        s += &format!("; {} ring wraps", WRAPS.load(Ordering::Relaxed));
        s
    }
}

impl Cmd {
    /// The command's `max_ceqs` (device state the glue checks ids against,
    /// not an input of the command), when it carries one.
    fn max_ceqs_mut(&mut self) -> Option<&mut u32> {
        match self {
            Cmd::CreateCq(k) | Cmd::DestroyCq(k) => Some(&mut k.max_ceqs),
            Cmd::CreateCeq(k) | Cmd::DestroyCeq(k) | Cmd::CreateAeq(k) | Cmd::DestroyAeq(k) => {
                Some(&mut k.max_ceqs)
            }
            _ => None,
        }
    }

    fn kind(&self) -> usize {
        match self {
            Cmd::CreateQp(_) => 0,
            Cmd::ModifyQp(_) => 1,
            Cmd::DestroyQp(_) => 2,
            Cmd::AllocStag(_) => 3,
            Cmd::DeallocStag(_) => 4,
            Cmd::RegMr(_) => 5,
            Cmd::CreateCq(_) => 6,
            Cmd::DestroyCq(_) => 7,
            Cmd::CreateCeq(_) => 8,
            Cmd::DestroyCeq(_) => 9,
            Cmd::CreateAeq(_) => 10,
            Cmd::DestroyAeq(_) => 11,
            Cmd::Ah(..) => 12,
            Cmd::Misc(_, op) => 13 + (*op as usize).saturating_sub(2).min(2),
        }
    }
}

/// A bool as the vendor's C gets it (0/1).
fn b(r: &mut Rng) -> u8 {
    r.chance(1, 2) as u8
}

/// A value of a C type `c_bits` wide for a field `bits` wide: mostly in
/// range, edges of the field, sometimes past it.
fn val(r: &mut Rng, bits: u32, c_bits: u32) -> u64 {
    if c_bits > bits && r.chance(1, 8) { r.field(c_bits) } else { r.field(bits) }
}

fn gen_qp(r: &mut Rng) -> VdQpCmd {
    VdQpCmd {
        ctx_pa: r.next_u64() & !0xff,
        shadow_pa: r.next_u64() & !0x3f,
        qp_id: if r.chance(1, 8) { r.u32_edge() } else { r.below(1 << 18) as u32 },
        new_mss: val(r, 14, 16) as u16,
        qp_type: if r.chance(1, 8) { r.field(8) as u8 } else { r.range(1, 4) as u8 },
        virtual_map: b(r),
        next_state: val(r, 3, 8) as u8,
        termlen: val(r, 4, 8) as u8,
        ord_valid: b(r),
        tcp_ctx_valid: b(r),
        cached_var_valid: b(r),
        cq_num_valid: b(r),
        arp_cache_idx_valid: b(r),
        mac_valid: b(r),
        mss_change: b(r),
        remove_hash_idx: b(r),
        reset_tcp_conn: b(r),
        dont_send_fin: b(r),
        dont_send_term: b(r),
        force_lpb: b(r),
        ignore_mw_bnd: b(r),
        pad: [0; 7],
    }
}

fn gen_stag(r: &mut Rng) -> VdStagCmd {
    VdStagCmd {
        total_len: if r.chance(1, 8) { 0 } else { val(r, 46, 64) },
        first_pm_pbl_idx: val(r, 28, 64),
        chunk_size: if r.chance(1, 3) { 0 } else { val(r, 2, 32) as u32 },
        stag_idx: if r.chance(1, 8) { r.u32_edge() } else { r.field(24) as u32 },
        page_size: r.pick(&[0x1000, 0x1000, 0x20_0000, 0x4000_0000, 0x1_0000, 0]),
        pd_id: val(r, 18, 32) as u32,
        access_rights: val(r, 5, 16) as u16,
        remote_access: b(r),
        use_hmc_fcn_index: b(r),
        all_memory: b(r),
        hmc_fcn_index: val(r, 6, 8) as u8,
        mr: b(r),
        pad: 0,
    }
}

fn gen_mr(r: &mut Rng) -> VdMrCmd {
    VdMrCmd {
        reg_addr_pa: r.next_u64() & !0xfff,
        va: r.next_u64(),
        total_len: if r.chance(1, 8) { 0 } else { val(r, 46, 64) },
        page_size: r.pick(&[0x1000, 0x1000, 0x20_0000, 0x4000_0000, 0x1_0000, 0]),
        chunk_size: if r.chance(1, 3) { 0 } else { val(r, 2, 32) as u32 },
        first_pm_pbl_index: val(r, 28, 32) as u32,
        stag_idx: if r.chance(1, 8) { r.u32_edge() } else { r.field(24) as u32 },
        pd_id: val(r, 18, 32) as u32,
        access_rights: val(r, 5, 16) as u16,
        va_based: b(r),
        stag_key: r.field(8) as u8,
        use_hmc_fcn_index: b(r),
        hmc_fcn_index: r.field(8) as u8,
        all_memory: b(r),
        pad: [0; 5],
    }
}

fn gen_cq(r: &mut Rng) -> VdCqCmd {
    // The vendor indexes dev->ceq[IRDMA_CEQ_MAX_COUNT = 1024] with a ceq_id
    // below max_ceqs (user.h): max_ceqs stays within that array.
    let max_ceqs = if r.chance(1, 4) { r.range(1, 1024) as u32 } else { r.pick(&[1, 2, 64, 1024]) };
    let ceq_id_valid = b(r);
    VdCqCmd {
        cq_pa: r.next_u64() & !0xff,
        shadow_pa: r.next_u64() & !0x3f,
        cq_id: if r.chance(1, 8) { r.u32_edge() } else { r.below(1 << 19) as u32 },
        cq_size: val(r, 21, 32) as u32,
        // the driver has no CEQ id without CEQIDVALID (the vendor checks it anyway)
        ceq_id: if ceq_id_valid == 0 {
            0
        } else if r.chance(1, 8) {
            r.u32_edge()
        } else {
            r.below(1024) as u32
        },
        shadow_read_threshold: val(r, 18, 32) as u32,
        first_pm_pbl_idx: val(r, 28, 32) as u32,
        max_ceqs,
        vsi_idx: if r.chance(1, 4) { r.field(16) as u16 } else { r.field(10) as u16 },
        pbl_chunk_size: val(r, 2, 8) as u8,
        tph_val: r.field(8) as u8,
        ceqe_mask: b(r),
        virtual_map: b(r),
        check_overflow: b(r),
        ceq_id_valid,
        tph_en: b(r),
        avoid_mem_cflct: b(r),
        pad: [0; 4],
    }
}

/// An EQ: in and out of the vendor's init ranges (user.h
/// IRDMA_MIN/MAX_CEQ_ENTRIES, IRDMA_MIN/MAX_AEQ_ENTRIES).
fn gen_eq(r: &mut Rng, aeq: bool) -> VdEqCmd {
    let max = if aeq { 524_287 } else { 262_143 };
    let max_ceqs = r.pick(&[1, 2, 64, 1024]);
    VdEqCmd {
        pa: r.next_u64() & !0xff,
        elem_cnt: match r.below(6) {
            0 => r.u32_edge(),
            1 => r.pick(&[0, 1, max, max + 1]),
            _ => r.range(1, max as u64) as u32,
        },
        ceq_id: match r.below(8) {
            0 => r.u32_edge(),
            1 => r.below(1024) as u32,
            _ => r.below(max_ceqs as u64) as u32,
        },
        first_pm_pbl_idx: val(r, 28, 32) as u32,
        max_ceqs,
        vsi_idx: if r.chance(1, 4) { r.field(16) as u16 } else { r.field(10) as u16 },
        virtual_map: r.chance(1, 2) as u8,
        tph_en: r.chance(1, 2) as u8,
        itr_no_expire: r.chance(1, 2) as u8,
        pbl_chunk_size: val(r, 2, 8) as u8,
        tph_val: r.field(8) as u8,
        pad: 0,
    }
}

/// A destroy goes through the vendor's init first (its object must exist):
/// keep the EQ one init accepts, as the driver's own objects are.
fn init_ok(mut k: VdEqCmd, aeq: bool, pble_count: u32) -> VdEqCmd {
    let max = if aeq { 524_287 } else { 262_143 };
    k.elem_cnt = k.elem_cnt % max + 1;
    k.ceq_id %= k.max_ceqs;
    match pble_count {
        0 => k.virtual_map = 0,
        n => k.first_pm_pbl_idx %= n,
    }
    k
}

fn gen_ah(r: &mut Rng) -> VdAhCmd {
    let ip = |r: &mut Rng| [0; 4].map(|_: u32| r.next_u64() as u32);
    let (dest_ip_addr, src_ip_addr) = (ip(r), ip(r));
    VdAhCmd {
        pd_idx: val(r, 18, 32) as u32,
        dst_arpindex: val(r, 16, 32) as u32,
        dest_ip_addr,
        src_ip_addr,
        flow_label: val(r, 20, 32) as u32,
        // device::MAX_AHS is 1024; 17 bits is Linux 6.1's AVIDX
        ah_idx: match r.below(8) {
            0 => r.u32_edge(),
            1 => r.field(24) as u32,
            _ => r.field(17) as u32,
        },
        vlan_tag: r.field(16) as u16,
        insert_vlan_tag: r.chance(1, 2) as u8,
        tc_tos: r.field(8) as u8,
        hop_ttl: r.field(8) as u8,
        mac_addr: [0; 6].map(|_: u8| r.field(8) as u8),
        ipv4_valid: r.chance(1, 2) as u8,
        do_lpbk: r.chance(1, 2) as u8,
        pad: [0; 6],
    }
}

fn gen_misc(r: &mut Rng) -> VdMiscCmd {
    // Linux 6.1 widths (defs.h IRDMA_CQPSQ_WS_*): NODEID / PARENTID / VSI
    // 10 bits, WEIGHT 7, PRIOTYPE 2, TC 3
    VdMiscCmd {
        pa: r.next_u64() & !0x3f,
        id: val(r, 10, 16) as u16,
        vsi: val(r, 10, 16) as u16,
        parent_id: val(r, 10, 16) as u16,
        type_leaf: r.chance(1, 2) as u8,
        enable: r.chance(1, 2) as u8,
        prio_type: val(r, 2, 8) as u8,
        tc: val(r, 3, 8) as u8,
        weight: val(r, 7, 8) as u8,
        hmc_fn_id: r.field(8) as u8,
    }
}

/// A random case.
pub fn gen_ctrl_case(r: &mut Rng) -> CtrlCase {
    let cmd = match r.below(15) {
        0 => Cmd::CreateQp(gen_qp(r)),
        1 => Cmd::ModifyQp(gen_qp(r)),
        2 => Cmd::DestroyQp(gen_qp(r)),
        3 => Cmd::AllocStag(gen_stag(r)),
        4 => Cmd::DeallocStag(gen_stag(r)),
        5 => Cmd::RegMr(gen_mr(r)),
        6 => Cmd::CreateCq(gen_cq(r)),
        7 => {
            // irdma_sc_cq_destroy reads dev->ceq[ceq_id] with the id
            // unchecked: past IRDMA_CEQ_MAX_COUNT (1024) it reads outside
            // the array, so the harness keeps it inside (the driver refuses
            // any id at or above the CEQ count)
            let mut k = gen_cq(r);
            k.ceq_id %= 1024;
            Cmd::DestroyCq(k)
        }
        8 => Cmd::CreateCeq(gen_eq(r, false)),
        9 => Cmd::DestroyCeq(gen_eq(r, false)),
        10 => Cmd::CreateAeq(gen_eq(r, true)),
        11 => Cmd::DestroyAeq(gen_eq(r, true)),
        12 => Cmd::Ah(gen_ah(r), r.below(3) as u32),
        13 => Cmd::Misc(gen_misc(r), r.below(3) as u32),
        _ => Cmd::Misc(gen_misc(r), 3 + r.below(2) as u32),
    };
    let count = |r: &mut Rng| match r.below(4) {
        0 => r.u32_edge(),
        1 => u32::MAX,
        _ => r.range(1, 1 << 19) as u32,
    };
    let mut c = CtrlCase { cmd, qp_count: count(r), cq_count: count(r), pble_count: count(r) };
    match &mut c.cmd {
        Cmd::DestroyCeq(k) => *k = init_ok(*k, false, c.pble_count),
        Cmd::DestroyAeq(k) => *k = init_ok(*k, true, c.pble_count),
        _ => {}
    }
    c
}

/// What the driver's builder did.
type Drv = Result<[u64; 8], EncodeError>;

fn page(p: u32) -> Option<PageSize> {
    // ctrl.c irdma_sc_alloc_stag: 1 GiB and 2 MiB by value, anything else 4 KiB.
    match p {
        0x1000 => Some(PageSize::Size4K),
        0x20_0000 => Some(PageSize::Size2M),
        0x4000_0000 => Some(PageSize::Size1G),
        _ => None,
    }
}

/// The driver's command for a case; `None` when the driver's input types
/// cannot hold it (a value wider than the driver's field type, a page size
/// other than 4K/2M/1G) -- a refusal at the type level.
fn driver(c: &CtrlCase) -> Option<Drv> {
    driver_pbl(c, false)
}

/// [`driver`]; `force_pbl`: an ALLOC_STAG gets a PBL (level from
/// `chunk_size`, possibly 0) even for a `chunk_size` of 0.
fn driver_pbl(c: &CtrlCase, force_pbl: bool) -> Option<Drv> {
    let ceq_count = match c.cmd {
        Cmd::CreateCq(k) | Cmd::DestroyCq(k) => k.max_ceqs,
        Cmd::CreateCeq(k) | Cmd::DestroyCeq(k) => k.max_ceqs,
        _ => u32::MAX,
    };
    let mut env = Env::new(Limits {
        qp_count: c.qp_count,
        cq_count: c.cq_count,
        pble_count: c.pble_count,
        ceq_count,
    });
    let mut w = [0u64; 8];
    let (w, env) = (&mut w, &mut env);
    let r = match c.cmd {
        Cmd::CreateQp(_) | Cmd::ModifyQp(_) | Cmd::DestroyQp(_) => qp_cmd(c.cmd, w, env),
        Cmd::AllocStag(_) | Cmd::DeallocStag(_) | Cmd::RegMr(_) => {
            stag_cmd(c.cmd, force_pbl, w, env)?
        }
        Cmd::CreateCq(_) | Cmd::DestroyCq(_) => cq_cmd(c.cmd, w, env)?,
        Cmd::CreateCeq(_) | Cmd::DestroyCeq(_) | Cmd::CreateAeq(_) | Cmd::DestroyAeq(_) => {
            eq_cmd(c.cmd, w, env)?
        }
        Cmd::Ah(..) => ah_cmd(c.cmd, w, env)?,
        Cmd::Misc(..) => misc_cmd(c.cmd, w, env),
    };
    Some(r.map(|()| *w))
}

/// The encode result of a driver command.
type Enc = Result<(), EncodeError>;

/// CREATE / MODIFY / DESTROY_QP.
fn qp_cmd(cmd: Cmd, w: &mut [u64; 8], env: &mut Env) -> Enc {
    match cmd {
        Cmd::CreateQp(k) => from_glue!(k, CreateQp {
            host_ctx_pa: k.ctx_pa,
            shadow_area_pa: k.shadow_pa,
            force_loopback: k.force_lpb != 0,
        } flag [virtual_map ord_valid tcp_ctx_valid cq_num_valid arp_cache_idx_valid mac_valid]
          copy [qp_id qp_type next_state])
        .encode(w, env),
        Cmd::ModifyQp(k) => from_glue!(k, ModifyQp {
            host_ctx_pa: k.ctx_pa,
            shadow_area_pa: k.shadow_pa,
            force_loopback: k.force_lpb != 0,
        } flag [virtual_map ord_valid tcp_ctx_valid cached_var_valid cq_num_valid
                arp_cache_idx_valid mac_valid mss_change remove_hash_idx reset_tcp_conn
                dont_send_fin dont_send_term]
          copy [qp_id qp_type next_state new_mss termlen])
        .encode(w, env),
        Cmd::DestroyQp(k) => from_glue!(k, DestroyQp {
            host_ctx_pa: k.ctx_pa,
            shadow_area_pa: k.shadow_pa,
        } flag [ignore_mw_bnd remove_hash_idx] copy [qp_id qp_type])
        .encode(w, env),
        _ => unreachable!("qp_cmd takes the QP commands"),
    }
}

/// ALLOC_STAG / DEALLOC_STAG / REG_MR (`force_pbl`: see [`driver_pbl`]).
fn stag_cmd(cmd: Cmd, force_pbl: bool, w: &mut [u64; 8], env: &mut Env) -> Option<Enc> {
    Some(match cmd {
        Cmd::AllocStag(k) => {
            let pbl = match k.chunk_size {
                0 if !force_pbl => None,
                n => Some(Pbl {
                    level: u8::try_from(n).ok()?,
                    first_index: u32::try_from(k.first_pm_pbl_idx).ok()?,
                }),
            };
            from_glue!(k, AllocStag {
                page_size: page(k.page_size)?,
                access_rights: u8::try_from(k.access_rights).ok()?,
                use_hmc_fn_index: k.use_hmc_fcn_index != 0,
                hmc_fn_index: k.hmc_fcn_index as u16,
                placement_type: 0,
                pbl,
            } flag [remote_access all_memory] copy [stag_idx pd_id total_len])
            .encode(w, env)
        }
        Cmd::DeallocStag(k) => {
            DeallocStag { stag_idx: k.stag_idx, pd_id: k.pd_id, mr: k.mr != 0, skip_flush: false }
                .encode(w, env)
        }
        Cmd::RegMr(k) => {
            let pages = match k.chunk_size {
                0 if !force_pbl => MrPages::Contiguous(k.reg_addr_pa),
                n => MrPages::Pbl(Pbl {
                    level: u8::try_from(n).ok()?,
                    first_index: k.first_pm_pbl_index,
                }),
            };
            from_glue!(k, RegMr {
                page_size: page(k.page_size)?,
                pages,
                access_rights: u8::try_from(k.access_rights).ok()?,
                remote_atomics: false,
                non_cached: false,
                use_hmc_fn_index: k.use_hmc_fcn_index != 0,
                hmc_fn_index: k.hmc_fcn_index as u16,
                placement_type: 0,
            } flag [va_based all_memory] copy [stag_idx stag_key pd_id va total_len])
            .encode(w, env)
        }
        _ => unreachable!("stag_cmd takes the STAG/MR commands"),
    })
}

/// CREATE / DESTROY_CQ.
fn cq_cmd(cmd: Cmd, w: &mut [u64; 8], env: &mut Env) -> Option<Enc> {
    Some(match cmd {
        Cmd::CreateCq(k) | Cmd::DestroyCq(k) => {
            let ceq_id = match k.ceq_id_valid {
                0 => None,
                _ => Some(u16::try_from(k.ceq_id).ok()?),
            };
            let ring = QueueAddr {
                pa: k.cq_pa,
                virtual_map: k.virtual_map != 0,
                pbl_chunk_size: k.pbl_chunk_size,
                first_pbl_index: k.first_pm_pbl_idx,
            };
            // SAFETY: vd_cq_ctx only takes an address.
            let cq_ctx = unsafe { vd_cq_ctx() };
            if let Cmd::CreateCq(_) = cmd {
                from_glue!(k, CreateCq {
                    cq_ctx,
                    ceq_id,
                    ring,
                    shadow_area_pa: k.shadow_pa,
                    pasid_valid: false,
                    pasid: 0,
                } flag [ceqe_mask check_overflow tph_en avoid_mem_cflct]
                  copy [cq_id cq_size shadow_read_threshold tph_val vsi_idx])
                .encode(w, env)
            } else {
                from_glue!(k, DestroyCq {
                    cq_ctx,
                    ceq_id,
                    ring,
                    shadow_area_pa: k.shadow_pa,
                    pasid_valid: false,
                    pasid: 0,
                } flag [ceqe_mask tph_en avoid_mem_cflct] copy [cq_id cq_size])
                .encode(w, env)
            }
        }
        _ => unreachable!("cq_cmd takes the CQ commands"),
    })
}

/// CREATE / DESTROY_CEQ, CREATE / DESTROY_AEQ.
fn eq_cmd(cmd: Cmd, w: &mut [u64; 8], env: &mut Env) -> Option<Enc> {
    Some(match cmd {
        Cmd::CreateCeq(k) | Cmd::DestroyCeq(k) | Cmd::CreateAeq(k) | Cmd::DestroyAeq(k) => {
            let mem = QueueAddr {
                pa: k.pa,
                virtual_map: k.virtual_map != 0,
                pbl_chunk_size: k.pbl_chunk_size,
                first_pbl_index: k.first_pm_pbl_idx,
            };
            match cmd {
                Cmd::CreateCeq(_) => from_glue!(k, CreateCeq {
                    ceq_id: u16::try_from(k.ceq_id).ok()?,
                    mem,
                    pasid_valid: false,
                    pasid: 0,
                } flag [tph_en itr_no_expire] copy [elem_cnt tph_val vsi_idx])
                .encode(w, env),
                Cmd::DestroyCeq(_) => from_glue!(k, DestroyCeq {
                    ceq_id: u16::try_from(k.ceq_id).ok()?,
                    mem,
                    pasid_valid: false,
                    pasid: 0,
                } flag [tph_en] copy [elem_cnt])
                .encode(w, env),
                Cmd::CreateAeq(_) => {
                    CreateAeq { elem_cnt: k.elem_cnt, mem, pasid_valid: false, pasid: 0 }
                        .encode(w, env)
                }
                _ => DestroyAeq { elem_cnt: k.elem_cnt, mem, pasid_valid: false, pasid: 0 }
                    .encode(w, env),
            }
        }
        _ => unreachable!("eq_cmd takes the EQ commands"),
    })
}

/// CREATE / MODIFY / DESTROY_ADDR_HANDLE.
fn ah_cmd(cmd: Cmd, w: &mut [u64; 8], env: &mut Env) -> Option<Enc> {
    Some(match cmd {
        Cmd::Ah(k, op) => {
            let info = from_glue!(k, AhInfo {
                dst_arp_index: u16::try_from(k.dst_arpindex).ok()?,
                dest_ip: k.dest_ip_addr,
                src_ip: k.src_ip_addr,
                mac: k.mac_addr,
                ipv4: k.ipv4_valid != 0,
                loopback: k.do_lpbk != 0,
            } flag [insert_vlan_tag] copy [ah_idx pd_idx flow_label vlan_tag tc_tos hop_ttl]);
            match op {
                0 => CreateAh(info).encode(w, env),
                1 => ModifyAh(info).encode(w, env),
                _ => DestroyAh(info).encode(w, env),
            }
        }
        _ => unreachable!("ah_cmd takes the AH commands"),
    })
}

/// WORK_SCHED_NODE, QUERY_FPM_VAL, COMMIT_FPM_VAL.
fn misc_cmd(cmd: Cmd, w: &mut [u64; 8], env: &mut Env) -> Enc {
    match cmd {
        Cmd::Misc(k, op) => match op {
            3 => QueryFpmVal { hmc_fn_id: k.hmc_fn_id.into(), buf_pa: k.pa }.encode(w, env),
            4 => CommitFpmVal {
                hmc_fn_id: k.hmc_fn_id.into(),
                buf_pa: k.pa,
                flush_timer_disable: false,
            }
            .encode(w, env),
            _ => WsNode {
                op: [WsNodeOp::Add, WsNodeOp::Modify, WsNodeOp::Delete][op as usize % 3],
                node_id: k.id,
                parent_id: k.parent_id,
                vsi: k.vsi,
                leaf: k.type_leaf != 0,
                enable: k.enable != 0,
                prio_type: k.prio_type,
                tc: k.tc,
                weight: k.weight,
            }
            .encode(w, env),
        },
        _ => unreachable!("misc_cmd takes the misc commands"),
    }
}

fn cut(v: u64, bits: u32) -> u64 {
    v & ((1u64 << bits) - 1)
}

/// The case with every value cut to the width of the vendor's field
/// (defs.h masks: IRDMA_CQPSQ_QP_NEWMSS 45:32, _TERMLEN 51:48, _QPTYPE 50:48,
/// _NEXTIWSTATE 62:60; IRDMA_CQPSQ_STAG_STAGLEN 45:0, _IDX 31:8 (24 bits),
/// _LPBLSIZE 45:44, _ARIGHTS 52:48, _HMCFNIDX 5:0, _FIRSTPMPBLIDX 27:0;
/// icrdma_hw.c ICRDMA_CQPSQ_STAG_PDID 63:46): what the vendor's FIELD_PREP
/// encodes. Counts become unlimited (the truncation check compares
/// encodings, not id checks); the zero-length check is kept by marking the
/// STag all_memory (a software flag the WQE does not carry); qp_id is cut
/// to QPID's 24 bits (the vendor ORs it in whole: the caller adds the rest).
/// Also says whether a non-zero PBL chunk size was cut to 0 (the vendor
/// tests it before cutting, so it still writes the first PBLE index), and
/// which raw values the vendor ORs into a word unmasked, as (word, value,
/// the field's width).
fn cut_case(c: &CtrlCase) -> (CtrlCase, bool, Vec<(usize, u64, u32)>) {
    let mut c = *c;
    let mut forced = false;
    let mut ors = Vec::new();
    // ctrl.c irdma_sc_qp_create / _modify / _destroy: `hdr = qp_id | ...`
    if let Cmd::CreateQp(k) | Cmd::ModifyQp(k) | Cmd::DestroyQp(k) = c.cmd {
        ors.push((3, k.qp_id as u64, 24));
    }
    c.qp_count = u32::MAX;
    c.cq_count = u32::MAX;
    c.pble_count = u32::MAX;
    let cmd_kind = c.cmd;
    match &mut c.cmd {
        Cmd::CreateQp(k) | Cmd::ModifyQp(k) | Cmd::DestroyQp(k) => cut_qp(k),
        Cmd::AllocStag(k) | Cmd::DeallocStag(k) => forced = cut_alloc_stag(k),
        Cmd::RegMr(k) => forced = cut_reg_mr(k),
        Cmd::CreateCq(k) | Cmd::DestroyCq(k) => {
            cut_cq(k, matches!(cmd_kind, Cmd::DestroyCq(_)), &mut ors)
        }
        Cmd::CreateCeq(k) | Cmd::DestroyCeq(k) | Cmd::CreateAeq(k) | Cmd::DestroyAeq(k) => {
            cut_eq(k, &mut ors)
        }
        Cmd::Ah(k, _) => cut_ah(k),
        Cmd::Misc(k, _) => cut_ws_node(k),
    }
    (c, forced, ors)
}

// The fields ALLOC_STAG and REG_MR share, cut alike; whether the PBL is
// forced: the vendor tests chunk_size before cutting it, so a non-zero
// size that cuts to 0 still writes the first PBLE index.
macro_rules! cut_stag {
    ($k:ident) => {{
        let len = cut($k.total_len, 46);
        if len == 0 && $k.total_len != 0 {
            $k.all_memory = 1;
        }
        $k.total_len = len;
        $k.stag_idx = cut($k.stag_idx as u64, 24) as u32;
        $k.access_rights = cut($k.access_rights as u64, 5) as u16;
        $k.pd_id = cut($k.pd_id as u64, 18) as u32;
        let forced = $k.chunk_size != 0 && cut($k.chunk_size as u64, 2) == 0;
        $k.chunk_size = cut($k.chunk_size as u64, 2) as u32;
        forced
    }};
}

fn cut_qp(k: &mut VdQpCmd) {
    k.qp_id = cut(k.qp_id as u64, 24) as u32;
    k.new_mss = cut(k.new_mss as u64, 14) as u16;
    k.termlen = cut(k.termlen as u64, 4) as u8;
    k.qp_type = cut(k.qp_type as u64, 3) as u8;
    // irdma_sc_qp_modify tests next_iwarp_state == TERMINATE (5)
    // before FIELD_PREP cuts it: a wider state cut to 5 gets no
    // terminate actions and no TERMLEN
    if k.next_state != 5 && cut(k.next_state as u64, 3) == 5 {
        k.dont_send_fin = 0;
        k.dont_send_term = 0;
        k.termlen = 0;
    }
    k.next_state = cut(k.next_state as u64, 3) as u8;
}

fn cut_alloc_stag(k: &mut VdStagCmd) -> bool {
    let forced = cut_stag!(k);
    k.first_pm_pbl_idx = cut(k.first_pm_pbl_idx, 28);
    k.hmc_fcn_index = cut(k.hmc_fcn_index as u64, 6) as u8;
    if page(k.page_size).is_none() {
        k.page_size = 0x1000;
    }
    forced
}

fn cut_reg_mr(k: &mut VdMrCmd) -> bool {
    let forced = cut_stag!(k);
    k.first_pm_pbl_index = cut(k.first_pm_pbl_index as u64, 28) as u32;
    forced
}

fn cut_cq(k: &mut VdCqCmd, destroy: bool, ors: &mut Vec<(usize, u64, u32)>) {
    // both write cq_size (@0) whole; destroy also cq_id into the
    // header and the first PBLE index (@48) unmasked
    ors.push((0, k.cq_size as u64, 21));
    if destroy {
        ors.push((3, k.cq_id as u64, 19));
    }
    let pbl = destroy && k.virtual_map != 0;
    cut_first_pbl(pbl, &mut k.first_pm_pbl_idx, &mut k.pbl_chunk_size, &mut k.max_ceqs, ors);
    k.cq_size = cut(k.cq_size as u64, 21) as u32;
    k.cq_id = cut(k.cq_id as u64, 19) as u32;
    k.shadow_read_threshold = cut(k.shadow_read_threshold as u64, 18) as u32;
    // FLD_LS_64 with ICRDMA_CQPSQ_CQ_CEQID (31:22): 10 bits
    k.ceq_id = cut(k.ceq_id as u64, 10) as u32;
}

/// The PBL fields CQs and EQs share: the first PBLE index (@48, written
/// whole when `written`) cut to 28 bits, the 2-bit chunk size, and no CEQ
/// bound for the vendor.
fn cut_first_pbl(
    written: bool,
    idx: &mut u32,
    chunk: &mut u8,
    max_ceqs: &mut u32,
    ors: &mut Vec<(usize, u64, u32)>,
) {
    if written {
        ors.push((6, *idx as u64, 28));
    }
    *idx = cut(*idx as u64, 28) as u32;
    *chunk = cut(*chunk as u64, 2) as u8;
    *max_ceqs = u32::MAX;
}

fn cut_eq(k: &mut VdEqCmd, ors: &mut Vec<(usize, u64, u32)>) {
    // irdma_sc_ceq_init / _aeq_init bound elem_cnt and the CEQ id;
    // the builders write elem_cnt (@16) and the first PBLE index
    // (@48) whole, and FIELD_PREP the chunk size
    let pbl = k.virtual_map != 0;
    cut_first_pbl(pbl, &mut k.first_pm_pbl_idx, &mut k.pbl_chunk_size, &mut k.max_ceqs, ors);
}

fn cut_ah(k: &mut VdAhCmd) {
    // uda_d.h: PDINDEXLO 63:48 + PDINDEXHI 21:20 (18 bits),
    // ARPINDEX 63:48, FLOWLABEL 19:0, AVIDX 16:0
    k.pd_idx = cut(k.pd_idx as u64, 18) as u32;
    k.dst_arpindex = cut(k.dst_arpindex as u64, 16) as u32;
    k.flow_label = cut(k.flow_label as u64, 20) as u32;
    k.ah_idx = cut(k.ah_idx as u64, 17) as u32;
}

fn cut_ws_node(k: &mut VdMiscCmd) {
    // defs.h IRDMA_CQPSQ_WS_*: NODEID 9:0, PARENTID 25:16, VSI 57:48,
    // WEIGHT 38:32, PRIOTYPE 60:59, TC 58:56
    k.id = cut(k.id as u64, 10) as u16;
    k.parent_id = cut(k.parent_id as u64, 10) as u16;
    k.vsi = cut(k.vsi as u64, 10) as u16;
    k.weight = cut(k.weight as u64, 7) as u8;
    k.prio_type = cut(k.prio_type as u64, 2) as u8;
    k.tc = cut(k.tc as u64, 3) as u8;
}

/// The driver's words with the fields Linux 6.1 makes narrower than the
/// spec cut to 6.1's width: ALLOC_STAG HMCFNIDX (defs.h
/// IRDMA_CQPSQ_STAG_HMCFNIDX 5:0; spec 15:0) and CREATE_CQ VSIIDX (defs.h
/// IRDMA_CQPSQ_VSIIDX 17:8; spec and hal 23:8), AH PDINDEXHI and AVIDX.
pub(crate) fn narrow_to_6_1(cmd: &Cmd, mut w: [u64; 8]) -> [u64; 8] {
    match cmd {
        Cmd::AllocStag(_) => w[5] = cut(w[5], 6),
        Cmd::CreateCq(_) | Cmd::CreateCeq(_) => w[7] &= !0x00fc_0000,
        // uda_d.h PDINDEXHI 21:20 (hal 27:20), AVIDX 16:0 (hal 23:0)
        Cmd::Ah(..) => {
            w[2] &= !(0x3f << 22);
            w[3] &= !(0x7f << 17);
        }
        // defs.h IRDMA_CQPSQ_WS_NODEID 9:0 (hal 13:0), _PARENTID 25:16 (hal
        // 29:16), _VSI 57:48 (hal 63:48)
        Cmd::Misc(_, 0..=2) => {
            w[3] &= !(0xf << 10 | 0xf << 26);
            w[4] &= !(0x3f << 58);
        }
        _ => {}
    }
    w
}

/// A difference: what differed, for printing.
#[derive(Debug)]
pub struct CtrlDiff {
    pub what: String,
}

/// The vendor's CQP and the polarity the harness expects next.
pub struct VendorCqp {
    c: *mut VdCqp,
    size: u32,
    /// WQEs the vendor has written so far.
    built: u64,
}

impl VendorCqp {
    pub fn new(size: u32) -> Result<Self, String> {
        let mut ret: c_int = 0;
        // SAFETY: vd_cqp_new only writes *ret and returns an owned pointer or null.
        let c = unsafe { vd_cqp_new(size, &mut ret) };
        if c.is_null() {
            return Err(format!("vendor irdma_sc_cqp_init failed: {ret}"));
        }
        Ok(VendorCqp { c, size, built: 0 })
    }

    /// Runs one command; the vendor's return code and, when it built a WQE,
    /// the eight words and the slot it took.
    pub(crate) fn run(&mut self, case: &CtrlCase) -> (c_int, Option<(u32, [u64; 8])>) {
        let c = self.c;
        // SAFETY: `c` is the live CQP from vd_cqp_new; every command struct
        // is a repr(C) copy of the glue's, passed by pointer for the call.
        unsafe {
            vd_cqp_set_counts(c, case.qp_count, case.cq_count, case.pble_count);
            let head = vd_cqp_head(c);
            let rc = match &case.cmd {
                Cmd::CreateQp(k) => vd_qp_create_cmd(c, k),
                Cmd::ModifyQp(k) => vd_qp_modify_cmd(c, k),
                Cmd::DestroyQp(k) => vd_qp_destroy_cmd(c, k),
                Cmd::AllocStag(k) => vd_alloc_stag_cmd(c, k),
                Cmd::DeallocStag(k) => vd_dealloc_stag_cmd(c, k),
                Cmd::RegMr(k) => vd_mr_reg_cmd(c, k),
                Cmd::CreateCq(k) => vd_cq_create_cmd(c, k),
                Cmd::DestroyCq(k) => vd_cq_destroy_cmd(c, k),
                Cmd::CreateCeq(k) => vd_eq_cmd(c, k, 0),
                Cmd::DestroyCeq(k) => vd_eq_cmd(c, k, 1),
                Cmd::CreateAeq(k) => vd_eq_cmd(c, k, 2),
                Cmd::DestroyAeq(k) => vd_eq_cmd(c, k, 3),
                Cmd::Ah(k, op) => vd_ah_cmd(c, k, *op),
                Cmd::Misc(k, op) => vd_misc_cmd(c, k, *op),
            };
            if vd_cqp_head(c) == head {
                return (rc, None);
            }
            let mut w = [0u64; 8];
            vd_cqp_take(c, head, w.as_mut_ptr());
            (rc, Some((head, w)))
        }
    }
}

impl VendorCqp {
    /// The glue's `struct vd_cqp *`, for the QP-context glue.
    pub(crate) fn raw(&self) -> *mut core::ffi::c_void {
        self.c.cast()
    }
}

impl Drop for VendorCqp {
    fn drop(&mut self) {
        // SAFETY: created by vd_cqp_new, freed once.
        unsafe { vd_cqp_free(self.c) }
    }
}

/// Deviations this module classifies (listed in deviations.toml).
pub const KNOWN: &[&str] = &[
    // counted by the re-deriver (regen/aeqe.rs); the CQP differential has no AEQ
    "aeqe_decode_follows_published_source",
    "cqp_field_truncated_by_vendor",
    "cqp_value_written_unmasked",
    "cqp_id_checked_only_on_create",
    "cqp_field_wider_than_linux_6_1",
    "qpc_ecn_always_forced",
    "commit_fpm_bufsize_192",
];

const WQEVALID: u64 = 1 << 63;
const EINVAL: c_int = -22;

fn hex(w: &[u64; 8]) -> String {
    w.iter().map(|x| format!("{x:#018x}")).collect::<Vec<_>>().join(" ")
}

/// Runs one case on both sides. `Ok(None)`: the same; `Ok(Some(id))`: a
/// listed deviation, checked; `Err`: a difference.
pub fn run_ctrl(v: &mut VendorCqp, case: &CtrlCase) -> Result<Option<&'static str>, CtrlDiff> {
    let (rc, built) = v.run(case);
    let drv = driver(case);
    let kind = case.cmd.kind();
    let diff = |what: String| Err(CtrlDiff { what });
    if let Some((slot, _)) = built {
        if rc != 0 {
            return diff(format!("vendor returned {rc} but wrote slot {slot}"));
        }
        if slot as u64 != v.built % v.size as u64 {
            return diff(format!("vendor wrote slot {slot}, expected {}", v.built % v.size as u64));
        }
        if slot == 0 {
            stats::WRAPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let pol = (v.built / v.size as u64).is_multiple_of(2);
    if built.is_some() {
        v.built += 1;
    }
    match (rc, built, drv) {
        (0, Some((_, vw)), Some(Ok(dw))) => {
            if (vw[3] & WQEVALID != 0) != pol {
                return diff(format!(
                    "vendor valid bit {} where the polarity is {pol}",
                    vw[3] >> 63
                ));
            }
            let mut vn = vw;
            vn[3] &= !WQEVALID;
            if vn == dw {
                stats::POSTED[kind].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Ok(None);
            }
            if narrow_to_6_1(&case.cmd, dw) == vn {
                return Ok(Some("cqp_field_wider_than_linux_6_1"));
            }
            // Linux 6.1 user.h IRDMA_COMMIT_FPM_BUF_SIZE is 176; the spec
            // and the published vectors (Intel's irdma) say 192
            if let Cmd::Misc(_, 4) = case.cmd
                && (dw[3] & !0xffff_ffff) | 176 == vn[3]
                && dw[..3] == vn[..3]
                && dw[4..] == vn[4..]
            {
                return Ok(Some("commit_fpm_bufsize_192"));
            }
            diff(format!("WQE words differ:\n  vendor {}\n  driver {}", hex(&vn), hex(&dw)))
        }
        (EINVAL, None, Some(Err(_)) | None) => {
            stats::REFUSED[kind].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(None)
        }
        (0, Some((_, vw)), Some(Err(_)) | None) => classify(case, &drv, vw),
        (rc, _, drv) => diff(format!("vendor returned {rc}, driver {drv:?}")),
    }
}

/// The vendor built a WQE for an input the driver refuses: which listed
/// deviation, checked against the vendor's bytes.
fn classify(
    case: &CtrlCase,
    drv: &Option<Drv>,
    vw: [u64; 8],
) -> Result<Option<&'static str>, CtrlDiff> {
    let mut vn = vw;
    vn[3] &= !WQEVALID;
    let (cc, forced, ors) = cut_case(case);
    let cut_drv = driver_pbl(&cc, forced);
    let mut expected = None;
    if let Some(Ok(dw)) = cut_drv {
        let mut e = narrow_to_6_1(&case.cmd, dw);
        for &(i, raw, _) in &ors {
            e[i] |= raw;
        }
        expected = Some(e);
    }
    if expected != Some(vn) {
        return Err(CtrlDiff {
            what: format!(
                "vendor accepted, driver refused ({drv:?}), and the vendor's bytes are not the \
                 driver's for the input cut to the field widths ({cut_drv:?}):\n  vendor {}",
                hex(&vn)
            ),
        });
    }
    let spilled = ors.iter().any(|&(_, raw, bits)| raw >> bits != 0);
    if spilled {
        return Ok(Some("cqp_value_written_unmasked"));
    }
    // max_ceqs is a limit, not an input (a different command stays
    // different whatever its max_ceqs)
    let (mut cmd, mut cut_cmd) = (case.cmd, cc.cmd);
    if let (Some(m), Some(c)) = (cmd.max_ceqs_mut(), cut_cmd.max_ceqs_mut()) {
        *m = *c;
    }
    let same_input = cc == (CtrlCase { cmd, ..cc });
    if !same_input {
        return Ok(Some("cqp_field_truncated_by_vendor"));
    }
    // nothing was cut: the refusal is an id check the vendor does not make
    // (qp_id only on create; no PBLE index check in alloc_stag or
    // cq_create; no CQ or CEQ id check in cq_destroy)
    let id_only = match case.cmd {
        Cmd::ModifyQp(k) | Cmd::DestroyQp(k) => k.qp_id >= case.qp_count,
        Cmd::AllocStag(k) => k.chunk_size != 0 && k.first_pm_pbl_idx >= case.pble_count as u64,
        Cmd::CreateCq(k) => k.virtual_map != 0 && k.first_pm_pbl_idx >= case.pble_count,
        Cmd::DestroyCq(k) => {
            k.cq_id >= case.cq_count || (k.ceq_id_valid != 0 && k.ceq_id >= k.max_ceqs)
        }
        _ => false,
    };
    if id_only {
        return Ok(Some("cqp_id_checked_only_on_create"));
    }
    Err(CtrlDiff {
        what: format!("driver refused ({drv:?}) an input the vendor encodes identically"),
    })
}

/// Prints a case for a difference report.
pub fn describe(c: &CtrlCase) -> String {
    format!("ctrl case: {c:?}")
}
