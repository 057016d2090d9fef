//! The admin-queue engine: ATQ (commands) and ARQ (firmware events) rings in
//! DMA memory, one indirect buffer per slot, completion by head polling
//! (spec ice-lan-for-rdma §1; ice: ice_controlq.c).
//!
//! Behaviour, each point from the cited ice function:
//! * bring-up, per ring: HEAD = 0, TAIL = 0, LEN = n | ENABLE, BAL, BAH; BAL
//!   read back (mismatch → [`AqError::RegisterReadback`]; an ARQ mismatch
//!   first clears the ATQ's registers again, as ice_init_ctrlq does); the
//!   ATQ first, then the ARQ with every slot pre-posted, then ARQT = n − 1
//!   (ice_init_sq, ice_init_rq, ice_cfg_cq_regs, ice_alloc_rq_bufs);
//! * send: head ≥ ring size → refused before anything is posted; slots the
//!   head has passed are zeroed and reclaimed; the descriptor is copied
//!   whole, the caller's buffer into the slot's buffer with BUF (and LB above
//!   512 bytes), datalen and its bus address; ATQT is written, GLGEN_STAT
//!   read to flush; completion is ATQH reaching the new tail, bounded by
//!   [`AqTimeouts::command`] from `Hal::now` (DD is never read); the
//!   completed descriptor is copied back; a response datalen larger than the
//!   caller's buffer fails with nothing copied; the return code is the low
//!   8 bits of retval; the last status is reset to OK before any check, and
//!   a stopped queue is refused before the buffer is looked at
//!   (ice_sq_send_cmd, ice_clean_sq);
//! * on timeout the CRIT bit of ATQLEN/ARQLEN is read and reported;
//! * EBUSY is retried only for the opcodes of
//!   [`retried_on_busy`](super::desc::retried_on_busy) (by number, so a raw
//!   send of one the driver has no [`Opcode`](super::desc::Opcode) for is retried too): 3 sends
//!   in all, 10 ms apart, with the original descriptor and buffer, whenever
//!   a send failed with the firmware's code EBUSY
//!   (ice_common.c → ice_sq_send_cmd_retry; conformance README);
//! * ARQ: events from next_to_clean up to ARQH are copied out, the slot is
//!   re-armed and ARQT = the index just cleaned (ice_clean_rq_elem).

use core::fmt::{self, Display, Formatter};
use core::time::Duration;

use irdma_hal::barrier;
use irdma_hal::dma::wait_until;
use irdma_hal::{Bar, BufferDirection, Dma, DmaError, Hal};

use super::desc::{Desc, LARGE_BUF, MAX_BUF_LEN, flags, off, rc};
use super::regs;

/// Timeouts and retry pacing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AqTimeouts {
    /// One command (ice: ICE_CTL_Q_SQ_CMD_TIMEOUT, 1 s).
    pub command: Duration,
    /// Pause before resending an EBUSY command (ICE_SQ_SEND_DELAY_TIME_MS).
    pub busy_delay: Duration,
    /// Sends in all for a retried opcode (ICE_SQ_SEND_MAX_EXECUTE, 3).
    pub busy_sends: u8,
}

impl Default for AqTimeouts {
    fn default() -> Self {
        AqTimeouts {
            command: Duration::from_secs(1),
            busy_delay: Duration::from_millis(10),
            busy_sends: 3,
        }
    }
}

/// Ring and buffer sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AqConfig {
    /// ATQ entries, 1..=1023 (the LEN field is 10 bits).
    pub sq_entries: u16,
    /// ARQ entries, 1..=1023.
    pub rq_entries: u16,
    /// Bytes of each ATQ slot buffer, 1..=4096.
    pub sq_buf_size: u16,
    /// Bytes of each ARQ slot buffer, 1..=4096.
    pub rq_buf_size: u16,
    /// Timeouts.
    pub timeouts: AqTimeouts,
}

