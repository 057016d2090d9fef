//! `cargo xtask peer run nvme-linux-reference` (issue #32): Linux's own
//! NVMe/RDMA target as the reference the project's target is measured
//! against. Two Linux guests wired to each other, no model: guest T
//! (`MODEL_IP`, `MODEL_MAC`) configures nvmet-rdma over rxe through
//! configfs (`xtask/peer/nvmet-target.sh`: one 64 MiB RAM-disk namespace,
//! port 4420), guest H (`PEER_IP`, `PEER_MAC`) runs the host checks
//! (`xtask/peer/nvme-host.sh`: discover, connect with several I/O queues,
//! O_DIRECT pattern, ext4, disconnect / reconnect, dd measurements). Both
//! NICs are `-netdev dgram` pointed at each other; H's NIC is captured by
//! QEMU's `filter-dump` into `target/peer/nvme-linux-reference/wire.pcap`,
//! judged by tshark as every other capture ([`super::judge`]) and by its
//! NVMe/RDMA dissector ([`crate::nvme_wire`]). The QEMUs are pinned to
//! different CPUs; T is powered off once H is done.

use std::time::{Duration, Instant};

use super::{
    Guest, MODEL_IP, MODEL_MAC, PEER_IP, PEER_MAC, build, free_udp_port, guest_spawn, judge,
    two_cpus, wait,
};
use crate::util::{ensure_program, root};

/// The scenario's name.
pub(super) const NAME: &str = "nvme-linux-reference";
/// Its line in `peer list`.
pub(super) const WHAT: &str = "two Linux guests: nvmet-rdma (configfs, 64 MiB RAM disk) serves, \
                               nvme-host.sh discovers, connects, verifies, measures";
/// The reference subsystem's NQN.
pub const NQN: &str = "nqn.2014-08.invalid.irdma:nvme-reference";
/// How long the host guest may take (boot to power-off).
const HOST_LIMIT: Duration = Duration::from_secs(540);

