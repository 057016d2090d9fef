//! The AEQE decoder (`Aeqe::decode`, `Aeqe::classify`) and the async-event
//! conversion, on fuzz bytes.
#![no_main]

mod common;

use common::word;
use irdma::cqp::decode::Aeqe;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for i in 0..data.len().div_ceil(16) {
        let w = [word(data, i * 2), word(data, i * 2 + 1)];
        for pol in [false, true] {
            let _ = core::hint::black_box(Aeqe::decode(&w, pol));
        }
        let _ = core::hint::black_box(Aeqe::classify(w[0], w[1]));
    }
});
