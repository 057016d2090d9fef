//! Differential testing of the driver's data path against the vendor's own
//! code (issue #30, first slice).
//!
//! The vendor's `drivers/infiniband/hw/irdma/uk.c` from Debian's
//! `linux-source-6.1` package (the version in `VENDOR_VERSION`) is compiled
//! unmodified against the project's shim kernel headers (`shim/include`) and
//! a flat glue (`shim/glue.c`); nothing fetched is committed. Seeded random
//! cases (`case.rs`) run on the vendor's uk layer and on the driver's
//! (`irdma::uk::{Sq, Rq}`) over rings in host memory, and `run.rs`
//! compares every byte a post wrote, return codes, tracking, ring state and
//! doorbell writes. A difference is shrunk (`shrink.rs`) and printed in the
//! conformance file's JSON schema (`vector.rs`).
//!
//! The control path (second slice): the vendor's `ctrl.c` and
//! `icrdma_hw.c`, compiled unmodified (`shim/ctrl_glue.c` `#include`s
//! ctrl.c so its static WQE builders are reachable), build CQP WQEs with
//! `post_sq = false` into a CQP SQ ring in host memory; `ctrl.rs` compares
//! them, word for word with the valid bit, against `irdma::cqp::cmd`, and
//! `qpc.rs` compares irdma_sc_qp_setctx_roce against
//! `irdma::cqp::ctx::QpRoceCtx::encode`.
//!
//! The LAN admin queue (third slice, `lan.rs`): the vendor's Linux 6.1 ice
//! `ice_controlq.c`, `ice_common.c` and `ice_sched.c`, compiled unmodified
//! in one translation unit (`shim/ice/glue.c`, own shim headers in
//! `shim/ice/include`), against `irdma::ice::AdminQueue` and its typed
//! commands, both on the same scripted firmware (return codes, EBUSY,
//! hangs, CRIT bits, bad heads, ARQ events, versions, MAC read, link
//! status, scheduler resources): one session per two post cases.
//!
//! VSIs, MAC switch rules and the scheduler tree build (`lan_switch.rs`):
//! the vendor's `ice_switch.c` and `ice_fltr.c`, compiled unmodified in
//! their own unit (`shim/ice/switch_glue.c` predefines `ice.h`'s include
//! guard and supplies the little of it they use), with `ice_sched.c` /
//! `ice_common.c`'s tree build, against `irdma::ice` (VSI commands,
//! `MacFilters`, `sched`), on a firmware that hands out rule ids, list ids
//! and TEIDs: one session per four post cases. `ice_lib.c` is not compiled
//! whole (see switch_glue.c); its VSI-context builders are (`lan_vsi.rs`):
//! `ice_vsi_set_tc_cfg` and `ice_set_dflt_vsi_ctx` through `ice_vsi_init`,
//! cut verbatim out of the fetched file at build time (`build_ice_lib.rs`,
//! `shim/ice/lib_glue.c`), against `VsiContext::{pf_add, ctrl_add,
//! for_update}`, all 128 bytes: four contexts per post case.
//!
//! The conformance vectors (`regen/`): `--write-vectors DIR` writes
//! `datapath`, `cqp`, `cqp-ud` and `lan-aq-vectors.json` in the published
//! schemas with the vendor code's results on seeded inputs (same seed and
//! count, same bytes); `--rederive DIR` runs the vendor code on the
//! published files' inputs and reports per file what came out identical,
//! different (and why) or not expressible.
//!
//! HMC (fourth slice, `hmc.rs`): ctrl.c's FPM sizing (irdma_cfg_fpm_val:
//! the query parse, the shrink loop, the commit and its parse) run against a
//! fake device that answers its two CQP ops, and hmc.c (compiled unmodified
//! through `shim/hmc_glue.c`) backing and programming the committed
//! objects' SDs, against the driver's `FpmQuery` / `size_hmc` /
//! `encode_fpm_commit` / `FpmCommit` / `HmcLayout` / `SdEntry`: one case per
//! two post cases. PBLE chunks (paged and direct SDs, PD entries, the
//! PFHMC_PDINV writes, their teardown) against `irdma::test_support` (the
//! `test-support` feature, which only this crate enables), in those cases
//! and in a PBLE-only case every other HMC round.
//!
//! The rw area (fifth slice, `rw.rs`): the vendor's Linux 6.1 core
//! `rw.c` and `mr_pool.c`, unmodified, in their own translation unit
//! (`shim/rw/glue.c`, `shim/rw/include`; `ib_sg_to_pages` cut verbatim out
//! of core `verbs.c` by `build_rw.rs`), against `irdma::rw`: sessions of
//! R/W contexts over seeded devices, scatter lists and MR pools (one per
//! post case, from a stream of its own).
//!
//! Where the driver is deliberately stricter, the difference must match an
//! entry of `deviations.toml` (read at run time, every entry must be known
//! to the classifier in `run.rs` and vice versa); it is counted and listed,
//! never skipped silently.
//!
//! The same shims and glue also build the vendor's side of the
//! instruction-count bench (issue #33): `shim/bench.c`, compiled by
//! `cargo xtask bench` (not by this crate) with the vendor's `uk.c` at -O2
//! and `VD_ONE_STORE_DOORBELL` (the doorbell one store into host memory
//! instead of this harness's recording BAR); what it counts is written there.

