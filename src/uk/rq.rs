//! The receive queue: fixed-stride RQ WQEs, polarity, `rq_wrid_array`
//! (spec data-path §2; uk.c: irdma_uk_post_receive, irdma_qp_get_next_recv_wqe).
//!
//! There is no RQ doorbell: the device finds RQ WQEs by their valid bits.

use core::marker::PhantomData;
use core::ptr::NonNull;
use irdma_hal::barrier::dma_wmb;

use irdma_hal::wqe::{QUANTUM_QWORDS, frag, rq_hdr};

use super::mem::QueueMem;
use super::sizing::MAX_FRAGS;
use crate::wr::Sge;

/// Why a receive was not posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RqError {
    /// More SGEs than the QP allows (vendor `-EINVAL`).
    TooManySges,
    /// The RQ is full (one slot always stays empty; vendor `-ENOMEM`).
    Full,
    /// An SGE length does not fit the 31-bit FRAG_LEN field (spec
    /// data-path §1.4); the vendor truncates it.
    InvalidField,
}

/// Why an RQ could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RqConfigError {
    /// Size not a power of two in 2..=32768 WQEs, or shift above 3.
    BadSize,
    /// Memory smaller than `size << shift` quanta.
    MemoryTooSmall,
    /// Fewer wr_id entries than WQEs.
    TrackingTooSmall,
    /// `max_frags` above 13 or above what the WQE stride holds.
    BadLimits,
}

/// Where a receive WQE went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostedRecv {
    /// WQE index (in WQEs).
    pub wqe_idx: u32,
    /// First quantum of the WQE.
    pub quantum: u32,
    /// Valid bit it carries.
    pub valid: bool,
}

/// The receive queue. Head/tail are free-running WQE counters.
pub struct Rq<'a> {
    mem: QueueMem<'a>,
    /// The wr_id array (`mask + 1` entries at least), through a raw pointer
    /// so a split pair ([`Rq::split_consumer`]) can share it.
    wrid: NonNull<u64>,
    _wrid: PhantomData<&'a mut [u64]>,
    log2: u8,
    mask: u32,
    shift: u8,
    head: u32,
    tail: u32,
    max_frags: u32,
}

impl<'a> Rq<'a> {
    /// An RQ of `size` WQEs of `1 << shift` quanta each.
    pub fn new(
        mem: QueueMem<'a>,
        wrid: &'a mut [u64],
        size: u32,
        shift: u8,
        max_frags: u32,
    ) -> Result<Self, RqConfigError> {
        if !size.is_power_of_two() || !(2..=32768).contains(&size) || shift > 3 {
            return Err(RqConfigError::BadSize);
        }
        if mem.qwords() < (size as usize) << shift << 2 {
            return Err(RqConfigError::MemoryTooSmall);
        }
        if wrid.len() < size as usize {
            return Err(RqConfigError::TrackingTooSmall);
        }
        // A WQE of 2^shift quanta holds 2^(shift+1) - 1 fragments (spec §2.1).
        if max_frags > MAX_FRAGS || max_frags > (2u32 << shift) - 1 {
            return Err(RqConfigError::BadLimits);
        }
        Ok(Rq {
            mem,
            wrid: NonNull::from(wrid).cast(),
            _wrid: PhantomData,
            log2: size.trailing_zeros() as u8,
            mask: size - 1,
            shift,
            head: 0,
            tail: 0,
            max_frags,
        })
    }

    /// Ring size in WQEs.
    pub fn size(&self) -> u32 {
        self.mask + 1
    }

    /// Quanta per WQE (`rq_wqe_size_multiplier`).
    pub fn multiplier(&self) -> u32 {
        1 << self.shift
    }

    /// Ring index of the head.
    pub fn head(&self) -> u32 {
        self.head & self.mask
    }

    /// Ring index of the tail.
    pub fn tail(&self) -> u32 {
        self.tail & self.mask
    }

    /// The vendor's `rwqe_polarity` (uk.c: flipped when a WQE lands in slot
    /// 0): the valid bit of the last WQE written, 0 before any post.
    pub fn rwqe_polarity(&self) -> bool {
        (self.head.wrapping_sub(1) >> self.log2) & 1 == 0
    }

