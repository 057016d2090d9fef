//! The MAD layer of the CM: the 24-byte common MAD header and the nine CM
//! attributes this driver speaks (REQ, MRA, REJ, REP, RTU, DREQ, DREP,
//! SIDR_REQ, SIDR_REP), encoded into and decoded from 256-byte MADs field
//! by field.
//!
//! Layouts: IBTA vol. 1 ch. 12 tables 106–113 as Linux writes them
//! (`include/rdma/ibta_vol1_c12.h` `CM_*` field macros, decoded with
//! `include/rdma/iba.h` `IBA_FIELD*_LOC`; cross-checked with the struct form
//! in `drivers/infiniband/core/cm_msgs.h`); fact sheet
//! `shared/spec/ib-cm-rocev2.md` §2–§3; SIDR_REQ/SIDR_REP: IBTA tables
//! 119/120 as `ibta_vol1_c12.h` `CM_SIDR_REQ_*` / `CM_SIDR_REP_*` give
//! them (the fact sheet lists their attribute ids only). Every field is big-endian; IBTA
//! numbers bits MSB-first, the comments below use `[hi:lo]` with bit 7 the
//! MSB (spec §0).
//!
//! Decoding never panics: a slice of any length and content gives either a
//! message or a [`MadError`].

use core::fmt;

/// Bytes in a MAD (`IB_MGMT_MAD_SIZE`, `include/rdma/ib_mad.h`).
pub const MAD_SIZE: usize = 256;
/// Bytes of the common MAD header (`IB_MGMT_MAD_HDR`).
pub const MAD_HDR_SIZE: usize = 24;
/// `IB_MGMT_BASE_VERSION`.
pub const BASE_VERSION: u8 = 1;
/// `IB_MGMT_CLASS_CM`.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// `IB_CM_CLASS_VERSION` (cm_msgs.h).
pub const CM_CLASS_VERSION: u8 = 2;
/// `IB_MGMT_METHOD_SEND`: the method of every CM message (cm.c
/// `cm_format_mad_hdr`).
pub const METHOD_SEND: u8 = 0x03;
/// The Q_Key of QP1 (`IB_QP1_QKEY`, ib_mad.h): every CM send uses it.
pub const QP1_QKEY: u32 = 0x8001_0000;

/// Private-data sizes (`enum ib_cm_data_size`, `include/rdma/ib_cm.h`).
pub mod pdata {
    /// REQ.
    pub const REQ: usize = 92;
    /// MRA.
    pub const MRA: usize = 222;
    /// REJ.
    pub const REJ: usize = 148;
    /// REJ additional rejection information.
    pub const REJ_ARI: usize = 72;
    /// REP.
    pub const REP: usize = 196;
    /// RTU.
    pub const RTU: usize = 224;
    /// DREQ.
    pub const DREQ: usize = 220;
    /// DREP.
    pub const DREP: usize = 224;
    /// SIDR_REQ (`IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE`; C12
    /// `CM_SIDR_REQ_PRIVATE_DATA`: data 16, 1728 bits).
    pub const SIDR_REQ: usize = 216;
    /// SIDR_REP (`IB_CM_SIDR_REP_PRIVATE_DATA_SIZE`; C12
    /// `CM_SIDR_REP_PRIVATE_DATA`: data 96, 1088 bits).
    pub const SIDR_REP: usize = 136;
    /// SIDR_REP additional information (`IB_CM_SIDR_REP_INFO_LENGTH`; C12
    /// `CM_SIDR_REP_ADDITIONAL_INFORMATION`: data 24, 576 bits).
    pub const SIDR_REP_INFO: usize = 72;
}

/// CM attribute ids (`CM_*_ATTR_ID`, `include/rdma/ib_cm.h`; spec §2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum AttrId {
    /// ConnectRequest.
    Req = 0x0010,
    /// MsgRcptAck.
    Mra = 0x0011,
    /// ConnectReject.
    Rej = 0x0012,
    /// ConnectReply.
    Rep = 0x0013,
    /// ReadyToUse.
    Rtu = 0x0014,
    /// DisconnectRequest.
    Dreq = 0x0015,
    /// DisconnectReply.
    Drep = 0x0016,
    /// ServiceIDResolutionRequest (UD service resolution).
    SidrReq = 0x0017,
    /// ServiceIDResolutionResponse.
    SidrRep = 0x0018,
}

impl AttrId {
    /// The id of a value, if it is one of the nine.
    pub const fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            0x10 => Self::Req,
            0x11 => Self::Mra,
            0x12 => Self::Rej,
            0x13 => Self::Rep,
            0x14 => Self::Rtu,
            0x15 => Self::Dreq,
            0x16 => Self::Drep,
            0x17 => Self::SidrReq,
            0x18 => Self::SidrRep,
            _ => return None,
        })
    }
}

