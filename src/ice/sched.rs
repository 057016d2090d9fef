//! The Tx scheduler branch RDMA needs: default topology, the chain of
//! generic nodes from the entry-point layer to the VSI layer, the RDMA
//! queue-group nodes below it, and the RDMA queue sets (spec
//! ice-lan-for-rdma §2.11 and §2.13; ice_sched.c → ice_sched_init_port,
//! ice_sched_rm_dflt_nodes, ice_sched_add_elems, ice_sched_cfg_vsi;
//! ice_common.c → ice_cfg_vsi_rdma, ice_ena_vsi_rdma_qset,
//! ice_dis_vsi_rdma_qset).
//!
//! The layers are never assumed: they come from Query Tx Scheduler
//! Resources (0x0412) and the default topology (0x0400), as §6 item 3
//! demands. With N layers: VSI layer N − 4 when N > 5 and that lies below
//! the entry point, else the entry-point layer; queue-group layer N − 2,
//! leaves N − 1 (ice_sched_get_vsi_layer, ice_sched_get_qgrp_layer).
//!
//! Every node ice adds it also queries (0x0404), and records what the
//! firmware reports (spec §7 item 8); this module does the same.

use irdma_hal::{Bar, Hal};

use super::aq::AdminQueue;
use super::cmd::{CmdError, MAX_LAYERS};
use super::desc::{Desc, MAX_BUF_LEN, Opcode};

/// Element data bytes (16) as ice fills them for nodes it adds: generic SE
/// (type 3), valid sections GENERIC|CIR|EIR (7), CIR/EIR profile 0 and
/// weight 4 (ICE_SCHED_DFLT_RL_PROF_ID, ICE_SCHED_DFLT_BW_WT). Queue sets
/// leave the type byte 0 (conformance README, "Scheduler").
pub fn default_elem_data(elem_type: u8) -> [u8; 16] {
    let mut d = [0u8; 16];
    d[0] = elem_type;
    d[1] = 7;
    d[6] = 4;
    d[10] = 4;
    d
}

/// Element types (spec §2.11).
pub mod elem_type {
    /// Root port.
    pub const ROOT: u8 = 1;
    /// Traffic class.
    pub const TC: u8 = 2;
    /// Generic scheduling element.
    pub const GENERIC: u8 = 3;
    /// Entry point.
    pub const ENTRY_POINT: u8 = 4;
    /// Leaf.
    pub const LEAF: u8 = 5;
}

/// Who a node belongs to (ice software bookkeeping only; the AQ carries no
/// owner: spec §2.11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// LAN (0).
    Lan,
    /// RDMA (2).
    Rdma,
}

/// One scheduler node as the driver keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    /// The node's TEID.
    pub teid: u32,
    /// Parent TEID (0 for the root).
    pub parent: u32,
    /// Layer (root 0).
    pub layer: u8,
    /// Traffic class.
    pub tc: u8,
    /// Owner.
    pub owner: Owner,
    /// The 16 element-data bytes the firmware reported.
    pub data: [u8; 16],
}

impl Node {
    /// The element type (data byte 0).
    pub fn elem_type(&self) -> u8 {
        self.data[0]
    }
}

/// Most nodes the driver tracks (root, up to 8 TCs, one VSI chain per TC
/// and RDMA qsets).
pub const MAX_NODES: usize = 96;

/// 24-byte scheduling element: parent TEID, node TEID, 16 data bytes.
const ELEM_LEN: usize = 24;

fn rd32(b: &[u8], at: usize) -> u32 {
    let g = |i: usize| b.get(at + i).copied().unwrap_or(0);
    u32::from_le_bytes([g(0), g(1), g(2), g(3)])
}

fn elem_at(b: &[u8], at: usize) -> (u32, u32, [u8; 16]) {
    let mut d = [0u8; 16];
    if let Some(s) = b.get(at + 8..at + 24) {
        d.copy_from_slice(s);
    }
    (rd32(b, at), rd32(b, at + 4), d)
}

