//! A cold PF (`LanConfig::cold`): the RDMA engine works only once the LAN
//! side made it ready — a Tx-scheduler qset for the QP's qs_handle before
//! anything is sent, and a switch rule to a VSI with the PE filter on before
//! RoCE frames are taken in. The default configuration keeps the LAN side
//! "done by someone else" (every other model test runs that way).

mod common;
use common::*;
use mock_bar::lan::{LanConfig, flag, opc, rc, reg};
use mock_bar::{Config, Fabric, TestMemory};

/// ARP entry 1 (the MAC frames of the harness's QPs go to).
const MAC: [u8; 6] = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
const AQ_N: u32 = 8;

/// A minimal admin-queue client on the harness's memory.
struct Aq {
    ring: u64,
    bufs: u64,
    next: u32,
}

impl Aq {
    fn new(h: &mut Harness) -> Self {
        let ring = h.alloc(32 * AQ_N as u64, 64);
        let bufs = h.alloc(4096 * AQ_N as u64, 4096);
        h.wr(reg::ATQH, 0);
        h.wr(reg::ATQT, 0);
        h.wr(reg::ATQLEN, AQ_N | reg::LEN_ENABLE);
        h.wr(reg::ATQBAL, ring as u32);
        h.wr(reg::ATQBAH, (ring >> 32) as u32);
        Aq { ring, bufs, next: 0 }
    }
    /// Sends one command; returns (retval, params, buffer).
    fn cmd(
        &mut self,
        h: &mut Harness,
        op: u16,
        params: &[u8],
        buf: Option<&[u8]>,
    ) -> (u16, [u8; 32], Vec<u8>) {
        let slot = self.next;
        let a = self.bufs + 4096 * slot as u64;
        let mut d = [0u8; 32];
        let mut fl = flag::SI;
        if let Some(b) = buf {
            fl |= flag::BUF | flag::RD;
            d[4..6].copy_from_slice(&(b.len() as u16).to_le_bytes());
            h.mem.fill(a, b);
            d[24..28].copy_from_slice(&((a >> 32) as u32).to_le_bytes());
            d[28..32].copy_from_slice(&(a as u32).to_le_bytes());
        }
        d[0..2].copy_from_slice(&fl.to_le_bytes());
        d[2..4].copy_from_slice(&op.to_le_bytes());
        d[16..16 + params.len()].copy_from_slice(params);
        h.mem.fill(self.ring + 32 * slot as u64, &d);
        self.next = (slot + 1) % AQ_N;
        h.wr(reg::ATQT, self.next);
        assert_eq!(h.rd(reg::ATQH), self.next, "completed");
        let d: [u8; 32] = h.mem.bytes(self.ring + 32 * slot as u64, 32).try_into().unwrap();
        let len = buf.map_or(0, <[u8]>::len);
        (u16::from_le_bytes([d[6], d[7]]), d, h.mem.bytes(a, len))
    }
    fn ok(
        &mut self,
        h: &mut Harness,
        op: u16,
        params: &[u8],
        buf: Option<&[u8]>,
    ) -> ([u8; 32], Vec<u8>) {
        let (rv, d, b) = self.cmd(h, op, params, buf);
        assert_eq!(rv, rc::OK, "opcode {op:#06x}");
        (d, b)
    }
    /// Add VSI; returns its number.
    fn vsi(&mut self, h: &mut Harness) -> u16 {
        let mut ctx = [0u8; 128];
        ctx[0] = 2;
        ctx[2] = LanConfig::default().sw_id as u8;
        ctx[4] = 1 << 4;
        let (d, _) = self.ok(h, opc::ADD_VSI, &[0, 0, 0, 0, 0, 0, 2, 0], Some(&ctx));
        u16::from_le_bytes([d[16], d[17]]) & 0x3FF
    }
    fn pe_filter(&mut self, h: &mut Harness, vsi: u16) {
        let mut upd = [0u8; 128];
        upd[0] = 1 << 7;
        upd[80] = 1;
        self.ok(h, opc::UPDATE_VSI, &(vsi | 0x8000).to_le_bytes(), Some(&upd));
    }
    fn mac_rule(&mut self, h: &mut Harness, vsi: u16) {
        let mut r = [0u8; 32];
        r[0] = 1;
        r[4] = 1;
        r[6..8].copy_from_slice(&vsi.to_le_bytes());
        r[8..12].copy_from_slice(&((vsi as u32) << 4 | 1 << 17 | 1 << 2).to_le_bytes());
        r[14] = 16;
        r[16..22].copy_from_slice(&MAC);
        self.ok(h, opc::ADD_SW_RULES, &[1, 0], Some(&r));
    }
    /// Generic SEs from the entry point to the queue-group layer, then a
    /// qset for `qs_handle`.
    fn qset(&mut self, h: &mut Harness, qs_handle: u16) {
        let (layers, ep) = h.dev(|d| {
            let l = d.lan().config().sched_layers;
            let ep = d.lan().sched_nodes().values().find(|n| n.layer == 2).map(|n| n.teid);
            (l, ep.unwrap())
        });
        // drop the default chain below the entry point
        let below: Vec<(u32, u32)> = h.dev(|d| {
            let mut v: Vec<_> = d
                .lan()
                .sched_nodes()
                .values()
                .filter(|n| n.layer > 2)
                .map(|n| (n.layer, n.parent, n.teid))
                .collect();
            v.sort();
            v.into_iter().rev().map(|(_, p, t)| (p, t)).collect()
        });
        for (p, t) in below {
            let mut b = [0u8; 12];
            b[0..4].copy_from_slice(&p.to_le_bytes());
            b[4] = 1;
            b[8..12].copy_from_slice(&t.to_le_bytes());
            self.ok(h, opc::DELETE_SCHED_ELEMS, &[1, 0], Some(&b));
        }
        let mut parent = ep;
        for _ in 3..=(layers - 2) {
            let mut b = [0u8; 32];
            b[0..4].copy_from_slice(&parent.to_le_bytes());
            b[4] = 1;
            b[16] = 3;
            b[17] = 7;
            let (_, r) = self.ok(h, opc::ADD_SCHED_ELEMS, &[1, 0], Some(&b));
            parent = u32::from_le_bytes(r[12..16].try_into().unwrap());
        }
        let mut b = [0u8; 32];
        b[0..4].copy_from_slice(&parent.to_le_bytes());
        b[4] = 1;
        b[8..10].copy_from_slice(&qs_handle.to_le_bytes());
        self.ok(h, opc::ADD_RDMA_QSET, &[1], Some(&b));
    }
}

