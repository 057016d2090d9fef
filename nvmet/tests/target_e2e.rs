//! The whole NVMe/RDMA target against the model: the real command layer
//! (`ctrl::Target`) behind the real transport (`rdma::Transport`) on device
//! B; on device A an NVMe host built from the project's own driver
//! (`tests/host`: a CM with the NVMe/RDMA private data, an RC QP per queue,
//! 16-B response receives). The host plays the Linux 6.1 host's sequences
//! of spec `nvme-rdma-target.md` §5.1 (bring-up), §7 (I/O), §8 (teardown)
//! and §6 (discovery), byte by byte on the model's wire; the CM MADs travel
//! over the in-memory QP1 of `tests/cm_common`.
//!
//! Capsules: SQEs from the spec's offsets (`fake`'s builders), SGL
//! descriptors from the crate's own encoders (`wire::keyed_sgl`,
//! `wire::incapsule_sgl`); every expectation is a number from the spec.
//! The host's 0x4F descriptors name a fast-register MR re-registered under
//! a new key per command, as the 6.1 host's FRWR path does (spec §2.3).

#[path = "../../tests/cm_common/mod.rs"]
mod cm_common;
#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "../../tests/e2e_common/mod.rs"]
mod e2e_common;
mod fake;
mod host;

use e2e_common::*;
use fake::{DISC, HOSTNQN, Rsp, SUBNQN, connect_data, connect_sqe, get16, get32, get64};
use fake::{put16, put32, put64};
use host::*;
use irdma_nvmet::ctrl::{Target, TrAddr};
use irdma_nvmet::wire::{incapsule_sgl, keyed_sgl};
use irdma_nvmet::{Keyed, RamDisk};

/// Queues of the transport (an admin and four I/O queues, one spare).
const Q: usize = 6;
/// Command slots per queue: the admin depth (spec §1.4: 32).
const D: usize = 32;
/// CM connections: twice the queues, so that a host can connect a new
/// association while the old one's connections sit in timewait (a REQ that
/// finds the table full is dropped until the host retransmits it).
const C: usize = 2 * Q;
/// The namespace: 4 MiB (8192 LBAs of 512 B).
const DISK_PAGES: usize = 1024;
const NSZE: u64 = (DISK_PAGES * 4096 / 512) as u64;
/// The 6.1 host's KATO for an I/O controller (spec §4.1: 5000 ms).
const KATO: u32 = 5000;
/// I/O queues the target grants (Set Features 07h).
const IO_QUEUES: u16 = 4;
/// In-capsule bytes (nvmet's default PAGE_SIZE: IOCCSZ 260, spec §1.4).
const INLINE: u32 = 4096;
/// MDTS 8: 2^8 × 4 KiB (spec §3).
const MDTS_BYTES: usize = 1 << 20;

type Cmds<'d> = Target<'d, Q, 4>;

/// CC values of the 6.1 host with CSS 0 (spec §4.2).
const CC_CONFIGURE: u32 = 0x0046_0000;
const CC_ENABLE: u32 = 0x0046_0001;
const CC_SHUTDOWN: u32 = 0x0046_4001;

/// An SQE as the 6.1 host builds it (FLAGS 0x40, null keyed SGL).
fn sqe(opc: u8, cid: u16, nsid: u32) -> [u8; 64] {
    fake::sqe(opc, cid, nsid)
}

/// `s` with SGL1 (bytes 24..40) replaced by `d`.
fn with_sgl(mut s: [u8; 64], d: [u8; 16]) -> [u8; 64] {
    s[24..40].copy_from_slice(&d);
    s
}

/// A Fabrics command: 0x7F, FCTYPE @4 (spec §2.1).
fn fabrics(fctype: u8, cid: u16) -> [u8; 64] {
    let mut s = sqe(0x7F, cid, 0);
    s[4] = fctype;
    s
}

/// An NVM Read / Write / Write Zeroes SQE: NSID 1, SLBA @40, NLB (0's
/// based) @48 (spec §7).
fn rw(opc: u8, cid: u16, slba: u64, blocks: u32) -> [u8; 64] {
    let mut s = sqe(opc, cid, 1);
    put64(&mut s, 40, slba);
    put16(&mut s, 48, (blocks - 1) as u16);
    s
}

/// A keyed 0x40 descriptor over `len` bytes of `r` from `off`.
fn keyed(r: &Region<'_>, off: usize, len: usize) -> [u8; 16] {
    let addr = r.addr() + off as u64;
    keyed_sgl(Keyed { addr, len: len as u32, key: r.mr.rkey(), invalidate: false })
}

/// The data of `blocks` LBAs from `slba`: each 512-B block its own pattern.
fn lba_data(slba: u64, blocks: usize) -> Vec<u8> {
    (0..blocks as u64)
        .flat_map(|b| pattern(((slba + b) as u16).wrapping_mul(0x9E37) ^ 0x5A, 512))
        .collect()
}

/// (SCT, SC, DNR) of a response.
type Sts = (u8, u8, bool);

fn status(r: &Rsp) -> Sts {
    r.sct_sc_dnr()
}

/// A fast-register MR as the 6.1 host uses one per command (spec §2.3:
/// 0x4F descriptor, FRWR over 4 KiB pages, the key bumped per use).
struct Fr<'d> {
    fr: TFr<'d>,
    mem: Buf,
    iova: u64,
    key: u32,
}

impl<'d> Fr<'d> {
    fn new(q: &HostQ<'d>, pages: usize, iova: u64) -> Self {
        let mem = buf(pages);
        let fr = q.side.dev.alloc_mr(&q.side.pd, pages as u32).expect("alloc_mr");
        Fr { fr, mem, iova, key: 0 }
    }

