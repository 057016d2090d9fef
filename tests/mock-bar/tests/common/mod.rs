//! Test-side encoders written from the spec (never the driver's), and a
//! harness that plays the driver against the model over `TestMemory`.
#![allow(dead_code)]

use mock_bar::regs::{self, op};
use mock_bar::{Config, Device, Fabric, TestMemory};
use std::sync::Arc;

pub fn f(v: u64, hi: u32, lo: u32) -> u64 {
    let w = hi - lo + 1;
    let m = if w == 64 { u64::MAX } else { (1u64 << w) - 1 };
    (v & m) << lo
}
pub fn g(v: u64, hi: u32, lo: u32) -> u64 {
    let w = hi - lo + 1;
    let m = if w == 64 { u64::MAX } else { (1u64 << w) - 1 };
    (v >> lo) & m
}

/// CQP WQE header (spec control-path §2.5): opcode [37:32] | op bits.
pub fn hdr(opcode: u8, bits: u64) -> u64 {
    f(opcode as u64, 37, 32) | bits
}

/// A CCQ completion as the test reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ccqe {
    pub ctx: u64,
    pub ret: u32,
    pub major: u16,
    pub minor: u16,
    pub idx: u32,
    pub error: bool,
}

pub struct Ring {
    pub pa: u64,
    pub size: u32,
    pub head: u32,
    pub pol: bool,
}

/// Counts the test commits (small, every object non-zero like Linux, SRQ 0).
pub fn small_counts() -> [u64; 21] {
    let mut c = [4u64; 21];
    c[0] = 16; // QP
    c[1] = 16; // CQ
    c[2] = 0; // SRQ
    c[4] = 8; // ARP
    c[5] = 0; // APBVT (written 0 by Linux)
    c[6] = 64; // MR
    c[14] = 8192; // PBLE
    c
}

pub const COMMIT_OFF: [usize; 21] =
    [0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 128, 136, 144, 152, 160, 168];

pub struct Harness {
    pub mem: TestMemory,
    pub fabric: Arc<Fabric>,
    pub id: usize,
    next: u64,
    pub cqp_sq: u64,
    pub cqp_size: u32,
    pub head: u32,
    pub pol: bool,
    pub ccq: Option<(Ring, u64)>,
    pub bases: [u64; 21],
    pub counts: [u64; 21],
    pub sd_bufs: Vec<u64>,
    pub aeq: Option<Ring>,
    pub ceq0: Option<Ring>,
}

pub const CQP_CTX: u64 = 0x00C0_FFEE_0000_0001;

impl Harness {
    pub fn new() -> Self {
        Self::with_config(Config::default(), TestMemory::new(), Fabric::new(), 0x1_0000_0000)
    }

    /// A second device on the same fabric and memory (addresses from `base`).
    pub fn with_config(cfg: Config, mem: TestMemory, fabric: Arc<Fabric>, base: u64) -> Self {
        let id = fabric.add(Device::new(cfg, Box::new(mem.clone())));
        Self {
            mem,
            fabric,
            id,
            next: base,
            cqp_sq: 0,
            cqp_size: 0,
            head: 0,
            pol: false,
            ccq: None,
            bases: [0; 21],
            counts: [0; 21],
            sd_bufs: Vec::new(),
            aeq: None,
            ceq0: None,
        }
    }

    pub fn alloc(&mut self, len: u64, align: u64) -> u64 {
        let pa = self.next.div_ceil(align) * align;
        self.mem.map(pa, len as usize);
        self.next = pa + len + 0x1000; // guard gap: accesses past the end fault
        pa
    }

    pub fn rd(&self, off: u32) -> u32 {
        self.fabric.mmio_read32(self.id, off)
    }
    pub fn wr(&self, off: u32, v: u32) {
        self.fabric.mmio_write32(self.id, off, v)
    }
    pub fn dev<R>(&self, f: impl FnOnce(&mut Device) -> R) -> R {
        self.fabric.with(self.id, f).expect("device")
    }

    /// spec control-path §2.3/§2.4
    pub fn create_cqp(&mut self, size: u32) -> u32 {
        self.cqp_size = size;
        self.cqp_sq = self.alloc(size as u64 * 64, 4096);
        let ctx = self.alloc(64, 64);
        let enc = size.trailing_zeros() as u64 - 1;
        self.mem.set64(ctx, f(2, 4, 3) | f(enc, 11, 8));
        self.mem.set64(ctx + 8, self.cqp_sq);
        self.mem.set64(ctx + 16, f(1, 2, 0) | f(8, 19, 16));
        self.mem.set64(ctx + 24, CQP_CTX);
        self.mem.set64(ctx + 32, f(1, 31, 16));
        self.wr(regs::CQPTAIL, 0);
        self.wr(regs::CQPDB, 0);
        self.wr(regs::CCQPSTATUS, 0);
        self.wr(regs::CCQPHIGH, (ctx >> 32) as u32);
        self.wr(regs::CCQPLOW, ctx as u32);
        self.head = 0;
        self.pol = false;
        self.rd(regs::CCQPSTATUS)
    }

