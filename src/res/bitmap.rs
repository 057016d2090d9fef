//! Fixed-capacity id allocator.
//!
//! One bit per id, packed in `WORDS` 64-bit words, so an [`IdBitmap`] of
//! `WORDS` words can manage up to `64 × WORDS` ids without an allocator. The
//! capacity actually used is chosen at run time (it usually comes from a
//! committed HMC count), and the lowest `reserved` ids are never handed out,
//! which is how Linux keeps ids with a fixed meaning out of its bitmaps
//! (hw.c: irdma_initialize_hw_rsrc sets bit 0 of every resource bitmap, bits
//! 0–3 of the QP bitmap and 0–2 of the CQ and PD bitmaps).
//!
//! Two allocation orders are offered:
//! * [`IdBitmap::alloc_lowest`] — the lowest free id;
//! * [`IdBitmap::alloc_next`] — the first free id at or after a rotating
//!   cursor, wrapping once, the cursor then moving past the id handed out.
//!   This is Linux's order (main.h: irdma_alloc_rsrc, with its `next`
//!   argument), and it delays re-use of a just-freed id.
//!
//! Freeing an id that is not allocated, or a reserved id, is a typed error, so
//! a double free never silently corrupts the table.

/// Why an id operation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum IdError {
    /// Every id of the capacity is in use.
    Exhausted,
    /// The id is not below the capacity.
    OutOfRange,
    /// Free of an id that is not allocated (a double free).
    NotAllocated,
    /// The id is reserved and is neither allocated nor freed by callers.
    Reserved,
    /// [`IdBitmap::alloc_specific`] of an id that is already in use.
    AlreadyAllocated,
    /// The requested capacity does not fit in `64 × WORDS` bits, or fewer ids
    /// than reserved.
    BadCapacity,
}

/// Bitmap allocator for up to `64 × WORDS` ids.
#[derive(Clone, Debug)]
pub struct IdBitmap<const WORDS: usize> {
    words: [u64; WORDS],
    capacity: u32,
    reserved: u32,
    cursor: u32,
    in_use: u32,
}

impl<const WORDS: usize> IdBitmap<WORDS> {
    /// The largest capacity this type can hold.
    pub const MAX_CAPACITY: u32 = {
        let bits = WORDS as u128 * 64;
        if bits > u32::MAX as u128 { u32::MAX } else { bits as u32 }
    };

    /// A bitmap managing ids `0..capacity`, of which `0..reserved` are
    /// permanently in use (never handed out, never freed).
    pub const fn new(capacity: u32, reserved: u32) -> Result<Self, IdError> {
        if capacity > Self::MAX_CAPACITY || reserved > capacity {
            return Err(IdError::BadCapacity);
        }
        let mut words = [0u64; WORDS];
        // Mark the reserved prefix.
        let mut id = 0;
        while id < reserved {
            let w = (id / 64) as usize;
            words[w] |= 1u64 << (id % 64);
            id += 1;
        }
        Ok(IdBitmap { words, capacity, reserved, cursor: reserved, in_use: 0 })
    }

    /// Number of ids managed (including reserved ones).
    pub const fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Number of reserved ids (`0..reserved`).
    pub const fn reserved(&self) -> u32 {
        self.reserved
    }

    /// Number of ids currently handed out (reserved ids not counted).
    pub const fn in_use(&self) -> u32 {
        self.in_use
    }

    /// Number of ids that could still be handed out.
    pub const fn available(&self) -> u32 {
        // Invariant: in_use ≤ capacity − reserved.
        self.capacity - self.reserved - self.in_use
    }

    /// Whether `id` is in use (handed out or reserved). Out-of-range ids are
    /// reported as not in use.
    pub fn is_in_use(&self, id: u32) -> bool {
        id < self.capacity && self.bit(id)
    }

    fn bit(&self, id: u32) -> bool {
        match self.words.get((id / 64) as usize) {
            Some(w) => w & (1u64 << (id % 64)) != 0,
            None => false,
        }
    }

    fn set(&mut self, id: u32, on: bool) {
        if let Some(w) = self.words.get_mut((id / 64) as usize) {
            let m = 1u64 << (id % 64);
            if on {
                *w |= m;
            } else {
                *w &= !m;
            }
        }
    }

