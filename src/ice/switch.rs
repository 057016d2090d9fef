//! Receive switch rules that deliver the RDMA MAC's frames (and broadcast)
//! to the PF VSI (spec ice-lan-for-rdma §2.15; ice_switch.c →
//! ice_fill_sw_rule, ice_fill_sw_info; ice_fltr.c →
//! ice_fltr_add_mac_and_broadcast; conformance README "Switch rules").

use irdma_hal::{Bar, Hal};

use super::aq::AdminQueue;
use super::cmd::CmdError;
use super::desc::{Desc, Opcode, rc};

/// Size of a lookup rule with its 16-byte dummy Ethernet header.
pub const RULE_LEN: usize = 32;

/// Rule type TX (ICE_AQC_SW_RULES_T_LKUP_TX): what Linux installs for the
/// permanent MAC and broadcast.
const RULE_T_LKUP_TX: u16 = 1;
/// Recipe 1: MAC lookup (ICE_SW_LKUP_MAC).
const RECIPE_MAC: u16 = 1;
/// Action: forward to a VSI (type 0), VSI number bits 13:4, VALID bit 17.
const ACT_VSI_SHIFT: u32 = 4;
const ACT_VALID: u32 = 1 << 17;
/// LB_EN (bit 2): may loop back; LAN_EN (bit 3): may go to the wire.
const ACT_LB_EN: u32 = 1 << 2;
const ACT_LAN_EN: u32 = 1 << 3;
/// Dummy header length (DUMMY_ETH_HDR_LEN).
const DUMMY_HDR_LEN: u16 = 16;

/// The broadcast address.
pub const BROADCAST: [u8; 6] = [0xff; 6];

/// Which direction a lookup rule applies to (ice `fltr_info.flag`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleDir {
    /// Received frames (type LKUP_RX, source = logical port).
    Rx {
        /// Logical port.
        lport: u8,
    },
    /// Transmitted frames (type LKUP_TX, source = hardware VSI number);
    /// `tx_only` is ice's ICE_FLTR_TX_ONLY (never to the wire).
    Tx {
        /// Source VSI.
        vsi: u16,
        /// Loop back only.
        tx_only: bool,
    },
}

/// Where matching frames go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fwd {
    /// One VSI (action type 0).
    Vsi(u16),
    /// A VSI list (VSI_LIST bit 14, list id in bits 13:4).
    VsiList(u16),
}

/// Action bit: the id is a VSI list (ICE_SINGLE_ACT_VSI_LIST).
const ACT_VSI_LIST: u32 = 1 << 14;
/// Rule type RX.
const RULE_T_LKUP_RX: u16 = 0;

/// A MAC lookup rule as ice_fill_sw_rule builds it (spec §2.15; §7 item
/// 11): recipe MAC, the action (VALID, VSI or list id in bits 13:4), LB_EN
/// on Tx rules, LAN_EN on Tx rules in VEPA mode and, in VEB mode (Linux's
/// default), only for multicast/broadcast addresses and never for Tx-only
/// rules; dummy header dst = `mac`, src 02:00:00:00:00:00, ethertype
/// 0x8100. Ids beyond 10 bits are refused (ice cuts them to the field).
/// A shorthand for [`lookup_rule`].
pub fn mac_rule(
    mac: [u8; 6],
    dir: RuleDir,
    fwd: Fwd,
    veb: bool,
) -> Result<[u8; RULE_LEN], CmdError> {
    let (flags, src) = match dir {
        RuleDir::Rx { lport } => (rule_flag::RX, u16::from(lport)),
        RuleDir::Tx { vsi, tx_only } => {
            if vsi > 0x3ff {
                return Err(CmdError::Invalid("VSI number beyond 10 bits"));
            }
            (rule_flag::TX | if tx_only { rule_flag::TX_ONLY } else { 0 }, vsi)
        }
    };
    let action = match fwd {
        Fwd::Vsi(v) => Action::Vsi(v),
        Fwd::VsiList(l) => Action::VsiList(l),
    };
    let spec = RuleSpec { lookup: Lookup::Mac(mac), action, flags, src, veb, op: RuleOp::Add };
    Ok(lookup_rule(&spec)?.bytes)
}

/// What a lookup rule matches (ice_sw_lkup_type; the code is also the
/// recipe id). Other lookups are not built by the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// ICE_SW_LKUP_MAC (1): destination MAC.
    Mac([u8; 6]),
    /// ICE_SW_LKUP_VLAN (4): VLAN id (12 bits) and the tag protocol id
    /// (`None` = 0x8100).
    Vlan {
        /// VLAN id.
        id: u16,
        /// TPID, when the caller gives one (ice's tpid_valid).
        tpid: Option<u16>,
    },
}