/// A driver struct from the glue's C struct `$k`: the fields in braces as
/// written, then `flag [..]` (the C byte `!= 0`) and `copy [..]` (the
/// value as is) from the glue's field of the same name.
#[cfg(vendor_c)]
macro_rules! from_glue {
    ($k:ident, $($T:ident)::+ { $($f:ident $(: $e:expr)?),* $(,)? }
        $(flag [$($b:ident)*])? $(copy [$($c:ident)*])?) => {
        $($T)::+ { $($f $(: $e)?,)* $($($b: $k.$b != 0,)*)? $($($c: $k.$c,)*)? }
    };
}

#[cfg(vendor_c)]
pub mod case;
#[cfg(vendor_c)]
pub mod cq;
#[cfg(vendor_c)]
pub mod ctrl;
#[cfg(vendor_c)]
mod ffi;
#[cfg(vendor_c)]
pub mod hmc;
#[cfg(vendor_c)]
pub mod lan;
#[cfg(vendor_c)]
pub mod lan_switch;
#[cfg(vendor_c)]
pub mod lan_vsi;
#[cfg(vendor_c)]
pub mod qpc;
#[cfg(vendor_c)]
pub mod regen;
pub mod rng;
#[cfg(vendor_c)]
pub mod run;
#[cfg(vendor_c)]
pub mod rw;
#[cfg(vendor_c)]
mod shrink;
#[cfg(vendor_c)]
mod vector;

pub mod deviations;

/// One test at a time: the vendor C behind the glue keeps process-wide
/// state (the recording BAR's log, the CQP ring, the fake firmware), so
/// the harness's own tests running on parallel threads would read each
/// other's writes.
#[cfg(test)]
pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

use std::collections::BTreeMap;

/// The run's parameters.
#[derive(Clone, Copy, Debug)]
pub struct Opts {
    pub seed: u64,
    pub cases: u64,
}

