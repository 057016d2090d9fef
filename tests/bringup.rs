//! Bring-up against the device model: probe, footprint, close, failures.

mod common;

use common::*;

#[test]
fn probe_and_close() {
    let _g = lock();
    let base = FakeHal::live_pages();
    let (bar, dev) = default_device();
    assert!(bar.with_device(|d| d.hmc_ready()));
    let fp = dev.footprint();
    let held = (FakeHal::live_pages() - base) as u64 * 4096;
    assert_eq!(held, fp.current_bytes, "footprint matches what was allocated: {fp:?}");
    dev.close().expect("close");
    assert_eq!(FakeHal::live_pages(), base);
}

use irdma::device::{ProbeCause, ProbeStep};
use irdma::lan::{LanError, LanOps};

#[derive(Default)]
struct Lan {
    registered: Vec<(u16, u8, u16, u32)>,
    unregistered: Vec<(u16, u32)>,
    filter: Vec<(u16, bool)>,
    fail_register: bool,
    fail_filter: bool,
}

impl LanOps for Lan {
    fn register_qset(&mut self, qs: u16, tc: u8, vsi: u16) -> Result<u32, LanError> {
        if self.fail_register {
            return Err(LanError::NoResources);
        }
        let teid = 0x100 + self.registered.len() as u32;
        self.registered.push((qs, tc, vsi, teid));
        Ok(teid)
    }
    fn unregister_qset(&mut self, qs: u16, teid: u32) -> Result<(), LanError> {
        self.unregistered.push((qs, teid));
        Ok(())
    }
    fn set_rdma_filter(&mut self, vsi: u16, on: bool) -> Result<(), LanError> {
        if self.fail_filter && on {
            return Err(LanError::Command(7));
        }
        self.filter.push((vsi, on));
        Ok(())
    }
    fn request_reset(&mut self) {}
}

#[test]
fn lan_side_registration_and_undo() {
    let _g = lock();
    let base = FakeHal::live_pages();
    let bar = ModelBar::standalone(Config::default());
    let mut ops = Lan::default();
    let dev = Dev::probe_with_lan(bar.clone(), lan(), Profile::SMALL, opts(), &mut ops).unwrap();
    let qs = dev.qs_handle();
    assert_eq!(
        bar.with_device(|d| d.ws_node(2).map(|n| (n.qs_handle, n.enabled))),
        Some((qs, true))
    );
    assert_eq!(ops.registered, vec![(qs, 0, 6, 0x100)]);
    assert_eq!(ops.filter, vec![(6, true)]);
    dev.close_with_lan(&mut ops).unwrap();
    assert_eq!(ops.filter, vec![(6, true), (6, false)]);
    assert_eq!(ops.unregistered, vec![(qs, 0x100)]);
    assert_eq!(FakeHal::live_pages(), base);

    // A LAN refusal fails probe at its step and undoes what was done.
    let bar = ModelBar::standalone(Config::default());
    let mut ops = Lan { fail_register: true, ..Lan::default() };
    let e =
        Dev::probe_with_lan(bar.clone(), lan(), Profile::SMALL, opts(), &mut ops).err().unwrap();
    assert_eq!(
        (e.step, e.cause),
        (ProbeStep::WorkScheduler, ProbeCause::LanOp(LanError::NoResources))
    );
    assert!(bar.with_device(|d| d.ws_node(0).is_none() && d.cqp().is_none()));
    assert_eq!(FakeHal::live_pages(), base);

    let bar = ModelBar::standalone(Config::default());
    let mut ops = Lan { fail_filter: true, ..Lan::default() };
    let e =
        Dev::probe_with_lan(bar.clone(), lan(), Profile::SMALL, opts(), &mut ops).err().unwrap();
    assert_eq!((e.step, e.cause), (ProbeStep::RdmaFilter, ProbeCause::LanOp(LanError::Command(7))));
    assert_eq!(ops.unregistered.len(), 1, "the registered queue set was given back");
    assert_eq!(FakeHal::live_pages(), base);
}

/// The bare-metal profile scaled to `qps` QPs: 2 CQs and 64 MRs per QP,
/// 256 Ki PBLEs (one SD), as [`Profile::SMALL`] is for 64.
fn scaled(qps: u32) -> Profile {
    Profile { qps, cqs: 2 * qps, mrs: 64 * qps, ..Profile::SMALL }
}

