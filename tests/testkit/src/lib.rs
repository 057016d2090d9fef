//! Host test support: [`FakeHal`] (DMA from the host heap, with accounting
//! and bounce-buffer sharing so a missing `unshare` is caught) and, as the
//! device model grows, the adapter that implements the driver's `Bar` on it.

pub mod fake_hal;
mod host_words;
pub mod identity_hal;
pub mod model_bar;
pub mod rec_bar;

pub use fake_hal::FakeHal;
pub use identity_hal::IdentityHal;
pub use model_bar::{ErrorCounter, FakeHalMemory, ModelBar};
pub use rec_bar::RecBar;
