//! `decode_ccq_cqe` cases of `cqp-vectors.json` from the vendor's Linux
//! 6.1 `irdma_sc_ccq_get_cqe_info` (ctrl.c, through `shim/ctrl_glue.c`
//! `vd_ccq_get_cqe_info`), in the published schema: a CCQ CQE at the
//! ring's head, the CQP SQ word @24 and scratch of the WQE it names, and
//! what the vendor decoded, the head, polarity and shadow-area head after.
//!
//! The vendor dereferences the CQE's qword 1 as its CQP and indexes that
//! CQP's SQ and scratch array with the CQE's WQE index: the files carry the
//! README's substituted object address (`cqp_sw_object_addr`), the glue's
//! CQP is written in its place, and an index past the glue CQP's SQ is
//! not expressible.

use serde_json::{Map, Value, json};

use super::{Rederived, h, h16, num};
use crate::ctrl::VendorCqp;
use crate::rng::Rng;

/// The CQP object address the files name (the published set's).
const CQP_OBJECT: u64 = 0x2000_0000_d380;
/// The glue CQP's SQ size (WQE indexes below it are expressible).
const SQ: u32 = 2048;

#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
struct VdCcqOut {
    scratch: u64,
    cqp: u64,
    shadow0: u64,
    op_ret_val: u32,
    head_after: u32,
    maj_err_code: u16,
    min_err_code: u16,
    error: u8,
    op_code: u8,
    polarity_after: u8,
    pad: u8,
}

unsafe extern "C" {
    fn vd_cqp_obj(c: *mut core::ffi::c_void) -> u64;
    #[allow(clippy::too_many_arguments)]
    fn vd_ccq_get_cqe_info(
        c: *mut core::ffi::c_void,
        ring: *mut u64,
        size: u32,
        head: u32,
        pol: u8,
        idx: u32,
        word24: u64,
        scratch: u64,
        o: *mut VdCcqOut,
    ) -> i32;
}

/// The inputs of one case.
struct In {
    w: [u64; 4],
    size: u32,
    head: u32,
    pol: u8,
    word24: u64,
    scratch: u64,
}

/// Runs the vendor's decode: `(ret, outputs)`, or why it cannot run.
fn decode(cqp: &VendorCqp, i: &In) -> Result<(i32, Value), String> {
    let idx = (i.w[3] >> 32 & 0x7fff) as u32; // defs.h IRDMA_CQ_WQEIDX 46:32
    if i.w[1] != CQP_OBJECT || idx >= SQ || i.size == 0 {
        return Err("a CQE whose qword 1 or WQE index the glue's CQP cannot stand for".into());
    }
    // SAFETY: `cqp` owns a live vendor CQP.
    let obj = unsafe { vd_cqp_obj(cqp.raw()) };
    let mut ring = vec![0u64; i.size as usize * 4];
    let at = (i.head % i.size) as usize * 4;
    ring[at..at + 4].copy_from_slice(&[i.w[0], obj, i.w[2], i.w[3]]);
    let mut o = VdCcqOut::default();
    // SAFETY: `ring` holds `size` CQEs; the one at `head` names the glue's
    // own CQP (qword 1) and a WQE index below its SQ size (checked above);
    // `o` is a valid out pointer.
    let ret = unsafe {
        vd_ccq_get_cqe_info(
            cqp.raw(),
            ring.as_mut_ptr(),
            i.size,
            i.head,
            i.pol,
            idx,
            i.word24,
            i.scratch,
            &mut o,
        )
    };
    let mut m = Map::new();
    if ret == 0 {
        m.insert("error".into(), o.error.into());
        m.insert("maj_err_code".into(), h(o.maj_err_code.into(), 1));
        m.insert("min_err_code".into(), h(o.min_err_code.into(), 1));
        m.insert("op_ret_val".into(), h(o.op_ret_val.into(), 1));
        m.insert("op_code".into(), h(o.op_code.into(), 1));
        m.insert("scratch".into(), h(o.scratch, 1));
        m.insert("cqp".into(), h(if o.cqp == obj { CQP_OBJECT } else { o.cqp }, 1));
        m.insert("ccq.shadow_area[0](after)".into(), h(o.shadow0, 1));
    }
    m.insert("ccq.cq_ring.head(after)".into(), o.head_after.into());
    m.insert("ccq.polarity(after)".into(), o.polarity_after.into());
    Ok((ret, Value::Object(m)))
}

