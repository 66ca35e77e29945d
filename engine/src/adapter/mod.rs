//! LoRA adapters (Hu et al. 2021) in llama.cpp's GGUF adapter format, beside the model as
//! llama.cpp's `llama-adapter` is: one mapped file per adapter, read as hostile input, checked
//! against the base it is loaded for, and applied unmerged as a side path on every linear layer
//! it targets (`y = W x + scale * B (A x)`, the base `W` staying packed). Many adapters can be
//! resident at once; a [`crate::Session`] switches between them per request without touching
//! the model ([`crate::Session::set_adapter`]).
//!
//! The format (written by llama.cpp's `convert_lora_to_gguf.py` and by [`peft`]):
//! `general.type = "adapter"`, `adapter.type = "lora"`, `adapter.lora.alpha` (f32, optional),
//! `general.architecture` equal to the base's, and for each targeted base matrix `W` (ggml dims
//! `[cols, rows]`) two tensors `<W's name>.lora_a` with dims `[cols, r]` and `<W's name>.lora_b`
//! with dims `[r, rows]`. The effective scale is `user scale * alpha / r` (just the user scale
//! when alpha is 0), as llama.cpp computes it.

pub mod peft;
pub mod synth;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use kostant_kernels::{GgmlType, Weights};

use crate::gguf::Gguf;
use crate::model::side_path::SidePaths;
use crate::model::weights::{linear_slot, slot_name, TensorRef};
use crate::model::Model;
use crate::{EngineError, Result};

/// Largest rank an adapter may have: far above any real one (8 to 64), low enough that a lying
/// header cannot make the side path's buffers huge.
pub const MAX_RANK: usize = 1024;

/// The tensor types an adapter's matrices may have: what llama.cpp's converter writes (F32,
/// F16; BF16 from bf16 checkpoints) and the kernels multiply at any width.
pub const ADAPTER_TYPES: [GgmlType; 3] = [GgmlType::F32, GgmlType::F16, GgmlType::BF16];

/// One targeted matrix's pair, as tensors of the adapter's file (never repacked): A is
/// (r x cols), B is (rows x r), both row-major as the kernels read weights.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LoraPair {
    pub a: TensorRef,
    pub b: TensorRef,
    pub rank: usize,
}

/// A LoRA adapter loaded for one base model: its file mapped, every pair checked against the
/// base's matrices. Immutable; share it behind an `Arc` between sessions.
pub struct LoraAdapter {
    file: Gguf,
    name: String,
    alpha: f32,
    /// Indexed by the base's linear slots (`model::weights::linear_slot`).
    pairs: Vec<Option<LoraPair>>,
    /// Tensors llama.cpp also skips (norm vectors), by name: reported, never applied.
    ignored: Vec<String>,
    /// The base model this adapter was checked against ([`Model::fingerprint`]).
    base: [u8; 32],
    /// sha256 of the whole file: adapters are small, and a snapshot or a cached prefix must
    /// never be reused under an adapter that differs anywhere.
    fingerprint: [u8; 32],
}

/// An adapter as a session applies it: the adapter and the user's scale (1.0 as trained).
#[derive(Clone, Debug)]
pub struct ActiveAdapter {
    pub adapter: Arc<LoraAdapter>,
    pub scale: f32,
}

impl ActiveAdapter {
    /// What a session's cached rows and snapshots were computed under: the adapter's name, its
    /// fingerprint and the scale. Two sessions with equal ids compute the same rows.
    pub fn id(&self) -> String {
        let hex: String = self.adapter.fingerprint[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{}@{hex}x{}", self.adapter.name, self.scale)
    }
}

/// The forward pass reads an active adapter's pairs, scaled, through the model's contract.
impl SidePaths for ActiveAdapter {
    fn side_path(&self, slot: usize) -> Option<(Weights<'_>, Weights<'_>, f32)> {
        let adapter = &self.adapter;
        let file = adapter.file();
        let pair = adapter.pair(slot)?;
        let scale = adapter.pair_scale(pair, self.scale);
        Some((pair.a.weights(file), pair.b.weights(file), scale))
    }
}

impl std::fmt::Debug for LoraAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoraAdapter")
            .field("name", &self.name)
            .field("alpha", &self.alpha)
            .field("targets", &self.targets().len())
            .finish()
    }
}

fn bad(what: impl std::fmt::Display) -> EngineError {
    EngineError::Adapter(what.to_string())
}

