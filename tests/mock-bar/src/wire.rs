//! RoCEv2 frames: building them from a QP context, parsing and checking
//! them on receive, the ICRC, and a classic-pcap [`Capture`].
//!
//! Source: `shared/spec/rocev2-wire.md` (cited as "wire §n" below).
//! Every field of a frame the model sends comes from the QP context the
//! driver wrote (wire §1.9) or from a fixed value the sheet gives; where the
//! sheet says the value is not driver-visible (IPv4 ID, DF, UDP checksum,
//! RNR timer) the model's choice is documented at the place it is made.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// UDP destination port of RoCEv2 (wire §1.5).
pub const ROCE_PORT: u16 = 4791;

/// BTH opcodes (wire §2, values of include/rdma/ib_pack.h).
#[allow(missing_docs)]
pub mod op {
    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_MIDDLE: u8 = 0x01;
    pub const SEND_LAST: u8 = 0x02;
    pub const SEND_LAST_IMM: u8 = 0x03;
    pub const SEND_ONLY: u8 = 0x04;
    pub const SEND_ONLY_IMM: u8 = 0x05;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const WRITE_MIDDLE: u8 = 0x07;
    pub const WRITE_LAST: u8 = 0x08;
    pub const WRITE_LAST_IMM: u8 = 0x09;
    pub const WRITE_ONLY: u8 = 0x0A;
    pub const WRITE_ONLY_IMM: u8 = 0x0B;
    pub const READ_REQ: u8 = 0x0C;
    pub const READ_RESP_FIRST: u8 = 0x0D;
    pub const READ_RESP_MIDDLE: u8 = 0x0E;
    pub const READ_RESP_LAST: u8 = 0x0F;
    pub const READ_RESP_ONLY: u8 = 0x10;
    pub const ACK: u8 = 0x11;
    pub const SEND_LAST_INV: u8 = 0x16;
    pub const SEND_ONLY_INV: u8 = 0x17;
    /// UD SEND Only (wire §2, §5.1).
    pub const UD_SEND_ONLY: u8 = 0x64;
    /// UD SEND Only with Immediate.
    pub const UD_SEND_ONLY_IMM: u8 = 0x65;
}

/// Whether an opcode carries a DETH (UD transport, wire §2: 0x64/0x65).
pub fn has_deth(opcode: u8) -> bool {
    matches!(opcode, op::UD_SEND_ONLY | op::UD_SEND_ONLY_IMM)
}

/// AETH syndromes (wire §4.4).
#[allow(missing_docs)]
pub mod syndrome {
    /// ACK with "invalid credit count" (wire §4.3: the safe choice).
    pub const ACK: u8 = 0x1F;
    /// RNR NAK with timer code 14 = 1.28 ms: E810's own value is not
    /// driver-visible (wire §1.9), so this is a model choice.
    pub const RNR_NAK: u8 = 0x20 | 14;
    pub const NAK_PSN_SEQ: u8 = 0x60;
    pub const NAK_INVALID: u8 = 0x61;
    pub const NAK_ACCESS: u8 = 0x62;
    pub const NAK_OP: u8 = 0x63;
}

/// Which extended headers an opcode carries: (RETH, AETH, ImmDt, IETH)
/// (wire §2, RXE rxe_opcode.c).
pub fn ext_headers(opcode: u8) -> Option<(bool, bool, bool, bool)> {
    use op::*;
    Some(match opcode {
        SEND_FIRST | SEND_MIDDLE | SEND_LAST | SEND_ONLY | WRITE_MIDDLE | WRITE_LAST
        | READ_RESP_MIDDLE | UD_SEND_ONLY => (false, false, false, false),
        SEND_LAST_IMM | SEND_ONLY_IMM | WRITE_LAST_IMM | UD_SEND_ONLY_IMM => {
            (false, false, true, false)
        }
        WRITE_FIRST | WRITE_ONLY | READ_REQ => (true, false, false, false),
        WRITE_ONLY_IMM => (true, false, true, false),
        READ_RESP_FIRST | READ_RESP_LAST | READ_RESP_ONLY | ACK => (false, true, false, false),
        SEND_LAST_INV | SEND_ONLY_INV => (false, false, false, true),
        _ => return None,
    })
}

/// The per-QP fields that put a frame on the wire (wire §1.9).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Path {
    /// Source MAC: MACADDRESS @152 [63:16].
    pub src_mac: [u8; 6],
    /// Destination MAC: the ARP entry at ARPIDX @48 [63:48].
    pub dst_mac: [u8; 6],
    /// 802.1Q TCI when INSERTVLANTAG @0 [5] is set: VLANTAG @48 [47:32].
    pub vlan: Option<u16>,
    /// IPV4 @0 [3].
    pub ipv4: bool,
    /// TOS / traffic class @24 [31:24] (DSCP [7:2], ECN [1:0]).
    pub tos: u8,
    /// TTL / hop limit @24 [7:0].
    pub ttl: u8,
    /// FLOWLABEL @56 [19:0].
    pub flow_label: u32,
    /// LOCAL_IPADDR0..3 (word 0 most significant; IPv4 in word 3).
    pub src_ip: [u32; 4],
    /// DESTIPADDR0..3.
    pub dst_ip: [u32; 4],
    /// SRCPORTNUM @24 [47:32].
    pub sport: u16,
    /// DESTPORTNUM @24 [63:48].
    pub dport: u16,
    /// PKEY @56 [47:32].
    pub pkey: u16,
    /// ROCE_TVER @0 [63:60].
    pub tver: u8,
}

