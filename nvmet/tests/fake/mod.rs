//! A fake transport and a scripted host for the command layer: no device.
//! The "RDMA" is a copy between the host's memory (one buffer at
//! `HOST_VA`, registered under `HOST_KEY`) and the target's memory (a
//! slot's scratch buffer or the RamDisk), exactly as an `Xfer` names them.
//! Capsules are built byte by byte from the spec's offsets, not from the
//! crate's encoders, so the tests check the layer against the spec.
#![allow(dead_code)]

use std::collections::HashMap;
use std::ptr::NonNull;

use irdma_nvmet::ctrl::{Config, Target, TrAddr};
use irdma_nvmet::{
    Commands, Event, Keyed, Local, QueueId, QueueInfo, RamDisk, SCRATCH, Slot, Step,
};

pub const HOST_VA: u64 = 0x7f00_0000_0000;
pub const HOST_KEY: u32 = 0x00ab_cd42;
pub const HOST_MEM: usize = 2 << 20;
pub const SUBNQN: &str = "nqn.2026-01.invalid.irdma:ram0";
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-1111-2222-3333-444444444444";
pub const DISC: &str = "nqn.2014-08.org.nvmexpress.discovery";
pub const DISK_BYTES: usize = 4 << 20;

/// A decoded response, straight from the 16 bytes (spec §2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rsp {
    pub dw0: u32,
    pub dw1: u32,
    pub sqhd: u16,
    pub sqid: u16,
    pub cid: u16,
    /// The 16-bit STATUS field as on the wire.
    pub status: u16,
    pub invalidate: Option<u32>,
}

impl Rsp {
    pub fn of(c: &[u8; 16], invalidate: Option<u32>) -> Rsp {
        let u16at = |o: usize| u16::from_le_bytes([c[o], c[o + 1]]);
        let u32at = |o: usize| u32::from_le_bytes([c[o], c[o + 1], c[o + 2], c[o + 3]]);
        Rsp {
            dw0: u32at(0),
            dw1: u32at(4),
            sqhd: u16at(8),
            sqid: u16at(10),
            cid: u16at(12),
            status: u16at(14),
            invalidate,
        }
    }
    /// (SCT, SC, DNR) from the wire STATUS: bit 0 P, 8:1 SC, 11:9 SCT, 15 DNR.
    pub fn sct_sc_dnr(&self) -> (u8, u8, bool) {
        (
            ((self.status >> 9) & 7) as u8,
            ((self.status >> 1) & 0xFF) as u8,
            self.status & 0x8000 != 0,
        )
    }
    pub fn ok(&self) -> bool {
        self.status == 0
    }
}

/// What a command came to.
#[derive(Debug)]
pub enum Outcome {
    Rsp(Rsp),
    Held,
}

impl Outcome {
    pub fn rsp(self) -> Rsp {
        match self {
            Outcome::Rsp(r) => r,
            Outcome::Held => panic!("held, expected a response"),
        }
    }
}

/// An SQE as the 6.1 host builds it: FLAGS 0x40 (PSDT 01b), a null keyed
/// SGL (0x40, len 0: `nvme_rdma_set_sg_null`).
pub fn sqe(opc: u8, cid: u16, nsid: u32) -> [u8; 64] {
    let mut s = [0u8; 64];
    s[0] = opc;
    s[1] = 0x40;
    s[2..4].copy_from_slice(&cid.to_le_bytes());
    s[4..8].copy_from_slice(&nsid.to_le_bytes());
    s[39] = 0x40;
    s
}

/// SGL1 keyed: addr @24, 24-bit length @32, key @35, type @39.
pub fn set_keyed(s: &mut [u8; 64], off_in_host: u64, len: u32, invalidate: bool) {
    s[24..32].copy_from_slice(&(HOST_VA + off_in_host).to_le_bytes());
    s[32..35].copy_from_slice(&len.to_le_bytes()[..3]);
    s[35..39].copy_from_slice(&HOST_KEY.to_le_bytes());
    s[39] = if invalidate { 0x4F } else { 0x40 };
}

/// SGL1 in-capsule: offset @24, u32 length @32, type 0x01.
pub fn set_inline(s: &mut [u8; 64], off: u64, len: u32) {
    s[24..32].copy_from_slice(&off.to_le_bytes());
    s[32..36].copy_from_slice(&len.to_le_bytes());
    s[36..39].fill(0);
    s[39] = 0x01;
}

