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

/// The values the two-QP fixtures share (data_path, wire, protection,
/// lan_gating): local IP, PD, the MR's STag and VA, all access rights.
pub const IP: u32 = 0x0A00_0001;
pub const PD: u32 = 7;
/// index 0x80_0005 (random upper bits, slot 5), key 0x33
pub const STAG: u32 = 0x8000_0533;
pub const VA: u64 = 0x7000_0000_0000;
pub const ALL: u8 = 0x0F;
/// ARP entry 1 of the two-QP fixture (valid, permanent).
pub const ARP_MAC: u64 = 0x0211_2233_4455;

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
    /// Deferred-mode devices: poll the fabric after every register write.
    pub auto_poll: bool,
    /// Queue-set handle of the enabled WS leaf, once built.
    pub qs_handle: Option<u16>,
    /// `create_qp` stops after CREATE_QP (the QP stays IDLE).
    pub stop_at_idle: bool,
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
            auto_poll: false,
            qs_handle: None,
            stop_at_idle: false,
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
        self.fabric.mmio_write32(self.id, off, v);
        if self.auto_poll {
            self.fabric.poll();
        }
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

    /// With the CQP up: COMMIT_FPM_VAL of [`small_counts`], every SD
    /// backed, SHMC_PAGES_ALLOCATED — the HMC is ready for objects.
    pub fn back_hmc(&mut self) {
        self.fpm(small_counts()).expect("fpm");
        self.back_all(true);
        self.polled([0, 0, 0, hdr(op::SHMC_PAGES_ALLOCATED, 0), 0, 0, 0, 0]).expect("shmc");
    }

    /// Everything up to a usable device (spec control-path §9.2 steps 1–12).
    pub fn bring_up(&mut self) {
        assert_eq!(self.create_cqp(64), 1);
        self.query_features();
        self.back_hmc();
        self.create_ccq();
        assert!(!self.create_ceq(0, 64).error);
        assert!(!self.create_aeq(64).error);
    }
}

// ----------------------------------------------------------------------
// Data path: spec-side SQ/RQ encoders (spec data-path §1, §2)
// ----------------------------------------------------------------------

/// SQ opcodes (spec data-path §1.9).
pub mod sqop {
    pub const WRITE: u8 = 0x00;
    pub const READ: u8 = 0x01;
    pub const SEND: u8 = 0x03;
    pub const SEND_INV: u8 = 0x04;
    pub const SEND_SOL: u8 = 0x05;
    pub const FAST_REG: u8 = 0x09;
    pub const LOCAL_INV: u8 = 0x0A;
    pub const NOP: u8 = 0x0C;
}

#[derive(Clone, Copy, Debug)]
pub struct Sge {
    pub addr: u64,
    pub stag: u32,
    pub len: u32,
}

fn frag_words(s: Option<Sge>, valid: bool) -> [u64; 2] {
    match s {
        Some(s) => {
            [s.addr, f(s.stag as u64, 31, 0) | f(s.len as u64, 62, 32) | (valid as u64) << 63]
        }
        None => [0, (valid as u64) << 63],
    }
}

/// A fragment-based SQ WQE (WRITE/READ/SEND), laid out per §1.5: slot 0 at
/// +0 (or the immediate), others from +32, pad to an odd count, ADDFRAGCNT
/// counting the pad. Returns the words with the header at [3] (valid set).
pub fn sq_frag_wqe(
    opcode: u8,
    remstag: u32,
    w16: u64,
    sges: &[Sge],
    imm: Option<u32>,
    signaled: bool,
    valid: bool,
) -> Vec<u64> {
    let mut slots: Vec<Option<Sge>> = Vec::new();
    let mut w = vec![0u64; 4];
    if let Some(i) = imm {
        w[0] = i as u64;
        slots.push(None); // placeholder for the immediate
    }
    for s in sges {
        slots.push(Some(*s));
    }
    if slots.is_empty() {
        slots.push(None);
    }
    let mut count = slots.len();
    if count.is_multiple_of(2) {
        slots.push(None);
        count += 1;
    }
    for (k, s) in slots.iter().enumerate() {
        if k == 0 {
            if imm.is_none() {
                let fw = frag_words(*s, valid);
                w[0] = fw[0];
                w[1] = fw[1];
            }
        } else {
            let fw = frag_words(*s, valid);
            w.extend_from_slice(&fw);
        }
    }
    while !w.len().is_multiple_of(4) {
        w.push(0);
    }
    w[2] = w16;
    w[3] = f(remstag as u64, 31, 0)
        | f(opcode as u64, 37, 32)
        | f((count - 1) as u64, 41, 38)
        | (imm.is_some() as u64) << 47
        | (signaled as u64) << 62
        | (valid as u64) << 63;
    w
}