/// The driver's copy of the port's scheduler tree.
#[derive(Clone, Debug)]
pub struct Tree {
    nodes: heapless::Vec<Node, MAX_NODES>,
    /// Logical layers (0x0412).
    pub layers: u8,
    /// Layer of the entry point (from the default topology).
    pub entry_layer: u8,
    /// The node before the default leaf (ice `last_node_teid`).
    pub last_node_teid: u32,
    /// Max children of a node per layer (0x0412), 0 = not known (no limit
    /// is applied).
    max_children: [u16; MAX_LAYERS],
    /// TEIDs of the firmware's default nodes (from the default topology):
    /// ice links only the nodes it adds itself into its per-layer sibling
    /// lists (ice_sched_add_elems), which is where it looks for support
    /// nodes with room (ice_sched_calc_vsi_support_nodes).
    dflt: heapless::Vec<u32, MAX_NODES>,
}

impl Tree {
    /// An empty tree for a scheduler of `layers` layers (2..=9).
    pub fn new(layers: u8) -> Result<Tree, CmdError> {
        if !(2..=MAX_LAYERS as u8).contains(&layers) {
            return Err(CmdError::BadResponse("scheduler layer count outside 2..=9"));
        }
        Ok(Tree {
            nodes: heapless::Vec::new(),
            layers,
            entry_layer: 0,
            last_node_teid: 0,
            max_children: [0; MAX_LAYERS],
            dflt: heapless::Vec::new(),
        })
    }

    /// Takes the per-layer child limits from Query Scheduler Resources
    /// (ice `hw->max_children`), which [`AdminQueue::sched_add_nodes`]
    /// honours.
    pub fn set_max_children(&mut self, res: &super::cmd::SchedResources) {
        for (m, r) in self.max_children.iter_mut().zip(res.max_children.iter()) {
            *m = r.unwrap_or(0);
        }
    }

    /// The nodes, in insertion order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node with this TEID.
    pub fn find(&self, teid: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.teid == teid)
    }

    /// Children of `teid`.
    pub fn children(&self, teid: u32) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(move |n| n.parent == teid && n.teid != teid)
    }

    /// The root's TEID.
    pub fn root(&self) -> Option<u32> {
        self.nodes.iter().find(|n| n.layer == 0).map(|n| n.teid)
    }

    /// The TC node of traffic class `tc`.
    pub fn tc_node(&self, tc: u8) -> Option<u32> {
        self.nodes.iter().find(|n| n.layer == 1 && n.tc == tc).map(|n| n.teid)
    }

    /// VSI layer (ice_sched.c → ice_sched_get_vsi_layer): N − 4 when the
    /// tree has more than 5 layers and that layer lies below the entry
    /// point, else the entry-point layer itself.
    pub fn vsi_layer(&self) -> u8 {
        match self.layers.checked_sub(4) {
            Some(l) if self.layers > 5 && l > self.entry_layer => l,
            _ => self.entry_layer,
        }
    }

    /// Queue-group layer (ice_sched_get_qgrp_layer).
    pub fn qgrp_layer(&self) -> u8 {
        self.layers.saturating_sub(2)
    }

    /// Most queue sets one VSI node's subtree can hold: the product of the
    /// child limits of the layers from the VSI layer to the queue-group
    /// layer (ice_sched.c → ice_sched_recalc_vsi_support_nodes,
    /// `max_queue_cnt`). `None` while a limit is unknown.
    pub fn vsi_node_capacity(&self) -> Option<u32> {
        let mut cap = 1u32;
        for layer in self.vsi_layer()..=self.qgrp_layer() {
            match self.max_children.get(usize::from(layer)).copied() {
                Some(m) if m > 0 => cap = cap.saturating_mul(u32::from(m)),
                _ => return None,
            }
        }
        Some(cap)
    }

    /// Whether `teid` lies below `ancestor` (or is it).
    pub fn in_subtree(&self, ancestor: u32, teid: u32) -> bool {
        let mut cur = teid;
        for _ in 0..=MAX_LAYERS {
            if cur == ancestor {
                return true;
            }
            match self.find(cur) {
                Some(n) if n.parent != cur && n.layer > 0 => cur = n.parent,
                _ => return false,
            }
        }
        false
    }

    /// The queue-group node a new RDMA qset of `branch` goes under
    /// (ice_sched.c → ice_sched_get_free_qparent, ice_sched_get_free_qgrp):
    /// the VSI node when the VSI and queue-group layers coincide; else,
    /// among the TC's queue-group-layer nodes in the order they were added
    /// that lie in the VSI's subtree and are RDMA-owned, the first with
    /// fewer children than the layer allows, or a later one with fewer
    /// children still (the first childless one wins). `None` when all are
    /// full (ice: EINVAL).
    pub fn free_qparent(&self, branch: &RdmaBranch) -> Option<u32> {
        let qgl = self.qgrp_layer();
        if qgl == self.vsi_layer() {
            return Some(branch.vsi_node);
        }
        let max = match self.max_children.get(usize::from(qgl)).copied().unwrap_or(0) {
            0 => usize::MAX,
            m => usize::from(m),
        };
        let mut cands = self.nodes.iter().filter(|n| {
            n.layer == qgl
                && n.tc == branch.tc
                && n.owner == Owner::Rdma
                && self.in_subtree(branch.vsi_node, n.teid)
        });
        let first = cands.by_ref().find(|n| self.children(n.teid).count() < max)?;
        let mut best = (first.teid, self.children(first.teid).count());
        if best.1 == 0 {
            return Some(best.0);
        }
        for n in cands {
            let c = self.children(n.teid).count();
            if c < best.1 {
                best = (n.teid, c);
                if c == 0 {
                    break;
                }
            }
        }
        Some(best.0)
    }

    fn push(&mut self, n: Node) -> Result<(), CmdError> {
        self.nodes.push(n).map_err(|_| CmdError::Invalid("scheduler tree full"))
    }

    fn remove(&mut self, teid: u32) {
        self.nodes.retain(|n| n.teid != teid);
        self.dflt.retain(|t| *t != teid);
    }

    /// Writes the nodes in depth-first order from the root (children in the
    /// order they were added) into `out`; returns how many were written.
    pub fn depth_first(&self, out: &mut [Node]) -> usize {
        let Some(root) = self.root() else { return 0 };
        let mut stack: heapless::Vec<u32, MAX_NODES> = heapless::Vec::new();
        let _ = stack.push(root);
        let mut n = 0;
        while let Some(t) = stack.pop() {
            if let (Some(node), Some(slot)) = (self.find(t), out.get_mut(n)) {
                *slot = *node;
                n += 1;
            }
            // push children in reverse so the first added is visited first
            let kids: heapless::Vec<u32, MAX_NODES> = self.children(t).map(|c| c.teid).collect();
            for k in kids.iter().rev() {
                let _ = stack.push(*k);
            }
        }
        n
    }
}