/// A rule's action (ice_sw_fwd_act_type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// ICE_FWD_TO_VSI: hardware VSI number (10 bits).
    Vsi(u16),
    /// ICE_FWD_TO_VSI_LIST: VSI list id (10 bits).
    VsiList(u16),
    /// ICE_FWD_TO_Q: absolute queue (11 bits).
    Queue(u16),
    /// ICE_FWD_TO_QGRP: first queue (11 bits) and group size; the region
    /// field is floor(log2(size)) (0 for size 0), at most 7.
    QueueGroup {
        /// First queue.
        queue: u16,
        /// Queues in the group.
        size: u16,
    },
    /// ICE_DROP_PACKET.
    Drop,
}

/// The bits of ice's `fltr_info.flag`.
pub mod rule_flag {
    /// ICE_FLTR_RX: a receive rule (type LKUP_RX), else LKUP_TX.
    pub const RX: u8 = 1;
    /// ICE_FLTR_TX: a transmit rule (LB_EN / LAN_EN apply).
    pub const TX: u8 = 2;
    /// ICE_FLTR_RX_LB: LB_EN off, LAN_EN on.
    pub const RX_LB: u8 = 4;
    /// ICE_FLTR_TX_ONLY: LAN_EN off.
    pub const TX_ONLY: u8 = 8;
}

/// Which switch-rules command the rule is for (ice_fill_sw_rule's `opc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleOp {
    /// Add (0x02A0): everything, with the header length.
    Add,
    /// Update (0x02A1): as Add but the header length is left 0 (the caller
    /// puts the rule index in bytes 12–13).
    Update,
    /// Remove (0x02A2): only the rule index; the action and header length
    /// are 0 and nothing else is written.
    Remove {
        /// The rule's index (fltr_rule_id).
        rule_id: u16,
    },
}

/// Everything ice_fill_sw_rule takes from `ice_fltr_info` and the switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleSpec {
    /// What the rule matches.
    pub lookup: Lookup,
    /// What it does.
    pub action: Action,
    /// [`rule_flag`] bits.
    pub flags: u8,
    /// Source: the logical port for Rx rules, the hardware VSI for Tx
    /// (written as given).
    pub src: u16,
    /// The switch is in VEB mode (ice `hw->evb_veb`).
    pub veb: bool,
    /// The command the rule goes with.
    pub op: RuleOp,
}

/// An encoded lookup rule and the loopback / LAN decisions ice records in
/// `fltr_info` (lb_en, lan_en).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The 32 rule bytes (ice_sw_rule_lkup_rx_tx with the dummy header).
    pub bytes: [u8; RULE_LEN],
    /// LB_EN was set.
    pub lb_en: bool,
    /// LAN_EN was set.
    pub lan_en: bool,
}

/// Action type 1: to a queue or queue group (ICE_SINGLE_ACT_TO_Q), queue
/// in bits 14:4, region in bits 17:15.
const ACT_TO_Q: u32 = 1;
const ACT_Q_REGION_SHIFT: u32 = 15;
/// Drop (ICE_SINGLE_ACT_DROP), with forwarding type 0 and VALID.
const ACT_DROP: u32 = 1 << 18;
/// Prune (type 2) with EGRESS (bit 15) and INGRESS (bit 16): VLAN rules
/// that forward to a VSI or list.
const ACT_PRUNE: u32 = 2 | (1 << 15) | (1 << 16);
/// Recipe 4: VLAN lookup (ICE_SW_LKUP_VLAN).
const RECIPE_VLAN: u16 = 4;
/// Offsets in the dummy header: ethertype (TPID) and VLAN TCI.
const HDR_ETHTYPE: usize = 16 + 12;
const HDR_VLAN_TCI: usize = 16 + 14;

/// ice_fill_sw_info: LB_EN for Tx rules that forward (not VLAN); LAN_EN
/// for forwarding Tx rules in VEPA mode, or in VEB mode for VLAN lookups
/// and multicast/broadcast MACs; TX_ONLY clears LAN_EN; RX_LB clears LB_EN
/// and sets LAN_EN (ice_switch.c → ice_fill_sw_info).
fn lb_lan(s: &RuleSpec) -> (bool, bool) {
    let forwards = !matches!(s.action, Action::Drop);
    let (mut lb, mut lan) = (false, false);
    if s.flags & rule_flag::TX != 0 && forwards {
        lb = !matches!(s.lookup, Lookup::Vlan { .. });
        lan = !s.veb
            || match s.lookup {
                Lookup::Vlan { .. } => true,
                Lookup::Mac(m) => m[0] & 1 != 0,
            };
    }
    if s.flags & rule_flag::TX_ONLY != 0 {
        lan = false;
    }
    if s.flags & rule_flag::RX_LB != 0 {
        lb = false;
        lan = true;
    }
    (lb, lan)
}