    /// Registers the MR under its next key (REG_MR on `q`'s send queue,
    /// ahead of the capsule) and returns the 0x4F descriptor of `len`
    /// bytes; the memory is first filled with 0xEE.
    fn arm(&mut self, q: &mut HostQ<'_>, len: u32) -> [u8; 16] {
        assert!(self.mem.write_bytes(0, &vec![0xEE; self.mem.len()]));
        // A map arms one REG_MR (`ib_map_mr_sg` per command).
        map_pages(&self.fr, &pages_of(&self.mem));
        self.key = self.fr.next_key();
        let reg = fr_reg(&self.fr, self.key, ALL, (self.iova, self.mem.len() as u64));
        q.side.qp.post_send(&[signaled(77, WrOpcode::RegMr(reg), &[])]).unwrap();
        keyed_sgl(Keyed { addr: self.iova, len, key: self.key, invalidate: true })
    }
}

/// The target (both layers) and the host's CM.
struct Nvme<'d> {
    t: Tp<'d, Q, D, C>,
    tg: Cmds<'d>,
    host: Host,
    cid: u16,
}

/// One association as the host holds it: the FR for admin data, the I/O
/// queues and the admin queue (dropped in that order).
struct Assoc<'d> {
    fr: Fr<'d>,
    io: Vec<HostQ<'d>>,
    admin: HostQ<'d>,
    cntlid: u16,
    /// Identify Controller as the host read it.
    id: Vec<u8>,
}

impl<'d> Assoc<'d> {
    /// Every host queue, I/O queues first.
    fn all(&mut self) -> Vec<&mut HostQ<'d>> {
        let mut v: Vec<&mut HostQ<'d>> = self.io.iter_mut().collect();
        v.push(&mut self.admin);
        v
    }
}

