//! Two model devices on one fabric, one RC QP each: WRITE, READ and SEND
//! checked byte for byte, MRs of each PBL level, stale rkeys, flushes.

mod common;

use common::*;

/// A PD, a 16-entry CQ and two unconnected RC QPs (4 WRs) on it.
fn two_qps_one_cq(dev: &Dev) -> (TPd<'_>, TCq<'_>, TQp<'_>, TQp<'_>) {
    let (pd, cq) = pd_cq(dev, 16);
    let q1 = create_qp(dev, &pd, &cq, 4);
    let q2 = create_qp(dev, &pd, &cq, 4);
    (pd, cq, q1, q2)
}

#[test]
fn write_read_send_between_two_devices() {
    leak_checked(|| {
        let (_bar_a, _bar_b, da, db) = two_devices_with(Config::default(), Profile::SMALL);
        let (pa, pb) = (da.alloc_pd().unwrap(), db.alloc_pd().unwrap());
        let (mut ca, mut cb) = (da.create_cq(64).unwrap(), db.create_cq(64).unwrap());
        let mut qa = create_qp(&da, &pa, &ca, 32);
        let mut qb = create_qp(&db, &pb, &cb, 32);
        assert!(qa.cap().max_send_wr >= 32 && qa.cap().max_recv_sge >= 2);
        let nb = qb.qp_num();
        connect_both(&mut qa, A, &mut qb, B);
        assert_eq!(qa.state(), QpState::Rts);

        // A: source (level 0, contiguous), B: target (level 1: pages reversed).
        let src = buf(4);
        let dst = buf(4);
        let data = fill(&src, 7);
        let src_mr = reg(&da, &pa, src.paddr(), 4 * 4096, &pages_of(&src), false);
        assert_eq!(src_mr.pbl_level(), 0);
        let mut rev = pages_of(&dst);
        rev.reverse();
        let iova_b = 0x7000_0000u64;
        let dst_mr = reg(&db, &pb, iova_b, 4 * 4096, &rev, false);
        assert_eq!(dst_mr.pbl_level(), 1);
        assert_eq!(dst_mr.pble_entry(0), Some(rev[0]), "PBLE holds the page address");

        // RDMA WRITE of 6000 bytes starting 100 bytes into B's region.
        let sge = [Sge { addr: src.paddr(), length: 6000, lkey: src_mr.lkey() }];
        let wr = signaled(1, write_op(iova_b + 100, dst_mr.rkey()), &sge);
        qa.post_send(&[wr]).unwrap();
        let wc = poll_n(&mut ca, 1);
        assert_eq!(wc.len(), 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].status, wc[0].opcode),
            (1, WcStatus::Success, WcOpcode::RdmaWrite)
        );
        // IOVA page i lives in physical page 3 - i.
        let mut got = Vec::new();
        for off in 100..6100usize {
            let page = off / 4096;
            got.push(read(&dst, (3 - page) * 4096 + off % 4096, 1)[0]);
        }
        assert_eq!(got, data[..6000].to_vec(), "WRITE landed byte for byte through the PBL");

        // RDMA READ back 5000 bytes from B into A's second half.
        let back = buf(2);
        let back_mr = reg(&da, &pa, back.paddr(), 8192, &pages_of(&back), false);
        let sge = [Sge { addr: back.paddr(), length: 5000, lkey: back_mr.lkey() }];
        let wr = signaled(2, read_op(iova_b + 100, dst_mr.rkey()), &sge);
        qa.post_send(&[wr]).unwrap();
        let wc = poll_n(&mut ca, 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].status, wc[0].opcode),
            (2, WcStatus::Success, WcOpcode::RdmaRead)
        );
        assert_eq!(read(&back, 0, 5000), data[..5000].to_vec(), "READ byte for byte");

        // SEND from A into a receive B posted (zero-based MR on B).
        let rbuf = buf(1);
        let rmr = reg(&db, &pb, 0, 4096, &pages_of(&rbuf), true);
        let rsge = [Sge { addr: 0, length: 4096, lkey: rmr.lkey() }];
        qb.post_recv(&[RecvWr { wr_id: 30, sg_list: &rsge }]).unwrap();
        let sge = [Sge { addr: src.paddr() + 8192, length: 777, lkey: src_mr.lkey() }];
        let wr =
            SendWr { wr_id: 3, opcode: WrOpcode::Send, flags: SendFlags::SIGNALED, sg_list: &sge };
        qa.post_send(&[wr]).unwrap();
        let wc = poll_n(&mut ca, 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (3, WcStatus::Success));
        let wc = poll_n(&mut cb, 1);
        assert_eq!(wc.len(), 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
            (30, WcStatus::Success, WcOpcode::Recv, 777)
        );
        assert_eq!(wc[0].qp_num, nb);
        assert_eq!(read(&rbuf, 0, 777), data[8192..8192 + 777].to_vec(), "SEND byte for byte");
    });
}

