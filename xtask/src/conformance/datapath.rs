//! Runner for `datapath-vectors.json` (schema 1, see the vectors' README).
//!
//! Every case drives the driver's real data-path code — `irdma::uk::Sq::post`
//! (what `post_send` calls for each WR), `Rq::post`, `CqRing::poll_one`,
//! `CqRing::request_notification` and the sizing helpers — on rings that live in
//! host memory, then compares what it wrote with the vendor's bytes.

use std::collections::BTreeMap;
use std::ptr::NonNull;

use irdma::hal::regs;
use irdma::uk::cq::CompStatus;
use irdma::uk::qp::{QpKind, QpUk, flush_status, to_work_completion};
use irdma::uk::sizing;
use irdma::uk::sq::{SendKind, SqError, SqOp, SqPost, SqWrTrk, WqeSize, size_post};
use irdma::uk::{CqRing, PollError, QueueMem, QueueType, Rq, RqError, Sq};
use irdma::wr::{Sge, WcStatus};
use irdma_testkit::RecBar;
use serde_json::Value;

use super::Tally;

/// The completion context our QP uses; the vectors' `0x10000000` is
/// replaced by it in every CQE the runner writes.
const OUR_CTX: u64 = 0x5eed_c0de_0000_1000;
const VENDOR_CTX: u64 = 0x1000_0000;

fn num(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => {
            let s = s.trim();
            match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            }
        }
        Value::Bool(b) => Some(*b as u64),
        _ => None,
    }
}

fn get(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(num).unwrap_or(0)
}

fn flag(v: &Value, k: &str) -> bool {
    get(v, k) != 0
}

/// Host memory for one QP + CQ, sized from a config.
struct World {
    sq_mem: Vec<u64>,
    sq_trk: Vec<SqWrTrk>,
    rq_mem: Vec<u64>,
    rq_wrid: Vec<u64>,
    cq_mem: Vec<u64>,
    shadow: Vec<u64>,
    cfg: Value,
}

/// What SQ/RQ ring memory holds before a case (0xA5 bytes).
const RING_PATTERN: u64 = 0xA5A5_A5A5_A5A5_A5A5;

fn mem(v: &mut [u64]) -> QueueMem<'_> {
    let base = NonNull::new(v.as_mut_ptr()).unwrap_or(NonNull::dangling());
    // SAFETY: the vector is mutably borrowed for the view's lifetime, so
    // nothing else touches it; its pointer is 8-aligned and valid for len qwords.
    unsafe { QueueMem::from_raw(base, v.len()) }
}

impl World {
    fn new(cfg: &Value) -> World {
        let sq = get(cfg, "sq_ring_quanta") as usize;
        let rq = get(cfg, "rq_size") as usize;
        let mult = get(cfg, "rq_wqe_size_multiplier").max(1) as usize;
        let cq = get(cfg, "cq_size") as usize;
        World {
            // SQ and RQ rings start filled with a pattern, not zeros, so a
            // word an encoder forgets to write shows in `val & mask`
            // (issue #19); the CQ ring stays zeroed (its valid bits are
            // what the device writes, and a patterned CQE would be read).
            sq_mem: vec![RING_PATTERN; sq * 4],
            sq_trk: vec![SqWrTrk::default(); sq],
            rq_mem: vec![RING_PATTERN; rq * mult * 4],
            rq_wrid: vec![0; rq],
            cq_mem: vec![0; cq * 4],
            shadow: vec![0; 8],
            cfg: cfg.clone(),
        }
    }

    fn parts(&mut self) -> Result<(QpUk<'_>, CqRing<'_>), String> {
        let c = &self.cfg;
        let (sq_q, frags, inl, qp_id) = (
            get(c, "sq_ring_quanta") as u32,
            get(c, "max_sq_frag_cnt") as u32,
            get(c, "max_inline_data") as u32,
            get(c, "qp_id") as u32,
        );
        let (rq_n, shift, rfr) =
            (get(c, "rq_size") as u32, get(c, "rq_shift") as u8, get(c, "max_rq_frag_cnt") as u32);
        let (cq_n, cq_id) = (get(c, "cq_size") as u32, get(c, "cq_id") as u32);
        let kind = if get(c, "qp_type") == 4 { QpKind::Ud } else { QpKind::Rc };
        let mut sq = Sq::new(mem(&mut self.sq_mem), &mut self.sq_trk, sq_q, frags, inl, qp_id)
            .map_err(|e| format!("SQ set-up: {e:?}"))?;
        // SAFETY: the runner only posts inline SGEs whose addresses point at
        // live host buffers it built for the case (see `inline_sges`).
        unsafe { sq.enable_inline() };
        let rq = Rq::new(mem(&mut self.rq_mem), &mut self.rq_wrid, rq_n, shift, rfr)
            .map_err(|e| format!("RQ set-up: {e:?}"))?;
        let cq = CqRing::new(mem(&mut self.cq_mem), mem(&mut self.shadow), cq_n, cq_id)
            .map_err(|e| format!("CQ set-up: {e:?}"))?;
        Ok((QpUk::new(sq, rq, OUR_CTX, kind), cq))
    }
}

/// SGEs of an input, with inline payloads placed in `bufs` (host memory the
/// SGE addresses then point at).
fn sges_of(input: &Value, bufs: &mut Vec<Vec<u8>>) -> Vec<Sge> {
    let list: Vec<Sge> = input
        .get("sges")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|s| Sge {
                    addr: get(s, "addr"),
                    length: get(s, "length") as u32,
                    lkey: get(s, "lkey") as u32,
                })
                .collect()
        })
        .unwrap_or_default();
    let n = get(input, "num_sges") as usize;
    let mut list: Vec<Sge> = list.into_iter().take(n).collect();
    if let Some(hex) = input.get("inline_data").and_then(Value::as_str) {
        let data: Vec<u8> = (0..hex.len() / 2)
            .filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
            .collect();
        let mut off = 0usize;
        for s in &mut list {
            let len = s.length as usize;
            let chunk =
                data.get(off..off + len).map(<[u8]>::to_vec).unwrap_or_else(|| vec![0; len]);
            off += len;
            bufs.push(chunk);
            s.addr = bufs.last().map_or(0, |b| b.as_ptr() as u64);
        }
    }
    list
}

/// What the runner does with one vendor post.
enum Mapped<'s> {
    Post(SqPost<'s>),
    /// An operation E810 refuses by design; the reason is printed.
    Refused(SqPost<'s>, &'static str),
}

fn map_post<'s>(input: &Value, sges: &'s [Sge]) -> Result<Mapped<'s>, String> {
    let api = input.get("api").and_then(Value::as_str).unwrap_or("");
    let opt = get(input, "op_type") as u8;
    let imm = flag(input, "imm_data_valid").then(|| get(input, "imm_data") as u32);
    let inline = api.contains("inline");
    let op = match api {
        "irdma_uk_rdma_write" | "irdma_uk_inline_rdma_write" => SqOp::Write {
            remote_addr: get(input, "remote_addr"),
            rkey: get(input, "rkey") as u32,
            solicited: opt == 0x0d,
            sges,
            inline,
        },
        "irdma_uk_rdma_read" => SqOp::Read {
            remote_addr: get(input, "remote_addr"),
            rkey: get(input, "rkey") as u32,
            local_inv: opt == 0x0b || flag(input, "inv_stag (READ_LOC_INV)"),
            sges,
        },
        "irdma_uk_send" | "irdma_uk_inline_send" => SqOp::Send {
            kind: SendKind { solicited: opt == 5 || opt == 6, invalidate: opt == 4 || opt == 6 },
            stag_to_inv: get(input, "stag_to_inv") as u32,
            qkey: get(input, "qkey") as u32,
            dest_qp: get(input, "dest_qp") as u32,
            ah_id: get(input, "ah_id") as u32,
            udp_hdr: flag(input, "udp_hdr"),
            l4len: get(input, "l4len") as u8,
            sges,
            inline,
        },
        "irdma_uk_stag_local_invalidate" => {
            SqOp::LocalInv { stag: get(input, "target_stag") as u32 }
        }
        "irdma_nop" => SqOp::Nop,
        "irdma_uk_atomic_fetch_add" | "irdma_uk_atomic_compare_swap" => SqOp::Atomic,
        "irdma_uk_mw_bind" => SqOp::BindMw,
        other => return Err(format!("unknown api {other}")),
    };
    let p = SqPost {
        wr_id: get(input, "wr_id"),
        op,
        signaled: flag(input, "signaled"),
        read_fence: flag(input, "read_fence"),
        local_fence: flag(input, "local_fence"),
        report_rtt: flag(input, "report_rtt"),
        imm,
    };
    Ok(match op {
        SqOp::Atomic => Mapped::Refused(p, "atomics: E810 has no IRDMA_FEATURE_ATOMIC_OPS"),
        SqOp::BindMw => Mapped::Refused(p, "memory windows: refused by the E810 kernel path"),
        _ => Mapped::Post(p),
    })
}

