//! Every error status the spec names (`nvme-rdma-target.md` §2.3, §3, §4,
//! §5, §7), one rule per assertion, against the spec's numbers: (SCT, SC,
//! DNR) read from the wire STATUS field (bit 0 P, 8:1 SC, 11:9 SCT, 15 DNR).

mod fake;

use fake::*;
use irdma_nvmet::{Commands, Event, QueueId, Slot, Step};

/// A status as read from the wire: (SCT, SC, DNR).
type Status = (u8, u8, bool);

/// A generic command status (SCT 0) with DNR set.
const fn generic(sc: u8) -> Status {
    (0, sc, true)
}

const INVALID_OPCODE: Status = generic(0x01);
const INVALID_FIELD: Status = generic(0x02);
const INVALID_NS: Status = generic(0x0B);
const CMD_SEQ: Status = generic(0x0C);
const SGL_LEN: Status = generic(0x0F);
const SGL_TYPE: Status = generic(0x11);
const SGL_OFFSET: Status = generic(0x16);
const KATO_INVALID: Status = generic(0x1A);
const LBA_RANGE: Status = generic(0x80);

/// The Fabrics Connect command's own statuses (SCT 1), DNR set.
const CONNECT_FORMAT: Status = (1, 0x80, true);
const CONNECT_INVALID_PARAM: Status = (1, 0x82, true);
const CONNECT_INVALID_HOST: Status = (1, 0x84, true);
const CONNECT_BUSY: Status = (1, 0x81, true);

fn st(o: Outcome) -> Status {
    let r = o.rsp();
    assert_eq!(r.status & 1, 0, "phase bit 0");
    r.sct_sc_dnr()
}

#[test]
fn status_field_is_shifted_with_phase_zero() {
    let (mut f, _) = live(0, 1);
    let r = f.run(101, &sqe(0x55, 0xBEEF, 1)).rsp();
    assert_eq!(r.status, (0x4000 | 0x01) << 1, "Linux form << 1");
    assert_eq!(r.cid, 0xBEEF, "CID echoed");
}

#[test]
fn flags_psdt_and_fuse() {
    let (mut f, _) = live(0, 1);
    let mut s = sqe(0x18, 1, 0);
    s[1] = 0x00; // PSDT 00b (PRP)
    assert_eq!(st(f.run(100, &s)), INVALID_FIELD, "PSDT 00b");
    s[1] = 0x80; // PSDT 10b
    assert_eq!(st(f.run(100, &s)), INVALID_FIELD, "PSDT 10b");
    s[1] = 0x41; // FUSE first
    assert_eq!(st(f.run(100, &s)), INVALID_FIELD, "FUSE");
}

#[test]
fn sgl_descriptor_rules() {
    let (mut f, _) = live(4096, 1);
    let mut s = Fake::rw_sqe(0x02, 1, 0, 1);
    set_keyed(&mut s, 0, 512, true);
    s[39] = 0x20; // Segment, address: another type
    assert_eq!(st(f.run(101, &s)), SGL_TYPE, "type 2");
    s[39] = 0x31; // Last Segment, offset (never used)
    assert_eq!(st(f.run(101, &s)), SGL_TYPE, "type 3");
    s[39] = 0x41; // keyed, subtype 1
    assert_eq!(st(f.run(101, &s)), INVALID_FIELD, "type 4 other subtype");
    s[39] = 0x00; // data block, address subtype
    assert_eq!(st(f.run(101, &s)), INVALID_FIELD, "type 0 other subtype");
    // In-capsule for a read-direction command.
    let mut s = Fake::rw_sqe(0x02, 1, 0, 1);
    set_inline(&mut s, 0, 512);
    let mut cap = s.to_vec();
    cap.extend_from_slice(&[0; 512]);
    assert_eq!(st(f.run(101, &cap)), INVALID_FIELD, "in-capsule read");
    // In-capsule past the in-capsule size.
    let mut s = Fake::rw_sqe(0x01, 1, 0, 1);
    set_inline(&mut s, 4096 - 511, 512);
    let mut cap = s.to_vec();
    cap.extend_from_slice(&[0; 4096]);
    assert_eq!(st(f.run(101, &cap)), SGL_OFFSET, "offset + length > in-capsule size");
    // In-capsule on the admin queue (admin capsules are 64 bytes).
    let mut s = connect_sqe(1, 0, 31, 0);
    set_inline(&mut s, 0, 1024);
    let mut cap = s.to_vec();
    cap.extend_from_slice(&connect_data(0xFFFF, SUBNQN, HOSTNQN));
    f.open(300, 0, 32);
    assert_eq!(st(f.run(300, &cap)), SGL_OFFSET, "in-capsule on the admin queue");
}