/// Why a buffer is not a CM MAD this driver handles, or a message does not
/// fit its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MadError {
    /// Not exactly 256 bytes.
    Length(usize),
    /// Base version other than 1.
    BaseVersion(u8),
    /// Management class other than CM (0x07).
    Class(u8),
    /// CM class version other than 2 (Linux registers for 2 only, cm.c
    /// `cm_add_one`).
    ClassVersion(u8),
    /// Method other than Send (0x03).
    Method(u8),
    /// An attribute id the CM does not handle (LAP, APR, or unknown;
    /// Linux ignores LAP/APR on RoCE and drops unknown ids, cm.c
    /// `cm_recv_handler`).
    Attribute(u16),
    /// A value does not fit its field (encoding).
    Field(&'static str),
    /// Private data longer than the message carries.
    PrivateData {
        /// Bytes given.
        len: usize,
        /// Bytes the message carries.
        max: usize,
    },
}

impl fmt::Display for MadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length(n) => write!(f, "MAD of {n} bytes, 256 expected"),
            Self::BaseVersion(v) => write!(f, "MAD base version {v}, 1 expected"),
            Self::Class(c) => write!(f, "management class {c:#04x} is not CM (0x07)"),
            Self::ClassVersion(v) => write!(f, "CM class version {v}, 2 expected"),
            Self::Method(m) => write!(f, "MAD method {m:#04x}, Send (0x03) expected"),
            Self::Attribute(a) => write!(f, "CM attribute {a:#06x} not handled"),
            Self::Field(w) => write!(f, "value does not fit the CM field {w}"),
            Self::PrivateData { len, max } => {
                write!(f, "{len} bytes of private data, the message carries {max}")
            }
        }
    }
}
impl core::error::Error for MadError {}

/// The common MAD header (`struct ib_mad_hdr`, ib_mad.h; spec §2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MadHeader {
    /// BaseVersion (1).
    pub base_version: u8,
    /// MgmtClass (0x07).
    pub mgmt_class: u8,
    /// ClassVersion (2).
    pub class_version: u8,
    /// R bit `[7]` and Method `[6:0]` of byte 3.
    pub method: u8,
    /// Status.
    pub status: u16,
    /// ClassSpecific.
    pub class_specific: u16,
    /// TransactionID.
    pub tid: u64,
    /// AttributeID.
    pub attr_id: u16,
    /// AttributeModifier (the ECE attr_mod in REQ/REP; 0 here).
    pub attr_mod: u32,
}

impl MadHeader {
    /// The header Linux puts on every CM message (cm.c `cm_format_mad_hdr`).
    pub const fn cm(attr: AttrId, tid: u64) -> Self {
        Self {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id: attr as u16,
            attr_mod: 0,
        }
    }

    fn write(&self, b: &mut [u8; MAD_SIZE]) {
        b[0] = self.base_version;
        b[1] = self.mgmt_class;
        b[2] = self.class_version;
        b[3] = self.method;
        b[4..6].copy_from_slice(&self.status.to_be_bytes());
        b[6..8].copy_from_slice(&self.class_specific.to_be_bytes());
        b[8..16].copy_from_slice(&self.tid.to_be_bytes());
        b[16..18].copy_from_slice(&self.attr_id.to_be_bytes());
        b[18..20].copy_from_slice(&[0, 0]);
        b[20..24].copy_from_slice(&self.attr_mod.to_be_bytes());
    }

    fn read(b: &[u8; MAD_SIZE]) -> Self {
        let r = Rd(b);
        Self {
            base_version: b[0],
            mgmt_class: b[1],
            class_version: b[2],
            method: b[3],
            status: r.u16(4),
            class_specific: r.u16(6),
            tid: r.u64(8),
            attr_id: r.u16(16),
            attr_mod: r.u32(20),
        }
    }
}

/// The transaction id Linux gives a new REQ or DREQ: the MAD agent's
/// `hi_tid` in the upper 32 bits, the local communication id in the lower
/// (cm.c `cm_form_tid`; spec §2.3).
pub const fn form_tid(hi_tid: u32, local_comm_id: u32) -> u64 {
    (hi_tid as u64) << 32 | local_comm_id as u64
}

// ---- byte helpers on a fixed 256-byte buffer (all indices constant and in
// range, so no bounds check can fail) ----

/// Offset of data byte `d` in the MAD.
const fn m(d: usize) -> usize {
    MAD_HDR_SIZE + d
}

struct Rd<'a>(&'a [u8; MAD_SIZE]);

impl Rd<'_> {
    fn u8(&self, at: usize) -> u8 {
        self.0[at]
    }
    fn u16(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.0[at], self.0[at + 1]])
    }
    fn u24(&self, at: usize) -> u32 {
        u32::from_be_bytes([0, self.0[at], self.0[at + 1], self.0[at + 2]])
    }
    fn u32(&self, at: usize) -> u32 {
        u32::from_be_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]])
    }
    fn u64(&self, at: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.0[at..at + 8]);
        u64::from_be_bytes(w)
    }
    /// Bits `[hi:lo]` of byte `at` (bit 7 = MSB).
    fn bits(&self, at: usize, hi: u32, lo: u32) -> u8 {
        (self.0[at] >> lo) & (((1u16 << (hi - lo + 1)) - 1) as u8)
    }
    fn arr<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&self.0[at..at + N]);
        a
    }
}

