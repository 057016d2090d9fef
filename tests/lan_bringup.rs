//! The LAN layer (`irdma::ice`) against the device model's firmware side
//! (tests/mock-bar `lan`, written from the spec by another hand): a cold PF
//! goes from PCI to RDMA traffic through `E810::bring_up`, and admin-queue
//! faults give typed errors with nothing left behind.

mod common;
mod e2e_common;
mod lan_common;

use std::time::Duration;

use common::*;
use e2e_common::{A, B, linked};
use irdma::ice::bringup::Step;
use irdma::ice::cmd::CmdError;
use irdma::ice::{AqError, BringUpError, BringUpOptions, DdpPolicy, E810};
use lan_common::*;

#[test]
fn cold_pf_to_rdma_write_and_back() {
    let _g = lock();
    let base = FakeHal::live_pages();
    let bar_a = ModelBar::standalone(cold(A));
    let bar_b = bar_a.add_peer(cold(B));
    let pa = up(&bar_a).expect("bring-up A");
    let pb = up(&bar_b).expect("bring-up B");
    assert!(pa.link.up(), "link up after restart AN");
    assert_eq!(pa.lan.port().mac, Some(A.mac));
    // the firmware's view: our VSI has the PE filter, one qset exists
    let vsi = pa.lan.vsi_num();
    assert!(
        bar_a.with_device(|d| d.lan().vsis().get(&vsi).is_some_and(|v| v.pe_filter())),
        "PE filter on"
    );
    assert_eq!(
        pa.lan.tree().nodes().iter().filter(|n| n.elem_type() == 5).count(),
        1,
        "one qset leaf"
    );
    {
        let (mut sa, sb) = linked(&pa.device, &pb.device, 16, cap(8));
        let src = sa.region(1, 0x11);
        let dst = sb.region(1, 0x22);
        let sges = [src.sge(0, 256)];
        let wr = e2e_common::signaled(7, e2e_common::write_op(dst.addr() + 64, dst.key()), &sges);
        sa.qp.post_send(&[wr]).expect("post");
        let wc = sa.one();
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        assert_eq!(dst.bytes(64, 256), src.bytes(0, 256), "bytes landed");
    }
    assert_eq!(bar_a.with_device(|d| d.counters().lan_gated_wqes), 0);
    assert_eq!(bar_b.with_device(|d| d.counters().pe_filter_drops), 0);
    pa.shut_down().expect("teardown A");
    pb.shut_down().expect("teardown B");
    assert!(
        !bar_a.with_device(|d| d.lan().vsis().get(&vsi).is_some_and(|v| v.pe_filter())),
        "PE filter off after teardown"
    );
    assert_eq!(FakeHal::live_pages(), base, "everything freed");
}

/// Runs a bring-up that must fail, checks nothing leaked, returns the error.
fn fails(cfg: Config, arm: impl FnOnce(&ModelBar), o: BringUpOptions<'_>) -> BringUpError {
    let base = FakeHal::live_pages();
    let bar = ModelBar::standalone(cfg);
    arm(&bar);
    let e = match Pf::bring_up(bar.clone(), Profile::SMALL, o) {
        Ok(_) => panic!("bring-up should fail"),
        Err(e) => e,
    };
    assert_eq!(FakeHal::live_pages(), base, "nothing left allocated after {e}");
    e
}

#[test]
fn aq_timeout_and_crit_are_typed() {
    let _g = lock();
    let e = fails(cold(A), |b| b.with_device(|d| d.faults().aq_hang_at = Some(3)), options());
    assert!(
        matches!(
            e,
            BringUpError::Command(_, CmdError::Aq(AqError::Timeout { critical: false, .. }))
        ),
        "{e:?}"
    );
    let e = fails(cold(A), |b| b.with_device(|d| d.faults().aq_crit = true), options());
    assert!(
        matches!(
            e,
            BringUpError::Command(
                Step::AdminQueue,
                CmdError::Aq(AqError::Timeout { critical: true, .. })
            )
        ),
        "{e:?}"
    );
}

