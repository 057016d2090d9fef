//! `sq_misc_cases[]` and `helpers` of `datapath-vectors.json` from the
//! vendor's kernel `uk.c` (published schema, `tests/conformance/README.md`
//! "sq_misc_cases[], helpers").
//!
//! - `helpers`: the sizing tables, each row what the vendor code returned:
//!   `irdma_fragcnt_to_quanta_sq`, `irdma_fragcnt_to_wqesize_rq`,
//!   `irdma_get_wqe_shift` (GEN_2 attributes, `shim/glue.c`
//!   `vd_get_wqe_shift`), and by posting on a fresh 64-quanta QP (13
//!   fragments, 101 inline bytes, as the runner's scratch ring) the
//!   `op_quanta_table` (quanta tracked, header ADDFRAGCNT / INLINEDATALEN)
//!   and `inline_data_size_to_quanta` (the quanta of an inline WRITE, for
//!   the lengths GEN_2 accepts: `irdma_inline_data_size_to_quanta` is
//!   static in uk.c, a longer one is refused before it is sized).
//!   `calc_depth_shift` is not written: its published columns are the verbs
//!   layer's arithmetic (`reported_max_send_wr`), not uk.c's.
//! - `sq_misc_cases`: seeded sequences on a generated ring: batches posted
//!   with `post_sq = false` then `irdma_uk_qp_post_wr` (one doorbell), and
//!   ring-full runs (a WRITE repeated until the vendor refuses it), with
//!   consumes in between.

use serde_json::{Map, Value, json};

use super::{Rederived, h8, num};
use crate::case::{self, Cfg};
use crate::ffi::{self, IbSge};
use crate::rng::Rng;
use crate::run::{self, VQp};

/// defs.h IRDMAQPSQ_ADDFRAGCNT (41:38) and IRDMAQPSQ_INLINEDATALEN (55:48).
fn addfragcnt(hdr: u64) -> u64 {
    hdr >> 38 & 0xf
}
fn inlinedatalen(hdr: u64) -> u64 {
    hdr >> 48 & 0xff
}

/// The runner's scratch ring: 64 quanta, 13 fragments, 101 inline bytes.
fn scratch_cfg() -> Cfg {
    Cfg {
        sq_quanta: 64,
        max_frags: case::MAX_FRAGS,
        max_inline: case::MAX_INLINE,
        qp_id: 1,
        rq_size: 8,
        rq_shift: 0,
        rq_frags: 1,
    }
}

/// The conformance runner's `dummy_sges`.
fn dummy_sges(n: usize) -> Value {
    (0..n)
        .map(|i| {
            json!({"addr": super::h16(0x7d00_0030_0080 + ((i as u64) << 16)), "length": 512,
                   "lkey": h8(0xcafe00 + i as u64)})
        })
        .collect()
}

/// Posts one op of the `op_quanta_table` on a fresh scratch QP:
/// `(ret, quanta, header)`.
fn post_row(op: &str, sges: usize, inline_len: usize) -> Result<(i32, u64, u64), String> {
    let (api, imm) = match op {
        "rdma_write" => ("irdma_uk_rdma_write", false),
        "rdma_write_imm" => ("irdma_uk_rdma_write", true),
        "rdma_read" => ("irdma_uk_rdma_read", false),
        "send" => ("irdma_uk_send", false),
        "send_imm" => ("irdma_uk_send", true),
        "inline_rdma_write" => ("irdma_uk_inline_rdma_write", false),
        "inline_send" => ("irdma_uk_inline_send", false),
        other => return Err(format!("op {other}: not in the glue")),
    };
    let op_type = match op {
        "rdma_read" => 1,                         // user.h IRDMA_OP_TYPE_RDMA_READ
        "send" | "send_imm" | "inline_send" => 3, // IRDMA_OP_TYPE_SEND
        _ => 0,                                   // IRDMA_OP_TYPE_RDMA_WRITE
    };
    // an inline payload is one SGE of its length (as the runner posts it)
    let (n, list) = if op.starts_with("inline") {
        (1, json!([{"addr": "0x0", "length": inline_len, "lkey": "0x0"}]))
    } else {
        (sges, dummy_sges(sges))
    };
    let input = json!({
        "api": api, "op_type": op_type, "wr_id": "0x1", "remote_addr": "0x1", "rkey": "0x2",
        "imm_data_valid": imm, "imm_data": "0x00001234", "num_sges": n, "sges": list,
        "inline_data": "5a".repeat(inline_len),
    });
    let p = super::datapath::sq_post_of(&input).map_err(String::from)?;
    let v: VQp = run::vendor_qp_slack(&scratch_cfg(), 128 * 4).map_err(|d| d.what)?;
    let mut bufs = Vec::new();
    let s = run::sges_of(&p, &mut bufs);
    let vp = run::vendor_post(&p, &s);
    let mut idx = 0;
    // SAFETY: `vp` points at `s`/`bufs`, alive for the call.
    let ret = -unsafe { ffi::vd_sq_post(v.q, &vp, &mut idx) };
    run::vendor_writes();
    if ret != 0 {
        return Ok((ret, 0, 0));
    }
    let (mut w, mut l, mut qn) = (0u64, 0u32, 0u16);
    // SAFETY: the QP is live; the out pointers are valid.
    unsafe { ffi::vd_qp_trk(v.q, idx, &mut w, &mut l, &mut qn) };
    Ok((ret, qn.into(), v.sq.read(idx as usize * 4 + 3)))
}

