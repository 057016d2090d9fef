//! Host memory the device reads: the CQP host context, the RoCE QP host
//! context and the FPM commit buffer. Pure encoders into word arrays; the
//! caller copies them into DMA memory.

use irdma_hal::cqp::{cqp_ctx, qpc};

use super::{EncodeError, FieldName, Phrase, fit};

/// DCQCN parameters of the CQP host context (spec §2.3; all 0 unless DCQCN
/// is configured).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dcqcn {
    /// CC_CFG_VALID.
    pub cc_cfg_valid: bool,
    /// MIN_DEC_FACTOR (< 16).
    pub min_dec_factor: u8,
    /// MIN_RATE (< 16).
    pub min_rate: u8,
    /// DCQCN_F (< 8).
    pub dcqcn_f: u8,
    /// RAI_FACTOR.
    pub rai_factor: u16,
    /// HAI_FACTOR.
    pub hai_factor: u16,
    /// DCQCN_T.
    pub dcqcn_t: u16,
    /// DCQCN_B (< 2^25).
    pub dcqcn_b: u32,
    /// RREDUCE_MPERIOD.
    pub rreduce_mperiod: u32,
}

/// The 64-byte CQP host context — ctrl.c: irdma_sc_cqp_create; spec §2.3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqpHostCtx {
    /// SQ size in WQEs: a power of two, 4..=2048.
    pub sq_size: u32,
    /// SQ ring bus address (512-byte aligned).
    pub sq_pa: u64,
    /// Completion context echoed in CCQ CQEs (@24).
    pub completion_ctx: u64,
    /// Structure version.
    pub struct_ver: u8,
    /// HMC profile (1 = default).
    pub hmc_profile: u8,
    /// Enabled VFs.
    pub ena_vf_count: u8,
    /// CEQs per VF.
    pub ceqs_per_vf: u8,
    /// Timer slots (GEN_2: 3..=13, default 8).
    pub timer_slots: u8,
    /// DISABLE_PFPDUS.
    pub disable_packed: bool,
    /// ROCEV2_RTO_POLICY.
    pub rocev2_rto_policy: bool,
    /// EN_REM_ENDPOINT_TRK.
    pub en_rem_endpoint_trk: bool,
    /// Protocol used (0 any, 1 iWARP, 2 RoCE).
    pub protocol_used: u8,
    /// HW_MAJVER (1 for GEN_2).
    pub hw_maj_ver: u16,
    /// HW_MINVER.
    pub hw_min_ver: u16,
    /// DCQCN parameters.
    pub dcqcn: Dcqcn,
}

impl CqpHostCtx {
    /// A GEN_2 RoCE context with Linux's defaults (profile 1, 8 timer slots,
    /// major version 1).
    pub fn gen2_roce(sq_size: u32, sq_pa: u64, completion_ctx: u64) -> Self {
        CqpHostCtx {
            sq_size,
            sq_pa,
            completion_ctx,
            struct_ver: 0,
            hmc_profile: 1,
            ena_vf_count: 0,
            ceqs_per_vf: 0,
            timer_slots: 8,
            disable_packed: false,
            rocev2_rto_policy: false,
            en_rem_endpoint_trk: false,
            protocol_used: 2,
            hw_maj_ver: 1,
            hw_min_ver: 0,
            dcqcn: Dcqcn::default(),
        }
    }

    /// The encoded SQ size log2(size) − 1, or an error unless the size is a
    /// power of two in 4..=2048 (ctrl.c: irdma_sc_cqp_init,
    /// irdma_get_encoded_wqe_size).
    pub fn encoded_sq_size(sq_size: u32) -> Result<u8, EncodeError> {
        if !sq_size.is_power_of_two()
            || !(irdma_hal::cqp::CQP_SQ_MIN..=irdma_hal::cqp::CQP_SQ_MAX).contains(&sq_size)
        {
            return Err(EncodeError::Invalid {
                what: Phrase::new(&"CQP SQ size must be a power of two 4..=2048"),
            });
        }
        Ok((sq_size.trailing_zeros() - 1) as u8)
    }

