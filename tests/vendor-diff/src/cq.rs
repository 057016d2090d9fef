//! The completion side of the differential: a QP with some posted WQEs and
//! receives, a CQ placed at a ring position, then a script of CQEs the
//! "device" writes (well-formed ones for outstanding WQEs, errors, flushes,
//! extended CQEs, stale valid bits, null contexts, garbage words) and polls.
//! After every poll the two sides must agree on the return, every
//! `irdma_cq_poll_info` field the poll produced, the CQ head and polarity,
//! the shadow-area head, the CQ ring memory (the vendor rewrites CQEs in
//! place) and the SQ/RQ tails.

use irdma::uk::cq::{CompStatus, QueueType};
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
/// at the head before the poll, `starts` the outstanding SQ WQE starts.
fn cq_deviation(
    vret: i32,
    d: &Result<irdma::uk::cq::CqPollInfo, PollError>,
    q3: u64,
    starts: &[u32],
    sq_flush_seen: bool,
) -> Option<&'static str> {
    let sq = q3 & q3::SQ != 0;
    let idx = ((q3 & q3::WQEIDX) >> q3::WQEIDX_S) as u32;
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
        // Both accept an inner quantum of an outstanding WQE (open item).
        (0, Ok(_)) if sq && !flush && !starts.contains(&idx) => Some("cqe_wqe_idx_inside_a_wqe"),
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
    let vring = VRing::new(size * 4);
    // SAFETY: `vring` holds `size` CQEs and outlives the CQ (owned by `VCq`).
    let vc = unsafe { ffi::vd_cq_new(vring.ptr, case.cq_size, 7) };
    if vc.is_null() {
        return Err(run::set_up("vd_cq_new failed".into()));
    }
    let vcq = VCq { c: vc, ring: vring };
    // SAFETY: `vcq.c` is live.
    unsafe { ffi::vd_cq_set_position(vcq.c, case.cq_head, case.cq_pol.into()) };

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
    run::vendor_writes();

    // The ring as a device left it at this position: the slots behind the
    // head carry this pass's valid bit (consumed), the others the previous
    // pass's (not yet written), so polling never takes an unwritten slot
    // (or, after a lap, an old CQE) for a new one.
    for slot in 0..size {
        let valid = if slot < case.cq_head as usize { case.cq_pol } else { !case.cq_pol };
        let w = if valid { q3::VALID } else { 0 };
        vcq.ring.write(slot * 4 + 3, w);
        cq.mem().write(slot * 4 + 3, w);
    }
    // The device's write position.
    let (mut dev, mut dev_pol) = (case.cq_head as usize, case.cq_pol);
    let put = |slot: usize, w: &[u64; 4], ctx: Option<(u64, u64)>, drv: &CqRing<'_>| {
        for (k, x) in w.iter().enumerate() {
            let (vx, dx) = match (k, ctx) {
                (1, Some((a, b))) => (a, b),
                _ => (*x, *x),
            };
            vcq.ring.write(slot * 4 + k, vx);
            drv.mem().write(slot * 4 + k, dx);
        }
    };
    for (i, ev) in case.events.iter().enumerate() {
        let d = |what: String| Diff { op: i, what };
        match ev {
            Ev::Cqe { q, ext, null_ctx, stale, target } => {
                let mut w = *q;
                if let Some(k) = target {
                    target_wqe(&mut w[3], *k, &v.state(), c, &starts);
                }
                let valid = dev_pol ^ *stale;
                w[3] = (w[3] & !q3::VALID) | if valid { q3::VALID } else { 0 };
                let ctx = if *null_ctx { (0, 0) } else { (vctx, OUR_CTX) };
                put(dev, &w, Some(ctx), &cq);
                dev = (dev + 1) % size;
                if dev == 0 {
                    dev_pol = !dev_pol;
                }
                if let Some(e) = ext {
                    let mut e = *e;
                    e[3] = (e[3] & !q3::VALID) | if dev_pol ^ *stale { q3::VALID } else { 0 };
                    // qword 1 of an extension is not read as such, but the
                    // vendor dereferences it as a QP if a later poll takes
                    // this slot for a CQE (overwritten ring, stale main
                    // CQE): it carries the context too, so that stays safe.
                    put(dev, &e, Some(ctx), &cq);
                    dev = (dev + 1) % size;
                    if dev == 0 {
                        dev_pol = !dev_pol;
                    }
                }
            }
            Ev::Poll => {
                // SAFETY: `vcq.c` is live.
                let pre = unsafe { ffi::vd_cq_head(vcq.c) } as usize;
                let pre_q3 = vcq.ring.read(pre * 4 + 3);
                let flush_seen = qp.sq_flush_seen;
                let mut o = VdPoll::default();
                // SAFETY: `vcq.c` is live; `o` is a valid out pointer. The
                // vendor dereferences the CQE's context, which is null or
                // its own QP (`vctx`).
                let vret = -unsafe { ffi::vd_cq_poll(vcq.c, &mut o) };
                let dr = cq.poll_one(&mut qp);
                // SAFETY: `vcq.c` is live.
                let (vh, vp, vsh) = unsafe {
                    (
                        ffi::vd_cq_head(vcq.c),
                        ffi::vd_cq_polarity(vcq.c) != 0,
                        ffi::vd_cq_shadow(vcq.c, 0),
                    )
                };
                // The comparison; a difference is first offered to the
                // deviation classifiers (state differences also to the RQ
                // parking one), then reported.
                let fields: Result<(), String> = 'fields: {
                    match (vret, &dr) {
                        (0, Ok(info)) => {
                            let mut diffs = Vec::new();
                            let mut f = |name: &str, a: u64, b: u64| {
                                if a != b {
                                    diffs.push(format!("{name}: vendor {a:#x}, driver {b:#x}"));
                                }
                            };
                            f("wr_id", o.wr_id, info.wr_id);
                            f("bytes_xfered", o.bytes_xfered.into(), info.bytes_xfered.into());
                            f("qp_id", o.qp_id.into(), info.qp_id.into());
                            f("ud_src_qpn", o.ud_src_qpn.into(), info.ud_src_qpn.into());
                            f("imm_valid", o.imm_valid.into(), info.imm_valid.into());
                            if o.imm_valid != 0 {
                                f("imm_data", o.imm_data.into(), info.imm_data.into());
                            }
                            f(
                                "stag_invalid_set",
                                o.stag_invalid_set.into(),
                                info.stag_invalid_set.into(),
                            );
                            if o.stag_invalid_set != 0 {
                                f("inv_stag", o.inv_stag.into(), info.inv_stag.into());
                            }
                            let cs = comp_status(o.comp_status);
                            f(
                                "comp_status (vendor's, mapped, equal)",
                                1,
                                u64::from(cs == Some(info.comp_status)),
                            );
                            f("error", o.error.into(), info.error.into());
                            if o.error != 0 {
                                f("major_err", o.major_err.into(), info.major_err.into());
                                f("minor_err", o.minor_err.into(), info.minor_err.into());
                            }
                            f("op_type", o.op_type.into(), info.op_type.into());
                            f("q_type", o.q_type.into(), u64::from(info.q_type == QueueType::Sq));
                            f(
                                "solicited_event",
                                o.solicited_event.into(),
                                info.solicited_event.into(),
                            );
                            f("push_dropped", o.push_dropped.into(), info.push_dropped.into());
                            f("ipv4", o.ipv4.into(), info.ipv4.into());
                            f("ud_vlan_valid", o.ud_vlan_valid.into(), info.ud_vlan_valid.into());
                            if o.ud_vlan_valid != 0 {
                                f("ud_vlan", o.ud_vlan.into(), info.ud_vlan.into());
                            }
                            f("ud_smac_valid", o.ud_smac_valid.into(), info.ud_smac_valid.into());
                            if o.ud_smac_valid != 0 {
                                let m = o.ud_smac.iter().fold(0u64, |a, b| a << 8 | u64::from(*b));
                                f("ud_smac", m, info.ud_smac);
                            }
                            f("tcp_seq_num_rtt", o.tcp_seq_num_rtt.into(), info.stat_raw.into());
                            if !diffs.is_empty() {
                                break 'fields Err(format!(
                                    "poll fields: {} (vendor comp_status {}, driver {:?})",
                                    diffs.join("; "),
                                    o.comp_status,
                                    info.comp_status
                                ));
                            }
                            run::stats::bump(if info.error {
                                &run::stats::CQ_ERR
                            } else {
                                &run::stats::CQ_OK
                            });
                        }
                        (2, Err(PollError::Empty)) => run::stats::bump(&run::stats::CQ_EMPTY),
                        (2, Err(PollError::Drained)) | (14, Err(PollError::NoQp)) => {
                            run::stats::bump(&run::stats::CQ_DROPPED)
                        }
                        (r, other) => {
                            break 'fields Err(format!(
                                "poll: vendor returned -{r}, driver {other:?}"
                            ));
                        }
                    }
                    Ok(())
                };
                if let Err(e) = fields {
                    return match cq_deviation(vret, &dr, pre_q3, &starts, flush_seen) {
                        Some(id) => Ok(Some(id)),
                        None => Err(d(e)),
                    };
                }
                // The CQE matters only when the poll parked on it (the head
                // did not move after a completion): the next poll reads it
                // again.
                let parked = vh as usize == pre && vret == 0;
                let state: Result<(), String> = 'state: {
                    if (vh, vp) != (cq.head(), cq.polarity()) {
                        break 'state Err(format!(
                            "cq head/polarity after poll: vendor {vh}/{vp}, driver {}/{} ({dr:?})",
                            cq.head(),
                            cq.polarity()
                        ));
                    }
                    if vsh != cq.shadow().read(0) {
                        break 'state Err(format!(
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
                            break 'state Err(format!(
                                "CQE at the head (slot {h}) word +{}: vendor {a:#018x}, driver {b:#018x} ({dr:?})",
                                k * 8
                            ));
                        }
                    }
                    let vs = v.state();
                    if (vs.sq_tail, vs.rq_tail) != (qp.sq.tail(), qp.rq.tail()) {
                        break 'state Err(format!(
                            "sq/rq tail after poll: vendor {}/{}, driver {}/{} ({dr:?})",
                            vs.sq_tail,
                            vs.rq_tail,
                            qp.sq.tail(),
                            qp.rq.tail()
                        ));
                    }
                    Ok(())
                };
                if let Err(e) = state {
                    let id = cq_deviation(vret, &dr, pre_q3, &starts, flush_seen)
                        .or_else(|| park_deviation(pre_q3));
                    return match id {
                        Some(id) => Ok(Some(id)),
                        None => Err(d(e)),
                    };
                }
            }
        }
    }
    Ok(None)
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
