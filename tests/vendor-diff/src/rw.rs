//! The rw area (issue #30): the vendor's Linux 6.1
//! `drivers/infiniband/core/rw.c` and `mr_pool.c`, compiled unmodified in
//! their own translation unit (`shim/rw/glue.c`, shim headers in
//! `shim/rw/include`, `ib_sg_to_pages` cut verbatim out of `core/verbs.c`
//! by `build_rw.rs`), against the driver's `irdma::rw` (`RwCtx`, `MrPool`,
//! the sizing functions).
//!
//! A case is a session on one QP: a device (transport iWARP or RoCE,
//! `max_sge_rd`, `max_sgl_rd`, `max_send_sge`, `max_fast_reg_page_list_len`,
//! `force_mr`, the local DMA lkey), the QP's `max_send_sge`, an MR pool
//! from `rdma_rw_init_mrs` (its MRs' first key byte and STag indexes
//! drawn), an IOVA offset the fake DMA mapping adds, then a sequence of
//! operations on four context slots: `rdma_rw_ctx_init` over scatter lists
//! of 1..40 entries (offsets, lengths from 0 to several pages, contiguous /
//! page-aligned / unaligned neighbours, `sg_offset` inside and past the
//! list), `rdma_rw_ctx_signature_init`, `rdma_rw_ctx_wrs` and
//! `rdma_rw_ctx_post` with the caller's cqe or a chain WR, and
//! `rdma_rw_ctx_destroy`; DMA-mapping failures are injected. Every session
//! ends by destroying what is live and `rdma_rw_cleanup_mrs`, and checks
//! the sizing functions once (`rdma_rw_mr_factor`, `rdma_rw_max_send_wr`,
//! `rdma_rw_init_qp`).
//!
//! After each operation both sides must agree on the return code, the
//! context type and `nr_ops`, every WR of the chain (opcode, flags, cqe,
//! SGEs, remote address, rkey, invalidate key, the REG_MR's key, access,
//! iova, length and page list), the MRs in use, every MR's key and the
//! DMA mappings still live. `rdma_rw_ctx_init_bvec` is not in Linux 6.1,
//! so the driver's bvec paths have no vendor counterpart here.
//!
//! Where the driver is deliberately stricter (spec data-path §11) the
//! difference is checked to be exactly that and counted as the listed
//! deviation; the session stops comparing there (the two pools may differ
//! from then on).

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::ptr::NonNull;

use irdma_testkit::IdentityHal;

use irdma::rw::{
    CtxType, DeviceAttrs, Direction, FrMr, MrPool, PostSend, RwCtx, RwError, RwQp, RwQpCap,
    SgEntry, fr_page_list_len, rdma_rw_init_qp, rdma_rw_max_send_wr, rdma_rw_mr_factor,
};
use irdma::wr::{SendFlags, SendWr, WrOpcode};

use crate::ffi::IbSge;
use crate::rng::Rng;
use crate::shrink::{Variants, greedy};

/// Deviations this area classifies (each must be in deviations.toml).
pub const KNOWN: &[&str] = &[
    "rw_nothing_after_offset",
    "rw_read_inv_key",
    "rw_mr_fill_by_pages",
    "rw_wrs_twice",
    "rw_sizing_saturates",
    "rw_mr_factor_zero_pages",
    "rw_integrity_qp_refused",
    "rw_multi_wr_offset_u32",
    "rw_zero_length_entry_page",
];

// ---------------------------------------------------------------- C side

