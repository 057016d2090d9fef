//! DMA memory as the device sees it.
//!
//! The model touches host memory only through [`Memory`]. An access the
//! memory refuses is a [`Fault`]: the model reports it the way hardware would
//! (an error completion, an asynchronous event, or a dropped write), never by
//! panicking.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// A refused DMA access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Bus address of the access.
    pub addr: u64,
    /// Length of the access in bytes.
    pub len: usize,
    /// True for a device write (to host memory), false for a read.
    pub write: bool,
}

/// The device's view of DMA memory (bus addresses).
pub trait Memory: Send {
    /// Reads `buf.len()` bytes at bus address `pa`.
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), Fault>;
    /// Writes `data` at bus address `pa`.
    fn write(&self, pa: u64, data: &[u8]) -> Result<(), Fault>;
}

/// Reads a little-endian u64.
pub fn read_u64(m: &dyn Memory, pa: u64) -> Result<u64, Fault> {
    let mut b = [0u8; 8];
    m.read(pa, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Writes a little-endian u64.
pub fn write_u64(m: &dyn Memory, pa: u64, v: u64) -> Result<(), Fault> {
    m.write(pa, &v.to_le_bytes())
}

/// A memory for model tests: explicit regions, everything else faults.
///
/// Cloning gives another handle on the same regions, so a test can keep one
/// handle while the device owns the other.
#[derive(Clone, Default)]
pub struct TestMemory {
    regions: Arc<Mutex<BTreeMap<u64, Vec<u8>>>>,
}

impl std::fmt::Debug for TestMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.lock();
        f.debug_list().entries(r.iter().map(|(a, v)| (*a, v.len()))).finish()
    }
}

impl TestMemory {
    /// An empty memory (every access faults).
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Vec<u8>>> {
        self.regions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a zeroed region `[pa, pa + len)`. Regions must not overlap.
    pub fn map(&self, pa: u64, len: usize) {
        self.lock().insert(pa, vec![0; len]);
    }

    /// Removes the region starting at `pa`.
    pub fn unmap(&self, pa: u64) {
        self.lock().remove(&pa);
    }

    fn with<R>(&self, pa: u64, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
        let mut r = self.lock();
        let (&base, v) = r.range_mut(..=pa).next_back()?;
        let start = usize::try_from(pa - base).ok()?;
        let end = start.checked_add(len)?;
        v.get_mut(start..end).map(f)
    }

    /// Test helper: reads a u64 (panics on unmapped memory — tests only).
    pub fn get64(&self, pa: u64) -> u64 {
        read_u64(self, pa).expect("test read of unmapped memory")
    }

    /// Test helper: writes a u64 (panics on unmapped memory — tests only).
    pub fn set64(&self, pa: u64, v: u64) {
        write_u64(self, pa, v).expect("test write of unmapped memory")
    }

    /// Test helper: copies bytes in.
    pub fn fill(&self, pa: u64, data: &[u8]) {
        self.write(pa, data).expect("test write of unmapped memory")
    }

    /// Test helper: copies bytes out.
    pub fn bytes(&self, pa: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read(pa, &mut v).expect("test read of unmapped memory");
        v
    }
}

impl Memory for TestMemory {
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), Fault> {
        let len = buf.len();
        self.with(pa, len, |src| buf.copy_from_slice(src)).ok_or(Fault {
            addr: pa,
            len,
            write: false,
        })
    }

    fn write(&self, pa: u64, data: &[u8]) -> Result<(), Fault> {
        self.with(pa, data.len(), |dst| dst.copy_from_slice(data)).ok_or(Fault {
            addr: pa,
            len: data.len(),
            write: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_outside_regions_fault() {
        let m = TestMemory::new();
        m.map(0x1000, 0x100);
        m.set64(0x1008, 7);
        assert_eq!(m.get64(0x1008), 7);
        assert_eq!(read_u64(&m, 0x10fc), Err(Fault { addr: 0x10fc, len: 8, write: false }));
        assert!(write_u64(&m, 0xff8, 1).is_err());
        assert!(m.write(u64::MAX - 2, &[0; 8]).is_err());
    }
}
