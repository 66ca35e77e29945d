//! The Llama-family forward pass (Llama 2/3, SmolLM2, Qwen2.5), read top to bottom:
//! embed -> for each layer { rms_norm, attention with rope over the kv cache, residual,
//! rms_norm, swiglu feed-forward, residual } -> rms_norm -> lm head.
//!
//! Activations are f32, (n_tokens, width) row-major. Weights stay packed in the mmap and go
//! straight to the kernels.

use half::f16;
use rayon::prelude::*;

use kostant_kernels::attention::{hsum8, F16SumOrder};
use kostant_kernels::attention_group::{dot_f16_rows_group, weighted_sum_f16_rows_group};
use kostant_kernels::attention_q8::{
    dot_q8_0_rows, quantize_q8_0_kv, weighted_sum_q8_0_rows, KvBlockQ8_0, Q8_0_BLOCK,
};
use kostant_kernels::norm::{rms_norm_row, rms_scale};
use kostant_kernels::{dequantize_row, exp_f32, matmul_input, matvec_fused, Input, PackedWeights};

use super::hparams::{HParams, RopeLayout};
use super::weights::{LayerWeights, TensorRef};
use super::Model;
use crate::batch::{Batch, LogitRows, Outputs};
use crate::kv_cache::{HeadView, KvCache};
use crate::{EngineError, Result};

