//! PEFT LoRA adapters (a directory with `adapter_config.json` and `adapter_model.safetensors`,
//! as Hugging Face's PEFT saves them) converted to the GGUF adapter format for one base model:
//! the door users' adapters and ours both go through (`kostant adapter import`).
//!
//! The conversion does what llama.cpp's `convert_lora_to_gguf.py` does for the architectures we
//! run: PEFT's `lora_A` (r, in) and `lora_B` (out, r) keep their bytes (their ggml dims are
//! `[in, r]` and `[r, out]`); for `llama` the rows of q's and k's `lora_B` are permuted as the
//! converter permutes q and k themselves (rope's interleaved pairs, `LlamaModel.permute`), so
//! the adapter adapts the GGUF's rows. Everything is read as hostile input: a missing key, a
//! half pair, a shape or rank that disagrees, a non-finite value is a clear error.

use std::collections::BTreeMap;
use std::path::Path;

use kostant_kernels::GgmlType;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value as Json;

use super::{short_name, MAX_RANK};
use crate::gguf::{GgufWriter, Value};
use crate::model::hparams::Arch;
use crate::model::weights::{slot_name, PROJECTIONS};
use crate::model::Model;
use crate::{EngineError, Result};

/// The config file is a few hundred bytes; anything near this is not one.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// HF module names of a layer's projections, in [`PROJECTIONS`] order.
const HF_PROJECTIONS: [&str; 7] = [
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
];

/// What an import produced, for the CLI to report.
pub struct Imported {
    pub writer: GgufWriter,
    pub name: String,
    pub rank: usize,
    /// As written to the GGUF (rsLoRA's alpha is rescaled so that alpha / r is its scale).
    pub alpha: f32,
    /// Targeted matrices, by GGUF name.
    pub targets: Vec<String>,
}

fn bad(what: impl std::fmt::Display) -> EngineError {
    EngineError::Adapter(what.to_string())
}

