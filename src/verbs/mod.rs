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
mod mr;
mod poller;
mod qp;
mod shared;
mod table;
mod wq;

pub use ah::{Ah, AhAttr, gid_of, ip_of_gid};
pub use cq::{Cq, MAX_PENDING_RESIZES};
pub use mr::{FastRegMr, MAX_MR_SIZE, Mr, MrDesc};
pub use poller::CqPoller;
pub use qp::{
    AddressVector, GRH_BYTES, GSI_QKEY, IpAddr, PostError, PostErrorKind, Qp, QpAttr, QpCap,
    QpInitAttr, QpState,
};
pub use shared::{BUSY_TRIES, SharedQp, SharedSqStats};
pub use wq::{Wq, WqInitAttr, WqType};

use core::error::Error;
use core::fmt::{self, Display, Formatter};
use irdma_hal::{Bar, DmaError, Hal};

use crate::Phrase;
use crate::cqp::cmd::destroy_cq_cmd;
use crate::cqp::engine::CqpError;
use crate::device::{Device, cqp_codes};
use crate::res::{AccessError, IdError, PbleError, StagError};

/// Why a verb failed.
///
/// Sixteen bytes (a pinned unit test keeps it so), as are `Result<u32,
/// VerbsError>` and `Result<(), VerbsError>`: the limit names are a
/// one-byte [`Quantity`], phrases a one-pointer [`Phrase`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum VerbsError {
    /// The CQP op failed (hardware major/minor inside) or timed out.
    Cqp(CqpError),
    /// DMA memory could not be had.
    Dma(DmaError),
    /// Every id of that kind is in use (or another id-table refusal).
    Id(IdError),
    /// STag bookkeeping refused.
    Stag(StagError),
    /// The PBLE pool refused.
    Pble(PbleError),
    /// The access flags cannot be granted.
    Access(AccessError),
    /// A requested size is above what the device allows.
    AboveLimit {
        /// What.
        what: Quantity,
        /// Largest allowed.
        max: u32,
        /// Requested (a count above `u32::MAX` is reported as `u32::MAX`).
        requested: u32,
    },
    /// An MR length above [`MAX_MR_SIZE`] (2^45 bytes, a
    /// limit wider than [`AboveLimit`](Self::AboveLimit)'s `max`).
    TooLong {
        /// The length asked for.
        length: u64,
    },
    /// An argument is unusable; `what` says which.
    Invalid {
        /// What.
        what: Phrase,
    },
    /// The transition is not allowed from the QP's current state.
    InvalidState,
    /// The object was destroyed.
    Destroyed,
    /// The object still has users (a CQ that live QPs complete to); destroy
    /// them first. Dropping it instead defers its destroy until they go.
    InUse {
        /// What.
        what: Quantity,
        /// How many users.
        users: u32,
    },
    /// More PBLE SDs than the driver tracks.
    Capacity,
}

/// What a [`VerbsError::AboveLimit`] or [`VerbsError::InUse`] is about, one byte (a `&'static str`
/// would make every `Result<_, VerbsError>` eight bytes larger).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(u8)]
#[non_exhaustive]
pub enum Quantity {
    /// `cqe`
    Cqe,
    /// `length`
    Length,
    /// `max_pages`
    MaxPages,
    /// `max_sge`
    MaxSge,
    /// `max_wr`
    MaxWr,
    /// `neighbour entries`
    NeighbourEntries,
    /// `pages`
    Pages,
    /// `registered QPs`
    RegisteredQPs,
    /// `max_inline_data`
    MaxInlineData,
    /// `max_recv_sge`
    MaxRecvSge,
    /// `max_recv_wr`
    MaxRecvWr,
    /// `max_send_sge`
    MaxSendSge,
    /// `max_send_wr`
    MaxSendWr,
    /// `GSI QP 1`
    GsiQp1,
    /// `CQ with live QPs`
    CqWithLiveQps,
}

impl Quantity {
    /// Its name, e.g. `"max_send_sge"`.
    pub const fn name(self) -> &'static str {
        match self {
            Quantity::Cqe => "cqe",
            Quantity::Length => "length",
            Quantity::MaxPages => "max_pages",
            Quantity::MaxSge => "max_sge",
            Quantity::MaxWr => "max_wr",
            Quantity::NeighbourEntries => "neighbour entries",
            Quantity::Pages => "pages",
            Quantity::RegisteredQPs => "registered QPs",
            Quantity::MaxInlineData => "max_inline_data",
            Quantity::MaxRecvSge => "max_recv_sge",
            Quantity::MaxRecvWr => "max_recv_wr",
            Quantity::MaxSendSge => "max_send_sge",
            Quantity::MaxSendWr => "max_send_wr",
            Quantity::GsiQp1 => "GSI QP 1",
            Quantity::CqWithLiveQps => "CQ with live QPs",
        }
    }
}

impl VerbsError {
    /// The hardware (major, minor) codes, if the device reported some.
    pub fn hw_codes(&self) -> Option<(u16, u16)> {
        match self {
            VerbsError::Cqp(e) => cqp_codes(*e),
            _ => None,
        }
    }
}

