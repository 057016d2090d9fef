//! The CQ side of plain QPs: each [`super::Qp`] keeps its completion half
//! ([`QpCompl`]: the consumer half of its split SQ/RQ, `uk::link`) in host
//! memory it owns and registers it in the device's table under its QP
//! number, so [`super::Cq::poll`] resolves a CQE's completion context (the
//! QP number) itself — no QP list. See ARCHITECTURE.md, "Polling a CQ
//! without listing its QPs".

use core::cell::UnsafeCell;
use core::ptr::NonNull;

use irdma_hal::{Bar, BufferDirection, Dma, Hal};

use super::error::VerbsError;
use crate::Phrase;
use crate::device::compl::QpCompl;
use crate::device::{Device, MAX_QPS};
use crate::uk::cq::flush_code;
use crate::uk::link::{QpLink, SlotGuard};
use crate::uk::mem::HeapRef;
use crate::uk::qp::wc_opcode_sq;
use crate::uk::{QpLookup, QpUk, SendQueue, Sq};
use crate::wr::{WcOpcode, WcStatus, WorkCompletion};
use irdma_hal::wqe::{cqe, op};

/// How often a post in ERROR tries the QP's lock before it returns
/// [`PostErrorKind::Busy`]: long enough for another poster's short hold
/// (a few WQEs, no doorbell), bounded so that a holder the caller
/// interrupted cannot hang it. A poll tries a table slot's lock as often.
/// Re-exported as `verbs::BUSY_TRIES`.
///
/// [`PostErrorKind::Busy`]: super::PostErrorKind::Busy
pub const BUSY_TRIES: u32 = 4096;

/// What a CQ poll resolves completions through: the device's table of
/// plain QPs ([`Table`]) or a caller's list of locked shared QPs
/// (`verbs::lookup`).
pub(super) trait PollQps<S: SendQueue>: QpLookup<'static, S> {
    /// Adopts the control path's ERROR on the QPs' data path.
    fn sync_errors(&mut self);
    /// A live QP of this CQ whose CQE the poll stopped at, unresolved.
    fn held(&self) -> Option<u32>;
    /// The software flush of the QPs in error on this CQ into `wc`.
    fn flush(&mut self, wc: &mut [WorkCompletion]) -> usize;
    /// Lets go of anything held for the lookups so far.
    fn release(&mut self) {}
}

/// Builds the completion half of a QP whose producer half is `uk` in a
/// host-only allocation, registers it under `qpn`, and returns it with the
/// memory (which must outlive the registration: see [`unregister`]).
///
/// # Safety
///
/// `uk`'s rings and tracking memory outlive the returned allocation's use
/// (the QP owns both and unregisters before freeing either), and from now
/// on `uk` only posts, learning its tails through the returned link
/// (`Sq::split_consumer`'s contract).
pub(crate) unsafe fn attach<H: Hal, B: Bar + Clone>(
    dev: &Device<H, B>,
    uk: &QpUk<'static>,
    qpn: u32,
    send_cq: u32,
    recv_cq: u32,
) -> Result<(HeapRef<QpCompl>, Dma<H>), VerbsError> {
    let slot = dev
        .qp_compl
        .get(qpn as usize)
        .ok_or(VerbsError::Invalid { what: Phrase::new(&"QP number") })?;
    let mem =
        Dma::<H>::with_bytes(core::mem::size_of::<QpCompl>(), BufferDirection::DriverToDevice)?;
    if core::mem::size_of::<QpCompl>() > mem.len()
        || core::mem::align_of::<QpCompl>() > irdma_hal::PAGE_SIZE
    {
        return Err(VerbsError::Invalid { what: Phrase::new(&"QP completion state") });
    }
    // SAFETY: forwarded contract (the producer only posts from now on).
    let (sq, rq) = unsafe { (uk.sq.split_consumer(), uk.rq.split_consumer()) };
    let mut cons = QpUk::new(sq, rq, uk.ctx(), uk.kind());
    cons.park_on_rq_error = uk.park_on_rq_error;
    let c = QpCompl {
        link: QpLink::new(&uk.sq, &uk.rq),
        qpn,
        ctx: uk.ctx(),
        send_cq,
        recv_cq,
        uk: UnsafeCell::new(cons),
    };
    let p = mem.vaddr().as_ptr().cast::<QpCompl>();
    // SAFETY: page-aligned (so aligned for `QpCompl`), large enough
    // (checked) and exclusively ours.
    unsafe { p.write(c) };
    // SAFETY: initialised above; the memory never moves, changes only
    // through `QpCompl`'s own cells, and the QP keeps it until after
    // `unregister` and every use of the pointer (never freeing it while
    // registered).
    let r = unsafe { HeapRef::new(mem.vaddr().cast::<QpCompl>()) };
    slot.register(r.as_ptr());
    Ok((r, mem))
}

