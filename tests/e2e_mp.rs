//! Multi-producer QPs end to end: several threads post RDMA WRITEs and
//! SENDs into ONE [`SharedQp`] on device A while the model runs on its own
//! device thread (deferred mode) and the main thread polls A's CQ. Every
//! signaled WR completes exactly once and each thread's completions arrive
//! in its posting order; afterwards every byte each thread wrote at B and
//! every message B received is checked. Also: the shared QP refuses what
//! the single-owner QP refuses, and a shared QP moved to ERROR completes
//! every outstanding WR exactly once.

mod common;
mod e2e_common;

use e2e_common::*;
use irdma::uk::SqError;
use irdma::verbs::{PostError, PostErrorKind};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

const THREADS: usize = 4;
/// WRITEs per thread; each moves one `CHUNK` of the thread's local region.
const WRITES: usize = 512;
const CHUNK: usize = 128;
/// SENDs per thread.
const SENDS: usize = 24;
const MSG: usize = 64;
/// Bytes of B's target region per thread.
const SLICE: usize = WRITES * CHUNK;
const WAIT: std::time::Duration = std::time::Duration::from_secs(10);

// The whole point of the type.
const _: () = {
    const fn sync<T: Sync>() {}
    sync::<TShared<'static>>();
};

fn wr_id(thread: usize, i: usize) -> u64 {
    ((thread as u64) << 32) | i as u64
}

/// Set when a thread of a threaded test fails (the poller or a poster), so
/// the others stop at their next step instead of spinning on a queue nobody
/// drains; cleared before each such test starts its threads.
static STOP: AtomicBool = AtomicBool::new(false);

/// Sets [`STOP`] if its thread unwinds.
struct StopGuard;

impl Drop for StopGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            STOP.store(true, Ordering::SeqCst);
        }
    }
}

/// Panics if another thread of the test failed.
fn check_stop() {
    assert!(!STOP.load(Ordering::SeqCst), "another thread of the test failed; stopping");
}

/// Posts `wrs` to the shared QP, retrying the rest while the SQ is full.
fn post_all(qp: &TShared<'_>, mut wrs: &[SendWr<'_>]) {
    let _g = StopGuard;
    let since = std::time::Instant::now();
    while !wrs.is_empty() {
        check_stop();
        match qp.post_send(wrs) {
            Ok(()) => return,
            // Busy: in ERROR the QP's lock was held (a poller); the post
            // does not wait for it, the caller retries (issue #12).
            Err(PostError {
                bad_wr,
                kind: PostErrorKind::Sq(SqError::Full) | PostErrorKind::Busy,
            }) => {
                wrs = &wrs[bad_wr..];
                assert!(since.elapsed() < WAIT, "SQ stayed full or the QP busy");
                std::thread::yield_now();
            }
            Err(e) => panic!("post_send: {e:?}"),
        }
    }
}

/// The message thread `t` sends as its `i`-th SEND.
fn message(t: usize, i: usize) -> Vec<u8> {
    let mut m = vec![t as u8, i as u8];
    m.extend((2..MSG).map(|k| (t * 31 + i * 7 + k) as u8));
    m
}