/// Refuses more queue sets than one VSI node's subtree holds.
fn check_vsi_node_capacity(tree: &Tree, max_qs: u16) -> Result<(), CmdError> {
    match tree.vsi_node_capacity() {
        Some(cap) if u32::from(max_qs) > cap => {
            Err(CmdError::Invalid("more RDMA queue sets than one VSI node's subtree holds"))
        }
        _ => Ok(()),
    }
}

/// The RDMA branch of one VSI on one TC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmaBranch {
    /// The VSI node.
    pub vsi_node: u32,
    /// The first RDMA queue-group node (the VSI node when the two layers
    /// coincide); qsets go to [`Tree::free_qparent`].
    pub qgrp_node: u32,
    /// The traffic class.
    pub tc: u8,
    /// Queue sets the branch was sized for (ice `max_rdmaq[tc]`).
    pub max_qs: u16,
}

impl<H: Hal, B: Bar> AdminQueue<H, B> {
    /// Get Default Topology 0x0400 for `lport` into `buf` (4 KiB): returns
    /// the number of branches (response byte 17) (ice_aq_get_dflt_topo).
    pub fn get_default_topology(&mut self, lport: u8, buf: &mut [u8]) -> Result<u8, CmdError> {
        let mut d = Desc::new(Opcode::GetDefaultTopology);
        d.set_u8(16, lport);
        self.exec(&mut d, Some(buf))?;
        Ok(d.u8_at(17))
    }

    /// Runs scheduling-element command `op` on one group (bytes 16–17) in
    /// `buf`; unless the firmware answers one group done (bytes 18–19), a
    /// [`CmdError::BadResponse`] saying `what`.
    fn one_group(
        &mut self,
        op: Opcode,
        buf: &mut [u8],
        what: &'static str,
    ) -> Result<(), CmdError> {
        let mut d = Desc::new(op);
        d.set_u16(16, 1);
        self.exec(&mut d, Some(buf))?;
        if d.u16_at(18) != 1 {
            return Err(CmdError::BadResponse(what));
        }
        Ok(())
    }

