//! SIDR: resolving a UD service (SIDR_REQ / SIDR_REP) on either side.

use super::*;

impl<const C: usize, const L: usize> Cm<C, L> {
    /// Active SIDR: asks the peer for the UD QPN and Q_Key behind
    /// `port_space`:`dst_port` (cma.c `cma_resolve_ib_udp`, cm.c
    /// `ib_send_cm_sidr_req` / `cm_format_sidr_req`): a SIDR_REQ with our
    /// new id as Request ID, P_Key 0xFFFF, the `cma_hdr` and `private_data`,
    /// TID as for a REQ; resent identically every ms(CM response timeout)
    /// (RDMA-CM: 4096 ms), 1 + max CM retries times in all. The answer is
    /// [`CmEvent::SidrResolved`], [`CmEvent::SidrRejected`] or
    /// [`CmEvent::TimedOut`]; the slot is then free.
    pub fn sidr_resolve<T: MadTransport>(
        &mut self,
        now: u64,
        p: &SidrParams<'_>,
        t: &mut T,
    ) -> Result<ConnId, CmError> {
        if !matches!(p.port_space, PortSpace::Udp | PortSpace::Ib) {
            return Err(CmError::Invalid("SIDR needs the UDP or IB port space"));
        }
        let pd = cma_private::<{ mad::pdata::SIDR_REQ }>(p.src_port, &p.peer, p.private_data)?;
        let tm = self.cfg.timing;
        if tm.cm_response_timeout > 31 || tm.max_cm_retries > 15 {
            return Err(CmError::Invalid("CM timing field width"));
        }
        let (slot, local_id) = self.claim().ok_or(CmError::TableFull)?;
        let sid = service_id(p.port_space, p.dst_port);
        let req = SidrReq { request_id: local_id, pkey: 0xFFFF, service_id: sid, private_data: pd };
        let o = Opening {
            state: CmState::SidrReqSent,
            local_id,
            local_qpn: 0,
            peer: p.peer,
            req: sidr_req_of(sid),
            interval: cm_ms(tm.cm_response_timeout),
            av_timeout: 0,
        };
        self.open(now, slot, o, CmMsg::SidrReq(req), t)
    }

    /// Passive SIDR: answers a [`CmEvent::SidrRequest`] with success, our
    /// UD QPN and Q_Key and `private_data` (cma.c `rdma_accept` on a UD id
    /// → `cma_send_sidr_rep`; cm.c `cm_format_sidr_rep`: the SIDR_REQ's
    /// TID, Request ID and Service ID echoed).
    pub fn sidr_accept<T: MadTransport>(
        &mut self,
        now: u64,
        id: ConnId,
        a: &SidrAcceptParams<'_>,
        t: &mut T,
    ) -> Result<(), CmError> {
        fit24(a.qpn, "QPN wider than 24 bits")?;
        let pd = mad::private_data(a.private_data)?;
        self.sidr_answer(now, id, sidr_status::SUCCESS, a.qpn, a.qkey, pd, t)
    }

