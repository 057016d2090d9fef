//! GEN_2 PF register offsets, opcodes and codes, as the model uses them.
//! Every value is from `shared/spec/irdma-gen2-control-path.md` (cited per
//! group); this table is the model's own, not the driver's.

// spec control-path §1.3 (icrdma_hw.h: icrdma_regs)
/// CQP SQ tail: WQTAIL [10:0], CQP_OP_ERR [31].
pub const CQPTAIL: u32 = 0x0050_0880;
/// CQP SQ doorbell (new producer index).
pub const CQPDB: u32 = 0x0050_0800;
/// CQP status: CCQP_DONE [0], CCQP_ERR [31].
pub const CCQPSTATUS: u32 = 0x0050_A000;
/// CQP host-context PA [63:32].
pub const CCQPHIGH: u32 = 0x0050_A100;
/// CQP host-context PA [31:0]; the write that triggers create/destroy.
pub const CCQPLOW: u32 = 0x0050_A080;
/// CQ arm doorbell (CQ id).
pub const CQARM: u32 = 0x0050_2C00;
/// CQ ack after a CEQE (CQ id).
pub const CQACK: u32 = 0x0050_2C80;
/// AEQEs consumed.
pub const AEQALLOC: u32 = 0x0050_2D00;
/// CQP error codes: MINOR [15:0], MAJOR [31:16].
pub const CQPERRCODES: u32 = 0x0050_A200;
/// SQ doorbell (QP id in [19:0]; push form adds WQE_DESC_INDEX [31:20]).
pub const WQEALLOC: u32 = 0x0050_4400;
/// GLPCI_LBARCTRL: PE_DB_SIZE [5:4].
pub const GLPCI_LBARCTRL: u32 = 0x0009_DE74;
/// Firmware-ready registers (read 0x80 when ready).
pub const GLPE_CPUSTATUS0: u32 = 0x0050_BA5C;
/// See [`GLPE_CPUSTATUS0`].
pub const GLPE_CPUSTATUS1: u32 = 0x0050_BA60;
/// See [`GLPE_CPUSTATUS0`].
pub const GLPE_CPUSTATUS2: u32 = 0x0050_BA64;
/// PE critical error register.
pub const GLPE_CRITERR: u32 = 0x0053_4000;
/// PF HMC PD invalidate.
pub const PFHMC_PDINV: u32 = 0x0052_0300;
/// PCI function number [2:0].
pub const PF_FUNC_RID: u32 = 0x0009_E880;
/// AEQ interrupt control.
pub const PFINT_AEQCTL: u32 = 0x0016_CB00;
/// User doorbell page (an offset, not a register): QP id at +0, CQ id at +64.
pub const DB_ADDR_OFFSET: u32 = 0x007F_0000;
/// BAR0 size the model exposes: 8 MiB doorbell space (PE_DB_SIZE = 2) plus
/// 64 KiB (push pages are not modelled).
pub const BAR_SIZE: u32 = 0x0081_0000;

/// CQP opcodes (spec control-path §4.1, defs.h: IRDMA_CQP_OP_*).
#[allow(missing_docs)]
pub mod op {
    pub const CREATE_QP: u8 = 0x00;
    pub const MODIFY_QP: u8 = 0x01;
    pub const DESTROY_QP: u8 = 0x02;
    pub const CREATE_CQ: u8 = 0x03;
    pub const MODIFY_CQ: u8 = 0x04;
    pub const DESTROY_CQ: u8 = 0x05;
    pub const ALLOC_STAG: u8 = 0x09;
    pub const REG_MR: u8 = 0x0A;
    pub const DEALLOC_STAG: u8 = 0x0D;
    pub const MANAGE_ARP: u8 = 0x0F;
    pub const QUERY_RDMA_FEATURES: u8 = 0x12;
    pub const CREATE_CEQ: u8 = 0x16;
    pub const DESTROY_CEQ: u8 = 0x18;
    pub const CREATE_AEQ: u8 = 0x19;
    pub const DESTROY_AEQ: u8 = 0x1B;
    pub const CREATE_ADDR_HANDLE: u8 = 0x1C;
    pub const MODIFY_ADDR_HANDLE: u8 = 0x1D;
    pub const DESTROY_ADDR_HANDLE: u8 = 0x1E;
    pub const UPDATE_PE_SDS: u8 = 0x1F;
    pub const QUERY_FPM_VAL: u8 = 0x20;
    pub const COMMIT_FPM_VAL: u8 = 0x21;
    pub const FLUSH_WQES: u8 = 0x22;
    pub const NOP: u8 = 0x24;
    pub const SHMC_PAGES_ALLOCATED: u8 = 0x2B;
    pub const WORK_SCHED_NODE: u8 = 0x2C;
}

