//! ARP cache, address handle, multicast group and work-scheduler node commands.

use irdma_hal::Field;
use irdma_hal::cqp::{ah, arp, mcast, op, ws};

use super::common::*;
use crate::cqp::{EncodeError, FieldName, fit, flag};

/// A MAC address as the CQP words carry it: byte 0 most significant
/// (irdma_kcompat.c: ether_addr_to_u64).
pub fn mac_to_u64(mac: [u8; 6]) -> u64 {
    mac.iter().fold(0u64, |acc, b| (acc << 8) | *b as u64)
}

/// MANAGE_ARP (0x0F) add/update — ctrl.c: irdma_sc_add_arp_cache_entry;
/// spec §4.3.18.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArpAdd {
    /// ARP table index (< 2^12; Linux reserves 0).
    pub arp_index: u16,
    /// Neighbour MAC.
    pub mac: [u8; 6],
    /// REACHMAX (Linux: 0).
    pub reach_max: u32,
    /// PERMANENT (Linux: 1).
    pub permanent: bool,
}

impl CqpCommand for ArpAdd {
    const OPCODE: u8 = op::MANAGE_ARP;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        let h = header(Self::OPCODE)
            | fit(arp::ARPENTRYIDX, self.arp_index as u64, FieldName::ArpIndex)?
            | arp::ENTRYVALID.mask()
            | flag(arp::PERMANENT, self.permanent);
        *wqe = [
            0,
            arp::REACHMAX.prep(self.reach_max as u64),
            arp::MACADDR.prep(mac_to_u64(self.mac)),
            h,
            0,
            0,
            0,
            0,
        ];
        Ok(())
    }
}

/// MANAGE_ARP (0x0F) delete — ctrl.c: irdma_sc_del_arp_cache_entry; spec §4.3.18.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArpDel {
    /// ARP table index.
    pub arp_index: u16,
}

impl CqpCommand for ArpDel {
    const OPCODE: u8 = op::MANAGE_ARP;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        let h = header(Self::OPCODE)
            | fit(arp::ARPENTRYIDX, self.arp_index as u64, FieldName::ArpIndex)?;
        *wqe = [0, 0, 0, h, 0, 0, 0, 0];
        Ok(())
    }
}

// ---------------------------------------------------------------- UD

/// An address handle as the device holds it (uda.h: struct irdma_ah_info;
/// built by uda.c: irdma_sc_access_ah). IP words are host order, `[0]` the
/// most significant word of an IPv6 address; IPv4 uses `[0]` only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AhInfo {
    /// Address-handle index (< 2^24).
    pub ah_idx: u32,
    /// Protection domain (< 2^24).
    pub pd_idx: u32,
    /// ARP-table index of the next hop (its MAC reaches the hardware only
    /// through that entry).
    pub dst_arp_index: u16,
    /// Destination IP.
    pub dest_ip: [u32; 4],
    /// Source IP.
    pub src_ip: [u32; 4],
    /// IPv6 flow label (< 2^20).
    pub flow_label: u32,
    /// VLAN tag (id | priority << 13); Linux passes 0x1000 (VLAN_N_VID)
    /// without a VLAN, written as it is.
    pub vlan_tag: u16,
    /// Insert the VLAN tag.
    pub insert_vlan_tag: bool,
    /// Traffic class (DSCP << 2 | ECN).
    pub tc_tos: u8,
    /// Hop limit / TTL.
    pub hop_ttl: u8,
    /// The **local** MAC (Linux copies the netdev address).
    pub mac: [u8; 6],
    /// IPv4 addresses.
    pub ipv4: bool,
    /// Loopback (Linux: source address == destination address).
    pub loopback: bool,
}

