//! The driver's part of the firmware, generic over the platform (`H`) and
//! the BAR (`B`): bring the device up, talk to one peer, tear down.

use core::fmt::{self, Display, Write};
use core::ptr::NonNull;
use core::time::Duration;

use irdma::prelude::*;

use crate::pool::{POOL_BYTES, POOL_HUGE_PAGES};

/// The peer's attributes, exchanged out of band by the control plane.
pub struct Peer {
    /// Its QP number.
    pub qpn: u32,
    /// Its MAC (or the next hop's).
    pub mac: [u8; 6],
    /// Its IPv4 address.
    pub ip: [u8; 4],
    /// A buffer it registered for remote write and read, and its rkey.
    pub addr: u64,
    /// The rkey of that buffer.
    pub rkey: u32,
    /// Its length in bytes.
    pub len: u64,
}

/// Defines [`FwError`] from the driver errors it wraps, each named once:
/// its variant, a `Display` that forwards to the driver's, and a `From`
/// for `?`.
macro_rules! fw_error {
    ($($(#[doc = $doc:literal])* $v:ident($t:ty),)+) => {
        /// Why the firmware stopped. Every driver error already implements
        /// `Display` and `core::error::Error`; this only gathers them.
        #[derive(Debug)]
        pub enum FwError {
            $($(#[doc = $doc])* $v($t),)+
            /// A WR completed with an error.
            Completion(u64, WcStatus),
            /// A WR did not complete in time.
            Timeout(u64),
        }

        impl Display for FwError {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    $(FwError::$v(e) => e.fmt(f),)+
                    FwError::Completion(id, s) => write!(f, "WR {id} completed with {s:?}"),
                    FwError::Timeout(id) => write!(f, "WR {id} did not complete within a second"),
                }
            }
        }

        $(impl From<$t> for FwError {
            fn from(e: $t) -> Self {
                FwError::$v(e)
            }
        })+
    };
}

fw_error! {
    /// Bring-up failed (step and cause inside).
    Probe(ProbeError),
    /// A verb failed.
    Verbs(VerbsError),
    /// A post was refused.
    Post(PostError),
    /// The rdma_rw layer refused.
    Rw(RwError),
    /// The rdma_rw chain was refused.
    RwPost(RwPostError<PostErrorKind>),
    /// No DMA memory.
    Dma(DmaError),
    /// Teardown was not clean.
    Close(CloseError),
}

const STEPS: u32 = 10;

fn step(out: &mut dyn Write, n: u32, what: &str) {
    let _ = writeln!(out, "[{n:>2}/{STEPS}] {what}");
}

/// Polls until WR `wr_id` completes (within a second of `H::now`).
fn wait<'d, H: Hal, B: Bar + Clone>(cq: &mut Cq<'d, H, B>, wr_id: u64) -> Result<(), FwError> {
    let deadline = H::now().saturating_add(Duration::from_secs(1));
    let mut wc = [WorkCompletion::default(); 1];
    while cq.poll(&mut wc) == 0 {
        if H::now() > deadline {
            return Err(FwError::Timeout(wr_id));
        }
        H::relax();
    }
    match wc[0] {
        WorkCompletion { wr_id: id, status: WcStatus::Success, .. } if id == wr_id => Ok(()),
        w => Err(FwError::Completion(w.wr_id, w.status)),
    }
}

/// The whole flow, reporting each step on `out`. `pool_base` is the bus
/// address of the DMA pool (2 MiB aligned, `POOL_BYTES` long), which is
/// registered as one MR whose lkey serves every local SGE.
pub fn run<H: Hal, B: Bar + Clone>(
    bar: B,
    lan: LanInfo,
    my_ip: [u8; 4],
    peer: &Peer,
    pool_base: u64,
    out: &mut dyn Write,
) -> Result<(), FwError> {
    step(out, 1, "probe: CQP, HMC, CCQ, CEQ, AEQ, work scheduler");
    let dev = Device::<H, B>::probe(bar, lan, Profile::SMALL)?;
    let _ = writeln!(out, "        {} bytes of DMA held", dev.footprint().current_bytes);

    step(out, 2, "a PD, a CQ and an RC QP");
    let pd = dev.alloc_pd()?;
    let mut cq = dev.create_cq(64)?;
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 16,
        max_send_sge: 4,
        max_recv_sge: 1,
        ..QpCap::default()
    };
    let mut qp = dev.create_qp(&pd, &mut QpInitAttr { send_cq: &cq, recv_cq: &cq, cap })?;

    step(out, 3, "register the DMA pool as one MR of 2 MiB pages (the local lkey)");
    let mut huge = [0u64; POOL_HUGE_PAGES];
    for (i, p) in huge.iter_mut().enumerate() {
        *p = pool_base + ((i as u64) << 21);
    }
    // SAFETY: the pool is a static region that lives for the whole program
    // and holds only buffers the driver and this flow hand to the device.
    let pool_mr = unsafe {
        dev.reg_mr(
            &pd,
            &MrDesc {
                iova: pool_base,
                length: POOL_BYTES as u64,
                page_size: PageSize::Size2M,
                pages: &huge,
                zero_based: false,
                access: Access::LOCAL_WRITE,
            },
        )
    }?;
    let lkey = pool_mr.lkey();
    let buf = Dma::<H>::new(4, BufferDirection::Both)?;

    step(out, 4, "connect to the peer: INIT -> RTR -> RTS");
    qp.modify(&QpAttr::new(QpState::Init))?;
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.dest_qp = peer.qpn;
    rtr.av = Some(AddressVector {
        dest_mac: peer.mac,
        dest_ip: IpAddr::V4(peer.ip),
        src_ip: IpAddr::V4(my_ip),
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        vlan: None,
    });
    qp.modify(&rtr)?;
    qp.modify(&QpAttr::new(QpState::Rts))?;

    step(out, 5, "RDMA WRITE 4 KiB into the peer's buffer");
    for i in 0..4096 {
        let _ = buf.write_bytes(i, &[i as u8]);
    }
    let sge = [Sge { addr: buf.paddr(), length: 4096, lkey }];
    let write = WrOpcode::RdmaWrite { remote_addr: peer.addr, rkey: peer.rkey };
    qp.post_send(&[SendWr { wr_id: 1, opcode: write, flags: SendFlags::SIGNALED, sg_list: &sge }])?;
    wait(&mut cq, 1)?;

    step(out, 6, "SEND a 64-byte message into the receive the peer posted");
    let _ = buf.write_bytes(4096, b"hello from the firmware");
    let sge = [Sge { addr: buf.paddr() + 4096, length: 64, lkey }];
    let send =
        SendWr { wr_id: 2, opcode: WrOpcode::Send, flags: SendFlags::SIGNALED, sg_list: &sge };
    qp.post_send(&[send])?;
    wait(&mut cq, 2)?;

    step(out, 7, "rdma_rw: READ 8 KiB of the peer's buffer back through SGEs");
    let attrs = DeviceAttrs::e810_roce(13, 4096, lkey);
    let rwqp = RwQp::new(attrs, false, qp.cap().max_send_sge);
    let mut mrs: MrPool<0, 0> = MrPool::new();
    let len = 8192.min(peer.len) as usize;
    let mut sg = [SgEntry::new(NonNull::slice_from_raw_parts(buf.vaddr(), len))];
    let mut ctx: RwCtx<4, 4> = RwCtx::new();
    // SAFETY: `buf` is neither moved nor freed (nor written by us) until
    // `destroy` below, which runs after the READ completed.
    let wrs = unsafe {
        ctx.init::<H, 0, 0>(
            &rwqp,
            &mut mrs,
            &mut sg,
            0,
            peer.addr,
            peer.rkey,
            Direction::FromDevice,
        )
    }?;
    ctx.post(&mut qp, &mut mrs, 3, &[])?;
    let done = wait(&mut cq, 3);
    // SAFETY: the READ completed (or the QP is in error and flushed it), so
    // the device is done with `buf`.
    unsafe { ctx.destroy::<H, 0, 0>(&mut mrs, &mut sg) }?;
    done?;
    let _ = writeln!(out, "        {wrs} RDMA READ WR(s), {len} bytes");

    step(out, 8, "poll: nothing left on the CQ");
    let mut wc = [WorkCompletion::default(); 4];
    let left = cq.poll(&mut wc);
    let _ = writeln!(out, "        {left} completion(s) left");

    step(out, 9, "teardown: MR, QP, CQ, PD (each destroys itself)");
    drop(pool_mr);
    drop(qp);
    drop(cq);
    drop(pd);
    drop(buf);

    step(out, 10, "close the device");
    dev.close()?;
    Ok(())
}