#[test]
fn firmware_error_per_opcode_stops_at_its_step() {
    let _g = lock();
    let cases: [(u16, Step); 9] = [
        (0x02A4, Step::ClearPfConfig),
        (0x000B, Step::Caps),
        (0x0200, Step::SwitchConfig),
        (0x0412, Step::Scheduler),
        (0x0107, Step::MacRead),
        (0x0603, Step::MacConfig),
        (0x0210, Step::AddVsi),
        (0x0401, Step::RdmaBranch),
        (0x02A0, Step::SwitchRules),
    ];
    for (opc, step) in cases {
        let e = fails(
            cold(A),
            |b| b.with_device(|d| d.faults().aq_fail_opcode = Some((opc, 14))),
            options(),
        );
        match e {
            BringUpError::Command(s, CmdError::Aq(AqError::Firmware { opcode, code: 14 })) => {
                assert_eq!((s, opcode), (step, opc));
            }
            other => panic!("{opc:#06x}: {other:?}"),
        }
    }
    // Clear PXE's EEXIST is "already not in PXE mode": not an error
    let bar = ModelBar::standalone(cold(A));
    bar.with_device(|d| d.faults().aq_fail_opcode = Some((0x0110, 13)));
    up(&bar).expect("EEXIST from Clear PXE tolerated").shut_down().expect("down");
}

#[test]
fn refusals_recovery_rdma_off_and_ddp() {
    let _g = lock();
    let mut c = cold(A);
    c.lan.recovery_mode = true;
    assert!(matches!(fails(c, |_| {}, options()), BringUpError::FirmwareRecovery));
    let mut c = cold(A);
    c.lan.rdma = false;
    assert!(matches!(fails(c, |_| {}, options()), BringUpError::RdmaDisabled));
    let mut c = cold(A);
    c.lan.valid_functions = 0x1f;
    assert!(matches!(fails(c, |_| {}, options()), BringUpError::RdmaDisabled), "5 PFs");
    let mut c = cold(A);
    c.lan.package = None;
    assert!(matches!(fails(c.clone(), |_| {}, options()), BringUpError::NoDdpPackage));
    // a synthetic package (never a real one) is downloaded in 4 KiB chunks
    let pkg = mock_bar::lan::synthetic_package(
        [1, 3, 36, 0],
        "MOCK test pkg",
        0xC000_0042,
        &[0x5a; 9000],
    );
    let bar = ModelBar::standalone(c.clone());
    let o = BringUpOptions { ddp: DdpPolicy::Download(&pkg), ..options() };
    let pf = Pf::bring_up(bar.clone(), Profile::SMALL, o).expect("bring-up with download");
    assert!(bar.with_device(|d| d.lan().package().is_some_and(|p| p.track_id == 0xC000_0042)));
    pf.shut_down().expect("down");
    // a corrupt package is refused by the firmware: typed error, lock released
    let mut bad = pkg.clone();
    bad[0] ^= 0xff;
    let o = BringUpOptions { ddp: DdpPolicy::Download(&bad), ..options() };
    let e = fails(c, |_| {}, o);
    assert!(
        matches!(
            e,
            BringUpError::Command(
                Step::Ddp,
                CmdError::Aq(AqError::Firmware { opcode: 0x0C40, .. })
            )
        ),
        "{e:?}"
    );
}

#[test]
fn reset_in_the_middle_of_bring_up_is_an_error_not_a_hang() {
    let _g = lock();
    let e = fails(cold(A), |b| b.with_device(|d| d.faults().aq_reset_at = Some(6)), options());
    assert!(matches!(e, BringUpError::Command(_, CmdError::Aq(AqError::Timeout { .. }))), "{e:?}");
    // and the PF comes up again from there
    let bar = ModelBar::standalone(cold(A));
    bar.with_device(|d| d.faults().aq_reset_at = Some(6));
    assert!(up(&bar).is_err());
    up(&bar).expect("second bring-up after the reset").shut_down().expect("down");
}