fn errno_of_sq(e: SqError) -> u64 {
    match e {
        SqError::Full => 12,
        _ => 22,
    }
}

fn errno_of_rq(e: RqError) -> u64 {
    match e {
        RqError::Full => 12,
        RqError::TooManySges | RqError::InvalidField => 22,
    }
}

/// Compares `val & mask` for each word of `words` against ring memory at
/// qword `base`; `Err` names the first difference.
fn check_words(m: &QueueMem<'_>, base: usize, words: &Value, what: &str) -> Result<(), String> {
    for w in words.as_array().into_iter().flatten() {
        let off = get(w, "off") as usize;
        let (val, mask) = (get(w, "val"), w.get("mask").and_then(num).unwrap_or(u64::MAX));
        let got = m.read(base + off / 8);
        if got & mask != val & mask {
            return Err(format!(
                "{what} word +{off}: got {:#018x}, want {:#018x} (mask {:#018x})",
                got & mask,
                val & mask,
                mask
            ));
        }
    }
    Ok(())
}

fn expect_eq<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want { Ok(()) } else { Err(format!("{what}: got {got:?}, want {want:?}")) }
}

/// Filler posts as the vendor harness did: one-SGE unsignaled RDMA WRITEs
/// with the doorbell, each consumed at once.
fn fill_sq(qp: &mut QpUk<'_>, bar: &RecBar, k: u64) -> Result<(), String> {
    let s = [Sge { addr: 0x7f00_0010_0040, length: 256, lkey: 0xabcd00 }];
    for _ in 0..k {
        let p = SqPost::new(
            0xf111,
            SqOp::Write {
                remote_addr: 0x7e00_0020_0000,
                rkey: 1,
                solicited: false,
                sges: &s,
                inline: false,
            },
        );
        qp.sq.post(&p).map_err(|e| format!("filler post: {e:?}"))?;
        qp.sq.ring_doorbell(bar);
        qp.sq.consume_all();
    }
    bar.take();
    Ok(())
}

enum Outcome {
    Pass,
    Skip(String),
}

fn skip_reason(case: &Value, cfg: &Value) -> Option<String> {
    let name = case.get("name").and_then(Value::as_str).unwrap_or("");
    if get(cfg, "first_sq_wq") != 0 || cfg.get("name").and_then(Value::as_str) == Some("iwarp_lsmm")
    {
        return Some("iWARP LSMM connection WQEs: out of scope for a RoCE driver".into());
    }
    if case.get("input").is_some_and(|i| i.get("sg_list_entry0_when_num_sges_0").is_some()) {
        return Some(
            "sg_list_entry0_when_num_sges_0: a zero-length slice has no first entry".into(),
        );
    }
    let long_sge = case
        .get("input")
        .and_then(|i| i.get("sges"))
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|s| get(s, "length") > 0x7fff_ffff));
    if long_sge {
        return Some(
            "SGE length above FRAG_LEN's 31 bits: the vendor truncates it, the driver refuses \
             it (SqError::InvalidField; uk test sge_length_over_31_bits_is_refused_not_truncated)"
                .into(),
        );
    }
    if name.starts_with("sq_never_full@") {
        return Some(
            "vendor free-space underflow on rings under 258 quanta; we report full".into(),
        );
    }
    None
}

/// Our post's result `r` against the vendor's return value `want_ret`:
/// `Some` of what we posted where both posted, `None` where both refused
/// with the same errno (`errno` maps ours), else the difference.
fn both_posted<P, E: std::fmt::Debug>(
    what: &str,
    r: Result<P, E>,
    want_ret: u64,
    errno: impl Fn(E) -> u64,
) -> Result<Option<P>, String> {
    match (r, want_ret) {
        (Err(e), w) if w != 0 => expect_eq("errno", errno(e), w).map(|()| None),
        (Err(e), _) => Err(format!("{what} failed with {e:?}, vendor succeeded")),
        (Ok(_), w) if w != 0 => Err(format!("{what} succeeded, vendor returned {w}")),
        (Ok(p), _) => Ok(Some(p)),
    }
}

fn run_sq_case(case: &Value, cfg: &Value) -> Result<Outcome, String> {
    let mut w = World::new(cfg);
    let (mut qp, _cq) = w.parts()?;
    let bar = RecBar::default();
    fill_sq(&mut qp, &bar, get(&case["history"], "filler_posts"))?;
    let one = dummy_sges(1);
    for _ in 0..get(&case["history"], "filler_posts_outstanding") {
        let op =
            SqOp::Write { remote_addr: 1, rkey: 2, solicited: false, sges: &one, inline: false };
        qp.sq.post(&SqPost::new(0xf555, op)).map_err(|e| format!("outstanding filler: {e:?}"))?;
    }
    bar.take();
    let sb = &case["state_before"];
    expect_eq("sq_head before", u64::from(qp.sq.head()), get(sb, "sq_head"))?;
    expect_eq("sq_tail before", u64::from(qp.sq.tail()), get(sb, "sq_tail"))?;
    let input = &case["input"];
    let out = &case["output"];
    let mut bufs = Vec::new();
    let sges = sges_of(input, &mut bufs);
    let post = match map_post(input, &sges)? {
        Mapped::Post(p) => p,
        Mapped::Refused(p, why) => {
            let head = qp.sq.head();
            return match qp.sq.post(&p) {
                Err(SqError::Unsupported) if qp.sq.head() == head => Ok(Outcome::Skip(why.into())),
                other => Err(format!("{why}, but the driver returned {other:?}")),
            };
        }
    };
    let want_ret = get(out, "ret");
    let head = qp.sq.head();
    let r = qp.sq.post(&post);
    if flag(input, "post_sq") && r.is_ok() {
        qp.sq.ring_doorbell(&bar);
    }
    let Some(posted) = both_posted("post", r, want_ret, errno_of_sq)? else {
        expect_eq("head unchanged", qp.sq.head(), head)?;
        expect_eq("doorbell", bar.take(), vec![])?;
        return Ok(Outcome::Pass);
    };
    expect_eq("wqe_idx", u64::from(posted.wqe_idx), get(out, "wqe_idx"))?;
    expect_eq("wqe_size_quanta", u64::from(posted.quanta), get(out, "wqe_size_quanta"))?;
    expect_eq("valid_bit", u64::from(posted.valid), get(out, "valid_bit"))?;
    let pads = out.get("nop_pad").and_then(Value::as_array).cloned().unwrap_or_default();
    expect_eq("nop pad count", posted.pad as usize, pads.len())?;
    let m = qp.sq.mem();
    for p in &pads {
        let slot = get(p, "slot") as usize;
        check_words(m, slot * 4, &p["words"], &format!("nop pad slot {slot}"))?;
    }
    let slot = get(&out["wqe"], "slot") as usize;
    check_words(m, slot * 4, &out["wqe"]["words"], "wqe")?;
    let trk = &out["sq_wrtrk"];
    let t = qp.sq.trk(posted.wqe_idx).copied().unwrap_or_default();
    expect_eq("sq_wrtrk.wrid", t.wr_id, get(trk, "wrid"))?;
    expect_eq("sq_wrtrk.wr_len", u64::from(t.wr_len), get(trk, "wr_len"))?;
    expect_eq("sq_wrtrk.quanta", u64::from(t.quanta), get(trk, "quanta"))?;
    let db: Vec<(usize, u32)> = bar.take();
    let want_db = if flag(out, "doorbell_written") {
        vec![(regs::WQEALLOC, get(out, "doorbell_value") as u32)]
    } else {
        vec![]
    };
    expect_eq("doorbell writes", db, want_db)?;
    let sa = &out["state_after"];
    expect_eq("sq_head after", u64::from(qp.sq.head()), get(sa, "sq_head"))?;
    expect_eq("sq_tail after", u64::from(qp.sq.tail()), get(sa, "sq_tail"))?;
    Ok(Outcome::Pass)
}

