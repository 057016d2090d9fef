//! Receive switch rules that deliver the RDMA MAC's frames (and broadcast)
//! to the PF VSI (spec ice-lan-for-rdma §2.15; ice_switch.c →
//! ice_fill_sw_rule, ice_fill_sw_info; ice_fltr.c →
//! ice_fltr_add_mac_and_broadcast; conformance README "Switch rules").

use irdma_hal::{Bar, Hal};

use super::aq::AdminQueue;
use super::cmd::CmdError;
use super::desc::{Desc, Opcode};

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
pub fn mac_rule(
    mac: [u8; 6],
    dir: RuleDir,
    fwd: Fwd,
    veb: bool,
) -> Result<[u8; RULE_LEN], CmdError> {
    let (id, list) = match fwd {
        Fwd::Vsi(v) => (v, false),
        Fwd::VsiList(l) => (l, true),
    };
    if id > 0x3ff {
        return Err(CmdError::Invalid("VSI or list id beyond 10 bits"));
    }
    let mut r = [0u8; RULE_LEN];
    let (ty, src, lb, lan) = match dir {
        RuleDir::Rx { lport } => (RULE_T_LKUP_RX, u16::from(lport), false, false),
        RuleDir::Tx { vsi, tx_only } => {
            if vsi > 0x3ff {
                return Err(CmdError::Invalid("VSI number beyond 10 bits"));
            }
            let multicast = mac[0] & 1 != 0;
            (RULE_T_LKUP_TX, vsi, true, !tx_only && (!veb || multicast))
        }
    };
    r[0..2].copy_from_slice(&ty.to_le_bytes());
    r[4..6].copy_from_slice(&RECIPE_MAC.to_le_bytes());
    r[6..8].copy_from_slice(&src.to_le_bytes());
    let mut act = ACT_VALID | (u32::from(id) << ACT_VSI_SHIFT);
    if list {
        act |= ACT_VSI_LIST;
    }
    if lb {
        act |= ACT_LB_EN;
    }
    if lan {
        act |= ACT_LAN_EN;
    }
    r[8..12].copy_from_slice(&act.to_le_bytes());
    r[14..16].copy_from_slice(&DUMMY_HDR_LEN.to_le_bytes());
    r[16..22].copy_from_slice(&mac);
    r[22] = 0x02;
    r[28] = 0x81;
    Ok(r)
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
        self.send(&mut d, Some(rule))?;
        Ok(u16::from_le_bytes([rule[12], rule[13]]))
    }

    /// Broadcast first, then the port's MAC (a multicast one gets LAN_EN as
    /// ice gives it), each in its own 0x02A0, both
    /// forwarded to `vsi_num` (ice_init_mac_fltr →
    /// ice_fltr_add_mac_and_broadcast). Returns (broadcast, unicast) rule
    /// indices.
    pub fn add_mac_and_broadcast(
        &mut self,
        mac: [u8; 6],
        vsi_num: u16,
        veb: bool,
    ) -> Result<(u16, u16), CmdError> {
        if mac == [0; 6] {
            return Err(CmdError::Invalid("all-zero MAC"));
        }
        let mut b = mac_fwd_rule(BROADCAST, vsi_num, veb)?;
        let bi = self.add_switch_rule(&mut b)?;
        let mut u = mac_fwd_rule(mac, vsi_num, veb)?;
        let ui = self.add_switch_rule(&mut u)?;
        Ok((bi, ui))
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
}
