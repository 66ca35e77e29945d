//! OS glue: memory signals now; no-network enforcement, key storage, thermal and battery
//! signals and the app lifecycle as the privacy and app work lands.
//!
//! Dependency rule: this crate knows nothing of the ML crates (engine, kernels, safety, evals).
#![forbid(unsafe_code)]

pub mod memory;