/// One device, two QPs connected to each other through the loopback.
#[test]
fn level2_mr_and_zero_based_mr_on_loopback() {
    let _g = lock();
    let base = FakeHal::live_pages();
    let bar = ModelBar::standalone(Config::default());
    {
        let profile = Profile { pbles: 1 << 20, ..Profile::SMALL };
        let dev = probe_as(&bar, A, profile);
        let (pd, mut cq) = pd_cq(&dev, 64);
        let (mut q1, _q2) = loopback_pair(&dev, &pd, &cq, 16);

        // More pages than one level-1 run can hold (one SD of PBLEs): level 2.
        // Every IOVA page maps to one of two physical pages, alternating.
        let phys = buf(2);
        let npages = 262_145usize;
        let pages: Vec<u64> = (0..npages).map(|i| phys.paddr() + ((i % 2) * 4096) as u64).collect();
        let free_before = dev.resource_usage().pble_free;
        let big = reg(&dev, &pd, 0, npages as u64 * 4096, &pages, true);
        assert_eq!(big.pbl_level(), 2);
        assert!(dev.resource_usage().pble_free < free_before - npages as u32);
        assert_eq!(big.pble_entry(262_144), Some(phys.paddr()));
        assert_eq!(big.pble_entry(3), Some(phys.paddr() + 4096));

        // WRITE 64 bytes to IOVA page 262143 (odd → physical page 1).
        let src = buf(1);
        let data = fill(&src, 3);
        let smr = reg(&dev, &pd, src.paddr(), 4096, &pages_of(&src), false);
        let sge = [Sge { addr: src.paddr(), length: 64, lkey: smr.lkey() }];
        let wr = signaled(9, write_op(262_143 * 4096 + 16, big.rkey()), &sge);
        q1.post_send(&[wr]).unwrap();
        let wc = poll_n(&mut cq, 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (9, WcStatus::Success), "{wc:?}");
        assert_eq!(read(&phys, 4096 + 16, 64), data[..64].to_vec(), "level-2 translation");
        assert_eq!(read(&phys, 16, 64), vec![0; 64], "even page untouched");
        drop(big);
        assert_eq!(dev.resource_usage().pble_free, free_before, "PBLEs returned");
    }
    assert_eq!(FakeHal::live_pages(), base);
}

#[test]
fn stale_rkey_after_rereg_is_rejected_and_the_qp_flushes() {
    leak_checked(|| {
        let (bar_a, _bar_b, da, db) = two_devices_with(Config::default(), Profile::SMALL);
        let (pa, pb) = (da.alloc_pd().unwrap(), db.alloc_pd().unwrap());
        let (mut ca, _cb) = (da.create_cq(64).unwrap(), db.create_cq(64).unwrap());
        let mut qa = create_qp(&da, &pa, &ca, 16);
        let mut qb = create_qp(&db, &pb, &_cb, 16);
        let na = qa.qp_num();
        connect_both(&mut qa, A, &mut qb, B);
        let src = buf(1);
        let data = fill(&src, 5);
        let smr = reg(&da, &pa, src.paddr(), 4096, &pages_of(&src), false);
        let dst = buf(1);
        let mut dmr = reg(&db, &pb, dst.paddr(), 4096, &pages_of(&dst), false);
        let old = dmr.rkey();
        dmr.rereg().unwrap();
        assert_ne!(dmr.rkey(), old, "key byte rotated");
        assert_eq!(dmr.rkey() >> 8, old >> 8, "same index");

        let sge = [Sge { addr: src.paddr(), length: 32, lkey: smr.lkey() }];
        let write =
            |id, rkey| signaled(id, WrOpcode::RdmaWrite { remote_addr: dst.paddr(), rkey }, &sge);
        // The current key works.
        qa.post_send(&[write(1, dmr.rkey())]).unwrap();
        let wc = poll_n(&mut ca, 1);
        assert_eq!(wc[0].status, WcStatus::Success);
        assert_eq!(read(&dst, 0, 32), data[..32].to_vec());
        assert!(dst.write_bytes(0, &[0u8; 32]));

        // The stale key is refused by the responder; a receive is queued too.
        let rsge = [Sge { addr: src.paddr() + 1024, length: 64, lkey: smr.lkey() }];
        qa.post_recv(&[RecvWr { wr_id: 50, sg_list: &rsge }]).unwrap();
        qa.post_send(&[write(2, old), write(3, dmr.rkey())]).unwrap();
        let mut ev = [NO_EVENT; 8];
        let n = da.poll_async_events(&mut ev);
        assert!(n >= 1, "an AE for the requester");
        let e = ev[..n].iter().find(|e| e.id == na).expect("AE names QP A");
        assert_eq!(e.kind, irdma::aeq::AsyncEventKind::QpAccessError, "{e:?}");
        assert!(e.moved_to_error);
        assert_eq!(qa.state(), QpState::Error);
        assert_eq!(read(&dst, 0, 32), vec![0u8; 32], "nothing written with the stale key");

        // Every outstanding WR completes exactly once: WRITE 2 and 3, RECV 50.
        let wc = poll_n(&mut ca, 3);
        let mut ids: Vec<u64> = wc.iter().map(|w| w.wr_id).collect();
        ids.sort();
        assert_eq!(ids, vec![2, 3, 50], "{wc:?}");
        assert!(wc.iter().all(|w| w.status != WcStatus::Success));
        let first = wc.iter().find(|w| w.wr_id == 2).unwrap();
        assert_eq!(first.status, WcStatus::RemAccessErr, "the failing WR carries the AE's code");
        let mut more = [empty_wc(); 4];
        assert_eq!(ca.poll(&mut more), 0, "nothing twice");

        // Posts after the error complete as flushed, once.
        qa.post_send(&[write(4, dmr.rkey())]).unwrap();
        let wc = poll_n(&mut ca, 1);
        assert_eq!((wc.len(), wc[0].wr_id, wc[0].status), (1, 4, WcStatus::WrFlushErr));
        assert_eq!(ca.poll(&mut more), 0);
        // Moving the QP to ERROR again flushes nothing twice (ctrl.c:
        // irdma_sc_qp_flush_wqes: -EALREADY for queues already flushed).
        let _ = qa.modify(&QpAttr::new(QpState::Error));
        let flushes = bar_a.with_device(|d| {
            d.trace().filter(|e| matches!(e, mock_bar::Event::CqpOp { opcode: 0x22, .. })).count()
        });
        assert_eq!(flushes, 1, "one FLUSH_WQES for QP A");
    });
}

