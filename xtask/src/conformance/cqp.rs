//! Runner for `cqp-vectors.json`: the driver's real CQP builders, host
//! context encoders, decoders and the CQP engine (posting through a
//! recording `Bar`) against the vendor's recorded bytes.
//!
//! For a WQE case the command goes through `Cqp::post` on an SQ of the
//! case's size, moved to the case's slot and polarity by real NOP round
//! trips; the check is all eight words of the slot and the register writes
//! of that post (CQPDB with the new head, PFINT_AEQCTL before DESTROY_AEQ).
//! Inputs wider than their field pass when the driver refuses them with
//! `EncodeError::TooWide` / `AboveMax`; vendor-rejected cases (`ret` < 0) pass when the
//! driver refuses too.

use std::cell::RefCell;
use std::collections::HashMap;

use irdma::cqp::cmd::*;
use irdma::cqp::ctx::{CqpHostCtx, Dcqcn, HMC_OBJ_COUNT, QpRoceCtx, encode_fpm_commit};
use irdma::cqp::decode::{Aeqe, CcqCqe, FpmCommit, FpmQuery, RingConsumer};
use irdma::cqp::engine::{Cqp, CqpConfig, CqpError, Timeouts};
use irdma_hal::cqp::hdr;
use irdma_hal::{Bar, regs};
use irdma_testkit::FakeHal;
use serde_json::Value;

use super::{Tally, num};

/// Ops the E810 RoCE driver does not use by design, with the reason.
const SKIPS: &[(&str, &str)] = &[
    ("add_local_mac", "GEN_1-only local MAC table (GEN_2 carries the MAC in the QP context)"),
    ("del_local_mac", "GEN_1-only local MAC table (GEN_2 carries the MAC in the QP context)"),
    ("alloc_local_mac", "GEN_1-only local MAC table (GEN_2 carries the MAC in the QP context)"),
    ("manage_apbvt", "iWARP-only (TCP port table)"),
    ("manage_qhash", "iWARP-only (quad hash table)"),
    ("mw_alloc", "memory windows are not used by the E810 driver"),
    ("manage_push_page", "push pages are not used on GEN_2"),
    ("manage_stats_inst", "statistics instances are not used"),
    ("gather_stats", "statistics gathering is not used"),
    ("up_map", "UP map (QoS) is not used"),
    ("manage_hmc_pm_func_table", "VF function tables (no VF support)"),
    ("manage_pble_bp", "VF PBLE backing pages (no VF support)"),
];

enum Outcome {
    Pass,
    /// Passed because the driver refused an input wider than its field.
    Refused(String),
    Fail(String),
    Skip(&'static str),
}

// ------------------------------------------------------------ recording BAR

/// A register file that records writes, completes every CQP WQE at once
/// (CQPTAIL ← CQPDB) and answers the create handshake with a scripted status.
struct RecBar {
    st: RefCell<RecState>,
}

struct RecState {
    regs: HashMap<usize, u32>,
    log: Vec<(usize, u32)>,
    recording: bool,
    ccqpstatus_on_create: u32,
}

impl RecBar {
    fn new(ccqpstatus_on_create: u32, cqperrcodes: u32) -> Self {
        let mut regs = HashMap::new();
        regs.insert(regs::CQPERRCODES, cqperrcodes);
        RecBar {
            st: RefCell::new(RecState {
                regs,
                log: Vec::new(),
                recording: true,
                ccqpstatus_on_create,
            }),
        }
    }
    fn take_log(&self) -> Vec<(usize, u32)> {
        std::mem::take(&mut self.st.borrow_mut().log)
    }
    fn record(&self, on: bool) {
        self.st.borrow_mut().recording = on;
    }
}

impl Bar for RecBar {
    fn read32(&self, offset: usize) -> u32 {
        self.st.borrow().regs.get(&offset).copied().unwrap_or(0)
    }
    fn write32(&self, offset: usize, value: u32) {
        let mut st = self.st.borrow_mut();
        if st.recording {
            st.log.push((offset, value));
        }
        st.regs.insert(offset, value);
        match offset {
            regs::CCQPLOW => {
                // A non-zero address creates, 0/0 destroys.
                let s = if value != 0 { st.ccqpstatus_on_create } else { 0 };
                st.regs.insert(regs::CCQPSTATUS, s);
            }
            regs::CQPDB => {
                st.regs.insert(regs::CQPTAIL, value);
            }
            _ => {}
        }
    }
}

fn reg_name(off: usize) -> &'static str {
    match off {
        regs::CQPTAIL => "PFPE_CQPTAIL",
        regs::CQPDB => "PFPE_CQPDB",
        regs::CCQPSTATUS => "PFPE_CCQPSTATUS",
        regs::CCQPHIGH => "PFPE_CCQPHIGH",
        regs::CCQPLOW => "PFPE_CCQPLOW",
        regs::PFINT_AEQCTL => "PFINT_AEQCTL",
        _ => "?",
    }
}

/// Reads `n` words at bus address `pa`.
fn read_bus(pa: u64, n: usize) -> Vec<u64> {
    (0..n)
        .map(|i| {
            let p = (pa as usize + 8 * i) as *const u64;
            // SAFETY: FakeHal's bus address is the host virtual address of a
            // live DMA allocation owned by the `Cqp` the caller still holds,
            // and `n` words stay inside the region the caller names.
            unsafe { p.read_volatile() }
        })
        .collect()
}

// ------------------------------------------------------------ JSON helpers

struct In<'a>(&'a Value);

impl In<'_> {
    fn u(&self, k: &str) -> u64 {
        self.0.get(k).and_then(num).unwrap_or(0)
    }
    fn has(&self, k: &str) -> bool {
        self.0.get(k).is_some()
    }
    fn b(&self, k: &str) -> bool {
        self.u(k) != 0
    }
    /// `k` as a narrower integer; `Err` names the input when it does not fit
    /// the driver's type (an over-wide input, refused by type).
    fn n<T: TryFrom<u64>>(&self, k: &str) -> Result<T, String> {
        let v = self.u(k);
        T::try_from(v).map_err(|_| format!("{k}={v:#x} does not fit the driver's type"))
    }
    fn mac(&self, k: &str) -> [u8; 6] {
        let mut m = [0u8; 6];
        if let Some(s) = self.0.get(k).and_then(|v| v.as_str()) {
            for (i, p) in s.split(':').take(6).enumerate() {
                m[i] = u8::from_str_radix(p, 16).unwrap_or(0);
            }
        }
        m
    }
}

fn words(v: &Value) -> Vec<u64> {
    v.as_array().map(|a| a.iter().filter_map(num).collect()).unwrap_or_default()
}

fn arr<const N: usize>(v: &[u64]) -> [u64; N] {
    let mut a = [0u64; N];
    for (d, s) in a.iter_mut().zip(v) {
        *d = *s;
    }
    a
}

/// Per-byte written mask (`written_byte_mask`: one bit per byte, 64 bytes
/// per mask word) turned into a per-u64 bit mask for word `w`.
fn byte_mask(mask: &[u64], w: usize) -> u64 {
    let bits = mask.get(w / 8).copied().unwrap_or(0) >> ((w % 8) * 8);
    (0..8).fold(0u64, |m, b| if bits >> b & 1 == 1 { m | 0xff << (8 * b) } else { m })
}

fn cmp_words(what: &str, got: &[u64], want: &[u64], mask: Option<&[u64]>) -> Result<(), String> {
    for (i, w) in want.iter().enumerate() {
        let m = mask.map_or(u64::MAX, |m| byte_mask(m, i));
        let g = got.get(i).copied().unwrap_or(0);
        if g & m != w & m {
            return Err(format!(
                "{what} word @{}: got {:#018x}, want {:#018x}",
                i * 8,
                g & m,
                w & m
            ));
        }
    }
    Ok(())
}

