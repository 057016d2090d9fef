//! Decoders of what the device writes: CCQ CQEs, the FPM query and commit
//! buffers, AEQEs. They take plain word arrays, cannot panic, and never trust
//! a value to be in range.

use core::error::Error;
use core::fmt::{self, Display, Formatter};
use irdma_hal::cqp::{aeqe, ccq, features, fpm_commit, fpm_query};

use super::ctx::{HMC_APBVT, HMC_OBJ_COUNT, commit_word};

/// A CCQ CQE as the driver reads it (ctrl.c: irdma_sc_ccq_get_cqe_info;
/// spec §2.6). The opcode is not in the CQE: the engine reads it from its
/// own SQ WQE at `wqe_idx`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CcqCqe {
    /// Completion context (the CQP host context @24).
    pub compl_ctx: u64,
    /// OPRETVAL.
    pub op_ret_val: u32,
    /// ERROR.
    pub error: bool,
    /// Major error code.
    pub major: u16,
    /// Minor error code.
    pub minor: u16,
    /// CQP SQ index this completes.
    pub wqe_idx: u16,
}

impl CcqCqe {
    /// Decodes `words` if its valid bit equals `polarity`; otherwise nothing
    /// is there (ctrl.c: irdma_sc_ccq_get_cqe_info: -ENOENT, no field read).
    /// As the vendor: the major code is reported only with ERROR set
    /// (IRDMA_CQPSQ_MAJ_NO_ERROR otherwise), the minor code always.
    pub fn decode(words: &[u64; 4], polarity: bool) -> Option<Self> {
        let w24 = words[3];
        if ccq::VALID.is_set(w24) != polarity {
            return None;
        }
        let error = ccq::ERROR.is_set(w24);
        Some(CcqCqe {
            compl_ctx: words[1],
            op_ret_val: ccq::OPRETVAL.get(words[2]) as u32,
            error,
            major: if error { ccq::MAJERR.get(w24) as u16 } else { 0 },
            minor: ccq::MINERR.get(w24) as u16,
            wqe_idx: ccq::WQEIDX.get(w24) as u16,
        })
    }
}

/// Consumer state of a completion ring whose polarity starts at 1 and flips
/// on every wrap (the CCQ; ctrl.c: irdma_sc_ccq_init,
/// irdma_sc_ccq_get_cqe_info).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConsumer {
    /// Entries in the ring (> 0).
    pub size: u32,
    /// Next entry to read.
    pub head: u32,
    /// Valid-bit value of the current pass.
    pub polarity: bool,
}

impl RingConsumer {
    /// A fresh ring of `size` entries (polarity 1).
    pub fn new(size: u32) -> Self {
        RingConsumer { size: size.max(1), head: 0, polarity: true }
    }
    /// Moves past one entry; returns the new head (to write to the shadow area).
    pub fn advance(&mut self) -> u32 {
        self.head = self.head.wrapping_add(1) % self.size.max(1);
        if self.head == 0 {
            self.polarity = !self.polarity;
        }
        self.head
    }
}

/// One HMC object as the query buffer describes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HmcObjMax {
    /// Maximum count.
    pub max_cnt: u32,
    /// Object size in bytes.
    pub size: u64,
}

/// The decoded QUERY_FPM_VAL buffer (ctrl.c: irdma_sc_parse_fpm_query_buf;
/// spec §3.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FpmQuery {
    /// First PE SD index.
    pub first_sd_index: u16,
    /// Maximum PE SDs.
    pub max_sds: u16,
    /// SD table size (max + first).
    pub sd_cnt: u32,
    /// Maximum CEQs.
    pub max_ceqs: u16,
    /// Hash-table multiplier.
    pub ht_multiplier: u8,
    /// Timer bucket.
    pub timer_bucket: u16,
    /// XF block size.
    pub xf_block_size: u32,
    /// Q1 block size.
    pub q1_block_size: u32,
    /// RRF block size.
    pub rrf_block_size: u32,
    /// OOISC free-list block size.
    pub ooiscf_block_size: u32,
    /// IRD from MAX_IRD, only with the MANAGE_RSRC_VER2 feature flag.
    pub ird: Option<u16>,
    /// Per object type: max count and size.
    pub obj: [HmcObjMax; HMC_OBJ_COUNT],
}

