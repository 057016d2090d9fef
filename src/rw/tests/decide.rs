//! The §7.9 decision table, the WRs each path builds (Linux's layout, MR
//! chunking and keys), bvec walking, and release of everything when an
//! init fails.

use super::*;

// ---------------------------------------------------------------- §7.9 table

/// Which devices a row is run on.
#[derive(Clone, Copy, Debug)]
enum Dev {
    Roce,
    Iwarp,
    RoceForce,
}

fn qp_of(d: Dev) -> RwQp {
    match d {
        Dev::Roce => RwQp::new(roce(13), false, 13),
        Dev::Iwarp => RwQp::new(iwarp(), false, 13),
        Dev::RoceForce => RwQp::new(roce(13), true, 13),
    }
}

#[test]
fn decision_table_scatterlist() {
    use CtxType::*;
    use Direction::*;
    // (device, direction, entries, pool MRs, expected)
    type Row = (Dev, Direction, usize, u32, Result<CtxType, RwError>);
    let rows: &[Row] = &[
        // one entry -> SINGLE; several -> MULTI (RoCE, both directions).
        (Dev::Roce, ToDevice, 1, 8, Ok(SingleWr)),
        (Dev::Roce, FromDevice, 1, 8, Ok(SingleWr)),
        (Dev::Roce, ToDevice, 14, 8, Ok(MultiWr)),
        (Dev::Roce, FromDevice, 14, 8, Ok(MultiWr)),
        // READ on iWARP -> MR, pool empty -> -EAGAIN without fallback.
        (Dev::Iwarp, FromDevice, 1, 8, Ok(Mr)),
        (Dev::Iwarp, FromDevice, 14, 8, Ok(Mr)),
        (Dev::Iwarp, FromDevice, 14, 0, Err(RwError::PoolEmpty)),
        // WRITE on iWARP uses no MR.
        (Dev::Iwarp, ToDevice, 1, 8, Ok(SingleWr)),
        (Dev::Iwarp, ToDevice, 14, 8, Ok(MultiWr)),
        // force_mr -> MR both ways, no fallback.
        (Dev::RoceForce, ToDevice, 1, 8, Ok(Mr)),
        (Dev::RoceForce, FromDevice, 14, 8, Ok(Mr)),
        (Dev::RoceForce, ToDevice, 14, 0, Err(RwError::PoolEmpty)),
    ];
    for &(d, dir, n, mrs, want) in rows {
        TestHal::reset(0);
        let qp = qp_of(d);
        let mut pool = pool_for(&qp, mrs);
        let mut sg = pages(n);
        let mut ctx = Ctx::new();
        let r = init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, dir);
        assert_eq!(r.map(|_| ctx.ctx_type().unwrap()), want, "{d:?} {dir:?} n={n} mrs={mrs}");
        if r.is_ok() {
            assert!(TestHal::live() > 0);
            destroy_sg(&mut ctx, &mut pool, &mut sg);
        }
        assert_eq!((TestHal::live(), pool.in_use()), (0, 0), "{d:?} {dir:?} n={n}");
    }
}

#[test]
fn decision_table_nothing_to_transfer() {
    for d in [Dev::Roce, Dev::Iwarp, Dev::RoceForce] {
        TestHal::reset(0);
        let qp = qp_of(d);
        let mut pool = pool_for(&qp, 8);
        let mut ctx = Ctx::new();
        let mut sg = pages(3);
        // Offset equal to the total (spec §11.1) and an empty list.
        for (off, n) in [(3 * 4096, 3), (0, 0)] {
            let r = init_sg(&mut ctx, &qp, &mut pool, &mut sg[..n], off, Direction::FromDevice);
            assert_eq!(r, Err(RwError::NothingToTransfer));
            assert_eq!(RwError::NothingToTransfer.errno(), -5);
            assert_eq!(TestHal::calls(), 0, "checked before mapping");
        }
        // An iterator of no bytes, and no bvecs at all.
        let bv = bvecs(2, 4096);
        let zero = BvecIter { bi_size: 0, ..BvecIter::default() };
        for (nr, it, dir) in
            [(2, zero, Direction::FromDevice), (0, iter_all(&bv), Direction::ToDevice)]
        {
            let r = init_bv(&mut ctx, &qp, &mut pool, &mut NoIova, &bv, nr, it, dir);
            assert_eq!(r, Err(RwError::InvalidArgument), "{d:?} nr_bvec {nr}, {it:?}");
        }
        assert_eq!((TestHal::live(), pool.in_use(), ctx.ctx_type()), (0, 0, None));
    }
}

