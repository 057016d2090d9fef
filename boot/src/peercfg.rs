//! The boot configuration of a live run against a Linux peer (issue #34,
//! stage two): `cargo xtask peer run peer_rping_*` passes the unikernel's
//! addresses and the scenario on the kernel command line, so they are
//! written in one place (xtask) and the image hard-codes none of them.
//!
//! ```text
//! peer=rping-server ip=10.0.0.1 peer_ip=10.0.0.2 peer_mac=02:00:00:00:00:0b rping_count=3 rping_size=64
//! ```
//!
//! * `peer=` — the scenario: `rping-server` (the unikernel listens, Linux
//!   `rping -c` connects) or `rping-client` (Linux `rping -s` listens, the
//!   unikernel connects). Without it there is no live run ([`parse`]
//!   returns `Ok(None)`).
//! * `ip=` — the unikernel's IPv4 address: its RoCEv2 GID (`::ffff:a.b.c.d`,
//!   the CM's local address). Its MAC is the device's, from the LAN
//!   bring-up; the model's port answers ARP for `ip` with it.
//! * `peer_ip=`, `peer_mac=` — the Linux peer's IPv4 address and MAC (the
//!   driver's static neighbour entry for the peer: the unikernel has no
//!   ARP).
//! * `rping_count=` (default 3), `rping_size=` (default 64) — rping's `-C`
//!   and `-S`, the same on both sides.
//! * `peer=nvme-target` — the unikernel serves an NVMe-over-RDMA subsystem
//!   (issue #32) to the Linux host; `ns_mib=` (default 64, 1..=[`MAX_NS_MIB`])
//!   sizes its RAM namespace, `nvme_io_queues=` (default 4,
//!   1..=[`MAX_IO_QUEUES`]) is how many I/O queues it grants.

use core::net::Ipv4Addr;

/// Which side of rping the unikernel plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// It listens and plays rping's server (`peer=rping-server`).
    RpingServer,
    /// It connects and plays rping's client (`peer=rping-client`).
    RpingClient,
    /// It serves an NVMe-over-RDMA target on port 4420 (`peer=nvme-target`).
    NvmeTarget,
}

/// A live run's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCfg {
    /// The scenario.
    pub role: Role,
    /// Our IPv4 address.
    pub ip: [u8; 4],
    /// The peer's IPv4 address.
    pub peer_ip: [u8; 4],
    /// The peer's MAC.
    pub peer_mac: [u8; 6],
    /// Pings (rping `-C`).
    pub count: u32,
    /// Ping size in bytes (rping `-S`).
    pub size: u32,
    /// Size of the NVMe target's RAM namespace in MiB (`ns_mib=`).
    pub ns_mib: u32,
    /// I/O queues the NVMe target grants (`nvme_io_queues=`).
    pub io_queues: u32,
}

/// Largest ping size the image's buffers take (three pages each for the
/// READ source and the WRITE sink).
pub const MAX_SIZE: u32 = 3 * 4096;
/// Smallest ping size (rping's own minimum, `irdma_rping::MIN_SIZE`).
pub const MIN_SIZE: u32 = 16;
/// Most pings a run may ask for.
pub const MAX_COUNT: u32 = 10_000;
/// Largest RAM namespace (MiB): half of the image's 128 MiB DMA pool, so
/// the queues' buffers still fit beside it.
pub const MAX_NS_MIB: u32 = 64;
/// Most I/O queues the NVMe target grants.
pub const MAX_IO_QUEUES: u32 = 8;
/// The NVM subsystem NQN the image's NVMe target serves (`peer=nvme-target`).
pub const NVME_SUBNQN: &str = "nqn.2026-12.io.irdma:ram0";

/// What is wrong with the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerCfgError {
    /// `peer=` names no scenario this image has.
    UnknownScenario,
    /// A word the run needs is missing (its key).
    Missing(&'static str),
    /// A value does not parse or is out of range (its key).
    Bad(&'static str),
}

fn ipv4(v: &str, key: &'static str) -> Result<[u8; 4], PeerCfgError> {
    v.parse::<Ipv4Addr>().map(|a| a.octets()).map_err(|_| PeerCfgError::Bad(key))
}

fn mac(v: &str) -> Result<[u8; 6], PeerCfgError> {
    let bad = PeerCfgError::Bad("peer_mac");
    let mut m = [0u8; 6];
    let mut parts = v.split(':');
    for b in m.iter_mut() {
        let p = parts.next().ok_or(bad)?;
        if p.len() != 2 || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad);
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| bad)?;
    }
    if parts.next().is_some() {
        return Err(bad);
    }
    Ok(m)
}

fn num(
    v: &str,
    key: &'static str,
    range: core::ops::RangeInclusive<u32>,
) -> Result<u32, PeerCfgError> {
    v.parse::<u32>().ok().filter(|n| range.contains(n)).ok_or(PeerCfgError::Bad(key))
}

