//! Runner for `lan-aq-vectors.json`: the driver's admin-queue engine and
//! typed commands (`irdma::ice`) against the vendor's recorded descriptors,
//! buffers, register writes and parsed answers (tests/conformance/README.md,
//! "LAN admin-queue vectors").
//!
//! Per case: a recording BAR plays a *replay firmware*. The AQ is brought
//! up with the driver's `AdminQueue::start` and moved to `ring.position` by
//! Get Version round trips the BAR answers itself (not compared). Then the
//! k-th descriptor the driver posts is answered with `commands[k].resp`
//! (bytes 0–23 of the descriptor, the response buffer into the slot's
//! buffer, head advanced; `resp: null` leaves the head so the driver times
//! out). Each `calls[]` entry is mapped to the driver call that does the
//! same job, and the check is: every descriptor under its mask, indirect
//! buffers as `compare` says, no missing or extra command, every register
//! write in order (mailbox writes are absent: the driver has no mailbox),
//! every call's return (mapped to Linux errno by `linux_errno`), and the
//! output fields under the name mapping in [`Out`].
//!
//! Name mapping notes: `mailboxq.*` / `sbq.*` ring counts belong to the
//! mailbox the driver does not have (same rule as its register writes) and
//! are not compared; version fields are compared when the driver read a
//! version; `max_children[i]` the vendor left at its 0xEEEE sentinel is the
//! driver's `None`; `link_copied` is "the call returned link data".

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

use irdma::ice::caps::{CommonCaps, DevCaps, FuncCaps};
use irdma::ice::cmd::{CapsKind, LinkStatus, PfVsiParams, PortInfo, VsiContext, read_pause_cfg};
use irdma::ice::sched::{MAX_NODES, Node, Owner, RdmaBranch, Tree};
use irdma::ice::{AdminQueue, AqConfig, AqTimeouts, Desc, regs};
use irdma_hal::Bar;
use irdma_testkit::FakeHal;
use serde_json::{Value, json};

use super::{Outcome, Tally, num};

/// Ops the driver does not have by design, with the reason (README rules).
const SKIP_OPS: &[(&str, &str)] =
    &[("sff_eeprom", "SFF EEPROM access is not used by the RDMA bring-up")];

/// Ops the runner cannot yet drive (driver code missing): counted as FAILED.
const NOT_IMPLEMENTED: &[&str] = &[];

/// Ops driven call by call from the case's `vendor` list.
const SEQUENCED: &[&str] = &[
    "sched_init_port",
    "sched_add_nodes",
    "cfg_vsi_rdma",
    "ena_rdma_qset",
    "dis_rdma_qset",
    "add_mac_fltr",
];

/// Largest buffer an argument may ask the runner to allocate (the driver
/// refuses anything over 4 KiB; this only keeps arbitrary JSON from the fuzz
/// target from exhausting memory).
const MAX_ARG_BUF: usize = 1 << 16;

// ------------------------------------------------------------------ JSON

fn hexbytes(s: &str) -> Vec<u8> {
    (0..s.len() / 2).filter_map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()).collect()
}

fn hexstr(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn arg(case: &Value, k: &str) -> Option<u64> {
    num(&case["inputs"]["args"][k])
}

/// Whether two output values agree: numbers numerically (ints, "0x…",
/// decimal strings), everything else as lower-case strings.
fn same(a: &Value, b: &Value) -> bool {
    if let (Some(x), Some(y)) = (num(a), num(b))
        && !(a.is_string() && b.is_string())
    {
        return x == y;
    }
    match (a, b) {
        (Value::String(x), Value::String(y)) => {
            if let (Some(p), Some(q)) = (num(a), num(b))
                && x.starts_with("0x")
            {
                return p == q;
            }
            x.eq_ignore_ascii_case(y)
        }
        _ => a == b,
    }
}

/// Compares `got` with `want` under a per-byte hex `mask` (missing = all
/// compared); `want` shorter than `got` means zeros follow.
fn cmp_bytes(what: &str, got: &[u8], want_hex: &str, mask_hex: Option<&str>) -> Result<(), String> {
    let want = hexbytes(want_hex);
    let mask = mask_hex.map(hexbytes);
    for (i, g) in got.iter().enumerate() {
        let w = want.get(i).copied().unwrap_or(0);
        let m = mask.as_ref().map_or(0xff, |m| m.get(i).copied().unwrap_or(0xff));
        if (g ^ w) & m != 0 {
            return Err(format!("{what} byte {i}: got {g:02x}, want {w:02x} (mask {m:02x})"));
        }
    }
    Ok(())
}

// ------------------------------------------------------- recording BAR

#[derive(Default)]
struct St {
    regs: HashMap<usize, u32>,
    log: Vec<(usize, u32)>,
    /// Replay answers (`commands[k].resp`); `None` = answer everything OK.
    replay: Option<Vec<Value>>,
    /// Commands posted in replay mode: (descriptor, buffer).
    posted: Vec<([u8; 32], Vec<u8>)>,
    drop_atqbal: bool,
    /// A command never answered: later tails are not processed either.
    hung: bool,
    /// Writes after the case's calls (the queue's drop) are not recorded.
    frozen: bool,
    /// Ring geometry the driver was configured with: (ATQ entries, ATQ
    /// buffer bytes, ARQ entries, ARQ buffer bytes). The fake firmware never
    /// walks or writes past these, whatever the case's registers or
    /// answers say (the fuzz target feeds this runner arbitrary JSON).
    geom: (u32, usize, u32, usize),
    /// Bus addresses of the driver's rings, taken before the queue is
    /// dropped.
    rings: Vec<u64>,
}

struct RecBar(RefCell<St>);

fn read_bus(pa: u64, n: usize) -> Vec<u8> {
    // SAFETY: FakeHal's bus addresses are host addresses of live DMA
    // allocations owned by the AdminQueue the caller holds; `n` bytes stay
    // inside the ring slot or slot buffer the descriptor names.
    unsafe { std::slice::from_raw_parts(pa as *const u8, n) }.to_vec()
}

fn write_bus(pa: u64, b: &[u8]) {
    // SAFETY: as in `read_bus`; the firmware writes a slot of the ring or
    // the slot's buffer, which is at least `b.len()` bytes (the vectors'
    // response buffers fit the ring's buffer size).
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), pa as *mut u8, b.len()) }
}

impl St {
    fn reg(&self, off: usize) -> u32 {
        self.regs.get(&off).copied().unwrap_or(0)
    }

    fn ring(&self, bal: usize, bah: usize) -> u64 {
        u64::from(self.reg(bal)) | (u64::from(self.reg(bah)) << 32)
    }

    /// Firmware side of an ATQT write.
    fn run_atq(&mut self, tail: u32) {
        let ring = self.ring(regs::PF_FW_ATQBAL, regs::PF_FW_ATQBAH);
        let n = self.geom.0;
        if n == 0 || ring == 0 || tail >= n {
            return;
        }
        let mut head = self.reg(regs::PF_FW_ATQH);
        if head >= n {
            return;
        }
        while head != tail && !self.hung {
            let slot = ring + u64::from(head) * 32;
            let d: [u8; 32] = read_bus(slot, 32).try_into().unwrap_or([0; 32]);
            let dl = u16::from_le_bytes([d[4], d[5]]) as usize;
            let fl = u16::from_le_bytes([d[0], d[1]]);
            let bpa = (u64::from(u32::from_le_bytes([d[24], d[25], d[26], d[27]])) << 32)
                | u64::from(u32::from_le_bytes([d[28], d[29], d[30], d[31]]));
            let dl = dl.min(self.geom.1);
            let buf = if fl & 0x1000 != 0 && bpa != 0 { read_bus(bpa, dl) } else { Vec::new() };
            match &self.replay {
                None => {
                    let mut r = d;
                    r[0] |= 0x03;
                    r[6] = 0;
                    r[7] = 0;
                    write_bus(slot, &r);
                }
                Some(answers) => {
                    let k = self.posted.len();
                    self.posted.push((d, buf));
                    match answers.get(k) {
                        Some(Value::Object(resp)) => {
                            let rd =
                                hexbytes(resp.get("desc").and_then(Value::as_str).unwrap_or(""));
                            // bytes 24–31 are the buffer address on an
                            // indirect command (they stay as the driver
                            // wrote them) and parameters on a direct one
                            let keep = if fl & 0x1000 != 0 { 24 } else { 32 };
                            if let Some(first) = rd.get(..keep) {
                                write_bus(slot, first);
                            }
                            if let Some(b) = resp.get("buf").filter(|b| b.is_object()) {
                                let len = (num(&b["len"]).unwrap_or(0) as usize).min(self.geom.1);
                                let mut bytes = hexbytes(b["hex"].as_str().unwrap_or(""));
                                bytes.resize(len, 0);
                                if bpa != 0 {
                                    write_bus(bpa, &bytes);
                                }
                            }
                        }
                        _ => {
                            // null (never completes) or an extra command
                            // the case does not have: no answer
                            self.hung = true;
                            return;
                        }
                    }
                }
            }
            head = (head + 1) % n;
            self.regs.insert(regs::PF_FW_ATQH, head);
        }
    }
}

impl Bar for RecBar {
    fn read32(&self, off: usize) -> u32 {
        self.0.borrow().reg(off)
    }
    fn write32(&self, off: usize, v: u32) {
        let mut s = self.0.borrow_mut();
        if s.frozen {
            return;
        }
        s.log.push((off, v));
        if off == regs::PF_FW_ATQBAL && s.drop_atqbal {
            return;
        }
        s.regs.insert(off, v);
        if off == regs::PF_FW_ATQT && s.reg(regs::PF_FW_ATQLEN) & regs::LEN_ENABLE != 0 {
            s.run_atq(v);
        }
    }
}

