//! The NVMe/RDMA transport (`irdma_nvmet::rdma`) against the model: device
//! B runs the target, device A is the NVMe host built from the project's
//! own driver (a CM with the NVMe private data, an RC QP per queue, 16-B
//! response receives, capsules SENT with keyed SGLs naming registered host
//! buffers). The CM MADs travel over the in-memory QP1 stand-in of
//! `tests/cm_common`; data and capsules over the model's wire.
//!
//! The command layer is a stub here (the real one is another slice of
//! #32): opcode 0x02 reads (WRITE namespace data to the host, then the
//! response), 0x01 writes (READ into the namespace, then respond), 0x06 /
//! 0x09 the same through the slot's scratch buffer, 0x18 responds with no
//! data, 0x0C is held until the test releases it, 0x7E asks for the
//! queue's disconnect.

#[path = "../../tests/cm_common/mod.rs"]
mod cm_common;
#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "../../tests/e2e_common/mod.rs"]
mod e2e_common;
mod host;

use std::collections::{HashMap, VecDeque};

use e2e_common::*;
use host::*;
use irdma::cm::mad::CmMsg;
use irdma::cm::{CmState, ConnId};
use irdma_nvmet::rdma::{self, parse_req, sts};
use irdma_nvmet::{
    Commands, Event, Keyed, Local, QueueId, QueueInfo, RamDisk, Response, SCRATCH, Slot, Step, Xfer,
};

const Q: usize = 3;
const D: usize = 32;
type Tgt<'d> = Tp<'d, Q, D, 8>;

const DISK_PAGES: usize = 64;

/// A 64-byte SQE: opcode, CID, a keyed SGL (spec §2.3) and a namespace
/// byte offset in CDW10–11 (the stub's convention).
fn sqe(opc: u8, cid: u16, ns_off: u64, addr: u64, len: u32, key: u32, ty: u8) -> [u8; 64] {
    let mut s = [0u8; 64];
    s[0] = opc;
    s[1] = 0x40;
    s[2..4].copy_from_slice(&cid.to_le_bytes());
    s[24..32].copy_from_slice(&addr.to_le_bytes());
    s[32..35].copy_from_slice(&len.to_le_bytes()[..3]);
    s[35..39].copy_from_slice(&key.to_le_bytes());
    s[39] = ty;
    s[40..48].copy_from_slice(&ns_off.to_le_bytes());
    s
}

fn cqe(cid: u16, opc: u8) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = opc;
    c[12..14].copy_from_slice(&cid.to_le_bytes());
    c
}

/// The stub command layer.
#[derive(Default)]
struct Stub {
    opened: Vec<(QueueId, QueueInfo)>,
    closed: Vec<QueueId>,
    /// Queues closed for an error (`queue_failed`).
    failed: Vec<QueueId>,
    refuse: Option<u16>,
    held: Vec<(QueueId, Slot, u16)>,
    release_held: bool,
    events: VecDeque<Event>,
    /// (queue, slot) → (opcode, CID) of a fetch in flight.
    fetching: HashMap<(u16, u16), (u8, u16, u32)>,
    fetch_failed: Vec<(QueueId, Slot)>,
    /// What 0x09 fetched into scratch, per CID.
    scratch_seen: HashMap<u16, Vec<u8>>,
    capsules: Vec<(QueueId, u8, u16, usize)>,
}

