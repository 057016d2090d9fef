//! Typed admin-queue commands and the parsers of their answers (spec
//! ice-lan-for-rdma §2). One function or method per opcode; caller values
//! are range-checked and refused with [`CmdError::Invalid`], never cut to
//! the field.
//!
//! Byte offsets are descriptor offsets (parameters start at 16) or offsets
//! into the indirect buffer, as in the spec's tables (computed there from
//! ice_adminq_cmd.h).

use core::fmt::{self, Display, Formatter};
use irdma_hal::{Bar, Hal};

use super::aq::{AdminQueue, AqError};
use super::desc::{Desc, Opcode, le16, le32};

pub use super::caps::{CAP_ELEM_LEN, CapElem, cap_elem};
pub use super::desc::queue_shutdown;

/// Why a typed command failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CmdError {
    /// The admin queue or the firmware refused or failed the command.
    Aq(AqError),
    /// A caller value does not fit its field, or a buffer is too small for
    /// the command (ice: EINVAL). Nothing was sent.
    Invalid(&'static str),
    /// The firmware's answer is inconsistent (ice: EIO); the text says how.
    BadResponse(&'static str),
    /// A TC node would get more children than its layer allows
    /// (ice_sched_add_nodes_to_hw_layer: EIO). Nothing was sent.
    TcFull,
    /// The switch rule or VSI already forwards to this VSI
    /// (ice_add_update_vsi_list: EEXIST). Nothing was sent.
    Exists,
    /// An update or removal named a rule or list the firmware does not
    /// have (ice_aq_sw_rules: the ENOENT return code of 0x02A1 / 0x02A2
    /// becomes ENOENT).
    NotFound,
    /// The driver's fixed-size filter table has no free entry. Nothing was
    /// sent.
    TableFull,
    /// The command would free or change the VSI a live RDMA
    /// [`Device`](crate::device::Device) was handed, its queue sets or its
    /// scheduler branch ([`super::IceLan`] holds them for the device until
    /// [`super::IceLan::close_device`]). Nothing was sent (ice: EBUSY).
    InUse,
    /// The firmware's AQ API major version is newer than this driver
    /// supports (ice_aq_ver_check: EIO).
    ApiTooNew {
        /// Major.
        major: u8,
        /// Minor.
        minor: u8,
    },
}

impl CmdError {
    /// The Linux errno ice returns for the same failure (negative).
    pub fn linux_errno(&self) -> i32 {
        match self {
            CmdError::Aq(e) => e.linux_errno(),
            CmdError::Invalid(_) => -22,
            CmdError::BadResponse(_) | CmdError::TcFull | CmdError::ApiTooNew { .. } => -5,
            CmdError::Exists => -17,
            CmdError::NotFound => -2,
            CmdError::TableFull => -28,
            CmdError::InUse => -16,
        }
    }

    /// The firmware's return code, when it gave one.
    pub fn firmware_code(&self) -> Option<u8> {
        match self {
            CmdError::Aq(e) => e.firmware_code(),
            _ => None,
        }
    }
}

crate::error::wrapping!(CmdError from { AqError => Aq });

fn put16(b: &mut [u8], at: usize, v: u16) {
    for (i, x) in v.to_le_bytes().into_iter().enumerate() {
        if let Some(d) = b.get_mut(at + i) {
            *d = x;
        }
    }
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    put16(b, at, v as u16);
    put16(b, at + 2, (v >> 16) as u16);
}

// ------------------------------------------------------------------ queue

/// Stop LLDP Agent 0x0A05: byte 16 bit 0 = shut the agent down, bit 1 =
/// persist across resets (ice_adminq_cmd.h → struct ice_aqc_lldp_stop; spec
/// §6 item 10: stopping firmware LLDP keeps one traffic class).
pub fn lldp_stop(persist: bool) -> Desc {
    let mut d = Desc::new(Opcode::LldpStop);
    d.set_u8(16, 1 | if persist { 2 } else { 0 });
    d
}

// ----------------------------------------------------- port and driver

/// Set Port Parameters (0x0203) values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortParams {
    /// VSI that receives frames with errors (10 bits).
    pub bad_frame_vsi: u16,
    /// Forward frames with errors to `bad_frame_vsi`.
    pub save_bad: bool,
    /// Pad transmitted frames shorter than 60 bytes.
    pub pad_short: bool,
    /// Double VLAN mode.
    pub double_vlan: bool,
    /// Loopback mode: 0 normal, 1 none, 2 high.
    pub loopback: u8,
}

impl PortParams {
    /// What Linux sends in single-VLAN mode: bad frames to VSI 0, no
    /// flags, normal loopback.
    pub const LINUX: PortParams = PortParams {
        bad_frame_vsi: 0,
        save_bad: false,
        pad_short: false,
        double_vlan: false,
        loopback: 0,
    };
}

/// Driver Version (0x0002) values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverVersion<'a> {
    /// Major, minor, build, subbuild.
    pub version: [u8; 4],
    /// ASCII name, 1..=32 bytes.
    pub name: &'a str,
}

// ---------------------------------------------------------------- version

/// Firmware and AQ API versions (Get Version 0x0001; spec §2.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Version {
    /// ROM version (bytes 16–19).
    pub rom: u32,
    /// Firmware build (bytes 20–23).
    pub fw_build: u32,
    /// Firmware branch / major / minor / patch (bytes 24–27).
    pub fw: [u8; 4],
    /// AQ API branch / major / minor / patch (bytes 28–31).
    pub api: [u8; 4],
}

impl Version {
    /// AQ API major version.
    pub fn api_major(&self) -> u8 {
        self.api[1]
    }
    /// AQ API minor version.
    pub fn api_minor(&self) -> u8 {
        self.api[2]
    }
}

/// The AQ API major version this driver speaks: E810 expects 1.5; a newer
/// major is refused, an older major or any minor only noted
/// (ice_controlq.h → EXP_FW_API_VER_*_E810; ice_controlq.c → ice_aq_ver_check).
pub const API_MAJOR: u8 = 1;
/// The API minor version ice expects on E810.
pub const API_MINOR: u8 = 5;

/// Whether the API version is usable: Ok for major ≤ 1 (a minor far from 5
/// only warns in ice), [`CmdError::ApiTooNew`] for a newer major.
pub fn check_api(v: &Version) -> Result<(), CmdError> {
    if v.api_major() > API_MAJOR {
        return Err(CmdError::ApiTooNew { major: v.api_major(), minor: v.api_minor() });
    }
    Ok(())
}

// ------------------------------------------------------------------- caps

/// Which capability list to ask for (0x000B device, 0x000A function).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapsKind {
    /// The whole device (0x000B).
    Device,
    /// This function (0x000A).
    Function,
}

/// Capability ids this driver uses (ice_adminq_cmd.h → ICE_AQC_CAPS_*;
/// spec §2.6 table).
pub mod cap_id {
    /// Enabled PFs bitmap.
    pub const VALID_FUNCTIONS: u16 = 0x0005;
    /// VSIs.
    pub const VSI: u16 = 0x0017;
    /// DCB: number 1 = capable, logical_id = active TCs, phys_id = max TC.
    pub const DCB: u16 = 0x0018;
    /// LAN Rx queues.
    pub const RXQS: u16 = 0x0041;
    /// LAN Tx queues.
    pub const TXQS: u16 = 0x0042;
    /// MSI-X vectors: number, phys_id = first.
    pub const MSIX: u16 = 0x0043;
    /// Largest MTU.
    pub const MAX_MTU: u16 = 0x0047;
    /// RDMA (iWARP/RoCE) supported.
    pub const RDMA: u16 = 0x0051;
    /// LAG support: bit 0 RoCE LAG.
    pub const FW_LAG_SUPPORT: u16 = 0x0092;
    /// 5-layer Tx scheduler compatibility mode.
    pub const TX_SCHED_TOPO_COMP_MODE: u16 = 0x0085;
}

