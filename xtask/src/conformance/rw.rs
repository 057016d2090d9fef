//! Runner for `rw-vectors.json`: drives the driver's real `irdma::rw` API
//! with each case's inputs and compares return value, context type, WR
//! count and every WR field (see `conformance/README.md`, last section).
//!
//! Mapping goes through [`IdHal`], an identity-mapping `Hal` (bus address =
//! the `addr` the vectors expect, i.e. `page_phys + offset`) that never
//! touches the memory behind those addresses, with failure injection at the
//! Nth `share`; the IOVA path goes through [`FakeIommu`] (4 KiB granule,
//! base 0xf0000000, alignment checked as `iommu_map` does).
//!
//! Where Linux misbehaves the driver is stricter (spec data-path §11), and
//! the comparison knows each documented departure:
//! * `crash` outputs must be a typed error with nothing left mapped;
//! * wrapped u32 sizing must be the exact (saturated) value;
//! * READ_WITH_INV invalidates the key its REG_MR registered (§11.2);
//! * a second `wrs` with a chain WR leaves no rw WR signaled (§11.8);
//! * zero-length SGEs from a short `bi_size` are not emitted (§11.4);
//! * MRs are filled by pages, so Linux's -EINVAL for entries > 256 pages
//!   becomes a valid multi-MR chain, checked structurally (§11.7);
//! * integrity QPs are refused on E810 (counted as skipped, after checking
//!   that the driver refuses).
//!
//! Mapping counts: Linux maps a scatter table in one call, the driver
//! shares each entry, so `dma_mappings_live` after init is compared as
//! "some" vs "none"; after destroy (and after a failed init) it must be 0.
//! `allocs_live` has no counterpart (the driver never allocates).

use std::cell::RefCell;
use std::ptr::NonNull;

use irdma::rw::{
    BioVec, BvecIter, CtxType, DeviceAttrs, Direction, FrMr, IovaMapper, MrPool, PostSend, RwCtx,
    RwError, RwQp, RwQpCap, SgEntry, rdma_rw_init_qp, rdma_rw_max_send_wr, rdma_rw_mr_factor,
    send_wr_factor,
};
use irdma::wr::{SendFlags, SendWr, WrOpcode};
use irdma_hal::BufferDirection;
use serde_json::Value;

use super::{Outcome, Tally};

const CALLER_CQE: u64 = 0xC0FFEE;
const CHAIN_CQE: u64 = 0xC4A1;

/// Identity-mapping `Hal`: `share` returns the buffer's own address (the
/// vectors' bus addresses), with per-thread counts and Nth-call failure.
use irdma_testkit::IdentityHal as IdHal;

/// An IOMMU with a 4 KiB granule handing out one range at 0xf0000000.
struct FakeIommu {
    available: bool,
    live: i64,
    fail_link_at: u64,
    links: u64,
    log: RefCell<Vec<String>>,
}

const IOVA_BASE: u64 = 0xf000_0000;
const GRANULE: u64 = 4096;

// SAFETY: nothing is mapped or dereferenced; only address arithmetic.
unsafe impl IovaMapper for FakeIommu {
    fn try_alloc(&mut self, first: NonNull<[u8]>, _: u64, _: BufferDirection) -> Option<u64> {
        if !self.available {
            return None;
        }
        self.live += 1;
        Some(IOVA_BASE + (first.cast::<u8>().as_ptr() as u64 & (GRANULE - 1)))
    }
    fn link(
        &mut self,
        addr: u64,
        offset: u64,
        seg: NonNull<[u8]>,
        _: BufferDirection,
    ) -> Result<(), i32> {
        self.links += 1;
        if self.fail_link_at == self.links {
            return Err(-12);
        }
        let phys = seg.cast::<u8>().as_ptr() as u64;
        let pad = phys & (GRANULE - 1);
        let iova = (addr + offset).wrapping_sub(pad);
        if iova & (GRANULE - 1) != 0 {
            self.log.borrow_mut().push(format!("iommu_map: unaligned iova {iova:#x}"));
            return Err(-22);
        }
        Ok(())
    }
    fn sync(&mut self, _: u64, _: u64) -> Result<(), i32> {
        Ok(())
    }
    fn destroy(&mut self, _: u64, _: u64, _: BufferDirection) {
        self.live -= 1;
    }
}

