//! Q2_K weights: 256-element super-blocks of sixteen 16-element sub-blocks, each with a 4-bit
//! scale and a 4-bit minimum under two f16 super-scales, and 2-bit codes:
//! `x = d·sc·q - dmin·m`. Dotted against Q8_K activations, whose per-16 sums carry the
//! minimum term.

use super::q8_k::BlockQ8K;
use crate::block::{f16_to_f32, f32_to_f16, round_to_f16, ByteBlock};

/// ggml's `block_q2_K`. `scales[i]` holds sub-block `i`'s scale (low nibble) and minimum (high
/// nibble); element `e` lies in 32-element chunk `c = e / 32` at position `l = e % 32`, its code
/// at bits `2(c % 4)..` of `qs[c / 4][l]`, its sub-block is `e / 16`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockQ2K {
    pub scales: [u8; 16],
    pub qs: [[u8; 32]; 2],
    pub d: [u8; 2],
    pub dmin: [u8; 2],
}
const _: () = assert!(size_of::<BlockQ2K>() == 84);
// SAFETY: repr(C), only u8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockQ2K {}

pub(crate) const QK: usize = 256;

/// Code of element `e` (0..256), 0..3.
#[inline]
fn code(b: &BlockQ2K, e: usize) -> i32 {
    let (c, l) = (e / 32, e % 32);
    i32::from((b.qs[c / 4][l] >> (2 * (c % 4))) & 3)
}

/// Σ over sub-blocks of the minimum times the activations' sum over that sub-block: the
/// integer part of the minimum term.
#[inline]
fn min_term(b: &BlockQ2K, a: &BlockQ8K) -> i32 {
    b.scales
        .iter()
        .zip(&a.bsums)
        .map(|(&s, &sum)| i32::from(s >> 4) * i32::from(sum))
        .sum()
}

/// `out.len() == 256 * blocks.len()`.
pub(crate) fn dequantize(blocks: &[BlockQ2K], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        QK * blocks.len(),
        "q2_k dequantize: length mismatch"
    );
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let (d, dmin) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
        for (e, y) in o.iter_mut().enumerate() {
            let s = b.scales[e / 16];
            let (dl, ml) = (d * f32::from(s & 0xF), dmin * f32::from(s >> 4));
            *y = dl * code(b, e) as f32 - ml;
        }
    }
}

/// Reference quantizer (simpler than ggml's): a min/max fit per sub-block (`x ≈ s·q - m`,
/// q in 0..3, m >= 0), scales and minimums quantized to 4 bits against the super-block's
/// largest, codes chosen against the values the dequantizer will compute.
pub(crate) fn quantize(x: &[f32], out: &mut [BlockQ2K]) {
    assert_eq!(x.len(), QK * out.len(), "q2_k quantize: length mismatch");
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let fits: [(f32, f32); 16] = std::array::from_fn(|i| {
            let v = &xb[16 * i..16 * i + 16];
            let lo = v.iter().copied().fold(0.0f32, f32::min);
            let hi = v.iter().copied().fold(0.0f32, f32::max);
            ((hi - lo) / 3.0, -lo)
        });
        let max_s = fits.iter().fold(0.0f32, |a, f| a.max(f.0));
        let max_m = fits.iter().fold(0.0f32, |a, f| a.max(f.1));
        let d = round_to_f16(max_s / 15.0);
        let dmin = round_to_f16(max_m / 15.0);
        let four_bits = |v: f32, unit: f32| {
            if unit > 0.0 {
                (v / unit).round().clamp(0.0, 15.0) as u8
            } else {
                0
            }
        };
        b.scales =
            std::array::from_fn(|i| four_bits(fits[i].0, d) | (four_bits(fits[i].1, dmin) << 4));
        b.qs = [[0; 32]; 2];
        for (e, &v) in xb.iter().enumerate() {
            let s = b.scales[e / 16];
            let (dl, ml) = (d * f32::from(s & 0xF), dmin * f32::from(s >> 4));
            let q = if dl > 0.0 {
                ((v + ml) / dl).round().clamp(0.0, 3.0) as u8
            } else {
                0
            };
            let (c, l) = (e / 32, e % 32);
            b.qs[c / 4][l] |= q << (2 * (c % 4));
        }
        b.d = f32_to_f16(d);
        b.dmin = f32_to_f16(dmin);
    }
}