/// Device state the vendor builders check, as the vectors name it. Any other
/// input of that shape (an `hmc_obj[..]`, `hmc_fpm_misc.`, `hw_attrs.` or
/// `qp.flush` key) on a builder case fails the case naming it: a limit the
/// runner does not pass to the driver would be silently ignored otherwise.
const DEVICE_STATE_KEYS: &[&str] = &[
    "hmc_obj[QP].max_cnt",
    "hmc_obj[CQ].max_cnt",
    "hmc_obj[PBLE].cnt",
    "hmc_fpm_misc.max_ceqs",
    "fpm_misc.max_ceqs",
    "qp.flush_sq",
    "qp.flush_rq",
];

fn unknown_device_state(case: &Value) -> Option<String> {
    let op = case["op"].as_str().unwrap_or("");
    if op.starts_with("decode_") || op.starts_with("cfg_iw_fpm") {
        return None;
    }
    let shaped = |k: &str| {
        k.starts_with("hmc_obj[")
            || k.starts_with("hmc_fpm_misc.")
            || k.starts_with("fpm_misc.")
            || k.starts_with("hw_attrs.")
            || k.starts_with("dev->hw_attrs")
            || k.starts_with("qp.flush")
    };
    case["inputs"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .find(|k| shaped(k) && !DEVICE_STATE_KEYS.contains(&k.as_str()))
        .map(|k| format!("unknown device-state input {k:?}"))
}

fn limits_of(i: &In) -> Limits {
    let mut l = Limits::NONE;
    for k in ["hmc_fpm_misc.max_ceqs", "fpm_misc.max_ceqs"] {
        if i.has(k) {
            l.ceq_count = i.u(k) as u32;
        }
    }
    if i.has("hmc_obj[QP].max_cnt") {
        l.qp_count = i.u("hmc_obj[QP].max_cnt") as u32;
    }
    if i.has("hmc_obj[CQ].max_cnt") {
        l.cq_count = i.u("hmc_obj[CQ].max_cnt") as u32;
    }
    if i.has("hmc_obj[PBLE].cnt") {
        l.pble_count = i.u("hmc_obj[PBLE].cnt") as u32;
    }
    l
}

fn refused(e: &CqpError) -> Option<String> {
    match e {
        CqpError::Encode(e) => {
            e.too_wide().map(|(field, value, max)| format!("{field}={value:#x} > {max:#x}"))
        }
        _ => None,
    }
}

// ------------------------------------------------------------ WQE cases

/// Posts `cmd` at the case's slot/polarity and compares the WQE and the
/// register writes. `fix` adjusts the expected words for addresses the
/// driver chose itself (the SD overflow buffer).
fn check_post<C: CqpCommand>(
    case: &Value,
    cmd: C,
    limits: Limits,
    extra: impl FnOnce(&Cqp<FakeHal, &RecBar>, &mut Vec<u64>) -> Result<(), String>,
) -> Outcome {
    let ret = case.get("ret").and_then(Value::as_i64).unwrap_or(0);
    let cq = case.get("cqp").cloned().unwrap_or(Value::Null);
    let sq_size = cq.get("sq_size").and_then(num).unwrap_or(2048) as u32;
    let slot = cq.get("slot").and_then(num).unwrap_or(0) as u32;
    let pol = cq.get("polarity").and_then(Value::as_i64).unwrap_or(1);
    let bar = RecBar::new(1, 0);
    let mut cfg = CqpConfig::gen2_roce(sq_size);
    cfg.timeouts = Timeouts::default();
    let mut cqp = match Cqp::<FakeHal, &RecBar>::create(&bar, &cfg) {
        Ok(c) => c,
        Err(e) => return Outcome::Fail(format!("CQP create: {e:?}")),
    };
    // Reach the slot: first pass writes valid 1, second pass 0.
    bar.record(false);
    let pre = if pol == 0 { sq_size + slot } else { slot };
    for _ in 0..pre {
        if let Err(e) = cqp.nop() {
            return Outcome::Fail(format!("positioning NOP: {e:?}"));
        }
    }
    cqp.set_limits(limits);
    bar.take_log();
    bar.record(true);
    let (at, valid) = cqp.next_slot();
    let r = cqp.exec(cmd, 0x5c5c_5c5c_0000_0001);
    let log = bar.take_log();
    if ret < 0 {
        return match r {
            Err(CqpError::Encode(_)) if log.is_empty() => Outcome::Pass,
            Err(e) => {
                Outcome::Fail(format!("vendor refused (ret {ret}); we failed differently: {e:?}"))
            }
            Ok(_) => Outcome::Fail(format!("vendor refused (ret {ret}); we accepted")),
        };
    }
    if let Err(e) = &r {
        return match refused(e) {
            Some(why) if log.is_empty() => Outcome::Refused(why),
            _ => Outcome::Fail(format!("refused: {e:?}")),
        };
    }
    if at != slot || (valid as i64) != pol {
        return Outcome::Fail(format!(
            "engine at slot {at} valid {valid}, case wants {slot}/{pol}"
        ));
    }
    let mut want = words(&case["wqe"]["words"]);
    if let Err(e) = extra(&cqp, &mut want) {
        return Outcome::Fail(e);
    }
    let got = cqp.sq_wqe(slot).unwrap_or_default();
    if let Err(e) = cmp_words("wqe", &got, &want, None) {
        return Outcome::Fail(e);
    }
    if let Err(e) = check_doorbell(case, &log) {
        return Outcome::Fail(e);
    }
    Outcome::Pass
}

/// The register writes of a post (`log`) against the case's `reg_writes`.
fn check_doorbell(case: &Value, log: &[(usize, u32)]) -> Result<(), String> {
    let want_regs: Vec<(String, u32)> = case["reg_writes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    (
                        r["name"].as_str().unwrap_or("").to_string(),
                        num(&r["value"]).unwrap_or(0) as u32,
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    // ccq_create builds without posting (post_sq=false): its vector has no
    // doorbell; compare only what it lists.
    let got_regs: Vec<(String, u32)> =
        log.iter().map(|(o, v)| (reg_name(*o).to_string(), *v)).collect();
    if !want_regs.is_empty() && got_regs != want_regs {
        return Err(format!("register writes {got_regs:?}, want {want_regs:?}"));
    }
    Ok(())
}

fn qp_common(i: &In) -> Result<(u32, u8), String> {
    Ok((i.n("qp_id")?, i.n("qp_type")?))
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(why) => return Outcome::Refused(why),
        }
    };
}

/// A driver struct read from the case's inputs (`$i`, an [`In`]): the
/// fields in braces as written (`field` or `field: expr`), then groups of
/// fields whose input is named after the field, optionally behind a prefix:
/// `b [..]` as `In::b`, `n "qp." [..]` as `In::n` (refused through `tri!`
/// when the input does not fit), `u [..]` as `In::u`.
macro_rules! inputs {
    (@ $i:expr, $T:ident { $($acc:tt)* }) => {
        $T { $($acc)* }
    };
    (@ $i:expr, $T:ident { $($acc:tt)* } $how:ident $pre:literal [$($g:ident)*] $($rest:tt)*) => {
        inputs!(@ $i, $T {
            $($acc)* $($g: inputs!(read $how $i, concat!($pre, stringify!($g))),)*
        } $($rest)*)
    };
    (@ $i:expr, $T:ident { $($acc:tt)* } $how:ident [$($g:ident)*] $($rest:tt)*) => {
        inputs!(@ $i, $T { $($acc)* } $how "" [$($g)*] $($rest)*)
    };
    (read b $i:expr, $k:expr) => {
        $i.b($k)
    };
    (read n $i:expr, $k:expr) => {
        tri!($i.n($k))
    };
    (read u $i:expr, $k:expr) => {
        $i.u($k)
    };
    ($i:expr, $T:ident { $($f:ident $(: $e:expr)?),* $(,)? } $($groups:tt)*) => {
        inputs!(@ $i, $T { $($f $(: $e)?,)* } $($groups)*)
    };
}