/// The capabilities the RDMA bring-up needs, parsed from a list (spec §2.6;
/// ice_common.c → ice_parse_common_caps, ice_parse_vsi_func_caps,
/// ice_parse_valid_functions_cap, ice_recalc_port_limited_caps).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    /// Elements the firmware reported (descriptor bytes 20–23).
    pub count: u32,
    /// RDMA supported (cap 0x0051, number == 1).
    pub rdma: bool,
    /// Enabled PFs bitmap (cap 0x0005).
    pub valid_functions: u32,
    /// MSI-X vectors (cap 0x0043 number).
    pub num_msix_vectors: u32,
    /// First MSI-X vector, absolute (cap 0x0043 phys_id).
    pub msix_vector_first_id: u32,
    /// LAN Rx queues and the first one (cap 0x0041).
    pub num_rxq: u32,
    /// First Rx queue.
    pub rxq_first_id: u32,
    /// LAN Tx queues (cap 0x0042).
    pub num_txq: u32,
    /// First Tx queue.
    pub txq_first_id: u32,
    /// DCB capable (cap 0x0018).
    pub dcb: bool,
    /// Active TC bitmap (cap 0x0018 logical_id).
    pub active_tc_bitmap: u32,
    /// Max TCs (cap 0x0018 phys_id).
    pub maxtc: u32,
    /// Largest MTU (cap 0x0047).
    pub max_mtu: u32,
    /// RoCE LAG (cap 0x0092 bit 0).
    pub roce_lag: bool,
    /// 5-layer scheduler compatibility mode available (cap 0x0085).
    pub tx_sched_topo_comp_mode_en: bool,
    /// VSIs reported (cap 0x0017 number).
    pub num_vsi: u32,
}

impl Caps {
    /// The summary of `count` elements of `buf`, from the full parse
    /// ([`super::caps::CommonCaps`]; elements past the data read as zeros;
    /// the last of duplicate ids wins).
    pub fn parse(buf: &[u8], count: u32) -> Caps {
        let c = super::caps::CommonCaps::parse(buf, count);
        let n = (count as usize).min(buf.len() / CAP_ELEM_LEN);
        let vsi = (0..n)
            .rev()
            .map(|i| cap_elem(buf, i))
            .find(|e| e.id == cap_id::VSI)
            .map_or(0, |e| e.number);
        Caps {
            count,
            rdma: c.iwarp,
            valid_functions: c.valid_functions,
            num_msix_vectors: c.num_msix_vectors,
            msix_vector_first_id: c.msix_vector_first_id,
            num_rxq: c.num_rxq,
            rxq_first_id: c.rxq_first_id,
            num_txq: c.num_txq,
            txq_first_id: c.txq_first_id,
            dcb: c.dcb,
            active_tc_bitmap: c.active_tc_bitmap,
            maxtc: c.maxtc,
            max_mtu: c.max_mtu,
            roce_lag: c.roce_lag,
            tx_sched_topo_comp_mode_en: c.tx_sched_topo_comp_mode_en,
            num_vsi: vsi,
        }
    }

    /// Enabled PFs: popcount of the VALID_FUNCTIONS bitmap.
    pub fn num_funcs(&self) -> u32 {
        self.valid_functions.count_ones()
    }

    /// VSIs guaranteed to one function: 768 divided by the number of
    /// enabled PFs in the *device* caps' bitmap, bits 7:0 only (0 when none)
    /// (spec §7 item 5; ice_parse_vsi_func_caps).
    pub fn guaranteed_vsis(device_valid_functions: u32) -> u32 {
        let n = (device_valid_functions & 0xff).count_ones();
        768u32.checked_div(n).unwrap_or(0)
    }

    /// RDMA usable on this device: more than 4 PFs turns it off on E810
    /// (ice_recalc_port_limited_caps; spec §2.6).
    pub fn rdma_usable(function: &Caps, device: &Caps) -> bool {
        function.rdma && device.num_funcs() <= 4
    }
}

// --------------------------------------------------------------- switch

/// One Get Switch Configuration element (spec §2.7; 6 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwElem {
    /// Type: 0 physical port, 1 virtual port, 2 VSI (bits 15:14).
    pub kind: u8,
    /// Port or VSI number (bits 9:0).
    pub num: u16,
    /// Switch id.
    pub swid: u16,
    /// Function number (bits 14:0).
    pub pf_vf_num: u16,
    /// A VF (bit 15).
    pub is_vf: bool,
}

/// Size of one switch-config element.
pub const SW_ELEM_LEN: usize = 6;

/// Element `i` of a switch-config answer.
pub fn sw_elem(buf: &[u8], i: usize) -> SwElem {
    let at = i.saturating_mul(SW_ELEM_LEN);
    let v = le16(buf, at);
    let f = le16(buf, at + 4);
    SwElem {
        kind: (v >> 14) as u8,
        num: v & 0x3ff,
        swid: le16(buf, at + 2),
        pf_vf_num: f & 0x7fff,
        is_vf: f & 0x8000 != 0,
    }
}

/// The port this PF sits on (ice `port_info` fields the bring-up uses).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortInfo {
    /// Logical port (from the port element of 0x0200).
    pub lport: u8,
    /// Switch id.
    pub sw_id: u16,
    /// Function number of the port element.
    pub pf_vf_num: u16,
    /// The port element names a VF.
    pub is_vf: bool,
    /// Permanent (LAN) MAC from 0x0107; `None` until read.
    pub mac: Option<[u8; 6]>,
    /// PHY user configuration caps byte (ENA_LINK bit 3 follows restart
    /// AN's `ena_link`; ice `curr_user_phy_cfg.caps`).
    pub phy_user_caps: u8,
}

// ------------------------------------------------------------------ link

/// Get Link Status answer, E810 (V1) layout (spec §2.16; ice_common.c →
/// ice_aq_get_link_info).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStatus {
    /// Topology / media conflict (byte 0).
    pub topo_media_conflict: u8,
    /// Configuration error (byte 1).
    pub link_cfg_err: u8,
    /// Link info (byte 2): bit 0 up, bit 6 media available.
    pub link_info: u8,
    /// AN info (byte 3): bit 5 Tx pause, bit 6 Rx pause.
    pub an_info: u8,
    /// Extended info (byte 4).
    pub ext_info: u8,
    /// Max frame size (bytes 6–7).
    pub max_frame_size: u16,
    /// FEC info (byte 8 bits 2:0).
    pub fec_info: u8,
    /// Pacing: byte 8 bits 7:3 left in place, the pacing value (bits 6:3)
    /// and its type (bit 7: fixed, else average), as ice keeps them
    /// (ice_common.c → ice_aq_get_link_info: `cfg & (ICE_AQ_CFG_PACING_M |
    /// ICE_AQ_CFG_PACING_TYPE_M)`, ice_adminq_cmd.h).
    pub pacing: u8,
    /// Speed bitmap (bytes 10–11).
    pub link_speed: u16,
    /// PHY types, low (bytes 16–23).
    pub phy_type_low: u64,
    /// PHY types, high (bytes 24–31).
    pub phy_type_high: u64,
    /// Link events enabled (response descriptor bytes 18–19 bit 0).
    pub lse_ena: bool,
}

/// Length of the E810 link-status buffer (ICE_GET_LINK_STATUS_DATALEN_V1).
pub const LINK_STATUS_LEN: usize = 32;

