//! Tests of the rw layer: the §7.9 decision table, the multi-WR split and
//! MR chunking (property tests), sizing against the Linux formulas, every
//! §11 departure, and release of everything on every path.

extern crate std;

use core::ptr::NonNull;
use std::vec;
use std::vec::Vec;

use irdma_hal::BufferDirection;
use proptest::prelude::*;

use super::*;
use crate::wr::{Access, SendFlags, SendWr, Sge, WrOpcode};

/// Identity mapping with per-thread accounting and failure injection; it
/// never dereferences the buffers, so tests may use made-up addresses.
use irdma_testkit::IdentityHal as TestHal;

const LKEY: u32 = 0xabcd00;
const RA: u64 = 0x7f00_0000_1000;
const RKEY: u32 = 0x1234;
const CQE: u64 = 0xcafe;

fn fake(addr: u64, len: usize) -> NonNull<[u8]> {
    NonNull::slice_from_raw_parts(NonNull::new(addr as *mut u8).unwrap(), len)
}

/// `n` discontiguous 4 KiB pages.
fn pages(n: usize) -> Vec<SgEntry> {
    (0..n).map(|i| SgEntry::new(fake(0x10_0000 + 0x2000 * i as u64, 4096))).collect()
}

fn bvecs(n: usize, len: usize) -> Vec<BioVec> {
    (0..n).map(|i| BioVec { buf: fake(0x10_0000 + 0x10_0000 * i as u64, len) }).collect()
}

fn roce(max_sge: u32) -> DeviceAttrs {
    DeviceAttrs::e810_roce(max_sge, 4063, LKEY)
}

fn iwarp() -> DeviceAttrs {
    DeviceAttrs::e810_iwarp(13, 4063, LKEY)
}

type Pool = MrPool<8, 256>;
type Ctx = RwCtx<64, 16>;

fn pool_for(qp: &RwQp, n: u32) -> Pool {
    let mut p = Pool::new();
    let mrs: Vec<FrMr> = (0..8)
        .map(|i| FrMr {
            key: (0x100 + i) << 8,
            max_pages: 256,
            first_pble_index: i * 256,
            pbl_level: 1,
        })
        .collect();
    p.init(&qp.dev, qp.force_mr, n, &mrs).unwrap();
    p
}

/// An owned copy of a WR.
#[derive(Debug, Clone, PartialEq)]
struct W {
    op: WrOpcode,
    flags: SendFlags,
    wr_id: u64,
    sges: Vec<Sge>,
}

fn own(w: &SendWr<'_>) -> W {
    W { op: w.opcode, flags: w.flags, wr_id: w.wr_id, sges: w.sg_list.to_vec() }
}

