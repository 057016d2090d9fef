//! One call from a bare E810 PF to a ready RDMA [`Device`]: spec
//! ice-lan-for-rdma §5 steps 2–19 and 22–26, with the LAN side's
//! [`LanOps`] implemented on the admin queue.
//!
//! ```text
//! E810::bring_up(bar, profile, options)
//!   2  PF reset (PFGEN_CTRL.PFSWR) or wait out a global reset; GLGEN_RSTAT,
//!      GLNVM_ULD done bits (PE_DONE once step 8 shows RDMA on)
//!   3  pf_id, port, firmware mode (recovery → error; FW_LOADING waited)
//!   4  admin queue up            5  Get Version + API check (both again
//!      on EIO: 11 attempts, 100 ms apart, as ice_init_all_ctrlq)
//!   6  Clear PF config           7  Clear PXE (EEXIST is fine)
//!   8  device + function caps (RDMA, ≤ 4 PFs, MSI-X range), then PE_DONE
//!   9  DDP: active package? else download the caller's, else error
//!  10  switch config (lport, sw_id)
//!  11  Set Port Params (option, Linux sends it)
//!  12  scheduler resources      13  default topology, default nodes deleted
//!  14  MAC read                 15  max frame size (Set MAC config)
//!  16  Add PF VSI               17  scheduler branch to the RDMA qgrp node
//!  18  broadcast + unicast MAC rules
//!  19  event mask, link events, restart AN, link status; Driver
//!      Version (option)
//!  22–24  Device::probe_with_lan: Add RDMA Qset per TC leaf, PE filter
//! ```
//! [`E810::bring_up_observed`] is the same call with an observer that hears
//! each completed step ([`Progress`]), for callers that report the steps
//! one by one (the QEMU demo prints one scenario line per step).
//!
//! Teardown ([`E810::shut_down`]) is the reverse: PE filter off and qsets
//! removed (by `Device::close_with_lan`), Free VSI, Queue Shutdown, AQ off.
//!
//! # §6 unknowns met here, and what the code does
//! * 1 (DDP needed?): [`DdpPolicy`] — `Require` (Linux's policy, default):
//!   no active package and none given is [`BringUpError::NoDdpPackage`];
//!   `Download(bytes)` downloads when none is active; `Ignore` skips the
//!   check.
//! * 2 (package after FLR): the package state is always read (0x0C43), never
//!   assumed from the kind of reset.
//! * 3 (scheduler shape): layers from 0x0412 and 0x0400 only.
//! * 4 (shortcut parent): not used; Linux's dedicated RDMA queue group.
//! * 5 (leftover VSI): not used; Clear PF config, then our own VSI.
//! * 6/7 (MSI-X index space, polled mode): [`BringUpOptions::msix`] is
//!   handed to the RDMA layer as given (default: none, polled mode), after
//!   a check that the range lies inside the function's MSI-X count (cap
//!   0x0043) — [`BringUpError::MsixOutOfRange`] otherwise.
//! * 8 (LB flag): Linux's rule (LB above 512 bytes).
//! * PE_DONE is awaited after the caps, when RDMA is known to be on (as
//!   ice_check_reset does for a function that has the capability).
//! * 9 (API version): major > 1 refused (ice_aq_ver_check).
//! * 10 (DCB): TC 0 by default; [`BringUpOptions::rdma_tcs`] names more
//!   TCs (each needs a TC node in the default topology; ice's TC numbers
//!   come from its DCB code, which the vendor vectors do not cover, so
//!   the branch index of 0x0400 is taken as the TC) and
//!   [`BringUpOptions::rdma_qsets_per_tc`] sizes each branch;
//!   [`BringUpOptions::stop_lldp`] stops the firmware LLDP agent so the
//!   link partner cannot push more TCs. Reading the DCB configuration is
//!   the caller's.
//! * 11 (RDMA disabled by NVM): cap 0x0051 = 0 or more than 4 PFs →
//!   [`BringUpError::RdmaDisabled`]; the doorbell size is the RDMA layer's
//!   check.
//! * 13 (link bring-up): Restart AN only (iPXE's path); no PHY config
//!   (0x0600/0x0601 are media-dependent and not sent).
//!   Link down after [`BringUpOptions::link_wait`] is an error only when
//!   [`BringUpOptions::require_link`].
//! * 14 (address resolution): outside this layer (ARP entries are the
//!   caller's).

use core::error::Error;
use core::fmt::{self, Display, Formatter};
use core::time::Duration;

use irdma_hal::dma::wait_until;
use irdma_hal::{Bar, Hal};

use super::aq::{AdminQueue, AqConfig, AqError};
use super::cmd::{
    self, Caps, CapsKind, CmdError, DriverVersion, PfVsiParams, PortInfo, PortParams, Version,
    VsiContext,
};
use super::regs;
use super::sched::{RdmaBranch, Tree};
use super::switch::MacFilters;
use crate::device::{CloseError, Device, ProbeError, ProbeOptions};
use crate::lan::{LanError, LanInfo, LanOps, MsixInfo};
use crate::res::Profile;

/// What to do about the DDP package (spec §6 item 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DdpPolicy<'a> {
    /// A package must be active (Linux never runs RDMA in safe mode).
    Require,
    /// Download these bytes when no package is active.
    Download(&'a [u8]),
    /// Do not look.
    Ignore,
}