fn op_row(op: &str, sges: usize, inline_len: usize) -> Result<Value, String> {
    let (ret, quanta, hdr) = post_row(op, sges, inline_len)?;
    Ok(if op.starts_with("inline") {
        json!({"op": op, "inline_len": inline_len, "ret": ret, "quanta": quanta,
               "hdr_inline_len": inlinedatalen(hdr)})
    } else {
        json!({"op": op, "num_sges": sges, "ret": ret, "quanta": quanta,
               "hdr_addl_frag_cnt": addfragcnt(hdr)})
    })
}

fn frag_row(f: u32, rq: bool) -> Value {
    let mut q = 0u16;
    // SAFETY: plain functions writing one u16 through a valid pointer.
    let ret = -unsafe {
        if rq {
            ffi::irdma_fragcnt_to_wqesize_rq(f, &mut q)
        } else {
            ffi::irdma_fragcnt_to_quanta_sq(f, &mut q)
        }
    };
    let q = if ret == 0 { q } else { 0 };
    if rq {
        json!({"frag_cnt": f, "ret": ret, "wqe_size_bytes": q})
    } else {
        json!({"frag_cnt": f, "ret": ret, "quanta": q})
    }
}

fn shift_row(sge: u32, inline: u32) -> Value {
    let mut s = 0u8;
    // SAFETY: writes one u8 through a valid pointer.
    unsafe { ffi::vd_get_wqe_shift(sge, inline, &mut s) };
    json!({"sge": sge, "inline_data": inline, "shift": s})
}

fn inline_row(len: usize) -> Result<Option<Value>, String> {
    let (ret, quanta, _) = post_row("inline_rdma_write", 0, len)?;
    Ok((ret == 0).then(|| json!({"len": len, "quanta": quanta, "len_allowed_gen2": true})))
}

const OPS: &[&str] = &["rdma_write", "rdma_write_imm", "rdma_read", "send", "send_imm"];
const INLINE_OPS: &[&str] = &["inline_rdma_write", "inline_send"];

/// The `helpers` object (seed-independent: whole tables).
pub(crate) fn helpers() -> Result<Value, String> {
    let mut ops = Vec::new();
    for op in OPS {
        for n in 0..=case::MAX_FRAGS as usize + 1 {
            ops.push(op_row(op, n, 0)?);
        }
    }
    for op in INLINE_OPS {
        for l in 0..=case::MAX_INLINE as usize + 1 {
            ops.push(op_row(op, 0, l)?);
        }
    }
    let mut inline = Vec::new();
    for l in 0..=case::MAX_INLINE as usize {
        inline.extend(inline_row(l)?);
    }
    let shifts: Vec<Value> = (0..16u32)
        .flat_map(|s| [0u32, 8, 9, 39, 40, 101, 102, 226].map(|i| shift_row(s, i)))
        .collect();
    Ok(json!({
        "fragcnt_to_quanta_sq": (0..=16).map(|f| frag_row(f, false)).collect::<Vec<_>>(),
        "fragcnt_to_wqesize_rq": (0..=16).map(|f| frag_row(f, true)).collect::<Vec<_>>(),
        "inline_data_size_to_quanta": inline,
        "get_wqe_shift": shifts,
        "op_quanta_table": ops,
    }))
}

