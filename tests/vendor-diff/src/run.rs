//! Runs one case on both implementations and compares, post by post: the
//! return code, every byte of the quanta the post wrote (NOP pads and the
//! WQE), the tracking entry, head/tail/polarity, and the doorbell writes.

use core::ffi::c_int;
use core::ptr::NonNull;

use irdma::hal::regs;
use irdma::uk::sq::{PostedWqe, SendKind, SqError, SqOp, SqPost, SqWrTrk};
use irdma::uk::{QueueMem, Rq, RqError, Sq};
use irdma::wr::Sge;
use irdma_testkit::RecBar;

use crate::case::{Case, Op, SqPostIn};
use crate::ffi::{self, IbSge, VdQp, VdQpState, VdSqPost, api};

/// What the compared posts exercised (summed over a run, printed at the end).
pub mod stats {
    use std::sync::atomic::{AtomicU64, Ordering};

    pub static SQ_POSTED: AtomicU64 = AtomicU64::new(0);
    pub static SQ_PADDED: AtomicU64 = AtomicU64::new(0);
    pub static SQ_WRAPPED: AtomicU64 = AtomicU64::new(0);
    pub static SQ_EINVAL: AtomicU64 = AtomicU64::new(0);
    pub static SQ_ENOMEM: AtomicU64 = AtomicU64::new(0);
    pub static RQ_POSTED: AtomicU64 = AtomicU64::new(0);
    pub static RQ_REFUSED: AtomicU64 = AtomicU64::new(0);
    pub static CQ_OK: AtomicU64 = AtomicU64::new(0);
    pub static CQ_ERR: AtomicU64 = AtomicU64::new(0);
    pub static CQ_EMPTY: AtomicU64 = AtomicU64::new(0);
    pub static CQ_DROPPED: AtomicU64 = AtomicU64::new(0);

    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub fn line() -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "SQ posts equal: {} posted ({} with NOP pads, {} landing in slot 0), {} -EINVAL, {} -ENOMEM; RQ: {} posted, {} refused; \
             CQ polls equal: {} completions, {} error completions, {} empty, {} consumed and dropped",
            g(&SQ_POSTED),
            g(&SQ_PADDED),
            g(&SQ_WRAPPED),
            g(&SQ_EINVAL),
            g(&SQ_ENOMEM),
            g(&RQ_POSTED),
            g(&RQ_REFUSED),
            g(&CQ_OK),
            g(&CQ_ERR),
            g(&CQ_EMPTY),
            g(&CQ_DROPPED)
        )
    }
}

const EINVAL: i32 = 22;
const ENOMEM: i32 = 12;

/// A ring buffer the vendor code writes through a raw pointer: all access
/// from Rust goes through that same pointer.
pub(crate) struct VRing {
    pub(crate) ptr: *mut u64,
    len: usize,
    _buf: Vec<u64>,
}

impl VRing {
    pub(crate) fn new(len: usize) -> Self {
        Self::with_slack(len, 0)
    }
    /// A ring of `len` qwords followed by `slack` more the vendor may write
    /// (its `irdma_clr_wqes` clears 128 quanta ahead, past the end of a
    /// ring under 256 quanta); `read`/`write` still stop at `len`.
    pub(crate) fn with_slack(len: usize, slack: usize) -> Self {
        let mut buf = vec![0u64; len.max(1) + slack];
        VRing { ptr: buf.as_mut_ptr(), len, _buf: buf }
    }
    pub(crate) fn read(&self, i: usize) -> u64 {
        assert!(i < self.len);
        // SAFETY: `i < len` and `ptr` addresses `_buf`'s `len` qwords, which
        // live as long as `self`; no Rust reference to them exists.
        unsafe { self.ptr.add(i).read() }
    }
    pub(crate) fn write(&self, i: usize, v: u64) {
        assert!(i < self.len);
        // SAFETY: as in `read`.
        unsafe { self.ptr.add(i).write(v) }
    }
}

/// The vendor QP (glue-owned) over two `VRing`s.
pub(crate) struct VQp {
    pub(crate) q: *mut VdQp,
    pub(crate) sq: VRing,
    pub(crate) rq: VRing,
}

impl Drop for VQp {
    fn drop(&mut self) {
        // SAFETY: `q` came from `vd_qp_new` and is freed once.
        unsafe { ffi::vd_qp_free(self.q) }
    }
}

impl VQp {
    pub(crate) fn state(&self) -> VdQpState {
        let mut s = VdQpState::default();
        // SAFETY: `q` is live; `s` is a valid out pointer.
        unsafe { ffi::vd_qp_state(self.q, &mut s) };
        s
    }
}

