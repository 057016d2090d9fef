//! RC QPs over RoCEv2: CREATE_QP with the GEN_2 RoCE context (spec
//! control-path §7.2, through [`crate::cqp::ctx::QpRoceCtx`]), MODIFY_QP
//! through INIT/RTR/RTS/ERR/RESET (§7.4), DESTROY_QP, and the data path
//! (`post_send`, `post_recv`) over [`crate::uk::QpUk`].

use irdma_hal::{Bar, BufferDirection, Dma, Hal};

use super::cq::Cq;
use super::error::Quantity;
use super::error::VerbsError;
pub use super::error::{PostError, PostErrorKind};
use super::pd::Pd;
use super::wq::Wq;
use crate::Phrase;
use crate::cqp::cmd::{
    ArpAdd, ArpDel, CreateQp, DestroyQp, FlushCodes, FlushState, FlushWqes, ModifyQp, qp_state,
    qp_type,
};
use crate::cqp::ctx::QpRoceCtx;
use crate::cqp::engine::{CqpError, device_may_own};
use crate::device::compl::QpCompl;
use crate::device::{ArpSlot, Device, QpRecord};
use crate::uk::cq::flush_code;
use crate::uk::mem::static_view;
use crate::uk::mem::{HeapRef, dma_slice};
use crate::uk::sizing::{MAX_FRAGS, WqSizing, calc_rq, calc_sq};
use crate::uk::sq::SqWrTrk;
use crate::uk::{PostRecvError, PostSendError, Publish, QpKind, QpUk, Rq, SendQueue, Sq, SqError};
use crate::wr::{RecvWr, SendWr, WorkCompletion};
use irdma_hal::wqe::cqe;

/// RoCEv2 UDP destination port (spec §7.2 @24 DESTPORTNUM).
const ROCE_DPORT: u16 = 4791;
/// Initial UDP source port (verbs.c: irdma_roce_fill_and_set_qpctx_info);
/// replaced at INIT → RTR by [`udp_sport`].
const ROCE_SPORT: u16 = 0xC000;

/// The UDP source port of an RC QP, set at INIT → RTR with an address
/// vector (shared/spec/rocev2-wire.md §1.5; Linux: `irdma_modify_qp_roce`
/// in irdma verbs.c passes the AV's flow label, its own QPN and the remote
/// QPN to `rdma_get_udp_sport` in include/rdma/ib_verbs.h). A flow label of
/// 0 is first replaced by one derived from the two QPNs
/// (`rdma_calc_flow_label`: their 64-bit product folded by 20 and 40 bits,
/// low 20 bits — symmetric, so both ends derive the same label); the label
/// then folds into 14 bits with the top two set
/// (`rdma_flow_label_to_udp_sport`), so the port is always 0xC000..=0xFFFF.
/// Only the port is derived: the context keeps the AV's flow label.
pub(crate) const fn udp_sport(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = if flow_label == 0 {
        let mut v = (lqpn as u64).wrapping_mul(rqpn as u64);
        v ^= v >> 20;
        v ^= v >> 40;
        (v & 0xF_FFFF) as u32
    } else {
        flow_label
    };
    let low = fl & 0x3FFF;
    let high = (fl & 0xF_C000) >> 14;
    ((low ^ high) | 0xC000) as u16
}
/// GEN_2 largest inline payload (spec data-path §1.2).
const MAX_INLINE: u32 = irdma_hal::wqe::inline::MAX_BYTES as u32;

/// Work-queue sizes (`ib_qp_cap`). On create they are rounded up to what was
/// allocated and written back — never smaller than asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct QpCap {
    /// Send WRs.
    pub max_send_wr: u32,
    /// Receive WRs.
    pub max_recv_wr: u32,
    /// SGEs per send WR (≤ 13).
    pub max_send_sge: u32,
    /// SGEs per receive WR (≤ 13).
    pub max_recv_sge: u32,
    /// Inline bytes (≤ 101).
    pub max_inline_data: u32,
}

/// What to create (`ib_qp_init_attr`; RC only).
pub struct QpInitAttr<'a, 'd, H: Hal, B: Bar + Clone> {
    /// Send CQ.
    pub send_cq: &'a Cq<'d, H, B>,
    /// Receive CQ.
    pub recv_cq: &'a Cq<'d, H, B>,
    /// Sizes.
    pub cap: QpCap,
}

/// Defined with the LAN hand-off (a plain type below the device and the
/// verbs, whose neighbour table and address vectors carry it).
pub use crate::lan::IpAddr;

impl IpAddr {
    /// The four context words, host order, word 0 first; IPv4 in word 3
    /// (verbs.c: irdma_modify_qp_roce, irdma_copy_ip_ntohl; spec §7.2).
    fn words(self) -> [u32; 4] {
        match self {
            IpAddr::V4(a) => [0, 0, 0, u32::from_be_bytes(a)],
            IpAddr::V6(a) => core::array::from_fn(|i| {
                let b = [a[4 * i], a[4 * i + 1], a[4 * i + 2], a[4 * i + 3]];
                u32::from_be_bytes(b)
            }),
        }
    }
}

/// Where the peer is (`rdma_ah_attr` with its GRH, resolved).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AddressVector {
    /// Next-hop MAC (goes into a MANAGE_ARP entry; the context names it by
    /// ARP index, spec §7.2 @48 ARPIDX).
    pub dest_mac: [u8; 6],
    /// Destination IP.
    pub dest_ip: IpAddr,
    /// Source IP (the local GID).
    pub src_ip: IpAddr,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class / TOS.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// VLAN id with priority (`vid | prio << 13`), if tagged.
    pub vlan: Option<u16>,
}

/// Defined with the flight recorder's events (a plain type below the verbs).
pub use crate::flight::QpState;

/// A modify request (`ib_qp_attr` with the mask implied by `state`: INIT
/// uses `qkey`; RTR uses `dest_qp`, `rq_psn`, `path_mtu`, `av`,
/// `max_dest_rd_atomic`; RTS uses `sq_psn`, `retry_cnt`, `rnr_retry`,
/// `max_rd_atomic`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct QpAttr {
    /// Target state.
    pub state: QpState,
    /// Q_Key.
    pub qkey: u32,
    /// Remote QPN (24 bits).
    pub dest_qp: u32,
    /// Expected receive PSN.
    pub rq_psn: u32,
    /// First send PSN.
    pub sq_psn: u32,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096.
    pub path_mtu: u32,
    /// The peer.
    pub av: Option<AddressVector>,
    /// Transport retries (3 bits; 7 = forever on IB, here the hardware value).
    pub retry_cnt: u8,
    /// RNR retries (3 bits; 7 = forever).
    pub rnr_retry: u8,
    /// Outstanding RDMA READs as requester (ORD).
    pub max_rd_atomic: u8,
    /// Incoming RDMA READs as responder (IRD).
    pub max_dest_rd_atomic: u8,
}

impl QpAttr {
    /// `state` with Linux's defaults for the rest (retry 7, RNR retry 7,
    /// ORD/IRD 8, MTU 1024, PSNs 0).
    pub const fn new(state: QpState) -> Self {
        QpAttr {
            state,
            qkey: 0,
            dest_qp: 0,
            rq_psn: 0,
            sq_psn: 0,
            path_mtu: 1024,
            av: None,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 8,
            max_dest_rd_atomic: 8,
        }
    }
}

struct QpMem<H: Hal> {
    _ring: Dma<H>,
    ctx: Dma<H>,
    _trk: Dma<H>,
    /// The ring and tracking memory of the WQ the QP took, if any.
    _wq: Option<(Dma<H>, Dma<H>)>,
    /// Host memory of a shared send queue (see [`super::shared`]), if any.
    _shared: SharedMem<H>,
    /// Host memory of a plain QP's completion half ([`super::table`]).
    _compl: Option<Dma<H>>,
}

/// Host memory a shared send queue keeps alive (tracking, queue object).
pub(super) type SharedMem<H> = Option<(Dma<H>, Dma<H>)>;

