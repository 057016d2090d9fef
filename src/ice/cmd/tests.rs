//! Tests of the admin-queue commands (`super`): capabilities, VSI contexts, link, scheduler.

use super::*;

#[test]
fn caps_parse_counts_past_data_as_zero_and_last_duplicate_wins() {
    let mut b = [0u8; 128];
    let put = |b: &mut [u8], i: usize, id: u16, num: u32, phys: u32| {
        put16(b, i * 32, id);
        put32(b, i * 32 + 4, num);
        put32(b, i * 32 + 12, phys);
    };
    put(&mut b, 0, cap_id::RDMA, 1, 0);
    put(&mut b, 1, cap_id::MSIX, 128, 257);
    put(&mut b, 2, cap_id::MSIX, 64, 3);
    put(&mut b, 3, cap_id::VALID_FUNCTIONS, 0x1f, 0);
    let c = Caps::parse(&b, 9);
    assert!(c.rdma);
    assert_eq!((c.num_msix_vectors, c.msix_vector_first_id), (64, 3));
    assert_eq!(c.num_funcs(), 5);
    assert!(!Caps::rdma_usable(&c, &c), "5 PFs turn RDMA off");
    assert_eq!(Caps::guaranteed_vsis(0x0f), 192);
    assert_eq!(Caps::guaranteed_vsis(0x300), 0);
    assert_eq!(Caps::guaranteed_vsis(0x103), 384);
    // a firmware count far past the buffer walks only the buffer
    assert_eq!(Caps::parse(&b, u32::MAX).num_msix_vectors, 64);
    let d = super::super::caps::DevCaps::parse(&b, u32::MAX, 3);
    assert_eq!((d.num_funcs, d.logical_pf_id, d.common.iwarp), (5, 3, false), "5 PFs: RDMA off");
}

#[test]
fn vsi_context_queue_map_and_pe_update() {
    let p = PfVsiParams {
        sw_id: 0x20,
        rxq_base: 7,
        num_rxq: 10,
        rss: true,
        flow_director: None,
        veb: true,
    };
    let c = VsiContext::pf_add(&p).unwrap();
    assert_eq!(c.valid_sections(), vsi::PROP_SECURITY_VALID);
    assert_eq!(le16(&c.0, vsi::TC_MAPPING), 4 << 11, "10 queues → 2^4");
    assert_eq!((le16(&c.0, 30), c.num_rxq()), (7, 10));
    assert_eq!(c.0[3], 0xe0);
    assert_eq!(le32(&c.0, 16), 0x00fa_c688);
    let big = VsiContext::pf_add(&PfVsiParams { num_rxq: 300, ..p }).unwrap();
    assert_eq!((big.num_rxq(), le16(&big.0, vsi::TC_MAPPING)), (256, 8 << 11));
    let one = VsiContext::pf_add(&PfVsiParams { num_rxq: 1, ..p }).unwrap();
    assert_eq!(le16(&one.0, vsi::TC_MAPPING), 0);
    assert!(VsiContext::pf_add(&PfVsiParams { num_rxq: 0, ..p }).is_err());
    let u = VsiContext::pe_filter_update(&c, true);
    assert_eq!(u.valid_sections(), vsi::PROP_Q_OPT_VALID);
    assert_eq!(&u.0[78..81], &[2, 0, 1]);
    assert!(u.0.iter().enumerate().all(|(i, b)| *b == 0 || [0, 78, 80].contains(&i)));
}

#[test]
fn ctrl_vsi_context_drops_security_and_rss() {
    let p = PfVsiParams {
        sw_id: 0x20,
        rxq_base: 3,
        num_rxq: 1,
        rss: true,
        flow_director: None,
        veb: true,
    };
    let pf = VsiContext::pf_add(&p).unwrap();
    let c = VsiContext::ctrl_add(&p).unwrap();
    assert_eq!(c.valid_sections(), 0, "no SECURITY section");
    assert_eq!((c.0[vsi::SEC_FLAGS], c.0[vsi::Q_OPT_RSS]), (0, 0));
    for i in 0..VSI_CTX_LEN {
        let differs = [0, vsi::SEC_FLAGS, vsi::Q_OPT_RSS].contains(&i);
        assert_eq!(c.0[i] != pf.0[i], differs, "byte {i}: the rest as for a PF");
    }
    let fd = VsiContext::ctrl_add(&PfVsiParams { flow_director: Some((64, 100)), ..p }).unwrap();
    assert_eq!(fd.valid_sections(), vsi::PROP_FLOW_DIR_VALID | vsi::PROP_ACL_VALID);
    assert!(VsiContext::ctrl_add(&PfVsiParams { num_rxq: 0, ..p }).is_err());
    let u = VsiContext::pf_add(&PfVsiParams { rss: false, ..p }).unwrap().for_update();
    assert_eq!(u.valid_sections(), vsi::PROP_SECURITY_VALID | vsi::PROP_RXQ_MAP_VALID);
    assert_eq!(u.0[2..], VsiContext::pf_add(&PfVsiParams { rss: false, ..p }).unwrap().0[2..]);
}

/// Found by the vendor differential (lan_vsi.rs, ice_lib.c's
/// ice_vsi_init): an update of an RSS context marks Q_OPT valid too; a
/// CTRL context (no RSS) does not.
#[test]
fn vsi_update_marks_q_opt_valid_with_rss() {
    let p = PfVsiParams {
        sw_id: 0x20,
        rxq_base: 0,
        num_rxq: 1,
        rss: true,
        flow_director: None,
        veb: false,
    };
    let pf = VsiContext::pf_add(&p).unwrap();
    let u = pf.for_update();
    assert_eq!(
        u.valid_sections(),
        vsi::PROP_SECURITY_VALID | vsi::PROP_RXQ_MAP_VALID | vsi::PROP_Q_OPT_VALID
    );
    assert_eq!(u.0[2..], pf.0[2..], "only the section bits change");
    let c = VsiContext::ctrl_add(&p).unwrap().for_update();
    assert_eq!(c.valid_sections(), vsi::PROP_RXQ_MAP_VALID);
}

#[test]
fn link_and_sched_parse() {
    let mut b = [0u8; 32];
    b[2] = 0x41;
    b[3] = 0x40;
    b[8] = 0x1b;
    put16(&mut b, 10, 0x400);
    b[23] = 0x10;
    let l = LinkStatus::parse(&b, true);
    assert!(l.up());
    assert_eq!((l.fec_info, l.pacing, l.fc_mode()), (3, 0x18, 1));
    // the pacing type (bit 7) is kept, in place (found by vendor-diff)
    b[8] = 0x9b;
    assert_eq!(LinkStatus::parse(&b, true).pacing, 0x98);
    assert_eq!(l.phy_type_low, 0x1000_0000_0000_0000);
    let mut s = [0u8; SCHED_RES_LEN];
    put16(&mut s, 2, 10);
    assert!(SchedResources::parse(&s).is_err());
    put16(&mut s, 2, 5);
    put16(&mut s, 32 + 32 + 10, 8);
    let r = SchedResources::parse(&s).unwrap();
    assert_eq!(r.max_children[0], Some(8));
    assert_eq!(r.max_children[4], None);
    assert_eq!(LINUX_EVENT_MASK & 0x1106, 0);
}
