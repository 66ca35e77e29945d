//! Q5_K weights: Q4_K's 256-element super-blocks (eight 32-element sub-blocks with 6-bit
//! scales and minimums under two f16 super-scales) with a fifth bit per code,
//! `x = d·sc·q - dmin·m` for q in 0..31. Dotted against Q8_K activations, whose per-16 sums
//! carry the minimum term.

use super::q4_k::{fit_sub_block, min_term, pack_scales, unpack_scales};
use super::q8_k::BlockQ8K;
use crate::block::{f16_to_f32, f32_to_f16, round_to_f16, ByteBlock};

/// ggml's `block_q5_K`. `qs[c]` holds the low four bits of elements `64c..64c+32` in its low
/// nibbles and of `64c+32..64c+64` in its high nibbles; bit `j` of `qh[l]` is the fifth bit of
/// element `32j + l`, so sub-block `j` (elements `32j..32j+32`) reads bit `j` of every `qh` byte.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockQ5K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    /// Eight 6-bit scales and eight 6-bit minimums, packed as Q4_K packs them.
    pub scales: [u8; 12],
    pub qh: [u8; 32],
    pub qs: [[u8; 32]; 4],
}
const _: () = assert!(size_of::<BlockQ5K>() == 176);
// SAFETY: repr(C), only u8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockQ5K {}

pub(crate) const QK: usize = 256;

// Only the AVX2 path widens both halves at once.
#[cfg(target_arch = "x86_64")]
impl BlockQ5K {
    /// `d` then `dmin`: the block's first four bytes, for widening both in one instruction.
    #[inline]
    pub(crate) fn d_dmin_bytes(&self) -> &[u8; 4] {
        const { assert!(std::mem::offset_of!(BlockQ5K, dmin) == 2) };
        // SAFETY: repr(C), alignment 1, `d` at offset 0 and `dmin` at offset 2 (asserted): the
        // first four bytes of the block are exactly `d` then `dmin`, borrowed for `self`'s life.
        unsafe { &*(self as *const Self).cast::<[u8; 4]>() }
    }
}

/// Code of element `e` (0..256), 0..31.
#[inline]
fn code(b: &BlockQ5K, e: usize) -> u8 {
    let byte = b.qs[e / 64][e % 32];
    let low = if e % 64 < 32 { byte & 0xF } else { byte >> 4 };
    low | (((b.qh[e % 32] >> (e / 32)) & 1) << 4)
}

/// `out.len() == 256 * blocks.len()`.
pub(crate) fn dequantize(blocks: &[BlockQ5K], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        QK * blocks.len(),
        "q5_k dequantize: length mismatch"
    );
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let (d, dmin) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
        let (sc, mn) = unpack_scales(&b.scales);
        for (e, y) in o.iter_mut().enumerate() {
            let j = e / 32;
            *y = d * f32::from(sc[j]) * f32::from(code(b, e)) - dmin * f32::from(mn[j]);
        }
    }
}

/// Reference quantizer, Q4_K's with 32 levels: per sub-block least-squares (scale, min), both
/// quantized to 6 bits against the super-block's largest, then codes chosen against the values
/// the dequantizer will actually compute.
pub(crate) fn quantize(x: &[f32], out: &mut [BlockQ5K]) {
    assert_eq!(x.len(), QK * out.len(), "q5_k quantize: length mismatch");
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let fits: Vec<(f32, f32)> = xb.chunks_exact(32).map(|s| fit_sub_block(s, 31)).collect();
        let max_s = fits.iter().fold(0.0f32, |a, f| a.max(f.0));
        let max_m = fits.iter().fold(0.0f32, |a, f| a.max(f.1));
        let d = round_to_f16(max_s / 63.0);
        let dmin = round_to_f16(max_m / 63.0);
        let six_bits = |v: f32, unit: f32| {
            if unit > 0.0 {
                (v / unit).round().clamp(0.0, 63.0) as u8
            } else {
                0
            }
        };
        let sc: [u8; 8] = std::array::from_fn(|j| six_bits(fits[j].0, d));
        let mn: [u8; 8] = std::array::from_fn(|j| six_bits(fits[j].1, dmin));
        let mut q = [0u8; QK];
        for (e, (&v, qe)) in xb.iter().zip(q.iter_mut()).enumerate() {
            let s = d * f32::from(sc[e / 32]);
            let m = dmin * f32::from(mn[e / 32]);
            *qe = if s > 0.0 {
                ((v + m) / s).round().clamp(0.0, 31.0) as u8
            } else {
                0
            };
        }
        b.qh = [0; 32];
        for c in 0..4 {
            for l in 0..32 {
                let (lo, hi) = (q[64 * c + l], q[64 * c + 32 + l]);
                b.qs[c][l] = (lo & 0xF) | ((hi & 0xF) << 4);
                b.qh[l] |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1));
            }
        }
        b.scales = pack_scales(&sc, &mn);
        b.d = f32_to_f16(d);
        b.dmin = f32_to_f16(dmin);
    }
}

