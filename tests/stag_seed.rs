//! The STag key seed is per device: two devices probed with the default
//! options hand out different first keys; a caller's seed is used as given.

mod common;

use common::*;

/// Probes a device as `a` (on its own fabric) with `seed` and returns the
/// key byte of its first MR.
fn first_key(a: Addr, seed: Option<u8>) -> u8 {
    let bar = ModelBar::standalone(Config::default());
    let o = ProbeOptions { stag_key_seed: seed, ..opts() };
    let dev = Device::probe_with(bar.clone(), lan_of(a), Profile::SMALL, o).expect("probe");
    let pd = dev.alloc_pd().expect("pd");
    let mem = buf(1);
    let mr = reg(&dev, &pd, mem.paddr(), 4096, &pages_of(&mem), false);
    let key = mr.lkey() as u8;
    drop(mr);
    drop(pd);
    dev.close().expect("close");
    key
}

#[test]
fn two_devices_get_different_first_keys() {
    let _g = lock();
    let (a, b) = (first_key(A, None), first_key(B, None));
    assert_ne!(a, b, "devices A and B share the first STag key {a:#x}");
    // The same identity probed again in this boot gets the same seed: what
    // separates A and B is their identity, not luck with the clock.
    assert_eq!(first_key(A, None), a);
    // A caller's seed is used as given (first key = seed + 1) on both.
    assert_eq!(first_key(A, Some(0x10)), 0x11);
    assert_eq!(first_key(B, Some(0x10)), 0x11);
}
