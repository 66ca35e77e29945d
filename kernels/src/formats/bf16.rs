//! BF16: bfloat16 (the top half of an f32), little endian. Widening a bfloat16 is a 16-bit
//! shift, so every path runs SIMD. A BF16 weight matrix multiplies activations rounded to
//! bfloat16 (ggml's `vec_dot_type` for BF16; `crate::matmul` rounds them), so every product
//! of two bfloat16 values is exact in f32 and only the order of the additions matters: ggml's
//! `ggml_vec_dot_bf16` for one token ([`vec_dot_scalar`]), llamafile's tinyBLAS for a batch
//! ([`tiny_blas_scalar`]).

use crate::block::ByteBlock;

/// One bfloat16, as stored in the file (a type of its own, so F16 bytes cannot be passed
/// where bfloat16 is expected).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BF16(pub [u8; 2]);
const _: () = assert!(size_of::<BF16>() == 2);
// SAFETY: repr(C) around a u8 array: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BF16 {}

/// Exact widening: the 16 bits become the top half of an f32.
#[inline]
pub(crate) fn bf16_to_f32(h: BF16) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes(h.0)) << 16)
}

/// Round to nearest, ties to even (ggml's rule); a NaN stays a (quiet) NaN.
#[inline]
pub(crate) fn f32_to_bf16(v: f32) -> BF16 {
    let u = v.to_bits();
    let h = if v.is_nan() {
        (u >> 16) | 0x40
    } else {
        (u + (0x7FFF + ((u >> 16) & 1))) >> 16
    };
    BF16((h as u16).to_le_bytes())
}

/// Plain reference dot: one sequential f32 sum of widened weights times activations, which
/// the tests hold ggml's orders to within the reordering bound.
#[cfg(test)]
pub(crate) fn dot_scalar(w: &[BF16], x: &[f32]) -> f32 {
    w.iter().zip(x).map(|(&h, &v)| bf16_to_f32(h) * v).sum()
}

/// Scalar model of ggml's AVX2 `ggml_vec_dot_bf16`: four 8-lane accumulators over runs of 32
/// (a product then an add), reduced `(c0 + c2) + (c1 + c3)` and across lanes as ggml's `hsum`,
/// the rest added one by one in f64, the total rounded to f32 last.
pub(crate) fn vec_dot_scalar(w: &[BF16], x: &[f32]) -> f32 {
    let n = w.len().min(x.len());
    let full = n - n % 32;
    let mut c = [[0.0f32; 8]; 4];
    for (wr, xr) in w[..full].chunks_exact(32).zip(x[..full].chunks_exact(32)) {
        for (k, c) in c.iter_mut().enumerate() {
            for (l, c) in c.iter_mut().enumerate() {
                *c += bf16_to_f32(wr[8 * k + l]) * xr[8 * k + l];
            }
        }
    }
    let lanes: [f32; 8] = std::array::from_fn(|l| (c[0][l] + c[2][l]) + (c[1][l] + c[3][l]));
    let mut sum = f64::from(crate::attention::hsum8(&lanes));
    for j in full..n {
        sum += f64::from(bf16_to_f32(w[j]) * x[j]);
    }
    sum as f32
}

/// Scalar model of llamafile's tinyBLAS for BF16 on AVX2 (what llama.cpp runs for two tokens
/// or more when the row length is a multiple of 8): one 8-lane fused multiply-add accumulator
/// over runs of 8, added across lanes as ggml's `hsum`; a tail (rows not a multiple of 8,
/// which tinyBLAS leaves to the row dot) added one by one.
pub(crate) fn tiny_blas_scalar(w: &[BF16], x: &[f32]) -> f32 {
    let n = w.len().min(x.len());
    let full = n - n % 8;
    let mut lanes = [0.0f32; 8];
    for (wr, xr) in w[..full].chunks_exact(8).zip(x[..full].chunks_exact(8)) {
        for ((lane, &h), &v) in lanes.iter_mut().zip(wr).zip(xr) {
            *lane = bf16_to_f32(h).mul_add(v, *lane);
        }
    }
    let mut s = crate::attention::hsum8(&lanes);
    for j in full..n {
        s += bf16_to_f32(w[j]) * x[j];
    }
    s
}

/// [`tiny_blas_scalar`] for `out.len()` tokens.
pub(crate) fn tiny_blas_multi_scalar(w: &[BF16], x: &[f32], out: &mut [f32]) {
    super::each_token(tiny_blas_scalar, w, x, out)
}