/// A lookup rule as ice_fill_sw_rule builds it for MAC and VLAN lookups
/// and every action (ice_switch.c → ice_fill_sw_rule, ice_fill_sw_info;
/// action bits from ice_lan_tx_rx.h, ICE_SINGLE_ACT_*). Stricter than ice:
/// VSI / list ids beyond 10 bits, queues beyond 11 bits, a queue-group
/// region beyond 3 bits and VLAN ids beyond 12 bits are refused with
/// [`CmdError::Invalid`] (ice cuts the first three to their field and
/// silently leaves the VLAN out).
pub fn lookup_rule(s: &RuleSpec) -> Result<Rule, CmdError> {
    let mut r = [0u8; RULE_LEN];
    if let RuleOp::Remove { rule_id } = s.op {
        r[12..14].copy_from_slice(&rule_id.to_le_bytes());
        return Ok(Rule { bytes: r, lb_en: false, lan_en: false });
    }
    let mut act = match s.action {
        Action::Vsi(id) | Action::VsiList(id) => {
            if id > 0x3ff {
                return Err(CmdError::Invalid("VSI or list id beyond 10 bits"));
            }
            let list = if matches!(s.action, Action::VsiList(_)) { ACT_VSI_LIST } else { 0 };
            let valid = if matches!(s.lookup, Lookup::Vlan { .. }) { 0 } else { ACT_VALID };
            (u32::from(id) << ACT_VSI_SHIFT) | list | valid
        }
        Action::Queue(q) | Action::QueueGroup { queue: q, .. } => {
            if q > 0x7ff {
                return Err(CmdError::Invalid("queue beyond 11 bits"));
            }
            let region = match s.action {
                Action::QueueGroup { size, .. } if size > 0 => 15 - size.leading_zeros(),
                _ => 0,
            };
            if region > 7 {
                return Err(CmdError::Invalid("queue group larger than the region field"));
            }
            ACT_TO_Q | (u32::from(q) << ACT_VSI_SHIFT) | (region << ACT_Q_REGION_SHIFT)
        }
        Action::Drop => ACT_DROP | ACT_VALID,
    };
    let (lb, lan) = lb_lan(s);
    if lb {
        act |= ACT_LB_EN;
    }
    if lan {
        act |= ACT_LAN_EN;
    }
    // dummy header: dst and src 02:00:00:00:00:00, ethertype 0x8100
    r[16] = 0x02;
    r[22] = 0x02;
    r[HDR_ETHTYPE] = 0x81;
    let recipe = match s.lookup {
        Lookup::Mac(mac) => {
            r[16..22].copy_from_slice(&mac);
            RECIPE_MAC
        }
        Lookup::Vlan { id, tpid } => {
            if id > 0xfff {
                return Err(CmdError::Invalid("VLAN id beyond 12 bits"));
            }
            if matches!(s.action, Action::Vsi(_) | Action::VsiList(_)) {
                act |= ACT_PRUNE;
            }
            r[HDR_VLAN_TCI..HDR_VLAN_TCI + 2].copy_from_slice(&id.to_be_bytes());
            r[HDR_ETHTYPE..HDR_ETHTYPE + 2].copy_from_slice(&tpid.unwrap_or(0x8100).to_be_bytes());
            RECIPE_VLAN
        }
    };
    let ty = if s.flags & rule_flag::RX != 0 { RULE_T_LKUP_RX } else { RULE_T_LKUP_TX };
    r[0..2].copy_from_slice(&ty.to_le_bytes());
    r[4..6].copy_from_slice(&recipe.to_le_bytes());
    r[6..8].copy_from_slice(&s.src.to_le_bytes());
    r[8..12].copy_from_slice(&act.to_le_bytes());
    if s.op == RuleOp::Add {
        r[14..16].copy_from_slice(&DUMMY_HDR_LEN.to_le_bytes());
    }
    Ok(Rule { bytes: r, lb_en: lb, lan_en: lan })
}

/// The Linux rule for the permanent MAC and broadcast: Tx, from and to
/// `vsi_num` ([`mac_rule`]).
pub fn mac_fwd_rule(mac: [u8; 6], vsi_num: u16, veb: bool) -> Result<[u8; RULE_LEN], CmdError> {
    mac_rule(mac, RuleDir::Tx { vsi: vsi_num, tx_only: false }, Fwd::Vsi(vsi_num), veb)
}

impl<H: Hal, B: Bar> AdminQueue<H, B> {
    /// Add Switch Rules 0x02A0 with one rule; returns the rule index the
    /// firmware wrote back (rule bytes 12–13).
    pub fn add_switch_rule(&mut self, rule: &mut [u8; RULE_LEN]) -> Result<u16, CmdError> {
        let mut d = Desc::new(Opcode::AddSwitchRules);
        d.set_u16(16, 1);
        self.exec(&mut d, Some(rule))?;
        Ok(u16::from_le_bytes([rule[12], rule[13]]))
    }

