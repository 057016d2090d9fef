//! The model's Ethernet port: a UDP socket on the loopback address that
//! carries one Ethernet frame per datagram, so another network stack (a
//! Linux guest's NIC through QEMU's `-netdev dgram`, a relay, or a test's
//! own socket) is on the same wire as the devices of a [`crate::Fabric`].
//!
//! # Frame contract
//! Exactly QEMU's `-netdev dgram` (`shared/notes/linux-peer.md`, "Frames
//! between processes"): a datagram is one Ethernet frame starting with the
//! destination MAC, no extra header, no FCS; Ethernet padding is optional
//! (a frame longer than its IP datagram is trimmed to it before the checks,
//! as a NIC strips padding). Frames up to 9014 bytes (MTU 9000).
//!
//! The socket asks for a 4 MiB receive buffer ([`PortConfig::rcvbuf`]):
//! with the OS default, bulk traffic from a Linux peer (perftest) overflowed
//! it and every overflow is a frame lost on the wire (`Udp RcvbufErrors`
//! in `/proc/net/snmp`; notes, "Frames between processes").
//!
//! # What leaves through the port
//! Every frame a device of the fabric puts on the wire for a destination no
//! device of the fabric claims: a UD datagram whose destination MAC is no
//! device's UD QP, an RC request whose (destination IP, QPN) no device
//! owns, and the responses (ACK/NAK, READ responses) to requests that came
//! in through the port. The fabric's capture also records every frame that
//! came in ([`crate::Fabric::capture`]).
//!
//! # What comes in, and the checks (rocev2-wire §1, §3)
//! In this order; the first failing check drops the frame and counts it in
//! [`PortCounters`]:
//! 1. ARP request (EtherType 0x0806) for one of the port's IPv4 addresses:
//!    answered with an ARP reply from the port's MAC (counted in
//!    `arp_replies`; other ARP frames are `not_roce`).
//! 2. IPv6 neighbour solicitation (ICMPv6 type 135) for one of the port's
//!    IPv6 addresses: answered with a solicited neighbour advertisement
//!    carrying the port's MAC (RFC 4861 §4.4, §7.2.4; `nd_replies`).
//! 3. Destination MAC: a unicast MAC that is not the port's is a `mac`
//!    drop (wire §1.2 — rxe does the same, notes "rxe ... as observed");
//!    broadcast/multicast frames that are not 1./2. are `not_roce`.
//! 4. Not IPv4/IPv6 + UDP with destination port 4791 (wire §1.5): the
//!    frame is for the LAN side of the NIC, which the model does not
//!    have — counted as `not_roce`, not as a drop.
//! 5. [`crate::wire::parse`]: IPv4 header checksum, IP and UDP lengths,
//!    opcode, pad, ICRC (wire §3) → `malformed` / `icrc` drops.
//! 6. Dispatch: a UD opcode goes to the device whose UD QP has the
//!    destination MAC (Q_Key, P_Key and state checks are the device's, its
//!    `wire_drop_reasons`); an RC request to the device owning (destination
//!    IP, BTH DestQP), whose responder checks addressing and PSN (wire
//!    §4.7) and whose answer leaves through the port; no such QP → `qp`
//!    drop — unless the destination IP is neither one of the port's
//!    addresses nor any RC QP's local address: that is an `ip` drop
//!    (addressing, wire §1.3/§1.4). An RC response (ACK, READ response)
//!    that arrives while no request of that QP waits for it is an
//!    `unsolicited` drop.
//!
//! # The RC responder meets a real requester (wire §4)
//! Each rule, as a Linux (rxe) requester exercises it; the tests are in
//! `tests/wire_port.rs`:
//! - PSN window (§4.7): the ePSN is taken and advanced (a READ by its
//!   response count); a later PSN draws one NAK 0x60 carrying the ePSN and
//!   later out-of-order packets are dropped silently until the ePSN comes.
//! - Duplicates (§4.7): a SEND/WRITE is not executed again but re-ACKed
//!   with ePSN − 1 and the current MSN; a READ whose PSN lies in one of the
//!   last [`crate::datapath::READ_HISTORY`] READs answered, with the same
//!   R_Key and a VA range inside it, is answered again from its own PSN
//!   (memory read again, current MSN); any other duplicate READ is dropped.
//! - ACKs (§4.3): every completed message is ACKed (PSN of its last
//!   packet), and a packet with AckReq inside a message is ACKed at once
//!   (rxe asks after 64 packets and stalls at 128 unacknowledged PSNs);
//!   other packets inside a message are not answered. Model choice: a
//!   completed message whose last packet lacks AckReq is ACKed all the
//!   same (an extra cumulative ACK; rxe always sets AckReq there).
//! - NAKs (§4.4): no receive posted → RNR NAK with the packet's PSN (the
//!   resend of that PSN is taken); bad R_Key, range or rights → 0x62; a
//!   bad opcode sequence or an opcode the model does not execute (atomics)
//!   → 0x61 at once with that packet's PSN; a length error (§4.1) → 0x61
//!   with the message's first PSN, found when the message is whole. After
//!   0x61/0x62 the responder QP goes to error (RXE `rxe_resp.c →
//!   do_class_ac_error`).
//! - READ responses are segmented to the path MTU (§4.6), AETH on all but
//!   Middle.
//!
//! # The RC requester meets a real peer
//! The model's RC transport is synchronous: a request is answered before
//! the doorbell write returns ([`crate::Fabric`]). Toward the port this
//! means: the request frames are sent, then the port waits (holding the
//! fabric) for the response frames of that QP — an ACK/NAK, or READ
//! responses up to the Last/Only one — for [`PortConfig::rc_timeout`]
//! after the request or the last response packet of it that came,
//! resending the whole request up to [`PortConfig::rc_retries`] times
//! (go-back-N from the message's first PSN, wire §4.8), then the request
//! is lost (the QP goes to error with a retry-exceeded AE as for any lost
//! request). Frames that arrive meanwhile and are not that response are
//! kept, in order, and handled at the next [`crate::Fabric::pump_port`].
//! A message longer than [`PortConfig::window`] packets goes a window at
//! a time: AckReq on each window's last packet, the next window only after
//! its ACK (a model choice: the peer is a QEMU process whose socket buffer
//! holds about a hundred frames; a longer burst loses its tail, and each
//! go-back-N resend of the rest is again a burst).
//! A PSN-sequence NAK (0x60) makes the requester resend from the NAKed
//! PSN, not from the message's first (§4.4, go-back-N), spending one of
//! the QP's transport retries. One message at a time per fabric: no
//! pipelining, so the model as requester sets AckReq on the last packet of
//! each message only and waits for that ACK (rxe ACKs every packet with
//! AckReq).
//!
//! # Addressing (how the two sides learn each other's MAC)
//! The driver has a static neighbour table (MANAGE_ARP): the test or the
//! firmware gives it the peer's MAC; the model never learns MACs from the
//! wire. The other side learns the port's MAC by ARP / neighbour discovery,
//! which the port answers for the addresses it is configured with, as the
//! LAN side of the E810 would for the host's addresses — so a Linux peer
//! needs no permanent neighbour entry.
//!
//! Where the spec is silent: the ARP/ND answers are the model's stand-in
//! for the LAN stack of the NIC's owner (the spec sheets describe only the
//! RDMA engine); the timeout and retry numbers are model choices (GEN_2's
//! RTOMIN unit is not documented, wire §4.8).

