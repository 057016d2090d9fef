//! `lan-aq-vectors.json` from the vendor's Linux 6.1 ice admin-queue code
//! (`ice_controlq.c`, through `shim/ice/glue.c` and `lan.rs`'s scripted
//! firmware), in the published schema (`tests/conformance/README.md`, "LAN
//! admin-queue vectors").
//!
//! Ops written: `send_cmd` (`ice_aq_send_cmd`, the generic path every
//! typed command goes through): a caller descriptor of the shape the
//! conformance runner builds (`SI | flags_or`, the opcode, parameters in
//! bytes 16–23, nothing else), a caller buffer of `buf_size` bytes (or
//! none, or a NULL buffer with a size), at a ring position reached by
//! completed Get Version commands, on firmware answers drawn by `lan.rs`'s
//! generator (return codes incl. EBUSY and the firmware-internal upper
//! byte, datalen, response bytes, parameter bytes, no completion).
//! `commands[k].resp` is what the harness's firmware wrote for command k
//! (bytes 0–23, and 24–31 of a direct command; the response buffer), so the
//! runner's replay firmware writes the same bytes.
//!
//! Typed commands (`typed_op`): `clear_pf_cfg`, `clear_pxe`, `get_fw_ver`,
//! `set_event_mask`, `restart_an`, `set_mac_cfg`, `manage_mac_read`,
//! `get_link_info`, `query_sched_res` (more than 9 layers left out:
//! deviation `sched_layers_over_9`), one
//! per case from `lan.rs`'s `gen_typed` (the kinds above only), at a ring
//! position, with outputs in the runner's field names
//! (`xtask/src/conformance/lan.rs`). Re-derived: the published cases of
//! these ops whose arguments Linux 6.1's functions have (no `refclk`,
//! `auto_drop`, `via_ice_clear_pxe_mode`).
//!
//! ARQ events (`clean_rq_elem`, `vendor_events`: `gen_events`'s events,
//! one session op per poll so each poll has its queue state) and shutdown
//! (`shutdown_all_ctrlq`, `vendor_shutdown`: 6.1 always unloads).
//!
//! Start (`init_all_ctrlq`, `vendor_init_all`; -EIO starts, which 6.1
//! retries and the runner does not, left out and counted).
//!
//! Caps (`discover_dev_caps`, `discover_func_caps`: the 20 fields the glue
//! reports; answers the differential classifies as a listed deviation are
//! left out and counted). So are `manage_mac_read` answers it classifies
//! as one (`mac_read_entries_past_buffer`, `mac_read_buffer_over_4096`).
//!
//! Not written yet: `get_caps`, `list_caps`, `init_check_adminq`,
//! `q_shutdown`,
//! and the switch/VSI ops (not compiled: `ice_switch.c`, `ice_lib.c`).
//! `fw_model` and `vendor_elapsed_us` are not written (documentation-only
//! keys of the published set).

use serde_json::{Map, Value, json};

use super::{Rederived, Written, h, h8};
use crate::lan::{self, Answer, LanCase, LanOp, Typed};
use crate::rng::Rng;

/// Opcodes the generated commands carry (ice_adminq_cmd.h: versions,
/// driver/PF config, capabilities, switch, VSI, scheduler, PHY/link, LLDP,
/// RDMA).
const OPCODES: [u16; 16] = [
    0x0001, 0x0002, 0x0003, 0x0009, 0x000A, 0x000B, 0x0110, 0x0200, 0x0210, 0x0400, 0x0401, 0x0600,
    0x0607, 0x0A06, 0x0C43, 0x0C44,
];
const BUF: u16 = 0x1000; // ice_adminq_cmd.h ICE_AQ_FLAG_BUF
const SI: u16 = 0x2000; // ICE_AQ_FLAG_SI