struct Setup {
    h: Harness,
    a: TQp,
    tx_a: TCq,
    buf: u64,
    aq: Aq,
}

fn setup(cold: bool) -> Setup {
    let cfg = Config { lan: LanConfig { cold, ..LanConfig::default() }, ..Config::default() };
    let mut h = Harness::with_config(cfg, TestMemory::new(), Fabric::new(), 0x1_0000_0000);
    let QpPair { a, cqs: [tx_a, ..], buf, .. } = h.qp_pair(0x4000, 0x4000, 2);
    let aq = Aq::new(&mut h);
    Setup { h, a, tx_a, buf, aq }
}

/// A cold PF with a queue set for the QP's qs_handle and a VSI, then the
/// VSI's MAC rule and its PE filter if asked (in that order); the VSI too.
fn cold_pf(mac_rule: bool, pe_filter: bool) -> (Setup, u16) {
    let mut s = setup(true);
    let qs = s.h.ws_leaf();
    s.aq.qset(&mut s.h, qs);
    let vsi = s.aq.vsi(&mut s.h);
    if mac_rule {
        s.aq.mac_rule(&mut s.h, vsi);
    }
    if pe_filter {
        s.aq.pe_filter(&mut s.h, vsi);
    }
    (s, vsi)
}

fn write(s: &mut Setup) {
    let data: Vec<u8> = (0..64u8).collect();
    s.h.mem.fill(s.buf, &data);
    s.h.post_send(&mut s.a, |v| {
        sq_frag_wqe(
            sqop::WRITE,
            STAG,
            VA + 0x1000,
            &[Sge { addr: VA, stag: STAG, len: 64 }],
            None,
            true,
            v,
        )
    });
}

