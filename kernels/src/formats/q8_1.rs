//! Q8_1-style activation blocks: the partner format that activations are quantized to, once per
//! matmul, before integer dots against Q4_0, Q4_1 and Q8_0 weights.
//!
//! `s = d * sum(qs)` lets a weight format with an offset (Q4_1's `m`) fold the offset in with
//! one multiply per block.
//!
//! `d` and `s` are held as f32 (no conversion in the dots) but rounded through f16, as ggml
//! stores them. With the same scale rule (`127 / amax`, ties-to-even rounding) this makes our
//! activation blocks identical to ggml's, and so, with ggml's accumulation order in the AVX2
//! dots, a Q4_0/Q4_1/Q8_0 matmul row equals llama.cpp's bit for bit on x86; that keeps greedy
//! decoding on the reference's path. The cost, a relative 2^-11 on each scale, is small next
//! to the quantization step of 1/127.

/// 32 activations as `x ≈ d * q`, with `s = d * Σq` precomputed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BlockQ8_1 {
    pub d: f32,
    pub s: f32,
    pub qs: [i8; 32],
}
const _: () = assert!(size_of::<BlockQ8_1>() == 40);

pub(crate) const QK: usize = 32;

/// What ggml reads back after storing `x` as f16.
#[inline]
pub(crate) fn f16_round(x: f32) -> f32 {
    crate::block::round_to_f16(x)
}

/// Blocks whose largest magnitude is below this (or NaN) quantize to zero: `127 / amax` would
/// overflow to infinity for subnormal maxima.
const MIN_AMAX: f32 = 1e-30;

/// (d, 1/d) for a block whose largest magnitude is `amax`, mapping `amax` to 127. `1/d` is
/// computed as `127 / amax` in every path so the scalar and SIMD quantizers agree bit for bit.
#[inline]
pub(crate) fn act_scale(amax: f32) -> (f32, f32) {
    if amax >= MIN_AMAX && amax.is_finite() {
        (amax / 127.0, 127.0 / amax)
    } else {
        (0.0, 0.0)
    }
}