struct Wr<'a>(&'a mut [u8; MAD_SIZE]);

impl Wr<'_> {
    fn u8(&mut self, at: usize, v: u8) {
        self.0[at] = v;
    }
    fn u16(&mut self, at: usize, v: u16) {
        self.0[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    /// The upper three bytes of a big-endian word (spec §8 pitfall 2):
    /// `v` was checked to fit 24 bits.
    fn u24(&mut self, at: usize, v: u32) {
        self.0[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
    }
    fn u32(&mut self, at: usize, v: u32) {
        self.0[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, at: usize, v: u64) {
        self.0[at..at + 8].copy_from_slice(&v.to_be_bytes());
    }
    /// ORs `v` (checked to fit) into bits `[hi:lo]` of byte `at`.
    fn bits(&mut self, at: usize, lo: u32, v: u8) {
        self.0[at] |= v << lo;
    }
    fn bytes(&mut self, at: usize, v: &[u8]) {
        self.0[at..at + v.len()].copy_from_slice(v);
    }
}

/// `Err(Field(name))` unless `v` fits `bits` bits.
fn fit(v: u64, bits: u32, name: &'static str) -> Result<(), MadError> {
    if v >> bits == 0 { Ok(()) } else { Err(MadError::Field(name)) }
}

/// Copies `src` into a zero-filled private-data area of `N` bytes (spec
/// §8 pitfall 4: no length on the wire, unused bytes are zero).
pub fn private_data<const N: usize>(src: &[u8]) -> Result<[u8; N], MadError> {
    let mut a = [0u8; N];
    a.get_mut(..src.len())
        .ok_or(MadError::PrivateData { len: src.len(), max: N })?
        .copy_from_slice(src);
    Ok(a)
}

/// One path of a REQ (primary at data 52, alternate at 96; C12
/// `CM_REQ_PRIMARY_*` / `CM_REQ_ALTERNATE_*`; spec §3.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReqPath {
    /// Local port LID (16).
    pub local_lid: u16,
    /// Remote port LID (16).
    pub remote_lid: u16,
    /// Local port GID.
    pub local_gid: [u8; 16],
    /// Remote port GID.
    pub remote_gid: [u8; 16],
    /// Flow label (20 bits: the top 20 of the big-endian word at +36).
    pub flow_label: u32,
    /// Packet rate (6 bits, byte +39 `[5:0]`).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Subnet local (1 bit).
    pub subnet_local: bool,
    /// Local ACK timeout (5 bits).
    pub local_ack_timeout: u8,
    /// SAP supported (1 bit, alternate path only in C12; kept for both).
    pub sap_supported: bool,
}

impl ReqPath {
    /// All fields zero (an unused path).
    pub const ZERO: Self = Self {
        local_lid: 0,
        remote_lid: 0,
        local_gid: [0; 16],
        remote_gid: [0; 16],
        flow_label: 0,
        packet_rate: 0,
        traffic_class: 0,
        hop_limit: 0,
        sl: 0,
        subnet_local: false,
        local_ack_timeout: 0,
        sap_supported: false,
    };

    /// `base` = MAD offset of the path's local LID.
    fn write(&self, w: &mut Wr<'_>, base: usize, alt: bool) -> Result<(), MadError> {
        fit(self.flow_label.into(), 20, "flow label")?;
        fit(self.packet_rate.into(), 6, "packet rate")?;
        fit(self.sl.into(), 4, "SL")?;
        fit(self.local_ack_timeout.into(), 5, "local ACK timeout")?;
        if self.sap_supported && !alt {
            return Err(MadError::Field("SAP supported (alternate path only)"));
        }
        w.u16(base, self.local_lid);
        w.u16(base + 2, self.remote_lid);
        w.bytes(base + 4, &self.local_gid);
        w.bytes(base + 20, &self.remote_gid);
        // C12 CM_REQ_PRIMARY_FLOW_LABEL: 20 bits at the top of the BE word;
        // CM_REQ_PRIMARY_PACKET_RATE: byte +39 [5:0] (spec §8 pitfall 3).
        w.u32(base + 36, self.flow_label << 12 | self.packet_rate as u32);
        w.u8(base + 40, self.traffic_class);
        w.u8(base + 41, self.hop_limit);
        w.bits(base + 42, 4, self.sl);
        w.bits(base + 42, 3, self.subnet_local as u8);
        w.bits(base + 43, 3, self.local_ack_timeout);
        w.bits(base + 43, 2, self.sap_supported as u8);
        Ok(())
    }

    fn read(r: &Rd<'_>, base: usize, alt: bool) -> Self {
        Self {
            local_lid: r.u16(base),
            remote_lid: r.u16(base + 2),
            local_gid: r.arr(base + 4),
            remote_gid: r.arr(base + 20),
            flow_label: r.u32(base + 36) >> 12,
            packet_rate: r.bits(base + 39, 5, 0),
            traffic_class: r.u8(base + 40),
            hop_limit: r.u8(base + 41),
            sl: r.bits(base + 42, 7, 4),
            subnet_local: r.bits(base + 42, 3, 3) != 0,
            local_ack_timeout: r.bits(base + 43, 7, 3),
            sap_supported: alt && r.bits(base + 43, 2, 2) != 0,
        }
    }
}

/// ConnectRequest (C12 table 106, `CM_REQ_*`; spec §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Req {
    /// Local Communication ID (data 0).
    pub local_comm_id: u32,
    /// ECE vendor id (data 5..7, 24 bits; 0 without ECE).
    pub vendor_id: u32,
    /// Service ID (data 8).
    pub service_id: u64,
    /// Local CA GUID (data 16).
    pub local_ca_guid: u64,
    /// Local Q_Key (data 28; 0 for RC).
    pub local_qkey: u32,
    /// Local QPN (data 32, 24 bits).
    pub local_qpn: u32,
    /// Responder resources (data 35).
    pub responder_resources: u8,
    /// Local EECN (data 36, 24 bits).
    pub local_eecn: u32,
    /// Initiator depth (data 39).
    pub initiator_depth: u8,
    /// Remote EECN (data 40, 24 bits).
    pub remote_eecn: u32,
    /// Remote CM response timeout (data 43 `[7:3]`).
    pub remote_cm_response_timeout: u8,
    /// Transport service type (data 43 `[2:1]`: 0 RC, 1 UC, 3 XRC).
    pub transport_type: u8,
    /// End-to-end flow control (data 43 `[0]`).
    pub flow_control: bool,
    /// Starting PSN (data 44, 24 bits): the PSN the sender expects to receive.
    pub starting_psn: u32,
    /// Local CM response timeout (data 47 `[7:3]`).
    pub local_cm_response_timeout: u8,
    /// Retry count (data 47 `[2:0]`).
    pub retry_count: u8,
    /// Partition key (data 48).
    pub pkey: u16,
    /// Path packet payload MTU, IB enum (data 50 `[7:4]`).
    pub path_mtu: u8,
    /// RDC exists (data 50 `[3]`).
    pub rdc_exists: bool,
    /// RNR retry count (data 50 `[2:0]`).
    pub rnr_retry_count: u8,
    /// Max CM retries (data 51 `[7:4]`).
    pub max_cm_retries: u8,
    /// SRQ (data 51 `[3]`).
    pub srq: bool,
    /// Extended transport type (data 51 `[2:0]`).
    pub ext_transport_type: u8,
    /// Primary path (data 52..95).
    pub primary: ReqPath,
    /// Alternate path (data 96..139; all zero on RoCE).
    pub alternate: ReqPath,
    /// Private data (data 140..231).
    pub private_data: [u8; pdata::REQ],
}

impl Req {
    fn write(&self, w: &mut Wr<'_>) -> Result<(), MadError> {
        fit(self.vendor_id.into(), 24, "vendor id")?;
        fit(self.local_qpn.into(), 24, "local QPN")?;
        fit(self.local_eecn.into(), 24, "local EECN")?;
        fit(self.remote_eecn.into(), 24, "remote EECN")?;
        fit(self.remote_cm_response_timeout.into(), 5, "remote CM response timeout")?;
        fit(self.transport_type.into(), 2, "transport service type")?;
        fit(self.starting_psn.into(), 24, "starting PSN")?;
        fit(self.local_cm_response_timeout.into(), 5, "local CM response timeout")?;
        fit(self.retry_count.into(), 3, "retry count")?;
        fit(self.path_mtu.into(), 4, "path MTU")?;
        fit(self.rnr_retry_count.into(), 3, "RNR retry count")?;
        fit(self.max_cm_retries.into(), 4, "max CM retries")?;
        fit(self.ext_transport_type.into(), 3, "extended transport type")?;
        w.u32(m(0), self.local_comm_id);
        w.u24(m(5), self.vendor_id);
        w.u64(m(8), self.service_id);
        w.u64(m(16), self.local_ca_guid);
        w.u32(m(28), self.local_qkey);
        w.u24(m(32), self.local_qpn);
        w.u8(m(35), self.responder_resources);
        w.u24(m(36), self.local_eecn);
        w.u8(m(39), self.initiator_depth);
        w.u24(m(40), self.remote_eecn);
        w.bits(m(43), 3, self.remote_cm_response_timeout);
        w.bits(m(43), 1, self.transport_type);
        w.bits(m(43), 0, self.flow_control as u8);
        w.u24(m(44), self.starting_psn);
        w.bits(m(47), 3, self.local_cm_response_timeout);
        w.bits(m(47), 0, self.retry_count);
        w.u16(m(48), self.pkey);
        w.bits(m(50), 4, self.path_mtu);
        w.bits(m(50), 3, self.rdc_exists as u8);
        w.bits(m(50), 0, self.rnr_retry_count);
        w.bits(m(51), 4, self.max_cm_retries);
        w.bits(m(51), 3, self.srq as u8);
        w.bits(m(51), 0, self.ext_transport_type);
        self.primary.write(w, m(52), false)?;
        self.alternate.write(w, m(96), true)?;
        w.bytes(m(140), &self.private_data);
        Ok(())
    }

    fn read(r: &Rd<'_>) -> Self {
        Self {
            local_comm_id: r.u32(m(0)),
            vendor_id: r.u24(m(5)),
            service_id: r.u64(m(8)),
            local_ca_guid: r.u64(m(16)),
            local_qkey: r.u32(m(28)),
            local_qpn: r.u24(m(32)),
            responder_resources: r.u8(m(35)),
            local_eecn: r.u24(m(36)),
            initiator_depth: r.u8(m(39)),
            remote_eecn: r.u24(m(40)),
            remote_cm_response_timeout: r.bits(m(43), 7, 3),
            transport_type: r.bits(m(43), 2, 1),
            flow_control: r.bits(m(43), 0, 0) != 0,
            starting_psn: r.u24(m(44)),
            local_cm_response_timeout: r.bits(m(47), 7, 3),
            retry_count: r.bits(m(47), 2, 0),
            pkey: r.u16(m(48)),
            path_mtu: r.bits(m(50), 7, 4),
            rdc_exists: r.bits(m(50), 3, 3) != 0,
            rnr_retry_count: r.bits(m(50), 2, 0),
            max_cm_retries: r.bits(m(51), 7, 4),
            srq: r.bits(m(51), 3, 3) != 0,
            ext_transport_type: r.bits(m(51), 2, 0),
            primary: ReqPath::read(r, m(52), false),
            alternate: ReqPath::read(r, m(96), true),
            private_data: r.arr(m(140)),
        }
    }
}

impl Mra {
    fn write(&self, w: &mut Wr<'_>) -> Result<(), MadError> {
        fit(self.msg_mraed.into(), 2, "message MRAed")?;
        fit(self.service_timeout.into(), 5, "service timeout")?;
        w.u32(m(0), self.local_comm_id);
        w.u32(m(4), self.remote_comm_id);
        w.bits(m(8), 6, self.msg_mraed);
        w.bits(m(9), 3, self.service_timeout);
        w.bytes(m(10), &self.private_data);
        Ok(())
    }

    fn read(r: &Rd<'_>, ids: (u32, u32)) -> Mra {
        Mra {
            local_comm_id: ids.0,
            remote_comm_id: ids.1,
            msg_mraed: r.bits(m(8), 7, 6),
            service_timeout: r.bits(m(9), 7, 3),
            private_data: r.arr(m(10)),
        }
    }
}

impl Rej {
    fn write(&self, w: &mut Wr<'_>) -> Result<(), MadError> {
        fit(self.msg_rejected.into(), 2, "message REJected")?;
        if usize::from(self.ari_length) > pdata::REJ_ARI {
            return Err(MadError::Field("reject info length"));
        }
        w.u32(m(0), self.local_comm_id);
        w.u32(m(4), self.remote_comm_id);
        w.bits(m(8), 6, self.msg_rejected);
        w.bits(m(9), 1, self.ari_length);
        w.u16(m(10), self.reason);
        w.bytes(m(12), &self.ari);
        w.bytes(m(84), &self.private_data);
        Ok(())
    }

    fn read(r: &Rd<'_>, ids: (u32, u32)) -> Rej {
        Rej {
            local_comm_id: ids.0,
            remote_comm_id: ids.1,
            msg_rejected: r.bits(m(8), 7, 6),
            ari_length: r.bits(m(9), 7, 1),
            reason: r.u16(m(10)),
            ari: r.arr(m(12)),
            private_data: r.arr(m(84)),
        }
    }
}

impl Rep {
    fn write(&self, w: &mut Wr<'_>) -> Result<(), MadError> {
        fit(self.local_qpn.into(), 24, "local QPN")?;
        fit(self.vendor_id.into(), 24, "vendor id")?;
        fit(self.local_eecn.into(), 24, "local EECN")?;
        fit(self.starting_psn.into(), 24, "starting PSN")?;
        fit(self.target_ack_delay.into(), 5, "target ACK delay")?;
        fit(self.failover_accepted.into(), 2, "failover accepted")?;
        fit(self.rnr_retry_count.into(), 3, "RNR retry count")?;
        let v = self.vendor_id.to_be_bytes();
        w.u32(m(0), self.local_comm_id);
        w.u32(m(4), self.remote_comm_id);
        w.u32(m(8), self.local_qkey);
        w.u24(m(12), self.local_qpn);
        w.u8(m(15), v[1]);
        w.u24(m(16), self.local_eecn);
        w.u8(m(19), v[2]);
        w.u24(m(20), self.starting_psn);
        w.u8(m(23), v[3]);
        w.u8(m(24), self.responder_resources);
        w.u8(m(25), self.initiator_depth);
        w.bits(m(26), 3, self.target_ack_delay);
        w.bits(m(26), 1, self.failover_accepted);
        w.bits(m(26), 0, self.flow_control as u8);
        w.bits(m(27), 5, self.rnr_retry_count);
        w.bits(m(27), 4, self.srq as u8);
        w.u64(m(28), self.local_ca_guid);
        w.bytes(m(36), &self.private_data);
        Ok(())
    }

    fn read(r: &Rd<'_>, ids: (u32, u32)) -> Rep {
        Rep {
            local_comm_id: ids.0,
            remote_comm_id: ids.1,
            local_qkey: r.u32(m(8)),
            local_qpn: r.u24(m(12)),
            vendor_id: u32::from_be_bytes([0, r.u8(m(15)), r.u8(m(19)), r.u8(m(23))]),
            local_eecn: r.u24(m(16)),
            starting_psn: r.u24(m(20)),
            responder_resources: r.u8(m(24)),
            initiator_depth: r.u8(m(25)),
            target_ack_delay: r.bits(m(26), 7, 3),
            failover_accepted: r.bits(m(26), 2, 1),
            flow_control: r.bits(m(26), 0, 0) != 0,
            rnr_retry_count: r.bits(m(27), 7, 5),
            srq: r.bits(m(27), 4, 4) != 0,
            local_ca_guid: r.u64(m(28)),
            private_data: r.arr(m(36)),
        }
    }
}

impl SidrRep {
    fn write(&self, w: &mut Wr<'_>) -> Result<(), MadError> {
        fit(self.qpn.into(), 24, "QPN")?;
        fit(self.vendor_id.into(), 24, "vendor id")?;
        if usize::from(self.info_length) > pdata::SIDR_REP_INFO {
            return Err(MadError::Field("additional information length"));
        }
        w.u32(m(0), self.request_id);
        w.u8(m(4), self.status);
        w.u8(m(5), self.info_length);
        w.u16(m(6), (self.vendor_id >> 8) as u16);
        w.u24(m(8), self.qpn);
        w.u8(m(11), self.vendor_id as u8);
        w.u64(m(12), self.service_id);
        w.u32(m(20), self.qkey);
        w.bytes(m(24), &self.info);
        w.bytes(m(96), &self.private_data);
        Ok(())
    }

    fn read(r: &Rd<'_>, ids: (u32, u32)) -> SidrRep {
        SidrRep {
            request_id: ids.0,
            status: r.u8(m(4)),
            info_length: r.u8(m(5)),
            vendor_id: u32::from(r.u16(m(6))) << 8 | u32::from(r.u8(m(11))),
            qpn: r.u24(m(8)),
            service_id: r.u64(m(12)),
            qkey: r.u32(m(20)),
            info: r.arr(m(24)),
            private_data: r.arr(m(96)),
        }
    }
}

/// MsgRcptAck (C12 table 107, `CM_MRA_*`; spec §3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mra {
    /// Local Communication ID (data 0).
    pub local_comm_id: u32,
    /// Remote Communication ID (data 4).
    pub remote_comm_id: u32,
    /// Message MRAed (data 8 `[7:6]`): 0 REQ, 1 REP, 2 other.
    pub msg_mraed: u8,
    /// Service timeout (data 9 `[7:3]`).
    pub service_timeout: u8,
    /// Private data (data 10..231).
    pub private_data: [u8; pdata::MRA],
}