fn hexs(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `b` without its trailing zero bytes (a published `hex` is a prefix,
/// the rest of `len` zero).
fn prefix(b: &[u8]) -> String {
    let n = b.iter().rposition(|x| *x != 0).map_or(0, |i| i + 1);
    hexs(&b[..n])
}

fn errno_name(r: i32) -> &'static str {
    match r {
        0 => "OK",
        -2 => "ENOENT",
        -5 => "EIO",
        -12 => "ENOMEM",
        -16 => "EBUSY",
        -22 => "EINVAL",
        -28 => "ENOSPC",
        -114 => "EALREADY",
        _ => "?",
    }
}

fn reg_name(off: usize) -> (&'static str, &'static str) {
    use irdma::ice::regs as r;
    match off {
        r::PF_FW_ATQT => ("PF_FW_ATQT", "atq"),
        r::PF_FW_ATQH => ("PF_FW_ATQH", "atq"),
        r::PF_FW_ATQLEN => ("PF_FW_ATQLEN", "atq"),
        r::PF_FW_ATQBAL => ("PF_FW_ATQBAL", "atq"),
        r::PF_FW_ATQBAH => ("PF_FW_ATQBAH", "atq"),
        r::PF_FW_ARQT => ("PF_FW_ARQT", "arq"),
        r::PF_FW_ARQH => ("PF_FW_ARQH", "arq"),
        r::PF_FW_ARQLEN => ("PF_FW_ARQLEN", "arq"),
        r::PF_FW_ARQBAL => ("PF_FW_ARQBAL", "arq"),
        r::PF_FW_ARQBAH => ("PF_FW_ARQBAH", "arq"),
        _ => ("?", "other"),
    }
}

/// What the harness's firmware (`lan.rs` `Fw::run`) writes into a
/// completed descriptor: DD | CMP (| ERR), retval, datalen when scripted,
/// parameter bytes 16–31 (16–23 on an indirect command).
fn completed(seen: &[u8; 32], a: &Answer) -> [u8; 32] {
    let mut d = *seen;
    a.complete(&mut d);
    d
}

/// A descriptor entry: `hex`, and for an indirect one the masked address.
fn desc_json(d: &[u8; 32]) -> Value {
    let fl = u16::from_le_bytes([d[0], d[1]]);
    if fl & BUF != 0 {
        json!({"hex": hexs(d), "addr": "buffer",
               "mask": format!("{}{}", "ff".repeat(24), "00".repeat(8))})
    } else {
        json!({"hex": hexs(d)})
    }
}

struct SendCase {
    sq_entries: u16,
    rq_entries: u16,
    sq_buf: u16,
    position: u16,
    opcode: u16,
    flags_or: u16,
    params: [u8; 16],
    /// `None` with `size > 0`: a NULL buffer with a size.
    buf: Option<Vec<u8>>,
    size: u16,
    answers: Vec<Answer>,
}

fn gen_send(r: &mut Rng) -> SendCase {
    let sq_entries = r.pick(&[192u16, 192, 8, 16, 64]);
    let sq_buf = r.pick(&[4096u16, 4096, 1024, 512]);
    let position = match r.below(4) {
        0 => 0,
        1 => sq_entries - 1,
        _ => r.below(u64::from(sq_entries)) as u16,
    };
    let opcode = r.pick(&OPCODES);
    let flags_or = r.pick(&[0u16, 0, 0x0400, 0x0200, 0x0400 | 0x0200, 0x0004]);
    let mut params = [0u8; 16];
    // bytes 24–31 stay 0: the runner sends no hand-set address words
    params[..8].iter_mut().for_each(|b| *b = r.next_u64() as u8);
    let (buf, size) = match r.below(8) {
        0..=2 => (None, 0),
        3 => (None, r.range(1, 64) as u16),
        _ => {
            let size = match r.below(5) {
                0 => 512,
                1 => 513,
                2 => sq_buf,
                3 => sq_buf + 1,
                _ => r.range(1, 256) as u16,
            };
            let b: Vec<u8> =
                (0..size).map(|_| if r.chance(1, 4) { r.next_u64() as u8 } else { 0 }).collect();
            (Some(b), size)
        }
    };
    let n = r.range(1, 3) as usize;
    let answers = (0..n).map(|_| lan::gen_answer(r, size)).collect();
    SendCase {
        sq_entries,
        rq_entries: r.pick(&[192u16, 8]),
        sq_buf,
        position,
        opcode,
        flags_or,
        params,
        buf,
        size,
        answers,
    }
}

fn answer_json(a: &Answer) -> Value {
    let mut m = Map::new();
    m.insert("retval_raw".into(), a.retval.into());
    if let Some(l) = a.datalen {
        m.insert("datalen".into(), l.into());
    }
    if !a.buf.is_empty() {
        m.insert("buf".into(), hexs(&a.buf).into());
        m.insert("buf_len".into(), a.buf.len().into());
    }
    if let Some(p) = a.params {
        m.insert("desc_writes".into(), json!({"16": hexs(&p)}));
    }
    if a.hang {
        m.insert("hang".into(), true.into());
    }
    Value::Object(m)
}

/// Where a case runs: the ring geometry and the ATQ slot it starts at
/// (reached by completed Get Version commands).
#[derive(Clone, Copy)]
struct Ring {
    sq_entries: u16,
    rq_entries: u16,
    sq_buf: u16,
    position: u16,
}

impl Ring {
    fn json(&self) -> Value {
        json!({"sq_entries": self.sq_entries, "rq_entries": self.rq_entries,
               "sq_buf_size": self.sq_buf, "rq_buf_size": 4096,
               "position": self.position, "arq_position": 0})
    }
}

/// Runs `op` on the vendor code at `ring`'s position; its output.
fn run_at(ring: &Ring, op: LanOp) -> Result<lan::OpOut, String> {
    run_seq(ring, vec![op])?.pop().ok_or_else(|| "no output".into())
}

/// A session reaching `ring`'s position with Get Version commands, then
/// `more`.
fn lan_case(ring: &Ring, more: Vec<LanOp>) -> LanCase {
    let mut ops: Vec<LanOp> = (0..ring.position)
        .map(|_| LanOp::Typed { cmd: Typed::GetVersion, answers: vec![], regs: vec![] })
        .collect();
    ops.extend(more);
    LanCase {
        sq_entries: ring.sq_entries,
        rq_entries: ring.rq_entries,
        sq_buf: ring.sq_buf,
        rq_buf: 4096,
        drop_bal: 0,
        init_all: None,
        ops,
    }
}

/// Runs `more` on the vendor code at `ring`'s position; their outputs.
fn run_seq(ring: &Ring, more: Vec<LanOp>) -> Result<Vec<lan::OpOut>, String> {
    let k = more.len();
    let c = lan_case(ring, more);
    let mut outs = lan::run_vendor(&c);
    if outs.len() != c.ops.len() + 1 {
        return Err(format!(
            "the vendor's session stopped after {} of {} ops",
            outs.len(),
            c.ops.len() + 1
        ));
    }
    for (k, o) in outs[..outs.len() - k].iter().enumerate() {
        if o.rets.first().copied().unwrap_or(-1) != 0 {
            return Err(format!("positioning op {k} returned {:?}", o.rets));
        }
    }
    Ok(outs.split_off(outs.len() - k))
}

/// The queue fields every call reports (ice's names).
fn ring_fields(out: &mut Map<String, Value>, st: &lan::QState) {
    for (k, v) in [
        ("adminq.sq.count", st.sq_count),
        ("adminq.rq.count", st.rq_count),
        ("adminq.sq.next_to_use", st.sq_ntu),
        ("adminq.sq.next_to_clean", st.sq_ntc),
        ("adminq.rq.next_to_use", st.rq_ntu),
        ("adminq.rq.next_to_clean", st.rq_ntc),
    ] {
        out.insert(k.into(), v.into());
    }
}

/// `commands`: each command the firmware saw at its slot, with what the
/// harness's firmware wrote back (`answers[k]`, or a plain completion).
fn commands_json(o: &lan::OpOut, ring: &Ring, answers: &[Answer]) -> Vec<Value> {
    o.cmds
        .iter()
        .enumerate()
        .map(|(k, seen)| {
            let a = answers.get(k).cloned().unwrap_or_else(Answer::ok);
            let fl = u16::from_le_bytes([seen.desc[0], seen.desc[1]]);
            let dl = usize::from(u16::from_le_bytes([seen.desc[4], seen.desc[5]]));
            let resp = if a.hang {
                Value::Null
            } else {
                let mut r = json!({"desc": hexs(&completed(&seen.desc, &a))});
                if fl & BUF != 0 && seen.buf.is_some() && !a.buf.is_empty() {
                    let room = a.buf.len().min(dl);
                    r["buf"] = json!({"len": room, "hex": hexs(&a.buf[..room])});
                }
                r
            };
            let mut c = json!({
                "call": 0,
                "slot": (usize::from(ring.position) + k) % usize::from(ring.sq_entries),
                "desc": desc_json(&seen.desc),
                "resp": resp,
            });
            if let Some(b) = &seen.buf {
                c["buf"] = json!({"len": b.len(), "hex": prefix(b), "compare": "bytes"});
            }
            c
        })
        .collect()
}

fn reg_writes_json(o: &lan::OpOut) -> Vec<Value> {
    o.writes
        .iter()
        .map(|(off, val)| {
            let (name, group) = reg_name(*off);
            let mut w = json!({"call": 0, "offset": h(*off as u64, 8), "name": name,
                   "value": super::num(&Value::String(val.clone())).map_or(Value::String(val.clone()), |v| h(v, 8)),
                   "group": group});
            // a ring's base address (lan.rs logs it as a token): the
            // runner checks its own ring's address there
            if let Some(half) = val.strip_suffix("(ring)") {
                w["value"] = h8(0);
                w["value_is"] = format!("{half}(bus address of the {} ring)", group.to_uppercase()).into();
            }
            w
        })
        .collect()
}

/// A published case of one call.
struct OneCall<'a> {
    op: &'a str,
    name: String,
    vendor_fn: &'a str,
    ring: Ring,
    lport: u8,
    args: Map<String, Value>,
    /// Registers the firmware answers reads of (`inputs.regs`).
    regs: &'a [(usize, u32)],
    answers: &'a [Answer],
    ret: i32,
    out: Map<String, Value>,
    o: &'a lan::OpOut,
}

impl OneCall<'_> {
    fn json(self) -> Value {
        let mut inputs = json!({
            "ring": self.ring.json(),
            "hw": {"mac_type": "E810"},
            "port_info": {"lport": self.lport},
            "args": self.args,
            "fw_script": self.answers.iter().enumerate()
                .map(|(k, a)| { let mut v = answer_json(a); v["cmd"] = k.into(); v })
                .collect::<Vec<_>>(),
        });
        if !self.regs.is_empty() {
            inputs["regs"] = Value::Object(
                self.regs.iter().map(|(r, v)| (format!("{r:#010x}"), h8(u64::from(*v)))).collect(),
            );
        }
        if self.op == "set_mac_cfg" {
            // the runner's API version for the auto-drop check (6.1 has
            // none): the published sets' 1.5
            inputs["hw"]["api_maj_ver"] = 1.into();
            inputs["hw"]["api_min_ver"] = 5.into();
        }
        json!({
            "op": self.op,
            "name": self.name,
            "vendor": [self.vendor_fn],
            "inputs": inputs,
            "outputs": {
                "ret": self.ret,
                "ret_name": errno_name(self.ret),
                "calls": [{"fn": self.vendor_fn, "ret": self.ret, "ret_name": errno_name(self.ret),
                           "outputs": self.out}],
                "commands": commands_json(self.o, &self.ring, self.answers),
                "reg_writes": reg_writes_json(self.o),
            },
        })
    }
}