/// Takes the vendor's recorded register writes.
pub(crate) fn vendor_writes() -> Vec<(u64, u32)> {
    let mut a = [0u64; 16];
    let mut v = [0u32; 16];
    // SAFETY: both arrays hold 16 entries, the capacity passed.
    let n = unsafe { ffi::vd_bar_take(a.as_mut_ptr(), v.as_mut_ptr(), 16) } as usize;
    a.iter().zip(v.iter()).take(n.min(16)).map(|(a, v)| (*a, *v)).collect()
}

pub(crate) fn mem(v: &mut [u64]) -> QueueMem<'_> {
    let base = NonNull::new(v.as_mut_ptr()).unwrap_or(NonNull::dangling());
    // SAFETY: the slice is mutably borrowed for the view's lifetime and the
    // pointer is valid for `len` qwords.
    unsafe { QueueMem::from_raw(base, v.len()) }
}

/// One set-up WRITE `fp` (over `sges`, the driver's `sges_d`) posted on the
/// vendor QPs `vs` and the driver's SQ; both must take it.
fn twin_sq_post(
    vs: &[&VQp],
    sq: &mut Sq<'_>,
    fp: &SqPostIn,
    sges: &[IbSge],
    sges_d: &[Sge],
) -> Result<(), String> {
    let vpost = vendor_post(fp, sges);
    let mut idx = 0;
    // SAFETY: `vpost` points at `sges`, alive for the calls; the QPs are live.
    let r = vs.iter().fold(0, |r, v| r | unsafe { ffi::vd_sq_post(v.q, &vpost, &mut idx) });
    let d = sq.post(&driver_post(fp, sges_d));
    if r != 0 || d.is_err() {
        return Err(format!("vendor {r}, driver {d:?}"));
    }
    Ok(())
}

/// One set-up receive `wr_id` of the one SGE `sge` (the driver's `sge_d`)
/// posted on the vendor QPs `vs` and the driver's RQ; both must take it.
fn twin_rq_post(
    vs: &[&VQp],
    rq: &mut Rq<'_>,
    wr_id: u64,
    sge: &[IbSge; 1],
    sge_d: &[Sge],
) -> Result<(), String> {
    let mut idx = 0;
    // SAFETY: one SGE at `sge`, alive for the calls; the QPs are live.
    let r = vs
        .iter()
        .fold(0, |r, v| r | unsafe { ffi::vd_rq_post(v.q, wr_id, sge.as_ptr(), 1, &mut idx) });
    let d = rq.post(wr_id, sge_d);
    if r != 0 || d.is_err() {
        return Err(format!("vendor {r}, driver {d:?}"));
    }
    Ok(())
}

/// Retires everything posted on the vendor QPs `vs`.
fn consume_all(vs: &[&VQp]) {
    for v in vs {
        // SAFETY: the QP is live.
        unsafe { ffi::vd_qp_consume_all(v.q) };
    }
}