    /// Query Scheduling Elements 0x0404 for one TEID: returns (parent,
    /// element data) (ice_sched_query_elem).
    pub fn query_sched_elem(&mut self, teid: u32) -> Result<(u32, [u8; 16]), CmdError> {
        let mut buf = [0u8; ELEM_LEN];
        buf[4..8].copy_from_slice(&teid.to_le_bytes());
        self.one_group(Opcode::QuerySchedElems, &mut buf, "scheduling element not found")?;
        let (parent, _, data) = elem_at(&buf, 0);
        Ok((parent, data))
    }

    /// Delete Scheduling Elements 0x040F: one group, `teid` under `parent`
    /// (ice_sched_remove_elems). Refused with [`CmdError::InUse`] while a
    /// live RDMA device holds a VSI (its branch is in the tree).
    pub fn delete_sched_elem(&mut self, parent: u32, teid: u32) -> Result<(), CmdError> {
        self.refuse_if_held(None)?;
        let mut buf = [0u8; 12];
        buf[0..4].copy_from_slice(&parent.to_le_bytes());
        buf[4..6].copy_from_slice(&1u16.to_le_bytes());
        buf[8..12].copy_from_slice(&teid.to_le_bytes());
        self.one_group(Opcode::DeleteSchedElems, &mut buf, "scheduling element not deleted")
    }

    /// Add Scheduling Elements 0x0401: one group of `teids.len()` generic
    /// nodes under `parent` (1..=170, what one 4 KiB buffer holds); the
    /// TEIDs the firmware writes back go
    /// to `teids` (ice_sched_add_elems; response bytes 18–19 = groups added,
    /// which must be 1).
    pub fn add_sched_elems(&mut self, parent: u32, teids: &mut [u32]) -> Result<(), CmdError> {
        let n = teids.len();
        if n == 0 || 8 + n * ELEM_LEN > MAX_BUF_LEN {
            return Err(CmdError::Invalid("scheduling elements beyond one buffer"));
        }
        let mut buf = [0u8; MAX_BUF_LEN];
        let len = 8 + n * ELEM_LEN;
        buf[0..4].copy_from_slice(&parent.to_le_bytes());
        buf[4..6].copy_from_slice(&(n as u16).to_le_bytes());
        for i in 0..n {
            let at = 8 + i * ELEM_LEN;
            buf[at..at + 4].copy_from_slice(&parent.to_le_bytes());
            buf[at + 8..at + 24].copy_from_slice(&default_elem_data(elem_type::GENERIC));
        }
        let what = "firmware added no scheduling element";
        self.one_group(Opcode::AddSchedElems, &mut buf[..len], what)?;
        for (i, t) in teids.iter_mut().enumerate() {
            *t = rd32(&buf, 8 + i * ELEM_LEN + 4);
        }
        Ok(())
    }

    /// [`add_sched_elems`](Self::add_sched_elems) for one node.
    pub fn add_sched_elem(&mut self, parent: u32) -> Result<u32, CmdError> {
        let mut t = [0u32; 1];
        self.add_sched_elems(parent, &mut t)?;
        Ok(t[0])
    }

    /// Add RDMA Queue Set 0x0C33: one group under the RDMA queue-group node
    /// `parent`, one entry per `qs_handles` (tx_qset_id = irdma's
    /// qs_handle, 10 bits); the TEIDs the firmware assigns go to `teids`
    /// (ice_aq_add_rdma_qsets; spec §2.13).
    pub fn add_rdma_qsets(
        &mut self,
        parent: u32,
        qs_handles: &[u16],
        teids: &mut [u32],
    ) -> Result<(), CmdError> {
        let n = qs_handles.len();
        if n == 0 || teids.len() < n || 8 + n * ELEM_LEN > MAX_BUF_LEN {
            return Err(CmdError::Invalid("queue-set count out of range"));
        }
        if qs_handles.iter().any(|h| *h > 0x3ff) {
            return Err(CmdError::Invalid("qs_handle beyond 10 bits"));
        }
        let mut buf = [0u8; MAX_BUF_LEN];
        let len = 8 + n * ELEM_LEN;
        buf[0..4].copy_from_slice(&parent.to_le_bytes());
        buf[4..6].copy_from_slice(&(n as u16).to_le_bytes());
        for (i, h) in qs_handles.iter().enumerate() {
            let at = 8 + i * ELEM_LEN;
            buf[at..at + 2].copy_from_slice(&h.to_le_bytes());
            buf[at + 8..at + 24].copy_from_slice(&default_elem_data(0));
        }
        let mut d = Desc::new(Opcode::AddRdmaQset);
        d.set_u8(16, 1);
        self.exec(&mut d, Some(&mut buf[..len]))?;
        for (i, t) in teids.iter_mut().take(n).enumerate() {
            *t = rd32(&buf, 8 + i * ELEM_LEN + 4);
        }
        Ok(())
    }