/// The transport a QP is created with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// RoCEv2 RC.
    Rc,
    /// RoCEv2 UD (any free QP id).
    Ud,
    /// The GSI QP: a RoCE UD QP with hardware id 1.
    Gsi,
}

/// Bytes at the start of every UD / GSI receive buffer that the device
/// fills with the network header: for IPv4, 20 unused bytes then the
/// 20-byte IPv4 header; for IPv6 the 40-byte IPv6 header (spec
/// rocev2-wire §5.3, ib-cm-rocev2 §1.3). The payload follows at this offset
/// and the completion's `byte_len` counts these bytes.
pub const GRH_BYTES: u32 = 40;

/// Q_Key of the GSI QP (IB_QP1_QKEY; spec ib-cm-rocev2 §1.2).
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Byte offset of the 256-byte QP context in its page (after the 256-byte
/// Q2 area; irdma_kcompat.c: irdma_create_qp; spec §7.2).
const CTX_OFF: usize = 256;

/// An RC QP (`ib_qp`). `S` is its send queue: the single-owner [`Sq`] (this
/// type as callers name it), or the shared one inside a
/// [`SharedQp`](super::SharedQp).
///
/// # Example
///
/// Create, then INIT → RTR (the peer's QPN, MAC and IP) → RTS:
///
/// ```
/// # use irdma::prelude::*;
/// # use irdma_testkit::{FakeHal, ModelBar};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let bar = ModelBar::standalone(mock_bar::Config::default());
/// # let lan = LanInfo::single_tc(0, 6, [2, 0, 0, 0, 0, 0x0a], 1500);
/// # let dev: Device<FakeHal, ModelBar> = Device::probe(bar, lan, Profile::SMALL)?;
/// let pd = dev.alloc_pd()?;
/// let cq = dev.create_cq(64)?;
/// let cap =
///     QpCap { max_send_wr: 32, max_recv_wr: 32, max_send_sge: 2, max_recv_sge: 2, ..QpCap::default() };
/// let mut attr = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap };
/// let mut qp = dev.create_qp(&pd, &mut attr)?;
/// assert!(attr.cap.max_send_wr >= 32); // rounded up and written back
/// let (peer_qpn, peer_mac, peer_ip) = (qp.qp_num(), [2, 0, 0, 0, 0, 0x0a], [10, 0, 0, 1]);
/// qp.modify(&QpAttr::new(QpState::Init))?;
/// let mut rtr = QpAttr::new(QpState::Rtr);
/// rtr.dest_qp = peer_qpn;
/// rtr.av = Some(AddressVector {
///     dest_mac: peer_mac,
///     dest_ip: IpAddr::V4(peer_ip),
///     src_ip: IpAddr::V4([10, 0, 0, 1]),
///     hop_limit: 64,
///     traffic_class: 0,
///     flow_label: 0,
///     vlan: None,
/// });
/// qp.modify(&rtr)?;
/// qp.modify(&QpAttr::new(QpState::Rts))?;
/// assert_eq!(qp.state(), QpState::Rts);
/// # Ok(())
/// # }
/// ```
pub struct Qp<'d, H: Hal, B: Bar + Clone, S: SendQueue = Sq<'static>> {
    // Views `mem`: declared (and dropped) first.
    uk: QpUk<'static, S>,
    dev: &'d Device<H, B>,
    id: u32,
    pd: u32,
    send_cq: u32,
    recv_cq: u32,
    state: QpState,
    /// The hardware went to ERROR (no way back but destroy).
    hw_error: bool,
    ctx: QpRoceCtx,
    cap: QpCap,
    arp: Option<u16>,
    /// QPTYPE of its CQP ops ([`qp_type`]).
    qp_type: u8,
    alive: bool,
    shadow_pa: u64,
    /// A plain QP's completion half, registered in the device's table
    /// while this is `Some` (lives in `mem._compl`).
    compl: Option<HeapRef<QpCompl>>,
    mem: Option<QpMem<H>>,
}

/// A QP's queue sizes and host memory, before it has an id
/// ([`qp_alloc`]).
struct QpAlloc<H: Hal> {
    sq: WqSizing,
    rq: WqSizing,
    sq_bytes: usize,
    rq_bytes: usize,
    rq_size: u32,
    rq_frags: u32,
    send_sge: u32,
    ring: Dma<H>,
    ctx_page: Dma<H>,
    trk: Dma<H>,
}

/// The parts of a QP before its context is built
/// ([`Device::qp_parts`]).
struct QpParts<H: Hal, S: SendQueue> {
    // Views `mem`: declared (and dropped) first.
    uk: QpUk<'static, S>,
    id: u32,
    ty: u8,
    ud: bool,
    sq: WqSizing,
    rq: WqSizing,
    sq_pa: u64,
    rq_pa: u64,
    shadow_pa: u64,
    compl_ctx: u64,
    cap: QpCap,
    mem: QpMem<H>,
}

/// Sizes a QP's queues for the checked capabilities `c` (uk.c:
/// irdma_uk_calc_depth_shift_sq/rq, irdma_get_sqdepth/rqdepth; the RQ is
/// `wq`'s when given) and allocates the ring (SQ, RQ, 64-byte shadow
/// area), the context page and the tracking memory.
// Inlined into its one caller (code size, see `Device::qp_parts`).
#[inline(always)]
fn qp_alloc<H: Hal>(
    c: &QpCap,
    wq: Option<&Wq<'_, H, impl Bar + Clone>>,
) -> Result<QpAlloc<H>, VerbsError> {
    let sq = calc_sq(c.max_send_wr.max(1), c.max_send_sge.max(1), c.max_inline_data)
        .map_err(|_| too_deep(Quantity::MaxSendWr, c.max_send_wr))?;
    let rq = match wq {
        Some(w) => WqSizing {
            depth_quanta: w.depth_quanta,
            shift: w.shift,
            size: w.depth_quanta >> w.shift,
            reported_max_wr: w.max_wr,
        },
        None => calc_rq(c.max_recv_wr.max(1), c.max_recv_sge.max(1))
            .map_err(|_| too_deep(Quantity::MaxRecvWr, c.max_recv_wr))?,
    };
    let sq_bytes = sq.depth_quanta as usize * 32;
    // With a WQ the RQ ring is the WQ's; otherwise it follows the SQ.
    let rq_bytes = if wq.is_some() { 0 } else { rq.depth_quanta as usize * 32 };
    let ring_bytes = (sq_bytes + rq_bytes + 64).next_multiple_of(256);
    let ring = Dma::<H>::with_bytes(ring_bytes, BufferDirection::Both)?;
    let ctx_page = Dma::<H>::new(1, BufferDirection::DriverToDevice)?;
    let rq_size = rq.depth_quanta >> rq.shift;
    let own_rq_trk = if wq.is_some() { 0 } else { rq_size as usize * 8 };
    let trk_bytes = sq.depth_quanta as usize * core::mem::size_of::<SqWrTrk>() + own_rq_trk;
    let trk = Dma::<H>::with_bytes(trk_bytes, BufferDirection::DriverToDevice)?;
    // A receive WQE of 2^shift quanta holds 2^(shift+1) − 1 fragments.
    let rq_frags = match wq {
        Some(w) => w.max_sge,
        None => ((2u32 << rq.shift) - 1).min(MAX_FRAGS).max(c.max_recv_sge),
    };
    let send_sge = c.max_send_sge.max(1);
    Ok(QpAlloc { sq, rq, sq_bytes, rq_bytes, rq_size, rq_frags, send_sge, ring, ctx_page, trk })
}

/// The SQ and RQ of QP `id` over `m`'s memory (the RQ is `wq`'s when
/// given, its ring and tracking memory handed back with its ring's
/// address), and the RQ ring's address.
///
/// # Safety
///
/// The queues view `m.ring` and `m.trk` as `'static`: the caller must keep
/// both (never moving their pages, never freeing them) for as long as the
/// returned queues are used, and never hand the queues out on their own.
// Inlined into its one caller (code size, see `Device::qp_parts`).
#[inline(always)]
#[allow(clippy::type_complexity)]
unsafe fn qp_rings<'d, H: Hal, B: Bar + Clone>(
    m: &QpAlloc<H>,
    max_inline_data: u32,
    id: u32,
    wq: Option<Wq<'d, H, B>>,
) -> Result<(Sq<'static>, Rq<'static>, u64, Option<(Dma<H>, Dma<H>)>), VerbsError> {
    let (ring, trk, sq, sq_bytes, rq_bytes) = (&m.ring, &m.trk, &m.sq, m.sq_bytes, m.rq_bytes);
    // SAFETY: the caller keeps `ring` and `trk` as long as the views are
    // used (this function's contract). `trk` is never given to the device;
    // `SqWrTrk` and `u64` are valid all-zero.
    let parts = unsafe {
        (static_view(ring, 0, sq_bytes), dma_slice::<H, SqWrTrk>(trk, sq.depth_quanta as usize))
    };
    let (Some(sq_mem), Some(sq_trk)) = parts else {
        return Err(VerbsError::Invalid { what: Phrase::new(&"QP memory") });
    };
    // `match`, not `map_err`: the rings are not repacked (code size).
    let sq_uk = match Sq::new(sq_mem, sq_trk, sq.depth_quanta, m.send_sge, max_inline_data, id) {
        Ok(q) => q,
        Err(_) => return Err(VerbsError::Invalid { what: Phrase::new(&"SQ") }),
    };
    let (rq_uk, rq_pa, wq_mem) = match wq {
        Some(w) => {
            let pa = w.ring.paddr();
            (w.rq, pa, Some((w.ring, w.trk)))
        }
        None => {
            // SAFETY: as above; the RQ ring follows the SQ in `ring`, the
            // RQ wrid array follows the SQ tracking array in `trk`, so
            // no two views overlap.
            let rq_mem = unsafe { static_view(ring, sq_bytes, rq_bytes) };
            // SAFETY: as above.
            let rq_wrid = unsafe {
                let off = sq.depth_quanta as usize * core::mem::size_of::<SqWrTrk>();
                let p = trk.vaddr().as_ptr().add(off).cast::<u64>();
                core::slice::from_raw_parts_mut(p, m.rq_size as usize)
            };
            let Some(rq_mem) = rq_mem else {
                return Err(VerbsError::Invalid { what: Phrase::new(&"QP memory") });
            };
            let rq_uk = match Rq::new(rq_mem, rq_wrid, m.rq_size, m.rq.shift, m.rq_frags) {
                Ok(q) => q,
                Err(_) => return Err(VerbsError::Invalid { what: Phrase::new(&"RQ") }),
            };
            (rq_uk, ring.paddr() + sq_bytes as u64, None)
        }
    };
    Ok((sq_uk, rq_uk, rq_pa, wq_mem))
}

