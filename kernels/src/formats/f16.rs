//! F16: IEEE halves, little endian. Dotted directly against f32 activations, widening the
//! weights with F16C in the AVX2 path.

use crate::attention::hsum8;
use crate::block::{f16_to_f32, f32_to_f16, ByteBlock};

/// One half, as stored in the file.
pub(crate) type F16 = [u8; 2];
// SAFETY: a u8 array: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for F16 {}

/// Scalar reference dot: one sequential f32 sum of widened weights times activations.
pub(crate) fn dot_scalar(w: &[F16], x: &[f32]) -> f32 {
    w.iter().zip(x).map(|(&h, &v)| f16_to_f32(h) * v).sum()
}

/// Scalar reference of the dot in ggml's F16 *matmul* order on x86. For an F16 matrix whose
/// rows are a multiple of 8 long and number a multiple of 4, ggml hands the product to
/// llamafile's tinyBLAS, not to its `ggml_vec_dot_f16`: one accumulator of 8 lanes, each fed
/// a fused multiply-add per run of 8, then summed as [`hsum8`] sums. (A tail past the last
/// full run, which tinyBLAS never sees, is added in order.) Bit for bit [`avx2::tiny_blas_dot`].
pub(crate) fn tiny_blas_dot_scalar(w: &[F16], x: &[f32]) -> f32 {
    let n = w.len().min(x.len());
    let full = n - n % 8;
    let mut lanes = [0.0f32; 8];
    for (wr, xr) in w[..full].chunks_exact(8).zip(x[..full].chunks_exact(8)) {
        for ((lane, &h), &v) in lanes.iter_mut().zip(wr).zip(xr) {
            *lane = f16_to_f32(h).mul_add(v, *lane);
        }
    }
    let mut s = hsum8(&lanes);
    for j in full..n {
        s += f16_to_f32(w[j]) * x[j];
    }
    s
}

