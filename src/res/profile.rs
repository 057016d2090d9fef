//! What the caller wants from the device: the resource profile HMC sizing
//! starts from.

use crate::lan::Protocol;

/// Resource limits the caller asks for. HMC sizing ([`super::hmc::size_hmc`])
/// turns this into committed counts with Linux's GEN_2 algorithm; every field
/// is an upper bound, the device's QUERY_FPM_VAL maxima and its SD budget may
/// lower it.
///
/// Counts include the ids Linux keeps reserved (see
/// [`super::bitmap::reserved`]): a profile of 8 QPs leaves 4 for callers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Profile {
    /// QP contexts wanted. Rounded down to a power of two and to the device
    /// maximum, then halved while the Q1 object would not fit, as Linux's
    /// `qpwanted` (spec control-path §3.5 steps 2 and 4; ctrl.c:
    /// irdma_cfg_fpm_val). The OOT Linux driver asks for 1 Mi
    /// (defs.h: IRDMA_MAX_MEV_QPCNT). Many other objects (HTE, XF, Q1, TIMER,
    /// RRF, HDR, CQ) scale with this value, so it drives the footprint.
    pub qps: u32,
    /// Upper bound on CQ contexts. Linux commits min(2 × qpwanted, CQ max)
    /// (spec §3.5 step 5); this driver commits the smaller of that and `cqs`.
    /// CQ 0 is the CCQ and 1–2 are reserved.
    pub cqs: u32,
    /// Upper bound on MR table entries (STag indexes; index 0 reserved). Linux
    /// starts from the device maximum (`mrwanted`, spec §3.5 step 5) — on E810
    /// several million, a large share of the footprint.
    pub mrs: u32,
    /// Upper bound on PBLEs (8 bytes each; backed on demand, so this mostly
    /// bounds the SD budget the sizing reserves for them). Linux starts from
    /// the device maximum (`pblewanted`).
    pub pbles: u32,
    /// Upper bound on SDs (2 MiB of FPM space each) for the whole HMC, on top
    /// of the device's MAX_PE_SDS (spec §3.3). `None`: the device limit only.
    /// Non-PBLE objects are backed with direct SDs (2 MiB of host DMA memory
    /// each, hw.c: irdma_hmc_setup), so this bounds host memory.
    pub max_sds: Option<u32>,
    /// Transport: Q1 and OOISC counts differ between RoCEv2 and iWARP
    /// (ctrl.c: irdma_q1_cnt, cfg_fpm_value_gen_2).
    pub protocol: Protocol,
}

impl Profile {
    /// What the OOT Linux driver asks for: 1 Mi QPs, every maximum, RoCEv2.
    pub const LINUX: Profile = Profile {
        qps: 1024 * 1024,
        cqs: u32::MAX,
        mrs: u32::MAX,
        pbles: u32::MAX,
        max_sds: None,
        protocol: Protocol::RoceV2,
    };

    /// A small bare-metal profile: 64 QPs, 128 CQs, 4096 MRs, 256 Ki PBLEs
    /// (one SD), RoCEv2.
    pub const SMALL: Profile = Profile {
        qps: 64,
        cqs: 128,
        mrs: 4096,
        pbles: 256 * 1024,
        max_sds: None,
        protocol: Protocol::RoceV2,
    };
}
