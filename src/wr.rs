//! Work requests and completions at the verbs level (`ib_verbs` names).
//!
//! These are the values callers build and the posting/polling code reads.
//! They borrow their scatter lists, so posting never allocates. The data
//! path (`uk`) encodes them into WQEs exactly as GEN_2 hardware reads them;
//! the `rw` layer builds chains of them.

/// One scatter/gather element: `length` bytes at `addr`, covered by `lkey`.
/// (`struct ib_sge`)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Sge {
    /// Device-visible address (IOVA of a registered MR, or a DMA address
    /// under the local DMA lkey).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the MR that covers the buffer.
    pub lkey: u32,
}

/// Send flags (`enum ib_send_flags`), a bit set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SendFlags(pub u8);

impl SendFlags {
    /// No flags.
    pub const NONE: SendFlags = SendFlags(0);
    /// Wait for prior RDMA READs to complete (`IB_SEND_FENCE`).
    pub const FENCE: SendFlags = SendFlags(1 << 0);
    /// Generate a completion (`IB_SEND_SIGNALED`).
    pub const SIGNALED: SendFlags = SendFlags(1 << 1);
    /// Raise a solicited event at the responder (`IB_SEND_SOLICITED`).
    pub const SOLICITED: SendFlags = SendFlags(1 << 2);
    /// Copy the payload into the WQE (`IB_SEND_INLINE`).
    pub const INLINE: SendFlags = SendFlags(1 << 3);
    /// Local fence: wait for prior WQEs of this QP (driver extension; the
    /// kernel verb sets it itself for local invalidate).
    pub const LOCAL_FENCE: SendFlags = SendFlags(1 << 4);

    /// Whether every flag of `other` is set.
    #[inline(always)]
    pub const fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, rhs: SendFlags) -> SendFlags {
        SendFlags(self.0 | rhs.0)
    }
}

impl core::ops::BitOrAssign for SendFlags {
    fn bitor_assign(&mut self, rhs: SendFlags) {
        self.0 |= rhs.0;
    }
}

/// MR access rights (`enum ib_access_flags`), a bit set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Access(pub u32);

impl Access {
    /// Local read only (always implied).
    pub const LOCAL_READ: Access = Access(0);
    /// `IB_ACCESS_LOCAL_WRITE`.
    pub const LOCAL_WRITE: Access = Access(1 << 0);
    /// `IB_ACCESS_REMOTE_WRITE`.
    pub const REMOTE_WRITE: Access = Access(1 << 1);
    /// `IB_ACCESS_REMOTE_READ`.
    pub const REMOTE_READ: Access = Access(1 << 2);
    /// `IB_ACCESS_REMOTE_ATOMIC` (E810 refuses it).
    pub const REMOTE_ATOMIC: Access = Access(1 << 3);
    /// `IB_ACCESS_MW_BIND` (E810 kernel path refuses memory windows).
    pub const MW_BIND: Access = Access(1 << 4);

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// Page sizes a fast-registered MR can use (spec data-path §1.6, HPAGESIZE).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PageSize {
    /// 4 KiB.
    #[default]
    Size4K,
    /// 2 MiB.
    Size2M,
    /// 1 GiB.
    Size1G,
}

impl PageSize {
    /// The page size for `bytes`, or `None` for a size the device lacks.
    pub fn from_bytes(bytes: u64) -> Option<Self> {
        match bytes {
            0x1000 => Some(Self::Size4K),
            0x20_0000 => Some(Self::Size2M),
            0x4000_0000 => Some(Self::Size1G),
            _ => None,
        }
    }
    /// Size in bytes.
    pub fn bytes(self) -> u64 {
        match self {
            Self::Size4K => 0x1000,
            Self::Size2M => 0x20_0000,
            Self::Size1G => 0x4000_0000,
        }
    }
}

/// A fast-register (`IB_WR_REG_MR`) request: what the MR will map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RegMrWr {
    /// The full STag (index << 8 | key byte) the registration makes valid.
    pub key: u32,
    /// Access rights granted.
    pub access: Access,
    /// IOVA of the first byte.
    pub iova: u64,
    /// Length in bytes.
    pub length: u64,
    /// Page size of the PBL entries.
    pub page_size: PageSize,
    /// Index of the first PBLE in the HMC PBLE pool.
    pub first_pble_index: u32,
    /// PBL level (1 or 2; 0 when the MR maps one page).
    pub pbl_level: u8,
}

