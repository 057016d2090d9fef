//! The QP's pool of fast-register MRs (`qp->rdma_mrs`; LNX mr_pool.c and
//! rw.c:rdma_rw_init_mrs / rdma_rw_cleanup_mrs, spec §7.8).
//!
//! Fixed capacity `N` MRs, each with room for `P` page addresses (the page
//! list `ib_map_mr_sg` fills). The MRs themselves are created by the caller
//! (the control path allocates the STag and PBLEs) and handed in as
//! [`FrMr`] values. Like mr_pool.c the pool is last-in-first-out: a returned
//! MR is the next one taken (spec §11.3).
//!
//! Contexts are bound to the pool they take MRs from: see [`MrPool`].

use core::sync::atomic::{AtomicU64, Ordering};

use super::attrs::{DeviceAttrs, RwError, can_use_mr};

/// The next pool identity; 0 is "never initialised" and is never handed out
/// (a u64 does not wrap in practice, and wrapping would not panic).
static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

/// A fast-register MR the caller created for the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FrMr {
    /// Current key (lkey = rkey = STag index << 8 | key byte).
    pub key: u32,
    /// Page-list capacity of the MR (`max_num_sg` it was allocated with).
    pub max_pages: u32,
    /// First PBLE of the MR's page list in the HMC PBLE pool: the level-1
    /// run's first entry, or the level-2 root's.
    pub first_pble_index: u32,
    /// PBL level the MR was set up with: 1, or 2 (a root of leaf indexes;
    /// its REG_MR WRs carry LPBLSIZE 3, verbs.c: irdma_post_send).
    pub pbl_level: u8,
}

#[derive(Clone, Copy)]
struct Slot<const P: usize> {
    mr: FrMr,
    /// The MR's key is still valid from its last registration and must be
    /// invalidated before the next one (`mr->need_inval`).
    need_inval: bool,
    pages: [u64; P],
    npages: usize,
    /// Bumped (wrapping) each time the MR is handed out.
    generation: u32,
    /// Handed out and not yet returned.
    taken: bool,
}

/// Fixed-capacity MR pool. `N` MRs of up to `P` pages each.
///
/// # Binding contexts to their pool
///
/// Linux cannot return an MR to the wrong pool: `rdma_rw_ctx_destroy` takes
/// the QP and puts the MRs on that QP's `qp->rdma_mrs` (LNX
/// rw.c:rdma_rw_ctx_destroy → mr_pool.c:ib_mr_pool_put). Here the pool is a
/// separate argument, so the binding is checked instead:
///
/// * every successful [`MrPool::init`] gives the pool a fresh identity from a
///   global counter (not its address: a pool may move, and another may be
///   put where it was), and a context that takes MRs records it;
///   [`RwCtx::wrs`], [`RwCtx::post`], [`RwCtx::destroy`] and
///   [`RwCtx::destroy_bvec`] given any other pool (another pool, a fresh one
///   in its place, an uninitialised one) fail with [`RwError::WrongPool`] and
///   touch nothing: no key moves, no page list is written, no MR is
///   returned, nothing is unmapped; the context keeps its MRs and can be
///   destroyed into its own pool. [`MrPool::cleanup`] (refused while a
///   context holds an MR) ends the identity; the next `init` makes a new one;
/// * every MR has a generation, bumped each time the pool hands it out; a
///   context's entry for an MR carries the generation it got, and a pool
///   refuses an entry whose MR is free or was handed out again since
///   ([`RwError::StaleMr`]), so one hand-out can be returned only once.
///
/// [`RwCtx::wrs`]: super::RwCtx::wrs
/// [`RwCtx::post`]: super::RwCtx::post
/// [`RwCtx::destroy`]: super::RwCtx::destroy
/// [`RwCtx::destroy_bvec`]: super::RwCtx::destroy_bvec
///
/// A context holding no MR (single-WR, multi-WR, IOVA) is bound to no pool.
///
/// The checks rely on two things safe code cannot do, shown here: a pool
/// cannot be duplicated (two values with one identity would accept each
/// other's contexts) —
///
/// ```compile_fail,E0599
/// use irdma::rw::MrPool;
/// let a: MrPool<1, 4> = MrPool::new();
/// let b = a.clone(); // no `Clone`: one identity, one pool
/// ```
///
/// — and a context cannot be duplicated (a copy kept after the original's
/// `destroy` would carry the same MR entries):
///
/// ```compile_fail,E0599
/// use irdma::rw::RwCtx;
/// let a: RwCtx<4, 4> = RwCtx::new();
/// let b = a.clone(); // no `Clone`: one holder per MR hand-out
/// ```
pub struct MrPool<const N: usize, const P: usize> {
    slots: [Slot<P>; N],
    len: usize,
    /// Free-list stack of slot indices; the top (`free[nfree - 1]`) is the
    /// list head mr_pool.c takes from and puts to.
    free: [u16; N],
    nfree: usize,
    /// This incarnation's identity (0: not initialised); see the type docs.
    id: u64,
}

