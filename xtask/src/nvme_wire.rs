//! The NVMe/RDMA judge of a capture (issue #32): tshark's NVMe-oF RDMA
//! dissector (`nvme-rdma` + `nvme`, shared/spec/nvme-rdma-target.md §9)
//! decodes every command capsule (SQE) and response capsule (CQE) of a
//! pcap(ng) of the wire; [`judge`] pairs them and counts what a target
//! must get right. Used by `peer run nvme-linux-reference` (Linux's
//! nvmet-rdma) and meant for the project's own target later.
//!
//! * Pairs: a command is answered by the next response with the same
//!   queue id and CID (§2.1: the CQE echoes the CID; CIDs are reused, so
//!   pairs are matched in order). Every command but the Asynchronous Event
//!   Request (admin opcode 0Ch, held by the target until an event, §5; the
//!   host cancels it locally at disconnect) must be answered; every
//!   response must answer a command.
//! * Retransmissions (rxe's go-back-N after a lost frame) carry the same
//!   BTH PSN to the same QP from the same address: counted once.
//! * No frame of the capture is malformed and none has an expert item of
//!   severity error, but for one fault of tshark 4.0.17's NVMe dissector,
//!   measured on Linux's own nvmet-rdma (`peer run nvme-linux-reference`):
//!   the Commands Supported and Effects log page (LID 05h, 4096 B, read by
//!   the 6.1 host when the controller sets LPA bit 1) sent as RDMA WRITE
//!   First / Middle / Last at path MTU 1024 decodes 255 entries of each
//!   Middle and Last packet and then throws ("Malformed Packet (Exception
//!   occurred)") — the payload is the log's plain dwords, nothing a target
//!   can get wrong in framing. Such frames (those that carry
//!   `nvme.cmd.get_logpage.cmd_and_eff.cs`) are counted apart
//!   ([`NvmeWire::malformed_effects_log`]) and do not fail the judgement.
//! * Fabrics Connect, Identify, Read and Write are present.
//!
//! A second fault of the same dissector: a capsule that spans several
//! packets (SEND First … Last: the 6.1 host's I/O-queue Connect, a 64 B
//! SQE and 1024 B of in-capsule data when the target advertises in-capsule
//! room, at path MTU 1024) is not decoded, only shown as
//! `nvme-rdma.unknown_data` ("Dissection unsupported"), and so is that
//! command's 16-byte response. [`tally`] reads those two itself from the
//! raw bytes (the SQE at the start of SEND First: opcode byte 0, CID bytes
//! 2–3, FCTYPE byte 4; a 16-byte SEND Only is a CQE: CID bytes 12–13,
//! status 14–15; spec §2.1–2.2) and counts them in
//! [`NvmeWire::undecoded`].
//!
//! The dissector only sees queues whose CM REQ/REP it saw (§9): the
//! capture must start before the first connection.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::util::ensure_program;

/// tshark's fields, in this order, one line per frame that has an SQE or
/// a CQE (`-E occurrence=a`: several values comma-separated).
/// Fabrics commands (opcode 7Fh) have their own opcode and CID fields.
pub const FIELDS: &[&str] = &[
    "frame.number",
    "ip.src",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "nvme-rdma.cmd.qid",
    "nvme.cmd.opc",
    "nvme.cmd.cid",
    "nvme.fabrics.cmd.opc",
    "nvme.fabrics.cmd.fctype",
    "nvme.fabrics.cmd.cid",
    "nvme.cqe.cid",
    "nvme.cqe.status",
    "infiniband.bth.opcode",
    "nvme-rdma.unknown_data",
];

/// The display filter of the frames [`FIELDS`] are read from.
pub const CAPSULES: &str =
    "nvme.cmd.opc || nvme.fabrics.cmd.opc || nvme.cqe.cid || nvme-rdma.unknown_data";

/// The frames of tshark 4.0.17's Effects-log fault (module docs).
pub const EFFECTS_LOG: &str = "nvme.cmd.get_logpage.cmd_and_eff.cs";

