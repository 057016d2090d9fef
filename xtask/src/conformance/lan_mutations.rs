//! Mutated copies of the published LAN vectors: other ring positions
//! (including the wrap), ARQ positions, retval upper bytes, MACs and
//! switch-rule actions, with the expectations moved the way the vendor's
//! code moves them. They run through the same runner and the driver's real
//! code; they stand in for the held-out set (README: "Implement the
//! format, not the examples"). Nothing here is written to
//! tests/conformance.

use serde_json::{Value, json};

use super::{Outcome, SEQUENCED, hexbytes, hexstr, num, run_case};

fn published() -> Vec<Value> {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/conformance/lan-aq-vectors.json");
    let text = std::fs::read_to_string(p).expect("published LAN vectors");
    let v: Value = serde_json::from_str(&text).expect("JSON");
    v["cases"].as_array().expect("cases").clone()
}

/// The published cases of the ops `ops`.
fn published_of(ops: &[&str]) -> Vec<Value> {
    published().into_iter().filter(|c| ops.iter().any(|op| c["op"] == *op)).collect()
}

/// The entries of the expectation list `list` (commands, register writes)
/// that the case's `call` did not make.
fn not_of_call(list: &Value, call: u64) -> Vec<Value> {
    list.as_array().unwrap().iter().filter(|x| x["call"] != json!(call)).cloned().collect()
}

fn name(c: &Value) -> String {
    format!("{}/{}", c["op"].as_str().unwrap_or("?"), c["name"].as_str().unwrap_or("?"))
}

/// Runs the mutated cases (each named with its mutation) and fails, naming
/// every failing case, unless all pass (skips must be skips of the unmutated
/// case too) and there are at least `min` of them (a mutation that stopped
/// matching any case would otherwise pass on nothing).
fn all_pass(cases: &[(Value, String)], min: usize) {
    assert!(cases.len() >= min, "{} mutated cases, want at least {min}", cases.len());
    let mut bad = Vec::new();
    for (c, what) in cases {
        match run_case(c) {
            Outcome::Pass | Outcome::Skip(_) => {}
            Outcome::Fail(why) => bad.push(format!("{} [{what}]: {why}", name(c))),
        }
    }
    assert!(bad.is_empty(), "{} of {} failed:\n{}", bad.len(), cases.len(), bad.join("\n"));
}

fn shift(v: &Value, delta: i64, n: i64) -> Value {
    let x = num(v).unwrap_or(0) as i64;
    let y = (x + delta).rem_euclid(n);
    if v.is_string() { json!(format!("{y:#010x}")) } else { json!(y) }
}

/// Moves the case's ATQ from `ring.position` p to `to`: every slot-valued
/// expectation moves by the same amount modulo the ring size (ATQT writes
/// up to the first ATQH / ATQLEN write, where the queue's teardown starts
/// writing zeros, and
/// the reported next_to_use / next_to_clean).
fn move_atq(case: &Value, to: u64) -> Option<Value> {
    if num(&case["inputs"]["ring"]["position"])? == 0 {
        return None;
    }
    let mut c = case.clone();
    let (d, n) = move_ring(&mut c, "position", "sq_entries", to)?;
    let tail = ("PF_FW_ATQT", &["PF_FW_ATQH", "PF_FW_ATQLEN"][..]);
    shift_outputs(&mut c, d, n, tail, &["adminq.sq.next_to_use", "adminq.sq.next_to_clean"]);
    if let Some(cmds) = c["outputs"]["commands"].as_array_mut() {
        for k in cmds.iter_mut() {
            k["slot"] = shift(&k["slot"], d, n);
        }
    }
    Some(c)
}

/// Sets the ring position input `pos` of the case to `to`; the move (`to`
/// minus the published position) and the ring size (input `entries`), or
/// `None` when either input is missing or `to` is outside the ring.
fn move_ring(c: &mut Value, pos: &str, entries: &str, to: u64) -> Option<(i64, i64)> {
    let ring = &c["inputs"]["ring"];
    let (p, n) = (num(&ring[pos])?, num(&ring[entries])?);
    if to >= n {
        return None;
    }
    c["inputs"]["ring"][pos] = json!(to);
    Some((to as i64 - p as i64, n as i64))
}

/// Moves by `d` modulo `n` the expectations that name a slot of a moved
/// ring: the writes of the tail register `tail.0` up to the first write of
/// one of `tail.1`, and the `fields` of every call's outputs.
fn shift_outputs(c: &mut Value, d: i64, n: i64, tail: (&str, &[&str]), fields: &[&str]) {
    if let Some(ws) = c["outputs"]["reg_writes"].as_array_mut() {
        for w in ws.iter_mut() {
            let name = w["name"].as_str().unwrap_or("");
            if tail.1.contains(&name) {
                break;
            }
            if name == tail.0 {
                w["value"] = shift(&w["value"], d, n);
            }
        }
    }
    if let Some(calls) = c["outputs"]["calls"].as_array_mut() {
        for call in calls.iter_mut() {
            for f in fields {
                if let Some(v) = call["outputs"].get(*f).cloned() {
                    call["outputs"][*f] = shift(&v, d, n);
                }
            }
        }
    }
}

#[test]
fn atq_positions_including_the_wrap() {
    let mut cases = Vec::new();
    for c in published() {
        let n = num(&c["inputs"]["ring"]["sq_entries"]).unwrap_or(0);
        if n < 4 {
            continue;
        }
        // last slot (every multi-command case wraps), second to last, one
        // in the middle
        for to in [n - 1, n - 2, n / 2 + 5] {
            if let Some(m) = move_atq(&c, to) {
                cases.push((m, format!("ATQ position {to}")));
            }
        }
    }
    all_pass(&cases, 201);
}

/// Moves the ARQ's next_to_clean from `arq_position` 0 to `to`: events land
/// from there on; cleaned slots, ARQT writes and the reported ARQ ring
/// state move with it.
fn move_arq(case: &Value, to: u64) -> Option<Value> {
    let mut c = case.clone();
    let (d, n) = move_ring(&mut c, "arq_position", "rq_entries", to)?;
    let tail = ("PF_FW_ARQT", &["PF_FW_ARQH", "PF_FW_ARQLEN", "PF_FW_ATQH", "PF_FW_ATQLEN"][..]);
    let fields = [
        "cleaned_slot",
        "rq.next_to_clean",
        "rq.next_to_use",
        "adminq.rq.next_to_use",
        "adminq.rq.next_to_clean",
    ];
    shift_outputs(&mut c, d, n, tail, &fields);
    Some(c)
}

#[test]
fn arq_positions_including_the_wrap() {
    let mut cases = Vec::new();
    for c in published() {
        if c["op"] == "shutdown_all_ctrlq" || c["op"] == "init_check_adminq" {
            // their ARQ state after teardown is not slot-relative
            continue;
        }
        let n = num(&c["inputs"]["ring"]["rq_entries"]).unwrap_or(0);
        for to in [n.saturating_sub(1), 17] {
            if let Some(m) = move_arq(&c, to) {
                cases.push((m, format!("ARQ position {to}")));
            }
        }
    }
    all_pass(&cases, 101);
}