/// Scalar reference dot. Per super-block, two exact integers (`Σ sc·Σq·a` and `Σ m·Σa`)
/// combined in f32 as `d·d_a·sumi - dmin·d_a·summ`, as for Q4_K.
pub(crate) fn dot_scalar(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        let (sumi, summ) = block_sums(wb, ab);
        acc += f16_to_f32(wb.d) * ab.d * sumi as f32 - f16_to_f32(wb.dmin) * ab.d * summ as f32;
    }
    acc
}

/// One super-block's exact integers: `Σ sc·Σ q·a` and the minimum term `Σ m·Σ a`.
fn block_sums(wb: &BlockQ2K, ab: &BlockQ8K) -> (i32, i32) {
    let mut sumi = 0i32;
    for (i, &s) in wb.scales.iter().enumerate() {
        let sub: i32 = (16 * i..16 * i + 16).map(|e| code(wb, e) * ab.q(e)).sum();
        sumi += i32::from(s & 0xF) * sub;
    }
    (sumi, min_term(wb, ab))
}

/// Scalar reference in the order of ggml's tiled K-quant matmul: [`super::tiled_step`] per
/// super-block, with the minimum term.
pub(crate) fn dot_tiled_scalar(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
    w.iter().zip(a).fold(0.0, |acc, (wb, ab)| {
        let (s1, s2) = block_sums(wb, ab);
        let min = Some((f16_to_f32(wb.dmin), s2));
        super::tiled_step(acc, f16_to_f32(wb.d), s1, min, ab.d)
    })
}

/// [`dot_tiled_scalar`] for several tokens.
pub(crate) fn dot_tiled_multi_scalar(w: &[BlockQ2K], a: &[BlockQ8K], out: &mut [f32]) {
    super::each_token(dot_tiled_scalar, w, a, out);
}

