//! One layer's stored keys and values in the cache's type, and how rows are written into it
//! and copied out of it (for snapshots).

use half::f16;
use half::slice::HalfFloatSliceExt;
use kostant_kernels::attention_q4::{quantize_q4_0_kv, KvBlockQ4_0};
use kostant_kernels::attention_q8::{quantize_q8_0_kv, KvBlockQ8_0};

use super::{KvType, KV_BLOCK};

/// A 32-value block type of the cache: the block formats share every step of storing,
/// copying and loading rows but the quantizer and the byte coding, which this names.
trait KvBlock: Copy {
    /// Bytes of one block in a snapshot.
    const BYTES: usize;
    /// Quantizes `x` (32 values a block) into `out`.
    fn quantize(x: &[f32], out: &mut [Self]);
    /// Appends the block's bytes.
    fn put(&self, out: &mut Vec<u8>);
    /// A block from exactly [`KvBlock::BYTES`] bytes; None when they are not one.
    fn read(b: &[u8]) -> Option<Self>;
}

impl KvBlock for KvBlockQ8_0 {
    const BYTES: usize = KvBlockQ8_0::BYTES;
    fn quantize(x: &[f32], out: &mut [Self]) {
        quantize_q8_0_kv(x, out);
    }
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }
    fn read(b: &[u8]) -> Option<Self> {
        KvBlockQ8_0::from_bytes(b.try_into().ok()?)
    }
}

impl KvBlock for KvBlockQ4_0 {
    const BYTES: usize = KvBlockQ4_0::BYTES;
    fn quantize(x: &[f32], out: &mut [Self]) {
        quantize_q4_0_kv(x, out);
    }
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }
    fn read(b: &[u8]) -> Option<Self> {
        KvBlockQ4_0::from_bytes(b.try_into().ok()?)
    }
}

/// One layer's keys and values in the cache's type, (kv head, slot, value): head g's rows
/// are the `rows` slots from `g * rows` on (a slot holds one position; see `LayerCache`).
pub(super) enum Store {
    F16 {
        k: Vec<f16>, // (n_head_kv, rows, head_dim)
        v: Vec<f16>, // (n_head_kv, rows, head_dim)
    },
    Q8_0 {
        k: Vec<KvBlockQ8_0>, // (n_head_kv, rows, head_dim / 32)
        v: Vec<KvBlockQ8_0>, // (n_head_kv, rows, head_dim / 32)
    },
    Q4_0 {
        k: Vec<KvBlockQ4_0>, // (n_head_kv, rows, head_dim / 32)
        v: Vec<KvBlockQ4_0>, // (n_head_kv, rows, head_dim / 32)
    },
}

/// Where a layer's rows go: its width, head width and slots per head (the context for a
/// global layer, the ring for a windowed one).
#[derive(Clone, Copy)]
pub(super) struct Shape {
    pub(super) kv_dim: usize,
    pub(super) head_dim: usize,
    pub(super) rows: usize,
}

impl Shape {
    /// Stored elements per row of one head: values for f16, 32-value blocks for Q8_0 and
    /// Q4_0.
    fn per_row(self, ty: &Store) -> usize {
        match ty {
            Store::F16 { .. } => self.head_dim,
            Store::Q8_0 { .. } | Store::Q4_0 { .. } => self.head_dim / KV_BLOCK,
        }
    }
}

/// `n` copies of `x`, every one written: `resize` touches each element, so the pages are
/// resident from here on (a zeroed allocation would only be mapped, and peak memory would come
/// as a surprise later).
fn written<T: Clone>(n: usize, x: T) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    v.resize(n, x);
    v
}

