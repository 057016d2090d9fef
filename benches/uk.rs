//! Instruction-count workloads for `cargo xtask bench` (run under callgrind).
//!
//! `uk CASE N` runs CASE's operation N times on rings in host memory with a
//! BAR that only stores the doorbell value; xtask runs N and 2N and divides
//! the difference by N, so set-up cost cancels out. The set-up and the
//! per-iteration bodies live in `common/` (shared with `uk_criterion`).

mod common;

use std::hint::black_box;

use common::{
    Device, Mem, NopBar, QP_ID, Retire, SGE, WC0, mp_post_write_op, mp_trk, poll_cqe_base_op,
    poll_cqe_op, poll_empty_op, post_complete_write_op, post_write_op, split_poll_cqe_op,
    split_post_write_op, view, write_post, write_wr,
};
use irdma::uk::{MpSq, MpTrk, Publish, QpKind, QueueMem};
use irdma::wr::SendWr;

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
        "split_post_write" | "split_post_write_batch32" | "split_poll_cqe" => {
            split_cases(&mut mem, &bar, case, n)
        }
        "counted_poll_one" | "counted_poll_one_split" => uk_poll_alone_cases(&mut mem, case, n),
        "post_complete_write" | "post_complete_write_batch32" => {
            let (mut qp, _cq) = mem.qp_cq();
            let mut retire = Retire::new();
            if case == "post_complete_write" {
                for _ in 0..n {
                    post_complete_write_op(&mut qp, &mut retire, &bar, &batch[..1]);
                }
            } else {
                for _ in 0..n / 32 {
                    post_complete_write_op(&mut qp, &mut retire, &bar, &batch[..]);
                }
            }
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
        "mp_post_only_write" | "mp_post_only_write_batch32" => mp_post_only(&bar, case, n),
        "mp_threads" => mp_threads::run(),
        "post_write_2sge" | "post_write_3sge" | "post_write_imm" | "post_send_imm" => {
            shape_cases(&mut mem, &bar, case, n)
        }
        "rw_bvec16" => rw_bvec16(&mut mem, &bar, n),
        "verbs_poll_cqe" | "verbs_poll_empty" => verbs_poll(case == "verbs_poll_cqe", n),
        "verbs_irq_path" | "verbs_irq_handler" => verbs_irq(n),
        "irq_latency" => irq::latency(n),
        "verbs_post_write" | "verbs_post_write_batch32" => verbs_post(
            irdma_testkit::ModelBar::standalone(mock_bar::Config::default()),
            false,
            case == "verbs_post_write_batch32",
            n,
        ),
        "verbs_shared_post_write" | "verbs_shared_post_write_batch32" => verbs_post(
            SharedBar(irdma_testkit::ModelBar::standalone(mock_bar::Config::default())),
            true,
            case == "verbs_shared_post_write_batch32",
            n,
        ),
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

/// The uk poll of one CQE alone, single-owner (`counted_poll_one`) and
/// through the split QP's link (`counted_poll_one_split`): the post and the
/// "device" CQE are not counted (`cargo xtask bench` runs these cases with
/// `--toggle-collect` on [`counted_poll_uk`] / [`counted_poll_uk_split`]),
/// so neither the producer's link stores nor a subtracted base case are in
/// the figure; the call itself (call, ret, register saves) is.
#[inline(never)]
fn uk_poll_alone_cases(mem: &mut Mem, case: &str, n: u64) {
    let wr = write_wr(&SGE);
    let one = write_post(&wr);
    let mut wc = [WC0; 1];
    let mut dev = Device::new();
    if case == "counted_poll_one" {
        let (mut qp, mut cq) = mem.qp_cq();
        for _ in 0..n {
            let p = qp.sq.post(black_box(&one)).map(|p| p.wqe_idx).unwrap_or(0);
            dev.sq_cqe(&cq, p);
            assert_eq!(counted_poll_uk(&mut qp, &mut cq, &mut wc), 1);
        }
    } else {
        let (mut prod, mut cons, link, mut cq) = mem.split();
        for _ in 0..n {
            let p = match prod.sq.post(black_box(&one)) {
                Err(irdma::uk::SqError::Full) if link.refresh(&mut prod.sq) => prod.sq.post(&one),
                r => r,
            };
            link.publish(&prod.sq);
            dev.sq_cqe(&cq, p.map(|p| p.wqe_idx).unwrap_or(0));
            assert_eq!(counted_poll_uk_split(&mut cons, &link, &mut cq, &mut wc), 1);
        }
    }
    black_box(&wc);
}

/// One single-owner uk `poll_cq` (counted).
#[inline(never)]
fn counted_poll_uk(
    qp: &mut irdma::uk::QpUk<'_>,
    cq: &mut irdma::uk::CqRing<'_>,
    wc: &mut [irdma::wr::WorkCompletion; 1],
) -> usize {
    irdma::uk::poll_cq(cq, qp, black_box(&mut wc[..]))
}

/// One uk `poll_cq` through the split link, with the tail publication that
/// ends a poll (counted).
#[inline(never)]
fn counted_poll_uk_split(
    cons: &mut irdma::uk::QpUk<'_>,
    link: &irdma::uk::link::QpLink,
    cq: &mut irdma::uk::CqRing<'_>,
    wc: &mut [irdma::wr::WorkCompletion; 1],
) -> usize {
    let got = irdma::uk::poll_cq(
        cq,
        &mut irdma::uk::link::Linked { link, qp: cons },
        black_box(&mut wc[..]),
    );
    link.consumer_end(cons);
    got
}

/// The split-QP cases, out of line so `main`'s code for the single-owner
/// cases stays as it was (everything inlined into `main` is scheduled
/// together, and the harness layout moves the figures: BENCHMARKS.md).
#[inline(never)]
fn split_cases(mem: &mut Mem, bar: &NopBar, case: &str, n: u64) {
    let wr = write_wr(&SGE);
    let batch = [wr; 32];
    let (mut prod, mut cons, link, mut cq) = mem.split();
    let mut wc = [WC0; 1];
    let mut dev = Device::new();
    let one = write_post(&wr);
    match case {
        "split_post_write" => {
            for _ in 0..n {
                split_post_write_op(&mut prod, &mut cons, &link, bar, &batch[..1]);
            }
        }
        "split_post_write_batch32" => {
            for _ in 0..n / 32 {
                split_post_write_op(&mut prod, &mut cons, &link, bar, &batch[..]);
            }
        }
        _ => {
            for _ in 0..n {
                split_poll_cqe_op(&mut prod, &mut cons, &link, &mut cq, &mut dev, &one, &mut wc);
            }
        }
    }
    black_box(&wc);
}

/// Quanta of [`BigMp`]'s ring: room for every WR of a `cargo xtask bench`
/// run (2 × 4096) without retiring any.
const BIG_QUANTA: u32 = 16384;

/// Host memory for a multi-producer SQ large enough that the post-only
/// cases never retire (so their figure is the post alone, like the
/// single-owner post's, whose retirement is `consume_all`).
struct BigMp {
    sqm: Vec<u64>,
    trk: Vec<MpTrk>,
}

impl BigMp {
    /// A zeroed ring of [`BIG_QUANTA`] quanta.
    fn new() -> Self {
        BigMp {
            sqm: vec![0u64; BIG_QUANTA as usize * 4],
            trk: (0..BIG_QUANTA).map(|_| MpTrk::new()).collect(),
        }
    }

    /// The multi-producer SQ over it.
    fn mp(&mut self) -> MpSq<QueueMem<'_>, &[MpTrk]> {
        MpSq::new(view(&mut self.sqm), &self.trk[..], BIG_QUANTA, 13, 101, QP_ID).expect("mp")
    }
}