    /// Outstanding receives.
    pub fn used(&self) -> u32 {
        self.head.wrapping_sub(self.tail)
    }

    /// The ring memory.
    pub fn mem(&self) -> &QueueMem<'a> {
        &self.mem
    }

    /// The wr_id recorded at WQE index `idx`.
    pub fn wr_id(&self, idx: u32) -> Option<u64> {
        // SAFETY: in bounds (`wrid_ptr`); not written meanwhile (writes need
        // `&mut self`; a split pair's producer never writes an outstanding
        // entry, the only ones its consumer reads: `Rq::split_consumer`).
        Some(unsafe { self.wrid_ptr(idx & self.mask).read() })
    }

    /// Pointer to wr_id entry `idx` (`idx <= mask`).
    #[inline(always)]
    fn wrid_ptr(&self, idx: u32) -> *mut u64 {
        debug_assert!(idx <= self.mask);
        // SAFETY: `idx <= mask < wrid.len()` (checked by `Rq::new`).
        unsafe { self.wrid.as_ptr().add(idx as usize) }
    }

    /// Posts one receive (spec data-path §2.1–2.2): SGE 0 in slot 0, the rest
    /// from byte 32 at 16-byte steps, a counted null pad when the count is
    /// even, qword +16 = 0, then `dma_wmb` and the header.
    #[inline]
    pub fn post(&mut self, wr_id: u64, sges: &[Sge]) -> Result<PostedRecv, RqError> {
        if sges.len() > self.max_frags as usize {
            return Err(RqError::TooManySges);
        }
        if sges.iter().any(|s| !frag::LEN.fits(s.length.into())) {
            return Err(RqError::InvalidField);
        }
        if self.used() >= self.mask {
            return Err(RqError::Full);
        }
        let pos = self.head;
        let idx = pos & self.mask;
        let valid = (pos >> self.log2) & 1 == 0;
        // SAFETY: `idx <= mask`; the slot is free (`used() < mask` above: a
        // consumer half, if any, retired it and published that).
        unsafe { self.wrid_ptr(idx).write(wr_id) };
        let base = ((idx as usize) << self.shift) * QUANTUM_QWORDS;
        let len = QUANTUM_QWORDS << self.shift;
        let put = |i: usize, v: u64| {
            if i < len {
                self.mem.write(base + i, v);
            }
        };
        let vbit = frag::VALID.prep(valid as u64);
        let fq = |k: usize| if k == 0 { 0 } else { 2 * k + 2 };
        if sges.is_empty() {
            put(0, 0);
            put(1, vbit);
        }
        for (k, s) in sges.iter().enumerate() {
            put(fq(k), s.addr);
            put(fq(k) + 1, frag::STAG.prep(s.lkey.into()) | frag::LEN.prep(s.length.into()) | vbit);
        }
        let n = sges.len();
        let mut add = n.saturating_sub(1) as u64;
        if n != 0 && n.is_multiple_of(2) {
            put(fq(n), 0);
            put(fq(n) + 1, vbit);
            add += 1;
        }
        put(2, 0);
        dma_wmb();
        put(3, rq_hdr::ADDFRAGCNT.prep(add) | rq_hdr::VALID.prep(valid as u64));
        self.head = pos.wrapping_add(1);
        Ok(PostedRecv { wqe_idx: idx, quantum: idx << self.shift, valid })
    }

    /// Retires through WQE `idx` (success completion) and returns its wr_id;
    /// `None` if `idx` is not outstanding.
    pub fn complete_at(&mut self, idx: u32) -> Option<u64> {
        // An index past the ring is device garbage, not an alias of a slot
        // (vendor-diff, issue #30; see `Sq::complete_at`).
        if idx > self.mask {
            return None;
        }
        let d = idx.wrapping_sub(self.tail) & self.mask;
        if d >= self.used() {
            return None;
        }
        let w = self.wr_id(idx)?;
        self.tail = self.tail.wrapping_add(d + 1);
        Some(w)
    }

    /// Retires the oldest outstanding receive (flush / error replay).
    pub fn retire_oldest(&mut self) -> Option<u64> {
        if self.used() == 0 {
            return None;
        }
        let w = self.wr_id(self.tail)?;
        self.tail = self.tail.wrapping_add(1);
        Some(w)
    }

    /// Marks everything posted as consumed (test/conformance set-up).
    pub fn consume_all(&mut self) {
        self.tail = self.head;
    }

    split_positions!();

    /// The consumer half of a split pair, as [`super::Sq::split_consumer`].
    ///
    /// # Safety
    ///
    /// As [`super::Sq::split_consumer`]: the producer half only posts, the
    /// consumer half only retires (`complete_at`, `retire_oldest`, `wr_id`
    /// of outstanding entries), and each learns the other's position only
    /// from a value published with release after its accesses, read with
    /// acquire.
    pub unsafe fn split_consumer(&self) -> Rq<'a> {
        Rq {
            // SAFETY: the alias lives no longer than `'a`; ring accesses are
            // atomic.
            mem: unsafe { self.mem.alias() },
            wrid: self.wrid,
            _wrid: PhantomData,
            log2: self.log2,
            mask: self.mask,
            shift: self.shift,
            head: self.head,
            tail: self.tail,
            max_frags: self.max_frags,
        }
    }
}

