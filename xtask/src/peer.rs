//! `cargo xtask peer …` — a Linux Soft-RoCE (rxe) guest as the driver's
//! peer (issue #34). Facts used here: `shared/notes/linux-peer.md`.
//!
//! * `peer build` — fetches the Debian packages below with `apt-get
//!   download` into a cache outside the repository
//!   (`$XDG_CACHE_HOME/irdma-peer` or `~/.cache/irdma-peer`), unpacks them
//!   with `dpkg-deb -x`, and writes `initramfs.cpio` there: busybox, the
//!   kernel modules in load order, iproute2's `ip` and `rdma`, rdma-core's
//!   rping / ucmatose / udaddy / ibv_*, perftest, every library `ldd` names,
//!   the loader, the rxe provider. Nothing is installed on the host and
//!   nothing lands in the repository.
//! * `peer run SCENARIO` — boots the kernel and initramfs in QEMU (TCG,
//!   `-netdev dgram` to the model's port), pinned to the CPU the host side
//!   does not use; the guest brings up rxe0 and runs the scenario's Linux
//!   command from fw_cfg (`xtask/peer/init.sh`). The host side — a test of
//!   `tests/peer_live.rs` that owns the model and its port
//!   (`mock_bar::port`) and writes the pcap of the wire — runs at the same
//!   time. Prints the Linux tool's own result line and `PEER-EXIT`; exits
//!   with the guest's status (or the host side's, if that failed). Output
//!   in `target/peer/SCENARIO/` (serial log, pcap, host log). A scenario
//!   with `again` (`peer-vanishes-then-reconnects`) boots the guest a
//!   second time on the same ports once the first powered off and the host
//!   side printed `NEXT_PEER`, with a second command (`serial2.log`).
//! * `peer run peer_rping_server|peer_rping_client` — stage two: the
//!   unikernel (`boot/`, built as for `cargo xtask qemu`) in QEMU, its BAR
//!   served by the model process `mock-bar-shm` whose Ethernet port
//!   (`--port`, `mock_bar::port`) is wired to the Linux guest's NIC. The
//!   unikernel's addresses, the peer's MAC and the rping count/size reach it
//!   on its command line (`irdma_boot::peercfg`), written here only. Three
//!   processes on two cores: the model on CPU 0 (it sleeps when idle and
//!   while it waits for the guest's answers), the unikernel's QEMU alone on
//!   CPU 1 (its vCPU spins on the BAR), the Linux guest on CPU 0. Prints
//!   rping's own result lines, the unikernel's scenario lines and the
//!   model's port counters; the model judges every RoCEv2 frame's ICRC at
//!   exit (`mock_bar::wire::check_frames`) and tshark the capture, as in
//!   stage one. Output in `target/peer/NAME/` (serial logs, pcap).
//! * `peer run nvme-linux-reference` (issue #32) — two Linux guests wired
//!   to each other, no model: Linux's own nvmet-rdma serves a RAM disk,
//!   the other guest runs `xtask/peer/nvme-host.sh` (discover, connect,
//!   O_DIRECT pattern, ext4, reconnect, dd figures); the capture is judged
//!   by tshark's NVMe/RDMA dissector (`crate::nvme_wire`). See
//!   `peer/nvme.rs`. A guest whose env says `NVME=1` loads the NVMe host,
//!   target and ext4 modules and gets `/etc/nvme/hostnqn` and `hostid`.
//! * `peer nvme-wire FILE` — that judge alone, on any capture.
//! * `peer list` — the scenarios.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::util::{SysPackage, ensure_program, root, which};

mod nvme;

/// The Debian 12 packages of the guest (notes, "Packages"). The kernel
/// image is resolved from `linux-image-amd64` at build time.
const PACKAGES: &[&str] = &[
    "busybox-static",
    "ibverbs-providers",
    "libibverbs1",
    "librdmacm1",
    "rdmacm-utils",
    "ibverbs-utils",
    "perftest",
    "iproute2",
    // libraries the binaries above need (taken from these packages, not
    // from the host, so the guest does not depend on what the host has)
    "libc6",
    "libgcc-s1",
    "libnl-3-200",
    "libnl-route-3-200",
    "libpci3",
    "libibumad3",
    "libmnl0",
    "libelf1",
    "libbpf1",
    "libcap2",
    "libselinux1",
    "libdb5.3",
    "libxtables12",
    "zlib1g",
    "libpcre2-8-0",
    // NVMe over RDMA (issue #32): nvme-cli and mkfs.ext4, and what their
    // binaries link (ldd closure of usr/sbin/nvme and sbin/mke2fs)
    "nvme-cli",
    "libnvme1",
    "libjson-c5",
    "libdbus-1-3",
    "libssl3",
    "libsystemd0",
    "libgcrypt20",
    "libgpg-error0",
    "liblz4-1",
    "liblzma5",
    "libzstd1",
    "e2fsprogs",
    "libext2fs2",
    "libcom-err2",
    "libss2",
    "libblkid1",
    "libuuid1",
];

/// The kernel image package the notes measured (used when `apt-cache`
/// cannot resolve `linux-image-amd64`).
const KERNEL_FALLBACK: &str = "linux-image-6.1.0-57-amd64";

/// Modules in `modprobe --show-depends` order (notes, "The guest").
const MODULES: &[&str] = &[
    "crypto/crc32_generic",
    "drivers/firmware/qemu_fw_cfg",
    "drivers/virtio/virtio_ring",
    "drivers/virtio/virtio",
    "drivers/virtio/virtio_pci_modern_dev",
    "drivers/virtio/virtio_pci_legacy_dev",
    "drivers/virtio/virtio_pci",
    "net/core/failover",
    "drivers/net/net_failover",
    "drivers/net/virtio_net",
    "drivers/net/ethernet/intel/e1000/e1000",
    "net/ipv4/udp_tunnel",
    "net/ipv6/ip6_udp_tunnel",
    // 802.1Q (VLAN scenarios): llc, stp, garp, mrp, then 8021q
    "net/llc/llc",
    "net/802/stp",
    "net/802/garp",
    "net/802/mrp",
    "net/8021q/8021q",
    "drivers/infiniband/core/ib_core",
    "drivers/infiniband/core/ib_uverbs",
    "drivers/infiniband/sw/rxe/rdma_rxe",
    "fs/configfs/configfs",
    "drivers/infiniband/core/ib_cm",
    "drivers/infiniband/core/iw_cm",
    "drivers/infiniband/core/rdma_cm",
    "drivers/infiniband/core/rdma_ucm",
];

/// The NVMe host and target modules with what they need, in the order of
/// `modprobe --show-depends nvme_rdma nvmet_rdma ext4` on the kernel
/// package's `modules.dep` (`depmod -b`), loaded after [`MODULES`] only by
/// a guest whose env says `NVME=1` (`/modules/nvme/`). The CPU-specific
/// crct10dif-pclmul and crc32c-intel are left out (TCG's CPU has no
/// PCLMULQDQ / SSE4.2); their generic shash providers go in front of the
/// library that asks for the algorithm (modprobe.d softdeps: crc_t10dif
/// pre crct10dif, crc64_rocksoft pre crc64, ext4 / jbd2 pre crc32c).
const NVME_MODULES: &[&str] = &[
    "crypto/crct10dif_common",
    "crypto/crct10dif_generic",
    "lib/crc-t10dif",
    "lib/crc64",
    "crypto/crc64_rocksoft_generic",
    "lib/crc64-rocksoft",
    "block/t10-pi",
    "drivers/nvme/host/nvme-core",
    "drivers/nvme/host/nvme-fabrics",
    "drivers/nvme/host/nvme-rdma",
    "drivers/nvme/target/nvmet",
    "drivers/nvme/target/nvmet-rdma",
    "crypto/crc32c_generic",
    "fs/jbd2/jbd2",
    "fs/mbcache",
    "lib/crc16",
    "fs/ext4/ext4",
];

/// Modules in `/modules/opt/`, loaded by a scenario script with parameters
/// (`brd rd_nr=1 rd_size=…`: the reference target's RAM disk).
const OPT_MODULES: &[&str] = &["drivers/block/brd"];

/// Scripts in the guest's `/usr/bin` (issue #32).
const SCRIPTS: &[(&str, &[u8])] = &[
    ("usr/bin/nvme-host.sh", include_bytes!("../peer/nvme-host.sh")),
    ("usr/bin/nvmet-target.sh", include_bytes!("../peer/nvmet-target.sh")),
];

