//! Decodes every SQ/RQ WQE in the vendor-generated data-path vectors back into
//! the operation the case posted: validates the model's decoder against the
//! vendor's encoder (rdma-core uk.c).

mod conformance_file;

use mock_bar::wqe::{self, Frag, Payload, SqOp};
use serde_json::Value;

fn vectors() -> Value {
    conformance_file::load("datapath-vectors.json")
}

fn hex(v: &Value) -> u64 {
    match v {
        Value::String(s) => {
            u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex string")
        }
        Value::Number(n) => n.as_u64().expect("unsigned number"),
        Value::Bool(b) => *b as u64,
        other => panic!("not a number: {other}"),
    }
}

fn flag(v: &Value, k: &str) -> bool {
    v.get(k).and_then(Value::as_bool).unwrap_or(false)
}

/// The WQE's words (val & mask; bytes the encoder did not write read as 0).
fn words(wqe: &Value) -> Vec<u64> {
    let ws = wqe["words"].as_array().expect("words");
    let mut out = vec![0u64; ws.len()];
    for w in ws {
        let off = hex(&w["off"]) as usize;
        out[off / 8] = hex(&w["val"]) & hex(&w["mask"]);
    }
    out
}

fn sges(input: &Value) -> Vec<Frag> {
    let n = input.get("num_sges").map_or(0, hex) as usize;
    input
        .get("sges")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .take(n)
                // the length field is 31 bits: the encoder truncates, the device reads that
                .map(|s| Frag {
                    addr: hex(&s["addr"]),
                    stag: hex(&s["lkey"]) as u32,
                    len: (hex(&s["length"]) & 0x7FFF_FFFF) as u32,
                })
                .filter(|f| !(f.addr == 0 && f.stag == 0 && f.len == 0))
                .collect()
        })
        .unwrap_or_default()
}

/// Expected fragments, and an alternative for "num_sges 0 but the vendor
/// encoded entry 0 anyway" (the hardware cannot tell a 1-fragment WQE from it).
fn frags_match(input: &Value, got: &[Frag]) -> bool {
    let want = sges(input);
    if got == want.as_slice() {
        return true;
    }
    if let Some(e0) = input.get("sg_list_entry0_when_num_sges_0") {
        let f = Frag {
            addr: hex(&e0["addr"]),
            stag: hex(&e0["lkey"]) as u32,
            len: hex(&e0["length"]) as u32,
        };
        return want.is_empty() && got == [f];
    }
    false
}

fn inline_ok(input: &Value, p: &Payload) -> bool {
    match p {
        Payload::Inline(b) => {
            let n = hex(&input["inline_len"]) as usize;
            b.len() == n && b.iter().enumerate().all(|(j, &x)| x == ((j + 1) & 0xff) as u8)
        }
        Payload::Sges(_) => false,
    }
}

