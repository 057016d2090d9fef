//! HMC: the vendor's FPM sizing (ctrl.c: irdma_cfg_fpm_val with
//! irdma_sc_parse_fpm_query_buf, irdma_est_sd, irdma_q1_cnt,
//! cfg_fpm_value_gen_2, irdma_sc_cfg_iw_fpm, irdma_sc_parse_fpm_commit_buf)
//! and its SD bookkeeping (hmc.c: irdma_sc_create_hmc_obj,
//! irdma_find_sd_index_limit, irdma_add_sd_table_entry, irdma_hmc_sd_grp,
//! irdma_set_sd_entry), both compiled unmodified (`shim/hmc_glue.c`),
//! against the driver's `cqp::decode::{FpmQuery, FpmCommit}`,
//! `res::size_hmc`, `cqp::ctx::encode_fpm_commit`, `res::HmcLayout` and
//! `cqp::cmd::SdEntry`.
//!
//! One case: a QUERY_FPM_VAL buffer as the device would write it (seeded:
//! counts, log2 sizes, block sizes, first SD index, max SDs, with edges and
//! out-of-range values), a resource profile (QPs, CQs, MRs, PBLEs, an SD
//! budget, RoCEv2 or iWARP), the IRD the sizing assumes, and how the device
//! answers COMMIT_FPM_VAL (bases in type order with gaps, shuffled, an
//! overlap, a count changed). The vendor runs `irdma_cfg_fpm_val` against a
//! fake device that answers its two CQP ops; the driver runs the same steps.
//! Compared, in order, stopping at the first difference:
//!
//! 1. refusal: the vendor's return code against the driver's decode /
//!    sizing / layout error;
//! 2. the decoded query (per object max count and size, block sizes, SDs);
//! 3. the counts to commit, word for word as written into the commit buffer;
//! 4. the decoded commit: per object count and base, the SD count;
//! 5. hmc.c's SD index range of every object (irdma_find_sd_index_limit)
//!    against `HmcLayout::sd_range`; the PBLE pool's chunks (their SD and
//!    PD ranges, irdma_find_pd_index_limit) and random PBLE indices
//!    (`PbleLayout::locate`) against the same arithmetic;
//! 6. bring-up's SD programming (hw.c: irdma_create_hmc_objs order,
//!    irdma_sc_create_hmc_obj per object): every UPDATE_PE_SDS entry the
//!    vendor asks for, cmd and data byte for byte, against
//!    `HmcLayout::static_sds` encoded with `SdEntry::set` (same backing
//!    addresses); their grouping into ops: hmc.c's must be per object (at
//!    most 11 each, irdma_hmc_sd_grp), the driver's
//!    (`device::hmc::SdStore::back_static`) is 11 per op across objects
//!    (deviation `sd_update_grouping` when they differ);
//! 7. teardown (hw.c: irdma_del_hmc_objects order, irdma_sc_del_hmc_obj):
//!    the SD clear entries, as a set (the vendor clears an SD when its last
//!    object goes, the driver in backing order), against `SdEntry::clear`;
//! 8. PBLE chunks, paged and direct SDs (`back_chunks`, `pble_teardown`):
//!    a prefix of the pool's chunks (sometimes with a gap) backed as
//!    pble.c's add_pble_prm drives hmc.c (irdma_add_sd_table_entry,
//!    irdma_add_pd_table_entry per page, irdma_hmc_sd_one; the glue makes
//!    those calls, pble.c is not compiled): the SD type, the PD page byte
//!    for byte, the PFHMC_PDINV values in order and the one UPDATE_PE_SDS
//!    entry; then the PBLE object's teardown (irdma_sc_del_hmc_obj:
//!    irdma_remove_pd_bp per PD, then the SD clears): PDINV values and SD
//!    clears as sorted lists. The driver's side is `irdma::test_support`
//!    (cargo feature `test-support`): the pure steps
//!    `SdStore::back_pble_chunk` and `SdStore::clear_all` perform; that
//!    those functions perform them, in order, is the driver's unit test
//!    `device::hmc::tests`. Besides the full cases, PBLE-only cases
//!    (`gen_chunk_case`: a PBLE object alone at a seeded base and count,
//!    every other HMC round) reach what the full cases rarely do: first
//!    chunks mid-SD in an SD of their own, whole-SD chunks, pools ending at
//!    or just past an SD boundary.
//!
//! Not compared: the PD entries' zeroing at teardown on the vendor side
//! (hmc.c frees the PD page right after, so the glue cannot read it; the
//! PDINV values that follow each zeroing are compared), GLHMC_VFPDINV
//! (6.1's hmc.c has only the PF form, and the driver is PF-only).

//! A difference is shrunk (profile bounds lifted, query words zeroed or
//! halved, the plain commit answer) and printed as JSON with the vendor's
//! output as the expected one (`print_hmc`).
//!
//! Profile bounds the vendor does not have are given to it as lowered device
//! maxima (CQ, MR, PBLE max counts and MAX_PE_SDS in its query buffer): the
//! driver documents its bounds as exactly that (`res::Profile`).
//!
//! Inputs the 6.1 code cannot take are not generated, and said here:
//! object-size exponents above 63 (`BIT_ULL` of them is undefined in C);
//! QP maxima above 19 bits and FSIMC maxima near 2^31, and RoCE Q1 maxima
//! below 512, make its `u32` power-of-two loops spin forever — the last is
//! generated, the vendor is not run, and the driver must refuse it
//! (deviation `q1_max_below_512`).

use core::ffi::{c_int, c_void};

use irdma::cqp::cmd::{MAX_SD_ENTRIES, SdEntry};
use irdma::cqp::ctx::encode_fpm_commit;
use irdma::cqp::decode::{FpmCommit, FpmQuery};
use irdma::lan::Protocol;
use irdma::res::hmc::{HMC_OBJ_COUNT, committed_sd_count};
use irdma::res::pble::{PbleChunk, SdKind};
use irdma::res::{FpmCaps, HmcCounts, HmcError, HmcLayout, HmcObj, PbleLayout, Profile, size_hmc};
use irdma::test_support::{self, PdStep};

use crate::rng::Rng;

/// The deviations this area classifies (deviations.toml).
pub const KNOWN: &[&str] = &[
    "fpm_field_widths",
    "gen2_max_ird",
    "q1_max_below_512",
    "no_qps_refused",
    "fpm_sizing_overflow_refused",
    "pble_grow_capped",
    "commit_overlap_refused",
    "commit_sd_count_skips_empty_objects",
    "ooisc_roce_keeps_max",
    "rrf_min_without_xf",
    "pble_teardown_clears_sd_range",
    "sd_update_grouping",
];

#[repr(C)]
struct VdHmc {
    _p: [u8; 0],
}

/// `struct vd_fpm_out` (hmc_glue.c).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VdFpmOut {
    pub commit_sent: [u64; 24],
    pub base: [u64; HMC_OBJ_COUNT],
    pub size: [u64; HMC_OBJ_COUNT],
    pub max_cnt: [u32; HMC_OBJ_COUNT],
    pub cnt: [u32; HMC_OBJ_COUNT],
    pub sd_cnt: u32,
    pub first_sd_index: u32,
    pub max_sds: u32,
    pub xf_block_size: u32,
    pub q1_block_size: u32,
    pub rrf_block_size: u32,
    pub ooiscf_block_size: u32,
    pub ht_multiplier: u32,
    pub timer_bucket: u32,
    pub max_ceqs: u32,
    pub max_hw_ird: u32,
    pub ret: i32,
    pub queried: u32,
    pub committed: u32,
}

impl Default for VdFpmOut {
    fn default() -> Self {
        // SAFETY: every field is an integer or an array of integers, for
        // which all-zero bytes are a valid value.
        unsafe { core::mem::zeroed() }
    }
}

type AnswerFn = unsafe extern "C" fn(sent: *const u64, answer: *mut u64, ctx: *mut c_void);

unsafe extern "C" {
    fn vd_hmc_new(protocol_used: u8, max_hw_ird: u32, ret: *mut c_int) -> *mut VdHmc;
    fn vd_hmc_free(h: *mut VdHmc);
    fn vd_hmc_cfg_fpm(
        h: *mut VdHmc,
        query: *const u64,
        qp_count: u32,
        answer: AnswerFn,
        ctx: *mut c_void,
        out: *mut VdFpmOut,
    );
    fn vd_hmc_index_limits(
        h: *mut VdHmc,
        ty: u32,
        idx: u32,
        cnt: u32,
        sd_idx: *mut u32,
        sd_lmt: *mut u32,
        pd_idx: *mut u32,
        pd_lmt: *mut u32,
    );
    fn vd_hmc_create_all(h: *mut VdHmc, failed_type: *mut u32) -> c_int;
    fn vd_hmc_delete_all(h: *mut VdHmc) -> c_int;
    fn vd_hmc_take_sds(
        h: *mut VdHmc,
        op_cnt: *mut u32,
        ops_cap: u32,
        cmd: *mut u64,
        data: *mut u64,
        cap: u32,
        n_entries: *mut u32,
    ) -> u32;
    fn vd_hmc_sd_pa(h: *mut VdHmc, sd: u32, paged: *mut u8, valid: *mut u8) -> u64;
    fn vd_hmc_back_chunk(
        h: *mut VdHmc,
        sd_idx: u32,
        rel_pd: u32,
        pages: u32,
        data_pa: u64,
        type_out: *mut u8,
        added: *mut u8,
    ) -> c_int;
    fn vd_hmc_pd_page(h: *mut VdHmc, sd: u32, out: *mut u64) -> c_int;
    fn vd_hmc_pdinv_addr(h: *mut VdHmc) -> u64;
    fn vd_hmc_delete_pble(h: *mut VdHmc) -> c_int;
    fn vd_hmc_pble_only(h: *mut VdHmc, base: u64, cnt: u32) -> c_int;
}