/// (path in the unpacked packages, path in the guest).
const BINARIES: &[(&str, &str)] = &[
    ("usr/bin/rping", "usr/bin/rping"),
    ("usr/bin/ucmatose", "usr/bin/ucmatose"),
    ("usr/bin/udaddy", "usr/bin/udaddy"),
    ("usr/bin/ibv_rc_pingpong", "usr/bin/ibv_rc_pingpong"),
    ("usr/bin/ibv_devinfo", "usr/bin/ibv_devinfo"),
    ("usr/bin/ib_write_bw", "usr/bin/ib_write_bw"),
    ("usr/bin/ib_read_bw", "usr/bin/ib_read_bw"),
    ("usr/bin/ib_send_bw", "usr/bin/ib_send_bw"),
    ("usr/bin/rdma", "usr/bin/rdma"),
    // iproute2's `ip`; busybox's applet of that name is not linked
    ("bin/ip", "usr/sbin/ip"),
    ("usr/sbin/nvme", "usr/sbin/nvme"),
    ("sbin/mke2fs", "usr/sbin/mke2fs"),
];

/// busybox applets linked in `/bin` (not `ip`: notes, "The guest").
const APPLETS: &[&str] = &[
    "sh", "mount", "mkdir", "cat", "echo", "sleep", "insmod", "poweroff", "ls", "grep", "sed",
    "cut", "seq", "head", "tail", "dmesg", "arping", "ping", "ping6", "timeout", "kill", "true",
    "false", "test", "[", "uname", "wc", "tr", "date", "ps", "env", "hexdump", "md5sum",
    // the NVMe scripts (busybox dd has iflag/oflag=direct)
    "awk", "cmp", "sync", "umount", "rm", "cp", "yes", "ln", "dd", "stat", "basename", "sort",
    "uniq", "tee", "expr",
];

const LIBDIR: &str = "lib/x86_64-linux-gnu";

const QEMU: &str = "qemu-system-x86_64";

/// A Linux client's shell: `cmd` (its output to /tmp/o, then printed)
/// tried up to 10 times a second apart while the host side is not up yet,
/// i.e. while a failed try's output lacks `up` (what the tool prints once
/// it reached the host side); its exit status then.
macro_rules! retried_until_up {
    ($cmd:literal, $up:literal) => {
        concat!(
            "for i in 1 2 3 4 5 6 7 8 9 10; do ",
            $cmd,
            " >/tmp/o 2>&1; rc=$?; cat /tmp/o; [ $rc = 0 ] && exit 0; grep -q '",
            $up,
            "' /tmp/o && exit $rc; sleep 1; done; exit 1"
        )
    };
}

/// One scenario: the guest's command, the host side's test, the line of
/// the Linux tool's output that is its result.
struct Scenario {
    name: &'static str,
    what: &'static str,
    /// Shell run in the guest after rxe0 is up (sees the fw_cfg env).
    linux: &'static str,
    /// The `tests/peer_live.rs` test that is the host side.
    host_test: &'static str,
    /// Lines of the serial log that start with one of these are printed.
    result: &'static [&'static str],
    /// Guest NIC MTU.
    mtu: u32,
    /// Over IPv6 (`PEER_IPV6=1` on the host; the guest's `$PEER_ADDR` /
    /// `$MODEL_ADDR` are then fd00::b / fd00::a).
    ipv6: bool,
    /// 802.1Q VLAN id of the guest's addresses (`VLAN` in the guest,
    /// `PEER_VLAN` on the host), 0 = untagged.
    vlan: u16,
    /// rping's `-S` on both sides (`RPING_SIZE` in the guest,
    /// `PEER_RPING_SIZE` on the host).
    size: u32,
    /// How long the host side may run on after the guest powered off.
    host_grace_s: u64,
    /// Boot the guest a second time: once the first powered off and the
    /// host side printed [`NEXT_PEER`] (within `host_grace_s`), the same
    /// kernel and initramfs boot again on the same ports with this shell
    /// command instead of `linux`; both guests must exit 0.
    again: Option<&'static str>,
}

/// The host side's line that asks for the second boot of a scenario with
/// `again` (`tests/peer_live.rs`: `NEXT_PEER`).
const NEXT_PEER: &str = "host: ready for the next peer";

/// What a scenario has unless it says otherwise: MTU 1500, 64-byte pings,
/// IPv4, untagged, 15 s of grace, one boot.
const BASE: Scenario = Scenario {
    name: "",
    what: "",
    linux: "",
    host_test: "",
    result: &[],
    mtu: 1500,
    size: 64,
    ipv6: false,
    vlan: 0,
    host_grace_s: 15,
    again: None,
};

/// rping with Linux as the server (`rping -s`): the driver connects through
/// the CM over QP1 and plays rping's client. The scenarios below vary its
/// MTU, size, address family and VLAN.
const RPING_SERVER: Scenario = Scenario {
    name: "rping-linux-server",
    what: "Linux `rping -s` listens, the driver connects (CM over QP1) and plays rping's client",
    linux: "rping -s -a $PEER_ADDR -S $RPING_SIZE -V -v; rc=$?; exit $rc",
    host_test: "peer_rping_driver_client",
    result: &["server ping data", "server DISCONNECT", "cma event", "rping", "wait for"],
    ..BASE
};

/// rping with Linux as the client (`rping -c -V -C 3`): the driver listens
/// and plays rping's server.
const RPING_CLIENT: Scenario = Scenario {
    name: "rping-linux-client",
    what: "the driver listens and plays rping's server, Linux `rping -c -V -C 3` connects",
    // the host side may not listen yet when the guest is up: retry
    linux: "for i in 1 2 3 4 5 6 7 8 9 10; do rping -c -a $MODEL_ADDR -S $RPING_SIZE -V -v -C 3 && exit 0; sleep 1; done; exit 1",
    host_test: "peer_rping_driver_server",
    result: &["ping data", "client DISCONNECT", "cma event", "rping", "data mismatch", "wait for"],
    ..BASE
};

/// perftest `-R` with Linux as the server (`ib_*_bw -R -n 100 -s SIZE`):
/// the driver is its client (comm QP and data QP, both through the CM;
/// `tests/peer_live.rs` has the protocol). The `RPING_SIZE` of the scenario
/// is perftest's `-s`.
const PERFTEST_SERVER: Scenario = Scenario {
    name: "perftest-write-linux-server",
    what: "Linux `ib_write_bw -R` serves, the driver is its client: 100 WRITEs of 4096 bytes",
    linux: "ib_write_bw -R -F -n 100 -s $RPING_SIZE; rc=$?; exit $rc",
    host_test: "peer_perftest_write_driver_client",
    result: &[
        "#bytes",
        "4096 ",
        "local address",
        "remote address",
        "Unable",
        "Failed",
        "Couldn't",
        "Bad wc",
        "Completion",
        "Current implementation",
    ],
    size: 4096,
    host_grace_s: 20,
    ..BASE
};

/// perftest `-R` with Linux as the client; the driver serves. Retried while
/// the host side does not answer yet (no `local address` printed).
const PERFTEST_CLIENT: Scenario = Scenario {
    name: "perftest-write-linux-client",
    what: "Linux `ib_write_bw -R` connects to the driver and WRITEs 100 × 4096 bytes into it",
    linux: retried_until_up!(
        "ib_write_bw -R -F -n 100 -s $RPING_SIZE $MODEL_ADDR",
        "local address"
    ),
    host_test: "peer_perftest_write_driver_server",
    ..PERFTEST_SERVER
};

/// `peer-vanishes`: Linux `rping -c -V` to the driver, and the guest
/// powers off mid-transfer.
const PEER_VANISHES: Scenario = Scenario {
    name: "peer-vanishes",
    what: "Linux `rping -c -V` to the driver powers off after 20 pings: every WR flushed once, all back",
    // rping in the background (again while the host side is not up
    // yet); after 20 pings the guest exits to init's `poweroff -f`: the
    // kernel sends no DREQ, rxe no last ACK
    linux: "(for i in 1 2 3 4 5 6 7 8 9 10; do rping -c -a $MODEL_ADDR -S $RPING_SIZE -V -v -C 1000000 >>/tmp/o 2>&1; sleep 1; done) & \
            i=0; while n=$(grep -c 'ping data' /tmp/o 2>/dev/null); [ \"${n:-0}\" -lt 20 ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i + 1)); done; \
            tail -n 2 /tmp/o; echo \"peer vanishes after ${n:-0} pings\"; [ \"${n:-0}\" -ge 20 ]",
    host_test: "peer_vanishes_mid_transfer",
    result: &["peer vanishes", "ping data", "cma event", "rping", "data mismatch", "wait for"],
    // the driver's DREQ to the vanished peer: Linux's REQ asks for
    // 15 retries of ~4.3 s (cma.c CMA_MAX_CM_RETRIES, CMA_CM_RESPONSE_TIMEOUT)
    host_grace_s: 150,
    ..BASE
};

