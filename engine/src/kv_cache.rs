//! The key/value cache of one session: for every layer, the keys and values of every position
//! seen so far, appended in order.
//!
//! Storage is f16, as llama.cpp keeps it by default: half the memory of f32, and the same
//! rounding, so greedy decoding follows the reference token for token. It grows with the
//! conversation up to the context size, so a short chat does not pay for a long context up
//! front. (Paged, quantized and prefix-shared caches come with the speed work; the interface
//! here is what they will keep.)

use half::f16;
use half::slice::HalfFloatSliceExt;

/// Keys and values for one layer. Rows are positions; a row holds every kv head side by side.
#[derive(Default)]
struct LayerCache {
    k: Vec<f16>, // (positions, n_head_kv * head_dim)
    v: Vec<f16>, // (positions, n_head_kv * head_dim)
}

pub struct KvCache {
    layers: Vec<LayerCache>,
    kv_dim: usize,
    n_ctx: usize,
    len: usize,
}

impl KvCache {
    pub fn new(n_layer: usize, kv_dim: usize, n_ctx: usize) -> KvCache {
        KvCache {
            layers: (0..n_layer).map(|_| LayerCache::default()).collect(),
            kv_dim,
            n_ctx,
            len: 0,
        }
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

    /// Bytes held by the cache right now.
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| (l.k.capacity() + l.v.capacity()) * std::mem::size_of::<f16>())
            .sum()
    }

    /// Forgets every position from `len` on; the next token is written at `len`.
    pub fn truncate(&mut self, len: usize) {
        let len = len.min(self.len);
        for l in &mut self.layers {
            l.k.truncate(len * self.kv_dim);
            l.v.truncate(len * self.kv_dim);
        }
        self.len = len;
    }

    /// Appends the keys and values of `n` new positions to one layer. k, v: (n, kv_dim).
    pub(crate) fn append(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        let l = &mut self.layers[layer];
        for (cache, new) in [(&mut l.k, k), (&mut l.v, v)] {
            let start = cache.len();
            cache.resize(start + new.len(), f16::ZERO);
            cache[start..].convert_from_f32_slice(new);
        }
    }

    /// Marks `n` positions as written in every layer.
    pub(crate) fn advance(&mut self, n: usize) {
        self.len += n;
    }

    /// Keys and values of one layer for every stored position, including ones appended during
    /// the current forward pass.
    pub(crate) fn layer(&self, layer: usize) -> (&[f16], &[f16]) {
        let l = &self.layers[layer];
        (&l.k, &l.v)
    }
}
