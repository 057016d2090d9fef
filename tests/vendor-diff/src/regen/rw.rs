//! `rw-vectors.json` from the vendor's Linux 6.1 `core/rw.c` and
//! `mr_pool.c` (through `shim/rw/glue.c` and `rw.rs`'s fake device), in
//! the published schema (`/work/shared/conformance/rw-vectors.json`, runner
//! `xtask/src/conformance/rw.rs`).
//!
//! Written: `rdma_rw_ctx_init` rounds (`init,wrs,destroy`) on a RoCE device
//! without `force_mr` and with no MR pool, i.e. the SINGLE_WR and MULTI_WR
//! paths: `rw.rs`'s scatter lists (1..40 entries, lengths from 1 byte to
//! past 2 GiB, zero-length entries, contiguous / page-aligned / unaligned neighbours), an `sg_offset`
//! inside or at the end of the list, a read or a write, the caller's cqe,
//! an injected DMA-mapping failure now and then. The fake DMA mapping is
//! the identity (`iova_off` 0), so `sg[i].addr` is the address the SGEs
//! carry. Each round is first run through the differential (`rw::run_rw`):
//! rounds under a listed deviation are left out and counted in
//! `meta.left_out`.
//!
//! Not written yet: iWARP / `force_mr` (MR contexts: the runner's fake MR
//! keys follow the published set's convention, the harness draws its own),
//! chain WRs and `rdma_rw_ctx_post`, several rounds, signature contexts,
//! the sizing functions. `allocs_live`, `warnings` and `log` are not
//! recorded by the glue (written empty / left out; a WARN fails the write).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{Rederived, Written, h};
use crate::rng::Rng;
use crate::rw::{self, Ent, RwCase, RwDev, RwOp, RwOutcome, Wr};

const LKEY: u32 = 0x00ab_cd00; // the published set's local_dma_lkey

fn hx(v: u64) -> Value {
    Value::String(format!("{v:#x}"))
}

fn dev_of(max_sge_rd: u32, max_send_sge: u32, qp_send_sge: u32, max_qp_wr: u32) -> RwDev {
    RwDev {
        iwarp: false,
        max_sge_rd,
        max_sgl_rd: 0,
        max_send_sge,
        max_qp_wr,
        max_fr: 262_144,
        local_dma_lkey: LKEY,
        force_mr: false,
        qp_send_sge,
        key0: 0,
        mr_base: 0x100,
        iova_off: 0,
        pool: 0,
    }
}

struct Round {
    dev: RwDev,
    sg: Vec<Ent>,
    offset: u32,
    remote: u64,
    rkey: u32,
    read: bool,
    fail_map: bool,
}

fn wr_json(w: &Wr) -> Value {
    let mut m = Map::new();
    m.insert("opcode".into(), w.opcode.into());
    m.insert("send_flags".into(), w.send_flags.into());
    m.insert("signaled".into(), (w.send_flags & 2 != 0).into());
    m.insert("wr_cqe".into(), w.cqe.into());
    m.insert("num_sge".into(), w.sges.len().into());
    m.insert(
        "sg_list".into(),
        w.sges
            .iter()
            .map(|(a, l, k)| json!({"addr": hx(*a), "length": l, "lkey": hx(u64::from(*k))}))
            .collect::<Vec<_>>()
            .into(),
    );
    if let Some((a, k)) = w.remote {
        m.insert("remote_addr".into(), hx(a));
        m.insert("rkey".into(), hx(u64::from(k)));
    }
    if let Some(k) = w.inv {
        m.insert("invalidate_rkey".into(), hx(u64::from(k)));
    }
    m.insert("is_chain_wr".into(), w.is_chain.into());
    Value::Object(m)
}

