//! STags: index allocation, the rotating key byte, and access rights.
//!
//! An STag is `index << 8 | key` (spec control-path §5.1: key \[7:0\], index
//! field \[31:8\]; defs.h: IRDMA_CQPSQ_STAG_KEY, IRDMA_CQPSQ_STAG_IDX). The
//! same value serves as lkey and rkey (verbs.c: irdma_reg_user_mr_type_mem).
//!
//! Linux fills the top bits of the 24-bit index field with a random "driver
//! key" (spec §5.1/§5.2). How the device reduces that field to an MR-table
//! slot is not documented (spec §11 item 3), so this driver puts the plain MR
//! index in \[31:8\] with no driver-key bits — a value Linux itself produces
//! whenever its random driver key is 0 — and relies on the key byte alone to
//! make a stale key differ: every registration of an index (and every
//! re-registration through [`StagTable::rotate`]) advances that index's key
//! byte, so an rkey handed out before differs from the current one for the
//! next 255 registrations of the same index.

use core::error::Error;
use core::fmt::{self, Display, Formatter};
use core::sync::atomic::{AtomicU16, Ordering};
use core::time::Duration;

use super::bitmap::{IdBitmap, IdError};
use crate::hal::Field;
use crate::wr::Access;

/// A full STag value: `index << 8 | key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Stag(pub u32);

/// The key byte of an STag, \[7:0\] (spec control-path §5.1; defs.h: IRDMA_CQPSQ_STAG_KEY).
pub const STAG_KEY: Field = Field::bits(7, 0);
/// The index field of an STag, \[31:8\] (spec control-path §5.1; defs.h: IRDMA_CQPSQ_STAG_IDX).
pub const STAG_INDEX: Field = Field::bits(31, 8);
/// Largest MR index the 24-bit index field can carry.
pub const MAX_STAG_INDEX: u32 = STAG_INDEX.max() as u32;

impl Stag {
    /// The STag for `index` and `key`, or `None` when the index does not fit
    /// in 24 bits.
    pub const fn new(index: u32, key: u8) -> Option<Stag> {
        if index > MAX_STAG_INDEX {
            return None;
        }
        Some(Stag((index << 8) | key as u32))
    }

    /// The MR-table index (\[31:8\]).
    pub const fn index(self) -> u32 {
        STAG_INDEX.get(self.0 as u64) as u32
    }

    /// The key byte (\[7:0\]).
    pub const fn key(self) -> u8 {
        STAG_KEY.get(self.0 as u64) as u8
    }

    /// What CQP WQEs carry as STAG_IDX: the STag shifted right by 8
    /// (verbs.c: irdma_hwreg_mr, irdma_hw_alloc_stag).
    pub const fn index_field(self) -> u32 {
        self.0 >> 8
    }
}

/// Why an STag operation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum StagError {
    /// The index bitmap refused (exhausted, bad capacity, double free, …).
    Id(IdError),
    /// The STag's index is allocated but its key byte is not the current one:
    /// a stale or forged key.
    StaleKey,
}

crate::error::wrapping!(StagError from { IdError => Id });

/// STag allocator for up to `64 × WORDS` MR indexes, index 0 reserved.
///
/// Keeps one key byte per index; it advances on every allocation and on
/// [`rotate`](StagTable::rotate), never repeating within 256 registrations of
/// the same index.
#[derive(Clone, Debug)]
pub struct StagTable<const WORDS: usize> {
    ids: IdBitmap<WORDS>,
    keys: [[u8; 64]; WORDS],
}

