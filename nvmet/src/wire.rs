//! Capsule formats (spec `nvme-rdma-target.md` §2, §4): the 64-byte SQE,
//! its SGL descriptor, the 16-byte CQE, NVMe status values, and the Fabrics
//! Connect / Property Get / Property Set fields.
//!
//! Every decoder takes `&[u8]` and returns a typed result; nothing here
//! indexes out of bounds or panics, whatever the bytes. All structures are
//! little-endian (spec preamble).

use crate::Keyed;

/// Bytes of a submission queue entry (spec §2.1, B §4.1.1).
pub const SQE_LEN: usize = 64;
/// Bytes of a completion queue entry (spec §2.2: responses are always 16 B).
pub const CQE_LEN: usize = 16;
/// Bytes of the Fabrics Connect data (spec §4.1, `struct nvmf_connect_data`).
pub const CONNECT_DATA_LEN: usize = 1024;

/// Little-endian u16 at `off`, 0 when out of range.
pub fn le16(b: &[u8], off: usize) -> u16 {
    match b.get(off..off.wrapping_add(2)) {
        Some(&[x, y]) => u16::from_le_bytes([x, y]),
        _ => 0,
    }
}

/// Little-endian u32 at `off`, 0 when out of range.
pub fn le32(b: &[u8], off: usize) -> u32 {
    match b.get(off..off.wrapping_add(4)) {
        Some(&[a, b1, c, d]) => u32::from_le_bytes([a, b1, c, d]),
        _ => 0,
    }
}

/// Little-endian u64 at `off`, 0 when out of range.
pub fn le64(b: &[u8], off: usize) -> u64 {
    u64::from(le32(b, off)) | (u64::from(le32(b, off.wrapping_add(4))) << 32)
}

/// Stores `v` little-endian at `off`; nothing when out of range.
pub fn put16(b: &mut [u8], off: usize, v: u16) {
    if let Some(d) = b.get_mut(off..off.wrapping_add(2)) {
        d.copy_from_slice(&v.to_le_bytes());
    }
}

/// Stores `v` little-endian at `off`; nothing when out of range.
pub fn put32(b: &mut [u8], off: usize, v: u32) {
    if let Some(d) = b.get_mut(off..off.wrapping_add(4)) {
        d.copy_from_slice(&v.to_le_bytes());
    }
}

/// Stores `v` little-endian at `off`; nothing when out of range.
pub fn put64(b: &mut [u8], off: usize, v: u64) {
    if let Some(d) = b.get_mut(off..off.wrapping_add(8)) {
        d.copy_from_slice(&v.to_le_bytes());
    }
}

/// Copies `src` to `off`, then `pad` up to `field` bytes (truncating `src`
/// to the field); nothing when the field is out of range.
pub fn put_str(b: &mut [u8], off: usize, field: usize, src: &[u8], pad: u8) {
    if let Some(d) = b.get_mut(off..off.wrapping_add(field)) {
        for (i, x) in d.iter_mut().enumerate() {
            *x = src.get(i).copied().unwrap_or(pad);
        }
    }
}

/// An NVMe status in Linux's down-shifted form (spec §2.2: SC 7:0,
/// SCT 10:8, CRD 12:11, MORE 0x2000, DNR 0x4000, `nvme.h`); on the wire
/// it is shifted left by one with the phase bit 0 (`t/core.c:
/// nvmet_set_error`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Status(pub u16);

impl Status {
    const DNR: u16 = 0x4000;