/// The vendor device of one case (glue-owned; freed on drop).
struct Vendor(*mut VdHmc);

impl Drop for Vendor {
    fn drop(&mut self) {
        // SAFETY: `self.0` came from `vd_hmc_new` and is freed once.
        unsafe { vd_hmc_free(self.0) }
    }
}

/// How the device answers COMMIT_FPM_VAL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// 0: type order, packed 512-aligned; 1: type order with gaps; 2:
    /// shuffled order; 3: one object overlapping its predecessor; 4: one
    /// count changed (the device committing another count).
    pub kind: u8,
    /// First base, in 512-byte units.
    pub start: u32,
    /// Seeds the gaps, the order, which object.
    pub seed: u64,
}

/// One HMC case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HmcCase {
    /// The device's QUERY_FPM_VAL buffer.
    pub query: [u64; 24],
    pub profile: Profile,
    /// The IRD the sizing assumes (6.1: 127; the driver's decode: 8).
    pub max_hw_ird: u32,
    pub answer: Answer,
}

/// Object i's word in the query buffer (spec §3.3; ctrl.c:
/// irdma_sc_parse_fpm_query_buf): APBVT has none, SRQ (word 3) is not read
/// by 6.1.
const fn query_word(i: usize) -> Option<usize> {
    match i {
        0..=4 => Some(i + 1),
        5 => None,
        6..=14 => Some(i),
        _ => Some(i + 1),
    }
}

/// Object i's word in the commit buffer (ctrl.c: irdma_sc_cfg_iw_fpm).
const fn commit_word(i: usize) -> usize {
    if i < 15 { i } else { i + 1 }
}

/// The object sizes the device knows, from its own query buffer (spec §3.3):
/// what the answer lays objects out with.
fn device_sizes(q: &[u64; 24]) -> [u64; HMC_OBJ_COUNT] {
    core::array::from_fn(|i| match i {
        5 => 8192,
        8 | 10 | 16 | 20 => 4,
        14 => 8,
        _ => query_word(i).map_or(0, |w| 1u64.wrapping_shl((q[w] >> 32) as u32)),
    })
}

struct AnswerCtx {
    answer: Answer,
    sizes: [u64; HMC_OBJ_COUNT],
}

/// The device's COMMIT_FPM_VAL answer to `sent`: every object's count
/// echoed (APBVT: 1), a base per object. Bases are 512-byte units below
/// 2^32; counts keep 6.1's QP field width (19 bits).
fn answer_words(a: &Answer, sizes: &[u64; HMC_OBJ_COUNT], sent: &[u64; 24]) -> [u64; 24] {
    let mut rng = Rng::new(a.seed);
    let mut out = *sent;
    let mut order: Vec<usize> = (0..HMC_OBJ_COUNT).filter(|&i| i != 2).collect();
    if a.kind == 2 {
        for i in (1..order.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
    }
    let victim = order[rng.below(order.len() as u64) as usize];
    let mut next = u64::from(a.start);
    let mut prev_base = next;
    for &i in &order {
        let w = commit_word(i);
        let mut cnt = if i == 5 { 1 } else { sent[w] & 0xffff_ffff };
        if i == 0 {
            cnt &= (1 << 19) - 1;
        }
        if a.kind == 4 && i == victim && i != 5 {
            cnt = if i == 0 { rng.below(1 << 19) } else { u64::from(rng.u32_edge()) };
        }
        if a.kind == 1 {
            next += rng.below(3) * rng.pick(&[1, 7, 4096, 4095]);
        }
        let mut base = next;
        if a.kind == 3 && i == victim {
            base = prev_base;
        }
        let bytes = cnt.saturating_mul(sizes[i]);
        prev_base = base;
        next = base.saturating_add(bytes.div_ceil(512)).min(u64::from(u32::MAX));
        if i != 5 {
            out[w] = cnt;
        }
        out[w] = (out[w] & 0xffff_ffff) | (base.min(u64::from(u32::MAX)) << 32);
    }
    out[2] = 0;
    out[15] = 0;
    out
}

unsafe extern "C" fn answer_cb(sent: *const u64, answer: *mut u64, ctx: *mut c_void) {
    // SAFETY: the glue passes its 24-word commit buffer copy and the commit
    // buffer itself (24 words, not aliased by `sent`), and `ctx` is the
    // `AnswerCtx` `run_vendor` lent for the duration of the call.
    let (sent, out, ctx) = unsafe {
        (
            &*(sent as *const [u64; 24]),
            &mut *(answer as *mut [u64; 24]),
            &*(ctx as *const AnswerCtx),
        )
    };
    *out = answer_words(&ctx.answer, &ctx.sizes, sent);
}

/// What hmc.c did at bring-up.
#[derive(Clone, Debug, Default)]
struct VendorSds {
    ret: i32,
    failed_type: u32,
    entries: Vec<(u64, u64)>,
    ops: Vec<u32>,
}

fn run_vendor(c: &HmcCase, q: &[u64; 24]) -> Result<(Vendor, VdFpmOut), String> {
    let mut ret: c_int = 0;
    let proto = if c.profile.protocol == Protocol::Iwarp { 1 } else { 2 };
    // SAFETY: `ret` is a valid out pointer.
    let h = unsafe { vd_hmc_new(proto, c.max_hw_ird, &mut ret) };
    if h.is_null() {
        return Err(format!("vd_hmc_new failed: {ret}"));
    }
    let v = Vendor(h);
    let ctx = AnswerCtx { answer: c.answer, sizes: device_sizes(q) };
    let mut out = VdFpmOut::default();
    // SAFETY: `h` is live, `q` holds 24 words, `ctx` outlives the call and
    // `out` is a valid out pointer.
    unsafe {
        vd_hmc_cfg_fpm(
            h,
            q.as_ptr(),
            c.profile.qps,
            answer_cb,
            &ctx as *const AnswerCtx as *mut c_void,
            &mut out,
        )
    };
    Ok((v, out))
}

fn vendor_create_all(v: &Vendor) -> VendorSds {
    let mut failed = 0u32;
    // SAFETY: `v.0` is live; `failed` is a valid out pointer.
    let ret = unsafe { vd_hmc_create_all(v.0, &mut failed) };
    take_sds(v, ret, failed)
}

fn vendor_delete_all(v: &Vendor) -> VendorSds {
    // SAFETY: `v.0` is live.
    let ret = unsafe { vd_hmc_delete_all(v.0) };
    take_sds(v, ret, 0)
}

fn take_sds(v: &Vendor, ret: c_int, failed: u32) -> VendorSds {
    let mut ops = vec![0u32; 256];
    let mut cmd = vec![0u64; 256 * 11];
    let mut data = vec![0u64; 256 * 11];
    let mut n = 0u32;
    // SAFETY: the buffers hold the capacities passed.
    let n_ops = unsafe {
        vd_hmc_take_sds(
            v.0,
            ops.as_mut_ptr(),
            ops.len() as u32,
            cmd.as_mut_ptr(),
            data.as_mut_ptr(),
            cmd.len() as u32,
            &mut n,
        )
    };
    ops.truncate(n_ops as usize);
    let n = (n as usize).min(cmd.len());
    VendorSds {
        ret,
        failed_type: failed,
        entries: cmd.iter().zip(data.iter()).take(n).map(|(c, d)| (*c, *d)).collect(),
        ops,
    }
}

/// Per-area counters (printed at the end of a run).
pub mod stats {
    use std::sync::atomic::{AtomicU64, Ordering};

    pub static REFUSED: AtomicU64 = AtomicU64::new(0);
    /// Of those: a zero block size (6.1's query parse refuses).
    pub static REFUSED_PARSE: AtomicU64 = AtomicU64::new(0);
    /// Of those: the objects do not fit the SDs after 2000 rounds.
    pub static REFUSED_FIT: AtomicU64 = AtomicU64::new(0);
    pub static SIZED: AtomicU64 = AtomicU64::new(0);
    pub static SHRUNK: AtomicU64 = AtomicU64::new(0);
    pub static LAYOUTS: AtomicU64 = AtomicU64::new(0);
    pub static SD_ENTRIES: AtomicU64 = AtomicU64::new(0);
    pub static SD_CLEARS: AtomicU64 = AtomicU64::new(0);
    pub static PBLES: AtomicU64 = AtomicU64::new(0);
    pub static RANGES: AtomicU64 = AtomicU64::new(0);
    /// PBLE chunks backed by both (of those paged), and chunks in an SD a
    /// static object backs (left as they are by both).
    pub static CHUNKS: AtomicU64 = AtomicU64::new(0);
    pub static CHUNKS_PAGED: AtomicU64 = AtomicU64::new(0);
    pub static CHUNKS_SHARED: AtomicU64 = AtomicU64::new(0);
    /// PD entries equal byte for byte; PFHMC_PDINV values equal (backing
    /// and teardown).
    pub static PD_ENTRIES: AtomicU64 = AtomicU64::new(0);
    pub static PDINVS: AtomicU64 = AtomicU64::new(0);
    /// Bring-ups whose SD entries the driver packs into fewer ops.
    pub static REGROUPED: AtomicU64 = AtomicU64::new(0);
    /// PBLE-only cases run (`run_chunk_case`).
    pub static CHUNK_CASES: AtomicU64 = AtomicU64::new(0);

    pub fn bump(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub fn line() -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "HMC: {} sized equal ({} after shrinking), {} refused by both ({} a zero block size, {} not fitting); \
             {} committed layouts equal, {} SD ranges equal, {} PBLE locations equal, {} UPDATE_PE_SDS entries equal ({} set, {} clear; {} bring-ups grouped differently); \
             {} PBLE chunks backed equal ({} paged, {} in a static SD left alone; {} PBLE-only cases), {} PD entries equal, {} PFHMC_PDINV writes equal",
            g(&SIZED),
            g(&SHRUNK),
            g(&REFUSED),
            g(&REFUSED_PARSE),
            g(&REFUSED_FIT),
            g(&LAYOUTS),
            g(&RANGES),
            g(&PBLES),
            g(&SD_ENTRIES) + g(&SD_CLEARS),
            g(&SD_ENTRIES),
            g(&SD_CLEARS),
            g(&REGROUPED),
            g(&CHUNKS),
            g(&CHUNKS_PAGED),
            g(&CHUNKS_SHARED),
            g(&CHUNK_CASES),
            g(&PD_ENTRIES),
            g(&PDINVS)
        )
    }
}