/// Converts the PEFT adapter in `dir` for `model`; `name` defaults to the directory's name.
/// `out_type` (F32 or F16) converts every matrix to that type, as llama.cpp's converter's
/// `--outtype` does; None keeps each one's own type.
pub fn import(
    dir: &Path,
    model: &Model,
    name: Option<&str>,
    out_type: Option<GgmlType>,
) -> Result<Imported> {
    if let Some(t) = out_type {
        if t != GgmlType::F32 && t != GgmlType::F16 {
            return Err(bad(format!(
                "cannot write {t:?} matrices: F32 or F16 (or each tensor's own type)"
            )));
        }
    }
    let config = read_config(dir)?;
    let bytes = read_weights(dir)?;
    let tensors = SafeTensors::deserialize(&bytes)
        .map_err(|e| bad(format!("adapter_model.safetensors: {e}")))?;
    let found = find_pairs(&tensors, model)?;

    let name = short_name(name.unwrap_or_else(|| {
        dir.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("adapter")
    }));
    let alpha = if config.rslora {
        // rsLoRA scales by alpha / sqrt(r); the GGUF format by alpha / r.
        config.alpha * (config.rank as f32).sqrt()
    } else {
        config.alpha
    };
    let mut writer = GgufWriter::new();
    writer
        .metadata("general.type", Value::String("adapter".into()))
        .metadata(
            "general.architecture",
            Value::String(model.hparams.arch.name().into()),
        )
        .metadata("general.name", Value::String(name.clone()))
        .metadata("adapter.type", Value::String("lora".into()))
        .metadata("adapter.lora.alpha", Value::F32(alpha));
    let mut targets = Vec::new();
    for (slot, [a, b]) in found {
        let target = slot_name(slot, model.weights.n_slots());
        let (Some(a), Some(b)) = (a, b) else {
            return Err(bad(format!(
                "{target}: lora_A and lora_B must both be present"
            )));
        };
        let pair = Pair { slot, a: &a, b: &b };
        write_pair(
            &mut writer,
            &tensors,
            model,
            &config,
            out_type,
            pair,
            &target,
        )?;
        targets.push(target);
    }
    Ok(Imported {
        writer,
        name,
        rank: config.rank,
        alpha,
        targets,
    })
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> EngineError {
    let path = path.to_path_buf();
    move |source| EngineError::Io { path, source }
}

/// `adapter_config.json`, size-capped before it is parsed.
fn read_config(dir: &Path) -> Result<Config> {
    let config_path = dir.join("adapter_config.json");
    let len = std::fs::metadata(&config_path)
        .map_err(io_error(&config_path))?
        .len();
    if len > MAX_CONFIG_BYTES {
        return Err(bad(format!(
            "{}: {len} bytes is not a config",
            config_path.display()
        )));
    }
    let config: Json =
        serde_json::from_slice(&std::fs::read(&config_path).map_err(io_error(&config_path))?)
            .map_err(|e| bad(format!("{}: {e}", config_path.display())))?;
    Config::read(&config).map_err(|e| bad(format!("adapter_config.json: {e}")))
}

/// The bytes of `adapter_model.safetensors` (a pickled `.bin` is refused, never read).
fn read_weights(dir: &Path) -> Result<Vec<u8>> {
    let weights_path = dir.join("adapter_model.safetensors");
    if !weights_path.exists() && dir.join("adapter_model.bin").exists() {
        return Err(bad(
            "adapter_model.bin (a pickle) is not read, for safety: save the adapter as \
             safetensors (PEFT's default: safe_serialization=True)",
        ));
    }
    std::fs::read(&weights_path).map_err(io_error(&weights_path))
}

/// The tensors' names by the model's linear slot they target, A then B.
fn find_pairs(
    tensors: &SafeTensors,
    model: &Model,
) -> Result<BTreeMap<usize, [Option<String>; 2]>> {
    let mut found: BTreeMap<usize, [Option<String>; 2]> = BTreeMap::new();
    for key in tensors.names() {
        let (slot, half) = parse_key(key, model)?;
        let entry = found.entry(slot).or_default();
        if entry[half].replace(key.to_string()).is_some() {
            return Err(bad(format!("{key}: appears twice")));
        }
    }
    if found.is_empty() {
        return Err(bad("adapter_model.safetensors holds no LoRA tensors"));
    }
    Ok(found)
}

/// One targeted matrix: its linear slot and the names of its A and B tensors.
struct Pair<'n> {
    slot: usize,
    a: &'n str,
    b: &'n str,
}

/// Writes one pair as `<target>.lora_a` and `.lora_b`, converted to `out_type`, B's rows
/// permuted for q and k as llama.cpp's converter permutes Llama's.
fn write_pair(
    writer: &mut GgufWriter,
    tensors: &SafeTensors,
    model: &Model,
    config: &Config,
    out_type: Option<GgmlType>,
    pair: Pair,
    target: &str,
) -> Result<()> {
    let hp = &model.hparams;
    let Pair { slot, a, b } = pair;
    let w = model.weights.slot(slot);
    let a = read(tensors, a, config.rank, w.cols)?.convert(out_type, a)?;
    let mut b = read(tensors, b, w.rows, config.rank)?.convert(out_type, b)?;
    if hp.arch == Arch::Llama {
        let per = PROJECTIONS.len();
        match slot % per {
            0 if slot / per < hp.n_layer => b.bytes = permute_rows(&b.bytes, w.rows, hp.n_head)?,
            1 if slot / per < hp.n_layer => b.bytes = permute_rows(&b.bytes, w.rows, hp.n_head_kv)?,
            _ => {}
        }
    }
    writer.tensor(
        &format!("{target}.lora_a"),
        &[w.cols, config.rank],
        a.ty,
        a.bytes,
    );
    writer.tensor(
        &format!("{target}.lora_b"),
        &[config.rank, w.rows],
        b.ty,
        b.bytes,
    );
    Ok(())
}

