//! Set-up and per-operation bodies shared by the data-path benchmarks:
//! `benches/uk.rs` (instruction counts under callgrind, `cargo xtask bench`)
//! and `benches/uk_criterion.rs` (wall-clock timings with criterion).
//!
//! Rings live in host memory, there is no device model, and the BAR's
//! doorbell is one relaxed store. Each `*_op` function is one iteration of a
//! workload; both bench binaries call exactly these, so they time/count the
//! same code.

use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use irdma::hal::Bar;
use irdma::hal::wqe::cqe;
use irdma::uk::qp::{QpKind, QpUk, poll_cq};
use irdma::uk::sq::SqPost;
use irdma::uk::{CqRing, Linked, MpSq, MpTrk, Publish, QpLink, QueueMem, Rq, Sq, SqError, SqWrTrk};
use irdma::wr::{SendFlags, SendWr, Sge, WorkCompletion, WrOpcode};

/// A BAR whose doorbell is one relaxed store (what an MMIO write costs in
/// instructions), so nothing is optimised away.
pub struct NopBar(pub AtomicU32);

impl Bar for NopBar {
    fn read32(&self, _offset: usize) -> u32 {
        0
    }
    #[inline(always)]
    fn write32(&self, _offset: usize, value: u32) {
        self.0.store(value, Ordering::Relaxed);
    }
}

impl NopBar {
    /// A BAR with doorbell value 0.
    pub fn new() -> Self {
        NopBar(AtomicU32::new(0))
    }

    /// The last doorbell value (read at the end so the stores stay live).
    pub fn last(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

/// SQ size in quanta.
pub const SQ_QUANTA: u32 = 4096;
/// CQ size in CQE slots.
pub const CQ_SLOTS: u32 = 4096;
/// QP context value the CQEs carry.
pub const CTX: u64 = 0x1000;
/// QP id of the benchmark QP.
pub const QP_ID: u32 = 0x2a;

/// A queue view of a host buffer.
pub fn view(v: &mut [u64]) -> QueueMem<'_> {
    // SAFETY: the slice is borrowed mutably for the view's lifetime.
    unsafe { QueueMem::from_raw(NonNull::new(v.as_mut_ptr()).expect("non-null"), v.len()) }
}

/// An all-zero completion to poll into.
pub const WC0: WorkCompletion = WorkCompletion::EMPTY;

/// The one SGE of the benchmark WR.
pub const SGE: [Sge; 1] = [Sge { addr: 0x7f00_1000, length: 4096, lkey: 0x1234 }];

/// A signalled 1-SGE RDMA WRITE.
pub fn write_wr(sge: &[Sge]) -> SendWr<'_> {
    SendWr {
        wr_id: 1,
        opcode: WrOpcode::RdmaWrite { remote_addr: 0x9000_0000, rkey: 0x55 },
        flags: SendFlags::SIGNALED,
        sg_list: sge,
    }
}

/// The same WR as an uk post (for the poll cases, which post without the
/// verbs layer).
pub fn write_post<'s>(wr: &SendWr<'s>) -> SqPost<'s> {
    irdma::uk::qp::sq_post_from_wr(wr, QpKind::Rc)
}

/// Host memory for one QP (SQ, RQ) and one CQ.
pub struct Mem {
    sqm: Vec<u64>,
    trk: Vec<SqWrTrk>,
    rqm: Vec<u64>,
    wrid: Vec<u64>,
    cqm: Vec<u64>,
    sh: Vec<u64>,
}

impl Mem {
    /// Zeroed rings.
    pub fn new() -> Self {
        Mem {
            sqm: vec![0u64; SQ_QUANTA as usize * 4],
            trk: vec![SqWrTrk::default(); SQ_QUANTA as usize],
            rqm: vec![0u64; 64 * 4],
            wrid: vec![0u64; 64],
            cqm: vec![0u64; CQ_SLOTS as usize * 4],
            sh: vec![0u64; 8],
        }
    }

    /// A single-owner RC QP and its CQ over this memory.
    pub fn qp_cq(&mut self) -> (QpUk<'_>, CqRing<'_>) {
        let sq =
            Sq::new(view(&mut self.sqm), &mut self.trk, SQ_QUANTA, 13, 101, QP_ID).expect("sq");
        let rq = Rq::new(view(&mut self.rqm), &mut self.wrid, 64, 0, 1).expect("rq");
        let qp = QpUk::new(sq, rq, CTX, QpKind::Rc);
        let cq = CqRing::new(view(&mut self.cqm), view(&mut self.sh), CQ_SLOTS, 7).expect("cq");
        (qp, cq)
    }

