//! `cargo xtask bench`: every tracked figure as `name=value`.
//!
//! * Instructions per data-path operation: builds the `uk` bench binary
//!   (release), runs each case with N and 2N iterations under
//!   `valgrind --tool=callgrind`, value = (Ir(2N) − Ir(N)) / N, so set-up
//!   cost cancels.
//! * `.text` of the driver + hal in the firmware example, per target, at the
//!   release profile and with LTO + opt-level "s" ([`crate::size`]).
//! * The DMA memory `Device::probe` holds for 16/64/256-QP profiles (from the
//!   `footprint_per_profile_matches_live_pages` test, which checks them
//!   against FakeHal's live pages).
//!
//! * The vendor's side (issue #33): the kernel's irdma `uk.c` (the Debian
//!   package `tests/vendor-diff/VENDOR_VERSION` names, fetched by
//!   [`crate::vendor_diff::vendor_tree`], never committed) compiled at -O2
//!   with the differential harness's own shims and glue and
//!   `tests/vendor-diff/shim/bench.c` into one program, measured the same
//!   way (`vendor_uk_*`), then each goal of issue #33 beside our figure, the
//!   vendor's and their ratio, marked met or not met. What each side counts
//!   is written in `bench.c`. The vendor's verbs level: the kernel's
//!   `verbs.c` `irdma_post_send` / `irdma_poll_cq` and the few functions
//!   they call, copied out of the same tree at bench time ([`VERBS_FNS`],
//!   never committed) and compiled over `uk.c` with
//!   `tests/vendor-diff/shim/bench_verbs.c` (`vendor_verbs_*`; see
//!   [`VENDOR_VERBS`]). `cargo xtask bench --vs-vendor` prints only these and
//!   our instruction figures. Where both sides are measured, `ratio_<name>`
//!   is ours ÷ the vendor's ([`ratio_figures`]).
//!
//! `bench-guard` (a leg of `cargo xtask test`) re-measures the instruction
//! counts (N/4 iterations), the vendor's uk figures and the ratios, and the
//! release `.text` sizes, and fails when one exceeds `benches/baseline.txt`
//! by more than 10 % (instructions, ratios) or 5 % (`.text`). The vendor's
//! figures are measured but not guarded (its code does not change); a ratio
//! that grows more than 10 % is a regression of ours against the same
//! vendor code. The guard needs the vendor tree, like `vendor-diff`.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use crate::size::{self, TextSize};
use crate::util::{SysPackage, ensure_program, root};

/// (printed name, bench case, subtract this case's figure, iterations N,
/// operations per iteration the figure is divided by).
const CASES: &[Case] = &[
    ("post_write_1sge_doorbell_each", "post_write", None, 4096, 1),
    ("post_write_1sge_doorbell_per32", "post_write_batch32", None, 4096, 1),
    // Other shapes, one doorbell each (issue #16: the two-quanta fast path
    // for 2-3 SGEs and WRITE/SEND with immediate; guarded).
    ("post_write_2sge", "post_write_2sge", None, 4096, 1),
    ("post_write_3sge", "post_write_3sge", None, 4096, 1),
    ("post_write_imm", "post_write_imm", None, 4096, 1),
    ("post_send_imm", "post_send_imm", None, 4096, 1),
    // The single-owner post + its poller retirement `Sq::complete_at`
    // naming the last WQE, the same harness as the `mp_post_write_*` cases
    // (like-for-like with them; the two above retire by `consume_all`).
    ("post_complete_write_1sge_doorbell_each", "post_complete_write", None, 4096, 1),
    ("post_complete_write_1sge_doorbell_per32", "post_complete_write_batch32", None, 4096, 1),
    ("mp_post_write_1sge_doorbell_each", "mp_post_write", None, 4096, 1),
    ("mp_post_write_1sge_doorbell_per32", "mp_post_write_batch32", None, 4096, 1),
    // The post alone (a ring that holds every WR of the run: no retirement).
    ("mp_post_only_write_1sge_doorbell_each", "mp_post_only_write", None, 4096, 1),
    ("mp_post_only_write_1sge_doorbell_per32", "mp_post_only_write_batch32", None, 4096, 1),
    ("poll_one_cqe", "poll_cqe", Some("poll_cqe_base"), 2048, 1),
    ("poll_empty_cq", "poll_empty", None, 4096, 1),
    ("split_post_write_1sge_doorbell_each", "split_post_write", None, 4096, 1),
    ("split_post_write_1sge_doorbell_per32", "split_post_write_batch32", None, 4096, 1),
    ("poll_one_cqe_split", "split_poll_cqe", Some("poll_cqe_base"), 2048, 1),
    // The real verbs `Cq::poll` on a device model, one call that returns
    // one completion / one call on an empty CQ (`verbs_*` cases count only
    // inside the bench's `counted_poll`: see `instructions`).
    // The uk poll of one CQE alone (only the `counted_poll_uk*` call is
    // counted: no producer work, no subtracted base), single-owner and split.
    ("poll_one_cqe_counted", "counted_poll_one", None, 2048, 1),
    ("poll_one_cqe_split_counted", "counted_poll_one_split", None, 2048, 1),
    ("verbs_poll_one_cqe", "verbs_poll_cqe", None, 512, 1),
    ("verbs_poll_empty_cq", "verbs_poll_empty", None, 512, 1),
    // Issue #31: one completion through the interrupt path on the device
    // model — the `Cq::completion` future's arming poll, the handler
    // (`Device::handle_interrupt`: CEQ drain, CQACK, wake, re-enable) and
    // the woken poll returning it — beside `verbs_poll_one_cqe`; and the
    // handler alone. The model's processing of the BAR writes is not
    // counted (not guarded).
    ("verbs_irq_path_per_completion", "verbs_irq_path", None, 512, 1),
    ("verbs_irq_handler_per_completion", "verbs_irq_handler", None, 512, 1),
    // The verbs posts on a device model: one `SharedQp::post_send` /
    // single-owner `Qp::post_send` (split QP) of one signaled 1-SGE WRITE
    // per call, or of a 32-WR chain (per WR). Only the post call is counted,
    // not the model's processing of its doorbell (see `instructions`).
    ("verbs_post_write_1sge_doorbell_each", "verbs_post_write", None, 2048, 1),
    ("verbs_post_write_1sge_doorbell_per32", "verbs_post_write_batch32", None, 2048, 1),
    ("verbs_shared_post_write_1sge_doorbell_each", "verbs_shared_post_write", None, 2048, 1),
    (
        "verbs_shared_post_write_1sge_doorbell_per32",
        "verbs_shared_post_write_batch32",
        None,
        2048,
        1,
    ),
    // init_bvec + wrs + post + retire + destroy_bvec of 16 bvecs, per bvec.
    ("rw_bvec16_per_bvec", "rw_bvec16", None, 512, 16),
];