/// A difference.
#[derive(Clone, Debug)]
pub struct HmcDiff {
    pub what: String,
}

/// The outcome of one case.
pub enum HmcOutcome {
    Same,
    Deviation(&'static str),
    Differs(HmcDiff),
}

fn differs(what: String) -> HmcOutcome {
    HmcOutcome::Differs(HmcDiff { what })
}

const EINVAL: i32 = -22;

/// 6.1's field widths where they differ from the spec's (and the
/// driver's): @0 MAX_PE_SDS 45:32 (driver 44:32), QP max 18:0 and CQ max
/// 19:0 (driver 31:0). The case's bits outside both are cleared.
fn narrow(q: &[u64; 24]) -> [u64; 24] {
    let mut n = *q;
    n[0] &= !(1u64 << 45);
    n[1] &= !0xfff8_0000;
    n[2] &= !0xfff0_0000;
    n
}

/// The vendor's query buffer: the profile's bounds as lowered maxima.
fn vendor_query(c: &HmcCase, q: &[u64; 24]) -> [u64; 24] {
    let mut v = *q;
    let lower = |w: &mut u64, bound: u32| {
        if (*w as u32) > bound {
            *w = (*w & !0xffff_ffff) | u64::from(bound);
        }
    };
    lower(&mut v[2], c.profile.cqs);
    lower(&mut v[6], c.profile.mrs);
    lower(&mut v[14], c.profile.pbles);
    if let Some(b) = c.profile.max_sds {
        let sds = (v[0] >> 32) & 0x1fff;
        if u64::from(b) < sds {
            v[0] = (v[0] & !(0x1fffu64 << 32)) | (u64::from(b) << 32);
        }
    }
    v
}

/// Runs one case on both sides.
pub fn run_hmc(c: &HmcCase) -> HmcOutcome {
    let q = narrow(&c.query);
    let mut note: Option<&'static str> = None;
    if q != c.query {
        note = Some("fpm_field_widths");
    }
    // the driver
    let dq = FpmQuery::decode(&q, false, false);
    let sized = driver_sizing(c, &dq, &mut note);
    let vq = vendor_query_61(c, &q, &mut note);
    let refused_61 = parse_refuses_61(&vq);
    if let Some(o) = roce_q1_spins(c, &q, refused_61, &sized) {
        return o;
    }

    let (v, out) = match run_vendor(c, &vq) {
        Ok(x) => x,
        Err(e) => return differs(e),
    };
    if refused_61 {
        return judge_refused_61(&out, &sized, note);
    }
    let Some((caps, sized)) = sized else {
        return differs(format!(
            "the driver's decode refused ({:?}) a buffer the vendor took (returned {}, committed {})",
            dq.err(),
            out.ret,
            out.committed
        ));
    };
    if let Some(d) = compare_query(&caps, &c.profile, &out) {
        return differs(d);
    }
    if let Some(o) = roce_ooisc(c, &caps, &out, &sized) {
        return o;
    }
    let counts = match sized {
        Ok(counts) => counts,
        Err(e) => return judge_sizing_refused(e, &out, note),
    };
    judge_commit(c, &v, &out, &caps, &counts, note)
}

/// The driver's caps and sizing of a decoded query buffer (`None`: the
/// decode refused it).
type Sized = Option<(FpmCaps, Result<HmcCounts, HmcError>)>;

/// The driver's side: the caps of the decoded buffer (the case's IRD
/// maximum, noted when it differs) and their sizing.
fn driver_sizing(
    c: &HmcCase,
    dq: &Result<FpmQuery, irdma::cqp::decode::DecodeError>,
    note: &mut Option<&'static str>,
) -> Sized {
    let caps = dq.as_ref().ok().map(|d| {
        let mut caps = FpmCaps::from(d);
        if caps.max_hw_ird != c.max_hw_ird {
            *note = note.or(Some("gen2_max_ird"));
            caps.max_hw_ird = c.max_hw_ird;
        }
        caps
    });
    caps.map(|caps| (caps, size_hmc(&caps, &c.profile)))
}

/// The query buffer 6.1 gets: `vendor_query`, and the RRF rule it lacks.
fn vendor_query_61(c: &HmcCase, q: &[u64; 24], note: &mut Option<&'static str>) -> [u64; 24] {
    let mut vq = vendor_query(c, q);
    // Without XF objects the driver (spec §3.3 @128) forces the RRF maximum
    // to 16, a rule 6.1 does not have: the vendor gets it as its RRF max.
    if (q[7] as u32) == 0 && (q[16] as u32) != 16 {
        *note = note.or(Some("rrf_min_without_xf"));
        vq[16] = (vq[16] & !0xffff_ffff) | 16;
    }
    vq
}

/// The verdict on a RoCE case whose Q1 maximum the vendor never fits, if
/// this is one.
fn roce_q1_spins(
    c: &HmcCase,
    q: &[u64; 24],
    refused_61: bool,
    sized: &Sized,
) -> Option<HmcOutcome> {
    // RoCE: 6.1 halves qpwanted while Q1 does not fit, forever when even
    // qpwanted 0 needs 512 (ctrl.c: irdma_cfg_fpm_val, irdma_q1_cnt).
    if c.profile.protocol == Protocol::RoceV2 && (q[9] as u32) < 512 && !refused_61 {
        return Some(match sized {
            None | Some((_, Err(HmcError::NoQps))) => HmcOutcome::Deviation("q1_max_below_512"),
            Some((_, r)) => differs(format!(
                "Q1 max {} < 512 on RoCE (the vendor spins forever): the driver sized {r:?}",
                q[9] as u32
            )),
        });
    }
    None
}

/// The verdict when 6.1's parse refuses the buffer.
fn judge_refused_61(out: &VdFpmOut, sized: &Sized, note: Option<&'static str>) -> HmcOutcome {
    if out.ret != EINVAL || out.committed != 0 {
        return differs(format!(
            "harness: 6.1 should refuse this query buffer, returned {} (committed {})",
            out.ret, out.committed
        ));
    }
    match sized {
        None | Some((_, Err(_))) => {
            stats::bump(&stats::REFUSED, 1);
            stats::bump(&stats::REFUSED_PARSE, 1);
            same_or(note)
        }
        Some((_, Ok(counts))) => differs(format!(
            "the vendor refuses the query buffer (a zero block size); the driver sized {:?}",
            counts.cnt
        )),
    }
}

/// The deviation of a RoCE case with OOISC objects, if this is one.
fn roce_ooisc(
    c: &HmcCase,
    caps: &FpmCaps,
    out: &VdFpmOut,
    sized: &Result<HmcCounts, HmcError>,
) -> Option<HmcOutcome> {
    // RoCE: 6.1 sizes OOISC / OOISCFFL as for iWARP (cfg_fpm_value_gen_2);
    // the driver keeps their maxima (spec §3.5 step 5). Everything after the
    // query differs then; such a case is judged up to here.
    let ooisc = |o: HmcObj| caps.obj[o.idx()].max_cnt != 0;
    let roce_ooisc =
        c.profile.protocol == Protocol::RoceV2 && (ooisc(HmcObj::Ooisc) || ooisc(HmcObj::Ooiscffl));
    let both_refused = out.committed == 0 && sized.is_err();
    if roce_ooisc && !both_refused && !matches!(sized, Err(HmcError::NoQps | HmcError::Overflow)) {
        return Some(HmcOutcome::Deviation("ooisc_roce_keeps_max"));
    }
    None
}

/// The verdict when the driver refused the sizing.
fn judge_sizing_refused(e: HmcError, out: &VdFpmOut, note: Option<&'static str>) -> HmcOutcome {
    if out.ret == EINVAL && out.committed == 0 {
        stats::bump(&stats::REFUSED, 1);
        if matches!(e, HmcError::DoesNotFit { .. }) {
            stats::bump(&stats::REFUSED_FIT, 1);
        }
        return same_or(note);
    }
    match e {
        HmcError::NoQps if out.committed == 1 && out.commit_sent[0] == 0 => {
            HmcOutcome::Deviation("no_qps_refused")
        }
        HmcError::Overflow => HmcOutcome::Deviation("fpm_sizing_overflow_refused"),
        e => differs(format!(
            "the driver refused the sizing ({e:?}); the vendor returned {} and committed {:?}",
            out.ret,
            vendor_counts(out)
        )),
    }
}

/// Both sides sized: the commit buffers, then `compare_commit`.
fn judge_commit(
    c: &HmcCase,
    v: &Vendor,
    out: &VdFpmOut,
    caps: &FpmCaps,
    counts: &HmcCounts,
    note: Option<&'static str>,
) -> HmcOutcome {
    let mut sent = [0u64; 24];
    encode_fpm_commit(&counts.cnt, &mut sent);
    if out.committed == 0 {
        return differs(format!(
            "the vendor refused the sizing ({}); the driver committed {:?}",
            out.ret, counts.cnt
        ));
    }
    if sent[..22] != out.commit_sent[..22] {
        let pble = commit_word(HmcObj::Pble.idx());
        let only_pble = (0..22).all(|w| w == pble || sent[w] == out.commit_sent[w]);
        let cap = caps.obj[HmcObj::Pble.idx()].max_cnt.min(c.profile.pbles);
        if only_pble && counts.rounds > 1 && counts.get(HmcObj::Pble) == cap {
            return HmcOutcome::Deviation("pble_grow_capped");
        }
        return differs(format!(
            "commit buffers differ (rounds {}): vendor {:x?} driver {:x?}",
            counts.rounds,
            &out.commit_sent[..22],
            &sent[..22]
        ));
    }
    stats::bump(&stats::SIZED, 1);
    if counts.rounds > 1 {
        stats::bump(&stats::SHRUNK, 1);
    }
    compare_commit(c, v, out, caps, &sent, note)
}

/// Whether 6.1's irdma_sc_parse_fpm_query_buf refuses the buffer (-EINVAL):
/// XF or Q1 block size 0, or an RRF / OOISC free-list block size 0 with a
/// free-list maximum.
fn parse_refuses_61(q: &[u64; 24]) -> bool {
    let hi = |w: usize| q[w] >> 32;
    hi(8) == 0
        || hi(10) == 0
        || (hi(17) == 0 && q[17] as u32 != 0)
        || (hi(21) == 0 && q[21] as u32 != 0)
}

fn same_or(note: Option<&'static str>) -> HmcOutcome {
    match note {
        Some(id) => HmcOutcome::Deviation(id),
        None => HmcOutcome::Same,
    }
}

fn vendor_counts(out: &VdFpmOut) -> Vec<u64> {
    (0..HMC_OBJ_COUNT).map(|i| out.commit_sent[commit_word(i)]).collect()
}

/// The decoded query: what both read from the buffer (6.1 does not read
/// SRQ's word, so SRQ is left out).
fn compare_query(caps: &FpmCaps, p: &Profile, out: &VdFpmOut) -> Option<String> {
    for o in HmcObj::ALL {
        let i = o.idx();
        if o == HmcObj::Srq {
            continue;
        }
        let (mut d, v) = (caps.obj[i], (out.max_cnt[i], out.size[i]));
        // the profile's bounds reach the vendor as lowered maxima
        d.max_cnt = match o {
            HmcObj::Cq => d.max_cnt.min(p.cqs),
            HmcObj::Mr => d.max_cnt.min(p.mrs),
            HmcObj::Pble => d.max_cnt.min(p.pbles),
            _ => d.max_cnt,
        };
        if (d.max_cnt, d.size) != v {
            return Some(format!(
                "{o:?}: the driver decoded max {} size {:#x}, the vendor max {} size {:#x}",
                d.max_cnt, d.size, v.0, v.1
            ));
        }
    }
    let d = (
        p.max_sds.map_or(caps.max_sds, |b| b.min(caps.max_sds)),
        caps.xf_block_size,
        caps.q1_block_size,
        caps.rrf_block_size,
        caps.ooiscf_block_size,
        caps.ht_multiplier,
        caps.timer_bucket,
        caps.first_sd_index,
    );
    let v = (
        out.max_sds,
        u64::from(out.xf_block_size),
        u64::from(out.q1_block_size),
        u64::from(out.rrf_block_size),
        u64::from(out.ooiscf_block_size),
        out.ht_multiplier,
        out.timer_bucket,
        out.first_sd_index,
    );
    (d != v).then(|| {
        format!(
            "query misc (max_sds, xf, q1, rrf, ooiscf block, ht mult, timer bucket, first SD): driver {d:?} vendor {v:?}"
        )
    })
}

/// Steps 4–6: the decoded commit, SD ranges and the bring-up SD entries.
fn compare_commit(
    c: &HmcCase,
    v: &Vendor,
    out: &VdFpmOut,
    caps: &FpmCaps,
    sent: &[u64; 24],
    note: Option<&'static str>,
) -> HmcOutcome {
    let sizes: [u64; HMC_OBJ_COUNT] = core::array::from_fn(|i| caps.obj[i].size);
    let answer = answer_words(&c.answer, &device_sizes(&narrow(&c.query)), sent);
    let fc = match FpmCommit::decode(&answer, &sizes) {
        Ok(fc) => fc,
        Err(_) => return HmcOutcome::Deviation("fpm_sizing_overflow_refused"),
    };
    for o in HmcObj::ALL {
        let i = o.idx();
        if o == HmcObj::Srq {
            continue;
        }
        let d = fc.obj[i];
        if (d.cnt, d.base) != (out.cnt[i], out.base[i]) {
            return differs(format!(
                "committed {o:?}: driver count {} base {:#x}, vendor count {} base {:#x}",
                d.cnt, d.base, out.cnt[i], out.base[i]
            ));
        }
    }
    if fc.sd_cnt != out.sd_cnt {
        // 6.1 takes the highest base whatever its count; the driver (and
        // the spec, §3.4) only among objects with a count
        let last_empty = (0..HMC_OBJ_COUNT)
            .filter(|&i| i != 2)
            .max_by_key(|&i| (out.base[i], core::cmp::Reverse(i)))
            .is_some_and(|i| out.cnt[i] == 0);
        if last_empty {
            return HmcOutcome::Deviation("commit_sd_count_skips_empty_objects");
        }
        return differs(format!("SD count: driver {} vendor {}", fc.sd_cnt, out.sd_cnt));
    }
    if committed_sd_count(&sizes, &fc.obj) != Ok(fc.sd_cnt) {
        return differs(format!(
            "the driver's two SD counts disagree: decode {} committed_sd_count {:?}",
            fc.sd_cnt,
            committed_sd_count(&sizes, &fc.obj)
        ));
    }
    let layout = match HmcLayout::new(&sizes, &fc.obj) {
        Ok(l) => l,
        Err(HmcError::Overlap(..)) => return HmcOutcome::Deviation("commit_overlap_refused"),
        Err(HmcError::Overflow) => return HmcOutcome::Deviation("fpm_sizing_overflow_refused"),
        Err(e) => return differs(format!("the driver refused the committed layout: {e:?}")),
    };
    stats::bump(&stats::LAYOUTS, 1);
    // 5. SD ranges of every object with a count
    for o in HmcObj::ALL {
        let i = o.idx();
        if o == HmcObj::Srq || fc.obj[i].cnt == 0 {
            continue;
        }
        let (mut sd, mut sl, mut pd, mut pl) = (0u32, 0u32, 0u32, 0u32);
        // SAFETY: `v.0` is live; the four are valid out pointers.
        unsafe {
            vd_hmc_index_limits(v.0, i as u32, 0, fc.obj[i].cnt, &mut sd, &mut sl, &mut pd, &mut pl)
        };
        let r = layout.sd_range(o);
        if (r.first, r.end) != (sd, sl) {
            return differs(format!(
                "{o:?} SD range: driver {}..{}, vendor (irdma_find_sd_index_limit) {sd}..{sl}",
                r.first, r.end
            ));
        }
        stats::bump(&stats::RANGES, 1);
    }
    // 5b. the PBLE pool's chunks and PBLE addresses against hmc.c's index
    // arithmetic (pble.c calls irdma_find_sd_index_limit /
    // irdma_find_pd_index_limit for a chunk: one SD, its pages)
    let pl = *layout.pble();
    let limits = |ty: usize, idx: u32, cnt: u32| {
        let (mut sd, mut sl, mut pd, mut pdl) = (0u32, 0u32, 0u32, 0u32);
        // SAFETY: `v.0` is live; the four are valid out pointers.
        unsafe {
            vd_hmc_index_limits(v.0, ty as u32, idx, cnt, &mut sd, &mut sl, &mut pd, &mut pdl)
        };
        (sd, sl, pd, pdl)
    };
    let pble = HmcObj::Pble.idx();
    let n_chunks = pl.chunks().count();
    for ch in pl.chunks().enumerate().filter(|(k, _)| *k < 32 || *k + 2 > n_chunks).map(|(_, c)| c)
    {
        let got = limits(pble, ch.first_index, ch.count);
        let want = (ch.sd_index, ch.sd_index + 1, ch.first_pd, ch.first_pd + ch.pages);
        if got != want {
            return differs(format!(
                "PBLE chunk {ch:?}: driver SD/PD ranges {want:?}, vendor (sd, sd_limit, pd, pd_limit) {got:?}"
            ));
        }
        stats::bump(&stats::RANGES, 1);
    }
    let mut rng = Rng::new(c.answer.seed ^ 0x9b1e);
    for _ in 0..8 {
        let idx = match rng.below(3) {
            0 => pl.first_index().saturating_add(rng.below(u64::from(pl.count()).max(1)) as u32),
            1 => pl.end_index().saturating_sub(rng.below(2) as u32),
            _ => rng.u32_edge(),
        };
        let inside = idx < fc.obj[pble].cnt;
        match (pl.locate(idx), inside) {
            (Some(loc), _) => {
                let got = limits(pble, idx, 1);
                if (got.0, got.2) != (loc.sd_index, loc.pd_index) {
                    return differs(format!(
                        "PBLE {idx}: driver SD {} PD {}, vendor SD {} PD {}",
                        loc.sd_index, loc.pd_index, got.0, got.2
                    ));
                }
                stats::bump(&stats::PBLES, 1);
            }
            // outside the committed object: hmc.c refuses it too
            (None, false) => stats::bump(&stats::PBLES, 1),
            // committed but not usable by the pool (before the first 4 KiB
            // boundary, or the partial last page): the driver's choice
            (None, true) => {}
        }
    }
    // 6. bring-up SD programming, when the SD table is small enough to back
    // (hmc.c keeps 8192 new SD indexes per object; 2 MiB mapped per SD)
    if out.ret != 0 || out.sd_cnt > 256 {
        return if out.ret == 0 {
            same_or(note)
        } else {
            differs(format!("the vendor returned {} after committing", out.ret))
        };
    }
    let vs = vendor_create_all(v);
    if vs.ret != 0 {
        return differs(format!(
            "the vendor's irdma_sc_create_hmc_obj refused object {} ({}) on a layout the driver accepts",
            vs.failed_type, vs.ret
        ));
    }
    let mut drv = Vec::new();
    // hmc.c's grouping: per object, its new SDs in ops of at most 11
    // (irdma_sc_create_hmc_obj -> irdma_hmc_sd_grp)
    let mut per_object_ops: Vec<u32> = Vec::new();
    for o in HmcObj::ALL {
        if o == HmcObj::Pble || fc.obj[o.idx()].cnt == 0 {
            continue;
        }
        let new = layout.new_static_sds(o).count();
        per_object_ops.extend(
            (0..new.div_ceil(MAX_SD_ENTRIES))
                .map(|k| (new - k * MAX_SD_ENTRIES).min(MAX_SD_ENTRIES) as u32),
        );
        for sd in layout.new_static_sds(o) {
            let (mut paged, mut valid) = (0u8, 0u8);
            // SAFETY: `v.0` is live; both are valid out pointers.
            let pa = unsafe { vd_hmc_sd_pa(v.0, sd, &mut paged, &mut valid) };
            let Ok(sd16) = u16::try_from(sd) else {
                return differs(format!("SD {sd} does not fit the driver's SD index"));
            };
            match SdEntry::set(sd16, pa, paged == 0) {
                Ok(e) => drv.push((u64::from(e.cmd), e.data)),
                Err(e) => return differs(format!("SdEntry::set({sd}, {pa:#x}) refused: {e:?}")),
            }
        }
    }
    if drv != vs.entries {
        return differs(format!(
            "UPDATE_PE_SDS entries: driver {drv:x?}, vendor {:x?} (in {} ops)",
            vs.entries,
            vs.ops.len()
        ));
    }
    // 6b. grouping into UPDATE_PE_SDS ops: the vendor's must be per object;
    // the driver's (device::hmc::SdStore::back_static) packs the same
    // entries MAX_SD_ENTRIES to an op across objects, so fewer ops
    // (deviation sd_update_grouping)
    if vs.ops != per_object_ops {
        return differs(format!(
            "harness: hmc.c grouped the SD entries in ops {:?}, expected per object {per_object_ops:?}",
            vs.ops
        ));
    }
    let packed: Vec<u32> = drv.chunks(MAX_SD_ENTRIES).map(|g| g.len() as u32).collect();
    let mut note = note;
    if packed != per_object_ops {
        note = note.or(Some("sd_update_grouping"));
        stats::bump(&stats::REGROUPED, 1);
    }
    stats::bump(&stats::SD_ENTRIES, drv.len() as u64);
    // 8a. PBLE chunks backed (paged / direct SDs, PD entries, PDINV)
    let statics: std::collections::BTreeSet<u32> = layout.static_sds().collect();
    let backed = match back_chunks(v, &statics, &pl, c.answer.seed) {
        Ok(b) => b,
        Err(d) => return differs(d),
    };
    // 7. teardown: every backed SD cleared once (hmc.c: irdma_sc_del_hmc_obj,
    // irdma_clr_sd_entry, clearing an SD when its last object goes); the
    // order differs (the driver clears in backing order), so as sets
    let vd = vendor_delete_all(v);
    if vd.ret != 0 {
        return differs(format!("the vendor's irdma_sc_del_hmc_obj failed: {}", vd.ret));
    }
    let mut want: Vec<(u64, u64)> = Vec::new();
    for sd in layout.static_sds() {
        match u16::try_from(sd).ok().map(|s| SdEntry::clear(s, true)) {
            Some(Ok(e)) => want.push((u64::from(e.cmd), e.data)),
            _ => return differs(format!("SdEntry::clear({sd}) refused")),
        }
    }
    let mut got = vd.entries.clone();
    want.sort_unstable();
    got.sort_unstable();
    if want != got {
        return differs(format!("SD clear entries (sorted): driver {want:x?}, vendor {got:x?}"));
    }
    stats::bump(&stats::SD_CLEARS, want.len() as u64);
    // 8b. the PBLE object's teardown: PD removals and its SD clears
    match pble_teardown(v, &backed) {
        Ok(None) => {}
        Ok(Some(id)) => return HmcOutcome::Deviation(id),
        Err(d) => return differs(d),
    }
    same_or(note)
}

/// hmc.c's SD entry type values (hmc.h: enum irdma_sd_entry_type).
const SD_TYPE_PAGED: u8 = 1;
const SD_TYPE_DIRECT: u8 = 2;
/// The type codes (IRDMA_SD_TYPE_*) `vd_hmc_back_chunk` reports.
fn sd_type(kind: SdKind) -> u8 {
    match kind {
        SdKind::Paged => SD_TYPE_PAGED,
        SdKind::Direct => SD_TYPE_DIRECT,
    }
}

/// A chunk both sides backed (not shared with a static object's SD).
struct Backed {
    chunk: PbleChunk,
}

/// The PFHMC_PDINV values the vendor wrote since the last call (the glue's
/// BAR log, filtered to the PDINV register), and whether anything else was
/// written.
fn take_pdinvs(v: &Vendor) -> (Vec<u32>, usize) {
    let mut a = vec![0u64; 4096];
    let mut val = vec![0u32; 4096];
    // SAFETY: both buffers hold the capacity passed; `v.0` is live.
    let (n, inv) = unsafe {
        (
            crate::ffi::vd_bar_take(a.as_mut_ptr(), val.as_mut_ptr(), a.len() as u32) as usize,
            vd_hmc_pdinv_addr(v.0),
        )
    };
    // a log longer than the glue keeps (VD_LOG_MAX) counts as "other"
    let kept = n.min(a.len());
    let pdinv: Vec<u32> = (0..kept).filter(|&i| a[i] == inv).map(|i| val[i]).collect();
    let other = n - pdinv.len();
    (pdinv, other)
}

/// Chooses up to six of the pool's chunks (a prefix of one to five, or
/// the whole pool when it has at most six, as pble.c add_pble_prm and the
/// driver grow the pool in FPM order; one case in four adds the last chunk
/// or a random later one, leaving a gap), backs each on both sides and compares: whether
/// the SD is backed at all (an SD a static object already backs is used as
/// it is), its type (direct only for a whole SD), the PD page byte for byte,
/// the PFHMC_PDINV values in order, and the one UPDATE_PE_SDS op with its
/// one entry, against `irdma::test_support` (the steps
/// `SdStore::back_pble_chunk` performs).
fn back_chunks(
    v: &Vendor,
    statics: &std::collections::BTreeSet<u32>,
    pl: &PbleLayout,
    seed: u64,
) -> Result<Vec<Backed>, String> {
    let n = pl.chunks().count();
    if n == 0 {
        return Ok(Vec::new());
    }
    let chunks = pick_chunks(pl, n, seed);
    let _ = take_pdinvs(v);
    let mut backed = Vec::new();
    for (k, ch) in chunks.into_iter().enumerate() {
        if let Some(b) = back_chunk(v, statics, k, ch)? {
            backed.push(b);
        }
    }
    Ok(backed)
}

/// The chunks `back_chunks` backs, of the pool's `n`, in FPM order.
fn pick_chunks(pl: &PbleLayout, n: usize, seed: u64) -> Vec<PbleChunk> {
    let mut rng = Rng::new(seed ^ 0x5d_c0de);
    // a small pool: every chunk half the time (its last one is partial,
    // so paged unless the pool ends on an SD boundary)
    let prefix =
        if n <= 6 && rng.below(2) == 0 { n } else { 1 + rng.below(n.min(5) as u64) as usize };
    let mut pick: Vec<usize> = (0..prefix).collect();
    // one in four: also the last chunk, or a random later one (a gap)
    if rng.below(4) == 0 {
        pick.push(if rng.below(2) == 0 { n - 1 } else { rng.below(n as u64) as usize });
    }
    pick.sort_unstable();
    pick.dedup();
    pl.chunks()
        .enumerate()
        .filter(|(k, _)| pick.binary_search(k).is_ok())
        .map(|(_, ch)| ch)
        .collect()
}

/// Backs the `k`th chosen chunk on both sides and compares (`None`: an SD a
/// static object already backs, used as it is).
fn back_chunk(
    v: &Vendor,
    statics: &std::collections::BTreeSet<u32>,
    k: usize,
    ch: PbleChunk,
) -> Result<Option<Backed>, String> {
    let data_pa = 0x7_0000_0000u64 + ((k as u64) << 21);
    let (mut ty, mut added) = (0u8, 0u8);
    // SAFETY: `v.0` is live; both are valid out pointers.
    let ret = unsafe {
        vd_hmc_back_chunk(v.0, ch.sd_index, ch.rel_pd(), ch.pages, data_pa, &mut ty, &mut added)
    };
    if ret != 0 {
        return Err(format!("the vendor refused to back PBLE chunk {ch:?}: {ret}"));
    }
    let vs = take_sds(v, 0, 0);
    let (invs, other) = take_pdinvs(v);
    if other != 0 {
        return Err(format!("chunk {ch:?}: the vendor wrote {other} other registers"));
    }
    let shared = statics.contains(&ch.sd_index);
    if shared {
        // the driver's SdStore::back_pble_chunk: an SD it holds is used
        // as it is; hmc.c / pble.c: a valid SD is not touched
        if added != 0 || !vs.entries.is_empty() || !invs.is_empty() || ty != SD_TYPE_DIRECT {
            return Err(format!(
                "chunk {ch:?} in a static object's SD: the vendor backed it again \
                 (type {ty}, entries {:x?}, PDINV {invs:x?})",
                vs.entries
            ));
        }
        stats::bump(&stats::CHUNKS_SHARED, 1);
        return Ok(None);
    }
    if added == 0 || ty != sd_type(ch.kind) {
        return Err(format!(
            "chunk {ch:?}: the driver backs it {:?}, the vendor's type is {ty} (added {added})",
            ch.kind
        ));
    }
    let want_inv = compare_pd_page(v, &ch, data_pa)?;
    if want_inv != invs {
        return Err(format!(
            "chunk {ch:?}: PFHMC_PDINV values: driver {want_inv:x?}, vendor {invs:x?}"
        ));
    }
    stats::bump(&stats::PDINVS, invs.len() as u64);
    compare_chunk_sd(v, &ch, &vs)?;
    stats::bump(&stats::CHUNKS, 1);
    if ch.kind == SdKind::Paged {
        stats::bump(&stats::CHUNKS_PAGED, 1);
    }
    Ok(Some(Backed { chunk: ch }))
}

/// A paged chunk: the driver's PD entries against the vendor's PD page.
/// The driver's PDINV values (none for a direct chunk).
fn compare_pd_page(v: &Vendor, ch: &PbleChunk, data_pa: u64) -> Result<Vec<u32>, String> {
    // the driver's PD entries and PDINV values
    let mut pd = [0u64; 512];
    let mut want_inv = Vec::new();
    if ch.kind == SdKind::Paged {
        test_support::paged_chunk_steps(ch, data_pa, |step| match step {
            PdStep::Entry { slot, value } => {
                if let Some(e) = pd.get_mut(slot as usize) {
                    *e = value;
                }
            }
            PdStep::Inv(x) => want_inv.push(x),
        });
        let mut got = [0u64; 512];
        // SAFETY: `v.0` is live; `got` holds 512 words.
        if unsafe { vd_hmc_pd_page(v.0, ch.sd_index, got.as_mut_ptr()) } != 1 {
            return Err(format!("chunk {ch:?}: the vendor's paged SD has no PD page"));
        }
        if got != pd {
            let diff: Vec<(usize, u64, u64)> =
                (0..512).filter(|&i| got[i] != pd[i]).map(|i| (i, pd[i], got[i])).collect();
            return Err(format!(
                "chunk {ch:?}: PD entries (slot, driver, vendor) differ: {diff:x?}"
            ));
        }
        stats::bump(&stats::PD_ENTRIES, u64::from(ch.pages));
    }
    Ok(want_inv)
}

/// The SD entry: one op of one entry on both sides.
fn compare_chunk_sd(v: &Vendor, ch: &PbleChunk, vs: &VendorSds) -> Result<(), String> {
    let (mut paged, mut valid) = (0u8, 0u8);
    // SAFETY: `v.0` is live; both are valid out pointers.
    let table_pa = unsafe { vd_hmc_sd_pa(v.0, ch.sd_index, &mut paged, &mut valid) };
    let sd16 = u16::try_from(ch.sd_index).map_err(|_| format!("SD {} > u16", ch.sd_index))?;
    let e = test_support::chunk_sd_entry(sd16, table_pa, ch.kind)
        .map_err(|e| format!("chunk {ch:?}: chunk_sd_entry refused: {e:?}"))?;
    if vs.ops != [1] || vs.entries != [(u64::from(e.cmd), e.data)] {
        return Err(format!(
            "chunk {ch:?}: UPDATE_PE_SDS: driver one op [{:x?}], vendor ops {:?} entries {:x?}",
            (e.cmd, e.data),
            vs.ops,
            vs.entries
        ));
    }
    Ok(())
}

/// The PBLE object's teardown after the static objects': hmc.c's
/// irdma_sc_del_hmc_obj (every valid PD removed with irdma_remove_pd_bp,
/// which zeroes the entry and writes PFHMC_PDINV, then the SDs cleared)
/// against `test_support::paged_release_steps` for every backed paged chunk
/// and `SdEntry::clear` for every backed chunk's SD (the steps
/// `SdStore::clear_all` performs). PDINV values are compared as a sorted
/// list: each names one (SD, PD) and invalidates only that cached PD, so
/// the order between them carries nothing (the vendor walks the PBLE range
/// by PD index, the driver its SDs in backing order); what is ordered, each
/// PDINV after its zeroed entry and all of them before the SD clear, both
/// sides do by construction (hmc.c source; the driver's unit test
/// device::hmc::tests). The SD clears are compared as a set too (step 7).
///
/// Linux 6.1's irdma_finish_del_sd_reg clears `del_sd_cnt` consecutive SDs
/// from the first one it collected (irdma_hmc_sd_grp(sd_indexes[0],
/// del_sd_cnt)), not the SDs it collected: with a gap between backed PBLE
/// SDs it clears an SD it never backed and leaves the last backed one
/// programmed. That case is classified (deviation
/// `pble_teardown_clears_sd_range`) once the vendor's clears are exactly
/// that consecutive range.
fn pble_teardown(v: &Vendor, backed: &[Backed]) -> Result<Option<&'static str>, String> {
    let _ = take_pdinvs(v);
    // SAFETY: `v.0` is live.
    let ret = unsafe { vd_hmc_delete_pble(v.0) };
    let vs = take_sds(v, ret, 0);
    let (mut invs, other) = take_pdinvs(v);
    if ret != 0 {
        return Err(format!("the vendor's irdma_sc_del_hmc_obj(PBLE) failed: {ret}"));
    }
    if other != 0 {
        return Err(format!("PBLE teardown: the vendor wrote {other} other registers"));
    }
    let mut want_inv = Vec::new();
    let mut want_clr = Vec::new();
    for b in backed {
        let ch = &b.chunk;
        let sd16 = u16::try_from(ch.sd_index).map_err(|_| format!("SD {} > u16", ch.sd_index))?;
        if ch.kind == SdKind::Paged {
            test_support::paged_release_steps(sd16, ch.rel_pd(), ch.pages, |step| {
                if let PdStep::Inv(x) = step {
                    want_inv.push(x)
                }
            });
        }
        match SdEntry::clear(sd16, ch.kind == SdKind::Direct) {
            Ok(e) => want_clr.push((u64::from(e.cmd), e.data)),
            Err(e) => return Err(format!("SdEntry::clear({sd16}) refused: {e:?}")),
        }
    }
    want_inv.sort_unstable();
    invs.sort_unstable();
    if want_inv != invs {
        return Err(format!(
            "PBLE teardown PFHMC_PDINV values (sorted): driver {want_inv:x?}, vendor {invs:x?}"
        ));
    }
    let mut got = vs.entries.clone();
    want_clr.sort_unstable();
    got.sort_unstable();
    if want_clr != got {
        // the consecutive range from the first backed SD (6.1's rule)
        let first = backed.iter().map(|b| b.chunk.sd_index).min();
        let range: Option<Vec<(u64, u64)>> = first.map(|f| {
            (f..f + want_clr.len() as u32)
                .filter_map(|sd| {
                    let direct = backed
                        .iter()
                        .find(|b| b.chunk.sd_index == sd)
                        .is_none_or(|b| b.chunk.kind == SdKind::Direct);
                    let e = SdEntry::clear(u16::try_from(sd).ok()?, direct).ok()?;
                    Some((u64::from(e.cmd), e.data))
                })
                .collect()
        });
        if range.is_some_and(|mut r| {
            r.sort_unstable();
            r == got
        }) {
            return Ok(Some("pble_teardown_clears_sd_range"));
        }
        return Err(format!(
            "PBLE teardown SD clears (sorted): driver {want_clr:x?}, vendor {got:x?}"
        ));
    }
    stats::bump(&stats::PDINVS, invs.len() as u64);
    stats::bump(&stats::SD_CLEARS, want_clr.len() as u64);
    Ok(None)
}

