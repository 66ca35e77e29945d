//! The key/value cache of one session: for every layer, the keys and values of every position
//! seen so far, appended in order.
//!
//! Storage is f16 by default, as llama.cpp keeps it: half the memory of f32, and the same
//! rounding, so greedy decoding follows the reference token for token. [`KvType::Q8_0`] keeps
//! each row as ggml's Q8_0 blocks instead (34 bytes per 32 values, 17/32 of f16) for contexts
//! that would not fit otherwise, and [`KvType::Q4_0`] as ggml's Q4_0 blocks (18 bytes per 32
//! values, 9/32 of f16) at a larger rounding; their attention reads the blocks in place through
//! `kostant_kernels::attention_q8` and `attention_q4`. The whole context is allocated and written (zeroed) when
//! the cache is made, as llama.cpp clears its cache buffer: the memory a session will need is
//! claimed, and counted, at the start, and no token ever allocates. A sliding-window layer
//! (Gemma 3) allocates only its window, [`ROLLBACK_SLACK`] and one prefill chunk
//! ([`layer_rows`]; see `LayerCache`).
//!
//! Within a layer, each kv head's positions are contiguous: (kv head, position, value). The
//! attention of one kv head reads its keys and its values, so each is one block of memory
//! instead of a piece of every row. Measured with `cargo bench -p kostant-kernels --bench
//! attention` (a decode step's attention over 30 layers, the cache fetched from memory as
//! decoding leaves it; default model's shape), rows side by side against heads contiguous:
//! 524 and 551 µs against 404 and 386 µs at 128 positions, 3.47 and 3.44 ms against 2.93 and
//! 2.81 ms at 1024.

use std::fmt;
use std::str::FromStr;

use half::f16;
use kostant_kernels::attention_q4::{KvBlockQ4_0, Q4_0_BLOCK};
use kostant_kernels::attention_q8::{KvBlockQ8_0, Q8_0_BLOCK};

use crate::limits::PREFILL_CHUNK;
use crate::{EngineError, Result};

mod attend;
mod rotation;
mod snapshot;
mod store;

/// Values per block in either block cache: ggml's Q8_0 and Q4_0 blocks both hold 32, so a
/// head's row is the same number of blocks whichever the cache keeps.
pub(crate) const KV_BLOCK: usize = Q8_0_BLOCK;
const _: () = assert!(Q4_0_BLOCK == KV_BLOCK);

pub(crate) use attend::{HeadBuffers, HeadSpan};
pub(crate) use snapshot::{piece_bytes, read_piece};
pub use snapshot::{SnapshotHeader, SNAPSHOT_FORMAT};
use store::{Shape, Store};

/// How the cache stores keys and values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvType {
    /// Half floats, rounded as llama.cpp's default cache (bit-exact greedy decoding).
    #[default]
    F16,
    /// ggml's Q8_0 blocks: 32 i8 codes and an f16 scale. 17/32 of the f16 cache's memory; the
    /// scores and outputs move by the codes' rounding (half a step of `max|x| / 127`).
    Q8_0,
    /// ggml's Q4_0 blocks: 32 4-bit codes and an f16 scale. 9/32 of the f16 cache's memory;
    /// the rounding is up to a step of `max|x| / 8`, sixteen times Q8_0's.
    Q4_0,
}

impl KvType {
    /// Every type, from the most exact to the smallest.
    pub const ALL: [KvType; 3] = [KvType::F16, KvType::Q8_0, KvType::Q4_0];

