//! The InfiniBand connection manager (IB CM) with RDMA-CM compatibility,
//! for RC connections to and from standard Linux peers (`rdma_connect` /
//! `rdma_accept` / `rdma_disconnect`) over RoCEv2.
//!
//! * [`mad`]: the 256-byte CM MADs, encoded and decoded field by field;
//! * [`rdma_cm`]: service ids, the `cma_hdr` private-data header, REJ
//!   reasons, CM time values;
//! * [`Cm`]: the active and passive state machine over a fixed table of
//!   connections, driven by the caller ([`Cm::on_mad`], [`Cm::poll`]) and
//!   sending through a [`MadTransport`];
//! * [`Qp1Transport`]: the [`MadTransport`] on the driver's GSI QP (QP 1):
//!   UD SENDs to the peer's QP 1 with Q_Key 0x80010000, a ring of
//!   GRH + MAD receive buffers, address handles cached per peer;
//! * [`ConnParams`]: what the exchange decided for the RC QP, as the verbs
//!   [`QpAttr`](crate::verbs::QpAttr) steps ([`ConnParams::apply`]).
//!
//! Facts: `shared/spec/ib-cm-rocev2.md` (IBTA vol. 1 ch. 12 through Linux
//! `include/rdma/ibta_vol1_c12.h`, `drivers/infiniband/core/cm.c`,
//! `cma.c`). SIDR (UD service resolution, `udaddy`): [`Cm::sidr_resolve`]
//! on the active side, [`CmEvent::SidrRequest`] → [`Cm::sidr_accept`] /
//! [`Cm::sidr_reject`] on the passive side of a UDP-port-space listener.
//! Not implemented: LAP/APR (Linux ignores them on RoCE), ECE, alternate
//! paths. MRAs are sent as RDMA-CM does: on a duplicate
//! REQ the caller has not answered yet, and on a duplicate REP before the
//! RTU ([`MRA_SERVICE_TIMEOUT`]); [`Cm::mra`] sends one for a REQ at once.

mod machine;
pub mod mad;
mod params;
mod qp1;
pub mod rdma_cm;

pub use machine::{
    AcceptParams, Cm, CmConfig, CmError, CmEvent, CmState, CmStats, CmTiming, ConnId,
    ConnectParams, Ignored, ListenId, MAX_RD_ATOMIC, MRA_SERVICE_TIMEOUT, MadAddr, MadTransport,
    ReqInfo, SIDR_LINGER_INTERVALS, SidrAcceptParams, SidrParams, SidrReqInfo,
};
pub use params::ConnParams;
pub use qp1::{QP1_AH_SLOTS, QP1_MAX_PAGES, QP1_RECV_BYTES, Qp1Error, Qp1Stats, Qp1Transport};
