//! Protection matrix (issue #19): each way an access can lack the right to
//! touch memory — bad key, stale key after re-registration, wrong PD, out of
//! bounds, missing remote read / write right, invalidated MR, access after
//! deregistration, bad local key — gives the expected error completion (to
//! a caller that polls only its CQ) and asynchronous event, and writes not
//! one byte: the whole memory any device of the process can reach
//! (`FakeHal::snapshot`: both devices' rings and contexts and every test
//! buffer) is compared before and after, and no test buffer — the target
//! MR included — changed. The table is in `docs/protection.md`.

mod common;
mod e2e_common;

use e2e_common::*;
use irdma::aeq::{AsyncEvent, AsyncEventKind};

/// What one attempt produced.
#[derive(Debug)]
struct Outcome {
    wc: WorkCompletion,
    /// Events on the requester's device: (kind, AE code, QP is the requester's).
    req_events: Vec<(AsyncEventKind, u16, bool)>,
    /// Events on the responder's device.
    resp_events: Vec<(AsyncEventKind, u16)>,
    /// Bytes that changed in driver-owned memory (rings, contexts) of
    /// either device: reported, not data.
    driver_bytes_changed: usize,
}

fn events(dev: &Dev) -> Vec<AsyncEvent> {
    let mut ev = [NO_EVENT; 16];
    let n = dev.poll_async_events(&mut ev);
    ev[..n].to_vec()
}

/// Posts `wr` on `a` towards `b`, polls only `a`'s CQ until its completion,
/// and checks over the whole memory that no test buffer (`data`: their
/// bus addresses) changed.
fn attempt(a: &mut Side<'_>, b: &mut Side<'_>, wr: SendWr<'_>, data: &[u64]) -> Outcome {
    // Flush whatever events setting up made.
    let _ = events(a.dev);
    let _ = events(b.dev);
    let before = FakeHal::snapshot();
    a.qp.post_send(&[wr]).expect("posted: the device refuses it, not the driver");
    let wc = a.poll(1);
    assert_eq!(wc.len(), 1, "one completion in a CQ-only loop: {wc:?}");
    a.nothing();
    let mut resp_wc = [empty_wc(); 4];
    let n = b.cq.poll(&mut resp_wc);
    assert_eq!(n, 0, "the responder completes nothing: {:?}", &resp_wc[..n]);
    let after = FakeHal::snapshot();
    let mut driver_bytes_changed = 0;
    assert_eq!(
        before.iter().map(|e| (e.0, e.1.len())).collect::<Vec<_>>(),
        after.iter().map(|e| (e.0, e.1.len())).collect::<Vec<_>>(),
        "no allocation came or went"
    );
    for ((addr, x), (_, y)) in before.iter().zip(after.iter()) {
        let changed = x.iter().zip(y).filter(|(p, q)| p != q).count();
        if data.contains(addr) {
            let first = x.iter().zip(y).position(|(p, q)| p != q);
            assert_eq!(changed, 0, "test buffer at {addr:#x} changed (first at byte {first:?})");
        } else {
            driver_bytes_changed += changed;
        }
    }
    let qpn = a.qp.qp_num();
    Outcome {
        wc: wc[0],
        req_events: events(a.dev).iter().map(|e| (e.kind, e.ae_code, e.id == qpn)).collect(),
        resp_events: events(b.dev).iter().map(|e| (e.kind, e.ae_code)).collect(),
        driver_bytes_changed,
    }
}

/// A fresh connected pair, a source region on A (1 page of data), and
/// `f`, which sets up the case on B and makes the attempt.
fn case(
    name: &str,
    f: impl FnOnce(&mut Side<'_>, &mut Side<'_>, &Region<'_>) -> Outcome,
) -> Outcome {
    let _g = lock();
    let base = FakeHal::live_pages();
    let out;
    {
        let (_ba, _bb, da, db) = two_devices(Profile::SMALL);
        let (mut a, mut b) = linked(&da, &db, 32, cap(16));
        let src = a.region(1, 0x31);
        out = f(&mut a, &mut b, &src);
        assert_eq!(a.qp.state(), QpState::Error, "{name}: the requester's QP is in ERROR");
    }
    assert_eq!(FakeHal::live_pages(), base, "{name}: every page freed");
    eprintln!("{name}: {out:?}");
    out
}

fn write_wr<'s>(sge: &'s [Sge], addr: u64, rkey: u32) -> SendWr<'s> {
    signaled(7, write_op(addr, rkey), sge)
}

