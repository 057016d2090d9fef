//! The Linux 6.1 host's sequences (spec `nvme-rdma-target.md` §5.1, §6,
//! §7, §8) against the command layer, through a fake transport.

mod fake;

use fake::*;
use irdma_nvmet::ctrl::TrAddr;
use irdma_nvmet::{Commands, Event, QueueId};

/// §5.1 steps 2–13 for an I/O controller with 4 I/O queues (in-capsule
/// I/O Connects, as the host sends them when SGLS bit 20 and IOCCSZ allow).
#[test]
fn bring_up_io_controller_with_four_io_queues() {
    let mut f = Fake::new(4096, 4);
    f.open(100, 0, 32);
    // 2. Connect QID 0, SQSIZE 31, KATO 5000, CNTLID 0xFFFF, data via 0x4F.
    let r = f.connect_admin(100, SUBNQN, 5000);
    assert!(r.ok(), "{r:?}");
    let cntlid = r.dw0 as u16;
    assert!((1..=0xFFEF).contains(&cntlid));
    assert_eq!(r.dw0 >> 16, 0, "DW0 upper bits 0 (no AUTHREQ)");
    assert_eq!(r.invalidate, Some(HOST_KEY), "0x4F data: SEND_WITH_INVALIDATE of its key");
    // 3. CAP, CC EN 0, CC, CAP, CC EN 1, CSTS.
    let cap = f.prop_get(100, 0x00, true);
    assert_eq!(u64::from(cap.dw0) | (u64::from(cap.dw1) << 32), 0x0000_0020_0F00_007F);
    assert!(f.prop_set(100, 0x14, 0x0046_0000).ok());
    assert_eq!(f.prop_get(100, 0x14, false).dw0, 0x0046_0000);
    assert!(f.prop_get(100, 0x00, true).ok());
    assert_eq!(f.prop_get(100, 0x1C, false).dw0 & 1, 0, "not ready before EN");
    assert!(f.prop_set(100, 0x14, 0x0046_0001).ok());
    assert_eq!(f.prop_get(100, 0x1C, false).dw0, 1, "CSTS.RDY, no CFS");
    // 4. VS 1.3.
    assert_eq!(f.prop_get(100, 0x08, false).dw0, 0x0001_0300);
    // 5. Identify Controller.
    let (r, id) = f.identify(100, 0x01, 0);
    assert!(r.ok());
    assert_eq!(r.invalidate, Some(HOST_KEY));
    assert_eq!(get16(&id, 78), cntlid, "CNTLID = Connect result");
    assert_eq!(get32(&id, 80), 0x0001_0300, "VER");
    assert_eq!(id[77], 8, "MDTS");
    assert_eq!(id[111], 1, "CNTRLTYPE I/O");
    assert_ne!(get16(&id, 320), 0, "KAS");
    assert!(get16(&id, 514) >= 128, "MAXCMD");
    assert_eq!(get32(&id, 516), 1, "NN");
    assert_eq!(get32(&id, 536) & 0x4, 0x4, "SGLS keyed");
    assert_eq!(get32(&id, 536) & (1 << 20), 1 << 20, "SGLS in-capsule offsets");
    assert_eq!(get32(&id, 1792), (64 + 4096) / 16, "IOCCSZ");
    assert_eq!(get32(&id, 1796), 1, "IORCSZ");
    assert_eq!(get16(&id, 1800), 0, "ICDOFF");
    assert_eq!(id[1803], 1, "MSDBD");
    assert_eq!((id[512], id[513]), (0x66, 0x44), "SQES/CQES");
    assert_eq!(id[525] & 1, 1, "VWC");
    assert_eq!(get16(&id, 520) & (1 << 3), 1 << 3, "ONCS Write Zeroes");
    assert_eq!(get32(&id, 92) & (1 << 8), 1 << 8, "OAES NS attribute notices");
    assert_eq!((id[76], id[261]), (0, 0), "CMIC 0, LPA 0");
    assert_eq!(&id[768..768 + SUBNQN.len()], SUBNQN.as_bytes());
    assert_eq!(id[768 + SUBNQN.len()], 0);
    assert_eq!(&id[4..13], b"IRDMA0001");
    assert_eq!(id[13], b' ', "SN space padded");
    // 9. SMART log, 512 B, NSID 0xFFFFFFFF.
    let (r, smart) = f.log(100, 0x02, 0xFFFF_FFFF, 512, 0, false);
    assert!(r.ok());
    assert!(smart.iter().all(|&b| b == 0));
    // 10. Set Features 07h: 4 queues asked (0's based 3/3) → granted 4.
    let r = f.set_features(100, 0x07, 0x0003_0003);
    assert!(r.ok());
    assert_eq!(r.dw0, 0x0003_0003);
    // 11. Four I/O queues, each its own CM connection and Connect.
    for qid in 1..=4u16 {
        f.open(100 + qid, qid, 128);
        let r = f.connect_io_inline(100 + qid, qid, cntlid);
        assert!(r.ok(), "qid {qid}: {r:?}");
        assert_eq!(r.dw0 as u16, cntlid);
        assert_eq!(r.sqid, qid);
        assert_eq!(r.invalidate, None, "in-capsule: plain SEND");
    }
    // 12. Set Features 0Bh with OAES's bit 8, then one AER (CID 31), held.
    assert!(f.set_features(100, 0x0B, 1 << 8).ok());
    let aer = sqe(0x0C, 31, 0);
    assert!(matches!(f.run(100, &aer), Outcome::Held));
    // 13. Scan: CNS 06h CSI 0, 02h NSID 0, 03h NSID 1, 00h NSID 1.
    let (r, _) = f.identify(100, 0x06, 0);
    assert!(r.ok());
    let (r, list) = f.identify(100, 0x02, 0);
    assert!(r.ok());
    assert_eq!((get32(&list, 0), get32(&list, 4)), (1, 0), "NSID 1 then the terminator");
    let (r, desc) = f.identify(100, 0x03, 1);
    assert!(r.ok(), "CNS 03h must succeed (VS 1.3)");
    assert_eq!(desc[1], 0, "first NIDL 0: no identifiers");
    let (r, ns) = f.identify(100, 0x00, 1);
    assert!(r.ok());
    let nsze = (DISK_BYTES / 512) as u64;
    assert_eq!((get64(&ns, 0), get64(&ns, 8), get64(&ns, 16)), (nsze, nsze, nsze));
    assert_eq!((ns[25], ns[26], ns[130]), (0, 0, 9), "NLBAF 0, FLBAS 0, LBADS 9");
    let (r, ns2) = f.identify(100, 0x00, 2);
    assert!(r.ok(), "inactive NSID: zeros, success");
    assert!(ns2.iter().all(|&b| b == 0));
    // The partition scan's first Read, on every I/O queue.
    for q in 101..=104 {
        let (r, _) = f.read(q, 0, 8, true);
        assert!(r.ok());
    }
    // Keep Alive from the host's 2.5 s work.
    f.now += 2500;
    assert!(f.run(100, &sqe(0x18, 12, 0)).rsp().ok());
    assert!(f.poll_all().is_empty());
}

