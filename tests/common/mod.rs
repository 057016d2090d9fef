//! Shared helpers of the driver's host integration tests.
#![allow(dead_code, unused_imports)]

use std::sync::{Mutex, MutexGuard};

pub use irdma::device::{Device, ProbeError, ProbeOptions};
pub use irdma::lan::LanInfo;
pub use irdma::res::Profile;
pub use irdma_testkit::{ErrorCounter, FakeHal, ModelBar};
pub use mock_bar::Config;

/// FakeHal's page accounting is process-wide: tests that compare it run
/// one at a time.
pub fn lock() -> MutexGuard<'static, ()> {
    static L: Mutex<()> = Mutex::new(());
    L.lock().unwrap_or_else(|e| e.into_inner())
}

pub type Dev = Device<FakeHal, ModelBar>;

/// Runs `f` holding [`lock`], then asserts that every `FakeHal` page it
/// took was freed (the live-page count is back where it started).
#[track_caller]
pub fn leak_checked(f: impl FnOnce()) {
    let _g = lock();
    let base = FakeHal::live_pages();
    f();
    assert_eq!(FakeHal::live_pages(), base, "every page freed");
}

/// An empty slot for `Device::poll_async_events` to fill.
pub const NO_EVENT: irdma::aeq::AsyncEvent = irdma::aeq::AsyncEvent {
    kind: irdma::aeq::AsyncEventKind::Ignored,
    ae_code: 0,
    ae_src: 0,
    id: 0,
    moved_to_error: false,
};

pub fn lan() -> LanInfo {
    LanInfo::single_tc(0, 6, [0x02, 0, 0, 0, 0, 1], 1500)
}

pub fn opts() -> ProbeOptions {
    let mut o = ProbeOptions { cqp_sq_size: 64, ..ProbeOptions::default() };
    o.timeouts.ccq = std::time::Duration::from_millis(50);
    o.timeouts.poll_registers = std::time::Duration::from_millis(50);
    o.timeouts.create = std::time::Duration::from_millis(50);
    o
}

pub fn probe(bar: &ModelBar) -> Result<Dev, ProbeError> {
    Device::probe_with(bar.clone(), lan(), Profile::SMALL, opts())
}

