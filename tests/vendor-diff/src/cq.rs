//! The completion side of the differential: a QP with some posted WQEs and
//! receives, a CQ placed at a ring position, then a script of CQEs the
//! "device" writes (well-formed ones for outstanding WQEs, errors, flushes,
//! extended CQEs, stale valid bits, null contexts, garbage words) and polls.
//! After every poll the two sides must agree on the return, every
//! `irdma_cq_poll_info` field the poll produced, the CQ head and polarity,
//! the shadow-area head, the CQ ring memory (the vendor rewrites CQEs in
//! place) and the SQ/RQ tails.

use irdma::uk::cq::{CompStatus, CqPollInfo, QueueType};
use irdma::uk::qp::{QpKind, QpUk};
use irdma::uk::sq::SqWrTrk;
use irdma::uk::{CqRing, PollError, Rq, Sq};

use crate::case::{Case, Cfg, Op};
use crate::ffi::{self, VdCq, VdPoll};
use crate::rng::Rng;
use crate::run::{self, Diff, VRing};
use crate::shrink::{Variants, greedy};

/// The completion context the driver's QP uses (the vendor's is the
/// address of its QP struct; qword 1 of each CQE is written per side).
const OUR_CTX: u64 = 0x5eed_c0de_0000_1000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ev {
    /// The device writes a CQE (and its extension) at its next slot(s).
    /// `null_ctx`: qword 1 is 0 on both sides. `stale`: the valid bit is
    /// the previous pass's (not yet written, as far as polling can tell).
    /// `target`: the index names the k-th outstanding WQE start (SQ) or
    /// receive (RQ), resolved when the case runs.
    Cqe {
        q: [u64; 4],
        ext: Option<[u64; 4]>,
        null_ctx: bool,
        stale: bool,
        target: Option<u8>,
    },
    Poll,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CqCase {
    /// The QP and its set-up posts (reusing the post generator's case; its
    /// fillers place the rings).
    pub qp: Case,
    pub cq_size: u32,
    pub cq_head: u32,
    pub cq_pol: bool,
    pub events: Vec<Ev>,
}

/// Bits of CQE qword 3 (defs.h: IRDMA_CQ_* / IRDMACQ_*), used only to steer
/// the generator towards meaningful CQEs; the judge is the vendor's code.
mod q3 {
    pub const MINERR: u64 = 0xffff;
    pub const MAJERR_S: u32 = 16;
    pub const WQEIDX_S: u32 = 32;
    pub const WQEIDX: u64 = 0x7fff << 32;
    pub const EXTCQE: u64 = 1 << 50;
    pub const PSHDROP: u64 = 1 << 51;
    pub const STAG: u64 = 1 << 53;
    pub const SOEVENT: u64 = 1 << 54;
    pub const ERROR: u64 = 1 << 55;
    pub const OP_S: u32 = 56;
    pub const SQ: u64 = 1 << 62;
    pub const VALID: u64 = 1 << 63;
}

pub fn gen_cq_case(r: &mut Rng) -> CqCase {
    let mut qp = crate::case::gen_case_domain(r);
    qp.sq_outstanding = 0;
    qp.rq_outstanding = 0;
    let cq_size = r.pick(&[4, 8, 16, 64]);
    let n_cqe = r.range(1, 6) as u32;
    let mut events = Vec::new();
    let sq_ops: Vec<u8> = qp
        .ops
        .iter()
        .filter_map(|o| if let Op::Sq(p) = o { Some(p.op_type) } else { None })
        .collect();
    for _ in 0..n_cqe {
        let mut w = [r.next_u64(), r.next_u64(), r.next_u64(), r.next_u64()];
        if !r.chance(1, 10) {
            // a shaped qword 3: queue, index, error, op, flags
            let sq = r.chance(1, 2);
            let idx = match r.below(5) {
                0 => r.below(1 << 15),
                1 => r.below(16),
                _ => r.below(u64::from(qp.cfg.sq_quanta.max(qp.cfg.rq_size << qp.cfg.rq_shift))),
            };
            let mut x = (idx << q3::WQEIDX_S) & q3::WQEIDX;
            if sq {
                x |= q3::SQ;
            }
            if r.chance(1, 3) {
                let major = match r.below(4) {
                    0 | 1 => 1, // IRDMA_FLUSH_MAJOR_ERR
                    2 => r.below(1 << 16),
                    _ => 0,
                };
                let minor = match r.below(3) {
                    0 => 1, // FLUSH_GENERAL_ERR
                    1 => r.below(12),
                    _ => r.below(1 << 16),
                };
                x |= q3::ERROR | (major << q3::MAJERR_S) | (minor & q3::MINERR);
            }
            let op = if sq && !sq_ops.is_empty() && r.chance(3, 4) {
                u64::from(r.pick(&sq_ops))
            } else {
                r.below(64)
            };
            x |= op << q3::OP_S;
            for b in [q3::PSHDROP, q3::STAG, q3::SOEVENT] {
                if r.chance(1, 4) {
                    x |= b;
                }
            }
            if r.chance(1, 4) {
                x |= q3::EXTCQE;
            }
            w[3] = x;
        }
        let ext = (w[3] & q3::EXTCQE != 0)
            .then(|| [r.next_u64(), r.next_u64(), r.next_u64(), r.next_u64()]);
        let target = r.chance(7, 8).then(|| r.below(4) as u8);
        events.push(Ev::Cqe {
            q: w,
            ext,
            null_ctx: r.chance(1, 12),
            stale: r.chance(1, 12),
            target,
        });
        for _ in 0..r.below(3) {
            events.push(Ev::Poll);
        }
    }
    for _ in 0..r.range(1, 3) {
        events.push(Ev::Poll);
    }
    CqCase {
        qp,
        cq_size,
        cq_head: r.below(u64::from(cq_size)) as u32,
        cq_pol: r.chance(1, 2),
        events,
    }
}

struct VCq {
    c: *mut VdCq,
    ring: VRing,
}

impl Drop for VCq {
    fn drop(&mut self) {
        // SAFETY: `c` came from `vd_cq_new` and is freed once.
        unsafe { ffi::vd_cq_free(self.c) }
    }
}

fn comp_status(v: u32) -> Option<CompStatus> {
    // SAFETY: a plain function returning a constant.
    let unknown = unsafe { ffi::vd_status_unknown() } as u32;
    match v {
        0 => Some(CompStatus::Success),
        1 => Some(CompStatus::Flushed),
        u if u == unknown => Some(CompStatus::Unknown),
        _ => None,
    }
}

/// The deviation a CQ poll falls under, if any: `q3` is qword 3 of the CQE
/// at the head before the poll, `pad` whether it names an outstanding NOP
/// pad (not one of the case's posts).
fn cq_deviation(
    vret: i32,
    d: &Result<irdma::uk::cq::CqPollInfo, PollError>,
    q3: u64,
    sq_flush_seen: bool,
    pad: bool,
) -> Option<&'static str> {
    let sq = q3 & q3::SQ != 0;
    let flush = q3 & q3::ERROR != 0 && (q3 >> q3::MAJERR_S) & 0xffff == 1;
    if q3 & q3::ERROR != 0 && (q3 >> q3::MAJERR_S) & 0xffff == 0xfffe {
        return Some("major_0xfffe_is_a_flush");
    }
    match (vret, d) {
        // The vendor trusts the CQE's WQE index (it indexes its tracking
        // arrays with it); the driver drops a CQE whose index is not an
        // outstanding WQE.
        (0, Err(PollError::NoQp)) => Some("cqe_wqe_idx_not_outstanding"),
        // A flush with only NOPs left: the vendor's NOP-skipping loop runs
        // past the last outstanding WQE and reports whatever it finds there.
        (0, Err(PollError::Drained)) if sq && flush => Some("sq_flush_past_outstanding_nops"),
        // The driver tracks a signaled NOP as a WR: a flush reports it.
        (0, Ok(i)) if sq && flush && i.op_type == 0x0c => Some("sq_flush_reports_signaled_nop"),
        // First SQ flush with a specific cause: unsignaled WQEs before the
        // CQE's index executed; the driver retires them silently.
        (0, Ok(_)) if sq && flush && !sq_flush_seen && q3 & q3::MINERR != 1 => {
            Some("sq_first_flush_skips_unsignaled_before_index")
        }
        // A CQE naming a NOP pad: the vendor's pad leaves the wr_id and
        // length of the slot's earlier WR in its tracking entry.
        (0, Ok(_)) if sq && !flush && pad => Some("cqe_names_a_nop_pad"),
        _ => None,
    }
}