fn dummy_sges(n: usize) -> Vec<Sge> {
    (0..n)
        .map(|i| Sge {
            addr: 0x7d00_0030_0080 + ((i as u64) << 16),
            length: 512,
            lkey: 0xcafe00 + i as u32,
        })
        .collect()
}

fn run_rq_case(case: &Value, cfg: &Value) -> Result<Outcome, String> {
    let mut w = World::new(cfg);
    let (mut qp, _cq) = w.parts()?;
    let h = &case["history"];
    let one = dummy_sges(1);
    for _ in 0..get(h, "filler_posts_consumed") {
        qp.rq.post(0xf222, &one).map_err(|e| format!("filler: {e:?}"))?;
        qp.rq.consume_all();
    }
    for _ in 0..get(h, "filler_posts_outstanding") {
        qp.rq.post(0xf333, &one).map_err(|e| format!("filler: {e:?}"))?;
    }
    let input = &case["input"];
    let out = &case["output"];
    let mut bufs = Vec::new();
    let sges = sges_of(input, &mut bufs);
    let want_ret = get(out, "ret");
    let r = qp.rq.post(get(input, "wr_id"), &sges);
    let Some(p) = both_posted("post_recv", r, want_ret, errno_of_rq)? else {
        return Ok(Outcome::Pass);
    };
    expect_eq("wqe_idx", u64::from(p.wqe_idx), get(out, "wqe_idx"))?;
    expect_eq("quantum_slot", u64::from(p.quantum), get(out, "quantum_slot"))?;
    expect_eq("valid_bit", u64::from(p.valid), get(out, "valid_bit"))?;
    expect_eq("rq wqe bytes", u64::from(qp.rq.multiplier()) * 32, get(out, "rq_wqe_size_bytes"))?;
    let slot = get(&out["wqe"], "slot") as usize;
    check_words(qp.rq.mem(), slot * 4, &out["wqe"]["words"], "rq wqe")?;
    expect_eq(
        "rq_wrid_array entry",
        qp.rq.wr_id(p.wqe_idx),
        Some(get(out, "rq_wrid_array_entry")),
    )?;
    let sa = &out["state_after"];
    expect_eq("rq_head after", u64::from(qp.rq.head()), get(sa, "rq_head"))?;
    expect_eq("rq_tail after", u64::from(qp.rq.tail()), get(sa, "rq_tail"))?;
    Ok(Outcome::Pass)
}

/// One `calc_depth_shift` queue: the driver's sizing `got` against the
/// row's `{q}_ret`, and on success its `{q}_depth_quanta`, `{q}_shift`,
/// `{q}_size_passed_to_qp_init` and `reported`.
fn depth_row(
    r: &Value,
    what: &str,
    got: Result<sizing::WqSizing, sizing::TooDeep>,
    q: &str,
    reported: &str,
) -> Result<(), String> {
    match (got, get(r, &format!("{q}_ret"))) {
        (Ok(s), 0) => {
            expect_eq(what, u64::from(s.depth_quanta), get(r, &format!("{q}_depth_quanta")))?;
            expect_eq(what, u64::from(s.shift), get(r, &format!("{q}_shift")))?;
            expect_eq(what, u64::from(s.size), get(r, &format!("{q}_size_passed_to_qp_init")))?;
            expect_eq(what, u64::from(s.reported_max_wr), get(r, reported))
        }
        (Err(_), w) if w != 0 => Ok(()),
        (got, w) => Err(format!("{what}: got {got:?}, vendor ret {w}")),
    }
}

fn run_helpers(h: &Value, t: &mut Tally) {
    // One case per helper table, every row checked by `row`; a missing or
    // empty table is not a pass.
    let mut table = |name: &str, row: &dyn Fn(&Value) -> Result<(), String>| {
        let rows = h.get(name).and_then(Value::as_array).cloned().unwrap_or_default();
        match rows.iter().try_for_each(row) {
            Ok(()) if rows.is_empty() => {}
            Ok(()) => t.passed += 1,
            Err(e) => {
                t.failed += 1;
                println!("FAIL helpers.{name}: {e}");
            }
        }
    };
    table("fragcnt_to_quanta_sq", &|r| {
        let f = get(r, "frag_cnt") as u32;
        let got = sizing::fragcnt_to_quanta_sq(f);
        let want = (get(r, "ret") == 0).then(|| get(r, "quanta") as u32);
        expect_eq(&format!("frag_cnt {f}"), got, want)
    });
    table("fragcnt_to_wqesize_rq", &|r| {
        let f = get(r, "frag_cnt") as u32;
        let got = sizing::fragcnt_to_wqesize_rq(f);
        let want = (get(r, "ret") == 0).then(|| get(r, "wqe_size_bytes") as u32);
        expect_eq(&format!("frag_cnt {f}"), got, want)
    });
    table("inline_data_size_to_quanta", &|r| {
        let l = get(r, "len") as u32;
        expect_eq(
            &format!("len {l}"),
            u64::from(sizing::inline_data_size_to_quanta(l)),
            get(r, "quanta"),
        )?;
        let allowed = l as usize <= irdma::hal::wqe::inline::MAX_BYTES;
        expect_eq(&format!("len {l} allowed"), allowed, flag(r, "len_allowed_gen2"))
    });
    table("get_wqe_shift", &|r| {
        let (s, i) = (get(r, "sge") as u32, get(r, "inline_data") as u32);
        expect_eq(
            &format!("sge {s} inline {i}"),
            u64::from(sizing::get_wqe_shift(s, i)),
            get(r, "shift"),
        )
    });
    table("calc_depth_shift", &|r| {
        let sq = sizing::calc_sq(
            get(r, "max_send_wr") as u32,
            get(r, "max_send_sge") as u32,
            get(r, "max_inline") as u32,
        );
        let what = format!("max_send_wr {}", get(r, "max_send_wr"));
        depth_row(r, &what, sq, "sq", "reported_max_send_wr")?;
        let rq = sizing::calc_rq(get(r, "max_recv_wr") as u32, get(r, "max_recv_sge") as u32);
        let what = format!("max_recv_wr {}", get(r, "max_recv_wr"));
        depth_row(r, &what, rq, "rq", "reported_max_recv_wr")
    });
    table("op_quanta_table", &op_quanta_row);
}

