//! Random-weight LoRA adapters for a given base: for tests, for the golden against llama.cpp
//! (the same file loaded by both), and for measuring an adapter's cost on model shapes that
//! have no trained adapter (`kostant synth --adapter`).

use kostant_kernels::{quantize_row, GgmlType};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::MAX_RANK;
use crate::gguf::{GgufWriter, Value};
use crate::model::weights::{slot_name, PROJECTIONS};
use crate::model::Model;
use crate::{EngineError, Result};

/// What [`random_adapter`] writes.
#[derive(Clone, Debug)]
pub struct SynthAdapter {
    pub name: String,
    pub rank: usize,
    /// `adapter.lora.alpha`: the side path is scaled by alpha / rank.
    pub alpha: f32,
    /// F32, F16 or BF16.
    pub ty: GgmlType,
    /// How far the adapter moves each layer's output: with unit-RMS inputs, each side path's
    /// outputs have about this RMS before the alpha / rank scale.
    pub strength: f32,
    pub seed: u64,
    /// The projections (names of [`PROJECTIONS`]) it targets in every layer.
    pub targets: Vec<String>,
    /// Also the lm head, when the model has one of its own.
    pub lm_head: bool,
}

impl SynthAdapter {
    /// Rank `rank` on all seven projections of every layer, alpha = 2 * rank (PEFT's common
    /// setting), F16 as llama.cpp's converter writes by default.
    pub fn new(rank: usize, seed: u64) -> SynthAdapter {
        SynthAdapter {
            name: format!("synth-r{rank}"),
            rank,
            alpha: 2.0 * rank as f32,
            ty: GgmlType::F16,
            strength: 0.05,
            seed,
            targets: PROJECTIONS.iter().map(|p| p.to_string()).collect(),
            lm_head: false,
        }
    }
}

/// A GGUF LoRA adapter for `model` with random A and B, uniformly drawn and scaled so that
/// `B A x` has roughly `spec.strength` RMS for unit-RMS `x`.
pub fn random_adapter(model: &Model, spec: &SynthAdapter) -> Result<GgufWriter> {
    let r = spec.rank;
    if r == 0 || r > MAX_RANK {
        return Err(EngineError::InvalidRequest(format!(
            "adapter rank {r} (1 to {MAX_RANK} allowed)"
        )));
    }
    if !matches!(spec.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
        return Err(EngineError::InvalidRequest(format!(
            "adapter type {} (F32, F16 or BF16)",
            spec.ty.name()
        )));
    }
    if let Some(bad) = spec
        .targets
        .iter()
        .find(|t| !PROJECTIONS.contains(&t.as_str()))
    {
        return Err(EngineError::InvalidRequest(format!(
            "{bad} is not a projection (one of {})",
            PROJECTIONS.join(", ")
        )));
    }
    let mut w = GgufWriter::new();
    w.metadata("general.type", Value::String("adapter".into()))
        .metadata(
            "general.architecture",
            Value::String(model.hparams.arch.name().into()),
        )
        .metadata("general.name", Value::String(spec.name.clone()))
        .metadata("adapter.type", Value::String("lora".into()))
        .metadata("adapter.lora.alpha", Value::F32(spec.alpha));
    let mut rng = SmallRng::seed_from_u64(spec.seed);
    let weights = &model.weights;
    let n_slots = weights.n_slots();
    let lm_head = n_slots - 1;
    for slot in 0..n_slots {
        let wanted = if slot == lm_head {
            spec.lm_head && weights.output.slot == Some(lm_head)
        } else {
            spec.targets
                .iter()
                .any(|t| *t == PROJECTIONS[slot % PROJECTIONS.len()])
        };
        if !wanted {
            continue;
        }
        let m = weights.slot(slot);
        let (rows, cols) = (m.rows, m.cols);
        // A x has entries of variance cols * a^2 / 3 for unit x: a = sqrt(3 / cols) makes it 1;
        // then B (A x) has variance r * b^2 / 3, and b = strength * sqrt(3 / r) gives strength^2.
        let a_amp = (3.0 / cols as f32).sqrt();
        let b_amp = spec.strength * (3.0 / r as f32).sqrt();
        let a: Vec<f32> = (0..r * cols)
            .map(|_| rng.gen_range(-a_amp..a_amp))
            .collect();
        let b: Vec<f32> = (0..rows * r)
            .map(|_| rng.gen_range(-b_amp..b_amp))
            .collect();
        let name = slot_name(slot, n_slots);
        w.tensor(
            &format!("{name}.lora_a"),
            &[cols, r],
            spec.ty,
            quantize_row(spec.ty, &a)?,
        );
        w.tensor(
            &format!("{name}.lora_b"),
            &[r, rows],
            spec.ty,
            quantize_row(spec.ty, &b)?,
        );
    }
    Ok(w)
}