/// Withdraws `c` from the table and waits until no poller uses it; its
/// CQEs still in a CQ are dropped from now on (as for any destroyed QP).
pub(crate) fn unregister<H: Hal, B: Bar + Clone>(dev: &Device<H, B>, c: &QpCompl) {
    if let Some(slot) = dev.qp_compl.get(c.qpn as usize) {
        slot.unregister(NonNull::from(c));
    }
}

/// Resolves CQEs through the device's table for [`super::Cq::poll`].
pub(super) struct Table<'d, H: Hal, B: Bar + Clone> {
    pub(super) dev: &'d Device<H, B>,
    pub(super) cq: u32,
    /// The slot held since the last lookup (released at a lookup of
    /// another QP and at the end of the poll).
    cur: Option<SlotGuard<'d, QpCompl>>,
    held: Option<u32>,
}

impl<'d, H: Hal, B: Bar + Clone> Table<'d, H, B> {
    pub(super) fn new(dev: &'d Device<H, B>, cq: u32) -> Self {
        Table { dev, cq, cur: None, held: None }
    }

    /// Publishes the tails of the held QP and lets it go.
    fn release(&mut self) {
        if let Some(g) = self.cur.take() {
            // SAFETY: registered and valid while `g` lives; the lock gives
            // this poller the consumer half alone.
            let c = unsafe { g.ptr().as_ref() };
            // SAFETY: as above.
            c.link.consumer_end(unsafe { &*c.uk.get() });
        }
    }
}

impl<H: Hal, B: Bar + Clone> Drop for Table<'_, H, B> {
    fn drop(&mut self) {
        self.release();
    }
}

impl<H: Hal, B: Bar + Clone> Table<'_, H, B> {
    /// [`QpLookup::lookup`] (`fast` = `None`: both producer heads read) and
    /// [`QpLookup::lookup_fast`] (`Some(sq)`: a QP the fast path may take,
    /// only the CQE's queue's head read) in one out-of-line body.
    #[inline(never)]
    fn find(&mut self, ctx: u64, fast: Option<bool>) -> Option<&mut QpUk<'static>> {
        // The completion context holds the QP number in its low 32 bits
        // (`Device::next_compl_ctx`); the whole context must match, so a
        // destroyed QP's CQEs never resolve to a later QP of that number.
        let same = self.cur.as_ref().is_some_and(|g| {
            // SAFETY: registered and valid while the guard lives, which
            // `self` keeps (so below too).
            unsafe { g.ptr().as_ref() }.ctx == ctx
        });
        if !same {
            self.release();
            let g = self.dev.qp_compl.get(ctx as u32 as usize)?.try_acquire(BUSY_TRIES).ok()?;
            // SAFETY: as above.
            let c = unsafe { g.ptr().as_ref() };
            if c.ctx != ctx || (c.send_cq != self.cq && c.recv_cq != self.cq) {
                return None;
            }
            self.cur = Some(g);
        }
        let g = self.cur.as_ref()?;
        // SAFETY: as above.
        let c = unsafe { g.ptr().as_ref() };
        // SAFETY: the slot lock gives this poller the consumer half alone
        // until `release`, and the `&mut` lives no longer than `&mut self`.
        let uk = unsafe { &mut *c.uk.get() };
        match fast {
            // A UD QP or one being destroyed: the general path (which
            // finds the held slot again) decodes its CQE.
            Some(_) if uk.fast_ctx() != ctx => return None,
            Some(sq) => c.link.consumer_begin_one(uk, sq),
            None => c.link.consumer_begin(uk),
        }
        Some(uk)
    }
}