/// Most RDMA queue sets the LAN side registers (over all TCs).
pub const MAX_QSETS: usize = 32;

/// One RDMA scheduler branch per enabled TC.
type Branches = heapless::Vec<RdmaBranch, 8>;

/// How the PF is brought up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BringUpOptions<'a> {
    /// Admin-queue sizes (Linux's 192 × 4 KiB by default).
    pub aq: AqConfig,
    /// Issue PFSWR (true, Linux) or assume the caller just did an FLR.
    pub pf_reset: bool,
    /// Bound on each reset wait (PFSWR clearing, DEVSTATE, GLNVM_ULD).
    pub reset_timeout: Duration,
    /// Wait for GLNVM_ULD.PE_DONE once the caps show RDMA on (Linux does).
    pub wait_pe_done: bool,
    /// Bound on GL_MNG_FWSM.FW_LOADING (ice_wait_fw_load: 30 s).
    pub fw_load_timeout: Duration,
    /// DDP package policy.
    pub ddp: DdpPolicy<'a>,
    /// Max frame size for Set MAC Config (Linux 9728).
    pub max_frame: u16,
    /// MTU handed to the RDMA layer (576..=9702 and ≤ max frame − 26).
    pub mtu: u32,
    /// Rx queues of the PF VSI (at least 1; TC 0 maps at most 256).
    pub vsi_rx_queues: u16,
    /// Switch in VEB mode (ice default).
    pub veb: bool,
    /// Stop the firmware LLDP agent first (single TC; §6 item 10).
    pub stop_lldp: bool,
    /// How long to poll Get Link Status for link up.
    pub link_wait: Duration,
    /// Link still down after `link_wait` is an error.
    pub require_link: bool,
    /// MSI-X vectors for the RDMA layer (§6 items 6–7).
    pub msix: MsixInfo,
    /// Traffic classes that get an RDMA scheduler branch (bit n = TC n;
    /// default TC 0 only; TC 0 must be in). Each TC named needs a TC node
    /// in the firmware's default topology (ice skips a TC without one;
    /// the driver refuses). Qsets are registered per TC through
    /// [`LanOps::register_qset`].
    pub rdma_tcs: u8,
    /// Queue sets each RDMA branch is sized for (ice `max_rdmaqs[tc]`;
    /// irdma asks for one per work-scheduler leaf): more than one
    /// queue-group node holds adds further nodes, as ice_sched.c does.
    /// 1..=[`MAX_QSETS`] in total over the TCs.
    pub rdma_qsets_per_tc: u16,
    /// Send Set Port Parameters (0x0203) after the switch configuration,
    /// as Linux does with [`PortParams::LINUX`] (spec §5 step 11; optional:
    /// default off, the firmware's defaults stay).
    pub port_params: Option<PortParams>,
    /// Send Driver Version (0x0002) after the link step, as Linux does
    /// (spec §2.3; optional, default off).
    pub driver_version: Option<DriverVersion<'a>>,
    /// Options for the RDMA layer's probe.
    pub probe: ProbeOptions,
}

impl Default for BringUpOptions<'_> {
    fn default() -> Self {
        BringUpOptions {
            aq: AqConfig::linux(),
            pf_reset: true,
            reset_timeout: Duration::from_secs(5),
            wait_pe_done: true,
            fw_load_timeout: Duration::from_secs(30),
            ddp: DdpPolicy::Require,
            max_frame: 9728,
            mtu: 1500,
            vsi_rx_queues: 1,
            veb: true,
            stop_lldp: false,
            link_wait: Duration::from_secs(5),
            require_link: false,
            msix: MsixInfo { first: 0, count: 0 },
            rdma_tcs: 1,
            rdma_qsets_per_tc: 1,
            port_params: None,
            driver_version: None,
            probe: ProbeOptions::default(),
        }
    }
}

/// The bring-up step a failure happened in (spec §5 numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Step {
    /// 2: reset.
    Reset,
    /// 3: identity and firmware mode.
    Identify,
    /// 4–5: admin queue and version.
    AdminQueue,
    /// 6: Clear PF config.
    ClearPfConfig,
    /// 7: Clear PXE.
    ClearPxe,
    /// 8: capabilities.
    Caps,
    /// 9: DDP package.
    Ddp,
    /// 10: switch configuration.
    SwitchConfig,
    /// 12–13: scheduler resources and default topology.
    Scheduler,
    /// 14: MAC read.
    MacRead,
    /// 15: Set MAC config.
    MacConfig,
    /// 16: Add VSI.
    AddVsi,
    /// 17: the RDMA scheduler branch.
    RdmaBranch,
    /// 18: switch rules.
    SwitchRules,
    /// 19: link.
    Link,
    /// 11: Set Port Parameters (optional).
    PortParams,
    /// Driver Version (optional, after the link).
    DriverVersion,
    /// 22–24: the RDMA layer.
    Probe,
}