/// A difference in the CQ head, the CQE left at the head or the tails after
/// an RQ completion with an error that is not a flush: the driver parks
/// the head there and reports every outstanding receive (the README's
/// preferred kernel behaviour); Linux 6.1's uk.c reports one and moves on.
fn park_deviation(q3: u64) -> Option<&'static str> {
    let flush = (q3 >> q3::MAJERR_S) & 0xffff == 1;
    (q3 & q3::SQ == 0 && q3 & q3::ERROR != 0 && !flush)
        .then_some("rq_error_parks_for_every_receive")
}

pub fn run_cq(case: &CqCase) -> Result<Option<&'static str>, Diff> {
    let c: &Cfg = &case.qp.cfg;
    let stride = 1usize << c.rq_shift;
    let ring = c.sq_quanta as usize;
    let v = run::vendor_qp(c)?;
    // SAFETY: `v.q` is live.
    let vctx = unsafe { ffi::vd_qp_ctx(v.q) };
    let size = case.cq_size as usize;
    let vcq = vendor_cq(case)?;

    let mut sq_mem = vec![0u64; ring * 4];
    let mut trk = vec![SqWrTrk::default(); ring];
    let mut rq_mem = vec![0u64; c.rq_size as usize * stride * 4];
    let mut rq_wrid = vec![0u64; c.rq_size as usize];
    let mut cq_mem = vec![0u64; size * 4];
    let mut shadow = vec![0u64; 8];
    let mut sq =
        Sq::new(run::mem(&mut sq_mem), &mut trk, c.sq_quanta, c.max_frags, c.max_inline, c.qp_id)
            .map_err(|e| run::set_up(format!("Sq::new {e:?}")))?;
    // SAFETY: inline SGEs point at live buffers (`sges_of`).
    unsafe { sq.enable_inline() };
    let rq = Rq::new(run::mem(&mut rq_mem), &mut rq_wrid, c.rq_size, c.rq_shift, c.rq_frags)
        .map_err(|e| run::set_up(format!("Rq::new {e:?}")))?;
    let mut qp = QpUk::new(sq, rq, OUR_CTX, QpKind::Rc);
    let mut cq = CqRing::new(run::mem(&mut cq_mem), run::mem(&mut shadow), case.cq_size, 7)
        .map_err(|e| run::set_up(format!("CqRing::new {e:?}")))?;
    cq.set_position(case.cq_head, case.cq_pol).map_err(|e| run::set_up(format!("{e:?}")))?;

    // Reach the ring positions, then the set-up posts (both sides must
    // agree on each; the post differential judges them in detail).
    fill_rings(case, &v, &mut qp)?;
    let starts = set_up_posts(case, &v, &mut qp)?;
    run::vendor_writes();
    seed_ring(case, &vcq, &cq);
    let mut run = CqRun {
        case,
        v: &v,
        vctx,
        vcq: &vcq,
        cq,
        qp,
        starts,
        // The device's write position.
        dev: case.cq_head as usize,
        dev_pol: case.cq_pol,
    };
    for (i, ev) in case.events.iter().enumerate() {
        match ev {
            Ev::Cqe { q, ext, null_ctx, stale, target } => {
                run.cqe(q, ext.as_ref(), *null_ctx, *stale, *target)
            }
            Ev::Poll => {
                if let Err(e) = run.poll() {
                    return match e {
                        PollEnd::Deviation(id) => Ok(Some(id)),
                        PollEnd::Differs(what) => Err(Diff { op: i, what }),
                    };
                }
            }
        }
    }
    Ok(None)
}

