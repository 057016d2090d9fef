//! The shared multi-producer SQ: any number of cores post to one SQ through
//! `&self`, without a lock and without waiting for each other, on the same
//! encoder as the single-owner [`Sq`](super::sq::Sq).
//!
//! Protocol (one post):
//!
//! 1. **reserve** — validate and size the WQE ([`size_post`]), then claim
//!    `pad + quanta` quanta by a CAS on the free-running `head`, checking free
//!    space against the consumer's `tail` (NOP pads keep the 8-quanta chunk
//!    rule exactly as in [`Sq::post`](super::sq::Sq::post)). [`MpSq::post_send`]
//!    claims one quantum for each WR of its chain that fits with one CAS
//!    (the hot shapes are one quantum, never padded) and hands back, or
//!    publishes as NOPs, the quanta it does not fill;
//! 2. **fill** — write the tracking entry, the NOP pad bodies and the WQE
//!    body into the reserved quanta (no valid bit yet: invisible to the device);
//! 3. **publish** — store the pad headers and then the WQE header, each after
//!    `dma_wmb`. The producer does not wait for earlier reservations: the
//!    valid bit of the header *is* the publication mark;
//! 4. **doorbell** — [`MpSq::post_send`] rings once per call, after its
//!    headers (`wmb`).
//!
//! What the device sees (the semantics chosen for issue #12, item 7). GEN_2
//! hardware walks the SQ in ring order from its own head and stops at the
//! first quantum whose valid bit does not match the current lap (spec
//! data-path §1.8 and §4.2; rdma-core `providers/irdma/uk.c`,
//! `irdma_uk_qp_post_wr` only rings, it does not say how far). So a WQE
//! published while an earlier reservation is still being filled is valid in
//! the ring but *not executed* until every earlier reservation is published:
//! it becomes visible to the device's walk once the contiguous prefix
//! completes. Every producer rings after its own header, so the last
//! doorbell to arrive comes after every header it covers, and the device
//! never stops short of a published prefix. A producer preempted between
//! reserve and publish (or interrupted on its core by a handler that posts
//! to the same SQ) delays the *execution* of later WQEs, never the return of
//! their producers. The valid bit of a position is derived from the position
//! itself, so no polarity state is shared.
//!
//! Sharing between cores: `head` (written by every reservation) and `tail`
//! (written by the completer) each have a cache line of their own, apart
//! from the read-mostly fields every post reads, so a reservation moves
//! only the `head` line between the producers' cores. What still moves is
//! inherent to one ring shared by several producers: that line once per
//! post (a chain reserves once), and the WQE and tracking lines, which the
//! next lap's producer of a quantum may be another core (BENCHMARKS.md,
//! "two producer threads").
//!
//! Completion ([`MpSq::complete_at`], [`MpSq::retire_oldest`]) belongs to the
//! CQ poller (one at a time) and is bounded by what was published: a WQE is
//! retired only when it and every WQE before it (from the tail) carries the
//! current lap's valid bit, which the device needs before it can execute it
//! (`complete_at` checks it quantum by quantum, which covers every header in
//! the range). A bogus or early CQE that names a reserved, unwritten WQE (or one behind
//! it) is refused, so a slot is never handed to a second producer while its
//! first one still fills it.

use irdma_hal::wqe::{QUANTUM_QWORDS, SQ_CHUNK_QUANTA, op, sq_hdr};
use irdma_hal::{Bar, barrier::wmb, regs};

use super::mem::{Words, WqeSlot};
use super::qp::{PostSendError, QpKind, hot_from_wr, sq_post_from_wr};
use super::sq::{
    HotWqe, PostedWqe, SendQueue, SqConfigError, SqError, SqLimits, SqPost, SqWrTrk, encode_body,
    encode_hot, size_post, wqe_slot,
};
use super::sync::{AtomicU32, AtomicU64, Ordering, Padded, fence};
use crate::wr::SendWr;

/// The signaled bit of [`MpTrk`]'s `meta`: where the WQE header has it.
const SIGNALED: u64 = 1 << 62;
const _: () = assert!(sq_hdr::SIGCOMPL.prep(1) == SIGNALED);
// `MpSq::has_lap_valid` reads the valid bit as the sign bit.
const _: () = assert!(sq_hdr::VALID.prep(1) == 1 << 63);
/// Every bit a [`HotWqe`]'s `flags` may hold; above `meta`'s quanta byte.
const HOT_FLAGS: u64 = HotWqe::flag_bits(true, true, true);
const _: () = assert!(HOT_FLAGS >> 40 << 40 == HOT_FLAGS);