/// The `PEER-EXIT` status of a serial log, printing its result lines
/// (`PEER-…`, and those starting with one of `show` after any indent) with
/// `tag`, cut to `width` characters.
fn exit_of(serial: &Path, tag: &str, show: &[&str], width: usize) -> Option<i32> {
    let log = std::fs::read_to_string(serial).unwrap_or_default();
    let mut exit = None;
    for l in log.lines() {
        let l = l.trim_end_matches('\r');
        if let Some(v) = l.strip_prefix("PEER-EXIT ") {
            exit = v.trim().parse::<i32>().ok();
        }
        if l.starts_with("PEER-") || show.iter().any(|r| l.trim_start().starts_with(r)) {
            let short: String = l.chars().take(width).collect();
            println!("{tag}: {short}");
        }
    }
    exit
}

/// What rdma-core's librdmacm examples print as their result (`cmatose` /
/// `ucmatose` and `udaddy`): their name, each phase and the final status.
const CMA_EXAMPLE_RESULT: &[&str] = &[
    "cmatose",
    "udaddy",
    "initiating",
    "completing",
    "receiving",
    "sending",
    "data transfers",
    "disconnected",
    "test complete",
    "return status",
];

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "arp",
        what: "Linux resolves the model port's MAC by ARP (busybox arping)",
        linux: "arping -c 3 -w 20 -I eth0 $MODEL_IP; rc=$?; /usr/sbin/ip neigh show dev eth0; exit $rc",
        host_test: "peer_arp",
        result: &["Received", "Sent", "10.0.0.1 lladdr"],
        ..BASE
    },
    RPING_SERVER,
    RPING_CLIENT,
    Scenario {
        name: "rping-linux-server-5000",
        what: "rping-linux-server with 5000-byte pings (multi-packet READ responses and WRITEs)",
        size: 5000,
        ..RPING_SERVER
    },
    Scenario {
        name: "rping-linux-client-5000",
        what: "rping-linux-client with 5000-byte pings: every READ and WRITE is 5 packets at MTU 1024",
        size: 5000,
        ..RPING_CLIENT
    },
    Scenario {
        name: "rping-linux-client-badframes",
        what: "rping-linux-client with 20 pings; mid-run the harness injects broken copies of the guest's \
               frames and a stale duplicate SEND: each dropped or re-ACKed, counted by reason",
        linux: "for i in 1 2 3 4 5 6 7 8 9 10; do rping -c -a $MODEL_ADDR -S $RPING_SIZE -V -v -C 20 && exit 0; sleep 1; done; exit 1",
        host_test: "peer_rping_badframes",
        ..RPING_CLIENT
    },
    Scenario {
        name: "reject",
        what: "Linux `rping -c` to a port nobody listens on: the driver's CM answers REJ 8",
        // retried while the host side is not up yet (no answer at all)
        linux: "for i in 1 2 3 4 5 6 7 8 9 10; do rping -c -a $MODEL_IP -p 7175 -C 1 >/tmp/o 2>&1; cat /tmp/o; grep -q 'REJECTED, error 8' /tmp/o && exit 0; sleep 1; done; exit 1",
        host_test: "peer_reject",
        result: &["cma event", "rping", "connect error"],
        ..BASE
    },
    Scenario {
        name: "rping-linux-server-ipv6",
        what: "rping-linux-server over IPv6 (fd00::b / fd00::a, neighbour discovery answered by the port)",
        ipv6: true,
        ..RPING_SERVER
    },
    Scenario {
        name: "rping-linux-client-ipv6",
        what: "rping-linux-client over IPv6",
        ipv6: true,
        ..RPING_CLIENT
    },
    Scenario {
        name: "rping-linux-server-mtu4096",
        what: "guest MTU 9000, path MTU 4096: 9000-byte pings in 4096-byte packets, driver as client",
        mtu: 9000,
        size: 9000,
        ..RPING_SERVER
    },
    Scenario {
        name: "rping-linux-client-mtu4096",
        what: "guest MTU 9000, path MTU 4096 (from Linux's REQ), driver as server",
        mtu: 9000,
        size: 9000,
        ..RPING_CLIENT
    },
    Scenario {
        name: "rping-linux-server-vlan",
        what: "rping-linux-server over 802.1Q VLAN 100 on the Linux side (tagged frames both ways)",
        vlan: 100,
        ..RPING_SERVER
    },
    Scenario {
        name: "rping-linux-client-vlan",
        what: "rping-linux-client over 802.1Q VLAN 100",
        vlan: 100,
        ..RPING_CLIENT
    },
    Scenario {
        name: "ucmatose-linux-client",
        what: "Linux `ucmatose -c 2` opens two connections to the driver, 10 SENDs each way on each",
        linux: retried_until_up!("ucmatose -s $MODEL_ADDR -c 2", "data transfers"),
        host_test: "peer_ucmatose_driver_server",
        result: CMA_EXAMPLE_RESULT,
        ..BASE
    },
    Scenario {
        name: "ucmatose-linux-server",
        what: "Linux `ucmatose -c 2` listens, the driver opens two connections, 10 SENDs each way on each, Linux's DREQs",
        linux: "ucmatose -c 2 -C 10; rc=$?; exit $rc",
        host_test: "peer_ucmatose_driver_client",
        result: CMA_EXAMPLE_RESULT,
        ..BASE
    },
    Scenario {
        name: "udaddy-linux-client",
        what: "Linux `udaddy -s` resolves the driver's UDP port 7174 by SIDR, 10 UD datagrams each way",
        // retried while the host side is not up yet
        linux: retried_until_up!("udaddy -s $MODEL_ADDR", "data transfers"),
        host_test: "peer_udaddy_driver_server",
        result: CMA_EXAMPLE_RESULT,
        ..BASE
    },
    Scenario {
        name: "udaddy-linux-server",
        what: "Linux `udaddy` listens, the driver resolves it by SIDR and plays udaddy's client",
        linux: "udaddy; rc=$?; exit $rc",
        host_test: "peer_udaddy_driver_client",
        result: CMA_EXAMPLE_RESULT,
        ..BASE
    },
    PEER_VANISHES,
    Scenario {
        name: "peer-vanishes-then-reconnects",
        what: "peer-vanishes, then the guest boots again: `rping -c -V -C 3` accepted on the same listener, all back",
        host_test: "peer_vanishes_then_reconnects",
        // the host side asked for it (`NEXT_PEER`): it listens already
        again: Some(
            "rping -c -a $MODEL_ADDR -S $RPING_SIZE -V -v -C 3 >/tmp/o 2>&1; rc=$?; cat /tmp/o; \
             n=$(grep -c 'ping data' /tmp/o); echo \"next peer: rping exit $rc after $n pings\"; [ $rc = 0 ] && [ \"$n\" = 3 ]",
        ),
        result: &[
            "peer vanishes",
            "next peer",
            "ping data",
            "cma event",
            "rping",
            "data mismatch",
            "wait for",
        ],
        ..PEER_VANISHES
    },
    PERFTEST_SERVER,
    Scenario {
        name: "perftest-read-linux-server",
        what: "Linux `ib_read_bw -R` serves, the driver is its client: 100 READs of 4096 bytes",
        linux: "ib_read_bw -R -F -n 100 -s $RPING_SIZE; rc=$?; exit $rc",
        host_test: "peer_perftest_read_driver_client",
        ..PERFTEST_SERVER
    },
    Scenario {
        name: "perftest-send-linux-server",
        what: "Linux `ib_send_bw -R` serves, the driver is its client: 100 SENDs of 4096 bytes",
        linux: "ib_send_bw -R -F -n 100 -s $RPING_SIZE; rc=$?; exit $rc",
        host_test: "peer_perftest_send_driver_client",
        ..PERFTEST_SERVER
    },
    PERFTEST_CLIENT,
    Scenario {
        name: "perftest-read-linux-client",
        what: "Linux `ib_read_bw -R` connects to the driver and READs 100 × 4096 bytes from it",
        linux: retried_until_up!(
            "ib_read_bw -R -F -n 100 -s $RPING_SIZE $MODEL_ADDR",
            "local address"
        ),
        host_test: "peer_perftest_read_driver_server",
        ..PERFTEST_CLIENT
    },
    Scenario {
        name: "perftest-send-linux-client",
        what: "Linux `ib_send_bw -R` connects to the driver and SENDs 100 × 4096 bytes to it",
        linux: retried_until_up!(
            "ib_send_bw -R -F -n 100 -s $RPING_SIZE $MODEL_ADDR",
            "local address"
        ),
        host_test: "peer_perftest_send_driver_server",
        ..PERFTEST_CLIENT
    },
];

/// A stage-two scenario: the unikernel in QEMU, through the model process,
/// to the Linux guest.
struct UkScenario {
    name: &'static str,
    what: &'static str,
    /// `peer=` of the unikernel's command line (`irdma_boot::peercfg`).
    role: &'static str,
    /// Shell run in the Linux guest after rxe0 is up.
    linux: &'static str,
    /// Lines of the Linux serial log that start with one of these are printed.
    result: &'static [&'static str],
    /// rping `-C` on both sides.
    count: u32,
    /// rping `-S` on both sides.
    size: u32,
    /// More lines of the Linux guest's env file.
    env: &'static str,
    /// More words of the unikernel's command line.
    cmdline: &'static str,
    /// How long the unikernel may run (its QEMU's timeout).
    limit_s: u64,
    /// Judge the capture with tshark's NVMe/RDMA dissector too
    /// ([`crate::nvme_wire`]).
    nvme: bool,
}

