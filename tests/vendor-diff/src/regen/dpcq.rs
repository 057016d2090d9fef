//! `cq_cases[]` of `datapath-vectors.json` from the vendor's kernel `uk.c`:
//! event scripts (`post_send`, `post_recv`, `write_cqe`, `poll`,
//! `set_state`) in the published schema (`tests/conformance/README.md`,
//! "cq_cases[] — event scripts"), replayed on a fresh vendor QP and CQ.
//!
//! One [`Replay`] executes a script event by event on two vendor QP/CQ
//! pairs and returns each event as the vendor saw it: the generator feeds
//! it the harness's own CQ scripts (`cq.rs`, `gen_cq_case`), the
//! re-deriver feeds it the published events and compares.
//!
//! - Which `info` fields a poll wrote (`written`) is found by polling the
//!   twin with the info struct pre-filled with 0xff instead of 0x00
//!   (`shim/glue.c` `vd_cq_poll_fill`): a field equal on both was written.
//! - qword 1 of a CQE is the QP completion context: the file carries the
//!   README's `0x10000000` (or 0 for a null context); each vendor side
//!   writes its own QP's address in its place and maps it back in
//!   `qp_handle`.
//! - `cq_memory_writes` are the qwords the poll rewrote in the CQ ring
//!   (flush minor codes, a parked WQE index).
//! - `state_after` holds what the glue exposes: the CQ head (GEN_2 moves
//!   tail with it), polarity and shadow qword 0, the SQ/RQ head and tail,
//!   the push-mode flags. The published file's flush flags are not
//!   re-derived.
//! - Ring positions are `set_state` events the runner maps onto its own
//!   posting (`qp.sq_ring.head`, `qp.swqe_polarity`, the RQ and CQ
//!   equivalents); the vendor side reaches them the same way (one-quantum
//!   WRITEs / one-SGE receives, each consumed; `vd_cq_set_position`).
//!
//! Generated scripts that the CQ differential (`cq::run_cq`) classifies
//! under a listed deviation (`deviations.toml`: the driver and the kernel
//! differ by design) are left out and counted in `meta`; the rest are
//! what the driver's conformance runner must pass.

use serde_json::{Map, Value, json};

use super::{Rederived, h, h8, h16, num};
use crate::case::{Cfg, Op};
use crate::cq::{CqCase, Ev};
use crate::ffi::{self, IbSge, VdCq, VdPoll};
use crate::rng::Rng;
use crate::run::{self, VQp, VRing};

/// The QP completion context the published CQEs carry in qword 1
/// (datapath README: "the vectors use 0x10000000 for the QP").
pub(crate) const PUB_CTX: u64 = 0x1000_0000;

/// CQE qword 3 bits (defs.h IRDMA_CQ_VALID, IRDMA_CQ_SQ, IRDMA_CQ_WQEIDX,
/// IRDMA_CQ_EXTCQE, IRDMA_CQ_ERROR, IRDMA_CQ_MAJERR, IRDMA_CQ_MINERR,
/// IRDMACQ_OP).
const VALID: u64 = 1 << 63;
const SQ: u64 = 1 << 62;
const WQEIDX_S: u32 = 32;
const WQEIDX: u64 = 0x7fff << WQEIDX_S;
const EXT: u64 = 1 << 50;

/// The one-SGE receive the runner posts for `post_recv` and its fillers
/// (conformance `dummy_sges`).
fn dummy_sges(n: usize) -> Vec<IbSge> {
    (0..n)
        .map(|i| IbSge {
            addr: 0x7d00_0030_0080 + ((i as u64) << 16),
            length: 512,
            lkey: 0xcafe00 + i as u32,
        })
        .collect()
}

/// One vendor QP and CQ.
struct Side {
    qp: VQp,
    cq: *mut VdCq,
    ring: VRing,
    ctx: u64,
}

impl Drop for Side {
    fn drop(&mut self) {
        // SAFETY: `cq` came from `vd_cq_new` and is freed once, before its
        // ring (a field, dropped after this).
        unsafe { ffi::vd_cq_free(self.cq) }
    }
}

impl Side {
    fn new(c: &Cfg, qp_type: u8, cq_size: u32, cq_id: u32) -> Result<Side, String> {
        // uk.c irdma_clr_wqes clears 128 quanta ahead of a WQE index that
        // is a multiple of 128, past the end of a ring under 256 quanta
        let qp = crate::run::vendor_qp_typed(c, 128 * 4, qp_type).map_err(|d| d.what)?;
        let ring = VRing::new(cq_size as usize * 4);
        // SAFETY: `ring` holds `cq_size` CQEs and outlives the CQ (both
        // owned by the `Side`, the CQ freed first).
        let cq = unsafe { ffi::vd_cq_new(ring.ptr, cq_size, cq_id) };
        if cq.is_null() {
            return Err("vd_cq_new failed".into());
        }
        // SAFETY: `qp.q` is live.
        let ctx = unsafe { ffi::vd_qp_ctx(qp.q) };
        Ok(Side { qp, cq, ring, ctx })
    }