/// ConnectReject (C12 table 108, `CM_REJ_*`; spec §3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rej {
    /// Local Communication ID (data 0).
    pub local_comm_id: u32,
    /// Remote Communication ID (data 4).
    pub remote_comm_id: u32,
    /// Message REJected (data 8 `[7:6]`): 0 REQ, 1 REP, 2 other.
    pub msg_rejected: u8,
    /// Reject info length (data 9 `[7:1]`).
    pub ari_length: u8,
    /// Reason (data 10).
    pub reason: u16,
    /// Additional rejection information (data 12..83).
    pub ari: [u8; pdata::REJ_ARI],
    /// Private data (data 84..231).
    pub private_data: [u8; pdata::REJ],
}

/// ConnectReply (C12 table 110, `CM_REP_*`; spec §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rep {
    /// Local Communication ID (data 0).
    pub local_comm_id: u32,
    /// Remote Communication ID (data 4).
    pub remote_comm_id: u32,
    /// Local Q_Key (data 8; 0 for RC).
    pub local_qkey: u32,
    /// Local QPN (data 12, 24 bits).
    pub local_qpn: u32,
    /// ECE vendor id (bytes 15, 19, 23 hold bits `[23:16]`, `[15:8]`, `[7:0]`).
    pub vendor_id: u32,
    /// Local EE context number (data 16, 24 bits).
    pub local_eecn: u32,
    /// Starting PSN (data 20, 24 bits).
    pub starting_psn: u32,
    /// Responder resources (data 24).
    pub responder_resources: u8,
    /// Initiator depth (data 25).
    pub initiator_depth: u8,
    /// Target ACK delay (data 26 `[7:3]`).
    pub target_ack_delay: u8,
    /// Failover accepted (data 26 `[2:1]`).
    pub failover_accepted: u8,
    /// End-to-end flow control (data 26 `[0]`).
    pub flow_control: bool,
    /// RNR retry count (data 27 `[7:5]`).
    pub rnr_retry_count: u8,
    /// SRQ (data 27 `[4]`).
    pub srq: bool,
    /// Local CA GUID (data 28).
    pub local_ca_guid: u64,
    /// Private data (data 36..231).
    pub private_data: [u8; pdata::REP],
}

