//! OS glue: no-network enforcement (`netguard`), memory signals and the default core count
//! (`cpu`) now; key storage, thermal and battery signals and the app lifecycle as the privacy
//! and app work lands.
//!
//! Dependency rule: this crate knows nothing of the ML crates (engine, kernels, safety, evals).
#![forbid(unsafe_code)]

#[cfg(target_os = "android")]
pub mod android_keystore;
pub mod cpu;
pub mod dirs;
mod error;
pub mod keystore;
pub mod memory;
pub mod netguard;
pub mod passphrase;

pub use error::PlatformError;
