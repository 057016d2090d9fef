//! What the LAN (ice) function provides to the RDMA engine.
//!
//! On Linux, `ice` brings the PF up (admin queue, VSI, Tx scheduler, MSI-X)
//! and hands irdma a peer-info structure (spec ice-lan-for-rdma §3: OOT
//! `struct iidc_core_dev_info`, in-tree `struct iidc_rdma_core_dev_info` +
//! `iidc_rdma_priv_dev_info`). This driver takes the same facts as one plain
//! value, [`LanInfo`], handed to probe. On real hardware a bare-metal LAN
//! layer fills it by doing the minimal sequence of spec ice-lan-for-rdma §5
//! — this crate's [`crate::ice`] module is one ([`crate::ice::E810::bring_up`]
//! builds the `LanInfo` from the firmware's answers and implements
//! [`LanOps`] on the admin queue); with the mock BAR the boot image or test
//! may also fill it with the model's values.
//!
//! The calls irdma makes back into the LAN side at run time (queue-set
//! registration, the VSI's RDMA filter, reset) are the [`LanOps`] trait.
//!
//! What is deliberately **not** in [`LanInfo`]: the BAR mapping and DMA (the
//! driver gets those through `irdma_hal`); the queue-set handles — irdma
//! creates them itself with CQP work-scheduler ops (one leaf per traffic
//! class in use, found through [`QosInfo::up2tc`]) and only then registers
//! each with the LAN side through [`LanOps::register_qset`], which returns the
//! scheduler TEID (spec ice-lan-for-rdma §2.13); and LAG/bonding fields
//! (ignored, §3.1).

use core::error::Error;
use core::fmt::{self, Display, Formatter};

/// The RDMA transport the function runs (iidc `rdma_protocol`: bit 0 iWARP,
/// bit 1 RoCEv2; spec ice-lan-for-rdma §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Protocol {
    /// RoCEv2 (what ice sets on E810).
    RoceV2,
    /// iWARP.
    Iwarp,
}

/// Maximum traffic classes (iidc IIDC_MAX_USER_PRIORITY / 8 TCs).
pub const MAX_TCS: usize = 8;
/// User priorities (802.1p), 8.
pub const MAX_USER_PRIORITIES: usize = 8;
/// DSCP code points mapped in DSCP PFC mode.
pub const DSCP_COUNT: usize = 64;

/// How frames are classified for PFC (iidc qos_info `pfc_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PfcMode {
    /// Priority from the VLAN PCP bits (default).
    Vlan,
    /// Priority from the IP DSCP field, through [`QosInfo::dscp_map`].
    Dscp,
}

/// One traffic class (iidc qos_info `tc_info[]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TcInfo {
    /// Relative bandwidth share in percent. Default: TC 0 = 100. With DCB,
    /// from the DCBX ETS table (spec ice-lan-for-rdma §3.1, ice_dcb_lib.c:
    /// ice_setup_dcb_qos_info). Becomes the WS node weight (spec control-path
    /// §4.3.20, WEIGHT ≥ 1).
    pub rel_bw: u8,
    /// Scheduling type of the TC (ETS / strict), from DCBX; irdma programs
    /// weighted round robin for its leaf (spec control-path §4.3.20 PRIOTYPE).
    pub prio_type: u8,
    /// The TC's context tag from ice (`tc_ctx`); bookkeeping only.
    pub tc_ctx: u64,
}

impl TcInfo {
    /// Single-TC default: all the bandwidth.
    pub const DEFAULT: TcInfo = TcInfo { rel_bw: 100, prio_type: 0, tc_ctx: 0 };
}

/// Quality-of-service setup (iidc `qos_info`; spec ice-lan-for-rdma §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct QosInfo {
    /// Number of traffic classes in use (1..=8). Default 1. With DCB, from
    /// the DCBX configuration.
    pub num_tc: u8,
    /// Traffic class of each user priority. Default all 0. With DCB,
    /// PRTDCB_TUP2TC (BAR0 0x001D_26C0, 3 bits per UP) (ice_idc.c:
    /// ice_cdev_init_rdma_qos_info). irdma creates one WS leaf (and asks the
    /// LAN side for one queue set) per TC in use; a QP uses the leaf of its
    /// UP's TC (spec control-path §4.3.20).
    pub up2tc: [u8; MAX_USER_PRIORITIES],
    /// Per-TC bandwidth and scheduling.
    pub tc_info: [TcInfo; MAX_TCS],
    /// Relative bandwidth of the whole VSI (WS VSI-node weight).
    pub vport_rel_bw: u8,
    /// Scheduling type of the VSI node.
    pub vport_prio_type: u8,
    /// VLAN or DSCP classification, from DCBX.
    pub pfc_mode: PfcMode,
    /// DSCP → user priority, used in DSCP mode (from DCBX).
    pub dscp_map: [u8; DSCP_COUNT],
}

