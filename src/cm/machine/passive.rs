//! The passive side: a REQ matched to a listener (or refused), the caller's
//! accept / reject, and the RTU that completes it.

use super::*;

impl<const C: usize, const L: usize> Cm<C, L> {
    /// The parameters [`accept`](Self::accept) will use, without sending:
    /// apply them to the QP first (Linux moves the passive QP to RTS before
    /// the REP, cma.c `cma_accept_ib`; spec §8 pitfall 17).
    pub fn accept_params(&self, id: ConnId, a: &AcceptParams<'_>) -> Result<ConnParams, CmError> {
        let c = self.find(id).and_then(|i| self.conn(i)).ok_or(CmError::NotFound)?;
        if !matches!(c.state, CmState::ReqRcvd | CmState::MraReqSent) {
            return Err(CmError::InvalidState(c.state));
        }
        fit24(a.qpn, "QPN wider than 24 bits")?;
        fit24(a.starting_psn, "starting PSN wider than 24 bits")?;
        if a.responder_resources > MAX_RD_ATOMIC || a.initiator_depth > MAX_RD_ATOMIC {
            return Err(CmError::Invalid("responder resources / initiator depth above 8"));
        }
        if a.private_data.len() > mad::pdata::REP {
            return Err(
                MadError::PrivateData { len: a.private_data.len(), max: mad::pdata::REP }.into()
            );
        }
        let r = &c.req;
        let hdr = CmaHdr::decode(&r.private_data).map_err(|_| CmError::Invalid("cma_hdr"))?;
        let path_mtu = rdma_cm::mtu_bytes(r.path_mtu).ok_or(CmError::Invalid("path MTU"))?;
        Ok(ConnParams {
            remote_qpn: r.local_qpn,
            local_qpn: a.qpn,
            rq_psn: a.starting_psn,
            sq_psn: r.starting_psn,
            path_mtu,
            retry_cnt: r.retry_count,
            rnr_retry: r.rnr_retry_count,
            // cma.c `cma_modify_qp_rts` / `cma_modify_qp_rtr`: the
            // application's initiator depth and responder resources, here
            // never above the peer's offer: its responder resources bound
            // the reads we may have outstanding, its initiator depth the
            // reads it will ever have outstanding at us (spec §6 "Rules";
            // librdmacm rdma_accept(3): responder_resources ≤ the remote's
            // initiator depth, initiator_depth ≤ the remote's responder
            // resources). The REP advertises the capped values.
            max_rd_atomic: a.initiator_depth.min(r.responder_resources),
            max_dest_rd_atomic: a.responder_resources.min(r.initiator_depth),
            local_ip: ip_of_gid(r.primary.remote_gid),
            remote_ip: ip_of_gid(r.primary.local_gid),
            remote_mac: c.peer.peer_mac,
            vlan: c.peer.vlan,
            // The receive path's hop limit, not the REQ's (cm.c
            // `cm_req_handler`; spec §6).
            hop_limit: c.peer.hop_limit,
            traffic_class: r.primary.traffic_class,
            flow_label: r.primary.flow_label,
            ack_timeout: r.primary.local_ack_timeout,
            local_port: service_id_parts(r.service_id).map_or(0, |(_, p)| p),
            remote_port: hdr.src_port,
        })
    }

    /// Accepts a REQ: sends the REP (cm.c `cm_format_rep`, cma.c
    /// `cma_accept_ib`), retransmitted every REQ Local CM Response Timeout,
    /// 1 + REQ max CM retries times (cm.c `cm_req_handler`).
    pub fn accept<T: MadTransport>(
        &mut self,
        now: u64,
        id: ConnId,
        a: &AcceptParams<'_>,
        t: &mut T,
    ) -> Result<ConnParams, CmError> {
        let params = self.accept_params(id, a)?;
        let i = self.find(id).ok_or(CmError::NotFound)?;
        let ack_delay = self.cfg.ca_ack_delay;
        let guid = self.cfg.ca_guid;
        let c = self.conn_mut(i).ok_or(CmError::NotFound)?;
        let rep = Rep {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            local_qkey: 0,
            local_qpn: a.qpn,
            vendor_id: 0,
            local_eecn: 0,
            starting_psn: a.starting_psn,
            responder_resources: params.max_dest_rd_atomic,
            initiator_depth: params.max_rd_atomic,
            target_ack_delay: ack_delay.min(31),
            failover_accepted: 0,
            flow_control: true,
            rnr_retry_count: a.rnr_retry_count.min(7),
            srq: a.srq,
            local_ca_guid: guid,
            private_data: mad::private_data(a.private_data)?,
        };
        let mut out = [0u8; MAD_SIZE];
        CmMad::new(c.tid, CmMsg::Rep(rep)).encode(&mut out)?;
        c.out = out;
        c.local_qpn = a.qpn;
        c.params = Some(params);
        c.interval = cm_ms(c.req.local_cm_response_timeout);
        c.max_retries = c.req.max_cm_retries;
        c.retries_left = c.max_retries;
        c.deadline = now.saturating_add(c.interval);
        c.av_timeout = c.req.primary.local_ack_timeout;
        c.state = CmState::RepSent;
        let peer = c.peer;
        self.send(t, &peer, &out);
        Ok(params)
    }

