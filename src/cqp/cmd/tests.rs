use super::*;
use crate::cqp::{EncodeError, FieldName};
use irdma_hal::cqp::eq;

fn enc<C: CqpCommand>(c: &C) -> Result<[u64; 8], EncodeError> {
    let mut w = [0xdead_beef; 8];
    let mut env = Env::new(Limits::NONE);
    c.encode(&mut w, &mut env).map(|_| w)
}

fn too_wide(r: Result<[u64; 8], EncodeError>, name: &str) {
    match r.map_err(|e| e.too_wide()) {
        Err(Some((field, ..))) => assert_eq!(field, name),
        other => panic!("expected TooWide/AboveMax({name}), got {other:?}"),
    }
}

#[test]
fn ah_layout_and_refusals() {
    let info = AhInfo {
        ah_idx: 0x12_3456,
        pd_idx: 0xab_cdef,
        dst_arp_index: 0x0102,
        dest_ip: [0x2001_0db8, 1, 2, 3],
        src_ip: [0xfe80_0000, 4, 5, 6],
        flow_label: 0xf_1234,
        vlan_tag: 0x2064,
        insert_vlan_tag: true,
        tc_tos: 0x68,
        hop_ttl: 0x40,
        mac: [0xb4, 0x96, 0x91, 1, 2, 3],
        ipv4: false,
        loopback: true,
    };
    let w = enc(&CreateAh(info)).unwrap();
    assert_eq!(w[0], 0xb496_9101_0203_0000);
    assert_eq!(w[1], 0xcdef_0068_0000_2064);
    assert_eq!(w[2], 0x0102_0040_0abf_1234);
    assert_eq!(w[3], 0x5000_001c_0012_3456);
    assert_eq!((w[4], w[5]), (0x2_0000_0003, 0x2001_0db8_0000_0001));
    assert_eq!((w[6], w[7]), (0x5_0000_0006, 0xfe80_0000_0000_0004));
    assert_eq!(enc(&DestroyAh(info)).unwrap()[3] >> 32 & 0x3f, 0x1e);
    assert_eq!(enc(&ModifyAh(info)).unwrap()[3] >> 32 & 0x3f, 0x1d);
    let v4 = AhInfo { ipv4: true, dest_ip: [0x0a00_0001, 9, 9, 9], ..info };
    let w = enc(&CreateAh(v4)).unwrap();
    assert_eq!((w[4], w[5], w[6] >> 32, w[7]), (0x0a00_0001, 0, 0, 0));
    too_wide(enc(&CreateAh(AhInfo { ah_idx: 1 << 24, ..info })), "ah_idx");
    too_wide(enc(&CreateAh(AhInfo { pd_idx: 1 << 24, ..info })), "pd_idx");
    too_wide(enc(&CreateAh(AhInfo { flow_label: 1 << 20, ..info })), "flow_label");
}

#[test]
fn mcast_layout_ctx_and_refusals() {
    let g = McastGrpInfo {
        mg_id: 0xfff,
        ipv4: true,
        dest_ip: [0xe000_00fb, 0, 0, 0],
        dest_mac: [1, 0, 0x5e, 0, 0, 0xfb],
        vlan_id: 0xffff,
        vlan_valid: false,
        hmc_fn_id: 3,
        qs_handle: 0x3ff,
        ctx_pa: 0x1234_5000,
    };
    let w = enc(&CreateMcastGrp(g)).unwrap();
    assert_eq!(w[0], 0x0100_5e00_00fb);
    assert_eq!(w[1], 3);
    assert_eq!(w[2], 0xfff_0000_03ff);
    assert_eq!(w[3], 0x1000_0026_0000_0fff);
    assert_eq!((w[4], w[6], w[7]), (0x1234_5000, 0xe000_00fb, 0));
    too_wide(enc(&CreateMcastGrp(McastGrpInfo { mg_id: 4096, ..g })), "mg_id");
    too_wide(enc(&ModifyMcastGrp(McastGrpInfo { vlan_valid: true, ..g })), "vlan_id");
    too_wide(enc(&DestroyMcastGrp(McastGrpInfo { qs_handle: 0x400, ..g })), "qs_handle");
    let m = |qp_id| Some(McastMember { qp_id, dest_port: 0 });
    let ctx = McastGrpInfo::ctx(&[None, m(0x51), None, m(0x3ffff)]).unwrap();
    assert_eq!(ctx, [0x8000_0051, 0x8003_ffff, 0, 0, 0, 0, 0, 0]);
    too_wide(McastGrpInfo::ctx(&[m(1 << 18)]).map(|_| [0; 8]), "member qp_id");
    too_wide(McastGrpInfo::ctx(&[m(1); 9]).map(|_| [0; 8]), "mcast members");
}

