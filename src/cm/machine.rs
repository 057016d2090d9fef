//! The CM state machine for the active and passive sides (IBTA vol. 1
//! ch. 12, behaviour as Linux `drivers/infiniband/core/cm.c`; fact sheet
//! `shared/spec/ib-cm-rocev2.md` §4), with the RDMA-CM acceptance rules of
//! cma.c (§5).
//!
//! No allocation, no threads: a fixed table of `C` connections and `L`
//! listeners; the caller drives every step with the current time in
//! milliseconds ([`Cm::on_mad`], [`Cm::poll`], and the API calls), and the
//! CM sends through a [`MadTransport`].

use core::fmt;

use super::mad::{
    self, CmMad, CmMsg, Drep, Dreq, MAD_SIZE, MadError, Mra, Rej, Rep, Req, ReqPath, Rtu, SidrRep,
    SidrReq, sidr_status,
};
use super::params::ConnParams;
use super::rdma_cm::{
    self, CmaHdr, PortSpace, REQ_USER_DATA, SIDR_REQ_USER_DATA, cm_ack_timeout, cm_ms, gid_of,
    ip_of_gid, msg_response, rej, service_id, service_id_parts,
};
use crate::verbs::IpAddr;

/// Where a MAD goes to or came from: the peer's QP1 over RoCEv2 (the UD
/// address handle a QP1 send needs, or what a QP1 receive reports: GRH
/// addresses, CQE source MAC and VLAN; spec §1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MadAddr {
    /// The peer's IP (destination GID of a send, source of a receive).
    pub peer_ip: IpAddr,
    /// Our IP (source GID index of a send, destination of a receive).
    pub local_ip: IpAddr,
    /// The peer's (next-hop) MAC.
    pub peer_mac: [u8; 6],
    /// 802.1Q TCI, if tagged.
    pub vlan: Option<u16>,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class / TOS.
    pub traffic_class: u8,
}

/// The datagram service under the CM: 256-byte MADs to and from QP1 (remote
/// QPN 1, Q_Key [`mad::QP1_QKEY`], spec §1.1): [`super::Qp1Transport`]
/// over the driver's QP1; some tests use an in-memory one.
pub trait MadTransport {
    /// Why a send failed.
    type Error;
    /// Sends `mad` to the peer's QP1.
    fn send(&mut self, to: &MadAddr, mad: &[u8; MAD_SIZE]) -> Result<(), Self::Error>;
    /// One received MAD into `buf`, with its source; `None` when nothing is
    /// pending. Receives of another size are the transport's to drop.
    fn recv(&mut self, buf: &mut [u8; MAD_SIZE]) -> Option<MadAddr>;
}

/// A connection handle: our local communication id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnId(pub u32);

/// A listener handle (its slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ListenId(pub usize);

/// Service Timeout of the MRAs this CM sends on its own (RDMA-CM's
/// `CMA_CM_MRA_SETTING`, cma.c; shared spec ib-cm-rocev2.md §4.1: 24 →
/// 65536 ms): the peer then waits that long plus its ack timeout before
/// retransmitting.
pub const MRA_SERVICE_TIMEOUT: u8 = 24;

/// CM states of a connection (`enum ib_cm_state`, ib_cm.h). MRA_REP_SENT
/// is folded into [`CmState::RepRcvd`]: RDMA-CM arms its delayed MRA as soon
/// as a REP arrives (cma.c `cma_ib_handler`; spec §4.3), so a duplicate REP
/// there is answered with an MRA of the REP. More states may come
/// (`#[non_exhaustive]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmState {
    /// Slot unused.
    Idle,
    /// Active: REQ sent, retransmitted until answered.
    ReqSent,
    /// Active: the peer MRA-ed our REQ.
    MraReqRcvd,
    /// Passive: REQ received, the caller decides.
    ReqRcvd,
    /// Passive: REQ received and MRA-ed ([`Cm::mra`]); the caller decides.
    MraReqSent,
    /// Passive: REP sent, retransmitted until RTU.
    RepSent,
    /// Passive: the peer MRA-ed our REP.
    MraRepRcvd,
    /// Active: REP received, the caller moves the QP, then RTU (Linux's
    /// MRA_REP_SENT: a duplicate REP gets an MRA of the REP).
    RepRcvd,
    /// Connected.
    Established,
    /// DREQ sent, retransmitted until DREP.
    DreqSent,
    /// DREQ received, the caller disconnects (DREP).
    DreqRcvd,
    /// Waiting out stray packets before ids and QPN are reused.
    Timewait,
    /// Active SIDR: SIDR_REQ sent, retransmitted until a SIDR_REP
    /// (IB_CM_SIDR_REQ_SENT).
    SidrReqSent,
    /// Passive SIDR: SIDR_REQ received, the caller decides
    /// ([`Cm::sidr_accept`] / [`Cm::sidr_reject`]; IB_CM_SIDR_REQ_RCVD).
    SidrReqRcvd,
    /// Passive SIDR: SIDR_REP sent; kept for [`SIDR_LINGER_INTERVALS`]
    /// SIDR_REQ timeouts to answer a retransmitted SIDR_REQ (our REP was
    /// lost) with the same REP, then the slot is free without an event.
    SidrRepSent,
}

/// Timing of an active connection (defaults: RDMA-CM's, cma.c
/// `CMA_CM_RESPONSE_TIMEOUT`, `CMA_MAX_CM_RETRIES`,
/// `CMA_IBOE_PACKET_LIFETIME` of older kernels; spec §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmTiming {
    /// Packet life time exponent.
    pub packet_life_time: u8,
    /// CM response timeout exponent (both REQ fields).
    pub cm_response_timeout: u8,
    /// Max CM retries (4 bits).
    pub max_cm_retries: u8,
}

impl Default for CmTiming {
    fn default() -> Self {
        Self { packet_life_time: 18, cm_response_timeout: 20, max_cm_retries: 15 }
    }
}

/// The local CA's constant facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmConfig {
    /// Our node GUID (irdma: EUI-64 of the port MAC,
    /// [`rdma_cm::guid_from_mac`]); stable, it keys duplicate detection.
    pub ca_guid: u64,
    /// Upper 32 bits of our transaction ids (the MAD agent's `hi_tid`).
    pub hi_tid: u32,
    /// Random operand XOR-ed into local communication ids (cm.c
    /// `cm_alloc_id_priv`).
    pub id_seed: u32,
    /// Our addresses (RoCEv2 GIDs); a REQ naming another GID is refused
    /// with REJ 12. The first is "GID index 0".
    pub local_ips: [Option<IpAddr>; 4],
    /// Target ACK delay we put in REP (irdma reports 0).
    pub ca_ack_delay: u8,
    /// Timing of REQs we send.
    pub timing: CmTiming,
}

/// How long an answered SIDR_REQ is remembered, in SIDR_REQ timeouts
/// (ms([`CmTiming::cm_response_timeout`]), RDMA-CM's own: cma.c
/// `cma_resolve_ib_udp` `timeout_ms`). Linux forgets it as soon as its
/// SIDR_REP is sent (cm.c `cm_send_sidr_rep_locked` removes the remote
/// SIDR entry), so a retransmitted SIDR_REQ there is a new request; here a
/// retransmission within this window gets the same SIDR_REP again and
/// later ones are new requests, as on Linux.
pub const SIDR_LINGER_INTERVALS: u64 = 2;

/// The largest responder resources / initiator depth the E810 GEN_2 offers
/// (`ICRDMA_MAX_IRD_SIZE` / `ICRDMA_MAX_ORD_SIZE`; spec §4.1, §8 pitfall 9).
pub const MAX_RD_ATOMIC: u8 = 8;

/// What [`Cm::connect`] needs (`rdma_connect` with its resolved route).
#[derive(Clone, Copy, Debug)]
pub struct ConnectParams<'a> {
    /// Where the peer's QP1 is, and our address on that path.
    pub peer: MadAddr,
    /// Port space of the service id (RC: TCP).
    pub port_space: PortSpace,
    /// The listener's port (in the service id).
    pub dst_port: u16,
    /// Our RDMA-CM source port (in the `cma_hdr`).
    pub src_port: u16,
    /// Our RC QPN (24 bits).
    pub qpn: u32,
    /// Our starting PSN = the PSN we expect to receive (24 bits).
    pub starting_psn: u32,
    /// RDMA READ/atomics we accept as responder (≤ 8).
    pub responder_resources: u8,
    /// RDMA READ/atomics we issue as requester (≤ 8).
    pub initiator_depth: u8,
    /// Transport retries (clamped to 7 as cma.c does).
    pub retry_count: u8,
    /// RNR retries (clamped to 7; 7 = infinite).
    pub rnr_retry_count: u8,
    /// Path MTU in bytes (256 … 4096).
    pub path_mtu: u32,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// Application private data (≤ 56 bytes after the `cma_hdr`).
    pub private_data: &'a [u8],
}

/// What [`Cm::accept`] needs (`rdma_accept`).
#[derive(Clone, Copy, Debug)]
pub struct AcceptParams<'a> {
    /// Our RC QPN.
    pub qpn: u32,
    /// Our starting PSN = the PSN we expect to receive.
    pub starting_psn: u32,
    /// RDMA READ/atomics we accept as responder (≤ 8; clamped to the
    /// REQ's initiator depth).
    pub responder_resources: u8,
    /// RDMA READ/atomics we issue (≤ 8; clamped to the REQ's responder
    /// resources).
    pub initiator_depth: u8,
    /// RNR retries the peer should use toward us (clamped to 7).
    pub rnr_retry_count: u8,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// Application private data (≤ 196 bytes).
    pub private_data: &'a [u8],
}

