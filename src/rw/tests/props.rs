//! Property tests (multi-WR split, MR chunks, init never panics and always
//! releases, sizing saturates), signature-init error order, iWARP long bvec
//! lists and IOVA sync failure.

use super::*;

// ------------------------------------------------------------ properties

proptest! {
    // Shrinking is capped (issue #19): a failure is reported within about
    // 30 s instead of shrinking for minutes.
    #![proptest_config(ProptestConfig { cases: 200, max_shrink_iters: 2048, max_shrink_time: 30_000, ..ProptestConfig::default() })]

    /// Multi-WR split: lengths add up, remote addresses advance, no WR has
    /// more SGEs than the QP allows, WR count equals the return value.
    #[test]
    fn multi_wr_split(
        lens in proptest::collection::vec(1usize..9000, 2..60),
        max_sge in 1u32..14,
        off_frac in 0usize..100,
        read in any::<bool>(),
    ) {
        TestHal::reset(0);
        let qp = RwQp::new(roce(13), false, max_sge);
        let mut pool = pool_for(&qp, 0);
        let mut addr = 0x10_0000u64;
        let mut sg: Vec<SgEntry> = lens.iter().map(|&l| {
            let e = SgEntry::new(fake(addr, l));
            addr += 0x4000;
            e
        }).collect();
        let total: u64 = lens.iter().map(|&l| l as u64).sum();
        let off = (lens[0] * off_frac / 100) as u32;
        let dir = if read { Direction::FromDevice } else { Direction::ToDevice };
        let mut ctx: RwCtx<64, 64> = RwCtx::new();
        // SAFETY: TestHal never touches the buffers.
        let n = unsafe { ctx.init::<TestHal, 8, 256>(&qp, &mut pool, &mut sg, off, RA, RKEY, dir) }
            .unwrap();
        prop_assert_eq!(n, lens.len().div_ceil(max_sge as usize));
        prop_assert_eq!(ctx.ctx_type(), Some(CtxType::MultiWr));
        let c = chain_of(&mut ctx, &mut pool, &[]);
        prop_assert_eq!(c.len(), n);
        let mut ra = RA;
        let mut sum = 0u64;
        for w in &c {
            prop_assert!(!w.sges.is_empty() && w.sges.len() <= max_sge as usize);
            let (r, k) = match w.op {
                WrOpcode::RdmaWrite { remote_addr, rkey } if !read => (remote_addr, rkey),
                WrOpcode::RdmaRead { remote_addr, rkey } if read => (remote_addr, rkey),
                other => return Err(TestCaseError::fail(std::format!("opcode {other:?}"))),
            };
            prop_assert_eq!((r, k), (ra, RKEY));
            let b: u64 = w.sges.iter().map(|s| s.length as u64).sum();
            ra += b;
            sum += b;
        }
        prop_assert_eq!(sum, total - off as u64);
        // SAFETY: as above.
        unsafe { ctx.destroy::<TestHal, 8, 256>(&mut pool, &mut sg) }.unwrap();
        prop_assert_eq!(TestHal::live(), 0);
    }

    /// MR path: every MR holds at most 256 pages, the chain covers every
    /// byte once in order, and everything is returned at destroy.
    #[test]
    fn mr_chunks_cover_the_transfer(
        npages in proptest::collection::vec(1u64..40, 1..40),
    ) {
        TestHal::reset(0);
        let qp = RwQp::new(iwarp(), false, 13);
        let mut pool = pool_for(&qp, 8);
        let mut addr = 0x100_0000u64;
        let mut sg: Vec<SgEntry> = npages.iter().map(|&p| {
            let e = SgEntry::new(fake(addr, (p * 4096) as usize));
            addr += p * 4096 + 0x10_0000;
            e
        }).collect();
        let total: u64 = npages.iter().sum::<u64>() * 4096;
        let mut ctx: RwCtx<4, 16> = RwCtx::new();
        // SAFETY: TestHal never touches the buffers.
        let r = unsafe {
            ctx.init::<TestHal, 8, 256>(&qp, &mut pool, &mut sg, 0, RA, RKEY, Direction::FromDevice)
        };
        let need = npages.iter().sum::<u64>().div_ceil(256) as usize;
        if need > 8 {
            prop_assert_eq!(r, Err(RwError::PoolEmpty));
        } else {
            let n = r.unwrap();
            let c = chain_of(&mut ctx, &mut pool, &[]);
            prop_assert_eq!(c.len(), n);
            let mut ra = RA;
            for w in &c {
                match w.op {
                    WrOpcode::RegMr(reg) => {
                        let idx = pool.index_of_key(reg.key).unwrap();
                        prop_assert!(pool.pages(idx).len() <= 256);
                    }
                    WrOpcode::RdmaReadInv { remote_addr, inv_key, .. } => {
                        prop_assert_eq!(remote_addr, ra);
                        prop_assert_eq!(inv_key, w.sges[0].lkey);
                        ra += w.sges[0].length as u64;
                    }
                    other => return Err(TestCaseError::fail(std::format!("opcode {other:?}"))),
                }
            }
            prop_assert_eq!(ra - RA, total);
            // SAFETY: as above.
            unsafe { ctx.destroy::<TestHal, 8, 256>(&mut pool, &mut sg) }.unwrap();
        }
        prop_assert_eq!((TestHal::live(), pool.in_use()), (0, 0));
    }

    /// Arbitrary scatter lists, offsets, device limits and injected mapping
    /// failures never panic, and whatever init does is undone (by itself on
    /// error, by destroy on success).
    #[test]
    fn sg_init_never_panics_and_always_releases(
        ents in proptest::collection::vec((any::<u64>(), 0usize..70_000), 0..40),
        off in any::<u32>(),
        max_sge in 0u32..15,
        max_sgl_rd in 0u32..6,
        iw in any::<bool>(),
        force in any::<bool>(),
        read in any::<bool>(),
        mrs in 0u32..9,
        fail_at in 0u32..45,
    ) {
        TestHal::reset(fail_at.into());
        let mut dev = if iw { iwarp() } else { roce(max_sge) };
        dev.max_sgl_rd = max_sgl_rd;
        let qp = RwQp::new(dev, force, max_sge);
        let mut pool = pool_for(&qp, mrs);
        let mut sg: Vec<SgEntry> =
            ents.iter().map(|&(a, l)| SgEntry::new(fake(a.max(1), l))).collect();
        let dir = if read { Direction::FromDevice } else { Direction::ToDevice };
        let mut ctx: RwCtx<16, 4> = RwCtx::new();
        // SAFETY: TestHal never touches the buffers.
        let r = unsafe { ctx.init::<TestHal, 8, 256>(&qp, &mut pool, &mut sg, off, RA, RKEY, dir) };
        if let Ok(n) = r {
            let c = chain_of(&mut ctx, &mut pool, &[]);
            prop_assert_eq!(c.len(), n);
            // SAFETY: as above.
            unsafe { ctx.destroy::<TestHal, 8, 256>(&mut pool, &mut sg) }.unwrap();
        }
        prop_assert_eq!((TestHal::live(), pool.in_use(), ctx.ctx_type()), (0, 0, None));
    }

    /// The same for bvec arrays and arbitrary iterators.
    #[test]
    fn bvec_init_never_panics_and_always_releases(
        ents in proptest::collection::vec((any::<u64>(), 0usize..70_000), 0..20),
        nr in 0usize..25,
        size in any::<u32>(),
        idx in 0u32..25,
        done in 0u32..70_000,
        iw in any::<bool>(),
        force in any::<bool>(),
        read in any::<bool>(),
        iommu in any::<bool>(),
        mrs in 0u32..9,
        fail_at in 0u32..25,
    ) {
        TestHal::reset(fail_at.into());
        let qp = RwQp::new(if iw { iwarp() } else { roce(13) }, force, 13);
        let mut pool = pool_for(&qp, mrs);
        let bv: Vec<BioVec> = ents.iter().map(|&(a, l)| BioVec { buf: fake(a.max(1), l) }).collect();
        let it = BvecIter { bi_size: size % 200_000, bi_idx: idx, bi_bvec_done: done };
        let dir = if read { Direction::FromDevice } else { Direction::ToDevice };
        let mut ctx = Ctx::new();
        let mut io = OkIommu { live: 0 };
        let r = if iommu {
            init_bv(&mut ctx, &qp, &mut pool, &mut io, &bv, nr, it, dir)
        } else {
            init_bv(&mut ctx, &qp, &mut pool, &mut NoIova, &bv, nr, it, dir)
        };
        if let Ok(n) = r {
            let c = chain_of(&mut ctx, &mut pool, &[]);
            prop_assert_eq!(c.len(), n);
            let bytes: u64 = c.iter()
                .filter(|w| !matches!(w.op, WrOpcode::RegMr(_) | WrOpcode::LocalInv { .. }))
                .flat_map(|w| w.sges.iter())
                .map(|s| s.length as u64)
                .sum();
            prop_assert_eq!(bytes, u64::from(it.bi_size));
            prop_assert!(c.iter().all(|w| w.sges.iter().all(|s| s.length > 0)));
            if iommu {
                destroy_bv(&mut ctx, &mut pool, &mut io);
            } else {
                destroy_bv(&mut ctx, &mut pool, &mut NoIova);
            }
        }
        prop_assert_eq!((TestHal::live(), io.live, pool.in_use(), ctx.ctx_type()), (0, 0, 0, None));
    }

    /// Sizing never wraps: the result is the exact value, saturated.
    #[test]
    fn sizing_saturates(maxpages in any::<u32>(), ctxs in any::<u32>(), wr in any::<u32>()) {
        let d = roce(13);
        let exact = (maxpages as u64).div_ceil(13);
        prop_assert_eq!(rdma_rw_mr_factor(&d, false, maxpages) as u64, exact);
        let i = iwarp();
        prop_assert_eq!(
            rdma_rw_max_send_wr(&i, false, ctxs, false) as u64,
            (3 * ctxs as u64).min(u32::MAX as u64)
        );
        let mut cap = RwQpCap { max_send_wr: wr, max_rdma_ctxs: ctxs };
        rdma_rw_init_qp(&i, false, &mut cap, false).unwrap();
        let want = if ctxs == 0 { wr as u64 } else { (wr as u64 + 3 * ctxs as u64).min(4063) };
        prop_assert_eq!(cap.max_send_wr as u64, want);
    }
}