/// Inline WQE (§1.7): 8 bytes at +8, then 31 per quantum, valid byte 31.
pub fn sq_inline_wqe(
    opcode: u8,
    remstag: u32,
    w16: u64,
    data: &[u8],
    signaled: bool,
    valid: bool,
) -> Vec<u64> {
    let quanta = if data.len() <= 8 { 1 } else { 1 + (data.len() - 8).div_ceil(31) };
    let mut b = vec![0u8; quanta * 32];
    let first = data.len().min(8);
    b[8..8 + first].copy_from_slice(&data[..first]);
    let mut at = first;
    for q in 1..quanta {
        let n = (data.len() - at).min(31);
        b[q * 32..q * 32 + n].copy_from_slice(&data[at..at + n]);
        b[q * 32 + 31] = (valid as u8) << 7;
        at += n;
    }
    let mut w: Vec<u64> = b.chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
    w[2] = w16;
    w[3] = f(remstag as u64, 31, 0)
        | f(opcode as u64, 37, 32)
        | f(data.len() as u64, 55, 48)
        | 1 << 57
        | (signaled as u64) << 62
        | (valid as u64) << 63;
    w
}

pub fn sq_local_inv(stag: u32, signaled: bool, valid: bool) -> Vec<u64> {
    vec![
        0,
        f(stag as u64, 31, 0),
        0,
        f(sqop::LOCAL_INV as u64, 37, 32)
            | 1 << 61
            | (signaled as u64) << 62
            | (valid as u64) << 63,
    ]
}

/// FAST_REGISTER (§1.6): level-1 PBL, 4 KiB pages, VA-based.
pub fn sq_fast_reg(
    stag: u32,
    va: u64,
    len: u64,
    first_pble: u32,
    rights: u8,
    valid: bool,
) -> Vec<u64> {
    vec![
        va,
        f((first_pble >> 16) as u64, 11, 0),
        f(len, 40, 0) | f(first_pble as u64 & 0xFFFF, 63, 48),
        f(stag as u64 & 0xFF, 7, 0)
            | f((stag >> 8) as u64, 31, 8)
            | f(sqop::FAST_REG as u64, 37, 32)
            | f(1, 45, 44)
            | f(rights as u64, 52, 48)
            | 1 << 53
            | 1 << 62
            | (valid as u64) << 63,
    ]
}

/// RQ WQE (§2.1) padded to `stride` bytes.
pub fn rq_wqe(sges: &[Sge], valid: bool, stride: usize) -> Vec<u64> {
    let mut slots: Vec<Option<Sge>> = sges.iter().copied().map(Some).collect();
    if slots.is_empty() {
        slots.push(None);
    }
    if slots.len().is_multiple_of(2) {
        slots.push(None);
    }
    let mut w = vec![0u64; stride / 8];
    for (k, s) in slots.iter().enumerate() {
        let fw = frag_words(*s, valid);
        let at = if k == 0 { 0 } else { 4 + 2 * (k - 1) };
        w[at] = fw[0];
        w[at + 1] = fw[1];
    }
    w[3] = f((slots.len() - 1) as u64, 41, 38) | (valid as u64) << 63;
    w
}