impl<H: Hal, B: Bar + Clone> Device<H, B> {
    /// `ib_create_qp` for an RC QP (irdma_kcompat.c: irdma_create_qp; verbs.c:
    /// irdma_setup_kmode_qp): SQ, RQ and the 64-byte shadow area in one
    /// contiguous allocation (level 0, no PBL), the context from Linux's
    /// kernel-RC defaults (§7.2), CREATE_QP → IDLE with MACVALID and
    /// CQNUMVALID. `attr.cap` is written back rounded up.
    pub fn create_qp<'d>(
        &'d self,
        pd: &Pd<'d, H, B>,
        attr: &mut QpInitAttr<'_, 'd, H, B>,
    ) -> Result<Qp<'d, H, B>, VerbsError> {
        self.create_plain_qp(pd, attr, Transport::Rc)
    }

    /// `ib_create_qp` for a UD QP (`IB_QPT_UD`; irdma_kcompat.c:
    /// irdma_create_qp with QPTYPE 4, ROCE_UD): as an RC QP, but the context
    /// carries no address (every send names an AH, a remote QPN and a remote
    /// Q_Key, [`crate::wr::WrOpcode::UdSend`]), and its receives start with
    /// the [`GRH_BYTES`] network-header area. Drive it INIT (`qkey`) → RTR
    /// → RTS (`sq_psn`).
    pub fn create_ud_qp<'d>(
        &'d self,
        pd: &Pd<'d, H, B>,
        attr: &mut QpInitAttr<'_, 'd, H, B>,
    ) -> Result<Qp<'d, H, B>, VerbsError> {
        self.create_plain_qp(pd, attr, Transport::Ud)
    }

    /// `ib_create_qp` for the GSI QP (`IB_QPT_GSI`) as Linux creates it on
    /// RoCEv2: a RoCE UD QP with hardware id 1 (irdma_kcompat.c:
    /// irdma_create_qp; the context's ISQP1 bit is not set on a GEN_2 PF,
    /// spec ib-cm-rocev2 §1.2). One per device ([`VerbsError::InUse`]
    /// while it lives). The MAD layer drives it INIT with Q_Key
    /// [`GSI_QKEY`] → RTR → RTS with `sq_psn` 0.
    pub fn create_gsi_qp<'d>(
        &'d self,
        pd: &Pd<'d, H, B>,
        attr: &mut QpInitAttr<'_, 'd, H, B>,
    ) -> Result<Qp<'d, H, B>, VerbsError> {
        self.create_plain_qp(pd, attr, Transport::Gsi)
    }

    /// A plain (single-owner) QP of transport `t`, its completion half
    /// registered: what `create_qp`, `create_ud_qp` and `create_gsi_qp`
    /// make.
    fn create_plain_qp<'d>(
        &'d self,
        pd: &Pd<'d, H, B>,
        attr: &mut QpInitAttr<'_, 'd, H, B>,
        t: Transport,
    ) -> Result<Qp<'d, H, B>, VerbsError> {
        let mut qp = self.create_qp_inner(pd, attr, None, t, |sq| Ok((sq, None)))?;
        self.attach_compl(&mut qp)?;
        Ok(qp)
    }

    /// Registers a new plain QP's completion half so [`Cq::poll`] finds
    /// it (`verbs::table`); on failure the caller drops (destroys) the QP.
    /// By reference: the QP is not moved in and out (code size).
    fn attach_compl<'d>(&'d self, qp: &mut Qp<'d, H, B>) -> Result<(), VerbsError> {
        // SAFETY: the rings and tracking memory live in `qp.mem` with the
        // completion memory and are freed after it is unregistered
        // (`Qp::detach_compl` runs before `mem` goes); from now on `qp.uk`
        // only posts and learns its tails through the link (`post_send`,
        // `post_recv`).
        let (c, mem) =
            unsafe { super::table::attach(self, &qp.uk, qp.id, qp.send_cq, qp.recv_cq) }?;
        if let Some(m) = qp.mem.as_mut() {
            m._compl = Some(mem);
        }
        qp.compl = Some(c);
        Ok(())
    }

    /// `ib_create_qp` whose receive queue is `wq` (from
    /// [`Device::create_wq`], on `attr.recv_cq`): the QP context points at
    /// the WQ's ring, receives already posted to it stay queued. The
    /// `max_recv_*` of `attr.cap` are ignored and written back from the WQ.
    pub fn create_qp_on_wq<'d>(
        &'d self,
        pd: &Pd<'d, H, B>,
        attr: &mut QpInitAttr<'_, 'd, H, B>,
        wq: Wq<'d, H, B>,
    ) -> Result<Qp<'d, H, B>, VerbsError> {
        if wq.cq_id != attr.recv_cq.id() {
            return Err(VerbsError::Invalid {
                what: Phrase::new(&"the WQ completes on another CQ"),
            });
        }
        let mut qp =
            self.create_qp_inner(pd, attr, Some(wq), Transport::Rc, |sq| Ok((sq, None)))?;
        self.attach_compl(&mut qp)?;
        Ok(qp)
    }

    /// The one QP-create path. `make_sq` turns the SQ built over the QP's
    /// ring into the QP's send queue (the shared QP swaps in an `MpSq` over
    /// the same ring) and may hand over host memory the QP must keep.
    pub(super) fn create_qp_inner<'d, S: SendQueue>(
        &'d self,
        pd: &Pd<'d, H, B>,
        attr: &mut QpInitAttr<'_, 'd, H, B>,
        wq: Option<Wq<'d, H, B>>,
        transport: Transport,
        make_sq: impl FnOnce(Sq<'static>) -> Result<(S, SharedMem<H>), VerbsError>,
    ) -> Result<Qp<'d, H, B, S>, VerbsError> {
        let c = self.check_qp_args(pd, attr, wq.as_ref())?;
        let gsi = transport == Transport::Gsi;
        let p = self.qp_parts(&c, wq, transport, make_sq)?;
        let compl_ctx = p.compl_ctx;
        let mut qp = self.new_qp(pd, attr, p);
        self.create_on_device(&mut qp, pd, attr, gsi, compl_ctx)?;
        Ok(qp)
    }

    /// [`Self::create_qp_inner`]'s first half: the queues sized, their host
    /// memory allocated, a QP id taken (given back when a later step
    /// fails), the rings built over that memory (the RQ is `wq`'s when
    /// given) and turned into the QP's send queue by `make_sq`.
    // Inlined into its one caller (code size: out of line it costs the
    // firmware example ~1 KiB of `.text` in moves of the parts).
    #[inline(always)]
    fn qp_parts<S: SendQueue>(
        &self,
        c: &QpCap,
        wq: Option<Wq<'_, H, B>>,
        transport: Transport,
        make_sq: impl FnOnce(Sq<'static>) -> Result<(S, SharedMem<H>), VerbsError>,
    ) -> Result<QpParts<H, S>, VerbsError> {
        let m = qp_alloc::<H>(c, wq.as_ref())?;
        let gsi = transport == Transport::Gsi;
        let id = self.alloc_qp_id(gsi)?;
        let free_id = |e: VerbsError| {
            self.release_qp_id(id, gsi);
            e
        };
        let (kind, ty) = match transport {
            Transport::Rc => (QpKind::Rc, qp_type::ROCE_RC),
            Transport::Ud | Transport::Gsi => (QpKind::Ud, qp_type::ROCE_UD),
        };
        // SAFETY: `m.ring` and `m.trk` move, with the queues viewing them,
        // into the returned parts (`mem` next to `uk`) and from there
        // together into the `Qp` (`new_qp`), which owns them in `mem` next
        // to `uk`, never moves their pages, never frees them while `uk` is
        // used (field order, `alive` checks); `uk` never leaves the `Qp`.
        // On an error below the queues are dropped before `m`.
        let rings = unsafe { qp_rings(&m, c.max_inline_data, id, wq) };
        let (sq_uk, rq_uk, rq_pa, wq_mem) = match rings {
            Ok(v) => v,
            Err(e) => return Err(free_id(e)),
        };
        let (sq_uk, shared_mem) = match make_sq(sq_uk) {
            Ok(v) => v,
            Err(e) => return Err(free_id(e)),
        };
        // Echoed in every CQE (QP context +168); unique per creation.
        let compl_ctx = self.next_compl_ctx(id);
        let uk = QpUk::new(sq_uk, rq_uk, compl_ctx, kind);
        Ok(QpParts {
            uk,
            id,
            ty,
            ud: kind == QpKind::Ud,
            sq: m.sq,
            rq: m.rq,
            sq_pa: m.ring.paddr(),
            rq_pa,
            shadow_pa: m.ring.paddr() + (m.sq_bytes + m.rq_bytes) as u64,
            compl_ctx,
            cap: QpCap {
                max_send_wr: m.sq.reported_max_wr.max(c.max_send_wr),
                max_recv_wr: m.rq.reported_max_wr.max(c.max_recv_wr),
                max_send_sge: m.send_sge,
                max_recv_sge: m.rq_frags,
                max_inline_data: c.max_inline_data,
            },
            mem: QpMem {
                _ring: m.ring,
                ctx: m.ctx_page,
                _trk: m.trk,
                _wq: wq_mem,
                _shared: shared_mem,
                _compl: None,
            },
        })
    }

    /// The QP (state RESET, not yet created on the device) of the parts
    /// [`Self::qp_parts`] made, its context from Linux's kernel defaults.
    fn new_qp<'d, S: SendQueue>(
        &'d self,
        pd: &Pd<'d, H, B>,
        attr: &QpInitAttr<'_, 'd, H, B>,
        p: QpParts<H, S>,
    ) -> Qp<'d, H, B, S> {
        let (sq, rq, ud) = (p.sq, p.rq, p.ud);
        let ird = self.max_ird;
        Qp {
            uk: p.uk,
            dev: self,
            id: p.id,
            pd: pd.id(),
            send_cq: attr.send_cq.id(),
            recv_cq: attr.recv_cq.id(),
            state: QpState::Reset,
            hw_error: false,
            // Built in place (code size: not on the stack and copied in).
            ctx: QpRoceCtx {
                sq_pa: p.sq_pa,
                rq_pa: p.rq_pa,
                hw_sq_size: (sq.depth_quanta.trailing_zeros() - 2) as u8,
                hw_rq_size: (rq.depth_quanta.trailing_zeros() - 2) as u8,
                rq_wqe_size: rq.shift,
                qs_handle: self.ws.qs_handle,
                send_cq_num: attr.send_cq.id(),
                rcv_cq_num: attr.recv_cq.id(),
                qp_compl_ctx: p.compl_ctx,
                // UD: P_Key, Q_Key and PD come at INIT (conformance README,
                // UD/GSI contexts).
                p_key: if ud { 0 } else { 0xffff },
                ack_credits: 0x1e,
                rtomin: 5,
                mac_addr: self.lan.mac,
                ord_size: ird,
                ird_size: ird.into(),
                wr_rdresp_en: true,
                rd_en: true,
                fast_reg_en: true,
                udprivcq_en: true,
                priv_mode_en: true,
                // A UD context never gets an address vector: IP version, TTL
                // and the addresses stay 0 (conformance README).
                ipv4: !ud,
                ttl: if ud { 0 } else { 64 },
                src_port: ROCE_SPORT,
                dst_port: ROCE_DPORT,
                snd_mss: 1024,
                cwnd: 0x400,
                rexmit_thresh: 2,
                rnr_nak_thresh: 2,
                ..QpRoceCtx::default()
            },
            cap: p.cap,
            arp: None,
            qp_type: p.ty,
            alive: false,
            shadow_pa: p.shadow_pa,
            compl: None,
            mem: Some(p.mem),
        }
    }

    /// [`Self::create_qp_inner`]'s last step: CREATE_QP → IDLE with the
    /// context written, then the QP's bookkeeping (users of the PD and
    /// CQs, `attr.cap`, its CQ binding and record). A failure the device
    /// may own memory after quarantines the QP's memory and id; any other
    /// gives the id back.
    fn create_on_device<'d, S: SendQueue>(
        &'d self,
        qp: &mut Qp<'d, H, B, S>,
        pd: &Pd<'d, H, B>,
        attr: &mut QpInitAttr<'_, 'd, H, B>,
        gsi: bool,
        compl_ctx: u64,
    ) -> Result<(), VerbsError> {
        let (id, ty, shadow_pa) = (qp.id, qp.qp_type, qp.shadow_pa);
        let cmd = CreateQp {
            qp_id: id,
            qp_type: ty,
            virtual_map: false,
            host_ctx_pa: qp.ctx_pa(),
            shadow_area_pa: shadow_pa,
            cq_num_valid: true,
            mac_valid: true,
            next_state: qp_state::IDLE,
            ..CreateQp::default()
        };
        let r = self.with_cqp(|cqp| {
            qp.write_ctx()?;
            cqp.exec_info(cmd, 0).map(|_| ())
        });
        if let Err(e) = r {
            if device_may_own(&e) {
                // A timeout: the device may have created the QP and use its
                // rings and context. Keep them and the id (issue #12).
                qp.quarantine_mem();
                self.quarantine_ids(1);
                return Err(e.into());
            }
            self.release_qp_id(id, gsi);
            return Err(e.into());
        }
        qp.alive = true;
        // The PD and CQs now have a user: they outlive it in hardware.
        self.hold(Some(pd.id()), &[attr.send_cq.id(), attr.recv_cq.id()]);
        attr.cap = qp.cap;
        self.set_qp_error(id, false);
        self.bind_qp_cqs(id, Some((attr.send_cq.id(), attr.recv_cq.id(), compl_ctx)));
        if let Some(rec) = self.res.lock().ids.as_mut().and_then(|i| i.qp_rec.get_mut(id as usize))
        {
            *rec = QpRecord { live: true, ctx_pa: qp.ctx_pa(), shadow_pa, qp_type: ty };
        }
        Ok(())
    }

    /// `create_qp_inner`'s checks: every object is this device's, and the
    /// capabilities (the RQ's from `wq` when given) are within the limits.
    fn check_qp_args<'d>(
        &'d self,
        pd: &Pd<'d, H, B>,
        attr: &QpInitAttr<'_, 'd, H, B>,
        wq: Option<&Wq<'d, H, B>>,
    ) -> Result<QpCap, VerbsError> {
        self.own(pd.device(), &"PD of another device")?;
        self.own(attr.send_cq.device(), &"send CQ of another device")?;
        self.own(attr.recv_cq.device(), &"receive CQ of another device")?;
        if let Some(w) = wq {
            self.own(w._dev, &"WQ of another device")?;
        }
        let mut c = attr.cap;
        if let Some(w) = wq {
            c.max_recv_wr = w.max_wr;
            c.max_recv_sge = w.max_sge;
        }
        let above = |what, requested: u32, max: u32| {
            if requested > max {
                Err(VerbsError::AboveLimit { what, requested, max })
            } else {
                Ok(())
            }
        };
        above(Quantity::MaxSendSge, c.max_send_sge, MAX_FRAGS)?;
        above(Quantity::MaxRecvSge, c.max_recv_sge, MAX_FRAGS)?;
        above(Quantity::MaxInlineData, c.max_inline_data, MAX_INLINE)?;
        if c.max_send_wr == 0 && c.max_recv_wr == 0 {
            return Err(VerbsError::Invalid {
                what: Phrase::new(&"a QP needs a send or receive queue"),
            });
        }
        Ok(c)
    }

    /// A QP number: 1 for the GSI QP (refused while one exists), else the
    /// next free one.
    fn alloc_qp_id(&self, gsi: bool) -> Result<u32, VerbsError> {
        let mut res = self.res.lock();
        let ids = res.ids.as_mut().ok_or(VerbsError::Destroyed)?;
        if gsi {
            // QP 1 is reserved in the id table for the GSI QP
            // (hw.c: irdma_initialize_hw_rsrc).
            if ids.gsi {
                return Err(VerbsError::InUse { what: Quantity::GsiQp1, users: 1 });
            }
            ids.gsi = true;
            Ok(1)
        } else {
            Ok(ids.qps.alloc_next()?)
        }
    }

    /// Gives back the id of a QP whose creation failed before the device
    /// knew it (QP 1's GSI flag for `gsi`). Out of line (code size: six
    /// error paths of `create_qp_inner`).
    #[inline(never)]
    fn release_qp_id(&self, id: u32, gsi: bool) {
        if let Some(ids) = self.res.lock().ids.as_mut() {
            if gsi {
                ids.gsi = false;
            } else {
                let _ = ids.qps.free(id);
            }
        }
    }

    /// Takes a reference on the ARP entry for `mac`, adding it with
    /// MANAGE_ARP when it is new (utils.c: irdma_add_arp; spec §4.3.18).
    pub(crate) fn arp_get(&self, mac: [u8; 6]) -> Result<u16, VerbsError> {
        let mut res = self.res.lock();
        let ids = res.ids.as_mut().ok_or(VerbsError::Destroyed)?;
        if let Some((i, s)) =
            ids.arp.iter_mut().enumerate().find(|(_, s)| s.refs > 0 && s.mac == mac)
        {
            s.refs += 1;
            return Ok(i as u16);
        }
        let idx = ids.arp_ids.alloc_next()?;
        let cmd = ArpAdd { arp_index: idx as u16, mac, reach_max: 0, permanent: true };
        match self.exec_cmd(cmd) {
            Ok(()) => {
                if let Some(s) = ids.arp.get_mut(idx as usize) {
                    *s = ArpSlot { mac, refs: 1 };
                }
                Ok(idx as u16)
            }
            Err(e) => {
                let _ = ids.arp_ids.free(idx);
                Err(e.into())
            }
        }
    }

    /// Drops a reference; the last one deletes the entry.
    pub(crate) fn arp_put(&self, idx: u16) -> Result<(), VerbsError> {
        let mut res = self.res.lock();
        let ids = res.ids.as_mut().ok_or(VerbsError::Destroyed)?;
        let Some(s) = ids.arp.get_mut(idx as usize) else { return Ok(()) };
        if s.refs > 1 {
            s.refs -= 1;
            return Ok(());
        }
        self.exec_cmd(ArpDel { arp_index: idx })?;
        s.refs = 0;
        let _ = ids.arp_ids.free(idx.into());
        Ok(())
    }

    /// MODIFY_QP → ERROR then FLUSH_WQES of both queues (verbs.c:
    /// irdma_modify_qp_roce; hw.c: irdma_flush_wqes), with `flush_minor`
    /// (SQ, RQ) as each queue's first flushed WR's code. Used by
    /// `modify_qp` and by the AEQ.
    pub(crate) fn qp_to_error(
        &self,
        qpn: u32,
        ctx_pa: u64,
        shadow_pa: u64,
        flush_minor: (u16, u16),
    ) -> Result<(), CqpError> {
        // Both queues are flushed together, once: a QP already in error has
        // had its flush (ctrl.c: irdma_sc_qp_flush_wqes keeps flush_sq /
        // flush_rq and answers a repeat with -EALREADY, posting nothing).
        let mut flushed = FlushState::default();
        let was_in_error = self.qp_in_error(qpn);
        if was_in_error {
            flushed = FlushState { sq: true, rq: true };
        }
        self.set_qp_error(qpn, true);
        let ty = self
            .res
            .lock()
            .ids
            .as_ref()
            .and_then(|i| i.qp_rec.get(qpn as usize))
            .map_or(0, |r| r.qp_type);
        let m = ModifyQp {
            qp_id: qpn,
            qp_type: if ty == 0 { qp_type::ROCE_RC } else { ty },
            host_ctx_pa: ctx_pa,
            shadow_area_pa: shadow_pa,
            next_state: qp_state::ERROR,
            ..ModifyQp::default()
        };
        let sq = (cqe::FLUSH_MAJOR_ERR, flush_minor.0);
        let rq = (cqe::FLUSH_MAJOR_ERR, flush_minor.1);
        let f = flushed.request(FlushWqes {
            qp_id: qpn,
            flush_sq: true,
            flush_rq: true,
            user_codes: Some(FlushCodes { sq, rq }),
            generate_ae: None,
        });
        use crate::flight::FlightEvent;
        self.record(FlightEvent::QpState { qpn, state: QpState::Error });
        if f.is_ok() {
            self.record(FlightEvent::Flush { qpn, sq_code: flush_minor.0, rq_code: flush_minor.1 });
        }
        let mut modified = false;
        let r = self.with_cqp(|c| {
            c.exec_info(m, 0)?;
            modified = true;
            let Ok(f) = f else { return Ok(()) };
            match c.exec_info(f, 0) {
                // "Flush with no WQE pending" is not an error (utils.c:
                // irdma_noncrit_err_list; spec §2.6).
                Err(CqpError::OpFailed { major: 0xffff, minor: 0x8006, .. }) => Ok(()),
                r => r.map(|_| ()),
            }
        });
        if r.is_err() && self.needs_reset() {
            // The device cannot be asked to flush (the CQP needs a reset,
            // timed out on these ops, or the device is gone): the QP stays
            // in ERROR for the data path, whose software flush completes
            // every outstanding WR once the CQ holds no more hardware CQEs
            // (and drops any that arrive later). Linux schedules its flush
            // worker whatever the hardware flush did (hw.c:
            // irdma_flush_wqes; utils.c: irdma_generate_flush_completions),
            // and under `rf->reset` its CQP calls do nothing (utils.c:
            // irdma_handle_cqp_op). The QP is in ERROR as far as the caller
            // can tell; `needs_reset` says the rest.
            return Ok(());
        }
        if r.is_err() && !modified && !was_in_error {
            // The device refused (or never ran) the MODIFY_QP: the QP is not
            // in ERROR, so the data path must not treat it as such (a retry
            // would otherwise skip the MODIFY_QP and DESTROY_QP would meet a
            // QP the device still has in RTS).
            self.set_qp_error(qpn, false);
        }
        r
    }
}