    /// Successful completion.
    pub const SUCCESS: Status = Status(0);
    /// SCT 0 / 0x01 Invalid Command Opcode, DNR (spec §7).
    pub const INVALID_OPCODE: Status = Status::dnr(0, 0x01);
    /// SCT 0 / 0x02 Invalid Field in Command, DNR.
    pub const INVALID_FIELD: Status = Status::dnr(0, 0x02);
    /// SCT 0 / 0x04 Data Transfer Error (retryable: no DNR).
    pub const DATA_XFER_ERROR: Status = Status(0x04);
    /// SCT 0 / 0x06 Internal Error, DNR.
    pub const INTERNAL: Status = Status::dnr(0, 0x06);
    /// SCT 0 / 0x0B Invalid Namespace or Format, DNR.
    pub const INVALID_NS: Status = Status::dnr(0, 0x0B);
    /// SCT 0 / 0x0C Command Sequence Error, DNR.
    pub const CMD_SEQ_ERROR: Status = Status::dnr(0, 0x0C);
    /// SCT 0 / 0x0F Data SGL Length Invalid, DNR.
    pub const SGL_LENGTH_INVALID: Status = Status::dnr(0, 0x0F);
    /// SCT 0 / 0x11 SGL Descriptor Type Invalid, DNR.
    pub const SGL_TYPE_INVALID: Status = Status::dnr(0, 0x11);
    /// SCT 0 / 0x16 SGL Offset Invalid, DNR.
    pub const SGL_OFFSET_INVALID: Status = Status::dnr(0, 0x16);
    /// SCT 0 / 0x1A Keep Alive Timeout Invalid, DNR.
    pub const KATO_INVALID: Status = Status::dnr(0, 0x1A);
    /// SCT 0 / 0x80 LBA Out of Range, DNR.
    pub const LBA_RANGE: Status = Status::dnr(0, 0x80);
    /// SCT 1 / 0x05 Asynchronous Event Request Limit Exceeded, DNR.
    pub const AER_LIMIT: Status = Status::dnr(1, 0x05);
    /// SCT 1 / 0x80 Connect Incompatible Format, DNR (spec §4.1).
    pub const CONNECT_FORMAT: Status = Status::dnr(1, 0x80);
    /// SCT 1 / 0x81 Connect Controller Busy, DNR.
    pub const CONNECT_BUSY: Status = Status::dnr(1, 0x81);
    /// SCT 1 / 0x82 Connect Invalid Parameters, DNR (DW0 = IATTR | offset).
    pub const CONNECT_INVALID_PARAM: Status = Status::dnr(1, 0x82);
    /// SCT 1 / 0x84 Connect Invalid Host, DNR.
    pub const CONNECT_INVALID_HOST: Status = Status::dnr(1, 0x84);

    /// SCT `sct`, SC `sc`, with DNR.
    pub const fn dnr(sct: u8, sc: u8) -> Status {
        Status(Self::DNR | ((sct as u16 & 7) << 8) | sc as u16)
    }
    /// Status Code Type.
    pub const fn sct(self) -> u8 {
        ((self.0 >> 8) & 7) as u8
    }
    /// Status Code.
    pub const fn sc(self) -> u8 {
        self.0 as u8
    }
    /// Do Not Retry.
    pub const fn is_dnr(self) -> bool {
        self.0 & Self::DNR != 0
    }
    /// Whether this is success.
    pub const fn is_ok(self) -> bool {
        self.0 == 0
    }
    /// The CQE's 16-bit STATUS field: `status << 1`, P = 0 (spec §2.2).
    pub const fn wire(self) -> u16 {
        self.0 << 1
    }
    /// The status from a CQE's STATUS field (the phase bit dropped).
    pub const fn from_wire(w: u16) -> Status {
        Status(w >> 1)
    }
}

/// Encodes a CQE (spec §2.2: DW0–1 @0, SQHD @8, SQID @10, CID @12,
/// STATUS @14).
pub fn cqe(result: u64, sqhd: u16, sqid: u16, cid: u16, status: Status) -> [u8; CQE_LEN] {
    let mut c = [0u8; CQE_LEN];
    put64(&mut c, 0, result);
    put16(&mut c, 8, sqhd);
    put16(&mut c, 10, sqid);
    put16(&mut c, 12, cid);
    put16(&mut c, 14, status.wire());
    c
}

/// A decoded CQE (for tests and tools).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe {
    /// DW0–DW1.
    pub result: u64,
    /// SQ head pointer.
    pub sqhd: u16,
    /// SQ identifier.
    pub sqid: u16,
    /// Command identifier.
    pub cid: u16,
    /// Status (phase bit dropped).
    pub status: Status,
}

impl Cqe {
    /// Decodes the 16 bytes of a CQE.
    pub fn decode(c: &[u8; CQE_LEN]) -> Cqe {
        Cqe {
            result: le64(c, 0),
            sqhd: le16(c, 8),
            sqid: le16(c, 10),
            cid: le16(c, 12),
            status: Status::from_wire(le16(c, 14)),
        }
    }
}

/// The data pointer of a command: one SGL descriptor (spec §2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sgl {
    /// Keyed Data Block (type 4, subtype 0 or 0xF): host memory.
    Keyed(Keyed),
    /// Data Block with the Offset subtype (0x01): in-capsule data at
    /// `off` from the end of the SQE (ICDOFF 0).
    InCapsule {
        /// Offset into the in-capsule data.
        off: u64,
        /// Length in bytes.
        len: u32,
    },
}

