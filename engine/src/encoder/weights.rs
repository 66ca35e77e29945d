//! A sentence encoder's hyper-parameters and tensors, read from a GGUF in llama.cpp's `bert`
//! layout and checked once at load, so the forward pass never has to.

use kostant_kernels::{dequantize_row, GgmlType, PackedWeights, Weights};

use crate::gguf::Gguf;
use crate::{EngineError, Result};

/// The architecture name a sentence encoder's GGUF carries (`general.architecture`).
pub const ARCH: &str = "bert";

// Caps on what a file may claim, far above any BERT-family encoder, so that a hostile header
// cannot make the loader plan absurd buffers.
const MAX_EMBD: usize = 8192;
const MAX_FF: usize = 65_536;
const MAX_LAYERS: usize = 256;
const MAX_HEADS: usize = 256;
const MAX_CTX: usize = 1 << 16;
const MAX_TOKEN_TYPES: usize = 1 << 10;

/// How token states become one vector per text (llama.cpp's `pooling_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over every token, [CLS] and [SEP] included (sentence-transformers' mean
    /// pooling with an all-ones attention mask).
    Mean,
    /// The [CLS] token's state.
    Cls,
}

/// Checked hyper-parameters.
#[derive(Clone, Debug)]
pub struct EncoderParams {
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    pub n_layer: usize,
    /// Positions the model was trained on: the most tokens one text can have.
    pub n_ctx: usize,
    pub n_token_types: usize,
    pub norm_eps: f32,
    pub pooling: Pooling,
}

/// A weight matrix, (rows, cols) with cols the row length, in the file or repacked.
pub struct Matrix {
    pub ty: GgmlType,
    pub offset: usize,
    pub size: usize,
    pub rows: usize,
    pub cols: usize,
    /// The matrix in a layout this CPU multiplies faster ([`PackedWeights::pack`]), if any.
    pub packed: Option<PackedWeights>,
}

impl Matrix {
    /// The matrix as a kernel operand, read in place from the file.
    pub fn weights<'a>(&self, file: &'a Gguf) -> Weights<'a> {
        Weights {
            ty: self.ty,
            data: &file.bytes()[self.offset..self.offset + self.size],
            rows: self.rows,
            cols: self.cols,
        }
    }

    /// Row `r` as f32 into `out` (`cols` long); `r` must be below `rows`.
    pub fn row_into(&self, file: &Gguf, r: usize, out: &mut [f32]) -> Result<()> {
        let row_bytes = self.size / self.rows;
        let start = self.offset + r * row_bytes;
        dequantize_row(self.ty, &file.bytes()[start..start + row_bytes], out)?;
        Ok(())
    }
}

/// A linear layer: y = x W^T + b.
pub struct Linear {
    pub w: Matrix,   // (out, in)
    pub b: Vec<f32>, // (out,)
}

/// LayerNorm's scale and shift, (n_embd,) each.
pub struct Norm {
    pub weight: Vec<f32>,
    pub bias: Vec<f32>,
}

pub struct EncoderLayer {
    pub q: Linear,         // (n_embd, n_embd)
    pub k: Linear,         // (n_embd, n_embd)
    pub v: Linear,         // (n_embd, n_embd)
    pub out: Linear,       // (n_embd, n_embd)
    pub attn_norm: Norm,   // after attention and its residual
    pub up: Linear,        // (n_ff, n_embd)
    pub down: Linear,      // (n_embd, n_ff)
    pub output_norm: Norm, // after the feed-forward and its residual
}

pub struct EncoderWeights {
    pub token_embd: Matrix,    // (n_vocab, n_embd)
    pub position_embd: Matrix, // (n_ctx, n_embd)
    pub token_types: Matrix,   // (n_token_types, n_embd)
    pub embd_norm: Norm,
    pub layers: Vec<EncoderLayer>,
}

impl EncoderParams {
    /// Reads and checks the hyper-parameters; a file of another architecture is refused here.
    pub fn read(g: &Gguf) -> Result<EncoderParams> {
        let arch = g.get_str("general.architecture")?;
        if arch != ARCH {
            return Err(EngineError::Model(format!(
                "architecture {arch:?} is not a sentence encoder (expected {ARCH:?})"
            )));
        }
        let key = |k: &str| format!("{ARCH}.{k}");
        let n_embd = capped(g, &key("embedding_length"), MAX_EMBD)?;
        let n_head = capped(g, &key("attention.head_count"), MAX_HEADS)?;
        let n_ff = capped(g, &key("feed_forward_length"), MAX_FF)?;
        let n_layer = capped(g, &key("block_count"), MAX_LAYERS)?;
        let n_ctx = capped(g, &key("context_length"), MAX_CTX)?;
        if !n_embd.is_multiple_of(n_head) {
            return Err(EngineError::Model(format!(
                "embedding length {n_embd} is not a multiple of the head count {n_head}"
            )));
        }
        if g.get_bool_opt(&key("attention.causal"))? == Some(true) {
            return Err(EngineError::Model(
                "the file's attention is causal: not a bidirectional sentence encoder".into(),
            ));
        }
        let norm_eps = g.get_f32(&key("attention.layer_norm_epsilon"))?;
        if !(norm_eps.is_finite() && norm_eps >= 0.0) {
            return Err(EngineError::Model(format!(
                "layer norm epsilon {norm_eps} is not a non-negative number"
            )));
        }
        let n_token_types = match g.get_u32_opt("tokenizer.ggml.token_type_count")? {
            None => 1,
            Some(n) => check_range("tokenizer.ggml.token_type_count", n, MAX_TOKEN_TYPES)?,
        };
        Ok(EncoderParams {
            n_vocab: vocab_size(g)?,
            n_embd,
            n_head,
            head_dim: n_embd / n_head,
            n_ff,
            n_layer,
            n_ctx,
            n_token_types,
            norm_eps,
            pooling: pooling(g)?,
        })
    }
}

