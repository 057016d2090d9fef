//! Verbs objects on a brought-up [`Device`]: PD, CQ, QP (RC over RoCEv2),
//! MR (registered and fast-register), with `ib_verbs` names.
//!
//! Every object borrows the device (`'d`), so the device cannot be closed
//! while one is alive, and dropping an object destroys it. `destroy(&mut
//! self)` does the same explicitly and reports the hardware error; after a
//! failed destroy the object is still alive and the call may be retried. If
//! the destroy in `Drop` fails, the memory and ids the device may still use
//! are quarantined on the device (see the crate docs' "Safety contract").
//! A CQ with live QPs refuses `destroy` ([`VerbsError::InUse`]) and, when
//! dropped, is destroyed with its last QP; a PD keeps its id while QPs or
//! MRs use it.
//!
//! Ring and tracking memory comes from the platform's DMA pages ([`irdma_hal::Dma`]);
//! the software tracking arrays of the rings (`sq_wrtrk`, `rq_wrid`, level-2
//! leaf lists) are carved from DMA pages the device is never told about, so
//! the driver needs no allocator and no fixed per-queue maximum.
//!
//! The data path ([`Qp::post_send`], [`Qp::post_recv`], [`Cq::poll`],
//! [`Cq::req_notify`]) is a thin wrapper over [`crate::uk`]; it takes no
//! lock, only reads the QP's error flag (an atomic set by the control path).

mod ah;
mod cq;
mod error;
mod lookup;
mod mr;
mod pd;
mod poller;
mod qp;
mod shared;
mod table;
pub mod wait;
mod wq;

pub use ah::{Ah, AhAttr, gid_of, ip_of_gid};
pub use cq::{Cq, CqOptions, MAX_PENDING_RESIZES};
pub use error::{Quantity, VerbsError};
pub use mr::{FastRegMr, MAX_MR_SIZE, Mr, MrDesc};
pub use pd::Pd;
pub use poller::CqPoller;
pub use qp::{
    AddressVector, GRH_BYTES, GSI_QKEY, IpAddr, PostError, PostErrorKind, Qp, QpAttr, QpCap,
    QpInitAttr, QpState,
};
pub use shared::{BUSY_TRIES, SharedQp, SharedSqStats};
pub use wq::{Wq, WqInitAttr, WqType};

use irdma_hal::{Bar, Hal};