/// One `op_quanta_table` row through the real sizing and encoder: post it on
/// a scratch ring and read ADDFRAGCNT / INLINEDATALEN back from the header.
fn op_quanta_row(r: &Value) -> Result<(), String> {
    use irdma::hal::wqe::sq_hdr;
    let opname = r.get("op").and_then(Value::as_str).unwrap_or("");
    let n = get(r, "num_sges") as usize;
    let ilen = get(r, "inline_len") as usize;
    let payload = vec![0x5au8; ilen];
    let inline = opname.starts_with("inline");
    let sges: Vec<Sge> = if inline {
        vec![Sge { addr: payload.as_ptr() as u64, length: ilen as u32, lkey: 0 }]
    } else {
        dummy_sges(n)
    };
    let imm = opname.ends_with("_imm").then_some(0x1234u32);
    let op = match opname {
        "rdma_write" | "rdma_write_imm" | "inline_rdma_write" => {
            SqOp::Write { remote_addr: 1, rkey: 2, solicited: false, sges: &sges, inline }
        }
        "rdma_read" => SqOp::Read { remote_addr: 1, rkey: 2, local_inv: false, sges: &sges },
        "send" | "send_imm" | "inline_send" => SqOp::Send {
            kind: SendKind::default(),
            stag_to_inv: 0,
            qkey: 0,
            dest_qp: 0,
            ah_id: 0,
            udp_hdr: false,
            l4len: 0,
            sges: &sges,
            inline,
        },
        other => return Err(format!("unknown op {other}")),
    };
    let mut p = SqPost::new(1, op);
    p.imm = imm;
    let what = format!("{opname} sges {n} inline {ilen}");
    let mut ringm = vec![RING_PATTERN; 64 * 4];
    let mut trk = vec![SqWrTrk::default(); 64];
    let mut sq =
        Sq::new(mem(&mut ringm), &mut trk, 64, 13, 101, 1).map_err(|e| format!("{e:?}"))?;
    // SAFETY: the only inline SGE points at `payload`, alive for this function.
    unsafe { sq.enable_inline() };
    let lim = sq.limits();
    match (size_post(&p, &lim), sq.post(&p), get(r, "ret")) {
        (Ok(WqeSize { quanta, .. }), Ok(posted), 0) => {
            expect_eq(&what, u64::from(quanta), get(r, "quanta"))?;
            expect_eq(&what, posted.quanta, quanta)?;
            let h = sq.mem().read(3);
            if inline {
                expect_eq(&what, sq_hdr::INLINEDATALEN.get(h), get(r, "hdr_inline_len"))
            } else {
                expect_eq(&what, sq_hdr::ADDFRAGCNT.get(h), get(r, "hdr_addl_frag_cnt"))
            }
        }
        (Err(e), Err(_), w) if w != 0 => expect_eq(&what, errno_of_sq(e), w),
        (a, b, w) => Err(format!("{what}: got {a:?}/{b:?}, vendor ret {w}")),
    }
}

fn ctx_sub(v: u64) -> u64 {
    if v == VENDOR_CTX { OUR_CTX } else { v }
}

/// Compares one poll result with the vendor's.
fn check_poll(
    e: &Value,
    r: Result<irdma::uk::CqPollInfo, PollError>,
    kind: QpKind,
) -> Result<(), String> {
    let want = get(e, "ret");
    let info = match (r, want) {
        (Ok(i), 0) => i,
        (Err(PollError::Empty | PollError::Drained), 2) => return Ok(()),
        (Err(PollError::NoQp), 14) => return Ok(()),
        (got, w) => return Err(format!("poll: got {got:?}, vendor ret {w}")),
    };
    let fields = &e["info"];
    known_keys(fields, POLL_INFO_KEYS).map_err(|m| format!("info: {m}"))?;
    check_info(fields, &info)?;
    check_wc(&info, kind)
}

/// The members of `struct irdma_cq_poll_info` a poll event may record.
const POLL_INFO_KEYS: &[&str] = &[
    "wr_id",
    "qp_handle",
    "bytes_xfered",
    "qp_id",
    "ud_src_qpn",
    "imm_data",
    "inv_stag",
    "comp_status",
    "major_err",
    "minor_err",
    "ud_vlan",
    "ud_smac",
    "op_type",
    "q_type",
    "stag_invalid_set",
    "push_dropped",
    "error",
    "solicited_event",
    "ipv4",
    "ud_vlan_valid",
    "ud_smac_valid",
    "imm_valid",
    "stat_raw",
];

/// The poll info against the members the vendor wrote (`fields`).
fn check_info(fields: &Value, info: &irdma::uk::CqPollInfo) -> Result<(), String> {
    let comp = |k: &str, got: u64| -> Result<(), String> {
        match fields.get(k) {
            Some(f) if flag(f, "written") => {
                let want = f.get("value").and_then(num).unwrap_or(0);
                let want = if k == "qp_handle" { ctx_sub(want) } else { want };
                expect_eq(&format!("info.{k}"), format!("{got:#x}"), format!("{want:#x}"))
            }
            _ => Ok(()),
        }
    };
    comp("wr_id", info.wr_id)?;
    comp("qp_handle", info.qp_ctx)?;
    comp("bytes_xfered", info.bytes_xfered.into())?;
    comp("qp_id", info.qp_id.into())?;
    comp("ud_src_qpn", info.ud_src_qpn.into())?;
    comp("imm_data", info.imm_data.into())?;
    comp("inv_stag", info.inv_stag.into())?;
    if let Some(f) = fields.get("comp_status").filter(|f| flag(f, "written")) {
        let w = get(f, "value");
        let ok = match info.comp_status {
            CompStatus::Success => w == 0,
            CompStatus::Flushed => w == 1,
            CompStatus::Unknown => w > 1,
        };
        if !ok {
            return Err(format!("info.comp_status: got {:?}, want {w}", info.comp_status));
        }
    }
    comp("major_err", info.major_err.into())?;
    comp("minor_err", info.minor_err.into())?;
    comp("ud_vlan", info.ud_vlan.into())?;
    comp("ud_smac", info.ud_smac)?;
    comp("op_type", info.op_type.into())?;
    comp("q_type", (info.q_type == QueueType::Sq) as u64)?;
    comp("stag_invalid_set", info.stag_invalid_set as u64)?;
    comp("push_dropped", info.push_dropped as u64)?;
    comp("error", info.error as u64)?;
    comp("solicited_event", info.solicited_event as u64)?;
    comp("ipv4", info.ipv4 as u64)?;
    comp("ud_vlan_valid", info.ud_vlan_valid as u64)?;
    comp("ud_smac_valid", info.ud_smac_valid as u64)?;
    comp("imm_valid", info.imm_valid as u64)?;
    comp("stat_raw", info.stat_raw.into())?;
    Ok(())
}

/// The verbs work completion built from `info`.
fn check_wc(info: &irdma::uk::CqPollInfo, kind: QpKind) -> Result<(), String> {
    // The verbs completion poll_cq builds from it (documented mapping).
    let wc = to_work_completion(info, kind);
    expect_eq("wc.wr_id", wc.wr_id, info.wr_id)?;
    expect_eq("wc.byte_len", wc.byte_len, info.bytes_xfered)?;
    expect_eq("wc.qp_num", wc.qp_num, info.qp_id)?;
    expect_eq("wc.imm_data", wc.imm_data, info.imm_valid.then_some(info.imm_data))?;
    let want_status = match (info.error, info.comp_status) {
        (false, _) => WcStatus::Success,
        (true, CompStatus::Flushed) => flush_status(info.minor_err),
        (true, _) => WcStatus::GeneralErr,
    };
    if wc.status != want_status && wc.status != WcStatus::GeneralErr {
        return Err(format!("wc.status {:?}, want {want_status:?}", wc.status));
    }
    Ok(())
}

/// Whether a case writes an RQ CQE with an error that is not a flush.
fn has_rq_non_flush_error(case: &Value) -> bool {
    case["events"].as_array().into_iter().flatten().any(|e| {
        let f = &e["fields"];
        e.get("event").and_then(Value::as_str) == Some("write_cqe")
            && get(f, "q_type_sq") == 0
            && get(f, "error") == 1
            && !matches!(get(f, "major_err"), 1 | 0xfffe)
    })
}