/// Why a device buffer was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DecodeError {
    /// The Q1 block size is 0 (Linux: -EINVAL).
    Q1BlockSizeZero,
    /// XF objects exist but the XF block size is 0 (Linux: -EINVAL).
    XfBlockSizeZero,
    /// RRF free-list entries exist but the RRF block size is 0 (Linux: -EINVAL).
    RrfBlockSizeZero,
    /// OOISC free-list entries exist but its block size is 0 (Linux: -EINVAL).
    OoiscfBlockSizeZero,
    /// A base + count × size does not fit 64 bits.
    Overflow,
}

/// Query-buffer word (u64 index) of object `i`, or `None` for APBVT, which
/// the query does not report (spec §3.2).
const fn query_word(i: usize) -> Option<usize> {
    match i {
        0..=4 => Some(i + 1),
        5 => None,
        6..=14 => Some(i),
        _ => Some(i + 1),
    }
}

/// GEN_2 default IRD when the firmware does not report one (icrdma_hw.h:
/// ICRDMA_MAX_IRD_SIZE).
pub const GEN2_MAX_IRD: u16 = 8;

impl FpmQuery {
    /// The IRD the device supports (decoded, or the GEN_2 default 8).
    pub fn max_hw_ird(&self) -> u16 {
        self.ird.unwrap_or(GEN2_MAX_IRD)
    }

    /// Decodes the buffer. `manage_rsrc_ver2` is feature flag
    /// FTN_FLAGS bit 2 from QUERY_RDMA_FEATURES; `vf_or_unprivileged` (the
    /// queried function is a VF or this one is not privileged) makes the
    /// vendor keep one SD back for PBLE rounding — saturating here where the
    /// vendor's u16 would wrap (ctrl.c: irdma_sc_parse_fpm_query_buf).
    pub fn decode(
        buf: &[u64; 24],
        manage_rsrc_ver2: bool,
        vf_or_unprivileged: bool,
    ) -> Result<Self, DecodeError> {
        let mut q = FpmQuery::default();
        let w0 = buf[0];
        q.first_sd_index = fpm_query::FIRST_PE_SD_INDEX.get(w0) as u16;
        q.max_sds = fpm_query::MAX_PE_SDS.get(w0) as u16;
        if vf_or_unprivileged {
            q.max_sds = q.max_sds.saturating_sub(1);
        }
        q.sd_cnt = q.max_sds as u32 + q.first_sd_index as u32;
        for (i, o) in q.obj.iter_mut().enumerate() {
            let Some(w) = query_word(i).and_then(|k| buf.get(k)) else {
                // APBVT: fixed by the driver (ctrl.c: irdma_sc_parse_fpm_query_buf).
                *o = HmcObjMax { max_cnt: 1, size: 8192 };
                continue;
            };
            // Size = 1 << log2; the vendor's BIT_ULL of an out-of-range
            // exponent behaves as a 6-bit shift on x86, and so does this.
            let shift = fpm_query::SIZE_LOG2.get(*w) as u32;
            *o = HmcObjMax {
                max_cnt: fpm_query::MAX_CNT.get(*w) as u32,
                size: 1u64.wrapping_shl(shift),
            };
        }
        // Free-list words carry block sizes in their high half; their own
        // objects are 4 bytes (PBLE: 8).
        let hi = |k: usize| fpm_query::SIZE_LOG2.get(buf[k]) as u32;
        q.xf_block_size = hi(8);
        q.obj[8].size = 4;
        q.q1_block_size = hi(10);
        q.obj[10].size = 4;
        q.obj[14].size = 8;
        let w120 = buf[15];
        q.max_ceqs = fpm_query::MAX_CEQS.get(w120) as u16;
        q.ht_multiplier = fpm_query::HTMULTIPLIER.get(w120) as u8;
        q.timer_bucket = fpm_query::TIMERBUCKET.get(w120) as u16;
        if manage_rsrc_ver2 {
            // GEN_3 IRD encoding 0..=10 → 4 << enc, else 4; the value is
            // halved (ctrl.c: irdma_sc_get_decoded_ird_size_gen_3).
            let enc = fpm_query::MAX_IRD.get(w120) as u32;
            let ird = if enc <= 10 { 4u32 << enc } else { 4 };
            q.ird = Some((ird / 2) as u16);
        }
        if q.obj[7].max_cnt != 0 && q.xf_block_size == 0 {
            return Err(DecodeError::XfBlockSizeZero);
        }
        if q.q1_block_size == 0 {
            return Err(DecodeError::Q1BlockSizeZero);
        }
        q.rrf_block_size = hi(17);
        q.obj[16].size = 4;
        if q.rrf_block_size == 0 && q.obj[16].max_cnt != 0 {
            return Err(DecodeError::RrfBlockSizeZero);
        }
        if q.obj[7].max_cnt == 0 {
            q.obj[15].max_cnt = 16;
        }
        q.ooiscf_block_size = hi(21);
        q.obj[20].size = 4;
        if q.ooiscf_block_size == 0 && q.obj[20].max_cnt != 0 {
            return Err(DecodeError::OoiscfBlockSizeZero);
        }
        Ok(q)
    }
}

