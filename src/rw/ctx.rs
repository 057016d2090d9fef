//! One R/W context (`struct rdma_rw_ctx`) in caller-provided storage.
//!
//! `RwCtx<MAX_SGE, MAX_OPS>`: `MAX_SGE` SGEs (multi-WR path) or mapped bvec
//! segments, `MAX_OPS` RDMA READ/WRITE WRs (`nr_ops`; MR path: one per MR).
//! Exceeding them is [`RwError::NoCapacity`], where Linux's kzalloc would
//! fail. SINGLE and IOVA contexts use neither array (Linux embeds them too).

use core::error::Error;
use core::fmt::{self, Display, Formatter};
use core::ptr::NonNull;

use irdma_hal::{BufferDirection, Hal, PhysAddr};

use super::attrs::{Direction, RW_PAGE_SIZE, RwError, RwQp, io_needs_mr};
use super::pool::{FrMr, MrPool};
use crate::wr::{Access, PageSize, RegMrWr, SendFlags, SendWr, Sge, WrOpcode};

/// One scatter-list entry (`struct scatterlist`): a CPU buffer, and its
/// device address while [`RwCtx::init`] has it mapped.
#[derive(Clone, Copy, Debug)]
pub struct SgEntry {
    /// The buffer (`sg_page + offset`, `length`).
    pub buf: NonNull<[u8]>,
    dma: Option<PhysAddr>,
}

impl SgEntry {
    /// An unmapped entry for `buf`.
    pub const fn new(buf: NonNull<[u8]>) -> Self {
        SgEntry { buf, dma: None }
    }

    /// The device address while mapped (`sg_dma_address`).
    pub fn dma_addr(&self) -> Option<PhysAddr> {
        self.dma
    }
}

/// One `struct bio_vec`: a CPU buffer (`bv_page + bv_offset`, `bv_len`).
#[derive(Clone, Copy, Debug)]
pub struct BioVec {
    /// The segment.
    pub buf: NonNull<[u8]>,
}

/// `struct bvec_iter`: where in a bvec array a transfer starts and how long
/// it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BvecIter {
    /// Bytes to transfer.
    pub bi_size: u32,
    /// Index of the current bvec.
    pub bi_idx: u32,
    /// Bytes of the current bvec already consumed.
    pub bi_bvec_done: u32,
}

/// The kind of a context (rw.c's enum; SIG_MR is not supported on E810).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CtxType {
    /// `RDMA_RW_SINGLE_WR`: one WR with one SGE.
    SingleWr,
    /// `RDMA_RW_MULTI_WR`: WRs of up to max_write/read_sge SGEs each.
    MultiWr,
    /// `RDMA_RW_MR`: per MR \[LOCAL_INV\] + REG_MR + RDMA READ/WRITE.
    Mr,
    /// `RDMA_RW_IOVA`: one WR over a contiguous IOVA range.
    Iova,
}

/// A platform IOMMU that can map several segments into one contiguous
/// device range (Linux `dma_iova_try_alloc` / `dma_iova_link` /
/// `dma_iova_sync` / `dma_iova_destroy`; spec §7.3 IOVA path).
///
/// # Safety
///
/// Implementations must make each linked segment reachable by the device
/// at `addr + offset` for the given direction until `destroy`, and `destroy`
/// must end that access.
pub unsafe trait IovaMapper {
    /// Reserves a contiguous range for `size` bytes whose first segment is
    /// `first`; returns the device address of the first byte (the range base
    /// plus `first`'s offset inside its IOMMU granule), or `None` when no
    /// range can be had (then the caller falls back, like -EOPNOTSUPP).
    fn try_alloc(&mut self, first: NonNull<[u8]>, size: u64, dir: BufferDirection) -> Option<u64>;

    /// Maps `seg` at `addr + offset`. Errors are negative errnos.
    fn link(
        &mut self,
        addr: u64,
        offset: u64,
        seg: NonNull<[u8]>,
        dir: BufferDirection,
    ) -> Result<(), i32>;

    /// Makes the linked range visible to the device.
    fn sync(&mut self, addr: u64, size: u64) -> Result<(), i32>;

    /// Unmaps `mapped_len` linked bytes from `addr` and frees the range.
    fn destroy(&mut self, addr: u64, mapped_len: u64, dir: BufferDirection);
}

/// No IOMMU: the IOVA path is never taken.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoIova;

// SAFETY: never maps anything (`try_alloc` always declines).
unsafe impl IovaMapper for NoIova {
    fn try_alloc(&mut self, _: NonNull<[u8]>, _: u64, _: BufferDirection) -> Option<u64> {
        None
    }
    fn link(&mut self, _: u64, _: u64, _: NonNull<[u8]>, _: BufferDirection) -> Result<(), i32> {
        Err(-95)
    }
    fn sync(&mut self, _: u64, _: u64) -> Result<(), i32> {
        Err(-95)
    }
    fn destroy(&mut self, _: u64, _: u64, _: BufferDirection) {}
}

/// What `rdma_rw_ctx_post` needs from a QP: `ib_post_send` over a chain.
pub trait PostSend {
    /// The QP's posting error.
    type Error;
    /// Posts `wrs` in order; on failure returns the index of the first WR
    /// not posted (`bad_wr`) and the error; WRs before it stay posted.
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), (usize, Self::Error)>;

    /// Writes `pages` into the PBL of fast-register MR `mr` before its
    /// REG_MR is posted: the PBLE half of `ib_map_mr_sg` (verbs.c:
    /// irdma_map_mr_sg → irdma_set_page). [`RwCtx::post`] calls it for every
    /// MR of an MR context. The default writes nothing (QPs with no device
    /// memory behind them: test sinks); the verbs QPs write the PBLEs.
    ///
    /// # Safety
    ///
    /// `pages` must be addresses of pages the device may access, with the
    /// rights the REG_MR grants, until the registration is invalidated —
    /// as the buffers given to [`RwCtx::init`] / [`RwCtx::init_bvec`] are
    /// under their contract. (The verbs QPs' implementations arm the MR
    /// for exactly that one REG_MR: safe code cannot register the list
    /// again after the contract ended.)
    unsafe fn map_mr_pages(&mut self, mr: &FrMr, pages: &[u64]) -> Result<(), RwError> {
        let _ = (mr, pages);
        Ok(())
    }
}

/// Failure of [`RwCtx::post`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RwPostError<E> {
    /// The context could not build its chain.
    Rw(RwError),
    /// The QP refused WR `bad` of the chain (0-based, chain WRs included).
    Post {
        /// Index of the first WR not posted.
        bad: usize,
        /// The QP's error.
        err: E,
    },
}

/// The far side of a transfer and its direction, as `init` and
/// `init_bvec` were given them: what each of their paths builds its WRs
/// towards.
#[derive(Clone, Copy, Debug)]
struct Remote {
    /// Remote address of the first byte.
    addr: u64,
    /// Remote key.
    rkey: u32,
    /// Direction of the data.
    dir: Direction,
}

#[derive(Clone, Copy, Debug)]
struct MapRec {
    paddr: PhysAddr,
    buf: NonNull<[u8]>,
}

#[derive(Clone, Copy, Debug)]
struct Op {
    /// MULTI: first SGE and count in `sges`.
    sge_start: usize,
    sge_count: usize,
    remote_addr: u64,
    /// MR: pool slot and the generation it was handed out with, key to
    /// invalidate first, registration, data SGE.
    mr: usize,
    generation: u32,
    inv: Option<u32>,
    reg: Option<RegMrWr>,
    mr_sge: Sge,
}