#[test]
fn link_events_arrive_on_the_arq_and_are_consumed() {
    let _g = lock();
    let bar = ModelBar::standalone(cold(A));
    let mut pf = up(&bar).expect("bring-up");
    // nothing pending after bring-up beyond the link-up report(s)
    let _ = pf.lan.poll_events().expect("poll");
    assert_eq!(pf.lan.poll_events().expect("poll"), None, "queue drained");
    bar.with_device(|d| d.set_link(false));
    let ev = pf.lan.poll_events().expect("poll").expect("a link event");
    assert!(!ev.up(), "link down reported: {ev:?}");
    assert!(!pf.lan.link_status().expect("status").up());
    bar.with_device(|d| d.set_link(true));
    let ev = pf.lan.poll_events().expect("poll").expect("a link event");
    assert!(ev.up());
    assert_eq!(pf.lan.poll_events().expect("poll"), None);
    pf.shut_down().expect("down");
}

#[test]
fn link_down_is_an_option_and_lldp_stop_is_sent() {
    let _g = lock();
    // no media: restart AN cannot bring the link up
    let mut c = cold(A);
    c.lan.media = false;
    let bar = ModelBar::standalone(c.clone());
    let o = BringUpOptions { link_wait: Duration::from_millis(50), ..options() };
    let pf = Pf::bring_up(bar.clone(), Profile::SMALL, o).expect("link down tolerated by default");
    assert!(!pf.link.up());
    pf.shut_down().expect("down");
    let o =
        BringUpOptions { link_wait: Duration::from_millis(50), require_link: true, ..options() };
    assert!(matches!(fails(c, |_| {}, o), BringUpError::LinkDown));
    // stop_lldp sends 0x0A05: a firmware error on it surfaces as that opcode
    let o = BringUpOptions { stop_lldp: true, ..options() };
    let e = fails(cold(A), |b| b.with_device(|d| d.faults().aq_fail_opcode = Some((0x0A05, 1))), o);
    assert!(
        matches!(
            e,
            BringUpError::Command(
                Step::Link,
                CmdError::Aq(AqError::Firmware { opcode: 0x0A05, code: 1 })
            )
        ),
        "{e:?}"
    );
}

#[test]
fn bad_options_are_refused_before_anything_is_touched() {
    let _g = lock();
    let bar = ModelBar::standalone(cold(A));
    for o in [
        BringUpOptions { vsi_rx_queues: 0, ..options() },
        BringUpOptions { mtu: 9800, ..options() },
        BringUpOptions { mtu: 100, ..options() },
        BringUpOptions { max_frame: 0, ..options() },
    ] {
        let e = Pf::bring_up(bar.clone(), Profile::SMALL, o).err().expect("refused");
        assert!(matches!(e, BringUpError::BadOptions(_)), "{e:?}");
    }
    assert_eq!(bar.with_device(|d| d.counters().aq_commands), 0, "no command sent");
}

#[test]
fn msix_range_is_checked_against_the_function_caps() {
    let _g = lock();
    let mut c = cold(A);
    c.lan.msix = (16, 0);
    let o = BringUpOptions { msix: irdma::lan::MsixInfo { first: 10, count: 8 }, ..options() };
    let e = fails(c.clone(), |_| {}, o);
    assert!(matches!(e, BringUpError::MsixOutOfRange { available: 16 }), "{e:?}");
    let bar = ModelBar::standalone(c);
    let o = BringUpOptions { msix: irdma::lan::MsixInfo { first: 1, count: 8 }, ..options() };
    Pf::bring_up(bar, Profile::SMALL, o).expect("inside the table").shut_down().expect("down");
}

#[test]
fn bring_up_observed_reports_each_step_in_order() {
    use irdma::ice::Progress as P;
    let _g = lock();
    let all = [
        P::Reset,
        P::Identify,
        P::AqInit,
        P::Version,
        P::ClearPfConfig,
        P::ClearPxe,
        P::Caps,
        P::Ddp,
        P::SwitchConfig,
        P::Scheduler,
        P::MacRead,
        P::MacConfig,
        P::AddVsi,
        P::RdmaBranch,
        P::SwitchRules,
        P::Link,
        P::Qset,
        P::PeFilter,
        P::Probe,
    ];
    let bar = ModelBar::standalone(cold(A));
    let mut seen = Vec::new();
    let pf = Pf::bring_up_observed(bar.clone(), Profile::SMALL, options(), &mut |p| seen.push(p))
        .expect("bring-up");
    assert_eq!(seen, all);
    pf.shut_down().expect("down");
    // A failure stops the reports at the step before the one that failed.
    let base = FakeHal::live_pages();
    let bar = ModelBar::standalone(cold(A));
    bar.with_device(|d| d.faults().aq_fail_opcode = Some((0x0210, 16)));
    let mut seen = Vec::new();
    let r = Pf::bring_up_observed(bar.clone(), Profile::SMALL, options(), &mut |p| seen.push(p));
    assert!(matches!(r, Err(BringUpError::Command(Step::AddVsi, _))), "{:?}", r.err());
    assert_eq!(seen, all[..12], "reports up to Set MAC config");
    assert_eq!(FakeHal::live_pages(), base, "nothing left allocated");
}

