//! Helpers of the end-to-end tests (`tests/e2e_*.rs`): one side of a
//! connection (PD, CQ, RC QP), registered regions, a seeded RNG and
//! completion collection. Builds on `tests/common` (probe, connect, buffers).
#![allow(dead_code, unused_imports)]

pub use crate::common::*;
use irdma::cm::{AcceptParams, Cm, CmEvent, MadTransport};

/// AE codes (spec control-path §8.2 table; Linux irdma user.h: IRDMA_AE_*),
/// the ones the protection, MR-access and id tests expect.
pub const AMP_UNALLOCATED_STAG: u16 = 0x0102;
pub const AMP_INVALID_STAG: u16 = 0x0103;
pub const AMP_BAD_PD: u16 = 0x0105;
pub const AMP_BAD_STAG_KEY: u16 = 0x0106;
pub const AMP_BOUNDS_VIOLATION: u16 = 0x0108;
pub const AMP_RIGHTS_VIOLATION: u16 = 0x0109;
pub const CQ_OPERATION_ERROR: u16 = 0x0203;
pub const IB_REMOTE_ACCESS_ERROR: u16 = 0x020D;
pub const LCE_QP_CATASTROPHIC: u16 = 0x0700;

/// Access every region of these tests grants.
pub const ALL: Access =
    Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);

/// A deterministic xorshift64* generator (seeded; no external crate).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// One end of a connection: PD, one CQ for both queues, one RC QP.
pub struct Side<'d> {
    pub qp: TQp<'d>,
    pub cq: TCq<'d>,
    pub pd: TPd<'d>,
    pub dev: &'d Dev,
    pub addr: Addr,
}

impl<'d> Side<'d> {
    /// PD, a CQ of `cqe` entries and a QP with `cap` (written back).
    pub fn new(dev: &'d Dev, addr: Addr, cqe: u32, cap: QpCap) -> Self {
        let pd = dev.alloc_pd().expect("alloc_pd");
        let cq = dev.create_cq(cqe).expect("create_cq");
        let mut attr = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap };
        let qp = dev.create_qp(&pd, &mut attr).expect("create_qp");
        Side { qp, cq, pd, dev, addr }
    }

    /// Polls until `n` completions arrived or the CQ stays empty.
    pub fn poll(&mut self, n: usize) -> Vec<WorkCompletion> {
        let mut out = Vec::new();
        let mut idle = 0;
        while out.len() < n && idle < 3 {
            let mut wc = [empty_wc(); 32];
            let k = self.cq.poll(&mut wc);
            if k == 0 {
                idle += 1;
            }
            out.extend_from_slice(&wc[..k]);
        }
        out
    }

    /// Exactly one completion, and nothing after it.
    pub fn one(&mut self) -> WorkCompletion {
        let wc = self.poll(1);
        assert_eq!(wc.len(), 1, "one completion expected: {wc:?}");
        self.nothing();
        wc[0]
    }

    /// Asserts the CQ holds nothing more.
    pub fn nothing(&mut self) {
        let mut wc = [empty_wc(); 4];
        let k = self.cq.poll(&mut wc);
        assert_eq!(k, 0, "unexpected completions: {:?}", &wc[..k]);
    }

    /// Asserts the device reported an async event that moved this side's
    /// QP to ERROR (among up to 8 pending events).
    #[track_caller]
    pub fn assert_error_event(&self) {
        let mut ev = [NO_EVENT; 8];
        let n = self.dev.poll_async_events(&mut ev);
        let qpn = self.qp.qp_num();
        assert!(
            ev[..n].iter().any(|e| e.id == qpn && e.moved_to_error),
            "an AE moved QP {qpn} to error: {:?}",
            &ev[..n]
        );
    }

    /// [`Side::assert_error_event`]; then exactly one completion (the
    /// failed WR) arrives, and nothing after it: returns it.
    #[track_caller]
    pub fn after_error(&mut self) -> WorkCompletion {
        self.assert_error_event();
        self.one()
    }

    /// A region of `pages` pages registered with [`ALL`] access, VA-based at
    /// its bus address, filled with `seed`'s pattern.
    pub fn region(&self, pages: usize, seed: u8) -> Region<'d> {
        let buf = buf(pages);
        let _ = fill(&buf, seed);
        let mr =
            reg(self.dev, &self.pd, buf.paddr(), (pages * 4096) as u64, &pages_of(&buf), false);
        Region { mr, buf }
    }
}