/// Runs one send case on the vendor code; the published case.
fn vendor_send(n: u64, s: &SendCase) -> Result<Value, String> {
    let mut desc = [0u8; 32];
    desc[0..2].copy_from_slice(&(SI | s.flags_or).to_le_bytes());
    desc[2..4].copy_from_slice(&s.opcode.to_le_bytes());
    desc[16..32].copy_from_slice(&s.params);
    let ring = Ring {
        sq_entries: s.sq_entries,
        rq_entries: s.rq_entries,
        sq_buf: s.sq_buf,
        position: s.position,
    };
    let o = run_at(
        &ring,
        LanOp::Send {
            desc,
            buf: s.buf.clone(),
            size: s.size,
            answers: s.answers.clone(),
            bad_head: None,
            crit: 0,
        },
    )?;
    let ret = o.rets.first().copied().unwrap_or(0);
    let mut out = Map::new();
    out.insert("sq_last_status".into(), o.state.last_status.into());
    if let Some(d) = o.descs.first() {
        out.insert("desc_after".into(), desc_json(d));
    }
    if s.size > 0
        && let Some(b) = o.bufs.first()
    {
        out.insert("buf_after".into(), hexs(b).into());
    }
    ring_fields(&mut out, &o.state);
    let mut args = Map::new();
    args.insert("opcode".into(), s.opcode.into());
    if s.flags_or != 0 {
        args.insert("flags_or".into(), s.flags_or.into());
    }
    if s.params.iter().any(|b| *b != 0) {
        args.insert("params".into(), hexs(&s.params).into());
    }
    args.insert("buf_size".into(), s.size.into());
    match &s.buf {
        Some(b) => {
            // a prefix: the runner pads it with zeros to `buf_size`
            args.insert("buf".into(), prefix(b).into());
        }
        None if s.size > 0 => {
            args.insert("null_buf".into(), 1.into());
        }
        None => {}
    }
    Ok(OneCall {
        op: "send_cmd",
        name: format!("vd{n}_op{:04x}_pos{}", s.opcode, s.position),
        vendor_fn: "ice_aq_send_cmd",
        ring,
        lport: 0,
        args,
        regs: &[],
        answers: &s.answers,
        ret,
        out,
        o: &o,
    }
    .json())
}

/// A typed command of the LAN bring-up the runner drives (its op name,
/// the vendor function, its arguments in the runner's names), or `None`
/// for one it has no op for (Get Default Topology, Query Element) or whose
/// outputs are not written yet.
fn typed_op(cmd: &Typed) -> Option<(&'static str, &'static str, u8, Map<String, Value>)> {
    let mut a = Map::new();
    let (op, f, lport) = match *cmd {
        Typed::ClearPfCfg => ("clear_pf_cfg", "ice_clear_pf_cfg", 0),
        Typed::ClearPxe => ("clear_pxe", "ice_aq_clear_pxe_mode", 0),
        Typed::GetVersion => ("get_fw_ver", "ice_aq_get_fw_ver", 0),
        Typed::SetEventMask { lport, mask } => {
            a.insert("port_num".into(), lport.into());
            a.insert("mask".into(), mask.into());
            ("set_event_mask", "ice_aq_set_event_mask", 0)
        }
        Typed::RestartAn { lport, ena } => {
            a.insert("ena_link".into(), u8::from(ena).into());
            ("restart_an", "ice_aq_set_link_restart_an", lport)
        }
        Typed::SetMacCfg { max_frame } => {
            a.insert("max_frame_size".into(), max_frame.into());
            ("set_mac_cfg", "ice_aq_set_mac_cfg", 0)
        }
        Typed::MacRead { buf_len } => {
            a.insert("buf_size".into(), buf_len.into());
            ("manage_mac_read", "ice_aq_manage_mac_read", 0)
        }
        Typed::LinkInfo { lport, ena_lse } => {
            a.insert("ena_lse".into(), u8::from(ena_lse).into());
            ("get_link_info", "ice_aq_get_link_info", lport)
        }
        Typed::QuerySchedRes => ("query_sched_res", "ice_sched_query_res_alloc", 0),
        Typed::DevCaps { .. } => ("discover_dev_caps", "ice_discover_dev_caps", 0),
        Typed::FuncCaps { .. } => ("discover_func_caps", "ice_discover_func_caps", 0),
        _ => return None,
    };
    Some((op, f, lport, a))
}

/// Runs one typed command on the vendor code; the published case.
fn vendor_typed(
    n: u64,
    ring: &Ring,
    cmd: Typed,
    answers: &[Answer],
    regs: &[(usize, u32)],
) -> Result<Value, String> {
    let (op, vendor_fn, lport, args) =
        typed_op(&cmd).ok_or_else(|| format!("{cmd:?}: no runner op"))?;
    let o = run_at(ring, LanOp::Typed { cmd, answers: answers.to_vec(), regs: regs.to_vec() })?;
    let ret = o.rets.first().copied().unwrap_or(0);
    let mut out = Map::new();
    out.insert("sq_last_status".into(), o.state.last_status.into());
    typed_outputs(cmd, ret, &o, &mut out);
    let mut v = OneCall {
        op,
        name: format!("vd{n}_{op}_pos{}", ring.position),
        vendor_fn,
        ring: *ring,
        lport,
        args,
        regs,
        answers,
        ret,
        out,
        o: &o,
    }
    .json();
    match cmd {
        Typed::DevCaps { pf_id } => v["inputs"]["hw"]["pf_id"] = pf_id.into(),
        Typed::FuncCaps { valid_functions, num_funcs } => {
            v["inputs"]["state"] = json!({"dev_caps.valid_functions": valid_functions,
                                          "dev_caps.num_funcs": num_funcs});
        }
        _ => {}
    }
    Ok(v)
}

/// A typed command's outputs as the vendor left them (`ret` its return).
fn typed_outputs(cmd: Typed, ret: i32, o: &lan::OpOut, out: &mut Map<String, Value>) {
    match cmd {
        Typed::GetVersion => version_outputs(ret, o, out),
        Typed::MacRead { .. } => {
            if ret == 0
                && let Some(m) = parsed_field(o, "port_info.mac.lan_addr")
            {
                // ice_aq_manage_mac_read copies the LAN address into both
                let m = Value::String(format!("{m:012x}"));
                out.insert("port_info.mac.lan_addr".into(), m.clone());
                out.insert("port_info.mac.perm_addr".into(), m);
            }
        }
        Typed::LinkInfo { .. } if ret == 0 => {
            // struct ice_link_status as ice_aq_get_link_info left it
            for (k, v) in &o.parsed {
                let k =
                    if k.starts_with("fc.") { (*k).to_string() } else { format!("link_info.{k}") };
                out.insert(k, (*v).into());
            }
        }
        Typed::DevCaps { .. } | Typed::FuncCaps { .. } if ret == 0 => caps_outputs(cmd, o, out),
        Typed::QuerySchedRes if ret == 0 => {
            // ice_sched_query_res_alloc: the layer counts, then
            // max_children[i] for the layers it filled
            let mut i = 0;
            for (k, v) in &o.parsed {
                let k = if *k == "max_children[i]" {
                    i += 1;
                    format!("max_children[{}]", i - 1)
                } else {
                    (*k).to_string()
                };
                out.insert(k, (*v).into());
            }
        }
        _ => {}
    }
}

/// A parsed field of the vendor's answer.
fn parsed_field(o: &lan::OpOut, k: &str) -> Option<u64> {
    o.parsed.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
}

/// ice_aq_get_fw_ver: the ring, and the version when it succeeded.
fn version_outputs(ret: i32, o: &lan::OpOut, out: &mut Map<String, Value>) {
    ring_fields(out, &o.state);
    if ret == 0
        && let (Some(api), Some(build), Some(fw)) =
            (parsed_field(o, "api"), parsed_field(o, "fw_build"), parsed_field(o, "fw"))
    {
        let b = |v: u64, i: u32| Value::from((v >> (8 * i)) as u8);
        for (i, k) in ["fw_branch", "fw_maj_ver", "fw_min_ver", "fw_patch"].iter().enumerate() {
            out.insert((*k).into(), b(fw, i as u32));
        }
        out.insert("fw_build".into(), format!("{build:#x}").into());
        for (i, k) in ["api_branch", "api_maj_ver", "api_min_ver", "api_patch"].iter().enumerate() {
            out.insert((*k).into(), b(api, i as u32));
        }
    }
}

/// Device or function capabilities under their published names.
fn caps_outputs(cmd: Typed, o: &lan::OpOut, out: &mut Map<String, Value>) {
    // lan.rs cap_fields: 15 common capabilities, then the
    // device's or the function's own ("-": none); 6.1's `rdma` is
    // the published `iwarp`
    let prefix = if matches!(cmd, Typed::DevCaps { .. }) { "dev_caps" } else { "func_caps" };
    for (i, (k, v)) in o.parsed.iter().enumerate() {
        let k = match (i < 15, *k) {
            (_, "-") => continue,
            (true, "rdma") => "common_cap.iwarp".to_string(),
            (true, k) => format!("common_cap.{k}"),
            (false, k) => k.to_string(),
        };
        out.insert(format!("{prefix}.{k}"), (*v).into());
    }
}