/// Runs `f` with the model devices and the whole target on device B:
/// the transport over one handle of the namespace memory, the command
/// layer over another (both reach it only through atomics or DMA: the
/// `RamDisk` docs).
fn with_target(f: impl FnOnce(&Env, &mut Nvme<'_>)) {
    let _g = lock();
    let e = env(DISK_PAGES);
    let disk = e.disk();
    let mut cfg = fake::config(&disk, INLINE, IO_QUEUES);
    cfg.traddr = TrAddr::V4(B.ip);
    let mut n = Nvme::new(&e, &disk, Target::new(cfg).expect("target"));
    f(&e, &mut n);
}

impl<'d> Nvme<'d> {
    fn new(e: &'d Env, disk: &'d RamDisk, tg: Cmds<'d>) -> Self {
        Nvme { t: e.target::<Q, D, C>(disk), tg, host: e.host(), cid: 0x100 }
    }

    fn pump(&mut self, qs: &mut [&mut HostQ<'_>]) {
        run(&mut self.t, &mut self.tg, &mut self.host, qs);
    }

    fn next_cid(&mut self) -> u16 {
        self.cid = self.cid.wrapping_add(1);
        self.cid
    }

    /// Posts a capsule (SQE + in-capsule data) without running.
    fn post(q: &mut HostQ<'_>, capsule: &[u8]) {
        match <&[u8; 64]>::try_from(capsule) {
            Ok(s) => q.send(s),
            Err(_) => q.send_raw(capsule),
        }
    }

    /// The responses `q` received since the last call.
    fn responses(q: &mut HostQ<'_>) -> Vec<Rsp> {
        q.take_responses().iter().map(|(c, inv)| Rsp::of(c, *inv)).collect()
    }

    /// Sends one capsule on `q`, runs both sides, returns its response.
    fn exec(&mut self, q: &mut HostQ<'_>, capsule: &[u8]) -> Rsp {
        Self::post(q, capsule);
        self.pump(&mut [&mut *q]);
        let r = Self::responses(q);
        assert_eq!(r.len(), 1, "one response: {r:?}");
        assert_eq!(r[0].cid, u16::from_le_bytes([capsule[2], capsule[3]]), "CID echoed");
        r[0]
    }

    fn prop_get(&mut self, q: &mut HostQ<'_>, ofst: u32, eight: bool) -> Rsp {
        // spec §4.2: ATTRIB @40 (1 = 8 bytes), OFST @44.
        let mut s = fabrics(0x04, self.next_cid());
        s[40] = eight as u8;
        put32(&mut s, 44, ofst);
        self.exec(q, &s)
    }

    fn prop_set(&mut self, q: &mut HostQ<'_>, ofst: u32, v: u32) -> Rsp {
        // spec §4.2: OFST @44, VALUE @48.
        let mut s = fabrics(0x00, self.next_cid());
        put32(&mut s, 44, ofst);
        put64(&mut s, 48, u64::from(v));
        self.exec(q, &s)
    }

    /// A command with `len` bytes target → host through a 0x4F
    /// descriptor: the response must be a SEND_WITH_INVALIDATE naming
    /// exactly that key (spec §2.4), seen in the host's receive completion.
    fn admin_in(&mut self, a: &mut Assoc<'_>, s: [u8; 64], len: u32) -> (Rsp, Vec<u8>) {
        let d = a.fr.arm(&mut a.admin, len);
        let r = self.exec(&mut a.admin, &with_sgl(s, d));
        assert_eq!(r.invalidate, Some(a.fr.key), "SEND_WITH_INV names the 0x4F key");
        (r, read(&a.fr.mem, 0, len as usize))
    }

    /// Identify (opc 06h, CNS @40, 4096 B; spec §5.2–§5.4).
    fn identify(&mut self, a: &mut Assoc<'_>, cns: u8, nsid: u32) -> (Rsp, Vec<u8>) {
        let mut s = sqe(0x06, self.next_cid(), nsid);
        s[40] = cns;
        self.admin_in(a, s, 4096)
    }

    /// Get Log Page (opc 02h): LID @40, RAE = byte 41 bit 7, NUMDL @42,
    /// NUMDU @44, LPO @48 (spec §5.5).
    fn log(&mut self, a: &mut Assoc<'_>, lid: u8, nsid: u32, len: u32, lpo: u64) -> (Rsp, Vec<u8>) {
        let mut s = sqe(0x02, self.next_cid(), nsid);
        s[40] = lid;
        s[41] = 0x80;
        let numd = len / 4 - 1;
        put16(&mut s, 42, numd as u16);
        put16(&mut s, 44, (numd >> 16) as u16);
        put64(&mut s, 48, lpo);
        self.admin_in(a, s, len)
    }

    /// Set Features: FID @40, CDW11 @44 (spec §5.5).
    fn set_features(&mut self, q: &mut HostQ<'_>, fid: u8, v: u32) -> Rsp {
        let mut s = sqe(0x09, self.next_cid(), 0);
        s[40] = fid;
        put32(&mut s, 44, v);
        self.exec(q, &s)
    }

    fn keep_alive(&mut self, q: &mut HostQ<'_>) -> Rsp {
        let s = sqe(0x18, self.next_cid(), 0);
        self.exec(q, &s)
    }

    /// The admin queue connected (RDMA-CM QID 0, HRQSIZE 32, HSQSIZE 31)
    /// and its Connect, data through a 0x4F keyed SGL (spec §5.1 steps
    /// 1–2): returns the association with the Connect's response.
    fn connect_admin<'h>(&mut self, e: &'h Env, subnqn: &str, kato: u32) -> (Assoc<'h>, Rsp) {
        let mut admin = HostQ::new(&e.da, 32);
        open(&mut self.t, &mut self.tg, &mut self.host, &mut admin, 0);
        let mut fr = Fr::new(&admin, 1, 0x7710_0000);
        let reads = self.t.stats().reads;
        let d = fr.arm(&mut admin, 1024);
        assert!(fr.mem.write_bytes(0, &connect_data(0xFFFF, subnqn, HOSTNQN)));
        let s = with_sgl(connect_sqe(self.next_cid(), 0, 31, kato), d);
        let r = self.exec(&mut admin, &s);
        assert_eq!(r.invalidate, Some(fr.key), "the Connect's 0x4F key invalidated");
        assert_eq!(self.t.stats().reads, reads + 1, "the target RDMA-READ the Connect data");
        let a = Assoc { fr, io: Vec::new(), admin, cntlid: r.dw0 as u16, id: Vec::new() };
        (a, r)
    }

    /// The 6.1 host's enable (spec §5.1 steps 3–4): Get CAP, Set CC
    /// (EN 0), Get CC, Get CAP, Set CC.EN, Get CSTS until RDY, Get VS.
    fn enable(&mut self, q: &mut HostQ<'_>) {
        let cap = |r: Rsp| u64::from(r.dw0) | u64::from(r.dw1) << 32;
        // spec §4.2: the minimal target's CAP (MQES 127, TO 15, CSS NVM).
        assert_eq!(cap(self.prop_get(q, 0x00, true)), 0x0000_0020_0F00_007F);
        assert!(self.prop_set(q, 0x14, CC_CONFIGURE).ok());
        assert_eq!(self.prop_get(q, 0x14, false).dw0, CC_CONFIGURE);
        assert_eq!(cap(self.prop_get(q, 0x00, true)), 0x0000_0020_0F00_007F);
        assert!(self.prop_set(q, 0x14, CC_ENABLE).ok());
        let mut csts = 0;
        for _ in 0..8 {
            csts = self.prop_get(q, 0x1C, false).dw0;
            if csts & 1 == 1 {
                break;
            }
        }
        assert_eq!(csts & 0x3, 1, "CSTS.RDY, no CFS");
        assert_eq!(self.prop_get(q, 0x08, false).dw0, 0x0001_0300, "VS 1.3");
    }

    /// I/O queue `qid`: RDMA-CM connect (32/31) and its Connect with the
    /// 1024-B data in-capsule (SGL 0x01, spec §5.1 step 11).
    fn connect_io<'h>(&mut self, e: &'h Env, cntlid: u16, qid: u16) -> HostQ<'h> {
        let mut q = HostQ::new(&e.da, 32);
        open(&mut self.t, &mut self.tg, &mut self.host, &mut q, qid);
        let s = with_sgl(connect_sqe(self.next_cid(), qid, 31, 0), incapsule_sgl(0, 1024));
        let mut cap = s.to_vec();
        cap.extend(connect_data(cntlid, SUBNQN, HOSTNQN));
        let r = self.exec(&mut q, &cap);
        assert!(r.ok(), "I/O Connect QID {qid}: {r:?}");
        assert_eq!(r.dw0, u32::from(cntlid), "DW0 = CNTLID");
        assert_eq!(r.invalidate, None, "in-capsule: nothing to invalidate");
        q
    }

    /// The Linux 6.1 host's whole bring-up (spec §5.1 steps 1–13), every
    /// answer checked against the spec's numbers.
    fn bring_up<'h>(&mut self, e: &'h Env) -> Assoc<'h> {
        // 1–2: admin queue and Connect (CNTLID 0xFFFF, KATO 5000).
        let (mut a, r) = self.connect_admin(e, SUBNQN, KATO);
        assert!(r.ok(), "admin Connect: {r:?}");
        assert!((1..=0xFFEF).contains(&r.dw0), "DW0 15:0 CNTLID, no auth bits: {r:?}");
        assert_eq!(r.dw1, 0);
        // 3–4.
        self.enable(&mut a.admin);
        // 5: Identify Controller.
        let (r, id) = self.identify(&mut a, 0x01, 0);
        assert!(r.ok(), "{r:?}");
        assert_eq!(get16(&id, 78), a.cntlid, "CNTLID = the Connect's");
        assert_eq!(id[77], 8, "MDTS 8");
        assert_eq!(get32(&id, 80), 0x0001_0300, "VER");
        assert_eq!(id[111], 1, "CNTRLTYPE I/O");
        assert_eq!(id[76] & 0x08, 0, "CMIC: no ANA");
        // 6: LPA bit 1 clear → no log 05h.
        assert_eq!(id[261] & 0x02, 0, "LPA");
        // 7: the host's checks.
        assert_ne!(get16(&id, 320), 0, "KAS");
        assert_eq!(get16(&id, 1800), 0, "ICDOFF");
        let sgls = get32(&id, 536);
        assert_ne!(sgls & (1 << 2), 0, "SGLS keyed");
        assert_ne!(sgls & (1 << 20), 0, "SGLS in-capsule");
        assert!(get16(&id, 514) >= 32, "MAXCMD ≥ the depth");
        assert_eq!((id[512], id[513]), (0x66, 0x44), "SQES / CQES");
        let subnqn = &id[768..768 + SUBNQN.len()];
        assert_eq!((subnqn, id[768 + SUBNQN.len()]), (SUBNQN.as_bytes(), 0));
        let ioccsz = get32(&id, 1792);
        assert_eq!(ioccsz, (64 + INLINE) / 16, "IOCCSZ");
        assert!(ioccsz * 16 - 64 >= 1024, "room for the I/O Connect in-capsule");
        // 9: SMART log (512 B, NSID 0xFFFFFFFF).
        let (r, _) = self.log(&mut a, 0x02, 0xFFFF_FFFF, 512, 0);
        assert!(r.ok(), "SMART log: {r:?}");
        // 10: four I/O queues asked (0's based 3/3), four granted.
        let r = self.set_features(&mut a.admin, 0x07, 3 << 16 | 3);
        assert!(r.ok());
        assert_eq!(r.dw0, 3 << 16 | 3, "NSQA / NCQA");
        // 11: the I/O queues.
        for qid in 1..=IO_QUEUES {
            let q = self.connect_io(e, a.cntlid, qid);
            a.io.push(q);
        }
        // 12: OAES bit 8 → Set Features 0Bh, then one AER (CID 31), held.
        let oaes = get32(&id, 92);
        assert_eq!(oaes, 1 << 8, "OAES: namespace attribute notices");
        assert!(self.set_features(&mut a.admin, 0x0B, oaes).ok());
        Self::post(&mut a.admin, &sqe(0x0C, 31, 0));
        self.pump(&mut [&mut a.admin]);
        assert!(Self::responses(&mut a.admin).is_empty(), "the AER is held");
        // 13: the scan.
        let (r, list) = self.identify(&mut a, 0x02, 0);
        assert!(r.ok());
        assert_eq!((get32(&list, 0), get32(&list, 4)), (1, 0), "active NSIDs: 1");
        let (r, _) = self.identify(&mut a, 0x03, 1);
        assert!(r.ok(), "CNS 03h must succeed (VS 1.3): {r:?}");
        let (r, ns) = self.identify(&mut a, 0x00, 1);
        assert!(r.ok());
        assert_eq!((get64(&ns, 0), get64(&ns, 8), get64(&ns, 16)), (NSZE, NSZE, NSZE));
        assert_eq!((ns[26], ns[130]), (0, 9), "FLBAS 0, LBAF0 LBADS 9");
        assert!(self.keep_alive(&mut a.admin).ok());
        a.id = id;
        a
    }

    /// Keyed writes of (queue, SLBA, blocks), all posted before one run;
    /// each from its own place in its queue's region (`at`).
    fn writes(
        &mut self,
        a: &mut Assoc<'_>,
        regs: &[Region<'_>],
        io: &[(usize, u64, usize, usize)],
    ) {
        self.transfer(a, regs, io, 0x01);
    }

    fn reads(&mut self, a: &mut Assoc<'_>, regs: &[Region<'_>], io: &[(usize, u64, usize, usize)]) {
        self.transfer(a, regs, io, 0x02);
    }

    fn transfer(
        &mut self,
        a: &mut Assoc<'_>,
        regs: &[Region<'_>],
        io: &[(usize, u64, usize, usize)],
        opc: u8,
    ) {
        let mut want: Vec<Vec<u16>> = vec![Vec::new(); a.io.len()];
        for &(qi, slba, blocks, at) in io {
            let len = blocks * 512;
            if opc == 0x01 {
                regs[qi].put(at, &lba_data(slba, blocks));
            } else {
                regs[qi].put(at, &vec![0xEE; len]);
            }
            let cid = self.next_cid();
            let s = with_sgl(rw(opc, cid, slba, blocks as u32), keyed(&regs[qi], at, len));
            Self::post(&mut a.io[qi], &s);
            want[qi].push(cid);
        }
        let mut qs: Vec<&mut HostQ<'_>> = a.io.iter_mut().collect();
        self.pump(&mut qs);
        for (qi, q) in a.io.iter_mut().enumerate() {
            let r = Self::responses(q);
            assert!(r.iter().all(|r| r.ok() && r.invalidate.is_none()), "queue {qi}: {r:?}");
            let mut got: Vec<u16> = r.iter().map(|r| r.cid).collect();
            got.sort();
            want[qi].sort();
            assert_eq!(got, want[qi], "queue {qi}: every command answered once");
        }
        if opc == 0x02 {
            for &(qi, slba, blocks, at) in io {
                same(&regs[qi].bytes(at, blocks * 512), &lba_data(slba, blocks), "read back");
            }
        }
    }
}