impl Sgl {
    /// Bytes the descriptor describes (keyed length 0 = no data).
    pub fn len(&self) -> u32 {
        match *self {
            Sgl::Keyed(k) => k.len,
            Sgl::InCapsule { len, .. } => len,
        }
    }
    /// Whether it describes no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Decodes a 16-byte SGL descriptor as `t/rdma.c: nvmet_rdma_map_sgl`
/// does (spec §2.3): byte 15 = type<<4 | subtype; 0x40 / 0x4F keyed
/// (address @0, 24-bit length @8, key @11); 0x01 in-capsule offset
/// (offset @0, u32 length @8); other subtypes of types 0 and 4 → Invalid
/// Field; any other type → SGL Descriptor Type Invalid (0x11); all DNR.
/// A descriptor shorter than 16 bytes is an Invalid Field.
pub fn decode_sgl(d: &[u8]) -> Result<Sgl, Status> {
    if d.len() < 16 {
        return Err(Status::INVALID_FIELD);
    }
    let t = d[15];
    match (t >> 4, t & 0xF) {
        (4, sub @ (0x0 | 0xF)) => Ok(Sgl::Keyed(Keyed {
            addr: le64(d, 0),
            len: le32(d, 8) & 0x00FF_FFFF,
            key: le32(d, 11),
            invalidate: sub == 0xF,
        })),
        (0, 0x1) => Ok(Sgl::InCapsule { off: le64(d, 0), len: le32(d, 8) }),
        (0 | 4, _) => Err(Status::INVALID_FIELD),
        _ => Err(Status::SGL_TYPE_INVALID),
    }
}

/// Encodes a keyed descriptor (the host side; for tests and tools).
pub fn keyed_sgl(k: Keyed) -> [u8; 16] {
    let mut d = [0u8; 16];
    put64(&mut d, 0, k.addr);
    put32(&mut d, 8, k.len & 0x00FF_FFFF);
    put32(&mut d, 11, k.key);
    d[15] = if k.invalidate { 0x4F } else { 0x40 };
    d
}

/// Encodes an in-capsule (Data Block, Offset) descriptor.
pub fn incapsule_sgl(off: u64, len: u32) -> [u8; 16] {
    let mut d = [0u8; 16];
    put64(&mut d, 0, off);
    put32(&mut d, 8, len);
    d[15] = 0x01;
    d
}

/// Why a capsule is no SQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Short {
    /// The command identifier, when at least its 4 bytes arrived.
    pub cid: Option<u16>,
}

/// A view of a 64-byte SQE (spec §2.1).
#[derive(Clone, Copy, Debug)]
pub struct Sqe<'a>(&'a [u8; SQE_LEN]);

/// Fabrics command type (SQE byte 4 of opcode 0x7F; spec §2.1).
pub mod fctype {
    /// Property Set.
    pub const PROPERTY_SET: u8 = 0x00;
    /// Connect.
    pub const CONNECT: u8 = 0x01;
    /// Property Get.
    pub const PROPERTY_GET: u8 = 0x04;
}

/// Opcodes (spec §2.1, §5, §7; `nvme.h`).
pub mod opc {
    /// NVM Flush.
    pub const FLUSH: u8 = 0x00;
    /// NVM Write.
    pub const WRITE: u8 = 0x01;
    /// NVM Read.
    pub const READ: u8 = 0x02;
    /// NVM Write Zeroes.
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Admin Get Log Page.
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Admin Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Admin Abort.
    pub const ABORT: u8 = 0x08;
    /// Admin Set Features.
    pub const SET_FEATURES: u8 = 0x09;
    /// Admin Get Features.
    pub const GET_FEATURES: u8 = 0x0A;
    /// Admin Asynchronous Event Request.
    pub const AER: u8 = 0x0C;
    /// Admin Keep Alive.
    pub const KEEP_ALIVE: u8 = 0x18;
    /// Fabrics.
    pub const FABRICS: u8 = 0x7F;
}