#[test]
fn decision_table_max_sgl_rd_falls_back_on_sg_only() {
    // A device with max_sgl_rd (the row E810 never reaches, kept for the
    // table): READ with more entries needs MRs; an empty pool falls back to
    // MULTI on the scatterlist path but not on the bvec path.
    let mut dev = roce(13);
    dev.max_sgl_rd = 4;
    let qp = RwQp::new(dev, false, 13);
    for (n, mrs, want) in [(4, 8, CtxType::MultiWr), (5, 8, CtxType::Mr), (5, 0, CtxType::MultiWr)]
    {
        TestHal::reset(0);
        let mut pool = pool_for(&qp, mrs);
        let mut sg = pages(n);
        let mut ctx = Ctx::new();
        init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, Direction::FromDevice).unwrap();
        assert_eq!(ctx.ctx_type(), Some(want), "n={n} mrs={mrs}");
        destroy_sg(&mut ctx, &mut pool, &mut sg);
        assert_eq!(TestHal::live(), 0);
    }
    TestHal::reset(0);
    let mut pool = pool_for(&qp, 0);
    let bv = bvecs(5, 4096);
    let mut ctx = Ctx::new();
    let r = init_bv_all(&mut ctx, &qp, &mut pool, &bv, Direction::FromDevice);
    assert_eq!(r, Err(RwError::PoolEmpty));
    assert_eq!(TestHal::live(), 0);
}

#[test]
fn decision_table_bvec() {
    use CtxType::*;
    use Direction::*;
    // (device, dir, bvecs, iommu available, expected)
    let rows: &[(Dev, Direction, usize, bool, CtxType)] = &[
        (Dev::Roce, ToDevice, 1, true, SingleWr),
        (Dev::Roce, FromDevice, 1, false, SingleWr),
        (Dev::Roce, ToDevice, 14, false, MultiWr),
        (Dev::Roce, FromDevice, 14, true, Iova),
        (Dev::Iwarp, FromDevice, 1, true, Mr),
        (Dev::Iwarp, FromDevice, 14, true, Mr),
        (Dev::Iwarp, ToDevice, 14, false, MultiWr),
        (Dev::Iwarp, ToDevice, 14, true, Iova),
        (Dev::RoceForce, ToDevice, 14, true, Mr),
        (Dev::RoceForce, FromDevice, 1, false, Mr),
    ];
    for &(d, dir, n, iommu, want) in rows {
        TestHal::reset(0);
        let qp = qp_of(d);
        let mut pool = pool_for(&qp, 8);
        let bv = bvecs(n, 4096);
        let mut ctx = Ctx::new();
        let mut io = OkIommu { live: 0 };
        let r = if iommu {
            init_bv(&mut ctx, &qp, &mut pool, &mut io, &bv, n, iter_all(&bv), dir)
        } else {
            init_bv_all(&mut ctx, &qp, &mut pool, &bv, dir)
        };
        assert!(r.is_ok(), "{d:?} {dir:?} n={n}: {r:?}");
        assert_eq!(ctx.ctx_type(), Some(want), "{d:?} {dir:?} n={n} iommu={iommu}");
        assert!(ctx.live_mappings() > 0);
        if iommu {
            destroy_bv(&mut ctx, &mut pool, &mut io);
        } else {
            destroy_bv(&mut ctx, &mut pool, &mut NoIova);
        }
        assert_eq!((TestHal::live(), io.live, pool.in_use()), (0, 0, 0));
        assert_eq!(ctx.live_mappings(), 0);
    }
}

// ------------------------------------------------------------ WR contents

#[test]
fn single_and_multi_wrs_match_linux_layout() {
    let qp = RwQp::new(roce(13), false, 13);
    let (mut pool, mut ctx) = fresh(&qp, 8, 0);
    let mut sg = pages(27);
    assert_eq!(init_sg(&mut ctx, &qp, &mut pool, &mut sg, 100, Direction::FromDevice), Ok(3));
    let c = chain_of(&mut ctx, &mut pool, &[]);
    assert_eq!(c.len(), 3);
    assert_eq!(c[0].sges[0], Sge { addr: 0x10_0000 + 100, length: 4096 - 100, lkey: LKEY });
    assert_eq!(c[0].op, WrOpcode::RdmaRead { remote_addr: RA, rkey: RKEY });
    assert_eq!(
        c[1].op,
        WrOpcode::RdmaRead { remote_addr: RA + 13 * 4096 - 100, rkey: RKEY },
        "remote address advances by the bytes of earlier WRs"
    );
    assert_eq!(c[2].sges.len(), 1);
    assert!(c[..2].iter().all(|w| w.flags == SendFlags::NONE && w.wr_id == 0));
    assert_eq!((c[2].flags, c[2].wr_id), (SendFlags::SIGNALED, CQE));
    destroy_sg(&mut ctx, &mut pool, &mut sg);
    assert_eq!(TestHal::live(), 0);
}