impl Path {
    /// The same path seen from the other end (for replies built from the
    /// answering QP's own context this is not used; kept for tests).
    pub fn reversed(&self) -> Self {
        Self {
            src_mac: self.dst_mac,
            dst_mac: self.src_mac,
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            ..self.clone()
        }
    }
}

/// One transport packet (BTH + extended headers + payload).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Packet {
    /// BTH opcode.
    pub opcode: u8,
    /// Solicited event.
    pub se: bool,
    /// MigReq (rxe sends 0, wire §1.6).
    pub m: bool,
    /// DestQP (24 bits).
    pub dest_qp: u32,
    /// AckReq.
    pub ack_req: bool,
    /// PSN (24 bits).
    pub psn: u32,
    /// RETH: VA, R_Key, DMA length.
    pub reth: Option<(u64, u32, u32)>,
    /// AETH: syndrome, MSN.
    pub aeth: Option<(u8, u32)>,
    /// ImmDt (network order on the wire).
    pub imm: Option<u32>,
    /// IETH: R_Key to invalidate.
    pub ieth: Option<u32>,
    /// DETH (UD, wire §1.7 / §5.1): Q_Key, source QPN.
    pub deth: Option<(u32, u32)>,
    /// Payload (without pad).
    pub payload: Vec<u8>,
}

/// Byte-wise table of the reflected polynomial 0xEDB88320.
const CRC_TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0xEDB8_8320 } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// The CRC-32 of Ethernet/zlib (wire §3.2): reflected polynomial
/// 0xEDB88320, initial value and final XOR 0xFFFFFFFF.
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in data {
        c = (c >> 8) ^ CRC_TABLE[((c ^ b as u32) & 0xFF) as usize];
    }
    !c
}

/// Offset of the IP header in an Ethernet frame (wire §1.1).
fn ip_offset(frame: &[u8]) -> Option<usize> {
    let et = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    Some(if et == 0x8100 { 18 } else { 14 })
}

/// The ICRC of a frame whose last 4 bytes are the ICRC (wire §3.1, §3.2):
/// CRC-32 over 8 × 0xFF and a masked copy of IP … pad.
pub fn icrc(frame: &[u8]) -> Option<u32> {
    let ip = ip_offset(frame)?;
    let end = frame.len().checked_sub(4)?;
    let mut m = vec![0xFFu8; 8];
    m.extend_from_slice(frame.get(ip..end)?);
    let b = 8; // start of the IP header in `m`
    let v4 = (m.get(b)? >> 4) == 4;
    let (udp, bth) = if v4 { (b + 20, b + 28) } else { (b + 40, b + 48) };
    if m.len() < bth + 12 {
        return None;
    }
    if v4 {
        // TOS, TTL, header checksum
        m[b + 1] = 0xFF;
        m[b + 8] = 0xFF;
        m[b + 10] = 0xFF;
        m[b + 11] = 0xFF;
    } else {
        // traffic class + flow label, hop limit
        m[b] |= 0x0F;
        m[b + 1] = 0xFF;
        m[b + 2] = 0xFF;
        m[b + 3] = 0xFF;
        m[b + 7] = 0xFF;
    }
    m[udp + 6] = 0xFF;
    m[udp + 7] = 0xFF;
    m[bth + 4] = 0xFF;
    Some(crc32(&m))
}

fn ip_checksum(words: &[u8]) -> u16 {
    let mut s = 0u32;
    for c in words.chunks(2) {
        s += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
    }
    while s >> 16 != 0 {
        s = (s & 0xFFFF) + (s >> 16);
    }
    !(s as u16)
}

fn ip_bytes(w: &[u32; 4], v4: bool) -> Vec<u8> {
    if v4 { w[3].to_be_bytes().to_vec() } else { w.iter().flat_map(|x| x.to_be_bytes()).collect() }
}

