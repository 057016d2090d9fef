//! End to end, every RC operation between two model devices on one fabric:
//! RDMA WRITE (+IMM), READ, SEND (+IMM, +INV), inline WRITE/SEND, LOCAL_INV,
//! fast-register (REG_MR WR), multi-SGE. Data is compared byte for byte
//! with what was sent; completions are checked field by field.

mod common;
mod e2e_common;

use e2e_common::*;
use irdma::uk::{RqError, SqError};
use irdma::verbs::{PostError, PostErrorKind};

/// Sizes every test QP gets: 13 SGEs both ways, 101 inline bytes.
fn full_cap(n: u32) -> QpCap {
    QpCap { max_inline_data: 101, ..qp_cap(n, n, 13, 13) }
}

/// Runs `f` on two connected sides (A on device A, B on device B), then
/// checks every DMA page came back.
fn with_pair(f: impl FnOnce(&mut Side<'_>, &mut Side<'_>)) {
    with_pair_bars(|_, _, a, b| f(a, b));
}

/// [`with_pair`] that also hands `f` the two model BARs.
fn with_pair_bars(f: impl FnOnce(&ModelBar, &ModelBar, &mut Side<'_>, &mut Side<'_>)) {
    with_linked(128, full_cap(32), f);
}

fn assert_wc(wc: &WorkCompletion, wr_id: u64, opcode: WcOpcode, byte_len: u32) {
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (wr_id, WcStatus::Success, opcode, byte_len),
        "{wc:?}"
    );
}

#[test]
fn rdma_write_lands_byte_for_byte_and_nothing_else_changes() {
    with_pair(|a, b| {
        let src = a.region(4, 1);
        let dst = b.region(4, 2);
        let before = dst.all();
        let mut expect = before.clone();
        for (i, (soff, doff, len)) in
            [(0usize, 0usize, 1usize), (5, 4095, 2), (100, 3000, 4096), (7, 13, 16000)]
                .into_iter()
                .enumerate()
        {
            let sge = [src.sge(soff, len)];
            let id = 10 + i as u64;
            a.qp.post_send(&[signaled(id, write_op(dst.addr() + doff as u64, dst.key()), &sge)])
                .unwrap();
            let wc = a.one();
            assert_wc(&wc, id, WcOpcode::RdmaWrite, len as u32);
            assert_eq!(wc.qp_num, a.qp.qp_num());
            assert_eq!(wc.imm_data, None);
            expect[doff..doff + len].copy_from_slice(&src.bytes(soff, len));
            same(&dst.all(), &expect, &format!("write {i}: target equals the reference"));
            b.nothing();
        }
    });
}

#[test]
fn rdma_write_with_imm_delivers_the_imm_and_consumes_one_receive() {
    with_pair(|a, b| {
        let src = a.region(2, 3);
        let dst = b.region(2, 4);
        let rbuf = b.region(1, 0);
        let rs = [rbuf.sge(0, 64)];
        let rs2 = [rbuf.sge(1024, 2048)];
        b.qp.post_recv(&[RecvWr { wr_id: 71, sg_list: &rs }, RecvWr { wr_id: 72, sg_list: &rs2 }])
            .unwrap();
        let rbuf_before = rbuf.all();
        let sge = [src.sge(10, 5000)];
        let op = WrOpcode::RdmaWriteImm {
            remote_addr: dst.addr() + 33,
            rkey: dst.key(),
            imm: 0xdead_beef,
        };
        a.qp.post_send(&[signaled(1, op, &sge)]).unwrap();
        assert_wc(&a.one(), 1, WcOpcode::RdmaWrite, 5000);
        let r = b.one();
        assert_eq!(
            (r.wr_id, r.status, r.opcode, r.imm_data, r.qp_num),
            (71, WcStatus::Success, WcOpcode::RecvRdmaWithImm, Some(0xdead_beef), b.qp.qp_num()),
            "{r:?}"
        );
        assert_eq!(r.invalidated_rkey, None);
        assert_eq!(dst.bytes(33, 5000), src.bytes(10, 5000), "payload went to the rkey's memory");
        same(&rbuf.all(), &rbuf_before, "the receive buffer is not written");

        // The first receive was consumed: a SEND lands in the second one.
        let s = [src.sge(0, 300)];
        a.qp.post_send(&[signaled(2, WrOpcode::Send, &s)]).unwrap();
        assert_wc(&a.one(), 2, WcOpcode::Send, 300);
        let r = b.one();
        assert_wc(&r, 72, WcOpcode::Recv, 300);
        assert_eq!(r.imm_data, None);
        assert_eq!(rbuf.bytes(1024, 300), src.bytes(0, 300));
    });
}

#[test]
fn rdma_read_brings_remote_bytes_back() {
    with_pair(|a, b| {
        let remote = b.region(5, 9);
        let local = a.region(5, 0);
        let remote_before = remote.all();
        let mut expect = local.all();
        for (i, (roff, loff, len)) in
            [(0usize, 0usize, 1usize), (4000, 1, 200), (123, 4096, 12288), (1, 2, 20000)]
                .into_iter()
                .enumerate()
        {
            let sge = [local.sge(loff, len)];
            let id = 40 + i as u64;
            a.qp.post_send(&[signaled(
                id,
                read_op(remote.addr() + roff as u64, remote.key()),
                &sge,
            )])
            .unwrap();
            assert_wc(&a.one(), id, WcOpcode::RdmaRead, len as u32);
            expect[loff..loff + len].copy_from_slice(&remote_before[roff..roff + len]);
            same(&local.all(), &expect, &format!("read {i}"));
            b.nothing();
        }
        same(&remote.all(), &remote_before, "READ leaves the source alone");
    });
}

#[test]
fn send_and_send_with_imm_fill_posted_receives_in_order() {
    with_pair(|a, b| {
        let src = a.region(3, 5);
        let rb = b.region(24, 0);
        let lens = [1usize, 64, 4095, 4096, 4097, 9000];
        // Receive i: two SGEs in its own 16 KiB slot, 12096 bytes in all.
        let rs: Vec<[Sge; 2]> = (0..lens.len())
            .map(|i| [rb.sge(i * 16384, 4096), rb.sge(i * 16384 + 5000, 8000)])
            .collect();
        let recvs: Vec<RecvWr<'_>> = rs
            .iter()
            .enumerate()
            .map(|(i, s)| RecvWr { wr_id: 100 + i as u64, sg_list: s })
            .collect();
        b.qp.post_recv(&recvs).unwrap();
        for (i, len) in lens.into_iter().enumerate() {
            let sge = [src.sge(i * 7, len)];
            let (op, imm) = if i % 2 == 1 {
                (WrOpcode::SendImm { imm: 0x1000 + i as u32 }, Some(0x1000 + i as u32))
            } else {
                (WrOpcode::Send, None)
            };
            let mut expect = rb.all();
            scatter_ref(&mut expect, rb.addr(), &rs[i], &src.bytes(i * 7, len));
            a.qp.post_send(&[signaled(i as u64, op, &sge)]).unwrap();
            assert_wc(&a.one(), i as u64, WcOpcode::Send, len as u32);
            let r = b.one();
            assert_wc(&r, 100 + i as u64, WcOpcode::Recv, len as u32);
            assert_eq!((r.imm_data, r.invalidated_rkey), (imm, None), "{r:?}");
            same(&rb.all(), &expect, &format!("send {i} byte for byte, nothing else touched"));
        }
    });
}