impl<'a> ConnectParams<'a> {
    /// Parameters for connecting RC QP `qpn` (starting PSN `starting_psn`)
    /// to the service at `dst_port` of `port_space` on `peer`, with what an
    /// RDMA-CM application gets when it sets nothing else: source port
    /// 0x8000 + the QPN's low 14 bits (an ephemeral port, as `cma.c` binds
    /// one), [`MAX_RD_ATOMIC`] RDMA READs each way, retry and RNR retry 7,
    /// path MTU 1024 (the largest IB MTU below a 1500-byte Ethernet MTU:
    /// `include/rdma/ib_addr.h` `iboe_get_mtu`, spec `ib-cm-rocev2.md`
    /// "MTU"), no SRQ, no private data. Change fields with struct update
    /// syntax:
    ///
    /// ```
    /// # use irdma::cm::{ConnectParams, MadAddr, rdma_cm::PortSpace};
    /// # use irdma::verbs::IpAddr;
    /// # let peer = MadAddr {
    /// #     peer_ip: IpAddr::V4([10, 0, 0, 2]),
    /// #     local_ip: IpAddr::V4([10, 0, 0, 1]),
    /// #     peer_mac: [2, 0, 0, 0, 0, 0xb],
    /// #     vlan: None,
    /// #     hop_limit: 64,
    /// #     traffic_class: 0,
    /// # };
    /// let p = ConnectParams {
    ///     private_data: b"hello",
    ///     ..ConnectParams::new(peer, PortSpace::Tcp, 7174, 0x42, 0x1234)
    /// };
    /// assert_eq!((p.dst_port, p.rnr_retry_count, p.path_mtu), (7174, 7, 1024));
    /// ```
    pub fn new(
        peer: MadAddr,
        port_space: PortSpace,
        dst_port: u16,
        qpn: u32,
        starting_psn: u32,
    ) -> ConnectParams<'a> {
        ConnectParams {
            peer,
            port_space,
            dst_port,
            src_port: 0x8000 | (qpn & 0x3fff) as u16,
            qpn,
            starting_psn,
            responder_resources: MAX_RD_ATOMIC,
            initiator_depth: MAX_RD_ATOMIC,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: 1024,
            srq: false,
            private_data: &[],
        }
    }
}

impl<'a> AcceptParams<'a> {
    /// Parameters for accepting with RC QP `qpn` (starting PSN
    /// `starting_psn`): [`MAX_RD_ATOMIC`] RDMA READs each way (the CM clamps
    /// them to what the REQ offered), RNR retry 7, no SRQ, no private data;
    /// change fields with struct update syntax.
    pub fn new(qpn: u32, starting_psn: u32) -> AcceptParams<'a> {
        AcceptParams {
            qpn,
            starting_psn,
            responder_resources: MAX_RD_ATOMIC,
            initiator_depth: MAX_RD_ATOMIC,
            rnr_retry_count: 7,
            srq: false,
            private_data: &[],
        }
    }
}

/// What [`Cm::sidr_resolve`] needs (`rdma_resolve_route` on a UD id of
/// the UDP port space: cma.c `cma_resolve_ib_udp`).
#[derive(Clone, Copy, Debug)]
pub struct SidrParams<'a> {
    /// Where the peer's QP1 is, and our address on that path.
    pub peer: MadAddr,
    /// Port space of the service id (UD: UDP or IB).
    pub port_space: PortSpace,
    /// The listener's port (in the service id).
    pub dst_port: u16,
    /// Our RDMA-CM source port (in the `cma_hdr`).
    pub src_port: u16,
    /// Application private data (≤ 180 bytes after the `cma_hdr`).
    pub private_data: &'a [u8],
}

/// What [`Cm::sidr_accept`] needs (`rdma_accept` on a UD id: cma.c
/// `cma_send_sidr_rep`).
#[derive(Clone, Copy, Debug)]
pub struct SidrAcceptParams<'a> {
    /// The UD QP the peer is to send to (24 bits).
    pub qpn: u32,
    /// Its Q_Key ([`rdma_cm::UDP_QKEY`] for RDMA-CM peers: Linux refuses
    /// a SIDR_REP with another Q_Key, cma.c `cma_sidr_rep_handler` →
    /// `cma_set_qkey`).
    pub qkey: u32,
    /// Application private data (≤ 136 bytes).
    pub private_data: &'a [u8],
}

/// A valid SIDR_REQ, for the caller to answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SidrReqInfo {
    /// The listener it matched.
    pub listen: ListenId,
    /// Addresses and source port from the `cma_hdr`.
    pub hdr: CmaHdr,
    /// Our port (from the service id).
    pub local_port: u16,
    /// The application data after the `cma_hdr`.
    pub private_data: [u8; SIDR_REQ_USER_DATA],
    /// Where the SIDR_REQ came from (the address handle for UD replies).
    pub peer: MadAddr,
}

/// A valid REQ, for the caller to accept or reject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReqInfo {
    /// The listener it matched.
    pub listen: ListenId,
    /// Addresses and source port from the `cma_hdr`.
    pub hdr: CmaHdr,
    /// Our port (from the service id).
    pub local_port: u16,
    /// The application data after the `cma_hdr`.
    pub private_data: [u8; REQ_USER_DATA],
    /// The peer's QPN.
    pub remote_qpn: u32,
    /// The peer's responder resources (our initiator depth limit).
    pub responder_resources: u8,
    /// The peer's initiator depth (our responder resources need).
    pub initiator_depth: u8,
    /// Where the REQ came from.
    pub peer: MadAddr,
}

/// What happened, for the caller. More kinds of events may come
/// (`#[non_exhaustive]`): a caller's `match` needs a wildcard arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmEvent {
    /// Passive: a valid REQ; answer with [`Cm::accept`] or [`Cm::reject`].
    ConnectRequest {
        /// The new connection.
        id: ConnId,
        /// The request.
        info: ReqInfo,
    },
    /// Active: the REP arrived. Apply `params` to the QP, then call
    /// [`Cm::ready_to_use`] (sends RTU).
    Connected {
        /// The connection.
        id: ConnId,
        /// The QP attributes.
        params: ConnParams,
        /// The REP's private data.
        private_data: [u8; mad::pdata::REP],
    },
    /// Passive: the RTU arrived (or [`Cm::established`] was called).
    Established {
        /// The connection.
        id: ConnId,
    },
    /// The peer rejected (the slot is free again, or in timewait for
    /// reason 10 or when established).
    Rejected {
        /// The connection.
        id: ConnId,
        /// REJ reason.
        reason: u16,
        /// REJ private data.
        private_data: [u8; mad::pdata::REJ],
    },
    /// REQ or REP retries ran out (RDMA-CM `UNREACHABLE`); the slot is free.
    TimedOut {
        /// The connection.
        id: ConnId,
    },
    /// DREQ received (call [`Cm::disconnect`] to answer), DREP received, or
    /// our DREQ ran out of retries (`timed_out`).
    Disconnected {
        /// The connection.
        id: ConnId,
        /// Our DREQ was never answered.
        timed_out: bool,
    },
    /// Timewait ended: the slot, the id and the QPN are free.
    TimewaitExit {
        /// The connection.
        id: ConnId,
        /// Its QPN.
        qpn: u32,
    },
    /// Passive: a valid SIDR_REQ; answer with [`Cm::sidr_accept`] or
    /// [`Cm::sidr_reject`].
    SidrRequest {
        /// The request.
        id: ConnId,
        /// What it asked.
        info: SidrReqInfo,
    },
    /// Active: the SIDR_REP said success: send UD datagrams to `qpn` with
    /// `qkey` (RDMA-CM `ESTABLISHED` on a UD id); the slot is free.
    SidrResolved {
        /// The request.
        id: ConnId,
        /// The peer's UD QPN.
        qpn: u32,
        /// Its Q_Key.
        qkey: u32,
        /// The SIDR_REP's private data.
        private_data: [u8; mad::pdata::SIDR_REP],
    },
    /// Active: the SIDR_REP refused (RDMA-CM `UNREACHABLE` with the
    /// status; [`mad::sidr_status`]); the slot is free. A SIDR_REQ that
    /// ran out of retries is [`CmEvent::TimedOut`].
    SidrRejected {
        /// The request.
        id: ConnId,
        /// SIDR_REP status (never 0).
        status: u8,
        /// The SIDR_REP's private data.
        private_data: [u8; mad::pdata::SIDR_REP],
    },
}

/// Why an API call was refused. More reasons may come (`#[non_exhaustive]`),
/// so outside this crate a `match` without a wildcard arm does not compile:
///
/// ```compile_fail,E0004
/// use irdma::cm::CmError;
/// fn name(e: CmError) -> &'static str {
///     match e {
///         CmError::TableFull => "table full",
///         CmError::ListenTableFull => "listener table full",
///         CmError::AlreadyListening => "already listening",
///         CmError::NotFound => "not found",
///         CmError::InvalidState(_) => "invalid state",
///         CmError::Invalid(_) => "invalid",
///         CmError::Mad(_) => "MAD",
///     }
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmError {
    /// The connection table is full.
    TableFull,
    /// The listener table is full.
    ListenTableFull,
    /// The service id and address are already listened on.
    AlreadyListening,
    /// No such connection or listener.
    NotFound,
    /// The call does not fit the connection's state.
    InvalidState(CmState),
    /// A parameter is out of range.
    Invalid(&'static str),
    /// A message would not encode.
    Mad(MadError),
}

impl fmt::Display for CmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TableFull => f.write_str("CM connection table full"),
            Self::ListenTableFull => f.write_str("CM listener table full"),
            Self::AlreadyListening => f.write_str("service id already listened on"),
            Self::NotFound => f.write_str("no such CM connection or listener"),
            Self::InvalidState(s) => write!(f, "not allowed in CM state {s:?}"),
            Self::Invalid(w) => write!(f, "invalid CM parameter: {w}"),
            Self::Mad(e) => write!(f, "CM message: {e}"),
        }
    }
}
impl core::error::Error for CmError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Mad(e) => Some(e),
            _ => None,
        }
    }
}
impl From<MadError> for CmError {
    fn from(e: MadError) -> Self {
        Self::Mad(e)
    }
}

/// Why a received MAD produced nothing (all silent on the wire, as Linux).
/// More reasons may come (`#[non_exhaustive]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ignored {
    /// Not a CM MAD this CM handles.
    Malformed(MadError),
    /// A REQ we answered with this REJ reason.
    Rejected(u16),
    /// A retransmission of a message already handled (answered as cm.c
    /// does when it answers at all).
    Duplicate,
    /// Names no connection in a state that takes it (stale).
    Stale,
    /// DREQ whose remote QPN is not ours (cm.c `cm_dreq_handler`).
    WrongQpn,
    /// A REQ that found no free slot (the peer will retransmit).
    TableFull,
    /// A SIDR_REQ we answered at once with this SIDR_REP status (no such
    /// service, or RDMA-CM refused it).
    SidrRejected(u8),
}

