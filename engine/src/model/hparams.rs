//! Hyper-parameters of a Llama-family model, read from GGUF metadata and checked for sanity.

use crate::gguf::Gguf;
use crate::{EngineError, Result};

/// Which way RoPE pairs up the dimensions of a head. Llama GGUFs store Q/K permuted so that
/// adjacent pairs rotate together; Qwen2 keeps the NeoX layout (dimension i pairs with i + d/2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    Adjacent,
    NeoX,
}

/// The model families we run. All share one forward pass; they differ in metadata prefix,
/// RoPE layout and whether Q/K/V carry a bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
}

impl Arch {
    pub fn from_name(name: &str) -> Result<Arch> {
        match name {
            "llama" => Ok(Arch::Llama),
            "qwen2" => Ok(Arch::Qwen2),
            other => Err(EngineError::Model(format!(
                "unknown architecture {other:?} (supported: llama, qwen2)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
        }
    }

    pub fn rope_layout(self) -> RopeLayout {
        match self {
            Arch::Llama => RopeLayout::Adjacent,
            Arch::Qwen2 => RopeLayout::NeoX,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct HParams {
    pub arch: Arch,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    pub rms_eps: f32,
    pub rope_theta: f32,
    /// Dimensions of each head that RoPE rotates (usually all of them).
    pub rope_dims: usize,
    /// Linear position scaling (`rope.scaling.type = linear`): positions are multiplied by this.
    pub rope_freq_scale: f32,
}

/// Caps that keep a hostile file from asking for absurd buffers before any tensor is checked.
const MAX_DIM: usize = 1 << 17;
const MAX_LAYERS: usize = 1024;
const MAX_CTX: usize = 1 << 21;

impl HParams {
    pub fn from_gguf(g: &Gguf) -> Result<HParams> {
        let arch = Arch::from_name(g.get_str("general.architecture")?)?;
        let p = arch.name();
        let key = |k: &str| format!("{p}.{k}");
        let get = |k: &str| -> Result<usize> { Ok(g.get_u32(&key(k))? as usize) };

        let n_embd = get("embedding_length")?;
        let n_layer = get("block_count")?;
        let n_head = get("attention.head_count")?;
        let n_head_kv = g
            .get_u32_opt(&key("attention.head_count_kv"))?
            .map(|v| v as usize)
            .unwrap_or(n_head);
        let n_ff = get("feed_forward_length")?;
        let n_ctx_train = get("context_length")?;
        let rms_eps = g.get_f32(&key("attention.layer_norm_rms_epsilon"))?;
        let rope_theta = g.get_f32_opt(&key("rope.freq_base"))?.unwrap_or(10_000.0);
        let token_count = g.get_str_array("tokenizer.ggml.tokens")?.len();
        let n_vocab = match g.get_u32_opt(&key("vocab_size"))? {
            Some(v) => v as usize,
            None => token_count,
        };

        let bad = |what: String| Err(EngineError::Model(what));
        if n_head == 0 || n_head_kv == 0 || n_embd == 0 || n_layer == 0 || n_ff == 0 {
            return bad(format!(
                "zero-sized hyper-parameter (embd {n_embd}, layers {n_layer}, heads {n_head}/{n_head_kv}, ff {n_ff})"
            ));
        }
        if n_embd > MAX_DIM || n_ff > MAX_DIM * 4 || n_layer > MAX_LAYERS || n_ctx_train > MAX_CTX {
            return bad(format!(
                "hyper-parameters out of range (embd {n_embd}, ff {n_ff}, layers {n_layer}, context {n_ctx_train})"
            ));
        }
        if n_embd % n_head != 0 || n_head % n_head_kv != 0 {
            return bad(format!(
                "{n_embd} embedding dims do not split into {n_head} heads grouped over {n_head_kv} kv heads"
            ));
        }
        let head_dim = match g.get_u32_opt(&key("attention.key_length"))? {
            Some(v) => v as usize,
            None => n_embd / n_head,
        };
        if head_dim != n_embd / n_head || head_dim % 2 != 0 {
            return bad(format!("unsupported head dimension {head_dim}"));
        }
        let rope_dims = g
            .get_u32_opt(&key("rope.dimension_count"))?
            .map(|v| v as usize)
            .unwrap_or(head_dim);
        if rope_dims > head_dim || rope_dims % 2 != 0 {
            return bad(format!(
                "rope dimension count {rope_dims} does not fit head dimension {head_dim}"
            ));
        }
        if n_vocab == 0 || n_vocab != token_count {
            return bad(format!(
                "vocab size {n_vocab} does not match the tokenizer's {token_count} tokens"
            ));
        }
        if !(rms_eps.is_finite() && rms_eps > 0.0 && rope_theta.is_finite() && rope_theta > 0.0) {
            return bad(format!(
                "bad rms epsilon {rms_eps} or rope base {rope_theta}"
            ));
        }

        let rope_freq_scale = match g.get_str_opt(&key("rope.scaling.type"))? {
            None | Some("none") => 1.0,
            // Llama 3 scaling is carried by the rope_freqs tensor, not by a position scale.
            Some("llama3") => 1.0,
            Some("linear") => {
                let factor = g.get_f32_opt(&key("rope.scaling.factor"))?.unwrap_or(1.0);
                if !(factor.is_finite() && factor > 0.0) {
                    return bad(format!("bad rope scaling factor {factor}"));
                }
                1.0 / factor
            }
            Some(other) => return bad(format!("unsupported rope scaling type {other:?}")),
        };

        Ok(HParams {
            arch,
            n_vocab,
            n_ctx_train,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim,
            n_ff,
            rms_eps,
            rope_theta,
            rope_dims,
            rope_freq_scale,
        })
    }

    /// Width of the K and V projections: all kv heads side by side.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
}