    /// Update Switch Rules 0x02A1 with one lookup rule (built with
    /// [`RuleOp::Update`]); `rule_id` goes into bytes 12–13 as
    /// ice_update_pkt_fwd_rule puts it. The firmware's ENOENT becomes
    /// [`CmdError::NotFound`] (ice_switch.c → ice_aq_sw_rules).
    pub fn update_switch_rule(
        &mut self,
        rule: &mut [u8; RULE_LEN],
        rule_id: u16,
    ) -> Result<(), CmdError> {
        rule[12..14].copy_from_slice(&rule_id.to_le_bytes());
        let mut d = Desc::new(Opcode::UpdateSwitchRules);
        d.set_u16(16, 1);
        self.sw_rules_result(d, rule)
    }

    /// Remove Switch Rules 0x02A2 for the lookup rule `rule_id`: the
    /// 16-byte rule without header that ice_fill_sw_rule leaves for a
    /// removal (index only; ice_remove_rule_internal). ENOENT becomes
    /// [`CmdError::NotFound`].
    pub fn remove_switch_rule(&mut self, rule_id: u16) -> Result<(), CmdError> {
        let mut b = [0u8; 16];
        b[12..14].copy_from_slice(&rule_id.to_le_bytes());
        let mut d = Desc::new(Opcode::RemoveSwitchRules);
        d.set_u16(16, 1);
        self.sw_rules_result(d, &mut b)
    }

    fn sw_rules_result(&mut self, mut d: Desc, buf: &mut [u8]) -> Result<(), CmdError> {
        let r = self.exec(&mut d, Some(buf));
        // ice_aq_sw_rules: for update / remove, a last status of ENOENT
        // makes the result ENOENT whatever the send returned
        if d.opcode() != Opcode::AddSwitchRules as u16 && self.last_status() == rc::ENOENT {
            return Err(CmdError::NotFound);
        }
        r.map_err(CmdError::from)
    }

    /// Allocate Resources 0x0208 for one VSI list (ice_switch.c →
    /// ice_aq_alloc_free_vsi_list; ice_common.c → ice_aq_alloc_free_res):
    /// bytes 16–17 = 1 entry; a 6-byte buffer with the resource type
    /// (VSI_LIST_REP 0x03 for forwarding lists, VSI_LIST_PRUNE 0x04 with
    /// SHARED 0x80 for prune lists), one element, and the id the firmware
    /// writes at bytes 4–5. An id beyond the 10-bit action field is
    /// refused with [`CmdError::BadResponse`] (ice would cut it later).
    pub fn alloc_vsi_list(&mut self, kind: ListKind) -> Result<u16, CmdError> {
        let ty = match kind {
            ListKind::Forward => RES_VSI_LIST_REP,
            ListKind::Prune => RES_VSI_LIST_PRUNE | RES_FLAG_SHARED,
        };
        let mut b = res_buf(ty, 0);
        let mut d = Desc::new(Opcode::AllocResources);
        d.set_u16(16, 1);
        self.exec(&mut d, Some(&mut b))?;
        let id = u16::from_le_bytes([b[4], b[5]]);
        if id > MAX_ID {
            return Err(CmdError::BadResponse("VSI list id beyond 10 bits"));
        }
        Ok(id)
    }

    /// Free Resources 0x0209 for VSI list `id` (the same buffer, the id at
    /// bytes 4–5, the prune type without SHARED as ice frees it).
    pub fn free_vsi_list(&mut self, id: u16, kind: ListKind) -> Result<(), CmdError> {
        if id > MAX_ID {
            return Err(CmdError::Invalid("VSI list id beyond 10 bits"));
        }
        let ty = match kind {
            ListKind::Forward => RES_VSI_LIST_REP,
            ListKind::Prune => RES_VSI_LIST_PRUNE,
        };
        let mut b = res_buf(ty, id);
        let mut d = Desc::new(Opcode::FreeResources);
        d.set_u16(16, 1);
        self.exec(&mut d, Some(&mut b))?;
        Ok(())
    }