/// The vendor's CQ of `case.cq_size` CQEs at the case's head and polarity.
fn vendor_cq(case: &CqCase) -> Result<VCq, Diff> {
    let size = case.cq_size as usize;
    let vring = VRing::new(size * 4);
    // SAFETY: `vring` holds `size` CQEs and outlives the CQ (owned by `VCq`).
    let vc = unsafe { ffi::vd_cq_new(vring.ptr, case.cq_size, 7) };
    if vc.is_null() {
        return Err(run::set_up("vd_cq_new failed".into()));
    }
    let vcq = VCq { c: vc, ring: vring };
    // SAFETY: `vcq.c` is live.
    unsafe { ffi::vd_cq_set_position(vcq.c, case.cq_head, case.cq_pol.into()) };
    Ok(vcq)
}

/// The filler posts (each consumed at once) that bring both QPs' rings to
/// the case's positions.
fn fill_rings(case: &CqCase, v: &run::VQp, qp: &mut QpUk<'_>) -> Result<(), Diff> {
    let filler = [ffi::IbSge { addr: 0x7f00_0010_0040, length: 256, lkey: 0xabcd00 }];
    let filler_d = run::to_sge(&filler);
    for _ in 0..case.qp.sq_filler {
        let fp = run::filler_post(&filler);
        let vp = run::vendor_post(&fp, &filler);
        let mut idx = 0;
        // SAFETY: `vp` points at `filler`, alive for the call.
        let r = unsafe { ffi::vd_sq_post(v.q, &vp, &mut idx) };
        let d = qp.sq.post(&run::driver_post(&fp, &filler_d));
        if r != 0 || d.is_err() {
            return Err(run::set_up(format!("filler: vendor {r}, driver {d:?}")));
        }
        // SAFETY: `v.q` is live.
        unsafe { ffi::vd_qp_consume_all(v.q) };
        qp.sq.consume_all();
    }
    for _ in 0..case.qp.rq_filler {
        let mut idx = 0;
        // SAFETY: one SGE at `filler`.
        let r = unsafe { ffi::vd_rq_post(v.q, 0xf222, filler.as_ptr(), 1, &mut idx) };
        let d = qp.rq.post(0xf222, &filler_d);
        if r != 0 || d.is_err() {
            return Err(run::set_up(format!("rq filler: vendor {r}, driver {d:?}")));
        }
        // SAFETY: `v.q` is live.
        unsafe { ffi::vd_qp_consume_all(v.q) };
        qp.rq.consume_all();
    }
    Ok(())
}