#[test]
fn nop_clears_every_word() {
    assert_eq!(enc(&Nop).unwrap(), [0, 0, 0, 0x24 << 32, 0, 0, 0, 0]);
}

#[test]
fn qp_ids_at_or_above_2_24_are_refused() {
    let c = CreateQp { qp_id: 1 << 24, qp_type: 3, ..Default::default() };
    too_wide(enc(&c), "qp_id");
    let ok = CreateQp { qp_id: (1 << 24) - 1, qp_type: 3, next_state: 1, ..Default::default() };
    assert_eq!(enc(&ok).unwrap()[3], 0x1003_0000_00ff_ffff);
    too_wide(enc(&DestroyQp { qp_id: 1 << 24, ..Default::default() }), "qp_id");
    too_wide(enc(&ModifyQp { qp_id: 1 << 24, ..Default::default() }), "qp_id");
    too_wide(enc(&SuspendQp { qp_id: 1 << 24 }), "qp_id");
    too_wide(enc(&ResumeQp { qp_id: 1 << 24, qs_handle: 1 }), "qp_id");
    assert_eq!(enc(&ResumeQp { qp_id: 0x33, qs_handle: 18 }).unwrap()[2], 18);
    too_wide(enc(&FlushWqes { qp_id: u32::MAX, flush_sq: true, ..Default::default() }), "qp_id");
    assert!(matches!(enc(&FlushWqes::default()), Err(EncodeError::Invalid { .. })));
}

#[test]
fn qp_id_checked_against_committed_count() {
    let mut w = [0; 8];
    let mut env = Env::new(Limits { qp_count: 1024, ..Limits::NONE });
    let c = CreateQp { qp_id: 1024, ..Default::default() };
    assert_eq!(
        c.encode(&mut w, &mut env),
        Err(EncodeError::AboveMax { field: FieldName::QpId, max: 1023, value: 1024 })
    );
    let c = CreateQp { qp_id: 1023, ..Default::default() };
    assert!(c.encode(&mut w, &mut env).is_ok());
}

#[test]
fn cq_ids_and_sizes_range_checked() {
    too_wide(enc(&CreateCq { cq_id: 1 << 19, ..Default::default() }), "cq_id");
    too_wide(enc(&DestroyCq { cq_id: 1 << 19, ..Default::default() }), "cq_id");
    too_wide(enc(&ModifyCq { cq_id: 1 << 19, ..Default::default() }), "cq_id");
    too_wide(enc(&CreateCq { cq_size: 1 << 21, ..Default::default() }), "cq_size");
    too_wide(enc(&CreateCq { ceq_id: Some(1024), ..Default::default() }), "ceq_id");
    too_wide(
        enc(&CreateCq { ring: QueueAddr::pbl(1 << 28), ..Default::default() }),
        "first_pbl_index",
    );
    let w = enc(&CreateCq { cq_id: (1 << 19) - 1, cq_size: 0x800, ..Default::default() }).unwrap();
    assert_eq!(w[3], 0x0000_0003_0007_ffff);
    assert_eq!(w[0], 0x800);
}