/// A fast-register MR on `side`'s device over `pages` (reversed, so the
/// PBL order matters), registered by a REG_MR WR on `side`'s own QP.
fn fast_register<'d>(
    side: &mut Side<'d>,
    pages: &[u64],
    iova: u64,
    wr_id: u64,
) -> irdma::verbs::FastRegMr<'d, FakeHal, ModelBar> {
    let mut fr = side.dev.alloc_mr(&side.pd, pages.len() as u32).unwrap();
    // SAFETY: the device is the in-process model, which reaches host memory
    // only through `FakeHalMemory`; that refuses any address outside a live
    // `FakeHal` allocation, so no page is written after it is freed.
    unsafe { fr.map_pages(pages) }.unwrap();
    let key = fr.next_key();
    let r = fr_reg(&fr, key, ALL, (iova, pages.len() as u64 * 4096));
    side.qp.post_send(&[signaled(wr_id, WrOpcode::RegMr(r), &[])]).unwrap();
    let wc = side.one();
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (wr_id, WcStatus::Success, WcOpcode::RegMr));
    fr
}

/// Physical offset in `b` (pages mapped reversed) of IOVA offset `off`.
fn rev_off(pages: usize, off: usize) -> usize {
    (pages - 1 - off / 4096) * 4096 + off % 4096
}

#[test]
fn fast_registered_key_works_for_remote_write_and_read() {
    with_pair(|a, b| {
        let mem = buf(3);
        let mut pages = pages_of(&mem);
        pages.reverse();
        let iova = 0x5000_0000u64;
        let fr = fast_register(b, &pages, iova, 7);
        let src = a.region(3, 21);
        // WRITE 10000 bytes at IOVA +50 through the new key.
        let sge = [src.sge(0, 10000)];
        a.qp.post_send(&[signaled(1, write_op(iova + 50, fr.key()), &sge)]).unwrap();
        assert_wc(&a.one(), 1, WcOpcode::RdmaWrite, 10000);
        let data = src.bytes(0, 10000);
        for (i, byte) in data.iter().enumerate() {
            let off = rev_off(3, 50 + i);
            assert_eq!(read(&mem, off, 1)[0], *byte, "IOVA byte {} through the PBL", 50 + i);
        }
        // READ it back into another place.
        let back = a.region(3, 0);
        let sge = [back.sge(3, 9000)];
        a.qp.post_send(&[signaled(2, read_op(iova + 1050, fr.key()), &sge)]).unwrap();
        assert_wc(&a.one(), 2, WcOpcode::RdmaRead, 9000);
        assert_eq!(back.bytes(3, 9000), data[1000..10000].to_vec());
        b.nothing();
        drop(fr);
        drop(mem);
    });
}

/// A's access with `key` fails: the requester's WR completes with a remote
/// access error and `dst` is not written.
fn access_fails(a: &mut Side<'_>, src: &Region<'_>, addr: u64, key: u32, check: &Buf) {
    let before = read(check, 0, check.len());
    let sge = [src.sge(0, 256)];
    a.qp.post_send(&[signaled(99, write_op(addr, key), &sge)]).unwrap();
    let wc = a.after_error();
    assert_eq!((wc.wr_id, wc.status), (99, WcStatus::RemAccessErr), "{wc:?}");
    same(&read(check, 0, check.len()), &before, "nothing written with the dead key");
    assert_eq!(a.qp.state(), QpState::Error);
}

#[test]
fn local_inv_kills_the_key_for_remote_access() {
    with_pair(|a, b| {
        let mem = buf(2);
        let pages = pages_of(&mem);
        let iova = 0x6000_0000u64;
        let fr = fast_register(b, &pages, iova, 1);
        let src = a.region(1, 8);
        // Works before.
        let sge = [src.sge(0, 100)];
        a.qp.post_send(&[signaled(2, write_op(iova + 8, fr.key()), &sge)]).unwrap();
        assert_wc(&a.one(), 2, WcOpcode::RdmaWrite, 100);
        assert_eq!(read(&mem, 8, 100), src.bytes(0, 100));
        // B invalidates its own key.
        b.qp.post_send(&[signaled(3, WrOpcode::LocalInv { inv_key: fr.key() }, &[])]).unwrap();
        let wc = b.one();
        assert_eq!((wc.wr_id, wc.status, wc.opcode), (3, WcStatus::Success, WcOpcode::LocalInv));
        // Refused after.
        assert!(mem.write_bytes(0, &[0; 8192]));
        access_fails(a, &src, iova + 8, fr.key(), &mem);
    });
}

#[test]
fn local_inv_kills_the_key_for_local_use() {
    with_pair(|a, b| {
        let mem = buf(1);
        assert!(mem.write_bytes(0, &[0x5a; 4096]));
        let fr = fast_register(a, &pages_of(&mem), 0x10_0000, 1);
        let dst = b.region(1, 0);
        let dst_before = dst.all();
        let sge = [Sge { addr: 0x10_0000, length: 32, lkey: fr.key() }];
        a.qp.post_send(&[signaled(2, write_op(dst.addr(), dst.key()), &sge)]).unwrap();
        assert_wc(&a.one(), 2, WcOpcode::RdmaWrite, 32);
        assert_eq!(dst.bytes(0, 32), vec![0x5a; 32]);
        a.qp.post_send(&[signaled(3, WrOpcode::LocalInv { inv_key: fr.key() }, &[])]).unwrap();
        assert_eq!(a.one().opcode, WcOpcode::LocalInv);
        dst.put(0, &dst_before[..32]);
        a.qp.post_send(&[signaled(4, write_op(dst.addr(), dst.key()), &sge)]).unwrap();
        let wc = a.after_error();
        assert_eq!(wc.wr_id, 4);
        assert_eq!(wc.status, WcStatus::LocProtErr, "the invalidated lkey is refused: {wc:?}");
        same(&dst.all(), &dst_before, "nothing sent with the dead lkey");
    });
}

