//! Instruction-count workloads for `cargo xtask bench` (run under callgrind).
//!
//! `uk CASE N` runs CASE's operation N times on rings in host memory with a
//! BAR that only stores the doorbell value; xtask runs N and 2N and divides
//! the difference by N, so set-up cost cancels out. The set-up and the
//! per-iteration bodies live in `common/` (shared with `uk_criterion`).

mod common;

use std::hint::black_box;

use common::{
    Device, Mem, NopBar, Retire, SGE, WC0, mp_post_write_op, mp_trk, poll_cqe_base_op, poll_cqe_op,
    poll_empty_op, post_write_op, write_post, write_wr,
};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let case = args.get(1).map(String::as_str).unwrap_or("");
    let n: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let mut mem = Mem::new();
    let bar = NopBar::new();
    let wr = write_wr(&SGE);
    let batch = [wr; 32];
    match case {
        "post_write" | "post_write_batch32" | "poll_cqe" | "poll_cqe_base" | "poll_empty" => {
            let (mut qp, mut cq) = mem.qp_cq();
            let mut wc = [WC0; 1];
            let mut dev = Device::new();
            let one = write_post(&wr);
            match case {
                "post_write" => {
                    for _ in 0..n {
                        post_write_op(&mut qp, &bar, &batch[..1]);
                    }
                }
                "post_write_batch32" => {
                    for _ in 0..n / 32 {
                        post_write_op(&mut qp, &bar, &batch[..]);
                    }
                }
                "poll_cqe" => {
                    for _ in 0..n {
                        poll_cqe_op(&mut qp, &mut cq, &mut dev, &one, &mut wc);
                    }
                }
                "poll_cqe_base" => {
                    for _ in 0..n {
                        poll_cqe_base_op(&mut qp, &mut cq, &mut dev, &one, &mut wc);
                    }
                }
                _ => {
                    for _ in 0..n {
                        poll_empty_op(&mut qp, &mut cq, &mut wc);
                    }
                }
            }
            black_box(&wc);
        }
        "mp_post_write" | "mp_post_write_batch32" => {
            let trk = mp_trk();
            let mp = mem.mp(&trk);
            let mut retire = Retire::new();
            if case == "mp_post_write" {
                for _ in 0..n {
                    mp_post_write_op(&mp, &mut retire, &bar, &batch[..1]);
                }
            } else {
                for _ in 0..n / 32 {
                    mp_post_write_op(&mp, &mut retire, &bar, &batch[..]);
                }
            }
        }
        // `cargo bench` runs every bench target with `--bench`: this one is a
        // set of callgrind workloads driven by `cargo xtask bench`.
        "" | "--bench" => {
            eprintln!("uk: callgrind workloads; run `cargo xtask bench` (timings: uk_criterion)");
        }
        other => {
            eprintln!("unknown case {other:?}");
            std::process::exit(2);
        }
    }
    black_box(bar.last());
}