impl AqConfig {
    /// What ice uses on a PF: 192 entries, 4096-byte buffers (ice.h →
    /// ICE_AQ_LEN; ice_controlq.h → ICE_AQ_MAX_BUF_LEN).
    pub fn linux() -> AqConfig {
        AqConfig {
            sq_entries: 192,
            rq_entries: 192,
            sq_buf_size: 4096,
            rq_buf_size: 4096,
            timeouts: AqTimeouts::default(),
        }
    }

    fn valid(&self) -> bool {
        let ring = |n: u16| (1..=regs::LEN_MAX).contains(&n);
        let buf = |n: u16| n > 0 && n as usize <= MAX_BUF_LEN;
        ring(self.sq_entries)
            && ring(self.rq_entries)
            && buf(self.sq_buf_size)
            && buf(self.rq_buf_size)
    }
}

/// Why an admin-queue operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AqError {
    /// Ring or buffer size zero or beyond its field (ice: EIO).
    BadConfig,
    /// DMA memory for the rings could not be had.
    Dma(DmaError),
    /// The ring base address did not read back (ice_cfg_cq_regs: EIO).
    RegisterReadback,
    /// The queue is not running (ice: EIO).
    NotRunning,
    /// The caller's buffer is empty or larger than a slot buffer (ice: EINVAL).
    BadBuffer,
    /// A reset is in progress ([`AdminQueue::set_reset_ongoing`]): nothing
    /// is sent and the last status is left alone (ice_sq_send_cmd: EBUSY,
    /// hw->reset_ongoing).
    ResetOngoing,
    /// ATQH holds a value at or past the ring size; nothing was posted
    /// (ice_sq_send_cmd: EIO).
    HeadOutOfRange(u32),
    /// No free ATQ slot (ice: ENOSPC).
    RingFull,
    /// The firmware did not complete the command in time; `critical` is the
    /// CRIT bit of ATQLEN or ARQLEN (ice_sq_send_cmd: EIO either way).
    Timeout {
        /// The command's opcode.
        opcode: u16,
        /// Firmware reported a critical error.
        critical: bool,
    },
    /// The firmware completed the command with a non-zero return code (the
    /// low 8 bits of retval; names in [`rc`]) (ice: EIO).
    Firmware {
        /// The command's opcode.
        opcode: u16,
        /// The AQ return code.
        code: u8,
    },
    /// The response is longer than the caller's buffer; nothing was copied
    /// (ice_sq_send_cmd: EIO).
    ResponseTooLong {
        /// The datalen firmware reported.
        datalen: u16,
        /// The caller's buffer size.
        capacity: usize,
    },
    /// An ARQ event carried the ERR flag (ice_clean_rq_elem: EIO); the
    /// event was still consumed.
    EventError {
        /// The event's opcode.
        opcode: u16,
        /// Its return code.
        code: u8,
    },
}

impl AqError {
    /// The Linux errno ice returns for the same failure (negative), for
    /// comparison with the vendor's vectors.
    pub fn linux_errno(&self) -> i32 {
        match self {
            AqError::BadBuffer => -22,
            AqError::ResetOngoing => -16,
            AqError::RingFull => -28,
            AqError::Dma(_) => -12,
            _ => -5,
        }
    }

    /// The firmware return code, when the firmware gave one.
    pub fn firmware_code(&self) -> Option<u8> {
        match self {
            AqError::Firmware { code, .. } | AqError::EventError { code, .. } => Some(*code),
            _ => None,
        }
    }
}

crate::error::wrapping!(AqError from { DmaError => Dma });

/// An event taken from the ARQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The descriptor firmware wrote (address bytes are the slot buffer's).
    pub desc: Desc,
    /// Bytes of the event's buffer copied to the caller: min(datalen,
    /// caller's buffer).
    pub msg_len: usize,
    /// Events still waiting after this one.
    pub pending: u16,
    /// The ring slot the event was in.
    pub slot: u16,
}

struct Ring<H: Hal> {
    desc: Dma<H>,
    bufs: Dma<H>,
    entries: u16,
    buf_size: u16,
    ntu: u16,
    ntc: u16,
}