/// How the two sides answered one compared post.
enum Answers<P> {
    /// Both posted: the driver's post.
    Posted(P),
    /// Both refused, with this errno.
    Refused(i32),
    /// The driver refused an input where a listed deviation says it does.
    Deviation(&'static str),
    /// Anything else, said.
    Differs(String),
}

/// Judges the vendor's return `vret` (0 or an errno) against the driver's
/// `dr` for one post (`what` in messages): a refusal on one side only, or
/// with another errno, differs unless `deviation` names the driver's
/// refusal (also where the vendor refused for another reason, e.g. a full
/// ring, and the driver refused for the deviation first).
fn answers<P, E: Copy + std::fmt::Debug>(
    vret: i32,
    dr: Result<P, E>,
    what: &str,
    errno: fn(E) -> i32,
    deviation: impl Fn(E) -> Option<&'static str>,
) -> Answers<P> {
    match (vret, dr) {
        (0, Ok(p)) => Answers::Posted(p),
        (r, Err(e)) if r == errno(e) => Answers::Refused(r),
        (r, Err(e)) => match deviation(e) {
            Some(id) => Answers::Deviation(id),
            None if r == 0 => {
                Answers::Differs(format!("vendor posted {what}, driver refused: {e:?}"))
            }
            None => Answers::Differs(format!("{what}: vendor returned -{r}, driver {e:?}")),
        },
        (r, Ok(_)) => Answers::Differs(format!("vendor returned -{r}, driver posted {what}")),
    }
}

/// What a difference was.
#[derive(Clone, Debug)]
pub struct Diff {
    /// Index into `Case::ops` (`usize::MAX`: set-up).
    pub op: usize,
    pub what: String,
}

/// The outcome of one case.
#[derive(Debug)]
pub enum Outcome {
    Same,
    /// The driver deliberately differs (the id is in deviations.toml); the
    /// rest of the case is not compared (the two states diverged).
    Deviation(&'static str),
    Differs(Diff),
}

/// What the vendor did on the failing op, for printing as a vector.
#[derive(Clone, Debug, Default)]
pub struct VendorPost {
    pub ret: i32,
    pub wqe_idx: u32,
    pub quanta: u32,
    pub valid: bool,
    pub head_before: u32,
    pub tail_before: u32,
    pub polarity_before: u8,
    pub head_after: u32,
    pub tail_after: u32,
    /// The quanta written, from `head_before` (pads then WQE), 4 words each.
    pub words: Vec<[u64; 4]>,
    /// Per word, the bytes the vendor wrote (0xff each).
    pub masks: Vec<[u64; 4]>,
    pub doorbells: Vec<u32>,
    pub trk: (u64, u32, u16),
}

pub(crate) fn sges_of(p: &SqPostIn, bufs: &mut Vec<Vec<u8>>) -> Vec<IbSge> {
    let mut s = p.sges.clone();
    if p.inline() {
        let mut off = 0usize;
        for g in &mut s {
            let len = g.length as usize;
            let chunk = p.data.get(off..off + len).map(<[u8]>::to_vec).unwrap_or(vec![0; len]);
            off += len;
            bufs.push(chunk);
            g.addr = bufs.last().map_or(0, |b| b.as_ptr() as u64);
        }
    }
    s
}

pub(crate) fn to_sge(s: &[IbSge]) -> Vec<Sge> {
    s.iter().map(|g| Sge { addr: g.addr, length: g.length, lkey: g.lkey }).collect()
}

pub(crate) fn driver_post<'s>(p: &SqPostIn, sges: &'s [Sge]) -> SqPost<'s> {
    let inline = p.inline();
    let op = match p.api {
        api::RDMA_WRITE | api::INLINE_RDMA_WRITE => SqOp::Write {
            remote_addr: p.remote_addr,
            rkey: p.rkey,
            solicited: p.op_type == 0x0d,
            sges,
            inline,
        },
        api::RDMA_READ => {
            SqOp::Read { remote_addr: p.remote_addr, rkey: p.rkey, local_inv: p.read_inv, sges }
        }
        api::SEND | api::INLINE_SEND => SqOp::Send {
            kind: SendKind {
                solicited: matches!(p.op_type, 5 | 6),
                invalidate: matches!(p.op_type, 4 | 6),
            },
            stag_to_inv: p.stag_to_inv,
            qkey: p.qkey,
            dest_qp: p.dest_qp,
            ah_id: p.ah_id,
            udp_hdr: p.udp_hdr,
            l4len: p.l4len,
            sges,
            inline,
        },
        api::LOCAL_INV => SqOp::LocalInv { stag: p.target_stag },
        _ => SqOp::Nop,
    };
    SqPost {
        wr_id: p.wr_id,
        op,
        signaled: p.signaled,
        read_fence: p.read_fence,
        local_fence: p.local_fence,
        report_rtt: p.report_rtt,
        imm: p.imm,
    }
}

pub(crate) fn vendor_post(p: &SqPostIn, sges: &[IbSge]) -> VdSqPost {
    VdSqPost {
        wr_id: p.wr_id,
        remote_addr: p.remote_addr,
        sges: if sges.is_empty() { core::ptr::null() } else { sges.as_ptr() },
        num_sges: sges.len() as u32,
        api: p.api,
        op_type: u32::from(p.op_type),
        rkey: p.rkey,
        imm_data: p.imm.unwrap_or(0),
        stag_to_inv: p.stag_to_inv,
        qkey: p.qkey,
        dest_qp: p.dest_qp,
        ah_id: p.ah_id,
        target_stag: p.target_stag,
        signaled: p.signaled.into(),
        read_fence: p.read_fence.into(),
        local_fence: p.local_fence.into(),
        imm_data_valid: p.imm.is_some().into(),
        report_rtt: p.report_rtt.into(),
        udp_hdr: p.udp_hdr.into(),
        l4len: p.l4len,
        read_inv_stag: p.read_inv.into(),
        post_sq: p.post_sq.into(),
        pad: [0; 7],
    }
}

fn errno_sq(e: SqError) -> i32 {
    if e == SqError::Full { ENOMEM } else { EINVAL }
}

fn errno_rq(e: RqError) -> i32 {
    if e == RqError::Full { ENOMEM } else { EINVAL }
}

/// Every id `deviation_of` / `deviation_of_rq` can return; deviations.toml
/// must list exactly these.
pub const KNOWN_DEVIATIONS: &[&str] = &[
    "imm_on_op_without_imm",
    "sge_length_over_31_bits",
    "ah_id_over_17_bits",
    "cqe_wqe_idx_not_outstanding",
    "sq_flush_past_outstanding_nops",
    "cqe_names_a_nop_pad",
    "sq_flush_reports_signaled_nop",
    "sq_first_flush_skips_unsignaled_before_index",
    "rq_error_parks_for_every_receive",
    "major_0xfffe_is_a_flush",
    // counted by the re-deriver (regen/dpcq.rs): the differential's QPs are RC
    "ud_sq_major_0xe_is_success",
];

