//! Tests of the rw layer: shared helpers here, the tests by concern in the
//! child files: [`decide`] (§7.9 table, WR contents, bvec details, release
//! on failure), [`post`] (posting, entry points, sizing, pool binding) and
//! [`props`] (property tests and Linux-order checks).

extern crate std;

use core::ptr::NonNull;
use std::vec;
use std::vec::Vec;

use irdma_hal::BufferDirection;
use proptest::prelude::*;

use super::*;
use crate::wr::{Access, SendFlags, SendWr, Sge, WrOpcode};

mod decide;
mod post;
mod props;

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

/// `n` entries of `len` bytes, the first at `base`, each `stride` bytes
/// after the one before.
fn entries(n: u64, base: u64, stride: u64, len: usize) -> Vec<SgEntry> {
    (0..n).map(|i| SgEntry::new(fake(base + stride * i, len))).collect()
}

/// `n` discontiguous 4 KiB pages.
fn pages(n: usize) -> Vec<SgEntry> {
    entries(n as u64, 0x10_0000, 0x2000, 4096)
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

/// A placeholder for `wrs` to overwrite.
const NO_WR: SendWr<'static> =
    SendWr { wr_id: 0, opcode: WrOpcode::Send, flags: SendFlags::NONE, sg_list: &[] };

/// The REG_MR WRs of a chain, in order.
fn reg_mrs(c: &[W]) -> Vec<crate::wr::RegMrWr> {
    c.iter().filter_map(|w| if let WrOpcode::RegMr(r) = w.op { Some(r) } else { None }).collect()
}

fn chain_of<const S: usize, const O: usize>(
    ctx: &mut RwCtx<S, O>,
    pool: &mut Pool,
    extra: &[SendWr<'_>],
) -> Vec<W> {
    let mut out = vec![NO_WR; ctx.chain_len() + extra.len()];
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
fn init_bv<I: IovaMapper, const S: usize, const O: usize>(
    ctx: &mut RwCtx<S, O>,
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

fn destroy_bv<I: IovaMapper, const S: usize, const O: usize>(
    ctx: &mut RwCtx<S, O>,
    pool: &mut Pool,
    iova: &mut I,
) {
    // SAFETY: TestHal; no device.
    unsafe { ctx.destroy_bvec::<TestHal, I, 8, 256>(pool, iova) }.unwrap();
}

/// A fresh `TestHal` (failing its `fail_at`-th map, 0: never), a pool of
/// `mrs` MRs for `qp` and an empty context: every test's starting point.
fn fresh(qp: &RwQp, mrs: u32, fail_at: u64) -> (Pool, Ctx) {
    TestHal::reset(fail_at);
    (pool_for(qp, mrs), Ctx::new())
}

/// [`fresh`] (8 MRs), then `init_sg` of `n` [`pages`] from their first
/// byte for `dir`: a live context, its pool and its entries.
fn started(qp: &RwQp, n: usize, dir: Direction) -> (Pool, Ctx, Vec<SgEntry>) {
    let (mut pool, mut ctx) = fresh(qp, 8, 0);
    let mut sg = pages(n);
    init_sg(&mut ctx, qp, &mut pool, &mut sg, 0, dir).unwrap();
    (pool, ctx, sg)
}

/// [`init_bv`] over the whole of `bv`, without an IOMMU.
fn init_bv_all<const S: usize, const O: usize>(
    ctx: &mut RwCtx<S, O>,
    qp: &RwQp,
    pool: &mut Pool,
    bv: &[BioVec],
    dir: Direction,
) -> Result<usize, RwError> {
    init_bv(ctx, qp, pool, &mut NoIova, bv, bv.len(), iter_all(bv), dir)
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

/// An IOMMU that always allocates (IOVA 0xf000_0000) and fails where told:
/// `link` of an offset at or past `link_fails_from` returns -22, `sync`
/// returns `sync_err`. It records what was linked and the length the range
/// was destroyed with.
struct FailingIommu {
    link_fails_from: u64,
    sync_err: Option<i32>,
    live: i64,
    linked: u64,
    destroyed_len: u64,
}

impl FailingIommu {
    fn new(link_fails_from: u64, sync_err: Option<i32>) -> Self {
        FailingIommu { link_fails_from, sync_err, live: 0, linked: 0, destroyed_len: 0 }
    }
}

// SAFETY: address arithmetic only.
unsafe impl IovaMapper for FailingIommu {
    fn try_alloc(&mut self, _: NonNull<[u8]>, _: u64, _: BufferDirection) -> Option<u64> {
        self.live += 1;
        Some(0xf000_0000)
    }
    fn link(&mut self, _: u64, off: u64, s: NonNull<[u8]>, _: BufferDirection) -> Result<(), i32> {
        if off >= self.link_fails_from {
            return Err(-22);
        }
        self.linked += s.len() as u64;
        Ok(())
    }
    fn sync(&mut self, _: u64, _: u64) -> Result<(), i32> {
        self.sync_err.map_or(Ok(()), Err)
    }
    fn destroy(&mut self, _: u64, len: u64, _: BufferDirection) {
        self.live -= 1;
        self.destroyed_len = len;
    }
}
