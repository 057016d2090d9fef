//! Host memory the device reads: the CQP host context, the RoCE QP host
//! context and the FPM commit buffer. Pure encoders into word arrays; the
//! caller copies them into DMA memory.

use irdma_hal::cqp::{cqp_ctx, qpc};

use super::{EncodeError, fit};

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
                what: "CQP SQ size must be a power of two 4..=2048",
            });
        }
        Ok((sq_size.trailing_zeros() - 1) as u8)
    }

    /// Encodes the eight words.
    pub fn encode(&self, out: &mut [u64; 8]) -> Result<(), EncodeError> {
        use cqp_ctx::*;
        let enc = Self::encoded_sq_size(self.sq_size)?;
        if self.sq_pa & 0x1ff != 0 {
            return Err(EncodeError::Invalid { what: "CQP SQ not 512-byte aligned" });
        }
        let d = &self.dcqcn;
        out[0] = (self.disable_packed as u64) << DISABLE_PFPDUS.lo
            | (self.rocev2_rto_policy as u64) << ROCEV2_RTO_POLICY.lo
            | fit(PROTOCOL_USED, self.protocol_used as u64, "protocol_used")?
            | SQSIZE.prep(enc as u64)
            | SVER.prep(self.struct_ver as u64)
            | CEQPERVF.prep(self.ceqs_per_vf as u64);
        out[1] = self.sq_pa;
        out[2] = fit(HMC_PROFILE, self.hmc_profile as u64, "hmc_profile")?
            | (self.en_rem_endpoint_trk as u64) << EN_REM_ENDPOINT_TRK.lo
            | fit(TMR_SLOT, self.timer_slots as u64, "timer_slots")?
            | fit(ENABLED_VFS, self.ena_vf_count as u64, "ena_vf_count")?;
        out[3] = self.completion_ctx;
        out[4] = HW_MINVER.prep(self.hw_min_ver as u64)
            | HW_MAJVER.prep(self.hw_maj_ver as u64)
            | fit(MIN_RATE, d.min_rate as u64, "min_rate")?
            | fit(MIN_DEC_FACTOR, d.min_dec_factor as u64, "min_dec_factor")?;
        out[5] = 0;
        out[6] = DCQCN_T.prep(d.dcqcn_t as u64)
            | HAI_FACTOR.prep(d.hai_factor as u64)
            | RAI_FACTOR.prep(d.rai_factor as u64);
        out[7] = fit(DCQCN_B, d.dcqcn_b as u64, "dcqcn_b")?
            | fit(DCQCN_F, d.dcqcn_f as u64, "dcqcn_f")?
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

    /// Encodes the 256-byte context into 32 words.
    pub fn encode(&self, out: &mut [u64; 32]) -> Result<(), EncodeError> {
        use qpc::*;
        *out = [0; 32];
        let mut put = |f: CtxField, v: u64, name: &'static str| -> Result<(), EncodeError> {
            let bits = fit(f.1, v, name)?;
            if let Some(w) = out.get_mut(f.0 / 8) {
                *w |= bits;
            }
            Ok(())
        };
        let b = |x: bool| x as u64;
        put(IPV4, b(self.ipv4), "ipv4")?;
        put(INSERTVLANTAG, b(self.insert_vlan_tag), "insert_vlan_tag")?;
        put(ISQP1, b(self.is_qp1), "is_qp1")?;
        put(RQWQESIZE, self.rq_wqe_size as u64, "rq_wqe_size")?;
        put(ERR_RQ_IDX_VALID, b(self.err_rq_idx_valid), "err_rq_idx_valid")?;
        // The PD id is split: [15:0] at @56, [17:16] at @0 (spec §5.4).
        if self.pd_id >= 1 << 18 {
            return Err(EncodeError::TooWide {
                field: "pd_id",
                value: self.pd_id as u64,
                max: (1 << 18) - 1,
            });
        }
        put(PDIDXHI, (self.pd_id >> 16) as u64, "pd_id")?;
        put(PDIDX, (self.pd_id & 0xffff) as u64, "pd_id")?;
        put(DC_TCP_EN, b(self.dctcp_en), "dctcp_en")?;
        put(RCVTPHEN, b(self.rcv_tph_en), "rcv_tph_en")?;
        put(XMITTPHEN, b(self.xmit_tph_en), "xmit_tph_en")?;
        put(RQTPHEN, b(self.rq_tph_en), "rq_tph_en")?;
        put(SQTPHEN, b(self.sq_tph_en), "sq_tph_en")?;
        if let Some(p) = self.push_idx {
            put(PPIDX, p as u64, "push_idx")?;
            put(PMENA, 1, "push_idx")?;
        }
        put(ROCE_TVER, self.roce_tver as u64, "roce_tver")?;
        put(SQADDR, self.sq_pa, "sq_pa")?;
        put(RQADDR, self.rq_pa, "rq_pa")?;
        put(TTL, self.ttl as u64, "ttl")?;
        put(RQSIZE, self.hw_rq_size as u64, "hw_rq_size")?;
        put(SQSIZE, self.hw_sq_size as u64, "hw_sq_size")?;
        put(TOS, self.effective_tos() as u64, "tos")?;
        put(SRCPORTNUM, self.src_port as u64, "src_port")?;
        put(DESTPORTNUM, self.dst_port as u64, "dst_port")?;
        put(DESTIPADDR0, self.dest_ip_addr[0] as u64, "dest_ip_addr")?;
        put(DESTIPADDR1, self.dest_ip_addr[1] as u64, "dest_ip_addr")?;
        put(DESTIPADDR2, self.dest_ip_addr[2] as u64, "dest_ip_addr")?;
        put(DESTIPADDR3, self.dest_ip_addr[3] as u64, "dest_ip_addr")?;
        put(SNDMSS, self.snd_mss as u64, "snd_mss")?;
        put(VLANTAG, self.vlan_tag as u64, "vlan_tag")?;
        put(ARPIDX, self.arp_idx as u64, "arp_idx")?;
        put(FLOWLABEL, self.flow_label as u64, "flow_label")?;
        put(ACKCREDITS, self.ack_credits as u64, "ack_credits")?;
        put(PKEY, self.p_key as u64, "p_key")?;
        put(DESTQP, self.dest_qp as u64, "dest_qp")?;
        put(QKEY, self.qkey as u64, "qkey")?;
        put(PSNNXT, self.psn_nxt as u64, "psn_nxt")?;
        put(LSN, self.lsn as u64, "lsn")?;
        put(EPSN, self.epsn as u64, "epsn")?;
        put(PSNMAX, self.psn_max as u64, "psn_max")?;
        put(PSNUNA, self.psn_una as u64, "psn_una")?;
        put(CWNDROCE, self.cwnd as u64, "cwnd")?;
        put(ERR_RQ_IDX, self.err_rq_idx as u64, "err_rq_idx")?;
        put(REXMIT_THRESH, self.rexmit_thresh as u64, "rexmit_thresh")?;
        put(RNRNAK_THRESH, self.rnr_nak_thresh as u64, "rnr_nak_thresh")?;
        put(RTOMIN, self.rtomin as u64, "rtomin")?;
        put(TXCQNUM, self.send_cq_num as u64, "send_cq_num")?;
        put(RXCQNUM, self.rcv_cq_num as u64, "rcv_cq_num")?;
        put(STAT_INDEX, self.stats_idx as u64, "stats_idx")?;
        put(USESTATSINSTANCE, b(self.use_stats_instance), "use_stats_instance")?;
        put(MACADDRESS, super::cmd::mac_to_u64(self.mac_addr), "mac_addr")?;
        put(ORDSIZE, self.ord_size as u64, "ord_size")?;
        put(IRDSIZE, encoded_ird_size(self.ird_size) as u64, "ird_size")?;
        put(UDPRIVCQENABLE, b(self.udprivcq_en), "udprivcq_en")?;
        put(WRRDRSPOK, b(self.wr_rdresp_en), "wr_rdresp_en")?;
        put(RDOK, b(self.rd_en), "rd_en")?;
        put(DCQCNENABLE, b(self.dcqcn_en), "dcqcn_en")?;
        put(FASTREGEN, b(self.fast_reg_en), "fast_reg_en")?;
        put(PRIVEN, b(self.priv_mode_en), "priv_mode_en")?;
        put(TIMELYENABLE, b(self.timely_en), "timely_en")?;
        put(FW_CC_ENABLE, b(self.fw_cc_enable), "fw_cc_enable")?;
        put(RCVNOICRC, b(self.rcv_no_icrc), "rcv_no_icrc")?;
        put(QPCOMPCTX, self.qp_compl_ctx, "qp_compl_ctx")?;
        put(SQTPHVAL, self.sq_tph_val as u64, "sq_tph_val")?;
        put(RQTPHVAL, self.rq_tph_val as u64, "rq_tph_val")?;
        put(QSHANDLE, self.qs_handle as u64, "qs_handle")?;
        put(LOCAL_IPADDR0, self.local_ipaddr[0] as u64, "local_ipaddr")?;
        put(LOCAL_IPADDR1, self.local_ipaddr[1] as u64, "local_ipaddr")?;
        put(LOCAL_IPADDR2, self.local_ipaddr[2] as u64, "local_ipaddr")?;
        put(LOCAL_IPADDR3, self.local_ipaddr[3] as u64, "local_ipaddr")?;
        put(TLOW, self.t_low as u64, "t_low")?;
        put(THIGH, self.t_high as u64, "t_high")?;
        put(REMENDPOINTIDX, self.rem_endpoint_idx as u64, "rem_endpoint_idx")?;
        Ok(())
    }
}

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