impl LoraAdapter {
    /// Maps the adapter at `path` and checks it against `model`, the base it will run on.
    pub fn load(path: &Path, model: &Model) -> Result<Arc<LoraAdapter>> {
        let file = Gguf::open(path).map_err(|e| match e {
            EngineError::Gguf(msg) => bad(msg),
            other => other,
        })?;
        let fallback = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "adapter".into());
        Self::from_gguf(file, &fallback, model).map_err(|e| match e {
            EngineError::Adapter(msg) => bad(format!("{}: {msg}", path.display())),
            other => other,
        })
    }

    /// [`LoraAdapter::load`] of a parsed file; `fallback_name` names it when its metadata does not.
    pub fn from_gguf(file: Gguf, fallback_name: &str, model: &Model) -> Result<Arc<LoraAdapter>> {
        let (name, alpha) = read_header(&file, fallback_name, model)?;
        let (halves, ignored) = pair_up(&file, &name)?;
        let mut pairs = vec![None; model.weights.n_slots()];
        for (target, [a, b]) in halves {
            let (Some(a), Some(b)) = (a, b) else {
                return Err(bad(format!(
                    "{target}: lora_a and lora_b must both be present"
                )));
            };
            let (slot, pair) = check_pair(&file, model, target, a, b)?;
            check_finite(&file, &pair, target)?;
            pairs[slot] = Some(pair);
        }
        let fingerprint = fingerprint(&file);
        Ok(Arc::new(LoraAdapter {
            file,
            name,
            alpha,
            pairs,
            ignored,
            base: model.fingerprint(),
            fingerprint,
        }))
    }

    /// The adapter's name (`general.name`, else the file's stem).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn alpha(&self) -> f32 {
        self.alpha
    }

    /// The highest rank among its pairs.
    pub fn rank(&self) -> usize {
        self.pairs
            .iter()
            .flatten()
            .map(|p| p.rank)
            .max()
            .unwrap_or(0)
    }

    /// The base matrices it adapts, by GGUF name, in the model's order.
    pub fn targets(&self) -> Vec<String> {
        self.pairs
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_some())
            .map(|(slot, _)| slot_name(slot, self.pairs.len()))
            .collect()
    }

    /// The lowest layer it touches (the lm head counts as the layer past the last): a reader
    /// of hidden states at layers below it sees the base model's states.
    pub fn first_layer(&self) -> usize {
        let per_layer = crate::model::weights::PROJECTIONS.len();
        self.pairs
            .iter()
            .position(Option::is_some)
            .map_or(usize::MAX, |slot| slot / per_layer)
    }

    /// Norm vectors in the file that are not applied (llama.cpp skips them too).
    pub fn ignored(&self) -> &[String] {
        &self.ignored
    }

    /// Bytes of the file (mapped: resident as the side paths read it).
    pub fn file_bytes(&self) -> usize {
        self.file.file_bytes()
    }

    /// True when this adapter was loaded for `model`.
    pub fn fits(&self, model: &Model) -> bool {
        self.base == model.fingerprint()
    }

    pub fn fingerprint(&self) -> [u8; 32] {
        self.fingerprint
    }

    pub(crate) fn pair(&self, slot: usize) -> Option<&LoraPair> {
        self.pairs.get(slot).and_then(Option::as_ref)
    }

    pub(crate) fn file(&self) -> &Gguf {
        &self.file
    }

    /// `scale * alpha / r` for one pair, as llama.cpp's `get_scale`.
    pub(crate) fn pair_scale(&self, pair: &LoraPair, scale: f32) -> f32 {
        if self.alpha != 0.0 {
            scale * self.alpha / pair.rank as f32
        } else {
            scale
        }
    }
}

/// At most 64 bytes of `name`, cut at a character boundary: names go into snapshot headers and
/// reports.
pub(crate) fn short_name(name: &str) -> String {
    let mut end = name.len().min(64);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

/// A NaN or infinity in an adapter would silently poison every reply: refuse it at load (the
/// files are small, so reading them once costs little).
fn check_finite(file: &Gguf, pair: &LoraPair, target: &str) -> Result<()> {
    for (half, t) in [("lora_a", &pair.a), ("lora_b", &pair.b)] {
        let w = t.weights(file);
        let mut row = vec![0.0f32; t.cols];
        let row_bytes = t.size / t.rows.max(1);
        for r in 0..t.rows {
            kostant_kernels::dequantize_row(
                t.ty,
                &w.data[r * row_bytes..(r + 1) * row_bytes],
                &mut row,
            )?;
            if let Some(v) = row.iter().find(|v| !v.is_finite()) {
                return Err(bad(format!("{target}.{half}: row {r} holds {v}")));
            }
        }
    }
    Ok(())
}

fn fingerprint(file: &Gguf) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(file.bytes()).into()
}