    fn cq_state(&self) -> (u32, u8, u64) {
        // SAFETY: `cq` is live.
        unsafe {
            (ffi::vd_cq_head(self.cq), ffi::vd_cq_polarity(self.cq), ffi::vd_cq_shadow(self.cq, 0))
        }
    }
}

/// A script replayed on two vendor QP/CQ pairs (the twin polls with the
/// other fill byte).
pub(crate) struct Replay {
    a: Side,
    b: Side,
    cfg: Cfg,
    size: usize,
    /// SQ WQE starts posted by the script (for `cq.rs`'s CQE targets).
    pub(crate) starts: Vec<u32>,
}

fn ret_name(r: i32) -> String {
    match r {
        0 => "0".into(),
        2 => "ENOENT".into(),
        12 => "ENOMEM".into(),
        14 => "EFAULT".into(),
        22 => "EINVAL".into(),
        r => r.to_string(),
    }
}

impl Replay {
    pub(crate) fn new(c: &Cfg, qp_type: u8, cq_size: u32, cq_id: u32) -> Result<Replay, String> {
        Ok(Replay {
            a: Side::new(c, qp_type, cq_size, cq_id)?,
            b: Side::new(c, qp_type, cq_size, cq_id)?,
            cfg: c.clone(),
            size: cq_size as usize,
            starts: Vec::new(),
        })
    }

    fn sides(&self) -> [&Side; 2] {
        [&self.a, &self.b]
    }

    /// One post on both sides: `(ret, wqe index)`, equal on both.
    fn sq_post(&self, p: &crate::case::SqPostIn) -> Result<(i32, u32), String> {
        let mut bufs = Vec::new();
        let sges = run::sges_of(p, &mut bufs);
        let vp = run::vendor_post(p, &sges);
        let mut out = [(0, 0); 2];
        for (k, s) in self.sides().into_iter().enumerate() {
            let mut idx = u32::MAX;
            // SAFETY: `vp` points at `sges`/`bufs`, alive for the call.
            let r = -unsafe { ffi::vd_sq_post(s.qp.q, &vp, &mut idx) };
            out[k] = (r, idx);
        }
        run::vendor_writes();
        if out[0] != out[1] {
            return Err(format!("the vendor twin differs on a post: {:?}", out));
        }
        Ok(out[0])
    }

    fn rq_post(&self, wr_id: u64, s: &[IbSge]) -> Result<(i32, u32), String> {
        let ptr = if s.is_empty() { core::ptr::null() } else { s.as_ptr() };
        let mut out = [(0, 0); 2];
        for (k, side) in self.sides().into_iter().enumerate() {
            let mut idx = u32::MAX;
            // SAFETY: `ptr` is null or points at `s.len()` SGEs, alive for the call.
            let r = -unsafe { ffi::vd_rq_post(side.qp.q, wr_id, ptr, s.len() as u32, &mut idx) };
            out[k] = (r, idx);
        }
        if out[0] != out[1] {
            return Err(format!("the vendor twin differs on a receive: {:?}", out));
        }
        Ok(out[0])
    }

    fn consume_all(&self) {
        for s in self.sides() {
            // SAFETY: the QP is live.
            unsafe { ffi::vd_qp_consume_all(s.qp.q) };
        }
    }

    pub(crate) fn state(&self) -> ffi::VdQpState {
        self.a.qp.state()
    }

    /// Moves an empty SQ to `head` with polarity `pol` by one-quantum
    /// WRITEs, each consumed (what the runner's `sq_reach` does).
    fn sq_reach(&self, head: u32, pol: u8) -> Result<(), String> {
        let filler = [IbSge { addr: 0x7f00_0010_0040, length: 256, lkey: 0xabcd00 }];
        self.reach(
            "SQ",
            (head, pol),
            self.cfg.sq_quanta,
            |s| (s.sq_head, s.sq_tail, s.swqe_polarity),
            || self.sq_post(&run::filler_post(&filler)),
        )
    }

    /// [`Self::sq_reach`] for the RQ, by one-SGE receives.
    fn rq_reach(&self, head: u32, pol: u8) -> Result<(), String> {
        let one = dummy_sges(1);
        self.reach(
            "RQ",
            (head, pol),
            self.cfg.rq_size,
            |s| (s.rq_head, s.rq_tail, s.rwqe_polarity),
            || self.rq_post(0xf444, &one),
        )
    }

