//! Capability lists (0x000B device, 0x000A function) parsed the way ice
//! parses them, every field (spec ice-lan-for-rdma §2.6; ice_common.c →
//! ice_parse_common_caps, ice_parse_dev_caps, ice_parse_func_caps and the
//! per-capability helpers they call; ice_recalc_port_limited_caps;
//! constants from ice_adminq_cmd.h ICE_AQC_CAPS_* and ice_type.h).
//!
//! The RDMA bring-up needs only a few of them ([`super::cmd::Caps`]); the
//! rest are kept so that the answers can be checked field by field against
//! the vendor's vectors. Elements are walked up to the count the firmware
//! gave; elements past the buffer read as zeros; a later duplicate wins.

use super::desc::{le16, le32};

/// Size of one capability element (spec §2.6, computed).
pub const CAP_ELEM_LEN: usize = 32;

/// One capability element (spec §2.6 table).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapElem {
    /// Capability id.
    pub id: u16,
    /// Major version.
    pub major: u8,
    /// Minor version.
    pub minor: u8,
    /// Number.
    pub number: u32,
    /// Logical id.
    pub logical_id: u32,
    /// Physical id.
    pub phys_id: u32,
}

/// The element at index `i` of a capability buffer; elements past the
/// buffer read as zeros (ice parses the count it was given).
pub fn cap_elem(buf: &[u8], i: usize) -> CapElem {
    let at = i.saturating_mul(CAP_ELEM_LEN);
    CapElem {
        id: le16(buf, at),
        major: buf.get(at + 2).copied().unwrap_or(0),
        minor: buf.get(at + 3).copied().unwrap_or(0),
        number: le32(buf, at + 4),
        logical_id: le32(buf, at + 8),
        phys_id: le32(buf, at + 12),
    }
}

/// Capability ids (ice_adminq_cmd.h → ICE_AQC_CAPS_*).
#[allow(missing_docs)]
pub mod id {
    pub const SWITCHING_MODE: u16 = 0x0001;
    pub const MANAGEABILITY_MODE: u16 = 0x0002;
    pub const OS2BMC: u16 = 0x0004;
    pub const VALID_FUNCTIONS: u16 = 0x0005;
    pub const WOL_PROXY: u16 = 0x0008;
    pub const SRIOV: u16 = 0x0012;
    pub const VF: u16 = 0x0013;
    pub const VMDQ: u16 = 0x0014;
    pub const QBG: u16 = 0x0015;
    pub const QBR: u16 = 0x0016;
    pub const VSI: u16 = 0x0017;
    pub const DCB: u16 = 0x0018;
    pub const ISCSI: u16 = 0x0022;
    pub const RSS: u16 = 0x0040;
    pub const RXQS: u16 = 0x0041;
    pub const TXQS: u16 = 0x0042;
    pub const MSIX: u16 = 0x0043;
    pub const FD: u16 = 0x0045;
    pub const P1588: u16 = 0x0046;
    pub const MAX_MTU: u16 = 0x0047;
    pub const NVM_VER: u16 = 0x0048;
    pub const PENDING_NVM_VER: u16 = 0x0049;
    pub const OROM_VER: u16 = 0x004A;
    pub const PENDING_OROM_VER: u16 = 0x004B;
    pub const NET_VER: u16 = 0x004C;
    pub const PENDING_NET_VER: u16 = 0x004D;
    pub const IWARP: u16 = 0x0051;
    pub const LED: u16 = 0x0061;
    pub const SDP: u16 = 0x0062;
    pub const WR_CSR_PROT: u16 = 0x0064;
    pub const SENSOR_READING: u16 = 0x0067;
    pub const PCIE_RESET_AVOIDANCE: u16 = 0x0076;
    pub const POST_UPDATE_RESET_RESTRICT: u16 = 0x0077;
    pub const NVM_MGMT: u16 = 0x0080;
    pub const EXT_TOPO_DEV_IMG0: u16 = 0x0081;
    pub const EXT_TOPO_DEV_IMG3: u16 = 0x0084;
    pub const TX_SCHED_TOPO_COMP_MODE: u16 = 0x0085;
    pub const NAC_TOPOLOGY: u16 = 0x0087;
    pub const DYN_FLATTENING: u16 = 0x008A;
    pub const OROM_RECOVERY_UPDATE: u16 = 0x0090;
    pub const FW_LAG_SUPPORT: u16 = 0x0092;
    pub const NEXT_CLUSTER_ID: u16 = 0x0096;
    pub const CEM: u16 = 0x00F2;
}