/// ice_sched_add_nodes_to_layer with more nodes than the parent may hold:
/// the parent is filled to its layer's limit, the rest goes to its next
/// sibling (the model refuses any over-full parent with ENOSPC); with no
/// sibling left the call is EINVAL; a TC node over its limit is refused
/// before anything is sent.
#[test]
fn add_nodes_fill_the_parent_then_its_sibling() {
    let _g = lock();
    let bar = ModelBar::standalone(cold(A));
    let (mut pf, mut t, res) = up_with_limits(&bar);
    // the generic node above our VSI node, and its parent
    let vsi_node = *vsi_nodes(&t).next().expect("VSI node");
    let p = *t.find(vsi_node.parent).expect("parent");
    let max = usize::from(res.max_children[usize::from(p.layer)].expect("limit"));
    assert!(max >= 2);
    // a sibling for p
    let mut s = [0u32; 1];
    pf.lan.aq().sched_add_nodes(&mut t, p.parent, p.layer, p.tc, &mut s).expect("sibling");
    // max nodes: max - 1 fit under p (it has the VSI node), one goes to s
    let mut teids = vec![0u32; max];
    pf.lan.aq().sched_add_nodes(&mut t, p.teid, p.layer + 1, p.tc, &mut teids).expect("spill");
    assert_eq!(t.children(p.teid).count(), max, "parent filled");
    assert_eq!(t.children(s[0]).count(), 1, "the rest under the sibling");
    assert!(teids.iter().all(|x| *x != 0));
    // s has room for max - 1 more; one more than that has no sibling left
    let mut more = vec![0u32; max];
    let e = pf.lan.aq().sched_add_nodes(&mut t, s[0], p.layer + 1, p.tc, &mut more);
    assert!(matches!(e, Err(CmdError::Invalid(_))), "{e:?}");
    assert_eq!(t.children(s[0]).count(), max, "filled before the refusal");
    // a TC node over its limit: refused, nothing sent
    let tc = t.tc_node(p.tc).expect("TC node");
    let tmax = usize::from(res.max_children[1].expect("TC limit"));
    let mut too_many = vec![0u32; tmax + 1];
    let before = t.nodes().len();
    let e = pf.lan.aq().sched_add_nodes(&mut t, tc, 2, p.tc, &mut too_many);
    assert_eq!(e, Err(CmdError::TcFull));
    assert_eq!(t.nodes().len(), before);
}

