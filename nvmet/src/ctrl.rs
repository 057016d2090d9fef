//! The controllers: one NVM subsystem with one RAM namespace (NSID 1) and
//! the discovery controller, behind the [`Commands`] contract (spec
//! `nvme-rdma-target.md` §4–§8; the reference is Linux 6.1's nvmet).
//!
//! [`Target`] keeps, in fixed tables sized by const generics, up to `Q`
//! queues (one per RDMA-CM connection) and up to `C` controllers. A queue
//! accepts only a Fabrics Connect until it is bound to a controller: an
//! admin Connect (QID 0) creates one, an I/O Connect joins one.
//!
//! Choices where this layer differs from nvmet or the spec is open:
//!
//! * An I/O Connect's QID must also equal the QID of the queue's RDMA-CM
//!   private data ([`QueueInfo::qid`]); nvmet does not compare them. A
//!   mismatch is Connect Invalid Parameters (DW0 = SQE offset 42).
//! * A capsule shorter than 64 bytes: nvmet treats it as a fatal error of
//!   the controller. Here one of at least 4 bytes is answered Invalid
//!   Field (its CID is known); a shorter one is fatal: the queue's
//!   controller (or the lone queue) is torn down and [`Commands::capsule`]
//!   answers [`Step::Held`], the [`Event::Disconnect`]s follow from
//!   [`Commands::poll`].
//! * Admin data lives in the slot's scratch buffer, at most [`SCRATCH`]
//!   bytes: a Get Log Page asking for more is Invalid Field (nvmet would
//!   allocate). A command being fetched keeps its SQE in the last 72 bytes
//!   of its slot's scratch buffer until [`Commands::fetched`].
//! * CC.CSS must be 0 (NVM only, as CAP advertises); nvmet also takes 110b.
//! * A Connect whose HOSTNQN is empty is Connect Invalid Host (0x84); any
//!   other host is allowed.
//! * In-capsule data must also lie within the bytes received
//!   (`capsule[64..]`), else SGL Offset Invalid.
//! * Closing an I/O queue forgets only that queue (the 6.1 host closes its
//!   I/O queues before it shuts the controller down over the admin queue,
//!   spec §8); closing the admin queue tears the controller down, and so
//!   does any queue of it failing ([`Commands::queue_failed`], spec §3).
//! * The discovery controller advertises no asynchronous events (OAES 0):
//!   its log never changes.

use heapless::Vec;

use crate::wire::{
    self, Connect, ConnectData, Property, Sgl, Sqe, Status, connect_off, fctype, opc, prop,
};
use crate::{Commands, Event, Keyed, Local, QueueId, QueueInfo, RamDisk, Response, SCRATCH};
use crate::{Slot, Step, Xfer};

/// The well-known discovery NQN (spec §6, `NVME_DISC_SUBSYS_NAME`).
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// CAP: MQES 127, TO 15, CSS NVM only (spec §4.2, the minimal target).
pub const CAP: u64 = 0x0000_0020_0F00_007F;
/// CAP.MQES (0's based maximum queue entries).
pub const MQES: u16 = 127;
/// VS 1.3 (spec §4.2, §5.2).
pub const VS: u32 = 0x0001_0300;
/// MDTS of the I/O controller: 2^8 × 4 KiB (spec §3, `nvmet_rdma_get_mdts`).
pub const MDTS: u8 = 8;
/// The largest data transfer MDTS allows, in bytes.
pub const MAX_XFER: u64 = 4096 << MDTS;
/// AERL (0's based): at most 4 held Asynchronous Event Requests (spec §5.5).
pub const AERL: u8 = 3;
/// The keep-alive timeout of a discovery controller connected with KATO 0
/// (spec §4.1, `NVMET_DISC_KATO_MS`).
pub const DISC_KATO_MS: u32 = 120_000;
/// OAES / AEC bit 8: Namespace Attribute Notices (spec §5.1 step 12).
pub const AEN_NS_ATTR: u32 = 1 << 8;
/// The AER completion of a namespace-changed notice: type 2 (notice),
/// info 0 (namespace attribute changed), log page 04h (spec §5.5).
pub const AEN_NS_CHANGED: u32 = 0x0004_0002;
/// TRSVCID of the discovery log entries (spec §6).
const TRSVCID: &[u8] = b"4420";

const AEC_MASK: u32 = 0x1F | AEN_NS_ATTR | (1 << 11);
const AEC_MASK_DISC: u32 = 1 << 31;
const STASH_LEN: usize = 72;
const STASH: usize = SCRATCH - STASH_LEN;
const STASH_TAG: [u8; 3] = *b"NVF";
// The stashed SQE never overlaps fetched Connect data (Scratch from 0).
const _: () = assert!(wire::CONNECT_DATA_LEN <= STASH);

/// The target's address as the discovery log's TRADDR shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrAddr {
    /// IPv4 (ADRFAM 1).
    V4([u8; 4]),
    /// IPv6 (ADRFAM 2).
    V6([u8; 16]),
}

/// The target's configuration.
#[derive(Debug)]
pub struct Config<'a> {
    /// The NVM subsystem's NQN (1..=223 bytes, not the discovery NQN).
    pub subnqn: &'a str,
    /// Serial number (≤ 20 ASCII bytes).
    pub serial: &'a str,
    /// Model number (≤ 40 ASCII bytes).
    pub model: &'a str,
    /// The namespace's memory (a whole number of blocks).
    pub disk: &'a RamDisk,
    /// LBADS: 9 (512 B) or 12 (4096 B).
    pub lba_shift: u8,
    /// In-capsule data bytes after the SQE on I/O queues (IOCCSZ =
    /// (64 + this) / 16; 0 = none, IOCCSZ 4); a multiple of 16.
    pub inline_bytes: u32,
    /// I/O queues granted, 1..=1024 (Set Features 07h; QIDs 1..=this).
    pub io_queues: u16,
    /// PORTID of the discovery log entries.
    pub port_id: u16,
    /// The address the hosts reach the target at (TRADDR).
    pub traddr: TrAddr,
    /// KAS, in units of 100 ms (≠ 0: spec §5.1 step 7).
    pub kas: u16,
}

/// Why a [`Config`] is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// `lba_shift` is not 9 or 12.
    LbaSize,
    /// The disk is empty or not a whole number of blocks.
    DiskSize,
    /// The subsystem NQN is empty, longer than 223 bytes, or the discovery NQN.
    Nqn,
    /// Serial or model too long or not ASCII.
    Strings,
    /// `io_queues` is 0 or above 1024.
    Queues,
    /// `inline_bytes` is not a multiple of 16.
    InCapsule,
    /// `kas` is 0.
    Kas,
}

