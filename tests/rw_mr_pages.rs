//! `rdma_rw` through fast-register MRs with nothing done by hand: the page
//! lists the pool collects reach the MRs' PBLEs when the context is posted
//! (`RwCtx::post` → `PostSend::map_mr_pages`, what `ib_map_mr_sg` does in
//! Linux), and a transfer of one page registers through the MR's PBL like
//! any other (spec data-path §FAST REGISTER: LPBLSIZE 1 or 3; a level-0
//! FAST_REG names no page). Issue #19: without the fix the QP went fatal
//! (AE 0x700, zeroed PBLEs) and a single-page transfer failed with AE 0x20A
//! (LPBLSIZE 0).
//!
//! Every case: a WRITE (local → remote) and a READ back (remote → local),
//! `force_mr`, loopback on one model device, data checked byte for byte
//! over the whole remote buffer. One page and many pages, page-aligned and
//! unaligned starts, up to the MR's whole capacity (256 pages: rw's
//! `pages_per_mr`, spec data-path §7.1), for every PBL level on both sides:
//! the fast-register MRs level 1, or level 2 when the PBLE pool has no
//! level-1 run left that fits (`alloc_mr` falls back as `irdma_get_pble`
//! does); the remote MR level 0 (contiguous), 1 (pages permuted) or 2
//! (600 permuted pages in the fragmented pool).

mod common;

use common::*;
use irdma::rw::{Direction, RwCtx, SgEntry};
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

/// Every size and start through fast-register MRs of PBL level `fr_level`
/// (1 or 2) against a remote MR of level `remote_level` (0, 1 or 2).
fn every_size_and_start(fr_level: u8, remote_level: u8) {
    let _g = lock();
    let base = FakeHal::live_pages();
    let bar = ModelBar::standalone(small_fn_config());
    {
        let level2 = fr_level == 2 || remote_level == 2;
        let profile =
            if level2 { Profile { pbles: 16 * 1024, ..Profile::SMALL } } else { Profile::SMALL };
        let dev = probe_as(&bar, A, profile);
        let (pd, mut cq) = pd_cq(&dev, 64);
        let (mut q1, _q2) = loopback_pair(&dev, &pd, &cq, 32);
        let holes = if level2 { fragment_pbles(&dev, &pd) } else { Vec::new() };
        let before = dev.resource_usage();

        // The remote MR: IOVA page i is physical page perm[i] of `remote`.
        let rpages = if remote_level == 2 { 600 } else { 258 };
        let remote = buf(rpages);
        let perm: Vec<usize> = (0..rpages)
            .map(|i| if remote_level == 0 { i } else { i ^ 1 }) // swap pairs
            .collect();
        let rp = pages_of(&remote);
        let rlist: Vec<u64> = perm.iter().map(|&p| rp[p]).collect();
        let rmr = reg(&dev, &pd, REMOTE_IOVA, (rpages * 4096) as u64, &rlist, false);
        assert_eq!(rmr.pbl_level(), remote_level, "remote MR level");
        // The remote MR's whole IOVA space, page by page.
        let image = || -> Vec<u8> {
            let all = read(&remote, 0, rpages * 4096);
            perm.iter().flat_map(|&p| all[p * 4096..(p + 1) * 4096].iter().copied()).collect()
        };

        let fr_pages = if fr_level == 2 { 600 } else { MR_PAGES };
        let mut frs: Vec<_> = (0..2).map(|_| dev.alloc_mr(&pd, fr_pages).unwrap()).collect();
        for f in &frs {
            assert_eq!((f.pbl_level(), f.fr_mr().pbl_level), (fr_level, fr_level));
        }
        let mrs: Vec<_> = frs.iter().map(|f| f.fr_mr()).collect();
        let mut rw: RwFixture<2, 256> = RwFixture::new(true, q1.cap().max_send_sge, &mrs);

        let mut wr_id = 0u64;
        for (case, &(off, len)) in CASES.iter().enumerate() {
            let what = format!("FR level {fr_level}, remote level {remote_level}, case {case}");
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
                let n = unsafe { rw.init(&mut ctx, &mut sg, (REMOTE_IOVA + 64, rmr.rkey()), dir) }
                    .unwrap_or_else(|e| panic!("{what} ({off}, {len}) {dir:?}: init {e:?}"));
                assert!(n >= 2, "REG_MR + RDMA at least");
                wr_id += 1;
                ctx.post(&mut q1, &mut rw.pool, wr_id, &[]).unwrap();
                let wc = poll_n(&mut cq, 1);
                assert_eq!(wc.len(), 1, "{what} ({off}, {len}) {dir:?}: {wc:?}");
                assert_eq!(
                    (wc[0].wr_id, wc[0].status),
                    (wr_id, WcStatus::Success),
                    "{what} ({off}, {len}) {dir:?}: {wc:?}"
                );
                // SAFETY: the device is done with the transfer.
                unsafe { ctx.destroy::<FakeHal, 2, 256>(&mut rw.pool, &mut sg) }.unwrap();
                if dir == Direction::ToDevice {
                    let img = image();
                    assert!(img[64..64 + len] == data[..], "{what}: WRITE landed");
                    assert!(
                        img[..64].iter().chain(&img[64 + len..]).all(|&b| b == 0),
                        "{what}: nothing else of the remote MR written"
                    );
                } else {
                    assert!(backing[start..start + len] == data[..], "{what}: READ back");
                }
            }
        }
        rw.pool.cleanup(|_| {}).unwrap();
        for f in frs.iter_mut() {
            f.dereg().unwrap();
        }
        drop(rmr);
        let after = dev.resource_usage();
        assert_eq!((after.pble_free, after.mrs), (before.pble_free, before.mrs), "no leak");
        drop(holes);
    }
    assert_eq!(FakeHal::live_pages(), base);
}