/// One committed object: what COMMIT_FPM_VAL returns (spec §3.4); the
/// decoded commit feeds [`crate::res::HmcLayout::new`] without a copy
/// (re-exported as `res::ObjCommit`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ObjCommit {
    /// Committed count.
    pub cnt: u32,
    /// FPM byte address of element 0 (the decoded base × 512).
    pub base: u64,
}

/// One committed HMC object (the decoder's name for [`ObjCommit`]).
pub type HmcObjCommit = ObjCommit;

/// The decoded COMMIT_FPM_VAL buffer (ctrl.c: irdma_sc_parse_fpm_commit_buf;
/// spec §3.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FpmCommit {
    /// Per object type.
    pub obj: [HmcObjCommit; HMC_OBJ_COUNT],
    /// SDs needed: ceil((base + cnt × size) / 2 MiB) of the object with the
    /// highest base.
    pub sd_cnt: u32,
}

impl FpmCommit {
    /// Decodes the buffer; `sizes` are the object sizes from the query.
    pub fn decode(buf: &[u64; 24], sizes: &[u64; HMC_OBJ_COUNT]) -> Result<Self, DecodeError> {
        let mut c = FpmCommit::default();
        let mut last = 0usize;
        let mut max_base = 0u64;
        for (i, o) in c.obj.iter_mut().enumerate() {
            let w = buf.get(commit_word(i)).copied().unwrap_or(0);
            let cnt = match i {
                0 => fpm_commit::QPCNT.get(w),
                1 => fpm_commit::CQCNT.get(w),
                HMC_APBVT => 1,
                _ => fpm_commit::CNT.get(w),
            } as u32;
            let base = fpm_commit::BASE.get(w) * 512;
            *o = HmcObjCommit { cnt, base };
            // The last object is the one with the highest base among those
            // with a count (ctrl.c: irdma_sc_parse_fpm_commit_buf).
            if base > max_base && cnt != 0 {
                max_base = base;
                last = i;
            }
        }
        // `last < HMC_OBJ_COUNT` (an index of the loop above).
        let (o, size) = (c.obj.get(last).copied(), sizes.get(last).copied());
        let (o, size) = (o.unwrap_or_default(), size.unwrap_or(0));
        let end = (o.cnt as u64)
            .checked_mul(size)
            .and_then(|b| b.checked_add(o.base))
            .ok_or(DecodeError::Overflow)?;
        c.sd_cnt = u32::try_from(end.div_ceil(2 << 20)).map_err(|_| DecodeError::Overflow)?;
        Ok(c)
    }
}

/// The decoded QUERY_RDMA_FEATURES response (ctrl.c:
/// irdma_get_rdma_features; spec §4.3.23).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmaFeatures {
    /// Firmware major version.
    pub fw_major: u16,
    /// Firmware minor version.
    pub fw_minor: u16,
    /// Entries the firmware reported.
    pub count: u16,
    /// The raw entry of each known type (0 when absent).
    pub entries: [u64; features::MAX_FEATURES],
}

/// Why a QUERY_RDMA_FEATURES response was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FeaturesError {
    /// Fewer than two entries (Linux: -EINVAL).
    TooFew(u16),
    /// More entries than the buffer held: query again with room for `needed`.
    BufferTooSmall {
        /// Entries the firmware has.
        needed: u16,
    },
}