/// §6: `nvme discover`: KATO 0 connect, enable, Identify, the 1024-byte
/// header (RAE 1), then the whole log in pieces using LPO; GENCTR stable.
#[test]
fn discovery_sequence() {
    let mut f = Fake::new(0, 4);
    f.open(7, 0, 32);
    let r = f.connect_admin(7, DISC, 0);
    assert!(r.ok());
    f.enable(7);
    let (r, id) = f.identify(7, 0x01, 0);
    assert!(r.ok());
    assert_eq!(id[111], 2, "CNTRLTYPE discovery");
    assert_eq!(id[77], 0, "MDTS 0");
    assert_eq!(&id[768..768 + DISC.len()], DISC.as_bytes(), "the well-known NQN");
    let (r, hdr) = f.log(7, 0x70, 0, 1024, 0, true);
    assert!(r.ok());
    let genctr = get64(&hdr, 0);
    let numrec = get64(&hdr, 8);
    assert_eq!(numrec, 2);
    assert_eq!(get16(&hdr, 16), 0, "RECFMT");
    // header + NUMREC × 1024 in pieces of 1024 bytes, by LPO.
    let total = 1024 * (1 + numrec as usize);
    let mut log = Vec::new();
    for lpo in (0..total).step_by(1024) {
        let (r, piece) = f.log(7, 0x70, 0, 1024, lpo as u64, false);
        assert!(r.ok());
        log.extend_from_slice(&piece);
    }
    assert_eq!(get64(&log, 0), genctr, "GENCTR stable");
    let (_, again) = f.log(7, 0x70, 0, 4096, 0, false);
    assert_eq!(&again[..total], &log[..], "one piece = the pieces");
    assert!(again[total..].iter().all(|&b| b == 0), "bytes past the page are zero");
    for (i, (subtype, nqn)) in [(3u8, DISC), (2u8, SUBNQN)].into_iter().enumerate() {
        let e = &log[1024 * (i + 1)..1024 * (i + 2)];
        assert_eq!((e[0], e[1], e[2]), (1, 1, subtype), "TRTYPE RDMA, ADRFAM IPv4, SUBTYPE");
        assert_eq!(e[3], 0x04, "TREQ: not specified + SQ flow control disable supported");
        assert_eq!(get16(e, 4), 1, "PORTID");
        assert_eq!(get16(e, 6), 0xFFFF, "CNTLID");
        assert_eq!(get16(e, 8), 32, "ASQSZ");
        assert_eq!(&e[32..36], b"4420");
        assert!(e[36..64].iter().all(|&b| b == b' ' || b == 0));
        assert_eq!(&e[256..256 + nqn.len()], nqn.as_bytes());
        assert_eq!(e[256 + nqn.len()], 0);
        assert_eq!(&e[512..524], b"192.168.1.10");
        assert!(e[524..768].iter().all(|&b| b == b' ' || b == 0));
        assert_eq!((e[768], e[769], e[770]), (1, 1, 1), "QPTYPE RC, PRTYPE, CMS RDMA_IP_CM");
        assert_eq!(get16(e, 776), 0, "PKEY");
    }
    // Then CC.SHN and the CM disconnect.
    assert!(f.prop_set(7, 0x14, 0x0046_4001).ok());
    assert_eq!((f.prop_get(7, 0x1C, false).dw0 >> 2) & 3, 0b10, "SHST complete");
    f.t.queue_closed(QueueId(7));
    assert_eq!(f.t.controllers(), 0);
}

