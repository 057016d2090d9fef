//! The engine against a small scripted firmware written here (the device
//! model's firmware side lives in tests/mock-bar).

extern crate std;

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::vec::Vec;

use irdma_testkit::FakeHal;

use super::*;
use crate::ice::Opcode;
use crate::ice::cmd;

/// What the fake firmware does with the next command.
#[derive(Clone)]
enum Answer {
    /// Complete with this retval, response datalen and buffer bytes.
    Done { retval: u16, datalen: Option<u16>, buf: Vec<u8> },
    /// Never complete.
    Hang,
}

fn ok() -> Answer {
    Answer::Done { retval: 0, datalen: None, buf: Vec::new() }
}

#[derive(Default)]
struct Fw {
    regs: HashMap<usize, u32>,
    writes: Vec<(usize, u32)>,
    answers: VecDeque<Answer>,
    /// (descriptor, buffer) of every command seen.
    seen: Vec<([u8; 32], Vec<u8>)>,
    drop_atqbal: bool,
    drop_arqbal: bool,
}

struct FakeFw(Mutex<Fw>);

impl FakeFw {
    fn new() -> Self {
        FakeFw(Mutex::new(Fw::default()))
    }
    fn with<R>(&self, f: impl FnOnce(&mut Fw) -> R) -> R {
        f(&mut self.0.lock().unwrap())
    }
    fn answer(&self, a: Answer) {
        self.with(|fw| fw.answers.push_back(a));
    }
    fn take_writes(&self) -> Vec<(usize, u32)> {
        self.with(|fw| core::mem::take(&mut fw.writes))
    }
    /// Posts an event to ARQ slot `slot` and moves ARQH past it.
    fn post_event(&self, slot: u16, opcode: u16, retval: u16, buf: &[u8], err: bool) {
        self.with(|fw| {
            let ring =
                (fw.reg(regs::PF_FW_ARQBAL) as u64) | ((fw.reg(regs::PF_FW_ARQBAH) as u64) << 32);
            let p = (ring + slot as u64 * 32) as *mut u8;
            // SAFETY: FakeHal bus addresses are host addresses of live DMA
            // allocations; slot is inside the ring.
            let d = unsafe { core::slice::from_raw_parts_mut(p, 32) };
            let fl = u16::from_le_bytes([d[0], d[1]])
                | flags::DD
                | flags::CMP
                | if err { flags::ERR } else { 0 };
            d[0..2].copy_from_slice(&fl.to_le_bytes());
            d[2..4].copy_from_slice(&opcode.to_le_bytes());
            d[4..6].copy_from_slice(&(buf.len() as u16).to_le_bytes());
            d[6..8].copy_from_slice(&retval.to_le_bytes());
            let bpa = (u32::from_le_bytes(d[24..28].try_into().unwrap()) as u64) << 32
                | u32::from_le_bytes(d[28..32].try_into().unwrap()) as u64;
            // SAFETY: as above, the slot buffer is rq_buf_size ≥ buf.len().
            unsafe { core::ptr::copy_nonoverlapping(buf.as_ptr(), bpa as *mut u8, buf.len()) };
            let h = fw.reg(regs::PF_FW_ARQH);
            fw.regs.insert(regs::PF_FW_ARQH, h + 1);
        });
    }
}

impl Fw {
    fn reg(&self, off: usize) -> u32 {
        self.regs.get(&off).copied().unwrap_or(0)
    }