    /// The first free id in `from..to` (`to ≤ capacity`), scanning a word at a
    /// time.
    fn find_free(&self, from: u32, to: u32) -> Option<u32> {
        let mut id = from;
        while id < to {
            let w = *self.words.get((id / 64) as usize)?;
            // Treat bits below `id` in this word as used.
            let below = (1u64 << (id % 64)).wrapping_sub(1);
            let free = !(w | below);
            if free != 0 {
                let found = (id & !63) + free.trailing_zeros();
                return if found < to { Some(found) } else { None };
            }
            id = (id & !63).checked_add(64)?;
        }
        None
    }

    fn take(&mut self, id: u32) -> u32 {
        self.set(id, true);
        self.in_use += 1;
        id
    }

    /// Allocates the lowest free id.
    pub fn alloc_lowest(&mut self) -> Result<u32, IdError> {
        match self.find_free(self.reserved, self.capacity) {
            Some(id) => Ok(self.take(id)),
            None => Err(IdError::Exhausted),
        }
    }

    /// Allocates the first free id at or after the rotating cursor, wrapping
    /// to the start once; the cursor then moves to the id after it
    /// (main.h: irdma_alloc_rsrc).
    pub fn alloc_next(&mut self) -> Result<u32, IdError> {
        let start = self.cursor;
        let id = self.alloc_from(start)?;
        Ok(id)
    }

    /// Allocates the first free id at or after `start` (taken modulo the
    /// capacity), wrapping to the start once, and moves the cursor past it.
    /// (verbs.c: irdma_create_stag starts the search at a random index.)
    pub fn alloc_from(&mut self, start: u32) -> Result<u32, IdError> {
        if self.capacity == 0 {
            return Err(IdError::Exhausted);
        }
        let start = start % self.capacity;
        let found = match self.find_free(start, self.capacity) {
            Some(id) => Some(id),
            None => self.find_free(self.reserved, start),
        };
        let id = found.ok_or(IdError::Exhausted)?;
        self.take(id);
        let next = id + 1;
        self.cursor = if next >= self.capacity { self.reserved } else { next };
        Ok(id)
    }

    /// Allocates exactly `id`.
    pub fn alloc_specific(&mut self, id: u32) -> Result<u32, IdError> {
        if id >= self.capacity {
            return Err(IdError::OutOfRange);
        }
        if id < self.reserved {
            return Err(IdError::Reserved);
        }
        if self.bit(id) {
            return Err(IdError::AlreadyAllocated);
        }
        Ok(self.take(id))
    }

    /// Returns `id` to the pool. Out of line: called at ~10 control-path
    /// sites (code size).
    #[inline(never)]
    pub fn free(&mut self, id: u32) -> Result<(), IdError> {
        if id >= self.capacity {
            return Err(IdError::OutOfRange);
        }
        if id < self.reserved {
            return Err(IdError::Reserved);
        }
        if !self.bit(id) {
            return Err(IdError::NotAllocated);
        }
        self.set(id, false);
        self.in_use -= 1;
        Ok(())
    }
}

impl<const WORDS: usize> IdBitmap<WORDS> {
    /// Like [`IdBitmap::new`], but a capacity beyond what the type holds is
    /// cut to [`IdBitmap::MAX_CAPACITY`]: a committed HMC count larger than the
    /// driver's table simply leaves the extra hardware entries unused.
    pub const fn new_clamped(capacity: u32, reserved: u32) -> Result<Self, IdError> {
        let cap = if capacity > Self::MAX_CAPACITY { Self::MAX_CAPACITY } else { capacity };
        Self::new(cap, reserved)
    }

    /// QP ids `0..committed` with 0–3 reserved ([`reserved::QP`]). This and
    /// the other per-resource constructors clamp like [`IdBitmap::new_clamped`].
    pub const fn qp_ids(committed: u32) -> Result<Self, IdError> {
        Self::new_clamped(committed, reserved::QP)
    }

    /// CQ ids `0..committed` with 0–2 reserved ([`reserved::CQ`]; CQ 0 is the CCQ).
    pub const fn cq_ids(committed: u32) -> Result<Self, IdError> {
        Self::new_clamped(committed, reserved::CQ)
    }

    /// PD ids `0..capacity` (at most [`MAX_PDS`]) with 0–2 reserved ([`reserved::PD`]).
    pub const fn pd_ids(capacity: u32) -> Result<Self, IdError> {
        let cap = if capacity > MAX_PDS { MAX_PDS } else { capacity };
        Self::new_clamped(cap, reserved::PD)
    }

    /// ARP-cache indexes `0..committed` (committed HMC ARP count) with 0 reserved.
    pub const fn arp_ids(committed: u32) -> Result<Self, IdError> {
        Self::new_clamped(committed, reserved::ARP)
    }

