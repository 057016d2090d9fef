//! The rw layer on real QPs: fast-register MRs from `Device::alloc_mr` in an
//! `MrPool`, a READ chain (FAST_REG + RDMA READ) posted through
//! `rdma_rw_ctx_post`, data checked byte for byte; the key byte moves on
//! every registration and the old key stops working.

mod common;

use common::*;
use irdma::rw::{Direction, RwCtx, SgEntry};
use std::ptr::NonNull;

#[test]
fn rw_read_through_fast_registered_mrs() {
    with_small_device(|_, dev| {
        let (pd, mut cq) = pd_cq(dev, 64);
        let (mut q1, _q2) = loopback_pair(dev, &pd, &cq, 32);

        // The remote buffer, registered for remote read.
        let remote = buf(3);
        let data = fill(&remote, 11);
        let rmr = reg(dev, &pd, 0x9000_0000, 3 * 4096, &pages_of(&remote), false);

        let mut frs: Vec<_> = (0..2).map(|_| dev.alloc_mr(&pd, 256).unwrap()).collect();
        let mrs: Vec<_> = frs.iter().map(|f| f.fr_mr()).collect();
        let mut rw: RwFixture<2, 256> = RwFixture::new(true, q1.cap().max_send_sge, &mrs);

        for round in 0..3u64 {
            let mut local = vec![0u8; 9000];
            let mut sg = [SgEntry::new(NonNull::from(&mut local[..]))];
            let mut ctx: RwCtx<8, 8> = RwCtx::new();
            // SAFETY: `local` outlives the transfer and is destroyed below.
            let n = unsafe {
                rw.init(&mut ctx, &mut sg, (0x9000_0000 + 500, rmr.rkey()), Direction::FromDevice)
            }
            .unwrap();
            assert!(n >= 1);
            // `post` writes the pool's page lists into the FR MRs' PBLEs.
            ctx.post(&mut q1, &mut rw.pool, 100 + round, &[]).unwrap();
            let wc = poll_n(&mut cq, 1);
            assert_eq!(wc.len(), 1, "{wc:?}");
            assert_eq!(
                (wc[0].wr_id, wc[0].status, wc[0].opcode),
                (100 + round, WcStatus::Success, WcOpcode::RdmaRead)
            );
            // SAFETY: the device is done with the transfer.
            unsafe { ctx.destroy::<FakeHal, 2, 256>(&mut rw.pool, &mut sg) }.unwrap();
            assert_eq!(
                &local[..],
                &data[500..9500],
                "round {round}: READ through the fast-registered MR"
            );
        }
        // Keys moved on with each registration (rw bumps the key byte).
        for (i, f) in frs.iter().enumerate() {
            let now = rw.pool.mr(i).unwrap().key;
            assert_eq!(now >> 8, f.key() >> 8, "same index");
        }
        let mut back = Vec::new();
        rw.pool.cleanup(|m| back.push(m)).unwrap();
        for f in frs.iter_mut() {
            f.dereg().unwrap();
        }
    });
}