impl LinkStatus {
    /// Parses the link-status data (an answer or a 0x0607 ARQ event).
    pub fn parse(b: &[u8], lse_ena: bool) -> LinkStatus {
        let g = |i: usize| b.get(i).copied().unwrap_or(0);
        let cfg = g(8);
        LinkStatus {
            topo_media_conflict: g(0),
            link_cfg_err: g(1),
            link_info: g(2),
            an_info: g(3),
            ext_info: g(4),
            max_frame_size: le16(b, 6),
            fec_info: cfg & 0x7,
            pacing: cfg & 0xf8,
            link_speed: le16(b, 10),
            phy_type_low: u64::from(le32(b, 16)) | (u64::from(le32(b, 20)) << 32),
            phy_type_high: u64::from(le32(b, 24)) | (u64::from(le32(b, 28)) << 32),
            lse_ena,
        }
    }

    /// Link is up.
    pub fn up(&self) -> bool {
        self.link_info & 1 != 0
    }

    /// Flow control in force: 0 none, 1 Rx pause, 2 Tx pause, 3 both
    /// (ice_aq_get_link_info, ice `fc.current_mode`).
    pub fn fc_mode(&self) -> u8 {
        let tx = self.an_info & (1 << 5) != 0;
        let rx = self.an_info & (1 << 6) != 0;
        match (tx, rx) {
            (true, true) => 3,
            (true, false) => 2,
            (false, true) => 1,
            (false, false) => 0,
        }
    }
}

/// Link events a Set Event Mask leaves unmasked in Linux: link up/down
/// (bit 1), media not available (bit 2), module qualification failure
/// (bit 8), PHY FW load failure (bit 12) (spec §2.16; ice_main.c →
/// ice_init_link_events).
pub const LINUX_EVENT_MASK: u16 = !((1 << 1) | (1 << 2) | (1 << 8) | (1 << 12));

// ----------------------------------------------------------- scheduler

/// Tx scheduler resources (0x0412; spec §2.11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedResources {
    /// Logical layers: ice's `num_tx_sched_layers`.
    pub layers: u8,
    /// Physical layers.
    pub phys_layers: u8,
    /// Flattening bitmap.
    pub flattened_layers: u8,
    /// Congestion domains for this PF.
    pub max_cgds: u8,
    /// RDMA qsets the firmware reports (generic bytes 8–9; ice never reads it).
    pub rdma_qsets: u16,
    /// Max children of a layer-i node = max_sibl_grp_sz of layer i + 1;
    /// `None` for the last layer.
    pub max_children: [Option<u16>; MAX_LAYERS],
    /// The raw per-layer entries.
    pub layer_info: [[u8; 32]; MAX_LAYERS],
}

/// The deepest scheduler tree (ICE_AQC_TOPO_MAX_LEVEL_NUM).
pub const MAX_LAYERS: usize = 9;
/// Size of the 0x0412 answer: 32-byte generic part, 9 × 32-byte layers.
pub const SCHED_RES_LEN: usize = 32 + MAX_LAYERS * 32;

impl SchedResources {
    /// Parses a 0x0412 answer; more than 9 logical layers is an error.
    pub fn parse(b: &[u8]) -> Result<SchedResources, CmdError> {
        let layers = le16(b, 2);
        if layers as usize > MAX_LAYERS {
            return Err(CmdError::BadResponse("more than 9 scheduler layers"));
        }
        let mut layer_info = [[0u8; 32]; MAX_LAYERS];
        for (i, l) in layer_info.iter_mut().enumerate() {
            if let Some(src) = b.get(32 + i * 32..64 + i * 32) {
                l.copy_from_slice(src);
            }
        }
        let mut max_children = [None; MAX_LAYERS];
        for (i, m) in max_children.iter_mut().enumerate().take((layers as usize).saturating_sub(1))
        {
            *m = layer_info.get(i + 1).map(|l| le16(l, 10));
        }
        Ok(SchedResources {
            layers: layers as u8,
            phys_layers: le16(b, 0) as u8,
            flattened_layers: b.get(4).copied().unwrap_or(0),
            max_cgds: b.get(6).copied().unwrap_or(0),
            rdma_qsets: le16(b, 8),
            max_children,
            layer_info,
        })
    }
}

// ------------------------------------------------------------------- VSI

/// The 128-byte VSI context (spec §2.12; ice_adminq_cmd.h →
/// struct ice_aqc_vsi_props).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct VsiContext(pub [u8; VSI_CTX_LEN]);

impl core::fmt::Debug for VsiContext {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "VsiContext(")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// Size of the VSI context.
pub const VSI_CTX_LEN: usize = 128;

/// VSI context offsets and bits (spec §2.12 table; ice_adminq_cmd.h →
/// ICE_AQ_VSI_*).
pub mod vsi {
    /// valid_sections, u16.
    pub const VALID_SECTIONS: usize = 0;
    /// Section bit: security.
    pub const PROP_SECURITY_VALID: u16 = 1 << 1;
    /// Section bit: Rx queue map.
    pub const PROP_RXQ_MAP_VALID: u16 = 1 << 6;
    /// Section bit: queue options (PE filter).
    pub const PROP_Q_OPT_VALID: u16 = 1 << 7;
    /// Section bit: ACL.
    pub const PROP_ACL_VALID: u16 = 1 << 10;
    /// Section bit: flow director.
    pub const PROP_FLOW_DIR_VALID: u16 = 1 << 11;
    /// Switch id.
    pub const SW_ID: usize = 2;
    /// sw_flags: ALLOW_LB bit 5, LOCAL_LB bit 6, SRC_PRUNE bit 7.
    pub const SW_FLAGS: usize = 3;
    /// sw_flags2: LAN_ENA bit 4.
    pub const SW_FLAGS2: usize = 4;
    /// sec_flags: ALLOW_DEST_OVRD bit 0.
    pub const SEC_FLAGS: usize = 6;
    /// inner_vlan_flags: Tx mode ALL = 3.
    pub const INNER_VLAN_FLAGS: usize = 12;
    /// Ingress UP table, u32.
    pub const INGRESS_TABLE: usize = 16;
    /// Egress UP table, u32.
    pub const EGRESS_TABLE: usize = 20;
    /// mapping_flags, u16 (0 = contiguous).
    pub const MAPPING_FLAGS: usize = 28;
    /// q_mapping\[0\] (first queue), q_mapping\[1\] (count), u16 each.
    pub const Q_MAPPING: usize = 30;
    /// tc_mapping\[8\], u16: offset bits 10:0, log2(count) bits 14:11.
    pub const TC_MAPPING: usize = 62;
    /// q_opt_rss.
    pub const Q_OPT_RSS: usize = 78;
    /// q_opt_tc.
    pub const Q_OPT_TC: usize = 79;
    /// q_opt_flags: bit 0 PE_FLTR_EN.
    pub const Q_OPT_FLAGS: usize = 80;
    /// Outer UP table, u32.
    pub const OUTER_UP_TABLE: usize = 84;
    /// ACL default action, u16.
    pub const ACL_DEF_ACT: usize = 88;
    /// Flow director options, u16: ENABLE bit 0, PROG_ENABLE bit 3.
    pub const FD_OPTIONS: usize = 90;
    /// Dedicated flow-director filters, u16.
    pub const MAX_FD_FLTR_DEDICATED: usize = 92;
    /// Shared flow-director filters, u16.
    pub const MAX_FD_FLTR_SHARED: usize = 94;
    /// The 1:1 user-priority table, 3 bits per UP (ice_set_dflt_vsi_ctx).
    pub const UP_TABLE_1_TO_1: u32 = {
        let mut t = 0u32;
        let mut up = 0;
        while up < 8 {
            t |= (up as u32) << (3 * up);
            up += 1;
        }
        t
    };
    /// Most Rx queues one TC maps (ICE_MAX_RXQS_PER_TC).
    pub const MAX_RXQS_PER_TC: u16 = 256;
    /// q_opt_rss for a PF VSI: LUT type PF (2) in bits 1:0, hash scheme
    /// Toeplitz (0) (ice_lib.c → ice_set_rss_vsi_ctx).
    pub const Q_OPT_RSS_PF: u8 = 2;
}

