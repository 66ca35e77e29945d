//! One forward pass as a session asks for it: the batch's tokens through the model's own
//! architecture (`arch/`), then the hidden states and logits the batch wants.

use super::arch::{transformer, Extent};
use super::blocks::{linear_into, rms_norm, rms_norm_into, Pass, Workspace};
use super::hparams::HParams;
use super::Model;
use crate::batch::{Batch, LogitRows, Outputs};
use crate::kv_cache::KvCache;
use crate::{EngineError, Result};

/// Runs `batch.tokens` at positions `kv.len()..` through the model, appends their keys and
/// values to the cache, and appends to `out` the logits and hidden states the batch asks for
/// (the caller empties `out` before a batch it splits into several passes). With `shallow` and
/// no logits asked for, layers past the deepest tap are skipped; a cache filled that way only
/// serves later passes that stop as early.
pub fn forward(
    model: &Pass,
    kv: &mut KvCache,
    batch: &Batch,
    shallow: bool,
    ws: &mut Workspace,
    out: &mut Outputs,
) -> Result<()> {
    let hp = &model.hparams;
    let taps = batch.taps;
    check_taps(hp, taps)?;
    out.states.resize_with(taps.len(), Vec::new);
    // Without logits, layers past the deepest tap cannot change what is returned: skip them (a
    // guard reading an early layer pays only for the layers it reads).
    let n_layers = match batch.logits {
        LogitRows::None if shallow => taps
            .iter()
            .max()
            .map_or(hp.n_layer, |&t| (t + 1).min(hp.n_layer)),
        _ => hp.n_layer,
    };
    let n = batch.tokens.len();
    let order = model.order;
    let states = &mut out.states;
    // Only the last row's logits and no tap at the last layer (or the final norm): the last
    // layer's feed-forward runs on that row alone, as llama.cpp's does.
    let last_rows = match batch.logits {
        LogitRows::Last if n_layers == hp.n_layer && taps.iter().all(|&t| t + 1 < hp.n_layer) => 1,
        _ => n,
    };
    let extent = Extent {
        layers: n_layers,
        last_rows,
    };
    transformer(model, kv, batch.tokens, extent, order, ws, |l, x| {
        for (o, _) in states.iter_mut().zip(taps).filter(|(_, &t)| t == l) {
            o.extend_from_slice(x);
        }
    })?;
    tap_final_norm(model, &ws.x, taps, &mut out.states);
    let rows = match batch.logits {
        LogitRows::None => return Ok(()),
        LogitRows::Last => 1,
        LogitRows::All => n,
    };
    // The lm head runs only over the rows whose logits are wanted.
    let Workspace { x, logits, .. } = ws;
    let x = &x[x.len() - rows * hp.n_embd..];
    let normed = rms_norm(x, &model.weights.output_norm, hp.rms_eps);
    let l = linear_into(model, &model.weights.output, normed, rows, logits)?;
    softcap(l, hp.final_logit_softcap);
    out.logits.extend_from_slice(l);
    out.rows += rows;
    Ok(())
}

/// Appends the taps numbered `n_layer`, the final RMSNorm's output for every token of `x`, to
/// their buffers.
fn tap_final_norm(model: &Model, x: &[f32], taps: &[usize], out: &mut [Vec<f32>]) {
    let hp = &model.hparams;
    for (o, _) in out.iter_mut().zip(taps).filter(|(_, &t)| t == hp.n_layer) {
        let start = o.len();
        o.resize(start + x.len(), 0.0);
        rms_norm_into(x, &model.weights.output_norm, hp.rms_eps, &mut o[start..]);
    }
}

fn check_taps(hp: &HParams, taps: &[usize]) -> Result<()> {
    match taps.iter().find(|&&t| t > hp.n_layer) {
        Some(&bad) => Err(EngineError::InvalidRequest(format!(
            "hidden-state tap {bad} is past the model's {} layers",
            hp.n_layer
        ))),
        None => Ok(()),
    }
}

/// Squashes logits into (-cap, cap) as cap * tanh(logit / cap), for models trained so (Gemma 2);
/// a cap of 0 leaves them alone.
fn softcap(logits: &mut [f32], cap: f32) {
    if cap > 0.0 {
        for v in logits.iter_mut() {
            *v = (*v * (1.0 / cap)).tanh() * cap;
        }
    }
}
