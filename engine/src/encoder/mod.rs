//! Sentence encoders: a BERT-family model (all-MiniLM-L6-v2 and its kin) in llama.cpp's
//! `bert` GGUF layout turns texts into unit-length vectors whose dot product measures how alike
//! they are, for finding the passages of a user's documents that answer a question.
//!
//! `weights.rs` reads and checks the file, `tokenizer.rs` is its WordPiece tokenizer,
//! `forward.rs` the encoder's pass; this file pools token states into one vector per text.

mod forward;
mod tokenizer;
mod weights;

use std::path::Path;

use kostant_kernels::in_pool;

use crate::gguf::Gguf;
use crate::{EngineError, Result};
use forward::Pass;
use tokenizer::WordPieceTokenizer;
use weights::EncoderWeights;
pub use weights::{EncoderParams, Pooling, ARCH};

/// Most tokens stacked into one forward pass: enough rows for the matmuls to run at full speed,
/// few enough that a pass's activations stay a few megabytes.
const TOKENS_PER_PASS: usize = 1024;

/// A loaded sentence encoder. Immutable; share it behind an `Arc`.
pub struct Encoder {
    file: Gguf,
    hp: EncoderParams,
    weights: EncoderWeights,
    tokenizer: WordPieceTokenizer,
}

impl Encoder {
    /// Maps the GGUF at `path` and checks it. A file of another architecture (a chat model)
    /// is refused with an error saying it is not a sentence encoder.
    pub fn load(path: &Path) -> Result<Encoder> {
        let file = Gguf::open(path)?;
        Encoder::from_gguf(file).map_err(|e| match e {
            EngineError::Model(msg) => EngineError::Model(format!("{}: {msg}", path.display())),
            other => other,
        })
    }

    /// [`Encoder::load`] of a file already parsed (tests, files held in memory).
    pub fn from_gguf(file: Gguf) -> Result<Encoder> {
        let hp = EncoderParams::read(&file)?;
        let weights = EncoderWeights::load(&file, &hp)?;
        let tokenizer = WordPieceTokenizer::from_gguf(&file, hp.n_vocab)?;
        Ok(Encoder {
            file,
            hp,
            weights,
            tokenizer,
        })
    }

    /// Length of every embedding.
    pub fn dim(&self) -> usize {
        self.hp.n_embd
    }

    /// The most tokens a text is read with, [CLS] and [SEP] included (the model's context
    /// length); [`Encoder::embed`] drops the rest of a longer text, so callers cut documents
    /// into chunks that fit ([`Encoder::count_tokens`]).
    pub fn max_tokens(&self) -> usize {
        self.hp.n_ctx
    }

    /// How many tokens `text` takes, [CLS] and [SEP] included, before truncation.
    pub fn count_tokens(&self, text: &str) -> Result<usize> {
        self.tokenizer.count(text)
    }

    /// The ids `text` is read as: [CLS], its WordPiece ids, [SEP], truncated to
    /// [`Encoder::max_tokens`].
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode(text, self.hp.n_ctx)
    }

    /// Checked hyper-parameters.
    pub fn params(&self) -> &EncoderParams {
        &self.hp
    }

    /// One L2-normalised vector of [`Encoder::dim`] values per text, in order: the mean of the
    /// last layer's token states ([CLS] and [SEP] included, as sentence-transformers pools),
    /// or the [CLS] state for a model that pools so. Texts longer than
    /// [`Encoder::max_tokens`] are truncated to it. Texts are batched into passes of up to
    /// about a thousand tokens, over the rayon pool.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let ids = texts
            .iter()
            .map(|t| self.token_ids(t))
            .collect::<Result<Vec<_>>>()?;
        let mut out = Vec::with_capacity(texts.len());
        for batch in batches(&ids, TOKENS_PER_PASS) {
            out.extend(self.embed_ids(batch)?);
        }
        Ok(out)
    }

    /// [`Encoder::embed`] of texts already tokenized (each from [`Encoder::token_ids`]).
    pub fn embed_ids(&self, texts: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        if let Some(t) = texts
            .iter()
            .find(|t| t.is_empty() || t.len() > self.hp.n_ctx)
        {
            return Err(EngineError::InvalidRequest(format!(
                "a text of {} tokens: an encoder reads 1 to {}",
                t.len(),
                self.hp.n_ctx
            )));
        }
        let pass = Pass {
            file: &self.file,
            hp: &self.hp,
            weights: &self.weights,
        };
        let states = in_pool(|| pass.run(texts))?;
        Ok(pool(&states, texts, self.hp.n_embd, self.hp.pooling))
    }
}

/// Consecutive runs of texts of at most `budget` tokens (a longer text alone), in order: the
/// passes [`Encoder::embed`] runs (with [`TOKENS_PER_PASS`]), as llama-embedding fills a batch
/// of `-b` tokens.
pub fn batches(ids: &[Vec<u32>], budget: usize) -> Vec<&[Vec<u32>]> {
    let mut out = Vec::new();
    let (mut start, mut tokens) = (0, 0);
    for (i, t) in ids.iter().enumerate() {
        if i > start && tokens + t.len() > budget {
            out.push(&ids[start..i]);
            (start, tokens) = (i, 0);
        }
        tokens += t.len();
    }
    if start < ids.len() {
        out.push(&ids[start..]);
    }
    out
}

/// One vector per text from the stacked token states (n_tokens, n_embd), L2-normalised.
fn pool(states: &[f32], texts: &[Vec<u32>], e: usize, pooling: Pooling) -> Vec<Vec<f32>> {
    let mut rows = states.chunks_exact(e);
    texts
        .iter()
        .map(|t| {
            let mut v = vec![0.0f32; e];
            for (i, row) in (&mut rows).take(t.len()).enumerate() {
                if pooling == Pooling::Mean || i == 0 {
                    for (a, &x) in v.iter_mut().zip(row) {
                        *a += x;
                    }
                }
            }
            if pooling == Pooling::Mean {
                let n = t.len() as f32;
                v.iter_mut().for_each(|a| *a /= n);
            }
            l2_normalize(&mut v);
            v
        })
        .collect()
}

/// Scales `v` to unit length (a zero vector stays zero), as sentence-transformers' Normalize.
fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt() as f32;
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_respect_the_token_budget_and_keep_order() {
        let ids: Vec<Vec<u32>> = [600, 300, 200, 1500, 10].map(|n| vec![0; n]).to_vec();
        let lens: Vec<Vec<usize>> = batches(&ids, TOKENS_PER_PASS)
            .iter()
            .map(|b| b.iter().map(Vec::len).collect())
            .collect();
        assert_eq!(lens, [vec![600, 300], vec![200], vec![1500], vec![10]]);
    }

    #[test]
    fn mean_pooling_then_unit_length() {
        let states = [1.0, 0.0, 3.0, 0.0, 0.0, 2.0];
        let texts = vec![vec![0, 0], vec![0]];
        let v = pool(&states, &texts, 2, Pooling::Mean);
        assert_eq!(v[0], [1.0, 0.0]);
        assert_eq!(v[1], [0.0, 1.0]);
    }
}