fn hex(v: &Value) -> Option<u64> {
    match v {
        Value::String(s) => u64::from_str_radix(s.trim_start_matches("0x"), 16).ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

fn num(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(hex).unwrap_or(0)
}

fn flag(v: &Value, k: &str) -> bool {
    v.get(k).and_then(Value::as_bool).unwrap_or(false)
}

fn device(v: &Value) -> DeviceAttrs {
    DeviceAttrs {
        rdma_protocol_iwarp: flag(v, "rdma_protocol_iwarp"),
        cap_read_inv: flag(v, "rdma_cap_read_inv"),
        max_sgl_rd: num(v, "max_sgl_rd") as u32,
        max_sge_rd: num(v, "max_sge_rd") as u32,
        max_send_sge: num(v, "max_send_sge") as u32,
        max_fast_reg_page_list_len: num(v, "max_fast_reg_page_list_len") as u32,
        max_pi_fast_reg_page_list_len: num(v, "max_pi_fast_reg_page_list_len") as u32,
        max_qp_wr: num(v, "max_qp_wr") as u32,
        local_dma_lkey: num(v, "local_dma_lkey") as u32,
        uses_virt_dma: flag(v, "ib_uses_virt_dma"),
        integrity_handover: false,
    }
}

/// A WR in comparable form.
#[derive(Debug, Clone, PartialEq)]
struct Wr {
    opcode: &'static str,
    signaled: bool,
    wr_cqe: &'static str,
    sges: Vec<(u64, u64, u64)>,
    remote_addr: Option<u64>,
    rkey: Option<u64>,
    invalidate_rkey: Option<u64>,
    reg: Option<Reg>,
    is_chain: bool,
}

#[derive(Debug, Clone, PartialEq)]
struct Reg {
    key: u64,
    access: u64,
    iova: u64,
    length: u64,
    pages: Vec<u64>,
}

fn ours_wr<const N: usize, const P: usize>(w: &SendWr<'_>, pool: &MrPool<N, P>) -> Wr {
    let mut o = Wr {
        opcode: "?",
        signaled: w.flags.contains(SendFlags::SIGNALED),
        wr_cqe: match w.wr_id {
            CALLER_CQE => "caller_cqe",
            CHAIN_CQE => "chain_wr_own_cqe",
            0 => "null",
            _ => "other",
        },
        sges: w.sg_list.iter().map(|s| (s.addr, u64::from(s.length), u64::from(s.lkey))).collect(),
        remote_addr: None,
        rkey: None,
        invalidate_rkey: None,
        reg: None,
        is_chain: w.wr_id == CHAIN_CQE,
    };
    match w.opcode {
        WrOpcode::RdmaWrite { remote_addr, rkey } => {
            o.opcode = "IB_WR_RDMA_WRITE";
            o.remote_addr = Some(remote_addr);
            o.rkey = Some(rkey.into());
        }
        WrOpcode::RdmaRead { remote_addr, rkey } => {
            o.opcode = "IB_WR_RDMA_READ";
            o.remote_addr = Some(remote_addr);
            o.rkey = Some(rkey.into());
        }
        WrOpcode::RdmaReadInv { remote_addr, rkey, inv_key } => {
            o.opcode = "IB_WR_RDMA_READ_WITH_INV";
            o.remote_addr = Some(remote_addr);
            o.rkey = Some(rkey.into());
            o.invalidate_rkey = Some(inv_key.into());
        }
        WrOpcode::LocalInv { inv_key } => {
            o.opcode = "IB_WR_LOCAL_INV";
            o.invalidate_rkey = Some(inv_key.into());
        }
        WrOpcode::RegMr(r) => {
            o.opcode = "IB_WR_REG_MR";
            let pages =
                pool.index_of_key(r.key).map(|i| pool.pages(i).to_vec()).unwrap_or_default();
            o.reg = Some(Reg {
                key: r.key.into(),
                access: r.access.0.into(),
                iova: r.iova,
                length: r.length,
                pages,
            });
        }
        WrOpcode::Send => o.opcode = "IB_WR_SEND",
        _ => o.opcode = "other",
    }
    o
}

fn expected_wr(v: &Value) -> Wr {
    let opcode = match v.get("opcode").and_then(Value::as_str).unwrap_or("") {
        "IB_WR_RDMA_WRITE" => "IB_WR_RDMA_WRITE",
        "IB_WR_RDMA_READ" => "IB_WR_RDMA_READ",
        "IB_WR_RDMA_READ_WITH_INV" => "IB_WR_RDMA_READ_WITH_INV",
        "IB_WR_LOCAL_INV" => "IB_WR_LOCAL_INV",
        "IB_WR_REG_MR" => "IB_WR_REG_MR",
        "IB_WR_SEND" => "IB_WR_SEND",
        _ => "other",
    };
    let wr_cqe = match v.get("wr_cqe").and_then(Value::as_str).unwrap_or("") {
        "caller_cqe" => "caller_cqe",
        "chain_wr_own_cqe" => "chain_wr_own_cqe",
        "null" => "null",
        _ => "other",
    };
    let is_chain = flag(v, "is_chain_wr");
    let rdma =
        matches!(opcode, "IB_WR_RDMA_WRITE" | "IB_WR_RDMA_READ" | "IB_WR_RDMA_READ_WITH_INV");
    Wr {
        opcode,
        signaled: flag(v, "signaled"),
        wr_cqe,
        sges: v
            .get("sg_list")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(|s| (num(s, "addr"), num(s, "length"), num(s, "lkey"))).collect())
            .unwrap_or_default(),
        remote_addr: if rdma { v.get("remote_addr").and_then(hex) } else { None },
        rkey: if rdma { v.get("rkey").and_then(hex) } else { None },
        invalidate_rkey: v.get("invalidate_rkey").and_then(hex),
        reg: v.get("reg").map(|r| Reg {
            key: num(r, "key"),
            access: num(r, "access"),
            iova: num(r, "mr_iova"),
            length: num(r, "mr_length"),
            pages: r
                .get("mr_pages")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(hex).collect())
                .unwrap_or_default(),
        }),
        is_chain,
    }
}

/// `ib_inc_rkey`.
fn inc_key(k: u64) -> u64 {
    (k & !0xff) | ((k + 1) & 0xff)
}

/// Applies the documented departures to Linux's chain. The zero-length SGE
/// rule is the bvec path's (data-path spec §11.4 item 4: `nr_bvec` SGEs
/// whatever `bi_size`); on a scatter list Linux and the driver both keep a
/// zero-length entry's SGE, so `bvec` false leaves them.
fn normalise(mut exp: Vec<Wr>, chain_arg: bool, bvec: bool) -> Vec<Wr> {
    // §11.2: READ_WITH_INV invalidates the key registered just before it.
    let mut last_reg = None;
    for w in exp.iter_mut() {
        if let Some(r) = &w.reg {
            last_reg = Some(r.key);
        }
        if w.opcode == "IB_WR_RDMA_READ_WITH_INV"
            && let (Some(reg), Some(inv)) = (last_reg, w.invalidate_rkey)
            && inc_key(inv) == reg
        {
            w.invalidate_rkey = Some(reg);
        }
    }
    if !bvec {
        return exp;
    }
    // §11.4: no zero-length SGEs; a WR left without SGEs is not emitted.
    let before = exp.len();
    for w in exp.iter_mut() {
        w.sges.retain(|s| s.1 != 0);
    }
    exp.retain(|w| {
        !(w.sges.is_empty()
            && matches!(w.opcode, "IB_WR_RDMA_WRITE" | "IB_WR_RDMA_READ")
            && !w.is_chain)
    });
    if exp.len() != before
        && !chain_arg
        && let Some(last) = exp.iter_mut().rev().find(|w| !w.is_chain)
    {
        last.signaled = true;
        last.wr_cqe = "caller_cqe";
    }
    exp
}