impl Op {
    const EMPTY: Op = Op {
        sge_start: 0,
        sge_count: 0,
        remote_addr: 0,
        mr: 0,
        generation: 0,
        inv: None,
        reg: None,
        mr_sge: Sge { addr: 0, length: 0, lkey: 0 },
    };
}

#[derive(Clone, Copy, Debug)]
struct Live {
    ty: CtxType,
    dir: Direction,
    bvec: bool,
    nr_ops: usize,
    rkey: u32,
    read_inv: bool,
    keys_done: bool,
    /// MR contexts: the identity of the pool the MRs came from (0 for the
    /// other kinds, which hold no MR).
    pool: u64,
}

/// One R/W context. See the module docs for capacities.
///
/// # Example
///
/// An RDMA READ of 9000 bytes into a local buffer through SGEs (no MR),
/// built but not posted: `post` hands the same chain to a QP (`Qp`
/// implements [`PostSend`]), and `destroy` unmaps once it completed.
///
/// ```
/// # use core::ptr::NonNull;
/// use irdma::rw::{DeviceAttrs, Direction, MrPool, RwCtx, RwQp, SgEntry};
/// use irdma::wr::{SendWr, WrOpcode};
/// use irdma_testkit::IdentityHal; // share() = identity, as on a unikernel without IOMMU
///
/// let attrs = DeviceAttrs::e810_roce(13, 4096, 0x100 /* local_dma_lkey */);
/// let qp = RwQp::new(attrs, false, 2); // the QP's max_send_sge = 2
/// let mut pool: MrPool<0, 0> = MrPool::new(); // no MRs: the SGE path
/// let mut local = vec![0u8; 9000];
/// let mut sg = [SgEntry::new(NonNull::from(&mut local[..]))];
/// let mut ctx: RwCtx<4, 4> = RwCtx::new();
/// // SAFETY: `local` stays put until `destroy`.
/// let wrs = unsafe {
///     let (remote, rkey) = (0x9000_0000, 0x1234);
///     ctx.init::<IdentityHal, 0, 0>(&qp, &mut pool, &mut sg, 0, remote, rkey, Direction::FromDevice)
/// }?;
/// assert_eq!(wrs, 1); // one buffer, one RDMA READ
/// let mut chain = [SendWr::default(); 4];
/// let n = ctx.wrs(&mut pool, 42, &[], &mut chain)?;
/// assert_eq!(n, 1);
/// let read = WrOpcode::RdmaRead { remote_addr: 0x9000_0000, rkey: 0x1234 };
/// assert_eq!(chain[0].opcode, read);
/// // SAFETY: nothing was posted, so the device is done with it.
/// unsafe { ctx.destroy::<IdentityHal, 0, 0>(&mut pool, &mut sg) }?;
/// # Ok::<(), irdma::rw::RwError>(())
/// ```
pub struct RwCtx<const MAX_SGE: usize, const MAX_OPS: usize> {
    live: Option<Live>,
    single: Sge,
    single_remote: u64,
    single_map: Option<MapRec>,
    iova: Option<(u64, u64)>,
    sges: [Sge; MAX_SGE],
    maps: [Option<MapRec>; MAX_SGE],
    nmaps: usize,
    ops: [Op; MAX_OPS],
}

// SAFETY: the raw buffer pointers are only handed back to `Hal::unshare` /
// `IovaMapper::destroy`; the context never dereferences them.
unsafe impl<const S: usize, const O: usize> Send for RwCtx<S, O> {}

impl<const S: usize, const O: usize> Default for RwCtx<S, O> {
    fn default() -> Self {
        Self::new()
    }
}

/// A sub-range of a buffer, without dereferencing it.
fn sub(buf: NonNull<[u8]>, off: usize, len: usize) -> Option<NonNull<[u8]>> {
    let end = off.checked_add(len)?;
    if end > buf.len() {
        return None;
    }
    let p = NonNull::new(buf.cast::<u8>().as_ptr().wrapping_add(off))?;
    Some(NonNull::slice_from_raw_parts(p, len))
}

/// Walks a bvec iterator by `bi_size` (spec §11.4: never past the array,
/// no zero-length segments), calling `f(i, segment)`. Returns the segment
/// count, or `InvalidArgument` when the array ends before `bi_size` bytes.
fn walk_bvec(
    bvecs: &[BioVec],
    iter: BvecIter,
    mut f: impl FnMut(usize, NonNull<[u8]>) -> Result<(), RwError>,
) -> Result<usize, RwError> {
    let mut left = iter.bi_size as usize;
    let mut idx = iter.bi_idx as usize;
    let mut done = iter.bi_bvec_done as usize;
    let mut n = 0;
    while left > 0 {
        let bv = bvecs.get(idx).ok_or(RwError::InvalidArgument)?;
        let avail = bv.buf.len().checked_sub(done).ok_or(RwError::InvalidArgument)?;
        let take = avail.min(left);
        if take > 0 {
            let seg = sub(bv.buf, done, take).ok_or(RwError::InvalidArgument)?;
            f(n, seg)?;
            n += 1;
            left -= take;
        }
        idx += 1;
        done = 0;
    }
    Ok(n)
}

/// Number of `RW_PAGE_SIZE` pages from page address `from` up to `end`.
fn pages_between(from: u64, end: u64) -> u64 {
    if end <= from { 0 } else { (end - from).div_ceil(RW_PAGE_SIZE) }
}

/// MR chunk being filled (LNX verbs.c:ib_sg_to_pages semantics: an MR maps
/// one virtually contiguous range; inner boundaries must be page aligned or
/// contiguous).
struct Chunk {
    op: usize,
    slot: usize,
    cap: u64,
    iova: u64,
    len: u64,
    last_end: u64,
    last_page: u64,
}

impl Chunk {
    /// Adds the segment `addr..end` (`len` bytes) to this MR if its pages
    /// fit: `Ok(false)` when the MR is full. A segment whose boundary with
    /// the previous one is not page aligned must continue it exactly (a hole
    /// cannot be mapped: `InvalidArgument`).
    fn extend<const N: usize, const P: usize>(
        &mut self,
        pool: &mut MrPool<N, P>,
        addr: u64,
        len: u64,
        end: u64,
    ) -> Result<bool, RwError> {
        let ps = RW_PAGE_SIZE;
        let in_page = ps - 1;
        let from = if self.last_end & in_page != 0 || addr & in_page != 0 {
            if self.last_end != addr {
                return Err(RwError::InvalidArgument);
            }
            self.last_page.checked_add(ps).ok_or(RwError::InvalidArgument)?
        } else {
            addr
        };
        let need = pages_between(from, end);
        let have = pool.npages(self.slot) as u64;
        if have + need > self.cap {
            return Ok(false);
        }
        for p in 0..need {
            if !pool.push_page(self.slot, from + p * ps) {
                return Err(RwError::NoCapacity);
            }
        }
        if need > 0 {
            self.last_page = from + (need - 1) * ps;
        }
        self.len += len;
        self.last_end = end;
        Ok(true)
    }
}

