//! Interrupt-driven completion (issue #31, host slice): the model raises
//! vectors in-process ([`mock_bar::InterruptSink`]); a test thread plays
//! the CPU — it "halts" on the sink and runs `Device::handle_interrupt`
//! when its vector fires.

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Wake};
use std::time::{Duration, Instant};

use common::*;
use irdma::irq::IrqConfig;
use irdma::lan::MsixInfo;
use irdma::verbs::CqOptions;
use mock_bar::InterruptSink;

/// First RDMA vector (ice's own is 0).
const FIRST: u16 = 1;

fn irq_device(count: u16, cfg: IrqConfig) -> (ModelBar, Dev, Arc<InterruptSink>) {
    let bar = ModelBar::standalone(Config::default());
    let sink = InterruptSink::new();
    bar.with_device(|d| d.set_interrupt_sink(sink.clone()));
    let mut lan = lan_of(A);
    lan.msix = MsixInfo { first: FIRST, count };
    let mut o = opts();
    o.interrupts = Some(cfg);
    let dev = Device::probe_with(bar.clone(), lan, Profile::SMALL, o).expect("probe");
    (bar, dev, sink)
}

/// The CPU halted until `woken()`: waits on the sink for `vector`, runs the
/// handler on each interrupt, ticks the model's timer meanwhile. Panics
/// after `limit` without a wake-up (a lost wake-up).
fn halt_on(dev: &Dev, bar: &ModelBar, sink: &InterruptSink, vector: u16, woken: &dyn Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(5);
    while !woken() {
        if sink.wait(vector.into(), Duration::from_micros(200)) {
            dev.handle_interrupt(vector);
        } else {
            bar.with_device(|d| d.tick_interrupts());
        }
        assert!(Instant::now() < end, "lost wake-up: halted 5 s with a completion pending");
    }
}

fn post_write(qp: &mut TQp<'_>, mr: &TMr<'_>, b: &Buf, id: u64) {
    let sge = [Sge { addr: b.paddr(), length: 64, lkey: mr.lkey() }];
    let wr = signaled(id, write_op(b.paddr() + 2048, mr.rkey()), &sge);
    qp.post_send(&[wr]).expect("post");
}

/// Arm → post → halt until the interrupt → poll, `rounds` times; returns
/// the elapsed time. Every round needs its own interrupt.
fn rounds_by_interrupt(
    dev: &Dev,
    bar: &ModelBar,
    sink: &InterruptSink,
    v: u16,
    rounds: u64,
) -> Duration {
    let pd = dev.alloc_pd().unwrap();
    let mut cq = dev.create_cq(16).unwrap();
    let (mut a, _b) = loopback_pair(dev, &pd, &cq, 8);
    let b = buf(1);
    let mr = reg(dev, &pd, b.paddr(), 4096, &pages_of(&b), false);
    let t0 = Instant::now();
    let mut wc = [empty_wc(); 4];
    for i in 0..rounds {
        assert!(!cq.req_notify(false), "nothing there before the post");
        post_write(&mut a, &mr, &b, i);
        // The CPU takes the interrupt (the model may hold it back for
        // moderation: tick as a timer would), then polls.
        let end = Instant::now() + Duration::from_secs(5);
        while !sink.wait(v.into(), Duration::from_micros(100)) {
            bar.with_device(|d| d.tick_interrupts());
            assert!(Instant::now() < end, "no interrupt for round {i}");
        }
        assert_eq!(dev.handle_interrupt(v).cqs, 1);
        let n = cq.poll(&mut wc);
        assert_eq!(n, 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (i, WcStatus::Success));
    }
    t0.elapsed()
}

