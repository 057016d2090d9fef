//! The PVH boot protocol's start-of-day information (`hvm_start_info`,
//! Xen's public `arch-x86/hvm/start_info.h`), as QEMU's PVH loader fills it.

/// `hvm_start_info.magic`.
pub const START_INFO_MAGIC: u32 = 0x336e_c578;
/// Offset of `cmdline_paddr` (u64).
pub const OFF_CMDLINE: usize = 24;
/// Offset of `memmap_paddr` (u64, version ≥ 1).
pub const OFF_MEMMAP: usize = 40;
/// Offset of `memmap_entries` (u32, version ≥ 1).
pub const OFF_MEMMAP_ENTRIES: usize = 48;
/// Size of one `hvm_memmap_table_entry`: addr u64, size u64, type u32, pad u32.
pub const MEMMAP_ENTRY_SIZE: usize = 24;
/// Entry type of usable RAM (E820 type 1).
pub const TYPE_RAM: u32 = 1;

/// One memory map entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// First byte.
    pub addr: u64,
    /// Length in bytes.
    pub size: u64,
    /// E820 type.
    pub kind: u32,
}

impl Region {
    /// Parses one entry from its 24 bytes.
    pub fn parse(b: &[u8; MEMMAP_ENTRY_SIZE]) -> Region {
        let u64_at = |o: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(w)
        };
        let mut k = [0u8; 4];
        k.copy_from_slice(&b[16..20]);
        Region { addr: u64_at(0), size: u64_at(8), kind: u32::from_le_bytes(k) }
    }
}

/// Whether `base..base + len` lies wholly in one RAM entry, and in no
/// entry of another type (overlapping reserved ranges win).
pub fn ram_covers(regions: impl Iterator<Item = Region> + Clone, base: u64, len: u64) -> bool {
    let Some(end) = base.checked_add(len) else { return false };
    let overlaps = |r: &Region| r.addr < end && base < r.addr.saturating_add(r.size);
    let in_ram = regions
        .clone()
        .any(|r| r.kind == TYPE_RAM && r.addr <= base && r.addr.saturating_add(r.size) >= end);
    in_ram && !regions.filter(|r| r.kind != TYPE_RAM).any(|r| overlaps(&r))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(addr: u64, size: u64, kind: u32) -> Region {
        Region { addr, size, kind }
    }

    #[test]
    fn parses_an_entry() {
        let mut b = [0u8; MEMMAP_ENTRY_SIZE];
        b[0..8].copy_from_slice(&0x10_0000u64.to_le_bytes());
        b[8..16].copy_from_slice(&0xfee_0000u64.to_le_bytes());
        b[16..20].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(Region::parse(&b), r(0x10_0000, 0xfee_0000, 1));
    }

    #[test]
    fn coverage() {
        // Shape of QEMU q35 -m 256M: low RAM, reserved hole, RAM to the top.
        let map = [r(0, 0x9_fc00, 1), r(0xf_0000, 0x1_0000, 2), r(0x10_0000, 0xfee_0000, 1)];
        let it = || map.iter().copied();
        assert!(ram_covers(it(), 64 << 20, 128 << 20));
        assert!(!ram_covers(it(), 0xf_0000, 0x1000), "reserved");
        assert!(!ram_covers(it(), 0x9_f000, 0x2000), "straddles the end of low RAM");
        assert!(!ram_covers(it(), 0xfe0_0000, 0x20_0000), "past the top");
        assert!(!ram_covers(it(), u64::MAX, 2), "overflow");
        let with_hole = [r(0, 1 << 30, 1), r(80 << 20, 4096, 2)];
        assert!(!ram_covers(with_hole.iter().copied(), 64 << 20, 128 << 20));
    }
}
