//! `rdma_rw` through fast-register MRs with nothing done by hand: the page
//! lists the pool collects reach the MRs' PBLEs when the context is posted
//! (`RwCtx::post` → `PostSend::map_mr_pages`, what `ib_map_mr_sg` does in
//! Linux), and a transfer of one page registers through the MR's level-1
//! PBL like any other (spec data-path §FAST REGISTER: LPBLSIZE 1 or 3; a
//! level-0 FAST_REG names no page). Issue #19: without the fix the QP went
//! fatal (AE 0x700, zeroed PBLEs) and a single-page transfer failed with
//! AE 0x20A (LPBLSIZE 0).
//!
//! Every case: a WRITE (local → remote) and a READ back (remote → local),
//! `force_mr`, loopback on one model device, data checked byte for byte.
//! Fast-register MRs are level 1 (`alloc_mr` takes a level-1 run); one
//! page and many pages, page-aligned and unaligned starts, up to the MR's
//! whole capacity.

mod common;

use common::*;
use irdma::rw::{DeviceAttrs, Direction, MrPool, RwCtx, RwQp, SgEntry};
use std::ptr::NonNull;

const MR_PAGES: u32 = 256;
const REMOTE_IOVA: u64 = 0x9000_0000;

/// (page offset of the local buffer, length).
const CASES: &[(usize, usize)] = &[
    (0, 1),
    (100, 200),
    (0, 4096),
    (4000, 200),
    (0, 6000),
    (123, 20 * 4096 + 7),
    (4095, 3 * 4096),
    (0, 256 * 4096),
];

#[test]
fn rw_force_mr_without_manual_pble_writes_every_size_and_start() {
    let _g = lock();
    let base = FakeHal::live_pages();
    let bar = ModelBar::standalone(small_fn_config());
    {
        let dev = probe_as(&bar, A, Profile::SMALL);
        let pd = dev.alloc_pd().unwrap();
        let mut cq = dev.create_cq(64).unwrap();
        let mut q1 = create_qp(&dev, &pd, &cq, 32);
        let mut q2 = create_qp(&dev, &pd, &cq, 32);
        let (n1, n2) = (q1.qp_num(), q2.qp_num());
        connect(&mut q1, A, A, n2).unwrap();
        connect(&mut q2, A, A, n1).unwrap();

        let rpages = 258;
        let remote = buf(rpages);
        let rmr = reg(&dev, &pd, REMOTE_IOVA, (rpages * 4096) as u64, &pages_of(&remote), false);

        let mut frs: Vec<_> = (0..2).map(|_| dev.alloc_mr(&pd, MR_PAGES).unwrap()).collect();
        let attrs = DeviceAttrs::e810_roce(13, 4096, 0);
        let rwqp = RwQp::new(attrs, true, q1.cap().max_send_sge);
        let mut pool: MrPool<2, 256> = MrPool::new();
        let mrs: Vec<_> = frs.iter().map(|f| f.fr_mr()).collect();
        assert_eq!(pool.init(&attrs, true, 2, &mrs), Ok(2));

        let mut wr_id = 0u64;
        for (case, &(off, len)) in CASES.iter().enumerate() {
            // A page-aligned window in a heap buffer, the data at `off`.
            let mut backing = vec![0u8; len + off + 2 * 4096];
            let align = (4096 - (backing.as_ptr() as usize % 4096)) % 4096;
            let start = align + off;
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + case * 13 + 1) as u8).collect();
            backing[start..start + len].copy_from_slice(&data);
            for dir in [Direction::ToDevice, Direction::FromDevice] {
                if dir == Direction::FromDevice {
                    // Read back what the WRITE put there into a cleared buffer.
                    backing[start..start + len].fill(0);
                } else {
                    assert!(remote.write_bytes(0, &vec![0u8; rpages * 4096]));
                }
                let mut sg = [SgEntry::new(NonNull::from(&mut backing[start..start + len]))];
                let mut ctx: RwCtx<8, 8> = RwCtx::new();
                // SAFETY: `backing` outlives the transfer and is destroyed below.
                let n = unsafe {
                    ctx.init::<FakeHal, 2, 256>(
                        &rwqp,
                        &mut pool,
                        &mut sg,
                        0,
                        REMOTE_IOVA + 64,
                        rmr.rkey(),
                        dir,
                    )
                }
                .unwrap_or_else(|e| panic!("case {case} ({off}, {len}) {dir:?}: init {e:?}"));
                assert!(n >= 2, "REG_MR + RDMA at least");
                wr_id += 1;
                ctx.post(&mut q1, &mut pool, wr_id, &[]).unwrap();
                let wc = poll_n(&mut cq, 1);
                assert_eq!(wc.len(), 1, "case {case} ({off}, {len}) {dir:?}: {wc:?}");
                assert_eq!(
                    (wc[0].wr_id, wc[0].status),
                    (wr_id, WcStatus::Success),
                    "case {case} ({off}, {len}) {dir:?}: {wc:?}"
                );
                // SAFETY: the device is done with the transfer.
                unsafe { ctx.destroy::<FakeHal, 2, 256>(&mut pool, &mut sg) }.unwrap();
                if dir == Direction::ToDevice {
                    assert_eq!(read(&remote, 64, len), data, "case {case}: WRITE landed");
                } else {
                    assert_eq!(&backing[start..start + len], &data[..], "case {case}: READ back");
                }
            }
        }
        pool.cleanup(|_| {}).unwrap();
        for f in frs.iter_mut() {
            f.dereg().unwrap();
        }
    }
    assert_eq!(FakeHal::live_pages(), base);
}