#[test]
fn send_with_inv_invalidates_the_remote_key() {
    with_pair(|a, b| {
        let mem = buf(2);
        let iova = 0x7000_0000u64;
        let fr = fast_register(b, &pages_of(&mem), iova, 1);
        let src = a.region(1, 4);
        let rb = b.region(1, 0);
        let rs = [rb.sge(0, 4096)];
        b.qp.post_recv(&[RecvWr { wr_id: 60, sg_list: &rs }]).unwrap();
        // The key works, then SEND_WITH_INV names it.
        let sge = [src.sge(0, 64)];
        a.qp.post_send(&[signaled(1, write_op(iova, fr.key()), &sge)]).unwrap();
        assert_wc(&a.one(), 1, WcOpcode::RdmaWrite, 64);
        let sge = [src.sge(100, 777)];
        a.qp.post_send(&[signaled(2, WrOpcode::SendInv { inv_key: fr.key() }, &sge)]).unwrap();
        assert_wc(&a.one(), 2, WcOpcode::Send, 777);
        let r = b.one();
        assert_wc(&r, 60, WcOpcode::Recv, 777);
        assert_eq!((r.invalidated_rkey, r.imm_data), (Some(fr.key()), None), "{r:?}");
        assert_eq!(rb.bytes(0, 777), src.bytes(100, 777));
        // A later access with the key fails.
        assert!(mem.write_bytes(0, &[0; 8192]));
        access_fails(a, &src, iova, fr.key(), &mem);
    });
}

const INLINE_SIZES: [usize; 6] = [1, 8, 9, 39, 40, 101];

#[test]
fn inline_write_and_send_of_every_boundary_size() {
    with_pair(|a, b| {
        // SAFETY: every inline SGE below addresses a FakeHal buffer, whose
        // bus address is its CPU address, alive during the post.
        unsafe { a.qp.enable_inline() };
        let src = a.region(1, 0);
        let dst = b.region(1, 0xff);
        let rb = b.region(1, 0);
        let mut rng = Rng::new(42);
        let mut expect = dst.all();
        for (i, len) in INLINE_SIZES.into_iter().enumerate() {
            // Fresh data each time, so a stale copy cannot pass.
            let data = rng.bytes(len);
            src.put(1000, &data);
            let flags = SendFlags::SIGNALED | SendFlags::INLINE;
            // Two SGEs where possible: the gather of inline data is checked too.
            let cut = len / 3;
            let two = [src.sge(1000, cut), src.sge(1000 + cut, len - cut)];
            let one = [src.sge(1000, len)];
            let sg: &[Sge] = if cut > 0 { &two } else { &one };
            let off = 97 * i;
            let w = SendWr {
                wr_id: i as u64,
                opcode: write_op(dst.addr() + off as u64, dst.key()),
                flags,
                sg_list: sg,
            };
            a.qp.post_send(&[w]).unwrap();
            // Overwrite the source right away: an inline WR carries its copy.
            src.put(1000, &vec![0u8; len]);
            assert_wc(&a.one(), i as u64, WcOpcode::RdmaWrite, len as u32);
            expect[off..off + len].copy_from_slice(&data);
            same(&dst.all(), &expect, &format!("inline WRITE of {len}"));

            src.put(2000, &data);
            let rs = [rb.sge(0, 4096)];
            b.qp.post_recv(&[RecvWr { wr_id: 500 + i as u64, sg_list: &rs }]).unwrap();
            let sg = [src.sge(2000, len)];
            let s = SendWr { wr_id: 50 + i as u64, opcode: WrOpcode::Send, flags, sg_list: &sg };
            a.qp.post_send(&[s]).unwrap();
            src.put(2000, &vec![0u8; len]);
            assert_wc(&a.one(), 50 + i as u64, WcOpcode::Send, len as u32);
            let r = b.one();
            assert_wc(&r, 500 + i as u64, WcOpcode::Recv, len as u32);
            assert_eq!(rb.bytes(0, len), data, "inline SEND of {len}");
        }
        // 102 bytes are refused with a typed error, and nothing is posted.
        let sg = [src.sge(0, 102)];
        let w = SendWr {
            wr_id: 9,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED | SendFlags::INLINE,
            sg_list: &sg,
        };
        let ok = signaled(8, write_op(dst.addr(), dst.key()), &sg[..0]);
        assert_eq!(
            a.qp.post_send(&[ok, w]),
            Err(PostError { bad_wr: 1, kind: PostErrorKind::Sq(SqError::InlineTooLong) })
        );
        assert_wc(&a.one(), 8, WcOpcode::RdmaWrite, 0);
        b.nothing();
    });
}

#[test]
fn inline_with_immediate_data() {
    with_pair(|a, b| {
        // SAFETY: inline SGEs below address live FakeHal buffers (bus
        // address == CPU address).
        unsafe { a.qp.enable_inline() };
        let src = a.region(1, 0);
        let dst = b.region(1, 0);
        let rb = b.region(1, 0);
        let mut rng = Rng::new(4242);
        let mut expect = dst.all();
        for (i, len) in INLINE_SIZES.into_iter().enumerate() {
            let data = rng.bytes(len);
            src.put(0, &data);
            let sg = [src.sge(0, len)];
            let flags = SendFlags::SIGNALED | SendFlags::INLINE;
            let imm = 0xa000_0000 | i as u32;
            let rs = [rb.sge(0, 4096)];
            b.qp.post_recv(&[
                RecvWr { wr_id: 300 + 2 * i as u64, sg_list: &rs },
                RecvWr { wr_id: 301 + 2 * i as u64, sg_list: &rs },
            ])
            .unwrap();
            let off = 200 * i;
            let op = WrOpcode::RdmaWriteImm {
                remote_addr: dst.addr() + off as u64,
                rkey: dst.key(),
                imm,
            };
            let w = SendWr { wr_id: i as u64, opcode: op, flags, sg_list: &sg };
            let s = SendWr {
                wr_id: 100 + i as u64,
                opcode: WrOpcode::SendImm { imm: !imm },
                flags,
                sg_list: &sg,
            };
            a.qp.post_send(&[w, s]).unwrap();
            src.put(0, &vec![0u8; len]);
            let wc = a.poll(2);
            assert_eq!(wc.len(), 2, "{wc:?}");
            assert_wc(&wc[0], i as u64, WcOpcode::RdmaWrite, len as u32);
            assert_wc(&wc[1], 100 + i as u64, WcOpcode::Send, len as u32);
            let r = b.poll(2);
            assert_eq!(r.len(), 2, "{r:?}");
            assert_eq!(
                (r[0].wr_id, r[0].status, r[0].opcode, r[0].imm_data),
                (300 + 2 * i as u64, WcStatus::Success, WcOpcode::RecvRdmaWithImm, Some(imm)),
                "{r:?}"
            );
            assert_wc(&r[1], 301 + 2 * i as u64, WcOpcode::Recv, len as u32);
            assert_eq!(r[1].imm_data, Some(!imm));
            expect[off..off + len].copy_from_slice(&data);
            same(&dst.all(), &expect, &format!("inline WRITE+IMM of {len}"));
            assert_eq!(rb.bytes(0, len), data, "inline SEND+IMM of {len}");
            a.nothing();
            b.nothing();
        }
        let sg = [src.sge(0, 102)];
        let op = WrOpcode::RdmaWriteImm { remote_addr: dst.addr(), rkey: dst.key(), imm: 1 };
        let w = SendWr {
            wr_id: 1,
            opcode: op,
            flags: SendFlags::SIGNALED | SendFlags::INLINE,
            sg_list: &sg,
        };
        assert_eq!(
            a.qp.post_send(&[w]),
            Err(PostError { bad_wr: 0, kind: PostErrorKind::Sq(SqError::InlineTooLong) })
        );
        a.nothing();
    });
}