/// A second (and third) VSI on the port's addresses: the broadcast rule is
/// turned into a VSI list (0x0208, list rule 0x02A0, rule update 0x02A1)
/// and then extended (0x02A1), as ice_add_update_vsi_list does; the
/// unicast MAC stays with the PF VSI (ice does not share it by default);
/// the same VSI again is `Exists` with nothing sent. The model's switch
/// delivers by its own reading of the rules and lists.
#[test]
fn more_vsis_on_the_port_mac_share_a_vsi_list() {
    use irdma::ice::cmd::{PfVsiParams, VsiContext};
    use irdma::ice::switch::Fwd;
    let _g = lock();
    let bar = ModelBar::standalone(cold(A));
    let mut pf = up(&bar).expect("bring-up");
    let v0 = pf.lan.vsi_num();
    let sw_id = pf.lan.port().sw_id as u8;
    let add_vsi = |pf: &mut Pf, rxq_base: u16| {
        let p =
            PfVsiParams { sw_id, rxq_base, num_rxq: 1, rss: false, flow_director: None, veb: true };
        let mut ctx = VsiContext::pf_add(&p).expect("context");
        pf.lan.aq().add_vsi(&mut ctx).expect("add VSI").vsi_num
    };
    let v1 = add_vsi(&mut pf, 8);
    assert_eq!(pf.lan.mac_filters().rule_cnt(), 2);
    let bcast = [0xff; 6];
    let sorted = |mac: [u8; 6]| {
        let mut v = bar.with_device(|d| d.lan().vsis_for(mac));
        v.sort_unstable();
        v
    };
    assert_eq!(sorted(bcast), vec![v0]);
    pf.lan.subscribe_mac(v1, A.mac).expect("second VSI");
    assert_eq!(sorted(bcast), vec![v0, v1], "broadcast through the list");
    assert_eq!(sorted(A.mac), vec![v0], "unicast left with the PF VSI");
    let f = *pf.lan.mac_filters().find(bcast).expect("broadcast rule");
    assert!(matches!(f.fwd, Fwd::VsiList(_)) && f.reaches(v0) && f.reaches(v1), "{f:?}");
    assert_eq!(f.vsi_count, 2);
    assert_eq!(pf.lan.mac_filters().rule_cnt(), 3, "the list rule counts");
    let sent = bar.with_device(|d| d.counters().aq_commands);
    assert_eq!(pf.lan.subscribe_mac(v1, A.mac), Err(CmdError::Exists));
    assert_eq!(bar.with_device(|d| d.counters().aq_commands), sent, "nothing sent");
    let v2 = add_vsi(&mut pf, 9);
    pf.lan.subscribe_mac(v2, A.mac).expect("third VSI");
    assert_eq!(sorted(bcast), vec![v0, v1, v2], "list extended");
    assert_eq!(pf.lan.mac_filters().rule_cnt(), 3, "an update adds no rule");
    assert_eq!(pf.lan.mac_filters().find(bcast).map(|f| f.vsi_count), Some(3));
    // the typed commands' own refusals: nothing is sent
    use irdma::ice::switch::{ListKind, ListOp};
    let set = ListOp::Set { new_list: false };
    let Fwd::VsiList(list) = f.fwd else { unreachable!() };
    let aq = pf.lan.aq();
    for (l, vs) in
        [(list, &[][..]), (list, &[0u16; 17][..]), (0x400, &[v0][..]), (list, &[0x400][..])]
    {
        let r = aq.vsi_list_rule(set, ListKind::Forward, l, vs);
        assert!(matches!(r, Err(CmdError::Invalid(_))), "{l} {vs:?}: {r:?}");
    }
    assert!(matches!(aq.free_vsi_list(0x400, ListKind::Forward), Err(CmdError::Invalid(_))));
    assert_eq!(bar.with_device(|d| d.counters().aq_commands), sent + 2, "refusals sent nothing");
    // a list a rule still forwards to cannot be freed (model: EBUSY); a
    // fresh one can, and an update of a list that is gone is NotFound
    let busy = aq.free_vsi_list(list, ListKind::Forward);
    assert_eq!(busy.map_err(|e| e.firmware_code()), Err(Some(12)), "{busy:?}");
    let fresh = aq.alloc_vsi_list(ListKind::Forward).expect("alloc");
    assert!(fresh <= 0x3ff && fresh != list);
    aq.vsi_list_rule(ListOp::Set { new_list: true }, ListKind::Forward, fresh, &[v1])
        .expect("list rule");
    assert_eq!(bar.with_device(|d| d.lan().vsi_list(fresh).map(<[u16]>::to_vec)), Some(vec![v1]));
    aq.free_vsi_list(fresh, ListKind::Forward).expect("free");
    assert_eq!(aq.vsi_list_rule(set, ListKind::Forward, fresh, &[v1]), Err(CmdError::NotFound));
    // removal (ice_remove_rule_internal / ice_rem_update_vsi_list): the
    // list shrinks; with one VSI left the rule forwards to it again and
    // the list is freed; a VSI that does not receive the address is
    // NotFound with nothing sent
    pf.lan.remove_mac_filter(v2, bcast).expect("remove v2");
    assert_eq!(sorted(bcast), vec![v0, v1]);
    let sent = bar.with_device(|d| d.counters().aq_commands);
    assert_eq!(pf.lan.remove_mac_filter(v2, bcast), Err(CmdError::NotFound));
    assert_eq!(pf.lan.remove_mac_filter(v1, A.mac), Err(CmdError::NotFound), "v0's unicast");
    assert_eq!(bar.with_device(|d| d.counters().aq_commands), sent, "nothing sent");
    pf.lan.remove_mac_filter(v0, bcast).expect("remove v0");
    assert_eq!(
        bar.with_device(|d| d.counters().aq_commands),
        sent + 4,
        "clear, clear, update, free"
    );
    assert_eq!(sorted(bcast), vec![v1], "back to one VSI");
    let f = *pf.lan.mac_filters().find(bcast).expect("rule kept");
    assert_eq!((f.fwd, f.vsi_count), (Fwd::Vsi(v1), 1));
    assert!(bar.with_device(|d| d.lan().vsi_list(list).is_none()), "list freed");
    let rule = bar.with_device(|d| d.lan().rules().get(&f.rule_id).map(|r| (r.src, r.fwd_vsi())));
    assert_eq!(rule, Some((v0, Some(v1))), "source kept, forwards to v1");
    pf.lan.remove_mac_filter(v1, bcast).expect("remove the last");
    assert!(sorted(bcast).is_empty() && pf.lan.mac_filters().find(bcast).is_none());
    assert_eq!(pf.lan.mac_filters().rule_cnt(), 2, "ice counts down on 0x02A2 only");
    pf.shut_down().expect("teardown");
}