impl QosInfo {
    /// What ice reports without DCB: one TC with all bandwidth, every UP on
    /// TC 0, VLAN PFC mode (spec ice-lan-for-rdma §3.1 "defaults").
    pub const SINGLE_TC: QosInfo = QosInfo {
        num_tc: 1,
        up2tc: [0; MAX_USER_PRIORITIES],
        tc_info: [TcInfo::DEFAULT; MAX_TCS],
        vport_rel_bw: 100,
        vport_prio_type: 0,
        pfc_mode: PfcMode::Vlan,
        dscp_map: [0; DSCP_COUNT],
    };

    /// The traffic class of user priority `up`, or `None` when `up` ≥ 8 or
    /// the table names a TC not in use.
    pub fn tc_of(&self, up: u8) -> Option<u8> {
        let tc = *self.up2tc.get(up as usize)?;
        if tc < self.num_tc { Some(tc) } else { None }
    }
}

/// MSI-X vectors the LAN side grants to RDMA (iidc `msix_entries[]`,
/// `msix_count`; spec ice-lan-for-rdma §3.1 and §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct MsixInfo {
    /// PF-relative MSI-X table index of the first RDMA vector (the value
    /// written to GLINT_CEQCTL / PFINT_AEQCTL MSIX_INDX). ice's own
    /// OICR/admin-queue vector is index 0, so RDMA vectors come after it.
    pub first: u16,
    /// Number of consecutive vectors. Linux irdma needs at least 2 (AEQ +
    /// CEQ 0); entry 0 carries the AEQ (irdma hw.c: irdma_save_msix_info).
    /// 0 in polled mode: this driver never enables the interrupt causes.
    pub count: u16,
}

/// Everything probe needs from the LAN function, mirroring Linux's iidc peer
/// info (spec ice-lan-for-rdma §3.1; FreeBSD's `struct ice_rdma_peer` has the
/// same minimum set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LanInfo {
    /// PCI function number, also the HMC function id (`pf_id`): ice reads
    /// PF_FUNC_RID\[2:0\] (BAR0 0x9E880) in ice_init_hw; irdma uses it as
    /// `hmc_fn_id` in CQP ops (spec ice-lan-for-rdma §3.1 and §5 step 3;
    /// control-path §3.1).
    pub pf_id: u8,
    /// Hardware VSI number of the PF's main VSI (`vport_id`): from the Add VSI
    /// (0x0210) response, bytes 16–17 & 0x3FF, or the VSI found through Get
    /// Switch Configuration (0x0200) (spec ice-lan-for-rdma §2.12, §3.1, §5
    /// step 16). irdma puts it in WQEs (VSIIDX) and the WS VSI node.
    pub vsi_num: u16,
    /// The port's MAC address, from Manage MAC Address Read (0x0107) (spec
    /// ice-lan-for-rdma §2.9, §5 step 14). irdma uses it as the source MAC
    /// of RoCE frames (local MAC table / QP context).
    pub mac: [u8; 6],
    /// Link MTU in bytes chosen by the LAN layer (≤ max frame size set with
    /// Set MAC Config 0x0603 minus headers; spec ice-lan-for-rdma §2.10,
    /// §3.1 `netdev->mtu`). The RoCE path MTU is derived from it.
    pub mtu: u32,
    /// Quality of service (iidc `qos_info`).
    pub qos: QosInfo,
    /// MSI-X vectors for the AEQ and CEQs.
    pub msix: MsixInfo,
    /// RoCEv2 or iWARP (iidc `rdma_protocol`; ice sets RoCEv2).
    pub protocol: Protocol,
    /// Hardware generation (iidc `rdma_caps.gen`): 2 for E810.
    pub rdma_gen: u8,
    /// The function is a PF (iidc `ftype` 0): privileged, programs its own
    /// SDs and interrupt registers. VFs are not supported by this driver.
    pub privileged: bool,
    /// Link is up (from Get Link Status 0x0607 / link events; spec
    /// ice-lan-for-rdma §2.16). Probe does not need it; QPs do not pass
    /// traffic without it.
    pub link_up: bool,
}