/// Runs `batch.tokens` at positions `kv.len()..` through the model, appends their keys and
/// values to the cache, and appends to `out` the logits and hidden states the batch asks for
/// (the caller empties `out` before a batch it splits into several passes). With `shallow` and
/// no logits asked for, layers past the deepest tap are skipped; a cache filled that way only
/// serves later passes that stop as early.
pub fn forward(
    model: &Model,
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
    let order = F16SumOrder::for_batch(if batch.as_steps { 1 } else { n });
    let states = &mut out.states;
    transformer(model, kv, batch.tokens, n_layers, order, ws, |l, x| {
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

/// The transformer blocks: embeds `tokens`, runs the first `n_layers` layers (calling
/// `after_layer(l, x)` with the residual stream after layer `l`), appends the keys and values to
/// the cache and leaves the last run layer's residual stream, (n, n_embd), before the final
/// norm, in `ws.x`. A cache filled with fewer than all layers only serves later calls that also
/// stop early.
fn transformer(
    model: &Model,
    kv: &mut KvCache,
    tokens: &[u32],
    n_layers: usize,
    order: F16SumOrder,
    ws: &mut Workspace,
    mut after_layer: impl FnMut(usize, &[f32]),
) -> Result<()> {
    let hp = &model.hparams;
    let w = &model.weights;
    let n = tokens.len();
    let pos = kv.len();
    if n == 0 {
        return Err(EngineError::InvalidRequest("no tokens to run".into()));
    }
    if pos + n > kv.capacity() {
        return Err(EngineError::ContextOverflow {
            prompt_tokens: pos + n,
            context: kv.capacity(),
        });
    }

    let Workspace {
        x, angles, scratch, ..
    } = ws;
    // x: (n, n_embd). Every layer rotates the same positions: their angles are computed once
    // per pass.
    embed(model, tokens, x)?;
    model.rope.angles_for(hp, pos, n, angles);
    for (l, layer) in w.layers.iter().enumerate().take(n_layers) {
        let xn = rms_norm(x, &layer.attn_norm, hp.rms_eps);
        let att = attention(model, layer, l, kv, xn, n, pos, order, angles, scratch)?;
        add_in_place(x, att);

        let xn = rms_norm(x, &layer.ffn_norm, hp.rms_eps);
        let ffn = swiglu(model, layer, xn, n, scratch)?;
        add_in_place(x, ffn);
        after_layer(l, x);
    }
    kv.advance(n);
    Ok(())
}

/// Looks up each token's row of the embedding table into `x`: (n, n_embd).
fn embed(model: &Model, tokens: &[u32], x: &mut Vec<f32>) -> Result<()> {
    let e = model.hparams.n_embd;
    let table = &model.weights.token_embd;
    let row_bytes = table.size / table.rows;
    let bytes = table.bytes(&model.file);
    let x = sized(x, tokens.len() * e);
    for (t, &id) in tokens.iter().enumerate() {
        let id = id as usize;
        if id >= table.rows {
            return Err(EngineError::InvalidRequest(format!(
                "token id {id} is outside the vocabulary of {}",
                table.rows
            )));
        }
        dequantize_row(
            table.ty,
            &bytes[id * row_bytes..(id + 1) * row_bytes],
            &mut x[t * e..(t + 1) * e],
        )?;
    }
    Ok(())
}

/// y = x W^T for n tokens: (n, cols) -> (n, rows), into a buffer that is reused: resized (and
/// so written) only when its length changes, since the matmul overwrites every element.
fn linear_into<'a, 'x>(
    model: &Model,
    w: &TensorRef,
    x: impl Into<Input<'x>>,
    n: usize,
    out: &'a mut Vec<f32>,
) -> Result<&'a mut [f32]> {
    let x = x.into();
    sized(out, n * w.rows);
    match w.packed {
        Some(i) => model.weights.packed[i].matmul_input(x, n, out)?,
        None => matmul_input(&w.weights(&model.file), x, n, out)?,
    }
    Ok(out)
}

/// Several [`linear_into`]s of the same input. For one token with every matrix repacked they
/// run as one kernel call ([`matvec_fused`]): one quantization of `x` and one fork-join of the
/// pool for the set instead of one each. (An A/B at 2 threads could not tell it from the
/// unfused calls through this machine's noise; see BENCHMARKS.md run 5.)
fn linear_fused<'a, const N: usize>(
    model: &Model,
    ws: [&TensorRef; N],
    x: Input,
    n: usize,
    mut outs: [&'a mut Vec<f32>; N],
) -> Result<[&'a mut [f32]; N]> {
    let packed = ws.map(|w| w.packed.map(|i| &model.weights.packed[i]));
    if n == 1 && packed.iter().all(Option::is_some) {
        // Every entry was just checked to be Some.
        let packed: [&PackedWeights; N] =
            packed.map(|p| p.expect("checked: every matrix is packed"));
        for (o, w) in outs.iter_mut().zip(ws) {
            sized(o, w.rows);
        }
        matvec_fused(&packed, x, &mut outs.each_mut().map(|o| &mut o[..]))?;
    } else {
        // Each matmul normalises `x` again as it quantizes it (an `Input::RmsNormed`): a pass
        // over n x n_embd values per matrix, small beside the matmul, and no stored copy.
        for (o, w) in outs.iter_mut().zip(ws) {
            linear_into(model, w, x, n, o)?;
        }
    }
    Ok(outs.map(|o| &mut o[..]))
}

/// `buf` at length `len`, its contents unspecified (zeros where it grew).
fn sized(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if buf.len() != len {
        buf.clear();
        buf.resize(len, 0.0);
    }
    buf
}

/// Every buffer a forward pass writes, planned when a session starts ([`Workspace::plan`]) and
/// reused by every pass after it: decoding a token allocates nothing, and a prompt's megabytes
/// of activations are not page-faulted in again layer after layer.
pub struct Workspace {
    /// The residual stream, (n, n_embd). Its RMSNorm is never stored: the matmuls normalise
    /// each row as they quantize it.
    x: Vec<f32>,
    angles: Angles,
    scratch: Scratch,
    /// The lm head's output for the rows whose logits a batch wants.
    logits: Vec<f32>,
}

impl Workspace {
    /// Room for passes of up to `max_tokens` tokens over a context of `n_ctx`, with the attention
    /// of one token split over `threads` workers. Longer passes or other pools still work; their
    /// buffers grow once, on first use.
    pub fn plan(hp: &HParams, max_tokens: usize, n_ctx: usize, threads: usize) -> Workspace {
        let n = max_tokens.max(1);
        let q_dim = hp.n_head * hp.head_dim;
        let with = |len: usize| Vec::with_capacity(len);
        let head = || HeadScratch::planned(hp, n_ctx);
        Workspace {
            x: with(n * hp.n_embd),
            angles: Angles {
                half: hp.rope_dims / 2,
                cos: with(n * (hp.rope_dims / 2)),
                sin: with(n * (hp.rope_dims / 2)),
            },
            scratch: Scratch {
                q: with(n * q_dim),
                k: with(n * hp.kv_dim()),
                v: with(n * hp.kv_dim()),
                heads: with(n * q_dim),
                att: with(n * hp.n_embd),
                gate: with(n * hp.n_ff),
                up: with(n * hp.n_ff),
                ffn: with(n * hp.n_embd),
                exp: with(n * hp.n_ff),
                head: head(),
                per_thread: (0..threads.max(1)).map(|_| head()).collect(),
            },
            logits: with(hp.n_vocab),
        }
    }

    /// The bytes [`Workspace::plan`] reserves for the same arguments (the memory plan's scratch).
    pub fn planned_bytes(hp: &HParams, max_tokens: usize, n_ctx: usize, threads: usize) -> usize {
        let n = max_tokens.max(1);
        let q_dim = hp.n_head * hp.head_dim;
        // x, att, ffn; q, heads; k, v; gate, up, exp; cos, sin
        let per_token =
            3 * hp.n_embd + 2 * q_dim + 2 * hp.kv_dim() + 3 * hp.n_ff + 2 * (hp.rope_dims / 2);
        let floats = n * per_token + hp.n_vocab;
        4 * floats + (1 + threads.max(1)) * HeadScratch::planned_bytes(hp, n_ctx)
    }

    /// The bytes reserved now.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        let s = &self.scratch;
        let floats = [
            &self.x,
            &self.angles.cos,
            &self.angles.sin,
            &s.q,
            &s.k,
            &s.v,
            &s.heads,
            &s.att,
            &s.gate,
            &s.up,
            &s.ffn,
            &s.exp,
            &self.logits,
        ]
        .iter()
        .map(|v| v.capacity())
        .sum::<usize>();
        let heads = std::iter::once(&s.head)
            .chain(&s.per_thread)
            .map(HeadScratch::bytes)
            .sum::<usize>();
        4 * floats + heads
    }
}

/// The activation buffers of a layer, shared by all layers of a pass.
struct Scratch {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    heads: Vec<f32>,
    att: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    ffn: Vec<f32>,
    exp: Vec<f32>,
    /// Attention on the calling thread.
    head: HeadScratch,
    /// Attention of one token split over the pool: one per worker.
    per_thread: Vec<HeadScratch>,
}

/// RMSNorm (Zhang & Sennrich 2019) of each row of `x`, scaled by `weight`, as the next
/// matmuls' input: they normalise each row as they quantize it, so the normalised rows are
/// never stored (kernels' `norm` module).
fn rms_norm<'a>(x: &'a [f32], weight: &'a [f32], eps: f32) -> Input<'a> {
    Input::RmsNormed {
        rows: x,
        weight,
        eps,
    }
}

/// [`rms_norm`] written out, for a reader of the normalised rows themselves (the guard's tap
/// after the final norm).
fn rms_norm_into(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let d = weight.len();
    let one = |(row, o): (&[f32], &mut [f32])| rms_norm_row(row, weight, rms_scale(row, eps), o);
    if x.len() >= PAR_MIN_ELEMENTS {
        x.par_chunks_exact(d)
            .zip(out.par_chunks_exact_mut(d))
            .for_each(one);
    } else {
        x.chunks_exact(d).zip(out.chunks_exact_mut(d)).for_each(one);
    }
}

/// One attention task's scratch: its query heads rounded to f16, their scores, the weighted
/// sums' lanes, a query head as Q8_0. Each is at least as long as the task needs; [`parts`]
/// cuts them to size.
///
/// [`parts`]: HeadScratch::parts
struct HeadScratch {
    q_h: Vec<f32>,
    probs: Vec<f32>,
    lanes: Vec<f32>,
    q_blocks: Vec<KvBlockQ8_0>,
}

impl HeadScratch {
    /// Exactly what a task over `visible` positions and `lanes` summing lanes needs.
    fn new(hp: &HParams, visible: usize, lanes: usize) -> HeadScratch {
        let (group, hd) = (hp.n_head / hp.n_head_kv, hp.head_dim);
        HeadScratch {
            q_h: vec![0.0; group * hd],
            probs: vec![0.0; group * visible],
            lanes: vec![0.0; group * lanes * hd],
            q_blocks: vec![KvBlockQ8_0::default(); hd / Q8_0_BLOCK],
        }
    }

    /// Enough for any task over a context of `n_ctx` positions.
    fn planned(hp: &HParams, n_ctx: usize) -> HeadScratch {
        HeadScratch::new(hp, n_ctx, Self::max_lanes())
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        4 * (self.q_h.capacity() + self.probs.capacity() + self.lanes.capacity())
            + size_of::<KvBlockQ8_0>() * self.q_blocks.capacity()
    }

    /// The bytes [`HeadScratch::planned`] reserves.
    fn planned_bytes(hp: &HParams, n_ctx: usize) -> usize {
        let (group, hd) = (hp.n_head / hp.n_head_kv, hp.head_dim);
        4 * (group * hd + group * n_ctx + group * Self::max_lanes() * hd)
            + size_of::<KvBlockQ8_0>() * (hd / Q8_0_BLOCK)
    }

    /// The most summing lanes any pass uses (decode's and a prompt's orders differ).
    fn max_lanes() -> usize {
        [1, 2]
            .map(|n| F16SumOrder::for_batch(n).lanes())
            .into_iter()
            .max()
            .unwrap_or(0)
    }

    /// The four buffers cut to a task's sizes; a buffer too short (a pass longer than planned)
    /// grows first.
    fn parts(
        &mut self,
        q_h: usize,
        probs: usize,
        lanes: usize,
        q_blocks: usize,
    ) -> (&mut [f32], &mut [f32], &mut [f32], &mut [KvBlockQ8_0]) {
        fn at_least<T: Clone + Default>(v: &mut Vec<T>, len: usize) -> &mut [T] {
            if v.len() < len {
                v.resize(len, T::default());
            }
            &mut v[..len]
        }
        (
            at_least(&mut self.q_h, q_h),
            at_least(&mut self.probs, probs),
            at_least(&mut self.lanes, lanes),
            at_least(&mut self.q_blocks, q_blocks),
        )
    }
}

/// Below this many multiply-adds (query heads x visible positions x head width) attention runs
/// on the calling thread.
const ATTENTION_PAR_MIN_MACS: usize = 1 << 18;

/// Below this many elements the elementwise steps (norms, rope, SiLU, residual adds) run on
/// the calling thread; above it (a prompt) they are split over the pool in pieces of at least
/// [`PAR_CHUNK`] elements. Serial, they held the second core idle for about a tenth of a
/// 2-thread prefill. Each element's arithmetic is the same either way.
const PAR_MIN_ELEMENTS: usize = 4 * PAR_CHUNK;
const PAR_CHUNK: usize = 4096;

/// Multi-head self-attention with grouped-query heads (Ainslie et al. 2023) over the kv cache.
/// Writes this chunk's keys and values into the cache. Returns the output projection, (n, n_embd).
#[allow(clippy::too_many_arguments)]
fn attention<'s>(
    model: &Model,
    layer: &LayerWeights,
    l: usize,
    kv: &mut KvCache,
    xn: Input,
    n: usize,
    pos: usize,
    order: F16SumOrder,
    angles: &Angles,
    scratch: &'s mut Scratch,
) -> Result<&'s [f32]> {
    let hp = &model.hparams;
    let (hd, kv_dim, q_dim) = (hp.head_dim, hp.kv_dim(), hp.n_head * hp.head_dim);
    let Scratch {
        q,
        k,
        v,
        heads,
        att,
        head,
        per_thread,
        ..
    } = scratch;

    // (n, n_head * head_dim), (n, n_head_kv * head_dim) twice
    let [q, k, v] = linear_fused(model, [&layer.wq, &layer.wk, &layer.wv], xn, n, [q, k, v])?;
    add_bias(q, layer.bq.as_deref());
    add_bias(k, layer.bk.as_deref());
    add_bias(v, layer.bv.as_deref());
    rope(q, q_dim, hp, angles);
    rope(k, kv_dim, hp, angles);
    kv.append(l, k, v);
    let q = &*q;

    let cached = kv.layer(l); // pos + n positions of keys and values
    let group = hp.n_head / hp.n_head_kv;
    let scale = 1.0 / (hd as f32).sqrt();
    // (n, n_head * head_dim); every head's slice is written whole below.
    let out = sized(heads, n * q_dim);

    // One task per (token, kv head): it serves the `group` query heads that share that head's
    // cached keys and values (read in place from the cache) and writes only its own slice
    // of `out` (those query heads are adjacent), so tasks never share mutable state.
    let visible_max = pos + n;
    let body = |s: &mut HeadScratch, (i, o): (usize, &mut [f32])| {
        let (t, g) = (i / hp.n_head_kv, i % hp.n_head_kv);
        let visible = pos + t + 1; // causal: the token sees itself and everything before it
                                   // The group's query heads are adjacent in q, as in `out`.
        let q_group = &q[t * q_dim + g * group * hd..t * q_dim + (g + 1) * group * hd];
        let (q_h, probs, lanes, q_blocks) = s.parts(
            group * hd,
            group * visible,
            group * order.lanes() * hd,
            hd / Q8_0_BLOCK,
        );
        // The head's rows (visible_max of them), one after another.
        match cached.head(g) {
            HeadView::F16 { k, v } => {
                // The queries meet the f16 keys at f16 precision, as in llama.cpp. The
                // group shares each key and value row as it is read (the same bits as
                // head by head).
                for (a, &b) in q_h.iter_mut().zip(q_group) {
                    *a = f16::from_f32(b).to_f32();
                }
                dot_f16_rows_group(q_h, hd, k, hd, 0, scale, order, probs);
                probs.chunks_exact_mut(visible).for_each(softmax);
                weighted_sum_f16_rows_group(probs, hd, v, hd, 0, order, lanes, o);
            }
            HeadView::Q8_0 { k, v } => {
                let probs = &mut probs[..visible];
                for (q_src, o_h) in q_group.chunks_exact(hd).zip(o.chunks_exact_mut(hd)) {
                    // The query is quantized like the keys, so each block's dot is exact
                    // in integers (as llama.cpp does with a q8_0 K cache). The cache made
                    // sure heads are whole blocks.
                    quantize_q8_0_kv(q_src, q_blocks);
                    let stride = hd / Q8_0_BLOCK;
                    dot_q8_0_rows(q_blocks, k, stride, 0, scale, probs);
                    softmax(probs);
                    weighted_sum_q8_0_rows(probs, v, stride, 0, o_h);
                }
            }
        }
    };
    let task = group * hd;
    if n * hp.n_head * visible_max * hd < ATTENTION_PAR_MIN_MACS {
        // Decode over a short context is a few microseconds of work: splitting it cost more
        // than it saved.
        out.chunks_mut(task).enumerate().for_each(|c| body(head, c));
    } else if n == 1 {
        // One token: every task costs the same, so each worker's planned scratch takes an
        // equal run of tasks, and nothing is allocated.
        let per = hp.n_head_kv.div_ceil(per_thread.len().max(1));
        out.par_chunks_mut(per * task)
            .zip(per_thread.par_iter_mut())
            .enumerate()
            .for_each(|(c, (o, s))| {
                for (j, o) in o.chunks_mut(task).enumerate() {
                    body(s, (c * per + j, o));
                }
            });
    } else {
        // A prompt: later tokens see more positions, so rayon balances the tasks, and each of
        // its jobs makes its own scratch (once per pass, not per token).
        let init = || HeadScratch::new(hp, visible_max, order.lanes());
        out.par_chunks_mut(task)
            .enumerate()
            .for_each_init(init, body);
    }

    Ok(linear_into(model, &layer.wo, out, n, att)?)
}