/// A fast-register MR re-registered under its next key: the old rkey is
/// refused by the model, the new one works.
#[test]
fn fast_reg_key_rotation_rejects_the_stale_rkey() {
    use irdma::aeq::AsyncEventKind;
    use irdma::wr::RegMrWr;
    with_small_device(|_, dev| {
        let (pd, mut cq) = pd_cq(dev, 64);
        // `owner` registers the MR, `peer` accesses it.
        let (mut owner, mut peer) = loopback_pair(dev, &pd, &cq, 16);
        let np = peer.qp_num();

        let target = buf(2);
        let mut fr = dev.alloc_mr(&pd, 16).unwrap();
        let mut rev = pages_of(&target);
        rev.reverse();
        map_pages(&fr, &rev);
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let base = fr_reg(&fr, 0, access, (0x5000_0000, 8192));
        let reg_wr = |id, key| signaled(id, WrOpcode::RegMr(RegMrWr { key, ..base }), &[]);
        let k1 = fr.next_key();
        owner.post_send(&[reg_wr(1, k1)]).unwrap();
        let wc = poll_n(&mut cq, 1);
        assert_eq!((wc[0].status, wc[0].opcode), (WcStatus::Success, WcOpcode::RegMr), "{wc:?}");

        let src = buf(1);
        let data = fill(&src, 21);
        let smr = reg(dev, &pd, src.paddr(), 4096, &pages_of(&src), false);
        let sge = [Sge { addr: src.paddr(), length: 16, lkey: smr.lkey() }];
        let write = |id, rkey| {
            signaled(id, WrOpcode::RdmaWrite { remote_addr: 0x5000_0000 + 4096, rkey }, &sge)
        };
        peer.post_send(&[write(2, k1)]).unwrap();
        let wc = poll_n(&mut cq, 1);
        assert_eq!(wc[0].status, WcStatus::Success);
        assert_eq!(read(&target, 0, 16), data[..16].to_vec(), "IOVA page 1 = physical page 0");

        // Invalidate and re-register under the next key.
        let inv = signaled(3, WrOpcode::LocalInv { inv_key: k1 }, &[]);
        let k2 = fr.next_key();
        assert_ne!(k1, k2);
        assert_eq!(k1 >> 8, k2 >> 8);
        // Each map arms one REG_MR WR (issue #12): map again.
        map_pages(&fr, &rev);
        owner.post_send(&[inv, reg_wr(4, k2)]).unwrap();
        let wc = poll_n(&mut cq, 2);
        assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");

        assert!(target.write_bytes(0, &[0u8; 16]));
        peer.post_send(&[write(5, k1)]).unwrap();
        let mut ev = [NO_EVENT; 4];
        let n = dev.poll_async_events(&mut ev);
        assert!(
            ev[..n].iter().any(|e| e.id == np && e.kind == AsyncEventKind::QpAccessError),
            "{:?}",
            &ev[..n]
        );
        let wc = poll_n(&mut cq, 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (5, WcStatus::RemAccessErr));
        assert_eq!(read(&target, 0, 16), vec![0u8; 16], "stale key wrote nothing");

        // A fresh QP pair: the current key works.
        let (mut a, _b) = loopback_pair(dev, &pd, &cq, 4);
        a.post_send(&[write(6, k2)]).unwrap();
        let wc = poll_n(&mut cq, 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (6, WcStatus::Success));
        assert_eq!(read(&target, 0, 16), data[..16].to_vec());
    });
}