/// `out[i] = tiny_blas_dot_scalar(row i of w, x)` for the `out.len()` rows of `x.len()` values.
pub(crate) fn tiny_blas_dots_scalar(w: &[F16], x: &[f32], out: &mut [f32]) {
    if x.is_empty() {
        out.fill(0.0);
        return;
    }
    for (o, row) in out.iter_mut().zip(w.chunks_exact(x.len())) {
        *o = tiny_blas_dot_scalar(row, x);
    }
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

    /// `ggml_vec_dot_f16`'s order on AVX2, bit for bit: four FMA accumulators over runs of 32
    /// (none for a row shorter than 32), added (0 + 2) + (1 + 3), each lane plus the one four
    /// above it, then two `hadd`s; the products past the last run of 32 are added one by one
    /// in f64, and the sum is rounded to f32 once at the end. ggml runs this for one token
    /// (and for any F16 matrix tinyBLAS declines: [`tiny_blas_dot`]).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot(w: &[F16], x: &[f32]) -> f32 {
        let n = w.len().min(x.len());
        let (pw, px) = (w.as_ptr(), x.as_ptr());
        let runs = n - n % 32;
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i < runs {
            for (k, acc) in acc.iter_mut().enumerate() {
                // SAFETY: i + 8k + 8 <= runs <= n: 8 halves (16 bytes) and 8 floats inside.
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
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
        let t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
        let t = _mm_hadd_ps(t, t);
        let mut sum = f64::from(_mm_cvtss_f32(_mm_hadd_ps(t, t)));
        // The leftovers: products eight at a time (each rounded once, as one at a time would
        // be), summed in order.
        let mut products = [0.0f32; 8];
        while i + 8 <= n {
            // SAFETY: i + 8 <= n: 8 halves and 8 floats inside the slices; 8 floats out.
            unsafe {
                let h = _mm_loadu_si128(pw.add(i).cast());
                let p = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_loadu_ps(px.add(i)));
                _mm256_storeu_ps(products.as_mut_ptr(), p);
            }
            for &p in &products {
                sum += f64::from(p);
            }
            i += 8;
        }
        for j in i..n {
            sum += f64::from(f16_to_f32(w[j]) * x[j]);
        }
        sum as f32
    }

    /// The products of the first `n - n % 8` values summed into 8 lanes in ggml's F16 matmul
    /// order ([`super::tiny_blas_dot_scalar`]): one FMA accumulator, run after run.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn tiny_blas_lanes(w: &[F16], x: &[f32]) -> __m256 {
        let n = w.len().min(x.len());
        let (pw, px) = (w.as_ptr(), x.as_ptr());
        let mut acc = _mm256_setzero_ps();
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n: 8 halves and 8 floats inside the slices.
            let (h, v) = unsafe {
                (
                    _mm_loadu_si128(pw.add(i).cast()),
                    _mm256_loadu_ps(px.add(i)),
                )
            };
            acc = _mm256_fmadd_ps(_mm256_cvtph_ps(h), v, acc);
            i += 8;
        }
        acc
    }

    /// [`tiny_blas_lanes`], their horizontal sum, then a scalar tail:
    /// [`super::tiny_blas_dot_scalar`] bit for bit.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn tiny_blas_dot(w: &[F16], x: &[f32]) -> f32 {
        let n = w.len().min(x.len());
        let mut s = hsum_ps(tiny_blas_lanes(w, x));
        for j in n - n % 8..n {
            s += f16_to_f32(w[j]) * x[j];
        }
        s
    }

    /// `out[i] = tiny_blas_dot(row i of w, x)` for the `out.len()` rows of `x.len()` values,
    /// four rows at a time: one accumulator waits on its previous FMA every run, four
    /// independent ones keep the FMA units busy (as tinyBLAS's tiles of rows do). Each row's
    /// own sum is unchanged, so this is the per-row dot bit for bit.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn tiny_blas_dots(w: &[F16], x: &[f32], out: &mut [f32]) {
        let n = x.len();
        if n == 0 {
            out.fill(0.0);
            return;
        }
        let mut r = 0;
        if n.is_multiple_of(8) {
            let rows = out.len().min(w.len() / n);
            let (pw, px) = (w.as_ptr(), x.as_ptr());
            while r + 4 <= rows {
                let mut acc = [_mm256_setzero_ps(); 4];
                let mut i = 0;
                while i < n {
                    // SAFETY: i + 8 <= n; rows r..r + 4 lie inside w (r + 4 <= w.len() / n).
                    let v = unsafe { _mm256_loadu_ps(px.add(i)) };
                    for (k, acc) in acc.iter_mut().enumerate() {
                        // SAFETY: as above.
                        let h = unsafe { _mm_loadu_si128(pw.add((r + k) * n + i).cast()) };
                        *acc = _mm256_fmadd_ps(_mm256_cvtph_ps(h), v, *acc);
                    }
                    i += 8;
                }
                for (k, acc) in acc.iter().enumerate() {
                    out[r + k] = hsum_ps(*acc);
                }
                r += 4;
            }
        }
        for (o, row) in out[r..].iter_mut().zip(w[r * n..].chunks_exact(n)) {
            *o = tiny_blas_dot(row, x);
        }
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

    /// `ggml_vec_dot_f16` on AVX2, written out plainly (vec.cpp of the reference build; the
    /// lanes reduced as attention's one-row order reduces them): the reference [`avx2::dot`]
    /// must equal bit for bit.
    #[cfg(target_arch = "x86_64")]
    fn ggml_vec_dot_f16(w: &[F16], x: &[f32]) -> f32 {
        use crate::attention::F16SumOrder;
        let n = w.len();
        let runs = n - n % 32;
        // Element i of each run of 32 goes to lane i: accumulator i / 8, lane i % 8.
        let mut lanes = [0.0f32; 32];
        for i in 0..runs {
            lanes[i % 32] = f16_to_f32(w[i]).mul_add(x[i], lanes[i % 32]);
        }
        let mut sum = f64::from(F16SumOrder::VecDot.reduce(&lanes));
        for j in runs..n {
            sum += f64::from(f16_to_f32(w[j]) * x[j]);
        }
        sum as f32
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_dot_is_ggml_vec_dot_f16_bit_for_bit() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let mut r = rng(73);
        for n in [0, 1, 7, 8, 16, 31, 32, 33, 64, 100, 576, 1536, 1001] {
            let mut w = vec![[0u8; 2]; n];
            quantize(&random_f32(&mut r, n, 1.0), &mut w);
            let x = random_f32(&mut r, n, 1.0);
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            let simd = unsafe { avx2::dot(&w, &x) };
            assert_eq!(simd.to_bits(), ggml_vec_dot_f16(&w, &x).to_bits(), "n {n}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_tiny_blas_dot_equals_its_scalar_reference_bit_for_bit() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let mut r = rng(72);
        for n in [0, 1, 7, 8, 16, 33, 576, 1536, 1001] {
            let mut w = vec![[0u8; 2]; n];
            quantize(&random_f32(&mut r, n, 1.0), &mut w);
            let x = random_f32(&mut r, n, 1.0);
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            let simd = unsafe { avx2::tiny_blas_dot(&w, &x) };
            assert_eq!(
                simd.to_bits(),
                tiny_blas_dot_scalar(&w, &x).to_bits(),
                "n {n}"
            );
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_tiny_blas_rows_equal_the_dot_per_row() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let mut r = rng(74);
        for (n, rows) in [
            (576, 16),
            (64, 7),
            (8, 4),
            (24, 9),
            (12, 5),
            (0, 3),
            (1536, 3),
        ] {
            let mut w = vec![[0u8; 2]; n * rows];
            quantize(&random_f32(&mut r, n * rows, 1.0), &mut w);
            let x = random_f32(&mut r, n, 1.0);
            let mut got = vec![f32::NAN; rows];
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            unsafe { avx2::tiny_blas_dots(&w, &x, &mut got) };
            for (i, g) in got.iter().enumerate() {
                let want = tiny_blas_dot_scalar(&w[i * n..(i + 1) * n], &x);
                assert_eq!(g.to_bits(), want.to_bits(), "n {n} rows {rows} row {i}");
            }
        }
    }

    #[test]
    fn the_tiny_blas_order_fuses_each_product_into_its_lane() {
        // Lane 0 holds -(1 + 2^-10 + 2^-14) after the first run; the second adds
        // (1 + 2^-10)(1 + 2^-14), whose last term 2^-24 an f32 product rounds away (a tie to
        // even). Fused, the lane keeps exactly that 2^-24; multiplied then added, it is 0.
        let c = 1.0 + 2f32.powi(-10) + 2f32.powi(-14);
        let mut w = vec![f32_to_f16(0.0); 16];
        let mut x = vec![0.0f32; 16];
        (w[0], x[0]) = (f32_to_f16(1.0), -c);
        (w[8], x[8]) = (f32_to_f16(1.0 + 2f32.powi(-10)), 1.0 + 2f32.powi(-14));
        assert_eq!(f16_to_f32(w[8]) * x[8] - c, 0.0);
        assert_eq!(tiny_blas_dot_scalar(&w, &x), 2f32.powi(-24));
    }
}