impl RdmaFeatures {
    /// Decodes the first `words.len()` entries of a response buffer.
    pub fn decode(words: &[u64]) -> Result<Self, FeaturesError> {
        let w0 = words.first().copied().unwrap_or(0);
        let count = features::CNT.get(w0) as u16;
        if count < features::MIN_FEATURES {
            return Err(FeaturesError::TooFew(count));
        }
        if count as usize > words.len() {
            return Err(FeaturesError::BufferTooSmall { needed: count });
        }
        let mut entries = [0u64; features::MAX_FEATURES];
        for w in words.iter().take(count as usize) {
            // Unknown types are ignored, as the vendor does.
            if let Some(e) = entries.get_mut(features::TYPE.get(*w) as usize) {
                *e = *w;
            }
        }
        Ok(RdmaFeatures {
            fw_major: features::FW_MAJOR.get(w0) as u16,
            fw_minor: features::FW_MINOR.get(w0) as u16,
            count,
            entries,
        })
    }

    fn flags(&self) -> u64 {
        self.entries.get(features::TYPE_FTN_FLAGS as usize).copied().unwrap_or(0)
    }
    /// Remote atomics allowed.
    pub fn atomics(&self) -> bool {
        features::FLAG_ATOMICS.is_set(self.flags())
    }
    /// MANAGE_RSRC_VER2: the FPM query reports MAX_IRD.
    pub fn manage_rsrc_ver2(&self) -> bool {
        features::FLAG_MANAGE_RSRC_VER2.is_set(self.flags())
    }
}

/// A decoded AEQE with the vendor's classification (ctrl.c:
/// irdma_sc_get_next_aeqe; spec §8.2). As in the vendor code, a QP-class AE
/// code arriving with a CQ source sets both `qp` and `cq`, and the context is
/// then the CQ's (shifted) one; consumers should check `cq` first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Aeqe {
    /// Completion context: QP context @168 for QPs, CQ context << 1 for CQs,
    /// 0 when the event names neither.
    pub compl_ctx: u64,
    /// QP or CQ id.
    pub qp_cq_id: u32,
    /// WQE index.
    pub wqe_idx: u16,
    /// Deferred-completion ticket (the WQE index of AE 0x0901).
    pub def_info: u16,
    /// AE code.
    pub ae_id: u16,
    /// AE source as written.
    pub ae_src: u8,
    /// TCP state.
    pub tcp_state: u8,
    /// QP state.
    pub iwarp_state: u8,
    /// Q2 data written.
    pub q2_data_written: u8,
    /// AEQ overflowed.
    pub overflow: bool,
    /// Concerns a QP.
    pub qp: bool,
    /// Concerns a CQ.
    pub cq: bool,
    /// Concerns an SRQ.
    pub srq: bool,
    /// The QP's SQ.
    pub sq: bool,
    /// The QP's RQ.
    pub rq: bool,
    /// The RQ WQE index is valid.
    pub err_rq_idx_valid: bool,
    /// Inbound read response / write.
    pub in_rdrsp_wr: bool,
    /// Outbound read response.
    pub out_rdrsp: bool,
}

/// AE codes that name a QP whatever AESRC says; AESRC may add SQ/RQ detail.
const AE_QP: &[u16] = &[
    0x011C, 0x011D, 0x011E, 0x011F, 0x0121, 0x0132, 0x0133, 0x0134, 0x0135, 0x0201, 0x0205, 0x0206,
    0x0207, 0x0208, 0x020A, 0x020D, 0x020E, 0x0304, 0x0305, 0x0307, 0x0308, 0x0311, 0x0312, 0x0313,
    0x0314, 0x0316, 0x0317, 0x0318, 0x0401, 0x0402, 0x0403, 0x0406, 0x0505, 0x0507, 0x050A, 0x050C,
    0x050E, 0x050F, 0x0601, 0x0602, 0x0603, 0x0700, 0x0703, 0x0704, 0x0705, 0x0900,
];
/// AE codes that name a QP and ignore AESRC.
const AE_QP_NOSRC: &[u16] =
    &[0x0202, 0x0380, 0x0381, 0x0382, 0x0383, 0x0501, 0x0502, 0x0503, 0x0508, 0x0509];
/// AE code naming a CQ and ignoring AESRC (LCE_CQ_CATASTROPHIC).
const AE_CQ_CATASTROPHIC: u16 = 0x0702;
/// AE code naming an SRQ.
const AE_SRQ_LIMIT: u16 = 0x0209;
/// AE code of a deferred CQP completion (GEN_3; neither QP nor CQ).
const AE_CQP_DEFERRED_COMPLETE: u16 = 0x0901;
/// AE code of resource exhaustion (AESRC names the resource; neither QP nor CQ).
const AE_RESOURCE_EXHAUSTION: u16 = 0x0520;