#[test]
fn threads_share_one_qp_deferred() {
    let _g = lock();
    let t0 = std::time::Instant::now();
    let (bar_a, bar_b, _thread, da, db) = threaded_devices(Profile::SMALL);

    let cap = qp_cap(32, 4, 2, 1);
    let pd_a = da.alloc_pd().expect("pd");
    let mut cq_a = da.create_cq(128).expect("cq");
    let mut qp = shared_qp(&da, &pd_a, &cq_a, cap);
    let total_sends = (THREADS * SENDS) as u32;
    let mut sb = Side::new(
        &db,
        B,
        total_sends + 8,
        QpCap { max_send_wr: 4, max_recv_wr: total_sends, ..cap },
    );
    connect_shared(&mut qp, A, B, sb.qp.qp_num());
    connect(&mut sb.qp, B, A, qp.qp_num()).expect("connect b");
    assert_eq!(qp.state(), QpState::Rts);

    // B: one target region (a slice per thread) and one receive buffer per SEND.
    let target = sb.region(THREADS * SLICE / 4096, 0);
    let target_before = target.bytes(0, THREADS * SLICE);
    let inbox = sb.region((total_sends as usize * MSG).div_ceil(4096), 0);
    let recvs: Vec<[Sge; 1]> =
        (0..total_sends as usize).map(|k| [inbox.sge(k * MSG, MSG)]).collect();
    let rwrs: Vec<RecvWr<'_>> =
        recvs.iter().enumerate().map(|(k, s)| RecvWr { wr_id: k as u64, sg_list: s }).collect();
    sb.qp.post_recv(&rwrs).expect("post_recv");

    // A: each thread's source region (a distinct pattern) and messages.
    let sources: Vec<Region<'_>> = (0..THREADS)
        .map(|t| {
            let r = region_on(&da, &pd_a, SLICE / 4096 + 1);
            let pattern: Vec<u8> = (0..r.len()).map(|k| (k * 13 + t * 71 + 5) as u8).collect();
            r.put(0, &pattern);
            for i in 0..SENDS {
                r.put(SLICE + i * MSG, &message(t, i));
            }
            r
        })
        .collect();
    let expected_sources: Vec<Vec<u8>> = sources.iter().map(|r| r.bytes(0, SLICE)).collect();

    // What the poller must see: per thread, the signaled wr_ids in order.
    let mut expect: Vec<Vec<(u64, WcOpcode)>> = vec![Vec::new(); THREADS];
    let posting_done = AtomicBool::new(false);
    let mut seen: Vec<Vec<(u64, WcOpcode)>> = vec![Vec::new(); THREADS];
    STOP.store(false, Ordering::SeqCst);
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (t, src) in sources.iter().enumerate() {
            let (qp, target) = (&qp, &target);
            handles.push(s.spawn(move || {
                let mut signaled = Vec::new();
                let remote = target.addr() + (t * SLICE) as u64;
                let mut i = 0;
                let mut sends = 0;
                let mut batch_no = 0usize;
                while i < WRITES {
                    // Batches of 1–3 WRITEs (some of 2 SGEs, some unsignaled),
                    // every third batch followed by a SEND.
                    let n = (1 + (t + batch_no) % 3).min(WRITES - i);
                    let sges: Vec<[Sge; 2]> = (i..i + n)
                        .map(|k| {
                            let off = k * CHUNK;
                            [src.sge(off, CHUNK / 2), src.sge(off + CHUNK / 2, CHUNK / 2)]
                        })
                        .collect();
                    let mut wrs: Vec<SendWr<'_>> = Vec::new();
                    for (j, sg) in sges.iter().enumerate() {
                        let k = i + j;
                        let sg_list: &[Sge] = if k % 2 == 0 { &sg[..] } else { &sg[..1] };
                        let last = k + 1 == WRITES;
                        let sig = last || k % 4 != 1;
                        wrs.push(SendWr {
                            wr_id: wr_id(t, k),
                            opcode: write_op(remote + (k * CHUNK) as u64, target.key()),
                            flags: if sig { SendFlags::SIGNALED } else { SendFlags::NONE },
                            sg_list,
                        });
                        if sig {
                            signaled.push((wr_id(t, k), WcOpcode::RdmaWrite));
                        }
                    }
                    let msg_sge;
                    if batch_no % 3 == 2 && sends < SENDS {
                        msg_sge = [src.sge(SLICE + sends * MSG, MSG)];
                        let id = wr_id(t, WRITES + sends);
                        wrs.push(signaled_wr(id, &msg_sge));
                        signaled.push((id, WcOpcode::Send));
                        sends += 1;
                    }
                    post_all(qp, &wrs);
                    i += n;
                    batch_no += 1;
                }
                // The rest of the SENDs, after the last WRITE.
                while sends < SENDS {
                    let sg = [src.sge(SLICE + sends * MSG, MSG)];
                    let id = wr_id(t, WRITES + sends);
                    post_all(qp, &[signaled_wr(id, &sg)]);
                    signaled.push((id, WcOpcode::Send));
                    sends += 1;
                }
                signaled
            }));
        }
        // The poller: the main thread, concurrently with the posters.
        let sig_writes = (0..WRITES).filter(|k| k + 1 == WRITES || k % 4 != 1).count();
        let want: usize = THREADS * (sig_writes + SENDS);
        let mut got = 0;
        let mut wc = [empty_wc(); 16];
        let since = std::time::Instant::now();
        let _stop = StopGuard;
        while got < want {
            check_stop();
            let n = cq_a.poll_shared([&qp], &mut wc).unwrap();
            if n == 0 {
                if since.elapsed() > WAIT {
                    let sq = qp.send_queue_stats();
                    let c = bar_a.with_device(|d| format!("{:?}", d.counters()));
                    let cb = bar_b.with_device(|d| format!("{:?}", d.counters()));
                    panic!(
                        "missing completions: {got} of {want}; SQ used {} published {} tail {}; \
                         state {:?}; A {c}; B {cb}; seen {seen:?}",
                        sq.used,
                        sq.published,
                        sq.tail,
                        qp.state()
                    );
                }
                std::thread::yield_now();
            }
            for c in &wc[..n] {
                assert_eq!((c.status, c.qp_num), (WcStatus::Success, qp.qp_num()), "{c:?}");
                let t = (c.wr_id >> 32) as usize;
                assert!(t < THREADS, "{c:?}");
                seen[t].push((c.wr_id, c.opcode));
                got += 1;
            }
        }
        for (t, h) in handles.into_iter().enumerate() {
            expect[t] = h.join().expect("poster");
        }
        posting_done.store(true, Ordering::Relaxed);
    });
    assert!(posting_done.load(Ordering::Relaxed));
    for t in 0..THREADS {
        assert_eq!(seen[t], expect[t], "thread {t}: completions (exactly once, in order)");
    }
    // Nothing twice, nothing late.
    std::thread::sleep(std::time::Duration::from_millis(2));
    let mut extra = [empty_wc(); 4];
    assert_eq!(cq_a.poll_shared([&qp], &mut extra).unwrap(), 0, "extra: {extra:?}");
    assert_eq!(qp.send_queue_stats().used, 0, "every WQE retired");

    // B: every byte each thread wrote. Odd WRITEs moved only their first half.
    let mut want_target = target_before;
    for (t, src) in expected_sources.iter().enumerate() {
        for k in 0..WRITES {
            let len = if k % 2 == 0 { CHUNK } else { CHUNK / 2 };
            let o = t * SLICE + k * CHUNK;
            want_target[o..o + len].copy_from_slice(&src[k * CHUNK..k * CHUNK + len]);
        }
    }
    same(&target.bytes(0, THREADS * SLICE), &want_target, "target region");

    // B: every SEND arrived exactly once, each thread's in order.
    let wcs = sb.poll(total_sends as usize);
    assert_eq!(wcs.len(), total_sends as usize, "receives: {wcs:?}");
    sb.nothing();
    let mut next = [0usize; THREADS];
    let mut per_slot = BTreeMap::new();
    for c in &wcs {
        assert_eq!(
            (c.status, c.opcode, c.byte_len),
            (WcStatus::Success, WcOpcode::Recv, MSG as u32)
        );
        let m = inbox.bytes(c.wr_id as usize * MSG, MSG);
        let (t, i) = (m[0] as usize, m[1] as usize);
        assert!(t < THREADS, "{m:?}");
        assert_eq!(i, next[t], "thread {t}: messages in order");
        same(&m, &message(t, i), "message");
        next[t] += 1;
        assert!(per_slot.insert(c.wr_id, (t, i)).is_none());
    }
    assert_eq!(next, [SENDS; THREADS]);

    qp.destroy().expect("destroy");
    let sg = [sources[0].sge(0, 8)];
    assert_eq!(
        qp.post_send(&[signaled_wr(1, &sg)]),
        Err(PostError { bad_wr: 0, kind: PostErrorKind::Destroyed })
    );
    assert!(t0.elapsed() < std::time::Duration::from_secs(30));
}