    fn run(&mut self, tail: u32) {
        let ring =
            (self.reg(regs::PF_FW_ATQBAL) as u64) | ((self.reg(regs::PF_FW_ATQBAH) as u64) << 32);
        let n = self.reg(regs::PF_FW_ATQLEN) & regs::LEN_MASK;
        let mut head = self.reg(regs::PF_FW_ATQH);
        while head != tail {
            let p = (ring + head as u64 * 32) as *mut u8;
            // SAFETY: FakeHal bus addresses are host addresses; the slot is
            // inside the live ring.
            let d = unsafe { core::slice::from_raw_parts_mut(p, 32) };
            let fl = u16::from_le_bytes([d[0], d[1]]);
            let dl = u16::from_le_bytes([d[4], d[5]]) as usize;
            let bpa = (u32::from_le_bytes(d[24..28].try_into().unwrap()) as u64) << 32
                | u32::from_le_bytes(d[28..32].try_into().unwrap()) as u64;
            let mut buf = Vec::new();
            if fl & flags::BUF != 0 {
                // SAFETY: the slot buffer holds datalen bytes.
                buf = unsafe { core::slice::from_raw_parts(bpa as *const u8, dl) }.to_vec();
            }
            self.seen.push((d.try_into().unwrap(), buf));
            match self.answers.pop_front().unwrap_or_else(ok) {
                Answer::Hang => return,
                Answer::Done { retval, datalen, buf } => {
                    let mut fl = fl | flags::DD | flags::CMP;
                    if retval != 0 {
                        fl |= flags::ERR;
                    }
                    d[0..2].copy_from_slice(&fl.to_le_bytes());
                    d[6..8].copy_from_slice(&retval.to_le_bytes());
                    if let Some(l) = datalen {
                        d[4..6].copy_from_slice(&l.to_le_bytes());
                    }
                    if !buf.is_empty() {
                        // SAFETY: tests keep answers within the slot buffer.
                        unsafe {
                            core::ptr::copy_nonoverlapping(buf.as_ptr(), bpa as *mut u8, buf.len())
                        };
                    }
                }
            }
            head = (head + 1) % n.max(1);
            self.regs.insert(regs::PF_FW_ATQH, head);
        }
    }
}

impl Bar for FakeFw {
    fn read32(&self, off: usize) -> u32 {
        self.with(|fw| fw.reg(off))
    }
    fn write32(&self, off: usize, v: u32) {
        self.with(|fw| {
            fw.writes.push((off, v));
            if (off == regs::PF_FW_ATQBAL && fw.drop_atqbal)
                || (off == regs::PF_FW_ARQBAL && fw.drop_arqbal)
            {
                return;
            }
            if off == regs::PF_FW_ATQH || off == regs::PF_FW_ARQH {
                // head registers belong to firmware; a driver write of 0
                // resets them (ring set-up)
            }
            fw.regs.insert(off, v);
            if off == regs::PF_FW_ATQT && fw.reg(regs::PF_FW_ATQLEN) & regs::LEN_ENABLE != 0 {
                fw.run(v);
            }
        })
    }
}

fn small() -> AqConfig {
    AqConfig {
        sq_entries: 8,
        rq_entries: 4,
        sq_buf_size: 4096,
        rq_buf_size: 4096,
        timeouts: AqTimeouts {
            command: Duration::from_millis(20),
            busy_delay: Duration::from_millis(1),
            busy_sends: 3,
        },
    }
}

/// The raw `send_sized` on the fake firmware.
fn send_sized(
    aq: &mut AdminQueue<FakeHal, &FakeFw>,
    d: &mut Desc,
    buf: Option<&mut [u8]>,
    size: usize,
) -> Result<(), AqError> {
    // SAFETY: the fake firmware is no device: no RDMA device relies on
    // anything it holds, and it touches no memory named in a descriptor.
    unsafe { aq.send_sized(d, buf, size) }
}

fn start(fw: &FakeFw) -> AdminQueue<FakeHal, &FakeFw> {
    let aq = AdminQueue::<FakeHal, _>::start(fw, &small()).unwrap();
    fw.take_writes();
    aq
}