    /// Rejects a REQ (`rdma_reject`, passive, REQ_RCVD: Local Communication
    /// ID 0, Message REJected = REQ) or a REP (active, REP_RCVD: the QP
    /// could not be moved or the application refuses; Message REJected =
    /// REP; spec §4.3): REJ reason 28 with `private_data` (≤ 148 bytes)
    /// (cm.c `cm_format_rej`); the slot is free again.
    pub fn reject<T: MadTransport>(
        &mut self,
        id: ConnId,
        private_data: &[u8],
        t: &mut T,
    ) -> Result<(), CmError> {
        let (i, c) = self.lookup(id)?;
        let (local, msg) = match c.state {
            CmState::ReqRcvd | CmState::MraReqSent => (0, msg_response::REQ),
            CmState::RepRcvd => (c.local_id, msg_response::REP),
            s => return Err(CmError::InvalidState(s)),
        };
        let rej = Rej {
            local_comm_id: local,
            remote_comm_id: c.remote_id,
            msg_rejected: msg,
            ari_length: 0,
            reason: rej::CONSUMER_DEFINED,
            ari: [0; mad::pdata::REJ_ARI],
            private_data: mad::private_data(private_data)?,
        };
        self.send_msg(t, &c.peer, c.tid, CmMsg::Rej(rej))?;
        if let Some(s) = self.conns.get_mut(i) {
            *s = None;
        }
        Ok(())
    }

    /// cm.c `cm_req_handler` / `cm_match_req` and cma.c
    /// `cma_ib_req_handler` (spec §4.4 LISTEN row, §5.1).
    pub(super) fn on_req<T: MadTransport>(
        &mut self,
        now: u64,
        src: &MadAddr,
        tid: u64,
        r: &Req,
        t: &mut T,
    ) -> Result<Option<CmEvent>, Ignored> {
        if self.dup_req(r, t) {
            return Err(Ignored::Duplicate);
        }
        // Step 2, stale: REJ 10, then a DREQ to the old connection if it
        // is established (`ib_send_cm_dreq` acts only on one).
        if let Some(old) = self.stale_conn(r) {
            let res = self.rej_req(t, src, tid, r, rej::STALE_CONN, &[]);
            if let Some(c) = self.conn(old).copied().filter(|c| c.state == CmState::Established) {
                let _ = self.disconnect(now, ConnId(c.local_id), t);
            }
            return Err(res);
        }
        let (listen, hdr) = self.match_req(src, tid, r, t)?;
        let Some((slot, local_id)) = self.claim() else {
            return Err(Ignored::TableFull);
        };
        let mut user = [0u8; REQ_USER_DATA];
        user.copy_from_slice(&r.private_data[rdma_cm::CMA_HDR_SIZE..]);
        let info = ReqInfo {
            listen,
            hdr,
            local_port: service_id_parts(r.service_id).map_or(0, |(_, p)| p),
            private_data: user,
            remote_qpn: r.local_qpn,
            responder_resources: r.responder_resources,
            initiator_depth: r.initiator_depth,
            peer: *src,
        };
        let c = passive_conn(now, src, tid, r, local_id);
        if let Some(s) = self.conns.get_mut(slot) {
            *s = Some(c);
        }
        Ok(Some(CmEvent::ConnectRequest { id: ConnId(local_id), info }))
    }

    /// [`Self::on_req`] step 1, whether `r` is a duplicate: (remote comm
    /// id, remote CA GUID); connections in timewait left the table (cm.c
    /// `cm_enter_timewait` → `cm_remove_remote`). Answered with the MRA
    /// again in MRA_REQ_SENT, dropped in every other state (cm.c
    /// `cm_dup_req_handler`).
    pub(super) fn dup_req<T: MadTransport>(&mut self, r: &Req, t: &mut T) -> bool {
        let live = |c: &&Conn| c.state != CmState::Timewait;
        if let Some(c) = self.conns.iter().flatten().filter(live).find(|c| {
            !c.active && c.remote_id == r.local_comm_id && c.remote_guid == r.local_ca_guid
        }) {
            let c = *c;
            match c.state {
                CmState::MraReqSent => self.send(t, &c.peer, &c.out),
                // The caller has not answered the REQ within the active
                // side's REQ timeout (its retransmission is this duplicate):
                // RDMA-CM armed a delayed MRA when the REQ handler returned
                // (cma.c `cma_ib_req_handler` → `ib_send_cm_mra`; spec §4.4
                // REQ_RCVD → MRA_REQ_SENT), sent now (cm.c
                // `cm_dup_req_handler`); the active side then waits 65 s
                // more (cm.c `cm_mra_handler`).
                CmState::ReqRcvd => {
                    let _ = self.mra(ConnId(c.local_id), MRA_SERVICE_TIMEOUT, t);
                }
                _ => {}
            }
            return true;
        }
        false
    }