impl fmt::Display for Ignored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(e) => write!(f, "MAD dropped: {e}"),
            Self::Rejected(r) => write!(f, "REQ rejected with reason {r}"),
            Self::Duplicate => f.write_str("duplicate MAD"),
            Self::Stale => f.write_str("stale MAD (no matching connection)"),
            Self::WrongQpn => f.write_str("DREQ for another QPN"),
            Self::TableFull => f.write_str("REQ dropped: connection table full"),
            Self::SidrRejected(s) => write!(f, "SIDR_REQ answered with status {s}"),
        }
    }
}
impl core::error::Error for Ignored {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Malformed(e) => Some(e),
            _ => None,
        }
    }
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmStats {
    /// MADs sent (including retransmissions).
    pub sent: u64,
    /// Sends the transport refused.
    pub send_errors: u64,
    /// Retransmissions of REQ/REP/DREQ.
    pub retransmits: u64,
    /// MADs received.
    pub received: u64,
    /// Received MADs that produced nothing.
    pub ignored: u64,
}

#[derive(Clone, Copy, Debug)]
struct Listener {
    sid: u64,
    addr: Option<IpAddr>,
}

#[derive(Clone, Copy, Debug)]
struct Conn {
    state: CmState,
    active: bool,
    local_id: u32,
    remote_id: u32,
    remote_guid: u64,
    /// TID of the REQ (ours or the peer's).
    tid: u64,
    /// TID of the received DREQ.
    dreq_tid: u64,
    local_qpn: u32,
    remote_qpn: Option<u32>,
    peer: MadAddr,
    /// The REQ sent (active) or received (passive).
    req: Req,
    params: Option<ConnParams>,
    /// The timed message (REQ, REP or DREQ), resent identically.
    out: [u8; MAD_SIZE],
    deadline: u64,
    retries_left: u8,
    max_retries: u8,
    interval: u64,
    av_timeout: u8,
}

/// The connection manager: `C` connections, `L` listeners.
pub struct Cm<const C: usize, const L: usize> {
    cfg: CmConfig,
    conns: [Option<Conn>; C],
    listeners: [Option<Listener>; L],
    next_id: u32,
    stats: CmStats,
}

fn fit24(v: u32, what: &'static str) -> Result<(), CmError> {
    if v >> 24 == 0 { Ok(()) } else { Err(CmError::Invalid(what)) }
}

/// The REQ field of a SIDR slot: only the service id is meaningful.
const fn sidr_req_of(service_id: u64) -> Req {
    Req {
        local_comm_id: 0,
        vendor_id: 0,
        service_id,
        local_ca_guid: 0,
        local_qkey: 0,
        local_qpn: 0,
        responder_resources: 0,
        local_eecn: 0,
        initiator_depth: 0,
        remote_eecn: 0,
        remote_cm_response_timeout: 0,
        transport_type: 0,
        flow_control: false,
        starting_psn: 0,
        local_cm_response_timeout: 0,
        retry_count: 0,
        pkey: 0,
        path_mtu: 0,
        rdc_exists: false,
        rnr_retry_count: 0,
        max_cm_retries: 0,
        srq: false,
        ext_transport_type: 0,
        primary: ReqPath::ZERO,
        alternate: ReqPath::ZERO,
        private_data: [0; mad::pdata::REQ],
    }
}

/// The passive side's record of the REQ `r` it accepted for the caller to
/// answer (state REQ_RCVD).
fn passive_conn(now: u64, src: &MadAddr, tid: u64, r: &Req, local_id: u32) -> Conn {
    Conn {
        state: CmState::ReqRcvd,
        active: false,
        local_id,
        remote_id: r.local_comm_id,
        remote_guid: r.local_ca_guid,
        tid,
        dreq_tid: 0,
        local_qpn: 0,
        remote_qpn: Some(r.local_qpn),
        peer: *src,
        req: *r,
        params: None,
        out: [0; MAD_SIZE],
        deadline: now,
        retries_left: 0,
        max_retries: r.max_cm_retries,
        interval: cm_ms(r.local_cm_response_timeout),
        av_timeout: r.primary.local_ack_timeout,
    }
}

impl<const C: usize, const L: usize> Cm<C, L> {
    /// An empty CM.
    pub const fn new(cfg: CmConfig) -> Self {
        Self {
            cfg,
            conns: [None; C],
            listeners: [None; L],
            next_id: 0,
            stats: CmStats { sent: 0, send_errors: 0, retransmits: 0, received: 0, ignored: 0 },
        }
    }

    /// Counters.
    pub const fn stats(&self) -> CmStats {
        self.stats
    }

    /// Connections in the table (any state but idle).
    pub fn active_connections(&self) -> usize {
        self.conns.iter().filter(|c| c.is_some()).count()
    }

    /// The state of a connection (`Idle` if unknown).
    pub fn state(&self, id: ConnId) -> CmState {
        self.find(id).map_or(CmState::Idle, |i| self.conn(i).map_or(CmState::Idle, |c| c.state))
    }

    /// The parameters of a connection, once known.
    pub fn params(&self, id: ConnId) -> Option<ConnParams> {
        self.conn(self.find(id)?)?.params
    }

