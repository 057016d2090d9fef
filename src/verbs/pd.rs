//! Protection domains (`ib_pd`): [`Pd`], a software id (allocated by
//! `Device::alloc_pd` in the verbs' `mod.rs`).

use irdma_hal::{Bar, Hal};

use crate::device::Device;

/// A protection domain (`ib_pd`). GEN_2 PDs are software ids only (spec
/// control-path §5.4; irdma_kcompat.c: irdma_alloc_pd): ids 0–2 reserved.
///
/// # Example
///
/// ```
/// # use irdma::prelude::*;
/// # use irdma_testkit::{FakeHal, ModelBar};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let bar = ModelBar::standalone(mock_bar::Config::default());
/// # let lan = LanInfo::single_tc(0, 6, [2, 0, 0, 0, 0, 0x0a], 1500);
/// # let dev: Device<FakeHal, ModelBar> = Device::probe(bar, lan, Profile::SMALL)?;
/// let pd = dev.alloc_pd()?;
/// assert!(pd.id() > 2);
/// drop(pd); // frees the id
/// # Ok(())
/// # }
/// ```
pub struct Pd<'d, H: Hal, B: Bar + Clone> {
    pub(super) dev: &'d Device<H, B>,
    pub(super) id: u32,
}

impl<'d, H: Hal, B: Bar + Clone> Pd<'d, H, B> {
    /// The PD id (18 bits).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The device.
    pub fn device(&self) -> &'d Device<H, B> {
        self.dev
    }
}

impl<H: Hal, B: Bar + Clone> Drop for Pd<'_, H, B> {
    fn drop(&mut self) {
        if let Some(ids) = self.dev.res.lock().ids.as_mut() {
            if ids.pd_refs.get(self.id as usize).is_some_and(|r| *r > 0) {
                // QPs or MRs still use the id: freed with the last of them.
                if let Some(w) = ids.pd_orphan.get_mut(self.id as usize / 64) {
                    *w |= 1 << (self.id % 64);
                }
            } else {
                let _ = ids.pds.free(self.id);
            }
        }
    }
}