/// Builds the Ethernet frame of `p` on `path` with IPv4 identification
/// `ip_id` (wire §1.1–§1.8, ICRC §3, IPv6 UDP checksum §1.5).
pub fn build(path: &Path, p: &Packet, ip_id: u16) -> Vec<u8> {
    let t = transport(path, p);
    let udp_len = 8 + t.len();
    let mut f = Vec::with_capacity(62 + t.len());
    // Ethernet / 802.1Q (wire §1.2)
    f.extend_from_slice(&path.dst_mac);
    f.extend_from_slice(&path.src_mac);
    if let Some(tci) = path.vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&tci.to_be_bytes());
    }
    let ip = push_ip_header(&mut f, path, udp_len, ip_id);
    // UDP (wire §1.5): checksum 0 on IPv4; on IPv6 computed after the ICRC
    let udp = f.len();
    f.extend_from_slice(&path.sport.to_be_bytes());
    f.extend_from_slice(&path.dport.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&t);
    seal(&mut f, ip, udp, path.ipv4);
    f
}

/// [`build`]: the transport part of `p`'s frame, BTH to ICRC (the ICRC a
/// placeholder [`seal`] fills).
fn transport(path: &Path, p: &Packet) -> Vec<u8> {
    let (reth, aeth, immh, iethh) = ext_headers(p.opcode).unwrap_or_default();
    // wire §1.8: pad to a multiple of 4
    let pad = (4 - p.payload.len() % 4) % 4;
    let mut t = Vec::with_capacity(64 + p.payload.len());
    // BTH (wire §1.6)
    t.push(p.opcode);
    t.push((p.se as u8) << 7 | (p.m as u8) << 6 | (pad as u8) << 4 | (path.tver & 0xF));
    t.extend_from_slice(&path.pkey.to_be_bytes());
    t.push(0); // FECN/BECN/reserved: 0 on transmit
    t.extend_from_slice(&(p.dest_qp & 0xFF_FFFF).to_be_bytes()[1..]);
    t.push((p.ack_req as u8) << 7);
    t.extend_from_slice(&(p.psn & 0xFF_FFFF).to_be_bytes()[1..]);
    // extended headers in rxe order (wire §1.7): DETH before ImmDt
    if has_deth(p.opcode) {
        let (qkey, sqp) = p.deth.unwrap_or_default();
        t.extend_from_slice(&qkey.to_be_bytes());
        t.extend_from_slice(&(sqp & 0xFF_FFFF).to_be_bytes());
    }
    if reth {
        let (va, rkey, len) = p.reth.unwrap_or_default();
        t.extend_from_slice(&va.to_be_bytes());
        t.extend_from_slice(&rkey.to_be_bytes());
        t.extend_from_slice(&len.to_be_bytes());
    }
    if aeth {
        let (syn, msn) = p.aeth.unwrap_or_default();
        t.push(syn);
        t.extend_from_slice(&(msn & 0xFF_FFFF).to_be_bytes()[1..]);
    }
    if immh {
        t.extend_from_slice(&p.imm.unwrap_or_default().to_be_bytes());
    }
    if iethh {
        t.extend_from_slice(&p.ieth.unwrap_or_default().to_be_bytes());
    }
    t.extend_from_slice(&p.payload);
    t.extend(std::iter::repeat_n(0u8, pad));
    t.extend_from_slice(&[0; 4]); // ICRC placeholder
    t
}

/// [`build`]: the IP header for a UDP datagram of `udp_len` bytes, after
/// its EtherType; returns where it starts in `f`.
fn push_ip_header(f: &mut Vec<u8>, path: &Path, udp_len: usize, ip_id: u16) -> usize {
    if path.ipv4 {
        f.extend_from_slice(&[0x08, 0x00]);
        let ip = f.len();
        // IPv4 (wire §1.3): no options, DF (model choice, inferred), proto 17
        f.push(0x45);
        f.push(path.tos);
        f.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
        f.extend_from_slice(&ip_id.to_be_bytes());
        f.extend_from_slice(&[0x40, 0x00, path.ttl, 17, 0, 0]);
        f.extend(ip_bytes(&path.src_ip, true));
        f.extend(ip_bytes(&path.dst_ip, true));
        let ck = ip_checksum(&f[ip..ip + 20]);
        f[ip + 10..ip + 12].copy_from_slice(&ck.to_be_bytes());
        ip
    } else {
        f.extend_from_slice(&[0x86, 0xDD]);
        let ip = f.len();
        // IPv6 (wire §1.4)
        let w0 = 6u32 << 28 | (path.tos as u32) << 20 | (path.flow_label & 0xF_FFFF);
        f.extend_from_slice(&w0.to_be_bytes());
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[17, path.ttl]);
        f.extend(ip_bytes(&path.src_ip, false));
        f.extend(ip_bytes(&path.dst_ip, false));
        ip
    }
}