/// Why a [`LanInfo`] cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LanInfoError {
    /// `pf_id` beyond the 3-bit PF_FUNC_RID field (E810 has up to 8 PFs).
    BadPfId,
    /// `vsi_num` beyond the 10-bit hardware VSI number.
    BadVsi,
    /// `rdma_gen` is not 2 (this driver is GEN_2 only).
    UnsupportedGeneration,
    /// The function is not privileged (VF).
    NotPrivileged,
    /// `num_tc` is 0 or above 8, or a UP maps to a TC not in use.
    BadQos,
    /// The MAC is multicast or all zero.
    BadMac,
    /// MTU below the IPv4 minimum of 576 or above the 9728-byte frame limit.
    BadMtu,
    /// Interrupts were asked for (`ProbeOptions::interrupts`) but
    /// `msix.count` is 0 or `msix.first` is past GLINT_DYN_CTL(2045).
    NoVectors,
}

impl LanInfo {
    /// A RoCEv2 GEN_2 PF with one traffic class, no MSI-X vectors (polled
    /// mode) and link up — what a bare-metal LAN layer without DCB reports.
    pub const fn single_tc(pf_id: u8, vsi_num: u16, mac: [u8; 6], mtu: u32) -> LanInfo {
        LanInfo {
            pf_id,
            vsi_num,
            mac,
            mtu,
            qos: QosInfo::SINGLE_TC,
            msix: MsixInfo { first: 0, count: 0 },
            protocol: Protocol::RoceV2,
            rdma_gen: 2,
            privileged: true,
            link_up: true,
        }
    }

    /// Checks the fields against the limits the hardware fields have.
    pub fn validate(&self) -> Result<(), LanInfoError> {
        // PF_FUNC_RID[2:0] (spec ice-lan-for-rdma §5 step 3).
        if self.pf_id > 7 {
            return Err(LanInfoError::BadPfId);
        }
        // Add VSI response & 0x3FF (spec ice-lan-for-rdma §3.1).
        if self.vsi_num > 0x3ff {
            return Err(LanInfoError::BadVsi);
        }
        if self.rdma_gen != 2 {
            return Err(LanInfoError::UnsupportedGeneration);
        }
        if !self.privileged {
            return Err(LanInfoError::NotPrivileged);
        }
        let q = &self.qos;
        if q.num_tc == 0 || q.num_tc as usize > MAX_TCS || (0..8).any(|up| q.tc_of(up).is_none()) {
            return Err(LanInfoError::BadQos);
        }
        if self.mac == [0; 6] || self.mac[0] & 1 != 0 {
            return Err(LanInfoError::BadMac);
        }
        // 9728-byte max frame (spec ice-lan-for-rdma §5 step 15).
        if self.mtu < 576 || self.mtu > 9728 {
            return Err(LanInfoError::BadMtu);
        }
        Ok(())
    }
}

/// An IP address as the QP context carries it (the verbs' address vectors,
/// the device's neighbour table, the CM); re-exported as `verbs::IpAddr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum IpAddr {
    /// IPv4, network order bytes.
    V4([u8; 4]),
    /// IPv6, network order bytes.
    V6([u8; 16]),
}

/// Why a LAN-side operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LanError {
    /// The admin-queue command failed; the value is the AQ return code
    /// (spec ice-lan-for-rdma §1.4) or an embedder-defined code.
    Command(u16),
    /// The LAN side has no resources left (scheduler nodes, queue sets).
    NoResources,
    /// The LAN side is not ready (reset in progress, link down, …).
    NotReady,
    /// The queue set or filter belongs to a live RDMA device: only that
    /// device's own close may release it.
    InUse,
}

/// The operations irdma calls back into the LAN function (iidc `ops` /
/// the in-tree `ice_*` exports; spec ice-lan-for-rdma §3.2). On real hardware
/// the embedder implements them with admin-queue commands; with the mock
/// BAR, whatever the test harness provides.
pub trait LanOps {
    /// Registers a work-scheduler leaf's queue set with the LAN Tx scheduler
    /// (`alloc_res` / `ice_add_rdma_qset`): Add RDMA Queue Set (0x0C33) under
    /// the VSI's RDMA queue-group node, `tx_qset_id` = `qs_handle` (spec
    /// ice-lan-for-rdma §2.13). Returns the qset TEID, which is only needed
    /// to unregister (irdma main.c: irdma_lan_register_qset).
    fn register_qset(&mut self, qs_handle: u16, tc: u8, vsi_num: u16) -> Result<u32, LanError>;

    /// Undoes [`register_qset`](Self::register_qset) (`free_res` /
    /// `ice_del_rdma_qset`): Disable Tx Queues (0x0C31) with the RDMA-qset
    /// bit (spec ice-lan-for-rdma §2.13 "Removal").
    fn unregister_qset(&mut self, qs_handle: u16, teid: u32) -> Result<(), LanError>;

    /// Turns RDMA traffic to the VSI on or off (`update_vport_filter` /
    /// `ice_rdma_update_vsi_filter`): Update VSI (0x0211) with the PE filter
    /// bit (spec ice-lan-for-rdma §2.14).
    fn set_rdma_filter(&mut self, vsi_num: u16, enable: bool) -> Result<(), LanError>;

