//! Tests of the SQ (`super`): posting, encoding, completion, refusals.

extern crate std;
use super::*;
use core::ptr::NonNull;
use std::vec;
use std::vec::Vec;

pub(crate) struct Ring {
    pub buf: Vec<u64>,
    pub trk: Vec<SqWrTrk>,
}

impl Ring {
    pub fn new(quanta: usize) -> Self {
        Ring { buf: vec![0; quanta * 4], trk: vec![SqWrTrk::default(); quanta] }
    }
    pub fn sq(&mut self, size: u32) -> Sq<'_> {
        let base = NonNull::new(self.buf.as_mut_ptr()).unwrap();
        // SAFETY: the buffer outlives the Sq (borrowed) and is only accessed through it.
        let mem = unsafe { QueueMem::from_raw(base, self.buf.len()) };
        Sq::new(mem, &mut self.trk, size, 13, 101, 0x2a).unwrap()
    }
}

fn sge(i: u64) -> Sge {
    Sge {
        addr: 0x7f00_0010_0040 + (i << 16),
        length: 256 + 257 * i as u32,
        lkey: 0xabcd00 + i as u32,
    }
}

#[test]
fn write_one_sge_matches_vendor_words() {
    let mut r = Ring::new(64);
    let mut sq = r.sq(64);
    let s = [sge(0)];
    let mut p = SqPost::new(
        7,
        SqOp::Write {
            remote_addr: 0x7e00_0020_0000,
            rkey: 0xbeef01,
            solicited: false,
            sges: &s,
            inline: false,
        },
    );
    p.signaled = true;
    let got = sq.post(&p).unwrap();
    assert_eq!(got, PostedWqe { wqe_idx: 0, quanta: 1, pad: 0, valid: true });
    let m = sq.mem();
    assert_eq!(m.read(0), 0x7f00_0010_0040);
    assert_eq!(m.read(1), 0x8000_0100_00ab_cd00);
    assert_eq!(m.read(2), 0x7e00_0020_0000);
    assert_eq!(m.read(3), 0xc000_0000_00be_ef01);
    assert_eq!(sq.trk(0).unwrap().wr_len, 256);
}

#[test]
fn chunk_rule_pads_with_nops_and_polarity_flips_at_zero() {
    let mut r = Ring::new(16);
    let mut sq = r.sq(16);
    let one = [sge(0)];
    let w1 = SqOp::Write { remote_addr: 0, rkey: 1, solicited: false, sges: &one, inline: false };
    for _ in 0..13 {
        sq.post(&SqPost::new(1, w1)).unwrap();
    }
    sq.consume_all();
    // 13 SGEs + imm = 8 quanta: 3 pads then the WQE at index 0 of pass 2.
    let many: Vec<Sge> = (0..13).map(sge).collect();
    let mut p = SqPost::new(
        9,
        SqOp::Write { remote_addr: 0, rkey: 1, solicited: false, sges: &many, inline: false },
    );
    p.imm = Some(0x1234_5678);
    let got = sq.post(&p).unwrap();
    assert_eq!(got, PostedWqe { wqe_idx: 0, quanta: 8, pad: 3, valid: false });
    for i in 13..16 {
        assert_eq!(sq.mem().read(i * 4 + 3), 0x8000_000c_0000_0000, "pad {i} is a valid NOP");
        assert_eq!(sq.trk(i as u32).unwrap().quanta, 1);
    }
    // ADDFRAGCNT 14 (13 + imm + counted pad), valid bit 0 on pass 2.
    assert_eq!(sq_hdr::ADDFRAGCNT.get(sq.mem().read(3)), 14);
    assert!(!sq_hdr::VALID.is_set(sq.mem().read(3)));
    assert_eq!(sq.mem().read(31) >> 63, 0, "pad fragment valid bit = polarity 0");
    assert_eq!(sq.used(), 11);
    // 5 quanta left: a 1-quantum and a 4-quantum WQE fill the ring exactly.
    sq.post(&SqPost::new(1, w1)).unwrap();
    let six: Vec<Sge> = (0..6).map(sge).collect();
    let w4 = SqOp::Write { remote_addr: 0, rkey: 1, solicited: false, sges: &six, inline: false };
    assert_eq!(sq.post(&SqPost::new(3, w4)).unwrap().wqe_idx, 9);
    assert_eq!(sq.used(), 16);
    assert_eq!(sq.post(&SqPost::new(1, w1)), Err(SqError::Full));
    // Retiring the big WQE (and the pads before it) makes room; the next
    // 4-quanta WQE pads 13..15 and lands at 0 on pass 3 (valid 1).
    assert_eq!(sq.complete_at(0).unwrap().wr_id, 9);
    assert_eq!(sq.used(), 5);
    let got = sq.post(&SqPost::new(2, w4)).unwrap();
    assert_eq!(got, PostedWqe { wqe_idx: 0, quanta: 4, pad: 3, valid: true });
}

