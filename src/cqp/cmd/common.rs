//! What every CQP command builder shares: the id limits, the encoding
//! environment, the [`CqpCommand`] trait, the range checks, ring
//! addresses; and the NOP.

use irdma_hal::Field;
use irdma_hal::cqp::{hdr, op};

use crate::cqp::{EncodeError, FieldName, Phrase, fit};

/// Object counts the builders check ids against (the vendor refuses ids at
/// or above the committed HMC count, e.g. ctrl.c: irdma_sc_qp_create,
/// irdma_sc_cq_create, irdma_sc_mr_reg_non_shared).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Committed QP count.
    pub qp_count: u32,
    /// Committed CQ count.
    pub cq_count: u32,
    /// Committed PBLE count.
    pub pble_count: u32,
    /// Number of CEQs the function has (query-FPM MAX_CEQS).
    pub ceq_count: u32,
}

impl Limits {
    /// No limits beyond the field widths (before the HMC is sized).
    pub const NONE: Limits = Limits {
        qp_count: u32::MAX,
        cq_count: u32::MAX,
        pble_count: u32::MAX,
        ceq_count: u32::MAX,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Self::NONE
    }
}

/// What a builder may need besides its own fields.
#[derive(Debug)]
pub struct Env {
    /// Id limits.
    pub limits: Limits,
    /// Bus address of this WQE's 128-byte UPDATE_PE_SDS overflow slot
    /// (`sdbuf` + WQE index × 128, spec §3.7); 0 when there is none.
    pub sdbuf_pa: u64,
    /// The overflow slot's contents, written by UPDATE_PE_SDS; the engine
    /// copies them to `sdbuf_pa` before posting.
    pub sdbuf: [u64; 16],
    /// Number of words of `sdbuf` the builder wrote.
    pub sdbuf_words: usize,
}

impl Env {
    /// An environment with the given limits and no overflow buffer.
    pub fn new(limits: Limits) -> Self {
        Env { limits, sdbuf_pa: 0, sdbuf: [0; 16], sdbuf_words: 0 }
    }
}

/// A CQP operation that can be placed in a CQP SQ slot.
pub trait CqpCommand {
    /// Hardware opcode (spec §4.1).
    const OPCODE: u8;

    /// Writes all eight WQE words; the header (@24) carries the opcode and
    /// the op's fields but not the valid bit.
    fn encode(&self, wqe: &mut [u64; 8], env: &mut Env) -> Result<(), EncodeError>;

    /// Register writes the vendor issues before ringing the doorbell for this
    /// op, as `(BAR offset, value)` (only DESTROY_AEQ has one: PFINT_AEQCTL ← 0,
    /// ctrl.c: irdma_sc_aeq_destroy).
    fn pre_post_writes(&self) -> &'static [(usize, u32)] {
        &[]
    }
}

/// Commands that share one layout and differ only in the opcode (create /
/// modify / destroy of an AH or a multicast group): each a newtype over the
/// info struct, encoded by the info's own `encode(opcode, wqe)` (used as
/// `ops_over!(Info { Name = op::OPCODE, … })`, each name after its doc
/// comment).
macro_rules! ops_over {
    ($info:ty { $($(#[$doc:meta])* $name:ident = $opcode:expr),+ $(,)? }) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
            pub struct $name(pub $info);

            impl CqpCommand for $name {
                const OPCODE: u8 = $opcode;
                fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
                    self.0.encode(Self::OPCODE, wqe)
                }
            }
        )+
    };
}
pub(super) use ops_over;

pub(super) fn header(opcode: u8) -> u64 {
    hdr::OPCODE.prep(opcode as u64)
}

pub(super) fn below(v: u64, limit: u32, name: FieldName) -> Result<(), EncodeError> {
    if v < limit as u64 { Ok(()) } else { Err(above_max(name, v, limit.saturating_sub(1))) }
}

/// [`EncodeError::AboveMax`].
pub(super) fn above_max(field: FieldName, value: u64, max: u32) -> EncodeError {
    EncodeError::AboveMax { field, max, value }
}

/// GEN_2 sizes the vendor range-checks in its `*_init` functions (user.h:
/// IRDMA_MIN/MAX_CEQ_ENTRIES, IRDMA_MIN/MAX_AEQ_ENTRIES, IRDMA_MIN/MAX_CQ_SIZE;
/// ctrl.c: irdma_sc_dev_init sets them as `hw_attrs`). They are device
/// maxima, narrower than the WQE fields (CEQSIZE 22 bits, CQSIZE 21 bits).
pub mod hw_limits {
    /// Fewest CEQEs (irdma_sc_ceq_init).
    pub const MIN_CEQ_ENTRIES: u32 = 1;
    /// Most CEQEs on GEN_2 (irdma_sc_ceq_init).
    pub const MAX_CEQ_ENTRIES: u32 = 262_143;
    /// Fewest AEQEs (irdma_sc_aeq_init).
    pub const MIN_AEQ_ENTRIES: u32 = 1;
    /// Most AEQEs on GEN_2 (irdma_sc_aeq_init).
    pub const MAX_AEQ_ENTRIES: u32 = 524_287;
    /// Fewest CCQ entries (irdma_sc_ccq_init, `min_hw_cq_size`).
    pub const MIN_CQ_SIZE: u32 = 1;
    /// Most CCQ entries (irdma_sc_ccq_init, `max_hw_cq_size`).
    pub const MAX_CQ_SIZE: u32 = 1_048_575;
}

/// `v` within `min..=max`: above is [`EncodeError::TooWide`] naming `name`,
/// below is [`EncodeError::Invalid`] with `low` (the vendor: -EINVAL).
pub(super) fn in_range(
    v: u64,
    min: u32,
    max: u32,
    name: FieldName,
    low: Phrase,
) -> Result<(), EncodeError> {
    if v > max as u64 {
        Err(above_max(name, v, max))
    } else if v < min as u64 {
        Err(EncodeError::Invalid { what: low })
    } else {
        Ok(())
    }
}

/// A region described by PBLEs: level (the LPBLSIZE value: 1 = level 1,
/// 3 = level 2 for MRs) and the first (or root) PBLE index (spec §6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pbl {
    /// LPBLSIZE value.
    pub level: u8,
    /// First PBLE index (< 2^28).
    pub first_index: u32,
}

