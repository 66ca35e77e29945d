//! Where each tensor of a model lives in the mapped file, with shapes checked once
//! at load so the forward pass never has to.

use kostant_kernels::{GgmlType, PackedWeights, Weights};

use super::hparams::{Arch, HParams};
use crate::gguf::Gguf;
use crate::{EngineError, Result};

/// A tensor in the mapped file: type, byte range and logical shape (rows x cols, ggml order
/// dims = [cols, rows]). Cheap to copy; the bytes stay in the mmap unless the matrix was
/// repacked at load, in which case `packed` indexes [`ModelWeights::packed`].
#[derive(Clone, Copy, Debug)]
pub struct TensorRef {
    pub ty: GgmlType,
    pub offset: usize,
    pub size: usize,
    pub rows: usize,
    pub cols: usize,
    pub packed: Option<usize>,
    /// Which linear layer this is, for adapters ([`linear_slot`]); None for the embedding and
    /// vectors.
    pub slot: Option<usize>,
}

impl TensorRef {
    pub fn bytes<'a>(&self, file: &'a Gguf) -> &'a [u8] {
        &file.bytes()[self.offset..self.offset + self.size]
    }

    /// The tensor as a kernel operand.
    pub fn weights<'a>(&self, file: &'a Gguf) -> Weights<'a> {
        Weights {
            ty: self.ty,
            data: self.bytes(file),
            rows: self.rows,
            cols: self.cols,
        }
    }
}

pub struct LayerWeights {
    pub attn_norm: Vec<f32>,  // (n_embd,)
    pub wq: TensorRef,        // (n_head * head_dim, n_embd)
    pub wk: TensorRef,        // (n_head_kv * head_dim, n_embd)
    pub wv: TensorRef,        // (n_head_kv * head_dim, n_embd)
    pub bq: Option<Vec<f32>>, // Qwen2 only: (n_head * head_dim,)
    pub bk: Option<Vec<f32>>, // (n_head_kv * head_dim,)
    pub bv: Option<Vec<f32>>,
    /// Qwen3 and Gemma 3: RMSNorm weights applied to each query and key head, (head_dim,).
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub wo: TensorRef, // (n_embd, n_head * head_dim)
    /// Gemma 3: RMSNorm of the attention's output before it joins the residual, (n_embd,).
    pub post_attn_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>, // (n_embd,)
    /// Gemma 3: RMSNorm of the feed-forward's output, (n_embd,).
    pub post_ffn_norm: Option<Vec<f32>>,
    pub w_gate: TensorRef, // (n_ff, n_embd)
    pub w_up: TensorRef,   // (n_ff, n_embd)
    pub w_down: TensorRef, // (n_embd, n_ff)
}

/// The matrices of a layer an adapter can target, by their GGUF names (`blk.{l}.{name}.weight`),
/// in slot order: layer `l`'s `k`-th is slot `l * PROJECTIONS.len() + k`, and the lm head
/// (`output.weight`, when the model has its own) is the slot after every layer's.
pub const PROJECTIONS: [&str; 7] = [
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
];

/// The slot of the matrix named `name` (`blk.3.attn_q.weight`, `output.weight`) in `model`, if
/// an adapter can target it there.
pub fn linear_slot(model: &super::Model, name: &str) -> Option<usize> {
    let w = &model.weights;
    let lm_head = w.layers.len() * PROJECTIONS.len();
    if name == "output.weight" {
        return w.output.slot.filter(|&s| s == lm_head);
    }
    let rest = name.strip_prefix("blk.")?.strip_suffix(".weight")?;
    let (layer, proj) = rest.split_once('.')?;
    // Digits only: "+3" or " 3" would parse but name no tensor of the file.
    if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let layer: usize = layer.parse().ok()?;
    let k = PROJECTIONS.iter().position(|p| *p == proj)?;
    (layer < w.layers.len()).then_some(layer * PROJECTIONS.len() + k)
}

/// The GGUF name of slot `slot` of a model with `n_slots` slots.
pub fn slot_name(slot: usize, n_slots: usize) -> String {
    if slot + 1 == n_slots {
        "output.weight".into()
    } else {
        let (l, k) = (slot / PROJECTIONS.len(), slot % PROJECTIONS.len());
        format!("blk.{l}.{}.weight", PROJECTIONS[k])
    }
}

pub struct ModelWeights {
    pub token_embd: TensorRef, // (n_vocab, n_embd)
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>, // (n_embd,)
    /// The LM head; the token embedding itself when the model ties them.
    pub output: TensorRef, // (n_vocab, n_embd)
    /// Llama 3 long-context RoPE: one divisor per rotated frequency, if the file has them.
    pub rope_freqs: Option<Vec<f32>>,
    /// Layer matrices repacked at load for this CPU's kernels (see [`repack`]).
    pub packed: Vec<PackedWeights>,
}