#[test]
fn discovery_traddr_ipv6() {
    let mut cfg = config(ram(1 << 20), 0, 1);
    cfg.traddr = TrAddr::V6([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x0a]);
    let mut f = Fake::with(cfg);
    f.open(7, 0, 32);
    assert!(f.connect_admin(7, DISC, 0).ok());
    f.enable(7);
    let (_, log) = f.log(7, 0x70, 0, 3072, 0, false);
    let addr = b"2001:db8:0:0:0:0:0:a";
    assert_eq!(log[1024 + 1], 2, "ADRFAM IPv6");
    assert_eq!(&log[1024 + 512..1024 + 512 + addr.len()], addr);
}

/// Writes of 512 B .. 1 MiB read back identical, through keyed SGLs, on
/// two queues; 0x4F answers with its key, 0x40 never.
#[test]
fn read_write_round_trips_through_the_ram_disk() {
    let (mut f, _) = live(0, 2);
    let mut lba = 0u64;
    for (i, size) in [512usize, 4096, 8192, 65536, 131072, 1 << 20].into_iter().enumerate() {
        let data: Vec<u8> = (0..size).map(|b| (b * 7 + i * 13) as u8).collect();
        let q = 101 + (i % 2) as u16;
        let w = f.write(q, lba, &data, true);
        assert!(w.ok(), "{w:?}");
        assert_eq!(w.invalidate, Some(HOST_KEY));
        let mut on_disk = vec![0u8; size];
        assert!(f.t.disk().read(lba * 512, &mut on_disk));
        assert_eq!(on_disk, data, "the RDMA READ landed in the namespace at SLBA");
        let (r, back) = f.read(q, lba, (size / 512) as u32, false);
        assert!(r.ok());
        assert_eq!(r.invalidate, None, "0x40: plain SEND");
        assert_eq!(back, data, "size {size}");
        lba += (size / 512) as u64;
    }
    // The last block of the namespace is reachable.
    let last = (DISK_BYTES / 512 - 1) as u64;
    assert!(f.write(101, last, &[0x5A; 512], false).ok());
    assert_eq!(f.read(101, last, 1, false).1, vec![0x5A; 512]);
}