#[repr(C)]
struct VdRwDev {
    iwarp: u32,
    max_sge_rd: u32,
    max_sgl_rd: u32,
    max_send_sge: u32,
    max_qp_wr: u32,
    max_fast_reg_page_list_len: u32,
    max_pi_fast_reg_page_list_len: u32,
    local_dma_lkey: u32,
    force_mr: u32,
    max_write_sge: u32,
    max_read_sge: u32,
    key0: u32,
    mr_base: u32,
    iova_off: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct VdRwWr {
    opcode: u32,
    send_flags: u32,
    cqe: u32,
    num_sge: u32,
    sge_start: u32,
    rkey: u32,
    remote_addr: u64,
    invalidate_rkey: u32,
    is_chain: u32,
    reg_key: u32,
    reg_access: u32,
    mr_index: u32,
    mr_npages: u32,
    mr_iova: u64,
    mr_length: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct VdRwSge {
    phys: u64,
    length: u32,
    pad: u32,
}

#[repr(C)]
struct VdRwSess {
    _p: [u8; 0],
}

unsafe extern "C" {
    fn vd_rw_new(d: *const VdRwDev) -> *mut VdRwSess;
    fn vd_rw_free(s: *mut VdRwSess);
    fn vd_rw_init_mrs(
        s: *mut VdRwSess,
        ctxs: u32,
        flags: u32,
        allocs: *mut u32,
        max_sg: *mut u32,
    ) -> c_int;
    fn vd_rw_cleanup(s: *mut VdRwSess) -> u32;
    fn vd_rw_ctx_init(
        s: *mut VdRwSess,
        slot: u32,
        e: *const VdRwSge,
        n: u32,
        off: u32,
        remote: u64,
        rkey: u32,
        dir: c_int,
        fail_map_at: c_int,
    ) -> c_int;
    fn vd_rw_sig_init(
        s: *mut VdRwSess,
        slot: u32,
        e: *const VdRwSge,
        n: u32,
        pe: *const VdRwSge,
        pn: u32,
        remote: u64,
        rkey: u32,
        dir: c_int,
        fail_map_at: c_int,
    ) -> c_int;
    fn vd_rw_ctx_info(s: *mut VdRwSess, slot: u32, ty: *mut u32, nr_ops: *mut u32);
    fn vd_rw_wrs(
        s: *mut VdRwSess,
        slot: u32,
        chain: c_int,
        post: c_int,
        out: *mut VdRwWr,
        wcap: u32,
        sges: *mut IbSge,
        scap: u32,
    ) -> c_int;
    fn vd_rw_mr_pages(s: *mut VdRwSess, index: u32, out: *mut u64, cap: u32) -> u32;
    fn vd_rw_destroy(s: *mut VdRwSess, slot: u32);
    fn vd_rw_state(
        s: *mut VdRwSess,
        mrs_used: *mut c_int,
        maps_live: *mut c_int,
        free_order: *mut u32,
        keys: *mut u32,
        need_inval: *mut u8,
        cap: u32,
        nmrs: *mut u32,
    ) -> u32;
    fn vd_rw_mr_factor(s: *mut VdRwSess, maxpages: u32) -> u32;
    fn vd_rw_max_send_wr(s: *mut VdRwSess, ctxs: u32, flags: u32) -> u32;
    fn vd_rw_init_qp(s: *mut VdRwSess, max_send_wr: u32, ctxs: u32, flags: u32) -> u32;
    fn vd_rw_take_warns() -> std::ffi::c_ulong;
}

/// `VD_MAX_MRS` of the glue.
const MAX_MRS: usize = 64;
/// Context slots (`VD_SLOTS`).
const SLOTS: usize = 4;
/// The caller's cqe / the chain WR's, as wr_ids on the driver's side.
const CALLER: u64 = 0xC0FFEE;
const CHAIN: u64 = 0xC4A1;
const IB_QP_CREATE_INTEGRITY_EN: u32 = 1 << 6;

/// The vendor session (glue-owned).
struct VSess(*mut VdRwSess);

impl VSess {
    /// rdma_rw_ctx_init on `slot` (vd_rw_ctx_init) over `sg` from byte
    /// `offset`, to or from the remote (address, key) `remote`, a READ
    /// where `read`; the mapping failing where `fail_map`. Its return.
    fn ctx_init(
        &self,
        slot: u32,
        sg: &[Ent],
        offset: u32,
        remote: (u64, u32),
        read: bool,
        fail_map: bool,
    ) -> c_int {
        let e = ents(sg);
        let dir = if read { 2 } else { 1 };
        // SAFETY: the session is live; `e` holds `e.len()` entries.
        unsafe {
            vd_rw_ctx_init(
                self.0,
                slot,
                e.as_ptr(),
                e.len() as u32,
                offset,
                remote.0,
                remote.1,
                dir,
                c_int::from(fail_map),
            )
        }
    }
}

impl Drop for VSess {
    fn drop(&mut self) {
        // SAFETY: from vd_rw_new, freed once.
        unsafe { vd_rw_free(self.0) }
    }
}

// ---------------------------------------------------------------- driver Hal

/// The driver's DMA is [`IdentityHal`] with the session's offset: the same
/// mapping as the glue's (bus address = the fake physical address + the
/// offset), counted, with the Nth `share` from an arming failing. The
/// buffers are made-up addresses and are never dereferenced.
type VdHal = IdentityHal;

// ---------------------------------------------------------------- cases

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RwDev {
    pub iwarp: bool,
    pub max_sge_rd: u32,
    pub max_sgl_rd: u32,
    pub max_send_sge: u32,
    pub max_qp_wr: u32,
    pub max_fr: u32,
    pub local_dma_lkey: u32,
    pub force_mr: bool,
    /// The QP's `cap.max_send_sge`.
    pub qp_send_sge: u32,
    pub key0: u8,
    pub mr_base: u32,
    pub iova_off: u64,
    /// `max_rdma_ctxs` of `rdma_rw_init_mrs`.
    pub pool: u32,
}

/// One scatter-list entry: a fake physical address and a length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ent {
    pub phys: u64,
    pub len: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RwOp {
    Init {
        slot: usize,
        sg: Vec<Ent>,
        offset: u32,
        remote: u64,
        rkey: u32,
        read: bool,
        /// Fail the DMA mapping of the table.
        fail_map: bool,
    },
    SigInit {
        slot: usize,
        sg: Vec<Ent>,
        prot: Vec<Ent>,
        remote: u64,
        rkey: u32,
        read: bool,
        /// 0: none; 1: the data table's mapping fails; 2: the protection table's.
        fail_map: u8,
    },
    Wrs {
        slot: usize,
        chain: bool,
        post: bool,
    },
    Destroy {
        slot: usize,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RwCase {
    pub dev: RwDev,
    pub ops: Vec<RwOp>,
    /// Sizing inputs: maxpages, max_rdma_ctxs, max_send_wr, integrity.
    pub sizing: (u32, u32, u32, bool),
}

fn gen_len(rng: &mut Rng) -> u32 {
    match rng.below(80) {
        // past 2 GiB: the multi-WR path's byte count then passes 4 GiB
        79 => rng.range(1 << 31, u64::from(u32::MAX)) as u32,
        n => gen_len_small(rng, n % 12),
    }
}

fn gen_len_small(rng: &mut Rng, k: u64) -> u32 {
    match k {
        0 => 0,
        1 => rng.range(1, 64) as u32,
        2 => 4096,
        3 => 4096 * rng.range(2, 6) as u32,
        4 => 4096 - rng.range(1, 64) as u32,
        5 => 512,
        6 => 8192 + rng.range(1, 100) as u32,
        _ => rng.range(1, 5 * 4096) as u32,
    }
}

fn gen_sg(rng: &mut Rng, max: u64) -> Vec<Ent> {
    let n = match rng.below(6) {
        0 => 1,
        1 | 2 => rng.range(2, 4),
        3 => rng.range(5, 16),
        _ => rng.range(1, max),
    } as usize;
    let mut v: Vec<Ent> = Vec::with_capacity(n);
    for _ in 0..n {
        let len = if rng.chance(1, 30) { 0 } else { gen_len(rng) };
        let phys = match (v.last(), rng.below(3)) {
            (Some(p), 0) => p.phys + u64::from(p.len),
            (_, 1) => rng.range(0x100, 0xf_ffff) << 12,
            _ => (rng.range(0x100, 0xf_ffff) << 12) | rng.below(4096),
        };
        v.push(Ent { phys, len });
    }
    v
}

pub fn gen_rw_case(rng: &mut Rng) -> RwCase {
    let dev = gen_rw_dev(rng);
    let nops = rng.range(1, 8) as usize;
    let mut ops = Vec::with_capacity(3 * nops);
    for _ in 0..nops {
        // mostly two slots, so MRs go back to the pool and out again
        let slot = if rng.chance(3, 4) { rng.below(2) } else { rng.below(SLOTS as u64) } as usize;
        let round = rng.chance(2, 3);
        let op = gen_rw_op(rng, slot, round);
        ops.push(op);
        if round {
            // a whole round: init, wrs or post, and (mostly) destroy
            ops.push(RwOp::Wrs { slot, chain: rng.chance(1, 3), post: rng.chance(1, 3) });
            if rng.chance(4, 5) {
                ops.push(RwOp::Destroy { slot });
            }
        }
    }
    let sizing = gen_sizing(rng);
    RwCase { dev, ops, sizing }
}

/// The device a session runs on: its limits, keys and MR pool.
fn gen_rw_dev(rng: &mut Rng) -> RwDev {
    let iwarp = rng.chance(1, 2);
    let max_sge_rd = rng.pick(&[1, 2, 3, 4, 6, 13, 13, 30]);
    let max_send_sge = rng.pick(&[1, 2, 3, 6, 13, 13, 30]);
    RwDev {
        iwarp,
        max_sge_rd,
        max_sgl_rd: if rng.chance(1, 4) { rng.pick(&[1, 2, 4, 8, 16]) } else { 0 },
        max_send_sge,
        max_qp_wr: rng.pick(&[64, 4063, 32768]),
        max_fr: rng.pick(&[1, 2, 3, 4, 8, 16, 64, 256, 512, 262_144, 262_144, 262_144]),
        local_dma_lkey: rng.next_u64() as u32,
        force_mr: rng.chance(1, 5),
        qp_send_sge: rng.range(1, u64::from(max_send_sge)) as u32,
        key0: match rng.below(4) {
            0 => 0xff,
            1 => 0xfe,
            _ => rng.next_u64() as u8,
        },
        mr_base: rng.range(0x100, 0xff_fff0) as u32,
        iova_off: rng.pick(&[0, 0, 0x1000, 0x8000_0000, 0x1_0000_0000_0000]),
        pool: rng.pick(&[0, 1, 1, 2, 2, 3, 4, 8, 16, 40]),
    }
}

/// One op on `slot` (an init when it starts a whole round).
fn gen_rw_op(rng: &mut Rng, slot: usize, round: bool) -> RwOp {
    match if round { 0 } else { rng.below(20) } {
        0..=8 => {
            let sg = gen_sg(rng, 40);
            let total: u64 = sg.iter().map(|e| u64::from(e.len)).sum();
            let offset = match rng.below(50) {
                0..=29 => 0,
                30 => total as u32,
                31..=39 => rng.range(0, total.saturating_sub(1)) as u32,
                _ => rng.range(0, total.saturating_sub(1).min(4096)) as u32,
            };
            RwOp::Init {
                slot,
                sg,
                offset,
                remote: match rng.below(8) {
                    // near the top: remote addresses wrap
                    0 => u64::MAX - rng.below(1 << 20),
                    _ => rng.next_u64() & !rng.pick(&[0, 0xfff]),
                },
                rkey: rng.next_u64() as u32,
                read: rng.chance(1, 2),
                fail_map: rng.chance(1, 25),
            }
        }
        9 => RwOp::SigInit {
            slot,
            sg: gen_sg(rng, 300),
            prot: if rng.chance(1, 3) { Vec::new() } else { gen_sg(rng, 300) },
            remote: rng.next_u64(),
            rkey: rng.next_u64() as u32,
            read: rng.chance(1, 2),
            fail_map: rng.pick(&[0, 0, 0, 1, 2]),
        },
        10..=14 => RwOp::Wrs { slot, chain: rng.chance(1, 3), post: rng.chance(1, 3) },
        _ => RwOp::Destroy { slot },
    }
}

/// The sizing query's inputs.
fn gen_sizing(rng: &mut Rng) -> (u32, u32, u32, bool) {
    (
        match rng.below(4) {
            0 => rng.u32_edge(),
            _ => rng.range(0, 4096) as u32,
        },
        match rng.below(4) {
            0 => rng.u32_edge(),
            _ => rng.range(0, 256) as u32,
        },
        rng.range(0, 8192) as u32,
        rng.chance(1, 8),
    )
}

// ---------------------------------------------------------------- comparison

/// A WR as both sides are compared on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wr {
    pub opcode: &'static str,
    pub send_flags: u32,
    /// "null", "caller_cqe", "chain_wr_own_cqe", "other".
    pub cqe: &'static str,
    pub sges: Vec<(u64, u32, u32)>,
    pub remote: Option<(u64, u32)>,
    pub inv: Option<u32>,
    pub reg: Option<Reg>,
    pub is_chain: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reg {
    pub key: u32,
    pub access: u32,
    pub iova: u64,
    pub length: u64,
    pub pages: Vec<u64>,
}

fn opname(op: u32) -> &'static str {
    match op {
        0 => "IB_WR_RDMA_WRITE",
        2 => "IB_WR_SEND",
        4 => "IB_WR_RDMA_READ",
        7 => "IB_WR_LOCAL_INV",
        11 => "IB_WR_RDMA_READ_WITH_INV",
        0x20 => "IB_WR_REG_MR",
        0x21 => "IB_WR_REG_MR_INTEGRITY",
        _ => "other",
    }
}

fn cqe_name(id: u64) -> &'static str {
    match id {
        0 => "null",
        CALLER => "caller_cqe",
        CHAIN => "chain_wr_own_cqe",
        _ => "other",
    }
}

/// The outcome of one operation on one side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub ret: i64,
    /// After a successful init: the context type and nr_ops.
    pub ctx: Option<(&'static str, u32)>,
    pub chain: Vec<Wr>,
    pub mrs_used: i64,
    pub maps_live: i64,
    pub keys: Vec<u32>,
}

/// The glue's context type number (vd_rw_ctx_info) by name.
fn vtype(t: u32) -> &'static str {
    ["SINGLE_WR", "MULTI_WR", "MR", "SIG_MR"].get(t as usize).copied().unwrap_or("?")
}

fn dtype(t: Option<CtxType>) -> &'static str {
    match t {
        Some(CtxType::SingleWr) => "SINGLE_WR",
        Some(CtxType::MultiWr) => "MULTI_WR",
        Some(CtxType::Mr) => "MR",
        Some(CtxType::Iova) => "IOVA",
        None => "none",
    }
}

fn attrs(d: &RwDev) -> DeviceAttrs {
    let mut a = if d.iwarp {
        DeviceAttrs::e810_iwarp(d.max_sge_rd, d.max_qp_wr, d.local_dma_lkey)
    } else {
        DeviceAttrs::e810_roce(d.max_sge_rd, d.max_qp_wr, d.local_dma_lkey)
    };
    a.max_send_sge = d.max_send_sge;
    a.max_sgl_rd = d.max_sgl_rd;
    a.max_fast_reg_page_list_len = d.max_fr;
    a
}

const POOL_P: usize = 256;
type Pool = MrPool<MAX_MRS, POOL_P>;
type Ctx = RwCtx<64, 72>;

/// The driver's side of a session.
struct DSess {
    qp: RwQp,
    pool: Box<Pool>,
    ctx: Vec<Box<Ctx>>,
    sg: Vec<Vec<SgEntry>>,
}

/// Records a posted chain and the page lists written before each REG_MR.
#[derive(Default)]
struct Sink {
    wrs: Vec<(u64, WrOpcode, SendFlags, Vec<irdma::wr::Sge>)>,
    pages: BTreeMap<u32, Vec<u64>>,
}

impl PostSend for Sink {
    type Error = ();
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), (usize, ())> {
        for w in wrs {
            self.wrs.push((w.wr_id, w.opcode, w.flags, w.sg_list.to_vec()));
        }
        Ok(())
    }
    unsafe fn map_mr_pages(&mut self, mr: &FrMr, pages: &[u64]) -> Result<(), RwError> {
        self.pages.insert(mr.key, pages.to_vec());
        Ok(())
    }
}

fn dwr(
    wr_id: u64,
    op: WrOpcode,
    flags: SendFlags,
    sges: &[irdma::wr::Sge],
    pages: &dyn Fn(u32) -> Vec<u64>,
) -> Wr {
    let mut w = Wr {
        opcode: "other",
        send_flags: u32::from(flags.0),
        cqe: cqe_name(wr_id),
        sges: sges.iter().map(|s| (s.addr, s.length, s.lkey)).collect(),
        remote: None,
        inv: None,
        reg: None,
        is_chain: wr_id == CHAIN,
    };
    match op {
        WrOpcode::RdmaWrite { remote_addr, rkey } => {
            w.opcode = "IB_WR_RDMA_WRITE";
            w.remote = Some((remote_addr, rkey));
        }
        WrOpcode::RdmaRead { remote_addr, rkey } => {
            w.opcode = "IB_WR_RDMA_READ";
            w.remote = Some((remote_addr, rkey));
        }
        WrOpcode::RdmaReadInv { remote_addr, rkey, inv_key } => {
            w.opcode = "IB_WR_RDMA_READ_WITH_INV";
            w.remote = Some((remote_addr, rkey));
            w.inv = Some(inv_key);
        }
        WrOpcode::LocalInv { inv_key } => {
            w.opcode = "IB_WR_LOCAL_INV";
            w.inv = Some(inv_key);
        }
        WrOpcode::RegMr(r) => {
            w.opcode = "IB_WR_REG_MR";
            w.reg = Some(Reg {
                key: r.key,
                access: r.access.0,
                iova: r.iova,
                length: r.length,
                pages: pages(r.key),
            });
        }
        WrOpcode::Send => w.opcode = "IB_WR_SEND",
        _ => {}
    }
    w
}

