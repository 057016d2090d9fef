//! The RoCE QP host context: the vendor's irdma_sc_qp_setctx_roce (ctrl.c,
//! through `shim/ctrl_glue.c`) against the driver's
//! `irdma::cqp::ctx::QpRoceCtx::encode`, all 32 words.
//!
//! The vendor's function returns nothing: it FIELD_PREPs every value, so a
//! too-wide one is cut. Where the driver refuses, the vendor's context must
//! be exactly the driver's for the input cut to the vendor's field widths
//! (listed deviation `cqp_field_truncated_by_vendor`); where Linux 6.1's
//! field is narrower than the spec's (ERR_RQ_IDX 45:32 against 46:32,
//! TXCQNUM 18:0 against 24:0, RXCQNUM 50:32 against 56:32), the driver's
//! context cut to 6.1's widths must equal the vendor's
//! (`cqp_field_wider_than_linux_6_1`).

use irdma::cqp::ctx::QpRoceCtx;

use crate::ctrl::{CtrlDiff, VendorCqp};
use crate::rng::Rng;

/// `struct vd_qpc` (ctrl_glue.c), field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VdQpc {
    pub sq_pa: u64,
    pub rq_pa: u64,
    pub qp_compl_ctx: u64,
    pub push_idx: u32,
    pub send_cq_num: u32,
    pub rcv_cq_num: u32,
    pub rem_endpoint_idx: u32,
    pub qkey: u32,
    pub dest_qp: u32,
    pub pd_id: u32,
    pub dest_ip_addr: [u32; 4],
    pub local_ipaddr: [u32; 4],
    pub snd_mss: u32,
    pub flow_label: u32,
    pub psn_nxt: u32,
    pub lsn: u32,
    pub epsn: u32,
    pub psn_max: u32,
    pub psn_una: u32,
    pub cwnd: u32,
    pub qs_handle: u16,
    pub p_key: u16,
    pub err_rq_idx: u16,
    pub ord_size: u16,
    pub ird_size: u16,
    pub t_high: u16,
    pub t_low: u16,
    pub src_port: u16,
    pub dst_port: u16,
    pub vlan_tag: u16,
    pub arp_idx: u16,
    pub rq_wqe_size: u8,
    pub hw_sq_size: u8,
    pub hw_rq_size: u8,
    pub sq_tph_val: u8,
    pub rq_tph_val: u8,
    pub stats_idx: u8,
    pub roce_tver: u8,
    pub ack_credits: u8,
    pub err_rq_idx_valid: u8,
    pub rtomin: u8,
    pub ttl: u8,
    pub tos: u8,
    pub rexmit_thresh: u8,
    pub rnr_nak_thresh: u8,
    pub mac_addr: [u8; 6],
    pub sq_tph_en: u8,
    pub rq_tph_en: u8,
    pub rcv_tph_en: u8,
    pub xmit_tph_en: u8,
    pub stats_idx_valid: u8,
    pub is_qp1: u8,
    pub udprivcq_en: u8,
    pub dcqcn_en: u8,
    pub rcv_no_icrc: u8,
    pub wr_rdresp_en: u8,
    pub fast_reg_en: u8,
    pub priv_mode_en: u8,
    pub rd_en: u8,
    pub timely_en: u8,
    pub dctcp_en: u8,
    pub fw_cc_enable: u8,
    pub ipv4: u8,
    pub insert_vlan_tag: u8,
    pub pad: [u8; 3],
}

unsafe extern "C" {
    fn vd_qp_setctx_roce(c: *mut core::ffi::c_void, k: *const VdQpc, out: *mut u64);
}

/// defs.h IRDMA_INVALID_PUSH_PAGE_INDEX: no push page.
const NO_PUSH: u32 = 0xffff_ffff;