/// Rotary position embedding (Su et al. 2021) on every head of each row of `x`: (n, width),
/// rows at positions pos, pos+1, ...
fn rope(x: &mut [f32], width: usize, hp: &HParams, angles: &Angles) {
    let hd = hp.head_dim;
    let half = angles.half;
    let one = |(t, row): (usize, &mut [f32])| {
        let cos = &angles.cos[t * half..(t + 1) * half];
        let sin = &angles.sin[t * half..(t + 1) * half];
        for head in row.chunks_exact_mut(hd) {
            for i in 0..half {
                let (a, b) = match hp.arch.rope_layout() {
                    RopeLayout::Adjacent => (2 * i, 2 * i + 1),
                    RopeLayout::NeoX => (i, i + half),
                };
                let (x0, x1) = (head[a], head[b]);
                // The first product fused into the add, as llama.cpp's compiled C rounds it
                // (GCC contracts `x0*c - x1*s` into one FMA), so the rotated bits agree.
                head[a] = x0.mul_add(cos[i], -(x1 * sin[i]));
                head[b] = x0.mul_add(sin[i], x1 * cos[i]);
            }
        }
    };
    if x.len() >= PAR_MIN_ELEMENTS {
        x.par_chunks_exact_mut(width).enumerate().for_each(one);
    } else {
        x.chunks_exact_mut(width).enumerate().for_each(one);
    }
}

