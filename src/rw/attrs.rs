//! The rw layer's plain parts: the device attributes and per-QP limits the
//! decisions read, [`RwError`], and the decisions and sizing themselves
//! (spec data-path §7.1, §7.8). Contexts (`ctx`) and the MR pool (`pool`)
//! build on these; the Linux-named entry points in `mod.rs` on all three.

use core::error::Error;
use core::fmt::{self, Display, Formatter};

/// The page size MRs are registered with by the rw layer (rw.c passes
/// `PAGE_SIZE` to `ib_map_mr_sg`).
pub const RW_PAGE_SIZE: u64 = 4096;

/// Upper bound of pages per MR used by rw.c (`rdma_rw_fr_page_list_len`
/// clamps the device value to 256; spec §7.1).
pub const RW_MAX_PAGES_PER_MR: u32 = 256;

/// Device attributes the rw decisions depend on (spec §7.1, `ib_device_attr`
/// and the `rdma_protocol_iwarp`/`rdma_cap_read_inv` port queries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DeviceAttrs {
    /// The port runs iWARP (`rdma_protocol_iwarp`).
    pub rdma_protocol_iwarp: bool,
    /// The device supports `RDMA_READ_WITH_INV` (`rdma_cap_read_inv`, iWARP).
    pub cap_read_inv: bool,
    /// `attrs.max_sgl_rd` (0 on E810: no limit that forces MRs for READs).
    pub max_sgl_rd: u32,
    /// `attrs.max_sge_rd`.
    pub max_sge_rd: u32,
    /// `attrs.max_send_sge`.
    pub max_send_sge: u32,
    /// `attrs.max_fast_reg_page_list_len`.
    pub max_fast_reg_page_list_len: u32,
    /// `attrs.max_pi_fast_reg_page_list_len` (0 on E810).
    pub max_pi_fast_reg_page_list_len: u32,
    /// `attrs.max_qp_wr`.
    pub max_qp_wr: u32,
    /// The lkey used for SGEs outside MRs (`pd->local_dma_lkey`).
    pub local_dma_lkey: u32,
    /// `ib_uses_virt_dma` (software devices): the IOVA path is not tried.
    pub uses_virt_dma: bool,
    /// `IB_DEVICE_INTEGRITY_HANDOVER` (E810: no).
    pub integrity_handover: bool,
}

impl DeviceAttrs {
    /// E810 in RoCEv2 mode with `max_sge` send/read SGEs (13, or 6 with the
    /// OOT default fragment limit; spec §3.4, §7.9). `max_qp_wr` and the
    /// local DMA lkey come from the running device.
    pub const fn e810_roce(max_sge: u32, max_qp_wr: u32, local_dma_lkey: u32) -> Self {
        DeviceAttrs {
            rdma_protocol_iwarp: false,
            cap_read_inv: false,
            max_sgl_rd: 0,
            max_sge_rd: max_sge,
            max_send_sge: max_sge,
            max_fast_reg_page_list_len: 262_144,
            max_pi_fast_reg_page_list_len: 0,
            max_qp_wr,
            local_dma_lkey,
            uses_virt_dma: false,
            integrity_handover: false,
        }
    }

    /// E810 in iWARP mode (READs need MRs, read-with-invalidate supported).
    pub const fn e810_iwarp(max_sge: u32, max_qp_wr: u32, local_dma_lkey: u32) -> Self {
        let mut d = Self::e810_roce(max_sge, max_qp_wr, local_dma_lkey);
        d.rdma_protocol_iwarp = true;
        d.cap_read_inv = true;
        d
    }
}

/// Which way an R/W context moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Direction {
    /// Local memory is sent to the peer: RDMA WRITE (`DMA_TO_DEVICE`).
    ToDevice,
    /// The peer's memory is read into local memory: RDMA READ
    /// (`DMA_FROM_DEVICE`).
    FromDevice,
}

impl Direction {
    pub(super) fn buffer_direction(self) -> irdma_hal::BufferDirection {
        match self {
            Direction::ToDevice => irdma_hal::BufferDirection::DriverToDevice,
            Direction::FromDevice => irdma_hal::BufferDirection::DeviceToDriver,
        }
    }
}