impl<H: Hal, B: Bar + Clone> QpLookup<'static, Sq<'static>> for Table<'_, H, B> {
    fn lookup(&mut self, ctx: u64) -> Option<&mut QpUk<'static>> {
        self.find(ctx, None)
    }

    fn lookup_fast(&mut self, ctx: u64, sq: bool) -> Option<&mut QpUk<'static>> {
        self.find(ctx, Some(sq))
    }

    /// A live QP of this CQ not in the table (a shared QP, or a plain one
    /// whose slot another poller holds right now): keep its CQE.
    fn holds(&mut self, ctx: u64) -> bool {
        let live = self.dev.live_ctx_on_cq(ctx, self.cq);
        self.held = live;
        live.is_some()
    }
}

impl<H: Hal, B: Bar + Clone> PollQps<Sq<'static>> for Table<'_, H, B> {
    fn sync_errors(&mut self) {}

    fn held(&self) -> Option<u32> {
        self.held
    }

    fn release(&mut self) {
        Table::release(self);
    }

    /// The software flush of every registered QP of this CQ in ERROR.
    fn flush(&mut self, wc: &mut [WorkCompletion]) -> usize {
        self.release();
        if !self.dev.any_qp_in_error() {
            return 0;
        }
        let mut n = 0;
        for qpn in 0..MAX_QPS {
            if n >= wc.len() {
                break;
            }
            if !self.dev.qp_in_error(qpn) || !self.dev.qp_uses_cq(qpn, self.cq) {
                continue;
            }
            let Some(Ok(g)) =
                self.dev.qp_compl.get(qpn as usize).map(|s| s.try_acquire(BUSY_TRIES))
            else {
                continue;
            };
            // SAFETY: registered and valid while `g` lives; its lock gives
            // this poller the consumer half alone.
            let c = unsafe { g.ptr().as_ref() };
            // SAFETY: as above.
            let uk = unsafe { &mut *c.uk.get() };
            c.link.consumer_begin(uk);
            if let Some(rest) = wc.get_mut(n..) {
                let (send, recv) = (c.send_cq == self.cq, c.recv_cq == self.cq);
                n += flush_queues(uk, c.qpn, send, recv, rest);
            }
            c.link.consumer_end(uk);
        }
        n
    }
}

/// Completes, with `WrFlushErr`, the outstanding WRs of a QP in error:
/// its SQ if `send`, its RQ if `recv` (software flush once the CQ holds no
/// more hardware CQEs; spec data-path §5.5). Used by every poll path.
pub(super) fn flush_queues<S: SendQueue>(
    uk: &mut QpUk<'static, S>,
    qp_num: u32,
    send: bool,
    recv: bool,
    out: &mut [WorkCompletion],
) -> usize {
    let flushed = |wr_id, opcode, byte_len| WorkCompletion {
        wr_id,
        status: WcStatus::WrFlushErr,
        opcode,
        vendor_err: (u32::from(cqe::FLUSH_MAJOR_ERR) << 16) | u32::from(flush_code::GENERAL),
        byte_len,
        qp_num,
        imm_data: None,
        invalidated_rkey: None,
        solicited: false,
        ud: None,
    };
    // Hardware CQEs of these queues from now on are dropped, so a late one
    // never completes a WR twice (`QpUk::mark_sw_flushed`).
    uk.mark_sw_flushed(send, recv);
    let mut n = 0;
    if send {
        while n < out.len() {
            let Some((_, opc, t)) = uk.sq.retire_oldest() else { break };
            if opc == op::NOP && !t.signaled {
                continue;
            }
            if let Some(s) = out.get_mut(n) {
                *s = flushed(t.wr_id, wc_opcode_sq(opc).unwrap_or(WcOpcode::Send), t.wr_len);
                n += 1;
            }
        }
    }
    if recv {
        while n < out.len() {
            let Some(w) = uk.rq.retire_oldest() else { break };
            if let Some(s) = out.get_mut(n) {
                *s = flushed(w, WcOpcode::Recv, 0);
                n += 1;
            }
        }
    }
    n
}