#[test]
fn chain_wr_is_appended_and_nothing_of_ours_signaled() {
    let qp = RwQp::new(roce(13), false, 13);
    let (mut pool, mut ctx, mut sg) = started(&qp, 14, Direction::ToDevice);
    let extra =
        [SendWr { wr_id: 77, opcode: WrOpcode::Send, flags: SendFlags::SIGNALED, sg_list: &[] }];
    let c = chain_of(&mut ctx, &mut pool, &extra);
    assert_eq!(c.len(), 3);
    assert!(c[..2].iter().all(|w| w.flags == SendFlags::NONE && w.wr_id == 0));
    assert_eq!(c[2], own(&extra[0]));
    // A second call without a chain WR signals our last WR (spec §11.8:
    // rebuilt from scratch, no leftovers).
    let c2 = chain_of(&mut ctx, &mut pool, &[]);
    assert_eq!(c2.len(), 2);
    assert_eq!((c2[1].flags, c2[1].wr_id), (SendFlags::SIGNALED, CQE));
    let c3 = chain_of(&mut ctx, &mut pool, &extra);
    assert_eq!(c3, c, "third call equals the first");
    destroy_sg(&mut ctx, &mut pool, &mut sg);
}

#[test]
fn wrs_output_too_small_is_refused() {
    let qp = RwQp::new(roce(13), false, 13);
    let (mut pool, mut ctx, mut sg) = started(&qp, 14, Direction::ToDevice);
    let mut out = [NO_WR; 1];
    assert_eq!(ctx.wrs(&mut pool, CQE, &[], &mut out), Err(RwError::NoCapacity));
    destroy_sg(&mut ctx, &mut pool, &mut sg);
}

#[test]
fn mr_path_iwarp_read_with_inv_invalidates_registered_key() {
    // spec §7.4 + §11.2.
    let qp = RwQp::new(iwarp(), false, 13);
    let (mut pool, mut ctx) = fresh(&qp, 8, 0);
    let mut sg = pages(14);
    assert_eq!(init_sg(&mut ctx, &qp, &mut pool, &mut sg, 100, Direction::FromDevice), Ok(2));
    let c = chain_of(&mut ctx, &mut pool, &[]);
    let WrOpcode::RegMr(reg) = c[0].op else { panic!("REG_MR first: {c:?}") };
    assert_eq!(reg.key, 0x10001, "key byte bumped at wrs");
    assert_eq!(reg.access, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    assert_eq!((reg.iova, reg.length), (0x10_0000 + 100, 14 * 4096 - 100));
    assert_eq!(reg.pbl_level, 1);
    assert_eq!(pool.pages(0).len(), 14);
    assert_eq!(
        c[1].op,
        WrOpcode::RdmaReadInv { remote_addr: RA, rkey: RKEY, inv_key: reg.key },
        "invalidates the key it registered"
    );
    assert_eq!(c[1].sges, vec![Sge { addr: reg.iova, length: reg.length as u32, lkey: reg.key }]);
    destroy_sg(&mut ctx, &mut pool, &mut sg);
    // The MR was invalidated by the read: no LOCAL_INV on reuse.
    init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, Direction::FromDevice).unwrap();
    let c = chain_of(&mut ctx, &mut pool, &[]);
    assert!(matches!(c[0].op, WrOpcode::RegMr(r) if r.key == 0x10002), "{c:?}");
    destroy_sg(&mut ctx, &mut pool, &mut sg);
    assert_eq!((TestHal::live(), pool.in_use()), (0, 0));
}