impl Commands for Stub {
    fn queue_opened(&mut self, q: QueueId, info: QueueInfo) -> Result<(), u16> {
        if let Some(s) = self.refuse {
            return Err(s);
        }
        self.opened.push((q, info));
        Ok(())
    }
    fn queue_failed(&mut self, q: QueueId) {
        self.failed.push(q);
    }
    fn queue_closed(&mut self, q: QueueId) {
        self.closed.push(q);
        self.held.retain(|h| h.0 != q);
    }
    fn capsule(&mut self, q: QueueId, slot: Slot, c: &[u8], scratch: &mut [u8], _: u64) -> Step {
        assert!(c.len() >= 64, "the transport hands over whole SQEs");
        assert_eq!(scratch.len(), SCRATCH);
        let opc = c[0];
        let cid = u16::from_le_bytes([c[2], c[3]]);
        self.capsules.push((q, opc, cid, c.len()));
        let addr = u64::from_le_bytes(c[24..32].try_into().unwrap());
        let len = u32::from_le_bytes([c[32], c[33], c[34], 0]);
        let key = u32::from_le_bytes(c[35..39].try_into().unwrap());
        let ty = c[39];
        let off = u64::from_le_bytes(c[40..48].try_into().unwrap());
        let remote = Keyed { addr, len, key, invalidate: ty == 0x4F };
        let inv = remote.invalidate.then_some(key);
        let rsp = Response { cqe: cqe(cid, opc), invalidate: inv };
        let ns = Xfer { local: Local::Namespace { off }, remote, len };
        let sc = Xfer { local: Local::Scratch { off: 0 }, remote, len };
        match opc {
            0x02 => Step::Respond { rsp, write: Some(ns) },
            0x01 | 0x09 => {
                self.fetching.insert((q.0, slot.0), (opc, cid, len));
                Step::Fetch(if opc == 0x01 { ns } else { sc })
            }
            0x06 => {
                scratch[..len as usize].copy_from_slice(&pattern(cid, len as usize));
                Step::Respond { rsp, write: Some(sc) }
            }
            0x0C => {
                self.held.push((q, slot, cid));
                Step::Held
            }
            0x7E => {
                self.events.push_back(Event::Disconnect(q));
                Step::Held
            }
            _ => Step::Respond {
                rsp: Response { cqe: cqe(cid, 0xEE), invalidate: None },
                write: None,
            },
        }
    }
    fn fetched(&mut self, q: QueueId, slot: Slot, ok: bool, scratch: &mut [u8], _: u64) -> Step {
        let (opc, cid, len) = self.fetching.remove(&(q.0, slot.0)).expect("a fetch in flight");
        if !ok {
            self.fetch_failed.push((q, slot));
        }
        if opc == 0x09 {
            self.scratch_seen.insert(cid, scratch[..len as usize].to_vec());
        }
        Step::Respond { rsp: Response { cqe: cqe(cid, opc), invalidate: None }, write: None }
    }
    fn poll(&mut self, _: u64) -> Option<Event> {
        if self.release_held
            && let Some((q, slot, cid)) = self.held.pop()
        {
            return Some(Event::Respond {
                q,
                slot,
                rsp: Response { cqe: cqe(cid, 0x0C), invalidate: None },
            });
        }
        self.events.pop_front()
    }
}

/// Runs `f` holding [`lock`] on a fresh [`env`] and its disk, with the
/// target set up over them.
fn with_rig(f: impl for<'d> FnOnce(&'d Env, &'d RamDisk, Rig<'d>)) {
    let _g = lock();
    let e = env(DISK_PAGES);
    let disk = e.disk();
    f(&e, &disk, Rig::new(&e, &disk));
}

/// The target under test with the stub command layer and the host's CM.
struct Rig<'d> {
    e: &'d Env,
    t: Tgt<'d>,
    stub: Stub,
    host: Host,
    /// The target device's live QPs, CQs and STags ([`resources`]) once
    /// the transport is set up, before any queue.
    before: (usize, usize, usize),
}

impl<'d> Rig<'d> {
    fn new(e: &'d Env, disk: &'d RamDisk) -> Self {
        let t = e.target(disk);
        let before = resources(&e.bb);
        Rig { e, t, stub: Stub::default(), host: e.host(), before }
    }

    /// A host queue of `depth` on device A, connected as queue `qid`.
    fn queue(&mut self, depth: usize, qid: u16) -> HostQ<'d> {
        let mut q = HostQ::new(&self.e.da, depth);
        self.open(&mut q, qid);
        q
    }

    /// Runs target and host CM until neither has anything to do ([`run`]).
    fn run(&mut self, qs: &mut [&mut HostQ<'_>]) {
        run(&mut self.t, &mut self.stub, &mut self.host, qs);
    }

    /// Connects `q` as queue `qid`, expecting success ([`open`]).
    fn open(&mut self, q: &mut HostQ<'_>, qid: u16) {
        open(&mut self.t, &mut self.stub, &mut self.host, q, qid);
    }

    /// Sends the SQE `s` on `q`, then runs until everything settled.
    fn send(&mut self, q: &mut HostQ<'_>, s: &[u8; 64]) {
        q.send(s);
        self.run(&mut [q]);
    }
}

