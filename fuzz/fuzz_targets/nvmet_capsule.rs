//! The NVMe target's command layer (`irdma_nvmet::ctrl::Target`) on fuzz
//! bytes: a script of queue opens / closes, capsules (random, or random
//! edits of a valid bring-up), fetch completions (random outcome, random or
//! valid fetched bytes), timer polls and namespace-change notices. Checks:
//! nothing panics; every `Xfer` lies within the namespace or the slot's
//! SCRATCH and within its remote descriptor; every response to a capsule
//! carries the capsule's CID (responses are 16 bytes by type); a `Fetch`
//! comes only for a capsule, `fetched` never asks for another.
#![no_main]

use std::collections::HashMap;
use std::ptr::NonNull;

use irdma_nvmet::ctrl::{Config, Target, TrAddr};
use irdma_nvmet::{Commands, Event, Local, QueueId, QueueInfo, RamDisk, SCRATCH, Slot, Step, Xfer};
use libfuzzer_sys::fuzz_target;

const DISK: usize = 64 * 1024;
const SUBNQN: &str = "nqn.2026-01.invalid.irdma:fuzz";
const HOSTNQN: &[u8] = b"nqn.2014-08.org.nvmexpress:uuid:fuzz";

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from(self.u8()) | (u16::from(self.u8()) << 8)
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

fn connect_data(cntlid: u16, disc: bool) -> Vec<u8> {
    let mut d = vec![0u8; 1024];
    d[16..18].copy_from_slice(&cntlid.to_le_bytes());
    let nqn: &[u8] = if disc { b"nqn.2014-08.org.nvmexpress.discovery" } else { SUBNQN.as_bytes() };
    d[256..256 + nqn.len()].copy_from_slice(nqn);
    d[512..512 + HOSTNQN.len()].copy_from_slice(HOSTNQN);
    d
}

/// A valid-looking SQE the fuzzer then edits.
fn template(kind: u8, cid: u16, cntlid: u16) -> Vec<u8> {
    let mut s = vec![0u8; 64];
    s[1] = 0x40;
    s[2..4].copy_from_slice(&cid.to_le_bytes());
    s[39] = 0x4F;
    s[35..39].copy_from_slice(&0x1234u32.to_le_bytes());
    let len = |s: &mut Vec<u8>, n: u32| s[32..35].copy_from_slice(&n.to_le_bytes()[..3]);
    match kind % 10 {
        0 => {
            // admin Connect
            s[0] = 0x7F;
            s[4] = 1;
            s[44] = 31;
            s[48..52].copy_from_slice(&5000u32.to_le_bytes());
            len(&mut s, 1024);
        }
        1 => {
            // Property Set CC enable
            s[0] = 0x7F;
            s[44] = 0x14;
            s[48..52].copy_from_slice(&0x0046_0001u32.to_le_bytes());
            s[39] = 0x40;
        }
        2 => {
            // Identify
            s[0] = 0x06;
            s[40] = cid as u8 % 7;
            s[4] = 1;
            len(&mut s, 4096);
        }
        3 => {
            // Get Log Page
            s[0] = 0x02;
            s[40] = [1u8, 2, 3, 4, 0x70][cid as usize % 5];
            s[42..44].copy_from_slice(&255u16.to_le_bytes());
            len(&mut s, 1024);
        }
        4 | 5 => {
            // Read / Write
            s[0] = if kind % 10 == 4 { 0x02 } else { 0x01 };
            s[4] = 1;
            s[40] = cid as u8;
            s[48] = 7;
            len(&mut s, 4096);
        }
        6 => {
            // I/O Connect, in-capsule
            s[0] = 0x7F;
            s[4] = 1;
            s[42] = 1;
            s[44] = 127;
            s[24..40].fill(0);
            s[32..36].copy_from_slice(&1024u32.to_le_bytes());
            s[39] = 0x01;
            s.extend_from_slice(&connect_data(cntlid, false));
        }
        7 => {
            s[0] = 0x0C; // AER
            s[39] = 0x40;
            s[32..35].fill(0);
        }
        8 => {
            s[0] = 0x09; // Set Features
            s[40] = [7u8, 0x0B, 0x0F, 0x81][cid as usize % 4];
            s[44] = 0x03;
            s[45] = 1;
            s[39] = 0x40;
            s[32..35].fill(0);
        }
        _ => {
            s[0] = 0x18; // Keep Alive
            s[39] = 0x40;
            s[32..35].fill(0);
        }
    }
    s
}