/// What [`judge`] found in a capture.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct NvmeWire {
    /// Frames of the capture.
    pub frames: usize,
    /// Frames tshark marked malformed.
    pub malformed: usize,
    /// Of those, the Effects log's data frames (module docs: a dissector
    /// fault, not counted against the target).
    pub malformed_effects_log: usize,
    /// Frames with an expert item of severity error, but for the Effects
    /// log's data frames.
    pub expert_errors: usize,
    /// Frames with an SQE or a CQE.
    pub capsule_frames: usize,
    /// Of those, retransmissions (same source, QP and PSN as an earlier one).
    pub retransmitted: usize,
    /// Command capsules.
    pub commands: usize,
    /// Response capsules.
    pub responses: usize,
    /// Responses with a status other than 0.
    pub error_status: usize,
    /// Commands and responses tshark left undecoded, read from the raw
    /// bytes (module docs).
    pub undecoded: usize,
    /// Fabrics Connect commands (opcode 7Fh, FCTYPE 01h).
    pub connects: usize,
    /// Identify (admin opcode 06h).
    pub identifies: usize,
    /// Read (I/O opcode 02h).
    pub reads: usize,
    /// Write (I/O opcode 01h).
    pub writes: usize,
    /// Commands per queue id.
    pub per_queue: BTreeMap<u16, usize>,
    /// Commands without a response (not counting AERs): "qid Q cid C opc O frame F".
    pub unanswered: Vec<String>,
    /// AERs still outstanding at the end (allowed).
    pub aer_outstanding: usize,
    /// Responses without a command.
    pub unmatched: Vec<String>,
    /// Lines tshark printed that could not be read.
    pub unreadable: Vec<String>,
}

impl NvmeWire {
    /// One line for the run's output.
    pub fn summary(&self) -> String {
        let q: Vec<String> = self.per_queue.iter().map(|(q, n)| format!("q{q}:{n}")).collect();
        format!(
            "{} frames, {} malformed ({} of them the Effects log's data: dissector fault), \
             {} with other expert errors; {} commands ({}), {} responses ({} with an error status), \
             {} of them read from bytes tshark left undecoded, {} retransmitted capsules; connect {}, identify {}, read {}, write {}; \
             {} unanswered (+{} AER outstanding), {} unmatched responses",
            self.frames,
            self.malformed,
            self.malformed_effects_log,
            self.expert_errors,
            self.commands,
            q.join(" "),
            self.responses,
            self.error_status,
            self.undecoded,
            self.retransmitted,
            self.connects,
            self.identifies,
            self.reads,
            self.writes,
            self.unanswered.len(),
            self.aer_outstanding,
            self.unmatched.len()
        )
    }

    /// What fails the judgement (empty: passed).
    pub fn failures(&self) -> Vec<String> {
        let mut f = Vec::new();
        if self.frames == 0 {
            f.push("empty capture".to_string());
        }
        if self.malformed > self.malformed_effects_log {
            f.push(format!(
                "{} malformed frames (not the Effects log's)",
                self.malformed - self.malformed_effects_log
            ));
        }
        if self.expert_errors > 0 {
            f.push(format!("{} frames with expert errors", self.expert_errors));
        }
        let few = |v: &[String]| v.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
        if !self.unanswered.is_empty() {
            f.push(format!(
                "{} commands without a response: {}",
                self.unanswered.len(),
                few(&self.unanswered)
            ));
        }
        if !self.unmatched.is_empty() {
            f.push(format!(
                "{} responses without a command: {}",
                self.unmatched.len(),
                few(&self.unmatched)
            ));
        }
        if !self.unreadable.is_empty() {
            f.push(format!("unreadable tshark lines: {}", few(&self.unreadable)));
        }
        for (n, what) in [
            (self.connects, "Fabrics Connect"),
            (self.identifies, "Identify"),
            (self.reads, "Read"),
            (self.writes, "Write"),
        ] {
            if n == 0 {
                f.push(format!("no {what} command"));
            }
        }
        f
    }
}