fn run_case(case: &Value) -> Outcome {
    let op = case["op"].as_str().unwrap_or("");
    if let Some((_, why)) = SKIPS.iter().find(|(o, _)| *o == op) {
        return Outcome::Skip(why);
    }
    if let Some(why) = unknown_device_state(case) {
        return Outcome::Fail(why);
    }
    let i = In(&case["inputs"]);
    let lim = limits_of(&i);
    let none = |_: &Cqp<FakeHal, &RecBar>, _: &mut Vec<u64>| Ok(());
    match op {
        "cqp_create" => cqp_create(case, &i),
        "nop" => check_post(case, Nop, lim, none),
        "create_qp" | "modify_qp" => qp_create_or_modify(case, &i, op, lim),
        "destroy_qp" => {
            let (qp_id, qp_type) = tri!(qp_common(&i));
            let c = inputs!(i, DestroyQp { qp_id, qp_type, host_ctx_pa: i.u("hw_host_ctx_pa") }
                u [shadow_area_pa] b [ignore_mw_bnd remove_hash_idx]);
            check_post(case, c, lim, none)
        }
        "flush_wqes" => flush_wqes(case, &i, lim),
        "gen_ae" => {
            let c = inputs!(i, GenAe {} n [qp_id ae_code ae_src]);
            check_post(case, c, lim, none)
        }
        "suspend_qp" => check_post(case, SuspendQp { qp_id: tri!(i.n("qp_id")) }, lim, none),
        "resume_qp" => {
            let c = inputs!(i, ResumeQp {} n [qp_id qs_handle]);
            check_post(case, c, lim, none)
        }
        "upload_context" => {
            let c =
                inputs!(i, UploadContext {} n [qp_id qp_type] u [buf_pa] b [freeze_qp raw_format]);
            check_post(case, c, lim, none)
        }
        "qp_setctx_roce" => qp_setctx(case, &i),
        "alloc_stag" => alloc_stag(case, &i, lim),
        "mr_reg_non_shared" => mr_reg_non_shared(case, &i, lim),
        "dealloc_stag" => {
            let c = inputs!(i, DeallocStag { skip_flush: i.b("skip_flush_markers") }
                n [stag_idx pd_id] b [mr]);
            check_post(case, c, lim, none)
        }
        "query_fpm_val" | "commit_fpm_val" => fpm_val(case, &i, op, lim),
        "cfg_iw_fpm(commit buffer)" => cfg_iw_fpm(case, &i),
        "shmc_pages_allocated" => {
            check_post(case, ShmcPagesAllocated { hmc_fn_id: tri!(i.n("hmc_fn_id")) }, lim, none)
        }
        "update_pe_sds" => update_pe_sds(case, &i, lim),
        "query_rdma_features" => {
            let c = QueryRdmaFeatures { buf_pa: i.u("buf.pa"), buf_len: tri!(i.n("buf.size")) };
            check_post(case, c, lim, none)
        }
        "ceq_create" | "ceq_destroy" => ceq_ops(case, &i, op, lim),
        "aeq_create" | "aeq_destroy" => aeq_ops(case, &i, op, lim),
        "cq_create" | "cq_destroy" | "cq_modify" | "ccq_create" | "ccq_destroy" => {
            cq_ops(case, &i, op, lim)
        }
        "manage_arp_add" | "manage_arp_del" => arp_ops(case, &i, op, lim),
        "ws_node" => ws_node(case, &i, lim),
        "create_ah" | "modify_ah" | "destroy_ah" => ah_ops(case, &i, op, lim),
        "create_mcast_grp" | "modify_mcast_grp" | "destroy_mcast_grp" => mcast(case, &i, op, lim),
        "decode_ccq_cqe" => decode_ccq(case, &i),
        "decode_fpm_query_buf" => decode_query(case, &i),
        "decode_fpm_commit_buf" => decode_commit(case, &i),
        "decode_aeqe" => decode_aeqe(case, &i),
        "decode_aeqe_classification" => decode_aeqe_class(case, &i),
        _ => Outcome::Fail(format!("no runner for op {op}")),
    }
}

fn qp_create_or_modify(case: &Value, i: &In, op: &str, lim: Limits) -> Outcome {
    let none = |_: &Cqp<FakeHal, &RecBar>, _: &mut Vec<u64>| Ok(());
    let (qp_id, qp_type) = tri!(qp_common(i));
    let host_ctx_pa = i.u("hw_host_ctx_pa");
    let force_loopback = i.b("force_lpb");
    let next_state = tri!(i.n("next_iwarp_state"));
    if op == "create_qp" {
        let c = inputs!(i, CreateQp {
            qp_id, qp_type, host_ctx_pa, force_loopback, next_state,
        } u [shadow_area_pa]
          b [virtual_map ord_valid tcp_ctx_valid cq_num_valid]
          b [arp_cache_idx_valid mac_valid]);
        check_post(case, c, lim, none)
    } else {
        let c = inputs!(i, ModifyQp {
            qp_id, qp_type, host_ctx_pa, force_loopback, next_state,
        } u [shadow_area_pa]
          b [virtual_map ord_valid tcp_ctx_valid cached_var_valid cq_num_valid]
          b [arp_cache_idx_valid mac_valid mss_change remove_hash_idx reset_tcp_conn]
          b [dont_send_fin dont_send_term]
          n [new_mss termlen]);
        check_post(case, c, lim, none)
    }
}

fn flush_wqes(case: &Value, i: &In, lim: Limits) -> Outcome {
    let none = |_: &Cqp<FakeHal, &RecBar>, _: &mut Vec<u64>| Ok(());
    let req = FlushWqes {
        qp_id: tri!(i.n("qp_id")),
        flush_sq: i.b("sq"),
        flush_rq: i.b("rq"),
        user_codes: if i.b("userflushcode") {
            Some(FlushCodes {
                sq: (tri!(i.n("sq_major_code")), tri!(i.n("sq_minor_code"))),
                rq: (tri!(i.n("rq_major_code")), tri!(i.n("rq_minor_code"))),
            })
        } else {
            None
        },
        generate_ae: if i.b("generate_ae") {
            Some((tri!(i.n("ae_code")), tri!(i.n("ae_src"))))
        } else {
            None
        },
    };
    // The QP's flush bookkeeping decides what is posted (ctrl.c:
    // irdma_sc_qp_flush_wqes; -EALREADY when nothing is left).
    let mut st = FlushState { sq: i.b("qp.flush_sq"), rq: i.b("qp.flush_rq") };
    let before = st;
    let r = st.request(req);
    // The bookkeeping after the call, when the case records it.
    let after = expect(
        &case["outputs"],
        &[
            ("qp.flush_sq(after)", st.sq as u64),
            ("qp.flush_rq(after)", st.rq as u64),
            ("qp.flush_sq", st.sq as u64),
            ("qp.flush_rq", st.rq as u64),
        ],
    );
    if let Outcome::Fail(m) = after {
        return Outcome::Fail(format!("flush state (before {before:?}): {m}"));
    }
    match r {
        Ok(c) => check_post(case, c, lim, none),
        Err(e) if case["ret"].as_i64().unwrap_or(0) < 0 => {
            let _ = e;
            Outcome::Pass
        }
        Err(e) => Outcome::Fail(format!("vendor flushed; we refused: {e:?}")),
    }
}