/// A fill pattern for ring memory before a post: unwritten bytes keep it on
/// both sides, so only what a post writes is compared.
/// The twin's pattern is the complement, so every byte differs and a byte
/// the vendor leaves alone always shows.
fn pattern(op: usize, i: usize, twin: bool) -> u64 {
    let p = (0xa5a5_0000_0000_0000 ^ ((op as u64) << 32) ^ (i as u64))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    if twin { !p } else { p }
}

/// Bytes equal in `a` and `b` (0xff each): what the vendor wrote, found by
/// running it on two rings filled with different patterns.
fn same_bytes(a: u64, b: u64) -> u64 {
    let x = a ^ b;
    (0..8).fold(0u64, |m, k| if (x >> (8 * k)) & 0xff == 0 { m | 0xff << (8 * k) } else { m })
}

/// The deviation a vendor-accepted post the driver refused falls under.
pub fn deviation_of(p: &SqPostIn, e: SqError) -> Option<&'static str> {
    let gathers = !p.inline() && matches!(p.api, api::RDMA_WRITE | api::RDMA_READ | api::SEND);
    if p.imm.is_some()
        && matches!(p.api, api::RDMA_READ | api::LOCAL_INV | api::NOP)
        && e == SqError::ImmNotAllowed
    {
        return Some("imm_on_op_without_imm");
    }
    if gathers && p.sges.iter().any(|s| s.length > 0x7fff_ffff) && e == SqError::InvalidField {
        return Some("sge_length_over_31_bits");
    }
    let send = matches!(p.api, api::SEND | api::INLINE_SEND);
    if send && p.ah_id >> irdma::uk::sq::AH_ID_BITS != 0 && e == SqError::InvalidField {
        return Some("ah_id_over_17_bits");
    }
    None
}

pub fn deviation_of_rq(sges: &[IbSge], e: RqError) -> Option<&'static str> {
    if sges.iter().any(|s| s.length > 0x7fff_ffff) && e == RqError::InvalidField {
        return Some("sge_length_over_31_bits");
    }
    None
}

/// Runs `case`; `vp` receives the vendor's view of the op that differed.
pub fn run(case: &Case, vp: &mut Option<(usize, VendorPost)>) -> Outcome {
    match run_inner(case, vp) {
        Ok(o) => o,
        Err(d) => Outcome::Differs(d),
    }
}

pub(crate) fn set_up(what: String) -> Diff {
    Diff { op: usize::MAX, what }
}

/// The filler WRITE (one SGE, unsignaled, with the doorbell).
pub(crate) fn filler_post(sges: &[IbSge]) -> SqPostIn {
    SqPostIn {
        api: api::RDMA_WRITE,
        op_type: 0,
        wr_id: 0xf111,
        remote_addr: 0x7e00_0020_0000,
        rkey: 1,
        imm: None,
        stag_to_inv: 0,
        qkey: 0,
        dest_qp: 0,
        ah_id: 0,
        udp_hdr: false,
        l4len: 0,
        target_stag: 0,
        sges: sges.to_vec(),
        data: Vec::new(),
        signaled: false,
        read_fence: false,
        local_fence: false,
        report_rtt: false,
        read_inv: false,
        // rung like the vendor harness's fillers, so the vendor's "head
        // moved since the last doorbell" test starts fresh
        post_sq: true,
    }
}

pub(crate) fn vendor_qp(c: &crate::case::Cfg) -> Result<VQp, Diff> {
    vendor_qp_slack(c, 0)
}

/// [`vendor_qp`] with `slack` qwords after the SQ ring (`VRing::with_slack`).
pub(crate) fn vendor_qp_slack(c: &crate::case::Cfg, slack: usize) -> Result<VQp, Diff> {
    vendor_qp_typed(c, slack, 3)
}

/// [`vendor_qp_slack`] for the glue's QP type `qp_type` (3: RC).
pub(crate) fn vendor_qp_typed(
    c: &crate::case::Cfg,
    slack: usize,
    qp_type: u8,
) -> Result<VQp, Diff> {
    let stride = 1usize << c.rq_shift;
    let sq = VRing::with_slack(c.sq_quanta as usize * 4, slack);
    let rq = VRing::new(c.rq_size as usize * stride * 4);
    let mut ret: c_int = 0;
    // SAFETY: the rings are `sq_quanta` and `rq_size << rq_shift` quanta
    // long and outlive the QP (both are owned by the `VQp`).
    let q = unsafe {
        ffi::vd_qp_new(
            sq.ptr,
            c.sq_quanta,
            rq.ptr,
            c.rq_size,
            c.rq_shift,
            c.max_frags,
            c.rq_frags,
            c.max_inline,
            c.qp_id,
            qp_type,
            &mut ret,
        )
    };
    if q.is_null() {
        return Err(set_up(format!("vendor irdma_uk_qp_init failed: {ret}")));
    }
    Ok(VQp { q, sq, rq })
}