#[test]
fn modify_to_error_flushes_every_outstanding_wr_exactly_once() {
    with_small_device(|_, dev| {
        let pd = dev.alloc_pd().unwrap();
        let (mut scq, mut rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
        let (mut q1, _q2) = loopback_pair_on(dev, &pd, (&scq, &rcq), 16);
        let n1 = q1.qp_num();
        let b = buf(1);
        let mr = reg(dev, &pd, b.paddr(), 4096, &pages_of(&b), false);
        let sge = [Sge { addr: b.paddr(), length: 16, lkey: mr.lkey() }];
        for id in 10..13 {
            q1.post_recv(&[RecvWr { wr_id: id, sg_list: &sge }]).unwrap();
        }
        // q2 has no receive posted: the SENDs stall on RNR (retry forever).
        let send = |id, flags| SendWr { wr_id: id, opcode: WrOpcode::Send, flags, sg_list: &sge };
        q1.post_send(&[
            send(1, SendFlags::SIGNALED),
            send(2, SendFlags::NONE),
            send(3, SendFlags::SIGNALED),
        ])
        .unwrap();
        let mut wc = [empty_wc(); 16];
        assert_eq!(scq.poll(&mut wc), 0, "stalled");
        q1.modify(&QpAttr::new(QpState::Error)).unwrap();
        assert_eq!(q1.state(), QpState::Error);
        let s = poll_n(&mut scq, 3);
        let r = poll_n(&mut rcq, 3);
        let ids = |v: &[WorkCompletion]| {
            let mut x: Vec<u64> = v.iter().map(|w| w.wr_id).collect();
            x.sort();
            x
        };
        assert_eq!(ids(&s), vec![1, 2, 3], "sends on the send CQ: {s:?}");
        assert_eq!(ids(&r), vec![10, 11, 12], "receives on the receive CQ: {r:?}");
        assert!(
            s.iter().chain(r.iter()).all(|w| w.status == WcStatus::WrFlushErr && w.qp_num == n1)
        );
        assert!(r.iter().all(|w| w.opcode == WcOpcode::Recv));
        assert_eq!(scq.poll(&mut wc), 0);
        assert_eq!(rcq.poll(&mut wc), 0);
        // In ERROR a post completes as flushed, on its own CQ, once.
        q1.post_recv(&[RecvWr { wr_id: 20, sg_list: &sge }]).unwrap();
        q1.post_send(&[send(21, SendFlags::SIGNALED)]).unwrap();
        let r = poll_n(&mut rcq, 1);
        let s = poll_n(&mut scq, 1);
        assert_eq!((r.len(), r[0].wr_id, s.len(), s[0].wr_id), (1, 20, 1, 21));
        assert_eq!(scq.poll(&mut wc) + rcq.poll(&mut wc), 0);
        // INIT after a hardware error is refused: only destroy remains.
        assert_eq!(q1.modify(&QpAttr::new(QpState::Init)), Err(VerbsError::InvalidState));
    });
}

#[test]
fn create_limits_and_written_back_caps() {
    with_small_device(|_, dev| {
        let (pd, cq) = pd_cq(dev, 8);
        let usage = dev.resource_usage();
        let mk = |c: QpCap| {
            let mut a = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap: c };
            dev.create_qp(&pd, &mut a).map(|q| (a.cap, q.cap()))
        };
        let c = QpCap { max_inline_data: 40, ..qp_cap(5, 3, 3, 2) };
        let (written, held) = mk(c).unwrap();
        assert_eq!(written, held);
        assert!(written.max_send_wr >= 5 && written.max_recv_wr >= 3);
        assert!(
            written.max_send_sge >= 3 && written.max_recv_sge >= 2 && written.max_inline_data >= 40
        );
        for (bad, what) in [
            (QpCap { max_send_sge: 14, ..c }, "max_send_sge"),
            (QpCap { max_recv_sge: 14, ..c }, "max_recv_sge"),
            (QpCap { max_inline_data: 102, ..c }, "max_inline_data"),
            (QpCap { max_send_wr: 40_000, ..c }, "max_send_wr"),
            (QpCap { max_recv_wr: 40_000, ..c }, "max_recv_wr"),
        ] {
            match mk(bad) {
                Err(VerbsError::AboveLimit { what: w, .. }) => assert_eq!(w, what),
                other => panic!("{what}: {:?}", other.map(|x| x.0)),
            }
        }
        assert!(matches!(dev.create_cq(1 << 20), Err(VerbsError::AboveLimit { .. })));
        assert!(matches!(dev.alloc_mr(&pd, 262_145), Err(VerbsError::AboveLimit { .. })));
        assert_eq!(dev.resource_usage(), usage, "refusals take nothing");
    });
}