    /// The earliest time `poll` has work, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        self.conns.iter().flatten().filter(|c| timed(c.state)).map(|c| c.deadline).min()
    }

    /// Listens on `port` of `ps`, on `addr` or on every address (`None`):
    /// `rdma_bind_addr` + `rdma_listen` (CM level: exact service id, cm.c
    /// `cm_find_listen`; RDMA-CM level: the address, cma.c
    /// `cma_match_private_data`).
    pub fn listen(
        &mut self,
        ps: PortSpace,
        port: u16,
        addr: Option<IpAddr>,
    ) -> Result<ListenId, CmError> {
        let sid = service_id(ps, port);
        if self.listeners.iter().flatten().any(|l| l.sid == sid && l.addr == addr) {
            return Err(CmError::AlreadyListening);
        }
        let (i, slot) = self
            .listeners
            .iter_mut()
            .enumerate()
            .find(|(_, l)| l.is_none())
            .ok_or(CmError::ListenTableFull)?;
        *slot = Some(Listener { sid, addr });
        Ok(ListenId(i))
    }

    /// Stops listening; connections already made stay.
    pub fn unlisten(&mut self, id: ListenId) -> Result<(), CmError> {
        match self.listeners.get_mut(id.0) {
            Some(l @ Some(_)) => {
                *l = None;
                Ok(())
            }
            _ => Err(CmError::NotFound),
        }
    }

    fn find(&self, id: ConnId) -> Option<usize> {
        self.conns.iter().position(|c| c.is_some_and(|c| c.local_id == id.0))
    }

    fn conn(&self, i: usize) -> Option<&Conn> {
        self.conns.get(i)?.as_ref()
    }

    fn conn_mut(&mut self, i: usize) -> Option<&mut Conn> {
        self.conns.get_mut(i)?.as_mut()
    }

    fn free_slot(&self) -> Option<usize> {
        self.conns.iter().position(|c| c.is_none())
    }

    /// A fresh local communication id: cyclic, XOR-ed with the seed, never
    /// 0 and never one in use (cm.c `cm_alloc_id_priv`).
    fn alloc_id(&mut self) -> u32 {
        loop {
            self.next_id = self.next_id.wrapping_add(1);
            let id = self.next_id ^ self.cfg.id_seed;
            if id != 0 && self.find(ConnId(id)).is_none() {
                return id;
            }
        }
    }

    fn send<T: MadTransport>(&mut self, t: &mut T, to: &MadAddr, b: &[u8; MAD_SIZE]) {
        match t.send(to, b) {
            Ok(()) => self.stats.sent += 1,
            Err(_) => self.stats.send_errors += 1,
        }
    }

    fn send_msg<T: MadTransport>(
        &mut self,
        t: &mut T,
        to: &MadAddr,
        tid: u64,
        msg: CmMsg,
    ) -> Result<[u8; MAD_SIZE], MadError> {
        let mut b = [0u8; MAD_SIZE];
        CmMad::new(tid, msg).encode(&mut b)?;
        self.send(t, to, &b);
        Ok(b)
    }

    /// Opens a connection: builds and sends the REQ (cm.c `cm_format_req`
    /// with the values cma.c `cma_connect_ib` gives it; spec §3.1, §5),
    /// retransmitted every 2 × PLT + remote CM response timeout, 1 + max CM
    /// retries times in all (cm.c `ib_send_cm_req`).
    pub fn connect<T: MadTransport>(
        &mut self,
        now: u64,
        p: &ConnectParams<'_>,
        t: &mut T,
    ) -> Result<ConnId, CmError> {
        fit24(p.qpn, "QPN wider than 24 bits")?;
        fit24(p.starting_psn, "starting PSN wider than 24 bits")?;
        if p.responder_resources > MAX_RD_ATOMIC || p.initiator_depth > MAX_RD_ATOMIC {
            return Err(CmError::Invalid("responder resources / initiator depth above 8"));
        }
        let mtu = rdma_cm::mtu_enum(p.path_mtu).ok_or(CmError::Invalid("path MTU"))?;
        if matches!(p.peer.peer_ip, IpAddr::V4(_)) != matches!(p.peer.local_ip, IpAddr::V4(_)) {
            return Err(CmError::Invalid("mixed IPv4/IPv6 addresses"));
        }
        if p.private_data.len() > REQ_USER_DATA {
            return Err(
                MadError::PrivateData { len: p.private_data.len(), max: REQ_USER_DATA }.into()
            );
        }
        let tm = self.cfg.timing;
        if tm.packet_life_time > 31 || tm.cm_response_timeout > 31 || tm.max_cm_retries > 15 {
            return Err(CmError::Invalid("CM timing field width"));
        }
        let slot = self.free_slot().ok_or(CmError::TableFull)?;
        let hdr = CmaHdr { src_port: p.src_port, src: p.peer.local_ip, dst: p.peer.peer_ip };
        let mut pd = [0u8; mad::pdata::REQ];
        pd[..rdma_cm::CMA_HDR_SIZE].copy_from_slice(&hdr.encode());
        pd[rdma_cm::CMA_HDR_SIZE..rdma_cm::CMA_HDR_SIZE + p.private_data.len()]
            .copy_from_slice(p.private_data);
        // LIDs permissive and subnet local 0 when hop limit > 1 (cm.c
        // `cm_format_req`); flow label from the ports (cma.c
        // `cma_get_roce_udp_flow_label`); ACK timeout (cm.c `cm_ack_timeout`
        // with the CA ACK delay).
        let far = p.peer.hop_limit > 1;
        let lid = if far { 0xFFFF } else { 0 };
        let primary = ReqPath {
            local_lid: lid,
            remote_lid: lid,
            local_gid: gid_of(p.peer.local_ip),
            remote_gid: gid_of(p.peer.peer_ip),
            flow_label: rdma_cm::flow_label(p.src_port, p.dst_port),
            packet_rate: 0,
            traffic_class: p.peer.traffic_class,
            hop_limit: p.peer.hop_limit,
            sl: 0,
            subnet_local: !far,
            local_ack_timeout: cm_ack_timeout(self.cfg.ca_ack_delay, tm.packet_life_time),
            sap_supported: false,
        };
        let local_id = self.alloc_id();
        let req = Req {
            local_comm_id: local_id,
            vendor_id: 0,
            service_id: service_id(p.port_space, p.dst_port),
            local_ca_guid: self.cfg.ca_guid,
            local_qkey: 0,
            local_qpn: p.qpn,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: tm.cm_response_timeout,
            transport_type: 0,
            flow_control: true,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: tm.cm_response_timeout,
            retry_count: p.retry_count.min(7),
            pkey: 0xFFFF,
            path_mtu: mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count.min(7),
            max_cm_retries: tm.max_cm_retries,
            srq: p.srq,
            ext_transport_type: 0,
            primary,
            alternate: ReqPath::default(),
            private_data: pd,
        };
        let tid = mad::form_tid(self.cfg.hi_tid, local_id);
        let mut out = [0u8; MAD_SIZE];
        CmMad::new(tid, CmMsg::Req(req)).encode(&mut out)?;
        let interval = 2 * cm_ms(tm.packet_life_time) + cm_ms(tm.cm_response_timeout);
        let c = Conn {
            state: CmState::ReqSent,
            active: true,
            local_id,
            remote_id: 0,
            remote_guid: 0,
            tid,
            dreq_tid: 0,
            local_qpn: p.qpn,
            remote_qpn: None,
            peer: p.peer,
            req,
            params: None,
            out,
            deadline: now.saturating_add(interval),
            retries_left: tm.max_cm_retries,
            max_retries: tm.max_cm_retries,
            interval,
            av_timeout: tm.packet_life_time + 1,
        };
        if let Some(s) = self.conns.get_mut(slot) {
            *s = Some(c);
        }
        self.send(t, &p.peer, &out);
        Ok(ConnId(local_id))
    }

    /// Passive: tells the peer the REQ will take longer to answer (cm.c
    /// `ib_send_cm_mra`): MRA with Message MRAed = REQ and `service_timeout`
    /// (5-bit exponent; RDMA-CM uses 24, about 67 s), so the active side
    /// defers its retransmissions; a duplicate REQ is then answered with
    /// the same MRA (cm.c `cm_dup_req_handler`). Accept or reject later as
    /// from REQ_RCVD.
    pub fn mra<T: MadTransport>(
        &mut self,
        id: ConnId,
        service_timeout: u8,
        t: &mut T,
    ) -> Result<(), CmError> {
        let i = self.find(id).ok_or(CmError::NotFound)?;
        let c = *self.conn(i).ok_or(CmError::NotFound)?;
        if c.state != CmState::ReqRcvd {
            return Err(CmError::InvalidState(c.state));
        }
        let mra = Mra {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            msg_mraed: msg_response::REQ,
            service_timeout,
            private_data: [0; mad::pdata::MRA],
        };
        let out = self.send_msg(t, &c.peer, c.tid, CmMsg::Mra(mra))?;
        if let Some(c) = self.conn_mut(i) {
            c.out = out;
            c.state = CmState::MraReqSent;
        }
        Ok(())
    }

    /// The parameters [`accept`](Self::accept) will use, without sending:
    /// apply them to the QP first (Linux moves the passive QP to RTS before
    /// the REP, cma.c `cma_accept_ib`; spec §8 pitfall 17).
    pub fn accept_params(&self, id: ConnId, a: &AcceptParams<'_>) -> Result<ConnParams, CmError> {
        let c = self.find(id).and_then(|i| self.conn(i)).ok_or(CmError::NotFound)?;
        if !matches!(c.state, CmState::ReqRcvd | CmState::MraReqSent) {
            return Err(CmError::InvalidState(c.state));
        }
        fit24(a.qpn, "QPN wider than 24 bits")?;
        fit24(a.starting_psn, "starting PSN wider than 24 bits")?;
        if a.responder_resources > MAX_RD_ATOMIC || a.initiator_depth > MAX_RD_ATOMIC {
            return Err(CmError::Invalid("responder resources / initiator depth above 8"));
        }
        if a.private_data.len() > mad::pdata::REP {
            return Err(
                MadError::PrivateData { len: a.private_data.len(), max: mad::pdata::REP }.into()
            );
        }
        let r = &c.req;
        let hdr = CmaHdr::decode(&r.private_data).map_err(|_| CmError::Invalid("cma_hdr"))?;
        let path_mtu = rdma_cm::mtu_bytes(r.path_mtu).ok_or(CmError::Invalid("path MTU"))?;
        Ok(ConnParams {
            remote_qpn: r.local_qpn,
            local_qpn: a.qpn,
            rq_psn: a.starting_psn,
            sq_psn: r.starting_psn,
            path_mtu,
            retry_cnt: r.retry_count,
            rnr_retry: r.rnr_retry_count,
            // cma.c `cma_modify_qp_rts` / `cma_modify_qp_rtr`: the
            // application's initiator depth and responder resources, here
            // never above the peer's offer: its responder resources bound
            // the reads we may have outstanding, its initiator depth the
            // reads it will ever have outstanding at us (spec §6 "Rules";
            // librdmacm rdma_accept(3): responder_resources ≤ the remote's
            // initiator depth, initiator_depth ≤ the remote's responder
            // resources). The REP advertises the capped values.
            max_rd_atomic: a.initiator_depth.min(r.responder_resources),
            max_dest_rd_atomic: a.responder_resources.min(r.initiator_depth),
            local_ip: ip_of_gid(r.primary.remote_gid),
            remote_ip: ip_of_gid(r.primary.local_gid),
            remote_mac: c.peer.peer_mac,
            vlan: c.peer.vlan,
            // The receive path's hop limit, not the REQ's (cm.c
            // `cm_req_handler`; spec §6).
            hop_limit: c.peer.hop_limit,
            traffic_class: r.primary.traffic_class,
            flow_label: r.primary.flow_label,
            ack_timeout: r.primary.local_ack_timeout,
            local_port: service_id_parts(r.service_id).map_or(0, |(_, p)| p),
            remote_port: hdr.src_port,
        })
    }

    /// Accepts a REQ: sends the REP (cm.c `cm_format_rep`, cma.c
    /// `cma_accept_ib`), retransmitted every REQ Local CM Response Timeout,
    /// 1 + REQ max CM retries times (cm.c `cm_req_handler`).
    pub fn accept<T: MadTransport>(
        &mut self,
        now: u64,
        id: ConnId,
        a: &AcceptParams<'_>,
        t: &mut T,
    ) -> Result<ConnParams, CmError> {
        let params = self.accept_params(id, a)?;
        let i = self.find(id).ok_or(CmError::NotFound)?;
        let ack_delay = self.cfg.ca_ack_delay;
        let guid = self.cfg.ca_guid;
        let c = self.conn_mut(i).ok_or(CmError::NotFound)?;
        let rep = Rep {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            local_qkey: 0,
            local_qpn: a.qpn,
            vendor_id: 0,
            local_eecn: 0,
            starting_psn: a.starting_psn,
            responder_resources: params.max_dest_rd_atomic,
            initiator_depth: params.max_rd_atomic,
            target_ack_delay: ack_delay.min(31),
            failover_accepted: 0,
            flow_control: true,
            rnr_retry_count: a.rnr_retry_count.min(7),
            srq: a.srq,
            local_ca_guid: guid,
            private_data: mad::private_data(a.private_data)?,
        };
        let mut out = [0u8; MAD_SIZE];
        CmMad::new(c.tid, CmMsg::Rep(rep)).encode(&mut out)?;
        c.out = out;
        c.local_qpn = a.qpn;
        c.params = Some(params);
        c.interval = cm_ms(c.req.local_cm_response_timeout);
        c.max_retries = c.req.max_cm_retries;
        c.retries_left = c.max_retries;
        c.deadline = now.saturating_add(c.interval);
        c.av_timeout = c.req.primary.local_ack_timeout;
        c.state = CmState::RepSent;
        let peer = c.peer;
        self.send(t, &peer, &out);
        Ok(params)
    }

    /// Rejects a REQ (`rdma_reject`, passive, REQ_RCVD: Local Communication
    /// ID 0, Message REJected = REQ) or a REP (active, REP_RCVD: the QP
    /// could not be moved or the application refuses; Message REJected =
    /// REP; spec §4.3): REJ reason 28 with `private_data` (≤ 148 bytes)
    /// (cm.c `cm_format_rej`); the slot is free again.
    pub fn reject<T: MadTransport>(
        &mut self,
        id: ConnId,
        private_data: &[u8],
        t: &mut T,
    ) -> Result<(), CmError> {
        let i = self.find(id).ok_or(CmError::NotFound)?;
        let c = *self.conn(i).ok_or(CmError::NotFound)?;
        let (local, msg) = match c.state {
            CmState::ReqRcvd | CmState::MraReqSent => (0, msg_response::REQ),
            CmState::RepRcvd => (c.local_id, msg_response::REP),
            s => return Err(CmError::InvalidState(s)),
        };
        let rej = Rej {
            local_comm_id: local,
            remote_comm_id: c.remote_id,
            msg_rejected: msg,
            ari_length: 0,
            reason: rej::CONSUMER_DEFINED,
            ari: [0; mad::pdata::REJ_ARI],
            private_data: mad::private_data(private_data)?,
        };
        self.send_msg(t, &c.peer, c.tid, CmMsg::Rej(rej))?;
        if let Some(s) = self.conns.get_mut(i) {
            *s = None;
        }
        Ok(())
    }

    /// Active: gives up an outstanding REQ (the application destroys the
    /// id): REJ reason 4 (timeout) with our CA GUID as the 8-byte ARI, so
    /// the passive side can match it (cm.c `cm_destroy_id` in REQ_SENT /
    /// MRA_REQ_RCVD; spec §3.4, §8 pitfall 12); the slot is free again.
    /// An outstanding SIDR_REQ ([`sidr_resolve`](Self::sidr_resolve)) is
    /// dropped without a message (cm.c `cm_destroy_id` in SIDR_REQ_SENT).
    pub fn cancel<T: MadTransport>(&mut self, id: ConnId, t: &mut T) -> Result<(), CmError> {
        let i = self.find(id).ok_or(CmError::NotFound)?;
        let c = *self.conn(i).ok_or(CmError::NotFound)?;
        if c.state == CmState::SidrReqSent {
            if let Some(s) = self.conns.get_mut(i) {
                *s = None;
            }
            return Ok(());
        }
        if !matches!(c.state, CmState::ReqSent | CmState::MraReqRcvd) {
            return Err(CmError::InvalidState(c.state));
        }
        let mut ari = [0u8; mad::pdata::REJ_ARI];
        ari[..8].copy_from_slice(&self.cfg.ca_guid.to_be_bytes());
        let rej = Rej {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            msg_rejected: msg_response::OTHER,
            ari_length: 8,
            reason: rej::TIMEOUT,
            ari,
            private_data: [0; mad::pdata::REJ],
        };
        self.send_msg(t, &c.peer, c.tid, CmMsg::Rej(rej))?;
        if let Some(s) = self.conns.get_mut(i) {
            *s = None;
        }
        Ok(())
    }

    /// Active SIDR: asks the peer for the UD QPN and Q_Key behind
    /// `port_space`:`dst_port` (cma.c `cma_resolve_ib_udp`, cm.c
    /// `ib_send_cm_sidr_req` / `cm_format_sidr_req`): a SIDR_REQ with our
    /// new id as Request ID, P_Key 0xFFFF, the `cma_hdr` and `private_data`,
    /// TID as for a REQ; resent identically every ms(CM response timeout)
    /// (RDMA-CM: 4096 ms), 1 + max CM retries times in all. The answer is
    /// [`CmEvent::SidrResolved`], [`CmEvent::SidrRejected`] or
    /// [`CmEvent::TimedOut`]; the slot is then free.
    pub fn sidr_resolve<T: MadTransport>(
        &mut self,
        now: u64,
        p: &SidrParams<'_>,
        t: &mut T,
    ) -> Result<ConnId, CmError> {
        if matches!(p.peer.peer_ip, IpAddr::V4(_)) != matches!(p.peer.local_ip, IpAddr::V4(_)) {
            return Err(CmError::Invalid("mixed IPv4/IPv6 addresses"));
        }
        if !matches!(p.port_space, PortSpace::Udp | PortSpace::Ib) {
            return Err(CmError::Invalid("SIDR needs the UDP or IB port space"));
        }
        if p.private_data.len() > SIDR_REQ_USER_DATA {
            return Err(MadError::PrivateData {
                len: p.private_data.len(),
                max: SIDR_REQ_USER_DATA,
            }
            .into());
        }
        let tm = self.cfg.timing;
        if tm.cm_response_timeout > 31 || tm.max_cm_retries > 15 {
            return Err(CmError::Invalid("CM timing field width"));
        }
        let slot = self.free_slot().ok_or(CmError::TableFull)?;
        let hdr = CmaHdr { src_port: p.src_port, src: p.peer.local_ip, dst: p.peer.peer_ip };
        let mut pd = [0u8; mad::pdata::SIDR_REQ];
        pd[..rdma_cm::CMA_HDR_SIZE].copy_from_slice(&hdr.encode());
        pd[rdma_cm::CMA_HDR_SIZE..rdma_cm::CMA_HDR_SIZE + p.private_data.len()]
            .copy_from_slice(p.private_data);
        let local_id = self.alloc_id();
        let sid = service_id(p.port_space, p.dst_port);
        let req = SidrReq { request_id: local_id, pkey: 0xFFFF, service_id: sid, private_data: pd };
        let tid = mad::form_tid(self.cfg.hi_tid, local_id);
        let mut out = [0u8; MAD_SIZE];
        CmMad::new(tid, CmMsg::SidrReq(req)).encode(&mut out)?;
        let interval = cm_ms(tm.cm_response_timeout);
        let c = Conn {
            state: CmState::SidrReqSent,
            active: true,
            local_id,
            remote_id: 0,
            remote_guid: 0,
            tid,
            dreq_tid: 0,
            local_qpn: 0,
            remote_qpn: None,
            peer: p.peer,
            req: sidr_req_of(sid),
            params: None,
            out,
            deadline: now.saturating_add(interval),
            retries_left: tm.max_cm_retries,
            max_retries: tm.max_cm_retries,
            interval,
            av_timeout: 0,
        };
        if let Some(s) = self.conns.get_mut(slot) {
            *s = Some(c);
        }
        self.send(t, &p.peer, &out);
        Ok(ConnId(local_id))
    }

    /// Passive SIDR: answers a [`CmEvent::SidrRequest`] with success, our
    /// UD QPN and Q_Key and `private_data` (cma.c `rdma_accept` on a UD id
    /// → `cma_send_sidr_rep`; cm.c `cm_format_sidr_rep`: the SIDR_REQ's
    /// TID, Request ID and Service ID echoed).
    pub fn sidr_accept<T: MadTransport>(
        &mut self,
        now: u64,
        id: ConnId,
        a: &SidrAcceptParams<'_>,
        t: &mut T,
    ) -> Result<(), CmError> {
        fit24(a.qpn, "QPN wider than 24 bits")?;
        let pd = mad::private_data(a.private_data)?;
        self.sidr_answer(now, id, sidr_status::SUCCESS, a.qpn, a.qkey, pd, t)
    }

    /// Passive SIDR: refuses a [`CmEvent::SidrRequest`]: SIDR_REP status 2
    /// (`IB_SIDR_REJECT`) with `private_data` (≤ 136 bytes; cma.c
    /// `rdma_reject` on a UD id).
    pub fn sidr_reject<T: MadTransport>(
        &mut self,
        now: u64,
        id: ConnId,
        private_data: &[u8],
        t: &mut T,
    ) -> Result<(), CmError> {
        let pd = mad::private_data(private_data)?;
        self.sidr_answer(now, id, sidr_status::REJECT, 0, 0, pd, t)
    }

    #[allow(clippy::too_many_arguments)]
    fn sidr_answer<T: MadTransport>(
        &mut self,
        now: u64,
        id: ConnId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: [u8; mad::pdata::SIDR_REP],
        t: &mut T,
    ) -> Result<(), CmError> {
        let i = self.find(id).ok_or(CmError::NotFound)?;
        let c = *self.conn(i).ok_or(CmError::NotFound)?;
        if c.state != CmState::SidrReqRcvd {
            return Err(CmError::InvalidState(c.state));
        }
        let rep = SidrRep {
            request_id: c.remote_id,
            status,
            info_length: 0,
            vendor_id: 0,
            qpn,
            service_id: c.req.service_id,
            qkey,
            info: [0; mad::pdata::SIDR_REP_INFO],
            private_data,
        };
        let out = self.send_msg(t, &c.peer, c.tid, CmMsg::SidrRep(rep))?;
        let linger = cm_ms(self.cfg.timing.cm_response_timeout) * SIDR_LINGER_INTERVALS;
        if let Some(c) = self.conn_mut(i) {
            c.out = out;
            c.local_qpn = qpn;
            c.state = CmState::SidrRepSent;
            c.deadline = now.saturating_add(linger);
        }
        Ok(())
    }

    /// Active: the QP is in RTS with the `Connected` parameters; sends the
    /// RTU once (cma.c `cma_rep_recv`) and the connection is established.
    pub fn ready_to_use<T: MadTransport>(&mut self, id: ConnId, t: &mut T) -> Result<(), CmError> {
        let i = self.find(id).ok_or(CmError::NotFound)?;
        let c = *self.conn(i).ok_or(CmError::NotFound)?;
        if c.state != CmState::RepRcvd {
            return Err(CmError::InvalidState(c.state));
        }
        self.send_rtu(t, &c)?;
        if let Some(c) = self.conn_mut(i) {
            c.state = CmState::Established;
        }
        Ok(())
    }

    /// Active, REP_RCVD: the MRA of the REP (Message MRAed = REP, Service
    /// Timeout [`MRA_SERVICE_TIMEOUT`]), with the TID of our REQ (spec §2.3:
    /// MRA-for-REP uses the active side's REQ TID); not kept for resending
    /// (every duplicate REP gets a new one, as cm.c `cm_dup_rep_handler`).
    fn send_mra<T: MadTransport>(&mut self, t: &mut T, c: &Conn, what: u8) -> Result<(), MadError> {
        let mra = Mra {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            msg_mraed: what,
            service_timeout: MRA_SERVICE_TIMEOUT,
            private_data: [0; mad::pdata::MRA],
        };
        self.send_msg(t, &c.peer, c.tid, CmMsg::Mra(mra)).map(|_| ())
    }

    fn send_rtu<T: MadTransport>(&mut self, t: &mut T, c: &Conn) -> Result<(), MadError> {
        let rtu = Rtu {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            private_data: [0; mad::pdata::RTU],
        };
        self.send_msg(t, &c.peer, c.tid, CmMsg::Rtu(rtu)).map(|_| ())
    }

    /// Passive: the first packet arrived on the QP before the RTU (COMM_EST,
    /// cm.c `cm_establish`): stops the REP timer.
    pub fn established(&mut self, id: ConnId) -> Result<(), CmError> {
        let i = self.find(id).ok_or(CmError::NotFound)?;
        let c = self.conn_mut(i).ok_or(CmError::NotFound)?;
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd => {
                c.state = CmState::Established;
                Ok(())
            }
            CmState::Established => Ok(()),
            s => Err(CmError::InvalidState(s)),
        }
    }

    /// `rdma_disconnect`: from ESTABLISHED sends a DREQ (move the QP to
    /// ERROR first), retransmitted like the REQ/REP; from DREQ_RCVD sends
    /// the DREP and enters timewait; in DREQ_SENT/TIMEWAIT nothing to do.
    pub fn disconnect<T: MadTransport>(
        &mut self,
        now: u64,
        id: ConnId,
        t: &mut T,
    ) -> Result<(), CmError> {
        let i = self.find(id).ok_or(CmError::NotFound)?;
        let c = *self.conn(i).ok_or(CmError::NotFound)?;
        match c.state {
            CmState::Established => {
                let dreq = Dreq {
                    local_comm_id: c.local_id,
                    remote_comm_id: c.remote_id,
                    remote_qpn: c.remote_qpn.unwrap_or(0),
                    private_data: [0; mad::pdata::DREQ],
                };
                // A new TID for the DREQ (cm.c `cm_form_tid`).
                let tid = mad::form_tid(self.cfg.hi_tid, c.local_id);
                let out = self.send_msg(t, &c.peer, tid, CmMsg::Dreq(dreq))?;
                if let Some(c) = self.conn_mut(i) {
                    c.out = out;
                    c.state = CmState::DreqSent;
                    c.retries_left = c.max_retries;
                    c.deadline = now.saturating_add(c.interval);
                }
                Ok(())
            }
            CmState::DreqRcvd => {
                self.send_drep(t, &c)?;
                self.enter_timewait(i, now);
                Ok(())
            }
            CmState::DreqSent | CmState::Timewait => Ok(()),
            s => Err(CmError::InvalidState(s)),
        }
    }

    fn send_drep<T: MadTransport>(&mut self, t: &mut T, c: &Conn) -> Result<(), MadError> {
        let drep = Drep {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            private_data: [0; mad::pdata::DREP],
        };
        self.send_msg(t, &c.peer, c.dreq_tid, CmMsg::Drep(drep)).map(|_| ())
    }

    /// Timewait lasts ms(av.timeout) (cm.c `cm_enter_timewait`).
    fn enter_timewait(&mut self, i: usize, now: u64) {
        if let Some(c) = self.conn_mut(i) {
            c.state = CmState::Timewait;
            c.deadline = now.saturating_add(cm_ms(c.av_timeout));
        }
    }

    /// Timers: retransmits REQ/REP/DREQ whose interval passed, ends those
    /// out of retries and timewaits. Returns the first event; then takes
    /// received MADs from the transport until one gives an event. Call until
    /// it returns `None`.
    pub fn poll<T: MadTransport>(&mut self, now: u64, t: &mut T) -> Option<CmEvent> {
        for i in 0..C {
            if let Some(e) = self.timer(i, now, t) {
                return Some(e);
            }
        }
        let mut buf = [0u8; MAD_SIZE];
        while let Some(src) = t.recv(&mut buf) {
            if let Ok(Some(e)) = self.on_mad(now, &src, &buf, t) {
                return Some(e);
            }
        }
        None
    }

    fn timer<T: MadTransport>(&mut self, i: usize, now: u64, t: &mut T) -> Option<CmEvent> {
        let c = *self.conn(i)?;
        if !timed(c.state) || now < c.deadline {
            return None;
        }
        let id = ConnId(c.local_id);
        if c.state == CmState::SidrRepSent {
            if let Some(s) = self.conns.get_mut(i) {
                *s = None;
            }
            return None;
        }
        if c.state == CmState::Timewait {
            if let Some(s) = self.conns.get_mut(i) {
                *s = None;
            }
            return Some(CmEvent::TimewaitExit { id, qpn: c.local_qpn });
        }
        if c.retries_left > 0 {
            self.stats.retransmits += 1;
            self.send(t, &c.peer, &c.out);
            if let Some(c) = self.conn_mut(i) {
                c.retries_left -= 1;
                // after an MRA-extended wait the state stays MRA_*_RCVD and
                // later MRAs are dropped as duplicates (cm.c
                // `cm_mra_handler`): one extension per message
                c.deadline = now.saturating_add(c.interval);
            }
            return None;
        }
        match c.state {
            // REQ/REP errors: back to idle, no REJ (cm.c
            // `cm_process_send_error`).
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::SidrReqSent => {
                if let Some(s) = self.conns.get_mut(i) {
                    *s = None;
                }
                Some(CmEvent::TimedOut { id })
            }
            // DREQ error: timewait anyway (spec §8 pitfall 18).
            _ => {
                self.enter_timewait(i, now);
                Some(CmEvent::Disconnected { id, timed_out: true })
            }
        }
    }

    /// One received MAD from `src` (the QP1 receive path calls this; or
    /// let [`poll`](Self::poll) take them from the transport). Answers as
    /// cm.c does and returns the event for the caller, if any; `Err` says
    /// why the MAD produced nothing.
    pub fn on_mad<T: MadTransport>(
        &mut self,
        now: u64,
        src: &MadAddr,
        buf: &[u8],
        t: &mut T,
    ) -> Result<Option<CmEvent>, Ignored> {
        self.stats.received += 1;
        let r = match CmMad::decode(buf) {
            Ok(m) => self.dispatch(now, src, m, t),
            Err(e) => Err(Ignored::Malformed(e)),
        };
        if r.is_err() {
            self.stats.ignored += 1;
        }
        r
    }

    fn dispatch<T: MadTransport>(
        &mut self,
        now: u64,
        src: &MadAddr,
        m: CmMad,
        t: &mut T,
    ) -> Result<Option<CmEvent>, Ignored> {
        let tid = m.hdr.tid;
        match m.msg {
            CmMsg::Req(r) => self.on_req(now, src, tid, &r, t),
            CmMsg::Rep(r) => self.on_rep(src, tid, &r, t),
            CmMsg::Rtu(r) => self.on_rtu(&r),
            CmMsg::Rej(r) => self.on_rej(now, &r),
            CmMsg::Mra(r) => self.on_mra(now, &r),
            CmMsg::Dreq(r) => self.on_dreq(src, tid, &r, t),
            CmMsg::Drep(r) => self.on_drep(now, &r),
            CmMsg::SidrReq(r) => self.on_sidr_req(src, tid, &r, t),
            CmMsg::SidrRep(r) => self.on_sidr_rep(&r),
        }
    }

    /// REJ for a message that matched no connection (cm.c `cm_issue_rej`):
    /// IDs swapped from the received message, TID echoed.
    #[allow(clippy::too_many_arguments)]
    fn issue_rej<T: MadTransport>(
        &mut self,
        t: &mut T,
        to: &MadAddr,
        tid: u64,
        local: u32,
        remote: u32,
        msg: u8,
        reason: u16,
        ari: &[u8],
    ) {
        let mut a = [0u8; mad::pdata::REJ_ARI];
        let n = ari.len().min(a.len());
        a[..n].copy_from_slice(&ari[..n]);
        let rej = Rej {
            local_comm_id: local,
            remote_comm_id: remote,
            msg_rejected: msg,
            ari_length: n as u8,
            reason,
            ari: a,
            private_data: [0; mad::pdata::REJ],
        };
        let _ = self.send_msg(t, to, tid, CmMsg::Rej(rej));
    }

    /// cm.c `cm_req_handler` / `cm_match_req` and cma.c
    /// `cma_ib_req_handler` (spec §4.4 LISTEN row, §5.1).
    fn on_req<T: MadTransport>(
        &mut self,
        now: u64,
        src: &MadAddr,
        tid: u64,
        r: &Req,
        t: &mut T,
    ) -> Result<Option<CmEvent>, Ignored> {
        if self.dup_req(r, t) {
            return Err(Ignored::Duplicate);
        }
        self.stale_req(now, src, tid, r, t)?;
        let (listen, hdr) = self.match_req(src, tid, r, t)?;
        let Some(slot) = self.free_slot() else {
            return Err(Ignored::TableFull);
        };
        let local_id = self.alloc_id();
        let mut user = [0u8; REQ_USER_DATA];
        user.copy_from_slice(&r.private_data[rdma_cm::CMA_HDR_SIZE..]);
        let info = ReqInfo {
            listen,
            hdr,
            local_port: service_id_parts(r.service_id).map_or(0, |(_, p)| p),
            private_data: user,
            remote_qpn: r.local_qpn,
            responder_resources: r.responder_resources,
            initiator_depth: r.initiator_depth,
            peer: *src,
        };
        let c = passive_conn(now, src, tid, r, local_id);
        if let Some(s) = self.conns.get_mut(slot) {
            *s = Some(c);
        }
        Ok(Some(CmEvent::ConnectRequest { id: ConnId(local_id), info }))
    }

    /// [`Self::on_req`] step 1, whether `r` is a duplicate: (remote comm
    /// id, remote CA GUID); connections in timewait left the table (cm.c
    /// `cm_enter_timewait` → `cm_remove_remote`). Answered with the MRA
    /// again in MRA_REQ_SENT, dropped in every other state (cm.c
    /// `cm_dup_req_handler`).
    fn dup_req<T: MadTransport>(&mut self, r: &Req, t: &mut T) -> bool {
        let live = |c: &&Conn| c.state != CmState::Timewait;
        if let Some(c) = self.conns.iter().flatten().filter(live).find(|c| {
            !c.active && c.remote_id == r.local_comm_id && c.remote_guid == r.local_ca_guid
        }) {
            let c = *c;
            match c.state {
                CmState::MraReqSent => self.send(t, &c.peer, &c.out),
                // The caller has not answered the REQ within the active
                // side's REQ timeout (its retransmission is this duplicate):
                // RDMA-CM armed a delayed MRA when the REQ handler returned
                // (cma.c `cma_ib_req_handler` → `ib_send_cm_mra`; spec §4.4
                // REQ_RCVD → MRA_REQ_SENT), sent now (cm.c
                // `cm_dup_req_handler`); the active side then waits 65 s
                // more (cm.c `cm_mra_handler`).
                CmState::ReqRcvd => {
                    let _ = self.mra(ConnId(c.local_id), MRA_SERVICE_TIMEOUT, t);
                }
                _ => {}
            }
            return true;
        }
        false
    }

    /// Rejects the REQ `r` with `reason` and `ari`; what [`Self::on_req`]
    /// reports for it.
    fn rej_req<T: MadTransport>(
        &mut self,
        t: &mut T,
        src: &MadAddr,
        tid: u64,
        r: &Req,
        reason: u16,
        ari: &[u8],
    ) -> Ignored {
        self.issue_rej(t, src, tid, 0, r.local_comm_id, msg_response::REQ, reason, ari);
        Ignored::Rejected(reason)
    }

    /// [`Self::on_req`] step 2, stale: (remote QPN, remote CA GUID) still
    /// connected → REJ 10, and a DREQ to the old connection if established
    /// (cm.c `cm_match_req`).
    fn stale_req<T: MadTransport>(
        &mut self,
        now: u64,
        src: &MadAddr,
        tid: u64,
        r: &Req,
        t: &mut T,
    ) -> Result<(), Ignored> {
        let live = |c: &&Conn| c.state != CmState::Timewait;
        if let Some(old) = self.conns.iter().position(|c| {
            c.as_ref().filter(live).is_some_and(|c| {
                c.remote_qpn == Some(r.local_qpn) && c.remote_guid == r.local_ca_guid
            })
        }) {
            let res = self.rej_req(t, src, tid, r, rej::STALE_CONN, &[]);
            // `ib_send_cm_dreq` acts only on an established connection
            if let Some(c) = self.conn(old).copied().filter(|c| c.state == CmState::Established) {
                let _ = self.disconnect(now, ConnId(c.local_id), t);
            }
            return Err(res);
        }
        Ok(())
    }

    /// [`Self::on_req`] steps 3 to 5: the listener the REQ is for and its
    /// RDMA-CM header, or the REJ it got.
    fn match_req<T: MadTransport>(
        &mut self,
        src: &MadAddr,
        tid: u64,
        r: &Req,
        t: &mut T,
    ) -> Result<(ListenId, CmaHdr), Ignored> {
        // (3) a CM listener for the exact service id (cm.c `cm_find_listen`)
        if !self.listeners.iter().flatten().any(|l| l.sid == r.service_id) {
            return Err(self.rej_req(t, src, tid, r, rej::INVALID_SERVICE_ID, &[]));
        }
        // (4) the Primary Remote Port GID must be ours; ARI = our GID 0
        // (cm.c `cm_req_handler`).
        let ours = ip_of_gid(r.primary.remote_gid);
        if !self.cfg.local_ips.iter().flatten().any(|a| *a == ours) {
            let g0 = self.cfg.local_ips.iter().flatten().next().map(|a| gid_of(*a));
            let ari = g0.as_ref().map_or(&[][..], |g| &g[..]);
            return Err(self.rej_req(t, src, tid, r, rej::INVALID_GID, ari));
        }
        // (5) RDMA-CM: cma_hdr valid, a listener on that address (or the
        // wildcard) of the same family, RC, usable addresses, a path MTU the
        // QP can take; else REJ 28 with no private data (cma.c
        // `cma_ib_id_from_event`, `cma_match_private_data`,
        // `cma_ib_check_req_qp_type`, `validate_ipv4_net_dev`). Stricter
        // than Linux's route lookup: the cma_hdr destination must be the
        // address of the GID the REQ named, and of the source's family.
        let Ok(hdr) = CmaHdr::decode(&r.private_data) else {
            return Err(self.rej_req(t, src, tid, r, rej::CONSUMER_DEFINED, &[]));
        };
        let same_family =
            |a: IpAddr, b: IpAddr| matches!(a, IpAddr::V4(_)) == matches!(b, IpAddr::V4(_));
        let listen = self.listeners.iter().enumerate().find_map(|(i, l)| {
            let l = l.as_ref()?;
            let ok = l.sid == r.service_id
                && match l.addr {
                    Some(a) => a == hdr.dst,
                    None => true,
                }
                && same_family(hdr.dst, ours);
            ok.then_some(ListenId(i))
        });
        let Some(listen) = listen else {
            return Err(self.rej_req(t, src, tid, r, rej::CONSUMER_DEFINED, &[]));
        };
        // a UDP-port-space id is UD: a REQ for it has the wrong QP type
        // (cma.c `cma_ib_check_req_qp_type`)
        let ud_only = matches!(service_id_parts(r.service_id), Some((PortSpace::Udp, _)));
        if r.transport_type != 0
            || ud_only
            || rdma_cm::unusable_addr(hdr.src)
            || rdma_cm::unusable_addr(hdr.dst)
            || hdr.dst != ours
            || rdma_cm::mtu_bytes(r.path_mtu).is_none()
            || !same_family(hdr.src, hdr.dst)
        {
            return Err(self.rej_req(t, src, tid, r, rej::CONSUMER_DEFINED, &[]));
        }
        Ok((listen, hdr))
    }

    /// cm.c `cm_rep_handler` / `cm_dup_rep_handler` (spec §4.3).
    fn on_rep<T: MadTransport>(
        &mut self,
        src: &MadAddr,
        tid: u64,
        r: &Rep,
        t: &mut T,
    ) -> Result<Option<CmEvent>, Ignored> {
        let Some(i) = self.find(ConnId(r.remote_comm_id)) else {
            return Err(Ignored::Stale);
        };
        let Some(c) = self.conn(i).copied() else {
            return Err(Ignored::Stale);
        };
        if !c.active {
            return Err(Ignored::Stale);
        }
        match c.state {
            CmState::ReqSent | CmState::MraReqRcvd => {}
            // our RTU was lost: send it again (cm.c `cm_dup_rep_handler`)
            CmState::Established if c.remote_id == r.local_comm_id => {
                let _ = self.send_rtu(t, &c);
                return Err(Ignored::Duplicate);
            }
            // the passive side's REP timer ran out while our caller has not
            // sent the RTU yet: answer with the MRA RDMA-CM armed when the
            // REP arrived (Message MRAed = REP, cm.c `cm_dup_rep_handler` in
            // MRA_REP_SENT; spec §4.3), so it waits 65 s more instead of
            // spending its retries
            CmState::RepRcvd if c.remote_id == r.local_comm_id => {
                let _ = self.send_mra(t, &c, msg_response::REP);
                return Err(Ignored::Duplicate);
            }
            _ => return Err(Ignored::Stale),
        }
        // stale: the peer's (QPN, GUID) still connected elsewhere → REJ 10
        // for the REP (cm.c `cm_rep_handler`)
        if self.conns.iter().flatten().any(|o| {
            o.local_id != c.local_id
                && o.state != CmState::Timewait
                && o.remote_qpn == Some(r.local_qpn)
                && o.remote_guid == r.local_ca_guid
        }) {
            self.issue_rej(
                t,
                src,
                tid,
                c.local_id,
                r.local_comm_id,
                msg_response::REP,
                rej::STALE_CONN,
                &[],
            );
            return Err(Ignored::Rejected(rej::STALE_CONN));
        }
        let req = c.req;
        let hdr = CmaHdr::decode(&req.private_data).ok();
        let plt = c.av_timeout.saturating_sub(1);
        let params = ConnParams {
            remote_qpn: r.local_qpn,
            local_qpn: c.local_qpn,
            rq_psn: req.starting_psn,
            sq_psn: r.starting_psn,
            path_mtu: rdma_cm::mtu_bytes(req.path_mtu).unwrap_or(1024),
            retry_cnt: req.retry_count,
            rnr_retry: r.rnr_retry_count,
            // crossed, and never more than we offered (spec §6)
            max_rd_atomic: r.responder_resources.min(req.initiator_depth),
            max_dest_rd_atomic: r.initiator_depth.min(req.responder_resources),
            local_ip: c.peer.local_ip,
            remote_ip: c.peer.peer_ip,
            remote_mac: c.peer.peer_mac,
            vlan: c.peer.vlan,
            hop_limit: c.peer.hop_limit,
            traffic_class: c.peer.traffic_class,
            flow_label: req.primary.flow_label,
            ack_timeout: cm_ack_timeout(r.target_ack_delay, plt),
            local_port: hdr.map_or(0, |h| h.src_port),
            remote_port: service_id_parts(req.service_id).map_or(0, |(_, p)| p),
        };
        if let Some(c) = self.conn_mut(i) {
            c.state = CmState::RepRcvd;
            c.remote_id = r.local_comm_id;
            c.remote_guid = r.local_ca_guid;
            c.remote_qpn = Some(r.local_qpn);
            c.params = Some(params);
            c.av_timeout = params.ack_timeout;
        }
        Ok(Some(CmEvent::Connected {
            id: ConnId(c.local_id),
            params,
            private_data: r.private_data,
        }))
    }

    /// cm.c `cm_rtu_handler`.
    fn on_rtu(&mut self, r: &Rtu) -> Result<Option<CmEvent>, Ignored> {
        let i = self.find(ConnId(r.remote_comm_id)).ok_or(Ignored::Stale)?;
        let c = self.conn_mut(i).ok_or(Ignored::Stale)?;
        if c.remote_id != r.local_comm_id || c.active {
            return Err(Ignored::Stale);
        }
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd => {
                c.state = CmState::Established;
                Ok(Some(CmEvent::Established { id: ConnId(c.local_id) }))
            }
            _ => Err(Ignored::Duplicate),
        }
    }

    /// cm.c `cm_acquire_rejected_id` and `cm_rej_handler` (spec §3.4, §4).
    fn on_rej(&mut self, now: u64, r: &Rej) -> Result<Option<CmEvent>, Ignored> {
        let i = if r.reason == rej::TIMEOUT {
            // by (remote id, remote CA GUID in ARI[0..8])
            let mut g = [0u8; 8];
            g.copy_from_slice(&r.ari[..8]);
            let guid = u64::from_be_bytes(g);
            self.conns.iter().position(|c| {
                c.is_some_and(|c| c.remote_id == r.local_comm_id && c.remote_guid == guid)
            })
        } else if r.msg_rejected == msg_response::REQ {
            self.find(ConnId(r.remote_comm_id))
        } else {
            self.find(ConnId(r.remote_comm_id))
                .filter(|&i| self.conn(i).is_some_and(|c| c.remote_id == r.local_comm_id))
        };
        let i = i.ok_or(Ignored::Stale)?;
        let c = *self.conn(i).ok_or(Ignored::Stale)?;
        let id = ConnId(c.local_id);
        let ev = CmEvent::Rejected { id, reason: r.reason, private_data: r.private_data };
        match c.state {
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::ReqRcvd
            | CmState::MraReqSent
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::RepRcvd => {
                if r.reason == rej::STALE_CONN {
                    self.enter_timewait(i, now);
                } else if let Some(s) = self.conns.get_mut(i) {
                    *s = None;
                }
                Ok(Some(ev))
            }
            CmState::Established | CmState::DreqSent => {
                self.enter_timewait(i, now);
                Ok(Some(ev))
            }
            _ => Err(Ignored::Stale),
        }
    }

    /// cm.c `cm_acquire_mraed_id` / `cm_mra_handler`: wait
    /// ms(service timeout) + ms(av.timeout) before the next retransmission.
    fn on_mra(&mut self, now: u64, r: &Mra) -> Result<Option<CmEvent>, Ignored> {
        let i = self.find(ConnId(r.remote_comm_id)).ok_or(Ignored::Stale)?;
        let c = self.conn_mut(i).ok_or(Ignored::Stale)?;
        let next = match (c.state, r.msg_mraed) {
            (CmState::ReqSent, msg_response::REQ) => CmState::MraReqRcvd,
            (CmState::RepSent, msg_response::REP) if c.remote_id == r.local_comm_id => {
                CmState::MraRepRcvd
            }
            (CmState::MraReqRcvd | CmState::MraRepRcvd, _) => return Err(Ignored::Duplicate),
            _ => return Err(Ignored::Stale),
        };
        c.state = next;
        c.deadline =
            now.saturating_add(cm_ms(r.service_timeout)).saturating_add(cm_ms(c.av_timeout));
        Ok(None)
    }

    /// cm.c `cm_dreq_handler` (spec §4.5).
    fn on_dreq<T: MadTransport>(
        &mut self,
        src: &MadAddr,
        tid: u64,
        r: &Dreq,
        t: &mut T,
    ) -> Result<Option<CmEvent>, Ignored> {
        let found = self
            .find(ConnId(r.remote_comm_id))
            .filter(|&i| self.conn(i).is_some_and(|c| c.remote_id == r.local_comm_id));
        let Some(i) = found else {
            // unknown connection: DREP anyway, IDs swapped, TID echoed
            // (cm.c `cm_issue_drep`)
            let drep = Drep {
                local_comm_id: r.remote_comm_id,
                remote_comm_id: r.local_comm_id,
                private_data: [0; mad::pdata::DREP],
            };
            let _ = self.send_msg(t, src, tid, CmMsg::Drep(drep));
            return Err(Ignored::Stale);
        };
        let c = *self.conn(i).ok_or(Ignored::Stale)?;
        if r.remote_qpn != c.local_qpn {
            return Err(Ignored::WrongQpn);
        }
        let id = ConnId(c.local_id);
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd | CmState::Established | CmState::DreqSent => {
                if let Some(c) = self.conn_mut(i) {
                    c.state = CmState::DreqRcvd;
                    c.dreq_tid = tid;
                }
                Ok(Some(CmEvent::Disconnected { id, timed_out: false }))
            }
            CmState::Timewait => {
                // our DREP was lost
                let mut c = c;
                c.dreq_tid = tid;
                let _ = self.send_drep(t, &c);
                Err(Ignored::Duplicate)
            }
            CmState::DreqRcvd => Err(Ignored::Duplicate),
            _ => Err(Ignored::Stale),
        }
    }

    /// cm.c `cm_drep_handler`.
    fn on_drep(&mut self, now: u64, r: &Drep) -> Result<Option<CmEvent>, Ignored> {
        let i = self
            .find(ConnId(r.remote_comm_id))
            .filter(|&i| self.conn(i).is_some_and(|c| c.remote_id == r.local_comm_id))
            .ok_or(Ignored::Stale)?;
        let c = *self.conn(i).ok_or(Ignored::Stale)?;
        match c.state {
            CmState::DreqSent => {
                self.enter_timewait(i, now);
                Ok(Some(CmEvent::Disconnected { id: ConnId(c.local_id), timed_out: false }))
            }
            CmState::DreqRcvd => {
                self.enter_timewait(i, now);
                Ok(None)
            }
            _ => Err(Ignored::Stale),
        }
    }
}