/// How the PF VSI is built (the inputs of ice_vsi_init for a PF VSI,
/// single TC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfVsiParams {
    /// The port's switch id (from 0x0200).
    pub sw_id: u8,
    /// First PF Rx queue of the VSI (absolute within the PF).
    pub rxq_base: u16,
    /// Rx queues (ice caps the TC at 256).
    pub num_rxq: u16,
    /// Receive-side scaling enabled (q_opt_rss = PF LUT).
    pub rss: bool,
    /// Flow director: (dedicated, shared) filter counts, or `None`.
    pub flow_director: Option<(u16, u16)>,
    /// Switch in VEB mode (ice default): ALLOW_LB and LOCAL_LB are set.
    pub veb: bool,
}

impl VsiContext {
    /// The context ice sends to add the main PF VSI (ice_lib.c →
    /// ice_vsi_init: ice_set_dflt_vsi_ctx, ice_vsi_setup_q_map for TC 0,
    /// ice_set_fd_vsi_ctx, ice_set_rss_vsi_ctx; spec §2.12 and §7 item 10).
    /// Only the security section is marked valid (plus flow director and
    /// ACL with flow director); the rest is sent anyway.
    pub fn pf_add(p: &PfVsiParams) -> Result<VsiContext, CmdError> {
        Self::build_add(p, false)
    }

    /// The context ice sends to add a CTRL VSI (the flow-director control
    /// VSI): the PF context without the security section (ice_lib.c →
    /// ice_vsi_init sets ALLOW_DEST_OVRD and SECURITY_VALID for PF VSIs
    /// only) and without RSS (ice_vsi_init skips ice_set_rss_vsi_ctx for
    /// CTRL); queue map and flow director as for a PF. It is added with the
    /// same descriptor (VSI type PF in the command, as ice_vsi_init does for
    /// CTRL). `p.rss` is ignored.
    pub fn ctrl_add(p: &PfVsiParams) -> Result<VsiContext, CmdError> {
        Self::build_add(p, true)
    }

    fn build_add(p: &PfVsiParams, ctrl: bool) -> Result<VsiContext, CmdError> {
        if p.num_rxq == 0 {
            return Err(CmdError::Invalid("a VSI needs at least one Rx queue"));
        }
        if p.rxq_base > 0x7ff {
            return Err(CmdError::Invalid("first Rx queue beyond 11 bits"));
        }
        let mut c = [0u8; VSI_CTX_LEN];
        let mut valid = if ctrl { 0 } else { vsi::PROP_SECURITY_VALID };
        c[vsi::SW_ID] = p.sw_id;
        c[vsi::SW_FLAGS] = 1 << 7 | if p.veb { (1 << 5) | (1 << 6) } else { 0 };
        c[vsi::SW_FLAGS2] = 1 << 4;
        c[vsi::SEC_FLAGS] = u8::from(!ctrl);
        c[vsi::INNER_VLAN_FLAGS] = 3;
        put32(&mut c, vsi::INGRESS_TABLE, vsi::UP_TABLE_1_TO_1);
        put32(&mut c, vsi::EGRESS_TABLE, vsi::UP_TABLE_1_TO_1);
        put32(&mut c, vsi::OUTER_UP_TABLE, vsi::UP_TABLE_1_TO_1);
        // ice_vsi_setup_q_map: TC 0 takes all queues, at most 256; the
        // count field is log2 rounded up.
        let q = p.num_rxq.min(vsi::MAX_RXQS_PER_TC);
        let pow = 16 - (q - 1).leading_zeros() as u16;
        put16(&mut c, vsi::TC_MAPPING, pow << 11);
        put16(&mut c, vsi::MAPPING_FLAGS, 0);
        put16(&mut c, vsi::Q_MAPPING, p.rxq_base);
        put16(&mut c, vsi::Q_MAPPING + 2, q);
        if p.rss && !ctrl {
            c[vsi::Q_OPT_RSS] = vsi::Q_OPT_RSS_PF;
        }
        if let Some((dedicated, shared)) = p.flow_director {
            valid |= vsi::PROP_FLOW_DIR_VALID | vsi::PROP_ACL_VALID;
            // ACL default action: Rx profile-miss counter 2 in bits 3:0,
            // table-miss counter 3 in bits 7:4 (ice_lib.c →
            // ice_set_fd_vsi_ctx, ICE_ACL_RX_PROF_MISS_CNTR /
            // ICE_ACL_RX_TBL_MISS_CNTR; 0x32 as the vectors record).
            put16(&mut c, vsi::ACL_DEF_ACT, 0x32);
            put16(&mut c, vsi::FD_OPTIONS, 1 | (1 << 3));
            put16(&mut c, vsi::MAX_FD_FLTR_DEDICATED, dedicated);
            put16(&mut c, vsi::MAX_FD_FLTR_SHARED, shared);
        }
        put16(&mut c, vsi::VALID_SECTIONS, valid);
        Ok(VsiContext(c))
    }

    /// The same context for an Update VSI (0x0211) that re-applies it:
    /// ice_vsi_init marks the Rx queue-map section valid when it updates
    /// rather than adds, and the queue-options section too when it set the
    /// RSS LUT type (RSS on, not a CTRL VSI: exactly the contexts whose
    /// q_opt_rss is non-zero) (ice_lib.c → ice_vsi_init, `!init_vsi`; spec
    /// §2.12: on Update, the bit of each section sent).
    pub fn for_update(mut self) -> VsiContext {
        let mut v = self.valid_sections() | vsi::PROP_RXQ_MAP_VALID;
        if self.0[vsi::Q_OPT_RSS] != 0 {
            v |= vsi::PROP_Q_OPT_VALID;
        }
        put16(&mut self.0, vsi::VALID_SECTIONS, v);
        self
    }

    /// The Rx queues the context maps (q_mapping\[1\]).
    pub fn num_rxq(&self) -> u16 {
        le16(&self.0, vsi::Q_MAPPING + 2)
    }

    /// valid_sections.
    pub fn valid_sections(&self) -> u16 {
        le16(&self.0, vsi::VALID_SECTIONS)
    }

    /// The PE-filter update ice sends: zero except valid_sections = Q_OPT
    /// and q_opt_rss / q_opt_tc copied from `cached`, q_opt_flags bit 0 =
    /// `enable` (ice_switch.c → ice_cfg_iwarp_fltr / ice_cfg_rdma_fltr;
    /// spec §2.14).
    pub fn pe_filter_update(cached: &VsiContext, enable: bool) -> VsiContext {
        let mut c = [0u8; VSI_CTX_LEN];
        put16(&mut c, vsi::VALID_SECTIONS, vsi::PROP_Q_OPT_VALID);
        c[vsi::Q_OPT_RSS] = cached.0[vsi::Q_OPT_RSS];
        c[vsi::Q_OPT_TC] = cached.0[vsi::Q_OPT_TC];
        c[vsi::Q_OPT_FLAGS] = u8::from(enable);
        VsiContext(c)
    }
}

/// VSI type in the Add VSI descriptor (bytes 22–23 bits 1:0).
const VSI_TYPE_PF: u16 = 2;
/// vsi_num bit 15: the number is given (ICE_AQ_VSI_IS_VALID).
const VSI_IS_VALID: u16 = 1 << 15;