pub use irdma::verbs::{
    AddressVector, Cq, IpAddr, Mr, MrDesc, Pd, Qp, QpAttr, QpCap, QpInitAttr, QpState, VerbsError,
};
pub use irdma::wr::{
    Access, PageSize, RecvWr, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
pub use irdma_hal::{BufferDirection, Dma};

pub type TQp<'d> = Qp<'d, FakeHal, ModelBar>;
pub type TCq<'d> = Cq<'d, FakeHal, ModelBar>;
pub type TMr<'d> = Mr<'d, FakeHal, ModelBar>;
pub type TPd<'d> = Pd<'d, FakeHal, ModelBar>;
pub type TFr<'d> = irdma::verbs::FastRegMr<'d, FakeHal, ModelBar>;
pub type Buf = Dma<FakeHal>;

/// A node's identity on the wire.
#[derive(Clone, Copy)]
pub struct Addr {
    pub mac: [u8; 6],
    pub ip: [u8; 4],
}

pub const A: Addr = Addr { mac: [0x02, 0, 0, 0, 0, 0x0a], ip: [10, 0, 0, 1] };
pub const B: Addr = Addr { mac: [0x02, 0, 0, 0, 0, 0x0b], ip: [10, 0, 0, 2] };

pub fn lan_of(a: Addr) -> LanInfo {
    LanInfo::single_tc(0, 6, a.mac, 1500)
}

pub fn probe_as(bar: &ModelBar, a: Addr, profile: Profile) -> Dev {
    Device::probe_with(bar.clone(), lan_of(a), profile, opts()).expect("probe")
}

/// Every model fault off, the model function reset, then `dev` closed
/// after the reset ([`Device::close_after_reset`]).
pub fn reset_and_close(bar: &ModelBar, dev: Dev) {
    bar.with_device(|d| {
        *d.faults() = Default::default();
        d.reset()
    });
    // SAFETY: the model function was just reset, after `dev`'s last CQP op
    // and after every quarantined buffer was handed to it: it holds no bus
    // address `dev` gave it and writes nothing any more.
    unsafe { dev.close_after_reset() };
}

/// A model function of the default configuration and the device [`probe`]d
/// on it.
pub fn default_device() -> (ModelBar, Dev) {
    let bar = ModelBar::standalone(Config::default());
    let dev = probe(&bar).expect("probe");
    (bar, dev)
}

/// One model function of `cfg` and the device probed on it as [`A`].
pub fn one_device(cfg: Config, profile: Profile) -> (ModelBar, Dev) {
    let bar = ModelBar::standalone(cfg);
    let dev = probe_as(&bar, A, profile);
    (bar, dev)
}

/// Runs `f` on device A of a standalone [`small_fn_config`] model
/// ([`Profile::SMALL`]), [`leak_checked`]: every page back once the device
/// is dropped.
#[track_caller]
pub fn with_small_device(f: impl FnOnce(&ModelBar, &Dev)) {
    leak_checked(|| {
        let (bar, dev) = one_device(small_fn_config(), Profile::SMALL);
        f(&bar, &dev);
    });
}

/// Probe options for a model driven by a device thread: the CQP waits are
/// long (5 s) because that thread, not the driver's own register write,
/// executes each op, and on a loaded 2-core machine it may not run for tens
/// of milliseconds (50 ms budgets made these tests fail with CQP timeouts
/// under load). A wait only takes that long when something is broken.
pub fn opts_threaded() -> ProbeOptions {
    let mut o = opts();
    let long = std::time::Duration::from_secs(5);
    (o.timeouts.ccq, o.timeouts.poll_registers, o.timeouts.create) = (long, long, long);
    o
}

/// [`probe_as`] for a model run by a device thread ([`opts_threaded`]).
#[allow(dead_code)]
pub fn probe_threaded_as(bar: &ModelBar, a: Addr, profile: Profile) -> Dev {
    Device::probe_with(bar.clone(), lan_of(a), profile, opts_threaded()).expect("probe")
}

pub fn cap(n: u32) -> QpCap {
    qp_cap(n, n, 2, 2)
}

/// A PD of `dev` and a CQ of `cqe` entries.
pub fn pd_cq(dev: &Dev, cqe: u32) -> (TPd<'_>, TCq<'_>) {
    (dev.alloc_pd().expect("pd"), dev.create_cq(cqe).expect("cq"))
}

pub fn create_qp<'d>(dev: &'d Dev, pd: &TPd<'d>, cq: &TCq<'d>, n: u32) -> TQp<'d> {
    let mut attr = QpInitAttr { send_cq: cq, recv_cq: cq, cap: cap(n) };
    dev.create_qp(pd, &mut attr).expect("create_qp")
}

/// An RC QP of `dev` (depth `n`) connected to itself in loopback, in RTS.
pub fn self_connected_qp<'d>(dev: &'d Dev, pd: &TPd<'d>, cq: &TCq<'d>, n: u32) -> TQp<'d> {
    let mut qp = create_qp(dev, pd, cq, n);
    let me = qp.qp_num();
    connect(&mut qp, A, A, me).expect("connect");
    qp
}

/// Two RC QPs of `dev` (depth `n`, one PD and CQ) connected to each other
/// in loopback, both in RTS.
pub fn loopback_pair<'d>(dev: &'d Dev, pd: &TPd<'d>, cq: &TCq<'d>, n: u32) -> (TQp<'d>, TQp<'d>) {
    loopback_pair_on(dev, pd, (cq, cq), n)
}