/// Two devices (A, B) on one fabric, each probed with `profile`.
pub fn two_devices(profile: Profile) -> (ModelBar, ModelBar, Dev, Dev) {
    two_devices_with(small_fn_config(), profile)
}

/// The set-up of the multi-threaded tests: two devices (A, B) on one
/// fabric of deferred-mode [`small_fn_config`] functions whose queues a
/// device thread executes (20 µs idle), each probed with [`opts_threaded`].
/// Bind the result with one `let`: the devices, bound after the thread,
/// are dropped before it stops.
pub fn threaded_devices(
    profile: Profile,
) -> (ModelBar, ModelBar, mock_bar::DeviceThread, Dev, Dev) {
    let mut cfg = small_fn_config();
    cfg.mode = mock_bar::Mode::Deferred;
    let (bar_a, bar_b) = fabric(cfg);
    let thread = bar_a.fabric().spawn_device_thread(std::time::Duration::from_micros(20));
    let da = probe_threaded_as(&bar_a, A, profile);
    let db = probe_threaded_as(&bar_b, B, profile);
    (bar_a, bar_b, thread, da, db)
}

/// [`two_devices`] whose models refuse a request with another PSN than the
/// responder expects (`set_strict_psn`): a wrongly crossed PSN fails the
/// traffic instead of passing unnoticed.
pub fn two_strict_devices(profile: Profile) -> (ModelBar, ModelBar, Dev, Dev) {
    let (ba, bb, da, db) = two_devices(profile);
    for bar in [&ba, &bb] {
        bar.with_device(|d| d.set_strict_psn(true));
    }
    (ba, bb, da, db)
}

/// Connects two sides' QPs to each other (INIT → RTR → RTS both ways).
pub fn link(a: &mut Side<'_>, b: &mut Side<'_>) {
    connect_both(&mut a.qp, a.addr, &mut b.qp, b.addr);
}

/// A's and B's sides on `da` and `db` (CQs of `cqe` entries, QPs of
/// `cap`), linked to each other.
pub fn linked<'a, 'b>(da: &'a Dev, db: &'b Dev, cqe: u32, cap: QpCap) -> (Side<'a>, Side<'b>) {
    let mut a = Side::new(da, A, cqe, cap);
    let mut b = Side::new(db, B, cqe, cap);
    link(&mut a, &mut b);
    (a, b)
}

/// Runs `f` on a fresh [`linked`] pair A → B (CQs of `cqe` entries, QPs
/// of `cap`) on [`two_devices`], with both model BARs, [`leak_checked`].
pub fn with_linked(
    cqe: u32,
    cap: QpCap,
    f: impl FnOnce(&ModelBar, &ModelBar, &mut Side<'_>, &mut Side<'_>),
) {
    with_two_devices(|ba, bb, da, db| {
        let (mut a, mut b) = linked(da, db, cqe, cap);
        f(ba, bb, &mut a, &mut b);
    });
}

/// Runs `f` on [`two_devices`] (their model BARs, then A and B),
/// [`leak_checked`]: every page back once the devices are dropped.
#[track_caller]
pub fn with_two_devices(f: impl FnOnce(&ModelBar, &ModelBar, &Dev, &Dev)) {
    leak_checked(|| {
        let (ba, bb, da, db) = two_devices(Profile::SMALL);
        f(&ba, &bb, &da, &db);
    });
}

/// A buffer and the MR over it (VA-based at the buffer's bus address).
pub struct Region<'d> {
    // Deregistered before the memory is freed.
    pub mr: TMr<'d>,
    pub buf: Buf,
}

impl Region<'_> {
    pub fn addr(&self) -> u64 {
        self.buf.paddr()
    }
    pub fn key(&self) -> u32 {
        self.mr.lkey()
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn sge(&self, off: usize, len: usize) -> Sge {
        Sge { addr: self.addr() + off as u64, length: len as u32, lkey: self.key() }
    }
    pub fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        read(&self.buf, off, len)
    }
    pub fn all(&self) -> Vec<u8> {
        read(&self.buf, 0, self.len())
    }
    pub fn put(&self, off: usize, data: &[u8]) {
        assert!(self.buf.write_bytes(off, data));
    }
}

