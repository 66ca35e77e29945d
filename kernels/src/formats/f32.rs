//! F32: plain floats. The dot product and axpy used by attention and by F32 weight matrices.

/// Scalar reference dot: one sequential f32 sum.
pub(crate) fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Scalar reference `y += alpha * x` (multiply then add, two roundings).
pub(crate) fn axpy_scalar(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y += alpha * x;
    }
}

/// Little-endian bytes to floats (F32 tensors are stored little endian; we only build there).
pub(crate) fn dequantize(src: &[u8], out: &mut [f32]) {
    assert_eq!(src.len(), 4 * out.len(), "f32 dequantize: length mismatch");
    for (y, b) in out.iter_mut().zip(src.chunks_exact(4)) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use crate::x86::hsum_ps;

    /// AVX2 dot: four 8-lane FMA accumulators (32 floats per step) to cover FMA latency,
    /// then 8-wide steps, then a scalar tail.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (k, acc) in acc.iter_mut().enumerate() {
                // SAFETY: i + 8k + 8 <= i + 32 <= n, within both slices.
                let (x, y) = unsafe {
                    (
                        _mm256_loadu_ps(pa.add(i + 8 * k)),
                        _mm256_loadu_ps(pb.add(i + 8 * k)),
                    )
                };
                *acc = _mm256_fmadd_ps(x, y, *acc);
            }
            i += 32;
        }
        while i + 8 <= n {
            // SAFETY: i + 8 <= n, within both slices.
            let (x, y) = unsafe { (_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i))) };
            acc[0] = _mm256_fmadd_ps(x, y, acc[0]);
            i += 8;
        }
        let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut s = hsum_ps(sum);
        for j in i..n {
            s += a[j] * b[j];
        }
        s
    }

    /// AVX2 `y += alpha * x` with one FMA rounding per element (the scalar path rounds twice,
    /// so the two differ by at most one ulp of each `alpha * x` product).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
        let n = x.len().min(y.len());
        let av = _mm256_set1_ps(alpha);
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n, within both slices; `y` is exclusively borrowed.
            unsafe {
                let px = x.as_ptr().add(i);
                let py = y.as_mut_ptr().add(i);
                _mm256_storeu_ps(
                    py,
                    _mm256_fmadd_ps(av, _mm256_loadu_ps(px), _mm256_loadu_ps(py)),
                );
            }
            i += 8;
        }
        for j in i..n {
            y[j] = alpha.mul_add(x[j], y[j]);
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon {
    use std::arch::aarch64::*;

    /// NEON dot: four 4-lane FMA accumulators (16 floats per step), then a scalar tail.
    #[target_feature(enable = "neon")]
    pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [vdupq_n_f32(0.0); 4];
        let mut i = 0;
        while i + 16 <= n {
            for (k, acc) in acc.iter_mut().enumerate() {
                // SAFETY: i + 4k + 4 <= i + 16 <= n, within both slices.
                let (x, y) =
                    unsafe { (vld1q_f32(pa.add(i + 4 * k)), vld1q_f32(pb.add(i + 4 * k))) };
                *acc = vfmaq_f32(*acc, x, y);
            }
            i += 16;
        }
        let sum = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
        let mut s = vaddvq_f32(sum);
        for j in i..n {
            s += a[j] * b[j];
        }
        s
    }

    /// NEON `y += alpha * x` with one FMA rounding per element.
    #[target_feature(enable = "neon")]
    pub(crate) fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
        let n = x.len().min(y.len());
        let mut i = 0;
        while i + 4 <= n {
            // SAFETY: i + 4 <= n, within both slices; `y` is exclusively borrowed.
            unsafe {
                let py = y.as_mut_ptr().add(i);
                vst1q_f32(
                    py,
                    vfmaq_n_f32(vld1q_f32(py), vld1q_f32(x.as_ptr().add(i)), alpha),
                );
            }
            i += 4;
        }
        for j in i..n {
            y[j] = alpha.mul_add(x[j], y[j]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    /// Compares a SIMD dot and axpy with the scalar ones: the dot within the reordering bound,
    /// axpy within one extra rounding of each `alpha * x` (FMA rounds once, scalar twice).
    fn check_against_scalar(
        seed: u64,
        dot: fn(&[f32], &[f32]) -> f32,
        axpy: fn(f32, &[f32], &mut [f32]),
    ) {
        let mut r = rng(seed);
        for n in [0, 1, 7, 8, 9, 31, 33, 64, 100, 576, 1537] {
            let a = random_f32(&mut r, n, 1.0);
            let b = random_f32(&mut r, n, 1.0);
            let terms: f32 = a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum();
            assert_reordered_sum_close(dot(&a, &b), dot_scalar(&a, &b), terms, n);

            let alpha = 0.37;
            let mut y1 = b.clone();
            let mut y2 = b.clone();
            axpy_scalar(alpha, &a, &mut y1);
            axpy(alpha, &a, &mut y2);
            for ((p, q), x) in y1.iter().zip(&y2).zip(&a) {
                // One extra rounding of alpha*x (half an ulp of it) plus the final add's.
                let tol = f32::EPSILON * ((alpha * x).abs() + p.abs());
                assert!((p - q).abs() <= tol, "{p} vs {q}");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_matches_scalar_on_odd_lengths() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        check_against_scalar(
            60,
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            |a, b| unsafe { avx2::dot(a, b) },
            // SAFETY: as above.
            |alpha, x, y| unsafe { avx2::axpy(alpha, x, y) },
        );
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_matches_scalar_on_odd_lengths() {
        check_against_scalar(
            61,
            // SAFETY: NEON is part of the aarch64 baseline.
            |a, b| unsafe { neon::dot(a, b) },
            // SAFETY: as above.
            |alpha, x, y| unsafe { neon::axpy(alpha, x, y) },
        );
    }
}