#[test]
fn bring_up_writes_atq_then_arq_and_preposts() {
    let fw = FakeFw::new();
    let aq = AdminQueue::<FakeHal, _>::start(&fw, &small()).unwrap();
    let (sq, rq) = aq.ring_addrs();
    let w = fw.take_writes();
    let want = [
        (regs::PF_FW_ATQH, 0),
        (regs::PF_FW_ATQT, 0),
        (regs::PF_FW_ATQLEN, 8 | regs::LEN_ENABLE),
        (regs::PF_FW_ATQBAL, sq as u32),
        (regs::PF_FW_ATQBAH, (sq >> 32) as u32),
        (regs::PF_FW_ARQH, 0),
        (regs::PF_FW_ARQT, 0),
        (regs::PF_FW_ARQLEN, 4 | regs::LEN_ENABLE),
        (regs::PF_FW_ARQBAL, rq as u32),
        (regs::PF_FW_ARQBAH, (rq >> 32) as u32),
        (regs::PF_FW_ARQT, 3),
    ];
    assert_eq!(w, want);
    let d = aq.arq_desc(3).unwrap();
    assert_eq!(d.flags(), flags::BUF | flags::LB);
    assert_eq!(d.datalen(), 4096);
    assert!(aq.sq_alive());
    assert_eq!(aq.counts(), (8, 4));
}

#[test]
fn bad_config_writes_nothing_and_readback_is_checked() {
    let fw = FakeFw::new();
    for edit in [
        (|c: &mut AqConfig| c.rq_buf_size = 0) as fn(&mut AqConfig),
        |c| c.sq_entries = 0,
        |c| c.rq_entries = 1024,
        |c| c.sq_buf_size = 4097,
    ] {
        let mut c = small();
        edit(&mut c);
        assert_eq!(AdminQueue::<FakeHal, _>::start(&fw, &c).err(), Some(AqError::BadConfig));
    }
    assert!(fw.take_writes().is_empty());
    fw.with(|f| f.drop_atqbal = true);
    assert_eq!(
        AdminQueue::<FakeHal, _>::start(&fw, &small()).err(),
        Some(AqError::RegisterReadback)
    );
    // ice stops right after ATQBAH
    let w = fw.take_writes();
    assert_eq!(w.last().map(|x| x.0), Some(regs::PF_FW_ATQBAH));
    assert_eq!(w.len(), 5);
}

#[test]
fn direct_command_round_trip() {
    let fw = FakeFw::new();
    let mut aq = start(&fw);
    let mut d = Desc::new(Opcode::GetVersion);
    d.set_cookies(0x11, 0x22);
    aq.exec(&mut d, None).unwrap();
    assert_eq!(fw.take_writes(), [(regs::PF_FW_ATQT, 1)]);
    let (seen, buf) = fw.with(|f| f.seen[0].clone());
    assert_eq!(&seen[..4], &[0x00, 0x20, 0x01, 0x00]);
    assert_eq!(&seen[8..16], &[0x11, 0, 0, 0, 0x22, 0, 0, 0]);
    assert!(buf.is_empty());
    assert_eq!(d.flags(), flags::SI | flags::DD | flags::CMP);
    assert_eq!(aq.sq_state(), (1, 0));
    // the next send reclaims slot 0
    aq.exec(&mut Desc::new(Opcode::GetVersion), None).unwrap();
    assert_eq!(aq.sq_state(), (2, 1));
}

#[test]
fn indirect_flags_buffer_and_copy_back() {
    let fw = FakeFw::new();
    let mut aq = start(&fw);
    for (len, lb) in [(512usize, false), (513, true)] {
        fw.answer(Answer::Done { retval: 0, datalen: Some(4), buf: std::vec![9, 8, 7, 6] });
        let mut buf = std::vec![0x5au8; len];
        let mut d = Desc::new(Opcode::GetPackageInfo);
        aq.exec(&mut d, Some(&mut buf)).unwrap();
        let (seen, fwbuf) = fw.with(|f| f.seen.last().unwrap().clone());
        let fl = u16::from_le_bytes([seen[0], seen[1]]);
        assert_eq!(fl, flags::SI | flags::BUF | if lb { flags::LB } else { 0 });
        assert_eq!(u16::from_le_bytes([seen[4], seen[5]]) as usize, len);
        assert_eq!(fwbuf, std::vec![0x5a; len]);
        assert_eq!(&buf[..5], &[9, 8, 7, 6, 0x5a], "only datalen bytes come back");
        assert_eq!(d.datalen(), 4);
    }
    // RD comes from the opcode
    aq.exec(&mut Desc::new(Opcode::AddVsi), Some(&mut [0u8; 128])).unwrap();
    let (seen, _) = fw.with(|f| f.seen.last().unwrap().clone());
    assert_eq!(u16::from_le_bytes([seen[0], seen[1]]), flags::SI | flags::RD | flags::BUF);
}