// SAFETY: `Rq` owns its wr_id array like the `&'a mut [u64]` it was made
// from; the ring is atomic-access memory.
unsafe impl Send for Rq<'_> {}
// SAFETY: through `&Rq` the wr_id array is only read, never written
// meanwhile (see `Rq::wr_id`).
unsafe impl Sync for Rq<'_> {}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

crate::error::phrases!(RqError {
    RqError::TooManySges => "more SGEs than the QP allows",
    RqError::Full => "receive queue full",
    RqError::InvalidField => "an SGE length does not fit the 31-bit fragment length",
});

crate::error::phrases!(RqConfigError {
    RqConfigError::BadSize => "RQ size not a power of two in 2..=32768, or shift above 3",
    RqConfigError::MemoryTooSmall => "RQ memory smaller than the ring",
    RqConfigError::TrackingTooSmall => "RQ wr_id slice smaller than the ring",
    RqConfigError::BadLimits => "RQ max_frags above 13 or above the WQE stride",
});

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use core::ptr::NonNull;
    use std::vec;

    #[test]
    fn post_recv_layout_full_and_wrap() {
        let mut buf = vec![0u64; 8 * 2 * 4];
        let mut ids = vec![0u64; 8];
        let base = NonNull::new(buf.as_mut_ptr()).unwrap();
        // SAFETY: `buf` outlives `rq` and is only accessed through it.
        let mem = unsafe { QueueMem::from_raw(base, buf.len()) };
        let mut rq = Rq::new(mem, &mut ids, 8, 1, 3).unwrap();
        let s = [
            Sge { addr: 0x1000, length: 512, lkey: 0xcafe00 },
            Sge { addr: 0x2000, length: 64, lkey: 0xcafe01 },
        ];
        let p = rq.post(0x11, &s).unwrap();
        assert_eq!(p, PostedRecv { wqe_idx: 0, quantum: 0, valid: true });
        let m = rq.mem();
        assert_eq!(m.read(0), 0x1000);
        assert_eq!(m.read(1), 0x8000_0200_00ca_fe00);
        assert_eq!(m.read(4), 0x2000);
        assert_eq!(m.read(7), 0x8000_0000_0000_0000, "pad fragment");
        assert_eq!(m.read(3), 0x8000_0000_0000_0000 | (2 << 38));
        assert_eq!(rq.post(1, &[s[0]; 4]), Err(RqError::TooManySges));
        for i in 1..7 {
            rq.post(i, &s[..1]).unwrap();
        }
        assert_eq!(rq.post(9, &s[..1]), Err(RqError::Full));
        assert_eq!(rq.complete_at(2), Some(2));
        assert_eq!(rq.used(), 4);
        // Three more wrap to index 0 with valid bit 0.
        rq.post(20, &s[..1]).unwrap();
        let p = rq.post(21, &s[..1]).unwrap();
        assert_eq!(p, PostedRecv { wqe_idx: 0, quantum: 0, valid: false });
        assert_eq!(rq.retire_oldest(), Some(3));
    }
}