#[test]
fn in_capsule_write_lands_in_the_namespace() {
    let (mut f, _) = live(8192, 1);
    let data: Vec<u8> = (0..4096).map(|i| (i % 251) as u8).collect();
    let mut s = Fake::rw_sqe(0x01, 40, 16, 8);
    set_inline(&mut s, 0, 4096);
    let mut cap = s.to_vec();
    cap.extend_from_slice(&data);
    let r = f.run(101, &cap).rsp();
    assert!(r.ok(), "{r:?}");
    assert_eq!(r.invalidate, None, "never invalidate for in-capsule data");
    assert_eq!(f.read(101, 16, 8, true).1, data);
    // At an offset inside the in-capsule area.
    let mut s = Fake::rw_sqe(0x01, 41, 100, 1);
    set_inline(&mut s, 512, 512);
    let mut cap = s.to_vec();
    cap.extend_from_slice(&[0u8; 512]);
    cap.extend_from_slice(&[0x77; 512]);
    assert!(f.run(101, &cap).rsp().ok());
    assert_eq!(f.read(101, 100, 1, true).1, vec![0x77; 512]);
}

#[test]
fn flush_and_write_zeroes() {
    let (mut f, _) = live(0, 1);
    assert!(f.write(101, 10, &[0xFF; 2048], true).ok());
    let mut s = Fake::rw_sqe(0x08, 50, 11, 2);
    s[39] = 0x40;
    let r = f.run(101, &s).rsp();
    assert!(r.ok());
    let back = f.read(101, 10, 4, true).1;
    assert!(back[..512].iter().all(|&b| b == 0xFF));
    assert!(back[512..1536].iter().all(|&b| b == 0));
    assert!(back[1536..].iter().all(|&b| b == 0xFF));
    assert!(f.run(101, &sqe(0x00, 51, 1)).rsp().ok(), "Flush");
}

/// §8: keep-alive expiry tears the controller down: a Disconnect for every
/// queue, the CNTLID freed.
#[test]
fn keep_alive_expiry_disconnects_every_queue() {
    let (mut f, _) = live(4096, 4);
    f.now += 4000;
    assert!(f.run(100, &sqe(0x18, 12, 0)).rsp().ok(), "re-armed at +4 s");
    f.now += 4999;
    assert!(f.poll_all().is_empty(), "KATO 5000 not yet elapsed since the Keep Alive");
    f.now += 1;
    let mut ev = f.poll_all();
    ev.sort_by_key(|e| match e {
        Event::Disconnect(q) => q.0,
        _ => panic!("{e:?}"),
    });
    let want: Vec<Event> = (100..=104).map(|q| Event::Disconnect(QueueId(q))).collect();
    assert_eq!(ev, want);
    assert_eq!(f.t.controllers(), 0);
    assert_eq!(f.t.queues(), 0, "the layer forgot the queues");
}

#[test]
fn discovery_kato_zero_means_120_s() {
    let mut f = Fake::new(0, 1);
    f.live_admin_to(7, DISC, 0);
    assert!(f.run(7, &sqe(0x18, 12, 0)).rsp().ok(), "Keep Alive accepted: KATO is 120 s");
    let t0 = f.now;
    f.now = t0 + 119_999;
    assert!(f.poll_all().is_empty());
    f.now = t0 + 120_000;
    assert_eq!(f.poll_all(), vec![Event::Disconnect(QueueId(7))]);
}

