//! Host sides of the live scenarios against a Linux Soft-RoCE guest
//! (`cargo xtask peer run SCENARIO`, issue #34). Each test owns the model
//! (in-process, its Ethernet port on the address the guest's `-netdev
//! dgram` sends to) and writes the pcap of the wire. They are `#[ignore]`d:
//! they need the guest that `cargo xtask peer run` boots beside them, which
//! passes the addresses in `PEER_MODEL_ADDR` / `PEER_GUEST_ADDR` and the
//! capture path in `PEER_PCAP`.

mod common;
mod e2e_common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e_common::*;
use mock_bar::{Fabric, Port, PortConfig};

fn env_addr(k: &str) -> SocketAddr {
    std::env::var(k)
        .unwrap_or_else(|_| panic!("{k} not set: run through `cargo xtask peer run`"))
        .parse()
        .unwrap_or_else(|e| panic!("{k}: {e}"))
}

/// A port with A's MAC and IPv4 on the addresses the xtask gave.
fn guest_port(fabric: &Fabric) -> Arc<Port> {
    let mut cfg = PortConfig::new(A.mac);
    cfg.ipv4 = vec![A.ip];
    cfg.local = env_addr("PEER_MODEL_ADDR");
    cfg.remote = Some(env_addr("PEER_GUEST_ADDR"));
    // a TCG guest answers in milliseconds, but may stall for a while
    cfg.rc_timeout = Duration::from_secs(2);
    fabric.attach_port(Port::bind(cfg).expect("bind the model's port"))
}

fn write_pcap(c: &mock_bar::wire::Capture) {
    if let Ok(p) = std::env::var("PEER_PCAP") {
        c.write_pcap(std::path::Path::new(&p)).expect("write the pcap");
        println!("host: {} frames in {p}", c.len());
    }
}

/// `arp`: the guest's `arping` asks for 10.0.0.1 three times; the port
/// answers each with A's MAC.
#[test]
#[ignore = "needs the Linux guest of `cargo xtask peer run arp`"]
fn peer_arp() {
    let fabric = Fabric::new();
    let cap = fabric.capture();
    let port = guest_port(&fabric);
    let t0 = Instant::now();
    while port.counters().arp_replies < 3 && t0.elapsed() < Duration::from_secs(200) {
        if fabric.pump_port() == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    write_pcap(&cap);
    let c = port.counters();
    println!("host: port counters {c:?}");
    assert!(c.arp_replies >= 3, "{c:?}");
    assert_eq!(c.drops.total(), 0, "{c:?}");
}
