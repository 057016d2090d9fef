//! PCI configuration space: device identification, BAR probing and sizing,
//! and enabling the device.
//!
//! The driver never touches config space itself; the embedder (or the boot
//! image) finds the function with [`ConfigSpace`] and these helpers, maps
//! BAR0 and hands it to the driver. The same code probes a real E810 and the
//! device model's ivshmem stand-in, which differ only in ids and BAR index.

/// Intel's PCI vendor id.
pub const VENDOR_INTEL: u16 = 0x8086;

/// The E810 PF device ids, which run the RDMA engine as GEN_2.
/// (spec control-path §1.1; RC: providers/irdma/ice_devids.h)
pub const E810_DEVICE_IDS: [u16; 6] = [0x1591, 0x1592, 0x1593, 0x1599, 0x159A, 0x159B];

/// Other ice-family PF device ids on the same GEN_2 path (E823-L, E823-C,
/// C822N, E822-C, E822-L). (spec control-path §1.1)
pub const ICE_GEN2_OTHER_DEVICE_IDS: [u16; 19] = [
    0x124C, 0x124D, 0x124E, 0x124F, 0x151D, 0x188A, 0x188B, 0x188C, 0x188D, 0x188E, 0x1890, 0x1891,
    0x1892, 0x1893, 0x1894, 0x1897, 0x1898, 0x1899, 0x189A,
];

/// Whether `vendor:device` is a PF whose RDMA engine is GEN_2.
pub fn is_gen2_rdma(vendor: u16, device: u16) -> bool {
    vendor == VENDOR_INTEL
        && (E810_DEVICE_IDS.contains(&device) || ICE_GEN2_OTHER_DEVICE_IDS.contains(&device))
}

/// Whether `vendor:device` is specifically an E810 PF.
pub fn is_e810(vendor: u16, device: u16) -> bool {
    vendor == VENDOR_INTEL && E810_DEVICE_IDS.contains(&device)
}

/// Config-space register offsets (PCI Local Bus spec, type 0 header).
pub mod cfg {
    /// Vendor id (16 bits).
    pub const VENDOR_ID: u16 = 0x00;
    /// Device id (16 bits).
    pub const DEVICE_ID: u16 = 0x02;
    /// Command register (16 bits).
    pub const COMMAND: u16 = 0x04;
    /// Revision id (8 bits) and class code (24 bits).
    pub const CLASS_REV: u16 = 0x08;
    /// Header type (8 bits, at byte 0x0E).
    pub const HEADER_TYPE: u16 = 0x0C;
    /// First BAR.
    pub const BAR0: u16 = 0x10;
    /// Command: respond to I/O space accesses.
    pub const CMD_IO: u16 = 1 << 0;
    /// Command: respond to memory space accesses.
    pub const CMD_MEM: u16 = 1 << 1;
    /// Command: may master the bus (DMA).
    pub const CMD_BUS_MASTER: u16 = 1 << 2;
}

/// 32-bit access to one function's configuration space.
///
/// Offsets are byte offsets, 4-byte aligned for the 32-bit calls.
pub trait ConfigSpace {
    /// Reads the dword at `offset`.
    fn read32(&self, offset: u16) -> u32;
    /// Writes the dword at `offset`.
    fn write32(&self, offset: u16, value: u32);

    /// Reads the 16-bit word at `offset` (2-aligned).
    fn read16(&self, offset: u16) -> u16 {
        (self.read32(offset & !3) >> ((offset & 2) * 8)) as u16
    }

    /// Writes the 16-bit word at `offset` with a read-modify-write of its dword.
    ///
    /// Used for COMMAND: the neighbouring STATUS word is write-1-to-clear, so
    /// the other half is written back as zero rather than as read.
    fn write16(&self, offset: u16, value: u16) {
        let shift = (offset & 2) * 8;
        self.write32(offset & !3, (value as u32) << shift);
    }
}

/// Identity of a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// Revision id.
    pub revision: u8,
    /// Class code (base, sub, interface).
    pub class: u32,
}

/// Reads the function's identity; `None` when no function answers (vendor
/// id all-ones).
pub fn identity(cs: &impl ConfigSpace) -> Option<Identity> {
    let id = cs.read32(cfg::VENDOR_ID);
    let vendor = id as u16;
    if vendor == 0xffff || vendor == 0 {
        return None;
    }
    let cr = cs.read32(cfg::CLASS_REV);
    Some(Identity { vendor, device: (id >> 16) as u16, revision: cr as u8, class: cr >> 8 })
}

/// What a memory BAR decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarInfo {
    /// Base address as currently programmed.
    pub addr: u64,
    /// Size in bytes (a power of two).
    pub size: u64,
    /// 64-bit BAR (occupies two slots).
    pub is64: bool,
    /// Prefetchable.
    pub prefetchable: bool,
}

