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