    /// A VSI-list rule (ice_switch.c → ice_update_vsi_list_rule): type
    /// VSI_LIST_SET 3 / CLEAR 4 (PRUNE_LIST_SET 5 / CLEAR 6 for prune
    /// lists), list id at bytes 4–5, the count at 6–7, then the hardware VSI
    /// numbers; sent with Add 0x02A0 (a new list) or Update 0x02A1 (one
    /// that has members). No VSIs (ice: EINVAL), more than
    /// [`MAX_LIST_VSIS`], or ids beyond 10 bits are refused with
    /// [`CmdError::Invalid`] before anything is sent.
    pub fn vsi_list_rule(
        &mut self,
        op: ListOp,
        kind: ListKind,
        list_id: u16,
        vsis: &[u16],
    ) -> Result<(), CmdError> {
        if vsis.is_empty() || vsis.len() > MAX_LIST_VSIS {
            return Err(CmdError::Invalid("VSI list rule needs 1 to 16 VSIs"));
        }
        if list_id > MAX_ID || vsis.iter().any(|v| *v > MAX_ID) {
            return Err(CmdError::Invalid("VSI or list id beyond 10 bits"));
        }
        let ty = match (kind, op) {
            (ListKind::Forward, ListOp::Set { .. }) => RULE_T_VSI_LIST_SET,
            (ListKind::Forward, ListOp::Clear) => RULE_T_VSI_LIST_CLEAR,
            (ListKind::Prune, ListOp::Set { .. }) => RULE_T_PRUNE_LIST_SET,
            (ListKind::Prune, ListOp::Clear) => RULE_T_PRUNE_LIST_CLEAR,
        };
        let mut b = [0u8; 8 + 2 * MAX_LIST_VSIS];
        b[0..2].copy_from_slice(&ty.to_le_bytes());
        b[4..6].copy_from_slice(&list_id.to_le_bytes());
        b[6..8].copy_from_slice(&(vsis.len() as u16).to_le_bytes());
        for (slot, v) in b[8..].chunks_exact_mut(2).zip(vsis) {
            slot.copy_from_slice(&v.to_le_bytes());
        }
        let len = 8 + 2 * vsis.len();
        let opcode = match op {
            ListOp::Set { new_list: true } => Opcode::AddSwitchRules,
            _ => Opcode::UpdateSwitchRules,
        };
        let mut d = Desc::new(opcode);
        d.set_u16(16, 1);
        self.sw_rules_result(d, b.get_mut(..len).unwrap_or(&mut []))
    }
}

/// Largest VSI / list id (the 10-bit action field).
const MAX_ID: u16 = 0x3ff;
/// Most VSIs one [`AdminQueue::vsi_list_rule`] carries (a driver bound;
/// ice sizes the rule to its caller's array).
pub const MAX_LIST_VSIS: usize = 16;
/// ICE_AQC_RES_TYPE_VSI_LIST_REP / _PRUNE and ICE_AQC_RES_TYPE_FLAG_SHARED
/// (ice_adminq_cmd.h).
const RES_VSI_LIST_REP: u16 = 0x03;
const RES_VSI_LIST_PRUNE: u16 = 0x04;
const RES_FLAG_SHARED: u16 = 0x80;
/// ICE_AQC_SW_RULES_T_VSI_LIST_SET / _CLEAR / PRUNE_LIST_SET / _CLEAR.
const RULE_T_VSI_LIST_SET: u16 = 3;
const RULE_T_VSI_LIST_CLEAR: u16 = 4;
const RULE_T_PRUNE_LIST_SET: u16 = 5;
const RULE_T_PRUNE_LIST_CLEAR: u16 = 6;

/// The ice_aqc_alloc_free_res_elem buffer with one element.
fn res_buf(ty: u16, id: u16) -> [u8; 6] {
    let mut b = [0u8; 6];
    b[0..2].copy_from_slice(&ty.to_le_bytes());
    b[2..4].copy_from_slice(&1u16.to_le_bytes());
    b[4..6].copy_from_slice(&id.to_le_bytes());
    b
}

/// Which kind of VSI list (ice picks it from the lookup type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKind {
    /// Forwarding ("replication") list: MAC, ethertype, promiscuous and the
    /// other non-VLAN lookups.
    Forward,
    /// Prune list: VLAN lookups.
    Prune,
}

/// What a VSI-list rule does to the list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListOp {
    /// Add the VSIs; `new_list` sends it with Add Switch Rules (ice's
    /// ice_create_vsi_list_rule), else with Update.
    Set {
        /// A freshly allocated list.
        new_list: bool,
    },
    /// Remove the VSIs (Update).
    Clear,
}

/// How many MAC rules a [`MacFilters`] table tracks.
pub const MAX_MAC_FILTERS: usize = 8;

/// One MAC lookup rule the driver installed (ice's
/// ice_fltr_mgmt_list_entry for the MAC recipe, Tx flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MacFilter {
    /// The destination MAC.
    pub mac: [u8; 6],
    /// The rule index the firmware returned.
    pub rule_id: u16,
    /// Where the rule forwards now: the first VSI, or the list once a
    /// second VSI subscribed.
    pub fwd: Fwd,
    /// The VSI that installed the rule (the rule's source, kept when the
    /// rule is pointed elsewhere, as ice keeps `fltr_info.src`).
    pub first_vsi: u16,
    /// Member bitmap of the list (hardware VSI numbers, 10 bits).
    members: [u64; 16],
    /// VSIs the rule reaches (ice vsi_count).
    pub vsi_count: u16,
}

impl MacFilter {
    /// Whether the rule delivers to hardware VSI `vsi`.
    pub fn reaches(&self, vsi: u16) -> bool {
        match self.fwd {
            Fwd::Vsi(v) => v == vsi,
            Fwd::VsiList(_) => self.is_member(vsi),
        }
    }

    fn is_member(&self, vsi: u16) -> bool {
        self.members.get(usize::from(vsi / 64)).is_some_and(|w| w & (1u64 << (vsi % 64)) != 0)
    }