fn signaled_wr<'a>(id: u64, sg: &'a [Sge]) -> SendWr<'a> {
    signaled(id, WrOpcode::Send, sg)
}

/// The shared QP refuses exactly what the single-owner QP refuses, with the
/// same typed error and `bad_wr`; the WRs before the bad one are posted and
/// complete.
#[test]
fn shared_qp_refuses_what_qp_refuses() {
    let _g = lock();
    let (_ba, _bb, da, db) = two_devices(Profile::SMALL);
    let cap = QpCap { max_inline_data: 32, ..qp_cap(16, 4, 2, 1) };
    let mut sa = Side::new(&da, A, 64, cap);
    let mut sb = Side::new(&db, B, 64, cap);
    let mut shared_cq = da.create_cq(64).expect("cq");
    let mut shared = shared_qp(&da, &sa.pd, &shared_cq, cap);
    let mut sb2 = Side::new(&db, B, 64, cap);
    link(&mut sa, &mut sb);
    connect_shared(&mut shared, A, B, sb2.qp.qp_num());
    connect(&mut sb2.qp, B, A, shared.qp_num()).expect("connect");

    let src = sa.region(1, 3);
    let dst = sb.region(1, 0);
    let dst2 = sb2.region(1, 0);
    let ok_sg = [src.sge(0, 16)];
    let three = [src.sge(0, 4), src.sge(4, 4), src.sge(8, 4)];
    let ok = signaled(7, write_op(dst.addr(), dst.key()), &ok_sg);
    let mut inline = signaled(8, write_op(dst.addr(), dst.key()), &ok_sg);
    inline.flags = SendFlags(SendFlags::SIGNALED.0 | SendFlags::INLINE.0);
    let too_many = signaled(9, write_op(dst.addr(), dst.key()), &three);

    for (bad, kind) in [(inline, SqError::InlineNotEnabled), (too_many, SqError::TooManySges)] {
        let want = Err(PostError { bad_wr: 1, kind: PostErrorKind::Sq(kind) });
        let single = sa.qp.post_send(&[ok, bad]);
        let retarget = |w| SendWr { opcode: write_op(dst2.addr(), dst2.key()), ..w };
        let multi = shared.post_send(&[retarget(ok), retarget(bad)]);
        assert_eq!(single, want);
        assert_eq!(multi, want);
        // The WR before the bad one was posted on both and completes once.
        let wc = sa.poll(1);
        assert_eq!(wc.len(), 1, "{wc:?}");
        assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::Success));
        let mut got = Vec::new();
        let mut buf = [empty_wc(); 4];
        for _ in 0..3 {
            let n = shared_cq.poll_shared([&shared, &shared], &mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            (got[0].wr_id, got[0].status, got[0].qp_num),
            (7, WcStatus::Success, shared.qp_num())
        );
    }

    // A REG_MR WR naming a deregistered fast-register MR (issue #12): the
    // shared post refuses it as `Qp::post_send` does, the WR before it
    // posted, nothing after.
    let mut dead = da.alloc_mr(&sa.pd, 2).expect("alloc_mr");
    // SAFETY: the device is the in-process model, which reaches host memory
    // only through `FakeHalMemory`; the MR is deregistered unused anyway.
    unsafe { dead.map_pages(&[src.addr() & !0xfff]) }.expect("map_pages");
    let reg = fr_reg(&dead, dead.key(), irdma::wr::Access::LOCAL_WRITE, (0x5000_0000, 4096));
    dead.dereg().expect("dereg");
    let ok3 = SendWr { opcode: write_op(dst2.addr(), dst2.key()), ..ok };
    let bad3 = signaled(10, WrOpcode::RegMr(reg), &[]);
    assert_eq!(
        shared.post_send(&[ok3, bad3, ok3]),
        Err(PostError { bad_wr: 1, kind: PostErrorKind::FastReg })
    );
    let mut got = Vec::new();
    let mut buf = [empty_wc(); 4];
    for _ in 0..3 {
        let n = shared_cq.poll_shared([&shared], &mut buf).unwrap();
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].wr_id, got[0].status), (7, WcStatus::Success));

    // The same through the rw layer's `PostSend` on `&SharedQp`.
    fn via<P: irdma::rw::PostSend>(p: &mut P, wrs: &[SendWr<'_>]) -> Result<(), (usize, P::Error)> {
        p.post_send(wrs)
    }
    let ok2 = SendWr { opcode: write_op(dst2.addr(), dst2.key()), ..ok };
    let bad2 = SendWr { opcode: write_op(dst2.addr(), dst2.key()), ..too_many };
    assert_eq!(
        via(&mut &shared, &[ok2, ok2, bad2]),
        Err((2, PostErrorKind::Sq(SqError::TooManySges)))
    );
    let mut buf = [empty_wc(); 4];
    let mut n = 0;
    for _ in 0..3 {
        n += shared_cq.poll_shared([&shared], &mut buf[n..]).unwrap();
    }
    assert_eq!(n, 2, "{buf:?}");
    assert!(buf[..2].iter().all(|c| (c.wr_id, c.status) == (7, WcStatus::Success)), "{buf:?}");
}

