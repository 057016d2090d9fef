//! `cargo xtask qemu`: build the unikernel image and the device model
//! (`mock-bar-cm`: `mock-bar-shm`'s harness with a CM peer device), and run the image in QEMU against the model serving the
//! BAR file.
//!
//! The host/guest contract (files, mailbox, exit codes, console lines, the
//! model-process hook) is defined once, in `irdma_boot::contract`.
//!
//! Per run: recreate a BAR file and a RAM file under /dev/shm (unique names,
//! removed afterwards: QEMU keeps stale contents otherwise), write the nonce
//! and the host TSC rate into the mailbox, start the model process (by
//! default `mock-bar-cm`, i.e. `mock-bar-shm`'s harness mode plus the CM
//! peer of the `cm_connect_*` scenarios) pinned to CPU 0 and wait for its
//! HOST_MAGIC, start QEMU pinned to CPU 1 with a timeout,
//! stream COM1, then check the exit status (33 only), the scenario lines and
//! the BAR file, and print a summary table.
//!
//! `--arch aarch64` builds the image for `aarch64-unknown-none` and boots it
//! on `qemu-system-aarch64 -M virt` (TCG, Cortex-A57): the ivshmem device
//! sits behind the virt machine's PCIe ECAM, the image assigns its BAR,
//! prints on the PL011 and exits through semihosting with the same statuses;
//! guest RAM starts at `VIRT_RAM_BASE`, which the model gets as
//! `IRDMA_RAM_BASE`. With `--irq` the device is `ivshmem-doorbell` there
//! too: its MSI-X messages go to the `virt` machine's GICv2m frame.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use irdma_boot::contract as c;

use crate::util::{cargo, root, which};

const QEMU: &str = "qemu-system-x86_64";
const IMAGE_TARGET: &str = "x86_64-unknown-none";
const QEMU_AARCH64: &str = "qemu-system-aarch64";
const IMAGE_TARGET_AARCH64: &str = "aarch64-unknown-none";

/// The guest architecture of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// q35 PC, PVH entry (the default).
    X86_64,
    /// QEMU `virt` (Arm), ELF entry at EL1, PCIe ECAM, semihosting exit.
    Aarch64,
}

impl Arch {
    /// The QEMU system emulator.
    pub fn qemu(self) -> &'static str {
        match self {
            Arch::X86_64 => QEMU,
            Arch::Aarch64 => QEMU_AARCH64,
        }
    }

    /// The image's rustc target.
    pub fn target(self) -> &'static str {
        match self {
            Arch::X86_64 => IMAGE_TARGET,
            Arch::Aarch64 => IMAGE_TARGET_AARCH64,
        }
    }

    /// Guest-physical address of RAM-file offset 0.
    pub fn ram_base(self) -> u64 {
        match self {
            Arch::X86_64 => 0,
            Arch::Aarch64 => c::VIRT_RAM_BASE,
        }
    }
}
/// qboot: boots faster, assigns no BARs (the image then assigns them).
const QBOOT_ROM: &str = "/usr/share/qemu/qboot.rom";

/// Which accelerator to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// TCG. The default: on this (nested) VM, KVM makes every port-I/O and
    /// MMIO exit cost ~0.1 ms; the suite takes 5.7 s under KVM, 0.14 s here.
    Tcg,
    /// KVM (needs a read-write /dev/kvm).
    Kvm,
    /// KVM when /dev/kvm opens read-write, else TCG.
    Auto,
}

/// Options of one run.
#[derive(Clone, Debug)]
pub struct Opts {
    /// Guest architecture.
    pub arch: Arch,
    /// Accelerator.
    pub accel: Accel,
    /// Boot through qboot instead of SeaBIOS (exercises BAR assignment).
    pub qboot: bool,
    /// Kernel command line (`-append`); `fault`/`panic` test the failure exits.
    pub append: Option<String>,
    /// Kill QEMU after this long.
    pub timeout: Duration,
    /// Which device model process serves the BAR.
    pub model: ModelSel,
    /// Echo every console line as it arrives.
    pub echo: bool,
    /// Image built with the `defmt` feature: capture COM2 and decode it.
    pub defmt: bool,
    /// Write the host TSC rate into the mailbox (else the guest uses the PIT).
    pub host_tsc: bool,
    /// The model writes every RoCEv2 frame of the run to this pcap
    /// (`mock-bar-cm --pcap`), checked with tshark and scapy afterwards.
    pub pcap: Option<PathBuf>,
    /// Interrupts (issue #31): `ivshmem-doorbell` with the model as its
    /// server instead of `ivshmem-plain` (contract: "Interrupts").
    pub irq: bool,
    /// Ends the run early (as a timeout) once set: a live run whose peer
    /// gave up (`peer.rs`).
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            arch: Arch::X86_64,
            accel: Accel::Tcg,
            qboot: false,
            append: None,
            timeout: Duration::from_secs(60),
            model: ModelSel::Shm(Vec::new()),
            echo: true,
            defmt: false,
            host_tsc: true,
            pcap: None,
            irq: false,
            stop: None,
        }
    }
}

/// The device model process of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelSel {
    /// None: the BAR file is plain memory (driver scenarios skip).
    Bare,
    /// `mock-bar-cm` (`mock-bar-shm`'s harness mode plus the CM peer device;
    /// built by xtask), with these arguments.
    Shm(Vec<String>),
    /// Another program honouring the contract, with its arguments.
    Program(String, Vec<String>),
}

impl ModelSel {
    /// Whether a model process is attached.
    pub fn attached(&self) -> bool {
        *self != ModelSel::Bare
    }

    /// Program and arguments to spawn (`None` for [`ModelSel::Bare`]).
    fn command(&self) -> Option<(String, Vec<String>)> {
        match self {
            ModelSel::Bare => None,
            ModelSel::Shm(args) => Some((model_path().display().to_string(), args.clone())),
            ModelSel::Program(p, args) => Some((p.clone(), args.clone())),
        }
    }
}

/// One line of the guest's COM1 report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// `PASS name (N us)`.
    Pass { name: String, us: u64 },
    /// `FAIL name: reason`.
    Fail { name: String, reason: String },
    /// `SKIP name: reason`.
    Skip { name: String, reason: String },
    /// `DONE passed=P failed=F skipped=S`.
    Done { passed: u32, failed: u32, skipped: u32 },
    /// Anything else (information).
    Other,
}

/// Parses one console line (format in `irdma_boot::contract`).
pub fn parse_line(line: &str) -> Line {
    let line = line.trim_end_matches(['\r', '\n']);
    if let Some(rest) = line.strip_prefix("PASS ") {
        if let Some((name, t)) = rest.split_once(" (")
            && let Some(us) = t.strip_suffix(" us)").and_then(|n| n.parse().ok())
        {
            return Line::Pass { name: name.to_string(), us };
        }
    } else if let Some(rest) = line.strip_prefix("FAIL ") {
        let (name, reason) = rest.split_once(": ").unwrap_or((rest, ""));
        return Line::Fail { name: name.to_string(), reason: reason.to_string() };
    } else if let Some(rest) = line.strip_prefix("SKIP ") {
        let (name, reason) = rest.split_once(": ").unwrap_or((rest, ""));
        return Line::Skip { name: name.to_string(), reason: reason.to_string() };
    } else if let Some(rest) = line.strip_prefix("DONE ") {
        let mut v = [None; 3];
        for (slot, key) in v.iter_mut().zip(["passed=", "failed=", "skipped="]) {
            *slot = rest
                .split(' ')
                .find_map(|w| w.strip_prefix(key))
                .and_then(|n| n.parse::<u32>().ok());
        }
        if let [Some(passed), Some(failed), Some(skipped)] = v {
            return Line::Done { passed, failed, skipped };
        }
    }
    Line::Other
}

/// What a run produced.
#[derive(Debug, Default)]
pub struct Outcome {
    /// QEMU's exit status (None: killed by a signal or the timeout).
    pub status: Option<i32>,
    /// Whether the timeout killed QEMU.
    pub timed_out: bool,
    /// Every COM1 line.
    pub console: Vec<String>,
    /// QEMU's stderr.
    pub stderr: String,
    /// Wall time of QEMU alone.
    pub wall: Duration,
    /// Problems found in the BAR file after the run.
    pub bar_problems: Vec<String>,
    /// Problems with the model process.
    pub model_problems: Vec<String>,
    /// What the model process printed (stdout and stderr).
    pub model_output: Vec<String>,
    /// Decoded defmt frames (with `Opts::defmt`).
    pub defmt: Option<DefmtLog>,
}

