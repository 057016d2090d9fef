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
//! Commands covered: CREATE_QP, MODIFY_QP, DESTROY_QP (irdma_sc_qp_create /
//! _modify / _destroy), ALLOC_STAG, DEALLOC_STAG (irdma_sc_alloc_stag /
//! irdma_sc_dealloc_stag).

use core::ffi::c_int;

use irdma::cqp::EncodeError;
use irdma::cqp::cmd::{
    AllocStag, CqpCommand, CreateQp, DeallocStag, DestroyQp, Env, Limits, ModifyQp, Pbl,
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
}

/// One control-path case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmd {
    CreateQp(VdQpCmd),
    ModifyQp(VdQpCmd),
    DestroyQp(VdQpCmd),
    AllocStag(VdStagCmd),
    DeallocStag(VdStagCmd),
}

/// A command and the committed HMC counts it is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtrlCase {
    pub cmd: Cmd,
    pub qp_count: u32,
    pub pble_count: u32,
}

/// Commands per kind compared equal / refused by both.
pub mod stats {
    use std::sync::atomic::{AtomicU64, Ordering};

    pub static POSTED: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];
    pub static REFUSED: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];
    pub static WRAPS: AtomicU64 = AtomicU64::new(0);
    const NAMES: [&str; 5] = ["CREATE_QP", "MODIFY_QP", "DESTROY_QP", "ALLOC_STAG", "DEALLOC_STAG"];

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
    fn kind(&self) -> usize {
        match self {
            Cmd::CreateQp(_) => 0,
            Cmd::ModifyQp(_) => 1,
            Cmd::DestroyQp(_) => 2,
            Cmd::AllocStag(_) => 3,
            Cmd::DeallocStag(_) => 4,
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

/// A random case.
pub fn gen_ctrl_case(r: &mut Rng) -> CtrlCase {
    let cmd = match r.below(5) {
        0 => Cmd::CreateQp(gen_qp(r)),
        1 => Cmd::ModifyQp(gen_qp(r)),
        2 => Cmd::DestroyQp(gen_qp(r)),
        3 => Cmd::AllocStag(gen_stag(r)),
        _ => Cmd::DeallocStag(gen_stag(r)),
    };
    let count = |r: &mut Rng| match r.below(4) {
        0 => r.u32_edge(),
        _ => r.range(1, 1 << 19) as u32,
    };
    CtrlCase { cmd, qp_count: count(r), pble_count: count(r) }
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
    let mut env = Env::new(Limits {
        qp_count: c.qp_count,
        cq_count: u32::MAX,
        pble_count: c.pble_count,
        ceq_count: u32::MAX,
    });
    let mut w = [0u64; 8];
    let r = match c.cmd {
        Cmd::CreateQp(k) => CreateQp {
            qp_id: k.qp_id,
            qp_type: k.qp_type,
            virtual_map: k.virtual_map != 0,
            host_ctx_pa: k.ctx_pa,
            shadow_area_pa: k.shadow_pa,
            ord_valid: k.ord_valid != 0,
            tcp_ctx_valid: k.tcp_ctx_valid != 0,
            cq_num_valid: k.cq_num_valid != 0,
            arp_cache_idx_valid: k.arp_cache_idx_valid != 0,
            mac_valid: k.mac_valid != 0,
            force_loopback: k.force_lpb != 0,
            next_state: k.next_state,
        }
        .encode(&mut w, &mut env),
        Cmd::ModifyQp(k) => ModifyQp {
            qp_id: k.qp_id,
            qp_type: k.qp_type,
            virtual_map: k.virtual_map != 0,
            host_ctx_pa: k.ctx_pa,
            shadow_area_pa: k.shadow_pa,
            next_state: k.next_state,
            ord_valid: k.ord_valid != 0,
            tcp_ctx_valid: k.tcp_ctx_valid != 0,
            cached_var_valid: k.cached_var_valid != 0,
            cq_num_valid: k.cq_num_valid != 0,
            arp_cache_idx_valid: k.arp_cache_idx_valid != 0,
            mac_valid: k.mac_valid != 0,
            mss_change: k.mss_change != 0,
            remove_hash_idx: k.remove_hash_idx != 0,
            reset_tcp_conn: k.reset_tcp_conn != 0,
            dont_send_fin: k.dont_send_fin != 0,
            dont_send_term: k.dont_send_term != 0,
            force_loopback: k.force_lpb != 0,
            new_mss: k.new_mss,
            termlen: k.termlen,
        }
        .encode(&mut w, &mut env),
        Cmd::DestroyQp(k) => DestroyQp {
            qp_id: k.qp_id,
            qp_type: k.qp_type,
            host_ctx_pa: k.ctx_pa,
            shadow_area_pa: k.shadow_pa,
            ignore_mw_bnd: k.ignore_mw_bnd != 0,
            remove_hash_idx: k.remove_hash_idx != 0,
        }
        .encode(&mut w, &mut env),
        Cmd::AllocStag(k) => {
            let pbl = match k.chunk_size {
                0 if !force_pbl => None,
                n => Some(Pbl {
                    level: u8::try_from(n).ok()?,
                    first_index: u32::try_from(k.first_pm_pbl_idx).ok()?,
                }),
            };
            AllocStag {
                stag_idx: k.stag_idx,
                pd_id: k.pd_id,
                total_len: k.total_len,
                page_size: page(k.page_size)?,
                access_rights: u8::try_from(k.access_rights).ok()?,
                remote_access: k.remote_access != 0,
                use_hmc_fn_index: k.use_hmc_fcn_index != 0,
                hmc_fn_index: k.hmc_fcn_index as u16,
                placement_type: 0,
                pbl,
                all_memory: k.all_memory != 0,
            }
            .encode(&mut w, &mut env)
        }
        Cmd::DeallocStag(k) => {
            DeallocStag { stag_idx: k.stag_idx, pd_id: k.pd_id, mr: k.mr != 0, skip_flush: false }
                .encode(&mut w, &mut env)
        }
    };
    Some(r.map(|()| w))
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
/// tests it before cutting, so it still writes the first PBLE index).
fn cut_case(c: &CtrlCase) -> (CtrlCase, bool) {
    let mut c = *c;
    let mut forced = false;
    c.qp_count = u32::MAX;
    c.pble_count = u32::MAX;
    match &mut c.cmd {
        Cmd::CreateQp(k) | Cmd::ModifyQp(k) | Cmd::DestroyQp(k) => {
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
        Cmd::AllocStag(k) | Cmd::DeallocStag(k) => {
            let len = cut(k.total_len, 46);
            if len == 0 && k.total_len != 0 {
                k.all_memory = 1;
            }
            k.total_len = len;
            k.stag_idx = cut(k.stag_idx as u64, 24) as u32;
            // the vendor tests chunk_size before cutting it: a non-zero size
            // that cuts to 0 still writes the first PBLE index
            forced = k.chunk_size != 0 && cut(k.chunk_size as u64, 2) == 0;
            k.chunk_size = cut(k.chunk_size as u64, 2) as u32;
            k.first_pm_pbl_idx = cut(k.first_pm_pbl_idx, 28);
            k.access_rights = cut(k.access_rights as u64, 5) as u16;
            k.hmc_fcn_index = cut(k.hmc_fcn_index as u64, 6) as u8;
            k.pd_id = cut(k.pd_id as u64, 18) as u32;
            if page(k.page_size).is_none() {
                k.page_size = 0x1000;
            }
        }
    }
    (c, forced)
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
    fn run(&mut self, case: &CtrlCase) -> (c_int, Option<(u32, [u64; 8])>) {
        let c = self.c;
        // SAFETY: `c` is the live CQP from vd_cqp_new; every command struct
        // is a repr(C) copy of the glue's, passed by pointer for the call.
        unsafe {
            vd_cqp_set_counts(c, case.qp_count, u32::MAX, case.pble_count);
            let head = vd_cqp_head(c);
            let rc = match &case.cmd {
                Cmd::CreateQp(k) => vd_qp_create_cmd(c, k),
                Cmd::ModifyQp(k) => vd_qp_modify_cmd(c, k),
                Cmd::DestroyQp(k) => vd_qp_destroy_cmd(c, k),
                Cmd::AllocStag(k) => vd_alloc_stag_cmd(c, k),
                Cmd::DeallocStag(k) => vd_dealloc_stag_cmd(c, k),
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

impl Drop for VendorCqp {
    fn drop(&mut self) {
        // SAFETY: created by vd_cqp_new, freed once.
        unsafe { vd_cqp_free(self.c) }
    }
}

/// Deviations this module classifies (listed in deviations.toml).
pub const KNOWN: &[&str] = &[
    "cqp_field_truncated_by_vendor",
    "cqp_qp_id_ored_unmasked",
    "cqp_id_checked_only_on_create",
    "cqp_stag_hmcfnidx_6_bits",
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
            // the vendor's 6-bit HMCFNIDX (Linux 6.1 defs.h) against the
            // spec's 16 bits: the only listed way equal inputs encode apart
            if let Cmd::AllocStag(k) = case.cmd
                && k.hmc_fcn_index >= 64
            {
                let mut d = dw;
                d[5] = cut(d[5], 6);
                if d == vn {
                    return Ok(Some("cqp_stag_hmcfnidx_6_bits"));
                }
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
    // ctrl.c irdma_sc_qp_create/_modify/_destroy OR qp_id into the header
    // without a mask (QPID is 23:0): bits above spill into the opcode.
    let spill = match case.cmd {
        Cmd::CreateQp(k) | Cmd::ModifyQp(k) | Cmd::DestroyQp(k) if k.qp_id >= 1 << 24 => {
            k.qp_id as u64
        }
        _ => 0,
    };
    // The vendor checks qp_id against the committed count only on create.
    // (And alloc_stag never checks first_pm_pbl_idx against the PBLE count.)
    let (cc, forced) = cut_case(case);
    let cut_drv = driver_pbl(&cc, forced);
    let id_only = match case.cmd {
        Cmd::ModifyQp(k) | Cmd::DestroyQp(k) => k.qp_id >= case.qp_count,
        Cmd::AllocStag(k) => k.chunk_size != 0 && k.first_pm_pbl_idx >= case.pble_count as u64,
        _ => false,
    };
    let mut hmc = false;
    let matches = match cut_drv {
        Some(Ok(mut dw)) => {
            dw[3] |= spill;
            if let Cmd::AllocStag(k) = case.cmd
                && k.hmc_fcn_index >= 64
            {
                dw[5] = cut(dw[5], 6);
                hmc = true;
            }
            dw == vn
        }
        _ => false,
    };
    if !matches {
        return Err(CtrlDiff {
            what: format!(
                "vendor accepted, driver refused ({drv:?}), and the vendor's bytes are not the \
                 driver's for the input cut to the field widths ({cut_drv:?}):\n  vendor {}",
                hex(&vn)
            ),
        });
    }
    if spill != 0 {
        return Ok(Some("cqp_qp_id_ored_unmasked"));
    }
    if cc == (CtrlCase { qp_count: cc.qp_count, pble_count: cc.pble_count, ..*case }) && !hmc {
        // nothing was cut: the refusal is an id check alone
        if id_only {
            return Ok(Some("cqp_id_checked_only_on_create"));
        }
        return Err(CtrlDiff {
            what: format!("driver refused ({drv:?}) an input the vendor encodes identically"),
        });
    }
    Ok(Some("cqp_field_truncated_by_vendor"))
}

/// Prints a case for a difference report.
pub fn describe(c: &CtrlCase) -> String {
    format!("  ctrl case: {c:?}\n")
}