/// Runs one round on the vendor code; the published case.
fn vendor_case(id: String, c: &Round) -> Result<Value, String> {
    let v = rw::vendor_round(&c.dev, &c.sg, c.offset, c.remote, c.rkey, c.read, c.fail_map)?;
    if v.warns != 0 {
        return Err(format!("{id}: the vendor WARNed"));
    }
    let d = &c.dev;
    let state = |(used, live): (i64, i64)| json!({"mrs_used": used, "dma_mappings_live": live, "warnings": [], "log": []});
    let mut round = Map::new();
    round.insert("ret".into(), v.ret.into());
    round.insert("state_after_init".into(), state(v.after_init));
    if let Some((t, n)) = v.ctx {
        round.insert("ctx_type".into(), t.into());
        round.insert("nr_ops".into(), n.into());
        round.insert(
            "calls".into(),
            json!([{"call": "rdma_rw_ctx_wrs", "chain_wr_arg": false,
                    "chain": v.chain.iter().map(wr_json).collect::<Vec<_>>(),
                    "chain_len": v.chain.len()}]),
        );
        round.insert("state_after_destroy".into(), state(v.after_destroy));
    }
    let total: u64 = c.sg.iter().map(|e| u64::from(e.len)).sum();
    Ok(json!({
        "id": id,
        "function": "rdma_rw_ctx_init",
        "description": format!("harness RoCE, {} entries of {total} bytes, RDMA {}, max SGE {}",
            c.sg.len(), if c.read { "read" } else { "write" }, d.qp_send_sge),
        "inputs": {
            "device": {
                "name": "harness RoCE (rw.rs fake device)",
                "rdma_protocol_iwarp": false, "rdma_cap_read_inv": false,
                "max_sgl_rd": d.max_sgl_rd, "max_sge_rd": d.max_sge_rd,
                "max_send_sge": d.max_send_sge,
                "max_fast_reg_page_list_len": d.max_fr, "max_pi_fast_reg_page_list_len": 0,
                "max_qp_wr": d.max_qp_wr, "ib_uses_virt_dma": false,
                "local_dma_lkey": hx(u64::from(d.local_dma_lkey)),
            },
            "force_mr": false,
            "port_num": 1,
            "qp": {"max_send_sge": d.qp_send_sge, "max_write_sge": d.qp_send_sge,
                   "max_read_sge": d.qp_send_sge.min(d.max_sge_rd), "integrity_en": false},
            "direction": if c.read { "DMA_FROM_DEVICE" } else { "DMA_TO_DEVICE" },
            "sg": c.sg.iter().map(|e| json!({"page_phys": hx(e.phys & !0xfff),
                "offset": e.phys & 0xfff, "length": e.len, "addr": hx(e.phys)})).collect::<Vec<_>>(),
            "sg_table_entries": c.sg.len(),
            "sg_cnt": c.sg.len(),
            "sg_offset": c.offset,
            "remote_addr": hx(c.remote),
            "rkey": hx(u64::from(c.rkey)),
            "cqe": "caller_cqe (non-NULL)",
            "chain_wr": false,
            "mr_pool": 0,
            "inject": {"fail_dma_map_at": u8::from(c.fail_map),
                       "fail_dma_map_err": if c.fail_map && v.ret < 0 { v.ret } else { 0 },
                       "fail_alloc_at": 0, "fail_iova_link_at": 0},
            "sequence": "init,wrs,destroy",
        },
        "outputs": {"rounds": [round]},
    }))
}

fn gen_round(r: &mut Rng) -> Round {
    let max_sge_rd = r.pick(&[1u32, 2, 3, 4, 6, 13, 13, 30]);
    let max_send_sge = r.pick(&[1u32, 2, 3, 6, 13, 13, 30]);
    let dev = dev_of(
        max_sge_rd,
        max_send_sge,
        r.range(1, u64::from(max_send_sge)) as u32,
        r.pick(&[64u32, 4063, 32768]),
    );
    // zero-length entries included: on a scatter list Linux and the driver
    // both emit their SGEs (the runner drops them only on the bvec path,
    // data-path spec §11.4 item 4)
    let mut sg: Vec<Ent> = rw::gen_sg_for(r, 40);
    if sg.is_empty() {
        sg.push(Ent { phys: 0x0010_0000, len: 4096 });
    }
    let total: u64 = sg.iter().map(|e| u64::from(e.len)).sum();
    let offset = match r.below(10) {
        0..=5 => 0,
        6 => r.range(0, total.saturating_sub(1).min(4096)) as u32,
        _ => r.range(0, total.saturating_sub(1)) as u32,
    };
    Round {
        dev,
        sg,
        offset,
        remote: r.next_u64() & !r.pick(&[0, 0xfff]),
        rkey: r.next_u64() as u32,
        read: r.chance(1, 2),
        fail_map: r.chance(1, 25),
    }
}

/// The differential's verdict on the round: `Err(id)` for a listed
/// deviation.
fn verdict(c: &Round) -> Result<(), String> {
    let case = RwCase {
        dev: c.dev.clone(),
        ops: vec![
            RwOp::Init {
                slot: 0,
                sg: c.sg.clone(),
                offset: c.offset,
                remote: c.remote,
                rkey: c.rkey,
                read: c.read,
                fail_map: c.fail_map,
            },
            RwOp::Wrs { slot: 0, chain: false, post: false },
            RwOp::Destroy { slot: 0 },
        ],
        sizing: (256, 8, 128, false),
    };
    match rw::run_rw(&case) {
        RwOutcome::Same => Ok(()),
        RwOutcome::Deviation(id) => Err(id.to_string()),
        RwOutcome::Deviations(ids) => Err(ids.join("+")),
        RwOutcome::Differs(d) => Err(format!("unexplained: {}", d.what)),
    }
}

pub fn generate(seed: u64, cases: u64) -> Result<Written, String> {
    let mut r = Rng::new(seed ^ 0x7277_5f76_6563_7473);
    let mut out = Vec::new();
    let mut left_out = BTreeMap::<String, usize>::new();
    for n in 0..cases {
        let c = gen_round(&mut r);
        if let Err(id) = verdict(&c) {
            if id.starts_with("unexplained") {
                return Err(format!("round {n}: {id}"));
            }
            *left_out.entry(id).or_default() += 1;
            continue;
        }
        out.push(vendor_case(format!("vd{n}"), &c)?);
    }
    let count = out.len();
    let doc = json!({
        "meta": {
            "generator": "tests/vendor-diff --write-vectors (vendor rw.c / mr_pool.c compiled unmodified)",
            "source_package": super::source(),
            "source_files": "drivers/infiniband/core/{rw.c, mr_pool.c}, ib_sg_to_pages of verbs.c",
            "method": "tests/vendor-diff/src/regen/rw.rs: one init,wrs,destroy round per case on \
                       rw.rs's fake RoCE device (identity DMA mapping, no MR pool)",
            "seed": h(seed, 16),
            "published": false,
            "left_out": left_out,
            "count": count,
        },
        "cases": out,
    });
    Ok(Written { doc, count })
}