#[test]
fn stag_inputs_range_checked() {
    let base = AllocStag { total_len: 4096, ..Default::default() };
    too_wide(enc(&AllocStag { pd_id: 1 << 18, ..base }), "pd_id");
    too_wide(enc(&AllocStag { stag_idx: 1 << 24, ..base }), "stag_idx");
    too_wide(enc(&AllocStag { total_len: 1 << 46, ..base }), "total_len");
    too_wide(enc(&AllocStag { access_rights: 0x20, ..base }), "access_rights");
    assert!(matches!(enc(&AllocStag { total_len: 0, ..base }), Err(EncodeError::Invalid { .. })));
    let mr = RegMr {
        stag_idx: 1,
        stag_key: 2,
        pd_id: 3,
        va: 0x1234,
        total_len: 0x1000,
        page_size: PageSize::Size4K,
        pages: MrPages::Pbl(Pbl { level: 1, first_index: 1 << 28 }),
        va_based: true,
        access_rights: access::LOCAL_READ | access::REMOTE_WRITE,
        ..RegMr::DEFAULT
    };
    too_wide(enc(&mr), "first_pbl_index");
    let w = enc(&RegMr { pages: MrPages::Contiguous(0x5000), ..mr }).unwrap();
    // VA-based, remote access enabled because of REMOTE_WRITE.
    assert_eq!(w[3], 0x0829_080a_0000_0000);
    assert_eq!(w[4], 0x5000);
    assert_eq!(w[2], 0x102);
}

#[test]
fn arp_index_and_ws_ids_range_checked() {
    too_wide(enc(&ArpAdd { arp_index: 0x1000, ..Default::default() }), "arp_index");
    too_wide(enc(&ArpDel { arp_index: 0xffff }), "arp_index");
    too_wide(enc(&WsNode { node_id: 0x4000, ..Default::default() }), "node_id");
    too_wide(enc(&WsNode { weight: 0x80, ..Default::default() }), "weight");
    let w = enc(&ArpAdd {
        arp_index: 5,
        mac: [0, 0x11, 0x22, 0x33, 0x44, 0x55],
        reach_max: 0,
        permanent: true,
    })
    .unwrap();
    assert_eq!(w[2], 0x0011_2233_4455);
    assert_eq!(w[3], 0x0000_0c0f_0000_0005);
}

#[test]
fn remaining_range_refusals() {
    too_wide(enc(&ModifyQp { new_mss: 0x4000, ..Default::default() }), "new_mss");
    too_wide(enc(&CreateQp { qp_type: 8, ..Default::default() }), "qp_type");
    too_wide(enc(&CreateQp { next_state: 8, ..Default::default() }), "next_state");
    too_wide(enc(&GenAe { ae_src: 16, ..Default::default() }), "ae_src");
    too_wide(
        enc(&CreateCq { shadow_read_threshold: 1 << 18, ..Default::default() }),
        "shadow_read_threshold",
    );
    too_wide(enc(&CreateCq { pasid: 1 << 20, ..Default::default() }), "pasid");
    too_wide(enc(&CreateCq { cq_ctx: 1 << 63, ..Default::default() }), "cq_ctx");
    let ring = QueueAddr { pbl_chunk_size: 4, ..Default::default() };
    too_wide(enc(&CreateCq { ring, ..Default::default() }), "pbl_chunk_size");
    let ceq = CreateCeq::contiguous(0, 1 << 22, 0x1000, 0);
    too_wide(enc(&ceq), "elem_cnt");
    too_wide(enc(&CreateCeq { elem_cnt: 1, ceq_id: 1024, ..ceq }), "ceq_id");
    let aeq = CreateAeq {
        elem_cnt: 1 << 19,
        mem: QueueAddr::contiguous(0x1000),
        pasid_valid: false,
        pasid: 0,
    };
    too_wide(enc(&aeq), "elem_cnt");
    too_wide(enc(&UploadContext { qp_type: 16, ..Default::default() }), "qp_type");
    too_wide(
        enc(&AllocStag { total_len: 1, placement_type: 16, ..Default::default() }),
        "placement_type",
    );
    // A CEQ id is also checked against the function's CEQ count.
    let mut w = [0; 8];
    let mut env = Env::new(Limits { ceq_count: 4, ..Limits::NONE });
    let r = CreateCeq { elem_cnt: 1, ceq_id: 4, ..ceq }.encode(&mut w, &mut env);
    assert_eq!(r.err().and_then(|e| e.too_wide()).map(|t| t.0), Some("ceq_id"));
}

