//! The blocks every architecture's forward pass is built from (`model/arch/`): embedding
//! lookup, linear layers over packed weights, RMSNorm, rotary embeddings, grouped-query
//! attention over the kv cache (optionally through a sliding window), the gated feed-forwards
//! (SwiGLU, GeGLU), residual adds, and the buffers they all write.
//!
//! Activations are f32, (n_tokens, width) row-major. Weights stay packed in the mmap and go
//! straight to the kernels. Each block rounds as ggml's operation does, so a forward pass built
//! from them follows llama.cpp's greedy tokens.

use kostant_kernels::rope::PairLayout;
use rayon::prelude::*;

use kostant_kernels::attention::F16SumOrder;
use kostant_kernels::attention_q8::{KvBlockQ8_0, Q8_0_BLOCK};
use kostant_kernels::norm::{rms_norm_row, rms_scale};
use kostant_kernels::{
    dequantize_row, exp_f32, matmul_input, matvec_fused, matvec_fused_then, Input, PackedWeights,
};

use super::hparams::{HParams, RopeLayout};
use super::side_path::{add_side_paths, with_side_paths_one_token, SidePaths};
use super::weights::{LayerWeights, TensorRef};
use super::Model;
use crate::kv_cache::{HeadBuffers, HeadSpan, KvCache};
use crate::{EngineError, Result};

/// Looks up each token's row of the embedding table into `x`: (n, n_embd).
pub(super) fn embed(model: &Model, tokens: &[u32], x: &mut Vec<f32>) -> Result<()> {
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

/// What one forward pass multiplies by: the model's weights and, when the session has one, an
/// adapter's side paths on them ([`super::side_path::SidePaths`]). It derefs to the model, so the blocks
/// read hyper-parameters and weights as they would from the model itself.
pub(crate) struct Pass<'a> {
    pub model: &'a Model,
    pub adapter: Option<&'a dyn SidePaths>,
    /// The order the pass sums its f16 dots in ([`crate::Batch::sum_order`]): attention's and the
    /// adapter's side paths'.
    pub order: F16SumOrder,
}

impl std::ops::Deref for Pass<'_> {
    type Target = Model;
    fn deref(&self) -> &Model {
        self.model
    }
}

/// y = x W^T for n tokens: (n, cols) -> (n, rows), into a buffer that is reused: resized (and
/// so written) only when its length changes, since the matmul overwrites every element.
pub(super) fn linear_into<'a, 'x>(
    model: &Pass,
    w: &TensorRef,
    x: impl Into<Input<'x>>,
    n: usize,
    out: &'a mut Vec<f32>,
) -> Result<&'a mut [f32]> {
    let x = x.into();
    sized(out, n * w.rows);
    match (model.adapter, w.packed) {
        (Some(adapter), Some(i)) if n == 1 => {
            let packed = [&model.weights.packed[i]];
            with_side_paths_one_token(adapter, [w.slot], x, ([w.rows], model.order), |add| {
                matvec_fused_then(&packed, x, &mut [&mut out[..]], Some(add))
            })??;
        }
        _ => {
            base_matmul(model, w, x, n, out)?;
            if let Some(adapter) = model.adapter {
                add_side_paths(adapter, [w.slot], x, (n, model.order), [&mut out[..]])?;
            }
        }
    }
    Ok(out)
}

/// The base model's part of [`linear_into`]: `out` = x W^T, `out` already sized.
fn base_matmul(model: &Pass, w: &TensorRef, x: Input, n: usize, out: &mut [f32]) -> Result<()> {
    match w.packed {
        Some(i) => model.weights.packed[i].matmul_input(x, n, out)?,
        None => matmul_input(&w.weights(&model.file), x, n, out)?,
    }
    Ok(())
}

