//! The whole verbs flow on the host, against two devices of the model
//! (`tests/mock-bar`) joined by its wire: `cargo run --example host_loopback`.
//!
//! Probe both devices, then on each a PD, a CQ and an RC QP; register
//! memory; connect the QPs to each other; RDMA WRITE and SEND from A to B;
//! poll; one `rdma_rw` READ (B's memory into a buffer on A, through a
//! fast-register MR); teardown. Every step is printed, every byte checked,
//! and every DMA page is back at the end. On hardware the same code runs
//! with `MmioBar` and your `Hal` in place of `ModelBar` and `FakeHal` (see
//! `examples/firmware/` for the bare-metal version).

use std::error::Error;
use std::ptr::NonNull;

use irdma::prelude::*;
use irdma_testkit::{FakeHal, ModelBar};

type Dev = Device<FakeHal, ModelBar>;

/// One end: its identity on the wire.
#[derive(Clone, Copy)]
struct Node {
    name: &'static str,
    mac: [u8; 6],
    ip: [u8; 4],
}

const A: Node = Node { name: "A", mac: [0x02, 0, 0, 0, 0, 0x0a], ip: [10, 0, 0, 1] };
const B: Node = Node { name: "B", mac: [0x02, 0, 0, 0, 0, 0x0b], ip: [10, 0, 0, 2] };

/// Prints one numbered step.
fn step(n: u32, what: &str) {
    println!("[{n:>2}/12] {what}");
}

/// INIT → RTR (towards `peer`'s QP `peer_qpn`) → RTS.
fn connect(
    qp: &mut Qp<'_, FakeHal, ModelBar>,
    me: Node,
    peer: Node,
    peer_qpn: u32,
) -> Result<(), VerbsError> {
    qp.modify(&QpAttr::new(QpState::Init))?;
    let mut rtr = QpAttr::new(QpState::Rtr);
    rtr.dest_qp = peer_qpn;
    rtr.rq_psn = 1;
    rtr.av = Some(AddressVector {
        dest_mac: peer.mac,
        dest_ip: IpAddr::V4(peer.ip),
        src_ip: IpAddr::V4(me.ip),
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        vlan: None,
    });
    qp.modify(&rtr)?;
    let mut rts = QpAttr::new(QpState::Rts);
    rts.sq_psn = 1;
    qp.modify(&rts)
}

/// Polls `cq` until `n` completions arrived (bounded).
fn poll<'d>(
    cq: &mut Cq<'d, FakeHal, ModelBar>,
    n: usize,
) -> Result<Vec<WorkCompletion>, Box<dyn Error>> {
    let mut out = Vec::new();
    for _ in 0..1000 {
        let mut wc = [WorkCompletion::default(); 8];
        let k = cq.poll(&mut wc);
        out.extend_from_slice(&wc[..k]);
        if out.len() >= n {
            break;
        }
    }
    if out.len() != n || out.iter().any(|w| w.status != WcStatus::Success) {
        return Err(format!("expected {n} successful completions, got {out:?}").into());
    }
    Ok(out)
}

/// Registers `mem` (contiguous DMA pages) VA-based at its bus address.
///
/// # Safety
///
/// `mem` must outlive the returned MR (the MR does not borrow it).
unsafe fn reg<'d>(
    dev: &'d Dev,
    pd: &Pd<'d, FakeHal, ModelBar>,
    mem: &Dma<FakeHal>,
) -> Result<Mr<'d, FakeHal, ModelBar>, VerbsError> {
    let pages: Vec<u64> = (0..mem.pages()).map(|i| mem.paddr() + (i * 4096) as u64).collect();
    // SAFETY: the caller keeps `mem` alive for the MR's lifetime; its pages
    // are a live `FakeHal` allocation.
    unsafe {
        dev.reg_mr(
            pd,
            &MrDesc {
                iova: mem.paddr(),
                length: mem.len() as u64,
                page_size: PageSize::Size4K,
                pages: &pages,
                zero_based: false,
                access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            },
        )
    }
}