fn first_diff(ours: &[Wr], exp: &[Wr]) -> Option<String> {
    for (i, (o, e)) in ours.iter().zip(exp.iter()).enumerate() {
        // field `f` of `a` (ours) and `b` (expected), named `wr[i]<at>.f`
        macro_rules! cmp {
            ($a:ident, $b:ident, $at:literal, $f:ident) => {
                if $a.$f != $b.$f {
                    return Some(format!(
                        concat!("wr[{}]", $at, ".{}: ours {:x?}, expected {:x?}"),
                        i,
                        stringify!($f),
                        $a.$f,
                        $b.$f
                    ));
                }
            };
        }
        cmp!(o, e, "", opcode);
        cmp!(o, e, "", signaled);
        cmp!(o, e, "", wr_cqe);
        if o.sges.len() != e.sges.len() {
            return Some(format!(
                "wr[{i}].num_sge: ours {}, expected {}",
                o.sges.len(),
                e.sges.len()
            ));
        }
        for (j, (a, b)) in o.sges.iter().zip(e.sges.iter()).enumerate() {
            if a != b {
                return Some(format!(
                    "wr[{i}].sg_list[{j}] (addr,len,lkey): ours {a:x?}, expected {b:x?}"
                ));
            }
        }
        cmp!(o, e, "", remote_addr);
        cmp!(o, e, "", rkey);
        cmp!(o, e, "", invalidate_rkey);
        match (&o.reg, &e.reg) {
            (Some(a), Some(b)) => {
                cmp!(a, b, ".reg", key);
                cmp!(a, b, ".reg", access);
                cmp!(a, b, ".reg", iova);
                cmp!(a, b, ".reg", length);
                if a.pages != b.pages {
                    let k = a.pages.iter().zip(&b.pages).take_while(|(x, y)| x == y).count();
                    return Some(format!(
                        "wr[{i}].reg.pages[{k}] (of {} vs {}): ours {:x?}, expected {:x?}",
                        a.pages.len(),
                        b.pages.len(),
                        a.pages.get(k),
                        b.pages.get(k)
                    ));
                }
            }
            (None, None) => {}
            _ => return Some(format!("wr[{i}].reg: ours {:?}, expected {:?}", o.reg, e.reg)),
        }
        cmp!(o, e, "", is_chain);
    }
    if ours.len() != exp.len() {
        return Some(format!("chain length: ours {}, expected {}", ours.len(), exp.len()));
    }
    None
}

fn ctx_name(t: Option<CtxType>) -> &'static str {
    match t {
        Some(CtxType::SingleWr) => "SINGLE_WR",
        Some(CtxType::MultiWr) => "MULTI_WR",
        Some(CtxType::Mr) => "MR",
        Some(CtxType::Iova) => "IOVA",
        None => "none",
    }
}

const POOL_N: usize = 16;
const POOL_P: usize = 256;
type Pool = MrPool<POOL_N, POOL_P>;

fn pool_size(v: &Value) -> u32 {
    match v {
        Value::Number(n) => n.as_u64().unwrap_or(0) as u32,
        Value::String(s) => s
            .split("max_rdma_ctxs=")
            .nth(1)
            .and_then(|t| t.trim_end_matches(')').parse().ok())
            .unwrap_or(0),
        _ => 0,
    }
}

/// Inputs of one init case, owned.
struct Setup {
    qp: RwQp,
    dir: Direction,
    sg: Vec<SgEntry>,
    sg_offset: u32,
    bvecs: Vec<BioVec>,
    nr_bvec: usize,
    iter: BvecIter,
    bvec: bool,
    remote_addr: u64,
    rkey: u32,
    chain_wr: bool,
    iommu: FakeIommu,
    pool: Box<Pool>,
}

fn buf(addr: u64, len: u64) -> NonNull<[u8]> {
    // Identity addresses from the vectors; never dereferenced (see IdHal).
    let p = NonNull::new(addr as *mut u8).unwrap_or(NonNull::dangling());
    NonNull::slice_from_raw_parts(p, len as usize)
}

fn setup(inp: &Value, bvec: bool) -> Setup {
    let dev = device(&inp["device"]);
    let force_mr = flag(inp, "force_mr");
    let qpv = &inp["qp"];
    let qp = RwQp {
        dev,
        force_mr,
        max_write_sge: num(qpv, "max_write_sge") as u32,
        max_read_sge: num(qpv, "max_read_sge") as u32,
    };
    let dir = if inp["direction"].as_str() == Some("DMA_FROM_DEVICE") {
        Direction::FromDevice
    } else {
        Direction::ToDevice
    };
    let mut sg = Vec::new();
    if let Some(a) = inp.get("sg").and_then(Value::as_array) {
        let cnt = inp.get("sg_cnt").and_then(Value::as_u64).unwrap_or(a.len() as u64) as usize;
        for e in a.iter().take(cnt) {
            sg.push(SgEntry::new(buf(num(e, "addr"), num(e, "length"))));
        }
    }
    let mut bvecs = Vec::new();
    if let Some(a) = inp.get("bvecs").and_then(Value::as_array) {
        for e in a {
            bvecs.push(BioVec { buf: buf(num(e, "addr"), num(e, "bv_len")) });
        }
    }
    let it = &inp["iter"];
    let iter = BvecIter {
        bi_size: num(it, "bi_size") as u32,
        bi_idx: num(it, "bi_idx") as u32,
        bi_bvec_done: num(it, "bi_bvec_done") as u32,
    };
    let mut pool = Box::new(Pool::new());
    let n = pool_size(&inp["mr_pool"]);
    let mrs: Vec<FrMr> = (0..n)
        .map(|i| FrMr {
            key: (0x100 + i) << 8,
            max_pages: 256,
            first_pble_index: i * 256,
            pbl_level: 1,
        })
        .collect();
    let _ = pool.init(&dev, force_mr, n, &mrs);
    let inject = &inp["inject"];
    Setup {
        qp,
        dir,
        sg,
        sg_offset: num(inp, "sg_offset") as u32,
        bvecs,
        nr_bvec: num(inp, "nr_bvec") as usize,
        iter,
        bvec,
        remote_addr: num(inp, "remote_addr"),
        rkey: num(inp, "rkey") as u32,
        chain_wr: flag(inp, "chain_wr"),
        iommu: FakeIommu {
            available: inp
                .get("iova")
                .and_then(Value::as_str)
                .is_some_and(|s| s.starts_with("available")),
            live: 0,
            fail_link_at: num(inject, "fail_iova_link_at"),
            links: 0,
            log: RefCell::new(Vec::new()),
        },
        pool,
    }
}