    /// Address-handle ids `0..committed` (committed HMC FSIAV count) with 0 reserved.
    pub const fn ah_ids(committed: u32) -> Result<Self, IdError> {
        Self::new_clamped(committed, reserved::AH)
    }

    /// Work-scheduler node ids `0..0x3FF` with the root (0) reserved.
    pub const fn ws_node_ids() -> Result<Self, IdError> {
        Self::new_clamped(MAX_WS_NODES, reserved::WS_NODE)
    }
}

/// Maximum SD count of an HMC function (hmc.h: IRDMA_HMC_MAX_SD_COUNT).
pub const MAX_SD_COUNT: u32 = 8192;

/// A set of SD indexes (which SDs are valid/backed): an [`IdBitmap`] used as a
/// set through [`IdBitmap::alloc_specific`], [`IdBitmap::is_in_use`] and
/// [`IdBitmap::free`]; 1 KiB.
pub type SdSet = IdBitmap<{ MAX_SD_COUNT as usize / 64 }>;

impl SdSet {
    /// An empty set for every SD index a function can have.
    pub const fn all_sds() -> Self {
        match Self::new(MAX_SD_COUNT, 0) {
            Ok(s) => s,
            // Unreachable: MAX_SD_COUNT fits the type exactly.
            Err(_) => Self {
                words: [0; MAX_SD_COUNT as usize / 64],
                capacity: 0,
                reserved: 0,
                cursor: 0,
                in_use: 0,
            },
        }
    }
}

/// Reserved-id prefixes Linux uses for each GEN_2 resource bitmap.
pub mod reserved {
    /// QP ids 0–3: 0 is never used, 1 is the ILQ / GSI QP, 2 the IEQ, 3 the
    /// remote-endpoint tracking QP (hw.c: irdma_initialize_hw_rsrc; spec
    /// control-path §7.3 "QP ids").
    pub const QP: u32 = 4;
    /// CQ ids 0–2: 0 is the CCQ, 1 and 2 belong to the ILQ/IEQ
    /// (hw.c: irdma_initialize_hw_rsrc; spec control-path §2.7).
    pub const CQ: u32 = 3;
    /// PD ids 0–2 (hw.c: irdma_initialize_hw_rsrc; spec control-path §5.4).
    pub const PD: u32 = 3;
    /// MR (STag) index 0 (hw.c: irdma_initialize_hw_rsrc; spec control-path §5.2).
    pub const MR: u32 = 1;
    /// ARP-cache index 0 (hw.c: irdma_initialize_hw_rsrc; spec control-path §9.2 step 14).
    pub const ARP: u32 = 1;
    /// Address-handle index 0 (hw.c: irdma_initialize_hw_rsrc).
    pub const AH: u32 = 1;
    /// Work-scheduler node id 0 is the root (hw.c: irdma_initialize_hw_rsrc;
    /// spec control-path §4.3.20).
    pub const WS_NODE: u32 = 1;
}

/// Largest PD id count on GEN_2 (user.h: IRDMA_MAX_PDS; spec control-path §5.4).
pub const MAX_PDS: u32 = 262_144;
/// Work-scheduler node ids: a bitmap of 0x3FF entries
/// (type.h: IRDMA_MAX_WS_NODES; spec control-path §4.3.20).
pub const MAX_WS_NODES: u32 = 0x3FF;

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

