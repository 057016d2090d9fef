//! The active side: `connect` (REQ), `cancel`, the REP that answers it, RTU.

use super::*;

impl<const C: usize, const L: usize> Cm<C, L> {
    /// Opens a connection: builds and sends the REQ (cm.c `cm_format_req`
    /// with the values cma.c `cma_connect_ib` gives it; spec §3.1, §5),
    /// retransmitted every 2 × PLT + remote CM response timeout, 1 + max CM
    /// retries times in all (cm.c `ib_send_cm_req`).
    pub fn connect<T: MadTransport>(
        &mut self,
        now: u64,
        p: &ConnectParams<'_>,
        t: &mut T,
    ) -> Result<ConnId, CmError> {
        fit24(p.qpn, "QPN wider than 24 bits")?;
        fit24(p.starting_psn, "starting PSN wider than 24 bits")?;
        if p.responder_resources > MAX_RD_ATOMIC || p.initiator_depth > MAX_RD_ATOMIC {
            return Err(CmError::Invalid("responder resources / initiator depth above 8"));
        }
        let mtu = rdma_cm::mtu_enum(p.path_mtu).ok_or(CmError::Invalid("path MTU"))?;
        let pd = cma_private::<{ mad::pdata::REQ }>(p.src_port, &p.peer, p.private_data)?;
        let tm = self.cfg.timing;
        if tm.packet_life_time > 31 || tm.cm_response_timeout > 31 || tm.max_cm_retries > 15 {
            return Err(CmError::Invalid("CM timing field width"));
        }
        let (slot, local_id) = self.claim().ok_or(CmError::TableFull)?;
        let req = self.req_of(p, local_id, mtu, pd);
        let interval = 2 * cm_ms(tm.packet_life_time) + cm_ms(tm.cm_response_timeout);
        let o = Opening {
            state: CmState::ReqSent,
            local_id,
            local_qpn: p.qpn,
            peer: p.peer,
            req,
            interval,
            av_timeout: tm.packet_life_time + 1,
        };
        self.open(now, slot, o, CmMsg::Req(req), t)
    }

    /// The REQ of [`Cm::connect`] (cm.c `cm_format_req`; cma.c
    /// `cma_connect_ib`).
    fn req_of(
        &self,
        p: &ConnectParams<'_>,
        local_id: u32,
        mtu: u8,
        pd: [u8; mad::pdata::REQ],
    ) -> Req {
        let tm = self.cfg.timing;
        Req {
            local_comm_id: local_id,
            vendor_id: 0,
            service_id: service_id(p.port_space, p.dst_port),
            local_ca_guid: self.cfg.ca_guid,
            local_qkey: 0,
            local_qpn: p.qpn,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: tm.cm_response_timeout,
            transport_type: 0,
            flow_control: true,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: tm.cm_response_timeout,
            retry_count: p.retry_count.min(7),
            pkey: 0xFFFF,
            path_mtu: mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count.min(7),
            max_cm_retries: tm.max_cm_retries,
            srq: p.srq,
            ext_transport_type: 0,
            primary: self.primary_path(p),
            alternate: ReqPath::default(),
            private_data: pd,
        }
    }

    /// The REQ's primary path: LIDs permissive and subnet local 0 when the
    /// hop limit is above 1 (cm.c `cm_format_req`); the flow label from
    /// the ports (cma.c `cma_get_roce_udp_flow_label`); the ACK timeout
    /// (cm.c `cm_ack_timeout` with the CA ACK delay).
    fn primary_path(&self, p: &ConnectParams<'_>) -> ReqPath {
        let far = p.peer.hop_limit > 1;
        let lid = if far { 0xFFFF } else { 0 };
        ReqPath {
            local_lid: lid,
            remote_lid: lid,
            local_gid: gid_of(p.peer.local_ip),
            remote_gid: gid_of(p.peer.peer_ip),
            flow_label: rdma_cm::flow_label(p.src_port, p.dst_port),
            packet_rate: 0,
            traffic_class: p.peer.traffic_class,
            hop_limit: p.peer.hop_limit,
            sl: 0,
            subnet_local: !far,
            local_ack_timeout: cm_ack_timeout(
                self.cfg.ca_ack_delay,
                self.cfg.timing.packet_life_time,
            ),
            sap_supported: false,
        }
    }

    /// Active: gives up an outstanding REQ (the application destroys the
    /// id): REJ reason 4 (timeout) with our CA GUID as the 8-byte ARI, so
    /// the passive side can match it (cm.c `cm_destroy_id` in REQ_SENT /
    /// MRA_REQ_RCVD; spec §3.4, §8 pitfall 12); the slot is free again.
    /// An outstanding SIDR_REQ ([`sidr_resolve`](Self::sidr_resolve)) is
    /// dropped without a message (cm.c `cm_destroy_id` in SIDR_REQ_SENT).
    pub fn cancel<T: MadTransport>(&mut self, id: ConnId, t: &mut T) -> Result<(), CmError> {
        let (i, c) = self.lookup(id)?;
        if c.state == CmState::SidrReqSent {
            if let Some(s) = self.conns.get_mut(i) {
                *s = None;
            }
            return Ok(());
        }
        if !matches!(c.state, CmState::ReqSent | CmState::MraReqRcvd) {
            return Err(CmError::InvalidState(c.state));
        }
        let mut ari = [0u8; mad::pdata::REJ_ARI];
        ari[..8].copy_from_slice(&self.cfg.ca_guid.to_be_bytes());
        let rej = Rej {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            msg_rejected: msg_response::OTHER,
            ari_length: 8,
            reason: rej::TIMEOUT,
            ari,
            private_data: [0; mad::pdata::REJ],
        };
        self.send_msg(t, &c.peer, c.tid, CmMsg::Rej(rej))?;
        if let Some(s) = self.conns.get_mut(i) {
            *s = None;
        }
        Ok(())
    }

