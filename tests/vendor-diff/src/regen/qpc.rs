//! `qp_setctx_roce` cases of `cqp-vectors.json` from the vendor's Linux 6.1
//! `irdma_sc_qp_setctx_roce` (ctrl.c, through `shim/ctrl_glue.c`), in the
//! published schema: the inputs under the Linux info-struct names the
//! conformance runner reads (`qp.*`, `roce.*`, `udp.*`), the 256-byte host
//! context (`host_buffers.qp_host_ctx.words`) and which bytes the vendor
//! wrote (`written_byte_mask`, one bit per byte, 64 bytes per mask word),
//! found by running the builder over a context pre-filled with 0x00 and
//! with 0xff (`vd_qp_setctx_roce_fill`), and `outputs["udp.tos(after)"]`
//! (the TOS the context carries, @24 [31:24], defs.h IRDMAQPC_TOS).
//!
//! The contexts are the harness's own (`qpc::gen_qpc`); one the QP-context
//! differential (`qpc::run_qpc`) classifies under a listed deviation other
//! than a refused over-wide input (`cqp_field_wider_than_linux_6_1`,
//! `qpc_ecn_always_forced`) is left out and counted: its bytes are Linux
//! 6.1's, not the ones the driver is held to.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Rederived, h, h16, hx, num};
use crate::ctrl::VendorCqp;
use crate::qpc::{self, VdQpc};
use crate::rng::Rng;

unsafe extern "C" {
    fn vd_qp_setctx_roce_fill(c: *mut core::ffi::c_void, k: *const VdQpc, out: *mut u64, fill: u8);
}

/// The context's address in the files (a host buffer the runner does not
/// read; the published files name one too).
const CTX_PA: u64 = 0x8007_3000;

/// The vendor's context and its written-byte mask (4 words, bit per byte).
fn vendor_ctx(cqp: &VendorCqp, k: &VdQpc) -> ([u64; 32], [u64; 4]) {
    let (mut a, mut b) = ([0u64; 32], [0u64; 32]);
    // SAFETY: `cqp` owns a live vendor CQP; `k` and the outputs outlive the
    // calls and each holds the 256 bytes (IRDMA_QP_CTX_SIZE) written.
    unsafe {
        vd_qp_setctx_roce_fill(cqp.raw(), k, a.as_mut_ptr(), 0);
        vd_qp_setctx_roce_fill(cqp.raw(), k, b.as_mut_ptr(), 0xff);
    }
    let mut mask = [0u64; 4];
    for (w, (x, y)) in a.iter().zip(&b).enumerate() {
        for byte in 0..8 {
            if (x ^ y) >> (8 * byte) & 0xff == 0 {
                let bit = w * 8 + byte;
                mask[bit / 64] |= 1 << (bit % 64);
            }
        }
    }
    (a, mask)
}

/// The published input names of a context (the runner's `qp_setctx`).
fn inputs(k: &VdQpc) -> Map<String, Value> {
    let mut m = Map::new();
    let mut put = |key: &str, v: Value| {
        m.insert(key.into(), v);
    };
    put_fields!(put, k;
        hex "qp." [sq_pa rq_pa hw_sq_size hw_rq_size rq_wqe_size push_idx]
        hex "qp." [rcv_tph_en xmit_tph_en rq_tph_en sq_tph_en sq_tph_val rq_tph_val qs_handle]
        hex [send_cq_num rcv_cq_num stats_idx stats_idx_valid qp_compl_ctx rem_endpoint_idx]
        hex "roce." [pd_id dctcp_en dcqcn_en err_rq_idx_valid err_rq_idx is_qp1 roce_tver]
        hex "roce." [p_key ack_credits qkey dest_qp rtomin ord_size ird_size wr_rdresp_en]
        hex "roce." [rd_en fast_reg_en rcv_no_icrc fw_cc_enable udprivcq_en priv_mode_en]
        hex "roce." [timely_en t_high t_low]
        hex "udp." [ipv4 insert_vlan_tag ttl src_port dst_port snd_mss vlan_tag arp_idx]
        hex "udp." [flow_label psn_nxt lsn epsn psn_max psn_una cwnd rexmit_thresh]
        hex "udp." [rnr_nak_thresh]);
    put("udp.tos(before ECN forcing)", hx(k.tos));
    for i in 0..4 {
        put(&format!("udp.dest_ip_addr[{i}]"), hx(k.dest_ip_addr[i]));
        put(&format!("udp.local_ipaddr[{i}]"), hx(k.local_ipaddr[i]));
    }
    m.insert(
        "roce.mac_addr".into(),
        k.mac_addr.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":").into(),
    );
    m
}