impl AhInfo {
    /// The AH WQE for `opcode`. The vendor checks nothing and cuts wider
    /// values to the field; the driver refuses them instead.
    fn encode(&self, opcode: u8, wqe: &mut [u64; 8]) -> Result<(), EncodeError> {
        const PD_IDX: Field = Field::bits(23, 0);
        let pd = fit(PD_IDX, self.pd_idx as u64, FieldName::PdIdx)?;
        let ip = |a: [u32; 4]| -> (u64, u64) {
            if self.ipv4 {
                (a[0] as u64, 0)
            } else {
                (
                    (a[2] as u64) << 32 | a[3] as u64, // low half
                    (a[0] as u64) << 32 | a[1] as u64, // high half
                )
            }
        };
        let (d_lo, d_hi) = ip(self.dest_ip);
        let (s_lo, s_hi) = ip(self.src_ip);
        *wqe = [
            ah::MACADDR.prep(mac_to_u64(self.mac)),
            ah::PDINDEXLO.prep(pd & 0xffff)
                | ah::TC.prep(self.tc_tos as u64)
                | ah::VLANTAG.prep(self.vlan_tag as u64),
            ah::ARPINDEX.prep(self.dst_arp_index as u64)
                | ah::HOPLIMIT.prep(self.hop_ttl as u64)
                | ah::PDINDEXHI.prep(pd >> 16)
                | fit(ah::FLOWLABEL, self.flow_label as u64, FieldName::FlowLabel)?,
            header(opcode)
                | fit(ah::AVIDX, self.ah_idx as u64, FieldName::AhIdx)?
                | flag(ah::IPV4VALID, self.ipv4)
                | flag(ah::INSERTVLANTAG, self.insert_vlan_tag)
                | flag(ah::DOLOOPBACK, self.loopback),
            d_lo,
            d_hi,
            s_lo,
            s_hi,
        ];
        Ok(())
    }
}

ops_over!(AhInfo {
    /// CREATE_ADDR_HANDLE (0x1C) — uda.c: irdma_sc_access_ah.
    CreateAh = op::CREATE_ADDR_HANDLE,
    /// MODIFY_ADDR_HANDLE (0x1D) — uda.c: irdma_sc_access_ah (Linux never
    /// issues it; the layout is the create's).
    ModifyAh = op::MODIFY_ADDR_HANDLE,
    /// DESTROY_ADDR_HANDLE (0x1E) — uda.c: irdma_sc_access_ah; Linux sends the
    /// full AH info, as at create.
    DestroyAh = op::DESTROY_ADDR_HANDLE,
});

/// A multicast group (uda.h: struct irdma_mcast_grp_info; built by uda.c:
/// irdma_access_mcast_grp). The members live in a 64-byte context in host
/// memory ([`McastGrpInfo::ctx`]) that the caller writes at `ctx_pa` before
/// posting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct McastGrpInfo {
    /// Group index (< 4096; the vendor refuses more with -EINVAL).
    pub mg_id: u16,
    /// IPv4 group address.
    pub ipv4: bool,
    /// Group IP (host order, `[0]` most significant; IPv4 in `[0]`).
    pub dest_ip: [u32; 4],
    /// Group MAC.
    pub dest_mac: [u8; 6],
    /// VLAN id; Linux passes 0xFFFF with `vlan_valid` false off a VLAN.
    /// Without `vlan_valid` the low 12 bits are written as the vendor does
    /// (the hardware ignores them); with it, more than 12 bits is refused.
    pub vlan_id: u16,
    /// VLAN id valid.
    pub vlan_valid: bool,
    /// HMC function id (< 64).
    pub hmc_fn_id: u8,
    /// Queue-set handle (< 1024).
    pub qs_handle: u16,
    /// Bus address of the 64-byte group context.
    pub ctx_pa: u64,
}

/// One member slot of a multicast-group context.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct McastMember {
    /// Member QP id (< 2^18).
    pub qp_id: u32,
    /// Destination port (Linux: 0).
    pub dest_port: u16,
}

impl McastGrpInfo {
    /// The 64-byte group context for `members` (slots in table order; `None`
    /// = unused): valid members packed from entry 0, the rest zero, as
    /// uda.c: irdma_access_mcast_grp fills it.
    pub fn ctx(members: &[Option<McastMember>]) -> Result<[u64; 8], EncodeError> {
        let mut out = [0u64; mcast::CTX_ENTRIES];
        for (n, m) in members.iter().flatten().enumerate() {
            let Some(slot) = out.get_mut(n) else {
                return Err(above_max(
                    FieldName::McastMembers,
                    n as u64 + 1,
                    mcast::CTX_ENTRIES as u32,
                ));
            };
            *slot = fit(mcast::CTX_QPID, m.qp_id as u64, FieldName::MemberQpId)?
                | mcast::CTX_VALID.mask()
                | mcast::CTX_DESTPORT.prep(m.dest_port as u64);
        }
        Ok(out)
    }