    /// Active: the QP is in RTS with the `Connected` parameters; sends the
    /// RTU once (cma.c `cma_rep_recv`) and the connection is established.
    pub fn ready_to_use<T: MadTransport>(&mut self, id: ConnId, t: &mut T) -> Result<(), CmError> {
        let (i, c) = self.lookup_in(id, CmState::RepRcvd)?;
        self.send_rtu(t, &c)?;
        if let Some(c) = self.conn_mut(i) {
            c.state = CmState::Established;
        }
        Ok(())
    }

    pub(super) fn send_rtu<T: MadTransport>(
        &mut self,
        t: &mut T,
        c: &Conn,
    ) -> Result<(), MadError> {
        let rtu = Rtu {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            private_data: [0; mad::pdata::RTU],
        };
        self.send_msg(t, &c.peer, c.tid, CmMsg::Rtu(rtu)).map(|_| ())
    }

    /// cm.c `cm_rep_handler` / `cm_dup_rep_handler` (spec §4.3).
    pub(super) fn on_rep<T: MadTransport>(
        &mut self,
        src: &MadAddr,
        tid: u64,
        r: &Rep,
        t: &mut T,
    ) -> Result<Option<CmEvent>, Ignored> {
        let Some(i) = self.find(ConnId(r.remote_comm_id)) else {
            return Err(Ignored::Stale);
        };
        let Some(c) = self.conn(i).copied() else {
            return Err(Ignored::Stale);
        };
        if !c.active {
            return Err(Ignored::Stale);
        }
        match c.state {
            CmState::ReqSent | CmState::MraReqRcvd => {}
            // our RTU was lost: send it again (cm.c `cm_dup_rep_handler`)
            CmState::Established if c.remote_id == r.local_comm_id => {
                let _ = self.send_rtu(t, &c);
                return Err(Ignored::Duplicate);
            }
            // the passive side's REP timer ran out while our caller has not
            // sent the RTU yet: answer with the MRA RDMA-CM armed when the
            // REP arrived (Message MRAed = REP, cm.c `cm_dup_rep_handler` in
            // MRA_REP_SENT; spec §4.3), so it waits 65 s more instead of
            // spending its retries
            CmState::RepRcvd if c.remote_id == r.local_comm_id => {
                let _ = self.send_mra(t, &c, msg_response::REP);
                return Err(Ignored::Duplicate);
            }
            _ => return Err(Ignored::Stale),
        }
        // stale: the peer's (QPN, GUID) still connected elsewhere → REJ 10
        // for the REP (cm.c `cm_rep_handler`)
        if self.conns.iter().flatten().any(|o| {
            o.local_id != c.local_id
                && o.state != CmState::Timewait
                && o.remote_qpn == Some(r.local_qpn)
                && o.remote_guid == r.local_ca_guid
        }) {
            self.issue_rej(
                t,
                src,
                tid,
                c.local_id,
                r.local_comm_id,
                msg_response::REP,
                rej::STALE_CONN,
                &[],
            );
            return Err(Ignored::Rejected(rej::STALE_CONN));
        }
        let params = rep_params(&c, r);
        if let Some(c) = self.conn_mut(i) {
            c.state = CmState::RepRcvd;
            c.remote_id = r.local_comm_id;
            c.remote_guid = r.local_ca_guid;
            c.remote_qpn = Some(r.local_qpn);
            c.params = Some(params);
            c.av_timeout = params.ack_timeout;
        }
        Ok(Some(CmEvent::Connected {
            id: ConnId(c.local_id),
            params,
            private_data: r.private_data,
        }))
    }
}

/// The QP attributes an accepted REP gives the active side (cma.c
/// `cma_modify_qp_rtr` / `cma_modify_qp_rts` through cm.c
/// `cm_init_qp_rtr_attr` / `cm_init_qp_rts_attr`).
fn rep_params(c: &Conn, r: &Rep) -> ConnParams {
    let req = c.req;
    let hdr = CmaHdr::decode(&req.private_data).ok();
    let plt = c.av_timeout.saturating_sub(1);
    ConnParams {
        remote_qpn: r.local_qpn,
        local_qpn: c.local_qpn,
        rq_psn: req.starting_psn,
        sq_psn: r.starting_psn,
        path_mtu: rdma_cm::mtu_bytes(req.path_mtu).unwrap_or(1024),
        retry_cnt: req.retry_count,
        rnr_retry: r.rnr_retry_count,
        // crossed, and never more than we offered (spec §6)
        max_rd_atomic: r.responder_resources.min(req.initiator_depth),
        max_dest_rd_atomic: r.initiator_depth.min(req.responder_resources),
        local_ip: c.peer.local_ip,
        remote_ip: c.peer.peer_ip,
        remote_mac: c.peer.peer_mac,
        vlan: c.peer.vlan,
        hop_limit: c.peer.hop_limit,
        traffic_class: c.peer.traffic_class,
        flow_label: req.primary.flow_label,
        ack_timeout: cm_ack_timeout(r.target_ack_delay, plt),
        local_port: hdr.map_or(0, |h| h.src_port),
        remote_port: service_id_parts(req.service_id).map_or(0, |(_, p)| p),
    }
}