/// A decoded CQE as the test sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cqe {
    pub len: u32,
    pub ctx: u64,
    pub inv_stag: u32,
    pub qp: u32,
    pub minor: u16,
    pub major: u16,
    pub wqe_idx: u32,
    pub ext: bool,
    pub stag_inv: bool,
    pub solicited: bool,
    pub error: bool,
    pub op: u8,
    pub sq: bool,
    pub imm: Option<u32>,
}

pub struct TCq {
    pub id: u32,
    pub ring: Ring,
    pub shadow: u64,
}

/// RESET → RTS: the MODIFY_QP states (INIT 1, RTR 4, RTS 2) and their extra
/// header bits (ARPTABIDXVALID 59, ORDVALID 42).
pub const TO_RTS: [(u64, u64); 3] = [(1, 0), (4, 1 << 59), (2, 1 << 59 | 1 << 42)];

pub struct TQp {
    pub id: u32,
    pub sq_pa: u64,
    pub sq_quanta: u32,
    pub sq_head: u32,
    pub sq_pol: bool,
    pub rq_pa: u64,
    pub rq_wqes: u32,
    pub rq_shift: u32,
    pub rq_head: u32,
    pub rq_pol: bool,
    pub shadow: u64,
    pub ctx_pa: u64,
    pub ctx: [u64; 32],
}

/// What [`Harness::qp_pair`] made: QP 10 (`a`) and QP 11 (`b`), their CQs
/// `[a send, a receive, b send, b receive]` (ids 3, 4, 5, 6), the buffer.
pub struct QpPair {
    pub a: TQp,
    pub b: TQp,
    pub cqs: [TCq; 4],
    pub buf: u64,
}

pub const QP_CTX_BASE: u64 = 0x5150_0000_0000;

impl Harness {
    pub fn create_cq(&mut self, id: u32, size: u32) -> TCq {
        let ring = self.alloc(size as u64 * 32, 256);
        let shadow = self.alloc(64, 64);
        self.op_ok(Self::create_cq_wqe(id, size, ring, shadow, 0xCC00 + id as u64, Some(0)));
        TCq { id, ring: Ring { pa: ring, size, head: 0, pol: true }, shadow }
    }

    pub fn poll_cq(&mut self, cq: &mut TCq) -> Option<Cqe> {
        let pa = cq.ring.pa + cq.ring.head as u64 * 32;
        let w3 = self.mem.get64(pa + 24);
        if (w3 >> 63 == 1) != cq.ring.pol {
            return None;
        }
        let (w0, w1, w2) = (self.mem.get64(pa), self.mem.get64(pa + 8), self.mem.get64(pa + 16));
        let ext = g(w3, 50, 50) == 1;
        let mut imm = None;
        cq.ring.head = (cq.ring.head + 1) % cq.ring.size;
        if cq.ring.head == 0 {
            cq.ring.pol = !cq.ring.pol;
        }
        if ext {
            let epa = cq.ring.pa + cq.ring.head as u64 * 32;
            let e3 = self.mem.get64(epa + 24);
            assert_eq!(e3 >> 63 == 1, cq.ring.pol, "extended CQE valid");
            if g(e3, 62, 62) == 1 {
                imm = Some(self.mem.get64(epa) as u32);
            }
            cq.ring.head = (cq.ring.head + 1) % cq.ring.size;
            if cq.ring.head == 0 {
                cq.ring.pol = !cq.ring.pol;
            }
        }
        self.mem.set64(cq.shadow, cq.ring.head as u64);
        Some(Cqe {
            len: w0 as u32,
            ctx: w1,
            inv_stag: w2 as u32,
            qp: g(w2, 55, 32) as u32,
            minor: g(w3, 15, 0) as u16,
            major: g(w3, 31, 16) as u16,
            wqe_idx: g(w3, 46, 32) as u32,
            ext,
            stag_inv: g(w3, 53, 53) == 1,
            solicited: g(w3, 54, 54) == 1,
            error: g(w3, 55, 55) == 1,
            op: g(w3, 61, 56) as u8,
            sq: g(w3, 62, 62) == 1,
            imm,
        })
    }

