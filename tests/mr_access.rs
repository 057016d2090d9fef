//! MR access rights and addressing mode through traffic (issue #28, class
//! A): each case registers an MR on B the way an application would — REG_MR
//! (VA-based or zero-based) or a fast-register WR — and then A reads or
//! writes it over the model's wire. The rights a registration grants must
//! let exactly those accesses through (a right, or REMACCENABLED, the
//! driver drops in its encoder fails the access that needs it), and the
//! address an access names must land where the addressing mode says (a
//! zero-based bit the driver gets wrong makes the access land elsewhere or
//! fail). A refused access must end as the device ends it: a NAK, the
//! requester's WR with REM_ACCESS_ERR and IB_REMOTE_ACCESS_ERROR, the
//! responder's AMP_* AE, both QPs in ERROR, the target untouched.

mod common;
mod e2e_common;

use e2e_common::*;
use irdma::aeq::AsyncEventKind;

const WRITE_ONLY: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0);
const READ_ONLY: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_READ.0);

fn events(dev: &Dev) -> Vec<(AsyncEventKind, u16, u32)> {
    let mut ev = [NO_EVENT; 16];
    let n = dev.poll_async_events(&mut ev);
    ev[..n].iter().map(|e| (e.kind, e.ae_code, e.id)).collect()
}

/// A fresh connected pair A → B on two model devices; `f` runs the case.
fn pair(f: impl FnOnce(&mut Side<'_>, &mut Side<'_>)) {
    with_linked(32, cap(16), |_, _, a, b| f(a, b));
}

/// A REG_MR over the pages of `t` (whole pages), `iova` and `zero_based` as
/// given, `len` bytes from the first page's offset `iova % 4096`.
fn reg_on<'d>(
    b: &Side<'d>,
    t: &Buf,
    iova: u64,
    len: u64,
    zero_based: bool,
    access: Access,
) -> TMr<'d> {
    let pages = pages_of(t);
    let d = MrDesc { zero_based, ..va_desc(iova, len, &pages, access) };
    // SAFETY: `t` outlives the MR in every case (declared before it); the
    // model reaches only live `FakeHal` memory.
    unsafe { b.dev.reg_mr(&b.pd, &d) }.expect("reg_mr")
}

/// Posts `op` on A with `sge`, polls A's CQ for its completion.
fn post(a: &mut Side<'_>, op: WrOpcode, sge: &[Sge]) -> WorkCompletion {
    a.qp.post_send(&[signaled(7, op, sge)]).expect("posted");
    a.one()
}

/// A's access was refused by B as the device refuses it: REM_ACCESS_ERR on
/// A's WR, IB_REMOTE_ACCESS_ERROR on A's QP, `resp_code` on B's QP, both
/// QPs in ERROR.
fn refused(
    a: &mut Side<'_>,
    b: &mut Side<'_>,
    wc: WorkCompletion,
    resp_code: u16,
    (t, want): (&Buf, &[u8]),
) {
    assert_eq!((wc.wr_id, wc.status), (7, WcStatus::RemAccessErr), "{wc:?}");
    assert_eq!(
        events(a.dev),
        vec![(AsyncEventKind::QpAccessError, IB_REMOTE_ACCESS_ERROR, a.qp.qp_num())]
    );
    assert_eq!(events(b.dev), vec![(AsyncEventKind::QpAccessError, resp_code, b.qp.qp_num())]);
    assert_eq!(a.qp.state(), QpState::Error);
    assert_eq!(b.qp.state(), QpState::Error);
    b.nothing();
    assert_eq!(read(t, 0, want.len()), want, "the target is unchanged");
}

