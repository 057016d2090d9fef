//! Control path: register file, CQP handshake, CQP engine and every
//! bring-up op, with error completions for bad fields.
#![allow(clippy::needless_range_loop)]

mod common;
use common::*;
use mock_bar::regs::{self, err, op};
use mock_bar::{Config, Fabric, TestMemory};

fn sds(h: &mut Harness, e: &[(u64, u64)]) -> Result<(), (u16, u16)> {
    let w = h.sds_wqe(e);
    h.polled(w)
}

#[test]
fn reset_values_the_driver_checks() {
    let h = Harness::new();
    for r in [regs::GLPE_CPUSTATUS0, regs::GLPE_CPUSTATUS1, regs::GLPE_CPUSTATUS2] {
        assert_eq!(h.rd(r), 0x80);
    }
    assert_eq!(g(h.rd(regs::GLPCI_LBARCTRL) as u64, 5, 4), 2, "PE_DB_SIZE = 8 MiB");
    assert_eq!(h.rd(regs::CCQPSTATUS), 0);
    assert_eq!(h.rd(regs::BAR_SIZE + 4), u32::MAX, "outside the BAR reads all-ones");
    assert_eq!(h.rd(0x1003), u32::MAX, "unaligned reads all-ones");
    h.wr(0x1000, 0xdead);
    assert_eq!(h.rd(0x1000), 0xdead, "plain registers store");
}

#[test]
fn cqp_create_and_destroy_handshake() {
    let mut h = Harness::new();
    assert_eq!(h.create_cqp(64), 1, "CCQP_DONE");
    assert_eq!(h.dev(|d| d.cqp().map(|c| c.size)), Some(64));
    h.wr(regs::CCQPHIGH, 0);
    h.wr(regs::CCQPLOW, 0);
    assert_eq!(h.rd(regs::CCQPSTATUS), 0, "destroy clears CCQP_DONE");
}

#[test]
fn cqp_create_with_bad_host_context_fails_with_err_bit() {
    let mut h = Harness::new();
    let ctx = h.alloc(64, 64);
    h.mem.set64(ctx, f(0, 11, 8)); // SQSIZE 0: invalid
    h.mem.set64(ctx + 8, 0x4000);
    h.mem.set64(ctx + 32, f(1, 31, 16));
    h.wr(regs::CCQPHIGH, (ctx >> 32) as u32);
    h.wr(regs::CCQPLOW, ctx as u32);
    assert_eq!(h.rd(regs::CCQPSTATUS) >> 31, 1);
    assert_ne!(h.rd(regs::CQPERRCODES), 0);
    // context in unmapped memory: DMA fault → error, no panic
    h.wr(regs::CCQPHIGH, 0x7);
    h.wr(regs::CCQPLOW, 0x40);
    assert_eq!(h.rd(regs::CCQPSTATUS) >> 31, 1);
    assert!(h.dev(|d| d.counters().dma_faults) >= 1);
}

#[test]
fn features_buffer_has_fw_version_and_count() {
    let mut h = Harness::new();
    h.create_cqp(64);
    let f0 = h.query_features();
    let cnt = g(f0[0], 47, 32);
    assert!(cnt >= 2, "Linux fails with fewer than 2 entries");
    assert_eq!(g(f0[0], 63, 48), 0, "entry 0 is FW info");
    assert_eq!(g(f0[0], 31, 16), 1);
    assert_eq!(g(f0[0], 15, 0), 7);
    assert_eq!(g(f0[1], 63, 48), 32, "FTN_FLAGS entry");
    assert_eq!(h.rd(regs::CQPTAIL), 1);
}