use std::collections::VecDeque;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::wire::{self, DropCounts, op};

/// Largest frame the port takes (MTU 9000 + Ethernet + 802.1Q headers).
pub const MAX_FRAME: usize = 9018;

/// How a port is set up.
#[derive(Clone, Debug)]
pub struct PortConfig {
    /// The port's MAC: destination MAC of every frame it takes, source MAC
    /// of its ARP/ND answers.
    pub mac: [u8; 6],
    /// IPv4 addresses the port answers ARP for.
    pub ipv4: Vec<[u8; 4]>,
    /// IPv6 addresses the port answers neighbour solicitations for.
    pub ipv6: Vec<[u8; 16]>,
    /// Local socket address (127.0.0.1, port 0 = any free port).
    pub local: SocketAddr,
    /// Where frames go; `None` = the source of the first datagram received
    /// (until then outgoing frames are counted in `tx_no_peer` and lost).
    pub remote: Option<SocketAddr>,
    /// How long an RC request waits for its response before it is resent.
    pub rc_timeout: Duration,
    /// How many times an unanswered RC request is resent.
    pub rc_retries: u32,
    /// The receive buffer asked for on the socket (`SO_RCVBUF`, bytes;
    /// 0 = the OS default). Bulk traffic from a peer overflows the
    /// default (212,992 bytes on the Linux hosts measured: notes,
    /// "Frames between processes"), and every overflow is a lost frame.
    /// Linux caps the request at `net.core.rmem_max` (and reports twice
    /// the value granted, socket(7)); [`Port::recv_buffer`] tells what the
    /// socket got.
    pub rcvbuf: usize,
    /// Most packets of one request message sent before the port asks for
    /// an ACK (AckReq on the window's last packet) and waits for it; 0 =
    /// the whole message at once. A model choice (module docs, "The RC
    /// requester meets a real peer"): the peer's socket buffer holds about
    /// a hundred frames, and a longer burst is lost in part.
    pub window: usize,
}