    /// The same QP split into a producer half and a consumer half (what a
    /// verbs `Qp` is since `Cq::poll` takes no QP list), their link, and
    /// the CQ.
    pub fn split(&mut self) -> (QpUk<'_>, QpUk<'_>, QpLink, CqRing<'_>) {
        let (prod, cq) = self.qp_cq();
        // SAFETY: the bench keeps to the split protocol: `prod` only posts,
        // `cons` only retires, and positions cross only through the link.
        let (s, r) = unsafe { (prod.sq.split_consumer(), prod.rq.split_consumer()) };
        let cons = QpUk::new(s, r, CTX, QpKind::Rc);
        let link = QpLink::new(&prod.sq, &prod.rq);
        (prod, cons, link, cq)
    }

    /// A multi-producer SQ over this memory's SQ ring and `trk`.
    pub fn mp<'a>(&'a mut self, trk: &'a [MpTrk]) -> MpSq<QueueMem<'a>, &'a [MpTrk]> {
        MpSq::new(view(&mut self.sqm), trk, SQ_QUANTA, 13, 101, QP_ID).expect("mp")
    }
}

/// Tracking entries for [`Mem::mp`].
pub fn mp_trk() -> Vec<MpTrk> {
    (0..SQ_QUANTA).map(|_| MpTrk::new()).collect()
}

/// The "device": writes SQ CQEs in order, tracking its producer position.
pub struct Device {
    hw: u64,
}

impl Device {
    /// Producer at slot 0, first pass.
    pub fn new() -> Self {
        Device { hw: 0 }
    }

    /// Writes one SQ CQE for the WQE at `idx`; returns its first qword.
    #[inline(always)]
    pub fn sq_cqe(&mut self, cq: &CqRing<'_>, idx: u32) -> usize {
        let slot = (self.hw % u64::from(CQ_SLOTS)) as usize * 4;
        let valid = (self.hw / u64::from(CQ_SLOTS)).is_multiple_of(2);
        let m = cq.mem();
        m.write(slot + 1, CTX);
        m.write(slot + 2, cqe::QPID.prep(QP_ID.into()));
        m.write(
            slot + 3,
            cqe::VALID.prep(valid as u64) | cqe::SQ.prep(1) | cqe::WQEIDX.prep(idx.into()),
        );
        self.hw += 1;
        slot
    }
}

/// The multi-producer completer: retires what the last post published,
/// naming its last WQE as a CQE would (`MpSq::complete_at`, the CQ
/// poller's retirement of a shared SQ).
pub struct Retire {
    /// Free-running position after the last WQE posted so far.
    next: u32,
}

impl Retire {
    /// Nothing posted yet.
    pub fn new() -> Self {
        Retire { next: 0 }
    }

    /// Retires the `posted` one-quantum WQEs posted since the last call.
    /// Single-threaded, every WQE one quantum: the last one's ring index is
    /// known the way a poller learns it from its CQE, without reading the
    /// SQ's counters.
    #[inline(always)]
    pub fn run(&mut self, mp: &MpSq<QueueMem<'_>, &[MpTrk]>, posted: u32) {
        self.run_with(posted, |last| mp.complete_at(last));
    }

    /// [`Retire::run`] through any SQ's `complete_at` (the single-owner
    /// [`Sq::complete_at`] for the like-for-like cases): the same harness,
    /// so the MP and single-owner figures differ only in the SQ type.
    #[inline(always)]
    pub fn run_with(&mut self, posted: u32, complete_at: impl FnOnce(u32) -> Option<SqWrTrk>) {
        self.next = self.next.wrapping_add(posted);
        let last = self.next.wrapping_sub(1) & (SQ_QUANTA - 1);
        let t = complete_at(last);
        debug_assert!(t.is_some());
        black_box(t.map(|t| t.wr_id));
    }
}

/// `post_send` of `wrs` (one doorbell), then retire them.
#[inline(always)]
pub fn post_write_op(qp: &mut QpUk<'_>, bar: &NopBar, wrs: &[SendWr<'_>]) {
    let _ = black_box(qp.post_send(bar, black_box(wrs)));
    qp.sq.consume_all();
}