/// The firmware-internal upper byte of retval never matters (README: "The
/// low byte of retval decides"): every answer gets a different one; the
/// caller-visible descriptors (send_cmd's `desc_after`) carry it as well.
#[test]
fn retval_upper_bytes() {
    let mut cases = Vec::new();
    for c in published() {
        let mut m = c.clone();
        let mut touched = false;
        if let Some(cmds) = m["outputs"]["commands"].as_array_mut() {
            for k in cmds.iter_mut() {
                let Some(h) = k["resp"]["desc"].as_str() else { continue };
                let mut b = hexbytes(h);
                if let Some(x) = b.get_mut(7) {
                    *x ^= 0xa5;
                    touched = true;
                }
                k["resp"]["desc"] = json!(hexstr(&b));
            }
        }
        if !touched {
            continue;
        }
        if let Some(calls) = m["outputs"]["calls"].as_array_mut() {
            for call in calls.iter_mut() {
                if let Some(h) = call["outputs"]["desc_after"]["hex"].as_str() {
                    let mut b = hexbytes(h);
                    b[7] ^= 0xa5;
                    call["outputs"]["desc_after"]["hex"] = json!(hexstr(&b));
                }
            }
        }
        cases.push((m, "retval upper byte ^ 0xa5".to_string()));
    }
    all_pass(&cases, 51);
}

/// Other unicast MACs for the MAC filter and MAC rule cases: every place the
/// address's bytes appear (rule buffers, answers, outputs) takes the new one.
#[test]
fn other_macs() {
    let mut cases = Vec::new();
    for c in published() {
        let Some(mac) = c["inputs"]["args"]["mac"].as_str() else { continue };
        let old = mac.replace(':', "").to_lowercase();
        if old.len() != 12 || old == "ffffffffffff" {
            continue;
        }
        let first = u8::from_str_radix(&old[..2], 16).unwrap_or(0);
        for new in ["00a0c9123456", "6c:fe:54:0a:0b:0c", "3cfdfe9e7f01"] {
            let mut new = new.replace(':', "");
            // keep the group bit (it decides LAN_EN)
            new.replace_range(
                ..2,
                &format!("{:02x}", (u8::from_str_radix(&new[..2], 16).unwrap() & !1) | (first & 1)),
            );
            let text = c.to_string().replace(&old, &new).replace(mac, &{
                let b = hexbytes(&new);
                b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(":")
            });
            let m: Value = serde_json::from_str(&text).unwrap();
            cases.push((m, format!("MAC {new}")));
        }
    }
    all_pass(&cases, 9);
}

/// `fill_sw_rule` MAC lookups with the queue, queue-group and drop actions,
/// and VLAN lookups: the published vendor rules of other lookup types
/// turned into MAC / VLAN ones the way ice_fill_sw_rule differs between
/// them (recipe = lookup type; a MAC lookup leaves the dummy ethertype
/// 0x8100 and writes no VLAN TCI; VLAN rules write the TCI and TPID, no
/// destination MAC, and prune with EGRESS|INGRESS when forwarding to VSIs).
#[test]
fn fill_sw_rule_actions_and_vlan() {
    let mut cases = Vec::new();
    mac_to_queue_group_cases(&mut cases);
    mac_to_queue_cases(&mut cases);
    vlan_cases(&mut cases);

    all_pass(&cases, 1);
    // and they are really compared: a wrong expectation fails
    let mut wrong = cases[0].0.clone();
    wrong["outputs"]["calls"][0]["outputs"]["f_info.lb_en"] = json!(0);
    assert!(matches!(run_case(&wrong), Outcome::Fail(_)));
}

/// The published case named `n`.
fn by_name(n: &str) -> Value {
    published().into_iter().find(|c| c["name"] == n).unwrap()
}

/// The rule bytes the first call of `c` expects.
fn rule_of(c: &Value) -> Vec<u8> {
    hexbytes(c["outputs"]["calls"][0]["outputs"]["rule"]["hex"].as_str().unwrap())
}

/// Makes `c` expect the rule `hex` with LB_EN `lb` and LAN_EN `lan`, and
/// adds it to `cases` as `what`.
fn add_rule_case(
    cases: &mut Vec<(Value, String)>,
    c: &mut Value,
    hex: &[u8],
    lb: u8,
    lan: u8,
    what: &str,
) {
    let o = &mut c["outputs"]["calls"][0]["outputs"];
    o["rule"]["hex"] = json!(hexstr(hex));
    o["f_info.lb_en"] = json!(lb);
    o["f_info.lan_en"] = json!(lan);
    cases.push((c.clone(), what.to_string()));
}

/// A published rule turned into a MAC lookup (recipe 1: the dummy
/// ethertype 0x8100, no VLAN TCI), with the case asking for it.
fn mac_case(name: &str) -> (Value, Vec<u8>) {
    let mut c = by_name(name);
    let mut r = rule_of(&c);
    r.resize(32, 0);
    r[4] = 1;
    r[28..32].copy_from_slice(&[0x81, 0, 0, 0]);
    c["inputs"]["args"]["lkup_type"] = json!(1);
    (c, r)
}

/// The rule `r` with the action word `act`.
fn with_act(r: &[u8], act: u32) -> Vec<u8> {
    let mut r = r.to_vec();
    r[8..12].copy_from_slice(&act.to_le_bytes());
    r
}

/// MAC_VLAN → MAC, forward to a queue group (Tx, unicast).
fn mac_to_queue_group_cases(cases: &mut Vec<(Value, String)>) {
    // MAC_VLAN → MAC, forward to a queue group of 8 (Tx, unicast, VEB)
    let (mut c, r) = mac_case("tx_mac_vlan_to_qgrp");
    add_rule_case(cases, &mut c, &r, 1, 0, "MAC to queue group");
    // the same with a group of 32 (region 5) and queue 0x123
    let mut c2 = c.clone();
    c2["inputs"]["args"]["qgrp_size"] = json!(32);
    c2["inputs"]["args"]["fwd_q_id"] = json!(0x123);
    let act: u32 = 1 | (0x123 << 4) | (5 << 15) | 4;
    add_rule_case(cases, &mut c2, &with_act(&r, act), 1, 0, "MAC to queue group 32");
    // VEPA: LAN_EN as well
    let mut c3 = c.clone();
    c3["inputs"]["hw"]["evb_veb"] = json!(false);
    let mut r3 = rule_of(&c);
    r3[8] |= 8;
    add_rule_case(cases, &mut c3, &r3, 1, 1, "MAC to queue group, VEPA");
}