/// Scalar reference for several tokens: one [`dot_scalar`] per token.
pub(crate) fn dot_multi_scalar(w: &[BlockQ2K], a: &[BlockQ8K], out: &mut [f32]) {
    super::each_token(dot_scalar, w, a, out);
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{BlockQ2K, BlockQ8K};
    use crate::formats::tiled_step;
    use crate::x86::{f16_to_f32, hsum2_epi32, hsum_ps, load_i8x32, load_u8x32, mul_sum_u8_i8};

    /// One row against `out.len()` tokens, one [`dot`] each.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot_multi(w: &[BlockQ2K], a: &[BlockQ8K], out: &mut [f32]) {
        crate::formats::each_token(|w, a| dot(w, a), w, a, out)
    }

    // One row against `out.len()` tokens in the tiled matmul's order, one
    // [`super::dot_tiled_scalar`] each: each super-block unpacked once for all the tokens, then
    // per token the same exact integers, so the same bits.
    crate::x86::tiled_flavours! {
        fn dot_tiled_multi(w: &[BlockQ2K], a: &[BlockQ8K], out: &mut [f32]) {
            let n = w.len();
            out.fill(0.0);
            for (b, wb) in w.iter().enumerate() {
                let (d, dmin) = (f16_to_f32(wb.d), f16_to_f32(wb.dmin));
                let q = [load_u8x32(&wb.qs[0]), load_u8x32(&wb.qs[1])];
                let mut codes = [_mm256_setzero_si256(); 8];
                let mut scales = [_mm256_setzero_si256(); 8];
                for c in 0..8 {
                    codes[c] = chunk_codes(q, c);
                    // The chunk's first 16 elements (low 128 bits) are sub-block 2c, the rest 2c + 1.
                    let s = |i: usize| _mm_set1_epi16(i16::from(wb.scales[i] & 0xF));
                    scales[c] = _mm256_set_m128i(s(2 * c + 1), s(2 * c));
                }
                let mins = block_mins(wb);
                for (t, o) in out.iter_mut().enumerate() {
                    let ab = &a[t * n + b];
                    let s1 = scaled_code_sums(&codes, &scales, &ab.qs);
                    let (s1, s2) = hsum2_epi32(s1, _mm256_madd_epi16(mins, bsums(ab)));
                    *o = tiled_step(*o, d, s1, Some((dmin, s2)), ab.d);
                }
            }
        }
    }

    /// The sixteen minimums as i16.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn block_mins(wb: &BlockQ2K) -> __m256i {
        // SAFETY: `scales` is 16 readable bytes, the width of the load.
        let s = unsafe { _mm_loadu_si128(wb.scales.as_ptr().cast()) };
        _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(s), _mm_set1_epi8(0xF)))
    }

    /// The sixteen activation sums.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn bsums(ab: &BlockQ8K) -> __m256i {
        // SAFETY: `bsums` is 16 i16, 32 readable bytes, the width of the load.
        unsafe { _mm256_loadu_si256(ab.bsums.as_ptr().cast()) }
    }

    /// The 32 codes (0..3) of 32-element chunk `c`, from the block's two `qs` rows, loaded.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn chunk_codes(q: [__m256i; 2], c: usize) -> __m256i {
        let shifted = match c % 4 {
            0 => q[c / 4],
            1 => _mm256_srli_epi16::<2>(q[c / 4]),
            2 => _mm256_srli_epi16::<4>(q[c / 4]),
            _ => _mm256_srli_epi16::<6>(q[c / 4]),
        };
        _mm256_and_si256(shifted, _mm256_set1_epi8(3))
    }

    /// AVX2 dot in ggml's order for `vec_dot_q2_K_q8_K`: one 8-lane FMA accumulator takes,
    /// per super-block, first the minimum term (lane k: minimums 2k, 2k+1 times their
    /// activation sums) and then the scaled code products (exact integers in 8 lanes); the
    /// lanes are added at the end. On x86 a row's result equals llama.cpp's bit for bit.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for (wb, ab) in w.iter().zip(a) {
            crate::x86::prefetch_ahead_by::<{ crate::x86::K_QUANT_PREFETCH_BYTES }, _>(wb);
            let dw = f16_to_f32(wb.d);
            let dmin = f16_to_f32(wb.dmin);
            let prod = _mm256_madd_epi16(block_mins(wb), bsums(ab));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(-ab.d * dmin), _mm256_cvtepi32_ps(prod), acc);
            let q = [load_u8x32(&wb.qs[0]), load_u8x32(&wb.qs[1])];
            let mut sumi = _mm256_setzero_si256();
            for c in 0..8 {
                let p = mul_sum_u8_i8(chunk_codes(q, c), load_i8x32(&ab.qs[c]));
                let (s0, s1) = (
                    i32::from(wb.scales[2 * c] & 0xF),
                    i32::from(wb.scales[2 * c + 1] & 0xF),
                );
                let scales = _mm256_setr_epi32(s0, s0, s0, s0, s1, s1, s1, s1);
                sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(p, scales));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(ab.d * dw), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_ps(acc)
    }
}

