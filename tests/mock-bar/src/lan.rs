//! The firmware side of the E810 LAN function: the admin queue (AQ) and the
//! commands a bare PF needs before RDMA can run, written from
//! `shared/spec/ice-lan-for-rdma.md` (cited per item as "spec §n"), never
//! from the driver.
//!
//! # Registers (spec §1.1)
//!
//! PF_FW_ATQBAL/BAH/LEN/H/T and PF_FW_ARQBAL/BAH/LEN/H/T. BAL/BAH read back
//! what was written (Linux verifies BAL, spec §1.6). LEN keeps LEN [9:0] and
//! ENABLE [31] as written; VFE/OVFL/CRIT [28..30] are firmware-owned (writes
//! to them are ignored; CRIT is set by [`crate::FaultPlan::aq_crit`]).
//! HEAD is firmware-written; a driver write sets it (Linux zeroes it before
//! enabling and on shutdown, spec §1.6). Writing ATQT makes the firmware
//! consume descriptors from ATQH up to the new tail before the write returns.
//!
//! # What the firmware checks (strict where the spec is)
//!
//! * A ring is used only while LEN has ENABLE and 1 ≤ LEN ≤ 1023 and the base
//!   is 64-byte aligned (BAL bits 5:0 are below the address, spec §1.1). A
//!   tail write on a ring that fails this, or a tail ≥ LEN, is ignored and
//!   counted in `Counters::aq_bad_ring` (the spec gives no error path for a
//!   malformed ring; the driver then times out, spec §1.4).
//! * Descriptors (spec §1.2): BUF with datalen 0, datalen without BUF, a
//!   buffer over 4096 bytes (ICE_AQ_MAX_BUF_LEN, spec §1.3), a command that
//!   needs a buffer sent without one, and a command firmware must read (the RD
//!   list of spec §1.2 plus spec §7 item 2) sent without RD all answer
//!   EINVAL (model choice: the spec names the flags, not the firmware's
//!   code). LB is **not** enforced: iPXE omits it for 4 KiB buffers and
//!   works (spec §1.2, §6 item 8). SI/EI are not checked (spec §6 item 8).
//! * A DMA fault reading or writing the indirect buffer answers BAD_ADDR
//!   (model choice) and the fault is counted in `dma_faults`.
//! * An opcode the model does not implement answers ESRCH ("bad opcode",
//!   spec §1.2).
//! * Every completion: flags |= DD | CMP (| ERR when retval ≠ 0), retval,
//!   datalen = response length where the command returns data, cookies and
//!   the buffer address unchanged, then ATQH moves past the slot.
//!
//! # ARQ (spec §1.5)
//!
//! Events go to the slot at ARQH if it is not the slot at ARQT (the driver
//! keeps one slot free: the ring holds LEN − 1 events) and the slot has BUF
//! and a datalen that fits the event; the event's descriptor keeps the
//! pre-posted flags and gets DD | CMP, the event opcode and its datalen, and
//! ARQH advances. With no free slot the event is lost and counted
//! (`arq_dropped`) and ARQLEN.OVFL [29] is set (model reading of the OVFL
//! bit's name; the spec does not say when it is set).
//!
//! # Commands
//!
//! See [`opc`]. Answers come from [`LanConfig`]; model numbering (TEIDs,
//! VSI numbers, rule indices) counts from its bases. Model choices where the
//! spec is silent are marked "model choice" at the command.
//!
//! # Resets and modes (spec §1.7)
//!
//! PFGEN_CTRL.PFSWR starts a PF reset ([`crate::Device::pf_reset`]): the
//! whole function goes back to its reset state except the DDP package and
//! the cleared PXE mode (spec §2.5, §2.8), and PFSWR reads set for
//! [`LanConfig::reset_reads`] LAN register reads. A global reset
//! ([`crate::Device::global_reset`], or [`crate::FaultPlan::aq_reset_at`])
//! also restores PXE mode and drops a downloaded package; GLGEN_RSTAT
//! DEVSTATE reads 1, GLNVM_ULD reads 0 and GL_MNG_FWSM.FW_LOADING is set for
//! the same number of reads. Otherwise GLNVM_ULD has all done bits, plus
//! PE_DONE when the function has the RDMA capability. While a reset is in
//! progress ATQT writes are ignored. [`LanConfig::recovery_mode`] sets
//! GL_MNG_FWSM bit 1; the firmware then answers only Get Version, Driver
//! Version and Queue Shutdown (others: EMODE, model choice).
//!
//! # Cold PF ([`LanConfig::cold`])
//!
//! Off by default (the LAN side counts as done by someone else). When on,
//! an SQ WQE of a QP whose qs_handle has no RDMA qset leaf (0x0C33) is not
//! scheduled: it waits, counted in `Counters::lan_gated_wqes`, and goes out
//! on a later doorbell once the qset exists; and a RoCE frame (request or
//! response) is taken in only if a switch rule delivers its destination MAC
//! to a VSI with the PE filter on (spec §2.14, §2.15), else it is dropped
//! and counted in `Counters::pe_filter_drops` (the sender then sees its
//! usual "no answer" outcome). The spec gives no counter or AE for either:
//! both are model choices.
//!
//! # Not modelled (spec silent or not needed)
//!
//! The mailbox and sideband queues (their registers are plain storage),
//! PHY caps / config (0x0600 / 0x0601), LAN Tx/Rx queues (0x0C30; 0x0C31 on
//! a LAN queue is ENOENT), LLDP and DCB (one TC unless
//! [`LanConfig::num_tc`]; 0x0A05 is accepted and does nothing), large
//! actions and prune lists, interrupts (PFINT_*; everything is polled), the
//! EBUSY retry lists (no command answers EBUSY by itself except a held
//! global-config lock; use [`crate::FaultPlan::aq_fail_opcode`]), and
//! ARQ events other than link changes.
//!
//! Over the shared-memory (QEMU) transport, [`crate::shm::ShmHost`] copies
//! the AQ and PFGEN_CTRL registers the guest changed into the device each
//! round (bases and lengths first, heads, then tails) and writes back the
//! ones the firmware changed (heads, LEN firmware bits, reset status); a
//! reset's busy window counts host rounds there.
//!
//! # Synthetic DDP package (spec §2.8; no real package is ever used)
//!
//! The chunks of 0x0C40 are concatenated; on the LAST_BUF chunk the whole
//! must be: bytes 0..8 = `b"MOCKDDP\0"`, 8..12 = version (major, minor,
//! update, draft), 12..40 = name (NUL padded), 40..44 = total length (LE,
//! including this header), 44..48 = track id; then payload. The total length
//! must match what was received. Anything else fails with EINVAL and
//! error_offset / error_info in the response buffer (offset of the bad
//! field, info 1 = magic, 2 = length). Use [`synthetic_package`] to make one.

use std::collections::BTreeMap;

use crate::mem::Memory;

/// BAR0 offsets (spec §1.1, §1.7).
#[allow(missing_docs)]
pub mod reg {
    pub const ATQBAL: u32 = 0x0008_0000;
    pub const ATQBAH: u32 = 0x0008_0100;
    pub const ATQLEN: u32 = 0x0008_0200;
    pub const ATQH: u32 = 0x0008_0300;
    pub const ATQT: u32 = 0x0008_0400;
    pub const ARQBAL: u32 = 0x0008_0080;
    pub const ARQBAH: u32 = 0x0008_0180;
    pub const ARQLEN: u32 = 0x0008_0280;
    pub const ARQH: u32 = 0x0008_0380;
    pub const ARQT: u32 = 0x0008_0480;
    /// LEN field bits.
    pub const LEN_MASK: u32 = 0x3FF;
    pub const LEN_VFE: u32 = 1 << 28;
    pub const LEN_OVFL: u32 = 1 << 29;
    pub const LEN_CRIT: u32 = 1 << 30;
    pub const LEN_ENABLE: u32 = 1 << 31;
    /// PFGEN_CTRL: PFSWR [0] (spec §1.7 step 2).
    pub const PFGEN_CTRL: u32 = 0x0009_1000;
    /// GLGEN_RSTAT: DEVSTATE [1:0] (spec §1.7).
    pub const GLGEN_RSTAT: u32 = 0x000B_8188;
    /// GLGEN_RSTCTL: GRSTDEL [5:0] (spec §1.7 step 3).
    pub const GLGEN_RSTCTL: u32 = 0x000B_8180;
    /// GLNVM_ULD reset-done bits (spec §1.7 step 3).
    pub const GLNVM_ULD: u32 = 0x000B_6008;
    /// GL_MNG_FWSM: mode [2:0] (debug, recovery, rollback), FW_LOADING [30].
    pub const GL_MNG_FWSM: u32 = 0x000B_6134;
    /// PFGEN_PORTNUM: port [2:0] (spec §1.7 item 7).
    pub const PFGEN_PORTNUM: u32 = 0x001D_2400;
    /// GLGEN_STAT: read by Linux to flush (spec §1.4).
    pub const GLGEN_STAT: u32 = 0x000B_612C;
    /// GLNVM_ULD bits: PCIER_DONE 0, PCIER_DONE_1 1, CORER_DONE 3,
    /// GLOBR_DONE 4, POR_DONE 5, POR_DONE_1 8, PCIER_DONE_2 9.
    pub const ULD_DONE: u32 = 1 | 1 << 1 | 1 << 3 | 1 << 4 | 1 << 5 | 1 << 8 | 1 << 9;
    /// GLNVM_ULD PE_DONE [10].
    pub const ULD_PE_DONE: u32 = 1 << 10;
    /// GL_MNG_FWSM recovery-mode bit [1] and FW_LOADING [30].
    pub const FWSM_RECOVERY: u32 = 1 << 1;
    pub const FWSM_FW_LOADING: u32 = 1 << 30;
}

/// Descriptor flags (spec §1.2, ICE_AQ_FLAG_*).
#[allow(missing_docs)]
pub mod flag {
    pub const DD: u16 = 0x0001;
    pub const CMP: u16 = 0x0002;
    pub const ERR: u16 = 0x0004;
    pub const VFE: u16 = 0x0008;
    pub const LB: u16 = 0x0200;
    pub const RD: u16 = 0x0400;
    pub const VFC: u16 = 0x0800;
    pub const BUF: u16 = 0x1000;
    pub const SI: u16 = 0x2000;
    pub const EI: u16 = 0x4000;
    pub const FE: u16 = 0x8000;
}