#[test]
fn create_wq_rounds_up_and_a_qp_receives_through_it() {
    use irdma::verbs::{WqInitAttr, WqType};
    with_small_device(|_, dev| {
        let (pd, mut cq) = pd_cq(dev, 64);
        let mut wa = WqInitAttr { wq_type: WqType::Rq, max_wr: 5, max_sge: 3, cq: &cq };
        let mut wq = dev.create_wq(&mut wa).unwrap();
        assert!(wa.max_wr >= 5 && wa.max_sge >= 3, "written back, never smaller");
        assert_eq!((wq.max_wr(), wq.max_sge()), (wa.max_wr, wa.max_sge));
        for (bad_wr, bad_sge, what) in [(40_000, 1, "max_wr"), (4, 14, "max_sge")] {
            let mut a =
                WqInitAttr { wq_type: WqType::Rq, max_wr: bad_wr, max_sge: bad_sge, cq: &cq };
            match dev.create_wq(&mut a) {
                Err(VerbsError::AboveLimit { what: w, .. }) => assert_eq!(w, what),
                other => panic!("{what}: {:?}", other.err()),
            }
        }
        let rb = buf(1);
        let rmr = reg(dev, &pd, rb.paddr(), 4096, &pages_of(&rb), false);
        let s0 = [Sge { addr: rb.paddr(), length: 100, lkey: rmr.lkey() }];
        let s1 = [Sge { addr: rb.paddr() + 2048, length: 100, lkey: rmr.lkey() }];
        wq.post_recv(&[RecvWr { wr_id: 70, sg_list: &s0 }, RecvWr { wr_id: 71, sg_list: &s1 }])
            .unwrap();
        let mut a = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap: cap(8) };
        let mut q1 = dev.create_qp_on_wq(&pd, &mut a, wq).unwrap();
        assert_eq!(a.cap.max_recv_wr, wa.max_wr);
        let mut q2 = create_qp(dev, &pd, &cq, 8);
        connect_both(&mut q1, A, &mut q2, A);
        let sb = buf(1);
        let data = fill(&sb, 9);
        let smr = reg(dev, &pd, sb.paddr(), 4096, &pages_of(&sb), false);
        let sge = [Sge { addr: sb.paddr(), length: 60, lkey: smr.lkey() }];
        let w = |id| signaled(id, WrOpcode::Send, &sge);
        q2.post_send(&[w(1), w(2)]).unwrap();
        let wc = poll_n(&mut cq, 4);
        let recvs: Vec<_> = wc
            .iter()
            .filter(|c| c.opcode == WcOpcode::Recv)
            .map(|c| (c.wr_id, c.byte_len))
            .collect();
        assert_eq!(recvs, vec![(70, 60), (71, 60)], "{wc:?}");
        assert_eq!(read(&rb, 0, 60), data[..60].to_vec());
        assert_eq!(read(&rb, 2048, 60), data[..60].to_vec());
    });
}