fn init<const S: usize, const O: usize>(
    ctx: &mut RwCtx<S, O>,
    s: &mut Setup,
) -> Result<usize, RwError> {
    // SAFETY: IdHal and FakeIommu never touch the (fake) buffers.
    unsafe {
        if s.bvec {
            ctx.init_bvec::<IdHal, _, POOL_N, POOL_P>(
                &s.qp,
                &mut s.pool,
                &mut s.iommu,
                &s.bvecs,
                s.nr_bvec,
                s.iter,
                s.remote_addr,
                s.rkey,
                s.dir,
            )
        } else {
            ctx.init::<IdHal, POOL_N, POOL_P>(
                &s.qp,
                &mut s.pool,
                &mut s.sg,
                s.sg_offset,
                s.remote_addr,
                s.rkey,
                s.dir,
            )
        }
    }
}

fn destroy<const S: usize, const O: usize>(
    ctx: &mut RwCtx<S, O>,
    s: &mut Setup,
) -> Result<(), RwError> {
    // SAFETY: as in `init`; there is no device.
    unsafe {
        if s.bvec {
            ctx.destroy_bvec::<IdHal, _, POOL_N, POOL_P>(&mut s.pool, &mut s.iommu)
        } else {
            ctx.destroy::<IdHal, POOL_N, POOL_P>(&mut s.pool, &mut s.sg)
        }
    }
}

fn live_maps(s: &Setup) -> i64 {
    IdHal::live() + s.iommu.live
}

fn chain_wr() -> SendWr<'static> {
    SendWr { wr_id: CHAIN_CQE, opcode: WrOpcode::Send, flags: SendFlags::SIGNALED, sg_list: &[] }
}

/// Linux allocations (kzalloc) made on the path a context took; the driver
/// has none, the counterpart of a failing one is context storage too small.
fn linux_allocs(t: CtxType, bvec: bool) -> u64 {
    match (t, bvec) {
        (CtxType::MultiWr, false) => 2,
        (CtxType::MultiWr, true) => 1,
        (CtxType::Mr, false) => 1,
        (CtxType::Mr, true) => 2,
        _ => 0,
    }
}

fn run_init_case(case: &Value, bvec: bool) -> Outcome {
    let inp = &case["inputs"];
    let out = &case["outputs"];
    let fail_alloc = num(&inp["inject"], "fail_alloc_at");
    let fail_map = num(&inp["inject"], "fail_dma_map_at");
    if fail_alloc > 0 {
        // Probe the path with full storage; if Linux would reach the failing
        // allocation there, run with zero-capacity storage instead.
        IdHal::reset(fail_map);
        let mut s = setup(inp, bvec);
        let mut ctx: Box<RwCtx<1024, 512>> = Box::new(RwCtx::new());
        let t = init(&mut ctx, &mut s).ok().and(ctx.ctx_type());
        let _ = destroy(&mut ctx, &mut s);
        if let Some(t) = t
            && fail_alloc <= linux_allocs(t, bvec)
        {
            let mut small: RwCtx<0, 0> = RwCtx::new();
            return run_rounds(&mut small, inp, out, bvec, fail_map);
        }
    }
    let mut ctx: Box<RwCtx<1024, 512>> = Box::new(RwCtx::new());
    run_rounds(&mut ctx, inp, out, bvec, fail_map)
}

fn check_state(tag: &str, s: &Setup, exp: &Value, after_destroy: bool) -> Result<(), String> {
    let used = s.pool.in_use() as u64;
    let e_used = num(exp, "mrs_used");
    if used != e_used {
        return Err(format!("{tag}: mrs_used ours {used}, expected {e_used}"));
    }
    let live = live_maps(s);
    let e_live = num(exp, "dma_mappings_live");
    if after_destroy && live != 0 {
        return Err(format!("{tag}: {live} mappings left"));
    }
    if (live > 0) != (e_live > 0) {
        return Err(format!("{tag}: mappings live ours {live}, expected {e_live}"));
    }
    Ok(())
}

fn run_rounds<const S: usize, const O: usize>(
    ctx: &mut RwCtx<S, O>,
    inp: &Value,
    out: &Value,
    bvec: bool,
    fail_map: u64,
) -> Outcome {
    IdHal::reset(fail_map);
    let mut s = setup(inp, bvec);
    if out.get("crash").is_some() {
        // Linux crashed; the driver must refuse with a typed error and leave
        // nothing mapped or taken.
        return match init(ctx, &mut s) {
            Ok(n) => Outcome::Fail(format!("Linux crashed here; driver accepted it ({n} WRs)")),
            Err(_) if live_maps(&s) == 0 && s.pool.in_use() == 0 => Outcome::Pass,
            Err(e) => Outcome::Fail(format!("refused with {e:?} but left resources behind")),
        };
    }
    let Some(rounds) = out.get("rounds").and_then(Value::as_array) else {
        return Outcome::Fail("no rounds in vector".into());
    };
    // A NULL cqe reaches the last WR as "null" (our wr_id 0).
    let cqe_id = match inp.get("cqe").and_then(Value::as_str) {
        Some(c) if !c.contains("non-NULL") && c.contains("NULL") => 0,
        _ => CALLER_CQE,
    };
    // The fake's injected mapping errno: the Hal's error carries no errno,
    // so the driver's typed mapping error stands for whatever was injected.
    let inj_err = inp["inject"].get("fail_dma_map_err").and_then(Value::as_i64).unwrap_or(0);
    let rc = RoundCfg { bvec, fail_map, cqe_id, inj_err };
    for (ri, round) in rounds.iter().enumerate() {
        if let Err(o) = run_round(ctx, &mut s, &rc, ri, round) {
            return o;
        }
    }
    Outcome::Pass
}

/// What every round of a case shares.
struct RoundCfg {
    bvec: bool,
    fail_map: u64,
    cqe_id: u64,
    inj_err: i64,
}

/// What one round has learnt by the time its calls run.
struct RoundState {
    tag: String,
    /// The driver's `init` return.
    ret: i64,
    /// The vendor's return, less the WRs the normalisation folds away.
    exp_ret: i64,
    /// MR counts differ: chains are compared for equivalence.
    regroup: bool,
    /// The first call's expected chain (without the chain WR).
    first_exp: Option<Vec<Wr>>,
}