#[test]
fn parse_req_statuses() {
    assert_eq!(parse_req(&[0; 31]), Err(sts::INVALID_PRIVATE_DATA_LENGTH));
    assert_eq!(parse_req(&req_pdata(1, 0, 32, 31)), Err(sts::INVALID_RECFMT));
    assert_eq!(parse_req(&req_pdata(0, 0, 32, 32)), Err(sts::INVALID_HSQSIZE));
    assert_eq!(parse_req(&req_pdata(0, 0, 32, 0xFFFF)), Err(sts::INVALID_HSQSIZE));
    assert_eq!(
        parse_req(&req_pdata(0, 0, 32, 31)),
        Ok(QueueInfo { qid: 0, sq_entries: 32, hrqsize: 32 })
    );
    // An I/O queue is not bounded by the admin depth here.
    assert_eq!(parse_req(&req_pdata(0, 3, 128, 127)).map(|i| i.sq_entries), Ok(128));
    assert_eq!(rdma::rej_pdata(4), [0, 0, 4, 0]);
    assert_eq!(&rdma::rep_pdata(32)[..4], &[0, 0, 32, 0]);
}

/// A CM table below twice the queues is refused (the type's docs: the old
/// association's connections sit in timewait while the host reconnects).
#[test]
fn cm_table_must_hold_two_associations() {
    let _g = lock();
    let e = env(DISK_PAGES);
    let disk = e.disk();
    let port = || cm_common::Port { me: 'b', mac: B.mac, wire: e.wire.clone() };
    let small = Tp::<'_, 3, 4, 5>::new(&e.db, &disk, port(), tgt_cfg());
    assert_eq!(small.err(), Some(rdma::Error::Config("CM connections below 2 x queues")));
    assert!(Tp::<'_, 3, 4, 6>::new(&e.db, &disk, port(), tgt_cfg()).is_ok());
}

/// Bad private data → REJ reason 28 with {RECFMT 0, STS}; no QP, no CQ
/// left behind, and the command layer never hears of the queue.
#[test]
fn bad_connect_requests_are_rejected_with_the_right_status() {
    with_rig(|e, _, mut rig| {
        let cases: [(&str, [u8; 32], u16); 3] = [
            ("RECFMT 1", req_pdata(1, 0, 32, 31), sts::INVALID_RECFMT),
            ("admin HSQSIZE 32", req_pdata(0, 0, 33, 32), sts::INVALID_HSQSIZE),
            ("I/O deeper than the slots", req_pdata(0, 1, 64, D as u16), sts::INVALID_HSQSIZE),
        ];
        for (what, pd, want) in cases {
            let mut q = HostQ::new(&e.da, 4);
            rig.host.connect(&mut q, &pd);
            rig.run(&mut [&mut q]);
            assert!(!q.connected, "{what}");
            assert_eq!(q.rejected, Some((28, [0, 0, want as u8, 0])), "{what}");
        }
        // The command layer refuses: its status.
        rig.stub.refuse = Some(sts::INVALID_QID);
        let mut q = HostQ::new(&e.da, 4);
        rig.host.connect(&mut q, &req_pdata(0, 9, 4, 3));
        rig.run(&mut [&mut q]);
        assert_eq!(q.rejected, Some((28, [0, 0, 3, 0])));
        rig.stub.refuse = None;
        // No free queue: STS 6.
        let mut live: Vec<HostQ<'_>> = (0..Q).map(|_| HostQ::new(&e.da, 4)).collect();
        for (i, q) in live.iter_mut().enumerate() {
            rig.open(q, i as u16 + 1);
        }
        let mut q = HostQ::new(&e.da, 4);
        rig.host.connect(&mut q, &req_pdata(0, 7, 4, 3));
        rig.run(&mut [&mut q]);
        assert_eq!(q.rejected, Some((28, [0, 0, sts::NO_RESOURCES as u8, 0])));
        assert_eq!(rig.stub.opened.len(), Q, "only the accepted queues were opened");
        assert_eq!(rig.t.stats().rejected, 5);
        assert_eq!(resources(&e.bb).0, rig.before.0 + Q, "a QP per accepted queue only");
        drop(live);
        drop(rig);
    });
}

/// Reads (WRITE then SEND), writes (READ then respond), scratch transfers,
/// no-data commands; the data and the responses checked.
#[test]
fn commands_move_data_both_ways_and_the_write_precedes_the_response() {
    with_rig(|e, disk, mut rig| {
        let frames = e.bb.fabric().capture();
        let mut q = rig.queue(8, 1);
        assert_eq!(
            rig.stub.opened,
            vec![(QueueId(0), QueueInfo { qid: 1, sq_entries: 8, hrqsize: 8 })]
        );
        let data = q.side.region(4, 0);
        let key = data.mr.rkey();
        let want = pattern(0x51, 9000);
        assert!(disk.write(4096 + 3, &want));
        // 0x02: namespace → rig.host.
        let skip = frames.frames().len();
        rig.send(&mut q, &sqe(0x02, 7, 4096 + 3, data.addr() + 100, 9000, key, 0x40));
        let r = q.responses();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].0, cqe(7, 0x02));
        assert_eq!(r[0].1, None, "a 0x40 descriptor: no invalidation");
        same(&data.bytes(100, 9000), &want, "read data at the host");
        // On the wire from the target: every WRITE packet before the SEND.
        let ops: Vec<u8> = frames
            .frames()
            .iter()
            .skip(skip)
            .filter_map(|f| mock_bar::wire::parse(f).ok())
            .filter(|p| p.src_mac == B.mac && p.pkt.opcode != 0x11)
            .map(|p| p.pkt.opcode)
            .collect();
        let send_at = ops.iter().position(|&o| o == 0x04).expect("the response SEND ONLY");
        assert!(
            send_at > 0 && ops[..send_at].iter().all(|&o| (0x06..=0x0B).contains(&o)),
            "{ops:x?}"
        );
        assert!(ops[..send_at].contains(&0x08), "WRITE LAST before the SEND: {ops:x?}");
        // 0x01: host → namespace.
        let w = pattern(0x99, 5000);
        data.put(0, &w);
        q.repost(0);
        q.completions.clear();
        rig.send(&mut q, &sqe(0x01, 8, 20000, data.addr(), 5000, key, 0x40));
        let r = q.responses();
        assert_eq!(r.iter().map(|r| r.0).collect::<Vec<_>>(), vec![cqe(8, 0x01)]);
        let mut got = vec![0u8; 5000];
        assert!(disk.read(20000, &mut got));
        same(&got, &w, "written data in the namespace");
        // 0x06 / 0x09: through the slot's scratch buffer.
        q.completions.clear();
        q.repost(0);
        q.repost(1);
        q.send(&sqe(0x06, 9, 0, data.addr() + 8192, 4096, key, 0x40));
        data.put(12288, &pattern(0x33, 1000));
        q.send(&sqe(0x09, 10, 0, data.addr() + 12288, 1000, key, 0x40));
        q.send(&sqe(0x18, 11, 0, 0, 0, 0, 0x40));
        for i in 2..4 {
            q.repost(i);
        }
        rig.run(&mut [&mut q]);
        let mut cids: Vec<u16> =
            q.responses().iter().map(|r| u16::from_le_bytes([r.0[12], r.0[13]])).collect();
        cids.sort();
        assert_eq!(cids, vec![9, 10, 11]);
        same(&data.bytes(8192, 4096), &pattern(9, 4096), "scratch data at the host");
        same(&rig.stub.scratch_seen[&10], &pattern(0x33, 1000), "fetched scratch data");
        // In-capsule data (spec §1.4) reaches the command layer after the SQE.
        q.completions.clear();
        for i in 0..4 {
            q.repost(i);
        }
        let mut cap = sqe(0x18, 12, 0, 0, 0, 0, 0x01).to_vec();
        cap.extend(pattern(12, 4096));
        q.send_raw(&cap);
        rig.run(&mut [&mut q]);
        assert_eq!(q.responses().len(), 1);
        assert_eq!(rig.stub.capsules.last(), Some(&(QueueId(0), 0x18, 12, 64 + 4096)));
        let s = rig.t.stats();
        assert_eq!((s.capsules, s.responses, s.reads, s.writes), (6, 6, 2, 2), "{s:?}");
        assert_eq!((s.wr_errors, s.fatal, s.stray), (0, 0, 0), "{s:?}");
        drop(rig);
    });
}