/// A published case's inputs as the glue's context, or why not.
fn qpc_of(i: &Value) -> Result<VdQpc, String> {
    let obj = i.as_object().ok_or("inputs is not an object")?;
    // inputs that are not the context's (the QP the builder is called on)
    let other = ["qp_id", "qp_type", "virtual_map", "hw_host_ctx_pa", "shadow_area_pa", "user_pri"];
    let known = inputs(&VdQpc::default());
    if let Some(k) = obj.keys().find(|k| !known.contains_key(*k) && !other.contains(&k.as_str())) {
        return Err(format!("input {k} not carried by the harness's glue"));
    }
    let g = |k: &str| -> u64 { i.get(k).and_then(num).unwrap_or(0) };
    // the input into the field's C type, or not expressible
    macro_rules! fit {
        ($k:expr) => {
            TryFrom::try_from(g($k))
                .map_err(|_| format!("input {} wider than the glue's C type", $k))?
        };
    }
    let mut mac = [0u8; 6];
    if let Some(s) = i.get("roce.mac_addr").and_then(Value::as_str) {
        for (k, b) in s.split(':').take(6).enumerate() {
            mac[k] = u8::from_str_radix(b, 16).map_err(|_| "roce.mac_addr".to_string())?;
        }
    }
    let ip = |k: &str| -> Result<[u32; 4], String> {
        let mut a = [0u32; 4];
        for (n, x) in a.iter_mut().enumerate() {
            *x = u32::try_from(g(&format!("{k}[{n}]"))).map_err(|_| format!("{k}[{n}]"))?;
        }
        Ok(a)
    };
    Ok(fit_fields!(fit, VdQpc {
        sq_pa: g("qp.sq_pa"),
        rq_pa: g("qp.rq_pa"),
        qp_compl_ctx: g("qp_compl_ctx"),
        push_idx: if i.get("qp.push_idx").is_some() { fit!("qp.push_idx") } else { 0xffff_ffff },
        dest_ip_addr: ip("udp.dest_ip_addr")?,
        local_ipaddr: ip("udp.local_ipaddr")?,
        tos: fit!("udp.tos(before ECN forcing)"),
        mac_addr: mac,
        pad: [0; 3],
    } [send_cq_num rcv_cq_num rem_endpoint_idx] "roce." [qkey dest_qp pd_id]
      "udp." [snd_mss flow_label psn_nxt lsn epsn psn_max psn_una cwnd]
      "qp." [qs_handle] "roce." [p_key err_rq_idx ord_size ird_size t_high t_low]
      "udp." [src_port dst_port vlan_tag arp_idx]
      "qp." [rq_wqe_size hw_sq_size hw_rq_size sq_tph_val rq_tph_val] [stats_idx]
      "roce." [roce_tver ack_credits err_rq_idx_valid rtomin]
      "udp." [ttl rexmit_thresh rnr_nak_thresh]
      "qp." [sq_tph_en rq_tph_en rcv_tph_en xmit_tph_en] [stats_idx_valid]
      "roce." [is_qp1 udprivcq_en dcqcn_en rcv_no_icrc wr_rdresp_en fast_reg_en priv_mode_en]
      "roce." [rd_en timely_en dctcp_en fw_cc_enable]
      "udp." [ipv4 insert_vlan_tag]))
}

/// The case object of a context (`name` its `case`).
fn case_json(cqp: &VendorCqp, k: &VdQpc, name: &str) -> Value {
    let (w, mask) = vendor_ctx(cqp, k);
    let mut i = Map::new();
    i.insert("qp_id".into(), "0x2a".into());
    i.insert("qp_type".into(), 3.into());
    i.insert("virtual_map".into(), 0.into());
    i.insert("hw_host_ctx_pa".into(), "0x0".into());
    i.insert("shadow_area_pa".into(), "0x0".into());
    i.extend(inputs(k));
    json!({
        "op": "qp_setctx_roce", "builder": "irdma_sc_qp_setctx_roce(gen_2)", "case": name, "ret": 0,
        "inputs": i, "reg_writes": [],
        "host_buffers": {"qp_host_ctx": {"pa": h(CTX_PA, 1), "len": 256,
            "words": w.iter().map(|x| h16(*x)).collect::<Vec<_>>(),
            "written_byte_mask": mask.iter().map(|x| h16(*x)).collect::<Vec<_>>()}},
        "outputs": {"udp.tos(after)": h(w[3] >> 24 & 0xff, 1)},
    })
}