fn read_wr<'s>(sge: &'s [Sge], addr: u64, rkey: u32) -> SendWr<'s> {
    signaled(7, read_op(addr, rkey), sge)
}

/// The usual attempt: A WRITEs the first 256 bytes of `src` to `at` with
/// `rkey`; the memory checked is `src` and the target buffer `t`.
fn write_into(
    (a, b, src): (&mut Side<'_>, &mut Side<'_>, &Region<'_>),
    t: &Buf,
    at: u64,
    rkey: u32,
) -> Outcome {
    let sge = [src.sge(0, 256)];
    attempt(a, b, write_wr(&sge, at, rkey), &[src.addr(), t.paddr()])
}

/// An MR of B with every right over the middle page of `t` (three pages).
fn middle_page_mr<'d>(b: &Side<'d>, t: &Buf) -> TMr<'d> {
    let pages = [t.paddr() + 4096];
    let d = MrDesc {
        iova: t.paddr() + 4096,
        length: 4096,
        page_size: PageSize::Size4K,
        pages: &pages,
        zero_based: false,
        access: ALL,
    };
    // SAFETY: `t` outlives the MR in both cases (declared before it); the
    // model only touches live `FakeHal` memory.
    unsafe { b.dev.reg_mr(&b.pd, &d) }.unwrap()
}

/// An MR over `b` on `pd` with `access`.
fn mr_on<'d>(dev: &'d Dev, pd: &TPd<'d>, b: &Buf, access: Access) -> TMr<'d> {
    let pages = pages_of(b);
    let d = MrDesc {
        iova: b.paddr(),
        length: b.len() as u64,
        page_size: PageSize::Size4K,
        pages: &pages,
        zero_based: false,
        access,
    };
    // SAFETY: `b` outlives the MR in every case (declared before it); the
    // model only touches live `FakeHal` memory.
    unsafe { dev.reg_mr(pd, &d) }.expect("reg_mr")
}

/// The outcome every remote case must give: the requester's WR completes
/// with REM_ACCESS_ERR, its device reports IB_REMOTE_ACCESS_ERROR as an
/// access error on the requester's QP, and the responder's device reports
/// `resp_code` as an access error (both QPs moved to ERROR). The snapshot
/// saw the device write (CQE, AEQEs): the memory comparison can fail.
fn remote_refused(o: &Outcome, resp_code: u16) {
    assert_eq!((o.wc.wr_id, o.wc.status), (7, WcStatus::RemAccessErr), "{o:?}");
    assert_eq!(o.req_events, vec![(AsyncEventKind::QpAccessError, IB_REMOTE_ACCESS_ERROR, true)]);
    assert_eq!(o.resp_events, vec![(AsyncEventKind::QpAccessError, resp_code)], "{o:?}");
    assert!(o.driver_bytes_changed > 0, "the snapshot sees the device's writes: {o:?}");
}

#[test]
fn bad_key() {
    let o = case("bad key", |a, b, src| {
        let t = buf(2);
        let mr = mr_on(b.dev, &b.pd, &t, ALL);
        // An STag index no MR of B uses, and the live MR's index with a
        // wrong key byte.
        let forged = (mr.rkey() & !0xff) | ((mr.rkey() + 1) & 0xff);
        let o = write_into((a, b, src), &t, t.paddr(), forged);
        drop(mr);
        o
    });
    remote_refused(&o, AMP_BAD_STAG_KEY);
}

#[test]
fn unknown_stag_index() {
    let o = case("unknown STag index", |a, b, src| {
        let t = buf(2);
        write_into((a, b, src), &t, t.paddr(), 0x7f00_0042)
    });
    remote_refused(&o, AMP_UNALLOCATED_STAG);
}

#[test]
fn stale_key_after_reregistration() {
    let o = case("stale key after re-registration", |a, b, src| {
        let t = buf(2);
        let mut mr = mr_on(b.dev, &b.pd, &t, ALL);
        let old = mr.rkey();
        mr.rereg().expect("rereg");
        assert_ne!(mr.rkey(), old, "re-registration changes the key");
        let o = write_into((a, b, src), &t, t.paddr(), old);
        drop(mr);
        o
    });
    remote_refused(&o, AMP_BAD_STAG_KEY);
}

#[test]
fn wrong_pd() {
    let o = case("wrong PD", |a, b, src| {
        let t = buf(2);
        let other = b.dev.alloc_pd().expect("pd");
        let mr = mr_on(b.dev, &other, &t, ALL);
        let o = write_into((a, b, src), &t, t.paddr(), mr.rkey());
        drop(mr);
        o
    });
    remote_refused(&o, AMP_BAD_PD);
}