/// A bring-up step that just completed, reported to the observer of
/// [`E810::bring_up_observed`] in this order (spec §5 numbering). Errors
/// still name a [`Step`]; a failure happened in the step after the last
/// one reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Progress {
    /// 2: reset done (PFSWR cleared, GLGEN_RSTAT and GLNVM_ULD ready).
    Reset,
    /// 3: pf_id and port read, firmware not in recovery, loaded.
    Identify,
    /// 4: the admin queue is up.
    AqInit,
    /// 5: Get Version answered and the API version accepted.
    Version,
    /// 6: Clear PF config.
    ClearPfConfig,
    /// 7: Clear PXE (or already clear).
    ClearPxe,
    /// 8: device and function caps read, RDMA usable, PE_DONE seen.
    Caps,
    /// 9: a DDP package is active (or the policy is `Ignore`).
    Ddp,
    /// 10: switch configuration read.
    SwitchConfig,
    /// 12–13: scheduler resources and default topology.
    Scheduler,
    /// 14: MAC read.
    MacRead,
    /// 15: Set MAC config.
    MacConfig,
    /// 16: the PF VSI exists.
    AddVsi,
    /// 17: the RDMA scheduler branch exists.
    RdmaBranch,
    /// 18: broadcast and unicast MAC rules.
    SwitchRules,
    /// 19: event mask set, link status read (after Restart AN if down).
    Link,
    /// 22–23: the RDMA layer registered a queue set (Add RDMA Qset), once
    /// per TC leaf.
    Qset,
    /// 24: the PE filter is on (Update VSI).
    PeFilter,
    /// The RDMA layer's probe finished: the [`Device`] is ready.
    Probe,
}

/// The [`LanOps`] the RDMA device this layer probed (and later closes)
/// calls: what it registers is marked as the device's, which only this
/// path may release ([`IceLan`]'s public `LanOps` refuses it). Reports
/// [`Progress::Qset`] and [`Progress::PeFilter`] when they succeed.
struct Watched<'a, H: Hal, B: Bar> {
    lan: &'a mut IceLan<H, B>,
    on: &'a mut dyn FnMut(Progress),
}

impl<H: Hal, B: Bar> LanOps for Watched<'_, H, B> {
    fn register_qset(&mut self, qs_handle: u16, tc: u8, vsi_num: u16) -> Result<u32, LanError> {
        let teid = self.lan.add_qset(qs_handle, tc, vsi_num, true)?;
        (self.on)(Progress::Qset);
        Ok(teid)
    }
    fn unregister_qset(&mut self, qs_handle: u16, teid: u32) -> Result<(), LanError> {
        self.lan.remove_qset(qs_handle, teid, true)
    }
    fn set_rdma_filter(&mut self, vsi_num: u16, enable: bool) -> Result<(), LanError> {
        self.lan.pe_filter(vsi_num, enable, true)?;
        if enable {
            (self.on)(Progress::PeFilter);
        }
        Ok(())
    }
    fn request_reset(&mut self) {
        self.lan.request_reset();
    }
}