    /// Moves the empty ring `what` of `size` slots (`ring` reads its head,
    /// tail and polarity) to `head` and polarity `pol`: fillers (`post`)
    /// up to the head, each consumed, and once around more when the
    /// polarity is not yet `pol`.
    fn reach(
        &self,
        what: &str,
        (head, pol): (u32, u8),
        size: u32,
        ring: impl Fn(&ffi::VdQpState) -> (u32, u32, u8),
        post: impl Fn() -> Result<(i32, u32), String>,
    ) -> Result<(), String> {
        let (h, t, _) = ring(&self.state());
        if head >= size || h != t {
            return Err(format!(
                "{what} head {head}: not reachable (size {size}, {what} not empty)"
            ));
        }
        let mut n = (head + size - h) % size;
        for pass in 0..2 {
            for _ in 0..n {
                let (r, _) = post()?;
                if r != 0 {
                    return Err(format!("{what} filler: {r}"));
                }
                self.consume_all();
            }
            if pass == 0 && ring(&self.state()).2 != pol {
                n = size;
            } else {
                break;
            }
        }
        Ok(())
    }

    /// Writes a published CQE (qword 1 `PUB_CTX` becomes each side's QP).
    fn put(&self, slot: usize, words: &[u64]) -> Result<(), String> {
        if slot >= self.size || words.len() != 4 {
            return Err(format!(
                "a CQE at slot {slot} of {} with {} words",
                self.size,
                words.len()
            ));
        }
        // Safety of the vendor's poll: it dereferences qword 1 of a CQE as
        // its QP; only null or this QP's address may be there.
        if words[1] != 0 && words[1] != PUB_CTX {
            return Err(format!("qword 1 {:#x}: neither null nor the QP's context", words[1]));
        }
        for s in self.sides() {
            for (k, w) in words.iter().enumerate() {
                let w = if k == 1 && *w == PUB_CTX { s.ctx } else { *w };
                s.ring.write(slot * 4 + k, w);
            }
        }
        Ok(())
    }

    /// Runs one published event on the vendor; returns it as re-derived.
    /// `Err` when the event cannot be expressed on the glue.
    pub(crate) fn event(&mut self, e: &Value) -> Result<Value, String> {
        let ev = e["event"].as_str().unwrap_or("");
        match ev {
            "post_send" => self.post_send(e),
            "post_recv" => self.post_recv(e),
            "write_cqe" => self.write_cqe(e),
            "set_state" => self.set_state(e),
            "poll" => Ok(self.poll()),
            other => Err(format!("event {other}: not replayed")),
        }
    }

    fn post_send(&mut self, e: &Value) -> Result<Value, String> {
        let p = super::datapath::sq_post_of(&e["input"]).map_err(String::from)?;
        let before = self.state().sq_head;
        let (ret, idx) = self.sq_post(&p)?;
        let mut m = Map::new();
        m.insert("event".into(), "post_send".into());
        m.insert("input".into(), e["input"].clone());
        m.insert("ret".into(), ret.into());
        if ret == 0 {
            self.starts.push(idx);
            let (mut wrid, mut len, mut qn) = (0u64, 0u32, 0u16);
            // SAFETY: the QP is live; the out pointers are valid.
            unsafe { ffi::vd_qp_trk(self.a.qp.q, idx, &mut wrid, &mut len, &mut qn) };
            let ring = self.cfg.sq_quanta;
            m.insert("wqe_idx".into(), idx.into());
            m.insert("wqe_size_quanta".into(), qn.into());
            m.insert("nop_pad_quanta".into(), ((idx + ring - before) % ring).into());
            m.insert("wr_len".into(), len.into());
            m.insert("sq_head_after".into(), self.state().sq_head.into());
        }
        Ok(Value::Object(m))
    }

    fn post_recv(&mut self, e: &Value) -> Result<Value, String> {
        let n = num(&e["num_sges"]).unwrap_or(0) as usize;
        let wr_id = num(&e["wr_id"]).unwrap_or(0);
        let (ret, idx) = self.rq_post(wr_id, &dummy_sges(n))?;
        let mut m = Map::new();
        m.insert("event".into(), "post_recv".into());
        m.insert("wr_id".into(), h16(wr_id));
        m.insert("num_sges".into(), n.into());
        m.insert("ret".into(), ret.into());
        if ret == 0 {
            m.insert("wqe_idx".into(), idx.into());
            m.insert("wqe_idx_in_quanta".into(), (idx << self.cfg.rq_shift).into());
        }
        Ok(Value::Object(m))
    }