/// Multi-producer `post_send` of `wrs` (one doorbell), not retired.
#[inline(always)]
fn mp_post_only_op(mp: &MpSq<QueueMem<'_>, &[MpTrk]>, bar: &NopBar, wrs: &[SendWr<'_>]) {
    let _ = black_box(mp.post_send(bar, QpKind::Rc, black_box(wrs)));
}

/// The multi-producer post alone: a ring large enough for every WR of the
/// run, so nothing is retired (out of line, like `split_cases`).
#[inline(never)]
fn mp_post_only(bar: &NopBar, case: &str, n: u64) {
    let wr = write_wr(&SGE);
    let batch = [wr; 32];
    let mut big = BigMp::new();
    let mp = big.mp();
    assert!(n <= u64::from(mp.size()) / 2, "the ring must hold 2N WRs");
    if case == "mp_post_only_write" {
        for _ in 0..n {
            mp_post_only_op(&mp, bar, &batch[..1]);
        }
    } else {
        for _ in 0..n / 32 {
            mp_post_only_op(&mp, bar, &batch[..]);
        }
    }
    black_box(mp.used());
}

/// Other WR shapes on the single-owner QP, one doorbell each (issue #16:
/// 2-3 SGEs, WRITE / SEND with immediate), out of line like `split_cases`.
/// Each iteration posts one signaled WR and retires it ([`post_write_op`]).
#[inline(never)]
fn shape_cases(mem: &mut Mem, bar: &NopBar, case: &str, n: u64) {
    use irdma::wr::{SendFlags, SendWr, Sge, WrOpcode};
    let sges = [
        SGE[0],
        Sge { addr: 0x7f00_3000, length: 512, lkey: 0x1234 },
        Sge { addr: 0x7f00_5000, length: 64, lkey: 0x1234 },
    ];
    let write = WrOpcode::RdmaWrite { remote_addr: 0x9000_0000, rkey: 0x55 };
    let (opcode, sg_list) = match case {
        "post_write_2sge" => (write, &sges[..2]),
        "post_write_3sge" => (write, &sges[..3]),
        "post_write_imm" => (
            WrOpcode::RdmaWriteImm { remote_addr: 0x9000_0000, rkey: 0x55, imm: 0x1234_5678 },
            &sges[..1],
        ),
        _ => (WrOpcode::SendImm { imm: 0x1234_5678 }, &sges[..1]),
    };
    let wr = SendWr { wr_id: 1, opcode, flags: SendFlags::SIGNALED, sg_list };
    let (mut qp, _cq) = mem.qp_cq();
    for _ in 0..n {
        post_write_op(&mut qp, bar, std::slice::from_ref(&wr));
    }
}

