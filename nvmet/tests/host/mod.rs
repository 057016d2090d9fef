//! The NVMe host of the end-to-end tests (`rdma_e2e.rs`, `target_e2e.rs`),
//! built from the project's own driver on model device A: a CM with the
//! NVMe/RDMA private data (spec §1.2), an RC QP per queue, 16-B response
//! receives (spec §1.5), SQEs SENT from registered buffers; the pump that
//! runs the transport on device B and the host's CM until both are idle;
//! the environment (two model devices, the namespace memory, the in-memory
//! QP1 of `tests/cm_common`) and the resource counts of device B.
//!
//! Each test file pulls it in with `mod host;` after declaring the shared
//! modules it builds on (`cm_common`, `common`, `e2e_common`).
#![allow(dead_code)]

use std::cell::RefCell;
use std::rc::Rc;

use crate::cm_common::{Port, Wire};
use crate::e2e_common::*;
use irdma::cm::rdma_cm::{PortSpace, guid_from_mac};
use irdma::cm::{Cm, CmConfig, CmEvent, CmTiming, ConnId, ConnectParams, MadAddr};
use irdma_nvmet::rdma::{Config, Transport};
use irdma_nvmet::{Commands, RamDisk};

/// The transport on device B with `Q` queues of `D` command slots and a CM
/// of `C` connections.
pub type Tp<'d, const Q: usize, const D: usize, const C: usize> =
    Transport<'d, FakeHal, ModelBar, Port, Q, D, C>;
pub type HostCm = Cm<16, 1>;

pub fn cm_cfg(a: Addr, seed: u32) -> CmConfig {
    CmConfig {
        ca_guid: guid_from_mac(a.mac),
        hi_tid: 9,
        id_seed: seed,
        local_ips: [Some(IpAddr::V4(a.ip)), None, None, None],
        ca_ack_delay: 0,
        timing: CmTiming::default(),
    }
}

pub fn tgt_cfg() -> Config {
    Config { cm: cm_cfg(B, 0x7000), inline_bytes: 4096, psn_seed: 0x1234_5678 }
}

/// `struct nvme_rdma_cm_req` (spec §1.2).
pub fn req_pdata(recfmt: u16, qid: u16, hrqsize: u16, hsqsize: u16) -> [u8; 32] {
    let mut p = [0u8; 32];
    p[0..2].copy_from_slice(&recfmt.to_le_bytes());
    p[2..4].copy_from_slice(&qid.to_le_bytes());
    p[4..6].copy_from_slice(&hrqsize.to_le_bytes());
    p[6..8].copy_from_slice(&hsqsize.to_le_bytes());
    p
}

pub fn pattern(seed: u16, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed as u8) ^ (seed >> 8) as u8).collect()
}

/// One host queue: its QP, 16-B response receives, SQE buffers.
pub struct HostQ<'d> {
    pub side: Side<'d>,
    pub rsp: Region<'d>,
    pub cmd: Region<'d>,
    pub conn: Option<ConnId>,
    pub depth: usize,
    pub connected: bool,
    pub rejected: Option<(u16, [u8; 4])>,
    pub skip_rtu: bool,
    pub completions: Vec<WorkCompletion>,
    pub next_cmd: usize,
    /// DREQs the host's CM received for this queue's connection.
    pub dreqs: usize,
}

impl<'d> HostQ<'d> {
    pub fn new(dev: &'d Dev, depth: usize) -> Self {
        let n = depth as u32 + 2;
        let side = Side::new(dev, A, 4 * n, cap(n));
        let rsp = side.region(1, 0);
        let cmd = side.region(3, 0);
        HostQ {
            side,
            rsp,
            cmd,
            conn: None,
            depth,
            connected: false,
            rejected: None,
            skip_rtu: false,
            completions: Vec::new(),
            next_cmd: 0,
            dreqs: 0,
        }
    }

    /// Posts one SQE (as a SEND) from the next command buffer.
    pub fn send(&mut self, s: &[u8; 64]) {
        let i = self.next_cmd % 64;
        self.next_cmd += 1;
        self.cmd.put(i * 64, s);
        let wr = signaled(1000 + i as u64, WrOpcode::Send, &[]);
        let sge = [self.cmd.sge(i * 64, 64)];
        self.side.qp.post_send(&[SendWr { sg_list: &sge, ..wr }]).unwrap();
    }