/// LED pins ice tracks (ICE_MAX_SUPPORTED_GPIO_LED).
pub const MAX_LED: usize = 12;
/// SDP pins ice tracks (ICE_MAX_SUPPORTED_GPIO_SDP).
pub const MAX_SDP: usize = 8;
/// VSIs of the device shared among the PFs (ICE_MAX_VSI).
pub const MAX_VSI: u32 = 768;

/// Capabilities common to the device and function lists (ice
/// `struct ice_hw_common_caps`).
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommonCaps {
    pub switching_mode: u32,
    pub mgmt_mode: u32,
    pub mgmt_protocols_mctp: u32,
    pub os2bmc: u32,
    pub valid_functions: u32,
    pub sr_iov_1_1: bool,
    pub vmdq: bool,
    pub evb_802_1_qbg: bool,
    pub evb_802_1_qbh: bool,
    pub dcb: bool,
    pub active_tc_bitmap: u32,
    pub maxtc: u32,
    pub iscsi: bool,
    pub rss_table_size: u32,
    pub rss_table_entry_width: u32,
    pub num_rxq: u32,
    pub rxq_first_id: u32,
    pub num_txq: u32,
    pub txq_first_id: u32,
    pub num_msix_vectors: u32,
    pub msix_vector_first_id: u32,
    pub max_mtu: u32,
    pub nvm_word_address: [u16; 3],
    pub nvm_value: [u16; 3],
    pub orom_ver: u32,
    pub base_release_ver_major: u32,
    pub base_release_ver_type: u32,
    pub base_release_ver_iana: u32,
    pub nvm_update_pending_nvm: bool,
    pub nvm_update_pending_orom: bool,
    pub nvm_update_pending_netlist: bool,
    pub sec_rev_disabled: bool,
    pub update_disabled: bool,
    pub nvm_unified_update: bool,
    pub netlist_auth: bool,
    pub mgmt_cem: bool,
    /// RDMA (cap 0x0051 number 1; ice's name is `iwarp`).
    pub iwarp: bool,
    pub roce_lag: bool,
    pub sriov_lag: bool,
    pub sriov_aa_lag: bool,
    pub led_pin_num: u8,
    pub led: [bool; MAX_LED],
    pub sdp_pin_num: u8,
    pub sdp: [bool; MAX_SDP],
    pub wr_csr_prot: u64,
    pub num_wol_proxy_fltr: u32,
    pub wol_proxy_vsi_seid: u32,
    pub apm_wol_support: bool,
    pub acpi_prog_mthd: bool,
    pub proxy_support: bool,
    pub pcie_reset_avoidance: bool,
    pub reset_restrict_support: bool,
    pub ext_topo_dev_img_ver_high: [u32; 4],
    pub ext_topo_dev_img_ver_low: [u32; 4],
    pub ext_topo_dev_img_part_num: [u8; 4],
    pub ext_topo_dev_img_load_en: [bool; 4],
    pub ext_topo_dev_img_prog_en: [bool; 4],
    pub ext_topo_dev_img_ver_schema: [bool; 4],
    pub tx_sched_topo_comp_mode_en: bool,
    pub dyn_flattening_en: bool,
    pub orom_recovery_update: bool,
    pub next_cluster_id_support: bool,
    pub ieee_1588: bool,
}

/// Elements to walk: the count firmware gave, but no further than the
/// buffer — elements past it would read as zeros (id 0), which no parser
/// acts on, so stopping there changes nothing and bounds the loop however
/// large the count.
fn walk(buf: &[u8], count: u32) -> usize {
    (count as usize).min(buf.len() / CAP_ELEM_LEN)
}

fn lo16(v: u32) -> u16 {
    v as u16
}
fn hi16(v: u32) -> u16 {
    (v >> 16) as u16
}

impl CommonCaps {
    /// One element into the common fields (ice_parse_common_caps); returns
    /// whether the id is a common capability.
    fn apply(&mut self, cap: u16, number: u32, logical: u32, phys: u32) -> bool {
        self.apply_resources(cap, number, logical, phys)
            || self.apply_versions(cap, number, logical, phys)
            || self.apply_platform(cap, number, logical, phys)
    }

