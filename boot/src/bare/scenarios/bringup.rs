//! Driver scenarios over the real BAR (`MmioBar`) and the boot DMA pool:
//! the CQP bring-up sequence as far as it goes without `Device` — CQP create,
//! QUERY_RDMA_FEATURES, QUERY_FPM_VAL, COMMIT_FPM_VAL for a small profile,
//! static SD backing with UPDATE_PE_SDS, SHMC_PAGES_ALLOCATED, the CCQ —
//! NOP round-trip timing in both completion modes, CQP errors injected
//! through the harness mailbox, and teardown with the pool balance checked.
//!
//! Sequence: spec control-path §9.2 steps 4–9 (hw.c: irdma_create_cqp,
//! irdma_hmc_setup, irdma_create_hmc_objs, irdma_create_ccq). Every step
//! cross-checks the model's own CQP counters (mailbox) against the ops this
//! code posted, so an op the model did not see, or saw twice, fails here.

use core::time::Duration;

use irdma::Phrase;
use irdma::cqp::cmd::{
    CommitFpmVal, MAX_SD_ENTRIES, Nop, QueryFpmVal, QueryRdmaFeatures, SdEntry, ShmcPagesAllocated,
    UpdatePeSds,
};
use irdma::cqp::ctx::{HMC_APBVT, HMC_OBJ_COUNT, encode_fpm_commit};
use irdma::cqp::decode::FpmQuery;
use irdma::cqp::engine::{CcqConfig, Timeouts};
use irdma::cqp::{Cqp, CqpConfig, CqpError};
use irdma::lan::Protocol;
use irdma::res::{FpmCaps, HmcLayout, HmcObj, ObjCommit, Profile, size_hmc};
use irdma_boot::contract::{self, MAILBOX};
use irdma_hal::cqp::op;
use irdma_hal::dma::wait_until;
use irdma_hal::regs::{self, field as rf};
use irdma_hal::{Bar, BufferDirection, Dma, Hal, MmioBar};

use super::{Ctx, Kind, Msg, Outcome, msg};
use crate::bare::hal::{self, BootHal};
use crate::bare::serial::println;
use crate::bare::{arch, clock};

/// CQP SQ slots (Linux's size).
const SQ_SIZE: u32 = 2048;
/// Most static SDs this scenario backs (2 MiB of pool each).
const MAX_SDS: usize = 24;
/// Round trips per latency measurement.
const NOPS: usize = 200;
/// The HMC function of the PF the model plays (its `Config::hmc_fn_id`).
const HMC_FN_ID: u8 = 0;
/// QUERY_RDMA_FEATURES response length Linux uses (ctrl.c: irdma_get_rdma_features).
const FEATURES_BYTES: u32 = 272;
/// Every register/CCQ wait: generous, the model shares a loaded host.
const WAIT: Duration = Duration::from_secs(1);

/// A small unikernel profile. Its static objects need 12 SDs on the model,
/// so backing takes two UPDATE_PE_SDS ops (11 + 1 entries) and uses the
/// overflow buffer (entries beyond the third, spec §3.7).
const PROFILE: Profile = Profile {
    qps: 1024,
    cqs: 2048,
    mrs: 16384,
    pbles: 64 * 1024,
    max_sds: Some(MAX_SDS as u32),
    protocol: Protocol::RoceV2,
};

type BootCqp<'a> = Cqp<BootHal, &'a MmioBar>;

/// State the bring-up scenarios share, in order.
pub struct Bringup<'a> {
    bar: Result<&'a MmioBar, Msg>,
    cqp: Option<BootCqp<'a>>,
    /// Response buffers: features, FPM query, FPM commit.
    bufs: Option<[Dma<BootHal>; 3]>,
    manage_rsrc_ver2: bool,
    query: Option<FpmQuery>,
    layout: Option<HmcLayout>,
    sds: heapless::Vec<(u16, Dma<BootHal>), MAX_SDS>,
    live_before: usize,
    bad_frees_before: u64,
    /// CQP ops this code posted (the model must count as many).
    ops: u64,
    /// Of those, failed on purpose.
    injected: u64,
    /// Median NOP round trips (cycles): register-polled, CCQ.
    nop_median: [u64; 2],
}