fn run_cq_case(case: &Value, cfg: &Value) -> Result<Outcome, String> {
    match run_cq_case_with(case, cfg, true) {
        // The README accepts either kernel (park, every receive completes)
        // or rdma-core behaviour for an RQ error that is not a flush; the
        // driver implements both (`QpUk::park_on_rq_error`).
        Err(e) if has_rq_non_flush_error(case) => {
            run_cq_case_with(case, cfg, false).map_err(|e2| format!("{e}; rdma-core mode: {e2}"))
        }
        r => r,
    }
}

fn run_cq_case_with(case: &Value, cfg: &Value, park: bool) -> Result<Outcome, String> {
    let mut w = World::new(cfg);
    let cq_slots = get(cfg, "cq_size") as usize;
    let (mut qp, cq) = w.parts()?;
    qp.park_on_rq_error = park;
    let kind = qp.kind();
    let bar = RecBar::default();
    let model = vec![0u64; cq_slots * 4];
    let bufs = Vec::new();
    // The vendor's iWARP LSMM bookkeeping (`first_sq_wq`, `conn_wqes`): no
    // driver equivalent (LSMM is out of scope, README); only the inert
    // combination `conn_wqes == 0` is replayed, and that is what it means.
    let lsmm_state = LsmmState { first_sq_wq: get(cfg, "first_sq_wq") != 0, conn_wqes: 0 };
    let mut c = CqCase { cfg, cq_slots, qp, cq, kind, bar, model, bufs, lsmm_state };
    for (i, e) in case["events"].as_array().into_iter().flatten().enumerate() {
        let ev = e.get("event").and_then(Value::as_str).unwrap_or("");
        let at = |m: String| format!("event {i} ({ev}): {m}");
        let step = match ev {
            "post_send" => c.post_send(e),
            "post_recv" => c.post_recv(e),
            "write_cqe" => c.write_cqe(e),
            "poll" => c.poll(e),
            "set_state" => c.set_state(e),
            "set_resized_cnt" => c.set_resized_cnt(e),
            "request_notification" => c.request_notification(e),
            other => Err(format!("unknown event kind {other:?}")),
        };
        if let Some(o) = step.map_err(at)? {
            return Ok(o);
        }
    }
    Ok(Outcome::Pass)
}

/// What the events of a CQ case act on and check against.
struct CqCase<'w, 'c> {
    cfg: &'c Value,
    cq_slots: usize,
    qp: QpUk<'w>,
    cq: CqRing<'w>,
    kind: QpKind,
    bar: RecBar,
    /// The CQ memory as the vendor left it (four qwords a slot).
    model: Vec<u64>,
    bufs: Vec<Vec<u8>>,
    lsmm_state: LsmmState,
}

/// One event's result: `Some` ends the case with that outcome, an error is
/// the case's failure (the caller names the event).
type Step = Result<Option<Outcome>, String>;

impl CqCase<'_, '_> {
    fn post_send(&mut self, e: &Value) -> Step {
        let qp = &mut self.qp;
        let input = &e["input"];
        let sges = sges_of(input, &mut self.bufs);
        let r = match map_post(input, &sges)? {
            Mapped::Post(p) => qp.sq.post(&p),
            Mapped::Refused(p, why) => {
                return match qp.sq.post(&p) {
                    Err(SqError::Unsupported) => Ok(Some(Outcome::Skip(why.into()))),
                    other => Err(format!("{why}, but the driver returned {other:?}")),
                };
            }
        };
        match (r, get(e, "ret")) {
            (Ok(p), 0) => {
                if flag(input, "post_sq") {
                    qp.sq.ring_doorbell(&self.bar);
                }
                check_post_send_event(e, &p, qp)?;
            }
            (Err(x), w) if w != 0 => expect_eq("errno", errno_of_sq(x), w)?,
            (got, w) => return Err(format!("post: got {got:?}, vendor ret {w}")),
        }
        Ok(None)
    }

    fn post_recv(&mut self, e: &Value) -> Step {
        known_keys(
            e,
            &["event", "num_sges", "ret", "ret_name", "wqe_idx", "wqe_idx_in_quanta", "wr_id"],
        )?;
        let sges = dummy_sges(get(e, "num_sges") as usize);
        match (self.qp.rq.post(get(e, "wr_id"), &sges), get(e, "ret")) {
            (Ok(p), 0) => {
                expect_eq("wqe_idx", u64::from(p.wqe_idx), get(e, "wqe_idx"))?;
                if e.get("wqe_idx_in_quanta").is_some() {
                    expect_eq(
                        "wqe_idx_in_quanta",
                        u64::from(p.quantum),
                        get(e, "wqe_idx_in_quanta"),
                    )?;
                }
            }
            (Err(x), w) if w != 0 => expect_eq("errno", errno_of_rq(x), w)?,
            (got, w) => return Err(format!("post_recv: got {got:?}, vendor ret {w}")),
        }
        Ok(None)
    }

    fn write_cqe(&mut self, e: &Value) -> Step {
        known_keys(e, &["event", "desc", "fields", "words", "ext_fields", "ext_words"])?;
        let slot = get(&e["fields"], "slot") as usize;
        let words: Vec<u64> = e["words"].as_array().into_iter().flatten().filter_map(num).collect();
        for (k, v) in words.iter().enumerate() {
            let v = if k == 1 { ctx_sub(*v) } else { *v };
            if let Some(m) = self.model.get_mut(slot * 4 + k) {
                *m = v;
            }
            self.cq.mem().write(slot * 4 + k, v);
        }
        if let Some(ext) = e.get("ext_words").and_then(Value::as_array) {
            let es = e
                .get("ext_fields")
                .and_then(|f| f.get("slot"))
                .and_then(num)
                .map_or((slot + 1) % self.cq_slots.max(1), |s| s as usize);
            for (k, v) in ext.iter().filter_map(num).enumerate() {
                // qword 1 of an extension carries the QP context
                // too (the writer's `dpcq.rs`): a later poll that
                // takes this slot for a CQE reads it as the QP
                let v = if k == 1 { ctx_sub(v) } else { v };
                if let Some(m) = self.model.get_mut(es * 4 + k) {
                    *m = v;
                }
                self.cq.mem().write(es * 4 + k, v);
            }
        }
        Ok(None)
    }

    fn poll(&mut self, e: &Value) -> Step {
        known_keys(e, &["event", "ret", "ret_name", "info", "state_after", "cq_memory_writes"])?;
        let r = self.cq.poll_one(&mut self.qp);
        check_poll(e, r, self.kind)?;
        // The vendor's userspace rewrites MINERR of a flush CQE even
        // when it then returns -EFAULT (null or destroyed QP); the
        // kernel copy returns first (README: either passes).
        let mut alt = (get(e, "ret") == 14).then(|| self.model.clone());
        for mw in e.get("cq_memory_writes").and_then(Value::as_array).into_iter().flatten() {
            known_keys(mw, &["slot", "off", "before", "after"])?;
            let q = get(mw, "slot") as usize * 4 + get(mw, "off") as usize / 8;
            if let Some(m) = self.model.get_mut(q) {
                *m = get(mw, "after");
            }
        }
        if let Some(a) = alt.take()
            && (0..a.len()).all(|q| self.cq.mem().read(q) == a[q])
        {
            self.model = a;
        }
        for (q, want) in self.model.iter().enumerate() {
            let got = self.cq.mem().read(q);
            if got != *want {
                return Err(format!(
                    "CQ memory slot {} +{}: got {got:#018x}, want {want:#018x}",
                    q / 4,
                    q % 4 * 8
                ));
            }
        }
        check_state_after(&e["state_after"], &self.qp, &self.cq, &mut self.lsmm_state)?;
        Ok(None)
    }