    /// [`Self::apply`] for the function's modes and resources (switching,
    /// manageability, SR-IOV, DCB, RSS, queues, MSI-X).
    fn apply_resources(&mut self, cap: u16, number: u32, logical: u32, phys: u32) -> bool {
        let c = self;
        match cap {
            id::SWITCHING_MODE => c.switching_mode = number,
            id::MANAGEABILITY_MODE => {
                c.mgmt_mode = number;
                c.mgmt_protocols_mctp = logical;
            }
            id::OS2BMC => c.os2bmc = number,
            id::VALID_FUNCTIONS => c.valid_functions = number,
            id::SRIOV => c.sr_iov_1_1 = number == 1,
            id::VMDQ => c.vmdq = number == 1,
            id::QBG => c.evb_802_1_qbg = number == 1,
            id::QBR => c.evb_802_1_qbh = number == 1,
            id::DCB => {
                c.dcb = number == 1;
                c.active_tc_bitmap = logical;
                c.maxtc = phys;
            }
            id::ISCSI => c.iscsi = number == 1,
            id::RSS => {
                c.rss_table_size = number;
                c.rss_table_entry_width = logical;
            }
            id::RXQS => {
                c.num_rxq = number;
                c.rxq_first_id = phys;
            }
            id::TXQS => {
                c.num_txq = number;
                c.txq_first_id = phys;
            }
            id::MSIX => {
                c.num_msix_vectors = number;
                c.msix_vector_first_id = phys;
            }
            _ => return false,
        }
        true
    }

    /// [`Self::apply`] for the NVM, option ROM and netlist versions and the
    /// NVM management flags.
    fn apply_versions(&mut self, cap: u16, number: u32, logical: u32, phys: u32) -> bool {
        let c = self;
        match cap {
            id::NVM_VER | id::PENDING_NVM_VER => {
                if cap == id::PENDING_NVM_VER {
                    c.nvm_update_pending_nvm = true;
                }
                c.nvm_word_address = [lo16(number), lo16(logical), lo16(phys)];
                c.nvm_value = [hi16(number), hi16(logical), hi16(phys)];
            }
            id::OROM_VER => c.orom_ver = number,
            id::PENDING_OROM_VER => {
                c.nvm_update_pending_orom = true;
                c.orom_ver = number;
            }
            id::NET_VER | id::PENDING_NET_VER => {
                if cap == id::PENDING_NET_VER {
                    c.nvm_update_pending_netlist = true;
                }
                c.base_release_ver_major = number;
                c.base_release_ver_type = logical;
                c.base_release_ver_iana = phys;
            }
            id::NVM_MGMT => {
                c.sec_rev_disabled = number & 1 != 0;
                c.update_disabled = number & (1 << 1) != 0;
                c.nvm_unified_update = number & (1 << 3) != 0;
                c.netlist_auth = number & (1 << 5) != 0;
            }
            _ => return false,
        }
        true
    }

    /// [`Self::apply`] for the rest: CEM, RDMA, LAG, LED/SDP pins, WoL,
    /// MTU, reset behaviour, external topology images, scheduler modes.
    fn apply_platform(&mut self, cap: u16, number: u32, logical: u32, phys: u32) -> bool {
        let c = self;
        match cap {
            id::CEM => c.mgmt_cem = number == 1,
            id::IWARP => c.iwarp = number == 1,
            id::FW_LAG_SUPPORT => {
                c.roce_lag = number & 1 != 0;
                c.sriov_lag = number & 2 != 0;
                c.sriov_aa_lag = number & 4 != 0;
            }
            id::LED => {
                if let Some(l) = c.led.get_mut(phys as usize) {
                    *l = true;
                    c.led_pin_num = c.led_pin_num.wrapping_add(1);
                }
            }
            id::SDP => {
                if let Some(s) = c.sdp.get_mut(phys as usize) {
                    *s = true;
                    c.sdp_pin_num = c.sdp_pin_num.wrapping_add(1);
                }
            }
            id::WR_CSR_PROT => c.wr_csr_prot = u64::from(number) | (u64::from(logical) << 32),
            id::WOL_PROXY => {
                c.num_wol_proxy_fltr = number;
                c.wol_proxy_vsi_seid = logical;
                c.apm_wol_support = phys & 1 != 0;
                c.acpi_prog_mthd = phys & 2 != 0;
                c.proxy_support = phys & 4 != 0;
            }
            id::MAX_MTU => c.max_mtu = number,
            id::PCIE_RESET_AVOIDANCE => c.pcie_reset_avoidance = number > 0,
            id::POST_UPDATE_RESET_RESTRICT => c.reset_restrict_support = number == 1,
            id::EXT_TOPO_DEV_IMG0..=id::EXT_TOPO_DEV_IMG3 => {
                let i = (cap - id::EXT_TOPO_DEV_IMG0) as usize;
                if let Some(v) = c.ext_topo_dev_img_ver_high.get_mut(i) {
                    *v = number;
                }
                if let Some(v) = c.ext_topo_dev_img_ver_low.get_mut(i) {
                    *v = logical;
                }
                if let Some(v) = c.ext_topo_dev_img_part_num.get_mut(i) {
                    *v = (phys >> 8) as u8;
                }
                if let Some(v) = c.ext_topo_dev_img_load_en.get_mut(i) {
                    *v = phys & 1 != 0;
                }
                if let Some(v) = c.ext_topo_dev_img_prog_en.get_mut(i) {
                    *v = phys & 2 != 0;
                }
                if let Some(v) = c.ext_topo_dev_img_ver_schema.get_mut(i) {
                    *v = phys & 4 != 0;
                }
            }
            id::TX_SCHED_TOPO_COMP_MODE => c.tx_sched_topo_comp_mode_en = number == 1,
            id::DYN_FLATTENING => c.dyn_flattening_en = number == 1,
            id::OROM_RECOVERY_UPDATE => c.orom_recovery_update = number == 1,
            id::NEXT_CLUSTER_ID => c.next_cluster_id_support = number == 1,
            _ => return false,
        }
        true
    }