/// [`loopback_pair`] with send CQ `scq` and receive CQ `rcq`.
pub fn loopback_pair_on<'d>(
    dev: &'d Dev,
    pd: &TPd<'d>,
    (scq, rcq): (&TCq<'d>, &TCq<'d>),
    n: u32,
) -> (TQp<'d>, TQp<'d>) {
    let qp = || {
        let mut attr = QpInitAttr { send_cq: scq, recv_cq: rcq, cap: cap(n) };
        dev.create_qp(pd, &mut attr).expect("create_qp")
    };
    let (mut a, mut b) = (qp(), qp());
    connect_both(&mut a, A, &mut b, A);
    (a, b)
}

/// The RTR step [`connect`] takes towards `peer_qpn` at `peer` (PSN 100,
/// MTU 1024, hop limit 64); tests that vary one field start from it.
pub fn rtr_attr(me: Addr, peer: Addr, peer_qpn: u32) -> QpAttr {
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.dest_qp = peer_qpn;
    rtr.rq_psn = 100;
    rtr.path_mtu = 1024;
    rtr.av = Some(AddressVector {
        dest_mac: peer.mac,
        dest_ip: IpAddr::V4(peer.ip),
        src_ip: IpAddr::V4(me.ip),
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        vlan: None,
    });
    rtr
}

/// The RTS step [`connect`] takes (send PSN 100, matching [`rtr_attr`]).
pub fn rts_attr() -> QpAttr {
    let mut rts = QpAttr::new(QpState::Rts);
    rts.sq_psn = 100;
    rts
}

/// INIT → RTR → RTS towards `peer_qpn` at `peer`.
pub fn connect(qp: &mut TQp<'_>, me: Addr, peer: Addr, peer_qpn: u32) -> Result<(), VerbsError> {
    qp.modify(&QpAttr::new(QpState::Init))?;
    qp.modify(&rtr_attr(me, peer, peer_qpn))?;
    qp.modify(&rts_attr())
}

/// Connects `a` (at `at_a`) and `b` (at `at_b`) to each other: both in RTS.
pub fn connect_both(a: &mut TQp<'_>, at_a: Addr, b: &mut TQp<'_>, at_b: Addr) {
    let (na, nb) = (a.qp_num(), b.qp_num());
    connect(a, at_a, at_b, nb).expect("connect a");
    connect(b, at_b, at_a, na).expect("connect b");
}

/// Two model functions on one fabric (A's bar and its peer B), both
/// configured with `cfg`.
pub fn fabric(cfg: Config) -> (ModelBar, ModelBar) {
    let bar_a = ModelBar::standalone(cfg.clone());
    let bar_b = bar_a.add_peer(cfg);
    (bar_a, bar_b)
}

/// Two devices (A, B) on one fabric of `cfg` functions, each probed with
/// `profile`.
pub fn two_devices_with(cfg: Config, profile: Profile) -> (ModelBar, ModelBar, Dev, Dev) {
    let (bar_a, bar_b) = fabric(cfg);
    let da = probe_as(&bar_a, A, profile);
    let db = probe_as(&bar_b, B, profile);
    (bar_a, bar_b, da, db)
}

/// A QP capability of `send_wr`/`recv_wr` entries and
/// `send_sge`/`recv_sge` gather entries, no inline data.
pub const fn qp_cap(send_wr: u32, recv_wr: u32, send_sge: u32, recv_sge: u32) -> QpCap {
    QpCap {
        max_send_wr: send_wr,
        max_recv_wr: recv_wr,
        max_send_sge: send_sge,
        max_recv_sge: recv_sge,
        max_inline_data: 0,
    }
}

/// A signaled send-queue WR.
pub fn signaled(wr_id: u64, opcode: WrOpcode, sg_list: &[Sge]) -> SendWr<'_> {
    SendWr { wr_id, opcode, flags: SendFlags::SIGNALED, sg_list }
}

