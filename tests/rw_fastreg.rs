//! The rw layer on real QPs: fast-register MRs from `Device::alloc_mr` in an
//! `MrPool`, a READ chain (FAST_REG + RDMA READ) posted through
//! `rdma_rw_ctx_post`, data checked byte for byte; the key byte moves on
//! every registration and the old key stops working.

mod common;

use common::*;
use irdma::rw::{DeviceAttrs, Direction, MrPool, RwCtx, RwQp, SgEntry};
use std::ptr::NonNull;

#[test]
fn rw_read_through_fast_registered_mrs() {
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

        // The remote buffer, registered for remote read.
        let remote = buf(3);
        let data = fill(&remote, 11);
        let rmr = reg(&dev, &pd, 0x9000_0000, 3 * 4096, &pages_of(&remote), false);

        let mut frs: Vec<_> = (0..2).map(|_| dev.alloc_mr(&pd, 256).unwrap()).collect();
        let attrs = DeviceAttrs::e810_roce(13, 4096, 0);
        let rwqp = RwQp::new(attrs, true, q1.cap().max_send_sge);
        let mut pool: MrPool<2, 256> = MrPool::new();
        let mrs: Vec<_> = frs.iter().map(|f| f.fr_mr()).collect();
        assert_eq!(pool.init(&attrs, true, 2, &mrs), Ok(2));

        for round in 0..3u64 {
            let mut local = vec![0u8; 9000];
            let mut sg = [SgEntry::new(NonNull::from(&mut local[..]))];
            let mut ctx: RwCtx<8, 8> = RwCtx::new();
            // SAFETY: `local` outlives the transfer and is destroyed below.
            let n = unsafe {
                ctx.init::<FakeHal, 2, 256>(
                    &rwqp,
                    &mut pool,
                    &mut sg,
                    0,
                    0x9000_0000 + 500,
                    rmr.rkey(),
                    Direction::FromDevice,
                )
            }
            .unwrap();
            assert!(n >= 1);
            // ib_map_mr_sg's PBLE writes: the pages the pool collected go
            // into the FR MR's PBLEs.
            for i in 0..pool.len() {
                let pages = pool.pages(i);
                if pages.is_empty() {
                    continue;
                }
                let mr = pool.mr(i).unwrap();
                let fr =
                    frs.iter().find(|f| f.fr_mr().first_pble_index == mr.first_pble_index).unwrap();
                fr.map_pages(pages).unwrap();
            }
            ctx.post(&mut q1, &mut pool, 100 + round, &[]).unwrap();
            let wc = poll_n(&mut cq, &mut [&mut q1, &mut q2], 1);
            assert_eq!(wc.len(), 1, "{wc:?}");
            assert_eq!(
                (wc[0].wr_id, wc[0].status, wc[0].opcode),
                (100 + round, WcStatus::Success, WcOpcode::RdmaRead)
            );
            // SAFETY: the device is done with the transfer.
            unsafe { ctx.destroy::<FakeHal, 2, 256>(&mut pool, &mut sg) }.unwrap();
            assert_eq!(
                &local[..],
                &data[500..9500],
                "round {round}: READ through the fast-registered MR"
            );
        }
        // Keys moved on with each registration (rw bumps the key byte).
        for (i, f) in frs.iter().enumerate() {
            let now = pool.mr(i).unwrap().key;
            assert_eq!(now >> 8, f.key() >> 8, "same index");
        }
        let mut back = Vec::new();
        pool.cleanup(|m| back.push(m)).unwrap();
        for f in frs.iter_mut() {
            f.dereg().unwrap();
        }
    }
    assert_eq!(FakeHal::live_pages(), base);
}