/// Concatenation of what `sges` cover in `r` (offsets relative to `r`).
pub fn gathered(r: &Region<'_>, sges: &[Sge]) -> Vec<u8> {
    let mut v = Vec::new();
    for s in sges {
        v.extend(r.bytes((s.addr - r.addr()) as usize, s.length as usize));
    }
    v
}

/// Writes `data` over the places `sges` cover in `r` (a copy of the memory
/// at bus address `base`), in order, as a receive or READ scatters it.
pub fn scatter_ref(r: &mut [u8], base: u64, sges: &[Sge], data: &[u8]) {
    let mut at = 0;
    for s in sges {
        let n = (s.length as usize).min(data.len() - at);
        let off = (s.addr - base) as usize;
        r[off..off + n].copy_from_slice(&data[at..at + n]);
        at += n;
    }
}

/// Asserts `got == want` and on a mismatch names the first differing byte
/// (instead of printing whole buffers).
#[track_caller]
pub fn same(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let i = got.iter().zip(want).position(|(g, w)| g != w);
    match i {
        Some(i) => panic!(
            "{what}: byte {i} differs (got {:#04x}, want {:#04x}); lengths {} / {}",
            got[i],
            want[i],
            got.len(),
            want.len()
        ),
        None => panic!("{what}: lengths differ: {} / {}", got.len(), want.len()),
    }
}

/// A multi-producer (shared) RC QP of these tests.
pub type TShared<'d> = irdma::verbs::SharedQp<'d, FakeHal, ModelBar>;

/// A shared RC QP on `cq` for both queues.
pub fn shared_qp<'d>(dev: &'d Dev, pd: &TPd<'d>, cq: &TCq<'d>, cap: QpCap) -> TShared<'d> {
    let mut attr = QpInitAttr { send_cq: cq, recv_cq: cq, cap };
    dev.create_shared_qp(pd, &mut attr).expect("create_shared_qp")
}

/// INIT → RTR → RTS towards `peer_qpn`, as `common::connect` does.
pub fn connect_shared(qp: &mut TShared<'_>, me: Addr, peer: Addr, peer_qpn: u32) {
    qp.modify(&QpAttr::new(QpState::Init)).expect("init");
    qp.modify(&rtr_attr(me, peer, peer_qpn)).expect("rtr");
    qp.modify(&rts_attr()).expect("rts");
}

/// A shared RC QP of `cap` on `dev` with its own PD and a CQ of `cqe`
/// entries, connected to `peer`'s QP both ways (INIT → RTR → RTS).
pub fn shared_linked<'d>(
    dev: &'d Dev,
    cqe: u32,
    cap: QpCap,
    peer: &mut Side<'_>,
) -> (TPd<'d>, TCq<'d>, TShared<'d>) {
    let pd = dev.alloc_pd().expect("pd");
    let cq = dev.create_cq(cqe).expect("cq");
    let mut qp = shared_qp(dev, &pd, &cq, cap);
    connect_shared(&mut qp, A, peer.addr, peer.qp.qp_num());
    connect(&mut peer.qp, peer.addr, A, qp.qp_num()).expect("connect");
    (pd, cq, qp)
}

/// Six WRITEs of `sg` to `dst` (wr_ids `base`..`base + 6`); the odd ones
/// unsignaled except every third: signaled, unsignaled, signaled,
/// unsignaled, signaled, signaled.
pub fn mixed_writes<'a>(base: u64, dst: &Region<'_>, sg: &'a [Sge]) -> Vec<SendWr<'a>> {
    (base..base + 6)
        .map(|i| {
            let mut w = signaled(i, write_op(dst.addr(), dst.key()), sg);
            if i % 2 == 1 && i % 3 != 2 {
                w.flags = SendFlags::NONE;
            }
            w
        })
        .collect()
}