#[test]
fn ipv6_path_and_cq_arming() {
    let _g = lock();
    let (bar, dev) = one_device(small_fn_config(), Profile::SMALL);
    let (pd, mut cq, mut q1, mut q2) = two_qps_one_cq(&dev);
    let ip = |last| {
        let mut a = [0u8; 16];
        a[0] = 0xfd;
        a[15] = last;
        IpAddr::V6(a)
    };
    q1.modify(&QpAttr::new(QpState::Init)).unwrap();
    q2.modify(&QpAttr::new(QpState::Init)).unwrap();
    let (n1, n2) = (q1.qp_num(), q2.qp_num());
    for (q, peer_qpn, me, other) in [(&mut q1, n2, 1u8, 2u8), (&mut q2, n1, 2, 1)] {
        let mut rtr = QpAttr::new(QpState::Rtr);
        rtr.dest_qp = peer_qpn;
        rtr.path_mtu = 4096;
        rtr.av = Some(AddressVector {
            dest_mac: A.mac,
            dest_ip: ip(other),
            src_ip: ip(me),
            hop_limit: 8,
            traffic_class: 0x10,
            flow_label: 0x12345,
            vlan: Some(100),
        });
        q.modify(&rtr).unwrap();
        q.modify(&QpAttr::new(QpState::Rts)).unwrap();
    }
    // Mixed families are refused before anything reaches the device.
    let mut bad = QpAttr::new(QpState::Rtr);
    bad.av = Some(AddressVector {
        dest_mac: A.mac,
        dest_ip: IpAddr::V4(A.ip),
        src_ip: ip(1),
        hop_limit: 8,
        traffic_class: 0,
        flow_label: 0,
        vlan: None,
    });
    let mut q3 = create_qp(&dev, &pd, &cq, 4);
    q3.modify(&QpAttr::new(QpState::Init)).unwrap();
    assert!(matches!(q3.modify(&bad), Err(VerbsError::Invalid { .. })));
    assert_eq!(q3.modify(&QpAttr::new(QpState::Rts)), Err(VerbsError::InvalidState));

    let b = buf(1);
    let mr = reg(&dev, &pd, b.paddr(), 4096, &pages_of(&b), false);
    let rs = [Sge { addr: b.paddr() + 2048, length: 64, lkey: mr.lkey() }];
    q2.post_recv(&[RecvWr { wr_id: 5, sg_list: &rs }]).unwrap();
    cq.req_notify(false);
    let ceqes = bar.with_device(|d| d.counters().ceqes);
    let ss = [Sge { addr: b.paddr(), length: 64, lkey: mr.lkey() }];
    q1.post_send(&[signaled(6, WrOpcode::Send, &ss)]).unwrap();
    let wc = poll_n(&mut cq, 2);
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    assert_eq!(bar.with_device(|d| d.counters().ceqes), ceqes + 1, "one CEQE for the armed CQ");
}

#[test]
fn cq_overflow_is_an_async_cq_error() {
    use irdma::aeq::AsyncEventKind;
    let _g = lock();
    let bar = ModelBar::standalone(small_fn_config());
    // the fourth CQE overflows the CQ and is dropped, by design
    bar.expect_counter(ErrorCounter::CqesDropped);
    let dev = probe_as(&bar, A, Profile::SMALL);
    let pd = dev.alloc_pd().unwrap();
    let big_cq = dev.create_cq(64).unwrap();
    let mut tiny = dev.create_cq(1).unwrap(); // (1 + 1) × 2 = 4 slots
    let mut a = QpInitAttr { send_cq: &tiny, recv_cq: &big_cq, cap: cap(8) };
    let mut q1 = dev.create_qp(&pd, &mut a).unwrap();
    let mut q2 = create_qp(&dev, &pd, &big_cq, 8);
    connect_both(&mut q1, A, &mut q2, A);
    let b = buf(1);
    let mr = reg(&dev, &pd, b.paddr(), 4096, &pages_of(&b), false);
    let sge = [Sge { addr: b.paddr(), length: 8, lkey: mr.lkey() }];
    let w = |id| signaled(id, write_op(b.paddr() + 1024, mr.rkey()), &sge);
    let mut ev = [NO_EVENT; 4];
    q1.post_send(&[w(1), w(2), w(3)]).unwrap();
    assert_eq!(dev.poll_async_events(&mut ev), 0, "three CQEs fit");
    q1.post_send(&[w(4)]).unwrap();
    let n = dev.poll_async_events(&mut ev);
    assert_eq!(n, 1);
    assert_eq!((ev[0].kind, ev[0].ae_code, ev[0].id), (AsyncEventKind::CqError, 0x0203, tiny.id()));
    assert!(!ev[0].moved_to_error);
    assert_eq!(dev.poll_async_events(&mut ev), 0, "consumed once");
    // The CQ is dead (issue #35): the three CQEs in its ring, then WR 4,
    // whose CQE was never written, flushed in software — every WR once.
    assert!(tiny.is_dead());
    let wc = poll_n(&mut tiny, 4);
    let got: Vec<(u64, WcStatus)> = wc.iter().map(|w| (w.wr_id, w.status)).collect();
    let ok = WcStatus::Success;
    assert_eq!(got, vec![(1, ok), (2, ok), (3, ok), (4, WcStatus::WrFlushErr)]);
    assert_eq!(poll_n(&mut tiny, 1).len(), 0, "then nothing");
}