    /// The loopback base of the fault and deferred-mode tests on a brought-up
    /// device: ARP entry 1, send CQ 3 and receive CQ 4 (32 entries each), and
    /// a 4 KiB buffer registered as level-0 MR 0x511 (PD 1, VA 0, all
    /// rights). Returns the send CQ and the STag.
    pub fn loopback_mr(&mut self) -> (TCq, u32) {
        self.op_ok([0, 0, 1, hdr(op::MANAGE_ARP, 1 | 1 << 42), 0, 0, 0, 0]);
        let tx = self.create_cq(3, 32);
        self.create_cq(4, 32);
        let buf = self.alloc(0x1000, 0x1000);
        let stag = 0x0000_0511;
        self.reg_mr0(stag, 1, 0, buf, 0x1000, 0x0F);
        (tx, stag)
    }

    /// The two-QP fixture: brings the device up, sets ARP entry 1 to
    /// [`ARP_MAC`], creates CQs 3/4 (QP 10's send/receive) and 5/6 (QP
    /// 11's), allocates `buf_len` bytes (4 KiB aligned) whose first `mr_len`
    /// are the level-0 MR [`STAG`] at [`VA`] in [`PD`] with all rights, and
    /// connects RC QPs 10 and 11 over [`IP`] with RNR retry `rnr`.
    pub fn qp_pair(&mut self, buf_len: u64, mr_len: u64, rnr: u8) -> QpPair {
        self.bring_up();
        self.op_ok([0, 0, ARP_MAC, hdr(op::MANAGE_ARP, 1 | 1 << 42 | 1 << 43), 0, 0, 0, 0]);
        let cqs = [3, 4, 5, 6].map(|id| self.create_cq(id, 32));
        let buf = self.alloc(buf_len, 4096);
        self.reg_mr0(STAG, PD, VA, buf, mr_len, ALL);
        let a = self.create_qp(10, PD, 3, 4, IP, IP, 11, rnr);
        let b = self.create_qp(11, PD, 5, 6, IP, IP, 10, rnr);
        QpPair { a, b, cqs, buf }
    }

    /// Registers a level-0 MR (spec control-path §4.3.9).
    pub fn reg_mr0(&mut self, stag: u32, pd: u32, va: u64, pa: u64, len: u64, rights: u8) {
        let c = self.op(Self::reg_mr_wqe(stag, pd, va, len, rights, 0, pa, 0, true));
        assert!(!c.error, "reg_mr {c:x?}");
    }

    #[allow(clippy::too_many_arguments)]
    pub fn reg_mr_wqe(
        stag: u32,
        pd: u32,
        va: u64,
        len: u64,
        rights: u8,
        level: u64,
        pa: u64,
        first: u32,
        va_based: bool,
    ) -> [u64; 8] {
        [
            va,
            f(len, 45, 0) | f(pd as u64, 63, 46),
            f(stag as u64 & 0xFF, 7, 0) | f((stag >> 8) as u64, 31, 8),
            hdr(
                op::REG_MR,
                1 << 43
                    | f(level, 45, 44)
                    | f(rights as u64, 52, 48)
                    | (((rights & 0xC) != 0) as u64) << 53
                    | (va_based as u64) << 59,
            ),
            pa,
            0,
            first as u64,
            0,
        ]
    }

    /// Bus address of PBLE `i` (through the direct SDs of `back_all`).
    pub fn pble_pa(&self, i: u64) -> u64 {
        let fpm = self.bases[14] + 8 * i;
        self.sd_bufs[(fpm / 0x20_0000) as usize] + fpm % 0x20_0000
    }