impl<const C: usize, const L: usize> Cm<C, L> {
    /// cm.c `cm_sidr_req_handler` and cma.c `cma_ib_req_handler` for a
    /// SIDR_REQ: a duplicate (same Request ID from the same peer address,
    /// cm.c `cm_insert_remote_sidr`) is dropped while the caller decides
    /// and answered with the same SIDR_REP once answered; no listener for
    /// the exact service id → SIDR_REP status 1 (`IB_SIDR_UNSUPPORTED`);
    /// a listener RDMA-CM would not give it to (bad `cma_hdr`, another
    /// address, not a UD port space, unusable addresses) → status 2
    /// (`IB_SIDR_REJECT`, cm.c `cm_destroy_id` in SIDR_REQ_RCVD); no free
    /// slot → dropped (the peer retransmits).
    fn on_sidr_req<T: MadTransport>(
        &mut self,
        src: &MadAddr,
        tid: u64,
        r: &SidrReq,
        t: &mut T,
    ) -> Result<Option<CmEvent>, Ignored> {
        if let Some(c) = self.conns.iter().flatten().find(|c| {
            matches!(c.state, CmState::SidrReqRcvd | CmState::SidrRepSent)
                && c.remote_id == r.request_id
                && c.peer.peer_ip == src.peer_ip
        }) {
            let c = *c;
            if c.state == CmState::SidrRepSent {
                self.send(t, &c.peer, &c.out);
            }
            return Err(Ignored::Duplicate);
        }
        let refuse = |s: &mut Self, t: &mut T, status: u8| {
            let rep = SidrRep {
                request_id: r.request_id,
                status,
                info_length: 0,
                vendor_id: 0,
                qpn: 0,
                service_id: r.service_id,
                qkey: 0,
                info: [0; mad::pdata::SIDR_REP_INFO],
                private_data: [0; mad::pdata::SIDR_REP],
            };
            let _ = s.send_msg(t, src, tid, CmMsg::SidrRep(rep));
            Err(Ignored::SidrRejected(status))
        };
        if !self.listeners.iter().flatten().any(|l| l.sid == r.service_id) {
            return refuse(self, t, sidr_status::UNSUPPORTED);
        }
        let ud =
            matches!(service_id_parts(r.service_id), Some((PortSpace::Udp | PortSpace::Ib, _)));
        let mut req_pd = [0u8; mad::pdata::REQ];
        req_pd.copy_from_slice(&r.private_data[..mad::pdata::REQ]);
        let Ok(hdr) = CmaHdr::decode(&req_pd) else {
            return refuse(self, t, sidr_status::REJECT);
        };
        let same_family =
            |a: IpAddr, b: IpAddr| matches!(a, IpAddr::V4(_)) == matches!(b, IpAddr::V4(_));
        let listen = self.listeners.iter().enumerate().find_map(|(i, l)| {
            let l = l.as_ref()?;
            let ok = l.sid == r.service_id && l.addr.is_none_or(|a| a == hdr.dst);
            ok.then_some(ListenId(i))
        });
        let Some(listen) = listen else {
            return refuse(self, t, sidr_status::REJECT);
        };
        if !ud
            || hdr.dst != src.local_ip
            || !same_family(hdr.src, hdr.dst)
            || rdma_cm::unusable_addr(hdr.src)
            || rdma_cm::unusable_addr(hdr.dst)
        {
            return refuse(self, t, sidr_status::REJECT);
        }
        let Some(slot) = self.free_slot() else {
            return Err(Ignored::TableFull);
        };
        let local_id = self.alloc_id();
        let mut user = [0u8; SIDR_REQ_USER_DATA];
        user.copy_from_slice(&r.private_data[rdma_cm::CMA_HDR_SIZE..]);
        let info = SidrReqInfo {
            listen,
            hdr,
            local_port: service_id_parts(r.service_id).map_or(0, |(_, p)| p),
            private_data: user,
            peer: *src,
        };
        let c = Conn {
            state: CmState::SidrReqRcvd,
            active: false,
            local_id,
            remote_id: r.request_id,
            remote_guid: 0,
            tid,
            dreq_tid: 0,
            local_qpn: 0,
            remote_qpn: None,
            peer: *src,
            req: sidr_req_of(r.service_id),
            params: None,
            out: [0; MAD_SIZE],
            deadline: 0,
            retries_left: 0,
            max_retries: 0,
            interval: 0,
            av_timeout: 0,
        };
        if let Some(s) = self.conns.get_mut(slot) {
            *s = Some(c);
        }
        Ok(Some(CmEvent::SidrRequest { id: ConnId(local_id), info }))
    }