/// ReadyToUse (C12 table 111, `CM_RTU_*`; spec §3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rtu {
    /// Local Communication ID (data 0).
    pub local_comm_id: u32,
    /// Remote Communication ID (data 4).
    pub remote_comm_id: u32,
    /// Private data (data 8..231).
    pub private_data: [u8; pdata::RTU],
}

/// DisconnectRequest (C12 table 112, `CM_DREQ_*`; spec §3.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dreq {
    /// Local Communication ID (data 0).
    pub local_comm_id: u32,
    /// Remote Communication ID (data 4).
    pub remote_comm_id: u32,
    /// Remote QPN/EECN (data 8, 24 bits): the receiver's QPN.
    pub remote_qpn: u32,
    /// Private data (data 12..231).
    pub private_data: [u8; pdata::DREQ],
}

/// DisconnectReply (C12 table 113, `CM_DREP_*`; spec §3.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drep {
    /// Local Communication ID (data 0).
    pub local_comm_id: u32,
    /// Remote Communication ID (data 4).
    pub remote_comm_id: u32,
    /// Private data (data 8..231).
    pub private_data: [u8; pdata::DREP],
}

/// ServiceIDResolutionRequest (C12 table 119, `CM_SIDR_REQ_*`): asks the
/// passive side for the UD QPN and Q_Key behind a service id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SidrReq {
    /// Request ID (data 0): the sender's id for matching the SIDR_REP
    /// (cm.c `cm_format_sidr_req`: its local id).
    pub request_id: u32,
    /// Partition key (data 4).
    pub pkey: u16,
    /// Service ID (data 8).
    pub service_id: u64,
    /// Private data (data 16..231; RDMA-CM puts its `cma_hdr` first).
    pub private_data: [u8; pdata::SIDR_REQ],
}