fn errno(r: Result<usize, RwError>) -> i64 {
    match r {
        Ok(n) => n as i64,
        Err(e) => i64::from(e.errno()),
    }
}

fn ents(sg: &[Ent]) -> Vec<VdRwSge> {
    sg.iter().map(|e| VdRwSge { phys: e.phys, length: e.len, pad: 0 }).collect()
}

fn sg_entries(sg: &[Ent]) -> Vec<SgEntry> {
    sg.iter()
        .map(|e| {
            let p = NonNull::new(e.phys as *mut u8).unwrap_or(NonNull::dangling());
            SgEntry::new(NonNull::slice_from_raw_parts(p, e.len as usize))
        })
        .collect()
}

impl DSess {
    fn state(&self, ret: i64) -> Step {
        let keys = (0..self.pool.len()).filter_map(|i| self.pool.mr(i)).map(|m| m.key).collect();
        Step {
            ret,
            ctx: None,
            chain: Vec::new(),
            mrs_used: self.pool.in_use() as i64,
            maps_live: IdentityHal::live(),
            keys,
        }
    }
}

fn vstate(v: &VSess, ret: i64, pool_live: bool) -> Step {
    let (mut used, mut live, mut nmrs) = (0, 0, 0u32);
    let mut free = [0u32; MAX_MRS];
    let mut keys = [0u32; MAX_MRS];
    let mut ni = [0u8; MAX_MRS];
    // SAFETY: every out pointer addresses MAX_MRS entries, the cap passed.
    unsafe {
        vd_rw_state(
            v.0,
            &mut used,
            &mut live,
            free.as_mut_ptr(),
            keys.as_mut_ptr(),
            ni.as_mut_ptr(),
            MAX_MRS as u32,
            &mut nmrs,
        )
    };
    let keys = if pool_live { keys[..(nmrs as usize).min(MAX_MRS)].to_vec() } else { Vec::new() };
    Step { ret, ctx: None, chain: Vec::new(), mrs_used: used.into(), maps_live: live.into(), keys }
}

fn vchain(v: &VSess, slot: usize, chain: bool, post: bool) -> Result<Vec<Wr>, String> {
    let mut w = vec![VdRwWr::default(); 256];
    let mut s = vec![IbSge::default(); 1024];
    // SAFETY: the buffers hold the capacities passed.
    let n = unsafe {
        vd_rw_wrs(
            v.0,
            slot as u32,
            chain.into(),
            post.into(),
            w.as_mut_ptr(),
            w.len() as u32,
            s.as_mut_ptr(),
            s.len() as u32,
        )
    };
    if n < 0 {
        return Err(format!("the vendor's chain could not be read ({n}: a loop?)"));
    }
    let mut out = Vec::new();
    for x in w.iter().take(n as usize) {
        let sges = s
            .get(x.sge_start as usize..(x.sge_start + x.num_sge) as usize)
            .unwrap_or(&[])
            .iter()
            .map(|g| (g.addr, g.length, g.lkey))
            .collect();
        let opcode = opname(x.opcode);
        let rdma =
            matches!(opcode, "IB_WR_RDMA_WRITE" | "IB_WR_RDMA_READ" | "IB_WR_RDMA_READ_WITH_INV");
        let reg = matches!(opcode, "IB_WR_REG_MR" | "IB_WR_REG_MR_INTEGRITY").then(|| {
            let mut p = vec![0u64; x.mr_npages as usize];
            // SAFETY: `p` holds `mr_npages` entries, the cap passed.
            unsafe { vd_rw_mr_pages(v.0, x.mr_index, p.as_mut_ptr(), p.len() as u32) };
            Reg {
                key: x.reg_key,
                access: x.reg_access,
                iova: x.mr_iova,
                length: x.mr_length,
                pages: p,
            }
        });
        out.push(Wr {
            opcode,
            send_flags: x.send_flags,
            cqe: ["null", "caller_cqe", "chain_wr_own_cqe", "other"][x.cqe.min(3) as usize],
            sges,
            remote: rdma.then_some((x.remote_addr, x.rkey)),
            inv: matches!(opcode, "IB_WR_RDMA_READ_WITH_INV" | "IB_WR_LOCAL_INV")
                .then_some(x.invalidate_rkey),
            reg,
            is_chain: x.is_chain != 0,
        });
    }
    Ok(out)
}

fn chain_wr() -> SendWr<'static> {
    SendWr { wr_id: CHAIN, opcode: WrOpcode::Send, flags: SendFlags::SIGNALED, sg_list: &[] }
}