#[test]
fn bad_mr_requests_are_refused_without_taking_anything() {
    let _g = lock();
    let (_bar, dev) = one_device(small_fn_config(), Profile::SMALL);
    let pd = dev.alloc_pd().unwrap();
    let b = buf(2);
    let pages = pages_of(&b);
    let usage = dev.resource_usage();
    let d = MrDesc {
        iova: 0x1000,
        length: 8192,
        page_size: PageSize::Size4K,
        pages: &pages,
        zero_based: false,
        access: Access::LOCAL_WRITE,
    };
    let unaligned = [pages[0] + 8, pages[1]];
    let cases: [(MrDesc<'_>, &str); 5] = [
        (MrDesc { length: 0, ..d }, "empty"),
        (MrDesc { pages: &[], ..d }, "no pages"),
        (MrDesc { iova: 0x1800, ..d }, "too few pages for the offset"),
        (MrDesc { pages: &unaligned, ..d }, "unaligned page"),
        (MrDesc { length: (1 << 45) + 1, ..d }, "above 2^45"),
    ];
    // Each descriptor below is refused before REG_MR is posted (asserted),
    // so no address reaches the device; and the device is the in-process
    // model, which only touches live `FakeHal` allocations anyway.
    let try_reg = |d: &MrDesc<'_>| {
        // SAFETY: see above.
        unsafe { dev.reg_mr(&pd, d) }.err()
    };
    for (c, what) in cases {
        assert!(try_reg(&c).is_some(), "{what}");
    }
    let long = MrDesc { length: (1 << 45) + 1, ..d };
    assert_eq!(try_reg(&long), Some(VerbsError::TooLong { length: (1 << 45) + 1 }));
    let atomic = MrDesc { access: Access::REMOTE_ATOMIC, ..d };
    assert!(matches!(try_reg(&atomic), Some(VerbsError::Access(_))));
    let remote_only = MrDesc { access: Access::REMOTE_WRITE, ..d };
    assert!(matches!(try_reg(&remote_only), Some(VerbsError::Access(_))));
    // More PBLEs than the pool has.
    let huge: Vec<u64> = (0..2_000_000u64).map(|i| (i % 2 + 1) * 4096).collect();
    let huge_d = MrDesc { iova: 0, length: 2_000_000 * 4096, pages: &huge, ..d };
    let e = try_reg(&huge_d);
    assert!(matches!(e, Some(VerbsError::Pble(_))), "{e:?}");
    assert_eq!(dev.resource_usage(), usage, "nothing taken");
    // SAFETY: `pages` are those of `b`, which outlives `ok` (declared
    // before it); the model only touches live `FakeHal` allocations.
    let ok = unsafe { dev.reg_mr(&pd, &d) }.unwrap();
    assert_eq!(ok.pbl_level(), 0);
}

/// The responder has no receive posted: RNR NAKs until the requester's
/// RNR budget (1) is spent, then LLP_TOO_MANY_RNRS. Both ends agree on the
/// PSNs (the model checks them strictly), so nothing but the missing
/// receive stops the SENDs.
#[test]
fn rnr_retries_exhausted_is_a_fatal_qp_event() {
    use irdma::aeq::AsyncEventKind;
    let _g = lock();
    let (bar, dev) = one_device(small_fn_config(), Profile::SMALL);
    let (pd, mut cq, mut q1, mut q2) = two_qps_one_cq(&dev);
    let (n1, n2) = (q1.qp_num(), q2.qp_num());
    connect(&mut q2, A, A, n1).unwrap();
    q1.modify(&QpAttr::new(QpState::Init)).unwrap();
    // the same PSNs as `connect` gives q2 (`rtr_attr`, `rts_attr`): the RNR
    // condition comes from the missing receive alone, not from a PSN the
    // responder would drop
    q1.modify(&rtr_attr(A, A, n2)).unwrap();
    let mut rts = rts_attr();
    rts.rnr_retry = 1;
    q1.modify(&rts).unwrap();
    let b = buf(1);
    let mr = reg(&dev, &pd, b.paddr(), 4096, &pages_of(&b), false);
    let sge = [Sge { addr: b.paddr(), length: 8, lkey: mr.lkey() }];
    let send = |id| signaled(id, WrOpcode::Send, &sge);
    // q2 never posts a receive: RNR NAKs until the retry budget is spent.
    q1.post_send(&[send(1), send(2)]).unwrap();
    let mut ev = [NO_EVENT; 4];
    let mut got = None;
    for _ in 0..20 {
        bar.fabric().step();
        let n = dev.poll_async_events(&mut ev);
        if let Some(e) = ev[..n].iter().find(|e| e.id == n1) {
            got = Some(*e);
            break;
        }
    }
    let e = got.expect("an AE for q1");
    assert_eq!((e.kind, e.ae_code), (AsyncEventKind::QpFatal, 0x050F), "{e:?}");
    assert!(e.moved_to_error);
    let wc = poll_n(&mut cq, 2);
    assert_eq!(wc.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![1, 2], "{wc:?}");
    assert_eq!(wc[0].status, WcStatus::RnrRetryExcErr, "the failing WR carries the AE's code");
    assert_eq!(wc[1].status, WcStatus::WrFlushErr);
    let mut more = [empty_wc(); 4];
    assert_eq!(cq.poll(&mut more), 0);
}

