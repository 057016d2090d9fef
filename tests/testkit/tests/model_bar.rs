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