/// The one-SGE hot path writes exactly what the general encoder writes.
#[test]
fn hot_path_equals_general_encoder() {
    let s = [sge(3)];
    for (k, flags) in (0..16u8).enumerate() {
        let op = if k % 2 == 0 {
            SqOp::Write {
                remote_addr: 0x1234_5678_9abc,
                rkey: 0xfeed,
                solicited: false,
                sges: &s,
                inline: false,
            }
        } else {
            SqOp::Read { remote_addr: 0x42, rkey: 0xbeef, local_inv: false, sges: &s }
        };
        let mut p = SqPost::new(k as u64, op);
        p.read_fence = flags & 1 != 0;
        p.local_fence = flags & 2 != 0;
        p.signaled = flags & 4 != 0;
        let valid = flags & 8 != 0;
        let mut a = [0u64; 4];
        let mut b = [0u64; 4];
        let (ma, mb) = (view4(&mut a), view4(&mut b));
        let ha = encode_body(&p, &wqe_slot(&ma, 0, 1), valid, 1);
        let hb = encode_general(&p, &wqe_slot(&mb, 0, 1), valid, 1);
        assert_eq!(ha, hb, "header, case {k}");
        assert_eq!(
            (0..3).map(|i| ma.read(i)).collect::<Vec<_>>(),
            (0..3).map(|i| mb.read(i)).collect::<Vec<_>>()
        );
    }
}

fn view4(v: &mut [u64; 4]) -> QueueMem<'_> {
    // SAFETY: the array is borrowed mutably for the view's lifetime.
    unsafe { QueueMem::from_raw(NonNull::new(v.as_mut_ptr()).unwrap(), 4) }
}

#[test]
fn real_ring_keeps_257_quanta_free() {
    let mut r = Ring::new(512);
    let mut sq = r.sq(512);
    let mut n = 0;
    while sq.post(&SqPost::new(n, SqOp::Nop)).is_ok() {
        n += 1;
    }
    assert_eq!(n, 512 - 257);
    assert_eq!(sq.free(), 0);
    // A completion for the 10th WQE retires the first ten.
    assert_eq!(sq.complete_at(9).unwrap().wr_id, 9);
    assert_eq!(sq.used(), 512 - 257 - 10);
    // A completion index that is not outstanding is refused.
    assert_eq!(sq.complete_at(5), None);
}

/// `SendQueue::complete_at` refuses an index past the ring instead of
/// using its bits under the mask (vendor-diff, issue #30): the fast poll
/// path masks qword 3 with WQEIDX first.
#[test]
fn complete_at_refuses_an_index_past_the_ring() {
    let mut r = Ring::new(32768);
    let mut sq = r.sq(32768);
    for n in 0..4 {
        sq.post(&SqPost::new(n, SqOp::Nop)).unwrap();
    }
    // The largest ring: its mask is WQEIDX's 15 bits.
    assert_eq!(SendQueue::complete_at(&mut sq, 0xFFFF_8000 | 2), None);
    assert_eq!(SendQueue::complete_at(&mut sq, 0x8000 | 2), None);
    assert_eq!(sq.used(), 4);
    assert_eq!(SendQueue::complete_at(&mut sq, 2).map(|t| t.wr_id), Some(2));
    assert_eq!(sq.used(), 1);
}

/// A CQE naming an inner quantum of a multi-quanta WQE is refused (its
/// tracking entry is marked as no WQE start), on the first lap and after a
/// wrap, where the entry still held a one-quantum WQE of the lap before:
/// accepting it completed that WR a second time and left the tail inside
/// the WQE (vendor-diff, seed 0xa11ce001 case 68403). As the shared SQ's
/// `uk::mp` test of the same name.
#[test]
fn complete_at_refuses_an_inner_quantum() {
    let mut r = Ring::new(8);
    let mut sq = r.sq(8);
    let sges = [sge(0), sge(1), sge(2)];
    let big = |id| {
        let op =
            SqOp::Write { remote_addr: 0, rkey: 1, solicited: false, sges: &sges, inline: false };
        SqPost::new(id, op)
    };
    // Lap 0: one-quantum WQEs at 0..3, retired; a 2-quanta one at 4..5.
    for n in 0..4 {
        sq.post(&SqPost::new(n, SqOp::Nop)).unwrap();
    }
    assert_eq!(sq.complete_at(3).map(|t| t.wr_id), Some(3));
    assert_eq!(sq.post(&big(10)).map(|p| (p.wqe_idx, p.quanta)), Ok((4, 2)));
    assert_eq!(sq.complete_at(5), None, "inner quantum completed");
    assert_eq!(sq.tail(), 4);
    assert_eq!(sq.complete_at(4).map(|t| t.wr_id), Some(10));
    // Lap 1: 6, 7 and 0 one quantum, then a 2-quanta WQE at 1..2, whose
    // inner quantum 2 held the one-quantum WQE 2 on lap 0.
    for n in 20..23 {
        sq.post(&SqPost::new(n, SqOp::Nop)).unwrap();
    }
    assert_eq!(sq.post(&big(30)).map(|p| (p.wqe_idx, p.quanta)), Ok((1, 2)));
    assert_eq!(sq.complete_at(2), None, "inner quantum completed after the wrap");
    assert_eq!(sq.complete_at(1).map(|t| t.wr_id), Some(30));
    assert_eq!(sq.used(), 0);
}

