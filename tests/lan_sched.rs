//! The RDMA scheduler branch against Linux 6.1.192's ice_sched.c, on the
//! device model: the VSI layer follows the entry point, the VSI chain
//! honours the TC node's child limit, a VSI node already on the TC is
//! reused, and more queue sets than one VSI node holds are refused (the
//! differences tests/vendor-diff's LAN switch/scheduler area found).

mod common;
mod e2e_common;
mod lan_common;

use common::*;
use e2e_common::A;
use irdma::ice::BringUpError;
use irdma::ice::bringup::Step;
use irdma::ice::cmd::CmdError;
use irdma::ice::sched::Owner;
use lan_common::*;

fn sent(bar: &ModelBar) -> u64 {
    bar.with_device(|d| d.counters().aq_commands)
}

/// Five layers, entry point at layer 2: ice_sched_get_vsi_layer gives the
/// entry-point layer (N − 4 = 1 is not below it), so the VSI node sits at
/// layer 2 and the RDMA queue group at layer 3 below it.
#[test]
fn five_layers_vsi_layer_is_the_entry_point() {
    let _g = lock();
    let mut c = cold(A);
    c.lan.sched_layers = 5;
    let bar = ModelBar::standalone(c);
    let pf = up(&bar).expect("bring-up");
    let t = pf.lan.tree();
    assert_eq!((t.entry_layer, t.vsi_layer(), t.qgrp_layer()), (2, 2, 3));
    let qgrp =
        t.nodes().iter().find(|n| n.layer == 3 && n.owner == Owner::Rdma).expect("RDMA qgrp");
    assert_eq!(t.find(qgrp.parent).map(|p| p.layer), Some(2), "under the VSI node");
    pf.shut_down().expect("teardown");
}

/// An explicit 9-layer default topology with the entry point at layer 3:
/// the generic node at layer 2 stays under the TC node, whose limit (1)
/// leaves no room for the VSI chain: TcFull before anything is sent, as
/// ice_sched_add_vsi_support_nodes (ice_sched_add_nodes_to_hw_layer: EIO).
#[test]
fn vsi_chain_respects_the_tc_node_limit() {
    let _g = lock();
    let mut c = cold(A);
    let d = |ty: u8| {
        let mut x = [0u8; 16];
        x[0] = ty;
        x[1] = 7;
        x[6] = 1;
        x[10] = 1;
        x
    };
    // root 0x10, TC 0x11, generic 0x12, entry point 0x13, generics, leaf
    let mut topo =
        vec![(0, 0x10, d(1)), (0x10, 0x11, d(2)), (0x11, 0x12, d(3)), (0x12, 0x13, d(4))];
    for (i, teid) in (0x14..0x18).enumerate() {
        topo.push((0x13 + i as u32, teid, d(3)));
    }
    topo.push((0x17, 0x18, d(5)));
    c.lan.default_topology = Some(topo);
    c.lan.max_sibl[2] = 1;
    let bar = ModelBar::standalone(c);
    let errors = bar.with_device(|d| d.counters().aq_errors);
    let e = up(&bar).err();
    assert!(matches!(e, Some(BringUpError::Command(Step::RdmaBranch, CmdError::TcFull))), "{e:?}");
    assert_eq!(bar.with_device(|d| d.counters().aq_errors), errors, "no command refused");
}

/// A VSI node the driver already added on the TC is the VSI's (ice
/// ice_sched_cfg_vsi → ice_sched_get_vsi_node): setting the branch up again
/// adds no second VSI chain.
#[test]
fn a_vsi_node_on_the_tc_is_reused() {
    let _g = lock();
    let bar = ModelBar::standalone(cold(A));
    let (mut pf, mut t, _) = up_with_limits(&bar);
    assert_eq!(vsi_nodes(&t).count(), 1);
    let vsi = vsi_nodes(&t).next().map(|n| n.teid);
    let b = pf.lan.aq().sched_cfg_vsi_rdma(&mut t, 0, 2).expect("again");
    assert_eq!(Some(b.vsi_node), vsi, "the same VSI node");
    assert_eq!(vsi_nodes(&t).count(), 1, "no second VSI chain");
    pf.shut_down().expect("teardown");
}

/// More queue sets than one VSI node's subtree holds (the product of the
/// child limits from the VSI to the queue-group layer) are refused before
/// anything is sent: the driver keeps one VSI node per TC.
#[test]
fn qsets_beyond_one_vsi_node_are_refused() {
    let _g = lock();
    let mut c = cold(A);
    // children of layers 5, 6, 7: 2 × 2 × 2
    c.lan.max_sibl[6] = 2;
    c.lan.max_sibl[7] = 2;
    c.lan.max_sibl[8] = 2;
    let bar = ModelBar::standalone(c);
    let (mut pf, mut t, _) = up_with_limits(&bar);
    assert_eq!(t.vsi_node_capacity(), Some(8));
    let before = sent(&bar);
    let e = pf.lan.aq().sched_cfg_vsi_rdma(&mut t, 0, 9).err();
    assert!(matches!(e, Some(CmdError::Invalid(_))), "{e:?}");
    assert_eq!(sent(&bar), before, "nothing sent");
    pf.shut_down().expect("teardown");
}