    fn write_cqe(&mut self, e: &Value) -> Result<Value, String> {
        let words: Vec<u64> = e["words"].as_array().into_iter().flatten().filter_map(num).collect();
        let slot = num(&e["fields"]["slot"]).ok_or("write_cqe without fields.slot")? as usize;
        self.put(slot, &words)?;
        if let Some(x) = e.get("ext_words").and_then(Value::as_array) {
            let ext: Vec<u64> = x.iter().filter_map(num).collect();
            let es = num(&e["ext_fields"]["slot"]).map_or((slot + 1) % self.size, |s| s as usize);
            self.put(es, &ext)?;
        }
        Ok(e.clone())
    }

    fn set_state(&mut self, e: &Value) -> Result<Value, String> {
        let field = e["field"].as_str().unwrap_or("");
        let v = num(&e["value"]).ok_or("set_state without a value")?;
        let s = self.state();
        let (h, p) = (s.sq_head, s.swqe_polarity);
        match field {
            "qp.sq_ring.head" => self.sq_reach(v as u32, p)?,
            "qp.swqe_polarity" => self.sq_reach(h, v as u8)?,
            "qp.rq_ring.head" => self.rq_reach(v as u32, s.rwqe_polarity)?,
            "qp.rwqe_polarity" => self.rq_reach(s.rq_head, v as u8)?,
            "cq.cq_ring.head" | "cq.cq_ring.tail" | "cq.polarity" => self.set_cq(field, v)?,
            "qp.push_mode" | "qp.push_dropped" => self.set_push(field, v),
            other => return Err(format!("set_state {other}: not in the glue")),
        }
        Ok(e.clone())
    }

    /// `set_state` of the CQ's head or polarity, on both sides.
    fn set_cq(&self, field: &str, v: u64) -> Result<(), String> {
        for side in self.sides() {
            let (head, pol, _) = side.cq_state();
            let (head, pol) =
                if field == "cq.polarity" { (head, v as u8) } else { (v as u32, pol) };
            if head as usize >= self.size {
                return Err(format!("{field} {v}: outside the CQ"));
            }
            // SAFETY: the CQ is live.
            unsafe { ffi::vd_cq_set_position(side.cq, head, pol) };
        }
        Ok(())
    }

    /// `set_state` of the QP's push mode or dropped flag, on both sides.
    fn set_push(&self, field: &str, v: u64) {
        for side in self.sides() {
            // SAFETY: the QP is live.
            let now = unsafe { ffi::vd_qp_push(side.qp.q) };
            let (mode, dropped) = if field == "qp.push_mode" {
                (u8::from(v != 0), now >> 1 & 1)
            } else {
                (now & 1, u8::from(v != 0))
            };
            // SAFETY: the QP is live.
            unsafe { ffi::vd_qp_set_push(side.qp.q, mode, dropped) };
        }
    }