/// Writes a frame's ICRC (wire §3.2: least-significant byte first) and,
/// on IPv6, its UDP checksum, computed after the ICRC (§1.5; 0 on IPv4).
/// `ip` and `udp` are the offsets of the IP and UDP headers.
fn seal(f: &mut [u8], ip: usize, udp: usize, ipv4: bool) {
    let n = f.len();
    if n < udp + 12 {
        return;
    }
    f[udp + 6..udp + 8].copy_from_slice(&[0, 0]);
    let crc = icrc(f).unwrap_or(0);
    f[n - 4..].copy_from_slice(&crc.to_le_bytes());
    if !ipv4 {
        let udp_len = n - udp;
        let mut ph = Vec::with_capacity(40 + udp_len);
        ph.extend_from_slice(&f[ip + 8..ip + 40]);
        ph.extend_from_slice(&(udp_len as u32).to_be_bytes());
        ph.extend_from_slice(&[0, 0, 0, 17]);
        ph.extend_from_slice(&f[udp..]);
        let mut ck = ip_checksum(&ph);
        if ck == 0 {
            ck = 0xFFFF;
        }
        f[udp + 6..udp + 8].copy_from_slice(&ck.to_be_bytes());
    }
}

/// Sets the AckReq bit (BTH byte 8 bit 7, wire §4.3) of a built frame and seals
/// it again (ICRC, IPv6 UDP checksum); `None` if it is not a RoCEv2 frame.
pub fn set_ack_req(f: &mut [u8]) -> Option<()> {
    let ip = ip_offset(f)?;
    let ipv4 = f.get(ip)? >> 4 == 4;
    let udp = ip + if ipv4 { 20 } else { 40 };
    let bth = udp + 8;
    *f.get_mut(bth + 8)? |= 0x80;
    if f.len() < bth + 12 + 4 {
        return None;
    }
    seal(f, ip, udp, ipv4);
    Some(())
}

/// A received frame, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// 802.1Q TCI.
    pub vlan: Option<u16>,
    /// IPv4 (else IPv6).
    pub ipv4: bool,
    /// Destination IP words (IPv4 in word 3).
    pub dst_ip: [u32; 4],
    /// Source IP words.
    pub src_ip: [u32; 4],
    /// UDP source port (receivers do not check it, wire §1.5).
    pub sport: u16,
    /// UDP destination port.
    pub dport: u16,
    /// P_Key.
    pub pkey: u16,
    /// TVer.
    pub tver: u8,
    /// The transport packet.
    pub pkt: Packet,
}

/// Why a frame was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drop {
    /// Too short, unknown EtherType/IP version/protocol, lengths wrong,
    /// unknown opcode, non-zero pad or PadCnt on a FIRST/MIDDLE packet.
    Malformed,
    /// ICRC mismatch (wire §3).
    Icrc,
    /// Destination MAC is not the receiver's.
    Mac,
    /// Destination IP is not the receiver's.
    Ip,
    /// UDP destination port is not 4791 (wire §1.5).
    Port,
    /// No such QP / not the QP's peer.
    Qp,
    /// P_Key mismatch (wire §1.6 rule).
    Pkey,
    /// TVer ≠ 0 (wire §1.6).
    Tver,
    /// PSN is not the expected one.
    Psn,
    /// UD: the DETH Q_Key is not the QP's (wire §5.1).
    Qkey,
}

/// Dropped frames by [`Drop`] reason (the model's per-reason counters,
/// read by tests: [`crate::Counters::wire_drop_reasons`] for a device,
/// [`crate::port::PortCounters::drops`] for the Ethernet port).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct DropCounts {
    pub malformed: u64,
    pub icrc: u64,
    pub mac: u64,
    pub ip: u64,
    pub port: u64,
    pub qp: u64,
    pub pkey: u64,
    pub tver: u64,
    pub psn: u64,
    pub qkey: u64,
}

impl DropCounts {
    fn slot(&mut self, why: Drop) -> &mut u64 {
        match why {
            Drop::Malformed => &mut self.malformed,
            Drop::Icrc => &mut self.icrc,
            Drop::Mac => &mut self.mac,
            Drop::Ip => &mut self.ip,
            Drop::Port => &mut self.port,
            Drop::Qp => &mut self.qp,
            Drop::Pkey => &mut self.pkey,
            Drop::Tver => &mut self.tver,
            Drop::Psn => &mut self.psn,
            Drop::Qkey => &mut self.qkey,
        }
    }

    /// Counts one drop for `why`.
    pub fn add(&mut self, why: Drop) {
        *self.slot(why) += 1;
    }

    /// The count for `why`.
    pub fn get(&self, why: Drop) -> u64 {
        *self.clone().slot(why)
    }