fn check(ok: bool, what: &str) -> Result<(), Box<dyn Error>> {
    if ok { Ok(()) } else { Err(format!("check failed: {what}").into()) }
}

/// Step 2's verbs objects on one device.
struct Verbs<'d> {
    pd: Pd<'d, FakeHal, ModelBar>,
    cq: Cq<'d, FakeHal, ModelBar>,
    qp: Qp<'d, FakeHal, ModelBar>,
}

/// Step 3's memory: a source on A, a target and a receive buffer on B, and
/// the bytes the source holds.
struct Memory {
    src: Dma<FakeHal>,
    dst: Dma<FakeHal>,
    data: Vec<u8>,
}

/// Step 3's registrations: `src` on A, `dst` on B.
struct Regions<'d> {
    src: Mr<'d, FakeHal, ModelBar>,
    dst: Mr<'d, FakeHal, ModelBar>,
}

/// Step 9's fast-register MR and the pool that lent it, released in step 10.
struct ReadLeftovers<'d> {
    frs: [FastRegMr<'d, FakeHal, ModelBar>; 1],
    pool: MrPool<1, 16>,
}

/// Step 1: two model devices joined by the wire, probed.
fn bring_up() -> Result<(Dev, Dev), Box<dyn Error>> {
    // A model function with small OOISC maxima keeps the HMC footprint small.
    let mut cfg = mock_bar::Config::default();
    cfg.fpm.max_cnt[19] = 4096;
    cfg.fpm.max_cnt[20] = 4096;
    let bar_a = ModelBar::standalone(cfg.clone());
    let bar_b = bar_a.add_peer(cfg);

    step(1, "probe devices A and B (CQP, HMC, CCQ, CEQ, AEQ, work scheduler)");
    let lan = |n: Node| LanInfo::single_tc(0, 6, n.mac, 1500);
    let da: Dev = Device::probe(bar_a, lan(A), Profile::SMALL)?;
    let db: Dev = Device::probe(bar_b, lan(B), Profile::SMALL)?;
    for (n, d) in [(A, &da), (B, &db)] {
        let fp = d.footprint();
        println!(
            "        {}: firmware {:?}, {} KiB of DMA",
            n.name,
            d.fw_version(),
            fp.current_bytes / 1024
        );
    }
    Ok((da, db))
}

/// Step 2: a PD, a CQ and an RC QP on each device.
fn resources<'d>(da: &'d Dev, db: &'d Dev) -> Result<(Verbs<'d>, Verbs<'d>), Box<dyn Error>> {
    step(2, "a PD, a CQ and an RC QP on each device");
    let (pa, pb) = (da.alloc_pd()?, db.alloc_pd()?);
    let (ca, cb) = (da.create_cq(64)?, db.create_cq(64)?);
    let cap = QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 2,
        max_recv_sge: 2,
        ..QpCap::default()
    };
    let qa = da.create_qp(&pa, &mut QpInitAttr { send_cq: &ca, recv_cq: &ca, cap })?;
    let qb = db.create_qp(&pb, &mut QpInitAttr { send_cq: &cb, recv_cq: &cb, cap })?;
    println!("        QP {} on A, QP {} on B", qa.qp_num(), qb.qp_num());
    Ok((Verbs { pd: pa, cq: ca, qp: qa }, Verbs { pd: pb, cq: cb, qp: qb }))
}

/// Step 3, first half: the DMA memory, the source filled (`main` registers it).
fn memory() -> Result<Memory, Box<dyn Error>> {
    step(3, "register memory: a source on A, a target and a receive buffer on B");
    let src = Dma::<FakeHal>::new(2, BufferDirection::Both)?;
    let dst = Dma::<FakeHal>::new(2, BufferDirection::Both)?;
    let data: Vec<u8> = (0..src.len()).map(|i| (i * 7 + 3) as u8).collect();
    check(src.write_bytes(0, &data), "fill the source")?;
    Ok(Memory { src, dst, data })
}

