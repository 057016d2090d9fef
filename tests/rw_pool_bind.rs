//! Issue #28 item 3: an R/W context that holds fast-register MRs is bound
//! to the pool it took them from (LNX rw.c:rdma_rw_ctx_destroy returns
//! them to `qp->rdma_mrs` of the QP it is given; here the pool is a
//! separate argument, so the binding is checked).
//!
//! Two pools of one MR each, distinct STag indexes; iWARP READs always use
//! an MR (spec data-path §7.1). A context initialised from pool A and
//! destroyed into pool B used to be accepted: B then freed the MR its own
//! live context still held and handed it out a second time (two live
//! contexts on one lkey), while A never got its MR back.

use std::ptr::NonNull;

use irdma::rw::{
    DeviceAttrs, Direction, FrMr, MrPool, PostSend, RwCtx, RwError, RwPostError, RwQp, SgEntry,
};
use irdma::wr::{SendFlags, SendWr, WrOpcode};
use irdma_testkit::IdentityHal;

type Pool = MrPool<1, 4>;
type Ctx = RwCtx<4, 4>;

fn fake(addr: u64, len: usize) -> NonNull<[u8]> {
    NonNull::slice_from_raw_parts(NonNull::new(addr as *mut u8).unwrap(), len)
}

fn pool(stag_idx: u32) -> Pool {
    let qp = rwqp();
    let mut p = Pool::new();
    let mr = FrMr { key: stag_idx << 8, max_pages: 4, first_pble_index: stag_idx, pbl_level: 1 };
    assert_eq!(p.init(&qp.dev, qp.force_mr, 1, &[mr]), Ok(1));
    p
}

fn rwqp() -> RwQp {
    RwQp::new(DeviceAttrs::e810_iwarp(13, 4063, 0x100), false, 13)
}

/// A READ of one page at `addr` (no memory behind it: `IdentityHal` never
/// dereferences it).
fn init(ctx: &mut Ctx, pool: &mut Pool, sg: &mut [SgEntry]) -> Result<usize, RwError> {
    // SAFETY: IdentityHal never touches the buffers; nothing is posted to a
    // device.
    unsafe {
        ctx.init::<IdentityHal, 1, 4>(&rwqp(), pool, sg, 0, 0x9000, 0x77, Direction::FromDevice)
    }
}

/// The lkey of the context's data SGE (the MR it registers).
fn lkey(ctx: &mut Ctx, pool: &mut Pool) -> u32 {
    let mut out =
        [SendWr { wr_id: 0, opcode: WrOpcode::Send, flags: SendFlags::NONE, sg_list: &[] }; 4];
    let n = ctx.wrs(pool, 1, &[], &mut out).unwrap();
    let read = out[..n]
        .iter()
        .find(|w| matches!(w.opcode, WrOpcode::RdmaRead { .. } | WrOpcode::RdmaReadInv { .. }))
        .expect("a READ");
    read.sg_list[0].lkey
}

