//! Wall-clock timings (criterion) of the data-path workloads that
//! `benches/uk.rs` counts under callgrind: the same per-iteration bodies
//! (`common::*_op`), on rings in host memory, no device model, a BAR whose
//! doorbell is one store.
//!
//! `cargo bench --bench uk_criterion` (about 40 s: 1 s warm-up and 3 s of
//! measurement per case). Timings on a shared VM are noisy; the callgrind
//! instruction counts (`cargo xtask bench`) are the tracked figures. Nothing
//! here asserts on time.

mod common;

use std::time::{Duration, Instant};

use common::{
    Completer, Device, Mem, NopBar, Retire, SGE, WC0, mp_post_write_op, mp_trk, poll_cqe_base_op,
    poll_cqe_op, poll_empty_op, poll_one_op, post_complete_write_op, post_with_cqe_op,
    post_write_op, run_producers, run_separate_producers, split_poll_cqe_op, split_post_write_op,
    write_post, write_wr,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// WRs per chain in the `…_per32` cases (one doorbell per chain).
const CHAIN: usize = 32;

/// CQEs written ahead of a timed run of polls (well below the SQ's free
/// quanta and the CQ's slots, so nothing wraps onto unpolled entries).
const POLL_BATCH: u64 = 1024;

fn post(c: &mut Criterion) {
    let bar = NopBar::new();
    let wr = write_wr(&SGE);
    let batch = [wr; CHAIN];
    let mut g = c.benchmark_group("post");
    {
        let mut mem = Mem::new();
        let (mut qp, _cq) = mem.qp_cq();
        g.throughput(Throughput::Elements(1));
        g.bench_function("write_1sge_doorbell_each", |b| {
            b.iter(|| post_write_op(&mut qp, &bar, &batch[..1]))
        });
        g.throughput(Throughput::Elements(CHAIN as u64));
        g.bench_function("write_1sge_doorbell_per32", |b| {
            b.iter(|| post_write_op(&mut qp, &bar, &batch[..]))
        });
    }
    {
        let mut mem = Mem::new();
        let (mut prod, mut cons, link, _cq) = mem.split();
        g.throughput(Throughput::Elements(1));
        g.bench_function("split_write_1sge_doorbell_each", |b| {
            b.iter(|| split_post_write_op(&mut prod, &mut cons, &link, &bar, &batch[..1]))
        });
        g.throughput(Throughput::Elements(CHAIN as u64));
        g.bench_function("split_write_1sge_doorbell_per32", |b| {
            b.iter(|| split_post_write_op(&mut prod, &mut cons, &link, &bar, &batch[..]))
        });
    }
    {
        let mut mem = Mem::new();
        let (mut prod, mut cons, link, mut cq) = mem.split();
        let mut dev = Device::new();
        let one = write_post(&wr);
        let mut wc = [WC0; 1];
        g.throughput(Throughput::Elements(1));
        g.bench_function("split_post_cqe_poll", |b| {
            b.iter(|| {
                split_poll_cqe_op(&mut prod, &mut cons, &link, &mut cq, &mut dev, &one, &mut wc)
            })
        });
    }
    {
        // Like-for-like with the `mp_` cases: retired by `Sq::complete_at`.
        let mut mem = Mem::new();
        let (mut qp, _cq) = mem.qp_cq();
        let mut retire = Retire::new();
        g.throughput(Throughput::Elements(1));
        g.bench_function("complete_write_1sge_doorbell_each", |b| {
            b.iter(|| post_complete_write_op(&mut qp, &mut retire, &bar, &batch[..1]))
        });
        g.throughput(Throughput::Elements(CHAIN as u64));
        g.bench_function("complete_write_1sge_doorbell_per32", |b| {
            b.iter(|| post_complete_write_op(&mut qp, &mut retire, &bar, &batch[..]))
        });
    }
    {
        let trk = mp_trk();
        let mut mem = Mem::new();
        let mp = mem.mp(&trk);
        let mut retire = Retire::new();
        g.throughput(Throughput::Elements(1));
        g.bench_function("mp_write_1sge_doorbell_each", |b| {
            b.iter(|| mp_post_write_op(&mp, &mut retire, &bar, &batch[..1]))
        });
        g.throughput(Throughput::Elements(CHAIN as u64));
        g.bench_function("mp_write_1sge_doorbell_per32", |b| {
            b.iter(|| mp_post_write_op(&mp, &mut retire, &bar, &batch[..]))
        });
    }
    g.finish();
    std::hint::black_box(bar.last());
}

/// Throughput of one shared SQ with 1 and 2 posting threads: the same
/// total number of WRs (chains of 1 or 32, one doorbell each) split between
/// the threads, each pinned to its own CPU, retiring as
/// `common::producer` does. Figures are per WR; the 2-thread gain is
/// `time(1) / time(2)` (`cargo xtask bench` prints it as medians of
/// interleaved runs, with the machine's cache-line transfer time).
fn mp_threads(c: &mut Criterion) {
    let wr = write_wr(&SGE);
    let batch = [wr; CHAIN];
    let mut g = c.benchmark_group("mp_threads");
    for chain in [1usize, CHAIN] {
        for threads in [1u64, 2] {
            let trk = mp_trk();
            let mut mem = Mem::new();
            let mp = mem.mp(&trk);
            let completer = Completer::default();
            let wrs = &batch[..chain];
            g.throughput(Throughput::Elements(chain as u64));
            let name = format!("write_1sge_chain{chain}_{threads}_thread");
            g.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    let per = iters.div_ceil(threads);
                    let t = Instant::now();
                    run_producers(threads, &mp, &completer, wrs, per);
                    t.elapsed().mul_f64(iters as f64 / (per * threads) as f64)
                })
            });
        }
        // The machine's ceiling: two threads, each on an SQ of its own.
        let wrs = &batch[..chain];
        g.throughput(Throughput::Elements(chain as u64));
        g.bench_function(format!("write_1sge_chain{chain}_2_separate_sqs"), |b| {
            b.iter_custom(|iters| {
                let per = iters.div_ceil(2);
                run_separate_producers(2, wrs, per).mul_f64(iters as f64 / (per * 2) as f64)
            })
        });
    }
    g.finish();
}