/// Interrupts counted against completions: one per armed completion with
/// moderation off; with a CEQ throttle of 500 µs the same count, but the
/// model held events back (throttled) and the vector never fired twice
/// within the interval. Both vectors unshared (AEQ on FIRST, CEQ 0 on
/// FIRST + 1), since Linux applies the throttle only to a CEQ vector that
/// is not the AEQ's (icrdma_hw.c: icrdma_ena_irq).
#[test]
fn interrupts_counted_against_completions_moderation_off_and_on() {
    let _g = lock();
    const R: u64 = 20;
    for itr in [0u16, 500] {
        let (bar, dev, sink) = irq_device(2, IrqConfig { shared: false, ceq_itr_us: itr });
        let v = dev.irq_vectors().unwrap();
        assert_eq!((v.aeq, v.ceq), (FIRST, FIRST + 1));
        // icrdma_ena_irq: INTENA | CLEARPBA | INTERVAL = itr / 2.
        let dyn_ctl = bar.with_device(|d| d.reg(mock_bar::irq::dyn_ctl(v.ceq.into())));
        assert_eq!(dyn_ctl, 0b11 | (u32::from(itr / 2) << 5), "DYN_CTL of the CEQ vector");
        let before = sink.raised(v.ceq.into());
        let took = rounds_by_interrupt(&dev, &bar, &sink, v.ceq, R);
        let raised = sink.raised(v.ceq.into()) - before;
        let c = bar.with_device(|d| d.irq_counters().clone());
        assert_eq!(raised, R, "one interrupt per armed completion (itr {itr})");
        assert_eq!(dev.irq_stats().acks, R, "a CQACK per CEQE");
        assert_eq!(c.acks, R);
        assert_eq!(sink.raised(v.aeq.into()), 0, "no AEQ interrupt");
        if itr == 0 {
            assert_eq!(c.throttled, 0);
        } else {
            assert!(c.throttled > 0, "moderation held events back: {c:?}");
            let min = Duration::from_micros(u64::from(itr) * (R - 1));
            assert!(took >= min, "{R} interrupts in {took:?} < {min:?}");
        }
        drop(dev);
    }
}

/// Two CQs armed, both complete inside one moderation window: one
/// interrupt delivers both (the handler drains the whole CEQ).
#[test]
fn moderation_coalesces_two_cqs_into_one_interrupt() {
    let _g = lock();
    let (bar, dev, sink) = irq_device(2, IrqConfig { shared: false, ceq_itr_us: 4000 });
    let v = dev.irq_vectors().unwrap().ceq;
    let pd = dev.alloc_pd().unwrap();
    let mut cq1 = dev.create_cq(16).unwrap();
    let mut cq2 = dev.create_cq(16).unwrap();
    let (mut a1, _b1) = loopback_pair(&dev, &pd, &cq1, 8);
    let (mut a2, _b2) = loopback_pair(&dev, &pd, &cq2, 8);
    let b = buf(1);
    let mr = reg(&dev, &pd, b.paddr(), 4096, &pages_of(&b), false);
    // A first interrupt opens the moderation window.
    assert!(!cq1.req_notify(false));
    post_write(&mut a1, &mr, &b, 1);
    assert!(sink.wait(v.into(), Duration::from_secs(1)));
    assert_eq!(dev.handle_interrupt(v).cqs, 1);
    assert_eq!(poll_n(&mut cq1, 1).len(), 1);
    // Both CQs complete inside the window: held back, then one interrupt.
    assert!(!cq1.req_notify(false));
    assert!(!cq2.req_notify(false));
    post_write(&mut a1, &mr, &b, 2);
    post_write(&mut a2, &mr, &b, 3);
    assert!(!sink.take(v.into()), "throttled");
    let end = Instant::now() + Duration::from_secs(2);
    while !sink.take(v.into()) {
        assert!(Instant::now() < end, "the throttled interrupt never fired");
        std::thread::sleep(Duration::from_micros(500));
        bar.with_device(|d| d.tick_interrupts());
    }
    let rep = dev.handle_interrupt(v);
    assert_eq!((rep.ceqes, rep.cqs), (2, 2), "{rep:?}");
    assert_eq!(sink.raised(v.into()), 2, "two interrupts for three completions");
    assert_eq!(poll_n(&mut cq1, 1).len(), 1);
    assert_eq!(poll_n(&mut cq2, 1).len(), 1);
}

