//! Posting chains (batches, a lying or mapping QP), the Linux-named entry
//! points, bounce buffers through `FakeHal`, sizing against the Linux
//! formulas, and the MR pool's binding and generations (issue #28).

use super::*;

// ------------------------------------------------------------ post

struct Qp {
    posted: Vec<W>,
    fail_at: Option<usize>,
    calls: usize,
}

impl PostSend for Qp {
    type Error = i32;
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), (usize, i32)> {
        self.calls += 1;
        for (i, w) in wrs.iter().enumerate() {
            if Some(self.posted.len()) == self.fail_at {
                return Err((i, -12));
            }
            self.posted.push(own(w));
        }
        Ok(())
    }
}

/// 7 MRs of 256 pages set up and posted through `q` (14 WRs), torn down
/// and set up again: 21 WRs with LOCAL_INVs (more than one batch of 16),
/// ready to post.
fn second_round_of_seven_mrs(
    q: &mut impl PostSend<Error = i32>,
) -> (RwQp, Pool, Vec<SgEntry>, Ctx) {
    let qp = RwQp::new(roce(1), true, 1);
    let mut pool = pool_for(&qp, 8);
    let mut sg = entries(7 * 256, 0x100_0000, 0x1000, 4096);
    let mut ctx = Ctx::new();
    assert_eq!(init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, Direction::ToDevice), Ok(14));
    ctx.post(q, &mut pool, CQE, &[]).unwrap();
    destroy_sg(&mut ctx, &mut pool, &mut sg);
    assert_eq!(init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, Direction::ToDevice), Ok(21));
    (qp, pool, sg, ctx)
}

#[test]
fn post_sends_the_same_chain_as_wrs_in_batches() {
    TestHal::reset(0);
    let mut q = Qp { posted: Vec::new(), fail_at: None, calls: 0 };
    let (qp, mut pool, mut sg, mut ctx) = second_round_of_seven_mrs(&mut q);
    assert_eq!((q.calls, q.posted.len()), (1, 14));
    let extra =
        [SendWr { wr_id: 5, opcode: WrOpcode::Send, flags: SendFlags::SIGNALED, sg_list: &[] }];
    let mut q = Qp { posted: Vec::new(), fail_at: None, calls: 0 };
    ctx.post(&mut q, &mut pool, CQE, &extra).unwrap();
    assert_eq!(q.calls, 2);
    let want = chain_of(&mut ctx, &mut pool, &extra);
    assert_eq!(q.posted, want);
    assert_eq!(q.posted.len(), 22);
    destroy_sg(&mut ctx, &mut pool, &mut sg);
    // A refusal reports the index in the whole chain.
    init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, Direction::ToDevice).unwrap();
    let mut q = Qp { posted: Vec::new(), fail_at: Some(18), calls: 0 };
    let r = ctx.post(&mut q, &mut pool, CQE, &[]);
    assert_eq!(r, Err(RwPostError::Post { bad: 18, err: -12 }));
    destroy_sg(&mut ctx, &mut pool, &mut sg);
    assert_eq!((TestHal::live(), pool.in_use()), (0, 0));
}

/// A QP whose third `post_send` call reports a nonsense bad-WR index.
struct LiarQp {
    calls: usize,
}