    fn clear_member(&mut self, vsi: u16) {
        if let Some(w) = self.members.get_mut(usize::from(vsi / 64)) {
            *w &= !(1u64 << (vsi % 64));
        }
    }

    /// The lowest member (ice find_first_bit on the VSI map).
    fn first_member(&self) -> Option<u16> {
        self.members.iter().enumerate().find(|(_, w)| **w != 0).map(|(i, w)| {
            // i < 16 and trailing_zeros < 64: fits in 10 bits
            (i as u16) * 64 + w.trailing_zeros() as u16
        })
    }

    fn set_member(&mut self, vsi: u16) {
        if let Some(w) = self.members.get_mut(usize::from(vsi / 64)) {
            *w |= 1u64 << (vsi % 64);
        }
    }
}

/// The driver's copy of its MAC switch rules, so a second VSI on the same
/// address turns the rule into a VSI list as ice does (ice_switch.c →
/// ice_add_mac_rule, ice_add_rule_internal, ice_add_update_vsi_list,
/// ice_create_vsi_list_rule, ice_update_pkt_fwd_rule). Fixed size, no
/// allocation.
#[derive(Clone, Debug, Default)]
pub struct MacFilters {
    entries: [Option<MacFilter>; MAX_MAC_FILTERS],
    rule_cnt: u32,
}

impl MacFilters {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rules the driver added with 0x02A0 that succeeded, lookup and
    /// VSI-list rules alike (ice `switch_info->rule_cnt`).
    pub fn rule_cnt(&self) -> u32 {
        self.rule_cnt
    }

    /// The rule for `mac`, if one was installed.
    pub fn find(&self, mac: [u8; 6]) -> Option<&MacFilter> {
        self.entries.iter().flatten().find(|e| e.mac == mac)
    }

    /// The slot of the rule for `mac` and a copy of it.
    fn slot_of(&self, mac: [u8; 6]) -> Option<(usize, MacFilter)> {
        self.entries
            .iter()
            .enumerate()
            .find_map(|(i, e)| e.filter(|e| e.mac == mac).map(|e| (i, e)))
    }

    /// Stores `e` in slot `i` (a slot index from `slot_of` or a free one).
    fn put(&mut self, i: usize, e: Option<MacFilter>) {
        if let Some(s) = self.entries.get_mut(i) {
            *s = e;
        }
    }

    /// The installed rules.
    pub fn iter(&self) -> impl Iterator<Item = &MacFilter> {
        self.entries.iter().flatten()
    }

    /// ice_fltr_add_mac_and_broadcast(vsi, mac, FWD_TO_VSI) (Linux
    /// ice_init_mac_fltr): broadcast first, then `mac` (ice's list holds
    /// them in that order). Broadcast, multicast and (with `umac_shared`)
    /// unicast addresses go through ice_add_rule_internal: a new rule, or,
    /// when the address already has a rule, the rule turned into a VSI
    /// list (alloc 0x0208, list rule 0x02A0, rule update 0x02A1) or the
    /// list extended (0x02A1); the same VSI again is
    /// [`CmdError::Exists`]. A unicast address without `umac_shared` that
    /// already has a rule is left alone, whichever VSI owns it (ice: "don't
    /// overwrite the unicast address"). An all-zero MAC is refused with
    /// [`CmdError::Invalid`] after the broadcast rule was added, as ice
    /// (its list is checked entry by entry, broadcast first).
    pub fn add_mac_and_broadcast<H: Hal, B: Bar>(
        &mut self,
        aq: &mut AdminQueue<H, B>,
        mac: [u8; 6],
        vsi: u16,
        veb: bool,
        umac_shared: bool,
    ) -> Result<(), CmdError> {
        if vsi > MAX_ID {
            return Err(CmdError::Invalid("VSI number beyond 10 bits"));
        }
        self.add_rule_internal(aq, BROADCAST, vsi, veb)?;
        // ice_add_mac_rule checks each list entry as it reaches it: the
        // broadcast rule above is already in when the zero address is refused
        if mac == [0; 6] {
            return Err(CmdError::Invalid("all-zero MAC"));
        }
        if mac[0] & 1 != 0 || umac_shared {
            self.add_rule_internal(aq, mac, vsi, veb)
        } else if self.find(mac).is_some() {
            Ok(())
        } else {
            self.create(aq, mac, vsi, veb)
        }
    }