crate::error::phrases!(IdError {
    IdError::Exhausted => "every id is in use",
    IdError::OutOfRange => "id beyond the table's capacity",
    IdError::NotAllocated => "free of an id that is not allocated",
    IdError::Reserved => "the id is reserved",
    IdError::AlreadyAllocated => "the id is already in use",
    IdError::BadCapacity => "id table capacity unusable",
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_skips_reserved_and_reuses() {
        let mut b = IdBitmap::<2>::new(100, 3).unwrap();
        assert_eq!(b.alloc_lowest(), Ok(3));
        assert_eq!(b.alloc_lowest(), Ok(4));
        assert_eq!(b.alloc_lowest(), Ok(5));
        b.free(4).unwrap();
        assert_eq!(b.alloc_lowest(), Ok(4));
        assert_eq!(b.in_use(), 3);
        assert_eq!(b.available(), 100 - 3 - 3);
    }

    #[test]
    fn next_rotates_and_wraps() {
        let mut b = IdBitmap::<1>::new(8, 1).unwrap();
        assert_eq!(b.alloc_next(), Ok(1));
        assert_eq!(b.alloc_next(), Ok(2));
        b.free(1).unwrap();
        // The cursor is past 2: a freed id is not reused immediately.
        assert_eq!(b.alloc_next(), Ok(3));
        for want in 4..8 {
            assert_eq!(b.alloc_next(), Ok(want));
        }
        // Wraps to the freed id 1, never to reserved 0.
        assert_eq!(b.alloc_next(), Ok(1));
        assert_eq!(b.alloc_next(), Err(IdError::Exhausted));
    }

    #[test]
    fn alloc_from_wraps_and_respects_start() {
        let mut b = IdBitmap::<2>::new(70, 1).unwrap();
        assert_eq!(b.alloc_from(69), Ok(69));
        // 69 taken, wrap to the lowest non-reserved id.
        assert_eq!(b.alloc_from(69), Ok(1));
        // Start is taken modulo the capacity.
        assert_eq!(b.alloc_from(70 + 64), Ok(64));
        assert_eq!(b.alloc_from(0), Ok(2));
    }

    #[test]
    fn double_free_and_reserved_are_typed_errors() {
        let mut b = IdBitmap::<1>::new(64, 2).unwrap();
        let id = b.alloc_lowest().unwrap();
        assert_eq!(b.free(id), Ok(()));
        assert_eq!(b.free(id), Err(IdError::NotAllocated));
        assert_eq!(b.free(0), Err(IdError::Reserved));
        assert_eq!(b.free(64), Err(IdError::OutOfRange));
        assert_eq!(b.alloc_specific(1), Err(IdError::Reserved));
        assert_eq!(b.alloc_specific(10), Ok(10));
        assert_eq!(b.alloc_specific(10), Err(IdError::AlreadyAllocated));
        assert!(b.is_in_use(0) && b.is_in_use(10) && !b.is_in_use(11));
    }

    #[test]
    fn exhaustion_at_non_word_capacity() {
        let mut b = IdBitmap::<2>::new(65, 0).unwrap();
        for want in 0..65 {
            assert_eq!(b.alloc_lowest(), Ok(want));
        }
        assert_eq!(b.alloc_lowest(), Err(IdError::Exhausted));
        assert_eq!(b.alloc_next(), Err(IdError::Exhausted));
        assert_eq!(b.available(), 0);
    }

    #[test]
    fn per_resource_constructors_reserve_linux_ids() {
        let mut qp = IdBitmap::<1>::qp_ids(64).unwrap();
        assert_eq!(qp.alloc_next(), Ok(4));
        let mut cq = IdBitmap::<1>::cq_ids(64).unwrap();
        assert_eq!(cq.alloc_lowest(), Ok(3));
        assert!(cq.is_in_use(0));
        let pd = IdBitmap::<{ MAX_PDS as usize / 64 }>::pd_ids(u32::MAX).unwrap();
        assert_eq!(pd.capacity(), MAX_PDS);
        assert_eq!(pd.reserved(), 3);
        assert_eq!(IdBitmap::<1>::arp_ids(8).unwrap().reserved(), 1);
        assert_eq!(IdBitmap::<1>::ah_ids(8).unwrap().reserved(), 1);
        let ws = IdBitmap::<16>::ws_node_ids().unwrap();
        assert_eq!((ws.capacity(), ws.reserved()), (0x3FF, 1));
        // Clamped to the table, not refused.
        let qp_big = IdBitmap::<1>::qp_ids(16384).unwrap();
        assert_eq!(qp_big.capacity(), 64);
        assert_eq!(IdBitmap::<1>::new(65, 0).err(), Some(IdError::BadCapacity));
        let mut sds = SdSet::all_sds();
        assert_eq!(sds.capacity(), MAX_SD_COUNT);
        assert_eq!(sds.alloc_specific(8191), Ok(8191));
        assert!(sds.is_in_use(8191) && !sds.is_in_use(0));
    }

    #[test]
    fn bad_capacity() {
        assert!(IdBitmap::<1>::new(65, 0).is_err());
        assert!(IdBitmap::<1>::new(4, 5).is_err());
        let mut empty = IdBitmap::<1>::new(0, 0).unwrap();
        assert_eq!(empty.alloc_next(), Err(IdError::Exhausted));
        assert_eq!(empty.alloc_from(7), Err(IdError::Exhausted));
        let mut all_reserved = IdBitmap::<1>::new(4, 4).unwrap();
        assert_eq!(all_reserved.alloc_lowest(), Err(IdError::Exhausted));
        assert_eq!(all_reserved.alloc_next(), Err(IdError::Exhausted));
    }
}