fn check_sq(case: &Value) -> Result<(), String> {
    let input = &case["input"];
    let out = &case["output"];
    let api = input["api"].as_str().unwrap_or("");
    let op_type = hex(&input["op_type"]) as u8;
    let w = words(&out["wqe"]);
    let d = wqe::decode_sq(&w).map_err(|e| format!("decode error {e:?}"))?;
    if d.quanta as u64 != hex(&out["wqe_size_quanta"]) {
        return Err(format!("quanta {} != {}", d.quanta, out["wqe_size_quanta"]));
    }
    if (w[3] >> 63) != hex(&out["valid_bit"]) {
        return Err("valid bit".into());
    }
    if d.signaled != flag(input, "signaled") || d.read_fence != flag(input, "read_fence") {
        return Err(format!("flags signaled {} read_fence {}", d.signaled, d.read_fence));
    }
    // the kernel verb forces LOCALFENCE on LOCAL_INV; UDP header shares bit 61
    let lf = flag(input, "local_fence") || flag(input, "udp_hdr");
    if d.local_fence != lf && api != "irdma_uk_stag_local_invalidate" {
        return Err("local fence".into());
    }
    if d.report_rtt != flag(input, "report_rtt") {
        return Err("report_rtt".into());
    }
    let imm = flag(input, "imm_data_valid").then(|| hex(&input["imm_data"]));
    let inline = api.contains("inline");
    let ok = match (&d.op, api) {
        (
            SqOp::Write { remote_addr, rkey, imm: i, solicited, payload },
            "irdma_uk_rdma_write" | "irdma_uk_inline_rdma_write",
        ) => {
            *remote_addr == hex(&input["remote_addr"])
                && *rkey as u64 == hex(&input["rkey"])
                && *i == imm
                && *solicited == (op_type == wqe::opc::RDMA_WRITE_SOL)
                && if inline {
                    inline_ok(input, payload)
                } else {
                    matches!(payload, Payload::Sges(f) if frags_match(input, f))
                }
        }
        (SqOp::Read { remote_addr, rkey, sges: f, local_invalidate }, "irdma_uk_rdma_read") => {
            *remote_addr == hex(&input["remote_addr"])
                && *rkey as u64 == hex(&input["rkey"])
                && *local_invalidate == flag(input, "inv_stag (READ_LOC_INV)")
                && frags_match(input, f)
        }
        (
            SqOp::Send { imm: i, solicited, invalidate, payload, qkey, dest_qp, ah_id },
            "irdma_uk_send" | "irdma_uk_inline_send",
        ) => {
            let inv = matches!(op_type, wqe::opc::SEND_INV | wqe::opc::SEND_SOL_INV);
            *i == imm
                && *solicited == matches!(op_type, wqe::opc::SEND_SOL | wqe::opc::SEND_SOL_INV)
                // the AH index is OR-ed into the same header bits (spec
                // data-path §1.3): the device sees the union
                && *invalidate == inv.then(|| (hex(&input["stag_to_inv"]) | input.get("ah_id").map_or(0, hex)) as u32)
                && *ah_id as u64
                    == (input.get("stag_to_inv").map_or(0, hex) | input.get("ah_id").map_or(0, hex))
                        & 0x1FF_FFFF
                && *qkey as u64 == input.get("qkey").map_or(0, hex)
                && *dest_qp as u64 == input.get("dest_qp").map_or(0, hex)
                && if inline { inline_ok(input, payload) } else { matches!(payload, Payload::Sges(f) if frags_match(input, f)) }
        }
        (SqOp::LocalInvalidate { stag }, "irdma_uk_stag_local_invalidate") => {
            *stag as u64 == hex(&input["target_stag"])
        }
        (SqOp::Nop, "irdma_nop") => true,
        (
            SqOp::BindMw { mr_stag, mw_stag, va, len, rights, va_based, type1 },
            "irdma_uk_mw_bind",
        ) => {
            let r =
                ((flag(input, "ena_reads") as u8) << 2) | ((flag(input, "ena_writes") as u8) << 3);
            *mr_stag as u64 == hex(&input["mr_stag"])
                && *mw_stag as u64 == hex(&input["mw_stag"])
                && *va == hex(&input["va"])
                && *len == hex(&input["bind_len"])
                && *rights == r
                && *va_based == flag(input, "va_based")
                && *type1 == flag(input, "mem_window_type_1")
        }
        (SqOp::FetchAdd { local, remote_addr, rkey, add }, "irdma_uk_atomic_fetch_add") => {
            local.addr == hex(&input["tagged_offset"])
                && local.stag as u64 == hex(&input["stag"])
                && *remote_addr == hex(&input["remote_tagged_offset"])
                && *rkey as u64 == hex(&input["remote_stag"])
                && *add == hex(&input["fetch_add_data"])
        }
        (
            SqOp::CompareSwap { local, remote_addr, rkey, swap, compare },
            "irdma_uk_atomic_compare_swap",
        ) => {
            local.addr == hex(&input["tagged_offset"])
                && local.stag as u64 == hex(&input["stag"])
                && *remote_addr == hex(&input["remote_tagged_offset"])
                && *rkey as u64 == hex(&input["remote_stag"])
                && *swap == hex(&input["swap_data"])
                && *compare == hex(&input["compare_data"])
        }
        _ => false,
    };
    if !ok {
        return Err(format!("decoded {:?} does not match input {input}", d.op));
    }
    let want_opcode =
        if flag(input, "inv_stag (READ_LOC_INV)") { wqe::opc::RDMA_READ_LOC_INV } else { op_type };
    if d.opcode != want_opcode {
        return Err(format!("opcode {} != {}", d.opcode, want_opcode));
    }
    for pad in out["nop_pad"].as_array().into_iter().flatten() {
        let pw = words(pad);
        let p = wqe::decode_sq(&pw).map_err(|e| format!("pad: {e:?}"))?;
        if p.op != SqOp::Nop || p.quanta != 1 || p.signaled {
            return Err(format!("pad decoded as {p:?}"));
        }
    }
    Ok(())
}