/// The decoded COM2 stream.
#[derive(Debug, Default)]
pub struct DefmtLog {
    /// One line per frame: timestamp, level, message, location.
    pub frames: Vec<String>,
    /// Frames the decoder rejected (rzcobs resynchronises after them).
    pub malformed: usize,
    /// Bytes received on COM2.
    pub bytes: usize,
}

/// Decodes defmt frames `bytes` with the table in `elf`.
pub fn decode_defmt(elf: &[u8], bytes: &[u8]) -> Result<DefmtLog, String> {
    use defmt_decoder::{DecodeError, Table};
    let table = Table::parse(elf)
        .map_err(|e| format!("defmt table: {e}"))?
        .ok_or("the image has no defmt table (built without the defmt feature?)")?;
    let locations = table.get_locations(elf).unwrap_or_default();
    let mut log = DefmtLog { bytes: bytes.len(), ..DefmtLog::default() };
    let mut decoder = table.new_stream_decoder();
    decoder.received(bytes);
    loop {
        match decoder.decode() {
            Ok(frame) => {
                let at = locations
                    .get(&frame.index())
                    .map(|l| {
                        let file = l.file.file_name().map(|f| f.to_string_lossy().into_owned());
                        format!(" ({}:{})", file.unwrap_or_default(), l.line)
                    })
                    .unwrap_or_default();
                log.frames.push(format!("{}{at}", frame.display(false)));
            }
            Err(DecodeError::UnexpectedEof) => break,
            Err(DecodeError::Malformed) if table.encoding().can_recover() => log.malformed += 1,
            Err(DecodeError::Malformed) => {
                log.malformed += 1;
                break;
            }
        }
    }
    Ok(log)
}

impl Outcome {
    /// The parsed scenario lines.
    pub fn lines(&self) -> Vec<Line> {
        self.console.iter().map(|l| parse_line(l)).filter(|l| *l != Line::Other).collect()
    }

    /// Every reason this run is not a pass (empty = pass).
    pub fn verdict(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.timed_out {
            why.push("QEMU timed out and was killed".to_string());
        }
        match self.status {
            Some(c::STATUS_PASS) => {}
            Some(s) => {
                why.push(format!("QEMU exited {s}, not {} ({})", c::STATUS_PASS, status_meaning(s)))
            }
            None => why.push("QEMU was killed by a signal".to_string()),
        }
        let lines = self.lines();
        let passes = lines.iter().filter(|l| matches!(l, Line::Pass { .. })).count() as u32;
        let fails = lines.iter().filter(|l| matches!(l, Line::Fail { .. })).count() as u32;
        let skips = lines.iter().filter(|l| matches!(l, Line::Skip { .. })).count() as u32;
        for l in &lines {
            if let Line::Fail { name, reason } = l {
                why.push(format!("scenario {name} failed: {reason}"));
            }
        }
        match lines.iter().find_map(|l| match l {
            Line::Done { passed, failed, skipped } => Some((*passed, *failed, *skipped)),
            _ => None,
        }) {
            None => why.push("no DONE line: the guest stopped early".to_string()),
            Some(t) if t != (passes, fails, skips) => why.push(format!(
                "DONE says {t:?} but the console shows {passes} PASS, {fails} FAIL, {skips} SKIP"
            )),
            Some(_) => {}
        }
        if passes == 0 {
            why.push("no scenario passed".to_string());
        }
        why.extend(self.bar_problems.iter().map(|p| format!("BAR file: {p}")));
        why.extend(self.model_problems.iter().map(|p| format!("model: {p}")));
        why
    }
}

/// What an isa-debug-exit status means (see `irdma_boot::contract`).
pub fn status_meaning(s: i32) -> &'static str {
    match s {
        0 => "triple fault or QEMU quit without isa-debug-exit",
        s if s == c::qemu_status(c::EXIT_PASS) => "pass",
        s if s == c::qemu_status(c::EXIT_FAIL) => "a scenario failed",
        s if s == c::qemu_status(c::EXIT_EXCEPTION) => "CPU exception in the guest",
        s if s == c::qemu_status(c::EXIT_PANIC) => "guest panic",
        1 => "QEMU error (see its stderr)",
        _ => "unknown",
    }
}

/// The files of one run; removed on drop.
struct Files {
    bar: PathBuf,
    ram: PathBuf,
    /// COM2 capture (defmt frames).
    com2: PathBuf,
    /// The ivshmem server socket (interrupt runs; the model creates it).
    sock: PathBuf,
}

static RUN: AtomicU32 = AtomicU32::new(0);

impl Files {
    fn create() -> Result<Files, String> {
        let dir = Path::new("/dev/shm");
        let dir = if dir.is_dir() { dir.to_path_buf() } else { std::env::temp_dir() };
        remove_stale(&dir);
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let base = format!(
            "irdma-qemu-{}-{}-{stamp}",
            std::process::id(),
            RUN.fetch_add(1, Ordering::Relaxed)
        );
        let files = Files {
            bar: dir.join(format!("{base}-bar")),
            ram: dir.join(format!("{base}-ram")),
            com2: dir.join(format!("{base}-com2")),
            sock: dir.join(format!("{base}-ivs")),
        };
        for (path, size) in [(&files.bar, c::BAR_FILE_SIZE), (&files.ram, c::RAM_FILE_SIZE)] {
            let _ = std::fs::remove_file(path);
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            f.set_len(size).map_err(|e| format!("cannot size {}: {e}", path.display()))?;
        }
        Ok(files)
    }

    fn bar(&self) -> Result<File, String> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.bar)
            .map_err(|e| format!("cannot open {}: {e}", self.bar.display()))
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.bar);
        let _ = std::fs::remove_file(&self.ram);
        let _ = std::fs::remove_file(&self.com2);
        let _ = std::fs::remove_file(&self.sock);
    }
}

/// The xtask pid in one of our file names (`irdma-qemu-PID-…`).
fn owner_pid(file_name: &str) -> Option<u32> {
    file_name.strip_prefix("irdma-qemu-")?.split('-').next()?.parse().ok()
}

/// Removes run files whose xtask process is gone (killed before its `Drop`
/// ran): up to 272 MiB of /dev/shm each.
fn remove_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = owner_pid(&name)
            && pid != std::process::id()
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn read_u32(f: &File, off: usize) -> u32 {
    let mut b = [0u8; 4];
    f.read_exact_at(&mut b, off as u64).map(|()| u32::from_le_bytes(b)).unwrap_or(0)
}

fn read_u64(f: &File, off: usize) -> u64 {
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, off as u64).map(|()| u64::from_le_bytes(b)).unwrap_or(0)
}

fn write_u64(f: &File, off: usize, v: u64) -> Result<(), String> {
    f.write_all_at(&v.to_le_bytes(), off as u64).map_err(|e| format!("BAR file write: {e}"))
}

/// Host TSC rate measured against the monotonic clock (0 off x86_64).
fn host_tsc_hz() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no side effects.
        let tsc = || unsafe { core::arch::x86_64::_rdtsc() };
        let (t0, c0) = (Instant::now(), tsc());
        std::thread::sleep(Duration::from_millis(20));
        let (dt, dc) = (t0.elapsed(), tsc().wrapping_sub(c0));
        (dc as f64 / dt.as_secs_f64()) as u64
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

fn nonce() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = c::pattern(t ^ ((std::process::id() as u64) << 32), RUN.load(Ordering::Relaxed) as u64);
    n.max(1)
}

/// Checks the BAR file after a run in which `bar_rw` passed.
fn check_bar_file(f: &File, nonce: u64) -> Vec<String> {
    let mut p = Vec::new();
    let magic = read_u32(f, c::MAILBOX + c::MB_GUEST_MAGIC);
    if magic != c::GUEST_MAGIC {
        p.push(format!("guest magic {magic:#x}, expected {:#x}", c::GUEST_MAGIC));
    }
    let echo = read_u64(f, c::MAILBOX + c::MB_ECHO);
    if echo != c::echo(nonce) {
        p.push(format!("echo {echo:#x}, expected {:#x}", c::echo(nonce)));
    }
    let bad = (0..c::SCRATCH_WORDS)
        .filter(|&i| read_u64(f, c::MAILBOX + c::MB_SCRATCH + 8 * i) != c::pattern(nonce, i as u64))
        .count();
    if bad != 0 {
        p.push(format!("{bad} of {} scratch words differ from the pattern", c::SCRATCH_WORDS));
    }
    p
}

fn kvm_usable() -> bool {
    OpenOptions::new().read(true).write(true).open("/dev/kvm").is_ok()
}

/// CPUs to pin (model, QEMU) to, if there are two and taskset exists.
fn pinning() -> Option<(u32, u32)> {
    let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    (n >= 2 && which("taskset").is_some()).then_some((0, 1))
}