fn find(g: &Gguf, name: &str, rows: usize, cols: usize) -> Result<TensorRef> {
    let t = g
        .tensor(name)
        .ok_or_else(|| EngineError::Model(format!("tensor {name} is missing")))?;
    let (t_rows, t_cols) = (t.rows(), t.cols());
    if t.dims.len() > 2 || t_rows != rows || t_cols != cols {
        return Err(EngineError::Model(format!(
            "tensor {name}: shape {:?}, expected [{cols}, {rows}]",
            t.dims
        )));
    }
    Ok(TensorRef {
        ty: t.ty,
        offset: t.offset,
        size: t.size,
        rows,
        cols,
        packed: None,
        slot: None,
    })
}

/// Norm weights and biases are tiny and read on every token, so they are copied out of the
/// mmap once at load (no alignment assumptions about the file, no per-token conversion).
fn find_vector(g: &Gguf, name: &str, len: usize) -> Result<Vec<f32>> {
    let t = find(g, name, 1, len)?;
    let mut v = vec![0.0; len];
    kostant_kernels::dequantize_row(t.ty, t.bytes(g), &mut v)
        .map_err(|e| EngineError::Model(format!("tensor {name}: {e}")))?;
    Ok(v)
}

fn find_optional_vector(g: &Gguf, name: &str, len: usize) -> Result<Option<Vec<f32>>> {
    match g.tensor(name) {
        None => Ok(None),
        Some(_) => find_vector(g, name, len).map(Some),
    }
}

impl ModelWeights {
    /// Every weight found and its shape checked, nothing repacked yet
    /// ([`ModelWeights::repack`] is loading's second step; [`crate::Model::inspect`] stops here).
    pub(crate) fn located(g: &Gguf, hp: &HParams) -> Result<ModelWeights> {
        let (e, ff, q_dim, kv_dim) = (hp.n_embd, hp.n_ff, hp.q_dim(), hp.kv_dim());
        let token_embd = find(g, "token_embd.weight", hp.n_vocab, e)?;
        // An lm head of its own can carry an adapter; one tied to the embedding cannot (as in
        // llama.cpp, where a tied head's adapter would be the embedding's).
        let output = match g.tensor("output.weight") {
            Some(_) => TensorRef {
                slot: Some(hp.n_layer * PROJECTIONS.len()),
                ..find(g, "output.weight", hp.n_vocab, e)?
            },
            None => token_embd,
        };
        let mut layers = Vec::with_capacity(hp.n_layer);
        for i in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}");
            layers.push(LayerWeights {
                attn_norm: find_vector(g, &n("attn_norm.weight"), e)?,
                wq: find(g, &n("attn_q.weight"), q_dim, e)?,
                wk: find(g, &n("attn_k.weight"), kv_dim, e)?,
                wv: find(g, &n("attn_v.weight"), kv_dim, e)?,
                bq: find_optional_vector(g, &n("attn_q.bias"), q_dim)?,
                bk: find_optional_vector(g, &n("attn_k.bias"), kv_dim)?,
                bv: find_optional_vector(g, &n("attn_v.bias"), kv_dim)?,
                q_norm: find_optional_vector(g, &n("attn_q_norm.weight"), hp.head_dim)?,
                k_norm: find_optional_vector(g, &n("attn_k_norm.weight"), hp.head_dim)?,
                wo: find(g, &n("attn_output.weight"), e, q_dim)?,
                post_attn_norm: find_optional_vector(g, &n("post_attention_norm.weight"), e)?,
                ffn_norm: find_vector(g, &n("ffn_norm.weight"), e)?,
                post_ffn_norm: find_optional_vector(g, &n("post_ffw_norm.weight"), e)?,
                w_gate: find(g, &n("ffn_gate.weight"), ff, e)?,
                w_up: find(g, &n("ffn_up.weight"), ff, e)?,
                w_down: find(g, &n("ffn_down.weight"), e, ff)?,
            });
            let layer = layers.last_mut().expect("just pushed");
            for (k, t) in layer.projections_mut().into_iter().enumerate() {
                t.slot = Some(i * PROJECTIONS.len() + k);
            }
            require_arch_tensors(hp, i, layers.last().expect("just pushed"))?;
        }
        let output_norm = find_vector(g, "output_norm.weight", e)?;
        let rope_freqs = match g.tensor("rope_freqs.weight") {
            None => None,
            Some(_) => {
                let v = find_vector(g, "rope_freqs.weight", hp.rope_dims / 2)?;
                if v.iter().any(|f| !(f.is_finite() && *f > 0.0)) {
                    return Err(EngineError::Model(
                        "tensor rope_freqs.weight: factors must be positive".into(),
                    ));
                }
                Some(v)
            }
        };
        Ok(ModelWeights {
            token_embd,
            layers,
            output_norm,
            output,
            rope_freqs,
            packed: Vec::new(),
        })
    }

    /// Repacks the matrices this CPU multiplies faster in another layout ([`repack`]).
    pub(crate) fn repack(&mut self, g: &Gguf) -> Result<()> {
        self.packed = repack(g, &mut self.layers, &mut self.output)?;
        Ok(())
    }

    /// The most common weight type among the layers' matrices, e.g. "Q4_1": what users call
    /// the model's quantization.
    pub fn quantization(&self) -> &'static str {
        let mut counts = std::collections::HashMap::new();
        for l in &self.layers {
            for t in [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down] {
                *counts.entry(t.ty.name()).or_insert(0usize) += t.size;
            }
        }
        counts
            .into_iter()
            .max_by_key(|(_, bytes)| *bytes)
            .map_or("unknown", |(name, _)| name)
    }
}