#[test]
fn every_sq_and_rq_wqe_decodes_to_the_posted_operation() {
    let v = vectors();
    let mut failures = Vec::new();
    let (mut sq, mut rq, mut pads) = (0, 0, 0);
    for case in v["sq_cases"].as_array().expect("sq_cases") {
        if hex(&case["output"]["ret"]) != 0 {
            continue; // rejected by the encoder: nothing in the ring
        }
        sq += 1;
        pads += case["output"]["nop_pad"].as_array().map_or(0, Vec::len);
        if let Err(e) = check_sq(case) {
            failures.push(format!("{}: {e}", case["name"]));
        }
    }
    for case in v["rq_cases"].as_array().expect("rq_cases") {
        if hex(&case["output"]["ret"]) != 0 {
            continue;
        }
        rq += 1;
        let w = words(&case["output"]["wqe"]);
        match wqe::decode_rq(&w) {
            Ok(f) if frags_match(&case["input"], &f) => {}
            other => failures.push(format!("{}: rq decoded {other:?}", case["name"])),
        }
    }
    println!("decoded {sq} SQ WQEs ({pads} NOP pads) and {rq} RQ WQEs");
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
    assert!(sq >= 100 && rq >= 10, "too few cases decoded ({sq} SQ, {rq} RQ): wrong file?");
}

/// The model's CQE encoder against the CQEs the vectors write (whose fields
/// the vendor's poller decodes as recorded): same fields, same words.
#[test]
fn cqe_encoder_matches_the_vendor_cqes() {
    let v = vectors();
    let mut n = 0;
    for case in v["cq_cases"].as_array().expect("cq_cases") {
        for e in case["events"].as_array().into_iter().flatten() {
            if e["event"] != "write_cqe" {
                continue;
            }
            let f = &e["fields"];
            let c = mock_bar::datapath::Cqe {
                payload_len: hex(&f["payload_len"]) as u32,
                stat_raw: hex(&f["stat_raw (psn/tcpsqn/rtt/ts)"]) as u32,
                ctx: hex(&f["comp_ctx"]),
                inv_stag: hex(&f["inv_stag_or_ud_src_qpn"]) as u32,
                qp_id: hex(&f["qp_id"]) as u32,
                minor: hex(&f["minor_err"]) as u16,
                major: hex(&f["major_err"]) as u16,
                wqe_idx: hex(&f["wqe_idx"]) as u32,
                ext: hex(&f["ext"]) == 1,
                push_dropped: hex(&f["push_dropped"]) == 1,
                srq: hex(&f["srq"]) == 1,
                stag_or_ipv4: hex(&f["bit53_stag_or_ipv4"]) == 1,
                solicited: hex(&f["solicited_event"]) == 1,
                error: hex(&f["error"]) == 1,
                op: hex(&f["op"]) as u8,
                sq: hex(&f["q_type_sq"]) == 1,
                valid: hex(&f["valid"]) == 1,
            };
            let want: Vec<u64> = e["words"].as_array().expect("words").iter().map(hex).collect();
            assert_eq!(c.words().to_vec(), want, "{} CQE", case["name"]);
            let imm_only = |x: &&Value| {
                hex(&x["smac_valid"]) == 0
                    && hex(&x["vlan_valid"]) == 0
                    && hex(&x["imm_valid"]) == 1
            };
            if let Some(x) = e.get("ext_fields").filter(imm_only) {
                let want: Vec<u64> =
                    e["ext_words"].as_array().expect("ext").iter().map(hex).collect();
                let mine = mock_bar::datapath::Cqe::ext_imm_words(
                    hex(&x["imm_qword"]),
                    hex(&x["ext_valid"]) == 1,
                );
                assert_eq!(mine.to_vec(), want, "{} extension", case["name"]);
            }
            n += 1;
        }
    }
    assert!(n >= 15, "only {n} CQEs");
}