/// The vendor's uk-level cases (`tests/vendor-diff/shim/bench.c`), in the
/// same form as [`CASES`]; printed as `vendor_uk_<name>`. Each is the twin
/// of the driver's figure of the same name (`benches/common`).
const VENDOR_CASES: &[Case] = &[
    ("post_write_1sge_doorbell_each", "post_write", None, 4096, 1),
    ("post_write_1sge_doorbell_per32", "post_write_batch32", None, 4096, 1),
    ("poll_one_cqe", "poll_cqe", Some("poll_cqe_base"), 2048, 1),
    ("poll_empty_cq", "poll_empty", None, 4096, 1),
];

/// The vendor's verbs-level cases (`tests/vendor-diff/shim/bench_verbs.c`),
/// in the same form as [`CASES`], each named after its driver twin and
/// printed as `vendor_<name>`. Only the call is counted, as for the
/// driver's `verbs_*` cases (the C program's `counted_post_verbs` /
/// `counted_poll_verbs` match the same callgrind toggles in
/// [`instructions`]).
const VENDOR_VERBS_CASES: &[Case] = &[
    ("verbs_post_write_1sge_doorbell_each", "verbs_post_write", None, 2048, 1),
    ("verbs_post_write_1sge_doorbell_per32", "verbs_post_write_batch32", None, 2048, 1),
    ("verbs_poll_one_cqe", "verbs_poll_cqe", None, 512, 1),
    ("verbs_poll_empty_cq", "verbs_poll_empty", None, 512, 1),
];

/// The vendor's functions the verbs-level bench copies out of the fetched
/// tree (file under `drivers/infiniband/hw/irdma`, the start of the line
/// that begins the definition): each is copied from that line through the
/// first line that is a lone `}`, and compiled unmodified.
const VERBS_FNS: &[(&str, &str)] = &[
    ("verbs.h", "static inline void set_ib_wc_op_sq("),
    ("verbs.h", "static inline void set_ib_wc_op_rq("),
    ("utils.c", "int irdma_generated_cmpls("),
    ("verbs.c", "static int irdma_process_resize_list("),
    ("verbs.c", "static int irdma_post_send("),
    ("verbs.c", "static enum ib_wc_status irdma_flush_err_to_ib_wc_status("),
    ("verbs.c", "static void irdma_process_cqe("),
    ("verbs.c", "static inline int irdma_poll_one("),
    ("verbs.c", "static int __irdma_poll_cq("),
    ("verbs.c", "static int irdma_poll_cq("),
];