pub(crate) fn dequantize(w: &[BF16], out: &mut [f32]) {
    assert_eq!(w.len(), out.len(), "bf16 dequantize: length mismatch");
    for (y, &h) in out.iter_mut().zip(w) {
        *y = bf16_to_f32(h);
    }
}

pub(crate) fn quantize(x: &[f32], out: &mut [BF16]) {
    assert_eq!(x.len(), out.len(), "bf16 quantize: length mismatch");
    for (h, &v) in out.iter_mut().zip(x) {
        *h = f32_to_bf16(v);
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{bf16_to_f32, BF16};
    use crate::x86::hsum_ps;

    /// 8 bfloat16 at `p` widened to 8 floats.
    ///
    /// # Safety
    /// `p` must point to 16 readable bytes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn widen8(p: *const BF16) -> __m256 {
        // SAFETY: the caller guarantees 16 readable bytes at `p`.
        let h = unsafe { _mm_loadu_si128(p.cast()) };
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }

    /// [`super::quantize`] with AVX2, bit for bit: ggml's rounding (`GGML_FP32_TO_BF16`) on
    /// eight values at a time, as integers.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn quantize(x: &[f32], out: &mut [BF16]) {
        assert_eq!(x.len(), out.len(), "bf16 quantize: length mismatch");
        let n = x.len() - x.len() % 8;
        let (px, po) = (x.as_ptr(), out.as_mut_ptr());
        let mut i = 0;
        while i < n {
            // SAFETY: i + 8 <= n: 8 floats in `x`, 8 bfloat16 (16 bytes) in `out`.
            unsafe {
                let u = _mm256_loadu_si256(px.add(i).cast());
                let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(u), _mm256_set1_epi32(1));
                let bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF));
                let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(u, bias));
                // A NaN (magnitude above infinity's bits) keeps its top half, made quiet.
                let mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFF_FFFF));
                let nan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7F80_0000));
                let quiet = _mm256_or_si256(_mm256_srli_epi32::<16>(u), _mm256_set1_epi32(0x40));
                let h = _mm256_blendv_epi8(rounded, quiet, nan);
                // Each lane holds 16 bits: pack them (per 128-bit half), then join the halves.
                let packed = _mm256_packus_epi32(h, h);
                let joined = _mm256_permute4x64_epi64::<0b1000>(packed);
                _mm_storeu_si128(po.add(i).cast(), _mm256_castsi256_si128(joined));
            }
            i += 8;
        }
        super::quantize(&x[n..], &mut out[n..]);
    }

    /// [`super::vec_dot_scalar`] with AVX2, bit for bit: ggml's own loop.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn vec_dot(w: &[BF16], x: &[f32]) -> f32 {
        let n = w.len().min(x.len());
        let (pw, px) = (w.as_ptr(), x.as_ptr());
        let mut c = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (k, c) in c.iter_mut().enumerate() {
                // SAFETY: i + 8k + 8 <= n: 8 bfloat16 (16 bytes) and 8 floats inside the slices.
                let (h, v) = unsafe {
                    (
                        widen8(pw.add(i + 8 * k)),
                        _mm256_loadu_ps(px.add(i + 8 * k)),
                    )
                };
                *c = _mm256_add_ps(_mm256_mul_ps(h, v), *c);
            }
            i += 32;
        }
        let r = _mm256_add_ps(_mm256_add_ps(c[0], c[2]), _mm256_add_ps(c[1], c[3]));
        let mut sum = f64::from(hsum_ps(r));
        for j in i..n {
            sum += f64::from(bf16_to_f32(w[j]) * x[j]);
        }
        sum as f32
    }

    /// [`super::tiny_blas_scalar`] for `out.len()` tokens (`x` holds them one after another),
    /// four tokens at a time: four independent accumulators keep the FMA units busy, and each
    /// token's own sum is unchanged.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn tiny_blas_multi(w: &[BF16], x: &[f32], out: &mut [f32]) {
        let n = w.len();
        let full = n - n % 8;
        let pw = w.as_ptr();
        for (x4, o4) in x.chunks(4 * n).zip(out.chunks_mut(4)) {
            let t = o4.len();
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i < full {
                // SAFETY: i + 8 <= full <= n: 8 bfloat16 inside `w`.
                let h = unsafe { widen8(pw.add(i)) };
                for (k, acc) in acc.iter_mut().enumerate().take(t) {
                    // SAFETY: token k < t has n floats at k·n in `x4`, and i + 8 <= n.
                    let v = unsafe { _mm256_loadu_ps(x4.as_ptr().add(k * n + i)) };
                    *acc = _mm256_fmadd_ps(h, v, *acc);
                }
                i += 8;
            }
            for (k, o) in o4.iter_mut().enumerate() {
                let mut s = hsum_ps(acc[k]);
                for j in full..n {
                    s += bf16_to_f32(w[j]) * x4[k * n + j];
                }
                *o = s;
            }
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon {
    use std::arch::aarch64::*;

    use super::{bf16_to_f32, BF16};

    /// NEON dot: widen 4 bfloat16 at a time by a 16-bit shift, four 4-lane FMA accumulators
    /// (16 elements per step), then a scalar tail (the f32 dot's shape).
    /// One [`dot`] per token (`x` holds `out.len()` tokens).
    #[allow(unused_unsafe)]
    #[target_feature(enable = "neon")]
    pub(crate) fn dot_multi(w: &[BF16], x: &[f32], out: &mut [f32]) {
        // SAFETY: NEON is this function's feature, and `dot`'s.
        crate::formats::each_token(|w, x| unsafe { dot(w, x) }, w, x, out)
    }

    #[target_feature(enable = "neon")]
    pub(crate) fn dot(w: &[BF16], x: &[f32]) -> f32 {
        let n = w.len().min(x.len());
        let (pw, px) = (w.as_ptr(), x.as_ptr());
        let mut acc = [vdupq_n_f32(0.0); 4];
        let mut i = 0;
        while i + 16 <= n {
            // SAFETY: i + 16 <= n: 16 bfloat16 (32 bytes) inside `w`.
            let h = unsafe { (vld1q_u16(pw.add(i).cast()), vld1q_u16(pw.add(i + 8).cast())) };
            let wide = [
                vshll_n_u16::<16>(vget_low_u16(h.0)),
                vshll_high_n_u16::<16>(h.0),
                vshll_n_u16::<16>(vget_low_u16(h.1)),
                vshll_high_n_u16::<16>(h.1),
            ];
            for (k, (acc, wk)) in acc.iter_mut().zip(wide).enumerate() {
                // SAFETY: i + 4k + 4 <= i + 16 <= n, within `x`.
                let v = unsafe { vld1q_f32(px.add(i + 4 * k)) };
                *acc = vfmaq_f32(*acc, vreinterpretq_f32_u32(wk), v);
            }
            i += 16;
        }
        let sum = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
        let mut s = vaddvq_f32(sum);
        for j in i..n {
            s += bf16_to_f32(w[j]) * x[j];
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    #[test]
    fn conversion_rounds_to_nearest_even() {
        // 1 + 2^-8 is halfway between two bfloat16 (1 and 1 + 2^-7): ties go to even (1).
        assert_eq!(bf16_to_f32(f32_to_bf16(1.0 + 2f32.powi(-8))), 1.0);
        // 1 + 3·2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to even, the larger.
        assert_eq!(
            bf16_to_f32(f32_to_bf16(1.0 + 3.0 * 2f32.powi(-8))),
            1.0 + 2f32.powi(-6)
        );
        assert_eq!(bf16_to_f32(f32_to_bf16(-2.5)), -2.5);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert_eq!(bf16_to_f32(f32_to_bf16(f32::INFINITY)), f32::INFINITY);
    }

    #[test]
    fn round_trip_within_half_precision() {
        let mut r = rng(80);
        let x = random_f32(&mut r, 999, 100.0);
        let mut h = vec![BF16([0; 2]); x.len()];
        quantize(&x, &mut h);
        let mut y = vec![0.0; x.len()];
        dequantize(&h, &mut y);
        for (a, b) in x.iter().zip(&y) {
            // Half an ulp of bfloat16: relative 2^-8.
            assert!((a - b).abs() <= a.abs() * 2f32.powi(-8), "{a} vs {b}");
        }
    }

    /// The error budget against the f64 dot of the same (exact) widened weights: only f32
    /// accumulation, at most n·ε·Σ|w·x|.
    #[test]
    fn dot_within_accumulation_budget() {
        let mut r = rng(81);
        for n in [1, 31, 256, 1001] {
            let mut w = vec![BF16([0; 2]); n];
            quantize(&random_f32(&mut r, n, 1.0), &mut w);
            let x = random_f32(&mut r, n, 1.0);
            let exact: f64 = w
                .iter()
                .zip(&x)
                .map(|(&h, &v)| f64::from(bf16_to_f32(h)) * f64::from(v))
                .sum();
            let mag: f64 = w
                .iter()
                .zip(&x)
                .map(|(&h, &v)| (f64::from(bf16_to_f32(h)) * f64::from(v)).abs())
                .sum();
            let got = f64::from(dot_scalar(&w, &x));
            let budget = n as f64 * f64::from(f32::EPSILON) * mag + 1e-30;
            assert!((got - exact).abs() <= budget, "{n}: {got} vs {exact}");
        }
    }

    fn random_weights(r: &mut Rng, n: usize) -> (Vec<BF16>, Vec<f32>, f32) {
        let mut w = vec![BF16([0; 2]); n];
        quantize(&random_f32(r, n, 1.0), &mut w);
        let x = random_f32(r, n, 1.0);
        let terms = w
            .iter()
            .zip(&x)
            .map(|(&h, v)| (bf16_to_f32(h) * v).abs())
            .sum();
        (w, x, terms)
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_matches_scalar_on_odd_lengths() {
        let mut r = rng(83);
        for n in [1, 7, 15, 16, 17, 33, 576, 1001] {
            let (w, x, terms) = random_weights(&mut r, n);
            // SAFETY: NEON is part of the aarch64 baseline.
            let simd = unsafe { neon::dot(&w, &x) };
            assert_reordered_sum_close(simd, dot_scalar(&w, &x), terms, n);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_rounding_is_the_scalar_rounding() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let mut r = rng(85);
        let mut x = random_f32(&mut r, 1003, 1000.0);
        // Ties both ways, NaNs (quiet and signalling, either sign), infinities, denormals,
        // the largest finite value (rounds to infinity) and zeros.
        let special = [
            1.0 + 2f32.powi(-8),
            1.0 + 3.0 * 2f32.powi(-8),
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7F80_0001),
            f32::from_bits(0xFF80_0001),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::from_bits(1),
            f32::from_bits(0x8040_8000),
            f32::MAX,
            0.0,
            -0.0,
        ];
        x[..special.len()].copy_from_slice(&special);
        let (mut got, mut want) = (vec![BF16([0; 2]); x.len()], vec![BF16([0; 2]); x.len()]);
        // SAFETY: detected by `test_needs`.
        unsafe { avx2::quantize(&x, &mut got) };
        quantize(&x, &mut want);
        let raw = |v: &[BF16]| v.iter().map(|h| h.0).collect::<Vec<_>>();
        assert_eq!(raw(&got), raw(&want));
    }

    /// The AVX2 dots equal their scalar models of ggml's and tinyBLAS's orders bit for bit,
    /// on lengths with and without a tail, for one token and several.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_ggml_orders_equal_their_models_bit_for_bit() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let mut r = rng(84);
        for n in [7, 8, 32, 33, 576, 1536, 1001] {
            let (w, _, _) = random_weights(&mut r, n);
            // Activations rounded to bfloat16, as the matmul hands them over.
            let x: Vec<f32> = random_f32(&mut r, 5 * n, 1.0)
                .into_iter()
                .map(|v| bf16_to_f32(f32_to_bf16(v)))
                .collect();
            let (mut got, mut want) = (vec![0.0; 5], vec![0.0; 5]);
            for (t, (g, w8)) in got.iter_mut().zip(want.iter_mut()).enumerate() {
                let xt = &x[t * n..(t + 1) * n];
                // SAFETY: detected by `test_needs`.
                *g = unsafe { avx2::vec_dot(&w, xt) };
                *w8 = vec_dot_scalar(&w, xt);
            }
            let map_bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(map_bits(&got), map_bits(&want), "vec_dot, n {n}");
            // SAFETY: as above.
            unsafe { avx2::tiny_blas_multi(&w, &x, &mut got) };
            tiny_blas_multi_scalar(&w, &x, &mut want);
            assert_eq!(map_bits(&got), map_bits(&want), "tinyBLAS, n {n}");
            let terms: f32 = w
                .iter()
                .zip(&x)
                .map(|(&h, v)| (bf16_to_f32(h) * v).abs())
                .sum();
            assert_reordered_sum_close(want[0], dot_scalar(&w, &x[..n]), terms, n);
        }
    }
}