fn chain_of<const S: usize, const O: usize>(
    ctx: &mut RwCtx<S, O>,
    pool: &mut Pool,
    extra: &[SendWr<'_>],
) -> Vec<W> {
    let mut out =
        vec![
            SendWr { wr_id: 0, opcode: WrOpcode::Send, flags: SendFlags::NONE, sg_list: &[] };
            ctx.chain_len() + extra.len()
        ];
    let n = ctx.wrs(pool, CQE, extra, &mut out).unwrap();
    out.iter().take(n).map(own).collect()
}

fn init_sg(
    ctx: &mut Ctx,
    qp: &RwQp,
    pool: &mut Pool,
    sg: &mut [SgEntry],
    off: u32,
    dir: Direction,
) -> Result<usize, RwError> {
    // SAFETY: TestHal never touches the buffers.
    unsafe { ctx.init::<TestHal, 8, 256>(qp, pool, sg, off, RA, RKEY, dir) }
}

fn destroy_sg(ctx: &mut Ctx, pool: &mut Pool, sg: &mut [SgEntry]) {
    // SAFETY: TestHal; no device.
    unsafe { ctx.destroy::<TestHal, 8, 256>(pool, sg) }.unwrap();
}

#[allow(clippy::too_many_arguments)]
fn init_bv<I: IovaMapper>(
    ctx: &mut Ctx,
    qp: &RwQp,
    pool: &mut Pool,
    iova: &mut I,
    bv: &[BioVec],
    nr: usize,
    iter: BvecIter,
    dir: Direction,
) -> Result<usize, RwError> {
    // SAFETY: TestHal / test IOMMUs never touch the buffers.
    unsafe { ctx.init_bvec::<TestHal, I, 8, 256>(qp, pool, iova, bv, nr, iter, RA, RKEY, dir) }
}

fn destroy_bv<I: IovaMapper>(ctx: &mut Ctx, pool: &mut Pool, iova: &mut I) {
    // SAFETY: TestHal; no device.
    unsafe { ctx.destroy_bvec::<TestHal, I, 8, 256>(pool, iova) }.unwrap();
}

fn iter_all(bv: &[BioVec]) -> BvecIter {
    BvecIter { bi_size: bv.iter().map(|b| b.buf.len() as u32).sum(), bi_idx: 0, bi_bvec_done: 0 }
}

/// An IOMMU that always has room: IOVA = 0xf000_0000 + first offset.
struct OkIommu {
    live: i64,
}

// SAFETY: address arithmetic only.
unsafe impl IovaMapper for OkIommu {
    fn try_alloc(&mut self, f: NonNull<[u8]>, _: u64, _: BufferDirection) -> Option<u64> {
        self.live += 1;
        Some(0xf000_0000 + (f.cast::<u8>().as_ptr() as u64 & 0xfff))
    }
    fn link(&mut self, _: u64, _: u64, _: NonNull<[u8]>, _: BufferDirection) -> Result<(), i32> {
        Ok(())
    }
    fn sync(&mut self, _: u64, _: u64) -> Result<(), i32> {
        Ok(())
    }
    fn destroy(&mut self, _: u64, _: u64, _: BufferDirection) {
        self.live -= 1;
    }
}

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
        let bv = bvecs(2, 4096);
        let zero = BvecIter { bi_size: 0, ..BvecIter::default() };
        let r = init_bv(&mut ctx, &qp, &mut pool, &mut NoIova, &bv, 2, zero, Direction::FromDevice);
        assert_eq!(r, Err(RwError::InvalidArgument));
        let r = init_bv(
            &mut ctx,
            &qp,
            &mut pool,
            &mut NoIova,
            &bv,
            0,
            iter_all(&bv),
            Direction::ToDevice,
        );
        assert_eq!(r, Err(RwError::InvalidArgument));
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
    let r = init_bv(
        &mut ctx,
        &qp,
        &mut pool,
        &mut NoIova,
        &bv,
        5,
        iter_all(&bv),
        Direction::FromDevice,
    );
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
            init_bv(&mut ctx, &qp, &mut pool, &mut NoIova, &bv, n, iter_all(&bv), dir)
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
    TestHal::reset(0);
    let qp = RwQp::new(roce(13), false, 13);
    let mut pool = pool_for(&qp, 8);
    let mut ctx = Ctx::new();
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
    TestHal::reset(0);
    let qp = RwQp::new(roce(13), false, 13);
    let mut pool = pool_for(&qp, 8);
    let mut ctx = Ctx::new();
    let mut sg = pages(14);
    init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, Direction::ToDevice).unwrap();
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
    TestHal::reset(0);
    let qp = RwQp::new(roce(13), false, 13);
    let mut pool = pool_for(&qp, 8);
    let mut ctx = Ctx::new();
    let mut sg = pages(14);
    init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, Direction::ToDevice).unwrap();
    let mut out =
        [SendWr { wr_id: 0, opcode: WrOpcode::Send, flags: SendFlags::NONE, sg_list: &[] }; 1];
    assert_eq!(ctx.wrs(&mut pool, CQE, &[], &mut out), Err(RwError::NoCapacity));
    destroy_sg(&mut ctx, &mut pool, &mut sg);
}