#[test]
fn too_long_response_copies_nothing_and_errors_carry_low_byte() {
    let fw = FakeFw::new();
    let mut aq = start(&fw);
    fw.answer(Answer::Done { retval: 0, datalen: Some(64), buf: std::vec![1; 64] });
    let mut buf = [0u8; 32];
    let e = aq.exec(&mut Desc::new(Opcode::GetLinkStatus), Some(&mut buf)).unwrap_err();
    assert_eq!(e, AqError::ResponseTooLong { datalen: 64, capacity: 32 });
    assert_eq!(buf, [0; 32]);
    fw.answer(Answer::Done { retval: 0x1234, datalen: None, buf: Vec::new() });
    let e = aq.exec(&mut Desc::new(Opcode::ClearPfConfig), None).unwrap_err();
    assert_eq!(e, AqError::Firmware { opcode: 0x02A4, code: 0x34 });
    assert_eq!(aq.last_status(), 0x34);
    fw.answer(Answer::Done { retval: 0x7700, datalen: None, buf: Vec::new() });
    aq.exec(&mut Desc::new(Opcode::ClearPfConfig), None).unwrap();
    assert_eq!(aq.exec(&mut Desc::new(Opcode::AddVsi), Some(&mut [])), Err(AqError::BadBuffer));
    let mut big = std::vec![0u8; 4097];
    assert_eq!(aq.exec(&mut Desc::new(Opcode::AddVsi), Some(&mut big)), Err(AqError::BadBuffer));
}

#[test]
fn timeout_reads_crit() {
    let fw = FakeFw::new();
    let mut aq = start(&fw);
    fw.answer(Answer::Hang);
    let e = aq.exec(&mut Desc::new(Opcode::GetVersion), None).unwrap_err();
    assert_eq!(e, AqError::Timeout { opcode: 1, critical: false });
    // firmware flags a critical error in ARQLEN
    fw.with(|f| {
        let v = f.reg(regs::PF_FW_ARQLEN);
        f.regs.insert(regs::PF_FW_ARQLEN, v | regs::LEN_CRIT);
        f.regs.insert(regs::PF_FW_ATQH, 1);
    });
    fw.answer(Answer::Hang);
    let e = aq.exec(&mut Desc::new(Opcode::GetVersion), None).unwrap_err();
    assert_eq!(e, AqError::Timeout { opcode: 1, critical: true });
}

#[test]
fn busy_retry_only_where_linux_retries() {
    let fw = FakeFw::new();
    let mut aq = start(&fw);
    let busy = || Answer::Done { retval: 12, datalen: None, buf: Vec::new() };
    // LLDP stop: 3 sends in all, then the EBUSY is returned
    for _ in 0..4 {
        fw.answer(busy());
    }
    let e = aq.exec(&mut cmd::lldp_stop(false), None).unwrap_err();
    assert_eq!(e.firmware_code(), Some(12));
    assert_eq!(fw.with(|f| f.seen.len()), 3);
    // a busy then ok: resent once with the original descriptor
    fw.with(|f| f.answers.clear());
    fw.answer(busy());
    let mut d = cmd::lldp_stop(true);
    aq.exec(&mut d, None).unwrap();
    let seen: Vec<_> = fw.with(|f| f.seen[3..].iter().map(|s| s.0).collect());
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], seen[1]);
    // Clear PF config is not retried
    fw.answer(busy());
    assert!(aq.exec(&mut Desc::new(Opcode::ClearPfConfig), None).is_err());
    assert_eq!(fw.with(|f| f.seen.len()), 6);
}