    /// QP with `sq_quanta` SQ quanta and `rq_wqes` 64-byte RQ WQEs, created
    /// and moved to RTS talking to `(dest_ip, dest_qp)`.
    #[allow(clippy::too_many_arguments)]
    pub fn create_qp(
        &mut self,
        id: u32,
        pd: u32,
        tx: u32,
        rx: u32,
        local_ip: u32,
        dest_ip: u32,
        dest_qp: u32,
        rnr_retry: u8,
    ) -> TQp {
        let qs = self.ws_leaf();
        let sq_quanta = 64u32;
        let rq_shift = 1u32;
        let rq_wqes = 16u32;
        let sq_pa = self.alloc(sq_quanta as u64 * 32, 4096);
        let rq_pa = self.alloc((rq_wqes << rq_shift) as u64 * 32, 4096);
        let shadow = self.alloc(64, 64);
        let ctx_pa = self.alloc(256, 256);
        let mut c = [0u64; 32];
        c[0] = 1 << 3 | f(rq_shift as u64, 9, 8) | f((pd >> 16) as u64, 21, 20);
        c[1] = sq_pa;
        c[2] = rq_pa;
        let rq_quanta = rq_wqes << rq_shift;
        c[3] = f(rq_quanta.trailing_zeros() as u64 - 2, 11, 8)
            | f(sq_quanta.trailing_zeros() as u64 - 2, 15, 12)
            | f(4791, 63, 48);
        c[4] = dest_ip as u64;
        c[6] = f(1024, 29, 16) | f(1, 63, 48); // MSS, ARP index 1
        c[7] = f(0xFFFF, 47, 32) | f(pd as u64 & 0xFFFF, 63, 48);
        c[8] = dest_qp as u64;
        c[16] = f(rnr_retry as u64, 56, 54) | f(2, 53, 48);
        c[17] = tx as u64 | f(rx as u64, 56, 32);
        c[20] = 8 | f(1, 18, 16) | 1 << 19 | 1 << 20 | 1 << 21 | 1 << 24 | 1 << 25;
        c[21] = QP_CTX_BASE + id as u64;
        c[22] = f(qs as u64, 25, 16);
        c[23] = local_ip as u64;
        // MACADDRESS @152 [63:16]: the harness's QPs talk to QPs of the
        // same device (or of a twin set up alike), so the port MAC is the
        // MAC of ARP entry 1 — frames are addressed to it (wire §1.9)
        c[19] = self.dev(|d| d.arp_entry(1)).unwrap_or(0) << 16;
        for (i, v) in c.iter().enumerate() {
            self.mem.set64(ctx_pa + i as u64 * 8, *v);
        }
        let qp_hdr = |opc: u8, state: u64, extra: u64| {
            hdr(opc, id as u64 | 1 << 47 | f(3, 50, 48) | f(state, 62, 60) | extra)
        };
        self.op_ok([0, 0, ctx_pa, qp_hdr(op::CREATE_QP, 1, 1 << 51), 0, shadow, 0, 0]);
        if !self.stop_at_idle {
            for (state, extra) in TO_RTS {
                self.op_ok([0, 0, ctx_pa, qp_hdr(op::MODIFY_QP, state, extra), 0, shadow, 0, 0]);
            }
        }
        TQp {
            id,
            sq_pa,
            sq_quanta,
            sq_head: 0,
            sq_pol: false,
            rq_pa,
            rq_wqes,
            rq_shift,
            rq_head: 0,
            rq_pol: false,
            shadow,
            ctx_pa,
            ctx: c,
        }
    }

    /// The work-scheduler tree Linux builds before the first QP (spec
    /// control-path §4.3.20, §9 step 13): root 0, VSI node 1, leaf 2 added
    /// disabled, then enabled. Returns the leaf's queue-set handle.
    pub fn ws_leaf(&mut self) -> u16 {
        if let Some(h) = self.qs_handle {
            return h;
        }
        let ws = |id: u64, parent: u64, nop: u64, leaf: bool, en: bool| {
            [
                0,
                0,
                0,
                hdr(
                    op::WORK_SCHED_NODE,
                    id | f(parent, 29, 16)
                        | f(nop, 55, 52)
                        | f(1, 60, 59)
                        | (leaf as u64) << 61
                        | (en as u64) << 62,
                ),
                f(1, 38, 32),
                0,
                0,
                0,
            ]
        };
        self.op_ok(ws(0, 0, 0, false, true));
        self.op_ok(ws(1, 0, 0, false, true));
        let h = self.op_ok(ws(2, 1, 0, true, false)) as u16;
        self.op_ok(ws(2, 1, 1, true, true));
        self.qs_handle = Some(h);
        h
    }