impl RecBar {
    fn new(case: &Value) -> RecBar {
        let mut st = St::default();
        if let Some(r) = case["inputs"]["regs"].as_object() {
            for (k, v) in r {
                if let (Some(o), Some(v)) = (num(&Value::String(k.clone())), num(v)) {
                    st.regs.insert(o as usize, v as u32);
                }
            }
        }
        st.drop_atqbal = case["inputs"].get("bar_fault").is_some();
        let c = ring_cfg(case);
        st.geom = (
            u32::from(c.sq_entries),
            usize::from(c.sq_buf_size),
            u32::from(c.rq_entries),
            usize::from(c.rq_buf_size),
        );
        RecBar(RefCell::new(st))
    }

    /// Switches to replay mode: the log restarts, answers come from the case.
    fn replay(&self, case: &Value) {
        let answers: Vec<Value> = case["outputs"]["commands"]
            .as_array()
            .map(|a| a.iter().map(|c| c["resp"].clone()).collect())
            .unwrap_or_default();
        let mut s = self.0.borrow_mut();
        s.log.clear();
        s.replay = Some(answers);
    }

    /// Posts the case's ARQ events from `arq_position` on.
    fn post_events(&self, case: &Value, arq_position: u16) {
        let Some(evs) = case["inputs"]["arq_events"].as_array() else { return };
        let mut s = self.0.borrow_mut();
        let ring = s.ring(regs::PF_FW_ARQBAL, regs::PF_FW_ARQBAH);
        let n = s.geom.2;
        if ring == 0 || n == 0 {
            return;
        }
        for (i, e) in evs.iter().enumerate().take(n as usize) {
            let slot_i = (u32::from(arq_position) + i as u32) % n;
            let slot = ring + u64::from(slot_i) * 32;
            let mut d: [u8; 32] = read_bus(slot, 32).try_into().unwrap_or([0; 32]);
            let mut buf = hexbytes(e["buf"].as_str().unwrap_or(""));
            buf.truncate(s.geom.3);
            let bpa = (u64::from(u32::from_le_bytes([d[24], d[25], d[26], d[27]])) << 32)
                | u64::from(u32::from_le_bytes([d[28], d[29], d[30], d[31]]));
            if !buf.is_empty() {
                write_bus(bpa, &buf);
            }
            let retval = num(&e["retval"]).unwrap_or(0) as u16;
            let pre = u16::from_le_bytes([d[0], d[1]]);
            let fl = match num(&e["flags"]) {
                Some(f) => f as u16,
                None => pre | 0x3 | if retval != 0 { 0x4 } else { 0 },
            };
            d[0..2].copy_from_slice(&fl.to_le_bytes());
            d[2..4].copy_from_slice(&(num(&e["opcode"]).unwrap_or(0) as u16).to_le_bytes());
            let dl = num(&e["datalen"]).unwrap_or(buf.len() as u64) as u16;
            d[4..6].copy_from_slice(&dl.to_le_bytes());
            d[6..8].copy_from_slice(&retval.to_le_bytes());
            d[8..12].copy_from_slice(&(num(&e["cookie_high"]).unwrap_or(0) as u32).to_le_bytes());
            d[12..16].copy_from_slice(&(num(&e["cookie_low"]).unwrap_or(0) as u32).to_le_bytes());
            d[16..20].copy_from_slice(&(num(&e["param0"]).unwrap_or(0) as u32).to_le_bytes());
            d[20..24].copy_from_slice(&(num(&e["param1"]).unwrap_or(0) as u32).to_le_bytes());
            write_bus(slot, &d);
        }
        let h = (u32::from(arq_position) + evs.len().min(n as usize) as u32) % n;
        s.regs.insert(regs::PF_FW_ARQH, h);
    }
}

type Aq<'a> = AdminQueue<FakeHal, &'a RecBar>;

fn ring_cfg(case: &Value) -> AqConfig {
    let r = &case["inputs"]["ring"];
    let g = |k: &str, d: u64| num(&r[k]).unwrap_or(d).min(u64::from(u16::MAX)) as u16;
    AqConfig {
        sq_entries: g("sq_entries", 192),
        rq_entries: g("rq_entries", 192),
        sq_buf_size: g("sq_buf_size", 4096),
        rq_buf_size: g("rq_buf_size", 4096),
        // Time is real here; a shorter command timeout keeps `resp: null`
        // cases quick (the README: elapsed time need not match).
        timeouts: AqTimeouts {
            command: Duration::from_millis(50),
            busy_delay: Duration::from_millis(10),
            busy_sends: 3,
        },
    }
}

/// Brings the AQ up and to the case's ring position, then applies `state`.
fn prepare<'a>(bar: &'a RecBar, case: &Value) -> Result<Aq<'a>, String> {
    let cfg = ring_cfg(case);
    let mut aq =
        AdminQueue::<FakeHal, _>::start(bar, &cfg).map_err(|e| format!("AQ start: {e}"))?;
    let r = &case["inputs"]["ring"];
    let pos = num(&r["position"]).unwrap_or(0);
    if pos >= u64::from(cfg.sq_entries)
        || num(&r["arq_position"]).unwrap_or(0) >= u64::from(cfg.rq_entries)
    {
        return Err("ring position beyond the ring".into());
    }
    for _ in 0..pos {
        aq.get_version().map_err(|e| format!("positioning: {e}"))?;
    }
    let arq_pos = num(&r["arq_position"]).unwrap_or(0) as u16;
    if arq_pos > 0 {
        // consume arq_pos dummy events so next_to_clean is there
        let n = cfg.rq_entries.max(1);
        for i in 0..arq_pos {
            bar.0.borrow_mut().regs.insert(regs::PF_FW_ARQH, u32::from((i + 1) % n));
            let mut b = [0u8; 16];
            aq.next_event(&mut b).map_err(|e| format!("ARQ positioning: {e}"))?;
        }
    }
    let st = &case["inputs"]["state"];
    let mut s = bar.0.borrow_mut();
    if let Some(h) = num(&st["atqh"]) {
        s.regs.insert(regs::PF_FW_ATQH, h as u32);
    }
    if let Some(l) = num(&st["atqlen"]) {
        s.regs.insert(regs::PF_FW_ATQLEN, l as u32);
    }
    if num(&st["atq_crit"]) == Some(1) {
        let v = s.reg(regs::PF_FW_ATQLEN);
        s.regs.insert(regs::PF_FW_ATQLEN, v | regs::LEN_CRIT);
    }
    if num(&st["arq_crit"]) == Some(1) {
        let v = s.reg(regs::PF_FW_ARQLEN);
        s.regs.insert(regs::PF_FW_ARQLEN, v | regs::LEN_CRIT);
    }
    drop(s);
    aq.set_reset_ongoing(num(&st["reset_ongoing"]).is_some_and(|v| v != 0));
    bar.post_events(case, arq_pos);
    Ok(aq)
}

/// One call's result as the runner compares it.
struct Out {
    ret: i64,
    fields: serde_json::Map<String, Value>,
}

impl Out {
    fn new(ret: i64) -> Out {
        Out { ret, fields: serde_json::Map::new() }
    }
    fn set(&mut self, k: &str, v: Value) {
        self.fields.insert(k.to_string(), v);
    }
}

fn ring_fields(o: &mut Out, aq: &Aq<'_>) {
    let (sc, rc) = aq.counts();
    let (su, sn) = aq.sq_state();
    let (ru, rn) = aq.rq_state();
    o.set("adminq.sq.count", json!(sc));
    o.set("adminq.rq.count", json!(rc));
    o.set("adminq.sq.next_to_use", json!(su));
    o.set("adminq.sq.next_to_clean", json!(sn));
    o.set("adminq.rq.next_to_use", json!(ru));
    o.set("adminq.rq.next_to_clean", json!(rn));
    o.set("sq_last_status", json!(aq.last_status()));
}

/// `AdminQueue::init_check`'s errno, and the version it read (also when
/// the check refused that version).
fn init_check(aq: &mut Aq<'_>) -> Out {
    let r = aq.init_check();
    let mut o = Out::new(match &r {
        Ok(_) => 0,
        Err((e, _)) => i64::from(e.linux_errno()),
    });
    if let Ok(v) | Err((_, Some(v))) = &r {
        version_fields(&mut o, v);
    }
    o
}

fn version_fields(o: &mut Out, v: &irdma::ice::cmd::Version) {
    o.set("fw_branch", json!(v.fw[0]));
    o.set("fw_maj_ver", json!(v.fw[1]));
    o.set("fw_min_ver", json!(v.fw[2]));
    o.set("fw_patch", json!(v.fw[3]));
    o.set("fw_build", json!(format!("{:#x}", v.fw_build)));
    o.set("api_branch", json!(v.api[0]));
    o.set("api_maj_ver", json!(v.api[1]));
    o.set("api_min_ver", json!(v.api[2]));
    o.set("api_patch", json!(v.api[3]));
}

fn errno<E: Into<irdma::ice::cmd::CmdError>>(r: Result<(), E>) -> i64 {
    match r {
        Ok(()) => 0,
        Err(e) => i64::from(e.into().linux_errno()),
    }
}