/// ServiceIDResolutionResponse (C12 table 120, `CM_SIDR_REP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SidrRep {
    /// Request ID (data 0): the SIDR_REQ's.
    pub request_id: u32,
    /// Status (data 4; [`sidr_status`]).
    pub status: u8,
    /// Additional information length (data 5).
    pub info_length: u8,
    /// ECE vendor id (data 6..7 bits `[23:8]`, data 11 bits `[7:0]`; 0
    /// without ECE).
    pub vendor_id: u32,
    /// QPN (data 8, 24 bits).
    pub qpn: u32,
    /// Service ID (data 12).
    pub service_id: u64,
    /// Q_Key (data 20).
    pub qkey: u32,
    /// Additional information (data 24..95).
    pub info: [u8; pdata::SIDR_REP_INFO],
    /// Private data (data 96..231).
    pub private_data: [u8; pdata::SIDR_REP],
}

/// SIDR_REP status values (`enum ib_cm_sidr_status`, `include/rdma/
/// ib_cm.h`).
pub mod sidr_status {
    /// `IB_SIDR_SUCCESS`: QPN and Q_Key are valid.
    pub const SUCCESS: u8 = 0;
    /// `IB_SIDR_UNSUPPORTED`: no such service (cm.c
    /// `cm_sidr_req_handler` when no listener matches).
    pub const UNSUPPORTED: u8 = 1;
    /// `IB_SIDR_REJECT`: the consumer refused (cma.c `rdma_reject` on a
    /// UD id; cm.c `cm_destroy_id` in SIDR_REQ_RCVD).
    pub const REJECT: u8 = 2;
    /// `IB_SIDR_NO_QP`.
    pub const NO_QP: u8 = 3;
    /// `IB_SIDR_REDIRECT`.
    pub const REDIRECT: u8 = 4;
    /// `IB_SIDR_UNSUPPORTED_VERSION`.
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

/// One CM message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmMsg {
    /// ConnectRequest.
    Req(Req),
    /// MsgRcptAck.
    Mra(Mra),
    /// ConnectReject.
    Rej(Rej),
    /// ConnectReply.
    Rep(Rep),
    /// ReadyToUse.
    Rtu(Rtu),
    /// DisconnectRequest.
    Dreq(Dreq),
    /// DisconnectReply.
    Drep(Drep),
    /// ServiceIDResolutionRequest.
    SidrReq(SidrReq),
    /// ServiceIDResolutionResponse.
    SidrRep(SidrRep),
}