impl<H: Hal> Ring<H> {
    fn new(entries: u16, buf_size: u16) -> Result<Self, AqError> {
        let desc = Dma::with_bytes(entries as usize * 32, BufferDirection::Both)?;
        let bufs = Dma::with_bytes(entries as usize * buf_size as usize, BufferDirection::Both)?;
        Ok(Ring { desc, bufs, entries, buf_size, ntu: 0, ntc: 0 })
    }

    fn buf_off(&self, slot: u16) -> usize {
        slot as usize * self.buf_size as usize
    }

    fn buf_pa(&self, slot: u16) -> u64 {
        self.bufs.paddr().wrapping_add(self.buf_off(slot) as u64)
    }

    fn read_desc(&self, slot: u16) -> Desc {
        let mut b = [0u8; 32];
        self.desc.read_bytes(slot as usize * 32, &mut b);
        Desc::from_bytes(b)
    }

    fn write_desc(&self, slot: u16, d: &Desc) {
        self.desc.write_bytes(slot as usize * 32, d.bytes());
    }

    fn next(&self, slot: u16) -> u16 {
        if slot + 1 >= self.entries { 0 } else { slot + 1 }
    }

    /// The pre-posted receive descriptor of `slot` (ice_alloc_rq_bufs).
    fn rx_armed(&self, slot: u16) -> Desc {
        let mut d = Desc::from_bytes([0; 32]);
        let mut fl = flags::BUF;
        if self.buf_size as usize > LARGE_BUF {
            fl |= flags::LB;
        }
        d.set_u16(off::FLAGS, fl);
        d.set_u16(off::DATALEN, self.buf_size);
        let pa = self.buf_pa(slot);
        d.set_u32(off::ADDR_HIGH, (pa >> 32) as u32);
        d.set_u32(off::ADDR_LOW, pa as u32);
        d
    }
}

/// Register block of one queue (ice: ICE_CQ_INIT_REGS with prefix PF_FW).
struct QRegs {
    head: usize,
    tail: usize,
    len: usize,
    bal: usize,
    bah: usize,
}

const ATQ: QRegs = QRegs {
    head: regs::PF_FW_ATQH,
    tail: regs::PF_FW_ATQT,
    len: regs::PF_FW_ATQLEN,
    bal: regs::PF_FW_ATQBAL,
    bah: regs::PF_FW_ATQBAH,
};
const ARQ: QRegs = QRegs {
    head: regs::PF_FW_ARQH,
    tail: regs::PF_FW_ARQT,
    len: regs::PF_FW_ARQLEN,
    bal: regs::PF_FW_ARQBAL,
    bah: regs::PF_FW_ARQBAH,
};

/// A running admin queue on one PF.
///
/// The rings and buffers are DMA memory the firmware may access while the
/// queue is enabled; they are only freed by [`AdminQueue::shutdown`] /
/// `Drop` after the queue's registers are cleared (ice_shutdown_sq/rq).
pub struct AdminQueue<H: Hal, B: Bar> {
    bar: B,
    sq: Ring<H>,
    rq: Ring<H>,
    timeouts: AqTimeouts,
    last_status: u8,
    running: bool,
    reset_ongoing: bool,
    /// The hardware VSI an RDMA `Device` was handed ([`super::IceLan`]
    /// sets it): the typed commands that would free or change it, its
    /// queue sets or its scheduler branch are refused with
    /// [`CmdError::InUse`](super::cmd::CmdError::InUse) meanwhile.
    pub(super) held_vsi: Option<u16>,
}