/// Re-derives the published `helpers` tables: one case per table.
pub(crate) fn rederive_helpers(h: &Value, r: &mut Rederived) {
    let Some(obj) = h.as_object() else { return };
    for (table, rows) in obj {
        let rows = rows.as_array().cloned().unwrap_or_default();
        let mut skipped = 0;
        let mut diff = None;
        for row in &rows {
            let g = |k: &str| num(&row[k]).unwrap_or(0);
            let got = match table.as_str() {
                "fragcnt_to_quanta_sq" => Some(frag_row(g("frag_cnt") as u32, false)),
                "fragcnt_to_wqesize_rq" => Some(frag_row(g("frag_cnt") as u32, true)),
                "get_wqe_shift" => Some(shift_row(g("sge") as u32, g("inline_data") as u32)),
                "inline_data_size_to_quanta" => match inline_row(g("len") as usize) {
                    Ok(x) => x,
                    Err(e) => {
                        diff = Some(e);
                        break;
                    }
                },
                "op_quanta_table" => {
                    match op_row(
                        row["op"].as_str().unwrap_or(""),
                        g("num_sges") as usize,
                        g("inline_len") as usize,
                    ) {
                        Ok(x) => Some(x),
                        Err(e) => {
                            diff = Some(e);
                            break;
                        }
                    }
                }
                _ => None,
            };
            let Some(got) = got else {
                skipped += 1;
                continue;
            };
            // a refused row's other columns are the published harness's
            // zero-initialised outputs
            let ignore: &[&str] = if num(&row["ret"]).unwrap_or(0) != 0 {
                &["quanta", "wqe_size_bytes", "hdr_addl_frag_cnt", "hdr_inline_len"]
            } else {
                &[]
            };
            if let Some(d) = super::first_diff(&got, row, ignore, "") {
                diff = Some(format!("row {row}: {d}"));
                break;
            }
        }
        let name = format!("helpers.{table}");
        match diff {
            Some(d) => r.differ.push(format!("{name}: {d}")),
            None if skipped == rows.len() => r.skip(&format!(
                "{name}: {}",
                if table == "calc_depth_shift" {
                    "the verbs layer's sizing (reported_max_send_wr …), not uk.c's"
                } else {
                    "a table the glue does not have"
                }
            )),
            None => {
                r.identical += 1;
                if skipped > 0 {
                    r.skip(&format!(
                        "{name}: rows past GEN_2's 101 inline bytes (irdma_inline_data_size_to_quanta is static in uk.c; the post refuses them first)"
                    ));
                }
            }
        }
    }
}

/// `irdma_uk_qp_post_wr` with the device caught up with every doorbell
/// (its SQ tail in the shadow area is the last doorbell's head, as
/// `datapath.rs` sets it): the kernel rings when the head moved since.
fn post_wr(v: &VQp) {
    // SAFETY: the QP is live.
    unsafe {
        ffi::vd_qp_set_hw_tail(v.q, ffi::vd_qp_initial_head(v.q));
        ffi::vd_qp_post_wr(v.q);
    }
}

/// One `sq_misc_cases` step on the vendor: posts `reps` WRITEs of `sges`
/// SGEs (`post_sq` rings each), stopping at the first refusal; returns the
/// step's recorded object.
fn write_step(v: &VQp, db: u64, sges: usize, reps: u64, post_sq: bool) -> Result<Value, String> {
    let input = json!({"api": "irdma_uk_rdma_write", "op_type": 0, "wr_id": "0x0", "remote_addr": "0x1",
                       "rkey": "0x2", "num_sges": sges, "sges": dummy_sges(sges), "post_sq": post_sq});
    let p = super::datapath::sq_post_of(&input).map_err(String::from)?;
    let mut ret = 0;
    let mut dbs = Vec::new();
    for r in 0..reps {
        let mut p = p.clone();
        p.wr_id = r;
        let mut bufs = Vec::new();
        let s = run::sges_of(&p, &mut bufs);
        let vp = run::vendor_post(&p, &s);
        let mut idx = 0;
        // SAFETY: `vp` points at `s`, alive for the call.
        ret = -unsafe { ffi::vd_sq_post(v.q, &vp, &mut idx) };
        dbs.extend(run::vendor_writes().into_iter().filter(|(a, _)| *a == db).map(|(_, x)| x));
        if ret != 0 {
            break;
        }
    }
    let s = v.state();
    let mut m = Map::new();
    m.insert("op".into(), format!("irdma_uk_rdma_write post_sq={post_sq}").into());
    m.insert("num_sges".into(), sges.into());
    if reps > 1 {
        m.insert("repeat".into(), reps.into());
    } else {
        m.insert("wr_id".into(), "0x0".into());
    }
    m.insert("signaled".into(), false.into());
    m.insert("ret".into(), ret.into());
    m.insert("sq_head_after".into(), s.sq_head.into());
    // SAFETY: the QP is live.
    m.insert("initial_ring_head_after".into(), unsafe { ffi::vd_qp_initial_head(v.q) }.into());
    if reps == 1 {
        m.insert("doorbell_written".into(), (!dbs.is_empty()).into());
        if let Some(x) = dbs.first() {
            m.insert("doorbell_value".into(), h8((*x).into()));
        }
    }
    Ok(Value::Object(m))
}