/// §5.5: at most AERL+1 = 4 held; a namespace change completes one with
/// (notice, NS attribute, log 04h); log 04h lists NSID 1 then clears.
#[test]
fn aer_limit_and_namespace_change_notice() {
    let (mut f, _) = live(0, 1);
    assert!(f.set_features(100, 0x0B, 1 << 8).ok());
    for cid in 0..4u16 {
        assert!(matches!(f.run(100, &sqe(0x0C, 20 + cid, 0)), Outcome::Held));
    }
    let r = f.run(100, &sqe(0x0C, 31, 0)).rsp();
    assert_eq!(r.sct_sc_dnr(), (1, 0x05, true), "AER Limit Exceeded");
    assert_eq!(r.cid, 31);
    assert!(f.poll_all().is_empty());
    f.t.notify_ns_changed();
    let ev = f.poll_all();
    assert_eq!(ev.len(), 1, "one notice, one AER completed");
    let Event::Respond { q, rsp, .. } = ev[0] else { panic!("{ev:?}") };
    assert_eq!(q, QueueId(100));
    let cqe = u32::from_le_bytes(rsp.cqe[..4].try_into().unwrap());
    assert_eq!(cqe & 7, 2, "type notice");
    assert_eq!((cqe >> 8) & 0xFF, 0, "NS attribute changed");
    assert_eq!((cqe >> 16) & 0xFF, 0x04, "log page 04h");
    assert_eq!(u16::from_le_bytes([rsp.cqe[14], rsp.cqe[15]]), 0, "success");
    assert_eq!(u16::from_le_bytes([rsp.cqe[12], rsp.cqe[13]]), 20, "the held command's CID");
    let (r, log) = f.log(100, 0x04, 0xFFFF_FFFF, 4096, 0, false);
    assert!(r.ok());
    assert_eq!((get32(&log, 0), get32(&log, 4)), (1, 0));
    let (_, log) = f.log(100, 0x04, 0xFFFF_FFFF, 4096, 0, false);
    assert!(log.iter().all(|&b| b == 0), "cleared by the read");
    // Room for another AER again.
    assert!(matches!(f.run(100, &sqe(0x0C, 30, 0)), Outcome::Held));
}

#[test]
fn notice_without_aec_bit_sends_nothing_but_lists_the_namespace() {
    let (mut f, _) = live(0, 1);
    assert!(matches!(f.run(100, &sqe(0x0C, 31, 0)), Outcome::Held));
    f.t.notify_ns_changed();
    assert!(f.poll_all().is_empty());
    let (_, log) = f.log(100, 0x04, 0, 4096, 0, false);
    assert_eq!(get32(&log, 0), 1);
}

/// Teardown by the admin queue's disconnect, then an immediate reconnect:
/// the data survives, a new association works.
#[test]
fn reconnect_after_teardown() {
    let (mut f, id1) = live(4096, 3);
    assert!(f.write(101, 5, &[0xC3; 1024], true).ok());
    f.t.queue_closed(QueueId(100));
    let mut ev = f.poll_all();
    ev.sort_by_key(|e| match e {
        Event::Disconnect(q) => q.0,
        _ => 0,
    });
    assert_eq!(ev, (101..=103).map(|q| Event::Disconnect(QueueId(q))).collect::<Vec<_>>());
    for q in 101..=103 {
        f.t.queue_closed(QueueId(q));
    }
    assert_eq!(f.t.controllers(), 0);
    let id2 = f.live_admin(200, 5000);
    assert!((1..=0xFFEF).contains(&id2));
    f.open(201, 1, 128);
    assert!(f.connect_io_inline(201, 1, id2).ok());
    assert_eq!(f.read(201, 5, 2, true).1, vec![0xC3; 1024]);
    // The old CNTLID is no controller any more (unless reused by the new one).
    if id1 != id2 {
        f.open(202, 2, 128);
        let r = f.connect_io_inline(202, 2, id1);
        assert_eq!(r.sct_sc_dnr(), (1, 0x82, true));
    }
}