/// `signature_init_sg` through `TestHal`.
fn sig<const O: usize>(
    ctx: &mut RwCtx<4, O>,
    qp: &RwQp,
    sg: &mut [SgEntry],
    prot: &mut [SgEntry],
) -> Result<usize, RwError> {
    // SAFETY: TestHal never touches the buffers.
    unsafe { ctx.signature_init_sg::<TestHal>(qp, sg, prot, Direction::FromDevice) }
}

/// rw.c: rdma_rw_ctx_signature_init on E810 fails in Linux's order: too
/// many entries (-EINVAL, nothing mapped), a failing mapping of `sg` then of
/// `prot_sg` (everything released), the context allocation (-ENOMEM), then
/// the empty integrity pool (-EAGAIN); nothing stays mapped.
#[test]
fn signature_init_errors_in_linux_order() {
    let qp = RwQp::new(roce(13), false, 13);
    let mut ctx: RwCtx<4, 4> = RwCtx::new();
    let (mut sg, mut prot) = (pages(3), pages(2));
    TestHal::reset(0);
    let r = sig(&mut ctx, &qp, &mut pages(257), &mut prot);
    assert_eq!((r, TestHal::live()), (Err(RwError::InvalidArgument), 0));
    let r = sig(&mut ctx, &qp, &mut sg, &mut pages(257));
    assert_eq!((r, TestHal::live()), (Err(RwError::InvalidArgument), 0));
    for fail_at in 1..=5 {
        TestHal::reset(fail_at);
        let r = sig(&mut ctx, &qp, &mut sg, &mut prot);
        assert_eq!(r, Err(RwError::MapFailed), "mapping {fail_at} fails");
        assert_eq!(TestHal::live(), 0);
        assert!(sg.iter().chain(prot.iter()).all(|e| e.dma_addr().is_none()));
    }
    TestHal::reset(0);
    let mut none: RwCtx<4, 0> = RwCtx::new();
    let r = sig(&mut none, &qp, &mut sg, &mut prot);
    assert_eq!((r, TestHal::live()), (Err(RwError::NoCapacity), 0));
    let r = sig(&mut ctx, &qp, &mut sg, &mut []);
    assert_eq!((r, TestHal::live()), (Err(RwError::PoolEmpty), 0));
}