/// Decode on 512-bit registers, as Q3_K's (`q3_k::avx512vnni`): chunks c and c + 4 side by
/// side against [`crate::formats::q8_k::avx512`]'s activation pairs, the scales applied with
/// `vpdpwssd`; the halves folded give the AVX2 dot's eight lanes, then its very float steps
/// (the minimum term first): a row equals [`avx2::dot`] bit for bit.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512vnni {
    use std::arch::x86_64::*;

    use super::avx2::{block_mins, bsums};
    use super::{BlockQ2K, BlockQ8K};
    use crate::formats::q3_k::avx512vnni::scale_lanes;
    use crate::formats::q8_k::avx512::{prepared_rows, ChunkPairs};
    use crate::x86::{f16_to_f32, hsum_ps};

    /// Many rows against one token (decode), one whole row after another.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn dot_rows(w: &[BlockQ2K], a: &[BlockQ8K], out: &mut [f32]) {
        // Rows too long for the prepared activations take the AVX2 dot: the same bits.
        let prepared = |w: &[_], a: &[BlockQ8K], p: &[ChunkPairs]| dot(w, a, p);
        prepared_rows(w, a, out, prepared, |w, a| super::avx2::dot(w, a));
    }

    /// One row against one token's prepared activations.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    fn dot(w: &[BlockQ2K], a: &[BlockQ8K], p: &[ChunkPairs]) -> f32 {
        let three = _mm512_set1_epi8(3);
        let mut acc = _mm256_setzero_ps();
        for ((wb, ab), pb) in w.iter().zip(a).zip(p) {
            crate::x86::prefetch_ahead_by::<{ crate::x86::K_QUANT_PREFETCH_BYTES }, _>(wb);
            let (dw, dmin) = (f16_to_f32(wb.d), f16_to_f32(wb.dmin));
            let prod = _mm256_madd_epi16(block_mins(wb), bsums(ab));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(-ab.d * dmin), _mm256_cvtepi32_ps(prod), acc);
            // SAFETY: `qs` and `scales` are 64 and 16 readable bytes, the widths of the loads.
            let (planes, sc) = unsafe {
                (
                    _mm512_loadu_si512(wb.qs.as_ptr().cast()),
                    _mm_loadu_si128(wb.scales.as_ptr().cast()),
                )
            };
            // The scales (low nibbles) as i32 lanes, high 16 bits zero, for `vpdpwssd`.
            let sc = _mm512_cvtepu8_epi32(_mm_and_si128(sc, _mm_set1_epi8(0x0F)));
            let mut sum = _mm512_setzero_si512();
            for c in 0..4 {
                let shifted = match c {
                    0 => planes,
                    1 => _mm512_srli_epi16::<2>(planes),
                    2 => _mm512_srli_epi16::<4>(planes),
                    _ => _mm512_srli_epi16::<6>(planes),
                };
                let codes = _mm512_and_si512(shifted, three);
                // SAFETY: `pairs[c]` is 64 readable bytes, aligned by `ChunkPairs`.
                let x = unsafe { _mm512_load_si512(pb.pairs[c].as_ptr().cast()) };
                // Four products of codes in 0..3: within ±1,524, an i16.
                let prod = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, x);
                sum = _mm512_dpwssd_epi32(sum, prod, scale_lanes(sc, c as i32));
            }
            let lanes = _mm256_add_epi32(
                _mm512_castsi512_si256(sum),
                _mm512_extracti64x4_epi64::<1>(sum),
            );
            acc = _mm256_fmadd_ps(_mm256_set1_ps(ab.d * dw), _mm256_cvtepi32_ps(lanes), acc);
        }
        hsum_ps(acc)
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon {
    /// The NEON kernels, written once for both flavours of the exact integer dot:
    /// `widen` (baseline NEON) and `sdot` (the dotprod extension).
    macro_rules! kernels {
        ($features:literal, $flavour:ident) => {
            use std::arch::aarch64::*;

            use crate::block::f16_to_f32;
            use crate::formats::q2_k::{min_term, BlockQ2K, BlockQ8K};
            use crate::neon::$flavour::sum_i8x16;
            use crate::neon::{load_i8x32, load_u8x32};

            /// One row against `out.len()` tokens, one exact [`dot`] each.
            #[allow(unused_unsafe)]
            #[target_feature(enable = $features)]
            pub(crate) fn dot_multi(w: &[BlockQ2K], a: &[BlockQ8K], out: &mut [f32]) {
                // SAFETY: this function runs only where its target features are enabled, and
                // they are `dot`'s (a closure does not inherit them, hence the block; the
                // baseline flavour's call needs none).
                crate::formats::each_token(|w, a| unsafe { dot(w, a) }, w, a, out)
            }

            /// NEON twin of the scalar `dot_scalar`, bit-identical to it.
            #[target_feature(enable = $features)]
            pub(crate) fn dot(w: &[BlockQ2K], a: &[BlockQ8K]) -> f32 {
                let three = vdupq_n_u8(3);
                let mut acc = 0.0f32;
                for (wb, ab) in w.iter().zip(a) {
                    let q = [load_u8x32(&wb.qs[0]), load_u8x32(&wb.qs[1])];
                    let mut sumi = 0i32;
                    for c in 0..8 {
                        let shift = vdupq_n_s8(-2 * (c % 4) as i8);
                        let code = |q: uint8x16_t| {
                            vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q, shift), three))
                        };
                        let y = load_i8x32(&ab.qs[c]);
                        let qc = q[c / 4];
                        sumi += i32::from(wb.scales[2 * c] & 0xF) * sum_i8x16(code(qc.0), y.0);
                        sumi += i32::from(wb.scales[2 * c + 1] & 0xF) * sum_i8x16(code(qc.1), y.1);
                    }
                    let summ = min_term(wb, ab);
                    acc += f16_to_f32(wb.d) * ab.d * sumi as f32
                        - f16_to_f32(wb.dmin) * ab.d * summ as f32;
                }
                acc
            }
        };
    }

    kernels!("neon", widen);

    /// The same kernels on SDOT (ARMv8.2 dotprod): the same exact integers, so the same bits.
    pub(crate) mod dotprod {
        kernels!("neon,dotprod", sdot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    fn zeroed(n: usize) -> Vec<BlockQ2K> {
        vec![
            BlockQ2K {
                scales: [0; 16],
                qs: [[0; 32]; 2],
                d: [0; 2],
                dmin: [0; 2]
            };
            n
        ]
    }

    #[test]
    fn dequantize_matches_the_layout() {
        // Scale 1, minimum 0 everywhere but sub-block 11 (scale 3, minimum 2); code of
        // element e = (e * 3 + e / 32) % 4.
        let want = |e: usize| ((e * 3 + e / 32) % 4) as u8;
        let mut b = zeroed(1)[0];
        b.d = f32_to_f16(0.5);
        b.dmin = f32_to_f16(0.25);
        b.scales = [1; 16];
        b.scales[11] = 3 | (2 << 4);
        for e in 0..256 {
            let (c, l) = (e / 32, e % 32);
            b.qs[c / 4][l] |= want(e) << (2 * (c % 4));
        }
        let mut out = [0.0f32; 256];
        dequantize(&[b], &mut out);
        for (e, &y) in out.iter().enumerate() {
            let q = f32::from(want(e));
            let expect = if e / 16 == 11 { 1.5 * q - 0.5 } else { 0.5 * q };
            assert_eq!(y, expect, "element {e}");
        }
    }

    #[test]
    fn round_trip_rms_error_budget() {
        // Budget: RMS error under 40% of the data's RMS on Gaussian-like weights (4 levels
        // per 16 elements from a plain min/max fit; this seed measures about 33%).
        let mut r = rng(111);
        let x = random_f32(&mut r, 256 * 32, 1.0);
        let mut q = zeroed(32);
        quantize(&x, &mut q);
        let mut y = vec![0.0; x.len()];
        dequantize(&q, &mut y);
        let rel = rms_diff(&x, &y) / rms(&x);
        assert!(rel < 0.4, "relative rms error {rel}");
    }

    #[test]
    fn dot_within_activation_quantization_budget() {
        check_dot_budget_k(
            112,
            |x, n| {
                let mut q = zeroed(n);
                quantize(x, &mut q);
                q
            },
            dequantize,
            dot_scalar,
        );
    }

    /// Fully random bytes: every scale, minimum and code the format can express.
    fn random_blocks(r: &mut Rng, nb: usize) -> Vec<BlockQ2K> {
        (0..nb)
            .map(|_| BlockQ2K {
                scales: random_bytes(r),
                qs: std::array::from_fn(|_| random_bytes(r)),
                d: f32_to_f16(random_f32(r, 1, 0.01)[0]),
                dmin: f32_to_f16(random_f32(r, 1, 0.01)[0]),
            })
            .collect()
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_is_bit_identical_to_scalar() {
        let mut r = rng(114);
        for nb in [1, 2, 3, 7] {
            let (w, a) = (random_blocks(&mut r, nb), random_q8_k(&mut r, nb));
            // SAFETY: NEON is part of the aarch64 baseline.
            let simd = unsafe { neon::dot(&w, &a) };
            if crate::required::test_needs("dotprod") {
                // SAFETY: dotprod was just detected.
                let sdot = unsafe { neon::dotprod::dot(&w, &a) };
                assert_eq!(sdot.to_bits(), simd.to_bits(), "sdot against NEON");
            }
            assert_eq!(simd.to_bits(), dot_scalar(&w, &a).to_bits());
        }
    }

    /// The AVX2 dot adds in ggml's order, not the reference's: it equals a scalar model of
    /// that order bit for bit, and the reference within the reordering bound.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_matches_scalar() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let mut r = rng(113);
        for nb in [1, 2, 3, 6, 7] {
            let w = random_blocks(&mut r, nb);
            let a = random_q8_k(&mut r, nb);
            // Per super-block two steps into the same lanes: the minimum term (lane k:
            // minimums 2k and 2k+1 times their sums), then the scaled code products (lane k:
            // elements 4k..4k+4 of every 32-element chunk).
            let steps = || {
                w.iter().zip(&a).flat_map(|(wb, ab)| {
                    let mins: [i32; 8] = std::array::from_fn(|k| {
                        (2 * k..2 * k + 2)
                            .map(|i| i32::from(wb.scales[i] >> 4) * i32::from(ab.bsums[i]))
                            .sum()
                    });
                    let codes: [i32; 8] = std::array::from_fn(|k| {
                        (0..8)
                            .map(|c| {
                                let e0 = 32 * c + 4 * k;
                                let p: i32 = (e0..e0 + 4).map(|e| code(wb, e) * ab.q(e)).sum();
                                i32::from(wb.scales[e0 / 16] & 0xF) * p
                            })
                            .sum()
                    });
                    [
                        (-ab.d * f16_to_f32(wb.dmin), mins),
                        (ab.d * f16_to_f32(wb.d), codes),
                    ]
                })
            };
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            let simd = unsafe { avx2::dot(&w, &a) };
            assert_eq!(simd.to_bits(), avx2_lanes_order(steps()).to_bits(), "{nb}");
            assert_reordered_sum_close(simd, dot_scalar(&w, &a), lanes_terms(steps()), 2 * nb + 8);
        }
    }

    /// The 512-bit decode equals the AVX2 dot (llama.cpp's order) bit for bit on every row,
    /// with random and extreme blocks, and past the prepared path's length.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_rows_equal_the_avx2_dot() {
        check_rows_equal_the_avx2_dot(
            206,
            random_blocks,
            // Every code 3, every scale and minimum 15.
            |b| (b.qs, b.scales) = ([[0xFF; 32]; 2], [0xFF; 16]),
            avx512vnni::dot_rows,
            avx2::dot,
        );
    }

    /// The tiled matmul's order: [`check_tiled_order`] with random and extreme weights.
    #[test]
    fn tiled_order_avx2_equals_scalar_and_is_close_to_the_dot() {
        check_tiled_order(TiledOrder {
            seed: 115,
            random: random_blocks,
            // Every code 3, every scale and minimum 15: the largest integers the format makes.
            extreme: |b| (b.scales, b.qs) = ([0xFF; 16], [[0xFF; 32]; 2]),
            terms: |wb, ab| {
                let (s1, s2) = block_sums(wb, ab);
                let (d, dmin) = (f16_to_f32(wb.d), f16_to_f32(wb.dmin));
                (ab.d * d * s1 as f32).abs() + (ab.d * dmin * s2 as f32).abs()
            },
            steps: |nb| 2 * nb + 2,
            dot: dot_scalar,
            tiled: dot_tiled_multi_scalar,
            #[cfg(target_arch = "x86_64")]
            avx2: avx2::dot_tiled_multi,
            #[cfg(target_arch = "x86_64")]
            vnni: Some(avx2::dot_tiled_multi_vnni),
            #[cfg(target_arch = "x86_64")]
            lanes: Some(crate::formats::k_lanes::avx512vnni::dot_multi::<BlockQ2K>),
        });
    }
}
