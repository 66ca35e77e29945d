//! OS glue: no-network enforcement (`netguard`) and memory signals now; key storage, thermal
//! and battery signals and the app lifecycle as the privacy and app work lands.
//!
//! Dependency rule: this crate knows nothing of the ML crates (engine, kernels, safety, evals).
#![forbid(unsafe_code)]

mod error;
pub mod keystore;
pub mod memory;
pub mod netguard;

pub use error::PlatformError;