use crate::Phrase;
use crate::cqp::cmd::destroy_cq_cmd;
use crate::cqp::engine::CqpError;
use crate::device::Device;

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// Refuses an object (PD, CQ, WQ) of another device: its id means
    /// nothing here, and the reference this device would count is the
    /// other device's (`what` names the object in the error).
    #[inline(never)] // cold, shared by every create call (code size)
    pub(crate) fn own(
        &self,
        of: &Device<H, B>,
        what: &'static &'static str,
    ) -> Result<(), VerbsError> {
        if core::ptr::eq(self, of) {
            Ok(())
        } else {
            Err(VerbsError::Invalid { what: Phrase::new(what) })
        }
    }
}

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// Takes a reference on PD `pd` and on each CQ of `cqs` for a new user
    /// (a QP or MR the device now knows of).
    pub(crate) fn hold(&self, pd: Option<u32>, cqs: &[u32]) {
        let mut res = self.res.lock();
        let Some(ids) = res.ids.as_mut() else { return };
        if let Some(r) = pd.and_then(|p| ids.pd_refs.get_mut(p as usize)) {
            *r = r.saturating_add(1);
        }
        for c in cqs {
            if let Some(r) = ids.cq_refs.get_mut(*c as usize) {
                *r = r.saturating_add(1);
            }
        }
    }

    /// Drops the references [`Device::hold`] took, once the user was
    /// destroyed in hardware. A PD dropped while in use is freed with its
    /// last user; a CQ dropped while in use is destroyed with its last QP
    /// (DESTROY_CQ; if that fails its memory is quarantined).
    pub(crate) fn release_refs(&self, pd: Option<u32>, cqs: &[u32]) {
        let mut res = self.res.lock();
        let res = &mut *res;
        let Some(ids) = res.ids.as_mut() else { return };
        if let Some(p) = pd
            && let Some(r) = ids.pd_refs.get_mut(p as usize)
        {
            *r = r.saturating_sub(1);
            let bit = 1u64 << (p % 64);
            if let Some(w) = ids.pd_orphan.get_mut(p as usize / 64)
                && *r == 0
                && *w & bit != 0
            {
                *w &= !bit;
                let _ = ids.pds.free(p);
            }
        }
        for c in cqs {
            let Some(r) = ids.cq_refs.get_mut(*c as usize) else { continue };
            *r = r.saturating_sub(1);
            if *r != 0 {
                continue;
            }
            let Some(pos) = res.deferred_cqs.iter().position(|d| d.cmd.cq_id == *c) else {
                continue;
            };
            let d = res.deferred_cqs.swap_remove(pos);
            let cmd = destroy_cq_cmd(&d.cmd);
            match self.exec_cmd(cmd) {
                Ok(()) => {
                    let _ = ids.cqs.free(*c);
                }
                Err(_) => {
                    d.into_bufs().for_each(|b| self.quarantine(b));
                    self.quarantine_ids(1);
                }
            }
        }
    }

    /// `ib_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<Pd<'_, H, B>, VerbsError> {
        if self.is_gone() {
            return Err(VerbsError::Cqp(CqpError::DeviceGone));
        }
        let mut res = self.res.lock();
        let ids = res.ids.as_mut().ok_or(VerbsError::Destroyed)?;
        let id = ids.pds.alloc_next()?;
        Ok(Pd { dev: self, id })
    }

    /// Ids in use (PDs, QPs, CQs, MR indexes, ARP entries) and free PBLEs:
    /// what a leak test compares before and after.
    pub fn resource_usage(&self) -> ResourceUsage {
        let res = self.res.lock();
        match res.ids.as_ref() {
            Some(i) => ResourceUsage {
                pds: i.pds.in_use(),
                qps: i.qps.in_use(),
                cqs: i.cqs.in_use(),
                mrs: i.stags.ids().in_use(),
                arp: i.arp_ids.in_use(),
                ahs: i.ah_ids.in_use(),
                pble_free: i.pble.free_entries(),
                backed_sds: res.sds.sds.len() as u32,
            },
            None => ResourceUsage::default(),
        }
    }
}

/// Counts of what is allocated, for leak checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ResourceUsage {
    /// PD ids handed out (reserved ids not counted).
    pub pds: u32,
    /// QP ids handed out (reserved ids not counted).
    pub qps: u32,
    /// CQ ids handed out (reserved ids not counted).
    pub cqs: u32,
    /// MR indexes handed out (reserved ids not counted).
    pub mrs: u32,
    /// ARP entries handed out (reserved ids not counted).
    pub arp: u32,
    /// Address-handle ids handed out (the reserved index 0 not counted).
    pub ahs: u32,
    /// Free PBLEs.
    pub pble_free: u32,
    /// SDs backed (static + PBLE chunks; chunks stay backed once added, as
    /// in Linux).
    pub backed_sds: u32,
}

/// The unit tests' device: probed with `profile` on a standalone model.
#[cfg(test)]
pub(crate) fn model_device(
    profile: crate::res::Profile,
) -> Device<irdma_testkit::FakeHal, irdma_testkit::ModelBar> {
    let bar = irdma_testkit::ModelBar::standalone(mock_bar::Config::default());
    let lan = crate::lan::LanInfo::single_tc(0, 6, [2, 0, 0, 0, 0, 0x0a], 1500);
    Device::probe(bar, lan, profile).unwrap()
}

/// The unit tests' QP: eight WRs and one SGE each way.
#[cfg(test)]
pub(crate) fn small_cap() -> QpCap {
    QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, ..QpCap::default() }
}