/// The lost-wake-up hunt: 100,000 arm/poll/wait rounds on one vector
/// (shared mode) while another thread makes the device write each
/// completion at a random moment; every completion arrives, none is lost.
/// Without the check after arming in `Cq::wait`, a CQE written between the
/// poll and the arm produces no CEQE (the model is strict, spec A.4) and
/// the waiter halts forever: `halt_on` fails after 5 s.
#[test]
fn lost_wakeup_hunt_100k_rounds() {
    let _g = lock();
    const N: u64 = 100_000;
    let (bar, dev, sink) = irq_device(1, IrqConfig::default());
    let v = dev.irq_vectors().unwrap();
    assert_eq!(v.aeq, v.ceq, "one vector: shared");
    let pd = dev.alloc_pd().unwrap();
    let mut cq = dev.create_cq(16).unwrap();
    let (mut a, _b) = loopback_pair(&dev, &pd, &cq, 8);
    let b = buf(1);
    let mr = reg(&dev, &pd, b.paddr(), 4096, &pages_of(&b), false);
    let got = AtomicU64::new(0);
    let halts = AtomicU64::new(0);
    // Set when the waiter fails, so the poster stops and the scope ends.
    let stop = std::sync::atomic::AtomicBool::new(false);
    struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            for i in 0..N {
                while got.load(Ordering::Acquire) < i {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    std::hint::spin_loop();
                }
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                for _ in 0..(x % 2048) {
                    std::hint::spin_loop();
                }
                post_write(&mut a, &mr, &b, i);
            }
        });
        let _stop = StopOnDrop(&stop);
        let mut wc = [empty_wc(); 4];
        let mut n = 0;
        while n < N {
            let k = cq.wait(&mut wc, |woken| {
                halts.fetch_add(1, Ordering::Relaxed);
                halt_on(&dev, &bar, &sink, v.ceq, woken)
            });
            for w in &wc[..k] {
                assert_eq!((w.wr_id, w.status), (n, WcStatus::Success));
                n += 1;
            }
            got.store(n, Ordering::Release);
        }
    });
    let c = bar.with_device(|d| d.irq_counters().clone());
    let (halts, raised) = (halts.load(Ordering::Relaxed), sink.raised(v.ceq.into()));
    eprintln!("{N} completions, {halts} halts, {raised} interrupts, model {c:?}");
    assert!(halts > 0 && raised > 0, "the race was exercised");
    assert_eq!(dev.irq_stats().acks, c.acks, "every CQACK reached the model");
}

/// An asynchronous error reaches the driver by interrupt: the AEQE raises
/// the AEQ's vector, the handler processes the AEQ (QP to ERROR + flush)
/// and the report waits in `poll_async_events`.
#[test]
fn aeq_error_delivered_by_interrupt() {
    let _g = lock();
    let (bar, dev, sink) = irq_device(2, IrqConfig::default());
    let v = dev.irq_vectors().unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let (a, _b) = loopback_pair(&dev, &pd, &cq, 8);
    let qpn = a.qp_num();
    assert_eq!(sink.raised(v.aeq.into()), 0);
    // LLP_TOO_MANY_RETRIES (0x050A), AESRC SQ (0x5): QP error path.
    bar.with_device(|d| d.inject_ae(0x050A, 0x5, qpn));
    assert!(sink.wait(v.aeq.into(), Duration::from_secs(1)), "AEQ vector raised");
    assert_eq!(sink.raised(v.ceq.into()), 0, "not the CEQ's vector");
    let rep = dev.handle_interrupt(v.aeq);
    assert!(rep.aeq && rep.reenabled, "{rep:?}");
    assert!(dev.qp_in_error(qpn));
    let mut ev = [NO_EVENT; 4];
    let n = dev.poll_async_events(&mut ev);
    assert!(ev[..n].iter().any(|e| e.id == qpn && e.moved_to_error), "{:?}", &ev[..n]);
    // The AEQ vector is enabled again (no throttle on it).
    let dc = bar.with_device(|d| d.reg(mock_bar::irq::dyn_ctl(v.aeq.into())));
    assert_eq!(dc, 0b11);
}

