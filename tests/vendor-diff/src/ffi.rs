//! The C side: `shim/glue.c` over the vendor's `uk.c`. Layouts mirror the
//! glue's structs field for field.

use core::ffi::c_int;

/// `struct ib_sge` (the shim gives it the kernel's layout).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbSge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `enum vd_api`: which uk entry point a post uses.
pub mod api {
    pub const RDMA_WRITE: u32 = 0;
    pub const INLINE_RDMA_WRITE: u32 = 1;
    pub const RDMA_READ: u32 = 2;
    pub const SEND: u32 = 3;
    pub const INLINE_SEND: u32 = 4;
    pub const LOCAL_INV: u32 = 5;
    pub const NOP: u32 = 6;
}

/// `struct vd_sq_post`: `irdma_post_sq_info` flattened.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VdSqPost {
    pub wr_id: u64,
    pub remote_addr: u64,
    pub sges: *const IbSge,
    pub num_sges: u32,
    pub api: u32,
    pub op_type: u32,
    pub rkey: u32,
    pub imm_data: u32,
    pub stag_to_inv: u32,
    pub qkey: u32,
    pub dest_qp: u32,
    pub ah_id: u32,
    pub target_stag: u32,
    pub signaled: u8,
    pub read_fence: u8,
    pub local_fence: u8,
    pub imm_data_valid: u8,
    pub report_rtt: u8,
    pub udp_hdr: u8,
    pub l4len: u8,
    pub read_inv_stag: u8,
    pub post_sq: u8,
    pub pad: [u8; 7],
}

/// `struct vd_qp_state`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VdQpState {
    pub sq_head: u32,
    pub sq_tail: u32,
    pub sq_size: u32,
    pub rq_head: u32,
    pub rq_tail: u32,
    pub rq_size: u32,
    pub swqe_polarity: u8,
    pub rwqe_polarity: u8,
    pub destroy_pending: u8,
    pub pad: u8,
}

/// Opaque `struct vd_qp`.
#[repr(C)]
pub struct VdQp {
    _p: [u8; 0],
}

unsafe extern "C" {
    pub fn vd_bar_take(addrs: *mut u64, vals: *mut u32, cap: u32) -> u32;
    pub fn vd_qp_new(
        sq: *mut u64,
        sq_quanta: u32,
        rq: *mut u64,
        rq_size: u32,
        rq_shift: u8,
        max_sq_frags: u32,
        max_rq_frags: u32,
        max_inline: u32,
        qp_id: u32,
        qp_type: u8,
        ret: *mut c_int,
    ) -> *mut VdQp;
    pub fn vd_qp_free(q: *mut VdQp);
    pub fn vd_qp_db_addr(q: *mut VdQp) -> u64;
    pub fn vd_qp_set_hw_tail(q: *mut VdQp, hw_tail: u32);
    pub fn vd_qp_initial_head(q: *mut VdQp) -> u32;
    pub fn vd_qp_state(q: *mut VdQp, s: *mut VdQpState);
    pub fn vd_qp_consume_all(q: *mut VdQp);
    pub fn vd_qp_post_wr(q: *mut VdQp);
    pub fn vd_get_wqe_shift(sge: u32, inline_data: u32, shift: *mut u8);
    pub fn vd_qp_set_push(q: *mut VdQp, mode: u8, dropped: u8);
    pub fn vd_qp_push(q: *mut VdQp) -> u8;
    pub fn vd_qp_trk(q: *mut VdQp, idx: u32, wrid: *mut u64, wr_len: *mut u32, quanta: *mut u16);
    pub fn vd_qp_rq_wrid(q: *mut VdQp, idx: u32) -> u64;
    pub fn vd_sq_post(q: *mut VdQp, p: *const VdSqPost, wqe_idx: *mut u32) -> c_int;
    pub fn vd_rq_post(
        q: *mut VdQp,
        wr_id: u64,
        sges: *const IbSge,
        num: u32,
        wqe_idx: *mut u32,
    ) -> c_int;
    pub fn irdma_fragcnt_to_quanta_sq(frag_cnt: u32, quanta: *mut u16) -> c_int;
    pub fn irdma_fragcnt_to_wqesize_rq(frag_cnt: u32, wqe_size: *mut u16) -> c_int;
}

/// `struct vd_poll`: `irdma_cq_poll_info` flattened.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VdPoll {
    pub wr_id: u64,
    pub qp_handle: u64,
    pub bytes_xfered: u32,
    pub qp_id: u32,
    pub ud_src_qpn: u32,
    pub imm_data: u32,
    pub inv_stag: u32,
    pub comp_status: u32,
    pub major_err: u16,
    pub minor_err: u16,
    pub op_type: u8,
    pub q_type: u8,
    pub stag_invalid_set: u8,
    pub error: u8,
    pub solicited_event: u8,
    pub imm_valid: u8,
    pub push_dropped: u8,
    pub ipv4: u8,
    pub ud_vlan_valid: u8,
    pub ud_smac_valid: u8,
    pub ud_vlan: u16,
    pub tcp_seq_num_rtt: u32,
    pub ud_smac: [u8; 6],
    pub pad: [u8; 6],
}

/// Opaque `struct vd_cq`.
#[repr(C)]
pub struct VdCq {
    _p: [u8; 0],
}

unsafe extern "C" {
    pub fn vd_qp_ctx(q: *mut VdQp) -> u64;
    pub fn vd_cq_new(ring: *mut u64, size: u32, cq_id: u32) -> *mut VdCq;
    pub fn vd_cq_free(c: *mut VdCq);
    pub fn vd_cq_shadow(c: *mut VdCq, i: u32) -> u64;
    pub fn vd_cq_head(c: *mut VdCq) -> u32;
    pub fn vd_cq_polarity(c: *mut VdCq) -> u8;
    pub fn vd_cq_set_position(c: *mut VdCq, head: u32, pol: u8);
    pub fn vd_status_unknown() -> c_int;
    pub fn vd_cq_poll(c: *mut VdCq, o: *mut VdPoll) -> c_int;
    pub fn vd_cq_poll_fill(c: *mut VdCq, o: *mut VdPoll, fill: u8) -> c_int;
}