/// The `peer_*` group: each is also the name of the unikernel's scenario line.
/// What a unikernel scenario has unless it says otherwise: 3 rounds of
/// 64 bytes, no extra env or command line, 300 s, no NVMe checks.
const UK_BASE: UkScenario = UkScenario {
    name: "",
    what: "",
    role: "",
    linux: "",
    result: &[],
    count: 3,
    size: 64,
    env: "",
    cmdline: "",
    limit_s: 300,
    nvme: false,
};

const UK_SCENARIOS: &[UkScenario] = &[
    UkScenario {
        name: "peer_rping_server",
        what: "the unikernel listens and plays rping's server, Linux `rping -c -V -C 3` connects",
        role: "rping-server",
        // the unikernel may not listen yet when the guest is up: retry
        linux: "for i in 1 2 3 4 5 6 7 8 9 10; do rping -c -a $MODEL_ADDR -S $RPING_SIZE -V -v -C $RPING_COUNT && exit 0; sleep 1; done; exit 1",
        result: &[
            "ping data",
            "client DISCONNECT",
            "cma event",
            "rping",
            "data mismatch",
            "wait for",
        ],
        ..UK_BASE
    },
    UkScenario {
        name: "peer_rping_client",
        what: "Linux `rping -s -V` listens, the unikernel connects and plays rping's client",
        role: "rping-client",
        linux: "rping -s -a $PEER_ADDR -S $RPING_SIZE -V -v; rc=$?; exit $rc",
        result: &["server ping data", "server DISCONNECT", "cma event", "rping", "wait for"],
        ..UK_BASE
    },
    UkScenario {
        name: "peer_nvmet",
        what: "the unikernel serves an NVMe/RDMA target (irdma-nvmet: 64 MiB RAM namespace, 4 I/O \
               queues, discovery); nvme-host.sh discovers, connects, verifies, restarts it, measures",
        role: "nvme-target",
        linux: "nvme-host.sh",
        result: &["NVME", "nvme-host"],
        env: "NVME=1\nNVME_HOOKS=1\n",
        cmdline: " ns_mib=64 nvme_io_queues=4",
        limit_s: 900,
        nvme: true,
        ..UK_BASE
    },
];

/// The guest's and the model's identities (the tests' A = model, B = guest).
const MODEL_MAC: &str = "02:00:00:00:00:0a";
const MODEL_IP: &str = "10.0.0.1";
const PEER_MAC: &str = "02:00:00:00:00:0b";
const PEER_IP: &str = "10.0.0.2";
const MODEL_IP6: &str = "fd00::a";
const PEER_IP6: &str = "fd00::b";