/// The whole namespace as the target holds it.
fn disk_image(disk: &RamDisk) -> Vec<u8> {
    let mut v = vec![0u8; disk.len() as usize];
    assert!(disk.read(0, &mut v));
    v
}

/// §5.1 steps 1–13 over the wire, then a namespace-change notice completes
/// the held AER.
#[test]
fn linux_6_1_bring_up_over_the_wire() {
    with_target(|e, n| {
        let mut a = n.bring_up(e);
        let s = n.t.stats();
        assert_eq!(n.t.open_queues(), 5);
        assert_eq!((n.tg.controllers(), n.tg.queues()), (1, 5));
        // Keyed data: the admin Connect (READ); Identify ×4 and the SMART log
        // (WRITE); each of those six answered with SEND_WITH_INVALIDATE.
        assert_eq!((s.reads, s.writes, s.send_inv), (1, 5, 6), "{s:?}");
        assert_eq!((s.wr_errors, s.fatal, s.stray, s.rejected), (0, 0, 0, 0), "{s:?}");
        // On the wire, an Identify: the target's RDMA WRITEs (RETH naming the
        // host's key and iova) then one SEND ONLY WITH INVALIDATE (RC opcode
        // 0x17) whose IETH is that key (spec §2.4, §9).
        let frames = e.bb.fabric().capture();
        let (r, id) = n.identify(&mut a, 0x01, 0);
        assert!(r.ok());
        assert_eq!(id, a.id, "Identify is stable");
        let ours: Vec<_> = frames
            .frames()
            .iter()
            .filter_map(|f| mock_bar::wire::parse(f).ok())
            .filter(|p| p.src_mac == B.mac && p.pkt.opcode != 0x11)
            .map(|p| p.pkt)
            .collect();
        let ops: Vec<u8> = ours.iter().map(|p| p.opcode).collect();
        // 4096 B at path MTU 1024: WRITE FIRST, MIDDLE ×2, LAST, then the SEND.
        assert_eq!(ops, [0x06, 0x07, 0x07, 0x08, 0x17], "{ops:x?}");
        assert_eq!(ours[0].reth, Some((a.fr.iova, a.fr.key, 4096)), "RETH: iova, rkey, length");
        assert_eq!(ours[4].ieth, Some(a.fr.key), "IETH: the 0x4F key");
        assert_eq!(ours[4].payload.len(), 16, "a 16-B response capsule");
        // The firmware changes the namespace: the held AER (CID 31) completes
        // with type 2 / info 0 / log 04h (spec §5.5).
        n.tg.notify_ns_changed();
        n.pump(&mut a.all());
        let r = Nvme::responses(&mut a.admin);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].cid, r[0].status, r[0].dw0), (31, 0, 0x0004_0002));
        drop(a);
    });
}