/// One tracking entry of the shared SQ (`sq_wrtrk`, written by the producer
/// that reserved the quantum, read by the completer).
#[derive(Debug)]
pub struct MpTrk {
    wr_id: AtomicU64,
    /// wr_len | quanta << 32 | signaled << 62 (the header's SIGCOMPL
    /// bit). A hot post stores its header flags unmasked: READFENCE and
    /// LOCALFENCE (bits 60, 61) may be set too, and [`MpTrk::load`] reads
    /// neither.
    meta: AtomicU64,
}

impl MpTrk {
    /// An empty entry (one quantum, like the single-owner SQ's entries
    /// before their first post).
    pub fn new() -> Self {
        MpTrk { wr_id: AtomicU64::new(0), meta: AtomicU64::new(1 << 32) }
    }

    #[inline(always)]
    fn store(&self, t: SqWrTrk) {
        self.wr_id.store(t.wr_id, Ordering::Relaxed);
        let m = u64::from(t.wr_len) | (u64::from(t.quanta) << 32) | (u64::from(t.signaled) << 62);
        self.meta.store(m, Ordering::Relaxed);
    }

    /// [`MpTrk::store`] of a one-quantum [`HotWqe`].
    #[inline(always)]
    fn store_hot(&self, h: &HotWqe<'_>) {
        // `flags` holds only header bits 60-62 (`HotWqe::flag_bits`): clear
        // of `wr_len` and `quanta`, so not masked (3 instructions a WR).
        debug_assert!(h.flags & !HOT_FLAGS == 0);
        self.wr_id.store(h.wr_id, Ordering::Relaxed);
        let m = u64::from(h.sge.length) | (1 << 32) | h.flags;
        self.meta.store(m, Ordering::Relaxed);
    }

    #[inline(always)]
    fn load(&self) -> SqWrTrk {
        let m = self.meta.load(Ordering::Relaxed);
        SqWrTrk {
            wr_id: self.wr_id.load(Ordering::Relaxed),
            wr_len: m as u32,
            quanta: (m >> 32) as u8,
            signaled: m & SIGNALED != 0,
        }
    }
}

impl Default for MpTrk {
    fn default() -> Self {
        Self::new()
    }
}

/// A send queue shared by several producers.
pub struct MpSq<M: Words, T: AsRef<[MpTrk]>> {
    mem: M,
    trk: T,
    /// The ring size (a power of two): the lap bit of a free-running position.
    lap: u32,
    mask: u32,
    cap: u32,
    /// `cap`, or 0 when `lim.max_frags` is 0 (no SGE may be posted): the
    /// one-WR hot post tests both with one compare ([`MpSq::reserve_one`]),
    /// as the single-owner `Sq::post_hot` does.
    hot_cap: u32,
    /// Written by every producer's reservation: alone on its lines, so
    /// the read-mostly fields above and the completer's `tail` do not move
    /// between cores with it.
    head: Padded<AtomicU32>,
    /// Written by the completer only.
    tail: Padded<AtomicU32>,
    lim: SqLimits,
    qp_id: u32,
}

impl<M: Words, T: AsRef<[MpTrk]>> MpSq<M, T> {
    /// A shared SQ of `size` quanta over `mem` (same rules as [`Sq::new`](super::sq::Sq::new)).
    pub fn new(
        mem: M,
        trk: T,
        size: u32,
        max_frags: u32,
        max_inline: u32,
        qp_id: u32,
    ) -> Result<Self, SqConfigError> {
        let cap =
            super::sq::sq_config(size, mem.qwords(), trk.as_ref().len(), max_frags, max_inline)?;
        Ok(MpSq {
            mem,
            trk,
            lap: size,
            mask: size - 1,
            cap,
            hot_cap: if max_frags == 0 { 0 } else { cap },
            head: Padded(AtomicU32::new(0)),
            tail: Padded(AtomicU32::new(0)),
            lim: SqLimits { max_frags, max_inline, inline_enabled: false },
            qp_id,
        })
    }

    /// Allows inline posts.
    ///
    /// # Safety
    ///
    /// As [`Sq::enable_inline`](super::sq::Sq::enable_inline): every inline SGE address posted from now on
    /// is a CPU address readable for its length during the post.
    pub unsafe fn enable_inline(&mut self) {
        self.lim.inline_enabled = true;
    }