/// `n` generated contexts and, per listed deviation, how many were left
/// out.
pub(crate) fn generate(seed: u64, n: u64) -> Result<(Vec<Value>, BTreeMap<String, u64>), String> {
    let mut r = Rng::new(seed ^ 0x9c9c_0000_0000_0000);
    let cqp = VendorCqp::new(4)?;
    let (mut out, mut left) = (Vec::new(), BTreeMap::new());
    for k in 0..n {
        let c = qpc::gen_qpc(&mut r);
        match qpc::run_qpc(&cqp, &c) {
            Ok(None) | Ok(Some("cqp_field_truncated_by_vendor")) => {}
            Ok(Some(id)) => {
                *left.entry(format!("qp_setctx_roce: {id}")).or_insert(0) += 1;
                continue;
            }
            Err(d) => return Err(format!("the driver differs on a generated context: {}", d.what)),
        }
        out.push(case_json(&cqp, &c, &format!("ctx{k}")));
    }
    Ok((out, left))
}

/// Re-derives one published `qp_setctx_roce` case into `r`.
pub(crate) fn rederive_case(c: &Value, name: &str, r: &mut Rederived) {
    let k = match qpc_of(&c["inputs"]) {
        Ok(k) => k,
        Err(why) => return r.skip(&why),
    };
    let cqp = match VendorCqp::new(4) {
        Ok(x) => x,
        Err(e) => return r.differ.push(format!("{name}: vendor CQP: {e}")),
    };
    let got = case_json(&cqp, &k, c["case"].as_str().unwrap_or("?"));
    let (gw, ww) = (&got["host_buffers"]["qp_host_ctx"], &c["host_buffers"]["qp_host_ctx"]);
    let words =
        |v: &Value| -> Vec<u64> { v.as_array().into_iter().flatten().filter_map(num).collect() };
    let (g, w, gm, wm) = (
        words(&gw["words"]),
        words(&ww["words"]),
        words(&gw["written_byte_mask"]),
        words(&ww["written_byte_mask"]),
    );
    // the recorded bytes, under the recorded mask (a byte the published
    // builder left alone is whatever the buffer held)
    let byte = |m: &[u64], q: usize, b: usize| {
        m.get((q * 8 + b) / 64).is_some_and(|x| x >> ((q * 8 + b) % 64) & 1 == 1)
    };
    let mut diff = None;
    for q in 0..32 {
        for b in 0..8 {
            let (x, y) = (
                g.get(q).copied().unwrap_or(0) >> (8 * b) & 0xff,
                w.get(q).copied().unwrap_or(0) >> (8 * b) & 0xff,
            );
            if byte(&wm, q, b) && (!byte(&gm, q, b) || x != y) && diff.is_none() {
                diff = Some(format!(
                    "context byte {}: vendor {x:#04x}{}, recorded {y:#04x}",
                    q * 8 + b,
                    if byte(&gm, q, b) { "" } else { " (not written)" }
                ));
            }
        }
    }
    let tos = |v: &Value| v["outputs"]["udp.tos(after)"].clone();
    if diff.is_none()
        && c["outputs"].get("udp.tos(after)").is_some()
        && super::first_diff(&tos(&got), &tos(c), &[], "").is_some()
    {
        diff = Some(format!("udp.tos(after) {}, recorded {}", tos(&got), tos(c)));
    }
    match diff {
        None => r.identical += 1,
        Some(d) => match qpc::run_qpc(&cqp, &k) {
            // the driver's context and Linux 6.1's differ in a listed way
            Ok(Some(id)) if id != "cqp_field_truncated_by_vendor" => r.known(&format!(
                "qp_setctx_roce: Linux 6.1 differs from the published source (deviations.toml {id})"
            )),
            _ => r.differ.push(format!("{name}: {d}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Generated contexts re-derive identically; a changed byte under the
    /// mask, or a byte claimed written that the vendor leaves alone, is a
    /// difference; the mask is not all ones (the builder skips bytes).
    #[test]
    fn contexts_rederive_and_a_change_is_caught() {
        let _serial = crate::serial();
        let (cases, _) = generate(11, 16).expect("generates");
        assert!(cases.len() >= 8, "{}", cases.len());
        let all = |cs: &[Value]| {
            let mut r = Rederived::default();
            for c in cs {
                rederive_case(c, "t", &mut r);
            }
            r
        };
        let r = all(&cases);
        assert_eq!((r.identical, r.differ.len()), (cases.len(), 0), "{r:?}");
        let m = &cases[0]["host_buffers"]["qp_host_ctx"]["written_byte_mask"];
        assert!(m.as_array().unwrap().iter().any(|x| num(x) != Some(u64::MAX)), "{m}");
        let mut c = cases[0].clone();
        let w = num(&c["host_buffers"]["qp_host_ctx"]["words"][0]).unwrap();
        c["host_buffers"]["qp_host_ctx"]["words"][0] = h16(w ^ 0x100);
        assert_eq!(all(&[c]).differ.len(), 1);
        let mut c = cases[0].clone();
        c["host_buffers"]["qp_host_ctx"]["written_byte_mask"] =
            Value::Array(vec![h16(u64::MAX); 4]);
        assert_eq!(all(&[c]).differ.len(), 1);
    }
}
