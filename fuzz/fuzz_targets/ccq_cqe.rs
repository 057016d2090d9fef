//! The CCQ CQE decoder (`CcqCqe::decode`) and the CCQ ring consumer, on
//! fuzz bytes.
#![no_main]

mod common;

use common::word;
use irdma::cqp::decode::{CcqCqe, RingConsumer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let size = u32::from(first % 8);
    let mut ring = RingConsumer::new(size);
    for i in 0..rest.len().div_ceil(32) {
        let w = [
            word(rest, i * 4),
            word(rest, i * 4 + 1),
            word(rest, i * 4 + 2),
            word(rest, i * 4 + 3),
        ];
        for pol in [ring.polarity, !ring.polarity] {
            let _ = CcqCqe::decode(&w, pol);
        }
        ring.advance();
    }
});