pub fn put16(s: &mut [u8], off: usize, v: u16) {
    s[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
pub fn put32(s: &mut [u8], off: usize, v: u32) {
    s[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
pub fn put64(s: &mut [u8], off: usize, v: u64) {
    s[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
pub fn get16(s: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([s[off], s[off + 1]])
}
pub fn get32(s: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(s[off..off + 4].try_into().unwrap())
}
pub fn get64(s: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(s[off..off + 8].try_into().unwrap())
}

/// Connect SQE (spec §4.1): 0x7F, FCTYPE 1 @4, RECFMT @40, QID @42,
/// SQSIZE @44, CATTR @46, KATO @48.
pub fn connect_sqe(cid: u16, qid: u16, sqsize: u16, kato: u32) -> [u8; 64] {
    let mut s = sqe(0x7F, cid, 0);
    s[4] = 0x01;
    put16(&mut s, 42, qid);
    put16(&mut s, 44, sqsize);
    put32(&mut s, 48, kato);
    s
}

/// Connect data (1024 B): HOSTID @0, CNTLID @16, SUBNQN @256, HOSTNQN @512.
pub fn connect_data(cntlid: u16, subnqn: &str, hostnqn: &str) -> Vec<u8> {
    let mut d = vec![0u8; 1024];
    for (i, b) in d[..16].iter_mut().enumerate() {
        *b = 0xA0 + i as u8;
    }
    put16(&mut d, 16, cntlid);
    d[256..256 + subnqn.len()].copy_from_slice(subnqn.as_bytes());
    d[512..512 + hostnqn.len()].copy_from_slice(hostnqn.as_bytes());
    d
}

pub fn config(disk: &RamDisk, inline_bytes: u32, io_queues: u16) -> Config<'_> {
    Config {
        subnqn: SUBNQN,
        serial: "IRDMA0001",
        model: "irdma RAM namespace",
        disk,
        lba_shift: 9,
        inline_bytes,
        io_queues,
        port_id: 1,
        traddr: TrAddr::V4([192, 168, 1, 10]),
        kas: 10,
    }
}

pub fn ram(bytes: usize) -> &'static RamDisk {
    let words: &'static mut [u64] = Box::leak(vec![0u64; bytes / 8].into_boxed_slice());
    let p = NonNull::new(words.as_mut_ptr().cast::<u8>()).unwrap();
    // SAFETY: leaked, 8-aligned, used only through the RamDisk.
    Box::leak(Box::new(unsafe { RamDisk::new(p, bytes as u64, 0x1000_0000) }))
}

pub type T = Target<'static, 16, 4>;

/// The fake transport plus the host's memory.
pub struct Fake {
    pub t: T,
    pub host: Vec<u8>,
    pub scratch: HashMap<(u16, u16), Vec<u8>>,
    pub now: u64,
    pub next_slot: HashMap<u16, u16>,
    /// Every Xfer the layer asked for, checked on the way.
    pub xfers: usize,
}

impl Fake {
    pub fn new(inline_bytes: u32, io_queues: u16) -> Fake {
        Fake::with(config(ram(DISK_BYTES), inline_bytes, io_queues))
    }

    pub fn with(cfg: Config<'static>) -> Fake {
        Fake {
            t: Target::new(cfg).unwrap(),
            host: vec![0u8; HOST_MEM],
            scratch: HashMap::new(),
            now: 1_000,
            next_slot: HashMap::new(),
            xfers: 0,
        }
    }

    pub fn open(&mut self, q: u16, qid: u16, entries: u16) {
        let info = QueueInfo { qid, sq_entries: entries, hrqsize: entries };
        self.t.queue_opened(QueueId(q), info).unwrap();
    }

    fn slot(&mut self, q: u16) -> u16 {
        let n = self.next_slot.entry(q).or_insert(0);
        *n = (*n + 1) % 128;
        *n
    }

    fn host_range(&self, r: &Keyed, len: u32) -> std::ops::Range<usize> {
        assert_eq!(r.key, HOST_KEY, "the rkey the host sent");
        assert!(len <= r.len, "transfer {len} within the SGL's {}", r.len);
        let off = (r.addr - HOST_VA) as usize;
        off..off + len as usize
    }

    /// Runs a capsule on queue `q` through to its response (or Held).
    pub fn run(&mut self, q: u16, capsule: &[u8]) -> Outcome {
        let slot = self.slot(q);
        self.run_slot(q, slot, capsule, true)
    }

    /// As `run`, with the RDMA READ of a Fetch failing when `read_ok` is false.
    pub fn run_slot(&mut self, q: u16, slot: u16, capsule: &[u8], read_ok: bool) -> Outcome {
        let mut scr = self.scratch.remove(&(q, slot)).unwrap_or_else(|| vec![0u8; SCRATCH]);
        let mut step = self.t.capsule(QueueId(q), Slot(slot), capsule, &mut scr, self.now);
        let out = loop {
            match step {
                Step::Respond { rsp, write } => {
                    if let Some(x) = write {
                        self.xfers += 1;
                        let hr = self.host_range(&x.remote, x.len);
                        match x.local {
                            Local::Scratch { off } => {
                                let o = off as usize;
                                assert!(o + x.len as usize <= SCRATCH);
                                self.host[hr].copy_from_slice(&scr[o..o + x.len as usize]);
                            }
                            Local::Namespace { off } => {
                                assert!(
                                    self.t.disk().read(off, &mut self.host[hr]),
                                    "within the namespace"
                                );
                            }
                        }
                    }
                    break Outcome::Rsp(Rsp::of(&rsp.cqe, rsp.invalidate));
                }
                Step::Fetch(x) => {
                    self.xfers += 1;
                    let hr = self.host_range(&x.remote, x.len);
                    if read_ok {
                        match x.local {
                            Local::Scratch { off } => {
                                let o = off as usize;
                                assert!(o + x.len as usize <= SCRATCH);
                                scr[o..o + x.len as usize].copy_from_slice(&self.host[hr]);
                            }
                            Local::Namespace { off } => {
                                assert!(
                                    self.t.disk().write(off, &self.host[hr]),
                                    "within the namespace"
                                );
                            }
                        }
                    }
                    step = self.t.fetched(QueueId(q), Slot(slot), read_ok, &mut scr, self.now);
                }
                Step::Held => break Outcome::Held,
            }
        };
        self.scratch.insert((q, slot), scr);
        out
    }

    /// Admin Connect on `q` (its data through a 0x4F keyed SGL, as the 6.1
    /// host sends it).
    pub fn connect_admin(&mut self, q: u16, subnqn: &str, kato: u32) -> Rsp {
        let mut s = connect_sqe(1, 0, 31, kato);
        let d = connect_data(0xFFFF, subnqn, HOSTNQN);
        self.host[..1024].copy_from_slice(&d);
        set_keyed(&mut s, 0, 1024, true);
        self.run(q, &s).rsp()
    }

    /// I/O Connect on `q` for `qid`, data in-capsule.
    pub fn connect_io_inline(&mut self, q: u16, qid: u16, cntlid: u16) -> Rsp {
        let mut s = connect_sqe(2, qid, 127, 0);
        set_inline(&mut s, 0, 1024);
        let mut cap = s.to_vec();
        cap.extend_from_slice(&connect_data(cntlid, SUBNQN, HOSTNQN));
        self.run(q, &cap).rsp()
    }

    /// I/O Connect on `q` for `qid`, data through a keyed SGL.
    pub fn connect_io_keyed(&mut self, q: u16, qid: u16, d: &[u8]) -> Rsp {
        let mut s = connect_sqe(2, qid, 127, 0);
        self.host[..d.len()].copy_from_slice(d);
        set_keyed(&mut s, 0, d.len() as u32, true);
        self.run(q, &s).rsp()
    }

    /// Property Get: ATTRIB @40 (1 = 8 bytes), OFST @44.
    pub fn prop_get(&mut self, q: u16, ofst: u32, eight: bool) -> Rsp {
        let mut s = sqe(0x7F, 3, 0);
        s[4] = 0x04;
        s[40] = eight as u8;
        put32(&mut s, 44, ofst);
        self.run(q, &s).rsp()
    }

    /// Property Set (4 bytes): OFST @44, VALUE @48.
    pub fn prop_set(&mut self, q: u16, ofst: u32, v: u32) -> Rsp {
        let mut s = sqe(0x7F, 4, 0);
        s[4] = 0x00;
        put32(&mut s, 44, ofst);
        put64(&mut s, 48, u64::from(v));
        self.run(q, &s).rsp()
    }

    /// The 6.1 host's enable: CC 0x00460000, then 0x00460001, then CSTS.RDY.
    pub fn enable(&mut self, q: u16) {
        assert!(self.prop_set(q, 0x14, 0x0046_0000).ok());
        assert!(self.prop_set(q, 0x14, 0x0046_0001).ok());
        assert_eq!(self.prop_get(q, 0x1C, false).dw0 & 1, 1, "CSTS.RDY");
    }

    /// A command with `len` bytes target→host into host memory at 0x10000,
    /// via a 0x4F SGL; returns the response and the bytes.
    pub fn admin_read(&mut self, q: u16, mut s: [u8; 64], len: u32) -> (Rsp, Vec<u8>) {
        let at = 0x10000usize;
        self.host[at..at + len as usize].fill(0xEE);
        set_keyed(&mut s, at as u64, len, true);
        let r = self.run(q, &s).rsp();
        (r, self.host[at..at + len as usize].to_vec())
    }

    pub fn identify(&mut self, q: u16, cns: u8, nsid: u32) -> (Rsp, Vec<u8>) {
        let mut s = sqe(0x06, 5, nsid);
        s[40] = cns;
        self.admin_read(q, s, 4096)
    }

    /// Get Log Page: LID @40, LSP/RAE @41, NUMDL @42, NUMDU @44, LPO @48.
    pub fn log(
        &mut self,
        q: u16,
        lid: u8,
        nsid: u32,
        len: u32,
        lpo: u64,
        rae: bool,
    ) -> (Rsp, Vec<u8>) {
        let mut s = sqe(0x02, 6, nsid);
        s[40] = lid;
        s[41] = if rae { 0x80 } else { 0 };
        let numd = len / 4 - 1;
        put16(&mut s, 42, numd as u16);
        put16(&mut s, 44, (numd >> 16) as u16);
        put64(&mut s, 48, lpo);
        self.admin_read(q, s, len)
    }

    /// Set Features: FID @40 (CDW10 7:0), value CDW11 @44.
    pub fn set_features(&mut self, q: u16, fid: u8, v: u32) -> Rsp {
        let mut s = sqe(0x09, 7, 0);
        s[40] = fid;
        put32(&mut s, 44, v);
        self.run(q, &s).rsp()
    }

    pub fn get_features(&mut self, q: u16, fid: u8, v: u32) -> Rsp {
        let mut s = sqe(0x0A, 8, 0);
        s[40] = fid;
        put32(&mut s, 44, v);
        self.run(q, &s).rsp()
    }

    /// An NVM Read/Write SQE: SLBA @40, NLB (0's based) @48.
    pub fn rw_sqe(opc: u8, cid: u16, slba: u64, nlb1: u32) -> [u8; 64] {
        let mut s = sqe(opc, cid, 1);
        put64(&mut s, 40, slba);
        put16(&mut s, 48, (nlb1 - 1) as u16);
        s
    }

    /// Keyed Write of `data` at `slba` (host buffer at 0x20000).
    pub fn write(&mut self, q: u16, slba: u64, data: &[u8], invalidate: bool) -> Rsp {
        let at = 0x20000usize;
        self.host[at..at + data.len()].copy_from_slice(data);
        let mut s = Self::rw_sqe(0x01, 9, slba, (data.len() / 512) as u32);
        set_keyed(&mut s, at as u64, data.len() as u32, invalidate);
        self.run(q, &s).rsp()
    }

    /// Keyed Read of `nlb` blocks at `slba` (host buffer at 0x20000).
    pub fn read(&mut self, q: u16, slba: u64, nlb: u32, invalidate: bool) -> (Rsp, Vec<u8>) {
        let at = 0x20000usize;
        let len = nlb as usize * 512;
        self.host[at..at + len].fill(0xEE);
        let mut s = Self::rw_sqe(0x02, 10, slba, nlb);
        set_keyed(&mut s, at as u64, len as u32, invalidate);
        let r = self.run(q, &s).rsp();
        (r, self.host[at..at + len].to_vec())
    }

    pub fn poll_all(&mut self) -> Vec<Event> {
        let mut v = Vec::new();
        while let Some(e) = self.t.poll(self.now) {
            v.push(e);
            assert!(v.len() < 1000);
        }
        v
    }

    /// Admin connect + enable on queue `q`; returns the CNTLID.
    pub fn live_admin(&mut self, q: u16, kato: u32) -> u16 {
        self.live_admin_to(q, SUBNQN, kato)
    }

    /// [`Fake::live_admin`] to the subsystem `subnqn` (the discovery one
    /// or another).
    pub fn live_admin_to(&mut self, q: u16, subnqn: &str, kato: u32) -> u16 {
        self.open(q, 0, 32);
        let r = self.connect_admin(q, subnqn, kato);
        assert!(r.ok(), "{r:?}");
        self.enable(q);
        r.dw0 as u16
    }
}

/// A live I/O controller: admin queue 100, I/O queues 101.. for QID 1..=n.
pub fn live(inline_bytes: u32, n: u16) -> (Fake, u16) {
    let mut f = Fake::new(inline_bytes, 4);
    let id = f.live_admin(100, 5000);
    for qid in 1..=n {
        f.open(100 + qid, qid, 128);
        let r = if inline_bytes >= 1024 {
            f.connect_io_inline(100 + qid, qid, id)
        } else {
            f.connect_io_keyed(100 + qid, qid, &connect_data(id, SUBNQN, HOSTNQN))
        };
        assert!(r.ok(), "{r:?}");
    }
    (f, id)
}