/// A shared QP moved to ERROR completes every outstanding WR exactly once:
/// WRs posted from two threads before complete normally, WRs posted from
/// two threads after (queued without a doorbell) complete flushed, the
/// unsignaled ones included (spec data-path §5.5).
#[test]
fn shared_qp_flush_completes_everything_once() {
    let _g = lock();
    let (_ba, _bb, da, db) = two_devices(Profile::SMALL);
    let cap = qp_cap(16, 4, 1, 1);
    let mut sb = Side::new(&db, B, 64, cap);
    let (pd, mut cq, mut qp) = shared_linked(&da, 64, cap, &mut sb);
    let src = region_on(&da, &pd, 1);
    let dst = sb.region(1, 0);
    let sg = [src.sge(0, 8)];
    let batch = |base: u64| mixed_writes(base, &dst, &sg);
    let ids = |got: &[WorkCompletion]| {
        let mut v: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
        v.sort_unstable();
        v
    };
    post_from_two_threads(&qp, &batch(0));
    let ok = poll_all(&mut cq, &qp);
    assert!(ok.iter().all(|c| c.status == WcStatus::Success), "{ok:?}");
    assert_eq!(ids(&ok), [0, 2, 4, 5]); // 1 and 3 unsignaled

    qp.modify(&QpAttr::new(QpState::Error)).expect("error");
    assert_eq!(qp.state(), QpState::Error);
    post_from_two_threads(&qp, &batch(10));
    let flushed = poll_all(&mut cq, &qp);
    for c in &flushed {
        assert_eq!(
            (c.status, c.opcode, c.qp_num),
            (WcStatus::WrFlushErr, WcOpcode::RdmaWrite, qp.qp_num()),
            "{c:?}"
        );
    }
    assert_eq!(ids(&flushed), [10, 11, 12, 13, 14, 15], "exactly once, unsignaled included");
    assert_eq!(qp.send_queue_stats().used, 0);
    assert!(poll_all(&mut cq, &qp).is_empty());
}