impl PortConfig {
    /// A port with `mac`, on a free loopback UDP port, no addresses, no
    /// fixed peer, 1 s RC timeout and 3 resends, a 4 MiB receive buffer
    /// asked for, windows of 32 packets.
    pub fn new(mac: [u8; 6]) -> Self {
        Self {
            mac,
            ipv4: Vec::new(),
            ipv6: Vec::new(),
            local: SocketAddr::from(([127, 0, 0, 1], 0)),
            remote: None,
            rc_timeout: Duration::from_secs(1),
            rc_retries: 3,
            rcvbuf: 4 << 20,
            window: 32,
        }
    }
}

/// What the port did and dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Datagrams received.
    pub rx_frames: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Frames that could not be sent (no peer known yet, socket error).
    pub tx_no_peer: u64,
    /// RoCEv2 frames handed to a device (which may still drop them).
    pub delivered: u64,
    /// ARP requests answered.
    pub arp_replies: u64,
    /// IPv6 neighbour solicitations answered.
    pub nd_replies: u64,
    /// Frames for the LAN side (not RoCEv2, not an ARP/ND for the port).
    pub not_roce: u64,
    /// RC responses no waiting request wanted (late, duplicate, stale).
    pub unsolicited: u64,
    /// RC requests resent after [`PortConfig::rc_timeout`].
    pub rc_timeouts: u64,
    /// Windows of a long request ACKed before its next window went
    /// ([`PortConfig::window`]).
    pub windows: u64,
    /// Frames dropped by the port's own checks, by reason (`mac`,
    /// `malformed`, `icrc`, `qp`; see the module docs).
    pub drops: DropCounts,
}

/// The port: socket, counters, and the frames waiting for the pump.
#[derive(Debug)]
pub struct Port {
    sock: UdpSocket,
    cfg: PortConfig,
    remote: Mutex<Option<SocketAddr>>,
    counters: Mutex<PortCounters>,
    inbox: Mutex<VecDeque<Vec<u8>>>,
    capture: Mutex<Option<wire::Capture>>,
}

/// What the port makes of one incoming frame.
pub(crate) enum Rx {
    /// A checked RoCEv2 frame (trimmed to its IP datagram), decoded.
    Roce(Vec<u8>, Box<wire::Parsed>),
    /// Answered (ARP/ND), ignored or dropped; counted.
    Done,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether an opcode is an RC response (ACK/NAK, READ response, atomic
/// ACK; wire §2).
pub(crate) fn is_response(opcode: u8) -> bool {
    (op::READ_RESP_FIRST..=0x12).contains(&opcode)
}

impl Port {
    /// Binds the socket and asks for [`PortConfig::rcvbuf`] as its
    /// receive buffer (best effort: the OS may grant less).
    pub fn bind(cfg: PortConfig) -> std::io::Result<Self> {
        let sock = UdpSocket::bind(cfg.local)?;
        sock.set_nonblocking(true)?;
        if cfg.rcvbuf > 0 {
            // an OS that refuses leaves its default: the port still works
            let _ = socket2::SockRef::from(&sock).set_recv_buffer_size(cfg.rcvbuf);
        }
        Ok(Self {
            sock,
            remote: Mutex::new(cfg.remote),
            cfg,
            counters: Mutex::default(),
            inbox: Mutex::default(),
            capture: Mutex::default(),
        })
    }

    /// The bound socket address (give it to the peer).
    pub fn local_addr(&self) -> SocketAddr {
        self.sock.local_addr().unwrap_or(self.cfg.local)
    }

    /// The socket's receive buffer as the OS reports it (`SO_RCVBUF`;
    /// Linux reports twice what it granted), if it can be read.
    pub fn recv_buffer(&self) -> Option<usize> {
        socket2::SockRef::from(&self.sock).recv_buffer_size().ok()
    }

    /// The configuration.
    pub fn config(&self) -> &PortConfig {
        &self.cfg
    }

    /// A copy of the counters.
    pub fn counters(&self) -> PortCounters {
        lock(&self.counters).clone()
    }

    pub(crate) fn set_capture(&self, c: Option<wire::Capture>) {
        *lock(&self.capture) = c;
    }

    fn count(&self, f: impl FnOnce(&mut PortCounters)) {
        f(&mut lock(&self.counters));
    }

    /// Sends one frame to the peer (frames built by a device are already
    /// in the capture).
    pub(crate) fn send(&self, frame: &[u8]) {
        let to = *lock(&self.remote);
        let ok = to.is_some_and(|a| self.sock.send_to(frame, a).is_ok());
        self.count(|c| if ok { c.tx_frames += 1 } else { c.tx_no_peer += 1 });
    }

    /// Sends a frame the port itself built (ARP/ND): recorded, then sent.
    fn send_own(&self, frame: Vec<u8>) {
        if let Some(c) = lock(&self.capture).as_ref() {
            c.push(frame.clone());
        }
        self.send(&frame);
    }

    /// One datagram from the socket, if any; learns the peer's address if
    /// none is configured. Recorded in the capture.
    fn recv_raw(&self) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; MAX_FRAME + 1];
        let (n, from) = self.sock.recv_from(&mut buf).ok()?;
        buf.truncate(n);
        lock(&self.remote).get_or_insert(from);
        self.count(|c| c.rx_frames += 1);
        if let Some(c) = lock(&self.capture).as_ref() {
            c.push(buf.clone());
        }
        Some(buf)
    }