impl<const N: usize, const P: usize> Default for MrPool<N, P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize, const P: usize> MrPool<N, P> {
    const EMPTY: Slot<P> = Slot {
        mr: FrMr { key: 0, max_pages: 0, first_pble_index: 0, pbl_level: 0 },
        need_inval: false,
        pages: [0; P],
        npages: 0,
        generation: 0,
        taken: false,
    };

    /// An empty pool (no MRs).
    pub const fn new() -> Self {
        MrPool { slots: [Self::EMPTY; N], len: 0, free: [0; N], nfree: 0, id: 0 }
    }

    /// `rdma_rw_init_mrs` for a regular QP: when MRs can be used on this
    /// device (`can_use_mr`), takes `max_rdma_ctxs` MRs from `mrs` (in
    /// order: the first is taken first); otherwise takes none. Fails with
    /// [`RwError::NoCapacity`] when `mrs` has fewer MRs or the pool has no
    /// room, [`RwError::Busy`] when the pool already holds MRs,
    /// [`RwError::InvalidArgument`] when two of the MRs taken name the same
    /// STag index (two contexts would then map and register one MR at once,
    /// the second map rewriting the page list the first transfer still
    /// uses). An MR must likewise be in no other pool and not be mapped
    /// directly while this pool holds it (see [`super::RwCtx::init`]).
    ///
    /// Each successful call gives the pool a new identity: contexts are bound
    /// to it (module docs).
    pub fn init(
        &mut self,
        dev: &DeviceAttrs,
        force_mr: bool,
        max_rdma_ctxs: u32,
        mrs: &[FrMr],
    ) -> Result<usize, RwError> {
        if self.len != 0 {
            return Err(RwError::Busy);
        }
        if !can_use_mr(dev, force_mr) {
            self.id = NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed);
            return Ok(0);
        }
        let n = max_rdma_ctxs as usize;
        if n > N || n > mrs.len() || n > usize::from(u16::MAX) {
            return Err(RwError::NoCapacity);
        }
        let taken = mrs.get(..n).unwrap_or(&[]);
        for (i, a) in taken.iter().enumerate() {
            if taken.iter().skip(i.saturating_add(1)).any(|b| b.key >> 8 == a.key >> 8) {
                return Err(RwError::InvalidArgument);
            }
        }
        for (i, (slot, mr)) in self.slots.iter_mut().zip(mrs.iter()).take(n).enumerate() {
            *slot = Slot { mr: *mr, ..Self::EMPTY };
            // `free` is a stack: MR 0 must end on top.
            if let Some(f) = self.free.get_mut(n - 1 - i) {
                *f = i as u16;
            }
        }
        self.len = n;
        self.nfree = n;
        self.id = NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed);
        Ok(n)
    }

    /// `rdma_rw_cleanup_mrs`: hands every MR back (for deregistration) through
    /// `out` and empties the pool. Refused with [`RwError::Busy`] while a
    /// context still holds an MR.
    pub fn cleanup(&mut self, mut out: impl FnMut(FrMr)) -> Result<(), RwError> {
        if self.nfree != self.len {
            return Err(RwError::Busy);
        }
        for slot in self.slots.iter().take(self.len) {
            out(slot.mr);
        }
        self.len = 0;
        self.nfree = 0;
        // Nothing is handed out; the next `init` is a new incarnation.
        self.id = 0;
        Ok(())
    }

    /// MRs in the pool (free or in use).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the pool holds no MR.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// MRs currently taken by contexts (`qp->mrs_used`).
    pub fn in_use(&self) -> usize {
        self.len.saturating_sub(self.nfree)
    }

    /// The MR in slot `idx` (allocation order), if any.
    pub fn mr(&self, idx: usize) -> Option<FrMr> {
        self.slots.get(..self.len)?.get(idx).map(|s| s.mr)
    }

    /// The page list last mapped into MR `idx`: what the REG_MR work request
    /// registers. [`super::RwCtx::post`] writes it into the MR's PBLEs
    /// (through [`super::PostSend::map_mr_pages`]) before it posts the
    /// REG_MR.
    pub fn pages(&self, idx: usize) -> &[u64] {
        match self.slots.get(..self.len).and_then(|s| s.get(idx)) {
            Some(s) => s.pages.get(..s.npages).unwrap_or(&[]),
            None => &[],
        }
    }

    /// Slot index whose MR has STag index `key >> 8`.
    pub fn index_of_key(&self, key: u32) -> Option<usize> {
        self.slots.get(..self.len)?.iter().position(|s| s.mr.key >> 8 == key >> 8)
    }

    /// This incarnation's identity (0 before the first [`MrPool::init`] and
    /// after [`MrPool::cleanup`]); contexts holding its MRs record it.
    pub(super) fn id(&self) -> u64 {
        self.id
    }

    /// `ib_mr_pool_get`: takes the head MR and bumps its generation.
    /// Returns the slot and the generation of this hand-out.
    pub(super) fn get(&mut self) -> Option<(usize, u32)> {
        let top = self.nfree.checked_sub(1)?;
        let idx = *self.free.get(top)?;
        let slot = self.slots.get_mut(usize::from(idx))?;
        slot.generation = slot.generation.wrapping_add(1);
        slot.taken = true;
        self.nfree = top;
        Some((usize::from(idx), slot.generation))
    }

    /// Whether `(idx, generation)` is a hand-out of this pool still out:
    /// [`RwError::StaleMr`] when the slot is not ours, is free, or was
    /// handed out again since.
    pub(super) fn check(&self, idx: usize, generation: u32) -> Result<(), RwError> {
        match self.slots.get(..self.len).and_then(|s| s.get(idx)) {
            Some(s) if s.taken && s.generation == generation => Ok(()),
            _ => Err(RwError::StaleMr),
        }
    }

    /// `ib_mr_pool_put`: returns the hand-out `(idx, generation)` to the
    /// head. A stale one (see [`MrPool::check`]: a second put, or a put after
    /// the MR went out again) is refused with [`RwError::StaleMr`] and
    /// changes nothing. The MR's page list is forgotten: those pages' mapping
    /// ended with the context, so no later [`super::RwCtx::post`] may map
    /// them again.
    pub(super) fn put(&mut self, idx: usize, generation: u32) -> Result<(), RwError> {
        self.check(idx, generation)?;
        // A taken slot means nfree < len, so the free stack has room.
        let f = self.free.get_mut(self.nfree).ok_or(RwError::StaleMr)?;
        *f = idx as u16;
        self.nfree += 1;
        if let Some(s) = self.slots.get_mut(idx) {
            s.taken = false;
        }
        self.clear_pages(idx);
        Ok(())
    }

    /// Capacity in pages of MR `idx` for the rw layer.
    pub(super) fn page_cap(&self, idx: usize, pages_per_mr: u32) -> usize {
        match self.slots.get(idx) {
            Some(s) => (s.mr.max_pages.min(pages_per_mr) as usize).min(P),
            None => 0,
        }
    }

    pub(super) fn clear_pages(&mut self, idx: usize) {
        if let Some(s) = self.slots.get_mut(idx) {
            s.npages = 0;
        }
    }

    /// Appends a page address; false when the list is full.
    pub(super) fn push_page(&mut self, idx: usize, page: u64) -> bool {
        let Some(s) = self.slots.get_mut(idx) else { return false };
        match s.pages.get_mut(s.npages) {
            Some(p) => {
                *p = page;
                s.npages += 1;
                true
            }
            None => false,
        }
    }

    pub(super) fn npages(&self, idx: usize) -> usize {
        self.slots.get(idx).map_or(0, |s| s.npages)
    }

    pub(super) fn need_inval(&self, idx: usize) -> bool {
        self.slots.get(idx).is_some_and(|s| s.need_inval)
    }

    pub(super) fn set_need_inval(&mut self, idx: usize, v: bool) {
        if let Some(s) = self.slots.get_mut(idx) {
            s.need_inval = v;
        }
    }

    pub(super) fn key(&self, idx: usize) -> u32 {
        self.slots.get(idx).map_or(0, |s| s.mr.key)
    }

    /// `ib_update_fast_reg_key(mr, ib_inc_rkey(key))`: bumps the low key
    /// byte, keeping the STag index (LNX include/rdma/ib_verbs.h).
    pub(super) fn bump_key(&mut self, idx: usize) -> u32 {
        match self.slots.get_mut(idx) {
            Some(s) => {
                let k = s.mr.key;
                s.mr.key = (k & !0xff) | (k.wrapping_add(1) & 0xff);
                s.mr.key
            }
            None => 0,
        }
    }
}