    /// Encodes the eight words.
    pub fn encode(&self, out: &mut [u64; 8]) -> Result<(), EncodeError> {
        use cqp_ctx::*;
        let enc = Self::encoded_sq_size(self.sq_size)?;
        if self.sq_pa & 0x1ff != 0 {
            return Err(EncodeError::Invalid { what: Phrase::new(&"CQP SQ not 512-byte aligned") });
        }
        let d = &self.dcqcn;
        out[0] = (self.disable_packed as u64) << DISABLE_PFPDUS.lo
            | (self.rocev2_rto_policy as u64) << ROCEV2_RTO_POLICY.lo
            | fit(PROTOCOL_USED, self.protocol_used as u64, FieldName::ProtocolUsed)?
            | SQSIZE.prep(enc as u64)
            | SVER.prep(self.struct_ver as u64)
            | CEQPERVF.prep(self.ceqs_per_vf as u64);
        out[1] = self.sq_pa;
        out[2] = fit(HMC_PROFILE, self.hmc_profile as u64, FieldName::HmcProfile)?
            | (self.en_rem_endpoint_trk as u64) << EN_REM_ENDPOINT_TRK.lo
            | fit(TMR_SLOT, self.timer_slots as u64, FieldName::TimerSlots)?
            | fit(ENABLED_VFS, self.ena_vf_count as u64, FieldName::EnaVfCount)?;
        out[3] = self.completion_ctx;
        out[4] = HW_MINVER.prep(self.hw_min_ver as u64)
            | HW_MAJVER.prep(self.hw_maj_ver as u64)
            | fit(MIN_RATE, d.min_rate as u64, FieldName::MinRate)?
            | fit(MIN_DEC_FACTOR, d.min_dec_factor as u64, FieldName::MinDecFactor)?;
        out[5] = 0;
        out[6] = DCQCN_T.prep(d.dcqcn_t as u64)
            | HAI_FACTOR.prep(d.hai_factor as u64)
            | RAI_FACTOR.prep(d.rai_factor as u64);
        out[7] = fit(DCQCN_B, d.dcqcn_b as u64, FieldName::DcqcnB)?
            | fit(DCQCN_F, d.dcqcn_f as u64, FieldName::DcqcnF)?
            | (d.cc_cfg_valid as u64) << CC_CFG_VALID.lo
            | RREDUCE_MPERIOD.prep(d.rreduce_mperiod as u64);
        Ok(())
    }
}