    /// The ring memory (borrowed from the queue: it cannot outlive it).
    pub fn mem(&self) -> &M {
        &self.mem
    }

    /// Ring size in quanta.
    pub fn size(&self) -> u32 {
        self.mask + 1
    }

    /// The end (free-running) of the contiguous run of published quanta
    /// from the tail: what the device may execute. A diagnostic; it reads
    /// word 3 of every outstanding quantum up to the first unpublished one
    /// (so it may end inside a multi-quanta WQE whose later quanta this core
    /// does not see yet: never past what is published).
    pub fn published(&self) -> u32 {
        let tail = self.tail.load(Ordering::Relaxed);
        let used = self.head.load(Ordering::Acquire).wrapping_sub(tail);
        tail.wrapping_add(self.valid_run(tail, used.min(self.mask + 1)))
    }

    /// Whether word 3 of the quantum at ring index `idx` carries the lap
    /// valid bit of free-running `pos` (the caller's `pos & mask == idx`;
    /// it passes the index it already has, so no second mask).
    #[inline(always)]
    fn quantum_valid(&self, idx: u32, pos: u32) -> bool {
        let h = self.mem.read(idx as usize * QUANTUM_QWORDS + 3);
        self.has_lap_valid(h, pos)
    }

    /// Whether the word-3 value `h` carries free-running position `pos`'s
    /// lap valid bit ([`MpSq::valid_at`]: set on even laps). VALID is bit
    /// 63, so `h >> 63` (arithmetic) is all ones when it is set, and the
    /// bit is right when that differs from `pos` at the lap bit: four
    /// instructions, no flag-to-register moves.
    #[inline(always)]
    fn has_lap_valid(&self, h: u64, pos: u32) -> bool {
        ((((h as i64) >> 63) as u32 ^ pos) & self.lap) != 0
    }

    /// How many of the `n` quanta from free-running `pos` on carry their
    /// lap's valid bit in word 3 (a header, a fragment's second qword, a NOP
    /// pad: every quantum has one), counted up to the first that does not.
    /// The ring is read in at most two pieces (to its end, then from its
    /// start), each with one lap bit and one bounds check.
    #[inline(never)]
    fn valid_run(&self, pos: u32, n: u32) -> u32 {
        let mut done = 0u32;
        while done < n {
            let p = pos.wrapping_add(done);
            let idx = p & self.mask;
            let piece = (n - done).min(self.lap - idx);
            let want = sq_hdr::VALID.prep(self.valid_at(p).into());
            let first = idx as usize * QUANTUM_QWORDS + 3;
            // `sq_config` sized the memory for the ring: never taken.
            if first + (piece as usize - 1) * QUANTUM_QWORDS >= self.mem.qwords() {
                return done;
            }
            for k in 0..piece {
                let w = self.mem.read(first + k as usize * QUANTUM_QWORDS);
                if w & sq_hdr::VALID.prep(1) != want {
                    return done + k;
                }
            }
            done += piece;
        }
        done
    }

    /// The tracking entry of the WQE starting at free-running position
    /// `pos` (to be read after this returns) if its header carries this lap's valid bit (it is published);
    /// `None` while it is reserved and unwritten. The acquire fence pairs
    /// with the `dma_wmb` (a release fence, at least) before the header
    /// store, so the tracking entry read is the one its producer wrote.
    #[inline(always)]
    fn published_at(&self, pos: u32) -> Option<&MpTrk> {
        let idx = pos & self.mask;
        let h = self.mem.read(idx as usize * QUANTUM_QWORDS + 3);
        if !self.has_lap_valid(h, pos) {
            return None;
        }
        fence(Ordering::Acquire);
        self.trk_at(idx)
    }

    /// Outstanding (reserved, not retired) quanta.
    pub fn used(&self) -> u32 {
        self.head.load(Ordering::Relaxed).wrapping_sub(self.tail.load(Ordering::Relaxed))
    }

    #[inline(always)]
    fn valid_at(&self, pos: u32) -> bool {
        pos & self.lap == 0
    }

    #[inline(always)]
    fn trk_at(&self, idx: u32) -> Option<&MpTrk> {
        self.trk.as_ref().get((idx & self.mask) as usize)
    }