/// `rdma_tcs` and `rdma_qsets_per_tc`: with queue-group nodes that hold two
/// qsets, three qsets per TC need two RDMA queue-group nodes on each TC
/// (ice_sched_calc_vsi_child_nodes); qsets go to the least-loaded node with
/// room (ice_sched_get_free_qparent), a second TC gets its own branch, and
/// when every node is full the LAN side refuses without a command.
#[test]
fn several_qsets_per_tc_and_a_second_tc() {
    use irdma::ice::sched::Owner;
    use irdma::lan::{LanError, LanOps};
    let _g = lock();
    let mut cfg = cold(A);
    cfg.lan.num_tc = 2;
    cfg.lan.max_sibl[8] = 2; // children of a queue-group node
    let bar = ModelBar::standalone(cfg);
    let mut o = options();
    o.rdma_tcs = 0b11;
    o.rdma_qsets_per_tc = 3;
    let mut pf = Pf::bring_up(bar.clone(), Profile::SMALL, o).expect("bring-up");
    let qgl = pf.lan.tree().qgrp_layer();
    let qgrps = |pf: &Pf, tc: u8| -> Vec<u32> {
        let t = pf.lan.tree();
        t.nodes()
            .iter()
            .filter(|n| n.layer == qgl && n.tc == tc && n.owner == Owner::Rdma)
            .map(|n| n.teid)
            .collect()
    };
    let (q0, q1) = (qgrps(&pf, 0), qgrps(&pf, 1));
    assert_eq!((q0.len(), q1.len()), (2, 2), "ceil(3 / 2) queue groups per TC");
    let vsi = pf.lan.vsi_num();
    let parent = |h: u16| bar.with_device(|d| d.lan().qset(h).map(|n| n.parent));
    // the device's own qset sits in q0[0]; then: the emptier q0[1], q0[0],
    // q0[1] again (first with room), then all are full
    let mut mine = Vec::new();
    for (h, want) in [(100u16, q0[1]), (101, q0[0]), (102, q0[1])] {
        let teid = pf.lan.register_qset(h, 0, vsi).expect("qset");
        assert_eq!(parent(h), Some(want), "qset {h}");
        mine.push((h, teid));
    }
    let sent = bar.with_device(|d| d.counters().aq_commands);
    assert_eq!(pf.lan.register_qset(103, 0, vsi), Err(LanError::NoResources));
    assert_eq!(bar.with_device(|d| d.counters().aq_commands), sent, "nothing sent");
    // TC 1 has its own branch
    let teid = pf.lan.register_qset(200, 1, vsi).expect("TC 1 qset");
    assert_eq!(parent(200), Some(q1[0]));
    assert_eq!(pf.lan.tree().find(teid).map(|n| n.tc), Some(1));
    mine.push((200, teid));
    assert_eq!(pf.lan.register_qset(300, 2, vsi), Err(LanError::NoResources), "TC 2 not enabled");
    for (h, t) in mine {
        pf.lan.unregister_qset(h, t).expect("unregister");
        assert_eq!(parent(h), None);
    }
    pf.shut_down().expect("teardown");
}

