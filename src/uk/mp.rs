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

    /// Whether word 3 of the quantum at free-running `pos` carries that
    /// position's lap valid bit.
    #[inline(always)]
    fn quantum_valid(&self, pos: u32) -> bool {
        let h = self.mem.read((pos & self.mask) as usize * QUANTUM_QWORDS + 3);
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
                Some(h) if self.lim.max_frags != 0 => self.post_send_one(bar, &h),
                _ => self.post_send_rest(bar, kind, wrs, 0),
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
    /// ([`MpSq::reserve_run`]), filled, published, the doorbell rung.
    #[inline(always)]
    fn post_send_one(&self, bar: &impl Bar, h: &HotWqe<'_>) -> Result<(), PostSendError> {
        let (start, _) = self.reserve_run(1).map_err(|kind| PostSendError { bad_wr: 0, kind })?;
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
        let published =
            if d == 0 { self.quantum_valid(tail) } else { self.valid_run(tail, d + 1) == d + 1 };
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

/// The CQ poller's view of a shared SQ.
impl<M: Words, T: AsRef<[MpTrk]>> SendQueue for &MpSq<M, T> {
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

#[cfg(all(test, not(loom)))]
mod tests {
    extern crate std;
    use super::*;
    use crate::uk::mem::QueueMem;
    use crate::uk::sq::{Sq, SqOp};
    use crate::wr::Sge;
    use core::ptr::NonNull;
    use std::vec;
    use std::vec::Vec;

    fn view(v: &mut [u64]) -> QueueMem<'_> {
        // SAFETY: the vector is borrowed mutably for the view's lifetime.
        unsafe { QueueMem::from_raw(NonNull::new(v.as_mut_ptr()).unwrap(), v.len()) }
    }

    /// The shared path writes exactly the bytes the single-owner path does.
    #[test]
    fn same_bytes_as_single_owner_sq() {
        let mut a = vec![0u64; 64 * 4];
        let mut b = vec![0u64; 64 * 4];
        let mut ta = vec![SqWrTrk::default(); 64];
        let tb: Vec<MpTrk> = (0..64).map(|_| MpTrk::new()).collect();
        let mut sq = Sq::new(view(&mut a), &mut ta, 64, 13, 101, 7).unwrap();
        let mp = MpSq::new(view(&mut b), &tb[..], 64, 13, 101, 7).unwrap();
        let sges: Vec<Sge> = (0..13).map(|i| Sge { addr: i, length: 10, lkey: i as u32 }).collect();
        for n in [1usize, 13, 2, 5, 13, 1, 3] {
            let op = SqOp::Write {
                remote_addr: 9,
                rkey: 3,
                solicited: false,
                sges: &sges[..n],
                inline: false,
            };
            let mut p = SqPost::new(n as u64, op);
            p.imm = (n == 13).then_some(0xab);
            p.signaled = true;
            assert_eq!(sq.post(&p), mp.post(&p));
        }
        let sq_mem: Vec<u64> = (0..256).map(|i| sq.mem().read(i)).collect();
        let mp_mem: Vec<u64> = (0..256).map(|i| mp.mem().read(i)).collect();
        assert_eq!(sq_mem, mp_mem);
        assert!(sq_mem.iter().any(|w| *w != 0));
    }

    /// Inline WQEs too: the shared path writes the single-owner bytes.
    #[test]
    fn same_inline_bytes_as_single_owner_sq() {
        let mut a = vec![0u64; 64 * 4];
        let mut b = vec![0u64; 64 * 4];
        let mut ta = vec![SqWrTrk::default(); 64];
        let tb: Vec<MpTrk> = (0..64).map(|_| MpTrk::new()).collect();
        let mut sq = Sq::new(view(&mut a), &mut ta, 64, 13, 101, 7).unwrap();
        let mut mp = MpSq::new(view(&mut b), &tb[..], 64, 13, 101, 7).unwrap();
        let data: Vec<u8> = (0..101u8).map(|i| i.wrapping_mul(37) | 1).collect();
        // SAFETY: every inline SGE below points into `data`, alive and
        // readable for the posts.
        unsafe {
            sq.enable_inline();
            mp.enable_inline();
        }
        let base = data.as_ptr() as u64;
        for (n, len) in [(1usize, 20u32), (2, 32), (1, 101), (2, 8)] {
            let sges: Vec<Sge> = (0..n as u64)
                .map(|i| Sge { addr: base + i * 50, length: len / n as u32, lkey: 0 })
                .collect();
            let op = SqOp::Write {
                remote_addr: 9,
                rkey: 3,
                solicited: false,
                sges: &sges,
                inline: true,
            };
            let mut p = SqPost::new(u64::from(len), op);
            p.signaled = true;
            assert_eq!(sq.post(&p), mp.post(&p));
        }
        let sq_mem: Vec<u64> = (0..256).map(|i| sq.mem().read(i)).collect();
        let mp_mem: Vec<u64> = (0..256).map(|i| mp.mem().read(i)).collect();
        assert_eq!(sq_mem, mp_mem);
        assert!(sq_mem.iter().any(|w| *w != 0));
    }

    /// `MpSq::post_send` (hot path for one-SGE WRITE/READ/SEND/SEND_INV)
    /// writes what the single-owner general encoder writes: ring, tracking,
    /// errors, over flags, SGE counts, both QP kinds, pads and a full ring.
    #[test]
    #[cfg_attr(miri, ignore = "exhaustive flags × ops × kinds: too slow under Miri")]
    fn hot_post_send_same_as_general_encoder() {
        use crate::uk::qp::sq_post_from_wr;
        use crate::wr::{SendFlags, SendWr, WrOpcode};
        struct NoBar;
        impl Bar for NoBar {
            fn read32(&self, _o: usize) -> u32 {
                0
            }
            fn write32(&self, _o: usize, _v: u32) {}
        }
        // `s0` is a hot SGE; `s1`'s length is past the largest message
        // (refused by both paths).
        let s0 = [Sge { addr: 0x7f00_1234_5678, length: 0x0765_4321, lkey: 0xab_cdef }];
        let s1 = [Sge { addr: 0x7f00_1234_5678, length: 0x8765_4321, lkey: 0xab_cdef }];
        let s2 = [s1[0], Sge { addr: 0x10, length: 3, lkey: 9 }];
        let ops = [
            WrOpcode::RdmaWrite { remote_addr: 0x1122_3344_5566_7788, rkey: 0xfeed_beef },
            WrOpcode::RdmaRead { remote_addr: 0x42, rkey: 0x8000_0001 },
            WrOpcode::Send,
            WrOpcode::SendInv { inv_key: 0x1234_5678 },
            WrOpcode::RdmaWriteImm { remote_addr: 0x99, rkey: 7, imm: 0xdead_beef },
            WrOpcode::LocalInv { inv_key: 0x77 },
        ];
        let mut wrs = Vec::new();
        for (k, op) in ops.iter().enumerate() {
            for f in (0..32u8).filter(|f| f & SendFlags::INLINE.0 == 0) {
                for sg in [&s0[..], &s1[..], &s2[..], &[][..]] {
                    let wr_id = ((k as u64) << 8) | u64::from(f);
                    wrs.push(SendWr { wr_id, opcode: *op, flags: SendFlags(f), sg_list: sg });
                }
            }
        }
        for kind in [QpKind::Rc, QpKind::Ud] {
            for max_frags in [0, 13] {
                let (mut ma, mut ta) = (vec![0u64; 16 * 4], vec![SqWrTrk::default(); 16]);
                let mut mb = vec![0u64; 16 * 4];
                let tb: Vec<MpTrk> = (0..16).map(|_| MpTrk::new()).collect();
                let mut sq = Sq::new(view(&mut ma), &mut ta, 16, max_frags, 0, 7).unwrap();
                let mp = MpSq::new(view(&mut mb), &tb[..], 16, max_frags, 0, 7).unwrap();
                // Chains of 1, 2, 1 and 3 WRs in turn (one WR takes its own
                // path; the single ones meet every SGE list).
                let mut rest = &wrs[..];
                for c in 0.. {
                    if rest.is_empty() {
                        break;
                    }
                    let (chain, r) = rest.split_at([1, 2, 1, 3][c % 4].min(rest.len()));
                    rest = r;
                    let got = mp.post_send(&NoBar, kind, chain);
                    let mut want = Ok(());
                    for (i, wr) in chain.iter().enumerate() {
                        if let Err(e) = sq.post_general(&sq_post_from_wr(wr, kind)) {
                            want = Err(PostSendError { bad_wr: i, kind: e });
                            break;
                        }
                    }
                    assert_eq!(got, want, "chain {c} ({kind:?}, max_frags {max_frags})");
                    assert_eq!(mp.used(), sq.used(), "chain {c}");
                    for q in 0..16 * 4 {
                        assert_eq!(mp.mem().read(q), sq.mem().read(q), "chain {c} qword {q}");
                    }
                    // The outstanding entries, WQE start by WQE start (the
                    // shared SQ marks inner quanta, the single-owner one
                    // leaves them stale: not compared).
                    assert_eq!(mp.tail(), sq.tail(), "chain {c}");
                    let mut p = mp.tail();
                    let end = p + mp.used();
                    while p < end {
                        let t = tb[(p % 16) as usize].load();
                        assert_eq!(Some(&t), sq.trk(p % 16), "chain {c} trk {p}");
                        p += u32::from(t.quanta.max(1));
                    }
                    if c % 7 == 6 {
                        while mp.retire_oldest().is_some() {}
                        while sq.retire_oldest().is_some() {}
                    }
                }
            }
        }
    }

    /// Two cores post to one shared SQ; the CQ poller (through `QpUk<&MpSq>`)
    /// completes every WR exactly once, then a flush CQE replays the rest.
    #[test]
    fn shared_sq_completes_through_the_cq() {
        use crate::uk::cq::CqRing;
        use crate::uk::qp::{QpKind, QpUk, poll_cq};
        use crate::uk::rq::Rq;
        use crate::wr::{SendFlags, SendWr, WcStatus, WorkCompletion, WrOpcode};
        use irdma_hal::wqe::cqe;
        extern crate std;

        struct NoBar;
        impl Bar for NoBar {
            fn read32(&self, _o: usize) -> u32 {
                0
            }
            fn write32(&self, _o: usize, _v: u32) {}
        }
        let mut b = vec![0u64; 512 * 4];
        let tb: Vec<MpTrk> = (0..512).map(|_| MpTrk::new()).collect();
        let mp = MpSq::new(view(&mut b), &tb[..], 512, 13, 101, 7).unwrap();
        let sg = [Sge { addr: 1, length: 10, lkey: 2 }];
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let mp = &mp;
                s.spawn(move || {
                    for i in 0..20u64 {
                        let wr = SendWr {
                            wr_id: (t << 8) | i,
                            opcode: WrOpcode::RdmaWrite { remote_addr: 0, rkey: 1 },
                            flags: SendFlags::SIGNALED,
                            sg_list: &sg,
                        };
                        mp.post_send(&NoBar, QpKind::Rc, &[wr]).unwrap();
                    }
                });
            }
        });
        let mut rqm = vec![0u64; 8 * 4];
        let mut ids = vec![0u64; 8];
        let mut cqm = vec![0u64; 64 * 4];
        let mut sh = vec![0u64; 8];
        let rq = Rq::new(view(&mut rqm), &mut ids, 8, 0, 1).unwrap();
        let mut cq = CqRing::new(view(&mut cqm), view(&mut sh), 64, 3).unwrap();
        let mut qp = QpUk::new(&mp, rq, 0x77, QpKind::Rc);
        // The device completes the first 30 WQEs (all 1 quantum) in order...
        let cqe_at = |cq: &CqRing<'_>, slot: usize, idx: u64, major: u64| {
            cq.mem().write(slot * 4 + 1, 0x77);
            cq.mem().write(
                slot * 4 + 3,
                cqe::VALID.prep(1)
                    | cqe::SQ.prep(1)
                    | cqe::WQEIDX.prep(idx)
                    | cqe::ERROR.prep((major != 0) as u64)
                    | cqe::MAJERR.prep(major)
                    | cqe::MINERR.prep(1),
            );
        };
        for i in 0..30 {
            cqe_at(&cq, i, i as u64, 0);
        }
        // ...then the QP errors: one flush CQE for the rest.
        cqe_at(&cq, 30, 0, 1);
        let wc0 = WorkCompletion {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: crate::wr::WcOpcode::Send,
            vendor_err: 0,
            byte_len: 0,
            qp_num: 0,
            imm_data: None,
            invalidated_rkey: None,
            solicited: false,
            ud: None,
        };
        let mut wc = [wc0; 64];
        let n = poll_cq(&mut cq, &mut qp, &mut wc);
        assert_eq!(n, 40);
        assert!(wc[..30].iter().all(|c| c.status == WcStatus::Success));
        assert!(wc[30..40].iter().all(|c| c.status == WcStatus::WrFlushErr));
        let mut got: Vec<u64> = wc[..n].iter().map(|c| c.wr_id).collect();
        got.sort_unstable();
        let mut want: Vec<u64> =
            (0..2u64).flat_map(|t| (0..20).map(move |i| (t << 8) | i)).collect();
        want.sort_unstable();
        assert_eq!(got, want, "every WR exactly once");
        assert_eq!(mp.used(), 0);
    }

    /// Issue #16: the producers' `head` and the completer's `tail` sit on
    /// cache lines of their own, apart from each other and from the
    /// read-mostly fields every post reads (with them on one line, each
    /// reservation took that line from the other cores: 2 threads ran at
    /// about a third of one thread's rate with one WR per post).
    #[test]
    fn head_and_tail_have_cache_lines_of_their_own() {
        let mut b = vec![0u64; 8 * 4];
        let tb: Vec<MpTrk> = (0..8).map(|_| MpTrk::new()).collect();
        let mp = MpSq::new(view(&mut b), &tb[..], 8, 13, 101, 7).unwrap();
        let block = |p: *const u8| p as usize / 128;
        let head = block((&*mp.head as *const AtomicU32).cast());
        let tail = block((&*mp.tail as *const AtomicU32).cast());
        assert_ne!(head, tail);
        let shared: [*const u8; 6] = [
            (&mp.mask as *const u32).cast(),
            (&mp.cap as *const u32).cast(),
            (&mp.lap as *const u32).cast(),
            (&mp.qp_id as *const u32).cast(),
            (&mp.lim as *const SqLimits).cast(),
            (&mp.mem as *const QueueMem<'_>).cast(),
        ];
        for p in shared {
            assert_ne!(block(p), head);
            assert_ne!(block(p), tail);
        }
    }

    /// Flush replay and the software flush retire with `retire_oldest`
    /// while producers may be between reserve and publish: a reserved,
    /// unpublished WQE (tracking entry and header not written yet) must not
    /// be retired — it would report a stale entry and lose the real one.
    #[test]
    fn retire_oldest_stops_at_unpublished_reservation() {
        let mut b = vec![0u64; 8 * 4];
        let tb: Vec<MpTrk> = (0..8).map(|_| MpTrk::new()).collect();
        let mp = MpSq::new(view(&mut b), &tb[..], 8, 13, 101, 7).unwrap();
        mp.post(&SqPost::new(1, SqOp::Nop)).unwrap();
        // A producer reserved one quantum and was preempted before filling it.
        assert_eq!(mp.reserve(1), Ok((1, 0)));
        assert_eq!(mp.retire_oldest().map(|(i, _, t)| (i, t.wr_id)), Some((0, 1)));
        assert_eq!(mp.retire_oldest(), None, "unpublished WQE retired");
        assert_eq!(mp.used(), 1, "the reservation stays outstanding");
    }

    /// A producer stalled after `reserve` finishes: fills and publishes
    /// its reservation (`start`, `pad`) as NOP `wr_id`. (`'static` memory:
    /// `fill_publish`'s encoder closure is higher-ranked over the slot
    /// lifetime.)
    fn finish_nop(
        mp: &MpSq<QueueMem<'static>, &'static [MpTrk]>,
        (start, pad): (u32, u32),
        wr_id: u64,
        signaled: bool,
    ) -> PostedWqe {
        let t = SqWrTrk { wr_id, wr_len: 0, quanta: 1, signaled };
        mp.fill_publish(start, pad, t, |slot, valid| {
            encode_body(&SqPost::new(wr_id, SqOp::Nop), slot, valid, 1)
        })
    }

    /// Issue #12: a bogus or early CQE naming a reserved, unwritten WQE —
    /// or a published one behind it — is refused. (Accepting it retired the
    /// reservation, after which a second producer filled the same slot.)
    #[test]
    fn complete_at_refuses_unpublished_and_what_lies_behind_it() {
        let b: &'static mut [u64] = Vec::leak(vec![0u64; 8 * 4]);
        let tb: &'static [MpTrk] = Vec::leak((0..8).map(|_| MpTrk::new()).collect());
        let mp = MpSq::new(view(b), tb, 8, 13, 101, 7).unwrap();
        mp.post(&SqPost::new(1, SqOp::Nop)).unwrap();
        // A producer reserved quantum 1 and was preempted before filling it.
        let (start, pad) = mp.reserve(1).unwrap();
        assert_eq!((start, pad), (1, 0));
        mp.post(&SqPost::new(3, SqOp::Nop)).unwrap();
        assert_eq!(mp.complete_at(1), None, "reserved, unwritten WQE completed");
        assert_eq!(mp.complete_at(2), None, "WQE behind an unwritten one completed");
        assert_eq!(mp.used(), 3);
        assert_eq!(mp.published(), 1);
        assert_eq!(mp.complete_at(0).map(|t| t.wr_id), Some(1));
        // The space of the reservation was not handed out again: 6 more fit
        // (positions 3..=8), then the ring is full.
        for i in 0..6 {
            mp.post(&SqPost::new(10 + i, SqOp::Nop)).unwrap();
        }
        assert_eq!(mp.post(&SqPost::new(99, SqOp::Nop)), Err(SqError::Full));
        // The stalled producer finishes: everything behind it completes.
        let p = finish_nop(&mp, (start, pad), 2, true);
        assert_eq!(p.wqe_idx, 1);
        assert_eq!(mp.published(), 9);
        assert_eq!(mp.complete_at(6).map(|t| t.wr_id), Some(13));
        assert_eq!(mp.used(), 2);
        assert_eq!(mp.complete_at(1), None, "not outstanding");
        assert_eq!(mp.complete_at(0).map(|t| t.wr_id), Some(15), "across the wrap");
        assert_eq!(mp.used(), 0);
    }

    /// The completer's scan reads the ring in two pieces when the range
    /// wraps: an unpublished quantum in the second piece (the new lap) stops
    /// `complete_at` and `published()` just as one in the first does.
    #[test]
    fn scan_across_the_wrap_stops_at_an_unpublished_quantum() {
        let b: &'static mut [u64] = Vec::leak(vec![0u64; 8 * 4]);
        let tb: &'static [MpTrk] = Vec::leak((0..8).map(|_| MpTrk::new()).collect());
        let mp = MpSq::new(view(b), tb, 8, 13, 101, 7).unwrap();
        for i in 0..6 {
            mp.post(&SqPost::new(i, SqOp::Nop)).unwrap();
        }
        assert_eq!(mp.complete_at(5).map(|t| t.wr_id), Some(5));
        mp.post(&SqPost::new(6, SqOp::Nop)).unwrap();
        mp.post(&SqPost::new(7, SqOp::Nop)).unwrap();
        // Position 8 (ring index 0, the next lap) reserved, not filled.
        let (start, pad) = mp.reserve(1).unwrap();
        assert_eq!((start, pad), (8, 0));
        assert_eq!(mp.post(&SqPost::new(9, SqOp::Nop)).map(|p| p.wqe_idx), Ok(1));
        assert_eq!(mp.published(), 8, "the walk stops at the new lap's hole");
        assert_eq!(mp.complete_at(1), None, "retired across an unpublished quantum");
        assert_eq!(mp.used(), 4);
        finish_nop(&mp, (start, pad), 8, true);
        assert_eq!(mp.published(), 10);
        assert_eq!(mp.complete_at(1).map(|t| t.wr_id), Some(9));
        assert_eq!(mp.used(), 0);
    }

    /// Issue #12: a producer stalled between reserve and publish does not
    /// stop another producer from returning (lock-free publication). The
    /// other WQE is valid in the ring at once, but the device's in-order
    /// walk (and so `published()` and `complete_at`) reaches it only when
    /// the stalled reservation is published. Bounded: the other producer
    /// runs on a thread the test waits for with a deadline.
    #[test]
    fn stalled_producer_does_not_block_another() {
        use std::sync::mpsc;
        let b: &'static mut [u64] = Vec::leak(vec![0u64; 16 * 4]);
        let tb: &'static [MpTrk] = Vec::leak((0..16).map(|_| MpTrk::new()).collect());
        let mp: &'static MpSq<QueueMem<'static>, &'static [MpTrk]> = std::boxed::Box::leak(
            std::boxed::Box::new(MpSq::new(view(b), tb, 16, 13, 101, 7).unwrap()),
        );
        let (start, pad) = mp.reserve(1).unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(mp.post(&SqPost::new(2, SqOp::Nop)));
        });
        let r = rx.recv_timeout(std::time::Duration::from_secs(20));
        let p = r.expect("the second producer waited for the stalled one").unwrap();
        assert_eq!(p.wqe_idx, 1);
        assert!(sq_hdr::VALID.is_set(mp.mem().read(4 + 3)), "its header is stored");
        assert_eq!(mp.published(), 0, "but the device's walk stops at the stalled one");
        assert_eq!(mp.complete_at(1), None);
        assert_eq!(mp.retire_oldest(), None);
        finish_nop(mp, (start, pad), 1, false);
        assert_eq!(mp.published(), 2);
        assert_eq!(mp.complete_at(1).map(|t| t.wr_id), Some(2));
        assert_eq!(mp.used(), 0);
    }

    /// Every quantum of every lap carries that lap's valid bit in its word
    /// 3 (headers, fragments, inline quanta, pads), which is what
    /// `published_at` relies on: a WQE start never reads as published from a
    /// stale word of an earlier lap.
    #[test]
    fn every_quantum_carries_its_laps_valid_bit() {
        let mut b = vec![0u64; 32 * 4];
        let tb: Vec<MpTrk> = (0..32).map(|_| MpTrk::new()).collect();
        let mut mp = MpSq::new(view(&mut b), &tb[..], 32, 13, 101, 7).unwrap();
        // SAFETY: every inline SGE below points at `data`, live for the posts.
        unsafe { mp.enable_inline() };
        let data = [0x5au8; 101];
        let sges: Vec<Sge> = (0..13).map(|i| Sge { addr: i, length: 10, lkey: i as u32 }).collect();
        let inl = [Sge { addr: data.as_ptr() as u64, length: 101, lkey: 0 }];
        let mut pos = 0u32;
        // Under Miri 40 posts still wrap the 32-quanta ring several times.
        for n in 0..if cfg!(miri) { 40 } else { 200 } {
            let op = match n % 4 {
                0 => SqOp::Nop,
                1 => SqOp::Write {
                    remote_addr: 1,
                    rkey: 2,
                    solicited: false,
                    sges: &sges[..n % 13 + 1],
                    inline: false,
                },
                2 => SqOp::Write {
                    remote_addr: 1,
                    rkey: 2,
                    solicited: false,
                    sges: &inl,
                    inline: true,
                },
                _ => SqOp::Write {
                    remote_addr: 1,
                    rkey: 2,
                    solicited: false,
                    sges: &sges[..2],
                    inline: false,
                },
            };
            let p = mp.post(&SqPost::new(n as u64, op)).unwrap();
            let end = pos + p.pad + p.quanta;
            for q in pos..end {
                let w = mp.mem().read((q & 31) as usize * 4 + 3);
                assert_eq!(w >> 63 != 0, (q >> 5) & 1 == 0, "post {n}: quantum {q}");
            }
            pos = end;
            assert_eq!(mp.published(), pos);
            assert!(mp.complete_at(p.wqe_idx).is_some());
        }
    }

    /// A chain's unused reserved quanta: handed back while no one reserved
    /// after them, published as NOPs otherwise (never left unpublished, so
    /// the completer and the device's walk get past them).
    #[test]
    fn release_run_hands_back_or_publishes_nops() {
        let b: &'static mut [u64] = Vec::leak(vec![0u64; 8 * 4]);
        let tb: &'static [MpTrk] = Vec::leak((0..8).map(|_| MpTrk::new()).collect());
        let mp = MpSq::new(view(b), tb, 8, 13, 101, 7).unwrap();
        assert_eq!(mp.reserve_run(3), Ok((0, 3)));
        mp.release_run(1, 3);
        assert_eq!(mp.used(), 1, "handed back: no one reserved after the run");
        assert_eq!(mp.reserve_run(2), Ok((1, 2)));
        assert_eq!(mp.reserve(1), Ok((3, 0)));
        mp.release_run(2, 3);
        assert_eq!(mp.used(), 4, "someone reserved after the run: not handed back");
        let h = mp.mem().read(2 * 4 + 3);
        assert_eq!(sq_hdr::OPCODE.get(h) as u8, op::NOP);
        assert!(sq_hdr::VALID.is_set(h), "the NOP carries this lap's valid bit");
        for (pos, id) in [(0u32, 10u64), (1, 11), (3, 13)] {
            let t = SqWrTrk { wr_id: id, wr_len: 0, quanta: 1, signaled: true };
            mp.fill_publish(pos, 0, t, |slot, valid| {
                encode_body(&SqPost::new(id, SqOp::Nop), slot, valid, 1)
            });
        }
        assert_eq!(mp.published(), 4);
        assert_eq!(mp.complete_at(3).map(|t| t.wr_id), Some(13));
        assert_eq!(mp.used(), 0);
        // The ring is whole again: 8 quanta fit, the 9th does not.
        assert_eq!(mp.reserve_run(9), Ok((4, 8)));
    }

    /// `complete_at` refuses a WQE whose tracking entry reaches past the
    /// head (`d + q > avail`) and accepts one that ends at it; and refuses
    /// everything while the head it reads is older than the tail (a head
    /// snapshot from before another completer's retirement), although the
    /// quanta it names are published and the tail CAS would succeed.
    #[test]
    fn complete_at_refuses_past_the_head_and_a_head_behind_the_tail() {
        let mut b = vec![0u64; 8 * 4];
        let tb: Vec<MpTrk> = (0..8).map(|_| MpTrk::new()).collect();
        let mp = MpSq::new(view(&mut b), &tb[..], 8, 13, 101, 7).unwrap();
        for i in 0..4 {
            mp.post(&SqPost::new(i, SqOp::Nop)).unwrap();
        }
        // The entry of the last WQE (position 3) says 2 quanta: one past the head.
        tb[3].store(SqWrTrk { wr_id: 3, wr_len: 0, quanta: 2, signaled: true });
        assert_eq!(mp.complete_at(3), None, "retired past the head");
        assert_eq!(mp.used(), 4);
        tb[3].store(SqWrTrk { wr_id: 3, wr_len: 0, quanta: 1, signaled: true });
        assert_eq!(mp.complete_at(1).map(|t| t.wr_id), Some(1));
        // A head older than the tail (2): quanta 2 and 3 are published.
        mp.head.store(1, Ordering::Relaxed);
        assert_eq!(mp.complete_at(2), None, "head behind the tail");
        assert_eq!(mp.complete_at(3), None, "head behind the tail");
        mp.head.store(4, Ordering::Relaxed);
        assert_eq!(mp.complete_at(3).map(|t| t.wr_id), Some(3));
        assert_eq!(mp.used(), 0);
    }

    /// A chain reserves once for the WRs that fit: a full ring posts the
    /// first ones and names the first that did not fit.
    #[test]
    fn chain_posts_what_fits_then_full() {
        use crate::wr::{SendFlags, SendWr, WrOpcode};
        struct NoBar;
        impl Bar for NoBar {
            fn read32(&self, _o: usize) -> u32 {
                0
            }
            fn write32(&self, _o: usize, _v: u32) {}
        }
        let mut b = vec![0u64; 8 * 4];
        let tb: Vec<MpTrk> = (0..8).map(|_| MpTrk::new()).collect();
        let mp = MpSq::new(view(&mut b), &tb[..], 8, 13, 101, 7).unwrap();
        let sg = [Sge { addr: 1, length: 10, lkey: 2 }];
        let wr = SendWr {
            wr_id: 5,
            opcode: WrOpcode::RdmaWrite { remote_addr: 0, rkey: 1 },
            flags: SendFlags::SIGNALED,
            sg_list: &sg,
        };
        assert_eq!(mp.post_send(&NoBar, QpKind::Rc, &[wr; 3]), Ok(()));
        let r = mp.post_send(&NoBar, QpKind::Rc, &[wr; 7]);
        assert_eq!(r, Err(PostSendError { bad_wr: 5, kind: SqError::Full }));
        assert_eq!(mp.used(), 8);
        assert_eq!(mp.published(), 8);
    }

    /// `complete_at` scans valid bits, not tracking entries, up to the
    /// named quantum: a CQE naming the second quantum of a 2-quanta WQE is
    /// refused (its tracking entry is marked as no WQE start), on the first
    /// lap (fresh entries say "one quantum") and after a wrap (a stale
    /// entry of a one-quantum WQE of the lap before).
    #[test]
    fn complete_at_refuses_an_inner_quantum() {
        let mut b = vec![0u64; 8 * 4];
        let tb: Vec<MpTrk> = (0..8).map(|_| MpTrk::new()).collect();
        let mp = MpSq::new(view(&mut b), &tb[..], 8, 13, 101, 7).unwrap();
        let sges = [Sge { addr: 1, length: 1, lkey: 1 }; 3];
        let big = |id| {
            let op = SqOp::Write {
                remote_addr: 0,
                rkey: 1,
                solicited: false,
                sges: &sges,
                inline: false,
            };
            let mut p = SqPost::new(id, op);
            p.signaled = true;
            p
        };
        // Lap 0: one-quantum WQEs at 0..3, retired; a 2-quanta one at 4..5.
        for i in 0..4 {
            mp.post(&SqPost::new(i, SqOp::Nop)).unwrap();
        }
        assert_eq!(mp.complete_at(3).map(|t| t.wr_id), Some(3));
        assert_eq!(mp.post(&big(10)).map(|p| (p.wqe_idx, p.quanta)), Ok((4, 2)));
        assert_eq!(mp.complete_at(5), None, "inner quantum completed");
        assert_eq!(mp.complete_at(4).map(|t| t.wr_id), Some(10));
        // Lap 1: 6, 7 and 0 one quantum, then a 2-quanta WQE at 1..2, whose
        // inner quantum 2 held a one-quantum WQE on lap 0.
        for i in 0..3 {
            mp.post(&SqPost::new(20 + i, SqOp::Nop)).unwrap();
        }
        assert_eq!(mp.post(&big(30)).map(|p| (p.wqe_idx, p.quanta)), Ok((1, 2)));
        assert_eq!(mp.complete_at(2), None, "inner quantum completed after the wrap");
        assert_eq!(mp.complete_at(1).map(|t| t.wr_id), Some(30));
        assert_eq!(mp.used(), 0);
    }

    #[test]
    fn full_and_complete() {
        let mut b = vec![0u64; 8 * 4];
        let tb: Vec<MpTrk> = (0..8).map(|_| MpTrk::new()).collect();
        let mp = MpSq::new(view(&mut b), &tb[..], 8, 13, 101, 7).unwrap();
        for i in 0..8 {
            mp.post(&SqPost::new(i, SqOp::Nop)).unwrap();
        }
        assert_eq!(mp.post(&SqPost::new(9, SqOp::Nop)), Err(SqError::Full));
        assert_eq!(mp.complete_at(2).map(|t| t.wr_id), Some(2));
        assert_eq!(mp.complete_at(2), None, "already retired");
        assert_eq!(mp.used(), 5);
        assert_eq!(mp.post(&SqPost::new(10, SqOp::Nop)).unwrap().wqe_idx, 0);
    }

    /// Under Miri (weak-memory emulation on, issue #28) a dozen posts per
    /// producer: the same races, in a time Miri can afford.
    #[test]
    fn threads_publish_every_wqe_once_in_order() {
        extern crate std;
        use std::sync::atomic::{AtomicBool, Ordering as O};
        let mut b = vec![0u64; 512 * 4];
        let tb: Vec<MpTrk> = (0..512).map(|_| MpTrk::new()).collect();
        let mp = MpSq::new(view(&mut b), &tb[..], 512, 13, 101, 7).unwrap();
        let done = AtomicBool::new(false);
        let per = if cfg!(miri) { 12u64 } else { 300u64 };
        let seen = std::thread::scope(|s| {
            for t in 0..3u64 {
                let mp = &mp;
                s.spawn(move || {
                    let sg = [Sge { addr: t, length: 1, lkey: t as u32 }];
                    for i in 0..per {
                        let n = if i % 7 == 0 { 1 } else { 0 };
                        let sges = &[sg[0]; 13][..12 * n + 1];
                        let op = SqOp::Write {
                            remote_addr: t,
                            rkey: t as u32,
                            solicited: false,
                            sges,
                            inline: false,
                        };
                        while mp.post(&SqPost::new((t << 32) | i, op)).is_err() {
                            std::hint::spin_loop();
                        }
                    }
                });
            }
            // The "device": consume in order, check each WQE is whole.
            let dev = s.spawn(|| {
                let mut cur = 0u32;
                let mut last = [None::<u64>; 3];
                let mut n = 0;
                while n < 3 * per {
                    let idx = cur & 511;
                    let h = mp.mem().read(idx as usize * 4 + 3);
                    if ((h >> 63) != 0) != ((cur >> 9) & 1 == 0) {
                        std::hint::spin_loop();
                        continue;
                    }
                    // The body is read after the valid bit, as the device
                    // does (the producers' `dma_wmb` pairs with this).
                    irdma_hal::barrier::dma_rmb();
                    let opc = sq_hdr::OPCODE.get(h) as u8;
                    if opc == op::NOP {
                        cur += 1;
                        continue;
                    }
                    let id = sq_hdr::REMSTAG.get(h);
                    assert_eq!(mp.mem().read(idx as usize * 4 + 2), id, "body before header");
                    let t = mp.complete_at(idx).expect("published");
                    let th = (t.wr_id >> 32) as usize;
                    assert_eq!(th as u64, id);
                    if let Some(prev) = last[th] {
                        assert!(t.wr_id == prev + 1, "per-producer order");
                    }
                    last[th] = Some(t.wr_id);
                    cur += u32::from(t.quanta);
                    n += 1;
                }
                done.store(true, O::SeqCst);
                n
            });
            dev.join().unwrap()
        });
        assert_eq!(seen, 3 * per);
        assert_eq!(mp.used(), 0);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    extern crate std;
    use super::*;
    use crate::uk::mem::CheckedSlot;
    use crate::uk::sq::SqOp;
    use crate::wr::Sge;
    use loom::sync::Arc;
    use std::vec::Vec;

    /// Ring memory whose every access loom sees: the qwords as atomics
    /// (relaxed loads and stores, `publish` a release store), and for the
    /// body qwords (0–2 of each quantum; qword 3 carries the valid bit and
    /// is read while being written by design) a loom cell that every read
    /// and write also touches, so loom reports a body store that does not
    /// happen after the previous lap's stores and reads of that qword (a
    /// slot reused before it was released).
    struct LoomMem(Vec<AtomicU64>, Vec<loom::cell::UnsafeCell<()>>);

    impl LoomMem {
        fn new(qwords: usize) -> Self {
            LoomMem(
                (0..qwords).map(|_| AtomicU64::new(0)).collect(),
                (0..qwords).map(|_| loom::cell::UnsafeCell::new(())).collect(),
            )
        }

        /// The body qword `i`'s cell (`None` for qword 3 of a quantum).
        fn body(&self, i: usize) -> Option<&loom::cell::UnsafeCell<()>> {
            if i % QUANTUM_QWORDS == 3 { None } else { self.1.get(i) }
        }
    }

    impl Words for LoomMem {
        type Slot<'m> = CheckedSlot<'m, LoomMem>;
        fn slot(&self, base: usize, len: usize) -> CheckedSlot<'_, LoomMem> {
            CheckedSlot::new(self, base, len)
        }
        fn qwords(&self) -> usize {
            self.0.len()
        }
        fn read(&self, i: usize) -> u64 {
            if let Some(c) = self.body(i) {
                c.with(|_| ());
            }
            self.0.get(i).map_or(0, |a| a.load(Ordering::Relaxed))
        }
        fn write(&self, i: usize, v: u64) {
            if let Some(c) = self.body(i) {
                c.with_mut(|_| ());
            }
            if let Some(a) = self.0.get(i) {
                a.store(v, Ordering::Relaxed)
            }
        }
        fn publish(&self, i: usize, v: u64) {
            // dma_wmb + store == a release store in the model.
            if let Some(a) = self.0.get(i) {
                a.store(v, Ordering::Release)
            }
        }
    }

    type Shared = MpSq<LoomMem, Vec<MpTrk>>;

    fn ring(quanta: usize) -> Arc<Shared> {
        let mem = LoomMem::new(quanta * 4);
        let trk = (0..quanta).map(|_| MpTrk::new()).collect();
        Arc::new(MpSq::new(mem, trk, quanta as u32, 13, 101, 7).unwrap())
    }

    /// Producer `id` posts a WRITE of `nsge` SGEs whose every id-bearing
    /// field (rkey, remote address, each lkey) is `id`.
    fn produce(sq: &Shared, id: u64, nsge: usize) {
        let sges: Vec<Sge> =
            (0..nsge).map(|_| Sge { addr: id, length: 1, lkey: id as u32 }).collect();
        let op = SqOp::Write {
            remote_addr: id,
            rkey: id as u32,
            solicited: false,
            sges: &sges,
            inline: false,
        };
        sq.post(&SqPost::new(id, op)).unwrap();
    }

    /// The device's view at one instant of quanta `start..end`: walking in
    /// ring order like the device (stop at the first quantum without this
    /// lap's valid bit), every valid WQE has its whole body (headers are
    /// read with acquire: the `dma_wmb` before them is a release). In this
    /// model every fragment has length 1 and every WQE a distinct id;
    /// positions are free-running (lap = position / size).
    ///
    /// Returns the ids of the WQEs the device may execute, in ring order.
    fn observe(sq: &Shared, start: u32, end: u32) -> Vec<u64> {
        let n = sq.size();
        let word = |pos: u32| sq.mem().0[(pos % n) as usize * 4 + 3].load(Ordering::Acquire);
        let valid = |pos: u32, w: u64| (w >> 63 != 0) == (pos / n).is_multiple_of(2);
        let mut seen = Vec::new();
        let mut cur = start;
        while cur < end {
            let idx = (cur % n) as usize;
            let h = word(cur);
            if !valid(cur, h) {
                break;
            }
            if sq_hdr::OPCODE.get(h) as u8 == op::NOP {
                cur += 1;
                continue;
            }
            let id = sq_hdr::REMSTAG.get(h);
            assert_eq!(sq.mem().read(idx * 4 + 2), id, "partly written WQE (remote address)");
            assert_eq!(sq.mem().read(idx * 4 + 1) & 0xffff_ffff, id, "partly written SGE 0");
            let quanta = sq_hdr::ADDFRAGCNT.get(h) as u32 / 2 + 1;
            for q in 1..quanta {
                let f = word(cur + q);
                assert_eq!(f & 0xffff_ffff, id, "partly written fragment");
                assert!(valid(cur + q, f), "fragment valid bit missing");
            }
            assert!(!seen.contains(&id), "seen twice");
            seen.push(id);
            cur += quanta;
        }
        seen
    }

    /// After all producers finished: everything is published, each id once,
    /// and completing them in ring order retires the whole ring.
    fn settle(sq: &Shared, start: u32, end: u32, ids: &[u64]) {
        let seen = observe(sq, start, end);
        let mut sorted = seen.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, ids);
        assert_eq!(sq.published(), end);
        let mut cur = start;
        for id in seen {
            loop {
                let h = sq.mem().read((cur % sq.size()) as usize * 4 + 3);
                if sq_hdr::OPCODE.get(h) as u8 != op::NOP {
                    break;
                }
                cur += 1;
            }
            let t = sq.complete_at(cur % sq.size()).expect("published WQE completes");
            assert_eq!(t.wr_id, id);
            cur += u32::from(t.quanta);
        }
        assert_eq!(sq.used(), 0);
    }

    /// Called by the observing thread (the device, the completer) right
    /// after spawning the producers. loom 0.7 keeps only the last access
    /// of each atomic for its race detection, so a producer's own `head`
    /// load before its CAS hides the race with the observer's earlier load
    /// and the producers were never run first (tokio-rs/loom#166, #392):
    /// these models passed having explored almost nothing. Yielding lets
    /// the producers run, and the observer is then scheduled back at every
    /// point the bounded search tries.
    fn let_producers_run() {
        loom::thread::yield_now();
    }

    fn bounded(bound: usize, f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(bound);
        b.max_branches = 100_000;
        b.check(f);
    }

    #[test]
    fn loom_two_producers_publish_whole_wqes() {
        bounded(3, || {
            let sq = ring(8);
            let a = sq.clone();
            let b = sq.clone();
            let ta = loom::thread::spawn(move || produce(&a, 1, 1));
            let tb = loom::thread::spawn(move || produce(&b, 2, 1));
            let_producers_run();
            observe(&sq, 0, 2);
            ta.join().unwrap();
            tb.join().unwrap();
            settle(&sq, 0, 2, &[1, 2]);
        });
    }

    #[test]
    fn loom_padding_published_with_its_wqe() {
        // Head at 6 of a 16-quanta ring: a 2-quanta WQE (3 SGEs) and a
        // 1-quantum one. If the small one reserves first (6), the big one
        // needs a NOP pad at 7 and lands at 8..9; the pad is published in
        // order with it. Otherwise the big one sits at 6..7 and the small one at 8.
        bounded(2, || {
            let sq = ring(16);
            for i in 0..6 {
                sq.post(&SqPost::new(100 + i, SqOp::Nop)).unwrap();
            }
            assert!(sq.complete_at(5).is_some());
            let a = sq.clone();
            let b = sq.clone();
            let ta = loom::thread::spawn(move || produce(&a, 1, 3));
            let tb = loom::thread::spawn(move || produce(&b, 2, 1));
            let_producers_run();
            observe(&sq, 6, 10);
            ta.join().unwrap();
            tb.join().unwrap();
            let end = sq.published();
            assert!(end == 9 || end == 10, "pad only when the big WQE crosses the chunk");
            settle(&sq, 6, end, &[1, 2]);
        });
    }

    #[test]
    fn loom_three_producers() {
        // Preemption bound 1 keeps the three-producer model tractable (a few
        // seconds); the two-producer models run with bounds 2–3.
        bounded(1, || {
            let sq = ring(8);
            let hs: Vec<_> = (1..=3u64)
                .map(|id| {
                    let s = sq.clone();
                    loom::thread::spawn(move || produce(&s, id, 1))
                })
                .collect();
            let_producers_run();
            observe(&sq, 0, 3);
            for h in hs {
                h.join().unwrap();
            }
            settle(&sq, 0, 3, &[1, 2, 3]);
        });
    }

    /// Moves head and tail to `at` (completing `at` NOPs), so that the next
    /// posts start there (e.g. just before the wrap).
    fn advance(sq: &Shared, at: u32) {
        for i in 0..at {
            sq.post(&SqPost::new(1000 + u64::from(i), SqOp::Nop)).unwrap();
        }
        if at > 0 {
            assert!(sq.complete_at(at - 1).is_some());
        }
    }

    /// The completer against two producers across the ring wrap: a CQE
    /// naming the second reservation (position 8 = ring index 0, lap 1)
    /// arrives at any moment. It is accepted only once both WQEs before and
    /// at it are published, and then hands back a tracking entry one of the
    /// producers wrote — never the stale one of lap 0 (the old bound, the
    /// reservation head, accepted it while the producer was still filling).
    #[test]
    fn loom_completer_bounded_by_publication_across_the_wrap() {
        bounded(2, || {
            let sq = ring(8);
            advance(&sq, 7);
            let a = sq.clone();
            let b = sq.clone();
            let ta = loom::thread::spawn(move || produce(&a, 1, 1));
            let tb = loom::thread::spawn(move || produce(&b, 2, 1));
            let_producers_run();
            let early = sq.complete_at(0);
            if let Some(t) = early {
                assert!(t.wr_id == 1 || t.wr_id == 2, "stale tracking entry {}", t.wr_id);
            }
            ta.join().unwrap();
            tb.join().unwrap();
            match early {
                Some(_) => assert_eq!(sq.used(), 0),
                None => settle(&sq, 7, 9, &[1, 2]),
            }
        });
    }

    /// The completer (the CQ poller) in a thread of its own, spinning on
    /// `take` until it hands back an entry while `main` produces WQE 1 at
    /// position 0: the entry taken is the one the producer wrote (wr_id 1,
    /// length 1), never the ring's initial one (wr_id 0, length 0). `take` is `complete_at(0)`
    /// or `retire_oldest()`.
    ///
    /// Why the completer is its own thread and the stale entry was stored
    /// by another one: loom 0.7 lets a relaxed load return an older store
    /// only if the loading thread has not itself seen that store before its
    /// last `yield_now` (`rt/atomic.rs`, `match_load_to_stores`,
    /// `is_seen_before_yield`: the progress rule for spin loops). A
    /// completer that wrote or read the old entry and then yielded (as the
    /// `main` completers of the models above do) can never read it stale,
    /// with or without the fence. Here the completer's first load of the
    /// entry comes after the header load that saw the valid bit, and the
    /// old entry was stored by `main` (`MpTrk::new`), so without the
    /// acquire fence loom offers both stores to the relaxed entry load.
    /// (Checked: with a `peek(0)` and a `yield_now` added at the start of
    /// the completer, the model passes with the `complete_at` fence
    /// deleted.) The ring memory is `LoomMem`: relaxed header loads, a
    /// release store for `dma_wmb` + header store, so nothing but the
    /// fence orders the entry load after the header load.
    fn completer_takes_the_producers_entry(take: fn(&Shared) -> Option<SqWrTrk>) {
        bounded(2, move || {
            let sq = ring(8);
            let c = sq.clone();
            let completer = loom::thread::spawn(move || {
                loop {
                    if let Some(t) = take(&c) {
                        return t;
                    }
                    loom::thread::yield_now();
                }
            });
            produce(&sq, 1, 1);
            let t = completer.join().unwrap();
            assert_eq!(t.wr_id, 1, "stale tracking entry");
            assert_eq!(t.wr_len, 1, "stale tracking meta");
            assert_eq!(sq.used(), 0);
        });
    }

    /// [`completer_takes_the_producers_entry`] through `complete_at`: fails
    /// ("stale tracking entry": the completer read wr_id 0) when the
    /// `fence(Ordering::Acquire)` in `MpSq::complete_at` is deleted —
    /// checked by deleting it and running this model — and passes with it.
    #[test]
    fn loom_complete_at_fence_orders_the_entry_after_the_header() {
        completer_takes_the_producers_entry(|sq| sq.complete_at(0));
    }

    /// The same through `retire_oldest` (flush replay), whose header check
    /// and fence are `published_at`'s: fails when the
    /// `fence(Ordering::Acquire)` in `MpSq::published_at` is deleted (checked
    /// the same way) and passes with it.
    #[test]
    fn loom_published_at_fence_orders_the_entry_after_the_header() {
        completer_takes_the_producers_entry(|sq| sq.retire_oldest().map(|(_, _, t)| t));
    }

    /// Slot reuse across the ring wrap, released only through `tail`:
    /// `main` posts WR 1 at position 7 (ring index 7) and a 7-quanta WR 2
    /// at 8..14 after the reuser started, fills the ring, retires both
    /// with `complete`, then raises a *relaxed* flag; the reuser, which
    /// waits for that flag (it carries no ordering) and retries while the
    /// ring looks full, posts WR 3 with `post` at position 15 — ring index
    /// 7 again. Its body stores must happen after `main`'s stores of WR 1
    /// there (`LoomMem`'s cells report them otherwise): the only edge is
    /// the completer's release CAS on `tail` and the producer's acquire
    /// load of it before it reserves.
    fn reuse_waits_for_the_tail(complete: fn(&Shared), post: fn(&Shared) -> bool) {
        use loom::sync::atomic::AtomicBool;
        bounded(2, move || {
            let sq = ring(8);
            advance(&sq, 7);
            let go = Arc::new(AtomicBool::new(false));
            let (b, g) = (sq.clone(), go.clone());
            let reuser = loom::thread::spawn(move || {
                while !g.load(Ordering::Relaxed) {
                    loom::thread::yield_now();
                }
                while !post(&b) {
                    loom::thread::yield_now();
                }
            });
            produce(&sq, 1, 1);
            produce(&sq, 2, 13);
            assert_eq!(sq.used(), 8);
            complete(&sq);
            assert_eq!(sq.used(), 0);
            go.store(true, Ordering::Relaxed);
            reuser.join().unwrap();
            assert_eq!(sq.complete_at(7).map(|t| t.wr_id), Some(3));
        });
    }

    /// WR 3 in [`reuse_waits_for_the_tail`], posted by `post` (`reserve`)
    /// or `post_send` (`reserve_run`); false while the ring looks full.
    fn post_3(sq: &Shared) -> bool {
        let sges = [Sge { addr: 3, length: 1, lkey: 3 }];
        let op =
            SqOp::Write { remote_addr: 3, rkey: 3, solicited: false, sges: &sges, inline: false };
        match sq.post(&SqPost::new(3, op)) {
            Ok(_) => true,
            Err(e) => {
                assert_eq!(e, SqError::Full);
                false
            }
        }
    }

    fn post_send_3(sq: &Shared) -> bool {
        use crate::wr::{SendFlags, SendWr, WrOpcode};
        let sg = [Sge { addr: 3, length: 1, lkey: 3 }];
        let wr = SendWr {
            wr_id: 3,
            opcode: WrOpcode::RdmaWrite { remote_addr: 3, rkey: 3 },
            flags: SendFlags::SIGNALED,
            sg_list: &sg,
        };
        match sq.post_send(&LoomBar(AtomicU32::new(0)), QpKind::Rc, &[wr]) {
            Ok(()) => true,
            Err(e) => {
                assert_eq!(e.kind, SqError::Full);
                false
            }
        }
    }

    /// [`reuse_waits_for_the_tail`] with `complete_at` and `post`: fails
    /// (loom: causality violation on a body qword of ring index 7) when
    /// the `Release` of `complete_at`'s `tail` CAS or the `Acquire` of
    /// `reserve`'s `tail` load is made `Relaxed` (checked by making each
    /// change and running this model); passes as written.
    #[test]
    fn loom_slot_reused_only_after_complete_at_released_it() {
        reuse_waits_for_the_tail(
            |sq| assert_eq!(sq.complete_at(0).map(|t| t.wr_id), Some(2)),
            post_3,
        );
    }

    /// The same with `retire_oldest` (twice) and `post_send`: fails when
    /// the `Release` of `retire_oldest`'s `tail` CAS or the `Acquire` of
    /// `reserve_run`'s `tail` load is made `Relaxed` (checked the same
    /// way); passes as written.
    #[test]
    fn loom_slot_reused_only_after_retire_oldest_released_it() {
        reuse_waits_for_the_tail(
            |sq| {
                assert_eq!(sq.retire_oldest().map(|(i, _, t)| (i, t.wr_id)), Some((7, 1)));
                assert_eq!(sq.retire_oldest().map(|(i, _, t)| (i, t.wr_id)), Some((0, 2)));
            },
            post_send_3,
        );
    }

    /// A register block whose doorbell the model can see: each WQEALLOC
    /// write is a release increment (the `wmb` before it orders the ring
    /// stores; the device reads the ring after it).
    struct LoomBar(AtomicU32);

    impl Bar for LoomBar {
        fn read32(&self, _o: usize) -> u32 {
            0
        }
        fn write32(&self, o: usize, _v: u32) {
            if o == regs::WQEALLOC {
                self.0.fetch_add(1, Ordering::Release);
            }
        }
    }

    /// The doorbell: two producers post through `post_send` (one doorbell
    /// each) while the device looks. Whenever the device has seen both
    /// doorbells, its in-order walk reaches both WQEs, whatever order the
    /// producers published in: the last doorbell comes after every header.
    #[test]
    fn loom_doorbells_cover_every_published_wqe() {
        use crate::wr::{SendFlags, SendWr, WrOpcode};
        bounded(2, || {
            let sq = ring(8);
            let bar = Arc::new(LoomBar(AtomicU32::new(0)));
            let hs: Vec<_> = (1..=2u64)
                .map(|id| {
                    let (s, bar) = (sq.clone(), bar.clone());
                    loom::thread::spawn(move || {
                        let sg = [Sge { addr: id, length: 1, lkey: id as u32 }];
                        let wr = SendWr {
                            wr_id: id,
                            opcode: WrOpcode::RdmaWrite { remote_addr: id, rkey: id as u32 },
                            flags: SendFlags::SIGNALED,
                            sg_list: &sg,
                        };
                        s.post_send(&*bar, QpKind::Rc, &[wr]).unwrap();
                    })
                })
                .collect();
            let_producers_run();
            if bar.0.load(Ordering::Acquire) == 2 {
                assert_eq!(observe(&sq, 0, 2).len(), 2, "a doorbell before a header");
            }
            for h in hs {
                h.join().unwrap();
            }
            settle(&sq, 0, 2, &[1, 2]);
        });
    }

    /// Chains through `post_send`: producer A posts [hot 1, 3-SGE 2] (one
    /// CAS reserves two quanta; the 3-SGE WR is not hot, so the unused
    /// quantum is handed back, or published as a NOP if B reserved after
    /// it), producer B posts [hot 3]. The device sees whole WQEs, A's in its
    /// order; afterwards everything is published and completes once.
    #[test]
    fn loom_chain_reserves_once_and_releases_the_rest() {
        use crate::wr::{SendFlags, SendWr, WrOpcode};
        bounded(2, || {
            let sq = ring(16);
            let bar = Arc::new(LoomBar(AtomicU32::new(0)));
            let (a, bar_a) = (sq.clone(), bar.clone());
            let ta = loom::thread::spawn(move || {
                let s1 = [Sge { addr: 1, length: 1, lkey: 1 }];
                let s3 = [Sge { addr: 2, length: 1, lkey: 2 }; 3];
                let wr = |id: u64, sg| SendWr {
                    wr_id: id,
                    opcode: WrOpcode::RdmaWrite { remote_addr: id, rkey: id as u32 },
                    flags: SendFlags::SIGNALED,
                    sg_list: sg,
                };
                a.post_send(&*bar_a, QpKind::Rc, &[wr(1, &s1[..]), wr(2, &s3[..])]).unwrap();
            });
            let (b, bar_b) = (sq.clone(), bar.clone());
            let tb = loom::thread::spawn(move || {
                let s1 = [Sge { addr: 3, length: 1, lkey: 3 }];
                let wr = SendWr {
                    wr_id: 3,
                    opcode: WrOpcode::RdmaWrite { remote_addr: 3, rkey: 3 },
                    flags: SendFlags::SIGNALED,
                    sg_list: &s1,
                };
                b.post_send(&*bar_b, QpKind::Rc, &[wr]).unwrap();
            });
            let_producers_run();
            let seen = observe(&sq, 0, 16);
            let (p1, p2) = (seen.iter().position(|&i| i == 1), seen.iter().position(|&i| i == 2));
            if let Some(p2) = p2 {
                assert!(p1.is_some_and(|p1| p1 < p2), "chain order");
            }
            ta.join().unwrap();
            tb.join().unwrap();
            assert_eq!(bar.0.load(Ordering::Acquire), 2);
            let end = sq.published();
            assert_eq!(end, sq.used(), "every reserved quantum published");
            settle(&sq, 0, end, &[1, 2, 3]);
        });
    }

    /// The shared QP's gate (`PostGate`, the real code of
    /// `SharedQp::post_send` and `Cq::poll_shared`): a poster racing the
    /// control path that sets the QP's error flag and the poller that then
    /// flushes. The flush owns the SQ's retirement state (a loom cell): a
    /// lock-free post that overlapped it would be a causality violation.
    #[test]
    fn loom_shared_qp_gate_never_lets_a_post_overlap_the_flush() {
        use loom::cell::UnsafeCell;
        use loom::sync::atomic::AtomicBool;
        bounded(3, || {
            let gate = Arc::new(PostGate::new());
            let err = Arc::new(AtomicBool::new(false));
            let sq_state = Arc::new(UnsafeCell::new(0u32));
            let (g, e, st) = (gate.clone(), err.clone(), sq_state.clone());
            let poster = loom::thread::spawn(move || {
                // SAFETY: the model checks that this read never races the
                // flush's write (that is the property under test).
                g.lock_free(|| e.load(Ordering::Acquire), || st.with(|p| unsafe { *p }))
            });
            // The control path (set_qp_error) and then the poller.
            err.store(true, Ordering::Release);
            let_producers_run();
            if err.load(Ordering::Acquire) && gate.may_flush() {
                // SAFETY: as above.
                sq_state.with_mut(|p| unsafe { *p += 1 });
            }
            let _ = poster.join().unwrap();
        });
    }
}
