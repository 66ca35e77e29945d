//! Asset manifests.
#![forbid(unsafe_code)]