// ---- PBLE-only cases: chunk positions and sizes ------------------------------

/// A PBLE object alone (no static objects, no FPM sizing): its base and
/// count, and the seed of which chunks get backed. Covers what the full
/// cases rarely reach: first chunks that start mid-SD in an SD of their own
/// (paged), whole-SD chunks (direct), pools ending mid-SD, bases off the
/// 4 KiB boundary, PD ranges ending right at an SD boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkCase {
    /// FPM byte address of PBLE 0 (8-byte aligned).
    pub base: u64,
    /// Committed PBLEs.
    pub count: u32,
    pub seed: u64,
}

const SD: u64 = 0x20_0000;

pub fn gen_chunk_case(rng: &mut Rng) -> ChunkCase {
    let sd = rng.below(24);
    let off = match rng.below(6) {
        0 => 0,
        1 => SD - 0x1000,
        2 => rng.below(512) * 0x1000,
        3 => rng.below(SD / 8) * 8,
        4 => SD - 8,
        _ => 0x1000 - 8 * (1 + rng.below(4)),
    };
    let base = sd * SD + off;
    let pages = match rng.below(5) {
        0 => 1 + rng.below(8),
        1 => 512 * (1 + rng.below(4)),
        2 => 512 - off / 0x1000 + rng.below(3),
        _ => 1 + rng.below(512 * 5),
    };
    let jitter = rng.pick(&[0, 0, 1, 8, 511, 513]);
    let count = (pages * 512 + jitter).min(u64::from(u32::MAX)) as u32;
    ChunkCase { base, count, seed: rng.next_u64() }
}

