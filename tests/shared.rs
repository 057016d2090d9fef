//! One device shared by several threads: every control call serialises on
//! the CQP lock, the data path takes none.

mod common;

use common::*;

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn threads_share_one_device() {
    assert_send_sync::<Dev>();
    let _g = lock();
    let (_bar, dev) = one_device(small_fn_config(), Profile::SMALL);
    let usage = dev.resource_usage();
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let dev = &dev;
            s.spawn(move || {
                let b = buf(1);
                for i in 0..50u32 {
                    let pd = dev.alloc_pd().unwrap();
                    let mut cq = dev.create_cq(8).unwrap();
                    let mut q1 = create_qp(dev, &pd, &cq, 4);
                    let mut q2 = create_qp(dev, &pd, &cq, 4);
                    connect_both(&mut q1, A, &mut q2, A);
                    let mr = reg(dev, &pd, b.paddr(), 4096, &pages_of(&b), false);
                    let v = [t, i as u8, 0xaa, 0x55];
                    assert!(b.write_bytes(0, &v));
                    let sge = [Sge { addr: b.paddr(), length: 4, lkey: mr.lkey() }];
                    let w = SendWr {
                        wr_id: u64::from(i),
                        opcode: WrOpcode::RdmaWrite {
                            remote_addr: b.paddr() + 64,
                            rkey: mr.rkey(),
                        },
                        flags: SendFlags::SIGNALED,
                        sg_list: &sge,
                    };
                    q1.post_send(&[w]).unwrap();
                    let wc = poll_n(&mut cq, 1);
                    assert_eq!((wc[0].wr_id, wc[0].status), (u64::from(i), WcStatus::Success));
                    assert_eq!(read(&b, 64, 4), v.to_vec());
                }
            });
        }
    });
    assert_eq!(dev.resource_usage(), usage);
    dev.close().unwrap();
}