fn inputs_json(i: &In) -> Value {
    json!({
        "cqe_words": i.w.iter().map(|x| h16(*x)).collect::<Vec<_>>(),
        "ccq.cq_uk.polarity": i.pol, "ccq.cq_ring.head": i.head, "ccq.cq_ring.size": i.size,
        "cqp_sw_object_addr": h(CQP_OBJECT, 1),
        "cqp.sq[wqe_idx].word24": h16(i.word24), "cqp.scratch_array[wqe_idx]": h16(i.scratch),
    })
}

/// `n` generated CQEs: random words with qword 3's valid bit mostly the
/// ring's polarity, its error bit one time in three, a WQE index below the
/// glue CQP's SQ.
pub(crate) fn generate(seed: u64, n: u64) -> Result<Vec<Value>, String> {
    let mut r = Rng::new(seed ^ 0xccc0_0000_0000_0000);
    let cqp = VendorCqp::new(SQ)?;
    let mut out = Vec::new();
    for k in 0..n {
        let size = r.pick(&[4u32, 16, 2050]);
        let pol = r.chance(1, 2) as u8;
        let mut w3 = r.next_u64() & !(0x7fffu64 << 32 | 1 << 55 | 1 << 63);
        w3 |= r.below(u64::from(SQ)) << 32;
        if r.chance(1, 3) {
            w3 |= 1 << 55; // IRDMA_CQ_ERROR
        }
        let valid = if r.chance(7, 8) { pol } else { pol ^ 1 };
        w3 |= u64::from(valid) << 63;
        let i = In {
            w: [r.next_u64(), CQP_OBJECT, r.next_u64(), w3],
            size,
            head: r.below(u64::from(size)) as u32,
            pol,
            word24: r.next_u64(),
            scratch: r.next_u64(),
        };
        let (ret, outputs) = decode(&cqp, &i)?;
        out.push(json!({
            "op": "decode_ccq_cqe", "builder": "irdma_sc_ccq_get_cqe_info", "case": format!("ccq{k}"),
            "ret": ret, "inputs": inputs_json(&i), "reg_writes": [], "outputs": outputs,
        }));
    }
    Ok(out)
}

/// Re-derives one published `decode_ccq_cqe` case into `r`.
pub(crate) fn rederive_case(c: &Value, name: &str, r: &mut Rederived) {
    let i = &c["inputs"];
    let w: Vec<u64> = i["cqe_words"].as_array().into_iter().flatten().filter_map(num).collect();
    let Ok(w) = <[u64; 4]>::try_from(w) else {
        return r.skip("decode_ccq_cqe: cqe_words is not four words");
    };
    let g = |k: &str| num(&i[k]).unwrap_or(0);
    if g("cqp_sw_object_addr") != CQP_OBJECT {
        return r.skip("decode_ccq_cqe: another CQP object address than the harness substitutes");
    }
    let input = In {
        w,
        size: if i.get("ccq.cq_ring.size").is_some() { g("ccq.cq_ring.size") as u32 } else { 2050 },
        head: g("ccq.cq_ring.head") as u32,
        pol: g("ccq.cq_uk.polarity") as u8,
        word24: g("cqp.sq[wqe_idx].word24"),
        scratch: g("cqp.scratch_array[wqe_idx]"),
    };
    let cqp = match VendorCqp::new(SQ) {
        Ok(x) => x,
        Err(e) => return r.differ.push(format!("{name}: vendor CQP: {e}")),
    };
    match decode(&cqp, &input) {
        Err(why) => r.skip(&format!("decode_ccq_cqe: {why}")),
        Ok((ret, got)) => {
            // `sq` is not a field of Linux 6.1's irdma_ccq_cqe_info
            let mut want = c["outputs"].clone();
            if let Some(m) = want.as_object_mut() {
                m.remove("sq");
            }
            r.compare(
                name,
                &json!({"ret": ret, "outputs": got}),
                &json!({"ret": c["ret"], "outputs": want}),
                &[],
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Generated CQEs re-derive identically; a changed output is a
    /// difference.
    #[test]
    fn cqes_rederive_and_a_change_is_caught() {
        let _serial = crate::serial();
        let cases = generate(4, 24).expect("generates");
        let mut r = Rederived::default();
        for c in &cases {
            rederive_case(c, "t", &mut r);
        }
        assert_eq!((r.identical, r.differ.len()), (24, 0), "{r:?}");
        let mut c = cases.iter().find(|c| c["ret"] == 0).expect("a decoded CQE").clone();
        c["outputs"]["op_code"] = h(num(&c["outputs"]["op_code"]).unwrap() ^ 1, 1);
        let mut r = Rederived::default();
        rederive_case(&c, "t", &mut r);
        assert_eq!(r.differ.len(), 1, "{r:?}");
    }
}
