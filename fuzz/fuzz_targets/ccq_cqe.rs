//! The CCQ CQE decoder (`CcqCqe::decode`) and the CCQ ring consumer, on
//! fuzz bytes.
#![no_main]

use irdma::cqp::decode::{CcqCqe, RingConsumer};
use libfuzzer_sys::fuzz_target;

fn word(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    for (k, x) in w.iter_mut().enumerate() {
        *x = b.get(i * 8 + k).copied().unwrap_or(0);
    }
    u64::from_le_bytes(w)
}

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