    /// Writes one CQP WQE (header last, with the pass polarity) and rings.
    pub fn post(&mut self, w: [u64; 8]) -> u32 {
        let idx = self.head;
        if idx == 0 {
            self.pol = !self.pol;
        }
        let pa = self.cqp_sq + idx as u64 * 64;
        for (i, v) in w.iter().enumerate() {
            if i != 3 {
                self.mem.set64(pa + i as u64 * 8, *v);
            }
        }
        self.mem.set64(pa + 24, (w[3] & !(1 << 63)) | ((self.pol as u64) << 63));
        self.head = (self.head + 1) % self.cqp_size;
        self.wr(regs::CQPDB, self.head);
        idx
    }

    /// Register-polled op (spec control-path §2.6 (a)).
    pub fn polled(&mut self, w: [u64; 8]) -> Result<(), (u16, u16)> {
        let before = self.rd(regs::CQPTAIL) & 0x7FF;
        self.post(w);
        let t = self.rd(regs::CQPTAIL);
        if t >> 31 == 1 {
            let e = self.rd(regs::CQPERRCODES);
            return Err(((e >> 16) as u16, e as u16));
        }
        assert_ne!(t & 0x7FF, before, "CQPTAIL did not move");
        Ok(())
    }

    /// Next CCQ CQE, if its valid bit matches.
    pub fn ccq_poll(&mut self) -> Option<Ccqe> {
        let (ring, shadow) = self.ccq.as_mut()?;
        let pa = ring.pa + ring.head as u64 * 32;
        let w3 = self.mem.get64(pa + 24);
        if (w3 >> 63 == 1) != ring.pol {
            return None;
        }
        let c = Ccqe {
            ctx: self.mem.get64(pa + 8),
            ret: self.mem.get64(pa + 16) as u32,
            minor: g(w3, 15, 0) as u16,
            major: g(w3, 31, 16) as u16,
            idx: g(w3, 46, 32) as u32,
            error: g(w3, 55, 55) == 1,
        };
        ring.head = (ring.head + 1) % ring.size;
        if ring.head == 0 {
            ring.pol = !ring.pol;
        }
        let (h, s) = (ring.head, *shadow);
        self.mem.set64(s, h as u64);
        Some(c)
    }

    /// Op completed through the CCQ.
    pub fn op(&mut self, w: [u64; 8]) -> Ccqe {
        let idx = self.post(w);
        let c = self.ccq_poll().expect("no CCQ completion");
        assert_eq!(c.idx, idx, "CCQ WQEIDX");
        c
    }

    pub fn op_ok(&mut self, w: [u64; 8]) -> u32 {
        let c = self.op(w);
        assert!(!c.error, "op {:#x} failed: {c:x?}", g(w[3], 37, 32));
        c.ret
    }

    pub fn query_features(&mut self) -> Vec<u64> {
        let buf = self.alloc(272, 16);
        self.polled([0, 0, 0, hdr(op::QUERY_RDMA_FEATURES, 272), buf, 0, 0, 0]).expect("features");
        (0..34).map(|i| self.mem.get64(buf + i * 8)).collect()
    }

    /// QUERY + COMMIT (spec control-path §3.3/§3.4); records bases.
    pub fn fpm(&mut self, counts: [u64; 21]) -> Result<(), (u16, u16)> {
        let q = self.alloc(192, 64);
        self.polled([0, 0, 0, hdr(op::QUERY_FPM_VAL, 0), q, 0, 0, 0])?;
        let c = self.alloc(192, 64);
        for (t, off) in COMMIT_OFF.iter().enumerate() {
            self.mem.set64(c + *off as u64, counts[t]);
        }
        self.polled([0, 0, 0, hdr(op::COMMIT_FPM_VAL, 192), c, 0, 0, 0])?;
        for (t, off) in COMMIT_OFF.iter().enumerate() {
            let w = self.mem.get64(c + *off as u64);
            self.bases[t] = (w >> 32) * 512;
            self.counts[t] = counts[t];
        }
        Ok(())
    }

    /// UPDATE_PE_SDS with up to 11 entries (spec control-path §3.7).
    pub fn sds_wqe(&mut self, entries: &[(u64, u64)]) -> [u64; 8] {
        let mut w = [0u64; 8];
        w[0] = entries[0].0;
        w[1] = entries[0].1;
        if let Some(e) = entries.get(1) {
            w[4] = e.0 | 1 << 63;
            w[5] = e.1;
        }
        if let Some(e) = entries.get(2) {
            w[6] = e.0 | 1 << 63;
            w[7] = e.1;
        }
        let extra = entries.len().saturating_sub(3);
        if extra > 0 {
            let buf = self.alloc(128, 128);
            for (i, e) in entries[3..].iter().enumerate() {
                self.mem.set64(buf + i as u64 * 16, e.0);
                self.mem.set64(buf + i as u64 * 16 + 8, e.1);
            }
            w[2] = buf;
        }
        w[3] = hdr(op::UPDATE_PE_SDS, f(extra as u64, 3, 0));
        w
    }