/// The parts of `adapter_config.json` the conversion needs; anything it cannot represent is
/// refused rather than dropped.
struct Config {
    rank: usize,
    alpha: f32,
    rslora: bool,
}

impl Config {
    fn read(c: &Json) -> std::result::Result<Config, String> {
        if let Some(t) = c.get("peft_type").and_then(Json::as_str) {
            if t != "LORA" {
                return Err(format!("peft_type is {t:?}; only LORA adapters convert"));
            }
        }
        let flag = |key: &str| c.get(key).and_then(Json::as_bool).unwrap_or(false);
        if flag("use_dora") {
            return Err("DoRA adapters (use_dora) are not supported".into());
        }
        if flag("fan_in_fan_out") {
            return Err(
                "fan_in_fan_out adapters (GPT-2 style Conv1D layers) are not supported".into(),
            );
        }
        for key in ["rank_pattern", "alpha_pattern"] {
            if c.get(key)
                .and_then(Json::as_object)
                .is_some_and(|m| !m.is_empty())
            {
                return Err(format!(
                    "{key}: per-module ranks or alphas are not supported"
                ));
            }
        }
        if let Some(m) = c.get("modules_to_save").and_then(Json::as_array) {
            if !m.is_empty() {
                return Err(
                    "modules_to_save: fully trained modules cannot be carried by a LoRA file"
                        .into(),
                );
            }
        }
        match c.get("bias").and_then(Json::as_str) {
            None | Some("none") => {}
            Some(b) => return Err(format!("bias {b:?}: trained biases are not supported")),
        }
        let rank = c
            .get("r")
            .and_then(Json::as_u64)
            .ok_or("r (the rank) is missing or not a whole number")?;
        if rank == 0 || rank > MAX_RANK as u64 {
            return Err(format!("r is {rank} (1 to {MAX_RANK} allowed)"));
        }
        let alpha = c
            .get("lora_alpha")
            .and_then(Json::as_f64)
            .ok_or("lora_alpha is missing or not a number")? as f32;
        if !alpha.is_finite() {
            return Err(format!("lora_alpha is {alpha}"));
        }
        Ok(Config {
            rank: rank as usize,
            alpha,
            rslora: flag("use_rslora"),
        })
    }
}

/// The slot and half (0: A, 1: B) a PEFT tensor name stands for in `model`.
fn parse_key(key: &str, model: &Model) -> Result<(usize, usize)> {
    let unknown = || {
        bad(format!(
            "{key}: not a LoRA weight of a projection this engine can adapt \
             (expected base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight and the like)"
        ))
    };
    let rest = key.strip_prefix("base_model.model.").ok_or_else(unknown)?;
    let (module, half) = if let Some(m) = rest.strip_suffix(".lora_A.weight") {
        (m, 0)
    } else if let Some(m) = rest.strip_suffix(".lora_B.weight") {
        (m, 1)
    } else if rest.contains("lora_embedding") {
        return Err(bad(format!(
            "{key}: adapters on the embedding are not supported"
        )));
    } else {
        return Err(unknown());
    };
    let per = PROJECTIONS.len();
    let n_layer = model.weights.layers.len();
    if module == "lm_head" {
        let slot = n_layer * per;
        return match model.weights.output.slot {
            Some(s) if s == slot => Ok((slot, half)),
            _ => Err(bad(format!(
                "{key}: the model ties its lm head to the embedding, so it cannot be adapted"
            ))),
        };
    }
    let layer_rest = module.strip_prefix("model.layers.").ok_or_else(unknown)?;
    let (layer, proj) = layer_rest.split_once('.').ok_or_else(unknown)?;
    if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) {
        return Err(unknown());
    }
    let layer: usize = layer.parse().map_err(|_| unknown())?;
    if layer >= n_layer {
        return Err(bad(format!(
            "{key}: layer {layer}, but the model has {n_layer} (hint: an adapter for another base model?)"
        )));
    }
    let k = HF_PROJECTIONS
        .iter()
        .position(|p| *p == proj)
        .ok_or_else(unknown)?;
    Ok((layer * per + k, half))
}