/// One round: `init`, its calls, `destroy`; `Err` is the case's outcome
/// (the round's failure, or a verdict reached early).
fn run_round<const S: usize, const O: usize>(
    ctx: &mut RwCtx<S, O>,
    s: &mut Setup,
    rc: &RoundCfg,
    ri: usize,
    round: &Value,
) -> Result<(), Outcome> {
    let tag = format!("round {ri}");
    let eret = round.get("ret").and_then(Value::as_i64).unwrap_or(0);
    let r = init(ctx, s);
    if !init_as_expected(ctx, s, rc, &tag, round, r)? {
        return Ok(());
    }
    let ret = r.unwrap_or(0) as i64;
    let exp_type = round.get("ctx_type").and_then(Value::as_str).unwrap_or("");
    let ours_type = ctx_name(ctx.ctx_type());
    if ours_type != exp_type {
        return Err(Outcome::Fail(format!(
            "{tag}: ctx_type ours {ours_type}, expected {exp_type}"
        )));
    }
    let calls = round.get("calls").and_then(Value::as_array).cloned().unwrap_or_default();
    // §11.7: MRs are filled by pages, Linux fills them by 256 entries;
    // when the MR counts differ the chains are compared for equivalence.
    let linux_mrs = calls
        .first()
        .and_then(|c| c.get("chain"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter(|w| w.get("reg").is_some()).count());
    let regroup =
        ctx.ctx_type() == Some(CtxType::Mr) && linux_mrs.is_some_and(|m| m != ctx.nr_ops());
    if regroup {
        if s.pool.in_use() != ctx.nr_ops() || live_maps(s) == 0 {
            return Err(Outcome::Fail(format!("{tag}: MRs/mappings not held after init")));
        }
    } else if let Err(m) = check_state(&tag, s, &round["state_after_init"], false) {
        return Err(Outcome::Fail(m));
    }
    let mut rs = RoundState { tag, ret, exp_ret: eret, regroup, first_exp: None };
    for (ci, call) in calls.iter().enumerate() {
        check_call(ctx, s, rc, &mut rs, ci, call)?;
    }
    let tag = rs.tag;
    if let Err(e) = destroy(ctx, s) {
        return Err(Outcome::Fail(format!("{tag}: destroy failed: {e:?}")));
    }
    if let Err(m) =
        check_state(&format!("{tag} after destroy"), s, &round["state_after_destroy"], true)
    {
        return Err(Outcome::Fail(m));
    }
    Ok(())
}

/// `init`'s return against the round's: `Ok(true)` when the round goes on
/// to its calls, `Ok(false)` when it ends with an expected refusal, `Err`
/// the case's outcome.
fn init_as_expected<const S: usize, const O: usize>(
    ctx: &mut RwCtx<S, O>,
    s: &mut Setup,
    rc: &RoundCfg,
    tag: &str,
    round: &Value,
    r: Result<usize, RwError>,
) -> Result<bool, Outcome> {
    let eret = round.get("ret").and_then(Value::as_i64).unwrap_or(0);
    match (r, eret) {
        (Err(e), er) if er < 0 => {
            let injected =
                e == RwError::MapFailed && rc.fail_map > 0 && rc.inj_err != 0 && er == rc.inj_err;
            if i64::from(e.errno()) != er && !injected {
                return Err(Outcome::Fail(format!(
                    "{tag}: ret ours {} ({e:?}), expected {er}",
                    e.errno()
                )));
            }
            if let Err(m) = check_state(tag, s, &round["state_after_init"], true) {
                return Err(Outcome::Fail(m));
            }
            let elog: Vec<String> = round["state_after_init"]["log"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
                .unwrap_or_default();
            if !elog.is_empty() && *s.iommu.log.borrow() != elog {
                return Err(Outcome::Fail(format!(
                    "{tag}: iommu log ours {:?}, expected {elog:?}",
                    s.iommu.log.borrow()
                )));
            }
            Ok(false)
        }
        (Ok(n), er) if er < 0 => {
            // §11.7: Linux's -EINVAL because 256 entries exceed 256 pages.
            if er == -22 && ctx.ctx_type() == Some(CtxType::Mr) {
                let v = check_mr_structure(ctx, s, n);
                let _ = destroy(ctx, s);
                return Err(v);
            }
            let _ = destroy(ctx, s);
            Err(Outcome::Fail(format!("{tag}: ret ours {n}, expected {er}")))
        }
        (Err(RwError::InvalidArgument), er) if rc.bvec && short_transfer(round, s.iter) => {
            // §11.4: Linux "succeeds" moving other than bi_size bytes
            // (nr_bvec below the segments the iterator covers); the
            // driver refuses.
            if live_maps(s) != 0 || s.pool.in_use() != 0 {
                return Err(Outcome::Fail(format!("{tag}: refused but left resources behind")));
            }
            let _ = er;
            Ok(false)
        }
        (Err(e), er) => {
            Err(Outcome::Fail(format!("{tag}: ret ours {} ({e:?}), expected {er}", e.errno())))
        }
        (Ok(_), _) => Ok(true),
    }
}

/// One `wrs`/`post` call of a round: the driver's chain against the vendor's.
fn check_call<const S: usize, const O: usize>(
    ctx: &mut RwCtx<S, O>,
    s: &mut Setup,
    rc: &RoundCfg,
    rs: &mut RoundState,
    ci: usize,
    call: &Value,
) -> Result<(), Outcome> {
    let tag = &rs.tag;
    let name = call.get("call").and_then(Value::as_str).unwrap_or("");
    let post = name.starts_with("rdma_rw_ctx_post");
    let chain_arg = if post {
        s.chain_wr
    } else {
        call.get("chain_wr_arg").and_then(Value::as_bool).unwrap_or(s.chain_wr)
    };
    let exp: Vec<Wr> = call
        .get("chain")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(expected_wr).collect())
        .unwrap_or_default();
    let n_exp_rw = exp.iter().filter(|w| !w.is_chain).count();
    let mut exp = normalise(exp, chain_arg, s.bvec);
    // §11.8: a repeated `wrs`/`post` on one context rebuilds the first
    // chain (no second key bump, no stale flags); only the chain WR
    // and the signaling follow this call.
    if ci > 0
        && let Some(first) = &rs.first_exp
    {
        let tail: Vec<Wr> = exp.iter().filter(|w| w.is_chain).cloned().collect();
        exp = first.clone();
        for w in exp.iter_mut() {
            w.signaled = false;
            w.wr_cqe = "null";
        }
        if chain_arg {
            exp.extend(tail);
        } else if let Some(last) = exp.last_mut() {
            last.signaled = true;
            last.wr_cqe = if rc.cqe_id == 0 { "null" } else { "caller_cqe" };
        }
    }
    if ci == 0 {
        rs.first_exp = Some(exp.iter().filter(|w| !w.is_chain).cloned().collect());
    }
    let n_norm_rw = exp.iter().filter(|w| !w.is_chain).count();
    let ret = rs.ret;
    if ci == 0 && !rs.regroup {
        rs.exp_ret -= (n_exp_rw - n_norm_rw) as i64;
        if ret != rs.exp_ret {
            return Err(Outcome::Fail(format!("{tag}: ret ours {ret}, expected {}", rs.exp_ret)));
        }
    }
    let ours = ours_chain(ctx, s, rc.cqe_id, post, chain_arg, tag)?;
    if rs.regroup {
        if let Err(d) = mr_equivalent(&ours, &exp) {
            return Err(Outcome::Fail(format!("{tag} call {ci} ({name}), regrouped MRs: {d}")));
        }
        if ci == 0 && ret != ours.iter().filter(|w| !w.is_chain).count() as i64 {
            return Err(Outcome::Fail(format!("{tag}: ret {ret} is not our chain length")));
        }
    } else if let Some(d) = first_diff(&ours, &exp) {
        return Err(Outcome::Fail(format!("{tag} call {ci} ({name}): {d}")));
    }
    Ok(())
}

/// The chain the driver builds for one call, by `post` or by `wrs`.
fn ours_chain<const S: usize, const O: usize>(
    ctx: &mut RwCtx<S, O>,
    s: &mut Setup,
    cqe_id: u64,
    post: bool,
    chain_arg: bool,
    tag: &str,
) -> Result<Vec<Wr>, Outcome> {
    let cw = [chain_wr()];
    let chain: &[SendWr<'_>] = if chain_arg { &cw } else { &[] };
    let ours: Vec<Wr> = if post {
        let mut rec_wrs = Vec::new();
        {
            // Keys and pages are read from the pool after the post.
            let mut sink = Sink(&mut rec_wrs);
            if let Err(e) = ctx.post(&mut sink, &mut s.pool, cqe_id, chain) {
                return Err(Outcome::Fail(format!("{tag}: post failed: {e:?}")));
            }
        }
        rec_wrs.iter().map(|w| ours_wr(&w.as_wr(), &s.pool)).collect()
    } else {
        let mut buf =
            vec![
                SendWr { wr_id: 0, opcode: WrOpcode::Send, flags: SendFlags::NONE, sg_list: &[] };
                ctx.chain_len() + chain.len()
            ];
        match ctx.wrs(&mut s.pool, cqe_id, chain, &mut buf) {
            Ok(n) => buf.iter().take(n).map(|w| ours_wr(w, &s.pool)).collect(),
            Err(e) => return Err(Outcome::Fail(format!("{tag}: wrs failed: {e:?}"))),
        }
    };
    Ok(ours)
}

/// Byte ranges an MR chain moves: (opcode, remote, local, len), merged
/// where both sides continue.
fn rdma_ranges(ws: &[Wr]) -> Vec<(&'static str, u64, u64, u64)> {
    let mut v: Vec<(&'static str, u64, u64, u64)> = Vec::new();
    for w in ws.iter().filter(|w| w.remote_addr.is_some()) {
        let op = if w.opcode == "IB_WR_RDMA_WRITE" { "write" } else { "read" };
        let Some(ra) = w.remote_addr else { continue };
        let mut r = ra;
        for &(a, l, _) in &w.sges {
            match v.last_mut() {
                Some(last) if last.0 == op && last.1 + last.3 == r && last.2 + last.3 == a => {
                    last.3 += l;
                }
                _ => v.push((op, r, a, l)),
            }
            r += l;
        }
    }
    v
}

/// §11.7 equivalence of two MR chains that group the same bytes into
/// different MRs: same bytes moved between the same addresses, each RDMA WR
/// preceded by a REG_MR of at most 256 pages registering exactly its SGE
/// under its key, READ_WITH_INV invalidating that key, same signaling.
fn mr_equivalent(ours: &[Wr], exp: &[Wr]) -> Result<(), String> {
    if rdma_ranges(ours) != rdma_ranges(exp) {
        return Err(format!(
            "byte ranges ours {:x?}, expected {:x?}",
            rdma_ranges(ours),
            rdma_ranges(exp)
        ));
    }
    let mut reg: Option<&Reg> = None;
    for w in ours.iter().filter(|w| !w.is_chain) {
        match w.opcode {
            "IB_WR_LOCAL_INV" => {}
            "IB_WR_REG_MR" => {
                let r = w.reg.as_ref().ok_or("REG_MR without reg")?;
                if r.pages.is_empty() || r.pages.len() > 256 {
                    return Err(format!("MR of {} pages", r.pages.len()));
                }
                reg = Some(r);
            }
            _ => {
                let r = reg.take().ok_or("RDMA WR without a REG_MR before it")?;
                if w.sges != [(r.iova, r.length, r.key)] {
                    return Err(format!("SGE {:x?} is not the MR {:x?}", w.sges, r));
                }
                if w.opcode == "IB_WR_RDMA_READ_WITH_INV" && w.invalidate_rkey != Some(r.key) {
                    return Err("READ_WITH_INV does not invalidate its MR".into());
                }
            }
        }
    }
    let sig = |ws: &[Wr]| -> Vec<(bool, &'static str, bool)> {
        ws.iter()
            .filter(|w| w.signaled || w.is_chain)
            .map(|w| (w.signaled, w.wr_cqe, w.is_chain))
            .collect()
    };
    if sig(ours) != sig(exp) {
        return Err(format!("signaled WRs ours {:?}, expected {:?}", sig(ours), sig(exp)));
    }
    let opk = |ws: &[Wr]| -> Vec<&'static str> {
        let mut v: Vec<&'static str> =
            ws.iter().filter(|w| w.remote_addr.is_some()).map(|w| w.opcode).collect();
        v.dedup();
        v
    };
    if opk(ours) != opk(exp) {
        return Err(format!("opcodes ours {:?}, expected {:?}", opk(ours), opk(exp)));
    }
    Ok(())
}

/// Whether Linux's first chain of `round` moves other than `bi_size` bytes.
fn short_transfer(round: &Value, iter: BvecIter) -> bool {
    let Some(chain) = round
        .get("calls")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .and_then(|c| c.get("chain"))
        .and_then(Value::as_array)
    else {
        return false;
    };
    let bytes: u64 = chain
        .iter()
        .map(expected_wr)
        .filter(|w| w.remote_addr.is_some())
        .flat_map(|w| w.sges.into_iter())
        .map(|s| s.1)
        .sum();
    bytes != u64::from(iter.bi_size)
}

/// An owned copy of a posted WR (the chain borrows the context only during
/// the post).
struct OwnedWr {
    wr_id: u64,
    opcode: WrOpcode,
    flags: SendFlags,
    sges: Vec<irdma::wr::Sge>,
}

impl OwnedWr {
    fn as_wr(&self) -> SendWr<'_> {
        SendWr { wr_id: self.wr_id, opcode: self.opcode, flags: self.flags, sg_list: &self.sges }
    }
}

struct Sink<'v>(&'v mut Vec<OwnedWr>);