    /// Posts a capsule of any length (SQE + in-capsule data) from the
    /// second page of the command buffers.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.cmd.put(4096, bytes);
        let sge = [self.cmd.sge(4096, bytes.len())];
        self.side.qp.post_send(&[signaled(999, WrOpcode::Send, &sge)]).unwrap();
    }

    /// Collects completions; returns the responses (recv completions)
    /// received so far, as (CQE bytes, invalidated rkey).
    pub fn drain(&mut self) {
        let mut wc = [empty_wc(); 32];
        loop {
            let k = self.side.cq.poll(&mut wc);
            if k == 0 {
                break;
            }
            self.completions.extend_from_slice(&wc[..k]);
        }
    }

    pub fn responses(&mut self) -> Vec<([u8; 16], Option<u32>)> {
        self.drain();
        let mut out = Vec::new();
        for c in self.completions.iter().filter(|c| c.opcode == WcOpcode::Recv) {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            assert_eq!(c.byte_len, 16, "responses are 16 bytes (spec §2.2)");
            let i = c.wr_id as usize;
            let b: [u8; 16] = self.rsp.bytes(i * 16, 16).try_into().unwrap();
            out.push((b, c.invalidated_rkey));
        }
        out
    }

    /// Takes the responses that arrived since the last call (in arrival
    /// order) as (CQE bytes, invalidated rkey), re-posting their receives.
    pub fn take_responses(&mut self) -> Vec<([u8; 16], Option<u32>)> {
        let out = self.responses();
        let done: Vec<usize> = self
            .completions
            .iter()
            .filter(|c| c.opcode == WcOpcode::Recv)
            .map(|c| c.wr_id as usize)
            .collect();
        self.completions.retain(|c| c.opcode != WcOpcode::Recv);
        for i in done {
            self.repost(i);
        }
        out
    }

    /// Re-posts the response receive `i`.
    pub fn repost(&mut self, i: usize) {
        let sge = [self.rsp.sge(i * 16, 16)];
        self.side.qp.post_recv(&[RecvWr { wr_id: i as u64, sg_list: &sge }]).unwrap();
    }
}

/// The host's CM and clock.
pub struct Host {
    pub cm: HostCm,
    pub port: Port,
    pub now: u64,
    pub src_port: u16,
}

impl Host {
    /// The 6.1 host's REQ (spec §1.2): RC, TCP port space to 4420,
    /// responder resources 4, initiator depth 0, retry and RNR retry 7.
    pub fn connect(&mut self, q: &mut HostQ<'_>, pdata: &[u8; 32]) {
        let (peer_ip, local_ip) = (IpAddr::V4(B.ip), IpAddr::V4(A.ip));
        let path =
            MadAddr { peer_ip, local_ip, peer_mac: B.mac, ..crate::cm_common::path_a_to_b() };
        let psn = 0x4242 + u32::from(self.src_port);
        let cp = ConnectParams {
            src_port: self.src_port,
            responder_resources: 4,
            initiator_depth: 0,
            private_data: pdata,
            ..ConnectParams::new(path, PortSpace::Tcp, 4420, q.side.qp.qp_num(), psn)
        };
        self.src_port += 1;
        q.conn = Some(self.cm.connect(self.now, &cp, &mut self.port).unwrap());
    }
}

