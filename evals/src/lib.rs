//! The on-device eval suite (issue 5). Placeholder crate so dependency rules hold from day one.
#![forbid(unsafe_code)]