impl PostSend for Sink<'_> {
    type Error = ();
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), (usize, ())> {
        for w in wrs {
            self.0.push(OwnedWr {
                wr_id: w.wr_id,
                opcode: w.opcode,
                flags: w.flags,
                sges: w.sg_list.to_vec(),
            });
        }
        Ok(())
    }
}

/// §11.7 check: a valid multi-MR chain covering the whole transfer.
fn check_mr_structure<const S: usize, const O: usize>(
    ctx: &mut RwCtx<S, O>,
    s: &mut Setup,
    n: usize,
) -> Outcome {
    let total: u64 = s.sg.iter().map(|e| e.buf.len() as u64).sum::<u64>() - u64::from(s.sg_offset);
    let mut buf =
        vec![SendWr { wr_id: 0, opcode: WrOpcode::Send, flags: SendFlags::NONE, sg_list: &[] }; n];
    let got = match ctx.wrs(&mut s.pool, CALLER_CQE, &[], &mut buf) {
        Ok(g) => g,
        Err(e) => return Outcome::Fail(format!("wrs failed: {e:?}")),
    };
    let wrs: Vec<Wr> = buf.iter().take(got).map(|w| ours_wr(w, &s.pool)).collect();
    let mut ra = s.remote_addr;
    let mut sum = 0;
    for w in &wrs {
        if let Some(r) = &w.reg
            && (r.pages.len() > 256 || r.pages.is_empty())
        {
            return Outcome::Fail(format!("MR with {} pages", r.pages.len()));
        }
        if w.remote_addr.is_some() {
            if w.remote_addr != Some(ra) || w.sges.len() != 1 {
                return Outcome::Fail(format!("bad RDMA WR {w:x?}"));
            }
            ra += w.sges[0].1;
            sum += w.sges[0].1;
        }
    }
    if sum != total || got != n {
        return Outcome::Fail(format!("MR chain covers {sum} of {total} bytes"));
    }
    Outcome::Pass
}

