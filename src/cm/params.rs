//! The QP attributes a connection's CM exchange decides, and their
//! conversion into the verbs [`QpAttr`] steps INIT → RTR → RTS.
//!
//! Which CM field feeds which attribute: Linux cm.c `cm_init_qp_init_attr`,
//! `cm_init_qp_rtr_attr`, `cm_init_qp_rts_attr`, wrapped by cma.c
//! `cma_modify_qp_rtr` / `cma_modify_qp_rts`; fact sheet
//! `shared/spec/ib-cm-rocev2.md` §6 (note the crossing of responder
//! resources / initiator depth and of the starting PSNs).

use irdma_hal::{Bar, Hal};

use crate::uk::SendQueue;
use crate::verbs::{AddressVector, IpAddr, Qp, QpAttr, QpState, VerbsError};

/// What the CM decided for one RC connection, from the local side's view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnParams {
    /// The peer's QPN (RTR dest QPN): REP Local QPN on the active side,
    /// REQ Local QPN on the passive side.
    pub remote_qpn: u32,
    /// Our QPN.
    pub local_qpn: u32,
    /// Expected receive PSN (RTR): our own advertised Starting PSN.
    pub rq_psn: u32,
    /// First send PSN (RTS): the peer's advertised Starting PSN.
    pub sq_psn: u32,
    /// Path MTU in bytes (REQ Path Packet Payload MTU).
    pub path_mtu: u32,
    /// Transport retries (REQ Retry Count, both sides).
    pub retry_cnt: u8,
    /// RNR retries: the REP value on the active side, the REQ value on the
    /// passive side (spec §8 pitfall 10).
    pub rnr_retry: u8,
    /// Outstanding RDMA READ/atomics as requester (ORD, RTS).
    pub max_rd_atomic: u8,
    /// Incoming RDMA READ/atomics as responder (IRD, RTR).
    pub max_dest_rd_atomic: u8,
    /// Our address (source GID).
    pub local_ip: IpAddr,
    /// The peer's address (destination GID).
    pub remote_ip: IpAddr,
    /// The peer's (next-hop) MAC.
    pub remote_mac: [u8; 6],
    /// 802.1Q TCI, if tagged.
    pub vlan: Option<u16>,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class / TOS.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Local ACK timeout exponent (`av.timeout`; GEN_2 ignores it, spec
    /// §8 pitfall 26, but it sets the CM's timewait).
    pub ack_timeout: u8,
    /// RDMA-CM port of our side.
    pub local_port: u16,
    /// RDMA-CM port of the peer.
    pub remote_port: u16,
}

impl ConnParams {
    /// The address vector of the RTR step.
    pub const fn av(&self) -> AddressVector {
        AddressVector {
            dest_mac: self.remote_mac,
            dest_ip: self.remote_ip,
            src_ip: self.local_ip,
            hop_limit: self.hop_limit,
            traffic_class: self.traffic_class,
            flow_label: self.flow_label,
            vlan: self.vlan,
        }
    }

    /// The three modify steps, INIT, RTR and RTS (Q_Key 0: RC writes none,
    /// cm.c `cm_format_req`).
    pub const fn qp_attrs(&self) -> [QpAttr; 3] {
        let init = QpAttr::new(QpState::Init);
        let mut rtr = QpAttr::new(QpState::Rtr);
        rtr.dest_qp = self.remote_qpn;
        rtr.rq_psn = self.rq_psn;
        rtr.path_mtu = self.path_mtu;
        rtr.av = Some(self.av());
        rtr.max_dest_rd_atomic = self.max_dest_rd_atomic;
        let mut rts = QpAttr::new(QpState::Rts);
        rts.sq_psn = self.sq_psn;
        rts.retry_cnt = self.retry_cnt;
        rts.rnr_retry = self.rnr_retry;
        rts.max_rd_atomic = self.max_rd_atomic;
        rts.max_dest_rd_atomic = self.max_dest_rd_atomic;
        rts.dest_qp = self.remote_qpn;
        rts.path_mtu = self.path_mtu;
        rts.rq_psn = self.rq_psn;
        rts.av = Some(self.av());
        [init, rtr, rts]
    }

    /// Drives a verbs RC QP in RESET through INIT → RTR → RTS with these
    /// parameters (the passive side calls it before
    /// [`Cm::accept`](super::Cm::accept), the active side before
    /// [`Cm::ready_to_use`](super::Cm::ready_to_use), as Linux does).
    pub fn apply<H: Hal, B: Bar + Clone, S: SendQueue>(
        &self,
        qp: &mut Qp<'_, H, B, S>,
    ) -> Result<(), VerbsError> {
        for a in &self.qp_attrs() {
            qp.modify(a)?;
        }
        Ok(())
    }
}