/// Runs one PBLE-only case: hmc.c's PBLE object set up directly (its base,
/// count, size 8 and an SD table that just holds it, as
/// irdma_sc_parse_fpm_commit_buf would leave it), then steps 8a and 8b.
pub fn run_chunk_case(c: &ChunkCase) -> HmcOutcome {
    let pl = match PbleLayout::new(c.base, c.count) {
        Ok(pl) => pl,
        Err(e) => return differs(format!("PbleLayout::new refused {c:?}: {e:?}")),
    };
    let mut ret: c_int = 0;
    // SAFETY: `ret` is a valid out pointer.
    let h = unsafe { vd_hmc_new(2, 0, &mut ret) };
    if h.is_null() {
        return differs(format!("vd_hmc_new failed: {ret}"));
    }
    let v = Vendor(h);
    // SAFETY: `v.0` is live.
    let ret = unsafe { vd_hmc_pble_only(v.0, c.base, c.count) };
    if ret != 0 {
        return differs(format!("vd_hmc_pble_only({c:?}) failed: {ret}"));
    }
    let backed = match back_chunks(&v, &Default::default(), &pl, c.seed) {
        Ok(b) => b,
        Err(d) => return differs(d),
    };
    stats::bump(&stats::CHUNK_CASES, 1);
    match pble_teardown(&v, &backed) {
        Ok(None) => HmcOutcome::Same,
        Ok(Some(id)) => HmcOutcome::Deviation(id),
        Err(d) => differs(d),
    }
}