    fn encode(&self, opcode: u8, wqe: &mut [u64; 8]) -> Result<(), EncodeError> {
        below(self.mg_id as u64, mcast::MAX_GROUPS, FieldName::MgId)?;
        let vlan = if self.vlan_valid {
            fit(mcast::VLANID, self.vlan_id as u64, FieldName::VlanId)?
        } else {
            mcast::VLANID.prep(self.vlan_id as u64)
        };
        let (lo, hi) = if self.ipv4 {
            (self.dest_ip[0] as u64, 0)
        } else {
            (
                (self.dest_ip[2] as u64) << 32 | self.dest_ip[3] as u64,
                (self.dest_ip[0] as u64) << 32 | self.dest_ip[1] as u64,
            )
        };
        *wqe = [
            mcast::DMAC.prep(mac_to_u64(self.dest_mac)),
            fit(mcast::HMCFNID, self.hmc_fn_id as u64, FieldName::HmcFnId)?,
            vlan | fit(mcast::QS_HANDLE, self.qs_handle as u64, FieldName::QsHandle)?,
            header(opcode)
                | mcast::MGIDX.prep(self.mg_id as u64)
                | flag(mcast::VLANVALID, self.vlan_valid)
                | flag(mcast::IPV4VALID, self.ipv4),
            self.ctx_pa,
            0,
            lo,
            hi,
        ];
        Ok(())
    }
}

ops_over!(McastGrpInfo {
    /// CREATE_MCAST_GRP (0x26) — uda.c: irdma_access_mcast_grp.
    CreateMcastGrp = op::CREATE_MCAST_GRP,
    /// MODIFY_MCAST_GRP (0x27) — uda.c: irdma_access_mcast_grp.
    ModifyMcastGrp = op::MODIFY_MCAST_GRP,
    /// DESTROY_MCAST_GRP (0x28) — uda.c: irdma_access_mcast_grp.
    DestroyMcastGrp = op::DESTROY_MCAST_GRP,
});

/// Work-scheduler node operations (defs.h: enum irdma_ws_node_op).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WsNodeOp {
    /// Add.
    #[default]
    Add,
    /// Modify.
    Modify,
    /// Delete.
    Delete,
}

/// WORK_SCHED_NODE (0x2C) — ctrl.c: irdma_sc_manage_ws_node; spec §4.3.20.
/// A leaf add completes with the queue-set handle in OPRETVAL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WsNode {
    /// Operation.
    pub op: WsNodeOp,
    /// Node id (< 2^14).
    pub node_id: u16,
    /// Parent node id (< 2^14).
    pub parent_id: u16,
    /// VSI.
    pub vsi: u16,
    /// Leaf node.
    pub leaf: bool,
    /// Enabled.
    pub enable: bool,
    /// Priority type (1 weighted RR).
    pub prio_type: u8,
    /// Traffic class (< 8).
    pub tc: u8,
    /// Weight (< 128).
    pub weight: u8,
}

impl CqpCommand for WsNode {
    const OPCODE: u8 = op::WORK_SCHED_NODE;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        let op = match self.op {
            WsNodeOp::Add => 0,
            WsNodeOp::Modify => 1,
            WsNodeOp::Delete => 2,
        };
        let h = header(Self::OPCODE)
            | fit(ws::NODEID, self.node_id as u64, FieldName::NodeId)?
            | fit(ws::PARENTID, self.parent_id as u64, FieldName::ParentId)?
            | ws::NODEOP.prep(op)
            | fit(ws::TC, self.tc as u64, FieldName::Tc)?
            | fit(ws::PRIOTYPE, self.prio_type as u64, FieldName::PrioType)?
            | flag(ws::NODETYPE, self.leaf)
            | flag(ws::ENABLENODE, self.enable);
        let w32 =
            fit(ws::WEIGHT, self.weight as u64, FieldName::Weight)? | ws::VSI.prep(self.vsi as u64);
        *wqe = [0, 0, 0, h, w32, 0, 0, 0];
        Ok(())
    }
}
