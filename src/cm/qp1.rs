//! [`Qp1Transport`]: the CM's [`MadTransport`] on the driver's GSI QP (QP 1)
//! over RoCEv2.
//!
//! Facts (spec `shared/spec/ib-cm-rocev2.md` §1): CM MADs are 256-byte UD
//! datagrams sent to QP 1 of the peer with Q_Key `0x80010000`
//! ([`GSI_QKEY`]; Linux `drivers/infiniband/core/mad.c`: the GSI QP's
//! `IB_QP1_QKEY`), through an address handle naming the peer's GID and
//! next-hop MAC; a UD receive buffer starts with the 40-byte GRH area
//! ([`GRH_BYTES`]; on RoCEv2 over IPv4, 20 unused bytes then the IPv4
//! header, else the IPv6 header: Linux `ib_get_rdma_header_version`,
//! `ib_init_ah_attr_from_wc`), and the UD completion carries the source
//! QPN, source MAC and VLAN (verbs.c: irdma_process_cqe).
//!
//! No allocation: every buffer lives in one caller-provided [`Dma`]
//! (registered once as an MR): `recv_slots` receive buffers of
//! [`QP1_RECV_BYTES`] then `send_slots` send buffers of [`MAD_SIZE`]. Sends
//! and receives complete on two CQs, so a send never consumes a receive's
//! completion. Address handles are cached in [`QP1_AH_SLOTS`] slots; a slot
//! is reused only when no send through it is still in flight.

use core::fmt;
use core::mem::ManuallyDrop;

use irdma_hal::{Bar, Dma, Hal};

use super::machine::{MadAddr, MadTransport};
use super::mad::MAD_SIZE;
use crate::device::Device;
use crate::verbs::{
    Ah, AhAttr, Cq, GRH_BYTES, GSI_QKEY, IpAddr, Mr, MrDesc, Pd, PostError, Qp, QpAttr, QpCap,
    QpInitAttr, QpState, VerbsError,
};
use crate::wr::{
    Access, PageSize, RecvWr, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

/// Bytes of one receive buffer: the GRH area, then the MAD.
pub const QP1_RECV_BYTES: usize = GRH_BYTES as usize + MAD_SIZE;
/// Address handles kept at once.
pub const QP1_AH_SLOTS: usize = 4;
/// Largest buffer in pages (the MR's page list lives on the stack).
pub const QP1_MAX_PAGES: usize = 32;
/// The QP number every CM MAD goes to (spec §1.1).
const GSI_QPN: u32 = 1;
const PAGE: usize = 4096;
/// Send completions carry the AH slot in the upper half of `wr_id`.
const SEND_TAG: u64 = 1 << 63;

/// Why the QP1 transport failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Qp1Error {
    /// A verb failed.
    Verbs(VerbsError),
    /// Posting a work request failed.
    Post(PostError),
    /// The buffer cannot hold the slots (or is above [`QP1_MAX_PAGES`]).
    Buffer {
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        have: usize,
    },
    /// A slot count is zero or too large.
    Slots,
    /// Every send buffer is still in flight.
    SendBusy,
    /// Every address-handle slot has sends in flight.
    AhBusy,
    /// The transport was destroyed.
    Destroyed,
}

impl fmt::Display for Qp1Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Qp1Error::Verbs(e) => write!(f, "QP1: {e}"),
            Qp1Error::Post(e) => write!(f, "QP1 post: {e:?}"),
            Qp1Error::Buffer { need, have } => {
                write!(f, "QP1 buffer of {have} bytes, {need} needed")
            }
            Qp1Error::Slots => f.write_str("QP1 slot count out of range"),
            Qp1Error::SendBusy => f.write_str("every QP1 send buffer is in flight"),
            Qp1Error::AhBusy => f.write_str("every QP1 address handle has sends in flight"),
            Qp1Error::Destroyed => f.write_str("QP1 transport destroyed"),
        }
    }
}

impl core::error::Error for Qp1Error {}

crate::error::wrapping!(Qp1Error from { VerbsError => Verbs, PostError => Post });

/// What the transport counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Qp1Stats {
    /// MADs sent (posted).
    pub sent: u64,
    /// MADs received and handed to the CM.
    pub received: u64,
    /// Receives dropped: wrong length, unusable GRH, no source MAC.
    pub dropped: u64,
    /// Completions with an error status.
    pub errors: u64,
    /// Receives that could not be reposted.
    pub repost_failures: u64,
    /// Address handles created.
    pub ahs_created: u64,
}

struct AhSlot<'d, H: Hal, B: Bar + Clone> {
    ah: Ah<'d, H, B>,
    to: MadAddr,
    inflight: u32,
    last_use: u64,
}

