//! The input space of the data-path differential: one QP (SQ + RQ) in a
//! configuration, a ring position reached by filler posts, then a short
//! sequence of SQ and RQ posts. Generated from a seed; shrunk on a
//! difference.

use crate::ffi::{IbSge, api};
use crate::rng::Rng;

/// GEN_2 limits (spec data-path §1.1; icrdma_hw.c icrdma_init_hw).
pub const MAX_FRAGS: u32 = 13;
pub const MAX_INLINE: u32 = 101;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cfg {
    /// SQ ring in quanta (a real GEN_2 SQ: a power of two ≥ 512).
    pub sq_quanta: u32,
    pub max_frags: u32,
    pub max_inline: u32,
    pub qp_id: u32,
    /// RQ ring in WQEs, each `1 << rq_shift` quanta.
    pub rq_size: u32,
    pub rq_shift: u8,
    pub rq_frags: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqPostIn {
    pub api: u32,
    pub op_type: u8,
    pub wr_id: u64,
    pub remote_addr: u64,
    pub rkey: u32,
    pub imm: Option<u32>,
    pub stag_to_inv: u32,
    pub qkey: u32,
    pub dest_qp: u32,
    pub ah_id: u32,
    pub udp_hdr: bool,
    pub l4len: u8,
    pub target_stag: u32,
    /// For inline posts `addr` is replaced by the payload buffer's address.
    pub sges: Vec<IbSge>,
    /// Inline payload (`sum(sges.length)` bytes) for the inline entry points.
    pub data: Vec<u8>,
    pub signaled: bool,
    pub read_fence: bool,
    pub local_fence: bool,
    pub report_rtt: bool,
    pub read_inv: bool,
    pub post_sq: bool,
}

impl SqPostIn {
    pub fn inline(&self) -> bool {
        matches!(self.api, api::INLINE_RDMA_WRITE | api::INLINE_SEND)
    }

    pub fn api_name(&self) -> &'static str {
        match self.api {
            api::RDMA_WRITE => "irdma_uk_rdma_write",
            api::INLINE_RDMA_WRITE => "irdma_uk_inline_rdma_write",
            api::RDMA_READ => "irdma_uk_rdma_read",
            api::SEND => "irdma_uk_send",
            api::INLINE_SEND => "irdma_uk_inline_send",
            api::LOCAL_INV => "irdma_uk_stag_local_invalidate",
            _ => "irdma_nop",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Sq(SqPostIn),
    Rq { wr_id: u64, sges: Vec<IbSge> },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    pub cfg: Cfg,
    /// One-quantum unsignaled RDMA WRITEs posted and consumed first.
    pub sq_filler: u32,
    /// One-SGE receives posted and consumed first.
    pub rq_filler: u32,
    /// Then one-quantum WRITEs posted and left outstanding (ring fill).
    pub sq_outstanding: u32,
    /// Then receives left outstanding.
    pub rq_outstanding: u32,
    pub ops: Vec<Op>,
}

fn gen_cfg(r: &mut Rng) -> Cfg {
    let max_frags = match r.below(4) {
        0 => MAX_FRAGS,
        1 => 1,
        _ => r.range(1, u64::from(MAX_FRAGS)) as u32,
    };
    let max_inline = match r.below(4) {
        0 => MAX_INLINE,
        1 => r.pick(&[0, 8, 39, 70]),
        _ => r.range(0, u64::from(MAX_INLINE)) as u32,
    };
    let rq_frags = r.range(1, u64::from(MAX_FRAGS)) as u32;
    // The smallest stride that holds `rq_frags` fragments (a 2^s-quanta WQE
    // holds 2^(s+1) - 1), sometimes a larger one.
    let mut rq_shift = (0..=3u8).find(|s| rq_frags < 2 << s).unwrap_or(3);
    if rq_shift < 3 && r.chance(1, 4) {
        rq_shift += 1;
    }
    Cfg {
        sq_quanta: r.pick(&[512, 512, 1024, 2048]),
        max_frags,
        max_inline,
        qp_id: r.field(24) as u32 | 1,
        rq_size: r.pick(&[8, 16, 64, 256, 1024]),
        rq_shift,
        rq_frags,
    }
}

/// `wild`: inputs the driver deliberately refuses (deviations.toml) may be
/// generated; a deviation ends the comparison of its case, so most cases
/// stay inside the driver's domain.
fn gen_sge(r: &mut Rng, wild: bool) -> IbSge {
    let length = match r.below(8) {
        0 => 0,
        1 => 1,
        2 => 0x7fff_ffff,
        3 if wild => r.next_u64() as u32, // may exceed the 31-bit FRAG_LEN field
        3 => r.next_u64() as u32 & 0x7fff_ffff,
        _ => r.range(1, 1 << 20) as u32,
    };
    IbSge { addr: r.next_u64(), length, lkey: r.u32_edge() }
}

/// An inline payload of `total` bytes split into `n` SGEs (`n >= 1`).
fn gen_inline(r: &mut Rng, n: u32, total: u32) -> (Vec<IbSge>, Vec<u8>) {
    let data: Vec<u8> = (0..total).map(|_| r.next_u64() as u8).collect();
    let mut cuts: Vec<u32> = (1..n).map(|_| r.range(0, u64::from(total)) as u32).collect();
    cuts.sort_unstable();
    let mut sges = Vec::new();
    let mut prev = 0;
    for c in cuts.into_iter().chain([total]) {
        sges.push(IbSge { addr: 0, length: c - prev, lkey: r.u32_edge() });
        prev = c;
    }
    (sges, data)
}

fn gen_sq(r: &mut Rng, cfg: &Cfg, wr_id: u64, wild: bool) -> SqPostIn {
    let api = match r.below(100) {
        0..25 => api::RDMA_WRITE,
        25..40 => api::INLINE_RDMA_WRITE,
        40..55 => api::RDMA_READ,
        55..75 => api::SEND,
        75..90 => api::INLINE_SEND,
        90..95 => api::LOCAL_INV,
        _ => api::NOP,
    };
    let op_type = match api {
        api::RDMA_WRITE | api::INLINE_RDMA_WRITE => r.pick(&[0x00, 0x00, 0x0d]),
        api::SEND | api::INLINE_SEND => r.range(3, 6) as u8,
        api::RDMA_READ => 0x01,
        api::LOCAL_INV => 0x0a,
        _ => 0x0c,
    };
    let n = match r.below(6) {
        0 => 0,
        1 => 1,
        2 => cfg.max_frags,
        3 if r.chance(1, 3) => cfg.max_frags + 1,
        _ => r.range(0, u64::from(cfg.max_frags)) as u32,
    };
    let (sges, data) = if matches!(api, api::INLINE_RDMA_WRITE | api::INLINE_SEND) {
        let edges = [0, 1, 7, 8, 9, 38, 39, 40, 69, 70, 71, 100, 101, 102];
        let total = match r.below(4) {
            0 => cfg.max_inline,
            1 => cfg.max_inline + 1,
            2 => r.pick(&edges),
            _ => r.range(0, u64::from(cfg.max_inline)) as u32,
        };
        if n == 0 { (Vec::new(), Vec::new()) } else { gen_inline(r, n, total) }
    } else {
        ((0..n).map(|_| gen_sge(r, wild)).collect(), Vec::new())
    };
    SqPostIn {
        api,
        op_type,
        wr_id,
        remote_addr: if r.chance(1, 8) { r.pick(&[0, u64::MAX]) } else { r.next_u64() },
        rkey: r.u32_edge(),
        imm: (r.chance(1, 3)
            && (wild
                || matches!(
                    api,
                    api::RDMA_WRITE | api::INLINE_RDMA_WRITE | api::SEND | api::INLINE_SEND
                )))
        .then(|| r.u32_edge()),
        stag_to_inv: r.u32_edge(),
        qkey: r.u32_edge(),
        dest_qp: if r.chance(1, 10) { r.next_u64() as u32 } else { r.field(24) as u32 },
        ah_id: if wild && r.chance(1, 4) { r.next_u64() as u32 } else { r.field(17) as u32 },
        udp_hdr: r.chance(1, 4),
        l4len: if r.chance(1, 10) { r.next_u64() as u8 } else { r.field(4) as u8 },
        target_stag: r.u32_edge(),
        sges,
        data,
        signaled: r.chance(1, 2),
        read_fence: r.chance(1, 3),
        local_fence: r.chance(1, 3),
        report_rtt: r.chance(1, 4),
        read_inv: r.chance(1, 3),
        post_sq: r.chance(2, 3),
    }
}

/// A filler count that puts the head near the interesting places: ring
/// starts, chunk edges and wraps (both polarities).
fn gen_filler(r: &mut Rng, ring: u32) -> u32 {
    let ring = u64::from(ring);
    (match r.below(6) {
        0 => 0,
        1 => r.below(16),
        2 => ring - r.range(1, 16.min(ring)),
        3 => 2 * ring - r.range(1, 16.min(ring)),
        4 => ring + r.below(16),
        _ => r.below(2 * ring),
    }) as u32
}

pub fn gen_case(r: &mut Rng) -> Case {
    let wild = r.chance(1, 8);
    gen_case_with(r, wild)
}

/// A case inside the driver's domain (no deliberately refused input).
pub fn gen_case_domain(r: &mut Rng) -> Case {
    gen_case_with(r, false)
}

fn gen_case_with(r: &mut Rng, wild: bool) -> Case {
    let cfg = gen_cfg(r);
    let sq_filler = gen_filler(r, cfg.sq_quanta);
    let rq_filler = gen_filler(r, cfg.rq_size);
    // Near full: a real SQ keeps 257 quanta free (uk.c
    // IRDMA_SQ_RING_FREE_QUANTA), an RQ one slot (IRDMA_RING_FULL_ERR).
    let sq_outstanding = match r.below(6) {
        0 => cfg.sq_quanta - 257 - r.range(0, 20) as u32,
        1 => r.below(32) as u32,
        _ => 0,
    };
    let rq_outstanding = match r.below(6) {
        0 => cfg.rq_size - 1 - r.range(0, 3.min(u64::from(cfg.rq_size) - 1)) as u32,
        1 => r.below(u64::from(cfg.rq_size)) as u32,
        _ => 0,
    };
    let n = r.range(1, 6);
    let ops = (0..n)
        .map(|i| {
            if r.chance(1, 5) {
                let k = match r.below(4) {
                    0 => 0,
                    1 => cfg.rq_frags,
                    2 if r.chance(1, 2) => cfg.rq_frags + 1,
                    _ => r.range(0, u64::from(cfg.rq_frags)) as u32,
                };
                Op::Rq { wr_id: 0x5200 + i, sges: (0..k).map(|_| gen_sge(r, wild)).collect() }
            } else {
                Op::Sq(gen_sq(r, &cfg, 0x5100 + i, wild))
            }
        })
        .collect();
    Case { cfg, sq_filler, rq_filler, sq_outstanding, rq_outstanding, ops }
}