impl LayerWeights {
    /// The layer's matrices in [`PROJECTIONS`] order.
    pub fn projections_mut(&mut self) -> [&mut TensorRef; 7] {
        [
            &mut self.wq,
            &mut self.wk,
            &mut self.wv,
            &mut self.wo,
            &mut self.w_gate,
            &mut self.w_up,
            &mut self.w_down,
        ]
    }

    /// The layer's matrices in [`PROJECTIONS`] order.
    pub fn projections(&self) -> [&TensorRef; 7] {
        [
            &self.wq,
            &self.wk,
            &self.wv,
            &self.wo,
            &self.w_gate,
            &self.w_up,
            &self.w_down,
        ]
    }
}

impl ModelWeights {
    /// Adapter slots: every layer's projections and the lm head.
    pub fn n_slots(&self) -> usize {
        self.layers.len() * PROJECTIONS.len() + 1
    }

    /// The matrix in `slot` (< [`ModelWeights::n_slots`]); the lm head's slot gives the lm head
    /// even when it is tied (and so cannot be targeted).
    pub fn slot(&self, slot: usize) -> &TensorRef {
        let per = PROJECTIONS.len();
        match self.layers.get(slot / per) {
            Some(l) => l.projections()[slot % per],
            None => &self.output,
        }
    }
}

/// The tensors an architecture cannot run without, beyond the ones every family has.
fn require_arch_tensors(hp: &HParams, i: usize, l: &LayerWeights) -> Result<()> {
    let needs: &[(&str, bool)] = match hp.arch {
        Arch::Llama | Arch::Qwen2 => &[],
        Arch::Qwen3 => &[
            ("attn_q_norm", l.q_norm.is_some()),
            ("attn_k_norm", l.k_norm.is_some()),
        ],
        Arch::Gemma3 => &[
            ("attn_q_norm", l.q_norm.is_some()),
            ("attn_k_norm", l.k_norm.is_some()),
            ("post_attention_norm", l.post_attn_norm.is_some()),
            ("post_ffw_norm", l.post_ffn_norm.is_some()),
        ],
    };
    match needs.iter().find(|(_, present)| !present) {
        Some((name, _)) => Err(EngineError::Model(format!(
            "tensor blk.{i}.{name}.weight is missing ({} needs it)",
            hp.arch.name()
        ))),
        None => Ok(()),
    }
}

/// Repacks the matrices this CPU multiplies faster in another layout (Q4_0, Q4_1 and Q8_0 on
/// AVX2, Q4_0 on NEON: 8 rows interleaved per block; `cargo bench -p kostant-kernels --bench
/// matvec -- q4x8`),
/// once, at load: the layers' and the lm head. A repacked matrix's mapped pages are handed back
/// to the OS, so the weights are held once, not twice. The token embedding stays in the
/// mapping even when the lm head is tied to it: it is read one row per token, and those rows
/// simply fault back in.
fn repack(
    g: &Gguf,
    layers: &mut [LayerWeights],
    output: &mut TensorRef,
) -> Result<Vec<PackedWeights>> {
    let mut packed = Vec::new();
    let matrices = layers.iter_mut().flat_map(LayerWeights::projections_mut);
    for t in matrices.chain(std::iter::once(output)) {
        let p = PackedWeights::pack(&t.weights(g))
            .map_err(|e| EngineError::Model(format!("repacking a {:?} matrix: {e}", t.ty)))?;
        if let Some(p) = p {
            t.packed = Some(packed.len());
            packed.push(p);
            g.release(t.offset, t.size);
        }
    }
    Ok(packed)
}