impl<const WORDS: usize> StagTable<WORDS> {
    /// A table for MR indexes `1..capacity` (capacity = the committed HMC MR
    /// count, capped at 2^24 and at the table's `64 × WORDS`). Index 0 is reserved as in Linux
    /// (hw.c: irdma_initialize_hw_rsrc). `key_seed` is the key byte the first
    /// registration of every index starts from (plus one); a driver that wants
    /// keys to differ across boots passes an unpredictable value, as Linux
    /// draws a random consumer key (verbs.c: irdma_create_stag).
    pub fn new(capacity: u32, key_seed: u8) -> Result<Self, StagError> {
        let capacity = if capacity > MAX_STAG_INDEX + 1 { MAX_STAG_INDEX + 1 } else { capacity };
        let ids = IdBitmap::new_clamped(capacity, super::bitmap::reserved::MR)?;
        Ok(StagTable { ids, keys: [[key_seed; 64]; WORDS] })
    }

    /// The index bitmap (for counts).
    pub fn ids(&self) -> &IdBitmap<WORDS> {
        &self.ids
    }

    fn key_slot(&mut self, index: u32) -> Option<&mut u8> {
        self.keys.get_mut((index / 64) as usize)?.get_mut((index % 64) as usize)
    }

    fn current_key(&self, index: u32) -> Option<u8> {
        self.keys.get((index / 64) as usize)?.get((index % 64) as usize).copied()
    }

    fn bump(&mut self, index: u32) -> Result<Stag, StagError> {
        let slot = self.key_slot(index).ok_or(StagError::Id(IdError::OutOfRange))?;
        *slot = slot.wrapping_add(1);
        let key = *slot;
        Stag::new(index, key).ok_or(StagError::Id(IdError::OutOfRange))
    }

    /// Allocates a fresh STag: the next free index after the rotating cursor
    /// (main.h: irdma_alloc_rsrc order) with that index's next key byte.
    pub fn alloc(&mut self) -> Result<Stag, StagError> {
        let index = self.ids.alloc_next()?;
        self.bump(index)
    }

    /// Allocates a fresh STag searching from `start` (Linux starts at a random
    /// index, verbs.c: irdma_create_stag).
    pub fn alloc_from(&mut self, start: u32) -> Result<Stag, StagError> {
        let index = self.ids.alloc_from(start)?;
        self.bump(index)
    }

    /// Whether `stag` is allocated with its current key.
    pub fn is_current(&self, stag: Stag) -> bool {
        self.ids.is_in_use(stag.index())
            && stag.index() >= self.ids.reserved()
            && self.current_key(stag.index()) == Some(stag.key())
    }

    /// Re-registration of an allocated STag (fast-register after a local
    /// invalidate, `ib_inc_rkey`-style): same index, next key byte. The old
    /// value stops being current.
    pub fn rotate(&mut self, stag: Stag) -> Result<Stag, StagError> {
        self.check(stag)?;
        self.bump(stag.index())
    }

    /// Frees an STag. Its key byte is kept, so the next registration of the
    /// index gets a different key.
    pub fn free(&mut self, stag: Stag) -> Result<(), StagError> {
        self.check(stag)?;
        self.ids.free(stag.index())?;
        Ok(())
    }

    fn check(&self, stag: Stag) -> Result<(), StagError> {
        let index = stag.index();
        if index >= self.ids.capacity() {
            return Err(StagError::Id(IdError::OutOfRange));
        }
        if index < self.ids.reserved() {
            return Err(StagError::Id(IdError::Reserved));
        }
        if !self.ids.is_in_use(index) {
            return Err(StagError::Id(IdError::NotAllocated));
        }
        if self.current_key(index) != Some(stag.key()) {
            return Err(StagError::StaleKey);
        }
        Ok(())
    }
}

/// The 5-bit ARIGHTS value of ALLOC_STAG / REG_MR / fast-register WQEs
/// (spec control-path §5.3; user.h: IRDMA_ACCESS_FLAGS_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AccessRights(u8);

/// The width of the ARIGHTS field (5 bits, \[52:48\] of word @24 of ALLOC_STAG
/// and REG_MR; spec control-path §5.3), used to check encodings at build time.
const ARIGHTS_WIDTH: Field = Field::bits(4, 0);