/// Scalar reference: `x.len() == 32 * out.len()`.
///
/// Rounds half to even, like `_mm256_round_ps` in the AVX2 path, so both give identical blocks.
pub(crate) fn quantize_scalar(x: &[f32], out: &mut [BlockQ8_1]) {
    assert_eq!(x.len(), QK * out.len(), "q8_1 quantize: length mismatch");
    for (xb, ob) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let (d, id) = act_scale(amax);
        let mut sum = 0i32;
        for (q, &v) in ob.qs.iter_mut().zip(xb) {
            // |v * id| <= 127 (plus rounding), so the cast never saturates.
            let r = (v * id).round_ties_even() as i32;
            *q = r as i8;
            sum += r;
        }
        ob.d = f16_round(d);
        ob.s = f16_round(d * sum as f32);
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{act_scale, BlockQ8_1, QK};
    use crate::x86::{hmax_ps, hsum_epi32};

    /// Largest |x| of 32 floats.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn amax_32(x: &[f32; 32]) -> f32 {
        let sign = _mm256_set1_ps(-0.0);
        let mut m = _mm256_setzero_ps();
        for i in 0..4 {
            // SAFETY: 8 floats starting at 8*i lie inside the 32-float array.
            let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) };
            // maxps returns its second operand when either is NaN: with `m` second, NaN
            // activations are skipped, as `f32::max` skips them in the scalar path.
            m = _mm256_max_ps(_mm256_andnot_ps(sign, v), m);
        }
        hmax_ps(m)
    }

    /// Rounds `x * id` half-to-even into 32 i8 (in order) and returns them with the sums of the
    /// first and second 16 codes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn quantize_32(x: &[f32; 32], id: f32) -> (__m256i, i32, i32) {
        let idv = _mm256_set1_ps(id);
        let mut q = [_mm256_setzero_si256(); 4];
        for (i, qi) in q.iter_mut().enumerate() {
            // SAFETY: 8 floats starting at 8*i lie inside the 32-float array.
            let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) };
            let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm256_mul_ps(v, idv),
            );
            // NaN lanes (a NaN activation, or infinity times a zero scale) become 0, as the
            // scalar path's saturating cast makes them; cvtps would give i32::MIN.
            let r = _mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(r, r));
            *qi = _mm256_cvtps_epi32(r);
        }
        let sum_lo = hsum_epi32(_mm256_add_epi32(q[0], q[1]));
        let sum_hi = hsum_epi32(_mm256_add_epi32(q[2], q[3]));
        // The saturating packs interleave 128-bit lanes; the permute puts the 4-byte groups
        // back in element order.
        let p = _mm256_packs_epi16(
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        );
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        (_mm256_permutevar8x32_epi32(p, order), sum_lo, sum_hi)
    }

    /// AVX2 twin of [`super::quantize_scalar`], bit-identical to it for finite input.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn quantize(x: &[f32], out: &mut [BlockQ8_1]) {
        assert_eq!(x.len(), QK * out.len(), "q8_1 quantize: length mismatch");
        for (xb, ob) in x.chunks_exact(QK).zip(out.iter_mut()) {
            let xb: &[f32; 32] = xb.try_into().expect("chunks_exact yields 32 floats");
            let (d, id) = act_scale(amax_32(xb));
            let (q, lo, hi) = quantize_32(xb, id);
            // SAFETY: `ob.qs` is 32 writable bytes, the width of an unaligned 256-bit store.
            unsafe { _mm256_storeu_si256(ob.qs.as_mut_ptr().cast(), q) };
            ob.d = super::f16_round(d);
            ob.s = super::f16_round(d * (lo + hi) as f32);
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon {
    use std::arch::aarch64::*;

    use super::{act_scale, BlockQ8_1, QK};

    /// Largest |x| of 32 floats.
    #[inline]
    #[target_feature(enable = "neon")]
    pub(crate) fn amax_32(x: &[f32; 32]) -> f32 {
        let mut m = vdupq_n_f32(0.0);
        for i in 0..8 {
            // SAFETY: 4 floats starting at 4*i lie inside the 32-float array.
            // maxNum skips NaN, as `f32::max` does in the scalar path.
            m = vmaxnmq_f32(m, vabsq_f32(unsafe { vld1q_f32(x.as_ptr().add(4 * i)) }));
        }
        vmaxnmvq_f32(m)
    }

    /// Rounds `x * id` half-to-even (`vcvtnq`, like `round_ties_even`) into `out` and returns
    /// the sums of the first and second 16 codes.
    #[inline]
    #[target_feature(enable = "neon")]
    pub(crate) fn quantize_32(x: &[f32; 32], id: f32, out: &mut [i8; 32]) -> (i32, i32) {
        let mut sums = [0i32; 2];
        for h in 0..2 {
            let mut q = [vdupq_n_s32(0); 4];
            for (k, qk) in q.iter_mut().enumerate() {
                // SAFETY: 4 floats starting at 16h + 4k lie inside the 32-float array.
                let v = unsafe { vld1q_f32(x.as_ptr().add(16 * h + 4 * k)) };
                *qk = vcvtnq_s32_f32(vmulq_n_f32(v, id));
            }
            sums[h] = vaddvq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3])));
            let q16 = (
                vcombine_s16(vqmovn_s32(q[0]), vqmovn_s32(q[1])),
                vcombine_s16(vqmovn_s32(q[2]), vqmovn_s32(q[3])),
            );
            let q8 = vcombine_s8(vqmovn_s16(q16.0), vqmovn_s16(q16.1));
            // SAFETY: 16 bytes starting at 16h lie inside the 32-byte array, exclusively borrowed.
            unsafe { vst1q_s8(out.as_mut_ptr().add(16 * h), q8) };
        }
        (sums[0], sums[1])
    }

    /// NEON twin of [`super::quantize_scalar`], bit-identical to it for finite input.
    #[target_feature(enable = "neon")]
    pub(crate) fn quantize(x: &[f32], out: &mut [BlockQ8_1]) {
        assert_eq!(x.len(), QK * out.len(), "q8_1 quantize: length mismatch");
        for (xb, ob) in x.chunks_exact(QK).zip(out.iter_mut()) {
            let xb: &[f32; 32] = xb.try_into().expect("chunks_exact yields 32 floats");
            let (d, id) = act_scale(amax_32(xb));
            let (lo, hi) = quantize_32(xb, id, &mut ob.qs);
            ob.d = super::f16_round(d);
            ob.s = super::f16_round(d * (lo + hi) as f32);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{random_f32, rng};

    #[test]
    fn quantization_error_is_at_most_half_a_step() {
        let mut r = rng(1);
        let x = random_f32(&mut r, 32 * 40, 3.0);
        let mut q = vec![BlockQ8_1::default(); 40];
        quantize_scalar(&x, &mut q);
        for (xb, b) in x.chunks_exact(32).zip(&q) {
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let (d, _) = act_scale(amax);
            assert_eq!(b.d, f16_round(d));
            let mut sum = 0i32;
            for (&v, &c) in xb.iter().zip(&b.qs) {
                // Half a step, plus what rounding `d` to f16 (relative 2^-11) moves code `c`.
                let bound = d * 0.5001 + f32::from(c).abs() * (b.d - d).abs();
                assert!((v - b.d * f32::from(c)).abs() <= bound, "{v} vs {c}");
                sum += i32::from(c);
            }
            assert_eq!(b.s, f16_round(d * sum as f32));
        }
    }

    #[test]
    fn zero_and_tiny_blocks_quantize_to_zero() {
        let mut q = vec![BlockQ8_1::default(); 2];
        let mut x = vec![0.0f32; 64];
        x[40] = 1e-38;
        quantize_scalar(&x, &mut q);
        for b in &q {
            assert_eq!((b.d, b.s), (0.0, 0.0));
            assert!(b.qs.iter().all(|&c| c == 0));
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_is_bit_identical_to_scalar() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let mut r = rng(2);
        // Include exact .5 ties (integers scaled so amax maps to 127) to pin the rounding mode.
        let mut x = random_f32(&mut r, 32 * 33, 10.0);
        for (i, v) in x[..32].iter_mut().enumerate() {
            *v = i as f32 - 15.5;
        }
        x[31] = 127.0;
        // Non-finite input: a NaN is skipped by the scale and coded 0; an infinity zeroes its
        // block. Both paths must agree (and not panic).
        x[40] = f32::NAN;
        x[70] = f32::INFINITY;
        let mut a = vec![BlockQ8_1::default(); 33];
        let mut b = vec![BlockQ8_1::default(); 33];
        quantize_scalar(&x, &mut a);
        // SAFETY: guarded by the avx2+fma+f16c detection above.
        unsafe { avx2::quantize(&x, &mut b) };
        for (p, q) in a.iter().zip(&b) {
            assert_eq!(p.qs, q.qs);
            assert_eq!(p.d.to_bits(), q.d.to_bits());
            assert_eq!(p.s.to_bits(), q.s.to_bits());
        }
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_is_bit_identical_to_scalar() {
        let mut r = rng(5);
        let n = 33;
        let mut x = random_f32(&mut r, QK * n, 5.0);
        x[10] = f32::NAN;
        x[300] = f32::INFINITY;
        let mut a = vec![BlockQ8_1::default(); n];
        let mut b = vec![BlockQ8_1::default(); n];
        quantize_scalar(&x, &mut a);
        // SAFETY: NEON is part of the aarch64 baseline.
        unsafe { neon::quantize(&x, &mut b) };
        for (p, q) in a.iter().zip(&b) {
            assert_eq!(format!("{p:?}"), format!("{q:?}"));
        }
    }
}