fn common_fields(o: &mut Out, prefix: &str, c: &CommonCaps) {
    let mut set = |k: &str, v: Value| o.set(&format!("{prefix}.common_cap.{k}"), v);
    let b = |x: bool| json!(u8::from(x));
    set("wr_csr_prot", json!(c.wr_csr_prot));
    set("switching_mode", json!(c.switching_mode));
    set("mgmt_mode", json!(c.mgmt_mode));
    set("mgmt_protocols_mctp", json!(c.mgmt_protocols_mctp));
    set("os2bmc", json!(c.os2bmc));
    set("valid_functions", json!(c.valid_functions));
    set("active_tc_bitmap", json!(c.active_tc_bitmap));
    set("maxtc", json!(c.maxtc));
    set("rss_table_size", json!(c.rss_table_size));
    set("rss_table_entry_width", json!(c.rss_table_entry_width));
    set("num_rxq", json!(c.num_rxq));
    set("rxq_first_id", json!(c.rxq_first_id));
    set("num_txq", json!(c.num_txq));
    set("txq_first_id", json!(c.txq_first_id));
    set("num_msix_vectors", json!(c.num_msix_vectors));
    set("msix_vector_first_id", json!(c.msix_vector_first_id));
    set("max_mtu", json!(c.max_mtu));
    set("num_wol_proxy_fltr", json!(c.num_wol_proxy_fltr));
    set("wol_proxy_vsi_seid", json!(c.wol_proxy_vsi_seid));
    set("led_pin_num", json!(c.led_pin_num));
    set("sdp_pin_num", json!(c.sdp_pin_num));
    for (i, l) in c.led.iter().enumerate() {
        set(&format!("led[{i}]"), b(*l));
    }
    for (i, l) in c.sdp.iter().enumerate() {
        set(&format!("sdp[{i}]"), b(*l));
    }
    for (k, v) in [
        ("sr_iov_1_1", c.sr_iov_1_1),
        ("vmdq", c.vmdq),
        ("evb_802_1_qbg", c.evb_802_1_qbg),
        ("evb_802_1_qbh", c.evb_802_1_qbh),
        ("dcb", c.dcb),
        ("iscsi", c.iscsi),
        ("ieee_1588", c.ieee_1588),
        ("mgmt_cem", c.mgmt_cem),
        ("iwarp", c.iwarp),
        ("roce_lag", c.roce_lag),
        ("sriov_lag", c.sriov_lag),
        ("sriov_aa_lag", c.sriov_aa_lag),
        ("apm_wol_support", c.apm_wol_support),
        ("acpi_prog_mthd", c.acpi_prog_mthd),
        ("proxy_support", c.proxy_support),
        ("nvm_update_pending_nvm", c.nvm_update_pending_nvm),
        ("nvm_update_pending_orom", c.nvm_update_pending_orom),
        ("nvm_update_pending_netlist", c.nvm_update_pending_netlist),
        ("sec_rev_disabled", c.sec_rev_disabled),
        ("update_disabled", c.update_disabled),
        ("nvm_unified_update", c.nvm_unified_update),
        ("netlist_auth", c.netlist_auth),
        ("pcie_reset_avoidance", c.pcie_reset_avoidance),
        ("reset_restrict_support", c.reset_restrict_support),
        ("tx_sched_topo_comp_mode_en", c.tx_sched_topo_comp_mode_en),
        ("dyn_flattening_en", c.dyn_flattening_en),
        ("orom_recovery_update", c.orom_recovery_update),
        ("next_cluster_id_support", c.next_cluster_id_support),
    ] {
        set(k, b(v));
    }
    for i in 0..3 {
        set(&format!("nvm_word_address[{i}]"), json!(c.nvm_word_address[i]));
        set(&format!("nvm_value[{i}]"), json!(c.nvm_value[i]));
    }
    set("orom_ver", json!(c.orom_ver));
    set("base_release_ver_major", json!(c.base_release_ver_major));
    set("base_release_ver_type", json!(c.base_release_ver_type));
    set("base_release_ver_iana", json!(c.base_release_ver_iana));
    for i in 0..4 {
        set(&format!("ext_topo_dev_img_ver_high[{i}]"), json!(c.ext_topo_dev_img_ver_high[i]));
        set(&format!("ext_topo_dev_img_ver_low[{i}]"), json!(c.ext_topo_dev_img_ver_low[i]));
        set(&format!("ext_topo_dev_img_part_num[{i}]"), json!(c.ext_topo_dev_img_part_num[i]));
        set(&format!("ext_topo_dev_img_load_en[{i}]"), b(c.ext_topo_dev_img_load_en[i]));
        set(&format!("ext_topo_dev_img_prog_en[{i}]"), b(c.ext_topo_dev_img_prog_en[i]));
        set(&format!("ext_topo_dev_img_ver_schema[{i}]"), b(c.ext_topo_dev_img_ver_schema[i]));
    }
}

fn dev_caps_fields(o: &mut Out, d: &DevCaps) {
    common_fields(o, "dev_caps", &d.common);
    let b = |x: bool| json!(u8::from(x));
    let t = &d.ts_dev_info;
    for (k, v) in [
        ("num_vfs_exposed", json!(d.num_vfs_exposed)),
        ("num_vsi_allocd_to_host", json!(d.num_vsi_allocd_to_host)),
        ("num_flow_director_fltr", json!(d.num_flow_director_fltr)),
        ("ts_dev_info.tmr_own_map", json!(t.tmr_own_map)),
        ("ts_dev_info.tmr0_owner", json!(t.tmr0_owner)),
        ("ts_dev_info.tmr1_owner", json!(t.tmr1_owner)),
        ("ts_dev_info.tmr0_owned", b(t.tmr0_owned)),
        ("ts_dev_info.tmr1_owned", b(t.tmr1_owned)),
        ("ts_dev_info.ena", b(t.ena)),
        ("ts_dev_info.tmr0_ena", b(t.tmr0_ena)),
        ("ts_dev_info.tmr1_ena", b(t.tmr1_ena)),
        ("ts_dev_info.ts_ll_read", b(t.ts_ll_read)),
        ("ts_dev_info.ts_ll_int_read", b(t.ts_ll_int_read)),
        ("ts_dev_info.ll_phy_tmr_update", b(t.ll_phy_tmr_update)),
        ("num_funcs", json!(d.num_funcs)),
        ("nac_topo.mode", json!(d.nac_topo_mode)),
        ("nac_topo.id", json!(d.nac_topo_id)),
        ("supported_sensors", json!(d.supported_sensors)),
    ] {
        o.set(&format!("dev_caps.{k}"), v);
    }
    o.set("logical_pf_id", json!(d.logical_pf_id));
}

fn func_caps_fields(o: &mut Out, f: &FuncCaps) {
    common_fields(o, "func_caps", &f.common);
    let b = |x: bool| json!(u8::from(x));
    let t = &f.ts_func_info;
    for (k, v) in [
        ("num_allocd_vfs", json!(f.num_allocd_vfs)),
        ("vf_base_id", json!(f.vf_base_id)),
        ("guar_num_vsi", json!(f.guar_num_vsi)),
        ("fd_fltr_guar", json!(f.fd_fltr_guar)),
        ("fd_fltr_best_effort", json!(f.fd_fltr_best_effort)),
        ("ts_func_info.time_ref", json!(t.time_ref)),
        ("ts_func_info.clk_src", b(t.clk_src)),
        ("ts_func_info.tmr_index_assoc", b(t.tmr_index_assoc)),
        ("ts_func_info.ena", b(t.ena)),
        ("ts_func_info.tmr_index_owned", b(t.tmr_index_owned)),
        ("ts_func_info.src_tmr_owned", b(t.src_tmr_owned)),
        ("ts_func_info.tmr_ena", b(t.tmr_ena)),
        ("ts_func_info.gpio_1pps", b(t.gpio_1pps)),
    ] {
        o.set(&format!("func_caps.{k}"), v);
    }
}

/// VSI types the driver builds: 0 PF, 3 CTRL (the `vsi0.type` codes);
/// returns the parameters and whether it is CTRL.
fn vsi_params(v: &Value) -> Result<(PfVsiParams, bool), String> {
    let t = num(&v["type"]).unwrap_or(0);
    if t != 0 && t != 3 {
        return Err(format!("VSI type {t}"));
    }
    let fd = (num(&v["fd_ena"]) == Some(1)).then(|| {
        (num(&v["num_gfltr"]).unwrap_or(0) as u16, num(&v["num_bfltr"]).unwrap_or(0) as u16)
    });
    Ok((
        PfVsiParams {
            sw_id: num(&v["sw_id"]).unwrap_or(0) as u8,
            rxq_base: num(&v["rxq_base"]).unwrap_or(0) as u16,
            num_rxq: num(&v["alloc_rxq"]).unwrap_or(0) as u16,
            rss: num(&v["rss_ena"]) == Some(1),
            flow_director: fd,
            veb: num(&v["bridge_mode"]).unwrap_or(0) == 0,
        },
        t == 3,
    ))
}

/// Adds `vsi0` like ice_vsi_init; returns (outputs, hw VSI number, cache).
fn add_vsi0(aq: &mut Aq<'_>, case: &Value) -> Result<(Out, u16, VsiContext), String> {
    add_vsi(aq, case, "vsi0")
}