impl PostSend for LiarQp {
    type Error = i32;
    fn post_send(&mut self, _: &[SendWr<'_>]) -> Result<(), (usize, i32)> {
        self.calls += 1;
        if self.calls == 3 { Err((usize::MAX, -5)) } else { Ok(()) }
    }
}

#[test]
fn post_with_a_huge_bad_index_from_the_qp_does_not_overflow() {
    // `start + i` overflowed (a debug-build panic) when a caller's
    // `PostSend` returned an index past usize::MAX - 16 for a later batch.
    TestHal::reset(0);
    let mut q = LiarQp { calls: 0 };
    // Second time round: 21 WRs (LOCAL_INVs), two batches; the second
    // batch (start 16) gets the bogus index.
    let (_qp, mut pool, mut sg, mut ctx) = second_round_of_seven_mrs(&mut q);
    let r = ctx.post(&mut q, &mut pool, CQE, &[]);
    assert_eq!(r, Err(RwPostError::Post { bad: usize::MAX, err: -5 }));
    assert_eq!(q.calls, 3);
    destroy_sg(&mut ctx, &mut pool, &mut sg);
    assert_eq!((TestHal::live(), pool.in_use()), (0, 0));
}

/// A QP that records the page lists `post` maps.
struct MapQp {
    maps: Vec<(u32, Vec<u64>)>,
}

impl PostSend for MapQp {
    type Error = i32;
    fn post_send(&mut self, _: &[SendWr<'_>]) -> Result<(), (usize, i32)> {
        Ok(())
    }
    unsafe fn map_mr_pages(&mut self, mr: &FrMr, pages: &[u64]) -> Result<(), RwError> {
        self.maps.push((mr.key >> 8, pages.to_vec()));
        Ok(())
    }
}

#[test]
fn a_returned_mr_forgets_its_pages_so_no_post_maps_them_again() {
    // After `destroy` the caller may free the buffers; the pool kept their
    // page addresses, and `post` on another live context given this pool
    // mapped them into the MR again (a REG_MR over freed memory if the QP
    // admitted it). The put now clears them.
    let qp = RwQp::new(iwarp(), false, 13);
    let (mut p1, mut b) = fresh(&qp, 1, 0);
    let mut p2 = pool_for(&qp, 1);
    let mut sg_b = pages(3);
    init_sg(&mut b, &qp, &mut p2, &mut sg_b, 0, Direction::FromDevice).unwrap();
    assert_eq!(p2.pages(0).len(), 3);
    destroy_sg(&mut b, &mut p2, &mut sg_b);
    assert!(p2.pages(0).is_empty(), "pages of a destroyed context are forgotten");
    // A live context of pool 1, posted (wrongly) with pool 2: refused
    // (issue #28), so nothing at all is mapped, least of all the destroyed
    // context's pages.
    let mut a = Ctx::new();
    let mut sg_a = pages(2);
    init_sg(&mut a, &qp, &mut p1, &mut sg_a, 0, Direction::FromDevice).unwrap();
    let mut q = MapQp { maps: Vec::new() };
    assert_eq!(a.post(&mut q, &mut p2, CQE, &[]), Err(RwPostError::Rw(RwError::WrongPool)));
    assert!(q.maps.is_empty(), "mapped through the wrong pool: {:?}", q.maps);
    // The right pool maps the context's own pages.
    let mut q = MapQp { maps: Vec::new() };
    a.post(&mut q, &mut p1, CQE, &[]).unwrap();
    assert_eq!(q.maps[0].1.len(), 2);
    destroy_sg(&mut a, &mut p1, &mut sg_a);
    assert_eq!((TestHal::live(), p1.in_use(), p2.in_use()), (0, 0, 0));
}

#[test]
fn linux_named_entry_points_round_trip() {
    TestHal::reset(0);
    let qp = RwQp::new(iwarp(), false, 13);
    let mut pool = Pool::new();
    let mrs: Vec<FrMr> = (0..2)
        .map(|i| FrMr { key: (0x100 + i) << 8, max_pages: 256, first_pble_index: 0, pbl_level: 1 })
        .collect();
    assert_eq!(rdma_rw_init_mrs(&mut pool, &qp, 2, &mrs), Ok(2));
    let mut ctx = Ctx::new();
    let mut sg = pages(3);
    // SAFETY: TestHal never touches the buffers.
    let n = unsafe {
        rdma_rw_ctx_init::<TestHal, 64, 16, 8, 256>(
            &mut ctx,
            &qp,
            &mut pool,
            &mut sg,
            0,
            RA,
            RKEY,
            Direction::FromDevice,
        )
    };
    assert_eq!(n, Ok(2));
    let mut q = Qp { posted: Vec::new(), fail_at: None, calls: 0 };
    rdma_rw_ctx_post(&mut ctx, &mut q, &mut pool, CQE, &[]).unwrap();
    let mut out =
        [SendWr { wr_id: 0, opcode: WrOpcode::Send, flags: SendFlags::NONE, sg_list: &[] }; 2];
    assert_eq!(rdma_rw_ctx_wrs(&mut ctx, &mut pool, CQE, &[], &mut out), Ok(2));
    assert_eq!(q.posted, out.iter().map(own).collect::<Vec<_>>());
    assert!(matches!(q.posted[1].op, WrOpcode::RdmaReadInv { .. }));
    // SAFETY: as above; no device.
    unsafe { rdma_rw_ctx_destroy::<TestHal, 64, 16, 8, 256>(&mut ctx, &mut pool, &mut sg) }
        .unwrap();
    let bv = bvecs(2, 4096);
    // SAFETY: as above.
    let n = unsafe {
        rdma_rw_ctx_init_bvec::<TestHal, NoIova, 64, 16, 8, 256>(
            &mut ctx,
            &qp,
            &mut pool,
            &mut NoIova,
            &bv,
            2,
            iter_all(&bv),
            RA,
            RKEY,
            Direction::ToDevice,
        )
    };
    assert_eq!((n, ctx.ctx_type()), (Ok(1), Some(CtxType::MultiWr)));
    assert_eq!(TestHal::live(), 2);
    // SAFETY: as above.
    unsafe {
        rdma_rw_ctx_destroy_bvec::<TestHal, NoIova, 64, 16, 8, 256>(
            &mut ctx,
            &mut pool,
            &mut NoIova,
        )
    }
    .unwrap();
    assert_eq!(TestHal::live(), 0);
    let mut keys = Vec::new();
    rdma_rw_cleanup_mrs(&mut pool, |m| keys.push(m.key)).unwrap();
    assert_eq!(keys, vec![0x10001, 0x10100], "MR 0's key was bumped by its use");
}

// ------------------------------------------------------------ FakeHal

#[test]
fn fake_hal_bounce_data_reaches_caller_at_destroy_bvec() {
    use irdma_testkit::FakeHal;
    let qp = RwQp::new(roce(13), false, 13);
    let mut pool = pool_for(&qp, 0);
    let mut a = [0u8; 100];
    let mut b = [0u8; 50];
    let bv = [BioVec { buf: NonNull::from(&mut a[..]) }, BioVec { buf: NonNull::from(&mut b[..]) }];
    let mut ctx = Ctx::new();
    let it = BvecIter { bi_size: 120, bi_idx: 0, bi_bvec_done: 30 };
    // SAFETY: `a` and `b` outlive the context's use; destroyed below.
    let n = unsafe {
        ctx.init_bvec::<FakeHal, NoIova, 8, 256>(
            &qp,
            &mut pool,
            &mut NoIova,
            &bv,
            2,
            it,
            RA,
            RKEY,
            Direction::FromDevice,
        )
    };
    assert_eq!(n, Ok(1));
    let c = chain_of(&mut ctx, &mut pool, &[]);
    let sges = c[0].sges.clone();
    assert_eq!(sges.iter().map(|s| s.length).collect::<Vec<_>>(), vec![70, 50]);
    for (k, s) in sges.iter().enumerate() {
        assert!(FakeHal::contains(s.addr, s.length as usize));
        // The "device" writes the bounce buffers.
        // SAFETY: FakeHal bounce buffers of at least `length` bytes.
        unsafe { core::ptr::write_bytes(s.addr as *mut u8, 0xa0 + k as u8, s.length as usize) };
    }
    // SAFETY: the transfer is over.
    unsafe { ctx.destroy_bvec::<FakeHal, NoIova, 8, 256>(&mut pool, &mut NoIova) }.unwrap();
    assert!(a[..30].iter().all(|&x| x == 0));
    assert!(a[30..].iter().all(|&x| x == 0xa0));
    assert!(b.iter().all(|&x| x == 0xa1));
}

// ------------------------------------------------------------ sizing

#[test]
fn sizing_matches_linux_formulas_and_saturates() {
    let r13 = roce(13);
    let r6 = roce(6);
    let iw = iwarp();
    // rdma_rw_mr_factor: DIV_ROUND_UP(maxpages, mr_pages).
    assert_eq!(rdma_rw_mr_factor(&r13, false, 0), 0);
    assert_eq!(rdma_rw_mr_factor(&r13, false, 12), 1);
    assert_eq!(rdma_rw_mr_factor(&r13, false, 14), 2);
    assert_eq!(rdma_rw_mr_factor(&r6, false, 4096), 683);
    assert_eq!(rdma_rw_mr_factor(&iw, false, 257), 2);
    assert_eq!(rdma_rw_mr_factor(&r13, true, 256), 1);
    // Linux wraps these to 0 (spec §11.5).
    assert_eq!(rdma_rw_mr_factor(&r13, false, u32::MAX), 330_382_100);
    assert_eq!(rdma_rw_mr_factor(&iw, false, u32::MAX), 16_777_216);
    let mut zero = r13;
    zero.max_sge_rd = 0;
    assert_eq!(rdma_rw_mr_factor(&zero, false, 5), u32::MAX);
    // rdma_rw_max_send_wr: factor 1 or 3, saturating, not clamped.
    assert_eq!(rdma_rw_max_send_wr(&r13, false, 128, false), 128);
    assert_eq!(rdma_rw_max_send_wr(&r13, false, 128, true), 384);
    assert_eq!(rdma_rw_max_send_wr(&iw, false, 128, false), 384);
    assert_eq!(rdma_rw_max_send_wr(&r13, true, 128, false), 384);
    assert_eq!(rdma_rw_max_send_wr(&iw, false, 0x5555_5556, false), u32::MAX);
    assert_eq!(rdma_rw_max_send_wr(&r13, false, 10_000, false), 10_000, "no clamp");
    // rdma_rw_init_qp: (device, max_send_wr, max_rdma_ctxs) → max_send_wr;
    // max_rdma_ctxs is left as given.
    for (dev, wr, ctxs, want) in [
        (&r13, 128, 64, 192),
        (&iw, 1000, 1100, 4063), // clamped to max_qp_wr
        // Linux wraps these to 256 / 18 (spec §11.6).
        (&r13, 4_294_967_040, 512, 4063),
        (&iw, 16, 0x5555_5556, 4063),
        (&iw, 128, 0, 128),
    ] {
        let mut cap = RwQpCap { max_send_wr: wr, max_rdma_ctxs: ctxs };
        rdma_rw_init_qp(dev, false, &mut cap, false).unwrap();
        assert_eq!(cap, RwQpCap { max_send_wr: want, max_rdma_ctxs: ctxs }, "{wr}/{ctxs}");
    }
    // Integrity QPs are refused on E810 and the caps stay untouched.
    let mut cap = RwQpCap { max_send_wr: 128, max_rdma_ctxs: 64 };
    assert_eq!(rdma_rw_init_qp(&r13, false, &mut cap, true), Err(RwError::IntegrityUnsupported));
    assert_eq!(cap.max_send_wr, 128);
    // Signature contexts can only fail on E810.
    let qp = RwQp::new(r13, false, 13);
    let mut ctx = Ctx::new();
    assert_eq!(ctx.signature_init(&qp, 2, 0), Err(RwError::PoolEmpty));
    assert_eq!(ctx.signature_init(&qp, 257, 0), Err(RwError::InvalidArgument));
}

#[test]
fn pool_init_and_cleanup() {
    let qp_r = RwQp::new(roce(13), false, 13);
    let qp_i = RwQp::new(iwarp(), false, 13);
    let mr =
        |i: u32| FrMr { key: (0x100 + i) << 8, max_pages: 256, first_pble_index: 0, pbl_level: 1 };
    let mrs = [mr(0), mr(1), mr(2), mr(3)];
    let mut p = Pool::new();
    assert_eq!(p.init(&qp_r.dev, false, 4, &mrs), Ok(0), "RoCE without force_mr: no MRs");
    assert_eq!(p.init(&qp_i.dev, false, 9, &mrs), Err(RwError::NoCapacity));
    // The same MR twice (same STag index, any key byte) would let two
    // contexts map one MR at once: refused, nothing taken.
    let dup = [mr(0), mr(1), FrMr { key: mr(0).key | 0x17, ..mr(2) }, mr(3)];
    assert_eq!(p.init(&qp_i.dev, false, 4, &dup), Err(RwError::InvalidArgument));
    assert_eq!(p.len(), 0);
    // Only the MRs taken count: a duplicate past `max_rdma_ctxs` is unused.
    let mut p2 = Pool::new();
    let tail_dup = [mr(0), mr(1), mr(0)];
    assert_eq!(p2.init(&qp_i.dev, false, 2, &tail_dup), Ok(2));
    assert_eq!(p.init(&qp_i.dev, false, 4, &mrs), Ok(4));
    assert_eq!(p.init(&qp_i.dev, false, 4, &mrs), Err(RwError::Busy));
    let (taken, g) = p.get().unwrap();
    assert_eq!(p.in_use(), 1);
    assert_eq!(p.cleanup(|_| {}), Err(RwError::Busy));
    assert_eq!(p.put(taken, g), Ok(()));
    // A double or foreign put is refused and changes nothing.
    assert_eq!(p.put(taken, g), Err(RwError::StaleMr));
    assert_eq!(p.put(7, 1), Err(RwError::StaleMr));
    assert_eq!(p.in_use(), 0);
    assert_eq!(p.get(), Some((taken, g + 1)), "LIFO, next generation");
    p.put(taken, g + 1).unwrap();
    let mut n = 0;
    p.cleanup(|_| n += 1).unwrap();
    assert_eq!((n, p.len()), (4, 0));
}

// ------------------------------------------------- pool binding (issue #28)

#[test]
fn mr_generation_refuses_stale_hand_outs() {
    let qp = RwQp::new(iwarp(), false, 13);
    let mut p = pool_for(&qp, 1);
    let (i1, g1) = p.get().unwrap();
    assert_eq!(p.check(i1, g1), Ok(()));
    p.put(i1, g1).unwrap();
    // Returned twice (a double destroy): refused.
    assert_eq!(p.put(i1, g1), Err(RwError::StaleMr));
    assert_eq!(p.check(i1, g1), Err(RwError::StaleMr), "a free MR is no hand-out");
    // Handed out again: the old entry (kept after its destroy) is stale and
    // cannot take the MR from its new holder.
    let (i2, g2) = p.get().unwrap();
    assert_eq!((i2, g2), (i1, g1.wrapping_add(1)));
    assert_eq!(p.check(i1, g1), Err(RwError::StaleMr));
    assert_eq!(p.put(i1, g1), Err(RwError::StaleMr));
    assert_eq!(p.in_use(), 1, "the stale put freed the new holder's MR");
    assert_eq!(p.get(), None);
    p.put(i2, g2).unwrap();
    assert_eq!(p.in_use(), 0);
}

#[test]
fn context_with_a_stale_mr_entry_is_refused_everywhere() {
    // The MR goes back and out again behind the context's back (only the
    // pool's own API can do that): every use of the context's entry is
    // refused and nothing of the new hand-out is touched.
    let qp = RwQp::new(iwarp(), false, 13);
    let (mut pool, mut ctx) = fresh(&qp, 1, 0);
    let mut sg = pages(2);
    init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, Direction::FromDevice).unwrap();
    let (idx, g) = (0, 1);
    assert_eq!(pool.check(idx, g), Ok(()));
    pool.put(idx, g).unwrap();
    let (idx2, g2) = pool.get().unwrap();
    assert_eq!((idx2, g2), (idx, 2));
    let key = pool.mr(idx).unwrap().key;
    let mut out =
        [SendWr { wr_id: 0, opcode: WrOpcode::Send, flags: SendFlags::NONE, sg_list: &[] }; 4];
    assert_eq!(ctx.wrs(&mut pool, CQE, &[], &mut out), Err(RwError::StaleMr));
    let mut q = MapQp { maps: Vec::new() };
    assert_eq!(ctx.post(&mut q, &mut pool, CQE, &[]), Err(RwPostError::Rw(RwError::StaleMr)));
    assert!(q.maps.is_empty());
    assert_eq!(pool.mr(idx).unwrap().key, key, "a stale entry moved the key");
    // SAFETY: TestHal; no device.
    let r = unsafe { ctx.destroy::<TestHal, 8, 256>(&mut pool, &mut sg) };
    assert_eq!(r, Err(RwError::StaleMr));
    assert_eq!((pool.in_use(), TestHal::live()), (1, 2), "released on a refused destroy");
    assert_eq!(ctx.ctx_type(), Some(CtxType::Mr));
}

#[test]
fn double_destroy_of_an_mr_context_leaves_the_next_holder_alone() {
    TestHal::reset(0);
    let qp = RwQp::new(iwarp(), false, 13);
    let mut pool = pool_for(&qp, 1);
    let (mut c1, mut c2) = (Ctx::new(), Ctx::new());
    let (mut sg1, mut sg2) = (pages(1), pages(1));
    init_sg(&mut c1, &qp, &mut pool, &mut sg1, 0, Direction::FromDevice).unwrap();
    destroy_sg(&mut c1, &mut pool, &mut sg1);
    init_sg(&mut c2, &qp, &mut pool, &mut sg2, 0, Direction::FromDevice).unwrap();
    // SAFETY: TestHal; no device.
    let r = unsafe { c1.destroy::<TestHal, 8, 256>(&mut pool, &mut sg1) };
    assert_eq!(r, Err(RwError::WrongContext));
    assert_eq!((pool.in_use(), TestHal::live()), (1, 1));
    destroy_sg(&mut c2, &mut pool, &mut sg2);
    assert_eq!((pool.in_use(), TestHal::live()), (0, 0));
}

#[test]
fn bvec_mr_context_is_bound_to_its_pool_and_the_binding_moves_with_it() {
    let qp = RwQp::new(iwarp(), false, 13);
    let (mut a, mut ctx) = fresh(&qp, 1, 0);
    let mut b = pool_for(&qp, 1);
    let bv = bvecs(2, 4096);
    let n =
        init_bv(&mut ctx, &qp, &mut a, &mut NoIova, &bv, 2, iter_all(&bv), Direction::FromDevice);
    assert_eq!(ctx.ctx_type(), Some(CtxType::Mr), "{n:?}");
    // SAFETY: TestHal; no device.
    let r = unsafe { ctx.destroy_bvec::<TestHal, NoIova, 8, 256>(&mut b, &mut NoIova) };
    assert_eq!(r, Err(RwError::WrongPool));
    assert_eq!((a.in_use(), b.in_use(), TestHal::live()), (1, 0, 2));
    // A fresh pool put where `a` was (same place, same MRs) is not `a`: the
    // identity belongs to the pool value, not to its address.
    let mut moved = core::mem::replace(&mut a, pool_for(&qp, 1));
    // SAFETY: as above.
    let r = unsafe { ctx.destroy_bvec::<TestHal, NoIova, 8, 256>(&mut a, &mut NoIova) };
    assert_eq!(r, Err(RwError::WrongPool));
    assert_eq!(a.in_use(), 0);
    destroy_bv(&mut ctx, &mut moved, &mut NoIova);
    assert_eq!((moved.in_use(), TestHal::live()), (0, 0));
    // An uninitialised pool is no pool of anyone's.
    init_bv(&mut ctx, &qp, &mut moved, &mut NoIova, &bv, 2, iter_all(&bv), Direction::FromDevice)
        .unwrap();
    let mut none = Pool::new();
    // SAFETY: as above.
    let r = unsafe { ctx.destroy_bvec::<TestHal, NoIova, 8, 256>(&mut none, &mut NoIova) };
    assert_eq!(r, Err(RwError::WrongPool));
    destroy_bv(&mut ctx, &mut moved, &mut NoIova);
    assert_eq!(TestHal::live(), 0);
    // `cleanup` then `init` is a new incarnation with a new identity (a
    // context cannot span it: `cleanup` refuses while one holds an MR).
    let before = moved.id();
    moved.cleanup(|_| {}).unwrap();
    assert_eq!(moved.id(), 0);
    let mrs = [FrMr { key: 0x100 << 8, max_pages: 256, first_pble_index: 0, pbl_level: 1 }];
    moved.init(&qp.dev, false, 1, &mrs).unwrap();
    assert!(moved.id() != 0 && moved.id() != before);
}
