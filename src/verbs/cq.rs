//! Completion queues: CREATE_CQ / DESTROY_CQ and `poll_cq` /
//! `req_notify_cq` over [`crate::uk::CqRing`].

use irdma_hal::{Bar, BufferDirection, Dma, Hal};

use super::error::Quantity;
use super::error::VerbsError;
use super::table::{PollQps, Table};
use crate::Phrase;
use crate::cqp::cmd::{CreateCq, ModifyCq, QueueAddr, destroy_cq_cmd};
use crate::cqp::engine::{CqpError, device_may_own};
use crate::device::{DeferredCq, Device};
use crate::uk::mem::static_view;
use crate::uk::{self, SendQueue};
use crate::wr::WorkCompletion;

/// Largest CQ the device takes (spec control-path §2.2: 1..1048575 entries).
pub const MAX_CQE: u32 = 1_048_575;

pub use crate::device::MAX_PENDING_RESIZES;

/// A ring replaced by [`Cq::resize`], drained before the current one.
struct OldRing<H: Hal> {
    // `uk` views `ring`; declared (and dropped) first.
    uk: uk::CqRing<'static>,
    _ring: Dma<H>,
}

/// A completion queue (`ib_cq`), polled; bound to CEQ 0 unless created
/// with [`Device::create_cq_with`].
///
/// # Example
///
/// ```
/// # use irdma::prelude::*;
/// # use irdma_testkit::{FakeHal, ModelBar};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let bar = ModelBar::standalone(mock_bar::Config::default());
/// # let lan = LanInfo::single_tc(0, 6, [2, 0, 0, 0, 0, 0x0a], 1500);
/// # let dev: Device<FakeHal, ModelBar> = Device::probe(bar, lan, Profile::SMALL)?;
/// let mut cq = dev.create_cq(64)?; // at least 64 completions
/// assert_eq!(cq.cqe(), 64);
/// let mut wc = [WorkCompletion::default(); 8];
/// assert_eq!(cq.poll(&mut wc), 0); // nothing yet
/// # Ok(())
/// # }
/// ```
pub struct Cq<'d, H: Hal, B: Bar + Clone> {
    // `uk` and `old` view `ring`/`shadow`; they are declared (and dropped) first.
    uk: uk::CqRing<'static>,
    old: heapless::Vec<OldRing<H>, MAX_PENDING_RESIZES>,
    dev: &'d Device<H, B>,
    id: u32,
    cqe: u32,
    cmd: CreateCq,
    alive: bool,
    /// Set by a poll that stopped at a CQE of a live QP of this CQ that the
    /// poll could not resolve (see [`Cq::unlisted_qp`]).
    unlisted: Option<u32>,
    /// Ring and shadow area; `None` only after a failed destroy in `Drop`.
    mem: Option<(Dma<H>, Dma<H>)>,
}

/// How a CQ is created beyond its size ([`Device::create_cq_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct CqOptions {
    /// The CEQ the CQ reports to, and so the MSI-X vector its completion
    /// events raise ([`Device::ceq_vector`]); default CEQ 0. Linux takes
    /// `comp_vector` as the CEQ id (verbs.c: irdma_create_cq) and uses
    /// CEQ 0 when it is past the CEQ count; here that is an error. Must be
    /// below [`Device::irq_ceq_count`] (only CEQ 0 exists without
    /// interrupts).
    pub ceq: u16,
}