    /// Only the common fields of `count` elements (no port limit applied).
    pub fn parse(buf: &[u8], count: u32) -> CommonCaps {
        let mut c = CommonCaps::default();
        for i in 0..walk(buf, count) {
            let e = cap_elem(buf, i);
            c.apply(e.id, e.number, e.logical_id, e.phys_id);
        }
        c
    }

    /// ice_recalc_port_limited_caps (E810): more than 4 PFs → at most 4 TCs
    /// and no RDMA.
    fn port_limit(&mut self, dev_num_funcs: u32) {
        if dev_num_funcs > 4 {
            self.maxtc = 4;
            self.iwarp = false;
        }
    }
}

/// 1588 device info (ice `struct ice_ts_dev_info`).
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TsDevInfo {
    pub ena: bool,
    pub tmr0_owner: u8,
    pub tmr0_owned: bool,
    pub tmr0_ena: bool,
    pub tmr1_owner: u8,
    pub tmr1_owned: bool,
    pub tmr1_ena: bool,
    pub ts_ll_read: bool,
    pub ts_ll_int_read: bool,
    pub ll_phy_tmr_update: bool,
    pub tmr_own_map: u32,
}

/// Device capabilities (ice `struct ice_hw_dev_caps`).
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevCaps {
    pub common: CommonCaps,
    pub num_funcs: u32,
    /// This PF's index among the enabled PFs (ice `hw->logical_pf_id`).
    pub logical_pf_id: u8,
    pub num_vfs_exposed: u32,
    pub num_vsi_allocd_to_host: u32,
    pub num_flow_director_fltr: u32,
    pub ts_dev_info: TsDevInfo,
    pub nac_topo_mode: u32,
    pub nac_topo_id: u32,
    pub supported_sensors: u32,
}

impl DevCaps {
    /// Parses `count` elements (ice_parse_dev_caps) for PF `pf_id`.
    pub fn parse(buf: &[u8], count: u32, pf_id: u8) -> DevCaps {
        let mut d = DevCaps::default();
        for i in 0..walk(buf, count) {
            let e = cap_elem(buf, i);
            d.common.apply(e.id, e.number, e.logical_id, e.phys_id);
            match e.id {
                id::VALID_FUNCTIONS => {
                    d.num_funcs = e.number.count_ones();
                    // ice_func_id_to_logical_id: enabled PFs below pf_id
                    let below = if pf_id >= 32 { u32::MAX } else { (1u32 << pf_id) - 1 };
                    d.logical_pf_id = (e.number & below).count_ones() as u8;
                }
                id::VF => d.num_vfs_exposed = e.number,
                id::VSI => d.num_vsi_allocd_to_host = e.number,
                id::P1588 => {
                    let n = e.number;
                    let t = &mut d.ts_dev_info;
                    t.ena = n & (1 << 24) != 0;
                    d.common.ieee_1588 = t.ena;
                    t.tmr0_owner = (n & 0x7) as u8;
                    t.tmr0_owned = n & (1 << 3) != 0;
                    t.tmr0_ena = n & (1 << 25) != 0;
                    t.tmr1_owner = ((n >> 4) & 0x7) as u8;
                    t.tmr1_owned = n & (1 << 7) != 0;
                    t.tmr1_ena = n & (1 << 26) != 0;
                    t.ts_ll_read = n & (1 << 28) != 0;
                    t.ts_ll_int_read = n & (1 << 29) != 0;
                    t.ll_phy_tmr_update = n & (1 << 30) != 0;
                    t.tmr_own_map = e.phys_id;
                }
                id::FD => d.num_flow_director_fltr = e.number,
                id::NAC_TOPOLOGY => {
                    d.nac_topo_mode = e.number;
                    d.nac_topo_id = e.phys_id & 0xf;
                }
                id::SENSOR_READING => d.supported_sensors = e.number,
                _ => {}
            }
        }
        d.common.port_limit(d.num_funcs);
        d
    }
}