pub fn write_op(remote_addr: u64, rkey: u32) -> WrOpcode {
    WrOpcode::RdmaWrite { remote_addr, rkey }
}

pub fn read_op(remote_addr: u64, rkey: u32) -> WrOpcode {
    WrOpcode::RdmaRead { remote_addr, rkey }
}

pub fn buf(pages: usize) -> Buf {
    Dma::new(pages, BufferDirection::Both).expect("dma")
}

pub fn pages_of(b: &Buf) -> Vec<u64> {
    (0..b.pages()).map(|i| b.paddr() + (i * 4096) as u64).collect()
}

pub fn reg<'d>(
    dev: &'d Dev,
    pd: &TPd<'d>,
    iova: u64,
    len: u64,
    pages: &[u64],
    zero_based: bool,
) -> TMr<'d> {
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let d = MrDesc { zero_based, ..va_desc(iova, len, pages, all) };
    // SAFETY: the device is the in-process model, which reaches host memory only through `FakeHalMemory`; that refuses any address outside a live `FakeHal` allocation, so no page is written after it is freed. Callers register pages of buffers that outlive
    // the MR in any case.
    unsafe { dev.reg_mr(pd, &d) }.expect("reg_mr")
}

/// The description of a VA-based MR of 4 KiB `pages`: `length` bytes from
/// `iova`, with `access`.
pub fn va_desc(iova: u64, length: u64, pages: &[u64], access: Access) -> MrDesc<'_> {
    MrDesc { iova, length, page_size: PageSize::Size4K, pages, zero_based: false, access }
}

/// [`irdma::verbs::FastRegMr::map_pages`] for host tests.
pub fn map_pages(fr: &irdma::verbs::FastRegMr<'_, FakeHal, ModelBar>, pages: &[u64]) {
    // SAFETY: the device is the in-process model, which reaches host memory only through `FakeHalMemory`; that refuses any address outside a live `FakeHal` allocation, so no page is written after it is freed.
    unsafe { fr.map_pages(pages) }.expect("map_pages")
}

/// The REG_MR work request of the fast-register MR `fr` (level-1 PBL,
/// 4 KiB pages): `key` with `access` over `length` bytes at `iova`.
pub fn fr_reg(
    fr: &TFr<'_>,
    key: u32,
    access: Access,
    (iova, length): (u64, u64),
) -> irdma::wr::RegMrWr {
    irdma::wr::RegMrWr {
        key,
        access,
        iova,
        length,
        page_size: PageSize::Size4K,
        first_pble_index: fr.fr_mr().first_pble_index,
        pbl_level: 1,
    }
}

pub fn fill(b: &Buf, seed: u8) -> Vec<u8> {
    let v: Vec<u8> = (0..b.len()).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    assert!(b.write_bytes(0, &v));
    v
}

pub fn read(b: &Buf, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    assert!(b.read_bytes(off, &mut v));
    v
}

/// A completion for a poll to write into: everything default but the status,
/// an error, so that an entry the poll did not write can never read as a
/// success.
pub fn empty_wc() -> WorkCompletion {
    WorkCompletion { status: WcStatus::GeneralErr, ..WorkCompletion::default() }
}

/// `RwCtx::init` (FakeHal) of `ctx` over `sg` from its first byte, against
/// the remote `(addr, rkey)`: the number of WRs the context will post.
///
/// # Safety
///
/// As `RwCtx::init`: the memory `sg` names stays valid for `dir`'s access,
/// unmoved, until `RwCtx::destroy` ran with the same `sg` after the device
/// is done; `pool`'s MRs belong to no other pool or registration.
pub unsafe fn rw_init<const N: usize, const P: usize, const SGE: usize, const OPS: usize>(
    ctx: &mut irdma::rw::RwCtx<SGE, OPS>,
    (qp, pool): (&irdma::rw::RwQp, &mut irdma::rw::MrPool<N, P>),
    sg: &mut [irdma::rw::SgEntry],
    (addr, rkey): (u64, u32),
    dir: irdma::rw::Direction,
) -> Result<usize, irdma::rw::RwError> {
    // SAFETY: the caller's contract is `init`'s.
    unsafe { ctx.init::<FakeHal, N, P>(qp, pool, sg, 0, addr, rkey, dir) }
}