/// The `async` completion: a future per CQ woken by the handler through
/// the CQ's waker.
#[test]
fn async_completion_woken_by_the_handler() {
    let _g = lock();
    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let (_bar, dev, sink) = irq_device(1, IrqConfig::default());
    let v = dev.irq_vectors().unwrap().ceq;
    let pd = dev.alloc_pd().unwrap();
    let mut cq = dev.create_cq(16).unwrap();
    let (mut a, _b) = loopback_pair(&dev, &pd, &cq, 8);
    let b = buf(1);
    let mr = reg(&dev, &pd, b.paddr(), 4096, &pages_of(&b), false);
    let flag = Arc::new(Flag(false.into()));
    let waker = std::task::Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    let mut wc = [empty_wc(); 4];
    for i in 0..50 {
        let mut fut = pin!(cq.completion(&mut wc));
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending, "nothing yet: armed");
        flag.0.store(false, Ordering::SeqCst);
        post_write(&mut a, &mr, &b, i);
        assert!(sink.wait(v.into(), Duration::from_secs(1)));
        assert!(!flag.0.load(Ordering::SeqCst), "not woken before the handler");
        dev.handle_interrupt(v);
        assert!(flag.0.load(Ordering::SeqCst), "the handler woke the task");
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(1));
        assert_eq!(wc[0].wr_id, i);
    }
}

/// Teardown disables the vectors (DYN_CTL ← 0, icrdma_disable_irq) and the
/// causes, and every page comes back.
#[test]
fn teardown_disables_vectors_and_returns_everything() {
    let _g = lock();
    let base = FakeHal::live_pages();
    let (bar, dev, sink) = irq_device(2, IrqConfig { shared: false, ceq_itr_us: 100 });
    let v = dev.irq_vectors().unwrap();
    {
        let pd = dev.alloc_pd().unwrap();
        let mut cq = dev.create_cq(16).unwrap();
        let (mut a, _b) = loopback_pair(&dev, &pd, &cq, 8);
        let b = buf(1);
        let mr = reg(&dev, &pd, b.paddr(), 4096, &pages_of(&b), false);
        post_write(&mut a, &mr, &b, 7);
        let mut wc = [empty_wc(); 2];
        assert_eq!(cq.wait(&mut wc, |w| halt_on(&dev, &bar, &sink, v.ceq, w)), 1);
    }
    let reg = |off: u32| bar.with_device(|d| d.reg(off));
    assert_ne!(reg(mock_bar::irq::dyn_ctl(v.ceq.into())), 0);
    assert_eq!(reg(mock_bar::regs::PFINT_AEQCTL), 1 << 30 | 3 << 11 | u32::from(v.aeq));
    assert_eq!(reg(mock_bar::irq::ceqctl(0)), 1 << 30 | 3 << 11 | u32::from(v.ceq));
    dev.close().expect("close");
    assert_eq!(reg(mock_bar::irq::dyn_ctl(v.ceq.into())), 0, "CEQ vector disabled");
    assert_eq!(reg(mock_bar::irq::dyn_ctl(v.aeq.into())), 0, "AEQ vector disabled");
    assert_eq!(reg(mock_bar::irq::ceqctl(0)), 0);
    assert_eq!(reg(mock_bar::regs::PFINT_AEQCTL), 0);
    assert!(bar.with_device(|d| d.irq_counters().disables) >= 2);
    assert_eq!(FakeHal::live_pages(), base, "every page back");
}

/// Interrupts asked for without a vector: a typed probe error.
#[test]
fn interrupts_without_vectors_is_a_typed_error() {
    let _g = lock();
    let bar = ModelBar::standalone(Config::default());
    let mut o = opts();
    o.interrupts = Some(IrqConfig::default());
    let e = Dev::probe_with(bar.clone(), lan_of(A), Profile::SMALL, o).err().expect("refused");
    assert_eq!(e.cause, irdma::device::ProbeCause::Lan(irdma::lan::LanInfoError::NoVectors));
}