impl CmMsg {
    /// The attribute id of the message.
    pub const fn attr_id(&self) -> AttrId {
        match self {
            Self::Req(_) => AttrId::Req,
            Self::Mra(_) => AttrId::Mra,
            Self::Rej(_) => AttrId::Rej,
            Self::Rep(_) => AttrId::Rep,
            Self::Rtu(_) => AttrId::Rtu,
            Self::Dreq(_) => AttrId::Dreq,
            Self::Drep(_) => AttrId::Drep,
            Self::SidrReq(_) => AttrId::SidrReq,
            Self::SidrRep(_) => AttrId::SidrRep,
        }
    }
}

/// A CM MAD: header and message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmMad {
    /// The common header.
    pub hdr: MadHeader,
    /// The attribute.
    pub msg: CmMsg,
}

impl CmMad {
    /// A message with the header Linux puts on CM messages and `tid`.
    pub const fn new(tid: u64, msg: CmMsg) -> Self {
        Self { hdr: MadHeader::cm(msg.attr_id(), tid), msg }
    }

    /// Encodes into `out` (all 256 bytes written; reserved bytes zero).
    /// The header's attribute id is taken from the message.
    pub fn encode(&self, out: &mut [u8; MAD_SIZE]) -> Result<(), MadError> {
        let mut b = [0u8; MAD_SIZE];
        let mut hdr = self.hdr;
        hdr.attr_id = self.msg.attr_id() as u16;
        hdr.write(&mut b);
        let mut w = Wr(&mut b);
        match &self.msg {
            CmMsg::Req(x) => x.write(&mut w)?,
            CmMsg::Mra(x) => x.write(&mut w)?,
            CmMsg::Rej(x) => x.write(&mut w)?,
            CmMsg::Rep(x) => x.write(&mut w)?,
            CmMsg::Rtu(x) => {
                w.u32(m(0), x.local_comm_id);
                w.u32(m(4), x.remote_comm_id);
                w.bytes(m(8), &x.private_data);
            }
            CmMsg::Dreq(x) => {
                fit(x.remote_qpn.into(), 24, "remote QPN")?;
                w.u32(m(0), x.local_comm_id);
                w.u32(m(4), x.remote_comm_id);
                w.u24(m(8), x.remote_qpn);
                w.bytes(m(12), &x.private_data);
            }
            CmMsg::Drep(x) => {
                w.u32(m(0), x.local_comm_id);
                w.u32(m(4), x.remote_comm_id);
                w.bytes(m(8), &x.private_data);
            }
            CmMsg::SidrReq(x) => {
                w.u32(m(0), x.request_id);
                w.u16(m(4), x.pkey);
                w.u64(m(8), x.service_id);
                w.bytes(m(16), &x.private_data);
            }
            CmMsg::SidrRep(x) => x.write(&mut w)?,
        }
        *out = b;
        Ok(())
    }