/// Keyed Writes and Reads of several sizes up to MDTS at several LBAs over
/// the four I/O queues, several outstanding at once; in-capsule writes,
/// Write Zeroes, Flush; the namespace holds exactly the written bytes.
#[test]
fn data_up_to_mdts_over_four_queues() {
    with_target(|e, n| {
        let mut a = n.bring_up(e);
        let mut shadow = disk_image(n.tg.disk());
        // Queue 0 moves 1 MiB each way; the others up to 128 KiB (reading
        // back 192 KiB above where they wrote).
        let regs: Vec<Region<'_>> =
            a.io.iter()
                .enumerate()
                .map(|(i, q)| q.side.region(if i == 0 { 2 * MDTS_BYTES / 4096 } else { 96 }, 0))
                .collect();
        // (queue, SLBA, blocks, offset in the queue's region)
        let io: &[(usize, u64, usize, usize)] = &[
            (0, 8, MDTS_BYTES / 512, 0),
            (1, 3000, 1, 0),
            (1, 3010, 8, 4096),
            (1, 3100, 64, 65536),
            (2, 4000, 256, 0),
            (3, 5001, 3, 0),
            (3, 5100, 17, 8192),
            (3, NSZE - 1, 1, 65536),
            (3, NSZE - 40, 40, 131072),
        ];
        n.writes(&mut a, &regs, io);
        for &(_, slba, blocks, _) in io {
            let o = slba as usize * 512;
            shadow[o..o + blocks * 512].copy_from_slice(&lba_data(slba, blocks));
        }
        same(&disk_image(n.tg.disk()), &shadow, "the namespace after the keyed writes");
        // Read back into the other half / other places of the regions.
        let back: Vec<(usize, u64, usize, usize)> = io
            .iter()
            .map(|&(q, s, b, at)| (q, s, b, if q == 0 { MDTS_BYTES } else { at + 192 * 1024 }))
            .collect();
        n.reads(&mut a, &regs, &back);
        // In-capsule writes (SGL 0x01, ≤ IOCCSZ × 16 − 64 bytes), one by one.
        for (qi, slba, blocks) in [(1usize, 6000u64, 8usize), (2, 6100, 1), (1, 6200, 3)] {
            let cid = n.next_cid();
            let data = lba_data(slba, blocks);
            let s =
                with_sgl(rw(0x01, cid, slba, blocks as u32), incapsule_sgl(0, data.len() as u32));
            let mut cap = s.to_vec();
            cap.extend(&data);
            let r = n.exec(&mut a.io[qi], &cap);
            assert!(r.ok(), "{r:?}");
            shadow[slba as usize * 512..][..data.len()].copy_from_slice(&data);
        }
        n.reads(&mut a, &regs, &[(3, 6000, 8, 0), (2, 6100, 1, 0), (1, 6200, 3, 0)]);
        // Write Zeroes (null SGL) over part of queue 2's write, then Flush.
        let r = n.exec(&mut a.io[2], &rw(0x08, 0x3333, 4010, 10));
        assert!(r.ok(), "{r:?}");
        shadow[4010 * 512..4020 * 512].fill(0);
        let r = n.exec(&mut a.io[3], &sqe(0x00, 0x3334, 1));
        assert!(r.ok(), "Flush: {r:?}");
        same(&disk_image(n.tg.disk()), &shadow, "the namespace: exactly the bytes written");
        regs[0].put(0, &vec![0xEE; 8192]);
        let cid = n.next_cid();
        let r = n.exec(&mut a.io[0], &with_sgl(rw(0x02, cid, 4008, 14), keyed(&regs[0], 0, 7168)));
        assert!(r.ok());
        same(&regs[0].bytes(0, 7168), &shadow[4008 * 512..4022 * 512], "zeroes read back");
        // Every queue full (HSQSIZE + 1 = 32 outstanding): 16 keyed writes of
        // 8 KiB, then 16 reads of them plus 16 of the earlier data, 128 at once.
        let full: Vec<(usize, u64, usize, usize)> = (0..4)
            .flat_map(|q| (0..16).map(move |i| (q, 6400 + (q * 16 + i) as u64 * 16, 16, i * 8192)))
            .collect();
        n.writes(&mut a, &regs, &full);
        let mut both: Vec<(usize, u64, usize, usize)> =
            full.iter().map(|&(q, slba, b, at)| (q, slba, b, at + 16 * 8192)).collect();
        both.extend((0..4).flat_map(|q| {
            (0..16).map(move |i| (q, 6400 + ((q + 1) % 4 * 16 + i) as u64 * 16, 16, i * 8192))
        }));
        n.reads(&mut a, &regs, &both);
        for &(_, slba, blocks, _) in &full {
            shadow[slba as usize * 512..][..blocks * 512].copy_from_slice(&lba_data(slba, blocks));
        }
        same(&disk_image(n.tg.disk()), &shadow, "the namespace after the full queues");
        let s = n.t.stats();
        assert_eq!((s.wr_errors, s.fatal, s.stray), (0, 0, 0), "{s:?}");
        drop(regs);
        drop(a);
    });
}