/// An ARQ event as the runner posts it (`inputs.arq_events[i]`): the
/// flags the harness firmware writes (the slot's BUF|LB, DD|CMP, ERR), the
/// datalen it writes (the event's, or the bytes that fit the slot), the
/// cookie and parameter words of `cookie_params`.
fn event_json(e: &lan::Ev, armed_flags: u16, slot_len: usize) -> Value {
    let w = |i: usize| {
        let b = &e.cookie_params[i..i + 4];
        h8(u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
    };
    let len = e.buf.len().min(slot_len);
    let fl = (armed_flags & (BUF | 0x0200)) | 0x0003 | if e.err { 0x0004 } else { 0 };
    json!({
        "opcode": h(u64::from(e.opcode), 4),
        "flags": h(u64::from(fl), 4),
        "retval": e.retval,
        "datalen": e.datalen.unwrap_or(len as u16),
        "buf": hexs(&e.buf[..len]),
        "cookie_high": w(0), "cookie_low": w(4), "param0": w(8), "param1": w(12),
    })
}

/// `evs` posted on the ARQ, then `cleans` ice_clean_rq_elem calls into a
/// buffer of `out_len` bytes (one op each, so every poll has its queue
/// state); the published `clean_rq_elem` case.
fn vendor_events(
    n: u64,
    ring: &Ring,
    evs: &[lan::Ev],
    cleans: u8,
    out_len: u16,
) -> Result<Value, String> {
    let ops = (0..cleans.max(1))
        .map(|k| LanOp::Events {
            evs: if k == 0 { evs.to_vec() } else { vec![] },
            cleans: 1,
            out_len,
            bad_arqh: None,
        })
        .collect();
    let outs = run_seq(ring, ops)?;
    let sq = usize::from(ring.sq_entries);
    // ice_alloc_arq_bufs arms every slot alike: the last slot's flags (no
    // event reaches it: fewer than 4 are posted on at least 8 slots)
    let armed = outs
        .first()
        .and_then(|o| o.rings.get(sq + usize::from(ring.rq_entries) - 1))
        .map_or(0, |d| u16::from_le_bytes([d[0], d[1]]));
    let calls = clean_calls(sq, &outs);
    let ret = outs.first().and_then(|o| o.rets.first().copied()).unwrap_or(0);
    let reg_writes: Vec<Value> = outs
        .iter()
        .enumerate()
        .flat_map(|(k, o)| {
            reg_writes_json(o).into_iter().map(move |mut w| {
                w["call"] = k.into();
                w
            })
        })
        .collect();
    let mut args = Map::new();
    args.insert("polls".into(), cleans.max(1).into());
    args.insert("buf_len".into(), out_len.into());
    Ok(json!({
        "op": "clean_rq_elem",
        "name": format!("vd{n}_clean_rq_elem_{}ev", evs.len()),
        "vendor": ["ice_clean_rq_elem"],
        "inputs": {
            "ring": ring.json(),
            "hw": {"mac_type": "E810"},
            "port_info": {"lport": 0},
            "args": args,
            "arq_events": evs.iter().map(|e| event_json(e, armed, 4096)).collect::<Vec<_>>(),
        },
        "outputs": {
            "ret": ret,
            "ret_name": errno_name(ret),
            "calls": calls,
            "commands": [],
            "reg_writes": reg_writes,
        },
    }))
}

/// An ARQ descriptor as published: its first 24 bytes (the buffer address
/// masked out).
fn arq_desc(d: &[u8]) -> Value {
    let mut b = [0u8; 32];
    b[..24].copy_from_slice(&d[..24]);
    json!({"hex": hexs(&b), "mask": format!("{}{}", "ff".repeat(24), "00".repeat(8)),
           "addr": "arq_buffer"})
}

/// One `calls` entry per ice_clean_rq_elem: the event it returned and the
/// slot it re-armed, then the ring's indexes.
fn clean_calls(sq: usize, outs: &[lan::OpOut]) -> Vec<Value> {
    let mut calls = Vec::new();
    let mut ntc = 0u16;
    for o in outs {
        let ret = o.rets.first().copied().unwrap_or(0);
        let mut out = Map::new();
        if ret == 0
            && let (Some(d), Some(b), Some((ml, pend))) =
                (o.descs.first(), o.bufs.first(), o.ev.first())
        {
            out.insert("event.desc".into(), arq_desc(d));
            out.insert("event.msg_len".into(), (*ml).into());
            out.insert("event.msg_buf".into(), hexs(b).into());
            out.insert("pending".into(), (*pend).into());
            out.insert("cleaned_slot".into(), ntc.into());
            if let Some(r) = o.rings.get(sq + usize::from(ntc)) {
                out.insert("rearmed_desc".into(), arq_desc(r));
            }
        }
        out.insert("rq.next_to_clean".into(), o.state.rq_ntc.into());
        out.insert("rq.next_to_use".into(), o.state.rq_ntu.into());
        ntc = o.state.rq_ntc;
        calls.push(json!({"fn": "ice_clean_rq_elem", "ret": ret, "ret_name": errno_name(ret),
                          "outputs": out}));
    }
    calls
}

/// ice_init_all_ctrlq on a fresh function whose firmware answers the
/// first Get Version with `answer`; the published `init_all_ctrlq` case,
/// or `None` when 6.1 retried the start (its -EIO loop: the runner starts
/// once).
fn vendor_init_all(n: u64, ring: &Ring, answer: &Answer) -> Result<Option<Value>, String> {
    let c = LanCase {
        sq_entries: ring.sq_entries,
        rq_entries: ring.rq_entries,
        sq_buf: ring.sq_buf,
        rq_buf: 4096,
        drop_bal: 0,
        init_all: Some(vec![answer.clone()]),
        ops: vec![],
    };
    let o = lan::run_vendor(&c).pop().ok_or("no output")?;
    let ret = o.rets.first().copied().unwrap_or(0);
    if ret == -5 || o.cmds.len() != 1 {
        return Ok(None);
    }
    let mut out = Map::new();
    out.insert("sq_last_status".into(), o.state.last_status.into());
    ring_fields(&mut out, &o.state);
    if let Some((api, build)) = o.version {
        out.insert("fw_build".into(), format!("{build:#x}").into());
        for (k, v) in ["api_branch", "api_maj_ver", "api_min_ver", "api_patch"].iter().zip(api) {
            out.insert((*k).into(), v.into());
        }
    }
    let sq = usize::from(o.state.sq_count);
    let last = usize::from(o.state.rq_count).saturating_sub(1);
    if ret == 0 {
        for (k, at) in [("adminq.arq_desc[0]", sq), ("adminq.arq_desc[last]", sq + last)] {
            if let Some(d) = o.rings.get(at) {
                let mut b = [0u8; 32];
                b[..24].copy_from_slice(d);
                out.insert(k.into(), json!({"hex": hexs(&b),
                    "mask": format!("{}{}", "ff".repeat(24), "00".repeat(8)), "addr": "arq_buffer"}));
            }
        }
    }
    let ring = Ring { position: 0, ..*ring };
    let mut v = OneCall {
        op: "init_all_ctrlq",
        name: format!("vd{n}_init_all_ctrlq"),
        vendor_fn: "ice_init_all_ctrlq",
        ring,
        lport: 0,
        args: Map::new(),
        regs: &[],
        answers: std::slice::from_ref(answer),
        ret,
        out,
        o: &o,
    }
    .json();
    // a fresh function: no ring position
    if let Some(r) = v["inputs"]["ring"].as_object_mut() {
        r.remove("position");
        r.remove("arq_position");
    }
    Ok(Some(v))
}

/// ice_shutdown_ctrlq(ADMIN) on a live queue (6.1: Queue Shutdown with
/// `unloading` set, answered plainly, then the registers cleared); the
/// published `shutdown_all_ctrlq` case (the mailbox queue is not the
/// driver's: its registers and fields are left out).
fn vendor_shutdown(n: u64, ring: &Ring) -> Result<Value, String> {
    let o = run_at(ring, LanOp::Shutdown { dead: false })?;
    let mut out = Map::new();
    out.insert("sq_last_status".into(), o.state.last_status.into());
    ring_fields(&mut out, &o.state);
    let mut args = Map::new();
    args.insert("unloading".into(), 1.into());
    Ok(OneCall {
        op: "shutdown_all_ctrlq",
        name: format!("vd{n}_shutdown_pos{}", ring.position),
        vendor_fn: "ice_shutdown_ctrlq",
        ring: *ring,
        lport: 0,
        args,
        regs: &[],
        answers: &[],
        ret: 0,
        out,
        o: &o,
    }
    .json())
}

fn gen_ring(t: &mut Rng) -> Ring {
    let sq_entries = t.pick(&[192u16, 192, 8, 16, 64]);
    Ring {
        sq_entries,
        rq_entries: t.pick(&[192u16, 8]),
        sq_buf: t.pick(&[4096u16, 4096, 1024, 512]),
        position: match t.below(3) {
            0 => 0,
            _ => t.below(u64::from(sq_entries)) as u16,
        },
    }
}

/// The listed deviation the differential (`lan::run_lan`) classifies a
/// generated typed command under, for the kinds whose deviations depend on
/// the answer: `caps_fields_kept_in_32_bits`, and
/// `mac_read_entries_past_buffer` (ice_aq_manage_mac_read walks
/// `num_addr` entries past the buffer it handed over, the driver stops at
/// its end) or `mac_read_buffer_over_4096`. The runner's driver differs
/// there by design: such a case is left out and counted.
fn typed_deviation(
    ring: &Ring,
    cmd: Typed,
    answers: &[Answer],
    regs: &[(usize, u32)],
) -> Option<&'static str> {
    if !matches!(cmd, Typed::DevCaps { .. } | Typed::FuncCaps { .. } | Typed::MacRead { .. }) {
        return None;
    }
    let op = LanOp::Typed { cmd, answers: answers.to_vec(), regs: regs.to_vec() };
    match lan::run_lan(&lan_case(ring, vec![op])) {
        lan::LanOutcome::Deviation(id) => Some(id),
        _ => None,
    }
}