impl<H: Hal, B: Bar> AdminQueue<H, B> {
    /// Allocates the rings and brings both queues up, ATQ first (ice_init_sq,
    /// ice_init_rq). Nothing is written when the configuration is refused.
    /// On a failed read-back the queue registers are left as ice leaves them
    /// and the ring memory is leaked (never freed while the device may use it).
    pub fn start(bar: B, cfg: &AqConfig) -> Result<Self, AqError> {
        if !cfg.valid() {
            return Err(AqError::BadConfig);
        }
        let sq = Ring::new(cfg.sq_entries, cfg.sq_buf_size)?;
        let rq = Ring::new(cfg.rq_entries, cfg.rq_buf_size)?;
        for slot in 0..rq.entries {
            rq.write_desc(slot, &rq.rx_armed(slot));
        }
        let mut aq = AdminQueue {
            bar,
            sq,
            rq,
            timeouts: cfg.timeouts,
            last_status: 0,
            running: false,
            reset_ongoing: false,
            held_vsi: None,
        };
        barrier::wmb();
        if let Err(e) = aq.cfg_regs(&ATQ, aq.sq.desc.paddr(), aq.sq.entries) {
            // ice writes nothing more when the ATQ's own base did not stick
            // (ice_init_sq returns; the vectors record no further write), so
            // the queue stays enabled at an address that did not stick: the
            // rings are leaked, never freed, because the device may still
            // reach them.
            core::mem::forget(aq);
            return Err(e);
        }
        if let Err(e) = aq.cfg_regs(&ARQ, aq.rq.desc.paddr(), aq.rq.entries) {
            // When the ARQ's base did not stick, ice_init_ctrlq shuts the
            // working ATQ down again (ice_shutdown_sq: HEAD, TAIL, LEN, BAL,
            // BAH = 0) and leaves the ARQ as it is; the rings are still
            // leaked, the ARQ's registers being left enabled.
            aq.clear_regs(&ATQ);
            core::mem::forget(aq);
            return Err(e);
        }
        aq.bar.write32(ARQ.tail, u32::from(aq.rq.entries - 1));
        aq.running = true;
        Ok(aq)
    }

    /// ice_cfg_cq_regs: HEAD, TAIL, LEN | ENABLE, BAL, BAH, BAL read back.
    fn cfg_regs(&self, r: &QRegs, pa: u64, entries: u16) -> Result<(), AqError> {
        self.bar.write32(r.head, 0);
        self.bar.write32(r.tail, 0);
        self.bar.write32(r.len, u32::from(entries) | regs::LEN_ENABLE);
        self.bar.write32(r.bal, pa as u32);
        self.bar.write32(r.bah, (pa >> 32) as u32);
        if self.bar.read32(r.bal) != pa as u32 {
            return Err(AqError::RegisterReadback);
        }
        Ok(())
    }

    /// ice_shutdown_sq / ice_shutdown_rq: HEAD, TAIL, LEN, BAL, BAH = 0.
    fn clear_regs(&self, r: &QRegs) {
        self.bar.write32(r.head, 0);
        self.bar.write32(r.tail, 0);
        self.bar.write32(r.len, 0);
        self.bar.write32(r.bal, 0);
        self.bar.write32(r.bah, 0);
    }

    /// The BAR, for raw register access (diagnostics, platform glue).
    ///
    /// Not reachable from safe code (issue #28 item 4): the BAR of an admin
    /// queue an [`IceLan`](super::IceLan) holds is the BAR of a live RDMA
    /// [`Device`](crate::device::Device), whose own
    /// [`Device::bar`](crate::device::Device::bar) is `unsafe` for the same
    /// reason.
    ///
    /// ```compile_fail,E0133
    /// # use irdma::ice::AdminQueue;
    /// # use irdma_hal::{Bar, Hal};
    /// fn raw<H: Hal, B: Bar>(aq: &AdminQueue<H, B>) -> u32 {
    ///     aq.bar().read32(0) // safe code cannot reach the BAR
    /// }
    /// ```
    ///
    /// # Safety
    ///
    /// As for [`Device::bar`](crate::device::Device::bar): a register write
    /// can make the device DMA anywhere (a doorbell over a stale ring, an
    /// HMC SD pointing at arbitrary memory, an admin-queue base address) or
    /// stop it. The caller guarantees it only reads registers, or writes
    /// only what does not change which memory the device (RDMA engine or
    /// firmware) uses, nor disturb the driver's rings, CQP or this admin
    /// queue.
    pub unsafe fn bar(&self) -> &B {
        &self.bar
    }