#[test]
fn fpm_query_and_commit_return_sizes_and_bases() {
    let mut h = Harness::new();
    h.create_cqp(64);
    let q = h.alloc(192, 64);
    h.polled([0, 0, 0, hdr(op::QUERY_FPM_VAL, 0), q, 0, 0, 0]).unwrap();
    let max_sds = g(h.mem.get64(q), 44, 32);
    assert!(max_sds > 0);
    assert!(g(h.mem.get64(q + 80), 63, 32) > 0, "Q1 block size non-zero");
    assert!(g(h.mem.get64(q + 8), 31, 0) >= 16, "QP max");
    h.fpm(small_counts()).unwrap();
    // bases strictly increasing in type order, 512-aligned, non-overlapping
    let sizes = h.dev(|d| d.fpm_layout().unwrap().size);
    let mut end = 0;
    for t in 0..21 {
        let cnt = if t == 5 { 1 } else { h.counts[t] };
        if cnt == 0 {
            continue;
        }
        assert!(h.bases[t] >= end, "object {t} overlaps");
        assert_eq!(h.bases[t] % 512, 0);
        end = h.bases[t] + cnt * sizes[t];
    }
    // committed counts echoed in the low bits
    let l = h.dev(|d| d.fpm_layout().unwrap().cnt);
    assert_eq!(l[0], 16);
    assert_eq!(l[14], 8192);
}

#[test]
fn commit_larger_than_max_or_wrong_function_fails() {
    let mut h = Harness::new();
    h.create_cqp(64);
    let mut c = small_counts();
    c[0] = 1 << 30;
    assert_eq!(h.fpm(c).unwrap_err().0, err::MAJ_GENERIC);
    // QUERY_FPM_VAL for another HMC function
    let q = h.alloc(192, 64);
    let e = h.polled([0, 0, 5, hdr(op::QUERY_FPM_VAL, 0), q, 0, 0, 0]).unwrap_err();
    assert_eq!(e, (err::MAJ_GENERIC, err::MODEL_MIN_BAD_FIELD));
    // the next good op clears OP_ERR
    h.polled([0, 0, 0, hdr(op::NOP, 0), 0, 0, 0, 0]).unwrap();
}

#[test]
fn shmc_requires_every_object_backed() {
    let mut h = Harness::new();
    h.create_cqp(64);
    h.fpm(small_counts()).unwrap();
    let e = h.polled([0, 0, 0, hdr(op::SHMC_PAGES_ALLOCATED, 0), 0, 0, 0, 0]).unwrap_err();
    assert_eq!(e.0, err::MAJ_OBJCACHE);
    h.back_all(true);
    h.polled([0, 0, 0, hdr(op::SHMC_PAGES_ALLOCATED, 0), 0, 0, 0, 0]).unwrap();
    assert!(h.dev(|d| d.hmc_ready()));
}

#[test]
fn update_sds_uses_the_overflow_buffer_and_clears() {
    let mut h = Harness::new();
    h.create_cqp(64);
    h.fpm(small_counts()).unwrap();
    let mut entries = Vec::new();
    for sd in 0..5u64 {
        let pa = 0x40_0000_0000 + sd * 0x20_0000;
        entries.push((
            Harness::sd_cmd(sd),
            if sd == 4 { Harness::sd_paged(pa) } else { Harness::sd_direct(pa) },
        ));
    }
    let w = h.sds_wqe(&entries);
    assert_eq!(g(w[3], 3, 0), 2, "two entries in the overflow buffer");
    h.polled(w).unwrap();
    let sds = h.dev(|d| d.sds().clone());
    assert_eq!(sds.len(), 5);
    assert_eq!(sds[&3], mock_bar::hmc::Sd::Direct(0x40_0000_0000 + 3 * 0x20_0000));
    assert_eq!(sds[&4], mock_bar::hmc::Sd::Paged(0x40_0000_0000 + 4 * 0x20_0000));
    // clear SD 1 (PMSDVALID = 0)
    let w = h.sds_wqe(&[(Harness::sd_cmd(1), 0)]);
    h.polled(w).unwrap();
    assert_eq!(h.dev(|d| d.sds().len()), 4);
    // an SD index beyond MAX_PE_SDS is refused, nothing changes
    let w = h.sds_wqe(&[
        (Harness::sd_cmd(9), Harness::sd_direct(0x1000_0000)),
        (Harness::sd_cmd(100_000), 1),
    ]);
    assert!(h.polled(w).is_err());
    assert_eq!(h.dev(|d| d.sds().len()), 4);
}

