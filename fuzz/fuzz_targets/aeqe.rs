//! The AEQE decoder (`Aeqe::decode`, `Aeqe::classify`) and the async-event
//! conversion, on fuzz bytes.
#![no_main]

use irdma::cqp::decode::Aeqe;
use libfuzzer_sys::fuzz_target;

fn word(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    for (k, x) in w.iter_mut().enumerate() {
        *x = b.get(i * 8 + k).copied().unwrap_or(0);
    }
    u64::from_le_bytes(w)
}

fuzz_target!(|data: &[u8]| {
    for i in 0..data.len().div_ceil(16) {
        let w = [word(data, i * 2), word(data, i * 2 + 1)];
        for pol in [false, true] {
            let _ = core::hint::black_box(Aeqe::decode(&w, pol));
        }
        let _ = core::hint::black_box(Aeqe::classify(w[0], w[1]));
    }
});