    /// Asks for a function reset after a fatal RDMA error (`request_reset`:
    /// PFGEN_CTRL.PFSWR, then the whole bring-up again; spec
    /// ice-lan-for-rdma §3.2).
    fn request_reset(&mut self);
}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

crate::error::phrases!(LanInfoError {
    LanInfoError::BadPfId => "PF id beyond the 3-bit PF_FUNC_RID field",
    LanInfoError::BadVsi => "VSI number beyond the 10-bit hardware field",
    LanInfoError::UnsupportedGeneration => "not an RDMA GEN_2 function",
    LanInfoError::NotPrivileged => "the function is not privileged (VF)",
    LanInfoError::BadQos => "traffic-class count or UP-to-TC map unusable",
    LanInfoError::BadMac => "MAC address is multicast or zero",
    LanInfoError::BadMtu => "MTU outside 576..=9728",
    LanInfoError::NoVectors => "interrupts asked for but no MSI-X vector given",
});

impl Display for LanError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            LanError::Command(code) => write!(f, "LAN admin-queue command failed with code {code}"),
            LanError::NoResources => f.write_str("LAN side has no resources left"),
            LanError::NotReady => f.write_str("LAN side not ready"),
            LanError::InUse => f.write_str("the RDMA device still uses it"),
        }
    }
}

impl Error for LanError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> LanInfo {
        LanInfo::single_tc(0, 6, [0x02, 0, 0, 0, 0, 1], 1500)
    }

    /// A LAN side that records calls, as a test harness would provide.
    struct Recorder {
        next_teid: u32,
        filter: bool,
        resets: u32,
    }

    impl LanOps for Recorder {
        fn register_qset(&mut self, qs_handle: u16, tc: u8, _vsi: u16) -> Result<u32, LanError> {
            if tc as usize >= MAX_TCS || qs_handle > 0x3ff {
                return Err(LanError::NoResources);
            }
            self.next_teid += 1;
            Ok(self.next_teid)
        }
        fn unregister_qset(&mut self, _qs_handle: u16, teid: u32) -> Result<(), LanError> {
            if teid == 0 || teid > self.next_teid { Err(LanError::Command(0x2)) } else { Ok(()) }
        }
        fn set_rdma_filter(&mut self, _vsi: u16, enable: bool) -> Result<(), LanError> {
            self.filter = enable;
            Ok(())
        }
        fn request_reset(&mut self) {
            self.resets += 1;
        }
    }

    #[test]
    fn lan_ops_object_safe_and_usable() {
        let mut r = Recorder { next_teid: 0, filter: false, resets: 0 };
        let ops: &mut dyn LanOps = &mut r;
        let teid = ops.register_qset(5, 0, 6).unwrap();
        assert_eq!(ops.register_qset(5, 8, 6), Err(LanError::NoResources));
        ops.set_rdma_filter(6, true).unwrap();
        ops.unregister_qset(5, teid).unwrap();
        assert_eq!(ops.unregister_qset(5, 99), Err(LanError::Command(2)));
        ops.request_reset();
        assert!(r.filter);
        assert_eq!((r.next_teid, r.resets), (1, 1));
    }

    #[test]
    fn default_is_valid() {
        assert_eq!(info().validate(), Ok(()));
        assert_eq!(info().qos.tc_of(7), Some(0));
        assert_eq!(info().qos.tc_of(8), None);
    }

    #[test]
    fn bad_fields_are_refused() {
        type Edit = fn(&mut LanInfo);
        let cases: [(Edit, LanInfoError); 8] = [
            (|i| i.pf_id = 8, LanInfoError::BadPfId),
            (|i| i.vsi_num = 0x400, LanInfoError::BadVsi),
            (|i| i.rdma_gen = 1, LanInfoError::UnsupportedGeneration),
            (|i| i.privileged = false, LanInfoError::NotPrivileged),
            (|i| i.qos.up2tc[3] = 1, LanInfoError::BadQos),
            (|i| i.qos.num_tc = 0, LanInfoError::BadQos),
            (|i| i.mac = [1, 0, 0, 0, 0, 0], LanInfoError::BadMac),
            (|i| i.mtu = 9729, LanInfoError::BadMtu),
        ];
        for (edit, want) in cases {
            let mut i = info();
            edit(&mut i);
            assert_eq!(i.validate(), Err(want));
        }
        let mut two = info();
        two.qos.num_tc = 2;
        two.qos.up2tc[3] = 1;
        assert_eq!(two.validate(), Ok(()));
        assert_eq!(two.qos.tc_of(3), Some(1));
    }
}