    /// All reasons together.
    pub fn total(&self) -> u64 {
        self.malformed
            + self.icrc
            + self.mac
            + self.ip
            + self.port
            + self.qp
            + self.pkey
            + self.tver
            + self.psn
            + self.qkey
    }
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Parses a frame and checks its lengths and ICRC (wire §1, §3).
pub fn parse(f: &[u8]) -> Result<Parsed, Drop> {
    let m = Drop::Malformed;
    let ip = ip_offset(f).ok_or(m)?;
    let vlan = (ip == 18).then(|| u16::from_be_bytes([f[14], f[15]]));
    let et = u16::from_be_bytes([*f.get(ip - 2).ok_or(m)?, *f.get(ip - 1).ok_or(m)?]);
    let ipv4 = et == 0x0800;
    let (udp, src_ip, dst_ip) = parse_ip(f, ip, et)?;
    let u = f.get(udp..udp + 8).ok_or(m)?;
    let sport = u16::from_be_bytes([u[0], u[1]]);
    let dport = u16::from_be_bytes([u[2], u[3]]);
    if u16::from_be_bytes([u[4], u[5]]) as usize != f.len() - udp {
        return Err(m);
    }
    let t = &f[udp + 8..];
    if t.len() < 16 {
        return Err(m);
    }
    let crc = icrc(f).ok_or(m)?;
    if t[t.len() - 4..] != crc.to_le_bytes() {
        return Err(Drop::Icrc);
    }
    let p = parse_transport(t)?;
    let mac = |o: usize| -> [u8; 6] { f[o..o + 6].try_into().unwrap_or_default() };
    Ok(Parsed {
        dst_mac: mac(0),
        src_mac: mac(6),
        vlan,
        ipv4,
        dst_ip,
        src_ip,
        sport,
        dport,
        pkey: u16::from_be_bytes([t[2], t[3]]),
        tver: t[1] & 0xF,
        pkt: p,
    })
}

/// [`parse`]: the IPv4 or IPv6 header at `ip` (EtherType `et`) checked;
/// where the UDP header starts, and the source and destination IPs.
fn parse_ip(f: &[u8], ip: usize, et: u16) -> Result<(usize, [u32; 4], [u32; 4]), Drop> {
    let m = Drop::Malformed;
    let (mut src_ip, mut dst_ip) = ([0u32; 4], [0u32; 4]);
    let udp = match et {
        0x0800 => {
            let h = f.get(ip..ip + 20).ok_or(m)?;
            if h[0] != 0x45 || h[9] != 17 || ip_checksum(h) != 0 {
                return Err(m);
            }
            if u16::from_be_bytes([h[2], h[3]]) as usize != f.len() - ip {
                return Err(m);
            }
            src_ip[3] = be32(h, 12).ok_or(m)?;
            dst_ip[3] = be32(h, 16).ok_or(m)?;
            ip + 20
        }
        0x86DD => {
            let h = f.get(ip..ip + 40).ok_or(m)?;
            if h[0] >> 4 != 6 || h[6] != 17 {
                return Err(m);
            }
            if u16::from_be_bytes([h[4], h[5]]) as usize != f.len() - ip - 40 {
                return Err(m);
            }
            for i in 0..4 {
                src_ip[i] = be32(h, 8 + 4 * i).ok_or(m)?;
                dst_ip[i] = be32(h, 24 + 4 * i).ok_or(m)?;
            }
            ip + 40
        }
        _ => return Err(m),
    };
    Ok((udp, src_ip, dst_ip))
}

/// [`parse`]: the packet in the transport part `t` (BTH to ICRC, the ICRC
/// already checked).
fn parse_transport(t: &[u8]) -> Result<Packet, Drop> {
    let m = Drop::Malformed;
    let opcode = t[0];
    let (reth, aeth, immh, iethh) = ext_headers(opcode).ok_or(m)?;
    let pad = ((t[1] >> 4) & 3) as usize;
    let mut at = 12;
    let mut p = Packet {
        opcode,
        se: t[1] & 0x80 != 0,
        m: t[1] & 0x40 != 0,
        dest_qp: be32(t, 4).ok_or(m)? & 0xFF_FFFF,
        ack_req: t[8] & 0x80 != 0,
        psn: be32(t, 8).ok_or(m)? & 0xFF_FFFF,
        ..Packet::default()
    };
    if has_deth(opcode) {
        let w = be32(t, at + 4).ok_or(m)?;
        // wire §1.7: byte 4 of the DETH is reserved (0)
        if w >> 24 != 0 {
            return Err(m);
        }
        p.deth = Some((be32(t, at).ok_or(m)?, w & 0xFF_FFFF));
        at += 8;
    }
    if reth {
        let va = u64::from_be_bytes(t.get(at..at + 8).ok_or(m)?.try_into().map_err(|_| m)?);
        p.reth = Some((va, be32(t, at + 8).ok_or(m)?, be32(t, at + 12).ok_or(m)?));
        at += 16;
    }
    if aeth {
        let w = be32(t, at).ok_or(m)?;
        p.aeth = Some(((w >> 24) as u8, w & 0xFF_FFFF));
        at += 4;
    }
    if immh {
        p.imm = Some(be32(t, at).ok_or(m)?);
        at += 4;
    }
    if iethh {
        p.ieth = Some(be32(t, at).ok_or(m)?);
        at += 4;
    }
    // wire §1.8: payload = rest − pad − ICRC; pad bytes are zero
    let end = t.len().checked_sub(4 + pad).ok_or(m)?;
    if end < at || t[end..t.len() - 4].iter().any(|&b| b != 0) {
        return Err(m);
    }
    p.payload = t[at..end].to_vec();
    Ok(p)
}

/// The P_Key match rule (wire §1.6, rxe `pkey_match`).
pub fn pkey_match(a: u16, b: u16) -> bool {
    a & 0x7FFF != 0 && a & 0x7FFF == b & 0x7FFF && (a | b) & 0x8000 != 0
}

/// Checks a parsed frame against the receiving QP's own path (its
/// context): destination MAC = its source MAC, destination IP = its local
/// IP (the words the IP version uses), UDP port 4791, TVer 0 and P_Key.
/// QP number and PSN are checked by the caller, which knows the QP state.
pub fn check_addressing(p: &Parsed, own: &Path) -> Result<(), Drop> {
    if p.dst_mac != own.src_mac {
        return Err(Drop::Mac);
    }
    let ip_ok =
        if p.ipv4 { own.ipv4 && p.dst_ip[3] == own.src_ip[3] } else { p.dst_ip == own.src_ip };
    if !ip_ok {
        return Err(Drop::Ip);
    }
    if p.dport != ROCE_PORT {
        return Err(Drop::Port);
    }
    if p.tver != 0 {
        return Err(Drop::Tver);
    }
    if !pkey_match(p.pkey, own.pkey) {
        return Err(Drop::Pkey);
    }
    Ok(())
}

/// Every frame put on a [`crate::Fabric`], in order; written as a classic
/// pcap file (wire §6.3: LINKTYPE_ETHERNET, no FCS).
#[derive(Clone, Debug, Default)]
pub struct Capture {
    frames: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Capture {
    /// An empty capture.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one frame.
    pub fn push(&self, f: Vec<u8>) {
        self.frames.lock().unwrap_or_else(|e| e.into_inner()).push(f);
    }

    /// The frames so far.
    pub fn frames(&self) -> Vec<Vec<u8>> {
        self.frames.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.frames.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no frame was captured.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pcap file bytes: global header (magic a1b2c3d4 little-endian,
    /// 2.4, snaplen 65535, link type 1), then a record per frame with a
    /// synthetic timestamp of one microsecond per frame.
    pub fn pcap(&self) -> Vec<u8> {
        let mut o = Vec::new();
        o.extend_from_slice(&0xA1B2_C3D4u32.to_le_bytes());
        o.extend_from_slice(&2u16.to_le_bytes());
        o.extend_from_slice(&4u16.to_le_bytes());
        o.extend_from_slice(&0i32.to_le_bytes());
        o.extend_from_slice(&0u32.to_le_bytes());
        o.extend_from_slice(&65535u32.to_le_bytes());
        o.extend_from_slice(&1u32.to_le_bytes());
        for (i, f) in self.frames().iter().enumerate() {
            o.extend_from_slice(&((i / 1_000_000) as u32).to_le_bytes());
            o.extend_from_slice(&((i % 1_000_000) as u32).to_le_bytes());
            o.extend_from_slice(&(f.len() as u32).to_le_bytes());
            o.extend_from_slice(&(f.len() as u32).to_le_bytes());
            o.extend_from_slice(f);
        }
        o
    }

    /// Writes [`Capture::pcap`] to `path`.
    pub fn write_pcap(&self, path: &std::path::Path) -> std::io::Result<()> {
        std::fs::File::create(path)?.write_all(&self.pcap())
    }
}

/// What [`check_frames`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrameCheck {
    /// Frames looked at.
    pub frames: usize,
    /// Of those, RoCEv2 (IPv4/IPv6 + UDP to 4791, with or without 802.1Q).
    pub roce: usize,
    /// RoCEv2 frames [`parse`] refused (bad ICRC, lengths, opcode).
    pub bad: usize,
    /// The first of those: index and why.
    pub first_bad: Option<(usize, Drop)>,
}

impl std::fmt::Display for FrameCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} frames, {} RoCEv2, {} with a bad ICRC or length",
            self.frames, self.roce, self.bad
        )?;
        if let Some((i, d)) = self.first_bad {
            write!(f, " (first: frame {i}, {d:?})")?;
        }
        Ok(())
    }
}