pub fn generate(seed: u64, cases: u64) -> Result<Written, String> {
    let mut r = Rng::new(seed);
    let mut out = Vec::new();
    for n in 0..cases {
        let s = gen_send(&mut r);
        out.push(vendor_send(n, &s)?);
    }
    let sends = out.len();
    let mut acc = Cases { out, ..Cases::default() };
    typed_cases(seed, cases, &mut acc)?;
    other_cases(seed, cases, &mut acc)?;
    Ok(lan_doc(seed, sends, acc))
}

/// The cases written, how many per published op, and the cases left out
/// per deviation.
#[derive(Default)]
struct Cases {
    out: Vec<Value>,
    typed: std::collections::BTreeMap<&'static str, usize>,
    left_out: std::collections::BTreeMap<&'static str, usize>,
}

/// The typed commands' cases (those the runner has an op for).
fn typed_cases(seed: u64, cases: u64, acc: &mut Cases) -> Result<(), String> {
    // the typed commands draw from their own stream: the send cases of a
    // seed stay what they were
    let mut t = Rng::new(seed ^ 0x7479_7065_645f_636d);
    for n in 0..cases {
        let (cmd, answers, regs) = loop {
            if let LanOp::Typed { cmd, answers, regs } = lan::gen_typed(&mut t)
                && typed_op(&cmd).is_some()
            {
                break (cmd, answers, regs);
            }
        };
        let ring = gen_ring(&mut t);
        if cmd == Typed::QuerySchedRes
            && answers
                .iter()
                .any(|a| a.buf.get(2..4).is_some_and(|l| u16::from_le_bytes([l[0], l[1]]) > 9))
        {
            // deviations.toml sched_layers_over_9: the driver refuses what
            // ice truncates to a u8 or reads past its answer for
            *acc.left_out.entry("sched_layers_over_9").or_default() += 1;
            continue;
        }
        if let Some(id) = typed_deviation(&ring, cmd, &answers, &regs) {
            *acc.left_out.entry(id).or_default() += 1;
            continue;
        }
        let c = vendor_typed(cases + n, &ring, cmd, &answers, &regs)?;
        *acc.typed.entry(typed_op(&cmd).map_or("?", |x| x.0)).or_default() += 1;
        acc.out.push(c);
    }
    Ok(())
}

/// ARQ events, shutdowns and checked starts.
fn other_cases(seed: u64, cases: u64, acc: &mut Cases) -> Result<(), String> {
    // ARQ events (their own stream too), then shutdowns
    let mut e = Rng::new(seed ^ 0x6172_715f_6576_7473);
    for n in 0..cases / 4 {
        let LanOp::Events { evs, cleans, out_len, .. } = lan::gen_events(&mut e, 4096) else {
            continue;
        };
        let ring = gen_ring(&mut e);
        acc.out.push(vendor_events(2 * cases + n, &ring, &evs, cleans, out_len)?);
        *acc.typed.entry("clean_rq_elem").or_default() += 1;
    }
    for n in 0..cases / 8 {
        let ring = gen_ring(&mut e);
        acc.out.push(vendor_shutdown(3 * cases + n, &ring)?);
        *acc.typed.entry("shutdown_all_ctrlq").or_default() += 1;
    }
    for n in 0..cases / 4 {
        let ring = gen_ring(&mut e);
        let answer = lan::gen_version(&mut e);
        match vendor_init_all(4 * cases + n, &ring, &answer)? {
            Some(c) => {
                acc.out.push(c);
                *acc.typed.entry("init_all_ctrlq").or_default() += 1;
            }
            // 6.1's ice_init_all_ctrlq restarts the queue on -EIO; the
            // runner (and the published set) start once
            None => *acc.left_out.entry("init_all_ctrlq_retried").or_default() += 1,
        }
    }
    Ok(())
}

/// The document: the cases, their counts and what was left out.
fn lan_doc(seed: u64, sends: usize, acc: Cases) -> Written {
    let count = acc.out.len();
    let mut counts = json!({"send_cmd": sends});
    for (k, v) in acc.typed {
        counts[k] = v.into();
    }
    let doc = json!({
        "generator": "tests/vendor-diff --write-vectors (vendor ice AQ code compiled unmodified)",
        "source": super::source(),
        "schema_version": 1,
        "meta": {
            "source_package": super::source(),
            "source_files": "drivers/net/ethernet/intel/ice/{ice_controlq.c, ice_common.c, ice_sched.c}",
            "method": "tests/vendor-diff/src/regen/lan.rs: one ice_aq_send_cmd or one typed \
                       command per case on the harness's scripted firmware (lan.rs), after \
                       `position` Get Version commands",
            "seed": h(seed, 16),
            "errno": {"0": "OK", "-2": "ENOENT", "-5": "EIO", "-12": "ENOMEM", "-16": "EBUSY",
                      "-22": "EINVAL", "-28": "ENOSPC", "-114": "EALREADY"},
            "published": false,
            "counts": counts,
            "left_out": acc.left_out,
        },
        "cases": acc.out,
        "count": count,
    });
    Written { doc, count }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).filter_map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()).collect()
}

/// Registers the firmware answers reads of: (offset, value).
type Regs = Vec<(usize, u32)>;

/// A published case's ring, the firmware's answers (from what it wrote
/// back, `outputs.commands[k].resp`) and the registers it reads, or why the
/// harness's firmware cannot stand in for the published one.
fn common_of(c: &Value) -> Result<(Ring, Vec<Answer>, Regs), String> {
    let i = &c["inputs"];
    let regs = common_regs(c)?;
    if i["hw"]["mac_type"].as_str().is_some_and(|m| m != "E810") {
        return Err("a non-E810 MAC type".into());
    }
    let n = |v: &Value| super::num(v).unwrap_or(0);
    let ring = &i["ring"];
    if n(&ring["arq_position"]) != 0 || n(&ring["rq_buf_size"]) != 4096 {
        return Err("an ARQ position or buffer size the harness session does not set".into());
    }
    let answers = c["outputs"]["commands"]
        .as_array()
        .into_iter()
        .flatten()
        .map(answer_of)
        .collect::<Result<Vec<_>, _>>()?;
    let ring = Ring {
        sq_entries: n(&ring["sq_entries"]) as u16,
        rq_entries: n(&ring["rq_entries"]) as u16,
        sq_buf: n(&ring["sq_buf_size"]) as u16,
        position: n(&ring["position"]) as u16,
    };
    Ok((ring, answers, regs))
}