/// Adds the VSI under `inputs.<key>` like ice_vsi_init.
fn add_vsi(aq: &mut Aq<'_>, case: &Value, key: &str) -> Result<(Out, u16, VsiContext), String> {
    let v = &case["inputs"][key];
    let (p, ctrl) = vsi_params(v)?;
    let ctx = if ctrl { VsiContext::ctrl_add(&p) } else { VsiContext::pf_add(&p) };
    let mut ctx = ctx.map_err(|e| format!("context refused: {e}"))?;
    let cache = ctx;
    let r = aq.add_vsi(&mut ctx);
    let mut o = Out::new(errno(r.map(|_| ())));
    o.set("sq_last_status", json!(aq.last_status()));
    let mut num_vsi = 0;
    if let Ok(a) = r {
        num_vsi = a.vsi_num;
        o.set("vsi.vsi_num", json!(a.vsi_num));
        o.set("vsi_ctx.vsi_num", json!(a.vsi_num));
        o.set("vsi_ctx.vsis_allocd", json!(a.used));
        o.set("vsi_ctx.vsis_unallocated", json!(a.free));
        o.set("vsi.num_txq", json!(num(&v["alloc_txq"]).unwrap_or(0)));
        o.set("vsi.num_rxq", json!(cache.num_rxq()));
        o.set("vsi.info", json!(hexstr(&cache.0)));
    }
    Ok((o, num_vsi, cache))
}

/// `then_update`: ice_vsi_init again as an update of hardware VSI
/// `vsi_num`, with `vsi0` changed by `upd.*` (flat `"upd.KEY"` arguments or
/// an `upd` object): the rebuilt context with the Rx queue-map section
/// marked valid, sent with 0x0211.
fn update_vsi0(aq: &mut Aq<'_>, case: &Value, vsi_num: u16) -> Result<Out, String> {
    let args = &case["inputs"]["args"];
    let mut v = case["inputs"]["vsi0"].clone();
    if let Some(u) = args.get("upd").and_then(Value::as_object) {
        for (k, x) in u {
            v[k.as_str()] = x.clone();
        }
    }
    if let Some(a) = args.as_object() {
        for (k, x) in a {
            if let Some(k) = k.strip_prefix("upd.") {
                v[k] = x.clone();
            }
        }
    }
    let (p, ctrl) = vsi_params(&v)?;
    let ctx = if ctrl { VsiContext::ctrl_add(&p) } else { VsiContext::pf_add(&p) };
    let mut ctx = ctx.map_err(|e| format!("context refused: {e}"))?.for_update();
    let sent = ctx;
    let r = aq.update_vsi(vsi_num, &mut ctx);
    let mut o = Out::new(errno(r.map(|_| ())));
    o.set("sq_last_status", json!(aq.last_status()));
    if let Ok(a) = r {
        o.set("vsi.vsi_num", json!(vsi_num));
        o.set("vsi_ctx.vsi_num", json!(vsi_num));
        o.set("vsi_ctx.vsis_allocd", json!(a.used));
        o.set("vsi_ctx.vsis_unallocated", json!(a.free));
        o.set("vsi.num_txq", json!(num(&v["alloc_txq"]).unwrap_or(0)));
        o.set("vsi.num_rxq", json!(sent.num_rxq()));
        o.set("vsi.info", json!(hexstr(&sent.0)));
    }
    Ok(o)
}

/// Runs the case's calls; returns one `Out` per vendor call.
fn drive(case: &Value, bar: &RecBar) -> Result<Vec<Out>, Outcome> {
    let op = case["op"].as_str().unwrap_or("");
    if op == "init_all_ctrlq" {
        bar.replay(case);
        let cfg = ring_cfg(case);
        let mut o;
        match AdminQueue::<FakeHal, _>::start(bar, &cfg) {
            Err(e) => {
                o = Out::new(i64::from(e.linux_errno()));
                for k in ["count", "next_to_use", "next_to_clean"] {
                    o.set(&format!("adminq.sq.{k}"), json!(0));
                    o.set(&format!("adminq.rq.{k}"), json!(0));
                }
                o.set("sq_last_status", json!(0));
            }
            Ok(mut aq) => {
                o = init_check(&mut aq);
                ring_fields(&mut o, &aq);
                let last = cfg.rq_entries.saturating_sub(1);
                if let (Some(d0), Some(dl)) = (aq.arq_desc(0), aq.arq_desc(last)) {
                    o.set("adminq.arq_desc[0]", json!({"hex": hexstr(d0.bytes())}));
                    o.set("adminq.arq_desc[last]", json!({"hex": hexstr(dl.bytes())}));
                }
                // the register check needs the rings' addresses; the
                // queue's drop (which clears the registers) is not part of
                // the case
                let (sq_pa, rq_pa) = aq.ring_addrs();
                let mut st = bar.0.borrow_mut();
                st.rings = vec![sq_pa, rq_pa];
                st.frozen = true;
                drop(st);
                drop(aq);
            }
        }
        return Ok(vec![o]);
    }
    if op == "fill_sw_rule" {
        return fill_sw_rule(case);
    }
    let mut aq = prepare(bar, case).map_err(Outcome::Fail)?;
    bar.replay(case);
    let r = drive_ops(case, bar, &mut aq, op);
    // the queue's drop clears its registers: not part of the case
    bar.0.borrow_mut().frozen = true;
    r
}

/// One step per vendor operation (or group of operations sharing a call):
/// each runs the driver's call and returns the case's `Out`s.
fn drive_ops(case: &Value, bar: &RecBar, aq: &mut Aq<'_>, op: &str) -> Result<Vec<Out>, Outcome> {
    let one = |o: Out| Ok(vec![o]);
    match op {
        "shutdown_all_ctrlq" | "q_shutdown" => one(op_shutdown(case, aq, op)),
        "init_check_adminq" | "get_fw_ver" => one(op_init_check_or_version(aq, op)),
        "clear_pf_cfg" => {
            let mut o = Out::new(errno(aq.clear_pf_cfg()));
            o.set("sq_last_status", json!(aq.last_status()));
            one(o)
        }
        "clear_pxe" => one(op_clear_pxe(case, aq)),
        "discover_dev_caps" | "discover_func_caps" | "get_caps" => {
            one(op_discover_caps(case, aq, op))
        }
        "list_caps" => one(op_list_caps(case, aq)),
        "get_initial_sw_cfg" => one(op_initial_sw_cfg(aq)),
        "get_sw_cfg" => one(op_get_sw_cfg(case, aq)),
        "manage_mac_read" => one(op_manage_mac_read(case, aq)),
        "set_mac_cfg" => one(op_set_mac_cfg(case, bar, aq)?),
        "get_link_info" => one(op_get_link_info(case, aq)?),
        "restart_an" => one(op_restart_an(case, bar, aq)?),
        "set_event_mask" => {
            let r = aq.set_event_mask(
                arg(case, "port_num").unwrap_or(0) as u8,
                arg(case, "mask").unwrap_or(0) as u16,
            );
            let mut o = Out::new(errno(r));
            o.set("sq_last_status", json!(aq.last_status()));
            one(o)
        }
        "send_cmd" => send_cmd(case, aq).map(|o| vec![o]),
        o if SEQUENCED.contains(&o) => sequenced(case, aq),
        "clean_rq_elem" => Ok(op_clean_rq_elem(case, aq)),
        "query_sched_res" => {
            let r = aq.query_sched_res();
            let mut o = Out::new(errno(r.map(|_| ())));
            if let Ok(s) = r {
                sched_res_fields(&mut o, &s);
            }
            o.set("sq_last_status", json!(aq.last_status()));
            one(o)
        }
        "add_vsi" => op_add_vsi(case, aq),
        "pe_filter" => op_pe_filter(case, aq),
        "free_vsi" => op_free_vsi(case, aq),
        _ => Err(Outcome::Fail(format!("op {op} not mapped"))),
    }
}

fn op_shutdown(case: &Value, aq: &mut Aq<'_>, op: &str) -> Out {
    let unloading = arg(case, "unloading") == Some(1);
    let r = if op == "q_shutdown" {
        let mut d = irdma::ice::cmd::queue_shutdown(unloading);
        // SAFETY: the recording BAR is the only firmware here (no
        // RDMA `Device` exists), and Queue Shutdown carries no
        // address.
        unsafe { aq.send(&mut d, None) }
    } else {
        let _ = aq.shutdown(unloading);
        Ok(())
    };
    let mut o = Out::new(errno(r));
    ring_fields(&mut o, aq);
    o
}

fn op_init_check_or_version(aq: &mut Aq<'_>, op: &str) -> Out {
    let mut o;
    if op == "get_fw_ver" {
        let r = aq.get_version();
        o = Out::new(errno(r.map(|_| ())));
        if let Ok(v) = &r {
            version_fields(&mut o, v);
        }
    } else {
        o = init_check(aq);
    }
    ring_fields(&mut o, aq);
    o
}

fn op_clear_pxe(case: &Value, aq: &mut Aq<'_>) -> Out {
    let r = if arg(case, "via_ice_clear_pxe_mode") == Some(1) {
        let _ = aq.clear_pxe_if_alive();
        Ok(())
    } else {
        aq.clear_pxe()
    };
    let mut o = Out::new(errno(r));
    o.set("sq_last_status", json!(aq.last_status()));
    o
}