/// ETHERTYPE_MAC → MAC, forward to a queue or drop.
fn mac_to_queue_cases(cases: &mut Vec<(Value, String)>) {
    // ETHERTYPE_MAC → MAC, forward to a queue (Rx)
    let (mut c, r) = mac_case("rx_ethertype_mac_to_q");
    add_rule_case(cases, &mut c, &r, 0, 0, "MAC to queue");
    // drop (Rx): forwarding type 0, DROP bit 18, VALID bit 17
    let mut d = c.clone();
    d["inputs"]["args"]["fltr_act"] = json!(4);
    let rd = with_act(&r, (1 << 18) | (1 << 17));
    add_rule_case(cases, &mut d, &rd, 0, 0, "MAC drop");
    // drop on a Tx rule: no LB_EN / LAN_EN (ice_fill_sw_info forwards only)
    let mut dt = d.clone();
    dt["inputs"]["args"]["flag"] = json!(2);
    let mut rt = rd.clone();
    rt[0] = 1;
    add_rule_case(cases, &mut dt, &rt, 0, 0, "MAC drop Tx");
    // RX_LB on a Tx forward-to-queue rule: LB_EN off, LAN_EN on
    let mut lb = c.clone();
    lb["inputs"]["args"]["flag"] = json!(2 | 4);
    let mut rl = rule_of(&c);
    rl[0] = 1;
    rl[8] |= 8;
    add_rule_case(cases, &mut lb, &rl, 0, 1, "MAC to queue, Tx + RX_LB");
}

/// PROMISC_VLAN → VLAN lookups.
fn vlan_cases(cases: &mut Vec<(Value, String)>) {
    // PROMISC_VLAN → VLAN, forward to VSI 3 (Rx): recipe 4, default dst,
    // prune | egress | ingress, no VALID
    let mut c = by_name("promisc_vlan_rx");
    let mut r = rule_of(&c);
    r.resize(32, 0);
    r[4] = 4;
    r[16..22].copy_from_slice(&[2, 0, 0, 0, 0, 0]);
    let act: u32 = (3 << 4) | 2 | (1 << 15) | (1 << 16);
    r[8..12].copy_from_slice(&act.to_le_bytes());
    c["inputs"]["args"]["lkup_type"] = json!(4);
    add_rule_case(cases, &mut c, &r, 0, 0, "VLAN to VSI");
    // a TPID of 0x88a8
    let mut t = c.clone();
    t["inputs"]["args"]["tpid"] = json!(0x88a8);
    t["inputs"]["args"]["tpid_valid"] = json!(1);
    r[28] = 0x88;
    r[29] = 0xa8;
    add_rule_case(cases, &mut t, &r, 0, 0, "VLAN to VSI, TPID 0x88a8");
    // Tx VLAN rule in VEB mode: LAN_EN, never LB_EN
    let mut tx = c.clone();
    tx["inputs"]["args"]["flag"] = json!(2);
    let mut rx = rule_of(&c);
    rx.resize(32, 0);
    rx[0] = 1;
    rx[4] = 4;
    rx[16..22].copy_from_slice(&[2, 0, 0, 0, 0, 0]);
    let act: u32 = (3 << 4) | 2 | (1 << 15) | (1 << 16) | 8;
    rx[8..12].copy_from_slice(&act.to_le_bytes());
    add_rule_case(cases, &mut tx, &rx, 0, 1, "VLAN Tx");
}