#[test]
fn mr_path_iwarp_read_with_inv_invalidates_registered_key() {
    // spec §7.4 + §11.2.
    TestHal::reset(0);
    let qp = RwQp::new(iwarp(), false, 13);
    let mut pool = pool_for(&qp, 8);
    let mut ctx = Ctx::new();
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
    TestHal::reset(0);
    let qp = RwQp::new(roce(13), true, 13);
    let mut pool = pool_for(&qp, 8);
    let mut ctx = Ctx::new();
    // 300 pages: two MRs (256 + 44).
    let mut sg: Vec<SgEntry> =
        (0..300).map(|i| SgEntry::new(fake(0x10_0000 + 0x1000 * i, 4096))).collect();
    let mut big: RwCtx<4, 4> = RwCtx::new();
    // SAFETY: TestHal never touches the buffers.
    let n = unsafe {
        big.init::<TestHal, 8, 256>(&qp, &mut pool, &mut sg, 0, RA, RKEY, Direction::ToDevice)
    };
    assert_eq!(n, Ok(4));
    let c = chain_of(&mut big, &mut pool, &[]);
    let keys: Vec<u32> = c
        .iter()
        .filter_map(|w| if let WrOpcode::RegMr(r) = w.op { Some(r.key) } else { None })
        .collect();
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
    TestHal::reset(0);
    let qp = RwQp::new(roce(13), true, 13);
    let mut pool = pool_for(&qp, 8);
    let mut ctx = Ctx::new();
    let mut sg = pages(2);
    init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, Direction::ToDevice).unwrap();
    let a = chain_of(&mut ctx, &mut pool, &[]);
    let b = chain_of(&mut ctx, &mut pool, &[]);
    assert_eq!(a, b);
    assert_eq!(pool.mr(0).unwrap().key, 0x10001);
    destroy_sg(&mut ctx, &mut pool, &mut sg);
}

#[test]
fn mr_chunking_counts_pages_not_entries() {
    // spec §11.7: 65 entries of 16 KiB = 260 pages: two MRs, not -EINVAL.
    TestHal::reset(0);
    let qp = RwQp::new(iwarp(), false, 13);
    let mut pool = pool_for(&qp, 8);
    let mut ctx = Ctx::new();
    let mut sg: Vec<SgEntry> =
        (0..65).map(|i| SgEntry::new(fake(0x100_0000 + 0x8000 * i, 16384))).collect();
    assert_eq!(init_sg(&mut ctx, &qp, &mut pool, &mut sg, 0, Direction::FromDevice), Ok(4));
    let c = chain_of(&mut ctx, &mut pool, &[]);
    let regs: Vec<_> = c
        .iter()
        .filter_map(|w| if let WrOpcode::RegMr(r) = w.op { Some(r) } else { None })
        .collect();
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
    TestHal::reset(0);
    let qp = RwQp::new(iwarp(), false, 13);
    let mut pool = pool_for(&qp, 8);
    let mut ctx = Ctx::new();
    let mut sg: Vec<SgEntry> =
        (0..16).map(|i| SgEntry::new(fake(0x50_0000 + 512 * i, 512))).collect();
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
    TestHal::reset(0);
    let qp = RwQp::new(roce(13), false, 13);
    let mut pool = pool_for(&qp, 8);
    let mut ctx = Ctx::new();
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
        TestHal::reset(fail_at);
        let mut pool = pool_for(&qp, 8);
        let mut ctx = Ctx::new();
        let bv = bvecs(14, 4096);
        let r = init_bv(
            &mut ctx,
            &qp,
            &mut pool,
            &mut NoIova,
            &bv,
            14,
            iter_all(&bv),
            Direction::ToDevice,
        );
        assert_eq!(r, Err(RwError::MapFailed));
        assert_eq!(RwError::MapFailed.errno(), -12);
        assert_eq!((TestHal::live(), ctx.ctx_type()), (0, None), "fail_at {fail_at}");
    }
    // MR bvec path and single path too.
    for (qp, n) in [(RwQp::new(iwarp(), false, 13), 5), (RwQp::new(roce(13), false, 13), 1)] {
        TestHal::reset(1);
        let mut pool = pool_for(&qp, 8);
        let mut ctx = Ctx::new();
        let bv = bvecs(n, 4096);
        let r = init_bv(
            &mut ctx,
            &qp,
            &mut pool,
            &mut NoIova,
            &bv,
            n,
            iter_all(&bv),
            Direction::FromDevice,
        );
        assert_eq!(r, Err(RwError::MapFailed));
        assert_eq!((TestHal::live(), pool.in_use()), (0, 0));
    }
}

