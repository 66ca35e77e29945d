//! Attention over a Q8_0 kv cache: rows quantized into ggml's `block_q8_0` layout (32 values,
//! an f16 scale `d = max|x| / 127` and i8 codes `round(x / d)`), read in place.
//!
//! Its paths are `attention_kv`'s, shared with the Q4_0 cache. Numerics, chosen so
//! every path gives the scalar reference's bits:
//! - Scores: the query head is quantized to Q8_0 once (as ggml quantizes the query for a q8_0
//!   K cache), each 32-block's dot is an exact i32, and the blocks are combined in f32 in block
//!   order, `acc += (d_k * d_q) * sumi`, then times `scale`. Only the integer sums are SIMD, and
//!   integers add the same in any order.
//! - Values: `out[d] += (p_j * d_j) * q_j[d]` over positions in order, each step one fused
//!   multiply-add (`mul_add` in the reference, FMA lanes in SIMD), so the rounding is the same
//!   on every path. Probabilities stay f32; there is no f16 rounding to match here, since
//!   llama.cpp's q8_0 cache does not follow the f16 cache's order anyway.

use half::f16;

use crate::attention_kv::{self, KvBlock};
#[cfg(test)]
use crate::attention_kv::{dot_rows_scalar, weighted_sum_rows_scalar};

/// Values per block.
pub const Q8_0_BLOCK: usize = 32;

/// One block of a Q8_0 cache row, ggml's `block_q8_0` (34 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvBlockQ8_0 {
    // Crate-visible for `attention_q4`, whose scores read a Q8_0 query.
    pub(crate) d: f16,
    pub(crate) qs: [i8; Q8_0_BLOCK],
}
const _: () = assert!(size_of::<KvBlockQ8_0>() == 34);

impl KvBlockQ8_0 {
    /// Bytes a block takes when copied out (as ggml lays it out: the f16 scale, little-endian,
    /// then the 32 codes).
    pub const BYTES: usize = 34;

    /// The block as [`KvBlockQ8_0::BYTES`] bytes, for a context snapshot.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[..2].copy_from_slice(&self.d.to_le_bytes());
        for (o, q) in out[2..].iter_mut().zip(self.qs) {
            *o = q as u8;
        }
        out
    }

    /// A block read back from [`KvBlockQ8_0::to_bytes`]; None when its scale is not a finite
    /// number (no quantizer writes one, so the bytes were not a block).
    pub fn from_bytes(b: &[u8; Self::BYTES]) -> Option<KvBlockQ8_0> {
        let d = f16::from_le_bytes([b[0], b[1]]);
        if !d.is_finite() {
            return None;
        }
        let mut qs = [0i8; Q8_0_BLOCK];
        for (q, &x) in qs.iter_mut().zip(&b[2..]) {
            *q = x as i8;
        }
        Some(KvBlockQ8_0 { d, qs })
    }
}

impl Default for KvBlockQ8_0 {
    fn default() -> KvBlockQ8_0 {
        KvBlockQ8_0 {
            d: f16::ZERO,
            qs: [0; Q8_0_BLOCK],
        }
    }
}

impl KvBlockQ8_0 {
    /// The block's values, `d * q`.
    pub fn dequantize(&self, out: &mut [f32; Q8_0_BLOCK]) {
        let d = self.d.to_f32();
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = d * f32::from(q);
        }
    }
}

/// Quantizes `x` into `out`, 32 values a block.
///
/// # Panics
/// If `x.len() != 32 * out.len()`.
pub fn quantize_q8_0_kv(x: &[f32], out: &mut [KvBlockQ8_0]) {
    assert_eq!(
        x.len(),
        Q8_0_BLOCK * out.len(),
        "q8_0 kv quantize: length mismatch"
    );
    for (xb, b) in x.chunks_exact(Q8_0_BLOCK).zip(out.iter_mut()) {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        // The codes use the unrounded scale; only the stored scale is f16 (ggml's choice too).
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            *q = (v * id).round().clamp(-127.0, 127.0) as i8;
        }
        b.d = f16::from_f32(d);
    }
}