/// A deferred device (the QEMU model process, the device threads) that
/// finds an arm and a WQE in the same poll: the arm was made first, so the
/// CQE the poll writes must raise a CEQE and the interrupt. The model
/// used to look at arms after sweeping the queues, leaving that CQE
/// unannounced and a core halted on it asleep (seen in QEMU, issue #31).
#[test]
fn deferred_arm_and_post_in_one_poll_raise_the_interrupt() {
    let _g = lock();
    let cfg = Config { mode: mock_bar::Mode::Deferred, ..Config::default() };
    let bar = ModelBar::standalone(cfg);
    let thread = bar.fabric().spawn_device_thread(Duration::from_micros(20));
    let sink = InterruptSink::new();
    bar.with_device(|d| d.set_interrupt_sink(sink.clone()));
    let mut lan = lan_of(A);
    lan.msix = MsixInfo { first: FIRST, count: 2 };
    let mut o = opts_threaded();
    o.interrupts = Some(IrqConfig::default());
    let dev = Device::probe_with(bar.clone(), lan, Profile::SMALL, o).expect("probe");
    let v = dev.irq_vectors().expect("vectors").ceq;
    let pd = dev.alloc_pd().unwrap();
    let mut cq = dev.create_cq(16).unwrap();
    let (mut a, _b) = loopback_pair(&dev, &pd, &cq, 8);
    let b = buf(1);
    let mr = reg(&dev, &pd, b.paddr(), 4096, &pages_of(&b), false);
    // From here the device runs only when this test polls it.
    drop(thread);
    let raised = sink.raised(v.into());
    assert!(!cq.req_notify(false), "nothing there before the post");
    post_write(&mut a, &mr, &b, 7);
    bar.with_device(|d| {
        d.poll();
    });
    assert_eq!(sink.raised(v.into()), raised + 1, "the armed CQ's completion raised no interrupt");
    assert_eq!(dev.handle_interrupt(v).cqs, 1, "one CEQE for the CQ");
    let mut wc = [empty_wc(); 2];
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::Success));
}

/// More CEQs (spec A.8; hw.c: irdma_setup_ceqs): three vectors unshared
/// give the AEQ on FIRST, CEQ 0 on FIRST + 1, CEQ 1 on FIRST + 2, each
/// CEQ's cause programmed onto its vector. A CQ on each CEQ: a completion
/// raises its own vector only, and the handler on that vector finds it.
/// Teardown destroys CEQ 1 and disables every vector.
#[test]
fn cqs_on_two_vectors_each_completion_raises_its_own() {
    let _g = lock();
    let (bar, dev, sink) = irq_device(3, IrqConfig { shared: false, ceq_itr_us: 0 });
    assert_eq!(dev.irq_ceq_count(), 2, "min(3 vectors, MAX_CEQS) − 1 (unshared)");
    let v = dev.irq_vectors().unwrap();
    assert_eq!((v.aeq, v.ceq), (FIRST, FIRST + 1));
    let (v0, v1) = (dev.ceq_vector(0).unwrap(), dev.ceq_vector(1).unwrap());
    assert_eq!((v0, v1), (FIRST + 1, FIRST + 2));
    assert_eq!(dev.ceq_vector(2), None);
    let ceqctl1 = bar.with_device(|d| d.reg(mock_bar::irq::ceqctl(1)));
    assert_eq!(mock_bar::irq::cause_vector(ceqctl1), Some(u32::from(v1)), "GLINT_CEQCTL(1)");
    assert!(bar.with_device(|d| d.ceq(1).is_some()), "CEQ 1 created through the CQP");
    // A CEQ that does not exist is a typed error.
    assert!(matches!(
        dev.create_cq_with(16, CqOptions::on_ceq(2)),
        Err(VerbsError::Invalid { .. })
    ));
    let pd = dev.alloc_pd().unwrap();
    let mut cq0 = dev.create_cq(16).unwrap();
    let mut cq1 = dev.create_cq_with(16, CqOptions::on_ceq(1)).unwrap();
    let (mut a0, _b0) = loopback_pair(&dev, &pd, &cq0, 8);
    let (mut a1, _b1) = loopback_pair(&dev, &pd, &cq1, 8);
    let b = buf(1);
    let mr = reg(&dev, &pd, b.paddr(), 4096, &pages_of(&b), false);
    for round in 0..3u64 {
        for (k, (cq, qp, mine, other)) in
            [(&mut cq0, &mut a0, v0, v1), (&mut cq1, &mut a1, v1, v0)].into_iter().enumerate()
        {
            let (r_mine, r_other) = (sink.raised(mine.into()), sink.raised(other.into()));
            assert!(!cq.req_notify(false));
            post_write(qp, &mr, &b, round * 2 + k as u64);
            assert!(sink.wait(mine.into(), Duration::from_secs(2)), "CQ {k}: its vector fired");
            assert_eq!(sink.raised(mine.into()), r_mine + 1, "CQ {k}: one interrupt");
            assert_eq!(sink.raised(other.into()), r_other, "CQ {k}: the other vector is quiet");
            // The other vector's handler has nothing; this one's has the CQ.
            assert_eq!(dev.handle_interrupt(other).cqs, 0);
            let rep = dev.handle_interrupt(mine);
            assert_eq!((rep.ceqes, rep.cqs, rep.reenabled), (1, 1, true), "CQ {k}: {rep:?}");
            assert_eq!(poll_n(cq, 1).len(), 1);
        }
    }
    assert_eq!(sink.raised(v.aeq.into()), 0, "no AEQ interrupt");
    drop((a0, a1, _b0, _b1, mr, cq0, cq1, pd));
    drop(dev);
    bar.with_device(|d| {
        assert!(d.ceq(1).is_none(), "CEQ 1 destroyed at teardown");
        assert!(d.ceq(0).is_none(), "CEQ 0 destroyed at teardown");
        for n in [v.aeq, v0, v1] {
            assert_eq!(d.reg(mock_bar::irq::dyn_ctl(n.into())), 0, "vector {n} disabled");
        }
        assert_eq!(d.reg(mock_bar::irq::ceqctl(1)), 0, "CEQ 1 cause off");
    });
}