/// Inputs of the GEN_2 RoCE QP host context — ctrl.c:
/// irdma_sc_qp_setctx_roce_gen_2; spec §7.2. Field names follow the vendor's
/// info structs (`qp.`, `roce.`, `udp.`) so a reader can map them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpRoceCtx {
    // --- queues (qp.*)
    /// SQ ring bus address (or first PBLE index with VQ).
    pub sq_pa: u64,
    /// RQ ring bus address (or first PBLE index with VQ).
    pub rq_pa: u64,
    /// Encoded SQ size (log2(quanta) − 2, < 16).
    pub hw_sq_size: u8,
    /// Encoded RQ size (< 16).
    pub hw_rq_size: u8,
    /// RQ WQE size shift (< 4).
    pub rq_wqe_size: u8,
    /// Push page index, when push mode is on (< 1024).
    pub push_idx: Option<u16>,
    /// TPH enables: receive, transmit, RQ, SQ.
    pub rcv_tph_en: bool,
    /// Transmit TPH.
    pub xmit_tph_en: bool,
    /// RQ TPH.
    pub rq_tph_en: bool,
    /// SQ TPH.
    pub sq_tph_en: bool,
    /// SQ TPH value.
    pub sq_tph_val: u8,
    /// RQ TPH value.
    pub rq_tph_val: u8,
    /// Queue-set handle (< 1024).
    pub qs_handle: u16,
    /// Send CQ id (< 2^25).
    pub send_cq_num: u32,
    /// Receive CQ id (< 2^25).
    pub rcv_cq_num: u32,
    /// Statistics instance (< 128).
    pub stats_idx: u8,
    /// USESTATSINSTANCE.
    pub use_stats_instance: bool,
    /// QP completion context (echoed in CQEs and AEQEs).
    pub qp_compl_ctx: u64,
    /// Remote endpoint index (< 2^17).
    pub rem_endpoint_idx: u32,
    // --- roce.*
    /// PD id (< 2^18).
    pub pd_id: u32,
    /// DCTCP.
    pub dctcp_en: bool,
    /// DCQCN.
    pub dcqcn_en: bool,
    /// RQ error index valid.
    pub err_rq_idx_valid: bool,
    /// RQ error index (< 2^15).
    pub err_rq_idx: u16,
    /// GSI QP.
    pub is_qp1: bool,
    /// RoCE transport version (< 16).
    pub roce_tver: u8,
    /// P_Key.
    pub p_key: u16,
    /// ACK credits (< 32).
    pub ack_credits: u8,
    /// Q_Key.
    pub qkey: u32,
    /// Destination QP (< 2^24).
    pub dest_qp: u32,
    /// Minimum RTO (< 128).
    pub rtomin: u8,
    /// Source MAC.
    pub mac_addr: [u8; 6],
    /// ORD.
    pub ord_size: u8,
    /// IRD (encoded as the vendor does, incl. above 128).
    pub ird_size: u16,
    /// Write/read-response enable.
    pub wr_rdresp_en: bool,
    /// Read enable.
    pub rd_en: bool,
    /// Fast-register enable.
    pub fast_reg_en: bool,
    /// No ICRC on receive.
    pub rcv_no_icrc: bool,
    /// Firmware congestion control.
    pub fw_cc_enable: bool,
    /// UD privileged CQ.
    pub udprivcq_en: bool,
    /// Privileged mode.
    pub priv_mode_en: bool,
    /// TIMELY.
    pub timely_en: bool,
    /// TIMELY high threshold (< 4096).
    pub t_high: u16,
    /// TIMELY low threshold.
    pub t_low: u8,
    // --- udp.*
    /// IPv4.
    pub ipv4: bool,
    /// Insert the VLAN tag.
    pub insert_vlan_tag: bool,
    /// Hop limit.
    pub ttl: u8,
    /// Traffic class (ECN forced to 10b with DCQCN/DCTCP).
    pub tos: u8,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// Destination IP words 0..3 (IPv4 in word 3), host order.
    pub dest_ip_addr: [u32; 4],
    /// Local IP words 0..3.
    pub local_ipaddr: [u32; 4],
    /// Path MTU in bytes (< 2^14).
    pub snd_mss: u32,
    /// VLAN tag.
    pub vlan_tag: u16,
    /// ARP index of the next hop.
    pub arp_idx: u16,
    /// Flow label (< 2^20).
    pub flow_label: u32,
    /// Next send PSN (< 2^24).
    pub psn_nxt: u32,
    /// LSN (< 2^24).
    pub lsn: u32,
    /// Expected PSN (< 2^24).
    pub epsn: u32,
    /// PSN max (< 2^24).
    pub psn_max: u32,
    /// PSN una (< 2^24).
    pub psn_una: u32,
    /// Congestion window (< 2^24).
    pub cwnd: u32,
    /// Retry count (< 64).
    pub rexmit_thresh: u8,
    /// RNR retry (< 8).
    pub rnr_nak_thresh: u8,
}

/// ECN code point forced into TOS with DCQCN/DCTCP (ctrl.c: ECN_CODE_PT_VAL).
const ECN_CODE_PT_VAL: u8 = 2;

/// The vendor's IRDSIZE encoding: roundup_pow2(2 × IRD) 256 → 4, 128 → 3,
/// 64/32 → 2, 16/8 → 1, anything else (incl. IRD 0–2 and IRD > 128) → 0
/// (ctrl.c: irdma_sc_get_encoded_ird_size; spec §12 item 6).
pub fn encoded_ird_size(ird: u16) -> u8 {
    let p = if ird == 0 { 4 } else { (2 * ird as u32).next_power_of_two() };
    match p {
        256 => 4,
        128 => 3,
        64 | 32 => 2,
        16 | 8 => 1,
        _ => 0,
    }
}