impl Aeqe {
    /// Decodes `words` if its valid bit equals `polarity`.
    pub fn decode(words: &[u64; 2], polarity: bool) -> Option<Self> {
        let w8 = words[1];
        if aeqe::VALID.is_set(w8) != polarity {
            return None;
        }
        Some(Self::classify(words[0], w8))
    }

    /// The fields and classification of an AEQE, ignoring its valid bit.
    pub fn classify(w0: u64, w8: u64) -> Self {
        let mut a = Aeqe {
            qp_cq_id: (aeqe::QPCQID_LOW.get(w8) | aeqe::QPCQID_HI.get(w8) << 18) as u32,
            wqe_idx: aeqe::WQDESCIDX.get(w8) as u16,
            ae_id: aeqe::AECODE.get(w8) as u16,
            ae_src: aeqe::AESRC.get(w8) as u8,
            tcp_state: aeqe::TCPSTATE.get(w8) as u8,
            iwarp_state: aeqe::IWSTATE.get(w8) as u8,
            q2_data_written: aeqe::Q2DATA.get(w8) as u8,
            overflow: aeqe::OVERFLOW.is_set(w8),
            ..Default::default()
        };
        let code = a.ae_id;
        let mut use_src = true;
        if AE_QP.contains(&code) {
            a.qp = true;
            a.compl_ctx = w0;
        } else if AE_QP_NOSRC.contains(&code) {
            a.qp = true;
            a.compl_ctx = w0;
            use_src = false;
        } else if code == AE_CQ_CATASTROPHIC {
            a.cq = true;
            a.compl_ctx = w0 << 1;
            use_src = false;
        } else if code == AE_SRQ_LIMIT {
            a.srq = true;
            a.compl_ctx = aeqe::SRQ_CTX.get(w0);
            use_src = false;
        } else if code == AE_CQP_DEFERRED_COMPLETE {
            a.def_info = a.wqe_idx;
            use_src = false;
        } else if code == AE_RESOURCE_EXHAUSTION {
            use_src = false;
        }
        if use_src {
            match a.ae_src {
                0x1 | 0x3 => {
                    a.qp = true;
                    a.rq = true;
                    a.err_rq_idx_valid = true;
                    a.compl_ctx = w0;
                }
                0x2 | 0x6 | 0xA | 0xE => {
                    a.cq = true;
                    a.compl_ctx = w0 << 1;
                }
                0x5 | 0x7 => {
                    a.qp = true;
                    a.sq = true;
                    a.compl_ctx = w0;
                }
                0x9 | 0xB => {
                    a.qp = true;
                    a.in_rdrsp_wr = true;
                    a.compl_ctx = w0;
                }
                0xD | 0xF => {
                    a.qp = true;
                    a.out_rdrsp = true;
                    a.compl_ctx = w0;
                }
                _ => {}
            }
        }
        a
    }
}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

crate::error::phrases!(DecodeError {
    DecodeError::Q1BlockSizeZero => "FPM buffer: Q1 block size is 0",
    DecodeError::XfBlockSizeZero => "FPM buffer: XF block size is 0",
    DecodeError::RrfBlockSizeZero => "FPM buffer: RRF block size is 0",
    DecodeError::OoiscfBlockSizeZero => "FPM buffer: OOISCF block size is 0",
    DecodeError::Overflow => "FPM buffer: base + count x size overflows",
});

impl Display for FeaturesError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            FeaturesError::TooFew(n) => write!(f, "RDMA features: {n} entries, need at least 2"),
            FeaturesError::BufferTooSmall { needed } => {
                write!(f, "RDMA features: buffer too small, {needed} entries needed")
            }
        }
    }
}