/// Errors as the host sees them in the CQE, each followed by a command that
/// succeeds on the same queue.
#[test]
fn errors_in_the_cqe_and_the_queue_stays_usable() {
    with_target(|e, n| {
        let mut a = n.bring_up(e);
        let data = a.io[0].side.region(2, 0);
        let good = |n: &mut Nvme<'_>, q: &mut HostQ<'_>| {
            let cid = n.next_cid();
            let r = n.exec(q, &with_sgl(rw(0x02, cid, 7, 1), keyed(&data, 0, 512)));
            assert!(r.ok(), "the queue still works: {r:?}");
        };
        let q = &mut a.io[0];
        let cases: Vec<(&str, Vec<u8>, Sts)> = vec![
            // spec §7: an opcode no command set defines → Invalid Opcode, DNR.
            ("unknown opcode", sqe(0x7C, 0x501, 1).to_vec(), (0, 0x01, true)),
            // SLBA + NLB > NSZE → LBA Out of Range (0x80).
            (
                "LBA out of range",
                with_sgl(rw(0x02, 0x502, NSZE - 1, 2), keyed(&data, 0, 1024)).to_vec(),
                (0, 0x80, true),
            ),
            (
                "SLBA = NSZE",
                with_sgl(rw(0x01, 0x503, NSZE, 1), keyed(&data, 0, 512)).to_vec(),
                (0, 0x80, true),
            ),
            // SGL length ≠ (NLB + 1) << LBADS → Data SGL Length Invalid (0x0F).
            (
                "SGL length",
                with_sgl(rw(0x01, 0x504, 0, 1), keyed(&data, 0, 1024)).to_vec(),
                (0, 0x0F, true),
            ),
            // Descriptor type 2 (Segment) → SGL Descriptor Type Invalid (0x11).
            (
                "SGL type",
                {
                    let mut s = with_sgl(rw(0x02, 0x505, 0, 1), keyed(&data, 0, 512));
                    s[39] = 0x20;
                    s.to_vec()
                },
                (0, 0x11, true),
            ),
            // A 40-byte capsule: Invalid Field, its CID echoed.
            ("40-byte capsule", sqe(0x02, 0x506, 1)[..40].to_vec(), (0, 0x02, true)),
            // In-capsule data past the in-capsule size (offset 3840 + 512 >
            // 4096) → SGL Offset Invalid (0x16).
            (
                "in-capsule offset",
                {
                    let s = with_sgl(rw(0x01, 0x509, 0, 1), incapsule_sgl(3840, 512));
                    let mut c = s.to_vec();
                    c.extend(vec![0xAB; 4096]);
                    c
                },
                (0, 0x16, true),
            ),
            // More than MDTS (1 MiB + 512 B) → Invalid Field.
            (
                "above MDTS",
                with_sgl(rw(0x02, 0x50A, 0, 2049), keyed(&data, 0, 2049 * 512)).to_vec(),
                (0, 0x02, true),
            ),
            // A Connect for a queue that is connected → Command Sequence Error.
            (
                "second Connect",
                {
                    let s = with_sgl(connect_sqe(0x507, 1, 31, 0), incapsule_sgl(0, 1024));
                    let mut c = s.to_vec();
                    c.extend(connect_data(a.cntlid, SUBNQN, HOSTNQN));
                    c
                },
                (0, 0x0C, true),
            ),
        ];
        for (what, capsule, want) in cases {
            let r = n.exec(q, &capsule);
            assert_eq!(status(&r), want, "{what}: {r:?}");
            assert_eq!(r.sqid, 1, "{what}: SQID");
            good(n, q);
        }
        // An admin command before CC.EN: a second association's admin queue.
        let (mut b, r) = n.connect_admin(e, SUBNQN, KATO);
        assert!(r.ok());
        assert_ne!(b.cntlid, a.cntlid, "a new controller");
        let mut s = sqe(0x06, 0x508, 0);
        s[40] = 1;
        let d = b.fr.arm(&mut b.admin, 4096);
        let r = n.exec(&mut b.admin, &with_sgl(s, d));
        assert_eq!(status(&r), (0, 0x0C, true), "Identify before CC.EN: {r:?}");
        assert_eq!(r.invalidate, None, "refused before its SGL was looked at");
        // A response without the invalidation: the host invalidates the key
        // itself (spec §2.4).
        let inv = WrOpcode::LocalInv { inv_key: b.fr.key };
        b.admin.side.qp.post_send(&[signaled(78, inv, &[])]).unwrap();
        n.enable(&mut b.admin);
        let (r, _) = n.identify(&mut b, 0x01, 0);
        assert!(r.ok(), "after CC.EN: {r:?}");
        let s = n.t.stats();
        assert_eq!((s.wr_errors, s.fatal, s.stray, s.closed), (0, 0, 0, 0), "{s:?}");
        assert_eq!(n.t.open_queues(), 6);
        drop(b);
        drop(data);
        drop(a);
    });
}