fn dchain(d: &mut DSess, slot: usize, chain: bool, post: bool) -> Result<Vec<Wr>, i64> {
    let c = [chain_wr()];
    let chain_arg: &[SendWr<'_>] = if chain { &c } else { &[] };
    let DSess { pool, ctx, .. } = d;
    let ctx = &mut ctx[slot];
    if post {
        let mut sink = Sink::default();
        ctx.post(&mut sink, pool, CALLER, chain_arg).map_err(|e| match e {
            irdma::rw::RwPostError::Rw(e) => i64::from(e.errno()),
            irdma::rw::RwPostError::Post { .. } => -1000,
        })?;
        let pages = |k: u32| sink.pages.get(&k).cloned().unwrap_or_default();
        Ok(sink.wrs.iter().map(|(id, op, f, s)| dwr(*id, *op, *f, s, &pages)).collect())
    } else {
        let mut out = vec![SendWr::default(); 256];
        let n = ctx.wrs(pool, CALLER, chain_arg, &mut out).map_err(|e| i64::from(e.errno()))?;
        let pool: &Pool = pool;
        let pages =
            |k: u32| pool.index_of_key(k).map(|i| pool.pages(i).to_vec()).unwrap_or_default();
        Ok(out.iter().take(n).map(|w| dwr(w.wr_id, w.opcode, w.flags, w.sg_list, &pages)).collect())
    }
}

/// How one case went.
#[derive(Debug)]
pub enum RwOutcome {
    Same,
    Deviation(&'static str),
    /// The session went on past these (each counted).
    Deviations(Vec<&'static str>),
    Differs(RwDiff),
}

#[derive(Clone, Debug)]
pub struct RwDiff {
    /// The operation (index into `ops`; `ops.len()` = the closing destroy
    /// and cleanup, `ops.len() + 1` = sizing, usize::MAX = set-up).
    pub op: usize,
    pub what: String,
    /// The vendor's outcome of that operation.
    pub vendor: Option<Step>,
}

/// Page-size in-page mask (rw.c maps MRs with PAGE_SIZE = 4 KiB).
const PAGE: u64 = 4096;

/// Whether entry `i` starting at `addr` continues the page of the entry
/// before it (ending at `last_end`) in ib_sg_to_pages: the last one ended
/// inside a page, or this one starts inside one.
fn continues_page(i: usize, last_end: u64, addr: u64) -> bool {
    i > 0 && (last_end & (PAGE - 1) != 0 || addr & (PAGE - 1) != 0)
}

/// Pages ib_sg_to_pages adds for the entry `addr..end`: from its own page
/// on (at least that one), or, where it continues the last page (`cont`),
/// those after it that it reaches.
fn entry_pages(addr: u64, end: u64, cont: bool) -> u64 {
    let page = addr & !(PAGE - 1);
    if cont {
        (page + PAGE..end).step_by(PAGE as usize).count() as u64
    } else {
        (page..end).step_by(PAGE as usize).count().max(1) as u64
    }
}

/// rw.c's MR grouping of an init's entries: MR k takes entries
/// `k*ppm..`; whether that fits each MR's `ppm` pages by
/// ib_sg_to_pages' rules, with no unaligned gap inside an MR.
fn vendor_grouping_fits(sg: &[(u64, u64)], ppm: u64) -> bool {
    for chunk in sg.chunks(ppm.max(1) as usize) {
        let mut pages = 0u64;
        let mut last_end = 0u64;
        for (i, &(addr, len)) in chunk.iter().enumerate() {
            let end = addr + len;
            let cont = continues_page(i, last_end, addr);
            if cont && last_end != addr {
                return false;
            }
            pages += entry_pages(addr, end, cont);
            last_end = end;
        }
        if pages > ppm {
            return false;
        }
    }
    true
}

/// Pages ib_sg_to_pages maps for `segs` in one MR (no gap check); with
/// `driver`, as the driver counts them (a zero-length entry maps none).
fn vendor_pages(segs: &[(u64, u64)], driver: bool) -> u64 {
    let mut pages = 0u64;
    let mut last_end = 0u64;
    for (i, &(addr, len)) in segs.iter().enumerate() {
        let end = addr + len;
        if driver && len == 0 {
            last_end = end;
            continue;
        }
        pages += entry_pages(addr, end, continues_page(i, last_end, addr));
        last_end = end;
    }
    pages
}

/// Whether the driver's page filling (spec §11.7: an MR is closed when the
/// next segment's pages no longer fit) cuts `segs` into the same MRs as
/// rw.c's `ppm` entries per MR, each of which must fit.
fn groupings_agree(segs: &[(u64, u64)], ppm: u64) -> bool {
    if !vendor_grouping_fits(segs, ppm) {
        return false;
    }
    let chunks: Vec<&[(u64, u64)]> = segs.chunks(ppm.max(1) as usize).collect();
    for w in chunks.windows(2) {
        let (cur, next) = (w[0], w[1][0]);
        let Some(&(la, ll)) = cur.last() else { return false };
        let last_end = la + ll;
        let (addr, end) = (next.0, next.0 + next.1);
        let need = if last_end & (PAGE - 1) != 0 || addr & (PAGE - 1) != 0 {
            if last_end != addr {
                return false; // the driver refuses a gap inside its MR
            }
            let from = ((last_end - 1) & !(PAGE - 1)) + PAGE;
            if end <= from { 0 } else { (end - from).div_ceil(PAGE) }
        } else {
            (end - addr).div_ceil(PAGE)
        };
        if vendor_pages(cur, true) + need <= ppm {
            return false; // the driver would go on filling this MR
        }
    }
    true
}

/// The (remote, bus address, len) byte ranges the RDMA WRs of a chain move,
/// merged where both sides continue. An RDMA WR after a REG_MR addresses
/// that MR's IOVA space: its bytes are translated through the MR's page
/// list (an MR maps pages that need not be contiguous).
fn ranges(ws: &[Wr]) -> Vec<(u64, u64, u64)> {
    let mut v: Vec<(u64, u64, u64)> = Vec::new();
    let mut push = |r: u64, a: u64, l: u64| match v.last_mut() {
        Some(x) if x.0.wrapping_add(x.2) == r && x.1.wrapping_add(x.2) == a => x.2 += l,
        _ => v.push((r, a, l)),
    };
    let mut reg: Option<&Reg> = None;
    for w in ws.iter().filter(|w| !w.is_chain) {
        if w.reg.is_some() {
            reg = w.reg.as_ref();
            continue;
        }
        let Some((mut r, _)) = w.remote else { continue };
        for &(a, l, _) in &w.sges {
            let mut l = u64::from(l);
            match reg {
                Some(m) => {
                    let base = m.iova & !(PAGE - 1);
                    let mut va = a;
                    while l > 0 {
                        let idx = (va.wrapping_sub(base) / PAGE) as usize;
                        let in_page = va & (PAGE - 1);
                        let take = (PAGE - in_page).min(l);
                        let pa =
                            m.pages.get(idx).copied().unwrap_or(u64::MAX).wrapping_add(in_page);
                        push(r, pa, take);
                        r = r.wrapping_add(take);
                        va = va.wrapping_add(take);
                        l -= take;
                    }
                }
                None => {
                    if l != 0 {
                        push(r, a, l);
                    }
                    r = r.wrapping_add(l);
                }
            }
        }
        reg = None;
    }
    v
}

/// §11.7: the driver's MR chain is valid on its own: each RDMA WR is
/// preceded by a REG_MR of 1..=ppm pages whose iova/length is its one SGE
/// under its key, and it moves exactly the transfer's bytes.
fn mr_chain_valid(ours: &[Wr], want: &[(u64, u64, u64)], ppm: u64) -> Result<(), String> {
    if ranges(ours) != want {
        return Err(format!("byte ranges {:x?}, the transfer's {want:x?}", ranges(ours)));
    }
    let mut reg: Option<&Reg> = None;
    for w in ours.iter().filter(|w| !w.is_chain) {
        match w.opcode {
            "IB_WR_LOCAL_INV" => {}
            "IB_WR_REG_MR" => {
                let r = w.reg.as_ref().ok_or("REG_MR without reg")?;
                if r.pages.is_empty() || r.pages.len() as u64 > ppm {
                    return Err(format!("an MR of {} pages (limit {ppm})", r.pages.len()));
                }
                reg = Some(r);
            }
            _ => {
                let r = reg.take().ok_or("an RDMA WR without its REG_MR")?;
                if w.sges != [(r.iova, r.length as u32, r.key)] {
                    return Err(format!("SGE {:x?} is not its MR {r:x?}", w.sges));
                }
            }
        }
    }
    Ok(())
}

fn first_chain_diff(d: &[Wr], v: &[Wr]) -> Option<String> {
    for (i, (a, b)) in d.iter().zip(v).enumerate() {
        if a != b {
            return Some(format!("wr[{i}]: driver {a:x?}, vendor {b:x?}"));
        }
    }
    (d.len() != v.len()).then(|| format!("chain length: driver {}, vendor {}", d.len(), v.len()))
}

fn step_diff(d: &Step, v: &Step) -> Option<String> {
    if d.ret != v.ret {
        return Some(format!("return: driver {}, vendor {}", d.ret, v.ret));
    }
    if d.ctx != v.ctx {
        return Some(format!("context: driver {:?}, vendor {:?}", d.ctx, v.ctx));
    }
    if let Some(m) = first_chain_diff(&d.chain, &v.chain) {
        return Some(m);
    }
    if d.mrs_used != v.mrs_used {
        return Some(format!("MRs in use: driver {}, vendor {}", d.mrs_used, v.mrs_used));
    }
    if d.maps_live != v.maps_live {
        return Some(format!("DMA mappings live: driver {}, vendor {}", d.maps_live, v.maps_live));
    }
    if d.keys != v.keys {
        return Some(format!("MR keys: driver {:x?}, vendor {:x?}", d.keys, v.keys));
    }
    None
}

/// §11.2: the vendor's READ_WITH_INV names the key before the REG_MR's
/// bump; with that mapped to the registered key, the chains must agree.
fn read_inv_normalised(v: &[Wr]) -> Option<Vec<Wr>> {
    let mut out = v.to_vec();
    let mut last_reg = None;
    let mut changed = false;
    for w in out.iter_mut() {
        if let Some(r) = &w.reg {
            last_reg = Some(r.key);
        }
        if w.opcode == "IB_WR_RDMA_READ_WITH_INV"
            && let (Some(reg), Some(inv)) = (last_reg, w.inv)
            && inv != reg
            && (inv & !0xff) | (inv.wrapping_add(1) & 0xff) == reg
        {
            w.inv = Some(reg);
            changed = true;
        }
    }
    changed.then_some(out)
}

/// rdma_rw_init_map_wrs adds a `u32 total_len` to the remote address:
/// past 4 GiB of entries the later WRs' remote addresses wrap within that
/// u32. Where the vendor's remote address is exactly the driver's with the
/// offset from the first WR taken mod 2^32, it is mapped to the driver's.
fn u32_total_normalised(v: &[Wr], d: &[Wr]) -> Option<Vec<Wr>> {
    let base = v.first()?.remote?.0;
    if d.first()?.remote?.0 != base || v.len() != d.len() {
        return None;
    }
    let mut out = v.to_vec();
    let mut changed = false;
    for (w, dw) in out.iter_mut().zip(d) {
        if let (Some((vr, vk)), Some((dr, _))) = (w.remote, dw.remote)
            && vr != dr
            && w.opcode != "IB_WR_RDMA_READ_WITH_INV"
            && dr.wrapping_sub(base) > u64::from(u32::MAX)
            && vr == base.wrapping_add(dr.wrapping_sub(base) & u64::from(u32::MAX))
        {
            w.remote = Some((dr, vk));
            changed = true;
        }
    }
    changed.then_some(out)
}

/// The refusals §11.7 allows the driver: -EINVAL when the segments have an
/// unaligned gap (no MR maps a hole), -EAGAIN (its page filling needed
/// another number of MRs than the pool had).
fn refusal_allowed(ret: i64, segs: &[(u64, u64)]) -> bool {
    let gap = segs.windows(2).any(|w| {
        let last_end = w[0].0 + w[0].1;
        (last_end & (PAGE - 1) != 0 || w[1].0 & (PAGE - 1) != 0) && last_end != w[1].0
    });
    ret == -11 || (ret == -22 && gap)
}

/// ib_sg_to_pages maps a page even for a zero-length entry (its do-while
/// runs once): where the vendor's page list is the driver's with only such
/// pages added, it is mapped to the driver's.
fn zero_len_pages_normalised(v: &[Wr], d: &[Wr], zero_pages: &[u64]) -> Option<Vec<Wr>> {
    if v.len() != d.len() || zero_pages.is_empty() {
        return None;
    }
    let mut out = v.to_vec();
    let mut changed = false;
    for (w, dw) in out.iter_mut().zip(d) {
        let (Some(vr), Some(dr)) = (w.reg.as_mut(), dw.reg.as_ref()) else { continue };
        if vr.pages == dr.pages || vr.pages.len() <= dr.pages.len() {
            continue;
        }
        // dr.pages must be vr.pages less some zero-length entries' pages
        let mut k = 0;
        let mut extra = zero_pages.to_vec();
        for &p in &vr.pages {
            if dr.pages.get(k) == Some(&p) {
                k += 1;
            } else if let Some(j) = extra.iter().position(|&z| z == p) {
                extra.swap_remove(j);
            } else {
                return None;
            }
        }
        if k != dr.pages.len() {
            return None;
        }
        vr.pages.clone_from(&dr.pages);
        changed = true;
    }
    changed.then_some(out)
}

/// The vendor's session over the case's device (`vd_rw_new`: its ib_device,
/// PD and QP), with the DMA offset set, no mapping live and no warning
/// counted yet.
fn vendor_session(d: &RwDev) -> VSess {
    let vdev = VdRwDev {
        iwarp: d.iwarp.into(),
        max_sge_rd: d.max_sge_rd,
        max_sgl_rd: d.max_sgl_rd,
        max_send_sge: d.max_send_sge,
        max_qp_wr: d.max_qp_wr,
        max_fast_reg_page_list_len: d.max_fr,
        max_pi_fast_reg_page_list_len: 0,
        local_dma_lkey: d.local_dma_lkey,
        force_mr: d.force_mr.into(),
        // ib_create_named_qp (core/verbs.c): write SGEs = cap.max_send_sge,
        // read SGEs = min(cap.max_send_sge, attrs.max_sge_rd)
        max_write_sge: d.qp_send_sge,
        max_read_sge: d.qp_send_sge.min(d.max_sge_rd),
        key0: d.key0.into(),
        mr_base: d.mr_base,
        iova_off: d.iova_off,
    };
    // SAFETY: `vdev` is a valid device description.
    let v = VSess(unsafe { vd_rw_new(&vdev) });
    IdentityHal::reset(0);
    IdentityHal::set_offset(d.iova_off);
    // SAFETY: no warning state is shared with anything else.
    unsafe { vd_rw_take_warns() };
    v
}

/// One case's run: both sessions and what the ops left in the slots.
struct RwRun<'c> {
    d: &'c RwDev,
    a: DeviceAttrs,
    /// Pages per MR (fr_page_list_len).
    ppm: u32,
    ds: DSess,
    v: VSess,
    // non-final deviations met on the way (the session went on)
    deviated: Vec<&'static str>,
    live: [bool; SLOTS],
    wrs_done: [bool; SLOTS],
    zero_pages: Vec<Vec<u64>>,
    sig: [bool; SLOTS],
}

/// What one op leaves for the loop in `run_rw`.
enum OpStep {
    /// Nothing run: on to the next op.
    Skip,
    /// Both sides ran: the vendor's state, then the driver's.
    Compare(Step, Step),
    /// The case ends here.
    End(RwOutcome),
}

fn differs(op: usize, what: String, vendor: Option<Step>) -> RwOutcome {
    RwOutcome::Differs(RwDiff { op, what, vendor })
}

/// Runs one case on both sides, op by op.
pub fn run_rw(c: &RwCase) -> RwOutcome {
    let mut run = match RwRun::init_mrs(&c.dev) {
        Ok(run) => run,
        Err(o) => return *o,
    };
    for (i, op) in c.ops.iter().enumerate() {
        let (vs, dsx) = match run.op(i, op) {
            OpStep::Skip => continue,
            OpStep::Compare(vs, dsx) => (vs, dsx),
            OpStep::End(o) => return o,
        };
        if let Some(m) = step_diff(&dsx, &vs) {
            return differs(i, m, Some(vs));
        }
        stats::note(op, &vs);
        // SAFETY: plain counter.
        let w = unsafe { vd_rw_take_warns() };
        if w != 0 {
            return differs(i, format!("the vendor WARNed {w} times"), Some(vs));
        }
    }
    if let Some(o) = run.close(c.ops.len()) {
        return o;
    }
    run.finish(c)
}

impl<'c> RwRun<'c> {
    /// Opens both sessions and runs rdma_rw_init_mrs on each; a
    /// difference ends the case.
    fn init_mrs(d: &'c RwDev) -> Result<Self, Box<RwOutcome>> {
        let a = attrs(d);
        let qp = RwQp::new(a, d.force_mr, d.qp_send_sge);
        let v = vendor_session(d);

        // rdma_rw_init_mrs
        let (mut allocs, mut max_sg) = (0u32, 0u32);
        // SAFETY: `v` is live; the out pointers are valid.
        let vr = unsafe { vd_rw_init_mrs(v.0, d.pool, 0, &mut allocs, &mut max_sg) };
        let ppm = fr_page_list_len(&a, false);
        let mrs: Vec<FrMr> = (0..d.pool)
            .map(|i| FrMr {
                key: ((d.mr_base + i) << 8) | u32::from(d.key0),
                max_pages: ppm,
                first_pble_index: i * 256,
                pbl_level: 1,
            })
            .collect();
        let mut ds = DSess {
            qp,
            pool: Box::new(MrPool::new()),
            ctx: (0..SLOTS).map(|_| Box::new(Ctx::new())).collect(),
            sg: vec![Vec::new(); SLOTS],
        };
        let dr = ds.pool.init(&a, d.force_mr, d.pool, &mrs);
        match dr {
            Ok(n) if vr == 0 && n as u32 == allocs && (n == 0 || max_sg == ppm) => {}
            _ => {
                return Err(Box::new(differs(
                    usize::MAX,
                    format!(
                        "rdma_rw_init_mrs: driver {dr:?}, vendor ret {vr} with {allocs} MRs of {max_sg} pages (driver {ppm})"
                    ),
                    None,
                )));
            }
        }
        Ok(RwRun {
            d,
            a,
            ppm,
            ds,
            v,
            deviated: Vec::new(),
            live: [false; SLOTS],
            wrs_done: [false; SLOTS],
            zero_pages: vec![Vec::new(); SLOTS],
            sig: [false; SLOTS],
        })
    }

    /// Runs op `i` on both sides.
    fn op(&mut self, i: usize, op: &RwOp) -> OpStep {
        match op {
            RwOp::Init { .. } => self.init(i, op),
            RwOp::SigInit { .. } => self.sig_init(op),
            RwOp::Wrs { slot, chain, post } => self.wrs(i, *slot, *chain, *post),
            RwOp::Destroy { slot } => self.destroy(*slot),
        }
    }

    /// rdma_rw_ctx_init on both sides.
    fn init(&mut self, i: usize, op: &RwOp) -> OpStep {
        let RwOp::Init { slot, sg, offset, remote, rkey, read, fail_map } = op else {
            unreachable!("init is handed an Init op")
        };
        let d = self.d;
        let slot = *slot;
        if self.live[slot] {
            return OpStep::Skip;
        }
        let total: u64 = sg.iter().map(|e| u64::from(e.len)).sum();
        let dir = if *read { Direction::FromDevice } else { Direction::ToDevice };
        self.ds.sg[slot] = sg_entries(sg);
        let (live_before, used_before) = (IdentityHal::live(), self.ds.pool.in_use());
        let r = self.driver_init(slot, *offset, (*remote, *rkey), dir, *fail_map);
        if u64::from(*offset) >= total {
            // rw.c walks past the list's end (sg_next of the last
            // entry is NULL, dereferenced): not run on the vendor.
            if r == Err(RwError::NothingToTransfer)
                && IdentityHal::live() == live_before
                && self.ds.pool.in_use() == used_before
            {
                // nothing changed on the driver's side: go on
                self.deviated.push("rw_nothing_after_offset");
                return OpStep::Skip;
            }
            return OpStep::End(differs(
                i,
                format!(
                    "sg_offset {offset} >= {total} bytes: driver {r:?}, want NothingToTransfer with nothing mapped"
                ),
                None,
            ));
        }
        let vr = self.v.ctx_init(slot as u32, sg, *offset, (*remote, *rkey), *read, *fail_map);
        let (vs, dsx) = self.init_states(slot, vr, r);
        // §11.7: an MR context grouped differently.
        // rw.c's rdma_rw_io_needs_mr, on the entries after the offset
        let nents = segs_after(sg, *offset, 0).len() as u32;
        let needs_mr =
            (*read && (d.iwarp || (d.max_sgl_rd != 0 && nents > d.max_sgl_rd))) || d.force_mr;
        let mr_path =
            needs_mr || dsx.ctx.is_some_and(|x| x.0 == "MR") || vs.ctx.is_some_and(|x| x.0 == "MR");
        if mr_path {
            let segs = segs_after(sg, *offset, d.iova_off);
            if !groupings_agree(&segs, u64::from(self.ppm))
                && (step_diff(&dsx, &vs).is_some() || (vr >= 0 && r.is_ok()))
            {
                let before = (live_before, used_before);
                if vr < 0 && refusal_allowed(dsx.ret, &segs) {
                    // Both refused, each pool as before: go on.
                    let mut vn = vs.clone();
                    vn.ret = dsx.ret;
                    if step_diff(&dsx, &vn).is_none() {
                        self.deviated.push("rw_mr_fill_by_pages");
                        self.live[slot] = false;
                        return OpStep::Skip;
                    }
                }
                return OpStep::End(check_fill_by_pages(
                    &mut self.ds,
                    slot,
                    &segs,
                    self.ppm,
                    *remote,
                    i,
                    &vs,
                    before,
                    dsx.ret,
                ));
            }
        }
        self.opened(slot, r.is_ok(), segs_after(sg, *offset, d.iova_off));
        OpStep::Compare(vs, dsx)
    }

    /// Notes a (plain) init of `slot` over `segs`, live where `ok`.
    fn opened(&mut self, slot: usize, ok: bool, segs: Vec<(u64, u64)>) {
        self.live[slot] = ok;
        self.wrs_done[slot] = false;
        self.zero_pages[slot] =
            segs.iter().filter(|s| s.1 == 0).map(|s| s.0 & !(PAGE - 1)).collect();
        self.sig[slot] = false;
    }

    /// The driver's rdma_rw_ctx_init on `slot` over the table already in
    /// `ds.sg[slot]`, its mapping failing where `fail_map`.
    fn driver_init(
        &mut self,
        slot: usize,
        offset: u32,
        (remote, rkey): (u64, u32),
        dir: Direction,
        fail_map: bool,
    ) -> Result<usize, RwError> {
        let ds = &mut self.ds;
        VdHal::arm(if fail_map { 1 } else { 0 });
        // SAFETY: VdHal never touches the (made-up) buffers.
        let r = unsafe {
            ds.ctx[slot].init::<VdHal, MAX_MRS, POOL_P>(
                &ds.qp,
                &mut ds.pool,
                &mut ds.sg[slot],
                offset,
                remote,
                rkey,
                dir,
            )
        };
        VdHal::arm(0);
        r
    }

    /// Both sides' states after an init: the vendor's return `vr`, the
    /// driver's `r`, each with its context's type and nr_ops if it made one.
    fn init_states(&self, slot: usize, vr: c_int, r: Result<usize, RwError>) -> (Step, Step) {
        let mut vs = vstate(&self.v, vr.into(), true);
        if vr >= 0 {
            let (mut t, mut n) = (0, 0);
            // SAFETY: `v` is live, slot in range.
            unsafe { vd_rw_ctx_info(self.v.0, slot as u32, &mut t, &mut n) };
            vs.ctx = Some((vtype(t), n));
        }
        let mut dsx = self.ds.state(errno(r));
        if r.is_ok() {
            dsx.ctx =
                Some((dtype(self.ds.ctx[slot].ctx_type()), self.ds.ctx[slot].nr_ops() as u32));
        }
        (vs, dsx)
    }

    /// rdma_rw_ctx_signature_init on both sides.
    fn sig_init(&mut self, op: &RwOp) -> OpStep {
        let RwOp::SigInit { slot, sg, prot, remote, rkey, read, fail_map } = op else {
            unreachable!("sig_init is handed a SigInit op")
        };
        let (v, ds) = (&self.v, &mut self.ds);
        let slot = *slot;
        if self.live[slot] {
            return OpStep::Skip;
        }
        let dir = if *read { Direction::FromDevice } else { Direction::ToDevice };
        let mut dsg = sg_entries(sg);
        let mut dprot = sg_entries(prot);
        let fail_at = match fail_map {
            1 => 1,
            2 if !prot.is_empty() => sg.len() as u64 + 1,
            _ => 0,
        };
        VdHal::arm(fail_at);
        // SAFETY: VdHal never touches the (made-up) buffers.
        let r =
            unsafe { ds.ctx[slot].signature_init_sg::<VdHal>(&ds.qp, &mut dsg, &mut dprot, dir) };
        VdHal::arm(0);
        let (e, pe) = (ents(sg), ents(prot));
        let vfail = match fail_map {
            1 => 1,
            2 if !prot.is_empty() => 2,
            _ => 0,
        };
        // SAFETY: `e` / `pe` hold the counts passed.
        let vr = unsafe {
            vd_rw_sig_init(
                v.0,
                slot as u32,
                e.as_ptr(),
                e.len() as u32,
                pe.as_ptr(),
                pe.len() as u32,
                *remote,
                *rkey,
                if *read { 2 } else { 1 },
                vfail,
            )
        };
        self.live[slot] = vr >= 0;
        self.sig[slot] = vr >= 0;
        OpStep::Compare(vstate(v, vr.into(), true), ds.state(errno(r)))
    }

    /// rdma_rw_ctx_wrs (and the post) on both sides.
    fn wrs(&mut self, i: usize, slot: usize, chain: bool, post: bool) -> OpStep {
        if !self.live[slot] || self.sig[slot] {
            return OpStep::Skip;
        }
        let again = self.wrs_done[slot];
        self.wrs_done[slot] = true;
        let vc = match vchain(&self.v, slot, chain, post) {
            Ok(x) => x,
            Err(m) => return OpStep::End(differs(i, m, None)),
        };
        let dc = dchain(&mut self.ds, slot, chain, post);
        let mut vs = vstate(&self.v, 0, true);
        vs.chain = vc;
        let mut dsx = self.ds.state(0);
        match dc {
            Ok(x) => dsx.chain = x,
            Err(e) => dsx.ret = e,
        }
        if step_diff(&dsx, &vs).is_some() {
            if again {
                // §11.8: a second wrs bumps the keys again and keeps
                // the first call's flags/next in Linux.
                let ops = |w: &[Wr]| -> Vec<&'static str> {
                    w.iter().filter(|x| !x.is_chain).map(|x| x.opcode).collect()
                };
                if dsx.ret == 0 && ops(&dsx.chain) == ops(&vs.chain) {
                    return OpStep::End(RwOutcome::Deviation("rw_wrs_twice"));
                }
            }
            vs = self.known_chain_deviations(slot, vs, &dsx);
        }
        OpStep::Compare(vs, dsx)
    }

    /// Linux's listed misbehaviours in the vendor's chain `vs`, mapped to
    /// the driver's values: the mapped state if what is left agrees with
    /// `dsx` (the deviations noted), else `vs` as it was.
    fn known_chain_deviations(&mut self, slot: usize, vs: Step, dsx: &Step) -> Step {
        // Linux's listed misbehaviours, mapped to the driver's
        // values; what is left must agree.
        let mut vn = vs.clone();
        let mut ids = Vec::new();
        let zp = &self.zero_pages[slot];
        if let Some(n) = zero_len_pages_normalised(&vn.chain, &dsx.chain, zp) {
            vn.chain = n;
            ids.push("rw_zero_length_entry_page");
        }
        if let Some(n) = u32_total_normalised(&vn.chain, &dsx.chain) {
            vn.chain = n;
            ids.push("rw_multi_wr_offset_u32");
        }
        if let Some(n) = read_inv_normalised(&vn.chain) {
            // both sides bumped the MR's key once and cleared
            // need_inval: the session goes on
            vn.chain = n;
            ids.push("rw_read_inv_key");
        }
        if !ids.is_empty() && step_diff(dsx, &vn).is_none() {
            self.deviated.extend(ids);
            return vn;
        }
        vs
    }

    /// rdma_rw_ctx_destroy on both sides.
    fn destroy(&mut self, slot: usize) -> OpStep {
        if !self.live[slot] {
            return OpStep::Skip;
        }
        let ds = &mut self.ds;
        // SAFETY: `v` is live and the slot initialised.
        unsafe { vd_rw_destroy(self.v.0, slot as u32) };
        let r = if self.sig[slot] {
            // the driver never keeps a signature context
            Err(RwError::WrongContext)
        } else {
            // SAFETY: nothing was posted to a device.
            unsafe {
                ds.ctx[slot].destroy::<VdHal, MAX_MRS, POOL_P>(&mut ds.pool, &mut ds.sg[slot])
            }
            .map(|()| 0)
        };
        self.live[slot] = false;
        OpStep::Compare(vstate(&self.v, 0, true), ds.state(errno(r)))
    }

    /// Close: destroy what is live (op number `close`); both sides must
    /// then agree. The difference if they do not.
    fn close(&mut self, close: usize) -> Option<RwOutcome> {
        let ds = &mut self.ds;
        for slot in 0..SLOTS {
            if self.live[slot] {
                // SAFETY: `v` is live and the slot initialised.
                unsafe { vd_rw_destroy(self.v.0, slot as u32) };
                if !self.sig[slot] {
                    // SAFETY: nothing was posted to a device.
                    let r = unsafe {
                        ds.ctx[slot]
                            .destroy::<VdHal, MAX_MRS, POOL_P>(&mut ds.pool, &mut ds.sg[slot])
                    };
                    if let Err(e) = r {
                        return Some(differs(
                            close,
                            format!("closing destroy of slot {slot}: {e:?}"),
                            None,
                        ));
                    }
                }
            }
        }
        let vs = vstate(&self.v, 0, true);
        let dsx = ds.state(0);
        if let Some(m) = step_diff(&dsx, &vs) {
            return Some(differs(close, format!("after destroying every context: {m}"), Some(vs)));
        }
        None
    }

    /// rdma_rw_cleanup_mrs on both sides, then the sizing checks; the
    /// case's outcome with the deviations met on the way.
    fn finish(mut self, c: &RwCase) -> RwOutcome {
        let close = c.ops.len();
        // SAFETY: `v` is live.
        let deregs = unsafe { vd_rw_cleanup(self.v.0) };
        let mut returned = 0u32;
        let r = self.ds.pool.cleanup(|_| returned += 1);
        if r.is_err() || returned != deregs {
            return differs(
                close,
                format!(
                    "rdma_rw_cleanup_mrs: driver {r:?} returning {returned} MRs, vendor deregistered {deregs}"
                ),
                None,
            );
        }
        let mut deviated = std::mem::take(&mut self.deviated);
        deviated.sort_unstable();
        deviated.dedup();
        match sizing(c, &self.v, &self.a, &self.ds.qp) {
            RwOutcome::Same if !deviated.is_empty() => RwOutcome::Deviations(deviated),
            RwOutcome::Deviation(id) if !deviated.is_empty() => {
                deviated.push(id);
                RwOutcome::Deviations(deviated)
            }
            o => o,
        }
    }
}

/// The entries after `sg_offset` as (bus address, length).
fn segs_after(sg: &[Ent], offset: u32, iova_off: u64) -> Vec<(u64, u64)> {
    let mut off = u64::from(offset);
    let mut out = Vec::new();
    let mut skipping = true;
    for e in sg {
        let len = u64::from(e.len);
        if skipping {
            if off >= len {
                off -= len;
                continue;
            }
            skipping = false;
            out.push((e.phys.wrapping_add(iova_off) + off, len - off));
        } else {
            out.push((e.phys.wrapping_add(iova_off), len));
        }
    }
    out
}

/// §11.7: the vendor's grouping of entries into MRs fails (or differs),
/// the driver fills MRs by pages: its chain must be a valid MR chain over
/// exactly the transfer (or its refusal a typed one with nothing held).
#[allow(clippy::too_many_arguments)]
fn check_fill_by_pages(
    ds: &mut DSess,
    slot: usize,
    segs: &[(u64, u64)],
    ppm: u32,
    remote: u64,
    op: usize,
    vs: &Step,
    (live_before, used_before): (i64, usize),
    dret: i64,
) -> RwOutcome {
    let want = {
        let mut v: Vec<(u64, u64, u64)> = Vec::new();
        let mut r = remote;
        for &(a, l) in segs.iter().filter(|s| s.1 != 0) {
            match v.last_mut() {
                Some(x) if x.0.wrapping_add(x.2) == r && x.1.wrapping_add(x.2) == a => x.2 += l,
                _ => v.push((r, a, l)),
            }
            r = r.wrapping_add(l);
        }
        v
    };
    let Some(ty) = ds.ctx[slot].ctx_type() else {
        // The driver refused: an unaligned gap inside its MR or the pool
        // ran dry where Linux's grouping needed fewer MRs; nothing held.
        if !refusal_allowed(dret, segs) {
            return RwOutcome::Differs(RwDiff {
                op,
                what: format!(
                    "§11.7: the driver refused with {dret}, neither a gap it cannot map (-EINVAL) nor an empty pool (-EAGAIN)"
                ),
                vendor: Some(vs.clone()),
            });
        }
        if ds.pool.in_use() == used_before && IdentityHal::live() == live_before {
            return RwOutcome::Deviation("rw_mr_fill_by_pages");
        }
        return RwOutcome::Differs(RwDiff {
            op,
            what: "§11.7: the driver refused but still holds MRs or mappings".into(),
            vendor: Some(vs.clone()),
        });
    };
    let chain = match dchain(ds, slot, false, false) {
        Ok(c) => c,
        Err(e) => {
            return RwOutcome::Differs(RwDiff {
                op,
                what: format!("§11.7: the driver's wrs failed ({e})"),
                vendor: Some(vs.clone()),
            });
        }
    };
    let r = if ty == CtxType::Mr {
        mr_chain_valid(&chain, &want, u64::from(ppm))
    } else if ranges(&chain) == want {
        Ok(())
    } else {
        Err(format!("byte ranges {:x?}, the transfer's {want:x?}", ranges(&chain)))
    };
    match r {
        Ok(()) => RwOutcome::Deviation("rw_mr_fill_by_pages"),
        Err(m) => RwOutcome::Differs(RwDiff {
            op,
            what: format!("§11.7 structural check: {m}"),
            vendor: Some(vs.clone()),
        }),
    }
}

/// rdma_rw_mr_factor / rdma_rw_max_send_wr / rdma_rw_init_qp.
fn sizing(c: &RwCase, v: &VSess, a: &DeviceAttrs, qp: &RwQp) -> RwOutcome {
    let (maxpages, ctxs, send_wr, integ) = c.sizing;
    let op = c.ops.len() + 1;
    let differs = |what: String| RwOutcome::Differs(RwDiff { op, what, vendor: None });
    let flags = if integ { IB_QP_CREATE_INTEGRITY_EN } else { 0 };
    let force = qp.force_mr;
    let mut dev_id = None;
    let dm = rdma_rw_mr_factor(a, force, maxpages);
    let mr_pages =
        if irdma::rw::can_use_mr(a, force) { fr_page_list_len(a, false) } else { a.max_sge_rd };
    if mr_pages == 0 {
        // Linux divides by zero.
        if maxpages == 0 && dm == 0 || dm == u32::MAX {
            dev_id = Some("rw_mr_factor_zero_pages");
        } else {
            return differs(format!("rdma_rw_mr_factor({maxpages}) with 0 pages: driver {dm}"));
        }
    } else {
        // SAFETY: `v` is live.
        let vm = unsafe { vd_rw_mr_factor(v.0, maxpages) };
        if vm != dm {
            let exact = u64::from(maxpages).div_ceil(u64::from(mr_pages));
            if u64::from(dm) == exact && maxpages.checked_add(mr_pages - 1).is_none() {
                dev_id = Some("rw_sizing_saturates");
            } else {
                return differs(format!("rdma_rw_mr_factor({maxpages}): driver {dm}, vendor {vm}"));
            }
        }
    }
    // SAFETY: `v` is live.
    let vw = unsafe { vd_rw_max_send_wr(v.0, ctxs, flags) };
    let dw = rdma_rw_max_send_wr(a, force, ctxs, integ);
    if vw != dw {
        return differs(format!(
            "rdma_rw_max_send_wr({ctxs}, integrity {integ}): driver {dw}, vendor {vw}"
        ));
    }
    // ib_create_named_qp (core/verbs.c) calls rdma_rw_init_qp only when
    // max_rdma_ctxs is non-zero; with 0 the capabilities stay as they are.
    let vq = if ctxs == 0 {
        send_wr
    } else {
        // SAFETY: `v` is live.
        unsafe { vd_rw_init_qp(v.0, send_wr, ctxs, flags) }
    };
    let mut cap = RwQpCap { max_send_wr: send_wr, max_rdma_ctxs: ctxs };
    let dq = rdma_rw_init_qp(a, force, &mut cap, integ);
    match dq {
        Err(RwError::IntegrityUnsupported) if integ => {
            return RwOutcome::Deviation("rw_integrity_qp_refused");
        }
        Ok(()) if cap.max_send_wr == vq => {}
        Ok(()) => {
            let factor = irdma::rw::send_wr_factor(a, force, integ);
            let exact =
                (u64::from(send_wr) + u64::from(factor) * u64::from(ctxs)).min(a.max_qp_wr.into());
            let wraps = factor.checked_mul(ctxs).and_then(|x| x.checked_add(send_wr)).is_none();
            if wraps && u64::from(cap.max_send_wr) == exact {
                return RwOutcome::Deviation("rw_sizing_saturates");
            }
            return differs(format!(
                "rdma_rw_init_qp({send_wr}, {ctxs}): driver {}, vendor {vq}",
                cap.max_send_wr
            ));
        }
        Err(e) => {
            return differs(format!("rdma_rw_init_qp: driver {e:?}, vendor {vq}"));
        }
    }
    match dev_id {
        Some(id) => RwOutcome::Deviation(id),
        None => RwOutcome::Same,
    }
}

// ---------------------------------------------------------------- shrink, print

fn candidates(c: &RwCase) -> Vec<RwCase> {
    let mut v = Variants::new(c);
    for i in (0..c.ops.len()).rev() {
        v.push(|k: &mut RwCase| {
            k.ops.remove(i);
        });
    }
    v.push(|k| k.dev.pool = k.dev.pool.min(2));
    v.push(|k| k.dev.iova_off = 0);
    v.push(|k| k.dev.force_mr = false);
    v.push(|k| k.sizing = (0, 0, 0, false));
    for i in 0..c.ops.len() {
        let n = match &c.ops[i] {
            RwOp::Init { sg, .. } | RwOp::SigInit { sg, .. } => sg.len(),
            _ => 0,
        };
        for j in (0..n).rev() {
            v.push(|k| {
                if let RwOp::Init { sg, .. } | RwOp::SigInit { sg, .. } = &mut k.ops[i]
                    && sg.len() > 1
                {
                    sg.remove(j);
                }
            });
        }
        v.push(|k| {
            if let RwOp::Init { offset, .. } = &mut k.ops[i] {
                *offset = 0;
            }
        });
        v.push(|k| {
            if let RwOp::SigInit { prot, .. } = &mut k.ops[i] {
                prot.clear();
            }
        });
    }
    v.into_vec()
}

/// Shrinks a differing case, keeping a difference.
pub fn shrink_rw(c: RwCase, d: RwDiff) -> (RwCase, RwDiff) {
    greedy(
        c,
        d,
        3000,
        |c, _| candidates(c),
        |k| match run_rw(k) {
            RwOutcome::Differs(nd) => Some(nd),
            _ => None,
        },
    )
}

fn hex(v: u64) -> String {
    format!("\"{v:#x}\"")
}

fn wr_json(w: &Wr) -> String {
    let sges: Vec<String> = w
        .sges
        .iter()
        .map(|s| {
            format!(
                "{{\"addr\": {}, \"length\": {}, \"lkey\": {}}}",
                hex(s.0),
                s.1,
                hex(s.2.into())
            )
        })
        .collect();
    let mut s = format!(
        "{{\"opcode\": \"{}\", \"send_flags\": {}, \"signaled\": {}, \"wr_cqe\": \"{}\", \"num_sge\": {}, \"sg_list\": [{}]",
        w.opcode,
        w.send_flags,
        w.send_flags & 2 != 0,
        w.cqe,
        w.sges.len(),
        sges.join(", ")
    );
    if let Some((r, k)) = w.remote {
        s += &format!(", \"remote_addr\": {}, \"rkey\": {}", hex(r), hex(k.into()));
    }
    if let Some(k) = w.inv {
        s += &format!(", \"invalidate_rkey\": {}", hex(k.into()));
    }
    if let Some(r) = &w.reg {
        let p: Vec<String> = r.pages.iter().map(|p| hex(*p)).collect();
        s += &format!(
            ", \"reg\": {{\"key\": {}, \"access\": {}, \"mr_iova\": {}, \"mr_length\": {}, \"mr_page_size\": 4096, \"mr_npages\": {}, \"mr_pages\": [{}]}}",
            hex(r.key.into()),
            r.access,
            hex(r.iova),
            r.length,
            r.pages.len(),
            p.join(", ")
        );
    }
    s + &format!(", \"is_chain_wr\": {}}}", w.is_chain)
}

/// A differing case in rw-vectors.json's schema (one case object): the
/// inputs of the session, the sequence of operations, and the vendor's
/// outcome of the operation that differs.
pub fn print_rw(c: &RwCase, d: &RwDiff) -> String {
    let dv = &c.dev;
    let a = attrs(dv);
    let qp = RwQp::new(a, dv.force_mr, dv.qp_send_sge);
    let ops: Vec<String> = c.ops.iter().map(|o| op_json(o, dv.iova_off)).collect();
    let vendor = vendor_json(d);
    format!(
        "{{\"id\": \"vendor-diff.rw\", \"function\": \"rdma_rw_ctx_init\", \"description\": \"vendor-diff: {}\",\n \"inputs\": {{\"device\": {{\"rdma_protocol_iwarp\": {}, \"rdma_cap_read_inv\": {}, \"max_sgl_rd\": {}, \"max_sge_rd\": {}, \"max_send_sge\": {}, \"max_fast_reg_page_list_len\": {}, \"max_pi_fast_reg_page_list_len\": 0, \"max_qp_wr\": {}, \"ib_uses_virt_dma\": false, \"local_dma_lkey\": {}}},\n  \"force_mr\": {}, \"port_num\": 1, \"qp\": {{\"max_send_sge\": {}, \"max_write_sge\": {}, \"max_read_sge\": {}, \"integrity_en\": false}},\n  \"dma_iova_offset\": {}, \"mr_pool\": \"rdma_rw_init_mrs(max_rdma_ctxs={})\", \"mr_keys\": \"MR #i: ({:#x} + i) << 8 | {:#x}\",\n  \"sequence\": [{}]}},\n \"outputs\": {{\"vendor\": {}}}}}",
        d.what.replace('"', "'"),
        dv.iwarp,
        dv.iwarp,
        dv.max_sgl_rd,
        dv.max_sge_rd,
        dv.max_send_sge,
        dv.max_fr,
        dv.max_qp_wr,
        hex(dv.local_dma_lkey.into()),
        dv.force_mr,
        dv.qp_send_sge,
        qp.max_write_sge,
        qp.max_read_sge,
        hex(dv.iova_off),
        dv.pool,
        dv.mr_base,
        dv.key0,
        ops.join(",\n    "),
        vendor
    )
}

/// A scatter list as `{page_phys, offset, length, addr}` objects (`addr`
/// the DMA address, `iova_off` past the physical one).
fn sg_json(sg: &[Ent], iova_off: u64) -> String {
    let v: Vec<String> = sg
        .iter()
        .map(|e| {
            format!(
                "{{\"page_phys\": {}, \"offset\": {}, \"length\": {}, \"addr\": {}}}",
                hex(e.phys & !0xfff),
                e.phys & 0xfff,
                e.len,
                hex(e.phys.wrapping_add(iova_off))
            )
        })
        .collect();
    format!("[{}]", v.join(", "))
}

/// One operation of the sequence as its call object.
fn op_json(o: &RwOp, iova_off: u64) -> String {
    match o {
        RwOp::Init { slot, sg, offset, remote, rkey, read, fail_map } => format!(
            "{{\"call\": \"rdma_rw_ctx_init\", \"ctx\": {slot}, \"direction\": \"{}\", \"sg\": {}, \"sg_cnt\": {}, \"sg_offset\": {offset}, \"remote_addr\": {}, \"rkey\": {}, \"fail_dma_map_at\": {}}}",
            if *read { "DMA_FROM_DEVICE" } else { "DMA_TO_DEVICE" },
            sg_json(sg, iova_off),
            sg.len(),
            hex(*remote),
            hex((*rkey).into()),
            u8::from(*fail_map)
        ),
        RwOp::SigInit { slot, sg, prot, remote, rkey, read, fail_map } => format!(
            "{{\"call\": \"rdma_rw_ctx_signature_init\", \"ctx\": {slot}, \"direction\": \"{}\", \"sg\": {}, \"prot_sg\": {}, \"remote_addr\": {}, \"rkey\": {}, \"fail_dma_map_at\": {fail_map}}}",
            if *read { "DMA_FROM_DEVICE" } else { "DMA_TO_DEVICE" },
            sg_json(sg, iova_off),
            sg_json(prot, iova_off),
            hex(*remote),
            hex((*rkey).into())
        ),
        RwOp::Wrs { slot, chain, post } => format!(
            "{{\"call\": \"{}\", \"ctx\": {slot}, \"chain_wr_arg\": {chain}}}",
            if *post { "rdma_rw_ctx_post" } else { "rdma_rw_ctx_wrs" }
        ),
        RwOp::Destroy { slot } => format!("{{\"call\": \"rdma_rw_ctx_destroy\", \"ctx\": {slot}}}"),
    }
}

/// The vendor's outcome of the differing operation.
fn vendor_json(d: &RwDiff) -> String {
    match &d.vendor {
        Some(s) => {
            let ch: Vec<String> = s.chain.iter().map(wr_json).collect();
            format!(
                "{{\"op\": {}, \"ret\": {}, \"ctx_type\": {}, \"nr_ops\": {}, \"chain\": [{}], \"chain_len\": {}, \"state\": {{\"mrs_used\": {}, \"dma_mappings_live\": {}, \"mr_keys\": [{}]}}}}",
                d.op,
                s.ret,
                s.ctx.map_or("null".to_string(), |x| format!("\"{}\"", x.0)),
                s.ctx.map_or(0, |x| x.1),
                ch.join(", "),
                s.chain.len(),
                s.mrs_used,
                s.maps_live,
                s.keys.iter().map(|k| hex((*k).into())).collect::<Vec<_>>().join(", ")
            )
        }
        None => format!("{{\"op\": {}}}", d.op),
    }
}

/// What the compared sessions exercised (printed at the end of a run).
pub mod stats {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::{RwOp, Step};

    pub static OPS: AtomicU64 = AtomicU64::new(0);
    static SINGLE: AtomicU64 = AtomicU64::new(0);
    static MULTI: AtomicU64 = AtomicU64::new(0);
    static MR: AtomicU64 = AtomicU64::new(0);
    static EAGAIN: AtomicU64 = AtomicU64::new(0);
    static EINVAL: AtomicU64 = AtomicU64::new(0);
    static ENOMEM: AtomicU64 = AtomicU64::new(0);
    static SIG: AtomicU64 = AtomicU64::new(0);
    static CHAINS: AtomicU64 = AtomicU64::new(0);
    static WRS: AtomicU64 = AtomicU64::new(0);
    static INV: AtomicU64 = AtomicU64::new(0);
    static DESTROY: AtomicU64 = AtomicU64::new(0);

    pub fn add(n: u64) {
        OPS.fetch_add(n, Ordering::Relaxed);
    }

    pub fn ops() -> u64 {
        OPS.load(Ordering::Relaxed)
    }

    fn bump(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts an operation both sides agreed on.
    pub(super) fn note(op: &RwOp, v: &Step) {
        match op {
            RwOp::Init { .. } => match (v.ctx, v.ret) {
                (Some(("SINGLE_WR", _)), _) => bump(&SINGLE, 1),
                (Some(("MULTI_WR", _)), _) => bump(&MULTI, 1),
                (Some(("MR", _)), _) => bump(&MR, 1),
                (_, -11) => bump(&EAGAIN, 1),
                (_, -22) => bump(&EINVAL, 1),
                (_, -12) => bump(&ENOMEM, 1),
                _ => {}
            },
            RwOp::SigInit { .. } => bump(&SIG, 1),
            RwOp::Wrs { .. } => {
                bump(&CHAINS, 1);
                bump(&WRS, v.chain.len() as u64);
                bump(&INV, v.chain.iter().filter(|w| w.opcode == "IB_WR_LOCAL_INV").count() as u64);
            }
            RwOp::Destroy { .. } => bump(&DESTROY, 1),
        }
    }

    pub fn line() -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "rw inits equal: {} SINGLE_WR, {} MULTI_WR, {} MR, refused {} -EAGAIN / {} -EINVAL / {} -ENOMEM; {} signature inits; {} chains ({} WRs, {} LOCAL_INV); {} destroys",
            g(&SINGLE),
            g(&MULTI),
            g(&MR),
            g(&EAGAIN),
            g(&EINVAL),
            g(&ENOMEM),
            g(&SIG),
            g(&CHAINS),
            g(&WRS),
            g(&INV),
            g(&DESTROY)
        )
    }
}