/// The rw layer on 16 bvecs of 4 KiB, RDMA WRITE, RoCE, no IOMMU (MAP_WRS:
/// 2 WRs of 13 + 3 SGEs): `init_bvec` (map every bvec through `IdentityHal`),
/// `post` (builds the chain with `wrs` and posts it on the single-owner QP),
/// retire, `destroy_bvec`. One iteration = one 16-bvec transfer.
fn rw_bvec16(mem: &mut Mem, bar: &NopBar, n: u64) {
    use irdma::rw::{
        BioVec, BvecIter, DeviceAttrs, Direction, MrPool, NoIova, PostSend, RwCtx, RwQp,
    };
    use irdma_testkit::IdentityHal;

    struct Poster<'q, 'a> {
        qp: &'q mut irdma::uk::qp::QpUk<'a>,
        bar: &'q NopBar,
    }
    impl PostSend for Poster<'_, '_> {
        type Error = irdma::uk::qp::PostSendError;
        fn post_send(&mut self, wrs: &[irdma::wr::SendWr<'_>]) -> Result<(), (usize, Self::Error)> {
            self.qp.post_send(self.bar, wrs).map_err(|e| (e.bad_wr, e))
        }
    }

    let (mut qp, _cq) = mem.qp_cq();
    let rwqp = RwQp::new(DeviceAttrs::e810_roce(13, 4063, 0xabcd00), false, 13);
    let mut pool: MrPool<1, 1> = MrPool::new();
    let mut bufs = vec![0u8; 16 * 4096];
    let bv: Vec<BioVec> =
        bufs.chunks_mut(4096).map(|c| BioVec { buf: std::ptr::NonNull::from(c) }).collect();
    let iter = BvecIter { bi_size: 16 * 4096, bi_idx: 0, bi_bvec_done: 0 };
    let mut ctx: RwCtx<16, 4> = RwCtx::new();
    for _ in 0..n {
        // SAFETY: `bufs` outlives the transfer and is not moved; IdentityHal
        // and the bench QP never read it (no device), and `destroy_bvec`
        // runs before the next `init_bvec`.
        let r = unsafe {
            ctx.init_bvec::<IdentityHal, NoIova, 1, 1>(
                &rwqp,
                &mut pool,
                &mut NoIova,
                black_box(&bv),
                16,
                iter,
                0x7f00_0000_1000,
                0x1234,
                Direction::ToDevice,
            )
        };
        assert_eq!(r, Ok(2));
        let mut p = Poster { qp: &mut qp, bar };
        assert!(ctx.post(&mut p, &mut pool, 7, &[]).is_ok());
        qp.sq.consume_all();
        // SAFETY: the transfer is over (retired above; nothing reads it).
        let d = unsafe { ctx.destroy_bvec::<IdentityHal, NoIova, 1, 1>(&mut pool, &mut NoIova) };
        assert!(d.is_ok());
    }
    black_box(&bufs);
}

/// `uk mp_threads`: wall-clock throughput (WRs per second) of one shared SQ
/// with 1 and 2 posting threads, run natively by `cargo xtask bench` (not
/// under callgrind). Each thread is pinned to its own CPU, has its own
/// doorbell word (an MMIO write moves no cache line between cores), posts
/// chains of 1 or 32 one-SGE WRITEs (one doorbell per chain) and, every 256
/// WRs, if more than half the ring is outstanding (or whenever it is full)
/// and it gets the completer's try-lock, retires what is published (one
/// completer at a time, as `MpSq::complete_at` requires; nobody waits for
/// it). The same total of WRs is split between the threads; 9 runs of each
/// thread count, interleaved; the medians are reported and the ratio is
/// median(2 threads) / median(1 thread). Also reported: the one-way
/// cache-line transfer time between the two CPUs (median of a ping-pong
/// before each pair), which bounds what two cores sharing one ring can
/// gain (on a VM it changes with where the host runs the vCPUs). A timing,
/// not a check: other load on the machine moves it.
mod mp_threads {
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    use super::common::{
        Completer, FULL_WAITS, Mem, SGE, mp_trk, pin, run_producers, run_separate_producers,
        write_wr,
    };

    /// WRs per run (all threads together).
    const TOTAL: u64 = 1 << 22;

    /// WRs per second of one run: `threads` producers on one shared SQ, or
    /// (`separate`) each on an SQ of its own, the machine's ceiling.
    fn rate(threads: u64, chain: usize, separate: bool) -> f64 {
        let wr = write_wr(&SGE);
        let batch = [wr; 32];
        let wrs = &batch[..chain];
        let calls = TOTAL / chain as u64 / threads;
        let secs = if separate {
            run_separate_producers(threads, wrs, calls)
        } else {
            let trk = mp_trk();
            let mut mem = Mem::new();
            let mp = mem.mp(&trk);
            let c = Completer::default();
            let t = Instant::now();
            run_producers(threads, &mp, &c, wrs, calls);
            t.elapsed()
        }
        .as_secs_f64();
        (calls * threads * chain as u64) as f64 / secs
    }

    pub fn run() {
        for chain in [1usize, 32] {
            // Interleaved, so slow phases of the machine hit every count
            // alike; medians, so one lucky or unlucky run does not set the
            // ratio.
            let (mut one, mut two, mut sep, mut line, mut waits) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for _ in 0..PAIRS {
                line.push(line_transfer_ns());
                one.push(rate(1, chain, false));
                FULL_WAITS.store(0, Ordering::Relaxed);
                two.push(rate(2, chain, false));
                waits.push(FULL_WAITS.swap(0, Ordering::Relaxed) as f64);
                sep.push(rate(2, chain, true));
            }
            let (one, two, sep) = (median(&mut one), median(&mut two), median(&mut sep));
            println!("mp_threads_chain{chain}_line_transfer_ns={:.0}", median(&mut line));
            println!("mp_threads_chain{chain}_1_thread_wrs_per_s={one:.0}");
            println!("mp_threads_chain{chain}_2_threads_wrs_per_s={two:.0}");
            println!("mp_threads_chain{chain}_ratio_2_to_1={:.2}", two / one);
            println!("mp_threads_chain{chain}_2_separate_sqs_wrs_per_s={sep:.0}");
            println!("mp_threads_chain{chain}_ceiling_ratio_2_to_1={:.2}", sep / one);
            println!(
                "mp_threads_chain{chain}_2_threads_full_waits_per_run={:.0}",
                median(&mut waits)
            );
        }
    }

    /// One-way time for a cache line to move between CPU 0 and CPU 1: two
    /// pinned threads bounce a counter through one atomic word.
    fn line_transfer_ns() -> f64 {
        use std::sync::atomic::AtomicU64;
        const ROUNDS: u64 = 20_000;
        let word = AtomicU64::new(0);
        let bounce = |cpu: usize, parity: u64| {
            pin(cpu);
            for i in 0..ROUNDS {
                while word.load(Ordering::Acquire) != 2 * i + parity {
                    std::hint::spin_loop();
                }
                word.store(2 * i + parity + 1, Ordering::Release);
            }
        };
        let t = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| bounce(1, 1));
            bounce(0, 0);
        });
        t.elapsed().as_secs_f64() * 1e9 / (2 * ROUNDS) as f64
    }

    /// Runs per thread count.
    const PAIRS: usize = 9;

    fn median(v: &mut [f64]) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }
}