#[test]
fn mr_reuse_needs_local_inv_and_pool_is_lifo() {
    let qp = RwQp::new(roce(13), true, 13);
    let (mut pool, mut ctx) = fresh(&qp, 8, 0);
    // 300 pages: two MRs (256 + 44).
    let mut sg = entries(300, 0x10_0000, 0x1000, 4096);
    let mut big: RwCtx<4, 4> = RwCtx::new();
    // SAFETY: TestHal never touches the buffers.
    let n = unsafe {
        big.init::<TestHal, 8, 256>(&qp, &mut pool, &mut sg, 0, RA, RKEY, Direction::ToDevice)
    };
    assert_eq!(n, Ok(4));
    let c = chain_of(&mut big, &mut pool, &[]);
    let keys: Vec<u32> = reg_mrs(&c).iter().map(|r| r.key).collect();
    assert_eq!(keys, vec![0x10001, 0x10101]);
    assert_eq!(c[3].op, WrOpcode::RdmaWrite { remote_addr: RA + 256 * 4096, rkey: RKEY });
    // SAFETY: as above.
    unsafe { big.destroy::<TestHal, 8, 256>(&mut pool, &mut sg) }.unwrap();
    // LIFO: MR 1 (returned last) is taken first; both need LOCAL_INV.
    let mut one = pages(1);
    init_sg(&mut ctx, &qp, &mut pool, &mut one, 0, Direction::ToDevice).unwrap();
    let c = chain_of(&mut ctx, &mut pool, &[]);
    assert_eq!(c[0].op, WrOpcode::LocalInv { inv_key: 0x10101 });
    assert!(matches!(c[1].op, WrOpcode::RegMr(r) if r.key == 0x10102));
    assert_eq!(c.len(), 3);
    destroy_sg(&mut ctx, &mut pool, &mut one);
    assert_eq!((TestHal::live(), pool.in_use()), (0, 0));
}

#[test]
fn wrs_twice_bumps_keys_once() {
    // spec §11.8.
    let qp = RwQp::new(roce(13), true, 13);
    let (mut pool, mut ctx, mut sg) = started(&qp, 2, Direction::ToDevice);
    let a = chain_of(&mut ctx, &mut pool, &[]);
    let b = chain_of(&mut ctx, &mut pool, &[]);
    assert_eq!(a, b);
    assert_eq!(pool.mr(0).unwrap().key, 0x10001);
    destroy_sg(&mut ctx, &mut pool, &mut sg);
}

#[test]
fn mr_chunking_counts_pages_not_entries() {
    // spec §11.7: 65 entries of 16 KiB = 260 pages: two MRs, not -EINVAL.
    let qp = RwQp::new(iwarp(), false, 13);
    let (mut pool, mut ctx) = fresh(&qp, 8, 0);
    let mut sg = entries(65, 0x100_0000, 0x8000, 16384);
    assert_eq!(init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, Direction::FromDevice), Ok(4));
    let c = chain_of(&mut ctx, &mut pool, &[]);
    let regs = reg_mrs(&c);
    assert_eq!(regs.len(), 2);
    assert_eq!((regs[0].length, regs[1].length), (64 * 16384, 16384));
    assert_eq!(pool.pages(pool.index_of_key(regs[0].key).unwrap()).len(), 256);
    assert_eq!(pool.pages(pool.index_of_key(regs[1].key).unwrap()).len(), 4);
    destroy_sg(&mut ctx, &mut pool, &mut sg);
    // One entry larger than an MR is split at a page boundary.
    TestHal::reset(0);
    let mut sg = [SgEntry::new(fake(0x100_0800, 300 * 4096))];
    assert_eq!(init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, Direction::FromDevice), Ok(4));
    let c = chain_of(&mut ctx, &mut pool, &[]);
    let l0 = c[1].sges[0].length as u64;
    assert_eq!(l0, 256 * 4096 - 0x800);
    assert_eq!(c[3].sges[0].addr, 0x100_0800 + l0);
    assert_eq!(l0 + c[3].sges[0].length as u64, 300 * 4096);
    destroy_sg(&mut ctx, &mut pool, &mut sg);
}

#[test]
fn mr_coalesces_contiguous_subpage_entries_and_refuses_holes() {
    let qp = RwQp::new(iwarp(), false, 13);
    let (mut pool, mut ctx) = fresh(&qp, 8, 0);
    let mut sg = entries(16, 0x50_0000, 512, 512);
    init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, Direction::FromDevice).unwrap();
    assert_eq!(pool.pages(0), &[0x50_0000, 0x50_1000]);
    destroy_sg(&mut ctx, &mut pool, &mut sg);
    // A hole after an entry ending mid-page cannot be mapped (ib_sg_to_pages).
    let mut sg = [SgEntry::new(fake(0x50_0000, 512)), SgEntry::new(fake(0x60_0000, 4096))];
    let r = init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, Direction::FromDevice);
    assert_eq!(r, Err(RwError::InvalidArgument));
    assert_eq!((TestHal::live(), pool.in_use()), (0, 0));
}

