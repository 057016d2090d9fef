//! The FPM query/commit buffer decoders and HMC sizing, along the probe's
//! path: query buffer → `FpmQuery::decode` → `FpmCaps` → `size_hmc`
//! (fuzzed profile) → commit buffer (the encoded counts XOR fuzz bytes, or
//! raw fuzz bytes) → `FpmCommit::decode` → `HmcLayout::new` → every layout
//! query. With flag bit 3 the caps are raw fuzz values instead of decoded
//! ones, so `size_hmc` also sees inputs the decoder cannot produce.
#![no_main]

use irdma::cqp::ctx::{HMC_OBJ_COUNT, encode_fpm_commit};
use irdma::cqp::decode::{FpmCommit, FpmQuery};
use irdma::lan::Protocol;
use irdma::res::hmc::HmcObj;
use irdma::res::{FpmCaps, HmcLayout, ObjCaps, ObjCommit, Profile, size_hmc};
use libfuzzer_sys::fuzz_target;

struct Bytes<'a>(&'a [u8]);
impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else { return 0 };
        self.0 = rest;
        b
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }
    fn buf(&mut self) -> [u64; 24] {
        core::array::from_fn(|_| self.u64())
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let flags = b.u8();
    let profile = Profile {
        qps: b.u32(),
        cqs: b.u32(),
        mrs: b.u32(),
        pbles: b.u32(),
        max_sds: if flags & 4 != 0 { Some(b.u32()) } else { None },
        protocol: if flags & 2 != 0 { Protocol::Iwarp } else { Protocol::RoceV2 },
    };
    let caps = if flags & 8 != 0 {
        FpmCaps {
            obj: core::array::from_fn(|_| ObjCaps { max_cnt: b.u32(), size: b.u64() }),
            first_sd_index: b.u32(),
            max_sds: b.u32(),
            ht_multiplier: b.u32(),
            timer_bucket: b.u32(),
            xf_block_size: b.u64(),
            q1_block_size: b.u64(),
            rrf_block_size: b.u64(),
            ooiscf_block_size: b.u64(),
            max_hw_ird: b.u32(),
        }
    } else {
        let q = match FpmQuery::decode(&b.buf(), flags & 1 != 0, flags & 16 != 0) {
            Ok(q) => q,
            Err(_) => return,
        };
        let _ = q.max_hw_ird();
        FpmCaps::from(&q)
    };
    let counts = size_hmc(&caps, &profile).ok();
    let mut commit = b.buf();
    if flags & 32 == 0 {
        let mut enc = [0u64; 24];
        let cnt = counts.map_or([0; HMC_OBJ_COUNT], |c| c.cnt);
        encode_fpm_commit(&cnt, &mut enc);
        for (w, e) in commit.iter_mut().zip(enc) {
            *w ^= e;
        }
    }
    let sizes: [u64; HMC_OBJ_COUNT] = core::array::from_fn(|i| caps.obj[i].size);
    let Ok(c) = FpmCommit::decode(&commit, &sizes) else { return };
    let objs: [ObjCommit; HMC_OBJ_COUNT] =
        core::array::from_fn(|i| ObjCommit { cnt: c.obj[i].cnt, base: c.obj[i].base });
    let Ok(l) = HmcLayout::new(&sizes, &objs) else { return };
    for o in HmcObj::ALL {
        let _ = l.object(o);
        for sd in l.new_static_sds(o).take(4096) {
            let _ = l.is_static_sd(sd);
        }
    }
    let _ = l.static_sds().take(1 << 16).count();
    let _ = l.static_sd_count();
    let fp = l.footprint();
    let _ = fp.initial_bytes();
});