    /// Disable Tx Queues 0x0C31 for one RDMA qset: FLUSH_PIPE (byte 16 bit
    /// 3), one entry, timeout 5 (bytes 18–19 bits 15:10); the item is the
    /// parent TEID, count 1, q_id = qs_handle | bit 15 (RDMA qset)
    /// (ice_aq_dis_lan_txq via ice_dis_vsi_rdma_qset; spec §2.13).
    ///
    /// Refused with [`CmdError::InUse`] while a live RDMA device holds a
    /// VSI: its qsets are released through
    /// [`LanOps::unregister_qset`](crate::lan::LanOps::unregister_qset) on
    /// the [`IceLan`](super::IceLan), which knows which are the device's.
    pub fn dis_rdma_qset(&mut self, parent: u32, qs_handle: u16) -> Result<(), CmdError> {
        if qs_handle > 0x3ff {
            return Err(CmdError::Invalid("qs_handle beyond 10 bits"));
        }
        self.refuse_if_held(None)?;
        let mut buf = [0u8; 8];
        buf[0..4].copy_from_slice(&parent.to_le_bytes());
        buf[4] = 1;
        buf[6..8].copy_from_slice(&(qs_handle | 0x8000).to_le_bytes());
        let mut d = Desc::new(Opcode::DisableTxQueues);
        d.set_u8(16, 1 << 3);
        d.set_u8(17, 1);
        d.set_u16(18, 5 << 10);
        self.exec(&mut d, Some(&mut buf))?;
        Ok(())
    }

    /// ice_sched_init_port: reads the default topology of `lport`, records
    /// every node (querying each except the root), notes the entry-point
    /// layer and deletes the firmware's default nodes at or below it,
    /// bottom-up, keeping root and TC nodes.
    pub fn sched_init_port(&mut self, lport: u8, layers: u8) -> Result<Tree, CmdError> {
        let mut tree = Tree::new(layers)?;
        let mut buf = [0u8; MAX_BUF_LEN];
        let branches = match self.get_default_topology(lport, &mut buf) {
            Ok(b) => b,
            // ice_sched_init_port tolerates a failed 0x0400 (the vectors'
            // `topo_error_*` case): the port is left without a tree, and
            // any later step that needs a TC node fails.
            Err(CmdError::Aq(super::aq::AqError::Firmware { .. })) => return Ok(tree),
            Err(e) => return Err(e),
        };
        if branches == 0 || branches > 8 {
            return Err(CmdError::BadResponse("default topology has no usable branch"));
        }
        // Branch: 8-byte header (parent TEID, element count), then up to 9
        // elements of 24 bytes: 224 bytes (spec §2.11, computed).
        let mut entry_layer = None;
        for br in 0..branches as usize {
            let base = br * (8 + MAX_LAYERS * ELEM_LEN);
            let count = u16::from_le_bytes([buf[base + 4], buf[base + 5]]) as usize;
            let count = count.min(MAX_LAYERS).min(layers as usize);
            for j in 0..count {
                let (parent, teid, data) = elem_at(&buf, base + 8 + j * ELEM_LEN);
                if tree.find(teid).is_some() {
                    continue;
                }
                let layer = j as u8;
                let mut node = Node { teid, parent, layer, tc: br as u8, owner: Owner::Lan, data };
                if layer > 0 {
                    let (p, d) = self.query_sched_elem(teid)?;
                    node.parent = p;
                    node.data = d;
                }
                if node.elem_type() == elem_type::ENTRY_POINT && entry_layer.is_none() {
                    entry_layer = Some(layer);
                }
                tree.push(node)?;
                let _ = tree.dflt.push(teid);
            }
            // ice takes the last node from the first branch only
            if br == 0 && count >= 2 {
                // the node before a leaf is the queue group (ice: last node)
                let last = elem_at(&buf, base + 8 + (count - 1) * ELEM_LEN);
                tree.last_node_teid = if last.2[0] == elem_type::LEAF {
                    elem_at(&buf, base + 8 + (count - 2) * ELEM_LEN).1
                } else {
                    last.1
                };
            }
        }
        tree.entry_layer = entry_layer.unwrap_or(1);
        // Remove the default nodes at or below the entry layer, deepest first.
        let el = tree.entry_layer.max(2);
        loop {
            let victim = tree
                .nodes()
                .iter()
                .filter(|n| n.layer >= el && tree.children(n.teid).next().is_none())
                .max_by_key(|n| n.layer)
                .copied();
            let Some(v) = victim else { break };
            self.delete_sched_elem(v.parent, v.teid)?;
            tree.remove(v.teid);
        }
        Ok(tree)
    }