impl AccessRights {
    /// LOCALREAD, always set (user.h: IRDMA_ACCESS_FLAGS_LOCALREAD).
    pub const LOCAL_READ: u8 = 0x01;
    /// LOCALWRITE (user.h: IRDMA_ACCESS_FLAGS_LOCALWRITE).
    pub const LOCAL_WRITE: u8 = 0x02;
    /// REMOTEREAD_ONLY (user.h: IRDMA_ACCESS_FLAGS_REMOTEREAD_ONLY).
    pub const REMOTE_READ_ONLY: u8 = 0x04;
    /// REMOTEREAD = REMOTEREAD_ONLY | LOCALREAD, what Linux ORs in
    /// (user.h: IRDMA_ACCESS_FLAGS_REMOTEREAD).
    pub const REMOTE_READ: u8 = 0x05;
    /// REMOTEWRITE_ONLY (user.h: IRDMA_ACCESS_FLAGS_REMOTEWRITE_ONLY).
    pub const REMOTE_WRITE_ONLY: u8 = 0x08;
    /// REMOTEWRITE = REMOTEWRITE_ONLY | LOCALWRITE, what Linux ORs in
    /// (user.h: IRDMA_ACCESS_FLAGS_REMOTEWRITE).
    pub const REMOTE_WRITE: u8 = 0x0a;

    /// The 5-bit field value.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether a remote right is granted: Linux then sets REMACCENABLED \[53\]
    /// (ctrl.c: irdma_sc_mr_reg_non_shared).
    pub const fn remote_enabled(self) -> bool {
        self.0 & (Self::REMOTE_READ_ONLY | Self::REMOTE_WRITE_ONLY) != 0
    }
}

const _: () =
    assert!(ARIGHTS_WIDTH.fits((AccessRights::REMOTE_READ | AccessRights::REMOTE_WRITE) as u64));

/// Why a set of access flags cannot be registered on E810.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AccessError {
    /// `IB_ACCESS_REMOTE_ATOMIC`: GEN_2 has no atomics feature, Linux enables
    /// remote atomics only with IRDMA_FEATURE_ATOMIC_OPS (verbs.c: irdma_hwreg_mr).
    RemoteAtomic,
    /// `IB_ACCESS_MW_BIND`: the BIND_WINDOW right is only encoded on GEN_3
    /// (verbs.c: irdma_get_mr_access), and this driver does not offer windows.
    MwBind,
    /// Remote write without local write, which the verbs core refuses
    /// (include/rdma/ib_verbs.h: ib_check_mr_access).
    RemoteWriteNeedsLocalWrite,
    /// Bits that are no `Access` flag.
    UnknownFlags,
}

/// Encodes verbs access flags into the 5-bit ARIGHTS value as Linux does for
/// GEN_2 (verbs.c: irdma_get_mr_access; spec control-path §5.3): LOCALREAD
/// always, LOCALWRITE for local write, REMOTEREAD (0x05) for remote read,
/// REMOTEWRITE (0x0a) for remote write.
pub const fn mr_access_rights(access: Access) -> Result<AccessRights, AccessError> {
    let known = Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0
        | Access::MW_BIND.0;
    if access.0 & !known != 0 {
        return Err(AccessError::UnknownFlags);
    }
    if access.contains(Access::REMOTE_ATOMIC) {
        return Err(AccessError::RemoteAtomic);
    }
    if access.contains(Access::MW_BIND) {
        return Err(AccessError::MwBind);
    }
    if access.contains(Access::REMOTE_WRITE) && !access.contains(Access::LOCAL_WRITE) {
        return Err(AccessError::RemoteWriteNeedsLocalWrite);
    }
    let mut bits = AccessRights::LOCAL_READ;
    if access.contains(Access::LOCAL_WRITE) {
        bits |= AccessRights::LOCAL_WRITE;
    }
    if access.contains(Access::REMOTE_WRITE) {
        bits |= AccessRights::REMOTE_WRITE;
    }
    if access.contains(Access::REMOTE_READ) {
        bits |= AccessRights::REMOTE_READ;
    }
    Ok(AccessRights(bits))
}