/// cos and sin of every rotated pair's angle for the `n` positions of one forward pass, position
/// after position (`half` pairs each).
struct Angles {
    half: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

/// The rotation speeds: pair i turns by pos * base^(-2i/d) (divided by Llama 3's per-frequency
/// factor when the file has them).
pub(crate) struct Rope {
    /// base^(-2/d): each pair turns this much slower than the one before.
    theta_scale: f32,
    factors: Option<Vec<f32>>,
}

impl Rope {
    pub(crate) fn new(hp: &HParams, factors: Option<Vec<f32>>) -> Rope {
        Rope {
            theta_scale: hp.rope_theta.powf(-2.0 / hp.rope_dims as f32),
            factors,
        }
    }

    /// [`Rope::angles`] for positions `pos..pos + n`, into `out`.
    fn angles_for(&self, hp: &HParams, pos: usize, n: usize, out: &mut Angles) {
        let half = hp.rope_dims / 2;
        out.half = half;
        let cos = sized(&mut out.cos, n * half);
        let sin = sized(&mut out.sin, n * half);
        for (t, (c, s)) in cos
            .chunks_exact_mut(half.max(1))
            .zip(sin.chunks_exact_mut(half.max(1)))
            .enumerate()
        {
            self.angles((pos + t) as f32, hp.rope_freq_scale, c, s);
        }
    }