/// `ib_resize_cq` (verbs.c: irdma_resize_cq, MODIFY_CQ): completions left in
/// the old ring come first and exactly once, then the new ring carries more
/// traffic than the old one could hold; the old ring is retired and freed.
#[test]
fn resize_cq_delivers_pending_cqes_once_then_uses_the_new_ring() {
    with_small_device(|bar, dev| {
        let pd = dev.alloc_pd().unwrap();
        // 4 completions → a ring of 10 entries.
        let mut cq = dev.create_cq(4).unwrap();
        let mut qp = self_connected_qp(dev, &pd, &cq, 32);
        let b = buf(1);
        let mr = reg(dev, &pd, b.paddr(), 4096, &pages_of(&b), false);
        let sge = [Sge { addr: b.paddr(), length: 8, lkey: mr.lkey() }];
        let write = |id| signaled(id, write_op(b.paddr() + 64, mr.rkey()), &sge);
        for id in 1..=3 {
            qp.post_send(&[write(id)]).unwrap();
        }
        let prod = bar.with_device(|d| d.cq(cq.id()).map(|c| c.prod));
        assert_eq!(prod, Some(3), "three CQEs sit in the old ring");
        assert_eq!(
            cq.resize(0),
            Err(VerbsError::AboveLimit {
                what: irdma::verbs::Quantity::Cqe,
                requested: 0,
                max: 524_286
            })
        );
        assert!(matches!(cq.resize(600_000), Err(VerbsError::AboveLimit { .. })));
        assert_eq!(cq.resize(4), Ok(()), "same size: nothing to do");
        assert_eq!(cq.pending_resizes(), 0);
        cq.resize(64).unwrap();
        assert_eq!((cq.cqe(), cq.pending_resizes()), (64, 1));
        // Pending completions: from the old ring, in order, once.
        let mut wc = [empty_wc(); 2];
        assert_eq!(cq.poll(&mut wc), 2);
        assert_eq!((wc[0].wr_id, wc[1].wr_id), (1, 2));
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!(wc[0].wr_id, 3);
        assert_eq!(wc[0].status, WcStatus::Success);
        // More traffic than the old ring held: all of it in the new ring.
        for id in 10..30 {
            qp.post_send(&[write(id)]).unwrap();
        }
        let got = poll_n(&mut cq, 20);
        let ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, (10..30).collect::<Vec<u64>>());
        assert!(got.iter().all(|w| w.status == WcStatus::Success));
        assert_eq!(cq.pending_resizes(), 0, "the old ring is retired");
        let mut wc = [empty_wc(); 4];
        assert_eq!(cq.poll(&mut wc), 0, "nothing delivered twice");
        // The model saw one resize, and the next arm reports one retired
        // ring in SW_CQ_SELECT (uk.c: irdma_uk_cq_set_resized_cnt).
        assert_eq!(bar.with_device(|d| d.cq(cq.id()).map(|c| (c.resizes, c.size))), Some((1, 130)));
        cq.req_notify(false);
        let id = cq.id();
        let word = bar.with_device(|d| {
            d.trace()
                .filter_map(|e| match e {
                    mock_bar::Event::CqArm { cq, word } if *cq == id => Some(*word),
                    _ => None,
                })
                .last()
        });
        assert_eq!(word.map(|w| w & 0x3fff), Some(1), "SW_CQ_SELECT after one resize");
    });
}