/// `/proc/net/snmp` `Udp: … RcvbufErrors` (notes, "Frames between
/// processes": the loopback UDP buffers overflow under bulk load).
fn udp_rcvbuf_errors() -> Option<u64> {
    let snmp = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (names, values) = (udp.next()?, udp.next()?);
    let i = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// One guest's env file: its own address, the other's, and the NVMe
/// settings both scripts read.
fn env(own_ip: &str, other_ip: &str, other_mac: &str, hostid: &str) -> String {
    format!(
        "PEER_IP={own_ip}\nMODEL_IP={other_ip}\nMODEL_MAC={other_mac}\nMTU=1500\nVLAN=\n\
         PEER_ADDR={own_ip}\nMODEL_ADDR={other_ip}\nNVME=1\nNVME_ADDR={MODEL_IP}\n\
         NVME_NQN={NQN}\nNVME_HOSTID={hostid}\n"
    )
}

/// Runs the scenario; the exit code.
pub(super) fn run() -> Result<i32, String> {
    let qemu = ensure_program(&crate::qemu::QEMU_PACKAGE)?;
    let built = build()?;
    let out = root().join("target/peer").join(NAME);
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    let file = |name: &str, text: String| {
        let p = out.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display())).map(|_| p)
    };
    // stable, distinct host identities (init.sh writes /etc/nvme/host{nqn,id})
    let env_t = file(
        "env-target",
        env(MODEL_IP, PEER_IP, PEER_MAC, "5e2d0c1a-0b0b-4c32-8e00-00000000000a"),
    )?;
    let env_h = file(
        "env-host",
        env(PEER_IP, MODEL_IP, MODEL_MAC, "5e2d0c1a-0b0b-4c32-8e00-00000000000b"),
    )?;
    let run_t = file("run-target", "nvmet-target.sh\n".into())?;
    let run_h = file("run-host", "nvme-host.sh\n".into())?;
    let (serial_t, serial_h) = (out.join("serial-target.log"), out.join("serial-host.log"));
    let pcap = out.join("wire.pcap");
    for p in [&serial_t, &serial_h, &pcap] {
        let _ = std::fs::remove_file(p);
    }
    let (port_t, port_h) = (free_udp_port()?, free_udp_port()?);
    let two = two_cpus();
    let udp0 = udp_rcvbuf_errors();
    let t0 = Instant::now();
    let target = Guest {
        cpu: two.then_some(0),
        ports: (port_t, port_h),
        mac: MODEL_MAC,
        env: &env_t,
        run: &run_t,
        serial: &serial_t,
        dump: None,
    };
    let mut target = guest_spawn(&qemu, &built, &target)?;
    let host = Guest {
        cpu: two.then_some(1),
        ports: (port_h, port_t),
        mac: PEER_MAC,
        env: &env_h,
        run: &run_h,
        serial: &serial_h,
        dump: Some(&pcap),
    };
    let mut host = match guest_spawn(&qemu, &built, &host) {
        Ok(h) => h,
        Err(e) => {
            let _ = target.kill();
            let _ = target.wait();
            return Err(e);
        }
    };
    let host_st = wait(&mut host, t0 + HOST_LIMIT);
    let host_wall = t0.elapsed();
    // the target must still be serving when the host is done
    let serving = matches!(target.try_wait(), Ok(None));
    let _ = target.kill();
    let _ = target.wait();
    let udp1 = udp_rcvbuf_errors();
    let mut why: Vec<String> = Vec::new();
    let exit_t = super::exit_of(&serial_t, "target", &["NVMET ", "peer: "], 140);
    let exit_h =
        super::exit_of(&serial_h, "host", &["NVME ", "NVME-", "nvme-host:", "peer: "], 140);
    let t_log = std::fs::read_to_string(&serial_t).unwrap_or_default();
    if !t_log.lines().any(|l| l.starts_with("NVMET PASS configured")) {
        why.push("the target guest did not configure nvmet".into());
    }
    if !serving {
        why.push(format!("the target guest ended before the host (PEER-EXIT {exit_t:?})"));
    }
    if exit_h != Some(0) || host_st != Some(0) {
        why.push(format!("the host guest: PEER-EXIT {exit_h:?} (QEMU {host_st:?})"));
    }
    // every frame decoded; the verdict on malformed frames and expert
    // errors is the NVMe judge's below, which knows tshark's one fault
    // (crate::nvme_wire) — this line is printed for the record
    let _ = std::fs::remove_file(pcap.with_extension("pcapng"));
    match judge(&pcap, &format!("eth.src == {MODEL_MAC}")) {
        Ok(line) => println!("peer {NAME}: {line}"),
        Err(e) => println!("peer {NAME}: {e}"),
    }
    // the NVMe/RDMA dissector's view (judge wrote wire.pcapng)
    let ng = pcap.with_extension("pcapng");
    if !ng.is_file() {
        why.push(format!("no capture at {}", pcap.display()));
    } else {
        match crate::nvme_wire::judge(&ng) {
            Ok(w) => {
                println!("peer {NAME}: nvme {}", w.summary());
                why.extend(w.failures().into_iter().map(|f| format!("nvme wire: {f}")));
            }
            Err(e) => why.push(format!("nvme wire: {e}")),
        }
    }
    if let (Some(a), Some(b)) = (udp0, udp1) {
        println!("peer {NAME}: host Udp RcvbufErrors +{} during the run", b.saturating_sub(a));
    }
    println!(
        "peer {NAME}: {} — host guest {:.1} s (boot to power-off), whole run {:.1} s; logs in {}",
        if why.is_empty() { "passed".to_string() } else { format!("FAILED: {}", why.join("; ")) },
        host_wall.as_secs_f64(),
        t0.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(if why.is_empty() { 0 } else { 1 })
}
