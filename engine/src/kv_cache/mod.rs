//! The key/value cache of one session: for every layer, the keys and values of every position
//! seen so far, appended in order.
//!
//! Storage is f16 by default, as llama.cpp keeps it: half the memory of f32, and the same
//! rounding, so greedy decoding follows the reference token for token. [`KvType::Q8_0`] keeps
//! each row as ggml's Q8_0 blocks instead (34 bytes per 32 values, 17/32 of f16) for contexts
//! that would not fit otherwise; its attention reads the blocks in place through
//! `kostant_kernels::attention_q8`. The whole context is allocated and written (zeroed) when
//! the cache is made, as llama.cpp clears its cache buffer: the memory a session will need is
//! claimed, and counted, at the start, and no token ever allocates.
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
use kostant_kernels::attention_q8::{KvBlockQ8_0, Q8_0_BLOCK};

use crate::{EngineError, Result};

mod snapshot;
mod store;

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
}

impl KvType {
    pub fn name(self) -> &'static str {
        match self {
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
        }
    }

    /// Bytes of `n` cached values (`n` a whole number of blocks for Q8_0).
    pub(crate) fn bytes_for(self, n: usize) -> usize {
        match self {
            KvType::F16 => n * size_of::<f16>(),
            KvType::Q8_0 => n / Q8_0_BLOCK * size_of::<KvBlockQ8_0>(),
        }
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
            _ => Err(EngineError::InvalidRequest(format!(
                "unknown kv cache type {s:?} (expected f16 or q8_0)"
            ))),
        }
    }
}

struct LayerCache {
    store: Store,
    /// Positions written in this layer (ahead of `KvCache::len` during a forward pass).
    filled: usize,
}

/// One layer's stored keys and values, borrowed for attention.
#[derive(Clone, Copy)]
pub(crate) struct LayerView<'a> {
    store: &'a Store,
    shape: Shape,
    filled: usize,
}