#[test]
fn out_of_bounds_after_the_end() {
    let o = case("out of bounds (past the end)", |a, b, src| {
        // The MR covers the middle page of three: the access starts inside
        // and runs 1 byte past its end into the third page.
        let t = buf(3);
        let mr = middle_page_mr(b, &t);
        let at = t.paddr() + 2 * 4096 - 255;
        let o = write_into((a, b, src), &t, at, mr.rkey());
        drop(mr);
        o
    });
    remote_refused(&o, AMP_BOUNDS_VIOLATION);
}

#[test]
fn out_of_bounds_before_the_start() {
    let o = case("out of bounds (before the start)", |a, b, src| {
        let t = buf(3);
        let mr = middle_page_mr(b, &t);
        let at = t.paddr() + 4096 - 1;
        let o = write_into((a, b, src), &t, at, mr.rkey());
        drop(mr);
        o
    });
    remote_refused(&o, AMP_BOUNDS_VIOLATION);
}

#[test]
fn write_without_remote_write_right() {
    let o = case("WRITE without remote write", |a, b, src| {
        let t = buf(2);
        let mr = mr_on(b.dev, &b.pd, &t, Access(Access::LOCAL_WRITE.0 | Access::REMOTE_READ.0));
        let o = write_into((a, b, src), &t, t.paddr(), mr.rkey());
        drop(mr);
        o
    });
    remote_refused(&o, AMP_RIGHTS_VIOLATION);
}

#[test]
fn read_without_remote_read_right() {
    let o = case("READ without remote read", |a, b, src| {
        let t = buf(2);
        let _ = fill(&t, 0x5c);
        let mr = mr_on(b.dev, &b.pd, &t, Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0));
        let sink = a.region(1, 0);
        let sge = [sink.sge(0, 256)];
        let o = attempt(
            a,
            b,
            read_wr(&sge, t.paddr(), mr.rkey()),
            &[src.addr(), sink.addr(), t.paddr()],
        );
        drop(mr);
        o
    });
    remote_refused(&o, AMP_RIGHTS_VIOLATION);
}

#[test]
fn invalidated_fast_register_mr() {
    let o = case("invalidated MR (LOCAL_INV)", |a, b, src| {
        let t = buf(2);
        let pages = pages_of(&t);
        let mut fr = b.dev.alloc_mr(&b.pd, 2).unwrap();
        map_pages(&fr, &pages);
        let key = fr.next_key();
        let r = fr_reg(&fr, key, ALL, (0x6000_0000, 8192));
        b.qp.post_send(&[signaled(1, WrOpcode::RegMr(r), &[])]).unwrap();
        assert_eq!(b.one().status, WcStatus::Success);
        b.qp.post_send(&[signaled(2, WrOpcode::LocalInv { inv_key: key }, &[])]).unwrap();
        assert_eq!(b.one().status, WcStatus::Success);
        let o = write_into((a, b, src), &t, 0x6000_0000, key);
        drop(fr);
        o
    });
    remote_refused(&o, AMP_INVALID_STAG);
}

#[test]
fn access_after_deregistration() {
    let o = case("access after deregistration", |a, b, src| {
        let t = buf(2);
        let mut mr = mr_on(b.dev, &b.pd, &t, ALL);
        let key = mr.rkey();
        mr.dereg().unwrap();
        write_into((a, b, src), &t, t.paddr(), key)
    });
    remote_refused(&o, AMP_UNALLOCATED_STAG);
}

#[test]
fn bad_local_key() {
    let o = case("bad local key", |a, b, src| {
        let t = buf(2);
        let mr = mr_on(b.dev, &b.pd, &t, ALL);
        let sge = [Sge { addr: src.addr(), length: 256, lkey: src.key() ^ 0x1 }];
        let o = attempt(a, b, write_wr(&sge, t.paddr(), mr.rkey()), &[src.addr(), t.paddr()]);
        drop(mr);
        o
    });
    assert_eq!((o.wc.wr_id, o.wc.status), (7, WcStatus::LocProtErr), "{o:?}");
    // The SGE's key is checked locally (AMP_BAD_STAG_KEY on the requester).
    assert_eq!(o.req_events, vec![(AsyncEventKind::QpAccessError, AMP_BAD_STAG_KEY, true)]);
    assert!(o.resp_events.is_empty(), "nothing reached the responder: {o:?}");
    assert!(o.driver_bytes_changed > 0, "{o:?}");
}