fn op_discover_caps(case: &Value, aq: &mut Aq<'_>, op: &str) -> Out {
    let pf_id = num(&case["inputs"]["hw"]["pf_id"]).unwrap_or(0) as u8;
    let st = &case["inputs"]["state"];
    let mut dev = DevCaps::default();
    dev.common.valid_functions = num(&st["dev_caps.valid_functions"]).unwrap_or(0) as u32;
    dev.num_funcs = num(&st["dev_caps.num_funcs"]).unwrap_or(0) as u32;
    let mut o = Out::new(0);
    if op != "discover_func_caps" {
        match aq.discover_dev_caps(pf_id) {
            Ok(d) => {
                dev = d;
                dev_caps_fields(&mut o, &dev);
            }
            Err(e) => o.ret = i64::from(e.linux_errno()),
        }
    }
    if op != "discover_dev_caps" && o.ret == 0 {
        match aq.discover_func_caps(&dev) {
            Ok(f) => func_caps_fields(&mut o, &f),
            Err(e) => o.ret = i64::from(e.linux_errno()),
        }
    }
    o.set("sq_last_status", json!(aq.last_status()));
    o
}

fn op_list_caps(case: &Value, aq: &mut Aq<'_>) -> Out {
    let size = (arg(case, "buf_size").unwrap_or(4096) as usize).min(MAX_ARG_BUF);
    let kind = match arg(case, "opc") {
        Some(0x0b) => CapsKind::Device,
        Some(0x0a) => CapsKind::Function,
        _ => {
            // the driver's caps kind is an enum: another opcode
            // cannot be asked for, which is ice's EINVAL
            let mut o = Out::new(-22);
            o.set("sq_last_status", json!(aq.last_status()));
            return o;
        }
    };
    let mut buf = vec![0u8; size];
    let (ret, count) = match aq.list_caps(kind, &mut buf) {
        Ok(c) => (0, c),
        Err((e, c)) => (i64::from(e.linux_errno()), c),
    };
    let mut o = Out::new(ret);
    o.set("cap_count", json!(format!("{count:#x}")));
    o.set("sq_last_status", json!(aq.last_status()));
    o
}

fn op_initial_sw_cfg(aq: &mut Aq<'_>) -> Out {
    let mut port =
        PortInfo { lport: 0xee, sw_id: 0xeeee, pf_vf_num: 0xeeee, ..PortInfo::default() };
    let r = aq.initial_sw_cfg(&mut port);
    let mut o = Out::new(errno(r));
    o.set("port_info.lport", json!(port.lport));
    o.set("port_info.sw_id", json!(port.sw_id));
    o.set("port_info.pf_vf_num", json!(port.pf_vf_num));
    if port.sw_id != 0xeeee {
        o.set("port_info.is_vf", json!(u8::from(port.is_vf)));
    }
    o.set("sq_last_status", json!(aq.last_status()));
    o
}

fn op_get_sw_cfg(case: &Value, aq: &mut Aq<'_>) -> Out {
    let size = (arg(case, "buf_size").unwrap_or(2048) as usize).min(MAX_ARG_BUF);
    let mut buf = vec![0u8; size];
    let r = aq.get_sw_cfg(arg(case, "req_desc").unwrap_or(0) as u16, &mut buf);
    let mut o = Out::new(errno(r.map(|_| ())));
    if let Ok((next, n)) = r {
        o.set("req_desc", json!(next));
        o.set("num_elems", json!(n));
    }
    o.set("sq_last_status", json!(aq.last_status()));
    o
}

fn op_manage_mac_read(case: &Value, aq: &mut Aq<'_>) -> Out {
    let len = match (arg(case, "buf_entries"), arg(case, "buf_size")) {
        (Some(n), _) => n.saturating_mul(8),
        (None, Some(s)) => s,
        (None, None) => 16,
    };
    let entries = len.min(MAX_ARG_BUF as u64) as usize;
    let mut port = PortInfo::default();
    let r = aq.manage_mac_read(entries, &mut port);
    let mut o = Out::new(errno(r));
    let mac = port.mac.map_or("eeeeeeeeeeee".to_string(), |m| hexstr(&m));
    o.set("port_info.mac.lan_addr", json!(mac));
    o.set("port_info.mac.perm_addr", json!(mac));
    o.set("sq_last_status", json!(aq.last_status()));
    o
}

fn op_set_mac_cfg(case: &Value, bar: &RecBar, aq: &mut Aq<'_>) -> Result<Out, Outcome> {
    if case["inputs"]["hw"]["mac_type"].as_str() != Some("E810") {
        return Err(skip("E830/E825 register variant (the driver is E810-only)"));
    }
    let hw = &case["inputs"]["hw"];
    let mut vb = [0u8; 32];
    vb[29] = num(&hw["api_maj_ver"]).unwrap_or(1) as u8;
    vb[30] = num(&hw["api_min_ver"]).unwrap_or(5) as u8;
    let api = version_from(&vb);
    let pause = read_pause_cfg(&bar);
    let r = aq.set_mac_cfg(
        arg(case, "max_frame_size").unwrap_or(9728) as u16,
        pause,
        arg(case, "auto_drop") == Some(1),
        &api,
    );
    let mut o = Out::new(errno(r));
    o.set("sq_last_status", json!(aq.last_status()));
    Ok(o)
}

fn op_get_link_info(case: &Value, aq: &mut Aq<'_>) -> Result<Out, Outcome> {
    if case["inputs"]["hw"]["mac_type"].as_str() != Some("E810") {
        return Err(skip("E830 link-status layout (the driver is E810-only)"));
    }
    let lport = num(&case["inputs"]["port_info"]["lport"]).unwrap_or(0) as u8;
    let lse = arg(case, "ena_lse").map(|v| v == 1);
    let r = aq.get_link_status(lport, lse);
    let mut o = Out::new(errno(r.map(|_| ())));
    if let Ok(l) = r {
        link_fields(&mut o, &l);
    }
    o.set("sq_last_status", json!(aq.last_status()));
    Ok(o)
}

fn op_restart_an(case: &Value, bar: &RecBar, aq: &mut Aq<'_>) -> Result<Out, Outcome> {
    let mut port = PortInfo {
        lport: num(&case["inputs"]["port_info"]["lport"]).unwrap_or(0) as u8,
        phy_user_caps: num(&case["inputs"]["state"]["curr_user_phy_cfg.caps"]).unwrap_or(0) as u8,
        ..PortInfo::default()
    };
    let refclk = arg(case, "refclk").unwrap_or(0);
    let Ok(refclk) = u8::try_from(refclk) else {
        return Err(Outcome::Pass);
    };
    let r = aq.restart_an(&mut port, arg(case, "ena_link") == Some(1), refclk);
    if let Err(irdma::ice::cmd::CmdError::Invalid(_)) = r {
        // stricter than the vendor: refused before anything is sent
        if bar.0.borrow().posted.is_empty() {
            return Err(Outcome::Pass);
        }
    }
    let mut o = Out::new(errno(r));
    o.set("phy.curr_user_phy_cfg.caps", json!(format!("{:#x}", port.phy_user_caps)));
    o.set("sq_last_status", json!(aq.last_status()));
    Ok(o)
}

fn op_clean_rq_elem(case: &Value, aq: &mut Aq<'_>) -> Vec<Out> {
    let mut outs = Vec::new();
    let polls = arg(case, "polls").unwrap_or(1).min(4096);
    let blen = (arg(case, "buf_len").unwrap_or(4096) as usize).min(MAX_ARG_BUF);
    for _ in 0..polls {
        let mut b = vec![0u8; blen];
        let r = aq.next_event(&mut b);
        let mut o = Out::new(match &r {
            Ok(Some(_)) => 0,
            Ok(None) => -114,
            Err(e) => i64::from(e.linux_errno()),
        });
        if let Ok(Some(e)) = &r {
            o.set("event.desc", json!({"hex": hexstr(e.desc.bytes())}));
            o.set("event.msg_len", json!(e.msg_len));
            o.set("event.msg_buf", json!(hexstr(b.get(..e.msg_len).unwrap_or(&[]))));
            o.set("pending", json!(e.pending));
            o.set("cleaned_slot", json!(e.slot));
            if let Some(d) = aq.arq_desc(e.slot) {
                o.set("rearmed_desc", json!({"hex": hexstr(d.bytes())}));
            }
        }
        let (u, c) = aq.rq_state();
        o.set("rq.next_to_clean", json!(c));
        o.set("rq.next_to_use", json!(u));
        outs.push(o);
    }
    outs
}

fn op_add_vsi(case: &Value, aq: &mut Aq<'_>) -> Result<Vec<Out>, Outcome> {
    let mut outs = Vec::new();
    match vsi_params(&case["inputs"]["vsi0"]) {
        Err(why) => {
            return Err(skip(&format!("{why}: the driver builds PF and CTRL VSIs only")));
        }
        Ok(_) => {
            let (o, vsi_num, _) = add_vsi0(aq, case).map_err(Outcome::Fail)?;
            let added = o.ret == 0;
            outs.push(o);
            let args = &case["inputs"]["args"];
            if added && args.get("then_update").is_some_and(|v| num(v) != Some(0)) {
                outs.push(update_vsi0(aq, case, vsi_num).map_err(Outcome::Fail)?);
            }
        }
    }
    Ok(outs)
}

fn op_pe_filter(case: &Value, aq: &mut Aq<'_>) -> Result<Vec<Out>, Outcome> {
    let mut outs = Vec::new();
    let (o, vsi_num, mut cache) = add_vsi0(aq, case).map_err(Outcome::Fail)?;
    outs.push(o);
    if outs.last().is_some_and(|o| o.ret != 0) {
        // the VSI was not added: the vendor stops there too
        return Ok(outs);
    }
    for en in case["inputs"]["args"]["enable"].as_array().cloned().unwrap_or_default() {
        let r = aq.set_pe_filter(vsi_num, &mut cache, num(&en) == Some(1));
        let mut o = Out::new(errno(r));
        o.set("vsi_ctx.info.q_opt_flags", json!(format!("{:#x}", cache.0[80])));
        o.set("vsi_ctx.info.q_opt_rss", json!(format!("{:#x}", cache.0[78])));
        o.set("vsi_ctx.info.q_opt_tc", json!(format!("{:#x}", cache.0[79])));
        o.set("vsi_ctx.info.valid_sections", json!(format!("{:#x}", cache.valid_sections())));
        o.set("sq_last_status", json!(aq.last_status()));
        outs.push(o);
    }
    Ok(outs)
}

