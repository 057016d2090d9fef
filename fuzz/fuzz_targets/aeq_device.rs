//! Arbitrary AEQEs through a probed `Device` (issue #19): the model writes
//! fuzz-chosen AEQEs (any code, source, id, overflow bit, context word;
//! VALID set so each is consumed) into the device's AEQ ring, then the
//! driver consumes them through `Device::poll_async_events` and through a
//! CQ poll (which services the AEQ), acting on each (QP to ERROR + flush
//! for QP errors). No panic, no hang; the device stays usable.
//!
//! Input: byte 0 = how the events are consumed (bit 0: a CQ poll first;
//! bits 1..=3: `poll_async_events` batch size − 1); byte 1 bit 0: aim the
//! id of every entry at the live QP (else the fuzz id is kept); then
//! 16-byte AEQEs (two little-endian words).
#![no_main]

mod common;

use common::word;
use std::cell::RefCell;

use irdma::aeq::{AsyncEvent, AsyncEventKind};
use irdma::device::{Device, ProbeOptions};
use irdma::lan::LanInfo;
use irdma::res::Profile;
use irdma::verbs::{QpCap, QpInitAttr};
use irdma::wr::{WcStatus, WorkCompletion};
use irdma_testkit::{FakeHal, ModelBar};
use libfuzzer_sys::fuzz_target;

type Dev = Device<FakeHal, ModelBar>;

struct Env {
    bar: ModelBar,
    dev: &'static Dev,
}

thread_local! {
    static ENV: RefCell<Option<Env>> = const { RefCell::new(None) };
}

/// A probed device (a fresh one after a reset was needed); leaked, so
/// objects can borrow it for the input's duration.
fn env() -> (ModelBar, &'static Dev) {
    ENV.with(|e| {
        let mut e = e.borrow_mut();
        if let Some(env) = e.as_ref()
            && !env.dev.needs_reset()
        {
            return (env.bar.clone(), env.dev);
        }
        let mut cfg = mock_bar::Config::default();
        cfg.fpm.max_cnt[19] = 4096;
        cfg.fpm.max_cnt[20] = 4096;
        let bar = ModelBar::standalone(cfg);
        // Fuzz AEQEs may name objects in error states, and the model counts
        // AEQEs it could not write: not the driver's errors.
        for c in irdma_testkit::ErrorCounter::ALL {
            bar.expect_counter(c);
        }
        let lan = LanInfo::single_tc(0, 6, [2, 0, 0, 0, 0, 0x0a], 1500);
        let mut o = ProbeOptions { cqp_sq_size: 64, ..ProbeOptions::default() };
        let t = std::time::Duration::from_millis(50);
        (o.timeouts.ccq, o.timeouts.poll_registers, o.timeouts.create) = (t, t, t);
        let dev: &'static Dev = Box::leak(Box::new(
            Device::probe_with(bar.clone(), lan, Profile::SMALL, o).expect("probe"),
        ));
        *e = Some(Env { bar: bar.clone(), dev });
        (bar, dev)
    })
}

const NO_EVENT: AsyncEvent = AsyncEvent {
    kind: AsyncEventKind::Ignored,
    ae_code: 0,
    ae_src: 0,
    id: 0,
    moved_to_error: false,
};

/// A completion for the poll to write into; an entry it does not write
/// reads as an error.
fn empty_wc() -> WorkCompletion {
    WorkCompletion { status: WcStatus::GeneralErr, ..WorkCompletion::default() }
}

fuzz_target!(|data: &[u8]| {
    let Some((hdr, body)) = data.split_at_checked(2) else { return };
    let (bar, dev) = env();
    let Ok(pd) = dev.alloc_pd() else { return };
    let Ok(mut cq) = dev.create_cq(16) else { return };
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let Ok(mut qp) = dev.create_qp(&pd, &mut QpInitAttr { send_cq: &cq, recv_cq: &cq, cap }) else {
        return;
    };
    let qpn = u64::from(qp.qp_num());
    // At most 64 entries per input.
    for i in 0..(body.len() / 16).min(64) {
        let w0 = word(body, 2 * i);
        let mut w1 = word(body, 2 * i + 1);
        if hdr[1] & 1 == 1 {
            // QP/CQ id: bits [17:0] and 46 of the second word (hal
            // `cqp::aeqe::QPCQID_LOW` / `QPCQID_HI`; spec control-path §8.2).
            w1 = (w1 & !(0x3_FFFF | 1 << 46)) | qpn;
        }
        bar.with_device(|d| d.inject_raw_aeqe(w0, w1));
    }
    if hdr[0] & 1 == 1 {
        let mut wc = [empty_wc(); 8];
        for _ in 0..4 {
            let _ = cq.poll(&mut wc);
        }
    }
    let batch = usize::from((hdr[0] >> 1) & 7) + 1;
    let mut ev = [NO_EVENT; 8];
    // Bounded: at most 64 entries plus what CQ polls kept were written.
    for _ in 0..200 {
        if dev.poll_async_events(&mut ev[..batch]) == 0 {
            break;
        }
    }
    let _ = dev.aeq_overflowed();
    let _ = dev.async_events_lost();
    let _ = qp.destroy();
    let _ = cq.destroy();
    drop(qp);
    drop(cq);
    drop(pd);
});