/// A datagram end's PD, CQ (64 entries) and QP of `cap`: a UD QP, or the
/// GSI QP (QP1) with `gsi`; moved to INIT with Q_Key `qkey`, RTR, and RTS
/// with send PSN `sq_psn`.
pub fn ud_qp<'d>(
    dev: &'d Dev,
    gsi: bool,
    cap: QpCap,
    (qkey, sq_psn): (u32, u32),
) -> (TPd<'d>, TCq<'d>, TQp<'d>) {
    let pd = dev.alloc_pd().expect("alloc_pd");
    let cq = dev.create_cq(64).expect("create_cq");
    let mut attr = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap };
    let mut qp = if gsi {
        dev.create_gsi_qp(&pd, &mut attr).expect("create_gsi_qp")
    } else {
        dev.create_ud_qp(&pd, &mut attr).expect("create_ud_qp")
    };
    let mut init = QpAttr::new(QpState::Init);
    init.qkey = qkey;
    qp.modify(&init).expect("INIT");
    qp.modify(&QpAttr::new(QpState::Rtr)).expect("RTR");
    let mut rts = QpAttr::new(QpState::Rts);
    rts.sq_psn = sq_psn;
    qp.modify(&rts).expect("RTS");
    (pd, cq, qp)
}

/// One datagram end ([`ud_qp`]); the tests that use it add their own
/// methods.
pub struct UdEnd<'d> {
    pub qp: TQp<'d>,
    pub cq: TCq<'d>,
    pub pd: TPd<'d>,
    pub dev: &'d Dev,
}

impl<'d> UdEnd<'d> {
    pub fn new(dev: &'d Dev, gsi: bool, cap: QpCap, qkey_psn: (u32, u32)) -> Self {
        let (pd, cq, qp) = ud_qp(dev, gsi, cap, qkey_psn);
        UdEnd { qp, cq, pd, dev }
    }
}

/// A PD and a CQ (`cqe_a` / `cqe_b` entries) on each of two devices: the
/// ends [`rc_peer`] and [`shared_peer`] make QPs between.
pub fn pd_cq_pairs<'a, 'b>(
    da: &'a Dev,
    cqe_a: u32,
    db: &'b Dev,
    cqe_b: u32,
) -> ((TPd<'a>, TCq<'a>), (TPd<'b>, TCq<'b>)) {
    let pa = da.alloc_pd().expect("pd");
    let pb = db.alloc_pd().expect("pd");
    let ca = da.create_cq(cqe_a).expect("cq");
    let cb = db.create_cq(cqe_b).expect("cq b");
    ((pa, ca), (pb, cb))
}