/// `n` filler WRITEs on the vendor QP, each consumed at once (the ring
/// positions a case starts from), and their doorbells dropped.
fn fill(v: &VQp, n: u64) -> Result<(), String> {
    let one = [IbSge { addr: 0x7f00_0010_0040, length: 256, lkey: 0xabcd00 }];
    for _ in 0..n {
        let mut idx = 0;
        let vp = run::vendor_post(&run::filler_post(&one), &one);
        // SAFETY: `vp` points at `one`.
        if unsafe { ffi::vd_sq_post(v.q, &vp, &mut idx) } != 0 {
            return Err("filler refused".into());
        }
        // SAFETY: the QP is live.
        unsafe { ffi::vd_qp_consume_all(v.q) };
    }
    run::vendor_writes();
    Ok(())
}

/// The `irdma_uk_qp_post_wr` step (named `op`): the doorbell, then the SQ
/// head, the initial head and the doorbell value written to `db`, if any.
fn post_wr_step(v: &VQp, db: u64, op: &str) -> Value {
    post_wr(v);
    let dbs: Vec<u32> =
        run::vendor_writes().into_iter().filter(|(a, _)| *a == db).map(|(_, x)| x).collect();
    let mut m = json!({"op": op, "sq_head_after": v.state().sq_head,
                       // SAFETY: the QP is live.
                       "initial_ring_head_after": unsafe { ffi::vd_qp_initial_head(v.q) },
                       "doorbell_written": !dbs.is_empty()});
    if let Some(x) = dbs.first() {
        m["doorbell_value"] = h8((*x).into());
    }
    m
}

/// Seeded `sq_misc_cases` (and their configs), `cases / 8` of them (at
/// least one).
pub(crate) fn generate_misc(seed: u64, cases: u64) -> Result<(Vec<Value>, Vec<Value>), String> {
    let mut r = Rng::new(seed ^ 0x5151_0000_0000_0000);
    let (mut configs, mut out) = (Vec::new(), Vec::new());
    for n in 0..(cases / 8).max(1) {
        let c = case::gen_case_domain(&mut r).cfg;
        let v = run::vendor_qp_slack(&c, 128 * 4).map_err(|d| d.what)?;
        // SAFETY: the QP is live.
        let (db, ih) = unsafe { (ffi::vd_qp_db_addr(v.q), ffi::vd_qp_initial_head(v.q)) };
        let name = format!("m{n}");
        configs.push(super::datapath::config_json(&name, &c, ih));
        let filler = r.below(u64::from(c.sq_quanta) * 2);
        fill(&v, filler).map_err(|e| format!("misc {e}"))?;
        let mut steps = Vec::new();
        for _ in 0..r.range(2, 5) {
            if r.chance(1, 2) {
                // a batch, then one doorbell
                for _ in 0..r.range(1, 5) {
                    steps.push(write_step(&v, db, r.range(1, 4) as usize, 1, false)?);
                }
                // SAFETY: the QP is live.
                if v.state().sq_head == unsafe { ffi::vd_qp_initial_head(v.q) } {
                    // nothing posted since the last doorbell: Linux 6.1
                    // does not ring, rdma-core (and the driver) ring again
                    // (the re-derivation's documented doorbell difference)
                    continue;
                }
                steps.push(post_wr_step(&v, db, "irdma_uk_qp_post_wr"));
            } else {
                // WRITEs until the ring is full (or the repeat count runs
                // out), without doorbells (the runner checks a step's
                // doorbell only as one write)
                let sges = r.range(1, u64::from(case::MAX_FRAGS)) as usize;
                let reps = u64::from(c.sq_quanta) * 2 / (sges as u64 / 2 + 1) + 1;
                steps.push(write_step(&v, db, sges, reps, false)?);
            }
            if r.chance(1, 2) {
                // SAFETY: the QP is live.
                unsafe { ffi::vd_qp_consume_all(v.q) };
                steps.push(json!({"op": "consume: sq_ring.tail = sq_ring.head",
                                  "sq_head_after": v.state().sq_head}));
            }
        }
        out.push(json!({"name": format!("misc_{n}@{name}"), "config": name,
                        "history": {"filler_posts": filler},
                        "note": "generated (regen/dpmisc.rs)", "steps": steps}));
    }
    Ok((configs, out))
}