    /// The next frame to handle: first those kept while a request waited,
    /// then the socket's.
    pub(crate) fn next_frame(&self) -> Option<Vec<u8>> {
        if let Some(f) = lock(&self.inbox).pop_front() {
            return Some(f);
        }
        self.recv_raw()
    }

    /// Classifies and checks one incoming frame (module docs, steps 1–5).
    pub(crate) fn classify(&self, f: Vec<u8>) -> Rx {
        if f.len() < 14 || f.len() > MAX_FRAME {
            self.count(|c| c.drops.add(wire::Drop::Malformed));
            return Rx::Done;
        }
        let dst: [u8; 6] = f[0..6].try_into().unwrap_or_default();
        let group = dst[0] & 1 != 0;
        if !group && dst != self.cfg.mac {
            self.count(|c| c.drops.add(wire::Drop::Mac));
            return Rx::Done;
        }
        let (et, l3) = match u16::from_be_bytes([f[12], f[13]]) {
            0x8100 if f.len() >= 18 => (u16::from_be_bytes([f[16], f[17]]), 18),
            et => (et, 14),
        };
        if et == 0x0806 {
            if let Some(r) = self.arp_reply(&f, l3) {
                self.count(|c| c.arp_replies += 1);
                self.send_own(r);
            } else {
                self.count(|c| c.not_roce += 1);
            }
            return Rx::Done;
        }
        if et == 0x86DD
            && let Some(r) = self.nd_reply(&f, l3)
        {
            self.count(|c| c.nd_replies += 1);
            self.send_own(r);
            return Rx::Done;
        }
        // step 4: IPv4/IPv6 + UDP to 4791, else the LAN side's
        let (udp, ip_len) = match et {
            0x0800 if f.len() >= l3 + 20 && f[l3] >> 4 == 4 => {
                (l3 + 20, u16::from_be_bytes([f[l3 + 2], f[l3 + 3]]) as usize)
            }
            0x86DD if f.len() >= l3 + 40 => {
                (l3 + 40, 40 + u16::from_be_bytes([f[l3 + 4], f[l3 + 5]]) as usize)
            }
            _ => {
                self.count(|c| c.not_roce += 1);
                return Rx::Done;
            }
        };
        let proto = if et == 0x0800 { f[l3 + 9] } else { f[l3 + 6] };
        let dport = f.get(udp + 2..udp + 4).map(|b| u16::from_be_bytes([b[0], b[1]]));
        if group || proto != 17 || dport != Some(wire::ROCE_PORT) {
            self.count(|c| c.not_roce += 1);
            return Rx::Done;
        }
        // Ethernet padding past the IP datagram is not part of it
        let mut f = f;
        if f.len() > l3 + ip_len {
            f.truncate(l3 + ip_len);
        }
        match wire::parse(&f) {
            Ok(p) => Rx::Roce(f, Box::new(p)),
            Err(why) => {
                self.count(|c| c.drops.add(why));
                Rx::Done
            }
        }
    }

    /// Counts a frame that reached no QP.
    pub(crate) fn drop_qp(&self) {
        self.count(|c| c.drops.add(wire::Drop::Qp));
    }