/// Firmware return codes (spec §1.2, enum ice_aq_err).
#[allow(missing_docs)]
pub mod rc {
    pub const OK: u16 = 0;
    pub const EPERM: u16 = 1;
    pub const ENOENT: u16 = 2;
    pub const ESRCH: u16 = 3;
    pub const EIO: u16 = 5;
    pub const E2BIG: u16 = 7;
    pub const EAGAIN: u16 = 8;
    pub const ENOMEM: u16 = 9;
    pub const EACCES: u16 = 10;
    pub const EBUSY: u16 = 12;
    pub const EEXIST: u16 = 13;
    pub const EINVAL: u16 = 14;
    pub const ENOSPC: u16 = 16;
    pub const ENOSYS: u16 = 17;
    pub const BAD_ADDR: u16 = 20;
    pub const EMODE: u16 = 21;
}

/// Opcodes the model answers (spec §2).
#[allow(missing_docs)]
pub mod opc {
    pub const GET_VER: u16 = 0x0001;
    pub const DRIVER_VER: u16 = 0x0002;
    pub const Q_SHUTDOWN: u16 = 0x0003;
    pub const REQ_RES: u16 = 0x0008;
    pub const REL_RES: u16 = 0x0009;
    pub const LIST_FUNC_CAPS: u16 = 0x000A;
    pub const LIST_DEV_CAPS: u16 = 0x000B;
    pub const MANAGE_MAC_READ: u16 = 0x0107;
    pub const CLEAR_PXE: u16 = 0x0110;
    pub const GET_SW_CFG: u16 = 0x0200;
    pub const SET_PORT_PARAMS: u16 = 0x0203;
    pub const ALLOC_RES: u16 = 0x0208;
    pub const FREE_RES: u16 = 0x0209;
    pub const ADD_SW_RULES: u16 = 0x02A0;
    pub const UPDATE_SW_RULES: u16 = 0x02A1;
    pub const REMOVE_SW_RULES: u16 = 0x02A2;
    pub const CLEAR_PF_CFG: u16 = 0x02A4;
    pub const ADD_VSI: u16 = 0x0210;
    pub const UPDATE_VSI: u16 = 0x0211;
    pub const FREE_VSI: u16 = 0x0213;
    pub const GET_DFLT_TOPO: u16 = 0x0400;
    pub const ADD_SCHED_ELEMS: u16 = 0x0401;
    pub const QUERY_SCHED_ELEMS: u16 = 0x0404;
    pub const DELETE_SCHED_ELEMS: u16 = 0x040F;
    pub const QUERY_SCHED_RES: u16 = 0x0412;
    pub const SET_MAC_CFG: u16 = 0x0603;
    pub const RESTART_AN: u16 = 0x0605;
    pub const GET_LINK_STATUS: u16 = 0x0607;
    pub const SET_EVENT_MASK: u16 = 0x0613;
    pub const STOP_LLDP: u16 = 0x0A05;
    pub const DIS_TXQS: u16 = 0x0C31;
    pub const ADD_RDMA_QSET: u16 = 0x0C33;
    pub const DOWNLOAD_PKG: u16 = 0x0C40;
    pub const GET_PKG_INFO_LIST: u16 = 0x0C43;
}

/// Largest indirect buffer (ICE_AQ_MAX_BUF_LEN, spec §1.3).
pub const MAX_BUF: usize = 4096;

/// Magic of the model's synthetic DDP package (see the module docs).
pub const PKG_MAGIC: [u8; 8] = *b"MOCKDDP\0";
/// Header length of the synthetic package.
pub const PKG_HDR_LEN: usize = 48;

/// Builds a synthetic package (module docs) with `payload` after the header.
pub fn synthetic_package(ver: [u8; 4], name: &str, track_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(PKG_HDR_LEN + payload.len());
    p.extend_from_slice(&PKG_MAGIC);
    p.extend_from_slice(&ver);
    let mut n = [0u8; 28];
    for (d, s) in n.iter_mut().zip(name.bytes()) {
        *d = s;
    }
    p.extend_from_slice(&n);
    p.extend_from_slice(&((PKG_HDR_LEN + payload.len()) as u32).to_le_bytes());
    p.extend_from_slice(&track_id.to_le_bytes());
    p.extend_from_slice(payload);
    p
}

/// A DDP package as 0x0C43 reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Package {
    /// major, minor, update, draft.
    pub ver: [u8; 4],
    /// Segment name (28 bytes, NUL padded).
    pub name: [u8; 28],
    /// Track id.
    pub track_id: u32,
    /// Loaded from NVM at boot (not downloaded).
    pub in_nvm: bool,
}

impl Package {
    /// The package a default model has active (as if loaded from NVM).
    pub fn nvm_default() -> Self {
        let mut name = [0u8; 28];
        name[..19].copy_from_slice(b"ICE OS Default Pkg\0");
        Self { ver: [1, 3, 36, 0], name, track_id: 0xC000_0001, in_nvm: true }
    }
}

/// Static configuration of the LAN firmware.
#[derive(Clone, Debug)]
pub struct LanConfig {
    /// Get Version bytes 16–31 (spec §2.2): ROM version, FW build, FW
    /// branch/major/minor/patch, API branch/major/minor/patch.
    pub rom_ver: u32,
    /// FW build.
    pub fw_build: u32,
    /// FW branch, major, minor, patch.
    pub fw_ver: [u8; 4],
    /// API branch, major, minor, patch (E810 expects 1.5, spec §1.7).
    pub api_ver: [u8; 4],
    /// LAN MAC address (0x0107).
    pub mac: [u8; 6],
    /// Logical port (0x0200 port element, 0x0400/0x0607 request byte 16).
    pub lport: u8,
    /// Switch id (0x0200).
    pub sw_id: u16,
    /// Port number in PFGEN_PORTNUM.
    pub port: u8,
    /// Device caps VALID_FUNCTIONS bitmap (cap 0x0005).
    pub valid_functions: u32,
    /// RDMA capability (cap 0x0051 number 1).
    pub rdma: bool,
    /// MSI-X vectors of the function and the first one's absolute id
    /// (cap 0x0043 number / phys_id).
    pub msix: (u32, u32),
    /// Rx and Tx queues and the first one (caps 0x0041 / 0x0042).
    pub queues: (u32, u32),
    /// Max MTU (cap 0x0047).
    pub max_mtu: u32,
    /// VSIs of the device pool (cap 0x0017 in device caps; Add VSI
    /// used/free counts).
    pub vsi_pool: u16,
    /// Scheduler layers (9 by default; 5 for the compatibility topology,
    /// spec §2.11, §6 item 3). Between 3 and 9.
    pub sched_layers: u8,
    /// Max siblings per node of each layer (0x0412 max_sibl_grp_sz);
    /// entry i limits the children of a layer-(i−1) node.
    pub max_sibl: [u16; 9],
    /// Queue sets the scheduler reports (0x0412 rdma_qsets).
    pub rdma_qsets: u16,
    /// TCs in the default topology (branches of 0x0400), 1..=8.
    pub num_tc: u8,
    /// First TEID the firmware hands out.
    pub teid_base: u32,
    /// First VSI number handed out by Add VSI.
    pub vsi_base: u16,
    /// VSIs of the pool already in use by other functions (Add/Update/Free
    /// VSI report used = this + this PF's, free = pool − used).
    pub vsi_used: u16,
    /// A VSI the firmware (or a previous driver) left behind at power-up,
    /// as iPXE finds and reuses through 0x0200 (spec §2.7, §6 item 5): its
    /// number; a PF VSI on the port's switch with LAN_ENA. Clear PF config
    /// removes it. None by default.
    pub firmware_vsi: Option<u16>,
    /// An explicit default topology (0x0400) instead of the built one:
    /// elements (parent TEID, TEID, 16 data bytes) parents first; a parent
    /// 0 makes a root. TEIDs handed out later still start at `teid_base`.
    pub default_topology: Option<Vec<(u32, u32, [u8; 16])>>,
    /// First switch-rule index.
    pub rule_base: u16,
    /// First switch resource id (0x0208: VSI lists and other resources).
    pub res_base: u16,
    /// Largest max-frame-size Set MAC config accepts (spec §2.10: 9728).
    pub max_frame: u16,
    /// Media present: Restart AN with ENABLE brings the link up.
    pub media: bool,
    /// Link speed bit reported when up (bit 10 = 100G; spec §2.16 gives bit
    /// 5 = 10G and "higher bits = faster").
    pub speed_bit: u8,
    /// The PF starts in PXE mode (the first Clear PXE succeeds; after it,
    /// Clear PXE answers EEXIST, spec §2.5).
    pub pxe_mode: bool,
    /// A package is active at power-up (from NVM).
    pub package: Option<Package>,
    /// Firmware recovery mode (GL_MNG_FWSM bit 1, spec §1.7 item 6): only
    /// Get Version, Driver Version and Queue Shutdown are answered; every
    /// other command gets EMODE (model choice).
    pub recovery_mode: bool,
    /// LAN register reads during which a reset is still in progress (PFSWR
    /// set, GLGEN_RSTAT.DEVSTATE ≠ 0, GLNVM_ULD bits clear; commands are
    /// not processed).
    pub reset_reads: u32,
    /// Cold PF: the RDMA engine refuses traffic until the LAN side made it
    /// ready (a qset registered for the QP's qs_handle to transmit; the PE
    /// filter on a VSI to receive). Off by default: the LAN side is assumed
    /// done by someone else, as before this module existed.
    pub cold: bool,
}

impl Default for LanConfig {
    fn default() -> Self {
        Self {
            rom_ver: 0x0e,
            fw_build: 0x000c_1f00,
            fw_ver: [0, 4, 50, 0],
            api_ver: [0, 1, 5, 0],
            mac: [0x02, 0x00, 0x5e, 0x10, 0x00, 0x01],
            lport: 0,
            sw_id: 0x20,
            port: 0,
            valid_functions: 0x1,
            rdma: true,
            msix: (64, 0),
            queues: (64, 0),
            max_mtu: 9702,
            vsi_pool: 768,
            sched_layers: 9,
            max_sibl: [1, 8, 8, 8, 8, 8, 8, 8, 8],
            rdma_qsets: 256,
            num_tc: 1,
            teid_base: 0x100,
            vsi_base: 6,
            vsi_used: 1,
            firmware_vsi: None,
            default_topology: None,
            rule_base: 64,
            res_base: 16,
            max_frame: 9728,
            media: true,
            speed_bit: 10,
            pxe_mode: true,
            package: Some(Package::nvm_default()),
            recovery_mode: false,
            reset_reads: 2,
            cold: false,
        }
    }
}

