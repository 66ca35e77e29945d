//! Kostant's inference engine: GGUF by mmap, the GGUF's own tokenizer, a Llama-family forward
//! pass over packed weights, KV cache, sampling, generation and speculative decoding, and a
//! BERT sentence encoder for document search (`encoder`).
//!
//! Dependency rule: this crate depends on `kostant-kernels` and on no other crate of ours.
// `unsafe` is denied here except in the one mmap function (gguf), which says why it is sound.
#![deny(unsafe_code)]

pub mod adapter;
pub mod batch;
pub mod chat_template;
pub mod encoder;
pub mod error;
pub mod generate;
pub mod gguf;
pub mod grammar;
pub mod kv_cache;
mod limits;
pub mod model;
pub mod sampling;
pub mod session;
pub mod speculative;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tokenizer;

pub use adapter::{ActiveAdapter, LoraAdapter};
pub use batch::{Batch, LogitRows, Outputs};
pub use chat_template::{Message, Role};
pub use encoder::Encoder;
pub use error::{EngineError, Result};
pub use generate::{
    generate, generate_observed, generate_with, CancelHandle, GenerateRequest, Generation,
    GenerationStats, Judgement, Observer, Riders, StopReason,
};
pub use grammar::Grammar;
pub use kv_cache::{KvType, SnapshotHeader, SNAPSHOT_FORMAT};
pub use model::{Model, ModelInfo};
pub use sampling::SamplingParams;
pub use session::Session;
pub use speculative::{Drafter, Speculation};
