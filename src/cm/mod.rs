//! The InfiniBand connection manager (IB CM) with RDMA-CM compatibility,
//! for RC connections to and from standard Linux peers (`rdma_connect` /
//! `rdma_accept` / `rdma_disconnect`) over RoCEv2.
//!
//! * [`mad`]: the 256-byte CM MADs, encoded and decoded field by field;
//! * [`rdma_cm`]: service ids, the `cma_hdr` private-data header, REJ
//!   reasons, CM time values;
//! * [`Cm`]: the active and passive state machine over a fixed table of
//!   connections, driven by the caller ([`Cm::on_mad`], [`Cm::poll`]) and
//!   sending through a [`MadTransport`] (QP1; the wiring to the driver's
//!   QP1 is pending, tests use an in-memory transport);
//! * [`ConnParams`]: what the exchange decided for the RC QP, as the verbs
//!   [`QpAttr`](crate::verbs::QpAttr) steps ([`ConnParams::apply`]).
//!
//! Facts: `shared/spec/ib-cm-rocev2.md` (IBTA vol. 1 ch. 12 through Linux
//! `include/rdma/ibta_vol1_c12.h`, `drivers/infiniband/core/cm.c`,
//! `cma.c`). Not implemented: LAP/APR/SIDR (Linux ignores LAP/APR on RoCE),
//! ECE, MRA of a REP, alternate paths.

mod machine;
pub mod mad;
mod params;
pub mod rdma_cm;

pub use machine::{
    AcceptParams, Cm, CmConfig, CmError, CmEvent, CmState, CmStats, CmTiming, ConnId,
    ConnectParams, Ignored, ListenId, MAX_RD_ATOMIC, MadAddr, MadTransport, ReqInfo,
};
pub use params::ConnParams;