#[test]
fn inline_above_101_is_refused_at_create_and_without_enable() {
    let _g = lock();
    let (_ba, _bb, da, _db) = two_devices(Profile::SMALL);
    let pd = da.alloc_pd().unwrap();
    let cq = da.create_cq(8).unwrap();
    let mut attr = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap: full_cap(4) };
    attr.cap.max_inline_data = 102;
    match da.create_qp(&pd, &mut attr) {
        Err(VerbsError::AboveLimit { what, requested, max }) => {
            assert_eq!((what.name(), requested, max), ("max_inline_data", 102, 101))
        }
        other => panic!("{:?}", other.err()),
    }
    // A QP that did not enable inline refuses an inline WR.
    let mut attr = QpInitAttr { send_cq: &cq, recv_cq: &cq, cap: full_cap(4) };
    let mut qp = da.create_qp(&pd, &mut attr).unwrap();
    let b = buf(1);
    let sg = [Sge { addr: b.paddr(), length: 8, lkey: 0 }];
    let w = SendWr {
        wr_id: 1,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED | SendFlags::INLINE,
        sg_list: &sg,
    };
    assert_eq!(
        qp.post_send(&[w]),
        Err(PostError { bad_wr: 0, kind: PostErrorKind::Sq(SqError::InlineNotEnabled) })
    );
}

/// 13 pieces of `r`, of varied lengths, scattered over its pages.
fn pieces(r: &Region<'_>, n: usize, rng: &mut Rng) -> Vec<Sge> {
    let slot = r.len() / n;
    (0..n)
        .map(|i| {
            let len = rng.range(1, (slot / 2) as u64) as usize;
            let off = i * slot + rng.range(0, (slot - len) as u64) as usize;
            r.sge(off, len)
        })
        .collect()
}

#[test]
fn thirteen_sges_for_send_write_and_read() {
    with_pair(|a, b| {
        assert_eq!((a.qp.cap().max_send_sge, b.qp.cap().max_recv_sge), (13, 13));
        let mut rng = Rng::new(7);
        let src = a.region(8, 31);
        let dst = b.region(8, 0);
        for n in [2usize, 7, 12, 13] {
            // SEND gathering n SGEs into a receive scattering into n SGEs.
            let g = pieces(&src, n, &mut rng);
            let total: usize = g.iter().map(|s| s.length as usize).sum();
            // The receive: n SGEs of half a slot each, room for any `g`.
            let slot = dst.len() / n;
            let s: Vec<Sge> = (0..n)
                .map(|i| dst.sge(i * slot + rng.range(0, (slot / 2) as u64) as usize, slot / 2))
                .collect();
            assert!(s.iter().map(|x| x.length as usize).sum::<usize>() >= total);
            let data = gathered(&src, &g);
            let mut expect = dst.all();
            scatter_ref(&mut expect, dst.addr(), &s, &data);
            b.qp.post_recv(&[RecvWr { wr_id: 1000 + n as u64, sg_list: &s }]).unwrap();
            a.qp.post_send(&[signaled(n as u64, WrOpcode::Send, &g)]).unwrap();
            assert_wc(&a.one(), n as u64, WcOpcode::Send, total as u32);
            assert_wc(&b.one(), 1000 + n as u64, WcOpcode::Recv, total as u32);
            same(&dst.all(), &expect, &format!("SEND with {n} SGEs"));

            // WRITE gathering n SGEs to one remote range.
            let g = pieces(&src, n, &mut rng);
            let data = gathered(&src, &g);
            let off = rng.range(0, (dst.len() - data.len()) as u64) as usize;
            let mut expect = dst.all();
            expect[off..off + data.len()].copy_from_slice(&data);
            a.qp.post_send(&[signaled(
                20 + n as u64,
                write_op(dst.addr() + off as u64, dst.key()),
                &g,
            )])
            .unwrap();
            assert_wc(&a.one(), 20 + n as u64, WcOpcode::RdmaWrite, data.len() as u32);
            same(&dst.all(), &expect, &format!("WRITE with {n} SGEs"));

            // READ one remote range scattered into n SGEs.
            let l = pieces(&src, n, &mut rng);
            let total: usize = l.iter().map(|s| s.length as usize).sum();
            let roff = rng.range(0, (dst.len() - total) as u64) as usize;
            let remote = dst.bytes(roff, total);
            let mut expect = src.all();
            scatter_ref(&mut expect, src.addr(), &l, &remote);
            a.qp.post_send(&[signaled(
                40 + n as u64,
                read_op(dst.addr() + roff as u64, dst.key()),
                &l,
            )])
            .unwrap();
            assert_wc(&a.one(), 40 + n as u64, WcOpcode::RdmaRead, total as u32);
            same(&src.all(), &expect, &format!("READ with {n} SGEs"));
        }
        // One more than the QP allows is refused, for every kind, and for
        // a receive.
        let g = pieces(&src, 14, &mut rng);
        for op in [WrOpcode::Send, write_op(dst.addr(), dst.key()), read_op(dst.addr(), dst.key())]
        {
            assert_eq!(
                a.qp.post_send(&[signaled(1, op, &g)]),
                Err(PostError { bad_wr: 0, kind: PostErrorKind::Sq(SqError::TooManySges) })
            );
        }
        assert_eq!(
            b.qp.post_recv(&[RecvWr { wr_id: 1, sg_list: &g }]),
            Err(PostError { bad_wr: 0, kind: PostErrorKind::Rq(RqError::TooManySges) })
        );
        a.nothing();
        b.nothing();
    });
}