#[test]
fn sg_failures_release_everything() {
    let qp = RwQp::new(roce(13), false, 13);
    // Mapping failure at every position.
    for fail_at in 1..=5 {
        TestHal::reset(fail_at);
        let mut pool = pool_for(&qp, 8);
        let mut ctx = Ctx::new();
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

#[test]
fn iova_errors_destroy_the_partial_range() {
    struct Failing {
        live: i64,
        linked: u64,
        destroyed_len: u64,
    }
    // SAFETY: address arithmetic only.
    unsafe impl IovaMapper for Failing {
        fn try_alloc(&mut self, _: NonNull<[u8]>, _: u64, _: BufferDirection) -> Option<u64> {
            self.live += 1;
            Some(0xf000_0000)
        }
        fn link(
            &mut self,
            _: u64,
            off: u64,
            s: NonNull<[u8]>,
            _: BufferDirection,
        ) -> Result<(), i32> {
            if off >= 8192 {
                return Err(-22);
            }
            self.linked += s.len() as u64;
            Ok(())
        }
        fn sync(&mut self, _: u64, _: u64) -> Result<(), i32> {
            Ok(())
        }
        fn destroy(&mut self, _: u64, len: u64, _: BufferDirection) {
            self.live -= 1;
            self.destroyed_len = len;
        }
    }
    TestHal::reset(0);
    let qp = RwQp::new(roce(13), false, 13);
    let mut pool = pool_for(&qp, 8);
    let mut ctx = Ctx::new();
    let bv = bvecs(4, 4096);
    let mut io = Failing { live: 0, linked: 0, destroyed_len: 0 };
    let r = init_bv(&mut ctx, &qp, &mut pool, &mut io, &bv, 4, iter_all(&bv), Direction::ToDevice);
    assert_eq!(r, Err(RwError::Iova(-22)));
    assert_eq!((io.live, io.linked, io.destroyed_len), (0, 8192, 8192));
    assert_eq!(RwError::Iova(-22).errno(), -22);
}

#[test]
fn context_misuse_is_refused() {
    TestHal::reset(0);
    let qp = RwQp::new(roce(13), false, 13);
    let mut pool = pool_for(&qp, 8);
    let mut ctx = Ctx::new();
    let mut sg = pages(2);
    let mut out =
        [SendWr { wr_id: 0, opcode: WrOpcode::Send, flags: SendFlags::NONE, sg_list: &[] }; 4];
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
    let mut sg: Vec<SgEntry> =
        (0..7 * 256).map(|i| SgEntry::new(fake(0x100_0000 + 0x1000 * i, 4096))).collect();
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
    TestHal::reset(0);
    let qp = RwQp::new(iwarp(), false, 13);
    let mut p1 = pool_for(&qp, 1);
    let mut p2 = pool_for(&qp, 1);
    let mut b = Ctx::new();
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
    // rdma_rw_init_qp.
    let mut cap = RwQpCap { max_send_wr: 128, max_rdma_ctxs: 64 };
    rdma_rw_init_qp(&r13, false, &mut cap, false).unwrap();
    assert_eq!(cap, RwQpCap { max_send_wr: 192, max_rdma_ctxs: 64 });
    let mut cap = RwQpCap { max_send_wr: 1000, max_rdma_ctxs: 1100 };
    rdma_rw_init_qp(&iw, false, &mut cap, false).unwrap();
    assert_eq!(cap.max_send_wr, 4063, "clamped to max_qp_wr");
    // Linux wraps to 256 / 18 (spec §11.6).
    let mut cap = RwQpCap { max_send_wr: 4_294_967_040, max_rdma_ctxs: 512 };
    rdma_rw_init_qp(&r13, false, &mut cap, false).unwrap();
    assert_eq!(cap.max_send_wr, 4063);
    let mut cap = RwQpCap { max_send_wr: 16, max_rdma_ctxs: 0x5555_5556 };
    rdma_rw_init_qp(&iw, false, &mut cap, false).unwrap();
    assert_eq!(cap.max_send_wr, 4063);
    let mut cap = RwQpCap { max_send_wr: 128, max_rdma_ctxs: 0 };
    rdma_rw_init_qp(&iw, false, &mut cap, false).unwrap();
    assert_eq!(cap.max_send_wr, 128);
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
    TestHal::reset(0);
    let qp = RwQp::new(iwarp(), false, 13);
    let mut pool = pool_for(&qp, 1);
    let mut ctx = Ctx::new();
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
    TestHal::reset(0);
    let qp = RwQp::new(iwarp(), false, 13);
    let mut a = pool_for(&qp, 1);
    let mut b = pool_for(&qp, 1);
    let mut ctx = Ctx::new();
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
    // SAFETY: TestHal / NoIova never touch the buffers.
    let n = unsafe {
        ctx.init_bvec::<TestHal, NoIova, 8, 256>(
            &qp,
            &mut pool,
            &mut NoIova,
            &bv,
            600,
            iter_all(&bv),
            RA,
            RKEY,
            Direction::FromDevice,
        )
    };
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

/// rw.c: rdma_rw_init_iova_wrs_bvec: a failing dma_iova_sync after every
/// bvec was linked returns its errno and destroys the range with the whole
/// linked length; nothing stays mapped.
#[test]
fn iova_sync_failure_destroys_the_whole_linked_range() {
    struct SyncFails {
        live: i64,
        linked: u64,
        destroyed_len: u64,
    }
    // SAFETY: address arithmetic only.
    unsafe impl IovaMapper for SyncFails {
        fn try_alloc(&mut self, _: NonNull<[u8]>, _: u64, _: BufferDirection) -> Option<u64> {
            self.live += 1;
            Some(0xf000_0000)
        }
        fn link(
            &mut self,
            _: u64,
            _: u64,
            s: NonNull<[u8]>,
            _: BufferDirection,
        ) -> Result<(), i32> {
            self.linked += s.len() as u64;
            Ok(())
        }
        fn sync(&mut self, _: u64, _: u64) -> Result<(), i32> {
            Err(-5)
        }
        fn destroy(&mut self, _: u64, len: u64, _: BufferDirection) {
            self.live -= 1;
            self.destroyed_len = len;
        }
    }
    TestHal::reset(0);
    let qp = RwQp::new(roce(13), false, 13);
    let mut pool = pool_for(&qp, 8);
    let mut ctx = Ctx::new();
    let bv = bvecs(4, 4096);
    let mut io = SyncFails { live: 0, linked: 0, destroyed_len: 0 };
    let r =
        init_bv(&mut ctx, &qp, &mut pool, &mut io, &bv, 4, iter_all(&bv), Direction::FromDevice);
    assert_eq!(r, Err(RwError::Iova(-5)));
    assert_eq!((io.live, io.linked, io.destroyed_len), (0, 4 * 4096, 4 * 4096));
    assert_eq!((TestHal::live(), pool.in_use()), (0, 0));
}
