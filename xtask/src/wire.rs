//! `cargo xtask wire FILE.pcap` and the `wire` leg (issue #15).
//!
//! The scenario is `tests/wire_scenario.rs`: two model devices, the driver
//! posting WRITE / READ / SEND (+immediate, +invalidate, inline,
//! multi-packet at MTU 1024 and 4096), an RNR NAK and an access-error NAK,
//! over IPv4 and IPv6 with and without VLAN, then UD SEND Only (+immediate)
//! datagrams with DETH over IPv4 and IPv6/VLAN and a MAD from QP1 to QP1. It writes every frame to the
//! pcap and, beside it, `FILE.expect.tsv` with the fields that follow from
//! what the driver posted.
//!
//! The checks use tools nobody here wrote (shared/spec/rocev2-wire.md):
//! * tshark decodes every frame as InfiniBand over UDP 4791 with no
//!   malformed-packet or expert item (§6.4, the exact command);
//! * tshark's UDP source port (the §1.5 rule the driver applies at RTR),
//!   BTH opcode / dest QP / PSN, RETH VA / R_Key / DMA length, AETH
//!   syndrome and DETH Q_Key / source QP equal the expectations, frame by
//!   frame (§6.2 fields);
//! * scapy's RoCE layer verifies every ICRC (`tests/wire/check_icrc.py`,
//!   §3.4).
//!
//! The leg also runs `tests/cm_wire.rs` (issue #18): the CM's MADs as UD
//! SEND frames to QP1, decoded by tshark as InfiniBand CM
//! (`infiniband.cm.req.*`, `infiniband.cm.req.ip_cm.*`, REP/RTU/DREQ/DREP/
//! REJ fields) and their ICRCs checked by scapy, and `tests/cm_qp1.rs`'s
//! capture test: a connect / traffic / disconnect through the CM over the
//! driver's QP1 between the two model devices (real UD datagrams), written
//! to `FILE.cm.pcap` beside `FILE.pcap` and checked the same way.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::util::{self, SysPackage, root};

const TSHARK: SysPackage = SysPackage {
    program: "tshark",
    what: "tshark (Wireshark's command-line decoder)",
    apt: "tshark",
    dnf: "wireshark-cli",
    pacman: "wireshark-cli",
    brew: "wireshark",
};

const PIP: SysPackage = SysPackage {
    program: "pip3",
    what: "pip (to install scapy from PyPI)",
    apt: "python3-pip",
    dnf: "python3-pip",
    pacman: "python-pip",
    brew: "python",
};

/// `cargo xtask wire FILE.pcap` (scenario + capture) or
/// `cargo xtask wire --check FILE.pcap` (the checks on an existing capture).
pub fn main(args: &[String]) -> ExitCode {
    let r = match args {
        [f] if f != "--check" && f != "--help" => scenario(Path::new(f)).and_then(|n| {
            let cm = cm_qp1(Path::new(f), false)?;
            Ok(format!("wire: {n} frames written to {f}; {cm}"))
        }),
        [c, f] if c == "--check" => check(Path::new(f)),
        _ => {
            eprintln!(
                "usage: cargo xtask wire FILE.pcap          run the two-device scenario, write every frame\n       \
                 cargo xtask wire --check FILE.pcap  tshark + scapy checks of a capture (and FILE.pcap.expect.tsv)"
            );
            return ExitCode::FAILURE;
        }
    };
    util::exit_with(r, "wire")
}

/// The leg: installs tshark and scapy if missing, runs the scenario into
/// `target/wire/wire.pcap` and checks it.
pub fn run_leg() -> Result<String, String> {
    ensure_tools()?;
    let dir = root().join("target").join("wire");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let file = dir.join("wire.pcap");
    let n = scenario(&file)?;
    let c = check(&file)?;
    let cm = cm_wire()?;
    let qp1 = cm_qp1(&file, true)?;
    Ok(format!("{n} frames; {c}; {cm}; {qp1}"))
}

/// The CM over the driver's QP1 between the two model devices
/// (`tests/cm_qp1.rs`, `cm_over_qp1_on_the_wire_decodes_in_tshark`): a
/// full connect / SEND + WRITE / disconnect, every frame from the model's
/// UD and RC paths, written to `FILE.cm.pcap` beside `FILE`; the test
/// itself runs tshark (InfiniBand CM fields equal to what both sides used,
/// no malformed/expert item) and scapy (ICRC); `required` makes missing
/// tools an error.
fn cm_qp1(file: &Path, required: bool) -> Result<String, String> {
    let out = abs(file).with_extension("cm.pcap");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["test", "-p", "irdma", "--test", "cm_qp1", "--quiet", "on_the_wire"])
        .env("CM_QP1_PCAP", &out)
        .current_dir(root());
    if required {
        cmd.env("CM_WIRE_REQUIRED", "1");
    }
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("the CM-over-QP1 capture (tests/cm_qp1.rs) failed ({status})"));
    }
    Ok(format!("CM over QP1: {} frames written to {}", pcap_frames(&out)?.len(), out.display()))
}