impl CqOptions {
    /// Reporting to CEQ `ceq`.
    pub fn on_ceq(ceq: u16) -> Self {
        CqOptions { ceq }
    }
}

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// `ib_create_cq` with room for at least `cqe` completions. Ring entries:
    /// (cqe + 1) × 2 (irdma_kcompat.c: irdma_create_cq: one spare entry,
    /// doubled on GEN_2 for extended CQEs), in one contiguous allocation
    /// (level 0), with a 64-byte shadow area; CEQ 0, CEQE mask and overflow
    /// check set as Linux sets them.
    pub fn create_cq(&self, cqe: u32) -> Result<Cq<'_, H, B>, VerbsError> {
        self.create_cq_with(cqe, CqOptions::default())
    }

    /// [`Device::create_cq`] with options: the CEQ (so the interrupt
    /// vector) the CQ reports to. A CEQ that does not exist is
    /// [`VerbsError::Invalid`].
    pub fn create_cq_with(&self, cqe: u32, opts: CqOptions) -> Result<Cq<'_, H, B>, VerbsError> {
        if usize::from(opts.ceq) >= self.irq_ceq_count().max(1) {
            return Err(VerbsError::Invalid { what: Phrase::new(&"CEQ") });
        }
        if cqe == 0 || cqe > MAX_CQE / 2 - 1 {
            return Err(VerbsError::AboveLimit {
                what: Quantity::Cqe,
                requested: cqe,
                max: MAX_CQE / 2 - 1,
            });
        }
        let entries = (cqe + 1) * 2;
        let ring = Dma::<H>::with_bytes(entries as usize * 32, BufferDirection::DeviceToDriver)?;
        let shadow = Dma::<H>::new(1, BufferDirection::Both)?;
        let id = {
            let mut res = self.res.lock();
            res.ids.as_mut().ok_or(VerbsError::Destroyed)?.cqs.alloc_next()?
        };
        let cmd = CreateCq {
            cq_id: id,
            cq_size: entries,
            // Echoed in CEQEs; the CQ id is unique while the CQ lives.
            cq_ctx: id as u64,
            shadow_read_threshold: (entries / 2).min(0x3_ffc0),
            ceq_id: Some(opts.ceq),
            ceqe_mask: true,
            check_overflow: true,
            ring: QueueAddr::contiguous(ring.paddr()),
            shadow_area_pa: shadow.paddr(),
            vsi_idx: self.lan.vsi_num,
            // no TPH, 32-byte CQEs, no PASID
            ..Default::default()
        };
        // SAFETY: `ring` and `shadow` are DMA allocations owned by the
        // returned `Cq` next to `uk`; they do not move when the `Cq` moves,
        // are freed only after `uk` is dropped (field order), and `uk` is
        // only used while the CQ is alive; `uk` never leaves the `Cq`.
        let mem = unsafe { static_view(&ring, 0, entries as usize * 32) };
        // SAFETY: as above.
        let sh = unsafe { static_view(&shadow, 0, 64) };
        let ukcq = match (mem, sh) {
            (Some(m), Some(s)) => uk::CqRing::new(m, s, entries, id).ok(),
            _ => None,
        };
        let free_id = |e: VerbsError| {
            self.release_cq_id(id);
            e
        };
        let Some(ukcq) = ukcq else {
            return Err(free_id(VerbsError::Invalid { what: Phrase::new(&"CQ ring") }));
        };
        // A CQ that had this id and died is gone: the new one is healthy.
        self.set_cq_dead(id, false);
        self.cq_irq_reset(id);
        if let Err(e) = self.exec_cmd(cmd) {
            if device_may_own(&e) {
                // A timeout: the device may have created the CQ and write
                // CQEs into the ring. Keep ring, shadow and id (issue #12).
                self.quarantine(ring);
                self.quarantine(shadow);
                self.quarantine_ids(1);
                return Err(e.into());
            }
            return Err(free_id(e.into()));
        }
        Ok(Cq {
            uk: ukcq,
            old: heapless::Vec::new(),
            dev: self,
            id,
            cqe,
            cmd,
            alive: true,
            unlisted: None,
            mem: Some((ring, shadow)),
        })
    }

    /// Gives back the id of a CQ whose creation failed before the device
    /// knew it. Out of line (code size: two error paths of `create_cq`).
    #[inline(never)]
    fn release_cq_id(&self, id: u32) {
        if let Some(ids) = self.res.lock().ids.as_mut() {
            let _ = ids.cqs.free(id);
        }
    }
}