/// Takes a loopback RC QP (`Qp` or `SharedQp`: both have `qp_num` and
/// `modify`) from RESET to RTS, connected to itself.
macro_rules! loopback_rts {
    ($qp:expr, $mac:expr) => {{
        let me = $qp.qp_num();
        $qp.modify(&QpAttr::new(QpState::Init)).expect("init");
        let mut rtr = QpAttr::new(QpState::Rtr);
        rtr.dest_qp = me;
        rtr.av = Some(AddressVector {
            dest_mac: $mac,
            dest_ip: IpAddr::V4([10, 0, 0, 1]),
            src_ip: IpAddr::V4([10, 0, 0, 1]),
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            vlan: None,
        });
        $qp.modify(&rtr).expect("rtr");
        $qp.modify(&QpAttr::new(QpState::Rts)).expect("rts");
    }};
}

/// A 2-page buffer registered on the model device for local and remote
/// writes (the MR is dropped before its pages: fields drop in order).
struct ModelMr<'d, B: irdma::hal::Bar + Clone> {
    mr: irdma::verbs::Mr<'d, irdma_testkit::FakeHal, B>,
    mem: irdma::hal::Dma<irdma_testkit::FakeHal>,
}

impl<'d, B: irdma::hal::Bar + Clone> ModelMr<'d, B> {
    fn new(
        dev: &'d irdma::device::Device<irdma_testkit::FakeHal, B>,
        pd: &irdma::verbs::Pd<'d, irdma_testkit::FakeHal, B>,
    ) -> Self {
        use irdma::prelude::*;
        let mem = Dma::new(2, BufferDirection::Both).expect("dma");
        let pages = [mem.paddr(), mem.paddr() + 4096];
        let desc = MrDesc {
            iova: mem.paddr(),
            length: 8192,
            page_size: PageSize::Size4K,
            pages: &pages,
            zero_based: false,
            access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        };
        // SAFETY: `mem` outlives the MR (dropped after it, see the struct)
        // and backs nothing else meanwhile.
        let mr = unsafe { dev.reg_mr(pd, &desc) }.expect("mr");
        ModelMr { mr, mem }
    }