    /// Stops `vsi` receiving `mac` (ice_switch.c → ice_remove_mac_rule,
    /// ice_remove_rule_internal, ice_rem_update_vsi_list): a rule that
    /// forwards to `vsi` alone is removed (0x02A2); from a list the VSI is
    /// cleared (VSI_LIST_CLEAR with 0x02A1), and when one VSI is left the
    /// list is emptied, the rule pointed back at that VSI (0x02A1, the
    /// rule's original source) and the list freed (0x0209). No rule for
    /// `mac`, or `vsi` not in its list, is [`CmdError::NotFound`] (ice:
    /// ENOENT), nothing sent. When the last VSI leaves a list (one an
    /// earlier, half-failed removal left with one VSI), the rule is removed
    /// (0x02A2), the list kept, as ice_remove_rule_internal does. Stricter than ice: a rule that forwards to
    /// another single VSI is NotFound too (ice removes a multicast one).
    pub fn remove_mac<H: Hal, B: Bar>(
        &mut self,
        aq: &mut AdminQueue<H, B>,
        mac: [u8; 6],
        vsi: u16,
        veb: bool,
    ) -> Result<(), CmdError> {
        let (i, mut e) = self.slot_of(mac).ok_or(CmdError::NotFound)?;
        match e.fwd {
            Fwd::Vsi(v) => {
                if v != vsi {
                    return Err(CmdError::NotFound);
                }
                aq.remove_switch_rule(e.rule_id)?;
                self.rule_cnt = self.rule_cnt.wrapping_sub(1);
                self.put(i, None);
                return Ok(());
            }
            Fwd::VsiList(list) => {
                if !e.is_member(vsi) {
                    return Err(CmdError::NotFound);
                }
                aq.vsi_list_rule(ListOp::Clear, ListKind::Forward, list, &[vsi])?;
                e.clear_member(vsi);
                e.vsi_count = e.vsi_count.saturating_sub(1);
                if e.vsi_count == 0 {
                    // the last VSI left the list (an earlier removal failed
                    // half-way and left one VSI in it): the rule goes, as
                    // ice_remove_rule_internal removes it once vsi_count is 0
                    // (the list itself is not freed, as in ice)
                    self.put(i, Some(e));
                    aq.remove_switch_rule(e.rule_id)?;
                    self.rule_cnt = self.rule_cnt.wrapping_sub(1);
                    self.put(i, None);
                    return Ok(());
                }
                if e.vsi_count == 1
                    && let Some(rem) = e.first_member()
                {
                    // store the cleared member before the next steps can fail
                    self.put(i, Some(e));
                    aq.vsi_list_rule(ListOp::Clear, ListKind::Forward, list, &[rem])?;
                    let spec = RuleSpec {
                        lookup: Lookup::Mac(mac),
                        action: Action::Vsi(rem),
                        flags: rule_flag::TX,
                        src: e.first_vsi,
                        veb,
                        op: RuleOp::Update,
                    };
                    let mut r = lookup_rule(&spec)?.bytes;
                    aq.update_switch_rule(&mut r, e.rule_id)?;
                    e.fwd = Fwd::Vsi(rem);
                    self.put(i, Some(e));
                    aq.free_vsi_list(list, ListKind::Forward)?;
                }
            }
        }
        self.put(i, Some(e));
        Ok(())
    }

    /// A new "MAC forward to VSI" rule (ice_create_pkt_fwd_rule, or the
    /// bulk unicast add with one rule: the same bytes).
    fn create<H: Hal, B: Bar>(
        &mut self,
        aq: &mut AdminQueue<H, B>,
        mac: [u8; 6],
        vsi: u16,
        veb: bool,
    ) -> Result<(), CmdError> {
        let slot = self.entries.iter().position(Option::is_none).ok_or(CmdError::TableFull)?;
        let mut r = mac_fwd_rule(mac, vsi, veb)?;
        let rule_id = aq.add_switch_rule(&mut r)?;
        self.rule_cnt = self.rule_cnt.wrapping_add(1);
        let mut e = MacFilter {
            mac,
            rule_id,
            fwd: Fwd::Vsi(vsi),
            first_vsi: vsi,
            members: [0; 16],
            vsi_count: 1,
        };
        e.set_member(vsi);
        self.put(slot, Some(e));
        Ok(())
    }