/// CQP completion error codes. The first group is from the spec
/// (control-path §2.6, defs.h: IRDMA_CQPSQ_MAJ_*/MIN_*); the `MODEL_*` minors
/// are the model's own choice for conditions the sources give no code for
/// (they share major 0xFFFF so a driver treats them as generic failures).
#[allow(missing_docs)]
pub mod err {
    pub const MAJ_OBJCACHE: u16 = 0xF000;
    pub const MAJ_CNTXTCACHE: u16 = 0xF001;
    pub const MAJ_GENERIC: u16 = 0xFFFF;
    pub const MIN_INVALID_STATE: u16 = 0x8002;
    pub const MIN_STAG_INVALID: u16 = 0x0001;
    /// Model choice: opcode not implemented by the model.
    pub const MODEL_MIN_UNSUPPORTED_OP: u16 = 0x8F01;
    /// Model choice: a field value out of range / malformed WQE.
    pub const MODEL_MIN_BAD_FIELD: u16 = 0x8F02;
    /// Model choice: object id already in use.
    pub const MODEL_MIN_IN_USE: u16 = 0x8F03;
    /// Model choice: object id does not exist.
    pub const MODEL_MIN_NO_OBJECT: u16 = 0x8F04;
    /// Model choice: a DMA access of the op faulted.
    pub const MODEL_MIN_DMA_FAULT: u16 = 0x8F05;
    /// Model choice: HMC backing for the object is missing.
    pub const MODEL_MIN_NO_BACKING: u16 = 0x8F06;
    /// FLUSH_WQES minor codes: RQ / SQ WQEs were flushed
    /// (main.h: IRDMA_CQP_COMPL_RQ_WQE_FLUSHED / _SQ_WQE_FLUSHED).
    pub const MIN_RQ_FLUSHED: u16 = 2;
    pub const MIN_SQ_FLUSHED: u16 = 3;
}

/// Asynchronous event codes (spec control-path §8.2, user.h: IRDMA_AE_*).
#[allow(missing_docs)]
pub mod ae {
    pub const AMP_UNALLOCATED_STAG: u16 = 0x0102;
    pub const AMP_INVALID_STAG: u16 = 0x0103;
    pub const AMP_BAD_QP: u16 = 0x0104;
    pub const AMP_BAD_PD: u16 = 0x0105;
    pub const AMP_BAD_STAG_KEY: u16 = 0x0106;
    pub const AMP_BAD_STAG_INDEX: u16 = 0x0107;
    pub const AMP_BOUNDS_VIOLATION: u16 = 0x0108;
    pub const AMP_RIGHTS_VIOLATION: u16 = 0x0109;
    pub const AMP_TO_WRAP: u16 = 0x010A;
    pub const PRIV_OPERATION_DENIED: u16 = 0x011C;
    pub const CQ_OPERATION_ERROR: u16 = 0x0203;
    pub const RDMA_READ_WHILE_ORD_ZERO: u16 = 0x0205;
    pub const STAG_ZERO_INVALID: u16 = 0x0206;
    pub const IB_INVALID_REQUEST: u16 = 0x0208;
    pub const WQE_UNEXPECTED_OPCODE: u16 = 0x020A;
    pub const IB_REMOTE_ACCESS_ERROR: u16 = 0x020D;
    pub const IB_REMOTE_OP_ERROR: u16 = 0x020E;
    pub const ROCE_REQ_LENGTH_ERROR: u16 = 0x0318;
    pub const LLP_TOO_MANY_RETRIES: u16 = 0x050A;
    pub const LLP_TOO_MANY_RNRS: u16 = 0x050F;
    pub const LCE_QP_CATASTROPHIC: u16 = 0x0700;
    pub const LCE_FUNCTION_CATASTROPHIC: u16 = 0x0701;
    pub const LCE_CQ_CATASTROPHIC: u16 = 0x0702;
    pub const QP_SUSPEND_COMPLETE: u16 = 0x0900;
    /// AESRC values (spec control-path §8.2).
    pub const SRC_RQ: u8 = 0x1;
    pub const SRC_CQ: u8 = 0x2;
    pub const SRC_SQ: u8 = 0x5;
    pub const SRC_IN_RDMA_WRITE: u8 = 0x9;
    pub const SRC_IN_READ_REQ: u8 = 0xB;
}

/// QP states as written to NEXTIWSTATE (spec control-path §7.4).
#[allow(missing_docs)]
pub mod qps {
    pub const INVALID: u8 = 0;
    pub const IDLE: u8 = 1;
    pub const RTS: u8 = 2;
    pub const SQD: u8 = 3;
    pub const RTR: u8 = 4;
    pub const TERMINATE: u8 = 5;
    pub const ERROR: u8 = 6;
}