    /// 64 bytes of the first page.
    fn sge(&self) -> [irdma::wr::Sge; 1] {
        [irdma::wr::Sge { addr: self.mem.paddr(), length: 64, lkey: self.mr.lkey() }]
    }

    /// An RDMA WRITE into the second page.
    fn write(&self) -> irdma::wr::WrOpcode {
        irdma::wr::WrOpcode::RdmaWrite {
            remote_addr: self.mem.paddr() + 4096,
            rkey: self.mr.rkey(),
        }
    }
}

/// The real verbs `Cq::poll` (the table lookup, the slot's try-lock, the
/// split QP's head refresh and tail publication, the loop over old rings
/// and the AEQ check an empty ring makes) on a device model
/// (`ModelBar::standalone`, in process: a doorbell is processed before it
/// returns). One iteration: post one signaled 1-SGE RDMA WRITE on a
/// loopback RC QP (not counted), then `Cq::poll` until it returns the
/// completion (counted: `cargo xtask bench` runs this case with
/// `--toggle-collect` on [`counted_poll`]). `verbs_poll_empty`: polls of
/// the empty CQ only.
fn verbs_poll(with_cqe: bool, n: u64) {
    use irdma::prelude::*;
    use irdma_testkit::{FakeHal, ModelBar};

    let bar = ModelBar::standalone(mock_bar::Config::default());
    let mac = [2, 0, 0, 0, 0, 0x0a];
    let lan = LanInfo::single_tc(0, 6, mac, 1500);
    let dev: Device<FakeHal, ModelBar> = Device::probe(bar, lan, Profile::SMALL).expect("probe");
    let pd = dev.alloc_pd().expect("pd");
    let mut cq = dev.create_cq(64).expect("cq");
    let cap = QpCap {
        max_send_wr: 32,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        ..QpCap::default()
    };
    let mut qp =
        dev.create_qp(&pd, &mut QpInitAttr { send_cq: &cq, recv_cq: &cq, cap }).expect("qp");
    loopback_rts!(qp, mac);
    let m = ModelMr::new(&dev, &pd);
    let sge = m.sge();
    let write = m.write();
    let wr = SendWr { wr_id: 9, opcode: write, flags: SendFlags::SIGNALED, sg_list: &sge };
    let mut wc = [WorkCompletion::default(); 1];
    let mut polls = 0u64;
    for _ in 0..n {
        if with_cqe {
            qp.post_send(&[wr]).expect("post");
            let mut got = 0;
            while got == 0 {
                got = counted_poll(&mut cq, &mut wc);
                polls += 1;
            }
            assert_eq!((got, wc[0].wr_id, wc[0].status), (1, 9, WcStatus::Success));
        } else {
            assert_eq!(counted_poll(&mut cq, &mut wc), 0);
            polls += 1;
        }
    }
    // One poll per completion: the figure is one `Cq::poll` call each.
    assert_eq!(polls, n, "the model completes a WRITE within the doorbell");
}

/// One `Cq::poll` call: what `--toggle-collect` counts.
#[inline(never)]
fn counted_poll<H: irdma::hal::Hal, B: irdma::hal::Bar + Clone>(
    cq: &mut irdma::verbs::Cq<'_, H, B>,
    wc: &mut [irdma::wr::WorkCompletion],
) -> usize {
    cq.poll(black_box(wc))
}

/// The model's BAR under another type, for the shared-QP cases: their
/// driver code (`SharedQp`, `Cq::poll_shared`) is then instantiated apart
/// from the `Device<FakeHal, ModelBar>` code the other `verbs_*` cases
/// count. (With one type, instantiating the shared poller changed the code
/// generated for `Cq::poll`: `verbs_poll_one_cqe` 214 -> 219.) Its accessors
/// are inlined, so the driver calls `ModelBar`'s as with the plain type.
#[derive(Clone)]
struct SharedBar(irdma_testkit::ModelBar);

impl irdma::hal::Bar for SharedBar {
    #[inline(always)]
    fn read32(&self, offset: usize) -> u32 {
        self.0.read32(offset)
    }
    #[inline(always)]
    fn write32(&self, offset: usize, value: u32) {
        self.0.write32(offset, value)
    }
}