/// The answer to Add/Update/Free VSI (spec §2.12 response).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VsiAnswer {
    /// Hardware VSI number (& 0x3FF): irdma's `vport_id`.
    pub vsi_num: u16,
    /// VSIs in use.
    pub used: u16,
    /// VSIs free.
    pub free: u16,
}

// ----------------------------------------------------------------- DDP

/// Get Package Info List answer (0x0C43): the number of packages and
/// whether one is active (ice_ddp.c → ice_get_pkg_info;
/// ice_adminq_cmd.h → struct ice_aqc_get_pkg_info_resp: u32 count, then
/// 40-byte entries: version 4, name 28 (ICE_SEG_NAME_SIZE), track id 4,
/// is_in_nvm, is_active, is_active_at_boot, is_modified).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PkgInfo {
    /// Packages listed.
    pub count: u32,
    /// Index of the active package, if any.
    pub active: Option<u32>,
}

/// Size of a package-info entry (struct ice_aqc_get_pkg_info).
pub const PKG_INFO_ENTRY: usize = 40;
/// Offset of `is_active` inside an entry.
const PKG_INFO_ACTIVE: usize = 37;

/// Largest DDP download buffer (ICE_PKG_BUF_SIZE, 4 KiB).
pub const PKG_BUF_SIZE: usize = 4096;

/// The global-config lock's resource id (Request Resource 0x0008, res 4).
const RES_GLOBAL_CFG_LOCK: u16 = 4;
/// Write access.
const RES_WRITE: u16 = 2;
/// Lock timeout ice asks for, ms (ICE_GLOBAL_CFG_LOCK_TIMEOUT).
const GLOBAL_CFG_LOCK_TIMEOUT_MS: u32 = 3000;

/// Outcome of asking for the global-config lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockOutcome {
    /// Held: download, then release.
    Acquired,
    /// Another function already downloaded the package (response status
    /// ICE_AQ_RES_GLBL_DONE, 2; ice_aq_req_res returns EALREADY).
    AlreadyDone,
}

/// Request Resource response status (bytes 28–29) for the global-config
/// lock (ice_adminq_cmd.h → ICE_AQ_RES_GLBL_SUCCESS / IN_PROG / DONE).
const RES_GLBL_SUCCESS: u16 = 0;
const RES_GLBL_IN_PROG: u16 = 1;
const RES_GLBL_DONE: u16 = 2;

// -------------------------------------------------------------- commands

/// Attempts to bring the admin queue up and pass the version check before
/// giving up: ice retries ten times (ice_controlq.h →
/// ICE_CTL_Q_ADMIN_INIT_TIMEOUT; spec §7 item 4).
pub const ADMIN_INIT_ATTEMPTS: u8 = 11;

/// Pause between those attempts (ice_controlq.h → ICE_CTL_Q_ADMIN_INIT_MSEC).
pub const ADMIN_INIT_PAUSE: core::time::Duration = core::time::Duration::from_millis(100);

impl<H: Hal, B: Bar + Clone> AdminQueue<H, B> {
    /// The admin-queue part of ice_init_all_ctrlq (ice_controlq.c): start
    /// the queue ([`AdminQueue::start`]) and run [`init_check`]
    /// (Get Version, API check); when the check fails with EIO (a firmware
    /// error, a timeout or the API refusal; the rings are already shut
    /// down then) wait [`ADMIN_INIT_PAUSE`] and start over, up to
    /// [`ADMIN_INIT_ATTEMPTS`] times in all. A failed start, or a check
    /// failing otherwise, ends it at once. The error is the last attempt's,
    /// with the version it read.
    ///
    /// [`init_check`]: AdminQueue::init_check
    pub fn start_checked(
        bar: &B,
        cfg: &super::aq::AqConfig,
    ) -> Result<(Self, Version), (CmdError, Option<Version>)> {
        let mut attempt = 1u8;
        loop {
            let mut aq =
                AdminQueue::start(bar.clone(), cfg).map_err(|e| (CmdError::Aq(e), None))?;
            match aq.init_check() {
                Ok(v) => return Ok((aq, v)),
                // init_check cleared both queues' registers: the firmware
                // no longer owns the rings, which `aq` frees here
                Err((e, v)) if e.linux_errno() != -5 || attempt >= ADMIN_INIT_ATTEMPTS => {
                    return Err((e, v));
                }
                Err(_) => {}
            }
            drop(aq);
            attempt += 1;
            let until = H::now().saturating_add(ADMIN_INIT_PAUSE);
            irdma_hal::dma::wait_until::<H>(until, || false);
        }
    }
}

impl<H: Hal, B: Bar> AdminQueue<H, B> {
    /// Get Version 0x0001 (ice_aq_get_fw_ver).
    pub fn get_version(&mut self) -> Result<Version, CmdError> {
        let mut d = Desc::new(Opcode::GetVersion);
        self.exec(&mut d, None)?;
        let b = d.bytes();
        Ok(Version {
            rom: d.u32_at(16),
            fw_build: d.u32_at(20),
            fw: [b[24], b[25], b[26], b[27]],
            api: [b[28], b[29], b[30], b[31]],
        })
    }

    /// Get Version and the API check; on any failure both rings are shut
    /// down, ARQ first, without Queue Shutdown (ice_init_check_adminq).
    /// The version read is returned with the error when there was one.
    pub fn init_check(&mut self) -> Result<Version, (CmdError, Option<Version>)> {
        let r = self.get_version();
        match r {
            Ok(v) => match check_api(&v) {
                Ok(()) => Ok(v),
                Err(e) => {
                    self.stop_rq_then_sq();
                    Err((e, Some(v)))
                }
            },
            Err(e) => {
                self.stop_rq_then_sq();
                Err((e, None))
            }
        }
    }

    /// [`CmdError::InUse`] when a live RDMA device holds a VSI and `vsi`
    /// is that VSI, or is `None` (a command on the whole PF or its
    /// scheduler tree).
    pub(super) fn refuse_if_held(&self, vsi: Option<u16>) -> Result<(), CmdError> {
        match (self.held_vsi, vsi) {
            (Some(_), None) => Err(CmdError::InUse),
            (Some(h), Some(v)) if h == v => Err(CmdError::InUse),
            _ => Ok(()),
        }
    }

    /// Clear PF Configuration 0x02A4 (ice_clear_pf_cfg). It frees every
    /// VSI of the PF: refused with [`CmdError::InUse`] while a live RDMA
    /// device holds one.
    pub fn clear_pf_cfg(&mut self) -> Result<(), CmdError> {
        self.refuse_if_held(None)?;
        self.exec(&mut Desc::new(Opcode::ClearPfConfig), None)?;
        Ok(())
    }

    /// Stop LLDP Agent 0x0A05 ([`lldp_stop`]; ice_aq_stop_lldp), so the
    /// link partner cannot push more traffic classes.
    pub fn stop_lldp(&mut self, persist: bool) -> Result<(), CmdError> {
        self.exec(&mut lldp_stop(persist), None)?;
        Ok(())
    }

    /// Clear PXE Mode 0x0110 with byte 16 = 2 (ice_aq_clear_pxe_mode).
    pub fn clear_pxe(&mut self) -> Result<(), CmdError> {
        let mut d = Desc::new(Opcode::ClearPxe);
        d.set_u8(16, 2);
        self.exec(&mut d, None)?;
        Ok(())
    }