fn post_from_two_threads(qp: &TShared<'_>, wrs: &[SendWr<'_>]) {
    std::thread::scope(|s| {
        for half in wrs.chunks(3) {
            s.spawn(move || post_all(qp, half));
        }
    });
}

fn poll_all<'d>(cq: &mut TCq<'d>, qp: &TShared<'d>) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    let mut buf = [empty_wc(); 4];
    for _ in 0..8 {
        let n = cq.poll_shared([qp], &mut buf).unwrap();
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// Three threads keep posting signaled WRITEs into one shared QP (deferred
/// device thread) while one of them posts a WRITE with a bad rkey: the
/// device raises an access error, the poller hands the AEQ to the driver
/// (MODIFY_QP ERROR + FLUSH_WQES) and keeps polling while the posters go on
/// (their later posts are queued in ERROR). Every WR completes exactly
/// once; per thread the statuses run Success… then (the bad WR's
/// `RemAccessErr`) then `WrFlushErr`…; successful WRITEs landed and flushed
/// ones did not.
#[test]
fn threads_post_through_an_error_exactly_once() {
    const T: usize = 3;
    const N: usize = 200;
    const BAD: (usize, usize) = (1, 60);
    const LEN: usize = 32;
    let _g = lock();
    let (_bar_a, _bar_b, _thread, da, db) = threaded_devices(Profile::SMALL);
    let cap = qp_cap(32, 4, 1, 1);
    let mut sb = Side::new(&db, B, 16, cap);
    let (pd, mut cq, qp) = shared_linked(&da, 128, cap, &mut sb);
    let src = region_on(&da, &pd, (T * N * LEN).div_ceil(4096));
    let dst = sb.region((T * N * LEN).div_ceil(4096), 0);
    let dst_before = dst.all();
    let chunk = |t: usize, i: usize| (t * N + i) * LEN;

    let mut seen: Vec<Vec<(usize, WcStatus)>> = vec![Vec::new(); T];
    STOP.store(false, Ordering::SeqCst);
    std::thread::scope(|s| {
        for t in 0..T {
            let (qp, src, dst) = (&qp, &src, &dst);
            s.spawn(move || {
                let mut i = 0;
                while i < N {
                    let n = (1 + (i + t) % 4).min(N - i);
                    let sgs: Vec<[Sge; 1]> =
                        (i..i + n).map(|k| [src.sge(chunk(t, k), LEN)]).collect();
                    let wrs: Vec<SendWr<'_>> = sgs
                        .iter()
                        .enumerate()
                        .map(|(j, sg)| {
                            let k = i + j;
                            let key = if (t, k) == BAD { dst.key() ^ 0x80 } else { dst.key() };
                            let to = dst.addr() + chunk(t, k) as u64;
                            signaled(wr_id(t, k), write_op(to, key), sg)
                        })
                        .collect();
                    post_all(qp, &wrs);
                    i += n;
                }
            });
        }
        let mut ev = [NO_EVENT; 8];
        let mut got = 0;
        let mut wc = [empty_wc(); 16];
        let since = std::time::Instant::now();
        let mut moved = false;
        let _stop = StopGuard;
        while got < T * N {
            check_stop();
            let e = da.poll_async_events(&mut ev);
            moved |= ev[..e].iter().any(|e| e.id == qp.qp_num() && e.moved_to_error);
            let n = cq.poll_shared([&qp], &mut wc).unwrap();
            if n == 0 {
                assert!(since.elapsed() < WAIT, "missing completions: {got} of {}", T * N);
                std::thread::yield_now();
            }
            for c in &wc[..n] {
                assert_eq!((c.qp_num, c.opcode), (qp.qp_num(), WcOpcode::RdmaWrite), "{c:?}");
                let (t, i) = ((c.wr_id >> 32) as usize, c.wr_id as u32 as usize);
                assert!(t < T && i < N, "{c:?}");
                seen[t].push((i, c.status));
                got += 1;
            }
        }
        assert!(moved, "the access error moved the QP to ERROR");
    });
    let mut extra = [empty_wc(); 4];
    assert_eq!(cq.poll_shared([&qp], &mut extra).unwrap(), 0, "extra: {extra:?}");
    assert_eq!(qp.state(), QpState::Error);
    assert_eq!(qp.send_queue_stats().used, 0);

    let mut want_dst = dst_before;
    let src_all = src.all();
    for (t, s) in seen.iter().enumerate() {
        let ids: Vec<usize> = s.iter().map(|(i, _)| *i).collect();
        assert_eq!(ids, (0..N).collect::<Vec<_>>(), "thread {t}: each WR once, in order");
        let ok = s.iter().take_while(|(_, st)| *st == WcStatus::Success).count();
        eprintln!("thread {t}: {ok} of {N} succeeded before the error");
        let mut rest = &s[ok..];
        if t == BAD.0 {
            assert_eq!(rest.first(), Some(&(BAD.1, WcStatus::RemAccessErr)), "thread {t}");
            rest = &rest[1..];
        }
        assert!(
            rest.iter().all(|(_, st)| *st == WcStatus::WrFlushErr),
            "thread {t}: after the error only flushes: {rest:?}"
        );
        for i in 0..ok {
            let o = chunk(t, i);
            want_dst[o..o + LEN].copy_from_slice(&src_all[o..o + LEN]);
        }
    }
    same(&dst.all(), &want_dst, "successful WRITEs landed, nothing else");
}

/// `create_shared_qp_inline`: inline WRITEs land (the payload is copied
/// from the CPU address at post time), and an inline payload above
/// `max_inline_data` is refused as on a `Qp` with `enable_inline`.
#[test]
fn shared_qp_inline() {
    let _g = lock();
    let (_ba, _bb, da, db) = two_devices(Profile::SMALL);
    let cap = QpCap { max_inline_data: 32, ..qp_cap(16, 4, 2, 1) };
    let (mut sa, sb) = linked(&da, &db, 64, cap);
    // SAFETY: every inline SGE below points into a live host buffer (the
    // test HAL's bus addresses are CPU addresses).
    unsafe { sa.qp.enable_inline() };
    let mut attr = QpInitAttr { send_cq: &sa.cq, recv_cq: &sa.cq, cap };
    // SAFETY: as above.
    let mut shared = unsafe { da.create_shared_qp_inline(&sa.pd, &mut attr) }.expect("create");
    let mut sb2 = Side::new(&db, B, 64, cap);
    connect_shared(&mut shared, A, B, sb2.qp.qp_num());
    connect(&mut sb2.qp, B, A, shared.qp_num()).expect("connect");
    assert_eq!(shared.cap().max_inline_data, 32);

    let src = sa.region(1, 9);
    let dst2 = sb2.region(1, 0);
    let before = dst2.all();
    let inline = SendFlags(SendFlags::SIGNALED.0 | SendFlags::INLINE.0);
    let sg_ok = [src.sge(0, 20), src.sge(100, 12)];
    let sg_long = [src.sge(0, 20), src.sge(100, 13)];
    let wr = |id, sg| SendWr {
        wr_id: id,
        opcode: write_op(dst2.addr() + 64, dst2.key()),
        flags: inline,
        sg_list: sg,
    };
    let want = Err(PostError { bad_wr: 1, kind: PostErrorKind::Sq(SqError::InlineTooLong) });
    assert_eq!(shared.post_send(&[wr(1, &sg_ok), wr(2, &sg_long)]), want);
    let on_qp = SendWr { opcode: write_op(sb.region(1, 0).addr(), 0), ..wr(3, &sg_long) };
    assert_eq!(sa.qp.post_send(&[on_qp]).map_err(|e| e.kind), want.map_err(|e| e.kind));

    let mut buf = [empty_wc(); 4];
    let mut n = 0;
    for _ in 0..3 {
        n += sa.cq.poll_shared([&shared], &mut buf[n..]).unwrap();
    }
    assert_eq!(n, 1, "{buf:?}");
    assert_eq!((buf[0].wr_id, buf[0].status), (1, WcStatus::Success), "{buf:?}");
    let mut want_dst = before;
    want_dst[64..84].copy_from_slice(&src.bytes(0, 20));
    want_dst[84..96].copy_from_slice(&src.bytes(100, 12));
    same(&dst2.all(), &want_dst, "inline payload");
}

/// A shared QP's extra host memory (tracking array, queue object) is freed
/// with it, destroyed explicitly or by drop.
#[test]
fn shared_qp_frees_its_memory() {
    leak_checked(|| {
        let (_ba, _bb, da, _db) = two_devices(Profile::SMALL);
        let pd = da.alloc_pd().expect("pd");
        let cq = da.create_cq(16).expect("cq");
        let with_dev = FakeHal::live_pages();
        let mut a = shared_qp(&da, &pd, &cq, cap(8));
        let one = FakeHal::live_pages() - with_dev;
        let single = create_qp(&da, &pd, &cq, 8);
        let plain = FakeHal::live_pages() - with_dev - one;
        // The shared QP has the MpSq's tracking array and the MpSq object
        // (a page); the plain one its completion half (a page, registered in
        // the device's table for `Cq::poll`) instead of the object.
        let quanta = a.send_queue_stats().size as usize;
        let trk = (quanta * std::mem::size_of::<irdma::uk::MpTrk>()).div_ceil(4096);
        assert_eq!(one + 1, plain + trk + 1, "shared {one} pages, plain {plain}, {quanta} quanta");
        drop(single);
        a.destroy().expect("destroy");
        drop(a);
        assert_eq!(FakeHal::live_pages(), with_dev);
        let b = shared_qp(&da, &pd, &cq, cap(8));
        drop(b);
        assert_eq!(FakeHal::live_pages(), with_dev);
    });
}

/// Issue #12: pollers list the same two shared QPs in opposite orders
/// (`[a, b]` on some CQs, `[b, a, b]` on others) and poll at the same time,
/// while two more threads take each QP's lock briefly (`state`), which
/// widens the window between a poller's first and second lock. When
/// `poll_shared` took the QP locks in the caller's order, two pollers each
/// held one lock and spun on the other for ever. Bounded: a watchdog ends
/// the test binary with a failure instead of hanging.
#[test]
fn poll_shared_in_opposite_orders_does_not_deadlock() {
    use std::sync::Arc;
    const ROUNDS: usize = 20_000;
    let _g = lock();
    let (_ba, _bb, da, _db) = two_devices(Profile::SMALL);
    let pd = da.alloc_pd().expect("pd");
    let mut cqs: Vec<TCq<'_>> = (0..4).map(|_| da.create_cq(16).expect("cq")).collect();
    let a = shared_qp(&da, &pd, &cqs[0], cap(8));
    let b = shared_qp(&da, &pd, &cqs[1], cap(8));
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            while !done.load(Ordering::Acquire) {
                if t0.elapsed() > std::time::Duration::from_secs(60) {
                    eprintln!("poll_shared_in_opposite_orders: deadlock (no progress in 60 s)");
                    std::process::exit(101);
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        })
    };
    let polling = AtomicBool::new(true);
    std::thread::scope(|s| {
        let (a, b, polling) = (&a, &b, &polling);
        let pollers: Vec<_> = cqs
            .iter_mut()
            .enumerate()
            .map(|(k, cq)| {
                s.spawn(move || {
                    let mut wc = [empty_wc(); 4];
                    for _ in 0..ROUNDS {
                        let n = if k % 2 == 0 {
                            cq.poll_shared([a, b], &mut wc).unwrap()
                        } else {
                            cq.poll_shared([b, a, b], &mut wc).unwrap()
                        };
                        assert_eq!(n, 0);
                    }
                })
            })
            .collect();
        for q in [a, b] {
            s.spawn(move || {
                while polling.load(Ordering::Relaxed) {
                    let _ = q.state();
                }
            });
        }
        for p in pollers {
            p.join().expect("poller");
        }
        polling.store(false, Ordering::Relaxed);
    });
    done.store(true, Ordering::Release);
    watchdog.join().expect("watchdog");
}