/// Runs target and host CM until neither has anything to do.
pub fn run<const Q: usize, const D: usize, const C: usize>(
    t: &mut Tp<'_, Q, D, C>,
    stub: &mut impl Commands,
    host: &mut Host,
    qs: &mut [&mut HostQ<'_>],
) {
    for _ in 0..10_000 {
        let mut any = t.poll(host.now, stub);
        while let Some(e) = host.cm.poll(host.now, &mut host.port) {
            any = true;
            match e {
                CmEvent::Connected { id, params, private_data } => {
                    let q = qs.iter_mut().find(|q| q.conn == Some(id)).expect("our connection");
                    // REP private data: RECFMT 0, CRQSIZE = HSQSIZE + 1.
                    assert_eq!(&private_data[..2], &[0, 0]);
                    assert_eq!(
                        u16::from_le_bytes([private_data[2], private_data[3]]) as usize,
                        q.depth
                    );
                    // The REP's initiator depth ≤ the host's responder
                    // resources (4), its responder resources 0 (spec §1.3).
                    assert_eq!((params.max_dest_rd_atomic, params.max_rd_atomic), (4, 0));
                    assert_eq!(params.rnr_retry, 7, "the REP's RNR retry count (spec §1.1)");
                    params.apply(&mut q.side.qp).expect("host QP to RTS");
                    for i in 0..q.depth {
                        q.repost(i);
                    }
                    q.connected = true;
                    if !q.skip_rtu {
                        host.cm.ready_to_use(id, &mut host.port).unwrap();
                    }
                }
                CmEvent::Rejected { id, reason, private_data } => {
                    let q = qs.iter_mut().find(|q| q.conn == Some(id)).expect("our connection");
                    q.rejected = Some((reason, private_data[..4].try_into().unwrap()));
                }
                CmEvent::Disconnected { id, timed_out: false } => {
                    if let Some(q) = qs.iter_mut().find(|q| q.conn == Some(id)) {
                        q.dreqs += 1;
                        q.side.qp.modify(&QpAttr::new(QpState::Error)).unwrap();
                    }
                    host.cm.disconnect(host.now, id, &mut host.port).unwrap();
                }
                _ => {}
            }
        }
        for q in qs.iter_mut() {
            q.drain();
        }
        if !any {
            return;
        }
    }
    panic!("the target never settled");
}

/// Live QPs, CQs and STags of a model device.
pub fn resources(bar: &ModelBar) -> (usize, usize, usize) {
    bar.with_device(|d| {
        (
            (0..4096).filter(|&i| d.qp(i).is_some()).count(),
            (0..4096).filter(|&i| d.cq(i).is_some()).count(),
            (0..1 << 14).filter(|&i| d.stag(i).is_some()).count(),
        )
    })
}

pub struct Env {
    pub ba: ModelBar,
    pub bb: ModelBar,
    pub da: Dev,
    pub db: Dev,
    pub disk_mem: Buf,
    pub wire: Rc<RefCell<Wire>>,
}

/// Two model devices on one wire and `disk_pages` pages of namespace memory.
pub fn env(disk_pages: usize) -> Env {
    let (ba, bb, da, db) = two_devices(Profile::SMALL);
    let disk_mem = buf(disk_pages);
    Env { ba, bb, da, db, disk_mem, wire: Rc::new(RefCell::new(Wire::default())) }
}

impl Env {
    pub fn disk(&self) -> RamDisk {
        // SAFETY: the Dma buffer outlives the disk and every registration
        // over it (the test drops the transport first); the model reaches
        // it only through FakeHal's checked memory, the CPU only through
        // the RamDisk handles made here.
        unsafe {
            RamDisk::new(self.disk_mem.vaddr(), self.disk_mem.len() as u64, self.disk_mem.paddr())
        }
    }
    pub fn host(&self) -> Host {
        Host {
            cm: HostCm::new(cm_cfg(A, 0x100)),
            port: Port { me: 'a', mac: A.mac, wire: self.wire.clone() },
            now: 0,
            src_port: 40000,
        }
    }
    pub fn target<'d, const Q: usize, const D: usize, const C: usize>(
        &'d self,
        disk: &'d RamDisk,
    ) -> Tp<'d, Q, D, C> {
        let port = Port { me: 'b', mac: B.mac, wire: self.wire.clone() };
        Transport::new(&self.db, disk, port, tgt_cfg()).expect("transport")
    }
}

/// Connects `q` as queue `qid` of depth `q.depth`, expecting success.
pub fn open<const Q: usize, const D: usize, const C: usize>(
    t: &mut Tp<'_, Q, D, C>,
    stub: &mut impl Commands,
    host: &mut Host,
    q: &mut HostQ<'_>,
    qid: u16,
) {
    let d = q.depth as u16;
    host.connect(q, &req_pdata(0, qid, d, d - 1));
    run(t, stub, host, &mut [q]);
    assert!(q.connected, "connected: {:?}", q.rejected);
}