/// One AQ ring's registers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ring {
    /// BAL as written.
    pub bal: u32,
    /// BAH as written.
    pub bah: u32,
    /// LEN as written (LEN, ENABLE) plus the firmware bits.
    pub len: u32,
    /// HEAD.
    pub head: u32,
    /// TAIL.
    pub tail: u32,
}

impl Ring {
    fn base(&self) -> u64 {
        (self.bah as u64) << 32 | self.bal as u64
    }
    /// Entries, when the ring is usable (enabled, 1..=1023 entries, 64-byte
    /// aligned base).
    pub fn usable(&self) -> Option<u32> {
        let n = self.len & reg::LEN_MASK;
        (self.len & reg::LEN_ENABLE != 0 && n > 0 && self.bal & 0x3F == 0).then_some(n)
    }
}

/// A VSI of the VSI table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vsi {
    /// Hardware VSI number.
    pub num: u16,
    /// Type (vsi_flags [1:0]: 0 VF, 1 VMDq2, 2 PF, 3 EMP_MNG).
    pub vsi_type: u8,
    /// The 128-byte context as the firmware keeps it.
    pub ctx: [u8; 128],
}

impl Vsi {
    /// q_opt_flags bit 0 PE_FLTR_EN (spec §2.12, §2.14).
    pub fn pe_filter(&self) -> bool {
        self.ctx[80] & 1 != 0
    }
}

/// A scheduler node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedNode {
    /// Node TEID.
    pub teid: u32,
    /// Parent TEID (0 for the root).
    pub parent: u32,
    /// Layer (root 0).
    pub layer: u8,
    /// The 16 element-data bytes (type at 0).
    pub data: [u8; 16],
    /// For an RDMA qset leaf: its tx_qset_id (the qs_handle, spec §2.13).
    pub qset: Option<u16>,
}

/// A switch lookup rule (spec §2.15).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Rule index the firmware returned.
    pub index: u16,
    /// 0 = LKUP_RX, 1 = LKUP_TX.
    pub rule_type: u16,
    /// Recipe id.
    pub recipe: u16,
    /// src (port for RX, VSI for TX).
    pub src: u16,
    /// Action word.
    pub act: u32,
    /// Destination MAC of the dummy header.
    pub dst_mac: [u8; 6],
}

impl Rule {
    /// The VSI a forward-to-VSI action names (VALID bit 17, type [1:0] = 0,
    /// VSI [13:4]; spec §2.15).
    pub fn fwd_vsi(&self) -> Option<u16> {
        let fwd = self.act & (1 << 17) != 0 && self.act & 3 == 0 && self.act & (1 << 14) == 0;
        fwd.then_some((self.act >> 4 & 0x3FF) as u16)
    }
    /// The VSI list a forward-to-list action names (VSI_LIST bit 14,
    /// ice_adminq_cmd.h: ICE_SINGLE_ACT_VSI_LIST; list id [13:4]).
    pub fn fwd_list(&self) -> Option<u16> {
        let fwd = self.act & (1 << 17) != 0 && self.act & 3 == 0 && self.act & (1 << 14) != 0;
        fwd.then_some((self.act >> 4 & 0x3FF) as u16)
    }
}

/// Link state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Link {
    /// Link up.
    pub up: bool,
    /// Link status events enabled on the ARQ (LSE, 0x0607).
    pub lse: bool,
    /// Event mask (0x0613; a set bit suppresses the event).
    pub event_mask: u16,
    /// Max frame size (0x0603).
    pub max_frame: u16,
}

/// State a PF reset keeps: the DDP package (spec §2.8, PFR does not
/// re-download) and PXE mode (spec §2.5, only non-PFR resets restore it).
#[derive(Clone, Debug)]
pub(crate) struct Persistent {
    pub(crate) package: Option<Package>,
    pub(crate) pxe_mode: bool,
}

/// The LAN firmware of one PF.
#[derive(Clone, Debug)]
pub struct Firmware {
    cfg: LanConfig,
    /// Command queue registers.
    pub atq: Ring,
    /// Event queue registers.
    pub arq: Ring,
    pxe_mode: bool,
    package: Option<Package>,
    /// Global-config lock held (0x0008 resource 4).
    lock_held: bool,
    pkg_buf: Vec<u8>,
    /// Driver Version 0x0002: the four version bytes and the name.
    driver_version: Option<([u8; 4], Vec<u8>)>,
    /// Set Port Parameters 0x0203: descriptor bytes 16–22 as sent.
    port_params: Option<[u8; 7]>,
    vsis: BTreeMap<u16, Vsi>,
    next_vsi: u16,
    nodes: BTreeMap<u32, SchedNode>,
    next_teid: u32,
    rules: BTreeMap<u16, Rule>,
    next_rule: u16,
    /// Switch resources by id: (resource type, VSI members for VSI lists).
    resources: BTreeMap<u16, (u16, Vec<u16>)>,
    next_res: u16,
    link: Link,
    /// Register reads left until the current reset is done.
    resetting: u32,
    /// What reset is in progress: true = PF reset (PFSWR reads set).
    pf_reset: bool,
    /// Commands completed since power-up.
    pub commands: u64,
    /// The firmware stopped answering (FaultPlan::aq_hang_at): tail writes
    /// are ignored until a reset.
    hung: bool,
    /// A link change waiting to be posted to the ARQ.
    pending_link_event: bool,
    /// A reset the firmware asks the device to perform (Some(true) = PF
    /// reset through PFSWR, Some(false) = a global reset).
    pub(crate) reset_request: Option<bool>,
    /// Completions not yet recorded in the device trace (slot, opcode,
    /// retval).
    pub(crate) completed: Vec<(u32, u16, u16)>,
    /// Set by a command that fails but still returns this many buffer bytes
    /// (Download Package's error_offset / error_info, spec §2.8).
    err_out: Option<usize>,
    /// DMA faults not yet recorded in the device trace.
    pub(crate) faulted: Vec<crate::mem::Fault>,
}

/// What a command returns: the response length written back into the
/// buffer and datalen (None = buffer and datalen untouched).
type CmdResult = Result<Option<usize>, u16>;

/// A checked switch rule of an ADD/UPDATE_SW_RULES command, applied once
/// all rules of the command passed their checks.
enum RuleOp {
    /// A lookup rule at this offset of the buffer.
    Lookup(usize, Rule),
    /// A VSI list, its VSIs, and whether they are set (or cleared).
    List(u16, Vec<u16>, bool),
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    b.get(o..o + 2).map_or(0, |s| u16::from_le_bytes([s[0], s[1]]))
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    b.get(o..o + 4).map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}
fn put16(b: &mut [u8], o: usize, v: u16) {
    if let Some(s) = b.get_mut(o..o + 2) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}