/// The registers a published case sets, once its inputs are ones the
/// harness firmware can stand in for.
fn common_regs(c: &Value) -> Result<Regs, String> {
    let i = &c["inputs"];
    for k in ["state", "arq_events", "bar_fault", "vsi0", "vsi1"] {
        if i.get(k).is_some()
            && !(k == "arq_events" && c["op"] == "clean_rq_elem")
            && !(k == "state" && c["op"] == "discover_func_caps")
        {
            return Err(format!("inputs.{k}: the harness firmware has no equivalent yet"));
        }
    }
    let mut regs = Vec::new();
    if let Some(r) = i.get("regs") {
        if !matches!(c["op"].as_str(), Some("set_mac_cfg" | "discover_func_caps")) {
            return Err("inputs.regs: the harness firmware has no equivalent yet".into());
        }
        for (k, v) in r.as_object().into_iter().flatten() {
            let (Some(o), Some(v)) = (super::num(&Value::String(k.clone())), super::num(v)) else {
                return Err("a register that is not a number".into());
            };
            regs.push((o as usize, v as u32));
        }
    }
    Ok(regs)
}

/// The harness firmware's answer to one published command, from what the
/// published firmware wrote back (`resp`; none: it hung).
fn answer_of(k: &Value) -> Result<Answer, String> {
    let r = &k["resp"];
    if r.is_null() {
        return Ok(Answer { retval: 0, datalen: None, buf: vec![], params: None, hang: true });
    }
    let rd = unhex(r["desc"].as_str().unwrap_or(""));
    let sd = unhex(k["desc"]["hex"].as_str().unwrap_or(""));
    if rd.len() != 32 || sd.len() != 32 {
        return Err("a descriptor that is not 32 bytes".into());
    }
    let retval = u16::from_le_bytes([rd[6], rd[7]]);
    let posted = u16::from_le_bytes([sd[0], sd[1]]);
    let want_fl = posted | 0x0003 | if retval != 0 { 0x0004 } else { 0 };
    if u16::from_le_bytes([rd[0], rd[1]]) != want_fl
        || rd[2..4] != sd[2..4]
        || rd[8..16] != sd[8..16]
    {
        return Err("a firmware answer that rewrites flags, opcode or cookies (the harness firmware sets DD|CMP|ERR only)".into());
    }
    let indirect = posted & BUF != 0;
    let mut p = [0u8; 16];
    p.copy_from_slice(&rd[16..32]);
    if indirect {
        p[8..].copy_from_slice(&sd[24..32]);
    }
    let buf = match r.get("buf").filter(|b| b.is_object()) {
        Some(b) => {
            let mut x = unhex(b["hex"].as_str().unwrap_or(""));
            x.resize(super::num(&b["len"]).unwrap_or(0) as usize, 0);
            x
        }
        None => vec![],
    };
    Ok(Answer {
        retval,
        datalen: Some(u16::from_le_bytes([rd[4], rd[5]])),
        buf,
        params: Some(p),
        hang: false,
    })
}

/// A published `send_cmd` case as a [`SendCase`], or why not.
fn send_of(c: &Value) -> Result<SendCase, String> {
    let (ring, answers, _) = common_of(c)?;
    let n = |v: &Value| super::num(v).unwrap_or(0);
    let a = &c["inputs"]["args"];
    let size = n(&a["buf_size"]) as u16;
    let buf = if n(&a["null_buf"]) == 1 {
        None
    } else if size > 0 || a.get("buf").is_some() {
        let mut b = unhex(a["buf"].as_str().unwrap_or(""));
        b.resize(usize::from(size), 0);
        Some(b)
    } else {
        None
    };
    let mut params = [0u8; 16];
    for (d, x) in params.iter_mut().zip(unhex(a["params"].as_str().unwrap_or(""))) {
        *d = x;
    }
    Ok(SendCase {
        sq_entries: ring.sq_entries,
        rq_entries: ring.rq_entries,
        sq_buf: ring.sq_buf,
        position: ring.position,
        opcode: n(&a["opcode"]) as u16,
        flags_or: n(&a["flags_or"]) as u16,
        params,
        buf,
        size,
        answers,
    })
}

/// Whether every one of the published `args` is one of `ks`.
fn known_args(a: &Value, ks: &[&str]) -> Result<(), String> {
    match a.as_object().into_iter().flatten().find(|(k, _)| !ks.contains(&k.as_str())) {
        Some((k, v)) => Err(format!("args.{k} = {v}: not an argument of Linux 6.1's function")),
        None => Ok(()),
    }
}

/// A published typed case as the harness's command, or why not.
fn typed_of(c: &Value) -> Result<Typed, String> {
    let a = &c["inputs"]["args"];
    let arg = |k: &str| a.get(k).and_then(super::num);
    let lport = super::num(&c["inputs"]["port_info"]["lport"]).unwrap_or(0) as u8;
    let known = |ks: &[&str]| known_args(a, ks);
    Ok(match c["op"].as_str().unwrap_or("") {
        "clear_pf_cfg" => {
            known(&[])?;
            Typed::ClearPfCfg
        }
        "clear_pxe" => {
            known(&[])?;
            Typed::ClearPxe
        }
        "get_fw_ver" => {
            known(&[])?;
            Typed::GetVersion
        }
        "set_event_mask" => {
            known(&["port_num", "mask"])?;
            Typed::SetEventMask {
                lport: arg("port_num").unwrap_or(0) as u8,
                mask: arg("mask").unwrap_or(0) as u16,
            }
        }
        "restart_an" => {
            if arg("refclk").unwrap_or(0) != 0 {
                return Err("args.refclk: Linux 6.1 has no reference-clock argument".into());
            }
            known(&["ena_link", "refclk"])?;
            Typed::RestartAn { lport, ena: arg("ena_link") == Some(1) }
        }
        "set_mac_cfg" => {
            if arg("auto_drop").unwrap_or(0) != 0 {
                return Err("args.auto_drop: Linux 6.1 has no auto-drop argument".into());
            }
            known(&["max_frame_size", "auto_drop"])?;
            Typed::SetMacCfg { max_frame: arg("max_frame_size").unwrap_or(9728) as u16 }
        }
        "manage_mac_read" => {
            known(&["buf_size", "buf_entries"])?;
            let len = match (arg("buf_entries"), arg("buf_size")) {
                (Some(n), _) => n.saturating_mul(8),
                (None, Some(s)) => s,
                (None, None) => 16,
            };
            Typed::MacRead { buf_len: u16::try_from(len).map_err(|_| "a buffer past 64 KiB")? }
        }
        "get_link_info" => {
            known(&["ena_lse"])?;
            match arg("ena_lse") {
                Some(v) => Typed::LinkInfo { lport, ena_lse: v == 1 },
                None => return Err("no args.ena_lse: the harness always passes one".into()),
            }
        }
        "query_sched_res" => {
            known(&[])?;
            Typed::QuerySchedRes
        }
        "discover_dev_caps" => {
            known(&[])?;
            let pf = super::num(&c["inputs"]["hw"]["pf_id"]).unwrap_or(0);
            Typed::DevCaps { pf_id: u8::try_from(pf).map_err(|_| "a PF number past 8 bits")? }
        }
        "discover_func_caps" => {
            known(&[])?;
            let st = &c["inputs"]["state"];
            let g = |k: &str| super::num(&st[k]).unwrap_or(0) as u32;
            Typed::FuncCaps {
                valid_functions: g("dev_caps.valid_functions"),
                num_funcs: g("dev_caps.num_funcs"),
            }
        }
        op => return Err(format!("op {op}: not written by the harness yet")),
    })
}