/// A post to a QP in error is refused when nothing posted could ever run:
/// the device is gone, or one of the QP's CQs is dead (otherwise the WRs
/// are taken and complete through the software flush). For any QP flavour
/// (a shared QP's lock-free post asks it too); out of line: the error path
/// only.
#[inline(never)]
pub(super) fn refuse_in_error<H: Hal, B: Bar + Clone>(
    dev: &Device<H, B>,
    qpn: u32,
) -> Result<(), PostError> {
    if dev.is_gone() {
        return Err(PostError { bad_wr: 0, kind: PostErrorKind::DeviceGone });
    }
    if dev.qp_on_dead_cq(qpn) {
        return Err(PostError { bad_wr: 0, kind: PostErrorKind::CqDead });
    }
    Ok(())
}

fn too_deep(what: Quantity, requested: u32) -> VerbsError {
    VerbsError::AboveLimit { what, requested, max: 32768 }
}

fn mtu_ok(mtu: u32) -> bool {
    matches!(mtu, 256 | 512 | 1024 | 2048 | 4096)
}

impl<'d, H: Hal, B: Bar + Clone, S: SendQueue> Qp<'d, H, B, S> {
    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.id
    }

    /// The sizes the QP has (what create wrote back).
    pub fn cap(&self) -> QpCap {
        self.cap
    }

    /// The driver's view of the state.
    pub fn state(&self) -> QpState {
        if self.alive && self.dev.qp_in_error(self.id) { QpState::Error } else { self.state }
    }

    /// The PD.
    pub fn pd_id(&self) -> u32 {
        self.pd
    }

    pub(crate) fn alive(&self) -> bool {
        self.alive
    }

    pub(crate) fn compl_ctx(&self) -> u64 {
        self.uk.ctx()
    }

    pub(crate) fn fast_compl_ctx(&self) -> u64 {
        self.uk.fast_ctx()
    }

    pub(crate) fn uk_mut(&mut self) -> &mut QpUk<'static, S> {
        &mut self.uk
    }

    fn ctx_pa(&self) -> u64 {
        self.mem.as_ref().map_or(0, |m| m.ctx.paddr() + CTX_OFF as u64)
    }

    #[inline(never)]
    fn write_ctx(&self) -> Result<(), CqpError> {
        let mut w = [0u64; 32];
        self.ctx.encode(&mut w)?;
        let Some(m) = self.mem.as_ref() else {
            return Err(CqpError::Protocol { what: Phrase::new(&"QP memory gone") });
        };
        m.ctx.write_u64s(CTX_OFF, &w);
        Ok(())
    }

    /// Adopts the control path's ERROR (AEQ-driven) on the data path.
    pub(crate) fn sync_error(&mut self) {
        if self.alive && self.dev.qp_in_error(self.id) && !self.uk.in_error() {
            self.uk.set_error();
            self.state = QpState::Error;
            self.hw_error = true;
        }
    }

    /// `ib_post_recv`.
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        if !self.alive {
            return Err(PostError { bad_wr: 0, kind: PostErrorKind::Destroyed });
        }
        self.sync_error();
        if self.uk.in_error() {
            refuse_in_error(self.dev, self.id)?;
        }
        if let Some(c) = self.compl {
            c.link.rq_begin(&mut self.uk.rq);
        }
        let r = self.uk.post_recv(wrs);
        if let Some(c) = self.compl {
            // Receives need no doorbell: publishing after them is enough.
            c.link.rq_publish(&self.uk.rq);
        }
        r.map_err(|PostRecvError { bad_wr, kind }| PostError {
            bad_wr,
            kind: PostErrorKind::Rq(kind),
        })
    }

    /// Completes, with `WrFlushErr`, the outstanding WRs of this QP's queues
    /// that use CQ `cq_id`, if the QP is in error (software flush once the
    /// CQ holds no more hardware CQEs; spec data-path §5.5).
    pub(crate) fn flush_software(&mut self, cq_id: u32, out: &mut [WorkCompletion]) -> usize {
        if !self.alive || !self.uk.in_error() {
            return 0;
        }
        let (send, recv) = (self.send_cq == cq_id, self.recv_cq == cq_id);
        super::table::flush_queues(&mut self.uk, self.id, send, recv, out)
    }

    /// `ib_modify_qp` (verbs.c: irdma_modify_qp_roce; spec §7.4, §9.2 steps
    /// 19–21). The context is rebuilt from the accumulated attributes before
    /// every hardware modify, as Linux does.
    pub fn modify(&mut self, attr: &QpAttr) -> Result<(), VerbsError> {
        if !self.alive {
            return Err(VerbsError::Destroyed);
        }
        self.sync_error();
        use QpState as S;
        let r = self.modify_inner(attr);
        if r.is_ok() && attr.state != S::Error {
            // ERROR is recorded by `qp_to_error` with its flush.
            self.dev
                .record(crate::flight::FlightEvent::QpState { qpn: self.id, state: attr.state });
        }
        r
    }

    fn modify_inner(&mut self, attr: &QpAttr) -> Result<(), VerbsError> {
        use QpState as S;
        match (self.state, attr.state) {
            (_, S::Error) | (_, S::Reset) => self.go_error(attr.state),
            (S::Reset, S::Init) | (S::Init, S::Init) if !self.hw_error => {
                // RESET → INIT is a software step on a QP created IDLE
                // (verbs.c: only issued while the QP is INVALID). A UD QP
                // gets its P_Key here (irdma_query_pkey: 0xFFFF).
                self.ctx.pd_id = self.pd;
                self.ctx.qkey = attr.qkey;
                self.ctx.p_key = 0xffff;
                self.state = S::Init;
                Ok(())
            }
            (S::Init, S::Rtr) if self.is_ud() => self.go_rtr_ud(),
            (S::Init, S::Rtr) => self.go_rtr(attr),
            (S::Rtr, S::Rts) | (S::Rts, S::Rts) => self.go_rts(attr),
            _ => Err(VerbsError::InvalidState),
        }
    }

    /// Whether this is a UD (or GSI) QP.
    pub fn is_ud(&self) -> bool {
        self.qp_type == qp_type::ROCE_UD
    }

    /// INIT → RTR of a UD QP: no address vector, destination QPN or EPSN
    /// (verbs.c: irdma_modify_qp_roce; the vectors' GSI RTR carries
    /// CQNUMVALID and ARPTABIDXVALID with ARP index 0).
    fn go_rtr_ud(&mut self) -> Result<(), VerbsError> {
        self.ctx.pd_id = self.pd;
        self.hw_modify(qp_state::RTR, true, false)?;
        self.state = QpState::Rtr;
        Ok(())
    }

    fn hw_modify(&mut self, next: u8, arp: bool, ord: bool) -> Result<(), VerbsError> {
        let m = ModifyQp {
            qp_id: self.id,
            qp_type: self.qp_type,
            host_ctx_pa: self.ctx_pa(),
            shadow_area_pa: self.shadow_pa,
            next_state: next,
            cq_num_valid: true,
            arp_cache_idx_valid: arp,
            ord_valid: ord,
            ..ModifyQp::default()
        };
        let this = &*self;
        this.dev.with_cqp(|c| {
            this.write_ctx()?;
            c.exec_info(m, 0).map(|_| ())
        })?;
        Ok(())
    }

    fn go_rtr(&mut self, a: &QpAttr) -> Result<(), VerbsError> {
        let av =
            a.av.ok_or(VerbsError::Invalid { what: Phrase::new(&"RTR needs an address vector") })?;
        if !mtu_ok(a.path_mtu) {
            return Err(VerbsError::Invalid { what: Phrase::new(&"path_mtu") });
        }
        if a.dest_qp >= 1 << 24 || a.rq_psn >= 1 << 24 || av.flow_label >= 1 << 20 {
            return Err(VerbsError::Invalid {
                what: Phrase::new(&"dest_qp/rq_psn/flow_label width"),
            });
        }
        let v4 = matches!(av.dest_ip, IpAddr::V4(_));
        if v4 != matches!(av.src_ip, IpAddr::V4(_)) {
            return Err(VerbsError::Invalid { what: Phrase::new(&"mixed IPv4/IPv6 addresses") });
        }
        let arp = self.dev.arp_get(av.dest_mac)?;
        let old_arp = self.arp.replace(arp);
        let saved = self.ctx;
        let c = &mut self.ctx;
        c.pd_id = self.pd;
        c.dest_qp = a.dest_qp;
        c.epsn = a.rq_psn;
        c.snd_mss = a.path_mtu;
        c.ipv4 = v4;
        c.dest_ip_addr = av.dest_ip.words();
        c.local_ipaddr = av.src_ip.words();
        c.ttl = av.hop_limit;
        c.tos = av.traffic_class;
        c.flow_label = av.flow_label;
        c.src_port = udp_sport(av.flow_label, self.id, a.dest_qp);
        c.insert_vlan_tag = av.vlan.is_some();
        c.vlan_tag = av.vlan.unwrap_or(0);
        c.arp_idx = arp;
        // `max(1).min(..)`, not `clamp`: the same while `max_ird` ≥ 1 (it is
        // ≥ 2, `FpmQuery::decode`), without `clamp`'s panic path (code size).
        c.ird_size = a.max_dest_rd_atomic.max(1).min(self.dev.max_ird).into();
        match self.hw_modify(qp_state::RTR, true, false) {
            Ok(()) => {
                self.state = QpState::Rtr;
                if let Some(o) = old_arp.filter(|o| *o != arp) {
                    let _ = self.dev.arp_put(o);
                }
                Ok(())
            }
            Err(e) => {
                self.ctx = saved;
                self.arp = old_arp;
                if old_arp != Some(arp) {
                    let _ = self.dev.arp_put(arp);
                }
                Err(e)
            }
        }
    }

    fn go_rts(&mut self, a: &QpAttr) -> Result<(), VerbsError> {
        if a.sq_psn >= 1 << 24 || a.retry_cnt > 7 || a.rnr_retry > 7 {
            return Err(VerbsError::Invalid {
                what: Phrase::new(&"sq_psn/retry_cnt/rnr_retry width"),
            });
        }
        let saved = self.ctx;
        let ud = self.is_ud();
        let c = &mut self.ctx;
        c.psn_nxt = a.sq_psn;
        c.lsn = 0xffff;
        c.psn_max = a.sq_psn;
        c.psn_una = a.sq_psn;
        // A UD QP keeps the create-time retry thresholds and ORD
        // (conformance README, UD/GSI contexts).
        if !ud {
            c.rexmit_thresh = a.retry_cnt;
            c.rnr_nak_thresh = a.rnr_retry;
            c.ord_size = a.max_rd_atomic.max(1).min(self.dev.max_ird);
        }
        match self.hw_modify(qp_state::RTS, true, true) {
            Ok(()) => {
                self.state = QpState::Rts;
                Ok(())
            }
            Err(e) => {
                self.ctx = saved;
                Err(e)
            }
        }
    }

    fn go_error(&mut self, target: QpState) -> Result<(), VerbsError> {
        if !self.hw_error {
            let pa = self.ctx_pa();
            self.dev.qp_to_error(
                self.id,
                pa,
                self.shadow_pa,
                (flush_code::GENERAL, flush_code::GENERAL),
            )?;
            self.hw_error = true;
        }
        self.uk.set_error();
        self.state = target;
        Ok(())
    }

    /// `ib_destroy_qp`: MODIFY_QP → ERROR if needed (verbs.c: irdma_destroy_qp),
    /// DESTROY_QP, then the ARP reference and the id are released. Memory is
    /// freed when the object is dropped.
    pub fn destroy(&mut self) -> Result<(), VerbsError> {
        if self.alive {
            if !self.hw_error {
                let m = ModifyQp {
                    qp_id: self.id,
                    qp_type: self.qp_type,
                    host_ctx_pa: self.ctx_pa(),
                    shadow_area_pa: self.shadow_pa,
                    next_state: qp_state::ERROR,
                    ..ModifyQp::default()
                };
                self.dev.exec_cmd(m)?;
                self.hw_error = true;
            }
            let d = DestroyQp {
                qp_id: self.id,
                qp_type: self.qp_type,
                host_ctx_pa: self.ctx_pa(),
                shadow_area_pa: self.shadow_pa,
                ignore_mw_bnd: false,
                // The vendor's GSI destroy removes the hash entry
                // (cqp-ud-vectors: destroy_qp linux_gsi_qp1_remove_hash_idx).
                remove_hash_idx: self.is_ud(),
            };
            self.dev.exec_cmd(d)?;
            self.alive = false;
            // Before the id can be reused: later CQEs of this QP are dropped.
            self.detach_compl();
            self.dev.set_qp_error(self.id, false);
            self.dev.bind_qp_cqs(self.id, None);
            if let Some(ids) = self.dev.res.lock().ids.as_mut() {
                if let Some(r) = ids.qp_rec.get_mut(self.id as usize) {
                    *r = QpRecord::default();
                }
                if self.id == 1 && self.is_ud() {
                    ids.gsi = false;
                } else {
                    let _ = ids.qps.free(self.id);
                }
            }
            self.dev.release_refs(Some(self.pd), &[self.send_cq, self.recv_cq]);
        }
        // The ARP reference last: a failed MANAGE_ARP delete can be retried.
        if let Some(a) = self.arp {
            self.dev.arp_put(a)?;
            self.arp = None;
        }
        Ok(())
    }
}

