//! Prints a (shrunk) differing case in the conformance file's JSON schema
//! (`/work/shared/conformance/README.md`, `datapath-vectors.json` schema 1),
//! with the vendor's output as the expected one, so it can be added as a
//! vector. Extension keys: `config` is given inline (not a `meta.configs`
//! name) and `history.ops_before` lists posts made before the case's one.

use std::fmt::Write;

use crate::case::{Case, Cfg, Op, SqPostIn};
use crate::run::{Diff, VendorPost};

fn hex(v: u64) -> String {
    format!("\"{v:#x}\"")
}

fn sges_json(s: &[crate::ffi::IbSge]) -> String {
    let v: Vec<String> = s
        .iter()
        .map(|g| {
            format!(
                "{{\"addr\":{},\"length\":{},\"lkey\":{}}}",
                hex(g.addr),
                hex(g.length.into()),
                hex(g.lkey.into())
            )
        })
        .collect();
    format!("[{}]", v.join(","))
}

pub fn print(case: &Case, d: &Diff, vp: Option<(usize, VendorPost)>) -> String {
    let c = &case.cfg;
    let mut s = String::new();
    let cfg = cfg_json(c);
    let Some(op) = case.ops.get(d.op) else {
        let _ = write!(
            s,
            "{{\"note\":\"set-up difference: {}\",\"config\":{cfg}}}",
            d.what.replace('"', "'")
        );
        return s;
    };
    let Some((_, a)) = vp.filter(|(i, _)| *i == d.op) else {
        return format!("{{\"note\":\"no vendor view\",\"config\":{cfg}}}");
    };
    let before: Vec<String> =
        case.ops[..d.op].iter().map(|o| format!("{o:?}").replace('"', "'")).collect();
    let _ = write!(
        s,
        "{{\"name\":\"vendor_diff@{}\",\"config\":{cfg},\"note\":\"vendor-diff: {}\",\"history\":{{\"filler_posts\":{},\"rq_filler_posts\":{},\"filler_posts_outstanding\":{},\"rq_filler_posts_outstanding\":{},\"ops_before\":{:?}}},",
        a.head_before,
        d.what.replace('"', "'"),
        case.sq_filler,
        case.rq_filler,
        case.sq_outstanding,
        case.rq_outstanding,
        before
    );
    match op {
        Op::Sq(p) => {
            let _ = write!(
                s,
                "\"state_before\":{{\"sq_ring_size\":{},\"sq_head\":{},\"sq_tail\":{},\"swqe_polarity\":{}}},",
                c.sq_quanta, a.head_before, a.tail_before, a.polarity_before
            );
            write_sq_input(&mut s, p);
            write_sq_output(&mut s, c, &a);
        }
        Op::Rq { wr_id, sges } => {
            let _ = write!(
                s,
                "\"input\":{{\"wr_id\":{},\"num_sges\":{},\"sges\":{}}},\"output\":{{\"note\":\"see the difference above; RQ vectors are printed without WQE words in this slice\"}}}}",
                hex(*wr_id),
                sges.len(),
                sges_json(sges)
            );
        }
    }
    s
}

/// The case's configuration as the inline `config` object.
fn cfg_json(c: &Cfg) -> String {
    format!(
        "{{\"sq_ring_quanta\":{},\"max_sq_frag_cnt\":{},\"max_inline_data\":{},\"qp_id\":{},\"rq_size\":{},\"rq_shift\":{},\"rq_wqe_size_multiplier\":{},\"max_rq_frag_cnt\":{},\"sq_chunk\":8,\"hw_rev\":2}}",
        c.sq_quanta,
        c.max_frags,
        c.max_inline,
        hex(c.qp_id.into()),
        c.rq_size,
        c.rq_shift,
        1u32 << c.rq_shift,
        c.rq_frags
    )
}