    /// Adds `teids.len()` generic nodes under `parent` at `layer`, then
    /// queries each (ice_sched.c → ice_sched_add_nodes_to_layer). When the
    /// tree knows its layers' child limits ([`Tree::set_max_children`]) and
    /// the nodes do not fit under `parent`: a TC node parent is refused
    /// with [`CmdError::TcFull`] (EIO) before anything is sent; another
    /// parent is filled up, then the rest goes to the next nodes of its
    /// layer and TC (ice's sibling list, in the order they were added), one
    /// 0x0401 per parent; no sibling left is [`CmdError::Invalid`] (EINVAL).
    pub fn sched_add_nodes(
        &mut self,
        tree: &mut Tree,
        parent: u32,
        layer: u8,
        tc: u8,
        teids: &mut [u32],
    ) -> Result<(), CmdError> {
        if teids.is_empty() {
            // ice: nothing to add, nothing sent
            return Ok(());
        }
        // ice_sched_add_nodes_to_hw_layer refuses layers above the entry
        // point (EINVAL)
        if layer >= tree.layers || layer < tree.entry_layer {
            return Err(CmdError::Invalid("no such parent or layer"));
        }
        let Some(first) = tree.find(parent).copied() else {
            return Err(CmdError::Invalid("no such parent or layer"));
        };
        let max =
            usize::from(tree.max_children.get(usize::from(first.layer)).copied().unwrap_or(0));
        if max != 0
            && tree.tc_node(tc) == Some(parent)
            && tree.children(parent).count() + teids.len() > max
        {
            return Err(CmdError::TcFull);
        }
        if tree.nodes.len() + teids.len() > MAX_NODES {
            return Err(CmdError::Invalid("scheduler tree full"));
        }
        let mut parent = first;
        let mut done = 0;
        while done < teids.len() {
            let left = teids.len() - done;
            let children = tree.children(parent.teid).count();
            let n = if max == 0 || children + left <= max {
                left
            } else if tree.tc_node(tc) == Some(parent.teid) {
                return Err(CmdError::TcFull);
            } else if children < max {
                max - children
            } else {
                // full: the next node of the same layer and TC
                let at = tree.nodes.iter().position(|n| n.teid == parent.teid).unwrap_or(0);
                parent = tree
                    .nodes
                    .iter()
                    .skip(at + 1)
                    .find(|n| n.layer == parent.layer && n.tc == parent.tc)
                    .copied()
                    .ok_or(CmdError::Invalid("no sibling parent with room"))?;
                continue;
            };
            let chunk = teids.get_mut(done..done + n).ok_or(CmdError::Invalid("node count"))?;
            self.add_sched_elems(parent.teid, chunk)?;
            for t in chunk.iter() {
                let (p, data) = self.query_sched_elem(*t)?;
                tree.push(Node { teid: *t, parent: p, layer, tc, owner: Owner::Lan, data })?;
            }
            done += n;
        }
        Ok(())
    }