pub fn print_chunk_case(c: &ChunkCase, d: &HmcDiff) -> String {
    serde_json::json!({
        "area": "hmc",
        "function": "add_pble_prm / irdma_sc_del_hmc_obj (PBLE)",
        "input": {"pble_base": format!("{:#x}", c.base), "pble_count": c.count, "seed": format!("{:#x}", c.seed)},
        "difference": d.what,
    })
    .to_string()
}

// ---- generation -----------------------------------------------------------

/// A count biased to the interesting sizes (a power of two, one off it, small).
fn count(rng: &mut Rng, bits: u32) -> u64 {
    let m = (1u64 << bits) - 1;
    match rng.below(6) {
        0 => 0,
        1 => 1u64 << rng.below(u64::from(bits)),
        2 => ((1u64 << rng.below(u64::from(bits))) + rng.pick(&[0, 1, 511, 512])) & m,
        3 => rng.below(4096),
        _ => rng.next_u64() & m,
    }
}

/// A log2 object size: the usual 5..=12, sometimes 0..=63.
fn log2(rng: &mut Rng) -> u64 {
    if rng.chance(1, 10) { rng.below(64) } else { rng.range(5, 12) }
}

/// A QUERY_FPM_VAL buffer as a device might write it.
pub fn gen_query(rng: &mut Rng) -> [u64; 24] {
    let mut q = [0u64; 24];
    // realistic E810 maxima (the mock's defaults) or random ones
    let real = rng.chance(1, 2);
    q[0] = gen_sd_word(rng);
    gen_obj_words(rng, real, &mut q);
    gen_edges(rng, &mut q);
    q
}