#[test]
fn in_capsule_beyond_the_bytes_received() {
    let (mut f, _) = live(4096, 1);
    let mut s = Fake::rw_sqe(0x01, 1, 0, 2);
    set_inline(&mut s, 0, 1024);
    let mut cap = s.to_vec();
    cap.extend_from_slice(&[0; 512]);
    assert_eq!(st(f.run(101, &cap)), SGL_OFFSET);
}

#[test]
fn io_command_rules() {
    let (mut f, _) = live(0, 1);
    // Exact length: (NLB+1) << LBADS.
    let mut s = Fake::rw_sqe(0x02, 1, 0, 2);
    set_keyed(&mut s, 0, 512, true);
    assert_eq!(st(f.run(101, &s)), SGL_LEN, "SGL shorter than the blocks");
    set_keyed(&mut s, 0, 2048, true);
    assert_eq!(st(f.run(101, &s)), SGL_LEN, "SGL longer than the blocks");
    let mut s = Fake::rw_sqe(0x01, 1, 0, 1);
    set_keyed(&mut s, 0, 0, false);
    assert_eq!(st(f.run(101, &s)), SGL_LEN, "write without data");
    // SLBA + NLB past NSZE.
    let nsze = (DISK_BYTES / 512) as u64;
    let mut s = Fake::rw_sqe(0x02, 1, nsze - 1, 2);
    set_keyed(&mut s, 0, 1024, true);
    assert_eq!(st(f.run(101, &s)), LBA_RANGE, "read across the end");
    let mut s = Fake::rw_sqe(0x01, 1, u64::MAX, 1);
    set_keyed(&mut s, 0, 512, true);
    assert_eq!(st(f.run(101, &s)), LBA_RANGE, "write at SLBA 2^64-1");
    let mut s = Fake::rw_sqe(0x08, 1, nsze, 1);
    s[39] = 0x40;
    assert_eq!(st(f.run(101, &s)), LBA_RANGE, "write zeroes past the end");
    // Bad NSID.
    let mut s = Fake::rw_sqe(0x02, 1, 0, 1);
    set_keyed(&mut s, 0, 512, true);
    s[4..8].copy_from_slice(&2u32.to_le_bytes());
    assert_eq!(st(f.run(101, &s)), INVALID_NS, "NSID 2");
    s[4..8].copy_from_slice(&0xFFFF_FFFFu32.to_le_bytes());
    assert_eq!(st(f.run(101, &s)), INVALID_NS, "NSID all");
    // MDTS 8: more than 1 MiB.
    let mut s = Fake::rw_sqe(0x02, 1, 0, 2049);
    set_keyed(&mut s, 0, 2049 * 512, true);
    assert_eq!(st(f.run(101, &s)), INVALID_FIELD, "1 MiB + 512");
    // Other opcodes.
    for op in [0x04u8, 0x05, 0x09, 0x0C, 0x11, 0x7E, 0xFF] {
        assert_eq!(st(f.run(101, &sqe(op, 1, 1))), INVALID_OPCODE, "I/O opcode {op:#x}");
    }
    // Fabrics on an I/O queue after Connect: only Connect exists there.
    let mut s = sqe(0x7F, 1, 0);
    s[4] = 0x04;
    assert_eq!(st(f.run(101, &s)), INVALID_OPCODE, "Property Get on an I/O queue");
    // Flush with data.
    let mut s = sqe(0x00, 1, 1);
    set_keyed(&mut s, 0, 512, true);
    assert_eq!(st(f.run(101, &s)), SGL_LEN, "Flush with data");
}