/// An `rdma_rw` QP with E810 RoCE attributes (13 SGEs, 4 KiB pages) and
/// its MR pool: where every rw test on real QPs starts.
pub struct RwFixture<const N: usize, const P: usize> {
    pub qp: irdma::rw::RwQp,
    pub pool: irdma::rw::MrPool<N, P>,
}

impl<const N: usize, const P: usize> RwFixture<N, P> {
    /// `force_mr` as `RwQp::new`; the pool holds the fast-register `mrs`
    /// (forced MR use), or stays empty when there are none.
    pub fn new(force_mr: bool, max_send_sge: u32, mrs: &[irdma::rw::FrMr]) -> Self {
        let attrs = irdma::rw::DeviceAttrs::e810_roce(13, 4096, 0);
        let mut pool = irdma::rw::MrPool::new();
        if !mrs.is_empty() {
            assert_eq!(pool.init(&attrs, true, mrs.len() as u32, mrs), Ok(mrs.len()));
        }
        RwFixture { qp: irdma::rw::RwQp::new(attrs, force_mr, max_send_sge), pool }
    }

    /// [`rw_init`] of `ctx` on this QP and pool.
    ///
    /// # Safety
    ///
    /// As [`rw_init`].
    pub unsafe fn init<const SGE: usize, const OPS: usize>(
        &mut self,
        ctx: &mut irdma::rw::RwCtx<SGE, OPS>,
        sg: &mut [irdma::rw::SgEntry],
        remote: (u64, u32),
        dir: irdma::rw::Direction,
    ) -> Result<usize, irdma::rw::RwError> {
        // SAFETY: the caller's contract is `rw_init`'s.
        unsafe { rw_init(ctx, (&self.qp, &mut self.pool), sg, remote, dir) }
    }
}

/// Polls until `n` completions arrived (bounded).
pub fn poll_n<'d>(cq: &mut TCq<'d>, n: usize) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    for _ in 0..1000 {
        let mut wc = [empty_wc(); 16];
        let k = cq.poll(&mut wc);
        out.extend_from_slice(&wc[..k]);
        if out.len() >= n {
            break;
        }
    }
    out
}

/// A model function with small OOISC/OOISCFFL maxima. Linux commits these
/// objects at their maximum for RoCE (spec control-path §3.5), which on the
/// default model is 68 MiB of direct SDs per probe; a smaller function keeps
/// the 1,000-cycle tests fast without changing any code path.
pub fn small_fn_config() -> Config {
    let mut c = Config::default();
    c.fpm.max_cnt[19] = 4096;
    c.fpm.max_cnt[20] = 4096;
    c
}

/// Fills the PBLE pool with 512-entry fast-register MRs, then frees every
/// other one: no level-1 run longer than 512 entries is left, so a larger
/// PBL can only be level 2 (pble.c: get_lvl1_lvl2_pble). Returns the MRs
/// that hold the pool apart.
pub fn fragment_pbles<'d>(dev: &'d Dev, pd: &TPd<'d>) -> Vec<TFr<'d>> {
    let mut all = Vec::new();
    while let Ok(f) = dev.alloc_mr(pd, 512) {
        all.push(f);
        assert!(all.len() < 256, "the PBLE pool should be small");
    }
    assert!(all.len() >= 8, "{} runs", all.len());
    let mut keep = Vec::new();
    for (i, mut f) in all.into_iter().enumerate() {
        if i % 2 == 0 {
            f.dereg().unwrap();
        } else {
            keep.push(f);
        }
    }
    keep
}
