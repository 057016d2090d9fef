//! `irdma`: a `no_std`, allocation-free driver for the RDMA engine of the
//! Intel E810 (irdma "GEN_2").
//!
//! See `ARCHITECTURE.md` for the map of layers. In short: [`irdma_hal`]
//! provides register access and DMA; this crate brings the engine up through
//! the Control QP, manages HMC, STags and PBLEs, and gives a verbs layer and
//! the Linux-style `rdma_rw` layer on top of lock-free WQE rings.
//!
//! # Quick start
//!
//! A verbs user needs [`prelude`]: probe the device, then PD → CQ → QP → MR,
//! connect, post, poll, and tear down (objects borrow the device and destroy
//! themselves when dropped). Below, the device model stands in for the
//! hardware: `irdma_testkit`'s `ModelBar` is the [`Bar`](hal::Bar) (on
//! hardware, `unsafe { MmioBar::new(bar0, len) }`) and `FakeHal` the
//! [`Hal`](hal::Hal) (on hardware, your page allocator and clock). Two QPs
//! of one device are connected to each other through the loopback; across
//! two devices only the peer's MAC/IP change (`examples/host_loopback.rs`,
//! `examples/firmware/`).
//!
//! ```
//! use irdma::prelude::*;
//! use irdma_testkit::{FakeHal, ModelBar};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // 1. Probe: the BAR, what the LAN driver set up, how much to size HMC for.
//! let bar = ModelBar::standalone(mock_bar::Config::default());
//! let (mac, ip) = ([0x02, 0, 0, 0, 0, 0x0a], [10, 0, 0, 1]);
//! let lan = LanInfo::single_tc(0, 6, mac, 1500);
//! let dev: Device<FakeHal, ModelBar> = Device::probe(bar, lan, Profile::SMALL)?;
//!
//! // 2. A protection domain, a CQ and two RC QPs.
//! let pd = dev.alloc_pd()?;
//! let mut cq = dev.create_cq(64)?;
//! let cap = QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1,
//!                   ..QpCap::default() };
//! let mut a = dev.create_qp(&pd, &mut QpInitAttr { send_cq: &cq, recv_cq: &cq, cap })?;
//! let mut b = dev.create_qp(&pd, &mut QpInitAttr { send_cq: &cq, recv_cq: &cq, cap })?;
//!
//! // 3. DMA memory, registered: lkey for local SGEs, rkey for the peer.
//! let mem = Dma::<FakeHal>::new(2, BufferDirection::Both)?;
//! let pages = [mem.paddr(), mem.paddr() + 4096];
//! let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
//! let desc = MrDesc { iova: mem.paddr(), length: 8192, page_size: PageSize::Size4K,
//!                     pages: &pages, zero_based: false, access };
//! let mr = dev.reg_mr(&pd, &desc)?;
//!
//! // 4. Connect: INIT → RTR (peer QPN, MAC, IP) → RTS.
//! let (na, nb) = (a.qp_num(), b.qp_num());
//! for (qp, peer) in [(&mut a, nb), (&mut b, na)] {
//!     qp.modify(&QpAttr::new(QpState::Init))?;
//!     let mut rtr = QpAttr::new(QpState::Rtr);
//!     rtr.dest_qp = peer;
//!     rtr.av = Some(AddressVector {
//!         dest_mac: mac, dest_ip: IpAddr::V4(ip), src_ip: IpAddr::V4(ip),
//!         hop_limit: 64, traffic_class: 0, flow_label: 0, vlan: None,
//!     });
//!     qp.modify(&rtr)?;
//!     qp.modify(&QpAttr::new(QpState::Rts))?;
//! }
//!
//! // 5. b posts a receive into page 1; a SENDs 5 bytes from page 0.
//! assert!(mem.write_bytes(0, b"hello"));
//! let rsge = [Sge { addr: mem.paddr() + 4096, length: 4096, lkey: mr.lkey() }];
//! b.post_recv(&[RecvWr { wr_id: 2, sg_list: &rsge }])?;
//! let sge = [Sge { addr: mem.paddr(), length: 5, lkey: mr.lkey() }];
//! let send = SendWr { wr_id: 1, opcode: WrOpcode::Send, flags: SendFlags::SIGNALED, sg_list: &sge };
//! a.post_send(&[send])?;
//!
//! // 6. Poll: one completion per side.
//! let mut wc = [WorkCompletion::default(); 4];
//! let mut got = 0;
//! for _ in 0..100 {
//!     got += cq.poll(&mut [&mut a, &mut b], &mut wc[got..]);
//!     if got == 2 { break; }
//! }
//! assert_eq!(got, 2);
//! assert!(wc[..2].iter().all(|w| w.status == WcStatus::Success));
//! let mut buf = [0u8; 5];
//! assert!(mem.read_bytes(4096, &mut buf));
//! assert_eq!(&buf, b"hello");
//!
//! // 7. Teardown: objects before the device (drop destroys them too).
//! drop((mr, a, b, cq, pd));
//! dev.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! # Layers
//!
//! The verbs API is [`device`], [`verbs`], [`wr`], [`rw`], [`lan`] and
//! [`aeq`], all re-exported by [`prelude`]. [`cqp`], [`uk`] and [`res`] are
//! the **low-level API** the verbs layer is built from (CQP commands, WQE
//! rings, resource allocators): public for the conformance runner, the
//! benchmarks and embedders who need one piece on its own, but a verbs user
//! never needs them.
#![no_std]
#![deny(missing_docs)]

pub use irdma_hal as hal;

#[macro_use]
mod log;

pub mod aeq;
pub mod cqp;
pub mod device;
mod error;
pub mod lan;
pub mod prelude;
pub mod res;
pub mod rw;
pub mod uk;
pub mod verbs;
pub mod wr;