fn run_inner(case: &Case, vp: &mut Option<(usize, VendorPost)>) -> Result<Outcome, Diff> {
    let c = &case.cfg;
    let ring = c.sq_quanta as usize;
    let stride = 1usize << c.rq_shift;
    // --- the vendor, twice: the twin runs the same posts on rings filled
    // with another pattern, so the bytes a post writes are known exactly.
    let v = vendor_qp(c)?;
    let v2 = vendor_qp(c)?;
    // SAFETY: `v.q` is live.
    let v_db = unsafe { ffi::vd_qp_db_addr(v.q) };
    // --- driver
    let mut sq_mem = vec![0u64; ring * 4];
    let mut trk = vec![SqWrTrk::default(); ring];
    let mut rq_mem = vec![0u64; c.rq_size as usize * stride * 4];
    let mut rq_wrid = vec![0u64; c.rq_size as usize];
    let mut sq =
        Sq::new(mem(&mut sq_mem), &mut trk, c.sq_quanta, c.max_frags, c.max_inline, c.qp_id)
            .map_err(|e| set_up(format!("driver Sq::new: {e:?}")))?;
    // SAFETY: inline SGE addresses always point at live payload buffers the
    // runner built for the post (`sges_of`).
    unsafe { sq.enable_inline() };
    let mut rq = Rq::new(mem(&mut rq_mem), &mut rq_wrid, c.rq_size, c.rq_shift, c.rq_frags)
        .map_err(|e| set_up(format!("driver Rq::new: {e:?}")))?;
    let bar = RecBar::default();

    reach_positions(case, &[&v, &v2], &mut sq, &mut rq)?;
    // The vendor's doorbell logic reads the device's SQ tail from the
    // shadow area: the model is a device that caught up with every
    // doorbell (its tail at the last doorbell's head).
    vendor_writes();

    let mut run = PostRun { case, v: &v, v2: &v2, v_db, sq, rq, bar };
    for (i, op) in case.ops.iter().enumerate() {
        let vs = run.state_before(i)?;
        let end = match op {
            Op::Sq(p) => run.sq_post(i, p, &vs, vp)?,
            Op::Rq { wr_id, sges } => run.rq_post(i, *wr_id, sges, &vs)?,
        };
        if let Some(o) = end {
            return Ok(o);
        }
    }
    Ok(Outcome::Same)
}

/// --- reach the ring positions: fillers (consumed at once), then the
/// outstanding posts, on both vendor QPs `vs` and the driver's rings.
fn reach_positions(
    case: &Case,
    vs: &[&VQp; 2],
    sq: &mut Sq<'_>,
    rq: &mut Rq<'_>,
) -> Result<(), Diff> {
    let filler = [IbSge { addr: 0x7f00_0010_0040, length: 256, lkey: 0xabcd00 }];
    let filler_d = to_sge(&filler);
    for _ in 0..case.sq_filler {
        let fp = filler_post(&filler);
        twin_sq_post(vs, sq, &fp, &filler, &filler_d)
            .map_err(|e| set_up(format!("filler post: {e}")))?;
        consume_all(vs);
        sq.consume_all();
    }
    for _ in 0..case.rq_filler {
        twin_rq_post(vs, rq, 0xf222, &filler, &filler_d)
            .map_err(|e| set_up(format!("rq filler post: {e}")))?;
        consume_all(vs);
        rq.consume_all();
    }
    let one = [IbSge { addr: 0x7d00_0030_0080, length: 512, lkey: 0xcafe00 }];
    let one_d = to_sge(&one);
    for _ in 0..case.sq_outstanding {
        let mut fp = filler_post(&one);
        fp.wr_id = 0xf555;
        twin_sq_post(vs, sq, &fp, &one, &one_d)
            .map_err(|e| set_up(format!("outstanding post: {e}")))?;
    }
    for _ in 0..case.rq_outstanding {
        twin_rq_post(vs, rq, 0xf333, &one, &one_d)
            .map_err(|e| set_up(format!("outstanding receive: {e}")))?;
    }
    Ok(())
}

/// The vendor's answer to one SQ post (the twin's agreed).
struct VSqPost {
    ret: i32,
    idx: u32,
    /// Its doorbell writes (`u32::MAX`: a write elsewhere).
    db: Vec<u32>,
    /// Per quantum of the WQE: the bytes it wrote (equal on both QPs).
    masks: Vec<[u64; 4]>,
    /// Its tracking entry: wr_id, wr_len, quanta.
    trk: (u64, u32, u16),
}

/// Both sides' QPs while a case's ops run.
struct PostRun<'r, 'm> {
    case: &'r Case,
    v: &'r VQp,
    v2: &'r VQp,
    /// The vendor's doorbell address.
    v_db: u64,
    sq: Sq<'m>,
    rq: Rq<'m>,
    bar: RecBar,
}