/// A random context: in range unless `wide`, when each field has a 1 in 8
/// chance of a value up to its C type's width.
pub fn gen_qpc(r: &mut Rng) -> VdQpc {
    let wide = r.chance(1, 3);
    let v = |r: &mut Rng, bits: u32, c_bits: u32| -> u64 {
        if wide && c_bits > bits && r.chance(1, 8) { r.field(c_bits) } else { r.field(bits) }
    };
    let b = |r: &mut Rng| r.chance(1, 2) as u8;
    let ips = |r: &mut Rng| [0; 4].map(|_: u32| r.next_u64() as u32);
    let dest_ip_addr = ips(r);
    let local_ipaddr = ips(r);
    VdQpc {
        sq_pa: r.next_u64(),
        rq_pa: r.next_u64(),
        qp_compl_ctx: r.next_u64(),
        push_idx: if r.chance(1, 2) { NO_PUSH } else { v(r, 10, 32) as u32 },
        send_cq_num: v(r, 19, 32) as u32,
        rcv_cq_num: v(r, 19, 32) as u32,
        rem_endpoint_idx: v(r, 17, 32) as u32,
        qkey: r.next_u64() as u32,
        dest_qp: v(r, 24, 32) as u32,
        pd_id: v(r, 18, 32) as u32,
        dest_ip_addr,
        local_ipaddr,
        snd_mss: v(r, 14, 32) as u32,
        flow_label: v(r, 20, 32) as u32,
        psn_nxt: v(r, 24, 32) as u32,
        lsn: v(r, 24, 32) as u32,
        epsn: v(r, 24, 32) as u32,
        psn_max: v(r, 24, 32) as u32,
        psn_una: v(r, 24, 32) as u32,
        cwnd: v(r, 24, 32) as u32,
        qs_handle: v(r, 10, 16) as u16,
        p_key: r.field(16) as u16,
        err_rq_idx: v(r, 14, 16) as u16,
        ord_size: v(r, 8, 16) as u16,
        ird_size: r.pick(&[0, 1, 2, 4, 8, 16, 32, 64, 65, 127, 128, 129, 255, 256, 0xffff]),
        t_high: v(r, 12, 16) as u16,
        t_low: v(r, 8, 16) as u16,
        src_port: r.field(16) as u16,
        dst_port: r.field(16) as u16,
        vlan_tag: r.field(16) as u16,
        arp_idx: r.field(16) as u16,
        rq_wqe_size: v(r, 2, 8) as u8,
        hw_sq_size: v(r, 4, 8) as u8,
        hw_rq_size: v(r, 4, 8) as u8,
        sq_tph_val: r.field(8) as u8,
        rq_tph_val: r.field(8) as u8,
        stats_idx: v(r, 7, 8) as u8,
        roce_tver: v(r, 4, 8) as u8,
        ack_credits: v(r, 5, 8) as u8,
        err_rq_idx_valid: b(r),
        rtomin: v(r, 7, 8) as u8,
        ttl: r.field(8) as u8,
        tos: r.field(8) as u8,
        rexmit_thresh: v(r, 6, 8) as u8,
        rnr_nak_thresh: v(r, 3, 8) as u8,
        mac_addr: [0; 6].map(|_: u8| r.field(8) as u8),
        sq_tph_en: b(r),
        rq_tph_en: b(r),
        rcv_tph_en: b(r),
        xmit_tph_en: b(r),
        stats_idx_valid: b(r),
        is_qp1: b(r),
        udprivcq_en: b(r),
        dcqcn_en: b(r),
        rcv_no_icrc: b(r),
        wr_rdresp_en: b(r),
        fast_reg_en: b(r),
        priv_mode_en: b(r),
        rd_en: b(r),
        timely_en: b(r),
        dctcp_en: b(r),
        fw_cc_enable: b(r),
        ipv4: b(r),
        insert_vlan_tag: b(r),
        pad: [0; 3],
    }
}