/// The 6.1 host's orderly teardown: I/O queues closed first, then CC.SHN
/// on the admin queue still answers.
#[test]
fn orderly_shutdown_after_io_queues_closed() {
    let (mut f, _) = live(4096, 2);
    f.t.queue_closed(QueueId(101));
    f.t.queue_closed(QueueId(102));
    assert!(f.poll_all().is_empty());
    assert!(f.prop_set(100, 0x14, 0x0046_4001).ok());
    let csts = f.prop_get(100, 0x1C, false).dw0;
    assert_eq!((csts >> 2) & 3, 0b10, "SHST 10b");
    assert_eq!(csts & 1, 0, "RDY cleared");
    // And the I/O queue can be connected again after a re-enable.
    f.enable(100);
}

/// A queue that fails (a WR error, its QP in ERROR; spec §3 "Errors") is
/// fatal for its controller, an I/O queue too: every other queue of it is
/// disconnected, the controller is gone.
#[test]
fn a_failed_io_queue_deletes_the_controller() {
    let (mut f, _) = live(4096, 3);
    f.t.queue_failed(QueueId(102));
    f.t.queue_closed(QueueId(102));
    let mut ev = f.poll_all();
    ev.sort_by_key(|e| match e {
        Event::Disconnect(q) => q.0,
        _ => 0,
    });
    let want: Vec<Event> = [100, 101, 103].map(|q| Event::Disconnect(QueueId(q))).to_vec();
    assert_eq!(ev, want);
    assert_eq!((f.t.controllers(), f.t.queues()), (0, 0));
}

/// SQHD advances modulo the SQ size per response; CATTR bit 2 → 0xFFFF.
#[test]
fn sqhd_and_sqid() {
    let mut f = Fake::new(0, 1);
    f.open(100, 0, 32);
    let mut s = connect_sqe(1, 0, 3, 5000); // SQSIZE 3: 4 entries
    f.host[..1024].copy_from_slice(&connect_data(0xFFFF, SUBNQN, HOSTNQN));
    set_keyed(&mut s, 0, 1024, true);
    let r = f.run(100, &s).rsp();
    assert_eq!((r.sqhd, r.sqid), (1, 0));
    let heads: Vec<u16> = (0..6).map(|_| f.prop_get(100, 0, true).sqhd).collect();
    assert_eq!(heads, vec![2, 3, 0, 1, 2, 3]);
    f.enable(100);
    let id = f.identify(100, 1, 0).1;
    let cntlid = get16(&id, 78);
    f.open(101, 1, 128);
    let mut s = connect_sqe(2, 1, 127, 0);
    s[46] = 0x04;
    f.host[..1024].copy_from_slice(&connect_data(cntlid, SUBNQN, HOSTNQN));
    set_keyed(&mut s, 0, 1024, true);
    let r = f.run(101, &s).rsp();
    assert!(r.ok());
    assert_eq!((r.sqhd, r.sqid), (0xFFFF, 1));
    assert_eq!(f.read(101, 0, 1, true).0.sqhd, 0xFFFF);
}

/// Two hosts' controllers at once (discovery first, then the I/O one):
/// each command reaches its own controller.
#[test]
fn concurrent_controllers_keep_their_own_state() {
    let mut f = Fake::new(0, 2);
    f.open(7, 0, 32);
    let d = f.connect_admin(7, DISC, 0).dw0 as u16;
    f.enable(7);
    let id = f.live_admin(100, 5000);
    assert_ne!(d, id, "distinct CNTLIDs");
    let (_, a) = f.identify(100, 1, 0);
    let (_, b) = f.identify(7, 1, 0);
    assert_eq!((get16(&a, 78), a[111]), (id, 1));
    assert_eq!((get16(&b, 78), b[111]), (d, 2));
    assert!(f.set_features(100, 0x0B, 1 << 8).ok());
    assert_eq!(f.get_features(7, 0x0B, 0).dw0, 0, "the discovery controller's AEC untouched");
    assert!(f.prop_set(100, 0x14, 0x0046_4001).ok());
    assert_eq!(f.prop_get(7, 0x1C, false).dw0, 1, "still ready");
}