impl PostRun<'_, '_> {
    /// The vendor's QP state before op `i`, which must agree with the
    /// driver's.
    fn state_before(&self, i: usize) -> Result<VdQpState, Diff> {
        let (v, sq, rq) = (self.v, &self.sq, &self.rq);
        let vs = v.state();
        if vs.sq_head != sq.head() || vs.sq_tail != sq.tail() || vs.rq_head != rq.head() {
            return Err(Diff {
                op: i,
                what: format!(
                    "state before: vendor sq {}/{} rq {}, driver sq {}/{} rq {}",
                    vs.sq_head,
                    vs.sq_tail,
                    vs.rq_head,
                    sq.head(),
                    sq.tail(),
                    rq.head()
                ),
            });
        }
        Ok(vs)
    }

    /// Op `i`, an SQ post `p` (the vendor's state before: `vs`); what the
    /// vendor did goes to `vp`. `Some` ends the case.
    fn sq_post(
        &mut self,
        i: usize,
        p: &SqPostIn,
        vs: &VdQpState,
        vp: &mut Option<(usize, VendorPost)>,
    ) -> Result<Option<Outcome>, Diff> {
        let d = |what: String| Diff { op: i, what };
        let (v, ring) = (self.v, self.case.cfg.sq_quanta as usize);
        let head = vs.sq_head as usize;
        for k in 0..16 * 4 {
            let w = (head * 4 + k) % (ring * 4);
            v.sq.write(w, pattern(i, w, false));
            self.v2.sq.write(w, pattern(i, w, true));
            self.sq.mem().write(w, pattern(i, w, false));
        }
        let mut bufs = Vec::new();
        let sges = sges_of(p, &mut bufs);
        let dsges = to_sge(&sges);
        let vpost = vendor_post(p, &sges);
        let mut vr = self.vendor_sq_post(&vpost).map_err(d)?;
        let dr = self.sq.post(&driver_post(p, &dsges));
        if p.post_sq && dr.is_ok() {
            self.sq.ring_doorbell(&self.bar);
        }
        let ddb: Vec<u32> = self
            .bar
            .take()
            .into_iter()
            .map(|(o, val)| if o == regs::WQEALLOC { val } else { u32::MAX })
            .collect();
        let va = v.state();
        *vp = Some((i, self.vendor_wqe(&mut vr, vs, &va)));
        let posted = match answers(vr.ret, dr, "the WR", errno_sq, |e| deviation_of(p, e)) {
            Answers::Posted(pw) => pw,
            Answers::Deviation(id) => return Ok(Some(Outcome::Deviation(id))),
            Answers::Differs(m) => return Err(d(m)),
            Answers::Refused(r) => {
                if self.sq.head() != vs.sq_head || va.sq_head != vs.sq_head {
                    return Err(d("a refused post moved the head".into()));
                }
                if !vr.db.is_empty() || !ddb.is_empty() {
                    return Err(d(format!(
                        "a refused post rang: vendor {vdb:x?}, driver {ddb:x?}",
                        vdb = vr.db
                    )));
                }
                stats::bump(if r == ENOMEM { &stats::SQ_ENOMEM } else { &stats::SQ_EINVAL });
                return Ok(None);
            }
        };
        self.sq_posted(&posted, &vr, &va, head, &ddb).map_err(d)?;
        Ok(None)
    }

    /// The vendor's post of `vpost` on both its QPs (the twin must answer
    /// alike), with the doorbell writes of the first.
    fn vendor_sq_post(&self, vpost: &VdSqPost) -> Result<VSqPost, String> {
        let (v, v2) = (self.v, self.v2);
        // SAFETY: `v.q` is live.
        unsafe { ffi::vd_qp_set_hw_tail(v.q, ffi::vd_qp_initial_head(v.q)) };
        let mut vidx = u32::MAX;
        // SAFETY: `vpost.sges` points at `sges` (alive), inline
        // addresses at `bufs` (alive).
        let vret = -unsafe { ffi::vd_sq_post(v.q, vpost, &mut vidx) };
        let vdb: Vec<u32> = vendor_writes()
            .into_iter()
            .map(|(a, val)| if a == self.v_db { val } else { u32::MAX })
            .collect();
        let mut vidx2 = u32::MAX;
        // SAFETY: as above, on the twin.
        let vret2 = -unsafe {
            ffi::vd_qp_set_hw_tail(v2.q, ffi::vd_qp_initial_head(v2.q));
            ffi::vd_sq_post(v2.q, vpost, &mut vidx2)
        };
        vendor_writes();
        if (vret2, vidx2) != (vret, vidx) {
            return Err(format!("the vendor twin differs: {vret2}/{vidx2} vs {vret}/{vidx}"));
        }
        Ok(VSqPost { ret: vret, idx: vidx, db: vdb, masks: Vec::new(), trk: (0, 0, 0) })
    }