/// A 0x4F descriptor: the response is a SEND_WITH_INVALIDATE naming the
/// key; the host's receive says so and the key is dead afterwards (the
/// next transfer through it fails, and that WR error closes the queue).
#[test]
fn send_with_invalidate_kills_exactly_the_key() {
    with_rig(|e, disk, mut rig| {
        let mut q = rig.queue(4, 1);
        let mem = buf(2);
        let iova = 0x7700_0000u64;
        let mut fr = e.da.alloc_mr(&q.side.pd, 2).unwrap();
        map_pages(&fr, &pages_of(&mem));
        let key = fr.next_key();
        let reg = fr_reg(&fr, key, ALL, (iova, 8192));
        q.side.qp.post_send(&[signaled(77, WrOpcode::RegMr(reg), &[])]).unwrap();
        let other = q.side.region(1, 0);
        let want = pattern(0x4F, 3000);
        assert!(disk.write(0, &want));
        q.send(&sqe(0x02, 1, 0, iova + 10, 3000, key, 0x4F));
        rig.send(&mut q, &sqe(0x02, 2, 0, other.addr(), 100, other.mr.rkey(), 0x40));
        let r = q.responses();
        assert_eq!(r.len(), 2);
        let inv: HashMap<u16, Option<u32>> =
            r.iter().map(|r| (u16::from_le_bytes([r.0[12], r.0[13]]), r.1)).collect();
        assert_eq!(inv[&1], Some(key), "SEND_WITH_INV names the 0x4F key");
        assert_eq!(inv[&2], None, "a 0x40 response invalidates nothing");
        same(&read(&mem, 10, 3000), &want, "data through the FR key");
        assert_eq!(rig.t.stats().send_inv, 1);
        // The key is dead: the target's WRITE through it fails; the queue closes.
        q.repost(0);
        q.repost(1);
        rig.send(&mut q, &sqe(0x02, 3, 0, iova, 64, key, 0x4F));
        let s = rig.t.stats();
        assert!(s.wr_errors >= 1, "the WRITE with the invalidated key failed: {s:?}");
        assert_eq!(rig.stub.closed, vec![QueueId(0)]);
        assert_eq!(
            rig.stub.failed,
            vec![QueueId(0)],
            "a failed WR: queue_failed before queue_closed"
        );
        assert_eq!(rig.t.open_queues(), 0);
        assert_eq!(resources(&e.bb), rig.before, "QP and CQ back");
        assert_ne!(read(&mem, 0, 64), want[..64].to_vec(), "nothing written through the dead key");
        drop(fr);
        drop(rig);
    });
}