    pub fn name(self) -> &'static str {
        match self {
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
        }
    }

    /// Bytes of `n` cached values (`n` a whole number of blocks for Q8_0 and Q4_0).
    pub(crate) fn bytes_for(self, n: usize) -> usize {
        match self {
            KvType::F16 => n * size_of::<f16>(),
            KvType::Q8_0 => n / KV_BLOCK * size_of::<KvBlockQ8_0>(),
            KvType::Q4_0 => n / KV_BLOCK * size_of::<KvBlockQ4_0>(),
        }
    }

    /// Whether rows are stored as 32-value blocks, which must not straddle two heads.
    fn is_blocked(self) -> bool {
        matches!(self, KvType::Q8_0 | KvType::Q4_0)
    }

    /// Whether a cache of this type can hold heads `head_dim` wide: a block must not straddle
    /// two heads, so Q8_0 and Q4_0 need a multiple of 32.
    pub fn fits_heads(self, head_dim: usize) -> bool {
        !self.is_blocked() || (head_dim != 0 && head_dim.is_multiple_of(KV_BLOCK))
    }
}

impl fmt::Display for KvType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KvType {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<KvType> {
        match s.to_ascii_lowercase().as_str() {
            "f16" => Ok(KvType::F16),
            "q8_0" => Ok(KvType::Q8_0),
            "q4_0" => Ok(KvType::Q4_0),
            _ => Err(EngineError::InvalidRequest(format!(
                "unknown kv cache type {s:?} (expected f16, q8_0 or q4_0)"
            ))),
        }
    }
}

/// Positions a windowed layer keeps beyond its window: a rollback that reaches up to this far
/// before the start of the last pass (a verify burst is at most 17 tokens; the next chat turn
/// may re-tokenize the end of a reply) still finds every row its window needs. A rollback
/// within the last pass always does (see [`LayerCache::make_room`]).
pub(crate) const ROLLBACK_SLACK: usize = 64;

/// Rows of history a windowed layer keeps before a pass: the `w - 1` positions the pass's
/// first query sees, and the slack.
fn kept(w: usize) -> usize {
    w.saturating_sub(1) + ROLLBACK_SLACK
}

/// Slots a layer stores per kv head at a context of `n_ctx`: all of it for a global layer; for
/// a windowed one its history ([`kept`]) plus one prefill chunk. A chunk longer than the window
/// still fits whole with the history its first query sees, so every query row reads exactly
/// its own window (positions p-w+1..=p), as llama.cpp's SWA cache of n_swa + n_ubatch cells
/// does.
pub(crate) fn layer_rows(window: Option<usize>, n_ctx: usize) -> usize {
    match window {
        None => n_ctx,
        Some(w) => (kept(w) + PREFILL_CHUNK).min(n_ctx),
    }
}

/// One layer's rows. A global layer's slot p holds position p. A windowed layer keeps only
/// positions `first..filled` in slots `0..filled - first`, in position order: when a pass
/// would run past its slots, it moves its last [`kept`] positions to the front
/// ([`Store::shift`]; once a prefill chunk, so about one row copied per token decoded) instead
/// of wrapping around. A window is then always one contiguous run of rows in position order,
/// and the attention kernels read it as they read a full-length cache: the same sums in the
/// same order, so the same bits.
struct LayerCache {
    store: Store,
    shape: Shape,
    /// The layer's sliding window (positions seen, the query's own included), if it has one.
    window: Option<usize>,
    /// The position slot 0 holds (0 for a global layer).
    first: usize,
    /// Positions written in this layer (ahead of `KvCache::len` during a forward pass).
    filled: usize,
}

impl LayerCache {
    /// Whether every row the next query (at position `len`) sees is held: always for a
    /// global layer, and for an empty cache.
    fn serves(&self, len: usize) -> bool {
        match self.window {
            None => true,
            Some(w) => len == 0 || self.first <= (len + 1).saturating_sub(w),
        }
    }

    /// Makes room for `n` more positions after `filled`: a windowed layer whose slots would
    /// overflow keeps its last [`kept`] positions (at least the `w - 1` the first new query
    /// sees, so a rollback within this pass, or up to [`ROLLBACK_SLACK`] before it, stays
    /// servable) and drops the older ones. `n` is at most a prefill chunk, or at most
    /// [`kept`] when a snapshot is loaded, so the rows fit.
    fn make_room(&mut self, n: usize) {
        let Some(w) = self.window else {
            return; // the context check keeps a global layer within its slots
        };
        let rows = self.shape.rows;
        if self.filled + n - self.first <= rows {
            return;
        }
        let new_first = (self.filled.saturating_sub(kept(w)))
            .max((self.filled + n).saturating_sub(rows))
            .clamp(self.first, self.filled);
        self.store
            .shift(self.shape, new_first - self.first, self.filled - new_first);
        self.first = new_first;
    }
}

