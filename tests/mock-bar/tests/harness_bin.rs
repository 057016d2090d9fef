//! The `mock-bar-shm` binary in harness mode (what `cargo xtask qemu`
//! starts), driven the way xtask and the guest drive it, without QEMU: the
//! environment names the files, HOST_MAGIC appears, a ping is answered, a
//! CQP op runs, the shutdown flag ends it with status 0; without a shutdown
//! it gives up by itself with status 1.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mock_bar::regs::{self, op};
use mock_bar::shm::{self, mailbox as mb};

const BAR_SIZE: u64 = 16 << 20;
const RAM_SIZE: u64 = 4 << 20;
const MAILBOX: u32 = 8 << 20;

struct Files {
    bar: std::path::PathBuf,
    ram: std::path::PathBuf,
}

impl Files {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir();
        let id = std::process::id();
        let f = Files {
            bar: dir.join(format!("mock-hb-bar-{tag}-{id}")),
            ram: dir.join(format!("mock-hb-ram-{tag}-{id}")),
        };
        shm::create_zeroed(&f.bar, BAR_SIZE).unwrap();
        shm::create_zeroed(&f.ram, RAM_SIZE).unwrap();
        f
    }

    fn spawn(&self, args: &[&str]) -> Child {
        Command::new(env!("CARGO_BIN_EXE_mock-bar-shm"))
            .args(args)
            .env("IRDMA_BAR_FILE", &self.bar)
            .env("IRDMA_BAR_SIZE", BAR_SIZE.to_string())
            .env("IRDMA_RAM_FILE", &self.ram)
            .env("IRDMA_RAM_SIZE", RAM_SIZE.to_string())
            .env("IRDMA_MAILBOX", MAILBOX.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.bar);
        let _ = std::fs::remove_file(&self.ram);
    }
}

/// BAR offset of mailbox word `off`.
fn mb_at(off: usize) -> u32 {
    MAILBOX + off as u32
}

fn r32(f: &std::fs::File, off: u32) -> u32 {
    let mut b = [0; 4];
    f.read_exact_at(&mut b, off as u64).unwrap();
    u32::from_le_bytes(b)
}