impl<'a> Sqe<'a> {
    /// The SQE at the start of a capsule; `Err` when fewer than 64 bytes
    /// arrived (with the CID when 4 did).
    pub fn parse(capsule: &'a [u8]) -> Result<Sqe<'a>, Short> {
        match capsule.first_chunk::<SQE_LEN>() {
            Some(s) => Ok(Sqe(s)),
            None => Err(Short { cid: (capsule.len() >= 4).then(|| le16(capsule, 2)) }),
        }
    }
    /// The raw 64 bytes.
    pub fn bytes(&self) -> &'a [u8; SQE_LEN] {
        self.0
    }
    /// Opcode.
    pub fn opc(&self) -> u8 {
        self.0[0]
    }
    /// FUSE (FLAGS 1:0).
    pub fn fuse(&self) -> u8 {
        self.0[1] & 3
    }
    /// PSDT (FLAGS 7:6): 01b = SGL (the only value the target accepts).
    pub fn psdt(&self) -> u8 {
        self.0[1] >> 6
    }
    /// Command identifier.
    pub fn cid(&self) -> u16 {
        le16(self.0, 2)
    }
    /// Namespace identifier.
    pub fn nsid(&self) -> u32 {
        le32(self.0, 4)
    }
    /// Fabrics command type (byte 4, opcode 0x7F only).
    pub fn fctype(&self) -> u8 {
        self.0[4]
    }
    /// Command dword `n` (10..=15; other values give 0).
    pub fn cdw(&self, n: usize) -> u32 {
        if (10..=15).contains(&n) { le32(self.0, 40 + 4 * (n - 10)) } else { 0 }
    }
    /// Byte at offset `off` of the SQE (0 out of range).
    pub fn byte(&self, off: usize) -> u8 {
        self.0.get(off).copied().unwrap_or(0)
    }
    /// u16 at offset `off`.
    pub fn u16_at(&self, off: usize) -> u16 {
        le16(self.0, off)
    }
    /// u32 at offset `off`.
    pub fn u32_at(&self, off: usize) -> u32 {
        le32(self.0, off)
    }
    /// u64 at offset `off`.
    pub fn u64_at(&self, off: usize) -> u64 {
        le64(self.0, off)
    }
    /// SGL1 (bytes 24..40), decoded.
    pub fn sgl(&self) -> Result<Sgl, Status> {
        decode_sgl(&self.0[24..40])
    }
}

/// The SQE fields of a Fabrics Connect (spec §4.1, `struct
/// nvmf_connect_command`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connect {
    /// Record format (must be 0).
    pub recfmt: u16,
    /// Queue identifier (0 = admin).
    pub qid: u16,
    /// Submission queue size, 0's based.
    pub sqsize: u16,
    /// Connect attributes: bit 2 disables SQ flow control.
    pub cattr: u8,
    /// Keep-alive timeout in ms.
    pub kato: u32,
}

/// SQE offsets of the Connect fields (spec §4.1).
pub mod connect_off {
    /// RECFMT.
    pub const RECFMT: u16 = 40;
    /// QID.
    pub const QID: u16 = 42;
    /// SQSIZE.
    pub const SQSIZE: u16 = 44;
    /// Data: CNTLID.
    pub const DATA_CNTLID: u16 = 16;
    /// Data: SUBNQN.
    pub const DATA_SUBNQN: u16 = 256;
    /// Data: HOSTNQN.
    pub const DATA_HOSTNQN: u16 = 512;
}

impl Connect {
    /// The Connect fields of an SQE.
    pub fn of(s: &Sqe<'_>) -> Connect {
        Connect {
            recfmt: s.u16_at(40),
            qid: s.u16_at(42),
            sqsize: s.u16_at(44),
            cattr: s.byte(46),
            kato: s.u32_at(48),
        }
    }
}

/// The 1024-byte Connect data (spec §4.1, `struct nvmf_connect_data`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectData<'a> {
    /// Host identifier (UUID).
    pub hostid: [u8; 16],
    /// Controller ID: 0xFFFF (dynamic) on the admin queue.
    pub cntlid: u16,
    /// Subsystem NQN, up to its first NUL (≤ 256 bytes).
    pub subnqn: &'a [u8],
    /// Host NQN, up to its first NUL (≤ 256 bytes).
    pub hostnqn: &'a [u8],
}

fn nul_terminated(b: &[u8]) -> &[u8] {
    match b.iter().position(|&x| x == 0) {
        Some(n) => &b[..n],
        None => b,
    }
}