/// Entry point of `cargo xtask peer`.
pub fn main(args: &[String]) -> ExitCode {
    let r = match args.first().map(String::as_str) {
        Some("build") => build().map(|b| {
            println!("peer: kernel {}", b.kernel.display());
            println!("peer: initramfs {}", b.initrd.display());
            0
        }),
        Some("run") => match args.get(1) {
            Some(s) => run(s),
            None => {
                Err("usage: cargo xtask peer run SCENARIO (see `cargo xtask peer list`)".into())
            }
        },
        // the NVMe/RDMA judge alone, on any capture (issue #32)
        Some("nvme-wire") => match args.get(1) {
            Some(f) => crate::nvme_wire::judge(Path::new(f)).map(|w| {
                println!("nvme-wire: {}", w.summary());
                let fails = w.failures();
                for f in &fails {
                    println!("nvme-wire: FAIL {f}");
                }
                i32::from(!fails.is_empty())
            }),
            None => Err("usage: cargo xtask peer nvme-wire FILE.pcap[ng]".into()),
        },
        Some("list") => {
            for s in SCENARIOS {
                println!("{:24} {}", s.name, s.what);
            }
            for s in UK_SCENARIOS {
                println!("{:24} (unikernel) {}", s.name, s.what);
            }
            println!("{:24} (two guests) {}", nvme::NAME, nvme::WHAT);
            Ok(0)
        }
        _ => Err("usage: cargo xtask peer build | run SCENARIO | list | nvme-wire FILE".into()),
    };
    match r {
        Ok(0) => ExitCode::SUCCESS,
        Ok(c) => ExitCode::from(c.clamp(1, 255) as u8),
        Err(e) => {
            eprintln!("peer: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Scenarios the `peer` leg runs only in the long mode
/// (`IRDMA_PEER_LONG=1`): new ones until they passed three times in a row,
/// and those that would push the leg past its time budget.
const LONG_ONLY: &[&str] = &[
    "perftest-write-linux-server",
    "perftest-read-linux-server",
    "perftest-send-linux-server",
    "perftest-write-linux-client",
    "perftest-read-linux-client",
    "perftest-send-linux-client",
    // superseded by peer-vanishes-then-reconnects (the same, and then the
    // next connection), which passed three times in a row
    "peer-vanishes",
];

/// The scenarios of the `nvme` leg ([`nvme_leg`]), not the `peer` leg's.
const NVME_LEG: [&str; 2] = [nvme::NAME, "peer_nvmet"];

/// The `peer` leg of `cargo xtask test`: every scenario once, in order —
/// stage one (the driver in a host test), then stage two (the unikernel
/// in QEMU through the model process); those of [`LONG_ONLY`] only with
/// `IRDMA_PEER_LONG=1`, those of [`NVME_LEG`] in their own leg.
pub fn leg() -> Result<String, String> {
    let long = std::env::var("IRDMA_PEER_LONG").is_ok_and(|v| v == "1");
    let names = SCENARIOS
        .iter()
        .map(|s| s.name)
        .chain(UK_SCENARIOS.iter().map(|s| s.name))
        .filter(|n| !NVME_LEG.contains(n))
        .filter(|n| long || !LONG_ONLY.contains(n));
    run_all(names)
}

/// The `nvme` leg (issue #32): Linux's own nvmet-rdma target between two
/// guests, then the unikernel's `irdma-nvmet` target with a Linux host; both
/// print nvme-host.sh's checks and `NVME-PERF` figures in the same run.
pub fn nvme_leg() -> Result<String, String> {
    run_all(NVME_LEG.into_iter())
}

fn run_all<'a>(names: impl Iterator<Item = &'a str>) -> Result<String, String> {
    let mut out = Vec::new();
    for name in names {
        let t0 = Instant::now();
        let code = run(name)?;
        let line = format!(
            "{} {} {:.0} s",
            name,
            if code == 0 { "ok" } else { "FAILED" },
            t0.elapsed().as_secs_f64()
        );
        if code != 0 {
            return Err(format!("{}; logs in target/peer/{}", line, name));
        }
        out.push(line);
    }
    Ok(out.join(", "))
}

/// The cache directory (outside the repository).
fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("irdma-peer")
}

/// What `build` produced.
#[derive(Clone, Debug)]
pub struct Built {
    /// The guest kernel (`vmlinuz`).
    pub kernel: PathBuf,
    /// The initramfs (uncompressed newc cpio).
    pub initrd: PathBuf,
}

fn run_ok(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("cannot run {what}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The kernel image package `linux-image-amd64` depends on.
fn kernel_package() -> String {
    let out = Command::new("apt-cache").args(["depends", "linux-image-amd64"]).output();
    out.ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout).lines().find_map(|l| {
                let d = l.trim().strip_prefix("Depends: ")?;
                d.starts_with("linux-image-").then(|| d.to_string())
            })
        })
        .unwrap_or_else(|| KERNEL_FALLBACK.to_string())
}

/// `apt-get download` of every package not yet in `debs` (one
/// `apt-get update` first if the download fails).
fn fetch(debs: &Path, pkgs: &[String]) -> Result<(), String> {
    std::fs::create_dir_all(debs).map_err(|e| format!("{}: {e}", debs.display()))?;
    let have = |p: &str| {
        std::fs::read_dir(debs).into_iter().flatten().flatten().any(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(&format!("{p}_")) && n.ends_with(".deb")
        })
    };
    let missing: Vec<&String> = pkgs.iter().filter(|p| !have(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    println!("peer: apt-get download {} package(s) into {}", missing.len(), debs.display());
    let download = || {
        Command::new("apt-get")
            .arg("download")
            .args(&missing)
            .current_dir(debs)
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if download() {
        return Ok(());
    }
    println!("peer: apt-get update, then again");
    let _ = Command::new("apt-get").arg("update").stdout(Stdio::null()).status();
    if download() { Ok(()) } else { Err(format!("apt-get download failed for {missing:?}")) }
}

/// Builds (or reuses) the kernel and the initramfs, once per xtask
/// process: the `peer` leg runs every scenario from one process, and
/// writing the 13 MiB initramfs again for each cost 2–4 s of the leg's
/// 10-minute budget per scenario.
pub fn build() -> Result<Built, String> {
    static BUILT: std::sync::Mutex<Option<Built>> = std::sync::Mutex::new(None);
    let mut b = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(b) = b.as_ref() {
        return Ok(b.clone());
    }
    let fresh = build_fresh()?;
    *b = Some(fresh.clone());
    Ok(fresh)
}

fn build_fresh() -> Result<Built, String> {
    for p in ["apt-get", "dpkg-deb", "ldd"] {
        if which(p).is_none() {
            return Err(format!("`{p}` is needed (a Debian-like host)"));
        }
    }
    let t0 = Instant::now();
    let cache = cache_dir();
    let debs = cache.join("debs");
    let kernel_pkg = kernel_package();
    let mut pkgs: Vec<String> = PACKAGES.iter().map(|s| s.to_string()).collect();
    pkgs.push(kernel_pkg.clone());
    fetch(&debs, &pkgs)?;
    // unpack every .deb (again when the set of .debs changed)
    let mut names: Vec<String> = std::fs::read_dir(&debs)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".deb"))
        .collect();
    names.sort();
    let rootfs = cache.join("root");
    let stamp = cache.join("root.stamp");
    let want = names.join("\n");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(want.as_str()) {
        let _ = std::fs::remove_dir_all(&rootfs);
        std::fs::create_dir_all(&rootfs).map_err(|e| e.to_string())?;
        for n in &names {
            run_ok(
                Command::new("dpkg-deb").arg("-x").arg(debs.join(n)).arg(&rootfs),
                "dpkg-deb -x",
            )?;
        }
        std::fs::write(&stamp, &want).map_err(|e| e.to_string())?;
    }
    let kver = kernel_pkg.trim_start_matches("linux-image-").to_string();
    let kernel = rootfs.join(format!("boot/vmlinuz-{kver}"));
    if !kernel.is_file() {
        return Err(format!("no kernel at {}", kernel.display()));
    }
    let mut t = Tree::default();
    for d in ["bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev", "tmp", "run", "lib64"] {
        t.dir(d);
    }
    t.file("init", include_bytes!("../peer/init.sh").to_vec(), 0o755);
    t.file("bin/busybox", read(&rootfs.join("bin/busybox"))?, 0o755);
    for a in APPLETS {
        t.symlink(&format!("bin/{a}"), "busybox");
    }
    let mdir = rootfs.join(format!("lib/modules/{kver}/kernel"));
    for (i, m) in MODULES.iter().enumerate() {
        let name = m.rsplit('/').next().unwrap_or(m);
        t.file(&format!("modules/{i:02}-{name}.ko"), read(&mdir.join(format!("{m}.ko")))?, 0o644);
    }
    let libpath =
        format!("{}:{}", rootfs.join(LIBDIR).display(), rootfs.join("usr").join(LIBDIR).display());
    let provider = format!("usr/{LIBDIR}/libibverbs/librxe-rdmav34.so");
    let mut elfs: Vec<(PathBuf, String)> =
        BINARIES.iter().map(|(from, to)| (rootfs.join(from), to.to_string())).collect();
    elfs.push((rootfs.join(&provider), provider.clone()));
    let mut libs: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (from, to) in &elfs {
        t.file(to, read(from)?, 0o755);
        let out = run_ok(Command::new("ldd").arg(from).env("LD_LIBRARY_PATH", &libpath), "ldd")?;
        for l in out.lines() {
            if l.contains("not found") {
                return Err(format!("{}: {}", from.display(), l.trim()));
            }
            if let Some((name, rest)) = l.trim().split_once(" => ")
                && let Some(p) = rest.split_whitespace().next()
                && p.starts_with('/')
            {
                libs.insert(name.to_string(), PathBuf::from(p));
            }
        }
    }
    // pthread_cancel opens libgcc_s at run time (notes)
    libs.insert("libgcc_s.so.1".into(), rootfs.join(LIBDIR).join("libgcc_s.so.1"));
    for (name, p) in &libs {
        t.file(&format!("{LIBDIR}/{name}"), read(p)?, 0o755);
    }
    let loader = read(&rootfs.join(LIBDIR).join("ld-linux-x86-64.so.2"))?;
    t.file(&format!("{LIBDIR}/ld-linux-x86-64.so.2"), loader, 0o755);
    t.symlink("lib64/ld-linux-x86-64.so.2", "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2");
    for (i, m) in NVME_MODULES.iter().enumerate() {
        let name = m.rsplit('/').next().unwrap_or(m);
        let ko = read(&mdir.join(format!("{m}.ko")))?;
        t.file(&format!("modules/nvme/{i:02}-{name}.ko"), ko, 0o644);
    }
    for m in OPT_MODULES {
        let name = m.rsplit('/').next().unwrap_or(m);
        t.file(&format!("modules/opt/{name}.ko"), read(&mdir.join(format!("{m}.ko")))?, 0o644);
    }
    for (to, data) in SCRIPTS {
        t.file(to, data.to_vec(), 0o755);
    }
    t.symlink("usr/sbin/mkfs.ext4", "mke2fs");
    t.file("etc/mke2fs.conf", read(&rootfs.join("etc/mke2fs.conf"))?, 0o644);
    t.file(
        "etc/libibverbs.d/rxe.driver",
        read(&rootfs.join("etc/libibverbs.d/rxe.driver"))?,
        0o644,
    );
    let initrd = cache.join("initramfs.cpio");
    std::fs::write(&initrd, t.cpio()).map_err(|e| format!("{}: {e}", initrd.display()))?;
    println!(
        "peer: initramfs {} ({} KiB, {} libraries) in {:.1} s",
        initrd.display(),
        std::fs::metadata(&initrd).map_or(0, |m| m.len() / 1024),
        libs.len(),
        t0.elapsed().as_secs_f64()
    );
    Ok(Built { kernel, initrd })
}

fn read(p: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))
}

/// The initramfs contents.
#[derive(Default)]
struct Tree {
    /// path → (mode, data); directories have no data.
    entries: BTreeMap<String, (u32, Vec<u8>)>,
}

impl Tree {
    fn dir(&mut self, p: &str) {
        let mut acc = String::new();
        for part in p.split('/') {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(part);
            self.entries.entry(acc.clone()).or_insert((0o040_755, Vec::new()));
        }
    }

    fn parent(&mut self, p: &str) {
        if let Some((d, _)) = p.rsplit_once('/') {
            self.dir(d);
        }
    }

    fn file(&mut self, p: &str, data: Vec<u8>, mode: u32) {
        self.parent(p);
        self.entries.insert(p.to_string(), (0o100_000 | mode, data));
    }

    fn symlink(&mut self, p: &str, target: &str) {
        self.parent(p);
        self.entries.insert(p.to_string(), (0o120_777, target.as_bytes().to_vec()));
    }

    /// An uncompressed "newc" cpio archive (the kernel's initramfs format,
    /// Documentation/driver-api/early-userspace/buffer-format.rst).
    fn cpio(&self) -> Vec<u8> {
        fn pad(o: &mut Vec<u8>) {
            while !o.len().is_multiple_of(4) {
                o.push(0);
            }
        }
        fn entry(o: &mut Vec<u8>, ino: usize, name: &str, mode: u32, data: &[u8]) {
            let nlink = if mode & 0o170_000 == 0o040_000 { 2 } else { 1 };
            let fields =
                [ino, mode as usize, 0, 0, nlink, 0, data.len(), 0, 0, 0, 0, name.len() + 1, 0];
            o.extend_from_slice(b"070701");
            for f in fields {
                o.extend_from_slice(format!("{f:08x}").as_bytes());
            }
            o.extend_from_slice(name.as_bytes());
            o.push(0);
            pad(o);
            o.extend_from_slice(data);
            pad(o);
        }
        let mut o = Vec::new();
        for (i, (name, (mode, data))) in self.entries.iter().enumerate() {
            entry(&mut o, i + 1, name, *mode, data);
        }
        entry(&mut o, 0, "TRAILER!!!", 0, &[]);
        o
    }
}

/// Writes a guest run's `env` and `run` (the Linux command line) into `out`
/// and clears the last run's serial log and capture; returns their paths.
fn stage_run(out: &Path, env: &str, linux: &str) -> Result<(PathBuf, PathBuf), String> {
    std::fs::write(out.join("env"), env).map_err(|e| e.to_string())?;
    std::fs::write(out.join("run"), format!("{linux}\n")).map_err(|e| e.to_string())?;
    let serial = out.join("serial.log");
    let pcap = out.join("wire.pcap");
    let _ = std::fs::remove_file(&serial);
    let _ = std::fs::remove_file(&pcap);
    Ok((serial, pcap))
}