/// Why a BAR could not be probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarError {
    /// BAR index above 5, or a 64-bit BAR starting at slot 5.
    BadIndex,
    /// The slot is an I/O BAR.
    IoBar,
    /// The slot implements no BAR (sizes to zero).
    NotImplemented,
    /// The BAR type bits are reserved (`0b01`, or `0b11`).
    BadType,
}

/// Probes and sizes memory BAR `index`, leaving its address as it was.
///
/// Decoding is switched off (16-bit COMMAND write) while all-ones are written
/// so the device never decodes a bogus window, then restored.
pub fn probe_bar(cs: &impl ConfigSpace, index: u8) -> Result<BarInfo, BarError> {
    if index > 5 {
        return Err(BarError::BadIndex);
    }
    let off = cfg::BAR0 + 4 * index as u16;
    let lo = cs.read32(off);
    if lo & 1 != 0 {
        return Err(BarError::IoBar);
    }
    let is64 = match (lo >> 1) & 3 {
        0 => false,
        2 => true,
        _ => return Err(BarError::BadType),
    };
    if is64 && index == 5 {
        return Err(BarError::BadIndex);
    }
    let hi = if is64 { cs.read32(off + 4) } else { 0 };

    let command = cs.read16(cfg::COMMAND);
    cs.write16(cfg::COMMAND, command & !(cfg::CMD_IO | cfg::CMD_MEM));
    cs.write32(off, u32::MAX);
    let size_lo = cs.read32(off);
    let size_hi = if is64 {
        cs.write32(off + 4, u32::MAX);
        cs.read32(off + 4)
    } else {
        u32::MAX
    };
    cs.write32(off, lo);
    if is64 {
        cs.write32(off + 4, hi);
    }
    cs.write16(cfg::COMMAND, command);

    let mask = ((size_hi as u64) << 32) | (size_lo & !0xf) as u64;
    // A slot that implements nothing reads back no writable address bits.
    let implemented = if is64 { mask != 0 } else { size_lo & !0xf != 0 };
    if !implemented {
        return Err(BarError::NotImplemented);
    }
    let size = (!mask).wrapping_add(1);
    Ok(BarInfo {
        addr: ((hi as u64) << 32) | (lo & !0xf) as u64,
        size,
        is64,
        prefetchable: lo & 8 != 0,
    })
}

/// Programs the base address of memory BAR `index` (for firmware that
/// assigns nothing, such as qboot).
pub fn set_bar_addr(cs: &impl ConfigSpace, index: u8, info: &BarInfo, addr: u64) {
    let off = cfg::BAR0 + 4 * index as u16;
    cs.write32(off, addr as u32 & !0xf);
    if info.is64 {
        cs.write32(off + 4, (addr >> 32) as u32);
    }
}