fn alloc_stag(case: &Value, i: &In, lim: Limits) -> Outcome {
    let none = |_: &Cqp<FakeHal, &RecBar>, _: &mut Vec<u64>| Ok(());
    let chunk = i.u("chunk_size");
    let c = inputs!(i, AllocStag {
        page_size: PageSize::Size4K,
        use_hmc_fn_index: i.b("use_hmc_fcn_index"),
        hmc_fn_index: tri!(i.n("hmc_fcn_index")),
        pbl: if chunk != 0 { Some(tri!(pbl(i, "first_pm_pbl_idx"))) } else { None },
    } n [stag_idx pd_id access_rights placement_type]
      u [total_len] b [remote_access all_memory]);
    // Linux encodes unknown page sizes (incl. 0) as 4 KiB; the driver
    // only has the three real ones.
    let ps = i.u("page_size");
    let page_size = match PageSize::from_bytes(ps) {
        Some(p) => p,
        None if ps == 0 => PageSize::Size4K,
        None => {
            return match check_post(case, c, lim, none) {
                o @ (Outcome::Refused(_) | Outcome::Pass)
                    if case["ret"].as_i64().unwrap_or(0) < 0
                        || matches!(o, Outcome::Refused(_)) =>
                {
                    o
                }
                _ => Outcome::Fail(format!("page size {ps:#x} not supported by the driver")),
            };
        }
    };
    check_post(case, AllocStag { page_size, ..c }, lim, none)
}

fn mr_reg_non_shared(case: &Value, i: &In, lim: Limits) -> Outcome {
    let none = |_: &Cqp<FakeHal, &RecBar>, _: &mut Vec<u64>| Ok(());
    let chunk = i.u("chunk_size");
    let Some(page_size) = PageSize::from_bytes(i.u("page_size")) else {
        // The vendor refuses other page sizes; so does the type.
        return if case["ret"].as_i64().unwrap_or(0) < 0 {
            Outcome::Pass
        } else {
            Outcome::Fail(format!("page size {:#x} accepted by the vendor", i.u("page_size")))
        };
    };
    let c = inputs!(i, RegMr {
        page_size,
        pages: if chunk != 0 {
            MrPages::Pbl(tri!(pbl(i, "first_pm_pbl_index")))
        } else {
            MrPages::Contiguous(i.u("reg_addr_pa"))
        },
        va_based: i.u("addr_type") == 1,
        remote_atomics: i.b("remote_atomics_en"),
        use_hmc_fn_index: i.b("use_hmc_fcn_index"),
        hmc_fn_index: tri!(i.n("hmc_fcn_index")),
    } n [stag_idx stag_key pd_id access_rights placement_type]
      u [va total_len] b [non_cached all_memory]);
    check_post(case, c, lim, none)
}

fn ceq_ops(case: &Value, i: &In, op: &str, lim: Limits) -> Outcome {
    let none = |_: &Cqp<FakeHal, &RecBar>, _: &mut Vec<u64>| Ok(());
    let mem = tri!(queue_addr(i, "ceqe_pa"));
    let ceq_id = tri!(i.n("ceq_id"));
    let elem_cnt = tri!(i.n("elem_cnt"));
    let pasid_valid = i.b("pasid_valid(sc_ceq field)");
    let pasid = tri!(i.n("pasid(sc_ceq field)"));
    if op == "ceq_create" {
        let c = inputs!(i, CreateCeq {
            ceq_id,
            elem_cnt,
            mem,
            vsi_idx: tri!(i.n("vsi.vsi_idx")),
            pasid_valid,
            pasid,
        } b [tph_en itr_no_expire] n [tph_val]);
        check_post(case, c, lim, none)
    } else {
        let c = inputs!(i, DestroyCeq { ceq_id, elem_cnt, mem, pasid_valid, pasid } b [tph_en]);
        check_post(case, c, lim, none)
    }
}

fn aeq_ops(case: &Value, i: &In, op: &str, lim: Limits) -> Outcome {
    let none = |_: &Cqp<FakeHal, &RecBar>, _: &mut Vec<u64>| Ok(());
    let mem = tri!(queue_addr(i, "aeq_elem_pa"));
    let elem_cnt = tri!(i.n("elem_cnt"));
    let pasid_valid = i.b("pasid_valid(sc_aeq field)");
    let pasid = tri!(i.n("pasid(sc_aeq field)"));
    if op == "aeq_create" {
        check_post(case, CreateAeq { elem_cnt, mem, pasid_valid, pasid }, lim, none)
    } else {
        check_post(case, DestroyAeq { elem_cnt, mem, pasid_valid, pasid }, lim, none)
    }
}

fn ws_node(case: &Value, i: &In, lim: Limits) -> Outcome {
    let none = |_: &Cqp<FakeHal, &RecBar>, _: &mut Vec<u64>| Ok(());
    let op = match i.u("node_op") {
        0 => WsNodeOp::Add,
        1 => WsNodeOp::Modify,
        2 => WsNodeOp::Delete,
        v => return Outcome::Refused(format!("node_op {v} is not an operation")),
    };
    let c = inputs!(i, WsNode { op, node_id: tri!(i.n("id")), leaf: i.b("type_leaf") }
        n [parent_id vsi prio_type tc weight] b [enable]);
    check_post(case, c, lim, none)
}

fn ah_ops(case: &Value, i: &In, op: &str, lim: Limits) -> Outcome {
    let none = |_: &Cqp<FakeHal, &RecBar>, _: &mut Vec<u64>| Ok(());
    let ah = tri!(ah_info(i));
    match op {
        "create_ah" => check_post(case, CreateAh(ah), lim, none),
        "modify_ah" => check_post(case, ModifyAh(ah), lim, none),
        _ => check_post(case, DestroyAh(ah), lim, none),
    }
}

fn fpm_val(case: &Value, i: &In, op: &str, lim: Limits) -> Outcome {
    let none = |_: &Cqp<FakeHal, &RecBar>, _: &mut Vec<u64>| Ok(());
    if op == "query_fpm_val" {
        let c = QueryFpmVal { hmc_fn_id: tri!(i.n("hmc_fn_id")), buf_pa: i.u("query_fpm_mem.pa") };
        check_post(case, c, lim, none)
    } else {
        let c = inputs!(i, CommitFpmVal {
            buf_pa: i.u("commit_fpm_mem.pa"),
            flush_timer_disable: i.b("dev.periodic_flush"),
        } n [hmc_fn_id]);
        check_post(case, c, lim, none)
    }
}

fn arp_ops(case: &Value, i: &In, op: &str, lim: Limits) -> Outcome {
    let none = |_: &Cqp<FakeHal, &RecBar>, _: &mut Vec<u64>| Ok(());
    if op == "manage_arp_add" {
        let c = inputs!(i, ArpAdd { mac: i.mac("mac_addr") }
            n [arp_index reach_max] b [permanent]);
        check_post(case, c, lim, none)
    } else {
        check_post(case, ArpDel { arp_index: tri!(i.n("arp_index")) }, lim, none)
    }
}

// ------------------------------------------------------------ UD (AH, multicast)

fn ip4(i: &In, k: &str) -> Result<[u32; 4], String> {
    Ok([
        i.n(&format!("{k}[0]"))?,
        i.n(&format!("{k}[1]"))?,
        i.n(&format!("{k}[2]"))?,
        i.n(&format!("{k}[3]"))?,
    ])
}