/// The CM MADs as RoCEv2 UD frames to QP1 (`tests/cm_wire.rs`): tshark
/// decodes them as InfiniBand CM with the fields both sides used, scapy
/// verifies the ICRCs; `CM_WIRE_REQUIRED` makes missing tools an error.
fn cm_wire() -> Result<String, String> {
    let args = ["test", "-p", "irdma", "--test", "cm_wire", "--quiet"];
    let status = util::cargo_with(&args, &[("CM_WIRE_REQUIRED", "1")])?;
    if !status.success() {
        return Err(format!("the CM wire check (tests/cm_wire.rs) failed ({status})"));
    }
    Ok("CM MADs: tshark fields and scapy ICRC ok (tests/cm_wire.rs)".into())
}

/// tshark through the system package manager (Debian: `tshark`, with the
/// setuid question preseeded so apt never prompts) and scapy through pip.
pub(crate) fn ensure_tools() -> Result<(), String> {
    if util::which("tshark").is_none() && util::which("debconf-set-selections").is_some() {
        // wireshark-common asks whether non-root users may capture
        let pre = "echo 'wireshark-common wireshark-common/install-setuid boolean false' \
                   | debconf-set-selections";
        let sh =
            if is_root() { vec!["sh", "-c", pre] } else { vec!["sudo", "-n", "sh", "-c", pre] };
        eprintln!("xtask: running `{}`", sh.join(" "));
        let _ = Command::new(sh[0]).args(&sh[1..]).status();
    }
    util::ensure_program(&TSHARK)?;
    let has_scapy = |py: &str| {
        Command::new(py)
            .args(["-c", "import scapy.contrib.roce"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !has_scapy("python3") {
        let pip = Command::new("python3").args(["-m", "pip", "--version"]).output();
        if !pip.is_ok_and(|o| o.status.success()) {
            util::ensure_program(&PIP)?;
        }
        eprintln!("xtask: scapy missing; running `python3 -m pip install scapy`");
        let ok =
            |args: &[&str]| Command::new("python3").args(args).status().is_ok_and(|s| s.success());
        // Debian 12's python is "externally managed": retry with the flag
        // pip needs there
        if !ok(&["-m", "pip", "install", "scapy"])
            && !ok(&["-m", "pip", "install", "--break-system-packages", "scapy"])
        {
            return Err("cannot install scapy: run `python3 -m pip install scapy`".into());
        }
        if !has_scapy("python3") {
            return Err("scapy installed but `import scapy.contrib.roce` fails".into());
        }
    }
    Ok(())
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|v| v.split_whitespace().next())
            == Some("0")
    })
}

pub(crate) fn abs(file: &Path) -> PathBuf {
    if file.is_absolute() {
        file.to_path_buf()
    } else {
        std::env::current_dir().map(|d| d.join(file)).unwrap_or_else(|_| file.to_path_buf())
    }
}

/// Runs the scenario with `WIRE_PCAP=file`; returns the frame count (read
/// back from the pcap).
fn scenario(file: &Path) -> Result<usize, String> {
    let file = abs(file);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["test", "-p", "irdma", "--test", "wire_scenario", "--quiet", "--", "--nocapture"])
        .env("WIRE_PCAP", &file)
        .current_dir(root())
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("the wire scenario failed ({status})"));
    }
    Ok(pcap_frames(&file)?.len())
}

/// The frames of a classic little-endian pcap.
fn pcap_frames(file: &Path) -> Result<Vec<Vec<u8>>, String> {
    let b = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    if b.len() < 24 || b[..4] != [0xd4, 0xc3, 0xb2, 0xa1] {
        return Err(format!("{}: not a little-endian classic pcap", file.display()));
    }
    let mut at = 24;
    let mut out = Vec::new();
    while at + 16 <= b.len() {
        let n = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap_or_default()) as usize;
        let f = b.get(at + 16..at + 16 + n).ok_or("truncated pcap record")?;
        out.push(f.to_vec());
        at += 16 + n;
    }
    Ok(out)
}

/// tshark options of the clean-decode check (wire §6.4).
const HEUR: [&str; 10] = [
    "--disable-heuristic",
    "rpcrdma_infiniband",
    "--disable-heuristic",
    "eth_over_ib",
    "--disable-heuristic",
    "mellanox_eoib",
    "-o",
    "ip.check_checksum:TRUE",
    "-o",
    "udp.check_checksum:TRUE",
];

/// wire §6.4: tshark decodes every frame of `f` as InfiniBand with no
/// malformed-packet or expert item (the filter prints nothing).
fn clean_decode(f: &str) -> Result<(), String> {
    let mut args = vec!["-n", "-r", f];
    args.extend(HEUR);
    args.extend(["-Y", "_ws.malformed || _ws.expert || !infiniband"]);
    let bad = util::output("tshark", &args)?;
    if !bad.trim().is_empty() {
        return Err(format!(
            "tshark flags frames (malformed, expert item or not InfiniBand):\n{bad}"
        ));
    }
    Ok(())
}

