//! The Kostant app as a library (`kostant_app`): the Slint UI (`ui`), the controllers behind
//! its screens (`controllers`, plain Rust, tested without a UI), the services they and the CLI
//! call (`assistant`: the guarded responder, the model cache, the eval runner) and the
//! encrypted chat history (`history`). The `kostant` binary adds the command line on top; the
//! same library, built as a cdylib, is the Android app (`android_main`) and the iOS app's Rust
//! core.
#![deny(unsafe_code)]

pub mod assistant;
pub mod controllers;
pub mod error;
/// The features and their system prompts live beside the policy whose tone rules they carry.
pub use kostant_safety::features;
pub mod history;
pub mod preferences;
pub mod privacy;
pub mod ui;

pub mod android;
#[cfg(target_os = "ios")]
mod ios;