    /// Counts a frame for a destination IP that is not this side's.
    pub(crate) fn drop_ip(&self) {
        self.count(|c| c.drops.add(wire::Drop::Ip));
    }

    /// Whether `dst` (a parsed destination IP, IPv4 in word 3) is one of
    /// the port's configured addresses.
    pub(crate) fn has_ip(&self, ipv4: bool, dst: [u32; 4]) -> bool {
        if ipv4 {
            return self.cfg.ipv4.iter().any(|a| u32::from_be_bytes(*a) == dst[3]);
        }
        self.cfg.ipv6.iter().any(|a| {
            (0..4).all(|i| {
                u32::from_be_bytes([a[4 * i], a[4 * i + 1], a[4 * i + 2], a[4 * i + 3]]) == dst[i]
            })
        })
    }

    pub(crate) fn delivered(&self) {
        self.count(|c| c.delivered += 1);
    }

    pub(crate) fn unsolicited(&self) {
        self.count(|c| c.unsolicited += 1);
    }

    /// ARP (RFC 826) request for one of our IPv4 addresses → the reply.
    fn arp_reply(&self, f: &[u8], at: usize) -> Option<Vec<u8>> {
        let a = f.get(at..at + 28)?;
        // Ethernet/IPv4, hlen 6, plen 4, operation 1 (request)
        if a[0..8] != [0, 1, 8, 0, 6, 4, 0, 1] {
            return None;
        }
        let (sha, spa, tpa) = (&a[8..14], &a[14..18], &a[24..28]);
        if !self.cfg.ipv4.iter().any(|ip| ip[..] == tpa[..]) {
            return None;
        }
        let mut r = Vec::with_capacity(42);
        r.extend_from_slice(sha);
        r.extend_from_slice(&self.cfg.mac);
        r.extend_from_slice(&f[12..at]); // same VLAN tag, EtherType 0x0806
        r.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 2]);
        r.extend_from_slice(&self.cfg.mac);
        r.extend_from_slice(tpa);
        r.extend_from_slice(sha);
        r.extend_from_slice(spa);
        Some(r)
    }

    /// IPv6 neighbour solicitation (RFC 4861 §4.3) for one of our IPv6
    /// addresses → a solicited advertisement with our MAC (§4.4).
    fn nd_reply(&self, f: &[u8], at: usize) -> Option<Vec<u8>> {
        let ip = f.get(at..at + 40)?;
        let icmp = f.get(at + 40..)?;
        // next header ICMPv6, hop limit 255, type 135 code 0
        if ip[6] != 58 || ip[7] != 255 || icmp.len() < 24 || icmp[0] != 135 || icmp[1] != 0 {
            return None;
        }
        let target: [u8; 16] = icmp[8..24].try_into().ok()?;
        if !self.cfg.ipv6.contains(&target) {
            return None;
        }
        let src: [u8; 16] = ip[8..24].try_into().ok()?;
        // an unspecified source (DAD) is answered to all-nodes, unsolicited
        let (dst_ip, solicited) = if src == [0; 16] {
            ([0xFF, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], false)
        } else {
            (src, true)
        };
        let mut na = vec![136, 0, 0, 0];
        // flags: Solicited (bit 30) when answering a solicitation, Override
        na.extend_from_slice(&[if solicited { 0x60 } else { 0x20 }, 0, 0, 0]);
        na.extend_from_slice(&target);
        na.extend_from_slice(&[2, 1]); // target link-layer address option
        na.extend_from_slice(&self.cfg.mac);
        let mut ph = Vec::with_capacity(40 + na.len());
        ph.extend_from_slice(&target);
        ph.extend_from_slice(&dst_ip);
        ph.extend_from_slice(&(na.len() as u32).to_be_bytes());
        ph.extend_from_slice(&[0, 0, 0, 58]);
        ph.extend_from_slice(&na);
        let ck = inet_checksum(&ph);
        na[2..4].copy_from_slice(&ck.to_be_bytes());
        let dst_mac = if solicited { f[6..12].try_into().ok()? } else { [0x33, 0x33, 0, 0, 0, 1] };
        let mut r = Vec::with_capacity(86);
        r.extend_from_slice(&dst_mac);
        r.extend_from_slice(&self.cfg.mac);
        r.extend_from_slice(&f[12..at]);
        r.extend_from_slice(&[0x60, 0, 0, 0]);
        r.extend_from_slice(&(na.len() as u16).to_be_bytes());
        r.extend_from_slice(&[58, 255]);
        r.extend_from_slice(&target);
        r.extend_from_slice(&dst_ip);
        r.extend_from_slice(&na);
        Some(r)
    }

    /// Sends the request `frames` of local QP `src_qpn` and waits for its
    /// response frames (module docs): a message longer than
    /// [`PortConfig::window`] packets goes a window at a time, AckReq on each
    /// window's last packet, the next window once that packet is ACKed; a
    /// NAK (or anything but that ACK) ends it and is the message's answer,
    /// as the requester resends from the NAKed PSN. `None` if nothing came
    /// after every resend.
    pub(crate) fn exchange(&self, src_qpn: u32, frames: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
        let w = self.cfg.window;
        let mut start = 0;
        while w > 0 && frames.len() - start > w {
            let mut part = frames.get(start..start + w)?.to_vec();
            let last = part.last_mut()?;
            wire::set_ack_req(last)?;
            let last_psn = wire::parse(last).ok()?.pkt.psn;
            let back = self.exchange_part(src_qpn, &part)?;
            let first = back.first().and_then(|f| wire::parse(f).ok())?.pkt;
            let acked = first.opcode == wire::op::ACK
                && first.aeth.is_some_and(|(s, _)| s & 0x60 == 0)
                && first.psn == last_psn;
            if !acked {
                return Some(back);
            }
            self.count(|c| c.windows += 1);
            start += w;
        }
        self.exchange_part(src_qpn, frames.get(start..)?)
    }

    /// [`Port::exchange`] of one window (or a whole short message).
    fn exchange_part(&self, src_qpn: u32, frames: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
        let first_psn = frames.first().and_then(|f| wire::parse(f).ok())?.pkt.psn;
        for attempt in 0..=self.cfg.rc_retries {
            if attempt > 0 {
                self.count(|c| c.rc_timeouts += 1);
            }
            for f in frames {
                self.send(f);
            }
            // the timer restarts with every response packet of the
            // message (progress), as a requester's ACK timer does (wire
            // §4.8): a long READ is resent only when its responses stop
            let mut deadline = Instant::now() + self.cfg.rc_timeout;
            let mut got: Vec<Vec<u8>> = Vec::new();
            while Instant::now() < deadline {
                let Some(f) = self.recv_raw() else {
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                };
                let p = wire::parse(&trim(&f)).ok();
                let mine = p.as_ref().is_some_and(|p| {
                    p.dst_mac == self.cfg.mac
                        && is_response(p.pkt.opcode)
                        && p.pkt.dest_qp == src_qpn
                        && !psn_before(p.pkt.psn, first_psn)
                });
                if !mine {
                    lock(&self.inbox).push_back(f);
                    continue;
                }
                let op = p.map_or(0, |p| p.pkt.opcode);
                got.push(trim(&f));
                deadline = Instant::now() + self.cfg.rc_timeout;
                if !matches!(op, op::READ_RESP_FIRST | op::READ_RESP_MIDDLE) {
                    return Some(got);
                }
            }
        }
        None
    }
}