    /// Set Port Parameters 0x0203 (direct; ice_common.c →
    /// ice_aq_set_port_params; spec §5 step 11): bytes 16–17 flags (SAVE_BAD
    /// bit 0, PAD_SHORT bit 1, DOUBLE_VLAN bit 2), 18–19 the bad-frame VSI,
    /// byte 22 the loopback mode | VALID (bit 2). Linux sends VSI 0, no
    /// flags but double VLAN as the device is configured, normal loopback
    /// ([`PortParams::LINUX`]; ice_main.c → __ice_init_pf_sw). A VSI
    /// beyond 10 bits or a loopback mode above 2 is refused (ice writes
    /// them as given).
    pub fn set_port_params(&mut self, p: &PortParams) -> Result<(), CmdError> {
        if p.bad_frame_vsi > 0x3ff {
            return Err(CmdError::Invalid("bad-frame VSI beyond 10 bits"));
        }
        if p.loopback > 2 {
            return Err(CmdError::Invalid("loopback mode beyond 2"));
        }
        let flags =
            u16::from(p.save_bad) | u16::from(p.pad_short) << 1 | u16::from(p.double_vlan) << 2;
        let mut d = Desc::new(Opcode::SetPortParams);
        d.set_u16(16, flags);
        d.set_u16(18, p.bad_frame_vsi);
        d.set_u8(22, p.loopback | 4);
        self.exec(&mut d, None)?;
        Ok(())
    }

    /// Driver Version 0x0002 (indirect, RD; ice_common.c →
    /// ice_aq_send_driver_ver; spec §2.3): bytes 16–19 major, minor, build,
    /// subbuild; the buffer is the ASCII name without a terminator. ice
    /// cuts the name at the first non-ASCII or NUL byte and at 32 bytes,
    /// and an empty name fails its send (EINVAL); the driver refuses all
    /// of these with [`CmdError::Invalid`] before sending.
    pub fn send_driver_version(&mut self, v: &DriverVersion<'_>) -> Result<(), CmdError> {
        let name = v.name.as_bytes();
        if name.is_empty() || name.len() > 32 || name.iter().any(|b| *b == 0 || !b.is_ascii()) {
            return Err(CmdError::Invalid("driver name must be 1 to 32 ASCII bytes"));
        }
        let mut buf = [0u8; 32];
        let buf = buf.get_mut(..name.len()).ok_or(CmdError::Invalid("driver name"))?;
        buf.copy_from_slice(name);
        let mut d = Desc::new(Opcode::DriverVersion);
        for (i, x) in v.version.iter().enumerate() {
            d.set_u8(16 + i, *x);
        }
        self.exec(&mut d, Some(buf))?;
        Ok(())
    }

    /// Clear PXE only if the ATQ is alive, ignoring the result, as
    /// ice_clear_pxe_mode does; returns whether it was sent and the
    /// firmware's answer (EEXIST means "already not in PXE mode", iPXE).
    pub fn clear_pxe_if_alive(&mut self) -> Option<Result<(), CmdError>> {
        self.sq_alive().then(|| self.clear_pxe())
    }

    /// List capabilities (0x000B / 0x000A) into `buf` (ice_aq_list_caps).
    /// Returns the element count of descriptor bytes 20–23, which firmware
    /// writes even when it answers ENOMEM: the count comes back with the
    /// error as `Err((e, count))`.
    pub fn list_caps(&mut self, kind: CapsKind, buf: &mut [u8]) -> Result<u32, (CmdError, u32)> {
        let op = match kind {
            CapsKind::Device => Opcode::ListDevCaps,
            CapsKind::Function => Opcode::ListFuncCaps,
        };
        let mut d = Desc::new(op);
        let r = self.exec(&mut d, Some(buf));
        let count = d.u32_at(20);
        match r {
            Ok(()) => Ok(count),
            Err(e) => Err((e.into(), count)),
        }
    }

    /// Discovers device or function capabilities with a 4 KiB buffer
    /// (ice_discover_dev_caps / ice_discover_func_caps).
    pub fn discover_caps(&mut self, kind: CapsKind) -> Result<Caps, CmdError> {
        let mut buf = [0u8; super::desc::MAX_BUF_LEN];
        let count = self.list_caps(kind, &mut buf).map_err(|(e, _)| e)?;
        Ok(Caps::parse(&buf, count))
    }

    /// Device capabilities, every field ice parses (ice_discover_dev_caps).
    pub fn discover_dev_caps(&mut self, pf_id: u8) -> Result<super::caps::DevCaps, CmdError> {
        let mut buf = [0u8; super::desc::MAX_BUF_LEN];
        let count = self.list_caps(CapsKind::Device, &mut buf).map_err(|(e, _)| e)?;
        Ok(super::caps::DevCaps::parse(&buf, count, pf_id))
    }

    /// Function capabilities, every field ice parses, given the device caps
    /// (ice_discover_func_caps; flow-director sizes from GLQF_FD_SIZE).
    pub fn discover_func_caps(
        &mut self,
        dev: &super::caps::DevCaps,
    ) -> Result<super::caps::FuncCaps, CmdError> {
        let mut buf = [0u8; super::desc::MAX_BUF_LEN];
        let count = self.list_caps(CapsKind::Function, &mut buf).map_err(|(e, _)| e)?;
        let fd = self.regs().read32(super::caps::GLQF_FD_SIZE);
        Ok(super::caps::FuncCaps::parse(&buf, count, dev.common.valid_functions, dev.num_funcs, fd))
    }

    /// Get Switch Configuration 0x0200 from element `start` into `buf`
    /// (ice_aq_get_sw_cfg): returns (next element, elements returned).
    pub fn get_sw_cfg(&mut self, start: u16, buf: &mut [u8]) -> Result<(u16, u16), CmdError> {
        let mut d = Desc::new(Opcode::GetSwitchConfig);
        d.set_u16(18, start);
        self.exec(&mut d, Some(buf))?;
        Ok((d.u16_at(18), d.u16_at(20)))
    }

    /// Walks the switch configuration and fills the port (ice_switch.c →
    /// ice_get_initial_sw_cfg): only a physical-port element is recorded; a
    /// virtual port also counts as the port; a second port element is an
    /// error; VSI and other elements are ignored. 2 KiB buffer
    /// (ICE_SW_CFG_MAX_BUF_LEN).
    pub fn initial_sw_cfg(&mut self, port: &mut PortInfo) -> Result<(), CmdError> {
        let mut buf = [0u8; 2048];
        let mut start = 0u16;
        let mut ports = 0u32;
        // Each call returns at least one element or ends the walk; bound
        // the walk by the largest number of elements a switch can list.
        for _ in 0..1024 {
            buf.fill(0);
            let (next, n) = self.get_sw_cfg(start, &mut buf)?;
            for i in 0..n as usize {
                let e = sw_elem(&buf, i);
                if e.kind == 0 || e.kind == 1 {
                    if ports >= 1 {
                        return Err(CmdError::BadResponse("more than one port element"));
                    }
                    if e.kind == 0 {
                        port.lport = e.num as u8;
                        port.sw_id = e.swid;
                        port.pf_vf_num = e.pf_vf_num;
                        port.is_vf = e.is_vf;
                    }
                    ports += 1;
                }
            }
            if next == 0 {
                return Ok(());
            }
            start = next;
        }
        Err(CmdError::BadResponse("switch configuration never ends"))
    }