struct Matrix {
    ty: GgmlType,
    bytes: Vec<u8>,
    values: Vec<f32>,
}

/// The tensor `key`, which must be (rows, cols), finite, F32, F16 or BF16.
fn read(tensors: &SafeTensors, key: &str, rows: usize, cols: usize) -> Result<Matrix> {
    let t = tensors
        .tensor(key)
        .map_err(|e| bad(format!("{key}: {e}")))?;
    if t.shape() != [rows, cols] {
        return Err(bad(format!(
            "{key}: shape {:?}, expected [{rows}, {cols}] (the rank in adapter_config.json, \
             and the base model's matrix; hint: an adapter for another base model?)",
            t.shape()
        )));
    }
    let (ty, width) = match t.dtype() {
        Dtype::F32 => (GgmlType::F32, 4),
        Dtype::F16 => (GgmlType::F16, 2),
        Dtype::BF16 => (GgmlType::BF16, 2),
        other => {
            return Err(bad(format!(
                "{key}: dtype {other:?} is not supported (F32, F16, BF16 are)"
            )))
        }
    };
    let data = t.data();
    if data.len() != rows * cols * width {
        return Err(bad(format!(
            "{key}: {} bytes for shape [{rows}, {cols}]",
            data.len()
        )));
    }
    let mut values = vec![0.0f32; rows * cols];
    kostant_kernels::dequantize_row(ty, data, &mut values)?;
    if let Some((i, v)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(bad(format!("{key}: element {i} is {v}")));
    }
    Ok(Matrix {
        ty,
        bytes: data.to_vec(),
        values,
    })
}

impl Matrix {
    /// The matrix as `to` (None: as it is). F16 rounds to nearest, ties to even, as PyTorch's
    /// and NumPy's casts do; a value beyond F16's range is an error, not an infinity.
    fn convert(self, to: Option<GgmlType>, key: &str) -> Result<Matrix> {
        let Some(to) = to.filter(|&t| t != self.ty) else {
            return Ok(self);
        };
        let bytes = match to {
            GgmlType::F32 => self.values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            _ => {
                if let Some((i, v)) = self
                    .values
                    .iter()
                    .enumerate()
                    .find(|(_, v)| v.abs() > f32::from(half::f16::MAX))
                {
                    return Err(bad(format!(
                        "{key}: element {i} is {v}, beyond F16's range: import it as F32"
                    )));
                }
                self.values
                    .iter()
                    .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                    .collect()
            }
        };
        Ok(Matrix {
            ty: to,
            bytes,
            values: self.values,
        })
    }
}

/// The rows of a (rows, ..) matrix in the order llama.cpp's converter gives q and k for
/// `n_heads` heads: within each head, row `j * half + i` of the Hugging Face layout becomes
/// row `2 * i + j` (the two halves of a head, interleaved pairwise).
pub(crate) fn permute_rows(bytes: &[u8], rows: usize, n_heads: usize) -> Result<Vec<u8>> {
    if n_heads == 0
        || rows == 0
        || !rows.is_multiple_of(n_heads)
        || !(rows / n_heads).is_multiple_of(2)
        || !bytes.len().is_multiple_of(rows)
    {
        return Err(bad(format!(
            "cannot permute {rows} rows into {n_heads} heads of even width"
        )));
    }
    let row = bytes.len() / rows;
    let head = rows / n_heads;
    let half = head / 2;
    let mut out = vec![0u8; bytes.len()];
    for h in 0..n_heads {
        for j in 0..2 {
            for i in 0..half {
                let from = h * head + j * half + i;
                let to = h * head + 2 * i + j;
                out[to * row..(to + 1) * row].copy_from_slice(&bytes[from * row..(from + 1) * row]);
            }
        }
    }
    Ok(out)
}