fn check_xfer(x: &Xfer) {
    assert!(x.len <= x.remote.len, "{x:?}");
    assert!(x.remote.len < 1 << 24);
    match x.local {
        Local::Scratch { off } => assert!(off as usize + x.len as usize <= SCRATCH, "{x:?}"),
        Local::Namespace { off } => assert!(off + u64::from(x.len) <= DISK as u64, "{x:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut mem = vec![0u64; DISK / 8];
    let p = NonNull::new(mem.as_mut_ptr().cast::<u8>()).unwrap();
    // SAFETY: `mem` outlives the target (dropped after it below) and is
    // used only through the RamDisk.
    let disk = unsafe { RamDisk::new(p, DISK as u64, 0x10_0000) };
    let mut b = Bytes(data);
    let inline = u32::from(b.u8() & 0x3F) * 64;
    let cfg = Config {
        subnqn: SUBNQN,
        serial: "FUZZ",
        model: "fuzz",
        disk: &disk,
        lba_shift: if b.u8() & 1 == 0 { 9 } else { 12 },
        inline_bytes: inline,
        io_queues: u16::from(b.u8() % 4) + 1,
        port_id: 1,
        traddr: TrAddr::V4([10, 0, 0, 1]),
        kas: 10,
    };
    let mut t: Target<'_, 6, 2> = match Target::new(cfg) {
        Ok(t) => t,
        Err(_) => return,
    };
    let mut scratch: HashMap<(u16, u16), Vec<u8>> = HashMap::new();
    let mut pending: HashMap<(u16, u16), u16> = HashMap::new();
    let mut now = 0u64;
    let mut last_cntlid = 1u16;
    for _ in 0..64 {
        if b.0.is_empty() {
            break;
        }
        let op = b.u8();
        let q = u16::from(b.u8() % 6);
        match op % 8 {
            0 => {
                let qid = u16::from(b.u8() % 5);
                let entries = u16::from(b.u8()) + 1;
                let _ =
                    t.queue_opened(QueueId(q), QueueInfo { qid, sq_entries: entries, hrqsize: 32 });
            }
            1 => {
                t.queue_closed(QueueId(q));
                pending.retain(|k, _| k.0 != q);
            }
            2 | 3 => {
                let slot = u16::from(b.u8() % 4);
                if pending.contains_key(&(q, slot)) {
                    continue;
                }
                let cap: Vec<u8> = if op % 8 == 2 {
                    let n = usize::from(b.u8()) * 8;
                    b.take(n).to_vec()
                } else {
                    let kind = b.u8();
                    let cid = b.u16();
                    let mut s = template(kind, cid, last_cntlid);
                    // a few random byte edits
                    for _ in 0..(b.u8() % 4) {
                        let at = usize::from(b.u8()) % s.len();
                        s[at] = b.u8();
                    }
                    s
                };
                let scr = scratch.entry((q, slot)).or_insert_with(|| vec![0u8; SCRATCH]);
                let step = t.capsule(QueueId(q), Slot(slot), &cap, scr, now);
                let cid = (cap.len() >= 4).then(|| u16::from_le_bytes([cap[2], cap[3]]));
                match step {
                    Step::Respond { rsp, write } => {
                        if let Some(c) = cid {
                            assert_eq!(u16::from_le_bytes([rsp.cqe[12], rsp.cqe[13]]), c);
                        }
                        if let Some(x) = write {
                            check_xfer(&x);
                            assert_eq!(rsp.cqe[14] | rsp.cqe[15], 0, "data only with success");
                        }
                        if rsp.cqe[14] | rsp.cqe[15] == 0 && cap.first() == Some(&0x7F) {
                            let dw0 = u16::from_le_bytes([rsp.cqe[0], rsp.cqe[1]]);
                            if cap.get(4) == Some(&1) {
                                last_cntlid = dw0;
                            }
                        }
                    }
                    Step::Fetch(x) => {
                        check_xfer(&x);
                        pending.insert((q, slot), cid.expect("a fetch for an SQE"));
                        // The "RDMA READ": valid Connect data or fuzz bytes.
                        if let Local::Scratch { off } = x.local {
                            let o = off as usize;
                            let n = x.len as usize;
                            if b.u8() & 1 == 0 {
                                let d = connect_data(0xFFFF, b.u8() & 1 == 1);
                                let k = n.min(d.len());
                                scr[o..o + k].copy_from_slice(&d[..k]);
                            } else {
                                let src = b.take(n);
                                scr[o..o + src.len()].copy_from_slice(src);
                            }
                        }
                    }
                    Step::Held => {}
                }
            }
            4 => {
                let slot = u16::from(b.u8() % 4);
                let ok = b.u8() & 3 != 0;
                let want = pending.remove(&(q, slot));
                let scr = scratch.entry((q, slot)).or_insert_with(|| vec![0u8; SCRATCH]);
                match t.fetched(QueueId(q), Slot(slot), ok, scr, now) {
                    Step::Respond { rsp, write } => {
                        if let Some(c) = want {
                            assert_eq!(u16::from_le_bytes([rsp.cqe[12], rsp.cqe[13]]), c);
                        }
                        assert!(write.is_none(), "fetched answers without data to the host");
                    }
                    Step::Fetch(_) => panic!("fetched asked for another fetch"),
                    Step::Held => {}
                }
            }
            5 => {
                now += u64::from(b.u16()) * 16;
                while let Some(e) = t.poll(now) {
                    if let Event::Disconnect(dq) = e {
                        pending.retain(|k, _| k.0 != dq.0);
                    }
                }
            }
            6 => t.notify_ns_changed(),
            _ => now += u64::from(b.u8()),
        }
    }
    drop(t);
    drop(mem);
});