/// Issue #12: a REG_MR WR posted with safe `post_send` must name a live
/// fast-register MR of this device, its own level-1 PBLE run, and no more
/// pages than the last map wrote — otherwise `PostErrorKind::FastReg` at
/// that WR, nothing from it on posted, no doorbell. The legal one works.
#[test]
fn fast_reg_wr_must_name_a_live_fast_register_mr_of_this_device() {
    use irdma::verbs::{PostError, PostErrorKind};
    use irdma::wr::RegMrWr;
    with_small_device(|bar, dev| {
        let (pd, mut cq) = pd_cq(dev, 64);
        let (mut owner, mut peer) = loopback_pair(dev, &pd, &cq, 16);

        let target = buf(4);
        let pages = pages_of(&target);
        let mut fr = dev.alloc_mr(&pd, 4).unwrap();
        let other = dev.alloc_mr(&pd, 4).unwrap();
        let mut dead = dev.alloc_mr(&pd, 4).unwrap();
        for f in [&fr, &other, &dead] {
            map_pages(f, &pages);
        }
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let wr_for = |f: &TFr<'_>, id| {
            signaled(id, WrOpcode::RegMr(fr_reg(f, f.key(), access, (0x5000_0000, 4 * 4096))), &[])
        };
        let with = |w: SendWr<'static>, f: &dyn Fn(&mut RegMrWr)| {
            let WrOpcode::RegMr(mut r) = w.opcode else { unreachable!() };
            f(&mut r);
            SendWr { opcode: WrOpcode::RegMr(r), ..w }
        };
        let dead_wr = wr_for(&dead, 1);
        dead.dereg().unwrap();
        let refused = |w: SendWr<'_>, owner: &mut TQp<'_>, what: &str| {
            let before = bar.with_device(|d| (d.counters().mmio_writes, d.counters().sq_wqes));
            assert_eq!(
                owner.post_send(&[w]),
                Err(PostError { bad_wr: 0, kind: PostErrorKind::FastReg }),
                "{what}"
            );
            let after = bar.with_device(|d| (d.counters().mmio_writes, d.counters().sq_wqes));
            assert_eq!(before, after, "{what}: nothing posted, no doorbell");
        };
        // (a) a deregistered MR's STag (and its stale PBLEs).
        refused(dead_wr, &mut owner, "deregistered MR");
        // (b) this MR's STag with another live MR's PBLE run.
        let o = other.fr_mr().first_pble_index;
        refused(with(wr_for(&fr, 2), &|r| r.first_pble_index = o), &mut owner, "other PBLEs");
        // (c) level 0: the WQE would name a raw address.
        refused(with(wr_for(&fr, 3), &|r| r.pbl_level = 0), &mut owner, "level 0");
        // (d) more pages than mapped (and than the MR has), also by offset.
        refused(with(wr_for(&fr, 4), &|r| r.length = 5 * 4096), &mut owner, "5 pages");
        refused(with(wr_for(&fr, 5), &|r| r.iova += 100), &mut owner, "offset: 5 pages");
        // Other page sizes would map 2 MiB per 4 KiB entry.
        refused(with(wr_for(&fr, 6), &|r| r.page_size = PageSize::Size2M), &mut owner, "2M");
        // An STag index that is no fast-register MR at all.
        refused(
            with(wr_for(&fr, 7), &|r| r.key = r.key.wrapping_add(1000 << 8)),
            &mut owner,
            "idx",
        );

        // In a chain: the WRs before the refused one are posted.
        let bad = with(wr_for(&fr, 8), &|r| r.pbl_level = 2);
        assert_eq!(
            owner.post_send(&[wr_for(&other, 9), bad]),
            Err(PostError { bad_wr: 1, kind: PostErrorKind::FastReg })
        );
        let wc = poll_n(&mut cq, 1);
        assert_eq!((wc.len(), wc[0].wr_id, wc[0].status), (1, 9, WcStatus::Success), "{wc:?}");

        // The legal one, with any key byte: registered, and the key works.
        let key = fr.next_key();
        owner.post_send(&[wr_for(&fr, 10)]).unwrap();
        let wc = poll_n(&mut cq, 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].status, wc[0].opcode),
            (10, WcStatus::Success, WcOpcode::RegMr)
        );
        // The map armed one registration: the same WR again would register
        // whatever the entries hold by then (pages maybe freed since).
        refused(wr_for(&fr, 11), &mut owner, "map used up");
        let src = buf(1);
        let data = fill(&src, 5);
        let smr = reg(dev, &pd, src.paddr(), 4096, &pages_of(&src), false);
        let sge = [Sge { addr: src.paddr(), length: 64, lkey: smr.lkey() }];
        let w = signaled(12, write_op(0x5000_0000 + 3 * 4096, key), &sge);
        peer.post_send(&[w]).unwrap();
        let wc = poll_n(&mut cq, 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (12, WcStatus::Success), "{wc:?}");
        assert_eq!(read(&target, 3 * 4096, 64), data[..64].to_vec());
        drop((smr, other));
        fr.dereg().unwrap();
    });
}

/// A profile with a small PBLE object, so filling it takes a few dozen MRs.
fn few_pbles() -> Profile {
    Profile { pbles: 16 * 1024, ..Profile::SMALL }
}