/// @0: the first SD index and the SD maximum (bit 45 set now and then).
fn gen_sd_word(rng: &mut Rng) -> u64 {
    let first_sd = if rng.chance(1, 2) { 0 } else { rng.field(14) };
    let max_sds = match rng.below(5) {
        0 => rng.field(13),
        1 => rng.range(1, 64),
        2 => rng.range(64, 512),
        _ => rng.range(512, 8191),
    };
    let mut w = first_sd | (max_sds << 32);
    if rng.chance(1, 30) {
        w |= 1 << 45;
    }
    w
}

/// Each object's count and log2 size: the mock's (`real`, scaled) or random.
fn gen_obj_words(rng: &mut Rng, real: bool, q: &mut [u64; 24]) {
    // the mock's E810 defaults (tests/mock-bar), scaled by 2^-4..2^2
    const REAL: [(u64, u64); HMC_OBJ_COUNT] = [
        (16384, 9),
        (32768, 6),
        (0, 6),
        (1 << 20, 5),
        (2048, 6),
        (1, 13),
        (1 << 18, 6),
        (1 << 20, 6),
        (1 << 20, 2),
        (1 << 20, 6),
        (1 << 20, 2),
        (1 << 16, 3),
        (1024, 6),
        (1024, 6),
        (1 << 22, 3),
        (1 << 20, 6),
        (1 << 20, 2),
        (16384, 6),
        (4096, 6),
        (1 << 20, 6),
        (1 << 20, 2),
    ];
    for (i, &(rmax, rlg)) in REAL.iter().enumerate() {
        let Some(w) = query_word(i) else { continue };
        let bits: u32 = match i {
            0 => 19,
            1 => 20,
            12 | 13 => 16,
            _ => 28,
        };
        let (cnt, lg) = if real && !rng.chance(1, 20) {
            let k = rng.below(7);
            let c = if k < 4 { rmax >> k } else { rmax << (k - 3) };
            (c.min((1 << bits) - 1), rlg)
        } else {
            (count(rng, bits), log2(rng))
        };
        q[w] = cnt | (lg << 32);
    }
}