#[test]
fn admin_command_rules() {
    let (mut f, _) = live(0, 1);
    for op in [0x01u8, 0x04, 0x05, 0x10, 0x80, 0xC0] {
        assert_eq!(st(f.run(100, &sqe(op, 1, 0))), INVALID_OPCODE, "admin opcode {op:#x}");
    }
    let mut s = sqe(0x7F, 1, 0);
    s[4] = 0x08; // Disconnect, absent from 6.1
    assert_eq!(st(f.run(100, &s)), INVALID_OPCODE, "unknown FCTYPE");
    // Identify.
    assert_eq!(st(Outcome::Rsp(f.identify(100, 0x05, 0).0)), INVALID_FIELD, "CNS 05h");
    assert_eq!(st(Outcome::Rsp(f.identify(100, 0x00, 0xFFFF_FFFF).0)), INVALID_NS, "CNS 0 all");
    assert_eq!(st(Outcome::Rsp(f.identify(100, 0x03, 2).0)), INVALID_NS, "CNS 3 unknown");
    let mut s = sqe(0x06, 1, 0);
    s[40] = 0x06;
    s[47] = 2; // CSI ZNS
    assert_eq!(st(Outcome::Rsp(f.admin_read(100, s, 4096).0)), INVALID_FIELD, "CNS 6 CSI 2");
    let mut s = sqe(0x06, 1, 0);
    s[40] = 0x01;
    assert_eq!(st(Outcome::Rsp(f.admin_read(100, s, 1024).0)), SGL_LEN, "Identify of 1024 B");
    // Logs.
    assert_eq!(st(Outcome::Rsp(f.log(100, 0x05, 0, 4096, 0, false).0)), INVALID_FIELD, "LID 05h");
    assert_eq!(
        st(Outcome::Rsp(f.log(100, 0x70, 0, 1024, 0, false).0)),
        INVALID_FIELD,
        "70h on I/O"
    );
    assert_eq!(
        st(Outcome::Rsp(f.log(100, 0x02, 0, 512, 2, false).0)),
        INVALID_FIELD,
        "LPO unaligned"
    );
    assert_eq!(
        st(Outcome::Rsp(f.log(100, 0x02, 0, 512, 1024, false).0)),
        INVALID_FIELD,
        "LPO past"
    );
    let mut s = sqe(0x02, 1, 0);
    s[40] = 0x02;
    s[42] = 127; // 512 B
    assert_eq!(st(Outcome::Rsp(f.admin_read(100, s, 256).0)), SGL_LEN, "(NUMD+1)*4 ≠ SGL");
    assert_eq!(
        st(Outcome::Rsp(f.log(100, 0x04, 0, 8192, 0, false).0)),
        INVALID_FIELD,
        "more than SCRATCH"
    );
    // Features.
    assert_eq!(st(Outcome::Rsp(f.set_features(100, 0x07, 0xFFFF))), INVALID_FIELD, "NSQR 0xFFFF");
    assert_eq!(st(Outcome::Rsp(f.set_features(100, 0x07, 0xFFFF_0000))), INVALID_FIELD, "NCQR");
    assert_eq!(st(Outcome::Rsp(f.set_features(100, 0x81, 0))), CMD_SEQ, "Set Host Identifier");
    assert_eq!(st(Outcome::Rsp(f.get_features(100, 0x81, 0))), INVALID_FIELD, "Get HostID EXHID 0");
    assert_eq!(st(Outcome::Rsp(f.set_features(100, 0x0B, 1 << 31))), INVALID_FIELD, "AEC bit 31");
    assert_eq!(st(Outcome::Rsp(f.set_features(100, 0x02, 0))), INVALID_FIELD, "FID 02h");
    assert_eq!(st(Outcome::Rsp(f.get_features(100, 0x7F, 0))), INVALID_FIELD, "FID 7Fh");
    // Get Features 06h VWC → 1; 81h with EXHID returns the 16-byte HOSTID.
    assert_eq!(f.get_features(100, 0x06, 0).dw0, 1);
    let mut s = sqe(0x0A, 1, 0);
    s[40] = 0x81;
    s[44] = 1;
    let (r, id) = f.admin_read(100, s, 16);
    assert!(r.ok());
    assert_eq!(id, (0xA0..0xB0).collect::<Vec<u8>>());
    // Properties.
    assert_eq!(st(Outcome::Rsp(f.prop_get(100, 0x00, false))), INVALID_FIELD, "4-byte CAP");
    assert_eq!(st(Outcome::Rsp(f.prop_get(100, 0x08, true))), INVALID_FIELD, "8-byte VS");
    assert_eq!(st(Outcome::Rsp(f.prop_get(100, 0x20, false))), INVALID_FIELD, "NSSR");
    assert_eq!(st(Outcome::Rsp(f.prop_set(100, 0x08, 1))), INVALID_FIELD, "Set VS");
    assert_eq!(st(Outcome::Rsp(f.prop_set(100, 0x20, 0x4E56_4D65))), INVALID_FIELD, "Set NSSR");
    // Abort → success, "not aborted".
    let r = f.run(100, &sqe(0x08, 1, 0)).rsp();
    assert_eq!((r.status, r.dw0 & 1), (0, 1));
}