    /// cos and sin of every pair's angle at position `p`. The angle is built by repeated
    /// multiplication in f32, exactly as llama.cpp builds it, so both engines rotate by the
    /// same bits.
    fn angles(&self, p: f32, freq_scale: f32, cos: &mut [f32], sin: &mut [f32]) {
        let mut theta = p;
        for i in 0..cos.len() {
            let ff = self.factors.as_ref().map_or(1.0, |f| f[i]);
            let (s, c) = (freq_scale * (theta / ff)).sin_cos();
            cos[i] = c;
            sin[i] = s;
            theta *= self.theta_scale;
        }
    }
}

/// Softmax in place, subtracting the max for stability, computed as ggml computes it: its
/// polynomial exp ([`exp_f32`]), each group of 8 terms added in f32 in its SIMD lane order, the
/// group sums accumulated in f64, then one multiply by the f32 reciprocal.
fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for v in x.iter_mut() {
        *v -= max;
    }
    exp_f32(x);
    let mut sum = 0.0f64;
    for chunk in x.chunks(8) {
        let mut lanes = [0.0f32; 8]; // ggml's rows are padded with masked (zero) terms
        lanes[..chunk.len()].copy_from_slice(chunk);
        sum += hsum8(&lanes) as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// The SwiGLU feed-forward block (Shazeer 2020): down(silu(gate(x)) * up(x)). (n, n_embd)
fn swiglu<'s>(
    model: &Model,
    layer: &LayerWeights,
    xn: Input,
    n: usize,
    scratch: &'s mut Scratch,
) -> Result<&'s [f32]> {
    let Scratch {
        gate, up, ffn, exp, ..
    } = scratch;
    let [gate, up] = linear_fused(model, [&layer.w_gate, &layer.w_up], xn, n, [gate, up])?; // (n, n_ff)
    silu_mul(gate, up, exp);
    Ok(linear_into(model, &layer.w_down, gate, n, ffn)?)
}

