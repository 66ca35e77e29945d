//! The key/value cache of one session: for every layer, the keys and values of every position
//! seen so far, appended in order.
//!
//! Storage is f16, as llama.cpp keeps it by default: half the memory of f32, and the same
//! rounding, so greedy decoding follows the reference token for token. The whole context is
//! allocated and written (zeroed) when the cache is made, as llama.cpp clears its cache buffer:
//! the memory a session will need is claimed, and counted, at the start, and no token ever
//! allocates. (Paged, quantized and prefix-shared caches may come later; the interface here is
//! what they will keep.)

use half::f16;
use half::slice::HalfFloatSliceExt;

/// Keys and values for one layer. Rows are positions; a row holds every kv head side by side.
struct LayerCache {
    k: Vec<f16>, // (n_ctx, n_head_kv * head_dim)
    v: Vec<f16>, // (n_ctx, n_head_kv * head_dim)
    /// Positions written in this layer (ahead of `KvCache::len` during a forward pass).
    filled: usize,
}

pub struct KvCache {
    layers: Vec<LayerCache>,
    kv_dim: usize,
    n_ctx: usize,
    len: usize,
}

impl KvCache {
    pub fn new(n_layer: usize, kv_dim: usize, n_ctx: usize) -> KvCache {
        // `resize` writes every element, so the pages are resident from here on (a zeroed
        // allocation would only be mapped, and peak memory would come as a surprise later).
        let zeroed = || {
            let mut v = Vec::with_capacity(n_ctx * kv_dim);
            v.resize(n_ctx * kv_dim, f16::ZERO);
            v
        };
        KvCache {
            layers: (0..n_layer)
                .map(|_| LayerCache {
                    k: zeroed(),
                    v: zeroed(),
                    filled: 0,
                })
                .collect(),
            kv_dim,
            n_ctx,
            len: 0,
        }
    }

    /// Bytes a cache of this shape takes.
    pub fn planned_bytes(n_layer: usize, kv_dim: usize, n_ctx: usize) -> usize {
        2 * n_layer * n_ctx * kv_dim * std::mem::size_of::<f16>()
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
        self.layers
            .iter()
            .map(|l| (l.k.len() + l.v.len()) * std::mem::size_of::<f16>())
            .sum()
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
        let start = l.filled * self.kv_dim;
        l.k[start..start + k.len()].convert_from_f32_slice(k);
        l.v[start..start + v.len()].convert_from_f32_slice(v);
        l.filled += k.len() / self.kv_dim;
    }

    /// Marks `n` positions as written in every layer.
    pub(crate) fn advance(&mut self, n: usize) {
        self.len += n;
        for l in &mut self.layers {
            l.filled = self.len;
        }
    }

    /// Keys and values of one layer for every stored position, including ones appended during
    /// the current forward pass.
    pub(crate) fn layer(&self, layer: usize) -> (&[f16], &[f16]) {
        let l = &self.layers[layer];
        let end = l.filled * self.kv_dim;
        (&l.k[..end], &l.v[..end])
    }
}