/// A WRITEs the first `len` bytes of `src` to `at` with `key`: it succeeds,
/// and the target `t` holds them at byte `off` (recorded in `want`) with
/// nothing else changed.
fn write_ok(
    a: &mut Side<'_>,
    (src, len): (&Region<'_>, usize),
    (at, key): (u64, u32),
    (t, want, off): (&Buf, &mut [u8], usize),
) {
    let wc = post(a, write_op(at, key), &[src.sge(0, len)]);
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    want[off..off + len].copy_from_slice(&src.bytes(0, len));
    assert_eq!(
        read(t, 0, want.len()),
        want,
        "the WRITE landed at byte {off}, nothing else changed"
    );
}

/// A READs `want.len()` bytes at `at` with `key` into `sink`: it succeeds
/// and returns `want`.
fn read_ok(a: &mut Side<'_>, sink: &Region<'_>, (at, key): (u64, u32), want: &[u8]) {
    let wc = post(a, read_op(at, key), &[sink.sge(0, want.len())]);
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!(sink.bytes(0, want.len()), want);
}

/// An MR with remote write only: A's WRITE lands, A's READ is refused
/// (rights). Fails if the driver drops the remote-write right or
/// REMACCENABLED from REG_MR.
#[test]
fn reg_mr_remote_write_only_takes_writes_and_refuses_reads() {
    pair(|a, b| {
        let t = buf(2);
        let mut want = fill(&t, 0x11);
        let mr = reg_on(b, &t, t.paddr(), 8192, false, WRITE_ONLY);
        let src = a.region(1, 0x5a);
        // at its VA
        write_ok(a, (&src, 300), (t.paddr() + 100, mr.rkey()), (&t, &mut want, 100));
        assert!(events(b.dev).is_empty());

        let sink = a.region(1, 0);
        let before = sink.all();
        let wc = post(a, read_op(t.paddr(), mr.rkey()), &[sink.sge(0, 256)]);
        refused(a, b, wc, AMP_RIGHTS_VIOLATION, (&t, &want));
        assert_eq!(sink.all(), before, "nothing read");
        drop(mr);
    });
}

/// An MR with remote read only: A's READ returns its bytes, A's WRITE is
/// refused (rights) and writes nothing.
#[test]
fn reg_mr_remote_read_only_serves_reads_and_refuses_writes() {
    pair(|a, b| {
        let t = buf(2);
        let want = fill(&t, 0x22);
        let mr = reg_on(b, &t, t.paddr(), 8192, false, READ_ONLY);
        let sink = a.region(1, 0);
        read_ok(a, &sink, (t.paddr() + 4000, mr.rkey()), &want[4000..4500]);
        assert!(events(b.dev).is_empty());

        let src = a.region(1, 0x5a);
        let wc = post(a, write_op(t.paddr(), mr.rkey()), &[src.sge(0, 256)]);
        refused(a, b, wc, AMP_RIGHTS_VIOLATION, (&t, &want));
        drop(mr);
    });
}

/// A zero-based REG_MR whose first byte is 0x100 into its first page:
/// remote address 0x10 is the MR's byte 0x10 (buffer byte 0x110), for a
/// WRITE and a READ; the same byte named by its VA is past the MR's end
/// and refused (bounds). Fails if the driver sends the MR VA-based.
#[test]
fn zero_based_reg_mr_is_addressed_by_offset() {
    pair(|a, b| {
        let t = buf(2);
        let mut want = fill(&t, 0x33);
        let mr = reg_on(b, &t, t.paddr() + 0x100, 6000, true, ALL);
        let src = a.region(1, 0x77);
        // at the first byte + 0x10
        write_ok(a, (&src, 200), (0x10, mr.rkey()), (&t, &mut want, 0x110));

        let sink = a.region(1, 0);
        // crosses into the second page: offset 4000 = buffer byte 0x100 + 4000
        read_ok(a, &sink, (4000, mr.rkey()), &want[0x100 + 4000..0x100 + 5000]);
        // the last byte, then one past it
        read_ok(a, &sink, (5999, mr.rkey()), &want[0x100 + 5999..0x100 + 6000]);
        assert!(events(b.dev).is_empty());

        let wc = post(a, write_op(t.paddr() + 0x110, mr.rkey()), &[src.sge(0, 16)]);
        refused(a, b, wc, AMP_BOUNDS_VIOLATION, (&t, &want));
        drop(mr);
    });
}

/// A fast-registered MR on B (VA-based at an IOVA unrelated to its bus
/// address) with `access`; returns it and its key.
fn fast_reg<'d>(b: &mut Side<'d>, t: &Buf, iova: u64, access: Access) -> (TFr<'d>, u32) {
    let pages = pages_of(t);
    let mut fr = b.dev.alloc_mr(&b.pd, pages.len() as u32).expect("alloc_mr");
    map_pages(&fr, &pages);
    let key = fr.next_key();
    let r = fr_reg(&fr, key, access, (iova, t.len() as u64));
    b.qp.post_send(&[signaled(1, WrOpcode::RegMr(r), &[])]).expect("post REG_MR");
    assert_eq!(b.one().status, WcStatus::Success);
    (fr, key)
}

