//! F16: IEEE halves, little endian. Dotted directly against f32 activations, widening the
//! weights with F16C in the AVX2 path.

use crate::block::{f16_to_f32, f32_to_f16, ByteBlock};

/// One half, as stored in the file.
pub(crate) type F16 = [u8; 2];
// SAFETY: a u8 array: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for F16 {}

/// Scalar reference dot: one sequential f32 sum of widened weights times activations.
pub(crate) fn dot_scalar(w: &[F16], x: &[f32]) -> f32 {
    w.iter().zip(x).map(|(&h, &v)| f16_to_f32(h) * v).sum()
}

pub(crate) fn dequantize(w: &[F16], out: &mut [f32]) {
    assert_eq!(w.len(), out.len(), "f16 dequantize: length mismatch");
    for (y, &h) in out.iter_mut().zip(w) {
        *y = f16_to_f32(h);
    }
}

/// Round to nearest half (overflowing values become ±inf, as in ggml).
pub(crate) fn quantize(x: &[f32], out: &mut [F16]) {
    assert_eq!(x.len(), out.len(), "f16 quantize: length mismatch");
    for (h, &v) in out.iter_mut().zip(x) {
        *h = f32_to_f16(v);
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::F16;
    use crate::x86::{f16_to_f32, hsum_ps};

    /// The products of the first `n - n % 8` values (`n` the shorter length) summed into 8
    /// lanes: widen 8 halves with F16C, four FMA accumulators over runs of 32, the rest into
    /// the first, then the four added pairwise. [`dot`] and the LoRA rows kernel share it.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn lanes(w: &[F16], x: &[f32]) -> __m256 {
        let n = w.len().min(x.len());
        let (pw, px) = (w.as_ptr(), x.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (k, acc) in acc.iter_mut().enumerate() {
                // SAFETY: i + 8k + 8 <= n: 8 halves (16 bytes) and 8 floats inside the slices.
                let (h, v) = unsafe {
                    (
                        _mm_loadu_si128(pw.add(i + 8 * k).cast()),
                        _mm256_loadu_ps(px.add(i + 8 * k)),
                    )
                };
                *acc = _mm256_fmadd_ps(_mm256_cvtph_ps(h), v, *acc);
            }
            i += 32;
        }
        while i + 8 <= n {
            // SAFETY: i + 8 <= n: 8 halves and 8 floats inside the slices.
            let (h, v) = unsafe {
                (
                    _mm_loadu_si128(pw.add(i).cast()),
                    _mm256_loadu_ps(px.add(i)),
                )
            };
            acc[0] = _mm256_fmadd_ps(_mm256_cvtph_ps(h), v, acc[0]);
            i += 8;
        }
        _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))
    }

    /// AVX2 dot: [`lanes`], their horizontal sum, then a scalar tail.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot(w: &[F16], x: &[f32]) -> f32 {
        let n = w.len().min(x.len());
        let mut s = hsum_ps(lanes(w, x));
        for j in n - n % 8..n {
            s += f16_to_f32(w[j]) * x[j];
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    #[test]
    fn round_trip_within_half_precision() {
        let mut r = rng(70);
        let x = random_f32(&mut r, 999, 100.0);
        let mut h = vec![[0u8; 2]; x.len()];
        quantize(&x, &mut h);
        let mut y = vec![0.0; x.len()];
        dequantize(&h, &mut y);
        for (a, b) in x.iter().zip(&y) {
            // Half an ulp of f16: relative 2^-11 (the inputs are far from the subnormal range).
            assert!((a - b).abs() <= a.abs() * 2f32.powi(-11), "{a} vs {b}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_matches_scalar_on_odd_lengths() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let mut r = rng(71);
        for n in [1, 7, 8, 9, 33, 576, 1001] {
            let mut w = vec![[0u8; 2]; n];
            quantize(&random_f32(&mut r, n, 1.0), &mut w);
            let x = random_f32(&mut r, n, 1.0);
            let terms: f32 = w
                .iter()
                .zip(&x)
                .map(|(&h, v)| (f16_to_f32(h) * v).abs())
                .sum();
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            let simd = unsafe { avx2::dot(&w, &x) };
            assert_reordered_sum_close(simd, dot_scalar(&w, &x), terms, n);
        }
    }
}
