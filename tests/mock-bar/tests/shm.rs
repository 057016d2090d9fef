//! The shared-memory transport end to end, with this test playing QEMU's
//! guest: register writes into the BAR file, data in the RAM file.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use mock_bar::regs::{self, op};
use mock_bar::shm::{self, FileBar, FileMemory, Harness, PollMode, ShmHost, Tick, mailbox as mb};
use mock_bar::{Config, Memory};

struct Guest {
    bar: std::fs::File,
    ram: std::fs::File,
}

impl Guest {
    fn w32(&self, off: u32, v: u32) {
        self.bar.write_all_at(&v.to_le_bytes(), off as u64).unwrap();
    }
    fn r32(&self, off: u32) -> u32 {
        let mut b = [0; 4];
        self.bar.read_exact_at(&mut b, off as u64).unwrap();
        u32::from_le_bytes(b)
    }
    fn w64(&self, pa: u64, v: u64) {
        self.ram.write_all_at(&v.to_le_bytes(), pa).unwrap();
    }
    fn r64(&self, pa: u64) -> u64 {
        let mut b = [0; 8];
        self.ram.read_exact_at(&mut b, pa).unwrap();
        u64::from_le_bytes(b)
    }
    fn wait(&self, off: u32, want: u32) {
        let t0 = Instant::now();
        while self.r32(off) != want {
            assert!(t0.elapsed() < Duration::from_secs(5), "host never answered at {off:#x}");
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

/// Fresh BAR (16 MiB) and RAM (4 MiB) files in the temp dir, named by
/// `tag` and the process id; removed when this drops, pass or fail.
struct Files {
    bar: std::path::PathBuf,
    ram: std::path::PathBuf,
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.bar);
        let _ = std::fs::remove_file(&self.ram);
    }
}

/// The files, this test's guest view of them, and a model host serving them
/// (default config, all of RAM below 4 GiB).
fn rig(tag: &str) -> (Files, Guest, ShmHost) {
    let (dir, id) = (std::env::temp_dir(), std::process::id());
    let f = Files {
        bar: dir.join(format!("mock-{tag}bar-{id}")),
        ram: dir.join(format!("mock-{tag}ram-{id}")),
    };
    let (bar_size, ram_size) = (16u64 << 20, 4u64 << 20);
    let bar = shm::create_zeroed(&f.bar, bar_size).unwrap();
    let ram = shm::create_zeroed(&f.ram, ram_size).unwrap();
    let open = |p: &std::path::Path| OpenOptions::new().read(true).write(true).open(p).unwrap();
    let g = Guest { bar: open(&f.bar), ram: open(&f.ram) };
    let host = ShmHost::new(
        Config::default(),
        FileBar::new(bar, bar_size),
        FileMemory::new(ram, ram_size, ram_size),
    );
    (f, g, host)
}

#[test]
fn guest_brings_up_the_cqp_through_files() {
    let (_files, g, host) = rig("");
    // the host publishes the firmware-ready registers at start
    assert_eq!(g.r32(regs::GLPE_CPUSTATUS0), 0x80);
    assert_eq!((g.r32(regs::GLPCI_LBARCTRL) >> 4) & 3, 2);
    let (stop, handle) = shm::spawn(host, PollMode::Hybrid);

    let (sq, ctx, qbuf) = (0x10_0000u64, 0x20_0000u64, 0x20_1000u64);
    g.w64(ctx, 5 << 8); // SQSIZE 5 → 64 entries
    g.w64(ctx + 8, sq);
    g.w64(ctx + 32, 1 << 16); // HW_MAJVER 1
    g.w32(regs::CQPTAIL, 0);
    g.w32(regs::CQPDB, 0);
    g.w32(regs::CCQPSTATUS, 0);
    g.w32(regs::CCQPHIGH, 0);
    g.w32(regs::CCQPLOW, ctx as u32);
    g.wait(regs::CCQPSTATUS, 1);
    // NOP, then QUERY_FPM_VAL into guest RAM
    g.w64(sq + 24, (op::NOP as u64) << 32 | 1 << 63);
    g.w32(regs::CQPDB, 1);
    g.wait(regs::CQPTAIL, 1);
    g.w64(sq + 64 + 32, qbuf);
    g.w64(sq + 64 + 24, (op::QUERY_FPM_VAL as u64) << 32 | 1 << 63);
    g.w32(regs::CQPDB, 2);
    g.wait(regs::CQPTAIL, 2);
    assert!(g.r64(qbuf + 8) >> 32 > 0, "QP object size written into guest RAM");

    stop.store(true, std::sync::atomic::Ordering::Release);
    let host = handle.join().unwrap();
    assert_eq!(host.device.counters().cqp_ops, 2);
}

#[test]
fn ram_file_offsets_fold_the_4g_hole() {
    let p = std::env::temp_dir().join(format!("mock-ram-hole-{}", std::process::id()));
    let f = shm::create_zeroed(&p, 0x3000).unwrap();
    let m = FileMemory::new(f, 0x3000, 0x1000); // 4 KiB below 4 GiB, the rest above
    m.write(0xFF8, &[1; 8]).unwrap();
    assert!(m.write(0xFFC, &[1; 8]).is_err(), "crosses into the hole");
    assert!(m.write(0x2000, &[1; 4]).is_err(), "in the hole");
    m.write((1 << 32) + 0x10, &[7; 4]).unwrap();
    let mut b = [0u8; 4];
    let raw = OpenOptions::new().read(true).open(&p).unwrap();
    raw.read_exact_at(&mut b, 0x1010).unwrap();
    assert_eq!(b, [7; 4], "GPA 4 GiB + 0x10 → offset below_4g + 0x10");
    assert!(m.read((1 << 32) + 0x1FFE, &mut b).is_err(), "past the end");
    let _ = std::fs::remove_file(&p);
}

#[test]
fn harness_mailbox_ping_faults_counters_and_shutdown() {
    let (_files, g, mut host) = rig("h");
    let base = 8u32 << 20;
    let mut h = Harness::new(base);
    let at = |off: usize| base + off as u32;
    assert_eq!(g.r32(at(mb::MB_HOST_MAGIC)), 0, "not before announce");
    h.announce(&host);
    assert_eq!(g.r32(at(mb::MB_HOST_MAGIC)), mb::HOST_MAGIC);
    let r64 = |off: usize| g.r32(at(off)) as u64 | (g.r32(at(off + 4)) as u64) << 32;
    assert_eq!(r64(mb::MB_MODEL_CQP_OPS), 0);

    // Nothing asked: idle, no pong.
    assert_eq!(h.service(&mut host), Tick::Idle);
    assert_eq!(g.r32(at(mb::MB_PONG)), 0);
    // A ping is answered once.
    g.w32(at(mb::MB_PING), 5);
    assert_eq!(h.service(&mut host), Tick::Busy);
    assert_eq!(g.r32(at(mb::MB_PONG)), mb::pong(5));
    assert_eq!(h.service(&mut host), Tick::Idle);

    // CQP up, then a request to fail the second op from now with 0xF001/0x42.
    let (sq, ctx) = (0x10_0000u64, 0x20_0000u64);
    g.w64(ctx, 5 << 8);
    g.w64(ctx + 8, sq);
    g.w64(ctx + 32, 1 << 16);
    g.w32(regs::CCQPLOW, ctx as u32);
    host.step();
    assert_eq!(g.r32(regs::CCQPSTATUS), 1);
    g.w32(at(mb::MB_FAULT_KIND), mb::FAULT_FAIL_CQP_OP);
    g.w32(at(mb::MB_FAULT_ARG), 1);
    g.w32(at(mb::MB_FAULT_CODES), 0xF001_0042);
    g.w32(at(mb::MB_FAULT_SEQ), 1);
    assert_eq!(h.service(&mut host), Tick::Busy);
    assert_eq!((g.r32(at(mb::MB_FAULT_ACK)), g.r32(at(mb::MB_FAULT_RESULT))), (1, 0));
    for (i, want_err) in [(0u32, false), (1, true), (2, false)] {
        g.w64(sq + 64 * i as u64 + 24, (op::NOP as u64) << 32 | 1 << 63);
        g.w32(regs::CQPDB, i + 1);
        host.step();
        let tail = g.r32(regs::CQPTAIL);
        assert_eq!(tail & 0x7FF, i + 1, "op {i} completed");
        assert_eq!(tail >> 31 == 1, want_err, "op {i}: CQP_OP_ERR");
        if want_err {
            assert_eq!(g.r32(regs::CQPERRCODES), 0xF001_0042);
        }
    }
    // The counters reach the mailbox before the next pong.
    g.w32(at(mb::MB_PING), 6);
    h.service(&mut host);
    assert_eq!(g.r32(at(mb::MB_PONG)), mb::pong(6));
    assert_eq!((r64(mb::MB_MODEL_CQP_OPS), r64(mb::MB_MODEL_CQP_ERRORS)), (3, 1));
    assert_eq!(r64(mb::MB_MODEL_DMA_FAULTS), 0);

    // An unknown kind is refused, and CLEAR drops a pending fault.
    g.w32(at(mb::MB_FAULT_KIND), 77);
    g.w32(at(mb::MB_FAULT_SEQ), 2);
    h.service(&mut host);
    assert_eq!((g.r32(at(mb::MB_FAULT_ACK)), g.r32(at(mb::MB_FAULT_RESULT))), (2, 1));
    g.w32(at(mb::MB_FAULT_KIND), mb::FAULT_FAIL_CQP_OP);
    g.w32(at(mb::MB_FAULT_ARG), 0);
    g.w32(at(mb::MB_FAULT_SEQ), 3);
    h.service(&mut host);
    g.w32(at(mb::MB_FAULT_KIND), mb::FAULT_CLEAR);
    g.w32(at(mb::MB_FAULT_SEQ), 4);
    h.service(&mut host);
    assert_eq!((h.faults, g.r32(at(mb::MB_FAULT_ACK))), (3, 4));
    g.w64(sq + 64 * 3 + 24, (op::NOP as u64) << 32 | 1 << 63);
    g.w32(regs::CQPDB, 4);
    host.step();
    assert_eq!(g.r32(regs::CQPTAIL), 4, "no error after CLEAR");

    // A WQE error request lands in the fault plan.
    g.w32(at(mb::MB_FAULT_KIND), mb::FAULT_FAIL_WQE);
    g.w32(at(mb::MB_FAULT_ARG), 2);
    g.w32(at(mb::MB_FAULT_CODES), 0x0001_0003);
    g.w32(at(mb::MB_FAULT_SEQ), 6);
    assert_eq!(h.service(&mut host), Tick::Busy);
    assert_eq!(host.device.faults().fail_wqe, Some((2, 1, 3)));

    // Admin-queue faults land in the fault plan, each as asked.
    for (seq, kind, arg, codes) in [
        (0x60, mb::FAULT_AQ_HANG, 3, 0),
        (0x61, mb::FAULT_AQ_CRIT, 0, 0),
        (0x62, mb::FAULT_AQ_FAIL_OPCODE, 0, 0x0210_000E),
        (0x63, mb::FAULT_AQ_RESET, 5, 0),
    ] {
        g.w32(at(mb::MB_FAULT_KIND), kind);
        g.w32(at(mb::MB_FAULT_ARG), arg);
        g.w32(at(mb::MB_FAULT_CODES), codes);
        g.w32(at(mb::MB_FAULT_SEQ), seq);
        assert_eq!(h.service(&mut host), Tick::Busy);
        assert_eq!((g.r32(at(mb::MB_FAULT_ACK)), g.r32(at(mb::MB_FAULT_RESULT))), (seq, 0));
    }
    let f = host.device.faults();
    assert_eq!(f.aq_hang_at, Some(3));
    assert!(f.aq_crit);
    assert_eq!(f.aq_fail_opcode, Some((0x0210, 14)));
    assert_eq!(f.aq_reset_at, Some(5));
    g.w32(at(mb::MB_FAULT_KIND), mb::FAULT_CLEAR);
    g.w32(at(mb::MB_FAULT_SEQ), 0x64);
    h.service(&mut host);
    let f = host.device.faults();
    assert!(f.aq_hang_at.is_none() && !f.aq_crit && f.aq_fail_opcode.is_none());
    assert!(f.aq_reset_at.is_none() && f.fail_wqe.is_none(), "CLEAR drops them all");

    // A function reset destroys the CQP (CCQPSTATUS back to 0).
    g.w32(at(mb::MB_FAULT_KIND), mb::FAULT_FUNCTION_RESET);
    g.w32(at(mb::MB_FAULT_SEQ), 7);
    assert_eq!(h.service(&mut host), Tick::Busy);
    assert_eq!((g.r32(at(mb::MB_FAULT_ACK)), g.r32(at(mb::MB_FAULT_RESULT))), (7, 0));
    assert!(host.device.cqp().is_none());
    host.step();
    assert_eq!(g.r32(regs::CCQPSTATUS), 0, "published after the reset");

    // Shutdown, even with a ping outstanding (answered first).
    g.w32(at(mb::MB_PING), 7);
    g.w32(at(mb::MB_SHUTDOWN), 1);
    assert_eq!(h.service(&mut host), Tick::Stop);
    assert_eq!(g.r32(at(mb::MB_PONG)), mb::pong(7));
    let _ = g.ram;
}

#[test]
fn status_registers_heal_and_the_cqp_can_be_recreated() {
    let (_files, g, mut host) = rig("r");
    let (sq, ctx) = (0x10_0000u64, 0x20_0000u64);
    g.w64(ctx, 5 << 8);
    g.w64(ctx + 8, sq);
    g.w64(ctx + 32, 1 << 16);
    let create = |host: &mut ShmHost| {
        g.w32(regs::CQPTAIL, 0);
        g.w32(regs::CQPDB, 0);
        g.w32(regs::CCQPSTATUS, 0);
        g.w32(regs::CCQPHIGH, 0);
        g.w32(regs::CCQPLOW, ctx as u32);
        host.step();
        assert_eq!(g.r32(regs::CCQPSTATUS), 1, "created");
    };
    create(&mut host);
    for i in 0..3u32 {
        g.w64(sq + 64 * i as u64 + 24, (op::NOP as u64) << 32 | 1 << 63);
        g.w32(regs::CQPDB, i + 1);
        host.step();
        assert_eq!(g.r32(regs::CQPTAIL), i + 1);
    }
    // A stray guest write over a status register is repaired, without any
    // doorbell, within the republish interval.
    g.w32(regs::GLPE_CPUSTATUS0, 0);
    g.w32(regs::CQPTAIL, 0x55);
    let mut rounds = 0;
    while g.r32(regs::GLPE_CPUSTATUS0) != 0x80 || g.r32(regs::CQPTAIL) != 3 {
        host.step();
        rounds += 1;
        assert!(rounds <= 256, "not healed after {rounds} rounds");
    }
    // Destroy, then create again: the new CQP starts at slot 0 with the
    // doorbell back at 0 (a coalesced 3 → 0 → 1 must not confuse it).
    g.w32(regs::CCQPHIGH, 0);
    g.w32(regs::CCQPLOW, 0);
    host.step();
    assert_eq!(g.r32(regs::CCQPSTATUS) & 1, 0, "destroyed");
    for w in 0..8 {
        g.w64(sq + 8 * w, 0);
    }
    create(&mut host);
    assert_eq!(g.r32(regs::CQPTAIL), 0);
    g.w64(sq + 24, (op::NOP as u64) << 32 | 1 << 63);
    g.w32(regs::CQPDB, 1);
    host.step();
    assert_eq!(g.r32(regs::CQPTAIL), 1, "first op of the new CQP");
    assert_eq!(host.device.counters().cqp_ops, 4);
}

#[test]
fn guest_uses_the_lan_admin_queue_through_files() {
    use mock_bar::lan::{self, reg};
    let (_files, g, host) = rig("aq-");
    // reset-done bits are published from the start
    assert_eq!(g.r32(reg::GLNVM_ULD), reg::ULD_DONE | reg::ULD_PE_DONE);
    let (stop, handle) = shm::spawn(host, PollMode::Hybrid);
    let ring = 0x10_0000u64;
    let init = |g: &Guest| {
        g.w32(reg::ATQH, 0);
        g.w32(reg::ATQT, 0);
        g.w32(reg::ATQLEN, 8 | reg::LEN_ENABLE);
        g.w32(reg::ATQBAL, ring as u32);
        g.w32(reg::ATQBAH, 0);
    };
    init(&g);
    // Get Version in slot 0 (flags SI)
    let get_ver = (lan::opc::GET_VER as u64) << 16 | lan::flag::SI as u64;
    g.w64(ring, get_ver);
    g.w32(reg::ATQT, 1);
    g.wait(reg::ATQH, 1);
    assert_eq!(g.r64(ring) & 0xFFFF, (lan::flag::SI | lan::flag::DD | lan::flag::CMP) as u64);
    assert_eq!(g.r64(ring + 24) >> 40 & 0xFFFF, 0x0501, "API 1.5 in bytes 29-30");
    assert_eq!(g.r32(reg::ATQLEN), 8 | reg::LEN_ENABLE, "the guest's LEN stays");
    // PF reset: PFSWR clears when done, the AQ is torn down
    g.w32(reg::PFGEN_CTRL, 1);
    g.wait(reg::PFGEN_CTRL, 0);
    g.wait(reg::ATQLEN, 0);
    assert_eq!(g.r32(reg::ATQH), 0);
    init(&g);
    g.w64(ring, get_ver);
    g.w32(reg::ATQT, 1);
    g.wait(reg::ATQH, 1);
    stop.store(true, std::sync::atomic::Ordering::Release);
    let host = handle.join().unwrap();
    assert_eq!(host.device.counters().aq_commands, 2);
    assert_eq!(host.device.counters().aq_bad_ring, 0);
}
