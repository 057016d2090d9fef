//! The LAN side from a cold PF (issue #17): the admin-queue faults first,
//! each a failed `E810::bring_up` with its typed error and nothing left
//! allocated, then the bring-up the demo runs on, one scenario line per
//! step (`E810::bring_up_observed` reports each step as it completes). The
//! model process runs its PF cold, so the RDMA traffic of the verbs
//! scenarios flows only because the qset and the PE filter made here exist.
//!
//! `-append lan=hand` skips all of this and lets the verbs scenarios probe
//! with a hand-filled `LanInfo` instead (the path for hosts where something
//! else owns the LAN side); the model must then be warm:
//! `cargo xtask qemu --append lan=hand --model-arg --warm`.

use core::time::Duration;

use irdma::ice::bringup::Step;
use irdma::ice::cmd::CmdError;
use irdma::ice::{AqError, AqTimeouts, BringUpError, BringUpOptions, E810, Progress};
use irdma_boot::contract;
use irdma_hal::MmioBar;

use super::bringup::request_fault;
use super::{Msg, Outcome, Runner, msg};
use crate::bare::arch;
use crate::bare::hal::{self, BootHal};
use crate::bare::serial::println;

/// The PF the bring-up produced.
pub type Pf<'b> = E810<BootHal, &'b MmioBar>;

/// One scenario line per bring-up step, in the order they complete.
pub const STEPS: [(Progress, &str); 19] = [
    (Progress::Reset, "lan_reset"),
    (Progress::Identify, "lan_identify"),
    (Progress::AqInit, "lan_aq_init"),
    (Progress::Version, "lan_version"),
    (Progress::ClearPfConfig, "lan_clear_pf_config"),
    (Progress::ClearPxe, "lan_clear_pxe"),
    (Progress::Caps, "lan_caps"),
    (Progress::Ddp, "lan_ddp"),
    (Progress::SwitchConfig, "lan_switch_config"),
    (Progress::Scheduler, "lan_sched"),
    (Progress::MacRead, "lan_mac_read"),
    (Progress::MacConfig, "lan_mac_config"),
    (Progress::AddVsi, "lan_vsi"),
    (Progress::RdmaBranch, "lan_rdma_branch"),
    (Progress::SwitchRules, "lan_switch_rules"),
    (Progress::Link, "lan_link"),
    (Progress::Qset, "lan_qset"),
    (Progress::PeFilter, "lan_pe_filter"),
    (Progress::Probe, "device_probe"),
];

/// The admin-queue fault scenarios, run before the bring-up.
pub const FAULTS: [&str; 4] =
    ["lan_fault_aq_hang", "lan_fault_aq_crit", "lan_fault_aq_error", "lan_fault_reset_midway"];

/// What one of [`FAULTS`] arms (fault `kind` with `arg` and `codes`, see
/// [`contract::MB_FAULT_KIND`]) and the error its failed bring-up must
/// return (`expect`, described by `what`).
struct AqFault {
    kind: u32,
    arg: u32,
    codes: u32,
    expect: fn(&BringUpError) -> bool,
    what: &'static str,
}

/// Add VSI's opcode (the command `lan_fault_aq_error` fails).
const ADD_VSI: u16 = 0x0210;

/// The faults of [`FAULTS`], in its order.
const FAULT_CASES: [AqFault; 4] = [
    // Get Version and Clear PF config pass, then the firmware goes quiet
    // (Clear PXE never completes).
    AqFault {
        kind: contract::FAULT_AQ_HANG,
        arg: 2,
        codes: 0,
        expect: |e| {
            matches!(
                e,
                BringUpError::Command(_, CmdError::Aq(AqError::Timeout { critical: false, .. }))
            )
        },
        what: "a non-critical AQ timeout",
    },
    AqFault {
        kind: contract::FAULT_AQ_CRIT,
        arg: 0,
        codes: 0,
        expect: |e| {
            matches!(
                e,
                BringUpError::Command(
                    Step::AdminQueue,
                    CmdError::Aq(AqError::Timeout { critical: true, .. })
                )
            )
        },
        what: "a critical AQ timeout in the AQ step",
    },
    // Add VSI answered with ENOSPC (16): the step that failed and the
    // firmware's code come back; nothing after Add VSI ran.
    AqFault {
        kind: contract::FAULT_AQ_FAIL_OPCODE,
        arg: 0,
        codes: (ADD_VSI as u32) << 16 | 16,
        expect: |e| {
            matches!(
                e,
                BringUpError::Command(
                    Step::AddVsi,
                    CmdError::Aq(AqError::Firmware { opcode: ADD_VSI, code: 16 })
                )
            )
        },
        what: "Add VSI to fail with ENOSPC",
    },
    // A global reset at the 8th command (mid-way, after the caps): that
    // command never completes; the next bring-up waits the reset out.
    AqFault {
        kind: contract::FAULT_AQ_RESET,
        arg: 7,
        codes: 0,
        expect: |e| matches!(e, BringUpError::Command(_, CmdError::Aq(AqError::Timeout { .. }))),
        what: "an AQ timeout at the reset",
    },
];

/// Admin-queue command timeout while a fault is armed (a hang or CRIT waits
/// it out once or twice: the failing command, then Queue Shutdown).
const FAULT_AQ_TIMEOUT: Duration = Duration::from_millis(200);

fn options(command_timeout: Duration) -> BringUpOptions<'static> {
    let mut o = BringUpOptions {
        probe: super::verbs::probe_options(),
        msix: super::irq::msix(),
        link_wait: Duration::from_secs(2),
        ..Default::default()
    };
    o.aq.timeouts = AqTimeouts { command: command_timeout, ..AqTimeouts::default() };
    o
}