/// The SQ post's `input` object (with its trailing comma).
fn write_sq_input(s: &mut String, p: &SqPostIn) {
    let data: String = p.data.iter().map(|b| format!("{b:02x}")).collect();
    let _ = write!(
        s,
        "\"input\":{{\"api\":\"{}\",\"op_type\":{},\"wr_id\":{},\"signaled\":{},\"read_fence\":{},\"local_fence\":{},\"imm_data_valid\":{},\"imm_data\":{},\"report_rtt\":{},\"udp_hdr\":{},\"l4len\":{},\"post_sq\":{},\"remote_addr\":{},\"rkey\":{},\"stag_to_inv\":{},\"qkey\":{},\"dest_qp\":{},\"ah_id\":{},\"target_stag\":{},\"inv_stag (READ_LOC_INV)\":{},\"num_sges\":{},\"sges\":{},\"inline_len\":{},\"inline_data\":\"{data}\"}},",
        p.api_name(),
        hex(p.op_type.into()),
        hex(p.wr_id),
        p.signaled,
        p.read_fence,
        p.local_fence,
        p.imm.is_some(),
        hex(p.imm.unwrap_or(0).into()),
        p.report_rtt,
        p.udp_hdr,
        p.l4len,
        p.post_sq,
        hex(p.remote_addr),
        hex(p.rkey.into()),
        hex(p.stag_to_inv.into()),
        hex(p.qkey.into()),
        hex(p.dest_qp.into()),
        hex(p.ah_id.into()),
        hex(p.target_stag.into()),
        p.read_inv,
        p.sges.len(),
        sges_json(&p.sges),
        p.data.len(),
    );
}

/// The vendor's `output` object for an SQ post: the NOP pads, the WQE's
/// masked words, the doorbell and the SQ state after it.
fn write_sq_output(s: &mut String, c: &Cfg, a: &VendorPost) {
    let ring = c.sq_quanta;
    let pad = if a.ret == 0 { (a.wqe_idx + ring - a.head_before) % ring } else { 0 };
    let word = |q: usize, k: usize| {
        let (x, mask) = (a.words[q][k], a.masks[q][k]);
        format!("{{\"off\":{},\"val\":{},\"mask\":{}}}", k * 8, hex(x & mask), hex(mask))
    };
    let pads: Vec<String> = (0..pad as usize)
        .map(|q| {
            let w: Vec<String> = (0..4).map(|k| word(q, k)).collect();
            format!(
                "{{\"slot\":{},\"words\":[{}]}}",
                (a.head_before as usize + q) % ring as usize,
                w.join(",")
            )
        })
        .collect();
    let wq: Vec<String> = (pad as usize..a.words.len())
        .flat_map(|q| (0..4).map(move |k| (q, k)))
        .map(|(q, k)| {
            let w = word(q, k);
            // offsets are from the WQE's first quantum
            w.replacen(
                &format!("\"off\":{},", k * 8),
                &format!("\"off\":{},", (q - pad as usize) * 32 + k * 8),
                1,
            )
        })
        .collect();
    let _ = write!(
        s,
        "\"output\":{{\"ret\":{},\"wqe_idx\":{},\"wqe_size_quanta\":{},\"valid_bit\":{},\"nop_pad\":[{}],\"wqe\":{{\"slot\":{},\"words\":[{}]}},\"doorbell_written\":{},\"doorbell_value\":{},\"sq_wrtrk\":{{\"wrid\":{},\"wr_len\":{},\"quanta\":{}}},\"state_after\":{{\"sq_head\":{},\"sq_tail\":{}}}}}}}",
        a.ret,
        a.wqe_idx,
        a.quanta,
        u8::from(a.valid),
        pads.join(","),
        a.wqe_idx,
        wq.join(","),
        !a.doorbells.is_empty(),
        hex(a.doorbells.first().copied().unwrap_or(0).into()),
        hex(a.trk.0),
        a.trk.1,
        a.trk.2,
        a.head_after,
        a.tail_after
    );
}