/// The host's DREQ of the admin queue, keep-alive expiry, and CC.SHN: the
/// controller goes, every resource comes back, a new association works at
/// once and finds the data written before.
#[test]
fn teardown_and_reconnect() {
    with_target(|e, n| {
        let before = resources(&e.bb);
        let pages = FakeHal::live_pages();
        let want = lba_data(100, 128);
        for round in 0..2 {
            let mut a = n.bring_up(e);
            assert_eq!(resources(&e.bb).0, before.0 + 5, "a QP per queue");
            let r = a.io[1].side.region(16, 0);
            if round == 0 {
                let cid = n.next_cid();
                r.put(0, &want);
                let rsp =
                    n.exec(&mut a.io[1], &with_sgl(rw(0x01, cid, 100, 128), keyed(&r, 0, 65536)));
                assert!(rsp.ok());
            } else {
                // The data written by the previous association is still there.
                r.put(0, &vec![0xEE; 65536]);
                let cid = n.next_cid();
                let rsp =
                    n.exec(&mut a.io[1], &with_sgl(rw(0x02, cid, 100, 128), keyed(&r, 0, 65536)));
                assert!(rsp.ok());
                same(&r.bytes(0, 65536), &want, "data across associations");
            }
            drop(r);
            match round {
                0 => {
                    // The host DREQs the admin queue (nvme disconnect without
                    // the shutdown): the target disconnects every I/O queue.
                    a.admin.side.qp.modify(&QpAttr::new(QpState::Error)).unwrap();
                    let id = a.admin.conn.unwrap();
                    n.host.cm.disconnect(n.host.now, id, &mut n.host.port).unwrap();
                }
                _ => {
                    // Keep Alives every 3 s keep the controller past KATO...
                    for _ in 0..3 {
                        n.host.now += 3000;
                        assert!(n.keep_alive(&mut a.admin).ok());
                    }
                    n.pump(&mut a.all());
                    assert_eq!(n.tg.controllers(), 1, "kept alive");
                    // ...none for longer than KATO expires it.
                    n.host.now += u64::from(KATO) + 1;
                }
            }
            n.pump(&mut a.all());
            for (i, q) in a.io.iter().enumerate() {
                assert_eq!(q.dreqs, 1, "round {round}: I/O queue {i} got the target's DREQ");
            }
            if round == 1 {
                assert_eq!(a.admin.dreqs, 1, "keep-alive expiry disconnects the admin queue too");
            }
            let s = n.t.stats();
            assert_eq!(s.closed, 5 * (round + 1), "{s:?}");
            assert_eq!(s.wrs_posted, s.wrs_completed, "every WR completed: {s:?}");
            assert_eq!((s.wr_errors, s.fatal, s.stray), (0, 0, 0), "{s:?}");
            assert_eq!((n.t.open_queues(), n.tg.controllers(), n.tg.queues()), (0, 0, 0));
            assert_eq!(resources(&e.bb), before, "round {round}: QPs, CQs, STags back");
            drop(a);
            assert_eq!(FakeHal::live_pages(), pages, "round {round}: no DMA page kept");
        }
        // The orderly shutdown (spec §8): I/O queues disconnected by the host
        // first (the controller stays), then CC.SHN → SHST complete, then the
        // admin queue.
        let mut a = n.bring_up(e);
        for q in a.io.iter_mut() {
            q.side.qp.modify(&QpAttr::new(QpState::Error)).unwrap();
            n.host.cm.disconnect(n.host.now, q.conn.unwrap(), &mut n.host.port).unwrap();
        }
        n.pump(&mut a.all());
        assert_eq!((n.t.open_queues(), n.tg.controllers()), (1, 1), "only the I/O queues went");
        assert!(n.prop_set(&mut a.admin, 0x14, CC_SHUTDOWN).ok());
        let csts = n.prop_get(&mut a.admin, 0x1C, false).dw0;
        assert_eq!((csts >> 2) & 3, 0b10, "SHST: shutdown complete");
        assert_eq!(csts & 1, 0, "RDY cleared");
        a.admin.side.qp.modify(&QpAttr::new(QpState::Error)).unwrap();
        n.host.cm.disconnect(n.host.now, a.admin.conn.unwrap(), &mut n.host.port).unwrap();
        n.pump(&mut a.all());
        assert_eq!((n.t.open_queues(), n.tg.controllers(), n.tg.queues()), (0, 0, 0));
        assert_eq!(resources(&e.bb), before);
        drop(a);
        assert_eq!(FakeHal::live_pages(), pages);
    });
}