impl QpRoceCtx {
    /// The TOS the context carries (ECN forced with DCQCN/DCTCP).
    pub fn effective_tos(&self) -> u8 {
        if self.dcqcn_en || self.dctcp_en { (self.tos & !3) | ECN_CODE_PT_VAL } else { self.tos }
    }

    /// Encodes the 256-byte context into 32 words. Table-driven (code
    /// size): the fields before the PD id, the PD-id range check, then the
    /// rest, each table in a fixed order, so the first field that does not
    /// fit is the one reported.
    pub fn encode(&self, out: &mut [u64; 32]) -> Result<(), EncodeError> {
        *out = [0; 32];
        self.put_all(&CTX_HEAD, out)?;
        // The PD id is split: [15:0] at @56, [17:16] at @0 (spec §5.4).
        if self.pd_id >= 1 << 18 {
            return Err(EncodeError::TooWide {
                field: FieldName::PdId,
                bits: 18,
                value: self.pd_id as u64,
            });
        }
        self.put_all(&CTX_FIELDS, out)
    }

    /// ORs each entry's value into its word, refusing one that does not fit.
    fn put_all(&self, table: &[CtxEntry], out: &mut [u64; 32]) -> Result<(), EncodeError> {
        for &((word, f), name, get) in table {
            let bits = fit(f, get(self), name)?;
            if let Some(w) = out.get_mut(word / 8) {
                *w |= bits;
            }
        }
        Ok(())
    }
}

/// One QP-context field: its place (byte offset, bits), its name in an
/// [`EncodeError`], and its value in a [`QpRoceCtx`].
type CtxEntry = (qpc::CtxField, FieldName, fn(&QpRoceCtx) -> u64);

/// The context fields before the PD id's range check.
static CTX_HEAD: [CtxEntry; 5] = [
    (qpc::IPV4, FieldName::Ipv4, |c| c.ipv4 as u64),
    (qpc::INSERTVLANTAG, FieldName::InsertVlanTag, |c| c.insert_vlan_tag as u64),
    (qpc::ISQP1, FieldName::IsQp1, |c| c.is_qp1 as u64),
    (qpc::RQWQESIZE, FieldName::RqWqeSize, |c| c.rq_wqe_size as u64),
    (qpc::ERR_RQ_IDX_VALID, FieldName::ErrRqIdxValid, |c| c.err_rq_idx_valid as u64),
];