/// Stray high bits, the Q1 floor, the free-list words, zeroed maxima and @120.
fn gen_edges(rng: &mut Rng, q: &mut [u64; 24]) {
    if rng.chance(1, 30) {
        q[1] |= rng.field(32) & 0xfff8_0000;
        q[2] |= rng.field(32) & 0xfff0_0000;
    }
    // RoCE Q1 needs 512 at least (else 6.1 hangs: classified, not run)
    if rng.chance(29, 30) {
        let v = (q[9] as u32).max(512);
        q[9] = (q[9] & !0xffff_ffff) | u64::from(v);
    }
    // free-list words: count | block size << 32
    for (w, edge0) in [(8usize, 40u64), (10, 40), (17, 20), (21, 20)] {
        let bs = if rng.chance(1, edge0) { 0 } else { rng.pick(&[1u64, 2, 4, 8, 16, 64, 128]) };
        q[w] = (q[w] & 0xffff_ffff) | (bs << 32);
        if rng.chance(1, 8) {
            q[w] &= !0xffff_ffff;
        }
    }
    if rng.chance(1, 8) {
        q[16] &= !0xffff_ffff;
    }
    if rng.chance(1, 8) {
        q[20] &= !0xffff_ffff;
    }
    if rng.chance(1, 8) {
        q[7] &= !0xffff_ffff;
    }
    // @120: max CEQs, HT multiplier, timer bucket
    let ht = if rng.chance(1, 20) { rng.field(4) } else { rng.range(1, 8) };
    let tb = if rng.chance(1, 20) { rng.field(16) } else { rng.pick(&[1u64, 64, 128, 256]) };
    q[15] = rng.field(10) | (ht << 16) | (tb << 32);
    // FSIMC below 2^30: 6.1's HTE power-of-two loop spins past 2^31
    q[13] &= !0xc000_0000;
}

/// A resource profile (the driver's bounds; 6.1 gets them as lowered maxima).
pub fn gen_profile(rng: &mut Rng) -> Profile {
    let bound = |rng: &mut Rng, small: u64| -> u32 {
        match rng.below(4) {
            0 => u32::MAX,
            1 => rng.below(small) as u32,
            _ => rng.u32_edge(),
        }
    };
    Profile {
        qps: match rng.below(8) {
            0 => 1 << 20,
            1 => rng.below(4) as u32,
            2 => 1 << rng.below(20),
            _ => rng.range(1, 1 << 19) as u32,
        },
        cqs: bound(rng, 4096),
        mrs: bound(rng, 1 << 20),
        pbles: bound(rng, 1 << 24),
        max_sds: match rng.below(3) {
            0 => None,
            1 => Some(rng.range(1, 128) as u32),
            _ => Some(rng.field(14) as u32),
        },
        protocol: if rng.chance(1, 3) { Protocol::Iwarp } else { Protocol::RoceV2 },
    }
}

pub fn gen_hmc(rng: &mut Rng) -> HmcCase {
    let mut query = gen_query(rng);
    let profile = gen_profile(rng);
    // RoCE with OOISC objects is judged only up to the decoded query
    // (deviation ooisc_roce_keeps_max): mostly offer none
    if profile.protocol == Protocol::RoceV2 && rng.chance(3, 4) {
        query[20] &= !0xffff_ffff;
        query[21] &= !0xffff_ffff;
    }
    let max_hw_ird = match rng.below(4) {
        0 => 127,
        1 | 2 => 8,
        _ => rng.range(1, 255) as u32,
    };
    let answer = Answer {
        kind: match rng.below(10) {
            0..=3 => 0,
            4 | 5 => 1,
            6 => 2,
            7 => 3,
            _ => 4,
        },
        start: if rng.chance(1, 2) { 0 } else { rng.below(1 << 14) as u32 * 4096 },
        seed: rng.next_u64(),
    };
    HmcCase { query, profile, max_hw_ird, answer }
}

// ---- shrinking and printing -------------------------------------------------

fn fails(c: &HmcCase) -> bool {
    matches!(run_hmc(c), HmcOutcome::Differs(_))
}

/// Makes a differing case smaller while it still differs: profile bounds
/// lifted, query words zeroed or simplified, the answer made plain.
pub fn shrink_hmc(mut c: HmcCase, mut d: HmcDiff) -> (HmcCase, HmcDiff) {
    let mut changed = true;
    let mut rounds = 0;
    while changed && rounds < 8 {
        changed = false;
        rounds += 1;
        let mut tries: Vec<HmcCase> = Vec::new();
        let mut t = c.clone();
        t.profile.max_sds = None;
        tries.push(t);
        for f in 0..3 {
            let mut t = c.clone();
            match f {
                0 => t.profile.cqs = u32::MAX,
                1 => t.profile.mrs = u32::MAX,
                _ => t.profile.pbles = u32::MAX,
            }
            tries.push(t);
        }
        let mut t = c.clone();
        t.answer = Answer { kind: 0, start: 0, seed: 0 };
        tries.push(t);
        let mut t = c.clone();
        t.max_hw_ird = 8;
        tries.push(t);
        for w in 1..22 {
            let mut t = c.clone();
            t.query[w] &= 0xffff_ffff_0000_0000;
            tries.push(t);
            let mut t = c.clone();
            t.query[w] = (t.query[w] & 0xffff_ffff_0000_0000) | u64::from((t.query[w] as u32) / 2);
            tries.push(t);
        }
        for t in tries {
            if t != c && fails(&t) {
                c = t;
                changed = true;
            }
        }
    }
    if let HmcOutcome::Differs(nd) = run_hmc(&c) {
        d = nd;
    }
    (c, d)
}

/// The vendor's input for a case (the query buffer as it reaches 6.1), or
/// `None` when 6.1 would spin forever on it.
fn vendor_input(c: &HmcCase) -> Option<[u64; 24]> {
    let q = narrow(&c.query);
    let mut vq = vendor_query(c, &q);
    if (q[7] as u32) == 0 {
        vq[16] = (vq[16] & !0xffff_ffff) | 16;
    }
    let hangs = c.profile.protocol == Protocol::RoceV2 && (q[9] as u32) < 512;
    (!hangs || parse_refuses_61(&vq)).then_some(vq)
}

/// The case as JSON in the spirit of cqp-vectors.json: the input buffers as
/// hex words, the profile, the vendor's output as the expected one (its
/// return code, the commit buffer it wrote, the SD count it derived), and
/// what differed.
pub fn print_hmc(c: &HmcCase, d: &HmcDiff) -> String {
    let hex = |ws: &[u64]| ws.iter().map(|w| format!("\"{w:#x}\"")).collect::<Vec<_>>().join(",");
    let expected = match vendor_input(c).map(|vq| run_vendor(c, &vq)) {
        Some(Ok((_, out))) => format!(
            "{{\"ret\":{},\"committed\":{},\"commit_fpm_buf\":[{}],\"sd_cnt\":{}}}",
            out.ret,
            out.committed,
            hex(&out.commit_sent[..22]),
            out.sd_cnt
        ),
        Some(Err(e)) => format!("{{\"error\":{e:?}}}"),
        None => "{\"hangs\":true}".to_string(),
    };
    let words: Vec<String> = c.query.iter().map(|w| format!("\"{w:#x}\"")).collect();
    let p = &c.profile;
    format!(
        "{{\"area\":\"hmc\",\"function\":\"irdma_cfg_fpm_val\",\"input\":{{\"query_fpm_buf\":[{}],\
         \"qp_count\":{},\"cqs\":{},\"mrs\":{},\"pbles\":{},\"max_sds\":{},\"protocol\":\"{}\",\
         \"max_hw_ird\":{},\"commit_answer\":{{\"kind\":{},\"start\":{},\"seed\":\"{:#x}\"}}}},\
         \"expected\":{},\"difference\":{:?}}}",
        words.join(","),
        p.qps,
        p.cqs,
        p.mrs,
        p.pbles,
        p.max_sds.map_or("null".to_string(), |v| v.to_string()),
        if p.protocol == Protocol::Iwarp { "iwarp" } else { "rocev2" },
        c.max_hw_ird,
        c.answer.kind,
        c.answer.start,
        c.answer.seed,
        expected,
        d.what
    )
}
