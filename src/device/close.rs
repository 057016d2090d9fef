//! Teardown: [`Device::close`] and its steps, in Linux's order (hw.c:
//! irdma_ctrl_deinit_hw), keeping what the device may still own.

use super::*;

/// One teardown op on the CQP.
type CqpOp<'a, H, B> = dyn FnMut(&mut Cqp<H, B>) -> Result<(), CqpError> + 'a;

/// One CQP command of teardown, unless the device needs a reset
/// (non-generic over the command: one copy for every destroy).
#[inline(never)]
fn run_cmd<H: Hal, B: Bar>(
    cqp: &mut Option<Cqp<H, B>>,
    nr: &AtomicBool,
    cmd: &dyn crate::cqp::engine::DynCmd,
) -> Result<(), CqpError> {
    match cqp.as_mut() {
        Some(c) if !nr.load(Ordering::Acquire) => c.exec_dyn(cmd, 0).map(|_| ()),
        _ => Err(CqpError::NeedsReset),
    }
}

/// Teardown's bookkeeping of one step's result: whether it succeeded; an
/// error the device may own memory after marks it for reset, and the first
/// error (other than "needs a reset") is kept. Out of line: teardown runs
/// it after every step (code size).
#[inline(never)]
fn note_close(nr: &AtomicBool, first: &mut Option<CloseError>, r: Result<(), CqpError>) -> bool {
    if let Err(e) = r {
        if device_may_own(&e) {
            nr.store(true, Ordering::Release);
        }
        if e != CqpError::NeedsReset {
            first.get_or_insert(CloseError::Cqp(e));
        }
        false
    } else {
        true
    }
}

/// Teardown's fate of memory the device may still use: quarantined, or,
/// after a function reset (the device let go of everything), freed. Out of
/// line: teardown has seven such places (code size).
#[inline(never)]
fn keep_unless_reset<H: Hal>(quarantine: &mut Quarantine<H>, after_reset: bool, d: Dma<H>) {
    if !after_reset {
        quarantine.put(d);
    }
}

/// Teardown's running state: the CQP taken out of the device, whether the
/// device needs a reset, where memory it may still use goes, and the first
/// error.
struct Closing<'a, H: Hal, B: Bar> {
    cqp: Option<Cqp<H, B>>,
    nr: &'a AtomicBool,
    quarantine: &'a mut Quarantine<H>,
    after_reset: bool,
    first: Option<CloseError>,
}