// ---------------------------------------------------------------- NOP

/// NOP (0x24): header only (ctrl.c: irdma_sc_cqp_nop; spec §4.3.24).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nop;

impl CqpCommand for Nop {
    const OPCODE: u8 = op::NOP;
    fn encode(&self, wqe: &mut [u64; 8], _env: &mut Env) -> Result<(), EncodeError> {
        *wqe = [0; 8];
        wqe[3] = header(Self::OPCODE);
        Ok(())
    }
}

/// Where a queue's ring is, as the CQ/CEQ/AEQ WQEs describe it: a bus
/// address (level 0) or a PBL (VIRTMAP with LPBLSIZE and the first PBLE
/// index). The vendor writes LPBLSIZE whatever VIRTMAP says, so the fields are
/// kept apart as it keeps them (ctrl.c: irdma_sc_cq_create,
/// irdma_sc_ceq_create, irdma_sc_aeq_create).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueAddr {
    /// Ring bus address (used when not virtually mapped).
    pub pa: u64,
    /// Ring described by PBLEs.
    pub virtual_map: bool,
    /// LPBLSIZE (1 = level 1).
    pub pbl_chunk_size: u8,
    /// First PBLE index (< 2^28).
    pub first_pbl_index: u32,
}

impl QueueAddr {
    /// A physically contiguous ring at `pa`.
    pub fn contiguous(pa: u64) -> Self {
        QueueAddr { pa, ..Default::default() }
    }
    /// A ring described by a level-1 PBL starting at PBLE `first_index`.
    pub fn pbl(first_index: u32) -> Self {
        QueueAddr { pa: 0, virtual_map: true, pbl_chunk_size: 1, first_pbl_index: first_index }
    }
    pub(super) fn lpbl(&self, f: Field) -> Result<u64, EncodeError> {
        fit(f, self.pbl_chunk_size as u64, FieldName::PblChunkSize)
    }
    /// @32 of a create: the address unless virtually mapped.
    pub(super) fn create_pa(&self) -> u64 {
        if self.virtual_map { 0 } else { self.pa }
    }
    /// @48 of a create: the PBLE index only when virtually mapped.
    pub(super) fn create_pbl(&self, f: Field, env: &Env) -> Result<u64, EncodeError> {
        if self.virtual_map { pbl_index_checked(f, self.first_pbl_index, env) } else { Ok(0) }
    }
    /// An event queue keeps its PBL fields only when virtually mapped:
    /// unlike a CQ's, the vendor's EQ init drops the chunk size and first
    /// PBLE index of a contiguous ring, so its create and destroy WQEs carry
    /// LPBLSIZE 0 and index 0 (ctrl.c: irdma_sc_ceq_init, irdma_sc_aeq_init).
    pub(super) fn eq(&self) -> Self {
        if self.virtual_map {
            *self
        } else {
            QueueAddr { pbl_chunk_size: 0, first_pbl_index: 0, ..*self }
        }
    }
}

pub(super) fn pbl_index_checked(f: Field, idx: u32, env: &Env) -> Result<u64, EncodeError> {
    let v = fit(f, idx as u64, FieldName::FirstPblIndex)?;
    below(idx as u64, env.limits.pble_count, FieldName::FirstPblIndex)?;
    Ok(v)
}