/// HSQSIZE + 1 commands outstanding at once on the admin queue (32) are all
/// served; a command that arrives before the RTU establishes the queue.
#[test]
fn full_queue_depth_and_commands_before_rtu() {
    with_rig(|e, disk, mut rig| {
        let mut q = HostQ::new(&e.da, 32);
        // The RTU is lost: the first capsule establishes the connection.
        e.wire.borrow_mut().drop =
            Some(Box::new(|from, m| from == 'a' && matches!(m.msg, CmMsg::Rtu(_))));
        q.skip_rtu = true;
        rig.host.connect(&mut q, &req_pdata(0, 0, 32, 31));
        rig.run(&mut [&mut q]);
        assert!(q.connected);
        let conn = q.conn.unwrap();
        rig.host.cm.ready_to_use(conn, &mut rig.host.port).unwrap();
        let data = q.side.region(32, 0);
        let key = data.mr.rkey();
        for i in 0..32u64 {
            assert!(disk.write(i * 4096, &pattern(i as u16, 4096)));
        }
        for i in 0..32u16 {
            q.send(&sqe(
                0x02,
                i,
                u64::from(i) * 4096,
                data.addr() + u64::from(i) * 4096,
                4096,
                key,
                0x40,
            ));
        }
        rig.run(&mut [&mut q]);
        let r = q.responses();
        assert_eq!(r.len(), 32, "every command of the full queue answered");
        for i in 0..32usize {
            same(&data.bytes(i * 4096, 4096), &pattern(i as u16, 4096), "data of each command");
        }
        let s = rig.t.stats();
        assert_eq!(s.early_established, 1, "{s:?}");
        assert_eq!(rig.t.cm().state(t_conn(&rig.t)), CmState::Established);
        assert_eq!((s.wr_errors, s.fatal, s.stray), (0, 0, 0), "{s:?}");
        drop(rig);
    });
}