/// scapy's RoCE layer verifies every ICRC of `f` (wire §3.4).
fn icrc_check(f: &str) -> Result<String, String> {
    let script = root().join("tests").join("wire").join("check_icrc.py");
    let s = script.to_str().ok_or("path is not UTF-8")?;
    let out = util::output("python3", &[s, f]).map_err(|e| format!("ICRC check: {e}"))?;
    Ok(out.trim().to_string())
}

/// The capture `file` (made absolute) and its frame count, once it holds
/// a frame and tshark decodes every frame cleanly ([`clean_decode`]).
fn decoded(file: &Path) -> Result<(PathBuf, usize), String> {
    let file = abs(file);
    let f = file.to_str().ok_or("path is not UTF-8")?;
    let n = pcap_frames(&file)?.len();
    if n == 0 {
        return Err("the capture holds no frame".into());
    }
    clean_decode(f)?;
    Ok((file, n))
}

/// The checks of a capture with no expectation file (the QEMU demo's,
/// `cargo xtask qemu --pcap`): at least one frame, every frame InfiniBand
/// with no malformed/expert item (tshark), every ICRC right (scapy).
pub(crate) fn check_capture(file: &Path) -> Result<String, String> {
    let (file, n) = decoded(file)?;
    let f = file.to_str().ok_or("path is not UTF-8")?;
    let icrc = icrc_check(f)?;
    Ok(format!(
        "{n} frames; tshark: every frame InfiniBand, no malformed/expert item; scapy: {icrc}"
    ))
}

/// The three checks on `file` (+ `file.expect.tsv`).
fn check(file: &Path) -> Result<String, String> {
    let (file, n) = decoded(file)?;
    let f = file.to_str().ok_or("path is not UTF-8")?;
    // fields vs what the driver posted
    let fields = [
        "udp.srcport",
        "infiniband.bth.opcode",
        "infiniband.bth.destqp",
        "infiniband.bth.psn",
        "infiniband.reth.va",
        "infiniband.reth.r_key",
        "infiniband.reth.dmalen",
        "infiniband.aeth.syndrome",
        "infiniband.deth.q_key",
        "infiniband.deth.srcqp",
    ];
    let mut args = vec!["-n", "-r", f];
    args.extend(HEUR);
    args.extend(["-T", "fields", "-E", "separator=/t"]);
    for x in fields {
        args.extend(["-e", x]);
    }
    let got = util::output("tshark", &args)?;
    let exp_path = format!("{f}.expect.tsv");
    let exp = std::fs::read_to_string(&exp_path).map_err(|e| format!("{exp_path}: {e}"))?;
    let got: Vec<&str> = got.lines().collect();
    let exp: Vec<&str> = exp.lines().collect();
    if got.len() != exp.len() {
        return Err(format!("tshark decoded {} frames, {} expected", got.len(), exp.len()));
    }
    for (i, (g, e)) in got.iter().zip(&exp).enumerate() {
        let (gv, ev) = (values(g)?, values(e)?);
        if gv != ev {
            return Err(format!(
                "frame {}: tshark {fields:?} = {gv:?}, the driver posted {ev:?}",
                i + 1
            ));
        }
    }
    // wire §6.2: tshark's own reading of the PSN-sequence NAK (AETH kind
    // 3 = NAK, error code 0) of the lost-frame case
    let mut args = vec!["-n", "-r", f];
    args.extend(HEUR);
    args.extend([
        "-Y",
        "infiniband.aeth.syndrome.opcode == 3 && infiniband.aeth.syndrome.error_code == 0",
    ]);
    let seq_naks = util::output("tshark", &args)?.lines().count();
    if seq_naks == 0 {
        return Err("tshark finds no PSN-sequence NAK in the capture".into());
    }
    // scapy: every ICRC
    let icrc = icrc_check(f)?;
    Ok(format!(
        "tshark: every frame InfiniBand, no malformed/expert item, {} fields match, \
         {seq_naks} PSN-sequence NAK; scapy: {}",
        fields.len() * n,
        icrc.trim()
    ))
}

/// One TSV line as numbers (`0x…` hex or decimal; empty = absent).
fn values(line: &str) -> Result<Vec<Option<u64>>, String> {
    line.split('\t')
        .map(|v| {
            let v = v.trim();
            if v.is_empty() {
                Ok(None)
            } else if let Some(h) = v.strip_prefix("0x") {
                u64::from_str_radix(h, 16).map(Some).map_err(|e| format!("{v}: {e}"))
            } else {
                v.parse().map(Some).map_err(|e| format!("{v}: {e}"))
            }
        })
        .collect()
}