#[derive(Debug)]
struct QState {
    id: QueueId,
    info: QueueInfo,
    /// Index of the controller, once connected.
    ctrl: Option<usize>,
    /// SQ entries for SQHD.
    size: u16,
    sqhd: u16,
    /// CATTR bit 2: SQHD 0xFFFF.
    no_flow: bool,
    /// To be disconnected (its controller is gone).
    doomed: bool,
}

#[derive(Debug)]
struct Ctrl {
    cntlid: u16,
    disc: bool,
    hostid: [u8; 16],
    hostnqn: Vec<u8, 256>,
    cc: u32,
    csts: u32,
    kato_ms: u32,
    ka_deadline: Option<u64>,
    aec: u32,
    aers: Vec<(QueueId, Slot, u16), 4>,
    notice: bool,
    changed: bool,
}

/// What a command comes to.
enum Out {
    Done { st: Status, res: u64, write: Option<Xfer> },
    Fetch(Xfer),
    Held,
}

impl Out {
    fn st(st: Status) -> Out {
        Out::Done { st, res: 0, write: None }
    }
    fn ok(res: u64) -> Out {
        Out::Done { st: Status::SUCCESS, res, write: None }
    }
}

impl From<Status> for Out {
    fn from(st: Status) -> Out {
        Out::st(st)
    }
}

/// A command's data as its SGL describes it.
enum Data<'c> {
    None,
    Keyed(Keyed),
    Inline(&'c [u8]),
}

impl Data<'_> {
    fn len(&self) -> u64 {
        match self {
            Data::None => 0,
            Data::Keyed(k) => u64::from(k.len),
            Data::Inline(b) => b.len() as u64,
        }
    }
}

/// One command on its way through the layer.
struct Cmd<'c> {
    /// Index of its queue.
    qi: usize,
    /// Index of the queue's controller (once known).
    ci: usize,
    slot: Slot,
    sqe: Sqe<'c>,
    /// The received bytes (SQE, then in-capsule data).
    capsule: &'c [u8],
    now: u64,
    /// The rkey the response invalidates (spec §2.4).
    inv: Option<u32>,
}

/// Writes a page's bytes into the window `[lpo, lpo + buf.len())`.
struct Page<'b> {
    buf: &'b mut [u8],
    lpo: u64,
}

impl Page<'_> {
    fn put(&mut self, off: u64, src: &[u8]) {
        for (i, &b) in src.iter().enumerate() {
            let at = off + i as u64;
            if let Some(rel) = at.checked_sub(self.lpo)
                && let Some(d) = usize::try_from(rel).ok().and_then(|r| self.buf.get_mut(r))
            {
                *d = b;
            }
        }
    }
    fn put_padded(&mut self, off: u64, field: usize, src: &[u8], pad: u8) {
        for i in 0..field {
            self.put(off + i as u64, &[src.get(i).copied().unwrap_or(pad)]);
        }
    }
}

/// The command layer: an NVM subsystem with one RAM namespace and the
/// discovery controller, for up to `Q` queues and `C` controllers.
#[derive(Debug)]
pub struct Target<'a, const Q: usize, const C: usize> {
    cfg: Config<'a>,
    nsze: u64,
    queues: [Option<QState>; Q],
    ctrls: [Option<Ctrl>; C],
    next_cntlid: u16,
}

/// The Connect response for an invalid parameter at `res` (spec §4.1: the
/// offset of the field, [`iattr_data`] for one in the data).
fn connect_invalid(res: u64) -> Out {
    Out::Done { st: Status::CONNECT_INVALID_PARAM, res, write: None }
}

/// SQE offset of a Connect field or, with IATTR bit 16, of a data field
/// (spec §4.1: DW0 of Connect Invalid Parameters).
const fn iattr_data(off: u16) -> u64 {
    (1 << 16) | off as u64
}

impl<'a, const Q: usize, const C: usize> Target<'a, Q, C> {
    /// A target with no queue and no controller.
    pub fn new(cfg: Config<'a>) -> Result<Self, ConfigError> {
        if cfg.lba_shift != 9 && cfg.lba_shift != 12 {
            return Err(ConfigError::LbaSize);
        }
        let bs = 1u64 << cfg.lba_shift;
        if cfg.disk.is_empty() || !cfg.disk.len().is_multiple_of(bs) {
            return Err(ConfigError::DiskSize);
        }
        let n = cfg.subnqn.len();
        if n == 0 || n > 223 || cfg.subnqn == DISCOVERY_NQN || cfg.subnqn.contains('\0') {
            return Err(ConfigError::Nqn);
        }
        if cfg.serial.len() > 20
            || cfg.model.len() > 40
            || !cfg.serial.is_ascii()
            || !cfg.model.is_ascii()
        {
            return Err(ConfigError::Strings);
        }
        if cfg.io_queues == 0 || cfg.io_queues > 1024 {
            return Err(ConfigError::Queues);
        }
        if !cfg.inline_bytes.is_multiple_of(16) || cfg.inline_bytes > 0x00FF_FFFF {
            return Err(ConfigError::InCapsule);
        }
        if cfg.kas == 0 {
            return Err(ConfigError::Kas);
        }
        let nsze = cfg.disk.len() >> cfg.lba_shift;
        Ok(Target {
            cfg,
            nsze,
            queues: [const { None }; Q],
            ctrls: [const { None }; C],
            next_cntlid: 1,
        })
    }