    /// Manage MAC Address Read 0x0107 with a `buf_len`-byte answer buffer
    /// (8..=4096: at least one 8-byte entry; Linux passes 16, two entries).
    /// Stores the first LAN-type address in `port`; entries past the
    /// buffer are not read even when firmware counts more
    /// (ice_aq_manage_mac_read).
    pub fn manage_mac_read(&mut self, buf_len: usize, port: &mut PortInfo) -> Result<(), CmdError> {
        let mut buf = [0u8; super::desc::MAX_BUF_LEN];
        let Some(b) = buf.get_mut(..buf_len).filter(|b| b.len() >= 8) else {
            return Err(CmdError::Invalid("MAC read buffer outside 8..=4096 bytes"));
        };
        let mut d = Desc::new(Opcode::ManageMacRead);
        self.exec(&mut d, Some(b))?;
        if d.u16_at(16) & (1 << 4) == 0 {
            return Err(CmdError::BadResponse("no valid LAN address"));
        }
        let n = d.u8_at(20) as usize;
        for i in 0..n {
            let Some(e) = b.get(i * 8..i * 8 + 8) else { break };
            if e[1] == 0 {
                let mut mac = [0u8; 6];
                mac.copy_from_slice(&e[2..8]);
                port.mac = Some(mac);
                break;
            }
        }
        Ok(())
    }

    /// Set MAC Config 0x0603 (ice_aq_set_mac_cfg): max frame size (not 0),
    /// the Tx pause-quanta timer and refresh threshold (ice reads them from
    /// the PRTMAC registers; [`read_pause_cfg`]) and the auto-drop bit,
    /// which is sent only when the firmware API is ≥ 1.4 (spec §7 item 7).
    pub fn set_mac_cfg(
        &mut self,
        max_frame: u16,
        pause: (u16, u16),
        auto_drop: bool,
        api: &Version,
    ) -> Result<(), CmdError> {
        // ice refuses 0 (ice_aq_set_mac_cfg); the upper bound is the
        // firmware's to judge (the bring-up option is checked ≤ 9728).
        if max_frame == 0 {
            return Err(CmdError::Invalid("max frame size 0"));
        }
        let mut d = Desc::new(Opcode::SetMacConfig);
        d.set_u16(16, max_frame);
        d.set_u16(20, pause.0);
        d.set_u16(22, pause.1);
        if auto_drop && api.api_major() >= 1 && api.api_minor() >= 4 {
            d.set_u8(24, 1);
        }
        self.exec(&mut d, None)?;
        Ok(())
    }

    /// Get Link Status 0x0607 with a 32-byte buffer (E810, V1). `lse`:
    /// `Some(true)` enables link events on the ARQ, `Some(false)` disables
    /// them, `None` leaves them (ice_aq_get_link_info).
    pub fn get_link_status(
        &mut self,
        lport: u8,
        lse: Option<bool>,
    ) -> Result<LinkStatus, CmdError> {
        let mut d = Desc::new(Opcode::GetLinkStatus);
        d.set_u8(16, lport);
        match lse {
            Some(true) => d.set_u16(18, 3),
            Some(false) => d.set_u16(18, 2),
            None => {}
        }
        let mut buf = [0u8; LINK_STATUS_LEN];
        self.exec(&mut d, Some(&mut buf))?;
        Ok(LinkStatus::parse(&buf, d.u16_at(18) & 1 != 0))
    }

    /// Restart Auto-Negotiation 0x0605: byte 16 = logical port, byte 18 =
    /// RESTART (bit 1) | ENABLE (bit 2, `ena_link`) | reference clock
    /// (bits 4:3, 0..=3). Updates ENA_LINK (bit 3) of the port's PHY user
    /// caps as ice does (ice_aq_set_link_restart_an).
    pub fn restart_an(
        &mut self,
        port: &mut PortInfo,
        ena_link: bool,
        refclk: u8,
    ) -> Result<(), CmdError> {
        if refclk > 3 {
            return Err(CmdError::Invalid("reference clock beyond 2 bits"));
        }
        let mut d = Desc::new(Opcode::RestartAn);
        d.set_u8(16, port.lport);
        let mut fl = 1 << 1 | refclk << 3;
        if ena_link {
            fl |= 1 << 2;
            port.phy_user_caps |= 1 << 3;
        } else {
            port.phy_user_caps &= !(1 << 3);
        }
        d.set_u8(18, fl);
        self.exec(&mut d, None)?;
        Ok(())
    }

    /// Set Event Mask 0x0613: byte 16 = logical port, bytes 24–25 = mask (a
    /// set bit suppresses the event) (ice_aq_set_event_mask).
    pub fn set_event_mask(&mut self, lport: u8, mask: u16) -> Result<(), CmdError> {
        let mut d = Desc::new(Opcode::SetEventMask);
        d.set_u8(16, lport);
        d.set_u16(24, mask);
        self.exec(&mut d, None)?;
        Ok(())
    }

    /// Query Tx Scheduler Resources 0x0412 (ice_sched_query_res_alloc).
    pub fn query_sched_res(&mut self) -> Result<SchedResources, CmdError> {
        let mut buf = [0u8; SCHED_RES_LEN];
        self.exec(&mut Desc::new(Opcode::QuerySchedRes), Some(&mut buf))?;
        SchedResources::parse(&buf)
    }

    /// Add VSI 0x0210 for a PF, number from the pool (ice_aq_add_vsi). The
    /// context is sent and the firmware's copy of it (if any) written back.
    pub fn add_vsi(&mut self, ctx: &mut VsiContext) -> Result<VsiAnswer, CmdError> {
        let mut d = Desc::new(Opcode::AddVsi);
        d.set_u16(22, VSI_TYPE_PF);
        self.exec_vsi(d, Some(ctx))
    }

    /// Runs VSI command `d` (with the context `ctx`, if any) and reads the
    /// VSI number and counts of its answer.
    fn exec_vsi(
        &mut self,
        mut d: Desc,
        ctx: Option<&mut VsiContext>,
    ) -> Result<VsiAnswer, CmdError> {
        self.exec(&mut d, ctx.map(|c| &mut c.0[..]))?;
        Ok(vsi_answer(&d))
    }

    /// Refuses a VSI number beyond the 10-bit field, and the VSI a live
    /// RDMA device holds ([`Self::refuse_if_held`]).
    fn vsi_num_free(&self, vsi_num: u16) -> Result<(), CmdError> {
        if vsi_num > 0x3ff {
            return Err(CmdError::Invalid("VSI number beyond 10 bits"));
        }
        self.refuse_if_held(Some(vsi_num))
    }

    /// Update VSI 0x0211 of hardware VSI `vsi_num` (ice_aq_update_vsi).
    /// Refused with [`CmdError::InUse`] for the VSI a live RDMA device
    /// holds (its PE filter is the device's, through
    /// [`LanOps`](crate::lan::LanOps)).
    pub fn update_vsi(
        &mut self,
        vsi_num: u16,
        ctx: &mut VsiContext,
    ) -> Result<VsiAnswer, CmdError> {
        self.vsi_num_free(vsi_num)?;
        let mut d = Desc::new(Opcode::UpdateVsi);
        d.set_u16(16, vsi_num | VSI_IS_VALID);
        self.exec_vsi(d, Some(ctx))
    }

    /// Turns the PE filter of the VSI on or off (spec §2.14): Update VSI
    /// with Q_OPT only; on success the cached context takes the new flags
    /// and the Q_OPT section bit, as ice's cache does; on failure it is
    /// left unchanged.
    pub fn set_pe_filter(
        &mut self,
        vsi_num: u16,
        cached: &mut VsiContext,
        enable: bool,
    ) -> Result<(), CmdError> {
        let mut upd = VsiContext::pe_filter_update(cached, enable);
        self.update_vsi(vsi_num, &mut upd)?;
        cached.0[vsi::Q_OPT_FLAGS] = u8::from(enable);
        let v = cached.valid_sections() | vsi::PROP_Q_OPT_VALID;
        put16(&mut cached.0, vsi::VALID_SECTIONS, v);
        Ok(())
    }