/// The verbs posts on a device model (`ModelBar::standalone`, in process):
/// `SharedQp::post_send` (`shared`) or the single-owner `Qp::post_send`
/// (split QP) of signaled 1-SGE RDMA WRITEs on a loopback RC QP, one WR
/// per call (`batch32` false) or chains of 32 (true). Only the post call
/// is counted (`cargo xtask bench` toggles collection on
/// [`counted_shared_post`] / [`counted_post`], and off again inside the
/// model's BAR write `ModelBar::write32`, which executes the doorbell's WQEs
/// and writes their CQEs); after each call the CQ is drained by the verbs
/// poller (`Cq::poll_shared` / `Cq::poll`, not counted), so the SQ never
/// fills.
fn verbs_post<B: irdma::hal::Bar + Clone + Send + Sync>(
    bar: B,
    shared: bool,
    batch32: bool,
    n: u64,
) {
    use irdma::prelude::*;
    use irdma_testkit::FakeHal;

    let mac = [2, 0, 0, 0, 0, 0x0a];
    let lan = LanInfo::single_tc(0, 6, mac, 1500);
    let dev: Device<FakeHal, B> = Device::probe(bar, lan, Profile::SMALL).expect("probe");
    let pd = dev.alloc_pd().expect("pd");
    let mut cq = dev.create_cq(64).expect("cq");
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        ..QpCap::default()
    };
    let m = ModelMr::new(&dev, &pd);
    let sge = m.sge();
    let write = m.write();
    let wr = SendWr { wr_id: 9, opcode: write, flags: SendFlags::SIGNALED, sg_list: &sge };
    let chain = [wr; 32];
    let (per_call, calls) = if batch32 { (32, n / 32) } else { (1, n) };
    let wrs = &chain[..per_call];
    let mut wc = [WorkCompletion::default(); 32];
    let mut attr = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap };
    let done = if shared {
        let mut qp = dev.create_shared_qp(&pd, &mut attr).expect("shared qp");
        loopback_rts!(qp, mac);
        let qp = &qp;
        drive(
            calls,
            &mut wc[..per_call],
            || counted_shared_post(qp, wrs),
            |wc| cq.poll_shared([qp], wc).expect("QPs of this CQ"),
        )
    } else {
        let mut qp = dev.create_qp(&pd, &mut attr).expect("qp");
        loopback_rts!(qp, mac);
        drive(calls, &mut wc[..per_call], || counted_post(&mut qp, wrs), |wc| cq.poll(wc))
    };
    assert_eq!(done, calls * per_call as u64, "every WR completed once");
}

/// `calls` times: one counted post of a chain of `wc.len()` WRs, then the
/// uncounted drain of its CQEs into `wc` (each a successful WRITE, wr_id
/// 9). Returns how many completions came back.
fn drive(
    calls: u64,
    wc: &mut [irdma::wr::WorkCompletion],
    mut post: impl FnMut() -> Result<(), irdma::verbs::PostError>,
    mut poll: impl FnMut(&mut [irdma::wr::WorkCompletion]) -> usize,
) -> u64 {
    let mut done = 0u64;
    for _ in 0..calls {
        post().expect("post");
        let mut got = 0;
        while got < wc.len() {
            let k = poll(&mut wc[got..]);
            assert!(k > 0, "the model completes a WRITE within the doorbell");
            got += k;
        }
        done += got as u64;
    }
    let ok =
        |c: &irdma::wr::WorkCompletion| (c.wr_id, c.status) == (9, irdma::wr::WcStatus::Success);
    assert!(wc.iter().all(ok));
    done
}