/// The operation a send work request performs (`enum ib_wr_opcode`, the
/// subset an RC QP on E810 supports, plus the two E810 refuses so callers
/// get a typed error instead of a missing variant).
///
/// The default is [`WrOpcode::Send`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum WrOpcode {
    /// `IB_WR_RDMA_WRITE`.
    RdmaWrite {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// `IB_WR_RDMA_WRITE_WITH_IMM`.
    RdmaWriteImm {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data (network order as the caller gives it).
        imm: u32,
    },
    /// `IB_WR_RDMA_READ`.
    RdmaRead {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// `IB_WR_RDMA_READ_WITH_INV`: read, then invalidate the local `inv_key`
    /// (iWARP semantics; the rw layer's MR path uses it where supported).
    RdmaReadInv {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Local STag invalidated when the read completes.
        inv_key: u32,
    },
    /// `IB_WR_SEND`.
    #[default]
    Send,
    /// `IB_WR_SEND_WITH_IMM`.
    SendImm {
        /// Immediate data.
        imm: u32,
    },
    /// `IB_WR_SEND_WITH_INV`.
    SendInv {
        /// Remote STag the responder invalidates.
        inv_key: u32,
    },
    /// `IB_WR_LOCAL_INV`.
    LocalInv {
        /// Local STag to invalidate.
        inv_key: u32,
    },
    /// `IB_WR_REG_MR`.
    RegMr(RegMrWr),
    /// `IB_WR_ATOMIC_CMP_AND_SWP` — refused on E810 (no atomics feature).
    AtomicCmpSwap,
    /// `IB_WR_ATOMIC_FETCH_AND_ADD` — refused on E810.
    AtomicFetchAdd,
    /// `IB_WR_BIND_MW` — refused by the E810 kernel path.
    BindMw,
    /// A UD SEND (`IB_WR_SEND` / `IB_WR_SEND_WITH_IMM` with `struct
    /// ib_ud_wr`): the address handle, remote QPN and remote Q_Key go into
    /// the WQE (AHID, DESTQPN, DESTQKEY; verbs.c: irdma_post_send, spec
    /// data-path §1.6). Only a UD QP accepts it; on an RC QP it is refused
    /// like the other operations the QP type cannot do.
    UdSend {
        /// Address-handle index ([`crate::verbs::Ah::id`]).
        ah: u32,
        /// Destination QPN (24 bits).
        remote_qpn: u32,
        /// Destination Q_Key.
        remote_qkey: u32,
        /// Immediate data, if any.
        imm: Option<u32>,
    },
}

/// A send work request (`struct ib_send_wr`); chains are slices of these.
///
/// The default is an empty, unsignaled SEND with `wr_id` 0, for
/// `SendWr { opcode, sg_list, ..Default::default() }`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Caller's cookie, returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub opcode: WrOpcode,
    /// Flags.
    pub flags: SendFlags,
    /// Local buffers (gathered for sends/writes, scattered for reads).
    pub sg_list: &'a [Sge],
}

/// A receive work request (`struct ib_recv_wr`); the default has no buffers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Caller's cookie, returned in the completion.
    pub wr_id: u64,
    /// Buffers to scatter the incoming message into.
    pub sg_list: &'a [Sge],
}

/// Completion status (`enum ib_wc_status`, the values E810 produces); the
/// default is `Success` (0, as in a zeroed `ib_wc`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum WcStatus {
    /// `IB_WC_SUCCESS`.
    #[default]
    Success,
    /// `IB_WC_LOC_LEN_ERR`.
    LocLenErr,
    /// `IB_WC_LOC_QP_OP_ERR`.
    LocQpOpErr,
    /// `IB_WC_LOC_PROT_ERR`.
    LocProtErr,
    /// `IB_WC_WR_FLUSH_ERR`: the QP was in error; the WR was not executed.
    WrFlushErr,
    /// `IB_WC_MW_BIND_ERR`.
    MwBindErr,
    /// `IB_WC_BAD_RESP_ERR`.
    BadRespErr,
    /// `IB_WC_LOC_ACCESS_ERR`.
    LocAccessErr,
    /// `IB_WC_REM_INV_REQ_ERR`.
    RemInvReqErr,
    /// `IB_WC_REM_ACCESS_ERR`.
    RemAccessErr,
    /// `IB_WC_REM_OP_ERR`.
    RemOpErr,
    /// `IB_WC_RETRY_EXC_ERR`.
    RetryExcErr,
    /// `IB_WC_RNR_RETRY_EXC_ERR`.
    RnrRetryExcErr,
    /// `IB_WC_FATAL_ERR`.
    FatalErr,
    /// `IB_WC_GENERAL_ERR`.
    GeneralErr,
}