impl Store {
    pub(super) fn zeroed(ty: KvType, n_values: usize) -> Store {
        match ty {
            KvType::F16 => Store::F16 {
                k: written(n_values, f16::ZERO),
                v: written(n_values, f16::ZERO),
            },
            KvType::Q8_0 => Store::Q8_0 {
                k: written(n_values / KV_BLOCK, KvBlockQ8_0::default()),
                v: written(n_values / KV_BLOCK, KvBlockQ8_0::default()),
            },
            KvType::Q4_0 => Store::Q4_0 {
                k: written(n_values / KV_BLOCK, KvBlockQ4_0::default()),
                v: written(n_values / KV_BLOCK, KvBlockQ4_0::default()),
            },
        }
    }

    pub(super) fn bytes(&self) -> usize {
        match self {
            Store::F16 { k, v } => (k.len() + v.len()) * size_of::<f16>(),
            Store::Q8_0 { k, v } => (k.len() + v.len()) * size_of::<KvBlockQ8_0>(),
            Store::Q4_0 { k, v } => (k.len() + v.len()) * size_of::<KvBlockQ4_0>(),
        }
    }

    /// Writes keys `xk` and values `xv`, (n, kv_dim) each, into slots `slot..slot + n`: each
    /// head's piece of a row goes to that head's rows.
    pub(super) fn write(&mut self, shape: Shape, slot: usize, xk: &[f32], xv: &[f32]) {
        let Shape {
            kv_dim,
            head_dim: hd,
            rows,
        } = shape;
        for (t, (rk, rv)) in xk
            .chunks_exact(kv_dim)
            .zip(xv.chunks_exact(kv_dim))
            .enumerate()
        {
            for (g, (hk, hv)) in rk.chunks_exact(hd).zip(rv.chunks_exact(hd)).enumerate() {
                let at = (g * rows + slot + t) * hd; // in values
                match self {
                    Store::F16 { k, v } => {
                        k[at..at + hd].convert_from_f32_slice(hk);
                        v[at..at + hd].convert_from_f32_slice(hv);
                    }
                    Store::Q8_0 { k, v } => write_blocks(k, v, at, hk, hv),
                    Store::Q4_0 { k, v } => write_blocks(k, v, at, hk, hv),
                }
            }
        }
    }

    /// Moves every head's slots `from..from + n` to `0..n` (a windowed layer dropping the
    /// positions no query can see any more). No allocation: `copy_within`.
    pub(super) fn shift(&mut self, shape: Shape, from: usize, n: usize) {
        fn each<T: Copy>(
            sides: [&mut Vec<T>; 2],
            heads: usize,
            stride: usize,
            from: usize,
            n: usize,
        ) {
            for side in sides {
                for g in 0..heads {
                    let base = g * stride;
                    side.copy_within(base + from..base + from + n, base);
                }
            }
        }
        let heads = shape.kv_dim / shape.head_dim;
        let per = shape.per_row(self);
        let (stride, from, n) = (shape.rows * per, from * per, n * per);
        match self {
            Store::F16 { k, v } => each([k, v], heads, stride, from, n),
            Store::Q8_0 { k, v } => each([k, v], heads, stride, from, n),
            Store::Q4_0 { k, v } => each([k, v], heads, stride, from, n),
        }
    }
}

/// Keys and values of slots `from..to` of one layer as bytes, appended to `out`: the keys
/// of kv head 0, 1, … in position order, then the values the same way. f16 values are
/// little-endian; Q8_0 and Q4_0 rows are their blocks ([`KvBlockQ8_0::to_bytes`],
/// [`KvBlockQ4_0::to_bytes`]).
impl Store {
    pub(super) fn copy_rows(&self, shape: Shape, from: usize, to: usize, out: &mut Vec<u8>) {
        let n_heads = shape.kv_dim / shape.head_dim;
        match self {
            Store::F16 { k, v } => {
                let hd = shape.head_dim;
                for side in [k, v] {
                    for g in 0..n_heads {
                        let rows = &side[(g * shape.rows + from) * hd..(g * shape.rows + to) * hd];
                        out.extend(rows.iter().flat_map(|x| x.to_le_bytes()));
                    }
                }
            }
            Store::Q8_0 { k, v } => copy_blocks([k, v], shape, from, to, out),
            Store::Q4_0 { k, v } => copy_blocks([k, v], shape, from, to, out),
        }
    }

