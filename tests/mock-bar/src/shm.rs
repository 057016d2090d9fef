//! The shared-memory transport (for QEMU): the BAR is a file QEMU exposes as
//! an ivshmem-plain BAR2, guest RAM is a second file (file offset = guest
//! physical address, with the 4 GiB hole folded as QEMU does). The model is a
//! host process that polls. See `shared/notes/qemu-mock-bar.md`.
//!
//! A plain-memory BAR has no side effects, so the device runs in
//! [`Mode::Deferred`]: the host copies changed driver-written registers into
//! the device, calls [`Device::poll`], and writes the device's status
//! registers back into the BAR file. Files are accessed with positional
//! reads/writes (`pread`/`pwrite`), which share the page cache with QEMU's
//! `MAP_SHARED` mapping; no `unsafe` and no dependency. A register or WQE
//! header word is read with one 8- or 4-byte positional read; the model does
//! not guard against a torn read of a word the guest is writing at that
//! instant (x86 guests store such words with one instruction).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::device::{Config, Device, Mode};
use crate::mem::{Fault, Memory};
use crate::regs;

/// Guest RAM in a file: offset = GPA below `below_4g`, GPA − 4 GiB +
/// `below_4g` above 4 GiB (notes/qemu-mock-bar.md §3).
#[derive(Debug)]
pub struct FileMemory {
    file: File,
    size: u64,
    below_4g: u64,
}

impl FileMemory {
    /// Wraps an open RAM file of `size` bytes.
    pub fn new(file: File, size: u64, below_4g: u64) -> Self {
        Self { file, size, below_4g: below_4g.min(size) }
    }

    fn offset(&self, gpa: u64, len: usize) -> Option<u64> {
        const FOUR_G: u64 = 1 << 32;
        let off = if gpa < self.below_4g {
            gpa
        } else if gpa >= FOUR_G {
            gpa - FOUR_G + self.below_4g
        } else {
            return None; // the PCI hole
        };
        let end = off.checked_add(len as u64)?;
        let limit = if gpa < self.below_4g { self.below_4g } else { self.size };
        (end <= limit).then_some(off)
    }
}

impl Memory for FileMemory {
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), Fault> {
        let fault = Fault { addr: pa, len: buf.len(), write: false };
        let off = self.offset(pa, buf.len()).ok_or(fault)?;
        self.file.read_exact_at(buf, off).map_err(|_| fault)
    }

    fn write(&self, pa: u64, data: &[u8]) -> Result<(), Fault> {
        let fault = Fault { addr: pa, len: data.len(), write: true };
        let off = self.offset(pa, data.len()).ok_or(fault)?;
        self.file.write_all_at(data, off).map_err(|_| fault)
    }
}

/// A BAR file.
#[derive(Debug)]
pub struct FileBar {
    file: File,
    size: u64,
}

impl FileBar {
    /// Wraps an open BAR file of `size` bytes.
    pub fn new(file: File, size: u64) -> Self {
        Self { file, size }
    }
    /// 32-bit read (all-ones outside the file or on error).
    pub fn read32(&self, off: u32) -> u32 {
        let mut b = [0u8; 4];
        if off as u64 + 4 > self.size || self.file.read_exact_at(&mut b, off as u64).is_err() {
            return u32::MAX;
        }
        u32::from_le_bytes(b)
    }
    /// 32-bit write (dropped outside the file).
    pub fn write32(&self, off: u32, v: u32) {
        if off as u64 + 4 <= self.size {
            let _ = self.file.write_all_at(&v.to_le_bytes(), off as u64);
        }
    }
}

/// Creates (or truncates and zeroes) a file of `size` bytes: QEMU keeps
/// stale contents of memory-backend files, so every run starts clean.
pub fn create_zeroed(path: &Path, size: u64) -> io::Result<File> {
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
    f.set_len(size)?;
    Ok(f)
}

/// Registers the driver writes and the device acts on.
const WATCHED: [u32; 8] = [
    regs::CCQPHIGH,
    regs::CCQPLOW,
    regs::CQPDB,
    regs::WQEALLOC,
    regs::CQARM,
    regs::AEQALLOC,
    regs::DB_ADDR_OFFSET,
    regs::DB_ADDR_OFFSET + 64,
];

/// How the host loop waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollMode {
    /// Spin (one whole core).
    Spin,
    /// Spin while busy; after 200 µs idle, sleep 100 µs between checks.
    Hybrid,
}

/// The host side: one deferred device between a BAR file and a RAM file.
pub struct ShmHost {
    /// The device (inspect counters and trace after the run).
    pub device: Device,
    bar: FileBar,
    last: [u32; 8],
}

impl ShmHost {
    /// A device (forced to [`Mode::Deferred`]) serving `bar`, DMA to `ram`.
    pub fn new(mut cfg: Config, bar: FileBar, ram: FileMemory) -> Self {
        cfg.mode = Mode::Deferred;
        let mut h = Self { device: Device::new(cfg, Box::new(ram)), bar, last: [0; 8] };
        h.publish();
        h
    }

    /// Writes the device's status registers into the BAR where they differ.
    fn publish(&mut self) {
        for (off, v) in self.device.status_registers() {
            if self.bar.read32(off) != v {
                self.bar.write32(off, v);
            }
        }
    }

    /// One round: copy changed doorbells in, poll, publish. Returns whether
    /// the device did anything.
    pub fn step(&mut self) -> bool {
        let mut changed = false;
        for (i, off) in WATCHED.iter().enumerate() {
            let v = self.bar.read32(*off);
            if v != self.last[i] {
                self.last[i] = v;
                self.device.mmio_write32(*off, v);
                changed = true;
            }
        }
        let work = self.device.poll();
        self.publish();
        work || changed
    }

    /// Serves until `stop` is set.
    pub fn serve(&mut self, stop: &AtomicBool, mode: PollMode) {
        let mut idle_since = Instant::now();
        while !stop.load(Ordering::Acquire) {
            if self.step() {
                idle_since = Instant::now();
            } else if mode == PollMode::Hybrid && idle_since.elapsed() > Duration::from_micros(200)
            {
                std::thread::sleep(Duration::from_micros(100));
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// Runs [`ShmHost::serve`] on a thread until the returned flag is set.
pub fn spawn(
    mut host: ShmHost,
    mode: PollMode,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<ShmHost>) {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let h = std::thread::spawn(move || {
        host.serve(&s, mode);
        host
    });
    (stop, h)
}