/// The target-side connection id of its only connection (via the CM's
/// table: the first non-idle id).
fn t_conn(t: &Tgt<'_>) -> ConnId {
    (0..=u16::MAX as u32 * 4)
        .map(|i| ConnId(i ^ 0x7000))
        .find(|&id| t.cm().state(id) != CmState::Idle)
        .expect("a connection")
}

/// A READ that fails (bad rkey) and a peer DREQ each close the queue:
/// every WR completes once (flush), `queue_closed` comes once, QP, CQ and
/// buffers come back, and the host reconnects at once on the same slot.
#[test]
fn errors_and_disconnects_tear_down_and_the_host_reconnects() {
    with_rig(|e, _, mut rig| {
        let before = rig.before;
        let pages = FakeHal::live_pages();
        for round in 0..3 {
            let mut q = rig.queue(8, 1);
            assert_eq!(resources(&e.bb).0, before.0 + 1);
            let data = q.side.region(1, 0);
            // A held command and a good one are outstanding at teardown.
            q.send(&sqe(0x0C, 1, 0, 0, 0, 0, 0x40));
            rig.send(&mut q, &sqe(0x02, 2, 0, data.addr(), 512, data.mr.rkey(), 0x40));
            assert_eq!(q.responses().len(), 1);
            match round {
                0 => {
                    // RDMA READ with a key the host never registered.
                    rig.send(
                        &mut q,
                        &sqe(0x01, 3, 0, data.addr(), 512, data.mr.rkey() ^ 0x100, 0x40),
                    );
                    assert_eq!(rig.stub.fetch_failed.len(), 1, "fetched(ok = false) once");
                }
                1 => {
                    // The host disconnects: QP to ERROR, DREQ.
                    q.side.qp.modify(&QpAttr::new(QpState::Error)).unwrap();
                    rig.host
                        .cm
                        .disconnect(rig.host.now, q.conn.unwrap(), &mut rig.host.port)
                        .unwrap();
                    rig.run(&mut [&mut q]);
                }
                _ => {
                    // The command layer asks for the disconnect.
                    rig.send(&mut q, &sqe(0x7E, 3, 0, 0, 0, 0, 0x40));
                }
            }
            let s = rig.t.stats();
            assert_eq!(s.closed, round + 1, "{s:?}");
            assert_eq!(s.stray, 0, "no WR completed twice: {s:?}");
            assert_eq!(s.wrs_posted, s.wrs_completed, "every WR completed before teardown: {s:?}");
            let want_closed = if round == 2 { 2 } else { round as usize + 1 };
            assert_eq!(
                rig.stub.closed.len(),
                want_closed,
                "queue_closed, not after Event::Disconnect"
            );
            // Only the failed READ is a failure; a DREQ and the command
            // layer's own disconnect are not.
            assert_eq!(rig.stub.failed, vec![QueueId(0)], "round {round}");
            assert_eq!(rig.t.open_queues(), 0);
            assert_eq!(resources(&e.bb), before, "round {round}: QP and CQ back");
            // The host's side of the connection is gone too.
            rig.run(&mut [&mut q]);
            drop(data);
            drop(q);
            assert_eq!(FakeHal::live_pages(), pages, "round {round}: no DMA pages kept");
        }
        // Held commands answered later go out once.
        let mut q = rig.queue(8, 1);
        rig.send(&mut q, &sqe(0x0C, 5, 0, 0, 0, 0, 0x40));
        assert!(q.responses().is_empty(), "held");
        rig.stub.release_held = true;
        rig.run(&mut [&mut q]);
        assert_eq!(q.responses().iter().map(|r| r.0).collect::<Vec<_>>(), vec![cqe(5, 0x0C)]);
        drop(rig);
        assert_eq!(resources(&e.bb).0, before.0, "the transport's drop destroys its QPs");
        let _ = &e.ba;
    });
}