/// The driver's context input; `None` when a value does not fit the
/// driver's input type (push index, ORD, TIMELY low threshold).
fn driver_ctx(k: &VdQpc) -> Option<QpRoceCtx> {
    Some(from_glue!(k, QpRoceCtx {
        push_idx: match k.push_idx {
            NO_PUSH => None,
            p => Some(u16::try_from(p).ok()?),
        },
        use_stats_instance: k.stats_idx_valid != 0,
        ord_size: u8::try_from(k.ord_size).ok()?,
        t_low: u8::try_from(k.t_low).ok()?,
    } flag [rcv_tph_en xmit_tph_en rq_tph_en sq_tph_en dctcp_en dcqcn_en err_rq_idx_valid is_qp1
            wr_rdresp_en rd_en fast_reg_en rcv_no_icrc fw_cc_enable udprivcq_en priv_mode_en
            timely_en ipv4 insert_vlan_tag]
      copy [sq_pa rq_pa hw_sq_size hw_rq_size rq_wqe_size sq_tph_val rq_tph_val qs_handle
            send_cq_num rcv_cq_num stats_idx qp_compl_ctx rem_endpoint_idx pd_id err_rq_idx
            roce_tver p_key ack_credits qkey dest_qp rtomin mac_addr ird_size t_high ttl tos
            src_port dst_port dest_ip_addr local_ipaddr snd_mss vlan_tag arp_idx flow_label
            psn_nxt lsn epsn psn_max psn_una cwnd rexmit_thresh rnr_nak_thresh]))
}

fn encode(k: &VdQpc) -> Option<Result<[u64; 32], irdma::cqp::EncodeError>> {
    let c = driver_ctx(k)?;
    let mut out = [0u64; 32];
    Some(c.encode(&mut out).map(|()| out))
}

fn cut<T: Into<u64> + TryFrom<u64>>(v: T, bits: u32) -> T {
    let x: u64 = v.into() & ((1u64 << bits) - 1);
    T::try_from(x).ok().expect("a cut value fits its own type")
}

/// The input with every value cut to the vendor's field width (defs.h
/// IRDMAQPC_* masks: PPIDX 41:32, PDIDXHI 21:20 + PDIDX 63:48, SNDMSS
/// 29:16, FLOWLABEL 19:0, DESTQP / PSNs / LSN / CWNDROCE 24 bits, ERR_RQ_IDX
/// 45:32, TXCQNUM / RXCQNUM 19 bits, REMENDPOINTIDX 16:0, QSHANDLE 25:16,
/// ORDSIZE 7:0, THIGH 63:52, TLOW 39:32, RQWQESIZE 9:8, SQSIZE / RQSIZE 4
/// bits, STAT_INDEX 6:0, ROCE_TVER 63:60, ACKCREDITS 24:20, RTOMIN 63:57,
/// REXMIT_THRESH 53:48, RNRNAK_THRESH 56:54).
fn cut_qpc(k: &VdQpc) -> VdQpc {
    let mut k = *k;
    if k.push_idx != NO_PUSH {
        k.push_idx = cut(k.push_idx, 10);
    }
    k.pd_id = cut(k.pd_id, 18);
    k.snd_mss = cut(k.snd_mss, 14);
    k.flow_label = cut(k.flow_label, 20);
    for x in [&mut k.dest_qp, &mut k.psn_nxt, &mut k.lsn, &mut k.epsn, &mut k.psn_max] {
        *x = cut(*x, 24);
    }
    k.psn_una = cut(k.psn_una, 24);
    k.cwnd = cut(k.cwnd, 24);
    k.err_rq_idx = cut(k.err_rq_idx, 14);
    k.send_cq_num = cut(k.send_cq_num, 19);
    k.rcv_cq_num = cut(k.rcv_cq_num, 19);
    k.rem_endpoint_idx = cut(k.rem_endpoint_idx, 17);
    k.qs_handle = cut(k.qs_handle, 10);
    k.ord_size = cut(k.ord_size, 8);
    k.t_high = cut(k.t_high, 12);
    k.t_low = cut(k.t_low, 8);
    k.rq_wqe_size = cut(k.rq_wqe_size, 2);
    k.hw_sq_size = cut(k.hw_sq_size, 4);
    k.hw_rq_size = cut(k.hw_rq_size, 4);
    k.stats_idx = cut(k.stats_idx, 7);
    k.roce_tver = cut(k.roce_tver, 4);
    k.ack_credits = cut(k.ack_credits, 5);
    k.rtomin = cut(k.rtomin, 7);
    k.rexmit_thresh = cut(k.rexmit_thresh, 6);
    k.rnr_nak_thresh = cut(k.rnr_nak_thresh, 3);
    k
}