#[test]
fn a_full_sq_refuses_at_bad_wr_and_takes_more_after_polling() {
    with_two_devices(|_, _, da, db| {
        let cap = qp_cap(16, 4, 1, 1);
        let mut a = Side::new(da, A, 1024, cap);
        let mut b = Side::new(db, B, 64, cap);
        link(&mut a, &mut b);
        let depth = a.qp.cap().max_send_wr as usize;
        assert!(depth >= 16);
        let src = a.region(1, 0);
        let bytes: Vec<u8> = (0..=255u8).collect();
        src.put(0, &bytes);
        let dst = b.region(1, 0);
        let mut expect = dst.all();
        // 512 one-byte WRITEs at once: byte i to offset i (mod 4096).
        let sges: Vec<[Sge; 1]> = (0..512).map(|i| [src.sge(i % 256, 1)]).collect();
        let wrs: Vec<SendWr<'_>> = sges
            .iter()
            .enumerate()
            .map(|(i, s)| signaled(i as u64, write_op(dst.addr() + i as u64, dst.key()), s))
            .collect();
        let err = a.qp.post_send(&wrs).unwrap_err();
        assert_eq!(err.kind, PostErrorKind::Sq(SqError::Full), "{err:?}");
        let n = err.bad_wr;
        assert!(n >= depth && n < 512, "refused at {n} (depth {depth})");
        // Exactly the first n executed, in order, each completing once.
        let wc = a.poll(n + 1);
        assert_eq!(wc.len(), n);
        assert!(
            wc.iter()
                .enumerate()
                .all(|(i, w)| w.wr_id == i as u64 && w.status == WcStatus::Success)
        );
        for (i, e) in expect.iter_mut().enumerate().take(n) {
            *e = (i % 256) as u8;
        }
        same(&dst.all(), &expect, "the first n WRITEs, nothing after");
        // The SQ took the rest after the poll retired the first ones.
        let rest = &wrs[n..(2 * n).min(512)];
        a.qp.post_send(rest).unwrap();
        let wc = a.poll(rest.len());
        assert_eq!(wc.len(), rest.len());
        assert_eq!(wc[0].wr_id, n as u64);
        for (i, e) in expect.iter_mut().enumerate().take(n + rest.len()).skip(n) {
            *e = (i % 256) as u8;
        }
        same(&dst.all(), &expect, "the rest, after polling");
        a.nothing();
    });
}

#[test]
fn zero_length_and_thirteen_sge_operations_with_immediate() {
    with_pair(|a, b| {
        let src = a.region(8, 77);
        let dst = b.region(8, 0);
        let rb = b.region(4, 0);
        let before = dst.all();
        let rs = [rb.sge(0, 16384)];
        let recvs: Vec<RecvWr<'_>> =
            (0..4).map(|i| RecvWr { wr_id: 700 + i, sg_list: &rs }).collect();
        b.qp.post_recv(&recvs).unwrap();
        // Zero-byte WRITE+IMM (a notification) and zero-byte SEND(+IMM).
        let op = WrOpcode::RdmaWriteImm { remote_addr: dst.addr(), rkey: dst.key(), imm: 5 };
        a.qp.post_send(&[
            signaled(1, op, &[]),
            signaled(2, WrOpcode::Send, &[]),
            signaled(3, WrOpcode::SendImm { imm: 6 }, &[]),
        ])
        .unwrap();
        let wc = a.poll(3);
        assert_eq!(wc.len(), 3, "{wc:?}");
        assert_wc(&wc[0], 1, WcOpcode::RdmaWrite, 0);
        assert_wc(&wc[1], 2, WcOpcode::Send, 0);
        assert_wc(&wc[2], 3, WcOpcode::Send, 0);
        let r = b.poll(3);
        assert_eq!(r.len(), 3, "{r:?}");
        assert_eq!(
            (r[0].wr_id, r[0].opcode, r[0].imm_data),
            (700, WcOpcode::RecvRdmaWithImm, Some(5))
        );
        assert_wc(&r[1], 701, WcOpcode::Recv, 0);
        assert_eq!(r[1].imm_data, None);
        assert_wc(&r[2], 702, WcOpcode::Recv, 0);
        assert_eq!(r[2].imm_data, Some(6));
        same(&dst.all(), &before, "a zero-byte WRITE writes nothing");

        // 13 SGEs plus the immediate (14 fragments) for WRITE and SEND.
        b.qp.post_recv(&[RecvWr { wr_id: 704, sg_list: &rs }]).unwrap();
        let mut rng = Rng::new(13);
        let g = pieces(&src, 13, &mut rng);
        let data = gathered(&src, &g);
        let op = WrOpcode::RdmaWriteImm { remote_addr: dst.addr() + 9, rkey: dst.key(), imm: 7 };
        a.qp.post_send(&[signaled(4, op, &g), signaled(5, WrOpcode::SendImm { imm: 8 }, &g)])
            .unwrap();
        let wc = a.poll(2);
        assert_eq!(wc.len(), 2, "{wc:?}");
        assert_wc(&wc[0], 4, WcOpcode::RdmaWrite, data.len() as u32);
        assert_wc(&wc[1], 5, WcOpcode::Send, data.len() as u32);
        let r = b.poll(2);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!(
            (r[0].wr_id, r[0].opcode, r[0].imm_data),
            (703, WcOpcode::RecvRdmaWithImm, Some(7))
        );
        assert_eq!(dst.bytes(9, data.len()), data, "13-SGE WRITE+IMM");
        assert_wc(&r[1], 704, WcOpcode::Recv, data.len() as u32);
        assert_eq!(r[1].imm_data, Some(8));
        assert_eq!(rb.bytes(0, data.len()), data, "13-SGE SEND+IMM");
    });
}