// ------------------------------------------------------------ bvec details

#[test]
fn bvec_walks_by_bi_size_and_never_past_the_array() {
    // spec §11.4.
    let qp = RwQp::new(roce(13), false, 13);
    let (mut pool, mut ctx) = fresh(&qp, 8, 0);
    let bv = bvecs(4, 4096);
    let short = BvecIter { bi_size: 6000, bi_idx: 0, bi_bvec_done: 0 };
    init_bv(&mut ctx, &qp, &mut pool, &mut NoIova, &bv, 4, short, Direction::ToDevice).unwrap();
    let c = chain_of(&mut ctx, &mut pool, &[]);
    assert_eq!(c[0].sges.iter().map(|s| s.length).collect::<Vec<_>>(), vec![4096, 1904]);
    assert_eq!(TestHal::live(), 2, "only the segments the iterator covers are mapped");
    destroy_bv(&mut ctx, &mut pool, &mut NoIova);
    // Mid-array start, more bytes than the array holds: refused, nothing read
    // past the slice (it is a slice: an out-of-range index cannot be read).
    let past = BvecIter { bi_size: 3 * 4096, bi_idx: 2, bi_bvec_done: 100 };
    let r = init_bv(&mut ctx, &qp, &mut pool, &mut NoIova, &bv, 4, past, Direction::ToDevice);
    assert_eq!(r, Err(RwError::InvalidArgument));
    // More segments than nr_bvec claims: refused.
    let r =
        init_bv(&mut ctx, &qp, &mut pool, &mut NoIova, &bv, 1, iter_all(&bv), Direction::ToDevice);
    assert_eq!(r, Err(RwError::InvalidArgument));
    // bi_bvec_done beyond the bvec.
    let bad = BvecIter { bi_size: 10, bi_idx: 0, bi_bvec_done: 5000 };
    let r = init_bv(&mut ctx, &qp, &mut pool, &mut NoIova, &bv, 4, bad, Direction::ToDevice);
    assert_eq!(r, Err(RwError::InvalidArgument));
    assert_eq!(TestHal::live(), 0);
    // Single bvec from the middle.
    let mid = BvecIter { bi_size: 2000, bi_idx: 1, bi_bvec_done: 1000 };
    init_bv(&mut ctx, &qp, &mut pool, &mut NoIova, &bv, 1, mid, Direction::ToDevice).unwrap();
    let c = chain_of(&mut ctx, &mut pool, &[]);
    assert_eq!(c[0].sges, vec![Sge { addr: 0x20_0000 + 1000, length: 2000, lkey: LKEY }]);
    destroy_bv(&mut ctx, &mut pool, &mut NoIova);
    assert_eq!(TestHal::live(), 0);
}

#[test]
fn bvec_map_failure_unmaps_what_was_mapped() {
    let qp = RwQp::new(roce(13), false, 13);
    for fail_at in 1..=14 {
        let (mut pool, mut ctx) = fresh(&qp, 8, fail_at);
        let bv = bvecs(14, 4096);
        let r = init_bv_all(&mut ctx, &qp, &mut pool, &bv, Direction::ToDevice);
        assert_eq!(r, Err(RwError::MapFailed));
        assert_eq!(RwError::MapFailed.errno(), -12);
        assert_eq!((TestHal::live(), ctx.ctx_type()), (0, None), "fail_at {fail_at}");
    }
    // MR bvec path and single path too.
    for (qp, n) in [(RwQp::new(iwarp(), false, 13), 5), (RwQp::new(roce(13), false, 13), 1)] {
        let (mut pool, mut ctx) = fresh(&qp, 8, 1);
        let bv = bvecs(n, 4096);
        let r = init_bv_all(&mut ctx, &qp, &mut pool, &bv, Direction::FromDevice);
        assert_eq!(r, Err(RwError::MapFailed));
        assert_eq!((TestHal::live(), pool.in_use()), (0, 0));
    }
}