    /// Builds the RDMA branch for one VSI on `tc`, sized for `max_qs`
    /// queue sets (ice_cfg_vsi_rdma → ice_sched_cfg_vsi for a VSI new to
    /// the TC; ice_sched.c → ice_sched_add_vsi_to_topo,
    /// ice_sched_calc_vsi_support_nodes, ice_sched_add_vsi_support_nodes):
    /// a chain of generic nodes from the entry layer to the VSI layer under
    /// the TC node (LAN-owned, through [`AdminQueue::sched_add_nodes`], so a
    /// full TC node is [`CmdError::TcFull`] with nothing sent), except that
    /// above the VSI layer a node this driver added earlier with room is
    /// followed instead (from the first one with room up, the chain's first
    /// children are followed); then the RDMA-owned nodes below it
    /// ([`AdminQueue::sched_grow_rdma`] from 0). A VSI node this driver
    /// already added on the TC (a set-up that failed half-way) is reused
    /// and grown from 0 queue sets, as ice finds it by its VSI handle
    /// (ice_sched_get_vsi_node). `max_qs` = 0 adds no
    /// queue-group node, as ice (no qset can be added then). More queue
    /// sets than one VSI node's subtree holds ([`Tree::vsi_node_capacity`])
    /// are refused with [`CmdError::Invalid`] before anything is sent: the
    /// driver gives the VSI one VSI-layer node per TC (ice 6.1.192 adds
    /// more VSI nodes, ice_sched_recalc_vsi_support_nodes).
    pub fn sched_cfg_vsi_rdma(
        &mut self,
        tree: &mut Tree,
        tc: u8,
        max_qs: u16,
    ) -> Result<RdmaBranch, CmdError> {
        let tc_node =
            tree.tc_node(tc).ok_or(CmdError::Invalid("no TC node for this traffic class"))?;
        check_vsi_node_capacity(tree, max_qs)?;
        let vsi_layer = tree.vsi_layer();
        // a VSI node this driver added on the TC before (a branch whose
        // set-up failed half-way) is the VSI's (ice_sched_cfg_vsi →
        // ice_sched_get_vsi_node): it grows from no queue set
        if let Some(v) = tree
            .nodes
            .iter()
            .find(|n| n.layer == vsi_layer && n.tc == tc && !tree.dflt.contains(&n.teid))
        {
            let mut branch = RdmaBranch { vsi_node: v.teid, qgrp_node: v.teid, tc, max_qs: 0 };
            self.sched_grow_rdma(tree, &mut branch, max_qs)?;
            return Ok(branch);
        }
        let start = tree.entry_layer.max(2);
        // ice_sched_calc_vsi_support_nodes: from the VSI layer up to the
        // entry point, one node per layer, up to the first layer where a
        // node this driver added (not a default one) still has room; none
        // reused while the TC node has no child
        let mut need = [false; MAX_LAYERS];
        let tc_has_children = tree.children(tc_node).next().is_some();
        for layer in (start..=vsi_layer).rev() {
            if tc_has_children && layer != vsi_layer {
                let m =
                    usize::from(tree.max_children.get(usize::from(layer)).copied().unwrap_or(0));
                let room = tree.nodes.iter().any(|n| {
                    n.layer == layer
                        && n.tc == tc
                        && !tree.dflt.contains(&n.teid)
                        && (m == 0 || tree.children(n.teid).count() < m)
                });
                if room {
                    break;
                }
            }
            if let Some(x) = need.get_mut(usize::from(layer)) {
                *x = true;
            }
        }
        // ice_sched_add_vsi_support_nodes: down from the TC node, a new node
        // where one is needed (through the child limits: a full TC node is
        // TcFull), else the first child
        let mut parent = tc_node;
        for layer in start..=vsi_layer {
            if need.get(usize::from(layer)).copied().unwrap_or(false) {
                let mut t = [0u32; 1];
                self.sched_add_nodes(tree, parent, layer, tc, &mut t)?;
                parent = t[0];
            } else {
                parent = tree
                    .children(parent)
                    .next()
                    .map(|n| n.teid)
                    .ok_or(CmdError::BadResponse("support node without child"))?;
            }
        }
        let mut branch = RdmaBranch { vsi_node: parent, qgrp_node: parent, tc, max_qs: 0 };
        self.sched_grow_rdma(tree, &mut branch, max_qs)?;
        Ok(branch)
    }