fn run_sizing(case: &Value) -> Outcome {
    let inp = &case["inputs"];
    let out = &case["outputs"];
    let dev = device(&inp["device"]);
    let force_mr = flag(inp, "force_mr");
    match case["function"].as_str().unwrap_or("") {
        "rdma_rw_mr_factor" => sizing_mr_factor(inp, out, &dev, force_mr),
        "rdma_rw_max_send_wr" => {
            let ours = u64::from(rdma_rw_max_send_wr(
                &dev,
                force_mr,
                num(inp, "max_rdma_ctxs") as u32,
                flag(inp, "integrity_en_flag"),
            ));
            let e = num(out, "ret");
            if ours == e {
                Outcome::Pass
            } else {
                Outcome::Fail(format!("ret ours {ours}, expected {e}"))
            }
        }
        "rdma_rw_init_qp" => sizing_init_qp(inp, out, &dev, force_mr),
        f => Outcome::Fail(format!("unknown function {f}")),
    }
}

/// `rdma_rw_mr_factor` against Linux's (its u32 wrap forgiven).
fn sizing_mr_factor(inp: &Value, out: &Value, dev: &DeviceAttrs, force_mr: bool) -> Outcome {
    let maxpages = num(inp, "maxpages");
    let ours = u64::from(rdma_rw_mr_factor(dev, force_mr, maxpages as u32));
    let linux = num(out, "ret");
    let mr_pages = if dev.rdma_protocol_iwarp || dev.max_sgl_rd != 0 || force_mr {
        u64::from(dev.max_fast_reg_page_list_len.min(256))
    } else {
        u64::from(dev.max_sge_rd)
    };
    let exact = maxpages.div_ceil(mr_pages.max(1)).min(u64::from(u32::MAX));
    // Linux's u32 arithmetic (rw.c: rdma_rw_mr_factor), wrapping as
    // it does; never an overflow panic on odd inputs (found by the
    // conformance_json fuzz target: maxpages 0 with mr_pages 0).
    let wrapped = (maxpages.wrapping_add(mr_pages).wrapping_sub(1) & 0xffff_ffff) / mr_pages.max(1);
    let expected = if linux != exact && linux == wrapped { exact } else { linux };
    if ours == expected {
        Outcome::Pass
    } else {
        Outcome::Fail(format!("ret ours {ours}, expected {expected} (Linux {linux})"))
    }
}

