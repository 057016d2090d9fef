//! Receive work queues (`ib_create_wq` with `IB_WQT_RQ`): a receive ring
//! created on its own, sized like a QP's RQ, that a QP then takes as its
//! receive queue ([`Device::create_qp_on_wq`]). GEN_2 has no hardware WQ
//! object (no CQP op): the ring is programmed into the QP context at
//! CREATE_QP. Receives may be posted before the QP exists; the device reads
//! them once the QP is RTR (RQ WQEs need no doorbell, spec data-path §2.2).

use irdma_hal::{Bar, BufferDirection, Dma, Hal};

use super::cq::Cq;
use super::error::Quantity;
use super::error::VerbsError;
use super::error::{PostError, PostErrorKind};
use crate::Phrase;
use crate::device::Device;
use crate::uk::Rq;
use crate::uk::mem::dma_slice;
use crate::uk::mem::static_view;
use crate::uk::sizing::{MAX_FRAGS, calc_rq};
use crate::wr::RecvWr;

/// WQ types (`enum ib_wq_type`); E810 has receive WQs only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum WqType {
    /// `IB_WQT_RQ`.
    Rq,
}

/// `ib_wq_init_attr`: `max_wr` and `max_sge` are written back rounded up to
/// what was allocated, never smaller.
pub struct WqInitAttr<'a, 'd, H: Hal, B: Bar + Clone> {
    /// Type.
    pub wq_type: WqType,
    /// Receive WRs.
    pub max_wr: u32,
    /// SGEs per receive WR (≤ 13).
    pub max_sge: u32,
    /// The CQ its completions go to (the QP's receive CQ).
    pub cq: &'a Cq<'d, H, B>,
}

/// A receive work queue (`ib_wq`).
pub struct Wq<'d, H: Hal, B: Bar + Clone> {
    // Views `ring`/`trk`: declared first.
    pub(crate) rq: Rq<'static>,
    pub(crate) _dev: &'d Device<H, B>,
    pub(crate) cq_id: u32,
    pub(crate) depth_quanta: u32,
    pub(crate) shift: u8,
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
    pub(crate) ring: Dma<H>,
    pub(crate) trk: Dma<H>,
}

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// `ib_create_wq` (type RQ). Sizing as a QP's RQ (uk.c:
    /// irdma_uk_calc_depth_shift_rq, irdma_get_rqdepth); above the device
    /// limits → [`VerbsError::AboveLimit`].
    pub fn create_wq<'d>(
        &'d self,
        attr: &mut WqInitAttr<'_, 'd, H, B>,
    ) -> Result<Wq<'d, H, B>, VerbsError> {
        self.own(attr.cq.device(), &"CQ of another device")?;
        let WqType::Rq = attr.wq_type;
        if attr.max_sge > MAX_FRAGS {
            return Err(VerbsError::AboveLimit {
                what: Quantity::MaxSge,
                requested: attr.max_sge,
                max: MAX_FRAGS,
            });
        }
        if attr.max_wr == 0 {
            return Err(VerbsError::Invalid { what: Phrase::new(&"max_wr 0") });
        }
        let s = calc_rq(attr.max_wr, attr.max_sge.max(1)).map_err(|_| VerbsError::AboveLimit {
            what: Quantity::MaxWr,
            requested: attr.max_wr,
            max: 32768,
        })?;
        let ring = Dma::<H>::with_bytes(s.depth_quanta as usize * 32, BufferDirection::Both)?;
        let size = s.depth_quanta >> s.shift;
        let trk = Dma::<H>::with_bytes(size as usize * 8, BufferDirection::DriverToDevice)?;
        let frags = ((2u32 << s.shift) - 1).min(MAX_FRAGS).max(attr.max_sge);
        // SAFETY: `ring` and `trk` move into the returned `Wq` (and later
        // into the QP that takes it) next to `rq`; their pages never move,
        // live as long as `rq` is used, and `rq` never leaves those objects.
        // `trk` is never shared with the device; `u64` is valid all-zero.
        let (mem, wrid) = unsafe {
            (
                static_view(&ring, 0, s.depth_quanta as usize * 32),
                dma_slice::<H, u64>(&trk, size as usize),
            )
        };
        let (Some(mem), Some(wrid)) = (mem, wrid) else {
            return Err(VerbsError::Invalid { what: Phrase::new(&"WQ memory") });
        };
        let rq = Rq::new(mem, wrid, size, s.shift, frags)
            .map_err(|_| VerbsError::Invalid { what: Phrase::new(&"WQ ring") })?;
        let max_wr = s.reported_max_wr.max(attr.max_wr);
        attr.max_wr = max_wr;
        attr.max_sge = frags;
        Ok(Wq {
            rq,
            _dev: self,
            cq_id: attr.cq.id(),
            depth_quanta: s.depth_quanta,
            shift: s.shift,
            max_wr,
            max_sge: frags,
            ring,
            trk,
        })
    }
}

impl<H: Hal, B: Bar + Clone> Wq<'_, H, B> {
    /// Receive WRs it holds.
    pub fn max_wr(&self) -> u32 {
        self.max_wr
    }

    /// SGEs per receive WR.
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// `ib_post_wq_recv`.
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        for (i, wr) in wrs.iter().enumerate() {
            self.rq
                .post(wr.wr_id, wr.sg_list)
                .map_err(|kind| PostError { bad_wr: i, kind: PostErrorKind::Rq(kind) })?;
        }
        Ok(())
    }
}