    /// Room for `max_qs` queue sets in `branch` (ice_sched.c →
    /// ice_sched_update_vsi_child_nodes, ice_sched_calc_vsi_child_nodes,
    /// ice_sched_add_vsi_child_nodes): nothing when `max_qs` is not more
    /// than before; else, for the new ones, ceil(n / max children) nodes
    /// at the queue-group layer, ceil of that at the layer above, and so
    /// up to just below the VSI layer (at least one each); each layer's
    /// nodes are added under the first node added one layer up
    /// ([`AdminQueue::sched_add_nodes`], which spills into its siblings),
    /// RDMA-owned. More than [`Tree::vsi_node_capacity`] is refused with
    /// [`CmdError::Invalid`] before anything is sent (see
    /// [`AdminQueue::sched_cfg_vsi_rdma`]).
    pub fn sched_grow_rdma(
        &mut self,
        tree: &mut Tree,
        branch: &mut RdmaBranch,
        max_qs: u16,
    ) -> Result<(), CmdError> {
        if max_qs <= branch.max_qs {
            return Ok(());
        }
        check_vsi_node_capacity(tree, max_qs)?;
        let (vsil, qgl) = (tree.vsi_layer(), tree.qgrp_layer());
        let mut count = [0u16; MAX_LAYERS];
        let mut num = max_qs - branch.max_qs;
        for layer in (vsil + 1..=qgl).rev() {
            let m = tree.max_children.get(usize::from(layer)).copied().unwrap_or(0);
            num = if m == 0 { num.min(1) } else { num.div_ceil(m) };
            if let Some(c) = count.get_mut(usize::from(layer)) {
                *c = num.max(1);
            }
        }
        let mut parent = branch.vsi_node;
        for layer in vsil + 1..=qgl {
            let n = usize::from(count.get(usize::from(layer)).copied().unwrap_or(1));
            let mut teids = [0u32; MAX_NODES];
            let teids = teids.get_mut(..n).ok_or(CmdError::Invalid("scheduler tree full"))?;
            self.sched_add_nodes(tree, parent, layer, branch.tc, teids)?;
            for t in teids.iter() {
                if let Some(node) = tree.nodes.iter_mut().find(|x| x.teid == *t) {
                    node.owner = Owner::Rdma;
                }
            }
            parent = teids.first().copied().unwrap_or(parent);
            if layer == qgl && branch.max_qs == 0 {
                branch.qgrp_node = parent;
            }
        }
        branch.max_qs = max_qs;
        Ok(())
    }

    /// Adds RDMA qsets, all under the queue-group node
    /// [`Tree::free_qparent`] picks, and records them as leaves
    /// (ice_ena_vsi_rdma_qset): one 0x0C33, then a query of each new TEID.
    /// No queue-group node with room is [`CmdError::Invalid`] (ice:
    /// EINVAL), nothing sent.
    pub fn sched_ena_rdma_qsets(
        &mut self,
        tree: &mut Tree,
        branch: &RdmaBranch,
        tc: u8,
        qs_handles: &[u16],
        teids: &mut [u32],
    ) -> Result<(), CmdError> {
        if tree.nodes.len() + qs_handles.len() > MAX_NODES {
            return Err(CmdError::Invalid("scheduler tree full"));
        }
        let parent =
            tree.free_qparent(branch).ok_or(CmdError::Invalid("no RDMA queue group with room"))?;
        self.add_rdma_qsets(parent, qs_handles, teids)?;
        let leaf = tree.layers.saturating_sub(1);
        for t in teids.iter().take(qs_handles.len()) {
            let (p, data) = self.query_sched_elem(*t)?;
            tree.push(Node { teid: *t, parent: p, layer: leaf, tc, owner: Owner::Lan, data })?;
        }
        Ok(())
    }

    /// Removes one RDMA qset leaf (ice_dis_vsi_rdma_qset): an unknown TEID
    /// is skipped without a command; on success the leaf leaves the tree.
    pub fn sched_dis_rdma_qset(
        &mut self,
        tree: &mut Tree,
        teid: u32,
        qs_handle: u16,
    ) -> Result<(), CmdError> {
        let Some(node) = tree.find(teid).copied() else { return Ok(()) };
        self.dis_rdma_qset(node.parent, qs_handle)?;
        tree.remove(teid);
        Ok(())
    }
}