impl<const MAX_SGE: usize, const MAX_OPS: usize> RwCtx<MAX_SGE, MAX_OPS> {
    /// An empty context.
    pub const fn new() -> Self {
        RwCtx {
            live: None,
            single: Sge { addr: 0, length: 0, lkey: 0 },
            single_remote: 0,
            single_map: None,
            iova: None,
            sges: [Sge { addr: 0, length: 0, lkey: 0 }; MAX_SGE],
            maps: [None; MAX_SGE],
            nmaps: 0,
            ops: [Op::EMPTY; MAX_OPS],
        }
    }

    /// The context's type, while initialised.
    pub fn ctx_type(&self) -> Option<CtxType> {
        self.live.map(|l| l.ty)
    }

    /// RDMA READ/WRITE WRs (not counting LOCAL_INV/REG_MR), while initialised.
    pub fn nr_ops(&self) -> usize {
        self.live.map_or(0, |l| l.nr_ops)
    }

    /// Buffers this context itself holds mapped (bvec paths; the scatterlist
    /// path's mappings live in the caller's [`SgEntry`]s). IOVA counts as one.
    pub fn live_mappings(&self) -> usize {
        self.nmaps + usize::from(self.single_map.is_some()) + usize::from(self.iova.is_some())
    }

    /// WRs `wrs`/`post` produce, not counting a chain WR.
    pub fn chain_len(&self) -> usize {
        match self.live {
            None => 0,
            Some(l) if l.ty == CtxType::Mr => {
                self.ops.iter().take(l.nr_ops).map(|o| usize::from(o.inv.is_some()) + 2).sum()
            }
            Some(l) => l.nr_ops,
        }
    }

    fn reset(&mut self) {
        self.live = None;
        self.single_map = None;
        self.iova = None;
        self.nmaps = 0;
    }