/// A transfer that fails on an I/O queue (the host's RDMA READ responder
/// refuses the key) is fatal for the whole controller (spec §3 "Errors":
/// nvmet's `nvmet_rdma_error_comp` → `nvmet_ctrl_fatal_error`): every
/// queue of it is disconnected, every resource comes back, and the host's
/// new association finds the data.
#[test]
fn a_failed_transfer_deletes_the_controller() {
    with_target(|e, n| {
        let before = resources(&e.bb);
        let mut a = n.bring_up(e);
        let r = a.io[1].side.region(1, 0);
        let bad = keyed_sgl(Keyed {
            addr: r.addr(),
            len: 512,
            key: r.mr.rkey() ^ 0x100,
            invalidate: false,
        });
        Nvme::post(&mut a.io[1], &with_sgl(rw(0x01, 0x600, 0, 1), bad));
        n.pump(&mut a.all());
        let s = n.t.stats();
        assert_eq!(s.wr_errors, 1, "the RDMA READ failed: {s:?}");
        for (i, q) in a.io.iter().enumerate().filter(|(i, _)| *i != 1) {
            assert_eq!(q.dreqs, 1, "I/O queue {i} disconnected by the target");
        }
        assert_eq!(a.admin.dreqs, 1, "the admin queue disconnected by the target");
        assert_eq!((n.t.open_queues(), n.tg.controllers(), n.tg.queues()), (0, 0, 0));
        assert_eq!(s.wrs_posted, s.wrs_completed, "{s:?}");
        assert_eq!(resources(&e.bb), before);
        drop(r);
        drop(a);
        let mut a = n.bring_up(e);
        assert!(n.keep_alive(&mut a.admin).ok());
        drop(a);
    });
}

/// `nvme discover` (spec §6): the discovery controller with KATO 0,
/// Identify (CNTRLTYPE 2), log 70h header then the entries with LPO.
#[test]
fn discovery() {
    with_target(|e, n| {
        let before = resources(&e.bb);
        let (mut a, r) = n.connect_admin(e, DISC, 0);
        assert!(r.ok(), "discovery Connect with KATO 0: {r:?}");
        n.enable(&mut a.admin);
        let (r, id) = n.identify(&mut a, 0x01, 0);
        assert!(r.ok());
        assert_eq!(id[111], 2, "CNTRLTYPE discovery");
        assert_eq!(id[77], 0, "MDTS 0");
        assert_eq!(&id[768..768 + DISC.len() + 1], format!("{DISC}\0").as_bytes(), "SUBNQN");
        // The header (1024 B, RAE), then NUMREC entries from LPO 1024.
        let (r, hdr) = n.log(&mut a, 0x70, 0, 1024, 0);
        assert!(r.ok(), "{r:?}");
        let (genctr, numrec) = (get64(&hdr, 0), get64(&hdr, 8));
        assert_eq!(get16(&hdr, 16), 0, "RECFMT");
        assert!((1..=4).contains(&numrec), "NUMREC {numrec}");
        let (r, entries) = n.log(&mut a, 0x70, 0, numrec as u32 * 1024, 1024);
        assert!(r.ok(), "{r:?}");
        let subsys: Vec<&[u8]> = entries.chunks(1024).filter(|e| e[2] == 2).collect();
        assert_eq!(subsys.len(), 1, "one NVM subsystem entry (SUBTYPE 2)");
        let s = subsys[0];
        assert_eq!((s[0], s[1]), (1, 1), "TRTYPE RDMA, ADRFAM IPv4");
        assert_eq!(get16(s, 6), 0xFFFF, "CNTLID");
        assert_eq!(get16(s, 8), 32, "ASQSZ");
        let text = |b: &[u8]| {
            String::from_utf8(b.to_vec()).unwrap().trim_end_matches([' ', '\0']).to_string()
        };
        assert_eq!(text(&s[32..64]), "4420", "TRSVCID");
        assert_eq!(text(&s[256..512]), SUBNQN, "SUBNQN");
        assert_eq!(text(&s[512..768]), "10.0.0.2", "TRADDR: the address the host reached");
        assert_eq!((s[768], s[770]), (1, 1), "RDMA_QPTYPE RC, RDMA_CMS RDMA_IP_CM");
        let (_, hdr2) = n.log(&mut a, 0x70, 0, 1024, 0);
        assert_eq!(get64(&hdr2, 0), genctr, "GENCTR stable");
        // The end of `nvme discover`: CC.SHN, then the disconnect.
        assert!(n.prop_set(&mut a.admin, 0x14, CC_SHUTDOWN).ok());
        assert_eq!((n.prop_get(&mut a.admin, 0x1C, false).dw0 >> 2) & 3, 0b10);
        a.admin.side.qp.modify(&QpAttr::new(QpState::Error)).unwrap();
        n.host.cm.disconnect(n.host.now, a.admin.conn.unwrap(), &mut n.host.port).unwrap();
        n.pump(&mut a.all());
        assert_eq!((n.t.open_queues(), n.tg.controllers()), (0, 0));
        assert_eq!(resources(&e.bb), before);
        drop(a);
        // A discovery controller left connected with KATO 0 expires after
        // 120 s (spec §4.1, `NVMET_DISC_KATO_MS`), not before.
        let (mut a, r) = n.connect_admin(e, DISC, 0);
        assert!(r.ok());
        n.enable(&mut a.admin);
        n.host.now += 119_000;
        n.pump(&mut a.all());
        assert_eq!((n.tg.controllers(), a.admin.dreqs), (1, 0), "alive at 119 s");
        n.host.now += 1_001;
        n.pump(&mut a.all());
        assert_eq!((n.tg.controllers(), a.admin.dreqs), (0, 1), "expired at 120 s");
        assert_eq!(resources(&e.bb), before);
        drop(a);
    });
}
