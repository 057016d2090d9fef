//! `decode_aeqe` cases of `cqp-vectors.json` from the vendor's Linux 6.1
//! `irdma_sc_get_next_aeqe` (ctrl.c, through `shim/ctrl_glue.c`
//! `vd_get_next_aeqe`): an AEQ element at the ring's tail, the info the
//! vendor decoded (its struct zeroed first) and the tail and polarity
//! after, in the published schema. Linux 6.1's `struct irdma_aeqe_info`
//! has no `srq`, `def_info` or `err_rq_idx_valid`: those outputs are not
//! written, and not re-derived (counted).
//!
//! Re-derives the published `decode_aeqe` and
//! `decode_aeqe_classification` cases (the latter: one element per AE
//! source, `src0.` / `src5.` outputs).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Rederived, h, h16, num};
use crate::rng::Rng;

#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct VdAeqeOut {
    compl_ctx: u64,
    qp_cq_id: u32,
    tail_after: u32,
    ae_id: u16,
    wqe_idx: u16,
    tcp_state: u8,
    iwarp_state: u8,
    qp: u8,
    cq: u8,
    sq: u8,
    rq: u8,
    in_rdrsp_wr: u8,
    out_rdrsp: u8,
    aeqe_overflow: u8,
    q2_data_written: u8,
    ae_src: u8,
    polarity_after: u8,
}

unsafe extern "C" {
    fn vd_get_next_aeqe(ring: *mut u64, size: u32, tail: u32, pol: u8, o: *mut VdAeqeOut) -> i32;
}

/// Runs the vendor's decode on `w` placed at `tail` of a `size`-element
/// ring: `(ret, info)`.
fn decode(w: [u64; 2], size: u32, tail: u32, pol: u8) -> (i32, VdAeqeOut) {
    let size = size.max(1);
    let mut ring = vec![0u64; size as usize * 2];
    let t = (tail % size) as usize;
    ring[2 * t] = w[0];
    ring[2 * t + 1] = w[1];
    let mut o = VdAeqeOut::default();
    // SAFETY: `ring` holds `size` 16-byte elements and outlives the call;
    // the vendor reads the one at `tail % size`; `o` is a valid out pointer.
    let ret = unsafe { vd_get_next_aeqe(ring.as_mut_ptr(), size, tail, pol, &mut o) };
    (ret, o)
}

/// The decoded fields under the published names, with `prefix`.
fn fields(prefix: &str, o: &VdAeqeOut) -> Map<String, Value> {
    let mut m = Map::new();
    let mut p = |k: &str, v: Value| {
        m.insert(format!("{prefix}{k}"), v);
    };
    p("compl_ctx", h(o.compl_ctx, 1));
    p("qp_cq_id", h(o.qp_cq_id.into(), 1));
    p("wqe_idx", h(o.wqe_idx.into(), 1));
    p("ae_id", h(o.ae_id.into(), 1));
    p("tcp_state", o.tcp_state.into());
    p("iwarp_state", o.iwarp_state.into());
    for (k, v) in [
        ("qp", o.qp),
        ("cq", o.cq),
        ("sq", o.sq),
        ("rq", o.rq),
        ("in_rdrsp_wr", o.in_rdrsp_wr),
        ("out_rdrsp", o.out_rdrsp),
        ("aeqe_overflow", o.aeqe_overflow),
        ("q2_data_written", o.q2_data_written),
        ("ae_src", o.ae_src),
    ] {
        p(k, v.into());
    }
    m
}

/// A case's outputs: the fields (when decoded) and the ring after.
fn outputs(ret: i32, o: &VdAeqeOut) -> Value {
    let mut m = if ret == 0 { fields("", o) } else { Map::new() };
    m.insert("aeq.ring.tail(after)".into(), o.tail_after.into());
    m.insert("aeq.polarity(after)".into(), o.polarity_after.into());
    Value::Object(m)
}