    fn set_state(&mut self, e: &Value) -> Step {
        known_keys(e, &["event", "field", "value", "note"])?;
        let field = e.get("field").and_then(Value::as_str).unwrap_or("");
        let value = e
            .get("value")
            .and_then(num)
            .ok_or_else(|| format!("set_state {field}: value missing or not a number"))?;
        let (qp, cq, lsmm) = (&mut self.qp, &mut self.cq, &mut self.lsmm_state);
        Ok(set_state(field, value, qp, cq, self.cfg, lsmm)?.map(Outcome::Skip))
    }

    fn set_resized_cnt(&mut self, e: &Value) -> Step {
        known_keys(e, &["event", "cnt", "note"])?;
        let cnt = e.get("cnt").and_then(num).ok_or_else(|| "cnt missing".to_string())?;
        let cnt =
            u16::try_from(cnt).map_err(|_| format!("cnt {cnt} wider than the vendor's u16"))?;
        // The CQ's resize count (irdma_uk_cq_set_resized_cnt): what
        // `verbs::CqRing::resize` reports once old rings are drained.
        self.cq.set_resized_cnt(cnt);
        Ok(None)
    }

    fn request_notification(&mut self, e: &Value) -> Step {
        check_arm(e, &mut self.cq, &self.bar)?;
        if let Some(sa) = e.get("state_after") {
            check_state_after(sa, &self.qp, &self.cq, &mut self.lsmm_state)?;
        }
        Ok(None)
    }
}

/// Fails naming the first key of `v` not in `known` (the schema is handled
/// in general: nothing the vectors say may be ignored silently).
fn known_keys(v: &Value, known: &[&str]) -> Result<(), String> {
    match v.as_object().into_iter().flatten().find(|(k, _)| !known.contains(&k.as_str())) {
        Some((k, _)) => Err(format!("unknown key {k:?}")),
        None => Ok(()),
    }
}

/// A `post_send` event's expectations besides `ret`.
fn check_post_send_event(
    e: &Value,
    p: &irdma::uk::sq::PostedWqe,
    qp: &QpUk<'_>,
) -> Result<(), String> {
    use irdma::uk::SendQueue;
    known_keys(
        e,
        &[
            "event",
            "input",
            "ret",
            "ret_name",
            "wqe_idx",
            "wqe_size_quanta",
            "nop_pad_quanta",
            "wr_len",
            "sq_head_after",
        ],
    )?;
    expect_eq("wqe_idx", u64::from(p.wqe_idx), get(e, "wqe_idx"))?;
    expect_eq("sq head", u64::from(qp.sq.head()), get(e, "sq_head_after"))?;
    if e.get("wqe_size_quanta").is_some() {
        expect_eq("wqe_size_quanta", u64::from(p.quanta), get(e, "wqe_size_quanta"))?;
    }
    if e.get("nop_pad_quanta").is_some() {
        expect_eq("nop_pad_quanta", u64::from(p.pad), get(e, "nop_pad_quanta"))?;
    }
    if e.get("wr_len").is_some() {
        let got = qp.sq.peek(p.wqe_idx).map(|t| u64::from(t.wr_len));
        expect_eq("wr_len", got, Some(get(e, "wr_len")))?;
    }
    Ok(())
}

/// The vendor's LSMM fields, kept only to prove they are inert here.
struct LsmmState {
    first_sq_wq: bool,
    conn_wqes: u64,
}

/// A `set_state` event: the vendor changed one member of its
/// `struct irdma_qp_uk` / `struct irdma_cq_uk` (user.h). Each member that
/// uk.c's post, poll or arm paths read is mapped to the driver's state of
/// the same meaning; `Ok(Some(reason))` skips a case that needs a feature
/// E810 does not have; an unknown or unmappable member fails with its name.
fn set_state(
    field: &str,
    value: u64,
    qp: &mut QpUk<'_>,
    cq: &mut CqRing<'_>,
    cfg: &Value,
    lsmm: &mut LsmmState,
) -> Result<Option<String>, String> {
    let _ = cfg;
    if field.starts_with("cq.") {
        return set_cq_state(field, value, cq);
    }
    set_qp_state(field, value, qp, lsmm)
}

/// A `set_state` value that must be a bool.
fn bool_only(field: &str, value: u64) -> Result<(), String> {
    if value > 1 { Err(format!("set_state {field}: {value} is not a bool")) } else { Ok(()) }
}

/// [`set_state`] of a `struct irdma_qp_uk` member.
fn set_qp_state(
    field: &str,
    value: u64,
    qp: &mut QpUk<'_>,
    lsmm: &mut LsmmState,
) -> Result<Option<String>, String> {
    let b = value != 0;
    match field {
        // Push pages are never mapped on E810 (push_db NULL), so uk.c's
        // push path is never taken whatever push_mode says; the flag itself
        // is state (cleared by a push-drop SQ CQE) and is kept on QpUk.
        "qp.push_mode"
        | "qp.push_dropped"
        | "qp.destroy_pending"
        | "qp.sq_flush_complete"
        | "qp.rq_flush_complete" => {
            bool_only(field, value)?;
            match field {
                "qp.push_mode" => qp.push_mode = b,
                "qp.push_dropped" => qp.push_dropped = b,
                "qp.destroy_pending" => qp.set_destroy_pending(b),
                "qp.sq_flush_complete" => qp.sq_flush_complete = b,
                _ => qp.rq_flush_complete = b,
            }
        }
        "qp.sq_flush_seen" => qp.sq_flush_seen = b,
        "qp.rq_flush_seen" => qp.rq_flush_seen = b,
        // uk.c: irdma_uk_cq_poll_cmpl discards SQ CQEs with wqe_idx <
        // conn_wqes while first_sq_wq is set (iWARP LSMM). With conn_wqes 0
        // nothing is discarded and first_sq_wq only clears itself.
        "qp.first_sq_wq" => {
            bool_only(field, value)?;
            lsmm.first_sq_wq = b;
            if b && lsmm.conn_wqes != 0 {
                return Ok(Some("iWARP LSMM connection WQEs: out of scope".into()));
            }
        }
        "qp.conn_wqes" => {
            lsmm.conn_wqes = value;
            if value != 0 && lsmm.first_sq_wq {
                return Ok(Some("iWARP LSMM connection WQEs: out of scope".into()));
            }
        }
        "qp.qp_type" => {
            // Fixed at creation in the driver (RC 3 / UD 4, defs.h).
            let want = if qp.is_ud() { 4 } else { 3 };
            if value != want {
                return Err(format!(
                    "set_state qp.qp_type {value}: a QP's type cannot change after creation"
                ));
            }
        }
        "qp.sq_ring.head" | "qp.sq_ring.tail" | "qp.swqe_polarity" | "qp.rq_ring.head"
        | "qp.rq_ring.tail" | "qp.rwqe_polarity" => set_qp_ring(field, value, qp)?,
        // Only irdma_qp_push_wqe reads initial_ring (push path, never taken
        // on E810, see qp.push_mode).
        "qp.initial_ring.head" | "qp.initial_ring.tail" => {}
        _ => return Err(format!("set_state: unknown or unmapped field {field:?}")),
    }
    Ok(None)
}