/// The capture judge of the live runs (issue #34): every RoCEv2 frame
/// (UDP destination port 4791, wire §1.5) of `frames` must [`parse`] —
/// ICRC (wire §3), IP/UDP lengths and checksums, opcode. Other frames
/// (ARP, neighbour discovery) are counted only.
pub fn check_frames(frames: &[Vec<u8>]) -> FrameCheck {
    let mut c = FrameCheck { frames: frames.len(), ..FrameCheck::default() };
    for (i, f) in frames.iter().enumerate() {
        let l3 = if f.get(12..14) == Some(&[0x81, 0x00]) { 18 } else { 14 };
        let udp = match f.get(l3 - 2..l3) {
            Some([0x08, 0x00]) if f.get(l3 + 9) == Some(&17) => l3 + 20,
            Some([0x86, 0xdd]) if f.get(l3 + 6) == Some(&17) => l3 + 40,
            _ => continue,
        };
        if f.get(udp + 2..udp + 4) != Some(&ROCE_PORT.to_be_bytes()) {
            continue;
        }
        c.roce += 1;
        if let Err(d) = parse(f) {
            c.bad += 1;
            c.first_bad.get_or_insert((i, d));
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        s.split_whitespace()
            .filter(|w| w.len() == 2)
            .map(|w| u8::from_str_radix(w, 16).unwrap())
            .collect()
    }

    fn a_b(ipv4: bool) -> Path {
        Path {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            vlan: None,
            ipv4,
            tos: 0,
            ttl: 64,
            flow_label: 0,
            src_ip: if ipv4 { [0, 0, 0, 0xC0A8_0101] } else { [0xFD00_0000, 0, 0, 1] },
            dst_ip: if ipv4 { [0, 0, 0, 0xC0A8_0102] } else { [0xFD00_0000, 0, 0, 2] },
            sport: 0xC000,
            dport: ROCE_PORT,
            pkey: 0xFFFF,
            tver: 0,
        }
    }

    // wire §3.2 check value
    #[test]
    fn crc_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    // wire §3.3 example 1
    #[test]
    fn example1_send_only_ipv4() {
        let want = hex("02 00 00 00 00 02 02 00 00 00 00 01 08 00 45 00
            00 3c 12 34 40 00 40 11 a5 29 c0 a8 01 01 c0 a8
            01 02 c0 00 12 b7 00 28 00 00 04 30 ff ff 00 00
            00 12 80 00 01 00 48 65 6c 6c 6f 20 52 6f 43 45
            76 32 21 00 00 00 ed 0a 94 b8");
        let p = Packet {
            opcode: op::SEND_ONLY,
            dest_qp: 0x12,
            ack_req: true,
            psn: 0x100,
            payload: b"Hello RoCEv2!".to_vec(),
            ..Packet::default()
        };
        let f = build(&a_b(true), &p, 0x1234);
        assert_eq!(f, want);
        assert_eq!(icrc(&f), Some(0xB894_0AED));
        assert_eq!(parse(&f).unwrap().pkt, p);
    }

    // wire §3.3 example 2
    #[test]
    fn example2_ack_ipv4() {
        let want = hex("02 00 00 00 00 01 02 00 00 00 00 02 08 00 45 00
            00 30 00 01 40 00 40 11 b7 68 c0 a8 01 02 c0 a8
            01 01 c0 00 12 b7 00 1c 00 00 11 00 ff ff 00 00
            00 11 00 00 01 00 1f 00 00 01 a2 99 f7 8d");
        let p = Packet {
            opcode: op::ACK,
            dest_qp: 0x11,
            psn: 0x100,
            aeth: Some((0x1F, 1)),
            ..Packet::default()
        };
        let f = build(&a_b(true).reversed(), &p, 1);
        assert_eq!(f, want);
        assert_eq!(parse(&f).unwrap().pkt, p);
    }

    // wire §3.3 example 3 (IPv6, UDP checksum after the ICRC)
    #[test]
    fn example3_send_only_ipv6() {
        let want = hex("02 00 00 00 00 02 02 00 00 00 00 01 86 dd 66 81
            23 45 00 28 11 40 fd 00 00 00 00 00 00 00 00 00
            00 00 00 00 00 01 fd 00 00 00 00 00 00 00 00 00
            00 00 00 00 00 02 c0 00 12 b7 00 28 c5 6d 04 00
            ff ff 00 00 00 12 80 00 02 00 66 66 66 66 66 66
            66 66 66 66 66 66 66 66 66 66 39 c0 7a 6e");
        let mut path = a_b(false);
        path.tos = 0x68;
        path.flow_label = 0x12345;
        let p = Packet {
            opcode: op::SEND_ONLY,
            dest_qp: 0x12,
            ack_req: true,
            psn: 0x200,
            payload: vec![0x66; 16],
            ..Packet::default()
        };
        let f = build(&path, &p, 0);
        assert_eq!(f, want);
        assert_eq!(parse(&f).unwrap().pkt, p);
    }

    #[test]
    fn flipped_icrc_or_masked_fields() {
        let p = Packet { opcode: op::SEND_ONLY, dest_qp: 0x12, psn: 1, ..Packet::default() };
        let f = build(&a_b(true), &p, 7);
        let mut bad = f.clone();
        let n = bad.len();
        bad[n - 1] ^= 1;
        assert_eq!(parse(&bad), Err(Drop::Icrc));
        // AckReq is covered (wire §3.1)
        let mut bad = f.clone();
        bad[42 + 8] ^= 0x80;
        assert_eq!(parse(&bad), Err(Drop::Icrc));
        // BTH byte 4 (FECN/BECN) is masked: still accepted
        let mut ok = f.clone();
        ok[42 + 4] = 0x40;
        assert!(parse(&ok).is_ok());
    }

    #[test]
    fn addressing_checks() {
        let p = Packet { opcode: op::SEND_ONLY, dest_qp: 0x12, psn: 1, ..Packet::default() };
        let own = a_b(true).reversed();
        let f = parse(&build(&a_b(true), &p, 7)).unwrap();
        assert_eq!(check_addressing(&f, &own), Ok(()));
        let mut wrong = a_b(true);
        wrong.dst_mac[5] = 9;
        let f = parse(&build(&wrong, &p, 7)).unwrap();
        assert_eq!(check_addressing(&f, &own), Err(Drop::Mac));
        let mut wrong = a_b(true);
        wrong.pkey = 0x7FFF;
        let mut own2 = own.clone();
        own2.pkey = 0x7FFF;
        let f = parse(&build(&wrong, &p, 7)).unwrap();
        assert_eq!(check_addressing(&f, &own2), Err(Drop::Pkey));
        let mut wrong = a_b(true);
        wrong.dport = 4792;
        let f = parse(&build(&wrong, &p, 7)).unwrap();
        assert_eq!(check_addressing(&f, &own), Err(Drop::Port));
    }

    #[test]
    fn pcap_header() {
        let c = Capture::new();
        c.push(vec![1, 2, 3]);
        let b = c.pcap();
        assert_eq!(&b[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(&b[20..24], &1u32.to_le_bytes());
        assert_eq!(b.len(), 24 + 16 + 3);
    }

    /// The QP1 CM REQ frame of spec ib-cm-rocev2 §7.3 (322 bytes): UD SEND
    /// Only, DETH Q_Key 0x80010000 / source QP 1, ICRC 0A B0 56 EE.
    #[test]
    fn ud_send_only_qp1_frame_of_the_spec() {
        let mad = hex("01 07 02 03 00 00 00 00 00 00 00 01 1a 2b 3c 4d
            00 10 00 00 00 00 00 00 1a 2b 3c 4d 00 00 00 00
            00 00 00 00 01 06 11 44 b6 96 91 ff fe aa bb 01
            00 00 00 00 00 00 00 00 00 00 42 08 00 00 00 08
            00 00 00 a1 12 34 56 a7 ff ff 37 f0 ff ff ff ff
            00 00 00 00 00 00 00 00 00 00 ff ff c0 00 02 01
            00 00 00 00 00 00 00 00 00 00 ff ff c0 00 02 02
            75 14 40 00 00 40 00 98 00 00 00 00 00 00 00 00
            00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
            00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
            00 00 00 00 00 40 c0 00 00 00 00 00 00 00 00 00
            00 00 00 00 c0 00 02 01 00 00 00 00 00 00 00 00
            00 00 00 00 c0 00 02 02 00 00 00 00 00 00 00 00
            00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
            00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
            00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00");
        assert_eq!(mad.len(), 256);
        let path = Path {
            src_mac: [0xb4, 0x96, 0x91, 0xaa, 0xbb, 0x01],
            dst_mac: [0xb4, 0x96, 0x91, 0xaa, 0xbb, 0x02],
            ipv4: true,
            ttl: 64,
            src_ip: [0, 0, 0, 0xC000_0201],
            dst_ip: [0, 0, 0, 0xC000_0202],
            sport: 0xD159,
            dport: ROCE_PORT,
            pkey: 0xFFFF,
            ..Path::default()
        };
        let p = Packet {
            opcode: op::UD_SEND_ONLY,
            dest_qp: 1,
            psn: 0,
            deth: Some((0x8001_0000, 1)),
            payload: mad.clone(),
            ..Packet::default()
        };
        let f = build(&path, &p, 0);
        let head = hex("b4 96 91 aa bb 02 b4 96 91 aa bb 01 08 00
            45 00 01 34 00 00 40 00 40 11 b5 b5 c0 00 02 01 c0 00 02 02
            d1 59 12 b7 01 20 00 00
            64 00 ff ff 00 00 00 01 00 00 00 00
            80 01 00 00 00 00 00 01");
        assert_eq!(f.len(), 322);
        assert_eq!(&f[..0x3e], &head[..]);
        assert_eq!(&f[0x3e..0x13e], &mad[..]);
        assert_eq!(&f[0x13e..], &[0x0a, 0xb0, 0x56, 0xee], "ICRC");
        let back = parse(&f).expect("parses");
        assert_eq!(back.pkt.deth, Some((0x8001_0000, 1)));
        assert_eq!((back.pkt.opcode, back.pkt.dest_qp, back.pkt.payload), (0x64, 1, mad));
        // DETH byte 4 is reserved: a non-zero value is malformed (the ICRC
        // is recomputed so only that byte is wrong).
        let mut bad = f.clone();
        bad[0x36 + 4] = 1;
        let n = bad.len();
        let crc = icrc(&bad).unwrap();
        bad[n - 4..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(parse(&bad).map(|_| ()), Err(Drop::Malformed));
    }
}