impl<'d, H: Hal, B: Bar + Clone> Cq<'d, H, B> {
    /// The CQ id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The device the CQ lives on.
    pub(crate) fn device(&self) -> &'d Device<H, B> {
        self.dev
    }

    /// After a poll: the QP number of a live QP completing to this CQ that
    /// the poll could not resolve (a shared QP for [`Cq::poll`], one not
    /// listed for [`Cq::poll_shared`]), if it stopped at one of its
    /// completions. That completion is kept (not consumed, not lost); poll
    /// again the right way to receive it and everything behind it.
    pub fn unlisted_qp(&self) -> Option<u32> {
        self.unlisted
    }

    /// Whether the device reported this CQ unusable (asynchronous event
    /// CQ_OPERATION_ERROR 0x0203 or LCE_CQ_CATASTROPHIC 0x0702, reported
    /// as [`crate::aeq::AsyncEventKind::CqError`]; Linux's
    /// IB_EVENT_CQ_ERR). The device writes no more completions to it: the
    /// driver moved every QP completing to it to ERROR, [`Cq::poll`]
    /// delivers what the ring already held and then completes every
    /// outstanding WR of those QPs as flushed (`WrFlushErr`), each once,
    /// and nothing after that; posts to those QPs are refused
    /// ([`super::PostErrorKind::CqDead`]). Destroy the QPs and the CQ and
    /// create new ones.
    pub fn is_dead(&self) -> bool {
        self.alive && self.dev.cq_is_dead(self.id)
    }

    /// Completions it was created to hold (`cqe` given to create).
    pub fn cqe(&self) -> u32 {
        self.cqe
    }

    /// `ib_poll_cq`: fills `wc` and returns how many. No QP is passed: each
    /// completion's QP is found through the device's table, where every
    /// plain [`Qp`](super::Qp) registers its completion half at create and withdraws
    /// it at destroy (ARCHITECTURE.md, "Polling a CQ without listing its
    /// QPs"), so the QPs stay free to post from other threads meanwhile.
    /// Completions of destroyed QPs are dropped. A completion of a live
    /// [`super::SharedQp`] of this CQ (polled with [`Cq::poll_shared`] or a
    /// [`super::CqPoller`]) — or of a QP whose completion half another
    /// poller (its other CQ) holds at that instant — is not consumed: the
    /// poll stops there and [`Cq::unlisted_qp`] names that QP, so nothing
    /// is lost.
    ///
    /// A QP the control path moved to ERROR completes every outstanding WR
    /// exactly once: hardware flush CQEs are replayed by [`crate::uk`]; once
    /// the ring is empty, WRs the hardware did not flush (posted after the
    /// flush, or never reached by it) are completed here in software with
    /// `WrFlushErr`, from the same tails (spec data-path §5.5, §6.1).
    ///
    /// **Polling only CQs is enough.** Some errors (a bad lkey, a bad
    /// REG_MR, a remote access error) produce no CQE: the device reports
    /// them on the AEQ. A poll that finds this CQ's ring empty while `wc`
    /// has room checks the AEQ (no lock: one load of where its consumer
    /// stands and one of that AEQE's VALID word; the lock only when an
    /// entry is there) and, if it holds entries, processes them as
    /// [`Device::poll_async_events`] does — the QP goes to ERROR and is
    /// flushed — then polls again, so the failing WR's error and the
    /// flushes of the rest arrive from this or the next poll, each WR
    /// exactly once. The reports are kept (up to
    /// [`crate::aeq::PENDING_EVENTS`]) for a later `poll_async_events`;
    /// calling it is optional for completions.
    /// # Example
    ///
    /// A signaled WR on a QP of this CQ completes once:
    ///
    /// ```
    /// # use irdma::prelude::*;
    /// # use irdma_testkit::{FakeHal, ModelBar};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let bar = ModelBar::standalone(mock_bar::Config::default());
    /// # let lan = LanInfo::single_tc(0, 6, [2, 0, 0, 0, 0, 0x0a], 1500);
    /// # let dev: Device<FakeHal, ModelBar> = Device::probe(bar, lan, Profile::SMALL)?;
    /// # let pd = dev.alloc_pd()?;
    /// # let mut cq = dev.create_cq(16)?;
    /// # let cap = QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, ..QpCap::default() };
    /// # let mut qp = dev.create_qp(&pd, &mut QpInitAttr { send_cq: &cq, recv_cq: &cq, cap })?;
    /// # let me = qp.qp_num();
    /// # qp.modify(&QpAttr::new(QpState::Init))?;
    /// # let mut rtr = QpAttr::new(QpState::Rtr);
    /// # rtr.dest_qp = me;
    /// # rtr.av = Some(AddressVector { dest_mac: [2, 0, 0, 0, 0, 0x0a], dest_ip: IpAddr::V4([10, 0, 0, 1]),
    /// #     src_ip: IpAddr::V4([10, 0, 0, 1]), hop_limit: 64, traffic_class: 0, flow_label: 0, vlan: None });
    /// # qp.modify(&rtr)?;
    /// # qp.modify(&QpAttr::new(QpState::Rts))?;
    /// # let mem = Dma::<FakeHal>::new(2, BufferDirection::Both)?;
    /// # let pages = [mem.paddr(), mem.paddr() + 4096];
    /// # // SAFETY: `mem` outlives the MR and backs nothing else meanwhile.
    /// # let mr = unsafe { dev.reg_mr(&pd, &MrDesc { iova: mem.paddr(), length: 8192, page_size: PageSize::Size4K,
    /// #     pages: &pages, zero_based: false, access: Access::LOCAL_WRITE | Access::REMOTE_WRITE }) }?;
    /// let sge = [Sge { addr: mem.paddr(), length: 64, lkey: mr.lkey() }];
    /// let write = WrOpcode::RdmaWrite { remote_addr: mem.paddr() + 4096, rkey: mr.rkey() };
    /// let wr = SendWr { wr_id: 9, opcode: write, flags: SendFlags::SIGNALED, sg_list: &sge };
    /// qp.post_send(&[wr])?;
    /// let mut wc = [WorkCompletion::default(); 8];
    /// let mut n = 0;
    /// for _ in 0..100 {
    ///     n += cq.poll(&mut wc[n..]);
    ///     if n > 0 { break; }
    /// }
    /// assert_eq!(n, 1);
    /// assert_eq!((wc[0].wr_id, wc[0].status), (9, WcStatus::Success));
    /// assert_eq!(wc[0].opcode, WcOpcode::RdmaWrite);
    /// assert_eq!(cq.poll(&mut wc), 0); // exactly once
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    pub fn poll(&mut self, wc: &mut [WorkCompletion]) -> usize {
        if !self.alive {
            return 0;
        }
        // The empty poll an `ib_poll_cq` user spins on: no CQE at the head
        // of the (only) ring, no QP of the device in error (so the software
        // flush would find nothing), no AEQE at the AEQ's head (so the AEQ
        // check would consume nothing). `poll_with` would return 0 having
        // changed nothing; answer that without building the table.
        if self.old.is_empty()
            && !self.uk.has_cqe()
            && !self.dev.any_qp_in_error()
            && !self.dev.aeq_may_hold_entry()
        {
            self.unlisted = None;
            return 0;
        }
        self.poll_table(wc)
    }

    /// [`Cq::poll`] past its empty-CQ test (out of line, so the empty poll
    /// does not pay this body's register saves).
    #[inline(never)]
    fn poll_table(&mut self, wc: &mut [WorkCompletion]) -> usize {
        let mut table = Table::new(self.dev, self.id);
        // The common poll (issue #33): no ring left over from a resize,
        // and the current ring fills `wc`. Then nothing else `poll_with`
        // does could run (no old ring to retire; the AEQ check and the
        // software flush need room in `wc`), so end the poll as it would.
        // Otherwise `poll_with` goes on with the rest of `wc`: the ring
        // again (it stopped for a reason `poll_with` handles), the AEQ,
        // the software flush; with no old ring, its count is all it adds.
        if self.alive && self.old.is_empty() {
            let n = uk::poll_cq(&mut self.uk, &mut table, wc);
            let Some(rest) = wc.get_mut(n..).filter(|r| !r.is_empty()) else {
                self.unlisted = table.held();
                return n;
            };
            return n + self.poll_with(&mut table, rest);
        }
        self.poll_with(&mut table, wc)
    }

    /// The one poll loop: old rings, the current ring, the AEQ when it is
    /// empty, the software flush; completions resolved through `look`.
    pub(super) fn poll_with<S: SendQueue, L: PollQps<S>>(
        &mut self,
        look: &mut L,
        wc: &mut [WorkCompletion],
    ) -> usize {
        if !self.alive {
            return 0;
        }
        look.sync_errors();
        // Rings replaced by a resize first, oldest first, then the current
        // one (verbs.c: irdma_poll_cq / uverbs.c: __irdma_upoll_cq), so every
        // CQE is delivered once and in order.
        let mut n = 0;
        let mut last_old = None;
        let mut blocked = false;
        // Most polls have no old ring: one length test skips the loop.
        if !self.old.is_empty() {
            for (i, o) in self.old.iter_mut().enumerate() {
                let before = (o.uk.head(), o.uk.polarity());
                let got = wc.get_mut(n..).map_or(0, |rest| uk::poll_cq(&mut o.uk, look, rest));
                n += got;
                if got > 0 || (o.uk.head(), o.uk.polarity()) != before {
                    last_old = Some(i);
                }
                if o.uk.has_cqe() {
                    // Stopped (caller's array full, or an unresolved QP): nothing
                    // newer may be delivered before this ring is drained.
                    blocked = true;
                    break;
                }
            }
        }
        let mut new_cqe = false;
        if !blocked {
            // Second pass only after the AEQ was serviced: its QP errors
            // make the device write flush CQEs (spec control-path §8.2).
            for pass in 0..2 {
                let before = (self.uk.head(), self.uk.polarity());
                let got = wc.get_mut(n..).map_or(0, |rest| uk::poll_cq(&mut self.uk, look, rest));
                n += got;
                if n >= wc.len() && self.old.is_empty() {
                    // The common case: `wc` is full and no resize is
                    // pending, so nothing below could run (no old ring to
                    // retire; the AEQ check and the software flush need
                    // room): end the poll as the code below would.
                    self.unlisted = look.held();
                    return n;
                }
                new_cqe |= got > 0 || (self.uk.head(), self.uk.polarity()) != before;
                // The ring is empty and the caller wants more: an error the
                // device reports only through the AEQ (bad lkey, bad
                // REG_MR, remote access) must still reach a caller that
                // polls only CQs (issue #19), so service the AEQ here.
                if pass > 0 || n >= wc.len() || self.uk.has_cqe() || look.held().is_some() {
                    break;
                }
                // No QP's completion half is held across the control path.
                look.release();
                if !self.dev.service_async_events() {
                    break;
                }
                look.sync_errors();
            }
        }
        self.unlisted = look.held();
        // A CQE from the current ring retires every old ring; otherwise the
        // ones before the last old ring that gave a CQE (verbs.c:
        // irdma_process_resize_list). The count goes to the device through
        // SW_CQ_SELECT (uk.c: irdma_uk_cq_set_resized_cnt).
        let retire = if new_cqe { self.old.len() } else { last_old.unwrap_or(0) };
        if retire > 0 {
            for _ in 0..retire {
                if !self.old.is_empty() {
                    drop(self.old.remove(0));
                }
            }
            self.uk.set_resized_cnt(retire as u16);
        }
        if n < wc.len() && !self.uk.has_cqe() && self.old.iter().all(|o| !o.uk.has_cqe()) {
            n += wc.get_mut(n..).map_or(0, |rest| look.flush(rest));
        }
        n
    }

    /// `ib_req_notify_cq` with `IB_CQ_REPORT_MISSED_EVENTS` (spec data-path
    /// §5.7, interrupts.md A.3/A.5; verbs.c: irdma_req_notify_cq): the
    /// hardware arm is issued only when the CQ is not armed yet, or to
    /// upgrade a solicited arm to next-completion (the interrupt handler
    /// clears the flag when it consumes the CQ's CEQE). Returns whether a
    /// CQE is already in the ring after arming: the device raises an event
    /// only for CQEs written after the arm, so `true` means "poll again,
    /// do not sleep" (the poll-after-arm rule). Polled-mode drivers never
    /// need it.
    pub fn req_notify(&mut self, solicited_only: bool) -> bool {
        if !self.alive {
            return false;
        }
        if self.dev.cq_arm_decision(self.id, solicited_only) {
            self.uk.request_notification(self.dev.regs(), solicited_only);
        }
        self.uk.has_cqe() || self.old.iter().any(|o| o.uk.has_cqe())
    }

    /// The CQ is not destroyed.
    pub fn is_alive(&self) -> bool {
        self.alive
    }

    /// Old rings a resize replaced that are not yet retired.
    pub fn pending_resizes(&self) -> usize {
        self.old.len()
    }

    /// `ib_resize_cq` (verbs.c: irdma_resize_cq; ctrl.c: irdma_sc_cq_modify,
    /// irdma_sc_cq_resize): room for at least `cqe` completions in a new
    /// ring of (cqe + 1) × 2 entries, programmed with MODIFY_CQ (CQRESIZE,
    /// the CQ's current shadow read threshold, CHKOVERFLOW off as Linux
    /// leaves it). CQEs still in the old ring are delivered first, each
    /// once, by [`Cq::poll`]; the old ring is freed when a later poll
    /// retires it, and the count of retired rings is carried into arming
    /// (SW_CQ_SELECT). Same size: nothing to do (uverbs.c:
    /// irdma_uresize_cq). The limit is create's (`AboveLimit`, Linux
    /// `-EINVAL` above `max_cqe`); a failed MODIFY_CQ leaves the CQ as it
    /// was (Linux `-EPROTO`).
    pub fn resize(&mut self, cqe: u32) -> Result<(), VerbsError> {
        if !self.alive {
            return Err(VerbsError::Destroyed);
        }
        if cqe == 0 || cqe > MAX_CQE / 2 - 1 {
            return Err(VerbsError::AboveLimit {
                what: Quantity::Cqe,
                requested: cqe,
                max: MAX_CQE / 2 - 1,
            });
        }
        let entries = ((cqe + 1) * 2).max(4);
        if entries == self.cmd.cq_size {
            self.cqe = cqe;
            return Ok(());
        }
        if self.old.is_full() {
            return Err(VerbsError::InvalidState);
        }
        let ring = Dma::<H>::with_bytes(entries as usize * 32, BufferDirection::DeviceToDriver)?;
        let c = self.cmd;
        let m = ModifyCq {
            cq_id: c.cq_id,
            cq_ctx: c.cq_ctx,
            new_size: entries,
            new_shadow_read_threshold: c.shadow_read_threshold,
            resize: true,
            new_ring_pa: ring.paddr(),
            new_first_pbl_index: 0,
            new_pbl_level: 0,
            new_virtual_map: false,
            check_overflow: false,
            ceqe_mask: c.ceqe_mask,
            tph_en: c.tph_en,
            tph_val: c.tph_val,
            avoid_mem_cflct: c.avoid_mem_cflct,
            pasid_valid: c.pasid_valid,
            pasid: c.pasid,
            vsi_idx: c.vsi_idx,
            shadow_area_pa: c.shadow_area_pa,
        };
        // SAFETY: `ring` is a DMA allocation that moves into `self.mem` (or
        // into the `OldRing` that takes the view's place) and lives there
        // until after every `uk` view of it is dropped (field order); its
        // memory does not move when the `Dma` value moves.
        let view = unsafe { static_view(&ring, 0, entries as usize * 32) }
            .ok_or(VerbsError::Invalid { what: Phrase::new(&"CQ ring") })?;
        if let Err(e) = self.dev.exec_cmd(m) {
            if device_may_own(&e) {
                // A timed-out MODIFY_CQ may have moved the device to the new
                // ring: keep it (issue #12), the device needs a reset.
                let _ = view;
                self.dev.quarantine(ring);
            }
            return Err(e.into());
        }
        let Some((cur_ring, shadow)) = self.mem.take() else {
            return Err(VerbsError::Destroyed);
        };
        let old_uk = match self.uk.resize(view, entries) {
            Ok(o) => o,
            Err(_) => {
                // Unreachable (sizes checked above); keep the old state.
                self.mem = Some((cur_ring, shadow));
                return Err(VerbsError::Invalid { what: Phrase::new(&"CQ ring") });
            }
        };
        self.mem = Some((ring, shadow));
        // `is_full` was checked above.
        let _ = self.old.push(OldRing { uk: old_uk, _ring: cur_ring });
        self.cmd.cq_size = entries;
        self.cmd.ring = QueueAddr::contiguous(m.new_ring_pa);
        self.cqe = cqe;
        Ok(())
    }

    /// `ib_destroy_cq`: DESTROY_CQ with the create-time values (ctrl.c:
    /// irdma_sc_cq_destroy), then the id is freed. The memory is released
    /// when the object is dropped. Refused with [`VerbsError::InUse`] while
    /// live QPs complete to this CQ (dropping it instead defers the destroy
    /// until the last of them is destroyed).
    pub fn destroy(&mut self) -> Result<(), VerbsError> {
        if !self.alive {
            return Ok(());
        }
        if self.dev.is_gone() {
            // Its QPs cannot be destroyed either: say why.
            return Err(VerbsError::Cqp(CqpError::DeviceGone));
        }
        let users = self.users();
        if users > 0 {
            return Err(VerbsError::InUse { what: Quantity::CqWithLiveQps, users: users.into() });
        }
        let d = destroy_cq_cmd(&self.cmd);
        self.dev.exec_cmd(d)?;
        self.alive = false;
        if let Some(ids) = self.dev.res.lock().ids.as_mut() {
            let _ = ids.cqs.free(self.id);
        }
        Ok(())
    }
}