/// A queue's ring from the inputs: its address under `pa_key`, the PBL
/// fields under their shared names.
fn queue_addr(i: &In, pa_key: &str) -> Result<QueueAddr, String> {
    Ok(QueueAddr {
        pa: i.u(pa_key),
        virtual_map: i.b("virtual_map"),
        pbl_chunk_size: i.n("pbl_chunk_size")?,
        first_pbl_index: i.n("first_pm_pbl_idx")?,
    })
}

/// An MR's PBL: its level in `chunk_size`, its first index under `first_key`.
fn pbl(i: &In, first_key: &str) -> Result<Pbl, String> {
    Ok(Pbl { level: i.n("chunk_size")?, first_index: i.n(first_key)? })
}

fn ah_info(i: &In) -> Result<AhInfo, String> {
    Ok(AhInfo {
        ah_idx: i.n("ah_idx")?,
        pd_idx: i.n("pd_idx")?,
        dst_arp_index: i.n("dst_arpindex")?,
        dest_ip: ip4(i, "dest_ip_addr")?,
        src_ip: ip4(i, "src_ip_addr")?,
        flow_label: i.n("flow_label")?,
        vlan_tag: i.n("vlan_tag")?,
        insert_vlan_tag: i.b("insert_vlan_tag"),
        tc_tos: i.n("tc_tos")?,
        hop_ttl: i.n("hop_ttl")?,
        mac: i.mac("mac_addr"),
        ipv4: i.b("ipv4_valid"),
        loopback: i.b("do_lpbk"),
    })
}

/// A multicast op: the WQE as any other, plus the 64-byte group context
/// the driver writes from the member table (checked against
/// `host_buffers.mcast_grp_ctx`).
fn mcast(case: &Value, i: &In, op: &str, lim: Limits) -> Outcome {
    let g = McastGrpInfo {
        mg_id: tri!(i.n("mg_id")),
        ipv4: i.b("ipv4_valid"),
        dest_ip: tri!(ip4(i, "dest_ip_addr")),
        dest_mac: i.mac("dest_mac_addr"),
        vlan_id: tri!(i.n("vlan_id")),
        vlan_valid: i.b("vlan_valid"),
        hmc_fn_id: tri!(i.n("hmc_fcn_id")),
        qs_handle: tri!(i.n("qs_handle")),
        ctx_pa: i.u("dma_mem_mc.pa"),
    };
    let mut members = Vec::new();
    for k in 0..8 {
        let p = format!("mg_ctx_info[{k}]");
        if !i.has(&format!("{p}.qp_id")) {
            continue;
        }
        members.push(if i.b(&format!("{p}.valid_entry")) {
            Some(McastMember {
                qp_id: tri!(i.n(&format!("{p}.qp_id"))),
                dest_port: tri!(i.n(&format!("{p}.dest_port"))),
            })
        } else {
            None
        });
    }
    let none = |_: &Cqp<FakeHal, &RecBar>, _: &mut Vec<u64>| Ok(());
    let r = match op {
        "create_mcast_grp" => check_post(case, CreateMcastGrp(g), lim, none),
        "modify_mcast_grp" => check_post(case, ModifyMcastGrp(g), lim, none),
        _ => check_post(case, DestroyMcastGrp(g), lim, none),
    };
    if !matches!(r, Outcome::Pass) || case["ret"].as_i64().unwrap_or(0) < 0 {
        return r;
    }
    if let Some(hb) = case["host_buffers"].get("mcast_grp_ctx") {
        let ctx = match McastGrpInfo::ctx(&members) {
            Ok(c) => c,
            Err(e) => match e.too_wide() {
                Some((field, value, max)) => {
                    return Outcome::Refused(format!("{field}={value:#x} > {max:#x}"));
                }
                None => return Outcome::Fail(format!("group context refused: {e:?}")),
            },
        };
        if let Err(e) = cmp_words(
            "mcast ctx",
            &ctx,
            &words(&hb["words"]),
            Some(&words(&hb["written_byte_mask"])),
        ) {
            return Outcome::Fail(e);
        }
    }
    Outcome::Pass
}

// ------------------------------------------------------------ CQP create

fn cqp_create(case: &Value, i: &In) -> Outcome {
    let ret = case["ret"].as_i64().unwrap_or(0);
    let status = if i.has("CCQPSTATUS(read)") { i.u("CCQPSTATUS(read)") as u32 } else { 1 };
    let bar = RecBar::new(status, i.u("CQPERRCODES(read)") as u32);
    let cfg = tri!(cqp_config(i));
    let r = Cqp::<FakeHal, &RecBar>::create(&bar, &cfg);
    let log = bar.take_log();
    let out = &case["outputs"];
    match (ret, r) {
        (0, Ok(cqp)) => check_created(case, &cqp, &log),
        (0, Err(e)) => match refused(&e) {
            Some(why) => Outcome::Refused(why),
            None => Outcome::Fail(format!("create failed: {e:?}")),
        },
        (_, Ok(_)) => Outcome::Fail(format!("vendor failed (ret {ret}); we created")),
        (_, Err(CqpError::CreateFailed { major, minor })) => {
            let want = (out["maj_err"].as_u64(), out["min_err"].as_u64());
            if want == (Some(major as u64), Some(minor as u64)) {
                Outcome::Pass
            } else {
                Outcome::Fail(format!("create error {major:#x}/{minor:#x}, want {want:?}"))
            }
        }
        (_, Err(CqpError::Encode(_))) if !log.is_empty() => {
            Outcome::Fail("refused after touching registers".into())
        }
        // Refused too (timeout, encode error): vendor-rejected cases pass.
        (_, Err(_)) => Outcome::Pass,
    }
}

/// The CQP's configuration from the case's inputs.
fn cqp_config(i: &In) -> Result<CqpConfig, String> {
    let mut cfg = CqpConfig::gen2_roce(i.u("sq_size") as u32);
    cfg.completion_ctx = i.u("cqp_sw_object_addr(ctx@24)");
    cfg.struct_ver = i.n("struct_ver")?;
    cfg.hmc_profile = i.n("hmc_profile")?;
    cfg.ena_vf_count = i.n("ena_vf_count")?;
    cfg.ceqs_per_vf = i.n("ceqs_per_vf")?;
    cfg.timer_slots = i.n("timer_slots")?;
    cfg.disable_packed = i.b("disable_packed");
    cfg.rocev2_rto_policy = i.b("rocev2_rto_policy");
    cfg.en_rem_endpoint_trk = i.b("en_rem_endpoint_trk");
    cfg.protocol_used = i.n("protocol_used")?;
    cfg.hw_maj_ver = i.n("hw_maj_ver")?;
    cfg.hw_min_ver = i.n("hw_min_ver")?;
    cfg.dcqcn = Dcqcn {
        cc_cfg_valid: i.b("dcqcn.cc_cfg_valid"),
        min_dec_factor: i.n("dcqcn.min_dec_factor")?,
        min_rate: i.n("dcqcn.min_rate")?,
        dcqcn_f: i.n("dcqcn.dcqcn_f")?,
        rai_factor: i.n("dcqcn.rai_factor")?,
        hai_factor: i.n("dcqcn.hai_factor")?,
        dcqcn_t: i.n("dcqcn.dcqcn_t")?,
        dcqcn_b: i.n("dcqcn.dcqcn_b")?,
        rreduce_mperiod: i.n("dcqcn.rreduce_mperiod")?,
    };
    Ok(cfg)
}

