//! Instruction-count workloads for `cargo xtask bench` (run under callgrind).
//!
//! `uk CASE N` runs CASE's operation N times on rings in host memory with a
//! BAR that only stores the doorbell value; xtask runs N and 2N and divides
//! the difference by N, so set-up cost cancels out.

use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use irdma::hal::Bar;
use irdma::hal::wqe::cqe;
use irdma::uk::qp::{QpKind, QpUk, poll_cq};
use irdma::uk::{Cq, MpSq, MpTrk, QueueMem, Rq, Sq, SqWrTrk};
use irdma::wr::{SendFlags, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion, WrOpcode};

/// A BAR whose doorbell is one relaxed store (what an MMIO write costs in
/// instructions), so nothing is optimised away.
struct NopBar(AtomicU32);

impl Bar for NopBar {
    fn read32(&self, _offset: usize) -> u32 {
        0
    }
    #[inline(always)]
    fn write32(&self, _offset: usize, value: u32) {
        self.0.store(value, Ordering::Relaxed);
    }
}

const SQ_QUANTA: u32 = 4096;
const CQ_SLOTS: u32 = 4096;
const CTX: u64 = 0x1000;

fn view(v: &mut [u64]) -> QueueMem<'_> {
    // SAFETY: the vector is borrowed mutably for the view's lifetime.
    unsafe { QueueMem::from_raw(NonNull::new(v.as_mut_ptr()).expect("non-null"), v.len()) }
}

const WC0: WorkCompletion = WorkCompletion {
    wr_id: 0,
    status: WcStatus::Success,
    opcode: WcOpcode::Send,
    vendor_err: 0,
    byte_len: 0,
    qp_num: 0,
    imm_data: None,
    invalidated_rkey: None,
    solicited: false,
};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let case = args.get(1).map(String::as_str).unwrap_or("");
    let n: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let mut sqm = vec![0u64; SQ_QUANTA as usize * 4];
    let mut trk = vec![SqWrTrk::default(); SQ_QUANTA as usize];
    let mut rqm = vec![0u64; 64 * 4];
    let mut wrid = vec![0u64; 64];
    let mut cqm = vec![0u64; CQ_SLOTS as usize * 4];
    let mut sh = vec![0u64; 8];
    let bar = NopBar(AtomicU32::new(0));
    let sge = [Sge { addr: 0x7f00_1000, length: 4096, lkey: 0x1234 }];
    let wr = SendWr {
        wr_id: 1,
        opcode: WrOpcode::RdmaWrite { remote_addr: 0x9000_0000, rkey: 0x55 },
        flags: SendFlags::SIGNALED,
        sg_list: &sge,
    };
    let batch = [wr; 32];
    match case {
        "post_write" | "post_write_batch32" | "poll_cqe" | "poll_cqe_base" | "poll_empty" => {
            let sq = Sq::new(view(&mut sqm), &mut trk, SQ_QUANTA, 13, 101, 0x2a).expect("sq");
            let rq = Rq::new(view(&mut rqm), &mut wrid, 64, 0, 1).expect("rq");
            let mut qp = QpUk::new(sq, rq, CTX, QpKind::Rc);
            let mut cq = Cq::new(view(&mut cqm), view(&mut sh), CQ_SLOTS, 7).expect("cq");
            let mut wc = [WC0; 1];
            let mut hw = 0u64; // hardware's CQE producer position
            let mut device_cqe = |cq: &Cq<'_>, idx: u32| {
                // The "device" writes one SQ CQE for the WQE at `idx`.
                let slot = (hw % u64::from(CQ_SLOTS)) as usize * 4;
                let valid = (hw / u64::from(CQ_SLOTS)).is_multiple_of(2);
                let m = cq.mem();
                m.write(slot + 1, CTX);
                m.write(slot + 2, cqe::QPID.prep(0x2a));
                m.write(
                    slot + 3,
                    cqe::VALID.prep(valid as u64) | cqe::SQ.prep(1) | cqe::WQEIDX.prep(idx.into()),
                );
                hw += 1;
                slot
            };
            let one = irdma::uk::qp::sq_post_from_wr(&wr, QpKind::Rc);
            match case {
                "post_write" => {
                    for _ in 0..n {
                        let _ = black_box(qp.post_send(&bar, black_box(&batch[..1])));
                        qp.sq.consume_all();
                    }
                }
                "post_write_batch32" => {
                    for _ in 0..n / 32 {
                        let _ = black_box(qp.post_send(&bar, black_box(&batch[..])));
                        qp.sq.consume_all();
                    }
                }
                "poll_cqe" => {
                    for _ in 0..n {
                        let p = qp.sq.post(black_box(&one)).map(|p| p.wqe_idx).unwrap_or(0);
                        device_cqe(&cq, p);
                        let got = poll_cq(&mut cq, &mut qp, black_box(&mut wc[..]));
                        assert_eq!(got, 1);
                    }
                }
                "poll_cqe_base" => {
                    for _ in 0..n {
                        let p = qp.sq.post(black_box(&one)).map(|p| p.wqe_idx).unwrap_or(0);
                        let slot = device_cqe(&cq, p);
                        // Keep the rings in step without polling.
                        qp.sq.consume_all();
                        cq.mem().write(slot + 3, 0);
                        black_box(&wc);
                    }
                }
                _ => {
                    for _ in 0..n {
                        let got = poll_cq(&mut cq, &mut qp, black_box(&mut wc[..]));
                        assert_eq!(black_box(got), 0);
                    }
                }
            }
            black_box(&wc);
        }
        "mp_post_write" | "mp_post_write_batch32" => {
            let mtrk: Vec<MpTrk> = (0..SQ_QUANTA).map(|_| MpTrk::new()).collect();
            let mp = MpSq::new(view(&mut sqm), &mtrk[..], SQ_QUANTA, 13, 101, 0x2a).expect("mp");
            let mut last = 0u32;
            let mut retire = |mp: &MpSq<QueueMem<'_>, &[MpTrk]>| {
                // Retire what was posted (the completer's job).
                let head = mp.published();
                if head != last {
                    let _ = mp.complete_at(head.wrapping_sub(1) & (SQ_QUANTA - 1));
                    last = head;
                }
            };
            if case == "mp_post_write" {
                for _ in 0..n {
                    let _ = black_box(mp.post_send(&bar, QpKind::Rc, black_box(&batch[..1])));
                    retire(&mp);
                }
            } else {
                for _ in 0..n / 32 {
                    let _ = black_box(mp.post_send(&bar, QpKind::Rc, black_box(&batch[..])));
                    retire(&mp);
                }
            }
        }
        other => {
            eprintln!("unknown case {other:?}");
            std::process::exit(2);
        }
    }
    black_box(bar.0.load(Ordering::Relaxed));
}