fn put32(b: &mut [u8], o: usize, v: u32) {
    if let Some(s) = b.get_mut(o..o + 4) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Opcodes whose buffer the firmware reads, so RD is required (spec §1.2 and
/// §7 item 2).
fn needs_rd(op: u16) -> bool {
    matches!(
        op,
        opc::DRIVER_VER
            | opc::ADD_VSI
            | opc::UPDATE_VSI
            | opc::ADD_SCHED_ELEMS
            | opc::QUERY_SCHED_ELEMS
            | opc::DELETE_SCHED_ELEMS
            | opc::ADD_RDMA_QSET
            | opc::DOWNLOAD_PKG
            | opc::DIS_TXQS
            | opc::ADD_SW_RULES
            | opc::UPDATE_SW_RULES
            | opc::REMOVE_SW_RULES
            | opc::ALLOC_RES
            | opc::FREE_RES
    )
}

/// Opcodes that need an indirect buffer.
fn needs_buf(op: u16) -> bool {
    needs_rd(op)
        || matches!(
            op,
            opc::LIST_FUNC_CAPS
                | opc::LIST_DEV_CAPS
                | opc::MANAGE_MAC_READ
                | opc::GET_SW_CFG
                | opc::GET_DFLT_TOPO
                | opc::QUERY_SCHED_RES
                | opc::GET_LINK_STATUS
                | opc::GET_PKG_INFO_LIST
        )
}

/// Element types (spec §2.11).
pub mod elem {
    /// Root port.
    pub const ROOT: u8 = 1;
    /// TC.
    pub const TC: u8 = 2;
    /// Generic SE.
    pub const GENERIC: u8 = 3;
    /// Entry point.
    pub const ENTRY_POINT: u8 = 4;
    /// Leaf.
    pub const LEAF: u8 = 5;
    /// Padded SE.
    pub const PADDED: u8 = 6;
}

fn dflt_data(t: u8) -> [u8; 16] {
    // type, valid sections (root: generic only), generic, flags, CIR
    // profile 0 / weight 4, EIR profile 0 / weight 4 (as ice's default
    // elements, spec §2.11)
    let mut d = [0u8; 16];
    d[0] = t;
    d[1] = if t == elem::ROOT { 0x01 } else { 0x0F };
    d[6] = 4;
    d[10] = 4;
    d
}

/// One 32-byte capability element (spec §2.6).
fn cap(out: &mut Vec<u8>, id: u16, number: u32, logical: u32, phys: u32) {
    let mut e = [0u8; 32];
    put16(&mut e, 0, id);
    e[2] = 1; // major version
    put32(&mut e, 4, number);
    put32(&mut e, 8, logical);
    put32(&mut e, 12, phys);
    out.extend_from_slice(&e);
}

impl Firmware {
    /// A firmware in its power-up state.
    pub fn new(cfg: LanConfig) -> Self {
        let persistent = Persistent { package: cfg.package.clone(), pxe_mode: cfg.pxe_mode };
        Self::with_persistent(cfg, persistent)
    }

    pub(crate) fn with_persistent(cfg: LanConfig, p: Persistent) -> Self {
        let layers = cfg.sched_layers.clamp(3, 9);
        let mut fw = Self {
            atq: Ring::default(),
            arq: Ring::default(),
            pxe_mode: p.pxe_mode,
            package: p.package,
            lock_held: false,
            pkg_buf: Vec::new(),
            driver_version: None,
            port_params: None,
            vsis: BTreeMap::new(),
            next_vsi: cfg.vsi_base,
            nodes: BTreeMap::new(),
            next_teid: cfg.teid_base,
            rules: BTreeMap::new(),
            next_rule: cfg.rule_base,
            resources: BTreeMap::new(),
            next_res: cfg.res_base,
            link: Link { max_frame: cfg.max_frame, ..Link::default() },
            resetting: 0,
            pf_reset: false,
            commands: 0,
            hung: false,
            pending_link_event: false,
            reset_request: None,
            completed: Vec::new(),
            err_out: None,
            faulted: Vec::new(),
            cfg,
        };
        fw.cfg.sched_layers = layers;
        fw.build_default_tree();
        if let Some(n) = fw.cfg.firmware_vsi {
            let n = n & 0x3FF;
            let mut ctx = [0u8; 128];
            ctx[2] = fw.cfg.sw_id as u8; // switch id
            ctx[4] = 1 << 4; // sw_flags2 LAN_ENA
            fw.vsis.insert(n, Vsi { num: n, vsi_type: 2, ctx });
        }
        fw
    }

    pub(crate) fn persistent(&self) -> Persistent {
        Persistent { package: self.package.clone(), pxe_mode: self.pxe_mode }
    }

    /// Configuration.
    pub fn config(&self) -> &LanConfig {
        &self.cfg
    }
    /// The VSI table.
    pub fn vsis(&self) -> &BTreeMap<u16, Vsi> {
        &self.vsis
    }
    /// The scheduler tree by TEID.
    pub fn sched_nodes(&self) -> &BTreeMap<u32, SchedNode> {
        &self.nodes
    }
    /// Switch rules by index.
    pub fn rules(&self) -> &BTreeMap<u16, Rule> {
        &self.rules
    }
    /// Link state.
    pub fn link(&self) -> Link {
        self.link
    }
    /// The active DDP package.
    pub fn package(&self) -> Option<&Package> {
        self.package.as_ref()
    }
    /// Still in PXE mode.
    pub fn pxe_mode(&self) -> bool {
        self.pxe_mode
    }
    /// What Driver Version (0x0002) reported: version bytes and name.
    pub fn driver_version(&self) -> Option<(&[u8; 4], &[u8])> {
        self.driver_version.as_ref().map(|(v, n)| (v, n.as_slice()))
    }
    /// Set Port Parameters (0x0203) descriptor bytes 16–22 as last sent.
    pub fn port_params(&self) -> Option<&[u8; 7]> {
        self.port_params.as_ref()
    }
    /// The global-config lock is held.
    pub fn lock_held(&self) -> bool {
        self.lock_held
    }
    /// The qset leaf registered for `qs_handle`, if any.
    pub fn qset(&self, qs_handle: u16) -> Option<&SchedNode> {
        self.nodes.values().find(|n| n.qset == Some(qs_handle))
    }
    /// Some VSI has the PE filter on.
    pub fn pe_filter_on(&self) -> bool {
        self.vsis.values().any(Vsi::pe_filter)
    }
    /// The members of VSI list `id` (0x0208 resource, set by a VSI_LIST_SET
    /// rule).
    pub fn vsi_list(&self, id: u16) -> Option<&[u16]> {
        self.resources.get(&id).map(|(_, v)| v.as_slice())
    }
    /// The VSIs a frame to `dst` reaches through the switch rules.
    pub fn vsis_for(&self, dst: [u8; 6]) -> Vec<u16> {
        let mut out = Vec::new();
        for r in self.rules.values().filter(|r| r.dst_mac == dst) {
            if let Some(v) = r.fwd_vsi() {
                out.push(v);
            }
            if let Some(l) = r.fwd_list() {
                out.extend(self.vsi_list(l).unwrap_or(&[]));
            }
        }
        out
    }
    /// A RoCE frame to `dst` reaches the RDMA engine: a switch rule
    /// delivers it to a VSI with the PE filter on (spec §2.14, §2.15).
    pub fn delivers_to_pe(&self, dst: [u8; 6]) -> bool {
        self.vsis_for(dst).iter().any(|v| self.vsis.get(v).is_some_and(Vsi::pe_filter))
    }
    /// A reset is still in progress.
    pub fn resetting(&self) -> bool {
        self.resetting > 0
    }

    fn layers(&self) -> u8 {
        self.cfg.sched_layers
    }

    fn alloc_teid(&mut self) -> u32 {
        let t = self.next_teid;
        self.next_teid = self.next_teid.wrapping_add(1);
        t
    }

    /// The firmware's default tree (spec §2.11, 0x0400): one root; per TC a
    /// TC node; under TC 0 an entry point (layer 2), generic SEs down to the
    /// queue-group layer N − 2 and a default leaf at N − 1.
    fn build_default_tree(&mut self) {
        self.nodes.clear();
        if let Some(t) = self.cfg.default_topology.clone() {
            for (parent, teid, data) in t {
                let layer = match self.nodes.get(&parent) {
                    Some(p) => p.layer.saturating_add(1),
                    None => 0,
                };
                self.nodes.entry(teid).or_insert(SchedNode {
                    teid,
                    parent,
                    layer,
                    data,
                    qset: None,
                });
            }
            return;
        }
        let n = self.layers();
        let root = self.alloc_teid();
        self.nodes.insert(
            root,
            SchedNode { teid: root, parent: 0, layer: 0, data: dflt_data(elem::ROOT), qset: None },
        );
        for tc in 0..self.cfg.num_tc.clamp(1, 8) {
            let t = self.alloc_teid();
            self.nodes.insert(
                t,
                SchedNode {
                    teid: t,
                    parent: root,
                    layer: 1,
                    data: dflt_data(elem::TC),
                    qset: None,
                },
            );
            if tc == 0 {
                let mut parent = t;
                for layer in 2..n {
                    let ty = match layer {
                        2 => elem::ENTRY_POINT,
                        l if l == n - 1 => elem::LEAF,
                        _ => elem::GENERIC,
                    };
                    let id = self.alloc_teid();
                    self.nodes.insert(
                        id,
                        SchedNode { teid: id, parent, layer, data: dflt_data(ty), qset: None },
                    );
                    parent = id;
                }
            }
        }
    }

    fn children(&self, teid: u32) -> usize {
        self.nodes.values().filter(|c| c.parent == teid).count()
    }

    /// Max children of a node at `layer`.
    fn max_children(&self, layer: u8) -> usize {
        self.cfg.max_sibl.get(layer as usize + 1).copied().unwrap_or(0) as usize
    }

    // --------------------------------------------------------------
    // registers
    // --------------------------------------------------------------

    /// Register value without side effects; None when `off` is not a LAN
    /// register.
    pub(crate) fn peek(&self, off: u32, crit: bool) -> Option<u32> {
        let busy = self.resetting > 0;
        let crit = if crit { reg::LEN_CRIT } else { 0 };
        let v = match off {
            reg::ATQBAL => self.atq.bal,
            reg::ATQBAH => self.atq.bah,
            reg::ATQLEN => self.atq.len | crit,
            reg::ATQH => self.atq.head,
            reg::ATQT => self.atq.tail,
            reg::ARQBAL => self.arq.bal,
            reg::ARQBAH => self.arq.bah,
            reg::ARQLEN => self.arq.len | crit,
            reg::ARQH => self.arq.head,
            reg::ARQT => self.arq.tail,
            reg::PFGEN_CTRL => (busy && self.pf_reset) as u32,
            reg::GLGEN_RSTAT => (busy && !self.pf_reset) as u32,
            reg::GLNVM_ULD if busy => 0,
            reg::GLNVM_ULD if self.cfg.rdma => reg::ULD_DONE | reg::ULD_PE_DONE,
            reg::GLNVM_ULD => reg::ULD_DONE,
            reg::GL_MNG_FWSM => {
                // FW_LOADING while a global reset reloads the firmware
                // (model reading of spec §1.7 item 6)
                let loading = if busy && !self.pf_reset { reg::FWSM_FW_LOADING } else { 0 };
                loading | if self.cfg.recovery_mode { reg::FWSM_RECOVERY } else { 0 }
            }
            reg::PFGEN_PORTNUM => self.cfg.port as u32 & 7,
            _ => return None,
        };
        Some(v)
    }

    /// A register read: [`Firmware::peek`], and one read of a reset's busy
    /// window elapses.
    pub(crate) fn read(&mut self, off: u32, crit: bool) -> Option<u32> {
        let v = self.peek(off, crit)?;
        self.tick();
        Some(v)
    }

    /// One unit of a reset's busy window elapses (a register read; a round
    /// of the shared-memory host).
    pub(crate) fn tick(&mut self) {
        self.resetting = self.resetting.saturating_sub(1);
    }

    /// Register write; returns false when `off` is not a LAN register. A
    /// PFSWR write returns true through `pfr` (the device resets the PF).
    pub(crate) fn write(
        &mut self,
        off: u32,
        v: u32,
        mem: &dyn Memory,
        faults: &mut crate::fault::FaultPlan,
        counters: &mut crate::fault::Counters,
    ) -> bool {
        let keep = reg::LEN_VFE | reg::LEN_OVFL | reg::LEN_CRIT;
        match off {
            reg::ATQBAL => self.atq.bal = v,
            reg::ATQBAH => self.atq.bah = v,
            reg::ATQLEN => {
                self.atq.len = (v & (reg::LEN_MASK | reg::LEN_ENABLE)) | (self.atq.len & keep)
            }
            reg::ATQH => self.atq.head = v & reg::LEN_MASK,
            reg::ATQT => {
                self.atq.tail = v & reg::LEN_MASK;
                self.process_atq(mem, faults, counters);
            }
            reg::ARQBAL => self.arq.bal = v,
            reg::ARQBAH => self.arq.bah = v,
            reg::ARQLEN => {
                self.arq.len = (v & (reg::LEN_MASK | reg::LEN_ENABLE)) | (self.arq.len & keep)
            }
            reg::ARQH => self.arq.head = v & reg::LEN_MASK,
            reg::ARQT => self.arq.tail = v & reg::LEN_MASK,
            reg::PFGEN_CTRL => {
                if v & 1 != 0 {
                    self.reset_request = Some(true);
                }
            }
            reg::GLGEN_RSTAT | reg::GLNVM_ULD | reg::GL_MNG_FWSM | reg::PFGEN_PORTNUM => {}
            _ => return false,
        }
        true
    }

    /// The link partner goes away or comes back: the link follows and a
    /// link event (0x0607) is posted when LSE is on and not masked.
    pub fn set_link(&mut self, up: bool, mem: &dyn Memory, counters: &mut crate::fault::Counters) {
        if self.link.up != up {
            self.link.up = up;
            self.pending_link_event = true;
            self.flush_events(mem, counters);
        }
    }

    /// A refused DMA access: counted, and kept for the device trace.
    fn dma_fault(&mut self, f: crate::mem::Fault, counters: &mut crate::fault::Counters) {
        counters.dma_faults += 1;
        self.faulted.push(f);
    }

    /// Starts a reset's busy window (`pf`: PFSWR stays set; otherwise a
    /// global reset: DEVSTATE ≠ 0).
    pub(crate) fn begin_reset(&mut self, pf: bool) {
        self.resetting = self.cfg.reset_reads;
        self.pf_reset = pf;
    }

    // --------------------------------------------------------------
    // the send queue
    // --------------------------------------------------------------

    fn process_atq(
        &mut self,
        mem: &dyn Memory,
        faults: &mut crate::fault::FaultPlan,
        counters: &mut crate::fault::Counters,
    ) {
        if self.hung || self.resetting > 0 || faults.aq_crit {
            return;
        }
        if self.atq.tail == self.atq.head {
            // nothing posted (Linux writes TAIL = 0 before enabling, §1.6)
            return;
        }
        let Some(n) = self.atq.usable() else {
            counters.aq_bad_ring += 1;
            return;
        };
        if self.atq.tail >= n || self.atq.head >= n {
            counters.aq_bad_ring += 1;
            return;
        }
        while self.atq.head != self.atq.tail {
            let slot = self.atq.base().wrapping_add(32 * self.atq.head as u64);
            let mut d = [0u8; 32];
            if let Err(f) = mem.read(slot, &mut d) {
                self.dma_fault(f, counters);
                return;
            }
            // fault plan: hang, reset
            if let Some(k) = faults.aq_hang_at {
                if k == 0 {
                    faults.aq_hang_at = None;
                    self.hung = true;
                    return;
                }
                faults.aq_hang_at = Some(k - 1);
            }
            if let Some(k) = faults.aq_reset_at {
                if k == 0 {
                    faults.aq_reset_at = None;
                    // a global reset in the middle of bring-up: the AQ is
                    // torn down and the command never completes
                    self.reset_request = Some(false);
                    return;
                }
                faults.aq_reset_at = Some(k - 1);
            }
            self.execute(&mut d, mem, faults, counters);
            self.completed.push((self.atq.head, u16_at(&d, 2), u16_at(&d, 6)));
            if let Err(f) = mem.write(slot, &d) {
                self.dma_fault(f, counters);
            }
            self.commands += 1;
            counters.aq_commands += 1;
            self.atq.head = (self.atq.head + 1) % n;
            self.flush_events(mem, counters);
        }
    }

    /// Runs one descriptor and writes the completion fields into `d`.
    fn execute(
        &mut self,
        d: &mut [u8; 32],
        mem: &dyn Memory,
        faults: &mut crate::fault::FaultPlan,
        counters: &mut crate::fault::Counters,
    ) {
        let flags = u16_at(d, 0);
        let op = u16_at(d, 2);
        let datalen = u16_at(d, 4) as usize;
        let addr = (u32_at(d, 24) as u64) << 32 | u32_at(d, 28) as u64;
        let has_buf = flags & flag::BUF != 0;
        let mut buf = Vec::new();
        let mut rv = rc::OK;
        let mut out_len = None;
        if has_buf {
            if datalen == 0 || datalen > MAX_BUF {
                rv = rc::EINVAL;
            } else {
                buf = vec![0u8; datalen];
                if flags & flag::RD != 0
                    && let Err(f) = mem.read(addr, &mut buf)
                {
                    self.dma_fault(f, counters);
                    rv = rc::BAD_ADDR;
                }
            }
        } else if datalen != 0 || needs_buf(op) {
            rv = rc::EINVAL;
        }
        if rv == rc::OK && needs_rd(op) && flags & flag::RD == 0 {
            rv = rc::EINVAL;
        }
        if rv == rc::OK
            && let Some((o, code)) = faults.aq_fail_opcode
            && o == op
        {
            faults.aq_fail_opcode = None;
            rv = code;
        }
        if rv == rc::OK {
            if self.cfg.recovery_mode
                && !matches!(op, opc::GET_VER | opc::DRIVER_VER | opc::Q_SHUTDOWN)
            {
                rv = rc::EMODE;
            } else {
                match self.command(op, d, &mut buf) {
                    Ok(len) => out_len = len,
                    Err(code) => {
                        rv = code;
                        out_len = self.err_out.take();
                    }
                }
            }
        }
        if let Some(len) = out_len {
            let len = len.min(buf.len());
            if len > 0
                && let Err(f) = mem.write(addr, &buf[..len])
            {
                self.dma_fault(f, counters);
                rv = rc::BAD_ADDR;
            }
            put16(d, 4, len as u16);
        }
        let mut f = flags | flag::DD | flag::CMP;
        if rv != rc::OK {
            f |= flag::ERR;
            counters.aq_errors += 1;
        }
        put16(d, 0, f);
        put16(d, 6, rv);
    }

    /// Dispatch. `d` is the descriptor (params at 16..32), `buf` the
    /// request buffer (sized datalen; zeros when firmware does not read it).
    fn command(&mut self, op: u16, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        match op {
            opc::GET_VER => self.get_ver(d),
            opc::DRIVER_VER => self.driver_ver(d, buf),
            opc::SET_PORT_PARAMS => self.set_port_params(d),
            opc::Q_SHUTDOWN | opc::STOP_LLDP => Ok(None),
            opc::REQ_RES => self.request_resource(d),
            opc::REL_RES => self.release_resource(d),
            opc::LIST_FUNC_CAPS | opc::LIST_DEV_CAPS => self.list_caps(op, d, buf),
            opc::MANAGE_MAC_READ => self.manage_mac_read(d, buf),
            opc::CLEAR_PXE => self.clear_pxe(d),
            opc::GET_SW_CFG => self.get_sw_cfg(d, buf),
            opc::CLEAR_PF_CFG => self.clear_pf_cfg(),
            opc::ADD_VSI => self.add_vsi(d, buf),
            opc::UPDATE_VSI => self.update_vsi(d, buf),
            opc::FREE_VSI => self.free_vsi(d),
            opc::ALLOC_RES => self.alloc_res(d, buf),
            opc::FREE_RES => self.free_res(d, buf),
            opc::ADD_SW_RULES => self.add_rules(d, buf, false),
            opc::UPDATE_SW_RULES => self.add_rules(d, buf, true),
            opc::REMOVE_SW_RULES => self.remove_rules(d, buf),
            opc::GET_DFLT_TOPO => self.get_dflt_topo(d, buf),
            opc::ADD_SCHED_ELEMS => self.add_elems(d, buf),
            opc::QUERY_SCHED_ELEMS => self.query_elems(d, buf),
            opc::DELETE_SCHED_ELEMS => self.delete_elems(d, buf),
            opc::QUERY_SCHED_RES => self.query_sched_res(buf),
            opc::SET_MAC_CFG => self.set_mac_cfg(d),
            opc::RESTART_AN => self.restart_an(d),
            opc::GET_LINK_STATUS => self.get_link_status(d, buf),
            opc::SET_EVENT_MASK => self.set_event_mask(d),
            opc::ADD_RDMA_QSET => self.add_rdma_qsets(d, buf),
            opc::DIS_TXQS => self.dis_txqs(d, buf),
            opc::DOWNLOAD_PKG => self.download_pkg(d, buf),
            opc::GET_PKG_INFO_LIST => self.get_pkg_info_list(buf),
            _ => Err(rc::ESRCH),
        }
    }

    /// GET_VER: the firmware, ROM and API versions.
    fn get_ver(&self, d: &mut [u8; 32]) -> CmdResult {
        // spec §2.2
        put32(d, 16, self.cfg.rom_ver);
        put32(d, 20, self.cfg.fw_build);
        d[24..28].copy_from_slice(&self.cfg.fw_ver);
        d[28..32].copy_from_slice(&self.cfg.api_ver);
        Ok(None)
    }

    /// DRIVER_VER: records the driver's version and name.
    fn driver_ver(&mut self, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        // spec §2.3: bytes 16–19 major/minor/build/subbuild, the
        // buffer an ASCII name. Model choice (the spec is silent on
        // errors): an empty or non-ASCII name is EINVAL.
        if buf.is_empty() || buf.iter().any(|b| !b.is_ascii()) {
            return Err(rc::EINVAL);
        }
        let mut v = [0u8; 4];
        v.copy_from_slice(&d[16..20]);
        self.driver_version = Some((v, buf.to_vec()));
        Ok(None)
    }

    /// SET_PORT_PARAMS: records the port parameters.
    fn set_port_params(&mut self, d: &mut [u8; 32]) -> CmdResult {
        // spec §5 step 11 names the command and its bad-frame VSI
        // and double-VLAN settings, no layout: the model records
        // bytes 16–22 and checks nothing else (model choice), except
        // that a bad-frame VSI (bytes 18–19, low 10 bits) other than
        // 0 must exist (EINVAL).
        let vsi = u16_at(d, 18) & 0x3FF;
        if vsi != 0 && !self.vsis.contains_key(&vsi) {
            return Err(rc::EINVAL);
        }
        let mut p = [0u8; 7];
        p.copy_from_slice(&d[16..23]);
        self.port_params = Some(p);
        Ok(None)
    }

    /// REL_RES: releases the global config lock.
    fn release_resource(&mut self, d: &mut [u8; 32]) -> CmdResult {
        // model choice: releasing a lock not held is EPERM
        if u16_at(d, 16) == 4 {
            if !self.lock_held {
                return Err(rc::EPERM);
            }
            self.lock_held = false;
            self.pkg_buf.clear();
        }
        Ok(None)
    }

    /// MANAGE_MAC_READ: the port's LAN MAC.
    fn manage_mac_read(&self, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        // spec §2.9: flags LAN_ADDR_VALID (bit 4), byte 20 = number
        // of addresses; 8-byte entries (lport, type 0 = LAN, MAC)
        if buf.len() < 8 {
            return Err(rc::ENOMEM);
        }
        buf.fill(0);
        buf[0] = self.cfg.lport;
        buf[1] = 0;
        buf[2..8].copy_from_slice(&self.cfg.mac);
        put16(d, 16, 0x10);
        d[20] = 1;
        Ok(Some(8))
    }

    /// CLEAR_PXE: leaves PXE mode.
    fn clear_pxe(&mut self, d: &mut [u8; 32]) -> CmdResult {
        // spec §2.5: byte 16 = 2; EEXIST when not in PXE mode
        if d[16] != 2 {
            return Err(rc::EINVAL);
        }
        if !self.pxe_mode {
            return Err(rc::EEXIST);
        }
        self.pxe_mode = false;
        Ok(None)
    }

    /// CLEAR_PF_CFG: forgets the PF's configuration.
    fn clear_pf_cfg(&mut self) -> CmdResult {
        // spec §2.4: VSIs, VSI lists, switch rules, port config;
        // the scheduler tree is not named there and stays (it
        // carries no VSI, spec §2.11)
        self.port_params = None;
        self.vsis.clear();
        self.rules.clear();
        self.resources.clear();
        Ok(None)
    }

    /// FREE_VSI: frees a VSI and the rules forwarding to it.
    fn free_vsi(&mut self, d: &mut [u8; 32]) -> CmdResult {
        let num = u16_at(d, 16);
        if num & 0x8000 == 0 {
            return Err(rc::EINVAL);
        }
        let num = num & 0x3FF;
        if self.vsis.remove(&num).is_none() {
            return Err(rc::ENOENT);
        }
        self.rules.retain(|_, r| r.fwd_vsi() != Some(num));
        self.vsi_counts(d);
        put16(d, 16, num);
        Ok(None)
    }

    /// SET_MAC_CFG: the maximum frame size.
    fn set_mac_cfg(&mut self, d: &mut [u8; 32]) -> CmdResult {
        let f = u16_at(d, 16);
        // model choice: below a minimal Ethernet frame or above the
        // configured maximum is EINVAL
        if !(64..=self.cfg.max_frame).contains(&f) {
            return Err(rc::EINVAL);
        }
        self.link.max_frame = f;
        Ok(None)
    }

    /// RESTART_AN: the link comes up (with media) or goes down.
    fn restart_an(&mut self, d: &mut [u8; 32]) -> CmdResult {
        // spec §2.16: byte 16 lport, byte 18 RESTART bit 1 | ENABLE bit 2
        if d[16] != self.cfg.lport {
            return Err(rc::EINVAL);
        }
        let enable = d[18] & 4 != 0;
        let up = enable && self.cfg.media;
        self.link.up = up;
        self.pending_link_event = true;
        Ok(None)
    }

    /// GET_LINK_STATUS: the link status, and link status events on or off.
    fn get_link_status(&mut self, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        if d[16] != self.cfg.lport {
            return Err(rc::EINVAL);
        }
        match u16_at(d, 18) & 3 {
            3 => self.link.lse = true,
            2 => self.link.lse = false,
            _ => {}
        }
        if buf.len() < 32 {
            return Err(rc::ENOMEM);
        }
        buf.fill(0);
        buf[..32].copy_from_slice(&self.link_status());
        Ok(Some(32))
    }

    /// SET_EVENT_MASK: which link events are masked.
    fn set_event_mask(&mut self, d: &mut [u8; 32]) -> CmdResult {
        if d[16] != self.cfg.lport {
            return Err(rc::EINVAL);
        }
        self.link.event_mask = u16_at(d, 24);
        Ok(None)
    }

    /// GET_PKG_INFO_LIST: the DDP package loaded, if any.
    fn get_pkg_info_list(&self, buf: &mut [u8]) -> CmdResult {
        let n = self.package.is_some() as usize;
        let len = 4 + 40 * n;
        if buf.len() < len {
            return Err(rc::ENOMEM);
        }
        buf.fill(0);
        put32(buf, 0, n as u32);
        if let Some(p) = &self.package {
            buf[4..8].copy_from_slice(&p.ver);
            buf[8..36].copy_from_slice(&p.name);
            put32(buf, 36, p.track_id);
            buf[40] = p.in_nvm as u8;
            buf[41] = 1; // active
            buf[42] = p.in_nvm as u8; // active at boot
            buf[43] = 0;
        }
        Ok(Some(len))
    }

    /// The 32-byte V1 link status (spec §2.16).
    fn link_status(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[2] = (self.link.up as u8) | if self.cfg.media { 1 << 6 } else { 0 };
        put16(&mut b, 6, self.link.max_frame);
        if self.link.up {
            put16(&mut b, 10, 1u16 << self.cfg.speed_bit.min(15));
        }
        b
    }

    fn request_resource(&mut self, d: &mut [u8; 32]) -> CmdResult {
        // spec §2.8; status at bytes 28–29 (ice_aqc_req_res: status,
        // ICE_AQ_RES_GLBL_SUCCESS 0 / IN_PROG 1 / DONE 2), timeout 20–23
        let res = u16_at(d, 16);
        let access = u16_at(d, 18);
        if !(1..=2).contains(&access) {
            return Err(rc::EINVAL);
        }
        if res == 4 {
            if self.package.as_ref().is_some_and(|p| !p.in_nvm) {
                put16(d, 28, 2); // done: a package was downloaded already
                return Ok(None);
            }
            if self.lock_held {
                put16(d, 28, 1);
                put32(d, 20, 3000);
                return Err(rc::EBUSY);
            }
            self.lock_held = true;
            self.pkg_buf.clear();
            put16(d, 28, 0);
            put32(d, 20, 3000);
            return Ok(None);
        }
        put32(d, 20, 3000);
        Ok(None)
    }

    fn list_caps(&mut self, op: u16, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        let c = &self.cfg;
        let mut out = Vec::new();
        let dev = op == opc::LIST_DEV_CAPS;
        cap(&mut out, 0x0005, c.valid_functions, 0, 0);
        cap(&mut out, 0x0017, if dev { c.vsi_pool as u32 } else { 0 }, 0, 0);
        // DCB: capable, active TC bitmap = TC0, max TC 8
        cap(&mut out, 0x0018, 1, 1, 8);
        cap(&mut out, 0x0041, c.queues.0, 0, c.queues.1);
        cap(&mut out, 0x0042, c.queues.0, 0, c.queues.1);
        cap(&mut out, 0x0043, c.msix.0, 0, c.msix.1);
        cap(&mut out, 0x0047, c.max_mtu, 0, 0);
        cap(&mut out, 0x0051, c.rdma as u32, 0, 0);
        let count = out.len() / 32;
        put32(d, 20, count as u32);
        if buf.len() < out.len() {
            // spec §2.6: the count is written even with ENOMEM
            return Err(rc::ENOMEM);
        }
        buf.fill(0);
        buf[..out.len()].copy_from_slice(&out);
        Ok(Some(out.len()))
    }

    fn get_sw_cfg(&mut self, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        // spec §2.7: 6-byte elements; type bits 15:14 (0 port, 2 VSI)
        let mut elems: Vec<[u8; 6]> = Vec::new();
        let mut e = [0u8; 6];
        put16(&mut e, 0, self.cfg.lport as u16);
        put16(&mut e, 2, self.cfg.sw_id);
        put16(&mut e, 4, 0);
        elems.push(e);
        for v in self.vsis.values() {
            let mut e = [0u8; 6];
            put16(&mut e, 0, 2 << 14 | v.num);
            put16(&mut e, 2, self.cfg.sw_id);
            elems.push(e);
        }
        let first = u16_at(d, 18) as usize;
        let fit = buf.len() / 6;
        if first >= elems.len() {
            return Err(rc::EINVAL);
        }
        if fit == 0 {
            return Err(rc::ENOMEM);
        }
        let end = (first + fit).min(elems.len());
        buf.fill(0);
        for (i, e) in elems[first..end].iter().enumerate() {
            buf[i * 6..i * 6 + 6].copy_from_slice(e);
        }
        put16(d, 18, if end < elems.len() { end as u16 } else { 0 });
        put16(d, 20, (end - first) as u16);
        Ok(Some((end - first) * 6))
    }

    fn vsi_counts(&self, d: &mut [u8; 32]) {
        // spec §2.12 response: 20–21 used, 22–23 free
        let used = (self.vsis.len() as u16).saturating_add(self.cfg.vsi_used);
        put16(d, 20, used);
        put16(d, 22, self.cfg.vsi_pool.saturating_sub(used));
    }

    fn add_vsi(&mut self, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        if buf.len() != 128 {
            return Err(rc::EINVAL);
        }
        let req = u16_at(d, 16);
        let vsi_type = (u16_at(d, 22) & 3) as u8;
        // model choice: the context's sw_id must be the port's switch
        if u16::from(buf[2]) != self.cfg.sw_id & 0xFF {
            return Err(rc::EINVAL);
        }
        // VSI numbers are 10 bits (spec §2.12 response mask 0x3FF)
        if self.vsis.len() >= 0x3FF
            || self.vsis.len() + self.cfg.vsi_used as usize >= self.cfg.vsi_pool as usize
        {
            return Err(rc::ENOSPC);
        }
        let num = if req & 0x8000 != 0 {
            let n = req & 0x3FF;
            if self.vsis.contains_key(&n) {
                return Err(rc::EEXIST);
            }
            n
        } else {
            let mut n = self.next_vsi & 0x3FF;
            while self.vsis.contains_key(&n) {
                n = (n + 1) & 0x3FF;
            }
            self.next_vsi = n + 1;
            n
        };
        let mut ctx = [0u8; 128];
        ctx.copy_from_slice(buf);
        self.vsis.insert(num, Vsi { num, vsi_type, ctx });
        put16(d, 16, num);
        put16(d, 18, 0);
        self.vsi_counts(d);
        Ok(None)
    }

    fn update_vsi(&mut self, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        if buf.len() != 128 {
            return Err(rc::EINVAL);
        }
        let req = u16_at(d, 16);
        if req & 0x8000 == 0 {
            return Err(rc::EINVAL);
        }
        let num = req & 0x3FF;
        let valid = u16_at(buf, 0);
        let Some(v) = self.vsis.get_mut(&num) else {
            return Err(rc::ENOENT);
        };
        // byte ranges of the sections the model keeps (spec §2.12 table;
        // other sections are accepted and not kept: model choice)
        const SECTIONS: [(u16, usize, usize); 7] = [
            (1 << 0, 2, 6),   // switch
            (1 << 1, 6, 8),   // security
            (1 << 4, 16, 20), // ingress UP
            (1 << 5, 20, 24), // egress UP
            (1 << 6, 28, 78), // Rx queue map (+ TC map)
            (1 << 7, 78, 84), // queue options (q_opt_flags at 80)
            (1 << 8, 84, 88), // outer UP
        ];
        for (bit, lo, hi) in SECTIONS {
            if valid & bit != 0 {
                v.ctx[lo..hi].copy_from_slice(&buf[lo..hi]);
            }
        }
        put16(d, 16, num);
        self.vsi_counts(d);
        Ok(None)
    }

    fn alloc_res(&mut self, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        // ice_aqc_alloc_free_res_cmd: bytes 16–17 = entries (ice sends 1);
        // buffer: res_type u16 (type [6:0], flags above), num_elems u16,
        // then one u16 id per element, written by firmware
        // (ice_adminq_cmd.h: struct ice_aqc_alloc_free_res_elem)
        if u16_at(d, 16) != 1 || buf.len() < 4 {
            return Err(rc::EINVAL);
        }
        let ty = u16_at(buf, 0) & 0x7F;
        let n = u16_at(buf, 2) as usize;
        if n == 0 || 4 + 2 * n > buf.len() {
            return Err(rc::EINVAL);
        }
        // ids are 10 bits (the list id field of an action is [13:4])
        if self.resources.len() + n > 0x3FF {
            return Err(rc::ENOSPC);
        }
        for i in 0..n {
            let mut id = self.next_res & 0x3FF;
            while self.resources.contains_key(&id) {
                id = (id + 1) & 0x3FF;
            }
            self.next_res = id + 1;
            self.resources.insert(id, (ty, Vec::new()));
            put16(buf, 4 + 2 * i, id);
        }
        Ok(Some(4 + 2 * n))
    }

    fn free_res(&mut self, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        if u16_at(d, 16) != 1 || buf.len() < 4 {
            return Err(rc::EINVAL);
        }
        let ty = u16_at(buf, 0) & 0x7F;
        let n = u16_at(buf, 2) as usize;
        if 4 + 2 * n > buf.len() {
            return Err(rc::EINVAL);
        }
        let ids: Vec<u16> = (0..n).map(|i| u16_at(buf, 4 + 2 * i)).collect();
        if ids.iter().any(|id| self.resources.get(id).is_none_or(|r| r.0 != ty)) {
            return Err(rc::ENOENT);
        }
        // model choice: a list still named by a rule cannot go
        if ids.iter().any(|id| self.rules.values().any(|r| r.fwd_list() == Some(*id))) {
            return Err(rc::EBUSY);
        }
        for id in ids {
            self.resources.remove(&id);
        }
        Ok(None)
    }

    fn add_rules(&mut self, d: &mut [u8; 32], buf: &mut [u8], update: bool) -> CmdResult {
        // spec §2.15: bytes 16–17 = number of rules. Lookup rules (type 0
        // RX / 1 TX): 16 bytes + header length (16 for the dummy Ethernet
        // header). VSI-list rules (3 SET / 4 CLEAR): type, status, list
        // index, number of VSIs, VSI numbers (ice_adminq_cmd.h: struct
        // ice_sw_rule_vsi_list). Update (0x02A1) names existing rules by
        // their index.
        let n = u16_at(d, 16) as usize;
        if n == 0 {
            return Err(rc::EINVAL);
        }
        let mut off = 0;
        let mut ops = Vec::new();
        for _ in 0..n {
            let rule_type = u16_at(buf, off);
            let (size, op) = match rule_type {
                0 | 1 => self.lookup_rule(buf, off, rule_type, update)?,
                3 | 4 => self.vsi_list_rule(buf, off, rule_type)?,
                // model choice: large actions and prune lists are not modelled
                _ => return Err(rc::EINVAL),
            };
            ops.push(op);
            off += size;
        }
        for op in ops {
            self.apply_rule(op, buf, update);
        }
        Ok(Some(buf.len()))
    }

    /// [`Self::add_rules`]: the lookup rule (type `rule_type`, 0 RX / 1 TX)
    /// at `off` checked; its size and the rule.
    fn lookup_rule(
        &self,
        buf: &[u8],
        off: usize,
        rule_type: u16,
        update: bool,
    ) -> Result<(usize, RuleOp), u16> {
        // An update (0x02A1) may leave the header length 0 and
        // still carry the 16-byte dummy header: it changes the
        // action and source of the rule it names, whose match
        // stays (ice_switch.c → ice_fill_sw_rule writes hdr_len
        // only for Add; ice_update_pkt_fwd_rule sends the
        // 32-byte rule). Model choice: on update a header
        // length of 0 means the 16-byte header of spec §2.15.
        let mut hdr_len = u16_at(buf, off + 14) as usize;
        if update && hdr_len == 0 {
            hdr_len = 16;
        }
        let size = 16 + hdr_len;
        if off + size > buf.len() || hdr_len < 6 {
            return Err(rc::EINVAL);
        }
        let mut dst = [0u8; 6];
        dst.copy_from_slice(&buf[off + 16..off + 22]);
        if update && let Some(old) = self.rules.get(&u16_at(buf, off + 12)) {
            dst = old.dst_mac;
        }
        let r = Rule {
            index: u16_at(buf, off + 12),
            rule_type,
            recipe: u16_at(buf, off + 4),
            src: u16_at(buf, off + 6),
            act: u32_at(buf, off + 8),
            dst_mac: dst,
        };
        if let Some(vsi) = r.fwd_vsi()
            && !self.vsis.contains_key(&vsi)
        {
            return Err(rc::ENOENT);
        }
        if let Some(l) = r.fwd_list()
            && !self.resources.contains_key(&l)
        {
            return Err(rc::ENOENT);
        }
        if update {
            if !self.rules.contains_key(&r.index) {
                return Err(rc::ENOENT);
            }
        } else if self
            .rules
            .values()
            .any(|o| o.dst_mac == r.dst_mac && o.rule_type == r.rule_type && o.src == r.src)
        {
            return Err(rc::EEXIST);
        }
        Ok((size, RuleOp::Lookup(off, r)))
    }

    /// [`Self::add_rules`]: the VSI-list rule (type `rule_type`, 3 SET /
    /// 4 CLEAR) at `off` checked; its size and the change.
    fn vsi_list_rule(
        &self,
        buf: &[u8],
        off: usize,
        rule_type: u16,
    ) -> Result<(usize, RuleOp), u16> {
        let count = u16_at(buf, off + 6) as usize;
        let size = 8 + 2 * count;
        if off + size > buf.len() {
            return Err(rc::EINVAL);
        }
        let list = u16_at(buf, off + 4);
        if !self.resources.contains_key(&list) {
            return Err(rc::ENOENT);
        }
        let vsis: Vec<u16> = (0..count).map(|i| u16_at(buf, off + 8 + 2 * i)).collect();
        if vsis.iter().any(|v| !self.vsis.contains_key(v)) {
            return Err(rc::ENOENT);
        }
        Ok((size, RuleOp::List(list, vsis, rule_type == 3)))
    }

    /// [`Self::add_rules`]: one checked rule applied (a new lookup rule gets
    /// the next index, written back into its place in `buf`).
    fn apply_rule(&mut self, op: RuleOp, buf: &mut [u8], update: bool) {
        match op {
            RuleOp::Lookup(off, mut r) => {
                if !update {
                    r.index = self.next_rule;
                    self.next_rule = self.next_rule.wrapping_add(1);
                    put16(buf, off + 12, r.index);
                }
                self.rules.insert(r.index, r);
            }
            RuleOp::List(list, vsis, set) => {
                if let Some((_, members)) = self.resources.get_mut(&list) {
                    for v in vsis {
                        if set && !members.contains(&v) {
                            members.push(v);
                        } else if !set {
                            members.retain(|m| *m != v);
                        }
                    }
                }
            }
        }
    }

    fn remove_rules(&mut self, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        let n = u16_at(d, 16) as usize;
        let mut off = 0;
        for _ in 0..n {
            let hdr_len = u16_at(buf, off + 14) as usize;
            let idx = u16_at(buf, off + 12);
            if off + 16 > buf.len() {
                return Err(rc::EINVAL);
            }
            if self.rules.remove(&idx).is_none() {
                return Err(rc::ENOENT);
            }
            off += 16 + hdr_len;
        }
        Ok(None)
    }

    fn get_dflt_topo(&mut self, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        // spec §2.11: byte 16 = lport; byte 17 = branches; 224-byte
        // branches: parent TEID, element count, then 24-byte elements
        if d[16] != self.cfg.lport {
            return Err(rc::EINVAL);
        }
        let root = self.nodes.values().find(|n| n.layer == 0).map(|n| n.teid).unwrap_or(0);
        let tcs: Vec<u32> = self.nodes.values().filter(|n| n.layer == 1).map(|n| n.teid).collect();
        let need = 224 * tcs.len();
        if buf.len() < need {
            return Err(rc::ENOMEM);
        }
        buf.fill(0);
        for (b, &tc) in tcs.iter().enumerate() {
            let mut chain = vec![root, tc];
            let mut cur = tc;
            while let Some(c) = self.nodes.values().find(|n| n.parent == cur && n.qset.is_none()) {
                chain.push(c.teid);
                cur = c.teid;
                if chain.len() >= 9 {
                    break;
                }
            }
            let o = b * 224;
            put32(buf, o, 0);
            put16(buf, o + 4, chain.len() as u16);
            for (i, t) in chain.iter().enumerate() {
                let Some(n) = self.nodes.get(t) else { continue };
                let e = o + 8 + i * 24;
                put32(buf, e, n.parent);
                put32(buf, e + 4, n.teid);
                buf[e + 8..e + 24].copy_from_slice(&n.data);
            }
        }
        d[17] = tcs.len() as u8;
        Ok(Some(need))
    }

    fn add_elems(&mut self, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        // spec §2.11 0x0401: groups of (parent TEID, count) + 24-byte elements
        let groups = u16_at(d, 16) as usize;
        if groups == 0 {
            return Err(rc::EINVAL);
        }
        let mut off = 0;
        let mut plan = Vec::new();
        let mut pending: BTreeMap<u32, usize> = BTreeMap::new();
        for _ in 0..groups {
            let parent = u32_at(buf, off);
            let count = u16_at(buf, off + 4) as usize;
            let size = 8 + 24 * count;
            if count == 0 || off + size > buf.len() {
                return Err(rc::EINVAL);
            }
            let Some(p) = self.nodes.get(&parent) else {
                return Err(rc::ENOENT);
            };
            let layer = p.layer + 1;
            // a generic SE cannot sit at the leaf layer
            if layer as usize + 1 >= self.layers() as usize {
                return Err(rc::EINVAL);
            }
            let have = self.children(parent) + pending.get(&parent).copied().unwrap_or(0);
            if have + count > self.max_children(p.layer) {
                return Err(rc::ENOSPC);
            }
            *pending.entry(parent).or_default() += count;
            for i in 0..count {
                let e = off + 8 + 24 * i;
                let ty = buf[e + 8];
                if ty != elem::GENERIC && ty != elem::PADDED {
                    return Err(rc::EINVAL);
                }
                plan.push((e, parent, layer));
            }
            off += size;
        }
        for (e, parent, layer) in plan {
            let teid = self.alloc_teid();
            let mut data = [0u8; 16];
            data.copy_from_slice(&buf[e + 8..e + 24]);
            put32(buf, e, parent);
            put32(buf, e + 4, teid);
            self.nodes.insert(teid, SchedNode { teid, parent, layer, data, qset: None });
        }
        put16(d, 18, groups as u16);
        Ok(Some(buf.len()))
    }

    fn query_elems(&mut self, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        let n = u16_at(d, 16) as usize;
        if n == 0 || n * 24 > buf.len() {
            return Err(rc::EINVAL);
        }
        let mut found = 0u16;
        for i in 0..n {
            let e = i * 24;
            let teid = u32_at(buf, e + 4);
            if let Some(node) = self.nodes.get(&teid) {
                put32(buf, e, node.parent);
                buf[e + 8..e + 24].copy_from_slice(&node.data);
                found += 1;
            }
        }
        if found == 0 {
            // model choice: nothing known is ENOENT
            return Err(rc::ENOENT);
        }
        put16(d, 18, found);
        Ok(Some(buf.len()))
    }

    fn delete_elems(&mut self, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        // groups of (parent TEID u32, count u16, reserved u16, TEIDs u32)
        let groups = u16_at(d, 16) as usize;
        let mut off = 0;
        let mut victims = Vec::new();
        for _ in 0..groups {
            let parent = u32_at(buf, off);
            let count = u16_at(buf, off + 4) as usize;
            if off + 8 + 4 * count > buf.len() {
                return Err(rc::EINVAL);
            }
            for i in 0..count {
                let t = u32_at(buf, off + 8 + 4 * i);
                match self.nodes.get(&t) {
                    Some(n) if n.parent == parent && n.layer > 1 => victims.push(t),
                    Some(_) => return Err(rc::EINVAL),
                    None => return Err(rc::ENOENT),
                }
            }
            off += 8 + 4 * count;
        }
        // a node with children (not being deleted with it) cannot go:
        // model choice EBUSY
        for &t in &victims {
            if self.nodes.values().any(|c| c.parent == t && !victims.contains(&c.teid)) {
                return Err(rc::EBUSY);
            }
        }
        for t in victims {
            self.nodes.remove(&t);
        }
        put16(d, 18, groups as u16);
        Ok(None)
    }

    fn query_sched_res(&mut self, buf: &mut [u8]) -> CmdResult {
        // spec §2.11: 32-byte generic part (phys/logical levels, flattening,
        // CGDs, rdma_qsets @8) + nine 32-byte layer entries (logical layer
        // @0, max nodes @2/@4, max_sibl_grp_sz @10)
        if buf.len() < 320 {
            return Err(rc::ENOMEM);
        }
        buf.fill(0);
        let n = self.layers() as u16;
        put16(buf, 0, n);
        put16(buf, 2, n);
        buf[5] = 8;
        buf[6] = 2;
        put16(buf, 8, self.cfg.rdma_qsets);
        let mut nodes = 1u32;
        for l in 0..n as usize {
            let e = 32 + 32 * l;
            let sibl = self.cfg.max_sibl.get(l).copied().unwrap_or(0);
            nodes = nodes.saturating_mul(sibl.max(1) as u32).min(0xFFFF);
            buf[e] = l as u8;
            put16(buf, e + 2, nodes as u16);
            put16(buf, e + 4, nodes as u16);
            put16(buf, e + 10, sibl);
        }
        Ok(Some(320))
    }

    fn add_rdma_qsets(&mut self, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        // spec §2.13: byte 16 groups (≤ 127); per group 8-byte header then
        // 24 bytes per qset (tx_qset_id, reserved, qset_teid, data); the
        // parent is a queue-group node (layer N − 2); leaves at N − 1
        let groups = d[16] as usize;
        if groups == 0 || groups > 127 {
            return Err(rc::EINVAL);
        }
        let qgrp = self.layers() - 2;
        let mut off = 0;
        let mut plan = Vec::new();
        let mut handles = Vec::new();
        for _ in 0..groups {
            let parent = u32_at(buf, off);
            let count = u16_at(buf, off + 4) as usize;
            if count == 0 || off + 8 + 24 * count > buf.len() {
                return Err(rc::EINVAL);
            }
            let Some(p) = self.nodes.get(&parent) else {
                return Err(rc::ENOENT);
            };
            if p.layer != qgrp {
                return Err(rc::EINVAL);
            }
            if self.children(parent) + count > self.max_children(p.layer) {
                return Err(rc::ENOSPC);
            }
            for i in 0..count {
                let e = off + 8 + 24 * i;
                let h = u16_at(buf, e);
                // model choice: one leaf per qs_handle
                if self.qset(h).is_some() || handles.contains(&h) {
                    return Err(rc::EEXIST);
                }
                handles.push(h);
                plan.push((e, parent, h));
            }
            off += 8 + 24 * count;
        }
        // ice checks the length equals the groups' sum (spec §2.13)
        if off != buf.len() {
            return Err(rc::EINVAL);
        }
        for (e, parent, h) in plan {
            let teid = self.alloc_teid();
            put32(buf, e + 4, teid);
            let mut data = [0u8; 16];
            data.copy_from_slice(&buf[e + 8..e + 24]);
            data[0] = elem::LEAF;
            self.nodes
                .insert(teid, SchedNode { teid, parent, layer: qgrp + 1, data, qset: Some(h) });
        }
        Ok(Some(buf.len()))
    }

    fn dis_txqs(&mut self, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        // spec §2.13 removal: byte 17 = number of items; item = parent TEID,
        // count u8, reserved u8, q_id u16 × count, padded to 4 bytes;
        // q_id bit 15 = RDMA qset (qs_handle in the low bits)
        let items = d[17] as usize;
        let mut off = 0;
        let mut victims = Vec::new();
        for _ in 0..items {
            let parent = u32_at(buf, off);
            let count = buf.get(off + 4).copied().unwrap_or(0) as usize;
            let size = (6 + 2 * count).next_multiple_of(4);
            if count == 0 || off + size > buf.len() {
                return Err(rc::EINVAL);
            }
            for i in 0..count {
                let q = u16_at(buf, off + 6 + 2 * i);
                if q & 0x8000 == 0 {
                    // model choice: LAN Tx queues are not modelled
                    return Err(rc::ENOENT);
                }
                match self.qset(q & 0x7FFF) {
                    Some(n) if n.parent == parent => victims.push(n.teid),
                    _ => return Err(rc::ENOENT),
                }
            }
            off += size;
        }
        for t in victims {
            self.nodes.remove(&t);
        }
        Ok(None)
    }

    fn download_pkg(&mut self, d: &mut [u8; 32], buf: &mut [u8]) -> CmdResult {
        // spec §2.8: needs the global-config lock; byte 16 bit 0 = last
        if !self.lock_held {
            return Err(rc::EACCES);
        }
        if self.pkg_buf.len() + buf.len() > 16 << 20 {
            return Err(rc::ENOSPC);
        }
        self.pkg_buf.extend_from_slice(buf);
        if d[16] & 1 == 0 {
            return Ok(None);
        }
        let p = std::mem::take(&mut self.pkg_buf);
        let mut fail = |buf: &mut [u8], off: u32, info: u32| {
            if buf.len() >= 8 {
                put32(buf, 0, off);
                put32(buf, 4, info);
                self.err_out = Some(8);
            }
        };
        if p.get(..8) != Some(&PKG_MAGIC[..]) {
            fail(buf, 0, 1);
            return Err(rc::EINVAL);
        }
        let total = u32_at(&p, 40) as usize;
        if p.len() < PKG_HDR_LEN || total != p.len() {
            fail(buf, 40, 2);
            return Err(rc::EINVAL);
        }
        let mut ver = [0u8; 4];
        ver.copy_from_slice(&p[8..12]);
        let mut name = [0u8; 28];
        name.copy_from_slice(&p[12..40]);
        self.package = Some(Package { ver, name, track_id: u32_at(&p, 44), in_nvm: false });
        Ok(None)
    }

    // --------------------------------------------------------------
    // the event queue
    // --------------------------------------------------------------

    /// Posts one event (opcode, retval, params 16..32, buffer) to the ARQ.
    /// Returns whether it was delivered.
    pub fn post_event(
        &mut self,
        mem: &dyn Memory,
        counters: &mut crate::fault::Counters,
        opcode: u16,
        params: [u8; 16],
        data: &[u8],
    ) -> bool {
        let Some(n) = self.arq.usable() else {
            counters.arq_dropped += 1;
            return false;
        };
        let next = (self.arq.head + 1) % n;
        if self.arq.head >= n || self.arq.head == self.arq.tail {
            // the slot at ARQT is not posted (the driver keeps one free)
            counters.arq_dropped += 1;
            self.arq.len |= reg::LEN_OVFL;
            return false;
        }
        let slot = self.arq.base().wrapping_add(32 * self.arq.head as u64);
        let mut d = [0u8; 32];
        if let Err(f) = mem.read(slot, &mut d) {
            self.dma_fault(f, counters);
            return false;
        }
        let flags = u16_at(&d, 0);
        let room = u16_at(&d, 4) as usize;
        if !data.is_empty() && (flags & flag::BUF == 0 || room < data.len()) {
            counters.arq_dropped += 1;
            return false;
        }
        let addr = (u32_at(&d, 24) as u64) << 32 | u32_at(&d, 28) as u64;
        if !data.is_empty()
            && let Err(f) = mem.write(addr, data)
        {
            self.dma_fault(f, counters);
            return false;
        }
        put16(&mut d, 0, flags | flag::DD | flag::CMP);
        put16(&mut d, 2, opcode);
        put16(&mut d, 4, data.len() as u16);
        put16(&mut d, 6, 0);
        d[16..24].copy_from_slice(&params[..8]);
        if let Err(f) = mem.write(slot, &d) {
            self.dma_fault(f, counters);
            return false;
        }
        self.arq.head = next;
        counters.arq_events += 1;
        true
    }

    /// Delivers a pending link event (after Restart AN) when LSE is on and
    /// the link up/down event (bit 1) is not masked (spec §2.16).
    pub(crate) fn flush_events(&mut self, mem: &dyn Memory, counters: &mut crate::fault::Counters) {
        if !std::mem::take(&mut self.pending_link_event) {
            return;
        }
        if !self.link.lse || self.link.event_mask & (1 << 1) != 0 {
            return;
        }
        let mut p = [0u8; 16];
        p[0] = self.cfg.lport;
        let st = self.link_status();
        self.post_event(mem, counters, opc::GET_LINK_STATUS, p, &st);
    }
}