    /// `rdma_rw_ctx_init` (spec §7.2): maps the scatter list `sg` through
    /// `H::share`, skips `sg_offset` bytes, and prepares the WRs for a
    /// transfer to/from `remote_addr`/`rkey`. Returns the number of WRs
    /// the context will post.
    ///
    /// Errors: [`RwError::NothingToTransfer`] when nothing is left after the
    /// offset (checked before mapping; spec §11.1), [`RwError::MapFailed`],
    /// [`RwError::PoolEmpty`] (iWARP READ / `force_mr`: no fallback),
    /// [`RwError::NoCapacity`], [`RwError::InvalidArgument`],
    /// [`RwError::Busy`]. On any error nothing stays mapped or taken.
    ///
    /// # Safety
    ///
    /// Every `sg[i].buf` must be valid for the direction's access (read for
    /// [`Direction::ToDevice`], write for [`Direction::FromDevice`]) and not
    /// moved or freed until [`RwCtx::destroy`] has been called with the same
    /// `sg`, after the device is done with the transfer. Every MR of `pool`
    /// must be held by no other pool and be mapped or registered by nothing
    /// but this pool's contexts while the pool holds it (as `ib_mr_pool`
    /// owns `qp->rdma_mrs`): [`RwCtx::post`] rewrites an MR's page list,
    /// and a registration of the same MR still in use elsewhere would then
    /// reach these pages. [`MrPool::init`] refuses the same MR twice in one
    /// pool.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn init<H: Hal, const N: usize, const P: usize>(
        &mut self,
        qp: &RwQp,
        pool: &mut MrPool<N, P>,
        sg: &mut [SgEntry],
        sg_offset: u32,
        remote_addr: u64,
        rkey: u32,
        dir: Direction,
    ) -> Result<usize, RwError> {
        if self.live.is_some() {
            return Err(RwError::Busy);
        }
        if sg.iter().any(|e| e.dma.is_some()) {
            return Err(RwError::Busy);
        }
        // Skip whole entries covered by the offset; nothing left is an error
        // up front (spec §7.2 step 2, §11.1).
        let mut off = u64::from(sg_offset);
        let mut first = 0;
        while let Some(e) = sg.get(first) {
            let len = e.buf.len() as u64;
            if off < len {
                break;
            }
            off -= len;
            first += 1;
        }
        if first >= sg.len() {
            return Err(RwError::NothingToTransfer);
        }
        let bdir = dir.buffer_direction();
        // Map the whole table (spec §7.2 step 1).
        for i in 0..sg.len() {
            let Some(e) = sg.get_mut(i) else { break };
            // SAFETY: the caller guarantees the buffer stays valid until
            // `destroy`, which unshares it.
            match unsafe { H::share(e.buf, bdir) } {
                Ok(pa) => e.dma = Some(pa),
                Err(_) => {
                    // SAFETY: exactly the entries mapped above.
                    unsafe { unmap_sg::<H>(sg, bdir) };
                    return Err(RwError::MapFailed);
                }
            }
        }
        self.reset();
        let to = Remote { addr: remote_addr, rkey, dir };
        let used = sg.get(first..).unwrap_or(&[]);
        let cnt = used.len();
        let seg = |i: usize| -> Option<(u64, u64)> {
            let e = used.get(i)?;
            let pa = e.dma?;
            let len = e.buf.len() as u64;
            if i == 0 { Some((pa.wrapping_add(off), len - off)) } else { Some((pa, len)) }
        };
        let r = self.choose_sg(qp, pool, cnt, &seg, to);
        match r {
            Ok(n) => Ok(n),
            Err(e) => {
                self.reset();
                // SAFETY: everything mapped above, nothing handed out yet.
                unsafe { unmap_sg::<H>(sg, bdir) };
                Err(e)
            }
        }
    }

    fn choose_sg<const N: usize, const P: usize>(
        &mut self,
        qp: &RwQp,
        pool: &mut MrPool<N, P>,
        cnt: usize,
        seg: &dyn Fn(usize) -> Option<(u64, u64)>,
        to: Remote,
    ) -> Result<usize, RwError> {
        // spec §7.2 step 3 / §7.9.
        if io_needs_mr(&qp.dev, qp.force_mr, to.dir, cnt) {
            match self.build_mr(qp, pool, cnt, seg, to, false) {
                Err(RwError::PoolEmpty) if !qp.dev.rdma_protocol_iwarp && !qp.force_mr => {}
                r => return r,
            }
        }
        if cnt > 1 {
            if cnt > MAX_SGE {
                return Err(RwError::NoCapacity);
            }
            let lkey = qp.dev.local_dma_lkey;
            for i in 0..cnt {
                let (addr, len) = seg(i).ok_or(RwError::InvalidArgument)?;
                let length = u32::try_from(len).map_err(|_| RwError::InvalidArgument)?;
                let s = self.sges.get_mut(i).ok_or(RwError::NoCapacity)?;
                *s = Sge { addr, length, lkey };
            }
            self.split_multi(qp, cnt, to, false)
        } else {
            let (addr, len) = seg(0).ok_or(RwError::InvalidArgument)?;
            let length = u32::try_from(len).map_err(|_| RwError::InvalidArgument)?;
            self.single = Sge { addr, length, lkey: qp.dev.local_dma_lkey };
            self.single_remote = to.addr;
            self.set_live(CtxType::SingleWr, to, false, 1, false);
            Ok(1)
        }
    }

    fn set_live(&mut self, ty: CtxType, to: Remote, bvec: bool, nr_ops: usize, read_inv: bool) {
        let (dir, rkey) = (to.dir, to.rkey);
        self.live = Some(Live { ty, dir, bvec, nr_ops, rkey, read_inv, keys_done: false, pool: 0 });
    }

    /// The multi-WR split of `cnt` entries (spec §7.2
    /// rdma_rw_init_map_wrs): the SGEs per WR the QP allows for `dir` and
    /// the number of WRs; refused when the QP allows none, or when this
    /// context cannot hold the entries or the WRs.
    fn multi_shape(qp: &RwQp, dir: Direction, cnt: usize) -> Result<(usize, usize), RwError> {
        let max_sge = match dir {
            Direction::ToDevice => qp.max_write_sge,
            Direction::FromDevice => qp.max_read_sge,
        } as usize;
        if max_sge == 0 {
            return Err(RwError::InvalidArgument);
        }
        let nr_ops = cnt.div_ceil(max_sge);
        if nr_ops > MAX_OPS || cnt > MAX_SGE {
            return Err(RwError::NoCapacity);
        }
        Ok((max_sge, nr_ops))
    }

    /// Multi-WR split of `sges[..cnt]` (spec §7.2 rdma_rw_init_map_wrs).
    fn split_multi(
        &mut self,
        qp: &RwQp,
        cnt: usize,
        to: Remote,
        bvec: bool,
    ) -> Result<usize, RwError> {
        let (max_sge, nr_ops) = Self::multi_shape(qp, to.dir, cnt)?;
        let mut ra = to.addr;
        for k in 0..nr_ops {
            let start = k * max_sge;
            let count = max_sge.min(cnt - start);
            let bytes: u64 = self
                .sges
                .get(start..start + count)
                .ok_or(RwError::NoCapacity)?
                .iter()
                .map(|s| u64::from(s.length))
                .sum();
            let op = self.ops.get_mut(k).ok_or(RwError::NoCapacity)?;
            *op = Op { sge_start: start, sge_count: count, remote_addr: ra, ..Op::EMPTY };
            ra = ra.wrapping_add(bytes);
        }
        self.set_live(CtxType::MultiWr, to, bvec, nr_ops, false);
        Ok(nr_ops)
    }

    /// MR path (spec §7.4): fills MRs by pages (spec §11.7), one
    /// [LOCAL_INV] + REG_MR + RDMA WR per MR. On error every MR taken is
    /// returned to the pool.
    fn build_mr<const N: usize, const P: usize>(
        &mut self,
        qp: &RwQp,
        pool: &mut MrPool<N, P>,
        cnt: usize,
        seg: &dyn Fn(usize) -> Option<(u64, u64)>,
        to: Remote,
        bvec: bool,
    ) -> Result<usize, RwError> {
        let mut nops = 0usize;
        let r = self.fill_mrs(qp, pool, cnt, seg, &mut nops);
        let r = r.and_then(|()| self.build_reg(qp, pool, nops, to, bvec));
        if r.is_err() {
            // Return in reverse order, as rw.c's error path does. Each was
            // taken just now with this generation: the puts succeed.
            for k in (0..nops).rev() {
                if let Some(op) = self.ops.get(k) {
                    let _ = pool.put(op.mr, op.generation);
                }
            }
        }
        r
    }

    /// The registration WRs of the `nops` MRs `fill_mrs` took; binds the
    /// context to `pool`.
    fn build_reg<const N: usize, const P: usize>(
        &mut self,
        qp: &RwQp,
        pool: &MrPool<N, P>,
        nops: usize,
        to: Remote,
        bvec: bool,
    ) -> Result<usize, RwError> {
        // iWARP needs REMOTE_WRITE on the local MR for READ responses
        // (spec §7.4, rw.c:rdma_rw_init_reg_wr).
        let access = if qp.dev.rdma_protocol_iwarp {
            Access::LOCAL_WRITE | Access::REMOTE_WRITE
        } else {
            Access::LOCAL_WRITE
        };
        let read_inv = to.dir == Direction::FromDevice && qp.dev.cap_read_inv;
        let mut ra = to.addr;
        let mut total = 0usize;
        for k in 0..nops {
            let Some(op) = self.ops.get_mut(k) else { break };
            let mr = pool.mr(op.mr).ok_or(RwError::InvalidArgument)?;
            op.inv = if pool.need_inval(op.mr) { Some(pool.key(op.mr)) } else { None };
            // Every page count goes through the MR's PBL: a FAST_REG WR
            // carries LPBLSIZE 1 (level 1) or 3 (level 2) and leaves PBLADDR
            // 0 (spec data-path §1.6, FAST REGISTER), so a level-0
            // registration would name no page at all (the model refuses it
            // with AE 0x20A; issue #19).
            let pbl_level = mr.pbl_level;
            if let Some(reg) = op.reg.as_mut() {
                reg.access = access;
                reg.pbl_level = pbl_level;
                reg.first_pble_index = mr.first_pble_index;
                reg.key = mr.key;
            }
            op.remote_addr = ra;
            op.mr_sge.lkey = mr.key;
            ra = ra.wrapping_add(u64::from(op.mr_sge.length));
            total += usize::from(op.inv.is_some()) + 2;
        }
        self.set_live(CtxType::Mr, to, bvec, nops, read_inv);
        if let Some(live) = self.live.as_mut() {
            live.pool = pool.id();
        }
        Ok(total)
    }

    fn fill_mrs<const N: usize, const P: usize>(
        &mut self,
        qp: &RwQp,
        pool: &mut MrPool<N, P>,
        cnt: usize,
        seg: &dyn Fn(usize) -> Option<(u64, u64)>,
        nops: &mut usize,
    ) -> Result<(), RwError> {
        let ppm = qp.pages_per_mr();
        if ppm == 0 {
            return Err(RwError::InvalidArgument);
        }
        let mut cur: Option<Chunk> = None;
        for i in 0..cnt {
            let (mut addr, mut len) = seg(i).ok_or(RwError::InvalidArgument)?;
            while len > 0 {
                let end = addr.checked_add(len).ok_or(RwError::InvalidArgument)?;
                if let Some(c) = cur.as_mut() {
                    if c.extend(pool, addr, len, end)? {
                        break;
                    }
                    // Full: close this MR, the segment starts the next one.
                    self.close(&*c, pool)?;
                    cur = None;
                }
                // Open a new MR with this segment first.
                let (mut c, need) = self.open_chunk(pool, ppm, nops, addr, end)?;
                if need <= c.cap {
                    c.len = len;
                    c.last_end = end;
                    cur = Some(c);
                    break;
                }
                // One segment larger than an MR: this MR ends on a page
                // boundary and the rest starts the next MR.
                let cut = (addr & !(RW_PAGE_SIZE - 1)) + c.cap * RW_PAGE_SIZE;
                let part = cut - addr;
                c.len = part;
                c.last_end = cut;
                self.close(&c, pool)?;
                addr = cut;
                len -= part;
            }
        }
        if let Some(c) = cur.as_ref() {
            self.close(c, pool)?;
        }
        if *nops == 0 {
            return Err(RwError::InvalidArgument);
        }
        Ok(())
    }

    /// Takes the next MR of the pool for a chunk starting at `addr`, records
    /// its op, and pushes the pages of `addr..end` that fit; returns the
    /// chunk and how many pages the whole range needs.
    fn open_chunk<const N: usize, const P: usize>(
        &mut self,
        pool: &mut MrPool<N, P>,
        ppm: u32,
        nops: &mut usize,
        addr: u64,
        end: u64,
    ) -> Result<(Chunk, u64), RwError> {
        if *nops >= MAX_OPS {
            return Err(RwError::NoCapacity);
        }
        let (slot, generation) = pool.get().ok_or(RwError::PoolEmpty)?;
        if let Some(op) = self.ops.get_mut(*nops) {
            *op = Op { mr: slot, generation, ..Op::EMPTY };
        }
        *nops += 1;
        pool.clear_pages(slot);
        let cap = pool.page_cap(slot, ppm) as u64;
        if cap == 0 {
            return Err(RwError::InvalidArgument);
        }
        let page0 = addr & !(RW_PAGE_SIZE - 1);
        let need = pages_between(page0, end);
        let take_pages = need.min(cap);
        for p in 0..take_pages {
            if !pool.push_page(slot, page0 + p * RW_PAGE_SIZE) {
                return Err(RwError::NoCapacity);
            }
        }
        let c = Chunk {
            op: *nops - 1,
            slot,
            cap,
            iova: addr,
            len: 0,
            last_end: 0,
            last_page: page0 + (take_pages.max(1) - 1) * RW_PAGE_SIZE,
        };
        Ok((c, need))
    }

    /// Records a finished MR chunk in its op.
    fn close<const N: usize, const P: usize>(
        &mut self,
        c: &Chunk,
        pool: &MrPool<N, P>,
    ) -> Result<(), RwError> {
        let length = u32::try_from(c.len).map_err(|_| RwError::InvalidArgument)?;
        let key = pool.key(c.slot);
        let op = self.ops.get_mut(c.op).ok_or(RwError::NoCapacity)?;
        op.mr_sge = Sge { addr: c.iova, length, lkey: key };
        op.reg = Some(RegMrWr {
            key,
            access: Access::LOCAL_WRITE,
            iova: c.iova,
            length: c.len,
            page_size: PageSize::Size4K,
            first_pble_index: 0,
            pbl_level: 0,
        });
        Ok(())
    }

    /// `rdma_rw_ctx_init_bvec` (spec §7.3): the transfer described by
    /// `iter` over `bvecs`, walked by `bi_size` (spec §11.4). `nr_bvec` is the
    /// caller's segment count used by the decisions as in Linux; the walk
    /// may yield fewer segments (a short `bi_size`), never more
    /// ([`RwError::InvalidArgument`]). `iova` is the platform IOMMU, or
    /// [`NoIova`].
    ///
    /// Errors: [`RwError::InvalidArgument`] (zero `nr_bvec`/`bi_size`, an
    /// iterator leaving the array), [`RwError::MapFailed`] (after unmapping
    /// what was mapped), [`RwError::PoolEmpty`] (no fallback on this path),
    /// [`RwError::NoCapacity`], [`RwError::Iova`], [`RwError::Busy`].
    ///
    /// # Safety
    ///
    /// Every buffer the iterator covers must be valid for the direction's
    /// access and not moved or freed until [`RwCtx::destroy_bvec`] has
    /// been called, after the device is done with the transfer; `pool`'s
    /// MRs as for [`RwCtx::init`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn init_bvec<H: Hal, I: IovaMapper, const N: usize, const P: usize>(
        &mut self,
        qp: &RwQp,
        pool: &mut MrPool<N, P>,
        iova: &mut I,
        bvecs: &[BioVec],
        nr_bvec: usize,
        iter: BvecIter,
        remote_addr: u64,
        rkey: u32,
        dir: Direction,
    ) -> Result<usize, RwError> {
        if self.live.is_some() {
            return Err(RwError::Busy);
        }
        if nr_bvec == 0 || iter.bi_size == 0 {
            return Err(RwError::InvalidArgument);
        }
        let segs = walk_bvec(bvecs, iter, |_, _| Ok(()))?;
        if segs > nr_bvec || segs == 0 {
            return Err(RwError::InvalidArgument);
        }
        self.reset();
        let to = Remote { addr: remote_addr, rkey, dir };
        let lkey = qp.dev.local_dma_lkey;
        let iwarp_read = dir == Direction::FromDevice && qp.dev.rdma_protocol_iwarp;
        // spec §7.3 order of decisions.
        if iwarp_read || qp.force_mr {
            // SAFETY: forwarded caller contract.
            return unsafe { self.mr_bvec::<H, N, P>(qp, pool, bvecs, iter, segs, to) };
        }
        if nr_bvec == 1 {
            // SAFETY: forwarded caller contract.
            return unsafe { self.bvec_single::<H>(bvecs, iter, to, lkey) };
        }
        if !qp.dev.uses_virt_dma
            && let Some(r) = self.bvec_iova(iova, bvecs, iter, to, lkey)
        {
            return r;
        }
        if io_needs_mr(&qp.dev, qp.force_mr, dir, nr_bvec) {
            // SAFETY: forwarded caller contract.
            return unsafe { self.mr_bvec::<H, N, P>(qp, pool, bvecs, iter, segs, to) };
        }
        // SAFETY: forwarded caller contract.
        unsafe { self.bvec_multi::<H>(qp, bvecs, iter, segs, to) }
    }

    /// `init_bvec` with one bvec: one WR, one SGE, the segment mapped
    /// (rw.c `rdma_rw_init_single_wr_bvec`).
    ///
    /// # Safety
    ///
    /// As [`RwCtx::init_bvec`].
    unsafe fn bvec_single<H: Hal>(
        &mut self,
        bvecs: &[BioVec],
        iter: BvecIter,
        to: Remote,
        lkey: u32,
    ) -> Result<usize, RwError> {
        let bdir = to.dir.buffer_direction();
        let mut rec = None;
        walk_bvec(bvecs, iter, |_, s| {
            // SAFETY: caller contract; unshared by `destroy_bvec`.
            let pa = unsafe { H::share(s, bdir) }.map_err(|_| RwError::MapFailed)?;
            rec = Some(MapRec { paddr: pa, buf: s });
            Ok(())
        })?;
        let rec = rec.ok_or(RwError::InvalidArgument)?;
        self.single = Sge { addr: rec.paddr, length: iter.bi_size, lkey };
        self.single_remote = to.addr;
        self.single_map = Some(rec);
        self.set_live(CtxType::SingleWr, to, true, 1, false);
        Ok(1)
    }

    /// `init_bvec` through one IOVA range linking every segment (rw.c
    /// `rdma_rw_init_iova`); `None` when the mapper has no range, so the
    /// caller goes on with the next way.
    fn bvec_iova<I: IovaMapper>(
        &mut self,
        iova: &mut I,
        bvecs: &[BioVec],
        iter: BvecIter,
        to: Remote,
        lkey: u32,
    ) -> Option<Result<usize, RwError>> {
        let bdir = to.dir.buffer_direction();
        let mut first = None;
        let r = walk_bvec(bvecs, iter, |i, s| {
            if i == 0 {
                first = Some(s);
            }
            Ok(())
        });
        let first = match r.and_then(|_| first.ok_or(RwError::InvalidArgument)) {
            Ok(f) => f,
            Err(e) => return Some(Err(e)),
        };
        let addr = iova.try_alloc(first, u64::from(iter.bi_size), bdir)?;
        let mut linked = 0u64;
        let r = walk_bvec(bvecs, iter, |_, s| {
            iova.link(addr, linked, s, bdir).map_err(RwError::Iova)?;
            linked += s.len() as u64;
            Ok(())
        });
        let r = r.and_then(|_| iova.sync(addr, linked).map_err(RwError::Iova));
        if let Err(e) = r {
            iova.destroy(addr, linked, bdir);
            return Some(Err(e));
        }
        self.iova = Some((addr, linked));
        self.single = Sge { addr, length: iter.bi_size, lkey };
        self.single_remote = to.addr;
        self.set_live(CtxType::Iova, to, true, 1, false);
        Some(Ok(1))
    }

    /// `init_bvec` as a chain of RDMA WRs, each segment mapped (rw.c
    /// `rdma_rw_init_map_wrs_bvec`).
    ///
    /// # Safety
    ///
    /// As [`RwCtx::init_bvec`].
    unsafe fn bvec_multi<H: Hal>(
        &mut self,
        qp: &RwQp,
        bvecs: &[BioVec],
        iter: BvecIter,
        segs: usize,
        to: Remote,
    ) -> Result<usize, RwError> {
        let lkey = qp.dev.local_dma_lkey;
        // Multi-WR: capacity first (Linux allocates before mapping).
        Self::multi_shape(qp, to.dir, segs)?;
        // SAFETY: forwarded caller contract.
        unsafe {
            self.with_mapped::<H>(bvecs, iter, to.dir, |ctx| {
                for i in 0..ctx.nmaps {
                    let rec = ctx.maps.get(i).copied().flatten();
                    if let (Some(rec), Some(s)) = (rec, ctx.sges.get_mut(i)) {
                        *s = Sge { addr: rec.paddr, length: rec.buf.len() as u32, lkey };
                    }
                }
                ctx.split_multi(qp, segs, to, true)
            })
        }
    }

    /// Maps every segment into `maps`, then builds the WRs over them with
    /// `build`; when that fails, unmaps the segments again and leaves the
    /// context empty (the shared frame of `bvec_multi` and `mr_bvec`).
    ///
    /// # Safety
    /// As [`RwCtx::init_bvec`].
    unsafe fn with_mapped<H: Hal>(
        &mut self,
        bvecs: &[BioVec],
        iter: BvecIter,
        dir: Direction,
        build: impl FnOnce(&mut Self) -> Result<usize, RwError>,
    ) -> Result<usize, RwError> {
        let bdir = dir.buffer_direction();
        // SAFETY: forwarded caller contract.
        unsafe { self.map_segments::<H>(bvecs, iter, bdir)? };
        let r = build(self);
        if r.is_err() {
            // SAFETY: mapped just above, nothing handed out.
            unsafe { self.unmap_maps::<H>(bdir) };
            self.reset();
        }
        r
    }

    /// Maps every segment into `maps`; on failure unmaps them all.
    ///
    /// # Safety
    /// As [`RwCtx::init_bvec`].
    unsafe fn map_segments<H: Hal>(
        &mut self,
        bvecs: &[BioVec],
        iter: BvecIter,
        bdir: BufferDirection,
    ) -> Result<(), RwError> {
        self.nmaps = 0;
        let maps = &mut self.maps;
        let nmaps = &mut self.nmaps;
        let r = walk_bvec(bvecs, iter, |i, s| {
            let slot = maps.get_mut(i).ok_or(RwError::NoCapacity)?;
            // SAFETY: caller contract; unshared by `destroy_bvec`.
            let pa = unsafe { H::share(s, bdir) }.map_err(|_| RwError::MapFailed)?;
            *slot = Some(MapRec { paddr: pa, buf: s });
            *nmaps = i + 1;
            Ok(())
        });
        if let Err(e) = r {
            // SAFETY: exactly the segments mapped above.
            unsafe { self.unmap_maps::<H>(bdir) };
            return Err(e);
        }
        Ok(())
    }

    /// # Safety
    /// The device must be done with the mapped segments.
    unsafe fn unmap_maps<H: Hal>(&mut self, bdir: BufferDirection) {
        for m in self.maps.iter_mut().take(self.nmaps) {
            if let Some(rec) = m.take() {
                // SAFETY: `rec` is one live share made by this context.
                unsafe { H::unshare(rec.paddr, rec.buf, bdir) };
            }
        }
        self.nmaps = 0;
    }

    /// MR bvec path (spec §7.3 rdma_rw_init_mr_wrs_bvec).
    ///
    /// # Safety
    /// As [`RwCtx::init_bvec`].
    unsafe fn mr_bvec<H: Hal, const N: usize, const P: usize>(
        &mut self,
        qp: &RwQp,
        pool: &mut MrPool<N, P>,
        bvecs: &[BioVec],
        iter: BvecIter,
        segs: usize,
        to: Remote,
    ) -> Result<usize, RwError> {
        if segs > MAX_SGE {
            return Err(RwError::NoCapacity);
        }
        // SAFETY: forwarded caller contract.
        unsafe {
            self.with_mapped::<H>(bvecs, iter, to.dir, |ctx| {
                let maps = ctx.maps;
                let seg = |i: usize| -> Option<(u64, u64)> {
                    let rec = maps.get(i).copied().flatten()?;
                    Some((rec.paddr, rec.buf.len() as u64))
                };
                ctx.build_mr(qp, pool, segs, &seg, to, true)
            })
        }
    }

    /// `rdma_rw_update_lkey` for every MR, once per context (spec §7.6;
    /// a second `wrs` does not bump again, spec §11.8).
    fn update_keys<const N: usize, const P: usize>(&mut self, pool: &mut MrPool<N, P>) {
        let Some(live) = self.live.as_mut() else { return };
        if live.ty != CtxType::Mr || live.keys_done {
            return;
        }
        live.keys_done = true;
        let read_inv = live.read_inv;
        for op in self.ops.iter_mut().take(live.nr_ops) {
            let key = pool.bump_key(op.mr);
            // READ_WITH_INV invalidates the key just registered (spec §11.2),
            // so the MR needs no LOCAL_INV before its next use.
            pool.set_need_inval(op.mr, !read_inv);
            op.mr_sge.lkey = key;
            if let Some(reg) = op.reg.as_mut() {
                reg.key = key;
            }
        }
    }

    /// Emits the chain in order; the last rw WR carries `wr_id` and is
    /// signaled unless `has_chain`.
    fn emit<'a>(
        &'a self,
        wr_id: u64,
        has_chain: bool,
        mut f: impl FnMut(SendWr<'a>) -> Result<(), RwError>,
    ) -> Result<(), RwError> {
        let Some(live) = self.live else { return Err(RwError::WrongContext) };
        let total = self.chain_len();
        let mut n = 0usize;
        let mut push = |mut wr: SendWr<'a>| {
            n += 1;
            if n == total && !has_chain {
                wr.wr_id = wr_id;
                wr.flags = SendFlags::SIGNALED;
            }
            f(wr)
        };
        let rdma = |remote_addr: u64, inv: Option<u32>| match live.dir {
            Direction::ToDevice => WrOpcode::RdmaWrite { remote_addr, rkey: live.rkey },
            Direction::FromDevice => match inv {
                Some(inv_key) => WrOpcode::RdmaReadInv { remote_addr, rkey: live.rkey, inv_key },
                None => WrOpcode::RdmaRead { remote_addr, rkey: live.rkey },
            },
        };
        let wr = |opcode: WrOpcode, sg_list: &'a [Sge]| SendWr {
            wr_id: 0,
            opcode,
            flags: SendFlags::NONE,
            sg_list,
        };
        match live.ty {
            CtxType::SingleWr | CtxType::Iova => {
                push(wr(rdma(self.single_remote, None), core::slice::from_ref(&self.single)))?;
            }
            CtxType::MultiWr => {
                for op in self.ops.iter().take(live.nr_ops) {
                    let sges = self
                        .sges
                        .get(op.sge_start..op.sge_start + op.sge_count)
                        .ok_or(RwError::NoCapacity)?;
                    push(wr(rdma(op.remote_addr, None), sges))?;
                }
            }
            CtxType::Mr => {
                for op in self.ops.iter().take(live.nr_ops) {
                    if let Some(inv_key) = op.inv {
                        push(wr(WrOpcode::LocalInv { inv_key }, &[]))?;
                    }
                    let reg = op.reg.ok_or(RwError::WrongContext)?;
                    push(wr(WrOpcode::RegMr(reg), &[]))?;
                    let inv = if live.read_inv { Some(reg.key) } else { None };
                    push(wr(rdma(op.remote_addr, inv), core::slice::from_ref(&op.mr_sge)))?;
                }
            }
        }
        Ok(())
    }

    /// `rdma_rw_ctx_signature_init` (spec §7.5) on E810: checks the sizes
    /// as Linux does ([`RwError::InvalidArgument`] when `sg_cnt` or
    /// `prot_sg_cnt` exceeds the pages of one MR), then finds the QP's
    /// integrity MR pool empty ([`RwError::PoolEmpty`]): that pool is only
    /// filled for integrity QPs, and E810 refuses those
    /// ([`super::rdma_rw_init_qp`]). Nothing is mapped or taken.
    pub fn signature_init(
        &mut self,
        qp: &RwQp,
        sg_cnt: usize,
        prot_sg_cnt: usize,
    ) -> Result<usize, RwError> {
        if self.live.is_some() {
            return Err(RwError::Busy);
        }
        let pages = qp.pages_per_mr() as usize;
        if sg_cnt > pages || prot_sg_cnt > pages {
            return Err(RwError::InvalidArgument);
        }
        Err(RwError::PoolEmpty)
    }

    /// `rdma_rw_ctx_signature_init` with its scatter lists, on E810, giving
    /// each error where rw.c gives it: `sg` or `prot_sg` longer than one MR's
    /// pages is [`RwError::InvalidArgument`] before anything is mapped;
    /// a failing mapping of `sg`, then of `prot_sg` (only when non-empty), is
    /// [`RwError::MapFailed`] with everything mapped so far released;
    /// context storage without room for the one op Linux allocates is
    /// [`RwError::NoCapacity`] (its kzalloc -ENOMEM); and otherwise the
    /// QP's empty integrity MR pool is [`RwError::PoolEmpty`] (-EAGAIN).
    /// Every path leaves nothing mapped and nothing taken.
    ///
    /// # Safety
    ///
    /// As [`RwCtx::init`]: the buffers must stay valid while mapped (they
    /// are unmapped again before this returns).
    pub unsafe fn signature_init_sg<H: Hal>(
        &mut self,
        qp: &RwQp,
        sg: &mut [SgEntry],
        prot_sg: &mut [SgEntry],
        dir: Direction,
    ) -> Result<usize, RwError> {
        if self.live.is_some() {
            return Err(RwError::Busy);
        }
        if sg.iter().chain(prot_sg.iter()).any(|e| e.dma.is_some()) {
            return Err(RwError::Busy);
        }
        let pages = qp.pages_per_mr() as usize;
        if sg.len() > pages || prot_sg.len() > pages {
            return Err(RwError::InvalidArgument);
        }
        let bdir = dir.buffer_direction();
        let mut failed = false;
        'map: for list in [&mut *sg, &mut *prot_sg] {
            for e in list.iter_mut() {
                // SAFETY: the caller keeps the buffer valid while mapped; it
                // is unshared below before returning.
                match unsafe { H::share(e.buf, bdir) } {
                    Ok(pa) => e.dma = Some(pa),
                    Err(_) => {
                        failed = true;
                        break 'map;
                    }
                }
            }
        }
        // SAFETY: exactly the entries mapped above; nothing was posted.
        unsafe {
            unmap_sg::<H>(prot_sg, bdir);
            unmap_sg::<H>(sg, bdir);
        }
        if failed {
            return Err(RwError::MapFailed);
        }
        if MAX_OPS == 0 {
            return Err(RwError::NoCapacity);
        }
        Err(RwError::PoolEmpty)
    }

    /// `rdma_rw_ctx_wrs` (spec §7.6): writes the chain into `out` and
    /// returns its length. With a non-empty `chain` it is appended and no
    /// rw WR is signaled; otherwise the last WR carries `wr_id` (the
    /// caller's cqe) and is signaled. The first call bumps the MR keys;
    /// later calls rebuild the same chain (spec §11.8). An MR context given
    /// another pool than its own is [`RwError::WrongPool`] (a stale entry
    /// [`RwError::StaleMr`]), before any key moves.
    pub fn wrs<'a, const N: usize, const P: usize>(
        &'a mut self,
        pool: &mut MrPool<N, P>,
        wr_id: u64,
        chain: &[SendWr<'a>],
        out: &mut [SendWr<'a>],
    ) -> Result<usize, RwError> {
        if self.live.is_none() {
            return Err(RwError::WrongContext);
        }
        self.check_pool(pool)?;
        let total = self.chain_len().checked_add(chain.len()).ok_or(RwError::NoCapacity)?;
        if out.len() < total {
            return Err(RwError::NoCapacity);
        }
        self.update_keys(pool);
        let this: &'a Self = self;
        let mut i = 0usize;
        this.emit(wr_id, !chain.is_empty(), |wr| {
            let slot = out.get_mut(i).ok_or(RwError::NoCapacity)?;
            *slot = wr;
            i += 1;
            Ok(())
        })?;
        for c in chain {
            let slot = out.get_mut(i).ok_or(RwError::NoCapacity)?;
            *slot = *c;
            i += 1;
        }
        Ok(i)
    }

    /// `rdma_rw_ctx_post` (spec §7.6): [`RwCtx::wrs`] and `post_send` of
    /// the chain (plus `chain`). The chain goes to the QP in batches of up
    /// to 16 WRs, in order; a refusal reports the index in the whole chain.
    /// The pool is checked as in [`RwCtx::wrs`] before any key moves or any
    /// page list is written.
    pub fn post<Q: PostSend, const N: usize, const P: usize>(
        &mut self,
        qp: &mut Q,
        pool: &mut MrPool<N, P>,
        wr_id: u64,
        chain: &[SendWr<'_>],
    ) -> Result<(), RwPostError<Q::Error>> {
        if self.live.is_none() {
            return Err(RwPostError::Rw(RwError::WrongContext));
        }
        self.check_pool(pool).map_err(RwPostError::Rw)?;
        self.update_keys(pool);
        if let Some(live) = self.live
            && live.ty == CtxType::Mr
        {
            for op in self.ops.iter().take(live.nr_ops) {
                let mr = pool.mr(op.mr).ok_or(RwPostError::Rw(RwError::InvalidArgument))?;
                // SAFETY: the pages are the ones `init`/`init_bvec` collected
                // from the caller's buffers, which stay valid for device
                // access until `destroy` under those functions' contract;
                // the REG_MR posted below grants the access the context asked for.
                // Under that contract no other pool or context uses the MR,
                // so no registration still in use reads the rewritten list.
                // `check_pool` above made sure `pool` is the one the MRs
                // came from and that this context still holds `op.mr` (its
                // hand-out generation), so the slot names this context's
                // MR and no other context's.
                unsafe { qp.map_mr_pages(&mr, pool.pages(op.mr)) }.map_err(RwPostError::Rw)?;
            }
        }
        let has_chain = !chain.is_empty();
        let total = self.chain_len().saturating_add(chain.len());
        let mut start = 0usize;
        // One buffer for every window, filled by push: no placeholder WRs
        // are written first (that initialisation was ~1.4 KB of immediate
        // stores on x86_64).
        let mut buf: heapless::Vec<SendWr<'_>, 16> = heapless::Vec::new();
        while start < total {
            // Rebuild the chain and keep the window [start, start + 16).
            buf.clear();
            let mut idx = 0usize;
            self.emit(wr_id, has_chain, |wr| {
                window_push(&mut buf, &mut idx, start, &wr);
                Ok(())
            })
            .map_err(RwPostError::Rw)?;
            for c in chain {
                window_push(&mut buf, &mut idx, start, c);
            }
            let n = buf.len();
            if n == 0 {
                break;
            }
            qp.post_send(&buf)
                .map_err(|(i, err)| RwPostError::Post { bad: start.saturating_add(i), err })?;
            start += n;
        }
        Ok(())
    }

    /// A context holding MRs is bound to the pool they came from, and each
    /// of its entries must still be that pool's current hand-out of the MR:
    /// [`RwError::WrongPool`] / [`RwError::StaleMr`] otherwise. Contexts
    /// holding no MR accept any pool (they never touch it).
    fn check_pool<const N: usize, const P: usize>(
        &self,
        pool: &MrPool<N, P>,
    ) -> Result<(), RwError> {
        let Some(live) = self.live else { return Err(RwError::WrongContext) };
        if live.ty != CtxType::Mr {
            return Ok(());
        }
        if live.pool != pool.id() {
            return Err(RwError::WrongPool);
        }
        for op in self.ops.iter().take(live.nr_ops) {
            pool.check(op.mr, op.generation)?;
        }
        Ok(())
    }

    /// Returns the context's MRs to the pool (forward order, as rw.c);
    /// checked first, so either all go back or none does.
    fn put_mrs<const N: usize, const P: usize>(
        &mut self,
        pool: &mut MrPool<N, P>,
    ) -> Result<(), RwError> {
        self.check_pool(pool)?;
        if let Some(live) = self.live
            && live.ty == CtxType::Mr
        {
            for op in self.ops.iter().take(live.nr_ops) {
                // Checked above; distinct slots, so none goes stale here.
                pool.put(op.mr, op.generation)?;
            }
        }
        Ok(())
    }

    /// `rdma_rw_ctx_destroy` (spec §7.7) for a context from
    /// [`RwCtx::init`]: returns its MRs and unmaps `sg`.
    /// [`RwError::WrongContext`] (nothing released) for a bvec context or an
    /// empty one (so also for a second destroy).
    ///
    /// An MR context must be given the pool it took its MRs from (Linux
    /// returns them to the QP's own pool, rw.c:rdma_rw_ctx_destroy): any
    /// other pool is [`RwError::WrongPool`] and an entry whose MR the pool no
    /// longer counts as this context's is [`RwError::StaleMr`]; on either
    /// nothing is released (no MR returned, nothing unmapped) and the context
    /// stays initialised, so a later destroy with the right pool releases
    /// everything. This is checked, not part of the `# Safety` contract.
    ///
    /// # Safety
    ///
    /// `sg` must be the slice given to `init`, and the device must be done
    /// with the transfer.
    pub unsafe fn destroy<H: Hal, const N: usize, const P: usize>(
        &mut self,
        pool: &mut MrPool<N, P>,
        sg: &mut [SgEntry],
    ) -> Result<(), RwError> {
        let Some(live) = self.live else { return Err(RwError::WrongContext) };
        if live.bvec {
            return Err(RwError::WrongContext);
        }
        self.put_mrs(pool)?;
        // SAFETY: caller contract: these are init's mappings, device done.
        unsafe { unmap_sg::<H>(sg, live.dir.buffer_direction()) };
        self.reset();
        Ok(())
    }

    /// `rdma_rw_ctx_destroy_bvec` (spec §7.7) for a context from
    /// [`RwCtx::init_bvec`]: returns its MRs and unmaps what it mapped
    /// (through `iova` for an IOVA context). [`RwError::WrongContext`]
    /// (nothing released) for a scatterlist context or an empty one;
    /// [`RwError::WrongPool`] / [`RwError::StaleMr`] (nothing released, the
    /// context stays initialised) as for [`RwCtx::destroy`].
    ///
    /// # Safety
    ///
    /// The device must be done with the transfer; `iova` must be the mapper
    /// given to `init_bvec`.
    pub unsafe fn destroy_bvec<H: Hal, I: IovaMapper, const N: usize, const P: usize>(
        &mut self,
        pool: &mut MrPool<N, P>,
        iova: &mut I,
    ) -> Result<(), RwError> {
        let Some(live) = self.live else { return Err(RwError::WrongContext) };
        if !live.bvec {
            return Err(RwError::WrongContext);
        }
        let bdir = live.dir.buffer_direction();
        self.put_mrs(pool)?;
        if let Some((addr, len)) = self.iova.take() {
            iova.destroy(addr, len, bdir);
        }
        if let Some(rec) = self.single_map.take() {
            // SAFETY: the one share made by init_bvec's single path.
            unsafe { H::unshare(rec.paddr, rec.buf, bdir) };
        }
        // SAFETY: device done (caller contract).
        unsafe { self.unmap_maps::<H>(bdir) };
        self.reset();
        Ok(())
    }
}

/// Unshares every mapped entry of `sg`.
///
/// # Safety
/// The device must be done with the buffers; each mapped entry's address
/// must come from `H::share` of its buffer.
unsafe fn unmap_sg<H: Hal>(sg: &mut [SgEntry], bdir: BufferDirection) {
    for e in sg.iter_mut() {
        if let Some(pa) = e.dma.take() {
            // SAFETY: per the function contract.
            unsafe { H::unshare(pa, e.buf, bdir) };
        }
    }
}

/// One WR of the rebuilt chain for [`RwCtx::post`]: WR number `*idx` goes
/// into the window when it is at or after `start` (a full window drops the
/// rest: they go in the next one). Out of line (code size: the WR copy and
/// the push were inlined at both call sites).
#[inline(never)]
fn window_push<'a>(
    buf: &mut heapless::Vec<SendWr<'a>, 16>,
    idx: &mut usize,
    start: usize,
    wr: &SendWr<'a>,
) {
    if *idx >= start {
        let _ = buf.push(*wr);
    }
    *idx += 1;
}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

impl<E: Display> Display for RwPostError<E> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            RwPostError::Rw(e) => e.fmt(f),
            RwPostError::Post { bad, err } => write!(f, "chain WR {bad} not posted: {err}"),
        }
    }
}

impl<E: Error + 'static> Error for RwPostError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            RwPostError::Rw(e) => Some(e),
            RwPostError::Post { err, .. } => Some(err),
        }
    }
}