/// 1588 function info (ice `struct ice_ts_func_info`).
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TsFuncInfo {
    pub ena: bool,
    pub src_tmr_owned: bool,
    pub tmr_ena: bool,
    pub tmr_index_owned: bool,
    pub tmr_index_assoc: bool,
    pub gpio_1pps: bool,
    pub clk_src: bool,
    /// TIME_REF frequency index (0..=5; an unknown one reads as 0, 25 MHz).
    pub time_ref: u8,
}

/// Function capabilities (ice `struct ice_hw_func_caps`).
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncCaps {
    pub common: CommonCaps,
    pub num_allocd_vfs: u32,
    pub vf_base_id: u32,
    pub guar_num_vsi: u32,
    pub fd_fltr_guar: u32,
    pub fd_fltr_best_effort: u32,
    pub ts_func_info: TsFuncInfo,
}

/// ice_get_num_per_func: `max` shared among the enabled PFs of the device
/// bitmap's bits 7:0 (0 when none).
pub fn per_func(dev_valid_functions: u32, max: u32) -> u32 {
    max.checked_div((dev_valid_functions & 0xff).count_ones()).unwrap_or(0)
}

/// E810 GLQF_FD_SIZE (BAR0 0x0046_0010): guaranteed filters bits 14:0,
/// best-effort bits 30:16 (ice_hw_autogen.h; read by
/// ice_parse_fdir_func_caps).
pub const GLQF_FD_SIZE: usize = 0x0046_0010;

impl FuncCaps {
    /// Parses `count` elements (ice_parse_func_caps) given what the device
    /// caps found (valid-functions bitmap and PF count) and GLQF_FD_SIZE.
    pub fn parse(
        buf: &[u8],
        count: u32,
        dev_valid_functions: u32,
        dev_num_funcs: u32,
        fd_size: u32,
    ) -> FuncCaps {
        let mut f = FuncCaps::default();
        for i in 0..walk(buf, count) {
            let e = cap_elem(buf, i);
            f.common.apply(e.id, e.number, e.logical_id, e.phys_id);
            match e.id {
                id::VF => {
                    f.num_allocd_vfs = e.number;
                    f.vf_base_id = e.logical_id;
                }
                id::VSI => f.guar_num_vsi = per_func(dev_valid_functions, MAX_VSI),
                id::P1588 => {
                    let n = e.number;
                    let t = &mut f.ts_func_info;
                    t.ena = n & 1 != 0;
                    f.common.ieee_1588 = t.ena;
                    t.src_tmr_owned = n & (1 << 1) != 0;
                    t.tmr_ena = n & (1 << 2) != 0;
                    t.tmr_index_owned = n & (1 << 4) != 0;
                    t.tmr_index_assoc = n & (1 << 24) != 0;
                    t.gpio_1pps = n & (1 << 12) != 0;
                    t.clk_src = n & (1 << 20) != 0;
                    let freq = ((n >> 16) & 0x7) as u8;
                    t.time_ref = if freq < 6 { freq } else { 0 };
                }
                id::FD => {
                    f.fd_fltr_guar = per_func(dev_valid_functions, fd_size & 0x7fff);
                    f.fd_fltr_best_effort = (fd_size >> 16) & 0x7fff;
                }
                _ => {}
            }
        }
        f.common.port_limit(dev_num_funcs);
        f
    }
}