impl<H: Hal, B: Bar + Clone> Qp<'_, H, B> {
    /// Allows inline sends (`IB_SEND_INLINE`).
    ///
    /// # Safety
    ///
    /// From now on the `addr` of every SGE of every inline WR posted on this
    /// QP must be a CPU address readable for `length` bytes during the post,
    /// and not written meanwhile (by another thread or the device): the
    /// driver copies the bytes with plain reads.
    pub unsafe fn enable_inline(&mut self) {
        // SAFETY: forwarded contract.
        unsafe { self.uk.sq.enable_inline() }
    }

    /// `ib_post_send`. Takes no lock; in ERROR the WRs are queued without a
    /// doorbell and complete as flushed.
    ///
    /// # Example
    ///
    /// An RDMA WRITE from one page of a registered buffer to the other, then its completion:
    ///
    /// ```
    /// # use irdma::prelude::*;
    /// # use irdma_testkit::{FakeHal, ModelBar};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let bar = ModelBar::standalone(mock_bar::Config::default());
    /// # let lan = LanInfo::single_tc(0, 6, [2, 0, 0, 0, 0, 0x0a], 1500);
    /// # let dev: Device<FakeHal, ModelBar> = Device::probe(bar, lan, Profile::SMALL)?;
    /// # let pd = dev.alloc_pd()?;
    /// # let mut cq = dev.create_cq(16)?;
    /// # let cap = QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, ..QpCap::default() };
    /// # let mut qp = dev.create_qp(&pd, &mut QpInitAttr { send_cq: &cq, recv_cq: &cq, cap })?;
    /// # let me = qp.qp_num();
    /// # qp.modify(&QpAttr::new(QpState::Init))?;
    /// # let mut rtr = QpAttr::new(QpState::Rtr);
    /// # rtr.dest_qp = me;
    /// # rtr.av = Some(AddressVector { dest_mac: [2, 0, 0, 0, 0, 0x0a], dest_ip: IpAddr::V4([10, 0, 0, 1]),
    /// #     src_ip: IpAddr::V4([10, 0, 0, 1]), hop_limit: 64, traffic_class: 0, flow_label: 0, vlan: None });
    /// # qp.modify(&rtr)?;
    /// # qp.modify(&QpAttr::new(QpState::Rts))?;
    /// # let mem = Dma::<FakeHal>::new(2, BufferDirection::Both)?;
    /// # let pages = [mem.paddr(), mem.paddr() + 4096];
    /// # // SAFETY: `mem` outlives the MR and backs nothing else meanwhile.
    /// # let mr = unsafe { dev.reg_mr(&pd, &MrDesc { iova: mem.paddr(), length: 8192, page_size: PageSize::Size4K,
    /// #     pages: &pages, zero_based: false, access: Access::LOCAL_WRITE | Access::REMOTE_WRITE }) }?;
    /// assert!(mem.write_bytes(0, b"data"));
    /// let sge = [Sge { addr: mem.paddr(), length: 4, lkey: mr.lkey() }];
    /// let wr = SendWr {
    ///     wr_id: 7,
    ///     opcode: WrOpcode::RdmaWrite { remote_addr: mem.paddr() + 4096, rkey: mr.rkey() },
    ///     flags: SendFlags::SIGNALED,
    ///     sg_list: &sge,
    /// };
    /// qp.post_send(&[wr])?; // on failure: PostError { bad_wr, kind }
    /// let mut wc = [WorkCompletion::default(); 1];
    /// for _ in 0..100 {
    ///     if cq.poll(&mut wc) == 1 { break; }
    /// }
    /// assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::Success));
    /// let mut back = [0u8; 4];
    /// assert!(mem.read_bytes(4096, &mut back));
    /// assert_eq!(&back, b"data");
    /// # Ok(())
    /// # }
    /// ```
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        if !self.alive {
            return Err(PostError { bad_wr: 0, kind: PostErrorKind::Destroyed });
        }
        // A gone device or a dead CQ puts the QP in error (`sync_error`
        // adopts the control path's flag): more loads only then, two tests
        // on the posting path of a healthy QP.
        if self.uk.in_error() || self.dev.qp_in_error(self.id) {
            self.sync_error();
            refuse_in_error(self.dev, self.id)?;
        }
        // A live plain QP always has its completion half (`attach_compl`
        // at create, `detach_compl` only once it is destroyed).
        let Some(c) = self.compl else {
            return Err(PostError { bad_wr: 0, kind: PostErrorKind::Destroyed });
        };
        // The producer half of the split QP (`uk::link`): the consumer's
        // tail in when the ring looks full (`Publish::refresh`), the head
        // out before the doorbell. REG_MR WRs are checked against the
        // device's fast-register records as the general path reaches them
        // (`Publish::admit`; the hot shapes never are REG_MR, so only they
        // pay); the WRs before a refused one are posted.
        let p = PlainPost { link: &c.link, dev: self.dev };
        self.uk.post_send_with(self.dev.regs(), wrs, &p).map_err(
            |PostSendError { bad_wr, kind }| PostError {
                bad_wr,
                kind: match kind {
                    SqError::NotAdmitted => PostErrorKind::FastReg,
                    k => PostErrorKind::Sq(k),
                },
            },
        )
    }
}