fn pinned(cpu: Option<u32>, program: &str) -> Command {
    match cpu {
        Some(cpu) => {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(cpu.to_string()).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// The QEMU arguments for one run.
pub fn qemu_args(
    opts: &Opts,
    image: &Path,
    bar: &Path,
    ram: &Path,
    com2: &Path,
    sock: &Path,
    kvm: bool,
) -> Vec<String> {
    if opts.arch == Arch::Aarch64 {
        return qemu_args_aarch64(opts, image, bar, ram, sock);
    }
    let mut a: Vec<String> = vec![
        "-nodefaults".into(),
        "-machine".into(),
        "q35,memory-backend=ram".into(),
        "-accel".into(),
        if kvm { "kvm".into() } else { "tcg".into() },
    ];
    a.extend(shared_files_args(bar, ram, opts.irq.then_some(sock)));
    a.extend([
        "-device".into(),
        format!("isa-debug-exit,iobase={:#x},iosize=0x04", c::DEBUG_EXIT_PORT),
        "-kernel".into(),
        image.display().to_string(),
    ]);
    if opts.defmt {
        // The second -serial is COM2; the file backend is binary-clean.
        a.extend(["-serial".into(), format!("file:{}", com2.display())]);
    }
    if opts.qboot {
        a.extend(["-bios".into(), QBOOT_ROM.into()]);
    }
    if let Some(s) = &opts.append {
        a.extend(["-append".into(), s.clone()]);
    }
    a
}

/// What both architectures pass alike: RAM and the BAR as the two shared
/// files (the model process maps the same files), the ivshmem-plain device
/// serving the BAR, no display, the console on stdio, no reboot. With
/// `irq_sock` the BAR is an `ivshmem-doorbell` device instead, whose server
/// (the model, listening on that socket) hands QEMU the BAR file and one
/// eventfd per MSI-X vector (contract: "Interrupts").
fn shared_files_args(bar: &Path, ram: &Path, irq_sock: Option<&Path>) -> Vec<String> {
    let mb = |b: u64| format!("{}M", b >> 20);
    let bar_dev: [String; 4] = match irq_sock {
        None => [
            "-object".into(),
            format!(
                "memory-backend-file,id=bar,size={},mem-path={},share=on",
                mb(c::BAR_FILE_SIZE),
                bar.display()
            ),
            "-device".into(),
            "ivshmem-plain,memdev=bar".into(),
        ],
        Some(sock) => [
            "-chardev".into(),
            format!("socket,path={},id=ivs", sock.display()),
            "-device".into(),
            format!("ivshmem-doorbell,chardev=ivs,vectors={}", c::IRQ_VECTORS),
        ],
    };
    let mut a: Vec<String> = vec![
        "-m".into(),
        mb(c::RAM_FILE_SIZE),
        "-smp".into(),
        "1".into(),
        "-object".into(),
        format!(
            "memory-backend-file,id=ram,size={},mem-path={},share=on",
            mb(c::RAM_FILE_SIZE),
            ram.display()
        ),
    ];
    a.extend(bar_dev);
    a.extend([
        "-display".into(),
        "none".into(),
        "-serial".into(),
        "stdio".into(),
        "-no-reboot".into(),
    ]);
    a
}

/// The QEMU arguments of an aarch64 run: `-M virt` (its PL011 is the
/// console, its PCIe host bridge carries the ivshmem device), TCG with a
/// Cortex-A57, the same two shared files as on x86_64, and `-semihosting`
/// for the exit status. `virt` keeps its default GICv2 (with the GICv2m
/// MSI frame the `--irq` runs need; spec interrupts.md C.8).
fn qemu_args_aarch64(
    opts: &Opts,
    image: &Path,
    bar: &Path,
    ram: &Path,
    sock: &Path,
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "-nodefaults".into(),
        "-machine".into(),
        "virt,memory-backend=ram".into(),
        "-accel".into(),
        "tcg".into(),
        "-cpu".into(),
        "cortex-a57".into(),
    ];
    a.extend(shared_files_args(bar, ram, opts.irq.then_some(sock)));
    a.extend(["-semihosting".into(), "-kernel".into(), image.display().to_string()]);
    if let Some(s) = &opts.append {
        a.extend(["-append".into(), s.clone()]);
    }
    a
}

/// Where cargo puts the release image.
pub fn image_path() -> PathBuf {
    image_path_for(Arch::X86_64)
}

/// Where cargo puts the release image for `arch`.
pub fn image_path_for(arch: Arch) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    target.join(arch.target()).join("release").join("irdma-boot")
}

/// Builds the aarch64 image (release; no defmt: there is no second UART).
pub fn build_aarch64() -> Result<PathBuf, String> {
    cargo(&[
        "build",
        "-p",
        "irdma-boot",
        "--release",
        "--target",
        IMAGE_TARGET_AARCH64,
        "--quiet",
    ])?;
    let img = image_path_for(Arch::Aarch64);
    if img.is_file() { Ok(img) } else { Err(format!("no image at {}", img.display())) }
}

/// Builds the image of `opts.arch`.
fn build_for(opts: &Opts) -> Result<PathBuf, String> {
    match opts.arch {
        Arch::X86_64 => build(opts.defmt),
        Arch::Aarch64 => build_aarch64(),
    }
}

/// Builds the image (release), with the `defmt` feature if asked. defmt
/// keeps only `error!` unless `DEFMT_LOG` is set: default it to `info`.
pub fn build(defmt: bool) -> Result<PathBuf, String> {
    if defmt {
        let program = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(program);
        cmd.args(["build", "-p", "irdma-boot", "--release", "--target", IMAGE_TARGET])
            .args(["--features", "defmt", "--quiet"])
            .current_dir(root());
        if std::env::var_os("DEFMT_LOG").is_none() {
            cmd.env("DEFMT_LOG", "info");
        }
        let st = crate::util::status_bounded(&mut cmd, "cargo")?;
        if !st.success() {
            return Err(format!("building the defmt image failed ({st})"));
        }
    } else {
        cargo(&["build", "-p", "irdma-boot", "--release", "--target", IMAGE_TARGET, "--quiet"])?;
    }
    let img = image_path();
    if img.is_file() { Ok(img) } else { Err(format!("no image at {}", img.display())) }
}

/// Where cargo puts the model binary (release build of `mock-bar`).
pub fn model_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    target.join("release").join("mock-bar-cm")
}

/// Builds the device model process (release: it polls for the guest):
/// `mock-bar-cm`, i.e. `mock-bar-shm`'s harness mode plus a second device
/// on the same wire whose host-side irdma driver is the CM peer of the
/// `cm_connect_*` scenarios (crate `tests/cm-peer`; `mock-bar` itself never
/// depends on the driver).
pub fn build_model() -> Result<PathBuf, String> {
    cargo(&["build", "-p", "irdma-cm-peer", "--bin", "mock-bar-cm", "--release", "--quiet"])?;
    let p = model_path();
    if p.is_file() { Ok(p) } else { Err(format!("no model binary at {}", p.display())) }
}

/// QEMU's Arm system emulator (the `--arch aarch64` runs) and its package
/// per distribution.
pub const QEMU_AARCH64_PACKAGE: crate::util::SysPackage = crate::util::SysPackage {
    program: QEMU_AARCH64,
    what: "QEMU's Arm system emulator",
    apt: "qemu-system-arm",
    dnf: "qemu-system-aarch64-core",
    pacman: "qemu-system-aarch64",
    brew: "qemu",
};

/// The QEMU of `arch`, installed when missing as [`require_qemu`] does.
pub fn require_qemu_for(arch: Arch) -> Result<PathBuf, String> {
    match arch {
        Arch::X86_64 => require_qemu(),
        Arch::Aarch64 => crate::util::ensure_program(&QEMU_AARCH64_PACKAGE),
    }
}

/// QEMU's x86 system emulator and its package per distribution.
pub const QEMU_PACKAGE: crate::util::SysPackage = crate::util::SysPackage {
    program: QEMU,
    what: "QEMU's x86 system emulator",
    apt: "qemu-system-x86",
    dnf: "qemu-system-x86-core",
    pacman: "qemu-system-x86",
    brew: "qemu",
};

/// QEMU's path; installs it when missing and this process may (see
/// [`crate::util::ensure_program`]), else says the one command to run.
pub fn require_qemu() -> Result<PathBuf, String> {
    crate::util::ensure_program(&QEMU_PACKAGE)
}