/// The text of the one C function definition in `text` whose first line
/// starts with `start`: that line through the first line that is `}`.
fn c_function(text: &str, start: &str) -> Result<String, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut at = lines.iter().enumerate().filter(|(_, l)| l.starts_with(start)).map(|(i, _)| i);
    let (Some(i), None) = (at.next(), at.next()) else {
        return Err(format!("not exactly one definition starting {start:?}"));
    };
    let end = (i..lines.len())
        .find(|&k| lines[k] == "}")
        .ok_or_else(|| format!("no closing brace after {start:?}"))?;
    Ok(lines[i..=end].join("\n") + "\n")
}

/// What the vendor's verbs-level figures count (printed by `cargo xtask
/// bench`).
///
/// The kernel's verbs level (linux-source-6.1
/// `drivers/infiniband/hw/irdma/verbs.c`):
/// `irdma_post_send` takes `spin_lock_irqsave` on the QP, per WR clears an
/// `irdma_post_sq_info` and fills it from the `ib_send_wr` (flags, opcode
/// switch), calls the uk post with `post_sq = false`, and rings once after
/// the chain (`irdma_uk_qp_post_wr`, if no flush was issued and the QP is
/// at most RTS) before unlocking. `irdma_poll_cq` takes `spin_lock_irqsave`
/// on the CQ, walks the resized-buffer list, polls the uk CQ into
/// `iwcq->cur_cqe`, converts each completion to an `ib_wc`
/// (`irdma_process_cqe`) and, on an empty CQ, looks for software-generated
/// flush completions (`irdma_generated_cmpls`). verbs.c cannot be compiled
/// whole here (its main.h pulls in about 35 ib_core / netdev / iw_cm /
/// rdma_cm headers), so those functions are copied out ([`VERBS_FNS`]) and
/// compiled against `bench_verbs.c`'s reduced structures.
pub const VENDOR_VERBS: &str = "vendor verbs level: the kernel's verbs.c irdma_post_send / \
     irdma_poll_cq (+ __irdma_poll_cq, irdma_process_cqe, irdma_generated_cmpls) copied \
     from the fetched tree at bench time, compiled unmodified over uk.c (gcc -O2, \
     one-store doorbell) with tests/vendor-diff/shim/bench_verbs.c; its spinlock is an \
     uncontended atomic exchange + release store without the IRQ-flag save/restore; \
     only the call counted, as ours. rdma-core's uverbs.c (the issue's 360/285/311/121) \
     is not built: with a deb-src entry apt fetches rdma-core 44.0-2's .dsc, but the \
     mirror answers 404 for rdma-core_44.0.orig.tar.gz (tried 2026-12-05)";

/// The name of the vendor's twin of our figure `name`: `vendor_uk_<name>`
/// for a uk figure, `vendor_<name>` for a `verbs_*` one.
fn vendor_name(name: &str) -> String {
    if name.starts_with("verbs_") { format!("vendor_{name}") } else { format!("vendor_uk_{name}") }
}

/// Issue #33's goals: (level, our figure, goal in instructions per op).
/// The vendor's twin of a figure is [`vendor_name`]'s.
const GOALS: &[(&str, &str, f64)] = &[
    ("uk", "post_write_1sge_doorbell_each", 89.0),
    ("uk", "post_write_1sge_doorbell_per32", 87.0),
    ("uk", "poll_one_cqe", 51.0),
    ("uk", "poll_empty_cq", 13.0),
    ("verbs", "verbs_post_write_1sge_doorbell_each", 120.0),
    ("verbs", "verbs_post_write_1sge_doorbell_per32", 95.0),
    ("verbs", "verbs_poll_one_cqe", 104.0),
    ("verbs", "verbs_poll_empty_cq", 40.0),
];

/// One line per goal: `goal_<figure>=<goal>  # …: met / NOT MET`, with the
/// vendor's figure and the ratio where the vendor side was measured.
fn goal_lines(ours: &[(String, f64)], vendor: &[(String, f64)]) -> Vec<String> {
    let get = |v: &[(String, f64)], k: &str| v.iter().find(|(n, _)| n == k).map(|(_, x)| *x);
    GOALS
        .iter()
        .map(|(level, name, goal)| {
            let (o, v) = (get(ours, name), get(vendor, &vendor_name(name)));
            let mark = match o {
                Some(o) if o <= *goal => "met",
                Some(_) => "NOT MET",
                None => "not measured",
            };
            let o = o.map_or("-".into(), |o| format!("{o:.1}"));
            let vs = match (get(ours, name), v) {
                (Some(o), Some(v)) => format!(", vendor {v:.1}, ratio {:.2}", o / v),
                _ => ", vendor not measured".into(),
            };
            format!("goal_{name}={goal}  # {level}: ours {o}{vs}: {mark}")
        })
        .collect()
}