fn op_free_vsi(case: &Value, aq: &mut Aq<'_>) -> Result<Vec<Out>, Outcome> {
    let mut outs = Vec::new();
    let (o, vsi_num, _) = add_vsi0(aq, case).map_err(Outcome::Fail)?;
    outs.push(o);
    if outs.last().is_some_and(|o| o.ret != 0) {
        // the VSI was not added: the vendor stops there too
        return Ok(outs);
    }
    let handle = arg(case, "handle").unwrap_or(0);
    let mut o;
    if handle != num(&case["inputs"]["vsi0"]["idx"]).unwrap_or(0) {
        // the driver tracks one VSI: an unknown handle has no VSI
        // number, which is ice's EINVAL before anything is sent
        o = Out::new(-22);
    } else {
        let r = aq.free_vsi(vsi_num, arg(case, "keep_vsi_alloc") == Some(1));
        o = Out::new(errno(r.map(|_| ())));
    }
    o.set("sq_last_status", json!(aq.last_status()));
    outs.push(o);
    Ok(outs)
}

fn skip(s: &str) -> Outcome {
    Outcome::Skip(s.to_string())
}

fn sched_res_fields(o: &mut Out, s: &irdma::ice::cmd::SchedResources) {
    o.set("num_tx_sched_layers", json!(s.layers));
    o.set("num_tx_sched_phys_layers", json!(s.phys_layers));
    o.set("flattened_layers", json!(s.flattened_layers));
    o.set("max_cgds", json!(s.max_cgds));
    for (i, m) in s.max_children.iter().enumerate() {
        // the vendor leaves the last layer's entry unwritten (0xEEEE
        // sentinel) or at 0 when its array was zeroed: both are "none"
        o.set(
            &format!("max_children[{i}]"),
            json!(m.map_or("none".to_string(), |v| v.to_string())),
        );
    }
    // the vendor keeps one entry per logical layer
    let li: Vec<u8> = s.layer_info.iter().take(s.layers as usize).flatten().copied().collect();
    o.set("layer_info", json!(hexstr(&li)));
}

fn tree_out(tree: &Tree) -> Value {
    let blank = Node { teid: 0, parent: 0, layer: 0, tc: 0, owner: Owner::Lan, data: [0; 16] };
    let mut v = vec![blank; MAX_NODES];
    let n = tree.depth_first(&mut v);
    Value::Array(
        v[..n]
            .iter()
            .map(|n| {
                json!({"teid": n.teid, "parent": n.parent, "layer": n.layer,
                       "owner": if n.owner == Owner::Rdma { 2 } else { 0 }})
            })
            .collect(),
    )
}

fn port_fields(o: &mut Out, tree: &Tree) {
    o.set("tree", tree_out(tree));
    o.set("sw_entry_point_layer", json!(tree.entry_layer));
    o.set("last_node_teid", json!(tree.last_node_teid));
    o.set("port_state", json!(1));
}

/// Composite ops: each vendor function of the case, in order, mapped to the
/// driver call that does the same job.
fn sequenced(case: &Value, aq: &mut Aq<'_>) -> Result<Vec<Out>, Outcome> {
    let mut sq = Seq::new(case);
    let mut outs = Vec::new();
    let fns: Vec<String> = case["vendor"]
        .as_array()
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    for f in fns {
        let mut o = match f.as_str() {
            "ice_sched_query_res_alloc" => sq.query_res_alloc(aq),
            "ice_sched_init_port" => sq.init_port(aq),
            "ice_vsi_init" => sq.vsi_init(aq)?,
            "ice_sched_add_nodes_to_layer" => sq.on_tree(aq, Seq::add_nodes_to_layer)?,
            "ice_cfg_vsi_lan" => {
                return Err(Outcome::Fail(
                    "LAN queue scheduling (ice_cfg_vsi_lan) is not in the driver".into(),
                ));
            }
            "ice_cfg_vsi_rdma" => sq.on_tree(aq, Seq::cfg_vsi_rdma)?,
            "ice_ena_vsi_rdma_qset" => sq.on_tree(aq, Seq::ena_vsi_rdma_qset)?,
            "ice_dis_vsi_rdma_qset" => sq.on_tree(aq, Seq::dis_vsi_rdma_qset)?,
            "ice_fltr_add_mac_and_broadcast" => sq.add_mac_and_broadcast(aq)?,
            other => return Err(Outcome::Fail(format!("vendor call {other} not mapped"))),
        };
        o.set("sq_last_status", json!(aq.last_status()));
        let failed = o.ret != 0;
        outs.push(o);
        if failed {
            break;
        }
    }
    Ok(outs)
}

/// What the calls of a sequenced case hand on to the later ones.
struct Seq<'c> {
    case: &'c Value,
    args: &'c Value,
    lport: u8,
    layers: u8,
    res: Option<irdma::ice::cmd::SchedResources>,
    tree: Option<Tree>,
    vsi: Option<(u16, VsiContext)>,
    // hardware numbers of the VSIs added so far (vsi0, vsi1, …) and the
    // driver's MAC-rule table (ice's MAC recipe filter list)
    vsis: Vec<u16>,
    filters: irdma::ice::switch::MacFilters,
    mac_calls: usize,
    branches: Vec<(u8, RdmaBranch)>,
    qsets: Vec<(u16, u32)>,
}

impl<'c> Seq<'c> {
    fn new(case: &'c Value) -> Self {
        Seq {
            case,
            args: &case["inputs"]["args"],
            lport: num(&case["inputs"]["port_info"]["lport"]).unwrap_or(0) as u8,
            layers: 9u8,
            res: None,
            tree: None,
            vsi: None,
            vsis: Vec::new(),
            filters: irdma::ice::switch::MacFilters::new(),
            mac_calls: 0usize,
            branches: Vec::new(),
            qsets: Vec::new(),
        }
    }

