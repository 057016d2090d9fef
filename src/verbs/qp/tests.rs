//! Tests of the QP verbs (`super`): the RoCEv2 UDP source port.

use super::udp_sport;

// shared/spec/rocev2-wire.md §1.5, the three worked examples
#[test]
fn udp_sport_matches_the_spec_examples() {
    assert_eq!(udp_sport(0, 0x11, 0x12), 0xC132);
    assert_eq!(udp_sport(0, 0x12_3456, 0x42), 0xFE62);
    assert_eq!(udp_sport(0x1_2345, 0x11, 0x12), 0xE341);
}

#[test]
fn udp_sport_is_symmetric_and_in_the_dynamic_range() {
    for (a, b) in [(0, 0), (1, 2), (0xFF_FFFF, 0xFF_FFFF), (7, 0x80_0000)] {
        assert_eq!(udp_sport(0, a, b), udp_sport(0, b, a));
        assert!(udp_sport(0, a, b) >= 0xC000);
    }
    // a given flow label ignores the QPNs
    assert_eq!(udp_sport(0xF_FFFF, 1, 2), udp_sport(0xF_FFFF, 3, 4));
    assert_eq!(udp_sport(0xF_FFFF, 1, 2), 0xFFC0);
}

/// A QP keeps host memory of its own (the completion half; for a shared QP
/// the multi-producer SQ object too) and frees it when dropped. Handing the
/// QP by value to a function that drops it must not free memory that a
/// reference inside the QP still claims for the whole call: under Miri this
/// failed with "deallocating while item is strongly protected" while those
/// fields were `&'static` references (leg `miri` runs it).
#[test]
fn qps_dropped_inside_a_call_that_took_them_by_value() {
    use crate::verbs::{QpInitAttr, model_device, small_cap};

    let dev = model_device(crate::res::Profile::SMALL);
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let mut attr = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap: small_cap() };
    core::mem::drop(dev.create_qp(&pd, &mut attr).unwrap());
    core::mem::drop(dev.create_ud_qp(&pd, &mut attr).unwrap());
    core::mem::drop(dev.create_shared_qp(&pd, &mut attr).unwrap());
    // Everything came back: the same QPs can be made again.
    core::mem::drop(dev.create_qp(&pd, &mut attr).unwrap());
    drop(cq);
    drop(pd);
}