    /// What the vendor's post (`vr`; its state before `vs`, after `va`)
    /// left: the WQE's words, the bytes it wrote (into `vr.masks`) and its
    /// tracking entry (into `vr.trk`), as a [`VendorPost`].
    fn vendor_wqe(&self, vr: &mut VSqPost, vs: &VdQpState, va: &VdQpState) -> VendorPost {
        let (c, v, ring) = (&self.case.cfg, self.v, self.case.cfg.sq_quanta as usize);
        let head = vs.sq_head as usize;
        let quanta = (va.sq_head + c.sq_quanta - vs.sq_head) % c.sq_quanta;
        let words: Vec<[u64; 4]> = (0..quanta as usize)
            .map(|q| {
                let b = ((head + q) % ring) * 4;
                [v.sq.read(b), v.sq.read(b + 1), v.sq.read(b + 2), v.sq.read(b + 3)]
            })
            .collect();
        vr.masks = (0..quanta as usize)
            .map(|q| {
                let b = ((head + q) % ring) * 4;
                core::array::from_fn(|k| same_bytes(v.sq.read(b + k), self.v2.sq.read(b + k)))
            })
            .collect();
        let t = &mut vr.trk;
        // SAFETY: `v.q` is live; out pointers are valid.
        unsafe { ffi::vd_qp_trk(v.q, vr.idx, &mut t.0, &mut t.1, &mut t.2) };
        VendorPost {
            ret: vr.ret,
            wqe_idx: vr.idx,
            quanta: if vr.ret == 0 { (va.sq_head + c.sq_quanta - vr.idx) % c.sq_quanta } else { 0 },
            valid: va.swqe_polarity != 0,
            head_before: vs.sq_head,
            tail_before: vs.sq_tail,
            polarity_before: vs.swqe_polarity,
            head_after: va.sq_head,
            tail_after: va.sq_tail,
            words,
            masks: vr.masks.clone(),
            doorbells: vr.db.clone(),
            trk: vr.trk,
        }
    }

    /// After both posted: the driver's WQE (`posted`, from quantum `head`)
    /// against the vendor's (`vr`, its state after `va`), and the
    /// doorbells (`ddb`).
    fn sq_posted(
        &self,
        posted: &PostedWqe,
        vr: &VSqPost,
        va: &VdQpState,
        head: usize,
        ddb: &[u32],
    ) -> Result<(), String> {
        let (v, sq, ring, vidx) = (self.v, &self.sq, self.case.cfg.sq_quanta as usize, vr.idx);
        let (masks, t) = (&vr.masks, vr.trk);
        if posted.wqe_idx != vidx {
            return Err(format!("wqe_idx: vendor {vidx}, driver {}", posted.wqe_idx));
        }
        if sq.head() != va.sq_head || sq.tail() != va.sq_tail {
            return Err(format!(
                "head/tail after: vendor {}/{}, driver {}/{}",
                va.sq_head,
                va.sq_tail,
                sq.head(),
                sq.tail()
            ));
        }
        if posted.valid != (va.swqe_polarity != 0) {
            return Err(format!("valid bit: vendor {}, driver {}", va.swqe_polarity, posted.valid));
        }
        // Every byte the vendor wrote must be the driver's; bytes it
        // left alone inside the WQE's quanta are free (the device
        // ignores them); past the WQE the driver must write nothing.
        for (q, k) in (0..16usize).flat_map(|q| (0..4).map(move |k| (q, k))) {
            let b = ((head + q) % ring) * 4;
            let (vw, dw) = (v.sq.read(b + k), sq.mem().read(b + k));
            let m = masks.get(q).map_or(u64::MAX, |w| w[k]);
            if (vw ^ dw) & m != 0 {
                let slot = (head + q) % ring;
                return Err(format!(
                    "quantum {slot} word +{}: vendor {vw:#018x}, driver {dw:#018x} \
                     (vendor-written bytes {m:#018x})",
                    k * 8
                ));
            }
        }
        let dt = sq.trk(vidx).copied().unwrap_or_default();
        if (dt.wr_id, dt.wr_len, u16::from(dt.quanta)) != t {
            return Err(format!(
                "sq_wrtrk[{vidx}]: vendor {t:x?}, driver ({:#x}, {}, {})",
                dt.wr_id, dt.wr_len, dt.quanta
            ));
        }
        if vr.db != ddb {
            return Err(format!("doorbell writes: vendor {:x?}, driver {ddb:x?}", vr.db));
        }
        stats::bump(&stats::SQ_POSTED);
        if posted.pad > 0 {
            stats::bump(&stats::SQ_PADDED);
        }
        if vidx == 0 {
            stats::bump(&stats::SQ_WRAPPED);
        }
        Ok(())
    }