macro_rules! need {
    ($e:expr, $what:literal) => {
        match $e {
            Some(v) => v,
            None => bail!(concat!("no ", $what, " (an earlier scenario failed)")),
        }
    };
}

impl<'a> Bringup<'a> {
    /// The bring-up state for the device discovery found: it runs against
    /// the model only (a real E810 needs the LAN driver's setup first).
    pub fn new(ctx: &'a Ctx) -> Self {
        Bringup {
            bar: model_bar(ctx),
            cqp: None,
            bufs: None,
            manage_rsrc_ver2: false,
            query: None,
            layout: None,
            sds: heapless::Vec::new(),
            live_before: 0,
            bad_frees_before: 0,
            ops: 0,
            injected: 0,
            nop_median: [0; 2],
        }
    }

    /// Runs every scenario.
    pub fn run(&mut self, r: &mut super::Runner) {
        r.run("cqp_create", || self.guard(Self::cqp_create));
        r.run("query_rdma_features", || self.guard(Self::query_rdma_features));
        r.run("query_fpm_val", || self.guard(Self::query_fpm_val));
        r.run("commit_fpm_val", || self.guard(Self::commit_fpm_val));
        r.run("hmc_backing", || self.guard(Self::hmc_backing));
        r.run("cqp_nop_registers", || self.guard(|s| s.nop_latency(0)));
        r.run("ccq_create", || self.guard(Self::ccq_create));
        r.run("cqp_nop_ccq", || self.guard(|s| s.nop_latency(1)));
        r.run("cqp_fault_injection", || self.guard(Self::fault_injection));
        r.run("cqp_destroy", || self.guard(Self::destroy));
    }

    /// CQP errors injected so far (the model's error count must match).
    pub fn injected(&self) -> u64 {
        self.injected
    }

    /// Skips without a model; otherwise runs `f` and checks afterwards that
    /// the model executed exactly the ops this code posted.
    fn guard(&mut self, f: impl FnOnce(&mut Self) -> Result<(), Msg>) -> Result<Outcome, Msg> {
        let bar = match &self.bar {
            Ok(b) => *b,
            Err(why) => return Ok(Outcome::Skip(why.clone())),
        };
        f(self)?;
        let m = model_counters(bar)?;
        ensure!(
            m.ops == self.ops,
            "the model executed {} CQP ops, the driver posted {}",
            m.ops,
            self.ops
        );
        ensure!(
            m.errors == self.injected,
            "the model failed {} ops, {} were injected",
            m.errors,
            self.injected
        );
        ensure!(m.dma_faults == 0, "the model saw {} DMA faults", m.dma_faults);
        Ok(Outcome::Pass)
    }