    /// The namespace's memory (for the transport's memory registration).
    pub fn disk(&self) -> &'a RamDisk {
        self.cfg.disk
    }

    /// The configuration.
    pub fn config(&self) -> &Config<'a> {
        &self.cfg
    }

    /// Namespace size in blocks (NSZE).
    pub fn nsze(&self) -> u64 {
        self.nsze
    }

    /// IOCCSZ: the I/O capsule size in 16-byte units (spec §1.4).
    pub fn ioccsz(&self) -> u32 {
        (64 + self.cfg.inline_bytes) / 16
    }

    /// Live controllers (the discovery ones included).
    pub fn controllers(&self) -> usize {
        self.ctrls.iter().flatten().count()
    }

    /// Queues the layer knows (connected or not, doomed included).
    pub fn queues(&self) -> usize {
        self.queues.iter().flatten().count()
    }

    /// The firmware changed the namespace (size, contents as a whole):
    /// every I/O controller lists NSID 1 in log page 04h, and those that
    /// enabled namespace attribute notices (Set Features 0Bh bit 8) get an
    /// AER completion through [`Commands::poll`] (spec §5.5).
    pub fn notify_ns_changed(&mut self) {
        for c in self.ctrls.iter_mut().flatten().filter(|c| !c.disc) {
            c.changed = true;
            if c.aec & AEN_NS_ATTR != 0 {
                c.notice = true;
            }
        }
    }

    fn find_q(&self, q: QueueId) -> Option<usize> {
        self.queues.iter().position(|s| s.as_ref().is_some_and(|s| s.id == q))
    }

    /// Marks every queue of controller `ci` for disconnection and frees
    /// the controller (its CNTLID can be reused at once).
    fn teardown(&mut self, ci: usize) {
        for s in self.queues.iter_mut().flatten() {
            if s.ctrl == Some(ci) {
                s.ctrl = None;
                s.doomed = true;
            }
        }
        if let Some(c) = self.ctrls.get_mut(ci) {
            *c = None;
        }
    }

    fn fatal(&mut self, qi: usize) {
        let Some(s) = self.queues.get_mut(qi).and_then(|s| s.as_mut()) else { return };
        match s.ctrl {
            Some(ci) => self.teardown(ci),
            None => s.doomed = true,
        }
    }

    /// The response for a command of queue `qi`: advances SQHD (spec
    /// §2.2, `nvmet_update_sq_head`).
    fn response(
        &mut self,
        qi: usize,
        cid: u16,
        st: Status,
        res: u64,
        inv: Option<u32>,
    ) -> Response {
        let (sqhd, sqid) = match self.queues.get_mut(qi).and_then(|s| s.as_mut()) {
            Some(s) => {
                let sqhd = if s.no_flow {
                    0xFFFF
                } else {
                    s.sqhd = ((u32::from(s.sqhd) + 1) % u32::from(s.size.max(1))) as u16;
                    s.sqhd
                };
                (sqhd, s.info.qid)
            }
            None => (0, 0),
        };
        Response { cqe: wire::cqe(res, sqhd, sqid, cid, st), invalidate: inv }
    }

    fn finish(&mut self, qi: usize, cid: u16, inv: Option<u32>, out: Out) -> Step {
        match out {
            Out::Done { st, res, write } => {
                let rsp = self.response(qi, cid, st, res, inv);
                Step::Respond { rsp, write: if st.is_ok() { write } else { None } }
            }
            Out::Fetch(x) => Step::Fetch(x),
            Out::Held => Step::Held,
        }
    }

    /// The command's data per its SGL (spec §2.3, `nvmet_rdma_map_sgl`):
    /// in-capsule only for a write-direction command, within the queue's
    /// in-capsule size (0 on the admin queue) and the bytes received.
    fn data<'c>(&self, cmd: &mut Cmd<'c>, write: bool) -> Result<Data<'c>, Status> {
        match cmd.sqe.sgl()? {
            Sgl::Keyed(k) if k.len == 0 => Ok(Data::None),
            Sgl::Keyed(k) => {
                if k.invalidate {
                    // spec §2.4: answer with SEND_WITH_INVALIDATE of this key.
                    cmd.inv = Some(k.key);
                }
                Ok(Data::Keyed(k))
            }
            Sgl::InCapsule { .. } if !write => Err(Status::INVALID_FIELD),
            Sgl::InCapsule { off, len } => {
                let admin = self
                    .queues
                    .get(cmd.qi)
                    .and_then(|s| s.as_ref())
                    .is_none_or(|s| s.info.qid == 0);
                let room = if admin { 0 } else { u64::from(self.cfg.inline_bytes) };
                let end = off.checked_add(u64::from(len)).ok_or(Status::SGL_OFFSET_INVALID)?;
                if end > room {
                    return Err(Status::SGL_OFFSET_INVALID);
                }
                if len == 0 {
                    return Ok(Data::None);
                }
                let body = cmd.capsule.get(wire::SQE_LEN..).unwrap_or(&[]);
                match body.get(off as usize..end as usize) {
                    Some(b) => Ok(Data::Inline(b)),
                    None => Err(Status::SGL_OFFSET_INVALID),
                }
            }
        }
    }

    /// A command that moves no data: its SGL must describe none
    /// (`nvmet_check_transfer_len(req, 0)`).
    fn no_data(&self, cmd: &mut Cmd<'_>) -> Result<(), Status> {
        let d = self.data(cmd, false)?;
        if d.len() != 0 { Err(Status::SGL_LENGTH_INVALID) } else { Ok(()) }
    }

    /// Target → host data of exactly `len` bytes through scratch.
    fn to_host(&self, cmd: &mut Cmd<'_>, len: u64) -> Result<Keyed, Status> {
        let d = self.data(cmd, false)?;
        if d.len() != len {
            return Err(Status::SGL_LENGTH_INVALID);
        }
        if len > SCRATCH as u64 {
            return Err(Status::INVALID_FIELD);
        }
        match d {
            Data::Keyed(k) => Ok(k),
            _ => Err(Status::SGL_LENGTH_INVALID),
        }
    }

    fn exec(&mut self, cmd: &mut Cmd<'_>, scratch: &mut [u8]) -> Out {
        // `t/core.c: nvmet_req_init`: SGLs only, no fused commands.
        if cmd.sqe.fuse() != 0 || cmd.sqe.psdt() != 1 {
            return Out::st(Status::INVALID_FIELD);
        }
        let Some(s) = self.queues.get(cmd.qi).and_then(|s| s.as_ref()) else {
            return Out::st(Status::INTERNAL);
        };
        let (qid, ctrl) = (s.info.qid, s.ctrl);
        let fabrics = cmd.sqe.opc() == opc::FABRICS;
        let Some(ci) = ctrl else {
            // A queue without a controller takes only Connect (spec §3 step 2).
            if fabrics && cmd.sqe.fctype() == fctype::CONNECT {
                return self.connect(cmd);
            }
            return Out::st(Status::INVALID_OPCODE);
        };
        cmd.ci = ci;
        if fabrics {
            return match (cmd.sqe.fctype(), qid) {
                (fctype::CONNECT, _) => Out::st(Status::CMD_SEQ_ERROR),
                (fctype::PROPERTY_GET, 0) => self.prop_get(cmd),
                (fctype::PROPERTY_SET, 0) => self.prop_set(cmd),
                _ => Out::st(Status::INVALID_OPCODE),
            };
        }
        // `nvmet_check_ctrl_status`: nothing but Fabrics before CC.EN and RDY.
        let Some(c) = self.ctrls.get(cmd.ci).and_then(|c| c.as_ref()) else {
            return Out::st(Status::INTERNAL);
        };
        if c.cc & 1 == 0 || c.csts & 1 == 0 {
            return Out::st(Status::CMD_SEQ_ERROR);
        }
        let disc = c.disc;
        let r = if qid != 0 { self.io(cmd) } else { self.admin(cmd, scratch, disc) };
        r.unwrap_or_else(Out::st)
    }

    // ---- Fabrics ----------------------------------------------------------

    fn connect(&mut self, cmd: &mut Cmd<'_>) -> Out {
        // `nvmet_execute_admin_connect`: the data is exactly 1024 bytes.
        let d = match self.data(cmd, true) {
            Ok(d) => d,
            Err(st) => return st.into(),
        };
        if d.len() != wire::CONNECT_DATA_LEN as u64 {
            return Out::st(Status::SGL_LENGTH_INVALID);
        }
        match d {
            Data::Keyed(k) => {
                Out::Fetch(Xfer { local: Local::Scratch { off: 0 }, remote: k, len: k.len })
            }
            Data::Inline(b) => self.connect_run(cmd, b),
            Data::None => Out::st(Status::SGL_LENGTH_INVALID),
        }
    }

    /// Connect with its data (spec §4.1; `t/fabrics-cmd.c`, `t/core.c:
    /// nvmet_alloc_ctrl`, `nvmet_ctrl_find_get`, `nvmet_install_queue`).
    fn connect_run(&mut self, cmd: &Cmd<'_>, data: &[u8]) -> Out {
        let c = Connect::of(&cmd.sqe);
        let Some(d) = ConnectData::parse(data) else { return Out::st(Status::SGL_LENGTH_INVALID) };
        let Some(s) = self.queues.get(cmd.qi).and_then(|s| s.as_ref()) else {
            return Out::st(Status::INTERNAL);
        };
        if s.ctrl.is_some() || s.doomed {
            return Out::st(Status::CMD_SEQ_ERROR);
        }
        if c.recfmt != 0 {
            return Out::st(Status::CONNECT_FORMAT);
        }
        if c.qid != s.info.qid {
            return connect_invalid(u64::from(connect_off::QID));
        }
        if c.sqsize == 0 || c.sqsize > MQES {
            return connect_invalid(u64::from(connect_off::SQSIZE));
        }
        let size = c.sqsize + 1;
        let no_flow = c.cattr & 4 != 0;
        let subsys = d.subnqn == self.cfg.subnqn.as_bytes();
        let disc = d.subnqn == DISCOVERY_NQN.as_bytes();
        let found = if c.qid == 0 {
            self.connect_admin(&c, &d, cmd.now, subsys, disc)
        } else {
            self.connect_io(&c, &d, subsys)
        };
        let ci = match found {
            Ok(ci) => ci,
            Err(out) => return out,
        };
        let cntlid = self.ctrls[ci].as_ref().map_or(0, |c| c.cntlid);
        if let Some(s) = self.queues.get_mut(cmd.qi).and_then(|s| s.as_mut()) {
            s.ctrl = Some(ci);
            s.size = size;
            s.no_flow = no_flow;
        }
        Out::ok(u64::from(cntlid))
    }

    /// Connect on the admin queue: a new controller (its CNTLID, KATO and
    /// host NQN); the index of its slot, else the response to send.
    fn connect_admin(
        &mut self,
        c: &Connect,
        d: &ConnectData<'_>,
        now: u64,
        subsys: bool,
        disc: bool,
    ) -> Result<usize, Out> {
        if d.cntlid != 0xFFFF {
            return Err(connect_invalid(iattr_data(connect_off::DATA_CNTLID)));
        }
        if !subsys && !disc {
            return Err(connect_invalid(iattr_data(connect_off::DATA_SUBNQN)));
        }
        if d.hostnqn.is_empty() {
            return Err(Out::st(Status::CONNECT_INVALID_HOST));
        }
        let Some(ci) = self.ctrls.iter().position(|c| c.is_none()) else {
            return Err(Out::st(Status::CONNECT_BUSY));
        };
        let Some(cntlid) = self.alloc_cntlid() else {
            return Err(Out::st(Status::CONNECT_BUSY));
        };
        let kato_ms = match (disc, c.kato) {
            (true, 0) => DISC_KATO_MS,
            // ceil to whole seconds (nvmet keeps KATO in seconds).
            (_, k) => k.div_ceil(1000).saturating_mul(1000),
        };
        let mut hostnqn = Vec::new();
        let _ = hostnqn.extend_from_slice(d.hostnqn);
        self.ctrls[ci] = Some(Ctrl {
            cntlid,
            disc,
            hostid: d.hostid,
            hostnqn,
            cc: 0,
            csts: 0,
            kato_ms,
            ka_deadline: (kato_ms != 0).then(|| now.saturating_add(u64::from(kato_ms))),
            aec: 0,
            aers: Vec::new(),
            notice: false,
            changed: false,
        });
        Ok(ci)
    }

    /// Connect on an I/O queue: the controller it joins (same host, queue id
    /// in range and not yet taken); its index, else the response to send.
    fn connect_io(&mut self, c: &Connect, d: &ConnectData<'_>, subsys: bool) -> Result<usize, Out> {
        let found = self
            .ctrls
            .iter()
            .position(|x| x.as_ref().is_some_and(|x| !x.disc && x.cntlid == d.cntlid));
        let Some(ci) = found else {
            return Err(connect_invalid(iattr_data(connect_off::DATA_CNTLID)));
        };
        if !subsys {
            return Err(connect_invalid(iattr_data(connect_off::DATA_SUBNQN)));
        }
        let same_host = self.ctrls[ci].as_ref().is_some_and(|x| x.hostnqn.as_slice() == d.hostnqn);
        if !same_host {
            return Err(connect_invalid(iattr_data(connect_off::DATA_HOSTNQN)));
        }
        if c.qid > self.cfg.io_queues {
            return Err(connect_invalid(u64::from(connect_off::QID)));
        }
        let taken = self.queues.iter().flatten().any(|q| q.ctrl == Some(ci) && q.info.qid == c.qid);
        if taken {
            return Err(Out::st(Status::CMD_SEQ_ERROR));
        }
        Ok(ci)
    }

    /// A CNTLID from [1, 0xFFEF] not in use (spec §4.1, `NVME_CNTLID_MIN/MAX`).
    fn alloc_cntlid(&mut self) -> Option<u16> {
        for _ in 0..0xFFEF {
            let id = self.next_cntlid;
            self.next_cntlid = if id >= 0xFFEF { 1 } else { id + 1 };
            if !self.ctrls.iter().flatten().any(|c| c.cntlid == id) {
                return Some(id);
            }
        }
        None
    }

    /// Property Get (spec §4.2, `nvmet_execute_prop_get`).
    fn prop_get(&mut self, cmd: &mut Cmd<'_>) -> Out {
        if let Err(st) = self.no_data(cmd) {
            return st.into();
        }
        let Some(c) = self.ctrls.get(cmd.ci).and_then(|c| c.as_ref()) else {
            return Out::st(Status::INTERNAL);
        };
        let p = Property::of(&cmd.sqe);
        match (p.eight, p.ofst) {
            (true, prop::CAP) => Out::ok(CAP),
            (false, prop::VS) => Out::ok(u64::from(VS)),
            (false, prop::CC) => Out::ok(u64::from(c.cc)),
            (false, prop::CSTS) => Out::ok(u64::from(c.csts)),
            _ => Out::st(Status::INVALID_FIELD),
        }
    }

    /// Property Set: only CC, 4 bytes (spec §4.2, `nvmet_update_cc`).
    fn prop_set(&mut self, cmd: &mut Cmd<'_>) -> Out {
        if let Err(st) = self.no_data(cmd) {
            return st.into();
        }
        let p = Property::of(&cmd.sqe);
        if p.eight || p.ofst != prop::CC {
            return Out::st(Status::INVALID_FIELD);
        }
        let Some(c) = self.ctrls.get_mut(cmd.ci).and_then(|c| c.as_mut()) else {
            return Out::st(Status::INTERNAL);
        };
        let new = p.value as u32;
        let old = c.cc;
        c.cc = new;
        let en = |v: u32| v & 1 != 0;
        let shn = |v: u32| (v >> 14) & 3;
        if en(new) && !en(old) {
            // `nvmet_start_ctrl`: IOSQES 6 / IOCQES 4 (I/O controllers),
            // MPS 0, AMS 0, CSS 0 — else CFS instead of RDY.
            let iosqes = (new >> 16) & 0xF;
            let iocqes = (new >> 20) & 0xF;
            let good = (c.disc || (iosqes == 6 && iocqes == 4))
                && (new >> 7) & 0xF == 0
                && (new >> 11) & 7 == 0
                && (new >> 4) & 7 == 0;
            c.csts = if good { 1 } else { 2 };
            if good && c.kato_ms != 0 {
                c.ka_deadline = Some(cmd.now.saturating_add(u64::from(c.kato_ms)));
            }
        }
        if !en(new) && en(old) {
            c.cc = 0;
            c.csts &= !1;
        }
        if shn(new) != 0 && shn(old) == 0 {
            c.cc = 0;
            c.csts &= !1;
            c.csts |= 0b10 << 2;
        }
        if shn(new) == 0 && shn(old) != 0 {
            c.csts &= !(0b11 << 2);
        }
        Out::ok(0)
    }

    // ---- Admin ------------------------------------------------------------

    /// Admin commands; the discovery controller has no Abort (spec §6,
    /// `t/discovery.c: nvmet_parse_discovery_cmd`).
    fn admin(&mut self, cmd: &mut Cmd<'_>, scratch: &mut [u8], disc: bool) -> Result<Out, Status> {
        match cmd.sqe.opc() {
            opc::IDENTIFY => self.identify(cmd, scratch),
            opc::GET_LOG_PAGE => self.get_log(cmd, scratch),
            opc::SET_FEATURES | opc::GET_FEATURES => self.features(cmd, scratch),
            opc::KEEP_ALIVE => self.keep_alive(cmd),
            opc::AER => self.aer(cmd),
            opc::ABORT if !disc => {
                // spec §5.5: "not aborted" (DW0 bit 0 = 1).
                self.no_data(cmd)?;
                Ok(Out::ok(1))
            }
            _ => Err(Status::INVALID_OPCODE),
        }
    }

    fn ctrl(&self, ci: usize) -> Result<&Ctrl, Status> {
        self.ctrls.get(ci).and_then(|c| c.as_ref()).ok_or(Status::INTERNAL)
    }

    fn ctrl_mut(&mut self, ci: usize) -> Result<&mut Ctrl, Status> {
        self.ctrls.get_mut(ci).and_then(|c| c.as_mut()).ok_or(Status::INTERNAL)
    }

    /// Identify (spec §5.2–§5.4, `t/admin-cmd.c: nvmet_execute_identify*`,
    /// `t/discovery.c: nvmet_execute_disc_identify`): 4096 bytes.
    fn identify(&self, cmd: &mut Cmd<'_>, scratch: &mut [u8]) -> Result<Out, Status> {
        let k = self.to_host(cmd, 4096)?;
        let c = self.ctrl(cmd.ci)?;
        let buf = scratch.get_mut(..4096).ok_or(Status::INTERNAL)?;
        buf.fill(0);
        let cns = cmd.sqe.byte(40);
        let nsid = cmd.sqe.nsid();
        match (cns, c.disc) {
            (0x01, _) => self.id_ctrl(c, buf),
            (_, true) => return Err(Status::INVALID_FIELD),
            (0x00, _) => {
                if nsid == 0xFFFF_FFFF {
                    return Err(Status::INVALID_NS);
                }
                if nsid == 1 {
                    // NSZE = NCAP = NUSE; NLBAF 0, FLBAS 0; LBAF0.LBADS.
                    wire::put64(buf, 0, self.nsze);
                    wire::put64(buf, 8, self.nsze);
                    wire::put64(buf, 16, self.nsze);
                    buf[130] = self.cfg.lba_shift;
                }
                // Inactive NSIDs: all zeros, success (spec §5.3).
            }
            (0x02, _) => {
                if nsid >= 0xFFFF_FFFE {
                    return Err(Status::INVALID_NS);
                }
                if nsid < 1 {
                    wire::put32(buf, 0, 1);
                }
            }
            (0x03, _) => {
                // No identifiers: an all-zero descriptor list (spec §5.4).
                if nsid != 1 {
                    return Err(Status::INVALID_NS);
                }
            }
            (0x06, _) => {
                // CSI 0: NVM controller limits, all zero (spec §5.4).
                if cmd.sqe.byte(47) != 0 {
                    return Err(Status::INVALID_FIELD);
                }
            }
            _ => return Err(Status::INVALID_FIELD),
        }
        Ok(Out::Done { st: Status::SUCCESS, res: 0, write: Some(scratch_xfer(k)) })
    }

    /// Identify Controller (spec §5.2; discovery: §6).
    fn id_ctrl(&self, c: &Ctrl, b: &mut [u8]) {
        wire::put_str(b, 4, 20, self.cfg.serial.as_bytes(), b' ');
        wire::put_str(b, 24, 40, self.cfg.model.as_bytes(), b' ');
        wire::put_str(b, 64, 8, env!("CARGO_PKG_VERSION").as_bytes(), b' ');
        let set = |b: &mut [u8], off: usize, v: u8| {
            if let Some(x) = b.get_mut(off) {
                *x = v;
            }
        };
        set(b, 72, 6); // RAB
        set(b, 77, if c.disc { 0 } else { MDTS });
        wire::put16(b, 78, c.cntlid);
        wire::put32(b, 80, VS);
        wire::put32(b, 92, if c.disc { 0 } else { AEN_NS_ATTR });
        set(b, 111, if c.disc { 2 } else { 1 }); // CNTRLTYPE
        set(b, 258, 3); // ACL
        set(b, 259, AERL);
        set(b, 261, if c.disc { 0x04 } else { 0 }); // LPA (discovery: LPO support)
        wire::put16(b, 320, self.cfg.kas);
        set(b, 512, 0x66); // SQES
        set(b, 513, 0x44); // CQES
        wire::put16(b, 514, MQES + 1); // MAXCMD ≥ the host's depth
        wire::put32(b, 516, if c.disc { 0 } else { 1 }); // NN
        wire::put16(b, 520, if c.disc { 0 } else { 1 << 3 }); // ONCS: Write Zeroes
        set(b, 525, if c.disc { 0 } else { 1 }); // VWC: Flush is sent
        let icd = if self.cfg.inline_bytes > 0 { 1 << 20 } else { 0 };
        wire::put32(b, 536, 0x5 | icd); // SGLS: keyed, SGLs supported (+ in-capsule offsets)
        let nqn = if c.disc { DISCOVERY_NQN } else { self.cfg.subnqn };
        wire::put_str(b, 768, 256, nqn.as_bytes(), 0);
        wire::put32(b, 1792, self.ioccsz());
        wire::put32(b, 1796, 1); // IORCSZ
        wire::put16(b, 1800, 0); // ICDOFF
        set(b, 1803, 1); // MSDBD
    }

    /// Get Log Page (spec §5.5, §6; `nvmet_execute_get_log_page`,
    /// `nvmet_execute_disc_get_log_page`).
    fn get_log(&mut self, cmd: &mut Cmd<'_>, scratch: &mut [u8]) -> Result<Out, Status> {
        let lid = cmd.sqe.byte(40);
        let rae = cmd.sqe.byte(41) & 0x80 != 0;
        let numd = (u64::from(cmd.sqe.u16_at(44)) << 16) | u64::from(cmd.sqe.u16_at(42));
        let len = (numd + 1) * 4;
        let lpo = cmd.sqe.u64_at(48);
        let k = self.to_host(cmd, len)?;
        let disc = self.ctrl(cmd.ci)?.disc;
        let size: u64 = match (lid, disc) {
            (0x70, true) => 3 * 1024,
            (0x01, false) => 64,
            (0x02, false) | (0x03, false) => 512,
            (0x04, false) => 4096,
            _ => return Err(Status::INVALID_FIELD),
        };
        if !lpo.is_multiple_of(4) || lpo > size {
            return Err(Status::INVALID_FIELD);
        }
        let buf = scratch.get_mut(..len as usize).ok_or(Status::INTERNAL)?;
        buf.fill(0);
        let mut page = Page { buf, lpo };
        match lid {
            0x70 => self.disc_log(&mut page),
            0x04 => {
                let c = self.ctrl_mut(cmd.ci)?;
                if c.changed {
                    page.put(0, &1u32.to_le_bytes());
                }
                if !rae {
                    c.changed = false;
                }
            }
            // 01h error, 02h SMART, 03h firmware slots: zeros (spec §5.5).
            _ => {}
        }
        Ok(Out::Done { st: Status::SUCCESS, res: 0, write: Some(scratch_xfer(k)) })
    }

    /// Log page 70h: the header, then this discovery subsystem (SUBTYPE 3),
    /// then the NVM subsystem (SUBTYPE 2) (spec §6,
    /// `nvmet_format_discovery_entry`).
    fn disc_log(&self, p: &mut Page<'_>) {
        p.put(0, &1u64.to_le_bytes()); // GENCTR: the log never changes
        p.put(8, &2u64.to_le_bytes()); // NUMREC
        let entries = [(3u8, DISCOVERY_NQN), (2u8, self.cfg.subnqn)];
        for (i, (subtype, nqn)) in entries.into_iter().enumerate() {
            let e = 1024 * (i as u64 + 1);
            let (adrfam, addr) = self.traddr();
            p.put(e, &[1, adrfam, subtype, 0x04]); // TRTYPE RDMA, ADRFAM, SUBTYPE, TREQ
            p.put(e + 4, &self.cfg.port_id.to_le_bytes());
            p.put(e + 6, &0xFFFFu16.to_le_bytes()); // CNTLID
            p.put(e + 8, &32u16.to_le_bytes()); // ASQSZ
            p.put_padded(e + 32, 32, TRSVCID, b' ');
            p.put_padded(e + 256, 256, nqn.as_bytes(), 0);
            p.put_padded(e + 512, 256, addr.as_slice(), b' ');
            p.put(e + 768, &[1, 1, 1]); // QPTYPE RC, PRTYPE not specified, CMS RDMA_IP_CM
        }
    }

    /// ADRFAM and the ASCII TRADDR.
    fn traddr(&self) -> (u8, Vec<u8, 64>) {
        let mut s: Vec<u8, 64> = Vec::new();
        let num = |s: &mut Vec<u8, 64>, v: u32, hex: bool| {
            let base = if hex { 16 } else { 10 };
            let digits = b"0123456789abcdef";
            let mut tmp = [0u8; 8];
            let mut n = 0;
            let mut v = v;
            loop {
                tmp[n] = digits[(v % base) as usize];
                n += 1;
                v /= base;
                if v == 0 || n == tmp.len() {
                    break;
                }
            }
            for &d in tmp[..n].iter().rev() {
                let _ = s.push(d);
            }
        };
        match self.cfg.traddr {
            TrAddr::V4(a) => {
                for (i, o) in a.iter().enumerate() {
                    if i > 0 {
                        let _ = s.push(b'.');
                    }
                    num(&mut s, u32::from(*o), false);
                }
                (1, s)
            }
            TrAddr::V6(a) => {
                // Eight groups, no zero compression (a valid RFC 4291 form).
                for i in 0..8 {
                    if i > 0 {
                        let _ = s.push(b':');
                    }
                    num(&mut s, u32::from(u16::from_be_bytes([a[2 * i], a[2 * i + 1]])), true);
                }
                (2, s)
            }
        }
    }

    /// Set / Get Features (spec §5.5, `nvmet_execute_set_features`,
    /// `nvmet_execute_get_features`; discovery: KATO and AEC only).
    fn features(&mut self, cmd: &mut Cmd<'_>, scratch: &mut [u8]) -> Result<Out, Status> {
        let set = cmd.sqe.opc() == opc::SET_FEATURES;
        let fid = cmd.sqe.cdw(10) as u8;
        let v = cmd.sqe.cdw(11);
        let disc = self.ctrl(cmd.ci)?.disc;
        if disc && fid != 0x0F && fid != 0x0B {
            return Err(Status::INVALID_FIELD);
        }
        if fid != 0x81 || set {
            self.no_data(cmd)?;
        }
        let n = u64::from(self.cfg.io_queues - 1);
        let queues = n | (n << 16);
        let c = self.ctrl_mut(cmd.ci)?;
        match (fid, set) {
            (0x07, true) => {
                if v & 0xFFFF == 0xFFFF || v >> 16 == 0xFFFF {
                    return Err(Status::INVALID_FIELD);
                }
                Ok(Out::ok(queues))
            }
            (0x07, false) => Ok(Out::ok(queues)),
            (0x0F, true) => {
                c.kato_ms = v.div_ceil(1000).saturating_mul(1000);
                c.ka_deadline =
                    (c.kato_ms != 0).then(|| cmd.now.saturating_add(u64::from(c.kato_ms)));
                Ok(Out::ok(0))
            }
            (0x0F, false) => Ok(Out::ok(u64::from(c.kato_ms))),
            (0x0B, true) => {
                let mask = if c.disc { AEC_MASK_DISC } else { AEC_MASK };
                if v & !mask != 0 {
                    return Err(Status::INVALID_FIELD);
                }
                c.aec = v;
                Ok(Out::ok(0))
            }
            (0x0B, false) => Ok(Out::ok(u64::from(c.aec))),
            (0x06, false) => Ok(Out::ok(1)),
            (0x81, true) => Err(Status::CMD_SEQ_ERROR),
            (0x81, false) => {
                if v & 1 == 0 {
                    return Err(Status::INVALID_FIELD);
                }
                let hostid = c.hostid;
                let k = self.to_host(cmd, 16)?;
                let buf = scratch.get_mut(..16).ok_or(Status::INTERNAL)?;
                buf.copy_from_slice(&hostid);
                Ok(Out::Done { st: Status::SUCCESS, res: 0, write: Some(scratch_xfer(k)) })
            }
            _ => Err(Status::INVALID_FIELD),
        }
    }

    /// Keep Alive (spec §5.5, `nvmet_execute_keep_alive`).
    fn keep_alive(&mut self, cmd: &mut Cmd<'_>) -> Result<Out, Status> {
        self.no_data(cmd)?;
        let c = self.ctrl_mut(cmd.ci)?;
        if c.kato_ms == 0 {
            return Err(Status::KATO_INVALID);
        }
        c.ka_deadline = Some(cmd.now.saturating_add(u64::from(c.kato_ms)));
        Ok(Out::ok(0))
    }

    /// Asynchronous Event Request (spec §5.5): held, at most AERL + 1.
    fn aer(&mut self, cmd: &mut Cmd<'_>) -> Result<Out, Status> {
        self.no_data(cmd)?;
        let q = self
            .queues
            .get(cmd.qi)
            .and_then(|s| s.as_ref())
            .map(|s| s.id)
            .ok_or(Status::INTERNAL)?;
        let c = self.ctrl_mut(cmd.ci)?;
        if c.notice {
            c.notice = false;
            return Ok(Out::ok(u64::from(AEN_NS_CHANGED)));
        }
        if c.aers.push((q, cmd.slot, cmd.sqe.cid())).is_err() {
            return Err(Status::AER_LIMIT);
        }
        Ok(Out::Held)
    }

    // ---- I/O --------------------------------------------------------------

    /// NVM commands (spec §7; `nvmet_parse_io_cmd`, `nvmet_check_transfer_len`).
    fn io(&mut self, cmd: &mut Cmd<'_>) -> Result<Out, Status> {
        if cmd.sqe.nsid() != 1 {
            return Err(Status::INVALID_NS);
        }
        let shift = self.cfg.lba_shift;
        let slba = cmd.sqe.u64_at(40);
        let nlb = u64::from(cmd.sqe.u16_at(48)) + 1;
        let in_range = slba.checked_add(nlb).is_some_and(|end| end <= self.nsze);
        match cmd.sqe.opc() {
            opc::FLUSH => {
                self.no_data(cmd)?;
                Ok(Out::ok(0))
            }
            opc::WRITE_ZEROES => {
                self.no_data(cmd)?;
                if !in_range {
                    return Err(Status::LBA_RANGE);
                }
                if !self.cfg.disk.zero(slba << shift, nlb << shift) {
                    return Err(Status::INTERNAL);
                }
                Ok(Out::ok(0))
            }
            op @ (opc::READ | opc::WRITE) => {
                let write = op == opc::WRITE;
                let d = self.data(cmd, write)?;
                let len = nlb << shift;
                if len > MAX_XFER {
                    return Err(Status::INVALID_FIELD);
                }
                if d.len() != len {
                    return Err(Status::SGL_LENGTH_INVALID);
                }
                if !in_range {
                    return Err(Status::LBA_RANGE);
                }
                let off = slba << shift;
                let xfer =
                    |k: Keyed| Xfer { local: Local::Namespace { off }, remote: k, len: k.len };
                match (write, d) {
                    (false, Data::Keyed(k)) => {
                        Ok(Out::Done { st: Status::SUCCESS, res: 0, write: Some(xfer(k)) })
                    }
                    (true, Data::Keyed(k)) => Ok(Out::Fetch(xfer(k))),
                    (true, Data::Inline(b)) => {
                        if self.cfg.disk.write(off, b) {
                            Ok(Out::ok(0))
                        } else {
                            Err(Status::INTERNAL)
                        }
                    }
                    _ => Err(Status::SGL_LENGTH_INVALID),
                }
            }
            _ => Err(Status::INVALID_OPCODE),
        }
    }
}