impl From<CqpError> for VerbsError {
    fn from(e: CqpError) -> Self {
        VerbsError::Cqp(e)
    }
}
impl From<DmaError> for VerbsError {
    fn from(e: DmaError) -> Self {
        VerbsError::Dma(e)
    }
}
impl From<IdError> for VerbsError {
    fn from(e: IdError) -> Self {
        VerbsError::Id(e)
    }
}
impl From<StagError> for VerbsError {
    fn from(e: StagError) -> Self {
        VerbsError::Stag(e)
    }
}
impl From<PbleError> for VerbsError {
    fn from(e: PbleError) -> Self {
        VerbsError::Pble(e)
    }
}
impl From<AccessError> for VerbsError {
    fn from(e: AccessError) -> Self {
        VerbsError::Access(e)
    }
}
impl From<crate::device::BackError> for VerbsError {
    fn from(e: crate::device::BackError) -> Self {
        match e {
            crate::device::BackError::Dma(d) => VerbsError::Dma(d),
            crate::device::BackError::Cqp(c) => VerbsError::Cqp(c),
            crate::device::BackError::Capacity => VerbsError::Capacity,
        }
    }
}

/// A protection domain (`ib_pd`). GEN_2 PDs are software ids only (spec
/// control-path §5.4; irdma_kcompat.c: irdma_alloc_pd): ids 0–2 reserved.
///
/// # Example
///
/// ```
/// # use irdma::prelude::*;
/// # use irdma_testkit::{FakeHal, ModelBar};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let bar = ModelBar::standalone(mock_bar::Config::default());
/// # let lan = LanInfo::single_tc(0, 6, [2, 0, 0, 0, 0, 0x0a], 1500);
/// # let dev: Device<FakeHal, ModelBar> = Device::probe(bar, lan, Profile::SMALL)?;
/// let pd = dev.alloc_pd()?;
/// assert!(pd.id() > 2);
/// drop(pd); // frees the id
/// # Ok(())
/// # }
/// ```
pub struct Pd<'d, H: Hal, B: Bar + Clone> {
    dev: &'d Device<H, B>,
    id: u32,
}

impl<'d, H: Hal, B: Bar + Clone> Pd<'d, H, B> {
    /// The PD id (18 bits).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The device.
    pub fn device(&self) -> &'d Device<H, B> {
        self.dev
    }
}

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

impl<H: Hal, B: Bar + Clone> Drop for Pd<'_, H, B> {
    fn drop(&mut self) {
        if let Some(ids) = self.dev.res.lock().ids.as_mut() {
            if ids.pd_refs.get(self.id as usize).is_some_and(|r| *r > 0) {
                // QPs or MRs still use the id: freed with the last of them.
                if let Some(w) = ids.pd_orphan.get_mut(self.id as usize / 64) {
                    *w |= 1 << (self.id % 64);
                }
            } else {
                let _ = ids.pds.free(self.id);
            }
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

/// A `&'static mut [T]` over a DMA allocation the device never sees, used as
/// fixed-capacity bookkeeping memory.
///
/// # Safety
///
/// `dma` must outlive every use of the slice, must not be handed to the
/// device, and `T` must be valid when all-zero (the pages are zeroed) and
/// need at most page alignment.
pub(crate) unsafe fn dma_slice<H: Hal, T>(
    dma: &irdma_hal::Dma<H>,
    len: usize,
) -> Option<&'static mut [T]> {
    let bytes = len.checked_mul(core::mem::size_of::<T>())?;
    if bytes > dma.len() || core::mem::align_of::<T>() > irdma_hal::PAGE_SIZE {
        return None;
    }
    // SAFETY: the allocation is `dma.len()` ≥ `bytes` bytes, page-aligned
    // (so aligned for `T`), zeroed (valid `T`s per the caller), exclusively
    // owned by the caller's object and never shared with the device, and
    // outlives the slice per this function's contract.
    Some(unsafe { core::slice::from_raw_parts_mut(dma.vaddr().as_ptr().cast::<T>(), len) })
}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

impl Display for Quantity {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl PartialEq<&str> for Quantity {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

impl Display for VerbsError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            VerbsError::Cqp(e) => e.fmt(f),
            VerbsError::Dma(e) => e.fmt(f),
            VerbsError::Id(e) => e.fmt(f),
            VerbsError::Stag(e) => e.fmt(f),
            VerbsError::Pble(e) => e.fmt(f),
            VerbsError::Access(e) => e.fmt(f),
            VerbsError::AboveLimit { what, requested, max } => {
                write!(f, "{what} {requested} above the device limit {max}")
            }
            VerbsError::TooLong { length } => {
                let max = crate::verbs::MAX_MR_SIZE;
                write!(f, "length {length} above the device limit {max}")
            }
            VerbsError::Invalid { what } => write!(f, "invalid argument: {what}"),
            VerbsError::InvalidState => f.write_str("not allowed in the QP's current state"),
            VerbsError::Destroyed => f.write_str("the object was destroyed"),
            VerbsError::Capacity => f.write_str("more PBLE SDs than the driver tracks"),
            VerbsError::InUse { what, users } => write!(f, "{what}: {users} users left"),
        }
    }
}

impl Error for VerbsError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            VerbsError::Cqp(e) => e.source(),
            VerbsError::Dma(e) => e.source(),
            VerbsError::Id(e) => e.source(),
            VerbsError::Stag(e) => e.source(),
            VerbsError::Pble(e) => e.source(),
            VerbsError::Access(e) => e.source(),
            _ => None,
        }
    }
}