    /// Rejects the REQ `r` with `reason` and `ari`; what [`Self::on_req`]
    /// reports for it.
    pub(super) fn rej_req<T: MadTransport>(
        &mut self,
        t: &mut T,
        src: &MadAddr,
        tid: u64,
        r: &Req,
        reason: u16,
        ari: &[u8],
    ) -> Ignored {
        self.issue_rej(t, src, tid, 0, r.local_comm_id, msg_response::REQ, reason, ari);
        Ignored::Rejected(reason)
    }

    /// [`Self::on_req`] step 2: the slot of a connection (not in
    /// TIMEWAIT) that still has the REQ's (remote QPN, remote CA GUID),
    /// which makes the REQ stale (cm.c `cm_match_req`).
    fn stale_conn(&self, r: &Req) -> Option<usize> {
        let live = |c: &&Conn| c.state != CmState::Timewait;
        self.conns.iter().position(|c| {
            c.as_ref().filter(live).is_some_and(|c| {
                c.remote_qpn == Some(r.local_qpn) && c.remote_guid == r.local_ca_guid
            })
        })
    }

    /// [`Self::on_req`] steps 3 to 5: the listener the REQ is for and its
    /// RDMA-CM header, or the REJ it got.
    pub(super) fn match_req<T: MadTransport>(
        &mut self,
        src: &MadAddr,
        tid: u64,
        r: &Req,
        t: &mut T,
    ) -> Result<(ListenId, CmaHdr), Ignored> {
        // (3) a CM listener for the exact service id (cm.c `cm_find_listen`)
        if !self.listeners.iter().flatten().any(|l| l.sid == r.service_id) {
            return Err(self.rej_req(t, src, tid, r, rej::INVALID_SERVICE_ID, &[]));
        }
        // (4) the Primary Remote Port GID must be ours; ARI = our GID 0
        // (cm.c `cm_req_handler`).
        let ours = ip_of_gid(r.primary.remote_gid);
        if !self.cfg.local_ips.iter().flatten().any(|a| *a == ours) {
            let g0 = self.cfg.local_ips.iter().flatten().next().map(|a| gid_of(*a));
            let ari = g0.as_ref().map_or(&[][..], |g| &g[..]);
            return Err(self.rej_req(t, src, tid, r, rej::INVALID_GID, ari));
        }
        // (5) RDMA-CM: cma_hdr valid, a listener on that address (or the
        // wildcard) of the same family, RC, usable addresses, a path MTU the
        // QP can take; else REJ 28 with no private data (cma.c
        // `cma_ib_id_from_event`, `cma_match_private_data`,
        // `cma_ib_check_req_qp_type`, `validate_ipv4_net_dev`). Stricter
        // than Linux's route lookup: the cma_hdr destination must be the
        // address of the GID the REQ named, and of the source's family.
        let Ok(hdr) = CmaHdr::decode(&r.private_data) else {
            return Err(self.rej_req(t, src, tid, r, rej::CONSUMER_DEFINED, &[]));
        };
        let same_family =
            |a: IpAddr, b: IpAddr| matches!(a, IpAddr::V4(_)) == matches!(b, IpAddr::V4(_));
        let listen = self.listeners.iter().enumerate().find_map(|(i, l)| {
            let l = l.as_ref()?;
            let ok = l.sid == r.service_id
                && match l.addr {
                    Some(a) => a == hdr.dst,
                    None => true,
                }
                && same_family(hdr.dst, ours);
            ok.then_some(ListenId(i))
        });
        let Some(listen) = listen else {
            return Err(self.rej_req(t, src, tid, r, rej::CONSUMER_DEFINED, &[]));
        };
        // a UDP-port-space id is UD: a REQ for it has the wrong QP type
        // (cma.c `cma_ib_check_req_qp_type`)
        let ud_only = matches!(service_id_parts(r.service_id), Some((PortSpace::Udp, _)));
        if r.transport_type != 0
            || ud_only
            || rdma_cm::unusable_addr(hdr.src)
            || rdma_cm::unusable_addr(hdr.dst)
            || hdr.dst != ours
            || rdma_cm::mtu_bytes(r.path_mtu).is_none()
            || !same_family(hdr.src, hdr.dst)
        {
            return Err(self.rej_req(t, src, tid, r, rej::CONSUMER_DEFINED, &[]));
        }
        Ok((listen, hdr))
    }

    /// cm.c `cm_rtu_handler`.
    pub(super) fn on_rtu(&mut self, r: &Rtu) -> Result<Option<CmEvent>, Ignored> {
        let i = self.find(ConnId(r.remote_comm_id)).ok_or(Ignored::Stale)?;
        let c = self.conn_mut(i).ok_or(Ignored::Stale)?;
        if c.remote_id != r.local_comm_id || c.active {
            return Err(Ignored::Stale);
        }
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd => {
                c.state = CmState::Established;
                Ok(Some(CmEvent::Established { id: ConnId(c.local_id) }))
            }
            _ => Err(Ignored::Duplicate),
        }
    }
}