/// What a run found.
#[derive(Debug, Default)]
pub struct Report {
    pub cases: u64,
    pub same: u64,
    pub deviations: BTreeMap<String, u64>,
    pub differences: u64,
    /// Posts compared (SQ and RQ).
    pub ops: u64,
    /// CQ scripts run (one per post case).
    pub cq_cases: u64,
    /// CQP commands compared (one per post case).
    pub ctrl_cases: u64,
    /// RoCE QP host contexts compared (one per post case).
    pub qpc_cases: u64,
    /// LAN admin-queue sessions compared (one per two post cases).
    pub lan_cases: u64,
    /// Operations in those sessions (the start included).
    pub lan_ops: u64,
    /// HMC sizing / layout / SD programming cases (`hmc.rs`).
    pub hmc_cases: u64,
    /// rw sessions compared (`rw::PER_CASE` per post case).
    pub rw_cases: u64,
    /// VSI / switch-rule / scheduler sessions compared (lan_switch.rs; one
    /// per four post cases).
    pub sw_cases: u64,
    /// VSI contexts compared (lan_vsi.rs; `lan_vsi::PER_CASE` per post case).
    pub vsi_ctx_cases: u64,
}

#[cfg(any(vendor_c, test))]
impl Report {
    /// Counts a case that deviates as the deviation `id` documents.
    pub(crate) fn deviation(&mut self, id: &str) {
        *self.deviations.entry(id.into()).or_default() += 1;
    }

    /// Counts a difference (the caller printed it); true at the fifth, when
    /// the run stops (said here).
    pub(crate) fn difference(&mut self) -> bool {
        self.differences += 1;
        let stop = self.differences >= 5;
        if stop {
            println!("(stopping after 5 differences)");
        }
        stop
    }
}

/// Runs `f`, adding the time it took to `spent`.
#[cfg(vendor_c)]
fn timed<T>(spent: &mut std::time::Duration, f: impl FnOnce() -> T) -> T {
    let t = std::time::Instant::now();
    let r = f();
    *spent += t.elapsed();
    r
}

/// Runs `opts.cases` cases from `opts.seed`; prints each difference (shrunk,
/// as a conformance vector) and a summary. `Err` when a difference was
/// found or the harness could not run.
pub fn main_with(opts: Opts, deviations_file: &str) -> Result<Report, String> {
    let devs = deviations::load(deviations_file)?;
    run_all(opts, &devs)
}

#[cfg(not(vendor_c))]
fn run_all(_opts: Opts, _devs: &deviations::Deviations) -> Result<Report, String> {
    Err("the vendor sources were not compiled in (IRDMA_VENDOR_DIR unset at build time): \
         run `cargo xtask vendor-diff`, which fetches linux-source-6.1 and builds this crate"
        .into())
}

/// Control-path cases per post case: CQP commands and QP contexts are
/// cheap (about 2 µs each), so each round runs several.
#[cfg(vendor_c)]
const CTRL_PER_CASE: u64 = 8;
#[cfg(vendor_c)]
const QPC_PER_CASE: u64 = 4;

/// One round of control-path cases; true when the run should stop (five
/// differences).
#[cfg(vendor_c)]
fn ctrl_round(
    n: u64,
    seed: u64,
    rng: &mut rng::Rng,
    vcqp: &mut ctrl::VendorCqp,
    rep: &mut Report,
) -> bool {
    let note =
        |rep: &mut Report, r: Result<Option<&'static str>, ctrl::CtrlDiff>, what: &str| match r {
            Ok(None) => false,
            Ok(Some(id)) => {
                rep.deviation(id);
                false
            }
            Err(d) => {
                println!("DIFF control-path case #{n} (seed {seed:#x}): {}", d.what);
                println!("  {what}");
                rep.difference()
            }
        };
    for _ in 0..CTRL_PER_CASE {
        let cc = ctrl::gen_ctrl_case(rng);
        rep.ctrl_cases += 1;
        let r = ctrl::run_ctrl(vcqp, &cc);
        if note(rep, r, &ctrl::describe(&cc)) {
            return true;
        }
    }
    for _ in 0..QPC_PER_CASE {
        let q = qpc::gen_qpc(rng);
        rep.qpc_cases += 1;
        let r = qpc::run_qpc(vcqp, &q);
        if note(rep, r, &format!("context input: {q:?}")) {
            return true;
        }
    }
    false
}