#[test]
fn bring_up_then_ccq_completions_carry_index_context_and_retval() {
    let mut h = Harness::new();
    h.bring_up();
    // ARP add / delete
    let mac = 0x0211_2233_4455u64;
    h.op_ok([0, 0, mac, hdr(op::MANAGE_ARP, 3 | 1 << 42 | 1 << 43), 0, 0, 0, 0]);
    assert_eq!(h.dev(|d| d.arp_entry(3)), Some(mac));
    h.op_ok([0, 0, 0, hdr(op::MANAGE_ARP, 3), 0, 0, 0, 0]);
    assert_eq!(h.dev(|d| d.arp_entry(3)), None);
    // ARP index ≥ committed ARP count
    let c = h.op([0, 0, mac, hdr(op::MANAGE_ARP, 8 | 1 << 42), 0, 0, 0, 0]);
    assert!(c.error);
    // WS tree: root, VSI node, leaf → qs handle, enable leaf
    let ws = |id: u64, parent: u64, nodeop: u64, leaf: bool, en: bool| {
        [
            0,
            0,
            0,
            hdr(
                op::WORK_SCHED_NODE,
                f(id, 13, 0)
                    | f(parent, 29, 16)
                    | f(nodeop, 55, 52)
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
    assert_eq!(h.op_ok(ws(0, 0, 0, false, true)), 0);
    h.op_ok(ws(1, 0, 0, false, true));
    let qs = h.op_ok(ws(2, 1, 0, true, false));
    assert_eq!(qs, 8, "first qs handle");
    assert_eq!(h.op_ok(ws(2, 1, 1, true, true)), qs);
    assert!(h.op(ws(3, 9, 0, true, false)).error, "parent must exist");
    assert!(h.op(ws(1, 0, 2, false, false)).error, "cannot delete a node with children");
    // unsupported opcode → error completion, CQP keeps going
    let c = h.op([0, 0, 0, hdr(0x3F, 0), 0, 0, 0, 0]);
    assert!(c.error);
    assert_eq!((c.major, c.minor), (err::MAJ_GENERIC, err::MODEL_MIN_UNSUPPORTED_OP));
    assert_eq!(
        h.rd(regs::CQPERRCODES),
        ((err::MAJ_GENERIC as u32) << 16) | err::MODEL_MIN_UNSUPPORTED_OP as u32
    );
    assert_eq!(h.op_ok([0, 0, 0, hdr(op::NOP, 0), 0, 0, 0, 0]), 0);
}

#[test]
fn cq_create_validates_ids_backing_and_duplicates() {
    let mut h = Harness::new();
    h.bring_up();
    let ring = h.alloc(64 * 32, 256);
    let sh = h.alloc(64, 64);
    h.op_ok(Harness::create_cq_wqe(5, 64, ring, sh, 0x1234, Some(0)));
    assert!(h.dev(|d| d.cq(5).is_some()));
    let c = h.op(Harness::create_cq_wqe(5, 64, ring, sh, 0x1234, Some(0)));
    assert_eq!((c.major, c.minor), (err::MAJ_GENERIC, err::MODEL_MIN_IN_USE));
    let c = h.op(Harness::create_cq_wqe(16, 64, ring, sh, 0, Some(0)));
    assert!(c.error, "CQ id ≥ committed count");
    let c = h.op(Harness::create_cq_wqe(6, 64, ring, sh, 0, Some(999)));
    assert!(c.error, "CEQ id ≥ MAX_CEQS");
    let c = h.op(Harness::create_cq_wqe(6, 64, ring, 0, 0, Some(0)));
    assert!(c.error, "no shadow area");
    // destroy
    h.op_ok([64, 0, 0, hdr(op::DESTROY_CQ, 5), 0, sh, 0, 0]);
    assert!(h.op([64, 0, 0, hdr(op::DESTROY_CQ, 5), 0, sh, 0, 0]).error);
}

#[test]
fn objects_before_hmc_is_ready_fail_with_invalid_state() {
    let mut h = Harness::new();
    h.create_cqp(64);
    h.fpm(small_counts()).unwrap();
    let e = h.polled(Harness::create_cq_wqe(0, 130, 0x9000, 0x8000, 0, Some(0))).unwrap_err();
    assert_eq!(e, (err::MAJ_GENERIC, err::MIN_INVALID_STATE));
}

#[test]
fn sds_for_missing_backing_make_object_creation_fail() {
    let mut h = Harness::new();
    h.create_cqp(64);
    h.back_hmc();
    // clear SD 0 again: CQ contexts have no backing now
    let w = h.sds_wqe(&[(Harness::sd_cmd(0), 0)]);
    h.polled(w).unwrap();
    let e = h.polled(Harness::create_cq_wqe(0, 130, 0x9000, 0x8000, 0, Some(0))).unwrap_err();
    assert_eq!(e, (err::MAJ_OBJCACHE, err::MODEL_MIN_NO_BACKING));
}

#[test]
fn wqe_with_stale_valid_bit_is_not_executed() {
    let mut h = Harness::new();
    h.create_cqp(64);
    // write a WQE with valid = 0 (last pass's polarity) and ring past it
    h.mem.set64(h.cqp_sq + 24, hdr(op::NOP, 0));
    h.wr(regs::CQPDB, 1);
    assert_eq!(h.rd(regs::CQPTAIL), 0, "tail did not move");
    assert_eq!(h.dev(|d| d.counters().cqp_invalid_wqes), 1);
    // now make it valid and ring again
    h.mem.set64(h.cqp_sq + 24, hdr(op::NOP, 1 << 63));
    h.wr(regs::CQPDB, 1);
    assert_eq!(h.rd(regs::CQPTAIL), 1);
}

#[test]
fn cqp_ring_wraps_and_polarity_flips() {
    let mut h = Harness::new();
    assert_eq!(h.create_cqp(4), 1);
    for i in 0..10u32 {
        h.polled([0, 0, 0, hdr(op::NOP, 0), 0, 0, 0, 0]).unwrap();
        assert_eq!(h.rd(regs::CQPTAIL), (i + 1) % 4);
    }
    assert_eq!(h.dev(|d| d.counters().cqp_ops), 10);
}

#[test]
fn ceq_and_aeq_create_destroy() {
    let mut h = Harness::new();
    h.bring_up();
    assert!(h.create_ceq(0, 64).error, "CEQ 0 exists");
    assert!(h.create_ceq(64, 64).error, "CEQ id ≥ MAX_CEQS");
    assert!(!h.create_ceq(3, 16).error);
    h.op_ok([0, 0, 16, hdr(op::DESTROY_CEQ, 3), 0, 0, 0, 0]);
    assert!(h.dev(|d| d.ceq(3).is_none()));
    assert!(h.create_aeq(32).error, "one AEQ per function");
    h.op_ok([0, 0, 64, hdr(op::DESTROY_AEQ, 0), 0, 0, 0, 0]);
    assert!(h.dev(|d| d.aeq().is_none()));
}

/// spec control-path §4.3.3: MODIFY_CQ with CQRESIZE moves the CQ to a new
/// ring (slot 0, valid bit 1); an unknown CQ fails; CQEs land in the new ring.
#[test]
fn modify_cq_resize_moves_to_the_new_ring() {
    let mut h = Harness::new();
    h.bring_up();
    let ring = h.alloc(8 * 32, 256);
    let sh = h.alloc(64, 64);
    h.op_ok(Harness::create_cq_wqe(5, 8, ring, sh, 0x1234, Some(0)));
    let new_ring = h.alloc(32 * 32, 256);
    let modify = |id: u32, size: u64| {
        [size, 0x1234, 16, hdr(op::MODIFY_CQ, id as u64 | 1 << 43 | 1 << 46), new_ring, sh, 0, 0]
    };
    let c = h.op(modify(9, 32));
    assert_eq!((c.major, c.minor), (err::MAJ_GENERIC, err::MODEL_MIN_NO_OBJECT));
    assert!(h.op(modify(5, 1)).error, "a ring of one entry");
    h.op_ok(modify(5, 32));
    let (size, prod, pol, resizes) =
        h.dev(|d| d.cq(5).map(|c| (c.size, c.prod, c.pol, c.resizes)).unwrap());
    assert_eq!((size, prod, pol, resizes), (32, 0, true, 1));
    // A second resize counts too; SW_CQ_SELECT (shadow @32) is the
    // driver's report of how many old rings it retired.
    h.op_ok(modify(5, 32));
    assert_eq!(h.dev(|d| d.cq(5).map(|c| c.resizes)), Some(2));
}

/// spec control-path §3.6: after writing a PD entry Linux writes
/// PFHMC_PDINV; the device uses its cached PD entries until then (model:
/// loaded when the SD is programmed, reloaded per PDINV).
#[test]
fn paged_sd_entries_are_cached_until_pfhmc_pdinv() {
    let mut h = Harness::new();
    h.create_cqp(64);
    h.fpm(small_counts()).unwrap();
    let pd_page = h.alloc(4096, 4096);
    let (p1, p2) = (h.alloc(4096, 4096), h.alloc(4096, 4096));
    h.mem.set64(pd_page, p1 | 1);
    sds(&mut h, &[(Harness::sd_cmd(4), Harness::sd_paged(pd_page))]).unwrap();
    let fpm = 4 * 0x20_0000 + 0x10;
    assert_eq!(h.dev(|d| d.hmc_translate(fpm)), Some(p1 + 0x10));
    // a new PD entry and a changed one, no PDINV yet: not seen
    h.mem.set64(pd_page + 8, p2 | 1);
    h.mem.set64(pd_page, p2 | 1);
    assert_eq!(h.dev(|d| d.hmc_translate(fpm)), Some(p1 + 0x10), "stale until PDINV");
    assert_eq!(h.dev(|d| d.hmc_translate(fpm + 0x1000)), None);
    // PDINV: SD 4, PARTSEL, PD 1 → only PD 1 reloaded
    h.wr(regs::PFHMC_PDINV, 4 | 1 << 15 | 1 << 16);
    assert_eq!(h.dev(|d| d.hmc_translate(fpm + 0x1000)), Some(p2 + 0x10));
    assert_eq!(h.dev(|d| d.hmc_translate(fpm)), Some(p1 + 0x10));
    h.wr(regs::PFHMC_PDINV, 4 | 1 << 15);
    assert_eq!(h.dev(|d| d.hmc_translate(fpm)), Some(p2 + 0x10));
    // a cleared entry keeps translating until its PDINV
    h.mem.set64(pd_page, 0);
    assert!(h.dev(|d| d.hmc_translate(fpm)).is_some());
    h.wr(regs::PFHMC_PDINV, 4 | 1 << 15);
    assert_eq!(h.dev(|d| d.hmc_translate(fpm)), None);
    assert_eq!(h.dev(|d| d.counters().bad_doorbells), 0);
    // without PMSDPARTSEL the PF write names no partition: counted, ignored
    h.mem.set64(pd_page, p1 | 1);
    h.wr(regs::PFHMC_PDINV, 4);
    assert_eq!(h.dev(|d| d.hmc_translate(fpm)), None);
    assert_eq!(h.dev(|d| d.counters().bad_doorbells), 1);
}

/// `Config::strict_sds`: PMSDPARTSEL = 1, PMSDBPCOUNT = 512 and 2 MiB-aligned
/// direct SDs (spec control-path §3.6).
#[test]
fn strict_sds_needs_partsel_bpcount_and_2mib_aligned_direct_sds() {
    let cfg = Config { strict_sds: true, ..Config::default() };
    let mut h = Harness::with_config(cfg, TestMemory::new(), Fabric::new(), 0x1_0000_0000);
    h.create_cqp(64);
    h.fpm(small_counts()).unwrap();
    let good = 0x40_0000_0000u64;
    let bad = [
        (1u64 | 1 << 31, Harness::sd_direct(good)), // no PARTSEL
        (Harness::sd_cmd(1), good | f(256, 11, 2) | 0b11), // BPCOUNT 256
        (Harness::sd_cmd(1), Harness::sd_direct(good + 0x1000)), // 4 KiB aligned
    ];
    for e in bad {
        assert!(sds(&mut h, &[e]).is_err(), "{e:x?}");
    }
    assert!(h.dev(|d| d.sds().is_empty()));
    sds(&mut h, &[(Harness::sd_cmd(1), Harness::sd_direct(good))]).unwrap();
    sds(&mut h, &[(Harness::sd_cmd(2), Harness::sd_paged(good + 0x1000))]).unwrap();
    assert_eq!(h.dev(|d| d.sds().len()), 2);
    // the default config takes the 4 KiB-aligned direct SD
    let mut h = Harness::new();
    h.create_cqp(64);
    h.fpm(small_counts()).unwrap();
    sds(&mut h, &[(Harness::sd_cmd(1), Harness::sd_direct(good + 0x1000))]).unwrap();
}