/// A published case as a harness round, or why not.
fn round_of(c: &Value) -> Result<Round, String> {
    let i = &c["inputs"];
    let n = |v: &Value| super::num(v).unwrap_or(0);
    if c["function"].as_str() != Some("rdma_rw_ctx_init") {
        return Err(format!("function {}: not written by the harness yet", c["function"]));
    }
    let d = &i["device"];
    if d["rdma_protocol_iwarp"].as_bool() != Some(false)
        || i["force_mr"].as_bool() != Some(false)
        || d["ib_uses_virt_dma"].as_bool() == Some(true)
    {
        return Err("an iWARP, force_mr or virt-DMA device (MR contexts: not written yet)".into());
    }
    if i["sequence"].as_str() != Some("init,wrs,destroy")
        || i["chain_wr"].as_bool() != Some(false)
        || !i["cqe"].as_str().is_some_and(|s| s.contains("non-NULL"))
    {
        return Err("a sequence other than init,wrs,destroy with the caller's cqe".into());
    }
    let inj = &i["inject"];
    if n(&inj["fail_alloc_at"]) != 0
        || n(&inj["fail_iova_link_at"]) != 0
        || n(&inj["fail_dma_map_at"]) > 1
    {
        return Err("an injected allocation / IOVA failure the glue does not make".into());
    }
    let q = &i["qp"];
    if n(&q["max_write_sge"]) != n(&q["max_send_sge"])
        || n(&q["max_read_sge"]) != n(&q["max_send_sge"]).min(n(&d["max_sge_rd"]))
    {
        return Err("QP SGE limits other than ib_create_named_qp's".into());
    }
    let sg = i["sg"].as_array().cloned().unwrap_or_default();
    if n(&i["sg_cnt"]) as usize != sg.len() {
        return Err("sg_cnt other than the list's length".into());
    }
    let mut dev = dev_of(
        n(&d["max_sge_rd"]) as u32,
        n(&d["max_send_sge"]) as u32,
        n(&q["max_send_sge"]) as u32,
        n(&d["max_qp_wr"]) as u32,
    );
    dev.max_sgl_rd = n(&d["max_sgl_rd"]) as u32;
    dev.max_fr = n(&d["max_fast_reg_page_list_len"]) as u32;
    dev.local_dma_lkey = n(&d["local_dma_lkey"]) as u32;
    Ok(Round {
        dev,
        sg: sg.iter().map(|e| Ent { phys: n(&e["addr"]), len: n(&e["length"]) as u32 }).collect(),
        offset: n(&i["sg_offset"]) as u32,
        remote: n(&i["remote_addr"]),
        rkey: n(&i["rkey"]) as u32,
        read: i["direction"].as_str() == Some("DMA_FROM_DEVICE"),
        fail_map: n(&inj["fail_dma_map_at"]) == 1,
    })
}

/// What a round says, comparably: ret, type, ops, states (MRs, whether
/// mappings are live), the chain.
fn comparable(c: &Value) -> Value {
    let r = &c["outputs"]["rounds"][0];
    let st = |s: &Value| {
        json!([super::num(&s["mrs_used"]), super::num(&s["dma_mappings_live"]).map(|l| l > 0)])
    };
    let chain: Vec<Value> = r["calls"][0]["chain"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            let mut w = w.clone();
            if let Some(m) = w.as_object_mut() {
                m.remove("opcode_value");
            }
            w
        })
        .collect();
    json!({
        "ret": r["ret"], "ctx_type": r.get("ctx_type"), "nr_ops": r.get("nr_ops"),
        "after_init": st(&r["state_after_init"]),
        "after_destroy": r.get("state_after_destroy").map(st),
        "chain": chain,
    })
}

pub fn rederive(v: &Value) -> Rederived {
    let mut r = Rederived::default();
    for c in v["cases"].as_array().into_iter().flatten() {
        let name = c["id"].as_str().unwrap_or("?").to_string();
        if c["outputs"].get("crash").is_some() {
            r.skip("a case the published build crashed on");
            continue;
        }
        if c["outputs"]["rounds"].as_array().map_or(0, Vec::len) != 1 {
            r.skip("more than one round");
            continue;
        }
        let round = match round_of(c) {
            Ok(x) => x,
            Err(why) => {
                r.skip(&why);
                continue;
            }
        };
        match vendor_case(name.clone(), &round) {
            Ok(got) => r.compare(&name, &comparable(&got), &comparable(c), &[]),
            Err(e) => r.differ.push(format!("{name}: vendor run failed: {e}")),
        }
    }
    r
}