    /// Claims `quanta` quanta (plus NOP pads to the chunk end if needed);
    /// returns the reservation start and the pad count.
    #[inline(always)]
    fn reserve(&self, quanta: u32) -> Result<(u32, u32), SqError> {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            let idx = head & self.mask;
            let room = SQ_CHUNK_QUANTA - (idx % SQ_CHUNK_QUANTA);
            let pad = if quanta <= room { 0 } else { room };
            let used = head.wrapping_sub(self.tail.load(Ordering::Acquire));
            if used > self.mask + 1 {
                // Our head snapshot is older than the tail: look again.
                head = self.head.load(Ordering::Relaxed);
                continue;
            }
            if used + pad + quanta > self.cap {
                return Err(SqError::Full);
            }
            match self.head.compare_exchange_weak(
                head,
                head.wrapping_add(pad + quanta),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok((head, pad)),
                Err(h) => head = h,
            }
        }
    }

    /// Posts one WQE without the doorbell: reserve → fill → publish. Never
    /// waits for another producer.
    pub fn post(&self, p: &SqPost<'_>) -> Result<PostedWqe, SqError> {
        let sz = size_post(p, &self.lim)?;
        let t = SqWrTrk {
            wr_id: p.wr_id,
            wr_len: sz.wr_len,
            quanta: sz.quanta as u8,
            signaled: p.signaled,
        };
        self.post_filled(t, |slot, valid| encode_body(p, slot, valid, sz.quanta))
    }

    /// [`MpSq::post`] for a [`HotWqe`] (same checks as `size_post` for it,
    /// same protocol, the shared hot encoder).
    #[inline(always)]
    fn post_hot(&self, h: &HotWqe<'_>) -> Result<(), SqError> {
        if self.lim.max_frags == 0 {
            return Err(SqError::TooManySges);
        }
        let t = SqWrTrk { wr_id: h.wr_id, wr_len: h.sge.length, quanta: 1, signaled: h.signaled() };
        self.post_filled(t, |slot, valid| encode_hot(h, slot, valid)).map(|_| ())
    }

    /// The protocol for one validated WQE of `t.quanta` quanta: reserve
    /// (with NOP pads), fill the tracking entry, pad bodies and — through
    /// `encode`, which returns the header — the WQE body, then publish the
    /// pad headers and the WQE header.
    #[inline(always)]
    fn post_filled(
        &self,
        t: SqWrTrk,
        encode: impl FnOnce(&M::Slot<'_>, bool) -> u64,
    ) -> Result<PostedWqe, SqError> {
        let (start, pad) = self.reserve(u32::from(t.quanta))?;
        Ok(self.fill_publish(start, pad, t, encode))
    }

    /// Steps 2 and 3 for the reservation `start` (`pad` pads, then the WQE
    /// of `t.quanta` quanta) that [`MpSq::reserve`] returned.
    #[inline(always)]
    fn fill_publish(
        &self,
        start: u32,
        pad: u32,
        t: SqWrTrk,
        encode: impl FnOnce(&M::Slot<'_>, bool) -> u64,
    ) -> PostedWqe {
        let quanta = u32::from(t.quanta);
        let pos = start.wrapping_add(pad);
        let idx = pos & self.mask;
        for i in 0..pad {
            let pi = start.wrapping_add(i) & self.mask;
            if let Some(t) = self.trk_at(pi) {
                t.store(SqWrTrk { wr_id: 0, wr_len: 0, quanta: 1, signaled: false });
            }
            let s = wqe_slot(&self.mem, pi, 1);
            s.put(0, 0);
            s.put(1, 0);
            s.put(2, 0);
        }
        if let Some(e) = self.trk_at(idx) {
            e.store(t);
        }
        // The inner quanta are not WQE starts (`complete_at` refuses them).
        for q in 1..quanta {
            if let Some(e) = self.trk_at(idx.wrapping_add(q)) {
                e.store(SqWrTrk { wr_id: 0, wr_len: 0, quanta: 0, signaled: false });
            }
        }
        let valid = self.valid_at(pos);
        let slot = wqe_slot(&self.mem, idx, quanta);
        let hdr = encode(&slot, valid);
        // Publish without waiting for earlier reservations (module docs):
        // pads first, then the WQE; each header after `dma_wmb`.
        for i in 0..pad {
            let pp = start.wrapping_add(i);
            let nop =
                sq_hdr::OPCODE.prep(op::NOP.into()) | sq_hdr::VALID.prep(self.valid_at(pp) as u64);
            wqe_slot(&self.mem, pp & self.mask, 1).publish(3, nop);
        }
        slot.publish(3, hdr);
        PostedWqe { wqe_idx: idx, quanta, pad, valid }
    }

    /// Rings the SQ doorbell (spec data-path §4.2).
    #[inline(always)]
    pub fn ring_doorbell(&self, bar: &impl Bar) {
        wmb();
        bar.write32(regs::WQEALLOC, self.qp_id);
    }

    /// `ib_post_send` on the shared SQ: posts in order, one doorbell if any
    /// was posted; `bad_wr` as in [`super::QpUk::post_send`].
    ///
    /// One hot WR is shaped first and then reserves its quantum (nothing to
    /// hand back); one WR of another shape goes to `post_send_rest`.
    /// In a longer chain, one CAS reserves a quantum for every WR that fits (the
    /// hot shapes take one quantum each, which never crosses an 8-quanta
    /// chunk, so no pad). Each hot WR is then filled and published in its
    /// quantum as in [`MpSq::post`]. At the first WR of another shape the
    /// unused quanta are handed back if no one reserved after them (one
    /// CAS), or else published as NOPs (a reserved quantum is always
    /// published: the device's walk and the completer never stop at it for
    /// good), and the rest of the chain goes WR by WR through
    /// `post_send_rest`. Each caller's WRs stay in its order.
    #[inline(always)]
    pub fn post_send(
        &self,
        bar: &impl Bar,
        kind: QpKind,
        wrs: &[SendWr<'_>],
    ) -> Result<(), PostSendError> {
        // One WR (the doorbell-each shape): a hot one reserves its quantum
        // and rings, with no run to hand back; another goes WR by WR.
        if let [wr] = wrs {
            return match hot_from_wr(wr, kind) {
                Some(h) => self.post_send_one(bar, &h),
                None => self.post_send_rest(bar, kind, wrs, 0),
            };
        }
        let mut done = 0u32;
        if self.lim.max_frags != 0
            && !wrs.is_empty()
            && let Ok((start, n)) = self.reserve_run(wrs.len())
        {
            // The run in contiguous pieces (n <= cap < size: it wraps the
            // ring at most once), each bounds-checked once.
            let mut rest = wrs.get(..n as usize).unwrap_or_default();
            while !rest.is_empty() {
                let pos = start.wrapping_add(done);
                let room = (self.lap - (pos & self.mask)) as usize;
                let (a, b) = rest.split_at(room.min(rest.len()));
                let k = self.fill_hot(pos, a, kind);
                done += k;
                if k as usize != a.len() {
                    break;
                }
                rest = b;
            }
            if done != n {
                self.release_run(start.wrapping_add(done), start.wrapping_add(n));
            }
        }
        if done as usize != wrs.len() {
            return self.post_send_rest(bar, kind, wrs, done as usize);
        }
        if done != 0 {
            self.ring_doorbell(bar);
        }
        Ok(())
    }

    /// [`MpSq::post_send`] of one hot WR: one quantum reserved
    /// ([`MpSq::reserve_one`]), filled, published, the doorbell rung.
    #[inline(always)]
    fn post_send_one(&self, bar: &impl Bar, h: &HotWqe<'_>) -> Result<(), PostSendError> {
        let start = self.reserve_one().map_err(|kind| PostSendError { bad_wr: 0, kind })?;
        let idx = start & self.mask;
        if let Some(e) = self.trk_at(idx) {
            e.store_hot(h);
        }
        let slot = wqe_slot(&self.mem, idx, 1);
        slot.publish(3, encode_hot(h, &slot, self.valid_at(start)));
        self.ring_doorbell(bar);
        Ok(())
    }

    /// Fills and publishes the hot WRs of `wrs` (until the first that is
    /// not hot) into the reserved quanta from free-running `pos`, which do
    /// not wrap the ring; returns how many. The tracking entries and the
    /// ring window are bounds-checked once for the piece.
    #[inline(always)]
    fn fill_hot(&self, pos: u32, wrs: &[SendWr<'_>], kind: QpKind) -> u32 {
        let idx = (pos & self.mask) as usize;
        let Some(trk) = self.trk.as_ref().get(idx..idx + wrs.len()) else { return 0 };
        let slot = wqe_slot(&self.mem, idx as u32, wrs.len() as u32);
        let valid = self.valid_at(pos);
        let mut k = 0;
        for (wr, e) in wrs.iter().zip(trk) {
            let Some(h) = hot_from_wr(wr, kind) else { break };
            e.store_hot(&h);
            let q = Quantum { slot: &slot, base: k * QUANTUM_QWORDS };
            q.publish(3, encode_hot(&h, &q, valid));
            k += 1;
        }
        k as u32
    }

    /// [`MpSq::reserve_run`] of one quantum for a hot WR, with the SGE
    /// limit folded into the free-space test: one compare against
    /// `hot_cap` (0 when no SGE may be posted) refuses both, with the
    /// errors [`MpSq::post_hot`] and [`MpSq::reserve_run`] give, in that
    /// order (TooManySges before Full). The ordering argument of
    /// `reserve_run` holds unchanged: `used` does not wrap.
    #[inline(always)]
    fn reserve_one(&self) -> Result<u32, SqError> {
        loop {
            let tail = self.tail.load(Ordering::Acquire);
            let head = self.head.load(Ordering::Relaxed);
            if head.wrapping_sub(tail) >= self.hot_cap {
                return Err(self.hot_refusal());
            }
            if self
                .head
                .compare_exchange_weak(
                    head,
                    head.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                return Ok(head);
            }
        }
    }

    /// Why [`MpSq::reserve_one`] refused: the SGE limit first, as
    /// [`MpSq::post_hot`] tests it, else the ring is full.
    #[cold]
    #[inline(never)]
    fn hot_refusal(&self) -> SqError {
        if self.lim.max_frags == 0 { SqError::TooManySges } else { SqError::Full }
    }

    /// Claims up to `want` one-quantum WQEs (as many as fit, at least one)
    /// by one CAS on `head`: returns the run's start and length. One
    /// quantum never crosses an 8-quanta chunk, so the run needs no pad.
    #[inline(always)]
    fn reserve_run(&self, want: usize) -> Result<(u32, u32), SqError> {
        loop {
            // The tail first: the completer stored it (release) after it
            // read a head at or past it (acquire), and `head` never goes
            // back past a tail (`release_run` hands back only unpublished
            // quanta, which the tail never passes), so the head read next
            // is at or past this tail: `used` cannot wrap, no retry for it.
            let tail = self.tail.load(Ordering::Acquire);
            let head = self.head.load(Ordering::Relaxed);
            let used = head.wrapping_sub(tail);
            let n = want.min(self.cap.saturating_sub(used) as usize) as u32;
            if n == 0 {
                return Err(SqError::Full);
            }
            if self
                .head
                .compare_exchange_weak(
                    head,
                    head.wrapping_add(n),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                return Ok((head, n));
            }
        }
    }

    /// The unused end `from..end` of a run this producer reserved and did
    /// not fill: handed back if `head` is still `end` (no one reserved
    /// after it, so nothing beyond `from` is held), else published as NOPs.
    /// Never waits.
    #[inline(never)]
    fn release_run(&self, from: u32, end: u32) {
        if self.head.compare_exchange(end, from, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            let mut pos = from;
            while pos != end {
                self.publish_nop(pos);
                pos = pos.wrapping_add(1);
            }
        }
    }

    /// Fills and publishes the quantum at free-running `pos` as a NOP (a
    /// pad): tracking entry, body, then the header after `dma_wmb`.
    #[inline(always)]
    fn publish_nop(&self, pos: u32) {
        let pi = pos & self.mask;
        if let Some(t) = self.trk_at(pi) {
            t.store(SqWrTrk { wr_id: 0, wr_len: 0, quanta: 1, signaled: false });
        }
        let s = wqe_slot(&self.mem, pi, 1);
        s.put(0, 0);
        s.put(1, 0);
        s.put(2, 0);
        let nop =
            sq_hdr::OPCODE.prep(op::NOP.into()) | sq_hdr::VALID.prep(self.valid_at(pos) as u64);
        s.publish(3, nop);
    }

    /// `post_send` from WR `start` on (the ones before it are posted), one
    /// WR and one reservation at a time; the doorbell if anything was posted.
    #[inline(never)]
    fn post_send_rest(
        &self,
        bar: &impl Bar,
        kind: QpKind,
        wrs: &[SendWr<'_>],
        start: usize,
    ) -> Result<(), PostSendError> {
        let mut res = Ok(());
        let mut posted = start != 0;
        for (i, wr) in wrs.iter().enumerate().skip(start) {
            let r = match hot_from_wr(wr, kind) {
                Some(h) => self.post_hot(&h),
                None => self.post(&sq_post_from_wr(wr, kind)).map(|_| ()),
            };
            if let Err(kind) = r {
                res = Err(PostSendError { bad_wr: i, kind });
                break;
            }
            posted = true;
        }
        if posted {
            self.ring_doorbell(bar);
        }
        res
    }

    /// Retires through the WQE at ring index `wqe_idx` (its completion
    /// arrived) and returns its tracking entry; `None` if it is not an
    /// outstanding, published WQE start. One completer at a time.
    ///
    /// The bound is what was published: every quantum from the tail through
    /// `wqe_idx` must carry this lap's valid bit (the device cannot have
    /// executed the WQE otherwise). Each WQE whose start lies in that range
    /// has its header there, and a header is stored last (after `dma_wmb`),
    /// so the scan checks every WQE header in the range without reading any
    /// tracking entry; `wqe_idx` is a WQE start if its entry says so (the
    /// inner quanta of a multi-quanta WQE are marked 0 before its header is
    /// stored). A bogus or early CQE naming a reserved, unwritten WQE, or
    /// one behind such a reservation, is refused; retiring it would free
    /// quanta a producer is still filling.
    #[inline]
    pub fn complete_at(&self, wqe_idx: u32) -> Option<SqWrTrk> {
        // An index past the ring is device garbage (see `Sq::complete_at`).
        if wqe_idx > self.mask {
            return None;
        }
        let tail = self.tail.load(Ordering::Relaxed);
        let avail = self.head.load(Ordering::Acquire).wrapping_sub(tail);
        let d = wqe_idx.wrapping_sub(tail) & self.mask;
        // `avail > lap` is kept: it is the one refusal of a head read older
        // than the tail (possible only when another completer stored that
        // tail without ordering against this one). The tail CAS below does
        // not catch that case (the tail did not move), and without it the
        // bound would rest on the valid-bit scan alone. Two instructions.
        if d >= avail || avail > self.lap {
            return None;
        }
        // One quantum (a CQE per WQE) read inline; a longer range (a
        // signaled WQE behind unsignaled ones) in pieces.
        // `d == 0`: the tail's ring index is `wqe_idx` (`<= mask`).
        let published = if d == 0 {
            self.quantum_valid(wqe_idx, tail)
        } else {
            self.valid_run(tail, d + 1) == d + 1
        };
        if !published {
            return None;
        }
        // Pairs with the `dma_wmb` (a release fence, at least) before each
        // header store: the entry read is the one its producer wrote.
        fence(Ordering::Acquire);
        let t = self.trk_at(wqe_idx)?.load();
        // Refused: `q == 0` (an inner quantum of a WQE, not its start) or
        // `d + q > avail` (past the head), in one test: `d < avail`, so
        // `avail - d` does not wrap, and `q - 1` wraps to the maximum for 0.
        let q = u32::from(t.quanta);
        if q.wrapping_sub(1) >= avail - d {
            return None;
        }
        self.tail
            .compare_exchange(tail, tail.wrapping_add(d + q), Ordering::Release, Ordering::Relaxed)
            .ok()?;
        Some(t)
    }
}

impl<M: Words, T: AsRef<[MpTrk]>> MpSq<M, T> {
    /// QP id written to the doorbell.
    pub fn qp_id(&self) -> u32 {
        self.qp_id
    }

    /// Ring index of the tail.
    pub fn tail(&self) -> u32 {
        self.tail.load(Ordering::Relaxed) & self.mask
    }

    /// Retires the oldest outstanding WQE (flush replay): its ring index,
    /// opcode (read back from its header) and tracking entry. One completer
    /// at a time, like [`MpSq::complete_at`].
    ///
    /// Only a published WQE is retired: flushing runs while producers may
    /// still be between reserve and publish, and a reserved WQE's tracking
    /// entry and header are not written yet (a later call retires it once
    /// its producer published it).
    pub fn retire_oldest(&self) -> Option<(u32, u8, SqWrTrk)> {
        let tail = self.tail.load(Ordering::Relaxed);
        let used = self.head.load(Ordering::Acquire).wrapping_sub(tail);
        if used == 0 || used > self.mask + 1 {
            return None;
        }
        let idx = tail & self.mask;
        let t = self.published_at(tail)?.load();
        let q = u32::from(t.quanta).clamp(1, used);
        let h = self.mem.read(idx as usize * QUANTUM_QWORDS + 3);
        self.tail
            .compare_exchange(tail, tail.wrapping_add(q), Ordering::Release, Ordering::Relaxed)
            .ok()?;
        Some((idx, sq_hdr::OPCODE.get(h) as u8, t))
    }
}

/// One quantum of a wider [`WqeSlot`] window (qword `base` on).
struct Quantum<'s, S> {
    slot: &'s S,
    base: usize,
}

impl<S: WqeSlot> WqeSlot for Quantum<'_, S> {
    #[inline(always)]
    fn put(&self, i: usize, v: u64) {
        self.slot.put(self.base + i, v);
    }
    #[inline(always)]
    fn publish(&self, i: usize, v: u64) {
        self.slot.publish(self.base + i, v);
    }
}

/// The gate between a shared QP's lock-free posts and its software flush
/// (used by `verbs::SharedQp`; here so the loom model runs the real code).
///
/// A poster counts itself in, then (after a SeqCst fence) reads the QP's
/// error flag: healthy, it posts lock-free and counts itself out; in error,
/// it counts itself out and takes the QP lock instead. The poller, having
/// seen the flag set, fences and flushes only if no post is counted in.
/// Dekker-style: either the poller sees the post in progress (and flushes
/// on a later poll), or the post sees the error (and serialises with the
/// flush on the lock); a lock-free post never overlaps a flush.
#[derive(Debug, Default)]
pub(crate) struct PostGate {
    posting: AtomicU32,
}

impl PostGate {
    /// No post in progress.
    pub(crate) fn new() -> Self {
        PostGate { posting: AtomicU32::new(0) }
    }

    /// Runs `post` lock-free unless `in_error()` says the QP is in error
    /// (then `None`: the caller takes the locked path).
    #[inline(always)]
    pub(crate) fn lock_free<R>(
        &self,
        in_error: impl FnOnce() -> bool,
        post: impl FnOnce() -> R,
    ) -> Option<R> {
        self.posting.fetch_add(1, Ordering::Relaxed);
        // Pairs with the fence in `may_flush`: either the poller sees this
        // post in progress, or this post sees the QP in error.
        fence(Ordering::SeqCst);
        if in_error() {
            self.posting.fetch_sub(1, Ordering::Release);
            return None;
        }
        let r = post();
        self.posting.fetch_sub(1, Ordering::Release);
        Some(r)
    }

    /// Whether the software flush may run now: no lock-free post is in
    /// progress. Called by the poller after it saw the QP in error.
    pub(crate) fn may_flush(&self) -> bool {
        fence(Ordering::SeqCst);
        self.posting.load(Ordering::Acquire) == 0
    }
}

/// The CQ poller's view of a shared SQ, through a pointer to it: `&MpSq`,
/// or the owning QP's `HeapRef` (not every `Deref`: a blanket impl would
/// take `complete_at` on an `Arc<MpSq>` away from the inherent method).
macro_rules! send_queue_via {
    ($($ptr:ty),+) => {$(
        impl<M: Words, T: AsRef<[MpTrk]>> SendQueue for $ptr {
            fn qp_id(&self) -> u32 {
                MpSq::qp_id(self)
            }
            fn used(&self) -> u32 {
                MpSq::used(self)
            }
            fn tail(&self) -> u32 {
                MpSq::tail(self)
            }
            fn complete_at(&mut self, wqe_idx: u32) -> Option<SqWrTrk> {
                MpSq::complete_at(self, wqe_idx)
            }
            fn retire_oldest(&mut self) -> Option<(u32, u8, SqWrTrk)> {
                MpSq::retire_oldest(self)
            }
            fn offset_of(&self, wqe_idx: u32) -> Option<u32> {
                let d = wqe_idx.wrapping_sub(self.tail.load(Ordering::Relaxed)) & self.mask;
                (d < MpSq::used(self)).then_some(d)
            }
            fn peek(&self, idx: u32) -> Option<SqWrTrk> {
                self.trk_at(idx).map(|t| t.load())
            }
        }
    )+};
}

send_queue_via!(&MpSq<M, T>, super::mem::HeapRef<MpSq<M, T>>);

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
