//! Bring-up: [`Device::probe`] and its steps (spec control-path §9.2
//! steps 1–13), and the CQP as probe uses it (exclusive access).

use super::*;

fn fail<T>(step: ProbeStep, cause: ProbeCause) -> Result<T, ProbeError> {
    Err(ProbeError { step, cause })
}

impl From<BackError> for ProbeCause {
    fn from(e: BackError) -> Self {
        match e {
            BackError::Dma(d) => ProbeCause::Dma(d),
            BackError::Cqp(c) => ProbeCause::Cqp(c),
            BackError::Capacity => ProbeCause::Capacity,
        }
    }
}

fn pages_bytes(bytes: usize) -> u64 {
    (bytes.div_ceil(PAGE_SIZE).max(1) * PAGE_SIZE) as u64
}

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// Brings the device up with default [`ProbeOptions`]. See the module docs.
    ///
    /// # Example
    ///
    /// ```
    /// # use irdma::prelude::*;
    /// # use irdma_testkit::{FakeHal, ModelBar};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let bar = ModelBar::standalone(mock_bar::Config::default());
    /// # let lan = LanInfo::single_tc(0, 6, [2, 0, 0, 0, 0, 0x0a], 1500);
    /// // On hardware: `unsafe { MmioBar::new(bar0, len) }` and your `Hal`.
    /// let dev: Device<FakeHal, ModelBar> = Device::probe(bar, lan, Profile::SMALL)?;
    /// println!("firmware {:?}, {} bytes of DMA", dev.fw_version(), dev.footprint().current_bytes);
    /// dev.close()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn probe(bar: B, lan: LanInfo, profile: Profile) -> Result<Self, ProbeError> {
        Self::probe_with(bar, lan, profile, ProbeOptions::default())
    }

    /// Brings the device up (spec control-path §9.2 steps 1–13). The queue
    /// set of the work-scheduler leaf is not registered with the LAN Tx
    /// scheduler and the VSI's RDMA filter is not touched: use
    /// [`Device::probe_with_lan`] where a LAN side exists.
    pub fn probe_with(
        bar: B,
        lan: LanInfo,
        profile: Profile,
        opts: ProbeOptions,
    ) -> Result<Self, ProbeError> {
        Self::probe_inner(bar, lan, profile, opts, None)
    }

    /// [`Device::probe_with`], plus the LAN-side calls Linux makes (spec
    /// control-path §2.1 rows 23–24, §4.3.20 step 4; main.c:
    /// irdma_lan_register_qset, irdma_probe): the work-scheduler leaf's
    /// queue set is registered with the LAN Tx scheduler before the leaf is
    /// enabled, and the VSI's RDMA filter is turned on last. Close with
    /// [`Device::close_with_lan`] to undo both.
    pub fn probe_with_lan(
        bar: B,
        lan: LanInfo,
        profile: Profile,
        opts: ProbeOptions,
        ops: &mut dyn LanOps,
    ) -> Result<Self, ProbeError> {
        Self::probe_inner(bar, lan, profile, opts, Some(ops))
    }

    fn probe_inner<'o>(
        bar: B,
        lan: LanInfo,
        profile: Profile,
        opts: ProbeOptions,
        mut ops: Option<&mut (dyn LanOps + 'o)>,
    ) -> Result<Self, ProbeError> {
        if let Err(e) = lan.validate() {
            return fail(ProbeStep::LanInfo, ProbeCause::Lan(e));
        }
        // At least one vector, and the two that may be used inside the
        // GLINT_DYN_CTL array.
        if opts.interrupts.is_some()
            && (lan.msix.count == 0
                || u32::from(lan.msix.first) + 2 > u32::from(regs::GLINT_DYN_CTL_COUNT))
        {
            return fail(ProbeStep::LanInfo, ProbeCause::Lan(LanInfoError::NoVectors));
        }
        let mut dev = Device {
            bar: bar.clone(),
            lan,
            cqp: CtlLock::new(None),
            res: CtlLock::new(Resources {
                sds: SdStore::new(lan.pf_id),
                ids: None,
                deferred_cqs: heapless::Vec::new(),
            }),
            aeq: CtlLock::new(None),
            aeq_view: crate::uk::QueueMem::empty(),
            aeq_next: AtomicU64::new(1),
            ceq: None,
            irq_ceqs: heapless::Vec::new(),
            max_ceqs: 1,
            scratch: None,
            layout: None,
            ws: WsTree::default(),
            qp_err: [const { AtomicBool::new(false) }; MAX_QPS as usize],
            cq_dead: [const { AtomicU64::new(0) }; CQ_WORDS],
            qp_cqs: [const { AtomicU64::new(0) }; MAX_QPS as usize],
            ctx_gen: AtomicU32::new(0),
            qp_compl: core::array::from_fn(|_| compl::ComplSlot::new()),
            qps_in_error: AtomicU32::new(0),
            max_ird: 8,
            quarantine: CtlLock::new(Quarantine::new()),
            needs_reset: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            flight: CtlLock::new(crate::flight::FlightRecorder::new()),
            irq: crate::irq::IrqState::new(),
            fw_version: (0, 0),
            features: 0,
            opts,
            control_bytes: 0,
        };
        let r = dev.bring_up(bar, &profile, ops.as_deref_mut());
        let failed_at = r.as_ref().err().map(|e| e.step);
        dev.record(crate::flight::FlightEvent::Probe { failed_at });
        match r {
            Ok(()) => Ok(dev),
            Err(e) => {
                // A step that timed out (UPDATE_PE_SDS, a PBLE chunk, ...)
                // leaves the device's state unknown: nothing it may own is
                // freed by the teardown.
                if let ProbeCause::Cqp(c) = e.cause
                    && device_may_own(&c)
                {
                    *dev.needs_reset.get_mut() = true;
                }
                let _ = dev.teardown(ops, false);
                Err(e)
            }
        }
    }

    /// Records the start of a probe step in the flight recorder.
    fn probe_step(&mut self, step: ProbeStep) {
        self.flight.get_mut().push(crate::flight::FlightEvent::ProbeStep { step });
    }

    fn bring_up<'o>(
        &mut self,
        bar: B,
        profile: &Profile,
        ops: Option<&mut (dyn LanOps + 'o)>,
    ) -> Result<(), ProbeError> {
        let mut step = ProbeStep::FirmwareReady;
        self.bring_up_steps(bar, profile, ops, &mut step)
            .map_err(|cause| ProbeError { step, cause })
    }

    /// Starts bring-up step `s`: the step a failure is reported in, and its
    /// flight-recorder event. Out of line (code size: 14 call sites).
    #[inline(never)]
    fn enter(&mut self, at: &mut ProbeStep, s: ProbeStep) {
        *at = s;
        self.probe_step(s);
    }

    /// The steps of [`Self::bring_up`]; a failure returns its cause only
    /// and `step` says where (the [`ProbeError`] is built once).
    fn bring_up_steps<'o>(
        &mut self,
        bar: B,
        profile: &Profile,
        mut ops: Option<&mut (dyn LanOps + 'o)>,
        step: &mut ProbeStep,
    ) -> Result<(), ProbeCause> {
        use ProbeStep as S;
        self.enter(step, S::FirmwareReady);
        self.wait_firmware_ready(&bar)?;
        self.enter(step, S::DoorbellSize);
        Self::check_doorbell_size(&bar)?;
        self.enter(step, S::CqpCreate);
        self.create_cqp(bar)?;
        self.enter(step, S::QueryFeatures);
        let (layout, max_ceqs) = self.size_and_commit_hmc(profile, step)?;
        let qp_cnt = layout.object(HmcObj::Qp).cnt;
        let cq_cnt = layout.object(HmcObj::Cq).cnt;
        let limits = Limits {
            qp_count: qp_cnt,
            cq_count: cq_cnt,
            pble_count: layout.object(HmcObj::Pble).cnt,
            ceq_count: max_ceqs,
        };
        self.cqp_mut().map_err(ProbeCause::Cqp)?.set_limits(limits);
        self.max_ceqs = max_ceqs;

        self.enter(step, S::BackHmc);
        // 7. Back every non-PBLE SD.
        {
            let res = self.res.get_mut();
            let cqp = self.cqp.get_mut().as_mut();
            let Some(cqp) = cqp else { return Err(ProbeCause::Capacity) };
            res.sds.back_static(&layout, cqp).map_err(ProbeCause::from)?;
        }
        self.enter(step, S::ShmcPagesAllocated);
        // 8. SHMC_PAGES_ALLOCATED.
        let fn_id = self.lan.pf_id as u16;
        self.exec(ShmcPagesAllocated { hmc_fn_id: fn_id }).map_err(ProbeCause::Cqp)?;
        self.enter(step, S::CreateCcq);
        // 9. CCQ (spec §2.7).
        let mut ccq = CcqConfig::linux(self.opts.cqp_sq_size);
        ccq.vsi_idx = self.lan.vsi_num;
        if self.opts.interrupts.is_some() {
            // Told apart from the CQs' contexts in CEQ 0 (`crate::irq`).
            ccq.cq_ctx = crate::irq::CCQ_CTX;
        }
        self.control_bytes += pages_bytes(ccq.entries as usize * CCQ_CQE_BYTES) + pages_bytes(64);
        self.cqp_mut().and_then(|c| c.create_ccq(ccq)).map_err(ProbeCause::Cqp)?;

        self.enter(step, S::CreateCeq);
        self.create_ceq0(cq_cnt)?;
        self.enter(step, S::PblePool);
        let pool = self.create_pble_pool(&layout)?;
        self.enter(step, S::CreateAeq);
        self.create_aeq(qp_cnt, cq_cnt)?;

        self.enter(step, S::WorkScheduler);
        // 13. Work-scheduler tree: root 0, VSI node, TC leaf → qs_handle,
        // then enable the leaf (ws.c: irdma_ws_add; spec §4.3.20).
        self.build_ws(ops.as_deref_mut())?;

        *step = S::Resources;
        self.build_tables(&layout, pool)?;
        // RDMA traffic to the VSI on, last (main.c: irdma_probe).
        if let Some(o) = ops {
            *step = S::RdmaFilter;
            o.set_rdma_filter(self.lan.vsi_num, true).map_err(ProbeCause::LanOp)?;
            self.ws.filter_on = true;
        }
        if let Some(cfg) = self.opts.interrupts {
            self.setup_interrupts(cfg);
        }
        info!("irdma: probe done");
        Ok(())
    }

    /// Bring-up step 1: the firmware reports ready (ctrl.c:
    /// irdma_wait_pe_ready).
    fn wait_firmware_ready(&self, bar: &B) -> Result<(), ProbeCause> {
        let end = irdma_hal::dma::now::<H>().saturating_add(self.opts.fw_ready_timeout);
        let mut st = [0u32; 3];
        let ready = irdma_hal::dma::wait_until::<H>(end, || {
            for (s, off) in st.iter_mut().zip(regs::GLPE_CPUSTATUS) {
                *s = bar.read32(off);
            }
            st.iter().all(|s| *s == regs::CPUSTATUS_READY)
        });
        if !ready {
            return Err(ProbeCause::FirmwareNotReady(st));
        }
        Ok(())
    }

    /// Bring-up step 2: doorbells are enabled (ctrl.c: irdma_sc_dev_init).
    fn check_doorbell_size(bar: &B) -> Result<(), ProbeCause> {
        let lbar = bar.read32(regs::GLPCI_LBARCTRL);
        if !matches!(regs::field::LBARCTRL_PE_DB_SIZE.get(u64::from(lbar)), 1 | 2) {
            return Err(ProbeCause::DoorbellDisabled(lbar));
        }
        Ok(())
    }

    /// Bring-up steps 3–4: the scratch page and the CQP.
    fn create_cqp(&mut self, bar: B) -> Result<(), ProbeCause> {
        let scratch = Dma::<H>::new(1, BufferDirection::Both).map_err(ProbeCause::Dma)?;
        self.scratch = Some(scratch);
        let mut cfg = CqpConfig::gen2_roce(self.opts.cqp_sq_size);
        cfg.timeouts = self.opts.timeouts;
        cfg.completion_ctx = 0x4951_5050; // echoed in CCQ CQEs; any non-zero value
        let sq = cfg.sq_size as usize;
        let cqp_bytes = pages_bytes(sq * CQP_WQE_BYTES)
            + pages_bytes(64)
            + pages_bytes(sq * SDBUF_BYTES_PER_SLOT);
        let cqp = match Cqp::<H, B>::create(bar, &cfg) {
            Ok(c) => c,
            Err(e) => {
                if device_may_own(&e) {
                    // The engine leaked its SQ, host context and overflow
                    // buffer (the device may be reading them): count them.
                    self.quarantine.get_mut().count_leaked(cqp_bytes, 3);
                    self.needs_reset.store(true, Ordering::Release);
                }
                return Err(ProbeCause::Cqp(e));
            }
        };
        self.control_bytes = cqp_bytes + pages_bytes(PAGE_SIZE);
        *self.cqp.get_mut() = Some(cqp);
        Ok(())
    }

    /// Bring-up steps 5–6 (the caller entered [`ProbeStep::QueryFeatures`]):
    /// QUERY_RDMA_FEATURES, QUERY_FPM_VAL → [`size_hmc`] → COMMIT_FPM_VAL,
    /// the committed layout (kept in `self.layout`) and the CEQ count the
    /// device allows; `step` moves through the sub-steps.
    fn size_and_commit_hmc(
        &mut self,
        profile: &Profile,
        step: &mut ProbeStep,
    ) -> Result<(HmcLayout, u32), ProbeCause> {
        let Some(scratch) = self.scratch.as_ref() else { return Err(ProbeCause::Capacity) };
        let (q_pa, c_pa, f_pa) = (
            scratch.paddr() + SCRATCH_QUERY as u64,
            scratch.paddr() + SCRATCH_COMMIT as u64,
            scratch.paddr() + SCRATCH_FEATURES as u64,
        );
        // 5. Features (ctrl.c: irdma_get_rdma_features).
        let manage_rsrc_ver2 = {
            let cmd = QueryRdmaFeatures { buf_pa: f_pa, buf_len: FEATURES_BYTES as u32 };
            self.exec(cmd).map_err(ProbeCause::Cqp)?;
            self.read_features()
        };

        self.enter(step, ProbeStep::QueryFpm);
        // 6. FPM query → sizing → commit.
        let query = {
            let fn_id = self.lan.pf_id as u16;
            self.exec(QueryFpmVal { hmc_fn_id: fn_id, buf_pa: q_pa }).map_err(ProbeCause::Cqp)?;
            let buf = self.scratch_words(SCRATCH_QUERY);
            // `match`, not `map_err`: the large `Ok` value is not repacked
            // (code size, here and below).
            match FpmQuery::decode(&buf, manage_rsrc_ver2, false) {
                Ok(q) => q,
                Err(e) => return Err(ProbeCause::Decode(e)),
            }
        };
        self.max_ird = query.max_hw_ird().min(u8::MAX as u16) as u8;
        let caps = FpmCaps::from(&query);
        *step = ProbeStep::SizeHmc;
        let counts = match size_hmc(&caps, profile) {
            Ok(c) => c,
            Err(e) => return Err(ProbeCause::Hmc(e)),
        };
        let mut commit_buf = [0u64; 24];
        encode_fpm_commit(&counts.cnt, &mut commit_buf);
        if let Some(s) = self.scratch.as_ref() {
            s.write_u64s(SCRATCH_COMMIT, &commit_buf);
        }
        let fn_id = self.lan.pf_id as u16;
        *step = ProbeStep::CommitFpm;
        self.exec(CommitFpmVal { hmc_fn_id: fn_id, buf_pa: c_pa, flush_timer_disable: false })
            .map_err(ProbeCause::Cqp)?;
        let sizes: [u64; HMC_OBJ_COUNT] = core::array::from_fn(|i| caps.obj[i].size);
        let committed = match FpmCommit::decode(&self.scratch_words(SCRATCH_COMMIT), &sizes) {
            Ok(c) => c,
            Err(e) => return Err(ProbeCause::Decode(e)),
        };
        let layout = match HmcLayout::new(&sizes, &committed.obj) {
            Ok(l) => l,
            Err(e) => return Err(ProbeCause::Hmc(e)),
        };
        self.layout = Some(layout);
        Ok((layout, u32::from(query.max_ceqs)))
    }

    /// Bring-up step 10: CEQ 0, min(committed CQ count, 262143) entries
    /// (hw.c: irdma_create_ceq).
    fn create_ceq0(&mut self, cq_cnt: u32) -> Result<(), ProbeCause> {
        let ceq_entries = cq_cnt.clamp(1, 262_143);
        let ring = Dma::<H>::with_bytes(ceq_entries as usize * 8, BufferDirection::DeviceToDriver)
            .map_err(ProbeCause::Dma)?;
        self.control_bytes += ring.len() as u64;
        let cmd = CreateCeq::contiguous(0, ceq_entries, ring.paddr(), self.lan.vsi_num);
        let r = self.exec(cmd);
        // Keep the ring if the device may hold it, so teardown destroys it;
        // after a timeout it is quarantined, not freed.
        match r {
            Ok(_) => self.ceq = Some(Ceq { _ring: ring, cmd }),
            Err(e) => {
                self.keep_if_owned(&e, ring);
                return Err(ProbeCause::Cqp(e));
            }
        }
        Ok(())
    }

    /// Bring-up step 11: the PBLE pool; its first chunk is backed now
    /// (pble.c: irdma_hmc_init_pble), the rest on demand.
    fn create_pble_pool(&mut self, layout: &HmcLayout) -> Result<PblePool<PBLE_RUNS>, ProbeCause> {
        let pool = match PblePool::<PBLE_RUNS>::new(*layout.pble()) {
            Ok(p) => p,
            Err(e) => return Err(ProbeCause::Pble(e)),
        };
        if let Some(first) = layout.pble().chunks().next() {
            let res = self.res.get_mut();
            let Some(cqp) = self.cqp.get_mut().as_mut() else {
                return Err(ProbeCause::Capacity);
            };
            res.sds.back_pble_chunk(&first, cqp).map_err(ProbeCause::from)?;
        }
        Ok(pool)
    }

    /// Bring-up step 12: the AEQ, min(QP + CQ count, 524287) entries of 16 B
    /// (hw.c: irdma_create_aeq), and the view its polls read.
    fn create_aeq(&mut self, qp_cnt: u32, cq_cnt: u32) -> Result<(), ProbeCause> {
        let aeq_entries = qp_cnt.saturating_add(cq_cnt).clamp(1, 524_287);
        let ring = Dma::<H>::with_bytes(
            aeq_entries as usize * AEQE_BYTES,
            BufferDirection::DeviceToDriver,
        )
        .map_err(ProbeCause::Dma)?;
        self.control_bytes += ring.len() as u64;
        let cmd = CreateAeq {
            elem_cnt: aeq_entries,
            mem: QueueAddr::contiguous(ring.paddr()),
            pasid_valid: false,
            pasid: 0,
        };
        match self.exec(cmd) {
            Ok(_) => {
                *self.aeq.get_mut() = Some(AeqRing {
                    ring,
                    cons: RingConsumer::new(aeq_entries),
                    cmd,
                    overflowed: false,
                    pending: heapless::Deque::new(),
                    pending_lost: 0,
                });
                let aeq = self.aeq.get_mut().as_ref();
                // SAFETY: the ring's memory does not move with the `Dma`
                // value and stays in `self.aeq` until `teardown` (which has
                // `&mut self`) clears `aeq_view` before taking it out; the
                // view only makes atomic qword loads.
                let view = aeq.and_then(|a| unsafe {
                    crate::uk::mem::static_view(&a.ring, 0, a.ring.len() & !7)
                });
                self.aeq_view = view.unwrap_or_else(crate::uk::QueueMem::empty);
                // Entry 0's VALID word, polarity 1 (`RingConsumer::new`).
                *self.aeq_next.get_mut() = events::aeq_next_word(0, true);
            }
            Err(e) => {
                self.keep_if_owned(&e, ring);
                return Err(ProbeCause::Cqp(e));
            }
        }
        Ok(())
    }

    /// The software tables sized from the commit (hw.c:
    /// irdma_initialize_hw_rsrc).
    fn build_tables(
        &mut self,
        layout: &HmcLayout,
        pool: PblePool<PBLE_RUNS>,
    ) -> Result<(), ProbeCause> {
        let qp_cnt = layout.object(HmcObj::Qp).cnt;
        let cq_cnt = layout.object(HmcObj::Cq).cnt;
        // The fallible parts first, then the tables built where they live
        // (code size: `Ids` is not assembled on the stack and moved).
        let pds = match IdBitmap::pd_ids(MAX_PDS) {
            Ok(b) => b,
            Err(e) => return Err(ProbeCause::Ids(e)),
        };
        let qps = match IdBitmap::qp_ids(qp_cnt) {
            Ok(b) => b,
            Err(e) => return Err(ProbeCause::Ids(e)),
        };
        let cqs = match IdBitmap::cq_ids(cq_cnt) {
            Ok(b) => b,
            Err(e) => return Err(ProbeCause::Ids(e)),
        };
        let arp_ids = match IdBitmap::arp_ids(layout.object(HmcObj::Arp).cnt) {
            Ok(b) => b,
            Err(e) => return Err(ProbeCause::Ids(e)),
        };
        let stags = match StagTable::new(layout.object(HmcObj::Mr).cnt, self.stag_key_seed()) {
            Ok(t) => t,
            Err(_) => return Err(ProbeCause::Ids(IdError::BadCapacity)),
        };
        let ah_ids = match IdBitmap::ah_ids(layout.object(HmcObj::Fsiav).cnt.min(MAX_AHS)) {
            Ok(b) => b,
            Err(e) => return Err(ProbeCause::Ids(e)),
        };
        self.res.get_mut().ids = Some(Ids {
            pds,
            qps,
            cqs,
            arp_ids,
            arp: [ArpSlot::default(); MAX_ARP as usize],
            stags,
            pble: pool,
            qp_rec: [QpRecord::default(); MAX_QPS as usize],
            cq_refs: [0; MAX_CQS as usize],
            pd_refs: [0; MAX_PDS as usize],
            pd_orphan: [0; PD_WORDS],
            fr: heapless::Vec::new(),
            ah_ids,
            gsi: false,
            neigh: heapless::Vec::new(),
        });
        Ok(())
    }

    fn build_ws<'o>(&mut self, ops: Option<&mut (dyn LanOps + 'o)>) -> Result<(), ProbeCause> {
        let vsi = self.lan.vsi_num;
        let tc = self.lan.qos.tc_of(0).unwrap_or(0);
        let weight = |w: u8| w.clamp(1, 0x7f);
        let leaf_w = self.lan.qos.tc_info.get(tc as usize).map_or(1, |t| t.rel_bw);
        let (vsi_node, leaf_node) = (1u16, 2u16);
        self.ws = WsTree { vsi_node, leaf_node, tc, ..WsTree::default() };
        let root = WsNode {
            op: WsNodeOp::Add,
            node_id: 0,
            parent_id: 0,
            vsi,
            leaf: false,
            enable: true,
            prio_type: 1,
            tc: 0,
            weight: 1,
        };
        let nodes = [
            root,
            WsNode { node_id: vsi_node, weight: weight(self.lan.qos.vport_rel_bw), ..root },
            WsNode {
                node_id: leaf_node,
                parent_id: vsi_node,
                leaf: true,
                enable: false,
                tc,
                weight: weight(leaf_w),
                ..root
            },
        ];
        for n in nodes {
            let c = self.exec(n).map_err(ProbeCause::Cqp)?;
            self.ws.created += 1;
            if n.leaf {
                self.ws.qs_handle = (c.op_ret_val & 0x3ff) as u16;
            }
        }
        if let Some(o) = ops {
            let teid = o.register_qset(self.ws.qs_handle, tc, vsi).map_err(ProbeCause::LanOp)?;
            self.ws.qset_teid = Some(teid);
        }
        let enable = WsNode { op: WsNodeOp::Modify, enable: true, ..nodes[2] };
        self.exec(enable).map_err(ProbeCause::Cqp)?;
        self.ws.leaf_enabled = true;
        Ok(())
    }

    fn read_features(&mut self) -> bool {
        let Some(s) = self.scratch.as_ref() else { return false };
        let e0 = s.read_u64(SCRATCH_FEATURES).unwrap_or(0);
        // Entry 0: FEATURE_CNT [47:32], FW major [31:16], minor [15:0] (spec §4.3.23).
        self.fw_version = ((e0 >> 16) as u16, e0 as u16);
        let cnt = ((e0 >> 32) & 0xffff).min((FEATURES_BYTES / 8) as u64) as usize;
        let mut flags = 0;
        for i in 1..cnt {
            let e = s.read_u64(SCRATCH_FEATURES + 8 * i).unwrap_or(0);
            // Type 32 = FTN_FLAGS (type.h: enum irdma_feature_type).
            if e >> 48 == 32 {
                flags = e & 0xffff_ffff_ffff;
            }
        }
        self.features = flags;
        flags & (1 << 2) != 0
    }

    fn scratch_words(&self, off: usize) -> [u64; 24] {
        let mut w = [0u64; 24];
        if let (Some(s), Some(dst)) = (self.scratch.as_ref(), w.get_mut(..FPM_BUF_BYTES / 8)) {
            s.read_u64s(off, dst);
        }
        w
    }

    /// The CQP during probe (exclusive access; it exists after step 4).
    fn cqp_mut(&mut self) -> Result<&mut Cqp<H, B>, CqpError> {
        self.cqp.get_mut().as_mut().ok_or(CqpError::Protocol { what: Phrase::new(&"no CQP") })
    }

    /// Runs one command on the CQP during probe (refused once the device
    /// needs a reset; a timeout marks it so).
    pub(super) fn exec<C: crate::cqp::CqpCommand>(
        &mut self,
        cmd: C,
    ) -> Result<Completion, CqpError> {
        self.exec_dyn(&crate::cqp::engine::Cmd(&cmd))
    }

    /// [`Self::exec`] without the command's type (one copy for all).
    #[inline(never)]
    fn exec_dyn(&mut self, cmd: &dyn crate::cqp::engine::DynCmd) -> Result<Completion, CqpError> {
        if *self.needs_reset.get_mut() {
            return Err(CqpError::NeedsReset);
        }
        let r = self.cqp_mut()?.exec_dyn(cmd, 0);
        if matches!(r, Err(CqpError::DeviceGone)) {
            self.mark_gone();
        }
        if let Some(c) = self.cqp.get_mut().as_mut() {
            let f = self.flight.get_mut();
            while let Some((opcode, outcome)) = c.take_op_trace() {
                f.push(crate::flight::FlightEvent::Cqp { opcode, outcome });
            }
        }
        if let Err(e) = &r
            && device_may_own(e)
        {
            *self.needs_reset.get_mut() = true;
        }
        r
    }

    /// Quarantines `d` if a command naming it ended with `e` and the device
    /// may therefore own it; otherwise frees it.
    pub(super) fn keep_if_owned(&mut self, e: &CqpError, d: Dma<H>) {
        if device_may_own(e) {
            self.quarantine.get_mut().put(d);
            *self.needs_reset.get_mut() = true;
        }
    }

    /// The STag key seed: the caller's, or derived (see [`ProbeOptions`]).
    fn stag_key_seed(&self) -> u8 {
        self.opts.stag_key_seed.unwrap_or_else(|| {
            let l = &self.lan;
            let [v0, v1] = l.vsi_num.to_le_bytes();
            let [m0, m1, m2, m3, m4, m5] = l.mac;
            crate::res::default_key_seed(
                irdma_hal::dma::now::<H>(),
                &[l.pf_id, v0, v1, m0, m1, m2, m3, m4, m5],
            )
        })
    }
}