    /// The BAR for the crate's own register accesses.
    pub(crate) fn regs(&self) -> &B {
        &self.bar
    }

    /// Whether ATQLEN holds (entries | ENABLE) (ice_check_sq_alive).
    pub fn sq_alive(&self) -> bool {
        let v = self.bar.read32(ATQ.len);
        v & (regs::LEN_MASK | regs::LEN_ENABLE) == u32::from(self.sq.entries) | regs::LEN_ENABLE
    }

    /// Whether the rings are configured (not shut down).
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// The AQ return code of the last command sent (ice `sq_last_status`).
    pub fn last_status(&self) -> u8 {
        self.last_status
    }

    /// (next_to_use, next_to_clean) of the ATQ.
    pub fn sq_state(&self) -> (u16, u16) {
        (self.sq.ntu, self.sq.ntc)
    }

    /// (next_to_use, next_to_clean) of the ARQ.
    pub fn rq_state(&self) -> (u16, u16) {
        (self.rq.ntu, self.rq.ntc)
    }

    /// Entries of (ATQ, ARQ); (0, 0) once shut down, as ice reports.
    pub fn counts(&self) -> (u16, u16) {
        if self.running { (self.sq.entries, self.rq.entries) } else { (0, 0) }
    }

    /// Bus address of the ATQ ring and of the ARQ ring.
    pub fn ring_addrs(&self) -> (u64, u64) {
        (self.sq.desc.paddr(), self.rq.desc.paddr())
    }

    /// The descriptor in ARQ slot `slot` (for inspection).
    pub fn arq_desc(&self, slot: u16) -> Option<Desc> {
        (slot < self.rq.entries).then(|| self.rq.read_desc(slot))
    }

    /// Marks a device reset as in progress (or over): while it is, every
    /// send is refused with [`AqError::ResetOngoing`] before anything is
    /// checked or posted (ice_controlq.c → ice_sq_send_cmd, which tests
    /// `hw->reset_ongoing` first). ARQ events are still taken.
    pub fn set_reset_ongoing(&mut self, on: bool) {
        self.reset_ongoing = on;
    }

    /// [`send`](Self::send) for a caller that names the buffer and its size
    /// separately, as ice_aq_send_cmd's `(buf, buf_size)` does: `buf_size`
    /// bytes of `buf` are sent. A size without a buffer, a buffer with size
    /// 0, or a size past the buffer's end is refused with
    /// [`AqError::BadBuffer`] (ice_sq_send_cmd: EINVAL) before anything is
    /// posted and with `desc` untouched.
    ///
    /// # Safety
    ///
    /// As for [`send`](Self::send).
    pub unsafe fn send_sized(
        &mut self,
        desc: &mut Desc,
        buf: Option<&mut [u8]>,
        buf_size: usize,
    ) -> Result<(), AqError> {
        if self.reset_ongoing {
            return Err(AqError::ResetOngoing);
        }
        // ice_sq_send_cmd's order: the last status is reset and a stopped
        // queue refused before the buffer and its size are looked at.
        self.last_status = rc::OK;
        if !self.running {
            return Err(AqError::NotRunning);
        }
        match (buf, buf_size) {
            (None, 0) => self.exec(desc, None),
            (Some(b), n) if n > 0 => match b.get_mut(..n) {
                Some(b) => self.exec(desc, Some(b)),
                None => Err(AqError::BadBuffer),
            },
            _ => Err(AqError::BadBuffer),
        }
    }