/// The TC and qset options are checked before anything is touched.
#[test]
fn rdma_tc_options_are_checked() {
    let _g = lock();
    let bar = ModelBar::standalone(cold(A));
    for (tcs, per) in [(0b10u8, 1u16), (1, 0), (0xff, 5)] {
        let mut o = options();
        o.rdma_tcs = tcs;
        o.rdma_qsets_per_tc = per;
        let e = Pf::bring_up(bar.clone(), Profile::SMALL, o).err();
        assert!(matches!(e, Some(BringUpError::BadOptions(_))), "{tcs:#x} {per}: {e:?}");
    }
    assert_eq!(bar.with_device(|d| d.counters().aq_commands), 0);
    // a TC the firmware's topology lacks is refused at the branch step
    let mut o = options();
    o.rdma_tcs = 0b11;
    let e = Pf::bring_up(bar.clone(), Profile::SMALL, o).err();
    assert!(
        matches!(e, Some(BringUpError::Command(Step::RdmaBranch, CmdError::Invalid(_)))),
        "{e:?}"
    );
}

/// The optional commands: Set Port Params 0x0203 (after the switch
/// configuration, Linux's values: VSI 0, no flags, loopback normal |
/// VALID) and Driver Version 0x0002 (after the link: version bytes, the
/// ASCII name as the buffer), each answered by the model and recorded; off
/// by default; a firmware error stops at its own step; a name ice could
/// not send is refused before anything is sent.
#[test]
fn port_params_and_driver_version_are_options() {
    use irdma::ice::cmd::{DriverVersion, PortParams};
    let _g = lock();
    let bar = ModelBar::standalone(cold(A));
    let pf = up(&bar).expect("bring-up");
    assert_eq!(bar.with_device(|d| d.lan().port_params().copied()), None, "off by default");
    assert!(bar.with_device(|d| d.lan().driver_version().is_none()));
    pf.shut_down().expect("teardown");
    let mut o = options();
    o.port_params = Some(PortParams::LINUX);
    o.driver_version = Some(DriverVersion { version: [1, 15, 4, 0], name: "irdma-bare" });
    let bar = ModelBar::standalone(cold(A));
    let pf = Pf::bring_up(bar.clone(), Profile::SMALL, o).expect("bring-up");
    assert_eq!(bar.with_device(|d| d.lan().port_params().copied()), Some([0, 0, 0, 0, 0, 0, 4]));
    assert_eq!(
        bar.with_device(|d| d.lan().driver_version().map(|(v, n)| (*v, n.to_vec()))),
        Some(([1, 15, 4, 0], b"irdma-bare".to_vec()))
    );
    pf.shut_down().expect("teardown");
    for (op, step) in [(0x0203u16, Step::PortParams), (0x0002, Step::DriverVersion)] {
        let bar = ModelBar::standalone(cold(A));
        bar.with_device(|d| d.faults().aq_fail_opcode = Some((op, 14)));
        let e = Pf::bring_up(bar.clone(), Profile::SMALL, o).err();
        match e {
            Some(BringUpError::Command(s, e)) => {
                assert_eq!((s, e.firmware_code()), (step, Some(14)), "{op:#x}")
            }
            other => panic!("{op:#x}: {other:?}"),
        }
    }
    for name in ["", "ünïcode", "a-name-longer-than-thirty-two-bytes", "nul\0"] {
        let mut o = o;
        o.driver_version = Some(DriverVersion { version: [1, 0, 0, 0], name });
        let bar = ModelBar::standalone(cold(A));
        let e = Pf::bring_up(bar.clone(), Profile::SMALL, o).err();
        assert!(
            matches!(e, Some(BringUpError::Command(Step::DriverVersion, CmdError::Invalid(_)))),
            "{name:?}: {e:?}"
        );
        assert!(bar.with_device(|d| d.lan().driver_version().is_none()));
    }
    o.port_params = Some(PortParams { bad_frame_vsi: 0x400, ..PortParams::LINUX });
    let e = Pf::bring_up(ModelBar::standalone(cold(A)), Profile::SMALL, o).err();
    assert!(matches!(e, Some(BringUpError::Command(Step::PortParams, CmdError::Invalid(_)))));
}