    fn poll(&mut self) -> Value {
        let before: Vec<u64> = (0..self.size * 4).map(|q| self.a.ring.read(q)).collect();
        let mut o = [VdPoll::default(), VdPoll::default()];
        let mut ret = [0i32; 2];
        for (k, s) in self.sides().into_iter().enumerate() {
            // SAFETY: the CQ is live; `o[k]` is a valid out pointer. Every
            // CQE's qword 1 is null or this side's QP (`put`).
            ret[k] = -unsafe { ffi::vd_cq_poll_fill(s.cq, &mut o[k], [0u8, 0xff][k]) };
        }
        let map_ctx = |v: u64, s: &Side| if v == s.ctx { PUB_CTX } else { v };
        let mut info = Map::new();
        if ret[0] == 0 {
            let smac = |p: &VdPoll| p.ud_smac.iter().fold(0u64, |a, b| a << 8 | u64::from(*b));
            type Field = (&'static str, fn(&VdPoll) -> u64, fn(u64) -> Value);
            let fields: [Field; 23] = [
                ("wr_id", |p| p.wr_id, h16),
                ("qp_handle", |p| p.qp_handle, h16),
                ("bytes_xfered", |p| p.bytes_xfered.into(), Value::from),
                ("qp_id", |p| p.qp_id.into(), |v| h(v, 6)),
                ("ud_src_qpn", |p| p.ud_src_qpn.into(), h8),
                ("imm_data", |p| p.imm_data.into(), h8),
                ("inv_stag", |p| p.inv_stag.into(), h8),
                ("comp_status", |p| p.comp_status.into(), Value::from),
                ("major_err", |p| p.major_err.into(), |v| h(v, 4)),
                ("minor_err", |p| p.minor_err.into(), |v| h(v, 4)),
                ("ud_vlan", |p| p.ud_vlan.into(), |v| h(v, 4)),
                ("ud_smac", |_| 0, |v| h(v, 12)),
                ("op_type", |p| p.op_type.into(), |v| h(v, 2)),
                ("q_type", |p| p.q_type.into(), Value::from),
                ("stag_invalid_set", |p| p.stag_invalid_set.into(), |v| (v != 0).into()),
                ("push_dropped", |p| p.push_dropped.into(), |v| (v != 0).into()),
                ("error", |p| p.error.into(), |v| (v != 0).into()),
                ("solicited_event", |p| p.solicited_event.into(), |v| (v != 0).into()),
                ("ipv4", |p| p.ipv4.into(), |v| (v != 0).into()),
                ("ud_vlan_valid", |p| p.ud_vlan_valid.into(), |v| (v != 0).into()),
                ("ud_smac_valid", |p| p.ud_smac_valid.into(), |v| (v != 0).into()),
                ("imm_valid", |p| p.imm_valid.into(), |v| (v != 0).into()),
                ("stat_raw", |p| p.tcp_seq_num_rtt.into(), h8),
            ];
            for (name, get, show) in fields {
                let (va, vb) = match name {
                    "ud_smac" => (smac(&o[0]), smac(&o[1])),
                    "qp_handle" => (map_ctx(get(&o[0]), &self.a), map_ctx(get(&o[1]), &self.b)),
                    _ => (get(&o[0]), get(&o[1])),
                };
                let written = va == vb;
                info.insert(
                    name.into(),
                    json!({"value": show(if written { va } else { 0 }), "written": written}),
                );
            }
        }
        let writes: Vec<Value> = (0..self.size * 4)
            .filter_map(|q| {
                let after = self.a.ring.read(q);
                (after != before[q]).then(|| {
                    let m = |v: u64| if q % 4 == 1 { map_ctx(v, &self.a) } else { v };
                    json!({"slot": q / 4, "off": q % 4 * 8, "before": h16(m(before[q])), "after": h16(m(after))})
                })
            })
            .collect();
        let (head, pol, shadow) = self.a.cq_state();
        let s = self.state();
        // SAFETY: the QP is live.
        let push = unsafe { ffi::vd_qp_push(self.a.qp.q) };
        json!({
            "event": "poll",
            "ret": ret[0],
            "ret_name": ret_name(ret[0]),
            "info": info,
            "state_after": {
                "cq_head": head, "cq_tail": head, "cq_polarity": pol,
                "cq_shadow_qword0": h16(shadow),
                "sq_head": s.sq_head, "sq_tail": s.sq_tail,
                "rq_head": s.rq_head, "rq_tail": s.rq_tail,
                "push_mode": push & 1 != 0, "qp_push_dropped": push & 2 != 0,
            },
            "cq_memory_writes": writes,
        })
    }

    /// Whether both sides agree on everything a poll reported (they must:
    /// the twin differs only in the fill byte).
    fn twins_agree(&self) -> bool {
        self.a.cq_state().0 == self.b.cq_state().0
            && (0..self.size * 4).all(|q| q % 4 == 1 || self.a.ring.read(q) == self.b.ring.read(q))
    }
}

/// The published CQE qword 3 fields, for reading the file (the runner
/// only takes `slot`).
fn cqe_fields(slot: usize, q3: u64) -> Value {
    json!({
        "slot": slot, "valid": q3 >> 63, "q_type_sq": q3 >> 62 & 1,
        "op": h(q3 >> 56 & 0x3f, 2), "error": q3 >> 55 & 1,
        "major_err": h(q3 >> 16 & 0xffff, 4), "minor_err": h(q3 & 0xffff, 4),
        "wqe_idx": (q3 & WQEIDX) >> WQEIDX_S, "ext": q3 >> 50 & 1,
    })
}

/// The config of a generated CQ script: the case's rings, its CQ size.
fn cq_config(name: &str, c: &CqCase, initial_head: u32) -> Value {
    let mut v = super::datapath::config_json(name, &c.qp.cfg, initial_head);
    v["cq_size"] = c.cq_size.into();
    v
}

/// A script being replayed: the vendor twins and the events as re-derived.
struct Scripted {
    rp: Replay,
    out: Vec<Value>,
}

impl Scripted {
    /// Replays one event; the twins must still agree after it.
    fn run(&mut self, e: Value) -> Result<(), String> {
        let got = self.rp.event(&e)?;
        if !self.rp.twins_agree() {
            return Err("the vendor twins disagree after an event".into());
        }
        self.out.push(got);
        Ok(())
    }

