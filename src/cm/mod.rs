//! The InfiniBand connection manager (IB CM) with RDMA-CM compatibility
//! (work in progress: the MAD layer and the RDMA-CM helpers).

pub mod mad;
pub mod rdma_cm;