impl<'a> LayerView<'a> {
    /// Kv head g's keys and values for every stored position: (positions, head_dim) each,
    /// contiguous, in values for f16 and in 32-value blocks for Q8_0.
    pub(crate) fn head(&self, g: usize) -> HeadView<'a> {
        let Shape {
            head_dim: hd,
            n_ctx,
            ..
        } = self.shape;
        let rows = g * n_ctx..g * n_ctx + self.filled;
        let span = |per_row: usize| rows.start * per_row..rows.end * per_row;
        match self.store {
            Store::F16 { k, v } => HeadView::F16 {
                k: &k[span(hd)],
                v: &v[span(hd)],
            },
            Store::Q8_0 { k, v } => HeadView::Q8_0 {
                k: &k[span(hd / Q8_0_BLOCK)],
                v: &v[span(hd / Q8_0_BLOCK)],
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
}

pub struct KvCache {
    layers: Vec<LayerCache>,
    kv_type: KvType,
    shape: Shape,
    len: usize,
}

impl KvCache {
    /// A cache of `kv_type`. Q8_0 blocks must not straddle two heads, so it needs a head size
    /// that is a multiple of 32.
    pub fn with_type(
        kv_type: KvType,
        n_layer: usize,
        kv_dim: usize,
        head_dim: usize,
        n_ctx: usize,
    ) -> Result<KvCache> {
        if kv_type == KvType::Q8_0 && (head_dim == 0 || !head_dim.is_multiple_of(Q8_0_BLOCK)) {
            return Err(EngineError::InvalidRequest(format!(
                "the q8_0 kv cache needs a head size that is a multiple of {Q8_0_BLOCK}, but this model's heads are {head_dim} wide (use the f16 cache)"
            )));
        }
        if head_dim == 0 || !kv_dim.is_multiple_of(head_dim) {
            return Err(EngineError::InvalidRequest(format!(
                "kv width {kv_dim} is not a whole number of {head_dim}-wide heads"
            )));
        }
        Ok(KvCache {
            layers: (0..n_layer)
                .map(|_| LayerCache {
                    store: Store::zeroed(kv_type, n_ctx * kv_dim),
                    filled: 0,
                })
                .collect(),
            kv_type,
            shape: Shape {
                kv_dim,
                head_dim,
                n_ctx,
            },
            len: 0,
        })
    }

    /// Bytes a cache of this shape and type takes.
    pub fn planned_bytes(n_layer: usize, kv_dim: usize, n_ctx: usize, kv_type: KvType) -> usize {
        2 * n_layer * kv_type.bytes_for(n_ctx * kv_dim)
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
        self.shape.n_ctx
    }

    /// Bytes held by the cache (all of it is allocated up front).
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(|l| l.store.bytes()).sum()
    }

    /// Forgets every position from `len` on; the next token is written at `len`.
    pub fn truncate(&mut self, len: usize) {
        let len = len.min(self.len);
        for l in &mut self.layers {
            l.filled = len;
        }
        self.len = len;
    }

    /// Appends the keys and values of `n` new positions to one layer. k, v: (n, kv_dim).
    /// The caller has checked that they fit the context.
    pub(crate) fn append(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        let l = &mut self.layers[layer];
        l.store.write(self.shape, l.filled, k, v);
        l.filled += k.len() / self.shape.kv_dim;
    }

    /// Marks `n` positions as written in every layer.
    pub(crate) fn advance(&mut self, n: usize) {
        self.len += n;
        for l in &mut self.layers {
            l.filled = self.len;
        }
    }

    /// Appends the keys and values of positions `from..len` of every layer to `out`, layer by
    /// layer, as a snapshot piece holds them.
    pub(crate) fn copy_positions(&self, from: usize, out: &mut Vec<u8>) {
        let from = from.min(self.len);
        for l in &self.layers {
            l.store.copy_rows(self.shape, from, self.len, out);
        }
    }

    /// Writes `n` positions from `bytes` (laid out as [`KvCache::copy_positions`] writes them,
    /// `n` positions' worth: the caller checked) after the `len` stored. A value that is not
    /// a finite number fails it, and then the cache holds the `len` positions it had.
    pub(crate) fn load_positions(
        &mut self,
        n: usize,
        bytes: &[u8],
    ) -> std::result::Result<(), String> {
        let per_layer = bytes.len() / self.layers.len().max(1);
        let at = self.len;
        for (i, (l, chunk)) in self
            .layers
            .iter_mut()
            .zip(bytes.chunks_exact(per_layer))
            .enumerate()
        {
            if let Err(e) = l.store.load_rows(self.shape, at, n, chunk) {
                self.truncate(at);
                return Err(format!("layer {i}: {e}"));
            }
        }
        self.advance(n);
        Ok(())
    }

    /// Keys and values of one layer for every stored position, including ones appended during
    /// the current forward pass.
    pub(crate) fn layer(&self, layer: usize) -> LayerView<'_> {
        let l = &self.layers[layer];
        LayerView {
            store: &l.store,
            shape: self.shape,
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

    fn dequantized(blocks: &[KvBlockQ8_0]) -> Vec<f32> {
        let mut out = vec![0.0; blocks.len() * Q8_0_BLOCK];
        for (b, o) in blocks.iter().zip(out.chunks_exact_mut(Q8_0_BLOCK)) {
            let mut tmp = [0.0; Q8_0_BLOCK];
            b.dequantize(&mut tmp);
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
        } = c.shape;
        let heads: Vec<(Vec<f32>, Vec<f32>)> = (0..kv_dim / hd)
            .map(|g| match view.head(g) {
                HeadView::F16 { k, v } => (
                    k.iter().map(|x| x.to_f32()).collect(),
                    v.iter().map(|x| x.to_f32()).collect(),
                ),
                HeadView::Q8_0 { k, v } => (dequantized(k), dequantized(v)),
            })
            .collect();
        // Side `s` (0 keys, 1 values) of every head, interleaved back into rows.
        let rows = |s: usize| -> Vec<f32> {
            let side = |h: &(Vec<f32>, Vec<f32>)| if s == 0 { h.0.clone() } else { h.1.clone() };
            let per_head: Vec<Vec<f32>> = heads.iter().map(side).collect();
            (0..view.filled)
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
        x.chunks_exact(Q8_0_BLOCK)
            .flat_map(|b| {
                let amax = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let tol = amax / 127.0 * (0.5 + 127.0 * 2f32.powi(-11)) * 1.001;
                std::iter::repeat_n(tol, Q8_0_BLOCK)
            })
            .collect()
    }

    #[test]
    fn q8_0_rows_read_back_within_the_block_error() {
        let (n_layer, kv_dim, hd) = (2, 128, 64);
        let mut c = KvCache::with_type(KvType::Q8_0, n_layer, kv_dim, hd, 16).unwrap();
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
                for ((g, w), tol) in got.iter().zip(want.iter()).zip(q8_budget(want)) {
                    assert!((g - w).abs() <= tol, "layer {l}: {w} read back as {g}");
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
        for ty in [KvType::F16, KvType::Q8_0] {
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
            for ((g, w), tol) in row2.iter().zip(&new_k).zip(q8_budget(&new_k)) {
                assert!((g - w).abs() <= tol, "{ty}: {w} read back as {g}");
            }
        }
    }

    #[test]
    fn bytes_are_the_planned_bytes() {
        let (n_layer, kv_dim, n_ctx) = (3, 256, 40);
        for ty in [KvType::F16, KvType::Q8_0] {
            let c = KvCache::with_type(ty, n_layer, kv_dim, 64, n_ctx).unwrap();
            assert_eq!(
                c.bytes(),
                KvCache::planned_bytes(n_layer, kv_dim, n_ctx, ty)
            );
        }
        let f16 = KvCache::planned_bytes(n_layer, kv_dim, n_ctx, KvType::F16);
        let q8 = KvCache::planned_bytes(n_layer, kv_dim, n_ctx, KvType::Q8_0);
        assert_eq!(f16, 2 * n_layer * n_ctx * kv_dim * 2);
        assert_eq!(q8 * 64, f16 * 34);
    }

    #[test]
    fn q8_0_refuses_heads_that_are_not_whole_blocks() {
        let err = KvCache::with_type(KvType::Q8_0, 2, 64, 16, 8)
            .err()
            .expect("a 16-wide head cannot hold q8_0 blocks");
        assert!(matches!(err, EngineError::InvalidRequest(_)));
        let msg = err.to_string();
        assert!(msg.contains("q8_0") && msg.contains("16"), "{msg}");
        // f16 has no such constraint.
        assert!(KvCache::with_type(KvType::F16, 2, 64, 16, 8).is_ok());
    }

    #[test]
    fn kv_types_parse_and_print_their_cli_names() {
        for ty in [KvType::F16, KvType::Q8_0] {
            assert_eq!(ty.to_string().parse::<KvType>().unwrap(), ty);
        }
        assert_eq!("Q8_0".parse::<KvType>().unwrap(), KvType::Q8_0);
        assert_eq!(KvType::default(), KvType::F16);
        assert!("q4_0".parse::<KvType>().is_err());
    }
}