/// A fast-register MR larger than any level-1 run left: `alloc_mr` falls
/// back to level 2 (root + three leaves: 512 + 512 + 76), `map_pages`
/// writes the leaves, the FAST_REG WQE carries LPBLSIZE 3 and the root
/// (verbs.c: irdma_post_send, IB_WR_REG_MR), and WRITE/READ through the key
/// land on the pages the leaves name — across a leaf boundary, in the last
/// leaf, from an unaligned IOVA — and nowhere else. The admission checks
/// hold for level 2 (level, armed pages, live MR), and dealloc gives every
/// PBLE back. Without level 2, `alloc_mr` fails here (no run of 1,100).
#[test]
fn level2_fast_register_mr_maps_three_leaves() {
    use irdma::verbs::{PostError, PostErrorKind};
    use irdma::wr::RegMrWr;
    leak_checked(|| {
        let (_bar, dev) = one_device(small_fn_config(), few_pbles());
        let (pd, mut cq) = pd_cq(&dev, 64);
        let (mut owner, mut peer) = loopback_pair(&dev, &pd, &cq, 16);
        let src = buf(1);
        let sdata = fill(&src, 17);
        let smr = reg(&dev, &pd, src.paddr(), 4096, &pages_of(&src), false);

        let holes = fragment_pbles(&dev, &pd);
        let before = dev.resource_usage();
        const N: u32 = 1100;
        let mut fr = dev.alloc_mr(&pd, N).expect("level-2 fast-register MR");
        assert_eq!(fr.pbl_level(), 2);
        assert_eq!(fr.fr_mr().pbl_level, 2);
        let taken = before.pble_free - dev.resource_usage().pble_free;
        assert!(taken >= N + 3, "root + leaves: {taken}");

        // IOVA page i → physical page (3 i) mod 8 of `target`.
        let target = buf(8);
        let tp = pages_of(&target);
        let mut mem = fill(&target, 5);
        let pages: Vec<u64> = (0..N as usize).map(|i| tp[(i * 3) % 8]).collect();
        map_pages(&fr, &pages);
        for p in [0u32, 1, 511, 512, 1023, 1024, N - 1] {
            assert_eq!(fr.pble_entry(p), Some(pages[p as usize]), "page {p}");
        }
        assert_eq!(fr.pble_entry(N), None);

        let iova = 0x7000_0300u64; // unaligned: page 0 starts at 0x7000_0000
        let page0 = iova & !0xfff;
        let root = fr.fr_mr().first_pble_index;
        let reg_wr = |id, key, level, length| SendWr {
            wr_id: id,
            opcode: WrOpcode::RegMr(RegMrWr {
                key,
                access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
                iova,
                length,
                page_size: PageSize::Size4K,
                first_pble_index: root,
                pbl_level: level,
            }),
            flags: SendFlags::SIGNALED,
            sg_list: &[],
        };
        let full = u64::from(N) * 4096 - 0x300;
        // Level 1 for a level-2 MR is refused (its root is no page run).
        assert_eq!(
            owner.post_send(&[reg_wr(1, fr.key(), 1, full)]),
            Err(PostError { bad_wr: 0, kind: PostErrorKind::FastReg })
        );
        let key = fr.next_key();
        owner.post_send(&[reg_wr(2, key, 2, full)]).unwrap();
        let wc = poll_n(&mut cq, 1);
        assert_eq!(
            (wc.len(), wc[0].wr_id, wc[0].status, wc[0].opcode),
            (1, 2, WcStatus::Success, WcOpcode::RegMr),
            "{wc:?}"
        );
        // The map armed one registration.
        assert_eq!(
            owner.post_send(&[reg_wr(3, key, 2, full)]),
            Err(PostError { bad_wr: 0, kind: PostErrorKind::FastReg })
        );

        // (IOVA page, offset, length, source offset) of each WRITE.
        let writes =
            [(511u64, 4096 - 128, 256usize, 0usize), (1090, 100, 64, 512), (0, 0x300, 32, 900)];
        for (k, &(p, off, len, so)) in writes.iter().enumerate() {
            let sge = [Sge { addr: src.paddr() + so as u64, length: len as u32, lkey: smr.lkey() }];
            let w = signaled(10 + k as u64, write_op(page0 + p * 4096 + off, key), &sge);
            peer.post_send(&[w]).unwrap();
            let wc = poll_n(&mut cq, 1);
            assert_eq!((wc[0].wr_id, wc[0].status), (10 + k as u64, WcStatus::Success), "{wc:?}");
            // The reference: byte by byte through the page list.
            for i in 0..len {
                let at = p * 4096 + off + i as u64;
                let phys = (at / 4096) as usize * 3 % 8;
                mem[phys * 4096 + (at % 4096) as usize] = sdata[so + i];
            }
        }
        assert!(read(&target, 0, 8 * 4096) == mem, "every byte of the 8 target pages");

        // READ back from the last leaf's last page into the source buffer.
        let rsge = [Sge { addr: src.paddr() + 2048, length: 64, lkey: smr.lkey() }];
        let r = SendWr {
            wr_id: 20,
            opcode: WrOpcode::RdmaRead {
                remote_addr: page0 + u64::from(N - 1) * 4096 + 4000,
                rkey: key,
            },
            flags: SendFlags::SIGNALED,
            sg_list: &rsge,
        };
        peer.post_send(&[r]).unwrap();
        let wc = poll_n(&mut cq, 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (20, WcStatus::Success), "{wc:?}");
        let phys = (N as usize - 1) * 3 % 8;
        assert_eq!(read(&src, 2048, 64), mem[phys * 4096 + 4000..phys * 4096 + 4064].to_vec());

        // More pages than the last map wrote: refused.
        map_pages(&fr, &pages[..600]);
        let k4 = fr.next_key();
        assert_eq!(
            owner.post_send(&[reg_wr(4, k4, 2, 600 * 4096 - 0x300 + 1)]),
            Err(PostError { bad_wr: 0, kind: PostErrorKind::FastReg })
        );

        // Dealloc returns the root and every leaf; the STag index too.
        let stale = reg_wr(5, fr.key(), 2, 4096);
        fr.dereg().unwrap();
        let after = dev.resource_usage();
        assert_eq!((after.pble_free, after.mrs), (before.pble_free, before.mrs), "no leak");
        assert_eq!(
            owner.post_send(&[stale]),
            Err(PostError { bad_wr: 0, kind: PostErrorKind::FastReg }),
            "a deregistered level-2 MR"
        );
        drop(holes);
        drop(smr);
    });
}