#[test]
fn head_out_of_range_posts_nothing() {
    let fw = FakeFw::new();
    let mut aq = start(&fw);
    fw.with(|f| f.regs.insert(regs::PF_FW_ATQH, 8));
    let e = aq.exec(&mut Desc::new(Opcode::GetVersion), None).unwrap_err();
    assert_eq!(e, AqError::HeadOutOfRange(8));
    assert!(fw.take_writes().is_empty());
    assert_eq!(aq.sq_state(), (0, 0));
}

#[test]
fn arq_events_are_consumed_and_rearmed() {
    let fw = FakeFw::new();
    let mut aq = start(&fw);
    let mut out = [0u8; 64];
    assert_eq!(aq.next_event(&mut out), Ok(None));
    fw.post_event(0, 0x0607, 0, &[1, 2, 3, 4], false);
    fw.post_event(1, 0x0607, 0, &[5; 40], false);
    let e = aq.next_event(&mut out).unwrap().unwrap();
    assert_eq!((e.desc.opcode(), e.msg_len, e.pending, e.slot), (0x0607, 4, 1, 0));
    assert_eq!(&out[..4], &[1, 2, 3, 4]);
    assert_eq!(aq.arq_desc(0).unwrap().flags(), flags::BUF | flags::LB, "re-armed");
    assert_eq!(aq.arq_desc(0).unwrap().datalen(), 4096);
    let mut small_out = [0u8; 16];
    let e = aq.next_event(&mut small_out).unwrap().unwrap();
    assert_eq!((e.msg_len, e.pending, e.slot), (16, 0, 1));
    assert_eq!(fw.take_writes(), [(regs::PF_FW_ARQT, 0), (regs::PF_FW_ARQT, 1)]);
    fw.post_event(2, 0x0607, 5, &[], true);
    assert_eq!(aq.next_event(&mut out), Err(AqError::EventError { opcode: 0x0607, code: 5 }));
    assert_eq!(aq.rq_state().1, 3, "an error event is consumed too");
}

#[test]
fn shutdown_sends_queue_shutdown_then_clears() {
    let fw = FakeFw::new();
    let mut aq = start(&fw);
    fw.answer(Answer::Done { retval: 5, datalen: None, buf: Vec::new() });
    assert!(aq.shutdown(true).is_err(), "the result is reported");
    let (seen, _) = fw.with(|f| f.seen[0].clone());
    assert_eq!(&seen[..4], &[0x00, 0x20, 0x03, 0x00]);
    assert_eq!(seen[16], 1);
    let w = fw.take_writes();
    let offs: Vec<usize> = w.iter().map(|x| x.0).collect();
    assert_eq!(
        offs,
        [
            regs::PF_FW_ATQT,
            regs::PF_FW_ATQH,
            regs::PF_FW_ATQT,
            regs::PF_FW_ATQLEN,
            regs::PF_FW_ATQBAL,
            regs::PF_FW_ATQBAH,
            regs::PF_FW_ARQH,
            regs::PF_FW_ARQT,
            regs::PF_FW_ARQLEN,
            regs::PF_FW_ARQBAL,
            regs::PF_FW_ARQBAH
        ]
    );
    assert!(w[1..].iter().all(|x| x.1 == 0));
    assert_eq!(aq.counts(), (0, 0));
    assert_eq!(aq.exec(&mut Desc::new(Opcode::GetVersion), None), Err(AqError::NotRunning));
    drop(aq);
    assert!(fw.take_writes().is_empty(), "drop after shutdown writes nothing");
}

