//! RDMA-CM compatibility: service ids from a port space and port, the
//! 36-byte `cma_hdr` at the start of REQ private data, the private-data
//! limits, REJ reasons, the IB MTU enum and CM time values.
//!
//! Sources: Linux `drivers/infiniband/core/cma.c` (`struct cma_hdr`,
//! `cma_format_hdr`, `cma_save_ip_info`, `rdma_get_service_id`),
//! `include/rdma/rdma_cm.h` (`enum rdma_ucm_port_space`), `include/rdma/
//! ib_cm.h` (`enum ib_cm_rej_reason`), cm.c (`cm_convert_to_ms`,
//! `cm_ack_timeout`); fact sheet `shared/spec/ib-cm-rocev2.md` §3.8, §4.1,
//! §5.

use core::fmt;

use super::mad::pdata;
use crate::verbs::IpAddr;

/// RDMA-CM port spaces (`enum rdma_ucm_port_space`, rdma_cm.h; spec §5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum PortSpace {
    /// `RDMA_PS_IPOIB`.
    Ipoib = 0x0002,
    /// `RDMA_PS_TCP`: RC, what `rdma_connect`/`rdma_accept` peers use.
    Tcp = 0x0106,
    /// `RDMA_PS_UDP`.
    Udp = 0x0111,
    /// `RDMA_PS_IB`.
    Ib = 0x013F,
}

impl PortSpace {
    /// The port space of a value.
    pub const fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            0x0002 => Self::Ipoib,
            0x0106 => Self::Tcp,
            0x0111 => Self::Udp,
            0x013F => Self::Ib,
            _ => return None,
        })
    }
}

/// `RDMA_IB_IP_PS_MASK` (rdma_cm.h).
pub const IB_IP_PS_MASK: u64 = 0xFFFF_FFFF_FFFF_0000;

/// Service id of `port` in `ps`: `(ps << 16) + port` (cma.c
/// `rdma_get_service_id`). TCP port 4420 → 0x0000000001061144.
pub const fn service_id(ps: PortSpace, port: u16) -> u64 {
    ((ps as u64) << 16) + port as u64
}

/// Port space and port of a service id (cma.c `rdma_ps_from_service_id`,
/// `cma_port_from_service_id`): `None` unless the upper 32 bits are zero and
/// bits `[31:16]` name a port space.
pub const fn service_id_parts(sid: u64) -> Option<(PortSpace, u16)> {
    if sid >> 32 != 0 {
        return None;
    }
    match PortSpace::from_u16((sid >> 16) as u16) {
        Some(ps) => Some((ps, sid as u16)),
        None => None,
    }
}

/// `CMA_VERSION` (cma.c).
pub const CMA_VERSION: u8 = 0x00;
/// Bytes of the `cma_hdr`.
pub const CMA_HDR_SIZE: usize = 36;
/// User private data in a REQ after the `cma_hdr`: 92 − 36 (cma.c
/// `cma_user_data_offset`).
pub const REQ_USER_DATA: usize = pdata::REQ - CMA_HDR_SIZE;

/// User private data in a SIDR_REQ after the `cma_hdr`: 216 − 36 (cma.c
/// `cma_resolve_ib_udp` puts the header first, `cma_user_data_offset`).
pub const SIDR_REQ_USER_DATA: usize = pdata::SIDR_REQ - CMA_HDR_SIZE;

/// The Q_Key of every RDMA-CM UD id in the UDP and IB port spaces
/// (`RDMA_UDP_QKEY`, `include/rdma/rdma_cm_ib.h` and librdmacm
/// `rdma_cma.h`; cma.c `cma_set_qkey` gives it to an id with none, and
/// `rdma_accept` on a UD id sends it in the SIDR_REP).
pub const UDP_QKEY: u32 = 0x0123_4567;

/// Why a `cma_hdr` is refused (cma.c `cma_save_ip_info`, `cma_get_ip_ver`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmaHdrError {
    /// `cma_version` is not 0.
    Version(u8),
    /// `ip_version` upper nibble is not 4 or 6.
    IpVersion(u8),
}

impl fmt::Display for CmaHdrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Version(v) => write!(f, "cma_hdr version {v}, 0 expected"),
            Self::IpVersion(v) => write!(f, "cma_hdr ip_version {v:#04x}, 0x40 or 0x60 expected"),
        }
    }
}
impl core::error::Error for CmaHdrError {}

/// The RDMA-CM header (`struct cma_hdr`, cma.c; spec §5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmaHdr {
    /// The active side's source port.
    pub src_port: u16,
    /// The active side's address.
    pub src: IpAddr,
    /// The passive side's (listener's) address.
    pub dst: IpAddr,
}

/// `union cma_ip_addr`: IPv4 as 12 zero bytes + address (not ::ffff:, spec
/// §8 pitfall 5), IPv6 as itself.
fn cma_ip(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v) => {
            let mut o = [0u8; 16];
            o[12..].copy_from_slice(&v);
            o
        }
        IpAddr::V6(v) => v,
    }
}

