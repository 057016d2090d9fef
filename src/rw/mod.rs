//! The Linux RDMA R/W API (`drivers/infiniband/core/rw.c`) for E810,
//! without an allocator.
//!
//! Spec: data-path §7 (every rule; decision table §7.9) and §11 (where the
//! Linux code misbehaves and this module is deliberately stricter).
//!
//! * [`DeviceAttrs`] — the device attributes the decisions depend on;
//! * [`RwQp`] — the per-QP limits (`max_write_sge`, `max_read_sge`) plus the
//!   `force_mr` switch (a module parameter in Linux);
//! * [`MrPool`] — the QP's fast-register MR pool (`qp->rdma_mrs`), fixed
//!   capacity, LIFO like `mr_pool.c`; a context holding its MRs is bound to
//!   it ([`RwError::WrongPool`]) and every MR hand-out has a generation
//!   ([`RwError::StaleMr`]), see the pool module docs;
//! * [`RwCtx`] — one R/W context in caller-provided storage with const
//!   capacities; `init`/`init_bvec`/`wrs`/`post`/`destroy`/`destroy_bvec`;
//! * sizing: [`rdma_rw_mr_factor`], [`rdma_rw_max_send_wr`],
//!   [`rdma_rw_init_qp`].
//!
//! Deliberate departures from Linux (spec §11), each tested:
//! 1. nothing left after `sg_offset` is [`RwError::NothingToTransfer`],
//!    checked before anything is mapped (Linux may dereference NULL);
//! 2. `RDMA_READ_WITH_INV` invalidates the key the chain registered (Linux
//!    passes the key one generation behind);
//! 3. the bvec paths walk the iterator by `bi_size` and never read past the
//!    array; they emit no zero-length SGEs;
//! 4. sizing saturates instead of wrapping in u32;
//! 5. MRs are filled by pages, not by 256 scatter-list entries, so 65
//!    entries of 16 KiB take two MRs instead of failing;
//! 6. calling `wrs` twice on one context bumps the MR keys only once and
//!    rebuilds the chain from scratch (no stale signaled flag);
//! 7. an integrity QP is refused ([`RwError::IntegrityUnsupported`]) as
//!    `ib_create_named_qp` refuses it on E810 (no integrity handover).

mod attrs;
mod ctx;
mod pool;
#[cfg(test)]
mod tests;

pub use attrs::{
    DeviceAttrs, Direction, RW_MAX_PAGES_PER_MR, RW_PAGE_SIZE, RwError, RwQp, RwQpCap, can_use_mr,
    fr_page_list_len, io_needs_mr, rdma_rw_init_qp, rdma_rw_max_send_wr, rdma_rw_mr_factor,
    send_wr_factor,
};
pub use ctx::{
    BioVec, BvecIter, CtxType, IovaMapper, NoIova, PostSend, RwCtx, RwPostError, SgEntry,
};
pub use pool::{FrMr, MrPool};

// ----------------------------------------------------------------------
// Linux-named entry points, for porting a ULP by reading names. Each is
// the [`RwCtx`] / [`MrPool`] method of the same meaning.

/// `rdma_rw_ctx_init`: see [`RwCtx::init`].
///
/// # Safety
///
/// As [`RwCtx::init`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn rdma_rw_ctx_init<H, const S: usize, const O: usize, const N: usize, const P: usize>(
    ctx: &mut RwCtx<S, O>,
    qp: &RwQp,
    pool: &mut MrPool<N, P>,
    sg: &mut [SgEntry],
    sg_offset: u32,
    remote_addr: u64,
    rkey: u32,
    dir: Direction,
) -> Result<usize, RwError>
where
    H: irdma_hal::Hal,
{
    // SAFETY: forwarded caller contract.
    unsafe { ctx.init::<H, N, P>(qp, pool, sg, sg_offset, remote_addr, rkey, dir) }
}

/// `rdma_rw_ctx_init_bvec`: see [`RwCtx::init_bvec`].
///
/// # Safety
///
/// As [`RwCtx::init_bvec`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn rdma_rw_ctx_init_bvec<
    H,
    I,
    const S: usize,
    const O: usize,
    const N: usize,
    const P: usize,