impl<'a> ConnectData<'a> {
    /// Decodes the data; `None` when fewer than 1024 bytes are given.
    pub fn parse(d: &'a [u8]) -> Option<ConnectData<'a>> {
        let d = d.get(..CONNECT_DATA_LEN)?;
        let mut hostid = [0u8; 16];
        hostid.copy_from_slice(&d[..16]);
        Some(ConnectData {
            hostid,
            cntlid: le16(d, 16),
            subnqn: nul_terminated(&d[256..512]),
            hostnqn: nul_terminated(&d[512..768]),
        })
    }
}

/// Property Get / Set fields (spec §4.2: ATTRIB @40, OFST @44, VALUE @48).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Property {
    /// ATTRIB 2:0 = 1: an 8-byte property (else 4 bytes).
    pub eight: bool,
    /// Property offset.
    pub ofst: u32,
    /// Value (Property Set).
    pub value: u64,
}

impl Property {
    /// The Property fields of an SQE.
    pub fn of(s: &Sqe<'_>) -> Property {
        Property { eight: s.byte(40) & 7 == 1, ofst: s.u32_at(44), value: s.u64_at(48) }
    }
}

/// Property offsets (spec §4.2; B §3.1.4).
pub mod prop {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version.
    pub const VS: u32 = 0x08;
    /// Controller Configuration.
    pub const CC: u32 = 0x14;
    /// Controller Status.
    pub const CSTS: u32 = 0x1C;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sgl_decode_follows_the_table() {
        let k = Keyed {
            addr: 0x1122_3344_5566_7788,
            len: 0x00AB_CDEF,
            key: 0xDEAD_BEEF,
            invalidate: true,
        };
        assert_eq!(decode_sgl(&keyed_sgl(k)), Ok(Sgl::Keyed(k)));
        let k0 = Keyed { invalidate: false, ..k };
        assert_eq!(decode_sgl(&keyed_sgl(k0)), Ok(Sgl::Keyed(k0)));
        assert_eq!(decode_sgl(&incapsule_sgl(16, 512)), Ok(Sgl::InCapsule { off: 16, len: 512 }));
        let mut d = [0u8; 16];
        for t in 0..=255u8 {
            d[15] = t;
            let r = decode_sgl(&d);
            match t {
                0x40 | 0x4F | 0x01 => assert!(r.is_ok()),
                0x00..=0x0F | 0x40..=0x4F => assert_eq!(r, Err(Status(0x4002)), "{t:#x}"),
                _ => assert_eq!(r, Err(Status(0x4011)), "{t:#x}"),
            }
        }
        assert_eq!(decode_sgl(&d[..15]), Err(Status::INVALID_FIELD));
    }

    #[test]
    fn keyed_length_is_24_bits_and_key_at_11() {
        let mut d = [0u8; 16];
        d[8..16].copy_from_slice(&[0x01, 0x02, 0x03, 0xAA, 0xBB, 0xCC, 0xDD, 0x4F]);
        let Ok(Sgl::Keyed(k)) = decode_sgl(&d) else { panic!() };
        assert_eq!(k.len, 0x03_0201);
        assert_eq!(k.key, 0xDDCC_BBAA);
    }

    #[test]
    fn cqe_layout_and_status_shift() {
        let c = cqe(0x0102_0304_0506_0708, 0x1112, 0x2122, 0x3132, Status::CONNECT_INVALID_PARAM);
        assert_eq!(&c[..8], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&c[8..14], &[0x12, 0x11, 0x22, 0x21, 0x32, 0x31]);
        // SCT 1, SC 0x82, DNR: 0x4182 << 1 = 0x8304, phase bit 0.
        assert_eq!(le16(&c, 14), 0x8304);
        assert_eq!(Cqe::decode(&c).status, Status::CONNECT_INVALID_PARAM);
    }

    #[test]
    fn short_capsules() {
        assert_eq!(Sqe::parse(&[1, 2, 3]).err(), Some(Short { cid: None }));
        assert_eq!(Sqe::parse(&[1, 2, 0x34, 0x12, 9]).err(), Some(Short { cid: Some(0x1234) }));
        assert!(Sqe::parse(&[0; 64]).is_ok());
    }

    #[test]
    fn connect_data_fields() {
        let mut d = [0u8; 1024];
        d[0] = 7;
        put16(&mut d, 16, 0xFFFF);
        d[256..259].copy_from_slice(b"abc");
        d[512..768].fill(b'h');
        let c = ConnectData::parse(&d).unwrap();
        assert_eq!(
            (c.hostid[0], c.cntlid, c.subnqn, c.hostnqn.len()),
            (7, 0xFFFF, &b"abc"[..], 256)
        );
        assert!(ConnectData::parse(&d[..1023]).is_none());
    }
}