/// Every CQP op of a level-2 `alloc_mr` failing once (model
/// `fail_cqp_op`): a typed error with the injected codes, and the root, the
/// leaves and the STag index all back in their pools; the retry works.
#[test]
fn level2_alloc_mr_failing_cqp_op_leaks_no_pble() {
    const MAJ: u16 = 0xF001;
    const MIN: u16 = 0x0042;
    leak_checked(|| {
        let (bar, dev) = one_device(small_fn_config(), few_pbles());
        let pd = dev.alloc_pd().unwrap();
        let holes = fragment_pbles(&dev, &pd);
        let before = dev.resource_usage();
        let mut failed = 0;
        for n in 0..8u32 {
            bar.with_device(|d| d.faults().fail_cqp_op = Some((n, MAJ, MIN)));
            match dev.alloc_mr(&pd, 1100) {
                Err(e) => {
                    assert_eq!(e.hw_codes(), Some((MAJ, MIN)), "op {n}: {e:?}");
                    let now = dev.resource_usage();
                    assert_eq!((now.pble_free, now.mrs), (before.pble_free, before.mrs), "op {n}");
                    failed += 1;
                }
                Ok(mut fr) => {
                    bar.with_device(|d| d.faults().fail_cqp_op = None);
                    assert_eq!(fr.pbl_level(), 2);
                    fr.dereg().unwrap();
                    break;
                }
            }
        }
        assert!(failed >= 1, "ALLOC_STAG at least");
        let now = dev.resource_usage();
        assert_eq!((now.pble_free, now.mrs), (before.pble_free, before.mrs));
        drop(holes);
    });
}
