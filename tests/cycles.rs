//! Bring-up → two connected RC QPs moving data → MRs of every PBL level →
//! teardown, over and over: every page and every id comes back.
//!
//! 1,000 full cycles (two devices probed and closed each time). In a debug
//! build the cycle count is `IRDMA_CYCLES` (default 100) to keep `cargo
//! test` quick; the release-profile run (`cargo test --release --test
//! cycles`) does the full 1,000.

mod common;

use common::*;
use std::collections::BTreeSet;

fn cycles() -> usize {
    let default = if cfg!(debug_assertions) { 100 } else { 1000 };
    std::env::var("IRDMA_CYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One full cycle; returns the QP numbers used.
fn cycle(bar_a: &ModelBar, bar_b: &ModelBar, big: &[u64], phys: &Buf) -> (u32, u32) {
    let profile = Profile { pbles: 1 << 20, ..Profile::SMALL };
    let da = probe_as(bar_a, A, profile);
    let db = probe_as(bar_b, B, profile);
    let (pa, pb) = (da.alloc_pd().unwrap(), db.alloc_pd().unwrap());
    let (mut ca, mut cb) = (da.create_cq(32).unwrap(), db.create_cq(32).unwrap());
    let mut qa = create_qp(&da, &pa, &ca, 8);
    let mut qb = create_qp(&db, &pb, &cb, 8);
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    connect_both(&mut qa, A, &mut qb, B);
    let src = buf(2);
    let data = fill(&src, na as u8);
    let dst = buf(2);
    let s0 = reg(&da, &pa, src.paddr(), 8192, &pages_of(&src), false);
    let mut rev = pages_of(&dst);
    rev.reverse();
    let d1 = reg(&db, &pb, 0x4000_0000, 8192, &rev, false);
    let d2 = reg(&db, &pb, 0, big.len() as u64 * 4096, big, true);
    assert_eq!((s0.pbl_level(), d1.pbl_level(), d2.pbl_level()), (0, 1, 2));
    // WRITE into level 1, READ back from level 2 (which aliases `phys`),
    // SEND into a receive.
    let sge = [Sge { addr: src.paddr(), length: 5000, lkey: s0.lkey() }];
    let w = signaled(1, write_op(0x4000_0000, d1.rkey()), &sge);
    qa.post_send(&[w]).unwrap();
    let wc = poll_n(&mut ca, 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    let mut got = read(&dst, 4096, 4096);
    got.extend(read(&dst, 0, 904));
    assert_eq!(got, data[..5000].to_vec());
    let sge = [Sge { addr: src.paddr() + 4096, length: 256, lkey: s0.lkey() }];
    let r = signaled(2, read_op(262_143 * 4096, d2.rkey()), &sge);
    qa.post_send(&[r]).unwrap();
    let wc = poll_n(&mut ca, 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    assert_eq!(read(&src, 4096, 256), read(phys, 4096, 256), "READ through level 2");
    let rsge = [Sge { addr: 0x4000_0000, length: 64, lkey: d1.lkey() }];
    qb.post_recv(&[RecvWr { wr_id: 3, sg_list: &rsge }]).unwrap();
    let sge = [Sge { addr: src.paddr(), length: 64, lkey: s0.lkey() }];
    let s = SendWr { wr_id: 4, opcode: WrOpcode::Send, flags: SendFlags::SIGNALED, sg_list: &sge };
    qa.post_send(&[s]).unwrap();
    assert_eq!(poll_n(&mut ca, 1)[0].status, WcStatus::Success);
    let wc = poll_n(&mut cb, 1);
    assert_eq!((wc[0].wr_id, wc[0].byte_len), (3, 64));
    assert_eq!(read(&dst, 4096, 64), data[..64].to_vec());
    drop((s0, d1, d2, qa, qb, ca, cb, pa, pb));
    da.close().unwrap();
    db.close().unwrap();
    (na, nb)
}

#[test]
fn full_cycles_free_every_page() {
    let _g = lock();
    let phys = buf(2);
    let big: Vec<u64> = (0..262_145u64).map(|i| phys.paddr() + (i % 2) * 4096).collect();
    let base = FakeHal::live_pages();
    let n = cycles();
    let t = std::time::Instant::now();
    let bar_a = ModelBar::standalone(small_fn_config());
    let bar_b = bar_a.add_peer(small_fn_config());
    for i in 0..n {
        cycle(&bar_a, &bar_b, &big, &phys);
        assert_eq!(FakeHal::live_pages(), base, "cycle {i}");
        // A function accepts one COMMIT_FPM_VAL per reset (the model refuses
        // a second after SHMC_PAGES_ALLOCATED): the LAN side resets both
        // functions before the next bring-up.
        bar_a.with_device(|d| d.reset());
        bar_b.with_device(|d| d.reset());
    }
    eprintln!("{n} cycles in {:?}", t.elapsed());
}

/// One probe, 1,000 rounds of every object: ids wrap around their tables
/// and are reused, usage and pages come back after every round.
#[test]
fn object_cycles_recycle_every_id() {
    let _g = lock();
    let base = FakeHal::live_pages();
    let (_bar, dev) = one_device(small_fn_config(), Profile { mrs: 1024, ..Profile::SMALL });
    let b = buf(2);
    let mut rev = pages_of(&b);
    rev.reverse();
    let usage = dev.resource_usage();
    let pages = FakeHal::live_pages();
    let (mut qpns, mut cqns, mut keys) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let mut mr_indexes = BTreeSet::new();
    for i in 0..1000u32 {
        let pd = dev.alloc_pd().unwrap();
        let mut cq = dev.create_cq(16).unwrap();
        let (mut q1, q2) = loopback_pair(&dev, &pd, &cq, 4);
        let (n1, n2) = (q1.qp_num(), q2.qp_num());
        let m0 = reg(&dev, &pd, b.paddr(), 8192, &pages_of(&b), false);
        let m1 = reg(&dev, &pd, 0x10_0000, 8192, &rev, false);
        let fr = dev.alloc_mr(&pd, 8).unwrap();
        // A write through the level-1 MR proves the round is live.
        assert!(b.write_bytes(0, &i.to_le_bytes()));
        let sge = [Sge { addr: b.paddr(), length: 4, lkey: m0.lkey() }];
        let w = signaled(u64::from(i), write_op(0x10_0000 + 100, m1.rkey()), &sge);
        q1.post_send(&[w]).unwrap();
        let wc = poll_n(&mut cq, 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (u64::from(i), WcStatus::Success));
        assert_eq!(read(&b, 4096 + 100, 4), i.to_le_bytes().to_vec());
        qpns.extend([n1, n2]);
        cqns.insert(cq.id());
        keys.extend([m0.rkey(), m1.rkey(), fr.key()]);
        mr_indexes.extend([m0.rkey() >> 8, m1.rkey() >> 8, fr.key() >> 8]);
        drop((fr, m1, m0, q1, q2, cq, pd));
        assert_eq!(dev.resource_usage(), usage, "round {i}");
        assert_eq!(FakeHal::live_pages(), pages, "round {i}");
    }
    let caps = dev.caps();
    assert_eq!(qpns.len() as u32, caps.max_qp - 4, "every QP id used, so each was reused");
    assert_eq!(cqns.len() as u32, caps.max_cq - 3, "every CQ id used");
    assert_eq!(mr_indexes.len() as u32, caps.max_mr - 1, "every MR index used");
    assert_eq!(keys.len(), 3000, "a reused MR index never repeats a key within 256 uses");
    drop(b);
    dev.close().unwrap();
    assert_eq!(FakeHal::live_pages(), base);
}