/// `post_send` of `wrs` (one doorbell), then retire them through the
/// single-owner SQ's own poller retirement [`Sq::complete_at`] naming the
/// last WQE, as [`mp_post_write_op`] does on the shared SQ (the
/// like-for-like figure for it; [`post_write_op`] retires with
/// `consume_all`, no completion step).
#[inline(always)]
pub fn post_complete_write_op(
    qp: &mut QpUk<'_>,
    retire: &mut Retire,
    bar: &NopBar,
    wrs: &[SendWr<'_>],
) {
    let _ = black_box(qp.post_send(bar, black_box(wrs)));
    retire.run_with(wrs.len() as u32, |last| qp.sq.complete_at(last));
}

/// `post_send` on the producer half of a split QP as a verbs `Qp` runs it
/// (the head published before the doorbell; the consumer's tail read only
/// when the ring looks full), then the consumer half retires them and
/// publishes its tail (two loads and four stores more than
/// [`post_write_op`]'s retirement, counted in the figure).
#[inline(always)]
pub fn split_post_write_op(
    prod: &mut QpUk<'_>,
    cons: &mut QpUk<'_>,
    link: &QpLink,
    bar: &NopBar,
    wrs: &[SendWr<'_>],
) {
    let _ = black_box(prod.post_send_with(bar, black_box(wrs), link));
    link.consumer_begin(cons);
    cons.sq.consume_all();
    link.consumer_end(cons);
}

/// The split QP: the producer posts one WQE (uk; the consumer's tail read
/// only when the ring looks full, as `post_send_with` does) and publishes
/// it, the device writes its CQE, `poll_cq` through [`Linked`] returns it,
/// the consumer publishes its tail. Measured against the single-owner
/// [`poll_cqe_base_op`], so the figure also holds the producer's link
/// (one store, and the full-ring check).
#[inline(always)]
pub fn split_poll_cqe_op(
    prod: &mut QpUk<'_>,
    cons: &mut QpUk<'_>,
    link: &QpLink,
    cq: &mut CqRing<'_>,
    dev: &mut Device,
    one: &SqPost<'_>,
    wc: &mut [WorkCompletion; 1],
) {
    let p = match prod.sq.post(black_box(one)) {
        Err(SqError::Full) if link.refresh(&mut prod.sq) => prod.sq.post(one),
        r => r,
    };
    let p = p.map(|p| p.wqe_idx).unwrap_or(0);
    link.publish(&prod.sq);
    dev.sq_cqe(cq, p);
    let got = poll_cq(cq, &mut Linked { link, qp: cons }, black_box(&mut wc[..]));
    link.consumer_end(cons);
    assert_eq!(got, 1);
}

/// Multi-producer `post_send` of `wrs` (one doorbell), then retire them.
#[inline(always)]
pub fn mp_post_write_op(
    mp: &MpSq<QueueMem<'_>, &[MpTrk]>,
    retire: &mut Retire,
    bar: &NopBar,
    wrs: &[SendWr<'_>],
) {
    let _ = black_box(mp.post_send(bar, QpKind::Rc, black_box(wrs)));
    retire.run(mp, wrs.len() as u32);
}

/// Post one WQE (uk), the device writes its CQE, `poll_cq` returns it.
#[inline(always)]
pub fn poll_cqe_op(
    qp: &mut QpUk<'_>,
    cq: &mut CqRing<'_>,
    dev: &mut Device,
    one: &SqPost<'_>,
    wc: &mut [WorkCompletion; 1],
) {
    post_with_cqe_op(qp, cq, dev, one);
    poll_one_op(qp, cq, wc);
}

/// First half of [`poll_cqe_op`]: post one WQE (uk), the device writes its CQE.
#[inline(always)]
pub fn post_with_cqe_op(qp: &mut QpUk<'_>, cq: &CqRing<'_>, dev: &mut Device, one: &SqPost<'_>) {
    let p = qp.sq.post(black_box(one)).map(|p| p.wqe_idx).unwrap_or(0);
    dev.sq_cqe(cq, p);
}

/// Second half of [`poll_cqe_op`]: `poll_cq` returns the one waiting CQE.
#[inline(always)]
pub fn poll_one_op(qp: &mut QpUk<'_>, cq: &mut CqRing<'_>, wc: &mut [WorkCompletion; 1]) {
    let got = poll_cq(cq, qp, black_box(&mut wc[..]));
    assert_eq!(got, 1);
}

/// [`poll_cqe_op`] without the poll: post, device CQE, retire and clear the
/// CQE by hand (subtracted from it to get the poll alone).
#[inline(always)]
pub fn poll_cqe_base_op(
    qp: &mut QpUk<'_>,
    cq: &mut CqRing<'_>,
    dev: &mut Device,
    one: &SqPost<'_>,
    wc: &mut [WorkCompletion; 1],
) {
    let p = qp.sq.post(black_box(one)).map(|p| p.wqe_idx).unwrap_or(0);
    let slot = dev.sq_cqe(cq, p);
    // Keep the rings in step without polling.
    qp.sq.consume_all();
    cq.mem().write(slot + 3, 0);
    black_box(&wc);
}

/// `poll_cq` on an empty CQ.
#[inline(always)]
pub fn poll_empty_op(qp: &mut QpUk<'_>, cq: &mut CqRing<'_>, wc: &mut [WorkCompletion; 1]) {
    let got = poll_cq(cq, qp, black_box(&mut wc[..]));
    assert_eq!(black_box(got), 0);
}

/// The multi-producer SQ the thread benchmarks share.
pub type SharedSq<'a> = MpSq<QueueMem<'a>, &'a [MpTrk]>;

/// The completer of the thread benchmarks: whichever posting thread gets
/// the try-lock retires everything published so far (one completer at a
/// time, as `MpSq::complete_at` requires); the others carry on posting.
#[derive(Default)]
pub struct Completer(std::sync::atomic::AtomicBool);

impl Completer {
    /// Retires through the last published WQE, unless another thread is
    /// retiring.
    pub fn try_run(&self, mp: &SharedSq<'_>) {
        // Look before the swap: a busy flag costs the poster a read of a
        // shared line, not taking the line from the completer's core.
        if self.0.load(Ordering::Relaxed) || self.0.swap(true, Ordering::Acquire) {
            return;
        }
        let end = mp.published();
        let mask = mp.size() - 1;
        if end & mask != mp.tail() || mp.used() == mp.size() {
            let _ = black_box(mp.complete_at(end.wrapping_sub(1) & mask));
        }
        self.0.store(false, Ordering::Release);
    }
}

/// One posting thread of the thread benchmarks, pinned to `cpu`: `calls`
/// multi-producer `post_send`s of `wrs` (one doorbell each, on the thread's
/// own doorbell word: an MMIO write moves no cache line between cores, a
/// shared `NopBar` word would), retrying a full ring; every 256 WRs, if
/// more than half the ring is outstanding, [`Completer::try_run`].
pub fn producer(cpu: usize, mp: &SharedSq<'_>, c: &Completer, wrs: &[SendWr<'_>], calls: u64) {
    pin(cpu);
    let bar = &NopBar::new();
    let every = (256 / wrs.len().max(1)).max(1) as u64;
    let mut waits = 0u64;
    for i in 0..calls {
        while mp.post_send(bar, QpKind::Rc, black_box(wrs)).is_err() {
            c.try_run(mp);
            waits += 1;
            std::hint::spin_loop();
        }
        if i % every == 0 && mp.used() > mp.size() / 2 {
            c.try_run(mp);
        }
    }
    black_box(bar.last());
    FULL_WAITS.fetch_add(waits, Ordering::Relaxed);
}

/// How many times [`producer`]s found the ring full (another thread was
/// retiring, or nothing published was left to retire) and tried again,
/// since the last `swap(0)`: the time one producer spends waiting on the
/// other's retirement.
pub static FULL_WAITS: AtomicU64 = AtomicU64::new(0);

/// `threads` posting threads at once (the caller's thread is CPU 0's),
/// each running [`producer`] with `calls` calls; returns when all are done.
pub fn run_producers(
    threads: u64,
    mp: &SharedSq<'_>,
    c: &Completer,
    wrs: &[SendWr<'_>],
    calls: u64,
) {
    std::thread::scope(|s| {
        for cpu in 1..threads as usize {
            s.spawn(move || producer(cpu, mp, c, wrs, calls));
        }
        producer(0, mp, c, wrs, calls);
    });
}

/// The machine's ceiling for [`run_producers`]: `threads` posting threads
/// at once as there, but each on a shared SQ of its own (its own ring,
/// tracking entries and completer, built on its own thread), so no cache
/// line moves between the cores. What two threads gain here is what this
/// machine gives this workload at best; one shared SQ cannot do better.
/// Returns the time from when all are built until all are done.
pub fn run_separate_producers(threads: u64, wrs: &[SendWr<'_>], calls: u64) -> Duration {
    let ready = Barrier::new(threads as usize + 1);
    std::thread::scope(|s| {
        for cpu in 0..threads as usize {
            let ready = &ready;
            s.spawn(move || {
                pin(cpu);
                let trk = mp_trk();
                let mut mem = Mem::new();
                let mp = mem.mp(&trk);
                let c = Completer::default();
                ready.wait();
                producer(cpu, &mp, &c, wrs, calls);
            });
        }
        ready.wait();
        Instant::now()
    })
    // `scope` returns once every producer is done.
    .elapsed()
}

/// Pins the calling thread to CPU `cpu` (Linux; elsewhere a no-op), so the
/// scheduler does not move the threads between the cores mid-run.
pub fn pin(cpu: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: `set` is a local, zero-initialised `cpu_set_t` (a plain bit
    // array), passed with its size; the call only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu % libc::CPU_SETSIZE as usize, &mut set);
        let _ = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cpu;
}