/// What a case's outputs say, in a form both sides are compared in:
/// descriptors and buffers as bytes under their masks, register writes as
/// (offset, value).
fn comparable(c: &Value) -> Value {
    let n = |v: &Value| super::num(v).unwrap_or(0);
    let masked = |d: &Value| -> String {
        let b = unhex(d["hex"].as_str().unwrap_or(""));
        let m = d["mask"].as_str().map(unhex);
        b.iter()
            .enumerate()
            .map(|(i, x)| x & m.as_ref().map_or(0xff, |m| m.get(i).copied().unwrap_or(0xff)))
            .map(|x| format!("{x:02x}"))
            .collect()
    };
    let bytes = |b: &Value| -> String {
        let mut x = unhex(b["hex"].as_str().unwrap_or(""));
        x.resize(n(&b["len"]) as usize, 0);
        hexs(&x)
    };
    let o = &c["outputs"];
    let fields = |call: &Value| -> Map<String, Value> {
        call.as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                // descriptors as their bytes under the mask
                let v = if v.get("hex").is_some() { Value::String(masked(v)) } else { v.clone() };
                (k.clone(), v)
            })
            .collect()
    };
    let calls = o["calls"].as_array().cloned().unwrap_or_default();
    json!({
        "ret": o["ret"],
        "call": fields(&calls.first().cloned().unwrap_or(Value::Null)["outputs"]),
        // a multi-call case's further calls (clean_rq_elem polls)
        "rest": calls.iter().skip(1)
            .map(|c| json!({"ret": c["ret"], "call": fields(&c["outputs"])}))
            .collect::<Vec<_>>(),
        "commands": o["commands"].as_array().into_iter().flatten().map(|k| json!({
            "slot": k["slot"], "desc": masked(&k["desc"]),
            "buf": k.get("buf").filter(|b| b.is_object()).map_or(Value::Null, |b| Value::String(bytes(b))),
        })).collect::<Vec<_>>(),
        "reg_writes": o["reg_writes"].as_array().into_iter().flatten()
            .filter(|w| w["group"].as_str() != Some("mbx"))
            .map(|w| match w["value_is"].as_str() {
                // a ring address: which half, not the value
                Some(v) => json!([n(&w["offset"]), v.get(..4)]),
                None => json!([n(&w["offset"]), n(&w["value"])]),
            }).collect::<Vec<_>>(),
    })
}

/// One call's fields made comparable: the harness's extra fields and the
/// published ones no glue reports are dropped, and a failed call keeps
/// only what the harness reports for it (the runner's rule).
fn fit(g: &mut Value, w: &mut Value, ret: &Value) {
    if let (Some(gm), Some(wm)) = (g.as_object_mut(), w.as_object_mut()) {
        gm.retain(|k, _| wm.contains_key(k));
        for k in NOT_REPORTED {
            wm.remove(*k);
        }
        // the mailbox and sideband queues are not the driver's (the
        // runner skips them too)
        wm.retain(|k, _| !k.starts_with("mailboxq.") && !k.starts_with("sbq."));
        // the start's firmware version: lan.rs keeps the API version and
        // build of ice_init_all_ctrlq, not the four firmware bytes
        wm.retain(|k, _| {
            gm.contains_key(k)
                || !matches!(k.as_str(), "fw_branch" | "fw_maj_ver" | "fw_min_ver" | "fw_patch")
        });
        if super::num(ret) != Some(0) {
            wm.retain(|k, _| gm.contains_key(k));
        }
    }
}

/// A published `clean_rq_elem` case as the harness's events, polls and
/// buffer length, or why not.
fn events_of(c: &Value) -> Result<(Vec<lan::Ev>, u8, u16), String> {
    let a = &c["inputs"]["args"];
    let polls = a.get("polls").and_then(super::num).unwrap_or(1);
    let buf_len = a.get("buf_len").and_then(super::num).unwrap_or(4096);
    let (Ok(polls), Ok(buf_len)) = (u8::try_from(polls), u16::try_from(buf_len)) else {
        return Err("more polls or a larger buffer than the harness session takes".into());
    };
    let mut evs = Vec::new();
    for e in c["inputs"]["arq_events"].as_array().into_iter().flatten() {
        let g = |k: &str| e.get(k).and_then(super::num);
        let buf = unhex(e["buf"].as_str().unwrap_or(""));
        let retval = g("retval").unwrap_or(0) as u16;
        let err = match g("flags") {
            // the harness firmware keeps the slot's BUF|LB and sets DD|CMP
            Some(f) if f & !0x0004 == 0x1203 => f & 0x0004 != 0,
            Some(_) => return Err("event flags other than the armed BUF|LB, DD|CMP and ERR".into()),
            None => retval != 0,
        };
        let mut cp = [0u8; 16];
        for (i, k) in ["cookie_high", "cookie_low", "param0", "param1"].iter().enumerate() {
            cp[4 * i..4 * i + 4].copy_from_slice(&(g(k).unwrap_or(0) as u32).to_le_bytes());
        }
        evs.push(lan::Ev {
            opcode: g("opcode").unwrap_or(0) as u16,
            retval,
            datalen: g("datalen").map(|d| d as u16),
            buf,
            cookie_params: cp,
            err,
        });
    }
    Ok((evs, polls, buf_len))
}

/// Published call fields the glue (`shim/ice/glue.c`) does not report.
const NOT_REPORTED: &[&str] = &["link_copied", "phy.get_link_info", "layer_info"];

/// Fields the published call lists that the harness does not write are
/// compared; extra ones of the harness's are not.
fn only_recorded(g: &mut Value, w: &Value) {
    if let (Some(gc), Some(wc)) = (g["call"].as_object().cloned(), w["call"].as_object()) {
        g["call"] = Value::Object(gc.into_iter().filter(|(k, _)| wc.contains_key(k)).collect());
    }
}

/// Re-derives the published `send_cmd` cases (the other ops are typed
/// commands, events, start/shutdown and switch/VSI code the regenerator
/// does not write yet).
pub fn rederive(v: &Value) -> Rederived {
    let mut r = Rederived::default();
    for (n, c) in v["cases"].as_array().into_iter().flatten().enumerate() {
        let op = c["op"].as_str().unwrap_or("?");
        let name = format!("{op}/{}", c["name"].as_str().unwrap_or("?"));
        if op == "clean_rq_elem" || op == "shutdown_all_ctrlq" || op == "init_all_ctrlq" {
            rederive_ctrlq(&mut r, n as u64, op, &name, c);
        } else if op != "send_cmd" {
            rederive_typed(&mut r, n as u64, op, &name, c);
        } else {
            rederive_send(&mut r, n as u64, &name, c);
        }
    }
    r
}

/// A queue-level case (clean_rq_elem, shutdown_all_ctrlq, init_all_ctrlq)
/// `n`, named `name`, re-derived into `r`.
fn rederive_ctrlq(r: &mut Rederived, n: u64, op: &str, name: &str, c: &Value) {
    let got = match vendor_ctrlq(n, op, c) {
        Ok(Ok(g)) => g,
        Ok(Err(e)) => {
            r.differ.push(format!("{name}: vendor run failed: {e}"));
            return;
        }
        Err(why) => {
            r.skip(&why);
            return;
        }
    };
    let (mut g, mut w) = (comparable(&got), comparable(c));
    let gret = g["ret"].clone();
    fit(&mut g["call"], &mut w["call"], &gret);
    if let (Some(gr), Some(wr)) = (g["rest"].as_array_mut(), w["rest"].as_array_mut()) {
        for (a, b) in gr.iter_mut().zip(wr.iter_mut()) {
            let ret = a["ret"].clone();
            fit(&mut a["call"], &mut b["call"], &ret);
        }
    }
    r.compare(name, &g, &w, &[]);
}

