//! The flight recorder: a fixed ring of the device's recent control-path
//! events (CQP ops with opcode, result and codes; probe steps; asynchronous
//! events; QP state changes; flushes; timeouts), kept on the [`Device`] so
//! that firmware with no debugger and no log file can still say what led to
//! a failure.
//!
//! The enums the events carry ([`ProbeStep`], [`QpState`]) are defined here,
//! below the device and the verbs that re-export them, so the recorder
//! imports nothing above it (issue #29).
//!
//! Recording copies a few words under a spin lock — no formatting, no
//! allocation — and happens only on the control path (the data path never
//! records). Read it with [`Device::flight_recorder`] (oldest first) or,
//! with the `defmt` feature, [`Device::log_flight_recorder`].
//!
//! [`Device`]: crate::device::Device
//! [`Device::flight_recorder`]: crate::device::Device::flight_recorder
//! [`Device::log_flight_recorder`]: crate::device::Device::log_flight_recorder

use core::fmt::{self, Display, Formatter};

/// The bring-up step a [`ProbeError`](crate::device::ProbeError) happened
/// in (spec control-path §9.2); re-exported as `device::ProbeStep`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ProbeStep {
    /// The [`LanInfo`](crate::lan::LanInfo) was refused.
    LanInfo,
    /// §9.2 step 1: GLPE_CPUSTATUS0/1/2 == 0x80.
    FirmwareReady,
    /// Step 2: GLPCI_LBARCTRL.PE_DB_SIZE.
    DoorbellSize,
    /// Steps 3–4: memory and the CQP create handshake.
    CqpCreate,
    /// Step 5: QUERY_RDMA_FEATURES.
    QueryFeatures,
    /// Step 6: QUERY_FPM_VAL.
    QueryFpm,
    /// Step 6: choosing the counts.
    SizeHmc,
    /// Step 6: COMMIT_FPM_VAL.
    CommitFpm,
    /// Step 7: backing and programming the SDs.
    BackHmc,
    /// Step 8: SHMC_PAGES_ALLOCATED.
    ShmcPagesAllocated,
    /// Step 9: the CCQ.
    CreateCcq,
    /// Step 10: CEQ 0.
    CreateCeq,
    /// Step 11: the PBLE pool and its first chunk.
    PblePool,
    /// Step 12: the AEQ.
    CreateAeq,
    /// Step 13: the work-scheduler tree (root, VSI node, TC leaf).
    WorkScheduler,
    /// Software tables sized from the commit.
    Resources,
    /// Turning the VSI's RDMA filter on (LAN side).
    RdmaFilter,
}

impl Display for ProbeStep {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProbeStep::LanInfo => "LAN information",
            ProbeStep::FirmwareReady => "firmware ready",
            ProbeStep::DoorbellSize => "doorbell size",
            ProbeStep::CqpCreate => "CQP create",
            ProbeStep::QueryFeatures => "QUERY_RDMA_FEATURES",
            ProbeStep::QueryFpm => "QUERY_FPM_VAL",
            ProbeStep::SizeHmc => "HMC sizing",
            ProbeStep::CommitFpm => "COMMIT_FPM_VAL",
            ProbeStep::BackHmc => "HMC backing",
            ProbeStep::ShmcPagesAllocated => "SHMC_PAGES_ALLOCATED",
            ProbeStep::CreateCcq => "CCQ create",
            ProbeStep::CreateCeq => "CEQ create",
            ProbeStep::PblePool => "PBLE pool",
            ProbeStep::CreateAeq => "AEQ create",
            ProbeStep::WorkScheduler => "work-scheduler tree",
            ProbeStep::Resources => "resource tables",
            ProbeStep::RdmaFilter => "RDMA filter",
        })
    }
}

/// IB QP states the driver drives (spec §7.4); re-exported as
/// `verbs::QpState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum QpState {
    /// Created, or reset.
    Reset,
    /// INIT.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Error: everything outstanding completes with a flush status.
    Error,
}

/// Records kept; older ones are overwritten.
pub const FLIGHT_EVENTS: usize = 64;

/// How a CQP op ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CqpOutcome {
    /// Completed without error.
    Ok,
    /// The device reported an error with these (major, minor) codes.
    Failed {
        /// Major error code.
        major: u16,
        /// Minor error code.
        minor: u16,
    },
    /// No completion within the configured wait (`CqpError::Timeout`).
    Timeout,
    /// Any other engine error (ring full, protocol, encode).
    Error,
}