/// What a plain QP's post does beside the uk post: the split QP's link
/// (`uk::link::QpLink`) and the REG_MR admission of the device.
struct PlainPost<'x, H: Hal, B: Bar + Clone> {
    link: &'x crate::uk::QpLink,
    dev: &'x Device<H, B>,
}

impl<H: Hal, B: Bar + Clone> Publish for PlainPost<'_, H, B> {
    #[inline(always)]
    fn publish(&self, sq: &Sq<'_>) {
        self.link.publish(sq);
    }

    #[inline(always)]
    fn refresh(&self, sq: &mut Sq<'_>) -> bool {
        self.link.refresh(sq)
    }

    /// REG_MR WRs against the device's fast-register records
    /// (`Device::admit_fast_regs`); every other WR passes.
    #[inline(always)]
    fn admit(&self, wr: &SendWr<'_>) -> bool {
        self.dev.admit_fast_regs(core::slice::from_ref(wr)) == 1
    }
}

/// The `rw` layer posts its chains through this (`rdma_rw_ctx_post`).
impl<H: Hal, B: Bar + Clone> crate::rw::PostSend for Qp<'_, H, B> {
    type Error = PostErrorKind;
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), (usize, PostErrorKind)> {
        Qp::post_send(self, wrs).map_err(|e| (e.bad_wr, e.kind))
    }

    /// Writes the page list into the MR's PBL (level-1 run or level-2
    /// leaves) on this QP's device.
    unsafe fn map_mr_pages(
        &mut self,
        mr: &crate::rw::FrMr,
        pages: &[u64],
    ) -> Result<(), crate::rw::RwError> {
        // SAFETY: `pages` carries this method's contract, which is
        // `write_fr_pages`' whole contract (it checks `mr` itself).
        unsafe { self.dev.write_fr_pages(mr, pages) }.map_err(|_| crate::rw::RwError::MapFailed)
    }
}