/// Re-derives published `sq_misc_cases`: each step replayed on a vendor
/// QP of the case's config after its fillers.
pub(crate) fn rederive_misc(v: &Value, r: &mut Rederived) {
    let configs: Vec<&Value> =
        v["meta"]["configs"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
    for c in v["sq_misc_cases"].as_array().into_iter().flatten() {
        let name = c["name"].as_str().unwrap_or("?");
        let Some(cfg) = configs
            .iter()
            .find(|x| x["name"] == c["config"])
            .and_then(|x| super::datapath::cfg_of(x))
        else {
            r.skip("config not in meta.configs");
            continue;
        };
        match replay_misc(c, &cfg) {
            Ok(Some(d)) => r.differ.push(format!("{name}: {d}")),
            Ok(None) => r.identical += 1,
            Err(why) => r.skip(&format!("sq_misc_cases: {why}")),
        }
    }
}

fn replay_misc(c: &Value, cfg: &Cfg) -> Result<Option<String>, String> {
    let v = run::vendor_qp_slack(cfg, 128 * 4).map_err(|d| d.what)?;
    // SAFETY: the QP is live.
    let db = unsafe { ffi::vd_qp_db_addr(v.q) };
    fill(&v, num(&c["history"]["filler_posts"]).unwrap_or(0))?;
    for (i, st) in c["steps"].as_array().into_iter().flatten().enumerate() {
        let op = st["op"].as_str().unwrap_or("");
        let got = if op.starts_with("irdma_uk_qp_post_wr") {
            post_wr_step(&v, db, op)
        } else if let Some(rest) = op.strip_prefix("irdma_uk_rdma_write") {
            let reps = num(&st["repeat"]).unwrap_or(1);
            let mut g = write_step(
                &v,
                db,
                num(&st["num_sges"]).unwrap_or(0) as usize,
                reps,
                rest.contains("post_sq=true"),
            )?;
            g["op"] = op.into();
            g
        } else if op.starts_with("consume") {
            // SAFETY: the QP is live.
            unsafe { ffi::vd_qp_consume_all(v.q) };
            json!({"op": op, "sq_head_after": v.state().sq_head})
        } else {
            return Err(format!("step {op}: not in the glue"));
        };
        // keys the recorded step has and the re-derived one does not (or
        // vice versa) that describe the input, not the outcome
        let ignore = ["op", "repeat", "wr_id", "signaled", "num_sges", "shadow_area_qword0"];
        let want = st.as_object().cloned().unwrap_or_default();
        let got: Map<String, Value> = got
            .as_object()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| want.contains_key(k))
            .collect();
        if let Some(d) = super::first_diff(&Value::Object(got), &Value::Object(want), &ignore, "") {
            return Ok(Some(format!("step {i} ({op}): {d}")));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Generated misc cases and helper tables re-derive identically; a
    /// changed head, doorbell or table row is a difference.
    #[test]
    fn misc_and_helpers_rederive_and_a_change_is_caught() {
        let _serial = crate::serial();
        let (configs, misc) = generate_misc(9, 48).expect("generates");
        let helpers = helpers().expect("helpers");
        let doc = json!({"meta": {"configs": configs}, "sq_misc_cases": misc});
        let mut r = Rederived::default();
        rederive_misc(&doc, &mut r);
        assert_eq!((r.identical, r.differ.len()), (misc.len(), 0), "{r:?}");
        let mut r = Rederived::default();
        rederive_helpers(&helpers, &mut r);
        assert_eq!((r.identical, r.differ.len()), (5, 0), "{r:?}");
        let mut d = doc.clone();
        let st = &mut d["sq_misc_cases"][0]["steps"][0];
        st["sq_head_after"] = (num(&st["sq_head_after"]).unwrap_or(0) + 1).into();
        let mut r = Rederived::default();
        rederive_misc(&d, &mut r);
        assert_eq!(r.differ.len(), 1, "{r:?}");
        let mut h = helpers.clone();
        h["op_quanta_table"][3]["quanta"] = 7.into();
        h["get_wqe_shift"][20]["shift"] = 9.into();
        let mut r = Rederived::default();
        rederive_helpers(&h, &mut r);
        assert_eq!(r.differ.len(), 2, "{r:?}");
    }
}