/// Time-derived entropy latched by the first [`default_key_seed`] of this
/// boot (bit 8 set once latched), shared by every later one.
static BOOT_ENTROPY: AtomicU16 = AtomicU16::new(0);

/// The STag key seed a device uses when the caller gives none
/// (`ProbeOptions::stag_key_seed` = `None`): [`key_seed`] of the device's
/// identity and an entropy byte taken from `now` (`Hal::now`) the first time
/// any device of this boot asks, then kept. Keys therefore differ across
/// boots (the clock at the first probe), and devices of one boot whose
/// identities differ in one byte (e.g. MAC or PF id) never share a seed.
pub fn default_key_seed(now: Duration, identity: &[u8]) -> u8 {
    let nanos = now.as_nanos().to_le_bytes();
    let fresh = 0x100 | u16::from(nanos.iter().fold(0u8, |a, b| a ^ b));
    let entropy =
        match BOOT_ENTROPY.compare_exchange(0, fresh, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => fresh,
            Err(latched) => latched,
        };
    key_seed(entropy as u8, identity)
}

/// `entropy` mixed with a device identity (PF id, VSI, MAC bytes, …): each
/// byte is folded in after a one-bit rotation, so for one `entropy` two
/// identities that differ in a single byte always give different seeds.
pub const fn key_seed(entropy: u8, identity: &[u8]) -> u8 {
    let mut h = entropy;
    let mut i = 0;
    while i < identity.len() {
        h = h.rotate_left(1) ^ identity[i];
        i += 1;
    }
    h
}

// `Display` and `core::error::Error` for the errors above, each a short
// lower-case phrase with a wrapped error's own message after a colon (and
// as its `source`); see `crate::error` (issue #29: beside their layer).

impl Display for StagError {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            StagError::Id(e) => write!(f, "STag index: {e}"),
            StagError::StaleKey => f.write_str("stale or forged STag key"),
        }
    }
}

impl Error for StagError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            StagError::Id(e) => Some(e),
            StagError::StaleKey => None,
        }
    }
}

