//! A loaded model: the mapped GGUF, its hyper-parameters, where each weight lives, and its
//! tokenizer. Immutable after load and shared as `Arc<Model>`; everything that changes while
//! generating lives in a [`crate::Session`].

pub mod hparams;
mod llama;
pub mod weights;

use std::path::Path;
use std::sync::Arc;

pub use hparams::{Arch, HParams};
pub(crate) use llama::{forward, forward_hidden};

use crate::chat_template::ChatTemplate;
use crate::gguf::Gguf;
use crate::tokenizer::Tokenizer;
use crate::{EngineError, Result};
use weights::ModelWeights;

pub struct Model {
    pub hparams: HParams,
    pub tokenizer: Tokenizer,
    pub chat_template: ChatTemplate,
    pub(crate) weights: ModelWeights,
    pub(crate) rope: llama::Rope,
    pub(crate) file: Gguf,
}

impl Model {
    /// Maps and validates a GGUF file. Nothing is dequantized: the weights are used in place.
    pub fn load(path: &Path) -> Result<Arc<Model>> {
        if !path.exists() {
            return Err(EngineError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "model file not found"),
            });
        }
        Self::from_gguf(Gguf::open(path)?)
    }

    pub fn from_gguf(file: Gguf) -> Result<Arc<Model>> {
        let hparams = HParams::from_gguf(&file)?;
        let weights = ModelWeights::from_gguf(&file, &hparams)?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        if tokenizer.vocab_size() != hparams.n_vocab {
            return Err(EngineError::Model(format!(
                "tokenizer has {} tokens but the model's vocabulary is {}",
                tokenizer.vocab_size(),
                hparams.n_vocab
            )));
        }
        let chat_template = ChatTemplate::from_gguf(&file, &tokenizer)?;
        let rope = llama::Rope::new(&hparams, weights.rope_freqs.clone());
        Ok(Arc::new(Model {
            hparams,
            tokenizer,
            chat_template,
            weights,
            rope,
            file,
        }))
    }

    /// Human-readable name from the file's metadata, for reports.
    pub fn name(&self) -> String {
        self.file
            .get_str_opt("general.name")
            .ok()
            .flatten()
            .unwrap_or("unnamed model")
            .to_string()
    }

    /// The most common weight type among the matrices, e.g. "Q4_1": what users call the
    /// model's quantization.
    pub fn quantization(&self) -> &'static str {
        let mut counts = std::collections::HashMap::new();
        for l in &self.weights.layers {
            for t in [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down] {
                *counts.entry(t.ty.name()).or_insert(0usize) += t.size;
            }
        }
        counts
            .into_iter()
            .max_by_key(|(_, bytes)| *bytes)
            .map_or("unknown", |(name, _)| name)
    }

    /// Bytes of weights one decode step reads: every matrix once, plus one embedding row.
    pub fn weight_bytes_per_token(&self) -> usize {
        let w = &self.weights;
        let layers: usize = w
            .layers
            .iter()
            .map(|l| {
                l.wq.size
                    + l.wk.size
                    + l.wv.size
                    + l.wo.size
                    + l.w_gate.size
                    + l.w_up.size
                    + l.w_down.size
            })
            .sum();
        layers + w.output.size + w.token_embd.size / w.token_embd.rows
    }

    pub fn file_bytes(&self) -> usize {
        self.file.file_bytes()
    }
}