/// Several queues at once (admin + two I/O queues), commands interleaved.
#[test]
fn several_queues_at_once() {
    with_rig(|e, disk, mut rig| {
        let mut qs: Vec<HostQ<'_>> =
            [32, 16, 16].into_iter().map(|d| HostQ::new(&e.da, d)).collect();
        for (i, q) in qs.iter_mut().enumerate() {
            rig.open(q, i as u16);
        }
        let regions: Vec<Region<'_>> = qs.iter().map(|q| q.side.region(4, 0)).collect();
        for (i, q) in qs.iter_mut().enumerate() {
            for c in 0..4u16 {
                let off = (i as u64 * 4 + u64::from(c)) * 4096;
                let cid = i as u16 * 100 + c;
                let r = &regions[i];
                // even commands read (0x02: the data starts in the
                // namespace), odd ones write (0x01: it starts at the host)
                let opc = if c % 2 == 0 {
                    assert!(disk.write(off, &pattern(cid, 4096)));
                    0x02
                } else {
                    r.put(usize::from(c) * 4096, &pattern(cid, 4096));
                    0x01
                };
                let host_addr = r.addr() + u64::from(c) * 4096;
                q.send(&sqe(opc, cid, off, host_addr, 4096, r.mr.rkey(), 0x40));
            }
        }
        let mut refs: Vec<&mut HostQ<'_>> = qs.iter_mut().collect();
        rig.run(&mut refs);
        for (i, q) in qs.iter_mut().enumerate() {
            assert_eq!(q.responses().len(), 4, "queue {i}");
            for c in 0..4u16 {
                let cid = i as u16 * 100 + c;
                let off = (i as u64 * 4 + u64::from(c)) * 4096;
                let mut got = vec![0u8; 4096];
                assert!(disk.read(off, &mut got));
                same(&got, &pattern(cid, 4096), "namespace");
                same(&regions[i].bytes(usize::from(c) * 4096, 4096), &pattern(cid, 4096), "host");
            }
        }
        assert_eq!(rig.stub.opened.iter().map(|o| o.1.qid).collect::<Vec<_>>(), vec![0, 1, 2]);
        drop(regions);
        drop(rig);
    });
}

/// The device moves the target's QP to ERROR on its own (a catastrophic QP
/// event, LCE_QP_CATASTROPHIC 0x0700): the queue closes, every WR
/// completes, QP and CQ come back, the host can connect again.
#[test]
fn a_qp_error_closes_the_queue() {
    with_rig(|e, _, mut rig| {
        let mut q = rig.queue(8, 1);
        let qpn = rig.t.qp_num(QueueId(0)).expect("the queue's QP");
        e.bb.with_device(|d| d.inject_ae(0x0700, 0x5, qpn));
        rig.run(&mut [&mut q]);
        let s = rig.t.stats();
        assert_eq!((s.qp_errors, s.closed), (1, 1), "{s:?}");
        assert_eq!(s.wrs_posted, s.wrs_completed, "{s:?}");
        assert_eq!(rig.stub.closed, vec![QueueId(0)]);
        assert_eq!(
            rig.stub.failed,
            vec![QueueId(0)],
            "a failed WR: queue_failed before queue_closed"
        );
        assert_eq!(resources(&e.bb), rig.before);
        let _q2 = rig.queue(8, 1);
        drop(rig);
    });
}