/// Why the bring-up failed.
#[derive(Debug)]
pub enum BringUpError {
    /// A register wait ran out (PFSWR, DEVSTATE, GLNVM_ULD, FW_LOADING).
    ResetTimeout(Step),
    /// The firmware is in recovery mode (GL_MNG_FWSM bit 1): ice takes a
    /// separate minimal path; RDMA is impossible.
    FirmwareRecovery,
    /// An admin-queue or command failure in a step.
    Command(Step, CmdError),
    /// RDMA is off: no RDMA capability, or more than 4 PFs (spec §2.6).
    RdmaDisabled,
    /// No active DDP package and none given (policy `Require`).
    NoDdpPackage,
    /// The firmware has no MAC address for this port.
    NoMac,
    /// Link still down and `require_link` set.
    LinkDown,
    /// Bad options (MTU, queue count) — nothing was touched.
    BadOptions(&'static str),
    /// The MSI-X vectors asked for in the options lie outside the
    /// function's MSI-X table (function caps 0x0043 count).
    MsixOutOfRange {
        /// Vectors the function has.
        available: u32,
    },
    /// The RDMA layer's probe failed (the LAN side has been torn down).
    Probe(ProbeError),
}

impl BringUpError {
    fn cmd(step: Step) -> impl FnOnce(CmdError) -> BringUpError {
        move |e| BringUpError::Command(step, e)
    }
}

/// The LAN side after bring-up: admin queue, port, VSI and scheduler
/// state. Implements [`LanOps`] for the RDMA layer.
pub struct IceLan<H: Hal, B: Bar> {
    aq: AdminQueue<H, B>,
    port: PortInfo,
    version: Version,
    vsi_num: u16,
    vsi_ctx: VsiContext,
    tree: Tree,
    branches: Branches,
    /// (qs_handle, teid, registered by the RDMA device) of registered
    /// qsets.
    qsets: heapless::Vec<(u16, u32, bool), MAX_QSETS>,
    reset_requested: bool,
    filters: MacFilters,
    veb: bool,
}

impl<H: Hal, B: Bar> IceLan<H, B> {
    /// The admin queue, for the typed commands. While the RDMA
    /// [`Device`] made by [`E810::bring_up`] lives (until
    /// [`IceLan::close_device`]), those that would free or change its VSI,
    /// its queue sets or its scheduler branch (Free VSI, Update VSI, Clear
    /// PF Configuration, Disable Tx Queues, Delete Scheduling Elements) are
    /// refused with [`CmdError::InUse`]; the raw [`AdminQueue::send`] and
    /// [`AdminQueue::bar`] are `unsafe` (issue #28 item 4):
    ///
    /// ```compile_fail,E0133
    /// # use irdma::ice::IceLan;
    /// # use irdma_hal::{Bar, Hal};
    /// fn raw<H: Hal, B: Bar>(lan: &mut IceLan<H, B>) {
    ///     lan.aq().bar().write32(0, 0); // safe code cannot reach the BAR
    /// }
    /// ```
    pub fn aq(&mut self) -> &mut AdminQueue<H, B> {
        &mut self.aq
    }
    /// Whether an RDMA [`Device`] holds this PF's VSI (from a successful
    /// [`E810::bring_up`] until [`IceLan::close_device`]).
    pub fn device_holds_vsi(&self) -> bool {
        self.aq.held_vsi.is_some()
    }
    /// Closes the RDMA `device` this layer's bring-up made
    /// ([`Device::close_with_lan`], its PE filter off and its queue sets
    /// released through this layer), then lets go of the VSI: Free VSI and
    /// the other commands [`IceLan::aq`] refused work again. What
    /// [`E810::shut_down`] does first; for a caller that took the
    /// [`E810`] apart.
    pub fn close_device(&mut self, device: Device<H, B>) -> Result<(), CloseError>
    where
        B: Clone,
    {
        let r = {
            let mut w = Watched { lan: self, on: &mut |_| {} };
            device.close_with_lan(&mut w)
        };
        // The device is gone (closed, or its memory quarantined): nothing
        // relies on the VSI any more.
        self.aq.held_vsi = None;
        for q in self.qsets.iter_mut() {
            q.2 = false;
        }
        r
    }
    /// Lets go of the VSI without closing a device, for a caller whose
    /// [`Device`] was dropped instead of closed through
    /// [`IceLan::close_device`].
    ///
    /// # Safety
    ///
    /// No live RDMA [`Device`] uses this PF's VSI, its queue sets or its PE
    /// filter (the device made by the bring-up was dropped or closed).
    pub unsafe fn release_vsi(&mut self) {
        self.aq.held_vsi = None;
        for q in self.qsets.iter_mut() {
            q.2 = false;
        }
    }
    /// Port facts (lport, switch id, MAC).
    pub fn port(&self) -> &PortInfo {
        &self.port
    }
    /// Firmware and API versions.
    pub fn version(&self) -> &Version {
        &self.version
    }
    /// Hardware VSI number (irdma's vport_id).
    pub fn vsi_num(&self) -> u16 {
        self.vsi_num
    }
    /// The MAC switch rules installed so far (the port's MAC and
    /// broadcast after bring-up).
    pub fn mac_filters(&self) -> &MacFilters {
        &self.filters
    }
    /// Makes another VSI (`vsi_num`, e.g. one added with
    /// [`AdminQueue::add_vsi`]) receive `mac` and broadcast as well, as
    /// ice_fltr_add_mac_and_broadcast does for a second VSI: an address
    /// that already has a rule is turned into a VSI list or the list
    /// extended ([`MacFilters::add_mac_and_broadcast`]; the port's unicast
    /// MAC is not shared, ice's default `umac_shared` = false).
    pub fn subscribe_mac(&mut self, vsi_num: u16, mac: [u8; 6]) -> Result<(), CmdError> {
        self.filters.add_mac_and_broadcast(&mut self.aq, mac, vsi_num, self.veb, false)
    }
    /// Stops VSI `vsi_num` receiving `mac` (one address; broadcast is
    /// [`super::switch::BROADCAST`]), as ice_remove_mac does
    /// ([`MacFilters::remove_mac`]): a list shrinks, and back to a single
    /// VSI it becomes a plain rule again.
    /// The rule that brings the port's MAC to the VSI an RDMA device holds
    /// is refused with [`CmdError::InUse`] while the device lives.
    pub fn remove_mac_filter(&mut self, vsi_num: u16, mac: [u8; 6]) -> Result<(), CmdError> {
        if self.aq.held_vsi == Some(vsi_num) && self.port.mac == Some(mac) {
            return Err(CmdError::InUse);
        }
        self.filters.remove_mac(&mut self.aq, mac, vsi_num, self.veb)
    }
    /// The scheduler tree.
    pub fn tree(&self) -> &Tree {
        &self.tree
    }
    /// Whether the RDMA layer asked for a reset.
    pub fn reset_requested(&self) -> bool {
        self.reset_requested
    }

    /// Reads the current link status (lport of the port).
    pub fn link_status(&mut self) -> Result<cmd::LinkStatus, CmdError> {
        self.aq.get_link_status(self.port.lport, None)
    }

    /// Takes pending firmware events (step 25); returns the latest link
    /// status seen in a 0x0607 event, if any.
    pub fn poll_events(&mut self) -> Result<Option<cmd::LinkStatus>, AqError> {
        let mut last = None;
        let mut buf = [0u8; cmd::LINK_STATUS_LEN];
        // Bounded by the ring size.
        for _ in 0..self.aq.counts().1 {
            match self.aq.next_event(&mut buf)? {
                Some(e) => {
                    if e.desc.opcode() == super::desc::Opcode::GetLinkStatus as u16 {
                        last = Some(cmd::LinkStatus::parse(&buf, true));
                    }
                }
                None => break,
            }
        }
        Ok(last)
    }