    /// Moves the rings and the CQ to the case's positions.
    fn positions(
        &mut self,
        c: &CqCase,
        fresh: &ffi::VdQpState,
        fresh_cq_pol: u8,
    ) -> Result<(), String> {
        let cfg = &c.qp.cfg;
        // ring positions: k one-quantum fillers (SQ), k one-SGE receives (RQ)
        let (sq_n, rq_n) = (cfg.sq_quanta, cfg.rq_size);
        let sq_head = c.qp.sq_filler % sq_n;
        let sq_pol = fresh.swqe_polarity ^ u8::from((c.qp.sq_filler / sq_n) % 2 == 1);
        let rq_head = c.qp.rq_filler % rq_n;
        let rq_pol = fresh.rwqe_polarity ^ u8::from((c.qp.rq_filler / rq_n) % 2 == 1);
        let set = |f: &str, v: u64| json!({"event": "set_state", "field": f, "value": v});
        if sq_head != 0 {
            self.run(set("qp.sq_ring.head", sq_head.into()))?;
        }
        if sq_pol != fresh.swqe_polarity {
            self.run(set("qp.swqe_polarity", sq_pol.into()))?;
        }
        if rq_head != 0 {
            self.run(set("qp.rq_ring.head", rq_head.into()))?;
        }
        if rq_pol != fresh.rwqe_polarity {
            self.run(set("qp.rwqe_polarity", rq_pol.into()))?;
        }
        if c.cq_head != 0 {
            self.run(set("cq.cq_ring.head", c.cq_head.into()))?;
        }
        if u8::from(c.cq_pol) != fresh_cq_pol {
            self.run(set("cq.polarity", c.cq_pol.into()))?;
        }
        Ok(())
    }

    /// Leaves the previous pass's valid bits where the device will write.
    fn previous_pass(&mut self, c: &CqCase) -> Result<(), String> {
        // The slots the device will reach hold the previous pass's valid bit
        // (what polling must take for "not written yet"); the rest stay zero
        // and are never read. Only a non-zero one is an event.
        let size = c.cq_size as usize;
        let reach: usize = c
            .events
            .iter()
            .map(|e| match e {
                Ev::Cqe { ext, .. } => 1 + usize::from(ext.is_some()),
                Ev::Poll => 0,
            })
            .sum();
        for k in 0..=reach.min(size - 1) {
            let slot = (c.cq_head as usize + k) % size;
            let this_pass = slot < c.cq_head as usize;
            let valid = if this_pass { c.cq_pol } else { !c.cq_pol };
            if valid {
                self.run(
                    json!({"event": "write_cqe", "desc": "the device's previous pass at this position (valid bit only)",
                           "fields": cqe_fields(slot, VALID), "words": [h16(0), h16(0), h16(0), h16(VALID)]}),
                )?;
            }
        }
        Ok(())
    }

    /// The case's posts, in order.
    fn posts(&mut self, c: &CqCase) -> Result<(), String> {
        for op in &c.qp.ops {
            match op {
                Op::Sq(p) => {
                    self.run(json!({"event": "post_send", "input": super::datapath::sq_input(p)}))?
                }
                Op::Rq { wr_id, sges } => self.run(
                    json!({"event": "post_recv", "wr_id": h16(*wr_id), "num_sges": sges.len()}),
                )?,
            }
        }
        Ok(())
    }