/// Skips every line of this module (`why`), including `device_probe`.
pub fn skip_all(r: &mut Runner, why: &Msg) {
    for n in FAULTS.iter().chain(STEPS.iter().map(|(_, n)| n)) {
        r.run(n, || Ok(Outcome::Skip(why.clone())));
    }
}

/// Runs the fault scenarios, then the bring-up, one line per step; returns
/// the PF for the verbs scenarios (`Err`: why there is none).
pub fn run<'b>(r: &mut Runner, bar: Result<&'b MmioBar, Msg>) -> Result<Pf<'b>, Msg> {
    let bar = match bar {
        Ok(b) => b,
        Err(why) => {
            skip_all(r, &why);
            return Err(why);
        }
    };
    for (name, case) in FAULTS.iter().zip(&FAULT_CASES) {
        r.run(name, || {
            arm(bar, case.kind, case.arg, case.codes)?;
            let e = failed_bring_up(bar)?;
            ensure!((case.expect)(&e), "expected {}, got {e:?}", case.what);
            println!("  {name}: {e:?}");
            Ok(Outcome::Pass)
        });
    }
    bring_up(r, bar)
}

/// Arms one admin-queue fault (after clearing any left over).
fn arm(bar: &MmioBar, kind: u32, arg: u32, codes: u32) -> Result<(), Msg> {
    ensure!(request_fault(bar, contract::FAULT_CLEAR, 0, 0, 0)? == 0, "CLEAR refused");
    let (major, minor) = ((codes >> 16) as u16, codes as u16);
    ensure!(request_fault(bar, kind, arg, major, minor)? == 0, "the model refused fault {kind}");
    Ok(())
}

/// A bring-up that must fail: returns its error once the fault is cleared
/// and the DMA pool is back where it was (the failed bring-up undid
/// everything it had done).
fn failed_bring_up(bar: &MmioBar) -> Result<BringUpError, Msg> {
    let (live, bad) = (hal::stats().live_pages, hal::bad_frees());
    let r = Pf::bring_up(bar, super::verbs::PROFILE, options(FAULT_AQ_TIMEOUT));
    ensure!(request_fault(bar, contract::FAULT_CLEAR, 0, 0, 0)? == 0, "CLEAR refused");
    let e = match r {
        Ok(pf) => {
            let _ = pf.shut_down();
            bail!("the bring-up succeeded through the injected fault")
        }
        Err(e) => e,
    };
    let now = hal::stats().live_pages;
    ensure!(now == live, "after {e:?}: {now} live pool pages, {live} before");
    ensure!(hal::bad_frees() == bad, "the pool refused a free");
    Ok(e)
}

/// The demo's bring-up: one line per step as it completes; on a failure
/// the step that failed gets the error and the rest are skipped.
fn bring_up<'b>(r: &mut Runner, bar: &'b MmioBar) -> Result<Pf<'b>, Msg> {
    let (live, bad) = (hal::stats().live_pages, hal::bad_frees());
    let mut next = 0usize;
    let mut t0 = arch::rdtsc();
    let res = Pf::bring_up_observed(
        bar,
        super::verbs::PROFILE,
        options(AqTimeouts::default().command),
        &mut |p| {
            // Lines in order; a step reported again (a second qset) is not.
            let Some(i) = STEPS.iter().position(|(q, _)| *q == p) else { return };
            if i < next {
                return;
            }
            let now = arch::rdtsc();
            for (_, skipped) in &STEPS[next..i] {
                let why = msg(format_args!("not reported before {p:?}"));
                r.report(skipped, Err(why), 0);
            }
            r.report(STEPS[i].1, Ok(Outcome::Pass), now.wrapping_sub(t0));
            next = i + 1;
            t0 = arch::rdtsc();
        },
    );
    let pf = match res {
        Ok(pf) => pf,
        Err(e) => {
            let now = hal::stats().live_pages;
            let why = msg(format_args!(
                "{e:?} ({now} live pool pages, {live} before; bad frees {})",
                hal::bad_frees() - bad
            ));
            if let Some((_, name)) = STEPS.get(next) {
                r.report(name, Err(why.clone()), arch::rdtsc().wrapping_sub(t0));
            }
            for (_, name) in STEPS.iter().skip(next + 1) {
                let skip = msg(format_args!("the bring-up stopped before this step"));
                r.report(name, Ok(Outcome::Skip(skip)), 0);
            }
            return Err(why);
        }
    };
    if next != STEPS.len() {
        // Every step must have been reported by a successful bring-up.
        for (_, name) in &STEPS[next..] {
            r.report(name, Err(msg(format_args!("not reported by a successful bring-up"))), 0);
        }
    }
    let v = pf.lan.version();
    let port = pf.lan.port();
    let f = pf.device.footprint();
    println!(
        "  device_probe: through the LAN layer: firmware {}.{} API {}.{}, lport {} sw_id {:#x}, \
         MAC {:02x?}, VSI {}, link {}; RDMA firmware {}.{}, qs_handle {}, {} KiB of DMA",
        v.fw[1],
        v.fw[2],
        v.api[1],
        v.api[2],
        port.lport,
        port.sw_id,
        port.mac.unwrap_or_default(),
        pf.lan.vsi_num(),
        if pf.link.up() { "up" } else { "down" },
        pf.device.fw_version().0,
        pf.device.fw_version().1,
        pf.device.qs_handle(),
        f.current_bytes / 1024
    );
    Ok(pf)
}