/// A firmware that never answers the k-th command, for every k of the
/// multi-step ops: the driver must time out there (EIO), send nothing
/// more, and the case ends with that call.
#[test]
fn timeouts_at_every_command_index() {
    // the ops the runner drives call by call (`SEQUENCED`) and these others
    const MORE: &[&str] = &[
        "add_vsi",
        "pe_filter",
        "free_vsi",
        "discover_dev_caps",
        "discover_func_caps",
        "get_caps",
        "get_initial_sw_cfg",
        "get_link_info",
        "query_sched_res",
        "manage_mac_read",
    ];
    let mut cases = Vec::new();
    for c in published() {
        let op = c["op"].as_str().unwrap_or("");
        if !SEQUENCED.iter().chain(MORE).any(|o| *o == op) || c["outputs"]["ret"] != json!(0) {
            continue;
        }
        let cmds = c["outputs"]["commands"].as_array().cloned().unwrap_or_default();
        for k in 0..cmds.len() {
            let mut m = c.clone();
            let call = num(&cmds[k]["call"]).unwrap_or(0) as usize;
            let mut kept: Vec<Value> = cmds[..=k].to_vec();
            kept[k]["resp"] = Value::Null;
            m["outputs"]["commands"] = json!(kept);
            let mut calls = c["outputs"]["calls"].as_array().cloned().unwrap_or_default();
            calls.truncate(call + 1);
            calls[call]["ret"] = json!(-5);
            calls[call]["outputs"] = json!({});
            m["outputs"]["calls"] = json!(calls);
            m["outputs"]["ret"] = json!(-5);
            // register writes up to the k-th command's tail write
            let mut tails = 0;
            let ws: Vec<Value> = c["outputs"]["reg_writes"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .take_while(|w| {
                    let before = tails <= k;
                    if w["name"] == "PF_FW_ATQT" {
                        tails += 1;
                    }
                    before
                })
                .collect();
            m["outputs"]["reg_writes"] = json!(ws);
            cases.push((m, format!("timeout at command {k}")));
        }
    }
    all_pass(&cases, 51);
}

/// `state.reset_ongoing`: every command-sending op is refused with EBUSY
/// before anything is posted (ice_sq_send_cmd); nothing is written.
#[test]
fn reset_ongoing_refuses_before_posting() {
    let mut cases = Vec::new();
    // one call, one command, no teardown
    let ops = ["get_fw_ver", "clear_pf_cfg", "get_link_info", "set_event_mask", "query_sched_res"];
    for c in published_of(&ops) {
        let mut m = c.clone();
        m["inputs"]["state"]["reset_ongoing"] = json!(1);
        m["outputs"]["commands"] = json!([]);
        m["outputs"]["reg_writes"] = json!([]);
        m["outputs"]["ret"] = json!(-16);
        m["outputs"]["calls"] = json!([{"fn": c["vendor"][0], "ret": -16, "outputs": {}}]);
        cases.push((m, "reset ongoing".to_string()));
    }
    all_pass(&cases, 5);
}

/// More nodes than a TC node may hold (max_children of its layer, 8 in the
/// published answer): ice refuses with EIO before sending the 0x0401; a
/// layer above the entry point is EINVAL, zero nodes send nothing.
#[test]
fn too_many_nodes_under_a_tc_node() {
    let c = published().into_iter().find(|c| c["name"] == "three_nodes_under_tc0").unwrap();
    let mut cases = Vec::new();
    // (num_nodes, explicit layer, ret): too many under the TC node → EIO;
    // a layer above the entry point (2 here) → EINVAL; no nodes → 0
    for (n, layer, ret) in
        [(9, None, -5), (12, None, -5), (200, None, -5), (3, Some(1), -22), (0, None, 0)]
    {
        let mut m = c.clone();
        m["inputs"]["args"]["num_nodes"] = json!(n);
        if let Some(l) = layer {
            m["inputs"]["args"]["layer"] = json!(l);
        }
        let cmds = not_of_call(&c["outputs"]["commands"], 2);
        let sent = cmds.len();
        m["outputs"]["commands"] = json!(cmds);
        m["outputs"]["reg_writes"] = json!(not_of_call(&c["outputs"]["reg_writes"], 2));
        m["outputs"]["calls"][2]["ret"] = json!(ret);
        m["outputs"]["calls"][2]["outputs"] = json!({});
        m["outputs"]["ret"] = json!(ret);
        assert!(sent > 0);
        cases.push((m, format!("{n} nodes under TC 0, layer {layer:?}")));
    }
    all_pass(&cases, 1);
}

/// `add_vsi` with `then_update` and `upd.alloc_rxq`: the second
/// ice_vsi_init sends Update VSI 0x0211 (flags SI|BUF|RD, datalen 128,
/// number | IS_VALID in bytes 16–17) with the rebuilt context (8 Rx queues:
/// q_mapping count 8, TC 0 log2 3) and the Rx queue-map section marked
/// valid; the firmware echoes the number and its used/free counts.
#[test]
fn add_vsi_then_update() {
    let c = published().into_iter().find(|c| c["name"] == "pf_16q_rss_veb").unwrap();
    let mut m = c.clone();
    m["vendor"] = json!(["ice_vsi_init", "ice_vsi_init"]);
    m["inputs"]["args"] = json!({"then_update": 1, "upd.alloc_rxq": 8, "upd.alloc_txq": 8});
    let add = &c["outputs"]["commands"][0];
    let mut ctx = hexbytes(add["buf"]["hex"].as_str().unwrap());
    ctx.resize(128, 0);
    // RXQ_MAP_VALID, and Q_OPT_VALID: an update of an RSS context marks the
    // queue-options section valid too (ice_lib.c ice_vsi_init, !init_vsi)
    ctx[0] |= 0x40 | 0x80;
    ctx[32] = 8; // q_mapping[1]
    ctx[63] = 3 << 3; // tc_mapping[0] = 3 << 11
    let mut d = hexbytes(add["desc"]["hex"].as_str().unwrap());
    d[2] = 0x11;
    d[16..24].copy_from_slice(&[6, 0x80, 0, 0, 0, 0, 0, 0]);
    let mut r = hexbytes(add["resp"]["desc"].as_str().unwrap());
    r[0] = 0x03;
    r[2] = 0x11;
    r[16..24].copy_from_slice(&[6, 0x80, 0, 0, 2, 0, 0xfe, 2]);
    let upd = json!({
        "call": 1, "slot": 2,
        "desc": {"hex": hexstr(&d), "addr": "buffer", "mask": add["desc"]["mask"].clone()},
        "buf": {"len": 128, "hex": hexstr(&ctx), "compare": "bytes"},
        "resp": {"desc": hexstr(&r), "buf": {"len": 128, "hex": hexstr(&ctx)}},
    });
    m["outputs"]["commands"].as_array_mut().unwrap().push(upd);
    m["outputs"]["reg_writes"].as_array_mut().unwrap().push(
        json!({"call": 1, "offset": "0x00080400", "name": "PF_FW_ATQT", "value": "0x00000003", "group": "atq"}),
    );
    let mut out = c["outputs"]["calls"][0].clone();
    out["outputs"]["vsi.num_txq"] = json!(8);
    out["outputs"]["vsi.num_rxq"] = json!(8);
    out["outputs"]["vsi.info"] = json!(hexstr(&ctx));
    m["outputs"]["calls"].as_array_mut().unwrap().push(out);
    all_pass(&[(m.clone(), "then_update".to_string())], 1);
    // without the queue-map bit the command differs
    let mut wrong = m;
    let mut w = ctx.clone();
    w[0] &= !0x40;
    wrong["outputs"]["commands"][1]["buf"]["hex"] = json!(hexstr(&w));
    assert!(matches!(run_case(&wrong), Outcome::Fail(_)));
}

/// `init_all_ctrlq` with other ring sizes: ATQLEN / ARQLEN carry the entry
/// counts (| ENABLE), ARQT = entries − 1, and every pre-posted ARQ
/// descriptor has datalen = the buffer size with BUF, plus LB above 512
/// bytes.
#[test]
fn other_ring_sizes() {
    let mut cases = Vec::new();
    for c in published() {
        if c["op"] != "init_all_ctrlq" || c["outputs"]["ret"] != json!(0) {
            continue;
        }
        for (sq, rq, sqb, rqb) in
            [(64u32, 32u32, 1024u32, 512u32), (16, 8, 4096, 4096), (1023, 1023, 512, 2048)]
        {
            let mut m = c.clone();
            m["inputs"]["ring"] =
                json!({"sq_entries": sq, "rq_entries": rq, "sq_buf_size": sqb, "rq_buf_size": rqb});
            let mut after_arqbah = false;
            for w in m["outputs"]["reg_writes"].as_array_mut().unwrap() {
                match w["name"].as_str() {
                    Some("PF_FW_ATQLEN") => {
                        w["value"] = json!(format!("{:#010x}", 0x8000_0000u32 | sq))
                    }
                    Some("PF_FW_ARQLEN") => {
                        w["value"] = json!(format!("{:#010x}", 0x8000_0000u32 | rq))
                    }
                    Some("PF_FW_ARQBAH") => after_arqbah = true,
                    Some("PF_FW_ARQT") if after_arqbah => {
                        w["value"] = json!(format!("{:#010x}", rq - 1));
                        after_arqbah = false;
                    }
                    _ => {}
                }
            }
            let o = &mut m["outputs"]["calls"][0]["outputs"];
            o["adminq.sq.count"] = json!(sq);
            o["adminq.rq.count"] = json!(rq);
            for k in ["adminq.arq_desc[0]", "adminq.arq_desc[last]"] {
                let mut b = hexbytes(o[k]["hex"].as_str().unwrap());
                let fl: u16 = 0x1000 | if rqb > 512 { 0x0200 } else { 0 };
                b[0..2].copy_from_slice(&fl.to_le_bytes());
                b[4..6].copy_from_slice(&(rqb as u16).to_le_bytes());
                o[k]["hex"] = json!(hexstr(&b));
            }
            cases.push((m, format!("rings {sq}/{rq}, buffers {sqb}/{rqb}")));
        }
    }
    all_pass(&cases, 6);
}

/// Builds a command expectation: the descriptor is the published 0x02A0
/// one with another opcode, datalen and bytes 16–17 = 1 (flags SI|BUF|RD
/// as ice_aq_sw_rules and ice_aq_alloc_free_res set them); the firmware
/// answers DD|CMP (| ERR) with `retval` and `resp_buf`.
fn vsi_list_cmd(
    like: &Value,
    slot: u64,
    call: usize,
    opcode: u16,
    buf: &[u8],
    resp_buf: &[u8],
    retval: u8,
) -> Value {
    let mut d = hexbytes(like["desc"]["hex"].as_str().unwrap());
    d[2..4].copy_from_slice(&opcode.to_le_bytes());
    d[4..6].copy_from_slice(&(buf.len() as u16).to_le_bytes());
    d[16..18].copy_from_slice(&[1, 0]);
    let mut r = d.clone();
    r[0] |= 0x03 | if retval != 0 { 0x04 } else { 0 };
    r[6] = retval;
    json!({
        "call": call, "slot": slot,
        "desc": {"hex": hexstr(&d), "addr": "buffer", "mask": like["desc"]["mask"].clone()},
        "buf": {"len": buf.len(), "hex": hexstr(buf), "compare": "bytes"},
        "resp": {"desc": hexstr(&r), "buf": {"len": resp_buf.len(), "hex": hexstr(resp_buf)}},
    })
}

/// What ice does when a second VSI subscribes to an address that already
/// has a rule (ice_switch.c → ice_add_rule_internal →
/// ice_add_update_vsi_list): Alloc Resources 0x0208 for a VSI_LIST_REP
/// (type 3) list, a VSI_LIST_SET rule (type 3, list id, 2 VSIs: old, new)
/// with Add 0x02A0, then the lookup rule updated with 0x02A1 to forward to
/// the list (action list << 4 | VSI_LIST bit 14 | VALID, LB_EN, LAN_EN as
/// before; source = the new VSI; header length 0; index = the rule's).
/// `fail` makes the firmware answer command `fail.0` of the three with
/// return code `fail.1` (the case then ends there).
#[allow(clippy::too_many_arguments)]
fn convert_to_list(
    cmds: &mut Vec<Value>,
    like: &Value,
    rule_sent: &[u8],
    rule_id: [u8; 2],
    old: u16,
    new: u16,
    list: u16,
    slot: &mut u64,
    n: u64,
    call: usize,
    fail: Option<(usize, u8)>,
) -> bool {
    let rv = |i: usize| fail.filter(|f| f.0 == i).map_or(0, |f| f.1);
    let alloc = [3, 0, 1, 0, 0, 0];
    let mut alloc_resp = alloc;
    alloc_resp[4..6].copy_from_slice(&list.to_le_bytes());
    cmds.push(vsi_list_cmd(like, *slot, call, 0x0208, &alloc, &alloc_resp, rv(0)));
    *slot = (*slot + 1) % n;
    if rv(0) != 0 {
        return false;
    }
    let mut set = vec![3, 0, 0, 0];
    set.extend_from_slice(&list.to_le_bytes());
    set.extend_from_slice(&[2, 0]);
    set.extend_from_slice(&old.to_le_bytes());
    set.extend_from_slice(&new.to_le_bytes());
    cmds.push(vsi_list_cmd(like, *slot, call, 0x02a0, &set, &set, rv(1)));
    *slot = (*slot + 1) % n;
    if rv(1) != 0 {
        return false;
    }
    let mut upd = rule_sent.to_vec();
    upd.resize(32, 0);
    upd[6..8].copy_from_slice(&new.to_le_bytes());
    let act = u32::from_le_bytes([upd[8], upd[9], upd[10], upd[11]]);
    let act = (act & 0xc) | (u32::from(list) << 4) | (1 << 14) | (1 << 17);
    upd[8..12].copy_from_slice(&act.to_le_bytes());
    upd[12..14].copy_from_slice(&rule_id);
    upd[14..16].copy_from_slice(&[0, 0]);
    cmds.push(vsi_list_cmd(like, *slot, call, 0x02a1, &upd, &upd, rv(2)));
    *slot = (*slot + 1) % n;
    rv(2) == 0
}

/// `add_mac_fltr` with `vsi1` (no published case; the held-out set may
/// have some): ice_vsi_init for vsi0 and vsi1, then
/// ice_fltr_add_mac_and_broadcast for each. For vsi1 the broadcast rule
/// becomes a VSI list (0x0208, 0x02A0, 0x02A1); a unicast MAC without
/// umac_shared is left alone (ice_add_mac_rule: "don't overwrite"); a
/// multicast MAC or umac_shared converts that rule too, with the next list
/// id. rule_cnt counts every successful Add Switch Rules rule (lookup and
/// VSI-list). Both call orders (init, init, add, add and init, add, init,
/// add) and firmware errors on each list command (0x0208 EIO-class → EIO;
/// 0x02A1 ENOENT → ENOENT, ice_aq_sw_rules) are run; adding vsi0 twice is
/// EEXIST with nothing sent.
#[test]
fn second_vsi_on_the_same_mac() {
    let mut cases = Vec::new();
    for c in published_of(&["add_mac_fltr"]) {
        for umac_shared in [false, true] {
            for interleaved in [false, true] {
                for fail in [None, Some((0, 16u8)), Some((1, 2)), Some((2, 2))] {
                    if let Some(m) = with_vsi1(&c, umac_shared, interleaved, fail) {
                        let what = format!(
                            "vsi1 umac_shared={umac_shared} interleaved={interleaved} fail={fail:?}"
                        );
                        cases.push((m, what));
                    }
                }
            }
        }
    }
    all_pass(&cases, 16);
    // really compared: another list id in the update rule fails
    let mut wrong = cases[0].0.clone();
    let cmds = wrong["outputs"]["commands"].as_array_mut().unwrap();
    let last = cmds.len() - 1;
    let mut b = hexbytes(cmds[last]["buf"]["hex"].as_str().unwrap());
    b[8] ^= 0x10;
    cmds[last]["buf"]["hex"] = json!(hexstr(&b));
    assert!(matches!(run_case(&wrong), Outcome::Fail(_)));
}

/// `add_mac_fltr` with an all-zero MAC: ice_add_mac_rule walks
/// ice_fltr_add_mac_and_broadcast's list in order, so the broadcast entry
/// is added (its 0x02A0 sent, rule_cnt 1) before the zero address is
/// refused with EINVAL; nothing else is sent.
#[test]
fn all_zero_mac_after_the_broadcast_rule() {
    let mut cases = Vec::new();
    for c in published_of(&["add_mac_fltr"]) {
        let mut m = c.clone();
        m["inputs"]["args"]["mac"] = json!("00:00:00:00:00:00");
        let cmds: Vec<Value> = c["outputs"]["commands"].as_array().unwrap()[..2].to_vec();
        m["outputs"]["commands"] = json!(cmds);
        let writes: Vec<Value> = c["outputs"]["reg_writes"].as_array().unwrap().clone();
        m["outputs"]["reg_writes"] = json!(writes[..writes.len() - 1].to_vec());
        let call = &mut m["outputs"]["calls"][1];
        call["ret"] = json!(-22);
        call["ret_name"] = json!("EINVAL");
        call["outputs"]["switch_info.rule_cnt"] = json!(1);
        m["outputs"]["ret"] = json!(-22);
        m["outputs"]["ret_name"] = json!("EINVAL");
        cases.push((m, "all-zero MAC".to_string()));
    }
    assert!(!cases.is_empty());
    all_pass(&cases, 1);
}

/// The published `add_mac_fltr` case `c` with a second VSI, as ice
/// behaves (see [`second_vsi_on_the_same_mac`]).
fn with_vsi1(
    c: &Value,
    umac_shared: bool,
    interleaved: bool,
    fail: Option<(usize, u8)>,
) -> Option<Value> {
    let mut m = c.clone();
    let n = num(&c["inputs"]["ring"]["sq_entries"])?;
    let cmds0 = c["outputs"]["commands"].as_array()?.clone();
    let (add, bcast, mac_rule) = (&cmds0[0], &cmds0[1], &cmds0[2]);
    let mac = hexbytes(&c["inputs"]["args"]["mac"].as_str()?.replace(':', ""));
    let multicast = mac.first()? & 1 != 0;
    if fail.is_some() && umac_shared {
        return None;
    }
    m["inputs"]["hw"]["umac_shared"] = json!(umac_shared);
    let mut v1 = c["inputs"]["vsi0"].clone();
    v1["idx"] = json!(1);
    m["inputs"]["vsi1"] = v1;
    let calls0 = c["outputs"]["calls"].as_array()?;
    let (v0, r1, init1) = vsi1_added(add, &calls0[0])?;
    let order: &[(&str, usize)] = if interleaved {
        &[("init", 0), ("add", 0), ("init", 1), ("add", 1)]
    } else {
        &[("init", 0), ("init", 1), ("add", 0), ("add", 1)]
    };
    let slot = num(&add["slot"])?;
    let mut b = Vsi1Cmds { cmds: Vec::new(), slot, n, vsis: (v0, v0 + 1), fail, rule_cnt: 0 };
    let mut calls = Vec::new();
    let mut vendor = Vec::new();
    let mut ret = 0i64;
    for (ci, (what, vsi)) in order.iter().enumerate() {
        if *what == "init" {
            vendor.push("ice_vsi_init");
            if *vsi == 0 {
                b.push(add, None, ci);
                calls.push(calls0[0].clone());
            } else {
                b.push(add, Some(r1.clone()), ci);
                calls.push(init1.clone());
            }
            continue;
        }
        vendor.push("ice_fltr_add_mac_and_broadcast");
        let mut out = calls0[1].clone();
        if *vsi == 0 {
            // vsi0's rules: exactly the published ones (with umac_shared
            // the unicast one is a single add as well: the same bytes)
            b.push(bcast, None, ci);
            b.push(mac_rule, None, ci);
            b.rule_cnt += 2;
        } else if let Some((r, code)) =
            b.vsi1_lists(bcast, mac_rule, multicast || umac_shared, ci)?
        {
            ret = r;
            out["ret"] = json!(ret);
            out["outputs"]["sq_last_status"] = json!(code);
        }
        out["outputs"]["switch_info.rule_cnt"] = json!(b.rule_cnt);
        calls.push(out);
        if ret != 0 {
            break;
        }
    }
    let writes = atq_tail_writes(&b.cmds, n);
    m["vendor"] = json!(vendor[..calls.len()]);
    m["outputs"]["commands"] = json!(b.cmds);
    m["outputs"]["calls"] = json!(calls);
    m["outputs"]["reg_writes"] = json!(writes);
    m["outputs"]["ret"] = json!(ret);
    Some(m)
}

/// vsi1's Add VSI from vsi0's (`add`, its call `init0`): vsi0's number,
/// vsi1's response descriptor and vsi1's `ice_vsi_init` call.
fn vsi1_added(add: &Value, init0: &Value) -> Option<(u16, Vec<u8>, Value)> {
    // the firmware gives vsi1 the next number, one more used, one less free
    let r0 = hexbytes(add["resp"]["desc"].as_str()?);
    let v0 = u16::from_le_bytes([r0[16], r0[17]]);
    let v1n = v0 + 1;
    let mut r1 = r0.clone();
    r1[16..18].copy_from_slice(&v1n.to_le_bytes());
    let used = u16::from_le_bytes([r0[20], r0[21]]) + 1;
    let free = u16::from_le_bytes([r0[22], r0[23]]) - 1;
    r1[20..22].copy_from_slice(&used.to_le_bytes());
    r1[22..24].copy_from_slice(&free.to_le_bytes());
    let mut init1 = init0.clone();
    init1["outputs"]["vsi.vsi_num"] = json!(v1n);
    init1["outputs"]["vsi_ctx.vsi_num"] = json!(v1n);
    init1["outputs"]["vsi_ctx.vsis_allocd"] = json!(used);
    init1["outputs"]["vsi_ctx.vsis_unallocated"] = json!(free);
    Some((v0, r1, init1))
}

/// The ATQ tail write (PF_FW_ATQT) that posts each of `cmds`.
fn atq_tail_writes(cmds: &[Value], n: u64) -> Vec<Value> {
    let mut writes = Vec::new();
    for k in cmds {
        let s = (num(&k["slot"]).unwrap_or(0) + 1) % n;
        writes
            .push(json!({"call": k["call"].clone(), "offset": "0x00080400", "name": "PF_FW_ATQT",
            "value": format!("{s:#010x}"), "group": "atq"}));
    }
    writes
}

/// The commands [`with_vsi1`] expects, as they are posted.
struct Vsi1Cmds {
    cmds: Vec<Value>,
    /// The ATQ slot the next command takes, in a ring of `n`.
    slot: u64,
    n: u64,
    /// (vsi0, vsi1) hardware numbers.
    vsis: (u16, u16),
    /// The injected firmware error: (list command, status).
    fail: Option<(usize, u8)>,
    rule_cnt: i32,
}

impl Vsi1Cmds {
    /// `k` as call `ci` makes it in the next slot, with `resp_desc` as the
    /// firmware's answer when given.
    fn push(&mut self, k: &Value, resp_desc: Option<Vec<u8>>, ci: usize) {
        let mut k = k.clone();
        k["call"] = json!(ci);
        k["slot"] = json!(self.slot);
        if let Some(r) = resp_desc {
            k["resp"]["desc"] = json!(hexstr(&r));
        }
        self.cmds.push(k);
        self.slot = (self.slot + 1) % self.n;
    }

    /// vsi1's `ice_fltr_add_mac_and_broadcast` (call `ci`): the broadcast
    /// rule becomes a VSI list, and the MAC rule too when `mac_too`. The
    /// injected error's (ret, status) when it hits; `None` when the case
    /// cannot be built.
    fn vsi1_lists(
        &mut self,
        bcast: &Value,
        mac_rule: &Value,
        mac_too: bool,
        ci: usize,
    ) -> Option<Option<(i64, u8)>> {
        let sent = |k: &Value| hexbytes(k["buf"]["hex"].as_str().unwrap_or(""));
        let id = |k: &Value| {
            let b = hexbytes(k["resp"]["buf"]["hex"].as_str().unwrap_or(""));
            [b.get(12).copied().unwrap_or(0), b.get(13).copied().unwrap_or(0)]
        };
        let list = 16;
        let (v0, v1n) = self.vsis;
        let (cmds, slot, n) = (&mut self.cmds, &mut self.slot, self.n);
        let ok = convert_to_list(
            cmds,
            bcast,
            &sent(bcast),
            id(bcast),
            v0,
            v1n,
            list,
            slot,
            n,
            ci,
            self.fail,
        );
        if ok {
            self.rule_cnt += 1;
            if mac_too {
                let (cmds, slot) = (&mut self.cmds, &mut self.slot);
                let ok2 = convert_to_list(
                    cmds,
                    mac_rule,
                    &sent(mac_rule),
                    id(mac_rule),
                    v0,
                    v1n,
                    list + 1,
                    slot,
                    n,
                    ci,
                    None,
                );
                if ok2 {
                    self.rule_cnt += 1;
                }
            }
            return Some(None);
        }
        let (i, code) = self.fail?;
        // the list rule itself counted when its add succeeded
        if i == 2 {
            self.rule_cnt += 1;
        }
        Some(Some((if i == 2 && code == 2 { -2 } else { -5 }, code)))
    }
}

/// `cfg_vsi_rdma` with more queue sets than one queue-group node holds
/// (max_children of that layer = 8 in the published answers):
/// ice_sched_calc_vsi_child_nodes asks for ceil(n / 8) queue-group nodes
/// (and ceil of that / 16 = 1 above), added in one 0x0401 with that many
/// elements under the first new layer-6 node, each then queried (0x0404);
/// the tree gains them, RDMA-owned. 9 and 16 sets need two nodes, 17
/// three.
#[test]
fn more_rdma_qsets_than_a_queue_group_holds() {
    let c = published().into_iter().find(|c| c["name"] == "one_tc_4_qsets").unwrap();
    let mut cases = Vec::new();
    for qs in [9u64, 16, 17, 8] {
        let k = qs.div_ceil(8) as usize;
        let mut m = c.clone();
        m["inputs"]["args"]["max_rdmaqs"] = json!([qs]);
        let cmds = m["outputs"]["commands"].as_array_mut().unwrap();
        let query = cmds.pop().unwrap();
        let add = cmds.pop().unwrap();
        let slot0 = num(&add["slot"]).unwrap();
        let n = num(&c["inputs"]["ring"]["sq_entries"]).unwrap();
        let (a, first, parent) = add_k_elems(&add, k);
        cmds.push(a);
        for (i, mut q) in query_k_elems(&query, first, k).into_iter().enumerate() {
            q["slot"] = json!((slot0 + 1 + i as u64) % n);
            cmds.push(q);
        }
        let last = num(&add["slot"]).unwrap();
        let writes = m["outputs"]["reg_writes"].as_array_mut().unwrap();
        writes.truncate(writes.len() - 2);
        for i in 0..=k as u64 {
            let s = (last + 1 + i) % n;
            writes.push(json!({"call": 3, "offset": "0x00080400", "name": "PF_FW_ATQT",
                "value": format!("{s:#010x}"), "group": "atq"}));
        }
        let tree = m["outputs"]["calls"][3]["outputs"]["tree"].as_array_mut().unwrap();
        let node = tree.pop().unwrap();
        for i in 0..k {
            let mut x = node.clone();
            x["teid"] = json!(first + i as u32);
            x["parent"] = json!(parent);
            tree.push(x);
        }
        cases.push((m, format!("max_rdmaqs {qs}")));
    }
    all_pass(&cases, 1);
    // really compared: one queue-group node too few fails
    let mut wrong = cases[0].0.clone();
    wrong["inputs"]["args"]["max_rdmaqs"] = json!([8]);
    assert!(matches!(run_case(&wrong), Outcome::Fail(_)));
}

/// A second VSI of a type the driver does not build (VF, VMDq2) is a
/// skip with the README's reason, not a failure.
#[test]
fn a_second_vsi_of_another_type_is_skipped() {
    let c = published().into_iter().find(|c| c["op"] == "add_mac_fltr").unwrap();
    let mut m = with_vsi1(&c, false, false, None).unwrap();
    m["inputs"]["vsi1"]["type"] = json!(2);
    assert!(matches!(run_case(&m), Outcome::Skip(_)));
}

/// The published one-element Add Sched Elems command (0x0401) `add`
/// widened to `k` copies of its element, the firmware handing out TEIDs
/// from its answer's first one on; with that first TEID and the parent's.
fn add_k_elems(add: &Value, k: usize) -> (Value, u32, u32) {
    let mut sent = hexbytes(add["buf"]["hex"].as_str().unwrap());
    sent.resize(32, 0);
    let mut got = hexbytes(add["resp"]["buf"]["hex"].as_str().unwrap());
    got.resize(32, 0);
    let first = le32_at(&got, 12);
    let parent = le32_at(&sent, 0);
    let mut buf = sent[..8].to_vec();
    buf[4..6].copy_from_slice(&(k as u16).to_le_bytes());
    let mut rbuf = buf.clone();
    for i in 0..k {
        let mut e = sent[8..32].to_vec();
        buf.extend_from_slice(&e);
        e[4..8].copy_from_slice(&(first + i as u32).to_le_bytes());
        rbuf.extend_from_slice(&e);
    }
    let len = (buf.len() as u16).to_le_bytes();
    let mut dh = hexbytes(add["desc"]["hex"].as_str().unwrap());
    dh[4..6].copy_from_slice(&len);
    let mut rh = hexbytes(add["resp"]["desc"].as_str().unwrap());
    rh[4..6].copy_from_slice(&len);
    let mut a = add.clone();
    a["desc"]["hex"] = json!(hexstr(&dh));
    a["buf"] = json!({"len": buf.len(), "hex": hexstr(&buf), "compare": "bytes"});
    a["resp"] = json!({"desc": hexstr(&rh), "buf": {"len": buf.len(), "hex": hexstr(&rbuf)}});
    (a, first, parent)
}

/// The published Query Sched Elem command (0x0404) `query` once per new
/// element: the i-th asks for (and is answered with) TEID `first + i`.
fn query_k_elems(query: &Value, first: u32, k: usize) -> Vec<Value> {
    (0..k)
        .map(|i| {
            let teid = (first + i as u32).to_le_bytes();
            let with_teid = |v: &Value| {
                let mut b = hexbytes(v.as_str().unwrap());
                b.resize(24, 0);
                b[4..8].copy_from_slice(&teid);
                json!(hexstr(&b))
            };
            let mut q = query.clone();
            q["buf"]["hex"] = with_teid(&query["buf"]["hex"]);
            q["resp"]["buf"]["hex"] = with_teid(&query["resp"]["buf"]["hex"]);
            q
        })
        .collect()
}

fn le32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// `ena_rdma_qset` after a `cfg_vsi_rdma` sized for more qsets than one
/// queue-group node holds: the branch gets k queue-group nodes (one 0x0401
/// with k elements, k queries), and ice_sched_get_free_qparent puts all
/// the qsets of the one 0x0C33 under the first node with room — the first
/// queue group, still empty; every TEID the firmware hands out afterwards
/// is k − 1 higher.
#[test]
fn qsets_go_to_the_first_queue_group_with_room() {
    let c = published().into_iter().find(|c| c["name"] == "eight_qsets").unwrap();
    let mut cases = Vec::new();
    for k in [2usize, 3] {
        let mut m = c.clone();
        m["inputs"]["args"]["max_rdmaqs"] = json!([8 * k as u64 - 1]);
        let n = num(&c["inputs"]["ring"]["sq_entries"]).unwrap();
        let old = c["outputs"]["commands"].as_array().unwrap().clone();
        let ia = old
            .iter()
            .rposition(|x| {
                num(&x["call"]) == Some(3) && x["desc"]["hex"].as_str().unwrap()[4..8] == *"0104"
            })
            .unwrap();
        let (add, query) = (&old[ia], &old[ia + 1]);
        let (a, first, parent) = add_k_elems(add, k);
        let d = (k - 1) as u32;
        let shift = |t: u32| if t > first { t + d } else { t };
        let mut cmds: Vec<Value> = old[..ia].to_vec();
        cmds.push(a);
        cmds.extend(query_k_elems(query, first, k));
        // call 4: the same commands, TEIDs above the first queue group moved
        for x in &old[ia + 2..] {
            cmds.push(shifted_cmd(x, shift));
        }
        let slot0 = num(&old[0]["slot"]).unwrap();
        let mut writes = Vec::new();
        for (i, x) in cmds.iter_mut().enumerate() {
            let s = (slot0 + i as u64) % n;
            x["slot"] = json!(s);
            writes.push(json!({"call": x["call"].clone(), "offset": "0x00080400",
                "name": "PF_FW_ATQT", "value": format!("{:#010x}", (s + 1) % n), "group": "atq"}));
        }
        assert_eq!(writes.len(), c["outputs"]["reg_writes"].as_array().unwrap().len() + (k - 1));
        m["outputs"]["commands"] = json!(cmds);
        m["outputs"]["reg_writes"] = json!(writes);
        for ci in [3usize, 4] {
            add_queue_groups(&mut m["outputs"]["calls"][ci]["outputs"], first, parent, k, shift);
        }
        cases.push((m, format!("{k} queue groups")));
    }
    all_pass(&cases, 1);
    let mut wrong = cases[0].0.clone();
    wrong["outputs"]["calls"][4]["outputs"]["qset_teid[0]"] = json!("0x2006");
    assert!(matches!(run_case(&wrong), Outcome::Fail(_)));
}

/// A command of call 4 with the TEIDs it sends and gets back moved by
/// `shift`.
fn shifted_cmd(x: &Value, shift: impl Fn(u32) -> u32) -> Value {
    let mut x = x.clone();
    let op = x["desc"]["hex"].as_str().unwrap()[4..8].to_string();
    let mut rb = hexbytes(x["resp"]["buf"]["hex"].as_str().unwrap());
    if op == "330c" {
        let cnt = u16::from_le_bytes([rb[4], rb[5]]) as usize;
        rb.resize(8 + 24 * cnt, 0);
        for i in 0..cnt {
            let at = 8 + 24 * i + 4;
            let v = shift(le32_at(&rb, at));
            rb[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
    } else {
        let mut b = hexbytes(x["buf"]["hex"].as_str().unwrap());
        b.resize(24, 0);
        let v = shift(le32_at(&b, 4));
        b[4..8].copy_from_slice(&v.to_le_bytes());
        x["buf"]["hex"] = json!(hexstr(&b));
        rb.resize(24, 0);
        rb[4..8].copy_from_slice(&v.to_le_bytes());
    }
    x["resp"]["buf"]["hex"] = json!(hexstr(&rb));
    x
}

/// The tree of a call's outputs `out` with the k − 1 further queue groups
/// after the first (`first`, under `parent`), TEIDs moved by `shift`.
fn add_queue_groups(
    out: &mut Value,
    first: u32,
    parent: u32,
    k: usize,
    shift: impl Fn(u32) -> u32,
) {
    let tree = out["tree"].as_array_mut().unwrap();
    let at = tree.iter().position(|x| num(&x["teid"]) == Some(u64::from(first))).unwrap();
    let qgrp = tree[at].clone();
    let mut end = at + 1;
    for x in tree.iter_mut().skip(at + 1) {
        if num(&x["parent"]) != Some(u64::from(first)) {
            break;
        }
        let t = num(&x["teid"]).unwrap() as u32;
        x["teid"] = json!(shift(t));
        end += 1;
    }
    for i in 1..k {
        let mut x = qgrp.clone();
        x["teid"] = json!(first + i as u32);
        x["parent"] = json!(parent);
        x["children"] = json!(0);
        tree.insert(end + i - 1, x);
    }
    for i in 0..8 {
        let key = format!("qset_teid[{i}]");
        if let Some(v) = out.get(&key).and_then(num) {
            out[key] = json!(format!("{:#x}", shift(v as u32)));
        }
    }
}

/// Without DCB every TC node of ice's tree has tc_num 0, so on a
/// two-branch topology `tc_bitmap` 3 builds the TC 0 branch only (the
/// same commands as bitmap 1), and qsets on TC 1 find no parent: EINVAL,
/// nothing sent.
#[test]
fn only_tc0_exists_without_dcb() {
    let c = published().into_iter().find(|c| c["name"] == "eight_qsets").unwrap();
    let mut both = c.clone();
    both["inputs"]["args"]["tc_bitmap"] = json!(3);
    let mut tc1 = c.clone();
    tc1["inputs"]["args"]["tc"] = json!(1);
    let cmds = tc1["outputs"]["commands"].as_array_mut().unwrap();
    cmds.retain(|x| num(&x["call"]) != Some(4));
    let writes = tc1["outputs"]["reg_writes"].as_array_mut().unwrap();
    writes.retain(|x| num(&x["call"]) != Some(4));
    let call = &mut tc1["outputs"]["calls"][4];
    call["ret"] = json!(-22);
    let out = call["outputs"].as_object_mut().unwrap();
    out.retain(|k, _| !k.starts_with("qset_teid"));
    let tree = c["outputs"]["calls"][3]["outputs"]["tree"].clone();
    out.insert("tree".into(), tree);
    tc1["outputs"]["ret"] = json!(-22);
    let cases = vec![(both, "tc_bitmap 3".to_string()), (tc1, "qsets on TC 1".to_string())];
    all_pass(&cases, 1);
}