    /// Passive SIDR: refuses a [`CmEvent::SidrRequest`]: SIDR_REP status 2
    /// (`IB_SIDR_REJECT`) with `private_data` (≤ 136 bytes; cma.c
    /// `rdma_reject` on a UD id).
    pub fn sidr_reject<T: MadTransport>(
        &mut self,
        now: u64,
        id: ConnId,
        private_data: &[u8],
        t: &mut T,
    ) -> Result<(), CmError> {
        let pd = mad::private_data(private_data)?;
        self.sidr_answer(now, id, sidr_status::REJECT, 0, 0, pd, t)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn sidr_answer<T: MadTransport>(
        &mut self,
        now: u64,
        id: ConnId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: [u8; mad::pdata::SIDR_REP],
        t: &mut T,
    ) -> Result<(), CmError> {
        let (i, c) = self.lookup_in(id, CmState::SidrReqRcvd)?;
        let rep = SidrRep {
            request_id: c.remote_id,
            status,
            info_length: 0,
            vendor_id: 0,
            qpn,
            service_id: c.req.service_id,
            qkey,
            info: [0; mad::pdata::SIDR_REP_INFO],
            private_data,
        };
        let out = self.send_msg(t, &c.peer, c.tid, CmMsg::SidrRep(rep))?;
        let linger = cm_ms(self.cfg.timing.cm_response_timeout) * SIDR_LINGER_INTERVALS;
        if let Some(c) = self.conn_mut(i) {
            c.out = out;
            c.local_qpn = qpn;
            c.state = CmState::SidrRepSent;
            c.deadline = now.saturating_add(linger);
        }
        Ok(())
    }

    /// cm.c `cm_sidr_req_handler` and cma.c `cma_ib_req_handler` for a
    /// SIDR_REQ: a duplicate (same Request ID from the same peer address,
    /// cm.c `cm_insert_remote_sidr`) is dropped while the caller decides
    /// and answered with the same SIDR_REP once answered; no listener for
    /// the exact service id → SIDR_REP status 1 (`IB_SIDR_UNSUPPORTED`);
    /// a listener RDMA-CM would not give it to (bad `cma_hdr`, another
    /// address, not a UD port space, unusable addresses) → status 2
    /// (`IB_SIDR_REJECT`, cm.c `cm_destroy_id` in SIDR_REQ_RCVD); no free
    /// slot → dropped (the peer retransmits).
    pub(super) fn on_sidr_req<T: MadTransport>(
        &mut self,
        src: &MadAddr,
        tid: u64,
        r: &SidrReq,
        t: &mut T,
    ) -> Result<Option<CmEvent>, Ignored> {
        if self.dup_sidr_req(src, r, t) {
            return Err(Ignored::Duplicate);
        }
        let (listen, hdr) = match self.sidr_listener(src, r) {
            Ok(found) => found,
            Err(status) => {
                let rep = SidrRep {
                    request_id: r.request_id,
                    status,
                    info_length: 0,
                    vendor_id: 0,
                    qpn: 0,
                    service_id: r.service_id,
                    qkey: 0,
                    info: [0; mad::pdata::SIDR_REP_INFO],
                    private_data: [0; mad::pdata::SIDR_REP],
                };
                let _ = self.send_msg(t, src, tid, CmMsg::SidrRep(rep));
                return Err(Ignored::SidrRejected(status));
            }
        };
        let Some((slot, local_id)) = self.claim() else {
            return Err(Ignored::TableFull);
        };
        let mut user = [0u8; SIDR_REQ_USER_DATA];
        user.copy_from_slice(&r.private_data[rdma_cm::CMA_HDR_SIZE..]);
        let info = SidrReqInfo {
            listen,
            hdr,
            local_port: service_id_parts(r.service_id).map_or(0, |(_, p)| p),
            private_data: user,
            peer: *src,
        };
        let c = Conn {
            state: CmState::SidrReqRcvd,
            active: false,
            local_id,
            remote_id: r.request_id,
            remote_guid: 0,
            tid,
            dreq_tid: 0,
            local_qpn: 0,
            remote_qpn: None,
            peer: *src,
            req: sidr_req_of(r.service_id),
            params: None,
            out: [0; MAD_SIZE],
            deadline: 0,
            retries_left: 0,
            max_retries: 0,
            interval: 0,
            av_timeout: 0,
        };
        if let Some(s) = self.conns.get_mut(slot) {
            *s = Some(c);
        }
        Ok(Some(CmEvent::SidrRequest { id: ConnId(local_id), info }))
    }

    /// A SIDR_REQ already known (same Request ID from the same peer
    /// address, cm.c `cm_insert_remote_sidr`): answered again with our
    /// SIDR_REP if there is one.
    fn dup_sidr_req<T: MadTransport>(&mut self, src: &MadAddr, r: &SidrReq, t: &mut T) -> bool {
        let Some(c) = self.conns.iter().flatten().find(|c| {
            matches!(c.state, CmState::SidrReqRcvd | CmState::SidrRepSent)
                && c.remote_id == r.request_id
                && c.peer.peer_ip == src.peer_ip
        }) else {
            return false;
        };
        let c = *c;
        if c.state == CmState::SidrRepSent {
            self.send(t, &c.peer, &c.out);
        }
        true
    }

    /// The listener a SIDR_REQ goes to and its `cma_hdr`, or the SIDR_REP
    /// status that refuses it: 1 when nobody listens on the service id, 2
    /// when RDMA-CM would not hand it to the listener (bad `cma_hdr`, another
    /// address, not a UD port space, unusable addresses).
    fn sidr_listener(&self, src: &MadAddr, r: &SidrReq) -> Result<(ListenId, CmaHdr), u8> {
        if !self.listeners.iter().flatten().any(|l| l.sid == r.service_id) {
            return Err(sidr_status::UNSUPPORTED);
        }
        let ud =
            matches!(service_id_parts(r.service_id), Some((PortSpace::Udp | PortSpace::Ib, _)));
        let mut req_pd = [0u8; mad::pdata::REQ];
        req_pd.copy_from_slice(&r.private_data[..mad::pdata::REQ]);
        let hdr = CmaHdr::decode(&req_pd).map_err(|_| sidr_status::REJECT)?;
        let same_family =
            |a: IpAddr, b: IpAddr| matches!(a, IpAddr::V4(_)) == matches!(b, IpAddr::V4(_));
        let listen = self.listeners.iter().enumerate().find_map(|(i, l)| {
            let l = l.as_ref()?;
            let ok = l.sid == r.service_id && l.addr.is_none_or(|a| a == hdr.dst);
            ok.then_some(ListenId(i))
        });
        let listen = listen.ok_or(sidr_status::REJECT)?;
        if !ud
            || hdr.dst != src.local_ip
            || !same_family(hdr.src, hdr.dst)
            || rdma_cm::unusable_addr(hdr.src)
            || rdma_cm::unusable_addr(hdr.dst)
        {
            return Err(sidr_status::REJECT);
        }
        Ok((listen, hdr))
    }

    /// cm.c `cm_sidr_rep_handler` (matched by Request ID alone, in
    /// SIDR_REQ_SENT) and cma.c `cma_sidr_rep_handler` (status ≠ 0 →
    /// unreachable with that status; a Q_Key of 0 becomes
    /// [`rdma_cm::UDP_QKEY`] as `cma_set_qkey` does). The slot is free
    /// afterwards; a later copy of the REP is stale.
    pub(super) fn on_sidr_rep(&mut self, r: &SidrRep) -> Result<Option<CmEvent>, Ignored> {
        let i = self
            .find(ConnId(r.request_id))
            .filter(|&i| self.conn(i).is_some_and(|c| c.state == CmState::SidrReqSent))
            .ok_or(Ignored::Stale)?;
        let c = *self.conn(i).ok_or(Ignored::Stale)?;
        // stricter than cm.c, which matches the Request ID alone: the REP
        // echoes our service id (cm.c `cm_format_sidr_rep`)
        if r.service_id != c.req.service_id {
            return Err(Ignored::Stale);
        }
        if let Some(s) = self.conns.get_mut(i) {
            *s = None;
        }
        let id = ConnId(c.local_id);
        if r.status != sidr_status::SUCCESS {
            return Ok(Some(CmEvent::SidrRejected {
                id,
                status: r.status,
                private_data: r.private_data,
            }));
        }
        let qkey = if r.qkey == 0 { rdma_cm::UDP_QKEY } else { r.qkey };
        Ok(Some(CmEvent::SidrResolved { id, qpn: r.qpn, qkey, private_data: r.private_data }))
    }
}