    /// Decodes a received MAD. Refuses what Linux's CM agent never sees
    /// (base version ≠ 1, class ≠ CM, class version ≠ 2, method ≠ Send:
    /// cm.c `cm_add_one` registers for exactly those) and attributes other
    /// than the nine; reserved bits are ignored as Linux ignores them.
    pub fn decode(buf: &[u8]) -> Result<Self, MadError> {
        let b: &[u8; MAD_SIZE] = buf.try_into().map_err(|_| MadError::Length(buf.len()))?;
        let hdr = MadHeader::read(b);
        if hdr.base_version != BASE_VERSION {
            return Err(MadError::BaseVersion(hdr.base_version));
        }
        if hdr.mgmt_class != MGMT_CLASS_CM {
            return Err(MadError::Class(hdr.mgmt_class));
        }
        if hdr.class_version != CM_CLASS_VERSION {
            return Err(MadError::ClassVersion(hdr.class_version));
        }
        if hdr.method != METHOD_SEND {
            return Err(MadError::Method(hdr.method));
        }
        let attr = AttrId::from_u16(hdr.attr_id).ok_or(MadError::Attribute(hdr.attr_id))?;
        let r = Rd(b);
        let ids = (r.u32(m(0)), r.u32(m(4)));
        let msg = match attr {
            AttrId::Req => CmMsg::Req(Req::read(&r)),
            AttrId::Mra => CmMsg::Mra(Mra::read(&r, ids)),
            AttrId::Rej => CmMsg::Rej(Rej::read(&r, ids)),
            AttrId::Rep => CmMsg::Rep(Rep::read(&r, ids)),
            AttrId::Rtu => CmMsg::Rtu(Rtu {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                private_data: r.arr(m(8)),
            }),
            AttrId::Dreq => CmMsg::Dreq(Dreq {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                remote_qpn: r.u24(m(8)),
                private_data: r.arr(m(12)),
            }),
            AttrId::Drep => CmMsg::Drep(Drep {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                private_data: r.arr(m(8)),
            }),
            AttrId::SidrReq => CmMsg::SidrReq(SidrReq {
                request_id: ids.0,
                pkey: r.u16(m(4)),
                service_id: r.u64(m(8)),
                private_data: r.arr(m(16)),
            }),
            AttrId::SidrRep => CmMsg::SidrRep(SidrRep::read(&r, ids)),
        };
        Ok(Self { hdr, msg })
    }
}