/// `scores[p] = scale * dot(q, row p)` where row p is `cache[p * stride + offset ..][..q.len()]`
/// (in blocks) and `q` is the query head already quantized with [`quantize_q8_0_kv`].
///
/// # Panics
/// If a row's blocks would run past `cache`.
pub fn dot_q8_0_rows(
    q: &[KvBlockQ8_0],
    cache: &[KvBlockQ8_0],
    stride: usize,
    offset: usize,
    scale: f32,
    scores: &mut [f32],
) {
    attention_kv::dot_rows(q, cache, stride, offset, scale, scores);
}

/// `out = Σ_p probs[p] * dequantized row p` (rows as in [`dot_q8_0_rows`], `out.len() / 32`
/// blocks wide).
///
/// # Panics
/// If `out.len()` is not a multiple of 32 or a row would run past `cache`.
pub fn weighted_sum_q8_0_rows(
    probs: &[f32],
    cache: &[KvBlockQ8_0],
    stride: usize,
    offset: usize,
    out: &mut [f32],
) {
    attention_kv::weighted_sum_rows(probs, cache, stride, offset, out);
}

/// The codes are the i8 values themselves.
impl KvBlock for KvBlockQ8_0 {
    const NAME: &'static str = "q8_0";

    fn scale(&self) -> f32 {
        self.d.to_f32()
    }