    /// Sends one raw command and waits for its completion, with ice's EBUSY
    /// resend for the opcodes Linux retries (ice_aq_send_cmd).
    ///
    /// `desc` is updated with the completed descriptor; `buf` (if any) goes
    /// to firmware and receives `datalen` bytes of the answer (a retried
    /// opcode that stayed EBUSY through every send gets its own descriptor
    /// and buffer back, as ice's retry loop leaves them). Without
    /// `buf` the descriptor goes to the firmware exactly as given, its
    /// flags and address words included.
    ///
    /// Every command this crate's users need has a safe typed method (the
    /// `impl AdminQueue` blocks of [`cmd`](super::cmd),
    /// [`sched`](super::sched) and [`switch`](super::switch)); an arbitrary
    /// descriptor is not reachable from safe code (issue #28 item 4):
    ///
    /// ```compile_fail,E0133
    /// # use irdma::ice::{AdminQueue, Desc, Opcode};
    /// # use irdma_hal::{Bar, Hal};
    /// fn raw<H: Hal, B: Bar>(aq: &mut AdminQueue<H, B>) {
    ///     let _ = aq.send(&mut Desc::new(Opcode::FreeVsi), None);
    /// }
    /// ```
    ///
    /// # Safety
    ///
    /// The caller guarantees that
    /// * any bus address the descriptor carries (a buffer sent without
    ///   `buf`, with the BUF flag and the address words set by hand) is DMA
    ///   memory it owns, of the length the descriptor names, until this
    ///   call returns: the firmware reads or writes it;
    /// * the command changes no state a live RDMA
    ///   [`Device`](crate::device::Device) of this function relies on: the
    ///   VSI it was handed (Free VSI, Update VSI, Clear PF Configuration),
    ///   its queue sets and their scheduler branch (Disable Tx Queues,
    ///   Delete Scheduling Elements), its PE filter, the switch rules that
    ///   steer its MAC to the VSI, the PF or its memory (resets, NVM,
    ///   package download). Commands that do none of that (queries, a
    ///   standalone queue no `Device` uses, a recording BAR) are fine.
    pub unsafe fn send(&mut self, desc: &mut Desc, buf: Option<&mut [u8]>) -> Result<(), AqError> {
        self.exec(desc, buf)
    }

    /// [`send`](Self::send) for the crate's typed commands, each of which
    /// fills the descriptor itself and never sets an address word without
    /// a buffer.
    pub(crate) fn exec(
        &mut self,
        desc: &mut Desc,
        mut buf: Option<&mut [u8]>,
    ) -> Result<(), AqError> {
        if self.reset_ongoing {
            return Err(AqError::ResetOngoing);
        }
        let retry = super::desc::retried_on_busy(desc.opcode());
        if !retry {
            return self.send_once(desc, buf);
        }
        let orig = *desc;
        // The original buffer is resent each time; keep a copy (a resend
        // must not carry the first answer's bytes).
        let mut saved = [0u8; MAX_BUF_LEN];
        let blen = buf.as_deref().map_or(0, <[u8]>::len);
        if let (Some(b), Some(s)) = (buf.as_deref(), saved.get_mut(..blen)) {
            s.copy_from_slice(b);
        }
        let mut sends = 0u8;
        loop {
            sends += 1;
            let r = self.send_once(desc, buf.as_deref_mut());
            // ice resends when the send failed and the firmware's code was
            // EBUSY, whatever else failed (a response too long for the
            // buffer included): ice_sq_send_cmd_retry tests the status and
            // sq_last_status only.
            let busy = r.is_err() && self.last_status == rc::EBUSY;
            if !busy {
                return r;
            }
            // ice restores the caller's descriptor and buffer after every
            // EBUSY, the last one included: a command that stayed busy
            // hands back what the caller gave, not the firmware's answer.
            *desc = orig;
            if let (Some(b), Some(s)) = (buf.as_deref_mut(), saved.get(..blen)) {
                b.copy_from_slice(s);
            }
            if sends >= self.timeouts.busy_sends {
                return r;
            }
            let until = H::now().saturating_add(self.timeouts.busy_delay);
            wait_until::<H>(until, || false);
        }
    }