/// An RC QP on `da` (PD `pa`, CQ `ca`) and one on `db` (`pb`, `cb`), both of
/// depth 16 ([`create_qp`]), connected to each other.
pub fn rc_peer<'a, 'b>(
    (da, pa, ca): (&'a Dev, &TPd<'a>, &TCq<'a>),
    (db, pb, cb): (&'b Dev, &TPd<'b>, &TCq<'b>),
) -> (TQp<'a>, TQp<'b>) {
    let mut a = create_qp(da, pa, ca, 16);
    let mut b = create_qp(db, pb, cb, 16);
    connect_both(&mut a, A, &mut b, B);
    (a, b)
}

/// A shared QP on `da` (16 WRs, one SGE each way) and an RC QP of depth 16
/// on `db`, connected to each other.
pub fn shared_peer<'a, 'b>(
    (da, pa, ca): (&'a Dev, &TPd<'a>, &TCq<'a>),
    (db, pb, cb): (&'b Dev, &TPd<'b>, &TCq<'b>),
) -> (TShared<'a>, TQp<'b>) {
    let mut a = shared_qp(da, pa, ca, qp_cap(16, 16, 1, 1));
    let mut b = create_qp(db, pb, cb, 16);
    connect_shared(&mut a, A, B, b.qp_num());
    connect(&mut b, B, A, a.qp_num()).expect("connect");
    (a, b)
}

/// Polls two CMs at `now` until neither has anything to do, reacting like
/// RDMA-CM applications whose QPs are `qa` (the active side, A) and `qb`
/// (the passive side, B): B accepts each request (private data "ok",
/// starting PSN `psn_b`, `(responder resources, initiator depth)` =
/// `accept` if given, else [`AcceptParams::new`]'s), its QP in RTS before
/// the REP (cma_accept_ib); A moves its QP to RTS on the REP and sends the
/// RTU; B answers a DREQ with ERROR and a DREP. Returns the events seen,
/// each with its side.
///
/// [`AcceptParams::new`]: irdma::cm::AcceptParams::new
pub fn pump_cms<TA: MadTransport, TB: MadTransport, const C: usize, const L: usize>(
    now: u64,
    (cma, ta, qa): (&mut Cm<C, L>, &mut TA, &mut TQp<'_>),
    (cmb, tb, qb): (&mut Cm<C, L>, &mut TB, &mut TQp<'_>),
    psn_b: u32,
    accept: Option<(u8, u8)>,
) -> Vec<(char, CmEvent)> {
    let mut seen = Vec::new();
    loop {
        let mut any = false;
        while let Some(e) = cmb.poll(now, tb) {
            any = true;
            seen.push(('b', e));
            match e {
                CmEvent::ConnectRequest { id, info } => {
                    assert_eq!(info.remote_qpn, qa.qp_num());
                    let mut acc = AcceptParams {
                        private_data: b"ok",
                        ..AcceptParams::new(qb.qp_num(), psn_b)
                    };
                    if let Some((rr, depth)) = accept {
                        (acc.responder_resources, acc.initiator_depth) = (rr, depth);
                    }
                    let p = cmb.accept_params(id, &acc).unwrap();
                    p.apply(qb).expect("passive QP to RTS");
                    cmb.accept(now, id, &acc, tb).unwrap();
                }
                CmEvent::Disconnected { id, timed_out: false } => {
                    qb.modify(&QpAttr::new(QpState::Error)).unwrap();
                    cmb.disconnect(now, id, tb).unwrap();
                }
                _ => {}
            }
        }
        while let Some(e) = cma.poll(now, ta) {
            any = true;
            seen.push(('a', e));
            if let CmEvent::Connected { id, params, private_data } = e {
                assert_eq!(&private_data[..2], b"ok");
                params.apply(qa).expect("active QP to RTS");
                cma.ready_to_use(id, ta).unwrap();
            }
        }
        if !any {
            return seen;
        }
    }
}

/// The id of the first `ConnectRequest` among `ev` ([`pump_cms`]'s events).
pub fn request_id(ev: &[(char, CmEvent)]) -> Option<irdma::cm::ConnId> {
    ev.iter().find_map(|(_, e)| match e {
        CmEvent::ConnectRequest { id, .. } => Some(*id),
        _ => None,
    })
}

/// Traffic over a connected pair, first half: A SENDs 300 bytes of
/// `rng`'s to a receive of B; both complete successfully and the bytes
/// landed. Returns A's and B's regions for [`write_b_to_a`].
#[track_caller]
pub fn send_a_to_b<'a, 'b>(
    a: &mut Side<'a>,
    b: &mut Side<'b>,
    rng: &mut Rng,
) -> (Region<'a>, Region<'b>) {
    let ra = a.region(1, 1);
    let rb = b.region(1, 2);
    let msg = rng.bytes(300);
    ra.put(0, &msg);
    b.qp.post_recv(&[RecvWr { wr_id: 10, sg_list: &[rb.sge(0, 4096)] }]).unwrap();
    a.qp.post_send(&[signaled(1, WrOpcode::Send, &[ra.sge(0, 300)])]).unwrap();
    assert_eq!((a.one().status, b.one().status), (WcStatus::Success, WcStatus::Success));
    assert_eq!(rb.bytes(0, 300), msg);
    (ra, rb)
}

/// Second half: B WRITEs 2000 bytes of `rng`'s from `rb` into `ra` (at
/// offset 512); it completes successfully and the bytes landed.
#[track_caller]
pub fn write_b_to_a(b: &mut Side<'_>, (ra, rb): (&Region<'_>, &Region<'_>), rng: &mut Rng) {
    let data = rng.bytes(2000);
    rb.put(1024, &data);
    b.qp.post_send(&[signaled(2, write_op(ra.addr() + 512, ra.key()), &[rb.sge(1024, 2000)])])
        .unwrap();
    assert_eq!(b.one().status, WcStatus::Success);
    assert_eq!(ra.bytes(512, 2000), data);
}

/// Polls through `poll` (a CQ or a poller) until `n` completions arrived
/// or `idle` polls in a row gave none; a small array per poll, so polls
/// stop mid-ring.
#[allow(dead_code)]
pub fn poll_until_with(
    mut poll: impl FnMut(&mut [WorkCompletion]) -> usize,
    n: usize,
    idle: usize,
) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut quiet = 0;
    while out.len() < n && quiet < idle {
        let mut wc = [empty_wc(); 5];
        let k = poll(&mut wc);
        quiet = if k == 0 { quiet + 1 } else { 0 };
        out.extend_from_slice(&wc[..k]);
    }
    out
}

/// Counts each (QP, wr_id, opcode) and asserts every one came exactly once.
#[allow(dead_code)]
pub fn once(got: &[WorkCompletion]) -> std::collections::BTreeMap<(u32, u64, String), usize> {
    let mut m = std::collections::BTreeMap::new();
    for c in got {
        *m.entry((c.qp_num, c.wr_id, format!("{:?}", c.opcode))).or_insert(0) += 1;
    }
    assert!(m.values().all(|&k| k == 1), "a completion came twice: {m:?}");
    m
}

/// A region of `pages` pages on `dev` under `pd` (VA-based at its bus
/// address, [`reg`]'s access), filled with seed 1's pattern.
pub fn region_on<'d>(dev: &'d Dev, pd: &TPd<'d>, pages: usize) -> Region<'d> {
    let buf = buf(pages);
    let _ = fill(&buf, 1);
    let mr = reg(dev, pd, buf.paddr(), (pages * 4096) as u64, &pages_of(&buf), false);
    Region { mr, buf }
}

/// Fan-in traffic (`cq_table`, `cq_poller`): the receives of A's QP `i`,
/// `n` of them (wr_ids 1000..), on its slice of `sgs`.
pub fn fan_in_recvs(sgs: &[[Sge; 1]], i: usize, n: u64) -> Vec<RecvWr<'_>> {
    let n = n as usize;
    (0..n).map(|k| RecvWr { wr_id: 1000 + k as u64, sg_list: &sgs[i * n + k] }).collect()
}

/// Fan-in traffic: A's QP `i` WRITEs `sg` `n` times (wr_ids 0..), each to
/// its own 64 bytes of `dst`.
pub fn fan_in_writes<'a>(dst: &Region<'_>, i: usize, n: u64, sg: &'a [Sge]) -> Vec<SendWr<'a>> {
    (0..n).map(|k| signaled(k, write_op(dst.addr() + (i * 64) as u64, dst.key()), sg)).collect()
}

/// Fan-in traffic: a B QP SENDs `sg` `n` times (wr_ids 500..).
pub fn fan_in_sends(n: u64, sg: &[Sge]) -> Vec<SendWr<'_>> {
    (0..n).map(|k| signaled(500 + k, WrOpcode::Send, sg)).collect()
}

/// The buffers of the fan-in traffic: on A the WRITE source and the
/// receive inbox (64 bytes per receive, `receives` SGLs), on B the WRITE
/// target and the SEND source.
pub struct FanIn<'d> {
    pub src: Region<'d>,
    pub inbox: Region<'d>,
    pub dst: Region<'d>,
    pub msg: Region<'d>,
    pub recv_sg: Vec<[Sge; 1]>,
}

impl<'d> FanIn<'d> {
    pub fn new(da: &'d Dev, pa: &TPd<'d>, db: &'d Dev, pb: &TPd<'d>, receives: usize) -> Self {
        let src = region_on(da, pa, 1);
        let inbox = region_on(da, pa, 1);
        let dst = region_on(db, pb, 1);
        let msg = region_on(db, pb, 1);
        let recv_sg = (0..receives).map(|k| [inbox.sge(k * 64, 64)]).collect();
        FanIn { src, inbox, dst, msg, recv_sg }
    }
}

/// Posts the fan-in traffic: through `post_a`, each A QP of `qa` its
/// `writes` WRITEs ([`fan_in_writes`], 32 bytes of `src`); then each B QP
/// of `qb` its `sends` SENDs (16 bytes of `msg`).
pub fn post_fan_in<X>(
    f: &FanIn<'_>,
    qa: impl IntoIterator<Item = X>,
    mut post_a: impl FnMut(X, &[SendWr<'_>]),
    qb: &mut [TQp<'_>],
    (writes, sends): (u64, u64),
) {
    let wsg = [f.src.sge(0, 32)];
    for (i, a) in qa.into_iter().enumerate() {
        post_a(a, &fan_in_writes(&f.dst, i, writes, &wsg));
    }
    let ssg = [f.msg.sge(0, 16)];
    for b in qb.iter_mut() {
        b.post_send(&fan_in_sends(sends, &ssg)).expect("b post_send");
    }
}

/// Polls through `poll` until the fan-in completions of the A QPs `qpns`
/// arrived (20 empty polls give up) and asserts they are exactly those:
/// `writes` WRITEs (wr_ids 0..) and `sends` receives (wr_ids 1000..)
/// each, all successful, each once; and that nothing more comes.
#[track_caller]
pub fn check_fan_in(
    mut poll: impl FnMut(&mut [WorkCompletion]) -> usize,
    qpns: &[u32],
    (writes, sends): (u64, u64),
) {
    let want = qpns.len() * (writes + sends) as usize;
    let got = poll_until_with(&mut poll, want + 1, 20);
    assert_eq!(got.len(), want, "{got:?}");
    assert!(got.iter().all(|c| c.status == WcStatus::Success), "{got:?}");
    let m = once(&got);
    for &qpn in qpns {
        for k in 0..writes {
            assert_eq!(m.get(&(qpn, k, "RdmaWrite".into())), Some(&1));
        }
        for k in 0..sends {
            assert_eq!(m.get(&(qpn, 1000 + k, "Recv".into())), Some(&1));
        }
    }
    let mut wc = [empty_wc(); 4];
    assert_eq!(poll(&mut wc), 0, "exactly once: nothing more");
}

/// `n` disjoint SGEs of `len` bytes in all inside `[0, area)` of a region at
/// bus address `base` with key `lkey`: the area is cut into `n` slots, and
/// piece `i` lies inside slot `i` (so a READ's scatter is order-free).
pub fn sges(rng: &mut Rng, base: u64, lkey: u32, area: usize, n: usize, len: usize) -> Vec<Sge> {
    let slot = area / n;
    // Split `len` into n positive parts, each at most `slot`.
    let mut parts = vec![1usize; n];
    let mut left = len - n;
    while left > 0 {
        let i = rng.range(0, n as u64 - 1) as usize;
        let room = slot - parts[i];
        if room == 0 {
            continue;
        }
        let add = (rng.range(1, left.min(room) as u64) as usize).min(left);
        parts[i] += add;
        left -= add;
    }
    parts
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let off = i * slot + rng.range(0, (slot - p) as u64) as usize;
            Sge { addr: base + off as u64, length: p as u32, lkey }
        })
        .collect()
}

/// Host writes: 1 to 511 random bytes at a random offset (below the last
/// 512 bytes) of region `local` and of its reference copy `local_ref`.
pub fn refresh_local(local_ref: &mut [u8], local: &Region<'_>, rng: &mut Rng) {
    let o = rng.range(0, (local_ref.len() - 512) as u64) as usize;
    let n = rng.range(1, 512) as usize;
    let fresh = rng.bytes(n);
    local_ref[o..o + n].copy_from_slice(&fresh);
    local.put(o, &fresh);
}

/// The send WRs of a batch built as (wr_id, opcode, flags) with each WR's
/// gather list in `sgs` (same order).
pub fn send_wrs<'a>(ops: &[(u64, WrOpcode, SendFlags)], sgs: &'a [Vec<Sge>]) -> Vec<SendWr<'a>> {
    assert_eq!(ops.len(), sgs.len(), "one gather list per WR");
    ops.iter()
        .zip(sgs)
        .map(|(&(wr_id, opcode, flags), sg)| SendWr { wr_id, opcode, flags, sg_list: sg })
        .collect()
}

/// The bytes `sg` gathers from `mem` (a copy of the region at bus address
/// `base`), in order: what a WRITE or SEND of `sg` carries.
pub fn gather_ref(mem: &[u8], base: u64, sg: &[Sge]) -> Vec<u8> {
    let mut v = Vec::new();
    for s in sg {
        let o = (s.addr - base) as usize;
        v.extend_from_slice(&mem[o..o + s.length as usize]);
    }
    v
}