    /// Free VSI, Queue Shutdown and the AQ off (step 26 after the RDMA
    /// layer's own teardown). Returns the first error; every step runs.
    /// While an RDMA device holds the VSI ([`IceLan::device_holds_vsi`];
    /// close it first with [`IceLan::close_device`]) nothing is sent and
    /// the result is [`CmdError::InUse`]; the admin queue is still turned
    /// off (its rings are this layer's, the device never uses them).
    pub fn shut_down(mut self) -> Result<(), CmdError> {
        if self.device_holds_vsi() {
            return Err(CmdError::InUse);
        }
        let r1 = self.aq.free_vsi(self.vsi_num, false).map(|_| ());
        let r2 = self.aq.shutdown(true).map_err(CmdError::from);
        r1.and(r2)
    }
}

fn lan_err(e: CmdError) -> LanError {
    match e {
        CmdError::Aq(AqError::Firmware { code, .. }) => LanError::Command(u16::from(code)),
        CmdError::Invalid(_) => LanError::NoResources,
        _ => LanError::NotReady,
    }
}

impl<H: Hal, B: Bar> IceLan<H, B> {
    /// Add RDMA Qset; `device`: the RDMA device's own (through
    /// [`Watched`]).
    fn add_qset(
        &mut self,
        qs_handle: u16,
        tc: u8,
        vsi_num: u16,
        device: bool,
    ) -> Result<u32, LanError> {
        // one VSI; a TC the bring-up gave a branch (rdma_tcs)
        let Some(branch) = self.branches.iter().find(|b| b.tc == tc).copied() else {
            return Err(LanError::NoResources);
        };
        if vsi_num != self.vsi_num || self.qsets.is_full() {
            return Err(LanError::NoResources);
        }
        let mut teid = [0u32; 1];
        self.aq
            .sched_ena_rdma_qsets(&mut self.tree, &branch, tc, &[qs_handle], &mut teid)
            .map_err(lan_err)?;
        let _ = self.qsets.push((qs_handle, teid[0], device));
        Ok(teid[0])
    }

    /// Disable Tx Queues for a qset; a qset of the live RDMA device only
    /// when `device` (its own close).
    fn remove_qset(&mut self, qs_handle: u16, teid: u32, device: bool) -> Result<(), LanError> {
        if !device && self.qsets.iter().any(|q| q.1 == teid && q.2) {
            return Err(LanError::InUse);
        }
        // This layer's own bookkeeping: the device's hold is lifted for
        // the one command.
        let held = self.aq.held_vsi.take();
        let r = self.aq.sched_dis_rdma_qset(&mut self.tree, teid, qs_handle);
        self.aq.held_vsi = held;
        r.map_err(lan_err)?;
        self.qsets.retain(|q| q.1 != teid);
        Ok(())
    }

    /// The PE filter; off while the RDMA device lives only when `device`.
    fn pe_filter(&mut self, vsi_num: u16, enable: bool, device: bool) -> Result<(), LanError> {
        if vsi_num != self.vsi_num {
            return Err(LanError::NoResources);
        }
        if !device && !enable && self.device_holds_vsi() {
            return Err(LanError::InUse);
        }
        let held = self.aq.held_vsi.take();
        let r = self.aq.set_pe_filter(vsi_num, &mut self.vsi_ctx, enable);
        self.aq.held_vsi = held;
        r.map_err(lan_err)
    }
}

/// The LAN side for an RDMA layer other than the device [`E810::bring_up`]
/// made (which goes through a private path): queue sets and the PE filter
/// of that device are refused here with [`LanError::InUse`] while it lives.
impl<H: Hal, B: Bar> LanOps for IceLan<H, B> {
    fn register_qset(&mut self, qs_handle: u16, tc: u8, vsi_num: u16) -> Result<u32, LanError> {
        self.add_qset(qs_handle, tc, vsi_num, false)
    }

    fn unregister_qset(&mut self, qs_handle: u16, teid: u32) -> Result<(), LanError> {
        self.remove_qset(qs_handle, teid, false)
    }

    fn set_rdma_filter(&mut self, vsi_num: u16, enable: bool) -> Result<(), LanError> {
        self.pe_filter(vsi_num, enable, false)
    }

