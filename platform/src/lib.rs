//! OS glue: no-network enforcement, key storage, sensors (issue 4). Knows nothing of the ML crates.
#![forbid(unsafe_code)]
