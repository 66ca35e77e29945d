//! Kostant's inference engine: GGUF by mmap, the GGUF's own tokenizer, a Llama-family forward
//! pass over packed weights, KV cache, sampling and token streaming.
//!
//! Dependency rule: this crate depends on `kostant-kernels` and on no other crate of ours.
// `unsafe` is denied here except in the one mmap function (gguf), which says why it is sound.
#![deny(unsafe_code)]

pub mod error;
pub mod gguf;
pub mod tokenizer;

pub use error::{EngineError, Result};