#[test]
fn keep_alive_with_kato_zero() {
    let mut f = Fake::new(0, 1);
    let _ = f.live_admin(100, 0);
    assert_eq!(st(f.run(100, &sqe(0x18, 1, 0))), KATO_INVALID);
    f.now += 10_000_000;
    assert!(f.poll_all().is_empty(), "no timer with KATO 0");
}

#[test]
fn sequence_errors() {
    let mut f = Fake::new(0, 2);
    f.open(100, 0, 32);
    // Before Connect: only Connect.
    assert_eq!(st(f.run(100, &sqe(0x06, 1, 0))), INVALID_OPCODE, "Identify before Connect");
    let mut s = sqe(0x7F, 1, 0);
    s[4] = 0x04;
    assert_eq!(st(f.run(100, &s)), INVALID_OPCODE, "Property Get before Connect");
    let id = f.connect_admin(100, SUBNQN, 5000).dw0 as u16;
    // Before CC.EN / RDY: Command Sequence Error.
    assert_eq!(st(Outcome::Rsp(f.identify(100, 1, 0).0)), CMD_SEQ, "Identify before enable");
    assert_eq!(st(f.run(100, &sqe(0x18, 1, 0))), CMD_SEQ, "Keep Alive before enable");
    // A Connect on a queue that has one.
    assert_eq!(st(Outcome::Rsp(f.connect_admin(100, SUBNQN, 5000))), CMD_SEQ, "2nd admin Connect");
    f.enable(100);
    f.open(101, 1, 128);
    assert!(f.connect_io_keyed(101, 1, &connect_data(id, SUBNQN, HOSTNQN)).ok());
    let d = connect_data(id, SUBNQN, HOSTNQN);
    assert_eq!(st(Outcome::Rsp(f.connect_io_keyed(101, 1, &d))), CMD_SEQ, "again on its queue");
    f.open(102, 1, 128);
    assert_eq!(st(Outcome::Rsp(f.connect_io_keyed(102, 1, &d))), CMD_SEQ, "QID 1 exists");
    // I/O before the I/O queue's Connect.
    f.open(103, 2, 128);
    assert_eq!(
        st(f.run(103, &Fake::rw_sqe(0x00, 1, 0, 1))),
        INVALID_OPCODE,
        "Flush before Connect"
    );
    // After disable, commands are sequence errors again.
    assert!(f.prop_set(100, 0x14, 0x0046_0000).ok());
    assert_eq!(f.prop_get(100, 0x1C, false).dw0 & 1, 0, "RDY cleared by EN 0");
    assert_eq!(st(f.run(101, &sqe(0x00, 1, 1))), CMD_SEQ, "Flush while disabled");
}