    fn request_reset(&mut self) {
        // PFSWR (spec §3.2); the caller must run the whole bring-up again.
        self.aq.regs().write32(regs::PFGEN_CTRL, regs::PFGEN_CTRL_PFSWR);
        self.reset_requested = true;
    }
}

/// An E810 PF brought up from cold: the LAN side and the RDMA device.
pub struct E810<H: Hal, B: Bar + Clone> {
    /// The LAN side.
    pub lan: IceLan<H, B>,
    /// The RDMA device.
    pub device: Device<H, B>,
    /// The link status read at the end of bring-up.
    pub link: cmd::LinkStatus,
}

fn wait_reg<H: Hal, B: Bar>(
    bar: &B,
    timeout: Duration,
    mut ok: impl FnMut(u32) -> bool,
    reg: usize,
) -> bool {
    let deadline = H::now().saturating_add(timeout);
    wait_until::<H>(deadline, || ok(bar.read32(reg)))
}

/// Steps 2–3: reset and identity (ice_pf_reset, ice_check_reset,
/// ice_get_fw_mode, ice_wait_fw_load). Returns (pf_id, port).
pub fn reset_and_identify<H: Hal, B: Bar>(
    bar: &B,
    o: &BringUpOptions<'_>,
    on: &mut dyn FnMut(Progress),
) -> Result<(u8, u8), BringUpError> {
    let done_mask = regs::GLNVM_ULD_DONE;
    let global_busy = bar.read32(regs::GLGEN_RSTAT) & 3 != 0
        || bar.read32(regs::GLNVM_ULD) & regs::GLNVM_ULD_DONE != regs::GLNVM_ULD_DONE;
    if o.pf_reset && !global_busy {
        bar.write32(regs::PFGEN_CTRL, regs::PFGEN_CTRL_PFSWR);
        if !wait_reg::<H, B>(
            bar,
            o.reset_timeout,
            |v| v & regs::PFGEN_CTRL_PFSWR == 0,
            regs::PFGEN_CTRL,
        ) {
            return Err(BringUpError::ResetTimeout(Step::Reset));
        }
    }
    if !wait_reg::<H, B>(bar, o.reset_timeout, |v| v & 3 == 0, regs::GLGEN_RSTAT) {
        return Err(BringUpError::ResetTimeout(Step::Reset));
    }
    if !wait_reg::<H, B>(bar, o.reset_timeout, |v| v & done_mask == done_mask, regs::GLNVM_ULD) {
        return Err(BringUpError::ResetTimeout(Step::Reset));
    }
    on(Progress::Reset);
    let pf_id = (bar.read32(regs::PF_FUNC_RID) & 7) as u8;
    let port = (bar.read32(regs::PFGEN_PORTNUM) & 7) as u8;
    if bar.read32(regs::GL_MNG_FWSM) & (1 << 1) != 0 {
        return Err(BringUpError::FirmwareRecovery);
    }
    if !wait_reg::<H, B>(bar, o.fw_load_timeout, |v| v & (1 << 30) == 0, regs::GL_MNG_FWSM) {
        return Err(BringUpError::ResetTimeout(Step::Identify));
    }
    on(Progress::Identify);
    Ok((pf_id, port))
}

/// Size of the package-info buffer asked for: header and 8 entries.
const PKG_INFO_BUF: usize = 4 + 8 * cmd::PKG_INFO_ENTRY;

impl<H: Hal, B: Bar + Clone> E810<H, B> {
    /// Takes a bare PF from PCI to a ready RDMA [`Device`] (spec §5 steps
    /// 2–19, 22–24; see the module docs). On failure everything done so far
    /// is undone where the firmware allows it (VSI freed, AQ shut down).
    ///
    /// # Example
    ///
    /// ```
    /// # use irdma::ice::{BringUpOptions, E810};
    /// # use irdma::res::Profile;
    /// # use irdma_testkit::{FakeHal, ModelBar};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let mut cfg = mock_bar::Config::default();
    /// # cfg.lan.cold = true; // the model's PF starts with no LAN set-up
    /// # let bar = ModelBar::standalone(cfg);
    /// // On hardware: `unsafe { MmioBar::new(bar0, len) }` and your `Hal`.
    /// let pf: E810<FakeHal, ModelBar> =
    ///     E810::bring_up(bar, Profile::SMALL, BringUpOptions::default())?;
    /// println!("VSI {}, link up: {}", pf.lan.vsi_num(), pf.link.up());
    /// // … verbs on `pf.device` …
    /// pf.shut_down()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn bring_up(bar: B, profile: Profile, o: BringUpOptions<'_>) -> Result<Self, BringUpError> {
        Self::bring_up_observed(bar, profile, o, &mut |_| {})
    }