/// Scalar reference dot. Per super-block, two exact integers (`Σ sc·Σq·a` and `Σ m·Σa`) are
/// combined in f32 as `d·d_a·sumi - dmin·d_a·summ`, as for Q4_K.
pub(crate) fn dot_scalar(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        let (sumi, summ) = block_sums(wb, ab);
        acc += f16_to_f32(wb.d) * ab.d * sumi as f32 - f16_to_f32(wb.dmin) * ab.d * summ as f32;
    }
    acc
}

/// One super-block's exact integers: `Σ sc·Σ q·a` and the minimum term `Σ m·Σ a`.
fn block_sums(wb: &BlockQ5K, ab: &BlockQ8K) -> (i32, i32) {
    let (sc, mn) = unpack_scales(&wb.scales);
    let mut sumi = 0i32;
    for (j, &s) in sc.iter().enumerate() {
        let sub: i32 = (32 * j..32 * j + 32)
            .map(|e| i32::from(code(wb, e)) * ab.q(e))
            .sum();
        sumi += i32::from(s) * sub;
    }
    (sumi, min_term(&mn, ab))
}

/// Scalar reference in the order of ggml's tiled K-quant matmul: [`super::tiled_step`] per
/// super-block, with the minimum term.
pub(crate) fn dot_tiled_scalar(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    w.iter().zip(a).fold(0.0, |acc, (wb, ab)| {
        let (s1, s2) = block_sums(wb, ab);
        let min = Some((f16_to_f32(wb.dmin), s2));
        super::tiled_step(acc, f16_to_f32(wb.d), s1, min, ab.d)
    })
}

/// [`dot_tiled_scalar`] for several tokens.
pub(crate) fn dot_tiled_multi_scalar(w: &[BlockQ5K], a: &[BlockQ8K], out: &mut [f32]) {
    super::each_token(dot_tiled_scalar, w, a, out);
}