#[test]
fn cc_enable_with_bad_fields_sets_cfs() {
    let mut f = Fake::new(0, 1);
    f.open(100, 0, 32);
    assert!(f.connect_admin(100, SUBNQN, 5000).ok());
    assert!(f.prop_set(100, 0x14, 0x0045_0001).ok(), "IOSQES 5");
    assert_eq!(f.prop_get(100, 0x1C, false).dw0 & 3, 2, "CFS, not RDY");
    let mut f = Fake::new(0, 1);
    f.open(100, 0, 32);
    assert!(f.connect_admin(100, SUBNQN, 5000).ok());
    assert!(f.prop_set(100, 0x14, 0x0046_0081).ok(), "MPS 1");
    assert_eq!(f.prop_get(100, 0x1C, false).dw0 & 3, 2);
}

#[test]
fn connect_rules() {
    let mut f = Fake::new(0, 2);
    f.open(100, 0, 32);
    let admin = |f: &mut Fake, q: u16, s: [u8; 64], d: Vec<u8>| {
        let mut s = s;
        f.host[..d.len()].copy_from_slice(&d);
        set_keyed(&mut s, 0, d.len() as u32, true);
        f.run(q, &s).rsp()
    };
    let good = || connect_data(0xFFFF, SUBNQN, HOSTNQN);
    // Data length ≠ 1024 → Data SGL Length Invalid (SCT 0).
    let r = admin(&mut f, 100, connect_sqe(1, 0, 31, 0), vec![0u8; 512]);
    assert_eq!(r.sct_sc_dnr(), SGL_LEN, "512-byte data");
    // RECFMT ≠ 0.
    let mut s = connect_sqe(1, 0, 31, 0);
    s[40] = 1;
    assert_eq!(admin(&mut f, 100, s, good()).sct_sc_dnr(), CONNECT_FORMAT);
    // Admin CNTLID ≠ 0xFFFF: IATTR bit 16 | offset 16.
    let r = admin(&mut f, 100, connect_sqe(1, 0, 31, 0), connect_data(1, SUBNQN, HOSTNQN));
    assert_eq!((r.sct_sc_dnr(), r.dw0), (CONNECT_INVALID_PARAM, 0x1_0010));
    // Unknown SUBNQN: offset 256 in the data.
    let r = admin(&mut f, 100, connect_sqe(1, 0, 31, 0), connect_data(0xFFFF, "nqn.x", HOSTNQN));
    assert_eq!((r.sct_sc_dnr(), r.dw0), (CONNECT_INVALID_PARAM, 0x1_0100));
    // SQSIZE 0 and > MQES (127): SQE offset 44.
    let r = admin(&mut f, 100, connect_sqe(1, 0, 0, 0), good());
    assert_eq!((r.sct_sc_dnr(), r.dw0), (CONNECT_INVALID_PARAM, 44));
    let r = admin(&mut f, 100, connect_sqe(1, 0, 128, 0), good());
    assert_eq!((r.sct_sc_dnr(), r.dw0), (CONNECT_INVALID_PARAM, 44));
    // QID ≠ the CM's QID (stricter than nvmet): SQE offset 42.
    let r = admin(&mut f, 100, connect_sqe(1, 1, 31, 0), good());
    assert_eq!((r.sct_sc_dnr(), r.dw0), (CONNECT_INVALID_PARAM, 42));
    // An empty HOSTNQN is no host.
    let r = admin(&mut f, 100, connect_sqe(1, 0, 31, 0), connect_data(0xFFFF, SUBNQN, ""));
    assert_eq!(r.sct_sc_dnr(), CONNECT_INVALID_HOST);
    // Now a good one, then the I/O rules.
    let id = admin(&mut f, 100, connect_sqe(1, 0, 31, 5000), good()).dw0 as u16;
    f.enable(100);
    f.open(101, 1, 128);
    let io = |f: &mut Fake, q: u16, qid: u16, d: Vec<u8>| {
        let mut s = connect_sqe(2, qid, 127, 0);
        f.host[..d.len()].copy_from_slice(&d);
        set_keyed(&mut s, 0, d.len() as u32, true);
        f.run(q, &s).rsp()
    };
    let r = io(&mut f, 101, 1, connect_data(id.wrapping_add(1), SUBNQN, HOSTNQN));
    assert_eq!((r.sct_sc_dnr(), r.dw0), (CONNECT_INVALID_PARAM, 0x1_0010), "unknown CNTLID");
    let r = io(&mut f, 101, 1, connect_data(id, DISC, HOSTNQN));
    assert_eq!((r.sct_sc_dnr(), r.dw0), (CONNECT_INVALID_PARAM, 0x1_0100), "other SUBNQN");
    let r = io(&mut f, 101, 1, connect_data(id, SUBNQN, "nqn.2014-08.org.nvmexpress:uuid:other"));
    assert_eq!((r.sct_sc_dnr(), r.dw0), (CONNECT_INVALID_PARAM, 0x1_0200), "other HOSTNQN");
    f.open(103, 3, 128);
    let r = io(&mut f, 103, 3, connect_data(id, SUBNQN, HOSTNQN));
    assert_eq!((r.sct_sc_dnr(), r.dw0), (CONNECT_INVALID_PARAM, 42), "QID 3 > 2 granted");
    let r = io(&mut f, 101, 2, connect_data(id, SUBNQN, HOSTNQN));
    assert_eq!((r.sct_sc_dnr(), r.dw0), (CONNECT_INVALID_PARAM, 42), "QID ≠ the CM's QID 1");
    assert!(io(&mut f, 101, 1, connect_data(id, SUBNQN, HOSTNQN)).ok());
    // The discovery controller takes no I/O queue.
    f.open(200, 0, 32);
    let r = admin(&mut f, 200, connect_sqe(1, 0, 31, 0), connect_data(0xFFFF, DISC, HOSTNQN));
    let did = r.dw0 as u16;
    f.open(201, 1, 128);
    let r = io(&mut f, 201, 1, connect_data(did, DISC, HOSTNQN));
    assert_eq!(r.sct_sc_dnr(), CONNECT_INVALID_PARAM);
}