    pub fn sd_cmd(sd: u64) -> u64 {
        sd | 1 << 15 | 1 << 31
    }
    pub fn sd_direct(pa: u64) -> u64 {
        pa | f(512, 11, 2) | 0b11
    }
    pub fn sd_paged(pd_page: u64) -> u64 {
        pd_page | f(512, 11, 2) | 0b01
    }

    /// Backs every SD of the layout with a direct 2 MiB buffer.
    pub fn back_all(&mut self, polled: bool) {
        let end = (0..21).map(|t| self.bases[t] + self.counts[t] * 4096).max().unwrap_or(0);
        let sds = end.div_ceil(0x20_0000).max(1);
        let mut entries = Vec::new();
        for sd in 0..sds {
            let b = self.alloc(0x20_0000, 0x20_0000);
            self.sd_bufs.push(b);
            entries.push((Self::sd_cmd(sd), Self::sd_direct(b)));
        }
        for chunk in entries.chunks(11) {
            let w = self.sds_wqe(chunk);
            if polled {
                self.polled(w).expect("sds");
            } else {
                self.op_ok(w);
            }
        }
    }

    pub fn create_cq_wqe(
        id: u32,
        size: u32,
        ring: u64,
        shadow: u64,
        ctx: u64,
        ceq: Option<u32>,
    ) -> [u64; 8] {
        [
            size as u64,
            f(ctx, 62, 0),
            16,
            hdr(
                op::CREATE_CQ,
                f(id as u64, 18, 0)
                    | f(ceq.unwrap_or(0) as u64, 31, 22)
                    | 1 << 46
                    | ((ceq.is_some() as u64) << 49)
                    | ((ceq.is_some() as u64) << 48),
            ),
            ring,
            shadow,
            0,
            0,
        ]
    }

    /// CCQ (CQ 0) create, polled in the CCQ itself (spec control-path §2.7).
    pub fn create_ccq(&mut self) {
        let size = 2 * self.cqp_size + 2;
        let ring = self.alloc(size as u64 * 32, 256);
        let shadow = self.alloc(64, 128);
        let mut w = Self::create_cq_wqe(0, size, ring, shadow, 0x77, Some(0));
        w[3] &= !(1 << 48); // ENCEQEMASK 0 for the CCQ
        self.ccq = Some((Ring { pa: ring, size, head: 0, pol: true }, shadow));
        let c = self.op(w);
        assert!(!c.error, "ccq create {c:x?}");
        assert_eq!(c.ctx, CQP_CTX, "completion context from host context @24");
    }

    pub fn create_ceq(&mut self, id: u32, size: u32) -> Ccqe {
        let ring = self.alloc(size as u64 * 8, 256);
        if id == 0 {
            self.ceq0 = Some(Ring { pa: ring, size, head: 0, pol: true });
        }
        self.op([0, 0, size as u64, hdr(op::CREATE_CEQ, f(id as u64, 9, 0)), ring, 0, 0, 0])
    }

    pub fn create_aeq(&mut self, size: u32) -> Ccqe {
        let ring = self.alloc(size as u64 * 16, 256);
        self.aeq = Some(Ring { pa: ring, size, head: 0, pol: true });
        self.op([0, 0, size as u64, hdr(op::CREATE_AEQ, 0), ring, 0, 0, 0])
    }

    /// Next AEQE: (code, src, qp/cq id, ctx).
    pub fn aeq_poll(&mut self) -> Option<(u16, u8, u32, u64)> {
        let r = self.aeq.as_mut()?;
        let pa = r.pa + r.head as u64 * 16;
        let w1 = self.mem.get64(pa + 8);
        if (w1 >> 63 == 1) != r.pol {
            return None;
        }
        let ctx = self.mem.get64(pa);
        r.head = (r.head + 1) % r.size;
        if r.head == 0 {
            r.pol = !r.pol;
        }
        let id = g(w1, 17, 0) | g(w1, 46, 46) << 18;
        self.wr(regs::AEQALLOC, 1);
        Some((g(w1, 45, 34) as u16, g(w1, 53, 50) as u8, id as u32, ctx))
    }

    /// Everything up to a usable device (spec control-path §9.2 steps 1–12).
    pub fn bring_up(&mut self) {
        assert_eq!(self.create_cqp(64), 1);
        self.query_features();
        self.fpm(small_counts()).expect("fpm");
        self.back_all(true);
        self.polled([0, 0, 0, hdr(op::SHMC_PAGES_ALLOCATED, 0), 0, 0, 0, 0]).expect("shmc");
        self.create_ccq();
        assert!(!self.create_ceq(0, 64).error);
        assert!(!self.create_aeq(64).error);
    }
}