impl Error for FeaturesError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ccq_cqe_respects_polarity_and_fields() {
        let w = [0, 0xabc, 0x1234, 0x8080_0009_f001_0002];
        assert_eq!(CcqCqe::decode(&w, false), None);
        let c = CcqCqe::decode(&w, true).unwrap();
        assert!(c.error);
        assert_eq!((c.major, c.minor, c.wqe_idx, c.op_ret_val), (0xf001, 2, 9, 0x1234));
        let mut r = RingConsumer::new(2);
        assert_eq!(r.advance(), 1);
        assert!(r.polarity);
        assert_eq!(r.advance(), 0);
        assert!(!r.polarity);
    }

    #[test]
    fn fpm_query_refuses_zero_q1_block() {
        let mut b = [0u64; 24];
        b[10] = 0; // Q1FL word: block size 0
        assert_eq!(FpmQuery::decode(&b, false, false), Err(DecodeError::Q1BlockSizeZero));
        b[10] = 0x2000_0000_0000;
        let q = FpmQuery::decode(&b, false, false).unwrap();
        assert_eq!(q.q1_block_size, 0x2000);
        assert_eq!(q.obj[15].max_cnt, 16, "RRF forced to 16 when XF max is 0");
        assert_eq!(q.max_hw_ird(), 8);
        b[17] = 3; // RRFFL entries without a block size
        assert_eq!(FpmQuery::decode(&b, false, false), Err(DecodeError::RrfBlockSizeZero));
        b[17] = 0;
        b[0] = 5 << 32;
        assert_eq!(FpmQuery::decode(&b, false, true).map(|q| q.max_sds), Ok(4));
        b[7] = 5; // XF max 5, block size 0
        assert_eq!(FpmQuery::decode(&b, false, false), Err(DecodeError::XfBlockSizeZero));
    }

    #[test]
    fn fpm_commit_sd_count_rounds_up() {
        let mut b = [0u64; 24];
        b[0] = (0x1000 << 32) | 4;
        let mut sizes = [0u64; HMC_OBJ_COUNT];
        sizes[0] = 512;
        let c = FpmCommit::decode(&b, &sizes).unwrap();
        assert_eq!(c.obj[0], HmcObjCommit { cnt: 4, base: 0x20_0000 });
        assert_eq!(c.obj[HMC_APBVT].cnt, 1);
        assert_eq!(c.sd_cnt, 2);
        b[0] = 0x1000 << 32;
        assert_eq!(FpmCommit::decode(&b, &sizes).unwrap().sd_cnt, 1);
        // A higher base with no objects does not count.
        b[0] = (0x1000 << 32) | 4;
        b[1] = 0x9000 << 32;
        assert_eq!(FpmCommit::decode(&b, &sizes).unwrap().sd_cnt, 2);
        b[1] = 0;
        b[0] = (0xffff_ffff << 32) | 0x1f_ffff;
        sizes[0] = u64::MAX;
        assert_eq!(FpmCommit::decode(&b, &sizes), Err(DecodeError::Overflow));
    }

    /// xorshift64*: deterministic pseudo-random words for the parser sweep.
    fn rng(state: &mut u64) -> u64 {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    #[test]
    #[cfg_attr(miri, ignore = "20,000 random rounds: too slow under Miri")]
    fn parsers_never_panic_on_arbitrary_device_data() {
        let mut st = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..20_000 {
            let mut buf = [0u64; 24];
            for w in buf.iter_mut() {
                // Mix dense random words with sparse ones so both the error
                // paths and the success paths are reached.
                let r = rng(&mut st);
                *w = if round % 3 == 0 { r & 0x0000_00ff_0000_ffff } else { r };
            }
            let _ = FpmQuery::decode(&buf, round % 2 == 0, round % 5 == 0);
            let sizes: [u64; HMC_OBJ_COUNT] = core::array::from_fn(|i| buf[i] >> (round % 64));
            if let Ok(c) = FpmCommit::decode(&buf, &sizes) {
                assert!(c.obj.iter().all(|o| o.base % 512 == 0));
            }
            let cqe = [buf[0], buf[1], buf[2], buf[3]];
            if let Some(c) = CcqCqe::decode(&cqe, round % 2 == 0) {
                assert!(c.wqe_idx < 1 << 15);
            }
            let a = Aeqe::classify(buf[4], buf[5]);
            // Both only when a QP-class code arrives with a CQ source — the
            // vendor sets both flags then, and so do we.
            assert!(!(a.qp && a.cq) || AE_QP.contains(&a.ae_id));
            assert!(a.qp_cq_id < 1 << 19);
            if !(a.qp || a.cq || a.srq) {
                assert_eq!(a.compl_ctx, 0);
            }
            let n = (rng(&mut st) % 40) as usize;
            let _ = RdmaFeatures::decode(buf.get(..n.min(24)).unwrap_or(&[]));
        }
    }

    #[test]
    fn rdma_features_counts_and_flags() {
        let mut w = [0u64; 4];
        w[0] = 1 << 32 | 0x0001_0002;
        assert_eq!(RdmaFeatures::decode(&w), Err(FeaturesError::TooFew(1)));
        w[0] = 5 << 32 | 0x0001_0002;
        assert_eq!(RdmaFeatures::decode(&w), Err(FeaturesError::BufferTooSmall { needed: 5 }));
        w[0] = 3 << 32 | 0x0001_0002;
        w[1] = 32 << 48 | 0b101;
        w[2] = 99 << 48 | 7; // unknown type: ignored
        let f = RdmaFeatures::decode(&w).unwrap();
        assert_eq!((f.fw_major, f.fw_minor, f.count), (1, 2, 3));
        assert!(f.atomics() && f.manage_rsrc_ver2());
        w[1] = 32 << 48 | 0b010;
        let f = RdmaFeatures::decode(&w).unwrap();
        assert!(!f.atomics() && !f.manage_rsrc_ver2());
    }

    #[test]
    fn aeqe_classification() {
        // RQ source: QP + RQ + error index valid.
        let a = Aeqe::decode(&[0x55, 0x8084_1428_0014_0012], true).unwrap();
        assert!(a.qp && a.rq && a.err_rq_idx_valid && !a.cq);
        assert_eq!((a.ae_id, a.qp_cq_id, a.wqe_idx, a.compl_ctx), (0x50a, 0x12, 5, 0x55));
        assert_eq!(Aeqe::decode(&[0x55, 0x0084_1428_0014_0012], true), None);
        // CQ catastrophic ignores AESRC and shifts the context.
        let a = Aeqe::classify(0x1234_5678, 0x8014_1c08_0000_0021);
        assert!(a.cq && !a.qp && !a.sq);
        assert_eq!(a.compl_ctx, 0x2468_acf0);
        // Resource exhaustion: neither.
        let a = Aeqe::classify(0x1234_5678, 0x8014_1480_0000_0021);
        assert!(!a.qp && !a.cq && a.compl_ctx == 0 && a.ae_src == 5);
        // Deferred CQP completion: the ticket is the WQE index.
        let a = Aeqe::classify(0, 0x8000_2404_0014_0000);
        assert_eq!((a.ae_id, a.def_info, a.qp), (0x901, 5, false));
    }

    /// ctrl.c: irdma_sc_ccq_get_cqe_info / irdma_sc_get_next_aeqe at the
    /// polarity edges: an entry whose valid bit differs from the expected
    /// one is "nothing there" (also all-ones on the pass that expects 0);
    /// all-ones on the matching pass decodes field by field.
    #[test]
    fn polarity_edges_and_all_ones() {
        let ones4 = [u64::MAX; 4];
        assert_eq!(CcqCqe::decode(&ones4, false), None);
        let c = CcqCqe::decode(&ones4, true).unwrap();
        assert!(c.error);
        assert_eq!((c.major, c.minor, c.wqe_idx), (0xffff, 0xffff, 0x7fff));
        assert_eq!(c.op_ret_val, u32::MAX);
        assert_eq!(c.compl_ctx, u64::MAX);
        // Valid 0 on the second pass (polarity 0): decoded; valid 1 is stale.
        let stale = [0, 0x1000, 7, 1 << 63];
        assert_eq!(CcqCqe::decode(&stale, false), None);
        let fresh = [0, 0x1000, 7, 0x0001_0005_0003_0002];
        let c = CcqCqe::decode(&fresh, false).unwrap();
        assert_eq!((c.op_ret_val, c.wqe_idx), (7, 5));
        // No ERROR: no major code (IRDMA_CQPSQ_MAJ_NO_ERROR), minor kept.
        assert!(!c.error);
        assert_eq!((c.major, c.minor), (0, 2));
        let ones2 = [u64::MAX; 2];
        assert_eq!(Aeqe::decode(&ones2, false), None);
        assert!(Aeqe::decode(&ones2, true).is_some());
        assert_eq!(Aeqe::decode(&[u64::MAX, u64::MAX >> 1], true), None);
        assert!(Aeqe::decode(&[u64::MAX, u64::MAX >> 1], false).is_some());
    }
}