fn w32(f: &std::fs::File, off: u32, v: u32) {
    f.write_all_at(&v.to_le_bytes(), off as u64).unwrap();
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(10), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn wait_exit(c: &mut Child) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            return st;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = c.kill();
            panic!("mock-bar-shm did not exit");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn serves_the_mailbox_and_the_registers_then_exits_0_on_shutdown() {
    let files = Files::new("ok");
    let open = |p: &std::path::Path| OpenOptions::new().read(true).write(true).open(p).unwrap();
    let (bar, ram) = (open(&files.bar), open(&files.ram));
    // xtask writes these before starting the model; the model keeps them.
    bar.write_all_at(&0x1234_5678_9abc_def0u64.to_le_bytes(), (MAILBOX + 0x10) as u64).unwrap();
    let mut child = files.spawn(&[]);
    wait_for("HOST_MAGIC", || r32(&bar, mb_at(mb::MB_HOST_MAGIC)) == mb::HOST_MAGIC);
    assert_eq!(r32(&bar, MAILBOX + 0x10), 0x9abc_def0, "the nonce survived (files not zeroed)");
    assert_eq!(r32(&bar, regs::GLPE_CPUSTATUS0), 0x80, "firmware-ready registers published");

    w32(&bar, mb_at(mb::MB_PING), 41);
    wait_for("pong", || r32(&bar, mb_at(mb::MB_PONG)) == mb::pong(41));

    // A CQP and one NOP through the files.
    let (sq, ctx) = (0x10_0000u64, 0x20_0000u64);
    ram.write_all_at(&(5u64 << 8).to_le_bytes(), ctx).unwrap();
    ram.write_all_at(&sq.to_le_bytes(), ctx + 8).unwrap();
    ram.write_all_at(&(1u64 << 16).to_le_bytes(), ctx + 32).unwrap();
    w32(&bar, regs::CCQPLOW, ctx as u32);
    wait_for("CCQPSTATUS", || r32(&bar, regs::CCQPSTATUS) == 1);
    ram.write_all_at(&((op::NOP as u64) << 32 | 1 << 63).to_le_bytes(), sq + 24).unwrap();
    w32(&bar, regs::CQPDB, 1);
    wait_for("CQPTAIL", || r32(&bar, regs::CQPTAIL) == 1);
    w32(&bar, mb_at(mb::MB_PING), 42);
    wait_for("pong", || r32(&bar, mb_at(mb::MB_PONG)) == mb::pong(42));
    assert_eq!(r32(&bar, mb_at(mb::MB_MODEL_CQP_OPS)), 1, "counters published before the pong");

    w32(&bar, mb_at(mb::MB_SHUTDOWN), 1);
    let st = wait_exit(&mut child);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert!(st.success(), "status {st}, output {out}");
    assert!(out.contains("cqp_ops=1") && out.contains("2 pings"), "{out}");
}

#[test]
fn gives_up_without_a_shutdown_and_refuses_bad_environments() {
    let files = Files::new("timeout");
    let mut child = files.spawn(&["--max-secs", "0"]);
    let st = wait_exit(&mut child);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(err.contains("no shutdown within 0 s"), "{err}");

    // A mailbox inside the register space is refused.
    let mut c = Command::new(env!("CARGO_BIN_EXE_mock-bar-shm"))
        .env("IRDMA_BAR_FILE", &files.bar)
        .env("IRDMA_BAR_SIZE", BAR_SIZE.to_string())
        .env("IRDMA_RAM_FILE", &files.ram)
        .env("IRDMA_RAM_SIZE", RAM_SIZE.to_string())
        .env("IRDMA_MAILBOX", "4096")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(wait_exit(&mut c).code(), Some(1));
    // A size that disagrees with the file is refused.
    let mut c = Command::new(env!("CARGO_BIN_EXE_mock-bar-shm"))
        .env("IRDMA_BAR_FILE", &files.bar)
        .env("IRDMA_BAR_SIZE", (BAR_SIZE * 2).to_string())
        .env("IRDMA_RAM_FILE", &files.ram)
        .env("IRDMA_RAM_SIZE", RAM_SIZE.to_string())
        .env("IRDMA_MAILBOX", MAILBOX.to_string())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(wait_exit(&mut c).code(), Some(1));
}

/// Internet checksum (RFC 1071) of an IPv4 header.
fn ip_checksum(h: &[u8]) -> u16 {
    let mut s: u32 = h.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]]) as u32).sum();
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// Issue #34, stage two: `--port` plugs an Ethernet port into the served
/// device's wire. A Linux guest's NIC on the other end resolves the port's
/// address by ARP — answered with the served device's MAC, by the harness
/// loop itself (no host-side driver pumps the port) — and a RoCEv2 frame
/// with a bad ICRC is dropped and counted; the capture judge at exit then
/// fails the run (status 1), naming the frame.
#[test]
fn port_answers_arp_with_the_devices_mac_and_judges_the_wire() {
    let files = Files::new("port");
    let bar = OpenOptions::new().read(true).write(true).open(&files.bar).unwrap();
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let pcap = std::env::temp_dir().join(format!("mock-hb-port-{}.pcap", std::process::id()));
    let mut child = files.spawn(&[
        "--port",
        &port.to_string(),
        "--port-peer",
        &peer.local_addr().unwrap().to_string(),
        "--port-ip",
        "10.0.0.1",
        "--pcap",
        pcap.to_str().unwrap(),
    ]);
    wait_for("HOST_MAGIC", || r32(&bar, mb_at(mb::MB_HOST_MAGIC)) == mb::HOST_MAGIC);
    let dev_mac = mock_bar::Config::default().lan.mac;
    let guest_mac = [2, 0, 0, 0, 0, 0x0b];
    // ARP request: who has 10.0.0.1, tell 10.0.0.2
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&guest_mac);
    arp.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&guest_mac);
    arp.extend_from_slice(&[10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1]);
    peer.send_to(&arp, port).unwrap();
    let mut b = [0u8; 2048];
    let (n, _) = peer.recv_from(&mut b).expect("an ARP reply from the port");
    let r = &b[..n];
    assert_eq!(&r[0..6], &guest_mac, "to the asker");
    assert_eq!(&r[6..12], &dev_mac, "from the served device's MAC");
    assert_eq!(&r[12..14], &[0x08, 0x06]);
    assert_eq!(&r[20..22], &[0, 2], "an ARP reply");
    assert_eq!(&r[22..28], &dev_mac, "sender hardware address: the device's MAC");
    assert_eq!(&r[28..32], &[10, 0, 0, 1]);
    // a RoCEv2 SEND_ONLY to the device with a wrong ICRC
    let mut f = dev_mac.to_vec();
    f.extend_from_slice(&guest_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = vec![0x45, 0, 0, 20 + 8 + 12 + 4, 0, 0, 0x40, 0, 64, 17, 0, 0];
    ip.extend_from_slice(&[10, 0, 0, 2, 10, 0, 0, 1]);
    let ck = ip_checksum(&ip);
    ip[10..12].copy_from_slice(&ck.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0xc0, 0x00, 0x12, 0xb7, 0, 8 + 12 + 4, 0, 0]);
    f.extend_from_slice(&[0x04, 0, 0xff, 0xff, 0, 0, 0, 5, 0, 0, 0, 1]);
    f.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    peer.send_to(&f, port).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    w32(&bar, mb_at(mb::MB_SHUTDOWN), 1);
    let st = wait_exit(&mut child);
    let mut out = String::new();
    use std::io::Read;
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let _ = std::fs::remove_file(&pcap);
    let line = out.lines().find(|l| l.starts_with("mock-bar-shm: port ")).unwrap_or_else(|| {
        panic!("no port counters line in {out}");
    });
    assert!(line.contains(" arp_replies=1 "), "{line}");
    assert!(line.contains(" drops=1 "), "{line}");
    assert!(out.contains("capture: 3 frames, 1 RoCEv2, 1 with a bad ICRC or length"), "{out}");
    assert_eq!(st.code(), Some(1), "the capture judge fails the run: {out}");
}