#[test]
fn update_pe_sds_spills_to_overflow_buffer() {
    let e: [SdEntry; 5] =
        core::array::from_fn(|i| SdEntry { cmd: 0x8000 | i as u32, data: (i as u64) << 21 | 1 });
    let mut w = [0; 8];
    let mut env = Env::new(Limits::NONE);
    let c = UpdatePeSds { hmc_fn_id: 3, entries: &e };
    assert!(matches!(c.encode(&mut w, &mut env), Err(EncodeError::Invalid { .. })));
    env.sdbuf_pa = 0x8000_0f80;
    c.encode(&mut w, &mut env).unwrap();
    assert_eq!(w[2], 0x8000_0f83);
    assert_eq!(w[3], 0x0000_001f_0000_0002);
    assert_eq!(w[4], 0x8000_0000_0000_8001);
    assert_eq!(env.sdbuf_words, 4);
    assert_eq!(&env.sdbuf[..4], &[0x8003, 3 << 21 | 1, 0x8004, 4 << 21 | 1]);
    let twelve = [SdEntry::default(); 12];
    too_wide(enc(&UpdatePeSds { hmc_fn_id: 0, entries: &twelve }), "sd_entries");
    too_wide(enc(&UpdatePeSds { hmc_fn_id: 64, entries: &e[..1] }), "hmc_fn_id");
    let s = SdEntry::set(7, 0x4000_0000, true).unwrap();
    assert_eq!(s.cmd, 0x8000_8007);
    assert_eq!(s.data, 0x4000_0000 | 512 << 2 | 2 | 1);
}

/// hmc.c: irdma_clr_sd_entry keeps PMSDBPCOUNT = 512 and the SD's type in a
/// clear entry (spec §3.6); the driver wrote a data word of 0. Found by the
/// vendor-diff harness (HMC area, teardown's irdma_sc_del_hmc_obj entries).
#[test]
fn sd_clear_entry_keeps_bp_count_and_type() {
    let c = SdEntry::clear(7, true).unwrap();
    assert_eq!((c.cmd, c.data), (0x8000_8007, 512 << 2 | 2));
    let c = SdEntry::clear(0x7fff, false).unwrap();
    assert_eq!((c.cmd, c.data), (0x8000_ffff, 512 << 2));
    assert!(SdEntry::clear(0x8000, true).is_err());
}

/// ctrl.c: irdma_sc_ceq_init / irdma_sc_aeq_init / irdma_sc_ccq_init
/// check sizes against the device's min/max (user.h), not the field
/// widths: a CEQ of 262,144..2^22-1 entries fits CEQSIZE but the vendor
/// refuses it, and so do empty queues.
#[test]
fn eq_and_ccq_sizes_checked_against_the_device_range() {
    let ceq = CreateCeq::contiguous(0, hw_limits::MAX_CEQ_ENTRIES, 0x1000, 0);
    assert!(enc(&ceq).is_ok());
    too_wide(enc(&CreateCeq { elem_cnt: hw_limits::MAX_CEQ_ENTRIES + 1, ..ceq }), "elem_cnt");
    assert!(matches!(enc(&CreateCeq { elem_cnt: 0, ..ceq }), Err(EncodeError::Invalid { .. })));
    let aeq =
        CreateAeq { elem_cnt: 0, mem: QueueAddr::contiguous(0x1000), pasid_valid: false, pasid: 0 };
    assert!(matches!(enc(&aeq), Err(EncodeError::Invalid { .. })));
    assert!(enc(&CreateAeq { elem_cnt: hw_limits::MAX_AEQ_ENTRIES, ..aeq }).is_ok());
    let ccq = CreateCq { cq_size: hw_limits::MAX_CQ_SIZE, ..Default::default() };
    assert_eq!(ccq.check_ccq(), Ok(()));
    assert!(matches!(CreateCq { cq_size: 0, ..ccq }.check_ccq(), Err(EncodeError::Invalid { .. })));
    assert!(matches!(
        CreateCq { cq_size: hw_limits::MAX_CQ_SIZE + 1, ..ccq }.check_ccq(),
        Err(EncodeError::AboveMax {
            field: FieldName::CqSize,
            max: hw_limits::MAX_CQ_SIZE,
            value: 1_048_576
        })
    ));
}