>(
    ctx: &mut RwCtx<S, O>,
    qp: &RwQp,
    pool: &mut MrPool<N, P>,
    iova: &mut I,
    bvecs: &[BioVec],
    nr_bvec: usize,
    iter: BvecIter,
    remote_addr: u64,
    rkey: u32,
    dir: Direction,
) -> Result<usize, RwError>
where
    H: irdma_hal::Hal,
    I: IovaMapper,
{
    // SAFETY: forwarded caller contract.
    unsafe {
        ctx.init_bvec::<H, I, N, P>(qp, pool, iova, bvecs, nr_bvec, iter, remote_addr, rkey, dir)
    }
}

/// `rdma_rw_ctx_wrs`: see [`RwCtx::wrs`].
pub fn rdma_rw_ctx_wrs<'a, const S: usize, const O: usize, const N: usize, const P: usize>(
    ctx: &'a mut RwCtx<S, O>,
    pool: &mut MrPool<N, P>,
    wr_id: u64,
    chain_wr: &[crate::wr::SendWr<'a>],
    out: &mut [crate::wr::SendWr<'a>],
) -> Result<usize, RwError> {
    ctx.wrs(pool, wr_id, chain_wr, out)
}

/// `rdma_rw_ctx_post`: see [`RwCtx::post`].
pub fn rdma_rw_ctx_post<
    Q: PostSend,
    const S: usize,
    const O: usize,
    const N: usize,
    const P: usize,
>(
    ctx: &mut RwCtx<S, O>,
    qp: &mut Q,
    pool: &mut MrPool<N, P>,
    wr_id: u64,
    chain_wr: &[crate::wr::SendWr<'_>],
) -> Result<(), RwPostError<Q::Error>> {
    ctx.post(qp, pool, wr_id, chain_wr)
}

/// `rdma_rw_ctx_destroy`: see [`RwCtx::destroy`].
///
/// # Safety
///
/// As [`RwCtx::destroy`].
pub unsafe fn rdma_rw_ctx_destroy<
    H,
    const S: usize,
    const O: usize,
    const N: usize,
    const P: usize,
>(
    ctx: &mut RwCtx<S, O>,
    pool: &mut MrPool<N, P>,
    sg: &mut [SgEntry],
) -> Result<(), RwError>
where
    H: irdma_hal::Hal,
{
    // SAFETY: forwarded caller contract.
    unsafe { ctx.destroy::<H, N, P>(pool, sg) }
}

/// `rdma_rw_ctx_destroy_bvec`: see [`RwCtx::destroy_bvec`].
///
/// # Safety
///
/// As [`RwCtx::destroy_bvec`].
pub unsafe fn rdma_rw_ctx_destroy_bvec<
    H,
    I,
    const S: usize,
    const O: usize,
    const N: usize,
    const P: usize,
>(
    ctx: &mut RwCtx<S, O>,
    pool: &mut MrPool<N, P>,
    iova: &mut I,
) -> Result<(), RwError>
where
    H: irdma_hal::Hal,
    I: IovaMapper,
{
    // SAFETY: forwarded caller contract.
    unsafe { ctx.destroy_bvec::<H, I, N, P>(pool, iova) }
}

/// `rdma_rw_init_mrs`: see [`MrPool::init`].
pub fn rdma_rw_init_mrs<const N: usize, const P: usize>(
    pool: &mut MrPool<N, P>,
    qp: &RwQp,
    max_rdma_ctxs: u32,
    mrs: &[FrMr],
) -> Result<usize, RwError> {
    pool.init(&qp.dev, qp.force_mr, max_rdma_ctxs, mrs)
}

/// `rdma_rw_cleanup_mrs`: see [`MrPool::cleanup`].
pub fn rdma_rw_cleanup_mrs<const N: usize, const P: usize>(
    pool: &mut MrPool<N, P>,
    out: impl FnMut(FrMr),
) -> Result<(), RwError> {
    pool.cleanup(out)
}