    /// cm.c `cm_sidr_rep_handler` (matched by Request ID alone, in
    /// SIDR_REQ_SENT) and cma.c `cma_sidr_rep_handler` (status ≠ 0 →
    /// unreachable with that status; a Q_Key of 0 becomes
    /// [`rdma_cm::UDP_QKEY`] as `cma_set_qkey` does). The slot is free
    /// afterwards; a later copy of the REP is stale.
    fn on_sidr_rep(&mut self, r: &SidrRep) -> Result<Option<CmEvent>, Ignored> {
        let i = self
            .find(ConnId(r.request_id))
            .filter(|&i| self.conn(i).is_some_and(|c| c.state == CmState::SidrReqSent))
            .ok_or(Ignored::Stale)?;
        let c = *self.conn(i).ok_or(Ignored::Stale)?;
        // stricter than cm.c, which matches the Request ID alone: the REP
        // echoes our service id (cm.c `cm_format_sidr_rep`)
        if r.service_id != c.req.service_id {
            return Err(Ignored::Stale);
        }
        if let Some(s) = self.conns.get_mut(i) {
            *s = None;
        }
        let id = ConnId(c.local_id);
        if r.status != sidr_status::SUCCESS {
            return Ok(Some(CmEvent::SidrRejected {
                id,
                status: r.status,
                private_data: r.private_data,
            }));
        }
        let qkey = if r.qkey == 0 { rdma_cm::UDP_QKEY } else { r.qkey };
        Ok(Some(CmEvent::SidrResolved { id, qpn: r.qpn, qkey, private_data: r.private_data }))
    }
}

/// States with a running timer.
const fn timed(s: CmState) -> bool {
    matches!(
        s,
        CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::DreqSent
            | CmState::Timewait
            | CmState::SidrReqSent
            | CmState::SidrRepSent
    )
}