    /// ice_add_rule_internal for a Tx MAC rule from `vsi`.
    fn add_rule_internal<H: Hal, B: Bar>(
        &mut self,
        aq: &mut AdminQueue<H, B>,
        mac: [u8; 6],
        vsi: u16,
        veb: bool,
    ) -> Result<(), CmdError> {
        let Some((i, mut e)) = self.slot_of(mac) else {
            return self.create(aq, mac, vsi, veb);
        };
        match e.fwd {
            Fwd::Vsi(cur) => {
                if cur == vsi {
                    return Err(CmdError::Exists);
                }
                let list = aq.alloc_vsi_list(ListKind::Forward)?;
                aq.vsi_list_rule(
                    ListOp::Set { new_list: true },
                    ListKind::Forward,
                    list,
                    &[cur, vsi],
                )?;
                self.rule_cnt = self.rule_cnt.wrapping_add(1);
                // the updated rule is the new filter's: its source is the
                // new VSI (ice copies new_fltr into tmp_fltr)
                let spec = RuleSpec {
                    lookup: Lookup::Mac(mac),
                    action: Action::VsiList(list),
                    flags: rule_flag::TX,
                    src: vsi,
                    veb,
                    op: RuleOp::Update,
                };
                let mut r = lookup_rule(&spec)?.bytes;
                aq.update_switch_rule(&mut r, e.rule_id)?;
                e.fwd = Fwd::VsiList(list);
                e.set_member(vsi);
            }
            Fwd::VsiList(list) => {
                if e.is_member(vsi) {
                    return Err(CmdError::Exists);
                }
                aq.vsi_list_rule(ListOp::Set { new_list: false }, ListKind::Forward, list, &[vsi])?;
                e.set_member(vsi);
            }
        }
        e.vsi_count = e.vsi_count.saturating_add(1);
        self.put(i, Some(e));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_linux_veb() {
        let b = mac_fwd_rule(BROADCAST, 0x300, true).unwrap();
        let want_b = [
            1, 0, 0, 0, 1, 0, 0, 3, 0x0c, 0x30, 2, 0, 0, 0, 0x10, 0, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xff, 2, 0, 0, 0, 0, 0, 0x81, 0, 0, 0,
        ];
        assert_eq!(b, want_b);
        let u = mac_fwd_rule([0x4c, 0x1c, 0x3d, 0xac, 0x99, 0x6b], 0x300, true).unwrap();
        assert_eq!(&u[8..12], &[0x04, 0x30, 0x02, 0x00], "unicast in VEB: LB_EN only");
        let v = mac_fwd_rule([0x4c, 0, 0, 0, 0, 1], 5, false).unwrap();
        assert_eq!(u32::from_le_bytes([v[8], v[9], v[10], v[11]]) & 0xc, 0xc);
        assert!(mac_fwd_rule(BROADCAST, 0x400, true).is_err());
    }

    fn spec(lookup: Lookup, action: Action, flags: u8) -> RuleSpec {
        RuleSpec { lookup, action, flags, src: 6, veb: true, op: RuleOp::Add }
    }

    fn act(r: &Rule) -> u32 {
        u32::from_le_bytes([r.bytes[8], r.bytes[9], r.bytes[10], r.bytes[11]])
    }

    #[test]
    fn lookup_rule_actions_vlan_and_ops() {
        let mac = Lookup::Mac([0x4c, 1, 2, 3, 4, 5]);
        let qg = lookup_rule(&spec(mac, Action::QueueGroup { queue: 32, size: 8 }, 2)).unwrap();
        assert_eq!((act(&qg), qg.lb_en, qg.lan_en), (0x18205, true, false));
        let q = lookup_rule(&spec(mac, Action::Queue(0x7ff), 1)).unwrap();
        assert_eq!((act(&q), q.bytes[0]), (0x7ff1, 0), "Rx: type 0, no LB");
        let d = lookup_rule(&spec(mac, Action::Drop, 2)).unwrap();
        assert_eq!((act(&d), d.lb_en, d.lan_en), ((1 << 18) | (1 << 17), false, false));
        let rxlb = lookup_rule(&spec(mac, Action::Vsi(6), 2 | rule_flag::RX_LB)).unwrap();
        assert_eq!((rxlb.lb_en, rxlb.lan_en), (false, true));
        let vlan = Lookup::Vlan { id: 200, tpid: Some(0x88a8) };
        let v = lookup_rule(&spec(vlan, Action::Vsi(3), 2)).unwrap();
        assert_eq!(act(&v), (3 << 4) | 2 | (1 << 15) | (1 << 16) | 8, "prune, LAN_EN, no VALID");
        assert_eq!((&v.bytes[16..22], v.bytes[4]), (&[2, 0, 0, 0, 0, 0][..], 4));
        assert_eq!(&v.bytes[28..32], &[0x88, 0xa8, 0, 200]);
        let u = lookup_rule(&RuleSpec { op: RuleOp::Update, ..spec(mac, Action::Vsi(6), 2) });
        assert_eq!(&u.unwrap().bytes[14..16], &[0, 0], "update: no header length");
        let rm = lookup_rule(&RuleSpec {
            op: RuleOp::Remove { rule_id: 0x1234 },
            ..spec(mac, Action::Vsi(6), 2)
        })
        .unwrap();
        assert!(rm.bytes.iter().enumerate().all(|(i, b)| *b
            == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x34, 0x12][..].get(i).copied().unwrap_or(0)));
        for bad in [
            spec(mac, Action::Queue(0x800), 2),
            spec(mac, Action::QueueGroup { queue: 0, size: 256 }, 2),
            spec(mac, Action::VsiList(0x400), 2),
            spec(Lookup::Vlan { id: 0x1000, tpid: None }, Action::Vsi(1), 2),
        ] {
            assert!(matches!(lookup_rule(&bad), Err(CmdError::Invalid(_))), "{bad:?}");
        }
    }
}
