//! Helpers of the LAN-layer tests (`tests/lan_*.rs`): a cold PF's model
//! configuration and the bring-up options both files drive `E810` with.
#![allow(dead_code)]

use std::time::Duration;

use crate::common::*;
use crate::e2e_common::Addr;
use irdma::ice::cmd::SchedResources;
use irdma::ice::sched::{Node, Tree};
use irdma::ice::{AqTimeouts, BringUpError, BringUpOptions, E810};

pub type Pf = E810<FakeHal, ModelBar>;

/// A cold PF whose firmware knows `a`'s MAC.
pub fn cold(a: Addr) -> Config {
    let mut c = small_fn_config();
    c.lan.cold = true;
    c.lan.mac = a.mac;
    c
}

/// Small admin queues and short timeouts, so faults show quickly.
pub fn options() -> BringUpOptions<'static> {
    let mut o = BringUpOptions {
        probe: opts(),
        link_wait: Duration::from_millis(500),
        ..Default::default()
    };
    o.aq.sq_entries = 16;
    o.aq.rq_entries = 16;
    o.aq.timeouts = AqTimeouts { command: Duration::from_millis(100), ..AqTimeouts::default() };
    o.reset_timeout = Duration::from_millis(500);
    o.fw_load_timeout = Duration::from_millis(500);
    o
}

pub fn up(bar: &ModelBar) -> Result<Pf, BringUpError> {
    Pf::bring_up(bar.clone(), Profile::SMALL, options())
}

/// A brought-up PF, a copy of its scheduler tree with the per-layer child
/// limits the firmware reports (0x0412) applied, and those limits.
pub fn up_with_limits(bar: &ModelBar) -> (Pf, Tree, SchedResources) {
    let mut pf = up(bar).expect("bring-up");
    let mut t = pf.lan.tree().clone();
    let res = pf.lan.aq().query_sched_res().expect("0x0412");
    t.set_max_children(&res);
    (pf, t, res)
}

/// The nodes of `t` on its VSI layer (the driver keeps one per TC).
pub fn vsi_nodes(t: &Tree) -> impl Iterator<Item = &Node> {
    let vl = t.vsi_layer();
    t.nodes().iter().filter(move |n| n.layer == vl)
}