/// `footprint()` for 16, 64 and 256 QPs: what probe holds equals FakeHal's
/// live pages for each, the figures are printed (`--nocapture`; BENCHMARKS.md
/// quotes them) and the 64-QP profile fits in 16 MiB.
#[test]
fn footprint_per_profile_matches_live_pages() {
    let _g = lock();
    let mut held_by = Vec::new();
    for qps in [16, 64, 256] {
        let base = FakeHal::live_pages();
        let bar = ModelBar::standalone(Config::default());
        let dev: Dev = Device::probe_with(bar.clone(), lan(), scaled(qps), opts()).expect("probe");
        let fp = dev.footprint();
        let held = (FakeHal::live_pages() - base) as u64 * 4096;
        assert_eq!(
            held, fp.current_bytes,
            "{qps} QPs: footprint matches what was allocated: {fp:?}"
        );
        assert_eq!(
            fp.current_bytes,
            fp.hmc.initial_bytes() + fp.control_bytes,
            "{qps} QPs: {fp:?}"
        );
        println!(
            "footprint qps={qps} static_sds={} static={} pble_initial={} pble_max={} control={} current={}",
            fp.hmc.static_sds,
            fp.hmc.static_bytes,
            fp.hmc.pble_initial_bytes,
            fp.hmc.pble_max_bytes,
            fp.control_bytes,
            fp.current_bytes
        );
        held_by.push(fp.current_bytes);
        dev.close().expect("close");
        assert_eq!(FakeHal::live_pages(), base);
    }
    assert!(
        held_by[0] <= held_by[1] && held_by[1] <= held_by[2],
        "grows with the profile: {held_by:?}"
    );
    assert!(held_by[1] <= 16 << 20, "64 QPs fit in 16 MiB: {} bytes", held_by[1]);
}

/// The model's `strict_sds` option (PMSDPARTSEL, PMSDBPCOUNT = 512, 2 MiB
/// aligned direct SDs, spec control-path §3.6): the driver's UPDATE_PE_SDS
/// entries pass it.
#[test]
fn probe_passes_the_strict_sd_format() {
    let _g = lock();
    let bar = ModelBar::standalone(Config { strict_sds: true, ..Config::default() });
    let dev = probe(&bar).expect("probe");
    assert!(bar.with_device(|d| d.hmc_ready()));
    assert!(bar.with_device(|d| d.sds().len()) > 0);
    dev.close().expect("close");
}

/// A multi-page MR needs PBLEs: read back through the model's HMC
/// translation (SD table, and the PD cache for paged SDs, spec control-path
/// §3.6), they are the MR's pages. (With `Profile::SMALL` the first PBLE
/// chunk shares a direct SD with other objects; paged SDs appear only once
/// the pool grows into the next SD.)
#[test]
fn pbles_read_back_through_the_model_hmc_are_the_mr_pages() {
    let _g = lock();
    let (bar, dev) = default_device();
    let pd = dev.alloc_pd().unwrap();
    // two pages listed twice (p0 p1 p0 p1): never contiguous, so level 1
    let bufs: Vec<Buf> = (0..2).map(|_| buf(1)).collect();
    let pages: Vec<u64> = (0..4).map(|i| bufs[i % 2].paddr()).collect();
    let mr = reg(&dev, &pd, 0x1000_0000, 4 * 4096, &pages, false);
    let stag = bar.with_device(|d| d.stag(mr.lkey() >> 8).cloned()).expect("MR known to the model");
    let first = match stag.pbl {
        mock_bar::device::Pbl::Level1(i) => i as u64,
        other => panic!("level-1 PBL expected: {other:?}"),
    };
    let got: Vec<u64> = bar
        .with_device(|d| {
            let l = d.fpm_layout().expect("layout").clone();
            (0..4)
                .map(|i| d.hmc_translate(l.base[14] + 8 * (first + i)))
                .collect::<Option<Vec<_>>>()
        })
        .map(|pas| pas.iter().map(|&pa| model_read(pa)).collect())
        .expect("every PBLE translates");
    assert_eq!(got, pages);
    drop((mr, pd, bufs));
    dev.close().expect("close");
}

/// Reads a u64 at a FakeHal bus address (== host address) through the
/// model's view of memory.
fn model_read(pa: u64) -> u64 {
    use mock_bar::Memory;
    let mut b = [0u8; 8];
    irdma_testkit::FakeHalMemory.read(pa, &mut b).expect("live FakeHal memory");
    u64::from_le_bytes(b)
}

/// `alloc_mr` sends ALLOC_STAG with the vendor's fields for a fast-register
/// MR (verbs.c: irdma_hw_alloc_stag; spec control-path §4.3.7): the MR form,
/// no access rights, REMACCENABLED set, no PBL chunk (LPBLSIZE 0, no first
/// PBLE index), 4 KiB pages, the PD and `max_pages` × 4 KiB as its length.
/// The PBLEs it holds are named by each FAST_REGISTER WQE instead.
#[test]
fn alloc_mr_sends_the_vendors_alloc_stag() {
    let _g = lock();
    let (bar, dev) = default_device();
    let pd = dev.alloc_pd().unwrap();
    let fr = dev.alloc_mr(&pd, 3).unwrap();
    let w = bar
        .with_device(|d| d.stag(fr.fr_mr().key >> 8).map(|s| s.created_by))
        .expect("STag known to the model");
    assert!(w.mr, "memory-region form");
    assert_eq!((w.rights, w.remote_access), (0, true), "rights 0, REMACCENABLED 1");
    assert_eq!((w.lpbl_size, w.first_pble), (0, 0), "no PBL chunk");
    assert_eq!((w.page_size, w.len), (0, 3 * 4096));
    assert_eq!(w.pd, pd.id());
    drop((fr, pd));
    dev.close().expect("close");
}