/// Issue #28 item 4: while the RDMA device of a bring-up lives, no safe
/// typed path frees its VSI, disables its queue set, turns its PE filter
/// off, clears the PF configuration or removes the rule that brings the
/// port's MAC to the VSI: each is refused with a typed error and nothing is
/// sent. Once the device is closed through the LAN side, the VSI can go.
#[test]
fn typed_commands_cannot_free_the_rdma_vsi_under_a_live_device() {
    use irdma::lan::{LanError, LanOps};
    let _g = lock();
    let base = FakeHal::live_pages();
    let bar = ModelBar::standalone(cold(A));
    let E810 { mut lan, device, .. } = up(&bar).expect("bring-up");
    let vsi = lan.vsi_num();
    let qs = device.qs_handle();
    let node = bar.with_device(|d| d.lan().qset(qs).map(|n| (n.teid, n.parent)));
    let (teid, parent) = node.expect("the device's qset");
    assert!(lan.device_holds_vsi());
    let sent = bar.with_device(|d| d.counters().aq_commands);
    assert_eq!(lan.aq().free_vsi(vsi, false).map(|_| ()), Err(CmdError::InUse));
    assert_eq!(lan.aq().clear_pf_cfg(), Err(CmdError::InUse));
    assert_eq!(lan.aq().dis_rdma_qset(parent, qs), Err(CmdError::InUse));
    assert_eq!(lan.aq().delete_sched_elem(parent, teid), Err(CmdError::InUse));
    assert_eq!(lan.unregister_qset(qs, teid), Err(LanError::InUse));
    assert_eq!(lan.set_rdma_filter(vsi, false), Err(LanError::InUse));
    assert_eq!(lan.remove_mac_filter(vsi, A.mac), Err(CmdError::InUse));
    assert_eq!(bar.with_device(|d| d.counters().aq_commands), sent, "nothing sent");
    let held = bar.with_device(|d| {
        let l = d.lan();
        (l.vsis().contains_key(&vsi), l.qset(qs).is_some(), l.pe_filter_on())
    });
    assert_eq!(held, (true, true, true), "VSI, qset and PE filter kept");
    drop(device.create_cq(4).expect("the device still works"));
    lan.close_device(device).expect("close");
    assert!(!lan.device_holds_vsi());
    assert!(bar.with_device(|d| d.lan().qset(qs).is_none()), "the device's close released it");
    lan.shut_down().expect("Free VSI after the device");
    assert!(bar.with_device(|d| !d.lan().vsis().contains_key(&vsi)), "VSI freed");
    assert_eq!(FakeHal::live_pages(), base);
}

#[test]
fn admin_queue_init_is_retried_on_eio_like_ice() {
    // ice_init_all_ctrlq (spec §7 item 4): a failed Get Version (EIO) or a
    // refused API version starts the queue over, 11 attempts in all
    let _g = lock();
    let bar = ModelBar::standalone(cold(A));
    bar.with_device(|d| d.faults().aq_fail_opcode = Some((0x0001, 5)));
    let pf = up(&bar).expect("the second attempt passes");
    pf.shut_down().expect("down");
    // an API major the driver refuses: asked 11 times, then refused
    let mut c = cold(A);
    c.lan.api_ver = [0, 2, 0, 0];
    let bar = ModelBar::standalone(c);
    let e = match Pf::bring_up(bar.clone(), Profile::SMALL, options()) {
        Ok(_) => panic!("API 2.0 must be refused"),
        Err(e) => e,
    };
    assert!(
        matches!(e, BringUpError::Command(Step::AdminQueue, CmdError::ApiTooNew { .. })),
        "{e:?}"
    );
    assert_eq!(bar.with_device(|d| d.counters().aq_commands), 11, "Get Version, 11 times");
}