/// Step 4: INIT -> RTR -> RTS, each QP towards the other.
fn connect_both(a: &mut Verbs<'_>, b: &mut Verbs<'_>) -> Result<(), Box<dyn Error>> {
    step(4, "connect: INIT -> RTR -> RTS, each QP towards the other");
    let (na, nb) = (a.qp.qp_num(), b.qp.qp_num());
    connect(&mut a.qp, A, B, nb)?;
    connect(&mut b.qp, B, A, na)?;
    Ok(())
}

/// Steps 5 and 6: RDMA WRITE from A into B's memory, completed and checked.
fn write(a: &mut Verbs<'_>, mem: &Memory, mrs: &Regions<'_>) -> Result<(), Box<dyn Error>> {
    step(5, "RDMA WRITE 6000 bytes from A into B's memory");
    let sge = [Sge { addr: mem.src.paddr(), length: 6000, lkey: mrs.src.lkey() }];
    let write = WrOpcode::RdmaWrite { remote_addr: mem.dst.paddr(), rkey: mrs.dst.rkey() };
    a.qp.post_send(&[SendWr {
        wr_id: 1,
        opcode: write,
        flags: SendFlags::SIGNALED,
        sg_list: &sge,
    }])?;

    step(6, "poll A's CQ: the WRITE completes");
    let wc = poll(&mut a.cq, 1)?;
    check(wc[0].wr_id == 1 && wc[0].opcode == WcOpcode::RdmaWrite, "WRITE completion")?;
    let mut got = vec![0u8; 6000];
    check(
        mem.dst.read_bytes(0, &mut got) && got == mem.data[..6000],
        "WRITE landed byte for byte",
    )?;
    Ok(())
}

/// Steps 7 and 8: SEND from A into a receive B posted, both completed and
/// the bytes checked.
fn send(
    a: &mut Verbs<'_>,
    b: &mut Verbs<'_>,
    mem: &Memory,
    mrs: &Regions<'_>,
) -> Result<(), Box<dyn Error>> {
    step(7, "SEND 100 bytes from A into a receive B posted");
    let rsge = [Sge { addr: mem.dst.paddr() + 4096, length: 4096, lkey: mrs.dst.lkey() }];
    b.qp.post_recv(&[RecvWr { wr_id: 20, sg_list: &rsge }])?;
    let sge = [Sge { addr: mem.src.paddr() + 4096, length: 100, lkey: mrs.src.lkey() }];
    a.qp.post_send(&[SendWr {
        wr_id: 2,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        sg_list: &sge,
    }])?;

    step(8, "poll both CQs: the SEND on A, the receive on B");
    let wa = poll(&mut a.cq, 1)?;
    let wb = poll(&mut b.cq, 1)?;
    check(wa[0].wr_id == 2 && wb[0].wr_id == 20 && wb[0].byte_len == 100, "SEND/RECV completions")?;
    let mut got = vec![0u8; 100];
    check(
        mem.dst.read_bytes(4096, &mut got) && got == mem.data[4096..4196],
        "SEND landed byte for byte",
    )?;
    Ok(())
}