/// The rest of the context, from the PD id on (spec §5.4; ctrl.c:
/// irdma_sc_qp_setctx_roce). A push page index is written with PMENA only
/// when there is one (0 otherwise, which always fits).
static CTX_FIELDS: [CtxEntry; 67] = [
    (qpc::PDIDXHI, FieldName::PdId, |c| (c.pd_id >> 16) as u64),
    (qpc::PDIDX, FieldName::PdId, |c| (c.pd_id & 0xffff) as u64),
    (qpc::DC_TCP_EN, FieldName::DctcpEn, |c| c.dctcp_en as u64),
    (qpc::RCVTPHEN, FieldName::RcvTphEn, |c| c.rcv_tph_en as u64),
    (qpc::XMITTPHEN, FieldName::XmitTphEn, |c| c.xmit_tph_en as u64),
    (qpc::RQTPHEN, FieldName::RqTphEn, |c| c.rq_tph_en as u64),
    (qpc::SQTPHEN, FieldName::SqTphEn, |c| c.sq_tph_en as u64),
    (qpc::PPIDX, FieldName::PushIdx, |c| c.push_idx.map_or(0, u64::from)),
    (qpc::PMENA, FieldName::PushIdx, |c| c.push_idx.is_some() as u64),
    (qpc::ROCE_TVER, FieldName::RoceTver, |c| c.roce_tver as u64),
    (qpc::SQADDR, FieldName::SqPa, |c| c.sq_pa),
    (qpc::RQADDR, FieldName::RqPa, |c| c.rq_pa),
    (qpc::TTL, FieldName::Ttl, |c| c.ttl as u64),
    (qpc::RQSIZE, FieldName::HwRqSize, |c| c.hw_rq_size as u64),
    (qpc::SQSIZE, FieldName::HwSqSize, |c| c.hw_sq_size as u64),
    (qpc::TOS, FieldName::Tos, |c| c.effective_tos() as u64),
    (qpc::SRCPORTNUM, FieldName::SrcPort, |c| c.src_port as u64),
    (qpc::DESTPORTNUM, FieldName::DstPort, |c| c.dst_port as u64),
    (qpc::DESTIPADDR0, FieldName::DestIpAddr, |c| c.dest_ip_addr[0] as u64),
    (qpc::DESTIPADDR1, FieldName::DestIpAddr, |c| c.dest_ip_addr[1] as u64),
    (qpc::DESTIPADDR2, FieldName::DestIpAddr, |c| c.dest_ip_addr[2] as u64),
    (qpc::DESTIPADDR3, FieldName::DestIpAddr, |c| c.dest_ip_addr[3] as u64),
    (qpc::SNDMSS, FieldName::SndMss, |c| c.snd_mss as u64),
    (qpc::VLANTAG, FieldName::VlanTag, |c| c.vlan_tag as u64),
    (qpc::ARPIDX, FieldName::ArpIdx, |c| c.arp_idx as u64),
    (qpc::FLOWLABEL, FieldName::FlowLabel, |c| c.flow_label as u64),
    (qpc::ACKCREDITS, FieldName::AckCredits, |c| c.ack_credits as u64),
    (qpc::PKEY, FieldName::PKey, |c| c.p_key as u64),
    (qpc::DESTQP, FieldName::DestQp, |c| c.dest_qp as u64),
    (qpc::QKEY, FieldName::Qkey, |c| c.qkey as u64),
    (qpc::PSNNXT, FieldName::PsnNxt, |c| c.psn_nxt as u64),
    (qpc::LSN, FieldName::Lsn, |c| c.lsn as u64),
    (qpc::EPSN, FieldName::Epsn, |c| c.epsn as u64),
    (qpc::PSNMAX, FieldName::PsnMax, |c| c.psn_max as u64),
    (qpc::PSNUNA, FieldName::PsnUna, |c| c.psn_una as u64),
    (qpc::CWNDROCE, FieldName::Cwnd, |c| c.cwnd as u64),
    (qpc::ERR_RQ_IDX, FieldName::ErrRqIdx, |c| c.err_rq_idx as u64),
    (qpc::REXMIT_THRESH, FieldName::RexmitThresh, |c| c.rexmit_thresh as u64),
    (qpc::RNRNAK_THRESH, FieldName::RnrNakThresh, |c| c.rnr_nak_thresh as u64),
    (qpc::RTOMIN, FieldName::Rtomin, |c| c.rtomin as u64),
    (qpc::TXCQNUM, FieldName::SendCqNum, |c| c.send_cq_num as u64),
    (qpc::RXCQNUM, FieldName::RcvCqNum, |c| c.rcv_cq_num as u64),
    (qpc::STAT_INDEX, FieldName::StatsIdx, |c| c.stats_idx as u64),
    (qpc::USESTATSINSTANCE, FieldName::UseStatsInstance, |c| c.use_stats_instance as u64),
    (qpc::MACADDRESS, FieldName::MacAddr, |c| super::cmd::mac_to_u64(c.mac_addr)),
    (qpc::ORDSIZE, FieldName::OrdSize, |c| c.ord_size as u64),
    (qpc::IRDSIZE, FieldName::IrdSize, |c| encoded_ird_size(c.ird_size) as u64),
    (qpc::UDPRIVCQENABLE, FieldName::UdprivcqEn, |c| c.udprivcq_en as u64),
    (qpc::WRRDRSPOK, FieldName::WrRdrespEn, |c| c.wr_rdresp_en as u64),
    (qpc::RDOK, FieldName::RdEn, |c| c.rd_en as u64),
    (qpc::DCQCNENABLE, FieldName::DcqcnEn, |c| c.dcqcn_en as u64),
    (qpc::FASTREGEN, FieldName::FastRegEn, |c| c.fast_reg_en as u64),
    (qpc::PRIVEN, FieldName::PrivModeEn, |c| c.priv_mode_en as u64),
    (qpc::TIMELYENABLE, FieldName::TimelyEn, |c| c.timely_en as u64),
    (qpc::FW_CC_ENABLE, FieldName::FwCcEnable, |c| c.fw_cc_enable as u64),
    (qpc::RCVNOICRC, FieldName::RcvNoIcrc, |c| c.rcv_no_icrc as u64),
    (qpc::QPCOMPCTX, FieldName::QpComplCtx, |c| c.qp_compl_ctx),
    (qpc::SQTPHVAL, FieldName::SqTphVal, |c| c.sq_tph_val as u64),
    (qpc::RQTPHVAL, FieldName::RqTphVal, |c| c.rq_tph_val as u64),
    (qpc::QSHANDLE, FieldName::QsHandle, |c| c.qs_handle as u64),
    (qpc::LOCAL_IPADDR0, FieldName::LocalIpaddr, |c| c.local_ipaddr[0] as u64),
    (qpc::LOCAL_IPADDR1, FieldName::LocalIpaddr, |c| c.local_ipaddr[1] as u64),
    (qpc::LOCAL_IPADDR2, FieldName::LocalIpaddr, |c| c.local_ipaddr[2] as u64),
    (qpc::LOCAL_IPADDR3, FieldName::LocalIpaddr, |c| c.local_ipaddr[3] as u64),
    (qpc::TLOW, FieldName::TLow, |c| c.t_low as u64),
    (qpc::THIGH, FieldName::THigh, |c| c.t_high as u64),
    (qpc::REMENDPOINTIDX, FieldName::RemEndpointIdx, |c| c.rem_endpoint_idx as u64),
];