/// A running model process and the threads collecting its output.
struct ModelProc {
    child: Child,
    output: Arc<Mutex<Vec<String>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

fn collect_lines(
    r: impl Read + Send + 'static,
    into: &Arc<Mutex<Vec<String>>>,
    echo: bool,
) -> std::thread::JoinHandle<()> {
    let into = Arc::clone(into);
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if echo {
                println!("  model| {line}");
            }
            if let Ok(mut v) = into.lock() {
                v.push(line);
            }
        }
    })
}

fn spawn_model(
    model: &(String, Vec<String>),
    files: &Files,
    cpu: Option<u32>,
    bar: &File,
    echo: bool,
    ram_base: u64,
    irq: bool,
) -> Result<ModelProc, String> {
    let (prog, args) = model;
    let mut cmd = pinned(cpu, prog);
    if irq {
        cmd.env("IRDMA_IVSHMEM_SOCK", &files.sock)
            .env("IRDMA_IRQ_VECTORS", c::IRQ_VECTORS.to_string());
    }
    let mut child = cmd
        .args(args)
        .env("IRDMA_BAR_FILE", &files.bar)
        .env("IRDMA_BAR_SIZE", c::BAR_FILE_SIZE.to_string())
        .env("IRDMA_RAM_FILE", &files.ram)
        .env("IRDMA_RAM_SIZE", c::RAM_FILE_SIZE.to_string())
        .env("IRDMA_MAILBOX", c::MAILBOX.to_string())
        .env("IRDMA_RAM_BASE", ram_base.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the model `{prog}`: {e}"))?;
    let output = Arc::new(Mutex::new(Vec::new()));
    let mut readers = Vec::new();
    if let Some(o) = child.stdout.take() {
        readers.push(collect_lines(o, &output, echo));
    }
    if let Some(e) = child.stderr.take() {
        readers.push(collect_lines(e, &output, echo));
    }
    // The model announces itself in the mailbox before the guest boots.
    let t0 = Instant::now();
    while read_u32(bar, c::MAILBOX + c::MB_HOST_MAGIC) != c::HOST_MAGIC {
        if let Ok(Some(st)) = child.try_wait() {
            return Err(format!("the model exited ({st}) before writing HOST_MAGIC"));
        }
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the model did not write HOST_MAGIC within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(ModelProc { child, output, readers })
}

/// Signals shutdown, waits for the model, returns (problems, its output).
fn stop_model(m: ModelProc, bar: &File) -> (Vec<String>, Vec<String>) {
    let ModelProc { child, output, readers } = m;
    let problems = stop_child(child, bar);
    for r in readers {
        let _ = r.join();
    }
    let out = output.lock().map(|o| o.clone()).unwrap_or_default();
    (problems, out)
}

fn stop_child(mut child: Child, bar: &File) -> Vec<String> {
    if let Err(e) = bar.write_all_at(&1u32.to_le_bytes(), (c::MAILBOX + c::MB_SHUTDOWN) as u64) {
        let _ = child.kill();
        let _ = child.wait();
        return vec![format!("cannot signal shutdown: {e}")];
    }
    let t0 = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(st)) if st.success() => return vec![],
            Ok(Some(st)) => return vec![format!("exited with {st}")],
            Ok(None) if t0.elapsed() > Duration::from_secs(5) => {
                let _ = child.kill();
                let _ = child.wait();
                return vec!["did not exit within 5 s of MB_SHUTDOWN; killed".into()];
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return vec![format!("wait failed: {e}")],
        }
    }
}

/// Runs the image once (it must already be built).
pub fn run_image(image: &Path, opts: &Opts) -> Result<Outcome, String> {
    let qemu = require_qemu_for(opts.arch)?;
    let kvm = accel_of(opts)?;
    let files = Files::create()?;
    let bar = files.bar()?;
    let nonce = nonce();
    write_u64(&bar, c::MAILBOX + c::MB_NONCE, nonce)?;
    let tsc_hz = if opts.host_tsc { host_tsc_hz() } else { 0 };
    write_u64(&bar, c::MAILBOX + c::MB_HOST_TSC_HZ, tsc_hz)?;
    let pins = pinning();
    let model = start_model(opts, &files, pins.map(|p| p.0), &bar)?;

    let args = qemu_args(opts, image, &files.bar, &files.ram, &files.com2, &files.sock, kvm);
    let qemu_prog = qemu.display().to_string();
    let t0 = Instant::now();
    let mut child = match pinned(pins.map(|p| p.1), &qemu_prog)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            if let Some(m) = model {
                let _ = stop_model(m, &bar);
            }
            return Err(format!("cannot start {}: {e}", opts.arch.qemu()));
        }
    };
    let console = Arc::new(Mutex::new(Vec::<String>::new()));
    let out_thread = read_console(&mut child, &console, opts.echo);
    let err_thread = child.stderr.take().map(|mut err| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        })
    });
    let mut out = Outcome::default();
    wait_qemu(&mut child, opts, t0, &mut out)?;
    out.wall = t0.elapsed();
    if let Some(t) = out_thread {
        let _ = t.join();
    }
    if let Some(t) = err_thread {
        out.stderr = t.join().unwrap_or_default();
    }
    out.console = console.lock().map(|c| c.clone()).unwrap_or_default();
    if let Some(m) = model {
        (out.model_problems, out.model_output) = stop_model(m, &bar);
    }
    // QEMU always provides the ivshmem BAR, so bar_rw must run and pass.
    if out.lines().iter().any(|l| matches!(l, Line::Pass { name, .. } if name == "bar_rw")) {
        out.bar_problems = check_bar_file(&bar, nonce);
    } else if !out.console.is_empty() && opts.append.is_none() {
        out.bar_problems.push("bar_rw did not pass, so the BAR file went unchecked".into());
    }
    if opts.defmt {
        out.defmt = Some(defmt_log(image, &files, opts.echo)?);
    }
    Ok(out)
}

/// Whether the run uses KVM, after checking that the options fit the
/// architecture and the host.
fn accel_of(opts: &Opts) -> Result<bool, String> {
    if opts.arch == Arch::Aarch64 {
        // No KVM for an Arm guest on this x86_64 host; no qboot, no COM2.
        if opts.accel == Accel::Kvm || opts.qboot || opts.defmt {
            return Err("--arch aarch64 runs under TCG, without --qboot or --defmt".into());
        }
    }
    if opts.qboot && !Path::new(QBOOT_ROM).is_file() {
        return Err(format!("{QBOOT_ROM} missing (Debian: it is in qemu-system-data)"));
    }
    Ok(match opts.accel {
        Accel::Tcg => false,
        Accel::Kvm if kvm_usable() => true,
        Accel::Kvm => return Err("--accel kvm: /dev/kvm cannot be opened read-write".into()),
        Accel::Auto => kvm_usable() && opts.arch == Arch::X86_64,
    })
}

/// The model process the options ask for (none for `ModelSel::Bare`),
/// on `cpu` when pinned.
fn start_model(
    opts: &Opts,
    files: &Files,
    cpu: Option<u32>,
    bar: &File,
) -> Result<Option<ModelProc>, String> {
    Ok(match opts.model.command() {
        Some(mut m) => {
            if let Some(p) = &opts.pcap {
                m.1.extend(["--pcap".to_string(), p.display().to_string()]);
            }
            Some(spawn_model(&m, files, cpu, bar, opts.echo, opts.arch.ram_base(), opts.irq)?)
        }
        None => None,
    })
}

/// Collects the guest's console (QEMU's stdout) line by line into
/// `console`, echoing it when asked.
fn read_console(
    child: &mut Child,
    console: &Arc<Mutex<Vec<String>>>,
    echo: bool,
) -> Option<std::thread::JoinHandle<()>> {
    child.stdout.take().map(|out| {
        let console = Arc::clone(console);
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let line = line.trim_end_matches('\r').to_string();
                if echo {
                    println!("  guest| {line}");
                }
                if let Ok(mut c) = console.lock() {
                    c.push(line);
                }
            }
        })
    })
}

/// Waits for QEMU to exit; past the timeout, or once `opts.stop` is set,
/// kills it (`out.timed_out`).
fn wait_qemu(child: &mut Child, opts: &Opts, t0: Instant, out: &mut Outcome) -> Result<(), String> {
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                out.status = st.code();
                return Ok(());
            }
            Ok(None)
                if t0.elapsed() > opts.timeout
                    || opts
                        .stop
                        .as_ref()
                        .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed)) =>
            {
                out.timed_out = true;
                let _ = child.kill();
                let _ = child.wait();
                return Ok(());
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(format!("waiting for QEMU: {e}")),
        }
    }
}