/// Several [`linear_into`]s of the same input. For one token with every matrix repacked they
/// run as one kernel call ([`matvec_fused`]): one quantization of `x` and one fork-join of the
/// pool for the set instead of one each (an A/B at 2 threads could not tell it from the
/// unfused calls through this machine's noise; see docs/benchmarks-log.md run 5), and an adapter's B
/// stages ride in that call's tasks. Otherwise an adapter's side paths on them run as one
/// call after the matmuls, `x` normalised once for all of them.
pub(super) fn linear_fused<'a, const N: usize>(
    model: &Pass,
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
        let mut targets = outs.each_mut().map(|o| &mut o[..]);
        match model.adapter {
            None => matvec_fused(&packed, x, &mut targets)?,
            Some(adapter) => {
                let (slots, rows) = (ws.map(|w| w.slot), ws.map(|w| w.rows));
                with_side_paths_one_token(adapter, slots, x, (rows, model.order), |add| {
                    matvec_fused_then(&packed, x, &mut targets, Some(add))
                })??;
            }
        }
        return Ok(outs.map(|o| &mut o[..]));
    }
    // Each matmul normalises `x` again as it quantizes it (an `Input::RmsNormed`): a pass over
    // n x n_embd values per matrix, small beside the matmul, and no stored copy.
    for (o, w) in outs.iter_mut().zip(ws) {
        base_matmul(model, w, x, n, sized(o, n * w.rows))?;
    }
    let mut outs = outs.map(|o| &mut o[..]);
    if let Some(adapter) = model.adapter {
        let slots = ws.map(|w| w.slot);
        let targets = outs.each_mut().map(|o| &mut **o);
        add_side_paths(adapter, slots, x, (n, model.order), targets)?;
    }
    Ok(outs)
}

/// `buf` at length `len`, its contents unspecified (zeros where it grew).
pub(super) fn sized(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
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
    pub(super) x: Vec<f32>,
    /// The rotation angles of the pass's positions, for global layers ...
    pub(super) angles: Angles,
    /// ... and for sliding-window layers, which Gemma 3 rotates with another base.
    pub(super) angles_swa: Angles,
    pub(super) scratch: Scratch,
    /// The lm head's output for the rows whose logits a batch wants.
    pub(super) logits: Vec<f32>,
}