    pub fn modify_qp(&mut self, qp: &TQp, state: u64) -> Ccqe {
        self.modify_qp_with(qp, state, 0)
    }

    /// Takes a QP created with `stop_at_idle` set (left in RESET) through
    /// [`TO_RTS`] with its current `ctx`, as `create_qp` does otherwise —
    /// for a test that edits the context first.
    pub fn bring_to_rts(&mut self, qp: &TQp) {
        for (state, extra) in TO_RTS {
            let c = self.modify_qp_with(qp, state, extra);
            assert!(!c.error, "modify_qp {} to {state}: {c:x?}", qp.id);
        }
    }

    /// MODIFY_QP with extra header bits (ARPTABIDXVALID 59, CQNUMVALID 47,
    /// ORDVALID 42), after writing `qp.ctx` to the context buffer.
    pub fn modify_qp_with(&mut self, qp: &TQp, state: u64, extra: u64) -> Ccqe {
        for (i, v) in qp.ctx.iter().enumerate() {
            self.mem.set64(qp.ctx_pa + i as u64 * 8, *v);
        }
        self.op([
            0,
            0,
            qp.ctx_pa,
            hdr(op::MODIFY_QP, qp.id as u64 | f(3, 50, 48) | f(state, 62, 60) | extra),
            0,
            qp.shadow,
            0,
            0,
        ])
    }

    /// Writes an SQ WQE built by `build(valid)` (body, then header) without
    /// ringing; returns its first quantum. Pads the 8-quantum chunk with NOPs
    /// like Linux (spec data-path §1.10).
    pub fn write_sq(&mut self, qp: &mut TQp, build: &dyn Fn(bool) -> Vec<u64>) -> u32 {
        let quanta = (build(true).len() / 4) as u32;
        let room = 8 - qp.sq_head % 8;
        if quanta > room {
            for _ in 0..room {
                self.write_sq(qp, &|v| {
                    vec![0, 0, 0, f(sqop::NOP as u64, 37, 32) | (v as u64) << 63]
                });
            }
        }
        self.write_sq_unpadded(qp, build)
    }

    /// [`Self::write_sq`] without the chunk padding (to break the rule).
    pub fn write_sq_unpadded(&mut self, qp: &mut TQp, build: &dyn Fn(bool) -> Vec<u64>) -> u32 {
        let quanta = (build(true).len() / 4) as u32;
        let idx = qp.sq_head;
        if idx == 0 {
            qp.sq_pol = !qp.sq_pol;
        }
        let w = build(qp.sq_pol);
        let pa = qp.sq_pa + idx as u64 * 32;
        for (i, v) in w.iter().enumerate() {
            if i != 3 {
                self.mem.set64(pa + i as u64 * 8, *v);
            }
        }
        self.mem.set64(pa + 24, w[3]);
        qp.sq_head = (qp.sq_head + quanta) % qp.sq_quanta;
        idx
    }

    pub fn ring(&self, qp: &TQp) {
        self.wr(mock_bar::regs::WQEALLOC, qp.id);
    }

    pub fn post_send(&mut self, qp: &mut TQp, build: impl Fn(bool) -> Vec<u64>) -> u32 {
        let idx = self.write_sq(qp, &build);
        self.ring(qp);
        idx
    }

    pub fn post_recv(&mut self, qp: &mut TQp, sges: &[Sge]) -> u32 {
        let idx = qp.rq_head;
        if idx == 0 {
            qp.rq_pol = !qp.rq_pol;
        }
        let stride = 32usize << qp.rq_shift;
        let w = rq_wqe(sges, qp.rq_pol, stride);
        let pa = qp.rq_pa + idx as u64 * stride as u64;
        for (i, v) in w.iter().enumerate() {
            if i != 3 {
                self.mem.set64(pa + i as u64 * 8, *v);
            }
        }
        self.mem.set64(pa + 24, w[3]);
        qp.rq_head = (qp.rq_head + 1) % qp.rq_wqes;
        idx
    }
}