#[test]
fn sg_failures_release_everything() {
    let qp = RwQp::new(roce(13), false, 13);
    // Mapping failure at every position.
    for fail_at in 1..=5 {
        let (mut pool, mut ctx) = fresh(&qp, 8, fail_at);
        let mut sg = pages(5);
        let r = init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, Direction::ToDevice);
        assert_eq!(r, Err(RwError::MapFailed));
        assert!(sg.iter().all(|e| e.dma_addr().is_none()));
        assert_eq!(TestHal::live(), 0);
    }
    // Storage too small (Linux: kzalloc failure): -ENOMEM, all unmapped.
    TestHal::reset(0);
    let mut pool = pool_for(&qp, 8);
    let mut tiny: RwCtx<2, 1> = RwCtx::new();
    let mut sg = pages(5);
    // SAFETY: TestHal never touches the buffers.
    let r = unsafe {
        tiny.init::<TestHal, 8, 256>(&qp, &mut pool, &mut sg, 0, RA, RKEY, Direction::ToDevice)
    };
    assert_eq!(r, Err(RwError::NoCapacity));
    assert_eq!(RwError::NoCapacity.errno(), -12);
    assert_eq!(TestHal::live(), 0);
    // MR path out of pool mid-way: the MRs taken are returned.
    let qpi = RwQp::new(iwarp(), false, 13);
    let mut pool = pool_for(&qpi, 1);
    let mut sg = pages(300);
    let mut ctx: RwCtx<4, 4> = RwCtx::new();
    // SAFETY: as above.
    let r = unsafe {
        ctx.init::<TestHal, 8, 256>(&qpi, &mut pool, &mut sg, 0, RA, RKEY, Direction::FromDevice)
    };
    assert_eq!(r, Err(RwError::PoolEmpty));
    assert_eq!((TestHal::live(), pool.in_use()), (0, 0));
}

/// rw.c: rdma_rw_init_iova_wrs_bvec: a failing dma_iova_link (here from
/// offset 8192 on) or a failing dma_iova_sync after every bvec was linked
/// returns its errno and destroys the range with the length linked so far;
/// nothing stays mapped.
#[test]
fn iova_errors_destroy_the_linked_range() {
    // (case, IOMMU, direction, errno, bytes linked)
    let cases = [
        ("link fails", FailingIommu::new(8192, None), Direction::ToDevice, -22, 8192),
        ("sync fails", FailingIommu::new(u64::MAX, Some(-5)), Direction::FromDevice, -5, 4 * 4096),
    ];
    let qp = RwQp::new(roce(13), false, 13);
    for (case, mut io, dir, errno, linked) in cases {
        let (mut pool, mut ctx) = fresh(&qp, 8, 0);
        let bv = bvecs(4, 4096);
        let r = init_bv(&mut ctx, &qp, &mut pool, &mut io, &bv, 4, iter_all(&bv), dir);
        assert_eq!(r, Err(RwError::Iova(errno)), "{case}");
        assert_eq!((io.live, io.linked, io.destroyed_len), (0, linked, linked), "{case}");
        assert_eq!(RwError::Iova(errno).errno(), errno, "{case}");
        assert_eq!((TestHal::live(), pool.in_use()), (0, 0), "{case}");
    }
}

#[test]
fn context_misuse_is_refused() {
    let qp = RwQp::new(roce(13), false, 13);
    let (mut pool, mut ctx) = fresh(&qp, 8, 0);
    let mut sg = pages(2);
    let mut out = [NO_WR; 4];
    assert_eq!(ctx.wrs(&mut pool, CQE, &[], &mut out), Err(RwError::WrongContext));
    init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, Direction::ToDevice).unwrap();
    let mut sg2 = pages(2);
    assert_eq!(
        init_sg(&mut ctx, &qp, &mut pool, &mut sg2, 0, Direction::ToDevice),
        Err(RwError::Busy)
    );
    // SAFETY: TestHal; refused before anything is released.
    let r = unsafe { ctx.destroy_bvec::<TestHal, NoIova, 8, 256>(&mut pool, &mut NoIova) };
    assert_eq!(r, Err(RwError::WrongContext));
    assert_eq!(TestHal::live(), 2);
    destroy_sg(&mut ctx, &mut pool, &mut sg);
    // SAFETY: as above.
    let r = unsafe { ctx.destroy::<TestHal, 8, 256>(&mut pool, &mut sg) };
    assert_eq!(r, Err(RwError::WrongContext));
    assert_eq!(TestHal::live(), 0);
}
