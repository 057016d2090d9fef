//! A caller that polls only its CQs (the ib_verbs loop: post, then
//! `ib_poll_cq` until done) sees every WR complete, with its error, in a
//! bounded number of polls — without ever calling
//! `Device::poll_async_events` (issue #19). The device reports a bad lkey or
//! a bad REG_MR only through the AEQ; the CQ poll services it.

mod common;
mod e2e_common;

use e2e_common::*;
use irdma::wr::RecvWr;

/// Polls only `side`'s CQ, at most `polls` times, until `want` completions
/// arrived; then checks a few more polls bring nothing.
fn cq_only(side: &mut Side<'_>, want: usize, polls: usize) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    for _ in 0..polls {
        let mut wc = [empty_wc(); 4];
        let k = side.cq.poll(&mut wc);
        out.extend_from_slice(&wc[..k]);
        if out.len() >= want {
            break;
        }
    }
    for _ in 0..3 {
        let mut wc = [empty_wc(); 4];
        let k = side.cq.poll(&mut wc);
        out.extend_from_slice(&wc[..k]);
    }
    out
}

/// Checks every wr_id of `ids` completed exactly once in `got`.
fn exactly_once(got: &[WorkCompletion], ids: &[u64]) {
    let mut seen: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
    seen.sort_unstable();
    let mut want = ids.to_vec();
    want.sort_unstable();
    assert_eq!(seen, want, "every WR exactly once: {got:?}");
}

fn with_pair(f: impl FnOnce(&mut Side<'_>, &mut Side<'_>)) {
    with_linked(64, cap(16), |_, _, a, b| f(a, b));
}

#[test]
fn bad_lkey_write_completes_with_its_error_in_a_cq_only_loop() {
    with_pair(|a, b| {
        let src = a.region(1, 3);
        let dst = b.region(1, 0);
        let rbuf = a.region(1, 0);
        let rsge = [rbuf.sge(0, 64)];
        let recvs = [RecvWr { wr_id: 100, sg_list: &rsge }, RecvWr { wr_id: 101, sg_list: &rsge }];
        a.qp.post_recv(&recvs).unwrap();
        let good = [src.sge(0, 64)];
        let bad = [Sge { lkey: src.key() ^ 0x80, ..src.sge(0, 64) }];
        let wrs = [
            signaled(0, write_op(dst.addr(), dst.key()), &good),
            signaled(1, write_op(dst.addr() + 64, dst.key()), &bad),
            signaled(2, write_op(dst.addr() + 128, dst.key()), &good),
            SendWr {
                flags: SendFlags::NONE,
                ..signaled(3, write_op(dst.addr(), dst.key()), &good)
            },
            signaled(4, write_op(dst.addr() + 192, dst.key()), &good),
        ];
        a.qp.post_send(&wrs).unwrap();
        let got = cq_only(a, 7, 20);
        exactly_once(&got, &[0, 1, 2, 3, 4, 100, 101]);
        let st = |id| got.iter().find(|w| w.wr_id == id).map(|w| w.status);
        assert_eq!(st(0), Some(WcStatus::Success), "{got:?}");
        assert_eq!(st(1), Some(WcStatus::LocProtErr), "the bad lkey's own error: {got:?}");
        for id in [2, 3, 4, 100, 101] {
            assert_eq!(st(id), Some(WcStatus::WrFlushErr), "wr {id}: {got:?}");
        }
        assert_eq!(a.qp.state(), QpState::Error);
        // The event is still there for a caller that asks.
        a.assert_error_event();
    });
}

#[test]
fn bad_reg_mr_completes_with_its_error_in_a_cq_only_loop() {
    with_pair(|a, b| {
        let src = a.region(1, 3);
        let dst = b.region(1, 0);
        // A fast-register MR of A's device in another PD: the post admits
        // the REG_MR WR (a live MR of this device, its own mapped PBLEs), the
        // device refuses it (the QP's PD is not the MR's).
        let pd2 = a.dev.alloc_pd().unwrap();
        let fr = a.dev.alloc_mr(&pd2, 4).unwrap();
        // SAFETY: the device is the in-process model, which reaches host
        // memory only through `FakeHalMemory`; the registration fails anyway.
        unsafe { fr.map_pages(&[dst.addr() & !0xfff]) }.unwrap();
        let r = fr_reg(&fr, fr.key(), ALL, (0x7000_0000, 4096));
        let good = [src.sge(0, 64)];
        let wrs = [
            signaled(0, write_op(dst.addr(), dst.key()), &good),
            signaled(1, WrOpcode::RegMr(r), &[]),
            signaled(2, write_op(dst.addr() + 128, dst.key()), &good),
            signaled(3, write_op(dst.addr() + 192, dst.key()), &good),
        ];
        a.qp.post_send(&wrs).unwrap();
        let got = cq_only(a, 4, 20);
        exactly_once(&got, &[0, 1, 2, 3]);
        let st = |id| got.iter().find(|w| w.wr_id == id).map(|w| w.status);
        assert_eq!(st(0), Some(WcStatus::Success), "{got:?}");
        let s1 = st(1).unwrap();
        assert!(
            s1 != WcStatus::Success && s1 != WcStatus::WrFlushErr,
            "REG_MR's own error: {got:?}"
        );
        assert_eq!(st(2), Some(WcStatus::WrFlushErr), "{got:?}");
        assert_eq!(st(3), Some(WcStatus::WrFlushErr), "{got:?}");
        drop(fr);
        drop(pd2);
    });
}

/// The empty poll looks at the AEQ without its lock, at the consumer's
/// position as the consumer last published it (`Device::aeq_may_hold_entry`).
/// That position must follow the consumer around the ring, polarity flip
/// included: with a 16-entry AEQ (8 QPs + 8 CQs), 40 rounds of "loopback
/// QP, bad-lkey WRITE, CQ-only loop until its error arrives, destroy" wrap
/// the AEQ at least twice, and every round's error must still arrive.
#[test]
fn aeq_errors_reach_a_cq_only_loop_after_the_aeq_wraps() {
    leak_checked(|| {
        let bar = ModelBar::standalone(small_fn_config());
        let profile = Profile { qps: 8, cqs: 8, ..Profile::SMALL };
        let dev = probe_as(&bar, A, profile);
        let mut side = Side::new(&dev, A, 16, cap(16));
        let src = side.region(1, 1);
        let dst = side.region(1, 0);
        for round in 0..40u64 {
            let mut qp = {
                let mut attr = QpInitAttr { send_cq: &side.cq, recv_cq: &side.cq, cap: cap(16) };
                dev.create_qp(&side.pd, &mut attr).expect("create_qp")
            };
            let me = qp.qp_num();
            connect(&mut qp, A, A, me).expect("connect");
            let bad = [Sge { lkey: src.key() ^ 0x80, ..src.sge(0, 64) }];
            qp.post_send(&[signaled(round, write_op(dst.addr(), dst.key()), &bad)]).unwrap();
            let mut got = Vec::new();
            for _ in 0..20 {
                let mut wc = [empty_wc(); 4];
                let k = side.cq.poll(&mut wc);
                got.extend_from_slice(&wc[..k]);
                if !got.is_empty() {
                    break;
                }
            }
            let st: Vec<_> = got.iter().map(|w| (w.wr_id, w.status)).collect();
            assert_eq!(st, [(round, WcStatus::LocProtErr)], "round {round}");
            drop(qp);
        }
    });
}