    fn bar(&self) -> Result<&'a MmioBar, Msg> {
        self.bar.clone()
    }

    fn cqp(&mut self) -> Result<&mut BootCqp<'a>, Msg> {
        Ok(need!(self.cqp.as_mut(), "CQP"))
    }

    /// Posts `cmd`, waits, counts it.
    fn exec<C: irdma::cqp::CqpCommand>(
        &mut self,
        cmd: C,
    ) -> Result<irdma::cqp::Completed<C>, CqpError> {
        let Some(cqp) = self.cqp.as_mut() else {
            return Err(CqpError::Protocol { what: Phrase::new(&"no CQP") });
        };
        let r = cqp.exec(cmd, 0);
        // A command that reached the ring counts, whatever its result.
        if !matches!(r, Err(CqpError::Encode(_) | CqpError::Busy | CqpError::RingFull)) {
            self.ops += 1;
        }
        r
    }

    fn cqp_create(&mut self) -> Result<(), Msg> {
        let bar = self.bar()?;
        // spec §9.2 step 1 (ctrl.c: irdma_wait_pe_ready): firmware ready.
        let mut st = [0u32; 3];
        let ready = wait_until::<BootHal>(BootHal::now() + WAIT, || {
            for (s, off) in st.iter_mut().zip(regs::GLPE_CPUSTATUS) {
                *s = bar.read32(off);
            }
            st.iter().all(|s| *s == regs::CPUSTATUS_READY)
        });
        ensure!(ready, "firmware not ready: GLPE_CPUSTATUS {st:#x?}");
        self.live_before = hal::stats().live_pages;
        self.bad_frees_before = hal::bad_frees();
        let page = || Dma::<BootHal>::new(1, BufferDirection::Both);
        let bufs = match (page(), page(), page()) {
            (Ok(a), Ok(b), Ok(c)) => [a, b, c],
            _ => bail!("cannot allocate the response buffers"),
        };
        self.bufs = Some(bufs);
        let mut cfg = CqpConfig::gen2_roce(SQ_SIZE);
        cfg.completion_ctx = 0x4952_4442; // echoed in CCQ CQEs
        cfg.timeouts = Timeouts { create: WAIT, poll_registers: WAIT, ccq: WAIT };
        let cqp = Cqp::<BootHal, &MmioBar>::create(bar, &cfg)
            .map_err(|e| msg(format_args!("create: {e:?}")))?;
        let status = bar.read32(regs::CCQPSTATUS) as u64;
        ensure!(rf::CCQPSTATUS_DONE.is_set(status), "CCQPSTATUS {status:#x} after create");
        println!(
            "  cqp_create: {} slots, SQ {:#x}, host context {:#x}",
            cqp.sq_size(),
            cqp.sq_pa(),
            cqp.host_ctx_pa()
        );
        self.cqp = Some(cqp);
        Ok(())
    }

    fn query_rdma_features(&mut self) -> Result<(), Msg> {
        let pa = need!(self.bufs.as_ref(), "buffers")[0].paddr();
        let done = self
            .exec(QueryRdmaFeatures { buf_pa: pa, buf_len: FEATURES_BYTES })
            .map_err(|e| msg(format_args!("{e:?}")))?;
        let buf = &need!(self.bufs.as_ref(), "buffers")[0];
        let f = done.decode(buf).map_err(|e| msg(format_args!("decode: {e:?}")))?;
        ensure!(f.fw_major != 0 || f.fw_minor != 0, "firmware version 0.0");
        self.manage_rsrc_ver2 = f.manage_rsrc_ver2();
        println!(
            "  query_rdma_features: firmware {}.{}, {} entries, atomics {}, manage_rsrc_ver2 {}",
            f.fw_major,
            f.fw_minor,
            f.count,
            f.atomics(),
            self.manage_rsrc_ver2
        );
        Ok(())
    }

    fn query_fpm(&mut self) -> Result<FpmQuery, Msg> {
        let pa = need!(self.bufs.as_ref(), "buffers")[1].paddr();
        let done = self
            .exec(QueryFpmVal { hmc_fn_id: HMC_FN_ID as u16, buf_pa: pa })
            .map_err(|e| msg(format_args!("QUERY_FPM_VAL: {e:?}")))?;
        let buf = &need!(self.bufs.as_ref(), "buffers")[1];
        done.decode(buf, self.manage_rsrc_ver2).map_err(|e| msg(format_args!("decode: {e:?}")))
    }

    fn query_fpm_val(&mut self) -> Result<(), Msg> {
        let q = self.query_fpm()?;
        let qp = q.obj[HmcObj::Qp.idx()];
        let cq = q.obj[HmcObj::Cq.idx()];
        ensure!(q.max_sds > 0, "MAX_PE_SDS 0");
        ensure!(qp.max_cnt > 0 && qp.size > 0, "QP object {qp:?}");
        ensure!(cq.max_cnt > 0 && cq.size > 0, "CQ object {cq:?}");
        ensure!(q.q1_block_size > 0, "Q1 block size 0");
        println!(
            "  query_fpm_val: {} SDs from {}, QP {} x {} B, CQ {} x {} B, MR {}, max IRD {}",
            q.max_sds,
            q.first_sd_index,
            qp.max_cnt,
            qp.size,
            cq.max_cnt,
            cq.size,
            q.obj[HmcObj::Mr.idx()].max_cnt,
            q.max_hw_ird()
        );
        self.query = Some(q);
        Ok(())
    }

    fn commit_fpm_val(&mut self) -> Result<(), Msg> {
        let q = need!(self.query, "FPM query");
        let caps = FpmCaps::from(&q);
        let counts = size_hmc(&caps, &PROFILE).map_err(|e| msg(format_args!("size_hmc: {e:?}")))?;
        let mut words = [0u64; 24];
        encode_fpm_commit(&counts.cnt, &mut words);
        let buf = &need!(self.bufs.as_ref(), "buffers")[2];
        for (i, w) in words.iter().enumerate() {
            buf.write_u64(8 * i, *w);
        }
        let pa = buf.paddr();
        let done = self
            .exec(CommitFpmVal {
                hmc_fn_id: HMC_FN_ID as u16,
                buf_pa: pa,
                flush_timer_disable: false,
            })
            .map_err(|e| msg(format_args!("COMMIT_FPM_VAL: {e:?}")))?;
        let sizes: [u64; HMC_OBJ_COUNT] = core::array::from_fn(|i| caps.obj[i].size);
        let buf = &need!(self.bufs.as_ref(), "buffers")[2];
        let c = done.decode(buf, &sizes).map_err(|e| msg(format_args!("decode: {e:?}")))?;
        for (i, (got, want)) in c.obj.iter().zip(counts.cnt.iter()).enumerate() {
            // APBVT is committed by the firmware, not by the driver's count.
            ensure!(
                i == HMC_APBVT || got.cnt == *want,
                "object {i}: committed {} of {want}",
                got.cnt
            );
        }
        let objs: [ObjCommit; HMC_OBJ_COUNT] =
            core::array::from_fn(|i| ObjCommit { cnt: c.obj[i].cnt, base: c.obj[i].base });
        let layout =
            HmcLayout::new(&sizes, &objs).map_err(|e| msg(format_args!("layout: {e:?}")))?;
        let n = layout.static_sd_count();
        ensure!(n as usize <= MAX_SDS, "{n} static SDs, more than the {MAX_SDS} budgeted");
        let cqp = self.cqp()?;
        cqp.set_limits(irdma::cqp::cmd::Limits {
            qp_count: layout.object(HmcObj::Qp).cnt,
            cq_count: layout.object(HmcObj::Cq).cnt,
            pble_count: layout.object(HmcObj::Pble).cnt,
            ceq_count: u32::from(q.max_ceqs),
        });
        println!(
            "  commit_fpm_val: QP {} CQ {} MR {} PBLE {}; {} SDs, {} static ({} KiB)",
            layout.object(HmcObj::Qp).cnt,
            layout.object(HmcObj::Cq).cnt,
            layout.object(HmcObj::Mr).cnt,
            layout.object(HmcObj::Pble).cnt,
            layout.sd_count(),
            n,
            layout.static_bytes() / 1024
        );
        self.layout = Some(layout);
        Ok(())
    }

    /// 2 MiB direct backing for every static SD, programmed ≤ 11 per
    /// UPDATE_PE_SDS, then SHMC_PAGES_ALLOCATED (spec §9.2 steps 7–8).
    fn hmc_backing(&mut self) -> Result<(), Msg> {
        let layout = need!(self.layout, "HMC layout");
        let pages = (irdma::res::pble::SD_SIZE as usize) / irdma_hal::PAGE_SIZE;
        let mut batch: heapless::Vec<SdEntry, MAX_SD_ENTRIES> = heapless::Vec::new();
        let mut updates = 0u32;
        let mut sds = layout.static_sds().peekable();
        while let Some(sd) = sds.next() {
            let Ok(sd16) = u16::try_from(sd) else { bail!("SD index {sd} beyond 16 bits") };
            let mem = Dma::<BootHal>::new(pages, BufferDirection::Both)
                .map_err(|e| msg(format_args!("SD {sd} memory: {e:?}")))?;
            let entry = SdEntry::set(sd16, mem.paddr(), true)
                .map_err(|e| msg(format_args!("SD {sd} entry: {e:?}")))?;
            ensure!(self.sds.push((sd16, mem)).is_ok(), "more than {MAX_SDS} SDs");
            ensure!(batch.push(entry).is_ok(), "batch overflow");
            if batch.is_full() || sds.peek().is_none() {
                self.exec(UpdatePeSds { hmc_fn_id: HMC_FN_ID, entries: &batch })
                    .map_err(|e| msg(format_args!("UPDATE_PE_SDS: {e:?}")))?;
                updates += 1;
                batch.clear();
            }
        }
        self.exec(ShmcPagesAllocated { hmc_fn_id: HMC_FN_ID as u16 })
            .map_err(|e| msg(format_args!("SHMC_PAGES_ALLOCATED: {e:?}")))?;
        println!(
            "  hmc_backing: {} SDs ({} MiB) in {updates} UPDATE_PE_SDS ops",
            self.sds.len(),
            self.sds.len() * 2
        );
        Ok(())
    }

    /// `NOPS` NOP round trips; `mode` 0 = register-polled, 1 = CCQ.
    fn nop_latency(&mut self, mode: usize) -> Result<(), Msg> {
        let want_ccq = mode == 1;
        ensure!(self.cqp()?.has_ccq() == want_ccq, "completion mode is not the expected one");
        let mut cycles = [0u64; NOPS];
        for (i, slot) in cycles.iter_mut().enumerate() {
            let t0 = arch::rdtsc();
            self.exec(Nop).map_err(|e| msg(format_args!("NOP {i}: {e:?}")))?;
            *slot = arch::rdtsc().wrapping_sub(t0);
        }
        cycles.sort_unstable();
        let (min, med, max) = (cycles[0], cycles[NOPS / 2], cycles[NOPS - 1]);
        self.nop_median[mode] = med;
        let ns = |c: u64| clock::cycles_to_duration(c).as_nanos();
        println!(
            "  {}: {NOPS} NOPs, cycles per round trip min {min} median {med} max {max} \
             (median {} ns)",
            if want_ccq { "cqp_nop_ccq" } else { "cqp_nop_registers" },
            ns(med)
        );
        Ok(())
    }

    /// The CCQ (CQ 0) and a NOP completed through it (spec §2.7).
    fn ccq_create(&mut self) -> Result<(), Msg> {
        let cqp = self.cqp()?;
        let r = cqp.create_ccq(CcqConfig::linux(SQ_SIZE));
        // CREATE_CQ reached the ring unless it was refused before posting.
        if !matches!(r, Err(CqpError::Encode(_) | CqpError::Busy | CqpError::Dma(_))) {
            self.ops += 1;
        }
        r.map_err(|e| msg(format_args!("create_ccq: {e:?}")))?;
        ensure!(self.cqp()?.has_ccq(), "no CCQ after create_ccq");
        let done = self.exec(Nop).map_err(|e| msg(format_args!("NOP via the CCQ: {e:?}")))?;
        println!("  ccq_create: {} entries; NOP completed in slot {}", SQ_SIZE + 2, {
            done.info().wqe_idx
        });
        Ok(())
    }

    /// CQP errors injected through the mailbox come back typed, and the
    /// CQP keeps working after each.
    fn fault_injection(&mut self) -> Result<(), Msg> {
        let bar = self.bar()?;
        ensure!(self.cqp()?.has_ccq(), "needs the CCQ");
        // A non-critical code on a NOP (utils.c: irdma_noncrit_err_list).
        request_fault(bar, contract::FAULT_FAIL_CQP_OP, 0, 0xffff, 0x8002)?;
        let r = self.exec(Nop).map(|_| ());
        self.failed_as_injected(r, op::NOP, 0xffff, 0x8002, true)?;
        self.exec(Nop).map_err(|e| msg(format_args!("NOP after the failure: {e:?}")))?;
        // A critical code on QUERY_FPM_VAL; the retry matches the first query.
        let before = need!(self.query, "FPM query");
        request_fault(bar, contract::FAULT_FAIL_CQP_OP, 0, 0xf001, 0x0042)?;
        let pa = need!(self.bufs.as_ref(), "buffers")[1].paddr();
        let r = self.exec(QueryFpmVal { hmc_fn_id: HMC_FN_ID as u16, buf_pa: pa }).map(|_| ());
        self.failed_as_injected(r, op::QUERY_FPM_VAL, 0xf001, 0x0042, false)?;
        let again = self.query_fpm()?;
        ensure!(again == before, "FPM query after the failure differs: {again:?}");
        // A countdown: the third op from now fails, the two before succeed.
        request_fault(bar, contract::FAULT_FAIL_CQP_OP, 2, 0xffff, 0x8006)?;
        for i in 0..3 {
            let r = self.exec(Nop).map(|_| ());
            if i < 2 {
                r.map_err(|e| msg(format_args!("countdown op {i}: {e:?}")))?;
            } else {
                self.failed_as_injected(r, op::NOP, 0xffff, 0x8006, true)?;
            }
        }
        // The model refuses a kind it does not know, and CLEAR works.
        ensure!(request_fault(bar, 99, 0, 0, 0)? == 1, "the model accepted fault kind 99");
        request_fault(bar, contract::FAULT_FAIL_CQP_OP, 0, 0xffff, 0x8002)?;
        ensure!(request_fault(bar, contract::FAULT_CLEAR, 0, 0, 0)? == 0, "CLEAR refused");
        self.exec(Nop).map_err(|e| msg(format_args!("NOP after CLEAR: {e:?}")))?;
        println!("  cqp_fault_injection: {} injected CQP errors, each typed", self.injected);
        Ok(())
    }

    /// `r` must be the injected failure: `OpFailed` with these codes, and
    /// classified as Linux does.
    fn failed_as_injected(
        &mut self,
        r: Result<(), CqpError>,
        opcode: u8,
        major: u16,
        minor: u16,
        noncritical: bool,
    ) -> Result<(), Msg> {
        self.injected += 1;
        match r {
            Err(e @ CqpError::OpFailed { opcode: o, major: ma, minor: mi })
                if (o, ma, mi) == (opcode, major, minor) =>
            {
                ensure!(
                    e.is_noncritical() == noncritical,
                    "{e:?}: non-critical is not {noncritical}"
                );
                Ok(())
            }
            other => bail!("expected OpFailed {opcode:#x} {major:#x}/{minor:#x}, got {other:?}"),
        }
    }

    /// Clears the SDs, destroys the CCQ and the CQP, frees everything, and
    /// checks the pool is back where it was.
    fn destroy(&mut self) -> Result<(), Msg> {
        let bar = self.bar()?;
        let ids: heapless::Vec<u16, MAX_SDS> = self.sds.iter().map(|(sd, _)| *sd).collect();
        for chunk in ids.chunks(MAX_SD_ENTRIES) {
            let mut batch: heapless::Vec<SdEntry, MAX_SD_ENTRIES> = heapless::Vec::new();
            for sd in chunk {
                // every SD here is direct (set with `direct = true` above)
                let e = SdEntry::clear(*sd, true)
                    .map_err(|e| msg(format_args!("clear {sd}: {e:?}")))?;
                ensure!(batch.push(e).is_ok(), "batch overflow");
            }
            self.exec(UpdatePeSds { hmc_fn_id: HMC_FN_ID, entries: &batch })
                .map_err(|e| msg(format_args!("UPDATE_PE_SDS clear: {e:?}")))?;
        }
        self.sds.clear();
        let cqp = need!(self.cqp.take(), "CQP");
        // DESTROY_CQ of the CCQ is one more op.
        if cqp.has_ccq() {
            self.ops += 1;
        }
        cqp.destroy().map_err(|e| msg(format_args!("destroy: {e:?}")))?;
        let status = bar.read32(regs::CCQPSTATUS) as u64;
        ensure!(!rf::CCQPSTATUS_DONE.is_set(status), "CCQPSTATUS {status:#x} after destroy");
        self.bufs = None;
        let live = hal::stats().live_pages;
        ensure!(live == self.live_before, "leak: {live} live pages, {} before", self.live_before);
        ensure!(hal::bad_frees() == self.bad_frees_before, "the pool refused a free");
        let ns = |c: u64| clock::cycles_to_duration(c).as_nanos();
        println!(
            "  cqp_destroy: {} CQP ops ({} failed on purpose); NOP round trip median {} cycles \
             ({} ns) register-polled, {} cycles ({} ns) via the CCQ; pool balanced",
            self.ops,
            self.injected,
            self.nop_median[0],
            ns(self.nop_median[0]),
            self.nop_median[1],
            ns(self.nop_median[1])
        );
        Ok(())
    }
}