    /// Free VSI 0x0213 (direct): byte 16–17 = number | IS_VALID, byte 18
    /// bit 0 = keep the allocation (ice_aq_free_vsi). Refused with
    /// [`CmdError::InUse`] for the VSI a live RDMA device holds.
    pub fn free_vsi(&mut self, vsi_num: u16, keep_alloc: bool) -> Result<VsiAnswer, CmdError> {
        self.vsi_num_free(vsi_num)?;
        let mut d = Desc::new(Opcode::FreeVsi);
        d.set_u16(16, vsi_num | VSI_IS_VALID);
        d.set_u16(18, u16::from(keep_alloc));
        self.exec_vsi(d, None)
    }

    /// Get Package Info List 0x0C43 (ice_get_pkg_info): whether a DDP
    /// package is active. `buf` receives the list (4 + 48 × n bytes).
    pub fn get_pkg_info(&mut self, buf: &mut [u8]) -> Result<PkgInfo, CmdError> {
        if buf.len() < 4 {
            return Err(CmdError::Invalid("package-info buffer under 4 bytes"));
        }
        self.exec(&mut Desc::new(Opcode::GetPackageInfo), Some(buf))?;
        let count = le32(buf, 0);
        let mut active = None;
        for i in 0..count {
            let at = 4usize.saturating_add((i as usize).saturating_mul(PKG_INFO_ENTRY));
            match buf.get(at + PKG_INFO_ACTIVE) {
                Some(&a) if a != 0 => {
                    active = Some(i);
                    break;
                }
                Some(_) => {}
                None => break,
            }
        }
        Ok(PkgInfo { count, active })
    }

    /// Request Resource 0x0008 for the global-config lock, write access,
    /// 3000 ms (ice_acquire_global_cfg_lock → ice_aq_req_res): bytes 16–17
    /// resource id 4, 18–19 access 2, 20–23 timeout; the answer's status
    /// (bytes 28–29) decides: success → held, in progress → another
    /// function holds it (ice: EIO), done → already downloaded (ice:
    /// EALREADY), anything else → error.
    pub fn acquire_global_cfg_lock(&mut self) -> Result<LockOutcome, CmdError> {
        let mut d = Desc::new(Opcode::RequestResource);
        d.set_u16(16, RES_GLOBAL_CFG_LOCK);
        d.set_u16(18, RES_WRITE);
        d.set_u32(20, GLOBAL_CFG_LOCK_TIMEOUT_MS);
        let r = self.exec(&mut d, None);
        match (d.u16_at(28), r) {
            (RES_GLBL_DONE, _) => Ok(LockOutcome::AlreadyDone),
            (RES_GLBL_SUCCESS, Ok(())) => Ok(LockOutcome::Acquired),
            (RES_GLBL_IN_PROG, _) => {
                Err(CmdError::BadResponse("global-config lock held elsewhere"))
            }
            (_, Err(e)) => Err(e.into()),
            (_, Ok(())) => Err(CmdError::BadResponse("unknown global-config lock status")),
        }
    }

    /// Release Resource 0x0009 for the global-config lock (ice_aq_release_res).
    pub fn release_global_cfg_lock(&mut self) -> Result<(), CmdError> {
        let mut d = Desc::new(Opcode::ReleaseResource);
        d.set_u16(16, RES_GLOBAL_CFG_LOCK);
        self.exec(&mut d, None)?;
        Ok(())
    }

    /// Download Package 0x0C40 (RD): one buffer of at most 4 KiB; byte 16
    /// bit 0 marks the last one (ice_aq_download_pkg). On failure the
    /// answer carries error_offset and error_info (buffer bytes 0–7),
    /// returned with the error.
    pub fn download_pkg_buf(
        &mut self,
        chunk: &[u8],
        last: bool,
    ) -> Result<(), (CmdError, u32, u32)> {
        if chunk.is_empty() || chunk.len() > PKG_BUF_SIZE {
            return Err((CmdError::Invalid("package buffer empty or over 4 KiB"), 0, 0));
        }
        let mut buf = [0u8; PKG_BUF_SIZE];
        let b = &mut buf[..chunk.len()];
        b.copy_from_slice(chunk);
        let mut d = Desc::new(Opcode::DownloadPackage);
        d.set_u8(16, u8::from(last));
        match self.exec(&mut d, Some(b)) {
            Ok(()) => Ok(()),
            Err(e) => Err((e.into(), le32(b, 0), le32(b, 4))),
        }
    }

    /// Downloads a whole package under the global-config lock: lock, every
    /// 4 KiB chunk (the last one flagged), unlock — the unlock is sent even
    /// when a chunk fails (ice_ddp.c → ice_download_pkg within
    /// ice_acquire_global_cfg_lock / ice_release_global_cfg_lock). Returns
    /// `AlreadyDone` without downloading when another function did it.
    pub fn download_pkg(&mut self, pkg: &[u8]) -> Result<LockOutcome, CmdError> {
        if pkg.is_empty() {
            return Err(CmdError::Invalid("empty package"));
        }
        if self.acquire_global_cfg_lock()? == LockOutcome::AlreadyDone {
            return Ok(LockOutcome::AlreadyDone);
        }
        let n = pkg.len().div_ceil(PKG_BUF_SIZE);
        let mut result = Ok(LockOutcome::Acquired);
        for (i, chunk) in pkg.chunks(PKG_BUF_SIZE).enumerate() {
            if let Err((e, _, _)) = self.download_pkg_buf(chunk, i + 1 == n) {
                result = Err(e);
                break;
            }
        }
        let rel = self.release_global_cfg_lock();
        match (result, rel) {
            (Err(e), _) => Err(e),
            (Ok(_), Err(e)) => Err(e),
            (Ok(o), Ok(())) => Ok(o),
        }
    }
}

fn vsi_answer(d: &Desc) -> VsiAnswer {
    VsiAnswer { vsi_num: d.u16_at(16) & 0x3ff, used: d.u16_at(20), free: d.u16_at(22) }
}

/// E810 registers ice reads for Set MAC Config's pause values
/// (E800_PRTMAC_HSEC_CTL_TX_PAUSE_QUANTA(8) and
/// E800_PRTMAC_HSEC_CTL_TX_PAUSE_REFRESH_TIMER(8), as the conformance
/// vectors name them; the low 16 bits are used).
pub const PRTMAC_TX_PAUSE_QUANTA_8: usize = 0x001E_37E0;
/// See [`PRTMAC_TX_PAUSE_QUANTA_8`].
pub const PRTMAC_TX_PAUSE_REFRESH_TIMER_8: usize = 0x001E_3900;

/// (tx timer value, fc refresh threshold) for Set MAC Config on E810.
pub fn read_pause_cfg<B: Bar>(bar: &B) -> (u16, u16) {
    (
        bar.read32(PRTMAC_TX_PAUSE_QUANTA_8) as u16,
        bar.read32(PRTMAC_TX_PAUSE_REFRESH_TIMER_8) as u16,
    )
}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

impl Display for CmdError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            CmdError::Aq(e) => write!(f, "admin command failed: {e}"),
            CmdError::Invalid(why) => write!(f, "admin command refused: {why}"),
            CmdError::BadResponse(why) => write!(f, "firmware answer unusable: {why}"),
            CmdError::TcFull => f.write_str("scheduler TC node has no room for more children"),
            CmdError::InUse => f.write_str("a live RDMA device holds the VSI"),
            CmdError::Exists => f.write_str("the rule already forwards to this VSI"),
            CmdError::NotFound => f.write_str("firmware has no such switch rule or list"),
            CmdError::TableFull => f.write_str("the driver's filter table is full"),
            CmdError::ApiTooNew { major, minor } => {
                write!(f, "firmware AQ API {major}.{minor} is newer than 1.x")
            }
        }
    }
}

crate::error::wrapping!(CmdError source { Aq });

#[cfg(test)]
mod tests;
