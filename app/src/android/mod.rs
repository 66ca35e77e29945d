//! The Android app. The platform-neutral parts (input mapping, framebuffer copy, the bundled
//! files' install) compile everywhere so that the desktop tests cover them; the activity glue
//! and the Slint platform built on it only for Android.
#![cfg_attr(not(target_os = "android"), allow(dead_code))]

pub mod bundle;
pub mod events;
pub mod framebuffer;

#[cfg(target_os = "android")]
mod activity;
#[cfg(target_os = "android")]
mod clipboard;
#[cfg(target_os = "android")]
mod log;
#[cfg(target_os = "android")]
mod platform;