fn scratch_xfer(k: Keyed) -> Xfer {
    Xfer { local: Local::Scratch { off: 0 }, remote: k, len: k.len }
}

fn stash_tag(q: QueueId, slot: Slot) -> [u8; 8] {
    let [a, b] = q.0.to_le_bytes();
    let [c, d] = slot.0.to_le_bytes();
    [STASH_TAG[0], STASH_TAG[1], STASH_TAG[2], a, b, c, d, 1]
}

impl<const Q: usize, const C: usize> Commands for Target<'_, Q, C> {
    fn queue_opened(&mut self, q: QueueId, info: QueueInfo) -> Result<(), u16> {
        // REJ STS 6 "no resources" (spec §1.3) when the table is full.
        if self.find_q(q).is_some() {
            return Err(6);
        }
        let Some(free) = self.queues.iter_mut().find(|s| s.is_none()) else { return Err(6) };
        *free = Some(QState {
            id: q,
            info,
            ctrl: None,
            size: info.sq_entries,
            sqhd: 0,
            no_flow: false,
            doomed: false,
        });
        Ok(())
    }

    fn queue_failed(&mut self, q: QueueId) {
        // spec §3 "Errors" (`nvmet_rdma_error_comp` →
        // `nvmet_ctrl_fatal_error`): the controller goes, every queue of it
        // is disconnected.
        if let Some(qi) = self.find_q(q) {
            self.fatal(qi);
        }
    }

    fn queue_closed(&mut self, q: QueueId) {
        let Some(qi) = self.find_q(q) else { return };
        if let Some(Some(s)) = self.queues.get(qi)
            && let Some(ci) = s.ctrl
            && s.info.qid == 0
        {
            self.teardown(ci);
        }
        self.queues[qi] = None;
    }

    fn capsule(
        &mut self,
        q: QueueId,
        slot: Slot,
        capsule: &[u8],
        scratch: &mut [u8],
        now_ms: u64,
    ) -> Step {
        let Some(qi) = self.find_q(q) else {
            // Not an opened queue (a transport bug): refuse, echoing the CID.
            let rsp = Response {
                cqe: wire::cqe(0, 0, 0, wire::le16(capsule, 2), Status::CMD_SEQ_ERROR),
                invalidate: None,
            };
            return Step::Respond { rsp, write: None };
        };
        let sqe = match Sqe::parse(capsule) {
            Ok(s) => s,
            Err(wire::Short { cid: Some(cid) }) => {
                return self.finish(qi, cid, None, Out::st(Status::INVALID_FIELD));
            }
            Err(wire::Short { cid: None }) => {
                self.fatal(qi);
                return Step::Held;
            }
        };
        if self.queues[qi].as_ref().is_some_and(|s| s.doomed) {
            return self.finish(qi, sqe.cid(), None, Out::st(Status::CMD_SEQ_ERROR));
        }
        let mut cmd = Cmd { qi, ci: 0, slot, sqe, capsule, now: now_ms, inv: None };
        let out = self.exec(&mut cmd, scratch);
        let inv = cmd.inv;
        if let Out::Fetch(_) = out {
            // Keep the SQE for `fetched` (module docs).
            match scratch.get_mut(STASH..SCRATCH) {
                Some(st) => {
                    st[..64].copy_from_slice(sqe.bytes());
                    st[64..].copy_from_slice(&stash_tag(q, slot));
                }
                None => return self.finish(qi, sqe.cid(), inv, Out::st(Status::INTERNAL)),
            }
        }
        self.finish(qi, sqe.cid(), inv, out)
    }

    fn fetched(
        &mut self,
        q: QueueId,
        slot: Slot,
        ok: bool,
        scratch: &mut [u8],
        now_ms: u64,
    ) -> Step {
        let mut sqe_bytes = [0u8; 64];
        let tagged = match scratch.get_mut(STASH..SCRATCH) {
            Some(st) if st[64..] == stash_tag(q, slot) => {
                sqe_bytes.copy_from_slice(&st[..64]);
                st[64..].fill(0);
                true
            }
            _ => false,
        };
        let Ok(sqe) = Sqe::parse(&sqe_bytes) else { return Step::Held };
        let cid = sqe.cid();
        let Some(qi) = self.find_q(q) else {
            let rsp =
                Response { cqe: wire::cqe(0, 0, 0, cid, Status::CMD_SEQ_ERROR), invalidate: None };
            return Step::Respond { rsp, write: None };
        };
        if !tagged {
            // No fetch pending on this slot (a transport bug).
            return self.finish(qi, cid, None, Out::st(Status::INTERNAL));
        }
        let inv = match sqe.sgl() {
            Ok(Sgl::Keyed(k)) if k.invalidate && k.len != 0 => Some(k.key),
            _ => None,
        };
        let out = if !ok {
            Out::st(Status::DATA_XFER_ERROR)
        } else if self.queues[qi].as_ref().is_some_and(|s| s.doomed) {
            Out::st(Status::CMD_SEQ_ERROR)
        } else {
            match (sqe.opc(), sqe.fctype()) {
                (opc::FABRICS, fctype::CONNECT) => {
                    let data = scratch.get(..wire::CONNECT_DATA_LEN).unwrap_or(&[]);
                    let mut d = [0u8; wire::CONNECT_DATA_LEN];
                    if data.len() == d.len() {
                        d.copy_from_slice(data);
                    }
                    let cmd = Cmd { qi, ci: 0, slot, sqe, capsule: &[], now: now_ms, inv };
                    self.connect_run(&cmd, &d)
                }
                // The data already sits in the namespace (zero copy).
                (opc::WRITE, _) => Out::ok(0),
                _ => Out::st(Status::INTERNAL),
            }
        };
        self.finish(qi, cid, inv, out)
    }

    fn poll(&mut self, now_ms: u64) -> Option<Event> {
        loop {
            if let Some(s) = self.queues.iter_mut().find(|s| s.as_ref().is_some_and(|s| s.doomed)) {
                let id = s.as_ref().map(|s| s.id)?;
                *s = None;
                return Some(Event::Disconnect(id));
            }
            // Keep-alive expiry: the controller is deleted, every queue of
            // it disconnected (spec §8, `nvmet_keep_alive_timer`).
            let expired = self.ctrls.iter().position(|c| {
                c.as_ref().is_some_and(|c| c.ka_deadline.is_some_and(|d| now_ms >= d))
            });
            match expired {
                Some(ci) => self.teardown(ci),
                None => break,
            }
        }
        for ci in 0..C {
            let Some(Some(c)) = self.ctrls.get_mut(ci) else { continue };
            if !c.notice || c.aers.is_empty() {
                continue;
            }
            let (q, slot, cid) = c.aers.remove(0);
            c.notice = false;
            let qi = self.find_q(q)?;
            let rsp = self.response(qi, cid, Status::SUCCESS, u64::from(AEN_NS_CHANGED), None);
            return Some(Event::Respond { q, slot, rsp });
        }
        None
    }
}