/// One layer's stored keys and values, borrowed for attention.
#[derive(Clone, Copy)]
pub(crate) struct LayerView<'a> {
    store: &'a Store,
    shape: Shape,
    /// The first position held (see [`LayerCache`]).
    pub(crate) first: usize,
    filled: usize,
}

impl<'a> LayerView<'a> {
    /// Kv head g's keys and values for every held position, `first..filled`: (positions,
    /// head_dim) each, contiguous, in values for f16 and in 32-value blocks for Q8_0 and Q4_0.
    pub(crate) fn head(&self, g: usize) -> HeadView<'a> {
        let Shape {
            head_dim: hd, rows, ..
        } = self.shape;
        let rows = g * rows..g * rows + (self.filled - self.first);
        let span = |per_row: usize| rows.start * per_row..rows.end * per_row;
        match self.store {
            Store::F16 { k, v } => HeadView::F16 {
                k: &k[span(hd)],
                v: &v[span(hd)],
            },
            Store::Q8_0 { k, v } => HeadView::Q8_0 {
                k: &k[span(hd / KV_BLOCK)],
                v: &v[span(hd / KV_BLOCK)],
            },
            Store::Q4_0 { k, v } => HeadView::Q4_0 {
                k: &k[span(hd / KV_BLOCK)],
                v: &v[span(hd / KV_BLOCK)],
            },
        }
    }
}

/// One kv head's stored keys and values, (positions, head_dim) each.
#[derive(Clone, Copy)]
pub(crate) enum HeadView<'a> {
    F16 {
        k: &'a [f16],
        v: &'a [f16],
    },
    Q8_0 {
        k: &'a [KvBlockQ8_0],
        v: &'a [KvBlockQ8_0],
    },
    Q4_0 {
        k: &'a [KvBlockQ4_0],
        v: &'a [KvBlockQ4_0],
    },
}

/// One layer's rows of a snapshot piece: positions `first..` up to the piece's end, laid out
/// as [`Store::copy_rows`] writes them.
pub(crate) struct LayerRows<'a> {
    pub first: usize,
    pub bytes: &'a [u8],
}

pub struct KvCache {
    layers: Vec<LayerCache>,
    kv_type: KvType,
    n_ctx: usize,
    len: usize,
}

impl KvCache {
    /// A cache of `kv_type` for `n_layer` global layers. Q8_0 and Q4_0 blocks must not
    /// straddle two heads, so they need a head size that is a multiple of 32.
    pub fn with_type(
        kv_type: KvType,
        n_layer: usize,
        kv_dim: usize,
        head_dim: usize,
        n_ctx: usize,
    ) -> Result<KvCache> {
        KvCache::with_windows(kv_type, &vec![None; n_layer], kv_dim, head_dim, n_ctx)
    }

    /// A cache with one layer per entry of `windows`: a windowed layer (`Some(w)`) stores only
    /// [`layer_rows`] positions, a global one the whole context.
    pub fn with_windows(
        kv_type: KvType,
        windows: &[Option<usize>],
        kv_dim: usize,
        head_dim: usize,
        n_ctx: usize,
    ) -> Result<KvCache> {
        if !kv_type.fits_heads(head_dim) {
            return Err(EngineError::InvalidRequest(format!(
                "the {kv_type} kv cache needs a head size that is a multiple of {KV_BLOCK}, but this model's heads are {head_dim} wide (use the f16 cache)"
            )));
        }
        if head_dim == 0 || !kv_dim.is_multiple_of(head_dim) {
            return Err(EngineError::InvalidRequest(format!(
                "kv width {kv_dim} is not a whole number of {head_dim}-wide heads"
            )));
        }
        if windows.contains(&Some(0)) {
            return Err(EngineError::InvalidRequest(
                "a sliding window must hold at least the query's own position".into(),
            ));
        }
        Ok(KvCache {
            layers: windows
                .iter()
                .map(|&window| {
                    let rows = layer_rows(window, n_ctx);
                    LayerCache {
                        store: Store::zeroed(kv_type, rows * kv_dim),
                        shape: Shape {
                            kv_dim,
                            head_dim,
                            rows,
                        },
                        window,
                        first: 0,
                        filled: 0,
                    }
                })
                .collect(),
            kv_type,
            n_ctx,
            len: 0,
        })
    }

