//! The device model's WQE decoders (`mock_bar::wqe`): SQ (header quanta,
//! fragments, inline data) and RQ, on fuzz words.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mock_bar::wqe::{decode_rq, decode_sq, sq_quanta};

fuzz_target!(|data: &[u8]| {
    let words: Vec<u64> = data
        .chunks(8)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect();
    if let Some(&h) = words.get(3) {
        let _ = sq_quanta(h);
    }
    let _ = decode_sq(&words);
    let _ = decode_rq(&words);
});