    /// Op `i`, a receive `wr_id` over `sges` (the vendor's state before:
    /// `vs`). `Some` ends the case.
    fn rq_post(
        &mut self,
        i: usize,
        wr_id: u64,
        sges: &[IbSge],
        vs: &VdQpState,
    ) -> Result<Option<Outcome>, Diff> {
        let d = |what: String| Diff { op: i, what };
        let (c, v, v2) = (&self.case.cfg, self.v, self.v2);
        let stride = 1usize << c.rq_shift;
        let base = vs.rq_head as usize * stride * 4;
        let len = c.rq_size as usize * stride * 4;
        for k in 0..stride * 4 {
            let w = (base + k) % len;
            v.rq.write(w, pattern(i, w, false));
            v2.rq.write(w, pattern(i, w, true));
            self.rq.mem().write(w, pattern(i, w, false));
        }
        let dsges = to_sge(sges);
        let mut vidx = u32::MAX;
        let ptr = if sges.is_empty() { core::ptr::null() } else { sges.as_ptr() };
        // SAFETY: `ptr` is null or points at `sges.len()` SGEs.
        let vret = -unsafe { ffi::vd_rq_post(v.q, wr_id, ptr, sges.len() as u32, &mut vidx) };
        let mut vidx2 = u32::MAX;
        // SAFETY: as above, on the twin.
        let vret2 = -unsafe { ffi::vd_rq_post(v2.q, wr_id, ptr, sges.len() as u32, &mut vidx2) };
        if (vret2, vidx2) != (vret, vidx) {
            return Err(d(format!("the vendor twin differs: {vret2}/{vidx2} vs {vret}/{vidx}")));
        }
        let dr = self.rq.post(wr_id, &dsges);
        let va = v.state();
        let deviation = |e| deviation_of_rq(sges, e);
        let posted = match answers(vret, dr, "the receive", errno_rq, deviation) {
            Answers::Posted(p) => p,
            Answers::Refused(_) => {
                stats::bump(&stats::RQ_REFUSED);
                return Ok(None);
            }
            Answers::Deviation(id) => return Ok(Some(Outcome::Deviation(id))),
            Answers::Differs(m) => return Err(d(m)),
        };
        let rq = &self.rq;
        if posted.wqe_idx != vidx || rq.head() != va.rq_head {
            return Err(d(format!(
                "rq wqe_idx/head: vendor {vidx}/{}, driver {}/{}",
                va.rq_head,
                posted.wqe_idx,
                rq.head()
            )));
        }
        if posted.valid != (va.rwqe_polarity != 0) {
            return Err(d(format!(
                "rq valid: vendor {}, driver {}",
                va.rwqe_polarity, posted.valid
            )));
        }
        for k in 0..stride * 4 {
            let w = (base + k) % len;
            let (vw, dw) = (v.rq.read(w), rq.mem().read(w));
            if (vw ^ dw) & same_bytes(vw, v2.rq.read(w)) != 0 {
                return Err(d(format!(
                    "rq wqe {vidx} word +{}: vendor {vw:#018x}, driver {dw:#018x}",
                    k * 8
                )));
            }
        }
        // SAFETY: `v.q` is live.
        let vw = unsafe { ffi::vd_qp_rq_wrid(v.q, vidx) };
        if rq.wr_id(vidx) != Some(vw) {
            return Err(d(format!("rq_wrid[{vidx}]: vendor {vw:#x}, driver {:?}", rq.wr_id(vidx))));
        }
        stats::bump(&stats::RQ_POSTED);
        Ok(None)
    }
}

/// The sizing tables (uk.c irdma_fragcnt_to_quanta_sq /
/// irdma_fragcnt_to_wqesize_rq) against the driver's, for every fragment
/// count up to past the hardware's; returns how many rows agreed.
pub fn helpers() -> Result<u64, String> {
    use irdma::uk::sizing;
    let mut n = 0;
    for f in 0..=40u32 {
        let (mut q, mut w) = (0u16, 0u16);
        // SAFETY: plain functions writing one u16 through a valid pointer.
        let (rq_ret, rw_ret) = unsafe {
            (
                ffi::irdma_fragcnt_to_quanta_sq(f, &mut q),
                ffi::irdma_fragcnt_to_wqesize_rq(f, &mut w),
            )
        };
        let vq = (rq_ret == 0).then_some(u32::from(q));
        let vw = (rw_ret == 0).then_some(u32::from(w));
        if sizing::fragcnt_to_quanta_sq(f) != vq {
            return Err(format!(
                "fragcnt_to_quanta_sq({f}): vendor {vq:?}, driver {:?}",
                sizing::fragcnt_to_quanta_sq(f)
            ));
        }
        if sizing::fragcnt_to_wqesize_rq(f) != vw {
            return Err(format!(
                "fragcnt_to_wqesize_rq({f}): vendor {vw:?}, driver {:?}",
                sizing::fragcnt_to_wqesize_rq(f)
            ));
        }
        n += 2;
    }
    Ok(n)
}