impl<H: Hal, B: Bar> Closing<'_, H, B> {
    /// Books one step's result (see [`note_close`]); whether it succeeded.
    fn note(&mut self, r: Result<(), CqpError>) -> bool {
        note_close(self.nr, &mut self.first, r)
    }

    /// Memory the device may still use (see [`keep_unless_reset`]).
    fn keep(&mut self, d: Dma<H>) {
        keep_unless_reset(self.quarantine, self.after_reset, d);
    }

    /// One CQP command (see [`run_cmd`]), booked; whether it succeeded.
    fn run_cmd(&mut self, cmd: &dyn crate::cqp::engine::DynCmd) -> bool {
        let r = run_cmd(&mut self.cqp, self.nr, cmd);
        self.note(r)
    }

    /// One CQP op, unless the device needs a reset.
    fn run(&mut self, op: &mut CqpOp<'_, H, B>) -> Result<(), CqpError> {
        match self.cqp.as_mut() {
            Some(c) if !self.nr.load(Ordering::Acquire) => op(c),
            _ => Err(CqpError::NeedsReset),
        }
    }

    /// Teardown's last step: after a reset the quarantine is freed; else,
    /// when the device needs a reset or memory is quarantined, the LAN
    /// driver is asked to reset the function. Returns what is still
    /// quarantined, else the first error.
    fn finish(self, ops: Option<&mut (dyn LanOps + '_)>) -> Result<(), CloseError> {
        let quarantine = self.quarantine;
        if self.after_reset {
            quarantine.release_after_reset();
        } else if (self.nr.load(Ordering::Acquire) || !quarantine.is_empty())
            && let Some(o) = ops
        {
            // What Linux does once it marked the function for reset (utils.c:
            // irdma_wait_event → rf->gen_ops.request_reset, main.c:
            // irdma_request_reset → the LAN driver resets the function); a
            // quarantine is only ever given back by a reset, too.
            o.request_reset();
        }
        if !quarantine.is_empty() {
            return Err(CloseError::Quarantined(quarantine.stats()));
        }
        match self.first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Teardown: destroys the CQs whose destroy waited for QPs that never went.
/// The command is built from the record in place; only the rings move out
/// (code size).
fn destroy_deferred_cqs<H: Hal, B: Bar>(res: &mut Resources<H>, cx: &mut Closing<'_, H, B>) {
    while let Some(d) = res.deferred_cqs.last().map(|c| crate::cqp::cmd::destroy_cq_cmd(&c.cmd)) {
        let done = cx.run_cmd(&crate::cqp::engine::Cmd(&d));
        if let Some(c) = res.deferred_cqs.pop()
            && !done
        {
            c.into_bufs().for_each(|d| cx.keep(d));
        }
    }
}

/// Teardown: deletes the work scheduler nodes, leaf, VSI node, root (ws.c:
/// irdma_ws_remove).
fn remove_ws_tree<H: Hal, B: Bar>(ws: &WsTree, vsi: u16, cx: &mut Closing<'_, H, B>) {
    let ids = [(ws.leaf_node, ws.vsi_node, true), (ws.vsi_node, 0, false), (0, 0, false)];
    for (k, (node, parent, leaf)) in ids.iter().enumerate() {
        if (ws.created as usize) < ids.len() - k {
            continue;
        }
        let del = WsNode {
            op: WsNodeOp::Delete,
            node_id: *node,
            parent_id: *parent,
            vsi,
            leaf: *leaf,
            enable: false,
            prio_type: 1,
            tc: if *leaf { ws.tc } else { 0 },
            weight: 1,
        };
        cx.run_cmd(&crate::cqp::engine::Cmd(&del));
    }
}

/// Teardown: destroys the AEQ, the interrupt CEQs 1.. and CEQ 0; each ring
/// is freed only after the device confirmed its destroy, otherwise kept.
fn destroy_event_queues<H: Hal, B: Bar, const N: usize>(
    aeq: &mut Option<AeqRing<H>>,
    irq_ceqs: &mut heapless::Vec<Ceq<H>, N>,
    ceq: &mut Option<Ceq<H>>,
    cx: &mut Closing<'_, H, B>,
) {
    if let Some(a) = aeq.as_ref() {
        let d =
            DestroyAeq { elem_cnt: a.cmd.elem_cnt, mem: a.cmd.mem, pasid_valid: false, pasid: 0 };
        let done = cx.run_cmd(&crate::cqp::engine::Cmd(&d));
        if let Some(ring) = aeq.take().map(|a| a.ring)
            && !done
        {
            cx.keep(ring);
        }
    }
    // CEQs 1.. before CEQ 0 (hw.c: irdma_del_ceqs, then irdma_del_ceq_0),
    // last created first.
    while let Some(c) = irq_ceqs.pop() {
        destroy_ceq(c, cx);
    }
    if let Some(c) = ceq.take() {
        destroy_ceq(c, cx);
    }
}

/// Teardown: DESTROY_CEQ for one CEQ; its ring is freed only if the device
/// confirmed, otherwise quarantined.
fn destroy_ceq<H: Hal, B: Bar>(c: Ceq<H>, cx: &mut Closing<'_, H, B>) {
    let d = DestroyCeq {
        ceq_id: c.cmd.ceq_id,
        elem_cnt: c.cmd.elem_cnt,
        mem: c.cmd.mem,
        tph_en: false,
        pasid_valid: false,
        pasid: 0,
    };
    if !cx.run_cmd(&crate::cqp::engine::Cmd(&d)) {
        cx.keep(c._ring);
    }
}

/// Teardown: destroys the CCQ (its memory stays in the engine until
/// [`close_cqp`] hands it back) and clears every SD. Returns whether the
/// device released the SDs.
fn stop_ccq_and_sds<H: Hal, B: Bar>(sds: &mut SdStore<H>, cx: &mut Closing<'_, H, B>) -> bool {
    let r = cx.run(&mut |c| c.destroy_ccq());
    cx.note(r);
    let mut sds_released = false;
    if !sds.sds.is_empty() {
        let r = cx.run(&mut |c| sds.clear_all(c));
        sds_released = cx.note(r);
    }
    sds_released
}

/// Teardown: destroys the CQP and takes back its memory (abandoned, all
/// kept, once the device needs a reset).
fn close_cqp<H: Hal, B: Bar>(cx: &mut Closing<'_, H, B>) {
    if let Some(c) = cx.cqp.take() {
        let (nr, quarantine, after_reset) = (cx.nr, &mut *cx.quarantine, cx.after_reset);
        let mut keep = |d: Dma<H>| keep_unless_reset(quarantine, after_reset, d);
        if nr.load(Ordering::Acquire) {
            c.abandon_into(&mut keep);
        } else {
            let r = c.destroy_into(&mut keep);
            note_close(nr, &mut cx.first, r);
        }
    }
}

/// Teardown, once nothing the device knows of is left (or it is kept):
/// forgets the ids, frees or keeps the SD backing pages, and keeps the
/// FPM/feature scratch buffer when the device needs a reset.
fn free_device_memory<H: Hal, B: Bar>(
    res: &mut Resources<H>,
    scratch: &mut Option<Dma<H>>,
    sds_released: bool,
    cx: &mut Closing<'_, H, B>,
) {
    res.ids = None;
    // Two loops, not one with the test inside (code size: LLVM
    // unswitched it into two copies of the whole body).
    if sds_released {
        while res.sds.sds.pop().is_some() {}
    } else {
        while let Some(b) = res.sds.sds.pop() {
            cx.keep(b.mem);
            if let Some(p) = b.pd_page {
                cx.keep(p);
            }
        }
    }
    if let Some(s) = scratch.take()
        && cx.nr.load(Ordering::Acquire)
    {
        // The device writes the FPM/feature buffers: an op on them may
        // not have finished.
        cx.keep(s);
    }
}

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// Tears down whatever exists, in Linux's order (hw.c:
    /// irdma_ctrl_deinit_hw), freeing DMA only after the device confirmed it
    /// stopped using it; what it did not confirm is quarantined. Once the
    /// device needs a reset no CQP op is tried (Linux skips them when
    /// `rf->reset` is set) and everything it knew of is quarantined. With
    /// `after_reset` (the function was reset) nothing is sent and all memory,
    /// the quarantine included, is freed. Returns the first error; always
    /// finishes.
    pub(super) fn teardown<'o>(
        &mut self,
        mut ops: Option<&mut (dyn LanOps + 'o)>,
        after_reset: bool,
    ) -> Result<(), CloseError> {
        let mut first: Option<CloseError> = None;
        self.teardown_interrupts();
        let ws = self.ws;
        if let Some(o) = ops.as_deref_mut()
            && !after_reset
        {
            self.release_lan(o, &mut first);
        }
        if after_reset {
            self.needs_reset.store(true, Ordering::Release);
        }
        let mut cx = Closing {
            cqp: self.cqp.get_mut().take(),
            nr: &self.needs_reset,
            quarantine: self.quarantine.get_mut(),
            after_reset,
            first,
        };
        // CQs whose destroy waited for QPs that never went (their destroy
        // failed): before the CEQ they report to (hw.c: CQs go first).
        destroy_deferred_cqs(self.res.get_mut(), &mut cx);
        remove_ws_tree(&ws, self.lan.vsi_num, &mut cx);
        // No lock-free peek may look at the AEQ ring from now on.
        self.aeq_view = crate::uk::QueueMem::empty();
        *self.aeq_next.get_mut() = 1;
        destroy_event_queues(self.aeq.get_mut(), &mut self.irq_ceqs, &mut self.ceq, &mut cx);
        let sds_released = stop_ccq_and_sds(&mut self.res.get_mut().sds, &mut cx);
        self.ws = WsTree::default();
        close_cqp(&mut cx);
        // Now nothing the device knows of is left, or it is kept above.
        free_device_memory(self.res.get_mut(), &mut self.scratch, sds_released, &mut cx);
        cx.finish(ops)
    }

    /// Teardown's first step: the LAN side lets go of RDMA (the VSI's RDMA
    /// filter off, the qset unregistered); an error is kept in `first`.
    fn release_lan(&mut self, o: &mut dyn LanOps, first: &mut Option<CloseError>) {
        let ws = self.ws;
        if ws.filter_on
            && let Err(e) = o.set_rdma_filter(self.lan.vsi_num, false)
        {
            first.get_or_insert(CloseError::Lan(e));
        }
        if let Some(teid) = ws.qset_teid
            && let Err(e) = o.unregister_qset(ws.qs_handle, teid)
        {
            first.get_or_insert(CloseError::Lan(e));
        }
    }

    /// Tears the device down (the AEQ, CEQ 0, CCQ, SDs, CQP, then memory).
    /// Every verbs object borrows the device, so none can be alive here.
    /// Memory the device did not confirm it released (and everything, once
    /// it needs a reset) is quarantined and leaked on purpose:
    /// [`CloseError::Quarantined`].
    ///
    /// A LAN-side registration made by [`Device::probe_with_lan`] is not
    /// undone here; use [`Device::close_with_lan`].
    pub fn close(mut self) -> Result<(), CloseError> {
        self.teardown(None, false)
    }

    /// Closes a device whose PCI function was reset: no CQP op is sent (the
    /// CQP, queues and SDs no longer exist in the device) and every buffer,
    /// quarantined ones included, is freed.
    ///
    /// # Safety
    ///
    /// The function was reset (an FLR or PF reset through the LAN driver,
    /// e.g. after [`LanOps::request_reset`], completed) after the last CQP
    /// op and after every buffer in the quarantine was handed to the device,
    /// so the device holds none of the bus addresses this device gave it and
    /// will not write to them again. Freeing while the device can still DMA
    /// into the pages lets it corrupt whatever reuses them.
    pub unsafe fn close_after_reset(mut self) {
        let _ = self.teardown(None, true);
    }

    /// [`Device::close`], first turning the VSI's RDMA filter off and
    /// unregistering the queue set from the LAN Tx scheduler.
    ///
    /// If the device needs a reset ([`Device::needs_reset`]) no CQP op is
    /// tried, the memory is quarantined, and [`LanOps::request_reset`] is
    /// called last (Linux: main.c irdma_request_reset); so it is when a
    /// refused destroy left anything quarantined.
    pub fn close_with_lan(mut self, ops: &mut dyn LanOps) -> Result<(), CloseError> {
        self.teardown(Some(ops), false)
    }
}

impl<H: Hal, B: Bar + Clone> Drop for Device<H, B> {
    fn drop(&mut self) {
        // A quarantine left non-empty is leaked on purpose (`Quarantine`'s
        // `Drop` forgets its buffers).
        let _ = self.teardown(None, false);
    }
}
