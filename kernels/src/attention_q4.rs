//! Attention over a Q4_0 kv cache: rows quantized into ggml's `block_q4_0` layout (32 values,
//! an f16 scale `d = max / -8` where `max` is the value of largest magnitude, sign kept, and
//! 4-bit codes `q` with `x ≈ d · (q - 8)`), read in place. Value `i < 16` is the low nibble of
//! byte `i`, value `i + 16` its high nibble.
//!
//! Numerics mirror [`crate::attention_q8`], so every path gives the scalar reference's bits:
//! - Scores: the query head is quantized to Q8_0 once ([`quantize_q8_0_kv`], as ggml
//!   quantizes the query for a q4_0 K cache), each 32-block's dot `Σ (q4 - 8) · q8` is an exact
//!   i32, and the blocks are combined in f32 in block order, `acc += (d_k * d_q) * sumi`, then
//!   times `scale`. Only the integer sums are SIMD, and integers add the same in any order.
//! - Values: `out[d] += (p_j * d_j) * (q_j[d] - 8)` over positions in order, each step one fused
//!   multiply-add (`mul_add` in the reference, FMA lanes in SIMD).
//!
//! There is no AVX-512 variant: `attention_q8` has none either, and both x86 SIMD paths run the
//! AVX2 code of `attention_kv`, where both formats' paths live.
//!
//! [`quantize_q8_0_kv`]: crate::attention_q8::quantize_q8_0_kv

use half::f16;

#[cfg(all(test, target_arch = "x86_64"))]
use crate::attention_kv::avx2;
#[cfg(all(test, target_arch = "aarch64"))]
use crate::attention_kv::neon;
use crate::attention_kv::{self, KvBlock};
#[cfg(test)]
use crate::attention_kv::{dot_rows_scalar, weighted_sum_rows_scalar};
use crate::attention_q8::KvBlockQ8_0;

/// Values per block.
pub const Q4_0_BLOCK: usize = 32;

/// One block of a Q4_0 cache row, ggml's `block_q4_0` (18 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvBlockQ4_0 {
    d: f16,
    qs: [u8; Q4_0_BLOCK / 2],
}
const _: () = assert!(size_of::<KvBlockQ4_0>() == 18);

impl KvBlockQ4_0 {
    /// Bytes a block takes when copied out (as ggml lays it out: the f16 scale, little-endian,
    /// then the 16 bytes of nibbles).
    pub const BYTES: usize = 18;

    /// The block as [`KvBlockQ4_0::BYTES`] bytes, for a context snapshot.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..].copy_from_slice(&self.qs);
        out
    }

    /// A block read back from [`KvBlockQ4_0::to_bytes`]; None when its scale is not a finite
    /// number (no quantizer writes one, so the bytes were not a block). Every nibble is a valid
    /// code.
    pub fn from_bytes(b: &[u8; Self::BYTES]) -> Option<KvBlockQ4_0> {
        let d = f16::from_le_bytes([b[0], b[1]]);
        if !d.is_finite() {
            return None;
        }
        let mut qs = [0u8; Q4_0_BLOCK / 2];
        qs.copy_from_slice(&b[2..]);
        Some(KvBlockQ4_0 { d, qs })
    }

    /// The block's values, `d * (q - 8)`.
    pub fn dequantize(&self, out: &mut [f32; Q4_0_BLOCK]) {
        let d = self.d.to_f32();
        let (lo, hi) = out.split_at_mut(Q4_0_BLOCK / 2);
        for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(&self.qs) {
            *l = d * (i32::from(q & 0x0F) - 8) as f32;
            *h = d * (i32::from(q >> 4) - 8) as f32;
        }
    }
}

impl Default for KvBlockQ4_0 {
    /// A zero scale: all 32 values read back as 0, whatever the codes.
    fn default() -> KvBlockQ4_0 {
        KvBlockQ4_0 {
            d: f16::ZERO,
            qs: [0x88; Q4_0_BLOCK / 2],
        }
    }
}