/// Shared mode with two vectors: CEQ 0 and the AEQ on FIRST, CEQ 1 on
/// FIRST + 1 (spec A.8).
#[test]
fn shared_mode_puts_ceq_i_on_entry_i() {
    let _g = lock();
    let (_bar, dev, _sink) = irq_device(2, IrqConfig { shared: true, ceq_itr_us: 0 });
    assert_eq!(dev.irq_ceq_count(), 2);
    assert_eq!(dev.irq_vectors().unwrap().aeq, FIRST);
    assert_eq!((dev.ceq_vector(0), dev.ceq_vector(1)), (Some(FIRST), Some(FIRST + 1)));
}

/// The CCQ on CEQ 0 (spec A.3, A.6; ctrl.c: irdma_sc_ccq_arm): with CCQ
/// interrupts on, a CQP op's completion raises CEQ 0's vector; the handler
/// reports it as a CCQ event and acks it; the CQP re-arms after the drain
/// that consumed the CQE, so the next op raises the vector again. Off: a
/// CQP op raises nothing.
#[test]
fn cqp_completion_raises_ceq0_vector_when_ccq_armed() {
    let _g = lock();
    let (bar, dev, sink) = irq_device(2, IrqConfig { shared: false, ceq_itr_us: 0 });
    let v = dev.irq_vectors().unwrap().ceq;
    let pd = dev.alloc_pd().unwrap();
    let before = sink.raised(v.into());
    let _cq = dev.create_cq(16).unwrap();
    assert_eq!(sink.raised(v.into()), before, "CCQ not armed: no interrupt");
    assert!(dev.set_ccq_interrupts(true));
    for i in 0..3 {
        let before = sink.raised(v.into());
        let acks = bar.with_device(|d| d.irq_counters().acks);
        let cq = dev.create_cq(16).unwrap();
        assert_eq!(
            sink.raised(v.into()),
            before + 1,
            "op {i}: CQP completion raised CEQ 0's vector"
        );
        assert!(sink.take(v.into()));
        let rep = dev.handle_interrupt(v);
        assert!(rep.ccq && rep.cqs == 0 && rep.ceqes == 1, "op {i}: {rep:?}");
        assert_eq!(bar.with_device(|d| d.irq_counters().acks), acks + 1, "CQACK for the CCQ");
        drop(cq);
        // The destroy's completion raised it again (re-armed after the
        // drain of the create's CQE).
        assert!(sink.take(v.into()), "op {i}: destroy raised the vector");
        assert!(dev.handle_interrupt(v).ccq);
    }
    assert_eq!(dev.irq_stats().ccq_events, 6);
    assert!(!dev.set_ccq_interrupts(false));
    drop(pd);
}