#[test]
fn eight_qp_pairs_share_one_cq_per_device() {
    with_two_devices(|_, _, da, db| {
        let (pa, pb) = (da.alloc_pd().unwrap(), db.alloc_pd().unwrap());
        let (mut ca, mut cb) = (da.create_cq(256).unwrap(), db.create_cq(256).unwrap());
        let mut qa: Vec<TQp<'_>> = (0..8).map(|_| create_qp(da, &pa, &ca, 8)).collect();
        let mut qb: Vec<TQp<'_>> = (0..8).map(|_| create_qp(db, &pb, &cb, 8)).collect();
        for (x, y) in qa.iter_mut().zip(qb.iter_mut()) {
            connect_both(x, A, y, B);
        }
        let src = buf(8);
        let smr = reg(da, &pa, src.paddr(), 8 * 4096, &pages_of(&src), false);
        let mut rng = Rng::new(8);
        let data = rng.bytes(8 * 4096);
        assert!(src.write_bytes(0, &data));
        let dst = buf(8);
        let dmr = reg(db, &pb, dst.paddr(), 8 * 4096, &pages_of(&dst), false);
        // Pair i: a SEND of 100 + i bytes into receive 100 + i on B, and a
        // WRITE of page i into page i of B's buffer.
        let ssg: Vec<[Sge; 1]> = (0..8)
            .map(|i| {
                [Sge { addr: src.paddr() + i as u64 * 4096, length: 100 + i, lkey: smr.lkey() }]
            })
            .collect();
        let wsg: Vec<[Sge; 1]> = (0..8)
            .map(|i| [Sge { addr: src.paddr() + i as u64 * 4096, length: 4096, lkey: smr.lkey() }])
            .collect();
        let rsg: Vec<[Sge; 1]> = (0..8)
            .map(|i| {
                [Sge { addr: dst.paddr() + i as u64 * 4096 + 2048, length: 1024, lkey: dmr.lkey() }]
            })
            .collect();
        for i in 0..8 {
            qb[i].post_recv(&[RecvWr { wr_id: 100 + i as u64, sg_list: &rsg[i] }]).unwrap();
        }
        for i in (0..8).rev() {
            let w = signaled(
                10 * i as u64,
                write_op(dst.paddr() + i as u64 * 4096, dmr.rkey()),
                &wsg[i],
            );
            let s = signaled(10 * i as u64 + 1, WrOpcode::Send, &ssg[i]);
            qa[i].post_send(&[w, s]).unwrap();
        }
        let wa = poll_n(&mut ca, 16);
        let wb = poll_n(&mut cb, 8);
        assert_eq!((wa.len(), wb.len()), (16, 8), "{wa:?} {wb:?}");
        for c in &wa {
            let i = (c.wr_id / 10) as usize;
            assert_eq!(c.qp_num, qa[i].qp_num(), "{c:?}");
            assert_eq!(c.status, WcStatus::Success);
            let op = if c.wr_id % 10 == 0 { WcOpcode::RdmaWrite } else { WcOpcode::Send };
            assert_eq!(c.opcode, op);
        }
        let mut ids: Vec<u64> = wa.iter().map(|c| c.wr_id).collect();
        ids.sort();
        assert_eq!(ids, (0..8).flat_map(|i| [10 * i, 10 * i + 1]).collect::<Vec<_>>());
        for c in &wb {
            let i = (c.wr_id - 100) as usize;
            assert_eq!(
                (c.qp_num, c.status, c.opcode, c.byte_len),
                (qb[i].qp_num(), WcStatus::Success, WcOpcode::Recv, 100 + i as u32),
                "{c:?}"
            );
        }
        // Page i of B = page i of A except the receive's bytes at 2048.
        for i in 0..8 {
            let page = &data[i * 4096..(i + 1) * 4096];
            let mut want = page.to_vec();
            want[2048..2048 + 100 + i].copy_from_slice(&page[..100 + i]);
            same(&read(&dst, i * 4096, 4096), &want, &format!("pair {i}"));
        }
        drop((smr, dmr, qa, qb));
    });
}

/// A bad rkey in the middle of a batch of WRITEs: `flags[i]` says which are
/// signaled. The ones before the bad one land (signaled ones complete once,
/// unsignaled ones never), the bad one completes with a remote access error
/// even if unsignaled, every later WR is flushed exactly once (unsignaled
/// included, as Linux's flush does), and nothing after the bad one lands.
fn error_mid_batch(flags: [bool; 10], bad: usize) {
    error_mid_batch_with(flags, bad, true, |_| {});
}

/// [`error_mid_batch`] with `plan` applied to device A's fault plan first.
fn error_mid_batch_with(
    flags: [bool; 10],
    bad: usize,
    exact: bool,
    plan: impl FnOnce(&mut mock_bar::FaultPlan),
) {
    with_pair_bars(|bar_a, _, a, b| {
        bar_a.with_device(|d| plan(d.faults()));
        let src = a.region(1, 3);
        let dst = b.region(1, 0);
        let mut expect = dst.all();
        let sg: Vec<[Sge; 1]> = (0..10).map(|i| [src.sge(i * 100, 100)]).collect();
        let wrs: Vec<SendWr<'_>> = (0..10)
            .map(|i| {
                let rkey = if i == bad { dst.key() ^ 0x80 } else { dst.key() };
                SendWr {
                    wr_id: i as u64,
                    opcode: write_op(dst.addr() + (i * 200) as u64, rkey),
                    flags: if flags[i] { SendFlags::SIGNALED } else { SendFlags::NONE },
                    sg_list: &sg[i],
                }
            })
            .collect();
        a.qp.post_send(&wrs).unwrap();
        for i in 0..bad {
            expect[i * 200..i * 200 + 100].copy_from_slice(&src.bytes(i * 100, 100));
        }
        a.assert_error_event();
        let wc = a.poll(20);
        let got: Vec<(u64, WcStatus)> = wc.iter().map(|c| (c.wr_id, c.status)).collect();
        let mut want: Vec<(u64, WcStatus)> =
            (0..bad).filter(|&i| flags[i]).map(|i| (i as u64, WcStatus::Success)).collect();
        want.push((bad as u64, WcStatus::RemAccessErr));
        want.extend((bad + 1..10).map(|i| (i as u64, WcStatus::WrFlushErr)));
        if exact {
            assert_eq!(got, want, "{wc:?}");
        } else {
            // Without a trustworthy WQE index the driver replays from its
            // tail, like Linux: an executed unsignaled WR before the bad
            // one may take the error. Still: every WR at most once, every
            // signaled one before the bad one a success, the bad one and
            // all after it reported and none of them a success.
            let mut seen: Vec<u64> = got.iter().map(|g| g.0).collect();
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), got.len(), "a WR reported twice: {wc:?}");
            for i in 0..10u64 {
                let st = got.iter().find(|g| g.0 == i).map(|g| g.1);
                if (i as usize) < bad && flags[i as usize] {
                    assert_eq!(st, Some(WcStatus::Success), "WR {i}: {wc:?}");
                } else if i as usize >= bad {
                    assert!(st.is_some_and(|s| s != WcStatus::Success), "WR {i}: {wc:?}");
                }
            }
        }
        assert!(wc.iter().all(|c| c.opcode == WcOpcode::RdmaWrite), "{wc:?}");
        a.nothing();
        same(&dst.all(), &expect, "the WRITEs before the bad one, nothing after");
    });
}

#[test]
fn an_error_mid_batch_completes_every_wr_exactly_once() {
    // Every WR before the bad one signaled (so retired by its CQE); the bad
    // one and several after it unsignaled.
    error_mid_batch([true, true, true, true, false, true, false, true, false, false], 4);
}

/// Reproducer of a wrong attribution (see the report of the e2e branch):
/// an unsignaled WRITE that executed successfully right before the failing
/// one is reported with the failure's status (RemAccessErr), and the WR
/// that actually failed is reported as WrFlushErr. The SQ flush replay
/// walks from the software tail (spec data-path §5.5), which still holds
/// the executed-but-unsignaled WR because no CQE retired it.
#[test]
fn an_error_after_unsignaled_wrs_is_attributed_to_the_failing_wr() {
    error_mid_batch([true, false, true, false, false, true, false, true, false, false], 4);
}