/// Turns on memory decoding and bus mastering (needed before any DMA).
pub fn enable(cs: &impl ConfigSpace) {
    let command = cs.read16(cfg::COMMAND);
    cs.write16(cfg::COMMAND, command | cfg::CMD_MEM | cfg::CMD_BUS_MASTER);
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use core::cell::RefCell;

    /// A type-0 config space whose BARs decode like hardware: the size bits
    /// are hard-wired to zero, writes of all-ones read back the size mask.
    struct FakeCs {
        regs: RefCell<[u32; 64]>,
        /// Size per BAR slot (0 = not implemented); 64-bit BARs put their
        /// size in the low slot and u64 handles the high half.
        sizes: [u64; 6],
        log: RefCell<std::vec::Vec<(u16, u32)>>,
    }

    impl FakeCs {
        fn new() -> Self {
            FakeCs { regs: RefCell::new([0; 64]), sizes: [0; 6], log: RefCell::default() }
        }
        fn is64(&self, slot: usize) -> bool {
            (self.regs.borrow()[4 + slot] >> 1) & 3 == 2
        }
    }

    impl ConfigSpace for FakeCs {
        fn read32(&self, offset: u16) -> u32 {
            self.regs.borrow()[offset as usize / 4]
        }
        fn write32(&self, offset: u16, value: u32) {
            self.log.borrow_mut().push((offset, value));
            let i = offset as usize / 4;
            let mut v = value;
            if (4..10).contains(&i) {
                let slot = i - 4;
                let upper = slot > 0 && self.is64(slot - 1);
                if upper {
                    let size = self.sizes[slot - 1];
                    v &= !(((size - 1) >> 32) as u32);
                } else {
                    let flags = self.regs.borrow()[i] & 0xf;
                    let size = self.sizes[slot];
                    v = if size == 0 { 0 } else { (v & !((size - 1) as u32) & !0xf) | flags };
                }
            }
            self.regs.borrow_mut()[i] = v;
        }
    }

    #[test]
    fn sizes_a_64bit_prefetchable_bar_and_restores_it() {
        // ivshmem-plain BAR2 as SeaBIOS leaves it (notes/qemu-mock-bar.md §2).
        let mut cs = FakeCs::new();
        cs.sizes[2] = 16 << 20;
        cs.regs.get_mut()[0] = 0x1110_1af4;
        cs.regs.get_mut()[1] = 0x0010_0103;
        cs.regs.get_mut()[4 + 2] = 0xfd00_000c;
        cs.regs.get_mut()[4 + 3] = 0;
        let info = probe_bar(&cs, 2).unwrap();
        assert_eq!(
            info,
            BarInfo { addr: 0xfd00_0000, size: 16 << 20, is64: true, prefetchable: true }
        );
        // Address and command restored; decode was off while sizing.
        assert_eq!(cs.read32(0x18), 0xfd00_000c);
        assert_eq!(cs.read16(cfg::COMMAND), 0x0103);
        let log = cs.log.borrow();
        let first_cmd = log.iter().find(|(o, _)| *o == cfg::COMMAND).unwrap();
        assert_eq!(first_cmd.1 & (cfg::CMD_MEM as u32), 0);
        // STATUS (upper half) was never written back as read.
        assert!(log.iter().filter(|(o, _)| *o == cfg::COMMAND).all(|(_, v)| v >> 16 == 0));
    }

    #[test]
    fn sizes_a_large_bar_above_4g() {
        let mut cs = FakeCs::new();
        cs.sizes[0] = 1 << 33; // 8 GiB: size bits reach into the high dword
        cs.regs.get_mut()[4] = 0x0000_000c;
        cs.regs.get_mut()[5] = 0x0000_0004;
        let info = probe_bar(&cs, 0).unwrap();
        assert_eq!(info.size, 1 << 33);
        assert_eq!(info.addr, 0x4_0000_0000);
    }

    #[test]
    fn sizes_a_32bit_bar() {
        let mut cs = FakeCs::new();
        cs.sizes[0] = 0x100;
        cs.regs.get_mut()[4] = 0xfebf_e000;
        let info = probe_bar(&cs, 0).unwrap();
        assert_eq!(
            info,
            BarInfo { addr: 0xfebf_e000, size: 0x100, is64: false, prefetchable: false }
        );
    }

    #[test]
    fn refuses_io_missing_and_bad_bars() {
        let mut cs = FakeCs::new();
        cs.regs.get_mut()[4] = 0xc001; // I/O BAR
        assert_eq!(probe_bar(&cs, 0), Err(BarError::IoBar));
        assert_eq!(probe_bar(&cs, 1), Err(BarError::NotImplemented));
        assert_eq!(probe_bar(&cs, 6), Err(BarError::BadIndex));
        cs.regs.get_mut()[4 + 5] = 0x4; // 64-bit in the last slot
        assert_eq!(probe_bar(&cs, 5), Err(BarError::BadIndex));
        cs.regs.get_mut()[4 + 3] = 0x2; // reserved type 01
        assert_eq!(probe_bar(&cs, 3), Err(BarError::BadType));
    }

    #[test]
    fn assigns_and_enables() {
        // qboot leaves BARs unassigned and decode off (notes §2).
        let mut cs = FakeCs::new();
        cs.sizes[2] = 16 << 20;
        cs.regs.get_mut()[4 + 2] = 0xc;
        let info = probe_bar(&cs, 2).unwrap();
        assert_eq!(info.addr, 0);
        set_bar_addr(&cs, 2, &info, 0xe000_0000);
        enable(&cs);
        assert_eq!(probe_bar(&cs, 2).unwrap().addr, 0xe000_0000);
        let cmd = cs.read16(cfg::COMMAND);
        assert_eq!(cmd & (cfg::CMD_MEM | cfg::CMD_BUS_MASTER), cfg::CMD_MEM | cfg::CMD_BUS_MASTER);
    }

    #[test]
    fn identity_and_id_table() {
        let mut cs = FakeCs::new();
        assert_eq!(identity(&cs), None);
        cs.regs.get_mut()[0] = 0x1592_8086;
        cs.regs.get_mut()[2] = 0x0200_0002;
        let id = identity(&cs).unwrap();
        assert_eq!((id.vendor, id.device, id.revision, id.class), (0x8086, 0x1592, 2, 0x020000));
        assert!(is_e810(id.vendor, id.device));
        assert!(is_gen2_rdma(0x8086, 0x188A));
        assert!(!is_gen2_rdma(0x8086, 0x1572)); // X710: no RDMA engine of this kind
        assert!(!is_e810(0x1af4, 0x1592));
        for id in E810_DEVICE_IDS {
            assert!(is_gen2_rdma(VENDOR_INTEL, id));
        }
    }
}
