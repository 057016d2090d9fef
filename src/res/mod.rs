//! **Low-level API** (a verbs user needs only [`crate::prelude`], which
//! re-exports [`Profile`]).
//!
//! Control-path resource bookkeeping: pure, allocation-free logic the CQP
//! layer drives. Nothing here touches hardware.
//!
//! * [`bitmap`] — fixed-capacity id allocator (PDs, QPs, CQs, ARP entries,
//!   STag indexes, WS nodes) with Linux's reserved ids;
//! * [`stag`] — STag values, the rotating key byte, access-right encoding;
//! * [`pble`] — the PBLE pool (level 1/2 PBLs) and its SD/PD backing plan;
//! * [`hmc`] — HMC object counts (Linux's GEN_2 sizing) and the committed
//!   layout: SDs to back, footprint;
//! * [`profile`] — the caller's resource profile sizing starts from.

pub mod bitmap;
pub mod hmc;
pub mod pble;
pub mod profile;
pub mod stag;

pub use bitmap::{IdBitmap, IdError};
pub use hmc::{FpmCaps, HmcCounts, HmcError, HmcLayout, HmcObj, ObjCaps, ObjCommit, size_hmc};
pub use pble::{PbleAlloc, PbleError, PbleLayout, PblePolicy, PblePool, PbleRun};
pub use profile::Profile;
pub use stag::{
    AccessError, AccessRights, Stag, StagError, StagTable, default_key_seed, key_seed,
    mr_access_rights,
};

#[cfg(test)]
mod proptests;