    /// One send (ice_sq_send_cmd).
    fn send_once(&mut self, desc: &mut Desc, buf: Option<&mut [u8]>) -> Result<(), AqError> {
        // ice_sq_send_cmd resets the last status before any check, so a
        // refused command never leaves an earlier command's code behind.
        self.last_status = rc::OK;
        if !self.running {
            return Err(AqError::NotRunning);
        }
        if let Some(b) = buf.as_deref()
            && (b.is_empty() || b.len() > self.sq.buf_size as usize)
        {
            return Err(AqError::BadBuffer);
        }
        let head = self.bar.read32(ATQ.head);
        if head >= u32::from(self.sq.entries) {
            return Err(AqError::HeadOutOfRange(head));
        }
        self.clean_sq(head as u16);
        if self.sq.next(self.sq.ntu) == self.sq.ntc {
            return Err(AqError::RingFull);
        }
        let slot = self.sq.ntu;
        let mut on_ring = *desc;
        if let Some(b) = buf.as_deref() {
            self.sq.bufs.write_bytes(self.sq.buf_off(slot), b);
            let mut fl = flags::BUF;
            if b.len() > LARGE_BUF {
                fl |= flags::LB;
            }
            on_ring.or_flags(fl);
            on_ring.set_u16(off::DATALEN, b.len() as u16);
            let pa = self.sq.buf_pa(slot);
            on_ring.set_u32(off::ADDR_HIGH, (pa >> 32) as u32);
            on_ring.set_u32(off::ADDR_LOW, pa as u32);
        }
        self.sq.write_desc(slot, &on_ring);
        self.sq.ntu = self.sq.next(slot);
        barrier::wmb();
        self.bar.write32(ATQ.tail, u32::from(self.sq.ntu));
        let _ = self.bar.read32(regs::GLGEN_STAT);

        let ntu = u32::from(self.sq.ntu);
        let bar = &self.bar;
        let deadline = H::now().saturating_add(self.timeouts.command);
        let done = wait_until::<H>(deadline, || bar.read32(ATQ.head) == ntu);
        if !done {
            let crit = |r: usize| bar.read32(r) & regs::LEN_CRIT != 0;
            let critical = crit(ARQ.len) || crit(ATQ.len);
            return Err(AqError::Timeout { opcode: desc.opcode(), critical });
        }
        barrier::dma_rmb();
        let done_desc = self.sq.read_desc(slot);
        *desc = done_desc;
        let mut result = Ok(());
        if let Some(b) = buf {
            let datalen = done_desc.datalen();
            match b.get_mut(..datalen as usize) {
                Some(dst) => {
                    self.sq.bufs.read_bytes(self.sq.buf_off(slot), dst);
                }
                None => result = Err(AqError::ResponseTooLong { datalen, capacity: b.len() }),
            }
        }
        let code = done_desc.retval();
        self.last_status = code;
        if result.is_ok() && code != rc::OK {
            result = Err(AqError::Firmware { opcode: done_desc.opcode(), code });
        }
        result
    }

    /// ice_clean_sq: zero and reclaim the slots the head has passed.
    fn clean_sq(&mut self, head: u16) {
        let mut n = 0;
        while self.sq.ntc != head && n < self.sq.entries {
            self.sq.write_desc(self.sq.ntc, &Desc::from_bytes([0; 32]));
            self.sq.ntc = self.sq.next(self.sq.ntc);
            n += 1;
        }
    }

    /// Takes the next firmware event, if any (ice_clean_rq_elem): copies its
    /// descriptor and up to `out.len()` bytes of its buffer, re-arms the slot
    /// and writes ARQT = the slot. `Ok(None)` when nothing is waiting. An
    /// event with the ERR flag is consumed and reported as
    /// [`AqError::EventError`].
    pub fn next_event(&mut self, out: &mut [u8]) -> Result<Option<Event>, AqError> {
        if !self.running {
            return Err(AqError::NotRunning);
        }
        let head = self.bar.read32(ARQ.head) & regs::LEN_MASK;
        if head >= u32::from(self.rq.entries) {
            return Err(AqError::HeadOutOfRange(head));
        }
        let head = head as u16;
        let slot = self.rq.ntc;
        if head == slot {
            return Ok(None);
        }
        barrier::dma_rmb();
        let d = self.rq.read_desc(slot);
        let datalen = d.datalen() as usize;
        let msg_len = datalen.min(out.len()).min(self.rq.buf_size as usize);
        if let Some(dst) = out.get_mut(..msg_len) {
            self.rq.bufs.read_bytes(self.rq.buf_off(slot), dst);
        }
        self.rq.write_desc(slot, &self.rq.rx_armed(slot));
        barrier::wmb();
        self.bar.write32(ARQ.tail, u32::from(slot));
        self.rq.ntc = self.rq.next(slot);
        self.rq.ntu = head;
        let now_head =
            (self.bar.read32(ARQ.head) & regs::LEN_MASK).min(u32::from(self.rq.entries)) as u16;
        let ntc = self.rq.ntc;
        let pending =
            if ntc > now_head { self.rq.entries - ntc + now_head } else { now_head - ntc };
        if d.flags() & flags::ERR != 0 {
            return Err(AqError::EventError { opcode: d.opcode(), code: d.retval() });
        }
        Ok(Some(Event { desc: d, msg_len, pending, slot }))
    }