/// The BAR if a device model process serves it, else why the driver
/// scenarios skip (a real E810 needs the LAN driver's setup first).
pub(super) fn model_bar(ctx: &Ctx) -> Result<&MmioBar, Msg> {
    match &ctx.device {
        None => Err(msg(format_args!("no device (pci_discovery failed)"))),
        Some(d) if d.kind == Kind::E810 => {
            Err(msg(format_args!("real device: bring-up needs the LAN driver first")))
        }
        Some(d) if d.mmio.read32(MAILBOX + contract::MB_HOST_MAGIC) != contract::HOST_MAGIC => {
            Err(msg(format_args!("no device model process serves the BAR")))
        }
        Some(d) => Ok(&d.mmio),
    }
}

/// The model's counters, fresh: a ping whose pong the model writes only
/// after it published them.
pub(super) struct ModelCounters {
    /// CQP ops executed.
    pub ops: u64,
    /// Of those, completed with an error.
    pub errors: u64,
    /// DMA accesses outside guest RAM.
    pub dma_faults: u64,
}

static SEQ: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0x4000_0000);

fn next_seq() -> u32 {
    SEQ.fetch_add(1, core::sync::atomic::Ordering::Relaxed)
}

pub(super) fn model_counters(bar: &MmioBar) -> Result<ModelCounters, Msg> {
    let seq = next_seq();
    bar.write32(MAILBOX + contract::MB_PING, seq);
    let ok = wait_until::<BootHal>(BootHal::now() + WAIT, || {
        bar.read32(MAILBOX + contract::MB_PONG) == contract::pong(seq)
    });
    ensure!(ok, "the model did not answer ping {seq:#x}");
    Ok(ModelCounters {
        ops: bar.read64(MAILBOX + contract::MB_MODEL_CQP_OPS),
        errors: bar.read64(MAILBOX + contract::MB_MODEL_CQP_ERRORS),
        dma_faults: bar.read64(MAILBOX + contract::MB_MODEL_DMA_FAULTS),
    })
}

/// Sends a fault request and waits for the model's acknowledgement;
/// returns its result word (0 = applied).
pub(super) fn request_fault(
    bar: &MmioBar,
    kind: u32,
    arg: u32,
    major: u16,
    minor: u16,
) -> Result<u32, Msg> {
    let seq = next_seq();
    bar.write32(MAILBOX + contract::MB_FAULT_KIND, kind);
    bar.write32(MAILBOX + contract::MB_FAULT_ARG, arg);
    bar.write32(MAILBOX + contract::MB_FAULT_CODES, (u32::from(major) << 16) | u32::from(minor));
    bar.write32(MAILBOX + contract::MB_FAULT_SEQ, seq);
    let ok = wait_until::<BootHal>(BootHal::now() + WAIT, || {
        bar.read32(MAILBOX + contract::MB_FAULT_ACK) == seq
    });
    ensure!(ok, "the model did not acknowledge fault request {seq:#x}");
    let result = bar.read32(MAILBOX + contract::MB_FAULT_RESULT);
    ensure!(
        kind > contract::FAULT_FUNCTION_RESET || result == 0,
        "the model refused fault kind {kind}"
    );
    Ok(result)
}