    /// A step on the port's scheduler tree (built by `ice_sched_init_port`),
    /// with the tree's fields reported after it.
    fn on_tree(
        &mut self,
        aq: &mut Aq<'_>,
        step: fn(&mut Self, &mut Aq<'_>, &mut Tree) -> Out,
    ) -> Result<Out, Outcome> {
        let mut t = self.tree.take().ok_or_else(|| Outcome::Fail("no tree".into()))?;
        let mut o = step(self, aq, &mut t);
        port_fields(&mut o, &t);
        self.tree = Some(t);
        Ok(o)
    }

    fn query_res_alloc(&mut self, aq: &mut Aq<'_>) -> Out {
        let r = aq.query_sched_res();
        let mut o = Out::new(errno(r.map(|_| ())));
        if let Ok(s) = r {
            self.layers = s.layers;
            sched_res_fields(&mut o, &s);
            self.res = Some(s);
        }
        o
    }

    fn init_port(&mut self, aq: &mut Aq<'_>) -> Out {
        let r = aq.sched_init_port(self.lport, self.layers);
        let mut o = Out::new(errno(r.as_ref().map(|_| ()).map_err(|e| *e)));
        if let Ok(mut t) = r {
            if let Some(s) = &self.res {
                t.set_max_children(s);
            }
            port_fields(&mut o, &t);
            self.tree = Some(t);
        }
        o
    }

    fn vsi_init(&mut self, aq: &mut Aq<'_>) -> Result<Out, Outcome> {
        let case = self.case;
        // the k-th ice_vsi_init builds inputs.vsi<k>
        let key = format!("vsi{}", self.vsis.len());
        if case["inputs"].get(&key).is_none_or(Value::is_null) {
            return Err(Outcome::Fail(format!("ice_vsi_init without inputs.{key}")));
        }
        if let Err(why) = vsi_params(&case["inputs"][key.as_str()]) {
            return Err(Outcome::Skip(format!(
                "{key}: {why}: the driver builds PF and CTRL VSIs only"
            )));
        }
        let (vo, n, c) = add_vsi(aq, case, &key).map_err(Outcome::Fail)?;
        self.vsis.push(n);
        if self.vsi.is_none() {
            self.vsi = Some((n, c));
        }
        Ok(vo)
    }

    fn add_nodes_to_layer(&mut self, aq: &mut Aq<'_>, t: &mut Tree) -> Out {
        let case = self.case;
        let tc = arg(case, "tc").unwrap_or(0) as u8;
        let parent =
            arg(case, "parent_teid").map(|p| p as u32).or_else(|| t.tc_node(tc)).unwrap_or(0);
        let layer = arg(case, "layer")
            .map(|l| l as u8)
            .unwrap_or_else(|| t.find(parent).map_or(0, |p| p.layer + 1));
        let n = (arg(case, "num_nodes").unwrap_or(1) as usize).min(MAX_ARG_BUF);
        let mut teids = vec![0u32; n];
        let r = aq.sched_add_nodes(t, parent, layer, tc, &mut teids);
        let mut o = Out::new(errno(r));
        if o.ret == 0 {
            o.set("first_node_teid", json!(format!("{:#x}", teids.first().copied().unwrap_or(0))));
            o.set("num_nodes_added", json!(n));
        }
        o
    }

    fn cfg_vsi_rdma(&mut self, aq: &mut Aq<'_>, t: &mut Tree) -> Out {
        let (case, args) = (self.case, self.args);
        let bitmap = arg(case, "tc_bitmap").unwrap_or(1) as u8;
        let mut ret = 0;
        for tc in 0..8u8 {
            // ice skips a TC the port has no node for; without
            // DCB (not in the vectors) every TC node carries
            // tc_num 0, so only TC 0 has one in ice's view
            // (the vectors' trees report tc 0 for all of them)
            if bitmap & (1 << tc) == 0 || tc != 0 || t.tc_node(tc).is_none() {
                continue;
            }
            // ice_cfg_vsi_rdma(max_rdmaqs[tc]): a new branch, or
            // one grown to the larger count
            let max_qs = args["max_rdmaqs"]
                .as_array()
                .and_then(|a| a.get(usize::from(tc)))
                .and_then(num)
                .unwrap_or(0) as u16;
            let r = match self.branches.iter_mut().find(|b| b.0 == tc) {
                Some(b) => aq.sched_grow_rdma(t, &mut b.1, max_qs),
                None => aq.sched_cfg_vsi_rdma(t, tc, max_qs).map(|b| self.branches.push((tc, b))),
            };
            if let Err(e) = r {
                ret = i64::from(e.linux_errno());
                break;
            }
        }
        Out::new(ret)
    }

    fn ena_vsi_rdma_qset(&mut self, aq: &mut Aq<'_>, t: &mut Tree) -> Out {
        let (case, args) = (self.case, self.args);
        let tc = arg(case, "tc").unwrap_or(0) as u8;
        let hs: Vec<u16> = args["qs_handles"]
            .as_array()
            .map(|a| a.iter().filter_map(num).map(|h| h as u16).collect())
            .unwrap_or_default();
        let mut teids = vec![0u32; hs.len()];
        // no branch on this TC: ice_sched_get_free_qparent finds no
        // parent (EINVAL), nothing sent
        let r = match self.branches.iter().find(|b| b.0 == tc) {
            Some(b) => aq.sched_ena_rdma_qsets(t, &b.1, tc, &hs, &mut teids),
            None => Err(irdma::ice::cmd::CmdError::Invalid("no RDMA branch on this TC")),
        };
        let mut o = Out::new(errno(r));
        if o.ret == 0 {
            for (i, te) in teids.iter().enumerate() {
                o.set(&format!("qset_teid[{i}]"), json!(format!("{te:#x}")));
                self.qsets.push((hs[i], *te));
            }
        }
        o
    }

    fn dis_vsi_rdma_qset(&mut self, aq: &mut Aq<'_>, t: &mut Tree) -> Out {
        let (case, args) = (self.case, self.args);
        let bogus = arg(case, "bogus_teid").unwrap_or(0xffff_ffff) as u32;
        let mut ret = 0;
        for idx in args["free_idx"].as_array().cloned().unwrap_or_default() {
            let i = num(&idx).unwrap_or(0) as usize;
            let (h, te) = self.qsets.get(i).copied().unwrap_or((0, bogus));
            if let Err(e) = aq.sched_dis_rdma_qset(t, te, h) {
                ret = i64::from(e.linux_errno());
                break;
            }
        }
        Out::new(ret)
    }

    fn add_mac_and_broadcast(&mut self, aq: &mut Aq<'_>) -> Result<Out, Outcome> {
        let (case, args) = (self.case, self.args);
        // the k-th call subscribes vsi<k> (vsi1: a second VSI on
        // the same addresses, which ice turns into VSI lists)
        let mac_calls = self.mac_calls;
        let n =
            self.vsis.get(mac_calls).copied().ok_or_else(|| {
                Outcome::Fail(format!("add_mac call {mac_calls} without its VSI"))
            })?;
        self.mac_calls += 1;
        let mac = hexbytes(&args["mac"].as_str().unwrap_or("").replace(':', ""));
        let mac: [u8; 6] = mac.try_into().map_err(|_| Outcome::Fail("bad mac".into()))?;
        let hw = &case["inputs"]["hw"];
        let veb = hw["evb_veb"].as_bool().unwrap_or(true);
        let umac_shared = hw["umac_shared"].as_bool().unwrap_or(false);
        let r = self.filters.add_mac_and_broadcast(aq, mac, n, veb, umac_shared);
        let mut o = Out::new(errno(r));
        o.set("switch_info.rule_cnt", json!(self.filters.rule_cnt()));
        Ok(o)
    }
}

/// `ice_fill_sw_rule` alone: the driver's lookup-rule encoder
/// (`switch::lookup_rule`) for MAC and VLAN lookups with every action,
/// flag and command. Other lookups are skipped as the README allows; ids
/// wider than their field pass when refused with a typed error.
fn fill_sw_rule(case: &Value) -> Result<Vec<Out>, Outcome> {
    use irdma::ice::switch::{Action, Lookup, RuleOp, RuleSpec, lookup_rule};
    let a = |k: &str| arg(case, k);
    let u16a = |k: &str| a(k).unwrap_or(0).min(u64::from(u16::MAX)) as u16;
    let lk = a("lkup_type").unwrap_or(0);
    let lookup = match lk {
        1 => {
            let m = case["inputs"]["args"]["mac"].as_str().unwrap_or("00:00:00:00:00:00");
            let mac: [u8; 6] = hexbytes(&m.replace(':', ""))
                .try_into()
                .map_err(|_| Outcome::Fail("bad mac".into()))?;
            Lookup::Mac(mac)
        }
        4 => Lookup::Vlan {
            id: u16a("vlan_id"),
            tpid: (a("tpid_valid") == Some(1)).then(|| u16a("tpid")),
        },
        _ => {
            return Err(Outcome::Skip(format!(
                "lookup type {lk}: the driver builds MAC and VLAN rules only"
            )));
        }
    };
    let action = match a("fltr_act").unwrap_or(0) {
        0 => Action::Vsi(u16a("fwd_id")),
        1 => Action::VsiList(u16a("fwd_vsi_list_id")),
        2 => Action::Queue(u16a("fwd_q_id")),
        3 => Action::QueueGroup { queue: u16a("fwd_q_id"), size: u16a("qgrp_size") },
        4 => Action::Drop,
        x => return Err(Outcome::Skip(format!("fltr_act {x} is not an ice action"))),
    };
    let op = match a("opc") {
        Some(0x02a1) => RuleOp::Update,
        Some(0x02a2) => RuleOp::Remove { rule_id: u16a("fltr_rule_id") },
        _ => RuleOp::Add,
    };
    let spec = RuleSpec {
        lookup,
        action,
        flags: a("flag").unwrap_or(0).min(255) as u8,
        src: u16a("src"),
        veb: case["inputs"]["hw"]["evb_veb"].as_bool().unwrap_or(true),
        op,
    };
    match lookup_rule(&spec) {
        Err(irdma::ice::cmd::CmdError::Invalid(_)) => Err(Outcome::Pass),
        Err(e) => Err(Outcome::Fail(format!("encoder: {e}"))),
        Ok(r) => {
            let mut o = Out::new(0);
            o.set("rule", json!({"hex": hexstr(&r.bytes)}));
            o.set("f_info.lb_en", json!(u8::from(r.lb_en)));
            o.set("f_info.lan_en", json!(u8::from(r.lan_en)));
            Ok(vec![o])
        }
    }
}

fn version_from(b: &[u8; 32]) -> irdma::ice::cmd::Version {
    irdma::ice::cmd::Version {
        rom: 0,
        fw_build: 0,
        fw: [b[24], b[25], b[26], b[27]],
        api: [b[28], b[29], b[30], b[31]],
    }
}

fn link_fields(o: &mut Out, l: &LinkStatus) {
    o.set("link_info.phy_type_low", json!(format!("{:#x}", l.phy_type_low)));
    o.set("link_info.phy_type_high", json!(format!("{:#x}", l.phy_type_high)));
    o.set("link_info.topo_media_conflict", json!(l.topo_media_conflict));
    o.set("link_info.max_frame_size", json!(l.max_frame_size));
    o.set("link_info.link_speed", json!(format!("{:#x}", l.link_speed)));
    o.set("link_info.link_cfg_err", json!(l.link_cfg_err));
    o.set("link_info.lse_ena", json!(u8::from(l.lse_ena)));
    o.set("link_info.link_info", json!(format!("{:#x}", l.link_info)));
    o.set("link_info.an_info", json!(format!("{:#x}", l.an_info)));
    o.set("link_info.ext_info", json!(format!("{:#x}", l.ext_info)));
    o.set("link_info.fec_info", json!(format!("{:#x}", l.fec_info)));
    o.set("link_info.pacing", json!(format!("{:#x}", l.pacing)));
    o.set("fc.current_mode", json!(l.fc_mode()));
    o.set("phy.get_link_info", json!(0));
    o.set("link_copied", json!(1));
}

fn send_cmd(case: &Value, aq: &mut Aq<'_>) -> Result<Out, Outcome> {
    // the caller's descriptor: SI | flags_or, the opcode, the parameters
    // (any opcode: the generic send path does not need to know it)
    let opc = arg(case, "opcode").unwrap_or(0) as u16;
    let mut params = [0u8; 16];
    let p = hexbytes(case["inputs"]["args"]["params"].as_str().unwrap_or(""));
    for (d, s) in params.iter_mut().zip(p) {
        *d = s;
    }
    let flags_or = arg(case, "flags_or").unwrap_or(0) as u16;
    let mut d = Desc::raw(opc, flags_or, params);
    let size = (arg(case, "buf_size").unwrap_or(0) as usize).min(MAX_ARG_BUF);
    let mut buf = hexbytes(case["inputs"]["args"]["buf"].as_str().unwrap_or(""));
    buf.resize(size, 0);
    // `null_buf`: the caller passes no buffer but still a size (the
    // driver's sized send refuses the pair before posting anything)
    let has_buf = arg(case, "null_buf") != Some(1)
        && (size > 0 || case["inputs"]["args"].get("buf").is_some());
    if !has_buf && params[8..].iter().any(|b| *b != 0) {
        // An address the descriptor would carry by hand: not what the
        // generic send path is tested with, and not sent (below).
        return Err(Outcome::Skip("address words without a buffer".into()));
    }
    // SAFETY: the recording BAR is the only firmware here (no RDMA `Device`
    // exists), and the descriptor carries no hand-set address (checked
    // above): a buffer's address is the queue's own slot buffer.
    let r = unsafe { aq.send_sized(&mut d, has_buf.then_some(&mut buf[..]), size) };
    let mut o = Out::new(match r {
        Ok(()) => 0,
        Err(e) => i64::from(e.linux_errno()),
    });
    o.set("desc_after", json!({"hex": hexstr(d.bytes())}));
    if size > 0 {
        o.set("buf_after", json!(hexstr(&buf)));
    }
    ring_fields(&mut o, aq);
    Ok(o)
}

fn cmp_out(ci: usize, want: &Value, got: &Out) -> Result<(), String> {
    let wret = num(&want["ret"]).map(|v| v as i64).unwrap_or(0);
    if wret != got.ret {
        return Err(format!("call {ci} ({}): ret {} want {}", want["fn"], got.ret, wret));
    }
    let Some(fields) = want["outputs"].as_object() else { return Ok(()) };
    // A failed call returns only its error (plus what the driver hands back
    // with it, e.g. the caps count): the vendor's other fields are the
    // state it happened to leave and have no driver equivalent.
    let failed = wret != 0;
    for (k, w) in fields {
        if failed && !got.fields.contains_key(k) {
            continue;
        }
        if k.starts_with("mailboxq.") || k.starts_with("sbq.") {
            continue;
        }
        let Some(g) = got.fields.get(k) else {
            if k.starts_with("fw_") || k.starts_with("api_") {
                // versions: compared only when the driver read one
                continue;
            }
            return Err(format!("call {ci}: output {k} not produced by the driver"));
        };
        if k == "tree" {
            cmp_tree(ci, w, g)?;
            continue;
        }
        if let (Some(wh), Some(gh)) =
            (w.get("hex").and_then(Value::as_str), g.get("hex").and_then(Value::as_str))
        {
            cmp_bytes(
                &format!("call {ci} {k}"),
                &hexbytes(gh),
                wh,
                w.get("mask").and_then(Value::as_str),
            )?;
            continue;
        }
        if g.as_str() == Some("none") && matches!(num(w), Some(0xeeee) | Some(0)) {
            continue;
        }
        if !same(g, w) {
            return Err(format!("call {ci}: {k} = {g}, want {w}"));
        }
    }
    Ok(())
}

/// Trees: the same nodes in the same depth-first order, compared on TEID,
/// parent, layer and owner (the README: "Compare the TEIDs, layers,
/// parents and owners of the driver's own tree").
fn cmp_tree(ci: usize, want: &Value, got: &Value) -> Result<(), String> {
    let (Some(w), Some(g)) = (want.as_array(), got.as_array()) else {
        return Err(format!("call {ci}: tree not a list"));
    };
    if w.len() != g.len() {
        return Err(format!("call {ci}: tree has {} nodes, want {}", g.len(), w.len()));
    }
    for (i, (a, b)) in w.iter().zip(g).enumerate() {
        for k in ["teid", "parent", "layer", "owner"] {
            if num(&a[k]) != num(&b[k]) {
                return Err(format!("call {ci}: tree node {i} {k} = {}, want {}", b[k], a[k]));
            }
        }
    }
    Ok(())
}

fn run_case(case: &Value) -> Outcome {
    let op = case["op"].as_str().unwrap_or("");
    if let Some((_, why)) = SKIP_OPS.iter().find(|s| s.0 == op) {
        return Outcome::Skip((*why).to_string());
    }
    if NOT_IMPLEMENTED.contains(&op) {
        return Outcome::Fail(format!("op {op}: driver code not written yet"));
    }
    let hw = &case["inputs"]["hw"];
    if let Some(m) = hw["mac_type"].as_str()
        && m != "E810"
    {
        return Outcome::Skip(format!("{m} case (the driver is E810-only)"));
    }
    let bar = RecBar::new(case);
    let outs = match drive(case, &bar) {
        Ok(o) => o,
        Err(oc) => return oc,
    };
    let want_calls = case["outputs"]["calls"].as_array().cloned().unwrap_or_default();
    if outs.len() != want_calls.len() {
        return Outcome::Fail(format!("{} calls made, {} expected", outs.len(), want_calls.len()));
    }
    for (i, (w, g)) in want_calls.iter().zip(&outs).enumerate() {
        if let Err(e) = cmp_out(i, w, g) {
            return Outcome::Fail(e);
        }
    }
    let st = bar.0.borrow();
    // commands
    if let Err(e) = check_commands(case, &st) {
        return Outcome::Fail(e);
    }
    // register writes (mailbox absent by design)
    if let Err(e) = check_reg_writes(case, &st) {
        return Outcome::Fail(e);
    }
    Outcome::Pass
}

/// The commands posted against the case's `outputs.commands`: descriptors
/// and buffers, under their masks.
fn check_commands(case: &Value, st: &St) -> Result<(), String> {
    let want_cmds = case["outputs"]["commands"].as_array().cloned().unwrap_or_default();
    if st.posted.len() != want_cmds.len() {
        return Err(format!("{} commands posted, {} expected", st.posted.len(), want_cmds.len()));
    }
    for (k, (w, (d, b))) in want_cmds.iter().zip(&st.posted).enumerate() {
        let mask = w["desc"]["mask"].as_str().map(str::to_string).or_else(|| {
            (w["desc"]["addr"].as_str() == Some("buffer"))
                .then(|| format!("{}{}", "ff".repeat(24), "00".repeat(8)))
        });
        cmp_bytes(
            &format!("command {k} descriptor"),
            d,
            w["desc"]["hex"].as_str().unwrap_or(""),
            mask.as_deref(),
        )?;
        if let Some(wb) = w.get("buf").filter(|b| b.is_object()) {
            let len = num(&wb["len"]).unwrap_or(0) as usize;
            if b.len() != len {
                return Err(format!("command {k}: buffer {} bytes, want {len}", b.len()));
            }
            if wb["compare"].as_str() == Some("bytes")
                && let Err(e) = cmp_bytes(
                    &format!("command {k} buffer"),
                    b,
                    wb["hex"].as_str().unwrap_or(""),
                    wb["mask"].as_str(),
                )
            {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// The register writes made against the case's `outputs.reg_writes`.
fn check_reg_writes(case: &Value, st: &St) -> Result<(), String> {
    let want_w: Vec<&Value> = case["outputs"]["reg_writes"]
        .as_array()
        .map(|a| a.iter().filter(|w| w["group"].as_str() != Some("mbx")).collect())
        .unwrap_or_default();
    if st.log.len() != want_w.len() {
        return Err(format!(
            "{} register writes, {} expected: {:x?}",
            st.log.len(),
            want_w.len(),
            st.log
        ));
    }
    for (i, (w, (off, val))) in want_w.iter().zip(&st.log).enumerate() {
        let woff = num(&w["offset"]).unwrap_or(0) as usize;
        if woff != *off {
            return Err(format!(
                "register write {i}: offset {off:#x}, want {woff:#x} ({})",
                w["name"]
            ));
        }
        let wval = num(&w["value"]).unwrap_or(0) as u32;
        let ok = match w["value_is"].as_str() {
            // the driver's own ring: the lo32 write and the hi32 write after
            // it must name a live DMA allocation of this Hal
            Some(v) if v.starts_with("lo32") => {
                let hi = st.log.get(i + 1).map_or(0, |x| x.1);
                let pa = (u64::from(hi) << 32) | u64::from(*val);
                pa % 64 == 0 && (st.rings.contains(&pa) || FakeHal::contains(pa, 32))
            }
            Some(_) => i > 0 && st.log.get(i - 1).is_some_and(|x| x.1 != 0),
            None => *val == wval,
        };
        if !ok {
            return Err(format!("register write {i} ({}): {val:#x}, want {wval:#x}", w["name"]));
        }
    }
    Ok(())
}

/// Runs every case of a `lan-aq-vectors.json` document.
pub fn run(v: &Value) -> Result<Tally, String> {
    let cases = v.get("cases").and_then(Value::as_array).ok_or("no cases[]")?;
    let mut t = Tally::default();
    let mut skips: Vec<(String, String)> = Vec::new();
    for c in cases {
        let name =
            format!("{}/{}", c["op"].as_str().unwrap_or("?"), c["name"].as_str().unwrap_or("?"));
        if let Some(why) = t.count(&name, run_case(c)) {
            skips.push((name, why));
        }
    }
    for (name, why) in &skips {
        println!("skip {name}: {why}");
    }
    Ok(t)
}

#[cfg(test)]
#[path = "lan_mutations.rs"]
mod mutations;