    /// Clears both queues' registers, ARQ first, without a Queue Shutdown
    /// command (what ice_init_check_adminq does after a failed version
    /// check).
    pub fn stop_rq_then_sq(&mut self) {
        if self.running {
            self.clear_regs(&ARQ);
            self.clear_regs(&ATQ);
            self.running = false;
        }
    }

    /// Clears both queues' registers, ATQ first (ice_shutdown_ctrlq after
    /// Queue Shutdown).
    pub fn stop_sq_then_rq(&mut self) {
        if self.running {
            self.clear_regs(&ATQ);
            self.clear_regs(&ARQ);
            self.running = false;
        }
    }

    /// Sends Queue Shutdown (0x0003; byte 16 bit 0 = driver unloading) while
    /// the ATQ is alive, ignoring its result, then clears the ATQ and ARQ
    /// registers (ice_shutdown_ctrlq, ice_aq_q_shutdown). The result of the
    /// command is returned for information.
    pub fn shutdown(&mut self, unloading: bool) -> Result<(), AqError> {
        let mut r = Ok(());
        if self.running && self.sq_alive() {
            let mut d = super::desc::queue_shutdown(unloading);
            r = self.exec(&mut d, None);
        }
        self.stop_sq_then_rq();
        r
    }
}

impl<H: Hal, B: Bar> Drop for AdminQueue<H, B> {
    fn drop(&mut self) {
        // The rings are freed right after: make sure firmware no longer
        // owns them.
        self.stop_sq_then_rq();
    }
}

#[cfg(test)]
mod tests;

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

impl Display for AqError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            AqError::BadConfig => f.write_str("admin-queue ring or buffer size out of range"),
            AqError::Dma(e) => write!(f, "admin-queue ring memory: {e}"),
            AqError::RegisterReadback => f.write_str("admin-queue base address did not read back"),
            AqError::NotRunning => f.write_str("admin queue not running"),
            AqError::BadBuffer => f.write_str("admin-queue buffer empty or larger than a slot"),
            AqError::ResetOngoing => f.write_str("admin-queue command refused: reset in progress"),
            AqError::HeadOutOfRange(h) => write!(f, "admin-queue head {h} beyond the ring"),
            AqError::RingFull => f.write_str("admin queue full"),
            AqError::Timeout { opcode, critical: true } => {
                write!(f, "admin command {opcode:#06x} timed out; firmware critical error")
            }
            AqError::Timeout { opcode, critical: false } => {
                write!(f, "admin command {opcode:#06x} timed out")
            }
            AqError::Firmware { opcode, code } => {
                write!(f, "admin command {opcode:#06x} failed: {} ({code})", rc::name(*code))
            }
            AqError::ResponseTooLong { datalen, capacity } => {
                write!(f, "admin response of {datalen} bytes exceeds the {capacity}-byte buffer")
            }
            AqError::EventError { opcode, code } => {
                write!(f, "admin event {opcode:#06x} carried error {} ({code})", rc::name(*code))
            }
        }
    }
}

crate::error::wrapping!(AqError source { Dma });