/// One recorded event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FlightEvent {
    /// A CQP op completed (or failed) with this opcode (spec control-path
    /// §4.1) and outcome.
    Cqp {
        /// CQP opcode.
        opcode: u8,
        /// What happened.
        outcome: CqpOutcome,
    },
    /// Probe started a step (spec control-path §9.2).
    ProbeStep {
        /// The step.
        step: ProbeStep,
    },
    /// Probe ended: `None` = success, else the step that failed.
    Probe {
        /// The failing step, if any.
        failed_at: Option<ProbeStep>,
    },
    /// An asynchronous event was consumed from the AEQ.
    AsyncEvent {
        /// AE code (user.h: IRDMA_AE_*).
        ae_code: u16,
        /// AESRC.
        ae_src: u8,
        /// QP or CQ id.
        id: u32,
    },
    /// A QP changed state (by `modify`, or by the AEQ moving it to ERROR).
    QpState {
        /// QP number.
        qpn: u32,
        /// The new state.
        state: QpState,
    },
    /// A QP's queues were flushed (FLUSH_WQES) with these minor codes.
    Flush {
        /// QP number.
        qpn: u32,
        /// SQ flush minor code.
        sq_code: u16,
        /// RQ flush minor code.
        rq_code: u16,
    },
}

/// An event and its sequence number (counts every event ever recorded, so
/// a gap shows how many were overwritten).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FlightRecord {
    /// Sequence number, from 0.
    pub seq: u32,
    /// What happened.
    pub event: FlightEvent,
}

const EMPTY: FlightRecord = FlightRecord { seq: 0, event: FlightEvent::Probe { failed_at: None } };

/// The ring itself (behind the device's lock).
#[derive(Clone)]
pub(crate) struct FlightRecorder {
    recs: [FlightRecord; FLIGHT_EVENTS],
    /// Events recorded so far (the next sequence number).
    next: u32,
}

impl FlightRecorder {
    pub(crate) const fn new() -> Self {
        FlightRecorder { recs: [EMPTY; FLIGHT_EVENTS], next: 0 }
    }

    /// Records `event`, overwriting the oldest when full.
    #[inline(never)] // control path only, called from many places (code size)
    pub(crate) fn push(&mut self, event: FlightEvent) {
        let seq = self.next;
        if let Some(slot) = self.recs.get_mut(seq as usize % FLIGHT_EVENTS) {
            *slot = FlightRecord { seq, event };
        }
        self.next = seq.wrapping_add(1);
    }

    /// A copy to read from, oldest first.
    pub(crate) fn snapshot(&self) -> FlightIter {
        let len = (self.next as usize).min(FLIGHT_EVENTS);
        let start = if (self.next as usize) < FLIGHT_EVENTS { 0 } else { self.next as usize };
        FlightIter { recs: self.recs, start, len, pos: 0 }
    }
}

/// The recorded events, oldest first (a copy: recording goes on meanwhile).
#[derive(Clone)]
pub struct FlightIter {
    recs: [FlightRecord; FLIGHT_EVENTS],
    start: usize,
    len: usize,
    pos: usize,
}

impl Iterator for FlightIter {
    type Item = FlightRecord;
    fn next(&mut self) -> Option<FlightRecord> {
        if self.pos >= self.len {
            return None;
        }
        let r = self.recs.get(self.start.wrapping_add(self.pos) % FLIGHT_EVENTS).copied();
        self.pos += 1;
        r
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.len.saturating_sub(self.pos);
        (n, Some(n))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    fn ev(i: u32) -> FlightEvent {
        FlightEvent::AsyncEvent { ae_code: i as u16, ae_src: 0, id: i }
    }

    #[test]
    fn keeps_the_newest_in_order_and_counts_every_event() {
        let mut r = FlightRecorder::new();
        assert_eq!(r.snapshot().count(), 0);
        for i in 0..3 {
            r.push(ev(i));
        }
        let got: Vec<u32> = r.snapshot().map(|x| x.seq).collect();
        assert_eq!(got, [0, 1, 2]);
        for i in 3..(FLIGHT_EVENTS as u32 * 2 + 5) {
            r.push(ev(i));
        }
        let got: Vec<FlightRecord> = r.snapshot().collect();
        assert_eq!(got.len(), FLIGHT_EVENTS);
        let first = FLIGHT_EVENTS as u32 + 5;
        for (k, x) in got.iter().enumerate() {
            assert_eq!(x.seq, first + k as u32);
            assert_eq!(x.event, ev(first + k as u32));
        }
    }
}