/// Scalar reference for several tokens: one [`dot_scalar`] per token.
pub(crate) fn dot_multi_scalar(w: &[BlockQ5K], a: &[BlockQ8K], out: &mut [f32]) {
    super::each_token(dot_scalar, w, a, out);
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{min_term, unpack_scales, BlockQ5K, BlockQ8K};
    use crate::formats::tiled_step;
    use crate::x86::{f16x2_to_f32, hsum2_epi32, hsum_ps, load_i8x32, load_u8x32};

    /// One row against `out.len()` tokens, one [`dot`] each.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot_multi(w: &[BlockQ5K], a: &[BlockQ8K], out: &mut [f32]) {
        crate::formats::each_token(|w, a| dot(w, a), w, a, out)
    }

    // One row against `out.len()` tokens in the tiled matmul's order, one
    // [`super::dot_tiled_scalar`] each: each super-block unpacked once for all the tokens, then
    // per token the same exact integers, so the same bits.
    crate::x86::tiled_flavours! {
        fn dot_tiled_multi(w: &[BlockQ5K], a: &[BlockQ8K], out: &mut [f32]) {
            let n = w.len();
            out.fill(0.0);
            for (b, wb) in w.iter().enumerate() {
                let (d, dmin) = f16x2_to_f32(wb.d_dmin_bytes());
                let (sc, mn) = unpack_scales(&wb.scales);
                let qh = load_u8x32(&wb.qh);
                let mut codes = [_mm256_setzero_si256(); 8];
                let mut scales = [_mm256_setzero_si256(); 8];
                for c in 0..4 {
                    (codes[2 * c], codes[2 * c + 1]) = code_pair(wb, qh, c);
                }
                for (s, &v) in scales.iter_mut().zip(&sc) {
                    *s = _mm256_set1_epi16(i16::from(v));
                }
                // Minimum j against the activation sums 2j and 2j + 1.
                let m: [i16; 16] = std::array::from_fn(|i| i16::from(mn[i / 2]));
                // SAFETY: `m` is 16 i16, 32 readable bytes, the width of the load.
                let mins = unsafe { _mm256_loadu_si256(m.as_ptr().cast()) };
                for (t, o) in out.iter_mut().enumerate() {
                    let ab = &a[t * n + b];
                    let s1 = scaled_code_sums(&codes, &scales, &ab.qs);
                    // SAFETY: `bsums` is 16 i16, 32 readable bytes, the width of the load.
                    let bs = unsafe { _mm256_loadu_si256(ab.bsums.as_ptr().cast()) };
                    let (s1, s2) = hsum2_epi32(s1, _mm256_madd_epi16(bs, mins));
                    *o = tiled_step(*o, d, s1, Some((dmin, s2)), ab.d);
                }
            }
        }
    }

    /// Sub-blocks `2c` and `2c + 1` as 32 codes (0..31) each: the low and the high nibbles of
    /// `qs[c]`, each with its fifth bit from `qh` (the block's `qh`, loaded).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn code_pair(wb: &BlockQ5K, qh: __m256i, c: usize) -> (__m256i, __m256i) {
        let low4 = _mm256_set1_epi8(0x0F);
        let fifth = _mm256_set1_epi8(0x10);
        // Sub-block j's fifth bits: bit j of every qh byte, as 0x10 or 0.
        let high = |j: usize| {
            let bit = _mm256_set1_epi8((1u8 << j) as i8);
            let set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
            _mm256_and_si256(set, fifth)
        };
        let q = load_u8x32(&wb.qs[c]);
        let lo = _mm256_or_si256(_mm256_and_si256(q, low4), high(2 * c));
        let hi = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(q), low4),
            high(2 * c + 1),
        );
        (lo, hi)
    }

    /// AVX2 dot in ggml's order for `vec_dot_q5_K_q8_K`: per super-block the scaled code
    /// products as exact integers in 8 lanes, fused-multiply-added into one 8-lane accumulator;
    /// the minimum term as one exact integer, scaled and fused-multiply-added into a scalar sum;
    /// the two added at the end. On x86 a row's result equals llama.cpp's bit for bit.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let mut summs = 0.0f32;
        for (wb, ab) in w.iter().zip(a) {
            // Read in the GGUF layout straight from memory in decode: ask for it ahead, as the
            // other K-quant dots do.
            crate::x86::prefetch_ahead_by::<{ crate::x86::K_QUANT_PREFETCH_BYTES }, _>(wb);
            let (d, dmin) = f16x2_to_f32(wb.d_dmin_bytes());
            let (sc, mn) = unpack_scales(&wb.scales);
            // Fused, as GCC (llama.cpp's usual compiler) contracts ggml's `summs += dmin * sum`.
            summs = (-ab.d * dmin).mul_add(min_term(&mn, ab) as f32, summs);
            let qh = load_u8x32(&wb.qh);
            let mut sumi = _mm256_setzero_si256();
            for c in 0..4 {
                let (lo, hi) = code_pair(wb, qh, c);
                // Codes <= 31 and activations >= -127: i16 pair sums stay far from saturation,
                // and the second madd applies the sub-block's 6-bit scale while widening.
                let p_lo = _mm256_maddubs_epi16(lo, load_i8x32(&ab.qs[2 * c]));
                let p_hi = _mm256_maddubs_epi16(hi, load_i8x32(&ab.qs[2 * c + 1]));
                let p_lo = _mm256_madd_epi16(p_lo, _mm256_set1_epi16(i16::from(sc[2 * c])));
                let p_hi = _mm256_madd_epi16(p_hi, _mm256_set1_epi16(i16::from(sc[2 * c + 1])));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p_lo, p_hi));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(ab.d * d), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_ps(acc) + summs
    }
}

