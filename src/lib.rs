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
//! // SAFETY: `mem` outlives the MR (dropped after it below), and its pages
//! // are used for nothing else while the MR exists.
//! let mr = unsafe { dev.reg_mr(&pd, &desc) }?;
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
//! // 6. Poll the CQ (no QP list, as `ib_poll_cq`): one completion per side.
//! let mut wc = [WorkCompletion::default(); 4];
//! let mut got = 0;
//! for _ in 0..100 {
//!     got += cq.poll(&mut wc[got..]);
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
//! # Memory: where the `Device` lives
//!
//! A `Device` holds its tables inline (no allocator): about 90 KB on
//! x86_64 with the default limits (`device::MAX_QPS`, `MAX_MRS`, …), and
//! `Device::probe` / `ice::E810::bring_up` return it by value. Firmware
//! with small stacks should move it straight into a static or a large
//! stack; unoptimized builds keep several copies in the probe frames (the
//! repo's tests run with `RUST_MIN_STACK` = 16 MiB, `.cargo/config.toml`).
//!
//! # Layers
//!
//! The verbs API is [`device`], [`verbs`], [`wr`], [`rw`], [`lan`] and
//! [`aeq`], all re-exported by [`prelude`]. [`cqp`], [`uk`] and [`res`] are
//! the **low-level API** the verbs layer is built from (CQP commands, WQE
//! rings, resource allocators): public for the conformance runner, the
//! benchmarks and embedders who need one piece on its own, but a verbs user
//! never needs them.
//!
//! The modules stack bottom up: the hal → plain types (work requests, LAN
//! hand-off, error phrases, flight-recorder events) → wire encodings (CQP
//! commands, contexts and decoders, CQE decoding, ice descriptors and
//! capabilities, CM MADs) → rings ([`uk`]: memory → SQ, RQ, CQ → QP → poll
//! → link, MP) and resources ([`res`]) → engines (the CQP engine; the ice
//! admin queue, commands, scheduler, switch) → the device (probe, teardown,
//! HMC, AEQ, flight recorder, completions) → verbs, [`rw`], LAN bring-up →
//! [`cm`]. **The rule:** a module imports only from its own layer or below,
//! and there are no import cycles. `cargo xtask layers` checks it from the
//! sources (its table in `xtask/src/layers.rs` places every file; its
//! allowlist, `xtask/layers-known.txt`, is empty and may only shrink: a new
//! upward import or cycle fails the leg). A plain type a lower layer needs
//! is defined there and re-exported where users see it (`verbs::QpState`
//! and `device::ProbeStep` live with the flight recorder, `verbs::IpAddr`
//! with the LAN hand-off, `aeq::AsyncEvent` with the device).
//!
//! # Safety contract
//!
//! The one place that says what callers promise, what the driver promises
//! back, and what happens to memory the device may own when something fails.
//!
//! ## What safe code can rely on
//!
//! Without `unsafe` on the caller's side, no use of this crate's API makes
//! the device read or write memory the caller did not hand it through an
//! `unsafe` call, frees memory the device may still use, or panics on a path
//! device data or caller input can reach. In particular:
//!
//! * every buffer the driver gives the device (rings, contexts, HMC SDs,
//!   PBLE pages, FPM/feature buffers) is a [`hal::Dma`] the driver owns and
//!   frees only under the quarantine policy below;
//! * every verbs object borrows its [`device::Device`], so the device cannot
//!   be closed under it; objects that depend on others are reference
//!   counted: a CQ with live QPs refuses [`verbs::Cq::destroy`] with
//!   [`verbs::VerbsError::InUse`] and its `Drop` defers the DESTROY_CQ until
//!   the last QP is destroyed, keeping every ring it gave the device (rings
//!   a resize replaced included) until that DESTROY_CQ completed or, if it
//!   cannot, in the quarantine; a PD keeps its id while QPs or MRs use it;
//!   a PD, CQ or QP of another device is refused where one is named
//!   ([`verbs::VerbsError::Invalid`]);
//! * every CPU access the driver makes to DMA memory — the [`hal::Dma`]
//!   accessors and the [`uk::QueueMem`] ring views — is a relaxed atomic
//!   access of one aligned 8-byte word: `read_u32`/`read_bytes` load the
//!   words holding the bytes, `write_u32`/`write_bytes` store the words
//!   they cover whole and compare-exchange a word they cover in part (so a
//!   concurrent write of its other bytes is kept). Threads sharing a `Dma`
//!   or a ring therefore never race accesses of different sizes, which
//!   Rust's memory model makes undefined (issue #28); memory reached through
//!   [`hal::Dma::vaddr`] must be accessed the same way. (A `Dma` the driver
//!   uses as private bookkeeping memory, never told to the device and never
//!   read through the accessors, holds typed objects instead.);
//! * completions read from registers are ordered before the reads of the
//!   buffers the op wrote ([`hal::barrier::dma_rmb`] after the CQPTAIL poll),
//!   CQE/AEQE valid bits before their bodies;
//! * a REG_MR (fast-register) WR posted through the safe post paths
//!   ([`verbs::Qp::post_send`], [`verbs::SharedQp::post_send`], and so
//!   [`rw::RwCtx::post`]) is admitted only if it names a live
//!   [`verbs::FastRegMr`] of this device: its STag index (any key byte), its
//!   own PBL at its own level (a level-1 run, or a level-2 root), 4 KiB
//!   pages, no more pages (counted from the
//!   IOVA's offset in its first page) than the last map wrote, no atomic or
//!   MW rights. Otherwise the post fails with
//!   [`verbs::PostErrorKind::FastReg`] at that WR (those before it posted,
//!   nothing after, no doorbell). Each map arms exactly one REG_MR, so PBLEs
//!   a map wrote are never registered again by safe code after that map's
//!   contract ended. The PBLE contents themselves come only from `unsafe`
//!   calls: [`verbs::FastRegMr::map_pages`] and
//!   [`rw::PostSend::map_mr_pages`] (which [`rw::RwCtx::post`] calls with the
//!   pages the `unsafe` [`rw::RwCtx::init`] / [`rw::RwCtx::init_bvec`]
//!   collected). The device itself checks the MR's PD against the QP's and
//!   refuses a FAST_REG on an STag that is valid or unallocated;
//! * an [`rw::RwCtx`] holding fast-register MRs is bound to the
//!   [`rw::MrPool`] it took them from (an identity each [`rw::MrPool::init`]
//!   draws from a global counter), and each MR hand-out carries a
//!   generation: [`rw::RwCtx::wrs`], [`rw::RwCtx::post`],
//!   [`rw::RwCtx::destroy`] and [`rw::RwCtx::destroy_bvec`] given another
//!   pool, or holding an entry whose MR was returned or handed out again,
//!   fail with [`rw::RwError::WrongPool`] / [`rw::RwError::StaleMr`] before
//!   touching anything. So a pool never hands out an MR a live context
//!   still holds, and `post` never writes a page list into another
//!   context's MR. The pool is checked, not part of `destroy`'s contract;
//! * the low-level [`uk`] queues post only into the [`uk::QueueMem`] they are
//!   built over, which safe code can make only over a [`hal::Dma`] it owns
//!   ([`uk::QueueMem::from_dma`]: host memory the device was never told
//!   about) — anything else takes the `unsafe` [`uk::QueueMem::from_raw`].
//!   No safe path leads from a [`verbs::Qp`] or [`verbs::SharedQp`] to its
//!   `uk` queue or ring view, and ringing a doorbell needs the [`hal::Bar`],
//!   which [`device::Device::bar`] lends only under `unsafe` (a `Bar` the
//!   caller made itself is [`hal::MmioBar::new`]'s contract);
//! * [`verbs::SharedQp::post_send`] never waits: lock-free while the QP is
//!   healthy, and in ERROR it only *tries* the QP's spin lock, returning
//!   [`verbs::PostErrorKind::Busy`] when it is held, so it may be called
//!   from an interrupt handler. `SharedQp::post_recv`, `SharedQp::state` and
//!   [`verbs::Cq::poll_shared`] do wait for that lock: an interrupt handler
//!   that may have interrupted one of them must not call them;
//! * a plain [`verbs::Qp`] is split into a producer half (its posts: no
//!   lock, one acquire load and one release store per call) and a consumer
//!   half that [`verbs::Cq::poll`] finds through the device's table
//!   (`uk::link`); the poll only *tries* a QP's table slot and stops with
//!   the CQE kept if another poller holds it, never waiting; destroying
//!   (or dropping) the QP withdraws the half and waits for a poller that
//!   holds it (at most one poll call), so its memory is never freed under
//!   a poller. The two halves share the tracking arrays only through the
//!   crate-private protocol; [`uk::Sq::split_consumer`] and
//!   [`uk::Rq::split_consumer`] are `unsafe` for that reason.
//!
//! Known limit: a REG_MR admitted while its MR was live but executed by the
//! device after the MR's DEALLOC_STAG (the SQ and the CQP are separate
//! engines; or a `dereg` racing a post on another thread) relies on the
//! device refusing FAST_REG on a deallocated or re-allocated-and-valid STag;
//! deregister a fast-register MR after the REG_MR WRs naming it completed.
//!
//! ## What the caller guarantees in each `unsafe fn`
//!
//! | Function | The caller guarantees |
//! |---|---|
//! | [`device::Device::reg_mr`] | every page `MrDesc::pages` names is memory the caller owns, mapped for the device, and stays allocated and unused for anything else until the MR is deregistered (or, if it was quarantined, until the function is reset) |
//! | [`verbs::FastRegMr::map_pages`] | the same for the pages, until the one REG_MR WR this map arms (the next one admitted for the MR) is invalidated, or the MR is deregistered, or — if no REG_MR was admitted — the entries are overwritten by a later map |
//! | [`rw::PostSend::map_mr_pages`] (an `unsafe` method of a safe trait; the verbs QPs implement it) | `pages` may be accessed by the device with the rights of the REG_MR that follows, until that registration is invalidated — as the buffers [`rw::RwCtx::init`] / [`rw::RwCtx::init_bvec`] collected them from are under their contract; the verbs implementations write only into the named live fast-register MR's own PBLEs and arm it for one REG_MR |
//! | [`device::Device::bar`] | raw register access only reads, or writes nothing that changes which memory the device uses or disturbs the driver's rings and CQP |
//! | [`ice::AdminQueue::bar`] | as [`device::Device::bar`], and nothing disturbs the admin queue's rings either |
//! | [`ice::AdminQueue::send`], [`ice::AdminQueue::send_sized`] | any address in the descriptor names DMA memory the caller owns for the call, and the command changes nothing a live [`device::Device`] relies on: its VSI, qsets and scheduler branch, PE filter, the port MAC's switch rule, PF resets, NVM or package |
//! | [`device::Device::close_after_reset`] | the PCI function was reset after the last CQP op and after every quarantined buffer was handed to the device |
//! | [`verbs::Qp::enable_inline`], [`uk::Sq::enable_inline`], [`uk::MpSq::enable_inline`], [`device::Device::create_shared_qp_inline`] | the `addr` of every inline SGE posted from then on is a CPU address readable for `length` bytes during the post (the driver copies the bytes with plain reads, so nothing — another thread, the device — writes them meanwhile; a payload in a [`hal::Dma`] that may be written concurrently is copied out with its accessors first) |
//! | [`uk::Sq::split_consumer`], [`uk::Rq::split_consumer`] | until one half is dropped, the original only posts and the new half only retires, and each learns the other's position only from a value the other published with release after its accesses (through [`uk::QpLink`]), read with acquire |
//! | [`uk::QueueMem::from_raw`] | `base` is 8-byte aligned, valid for reads and writes of `qwords * 8` bytes for `'a`, and meanwhile the CPU accesses it only as atomic accesses of aligned 8-byte words (the access model of DMA memory above): no Rust reference into it, no plain, volatile or other-size atomic access |
//! | [`rw::RwCtx::init`], [`rw::rdma_rw_ctx_init`] | every `sg[i].buf` is valid for the direction's access and not moved or freed until `destroy` was called with the same `sg`, after the device is done |
//! | [`rw::RwCtx::init_bvec`], [`rw::rdma_rw_ctx_init_bvec`] | the same for every buffer the bio_vec iterator covers, until `destroy_bvec` |
//! | [`rw::RwCtx::signature_init_sg`] | as [`rw::RwCtx::init`], for `sg` and `prot_sg` while mapped (unmapped again before it returns) |
//! | [`rw::RwCtx::destroy`], [`rw::RwCtx::destroy_bvec`], [`rw::rdma_rw_ctx_destroy`], [`rw::rdma_rw_ctx_destroy_bvec`] | the device is done with the transfer; `sg` / the mapper are the ones given to `init` |
//! | `unsafe impl` [`rw::IovaMapper`] | each linked segment is reachable by the device at `addr + offset` until `destroy`, and `destroy` ends that access |
//! | `unsafe impl` [`hal::Hal`], [`hal::MmioBar::new`] | the platform contracts in `irdma-hal` (contiguous zeroed DMA pages exclusively owned until freed; a valid uncached BAR mapping) |
//!
//! ## Memory the device may own: the quarantine policy
//!
//! DMA memory the device was told about is released only after the device
//! confirmed it let go — a successful destroy, dealloc, SD clear or CQP
//! destroy handshake — or after a function reset. A command refused with
//! error codes ([`cqp::CqpError::OpFailed`]) or never sent confirms that the
//! device did not take the memory, which is then freed. Anything else — a
//! timeout, a completion that made no sense, a destroy refused inside
//! `Drop` — leaves the memory *quarantined*
//! ([`cqp::engine::device_may_own`] decides):
//!
//! * the buffers move into a fixed-capacity quarantine on the device
//!   ([`device::QUARANTINE_SLOTS`]; beyond it they are leaked at once), ids
//!   the device may use (QP, CQ, STag index, PBLEs) stay allocated;
//! * all of it is counted in [`device::Device::footprint`]`().quarantined`;
//! * the device is marked as needing a reset ([`device::Device::needs_reset`]):
//!   every later call that needs the CQP fails with
//!   [`cqp::CqpError::NeedsReset`] without touching the device, as Linux
//!   stops using the CQP once it set `rf->reset`.
//!
//! A device that disappears (surprise removal: registers read all-ones) is
//! treated the same way, found by the next CQP op within its timeout or by
//! [`device::Device::check_presence`]: calls then fail with
//! [`cqp::CqpError::DeviceGone`], and a CQ poll completes every outstanding
//! WR as flushed.
//!
//! A QP moved to ERROR (by the caller, an asynchronous QP error, or a dead
//! CQ: [`verbs::Cq::is_dead`]) whose MODIFY_QP / FLUSH_WQES cannot be done
//! because the device needs a reset (or the op times out) is still in
//! ERROR: the CQ poll completes its outstanding WRs as flushed in software,
//! once, and drops any hardware CQE of those queues that arrives later. A
//! WR completed that way may still have been executed by a device whose
//! data path kept running; this moves no memory out of the device's
//! reach: buffers stay reachable through their MRs until a deregistration
//! succeeds (or the function is reset), as above.
//!
//! Per path: CREATE_CQ / CREATE_QP / REG_MR / ALLOC_STAG / re-registration
//! that time out keep the rings, context, STag and PBLEs; a verbs object
//! whose destroy fails in `Drop` is quarantined (it was leaked silently
//! before); probe keeps the CQP rings (leaked inside the engine and counted),
//! the CCQ ring and shadow (kept in the engine), CEQ and AEQ rings and SDs
//! whose programming timed out; teardown skips every CQP op once the device
//! needs a reset (Linux skips the CCQ/CEQ/AEQ/HMC destroys under `rf->reset`:
//! hw.c irdma_destroy_ccq, irdma_destroy_ceq, irdma_destroy_aeq) and quarantines the
//! AEQ, CEQ, CCQ, CQP rings, SDs and FPM buffer page it could not destroy.
//!
//! A device closed or dropped with a non-empty quarantine never frees it:
//! the buffers are leaked on purpose ([`device::CloseError::Quarantined`]
//! reports it); [`device::Device::close_with_lan`] also calls
//! [`lan::LanOps::request_reset`]. Only a caller that knows the function was
//! reset may have everything freed, through the `unsafe`
//! [`device::Device::close_after_reset`].
#![no_std]
#![deny(missing_docs)]

pub use irdma_hal as hal;

#[macro_use]
mod log;

pub mod aeq;
pub mod cm;
pub mod cqp;
pub mod device;
mod error;
pub use error::Phrase;
pub mod flight;
pub mod ice;
pub mod irq;
pub mod lan;
pub mod prelude;
pub mod res;
pub mod rw;
pub mod uk;
pub mod verbs;
pub mod wr;

/// Test support (cargo feature `test-support`, off by default; not part of
/// the API and not covered by semver): the pure steps behind the driver's
/// crate-private HMC backing (`device::hmc::SdStore::back_pble_chunk`,
/// `SdStore::clear_all`), for the vendor differential (`tests/vendor-diff`,
/// the only crate that enables it). They are the functions the driver
/// itself calls, not copies.
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod test_support {
    pub use crate::device::hmc::{
        PdStep, chunk_sd_entry, paged_chunk_steps, paged_release_steps, pdinv_value,
    };
}