/// `n` generated elements (those the driver decodes otherwise, as the
/// published source does, are drawn again and counted in `left_out`):
/// word 0 a completion context, word 1 random
/// with its AE code (defs.h IRDMA_AEQE_AECODE 45:34) mostly below 0x600
/// (where the vendor's classification switch has its cases) and the valid
/// bit (IRDMA_AEQE_VALID 63) mostly the ring's polarity.
pub(crate) fn generate(seed: u64, n: u64, left_out: &mut BTreeMap<String, u64>) -> Vec<Value> {
    let mut r = Rng::new(seed ^ 0xaeae_0000_0000_0000);
    // draws until `n` are kept (at most 20 n)
    let mut out = Vec::new();
    for k in 0..n * 20 {
        if out.len() as u64 >= n {
            break;
        }
        {
            let size = r.pick(&[2u32, 8, 64, 256]);
            let tail = r.below(u64::from(size)) as u32;
            let pol = r.chance(1, 2) as u8;
            let w0 = if r.chance(1, 2) { r.next_u64() } else { r.below(1 << 20) };
            let code = if r.chance(3, 4) { r.below(0x600) } else { r.below(1 << 12) };
            let mut w1 = (r.next_u64() & !(0xfffu64 << 34)) | code << 34;
            let valid = if r.chance(7, 8) { pol } else { pol ^ 1 };
            w1 = (w1 & !(1u64 << 63)) | u64::from(valid) << 63;
            let (ret, o) = decode([w0, w1], size, tail, pol);
            // an element the driver decodes as the published source does,
            // where Linux 6.1 decodes it otherwise: left out, counted
            if let Some(a) = irdma::cqp::decode::Aeqe::decode(&[w0, w1], pol != 0)
                && ret == 0
                && compare(&driver_fields("", &a), &Value::Object(fields("", &o))).is_err()
            {
                *left_out.entry(format!("decode_aeqe: {DEVIATION}")).or_default() += 1;
                continue;
            }
            out.push(json!({
                "op": "decode_aeqe", "builder": "irdma_sc_get_next_aeqe", "case": format!("ae{k}"),
                "ret": ret,
                "inputs": {"aeqe_words": [h16(w0), h16(w1)], "aeq.polarity": pol,
                           "aeq.ring.tail": tail, "aeq.ring.size": size},
                "reg_writes": [],
                "outputs": outputs(ret, &o),
            }));
        }
    }
    out
}

/// The driver's decode of the same element under the same names
/// (`irdma::cqp::decode::Aeqe`), for the cases where Linux 6.1 and the
/// published source part (`deviations.toml`
/// `aeqe_decode_follows_published_source`).
fn driver_fields(prefix: &str, a: &irdma::cqp::decode::Aeqe) -> Map<String, Value> {
    let o = VdAeqeOut {
        compl_ctx: a.compl_ctx,
        qp_cq_id: a.qp_cq_id,
        tail_after: 0,
        ae_id: a.ae_id,
        wqe_idx: a.wqe_idx,
        tcp_state: a.tcp_state,
        iwarp_state: a.iwarp_state,
        qp: a.qp.into(),
        cq: a.cq.into(),
        sq: a.sq.into(),
        rq: a.rq.into(),
        in_rdrsp_wr: a.in_rdrsp_wr.into(),
        out_rdrsp: a.out_rdrsp.into(),
        aeqe_overflow: a.overflow.into(),
        q2_data_written: a.q2_data_written,
        ae_src: a.ae_src,
        polarity_after: 0,
    };
    fields(prefix, &o)
}

const DEVIATION: &str = "aeqe_decode_follows_published_source";

/// Outputs of the published source that Linux 6.1 does not produce.
const NOT_IN_6_1: &[&str] = &["srq", "def_info", "err_rq_idx_valid"];

/// Compares the recorded outputs with the re-derived ones, key by key over
/// what 6.1 produces; `Err` names the first difference.
fn compare(got: &Map<String, Value>, want: &Value) -> Result<(), String> {
    for (k, w) in want.as_object().into_iter().flatten() {
        if NOT_IN_6_1.iter().any(|s| k.ends_with(s)) {
            continue;
        }
        match got.get(k) {
            Some(g) if num(g) == num(w) => {}
            Some(g) => return Err(format!("{k}: {g}, recorded {w}")),
            None => return Err(format!("{k}: not produced, recorded {w}")),
        }
    }
    Ok(())
}