/// Reads the live-run words of `cmdline` (space-separated; other words are
/// ignored). `Ok(None)` without `peer=`.
pub fn parse(cmdline: &str) -> Result<Option<PeerCfg>, PeerCfgError> {
    let get = |k: &str| cmdline.split(' ').find_map(|w| w.strip_prefix(k)?.strip_prefix('='));
    let Some(role) = get("peer") else { return Ok(None) };
    let role = match role {
        "rping-server" => Role::RpingServer,
        "rping-client" => Role::RpingClient,
        "nvme-target" => Role::NvmeTarget,
        _ => return Err(PeerCfgError::UnknownScenario),
    };
    let need = |k: &'static str| get(k).ok_or(PeerCfgError::Missing(k));
    Ok(Some(PeerCfg {
        role,
        ip: ipv4(need("ip")?, "ip")?,
        peer_ip: ipv4(need("peer_ip")?, "peer_ip")?,
        peer_mac: mac(need("peer_mac")?)?,
        count: get("rping_count").map_or(Ok(3), |v| num(v, "rping_count", 1..=MAX_COUNT))?,
        size: get("rping_size").map_or(Ok(64), |v| num(v, "rping_size", MIN_SIZE..=MAX_SIZE))?,
        ns_mib: get("ns_mib").map_or(Ok(MAX_NS_MIB), |v| num(v, "ns_mib", 1..=MAX_NS_MIB))?,
        io_queues: get("nvme_io_queues")
            .map_or(Ok(4), |v| num(v, "nvme_io_queues", 1..=MAX_IO_QUEUES))?,
    }))
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    const LINE: &str =
        "peer=rping-client ip=10.0.0.1 peer_ip=10.0.0.2 peer_mac=02:00:00:00:00:0b rping_count=5";

    #[test]
    fn reads_every_word() {
        let c = parse(LINE).unwrap().unwrap();
        assert_eq!(c.role, Role::RpingClient);
        assert_eq!(c.ip, [10, 0, 0, 1]);
        assert_eq!(c.peer_ip, [10, 0, 0, 2]);
        assert_eq!(c.peer_mac, [2, 0, 0, 0, 0, 0x0b]);
        assert_eq!((c.count, c.size), (5, 64));
        let s = parse("lan=hand peer=rping-server ip=1.2.3.4 peer_ip=5.6.7.8 peer_mac=aa:BB:cc:00:11:22 rping_size=5000")
            .unwrap()
            .unwrap();
        assert_eq!(s.role, Role::RpingServer);
        assert_eq!(s.peer_mac, [0xaa, 0xbb, 0xcc, 0, 0x11, 0x22]);
        assert_eq!((s.count, s.size), (3, 5000));
        assert_eq!((s.ns_mib, s.io_queues), (64, 4), "the defaults");
        let n = parse("peer=nvme-target ip=10.0.0.1 peer_ip=10.0.0.2 peer_mac=02:00:00:00:00:0b ns_mib=16 nvme_io_queues=2")
            .unwrap()
            .unwrap();
        assert_eq!(n.role, Role::NvmeTarget);
        assert_eq!((n.ns_mib, n.io_queues), (16, 2));
    }

    #[test]
    fn no_peer_word_is_no_live_run() {
        assert_eq!(parse(""), Ok(None));
        assert_eq!(parse("lan=hand fail"), Ok(None));
        // `peers=` or `xpeer=` are other words
        assert_eq!(parse("peers=rping-server xpeer=rping-server"), Ok(None));
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        assert_eq!(parse("peer=ucmatose"), Err(PeerCfgError::UnknownScenario));
        assert_eq!(parse("peer=rping-server"), Err(PeerCfgError::Missing("ip")));
        let no_mac = "peer=rping-server ip=10.0.0.1 peer_ip=10.0.0.2";
        assert_eq!(parse(no_mac), Err(PeerCfgError::Missing("peer_mac")));
        for (line, key) in [
            ("ip=10.0.0.256 peer_ip=10.0.0.2 peer_mac=02:00:00:00:00:0b", "ip"),
            ("ip=10.0.0.1 peer_ip=10.0.0 peer_mac=02:00:00:00:00:0b", "peer_ip"),
            ("ip=10.0.0.1 peer_ip=10.0.0.2 peer_mac=02:00:00:00:00", "peer_mac"),
            ("ip=10.0.0.1 peer_ip=10.0.0.2 peer_mac=02:00:00:00:00:0b:01", "peer_mac"),
            ("ip=10.0.0.1 peer_ip=10.0.0.2 peer_mac=02:00:00:00:00:zz", "peer_mac"),
            ("ip=10.0.0.1 peer_ip=10.0.0.2 peer_mac=02:00:00:00:00:+b", "peer_mac"),
            (
                "ip=10.0.0.1 peer_ip=10.0.0.2 peer_mac=02:00:00:00:00:0b rping_count=0",
                "rping_count",
            ),
            ("ip=10.0.0.1 peer_ip=10.0.0.2 peer_mac=02:00:00:00:00:0b rping_size=15", "rping_size"),
            (
                "ip=10.0.0.1 peer_ip=10.0.0.2 peer_mac=02:00:00:00:00:0b rping_size=12289",
                "rping_size",
            ),
            ("ip=10.0.0.1 peer_ip=10.0.0.2 peer_mac=02:00:00:00:00:0b rping_size=-1", "rping_size"),
            ("ip=10.0.0.1 peer_ip=10.0.0.2 peer_mac=02:00:00:00:00:0b ns_mib=0", "ns_mib"),
            ("ip=10.0.0.1 peer_ip=10.0.0.2 peer_mac=02:00:00:00:00:0b ns_mib=65", "ns_mib"),
            (
                "ip=10.0.0.1 peer_ip=10.0.0.2 peer_mac=02:00:00:00:00:0b nvme_io_queues=9",
                "nvme_io_queues",
            ),
        ] {
            let l = std::format!("peer=rping-server {line}");
            assert_eq!(parse(&l), Err(PeerCfgError::Bad(key)), "{l}");
        }
    }
}