/// XORed into the run's seed for the rw area's own random stream.
pub const SEED_SALT: u64 = 0x7277_5f73_6573_7331;

/// Sessions per post case of a run.
pub const PER_CASE: u64 = 1;

/// `PER_CASE` sessions; true when the run should stop (five differences).
pub fn rw_round(n: u64, seed: u64, rng: &mut Rng, rep: &mut crate::Report) -> bool {
    for _ in 0..PER_CASE {
        let c = gen_rw_case(rng);
        rep.rw_cases += 1;
        stats::add(c.ops.len() as u64);
        match run_rw(&c) {
            RwOutcome::Same => {}
            RwOutcome::Deviation(id) => rep.deviation(id),
            RwOutcome::Deviations(ids) => {
                for id in ids {
                    rep.deviation(id);
                }
            }
            RwOutcome::Differs(d) => {
                let (small, d) = shrink_rw(c, d);
                println!("DIFF rw case #{n} (seed {seed:#x}): op {}: {}", d.op, d.what);
                println!("{}", print_rw(&small, &d));
                if rep.difference() {
                    return true;
                }
            }
        }
    }
    false
}

// ------------------------------------------------------- vector writing

/// The vendor's side of one round on slot 0 of a fresh session with an
/// empty MR pool: `rdma_rw_ctx_init`, `rdma_rw_ctx_wrs` (the caller's cqe,
/// no chain WR) when it succeeded, `rdma_rw_ctx_destroy` (regen/rw.rs).
pub(crate) struct VendorRound {
    pub ret: i64,
    pub ctx: Option<(&'static str, u32)>,
    /// (mrs_used, dma mappings live) after init and after destroy.
    pub after_init: (i64, i64),
    pub chain: Vec<Wr>,
    pub after_destroy: (i64, i64),
    /// WARN* the vendor hit.
    pub warns: u64,
}

pub(crate) fn vendor_round(
    d: &RwDev,
    sg: &[Ent],
    offset: u32,
    remote: u64,
    rkey: u32,
    read: bool,
    fail_map: bool,
) -> Result<VendorRound, String> {
    let v = vendor_session(d);
    let (mut allocs, mut max_sg) = (0u32, 0u32);
    // SAFETY: `v` is live; the out pointers are valid.
    let vr = unsafe { vd_rw_init_mrs(v.0, d.pool, 0, &mut allocs, &mut max_sg) };
    if vr != 0 {
        return Err(format!("rdma_rw_init_mrs returned {vr}"));
    }
    let ret = v.ctx_init(0, sg, offset, (remote, rkey), read, fail_map);
    let s = vstate(&v, ret.into(), true);
    let after_init = (s.mrs_used, s.maps_live);
    let mut r = VendorRound {
        ret: ret.into(),
        ctx: None,
        after_init,
        chain: Vec::new(),
        after_destroy: after_init,
        warns: 0,
    };
    if ret >= 0 {
        let (mut t, mut n) = (0, 0);
        // SAFETY: `v` is live, slot 0 in range.
        unsafe { vd_rw_ctx_info(v.0, 0, &mut t, &mut n) };
        r.ctx = Some((vtype(t), n));
        r.chain = vchain(&v, 0, false, false)?;
        // SAFETY: `v` is live and slot 0 initialised.
        unsafe { vd_rw_destroy(v.0, 0) };
        let s = vstate(&v, 0, true);
        r.after_destroy = (s.mrs_used, s.maps_live);
    }
    // SAFETY: plain counter.
    r.warns = u64::from(unsafe { vd_rw_take_warns() } != 0);
    // SAFETY: `v` is live.
    unsafe { vd_rw_cleanup(v.0) };
    Ok(r)
}

/// `gen_sg` for the vector writer.
pub(crate) fn gen_sg_for(rng: &mut Rng, max: u64) -> Vec<Ent> {
    gen_sg(rng, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unsignaled REG_MR WR of the registration `r`.
    fn reg_mr(r: Reg) -> Wr {
        Wr {
            opcode: "IB_WR_REG_MR",
            send_flags: 0,
            cqe: "null",
            sges: vec![],
            remote: None,
            inv: None,
            reg: Some(r),
            is_chain: false,
        }
    }

    fn rdma(remote: u64, sges: Vec<(u64, u32, u32)>) -> Wr {
        Wr {
            opcode: "IB_WR_RDMA_WRITE",
            send_flags: 0,
            cqe: "null",
            sges,
            remote: Some((remote, 7)),
            inv: None,
            reg: None,
            is_chain: false,
        }
    }

    #[test]
    fn groupings_agree_only_where_pages_and_entries_cut_alike() {
        let _serial = crate::serial();
        // 3 one-page entries, 1 page per MR: both give 3 MRs.
        let segs = [(0x1000, 4096), (0x5000, 4096), (0x9000, 4096)];
        assert!(groupings_agree(&segs, 1));
        // 4 half pages, contiguous, 2 entries per MR: rw.c cuts after 2
        // entries (1 page), the driver fills 2 pages: different MRs.
        let segs = [(0x1000, 2048), (0x1800, 2048), (0x2000, 2048), (0x2800, 2048)];
        assert!(!groupings_agree(&segs, 2));
        // one entry of 3 pages in an MR of 2: rw.c cannot map it.
        assert!(!groupings_agree(&[(0x1000, 3 * 4096)], 2));
        // an unaligned hole inside rw.c's MR
        assert!(!groupings_agree(&[(0x1000, 100), (0x8000, 100)], 4));
    }

    #[test]
    fn the_u32_wrap_is_mapped_only_where_it_is_exactly_that() {
        let _serial = crate::serial();
        let base = 0x10_0000_0000;
        let d = vec![rdma(base, vec![]), rdma(base + (1 << 32) + 5, vec![])];
        let v = vec![rdma(base, vec![]), rdma(base + 5, vec![])];
        assert_eq!(u32_total_normalised(&v, &d), Some(d.clone()));
        // off by one more than the wrap: not this misbehaviour
        let off = vec![rdma(base, vec![]), rdma(base + 6, vec![])];
        assert_eq!(u32_total_normalised(&off, &d), None);
    }

    #[test]
    fn zero_length_pages_are_dropped_only_when_listed() {
        let _serial = crate::serial();
        let reg =
            |pages: Vec<u64>| reg_mr(Reg { key: 1, access: 1, iova: 0x1000, length: 4096, pages });
        let d = vec![reg(vec![0x1000])];
        let v = vec![reg(vec![0x1000, 0x9000])];
        assert_eq!(zero_len_pages_normalised(&v, &d, &[0x9000]), Some(d.clone()));
        assert_eq!(zero_len_pages_normalised(&v, &d, &[0x8000]), None);
    }

    #[test]
    fn ranges_translate_mr_bytes_through_the_page_list() {
        let _serial = crate::serial();
        let reg = reg_mr(Reg {
            key: 9,
            access: 1,
            iova: 0x1800,
            length: 0x1000,
            pages: vec![0x1000, 0x7000],
        });
        let w = rdma(0x50, vec![(0x1800, 0x1000, 9)]);
        assert_eq!(ranges(&[reg, w]), vec![(0x50, 0x1800, 0x800), (0x850, 0x7000, 0x800)]);
    }
}