/// Step 9: one `rdma_rw` READ of B's memory into a buffer on A, through a
/// fast-register MR; returns the MR and its pool for step 10.
fn rdma_rw_read<'d>(
    da: &'d Dev,
    a: &mut Verbs<'d>,
    mem: &Memory,
    mrs: &Regions<'_>,
) -> Result<ReadLeftovers<'d>, Box<dyn Error>> {
    step(9, "rdma_rw: READ 5000 bytes of B's memory into a buffer on A (fast-register MR path)");
    let frs = [da.alloc_mr(&a.pd, 16)?];
    let attrs = DeviceAttrs::e810_roce(13, 4096, 0);
    let rwqp = RwQp::new(attrs, true, a.qp.cap().max_send_sge);
    let mut pool: MrPool<1, 16> = MrPool::new();
    pool.init(&attrs, true, 1, &[frs[0].fr_mr()])?;
    let mut local = vec![0u8; 5000];
    let mut sg = [SgEntry::new(NonNull::from(&mut local[..]))];
    let mut ctx: RwCtx<4, 4> = RwCtx::new();
    // SAFETY: `local` is neither moved nor freed until `destroy` below,
    // which runs after the READ completed.
    let wrs = unsafe {
        ctx.init::<FakeHal, 1, 16>(
            &rwqp,
            &mut pool,
            &mut sg,
            0,
            mem.dst.paddr(),
            mrs.dst.rkey(),
            Direction::FromDevice,
        )
    }?;
    // ib_map_mr_sg: the pages the pool collected go into the MR's PBL.
    for i in 0..pool.len() {
        if !pool.pages(i).is_empty() {
            // SAFETY: the pages are `dst`'s, which outlives the fast-register
            // MR's use (the context is destroyed and the MR deregistered
            // in step 10, before `dst` is dropped).
            unsafe { frs[0].map_pages(pool.pages(i)) }?;
        }
    }
    ctx.post(&mut a.qp, &mut pool, 3, &[])?;
    let wc = poll(&mut a.cq, 1)?;
    // SAFETY: the device is done with the transfer (its completion is in).
    unsafe { ctx.destroy::<FakeHal, 1, 16>(&mut pool, &mut sg) }?;
    check(wc[0].wr_id == 3 && wc[0].opcode == WcOpcode::RdmaRead, "READ completion")?;
    check(local == mem.data[..5000], "rdma_rw READ byte for byte")?;
    println!("        the context counted {wrs} WR(s); 5000 bytes checked");
    Ok(ReadLeftovers { frs, pool })
}

/// Step 10: the verbs objects destroyed (MRs, QPs, CQs, PDs), in that order.
fn tear_down(
    read: ReadLeftovers<'_>,
    mrs: Regions<'_>,
    a: Verbs<'_>,
    b: Verbs<'_>,
) -> Result<(), Box<dyn Error>> {
    step(10, "destroy the verbs objects (MRs, QPs, CQs, PDs)");
    let ReadLeftovers { mut frs, mut pool } = read;
    pool.cleanup(|_| {})?;
    frs[0].dereg()?;
    let (Verbs { pd: pa, cq: ca, qp: qa }, Verbs { pd: pb, cq: cb, qp: qb }) = (a, b);
    drop((frs, mrs.src, mrs.dst, qa, qb, ca, cb, pa, pb));
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let base = FakeHal::live_pages();
    let (da, db) = bring_up()?;
    let (mut a, mut b) = resources(&da, &db)?;
    let mem = memory()?;
    // SAFETY: `mem` is declared before the MRs, and the MRs are dropped in
    // `tear_down`, before `mem` is.
    let mrs =
        unsafe { Regions { src: reg(&da, &a.pd, &mem.src)?, dst: reg(&db, &b.pd, &mem.dst)? } };
    println!("        A lkey {:#x}, B rkey {:#x}", mrs.src.lkey(), mrs.dst.rkey());
    connect_both(&mut a, &mut b)?;
    write(&mut a, &mem, &mrs)?;
    send(&mut a, &mut b, &mem, &mrs)?;
    let read = rdma_rw_read(&da, &mut a, &mem, &mrs)?;
    tear_down(read, mrs, a, b)?;

    step(11, "close both devices (work scheduler, AEQ, CEQ, CCQ, HMC, CQP)");
    da.close()?;
    db.close()?;
    drop(mem);

    step(12, "every DMA page is back");
    let live = FakeHal::live_pages();
    check(live == base, "DMA pages balanced")?;
    println!("host_loopback: all 12 steps passed");
    Ok(())
}