#[test]
fn default_config_needs_no_lan_side() {
    let mut s = setup(false);
    write(&mut s);
    assert!(s.h.poll_cq(&mut s.tx_a).is_some_and(|c| !c.error));
    assert_eq!(s.h.mem.bytes(s.buf + 0x1000, 64), s.h.mem.bytes(s.buf, 64));
    let c = s.h.dev(|d| d.counters().clone());
    assert_eq!((c.lan_gated_wqes, c.pe_filter_drops), (0, 0));
}

#[test]
fn cold_pf_sends_nothing_until_a_qset_exists_for_the_qs_handle() {
    let mut s = setup(true);
    let vsi = s.aq.vsi(&mut s.h);
    s.aq.mac_rule(&mut s.h, vsi);
    s.aq.pe_filter(&mut s.h, vsi);
    write(&mut s);
    assert!(s.h.poll_cq(&mut s.tx_a).is_none(), "not scheduled: no qset");
    assert_eq!(s.h.mem.bytes(s.buf + 0x1000, 64), vec![0; 64], "nothing moved");
    assert!(s.h.dev(|d| d.counters().lan_gated_wqes) >= 1);
    assert_eq!(s.h.dev(|d| d.counters().packets), 0);
    // a qset for another handle does not help
    let qs = s.h.ws_leaf();
    s.aq.qset(&mut s.h, qs.wrapping_add(1));
    s.h.ring(&s.a);
    assert!(s.h.poll_cq(&mut s.tx_a).is_none());
    // the QP's own handle: the waiting WQE goes out on the next doorbell
    let mut b = [0u8; 32];
    let parent = s.h.dev(|d| d.lan().qset(qs.wrapping_add(1)).unwrap().parent);
    b[0..4].copy_from_slice(&parent.to_le_bytes());
    b[4] = 1;
    b[8..10].copy_from_slice(&qs.to_le_bytes());
    s.aq.ok(&mut s.h, opc::ADD_RDMA_QSET, &[1], Some(&b));
    s.h.ring(&s.a);
    let c = s.h.poll_cq(&mut s.tx_a).expect("completes once scheduled");
    assert!(!c.error);
    assert_eq!(s.h.mem.bytes(s.buf + 0x1000, 64), s.h.mem.bytes(s.buf, 64));
}

#[test]
fn cold_pf_drops_roce_frames_without_the_pe_filter() {
    let (mut s, _) = cold_pf(true, false);
    // no PE filter: the request is dropped at the receiver, the requester
    // gives up (LLP_TOO_MANY_RETRIES)
    write(&mut s);
    assert_eq!(s.h.dev(|d| d.counters().pe_filter_drops), 1);
    assert_eq!(s.h.mem.bytes(s.buf + 0x1000, 64), vec![0; 64]);
    let mut aes = Vec::new();
    while let Some(e) = s.h.aeq_poll() {
        aes.push(e.0);
    }
    // AE LLP_TOO_MANY_RETRIES (spec control-path §8.2)
    assert!(aes.contains(&0x050A), "LLP_TOO_MANY_RETRIES: {aes:x?}");
}

#[test]
fn cold_pf_pe_filter_without_a_mac_rule_still_drops() {
    let (mut s, _) = cold_pf(false, true);
    write(&mut s);
    assert_eq!(
        s.h.dev(|d| d.counters().pe_filter_drops),
        1,
        "no rule delivers the frame to the VSI"
    );
}

#[test]
fn cold_pf_ready_lan_side_carries_traffic() {
    let (mut s, vsi) = cold_pf(true, true);
    write(&mut s);
    assert!(s.h.poll_cq(&mut s.tx_a).is_some_and(|c| !c.error));
    assert_eq!(s.h.mem.bytes(s.buf + 0x1000, 64), s.h.mem.bytes(s.buf, 64));
    let c = s.h.dev(|d| d.counters().clone());
    assert_eq!((c.lan_gated_wqes, c.pe_filter_drops), (0, 0));
    // and the PE filter off again stops it
    let mut upd = [0u8; 128];
    upd[0] = 1 << 7;
    s.aq.ok(&mut s.h, opc::UPDATE_VSI, &(vsi | 0x8000).to_le_bytes(), Some(&upd));
    write(&mut s);
    assert_eq!(s.h.dev(|d| d.counters().pe_filter_drops), 1);
}