/// A number as tshark prints it (decimal, or 0x… hex).
fn num(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The first of a field's comma-separated values.
fn first(s: &str) -> Option<u64> {
    s.split(',').next().and_then(num)
}

/// The first value of a field tshark prints in hex without `0x`
/// (`nvme.fabrics.cmd.opc` prints `7f`).
fn first_hex(s: &str) -> Option<u64> {
    let v = s.split(',').next()?.trim();
    u64::from_str_radix(v.strip_prefix("0x").unwrap_or(v), 16).ok()
}

/// An undecoded capsule (module docs) from its BTH opcode and raw bytes:
/// `Ok((opcode, cid, fctype))` for a command, `Err((cid, status))` for a
/// response; `None` for anything else (a continuation packet).
#[allow(clippy::type_complexity)]
fn raw_capsule(bth_opcode: u64, hex: &str) -> Option<Result<(u8, u16, u8), (u16, u16)>> {
    let hex: String = hex.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    let b: Vec<u8> = (0..hex.len() / 2)
        .filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    let le = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    // SEND First, SEND Only, SEND Only with Immediate / with Invalidate
    match bth_opcode {
        0 | 4 | 5 if b.len() >= 64 => Some(Ok((b[0], le(2), b[4]))),
        4 | 5 | 23 if b.len() == 16 => Some(Err((le(12), le(14)))),
        _ => None,
    }
}

/// Tallies tshark's `-T fields` output for [`FIELDS`] (tab-separated, one
/// line per frame, in capture order) into `w`.
pub fn tally(tsv: &str, w: &mut NvmeWire) {
    let mut seen: HashSet<(String, u64, u64)> = HashSet::new();
    // (qid, cid) → outstanding commands (frame, opcode), oldest first
    let mut open: HashMap<(u16, u16), Vec<(u64, u8)>> = HashMap::new();
    for line in tsv.lines().filter(|l| !l.trim().is_empty()) {
        let c: Vec<&str> = line.split('\t').collect();
        let field = |i: usize| c.get(i).copied().unwrap_or("");
        let (Some(frame), Some(qid)) = (first(field(0)), first(field(4))) else {
            w.unreadable.push(line.chars().take(80).collect());
            continue;
        };
        let qid = qid as u16;
        w.capsule_frames += 1;
        if let (Some(qp), Some(psn)) = (first(field(2)), first(field(3)))
            && !seen.insert((field(1).to_string(), qp, psn))
        {
            w.retransmitted += 1;
            continue;
        }
        // an NVMe command, or a Fabrics one, or one tshark left undecoded
        let raw = first(field(12)).and_then(|op| raw_capsule(op, field(13)));
        let decoded = !field(5).is_empty() || !field(7).is_empty() || !field(10).is_empty();
        if raw.is_some() && !decoded {
            w.undecoded += 1;
        }
        let cmd = first(field(5))
            .zip(first(field(6)))
            .map(|(o, c)| (o as u8, c as u16, None))
            .or_else(|| {
                let (o, c) = first_hex(field(7)).zip(first(field(9)))?;
                Some((o as u8, c as u16, first(field(8)).map(|f| f as u8)))
            })
            .or(match raw {
                Some(Ok((o, c, f))) => Some((o, c, Some(f))),
                _ => None,
            });
        let rsp =
            first(field(10)).map(|c| (c as u16, first(field(11)).unwrap_or(0))).or(match raw {
                Some(Err((c, st))) => Some((c, u64::from(st))),
                _ => None,
            });
        if let Some((opc, cid, fctype)) = cmd {
            w.commands += 1;
            *w.per_queue.entry(qid).or_default() += 1;
            match (qid, opc) {
                (_, 0x7f) if fctype == Some(0x01) => w.connects += 1,
                (0, 0x06) => w.identifies += 1,
                (q, 0x02) if q > 0 => w.reads += 1,
                (q, 0x01) if q > 0 => w.writes += 1,
                _ => {}
            }
            open.entry((qid, cid)).or_default().push((frame, opc));
        } else if let Some((cid, status)) = rsp {
            w.responses += 1;
            if status != 0 {
                w.error_status += 1;
            }
            let q = open.entry((qid, cid)).or_default();
            if q.is_empty() {
                w.unmatched.push(format!("qid {qid} cid {cid:#06x} frame {frame}"));
            } else {
                q.remove(0);
            }
        } else if raw.is_none() && field(13).is_empty() {
            w.unreadable.push(line.chars().take(80).collect());
        }
    }
    let mut left: Vec<(u64, u16, u16, u8)> = open
        .into_iter()
        .flat_map(|((q, c), v)| v.into_iter().map(move |(f, o)| (f, q, c, o)))
        .collect();
    left.sort_unstable();
    for (frame, qid, cid, opc) in left {
        if qid == 0 && opc == 0x0c {
            w.aer_outstanding += 1;
        } else {
            w.unanswered.push(format!("qid {qid} cid {cid:#06x} opc {opc:#04x} frame {frame}"));
        }
    }
}

/// Runs tshark on `pcap` and judges it (see the module docs); `Err` only
/// if tshark cannot be run. The verdict is [`NvmeWire::failures`].
pub fn judge(pcap: &Path) -> Result<NvmeWire, String> {
    let tshark = ensure_program(&crate::peer::TSHARK_PACKAGE)?;
    let run = |args: &[&str]| -> Result<String, String> {
        let out = Command::new(&tshark)
            .arg("-r")
            .arg(pcap)
            .args(["--disable-heuristic", "rpcrdma_infiniband"])
            .args(args)
            .stderr(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run tshark: {e}"))?;
        if !out.status.success() {
            return Err(format!("tshark failed on {} ({})", pcap.display(), out.status));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let count = |filter: &str| run(&["-Y", filter]).map(|o| o.lines().count());
    let mut w = NvmeWire {
        frames: run(&[])?.lines().count(),
        malformed: count("_ws.malformed")?,
        malformed_effects_log: count(&format!("_ws.malformed && {EFFECTS_LOG}"))?,
        expert_errors: count(&format!("_ws.expert.severity >= \"error\" && !{EFFECTS_LOG}"))?,
        ..NvmeWire::default()
    };
    let mut args = vec!["-Y", CAPSULES, "-T", "fields", "-E", "occurrence=a"];
    for f in FIELDS {
        args.extend(["-e", f]);
    }
    tally(&run(&args)?, &mut w);
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command line of [`FIELDS`] (a Fabrics Connect for opcode 7Fh).
    fn line(f: u32, src: &str, qp: u32, psn: u32, qid: u16, cmd: Option<(u8, u16)>) -> String {
        let (opc, cid) = cmd.unwrap_or_default();
        let head = format!("{f}\t{src}\t{qp}\t{psn}\t{qid}");
        if opc == 0x7f {
            format!("{head}\t\t\t7f\t0x01\t{cid:#06x}\t\t")
        } else {
            format!("{head}\t{opc:#04x}\t{cid:#06x}\t\t\t\t\t")
        }
    }
    /// A response line of [`FIELDS`].
    fn rsp(f: u32, src: &str, qp: u32, psn: u32, qid: u16, cid: u16, st: u16) -> String {
        format!("{f}\t{src}\t{qp}\t{psn}\t{qid}\t\t\t\t\t\t{cid:#06x}\t{st:#06x}")
    }

    /// A clean exchange: connect, identify, AER, write, read — passes.
    fn clean() -> Vec<String> {
        let (h, t) = ("10.0.0.2", "10.0.0.1");
        vec![
            line(1, h, 17, 0, 0, Some((0x7f, 0))),
            rsp(2, t, 18, 0, 0, 0, 0),
            line(3, h, 17, 1, 0, Some((0x06, 1))),
            rsp(4, t, 18, 1, 0, 1, 0),
            line(5, h, 17, 2, 0, Some((0x0c, 0x1f))),
            line(6, h, 19, 0, 1, Some((0x7f, 0))),
            rsp(7, t, 20, 0, 1, 0, 0),
            line(8, h, 19, 1, 1, Some((0x01, 5))),
            rsp(9, t, 20, 1, 1, 5, 0),
            // the CID reused for a read after its write completed
            line(10, h, 19, 2, 1, Some((0x02, 5))),
            rsp(11, t, 20, 2, 1, 5, 0),
        ]
    }

    #[test]
    fn a_clean_exchange_passes() {
        let mut w = NvmeWire { frames: 11, ..NvmeWire::default() };
        tally(&clean().join("\n"), &mut w);
        assert_eq!(w.failures(), Vec::<String>::new(), "{w:?}");
        assert_eq!((w.commands, w.responses, w.aer_outstanding), (6, 5, 1));
        assert_eq!((w.connects, w.identifies, w.reads, w.writes), (2, 1, 1, 1));
        assert_eq!(w.per_queue, BTreeMap::from([(0, 3), (1, 3)]));
    }

    #[test]
    fn a_missing_response_fails() {
        let mut l = clean();
        l.remove(8); // the write's response
        let mut w = NvmeWire { frames: 10, ..NvmeWire::default() };
        tally(&l.join("\n"), &mut w);
        // the write's CID is then answered by the read's response, and the
        // read stays open
        assert_eq!(w.unanswered, vec!["qid 1 cid 0x0005 opc 0x02 frame 10".to_string()]);
        assert_eq!(w.failures().len(), 1, "{:?}", w.failures());
    }

    #[test]
    fn a_response_on_the_wrong_queue_fails_twice() {
        let mut l = clean();
        l[6] = rsp(7, "10.0.0.1", 20, 0, 2, 0, 0); // the I/O Connect's CQE, qid 2
        let mut w = NvmeWire { frames: 11, ..NvmeWire::default() };
        tally(&l.join("\n"), &mut w);
        assert_eq!(w.unmatched, vec!["qid 2 cid 0x0000 frame 7".to_string()]);
        assert_eq!(w.unanswered, vec!["qid 1 cid 0x0000 opc 0x7f frame 6".to_string()]);
    }

    #[test]
    fn retransmissions_count_once_and_errors_are_counted() {
        let mut l = clean();
        l.insert(8, line(85, "10.0.0.2", 19, 1, 1, Some((0x01, 5)))); // same PSN again
        l[9] = rsp(9, "10.0.0.1", 20, 1, 1, 5, 0x4004); // the write's CQE, an error
        let mut w = NvmeWire { frames: 12, ..NvmeWire::default() };
        tally(&l.join("\n"), &mut w);
        assert_eq!((w.retransmitted, w.writes, w.error_status), (1, 1, 1));
        assert!(w.failures().is_empty(), "{:?}", w.failures());
    }

    #[test]
    fn missing_kinds_and_malformed_frames_fail() {
        let l = clean();
        let mut w = NvmeWire { frames: 4, malformed: 1, ..NvmeWire::default() };
        tally(&l[..4].join("\n"), &mut w);
        let f = w.failures().join("; ");
        for want in ["1 malformed", "no Read", "no Write"] {
            assert!(f.contains(want), "{f}");
        }
        assert!(!f.contains("no Identify") && !f.contains("no Fabrics Connect"), "{f}");
    }

    /// The first 327 frames of a `peer run nvme-linux-reference` capture
    /// (`editcap -r wire.pcapng head.pcapng 1-327`, gzip; tshark reads it
    /// as is): `nvme discover`, then `nvme connect -i 4 -W 1 -P 1` (admin
    /// queue, three I/O queues whose Connects are multi-packet in-capsule
    /// SENDs), the kernel's partition scan and the first pattern writes of
    /// nvme-host.sh. Skipped without tshark.
    #[test]
    fn judges_a_capture_of_linux_nvmet() {
        if crate::util::which("tshark").is_none() {
            eprintln!("skipped: no tshark");
            return;
        }
        let f = crate::util::root().join("xtask/peer/nvme-reference-head.pcapng.gz");
        let w = judge(&f).unwrap();
        assert!(w.failures().is_empty(), "{:?}", w.failures());
        assert_eq!(w.frames, 327);
        // discovery + admin Connect decoded, the three I/O Connects (and
        // their CQEs, and in-capsule writes) read from the raw bytes
        assert_eq!((w.connects, w.identifies, w.reads, w.writes), (5, 10, 3, 5), "{w:?}");
        assert_eq!((w.commands, w.responses, w.aer_outstanding), (50, 48, 2), "{w:?}");
        assert_eq!(w.undecoded, 10, "{w:?}");
        assert_eq!(w.per_queue, BTreeMap::from([(0, 39), (1, 6), (2, 4), (3, 1)]));
        // the Effects log's data frames: malformed, and excused
        assert_eq!((w.malformed, w.malformed_effects_log, w.expert_errors), (3, 3, 0));
    }

    #[test]
    fn only_the_effects_log_fault_is_excused() {
        let mut w =
            NvmeWire { frames: 11, malformed: 6, malformed_effects_log: 6, ..NvmeWire::default() };
        tally(&clean().join("\n"), &mut w);
        assert!(w.failures().is_empty(), "{:?}", w.failures());
        w.malformed = 7;
        assert_eq!(w.failures(), vec!["1 malformed frames (not the Effects log's)".to_string()]);
        w.malformed = 6;
        w.expert_errors = 2;
        assert_eq!(w.failures(), vec!["2 frames with expert errors".to_string()]);
    }
}