/// The case's set-up posts on both QPs; the vendor's SQ WQE starts.
fn set_up_posts(case: &CqCase, v: &run::VQp, qp: &mut QpUk<'_>) -> Result<Vec<u32>, Diff> {
    let mut starts = Vec::new();
    for op in &case.qp.ops {
        match op {
            Op::Sq(p) => {
                let mut bufs = Vec::new();
                let sges = run::sges_of(p, &mut bufs);
                let ds = run::to_sge(&sges);
                let vp = run::vendor_post(p, &sges);
                let mut idx = 0;
                // SAFETY: `vp` points at `sges`/`bufs`, alive for the call.
                let r = unsafe { ffi::vd_sq_post(v.q, &vp, &mut idx) };
                let d = qp.sq.post(&run::driver_post(p, &ds));
                if (r == 0) != d.is_ok() {
                    return Err(run::set_up(format!("set-up post: vendor {r}, driver {d:?}")));
                }
                if r == 0 {
                    starts.push(idx);
                }
            }
            Op::Rq { wr_id, sges } => {
                let ds = run::to_sge(sges);
                let ptr = if sges.is_empty() { core::ptr::null() } else { sges.as_ptr() };
                let mut idx = 0;
                // SAFETY: `ptr` is null or points at `sges`.
                let r = unsafe { ffi::vd_rq_post(v.q, *wr_id, ptr, sges.len() as u32, &mut idx) };
                let d = qp.rq.post(*wr_id, &ds);
                if (r == 0) != d.is_ok() {
                    return Err(run::set_up(format!("set-up receive: vendor {r}, driver {d:?}")));
                }
            }
        }
    }
    Ok(starts)
}

/// The ring as a device left it at this position: the slots behind the
/// head carry this pass's valid bit (consumed), the others the previous
/// pass's (not yet written), so polling never takes an unwritten slot
/// (or, after a lap, an old CQE) for a new one.
fn seed_ring(case: &CqCase, vcq: &VCq, cq: &CqRing<'_>) {
    for slot in 0..case.cq_size as usize {
        let valid = if slot < case.cq_head as usize { case.cq_pol } else { !case.cq_pol };
        let w = if valid { q3::VALID } else { 0 };
        vcq.ring.write(slot * 4 + 3, w);
        cq.mem().write(slot * 4 + 3, w);
    }
}

/// Why a poll ends the case.
enum PollEnd {
    /// A listed deviation.
    Deviation(&'static str),
    /// An unexplained difference.
    Differs(String),
}

/// Both sides' QP and CQ while a case's events run.
struct CqRun<'r, 'm> {
    case: &'r CqCase,
    v: &'r run::VQp,
    /// The vendor's completion context (its QP's address).
    vctx: u64,
    vcq: &'r VCq,
    cq: CqRing<'m>,
    qp: QpUk<'m>,
    /// The outstanding SQ WQE starts of the set-up posts.
    starts: Vec<u32>,
    /// The device's write position and pass.
    dev: usize,
    dev_pol: bool,
}

impl CqRun<'_, '_> {
    /// Writes the CQE `w` at the device's slot on both rings, qword 1 the
    /// completion context per side (`ctx`: vendor's, driver's) if given.
    fn put(&self, slot: usize, w: &[u64; 4], ctx: Option<(u64, u64)>) {
        for (k, x) in w.iter().enumerate() {
            let (vx, dx) = match (k, ctx) {
                (1, Some((a, b))) => (a, b),
                _ => (*x, *x),
            };
            self.vcq.ring.write(slot * 4 + k, vx);
            self.cq.mem().write(slot * 4 + k, dx);
        }
    }

    /// The device's write position moves one slot (a new pass at the end).
    fn advance(&mut self) {
        self.dev = (self.dev + 1) % self.case.cq_size as usize;
        if self.dev == 0 {
            self.dev_pol = !self.dev_pol;
        }
    }