impl Workspace {
    /// Room for passes of up to `max_tokens` tokens over a context of `n_ctx`, with the attention
    /// of one token split over `threads` workers. Longer passes or other pools still work; their
    /// buffers grow once, on first use.
    pub fn plan(hp: &HParams, max_tokens: usize, n_ctx: usize, threads: usize) -> Workspace {
        let n = max_tokens.max(1);
        let q_dim = hp.q_dim();
        let with = |len: usize| Vec::with_capacity(len);
        let head = || HeadScratch::planned(hp, n_ctx);
        let angles = || Angles {
            half: hp.rope_dims / 2,
            cos: with(n * (hp.rope_dims / 2)),
            sin: with(n * (hp.rope_dims / 2)),
        };
        Workspace {
            x: with(n * hp.n_embd),
            angles: angles(),
            angles_swa: angles(),
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
        let q_dim = hp.q_dim();
        // x, att, ffn; q, heads; k, v; gate, up, exp; cos, sin twice
        let per_token =
            3 * hp.n_embd + 2 * q_dim + 2 * hp.kv_dim() + 3 * hp.n_ff + 4 * (hp.rope_dims / 2);
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
            &self.angles_swa.cos,
            &self.angles_swa.sin,
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
pub(super) struct Scratch {
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
pub(super) fn rms_norm<'a>(x: &'a [f32], weight: &'a [f32], eps: f32) -> Input<'a> {
    Input::RmsNormed {
        rows: x,
        weight,
        eps,
    }
}

/// [`rms_norm`] written out, for a reader of the normalised rows themselves (the guard's tap
/// after the final norm).
pub(super) fn rms_norm_into(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
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

/// RMSNorm of each `weight.len()`-wide row of `x`, in place: the per-head norm of queries and
/// keys (Qwen3, Gemma 3) and Gemma 3's norms after attention and the feed-forward.
pub(super) fn rms_norm_in_place(x: &mut [f32], weight: &[f32], eps: f32) {
    let d = weight.len();
    let one = |row: &mut [f32]| {
        let scale = rms_scale(row, eps);
        for (v, &g) in row.iter_mut().zip(weight) {
            *v = *v * scale * g;
        }
    };
    if x.len() >= PAR_MIN_ELEMENTS {
        x.par_chunks_exact_mut(d).for_each(one);
    } else {
        x.chunks_exact_mut(d).for_each(one);
    }
}

/// Multiplies every value by `factor` (Gemma 3 scales its embeddings by sqrt(n_embd)).
pub(super) fn scale_in_place(x: &mut [f32], factor: f32) {
    for v in x.iter_mut() {
        *v *= factor;
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

/// How one layer attends: the angles its positions rotate by, and its window, if any.
#[derive(Clone, Copy)]
pub(super) struct AttentionSpec<'a> {
    pub angles: &'a Angles,
    /// Sliding-window layers see only the last `window` positions, the token's own included.
    pub window: Option<usize>,
}

/// Multi-head self-attention with grouped-query heads (Ainslie et al. 2023) over the kv cache.
/// Queries and keys get their bias (Qwen2) or per-head RMSNorm (Qwen3, Gemma 3) when the layer
/// has one, then RoPE. Writes this chunk's keys and values into the cache. Returns the output
/// projection, (n, n_embd).
#[allow(clippy::too_many_arguments)]
pub(super) fn attention<'s>(
    model: &Pass,
    layer: &LayerWeights,
    l: usize,
    kv: &mut KvCache,
    xn: Input,
    n: usize,
    pos: usize,
    order: F16SumOrder,
    spec: AttentionSpec,
    scratch: &'s mut Scratch,
) -> Result<&'s mut [f32]> {
    let hp = &model.hparams;
    let (hd, kv_dim, q_dim) = (hp.head_dim, hp.kv_dim(), hp.q_dim());
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
    if let Some(w) = &layer.q_norm {
        rms_norm_in_place(q, w, hp.rms_eps);
    }
    if let Some(w) = &layer.k_norm {
        rms_norm_in_place(k, w, hp.rms_eps);
    }
    rope(q, q_dim, hp, spec.angles);
    rope(k, kv_dim, hp, spec.angles);
    // Gemma scales its queries before they meet the keys, as llama.cpp does; rounded to f16
    // after the scaling, they match its bits (an f16 subnormal keeps fewer of them).
    let scale = match hp.scale_queries {
        true => {
            scale_in_place(q, hp.attn_scale);
            1.0
        }
        false => hp.attn_scale,
    };
    kv.store(l, k, v);
    let q = &*q;

    // Positions cached.first..pos + n of keys and values: every position for a global layer,
    // the windowed layer's last ones (kv_cache's ring), which must reach back to the window of
    // the pass's first query.
    let cached = kv.layer(l);
    let oldest_seen = spec.window.map_or(0, |w| (pos + 1).saturating_sub(w));
    if oldest_seen < cached.first {
        return Err(EngineError::Model(format!(
            "layer {l}: the kv cache no longer holds position {oldest_seen} of the window"
        )));
    }
    let group = hp.n_head / hp.n_head_kv;
    // (n, n_head * head_dim); every head's slice is written whole below.
    let out = sized(heads, n * q_dim);

    // One task per (token, kv head): it serves the `group` query heads that share that head's
    // cached keys and values (read in place from the cache) and writes only its own slice
    // of `out` (those query heads are adjacent), so tasks never share mutable state.
    let visible_max = pos + n;
    let body = |s: &mut HeadScratch, (i, o): (usize, &mut [f32])| {
        let (t, g) = (i / hp.n_head_kv, i % hp.n_head_kv);
        // Causal: the token sees itself and everything before it, back to its window's start.
        let end = pos + t + 1;
        let start = spec.window.map_or(0, |w| end.saturating_sub(w));
        let visible = end - start;
        // The group's query heads are adjacent in q, as in `out`.
        let q_group = &q[t * q_dim + g * group * hd..t * q_dim + (g + 1) * group * hd];
        let (q_h, probs, lanes, q_blocks) = s.parts(
            group * hd,
            group * visible,
            group * order.lanes() * hd,
            hd / Q8_0_BLOCK,
        );
        // The head's rows from the window's start, one after another.
        let span = HeadSpan {
            hd,
            skip: start - cached.first,
            visible,
            scale,
            order,
        };
        let buf = HeadBuffers {
            q_h,
            probs,
            lanes,
            q_blocks,
        };
        cached.head(g).attend(q_group, span, buf, o);
    };
    let tasks = HeadTasks {
        hp,
        n,
        visible_max,
        lanes: order.lanes(),
    };
    tasks.run(out, head, per_thread, body);

    linear_into(model, &layer.wo, out, n, att)
}

/// How one pass's attention tasks (one per token and kv head) are spread over the threads.
struct HeadTasks<'h> {
    hp: &'h HParams,
    n: usize,
    /// Positions the pass's last token sees.
    visible_max: usize,
    /// Summing lanes of the pass's f16 order.
    lanes: usize,
}

impl HeadTasks<'_> {
    /// Runs `body` on every task's slice of `out` (group query heads wide), with a scratch.
    fn run<B>(
        &self,
        out: &mut [f32],
        head: &mut HeadScratch,
        per_thread: &mut [HeadScratch],
        body: B,
    ) where
        B: Fn(&mut HeadScratch, (usize, &mut [f32])) + Sync + Send,
    {
        let (hp, n) = (self.hp, self.n);
        let task = hp.n_head / hp.n_head_kv * hp.head_dim;
        if n * hp.n_head * self.visible_max * hp.head_dim < ATTENTION_PAR_MIN_MACS {
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
            // A prompt: later tokens see more positions, so rayon balances the tasks, and each
            // of its jobs makes its own scratch (once per pass, not per token).
            let init = || HeadScratch::new(hp, self.visible_max, self.lanes);
            out.par_chunks_mut(task)
                .enumerate()
                .for_each_init(init, body);
        }
    }
}

/// Rotary position embedding (Su et al. 2021) on every head of each row of `x`: (n, width),
/// rows at positions pos, pos+1, ...
pub(super) fn rope(x: &mut [f32], width: usize, hp: &HParams, angles: &Angles) {
    let hd = hp.head_dim;
    let half = angles.half;
    let layout = match hp.arch.rope_layout() {
        RopeLayout::Adjacent => PairLayout::Adjacent,
        RopeLayout::NeoX => PairLayout::NeoX,
    };
    // llama.cpp's rounding (one FMA per rotated value): see the kernel.
    let one = |(t, row): (usize, &mut [f32])| {
        let cos = &angles.cos[t * half..(t + 1) * half];
        let sin = &angles.sin[t * half..(t + 1) * half];
        kostant_kernels::rope::rope(row, hd, cos, sin, layout);
    };
    if x.len() >= PAR_MIN_ELEMENTS {
        x.par_chunks_exact_mut(width).enumerate().for_each(one);
    } else {
        x.chunks_exact_mut(width).enumerate().for_each(one);
    }
}

/// cos and sin of every rotated pair's angle for the `n` positions of one forward pass, position
/// after position (`half` pairs each).
pub(super) struct Angles {
    half: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

/// The rotation speeds: pair i turns by pos * base^(-2i/d) (divided by Llama 3's per-frequency
/// factor when the file has them).
pub(crate) struct Rope {
    /// base^(-2/d): each pair turns this much slower than the one before.
    theta_scale: f32,
    /// Linear position scaling: positions are multiplied by this.
    freq_scale: f32,
    factors: Option<Vec<f32>>,
}

impl Rope {
    /// The rotation of global layers (every layer but Gemma 3's windowed ones).
    pub(crate) fn new(hp: &HParams, factors: Option<Vec<f32>>) -> Rope {
        Rope {
            theta_scale: hp.rope_theta.powf(-2.0 / hp.rope_dims as f32),
            freq_scale: hp.rope_freq_scale,
            factors,
        }
    }

    /// The rotation of sliding-window layers: their own base, no scaling.
    pub(crate) fn sliding(hp: &HParams) -> Rope {
        Rope {
            theta_scale: hp.rope_theta_swa.powf(-2.0 / hp.rope_dims as f32),
            freq_scale: 1.0,
            factors: None,
        }
    }

    /// [`Rope::angles`] for positions `pos..pos + n`, into `out`.
    pub(super) fn angles_for(&self, hp: &HParams, pos: usize, n: usize, out: &mut Angles) {
        let half = hp.rope_dims / 2;
        out.half = half;
        let cos = sized(&mut out.cos, n * half);
        let sin = sized(&mut out.sin, n * half);
        for (t, (c, s)) in cos
            .chunks_exact_mut(half.max(1))
            .zip(sin.chunks_exact_mut(half.max(1)))
            .enumerate()
        {
            self.angles((pos + t) as f32, self.freq_scale, c, s);
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

/// The SwiGLU feed-forward block (Shazeer 2020): down(silu(gate(x)) * up(x)). (n, n_embd)
pub(super) fn swiglu<'s>(
    model: &Pass,
    layer: &LayerWeights,
    xn: Input,
    n: usize,
    scratch: &'s mut Scratch,
) -> Result<&'s mut [f32]> {
    let Scratch {
        gate, up, ffn, exp, ..
    } = scratch;
    let [gate, up] = linear_fused(model, [&layer.w_gate, &layer.w_up], xn, n, [gate, up])?; // (n, n_ff)
    silu_mul(gate, up, exp);
    linear_into(model, &layer.w_down, gate, n, ffn)
}

/// gate = silu(gate) * up, with SiLU as x / (1 + e^-x) on ggml's exp so the feed-forward
/// activations round as llama.cpp's do. `e` is scratch.
pub(super) fn silu_mul(gate: &mut [f32], up: &[f32], e: &mut Vec<f32>) {
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

/// The GeGLU feed-forward block (Shazeer 2020; Gemma): down(gelu(gate(x)) * up(x)). (n, n_embd)
pub(super) fn geglu<'s>(
    model: &Pass,
    layer: &LayerWeights,
    xn: Input,
    n: usize,
    scratch: &'s mut Scratch,
) -> Result<&'s mut [f32]> {
    let Scratch { gate, up, ffn, .. } = scratch;
    let [gate, up] = linear_fused(model, [&layer.w_gate, &layer.w_up], xn, n, [gate, up])?; // (n, n_ff)
    gelu_mul(gate, up);
    linear_into(model, &layer.w_down, gate, n, ffn)
}

/// gate = gelu(gate) * up, as ggml computes GELU on CPUs (see the kernel).
fn gelu_mul(gate: &mut [f32], up: &[f32]) {
    let one = |(gate, up): (&mut [f32], &[f32])| kostant_kernels::gelu::gelu_mul(gate, up);
    if gate.len() >= PAR_MIN_ELEMENTS {
        gate.par_chunks_mut(PAR_CHUNK)
            .zip(up.par_chunks(PAR_CHUNK))
            .for_each(one);
    } else {
        one((gate, up));
    }
}

pub(super) fn add_bias(x: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias {
        for row in x.chunks_exact_mut(b.len()) {
            add_in_place(row, b);
        }
    }
}

pub(super) fn add_in_place(x: &mut [f32], y: &[f32]) {
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