/// Number of HMC object types on GEN_2 (hmc.h: IRDMA_HMC_IW_MAX).
pub const HMC_OBJ_COUNT: usize = 21;
/// HMC object index of APBVT (hmc.h: IRDMA_HMC_IW_APBVT_ENTRY).
pub const HMC_APBVT: usize = 5;

/// Word index (u64) of object `i` in the commit buffer (spec §3.2): objects
/// 0–14 at `i`, 15–20 at `i + 1` (word @120 is reserved).
pub const fn commit_word(i: usize) -> usize {
    if i < 15 { i } else { i + 1 }
}

/// Encodes the COMMIT_FPM_VAL buffer: one 64-bit count per object; the APBVT
/// word and @120 are written 0; only words @0–@168 are written (ctrl.c:
/// irdma_sc_cfg_iw_fpm; spec §3.4, §12 item 7). Words @176/@184 are left as
/// they were.
pub fn encode_fpm_commit(counts: &[u32; HMC_OBJ_COUNT], buf: &mut [u64; 24]) {
    for w in buf.iter_mut().take(22) {
        *w = 0;
    }
    for (i, c) in counts.iter().enumerate() {
        if i == HMC_APBVT {
            continue;
        }
        if let Some(w) = buf.get_mut(commit_word(i)) {
            *w = *c as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ird_encoding_follows_vendor_including_above_128() {
        let cases = [
            (0, 0),
            (1, 0),
            (2, 0),
            (3, 1),
            (4, 1),
            (8, 1),
            (9, 2),
            (16, 2),
            (32, 2),
            (33, 3),
            (64, 3),
            (65, 4),
            (128, 4),
            (129, 0),
            (u16::MAX, 0),
        ];
        for (ird, enc) in cases {
            assert_eq!(encoded_ird_size(ird), enc, "ird {ird}");
        }
    }

    #[test]
    fn cqp_host_ctx_sq_size_checks() {
        assert_eq!(CqpHostCtx::encoded_sq_size(4), Ok(1));
        assert_eq!(CqpHostCtx::encoded_sq_size(2048), Ok(10));
        for bad in [0, 2, 3, 6, 4096] {
            assert!(CqpHostCtx::encoded_sq_size(bad).is_err(), "{bad}");
        }
        let mut w = [0; 8];
        let c = CqpHostCtx::gen2_roce(2048, 0x8000_e000, 0x1234);
        c.encode(&mut w).unwrap();
        assert_eq!(w[0], 0xa10);
        assert_eq!(w[2], 0x8_0001);
        assert_eq!(w[4], 0x1_0000);
        assert!(CqpHostCtx { sq_pa: 0x8000_e100, ..c }.encode(&mut w).is_err());
    }

    #[test]
    fn qp_ctx_refuses_wide_pd_and_splits_it() {
        let mut w = [0; 32];
        let c = QpRoceCtx { pd_id: 0x3_0005, ..Default::default() };
        c.encode(&mut w).unwrap();
        assert_eq!(w[0], 0x30_0000);
        assert_eq!(w[7], 0x0005_0000_0000_0000);
        assert!(QpRoceCtx { pd_id: 1 << 18, ..c }.encode(&mut w).is_err());
        assert!(QpRoceCtx { dest_qp: 1 << 24, ..c }.encode(&mut w).is_err());
        assert!(QpRoceCtx { push_idx: Some(1024), ..c }.encode(&mut w).is_err());
        let t = QpRoceCtx { tos: 0xff, dcqcn_en: true, ..c };
        assert_eq!(t.effective_tos(), 0xfe);
    }

    #[test]
    fn qp_ctx_reports_the_first_field_that_does_not_fit() {
        let mut w = [0; 32];
        let wide = |r: Result<(), EncodeError>| r.err().and_then(|e| e.too_wide());
        let c = QpRoceCtx::default();
        // A field before the PD-id check is reported before the PD id.
        let both = QpRoceCtx { rq_wqe_size: 4, pd_id: 1 << 18, ..c };
        assert_eq!(wide(both.encode(&mut w)), Some(("rq_wqe_size", 4, 3)));
        // The PD id with its full value and range, not its split halves.
        assert_eq!(
            QpRoceCtx { pd_id: 1 << 18, ..c }.encode(&mut w),
            Err(EncodeError::TooWide { field: FieldName::PdId, bits: 18, value: 1 << 18 })
        );
        assert_eq!(
            wide(QpRoceCtx { pd_id: 1 << 18, ..c }.encode(&mut w)),
            Some(("pd_id", 1 << 18, (1 << 18) - 1))
        );
        // Later fields in the order they are written.
        let two = QpRoceCtx { psn_nxt: 1 << 24, rnr_nak_thresh: 8, ..c };
        assert_eq!(wide(two.encode(&mut w)), Some(("psn_nxt", 1 << 24, (1 << 24) - 1)));
        assert_eq!(
            wide(QpRoceCtx { rnr_nak_thresh: 8, ..c }.encode(&mut w)),
            Some(("rnr_nak_thresh", 8, 7))
        );
        // A push page index sets PMENA with it; none leaves both 0.
        let mut p = [0; 32];
        QpRoceCtx { push_idx: Some(5), ..c }.encode(&mut p).unwrap();
        c.encode(&mut w).unwrap();
        let (ppidx, pmena) = (qpc::PPIDX, qpc::PMENA);
        assert_eq!(p[ppidx.0 / 8] & ppidx.1.mask(), ppidx.1.prep_checked(5).unwrap());
        assert_ne!(p[pmena.0 / 8] & pmena.1.mask(), 0);
        assert_eq!(w[ppidx.0 / 8] & ppidx.1.mask(), 0);
        assert_eq!(w[pmena.0 / 8] & pmena.1.mask(), 0);
    }

    #[test]
    fn commit_buffer_skips_apbvt_and_reserved_word() {
        let counts: [u32; HMC_OBJ_COUNT] = core::array::from_fn(|i| 100 + i as u32);
        let mut buf = [0xaa; 24];
        encode_fpm_commit(&counts, &mut buf);
        assert_eq!(buf[0], 100);
        assert_eq!(buf[5], 0);
        assert_eq!(buf[14], 114);
        assert_eq!(buf[15], 0);
        assert_eq!(buf[16], 115);
        assert_eq!(buf[21], 120);
        assert_eq!(buf[22], 0xaa);
        assert_eq!(buf[23], 0xaa);
    }
}