/// Quantizes `x` into `out`, 32 values a block, by ggml's `quantize_row_q4_0_ref`.
///
/// # Panics
/// If `x.len() != 32 * out.len()`.
pub fn quantize_q4_0_kv(x: &[f32], out: &mut [KvBlockQ4_0]) {
    assert_eq!(
        x.len(),
        Q4_0_BLOCK * out.len(),
        "q4_0 kv quantize: length mismatch"
    );
    for (xb, b) in x.chunks_exact(Q4_0_BLOCK).zip(out.iter_mut()) {
        // The value of largest magnitude, its sign kept (the first one wins a tie, as in
        // ggml's strict `<`): it maps to code 0, so the asymmetric range [-8, 7] puts its
        // extra step on that value's side.
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in xb {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        // The codes use the unrounded scale; only the stored scale is f16 (ggml's choice).
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        // ggml: `MIN(15, (int8_t)(x * id + 8.5f))`, truncating toward zero. `x * id` lies in
        // [-8, 8] (|x| <= amax), so the cast never leaves i8's range and never goes below 0
        // on a finite input; the clamp's lower end only pins what a NaN would give.
        let code = |v: f32| ((v * id + 8.5) as i8).clamp(0, 15) as u8;
        let (lo, hi) = xb.split_at(Q4_0_BLOCK / 2);
        for ((q, &l), &h) in b.qs.iter_mut().zip(lo).zip(hi) {
            *q = code(l) | (code(h) << 4);
        }
        b.d = f16::from_f32(d);
    }
}

/// `scores[p] = scale * dot(q, row p)` where row p is `cache[p * stride + offset ..][..q.len()]`
/// (in blocks) and `q` is the query head quantized with
/// [`quantize_q8_0_kv`](crate::attention_q8::quantize_q8_0_kv).
///
/// # Panics
/// If a row's blocks would run past `cache`.
pub fn dot_q4_0_rows(
    q: &[KvBlockQ8_0],
    cache: &[KvBlockQ4_0],
    stride: usize,
    offset: usize,
    scale: f32,
    scores: &mut [f32],
) {
    attention_kv::dot_rows(q, cache, stride, offset, scale, scores);
}

/// `out = Σ_p probs[p] * dequantized row p` (rows as in [`dot_q4_0_rows`], `out.len() / 32`
/// blocks wide).
///
/// # Panics
/// If `out.len()` is not a multiple of 32 or a row would run past `cache`.
pub fn weighted_sum_q4_0_rows(
    probs: &[f32],
    cache: &[KvBlockQ4_0],
    stride: usize,
    offset: usize,
    out: &mut [f32],
) {
    attention_kv::weighted_sum_rows(probs, cache, stride, offset, out);
}

/// The codes are the nibbles minus 8; value `i < 16` is the low nibble of byte `i`.
impl KvBlock for KvBlockQ4_0 {
    const NAME: &'static str = "q4_0";

    fn scale(&self) -> f32 {
        self.d.to_f32()
    }

    fn codes(&self) -> [i32; Q4_0_BLOCK] {
        let mut c = [0i32; Q4_0_BLOCK];
        for (j, &q) in self.qs.iter().enumerate() {
            c[j] = i32::from(q & 0x0F) - 8;
            c[j + Q4_0_BLOCK / 2] = i32::from(q >> 4) - 8;
        }
        c
    }

    /// Low nibbles in the low 128-bit lane.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn codes_avx2(&self) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        _mm256_sub_epi8(crate::x86::unpack_nibbles_32(&self.qs), _mm256_set1_epi8(8))
    }

    #[cfg(target_arch = "aarch64")]
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn codes_neon(&self) -> (std::arch::aarch64::int8x16_t, std::arch::aarch64::int8x16_t) {
        use std::arch::aarch64::*;
        let q = crate::neon::load_u8x16(&self.qs);
        let eight = vdupq_n_s8(8);
        (
            vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), eight),
            vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(q)), eight),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention_q8::quantize_q8_0_kv;
    use crate::testutil::*;

    fn quantized(r: &mut Rng, n_blocks: usize, scale: f32) -> Vec<KvBlockQ4_0> {
        let mut b = vec![KvBlockQ4_0::default(); n_blocks];
        quantize_q4_0_kv(&random_f32(r, n_blocks * Q4_0_BLOCK, scale), &mut b);
        b
    }

    /// Blocks of arbitrary nibbles (every code 0..15 appears, which quantized data need not
    /// reach on both ends) with random scales of either sign.
    fn random_blocks(r: &mut Rng, n_blocks: usize) -> Vec<KvBlockQ4_0> {
        (0..n_blocks)
            .map(|_| KvBlockQ4_0 {
                d: f16::from_f32(random_f32(r, 1, 0.2)[0]),
                qs: random_bytes(r),
            })
            .collect()
    }

    fn query(r: &mut Rng, n_blocks: usize) -> Vec<KvBlockQ8_0> {
        let mut b = vec![KvBlockQ8_0::default(); n_blocks];
        quantize_q8_0_kv(&random_f32(r, n_blocks * Q4_0_BLOCK, 1.0), &mut b);
        b
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|v| v.to_bits()).collect()
    }

    /// (head blocks, row stride, head offset), all in blocks: 64- and 128-wide heads inside
    /// wider rows, and one head alone.
    const LAYOUTS: [(usize, usize, usize); 4] = [(2, 6, 2), (4, 32, 28), (1, 1, 0), (3, 9, 6)];

    /// Runs `simd_dot` and `simd_sum` (a SIMD path's two kernels) against the scalar
    /// reference on quantized and on arbitrary blocks, odd row counts included.
    fn check_against_the_reference(
        simd_dot: impl Fn(&[KvBlockQ8_0], &[KvBlockQ4_0], usize, usize, f32, &mut [f32]),
        simd_sum: impl Fn(&[f32], &[KvBlockQ4_0], usize, usize, &mut [f32]),
        seed: u64,
    ) {
        let mut r = rng(seed);
        for (nb, stride, offset) in LAYOUTS {
            for rows in [1, 7, 37] {
                for arbitrary in [false, true] {
                    let cache = if arbitrary {
                        random_blocks(&mut r, rows * stride)
                    } else {
                        quantized(&mut r, rows * stride, 2.0)
                    };
                    let q = query(&mut r, nb);
                    let mut want = vec![0.0; rows];
                    dot_rows_scalar(&q, &cache, stride, offset, 0.125, &mut want);
                    let mut got = vec![0.0; rows];
                    simd_dot(&q, &cache, stride, offset, 0.125, &mut got);
                    assert_eq!(bits(&got), bits(&want), "dot nb {nb} rows {rows}");

                    let probs: Vec<f32> = random_f32(&mut r, rows, 1.0);
                    let mut want = vec![0.0; nb * Q4_0_BLOCK];
                    weighted_sum_rows_scalar(&probs, &cache, stride, offset, &mut want);
                    let mut got = vec![1.0; nb * Q4_0_BLOCK];
                    simd_sum(&probs, &cache, stride, offset, &mut got);
                    assert_eq!(bits(&got), bits(&want), "weighted sum nb {nb} rows {rows}");
                }
            }
        }
    }

    /// The dispatched path (AVX2, NEON or scalar) gives the reference's bits: integer block sums
    /// are exact, and the float steps are the same operations in the same order.
    #[test]
    fn the_dispatched_path_equals_the_reference_bit_for_bit() {
        check_against_the_reference(dot_q4_0_rows, weighted_sum_q4_0_rows, 130);
    }

    /// The AVX2 kernels called directly (so `KOSTANT_FORCE_SCALAR` cannot hide them): skipped
    /// on a CPU without AVX2 unless `KOSTANT_REQUIRE_FEATURES` names it, and then it fails.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_equals_the_reference_bit_for_bit() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        check_against_the_reference(
            // SAFETY: avx2+fma+f16c were detected above; `dot_rows_scalar` on the same
            // arguments indexes the same rows, so they lie inside the cache.
            |q, c, s, o, sc, out| unsafe { avx2::dot_rows(q, c, s, o, sc, out) },
            // SAFETY: as above; the output is zeroed as the safe entry point does.
            |p, c, s, o, out| unsafe {
                out.fill(0.0);
                avx2::weighted_sum_rows(p, c, s, o, out)
            },
            131,
        );
    }

    /// The NEON kernels called directly, as the AVX2 test does.
    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_equals_the_reference_bit_for_bit() {
        if !crate::required::test_needs("neon") {
            return;
        }
        check_against_the_reference(
            // SAFETY: neon was detected above; the rows are the reference's, inside the cache.
            |q, c, s, o, sc, out| unsafe { neon::dot_rows(q, c, s, o, sc, out) },
            // SAFETY: as above; the output is zeroed as the safe entry point does.
            |p, c, s, o, out| unsafe {
                out.fill(0.0);
                neon::weighted_sum_rows(p, c, s, o, out)
            },
            132,
        );
    }

    /// ggml's rule on a block worked by hand: the largest magnitude (-4, sign kept) sets
    /// d = -4 / -8 = 0.5, codes are `min(15, trunc(x / d + 8.5))`, and value i + 16 sits in the
    /// high nibble of byte i.
    #[test]
    fn quantizes_as_ggml_does() {
        let mut x = [0.0f32; Q4_0_BLOCK];
        x[0] = -4.0; // code 0
        x[1] = 2.0; // 4 + 8.5 -> 12
        x[2] = 3.5; // 7 + 8.5 = 15.5 -> 15
        x[3] = 3.9; // 7.8 + 8.5 = 16.3 -> 16, clamped to 15
        x[4] = 1.24; // 2.48 + 8.5 = 10.98 -> 10 (truncation, not rounding to 11)
        x[5] = -0.3; // -0.6 + 8.5 = 7.9 -> 7
        x[16] = 1.25; // 2.5 + 8.5 = 11 -> 11, high nibble of byte 0
        x[31] = -3.75; // -7.5 + 8.5 = 1 -> 1, high nibble of byte 15
        let mut b = [KvBlockQ4_0::default()];
        quantize_q4_0_kv(&x, &mut b);
        let bytes = b[0].to_bytes();
        assert_eq!(f16::from_le_bytes([bytes[0], bytes[1]]).to_f32(), 0.5);
        let qs = &bytes[2..];
        assert_eq!(qs[0], 11 << 4);
        assert_eq!(qs[1], 12 | (8 << 4));
        assert_eq!(qs[2], 15 | (8 << 4));
        assert_eq!(qs[3], 15 | (8 << 4));
        assert_eq!(qs[4], 10 | (8 << 4));
        assert_eq!(qs[5], 7 | (8 << 4));
        assert_eq!(qs[15], 8 | (1 << 4));
        let mut back = [0.0f32; Q4_0_BLOCK];
        b[0].dequantize(&mut back);
        assert_eq!(&back[..6], &[-4.0, 2.0, 3.5, 3.5, 1.0, -0.5]);
        assert_eq!((back[16], back[31], back[6]), (1.5, -3.5, 0.0));

        // A tie in magnitude goes to the first value: 3 before -3 makes d = 3 / -8 < 0.
        let mut x = [0.0f32; Q4_0_BLOCK];
        x[2] = 3.0;
        x[7] = -3.0;
        quantize_q4_0_kv(&x, &mut b);
        b[0].dequantize(&mut back);
        assert_eq!(b[0].d.to_f32(), -0.375);
        assert_eq!((back[2], back[7]), (3.0, -2.625));
    }

    /// A value comes back within half a step `|d| = |max| / 8` unless its code was clamped at
    /// 15 (the side opposite the largest value, past 7.5 steps), then within one step; plus the
    /// f16 rounding of the stored scale (2^-11 relative, over up to 8 steps).
    #[test]
    fn quantized_rows_come_back_within_the_block_error() {
        let mut r = rng(133);
        let x = random_f32(&mut r, 64 * Q4_0_BLOCK, 3.0);
        let mut b = vec![KvBlockQ4_0::default(); 64];
        quantize_q4_0_kv(&x, &mut b);
        let mut back = [0.0f32; Q4_0_BLOCK];
        let mut clamped = 0;
        for (xb, blk) in x.chunks_exact(Q4_0_BLOCK).zip(&b) {
            blk.dequantize(&mut back);
            let max = xb
                .iter()
                .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
            let step = max.abs() / 8.0;
            let rounding = 8.0 * step * 2f32.powi(-11);
            for (&a, &y) in xb.iter().zip(&back) {
                let past = a * max < 0.0 && a.abs() > 7.5 * step;
                clamped += usize::from(past);
                let tol = (if past { step } else { 0.5 * step } + rounding) * 1.001;
                assert!((a - y).abs() <= tol, "{a} came back as {y} (tol {tol})");
            }
        }
        assert!(clamped > 0, "no value reached the clamped side");
        // An all-zero block stays zero instead of dividing by zero.
        let mut z = [KvBlockQ4_0::default()];
        quantize_q4_0_kv(&[0.0; Q4_0_BLOCK], &mut z);
        z[0].dequantize(&mut back);
        assert!(back.iter().all(|&v| v == 0.0));
    }

    /// The quantized score stays within the error of quantizing both sides: per element the
    /// key moves by at most one step `|max| / 8` (see the test above) and the query by 0.51 of
    /// `max|q| / 127`, so the dot moves by at most Σ (|q|·step_k + |k|·step_q + step_k·step_q).
    #[test]
    fn scores_are_close_to_the_f64_dot() {
        let mut r = rng(134);
        let (nb, rows) = (4, 5);
        let n = nb * Q4_0_BLOCK;
        let kx = random_f32(&mut r, rows * n, 1.0);
        let qx = random_f32(&mut r, n, 1.0);
        let mut k = vec![KvBlockQ4_0::default(); rows * nb];
        quantize_q4_0_kv(&kx, &mut k);
        let mut q = vec![KvBlockQ8_0::default(); nb];
        quantize_q8_0_kv(&qx, &mut q);
        let mut got = vec![0.0; rows];
        dot_q4_0_rows(&q, &k, nb, 0, 1.0, &mut got);
        let amax = |xb: &[f32]| xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (p, &g) in got.iter().enumerate() {
            let row = &kx[p * n..(p + 1) * n];
            let exact: f64 = row
                .iter()
                .zip(&qx)
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum();
            let mut budget = 0.0f64;
            for (kb, qb) in row.chunks_exact(32).zip(qx.chunks_exact(32)) {
                let sk = f64::from(amax(kb) / 8.0) * 1.01;
                let sq = f64::from(amax(qb) / 127.0) * 0.51;
                for (&a, &b) in kb.iter().zip(qb) {
                    budget += f64::from(b.abs()) * sk + f64::from(a.abs()) * sq + sk * sq;
                }
            }
            assert!(
                (g as f64 - exact).abs() <= budget * 1.01 + 1e-5,
                "row {p}: {g} vs {exact}, budget {budget}"
            );
        }
    }

    /// The weighted sum is `Σ p · d · (q - 8)` up to f32 rounding: one rounding for `p · d` and
    /// one per fused step, each at most ε relative, so within `2·rows·ε·Σ|terms|` of the f64 sum.
    #[test]
    fn the_weighted_sum_is_close_to_the_f64_sum() {
        let mut r = rng(135);
        let (nb, rows, offset, stride) = (4, 9, 2, 6);
        let cache = quantized(&mut r, rows * stride, 1.0);
        let probs = random_f32(&mut r, rows, 0.3);
        let mut got = vec![0.0; nb * Q4_0_BLOCK];
        weighted_sum_q4_0_rows(&probs, &cache, stride, offset, &mut got);
        let mut row = [0.0f32; Q4_0_BLOCK];
        for (d, &g) in got.iter().enumerate() {
            let (mut exact, mut abs) = (0.0f64, 0.0f64);
            for (p, &prob) in probs.iter().enumerate() {
                cache[p * stride + offset + d / Q4_0_BLOCK].dequantize(&mut row);
                let term = f64::from(prob) * f64::from(row[d % Q4_0_BLOCK]);
                exact += term;
                abs += term.abs();
            }
            let tol = 2.0 * rows as f64 * f64::from(f32::EPSILON) * abs + 1e-30;
            assert!((f64::from(g) - exact).abs() <= tol, "{d}: {g} vs {exact}");
        }
    }

    #[test]
    fn blocks_round_trip_through_bytes_and_refuse_a_non_finite_scale() {
        let mut r = rng(136);
        for b in random_blocks(&mut r, 16) {
            assert_eq!(KvBlockQ4_0::from_bytes(&b.to_bytes()), Some(b));
        }
        for bad in [f16::NAN, f16::INFINITY, f16::NEG_INFINITY] {
            let mut bytes = [0x5Au8; KvBlockQ4_0::BYTES];
            bytes[..2].copy_from_slice(&bad.to_le_bytes());
            assert_eq!(KvBlockQ4_0::from_bytes(&bytes), None);
        }
    }

    #[test]
    #[should_panic(expected = "run past a cache")]
    fn rows_past_the_cache_panic() {
        let cache = vec![KvBlockQ4_0::default(); 3];
        let q = vec![KvBlockQ8_0::default(); 2];
        let mut s = vec![0.0; 2];
        dot_q4_0_rows(&q, &cache, 2, 0, 1.0, &mut s);
    }
}