impl<H: Hal, B: Bar + Clone, S: SendQueue> Qp<'_, H, B, S> {
    /// Moves the memory the device may use (rings, shadow area, context; a
    /// WQ's ring) into the device's quarantine, with the host-only tracking
    /// memory the object's ring views still point into (`uk` is dropped
    /// after this; nothing it views may be freed before).
    fn quarantine_mem(&mut self) {
        if let Some(m) = self.mem.take() {
            self.dev.quarantine(m._ring);
            self.dev.quarantine(m.ctx);
            self.dev.quarantine(m._trk);
            if let Some(c) = m._compl {
                self.dev.quarantine(c);
            }
            // Two `if let`s, not an array iterator (code size: its drop
            // glue for the elements not yet taken).
            if let Some((a, b)) = m._wq {
                self.dev.quarantine(a);
                self.dev.quarantine(b);
            }
            if let Some((a, b)) = m._shared {
                self.dev.quarantine(a);
                self.dev.quarantine(b);
            }
        }
    }
}

impl<H: Hal, B: Bar + Clone, S: SendQueue> Qp<'_, H, B, S> {
    /// Withdraws the completion half from the device's table (waiting for
    /// a poller that holds it), once.
    fn detach_compl(&mut self) {
        if let Some(c) = self.compl.take() {
            super::table::unregister(self.dev, &c);
        }
    }
}

impl<H: Hal, B: Bar + Clone, S: SendQueue> Drop for Qp<'_, H, B, S> {
    fn drop(&mut self) {
        // Whatever happens below, no poller may reach the completion half
        // once `mem` is released or quarantined.
        let destroyed = self.destroy();
        self.detach_compl();
        if destroyed.is_err() && self.alive {
            // The device still owns the queues: quarantine them and the id
            // (counted, reported by `footprint`, never freed). Its CQEs are
            // no longer attributed to a live QP.
            self.quarantine_mem();
            self.dev.quarantine_ids(1);
            self.dev.bind_qp_cqs(self.id, None);
        }
    }
}

#[cfg(test)]
mod tests;