/// rw.c: rdma_rw_init_mr_wrs_bvec on iWARP (READs always use MRs): a long
/// bio_vec list becomes one MR per 256 entries (pages_per_mr), each
/// REG_MR followed by its READ_WITH_INV of the key it registered, the
/// remote address advanced by every MR's length.
#[test]
fn iwarp_long_bvec_list_chains_one_mr_per_256_pages() {
    TestHal::reset(0);
    let qp = RwQp::new(iwarp(), false, 13);
    let mut pool = pool_for(&qp, 8);
    let bv = bvecs(600, 4096);
    let mut ctx: RwCtx<1024, 8> = RwCtx::new();
    let n = init_bv_all(&mut ctx, &qp, &mut pool, &bv, Direction::FromDevice);
    assert_eq!(n, Ok(6), "3 × (REG_MR + READ_WITH_INV)");
    assert_eq!(ctx.ctx_type(), Some(CtxType::Mr));
    let c = chain_of(&mut ctx, &mut pool, &[]);
    assert_eq!(c.len(), 6);
    let mut remote = RA;
    let mut total = 0u64;
    for (i, pair) in c.chunks(2).enumerate() {
        let WrOpcode::RegMr(reg) = pair[0].op else { panic!("REG_MR at {}: {c:?}", 2 * i) };
        let pages = [256u64, 256, 88][i];
        assert_eq!(reg.length, pages * 4096, "MR {i}");
        assert_eq!(
            pair[1].op,
            WrOpcode::RdmaReadInv { remote_addr: remote, rkey: RKEY, inv_key: reg.key },
            "MR {i}"
        );
        assert_eq!(pair[1].sges.len(), 1);
        remote += reg.length;
        total += reg.length;
    }
    assert_eq!(total, 600 * 4096);
    assert!(c[5].flags.contains(SendFlags::SIGNALED) && c[5].wr_id == CQE);
    // SAFETY: TestHal; no device.
    unsafe { ctx.destroy_bvec::<TestHal, NoIova, 8, 256>(&mut pool, &mut NoIova) }.unwrap();
    assert_eq!((TestHal::live(), pool.in_use()), (0, 0));
}
