//! Established connections and their end: DREQ / DREP both ways and
//! timewait.

use super::*;

impl<const C: usize, const L: usize> Cm<C, L> {
    /// Passive: the first packet arrived on the QP before the RTU (COMM_EST,
    /// cm.c `cm_establish`): stops the REP timer.
    pub fn established(&mut self, id: ConnId) -> Result<(), CmError> {
        let i = self.find(id).ok_or(CmError::NotFound)?;
        let c = self.conn_mut(i).ok_or(CmError::NotFound)?;
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd => {
                c.state = CmState::Established;
                Ok(())
            }
            CmState::Established => Ok(()),
            s => Err(CmError::InvalidState(s)),
        }
    }

    /// `rdma_disconnect`: from ESTABLISHED sends a DREQ (move the QP to
    /// ERROR first), retransmitted like the REQ/REP; from DREQ_RCVD sends
    /// the DREP and enters timewait; in DREQ_SENT/TIMEWAIT nothing to do.
    pub fn disconnect<T: MadTransport>(
        &mut self,
        now: u64,
        id: ConnId,
        t: &mut T,
    ) -> Result<(), CmError> {
        let (i, c) = self.lookup(id)?;
        match c.state {
            CmState::Established => {
                let dreq = Dreq {
                    local_comm_id: c.local_id,
                    remote_comm_id: c.remote_id,
                    remote_qpn: c.remote_qpn.unwrap_or(0),
                    private_data: [0; mad::pdata::DREQ],
                };
                // A new TID for the DREQ (cm.c `cm_form_tid`).
                let tid = mad::form_tid(self.cfg.hi_tid, c.local_id);
                let out = self.send_msg(t, &c.peer, tid, CmMsg::Dreq(dreq))?;
                if let Some(c) = self.conn_mut(i) {
                    c.out = out;
                    c.state = CmState::DreqSent;
                    c.retries_left = c.max_retries;
                    c.deadline = now.saturating_add(c.interval);
                }
                Ok(())
            }
            CmState::DreqRcvd => {
                self.send_drep(t, &c)?;
                self.enter_timewait(i, now);
                Ok(())
            }
            CmState::DreqSent | CmState::Timewait => Ok(()),
            s => Err(CmError::InvalidState(s)),
        }
    }

    pub(super) fn send_drep<T: MadTransport>(
        &mut self,
        t: &mut T,
        c: &Conn,
    ) -> Result<(), MadError> {
        let drep = Drep {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            private_data: [0; mad::pdata::DREP],
        };
        self.send_msg(t, &c.peer, c.dreq_tid, CmMsg::Drep(drep)).map(|_| ())
    }

    /// Timewait lasts ms(av.timeout) (cm.c `cm_enter_timewait`).
    pub(super) fn enter_timewait(&mut self, i: usize, now: u64) {
        if let Some(c) = self.conn_mut(i) {
            c.state = CmState::Timewait;
            c.deadline = now.saturating_add(cm_ms(c.av_timeout));
        }
    }

    /// cm.c `cm_dreq_handler` (spec §4.5).
    pub(super) fn on_dreq<T: MadTransport>(
        &mut self,
        src: &MadAddr,
        tid: u64,
        r: &Dreq,
        t: &mut T,
    ) -> Result<Option<CmEvent>, Ignored> {
        let found = self
            .find(ConnId(r.remote_comm_id))
            .filter(|&i| self.conn(i).is_some_and(|c| c.remote_id == r.local_comm_id));
        let Some(i) = found else {
            // unknown connection: DREP anyway, IDs swapped, TID echoed
            // (cm.c `cm_issue_drep`)
            let drep = Drep {
                local_comm_id: r.remote_comm_id,
                remote_comm_id: r.local_comm_id,
                private_data: [0; mad::pdata::DREP],
            };
            let _ = self.send_msg(t, src, tid, CmMsg::Drep(drep));
            return Err(Ignored::Stale);
        };
        let c = *self.conn(i).ok_or(Ignored::Stale)?;
        if r.remote_qpn != c.local_qpn {
            return Err(Ignored::WrongQpn);
        }
        let id = ConnId(c.local_id);
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd | CmState::Established | CmState::DreqSent => {
                if let Some(c) = self.conn_mut(i) {
                    c.state = CmState::DreqRcvd;
                    c.dreq_tid = tid;
                }
                Ok(Some(CmEvent::Disconnected { id, timed_out: false }))
            }
            CmState::Timewait => {
                // our DREP was lost
                let mut c = c;
                c.dreq_tid = tid;
                let _ = self.send_drep(t, &c);
                Err(Ignored::Duplicate)
            }
            CmState::DreqRcvd => Err(Ignored::Duplicate),
            _ => Err(Ignored::Stale),
        }
    }

    /// cm.c `cm_drep_handler`.
    pub(super) fn on_drep(&mut self, now: u64, r: &Drep) -> Result<Option<CmEvent>, Ignored> {
        let i = self
            .find(ConnId(r.remote_comm_id))
            .filter(|&i| self.conn(i).is_some_and(|c| c.remote_id == r.local_comm_id))
            .ok_or(Ignored::Stale)?;
        let c = *self.conn(i).ok_or(Ignored::Stale)?;
        match c.state {
            CmState::DreqSent => {
                self.enter_timewait(i, now);
                Ok(Some(CmEvent::Disconnected { id: ConnId(c.local_id), timed_out: false }))
            }
            CmState::DreqRcvd => {
                self.enter_timewait(i, now);
                Ok(None)
            }
            _ => Err(Ignored::Stale),
        }
    }
}