/// One `SharedQp::post_send` call: what `--toggle-collect` counts.
#[inline(never)]
fn counted_shared_post<H: irdma::hal::Hal, B: irdma::hal::Bar + Clone>(
    qp: &irdma::verbs::SharedQp<'_, H, B>,
    wrs: &[SendWr<'_>],
) -> Result<(), irdma::verbs::PostError> {
    qp.post_send(black_box(wrs))
}

/// One single-owner `Qp::post_send` call: what `--toggle-collect` counts.
#[inline(never)]
fn counted_post<H: irdma::hal::Hal, B: irdma::hal::Bar + Clone>(
    qp: &mut irdma::verbs::Qp<'_, H, B>,
    wrs: &[SendWr<'_>],
) -> Result<(), irdma::verbs::PostError> {
    qp.post_send(black_box(wrs))
}

/// The interrupt path of completions (issue #31).
mod irq {
    use std::pin::{Pin, pin};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    use std::task::{Context, Poll, Wake, Waker};
    use std::thread::Thread;
    use std::time::{Duration, Instant};

    use irdma::irq::{IrqConfig, IrqReport};
    use irdma::lan::MsixInfo;
    use irdma::prelude::*;
    use irdma_testkit::{FakeHal, ModelBar};

    use super::ModelMr;

    type Dev = Device<FakeHal, ModelBar>;

    /// The model's BAR, whose writes can be deferred: while `on`, a write
    /// is logged (a few instructions, about what an MMIO store costs the
    /// CPU) and handed to the model by [`IrqBar::flush`], outside the
    /// counted calls, so the figure holds the driver's work and not the
    /// model's. (Toggling collection off inside `ModelBar::write32`, as
    /// the post cases do, would count the model's processing of the
    /// uncounted post's doorbell instead.)
    #[derive(Clone)]
    struct IrqBar(ModelBar, Arc<Deferred>);

    #[derive(Default)]
    struct Deferred {
        on: AtomicBool,
        n: AtomicUsize,
        w: [AtomicU64; 8],
    }

    impl irdma::hal::Bar for IrqBar {
        #[inline(always)]
        fn read32(&self, offset: usize) -> u32 {
            self.0.read32(offset)
        }
        #[inline(always)]
        fn write32(&self, offset: usize, value: u32) {
            let d = &*self.1;
            if d.on.load(Ordering::Relaxed) {
                let i = d.n.fetch_add(1, Ordering::Relaxed);
                let slot = d.w.get(i).expect("at most 8 deferred writes");
                slot.store((offset as u64) << 32 | u64::from(value), Ordering::Relaxed);
            } else {
                self.0.write32(offset, value)
            }
        }
    }

    impl IrqBar {
        fn defer(&self) {
            self.1.on.store(true, Ordering::Relaxed);
        }
        fn flush(&self) {
            self.1.on.store(false, Ordering::Relaxed);
            let n = self.1.n.swap(0, Ordering::Relaxed);
            for w in &self.1.w[..n] {
                let w = w.load(Ordering::Relaxed);
                self.0.write32((w >> 32) as usize, w as u32);
            }
        }
    }

    /// The model with interrupts on, two vectors unshared: the AEQ on 1,
    /// CEQ 0 on 2 (so the handler's figure is the CEQ's alone). A
    /// loopback RC QP on a CQ of CEQ 0.
    fn device<B: irdma::hal::Bar + Clone>(bar: B) -> Device<FakeHal, B> {
        let mac = [2, 0, 0, 0, 0, 0x0a];
        let mut lan = LanInfo::single_tc(0, 6, mac, 1500);
        lan.msix = MsixInfo { first: 1, count: 2 };
        let o = ProbeOptions {
            interrupts: Some(IrqConfig { shared: false, ceq_itr_us: 0 }),
            ..ProbeOptions::default()
        };
        Device::probe_with(bar, lan, Profile::SMALL, o).expect("probe")
    }

    /// Set by a wake; unparks the task's thread.
    struct Flag(AtomicBool, Thread);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.store(true, Ordering::Release);
            self.1.unpark();
        }
    }

    /// `n` completions through the interrupt path (`verbs_irq_path`: every
    /// `counted_irq_*` call is counted; `verbs_irq_handler`: only
    /// `counted_irq_handle`): the `Cq::completion` future's first poll
    /// (empty poll, waker registered, CQ armed), a signaled 1-SGE WRITE
    /// posted (not counted; the model writes the CQE and the CEQE within
    /// the doorbell), `Device::handle_interrupt` (CEQ drain, CQACK, wake,
    /// re-enable), the future's second poll returning the completion. The
    /// driver's BAR writes in them (CQARM, CQACK, DYN_CTL) are deferred
    /// ([`IrqBar`]): the model's processing of them is not counted.
    pub fn verbs_irq_bench(n: u64) {
        let bar = IrqBar(ModelBar::standalone(mock_bar::Config::default()), Default::default());
        let dev = device(bar.clone());
        let v = dev.irq_vectors().expect("vectors").ceq;
        let pd = dev.alloc_pd().expect("pd");
        let mut cq = dev.create_cq(64).expect("cq");
        let cap = QpCap {
            max_send_wr: 32,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            ..QpCap::default()
        };
        let mut qp =
            dev.create_qp(&pd, &mut QpInitAttr { send_cq: &cq, recv_cq: &cq, cap }).expect("qp");
        loopback_rts!(qp, [2, 0, 0, 0, 0, 0x0a]);
        let m = ModelMr::new(&dev, &pd);
        let sge = m.sge();
        let wr = SendWr { wr_id: 9, opcode: m.write(), flags: SendFlags::SIGNALED, sg_list: &sge };
        let flag = Arc::new(Flag(AtomicBool::new(false), std::thread::current()));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let mut wc = [WorkCompletion::default(); 1];
        for _ in 0..n {
            let mut fut = pin!(cq.completion(&mut wc));
            bar.defer();
            assert!(counted_irq_arm(fut.as_mut(), &mut cx).is_pending());
            bar.flush();
            qp.post_send(&[wr]).expect("post");
            bar.defer();
            let rep = counted_irq_handle(&dev, v);
            bar.flush();
            assert_eq!((rep.cqs, rep.reenabled), (1, true), "{rep:?}");
            assert!(flag.0.swap(false, Ordering::AcqRel), "woken");
            assert_eq!(counted_irq_poll(fut.as_mut(), &mut cx), Poll::Ready(1));
        }
    }

    #[inline(never)]
    fn counted_irq_arm<F: Future>(f: Pin<&mut F>, cx: &mut Context<'_>) -> Poll<F::Output> {
        f.poll(cx)
    }

    #[inline(never)]
    fn counted_irq_handle<B: irdma::hal::Bar + Clone>(
        dev: &Device<FakeHal, B>,
        v: u16,
    ) -> IrqReport {
        dev.handle_interrupt(std::hint::black_box(v))
    }

    #[inline(never)]
    fn counted_irq_poll<F: Future>(f: Pin<&mut F>, cx: &mut Context<'_>) -> Poll<F::Output> {
        f.poll(cx)
    }

    /// Wall-clock latency in the in-process model, `n` rounds (not
    /// guarded: timings on a shared machine). A "CPU" thread halts on the
    /// model's interrupt sink and runs `Device::handle_interrupt`; the
    /// task (this thread) awaits `Cq::completion` with a waker that
    /// unparks it. Per round: the future's first poll arms, a WRITE is
    /// posted, the task parks. Figures (ns, median and 99th percentile):
    /// the model's raise (CQE and CEQE written) → handler entry, and →
    /// the task running again with the completion in hand.
    pub fn latency(n: u64) {
        let bar = ModelBar::standalone(mock_bar::Config::default());
        let sink = mock_bar::InterruptSink::new();
        bar.with_device(|d| d.set_interrupt_sink(sink.clone()));
        let dev: Dev = device(bar.clone());
        let v = dev.irq_vectors().expect("vectors").ceq;
        let pd = dev.alloc_pd().expect("pd");
        let mut cq = dev.create_cq(64).expect("cq");
        let cap = QpCap {
            max_send_wr: 32,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            ..QpCap::default()
        };
        let mut qp =
            dev.create_qp(&pd, &mut QpInitAttr { send_cq: &cq, recv_cq: &cq, cap }).expect("qp");
        loopback_rts!(qp, [2, 0, 0, 0, 0, 0x0a]);
        let m = ModelMr::new(&dev, &pd);
        let sge = m.sge();
        let wr = SendWr { wr_id: 9, opcode: m.write(), flags: SendFlags::SIGNALED, sg_list: &sge };
        let flag = Arc::new(Flag(AtomicBool::new(false), std::thread::current()));
        let waker = Waker::from(flag.clone());
        let stop = AtomicBool::new(false);
        let entered = std::sync::Mutex::new(None::<Instant>);
        let busy = AtomicBool::new(false);
        let (mut to_handler, mut to_task) = (Vec::new(), Vec::new());
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Acquire) {
                    if sink.wait(v.into(), Duration::from_millis(1)) {
                        busy.store(true, Ordering::Release);
                        *entered.lock().unwrap() = Some(Instant::now());
                        dev.handle_interrupt(v);
                        busy.store(false, Ordering::Release);
                    }
                }
            });
            let mut cx = Context::from_waker(&waker);
            let mut wc = [WorkCompletion::default(); 1];
            for i in 0..n {
                // Each round starts with the handler idle and the vector
                // re-enabled (else a handler still draining the last
                // round's CEQE finds this round's too: no interrupt).
                while busy.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                let mut fut = pin!(cq.completion(&mut wc));
                assert!(fut.as_mut().poll(&mut cx).is_pending());
                qp.post_send(&[wr]).expect("post");
                let end = Instant::now() + Duration::from_secs(5);
                while !flag.0.swap(false, Ordering::AcqRel) {
                    std::thread::park_timeout(Duration::from_millis(1));
                    assert!(Instant::now() < end, "no wake-up");
                }
                assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(1));
                let task = Instant::now();
                let raised = sink.last_raised_at(v.into()).expect("raised");
                let Some(handler) = entered.lock().unwrap().take() else {
                    stop.store(true, Ordering::Release);
                    panic!("round {i}: woken without the handler");
                };
                to_handler.push(handler.saturating_duration_since(raised).as_nanos() as f64);
                to_task.push(task.saturating_duration_since(raised).as_nanos() as f64);
            }
            stop.store(true, Ordering::Release);
        });
        for (name, v) in
            [("irq_latency_cqe_to_handler_ns", to_handler), ("irq_latency_cqe_to_task_ns", to_task)]
        {
            let mut v = v;
            v.sort_by(f64::total_cmp);
            let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
            println!("{name}_p50={:.0}", at(0.5));
            println!("{name}_p99={:.0}", at(0.99));
        }
    }
}

fn verbs_irq(n: u64) {
    irq::verbs_irq_bench(n)
}