fn poll(c: &mut Criterion) {
    let wr = write_wr(&SGE);
    let one = write_post(&wr);
    let mut wc = [WC0; 1];
    let mut g = c.benchmark_group("poll");
    g.throughput(Throughput::Elements(1));
    {
        let mut mem = Mem::new();
        let (mut qp, mut cq) = mem.qp_cq();
        let mut dev = Device::new();
        // post + device CQE + poll; the poll alone is this minus `cqe_base`.
        g.bench_function("cqe", |b| {
            b.iter(|| poll_cqe_op(&mut qp, &mut cq, &mut dev, &one, &mut wc))
        });
    }
    {
        let mut mem = Mem::new();
        let (mut qp, mut cq) = mem.qp_cq();
        let mut dev = Device::new();
        g.bench_function("cqe_base", |b| {
            b.iter(|| poll_cqe_base_op(&mut qp, &mut cq, &mut dev, &one, &mut wc))
        });
    }
    {
        // The poll alone: the device has written up to `POLL_BATCH` CQEs
        // (untimed), then one `poll_cq` per CQE is timed.
        let mut mem = Mem::new();
        let (mut qp, mut cq) = mem.qp_cq();
        let mut dev = Device::new();
        g.bench_function("cqe_poll_only", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let k = left.min(POLL_BATCH);
                    for _ in 0..k {
                        post_with_cqe_op(&mut qp, &cq, &mut dev, &one);
                    }
                    let t = Instant::now();
                    for _ in 0..k {
                        poll_one_op(&mut qp, &mut cq, &mut wc);
                    }
                    total += t.elapsed();
                    left -= k;
                }
                total
            })
        });
    }
    {
        let mut mem = Mem::new();
        let (mut qp, mut cq) = mem.qp_cq();
        g.bench_function("empty", |b| b.iter(|| poll_empty_op(&mut qp, &mut cq, &mut wc)));
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .without_plots()
}

criterion_group! {
    name = benches;
    config = config();
    targets = post, mp_threads, poll
}
criterion_main!(benches);
