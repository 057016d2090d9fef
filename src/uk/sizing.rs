//! Queue sizing arithmetic (spec data-path §1.2 and §3.3).
//!
//! These are pure functions the QP creation path uses to size rings and the
//! posting path uses to size WQEs; the conformance runner checks them against
//! the vendor's helper tables.

/// Quanta reserved at the end of every real SQ (`IRDMA_SQ_RSVD`, spec data-path §3.2).
pub const SQ_RSVD: u32 = 258;
/// Quanta the free-space test keeps unused (`IRDMA_SQ_RING_FREE_QUANTA`, §3.1).
pub const SQ_FREE_RESERVE: u32 = 257;
/// RQ WQEs added when sizing (`IRDMA_RQ_RSVD`, §3.2).
pub const RQ_RSVD: u32 = 1;
/// Smallest WQ size in WQEs on GEN_2 (`ICRDMA_MIN_WQ_SIZE`, §3.3).
pub const MIN_WQ_SIZE: u32 = 8;
/// Largest SQ/RQ depth in quanta (`max_hw_wq_quanta`, §3.3).
pub const MAX_WQ_QUANTA: u32 = 32768;
/// Fragments (SGEs) per WQE on GEN_2 (`ICRDMA_MAX_WQ_FRAGMENT_COUNT`, §3.4).
pub const MAX_FRAGS: u32 = 13;

/// SQ WQE quanta for `frag_cnt` fragments (SGEs, plus one for immediate
/// data), or `None` above 15 (spec data-path §1.2; uk.c: irdma_fragcnt_to_quanta_sq).
#[inline(always)]
pub const fn fragcnt_to_quanta_sq(frag_cnt: u32) -> Option<u32> {
    if frag_cnt > 15 { None } else { Some(frag_cnt / 2 + 1) }
}

/// RQ WQE bytes for `frag_cnt` fragments, or `None` above 14
/// (spec data-path §1.2; uk.c: irdma_fragcnt_to_wqesize_rq).
pub const fn fragcnt_to_wqesize_rq(frag_cnt: u32) -> Option<u32> {
    match frag_cnt {
        0..=1 => Some(32),
        2..=3 => Some(64),
        4..=7 => Some(128),
        8..=14 => Some(256),
        _ => None,
    }
}

/// SQ WQE quanta for `len` inline bytes on GEN_2: 8 bytes in the first
/// quantum, 31 in each further one, at most 8 quanta (spec data-path §1.2;
/// uk.c: irdma_inline_data_size_to_quanta).
#[inline(always)]
pub const fn inline_data_size_to_quanta(len: u32) -> u32 {
    if len <= 8 {
        1
    } else {
        let q = 2 + (len - 9) / 31;
        if q > 8 { 8 } else { q }
    }
}

/// log2 of the nominal WQE size in quanta for ring sizing (spec data-path
/// §1.2; uk.c: irdma_get_wqe_shift, GEN_2 rule).
pub const fn get_wqe_shift(sge: u32, inline_data: u32) -> u8 {
    if sge <= 1 && inline_data <= 8 {
        0
    } else if sge < 4 && inline_data <= 39 {
        1
    } else if sge < 8 && inline_data <= 101 {
        2
    } else {
        3
    }
}

/// Result of sizing one work queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqSizing {
    /// Ring depth in quanta (a power of two).
    pub depth_quanta: u32,
    /// log2 of the nominal WQE size in quanta.
    pub shift: u8,
    /// Depth in nominal WQEs (`depth_quanta >> shift`).
    pub size: u32,
    /// What the caller is told it may post (`max_send_wr` / `max_recv_wr`).
    pub reported_max_wr: u32,
}

/// Sizing refused: the depth would exceed [`MAX_WQ_QUANTA`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooDeep;

fn depth(wr: u32, shift: u8, rsvd: u32) -> Result<u32, TooDeep> {
    let want = (u64::from(wr) << shift) + u64::from(rsvd);
    let d = want.checked_next_power_of_two().ok_or(TooDeep)?;
    let d = d.max(u64::from(MIN_WQ_SIZE) << shift);
    if d > u64::from(MAX_WQ_QUANTA) { Err(TooDeep) } else { Ok(d as u32) }
}

/// The sizing of a queue of `wr` WRs of `1 << shift` quanta each with
/// `rsvd` reserved quanta: its [`depth`], that depth in WQEs, and the WRs
/// it reports (what is left after the reserve).
fn sizing(wr: u32, shift: u8, rsvd: u32) -> Result<WqSizing, TooDeep> {
    let d = depth(wr, shift, rsvd)?;
    Ok(WqSizing { depth_quanta: d, shift, size: d >> shift, reported_max_wr: (d - rsvd) >> shift })
}

/// SQ sizing for `max_send_wr` WRs of up to `max_send_sge` SGEs and
/// `max_inline` inline bytes (spec data-path §1.2, §3.3; uk.c:
/// irdma_uk_calc_depth_shift_sq, irdma_get_sqdepth). GEN_2 sizes for one
/// extra fragment (immediate data).
pub fn calc_sq(max_send_wr: u32, max_send_sge: u32, max_inline: u32) -> Result<WqSizing, TooDeep> {
    let shift = get_wqe_shift(max_send_sge.saturating_add(1), max_inline);
    sizing(max_send_wr, shift, SQ_RSVD)
}

/// RQ sizing for `max_recv_wr` WRs of up to `max_recv_sge` SGEs (spec
/// data-path §3.3; uk.c: irdma_uk_calc_depth_shift_rq, irdma_get_rqdepth).
pub fn calc_rq(max_recv_wr: u32, max_recv_sge: u32) -> Result<WqSizing, TooDeep> {
    let shift = get_wqe_shift(max_recv_sge, 0);
    sizing(max_recv_wr, shift, RQ_RSVD)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quanta_tables() {
        assert_eq!(fragcnt_to_quanta_sq(0), Some(1));
        assert_eq!(fragcnt_to_quanta_sq(2), Some(2));
        assert_eq!(fragcnt_to_quanta_sq(15), Some(8));
        assert_eq!(fragcnt_to_quanta_sq(16), None);
        assert_eq!(fragcnt_to_wqesize_rq(7), Some(128));
        assert_eq!(fragcnt_to_wqesize_rq(15), None);
        for (len, q) in [(0, 1), (8, 1), (9, 2), (39, 2), (40, 3), (70, 3), (101, 4), (102, 5)] {
            assert_eq!(inline_data_size_to_quanta(len), q, "len {len}");
        }
        assert_eq!(inline_data_size_to_quanta(u32::MAX), 8);
    }

    #[test]
    fn sizing_matches_the_spec_example() {
        // spec §3.3: max_send_wr 4063 with shift 3 fits 32768 quanta, 4064 does not.
        let s = calc_sq(4063, 13, 101).unwrap();
        assert_eq!((s.depth_quanta, s.shift), (32768, 3));
        assert_eq!(calc_sq(4064, 13, 101), Err(TooDeep));
        assert_eq!(calc_sq(u32::MAX, 13, 101), Err(TooDeep));
        let r = calc_rq(1, 1).unwrap();
        assert_eq!((r.depth_quanta, r.size, r.reported_max_wr), (8, 8, 7));
    }
}
