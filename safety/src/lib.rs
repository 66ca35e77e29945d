//! The always-resident guard (issue 3). Placeholder crate so dependency rules hold from day one.
#![forbid(unsafe_code)]