    /// `Ev::Cqe`: the device writes a CQE (and its extension).
    fn cqe(
        &mut self,
        q: &[u64; 4],
        ext: Option<&[u64; 4]>,
        null_ctx: bool,
        stale: bool,
        target: Option<u8>,
    ) {
        let mut w = *q;
        if let Some(k) = target {
            target_wqe(&mut w[3], k, &self.v.state(), &self.case.qp.cfg, &self.starts);
        }
        let valid = self.dev_pol ^ stale;
        w[3] = (w[3] & !q3::VALID) | if valid { q3::VALID } else { 0 };
        let ctx = if null_ctx { (0, 0) } else { (self.vctx, OUR_CTX) };
        self.put(self.dev, &w, Some(ctx));
        self.advance();
        if let Some(e) = ext {
            let mut e = *e;
            e[3] = (e[3] & !q3::VALID) | if self.dev_pol ^ stale { q3::VALID } else { 0 };
            // qword 1 of an extension is not read as such, but the
            // vendor dereferences it as a QP if a later poll takes
            // this slot for a CQE (overwritten ring, stale main
            // CQE): it carries the context too, so that stays safe.
            self.put(self.dev, &e, Some(ctx));
            self.advance();
        }
    }

    /// `Ev::Poll`: one poll on each side, compared.
    fn poll(&mut self) -> Result<(), PollEnd> {
        let vcq = self.vcq;
        // SAFETY: `vcq.c` is live.
        let pre = unsafe { ffi::vd_cq_head(vcq.c) } as usize;
        let pre_q3 = vcq.ring.read(pre * 4 + 3);
        let flush_seen = self.qp.sq_flush_seen;
        let named = ((pre_q3 & q3::WQEIDX) >> q3::WQEIDX_S) as u32;
        let pad = pre_q3 & q3::SQ != 0
            && !self.starts.contains(&named)
            && irdma::uk::SendQueue::offset_of(&self.qp.sq, named).is_some()
            && self.qp.sq.wqe_opcode(named) == irdma::hal::wqe::op::NOP;
        let mut o = VdPoll::default();
        // SAFETY: `vcq.c` is live; `o` is a valid out pointer. The
        // vendor dereferences the CQE's context, which is null or
        // its own QP (`vctx`).
        let vret = -unsafe { ffi::vd_cq_poll(vcq.c, &mut o) };
        let dr = self.cq.poll_one(&mut self.qp);
        // SAFETY: `vcq.c` is live.
        let (vh, vp, vsh) = unsafe {
            (ffi::vd_cq_head(vcq.c), ffi::vd_cq_polarity(vcq.c) != 0, ffi::vd_cq_shadow(vcq.c, 0))
        };
        // The comparison; a difference is first offered to the
        // deviation classifiers (state differences also to the RQ
        // parking one), then reported.
        if let Err(e) = poll_fields(vret, &o, &dr) {
            return match cq_deviation(vret, &dr, pre_q3, flush_seen, pad) {
                Some(id) => Err(PollEnd::Deviation(id)),
                None => Err(PollEnd::Differs(e)),
            };
        }
        // The CQE matters only when the poll parked on it (the head
        // did not move after a completion): the next poll reads it
        // again.
        let parked = vh as usize == pre && vret == 0;
        if let Err(e) = self.poll_state((vh, vp, vsh), parked, &dr) {
            let id =
                cq_deviation(vret, &dr, pre_q3, flush_seen, pad).or_else(|| park_deviation(pre_q3));
            return match id {
                Some(id) => Err(PollEnd::Deviation(id)),
                None => Err(PollEnd::Differs(e)),
            };
        }
        Ok(())
    }