/// A callgrind case: figure name, case, baseline case subtracted, iteration
/// count, operations per iteration.
type Case = (&'static str, &'static str, Option<&'static str>, u64, u64);

/// The figures of `cases` run by `exe`, `divisor` dividing the iteration
/// counts, each named by `name`: instructions per operation, less the
/// baseline case's.
fn case_figures(
    exe: &PathBuf,
    cases: &[Case],
    divisor: u64,
    name: impl Fn(&str) -> String,
) -> Result<Vec<(String, f64)>, String> {
    let mut v = Vec::new();
    for (figure, case, base, n, per) in cases {
        let n = (*n / divisor).max(1);
        let mut x = per_op(exe, case, n)?;
        if let Some(b) = base {
            x -= per_op(exe, b, n)?;
        }
        v.push((name(figure), x / *per as f64));
    }
    Ok(v)
}

/// Builds a vendor bench program into `target/vendor-bench/<exe>`: the
/// shim's `main_c` (in `tests/vendor-diff/shim/`) with the vendor's `uk.c`
/// and the harness's `glue.c` and shim headers (gcc -O2, the one-store
/// doorbell; `vendor-bench/` itself on the include path), after `prepare`
/// wrote what it needs there; then runs its self-check. `what` names it in
/// errors.
fn build_vendor_bench(
    main_c: &str,
    exe: &str,
    what: &str,
    prepare: impl FnOnce(&std::path::Path, &std::path::Path) -> Result<(), String>,
) -> Result<PathBuf, String> {
    crate::util::ensure_program(&crate::vendor_diff::CC)?;
    let tree = crate::vendor_diff::vendor_tree()?;
    let irdma = tree.join("drivers/infiniband/hw/irdma");
    let shim = root().join("tests/vendor-diff/shim");
    let out_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
        .join("vendor-bench");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    prepare(&irdma, &out_dir)?;
    let exe = out_dir.join(exe);
    // -fno-strict-aliasing as the kernel builds it (and build.rs of the
    // differential harness); -g for callgrind's per-function breakdown.
    let out = Command::new("cc")
        .args(["-O2", "-g", "-fno-strict-aliasing", "-DVD_ONE_STORE_DOORBELL", "-o"])
        .arg(&exe)
        .arg("-I")
        .arg(shim.join("include"))
        .arg("-I")
        .arg(&irdma)
        .arg("-I")
        .arg(&out_dir)
        .arg(irdma.join("uk.c"))
        .arg(shim.join("glue.c"))
        .arg(shim.join(main_c))
        .output()
        .map_err(|e| format!("cannot run cc: {e}"))?;
    if !out.status.success() {
        return Err(format!("{what} build failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let out = Command::new(&exe)
        .arg("check")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!("{what} self-check failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(exe)
}

/// Builds the vendor bench program (`tests/vendor-diff/shim/bench.c`, see
/// [`build_vendor_bench`]) and runs its self-check (every case past a ring
/// wrap: doorbells rung, each CQE returned with its WR id, the empty CQ
/// empty).
fn vendor_bench_binary() -> Result<PathBuf, String> {
    build_vendor_bench("bench.c", "vendor_bench", "vendor bench", |_, _| Ok(()))
}

/// The vendor's uk-level and verbs-level figures, `vendor_uk_<name>`,
/// `divisor` dividing the iteration counts.
fn vendor_figures(divisor: u64) -> Result<Vec<(String, f64)>, String> {
    ensure_program(&VALGRIND)?;
    let mut v = case_figures(&vendor_bench_binary()?, VENDOR_CASES, divisor, vendor_name)?;
    let exe = vendor_verbs_bench_binary()?;
    v.extend(case_figures(&exe, VENDOR_VERBS_CASES, divisor, vendor_name)?);
    Ok(v)
}

/// Builds the vendor's verbs-level bench program into `target/vendor-bench/`:
/// the functions of [`VERBS_FNS`] copied out of the fetched tree into
/// `vendor_verbs.inc` there, which `tests/vendor-diff/shim/bench_verbs.c`
/// includes, compiled as [`build_vendor_bench`] does; then its self-check
/// (every case past a ring wrap: each WR posted and rung, each CQE returned
/// as its ib_wc, the empty CQ empty).
fn vendor_verbs_bench_binary() -> Result<PathBuf, String> {
    build_vendor_bench("bench_verbs.c", "vendor_verbs_bench", "vendor verbs bench", |irdma, out| {
        let mut inc =
            String::from("/* copied by xtask (bench.rs VERBS_FNS) from the vendor tree */\n");
        for (file, start) in VERBS_FNS {
            let path = irdma.join(file);
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            inc += &c_function(&text, start).map_err(|e| format!("{}: {e}", path.display()))?;
            inc += "\n";
        }
        let inc_path = out.join("vendor_verbs.inc");
        std::fs::write(&inc_path, inc).map_err(|e| format!("{}: {e}", inc_path.display()))
    })
}

/// `ratio_<name>` = our figure ÷ its vendor twin's ([`vendor_name`]) for
/// every vendor case both sides measured (issue #33: guarded like an
/// instruction count, so a ratio 10 % above its baseline fails).
fn ratio_figures(ours: &[(String, f64)], vendor: &[(String, f64)]) -> Vec<(String, f64)> {
    let get = |v: &[(String, f64)], k: &str| v.iter().find(|(n, _)| n == k).map(|(_, x)| *x);
    VENDOR_CASES
        .iter()
        .chain(VENDOR_VERBS_CASES)
        .filter_map(|(name, ..)| {
            let o = get(ours, name)?;
            let v = get(vendor, &vendor_name(name)).filter(|v| *v > 0.0)?;
            // two decimals, as printed and as the baseline holds them
            Some((format!("ratio_{name}"), (o / v * 100.0).round() / 100.0))
        })
        .collect()
}

fn bench_binary() -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--release", "-p", "irdma", "--bench", "uk", "--message-format=json"])
        .current_dir(root())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("bench build failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if v["reason"] == "compiler-artifact"
            && v["target"]["name"] == "uk"
            && let Some(exe) = v["executable"].as_str()
        {
            return Ok(PathBuf::from(exe));
        }
    }
    Err("bench binary not found in cargo's output".into())
}

/// Total instructions (Ir) of one run under callgrind. The `verbs_*` cases
/// run a device model in the same process, so only the instructions inside
/// the bench's `counted_poll` (the driver's `Cq::poll` call) are counted;
/// the `counted_*` cases likewise count only their `counted_poll_uk*` call.
/// The `verbs_post*` / `verbs_shared_post*` cases count only inside
/// `counted_post` / `counted_shared_post` (the driver's post call), and not
/// inside the model's BAR write (`ModelBar::write32`, which executes the
/// doorbell's WQEs and writes their CQEs): callgrind flips collection on
/// entry to and exit from each toggled function, so the nested toggle turns
/// it off there. (A BAR write outside the post, by probe or modify, flips
/// collection on for that model call: the same in the N and the 2N run, so
/// it cancels in the difference.)
fn instructions(exe: &PathBuf, case: &str, n: u64) -> Result<u64, String> {
    let file = std::env::temp_dir().join(format!("irdma-cg-{case}-{n}-{}.out", std::process::id()));
    let mut cmd = Command::new("valgrind");
    cmd.arg("--tool=callgrind");
    if case == "verbs_irq_path" || case == "verbs_irq_handler" {
        let only = if case == "verbs_irq_path" { "*counted_irq_*" } else { "*counted_irq_handle*" };
        // The bench defers the driver's BAR writes in these calls and
        // hands them to the model outside (its `IrqBar`).
        cmd.arg(format!("--toggle-collect={only}"));
    } else if case.starts_with("verbs_post") || case.starts_with("verbs_shared_post") {
        cmd.arg("--toggle-collect=*counted_*post*");
        cmd.arg("--toggle-collect=*ModelBar as*Bar>::write32");
    } else if case.starts_with("verbs_") || case.starts_with("counted_") {
        cmd.arg("--toggle-collect=*counted_poll*");
    }
    let out = cmd
        .arg(format!("--callgrind-out-file={}", file.display()))
        .arg(exe)
        .args([case, &n.to_string()])
        .output()
        .map_err(|e| format!("cannot run valgrind: {e}"))?;
    if !out.status.success() {
        return Err(format!("{case} {n} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let _ = std::fs::remove_file(&file);
    text.lines()
        .find_map(|l| l.strip_prefix("summary:").or_else(|| l.strip_prefix("totals:")))
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no summary line in callgrind output for {case}"))
}

fn per_op(exe: &PathBuf, case: &str, n: u64) -> Result<f64, String> {
    let a = instructions(exe, case, n)?;
    let b = instructions(exe, case, 2 * n)?;
    Ok(b.saturating_sub(a) as f64 / n as f64)
}

/// Every callgrind case, `divisor` dividing the iteration counts.
fn instruction_figures(divisor: u64) -> Result<Vec<(String, f64)>, String> {
    ensure_program(&VALGRIND)?;
    case_figures(&bench_binary()?, CASES, divisor, str::to_string)
}

/// Wall-clock WRs/s of one shared SQ with 1 and 2 posting threads and their
/// ratio, beside the machine's ceiling (2 threads on separate SQs) and its
/// cache-line transfer time (`uk mp_threads`, run natively; not guarded: a
/// timing on a shared machine).
fn mp_thread_figures() -> Result<Vec<(String, f64)>, String> {
    native_figures(&["mp_threads"])
}

/// Wall-clock latency in the in-process model from the model's CQE (and
/// CEQE) write to the interrupt handler and to the woken task, median and
/// 99th percentile over 2000 rounds (`uk irq_latency`, run natively; not
/// guarded).
fn irq_latency_figures() -> Result<Vec<(String, f64)>, String> {
    native_figures(&["irq_latency", "2000"])
}

/// `name=value` lines of one native run of the bench binary.
fn native_figures(args: &[&str]) -> Result<Vec<(String, f64)>, String> {
    let exe = bench_binary()?;
    let out = Command::new(&exe)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!("{args:?} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let mut v = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((k, x)) = line.split_once('=') {
            let x: f64 = x.trim().parse().map_err(|e| format!("{args:?} {line}: {e}"))?;
            v.push((k.trim().to_string(), x));
        }
    }
    if v.is_empty() {
        return Err(format!("{args:?} printed no figures"));
    }
    Ok(v)
}

const VALGRIND: SysPackage = SysPackage {
    program: "valgrind",
    what: "valgrind (callgrind instruction counts for bench and bench-guard)",
    apt: "valgrind",
    dnf: "valgrind",
    pacman: "valgrind",
    brew: "valgrind",
};

/// Short name of a target in figure names.
fn arch(target: &str) -> &str {
    target.split('-').next().unwrap_or(target)
}

/// `.text` figures of the firmware example on both bare-metal targets.
fn text_figures(profile: size::Profile) -> Result<Vec<(String, f64)>, String> {
    let tag = if profile == size::Profile::LtoS { "_lto_s" } else { "" };
    let mut v = Vec::new();
    for t in crate::BARE_TARGETS {
        let TextSize { driver, total } = size::measure(t, profile)?;
        v.push((format!("text_irdma_{}{tag}", arch(t)), driver as f64));
        v.push((format!("text_total_{}{tag}", arch(t)), total as f64));
    }
    Ok(v)
}

/// DMA footprint figures, from the bring-up test that checks them.
fn footprint_figures() -> Result<Vec<(String, f64)>, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["test", "-p", "irdma", "--test", "bringup", "--quiet"])
        .args(["footprint_per_profile_matches_live_pages", "--", "--exact", "--nocapture"])
        .current_dir(root())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "footprint test failed:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut v = Vec::new();
    for line in text.lines().filter_map(|l| l.strip_prefix("footprint ")) {
        let kv: Vec<(&str, &str)> =
            line.split_whitespace().filter_map(|w| w.split_once('=')).collect();
        let get = |k: &str| kv.iter().find(|(n, _)| *n == k).map(|(_, x)| *x);
        let qps = get("qps").ok_or("footprint line without qps")?;
        for (k, x) in &kv {
            if *k != "qps" {
                let x: f64 = x.parse().map_err(|e| format!("footprint {k}={x}: {e}"))?;
                v.push((format!("footprint_{qps}qp_{k}"), x));
            }
        }
    }
    if v.is_empty() {
        return Err(format!("no footprint lines in the test's output:\n{text}"));
    }
    Ok(v)
}

fn print_figures(r: Result<Vec<(String, f64)>, String>, what: &str) -> bool {
    match r {
        Ok(v) => {
            for (name, x) in v {
                if x.fract() == 0.0 {
                    println!("{name}={x}");
                } else if name.starts_with("ratio_") {
                    println!("{name}={x:.2}");
                } else {
                    println!("{name}={x:.1}");
                }
            }
            true
        }
        Err(e) => {
            eprintln!("bench {what}: {e}");
            false
        }
    }
}

/// `cargo xtask size`.
pub fn size_main() -> ExitCode {
    let ok = print_figures(text_figures(size::Profile::Release), "text")
        & print_figures(text_figures(size::Profile::LtoS), "text (LTO, s)");
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// The committed figures the guard compares against.
pub const BASELINE: &str = "benches/baseline.txt";

/// Allowed growth over the baseline: instructions 10 %, `.text` 5 %.
fn tolerance(name: &str) -> f64 {
    if name.starts_with("text_") { 0.05 } else { 0.10 }
}

/// Parse `name=value` lines (`#` comments, blank lines ignored).
pub fn parse_baseline(text: &str) -> Result<Vec<(String, f64)>, String> {
    let mut v = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (k, x) = line.split_once('=').ok_or(format!("{BASELINE}:{}: not name=value", i + 1))?;
        let x = x.trim().parse().map_err(|e| format!("{BASELINE}:{}: {e}", i + 1))?;
        v.push((k.trim().to_string(), x));
    }
    Ok(v)
}

/// Compare measured figures with the baseline: the failures, one line each.
pub fn over_baseline(baseline: &[(String, f64)], measured: &[(String, f64)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (name, limit) in baseline {
        match measured.iter().find(|(n, _)| n == name) {
            None => bad.push(format!("{name}: not measured")),
            Some((_, x)) => {
                let max = limit * (1.0 + tolerance(name));
                if *x > max {
                    bad.push(format!(
                        "{name}={x:.1} > {limit} + {:.0}% ({max:.1})",
                        tolerance(name) * 100.0
                    ));
                }
            }
        }
    }
    bad
}

/// The `bench-guard` leg.
pub fn guard() -> Result<String, String> {
    let path = root().join(BASELINE);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let baseline = parse_baseline(&text)?;
    let mut measured = instruction_figures(4)?;
    let vendor = vendor_figures(4)?;
    measured.extend(ratio_figures(&measured, &vendor));
    measured.extend(vendor);
    measured.extend(text_figures(size::Profile::Release)?);
    let bad = over_baseline(&baseline, &measured);
    let report: Vec<String> =
        measured
            .iter()
            .map(|(n, x)| {
                if n.starts_with("ratio_") { format!("{n}={x:.2}") } else { format!("{n}={x:.1}") }
            })
            .collect();
    if bad.is_empty() {
        Ok(format!("{} figures within the baseline ({})", baseline.len(), report.join(" ")))
    } else {
        Err(format!("over the baseline: {}; measured: {}", bad.join("; "), report.join(" ")))
    }
}

/// `cargo xtask bench [--vs-vendor]`.
pub fn main(args: &[String]) -> ExitCode {
    let only_vs_vendor = match args {
        [] => false,
        [a] if a == "--vs-vendor" => true,
        _ => {
            eprintln!("usage: cargo xtask bench [--vs-vendor]");
            return ExitCode::FAILURE;
        }
    };
    let ours = instruction_figures(1);
    let vendor = vendor_figures(1);
    let (goals, ratios) = match (&ours, &vendor) {
        (Ok(o), Ok(v)) => (goal_lines(o, v), ratio_figures(o, v)),
        (Ok(o), Err(_)) => (goal_lines(o, &[]), Vec::new()),
        _ => (Vec::new(), Vec::new()),
    };
    let ok = print_figures(ours, "instructions")
        & print_figures(vendor, "vendor")
        & print_figures(Ok(ratios), "ratios");
    println!("# {VENDOR_VERBS}");
    for g in goals {
        println!("{g}");
    }
    if only_vs_vendor {
        return if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    }
    let ok = ok
        & print_figures(mp_thread_figures(), "mp threads")
        & print_figures(irq_latency_figures(), "irq latency")
        & print_figures(text_figures(size::Profile::Release), "text")
        & print_figures(text_figures(size::Profile::LtoS), "text (LTO, s)")
        & print_figures(footprint_figures(), "footprint");
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

#[cfg(test)]
mod tests {
    use super::{
        BASELINE, CASES, GOALS, VENDOR_CASES, VENDOR_VERBS_CASES, c_function, goal_lines,
        over_baseline, parse_baseline, ratio_figures,
    };

    /// Named figures as the bench functions take and return them.
    fn figs(v: &[(&str, f64)]) -> Vec<(String, f64)> {
        v.iter().map(|&(n, x)| (n.to_string(), x)).collect()
    }

    /// Every figure issue #33 sets a goal for is measured and guarded, and
    /// every vendor case has a driver twin of the same name.
    #[test]
    fn goals_are_measured_and_guarded() {
        let path = crate::util::root().join(BASELINE);
        let baseline = parse_baseline(&std::fs::read_to_string(path).unwrap()).unwrap();
        for (_, name, _) in GOALS {
            assert!(CASES.iter().any(|c| c.0 == *name), "{name}: no bench case");
            assert!(baseline.iter().any(|(n, _)| n == name), "{name}: not in {BASELINE}");
        }
        for (name, ..) in VENDOR_CASES.iter().chain(VENDOR_VERBS_CASES) {
            assert!(CASES.iter().any(|c| c.0 == *name), "vendor {name}: no driver twin");
            assert!(GOALS.iter().any(|g| g.1 == *name), "vendor {name}: no goal");
            let r = format!("ratio_{name}");
            assert!(baseline.iter().any(|(n, _)| *n == r), "{r}: not in {BASELINE}");
        }
        // every verbs figure is guarded too
        for (name, ..) in CASES.iter().filter(|c| c.0.starts_with("verbs_p")) {
            assert!(baseline.iter().any(|(n, _)| n == name), "{name}: not in {BASELINE}");
        }
    }

    /// The copy of one vendor function: its first line through the first
    /// lone closing brace, refused unless exactly one definition matches.
    #[test]
    fn copies_one_c_function() {
        let text = "static int f(int a);\nstatic int f(int a)\n{\n\tif (a) {\n\t\treturn 1;\n\t}\n\treturn 0;\n}\n\nstatic int g(void)\n{\n}\n";
        assert_eq!(
            c_function(text, "static int f(int a)\n").unwrap_or_default(),
            "",
            "a prefix never holds a newline"
        );
        let f = c_function(text, "static int f(int a)").map_err(|e| e.contains("exactly one"));
        assert_eq!(f, Err(true), "the declaration and the definition both match");
        let text = text.replacen("static int f(int a);\n", "", 1);
        assert_eq!(
            c_function(&text, "static int f(").unwrap(),
            "static int f(int a)\n{\n\tif (a) {\n\t\treturn 1;\n\t}\n\treturn 0;\n}\n"
        );
        assert!(c_function(&text, "static int h(").is_err());
        assert!(c_function("static int h(void)\n{\n", "static int h(").is_err());
    }

    /// Ours ÷ the vendor's, for the cases both sides measured; a ratio
    /// above its baseline by more than 10 % fails the guard.
    #[test]
    fn ratios() {
        let ours = figs(&[
            ("post_write_1sge_doorbell_each", 112.0),
            ("poll_one_cqe", 80.0),
            ("poll_empty_cq", 19.0),
        ]);
        let vendor = figs(&[
            ("vendor_uk_post_write_1sge_doorbell_each", 285.2),
            ("vendor_uk_poll_one_cqe", 133.0),
            ("vendor_uk_post_write_1sge_doorbell_per32", 248.5),
            ("vendor_uk_poll_empty_cq", 0.0),
        ]);
        let r = ratio_figures(&ours, &vendor);
        assert_eq!(
            r,
            figs(&[("ratio_post_write_1sge_doorbell_each", 0.39), ("ratio_poll_one_cqe", 0.6),]),
            "only where both sides measured (and the vendor's is not 0)"
        );
        let b = parse_baseline("ratio_poll_one_cqe=0.6\n").unwrap();
        assert!(over_baseline(&b, &r).is_empty());
        let worse = figs(&[("ratio_poll_one_cqe", 0.67)]);
        assert_eq!(over_baseline(&b, &worse).len(), 1, "a ratio 10 % over fails");
    }

    #[test]
    fn goal_marks() {
        let ours = figs(&[
            ("post_write_1sge_doorbell_each", 117.0),
            ("poll_empty_cq", 13.0),
            ("verbs_poll_one_cqe", 104.5),
        ]);
        let vendor = figs(&[("vendor_uk_post_write_1sge_doorbell_each", 234.0)]);
        let g = goal_lines(&ours, &vendor);
        assert_eq!(g.len(), GOALS.len());
        let line = |k: &str| g.iter().find(|l| l.starts_with(&format!("goal_{k}="))).unwrap();
        let post = line("post_write_1sge_doorbell_each");
        assert!(post.starts_with("goal_post_write_1sge_doorbell_each=89  #"), "{post}");
        assert!(post.contains("vendor 234.0, ratio 0.50") && post.ends_with("NOT MET"), "{post}");
        let empty = line("poll_empty_cq");
        assert!(empty.contains("vendor not measured") && empty.ends_with(": met"), "{empty}");
        let vpoll = line("verbs_poll_one_cqe");
        assert!(vpoll.contains("vendor not measured") && vpoll.ends_with("NOT MET"), "{vpoll}");
        let g = goal_lines(&ours, &[("vendor_verbs_poll_one_cqe".to_string(), 209.0)]);
        let vpoll = g.iter().find(|l| l.starts_with("goal_verbs_poll_one_cqe=")).unwrap();
        assert!(vpoll.contains("vendor 209.0, ratio 0.50"), "{vpoll}");
        assert!(line("poll_one_cqe").ends_with("not measured"));
        // each line is a `name=value` line with a comment the baseline parser reads
        assert_eq!(
            parse_baseline(post).unwrap(),
            figs(&[("goal_post_write_1sge_doorbell_each", 89.0)])
        );
    }

    #[test]
    fn guard_limits() {
        let b = parse_baseline("# c\npost=100\n\ntext_irdma_x86_64=1000 # bytes\n").unwrap();
        let m =
            |p: f64, t: f64| vec![("post".to_string(), p), ("text_irdma_x86_64".to_string(), t)];
        assert!(over_baseline(&b, &m(110.0, 1050.0)).is_empty());
        assert_eq!(over_baseline(&b, &m(110.5, 1000.0)).len(), 1);
        assert_eq!(over_baseline(&b, &m(100.0, 1051.0)).len(), 1);
        assert_eq!(over_baseline(&b, &[]).len(), 2, "a figure the guard cannot measure fails");
        assert!(parse_baseline("x").is_err());
    }
}