    /// [`E810::bring_up`], calling `on` after each step that completed
    /// ([`Progress`], in order), so a caller can report or time the steps
    /// one by one. The result and the clean-up on failure are the same.
    pub fn bring_up_observed(
        bar: B,
        profile: Profile,
        o: BringUpOptions<'_>,
        on: &mut dyn FnMut(Progress),
    ) -> Result<Self, BringUpError> {
        if o.vsi_rx_queues == 0 {
            return Err(BringUpError::BadOptions("the VSI needs at least one Rx queue"));
        }
        let tcs = o.rdma_tcs.count_ones() as usize;
        if o.rdma_tcs & 1 == 0
            || o.rdma_qsets_per_tc == 0
            || usize::from(o.rdma_qsets_per_tc).saturating_mul(tcs) > MAX_QSETS
        {
            return Err(BringUpError::BadOptions("RDMA TCs must include TC 0, 1..=32 qsets"));
        }
        if o.max_frame == 0
            || o.max_frame > 9728
            || o.mtu < 576
            || o.mtu + 26 > u32::from(o.max_frame)
        {
            return Err(BringUpError::BadOptions("MTU or max frame size out of range"));
        }
        let (pf_id, _port) = reset_and_identify::<H, B>(&bar, &o, on)?;
        // ice_init_all_ctrlq: start + version check, again on EIO (11
        // attempts, 100 ms apart; spec §7 item 4)
        let (mut aq, version) = AdminQueue::<H, B>::start_checked(&bar, &o.aq)
            .map_err(|(e, _)| BringUpError::Command(Step::AdminQueue, e))?;
        on(Progress::AqInit);
        on(Progress::Version);
        let r = Self::lan_steps(&mut aq, &o, version, on);
        let (lan_parts, link) = match r {
            Ok(x) => x,
            Err(e) => {
                let _ = aq.shutdown(true);
                return Err(e);
            }
        };
        let (port, vsi_num, vsi_ctx, tree, branches, filters) = lan_parts;
        let mut lan = IceLan {
            aq,
            port,
            version,
            vsi_num,
            vsi_ctx,
            tree,
            branches,
            qsets: heapless::Vec::new(),
            reset_requested: false,
            filters,
            veb: o.veb,
        };
        let Some(mac) = port.mac else {
            let _ = lan.shut_down();
            return Err(BringUpError::NoMac);
        };
        let mut info = LanInfo::single_tc(pf_id, vsi_num, mac, o.mtu);
        info.msix = o.msix;
        info.link_up = link.up();
        let probed = {
            let mut w = Watched { lan: &mut lan, on: &mut *on };
            Device::probe_with_lan(bar, info, profile, o.probe, &mut w)
        };
        match probed {
            Ok(device) => {
                // The device now relies on the VSI, its qsets and filter.
                lan.aq.held_vsi = Some(vsi_num);
                on(Progress::Probe);
                Ok(E810 { lan, device, link })
            }
            Err(e) => {
                let _ = lan.shut_down();
                Err(BringUpError::Probe(e))
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn lan_steps(
        aq: &mut AdminQueue<H, B>,
        o: &BringUpOptions<'_>,
        version: Version,
        on: &mut dyn FnMut(Progress),
    ) -> Result<
        ((PortInfo, u16, VsiContext, Tree, Branches, MacFilters), cmd::LinkStatus),
        BringUpError,
    > {
        use BringUpError as E;
        Self::clear_and_discover(aq, o, on)?;
        Self::ddp_step(aq, o, on)?;
        if o.stop_lldp {
            aq.stop_lldp(false).map_err(E::cmd(Step::Link))?;
        }
        let mut port = PortInfo::default();
        aq.initial_sw_cfg(&mut port).map_err(E::cmd(Step::SwitchConfig))?;
        on(Progress::SwitchConfig);
        if let Some(p) = &o.port_params {
            aq.set_port_params(p).map_err(E::cmd(Step::PortParams))?;
        }
        let res = aq.query_sched_res().map_err(E::cmd(Step::Scheduler))?;
        let mut tree =
            aq.sched_init_port(port.lport, res.layers).map_err(E::cmd(Step::Scheduler))?;
        // ice keeps the per-layer child limits (hw->max_children)
        tree.set_max_children(&res);
        on(Progress::Scheduler);
        aq.manage_mac_read(16, &mut port).map_err(E::cmd(Step::MacRead))?;
        if port.mac.is_none() {
            return Err(E::NoMac);
        }
        on(Progress::MacRead);
        let pause = cmd::read_pause_cfg(aq.regs());
        aq.set_mac_cfg(o.max_frame, pause, false, &version).map_err(E::cmd(Step::MacConfig))?;
        on(Progress::MacConfig);
        let params = PfVsiParams {
            sw_id: port.sw_id as u8,
            rxq_base: 0,
            num_rxq: o.vsi_rx_queues,
            rss: true,
            flow_director: None,
            veb: o.veb,
        };
        let mut ctx = VsiContext::pf_add(&params).map_err(E::cmd(Step::AddVsi))?;
        let cache = ctx;
        let vsi = aq.add_vsi(&mut ctx).map_err(E::cmd(Step::AddVsi))?;
        on(Progress::AddVsi);
        let rest = Self::after_vsi(aq, o, &mut tree, &mut port, vsi.vsi_num, on);
        match rest {
            Ok((branch, filters, link)) => {
                Ok(((port, vsi.vsi_num, cache, tree, branch, filters), link))
            }
            Err(e) => {
                let _ = aq.free_vsi(vsi.vsi_num, false);
                Err(e)
            }
        }
    }

    /// LAN steps up to the capabilities: clear the PF configuration and
    /// PXE, discover the device and function capabilities, check RDMA and
    /// the MSI-X range, wait for PE_DONE.
    fn clear_and_discover(
        aq: &mut AdminQueue<H, B>,
        o: &BringUpOptions<'_>,
        on: &mut dyn FnMut(Progress),
    ) -> Result<(), BringUpError> {
        use BringUpError as E;
        aq.clear_pf_cfg().map_err(E::cmd(Step::ClearPfConfig))?;
        on(Progress::ClearPfConfig);
        match aq.clear_pxe() {
            Ok(()) => {}
            Err(e) if e.firmware_code() == Some(super::desc::rc::EEXIST) => {}
            Err(e) => return Err(E::Command(Step::ClearPxe, e)),
        }
        on(Progress::ClearPxe);
        let dev = aq.discover_caps(CapsKind::Device).map_err(E::cmd(Step::Caps))?;
        let func = aq.discover_caps(CapsKind::Function).map_err(E::cmd(Step::Caps))?;
        if !Caps::rdma_usable(&func, &dev) {
            return Err(E::RdmaDisabled);
        }
        // The RDMA vectors are PF-relative table indices (spec §4, §6 item
        // 6): they must lie inside the function's MSI-X count.
        let end = u32::from(o.msix.first) + u32::from(o.msix.count);
        if o.msix.count > 0 && end > func.num_msix_vectors {
            return Err(E::MsixOutOfRange { available: func.num_msix_vectors });
        }
        // Once RDMA is known to be on, ice also waits for PE_DONE: the PE
        // firmware is up after the reset (ice_check_reset; spec §1.7).
        if o.wait_pe_done {
            let done = |v: u32| v & regs::GLNVM_ULD_PE_DONE != 0;
            if !wait_reg::<H, B>(aq.regs(), o.reset_timeout, done, regs::GLNVM_ULD) {
                return Err(E::ResetTimeout(Step::Caps));
            }
        }
        on(Progress::Caps);
        Ok(())
    }

    /// The DDP step: unless ignored, an active package is required (or
    /// downloaded when the options carry one).
    fn ddp_step(
        aq: &mut AdminQueue<H, B>,
        o: &BringUpOptions<'_>,
        on: &mut dyn FnMut(Progress),
    ) -> Result<(), BringUpError> {
        use BringUpError as E;
        if o.ddp != DdpPolicy::Ignore {
            let mut buf = [0u8; PKG_INFO_BUF];
            let info = aq.get_pkg_info(&mut buf).map_err(E::cmd(Step::Ddp))?;
            if info.active.is_none() {
                match o.ddp {
                    DdpPolicy::Download(pkg) => {
                        aq.download_pkg(pkg).map_err(E::cmd(Step::Ddp))?;
                    }
                    _ => return Err(E::NoDdpPackage),
                }
            }
        }
        on(Progress::Ddp);
        Ok(())
    }

    /// LAN steps once the VSI exists (the caller frees it when one fails):
    /// the RDMA scheduler branches, the switch rules, the link, the driver
    /// version.
    fn after_vsi(
        aq: &mut AdminQueue<H, B>,
        o: &BringUpOptions<'_>,
        tree: &mut Tree,
        port: &mut PortInfo,
        vsi_num: u16,
        on: &mut dyn FnMut(Progress),
    ) -> Result<(Branches, MacFilters, cmd::LinkStatus), BringUpError> {
        use BringUpError as E;
        let mut branch = Branches::new();
        for tc in (0..8u8).filter(|t| o.rdma_tcs & (1 << t) != 0) {
            let b = aq
                .sched_cfg_vsi_rdma(tree, tc, o.rdma_qsets_per_tc)
                .map_err(E::cmd(Step::RdmaBranch))?;
            let _ = branch.push(b);
        }
        on(Progress::RdmaBranch);
        let mac = port.mac.unwrap_or_default();
        let mut filters = MacFilters::new();
        filters
            .add_mac_and_broadcast(aq, mac, vsi_num, o.veb, false)
            .map_err(E::cmd(Step::SwitchRules))?;
        on(Progress::SwitchRules);
        let link = Self::link_step(aq, o, port)?;
        on(Progress::Link);
        if let Some(v) = &o.driver_version {
            aq.send_driver_version(v).map_err(E::cmd(Step::DriverVersion))?;
        }
        Ok((branch, filters, link))
    }

    /// The link step: link events on; when the link is down, restart
    /// auto-negotiation and wait up to `link_wait` for it (an error only
    /// when the options require the link).
    fn link_step(
        aq: &mut AdminQueue<H, B>,
        o: &BringUpOptions<'_>,
        port: &mut PortInfo,
    ) -> Result<cmd::LinkStatus, BringUpError> {
        use BringUpError as E;
        aq.set_event_mask(port.lport, cmd::LINUX_EVENT_MASK).map_err(E::cmd(Step::Link))?;
        let mut link = aq.get_link_status(port.lport, Some(true)).map_err(E::cmd(Step::Link))?;
        if !link.up() {
            aq.restart_an(port, true, 0).map_err(E::cmd(Step::Link))?;
            let deadline = H::now().saturating_add(o.link_wait);
            loop {
                link = aq.get_link_status(port.lport, None).map_err(E::cmd(Step::Link))?;
                if link.up() || H::now() >= deadline {
                    break;
                }
                let pause_until = H::now().saturating_add(Duration::from_millis(10));
                wait_until::<H>(pause_until, || false);
            }
            if !link.up() && o.require_link {
                return Err(E::LinkDown);
            }
        }
        Ok(link)
    }

    /// Step 26: the RDMA layer closes (PE filter off, qsets removed), then
    /// Free VSI, Queue Shutdown and the AQ off.
    pub fn shut_down(self) -> Result<(), BringUpError> {
        let E810 { mut lan, device, .. } = self;
        let r = lan.close_device(device);
        let r2 = lan.shut_down();
        if let Err(e) = r2 {
            return Err(BringUpError::Command(Step::AdminQueue, e));
        }
        r.map_err(|_| {
            BringUpError::Command(Step::Probe, CmdError::BadResponse("RDMA close failed"))
        })
    }
}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

impl Display for BringUpError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            BringUpError::ResetTimeout(step) => {
                write!(f, "PF bring-up: wait timed out at {step:?}")
            }
            BringUpError::FirmwareRecovery => f.write_str("PF bring-up: firmware in recovery mode"),
            BringUpError::Command(step, e) => write!(f, "PF bring-up at {step:?}: {e}"),
            BringUpError::RdmaDisabled => {
                f.write_str("PF bring-up: RDMA disabled (no capability or more than 4 PFs)")
            }
            BringUpError::NoDdpPackage => {
                f.write_str("PF bring-up: no DDP package active and none supplied")
            }
            BringUpError::NoMac => f.write_str("PF bring-up: firmware reports no LAN MAC"),
            BringUpError::LinkDown => f.write_str("PF bring-up: link stayed down"),
            BringUpError::BadOptions(why) => write!(f, "PF bring-up options refused: {why}"),
            BringUpError::MsixOutOfRange { available } => {
                write!(f, "PF bring-up: MSI-X vectors beyond the function's {available}")
            }
            BringUpError::Probe(e) => write!(f, "PF bring-up: RDMA probe failed: {e}"),
        }
    }
}

impl Error for BringUpError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            BringUpError::Command(_, e) => Some(e),
            BringUpError::Probe(e) => Some(e),
            _ => None,
        }
    }
}