#[test]
fn sized_send_refuses_size_buffer_mismatch_before_posting() {
    let fw = FakeFw::new();
    let mut aq = start(&fw);
    let mut d = Desc::new(Opcode::GetVersion);
    let before = *d.bytes();
    // a size without a buffer, a buffer without a size, a size past the end
    let mut b = [0u8; 8];
    for (buf, size) in [(None, 16), (Some(&mut b[..]), 0)] {
        assert_eq!(send_sized(&mut aq, &mut d, buf, size), Err(AqError::BadBuffer));
    }
    assert_eq!(send_sized(&mut aq, &mut d, Some(&mut b[..]), 9), Err(AqError::BadBuffer));
    assert_eq!(AqError::BadBuffer.linux_errno(), -22);
    assert!(fw.take_writes().is_empty(), "nothing posted");
    assert_eq!((aq.sq_state(), *d.bytes()), ((0, 0), before), "descriptor untouched");
    // matching pairs are sent: none/0 and 4 of the 8 bytes
    send_sized(&mut aq, &mut d, None, 0).unwrap();
    fw.answer(ok());
    let mut d = Desc::new(Opcode::GetVersion);
    b.copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    send_sized(&mut aq, &mut d, Some(&mut b[..]), 4).unwrap();
    let (_, sent) = fw.with(|f| f.seen[1].clone());
    assert_eq!(sent, [1, 2, 3, 4]);
}

#[test]
fn reset_ongoing_refuses_every_send_first() {
    let fw = FakeFw::new();
    let mut aq = start(&fw);
    fw.answer(Answer::Done { retval: 0x0005, datalen: None, buf: Vec::new() });
    let _ = aq.exec(&mut Desc::new(Opcode::GetVersion), None);
    assert_eq!(aq.last_status(), 5);
    fw.take_writes();
    aq.set_reset_ongoing(true);
    let mut d = Desc::new(Opcode::GetVersion);
    assert_eq!(aq.exec(&mut d, None), Err(AqError::ResetOngoing));
    // before the buffer checks, too (ice tests reset_ongoing first)
    assert_eq!(send_sized(&mut aq, &mut d, None, 16), Err(AqError::ResetOngoing));
    assert_eq!(AqError::ResetOngoing.linux_errno(), -16);
    assert!(fw.take_writes().is_empty(), "nothing posted");
    assert_eq!(aq.last_status(), 5, "last status left alone");
    aq.set_reset_ongoing(false);
    aq.exec(&mut d, None).unwrap();
}

// ---- found by the LAN differential harness (tests/vendor-diff src/lan.rs,
// Linux 6.1 ice_controlq.c / ice_common.c)

#[test]
fn arq_readback_failure_shuts_the_atq_down_again() {
    // ice_init_ctrlq: a failed ice_init_rq is followed by ice_shutdown_sq
    let fw = FakeFw::new();
    fw.with(|f| f.drop_arqbal = true);
    assert_eq!(
        AdminQueue::<FakeHal, _>::start(&fw, &small()).err(),
        Some(AqError::RegisterReadback)
    );
    let w = fw.take_writes();
    assert_eq!(w.len(), 15, "ATQ set up, ARQ set up, ATQ cleared: {w:x?}");
    let tail: Vec<usize> = w[10..].iter().map(|x| x.0).collect();
    assert_eq!(
        tail,
        [
            regs::PF_FW_ATQH,
            regs::PF_FW_ATQT,
            regs::PF_FW_ATQLEN,
            regs::PF_FW_ATQBAL,
            regs::PF_FW_ATQBAH
        ]
    );
    assert!(w[10..].iter().all(|x| x.1 == 0));
}