crate::error::phrases!(AccessError {
    AccessError::RemoteAtomic => "remote atomic access is not supported on E810",
    AccessError::MwBind => "memory-window bind access is not supported",
    AccessError::RemoteWriteNeedsLocalWrite => "remote write requires local write",
    AccessError::UnknownFlags => "unknown access flag bits",
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stag_layout() {
        let s = Stag::new(0x12_3456, 0x9a).unwrap();
        assert_eq!(s.0, 0x1234_569a);
        assert_eq!(s.index(), 0x12_3456);
        assert_eq!(s.key(), 0x9a);
        assert_eq!(s.index_field(), 0x12_3456);
        assert_eq!(Stag::new(1 << 24, 0), None);
    }

    #[test]
    fn first_stag_skips_index_zero_and_keys_rotate() {
        let mut t = StagTable::<1>::new(4, 0x10).unwrap();
        let a = t.alloc().unwrap();
        assert_eq!(a.index(), 1);
        assert_eq!(a.key(), 0x11);
        let b = t.rotate(a).unwrap();
        assert_eq!(b.index(), 1);
        assert_ne!(a, b);
        assert!(!t.is_current(a));
        assert!(t.is_current(b));
        // The stale key is refused everywhere.
        assert_eq!(t.rotate(a), Err(StagError::StaleKey));
        assert_eq!(t.free(a), Err(StagError::StaleKey));
        t.free(b).unwrap();
        assert_eq!(t.free(b), Err(StagError::Id(IdError::NotAllocated)));
    }

    #[test]
    fn reregistration_of_freed_index_gets_new_key() {
        // Capacity 2: only index 1 is usable, so it must be re-used.
        let mut t = StagTable::<1>::new(2, 0).unwrap();
        let mut seen = [false; 256];
        let mut prev: Option<Stag> = None;
        for _ in 0..256 {
            let s = t.alloc().unwrap();
            assert_eq!(s.index(), 1);
            assert!(!seen[s.key() as usize], "key repeated within 256 registrations");
            seen[s.key() as usize] = true;
            if let Some(p) = prev {
                assert_ne!(p, s);
            }
            prev = Some(s);
            t.free(s).unwrap();
        }
        assert_eq!(t.alloc().map(|s| s.index()), Ok(1));
        assert_eq!(t.alloc(), Err(StagError::Id(IdError::Exhausted)));
    }

    #[test]
    fn capacity_is_clamped_to_the_table() {
        assert_eq!(StagTable::<1>::new(u32::MAX, 0).unwrap().ids().capacity(), 64);
        assert_eq!(StagTable::<2>::new(100, 0).unwrap().ids().capacity(), 100);
        // Capacity 1: only the reserved index 0, nothing to hand out.
        let mut one = StagTable::<1>::new(1, 0).unwrap();
        assert_eq!(one.alloc(), Err(StagError::Id(IdError::Exhausted)));
    }

    #[test]
    fn reserved_and_out_of_range() {
        let mut t = StagTable::<1>::new(8, 0).unwrap();
        assert_eq!(t.free(Stag(0x01)), Err(StagError::Id(IdError::Reserved)));
        assert_eq!(t.free(Stag(9 << 8)), Err(StagError::Id(IdError::OutOfRange)));
        assert_eq!(t.alloc_from(5).map(|s| s.index()), Ok(5));
    }

    #[test]
    fn access_encoding() {
        assert_eq!(mr_access_rights(Access::LOCAL_READ).map(|a| a.bits()), Ok(0x01));
        assert_eq!(mr_access_rights(Access::LOCAL_WRITE).map(|a| a.bits()), Ok(0x03));
        let rr = mr_access_rights(Access::REMOTE_READ).unwrap();
        assert_eq!(rr.bits(), 0x05);
        assert!(rr.remote_enabled());
        let all =
            mr_access_rights(Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ)
                .unwrap();
        assert_eq!(all.bits(), 0x0f);
        assert!(all.remote_enabled());
        assert!(!mr_access_rights(Access::LOCAL_WRITE).unwrap().remote_enabled());
        assert_eq!(
            mr_access_rights(Access::REMOTE_ATOMIC | Access::LOCAL_WRITE),
            Err(AccessError::RemoteAtomic)
        );
        assert_eq!(mr_access_rights(Access::MW_BIND), Err(AccessError::MwBind));
        assert_eq!(
            mr_access_rights(Access::REMOTE_WRITE),
            Err(AccessError::RemoteWriteNeedsLocalWrite)
        );
        assert_eq!(mr_access_rights(Access(1 << 9)), Err(AccessError::UnknownFlags));
    }

    #[test]
    fn key_seeds_differ_per_identity_and_per_entropy() {
        let a = [0u8, 6, 0, 0x02, 0, 0, 0, 0, 0x0a];
        // Every single-byte change of the identity changes the seed.
        for e in [0u8, 0x5a, 0xff] {
            for i in 0..a.len() {
                for d in 1..=255u8 {
                    let mut b = a;
                    b[i] ^= d;
                    assert_ne!(key_seed(e, &a), key_seed(e, &b), "entropy {e} byte {i} ^ {d}");
                }
            }
        }
        // Every entropy byte gives a different seed for one identity.
        let mut seen = [false; 256];
        for e in 0..=255u8 {
            let s = key_seed(e, &a) as usize;
            assert!(!seen[s]);
            seen[s] = true;
        }
        // The default latches its entropy: later calls at other times agree
        // on it, so identity alone separates devices of one boot.
        let first = default_key_seed(Duration::from_nanos(12_345), &a);
        assert_eq!(default_key_seed(Duration::from_secs(999), &a), first);
        assert_ne!(
            default_key_seed(Duration::from_secs(999), &[1, 6, 0, 2, 0, 0, 0, 0, 0x0a]),
            first
        );
    }
}