    /// The device's CQE writes and the polls between them.
    fn device(&mut self, c: &CqCase) -> Result<(), String> {
        let cfg = &c.qp.cfg;
        let size = c.cq_size as usize;
        let (mut dev, mut dev_pol) = (c.cq_head as usize, c.cq_pol);
        for e in &c.events {
            match e {
                Ev::Poll => self.run(json!({"event": "poll"}))?,
                Ev::Cqe { q, ext, null_ctx, stale, target } => {
                    let mut w = *q;
                    if let Some(k) = target {
                        crate::cq::target_wqe(
                            &mut w[3],
                            *k,
                            &self.rp.state(),
                            cfg,
                            &self.rp.starts,
                        );
                    }
                    let ctx = if *null_ctx { 0 } else { PUB_CTX };
                    w[1] = ctx;
                    w[3] = (w[3] & !VALID) | if dev_pol ^ *stale { VALID } else { 0 };
                    let slot = dev;
                    dev = (dev + 1) % size;
                    if dev == 0 {
                        dev_pol = !dev_pol;
                    }
                    let mut ev = json!({"event": "write_cqe", "desc": "generated (cq.rs gen_cq_case)",
                                        "fields": cqe_fields(slot, w[3]),
                                        "words": w.iter().map(|x| h16(*x)).collect::<Vec<_>>()});
                    if let Some(x) = ext {
                        let mut x = *x;
                        // qword 1 of an extension carries the context too (the
                        // vendor reads it as a QP if a later poll takes the slot
                        // for a CQE)
                        x[1] = ctx;
                        x[3] = (x[3] & !VALID) | if dev_pol ^ *stale { VALID } else { 0 };
                        ev["ext_fields"] = json!({"slot": dev});
                        ev["ext_words"] = x.iter().map(|v| h16(*v)).collect();
                        dev = (dev + 1) % size;
                        if dev == 0 {
                            dev_pol = !dev_pol;
                        }
                    }
                    debug_assert!(w[3] & EXT == 0 || ext.is_some());
                    self.run(ev)?;
                }
            }
        }
        Ok(())
    }
}

/// The script of a generated case as published events, replayed on the
/// vendor (set-up posts first, as `cq::run_cq`).
fn script(c: &CqCase) -> Result<(Vec<Value>, u32), String> {
    let rp = Replay::new(&c.qp.cfg, 3, c.cq_size, 7)?;
    let fresh = rp.state();
    // SAFETY: the QP is live.
    let initial_head = unsafe { ffi::vd_qp_initial_head(rp.a.qp.q) };
    let (_, fresh_cq_pol, _) = rp.a.cq_state();
    let mut s = Scripted { rp, out: Vec::new() };
    s.positions(c, &fresh, fresh_cq_pol)?;
    s.previous_pass(c)?;
    s.posts(c)?;
    s.device(c)?;
    Ok((s.out, initial_head))
}

/// Generated scripts: their configs, the `cq_cases[]` entries, and per
/// listed deviation how many scripts were left out.
pub(crate) struct Generated {
    pub(crate) configs: Vec<Value>,
    pub(crate) cases: Vec<Value>,
    pub(crate) left_out: std::collections::BTreeMap<String, u64>,
}

/// Generated CQ scripts: `(configs, cq_cases, left out by deviation)`.
pub(crate) fn generate(seed: u64, cases: u64) -> Result<Generated, String> {
    // its own stream: the SQ/RQ cases do not move when this area changes
    let mut r = Rng::new(seed ^ 0xc0c0_0000_0000_0000);
    let (mut configs, mut out) = (Vec::new(), Vec::new());
    let mut left = std::collections::BTreeMap::new();
    for n in 0..cases {
        let c = crate::cq::gen_cq_case(&mut r);
        match crate::cq::run_cq(&c) {
            Ok(None) => {}
            Ok(Some(dev)) => {
                *left.entry(dev.to_string()).or_insert(0) += 1;
                continue;
            }
            Err(d) => return Err(format!("cq script {n}: driver and vendor differ: {d:?}")),
        }
        let name = format!("cq{n}");
        let (events, ih) = script(&c)?;
        configs.push(cq_config(&name, &c, ih));
        out.push(
            json!({"name": format!("cq_script_{n}@{name}"), "config": name, "events": events}),
        );
    }
    Ok(Generated { configs, cases: out, left_out: left })
}

/// State keys the glue re-derives (the published file has more).
const STATE_KEYS: &[&str] = &[
    "push_mode",
    "qp_push_dropped",
    "cq_head",
    "cq_tail",
    "cq_polarity",
    "cq_shadow_qword0",
    "sq_head",
    "sq_tail",
    "rq_head",
    "rq_tail",
];

/// Re-derives published `cq_cases[]` into `r`.
pub(crate) fn rederive(v: &Value, r: &mut Rederived) {
    let configs: Vec<&Value> =
        v["meta"]["configs"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
    for c in v["cq_cases"].as_array().into_iter().flatten() {
        let name = c["name"].as_str().unwrap_or("?");
        let Some(cv) = configs.iter().find(|x| x["name"] == c["config"]).copied() else {
            r.skip("config not in meta.configs");
            continue;
        };
        if num(&cv["first_sq_wq"]).unwrap_or(0) != 0 {
            r.skip("iWARP LSMM config (first_sq_wq): the glue builds RoCE QPs");
            continue;
        }
        let Some(cfg) = super::datapath::cfg_of(cv) else {
            r.skip("config lacks a field");
            continue;
        };
        let qp_type = num(&cv["qp_type"]).unwrap_or(3) as u8;
        let cq_size = num(&cv["cq_size"]).unwrap_or(0) as u32;
        let cq_id = num(&cv["cq_id"]).unwrap_or(7) as u32;
        let mut rp = match Replay::new(&cfg, qp_type, cq_size, cq_id) {
            Ok(x) => x,
            Err(e) => {
                r.differ.push(format!("{name}: vendor set-up failed: {e}"));
                continue;
            }
        };
        let mut verdict: Result<(), String> = Ok(());
        for (i, e) in c["events"].as_array().into_iter().flatten().enumerate() {
            let got = match rp.event(e) {
                Ok(g) => g,
                Err(why) => {
                    verdict = Err(format!("not expressible: {why}"));
                    break;
                }
            };
            let mut want = e.clone();
            if e["event"] == "poll" {
                if let Some(sa) = want["state_after"].as_object_mut() {
                    sa.retain(|k, _| STATE_KEYS.contains(&k.as_str()));
                }
                if want["ret"] != 0 {
                    want["info"] = json!({});
                }
            }
            if let Some(d) = super::first_diff(&got, &want, &["ret_name", "note", "desc"], "") {
                verdict = Err(format!("event {i} ({}): {d}", e["event"].as_str().unwrap_or("?")));
                break;
            }
        }
        match verdict {
            Ok(()) => r.identical += 1,
            Err(e) if e.starts_with("not expressible: ") => {
                r.skip(&format!("cq_cases: {}", &e["not expressible: ".len()..]))
            }
            Err(e) => match linux_6_1_differs(c, qp_type) {
                Some(why) => r.known(why),
                None => r.differ.push(format!("{name}: {e}")),
            },
        }
    }
}

/// A published script whose difference is one of the listed deviations
/// where the published (newer) vendor code and Linux 6.1 disagree and the
/// driver follows the published code (`deviations.toml`), found from the
/// CQEs the script writes.
fn linux_6_1_differs(case: &Value, qp_type: u8) -> Option<&'static str> {
    let q3s = case["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["event"] == "write_cqe")
        .filter_map(|e| e["words"].get(3).and_then(num));
    let major = |q3: u64| q3 >> 16 & 0xffff;
    let error = |q3: u64| q3 >> 55 & 1 == 1;
    for q3 in q3s {
        if error(q3) && major(q3) == 0xfffe {
            return Some(
                "major 0xFFFE is a flush in the published source, an unknown error in Linux 6.1 \
                 (deviations.toml major_0xfffe_is_a_flush)",
            );
        }
        // IRDMA_QP_TYPE_ROCE_UD (defs.h)
        if qp_type == 4 && q3 & SQ != 0 && error(q3) && major(q3) & 0xf000 == 0xe000 {
            return Some(
                "a UD SQ CQE with major 0xExxx is a success in the published source, an error \
                 in Linux 6.1 (deviations.toml ud_sq_major_0xe_is_success)",
            );
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated scripts re-derive identically, poll by poll; a
    /// changed poll result, a changed `written` flag or a dropped memory
    /// rewrite is a difference.
    #[test]
    fn scripts_rederive_and_a_change_is_caught() {
        let _serial = crate::serial();
        let Generated { configs, cases, .. } = generate(5, 48).expect("generates");
        assert!(cases.len() >= 8, "only {} scripts kept", cases.len());
        let doc = json!({"meta": {"configs": configs}, "cq_cases": cases});
        let mut r = Rederived::default();
        rederive(&doc, &mut r);
        assert_eq!((r.identical, r.differ.len()), (cases.len(), 0), "{r:?}");
        let polls = |d: &Value| -> Vec<(usize, usize)> {
            let mut v = Vec::new();
            for (i, c) in d["cq_cases"].as_array().into_iter().flatten().enumerate() {
                for (j, e) in c["events"].as_array().into_iter().flatten().enumerate() {
                    if e["event"] == "poll" && e["ret"] == 0 {
                        v.push((i, j));
                    }
                }
            }
            v
        };
        let (i, j) = polls(&doc)[0];
        let changes: [fn(&mut Value); 3] = [
            |e| e["info"]["wr_id"]["value"] = h16(0x1234),
            |e| {
                e["info"]["bytes_xfered"]["written"] =
                    (!e["info"]["bytes_xfered"]["written"].as_bool().unwrap_or(false)).into()
            },
            |e| e["state_after"]["cq_head"] = 99.into(),
        ];
        for f in changes {
            let mut d = doc.clone();
            f(&mut d["cq_cases"][i]["events"][j]);
            let mut r = Rederived::default();
            rederive(&d, &mut r);
            assert_eq!(r.differ.len(), 1, "{r:?}");
        }
        // a recorded memory rewrite, dropped
        let w = doc["cq_cases"].as_array().into_iter().flatten().enumerate().find_map(|(i, c)| {
            c["events"]
                .as_array()
                .into_iter()
                .flatten()
                .position(|e| e["cq_memory_writes"].as_array().is_some_and(|a| !a.is_empty()))
                .map(|j| (i, j))
        });
        if let Some((i, j)) = w {
            let mut d = doc.clone();
            d["cq_cases"][i]["events"][j]["cq_memory_writes"] = json!([]);
            let mut r = Rederived::default();
            rederive(&d, &mut r);
            assert_eq!(r.differ.len(), 1, "{r:?}");
        }
    }
}
