//! Bring-up against the device model: probe, footprint, close, failures.

mod common;

use common::*;

#[test]
fn probe_and_close() {
    let _g = lock();
    let base = FakeHal::live_pages();
    let bar = ModelBar::standalone(Config::default());
    let dev = probe(&bar).expect("probe");
    assert!(bar.with_device(|d| d.hmc_ready()));
    let fp = dev.footprint();
    let held = (FakeHal::live_pages() - base) as u64 * 4096;
    assert_eq!(held, fp.current_bytes, "footprint matches what was allocated: {fp:?}");
    dev.close().expect("close");
    assert_eq!(FakeHal::live_pages(), base);
}