/// One LAN admin-queue session; true when the run should stop (five
/// differences).
#[cfg(vendor_c)]
fn lan_round(n: u64, seed: u64, rng: &mut rng::Rng, rep: &mut Report) -> bool {
    let c = lan::gen_lan_case(rng);
    rep.lan_cases += 1;
    rep.lan_ops += 1 + c.ops.len() as u64;
    match lan::run_lan(&c) {
        lan::LanOutcome::Same => false,
        lan::LanOutcome::Deviation(id) => {
            rep.deviation(id);
            false
        }
        lan::LanOutcome::Differs(d) => {
            let (small, d) = lan::shrink_lan(c, d);
            println!("DIFF LAN admin-queue case #{n} (seed {seed:#x}): op {}: {}", d.op, d.what);
            println!("{}", lan::print_lan(&small, &d));
            if rep.difference() {
                return true;
            }
            false
        }
    }
}

/// HMC cases per HMC round (`hmc.rs`; a round every two post cases).
#[cfg(vendor_c)]
const HMC_PER_CASE: u64 = 1;

/// One round of HMC cases; true when the run should stop (five differences).
#[cfg(vendor_c)]
fn hmc_round(n: u64, seed: u64, rng: &mut rng::Rng, rep: &mut Report) -> bool {
    for _ in 0..HMC_PER_CASE {
        let c = hmc::gen_hmc(rng);
        rep.hmc_cases += 1;
        match hmc::run_hmc(&c) {
            hmc::HmcOutcome::Same => {}
            hmc::HmcOutcome::Deviation(id) => rep.deviation(id),
            hmc::HmcOutcome::Differs(d) => {
                let (small, d) = hmc::shrink_hmc(c, d);
                println!("DIFF HMC case #{n} (seed {seed:#x}): {}", d.what);
                println!("{}", hmc::print_hmc(&small, &d));
                if rep.difference() {
                    return true;
                }
            }
        }
        // every other HMC round (n is odd here) a PBLE-only case (paged / direct chunks, PD
        // entries, PDINV; keeps the HMC share of the leg near 10 s), from
        // its own stream so the other areas' cases stay as they were
        if n % 4 != 1 {
            continue;
        }
        let mut crng = rng::Rng::new(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xc4_0c4);
        let cc = hmc::gen_chunk_case(&mut crng);
        match hmc::run_chunk_case(&cc) {
            hmc::HmcOutcome::Same => {}
            hmc::HmcOutcome::Deviation(id) => rep.deviation(id),
            hmc::HmcOutcome::Differs(d) => {
                println!("DIFF HMC PBLE case #{n} (seed {seed:#x}): {}", d.what);
                println!("{}", hmc::print_chunk_case(&cc, &d));
                if rep.difference() {
                    return true;
                }
            }
        }
    }
    false
}

