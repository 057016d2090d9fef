//! The CQE decoder and retirement paths: the real `poll_cq` on a host-memory
//! CQ ring whose CQEs are fuzz bytes, with an RC or UD QP that has sends and
//! receives outstanding.
//!
//! Input: byte 0 = kind (bit 0), sends to post (bits 1..=4), receives
//! (bits 5..=7); byte 1 = batch size; byte 2/3 = CQ head and polarity;
//! then the CQ ring (16 CQEs × 32 bytes). A CQE's context word is replaced
//! by the QP's context unless its low byte is ≥ 0xc0, so most CQEs reach
//! the QP (retirement) and some take the unknown-QP path.
#![no_main]

mod common;

use common::word;
use core::ptr::NonNull;

use irdma::uk::qp::{QpKind, QpUk, poll_cq};
use irdma::uk::{CqRing, QueueMem, Rq, Sq, SqWrTrk};
use irdma::wr::{RecvWr, SendFlags, SendWr, Sge, WorkCompletion, WrOpcode};
use irdma_hal::Bar;
use libfuzzer_sys::fuzz_target;

const CTX: u64 = 0xc0de_0000;
const QP_ID: u32 = 0x2a;
const CQ_SIZE: usize = 16;

struct NullBar;
impl Bar for NullBar {
    fn read32(&self, _offset: usize) -> u32 {
        0
    }
    fn write32(&self, _offset: usize, _value: u32) {}
}

fn view(v: &mut [u64]) -> QueueMem<'_> {
    // SAFETY: `v` is borrowed mutably for the view's lifetime and only
    // accessed through it.
    unsafe { QueueMem::from_raw(NonNull::new(v.as_mut_ptr()).unwrap(), v.len()) }
}

fuzz_target!(|data: &[u8]| {
    let Some((hdr, ring)) = data.split_at_checked(4) else { return };
    let kind = if hdr[0] & 1 == 0 { QpKind::Rc } else { QpKind::Ud };
    let sends = usize::from((hdr[0] >> 1) & 0xf);
    let recvs = usize::from(hdr[0] >> 5);
    let batch = usize::from(hdr[1] % 8) + 1;

    let mut sqm = vec![0u64; 64 * 4];
    let mut trk = vec![SqWrTrk::default(); 64];
    let mut rqm = vec![0u64; 16 * 2 * 4];
    let mut wrid = vec![0u64; 16];
    let mut cqm = vec![0u64; CQ_SIZE * 4];
    let mut sh = vec![0u64; 8];
    let sq = Sq::new(view(&mut sqm), &mut trk, 64, 13, 101, QP_ID).unwrap();
    let rq = Rq::new(view(&mut rqm), &mut wrid, 16, 1, 3).unwrap();
    let mut cq = CqRing::new(view(&mut cqm), view(&mut sh), CQ_SIZE as u32, 7).unwrap();
    let mut qp = QpUk::new(sq, rq, CTX, kind);

    let sge = [Sge { addr: 0x1000, length: 100, lkey: 5 }];
    let bar = NullBar;
    for i in 0..sends {
        let opcode = match kind {
            QpKind::Rc => WrOpcode::RdmaWrite { remote_addr: 0x9000, rkey: 3 },
            QpKind::Ud => WrOpcode::Send,
        };
        let flags = if i % 3 == 2 { SendFlags::NONE } else { SendFlags::SIGNALED };
        let _ = qp.post_send(&bar, &[SendWr { wr_id: i as u64, opcode, flags, sg_list: &sge }]);
    }
    for i in 0..recvs {
        let _ = qp.post_recv(&[RecvWr { wr_id: 0x100 + i as u64, sg_list: &sge }]);
    }
    let _ = cq.set_position(u32::from(hdr[2]), hdr[3] & 1 != 0);

    for slot in 0..CQ_SIZE {
        let mut w = [0u64; 4];
        for (k, x) in w.iter_mut().enumerate() {
            *x = word(ring, slot * 4 + k);
        }
        if w[1] & 0xff < 0xc0 {
            w[1] = CTX;
        }
        for (k, x) in w.iter().enumerate() {
            cq.mem().write(slot * 4 + k, *x);
        }
    }

    let mut wc = [WorkCompletion::default(); 8];
    for _ in 0..4 * CQ_SIZE {
        if poll_cq(&mut cq, &mut qp, &mut wc[..batch]) == 0 {
            break;
        }
    }
    let _ = cq.has_cqe();
    qp.set_error();
    let mut out = [WorkCompletion::default(); 96];
    let _ = qp.flush_outstanding(&mut out);
});
