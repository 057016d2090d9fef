//! The flattened device tree QEMU's `virt` machine hands the image: the
//! command line (`/chosen/bootargs`, from `-append`), the RAM (`/memory`)
//! and the PCIe ECAM (`pci-host-ecam-generic` reg). Only what the image
//! needs is read, plus the GICv2 (interrupt runs: the `intc` node's
//! distributor and CPU interface, its `v2m` frame, the virtual timer's
//! PPI); `virt` uses #address-cells = #size-cells = 2 throughout.
//!
//! QEMU puts the DTB at the start of RAM when the ELF image is loaded above
//! it (hw/arm/boot.c); `x0` at entry may hold its address too. Both are
//! tried.

use irdma_boot::memmap::{Region, TYPE_RAM};

use super::arch::RAM_BASE;

const FDT_MAGIC: u32 = 0xd00d_feed;
const BEGIN_NODE: u32 = 1;
const END_NODE: u32 = 2;
const PROP: u32 = 3;
const NOP: u32 = 4;
const END: u32 = 9;
/// Largest DTB accepted (the image is linked 2 MiB into RAM).
const MAX_SIZE: usize = 2 << 20;

/// A validated DTB (identity-mapped, in RAM below the image).
pub struct StartInfo {
    blob: &'static [u8],
    regions: [Region; 4],
    n_regions: usize,
    ecam: Option<(u64, u64)>,
    gic: Gic,
}

/// What the DTB says about the interrupt controller (QEMU `virt`,
/// hw/arm/virt.c: create_gic, create_v2m, fdt_add_timer_nodes); `None`
/// where it says nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gic {
    /// The `intc` node's first `reg` range: the distributor.
    pub dist: Option<u64>,
    /// Its second range: the CPU interface (GICv2; a GICv3 has the
    /// redistributors there).
    pub cpu: Option<u64>,
    /// The `v2m` child's `reg`: the GICv2m MSI frame.
    pub v2m: Option<u64>,
    /// The `timer` node's third `interrupts` triple (arm,armv8-timer
    /// binding order: secure, non-secure, virtual, hypervisor), as an
    /// INTID (PPI n = 16 + n).
    pub virt_timer: Option<u32>,
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let w = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

fn be64(b: &[u8], at: usize) -> Option<u64> {
    Some((be32(b, at)? as u64) << 32 | be32(b, at + 4)? as u64)
}

fn cstr(b: &[u8], at: usize) -> Option<&[u8]> {
    let rest = b.get(at..)?;
    let n = rest.iter().position(|&c| c == 0)?;
    rest.get(..n)
}

impl StartInfo {
    /// Checks the DTB at `addr` (x0 at entry), else at the start of RAM.
    pub fn new(addr: u64) -> Option<StartInfo> {
        [addr, RAM_BASE].into_iter().find_map(Self::at)
    }