    /// Writes slots `at..at + n` from bytes laid out as [`Store::copy_rows`] writes them
    /// (exactly `n` positions' worth: the caller checked the length). Fails, naming the first
    /// bad value, on a value that is not a finite number; slots before the bad one may have
    /// been written, so the caller must not count any of them as filled.
    pub(super) fn load_rows(
        &mut self,
        shape: Shape,
        at: usize,
        n: usize,
        bytes: &[u8],
    ) -> Result<(), String> {
        let n_heads = shape.kv_dim / shape.head_dim;
        match self {
            Store::F16 { k, v } => {
                let hd = shape.head_dim;
                let mut src = bytes.chunks_exact(2);
                for (s, side) in [k, v].into_iter().enumerate() {
                    for g in 0..n_heads {
                        let rows =
                            &mut side[(g * shape.rows + at) * hd..(g * shape.rows + at + n) * hd];
                        for x in rows.iter_mut() {
                            // Invariant: the caller checked there are n positions of bytes.
                            let b = src.next().unwrap();
                            let value = f16::from_le_bytes([b[0], b[1]]);
                            if !value.is_finite() {
                                return Err(format!(
                                    "a {} of kv head {g} is not a finite number",
                                    ["key", "value"][s]
                                ));
                            }
                            *x = value;
                        }
                    }
                }
            }
            Store::Q8_0 { k, v } => load_blocks([k, v], shape, at, n, bytes)?,
            Store::Q4_0 { k, v } => load_blocks([k, v], shape, at, n, bytes)?,
        }
        Ok(())
    }
}

/// [`Store::write`] for a block type: one head's key and value piece `hk`, `hv` quantized into
/// the blocks from value `at` on.
fn write_blocks<B: KvBlock>(k: &mut [B], v: &mut [B], at: usize, hk: &[f32], hv: &[f32]) {
    let (at, nb) = (at / KV_BLOCK, hk.len() / KV_BLOCK);
    B::quantize(hk, &mut k[at..at + nb]);
    B::quantize(hv, &mut v[at..at + nb]);
}

/// [`Store::copy_rows`] for a block type.
fn copy_blocks<B: KvBlock>(
    sides: [&Vec<B>; 2],
    shape: Shape,
    from: usize,
    to: usize,
    out: &mut Vec<u8>,
) {
    let (n_heads, nb) = (shape.kv_dim / shape.head_dim, shape.head_dim / KV_BLOCK);
    for side in sides {
        for g in 0..n_heads {
            let rows = &side[(g * shape.rows + from) * nb..(g * shape.rows + to) * nb];
            for b in rows {
                b.put(out);
            }
        }
    }
}

/// [`Store::load_rows`] for a block type: fails on a block whose scale is not a finite number.
fn load_blocks<B: KvBlock>(
    sides: [&mut Vec<B>; 2],
    shape: Shape,
    at: usize,
    n: usize,
    bytes: &[u8],
) -> Result<(), String> {
    let (n_heads, nb) = (shape.kv_dim / shape.head_dim, shape.head_dim / KV_BLOCK);
    let mut src = bytes.chunks_exact(B::BYTES);
    for (s, side) in sides.into_iter().enumerate() {
        for g in 0..n_heads {
            let rows = &mut side[(g * shape.rows + at) * nb..(g * shape.rows + at + n) * nb];
            for x in rows.iter_mut() {
                // Invariant: the caller checked there are n positions of bytes.
                let b = src.next().unwrap_or(&[]);
                *x = B::read(b).ok_or_else(|| {
                    format!(
                        "a {} block of kv head {g} has a scale that is not a finite number",
                        ["key", "value"][s]
                    )
                })?;
            }
        }
    }
    Ok(())
}