impl CmaHdr {
    /// Encodes the header (cma.c `cma_format_hdr`): version 0,
    /// `ip_version` = 4 or 6 in the upper nibble (`cma_set_ip_ver`), port
    /// big-endian, the two addresses. A header mixing IPv4 and IPv6 takes
    /// the version of `src` (`cma_format_hdr` uses the source family).
    pub fn encode(&self) -> [u8; CMA_HDR_SIZE] {
        let mut o = [0u8; CMA_HDR_SIZE];
        o[0] = CMA_VERSION;
        o[1] = if matches!(self.src, IpAddr::V4(_)) { 4 << 4 } else { 6 << 4 };
        o[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        o[4..20].copy_from_slice(&cma_ip(self.src));
        o[20..36].copy_from_slice(&cma_ip(self.dst));
        o
    }

    /// Decodes the first 36 bytes of REQ private data (cma.c
    /// `cma_save_ip_info`: version must be 0; `cma_save_ip4_info` reads only
    /// the last 4 bytes of each IPv4 address).
    pub fn decode(b: &[u8; pdata::REQ]) -> Result<Self, CmaHdrError> {
        if b[0] != CMA_VERSION {
            return Err(CmaHdrError::Version(b[0]));
        }
        let addr = |at: usize, v4: bool| {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[at..at + 16]);
            if v4 { IpAddr::V4([a[12], a[13], a[14], a[15]]) } else { IpAddr::V6(a) }
        };
        let v4 = match b[1] >> 4 {
            4 => true,
            6 => false,
            _ => return Err(CmaHdrError::IpVersion(b[1])),
        };
        Ok(Self { src_port: u16::from_be_bytes([b[2], b[3]]), src: addr(4, v4), dst: addr(20, v4) })
    }
}

/// REJ reasons (`enum ib_cm_rej_reason`, ib_cm.h; spec §3.8).
pub mod rej {
    /// No QP.
    pub const NO_QP: u16 = 1;
    /// No resources.
    pub const NO_RESOURCES: u16 = 3;
    /// The active side gave up (ARI = its CA GUID).
    pub const TIMEOUT: u16 = 4;
    /// Invalid communication id.
    pub const INVALID_COMM_ID: u16 = 6;
    /// No listener for the service id.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Transport type not supported.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// Stale connection.
    pub const STALE_CONN: u16 = 10;
    /// The REQ's primary remote port GID is not ours.
    pub const INVALID_GID: u16 = 12;
    /// Consumer (RDMA-CM or application) refused.
    pub const CONSUMER_DEFINED: u16 = 28;
}

/// Message REJected / MRAed values (`enum cm_msg_response`, cm_msgs.h).
pub mod msg_response {
    /// The REQ.
    pub const REQ: u8 = 0;
    /// The REP.
    pub const REP: u8 = 1;
    /// Another message.
    pub const OTHER: u8 = 2;
}

/// Path MTU in bytes of an IB MTU enum (1=256 … 5=4096; `enum ib_mtu`).
pub const fn mtu_bytes(ib: u8) -> Option<u32> {
    match ib {
        1..=5 => Some(128 << ib),
        _ => None,
    }
}

/// IB MTU enum of a path MTU in bytes.
pub const fn mtu_enum(bytes: u32) -> Option<u8> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

/// Milliseconds of a CM time exponent as Linux computes them: 2^max(n−8, 0)
/// (cm.c `cm_convert_to_ms`; spec §4.1). `n` is a 5-bit field.
pub const fn cm_ms(n: u8) -> u64 {
    let n = n & 0x1F;
    1u64 << n.saturating_sub(8)
}

/// The local ACK timeout exponent from a CA ACK delay and packet life time
/// (cm.c `cm_ack_timeout`; spec §4.1), capped at 31.
pub const fn cm_ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let ca = ca_ack_delay as i32;
    let mut t = packet_life_time as i32 + 1;
    if t >= ca {
        t += (ca >= t - 1) as i32;
    } else {
        t = ca + (t >= ca - 1) as i32;
    }
    if t > 31 { 31 } else { t as u8 }
}

/// RoCEv2 GID of an address: ::ffff:a.b.c.d for IPv4 (spec §1.4).
pub fn gid_of(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v) => {
            let mut g = [0u8; 16];
            g[10] = 0xFF;
            g[11] = 0xFF;
            g[12..].copy_from_slice(&v);
            g
        }
        IpAddr::V6(v) => v,
    }
}

/// The address of a RoCEv2 GID (IPv4-mapped → IPv4).
pub fn ip_of_gid(g: [u8; 16]) -> IpAddr {
    if g[..10] == [0; 10] && g[10] == 0xFF && g[11] == 0xFF {
        IpAddr::V4([g[12], g[13], g[14], g[15]])
    } else {
        IpAddr::V6(g)
    }
}

/// An address RDMA-CM refuses on a RoCE REQ: zero, loopback, multicast or
/// IPv4 broadcast (cma.c `validate_ipv4_net_dev`, `cma_get_net_dev`; spec
/// §5.1 step 3).
pub fn unusable_addr(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => v == [0; 4] || v[0] == 127 || (v[0] & 0xF0) == 0xE0 || v == [0xFF; 4],
        IpAddr::V6(v) => {
            let lo = {
                let mut l = [0u8; 16];
                l[15] = 1;
                l
            };
            v == [0; 16] || v == lo || v[0] == 0xFF
        }
    }
}

/// The RoCEv2 flow label RDMA-CM derives for an IPv4 path (or IPv6 without
/// one): (source port × 31 + destination port) & 0xFFFFF (cma.c
/// `cma_get_roce_udp_flow_label`; spec §5.4).
pub const fn flow_label(src_port: u16, dst_port: u16) -> u32 {
    ((src_port as u32) * 31 + dst_port as u32) & 0xF_FFFF
}

/// The node GUID irdma uses: EUI-64 of the port MAC (U/L bit flipped,
/// FF FE inserted; irdma `irdma_init_roce_device` → `addrconf_addr_eui48`).
pub const fn guid_from_mac(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([mac[0] ^ 2, mac[1], mac[2], 0xFF, 0xFE, mac[3], mac[4], mac[5]])
}