#[test]
fn a_refused_send_resets_the_last_status() {
    // ice_sq_send_cmd: sq_last_status = OK, then the count, then the buffer
    let fw = FakeFw::new();
    let mut aq = start(&fw);
    fw.answer(Answer::Done { retval: 0x0034, datalen: None, buf: Vec::new() });
    assert!(aq.exec(&mut Desc::new(Opcode::ClearPfConfig), None).is_err());
    assert_eq!(aq.last_status(), 0x34);
    let mut d = Desc::new(Opcode::GetVersion);
    assert_eq!(send_sized(&mut aq, &mut d, None, 16), Err(AqError::BadBuffer));
    assert_eq!(aq.last_status(), 0, "no earlier command's code left behind");
    fw.answer(Answer::Done { retval: 0x0034, datalen: None, buf: Vec::new() });
    assert!(aq.exec(&mut Desc::new(Opcode::ClearPfConfig), None).is_err());
    assert_eq!(aq.exec(&mut Desc::new(Opcode::AddVsi), Some(&mut [])), Err(AqError::BadBuffer));
    assert_eq!(aq.last_status(), 0);
}

#[test]
fn a_stopped_queue_refuses_before_the_buffer_is_checked() {
    // ice_sq_send_cmd: !sq.count → EIO comes before the buffer checks
    let fw = FakeFw::new();
    let mut aq = start(&fw);
    aq.stop_sq_then_rq();
    let mut d = Desc::new(Opcode::GetVersion);
    let mut b = [0u8; 8];
    assert_eq!(send_sized(&mut aq, &mut d, Some(&mut b[..]), 0), Err(AqError::NotRunning));
    assert_eq!(send_sized(&mut aq, &mut d, None, 16), Err(AqError::NotRunning));
}

#[test]
fn busy_retry_by_opcode_number() {
    let busy = || Answer::Done { retval: 12, datalen: None, buf: Vec::new() };
    // LLDP start, filter control, link topology, SFF EEPROM: no `Opcode`,
    // still retried (ice_should_retry_sq_send_cmd)
    for op in [0x0A06u16, 0x0A0A, 0x06E0, 0x06EE] {
        let fw = FakeFw::new();
        let mut aq = start(&fw);
        fw.answer(busy());
        let mut d = Desc::raw(op, flags::SI, [0; 16]);
        send_sized(&mut aq, &mut d, None, 0).unwrap();
        assert_eq!(fw.with(|f| f.seen.len()), 2, "opcode {op:#06x} resent once");
    }
}

#[test]
fn a_busy_answer_too_long_for_the_buffer_is_resent() {
    // an EBUSY answer whose datalen does not fit is resent too (ice tests
    // the status and sq_last_status only)
    let fw = FakeFw::new();
    let mut aq = start(&fw);
    fw.answer(Answer::Done { retval: 12, datalen: Some(64), buf: Vec::new() });
    let mut buf = [0u8; 16];
    let mut d = cmd::lldp_stop(false);
    send_sized(&mut aq, &mut d, Some(&mut buf[..]), 16).unwrap();
    assert_eq!(fw.with(|f| f.seen.len()), 2);
}

#[test]
fn a_command_busy_to_the_end_gets_its_own_descriptor_and_buffer_back() {
    // ice_sq_send_cmd_retry restores both after every EBUSY, the last too
    let fw = FakeFw::new();
    let mut aq = start(&fw);
    for _ in 0..3 {
        fw.answer(Answer::Done { retval: 12, datalen: Some(4), buf: std::vec![9; 4] });
    }
    let mut d = Desc::raw(0x0A06, flags::SI, [7; 16]);
    let orig = *d.bytes();
    let mut buf = [0x5au8; 8];
    let e = send_sized(&mut aq, &mut d, Some(&mut buf[..]), 8).unwrap_err();
    assert_eq!(e, AqError::Firmware { opcode: 0x0A06, code: 12 });
    assert_eq!(fw.with(|f| f.seen.len()), 3);
    assert_eq!(*d.bytes(), orig);
    assert_eq!(buf, [0x5a; 8]);
    assert_eq!(aq.last_status(), 12);
}