/// [`set_state`] of a QP ring position.
fn set_qp_ring(field: &str, value: u64, qp: &mut QpUk<'_>) -> Result<(), String> {
    let b = value != 0;
    // (head, polarity) a ring-position field asks for, from the ring's
    // current ones: the polarity field (a bool) keeps the head, a head or
    // tail field the polarity
    let ring_target = |pol_field: bool, head: u32, pol: bool| -> Result<(u32, bool), String> {
        if pol_field {
            bool_only(field, value)?;
            Ok((head, b))
        } else {
            Ok((u32::try_from(value).unwrap_or(u32::MAX), pol))
        }
    };
    match field {
        // Ring positions: reached through the driver's own posting on an
        // empty queue (one-quantum WRITEs / one-SGE receives, each consumed),
        // a whole extra pass when the polarity has to change.
        "qp.sq_ring.head" | "qp.sq_ring.tail" | "qp.swqe_polarity" => {
            let pol = field == "qp.swqe_polarity";
            let (h, p) = ring_target(pol, qp.sq.head(), qp.sq.swqe_polarity())?;
            sq_reach(qp, h, p).map_err(|m| format!("{field}: {m}"))?;
        }
        "qp.rq_ring.head" | "qp.rq_ring.tail" | "qp.rwqe_polarity" => {
            let pol = field == "qp.rwqe_polarity";
            let (h, p) = ring_target(pol, qp.rq.head(), qp.rq.rwqe_polarity())?;
            rq_reach(qp, h, p).map_err(|m| format!("{field}: {m}"))?;
        }
        _ => return Err(format!("set_state: unknown or unmapped field {field:?}")),
    }
    Ok(())
}

/// [`set_state`] of a `struct irdma_cq_uk` member.
fn set_cq_state(field: &str, value: u64, cq: &mut CqRing<'_>) -> Result<Option<String>, String> {
    let b = value != 0;
    match field {
        "cq.polarity" => {
            bool_only(field, value)?;
            cq.set_position(cq.head(), b).map_err(|e| format!("cq.polarity: {e:?}"))?;
        }
        "cq.cq_ring.head" | "cq.cq_ring.tail" => {
            // GEN_2 moves head and tail together (IRDMA_RING_MOVE_HEAD +
            // MOVE_TAIL per CQE); the driver keeps one index.
            let h = u32::try_from(value).map_err(|_| format!("{field}: {value} too big"))?;
            let pol = cq.polarity();
            cq.set_position(h, pol).map_err(|e| format!("{field}: {e:?}"))?;
        }
        "cq.avoid_mem_cflct" => {
            bool_only(field, value)?;
            if b {
                return Ok(Some(
                    "cq.avoid_mem_cflct: 64-byte CQEs are not a GEN_2 feature (E810 \
                     feature flags: RTS_AE, CQ_RESIZE)"
                        .into(),
                ));
            }
        }
        "cq.cq_id" => {
            if value != u64::from(cq.cq_id()) {
                return Err(format!("set_state cq.cq_id {value:#x}: fixed at creation"));
            }
        }
        _ => return Err(format!("set_state: unknown or unmapped field {field:?}")),
    }
    Ok(None)
}

/// Whether ring index `head` can be reached on a ring of `size` slots
/// (`unit`s) with `used` of them in use: only inside the ring, and only on
/// an empty queue `q`.
fn reachable(head: u32, size: u32, used: u32, unit: &str, q: &str) -> Result<(), String> {
    if head >= size {
        return Err(format!("index {head} outside a {size}-{unit} ring"));
    }
    if used != 0 {
        return Err(format!("only reachable on an empty {q}"));
    }
    Ok(())
}

/// Moves an empty SQ to ring index `head` with `swqe_polarity` `pol`.
fn sq_reach(qp: &mut QpUk<'_>, head: u32, pol: bool) -> Result<(), String> {
    let size = qp.sq.size();
    reachable(head, size, qp.sq.used(), "quantum", "SQ")?;
    let bar = RecBar::default();
    fill_sq(qp, &bar, u64::from((head + size - qp.sq.head()) % size))?;
    if qp.sq.swqe_polarity() != pol {
        fill_sq(qp, &bar, u64::from(size))?;
    }
    Ok(())
}

/// Moves an empty RQ to ring index `head` with `rwqe_polarity` `pol`.
fn rq_reach(qp: &mut QpUk<'_>, head: u32, pol: bool) -> Result<(), String> {
    let size = qp.rq.size();
    reachable(head, size, qp.rq.used(), "WQE", "RQ")?;
    let one = dummy_sges(1);
    let step = |rq: &mut Rq<'_>, n: u32| -> Result<(), String> {
        for _ in 0..n {
            rq.post(0xf444, &one).map_err(|e| format!("filler receive: {e:?}"))?;
            rq.consume_all();
        }
        Ok(())
    };
    let n = (head + size - qp.rq.head()) % size;
    step(&mut qp.rq, n)?;
    if qp.rq.rwqe_polarity() != pol {
        step(&mut qp.rq, size)?;
    }
    Ok(())
}

/// A poll's `state_after`: every key the vectors give, against the driver's
/// state of the same meaning; an unknown key fails.
fn check_state_after(
    sa: &Value,
    qp: &QpUk<'_>,
    cq: &CqRing<'_>,
    lsmm: &mut LsmmState,
) -> Result<(), String> {
    let Some(obj) = sa.as_object() else { return Ok(()) };
    // An SQ CQE clears first_sq_wq when conn_wqes is 0 (see set_state).
    for (k, v) in obj {
        let want = num(v).ok_or_else(|| format!("state_after.{k}: not a number"))?;
        let got: u64 = match k.as_str() {
            "cq_head" | "cq_tail" => cq.head().into(),
            "cq_polarity" => cq.polarity().into(),
            "cq_shadow_qword0" => cq.shadow().read(0),
            "sq_head" => qp.sq.head().into(),
            "sq_tail" => qp.sq.tail().into(),
            "rq_head" => qp.rq.head().into(),
            "rq_tail" => qp.rq.tail().into(),
            "sq_flush_seen" => qp.sq_flush_seen.into(),
            "rq_flush_seen" => qp.rq_flush_seen.into(),
            "sq_flush_complete" => qp.sq_flush_complete.into(),
            "rq_flush_complete" => qp.rq_flush_complete.into(),
            "push_mode" | "qp_push_mode" => qp.push_mode.into(),
            "qp_push_dropped" | "push_dropped" => qp.push_dropped.into(),
            "destroy_pending" => qp.destroy_pending().into(),
            "swqe_polarity" => qp.sq.swqe_polarity().into(),
            "rwqe_polarity" => qp.rq.rwqe_polarity().into(),
            "cq_shadow_qword4" | "cq_arm_word" => cq.shadow().read(4),
            // LSMM bookkeeping: with conn_wqes 0 the vendor clears it at the
            // first SQ CQE; there is no driver state (out of scope).
            "first_sq_wq" => {
                lsmm.first_sq_wq = want != 0;
                continue;
            }
            other => return Err(format!("state_after: unknown key {other:?}")),
        };
        expect_eq(&format!("state_after.{k}"), got, want)?;
    }
    Ok(())
}