/// Re-derives one published `decode_aeqe` / `decode_aeqe_classification`
/// case into `r`.
pub(crate) fn rederive_case(c: &Value, name: &str, r: &mut Rederived) {
    let i = &c["inputs"];
    // the driver's decode of the same input, for classifying a difference
    let mut drv = Map::new();
    let got: Map<String, Value> = if c["op"] == "decode_aeqe" {
        let w: Vec<u64> =
            i["aeqe_words"].as_array().into_iter().flatten().filter_map(num).collect();
        let [w0, w1] = w[..] else {
            return r.skip("decode_aeqe: aeqe_words is not two words");
        };
        let g = |k: &str| num(&i[k]).unwrap_or(0);
        let (ret, o) = decode(
            [w0, w1],
            g("aeq.ring.size") as u32,
            g("aeq.ring.tail") as u32,
            g("aeq.polarity") as u8,
        );
        if Some(i64::from(ret)) != c["ret"].as_i64() {
            return r.differ.push(format!("{name}: ret {ret}, recorded {}", c["ret"]));
        }
        if let Some(a) = irdma::cqp::decode::Aeqe::decode(&[w0, w1], g("aeq.polarity") != 0) {
            drv = driver_fields("", &a);
        }
        outputs(ret, &o).as_object().cloned().unwrap_or_default()
    } else {
        // one valid element per AE source, word 0 the context
        let w0 = num(&i["aeqe.word0"]).unwrap_or(0);
        let mut m = Map::new();
        for src in ["src0.", "src5."] {
            let w1 = num(&i[format!("{src}aeqe.word8")]).unwrap_or(0);
            let (_, o) = decode([w0, w1], 1, 0, (w1 >> 63) as u8);
            m.extend(fields(src, &o));
            drv.extend(driver_fields(src, &irdma::cqp::decode::Aeqe::classify(w0, w1)));
        }
        m
    };
    match compare(&got, &c["outputs"]) {
        Ok(()) => r.identical += 1,
        // Linux 6.1 decodes it otherwise than the published source, and
        // the driver as the published source does (the ring state after
        // is 6.1's either way)
        Err(_) if compare(&drv, &strip_ring(&c["outputs"])).is_ok() => r.known(&format!(
            "AEQE: Linux 6.1 reports wqe_idx only for SQ/RQ events and classifies some AE codes \
             otherwise than the published source and the spec (deviations.toml {DEVIATION})"
        )),
        Err(d) => r.differ.push(format!("{name}: {d}")),
    }
}

/// Outputs without the ring state (the driver's decode has none).
fn strip_ring(v: &Value) -> Value {
    let mut m = v.as_object().cloned().unwrap_or_default();
    m.retain(|k, _| !k.starts_with("aeq."));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Generated elements re-derive identically; a changed field is a
    /// difference.
    #[test]
    fn elements_rederive_and_a_change_is_caught() {
        let _serial = crate::serial();
        let cases = generate(3, 40, &mut BTreeMap::new());
        let mut r = Rederived::default();
        for c in &cases {
            rederive_case(c, "t", &mut r);
        }
        assert!(cases.len() >= 20, "{}", cases.len());
        assert_eq!((r.identical, r.differ.len()), (cases.len(), 0), "{r:?}");
        assert!(cases.iter().any(|c| c["ret"] == 0) && cases.iter().any(|c| c["ret"] != 0));
        let mut c = cases.iter().find(|c| c["ret"] == 0).unwrap().clone();
        c["outputs"]["qp"] = (1 - num(&c["outputs"]["qp"]).unwrap()).into();
        let mut r = Rederived::default();
        rederive_case(&c, "t", &mut r);
        assert_eq!(r.differ.len(), 1, "{r:?}");
    }
}
