//! Bad input the issue #19 table (docs/bad-input.md) found untested: each
//! refused with its typed error, nothing taken, nothing posted.

mod common;

use common::*;
use irdma::uk::{RqError, SqError};
use irdma::verbs::{PostError, PostErrorKind};
use irdma::wr::RecvWr;

#[test]
fn gaps_of_the_bad_input_table_are_refused() {
    let _g = lock();
    let (_bar, dev) = one_device(small_fn_config(), Profile::SMALL);
    let pd = dev.alloc_pd().unwrap();
    let usage = dev.resource_usage();
    let b = buf(2);
    let pages = pages_of(&b);
    // MR whose iova + length wraps.
    let d = va_desc(u64::MAX - 4095, 8192, &pages, Access::LOCAL_WRITE);
    // SAFETY: refused before the device is told anything (and `b`, whose
    // pages these are, outlives the device anyway).
    let r = unsafe { dev.reg_mr(&pd, &d) };
    assert!(matches!(r, Err(VerbsError::Invalid { .. })), "iova + length");
    // Zero-sized objects.
    assert!(matches!(dev.create_cq(0), Err(VerbsError::AboveLimit { .. })), "cqe 0");
    assert!(matches!(dev.alloc_mr(&pd, 0), Err(VerbsError::AboveLimit { .. })), "max_pages 0");
    assert_eq!(dev.resource_usage(), usage, "refusals take nothing");

    let mut cq = dev.create_cq(16).unwrap();
    let mut qp = create_qp(&dev, &pd, &cq, 4);
    // A state transition the QP cannot make (RESET → RTS).
    let e = qp.modify(&QpAttr::new(QpState::Rts));
    assert!(matches!(e, Err(VerbsError::InvalidState)), "{e:?}");
    // A fast-register page list longer than the MR.
    let fr = dev.alloc_mr(&pd, 2).unwrap();
    // SAFETY: refused before any PBLE is written (the list is too long).
    let r = unsafe { fr.map_pages(&[0x1000, 0x2000, 0x3000]) };
    assert!(matches!(r, Err(VerbsError::AboveLimit { .. })));
    // SGE lengths above FRAG_LEN's 31 bits, on both queues.
    let mr = reg(&dev, &pd, b.paddr(), 8192, &pages, false);
    let over = [Sge { addr: b.paddr(), length: 0x8000_0000, lkey: mr.lkey() }];
    let wr = signaled(1, write_op(b.paddr(), mr.rkey()), &over);
    assert_eq!(
        qp.post_send(&[wr]).err(),
        Some(PostError { bad_wr: 0, kind: PostErrorKind::Sq(SqError::InvalidField) })
    );
    assert_eq!(
        qp.post_recv(&[RecvWr { wr_id: 2, sg_list: &over }]).err(),
        Some(PostError { bad_wr: 0, kind: PostErrorKind::Rq(RqError::InvalidField) })
    );
    // A full RQ refuses at the first WR that does not fit.
    let ok = [Sge { addr: b.paddr(), length: 64, lkey: mr.lkey() }];
    let many: Vec<RecvWr<'_>> = (0..64).map(|i| RecvWr { wr_id: i, sg_list: &ok }).collect();
    match qp.post_recv(&many) {
        Err(PostError { bad_wr, kind: PostErrorKind::Rq(RqError::Full) }) => {
            assert!(bad_wr >= qp.cap().max_recv_wr as usize, "{bad_wr}")
        }
        other => panic!("{other:?}"),
    }
    let mut wc = [empty_wc(); 4];
    assert_eq!(cq.poll(&mut wc), 0, "nothing was posted to the SQ");
}