/// Whether the two QEMUs (or model and QEMU) can each be pinned to a CPU of
/// their own: two CPUs and `taskset` present.
fn two_cpus() -> bool {
    std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 && which("taskset").is_some()
}

/// A free UDP port on the loopback address.
fn free_udp_port() -> Result<u16, String> {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(s.local_addr().map_err(|e| e.to_string())?.port())
}

fn pinned(cpu: Option<u32>, program: &str) -> Command {
    match cpu {
        Some(c) => {
            let mut cmd = Command::new("taskset");
            cmd.arg("-c").arg(c.to_string()).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

/// Boots the guest for `name` next to its host side; returns the exit code.
fn run(name: &str) -> Result<i32, String> {
    if let Some(uk) = UK_SCENARIOS.iter().find(|s| s.name == name) {
        return run_uk(uk);
    }
    if name == nvme::NAME {
        return nvme::run();
    }
    let sc = scenario(name)?;
    let qemu = ensure_program(&crate::qemu::QEMU_PACKAGE)?;
    let built = build()?;
    let out = root().join("target/peer").join(sc.name);
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    // the host side is compiled before the guest boots
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(&cargo)
        .args(HOST_TEST_ARGS)
        .arg("--no-run")
        .current_dir(root())
        .status()
        .map_err(|e| e.to_string())?;
    if !st.success() {
        return Err("cannot build tests/peer_live.rs".into());
    }
    let (model_port, guest_port) = (free_udp_port()?, free_udp_port()?);
    let (serial, pcap) = stage_run(&out, &scenario_env(sc), sc.linux)?;
    let two = two_cpus();
    let (host_cpu, guest_cpu) = if two { (Some(0), Some(1)) } else { (None, None) };
    let t0 = Instant::now();
    let mut host = spawn_host(sc, &cargo, host_cpu, (model_port, guest_port), &pcap, &out)?;
    // one boot of the guest running the script `run`, its console to `serial`
    let boot = |run: &Path, serial: &Path| {
        guest_boot(guest_cpu, &qemu, &built, (guest_port, model_port), &out, run, serial)
    };
    let mut guest = boot(&out.join("run"), &serial)?;
    let guest_st = wait(&mut guest, t0 + GUEST_LIMIT);
    let mut guest_wall = t0.elapsed();
    // `again`: the second boot, on the same ports, when the host side asks
    // for it; (its serial log, QEMU's status)
    let mut second = None;
    if let Some(cmd) = sc.again {
        let (serial2, st, wall) = second_boot(sc, cmd, &mut host, &out, &boot)?;
        guest_wall = wall.map_or(guest_wall, |w| w - t0);
        second = Some((serial2, st));
    }
    // the host side's checks after the (last) guest powered off (after a
    // second boot: longer than the host side waits for its REQ, so that a
    // missing one fails there, with the capture written)
    let grace = if second.is_some() { 75 } else { sc.host_grace_s };
    let host_st = wait(&mut host, Instant::now() + Duration::from_secs(grace));
    let exit = guest_exit(sc, &serial, second.as_ref());
    let host_out = std::fs::read_to_string(out.join("host.log")).unwrap_or_default();
    for l in host_out.lines().filter(|l| l.starts_with("host:")) {
        println!("{l}");
    }
    println!(
        "peer {}: guest {} ({:?}), host side {} — {:.1} s; logs in {}",
        sc.name,
        exit.map_or("no PEER-EXIT".into(), |c| format!("exit {c}")),
        guest_st,
        if host_st == Some(0) { "passed".to_string() } else { format!("failed ({host_st:?})") },
        guest_wall.as_secs_f64(),
        out.display()
    );
    let judged = judge(&pcap, &format!("eth.src == {MODEL_MAC}"));
    match &judged {
        Ok(line) => println!("peer {}: {line}", sc.name),
        Err(e) => println!("peer {}: capture check FAILED: {e}", sc.name),
    }
    Ok(match (exit, host_st) {
        _ if judged.is_err() => 1,
        (Some(0), Some(0)) => 0,
        (Some(c), Some(0)) => c.max(1),
        _ => 1,
    })
}

/// The Linux-guest scenario `name` (an error lists every scenario).
fn scenario(name: &str) -> Result<&'static Scenario, String> {
    SCENARIOS.iter().find(|s| s.name == name).ok_or_else(|| {
        let all: Vec<&str> = SCENARIOS
            .iter()
            .map(|s| s.name)
            .chain(UK_SCENARIOS.iter().map(|s| s.name))
            .chain([nvme::NAME])
            .collect();
        format!("no scenario `{name}`; scenarios: {}", all.join(", "))
    })
}

/// The host side of a scenario: `tests/peer_live.rs`, run by cargo.
const HOST_TEST_ARGS: [&str; 6] = ["test", "-q", "-p", "irdma", "--test", "peer_live"];

/// How long one boot of the Linux guest may take.
const GUEST_LIMIT: Duration = Duration::from_secs(240);

/// The Linux guest's `env` file for a scenario against the host side.
fn scenario_env(sc: &Scenario) -> String {
    format!(
        "PEER_IP={PEER_IP}\nPEER_MAC={PEER_MAC}\nMODEL_IP={MODEL_IP}\nMODEL_MAC={MODEL_MAC}\nMTU={}\nRPING_SIZE={}\n\
         PEER_IP6={PEER_IP6}\nMODEL_IP6={MODEL_IP6}\nPEER_ADDR={}\nMODEL_ADDR={}\nVLAN={}\n",
        sc.mtu,
        sc.size,
        if sc.ipv6 { PEER_IP6 } else { PEER_IP },
        if sc.ipv6 { MODEL_IP6 } else { MODEL_IP },
        if sc.vlan == 0 { String::new() } else { sc.vlan.to_string() },
    )
}

/// Starts the scenario's host-side test (the driver on the model), its
/// output to `host.log`.
fn spawn_host(
    sc: &Scenario,
    cargo: &str,
    host_cpu: Option<u32>,
    (model_port, guest_port): (u16, u16),
    pcap: &Path,
    out: &Path,
) -> Result<std::process::Child, String> {
    let host_log = std::fs::File::create(out.join("host.log")).map_err(|e| e.to_string())?;
    pinned(host_cpu, cargo)
        .args(HOST_TEST_ARGS)
        .args(["--", "--ignored", "--exact", sc.host_test, "--nocapture"])
        .env("PEER_MODEL_ADDR", format!("127.0.0.1:{model_port}"))
        .env("PEER_GUEST_ADDR", format!("127.0.0.1:{guest_port}"))
        .env("PEER_PCAP", pcap)
        .env("PEER_MAC", PEER_MAC)
        .env("PEER_RPING_SIZE", sc.size.to_string())
        .env("PEER_IPV6", if sc.ipv6 { "1" } else { "0" })
        .env("PEER_VLAN", if sc.vlan == 0 { String::new() } else { sc.vlan.to_string() })
        // the driver's netdev MTU and path MTU follow the guest's
        .env("PEER_LAN_MTU", sc.mtu.to_string())
        .env("PEER_PATH_MTU", if sc.mtu >= 4096 + 96 { "4096" } else { "1024" })
        .current_dir(root())
        .stdout(host_log.try_clone().map_err(|e| e.to_string())?)
        .stderr(host_log)
        .spawn()
        .map_err(|e| format!("cannot start the host side: {e}"))
}

/// The second boot (running `cmd`) once the host side asks for it: its
/// serial log, QEMU's status, and when it ended (`None`: never booted).
fn second_boot(
    sc: &Scenario,
    cmd: &str,
    host: &mut std::process::Child,
    out: &Path,
    boot: &dyn Fn(&Path, &Path) -> Result<std::process::Child, String>,
) -> Result<(PathBuf, Option<i32>, Option<Instant>), String> {
    let serial2 = out.join("serial2.log");
    let _ = std::fs::remove_file(&serial2);
    let deadline = Instant::now() + Duration::from_secs(sc.host_grace_s);
    if wait_for_line(host, &out.join("host.log"), NEXT_PEER, deadline) {
        std::fs::write(out.join("run2"), format!("{cmd}\n")).map_err(|e| e.to_string())?;
        let t1 = Instant::now();
        let mut g = boot(&out.join("run2"), &serial2)?;
        let st = wait(&mut g, t1 + GUEST_LIMIT);
        println!("peer {}: second boot {:.1} s", sc.name, t1.elapsed().as_secs_f64());
        Ok((serial2, st, Some(Instant::now())))
    } else {
        println!("peer {}: the host side never asked for the second boot", sc.name);
        Ok((serial2, None, None))
    }
}

/// The guest's PEER-EXIT code; after a second boot both must succeed, and
/// the first failure counts.
fn guest_exit(
    sc: &Scenario,
    serial: &Path,
    second: Option<&(PathBuf, Option<i32>)>,
) -> Option<i32> {
    let mut exit = exit_of(serial, "guest", sc.result, 100);
    if let Some((serial2, st)) = second {
        let e2 = exit_of(serial2, "guest (second boot)", sc.result, 100);
        println!(
            "peer {}: second guest {} ({st:?})",
            sc.name,
            e2.map_or("no PEER-EXIT".into(), |c| format!("exit {c}"))
        );
        // both boots must succeed: the first failure counts
        if exit == Some(0) {
            exit = e2;
        }
    }
    exit
}

/// Whether `line` appeared in the log `log` of `host` before `deadline`
/// (false at once if `host` exited without it).
fn wait_for_line(
    host: &mut std::process::Child,
    log: &Path,
    line: &str,
    deadline: Instant,
) -> bool {
    let seen = || std::fs::read_to_string(log).is_ok_and(|s| s.lines().any(|l| l == line));
    while Instant::now() < deadline {
        if seen() {
            return true;
        }
        if !matches!(host.try_wait(), Ok(None)) {
            return seen();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// The model process of stage two (`mock-bar-shm` in harness mode with an
/// Ethernet port; no CM peer device: the Linux guest is the peer).
fn build_shm_model() -> Result<PathBuf, String> {
    crate::util::cargo(&[
        "build",
        "-p",
        "mock-bar",
        "--bin",
        "mock-bar-shm",
        "--release",
        "--quiet",
    ])?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    let p = target.join("release").join("mock-bar-shm");
    if p.is_file() { Ok(p) } else { Err(format!("no model binary at {}", p.display())) }
}

/// The unikernel's command line for `sc` (`irdma_boot::peercfg`): its
/// address, the Linux guest's address and MAC, rping's count and size.
fn uk_cmdline(sc: &UkScenario) -> String {
    format!(
        "peer={} ip={MODEL_IP} peer_ip={PEER_IP} peer_mac={PEER_MAC} rping_count={} rping_size={}{}",
        sc.role, sc.count, sc.size, sc.cmdline
    )
}

/// Stage two: the Linux guest, then the model process and the unikernel
/// (through `crate::qemu::run_image`); returns the exit code.
fn run_uk(sc: &UkScenario) -> Result<i32, String> {
    use crate::qemu::{self, ModelSel, Opts};
    let qemu_bin = ensure_program(&qemu::QEMU_PACKAGE)?;
    let built = build()?;
    let image = qemu::build(false)?;
    let model = build_shm_model()?;
    let out = root().join("target/peer").join(sc.name);
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    let (model_port, guest_port) = (free_udp_port()?, free_udp_port()?);
    let (serial, pcap) = stage_run(&out, &uk_env(sc), sc.linux)?;
    let two = two_cpus();
    let t0 = Instant::now();
    // CPU 0, beside the model (run_image puts the model on 0, the
    // unikernel's QEMU on 1)
    let guest = guest_boot(
        two.then_some(0),
        &qemu_bin,
        &built,
        (guest_port, model_port),
        &out,
        &out.join("run"),
        &serial,
    )?;
    let model_args = uk_model_args(sc, model_port, guest_port);
    // once the Linux guest is done, the unikernel has this long to finish
    // (it may wait for a host that gave up: end it instead of its timeout)
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let uk_done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = watch_guest(guest, sc.limit_s, stop.clone(), uk_done.clone());
    let opts = Opts {
        stop: Some(stop),
        append: Some(uk_cmdline(sc)),
        timeout: Duration::from_secs(sc.limit_s),
        model: ModelSel::Program(model.display().to_string(), model_args),
        echo: false,
        pcap: Some(pcap.clone()),
        ..Opts::default()
    };
    let uk = qemu::run_image(&image, &opts);
    let uk_wall = t0.elapsed();
    uk_done.store(true, std::sync::atomic::Ordering::Relaxed);
    // the guest finishes its run (and powers off) by itself
    let guest_st = watcher.join().unwrap_or(None);
    let wall = t0.elapsed();
    let uk = uk?;
    std::fs::write(out.join("unikernel.log"), uk.console.join("\n") + "\n")
        .map_err(|e| e.to_string())?;
    std::fs::write(out.join("model.log"), uk.model_output.join("\n") + "\n")
        .map_err(|e| e.to_string())?;
    let exit = exit_of(&serial, "linux", sc.result, 100);
    echo_uk(sc, &uk);
    let mut why = uk_problems(sc, &uk);
    if exit != Some(0) || guest_st != Some(0) {
        why.push(format!("the Linux guest: {exit:?} (QEMU {guest_st:?})"));
    }
    judge_uk_capture(sc, &pcap, &mut why);
    println!(
        "peer {}: {} — unikernel {:.1} s, whole run {:.1} s; logs in {}",
        sc.name,
        if why.is_empty() { "passed".to_string() } else { format!("FAILED: {}", why.join("; ")) },
        uk_wall.as_secs_f64(),
        wall.as_secs_f64(),
        out.display()
    );
    Ok(if why.is_empty() { 0 } else { 1 })
}

/// The Linux guest's `env` file for a unikernel scenario.
fn uk_env(sc: &UkScenario) -> String {
    // the unikernel's MAC is the model device's (LAN bring-up); the guest
    // learns it by ARP, which the port answers for MODEL_IP
    format!(
        "PEER_IP={PEER_IP}\nPEER_MAC={PEER_MAC}\nMODEL_IP={MODEL_IP}\nMTU=1500\nRPING_SIZE={}\n\
         RPING_COUNT={}\nPEER_ADDR={PEER_IP}\nMODEL_ADDR={MODEL_IP}\nVLAN=\n\
         NVME_ADDR={MODEL_IP}\nNVME_NQN={}\n{}",
        sc.size,
        sc.count,
        irdma_boot::peercfg::NVME_SUBNQN,
        sc.env
    )
}

/// The shm model's arguments: its port wired to the Linux guest's.
fn uk_model_args(sc: &UkScenario, model_port: u16, guest_port: u16) -> Vec<String> {
    [
        "--port".to_string(),
        format!("127.0.0.1:{model_port}"),
        "--port-peer".into(),
        format!("127.0.0.1:{guest_port}"),
        "--port-ip".into(),
        MODEL_IP.into(),
        // a TCG guest answers in milliseconds but may stall for a while
        "--port-rc-timeout-ms".into(),
        "2000".into(),
        "--max-secs".into(),
        (sc.limit_s + 100).to_string(),
    ]
    .into()
}

/// Watches the Linux guest beside the unikernel: sets `stop` when the
/// unikernel should give up, and returns the guest's exit code.
fn watch_guest(
    mut guest: std::process::Child,
    limit_s: u64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    uk_done: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Option<i32>> {
    let limit = Instant::now() + Duration::from_secs(limit_s + 60);
    std::thread::spawn(move || {
        use std::sync::atomic::Ordering::Relaxed;
        // the guest gets 60 s after the unikernel ended, and the
        // unikernel 60 s after the guest ended
        let (mut guest_end, mut uk_end) = (None, None);
        loop {
            let now = Instant::now();
            if guest_end.is_none()
                && let Ok(Some(st)) = guest.try_wait()
            {
                guest_end = Some((now, st.code()));
            }
            if uk_end.is_none() && uk_done.load(Relaxed) {
                uk_end = Some(now);
            }
            let grace = Duration::from_secs(60);
            match (guest_end, uk_end) {
                (Some((_, st)), Some(_)) => return st,
                (Some((t, st)), None) if now > t + grace => {
                    stop.store(true, Relaxed);
                    return st;
                }
                (None, Some(t)) if now > t + grace => return wait(&mut guest, now),
                (None, None) if now > limit => {
                    stop.store(true, Relaxed);
                    return wait(&mut guest, now);
                }
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    })
}

/// Prints the unikernel's and the model's lines a reader of the leg needs.
fn echo_uk(sc: &UkScenario, uk: &crate::qemu::Outcome) {
    for l in uk
        .console
        .iter()
        .filter(|l| l.contains(sc.name) || l.starts_with("FAIL ") || l.starts_with("DONE "))
    {
        println!("unikernel: {l}");
    }
    for l in uk
        .model_output
        .iter()
        .filter(|l| l.starts_with("mock-bar-shm: port ") || l.starts_with("mock-bar-shm: capture"))
    {
        println!("model: {l}");
    }
}

/// What went wrong on the unikernel's side: its scenario, its QEMU, the
/// model and the model's port.
fn uk_problems(sc: &UkScenario, uk: &crate::qemu::Outcome) -> Vec<String> {
    use crate::qemu::Line;
    let mut why: Vec<String> = Vec::new();
    let passed = uk.lines().iter().any(|l| matches!(l, Line::Pass { name, .. } if name == sc.name));
    if !passed {
        why.push(format!("the unikernel's {} did not pass", sc.name));
    }
    if uk.status != Some(irdma_boot::contract::STATUS_PASS) {
        why.push(format!(
            "the unikernel's QEMU exited {:?} (timed out: {})",
            uk.status, uk.timed_out
        ));
    }
    why.extend(uk.model_problems.iter().map(|p| format!("model: {p}")));
    let port_line = uk.model_output.iter().find(|l| l.starts_with("mock-bar-shm: port "));
    match port_line.and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("drops="))) {
        Some("0") => {}
        Some(n) => why.push(format!("the model's port dropped {n} frame(s)")),
        None => why.push("the model printed no port counters".into()),
    }
    why
}

/// The capture's verdicts: the frames not sent by the Linux guest, and for an
/// NVMe scenario the NVMe/RDMA wire judge.
fn judge_uk_capture(sc: &UkScenario, pcap: &Path, why: &mut Vec<String>) {
    // ours: every frame the Linux guest did not send
    let judged = judge(pcap, &format!("eth.src != {PEER_MAC}"));
    match &judged {
        Ok(line) => println!("peer {}: {line}", sc.name),
        Err(e) => why.push(format!("capture check: {e}")),
    }
    if sc.nvme {
        match crate::nvme_wire::judge(pcap) {
            Ok(w) => {
                println!("peer {}: nvme-wire {}", sc.name, w.summary());
                why.extend(w.failures().into_iter().map(|f| format!("nvme-wire: {f}")));
            }
            Err(e) => why.push(format!("nvme-wire: {e}")),
        }
    }
}

/// Waits for `c` until `deadline`, then kills it. The exit code, or `None`
/// if it was killed or died of a signal.
fn wait(c: &mut std::process::Child, deadline: Instant) -> Option<i32> {
    loop {
        match c.try_wait() {
            Ok(Some(st)) => return st.code(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            _ => {
                let _ = c.kill();
                let _ = c.wait();
                return None;
            }
        }
    }
}

/// Boots the Linux guest once under QEMU TCG, pinned to `cpu`: its NIC on
/// `-netdev dgram` from `ports.0` to the model's port `ports.1`, the
/// scenario's `env` and the script `run` through fw_cfg, its console to
/// `serial`.
fn guest_boot(
    cpu: Option<u32>,
    qemu: &Path,
    built: &Built,
    ports: (u16, u16),
    out: &Path,
    run: &Path,
    serial: &Path,
) -> Result<std::process::Child, String> {
    let env = out.join("env");
    let g = Guest { cpu, ports, mac: PEER_MAC, env: &env, run, serial, dump: None };
    guest_spawn(qemu, built, &g)
}

/// One Linux guest's QEMU (see [`guest_spawn`]).
struct Guest<'a> {
    /// Host CPU it is pinned to.
    cpu: Option<u32>,
    /// (its NIC's UDP port, the other end's: the model's or another guest's).
    ports: (u16, u16),
    /// Its NIC's MAC.
    mac: &'a str,
    /// The env file (`opt/irdma/env`).
    env: &'a Path,
    /// The script (`opt/irdma/run`).
    run: &'a Path,
    /// Its console log.
    serial: &'a Path,
    /// A pcap of every frame its NIC sends and receives (QEMU
    /// `-object filter-dump`).
    dump: Option<&'a Path>,
}

/// Boots one Linux guest under QEMU TCG, pinned to `g.cpu`: its NIC on
/// `-netdev dgram` from `g.ports.0` to `g.ports.1`, `g.env` and the script
/// `g.run` through fw_cfg, its console to `g.serial`.
fn guest_spawn(qemu: &Path, built: &Built, g: &Guest) -> Result<std::process::Child, String> {
    let (guest_port, model_port) = g.ports;
    let (cpu, serial, run) = (g.cpu, g.serial, g.run);
    let netdev = format!(
        "dgram,id=n0,local.type=inet,local.host=127.0.0.1,local.port={guest_port},\
         remote.type=inet,remote.host=127.0.0.1,remote.port={model_port}"
    );
    let mut cmd = pinned(cpu, &qemu.to_string_lossy());
    if let Some(d) = g.dump {
        cmd.args(["-object", &format!("filter-dump,id=f0,netdev=n0,file={}", d.display())]);
    }
    cmd.args(["-nodefaults", "-no-reboot", "-display", "none", "-accel", "tcg"])
        .args(["-m", "512", "-smp", "1"])
        .arg("-kernel")
        .arg(&built.kernel)
        .arg("-initrd")
        .arg(&built.initrd)
        .args(["-append", "console=ttyS0 panic=-1 quiet loglevel=4"])
        .arg("-serial")
        .arg(format!("file:{}", serial.display()))
        .args(["-netdev", &netdev])
        .args(["-device", &format!("virtio-net-pci,netdev=n0,mac={}", g.mac)])
        .arg("-fw_cfg")
        .arg(format!("name=opt/irdma/env,file={}", g.env.display()))
        .arg("-fw_cfg")
        .arg(format!("name=opt/irdma/run,file={}", run.display()))
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {QEMU}: {e}"))
}

/// The capture, converted to `wire.pcapng` beside `wire.pcap`, through
/// tshark (notes, "Checking captures"): every frame
/// decoded, none malformed, no expert item of severity error in a frame the
/// model sent (the display filter `ours` picks them); the guest's errors and all warnings are counted and
/// reported. The host side has already checked every RoCEv2
/// frame's ICRC with the model's own parser.
fn judge(pcap: &Path, ours: &str) -> Result<String, String> {
    if !pcap.is_file() {
        return Err(format!("no capture at {}", pcap.display()));
    }
    let tshark = ensure_program(&TSHARK_PACKAGE)?;
    // The capture is kept as pcapng too (editcap comes with tshark: Debian's
    // wireshark-common), and that is the file judged.
    let ng = pcap.with_extension("pcapng");
    let mut editcap = Command::new(tshark.with_file_name("editcap"));
    editcap.args(["-F", "pcapng"]).arg(pcap).arg(&ng);
    run_ok(editcap.stderr(Stdio::null()), "editcap")?;
    let count = |filter: Option<&str>| -> Result<usize, String> {
        let mut c = Command::new(&tshark);
        c.arg("-r").arg(&ng).args(["--disable-heuristic", "rpcrdma_infiniband"]);
        if let Some(f) = filter {
            c.args(["-Y", f]);
        }
        Ok(run_ok(c.stderr(Stdio::null()), "tshark")?.lines().count())
    };
    let all = count(None)?;
    let malformed = count(Some("_ws.malformed"))?;
    // our frames (the model's port MAC) must be free of expert errors; the
    // guest's are reported only: rxe sends a zero UDP checksum on IPv6,
    // which Wireshark 4.0 calls an error (rocev2-wire §1.5), and that is
    // Linux's frame, not ours
    let errors = count(Some(&format!("_ws.expert.severity >= \"error\" && {ours}")))?;
    let theirs = count(Some(&format!("_ws.expert.severity >= \"error\" && !({ours})")))?;
    let warn = count(Some("_ws.expert.severity == \"warning\""))?;
    let line = format!(
        "tshark: {all} frames, {malformed} malformed, {errors} of ours with expert errors \
         ({theirs} of the guest's), {warn} with warnings"
    );
    if all == 0 || malformed > 0 || errors > 0 { Err(line) } else { Ok(line) }
}

/// tshark, installed with the system's package manager if missing.
pub const TSHARK_PACKAGE: SysPackage = SysPackage {
    program: "tshark",
    what: "Wireshark's command-line decoder",
    apt: "tshark",
    dnf: "wireshark-cli",
    pacman: "wireshark-cli",
    brew: "wireshark",
};

#[cfg(test)]
mod tests {
    use super::*;
    use irdma_boot::peercfg::{self, Role};

    /// The unikernel's addresses are written once, here: its command line
    /// must say what the Linux guest's env and the model's port are given.
    #[test]
    fn unikernel_command_line_carries_the_addresses() {
        let ip = |s: &str| -> [u8; 4] { s.parse::<std::net::Ipv4Addr>().unwrap().octets() };
        for sc in UK_SCENARIOS {
            let line = uk_cmdline(sc);
            // boot/src/bare/mod.rs reads at most 256 bytes of it
            assert!(line.len() < 256, "{line}");
            let c = peercfg::parse(&line).unwrap().unwrap();
            let role = match sc.role {
                "rping-server" => Role::RpingServer,
                "rping-client" => Role::RpingClient,
                "nvme-target" => Role::NvmeTarget,
                r => panic!("role {r}"),
            };
            assert_eq!(c.role, role, "{}", sc.name);
            assert_eq!(c.ip, ip(MODEL_IP));
            assert_eq!(c.peer_ip, ip(PEER_IP));
            let mac: Vec<u8> =
                PEER_MAC.split(':').map(|b| u8::from_str_radix(b, 16).unwrap()).collect();
            assert_eq!(c.peer_mac[..], mac[..]);
            assert_eq!((c.count, c.size), (sc.count, sc.size));
        }
    }
}