/// A QP destroyed while its completions are still in a shared CQ: its CQEs
/// are dropped as the vendor's poll drops them (context of a destroyed QP:
/// -EFAULT, skipped), and the other QP's completions all arrive, in order.
#[test]
fn destroyed_qp_cqes_are_dropped_and_other_qps_lose_nothing() {
    with_small_device(|_, dev| {
        let pd = dev.alloc_pd().unwrap();
        let (mut scq, rcq) = (dev.create_cq(64).unwrap(), dev.create_cq(64).unwrap());
        let (mut q1, mut q2) = loopback_pair_on(dev, &pd, (&scq, &rcq), 16);
        let n2 = q2.qp_num();
        let b = buf(1);
        let mr = reg(dev, &pd, b.paddr(), 4096, &pages_of(&b), false);
        let sge = [Sge { addr: b.paddr(), length: 16, lkey: mr.lkey() }];
        let write = |id| signaled(id, write_op(b.paddr() + 512, mr.rkey()), &sge);
        // Interleaved completions of both QPs in the send CQ.
        for i in 0..3 {
            q1.post_send(&[write(100 + i)]).unwrap();
            q2.post_send(&[write(200 + i)]).unwrap();
        }
        q1.destroy().unwrap();
        let got = poll_n(&mut scq, 3);
        let ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, vec![200, 201, 202], "q2's completions, none of q1's");
        assert!(got.iter().all(|w| w.status == WcStatus::Success && w.qp_num == n2));
        let mut wc = [empty_wc(); 4];
        assert_eq!(scq.poll(&mut wc), 0);
        assert_eq!(scq.unlisted_qp(), None);
    });
}

/// `Cq::resize` while old rings are still pending: at most
/// `MAX_PENDING_RESIZES`, then `InvalidState`; polling retires them all.
#[test]
fn resize_cq_pending_rings_are_bounded() {
    with_small_device(|bar, dev| {
        let (pd, mut cq) = pd_cq(dev, 4);
        let mut qp = self_connected_qp(dev, &pd, &cq, 8);
        // A refused MODIFY_CQ (Linux: -EPROTO) leaves the CQ as it was.
        let pages = FakeHal::live_pages();
        bar.with_device(|d| d.faults().fail_cqp_op = Some((0, 0x8000, 0x0001)));
        assert!(matches!(cq.resize(32), Err(VerbsError::Cqp(_))));
        assert_eq!((cq.cqe(), cq.pending_resizes()), (4, 0));
        assert_eq!(FakeHal::live_pages(), pages, "the new ring was freed");
        let max = irdma::verbs::MAX_PENDING_RESIZES as u32;
        for i in 0..max {
            cq.resize(8 + i).unwrap();
        }
        assert_eq!(cq.pending_resizes(), max as usize);
        assert_eq!(cq.resize(100), Err(VerbsError::InvalidState));
        assert_eq!(cq.cqe(), 8 + max - 1, "the refused resize changed nothing");
        // A completion on the current ring retires every old ring.
        let b = buf(1);
        let mr = reg(dev, &pd, b.paddr(), 4096, &pages_of(&b), false);
        let sge = [Sge { addr: b.paddr(), length: 8, lkey: mr.lkey() }];
        let wr = signaled(7, write_op(b.paddr() + 64, mr.rkey()), &sge);
        qp.post_send(&[wr]).unwrap();
        let got = poll_n(&mut cq, 1);
        assert_eq!(got.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![7]);
        assert_eq!(cq.pending_resizes(), 0);
        cq.resize(100).unwrap();
    });
}

/// Issue #12: a CQ or PD dropped while a QP (or MR) still uses it. An
/// explicit destroy is refused with a typed error; `Drop` defers: the CQ is
/// destroyed and the PD id freed when the last user goes, nothing leaks and
/// nothing is freed while the device may use it.
#[test]
fn dropping_a_cq_or_pd_under_a_live_qp_defers_until_the_qp_goes() {
    let _g = lock();
    let base = FakeHal::live_pages();
    let (bar, dev) = default_device();
    let usage = dev.resource_usage();
    let b = buf(1);
    let (pd, mut cq) = pd_cq(&dev, 8);
    let qp = create_qp(&dev, &pd, &cq, 16);
    let mr = reg(&dev, &pd, b.paddr(), 4096, &pages_of(&b), false);
    let cq_id = cq.id();
    // Send and receive queue both complete here: two users.
    assert_eq!(
        cq.destroy(),
        Err(VerbsError::InUse { what: irdma::verbs::Quantity::CqWithLiveQps, users: 2 })
    );
    let live = FakeHal::live_pages();
    drop(cq);
    drop(pd);
    assert!(bar.with_device(|d| d.cq(cq_id).is_some()), "the CQ still exists for the device");
    assert_eq!(FakeHal::live_pages(), live, "its ring is not freed while the QP lives");
    assert_eq!(dev.resource_usage().pds, usage.pds + 1, "the PD id is not reused");
    drop(qp);
    assert!(bar.with_device(|d| d.cq(cq_id).is_none()), "destroyed with its last QP");
    assert_eq!(dev.resource_usage().pds, usage.pds + 1, "the MR still uses the PD");
    drop(mr);
    assert_eq!(dev.resource_usage(), usage, "PD and CQ ids back");
    let f = dev.footprint();
    assert!(!f.needs_reset && f.quarantined == Default::default(), "{f:?}");
    dev.close().unwrap();
    drop(b);
    assert_eq!(FakeHal::live_pages(), base, "nothing leaked");
}