#[test]
fn controller_table_full_is_busy() {
    let mut f = Fake::new(0, 1);
    for q in 0..4 {
        f.open(q, 0, 32);
        assert!(f.connect_admin(q, SUBNQN, 0).ok());
    }
    f.open(9, 0, 32);
    assert_eq!(f.connect_admin(9, SUBNQN, 0).sct_sc_dnr(), CONNECT_BUSY);
    // CNTLIDs are distinct and in [1, 0xFFEF].
    f.t.queue_closed(QueueId(0));
    assert!(f.connect_admin(9, SUBNQN, 0).ok(), "a freed controller slot is reused at once");
}

#[test]
fn discovery_refusals() {
    let mut f = Fake::new(0, 1);
    f.live_admin_to(7, DISC, 0);
    assert_eq!(st(Outcome::Rsp(f.identify(7, 0x00, 1).0)), INVALID_FIELD, "CNS 00h");
    assert_eq!(st(Outcome::Rsp(f.identify(7, 0x02, 0).0)), INVALID_FIELD, "CNS 02h");
    assert_eq!(st(Outcome::Rsp(f.set_features(7, 0x07, 0))), INVALID_FIELD, "Number of Queues");
    assert_eq!(st(Outcome::Rsp(f.log(7, 0x02, 0, 512, 0, false).0)), INVALID_FIELD, "SMART");
    assert_eq!(st(f.run(7, &sqe(0x08, 1, 0))), INVALID_OPCODE, "Abort");
    assert_eq!(st(Outcome::Rsp(f.log(7, 0x70, 0, 1024, 3076, false).0)), INVALID_FIELD, "LPO past");
    assert!(f.set_features(7, 0x0B, 1 << 31).ok(), "discovery AEC bit 31");
    assert!(f.set_features(7, 0x0F, 30_000).ok(), "KATO");
    assert_eq!(f.get_features(7, 0x0F, 0).dw0, 30_000);
}