/// Errors of the rw layer, each with its Linux errno equivalent
/// ([`RwError::errno`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RwError {
    /// Nothing left to transfer after `sg_offset` (Linux: -EIO).
    NothingToTransfer,
    /// Invalid input: zero bvec count or size, an iterator that leaves the
    /// array, a gap an MR cannot map, a zero SGE limit… (-EINVAL).
    InvalidArgument,
    /// `Hal::share` failed (-ENOMEM); nothing stays mapped.
    MapFailed,
    /// The caller-provided context storage (`MAX_SGE`/`MAX_OPS`) or an output
    /// slice is too small; this stands where Linux's kzalloc fails (-ENOMEM).
    NoCapacity,
    /// The MR pool is empty (-EAGAIN).
    PoolEmpty,
    /// The context is already initialised; destroy it first (-EBUSY).
    Busy,
    /// The context is not initialised, or is of the other kind (scatterlist
    /// vs bvec) for this call (-EINVAL).
    WrongContext,
    /// Integrity (signature) offload: E810 has no integrity handover, so an
    /// integrity QP is refused as `ib_create_named_qp` refuses it (-EINVAL).
    IntegrityUnsupported,
    /// The IOVA mapper failed with this (negative) errno.
    Iova(i32),
    /// The context holds MRs of another [`MrPool`](super::MrPool) (or of an earlier
    /// incarnation of this one, before `cleanup` and `init`): nothing was
    /// done, the context keeps its MRs; give it the pool it took them from
    /// (-EINVAL; Linux cannot make this mistake: its pool is the QP's).
    WrongPool,
    /// The context's entry for an MR is stale: the pool has that MR free, or
    /// handed it out again since (its generation moved on). Nothing was done
    /// (-EINVAL).
    StaleMr,
}

impl RwError {
    /// The negative errno Linux returns for the same condition.
    pub const fn errno(self) -> i32 {
        match self {
            RwError::NothingToTransfer => -5,
            RwError::InvalidArgument
            | RwError::WrongContext
            | RwError::IntegrityUnsupported
            | RwError::WrongPool
            | RwError::StaleMr => -22,
            RwError::MapFailed | RwError::NoCapacity => -12,
            RwError::PoolEmpty => -11,
            RwError::Busy => -16,
            RwError::Iova(e) => e,
        }
    }
}

/// `rdma_rw_fr_page_list_len`: pages per MR (spec §7.1).
pub const fn fr_page_list_len(dev: &DeviceAttrs, pi: bool) -> u32 {
    let n = if pi { dev.max_pi_fast_reg_page_list_len } else { dev.max_fast_reg_page_list_len };
    if n < RW_MAX_PAGES_PER_MR { n } else { RW_MAX_PAGES_PER_MR }
}

/// `rdma_rw_can_use_mr` (spec §7.1).
pub const fn can_use_mr(dev: &DeviceAttrs, force_mr: bool) -> bool {
    dev.rdma_protocol_iwarp || dev.max_sgl_rd != 0 || force_mr
}

/// `rdma_rw_io_needs_mr` (spec §7.1).
pub const fn io_needs_mr(dev: &DeviceAttrs, force_mr: bool, dir: Direction, nents: usize) -> bool {
    if let Direction::FromDevice = dir {
        if dev.rdma_protocol_iwarp {
            return true;
        }
        if dev.max_sgl_rd != 0 && nents > dev.max_sgl_rd as usize {
            return true;
        }
    }
    force_mr
}

/// `rdma_rw_mr_factor`: how many MRs (or SGE-limited WRs) a transfer of
/// `maxpages` pages needs (spec §7.8).
///
/// Stricter than Linux (spec §11.5): computed without u32 wrap-around
/// (Linux returns 0 for `u32::MAX`). A device reporting 0 pages per MR / 0
/// read SGEs gives `u32::MAX` for any non-zero `maxpages` (saturated)
/// instead of dividing by zero.
pub fn rdma_rw_mr_factor(dev: &DeviceAttrs, force_mr: bool, maxpages: u32) -> u32 {
    let mr_pages =
        if can_use_mr(dev, force_mr) { fr_page_list_len(dev, false) } else { dev.max_sge_rd };
    if maxpages == 0 {
        return 0;
    }
    if mr_pages == 0 {
        return u32::MAX;
    }
    // Fits: ceil(a / b) <= a for b >= 1.
    u64::from(maxpages).div_ceil(u64::from(mr_pages)) as u32
}