/// ctrl.c: irdma_sc_qp_flush_wqes: a queue already flushed is not flushed
/// again (its codes are not written); with nothing left, -EALREADY and
/// no WQE.
#[test]
fn flush_state_flushes_each_queue_once() {
    let req = FlushWqes {
        qp_id: 5,
        flush_sq: false,
        flush_rq: true,
        user_codes: Some(FlushCodes { sq: (1, 2), rq: (1, 3) }),
        generate_ae: None,
    };
    let mut st = FlushState::default();
    let f = st.request(req).unwrap();
    assert_eq!((f.flush_sq, f.flush_rq), (false, true));
    assert_eq!(st, FlushState { sq: false, rq: true });
    // Both requested: only the SQ is left.
    let f = st.request(FlushWqes { flush_sq: true, ..req }).unwrap();
    assert_eq!((f.flush_sq, f.flush_rq), (true, false));
    let w = enc(&f).unwrap();
    assert_eq!(w[2] & 0xffff_ffff, 0, "no RQ codes for a queue not flushed now");
    assert_eq!(w[2] >> 32, 0x0001_0002, "SQ codes written");
    // Nothing left: refused, state unchanged.
    let before = st;
    assert!(matches!(
        st.request(FlushWqes { flush_sq: true, ..req }),
        Err(EncodeError::Invalid { .. })
    ));
    assert_eq!(st, before);
    let mut fresh = FlushState::default();
    assert!(fresh.request(FlushWqes { flush_rq: false, ..req }).is_err(), "neither queue");
    assert_eq!(fresh, FlushState::default());
}

/// A contiguous event queue carries no PBL fields even when the caller
/// left some in its QueueAddr: the vendor's EQ init drops them
/// (ctrl.c: irdma_sc_ceq_init, irdma_sc_aeq_init). Found by the
/// vendor-diff harness (tests/vendor-diff, ctrl.c).
#[test]
fn contiguous_eq_drops_pbl_fields() {
    let mem = QueueAddr { pa: 0x1000, virtual_map: false, pbl_chunk_size: 3, first_pbl_index: 7 };
    let lpbl = eq::LPBLSIZE.mask();
    let ceq = CreateCeq {
        ceq_id: 1,
        elem_cnt: 64,
        mem,
        tph_en: false,
        tph_val: 0,
        itr_no_expire: false,
        vsi_idx: 0,
        pasid_valid: false,
        pasid: 0,
    };
    let w = enc(&ceq).unwrap();
    assert_eq!((w[3] & lpbl, w[4], w[6]), (0, 0x1000, 0));
    let d =
        DestroyCeq { ceq_id: 1, elem_cnt: 64, mem, tph_en: false, pasid_valid: false, pasid: 0 };
    let w = enc(&d).unwrap();
    assert_eq!((w[3] & lpbl, w[6]), (0, 0));
    // and an index the PBLE field could not hold is not looked at
    let far = QueueAddr { first_pbl_index: u32::MAX, ..mem };
    assert!(enc(&DestroyCeq { mem: far, ..d }).is_ok());
    let a = CreateAeq { elem_cnt: 64, mem, pasid_valid: false, pasid: 0 };
    let w = enc(&a).unwrap();
    assert_eq!((w[3] & lpbl, w[4], w[6]), (0, 0x1000, 0));
    let w = enc(&DestroyAeq { elem_cnt: 64, mem, pasid_valid: false, pasid: 0 }).unwrap();
    assert_eq!((w[3] & lpbl, w[6]), (0, 0));
    // a virtually mapped one keeps them
    let vm = QueueAddr { virtual_map: true, ..mem };
    let w = enc(&DestroyAeq { elem_cnt: 64, mem: vm, pasid_valid: false, pasid: 0 }).unwrap();
    assert_eq!((w[3] & lpbl, w[6]), (eq::LPBLSIZE.prep(3), 7));
}