/// gate = silu(gate) * up, with SiLU as x / (1 + e^-x) on ggml's exp so the feed-forward
/// activations round as llama.cpp's do. `e` is scratch.
fn silu_mul(gate: &mut [f32], up: &[f32], e: &mut Vec<f32>) {
    let e = sized(e, gate.len());
    let one = |((gate, up), e): ((&mut [f32], &[f32]), &mut [f32])| {
        for (e, &g) in e.iter_mut().zip(gate.iter()) {
            *e = -g;
        }
        exp_f32(e);
        for ((g, &u), &e) in gate.iter_mut().zip(up).zip(e.iter()) {
            *g = *g / (1.0 + e) * u;
        }
    };
    if gate.len() >= PAR_MIN_ELEMENTS {
        gate.par_chunks_mut(PAR_CHUNK)
            .zip(up.par_chunks(PAR_CHUNK))
            .zip(e.par_chunks_mut(PAR_CHUNK))
            .for_each(one);
    } else {
        one(((gate, up), e));
    }
}

fn add_bias(x: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias {
        for row in x.chunks_exact_mut(b.len()) {
            add_in_place(row, b);
        }
    }
}

fn add_in_place(x: &mut [f32], y: &[f32]) {
    let one = |(x, y): (&mut [f32], &[f32])| {
        for (a, &b) in x.iter_mut().zip(y) {
            *a += b;
        }
    };
    if x.len() >= PAR_MIN_ELEMENTS {
        x.par_chunks_mut(PAR_CHUNK)
            .zip(y.par_chunks(PAR_CHUNK))
            .for_each(one);
    } else {
        one((x, y));
    }
}