/// The defmt frames the image wrote to COM2, decoded with its ELF.
fn defmt_log(image: &Path, files: &Files, echo: bool) -> Result<DefmtLog, String> {
    let elf = std::fs::read(image).map_err(|e| format!("{}: {e}", image.display()))?;
    let frames = std::fs::read(&files.com2).unwrap_or_default();
    let log = decode_defmt(&elf, &frames)?;
    if echo {
        for f in &log.frames {
            println!("  defmt| {f}");
        }
    }
    Ok(log)
}

/// Prints the summary table of a run.
pub fn print_summary(title: &str, o: &Outcome) {
    println!(
        "\n{title}: QEMU exit {:?} ({}) after {:.2} s",
        o.status,
        o.status.map(status_meaning).unwrap_or("killed"),
        o.wall.as_secs_f64()
    );
    println!("  {:<24} {:<6} {:>10}  detail", "scenario", "result", "time");
    // A scenario's own information line (`  name: …`) is its detail column.
    let detail = |name: &str| {
        let prefix = format!("  {name}: ");
        o.console
            .iter()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .map(str::to_string)
            .unwrap_or_default()
    };
    for l in o.lines() {
        match l {
            Line::Pass { name, us } => {
                let row = format!("  {name:<24} {:<6} {:>7} us  {}", "PASS", us, detail(&name));
                println!("{}", row.trim_end())
            }
            Line::Fail { name, reason } => {
                println!("  {name:<24} {:<6} {:>10}  {reason}", "FAIL", "-")
            }
            Line::Skip { name, reason } => {
                println!("  {name:<24} {:<6} {:>10}  {reason}", "SKIP", "-")
            }
            Line::Done { .. } | Line::Other => {}
        }
    }
    if let Some(d) = &o.defmt {
        println!(
            "  defmt: {} frames decoded from {} bytes on COM2, {} malformed",
            d.frames.len(),
            d.bytes,
            d.malformed
        );
    }
    // The guest's own summary table (`  | ` lines), then the model's counters.
    for l in o.console.iter().filter(|l| l.starts_with("  | ")) {
        println!("{l}");
    }
    for l in o.model_output.iter().filter(|l| l.contains("cqp_ops=")) {
        println!("  model: {l}");
    }
    let why = o.verdict();
    if why.is_empty() {
        println!("  verdict: PASS (exit 33, every scenario passed, BAR file checked)");
    } else {
        for w in &why {
            println!("  verdict: {w}");
        }
        if !o.stderr.trim().is_empty() {
            println!("  qemu stderr:\n{}", o.stderr.trim_end());
        }
        for l in o.model_output.iter().filter(|l| !l.contains("cqp_ops=")) {
            println!("  model| {l}");
        }
    }
}

fn parse_opts(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts::default();
    let timeout_given = args.iter().any(|a| a == "--timeout");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--accel" => {
                o.accel = match value("--accel")?.as_str() {
                    "tcg" => Accel::Tcg,
                    "kvm" => Accel::Kvm,
                    "auto" => Accel::Auto,
                    other => return Err(format!("--accel {other}: expected tcg, kvm or auto")),
                }
            }
            "--qboot" => o.qboot = true,
            "--arch" => {
                o.arch = match value("--arch")?.as_str() {
                    "x86_64" => Arch::X86_64,
                    "aarch64" => Arch::Aarch64,
                    other => return Err(format!("--arch {other}: expected x86_64 or aarch64")),
                }
            }
            "--append" => o.append = Some(value("--append")?),
            "--timeout" => {
                let s = value("--timeout")?;
                let secs: f64 = s.parse().map_err(|_| format!("--timeout {s}: not seconds"))?;
                o.timeout = Duration::from_secs_f64(secs.max(0.1));
            }
            "--model" => o.model = ModelSel::Program(value("--model")?, Vec::new()),
            "--no-model" => o.model = ModelSel::Bare,
            "--model-arg" => {
                let v = value("--model-arg")?;
                match &mut o.model {
                    ModelSel::Shm(args) | ModelSel::Program(_, args) => args.push(v),
                    ModelSel::Bare => return Err("--model-arg with --no-model".into()),
                }
            }
            "--quiet" => o.echo = false,
            "--defmt" => o.defmt = true,
            "--no-host-tsc" => o.host_tsc = false,
            "--pcap" => o.pcap = Some(crate::wire::abs(Path::new(&value("--pcap")?))),
            "--irq" => o.irq = true,
            other => return Err(format!("unknown option {other}")),
        }
    }
    if o.pcap.is_some() && !matches!(o.model, ModelSel::Shm(_)) {
        return Err("--pcap needs the built-in model (mock-bar-cm)".into());
    }
    if o.irq && (!matches!(o.model, ModelSel::Shm(_)) || o.qboot) {
        return Err(
            "--irq: the built-in model; on x86_64 under SeaBIOS (it assigns BAR1, qboot does not)"
                .into(),
        );
    }
    if o.arch == Arch::Aarch64 {
        if o.qboot || o.defmt {
            return Err("--arch aarch64 has no --qboot or --defmt".into());
        }
        if o.accel == Accel::Kvm {
            return Err("--arch aarch64 runs under TCG (an Arm guest on this host)".into());
        }
        o.accel = Accel::Tcg;
        if !timeout_given {
            o.timeout = AARCH64_TIMEOUT;
        }
    }
    Ok(o)
}

/// TCG runs an Arm guest several times slower than an x86_64 one.
const AARCH64_TIMEOUT: Duration = Duration::from_secs(300);