/// The vendor's run of queue-level case `c` (`n`, its op `op`): its
/// record, or why it failed; outside, why the case is not expressible.
fn vendor_ctrlq(n: u64, op: &str, c: &Value) -> Result<Result<Value, String>, String> {
    let (ring, answers, _) = common_of(c)?;
    if op == "shutdown_all_ctrlq" {
        if super::num(&c["inputs"]["args"]["unloading"]) != Some(1) {
            return Err("args.unloading = 0: Linux 6.1's ice_shutdown_ctrlq always \
                        sends Queue Shutdown with unloading set"
                .to_string());
        }
        if answers.iter().any(|a| a.retval != 0 || a.hang) {
            return Err("a failing Queue Shutdown answer (the harness firmware \
                        answers it plainly)"
                .to_string());
        }
        Ok(vendor_shutdown(n, &ring))
    } else if op == "init_all_ctrlq" {
        if answers.len() != 1 {
            return Err("init_all_ctrlq: not one Get Version answer".into());
        }
        match vendor_init_all(n, &ring, &answers[0]) {
            Ok(Some(g)) => Ok(Ok(g)),
            Ok(None) => Err("an -EIO start Linux 6.1 retries (the runner starts once)".into()),
            Err(e) => Ok(Err(e)),
        }
    } else {
        let (evs, polls, buf_len) = events_of(c)?;
        Ok(vendor_events(n, &ring, &evs, polls, buf_len))
    }
}

/// A typed-command case `n` (op `op`), named `name`, re-derived into `r`.
fn rederive_typed(r: &mut Rederived, n: u64, op: &str, name: &str, c: &Value) {
    let t = typed_of(c).and_then(|t| common_of(c).map(|x| (t, x)));
    match t {
        Ok((cmd, (ring, answers, regs))) => match vendor_typed(n, &ring, cmd, &answers, &regs) {
            Ok(got) => {
                let (g, w) = typed_comparable(op, &got, c);
                r.compare(name, &g, &w, &[]);
            }
            Err(e) => r.differ.push(format!("{name}: vendor run failed: {e}")),
        },
        Err(why) => r.skip(&why),
    }
}

/// The vendor's record `got` of typed case `c` (op `op`) and the
/// published one, each cut to what both report.
fn typed_comparable(op: &str, got: &Value, c: &Value) -> (Value, Value) {
    let (mut g, mut w) = (comparable(got), comparable(c));
    only_recorded(&mut g, &w);
    if op.starts_with("discover_")
        && let (Some(m), Some(gc)) = (w["call"].as_object_mut(), g["call"].as_object())
    {
        // the glue reports 20 of ice's capability
        // fields (lan.rs CAP_NAMES): those are compared
        m.retain(|k, _| gc.contains_key(k));
    }
    if let Some(m) = w["call"].as_object_mut() {
        // the published shim's bookkeeping
        // (`link_copied`, `phy.get_link_info`) and
        // the raw layer entries (`layer_info`): the
        // glue reports none of them
        for k in NOT_REPORTED {
            m.remove(*k);
        }
        // a max_children entry ice left alone: the
        // published shim's 0xEEEE pre-fill, which
        // the glue does not report
        let gc = g["call"].clone();
        m.retain(|k, v| {
            !(k.starts_with("max_children[")
                && gc.get(k).is_none()
                && super::num(v) == Some(0xeeee))
        });
    }
    if g["ret"] != 0 {
        // a failed call returns only its error: what
        // else the published set records is the state
        // the vendor left (the runner's rule too)
        let keep = g["call"].clone();
        if let Some(m) = w["call"].as_object_mut() {
            m.retain(|k, _| keep.get(k).is_some());
        }
    }
    (g, w)
}

/// A send_cmd case `n`, named `name`, re-derived into `r`.
fn rederive_send(r: &mut Rederived, n: u64, name: &str, c: &Value) {
    let s = match send_of(c) {
        Ok(s) => s,
        Err(why) => {
            r.skip(&why);
            return;
        }
    };
    match vendor_send(n, &s) {
        Ok(got) => {
            let (mut g, w) = (comparable(&got), comparable(c));
            only_recorded(&mut g, &w);
            let mut w = w;
            let zeros = |v: &Value| v.as_str().is_some_and(|x| x.bytes().all(|b| b == b'0'));
            if s.buf.is_none()
                && zeros(&w["call"]["buf_after"])
                && g["call"].get("buf_after").is_none()
            {
                // a NULL caller buffer has no contents: the published
                // set records `buf_size` zero bytes for it
                if let Some(m) = w["call"].as_object_mut() {
                    m.remove("buf_after");
                }
                // nor does the harness record the caller's descriptor
                // when nothing was handed back (lan.rs `written_back`)
                if g["ret"] != 0
                    && g["call"].get("desc_after").is_none()
                    && let Some(m) = w["call"].as_object_mut()
                {
                    m.remove("desc_after");
                }
                if super::first_diff(&g, &w, &[], "").is_none() {
                    r.known(
                        "a NULL caller buffer refused before posting: the published set \
                         records buf_size zero bytes as buf_after and the untouched caller \
                         descriptor as desc_after; the vendor hands back neither (lan.rs \
                         records a descriptor only when one came back)",
                    );
                    return;
                }
            }
            r.compare(name, &g, &w, &[]);
        }
        Err(e) => r.differ.push(format!("{name}: vendor run failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RING: Ring = Ring { sq_entries: 16, rq_entries: 8, sq_buf: 4096, position: 3 };

    /// An all-0xff Get Version answer is a version (ice_aq_get_fw_ver
    /// stores it on success), not "nothing stored".
    #[test]
    fn an_all_ff_version_is_written() {
        let _serial = crate::serial();
        let a = Answer { params: Some([0xff; 16]), ..Answer::ok() };
        let c = vendor_typed(0, &RING, Typed::GetVersion, &[a], &[]).expect("runs");
        let o = &c["outputs"]["calls"][0]["outputs"];
        assert_eq!(o["fw_build"], "0xffffffff", "{o}");
        assert_eq!(o["api_branch"], 255, "{o}");
        assert_eq!(o["fw_patch"], 255, "{o}");
    }

    /// Issue #30 (seed 77, `vd9486_manage_mac_read_pos0`): firmware
    /// counts 3 addresses in an 8-byte buffer whose one entry is WoL; ice
    /// reads past the buffer (zeros: a LAN address of zeros), the driver
    /// does not. A listed deviation: the writer leaves it out.
    #[test]
    fn a_mac_read_counting_past_its_buffer_is_left_out() {
        let _serial = crate::serial();
        let ring = Ring { sq_entries: 192, rq_entries: 192, sq_buf: 1024, position: 0 };
        let mut p = [0u8; 16];
        p[0] = 0x18; // flags: ICE_AQC_MAN_MAC_LAN_ADDR_VALID and more
        p[4] = 3; // num_addr: 24 bytes, past the 8-byte buffer
        let buf = vec![0xd0, 0x01, 0xf2, 0x95, 0x85, 0x96, 0xba, 0xee]; // port 0xd0, WoL
        let a = Answer { params: Some(p), buf, ..Answer::ok() };
        let cmd = Typed::MacRead { buf_len: 8 };
        assert_eq!(
            typed_deviation(&ring, cmd, std::slice::from_ref(&a), &[]),
            Some("mac_read_entries_past_buffer")
        );
        // the same answer counting only its one entry: both agree, written
        p[4] = 1;
        let a = Answer { params: Some(p), ..a };
        assert_eq!(typed_deviation(&ring, cmd, &[a], &[]), None);
    }

    /// A Manage MAC Read that succeeds with no address leaves the MAC
    /// alone: written as the 0xee pre-fill the runner reports for it, not as
    /// an address of zeros.
    #[test]
    fn an_untouched_mac_is_the_prefill() {
        let _serial = crate::serial();
        let mut p = [0u8; 16];
        p[0] = 1 << 4; // ICE_AQC_MAN_MAC_LAN_ADDR_VALID
        p[4] = 0; // num_addr
        let a = Answer { params: Some(p), buf: vec![0; 8], ..Answer::ok() };
        let c = vendor_typed(0, &RING, Typed::MacRead { buf_len: 16 }, &[a], &[]).expect("runs");
        let o = &c["outputs"]["calls"][0]["outputs"];
        assert_eq!(c["outputs"]["ret"], 0, "{c}");
        assert_eq!(o["port_info.mac.lan_addr"], "eeeeeeeeeeee", "{o}");
        assert_eq!(o["port_info.mac.perm_addr"], "eeeeeeeeeeee", "{o}");
    }
}