/// A capsule shorter than the 64-byte SQE: Invalid Field with its CID
/// when 4 bytes came; shorter is fatal for the controller.
#[test]
fn short_capsules() {
    let (mut f, _) = live(0, 2);
    let r = f.run(101, &[0x02, 0x40, 0x34, 0x12, 1, 0, 0, 0, 9, 9]).rsp();
    assert_eq!((r.sct_sc_dnr(), r.cid), (INVALID_FIELD, 0x1234));
    assert!(matches!(f.run(101, &[0x02, 0x40, 0x34]), Outcome::Held));
    let mut ev = f.poll_all();
    ev.sort_by_key(|e| match e {
        Event::Disconnect(q) => q.0,
        _ => 0,
    });
    let want: Vec<Event> = (100..=102).map(|q| Event::Disconnect(QueueId(q))).collect();
    assert_eq!(ev, want, "the controller's queues all go");
}

/// A failed RDMA READ answers Data Transfer Error (retryable).
#[test]
fn failed_fetch() {
    let (mut f, _) = live(0, 1);
    let mut s = Fake::rw_sqe(0x01, 77, 0, 1);
    set_keyed(&mut s, 0x20000, 512, true);
    let r = f.run_slot(101, 5, &s, false).rsp();
    assert_eq!((r.sct_sc_dnr(), r.cid), ((0, 0x04, false), 77), "Data Transfer Error, no DNR");
    // `fetched` for a slot that fetches nothing does not run a command.
    let mut scr = vec![0u8; irdma_nvmet::SCRATCH];
    let step = f.t.fetched(QueueId(101), Slot(6), true, &mut scr, 0);
    let Step::Respond { rsp, write: None } = step else { panic!("{step:?}") };
    assert_ne!(rsp.cqe[14] | rsp.cqe[15], 0, "an error status");
}

#[test]
fn config_validation() {
    use irdma_nvmet::ctrl::{ConfigError, Target};
    let t = |c| Target::<'static, 2, 1>::new(c).err();
    let mut c = config(ram(1 << 16), 0, 1);
    c.lba_shift = 10;
    assert_eq!(t(c), Some(ConfigError::LbaSize));
    let mut c = config(ram(4096 + 512), 0, 1);
    c.lba_shift = 12;
    assert_eq!(t(c), Some(ConfigError::DiskSize), "not whole 4 KiB blocks");
    let mut c = config(ram(1 << 16), 0, 1);
    c.subnqn = DISC;
    assert_eq!(t(c), Some(ConfigError::Nqn));
    let mut c = config(ram(1 << 16), 0, 1);
    c.serial = "012345678901234567890";
    assert_eq!(t(c), Some(ConfigError::Strings), "SN is 20 bytes");
    assert_eq!(t(config(ram(1 << 16), 0, 0)), Some(ConfigError::Queues));
    assert_eq!(t(config(ram(1 << 16), 100, 1)), Some(ConfigError::InCapsule));
    let mut c = config(ram(1 << 16), 0, 1);
    c.kas = 0;
    assert_eq!(t(c), Some(ConfigError::Kas), "KAS ≠ 0 (spec §5.1 step 7)");
    assert_eq!(t(config(ram(1 << 16), 1024, 1)), None);
}

#[test]
fn features_and_zero_logs() {
    let (mut f, _) = live(0, 1);
    assert_eq!(f.get_features(100, 0x07, 0).dw0, 0x0003_0003, "4 I/O queues, 0's based");
    assert!(f.set_features(100, 0x0F, 1500).ok());
    assert_eq!(f.get_features(100, 0x0F, 0).dw0, 2000, "KATO rounded up to seconds");
    assert!(f.set_features(100, 0x0B, 0x100).ok());
    assert_eq!(f.get_features(100, 0x0B, 0).dw0, 0x100);
    for (lid, len) in [(0x01u8, 64u32), (0x02, 512), (0x03, 512), (0x04, 4096)] {
        let (r, page) = f.log(100, lid, 0xFFFF_FFFF, len, 0, false);
        assert!(r.ok(), "LID {lid:#x}");
        assert!(page.iter().all(|&b| b == 0), "LID {lid:#x} zeros");
    }
    // 4 KiB blocks: NSZE and LBADS follow.
    let mut c = config(ram(1 << 20), 0, 1);
    c.lba_shift = 12;
    let mut f = Fake::with(c);
    let _ = f.live_admin(100, 5000);
    let (_, ns) = f.identify(100, 0, 1);
    assert_eq!((get64(&ns, 0), ns[130]), (256, 12));
}
