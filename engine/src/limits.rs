//! Sizes several parts of the engine agree on, kept apart so that none of them has to import
//! another for a number (the kv cache sizes its rings by the prefill chunk the model runs).

/// Most tokens one forward pass runs: a longer prompt is run in chunks of this many, so the
/// activations stay a few megabytes whatever its length.
pub(crate) const PREFILL_CHUNK: usize = 512;