/// The operation a completion reports (`enum ib_wc_opcode`); the default is
/// `Send` (0, as in a zeroed `ib_wc`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum WcOpcode {
    /// `IB_WC_SEND`.
    #[default]
    Send,
    /// `IB_WC_RDMA_WRITE`.
    RdmaWrite,
    /// `IB_WC_RDMA_READ`.
    RdmaRead,
    /// `IB_WC_LOCAL_INV`.
    LocalInv,
    /// `IB_WC_REG_MR`.
    RegMr,
    /// `IB_WC_RECV`.
    Recv,
    /// `IB_WC_RECV_RDMA_WITH_IMM`.
    RecvRdmaWithImm,
}

/// A work completion (`struct ib_wc`).
///
/// The default is a zeroed `ib_wc` (`wr_id` 0, `Success`, `Send`): the
/// filler for the array a poll writes into, e.g.
/// `[WorkCompletion::default(); 16]`; it reports nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
// `repr(C)`, fields in this order, for the fast poll's fill (BENCHMARKS.md,
// "The split poll at 79"): `vendor_err` and `imm_data`'s tag are adjacent,
// so the fast path's two constant zeros are one 8-byte store.
#[repr(C)]
pub struct WorkCompletion {
    /// The WR's cookie.
    pub wr_id: u64,
    /// Bytes transferred (receives and reads).
    pub byte_len: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote-invalidated STag (receive of SEND_WITH_INV).
    pub invalidated_rkey: Option<u32>,
    /// Hardware major/minor error code (0 on success), for diagnostics.
    pub vendor_err: u32,
    /// Immediate data, when `wc_flags` says so.
    pub imm_data: Option<u32>,
    /// UD / GSI QPs only: what the CQE says about the datagram's sender
    /// (`src_qp`, `IB_WC_GRH`, network type, `smac`, `vlan_id`, `sl`).
    pub ud: Option<UdWc>,
    /// Outcome.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// The sender asked for a solicited event.
    pub solicited: bool,
}

impl WorkCompletion {
    /// The default (a zeroed `ib_wc`) as a constant, for `const` items and
    /// struct-update bases.
    pub const EMPTY: Self = Self {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        vendor_err: 0,
        byte_len: 0,
        qp_num: 0,
        imm_data: None,
        invalidated_rkey: None,
        solicited: false,
        ud: None,
    };
}

/// The UD part of a work completion, decoded as the vendor does (verbs.c:
/// irdma_process_cqe; spec data-path §5.2, §5.6). Every UD completion has
/// a GRH area (`IB_WC_GRH`) and a network type; the source MAC and VLAN
/// only on successful receives whose CQE extension carries them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct UdWc {
    /// Source QPN (CQE +16 \[31:0\]).
    pub src_qp: u32,
    /// The datagram came over IPv4 (CQE bit 53): the 40-byte GRH area holds
    /// 20 unused bytes, then the IPv4 header; else the IPv6 header.
    pub ipv4: bool,
    /// Source MAC (`IB_WC_WITH_SMAC`).
    pub smac: Option<[u8; 6]>,
    /// VLAN id (`IB_WC_WITH_VLAN`: only a non-zero id is reported).
    pub vlan_id: Option<u16>,
    /// Service level = VLAN priority (0 without a VLAN tag).
    pub sl: u8,
}

#[cfg(test)]
mod tests {
    use super::WorkCompletion;

    /// The constant and the derived default are the same zeroed `ib_wc`.
    #[test]
    fn empty_is_the_default() {
        assert_eq!(WorkCompletion::EMPTY, WorkCompletion::default());
    }
}