/// Decode on AVX-512: each sub-block's fifth bits become a byte mask (`vptestmb`) merged with
/// one masked add, and each pair sum is scaled and added by `vpdpwssd`. The same exact integers
/// in the same FMA chain, so the same bits as [`avx2::dot`].
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512vnni {
    use std::arch::x86_64::*;

    use super::{min_term, unpack_scales, BlockQ5K, BlockQ8K};
    use crate::x86::{f16x2_to_f32, hsum_ps, load_i8x32, load_u8x32};

    /// One row against `out.len()` tokens, one [`dot`] each.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn dot_multi(w: &[BlockQ5K], a: &[BlockQ8K], out: &mut [f32]) {
        crate::formats::each_token(|w, a| dot(w, a), w, a, out)
    }

    /// [`super::avx2::dot`] on VNNI.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn dot(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
        let low4 = _mm256_set1_epi8(0x0F);
        let fifth = _mm256_set1_epi8(0x10);
        let mut acc = _mm256_setzero_ps();
        let mut summs = 0.0f32;
        for (wb, ab) in w.iter().zip(a) {
            crate::x86::prefetch_ahead_by::<{ crate::x86::K_QUANT_PREFETCH_BYTES }, _>(wb);
            let (d, dmin) = f16x2_to_f32(wb.d_dmin_bytes());
            let (sc, mn) = unpack_scales(&wb.scales);
            summs = (-ab.d * dmin).mul_add(min_term(&mn, ab) as f32, summs);
            let qh = load_u8x32(&wb.qh);
            // Sub-block j's codes: `nibbles` plus 0x10 where bit j of the qh byte is set.
            let merge = |nibbles: __m256i, j: usize| {
                let set = _mm256_test_epi8_mask(qh, _mm256_set1_epi8((1u8 << j) as i8));
                _mm256_mask_add_epi8(nibbles, set, nibbles, fifth)
            };
            let mut sumi = _mm256_setzero_si256();
            for c in 0..4 {
                let q = load_u8x32(&wb.qs[c]);
                let lo = merge(_mm256_and_si256(q, low4), 2 * c);
                let hi = merge(_mm256_and_si256(_mm256_srli_epi16::<4>(q), low4), 2 * c + 1);
                let p_lo = _mm256_maddubs_epi16(lo, load_i8x32(&ab.qs[2 * c]));
                let p_hi = _mm256_maddubs_epi16(hi, load_i8x32(&ab.qs[2 * c + 1]));
                sumi = _mm256_dpwssd_epi32(sumi, p_lo, _mm256_set1_epi16(i16::from(sc[2 * c])));
                let s_hi = _mm256_set1_epi16(i16::from(sc[2 * c + 1]));
                sumi = _mm256_dpwssd_epi32(sumi, p_hi, s_hi);
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(ab.d * d), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_ps(acc) + summs
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
            use crate::formats::q5_k::{min_term, unpack_scales, BlockQ5K, BlockQ8K};
            use crate::neon::$flavour::sum_i8x32;
            use crate::neon::{load_i8x32, load_u8x32};

            /// One row against `out.len()` tokens, one exact [`dot`] each.
            #[allow(unused_unsafe)]
            #[target_feature(enable = $features)]
            pub(crate) fn dot_multi(w: &[BlockQ5K], a: &[BlockQ8K], out: &mut [f32]) {
                // SAFETY: this function runs only where its target features are enabled, and
                // they are `dot`'s (a closure does not inherit them, hence the block; the
                // baseline flavour's call needs none).
                crate::formats::each_token(|w, a| unsafe { dot(w, a) }, w, a, out)
            }

            /// NEON twin of the scalar `dot_scalar`, bit-identical to it.
            #[target_feature(enable = $features)]
            pub(crate) fn dot(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
                let low4 = vdupq_n_u8(0x0F);
                let fifth = vdupq_n_u8(0x10);
                let mut acc = 0.0f32;
                for (wb, ab) in w.iter().zip(a) {
                    let (sc, mn) = unpack_scales(&wb.scales);
                    let qh = load_u8x32(&wb.qh);
                    // Sub-block j's fifth bits: bit j of every qh byte, as 0x10 or 0.
                    let high = |j: usize| {
                        let bit = vdupq_n_u8(1 << j);
                        (
                            vandq_u8(vtstq_u8(qh.0, bit), fifth),
                            vandq_u8(vtstq_u8(qh.1, bit), fifth),
                        )
                    };
                    let mut sumi = 0i32;
                    for c in 0..4 {
                        let q = load_u8x32(&wb.qs[c]);
                        let (h_lo, h_hi) = (high(2 * c), high(2 * c + 1));
                        let lo = (
                            vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q.0, low4), h_lo.0)),
                            vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q.1, low4), h_lo.1)),
                        );
                        let hi = (
                            vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8::<4>(q.0), h_hi.0)),
                            vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8::<4>(q.1), h_hi.1)),
                        );
                        sumi += i32::from(sc[2 * c]) * sum_i8x32(lo, load_i8x32(&ab.qs[2 * c]));
                        sumi +=
                            i32::from(sc[2 * c + 1]) * sum_i8x32(hi, load_i8x32(&ab.qs[2 * c + 1]));
                    }
                    let summ = min_term(&mn, ab);
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

    fn zeroed(n: usize) -> Vec<BlockQ5K> {
        vec![
            BlockQ5K {
                d: [0; 2],
                dmin: [0; 2],
                scales: [0; 12],
                qh: [0; 32],
                qs: [[0; 32]; 4]
            };
            n
        ]
    }

    #[test]
    fn dequantize_matches_the_layout() {
        // Scale 1 and min 0 everywhere except sub-block 5 (scale 2, min 3); the codes run
        // through all 32 values, so every sub-block has fifth bits both set and clear.
        let mut sc = [1u8; 8];
        let mut mn = [0u8; 8];
        sc[5] = 2;
        mn[5] = 3;
        let mut b = zeroed(1)[0];
        b.d = f32_to_f16(1.0);
        b.dmin = f32_to_f16(0.5);
        b.scales = pack_scales(&sc, &mn);
        let want_code = |e: usize| ((e * 7 + e / 32) % 32) as u8;
        for c in 0..4 {
            for l in 0..32 {
                let (lo, hi) = (want_code(64 * c + l), want_code(64 * c + 32 + l));
                b.qs[c][l] = (lo & 0xF) | ((hi & 0xF) << 4);
                b.qh[l] |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1));
            }
        }
        let mut out = [0.0f32; 256];
        dequantize(&[b], &mut out);
        for (e, &y) in out.iter().enumerate() {
            let q = f32::from(want_code(e));
            let want = if e / 32 == 5 { 2.0 * q - 1.5 } else { q };
            assert_eq!(y, want, "element {e}");
        }
    }

    #[test]
    fn round_trip_rms_error_budget() {
        // Budget: RMS error under 5% of the data's RMS on Gaussian-like weights: uniform
        // rounding over a 32-value block's range of about ±2.4σ in 31 steps alone costs
        // 0.155σ/√12 ≈ 4.5%; the least-squares fit recovers a bit.
        let mut r = rng(51);
        let x = random_f32(&mut r, 256 * 32, 1.0);
        let mut q = zeroed(32);
        quantize(&x, &mut q);
        let mut y = vec![0.0; x.len()];
        dequantize(&q, &mut y);
        let rel = rms_diff(&x, &y) / rms(&x);
        assert!(rel < 0.05, "relative rms error {rel}");
        // And no single element is off by more than a full step of its super-block's range.
        for (xb, yb) in x.chunks_exact(256).zip(y.chunks_exact(256)) {
            let lo = xb.iter().copied().fold(0.0f32, f32::min);
            let hi = xb.iter().copied().fold(0.0f32, f32::max);
            for (a, b) in xb.iter().zip(yb) {
                assert!((a - b).abs() <= (hi - lo) / 31.0, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn dot_within_activation_quantization_budget() {
        check_dot_budget_k(
            52,
            |x, n| {
                let mut q = zeroed(n);
                quantize(x, &mut q);
                q
            },
            dequantize,
            dot_scalar,
        );
    }

    /// Fully random bytes: every scale/min/code combination the format can express.
    fn random_blocks(r: &mut Rng, nb: usize) -> Vec<BlockQ5K> {
        (0..nb)
            .map(|_| BlockQ5K {
                d: f32_to_f16(random_f32(r, 1, 0.01)[0]),
                dmin: f32_to_f16(random_f32(r, 1, 0.01)[0]),
                scales: random_bytes(r),
                qh: random_bytes(r),
                qs: std::array::from_fn(|_| random_bytes(r)),
            })
            .collect()
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_is_bit_identical_to_scalar() {
        let mut r = rng(54);
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
        let mut r = rng(53);
        for nb in [1, 2, 3, 6, 7] {
            let w = random_blocks(&mut r, nb);
            let a = random_q8_k(&mut r, nb);
            // Lane k of a super-block: Σ over sub-blocks of scale × products 4k..4k+4 of the
            // sub-block's 32 elements.
            let blocks = || {
                w.iter().zip(&a).map(|(wb, ab)| {
                    let (sc, _) = unpack_scales(&wb.scales);
                    let lanes: [i32; 8] = std::array::from_fn(|k| {
                        (0..8)
                            .map(|j| {
                                let p: i32 = (32 * j + 4 * k..32 * j + 4 * k + 4)
                                    .map(|e| i32::from(code(wb, e)) * ab.q(e))
                                    .sum();
                                i32::from(sc[j]) * p
                            })
                            .sum()
                    });
                    (ab.d * f16_to_f32(wb.d), lanes)
                })
            };
            let mins = || {
                w.iter().zip(&a).map(|(wb, ab)| {
                    let (_, mn) = unpack_scales(&wb.scales);
                    (-ab.d * f16_to_f32(wb.dmin), min_term(&mn, ab) as f32)
                })
            };
            let summs = mins().fold(0.0f32, |s, (d, m)| d.mul_add(m, s));
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            let simd = unsafe { avx2::dot(&w, &a) };
            let model = avx2_lanes_order(blocks()) + summs;
            assert_eq!(simd.to_bits(), model.to_bits(), "{nb}");
            let terms = lanes_terms(blocks()) + mins().map(|(d, m)| (d * m).abs()).sum::<f32>();
            assert_reordered_sum_close(simd, dot_scalar(&w, &a), terms, 2 * nb + 8);
        }
    }

    /// The AVX-512 decode kernel equals the AVX2 one bit for bit, every fifth bit set
    /// included.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vnni_dot_equals_avx2() {
        if !crate::required::test_needs("avx2") || !crate::required::test_needs("avx512vnni") {
            return;
        }
        let mut r = rng(54);
        for nb in [1, 2, 7] {
            let mut w = random_blocks(&mut r, nb);
            w[0].qh = [0xFF; 32];
            let a = random_q8_k(&mut r, 2 * nb);
            let (mut want, mut got) = (vec![0.0f32; 2], vec![0.0f32; 2]);
            // SAFETY: AVX2 and AVX-512 VNNI (with F, VL and BW) were detected above.
            unsafe {
                avx2::dot_multi(&w, &a, &mut want);
                avx512vnni::dot_multi(&w, &a, &mut got);
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{nb} blocks");
        }
    }

    /// The tiled matmul's order: [`check_tiled_order`] with random and extreme weights.
    #[test]
    fn tiled_order_avx2_equals_scalar_and_is_close_to_the_dot() {
        check_tiled_order(TiledOrder {
            seed: 55,
            random: random_blocks,
            // Every code 31, every scale and minimum 63: the largest integers the format makes.
            extreme: |b| (b.scales, b.qh, b.qs) = ([0xFF; 12], [0xFF; 32], [[0xFF; 32]; 4]),
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
            lanes: Some(crate::formats::k_lanes::avx512vnni::dot_multi::<BlockQ5K>),
        });
    }
}
