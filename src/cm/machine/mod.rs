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

mod active;
mod close;
mod passive;
mod sidr;

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
crate::error::wrapping!(CmError source { Mad });
crate::error::wrapping!(CmError from { MadError => Mad });

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
crate::error::wrapping!(Ignored source { Malformed });

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

/// The private data of a REQ or SIDR_REQ this side sends: the `cma_hdr`
/// (cma.c `cma_format_hdr`), then the caller's bytes (at most what is left:
/// cma.c `cma_connect_ib`, `cma_resolve_ib_udp`); both addresses of one
/// family.
fn cma_private<const N: usize>(
    src_port: u16,
    peer: &MadAddr,
    user: &[u8],
) -> Result<[u8; N], CmError> {
    if matches!(peer.peer_ip, IpAddr::V4(_)) != matches!(peer.local_ip, IpAddr::V4(_)) {
        return Err(CmError::Invalid("mixed IPv4/IPv6 addresses"));
    }
    let max = N.saturating_sub(rdma_cm::CMA_HDR_SIZE);
    if user.len() > max {
        return Err(MadError::PrivateData { len: user.len(), max }.into());
    }
    let hdr = CmaHdr { src_port, src: peer.local_ip, dst: peer.peer_ip };
    let mut pd = [0u8; N];
    let (h, rest) = pd.split_at_mut(rdma_cm::CMA_HDR_SIZE.min(N));
    h.copy_from_slice(&hdr.encode()[..h.len()]);
    rest[..user.len()].copy_from_slice(user);
    Ok(pd)
}

/// What differs between the connections this side opens ([`Cm::connect`],
/// [`Cm::sidr_resolve`]).
struct Opening {
    state: CmState,
    local_id: u32,
    local_qpn: u32,
    peer: MadAddr,
    req: Req,
    /// Retransmission interval (ms).
    interval: u64,
    av_timeout: u8,
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

    /// The slot and a copy of connection `id`.
    fn lookup(&self, id: ConnId) -> Result<(usize, Conn), CmError> {
        let i = self.find(id).ok_or(CmError::NotFound)?;
        Ok((i, *self.conn(i).ok_or(CmError::NotFound)?))
    }

    /// [`Self::lookup`] of connection `id`, which must be in `state`.
    fn lookup_in(&self, id: ConnId, state: CmState) -> Result<(usize, Conn), CmError> {
        let (i, c) = self.lookup(id)?;
        if c.state != state {
            return Err(CmError::InvalidState(c.state));
        }
        Ok((i, c))
    }

    fn conn_mut(&mut self, i: usize) -> Option<&mut Conn> {
        self.conns.get_mut(i)?.as_mut()
    }

    /// A free table slot and a fresh local id for the connection about to
    /// enter it; `None`, and no id taken, when the table is full.
    fn claim(&mut self) -> Option<(usize, u32)> {
        let slot = self.conns.iter().position(|c| c.is_none())?;
        Some((slot, self.alloc_id()))
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

    /// Sends the first MAD of a connection this side opens (`msg`, its
    /// TID from the local id) and enters it in `slot`, armed to retransmit
    /// every `o.interval` ms up to the configured retries.
    fn open<T: MadTransport>(
        &mut self,
        now: u64,
        slot: usize,
        o: Opening,
        msg: CmMsg,
        t: &mut T,
    ) -> Result<ConnId, CmError> {
        let tid = mad::form_tid(self.cfg.hi_tid, o.local_id);
        let mut out = [0u8; MAD_SIZE];
        CmMad::new(tid, msg).encode(&mut out)?;
        let retries = self.cfg.timing.max_cm_retries;
        let c = Conn {
            state: o.state,
            active: true,
            local_id: o.local_id,
            remote_id: 0,
            remote_guid: 0,
            tid,
            dreq_tid: 0,
            local_qpn: o.local_qpn,
            remote_qpn: None,
            peer: o.peer,
            req: o.req,
            params: None,
            out,
            deadline: now.saturating_add(o.interval),
            retries_left: retries,
            max_retries: retries,
            interval: o.interval,
            av_timeout: o.av_timeout,
        };
        if let Some(s) = self.conns.get_mut(slot) {
            *s = Some(c);
        }
        self.send(t, &o.peer, &out);
        Ok(ConnId(o.local_id))
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
        let (i, c) = self.lookup_in(id, CmState::ReqRcvd)?;
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