/// The driver's context with the fields the spec makes wider than Linux
/// 6.1 cut to 6.1's widths: ERR_RQ_IDX (@128, 6.1 45:32), TXCQNUM and
/// RXCQNUM (@136, 6.1 18:0 and 50:32).
fn narrow_to_6_1(mut w: [u64; 32]) -> [u64; 32] {
    w[16] &= !(1u64 << 46);
    w[17] &= !(0x3fu64 << 19 | 0x3fu64 << 51);
    w
}

fn hex(w: &[u64; 32]) -> String {
    w.iter().map(|x| format!("{x:x}")).collect::<Vec<_>>().join(" ")
}

/// Linux 6.1's TOS (ctrl.c irdma_sc_qp_setctx_roce): with DCQCN or DCTCP
/// the ECN field is set to 10b only when it is 00b; the Intel out-of-tree
/// irdma the published vectors come from (and the driver) always force it.
fn tos_6_1(k: &VdQpc) -> u8 {
    if (k.dcqcn_en != 0 || k.dctcp_en != 0) && k.tos & 3 == 0 { k.tos | 2 } else { k.tos }
}

/// The driver's context with Linux 6.1's TOS in @24 [31:24].
fn with_tos_6_1(k: &VdQpc, mut w: [u64; 32]) -> [u64; 32] {
    w[3] = (w[3] & !(0xffu64 << 24)) | (tos_6_1(k) as u64) << 24;
    w
}

/// Which listed deviation turns the driver's context `d` into the
/// vendor's `v`, if any: the 6.1 widths, the 6.1 TOS rule, or both (the
/// TOS one is reported).
fn explain(k: &VdQpc, d: [u64; 32], v: &[u64; 32]) -> Option<&'static str> {
    if narrow_to_6_1(d) == *v {
        Some("cqp_field_wider_than_linux_6_1")
    } else if narrow_to_6_1(with_tos_6_1(k, d)) == *v {
        Some("qpc_ecn_always_forced")
    } else {
        None
    }
}

/// Contexts the two wrote identically.
pub static EQUAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Runs one context; `Ok(None)` equal, `Ok(Some(id))` a listed deviation.
pub fn run_qpc(cqp: &VendorCqp, k: &VdQpc) -> Result<Option<&'static str>, CtrlDiff> {
    let mut v = [0u64; 32];
    // SAFETY: `cqp` owns a live vendor CQP (freed only on drop); `k` and `v`
    // outlive the call and `v` holds the 256 bytes (IRDMA_QP_CTX_SIZE) the
    // vendor writes.
    unsafe { vd_qp_setctx_roce(cqp.raw(), k, v.as_mut_ptr()) };
    match encode(k) {
        Some(Ok(d)) if d == v => {
            EQUAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(None)
        }
        Some(Ok(d)) => explain(k, d, &v).map(Some).ok_or_else(|| CtrlDiff {
            what: format!("QP context differs:\n  vendor {}\n  driver {}", hex(&v), hex(&d)),
        }),
        refused => match encode(&cut_qpc(k)) {
            Some(Ok(d)) if explain(k, d, &v).is_some() || d == v => {
                Ok(Some("cqp_field_truncated_by_vendor"))
            }
            other => Err(CtrlDiff {
                what: format!(
                    "driver refused ({refused:?}) and the vendor's context is not the driver's \
                     for the input cut to the field widths ({other:?}):\n  vendor {}",
                    hex(&v)
                ),
            }),
        },
    }
}