    /// Bytes a cache of this shape and type takes (see [`KvCache::with_windows`]).
    pub fn planned_bytes(
        windows: &[Option<usize>],
        kv_dim: usize,
        n_ctx: usize,
        kv_type: KvType,
    ) -> usize {
        windows
            .iter()
            .map(|&w| 2 * kv_type.bytes_for(layer_rows(w, n_ctx) * kv_dim))
            .sum()
    }

    pub fn kv_type(&self) -> KvType {
        self.kv_type
    }

    /// Positions stored (the same for every layer once a forward pass has finished).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.n_ctx
    }

    /// Bytes held by the cache (all of it is allocated up front).
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(|l| l.store.bytes()).sum()
    }

    /// Forgets every position from `len` on, and returns how many positions it keeps: `len`
    /// (at most the length), or 0 when a windowed layer no longer holds the window the next
    /// query at `len` would see (its rows were dropped to make room): then the cache is empty
    /// and the caller runs the tokens again.
    pub fn truncate(&mut self, len: usize) -> usize {
        let mut len = len.min(self.len);
        if !self.layers.iter().all(|l| l.serves(len)) {
            len = 0;
        }
        for l in &mut self.layers {
            l.filled = len;
            if len == 0 {
                l.first = 0;
            }
        }
        self.len = len;
        len
    }

    /// Appends the keys and values of `n` new positions to one layer. k, v: (n, kv_dim).
    /// The caller has checked that they fit the context.
    pub(crate) fn append(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        let l = &mut self.layers[layer];
        l.make_room(k.len() / l.shape.kv_dim);
        l.store.write(l.shape, l.filled - l.first, k, v);
        l.filled += k.len() / l.shape.kv_dim;
    }

    /// Appends this pass's keys and values to one layer as the cache's format keeps them: a
    /// Q4_0 cache stores them rotated (see `rotation`), so `k` and `v` are rotated in place.
    pub(crate) fn store(&mut self, layer: usize, k: &mut [f32], v: &mut [f32]) {
        if self.kv_type() == KvType::Q4_0 {
            rotation::rotate(k);
            rotation::rotate(v);
        }
        self.append(layer, k, v);
    }

    /// Marks `n` positions as written in every layer.
    pub(crate) fn advance(&mut self, n: usize) {
        self.len += n;
        for l in &mut self.layers {
            l.filled = self.len;
        }
    }

    /// Whether any layer has a sliding window (its snapshot pieces say where its rows start).
    pub(crate) fn has_windows(&self) -> bool {
        self.layers.iter().any(|l| l.window.is_some())
    }

    /// Every layer's window, in order (what a snapshot piece's layout depends on).
    pub(crate) fn windows(&self) -> Vec<Option<usize>> {
        self.layers.iter().map(|l| l.window).collect()
    }

    /// Appends the keys and values of positions `from..len` to `out`, layer by layer, as a
    /// snapshot piece holds them. A windowed layer writes the first position of its rows (u32)
    /// and then its rows from there: from `from`, but at least the `w - 1` positions the next
    /// query sees (so a piece restores its layers' windows without the pieces before it) and
    /// at most [`kept`] of them, and never before what it still holds.
    pub(crate) fn copy_positions(&self, from: usize, out: &mut Vec<u8>) {
        let (from, len) = (from.min(self.len), self.len);
        for l in &self.layers {
            let first = match l.window {
                None => from,
                Some(w) => from
                    .min((len + 1).saturating_sub(w))
                    .max(len.saturating_sub(kept(w)))
                    .max(l.first),
            };
            if l.window.is_some() {
                // Invariant: a position is below 2^32 (contexts are far shorter).
                out.extend_from_slice(&u32::try_from(first).unwrap_or(u32::MAX).to_le_bytes());
            }
            l.store
                .copy_rows(l.shape, first - l.first, len - l.first, out);
        }
    }

    /// Replaces positions `start..start + n` of every layer with a snapshot piece's rows
    /// (checked by `read_piece`: one entry per layer, `first` within the piece's positions
    /// for a windowed layer, exactly the bytes those positions take), after the `start` kept
    /// positions (`start <= len`). A windowed layer keeps the rows it holds before the piece's
    /// when they join up, and otherwise holds only the piece's. Fails on a value that is not a
    /// finite number, on a windowed layer given more rows than it keeps, or when a windowed
    /// layer would not hold its window at the end; the caller then empties the cache.
    pub(crate) fn load_piece(
        &mut self,
        start: usize,
        n: usize,
        rows: &[LayerRows],
    ) -> std::result::Result<(), String> {
        let end = start + n;
        self.len = start.min(self.len);
        for (i, (l, r)) in self.layers.iter_mut().zip(rows).enumerate() {
            let m = end - r.first;
            match l.window {
                None => l.filled = start,
                Some(w) => {
                    // More would not fit the slots beside a pass's room (m <= end, which is
                    // within the context, bounds it for a short context).
                    if m > kept(w) {
                        return Err(format!(
                            "layer {i} carries {m} positions and its window keeps {}",
                            kept(w)
                        ));
                    }
                    if l.first <= r.first && r.first <= start.min(l.filled) {
                        l.filled = r.first;
                    } else {
                        (l.first, l.filled) = (r.first, r.first);
                    }
                    l.make_room(m);
                }
            }
            l.store
                .load_rows(l.shape, l.filled - l.first, m, r.bytes)
                .map_err(|e| format!("layer {i}: {e}"))?;
            l.filled += m;
            if !l.serves(end) {
                return Err(format!(
                    "layer {i} does not hold the window of position {end}"
                ));
            }
        }
        self.advance(n);
        Ok(())
    }

    /// Keys and values of one layer for every held position, including ones appended during
    /// the current forward pass.
    pub(crate) fn layer(&self, layer: usize) -> LayerView<'_> {
        let l = &self.layers[layer];
        LayerView {
            store: &l.store,
            shape: l.shape,
            first: l.first,
            filled: l.filled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values of varied size and sign (no rand needed here).
    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    /// Blocks of 32 values as f32, each decoded by `dequantize`.
    fn dequantized<B>(blocks: &[B], dequantize: impl Fn(&B, &mut [f32; KV_BLOCK])) -> Vec<f32> {
        let mut out = vec![0.0; blocks.len() * KV_BLOCK];
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(KV_BLOCK)) {
            let mut tmp = [0.0; KV_BLOCK];
            dequantize(b, &mut tmp);
            o.copy_from_slice(&tmp);
        }
        out
    }

    /// Keys and values of one layer as f32, whatever the storage, as the rows they were
    /// appended as: (positions, kv_dim), a position's heads side by side.
    fn read_back(c: &KvCache, layer: usize) -> (Vec<f32>, Vec<f32>) {
        let view = c.layer(layer);
        let Shape {
            kv_dim,
            head_dim: hd,
            ..
        } = view.shape;
        let heads: Vec<(Vec<f32>, Vec<f32>)> = (0..kv_dim / hd)
            .map(|g| match view.head(g) {
                HeadView::F16 { k, v } => (
                    k.iter().map(|x| x.to_f32()).collect(),
                    v.iter().map(|x| x.to_f32()).collect(),
                ),
                HeadView::Q8_0 { k, v } => (
                    dequantized(k, KvBlockQ8_0::dequantize),
                    dequantized(v, KvBlockQ8_0::dequantize),
                ),
                HeadView::Q4_0 { k, v } => (
                    dequantized(k, KvBlockQ4_0::dequantize),
                    dequantized(v, KvBlockQ4_0::dequantize),
                ),
            })
            .collect();
        // Side `s` (0 keys, 1 values) of every head, interleaved back into rows.
        let rows = |s: usize| -> Vec<f32> {
            let side = |h: &(Vec<f32>, Vec<f32>)| if s == 0 { h.0.clone() } else { h.1.clone() };
            let per_head: Vec<Vec<f32>> = heads.iter().map(side).collect();
            (0..view.filled - view.first)
                .flat_map(|p| {
                    per_head
                        .iter()
                        .flat_map(move |h| h[p * hd..(p + 1) * hd].to_vec())
                })
                .collect()
        };
        (rows(0), rows(1))
    }

    /// Largest error a Q8_0 block allows its values: half a step `max|x| / 127`, plus the f16
    /// rounding of the stored scale (2^-11 relative, over up to 127 codes).
    fn q8_budget(x: &[f32]) -> Vec<f32> {
        x.chunks_exact(KV_BLOCK)
            .flat_map(|b| {
                let amax = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let tol = amax / 127.0 * (0.5 + 127.0 * 2f32.powi(-11)) * 1.001;
                std::iter::repeat_n(tol, KV_BLOCK)
            })
            .collect()
    }

    /// Largest error a Q4_0 block allows its values: one step `max|x| / 8` (a step, not half
    /// of one, for the values past 7.5 steps on the side opposite the largest, whose code
    /// clamps at 15), plus the f16 rounding of the stored scale (2^-11 relative, over up to 8
    /// codes).
    fn q4_budget(x: &[f32]) -> Vec<f32> {
        x.chunks_exact(KV_BLOCK)
            .flat_map(|b| {
                let amax = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let tol = amax / 8.0 * (1.0 + 8.0 * 2f32.powi(-11)) * 1.001;
                std::iter::repeat_n(tol, KV_BLOCK)
            })
            .collect()
    }

    /// The budget a cache type's read-back values must meet (f16's rounding is within Q8_0's).
    fn budget(ty: KvType, x: &[f32]) -> Vec<f32> {
        match ty {
            KvType::F16 | KvType::Q8_0 => q8_budget(x),
            KvType::Q4_0 => q4_budget(x),
        }
    }

    #[test]
    fn q8_0_and_q4_0_rows_read_back_within_the_block_error() {
        for ty in [KvType::Q8_0, KvType::Q4_0] {
            rows_read_back_within_the_block_error(ty);
        }
    }

    fn rows_read_back_within_the_block_error(ty: KvType) {
        let (n_layer, kv_dim, hd) = (2, 128, 64);
        let mut c = KvCache::with_type(ty, n_layer, kv_dim, hd, 16).unwrap();
        let (k1, v1) = (values(3 * kv_dim, 1), values(3 * kv_dim, 2));
        let (k2, v2) = (values(2 * kv_dim, 3), values(2 * kv_dim, 4));
        for l in 0..n_layer {
            c.append(l, &k1, &v1);
        }
        c.advance(3);
        for l in 0..n_layer {
            c.append(l, &k2, &v2);
        }
        c.advance(2);
        assert_eq!(c.len(), 5);
        let want_k: Vec<f32> = k1.iter().chain(&k2).copied().collect();
        let want_v: Vec<f32> = v1.iter().chain(&v2).copied().collect();
        for l in 0..n_layer {
            let (k, v) = read_back(&c, l);
            assert_eq!(k.len(), 5 * kv_dim);
            for (got, want) in [(&k, &want_k), (&v, &want_v)] {
                for ((g, w), tol) in got.iter().zip(want.iter()).zip(budget(ty, want)) {
                    assert!((g - w).abs() <= tol, "{ty} layer {l}: {w} read back as {g}");
                }
            }
            // The codes are not just f16 in disguise: something moved.
            assert!(k.iter().zip(&want_k).any(|(g, w)| g != w));
        }
    }

    /// A head's keys and values come back as one contiguous (positions, head_dim) block, each
    /// row the head's piece of the row that was appended, across two appends.
    #[test]
    fn a_heads_rows_are_contiguous_and_hold_its_piece_of_each_row() {
        let (kv_dim, hd, n_ctx) = (96, 32, 6);
        let mut c = KvCache::with_type(KvType::F16, 1, kv_dim, hd, n_ctx).unwrap();
        let (k, v) = (values(5 * kv_dim, 11), values(5 * kv_dim, 12));
        c.append(0, &k[..2 * kv_dim], &v[..2 * kv_dim]);
        c.append(0, &k[2 * kv_dim..], &v[2 * kv_dim..]);
        for g in 0..kv_dim / hd {
            let HeadView::F16 { k: hk, v: hv } = c.layer(0).head(g) else {
                panic!("an f16 cache gives f16 views");
            };
            assert_eq!((hk.len(), hv.len()), (5 * hd, 5 * hd));
            for p in 0..5 {
                let src = p * kv_dim + g * hd..p * kv_dim + (g + 1) * hd;
                let round = |x: &[f32]| x.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
                assert_eq!(
                    &hk[p * hd..(p + 1) * hd],
                    &round(&k[src.clone()])[..],
                    "k {g} {p}"
                );
                assert_eq!(&hv[p * hd..(p + 1) * hd], &round(&v[src])[..], "v {g} {p}");
            }
        }
    }

    #[test]
    fn truncate_forgets_positions_and_the_next_append_overwrites_them() {
        for ty in [KvType::F16, KvType::Q8_0, KvType::Q4_0] {
            let kv_dim = 64;
            let mut c = KvCache::with_type(ty, 1, kv_dim, 32, 8).unwrap();
            c.append(0, &values(4 * kv_dim, 5), &values(4 * kv_dim, 6));
            c.advance(4);
            c.truncate(2);
            assert_eq!(c.len(), 2);
            assert_eq!(read_back(&c, 0).0.len(), 2 * kv_dim);
            // Truncating past the end is a no-op.
            c.truncate(7);
            assert_eq!(c.len(), 2);
            let new_k = values(kv_dim, 7);
            c.append(0, &new_k, &values(kv_dim, 8));
            c.advance(1);
            let (k, _) = read_back(&c, 0);
            let (kept, _) = {
                let mut fresh = KvCache::with_type(ty, 1, kv_dim, 32, 8).unwrap();
                fresh.append(0, &values(4 * kv_dim, 5), &values(4 * kv_dim, 6));
                fresh.advance(4);
                read_back(&fresh, 0)
            };
            assert_eq!(&k[..2 * kv_dim], &kept[..2 * kv_dim], "{ty}");
            let row2 = &k[2 * kv_dim..];
            for ((g, w), tol) in row2.iter().zip(&new_k).zip(budget(ty, &new_k)) {
                assert!((g - w).abs() <= tol, "{ty}: {w} read back as {g}");
            }
        }
    }

    #[test]
    fn bytes_are_the_planned_bytes() {
        let (n_layer, kv_dim, n_ctx) = (3, 256, 40);
        for ty in [KvType::F16, KvType::Q8_0, KvType::Q4_0] {
            let c = KvCache::with_type(ty, n_layer, kv_dim, 64, n_ctx).unwrap();
            let globals = vec![None; n_layer];
            assert_eq!(
                c.bytes(),
                KvCache::planned_bytes(&globals, kv_dim, n_ctx, ty)
            );
        }
        let globals = vec![None; n_layer];
        let f16 = KvCache::planned_bytes(&globals, kv_dim, n_ctx, KvType::F16);
        let q8 = KvCache::planned_bytes(&globals, kv_dim, n_ctx, KvType::Q8_0);
        assert_eq!(f16, 2 * n_layer * n_ctx * kv_dim * 2);
        assert_eq!(q8 * 64, f16 * 34);
        let q4 = KvCache::planned_bytes(&globals, kv_dim, n_ctx, KvType::Q4_0);
        assert_eq!(q4 * 64, f16 * 18);
        // A windowed layer holds its window, the slack and a prefill chunk, when that is
        // shorter than the context.
        let windows = [Some(16), None];
        let n_ctx = 4096;
        let c = KvCache::with_windows(KvType::F16, &windows, kv_dim, 64, n_ctx).unwrap();
        let rows = 15 + ROLLBACK_SLACK + PREFILL_CHUNK;
        assert_eq!(c.bytes(), 2 * (rows + n_ctx) * kv_dim * 2);
        assert_eq!(
            c.bytes(),
            KvCache::planned_bytes(&windows, kv_dim, n_ctx, KvType::F16)
        );
    }

    /// Appended one position at a time past its slots, a windowed layer holds its last
    /// positions in order, never fewer than the window and the slack; truncating within
    /// them keeps the length, and further back empties the cache.
    #[test]
    fn a_windowed_layer_keeps_its_last_positions_in_order() {
        for ty in [KvType::F16, KvType::Q8_0, KvType::Q4_0] {
            let (kv_dim, w, n_ctx) = (64, 4, 2000);
            let mut c = KvCache::with_windows(ty, &[Some(w), None], kv_dim, 32, n_ctx).unwrap();
            let rows = layer_rows(Some(w), n_ctx);
            let all_k = values(1500 * kv_dim, 21);
            let all_v = values(1500 * kv_dim, 22);
            for p in 0..1500 {
                for l in 0..2 {
                    let r = p * kv_dim..(p + 1) * kv_dim;
                    c.append(l, &all_k[r.clone()], &all_v[r]);
                }
                c.advance(1);
                let view = c.layer(0);
                assert!(view.filled - view.first <= rows);
                assert!(view.filled - view.first >= kept(w).min(p + 1), "{p}");
            }
            let first = c.layer(0).first;
            assert!(first > 0, "the ring moved");
            let (k, v) = read_back(&c, 0);
            let (gk, _) = read_back(&c, 1);
            assert_eq!(&k[..], &gk[first * kv_dim..], "{ty}");
            let held = first * kv_dim..1500 * kv_dim;
            for ((g, want), tol) in v
                .iter()
                .zip(&all_v[held.clone()])
                .zip(budget(ty, &all_v[held]))
            {
                assert!((g - want).abs() <= tol, "{ty}");
            }
            let back = first + w - 1;
            assert_eq!(c.truncate(back), back);
            assert_eq!(c.truncate(back - 1), 0);
            assert!(c.is_empty() && c.layer(0).first == 0);
        }
    }

    #[test]
    fn q8_0_and_q4_0_refuse_heads_that_are_not_whole_blocks() {
        for ty in [KvType::Q8_0, KvType::Q4_0] {
            let err = KvCache::with_type(ty, 2, 64, 16, 8)
                .err()
                .expect("a 16-wide head cannot hold 32-value blocks");
            assert!(matches!(err, EngineError::InvalidRequest(_)));
            let msg = err.to_string();
            assert!(msg.contains(ty.name()) && msg.contains("16"), "{msg}");
        }
        // f16 has no such constraint.
        assert!(KvCache::with_type(KvType::F16, 2, 64, 16, 8).is_ok());
    }

    #[test]
    fn kv_types_parse_and_print_their_cli_names() {
        for ty in [KvType::F16, KvType::Q8_0, KvType::Q4_0] {
            assert_eq!(ty.to_string().parse::<KvType>().unwrap(), ty);
        }
        assert_eq!("Q8_0".parse::<KvType>().unwrap(), KvType::Q8_0);
        assert_eq!("Q4_0".parse::<KvType>().unwrap(), KvType::Q4_0);
        assert_eq!(KvType::default(), KvType::F16);
        let err = "q4_1".parse::<KvType>().unwrap_err().to_string();
        assert!(err.contains("q4_0") && err.contains("q4_1"), "{err}");
    }
}
