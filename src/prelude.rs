//! What a verbs user needs, in one import: `use irdma::prelude::*;`.
//!
//! The device and its options, the LAN hand-off, the verbs objects and
//! their attributes, work requests and completions, the `rdma_rw` context
//! and pool, the errors of each, and the hal's `Bar`/`MmioBar`/`Hal`/`Dma`.
//! Nothing of the low-level API (`cqp`, `uk`, `res` beyond [`Profile`]).

pub use crate::aeq::{AsyncEvent, AsyncEventKind};
pub use crate::device::{CloseError, Device, ProbeCause, ProbeError, ProbeOptions, ProbeStep};
pub use crate::lan::{LanError, LanInfo, LanInfoError, LanOps};
pub use crate::res::Profile;
pub use crate::rw::{DeviceAttrs, Direction, MrPool, RwCtx, RwError, RwPostError, RwQp, SgEntry};
pub use crate::verbs::{
    AddressVector, Ah, AhAttr, Cq, CqOptions, FastRegMr, GRH_BYTES, GSI_QKEY, IpAddr, Mr, MrDesc,
    Pd, PostError, PostErrorKind, Qp, QpAttr, QpCap, QpInitAttr, QpState, Quantity, SharedQp,
    VerbsError,
};
pub use crate::wr::{
    Access, PageSize, RecvWr, SendFlags, SendWr, Sge, UdWc, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode,
};
pub use irdma_hal::{Bar, BufferDirection, Dma, DmaError, Hal, MmioBar, PhysAddr};