// ----------------------------------------------------------------------
// Fault plans the driver had not faced (issue 15): each WR completes
// exactly once.
// ----------------------------------------------------------------------

const FLAGS: [bool; 10] = [true, false, true, false, false, true, false, true, false, false];

/// The failing WQE gets its own error CQE (major 0xFFFE, minor = the AE
/// code; spec data-path §5.5) besides the AE, then FLUSH_WQES adds a flush
/// CQE for the rest.
#[test]
fn an_error_cqe_for_the_failing_wqe_itself_completes_every_wr_once() {
    error_mid_batch_with(FLAGS, 4, true, |p| p.error_cqe_on_fatal = true);
}

/// FLUSH_WQES writes a flush CQE per outstanding WQE (as GEN_3 firmware
/// does) instead of one per queue.
#[test]
fn several_flush_cqes_per_queue_complete_every_wr_once() {
    error_mid_batch_with(FLAGS, 4, true, |p| p.flush_cqes_per_queue = 8);
}

/// The SQ flush CQE names a WQE index outside the outstanding window.
#[test]
fn a_flush_cqe_with_a_stray_wqe_index_completes_every_wr_once() {
    error_mid_batch_with(FLAGS, 4, false, |p| p.flush_sq_wqe_idx = Some(0x7ff0));
}

/// Both: the failing WQE's own CQE and several flush CQEs.
#[test]
fn an_error_cqe_and_several_flush_cqes_complete_every_wr_once() {
    error_mid_batch_with(FLAGS, 4, true, |p| {
        p.error_cqe_on_fatal = true;
        p.flush_cqes_per_queue = 8;
    });
}

/// Two QPs of A share one CQ; the first QP's CQEs are held back by the
/// device and arrive after (interleaved with) the second's.
#[test]
fn completions_of_two_qps_delayed_and_interleaved_on_a_shared_cq() {
    with_two_devices(|ba, _, da, db| {
        let (pa, pb) = (da.alloc_pd().unwrap(), db.alloc_pd().unwrap());
        let (mut ca, cb) = (da.create_cq(64).unwrap(), db.create_cq(64).unwrap());
        let mut qa: Vec<TQp<'_>> = (0..2).map(|_| create_qp(da, &pa, &ca, 8)).collect();
        let mut qb: Vec<TQp<'_>> = (0..2).map(|_| create_qp(db, &pb, &cb, 8)).collect();
        for (x, y) in qa.iter_mut().zip(qb.iter_mut()) {
            connect_both(x, A, y, B);
        }
        let src = buf(1);
        let smr = reg(da, &pa, src.paddr(), 4096, &pages_of(&src), false);
        let dst = buf(1);
        let dmr = reg(db, &pb, dst.paddr(), 4096, &pages_of(&dst), false);
        let sg = [Sge { addr: src.paddr(), length: 64, lkey: smr.lkey() }];
        let q0 = qa[0].qp_num();
        ba.with_device(|d| d.faults().hold_cqes_of_qp = Some((q0, 3)));
        for (i, q) in qa.iter_mut().enumerate() {
            let wrs: Vec<SendWr<'_>> = (0..3)
                .map(|k| {
                    signaled(10 * i as u64 + k, write_op(dst.paddr() + 64 * k, dmr.rkey()), &sg)
                })
                .collect();
            q.post_send(&wrs).unwrap();
        }
        let wc = poll_n(&mut ca, 6);
        let ids: Vec<u64> = wc.iter().map(|c| c.wr_id).collect();
        assert!(wc.iter().all(|c| c.status == WcStatus::Success), "{wc:?}");
        assert_eq!(ids, vec![10, 0, 1, 2, 11, 12], "QP 0's held CQEs land after QP 1's first");
        assert!(poll_n(&mut ca, 1).is_empty(), "nothing twice");
        drop((smr, dmr, qa, qb));
    });
}

/// The device acts on an SQ doorbell late (the WQE is read after the
/// write returned): nothing completes until the device gets to it, then
/// once.
#[test]
fn a_wqe_read_late_completes_once() {
    with_pair_bars(|bar_a, _, a, b| {
        let src = a.region(1, 5);
        let dst = b.region(1, 0);
        bar_a.with_device(|d| d.faults().late_sq_doorbells = 1);
        let sg = [src.sge(0, 128)];
        a.qp.post_send(&[signaled(1, write_op(dst.addr(), dst.key()), &sg)]).unwrap();
        a.nothing();
        let sg2 = [src.sge(128, 128)];
        a.qp.post_send(&[signaled(2, write_op(dst.addr() + 128, dst.key()), &sg2)]).unwrap();
        let wc = a.poll(3);
        assert_eq!(
            wc.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
            vec![(1, WcStatus::Success), (2, WcStatus::Success)]
        );
        a.nothing();
        same(&dst.bytes(0, 256), &src.bytes(0, 256), "both WRITEs landed");
    });
}

fn events(dev: &Dev) -> Vec<irdma::aeq::AsyncEvent> {
    let mut ev = [NO_EVENT; 8];
    let n = dev.poll_async_events(&mut ev);
    ev[..n].to_vec()
}

/// A CQE write fails (the device raises LCE_CQ_CATASTROPHIC for the CQ):
/// the CQ error is reported, the other WRs complete exactly once and the
/// lost one is never reported twice.
#[test]
fn a_failed_cqe_write_raises_a_cq_error_and_nothing_completes_twice() {
    use irdma::aeq::AsyncEventKind;
    with_pair_bars(|bar_a, _, a, b| {
        bar_a.expect_counter(ErrorCounter::CqesDropped);
        let src = a.region(1, 5);
        let dst = b.region(1, 0);
        bar_a.with_device(|d| d.faults().fail_cqe_writes = 1);
        let sg = [src.sge(0, 64)];
        let wrs: Vec<SendWr<'_>> =
            (0..3).map(|k| signaled(k, write_op(dst.addr() + 64 * k, dst.key()), &sg)).collect();
        a.qp.post_send(&wrs).unwrap();
        let ev = events(a.dev);
        assert!(
            ev.iter().any(|e| e.kind == AsyncEventKind::CqError
                && e.ae_code == 0x0702
                && e.id == a.cq.id()),
            "{ev:?}"
        );
        let wc = a.poll(4);
        let ids: Vec<u64> = wc.iter().map(|c| c.wr_id).collect();
        assert!(ids == vec![1, 2], "WR 0's CQE was lost, 1 and 2 once: {wc:?}");
        a.nothing();
    });
}