/// The register writes the case expects, with the host context at `pa`.
fn want_regs(case: &Value, pa: u64) -> Vec<(usize, u32)> {
    case["reg_writes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    let name = r["name"].as_str().unwrap_or("");
                    let off = num(&r["offset"]).unwrap_or(0) as usize;
                    let v = match name {
                        "PFPE_CCQPHIGH" => (pa >> 32) as u32,
                        "PFPE_CCQPLOW" => pa as u32,
                        _ => num(&r["value"]).unwrap_or(0) as u32,
                    };
                    (off, v)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A created CQP against the vendor's: register writes, host context,
/// encoded SQ size, SD buffer size.
fn check_created(case: &Value, cqp: &Cqp<FakeHal, &RecBar>, log: &[(usize, u32)]) -> Outcome {
    let out = &case["outputs"];
    let pa = cqp.host_ctx_pa();
    if want_regs(case, pa) != log {
        return Outcome::Fail(format!("register writes {log:x?}, want {:x?}", want_regs(case, pa)));
    }
    let hb = &case["host_buffers"]["cqp_host_ctx"];
    let mut want = words(&hb["words"]);
    if let Some(w) = want.get_mut(1) {
        *w = cqp.sq_pa();
    }
    let got = read_bus(pa, 8);
    if let Err(e) = cmp_words("host ctx", &got, &want, Some(&words(&hb["written_byte_mask"]))) {
        return Outcome::Fail(e);
    }
    let enc = CqpHostCtx::encoded_sq_size(cqp.sq_size()).map(u64::from).unwrap_or(u64::MAX);
    if Some(enc) != out.get("hw_sq_size(encoded)").and_then(num) {
        return Outcome::Fail(format!("encoded SQ size {enc}"));
    }
    if Some(cqp.sdbuf().1 as u64) != out.get("sdbuf_size").and_then(num) {
        return Outcome::Fail(format!("sdbuf size {}", cqp.sdbuf().1));
    }
    Outcome::Pass
}

// ------------------------------------------------------------ host contexts

fn qp_setctx(case: &Value, i: &In) -> Outcome {
    let push = i.u("qp.push_idx");
    let c = inputs!(i, QpRoceCtx {
        push_idx: if !i.has("qp.push_idx") || push == 0xffff_ffff {
            None
        } else {
            Some(tri!(i.n("qp.push_idx")))
        },
        use_stats_instance: i.b("stats_idx_valid"),
        mac_addr: i.mac("roce.mac_addr"),
        tos: tri!(i.n("udp.tos(before ECN forcing)")),
        dest_ip_addr: tri!(ip4(i, "udp.dest_ip_addr")),
        local_ipaddr: tri!(ip4(i, "udp.local_ipaddr")),
    } u "qp." [sq_pa rq_pa]
      n "qp." [hw_sq_size hw_rq_size rq_wqe_size sq_tph_val rq_tph_val qs_handle]
      b "qp." [rcv_tph_en xmit_tph_en rq_tph_en sq_tph_en]
      n [send_cq_num rcv_cq_num stats_idx rem_endpoint_idx]
      u [qp_compl_ctx]
      n "roce." [pd_id err_rq_idx roce_tver p_key ack_credits qkey dest_qp rtomin ord_size ird_size]
      n "roce." [t_high t_low]
      b "roce." [dctcp_en dcqcn_en err_rq_idx_valid is_qp1 wr_rdresp_en rd_en fast_reg_en]
      b "roce." [rcv_no_icrc fw_cc_enable udprivcq_en priv_mode_en timely_en]
      b "udp." [ipv4 insert_vlan_tag]
      n "udp." [ttl src_port dst_port snd_mss vlan_tag arp_idx flow_label psn_nxt lsn epsn]
      n "udp." [psn_max psn_una cwnd rexmit_thresh rnr_nak_thresh]);
    let mut got = [0u64; 32];
    if let Err(e) = c.encode(&mut got) {
        return match e.too_wide() {
            Some((field, value, max)) => Outcome::Refused(format!("{field}={value:#x} > {max:#x}")),
            None => Outcome::Fail(format!("{e:?}")),
        };
    }
    let hb = &case["host_buffers"]["qp_host_ctx"];
    if let Err(e) =
        cmp_words("qp ctx", &got, &words(&hb["words"]), Some(&words(&hb["written_byte_mask"])))
    {
        return Outcome::Fail(e);
    }
    let tos = case["outputs"].get("udp.tos(after)").and_then(num);
    if tos.is_some() && tos != Some(c.effective_tos() as u64) {
        return Outcome::Fail(format!("tos after {:#x}, want {tos:?}", c.effective_tos()));
    }
    Outcome::Pass
}

fn cfg_iw_fpm(case: &Value, i: &In) -> Outcome {
    let mut counts = [0u32; HMC_OBJ_COUNT];
    for (k, c) in counts.iter_mut().enumerate() {
        *c = tri!(i.n(&format!("hmc_obj[{k}].cnt")));
    }
    let hb = &case["host_buffers"]["fpm_commit_buf"];
    let mut buf = [0u64; 24];
    encode_fpm_commit(&counts, &mut buf);
    if let Err(e) =
        cmp_words("commit buf", &buf, &words(&hb["words"]), Some(&words(&hb["written_byte_mask"])))
    {
        return Outcome::Fail(e);
    }
    // The vendor parses the buffer right back; bases are 0 (no device).
    let sizes = [0u64; HMC_OBJ_COUNT];
    let parsed = match FpmCommit::decode(&buf, &sizes) {
        Ok(p) => p,
        Err(e) => return Outcome::Fail(format!("{e:?}")),
    };
    let out = &case["outputs"];
    for (k, o) in parsed.obj.iter().enumerate() {
        let wc = out.get(format!("parsed.hmc_obj[{k}].cnt")).and_then(num);
        let wb = out.get(format!("parsed.hmc_obj[{k}].base")).and_then(num);
        if wc.is_some_and(|w| w != o.cnt as u64) || wb.is_some_and(|w| w != o.base) {
            return Outcome::Fail(format!(
                "parsed obj {k}: cnt {} base {:#x}, want {wc:?} {wb:?}",
                o.cnt, o.base
            ));
        }
    }
    let c = CommitFpmVal {
        hmc_fn_id: tri!(i.n("hmc_fn_id")),
        buf_pa: num(&hb["pa"]).unwrap_or(0),
        flush_timer_disable: i.b("dev.periodic_flush"),
    };
    check_post(case, c, Limits::NONE, |_, _| Ok(()))
}

fn update_pe_sds(case: &Value, i: &In, lim: Limits) -> Outcome {
    let n = i.u("cnt") as usize;
    let mut entries = Vec::new();
    for k in 0..n {
        entries.push(SdEntry {
            cmd: tri!(i.n(&format!("entry[{k}].cmd"))),
            data: i.u(&format!("entry[{k}].data")),
        });
    }
    let c = UpdatePeSds { hmc_fn_id: tri!(i.n("hmc_fn_id")), entries: &entries };
    let slot = num(&case["cqp"]["slot"]).unwrap_or(0);
    let their_slot = i.u("cqp.sdbuf.pa") + slot * 128;
    let sdbuf = case["host_buffers"]
        .as_object()
        .and_then(|o| o.iter().find(|(k, _)| k.starts_with("cqp_sdbuf")).map(|(_, v)| v.clone()));
    check_post(case, c, lim, move |cqp, want| {
        let ours = cqp.sdbuf().0 + slot * 128;
        if n > 3
            && let Some(w) = want.get_mut(2)
        {
            *w = w.wrapping_sub(their_slot).wrapping_add(ours);
        }
        if let Some(hb) = sdbuf {
            let got = read_bus(ours, 8);
            cmp_words(
                "sd overflow",
                &got,
                &words(&hb["words"]),
                Some(&words(&hb["written_byte_mask"])),
            )?;
        }
        Ok(())
    })
}

fn cq_ops(case: &Value, i: &In, op: &str, lim: Limits) -> Outcome {
    let ccq = op.starts_with("ccq");
    let ctx_key =
        if ccq { "ccq_sw_object_addr(@8 = addr>>1)" } else { "cq_sw_object_addr(@8 = addr>>1)" };
    let cq_ctx = i.u(ctx_key) >> 1;
    let cq_id: u32 = if i.has("cq_id(override)") {
        tri!(i.n("cq_id(override)"))
    } else if ccq {
        0
    } else {
        tri!(i.n("cq_id"))
    };
    let size: u32 = if ccq { tri!(i.n("num_elem")) } else { tri!(i.n("cq_size")) };
    let ret = case["ret"].as_i64().unwrap_or(0);
    if matches!(op, "cq_create" | "ccq_create")
        && !i.b("ceq_id_valid")
        && i.u("ceq_id") >= u64::from(lim.ceq_count)
    {
        // irdma_sc_cq_create / irdma_sc_ccq_init check ceq_id against
        // max_ceqs even without CEQIDVALID. The driver's `ceq_id: None`
        // carries no id, so it cannot express this input at all.
        return if ret < 0 {
            Outcome::Pass
        } else {
            Outcome::Fail("vendor accepted a CEQ id the driver cannot carry".into())
        };
    }
    let ceq_id = if i.b("ceq_id_valid") { Some(tri!(i.n("ceq_id"))) } else { None };
    let ring = tri!(queue_addr(i, "cq_pa"));
    let none = |_: &Cqp<FakeHal, &RecBar>, _: &mut Vec<u64>| Ok(());
    match op {
        "cq_create" | "ccq_create" => {
            let c = inputs!(i, CreateCq {
                cq_id,
                cq_size: size,
                cq_ctx,
                ceq_id,
                ring,
                vsi_idx: tri!(i.n("vsi.vsi_idx")),
            } b [ceqe_mask check_overflow tph_en avoid_mem_cflct pasid_valid]
              n [shadow_read_threshold tph_val pasid] u [shadow_area_pa]);
            if op == "ccq_create"
                && let Err(e) = c.check_ccq()
            {
                // The engine's CCQ create runs this check before posting.
                return match (ret < 0, e.too_wide()) {
                    (true, _) => Outcome::Pass,
                    (false, Some((field, value, max))) => {
                        Outcome::Refused(format!("{field}={value:#x} > {max:#x}"))
                    }
                    (false, None) => Outcome::Fail(format!("vendor accepted; we refused: {e:?}")),
                };
            }
            check_post(case, c, lim, none)
        }
        "cq_destroy" => {
            let c = inputs!(i, DestroyCq { cq_id, cq_size: size, cq_ctx, ceq_id, ring }
                b [ceqe_mask tph_en avoid_mem_cflct pasid_valid] n [pasid] u [shadow_area_pa]);
            check_post(case, c, lim, none)
        }
        "ccq_destroy" => {
            let c = inputs!(i, DestroyCcq { cq_size: size, cq_ctx, ceq_id }
                b [ceqe_mask tph_en avoid_mem_cflct] u [shadow_area_pa]);
            check_post(case, c, lim, none)
        }
        _ => cq_modify(case, i, lim, cq_id, cq_ctx),
    }
}

/// `cq_modify`: the resize and threshold inputs on the CQ's ids.
fn cq_modify(case: &Value, i: &In, lim: Limits, cq_id: u32, cq_ctx: u64) -> Outcome {
    let none = |_: &Cqp<FakeHal, &RecBar>, _: &mut Vec<u64>| Ok(());
    let c = inputs!(i, ModifyCq {
        cq_id,
        cq_ctx,
        new_size: tri!(i.n("modify.cq_size")),
        new_shadow_read_threshold: tri!(i.n("modify.shadow_read_threshold")),
        resize: i.b("modify.cq_resize"),
        new_ring_pa: i.u("modify.cq_pa"),
        new_first_pbl_index: tri!(i.n("modify.first_pm_pbl_idx")),
        new_pbl_level: tri!(i.n("modify.pbl_chunk_size")),
        new_virtual_map: i.b("modify.virtual_map"),
        vsi_idx: tri!(i.n("vsi.vsi_idx")),
    } b "modify." [check_overflow]
      b [ceqe_mask tph_en avoid_mem_cflct pasid_valid]
      n [tph_val pasid] u [shadow_area_pa]);
    check_post(case, c, lim, none)
}

// ------------------------------------------------------------ decoders

fn expect(out: &Value, fields: &[(&str, u64)]) -> Outcome {
    for (k, got) in fields {
        if let Some(w) = out.get(*k).and_then(num)
            && w != *got
        {
            return Outcome::Fail(format!("{k}: got {got:#x}, want {w:#x}"));
        }
    }
    Outcome::Pass
}

/// A ring entry decoded for the ring's polarity (`decoded`), against the
/// vendor's return: taken when both found it valid; else the case's outcome
/// — both found it not valid (the vendor's -ENOENT) passes when the case's
/// `unchanged` outputs (the ring's index and polarity) are as they were.
fn valid_entry<T>(
    case: &Value,
    what: &str,
    decoded: Option<T>,
    unchanged: &[(&str, u64)],
) -> Result<T, Outcome> {
    match (decoded, case["ret"].as_i64().unwrap_or(0)) {
        (Some(e), 0) => Ok(e),
        (None, -2) => Err(expect(&case["outputs"], unchanged)),
        (None, r) => Err(Outcome::Fail(format!("{what} not valid for the polarity; vendor {r}"))),
        (Some(_), r) => Err(Outcome::Fail(format!("vendor ret {r}; we decoded the {what}"))),
    }
}

fn decode_ccq(case: &Value, i: &In) -> Outcome {
    let w: [u64; 4] = arr(&words(&case["inputs"]["cqe_words"]));
    let pol = i.b("ccq.cq_uk.polarity");
    let size = if i.has("ccq.cq_ring.size") { i.u("ccq.cq_ring.size") as u32 } else { 2050 };
    // ctrl.c: irdma_sc_ccq_get_cqe_info: valid bit != polarity is -ENOENT
    // with nothing consumed.
    let unchanged =
        [("ccq.cq_ring.head(after)", i.u("ccq.cq_ring.head")), ("ccq.polarity(after)", pol as u64)];
    let c = match valid_entry(case, "CQE", CcqCqe::decode(&w, pol), &unchanged) {
        Ok(c) => c,
        Err(o) => return o,
    };
    let mut ring = RingConsumer { size, head: i.u("ccq.cq_ring.head") as u32, polarity: pol };
    let head = ring.advance();
    // The opcode comes from the driver's own SQ WQE at WQEIDX.
    let opcode = hdr::OPCODE.get(i.u("cqp.sq[wqe_idx].word24"));
    expect(
        &case["outputs"],
        &[
            ("error", c.error as u64),
            ("maj_err_code", c.major as u64),
            ("min_err_code", c.minor as u64),
            ("op_ret_val", c.op_ret_val as u64),
            ("op_code", opcode),
            ("cqp", c.compl_ctx),
            ("ccq.cq_ring.head(after)", head as u64),
            ("ccq.polarity(after)", ring.polarity as u64),
            ("ccq.shadow_area[0](after)", head as u64),
        ],
    )
}

fn decode_query(case: &Value, i: &In) -> Outcome {
    let buf: [u64; 24] = arr(&words(&case["inputs"]["query_buf"]));
    let ver2 = i.u("feature_info[FTN_FLAGS]") & 4 != 0;
    let vf = i.has("first_hw_vf_fpm_id") && i.u("hmc_info.hmc_fn_id") >= i.u("first_hw_vf_fpm_id");
    let unpriv = i.has("dev.privileged") && !i.b("dev.privileged");
    let r = FpmQuery::decode(&buf, ver2, vf || unpriv);
    let ret = case["ret"].as_i64().unwrap_or(0);
    let q = match (ret, r) {
        (0, Ok(q)) => q,
        (0, Err(e)) => return Outcome::Fail(format!("refused: {e:?}")),
        (_, Err(_)) => return Outcome::Pass,
        (_, Ok(_)) => return Outcome::Fail(format!("vendor refused (ret {ret}); we decoded")),
    };
    let mut f: Vec<(String, u64)> = vec![
        ("first_sd_index".into(), q.first_sd_index as u64),
        ("sd_table.sd_cnt".into(), q.sd_cnt as u64),
        ("fpm_misc.max_sds".into(), q.max_sds as u64),
        ("fpm_misc.max_ceqs".into(), q.max_ceqs as u64),
        ("fpm_misc.ht_multiplier".into(), q.ht_multiplier as u64),
        ("fpm_misc.timer_bucket".into(), q.timer_bucket as u64),
        ("fpm_misc.xf_block_size".into(), q.xf_block_size as u64),
        ("fpm_misc.q1_block_size".into(), q.q1_block_size as u64),
        ("fpm_misc.rrf_block_size".into(), q.rrf_block_size as u64),
        ("fpm_misc.ooiscf_block_size".into(), q.ooiscf_block_size as u64),
        ("fpm_misc.ird".into(), q.ird.unwrap_or(0) as u64),
        ("hw_attrs.max_hw_ird".into(), q.max_hw_ird() as u64),
    ];
    for (k, o) in q.obj.iter().enumerate() {
        f.push((format!("hmc_obj[{k}].max_cnt"), o.max_cnt as u64));
        f.push((format!("hmc_obj[{k}].size"), o.size));
    }
    let refs: Vec<(&str, u64)> = f.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    expect(&case["outputs"], &refs)
}

fn decode_commit(case: &Value, i: &In) -> Outcome {
    let buf: [u64; 24] = arr(&words(&case["inputs"]["commit_buf"]));
    let mut sizes = [0u64; HMC_OBJ_COUNT];
    for (k, s) in sizes.iter_mut().enumerate() {
        *s = i.u(&format!("hmc_obj[{k}].size"));
    }
    let c = match FpmCommit::decode(&buf, &sizes) {
        Ok(c) => c,
        Err(e) => return Outcome::Fail(format!("{e:?}")),
    };
    let mut f: Vec<(String, u64)> = vec![("sd".into(), c.sd_cnt as u64)];
    for (k, o) in c.obj.iter().enumerate() {
        f.push((format!("hmc_obj[{k}].cnt"), o.cnt as u64));
        f.push((format!("hmc_obj[{k}].base"), o.base));
    }
    let refs: Vec<(&str, u64)> = f.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    expect(&case["outputs"], &refs)
}

fn aeqe_fields(prefix: &str, a: &Aeqe) -> Vec<(String, u64)> {
    let p = |k: &str| format!("{prefix}{k}");
    vec![
        (p("compl_ctx"), a.compl_ctx),
        (p("qp_cq_id"), a.qp_cq_id as u64),
        (p("wqe_idx"), a.wqe_idx as u64),
        (p("def_info"), a.def_info as u64),
        (p("ae_id"), a.ae_id as u64),
        (p("tcp_state"), a.tcp_state as u64),
        (p("iwarp_state"), a.iwarp_state as u64),
        (p("qp"), a.qp as u64),
        (p("cq"), a.cq as u64),
        (p("sq"), a.sq as u64),
        (p("rq"), a.rq as u64),
        (p("srq"), a.srq as u64),
        (p("in_rdrsp_wr"), a.in_rdrsp_wr as u64),
        (p("out_rdrsp"), a.out_rdrsp as u64),
        (p("aeqe_overflow"), a.overflow as u64),
        (p("err_rq_idx_valid"), a.err_rq_idx_valid as u64),
        (p("q2_data_written"), a.q2_data_written as u64),
        (p("ae_src"), a.ae_src as u64),
    ]
}

fn decode_aeqe(case: &Value, i: &In) -> Outcome {
    let w: [u64; 2] = arr(&words(&case["inputs"]["aeqe_words"]));
    let pol = i.b("aeq.polarity");
    // ctrl.c: irdma_sc_get_next_aeqe: valid bit != polarity is -ENOENT
    // with the tail and polarity unchanged.
    let unchanged =
        [("aeq.ring.tail(after)", i.u("aeq.ring.tail")), ("aeq.polarity(after)", pol as u64)];
    let a = match valid_entry(case, "AEQE", Aeqe::decode(&w, pol), &unchanged) {
        Ok(a) => a,
        Err(o) => return o,
    };
    let mut ring = RingConsumer {
        size: i.u("aeq.ring.size") as u32,
        head: i.u("aeq.ring.tail") as u32,
        polarity: pol,
    };
    let tail = ring.advance();
    let mut f = aeqe_fields("", &a);
    f.push(("aeq.ring.tail(after)".into(), tail as u64));
    f.push(("aeq.polarity(after)".into(), ring.polarity as u64));
    let refs: Vec<(&str, u64)> = f.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    expect(&case["outputs"], &refs)
}

fn decode_aeqe_class(case: &Value, i: &In) -> Outcome {
    let w0 = i.u("aeqe.word0");
    let mut f = Vec::new();
    for src in ["src0.", "src5."] {
        let a = Aeqe::classify(w0, i.u(&format!("{src}aeqe.word8")));
        f.extend(aeqe_fields(src, &a));
    }
    let refs: Vec<(&str, u64)> = f.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    expect(&case["outputs"], &refs)
}

// ------------------------------------------------------------ driver

/// Runs every case of a `cqp-vectors.json` document.
pub fn run(v: &Value) -> Result<Tally, String> {
    let cases = v.get("cases").and_then(Value::as_array).ok_or("no cases[]")?;
    let mut t = Tally::default();
    let mut refused_n = 0;
    let mut skip_reasons: Vec<(&str, &str, usize)> = Vec::new();
    for c in cases {
        let name =
            format!("{}/{}", c["op"].as_str().unwrap_or("?"), c["case"].as_str().unwrap_or("?"));
        match run_case(c) {
            Outcome::Pass => t.passed += 1,
            Outcome::Refused(why) => {
                t.passed += 1;
                refused_n += 1;
                if std::env::var_os("IRDMA_CONFORMANCE_VERBOSE").is_some() {
                    println!("ok   {name}: refused over-wide input ({why})");
                }
            }
            Outcome::Fail(why) => {
                t.failed += 1;
                println!("FAIL {name}: {why}");
            }
            Outcome::Skip(why) => {
                t.skipped += 1;
                let op = c["op"].as_str().unwrap_or("?");
                match skip_reasons.iter_mut().find(|(o, _, _)| *o == op) {
                    Some(e) => e.2 += 1,
                    None => skip_reasons.push((
                        SKIPS.iter().find(|s| s.0 == op).map_or("?", |s| s.0),
                        why,
                        1,
                    )),
                }
            }
        }
    }
    for (op, why, n) in &skip_reasons {
        println!("skip {op} ({n} case{}): {why}", if *n == 1 { "" } else { "s" });
    }
    println!(
        "({refused_n} of the passes are inputs wider than their field, refused with a typed error)"
    );
    Ok(t)
}