/// `cargo xtask qemu [OPTIONS]`.
pub fn main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "usage: cargo xtask qemu [--arch x86_64|aarch64] [--accel tcg|kvm|auto] [--qboot] \
             [--append CMDLINE] [--timeout SECS]\n\
             [--no-model | --model PROGRAM] [--model-arg ARG]... [--defmt] [--no-host-tsc] [--quiet]\n\
             [--pcap FILE] [--irq]\n\n\
             Builds the boot image and the device model (mock-bar-cm: mock-bar-shm's harness plus\n\
             a CM peer device driven by the host-side driver), starts the model pinned\n\
             to CPU 0 and QEMU pinned to CPU 1, and exits 0 only if QEMU exited 33 and every\n\
             scenario passed. The model serves the GEN_2 register space of the BAR file and does\n\
             its DMA in the RAM file; `--model-arg` passes options to it (e.g. `--poll spin`).\n\
             `--no-model` leaves the BAR file plain memory (the driver scenarios skip);\n\
             `--model PROGRAM` runs another model process with the same contract.\n\
             `--append fault|panic|fail` exercise the failure exits (253/255/35). `--defmt`\n\
             builds the image with defmt frames on COM2 and decodes them (DEFMT_LOG defaults to\n\
             info). `--no-host-tsc` withholds the host TSC rate so the guest calibrates with the\n\
             PIT. `--pcap FILE` makes the model write every RoCEv2 frame of the run to FILE and\n\
             checks it (tshark: every frame InfiniBand, no malformed/expert item; scapy: every\n\
             ICRC). `--arch aarch64` boots the aarch64 image on qemu-system-aarch64 -M virt (TCG;\n\
             no --qboot/--defmt; timeout 300 s). `--irq` (x86_64 under SeaBIOS, or aarch64) serves\n\
             the BAR through ivshmem-doorbell with the model as its server, so the model raises\n\
             MSI-X interrupts (x86_64: local APIC; aarch64: GICv2m) and the guest runs its irq_*\n\
             scenarios. The host/guest contract is documented in\n\
             boot/src/contract.rs."
        );
        return ExitCode::SUCCESS;
    }
    let opts = match parse_opts(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("xtask qemu: {e} (see --help)");
            return ExitCode::FAILURE;
        }
    };
    match run_main(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask qemu: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_main(opts: &Opts) -> Result<(), String> {
    require_qemu_for(opts.arch)?;
    let t = Instant::now();
    let image = build_for(opts)?;
    if matches!(opts.model, ModelSel::Shm(_)) {
        build_model()?;
    }
    println!("xtask qemu: image {} built in {:.1} s", image.display(), t.elapsed().as_secs_f64());
    if let Some(p) = &opts.pcap {
        crate::wire::ensure_tools()?;
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
    }
    let o = run_image(&image, opts)?;
    print_summary("qemu", &o);
    let mut why = o.verdict();
    let irq_why = irq_checks(&o, opts.irq);
    for w in &irq_why {
        println!("  verdict: {w}");
    }
    why.extend(irq_why);
    if let Some(p) = &opts.pcap {
        match crate::wire::check_capture(p) {
            Ok(m) => println!("xtask qemu: {}: {m}", p.display()),
            Err(e) => {
                println!("  pcap: {e}");
                why.push(e);
            }
        }
    }
    if why.is_empty() { Ok(()) } else { Err(format!("{} problem(s)", why.len())) }
}

/// Scenarios of interrupt runs (`--irq`, issue #31): they must pass there
/// and skip elsewhere.
pub const IRQ_SCENARIOS: [&str; 3] = ["irq_setup", "irq_write_send", "irq_idle"];

/// What an interrupt run (`irq`) or any other run must show of the
/// [`IRQ_SCENARIOS`].
fn irq_checks(o: &Outcome, irq: bool) -> Vec<String> {
    let lines = o.lines();
    let mut why = Vec::new();
    for name in IRQ_SCENARIOS {
        let r = lines.iter().find_map(|l| match l {
            Line::Pass { name: n, .. } if n == name => Some("PASS"),
            Line::Fail { name: n, .. } if n == name => Some("FAIL"),
            Line::Skip { name: n, .. } if n == name => Some("SKIP"),
            _ => None,
        });
        let want = if irq { "PASS" } else { "SKIP" };
        match r {
            Some(r) if r == want => {}
            Some(r) => why.push(format!("{name}: {r}, expected {want}")),
            None => why.push(format!("{name} did not run")),
        }
    }
    why
}

/// Scenarios that drive the driver against the device model: they must
/// pass with the model attached and skip without one.
pub const DRIVER_SCENARIOS: [&str; 46] = [
    "cqp_create",
    "query_rdma_features",
    "query_fpm_val",
    "commit_fpm_val",
    "hmc_backing",
    "cqp_nop_registers",
    "ccq_create",
    "cqp_nop_ccq",
    "cqp_fault_injection",
    "cqp_destroy",
    "lan_fault_aq_hang",
    "lan_fault_aq_crit",
    "lan_fault_aq_error",
    "lan_fault_reset_midway",
    "lan_reset",
    "lan_identify",
    "lan_aq_init",
    "lan_version",
    "lan_clear_pf_config",
    "lan_clear_pxe",
    "lan_caps",
    "lan_ddp",
    "lan_switch_config",
    "lan_sched",
    "lan_mac_read",
    "lan_mac_config",
    "lan_vsi",
    "lan_rdma_branch",
    "lan_switch_rules",
    "lan_link",
    "lan_qset",
    "lan_pe_filter",
    "device_probe",
    "verbs_objects",
    "mr_levels",
    "rc_write_read_send",
    "rc_post_poll_timing",
    "rc_batch_timing",
    "verbs_fault_injection",
    "rw_1mib_read",
    "rw_1mib_write",
    "rc_error_completion",
    "verbs_teardown",
    "cm_connect_active",
    "cm_connect_passive",
    "device_close",
];

/// What a run with (`model`) or without the device model must show beyond
/// the verdict.
fn model_checks(o: &Outcome, model: bool) -> Vec<String> {
    let mut why = Vec::new();
    let lines = o.lines();
    let result = |name: &str| {
        lines.iter().find_map(|l| match l {
            Line::Pass { name: n, .. } if n == name => Some("PASS"),
            Line::Fail { name: n, .. } if n == name => Some("FAIL"),
            Line::Skip { name: n, .. } if n == name => Some("SKIP"),
            _ => None,
        })
    };
    let want = if model { "PASS" } else { "SKIP" };
    for name in DRIVER_SCENARIOS.iter().chain(["model_ping"].iter()) {
        match result(name) {
            Some(r) if r == want => {}
            Some(r) => why.push(format!("{name}: {r}, expected {want}")),
            None => why.push(format!("{name} did not run")),
        }
    }
    if model && !o.model_output.iter().any(|l| l.contains("cqp_ops=")) {
        why.push("the model printed no counters line".into());
    }
    // The CM peer of `mock-bar-cm` (the cm_connect_* scenarios): it did not
    // fail, and its device saw no error either.
    for l in &o.model_output {
        if let Some(e) = l.strip_prefix("cm-peer: FAILED: ") {
            why.push(format!("the CM peer failed: {e}"));
        }
        if let Some(counters) = l.strip_prefix("cm-peer: device counters: ") {
            for w in counters.split_whitespace() {
                let bad = ["wire_drops=", "dma_faults=", "cqes_dropped=", "invalid_wqes="]
                    .iter()
                    .any(|k| w.strip_prefix(k).is_some_and(|n| n != "0"));
                if bad {
                    why.push(format!("the CM peer's device counted {w}"));
                }
            }
        }
    }
    // the demo loses no frame: a receiver drop means the driver programmed
    // a QP context the model's wire rejects (issue #15)
    for l in o.model_output.iter().filter(|l| l.contains("cqp_ops=")) {
        let field = |k: &str| l.split_whitespace().find_map(|w| w.strip_prefix(k));
        if let Some(n) = field("wire_drops=").filter(|n| *n != "0") {
            why.push(format!("the model's receivers dropped {n} frame(s)"));
        }
        // issue #17: the PF starts cold, so the traffic flowed only because
        // the guest's LAN layer made the qset and the PE filter; none of it
        // waited for a qset or was dropped for want of the filter.
        if model && field("lan_cold=") != Some("1") {
            why.push("the model's PF did not run cold (lan_cold=1 missing)".into());
        }
        for k in ["lan_gated_wqes=", "pe_filter_drops="] {
            if let Some(n) = field(k).filter(|n| *n != "0") {
                why.push(format!("the model counted {k}{n} on the cold PF"));
            }
        }
    }
    why
}

/// The checks every scenario run of the `qemu` legs gets, after its
/// summary is printed: the verdict, the model's and the interrupts'
/// checks, the clock line naming `clock` as the rate's source, the
/// capture if one was written. The problems (a note when none).
fn check_run(
    title: &str,
    o: &Outcome,
    opts: &Opts,
    clock: &str,
    notes: &mut Vec<String>,
) -> Vec<String> {
    print_summary(title, o);
    let mut why = o.verdict();
    why.extend(model_checks(o, opts.model.attached()));
    why.extend(irq_checks(o, opts.irq));
    if !o.console.iter().any(|l| l.starts_with("  clock: ") && l.ends_with(clock)) {
        why.push(format!("the clock line does not say the rate came {clock}"));
    }
    if let Some(p) = &opts.pcap {
        match crate::wire::check_capture(p) {
            Ok(m) => notes.push(format!("pcap {m}")),
            Err(e) => why.push(format!("pcap {}: {e}", p.display())),
        }
    }
    if why.is_empty() {
        let n = o.lines().iter().filter(|l| matches!(l, Line::Pass { .. })).count();
        notes.push(format!("{title} {n} passed in {:.2}s", o.wall.as_secs_f64()));
    }
    why
}

/// The three failure exits of `image` run as `bare` (`-append fault`,
/// `panic`, `fail`): each must exit with its status and marker line
/// (`exception`: the CPU exception's), and xtask's own verdict must reject
/// it. `arch` prefixes the problems.
fn check_failure_exits(
    image: &Path,
    bare: &Opts,
    exception: &str,
    arch: &str,
    problems: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    for (word, code, marker) in [
        ("fault", c::EXIT_EXCEPTION, exception),
        ("panic", c::EXIT_PANIC, "PANIC"),
        ("fail", c::EXIT_FAIL, "FAIL injected: requested by the command line"),
    ] {
        let o = run_image(image, &Opts { append: Some(word.into()), ..bare.clone() })?;
        let want = c::qemu_status(code);
        // xtask's own verdict must reject each of these runs.
        let rejected = !o.verdict().is_empty()
            && (word != "fail"
                || o.verdict().iter().any(|w| w.contains("scenario injected failed")));
        if o.status != Some(want) || !o.console.iter().any(|l| l.starts_with(marker)) || !rejected {
            problems.push(format!(
                "{arch}`-append {word}` should exit {want} with a `{marker}` line; got {:?}, \
                 console {:?}",
                o.status, o.console
            ));
        } else {
            notes.push(format!("{word}→{want}"));
        }
    }
    Ok(())
}

/// A leg's result: its notes, or its problems (printed).
fn leg_result(problems: &[String], notes: &[String]) -> Result<String, String> {
    if problems.is_empty() {
        Ok(notes.join(", "))
    } else {
        for p in problems {
            println!("  {p}");
        }
        Err(format!("{} problem(s): {}", problems.len(), problems.join("; ")))
    }
}

/// The `qemu` leg of `cargo xtask test`: the scenario run with the device
/// model (SeaBIOS, writing every frame of the demo's RoCEv2 traffic to
/// `target/qemu/demo.pcap`, which tshark and scapy then check as in the
/// `wire` leg; then qboot, which exercises BAR assignment), one without
/// a model (the driver scenarios must skip) and with the PIT clock, the
/// interrupt run (`--irq`: the model raises MSI-X through ivshmem-doorbell,
/// the `irq_*` scenarios must pass; they skip in every other run), the
/// three failure exits, and the defmt image with the model.
pub fn run_leg() -> Result<String, String> {
    require_qemu()?;
    let image = build(false)?;
    build_model()?;
    crate::wire::ensure_tools()?;
    let quiet = Opts { echo: false, timeout: Duration::from_secs(60), ..Opts::default() };
    let bare = Opts { model: ModelSel::Bare, ..quiet.clone() };
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    // the demo's traffic on the model's wire, checked like `cargo xtask wire`
    let dir = root().join("target").join("qemu");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let pcap = dir.join("demo.pcap");
    let _ = std::fs::remove_file(&pcap);
    for (title, opts) in [
        ("model", Opts { pcap: Some(pcap.clone()), ..quiet.clone() }),
        ("qboot", Opts { qboot: true, ..quiet.clone() }),
        ("bare-pit", Opts { host_tsc: false, ..bare.clone() }),
        ("irq", Opts { irq: true, ..quiet.clone() }),
    ] {
        if title == "qboot" && !Path::new(QBOOT_ROM).is_file() {
            notes.push(format!("qboot skipped ({QBOOT_ROM} missing)"));
            continue;
        }
        let o = run_image(&image, &opts)?;
        let source = if opts.host_tsc { "from the host" } else { "by the PIT" };
        let why = check_run(title, &o, &opts, source, &mut notes);
        problems.extend(why.into_iter().map(|w| format!("{title}: {w}")));
    }
    check_failure_exits(&image, &bare, "EXCEPTION vector=6", "", &mut problems, &mut notes)?;
    // Last, so the plain image is the one built for the runs above: the
    // defmt variant, whose frames must mirror the console's scenario lines.
    let image = build(true)?;
    let o = run_image(&image, &Opts { defmt: true, ..quiet.clone() })?;
    print_summary("defmt", &o);
    let mut why = o.verdict();
    why.extend(model_checks(&o, true));
    match &o.defmt {
        Some(d) => {
            for l in o.lines() {
                if let Line::Pass { name, .. } = l {
                    let want = format!("scenario {name} passed");
                    if !d.frames.iter().any(|f| f.contains(&want)) {
                        why.push(format!("no defmt frame `{want}`"));
                    }
                }
            }
            if !d.frames.iter().any(|f| f.contains("done:")) {
                why.push("no defmt `done:` frame".into());
            }
            if d.malformed != 0 {
                why.push(format!("{} malformed defmt frames", d.malformed));
            }
            if why.is_empty() {
                notes.push(format!("defmt {} frames", d.frames.len()));
            }
        }
        None => why.push("no defmt capture".into()),
    }
    problems.extend(why.into_iter().map(|w| format!("defmt: {w}")));
    leg_result(&problems, &notes)
}

/// The `qemu-aarch64` leg: the aarch64 image on `-M virt` with the device
/// model (every driver scenario must pass, with the same checks as the
/// `qemu` leg), without a model (they must skip), the interrupt run
/// (`--irq`: MSI-X through ivshmem-doorbell and the GICv2m, the `irq_*`
/// scenarios must pass; they skip in the other runs), and the three
/// failure exits through semihosting.
pub fn run_leg_aarch64() -> Result<String, String> {
    require_qemu_for(Arch::Aarch64)?;
    let image = build_aarch64()?;
    build_model()?;
    let quiet =
        Opts { arch: Arch::Aarch64, echo: false, timeout: AARCH64_TIMEOUT, ..Opts::default() };
    let bare = Opts { model: ModelSel::Bare, ..quiet.clone() };
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    for (title, opts) in [
        ("aarch64-model", quiet.clone()),
        ("aarch64-bare", bare.clone()),
        ("aarch64-irq", Opts { irq: true, ..quiet.clone() }),
    ] {
        let o = run_image(&image, &opts)?;
        let why = check_run(title, &o, &opts, "from CNTFRQ_EL0", &mut notes);
        problems.extend(why.into_iter().map(|w| format!("{title}: {w}")));
    }
    let exception = "EXCEPTION vector=4 (sync)";
    check_failure_exits(&image, &bare, exception, "aarch64 ", &mut problems, &mut notes)?;
    leg_result(&problems, &notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: i32, lines: &[&str]) -> Outcome {
        Outcome {
            status: Some(status),
            console: lines.iter().map(|s| s.to_string()).collect(),
            ..Outcome::default()
        }
    }

    #[test]
    fn parses_console_lines() {
        assert_eq!(
            parse_line("PASS bar_rw (1104 us)\r"),
            Line::Pass { name: "bar_rw".into(), us: 1104 }
        );
        assert_eq!(
            parse_line("FAIL dma_pool: leak: 3 live pages"),
            Line::Fail { name: "dma_pool".into(), reason: "leak: 3 live pages".into() }
        );
        assert_eq!(
            parse_line("SKIP bar_rw: real device"),
            Line::Skip { name: "bar_rw".into(), reason: "real device".into() }
        );
        assert_eq!(
            parse_line("DONE passed=4 failed=0 skipped=1"),
            Line::Done { passed: 4, failed: 0, skipped: 1 }
        );
        assert_eq!(parse_line("PASS broken"), Line::Other);
        assert_eq!(parse_line("  pci 00:01.0 1af4:1110"), Line::Other);
        assert_eq!(parse_line("DONE passed=x failed=0 skipped=0"), Line::Other);
    }

    #[test]
    fn verdict_needs_exit_33_done_and_consistent_counts() {
        let good = ["PASS a (1 us)", "PASS b (2 us)", "DONE passed=2 failed=0 skipped=0"];
        assert!(outcome(33, &good).verdict().is_empty());
        // A triple fault exits 0: never a pass.
        assert!(!outcome(0, &good).verdict().is_empty());
        // Truncated output.
        assert!(!outcome(33, &good[..2]).verdict().is_empty());
        // DONE disagrees with the lines (a lost line).
        assert!(
            !outcome(33, &["PASS a (1 us)", "DONE passed=2 failed=0 skipped=0"])
                .verdict()
                .is_empty()
        );
        // A failure, even with exit 33.
        let bad = ["PASS a (1 us)", "FAIL b: x", "DONE passed=1 failed=1 skipped=0"];
        let v = outcome(33, &bad).verdict();
        assert!(v.iter().any(|w| w.contains("scenario b failed: x")), "{v:?}");
        // Nothing ran.
        assert!(!outcome(33, &["DONE passed=0 failed=0 skipped=0"]).verdict().is_empty());
        let mut o = outcome(33, &good);
        o.bar_problems.push("magic".into());
        assert!(!o.verdict().is_empty());
    }

    #[test]
    fn qemu_command_line_follows_the_contract() {
        let opts = Opts { qboot: true, append: Some("fault".into()), ..Opts::default() };
        let (img, b, r, c2) =
            (Path::new("/img"), Path::new("/b"), Path::new("/r"), Path::new("/c"));
        let a = qemu_args(&opts, img, b, r, c2, Path::new("/s"), false);
        let s = a.join(" ");
        assert!(s.contains("mem-path=/b,share=on") && s.contains("mem-path=/r,share=on"), "{s}");
        assert!(s.contains("size=16M") && s.contains("-m 256M"), "{s}");
        assert!(s.contains("isa-debug-exit,iobase=0xf4"), "{s}");
        assert!(s.contains("-no-reboot") && s.contains("-accel tcg"), "{s}");
        assert!(s.ends_with("-bios /usr/share/qemu/qboot.rom -append fault"), "{s}");
        assert!(!s.contains("file:/c"), "COM2 only with --defmt: {s}");
        let d = qemu_args(&Opts { defmt: true, ..opts }, img, b, r, c2, Path::new("/s"), true)
            .join(" ");
        assert!(d.contains("-serial stdio") && d.contains("-serial file:/c"), "{d}");
        assert!(d.contains("-accel kvm"), "{d}");
        assert!(c::BAR_FILE_SIZE.is_power_of_two());
    }

    #[test]
    fn aarch64_command_line() {
        let opts = parse_opts(&["--arch".into(), "aarch64".into(), "--append".into(), "x".into()])
            .unwrap();
        assert_eq!(
            (opts.arch, opts.accel, opts.timeout),
            (Arch::Aarch64, Accel::Tcg, AARCH64_TIMEOUT)
        );
        let (img, b, r, c2) =
            (Path::new("/img"), Path::new("/b"), Path::new("/r"), Path::new("/c"));
        let s = qemu_args(&opts, img, b, r, c2, Path::new("/s"), false).join(" ");
        assert!(
            s.contains("-machine virt,memory-backend=ram") && s.contains("-semihosting"),
            "{s}"
        );
        assert!(s.contains("mem-path=/b,share=on") && s.contains("mem-path=/r,share=on"), "{s}");
        assert!(s.contains("ivshmem-plain,memdev=bar") && !s.contains("isa-debug-exit"), "{s}");
        assert!(s.ends_with("-kernel /img -append x"), "{s}");
        assert!(parse_opts(&["--arch".into(), "aarch64".into(), "--qboot".into()]).is_err());
        assert!(
            parse_opts(&["--arch".into(), "aarch64".into(), "--accel".into(), "kvm".into()])
                .is_err()
        );
        assert!(parse_opts(&["--arch".into(), "riscv".into()]).is_err());
        assert_eq!(Arch::Aarch64.ram_base(), 0x4000_0000);
        assert_eq!(Arch::X86_64.ram_base(), 0);
    }

    #[test]
    fn aarch64_irq_command_line() {
        // --irq on aarch64 (issue #31): ivshmem-doorbell served by the
        // model on the socket, on virt's default GIC (v2, with the v2m
        // frame; a gic-version=3 machine has no MSI path without the ITS).
        let opts = parse_opts(&["--arch".into(), "aarch64".into(), "--irq".into()]).unwrap();
        assert!(opts.irq && opts.arch == Arch::Aarch64);
        let (img, b, r, c2) =
            (Path::new("/img"), Path::new("/b"), Path::new("/r"), Path::new("/c"));
        let s = qemu_args(&opts, img, b, r, c2, Path::new("/s"), false).join(" ");
        assert!(s.contains("-chardev socket,path=/s,id=ivs"), "{s}");
        assert!(
            s.contains(&format!("-device ivshmem-doorbell,chardev=ivs,vectors={}", c::IRQ_VECTORS)),
            "{s}"
        );
        assert!(!s.contains("ivshmem-plain") && !s.contains("gic-version"), "{s}");
        assert!(s.contains("mem-path=/r,share=on") && s.contains("-semihosting"), "{s}");
        for bad in [&["--irq", "--qboot"][..], &["--irq", "--no-model"][..]] {
            let args: Vec<String> = bad.iter().map(|a| a.to_string()).collect();
            assert!(parse_opts(&args).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bar_file_check_catches_a_wrong_word() {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("irdma-xtask-test-{}", std::process::id()));
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.set_len(c::BAR_FILE_SIZE).unwrap();
        let nonce = 0x1234_5678_9abc_def0;
        assert_eq!(check_bar_file(&f, nonce).len(), 3, "empty file: magic, echo and pattern");
        f.write_all_at(&c::GUEST_MAGIC.to_le_bytes(), (c::MAILBOX + c::MB_GUEST_MAGIC) as u64)
            .unwrap();
        write_u64(&f, c::MAILBOX + c::MB_ECHO, c::echo(nonce)).unwrap();
        for i in 0..c::SCRATCH_WORDS {
            write_u64(&f, c::MAILBOX + c::MB_SCRATCH + 8 * i, c::pattern(nonce, i as u64)).unwrap();
        }
        assert_eq!(check_bar_file(&f, nonce), Vec::<String>::new());
        write_u64(&f, c::MAILBOX + c::MB_SCRATCH + 8 * 100, 0).unwrap();
        let p = check_bar_file(&f, nonce);
        assert!(p.len() == 1 && p[0].starts_with("1 of 512"), "{p:?}");
        assert_eq!(check_bar_file(&f, nonce ^ 1).len(), 2, "another run's nonce");
        drop(f);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn defmt_decoding_needs_a_defmt_table() {
        // xtask itself carries no defmt table.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let e = decode_defmt(&me, &[1, 2, 3]).unwrap_err();
        assert!(e.contains("no defmt table"), "{e}");
        assert!(decode_defmt(b"not an elf", &[]).is_err());
    }

    #[test]
    fn model_checks_want_driver_scenarios_to_pass_or_skip() {
        let mut lines: Vec<String> =
            DRIVER_SCENARIOS.iter().map(|n| format!("PASS {n} (1 us)")).collect();
        lines.push("PASS model_ping (1 us)".into());
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let mut o = outcome(33, &refs);
        assert_eq!(model_checks(&o, true), vec!["the model printed no counters line"]);
        let ok =
            "mock-bar-shm: cqp_ops=3 wire_drops=0 lan_cold=1 lan_gated_wqes=0 pe_filter_drops=0";
        o.model_output.push(ok.into());
        assert!(model_checks(&o, true).is_empty());
        o.model_output[0] = ok.replace("wire_drops=0", "wire_drops=2");
        assert_eq!(model_checks(&o, true), vec!["the model's receivers dropped 2 frame(s)"]);
        // the PF must have run cold, and nothing may have been gated
        o.model_output[0] = ok.replace("lan_cold=1", "lan_cold=0");
        assert_eq!(
            model_checks(&o, true),
            vec!["the model's PF did not run cold (lan_cold=1 missing)"]
        );
        o.model_output[0] = ok.replace("pe_filter_drops=0", "pe_filter_drops=4");
        assert_eq!(
            model_checks(&o, true),
            vec!["the model counted pe_filter_drops=4 on the cold PF"]
        );
        o.model_output[0] = ok.replace("lan_gated_wqes=0", "lan_gated_wqes=1");
        assert_eq!(model_checks(&o, true).len(), 1);
        // the CM peer of mock-bar-cm: a failure or an error counter of its
        // device is a problem
        o.model_output[0] = ok.into();
        o.model_output.push("cm-peer: device counters: cqp=9 packets=20 wire_drops=0".into());
        assert!(model_checks(&o, true).is_empty());
        o.model_output[1] = "cm-peer: device counters: cqp=9 wire_drops=0 dma_faults=1".into();
        assert_eq!(model_checks(&o, true), vec!["the CM peer's device counted dma_faults=1"]);
        o.model_output[1] = "cm-peer: FAILED: probe: Timeout".into();
        assert_eq!(model_checks(&o, true), vec!["the CM peer failed: probe: Timeout"]);
        o.model_output.truncate(1);
        o.model_output[0] = "mock-bar-shm: cqp_ops=3".into();
        // Without a model the same lines are wrong: they must be SKIPs.
        assert_eq!(model_checks(&o, false).len(), DRIVER_SCENARIOS.len() + 1);
        o.console.retain(|l| !l.contains("cqp_destroy"));
        assert!(model_checks(&o, true).iter().any(|w| w == "cqp_destroy did not run"));
    }

    #[test]
    fn stale_files_are_recognised_by_pid() {
        assert_eq!(owner_pid("irdma-qemu-1234-0-99-bar"), Some(1234));
        assert_eq!(owner_pid("irdma-qemu-x-0-bar"), None);
        assert_eq!(owner_pid("other-1234"), None);
        let dir = std::env::temp_dir().join(format!("irdma-stale-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // pid 0 never names a live user process in /proc; our own pid does.
        let dead = dir.join("irdma-qemu-0-1-2-bar");
        let mine = dir.join(format!("irdma-qemu-{}-1-2-bar", std::process::id()));
        let other = dir.join("unrelated");
        for p in [&dead, &mine, &other] {
            std::fs::write(p, b"x").unwrap();
        }
        remove_stale(&dir);
        assert!(!dead.exists() && mine.exists() && other.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn options() {
        let o = parse_opts(&[
            "--accel".into(),
            "auto".into(),
            "--model".into(),
            "m".into(),
            "--model-arg".into(),
            "x".into(),
        ])
        .unwrap();
        assert_eq!(o.accel, Accel::Auto);
        assert_eq!(o.model, ModelSel::Program("m".to_string(), vec!["x".to_string()]));
        let d = parse_opts(&["--model-arg".into(), "--poll".into()]).unwrap();
        assert_eq!(d.model, ModelSel::Shm(vec!["--poll".to_string()]), "the default model");
        assert_eq!(parse_opts(&["--no-model".into()]).unwrap().model, ModelSel::Bare);
        assert!(parse_opts(&["--no-model".into(), "--model-arg".into(), "x".into()]).is_err());
        assert!(parse_opts(&["--accel".into(), "hvf".into()]).is_err());
        assert!(parse_opts(&["--bogus".into()]).is_err());
        let p = parse_opts(&["--pcap".into(), "demo.pcap".into()]).unwrap().pcap.unwrap();
        assert!(p.is_absolute() && p.ends_with("demo.pcap"), "{}", p.display());
        assert!(parse_opts(&["--no-model".into(), "--pcap".into(), "x".into()]).is_err());
        assert!(parse_opts(&["--pcap".into()]).is_err(), "needs a value");
    }
}