/// A frame trimmed to its IP datagram (Ethernet padding removed).
fn trim(f: &[u8]) -> Vec<u8> {
    let l3 = if f.get(12..14) == Some(&[0x81, 0x00]) { 18 } else { 14 };
    let len = match f.get(l3 - 2..l3) {
        Some([0x08, 0x00]) => {
            f.get(l3 + 2..l3 + 4).map(|b| u16::from_be_bytes([b[0], b[1]]) as usize)
        }
        Some([0x86, 0xDD]) => {
            f.get(l3 + 4..l3 + 6).map(|b| 40 + u16::from_be_bytes([b[0], b[1]]) as usize)
        }
        _ => None,
    };
    match len {
        Some(n) if f.len() > l3 + n => f[..l3 + n].to_vec(),
        _ => f.to_vec(),
    }
}

/// Serial PSN order (wire §4.2): whether `a` is earlier than `b`.
fn psn_before(a: u32, b: u32) -> bool {
    let d = b.wrapping_sub(a) & 0xFF_FFFF;
    d != 0 && d < 1 << 23
}

/// The Internet checksum (RFC 1071).
fn inet_checksum(b: &[u8]) -> u16 {
    let mut s = 0u32;
    for c in b.chunks(2) {
        s += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
    }
    while s >> 16 != 0 {
        s = (s & 0xFFFF) + (s >> 16);
    }
    !(s as u16)
}
