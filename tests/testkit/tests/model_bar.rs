//! `FakeHalMemory` against real `FakeHal` allocations (own process: the
//! FakeHal unit test counts pages exactly).

use irdma_hal::{BufferDirection, Dma, PAGE_SIZE};
use irdma_testkit::{FakeHal, FakeHalMemory};
use mock_bar::Memory;

#[test]
fn memory_only_touches_live_fakehal_memory() {
    let d = Dma::<FakeHal>::new(1, BufferDirection::Both).expect("alloc");
    let pa = d.paddr();
    let m = FakeHalMemory;
    m.write(pa + 8, &[1, 2, 3]).expect("inside");
    let mut b = [0u8; 3];
    m.read(pa + 8, &mut b).expect("inside");
    assert_eq!(b, [1, 2, 3]);
    assert!(m.read(pa + PAGE_SIZE as u64 - 2, &mut b).is_err(), "crosses the end");
    assert!(m.write(0x10, &[0]).is_err(), "never allocated");
    drop(d);
    assert!(m.read(pa, &mut b).is_err(), "freed");
}

/// The probe path the driver takes, done by hand through the driver's `Bar`
/// trait and `FakeHal` DMA: firmware ready, CQP handshake, one polled op
/// that DMAs into a FakeHal page, and a bad address that becomes a model
/// fault instead of a segfault.
#[test]
fn probe_like_flow_through_bar_and_fakehal() {
    use irdma_hal::Bar;
    use irdma_testkit::ModelBar;
    let bar = ModelBar::standalone(mock_bar::Config::default());
    assert_eq!(bar.read32(0x0050_BA5C), 0x80);
    assert_eq!((bar.read32(0x0009_DE74) >> 4) & 3, 2);
    let sq = Dma::<FakeHal>::new(1, BufferDirection::Both).expect("sq");
    let ctx = Dma::<FakeHal>::new(1, BufferDirection::Both).expect("ctx");
    let buf = Dma::<FakeHal>::new(1, BufferDirection::Both).expect("buf");
    ctx.write_u64(0, 5 << 8); // SQSIZE: 64 entries
    ctx.write_u64(8, sq.paddr());
    ctx.write_u64(24, 0xfeed);
    ctx.write_u64(32, 1 << 16); // HW_MAJVER 1
    bar.write32(0x0050_A100, (ctx.paddr() >> 32) as u32); // CCQPHIGH
    bar.write32(0x0050_A080, ctx.paddr() as u32); // CCQPLOW
    assert_eq!(bar.read32(0x0050_A000), 1, "CCQPSTATUS");
    // QUERY_FPM_VAL (0x20) into a FakeHal page
    sq.write_u64(32, buf.paddr());
    sq.write_u64(24, 0x20u64 << 32 | 1 << 63);
    bar.write32(0x0050_0800, 1); // CQPDB
    assert_eq!(bar.read32(0x0050_0880), 1, "CQPTAIL moved");
    assert!(buf.read_u64(8).unwrap() >> 32 > 0, "device wrote the query buffer");
    // a buffer address the driver never allocated: error completion + fault
    sq.write_u64(64 + 32, 0x10);
    sq.write_u64(64 + 24, 0x20u64 << 32 | 1 << 63);
    bar.write32(0x0050_0800, 2);
    assert_eq!(bar.read32(0x0050_0880) >> 31, 1, "CQP_OP_ERR");
    assert!(bar.with_device(|d| d.counters().dma_faults) >= 1);
    bar.expect_counter(irdma_testkit::ErrorCounter::DmaFaults);
}

/// The end-of-test check: an error counter nobody declared fails the test
/// when the last clone of the BAR goes.
#[test]
#[should_panic(expected = "model error counters moved that the test did not expect")]
fn an_unexpected_model_error_fails_at_drop() {
    use irdma_hal::Bar;
    let bar = irdma_testkit::ModelBar::standalone(mock_bar::Config::default());
    let clone = bar.clone();
    clone.write32(0x0050_0800 + 0x200, 0); // nothing: plain register
    bar.write32(mock_bar::regs::WQEALLOC as usize, 77); // no QP 77: a bad doorbell
    drop(bar);
    // still one clone alive: no check yet
    assert_eq!(clone.unexpected_errors(), vec![(irdma_testkit::ErrorCounter::BadDoorbells, 1)]);
}

#[test]
fn a_declared_model_error_passes_and_finish_checks_once() {
    use irdma_hal::Bar;
    use irdma_testkit::ErrorCounter;
    let bar = irdma_testkit::ModelBar::standalone(mock_bar::Config::default());
    bar.write32(mock_bar::regs::WQEALLOC as usize, 77);
    bar.expect_counter(ErrorCounter::BadDoorbells);
    bar.finish();
    let late = irdma_testkit::ModelBar::standalone(mock_bar::Config::default());
    late.write32(mock_bar::regs::WQEALLOC as usize, 77);
    let r = std::panic::catch_unwind(|| late.finish());
    assert!(r.is_err(), "finish() checks at once");
}

/// An ATQ tail write the LAN firmware side ignores (no ring set up) is a
/// checked error counter too.
#[test]
fn an_atq_post_on_a_dead_ring_is_a_checked_error() {
    use irdma_hal::Bar;
    use irdma_testkit::ErrorCounter;
    let bar = irdma_testkit::ModelBar::standalone(mock_bar::Config::default());
    bar.write32(0x0008_0400, 1); // PF_FW_ATQT with no ATQ enabled
    assert_eq!(bar.unexpected_errors(), vec![(ErrorCounter::AqBadRing, 1)]);
    bar.expect_counter(ErrorCounter::AqBadRing);
    bar.finish();
}

/// Issue #28: the model reaches DMA memory while driver threads access it
/// (the device thread, or a doorbell write on one thread while another
/// fills the ring). The driver's accesses are aligned 8-byte atomics, so the
/// model's must be too: a plain byte copy racing them is a data race, and an
/// atomic access of another size racing them is undefined behaviour as
/// well. Miri reports either (run under `cargo xtask test miri`).
#[test]
fn model_access_racing_the_driver_is_sound() {
    let d = Dma::<FakeHal>::new(1, BufferDirection::Both).expect("alloc");
    let pa = d.paddr();
    std::thread::scope(|s| {
        let d = &d;
        s.spawn(move || {
            for i in 0..4u64 {
                assert!(d.write_u64(0, i << 32 | 0x1111));
                let _ = d.read_u64(8);
                assert!(d.write_bytes(17, &[0xaa, i as u8]));
            }
        });
        s.spawn(move || {
            let m = FakeHalMemory;
            for i in 0..4u8 {
                let mut b = [0u8; 6];
                m.read(pa + 1, &mut b).expect("inside");
                m.write(pa + 8, &[i; 3]).expect("inside");
                m.write(pa + 16, &[0xbb]).expect("inside");
                m.write(pa + 20, &[0xcc; 4]).expect("inside");
            }
        });
    });
    // Neither side lost the other's bytes of the shared word.
    assert_eq!(d.read_u64(16), Some(0xcccc_cccc_0003_aabb));
    assert_eq!(d.read_u64(8), Some(0x0003_0303));
}