/// `rdma_rw_init_qp`'s send-queue sizing against Linux's (its u32 wrap
/// forgiven); an integrity QP is refused.
fn sizing_init_qp(inp: &Value, out: &Value, dev: &DeviceAttrs, force_mr: bool) -> Outcome {
    let a = &inp["attr"];
    let integrity = num(a, "create_flags") & 64 != 0;
    let mut cap = RwQpCap {
        max_send_wr: num(a, "cap.max_send_wr") as u32,
        max_rdma_ctxs: num(a, "cap.max_rdma_ctxs") as u32,
    };
    let r = rdma_rw_init_qp(dev, force_mr, &mut cap, integrity);
    if integrity {
        return match r {
            Err(RwError::IntegrityUnsupported) => Outcome::Skip(
                "integrity QP: E810 has no integrity handover; the driver refuses it \
                 (as ib_create_named_qp does before rdma_rw_init_qp)"
                    .into(),
            ),
            other => Outcome::Fail(format!("integrity QP not refused: {other:?}")),
        };
    }
    if let Err(e) = r {
        return Outcome::Fail(format!("refused: {e:?}"));
    }
    let linux = num(out, "cap.max_send_wr");
    let ctxs = num(a, "cap.max_rdma_ctxs");
    let wr = num(a, "cap.max_send_wr");
    let f = u64::from(send_wr_factor(dev, force_mr, false));
    let exact = if ctxs == 0 {
        wr
    } else {
        (wr + (f * ctxs).min(u64::from(u32::MAX)))
            .min(u64::from(u32::MAX))
            .min(u64::from(dev.max_qp_wr))
    };
    let wrapped =
        if ctxs == 0 { wr } else { ((wr + f * ctxs) & 0xffff_ffff).min(u64::from(dev.max_qp_wr)) };
    let expected = if linux != exact && linux == wrapped { exact } else { linux };
    let ours = u64::from(cap.max_send_wr);
    let ectx = num(out, "cap.max_rdma_ctxs");
    if ours != expected {
        Outcome::Fail(format!("cap.max_send_wr ours {ours}, expected {expected} (Linux {linux})"))
    } else if u64::from(cap.max_rdma_ctxs) != ectx {
        Outcome::Fail("cap.max_rdma_ctxs changed".into())
    } else {
        Outcome::Pass
    }
}

fn run_case(case: &Value) -> Outcome {
    let f = case["function"].as_str().unwrap_or("");
    let hypothetical =
        case["inputs"]["device"]["name"].as_str().is_some_and(|n| n.contains("HYPOTHETICAL"));
    if hypothetical && f == "rdma_rw_ctx_signature_init" {
        return Outcome::Skip(
            "signature offload success on a HYPOTHETICAL PI device (E810 has no integrity handover)"
                .into(),
        );
    }
    let v = match f {
        "rdma_rw_ctx_init" => run_init_case(case, false),
        "rdma_rw_ctx_init_bvec" => run_init_case(case, true),
        "rdma_rw_ctx_signature_init" => run_signature(case),
        _ => run_sizing(case),
    };
    match v {
        // Run anyway; a difference on a device E810 is not is a skip.
        Outcome::Fail(m) if hypothetical => {
            Outcome::Skip(format!("HYPOTHETICAL device (branch E810 cannot reach); differs: {m}"))
        }
        v => v,
    }
}

/// Signature offload on E810: integrity QPs cannot exist, so the context
/// can only fail; the driver's [`RwCtx::signature_init_sg`] gives Linux's
/// answer for a non-integrity QP in rw.c's order: too many entries
/// (-EINVAL), a failing mapping of `sg` or `prot_sg` (the injected errno),
/// the failing context allocation (-ENOMEM: storage without an op), then
/// the empty `sig_mrs` pool (-EAGAIN); nothing is left mapped or taken.
fn run_signature(case: &Value) -> Outcome {
    let inp = &case["inputs"];
    let out = &case["outputs"];
    let fail_map = num(&inp["inject"], "fail_dma_map_at");
    let fail_alloc = num(&inp["inject"], "fail_alloc_at");
    let inj_err = inp["inject"].get("fail_dma_map_err").and_then(Value::as_i64).unwrap_or(0);
    IdHal::reset(fail_map);
    let mut s = setup(inp, false);
    let mut prot = Vec::new();
    if let Some(a) = inp.get("prot_sg").and_then(Value::as_array) {
        let cnt = inp.get("prot_sg_cnt").and_then(Value::as_u64).unwrap_or(a.len() as u64);
        for e in a.iter().take(cnt as usize) {
            prot.push(SgEntry::new(buf(num(e, "addr"), num(e, "length"))));
        }
    }
    // Linux's only allocation here is the one reg context (kzalloc).
    // SAFETY: IdHal never touches the (fake) buffers.
    let r = unsafe {
        if fail_alloc == 1 {
            RwCtx::<4, 0>::new().signature_init_sg::<IdHal>(&s.qp, &mut s.sg, &mut prot, s.dir)
        } else {
            RwCtx::<4, 4>::new().signature_init_sg::<IdHal>(&s.qp, &mut s.sg, &mut prot, s.dir)
        }
    };
    let rounds = out.get("rounds").and_then(Value::as_array).cloned().unwrap_or_default();
    let eret = rounds.first().and_then(|r| r.get("ret")).and_then(Value::as_i64).unwrap_or(0);
    if live_maps(&s) != 0 || s.pool.in_use() != 0 {
        return Outcome::Fail("signature_init left mappings or MRs behind".into());
    }
    match r {
        Err(e) if i64::from(e.errno()) == eret => Outcome::Pass,
        Err(RwError::MapFailed) if fail_map > 0 && inj_err != 0 && eret == inj_err => Outcome::Pass,
        Err(e) => Outcome::Fail(format!("ret ours {} ({e:?}), expected {eret}", e.errno())),
        Ok(n) => Outcome::Fail(format!("signature context built ({n}) on E810")),
    }
}

/// Runs every case of a parsed `rw-vectors.json`.
pub fn run(v: &Value) -> Tally {
    let mut t = Tally::default();
    let cases = v.get("cases").and_then(Value::as_array).cloned().unwrap_or_default();
    for case in &cases {
        let id = case["id"].as_str().unwrap_or("?");
        if let Some(r) = t.count(id, run_case(case)) {
            println!("skip {id}: {r}");
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sizing case with zero pages on a device with no read SGEs used to
    /// underflow in the runner (fuzz target `conformance_json`).
    #[test]
    fn mr_factor_with_zero_pages_and_zero_sges_does_not_panic() {
        let case = serde_json::json!({
            "function": "rdma_rw_mr_factor",
            "inputs": { "device": { "max_sge_rd": 0 }, "maxpages": 0 },
            "outputs": { "ret": 0 }
        });
        let _ = run_sizing(&case);
    }
}