/// A required integer key between 1 and `max`.
fn capped(g: &Gguf, key: &str, max: usize) -> Result<usize> {
    check_range(key, g.get_u32(key)?, max)
}

fn check_range(key: &str, v: u32, max: usize) -> Result<usize> {
    let v = v as usize;
    if v == 0 || v > max {
        return Err(EngineError::Model(format!(
            "key {key}: {v} is outside 1..={max}"
        )));
    }
    Ok(v)
}

fn vocab_size(g: &Gguf) -> Result<usize> {
    let t = g
        .tensor("token_embd.weight")
        .ok_or_else(|| EngineError::Model("tensor token_embd.weight is missing".into()))?;
    Ok(t.rows())
}

/// llama.cpp's numbering: 1 mean, 2 cls; absent means mean, as the file's converter does for
/// sentence-transformers models without a pooling module.
fn pooling(g: &Gguf) -> Result<Pooling> {
    match g.get_u32_opt(&format!("{ARCH}.pooling_type"))? {
        None | Some(1) => Ok(Pooling::Mean),
        Some(2) => Ok(Pooling::Cls),
        Some(other) => Err(EngineError::Model(format!(
            "pooling type {other} is not supported (1 mean and 2 cls are)"
        ))),
    }
}

impl EncoderWeights {
    /// Every tensor found, its shape checked, the matrices repacked where this CPU runs them
    /// faster.
    pub fn load(g: &Gguf, hp: &EncoderParams) -> Result<EncoderWeights> {
        let e = hp.n_embd;
        let layers = (0..hp.n_layer)
            .map(|i| layer(g, hp, i))
            .collect::<Result<Vec<_>>>()?;
        Ok(EncoderWeights {
            token_embd: matrix(g, "token_embd.weight", hp.n_vocab, e, false)?,
            position_embd: matrix(g, "position_embd.weight", hp.n_ctx, e, false)?,
            token_types: matrix(g, "token_types.weight", hp.n_token_types, e, false)?,
            embd_norm: norm(g, "token_embd_norm", e)?,
            layers,
        })
    }
}

fn layer(g: &Gguf, hp: &EncoderParams, i: usize) -> Result<EncoderLayer> {
    let (e, ff) = (hp.n_embd, hp.n_ff);
    let n = |s: &str| format!("blk.{i}.{s}");
    Ok(EncoderLayer {
        q: linear(g, &n("attn_q"), e, e)?,
        k: linear(g, &n("attn_k"), e, e)?,
        v: linear(g, &n("attn_v"), e, e)?,
        out: linear(g, &n("attn_output"), e, e)?,
        attn_norm: norm(g, &n("attn_output_norm"), e)?,
        up: linear(g, &n("ffn_up"), ff, e)?,
        down: linear(g, &n("ffn_down"), e, ff)?,
        output_norm: norm(g, &n("layer_output_norm"), e)?,
    })
}

fn linear(g: &Gguf, name: &str, rows: usize, cols: usize) -> Result<Linear> {
    Ok(Linear {
        w: matrix(g, &format!("{name}.weight"), rows, cols, true)?,
        b: vector(g, &format!("{name}.bias"), rows)?,
    })
}

fn norm(g: &Gguf, name: &str, len: usize) -> Result<Norm> {
    Ok(Norm {
        weight: vector(g, &format!("{name}.weight"), len)?,
        bias: vector(g, &format!("{name}.bias"), len)?,
    })
}

/// The tensor `name`, which must be (rows, cols); `repack` for the matrices the pass multiplies.
fn matrix(g: &Gguf, name: &str, rows: usize, cols: usize, repack: bool) -> Result<Matrix> {
    let t = g
        .tensor(name)
        .ok_or_else(|| EngineError::Model(format!("tensor {name} is missing")))?;
    if t.dims.len() > 2 || t.rows() != rows || t.cols() != cols {
        return Err(EngineError::Model(format!(
            "tensor {name}: shape {:?}, expected [{cols}, {rows}]",
            t.dims
        )));
    }
    let mut m = Matrix {
        ty: t.ty,
        offset: t.offset,
        size: t.size,
        rows,
        cols,
        packed: None,
    };
    if repack {
        m.packed = PackedWeights::pack(&m.weights(g))
            .map_err(|e| EngineError::Model(format!("tensor {name}: repacking: {e}")))?;
    }
    Ok(m)
}

/// Biases and norm weights are small and read on every pass: copied out as f32 at load.
fn vector(g: &Gguf, name: &str, len: usize) -> Result<Vec<f32>> {
    let m = matrix(g, name, 1, len, false)?;
    let mut v = vec![0.0; len];
    m.row_into(g, 0, &mut v)
        .map_err(|e| EngineError::Model(format!("tensor {name}: {e}")))?;
    Ok(v)
}
