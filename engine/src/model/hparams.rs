//! Hyper-parameters of a model, read from GGUF metadata and checked for sanity.

use crate::gguf::Gguf;
use crate::{EngineError, Result};

/// Which way RoPE pairs up the dimensions of a head. Llama GGUFs store Q/K permuted so that
/// adjacent pairs rotate together; Qwen and Gemma keep the NeoX layout (dimension i pairs with
/// i + d/2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    Adjacent,
    NeoX,
}

/// The model families we run, each with its forward pass in `model/arch/` over the shared
/// blocks. Llama and Qwen2 share one (Qwen2 adds a Q/K/V bias); Qwen3 normalises each query
/// and key head; Gemma 3 adds norms after attention and the feed-forward, GeGLU and sliding
/// window layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
}

impl Arch {
    /// Every architecture, as GGUF names them (`general.architecture`).
    pub const ALL: [Arch; 4] = [Arch::Llama, Arch::Qwen2, Arch::Qwen3, Arch::Gemma3];

    pub fn from_name(name: &str) -> Result<Arch> {
        Arch::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = Arch::ALL.iter().map(|a| a.name()).collect();
                EngineError::Model(format!(
                    "unsupported architecture {name:?} (supported: {})",
                    known.join(", ")
                ))
            })
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
        }
    }

    pub fn rope_layout(self) -> RopeLayout {
        match self {
            Arch::Llama => RopeLayout::Adjacent,
            Arch::Qwen2 | Arch::Qwen3 | Arch::Gemma3 => RopeLayout::NeoX,
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
    /// What attention scores are multiplied by: 1/sqrt(head_dim).
    pub attn_scale: f32,
    /// Whether the scale is applied to the queries (Gemma) rather than to the scores.
    pub scale_queries: bool,
    /// Sliding-window attention (Gemma 3): how many positions, the token's own included, a
    /// windowed layer sees; 0 when no layer is windowed.
    pub n_swa: usize,
    /// Which layers attend through the window (all false without one).
    pub sliding: Vec<bool>,
    /// RoPE base of the windowed layers (10,000 unless the GGUF says).
    pub rope_theta_swa: f32,
    /// Logits are squashed as cap * tanh(logit / cap) when non-zero.
    pub final_logit_softcap: f32,
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
        if n_head % n_head_kv != 0 {
            return bad(format!(
                "{n_head} heads do not group evenly over {n_head_kv} kv heads"
            ));
        }
        let head_dim = head_dim(g, p, n_embd, n_head)?;
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

        let rope_freq_scale = rope_freq_scale(g, p)?;

        let Windows {
            n_swa,
            sliding,
            rope_theta_swa,
            final_logit_softcap,
        } = windows(g, arch, n_layer)?;

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
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            scale_queries: arch == Arch::Gemma3,
            n_swa,
            sliding,
            rope_theta_swa,
            final_logit_softcap,
        })
    }

    /// Width of the K and V projections: all kv heads side by side.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// Width of the Q projection and of the attention output: all query heads side by side
    /// (not always n_embd: Gemma 3 270M has 4 heads of 256 over 640 dims).
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Every layer's [`HParams::window`], in order.
    pub fn windows(&self) -> Vec<Option<usize>> {
        (0..self.n_layer).map(|l| self.window(l)).collect()
    }

    /// How many positions layer `l` attends to: its window, or every one.
    pub fn window(&self, l: usize) -> Option<usize> {
        self.sliding
            .get(l)
            .copied()
            .unwrap_or(false)
            .then_some(self.n_swa)
    }
}

fn bad<T>(what: String) -> Result<T> {
    Err(EngineError::Model(what))
}

/// Width of a head: given outright by Qwen3 and Gemma 3, implied by older files.
fn head_dim(g: &Gguf, p: &str, n_embd: usize, n_head: usize) -> Result<usize> {
    let key_length = g.get_u32_opt(&format!("{p}.attention.key_length"))?;
    let value_length = g.get_u32_opt(&format!("{p}.attention.value_length"))?;
    let head_dim = match key_length {
        Some(v) => v as usize,
        None if n_embd.is_multiple_of(n_head) => n_embd / n_head,
        None => {
            return bad(format!(
                "{n_embd} embedding dims do not split into {n_head} heads"
            ))
        }
    };
    if value_length.is_some_and(|v| v as usize != head_dim) {
        return bad(format!(
            "key heads {head_dim} wide but value heads {} wide (unsupported)",
            value_length.unwrap_or(0)
        ));
    }
    if head_dim == 0 || head_dim % 2 != 0 || head_dim > 1024 || n_head * head_dim > MAX_DIM {
        return bad(format!("unsupported head dimension {head_dim}"));
    }
    Ok(head_dim)
}

/// The scale rope's positions are multiplied by (1 unless the file asks for linear scaling).
fn rope_freq_scale(g: &Gguf, p: &str) -> Result<f32> {
    Ok(match g.get_str_opt(&format!("{p}.rope.scaling.type"))? {
        None | Some("none") => 1.0,
        // Llama 3 scaling is carried by the rope_freqs tensor, not by a position scale.
        Some("llama3") => 1.0,
        Some("linear") => {
            let factor = g
                .get_f32_opt(&format!("{p}.rope.scaling.factor"))?
                .unwrap_or(1.0);
            if !(factor.is_finite() && factor > 0.0) {
                return bad(format!("bad rope scaling factor {factor}"));
            }
            1.0 / factor
        }
        Some(other) => return bad(format!("unsupported rope scaling type {other:?}")),
    })
}

/// Sliding-window attention's settings (Gemma 3's; none for the other architectures).
struct Windows {
    n_swa: usize,
    sliding: Vec<bool>,
    rope_theta_swa: f32,
    final_logit_softcap: f32,
}

fn windows(g: &Gguf, arch: Arch, n_layer: usize) -> Result<Windows> {
    let p = arch.name();
    let key = |k: &str| format!("{p}.{k}");
    let n_swa = match arch {
        Arch::Gemma3 => g
            .get_u32_opt(&key("attention.sliding_window"))?
            .unwrap_or(0) as usize,
        _ => 0,
    };
    // Gemma 3: five windowed layers, then one global, unless the file says otherwise.
    let pattern = g
        .get_u32_opt(&key("attention.sliding_window_pattern"))?
        .unwrap_or(6) as usize;
    let sliding = (0..n_layer)
        .map(|l| n_swa > 0 && (pattern == 0 || l % pattern < pattern - 1))
        .collect();
    let rope_theta_swa = g
        .get_f32_opt(&key("rope.freq_base_swa"))?
        .unwrap_or(10_000.0);
    let final_logit_softcap = g
        .get_f32_opt(&key("final_logit_softcapping"))?
        .unwrap_or(0.0);
    let sane = rope_theta_swa.is_finite()
        && rope_theta_swa > 0.0
        && final_logit_softcap.is_finite()
        && final_logit_softcap >= 0.0;
    if !sane {
        return bad(format!(
            "bad windowed rope base {rope_theta_swa} or logit cap {final_logit_softcap}"
        ));
    }
    Ok(Windows {
        n_swa,
        sliding,
        rope_theta_swa,
        final_logit_softcap,
    })
}