#[test]
fn rw_force_mr_without_manual_pble_writes_every_size_and_start() {
    every_size_and_start(1, 0);
}

#[test]
fn rw_force_mr_level1_mrs_to_level1_and_level2_remote_mrs() {
    every_size_and_start(1, 1);
    every_size_and_start(1, 2);
}

/// Fails without level-2 fast-register MRs: `alloc_mr(600)` found no
/// level-1 run and returned an error.
#[test]
fn rw_force_mr_through_level2_fast_register_mrs() {
    for remote in [0, 1, 2] {
        every_size_and_start(2, remote);
    }
}

/// The rw path's map checks the MR it is given against the device's
/// record: a level-2 MR handed to the pool as level 1 (its root taken for
/// a page run) is refused at post, nothing posted and nothing written: the
/// root still routes a proper level-2 registration afterwards.
#[test]
fn rw_refuses_a_level2_mr_passed_as_level1() {
    use irdma::rw::{RwError, RwPostError};
    use irdma::wr::RegMrWr;
    leak_checked(|| {
        let (_bar, dev) =
            one_device(small_fn_config(), Profile { pbles: 16 * 1024, ..Profile::SMALL });
        let (pd, mut cq) = pd_cq(&dev, 64);
        let (mut q1, mut q2) = loopback_pair(&dev, &pd, &cq, 32);
        let holes = fragment_pbles(&dev, &pd);
        let remote = buf(4);
        let rdata = fill(&remote, 3);
        let rmr = reg(&dev, &pd, REMOTE_IOVA, 4 * 4096, &pages_of(&remote), false);
        let mut fr = dev.alloc_mr(&pd, 600).unwrap();
        assert_eq!(fr.pbl_level(), 2);
        let forged = irdma::rw::FrMr { pbl_level: 1, ..fr.fr_mr() };
        let mut rw: RwFixture<1, 256> = RwFixture::new(true, q1.cap().max_send_sge, &[forged]);
        let mut local = vec![7u8; 3 * 4096];
        let mut sg = [SgEntry::new(NonNull::from(&mut local[..]))];
        let mut ctx: RwCtx<8, 8> = RwCtx::new();
        // SAFETY: `local` outlives the context, destroyed below.
        unsafe { rw.init(&mut ctx, &mut sg, (REMOTE_IOVA, rmr.rkey()), Direction::ToDevice) }
            .unwrap();
        assert!(
            matches!(
                ctx.post(&mut q1, &mut rw.pool, 1, &[]),
                Err(RwPostError::Rw(RwError::MapFailed))
            ),
            "forged level refused"
        );
        assert!(poll_n(&mut cq, 1).is_empty(), "nothing posted");
        assert_eq!(read(&remote, 0, 4 * 4096), rdata, "nothing written");
        // SAFETY: nothing was posted.
        unsafe { ctx.destroy::<FakeHal, 1, 256>(&mut rw.pool, &mut sg) }.unwrap();
        rw.pool.cleanup(|_| {}).unwrap();

        // The root PBLEs are intact: a level-2 registration of the same MR
        // reaches page 599 (leaf 1) through them.
        let target = buf(2);
        let tp = pages_of(&target);
        let pages: Vec<u64> = (0..600).map(|i| tp[i % 2]).collect();
        map_pages(&fr, &pages);
        let key = fr.next_key();
        let reg_wr = SendWr {
            wr_id: 2,
            opcode: WrOpcode::RegMr(RegMrWr {
                key,
                access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                iova: 0x6000_0000,
                length: 600 * 4096,
                page_size: PageSize::Size4K,
                first_pble_index: fr.fr_mr().first_pble_index,
                pbl_level: 2,
            }),
            flags: SendFlags::SIGNALED,
            sg_list: &[],
        };
        q1.post_send(&[reg_wr]).unwrap();
        let sge = [Sge { addr: REMOTE_IOVA, length: 32, lkey: rmr.lkey() }];
        let w = signaled(3, write_op(0x6000_0000 + 599 * 4096 + 8, key), &sge);
        q2.post_send(&[w]).unwrap();
        let wc = poll_n(&mut cq, 2);
        assert!(wc.len() == 2 && wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
        assert_eq!(read(&target, 4096 + 8, 32), rdata[..32].to_vec(), "page 599 = odd page");
        assert_eq!(read(&target, 8, 32), vec![0u8; 32]);
        fr.dereg().unwrap();
        drop((rmr, holes));
    });
}
