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
    let d = va_desc(t.paddr() + 4096, 4096, &pages, ALL);
    // SAFETY: `t` outlives the MR in both cases (declared before it); the
    // model only touches live `FakeHal` memory.
    unsafe { b.dev.reg_mr(&b.pd, &d) }.unwrap()
}

/// An MR over `b` on `pd` with `access`.
fn mr_on<'d>(dev: &'d Dev, pd: &TPd<'d>, b: &Buf, access: Access) -> TMr<'d> {
    let pages = pages_of(b);
    let d = va_desc(b.paddr(), b.len() as u64, &pages, access);
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

/// What B keeps alive over a remote WRITE case: the MR the WRITE targets (a
/// plain or a fast-register one) and the PD it is on when that is not B's
/// own; dropped in this order, after the attempt, before the target buffer.
#[derive(Default)]
#[expect(dead_code, reason = "held only to be dropped after the attempt")]
struct Held<'d> {
    mr: Option<TMr<'d>>,
    fr: Option<TFr<'d>>,
    pd: Option<TPd<'d>>,
}

impl<'d> Held<'d> {
    fn mr(mr: TMr<'d>) -> Self {
        Held { mr: Some(mr), ..Held::default() }
    }
}

/// A remote WRITE case (one runner for the named tests below): on a fresh
/// pair, B's `setup` over a target buffer of `pages` pages gives what it
/// keeps alive, the address and the key; A WRITEs the first 256 bytes of
/// its source there ([`write_into`]), and the outcome must be
/// [`remote_refused`] with `resp_code` from the responder.
fn refused_write(
    name: &str,
    pages: usize,
    resp_code: u16,
    setup: impl for<'d> FnOnce(&mut Side<'d>, &Buf) -> (Held<'d>, u64, u32),
) {
    let o = case(name, |a, b, src| {
        let t = buf(pages);
        let (held, at, rkey) = setup(b, &t);
        let o = write_into((a, b, src), &t, at, rkey);
        drop(held);
        o
    });
    remote_refused(&o, resp_code);
}

#[test]
fn bad_key() {
    refused_write("bad key", 2, AMP_BAD_STAG_KEY, |b, t| {
        let mr = mr_on(b.dev, &b.pd, t, ALL);
        // An STag index no MR of B uses, and the live MR's index with a
        // wrong key byte.
        let forged = (mr.rkey() & !0xff) | ((mr.rkey() + 1) & 0xff);
        (Held::mr(mr), t.paddr(), forged)
    });
}

#[test]
fn unknown_stag_index() {
    refused_write("unknown STag index", 2, AMP_UNALLOCATED_STAG, |_, t| {
        (Held::default(), t.paddr(), 0x7f00_0042)
    });
}

#[test]
fn stale_key_after_reregistration() {
    refused_write("stale key after re-registration", 2, AMP_BAD_STAG_KEY, |b, t| {
        let mut mr = mr_on(b.dev, &b.pd, t, ALL);
        let old = mr.rkey();
        mr.rereg().expect("rereg");
        assert_ne!(mr.rkey(), old, "re-registration changes the key");
        (Held::mr(mr), t.paddr(), old)
    });
}

#[test]
fn wrong_pd() {
    refused_write("wrong PD", 2, AMP_BAD_PD, |b, t| {
        let other = b.dev.alloc_pd().expect("pd");
        let mr = mr_on(b.dev, &other, t, ALL);
        let key = mr.rkey();
        (Held { pd: Some(other), ..Held::mr(mr) }, t.paddr(), key)
    });
}

#[test]
fn out_of_bounds_after_the_end() {
    // The MR covers the middle page of three: the access starts inside and
    // runs 1 byte past its end into the third page.
    refused_write("out of bounds (past the end)", 3, AMP_BOUNDS_VIOLATION, |b, t| {
        let mr = middle_page_mr(b, t);
        let key = mr.rkey();
        (Held::mr(mr), t.paddr() + 2 * 4096 - 255, key)
    });
}

#[test]
fn out_of_bounds_before_the_start() {
    refused_write("out of bounds (before the start)", 3, AMP_BOUNDS_VIOLATION, |b, t| {
        let mr = middle_page_mr(b, t);
        let key = mr.rkey();
        (Held::mr(mr), t.paddr() + 4096 - 1, key)
    });
}

#[test]
fn write_without_remote_write_right() {
    refused_write("WRITE without remote write", 2, AMP_RIGHTS_VIOLATION, |b, t| {
        let mr = mr_on(b.dev, &b.pd, t, Access(Access::LOCAL_WRITE.0 | Access::REMOTE_READ.0));
        let key = mr.rkey();
        (Held::mr(mr), t.paddr(), key)
    });
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
    refused_write("invalidated MR (LOCAL_INV)", 2, AMP_INVALID_STAG, |b, t| {
        let pages = pages_of(t);
        let mut fr = b.dev.alloc_mr(&b.pd, 2).unwrap();
        map_pages(&fr, &pages);
        let key = fr.next_key();
        let r = fr_reg(&fr, key, ALL, (0x6000_0000, 8192));
        b.qp.post_send(&[signaled(1, WrOpcode::RegMr(r), &[])]).unwrap();
        assert_eq!(b.one().status, WcStatus::Success);
        b.qp.post_send(&[signaled(2, WrOpcode::LocalInv { inv_key: key }, &[])]).unwrap();
        assert_eq!(b.one().status, WcStatus::Success);
        (Held { fr: Some(fr), ..Held::default() }, 0x6000_0000, key)
    });
}

#[test]
fn access_after_deregistration() {
    refused_write("access after deregistration", 2, AMP_UNALLOCATED_STAG, |b, t| {
        let mut mr = mr_on(b.dev, &b.pd, t, ALL);
        let key = mr.rkey();
        mr.dereg().unwrap();
        (Held::mr(mr), t.paddr(), key)
    });
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