/// A fast-registered MR at IOVA 0x6000_0000: a WRITE at IOVA + 0x1234
/// lands at byte 0x1234 of its pages, a READ at IOVA + 0x1F00 across the
/// page boundary returns those bytes; the offset 0x1234 alone (zero-based
/// addressing) is below the IOVA and refused. Fails if the driver's
/// FAST_REGISTER WQE says zero-based.
#[test]
fn fast_registered_mr_is_addressed_by_iova() {
    pair(|a, b| {
        let t = buf(2);
        let mut want = fill(&t, 0x44);
        let (fr, key) = fast_reg(b, &t, 0x6000_0000, ALL);
        let src = a.region(1, 0x99);
        write_ok(a, (&src, 300), (0x6000_1234, key), (&t, &mut want, 0x1234));
        let sink = a.region(1, 0);
        read_ok(a, &sink, (0x6000_0F00, key), &want[0xF00..0x1100]);
        assert!(events(b.dev).is_empty());

        let wc = post(a, write_op(0x1234, key), &[src.sge(0, 16)]);
        refused(a, b, wc, AMP_BOUNDS_VIOLATION, (&t, &want));
        drop(fr);
    });
}

/// A fast-registered MR with remote read only: the READ is served, the
/// WRITE refused (rights). Fails if the driver's FAST_REGISTER rights drop
/// remote read, or add remote write.
#[test]
fn fast_registered_rights_gate_remote_access() {
    pair(|a, b| {
        let t = buf(1);
        let want = fill(&t, 0x55);
        let (fr, key) = fast_reg(b, &t, 0x7000_0000, READ_ONLY);
        let sink = a.region(1, 0);
        read_ok(a, &sink, (0x7000_0010, key), &want[0x10..0x50]);
        let src = a.region(1, 0x99);
        let wc = post(a, write_op(0x7000_0000, key), &[src.sge(0, 64)]);
        refused(a, b, wc, AMP_RIGHTS_VIOLATION, (&t, &want));
        drop(fr);
    });
}

/// A READ whose local sink is an MR without local write fails on the
/// requester before anything is asked of the peer: LOC_PROT_ERR, the
/// requester's AMP_RIGHTS_VIOLATION, nothing on the responder.
#[test]
fn read_into_an_mr_without_local_write_is_a_local_protection_error() {
    pair(|a, b| {
        let t = buf(1);
        let _ = fill(&t, 0x66);
        let mr = reg_on(b, &t, t.paddr(), 4096, false, ALL);
        let s = buf(1);
        let before = fill(&s, 0x01);
        let smr = reg_on(a, &s, s.paddr(), 4096, false, Access::REMOTE_READ);
        let sge = [Sge { addr: s.paddr(), length: 128, lkey: smr.lkey() }];
        let wc = post(a, read_op(t.paddr(), mr.rkey()), &sge);
        assert_eq!((wc.wr_id, wc.status), (7, WcStatus::LocProtErr), "{wc:?}");
        assert_eq!(
            events(a.dev),
            vec![(AsyncEventKind::QpAccessError, AMP_RIGHTS_VIOLATION, a.qp.qp_num())]
        );
        assert!(events(b.dev).is_empty(), "nothing reached the responder");
        assert_eq!(read(&s, 0, 4096), before, "the sink is untouched");
        drop((smr, mr));
    });
}
