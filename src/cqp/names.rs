//! Names of the command and context inputs an [`EncodeError`](super::EncodeError) can report,
//! one byte each (a `&'static str` would make every `Result<_, EncodeError>`
//! and `Result<_, CqpError>` eight bytes larger; BENCHMARKS.md, `.text`
//! sixth pass). The text is the input's name as the command builders and
//! the vendor's structures spell it.

macro_rules! field_names {
    ($($v:ident => $s:literal,)+) => {
        /// A command or context input, named in [`EncodeError`](super::EncodeError).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        #[repr(u8)]
        #[non_exhaustive]
        pub enum FieldName {
            $(#[doc = concat!("`", $s, "`")] $v,)+
        }

        impl FieldName {
            /// The input's name, e.g. `"qp_id"`.
            pub const fn name(self) -> &'static str {
                match self {
                    $(FieldName::$v => $s,)+
                }
            }
        }
    };
}

field_names! {
    AccessRights => "access_rights",
    AckCredits => "ack_credits",
    AeSrc => "ae_src",
    AhIdx => "ah_idx",
    ArpIdx => "arp_idx",
    ArpIndex => "arp_index",
    CeqId => "ceq_id",
    CqCtx => "cq_ctx",
    CqId => "cq_id",
    CqSize => "cq_size",
    Cwnd => "cwnd",
    DcqcnB => "dcqcn_b",
    DcqcnEn => "dcqcn_en",
    DcqcnF => "dcqcn_f",
    DctcpEn => "dctcp_en",
    DestIpAddr => "dest_ip_addr",
    DestQp => "dest_qp",
    DstPort => "dst_port",
    ElemCnt => "elem_cnt",
    EnaVfCount => "ena_vf_count",
    Epsn => "epsn",
    ErrRqIdx => "err_rq_idx",
    ErrRqIdxValid => "err_rq_idx_valid",
    FastRegEn => "fast_reg_en",
    FirstPblIndex => "first_pbl_index",
    FlowLabel => "flow_label",
    FwCcEnable => "fw_cc_enable",
    HmcFnId => "hmc_fn_id",
    HmcProfile => "hmc_profile",
    HwRqSize => "hw_rq_size",
    HwSqSize => "hw_sq_size",
    InsertVlanTag => "insert_vlan_tag",
    Ipv4 => "ipv4",
    IrdSize => "ird_size",
    IsQp1 => "is_qp1",
    LocalIpaddr => "local_ipaddr",
    Lsn => "lsn",
    MacAddr => "mac_addr",
    McastMembers => "mcast members",
    MemberQpId => "member qp_id",
    MgId => "mg_id",
    MinDecFactor => "min_dec_factor",
    MinRate => "min_rate",
    NewMss => "new_mss",
    NextState => "next_state",
    NodeId => "node_id",
    OrdSize => "ord_size",
    PKey => "p_key",
    ParentId => "parent_id",
    Pasid => "pasid",
    PblChunkSize => "pbl_chunk_size",
    PblLevel => "pbl_level",
    PdId => "pd_id",
    PdIdx => "pd_idx",
    PlacementType => "placement_type",
    PrioType => "prio_type",
    PrivModeEn => "priv_mode_en",
    ProtocolUsed => "protocol_used",
    PsnMax => "psn_max",
    PsnNxt => "psn_nxt",
    PsnUna => "psn_una",
    PushIdx => "push_idx",
    Qkey => "qkey",
    QpComplCtx => "qp_compl_ctx",
    QpId => "qp_id",
    QpType => "qp_type",
    QsHandle => "qs_handle",
    RcvCqNum => "rcv_cq_num",
    RcvNoIcrc => "rcv_no_icrc",
    RcvTphEn => "rcv_tph_en",
    RdEn => "rd_en",
    RemEndpointIdx => "rem_endpoint_idx",
    RexmitThresh => "rexmit_thresh",
    RnrNakThresh => "rnr_nak_thresh",
    RoceTver => "roce_tver",
    RqPa => "rq_pa",
    RqTphEn => "rq_tph_en",
    RqTphVal => "rq_tph_val",
    RqWqeSize => "rq_wqe_size",
    Rtomin => "rtomin",
    SdEntries => "sd_entries",
    SdIndex => "sd_index",
    SendCqNum => "send_cq_num",
    ShadowReadThreshold => "shadow_read_threshold",
    SndMss => "snd_mss",
    SqPa => "sq_pa",
    SqTphEn => "sq_tph_en",
    SqTphVal => "sq_tph_val",
    SrcPort => "src_port",
    StagIdx => "stag_idx",
    StatsIdx => "stats_idx",
    THigh => "t_high",
    TLow => "t_low",
    Tc => "tc",
    Termlen => "termlen",
    TimelyEn => "timely_en",
    TimerSlots => "timer_slots",
    Tos => "tos",
    TotalLen => "total_len",
    Ttl => "ttl",
    UdprivcqEn => "udprivcq_en",
    UseStatsInstance => "use_stats_instance",
    VlanId => "vlan_id",
    VlanTag => "vlan_tag",
    Weight => "weight",
    WrRdrespEn => "wr_rdresp_en",
    XmitTphEn => "xmit_tph_en",
}

// `Display` as the input's name, and comparison with a `&str` (see
// `crate::error`).
crate::error::named!(FieldName);