#[test]
fn destroy_into_another_pool_is_refused_and_nothing_is_handed_out_twice() {
    IdentityHal::reset(0);
    let mut a = pool(0x10);
    let mut b = pool(0x20);
    let (mut sg1, mut sg2, mut sg3) = (
        [SgEntry::new(fake(0x10_0000, 4096))],
        [SgEntry::new(fake(0x20_0000, 4096))],
        [SgEntry::new(fake(0x30_0000, 4096))],
    );
    let (mut c1, mut c2, mut c3) = (Ctx::new(), Ctx::new(), Ctx::new());
    init(&mut c1, &mut a, &mut sg1).unwrap();
    init(&mut c2, &mut b, &mut sg2).unwrap();
    assert_eq!((a.in_use(), b.in_use()), (1, 1));
    let k2 = lkey(&mut c2, &mut b);
    assert_eq!(k2 >> 8, 0x20);

    // The mistake: c1 (pool A) destroyed into pool B.
    // SAFETY: IdentityHal; nothing was posted.
    let r = unsafe { c1.destroy::<IdentityHal, 1, 4>(&mut b, &mut sg1) };
    assert_eq!(r, Err(RwError::WrongPool), "destroy into the wrong pool was accepted");
    // B still counts c2's MR as taken; nothing of c1 was released.
    assert_eq!((a.in_use(), b.in_use()), (1, 1), "a pool freed an MR it did not get back");
    assert_eq!(IdentityHal::live(), 2, "c1's buffer was unmapped by the refused destroy");

    // B's only MR is c2's: a third context must not get it (on main it got
    // it: two live contexts registering one lkey).
    let r3 = init(&mut c3, &mut b, &mut sg3);
    assert_eq!(r3.err(), Some(RwError::PoolEmpty));
    if r3.is_ok() {
        let k3 = lkey(&mut c3, &mut b);
        panic!("pool B handed out its busy MR again: c2 lkey {k2:#x}, c3 lkey {k3:#x}");
    }

    // The right pool takes c1 back; nothing leaks.
    // SAFETY: as above.
    unsafe { c1.destroy::<IdentityHal, 1, 4>(&mut a, &mut sg1) }.unwrap();
    // SAFETY: as above.
    unsafe { c2.destroy::<IdentityHal, 1, 4>(&mut b, &mut sg2) }.unwrap();
    assert_eq!((a.in_use(), b.in_use(), IdentityHal::live()), (0, 0, 0));
    a.cleanup(|_| {}).unwrap();
    b.cleanup(|_| {}).unwrap();
}

/// Records the MRs `post` writes page lists into.
struct MapQp {
    mapped: Vec<u32>,
}

impl PostSend for MapQp {
    type Error = i32;
    fn post_send(&mut self, _: &[SendWr<'_>]) -> Result<(), (usize, i32)> {
        Ok(())
    }
    unsafe fn map_mr_pages(&mut self, mr: &FrMr, _: &[u64]) -> Result<(), RwError> {
        self.mapped.push(mr.key >> 8);
        Ok(())
    }
}

#[test]
fn post_and_wrs_with_another_pool_are_refused() {
    // `post` with the wrong pool wrote the context's page list into the
    // other pool's MR, which that pool's own context may have registered
    // and be using; `wrs` bumped the other MR's key.
    IdentityHal::reset(0);
    let mut a = pool(0x10);
    let mut b = pool(0x20);
    let mut sg1 = [SgEntry::new(fake(0x10_0000, 4096))];
    let mut c1 = Ctx::new();
    init(&mut c1, &mut a, &mut sg1).unwrap();
    let key_b = b.mr(0).unwrap().key;
    let mut q = MapQp { mapped: Vec::new() };
    assert_eq!(
        c1.post(&mut q, &mut b, 1, &[]),
        Err(RwPostError::Rw(RwError::WrongPool)),
        "post with the wrong pool was accepted"
    );
    assert!(q.mapped.is_empty(), "pages written into the other pool's MR: {:?}", q.mapped);
    let mut out =
        [SendWr { wr_id: 0, opcode: WrOpcode::Send, flags: SendFlags::NONE, sg_list: &[] }; 4];
    assert_eq!(
        c1.wrs(&mut b, 1, &[], &mut out),
        Err(RwError::WrongPool),
        "wrs with the wrong pool was accepted"
    );
    assert_eq!(b.mr(0).unwrap().key, key_b, "the other pool's MR key moved");
    // The right pool works.
    c1.post(&mut q, &mut a, 1, &[]).unwrap();
    assert_eq!(q.mapped, vec![0x10]);
    // SAFETY: IdentityHal; no device.
    unsafe { c1.destroy::<IdentityHal, 1, 4>(&mut a, &mut sg1) }.unwrap();
    assert_eq!((a.in_use(), IdentityHal::live()), (0, 0));
}