/// The factor shared by [`rdma_rw_max_send_wr`] and [`rdma_rw_init_qp`]:
/// 1, plus 2 (REG_MR + LOCAL_INV) when MRs may be used or the integrity flag
/// is set (spec §7.8).
pub const fn send_wr_factor(dev: &DeviceAttrs, force_mr: bool, integrity: bool) -> u32 {
    if integrity || can_use_mr(dev, force_mr) { 3 } else { 1 }
}

/// `rdma_rw_max_send_wr`: send-queue WRs `max_rdma_ctxs` contexts need,
/// saturating at `u32::MAX`, not clamped to `max_qp_wr` (spec §7.8).
pub fn rdma_rw_max_send_wr(
    dev: &DeviceAttrs,
    force_mr: bool,
    max_rdma_ctxs: u32,
    integrity: bool,
) -> u32 {
    send_wr_factor(dev, force_mr, integrity).saturating_mul(max_rdma_ctxs)
}

/// The QP capabilities `rdma_rw_init_qp` adjusts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RwQpCap {
    /// `cap.max_send_wr`, raised for the R/W contexts then clamped.
    pub max_send_wr: u32,
    /// `cap.max_rdma_ctxs`: R/W contexts the QP will run at once.
    pub max_rdma_ctxs: u32,
}

/// `rdma_rw_init_qp` (spec §7.8): raises `cap.max_send_wr` by
/// factor × `max_rdma_ctxs` and clamps it to `max_qp_wr`. Nothing changes
/// when `max_rdma_ctxs` is 0.
///
/// Stricter than Linux: the arithmetic saturates instead of wrapping in u32
/// (spec §11.6), and an integrity QP on a device without integrity handover
/// (E810) is refused with [`RwError::IntegrityUnsupported`], as
/// `ib_create_named_qp` refuses it before this runs (spec §7.5).
pub fn rdma_rw_init_qp(
    dev: &DeviceAttrs,
    force_mr: bool,
    cap: &mut RwQpCap,
    integrity: bool,
) -> Result<(), RwError> {
    if integrity && !dev.integrity_handover {
        return Err(RwError::IntegrityUnsupported);
    }
    if cap.max_rdma_ctxs == 0 {
        return Ok(());
    }
    let extra = rdma_rw_max_send_wr(dev, force_mr, cap.max_rdma_ctxs, integrity);
    cap.max_send_wr = cap.max_send_wr.saturating_add(extra).min(dev.max_qp_wr);
    Ok(())
}

/// Per-QP state the R/W contexts read: device attributes, SGE limits and
/// `force_mr` (spec §7.1, LNX verbs.c:ib_create_named_qp).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RwQp {
    /// The device.
    pub dev: DeviceAttrs,
    /// Force MRs for every transfer (rw.c's `force_mr` module parameter).
    pub force_mr: bool,
    /// SGEs per RDMA WRITE WR (`cap.max_send_sge`).
    pub max_write_sge: u32,
    /// SGEs per RDMA READ WR (`min(cap.max_send_sge, attrs.max_sge_rd)`).
    pub max_read_sge: u32,
}

impl RwQp {
    /// The limits of a QP created with `cap.max_send_sge = max_send_sge`.
    pub fn new(dev: DeviceAttrs, force_mr: bool, max_send_sge: u32) -> Self {
        RwQp {
            dev,
            force_mr,
            max_write_sge: max_send_sge,
            max_read_sge: max_send_sge.min(dev.max_sge_rd),
        }
    }

    /// Pages one MR of this QP maps in the rw layer.
    pub fn pages_per_mr(&self) -> u32 {
        fr_page_list_len(&self.dev, false)
    }
}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

impl Display for RwError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            RwError::NothingToTransfer => f.write_str("nothing to transfer after the offset"),
            RwError::InvalidArgument => f.write_str("invalid rdma_rw argument"),
            RwError::MapFailed => f.write_str("buffer could not be shared with the device"),
            RwError::NoCapacity => f.write_str("context storage or output slice too small"),
            RwError::PoolEmpty => f.write_str("MR pool empty"),
            RwError::Busy => f.write_str("context already initialised"),
            RwError::WrongContext => f.write_str("context not initialised or of the other kind"),
            RwError::IntegrityUnsupported => f.write_str("integrity offload not supported on E810"),
            RwError::Iova(e) => write!(f, "IOVA mapper failed ({e})"),
            RwError::WrongPool => f.write_str("context holds MRs of another MR pool"),
            RwError::StaleMr => {
                f.write_str("stale MR entry: the MR was returned or handed out again")
            }
        }
    }
}

impl Error for RwError {}