/// The CM's [`MadTransport`] over the device's GSI QP (see the module docs).
pub struct Qp1Transport<'d, H: Hal, B: Bar + Clone> {
    dev: &'d Device<H, B>,
    qp: Qp<'d, H, B>,
    ahs: [Option<AhSlot<'d, H, B>>; QP1_AH_SLOTS],
    mr: Mr<'d, H, B>,
    send_cq: Cq<'d, H, B>,
    recv_cq: Cq<'d, H, B>,
    pd: Pd<'d, H, B>,
    // Freed only once the device let go of it (see `Drop`).
    buf: ManuallyDrop<Dma<H>>,
    recv_slots: u32,
    send_slots: u32,
    next_send: u32,
    inflight: u32,
    clock: u64,
    alive: bool,
    stats: Qp1Stats,
}

impl<'d, H: Hal, B: Bar + Clone> Qp1Transport<'d, H, B> {
    /// Creates the GSI QP (with its PD, two CQs and an MR over `buf`),
    /// moves it INIT (Q_Key [`GSI_QKEY`]) → RTR → RTS (send PSN 0) as Linux
    /// does for QP1 (mad.c: ib_mad_change_qp_state_to_rts), and posts
    /// `recv_slots` receive buffers. `buf` must hold `recv_slots` ×
    /// [`QP1_RECV_BYTES`] + `send_slots` × [`MAD_SIZE`] bytes in at most
    /// [`QP1_MAX_PAGES`] pages. On error everything created is destroyed
    /// again (and `buf` freed).
    pub fn new(
        dev: &'d Device<H, B>,
        buf: Dma<H>,
        recv_slots: u32,
        send_slots: u32,
    ) -> Result<Self, Qp1Error> {
        if recv_slots == 0 || send_slots == 0 || recv_slots > 1024 || send_slots > 1024 {
            return Err(Qp1Error::Slots);
        }
        let need = recv_slots as usize * QP1_RECV_BYTES + send_slots as usize * MAD_SIZE;
        if buf.len() < need || buf.pages() > QP1_MAX_PAGES {
            return Err(Qp1Error::Buffer { need, have: buf.len() });
        }
        let pd = dev.alloc_pd()?;
        let send_cq = dev.create_cq(send_slots)?;
        let recv_cq = dev.create_cq(recv_slots)?;
        let cap = QpCap {
            max_send_wr: send_slots,
            max_recv_wr: recv_slots,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let mut attr = QpInitAttr { send_cq: &send_cq, recv_cq: &recv_cq, cap };
        let qp = dev.create_gsi_qp(&pd, &mut attr)?;
        let mut pages = [0u64; QP1_MAX_PAGES];
        for (i, p) in pages.iter_mut().enumerate().take(buf.pages()) {
            *p = buf.paddr() + (i * PAGE) as u64;
        }
        let desc = MrDesc {
            iova: buf.paddr(),
            length: buf.len() as u64,
            page_size: PageSize::Size4K,
            pages: pages.get(..buf.pages()).unwrap_or(&[]),
            zero_based: false,
            access: Access::LOCAL_WRITE,
        };
        // SAFETY: the pages are those of `buf`, one contiguous `Dma`
        // allocation from `paddr`, mapped both ways. `buf` moves into the
        // transport right below (nothing can fail in between) and is freed
        // only by its `Drop`, after the QP was destroyed and this MR
        // deregistered successfully; if either fails, `buf` is never freed.
        let mr = unsafe { dev.reg_mr(&pd, &desc) }?;
        let mut t = Qp1Transport {
            dev,
            qp,
            ahs: core::array::from_fn(|_| None),
            mr,
            send_cq,
            recv_cq,
            pd,
            buf: ManuallyDrop::new(buf),
            recv_slots,
            send_slots,
            next_send: 0,
            inflight: 0,
            clock: 0,
            alive: true,
            stats: Qp1Stats::default(),
        };
        // On failure `t` is dropped: QP destroyed, then the buffer freed.
        let mut init = QpAttr::new(QpState::Init);
        init.qkey = GSI_QKEY;
        t.qp.modify(&init)?;
        t.qp.modify(&QpAttr::new(QpState::Rtr))?;
        let mut rts = QpAttr::new(QpState::Rts);
        rts.sq_psn = 0;
        t.qp.modify(&rts)?;
        for slot in 0..recv_slots {
            t.post_recv_slot(slot)?;
        }
        Ok(t)
    }

    /// The GSI QP's number (1).
    pub fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    /// What was counted.
    pub fn stats(&self) -> Qp1Stats {
        self.stats
    }

    /// Sends not yet completed.
    pub fn inflight(&self) -> u32 {
        self.inflight
    }

    /// Address handles held.
    pub fn ahs_held(&self) -> usize {
        self.ahs.iter().filter(|s| s.is_some()).count()
    }

    fn recv_offset(slot: u32) -> usize {
        slot as usize * QP1_RECV_BYTES
    }

    fn send_offset(&self, slot: u32) -> usize {
        self.recv_slots as usize * QP1_RECV_BYTES + slot as usize * MAD_SIZE
    }

    fn post_recv_slot(&mut self, slot: u32) -> Result<(), Qp1Error> {
        let sge = [Sge {
            addr: self.buf.paddr() + Self::recv_offset(slot) as u64,
            length: QP1_RECV_BYTES as u32,
            lkey: self.mr.lkey(),
        }];
        self.qp.post_recv(&[RecvWr { wr_id: u64::from(slot), sg_list: &sge }])?;
        Ok(())
    }

    /// Reaps send completions: frees their buffers and AH references.
    fn reap_sends(&mut self) {
        let mut wc = [WorkCompletion::default(); 8];
        loop {
            let n = self.send_cq.poll(&mut wc);
            for w in wc.iter().take(n) {
                if w.status != WcStatus::Success {
                    self.stats.errors += 1;
                }
                if w.wr_id & SEND_TAG == 0 {
                    continue;
                }
                self.inflight = self.inflight.saturating_sub(1);
                let ah = ((w.wr_id >> 32) & 0xFFFF) as usize;
                if let Some(Some(s)) = self.ahs.get_mut(ah) {
                    s.inflight = s.inflight.saturating_sub(1);
                }
            }
            if n < wc.len() {
                return;
            }
        }
    }

    /// The AH slot for `to`: a cached one, a free slot, or the least
    /// recently used slot with no send in flight (destroyed and replaced).
    fn ah_for(&mut self, to: &MadAddr) -> Result<usize, Qp1Error> {
        self.clock = self.clock.wrapping_add(1);
        if let Some(i) = self.ahs.iter().position(|s| s.as_ref().is_some_and(|s| s.to == *to)) {
            if let Some(Some(s)) = self.ahs.get_mut(i) {
                s.last_use = self.clock;
            }
            return Ok(i);
        }
        let slot = match self.ahs.iter().position(|s| s.is_none()) {
            Some(i) => i,
            None => {
                let mut best: Option<(usize, u64)> = None;
                for (i, s) in self.ahs.iter().enumerate() {
                    if let Some(s) = s
                        && s.inflight == 0
                        && best.is_none_or(|(_, u)| s.last_use < u)
                    {
                        best = Some((i, s.last_use));
                    }
                }
                let (i, _) = best.ok_or(Qp1Error::AhBusy)?;
                if let Some(Some(s)) = self.ahs.get_mut(i) {
                    s.ah.destroy()?;
                }
                if let Some(e) = self.ahs.get_mut(i) {
                    *e = None;
                }
                i
            }
        };
        let attr = AhAttr {
            dest_ip: to.peer_ip,
            src_ip: to.local_ip,
            dest_mac: Some(to.peer_mac),
            hop_limit: to.hop_limit,
            traffic_class: to.traffic_class,
            flow_label: 0,
            vlan: to.vlan,
        };
        let ah = self.dev.create_ah(&self.pd, &attr)?;
        self.stats.ahs_created += 1;
        if let Some(e) = self.ahs.get_mut(slot) {
            *e = Some(AhSlot { ah, to: *to, inflight: 0, last_use: self.clock });
        }
        Ok(slot)
    }

    fn send_mad(&mut self, to: &MadAddr, mad: &[u8; MAD_SIZE]) -> Result<(), Qp1Error> {
        if !self.alive {
            return Err(Qp1Error::Destroyed);
        }
        self.reap_sends();
        if self.inflight >= self.send_slots {
            return Err(Qp1Error::SendBusy);
        }
        let ah_slot = self.ah_for(to)?;
        let ah_id = match self.ahs.get(ah_slot) {
            Some(Some(s)) => s.ah.id(),
            _ => return Err(Qp1Error::AhBusy),
        };
        let slot = self.next_send;
        let off = self.send_offset(slot);
        if !self.buf.write_bytes(off, mad) {
            return Err(Qp1Error::Buffer { need: off + MAD_SIZE, have: self.buf.len() });
        }
        let sge = [Sge {
            addr: self.buf.paddr() + off as u64,
            length: MAD_SIZE as u32,
            lkey: self.mr.lkey(),
        }];
        let wr = SendWr {
            wr_id: SEND_TAG | ((ah_slot as u64) << 32) | u64::from(slot),
            opcode: WrOpcode::UdSend {
                ah: ah_id,
                remote_qpn: GSI_QPN,
                remote_qkey: GSI_QKEY,
                imm: None,
            },
            flags: SendFlags::SIGNALED,
            sg_list: &sge,
        };
        self.qp.post_send(&[wr])?;
        self.next_send = (slot + 1) % self.send_slots;
        self.inflight += 1;
        if let Some(Some(s)) = self.ahs.get_mut(ah_slot) {
            s.inflight += 1;
        }
        self.stats.sent += 1;
        Ok(())
    }

    /// The sender's address from a receive's GRH area and completion; `None`
    /// when unusable.
    fn source(&self, slot: u32, wc: &WorkCompletion) -> Option<MadAddr> {
        let ud = wc.ud?;
        let off = Self::recv_offset(slot);
        let mut grh = [0u8; GRH_BYTES as usize];
        if !self.buf.read_bytes(off, &mut grh) {
            return None;
        }
        let (peer_ip, local_ip, hop_limit, traffic_class) = if ud.ipv4 {
            // IPv4 header in the last 20 bytes: TOS at +1, TTL at +8,
            // source at +12, destination at +16 (RFC 791).
            let h = grh.get(20..40)?;
            let ip = |o: usize| -> Option<IpAddr> {
                Some(IpAddr::V4(h.get(o..o + 4)?.try_into().ok()?))
            };
            (ip(12)?, ip(16)?, *h.get(8)?, *h.get(1)?)
        } else {
            // IPv6 header: traffic class in bits 27:20 of the first word,
            // hop limit at +7, source at +8, destination at +24 (RFC 8200).
            let w = u32::from_be_bytes(grh.get(0..4)?.try_into().ok()?);
            let ip = |o: usize| -> Option<IpAddr> {
                Some(IpAddr::V6(grh.get(o..o + 16)?.try_into().ok()?))
            };
            (ip(8)?, ip(24)?, *grh.get(7)?, (w >> 20) as u8)
        };
        let peer_mac = match ud.smac {
            Some(m) => m,
            None => self.dev.neighbour(peer_ip)?,
        };
        let vlan = ud.vlan_id.map(|v| v | (u16::from(ud.sl & 7) << 13));
        Some(MadAddr { peer_ip, local_ip, peer_mac, vlan, hop_limit, traffic_class })
    }

    fn recv_mad(&mut self, out: &mut [u8; MAD_SIZE]) -> Option<MadAddr> {
        if !self.alive {
            return None;
        }
        self.reap_sends();
        loop {
            let mut wc = [WorkCompletion::default(); 1];
            if self.recv_cq.poll(&mut wc) == 0 {
                return None;
            }
            let w = wc[0];
            let slot = u32::try_from(w.wr_id).ok().filter(|s| *s < self.recv_slots)?;
            if w.status != WcStatus::Success || w.opcode != WcOpcode::Recv {
                // a flushed receive: the QP is in error, nothing to repost
                self.stats.errors += 1;
                continue;
            }
            let src =
                if w.byte_len as usize == QP1_RECV_BYTES { self.source(slot, &w) } else { None };
            let got = src
                .filter(|_| self.buf.read_bytes(Self::recv_offset(slot) + GRH_BYTES as usize, out));
            if self.post_recv_slot(slot).is_err() {
                self.stats.repost_failures += 1;
            }
            match got {
                Some(a) => {
                    self.stats.received += 1;
                    return Some(a);
                }
                None => self.stats.dropped += 1,
            }
        }
    }

    /// Destroys the QP, the address handles, the MR, the CQs (the PD goes
    /// with the transport). After `Ok` the buffer is freed on drop; after
    /// an error the call may be retried, and a transport dropped without a
    /// successful destroy keeps its buffer allocated forever (the device
    /// may still write it).
    pub fn destroy(&mut self) -> Result<(), Qp1Error> {
        self.alive = false;
        self.qp.destroy()?;
        for s in self.ahs.iter_mut() {
            if let Some(a) = s {
                a.ah.destroy()?;
            }
            *s = None;
        }
        self.inflight = 0;
        self.mr.dereg()?;
        self.send_cq.destroy()?;
        self.recv_cq.destroy()?;
        Ok(())
    }
}

impl<H: Hal, B: Bar + Clone> MadTransport for Qp1Transport<'_, H, B> {
    type Error = Qp1Error;

    fn send(&mut self, to: &MadAddr, mad: &[u8; MAD_SIZE]) -> Result<(), Qp1Error> {
        self.send_mad(to, mad)
    }

    fn recv(&mut self, buf: &mut [u8; MAD_SIZE]) -> Option<MadAddr> {
        self.recv_mad(buf)
    }
}

impl<H: Hal, B: Bar + Clone> Drop for Qp1Transport<'_, H, B> {
    fn drop(&mut self) {
        if self.destroy().is_ok() {
            // SAFETY: the QP (the only user of the receive and send
            // buffers) is destroyed and the MR deregistered: the device no
            // longer owns any byte of `buf`; it is never touched again.
            unsafe { ManuallyDrop::drop(&mut self.buf) }
        }
    }
}