    /// The CQ head, polarity and shadow head (the vendor's: `vh`, `vp`,
    /// `vsh`), the CQE at the head where the poll `parked` on it, and the
    /// SQ/RQ tails after a poll whose driver result is `dr`.
    fn poll_state(
        &self,
        (vh, vp, vsh): (u32, bool, u64),
        parked: bool,
        dr: &Result<CqPollInfo, PollError>,
    ) -> Result<(), String> {
        let (cq, qp, vcq) = (&self.cq, &self.qp, self.vcq);
        if (vh, vp) != (cq.head(), cq.polarity()) {
            return Err(format!(
                "cq head/polarity after poll: vendor {vh}/{vp}, driver {}/{} ({dr:?})",
                cq.head(),
                cq.polarity()
            ));
        }
        if vsh != cq.shadow().read(0) {
            return Err(format!(
                "shadow head: vendor {vsh:#x}, driver {:#x} ({dr:?})",
                cq.shadow().read(0)
            ));
        }
        // Software rewrites of a CQE (flush minor code, parked WQE
        // index) matter while it is at the head; a consumed slot is
        // the device's to overwrite.
        let h = cq.head() as usize;
        for k in [0usize, 2, 3].into_iter().filter(|_| parked) {
            let (a, b) = (vcq.ring.read(h * 4 + k), cq.mem().read(h * 4 + k));
            if a != b {
                return Err(format!(
                    "CQE at the head (slot {h}) word +{}: vendor {a:#018x}, driver {b:#018x} ({dr:?})",
                    k * 8
                ));
            }
        }
        let vs = self.v.state();
        if (vs.sq_tail, vs.rq_tail) != (qp.sq.tail(), qp.rq.tail()) {
            return Err(format!(
                "sq/rq tail after poll: vendor {}/{}, driver {}/{} ({dr:?})",
                vs.sq_tail,
                vs.rq_tail,
                qp.sq.tail(),
                qp.rq.tail()
            ));
        }
        Ok(())
    }
}

/// A poll's results compared: the vendor's return `vret` (negated errno)
/// and completion `o` against the driver's `dr`; counted in the stats
/// where they agree.
fn poll_fields(vret: i32, o: &VdPoll, dr: &Result<CqPollInfo, PollError>) -> Result<(), String> {
    match (vret, dr) {
        (0, Ok(info)) => {
            let diffs = field_diffs(o, info);
            if !diffs.is_empty() {
                return Err(format!(
                    "poll fields: {} (vendor comp_status {}, driver {:?})",
                    diffs.join("; "),
                    o.comp_status,
                    info.comp_status
                ));
            }
            run::stats::bump(if info.error { &run::stats::CQ_ERR } else { &run::stats::CQ_OK });
        }
        (2, Err(PollError::Empty)) => run::stats::bump(&run::stats::CQ_EMPTY),
        (2, Err(PollError::Drained)) | (14, Err(PollError::NoQp)) => {
            run::stats::bump(&run::stats::CQ_DROPPED)
        }
        (r, other) => {
            return Err(format!("poll: vendor returned -{r}, driver {other:?}"));
        }
    }
    Ok(())
}

/// The fields in which the vendor's completion `o` and the driver's `info`
/// differ, each as "name: vendor …, driver …".
fn field_diffs(o: &VdPoll, info: &CqPollInfo) -> Vec<String> {
    let mut diffs = Vec::new();
    let mut f = |name: &str, a: u64, b: u64| {
        if a != b {
            diffs.push(format!("{name}: vendor {a:#x}, driver {b:#x}"));
        }
    };
    // the fields named alike on both sides
    macro_rules! same {
        ($($name:ident),+) => {
            $(f(stringify!($name), o.$name.into(), info.$name.into());)+
        };
    }
    f("wr_id", o.wr_id, info.wr_id);
    same!(bytes_xfered, qp_id, ud_src_qpn, imm_valid);
    if o.imm_valid != 0 {
        same!(imm_data);
    }
    same!(stag_invalid_set);
    if o.stag_invalid_set != 0 {
        same!(inv_stag);
    }
    let cs = comp_status(o.comp_status);
    f("comp_status (vendor's, mapped, equal)", 1, u64::from(cs == Some(info.comp_status)));
    same!(error);
    if o.error != 0 {
        same!(major_err, minor_err);
    }
    same!(op_type);
    f("q_type", o.q_type.into(), u64::from(info.q_type == QueueType::Sq));
    same!(solicited_event, push_dropped, ipv4, ud_vlan_valid);
    if o.ud_vlan_valid != 0 {
        same!(ud_vlan);
    }
    same!(ud_smac_valid);
    if o.ud_smac_valid != 0 {
        let m = o.ud_smac.iter().fold(0u64, |a, b| a << 8 | u64::from(*b));
        f("ud_smac", m, info.ud_smac);
    }
    f("tcp_seq_num_rtt", o.tcp_seq_num_rtt.into(), info.stat_raw.into());
    diffs
}

/// Points a CQE (its qword 3, `w3`) at the `k`-th outstanding WQE of its
/// queue, where there is one (an event's `target`): for an SQ CQE the
/// `k`-th of the WQE starts `starts` between the SQ tail and head, for an
/// RQ CQE the `k`-th receive from the RQ tail; `vs` is the vendor QP's
/// state, `c` its configuration. regen/dpcq.rs writes the same CQEs.
pub(crate) fn target_wqe(w3: &mut u64, k: u8, vs: &ffi::VdQpState, c: &Cfg, starts: &[u32]) {
    let idx = if *w3 & q3::SQ != 0 {
        let n = c.sq_quanta;
        let out: Vec<u32> = starts
            .iter()
            .copied()
            .filter(|&s| (s + n - vs.sq_tail) % n < (vs.sq_head + n - vs.sq_tail) % n)
            .collect();
        out.get(usize::from(k) % out.len().max(1)).copied()
    } else {
        let used = (vs.rq_head + c.rq_size - vs.rq_tail) % c.rq_size;
        (used > 0).then(|| ((vs.rq_tail + u32::from(k) % used) % c.rq_size) << c.rq_shift)
    };
    if let Some(i) = idx {
        *w3 = (*w3 & !q3::WQEIDX) | (u64::from(i) << q3::WQEIDX_S);
    }
}

/// Shrinks a differing CQ script: fewer events and set-up posts, earlier
/// ring positions, the CQ at slot 0.
pub fn shrink_cq(case: CqCase, diff: Diff) -> (CqCase, Diff) {
    greedy(case, diff, 2000, |c, _| cq_candidates(c), |k| run_cq(k).err())
}

fn cq_candidates(case: &CqCase) -> Vec<CqCase> {
    let mut v = Variants::new(case);
    for i in 0..case.events.len() {
        v.push(|k| {
            k.events.remove(i);
        });
    }
    for i in 0..case.qp.ops.len() {
        v.push(|k| {
            k.qp.ops.remove(i);
        });
    }
    v.push(|k| k.qp.sq_filler = 0);
    v.push(|k| k.qp.sq_filler /= 2);
    v.push(|k| k.qp.sq_filler = k.qp.sq_filler.saturating_sub(1));
    v.push(|k| k.qp.rq_filler = 0);
    v.push(|k| k.qp.rq_filler = k.qp.rq_filler.saturating_sub(1));
    v.push(|k| k.cq_head = 0);
    v.into_vec()
}

/// A readable dump of a CQ script (qword 3 of each CQE decoded).
pub fn describe(c: &CqCase) -> String {
    let mut s = format!(
        "cfg {:?}; sq_filler {} rq_filler {}; cq size {} head {} polarity {}\n",
        c.qp.cfg, c.qp.sq_filler, c.qp.rq_filler, c.cq_size, c.cq_head, c.cq_pol
    );
    for o in &c.qp.ops {
        match o {
            Op::Sq(p) => {
                s += &format!(
                    "  post {} op {:#x} wr_id {:#x} sges {} signaled {} imm {:?}\n",
                    p.api_name(),
                    p.op_type,
                    p.wr_id,
                    p.sges.len(),
                    p.signaled,
                    p.imm
                )
            }
            Op::Rq { wr_id, sges } => {
                s += &format!("  post_recv wr_id {wr_id:#x} sges {}\n", sges.len())
            }
        }
    }
    for e in &c.events {
        match e {
            Ev::Poll => s += "  poll\n",
            Ev::Cqe { q, ext, null_ctx, stale, target } => {
                let x = q[3];
                s += &format!(
                    "  cqe q0 {:#x} q2 {:#x} q3 {x:#018x} [sq {} idx {} err {} major {:#x} minor {:#x} op {:#x} ext {}] null_ctx {null_ctx} stale {stale} target {target:?}{}\n",
                    q[0],
                    q[2],
                    x >> 62 & 1,
                    (x & q3::WQEIDX) >> q3::WQEIDX_S,
                    x >> 55 & 1,
                    x >> 16 & 0xffff,
                    x & 0xffff,
                    x >> 56 & 63,
                    x >> 50 & 1,
                    ext.map(|e| format!(" ext {e:x?}")).unwrap_or_default()
                )
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::Case;
    use crate::ffi::IbSge;

    fn sge(addr: u64, length: u32, lkey: u32) -> IbSge {
        IbSge { addr, length, lkey }
    }

    /// An unsignaled post of a found case: `api`, op, wr_id, SGEs and
    /// inline bytes; the rest as the fillers have it.
    fn post(api: u32, op_type: u8, wr_id: u64, sges: Vec<IbSge>, data: Vec<u8>) -> Op {
        let mut p = run::filler_post(&sges);
        (p.api, p.op_type, p.wr_id, p.data) = (api, op_type, wr_id, data);
        Op::Sq(p)
    }

    /// A found case: `filler` one-quantum fillers, then `ops`, then the
    /// `events` on an 8-CQE ring at head 0 and polarity `pol`.
    fn case(cfg: Cfg, filler: u32, ops: Vec<Op>, pol: bool, events: Vec<Ev>) -> CqCase {
        let qp = Case {
            cfg,
            sq_filler: filler,
            rq_filler: 0,
            sq_outstanding: 0,
            rq_outstanding: 0,
            ops,
        };
        CqCase { qp, cq_size: 8, cq_head: 0, cq_pol: pol, events }
    }

    /// Found by this harness (seed 0xa11ce001, case 68403, shrunk): after
    /// 502 one-quantum fillers, a 3-quanta READ, a 2-quanta WRITE and a
    /// 4-quanta inline WRITE at 0..3 (NOP pads before it); a CQE names
    /// quantum 2, inside the inline WRITE, whose tracking entry still held
    /// filler 2. Both sides completed the filler again and left the tail
    /// inside the WQE, and the flush CQE after it then differed (the vendor
    /// read an opcode from inline data). The driver now refuses the inner
    /// quantum: the listed deviation, not a difference.
    #[test]
    fn a_cqe_naming_an_inner_quantum_is_refused_by_the_driver() {
        let _serial = crate::serial();
        let cfg = Cfg {
            sq_quanta: 512,
            max_frags: 13,
            max_inline: 79,
            qp_id: 1,
            rq_size: 8,
            rq_shift: 3,
            rq_frags: 10,
        };
        let big = 0x7fff_ffff;
        let inline: Vec<u8> = (0..79u8).map(|i| i.wrapping_mul(37) ^ 0x55).collect();
        let ops = vec![
            post(
                2,
                1,
                0x5100,
                vec![sge(1, 0, 1), sge(2, big, 2), sge(3, 203_578, 3), sge(4, big, 4)],
                vec![],
            ),
            post(
                0,
                0,
                0x5101,
                vec![sge(5, 717_356_880, 0), sge(6, 58_709, 5), sge(7, 12_375, 6)],
                vec![],
            ),
            post(
                1,
                0,
                0x5104,
                vec![sge(0, 15, 7), sge(0, 1, 0), sge(0, 60, 8), sge(0, 3, 7)],
                inline,
            ),
        ];
        let q3_inner = 0x4000_0002_0000_0000; // SQ, index 2, success
        let q3_flush = 0x40ec_55f6_0001_0001; // SQ, flush (major 1, minor 1), extended
        let case = case(
            cfg,
            502,
            ops,
            false,
            vec![
                Ev::Cqe {
                    q: [1, 2, 3, q3_inner],
                    ext: None,
                    null_ctx: false,
                    stale: false,
                    target: None,
                },
                Ev::Cqe {
                    q: [4, 5, 6, q3_flush],
                    ext: Some([7, 8, 9, 10]),
                    null_ctx: false,
                    stale: false,
                    target: Some(0),
                },
                Ev::Poll,
                Ev::Poll,
            ],
        );
        match run_cq(&case) {
            Ok(r) => assert_eq!(r, Some("cqe_wqe_idx_not_outstanding")),
            Err(d) => panic!("unexplained: event {}: {}", d.op, d.what),
        }
    }

    /// Found by this harness (seed 0x1a2b3c4d, case 17920): 1030 fillers
    /// bring a 1024-quanta SQ to slot 6, a 3-quanta SEND is padded with NOPs
    /// at 6 and 7 and lands at 8; a success CQE names pad 7. The vendor's
    /// pad kept filler 7's wr_id and length in its tracking entry and
    /// reports them; the driver's pad has its own entry.
    #[test]
    fn a_cqe_naming_a_nop_pad_reports_the_pad() {
        let _serial = crate::serial();
        let cfg = Cfg {
            sq_quanta: 1024,
            max_frags: 4,
            max_inline: 70,
            qp_id: 4_906_325,
            rq_size: 64,
            rq_shift: 3,
            rq_frags: 9,
        };
        let sges =
            vec![sge(1, 0x7fff_ffff, 1), sge(2, 994_830, 0), sge(3, 0, 0), sge(4, 0x7fff_ffff, 2)];
        let ops = vec![post(3, 5, 0x5100, sges, vec![])];
        let q3_pad = 0x5720_0007_0000_0000; // SQ, index 7, success, op 0x17
        let case = case(
            cfg,
            1030,
            ops,
            true,
            vec![
                Ev::Cqe {
                    q: [1, 2, 3, q3_pad],
                    ext: None,
                    null_ctx: false,
                    stale: false,
                    target: None,
                },
                Ev::Poll,
            ],
        );
        match run_cq(&case) {
            Ok(r) => assert_eq!(r, Some("cqe_names_a_nop_pad")),
            Err(d) => panic!("unexplained: event {}: {}", d.op, d.what),
        }
    }
}