/// One VSI / switch-rule / scheduler session (lan_switch.rs); true when
/// the run should stop (five differences).
#[cfg(vendor_c)]
fn sw_round(n: u64, seed: u64, rng: &mut rng::Rng, rep: &mut Report) -> Result<bool, String> {
    let c = lan_switch::gen_sw_case(rng);
    rep.sw_cases += 1;
    match lan_switch::run_sw(&c)? {
        lan_switch::SwOutcome::Same => {}
        lan_switch::SwOutcome::Deviation(id) => rep.deviation(id),
        lan_switch::SwOutcome::Differs(d) => {
            let (small, d) = lan_switch::shrink_sw(c, d);
            println!(
                "DIFF LAN switch/scheduler case #{n} (seed {seed:#x}): op {}: {}",
                d.op, d.what
            );
            println!("{}", lan_switch::print_sw(&small, &d));
            if rep.difference() {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

#[cfg(vendor_c)]
fn run_all(opts: Opts, devs: &deviations::Deviations) -> Result<Report, String> {
    let known = known_ids();
    let mut tm = Times::default();
    // the rw area draws from its own stream: the other areas' cases stay
    // what they were without it
    let mut rw_rng = rng::Rng::new(opts.seed ^ rw::SEED_SALT);
    // so does the VSI-context area
    let mut vsi_rng = rng::Rng::new(opts.seed ^ lan_vsi::SEED_SALT);
    devs.check_known(&known)?;
    let mut vcqp = ctrl::VendorCqp::new(4)?;
    let t = std::time::Instant::now();
    let mut rep = Report::default();
    let mut rng = rng::Rng::new(opts.seed);
    println!("vendor-diff: seed {:#x}, {} cases", opts.seed, opts.cases);
    match run::helpers() {
        Ok(k) => println!("  sizing tables: {k} rows equal"),
        Err(e) => {
            println!("DIFF sizing table: {e}");
            rep.differences += 1;
        }
    }
    for n in 0..opts.cases {
        if post_round(n, opts.seed, &mut rng, &mut rep) {
            break;
        }
        if timed(&mut tm.ctrl, || ctrl_round(n, opts.seed, &mut rng, &mut vcqp, &mut rep)) {
            break;
        }
        // one LAN admin-queue session per two post cases (a session sets up
        // two queues per side, sometimes eleven times)
        if n % 2 == 0 && timed(&mut tm.lan, || lan_round(n, opts.seed, &mut rng, &mut rep)) {
            break;
        }
        // one HMC case per two post cases (a sizing runs up to 2000 shrink
        // rounds on each side)
        if n % 2 == 1 && timed(&mut tm.hmc, || hmc_round(n, opts.seed, &mut rng, &mut rep)) {
            break;
        }
        // one VSI / switch / scheduler session per four post cases (about
        // 1.5 ms each: the leg's share stays under 10 s)
        if n % 4 == 1 && timed(&mut tm.sw, || sw_round(n, opts.seed, &mut rng, &mut rep))? {
            break;
        }
        if timed(&mut tm.rw, || rw::rw_round(n, opts.seed, &mut rw_rng, &mut rep)) {
            break;
        }
        if timed(&mut tm.vsi, || lan_vsi::vsi_round(n, opts.seed, &mut vsi_rng, &mut rep)) {
            break;
        }
        if cq_round(n, opts.seed, &mut rng, &mut rep) {
            break;
        }
    }
    print_summary(&rep, &tm, t.elapsed(), devs);
    if rep.differences == 0 { Ok(rep) } else { Err(format!("{} differences", rep.differences)) }
}

/// Every deviation id an area can report; deviations.toml must list them.
#[cfg(vendor_c)]
fn known_ids() -> Vec<&'static str> {
    run::KNOWN_DEVIATIONS
        .iter()
        .chain(ctrl::KNOWN)
        .chain(lan::KNOWN)
        .chain(hmc::KNOWN)
        .chain(rw::KNOWN)
        .chain(lan_switch::KNOWN)
        .chain(lan_vsi::KNOWN)
        .copied()
        .collect()
}

/// The time spent in each area of a run.
#[cfg(vendor_c)]
#[derive(Default)]
struct Times {
    ctrl: std::time::Duration,
    lan: std::time::Duration,
    hmc: std::time::Duration,
    sw: std::time::Duration,
    rw: std::time::Duration,
    vsi: std::time::Duration,
}

/// Post case `n`: a difference is shrunk and printed as a vector. Whether
/// the run stops.
#[cfg(vendor_c)]
fn post_round(n: u64, seed: u64, rng: &mut rng::Rng, rep: &mut Report) -> bool {
    let case = case::gen_case(rng);
    rep.cases += 1;
    rep.ops += case.ops.len() as u64;
    let mut vp = None;
    match run::run(&case, &mut vp) {
        run::Outcome::Same => rep.same += 1,
        run::Outcome::Deviation(id) => rep.deviation(id),
        run::Outcome::Differs(d) => {
            let (small, d) = shrink::shrink(case, d);
            let mut vp = None;
            let _ = run::run(&small, &mut vp);
            println!("DIFF case #{n} (seed {seed:#x}): op {}: {}", d.op, d.what);
            println!("{}", vector::print(&small, &d, vp));
            return rep.difference();
        }
    }
    false
}

/// CQ script `n`: a difference is shrunk and printed. Whether the run stops.
#[cfg(vendor_c)]
fn cq_round(n: u64, seed: u64, rng: &mut rng::Rng, rep: &mut Report) -> bool {
    let cqc = cq::gen_cq_case(rng);
    rep.cq_cases += 1;
    match cq::run_cq(&cqc) {
        Ok(None) => {}
        Ok(Some(id)) => rep.deviation(id),
        Err(d) => {
            let (small, d) = cq::shrink_cq(cqc, d);
            println!("DIFF cq case #{n} (seed {seed:#x}): event {}: {}", d.op, d.what);
            print!("{}", cq::describe(&small));
            // the whole shrunk case, for a regression test
            println!("{small:?}");
            return rep.difference();
        }
    }
    false
}

/// The run's counts, per-area statistics and times (`elapsed` in all),
/// and the deviations met with their reasons.
#[cfg(vendor_c)]
fn print_summary(
    rep: &Report,
    tm: &Times,
    elapsed: std::time::Duration,
    devs: &deviations::Deviations,
) {
    println!(
        "vendor-diff: {} post cases ({} posts) + {} CQ scripts + {} CQP commands + {} QP contexts: {} post cases same, {} deviating as listed, {} different, {:.1}s",
        rep.cases,
        rep.ops,
        rep.cq_cases,
        rep.ctrl_cases,
        rep.qpc_cases,
        rep.same,
        rep.deviations.values().sum::<u64>(),
        rep.differences,
        elapsed.as_secs_f64()
    );
    println!("  {}", run::stats::line());
    println!(
        "  {}; QP contexts equal: {}; control path {:.1}s",
        ctrl::stats::line(),
        qpc::EQUAL.load(std::sync::atomic::Ordering::Relaxed),
        tm.ctrl.as_secs_f64()
    );
    println!(
        "  LAN admin queue: {} sessions, {} operations, {:.1}s",
        rep.lan_cases,
        rep.lan_ops,
        tm.lan.as_secs_f64()
    );
    println!("  {} in {} cases, {:.1}s", hmc::stats::line(), rep.hmc_cases, tm.hmc.as_secs_f64());
    println!(
        "  rw (core/rw.c + mr_pool.c): {} sessions, {} operations, {:.1}s",
        rep.rw_cases,
        rw::stats::ops(),
        tm.rw.as_secs_f64()
    );
    println!("  {}", rw::stats::line());
    println!(
        "  LAN VSI / switch rules / scheduler tree: {} sessions, {:.1}s: {}",
        rep.sw_cases,
        tm.sw.as_secs_f64(),
        lan_switch::stats::line()
    );
    println!(
        "  LAN VSI contexts (ice_lib.c ice_vsi_init): {} compared, {:.1}s: {}",
        rep.vsi_ctx_cases,
        tm.vsi.as_secs_f64(),
        lan_vsi::stats::line()
    );
    for (id, k) in &rep.deviations {
        println!("  deviation {id}: {k} cases ({})", devs.reason(id));
    }
}

#[cfg(test)]
mod tests {
    use super::Report;

    #[test]
    fn the_fifth_difference_stops_the_run_and_deviations_count_by_id() {
        let mut r = Report::default();
        let stops: Vec<bool> = (0..5).map(|_| r.difference()).collect();
        assert_eq!(stops, [false, false, false, false, true]);
        assert_eq!(r.differences, 5);
        r.deviation("a");
        r.deviation("b");
        r.deviation("a");
        assert_eq!(r.deviations.get("a"), Some(&2));
        assert_eq!(r.deviations.get("b"), Some(&1));
    }
}
