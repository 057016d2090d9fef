//! Reading the PVH `hvm_start_info` the loader left in guest memory.

use irdma_boot::memmap::{
    MEMMAP_ENTRY_SIZE, OFF_CMDLINE, OFF_MEMMAP, OFF_MEMMAP_ENTRIES, Region, START_INFO_MAGIC,
};

/// A validated start info block (identity-mapped, below 4 GiB).
pub struct StartInfo {
    addr: u64,
    version: u32,
}

fn read<T: Copy>(addr: u64) -> T {
    // SAFETY: callers only pass addresses inside the start info block or the
    // tables it points to, which the loader placed in identity-mapped RAM
    // below 4 GiB; unaligned reads are allowed.
    unsafe { (addr as *const T).read_unaligned() }
}

impl StartInfo {
    /// Checks the magic at `addr`.
    pub fn new(addr: u64) -> Option<StartInfo> {
        if addr == 0 || addr >= 1 << 32 {
            return None;
        }
        (read::<u32>(addr) == START_INFO_MAGIC)
            .then(|| StartInfo { addr, version: read::<u32>(addr + 4) })
    }

    /// The command line (`-append`), up to `buf.len()` bytes of ASCII.
    pub fn cmdline<'a>(&self, buf: &'a mut [u8]) -> &'a str {
        let p = read::<u64>(self.addr + OFF_CMDLINE as u64);
        let mut n = 0;
        if p != 0 && p < 1 << 32 {
            for (i, slot) in buf.iter_mut().enumerate() {
                let b = read::<u8>(p + i as u64);
                if b == 0 || !b.is_ascii() {
                    break;
                }
                *slot = b;
                n = i + 1;
            }
        }
        buf.get(..n).and_then(|b| core::str::from_utf8(b).ok()).unwrap_or("")
    }

    /// The memory map entries (none before version 1).
    pub fn memmap(&self) -> impl Iterator<Item = Region> + Clone + '_ {
        let (table, count) = if self.version >= 1 {
            (
                read::<u64>(self.addr + OFF_MEMMAP as u64),
                read::<u32>(self.addr + OFF_MEMMAP_ENTRIES as u64).min(128),
            )
        } else {
            (0, 0)
        };
        let count = if table == 0 || table >= 1 << 32 { 0 } else { count };
        (0..count as u64).map(move |i| {
            Region::parse(&read::<[u8; MEMMAP_ENTRY_SIZE]>(table + i * MEMMAP_ENTRY_SIZE as u64))
        })
    }
}