/// Catastrophic QP event (LCE_QP_CATASTROPHIC 0x0700) for a QP with WRs the
/// device has not read yet: every WR is flushed exactly once.
#[test]
fn a_catastrophic_qp_event_flushes_every_wr_once() {
    with_pair_bars(|bar_a, _, a, b| {
        let src = a.region(1, 5);
        let dst = b.region(1, 0);
        let before = dst.all();
        bar_a.with_device(|d| d.faults().late_sq_doorbells = 1);
        let sg = [src.sge(0, 64)];
        let wrs: Vec<SendWr<'_>> =
            (0..3).map(|k| signaled(k, write_op(dst.addr() + 64 * k, dst.key()), &sg)).collect();
        a.qp.post_send(&wrs).unwrap();
        let qpn = a.qp.qp_num();
        bar_a.with_device(|d| d.inject_ae(0x0700, 0x5, qpn));
        let ev = events(a.dev);
        assert!(ev.iter().any(|e| e.id == qpn && e.moved_to_error), "{ev:?}");
        let wc = a.poll(4);
        assert_eq!(wc.iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![0, 1, 2], "{wc:?}");
        assert!(wc.iter().all(|c| c.status != WcStatus::Success), "{wc:?}");
        a.nothing();
        assert_eq!(a.qp.state(), QpState::Error);
        // the late doorbell finds the QP in ERROR: nothing executes later
        bar_a.with_device(|d| d.step());
        a.nothing();
        same(&dst.all(), &before, "nothing landed");
    });
}

/// Events the driver must survive: a function-catastrophic event naming no
/// QP, and an AE for a QP that was already destroyed. Neither disturbs a
/// live QP, whose WRs still complete once.
#[test]
fn catastrophic_and_stale_qp_events_leave_live_qps_alone() {
    with_pair_bars(|bar_a, _, a, b| {
        let src = a.region(1, 5);
        let dst = b.region(1, 0);
        let cq2 = a.dev.create_cq(8).unwrap();
        let mut gone = create_qp(a.dev, &a.pd, &cq2, 4);
        let gone_id = gone.qp_num();
        gone.destroy().unwrap();
        drop(gone);
        bar_a.with_device(|d| {
            d.inject_ae(0x0701, 0, 0); // function catastrophic, no QP
            d.inject_ae(0x0B0B, 0, 0); // adapter catastrophic, no QP
            d.inject_ae(0x020D, 0x5, gone_id); // a QP that no longer exists
            d.inject_ae(0x0700, 0x5, gone_id);
        });
        let ev = events(a.dev);
        assert_eq!(ev.len(), 4, "{ev:?}");
        assert!(ev.iter().all(|e| !e.moved_to_error), "{ev:?}");
        assert_eq!(a.qp.state(), QpState::Rts);
        let sg = [src.sge(0, 64)];
        a.qp.post_send(&[signaled(7, write_op(dst.addr(), dst.key()), &sg)]).unwrap();
        let wc = a.one();
        assert_eq!((wc.wr_id, wc.status), (7, WcStatus::Success));
        drop(cq2);
    });
}

/// wire §4.7/§4.8 (issue #15): a request frame lost on the wire. The
/// responder sees the PSN gap, sends one PSN-sequence NAK, the requester
/// resends from the lost PSN (go-back-N): the WRITE and the SEND each land
/// byte for byte and complete exactly once on both ends.
#[test]
fn a_lost_frame_is_resent_after_a_sequence_nak_and_completes_once() {
    with_pair_bars(|bar_a, bar_b, a, b| {
        // B's receiver drops the frames after each gap: declared, and
        // counted exactly below
        bar_b.expect_counter(ErrorCounter::WireDrops);
        let base = bar_b.with_device(|d| d.counters().clone());
        let src = a.region(2, 9);
        let dst = b.region(2, 0);
        let before = dst.all();
        // 3000 bytes at MTU 1024: FIRST, MIDDLE (lost), LAST
        bar_a.with_device(|d| d.faults().drop_request_frame = Some(1));
        let sge = [src.sge(17, 3000)];
        a.qp.post_send(&[signaled(1, write_op(dst.addr() + 5, dst.key()), &sge)]).unwrap();
        assert_wc(&a.one(), 1, WcOpcode::RdmaWrite, 3000);
        let mut want = before;
        want[5..3005].copy_from_slice(&src.bytes(17, 3000));
        same(&dst.all(), &want, "write after resend, nothing else changed");
        b.nothing();
        // SEND of 2100 bytes: FIRST (lost), MIDDLE, LAST
        let rb = b.region(1, 0);
        b.qp.post_recv(&[RecvWr { wr_id: 7, sg_list: &[rb.sge(0, 4096)] }]).unwrap();
        bar_a.with_device(|d| d.faults().drop_request_frame = Some(0));
        a.qp.post_send(&[signaled(2, WrOpcode::Send, &[src.sge(0, 2100)])]).unwrap();
        assert_wc(&a.one(), 2, WcOpcode::Send, 2100);
        let r = b.one();
        assert_eq!((r.wr_id, r.status, r.byte_len), (7, WcStatus::Success, 2100), "{r:?}");
        same(&rb.bytes(0, 2100), &src.bytes(0, 2100), "send after resend");
        let n = bar_b.with_device(|d| d.counters().clone());
        assert_eq!(n.seq_naks - base.seq_naks, 2, "one NAK per gap");
        // WRITE: LAST dropped; SEND: MIDDLE and LAST dropped
        assert_eq!(n.wire_drops - base.wire_drops, 3);
        let lost = bar_a.with_device(|d| (d.counters().frames_lost, d.counters().retransmitted));
        assert_eq!(lost, (2, 2 + 3));
        // the connection goes on
        a.qp.post_send(&[signaled(3, write_op(dst.addr(), dst.key()), &[src.sge(0, 8)])]).unwrap();
        assert_wc(&a.one(), 3, WcOpcode::RdmaWrite, 8);
    });
}

/// The end-of-test counter check covers wire drops (issue #15): a frame
/// the receiver drops (here: a corrupted ICRC) that the test did not
/// declare fails the test.
#[test]
fn an_undeclared_wire_drop_fails_the_end_of_test_check() {
    with_pair_bars(|bar_a, bar_b, a, b| {
        let src = a.region(1, 1);
        let dst = b.region(1, 0);
        bar_a.with_device(|d| d.faults().flip_frame_byte = Some((0, usize::MAX)));
        a.qp.post_send(&[signaled(1, write_op(dst.addr(), dst.key()), &[src.sge(0, 8)])]).unwrap();
        let wc = a.after_error();
        assert_eq!(wc.status, WcStatus::RetryExcErr, "{wc:?}");
        assert_eq!(bar_b.unexpected_errors(), vec![(ErrorCounter::WireDrops, 1)]);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| bar_b.finish()));
        assert!(r.is_err(), "an undeclared wire drop fails the test");
    });
}