    fn codes(&self) -> [i32; Q8_0_BLOCK] {
        self.qs.map(i32::from)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn codes_avx2(&self) -> std::arch::x86_64::__m256i {
        crate::x86::load_i8x32(&self.qs)
    }

    #[cfg(target_arch = "aarch64")]
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn codes_neon(&self) -> (std::arch::aarch64::int8x16_t, std::arch::aarch64::int8x16_t) {
        crate::neon::load_i8x32(&self.qs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    fn quantized(r: &mut Rng, n_blocks: usize, scale: f32) -> Vec<KvBlockQ8_0> {
        let mut b = vec![KvBlockQ8_0::default(); n_blocks];
        quantize_q8_0_kv(&random_f32(r, n_blocks * Q8_0_BLOCK, scale), &mut b);
        b
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|v| v.to_bits()).collect()
    }

    /// The dispatched path (AVX2, NEON or scalar) gives the reference's bits: integer block sums
    /// are exact, and the float steps are the same operations in the same order.
    #[test]
    fn simd_paths_equal_the_reference_bit_for_bit() {
        let mut r = rng(120);
        // (head blocks, row stride, head offset), all in blocks: 64- and 128-wide heads inside
        // wider rows, and one head alone.
        for (nb, stride, offset) in [(2, 6, 2), (4, 32, 28), (1, 1, 0), (3, 9, 6)] {
            for rows in [1, 7, 37] {
                let cache = quantized(&mut r, rows * stride, 2.0);
                let q = quantized(&mut r, nb, 1.0);
                let mut want = vec![0.0; rows];
                dot_rows_scalar(&q, &cache, stride, offset, 0.125, &mut want);
                let mut got = vec![0.0; rows];
                dot_q8_0_rows(&q, &cache, stride, offset, 0.125, &mut got);
                assert_eq!(bits(&got), bits(&want), "dot nb {nb} rows {rows}");

                let probs: Vec<f32> = random_f32(&mut r, rows, 1.0);
                let mut want = vec![0.0; nb * Q8_0_BLOCK];
                weighted_sum_rows_scalar(&probs, &cache, stride, offset, &mut want);
                let mut got = vec![1.0; nb * Q8_0_BLOCK];
                weighted_sum_q8_0_rows(&probs, &cache, stride, offset, &mut got);
                assert_eq!(bits(&got), bits(&want), "weighted sum nb {nb} rows {rows}");
            }
        }
    }

    /// Each value comes back within half a step of its block's scale (plus the f16 rounding of
    /// the stored scale, up to 127 codes times 2^-11 relative).
    #[test]
    fn quantized_rows_come_back_within_half_a_step() {
        let mut r = rng(121);
        let x = random_f32(&mut r, 8 * Q8_0_BLOCK, 3.0);
        let mut b = vec![KvBlockQ8_0::default(); 8];
        quantize_q8_0_kv(&x, &mut b);
        let mut back = [0.0f32; Q8_0_BLOCK];
        for (xb, blk) in x.chunks_exact(Q8_0_BLOCK).zip(&b) {
            blk.dequantize(&mut back);
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let tol = amax / 127.0 * (0.5 + 127.0 * 2f32.powi(-11)) * 1.001;
            for (&a, &y) in xb.iter().zip(&back) {
                assert!((a - y).abs() <= tol, "{a} came back as {y} (tol {tol})");
            }
        }
        // An all-zero block stays zero instead of dividing by zero.
        let mut z = [KvBlockQ8_0::default()];
        quantize_q8_0_kv(&[0.0; Q8_0_BLOCK], &mut z);
        z[0].dequantize(&mut back);
        assert!(back.iter().all(|&v| v == 0.0));
    }

    /// The quantized score stays within the error of quantizing both sides: per element, each
    /// side moves by at most 0.51 of a step `amax / 127` (f16 scale included), so the dot moves
    /// by at most Σ (|q| · step_k + |k| · step_q + step_q · step_k) / 2-ish; we take the sum of
    /// the three terms, which bounds it.
    #[test]
    fn scores_are_close_to_the_f64_dot() {
        let mut r = rng(122);
        let (nb, rows) = (4, 5);
        let n = nb * Q8_0_BLOCK;
        let kx = random_f32(&mut r, rows * n, 1.0);
        let qx = random_f32(&mut r, n, 1.0);
        let mut k = vec![KvBlockQ8_0::default(); rows * nb];
        quantize_q8_0_kv(&kx, &mut k);
        let mut q = vec![KvBlockQ8_0::default(); nb];
        quantize_q8_0_kv(&qx, &mut q);
        let mut got = vec![0.0; rows];
        dot_q8_0_rows(&q, &k, nb, 0, 1.0, &mut got);
        let step = |xb: &[f32]| xb.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0 * 0.51;
        for (p, &g) in got.iter().enumerate() {
            let row = &kx[p * n..(p + 1) * n];
            let exact: f64 = row
                .iter()
                .zip(&qx)
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum();
            let mut budget = 0.0f64;
            for (kb, qb) in row.chunks_exact(32).zip(qx.chunks_exact(32)) {
                let (sk, sq) = (step(kb) as f64, step(qb) as f64);
                for (&a, &b) in kb.iter().zip(qb) {
                    budget += (b.abs() as f64) * sk + (a.abs() as f64) * sq + sk * sq;
                }
            }
            assert!(
                (g as f64 - exact).abs() <= budget * 1.01 + 1e-5,
                "row {p}: {g} vs {exact}, budget {budget}"
            );
        }
    }

    /// The weighted sum is `Σ p · d · q` up to f32 rounding: one rounding for `p · d` and one
    /// per fused step, each at most ε relative, so within `2·rows·ε·Σ|terms|` of the f64 sum.
    #[test]
    fn the_weighted_sum_is_close_to_the_f64_sum() {
        let mut r = rng(123);
        let (nb, rows, offset, stride) = (4, 9, 2, 6);
        let cache = quantized(&mut r, rows * stride, 1.0);
        let probs = random_f32(&mut r, rows, 0.3);
        let mut got = vec![0.0; nb * Q8_0_BLOCK];
        weighted_sum_q8_0_rows(&probs, &cache, stride, offset, &mut got);
        let mut row = [0.0f32; Q8_0_BLOCK];
        for (d, &g) in got.iter().enumerate() {
            let (mut exact, mut abs) = (0.0f64, 0.0f64);
            for (p, &prob) in probs.iter().enumerate() {
                cache[p * stride + offset + d / Q8_0_BLOCK].dequantize(&mut row);
                let term = f64::from(prob) * f64::from(row[d % Q8_0_BLOCK]);
                exact += term;
                abs += term.abs();
            }
            let tol = 2.0 * rows as f64 * f64::from(f32::EPSILON) * abs + 1e-30;
            assert!((f64::from(g) - exact).abs() <= tol, "{d}: {g} vs {exact}");
        }
    }

    #[test]
    #[should_panic(expected = "run past a cache")]
    fn rows_past_the_cache_panic() {
        let cache = vec![KvBlockQ8_0::default(); 3];
        let q = vec![KvBlockQ8_0::default(); 2];
        let mut s = vec![0.0; 2];
        dot_q8_0_rows(&q, &cache, 2, 0, 1.0, &mut s);
    }
}