impl<H: Hal, B: Bar + Clone> Cq<'_, H, B> {
    /// Live QPs completing to this CQ (send and receive counted apart).
    fn users(&self) -> u16 {
        let res = self.dev.res.lock();
        res.ids.as_ref().and_then(|i| i.cq_refs.get(self.id as usize).copied()).unwrap_or(0)
    }
}

impl<H: Hal, B: Bar + Clone> Drop for Cq<'_, H, B> {
    fn drop(&mut self) {
        if self.alive {
            // Live QPs still complete here: destroy the CQ when the last of
            // them is destroyed (`Device::release_refs`) or at teardown.
            // Checked and recorded under one lock, so no QP destroy between
            // misses it.
            let mut res = self.dev.res.lock();
            let res = &mut *res;
            let users = res.ids.as_ref().and_then(|i| i.cq_refs.get(self.id as usize));
            if users.is_some_and(|u| *u > 0)
                && let Some((ring, shadow)) = self.mem.take()
            {
                // The rings a resize replaced go with the CQ: the device
                // holds them until the DESTROY_CQ completes (issue #28
                // item 5). Their `uk` views go here, first.
                let mut old = heapless::Vec::new();
                while !self.old.is_empty() {
                    let OldRing { uk: _, _ring: r } = self.old.remove(0);
                    // `old` has `self.old`'s capacity; were it full, the
                    // ring would still never be freed.
                    if let Err(r) = old.push(r) {
                        self.dev.quarantine(r);
                    }
                }
                let d = DeferredCq { cmd: self.cmd, ring, shadow, old };
                if let Err(d) = res.deferred_cqs.push(d) {
                    // No room to wait: keep it for good (the quarantine's
                    // lock is a leaf, taken under the resource lock).
                    d.into_bufs().for_each(|b| self.dev.quarantine(b));
                    self.dev.quarantine_ids(1);
                }
                return;
            }
        }
        if self.destroy().is_err() {
            // The device still owns the rings: quarantine them and the id
            // (counted, reported by `footprint`, never freed).
            if let Some((ring, shadow)) = self.mem.take() {
                self.dev.quarantine(ring);
                self.dev.quarantine(shadow);
            }
            while let Some(o) = self.old.pop() {
                self.dev.quarantine(o._ring);
            }
            self.dev.quarantine_ids(1);
        }
    }
}