/// A `request_notification` event: arm and compare the shadow arm word and
/// the CQARM write with whatever the event records.
fn check_arm(e: &Value, cq: &mut CqRing<'_>, bar: &RecBar) -> Result<(), String> {
    // The published file has no such event; this reads the plausible shapes
    // (notify kind under `cq_notify`/`notify`/`solicited`, arm word as a
    // shadow "qword4"/"+32"/"arm" value before and after, the CQARM write)
    // and fails loudly on anything it does not recognise.
    // `state_after` is checked by the caller like a poll's.
    let fields: Vec<(String, &Value)> = [Some(e), e.get("input"), e.get("output")]
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .flatten()
        .filter(|(k, _)| !matches!(k.as_str(), "input" | "output" | "state_after"))
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    let is_arm_word = |k: &str| k.contains("qword4") || k.contains("arm_word") || k.contains("+32");
    let is_doorbell = |k: &str| {
        k.contains("doorbell") || k.contains("cqarm") || k.contains("cqe_alloc_db") || k == "db"
    };
    // Every key must mean something here: an unknown one fails by name.
    for (k, _) in &fields {
        let known = matches!(k.as_str(), "event" | "note" | "desc" | "ret" | "ret_name" | "cq_id")
            || k.contains("notify")
            || k == "solicited"
            || is_arm_word(k)
            || is_doorbell(k);
        if !known {
            return Err(format!("request_notification: unknown key {k:?}"));
        }
    }
    if let Some((_, v)) = fields.iter().find(|(k, _)| k == "cq_id")
        && let Some(id) = num(v)
    {
        expect_eq("cq_id", u64::from(cq.cq_id()), id)?;
    }
    let solicited = fields
        .iter()
        .find(|(k, _)| k.contains("notify") || k == "solicited")
        .map(|(_, v)| match v {
            Value::String(s) if s.to_ascii_lowercase().contains("solicited") => true,
            v => num(v) == Some(1),
        })
        .unwrap_or(false);
    for (k, v) in &fields {
        if is_arm_word(k)
            && k.contains("before")
            && let Some(w) = num(v)
        {
            cq.shadow().write(4, w);
        }
    }
    bar.take();
    cq.request_notification(bar, solicited);
    let writes = bar.take();
    let mut checked = 0;
    for (k, v) in &fields {
        if is_arm_word(k)
            && !k.contains("before")
            && let Some(want) = num(v)
        {
            expect_eq(k, cq.shadow().read(4), want)?;
            checked += 1;
        }
        if is_doorbell(k)
            && !k.contains("written")
            && let Some(want) = num(v)
        {
            expect_eq(k, writes.clone(), vec![(regs::CQARM, want as u32)])?;
            checked += 1;
        }
    }
    if checked == 0 {
        return Err("request_notification event with no recognised expectation".into());
    }
    Ok(())
}

fn run_misc_case(case: &Value, cfg: &Value) -> Result<Outcome, String> {
    let mut w = World::new(cfg);
    let (mut qp, _cq) = w.parts()?;
    let bar = RecBar::default();
    let h = case.get("history").unwrap_or(&Value::Null);
    fill_sq(&mut qp, &bar, get(h, "filler_posts"))?;
    // Fillers left outstanding (not consumed), if a case asks for them.
    let one = dummy_sges(1);
    for _ in 0..get(h, "filler_posts_outstanding") {
        let op =
            SqOp::Write { remote_addr: 1, rkey: 2, solicited: false, sges: &one, inline: false };
        qp.sq.post(&SqPost::new(0xf444, op)).map_err(|e| format!("outstanding filler: {e:?}"))?;
    }
    bar.take();
    for (i, st) in case["steps"].as_array().into_iter().flatten().enumerate() {
        let opname = st.get("op").and_then(Value::as_str).unwrap_or("");
        let at = |m: String| format!("step {i} ({opname}): {m}");
        // A step may stand for several identical posts.
        let reps = ["repeat", "count", "times"].iter().find_map(|k| st.get(*k)).and_then(num);
        if opname.starts_with("irdma_uk_qp_post_wr") {
            qp.sq.ring_doorbell(&bar);
        } else if opname.starts_with("irdma_uk_rdma_write") && reps.is_some_and(|r| r > 1) {
            misc_writes(&mut qp, &bar, st, opname, reps.unwrap_or(1)).map_err(&at)?;
        } else if opname.starts_with("irdma_uk_rdma_write") {
            misc_write(&mut qp, &bar, st, opname).map_err(&at)?;
        } else if opname.starts_with("consume") || opname.contains("tail = sq_ring.head") {
            qp.sq.consume_all();
        } else {
            return Err(at("unknown step".into()));
        }
        if let Some(h) = st.get("sq_head_after").and_then(num) {
            expect_eq("sq_head", u64::from(qp.sq.head()), h).map_err(&at)?;
        }
        if st.get("doorbell_written").is_some() {
            let want = if flag(st, "doorbell_written") {
                vec![(regs::WQEALLOC, get(st, "doorbell_value") as u32)]
            } else {
                vec![]
            };
            expect_eq("doorbell writes", bar.take(), want).map_err(&at)?;
        }
    }
    Ok(Outcome::Pass)
}

/// A write step that stands for `reps` identical posts (stopping at the
/// first refusal the vendor also made).
fn misc_writes(
    qp: &mut QpUk<'_>,
    bar: &RecBar,
    st: &Value,
    opname: &str,
    reps: u64,
) -> Result<(), String> {
    let sges = dummy_sges(get(st, "num_sges") as usize);
    let op = SqOp::Write { remote_addr: 1, rkey: 2, solicited: false, sges: &sges, inline: false };
    let want = get(st, "ret");
    for r in 0..reps {
        let res = qp.sq.post(&SqPost { signaled: flag(st, "signaled"), ..SqPost::new(r, op) });
        if opname.contains("post_sq=true") && res.is_ok() {
            qp.sq.ring_doorbell(bar);
        }
        match res {
            Ok(_) => {}
            Err(x) if want != 0 => {
                expect_eq("errno", errno_of_sq(x), want)?;
                break;
            }
            Err(x) => return Err(format!("post {r} failed with {x:?}, vendor ret 0")),
        }
    }
    Ok(())
}

/// One write step.
fn misc_write(qp: &mut QpUk<'_>, bar: &RecBar, st: &Value, opname: &str) -> Result<(), String> {
    let sges = dummy_sges(get(st, "num_sges") as usize);
    let p = SqPost {
        signaled: flag(st, "signaled"),
        ..SqPost::new(
            get(st, "wr_id"),
            SqOp::Write { remote_addr: 1, rkey: 2, solicited: false, sges: &sges, inline: false },
        )
    };
    match (qp.sq.post(&p), get(st, "ret")) {
        (Ok(_), 0) => {
            if opname.contains("post_sq=true") {
                qp.sq.ring_doorbell(bar);
            }
        }
        (Err(x), w) if w != 0 => expect_eq("errno", errno_of_sq(x), w)?,
        (got, w) => return Err(format!("got {got:?}, vendor ret {w}")),
    }
    Ok(())
}

/// The runner of one kind of case: the case and its config in, the verdict
/// out (skip_reason already checked).
type CaseRunner = fn(&Value, &Value) -> Result<Outcome, String>;

/// Runs a parsed datapath file.
pub fn run(v: &Value) -> Result<Tally, String> {
    let mut t = Tally::default();
    let configs: BTreeMap<String, Value> = v["meta"]["configs"]
        .as_array()
        .ok_or("meta.configs missing")?
        .iter()
        .filter_map(|c| Some((c.get("name")?.as_str()?.to_string(), c.clone())))
        .collect();
    let mut record = |name: &str, r: Result<Outcome, String>| match r {
        Ok(Outcome::Pass) => t.passed += 1,
        Ok(Outcome::Skip(why)) => {
            t.skipped += 1;
            println!("SKIP {name}: {why}");
        }
        Err(e) => {
            t.failed += 1;
            println!("FAIL {name}: {e}");
        }
    };
    let cfg_of = |c: &Value| -> Result<Value, String> {
        let n = c.get("config").and_then(Value::as_str).unwrap_or("");
        configs.get(n).cloned().ok_or_else(|| format!("unknown config {n}"))
    };
    let runners: [(&str, CaseRunner); 4] = [
        ("sq_cases", run_sq_case),
        ("rq_cases", run_rq_case),
        ("cq_cases", run_cq_case),
        ("sq_misc_cases", run_misc_case),
    ];
    for (list, run_case) in runners {
        for c in v[list].as_array().into_iter().flatten() {
            let name = c.get("name").and_then(Value::as_str).unwrap_or("?");
            // a case outside the driver's scope is skipped whatever its kind
            let r = cfg_of(c).and_then(|cfg| match skip_reason(c, &cfg) {
                Some(why) => Ok(Outcome::Skip(why)),
                None => run_case(c, &cfg),
            });
            record(name, r);
        }
    }
    if let Some(h) = v.get("helpers") {
        run_helpers(h, &mut t);
    }
    Ok(t)
}