#[test]
fn errors_are_typed() {
    let mut r = Ring::new(64);
    let mut sq = r.sq(64);
    let many: Vec<Sge> = (0..14).map(sge).collect();
    let w = SqOp::Write { remote_addr: 0, rkey: 1, solicited: false, sges: &many, inline: false };
    assert_eq!(sq.post(&SqPost::new(1, w)), Err(SqError::TooManySges));
    let one = [sge(0)];
    let inl = SqOp::Send {
        kind: SendKind::default(),
        stag_to_inv: 0,
        qkey: 0,
        dest_qp: 0,
        ah_id: 0,
        udp_hdr: false,
        l4len: 0,
        sges: &one,
        inline: true,
    };
    assert_eq!(sq.post(&SqPost::new(1, inl)), Err(SqError::InlineNotEnabled));
    assert_eq!(sq.post(&SqPost::new(1, SqOp::Atomic)), Err(SqError::Unsupported));
    let mut rd =
        SqPost::new(1, SqOp::Read { remote_addr: 0, rkey: 0, local_inv: false, sges: &one });
    rd.imm = Some(1);
    assert_eq!(sq.post(&rd), Err(SqError::ImmNotAllowed));
    assert_eq!(sq.head(), 0, "nothing was written");
}

#[test]
fn inline_layout_and_valid_bytes() {
    let mut r = Ring::new(64);
    let mut sq = r.sq(64);
    // SAFETY: the inline SGE below points at a live local array.
    unsafe { sq.enable_inline() };
    let payload: Vec<u8> = (1..=40u8).collect();
    let s = [Sge { addr: payload.as_ptr() as u64, length: 40, lkey: 0 }];
    let p = SqPost::new(
        3,
        SqOp::Write { remote_addr: 0x55, rkey: 2, solicited: false, sges: &s, inline: true },
    );
    let got = sq.post(&p).unwrap();
    assert_eq!(got.quanta, 3);
    let m = sq.mem();
    assert_eq!(m.read(1), u64::from_le_bytes([1, 2, 3, 4, 5, 6, 7, 8]));
    assert_eq!(m.read(4), u64::from_le_bytes([9, 10, 11, 12, 13, 14, 15, 16]));
    // Byte 31 of quantum 1 is the valid byte; payload byte 39 (value 39) is at quantum 1 byte 30.
    assert_eq!(m.read(7) >> 56, 0x80);
    assert_eq!((m.read(7) >> 48) & 0xff, 39);
    assert_eq!(m.read(8) & 0xff, 40);
    assert_eq!(m.read(11) >> 56, 0x80);
    let h = m.read(3);
    assert_eq!(sq_hdr::INLINEDATALEN.get(h), 40);
    assert!(sq_hdr::INLINEDATAFLAG.is_set(h));
}

#[test]
fn fast_register_layout() {
    let mut r = Ring::new(64);
    let mut sq = r.sq(64);
    let reg = RegMrWr {
        key: 0x0012_3456,
        access: Access::LOCAL_WRITE | Access::REMOTE_READ,
        iova: 0x1000_2000,
        length: 0x30_0000,
        page_size: PageSize::Size2M,
        first_pble_index: 0x0abc_1234,
        pbl_level: 1,
    };
    sq.post(&SqPost::new(1, SqOp::FastReg(reg))).unwrap();
    let m = sq.mem();
    assert_eq!(m.read(0), 0x1000_2000);
    assert_eq!(m.read(1), 0xabc);
    assert_eq!(m.read(2), 0x1234_0000_0000_0000 | 0x30_0000);
    let h = m.read(3);
    assert_eq!(sq_hdr::STAGKEY.get(h), 0x56);
    assert_eq!(sq_hdr::STAGINDEX.get(h), 0x1234);
    assert_eq!(sq_hdr::OPCODE.get(h), 0x09);
    assert_eq!(sq_hdr::LPBLSIZE.get(h), 1);
    assert_eq!(sq_hdr::HPAGESIZE.get(h), 1);
    assert_eq!(sq_hdr::STAGRIGHTS.get(h), 0x07);
    assert!(sq_hdr::VABASEDTO.is_set(h));
    let bad = RegMrWr { length: 1 << 41, ..reg };
    assert_eq!(sq.post(&SqPost::new(1, SqOp::FastReg(bad))), Err(SqError::InvalidField));
    // The first PBLE index has 28 bits (16 low + 12 high).
    let bad = RegMrWr { first_pble_index: 1 << 28, ..reg };
    assert_eq!(sq.post(&SqPost::new(1, SqOp::FastReg(bad))), Err(SqError::InvalidField));
    let mut imm = SqPost::new(1, SqOp::FastReg(reg));
    imm.imm = Some(1);
    assert_eq!(sq.post(&imm), Err(SqError::ImmNotAllowed));
}