    fn at(addr: u64) -> Option<StartInfo> {
        // Only RAM below the image (GiB 1, Normal memory) is considered.
        let image = core::ptr::addr_of!(__kernel_start) as u64;
        if addr < RAM_BASE || addr.checked_add(40)? > image || !addr.is_multiple_of(8) {
            return None;
        }
        // SAFETY: `addr..addr + 40` lies in identity-mapped RAM below the
        // image (checked above), which nothing writes while we run.
        let header = unsafe { core::slice::from_raw_parts(addr as *const u8, 40) };
        if be32(header, 0)? != FDT_MAGIC {
            return None;
        }
        let total = be32(header, 4)? as usize;
        if !(40..=MAX_SIZE).contains(&total) || addr + total as u64 > image {
            return None;
        }
        // SAFETY: as above, for the whole blob (its size checked against
        // the image start); the loader wrote it before we started.
        let blob = unsafe { core::slice::from_raw_parts(addr as *const u8, total) };
        let mut info = StartInfo {
            blob,
            regions: [Region { addr: 0, size: 0, kind: 0 }; 4],
            n_regions: 0,
            ecam: None,
            gic: Gic::default(),
        };
        let mut regions = [Region { addr: 0, size: 0, kind: 0 }; 4];
        let mut n = 0;
        let mut ecam = None;
        let mut gic = Gic::default();
        info.walk(|path, name, value| {
            let intc = path.first().is_some_and(|n| n.starts_with(b"intc"));
            if path.len() == 1 && intc && name == b"reg" {
                gic.dist = be64(value, 0);
                gic.cpu = be64(value, 16);
            }
            if path.len() == 2 && intc && path[1].starts_with(b"v2m") && name == b"reg" {
                gic.v2m = be64(value, 0);
            }
            if path == [b"timer".as_slice()] && name == b"interrupts" {
                // Triple 2: <type number flags>, type 1 = PPI.
                gic.virt_timer =
                    be32(value, 24).zip(be32(value, 28)).and_then(|(kind, n)| match kind {
                        1 if n < 16 => Some(16 + n),
                        _ => None,
                    });
            }
            if path.first().is_some_and(|n| n.starts_with(b"memory"))
                && path.len() == 1
                && name == b"reg"
            {
                for reg in value.chunks_exact(16) {
                    if let (Some(slot), Some(a), Some(s)) =
                        (regions.get_mut(n), be64(reg, 0), be64(reg, 8))
                    {
                        *slot = Region { addr: a, size: s, kind: TYPE_RAM };
                        n += 1;
                    }
                }
            }
            if path.len() == 1 && path[0].starts_with(b"pcie") && name == b"reg" && ecam.is_none() {
                ecam = be64(value, 0).zip(be64(value, 8));
            }
        })?;
        info.regions = regions;
        info.n_regions = n;
        info.ecam = ecam;
        info.gic = gic;
        Some(info)
    }

    /// Calls `f(path, property, value)` for every property; `path` holds
    /// the node names below the root (up to 8 levels). `None` if the
    /// structure block is malformed.
    fn walk(&self, mut f: impl FnMut(&[&[u8]], &[u8], &[u8])) -> Option<()> {
        let b = self.blob;
        let (off_struct, off_strings) = (be32(b, 8)? as usize, be32(b, 12)? as usize);
        let mut path: [&[u8]; 8] = [&[]; 8];
        let mut depth = 0usize; // 0 = outside the root node
        let mut p = off_struct;
        loop {
            let token = be32(b, p)?;
            p += 4;
            match token {
                BEGIN_NODE => {
                    let name = cstr(b, p)?;
                    p = (p + name.len() + 1 + 3) & !3;
                    if depth >= 1 {
                        *path.get_mut(depth - 1)? = name;
                    }
                    depth += 1;
                }
                END_NODE => depth = depth.checked_sub(1)?,
                PROP => {
                    let (len, name_off) = (be32(b, p)? as usize, be32(b, p + 4)? as usize);
                    let value = b.get(p + 8..p + 8 + len)?;
                    let name = cstr(b, off_strings + name_off)?;
                    f(path.get(..depth.saturating_sub(1))?, name, value);
                    p = (p + 8 + len + 3) & !3;
                }
                NOP => {}
                END => return Some(()),
                _ => return None,
            }
        }
    }

    /// Where the blob is.
    pub fn addr(&self) -> u64 {
        self.blob.as_ptr() as u64
    }

    /// The command line (`-append`), up to `buf.len()` bytes of ASCII.
    pub fn cmdline<'a>(&self, buf: &'a mut [u8]) -> &'a str {
        let mut n = 0;
        let _ = self.walk(|path, name, value| {
            if path == [b"chosen".as_slice()] && name == b"bootargs" {
                for (slot, &c) in
                    buf.iter_mut().zip(value.iter().take_while(|&&c| c != 0 && c.is_ascii()))
                {
                    *slot = c;
                    n += 1;
                }
            }
        });
        buf.get(..n).and_then(|b| core::str::from_utf8(b).ok()).unwrap_or("")
    }

    /// The RAM regions of `/memory` (type RAM), as the PVH memory map gives
    /// them on x86_64.
    pub fn memmap(&self) -> impl Iterator<Item = Region> + Clone + '_ {
        self.regions.iter().take(self.n_regions).copied()
    }

    /// The PCIe ECAM (base, size), if the DTB describes one.
    pub fn ecam(&self) -> Option<(u64, u64)> {
        self.ecam
    }

    /// The interrupt controller, as far as the DTB describes it.
    pub fn gic(&self) -> Gic {
        self.gic
    }
}

unsafe extern "C" {
    static __kernel_start: u8;
}