/// The adapter's metadata: that it is a LoRA adapter for the model's architecture, its name
/// and its alpha.
fn read_header(file: &Gguf, fallback_name: &str, model: &Model) -> Result<(String, f32)> {
    let text = |key: &str| file.get_str_opt(key).map_err(|e| bad(e.to_string()));
    match text("general.type")? {
        Some("adapter") => {}
        Some(other) => {
            return Err(bad(format!(
                "general.type is {other:?}: this file is not an adapter"
            )))
        }
        None => return Err(bad("general.type is missing: this file is not an adapter")),
    }
    match text("adapter.type")? {
        Some("lora") => {}
        other => {
            return Err(bad(format!(
                "adapter.type is {other:?}; only \"lora\" adapters are supported"
            )))
        }
    }
    let name = short_name(
        text("general.name")?
            .filter(|n| !n.is_empty())
            .unwrap_or(fallback_name),
    );
    let base_arch = model.hparams.arch.name();
    let arch = text("general.architecture")?.unwrap_or("");
    if arch != base_arch {
        return Err(bad(format!(
            "adapter {name:?} is for the architecture {arch:?}, but the model {:?} is {base_arch:?}",
            model.name()
        )));
    }
    let alpha = file
        .get_f32_opt("adapter.lora.alpha")
        .map_err(|e| bad(e.to_string()))?
        .unwrap_or(0.0);
    if !alpha.is_finite() {
        return Err(bad(format!("adapter.lora.alpha is {alpha}")));
    }
    Ok((name, alpha))
}

/// Indices of each targeted matrix's A and B tensors, by the matrix's name.
type Halves<'f> = BTreeMap<&'f str, [Option<usize>; 2]>;

/// The file's tensors as (A, B) halves by the base matrix they target, and the norm vectors
/// that are skipped.
fn pair_up<'f>(file: &'f Gguf, name: &str) -> Result<(Halves<'f>, Vec<String>)> {
    let mut halves: Halves = Default::default();
    let mut ignored = Vec::new();
    for (i, t) in file.tensors().iter().enumerate() {
        if let Some(base) = t.name.strip_suffix(".lora_a") {
            halves.entry(base).or_default()[0] = Some(i);
        } else if let Some(base) = t.name.strip_suffix(".lora_b") {
            halves.entry(base).or_default()[1] = Some(i);
        } else if t.name.ends_with("_norm.weight") {
            // llama.cpp skips adapters' norm vectors too; applying them here would make
            // our outputs differ from every other runtime's.
            ignored.push(t.name.clone());
        } else {
            return Err(bad(format!(
                "tensor {}: not a LoRA tensor (names end in .lora_a or .lora_b)",
                t.name
            )));
        }
    }
    if halves.is_empty() {
        return Err(bad(format!("adapter {name:?} holds no LoRA tensors")));
    }
    Ok((halves, ignored))
}

/// Tensors `a` and `b` (indices into the file's tensors) as the pair on `target`: a matrix
/// of the model, types the kernels multiply, shapes that fit it, a rank within bounds.
fn check_pair(
    file: &Gguf,
    model: &Model,
    target: &str,
    a: usize,
    b: usize,
) -> Result<(usize, LoraPair)> {
    let slot = linear_slot(model, target).ok_or_else(|| {
        bad(if target == "token_embd.weight" {
            "adapters on the token embedding are not supported".to_string()
        } else {
            format!(
                "{target} is not a matrix of the model {:?} an adapter can target \
                 (hint: an adapter for another base model?)",
                model.name()
            )
        })
    })?;
    let w = model.weights.slot(slot);
    let (a, b) = (&file.tensors()[a], &file.tensors()[b]);
    for t in [a, b] {
        if !ADAPTER_TYPES.contains(&t.ty) {
            return Err(bad(format!(
                "tensor {}: type {} is not supported in adapters (F32, F16, BF16 are)",
                t.name,
                t.ty.name()
            )));
        }
        if t.dims.len() != 2 {
            return Err(bad(format!(
                "tensor {}: expected 2 dimensions, got {:?}",
                t.name, t.dims
            )));
        }
    }
    // ggml dims: W [cols, rows], A [cols, r], B [r, rows] (llama.cpp's shape rules).
    let rank = a.dims[1];
    if a.dims[0] != w.cols || b.dims[1] != w.rows || b.dims[0] != rank {
        return Err(bad(format!(
            "{target}: lora_a {:?} and lora_b {:?} do not fit the model's matrix [{}, {}] \
             (hint: an adapter for another base model?)",
            a.dims, b.dims, w.cols, w.rows
        )));
    }
    if rank == 0 || rank > MAX_RANK {
        return Err(bad(format!(
            "{target}: rank {rank} (1 to {MAX_RANK} allowed)"
        )));
    }
    let tensor = |t: &crate::gguf::TensorInfo| TensorRef {
        ty: t.ty,
        offset: t.offset,
        size: t.size,
        rows: t.rows(),
        cols: t.cols(),
        packed: None,
        slot: None,
    };
    let pair = LoraPair {
        a: tensor(a),
        b: tensor(b),
        rank,
    };
    Ok((slot, pair))
}
