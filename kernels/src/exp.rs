//! e^x over a slice, computed exactly as ggml's vectorized `ggml_v_expf` computes it, so softmax
//! and SiLU round the same way in both engines.
//!
//! The algorithm is ARM's optimized-routines single-precision exp: write x = n ln2 + b with n an
//! integer (found by adding 1.5 * 2^23, which rounds), build 2^n in the exponent bits, take e^b
//! from a degree-5 polynomial, every multiply-add fused. Within 1.5 ulp of the true value;
//! above 88.38 it gives infinity, below -103.97 zero. The AVX2 version computes the same
//! operations lane by lane and equals the scalar reference bit for bit.

/// The constants, as f32 bit patterns.
const SHIFT: u32 = 0x4b40_0000; // 1.5 * 2^23
const INV_LN2: u32 = 0x3fb8_aa3b; // 1 / ln 2
const LN2_HI: u32 = 0x3f31_7200; // ln 2, high part
const LN2_LO: u32 = 0x35bf_be8e; // ln 2, low part
const P5: u32 = 0x3c07_2010; // the polynomial coefficients, highest degree first
const P4: u32 = 0x3d2b_9f17;
const P3: u32 = 0x3e2a_af33;
const P2: u32 = 0x3eff_fedb;
const P1: u32 = 0x3f7f_fff6;

fn c(bits: u32) -> f32 {
    f32::from_bits(bits)
}

/// Scalar reference for one value.
pub(crate) fn exp_one(x: f32) -> f32 {
    let z = x.mul_add(c(INV_LN2), c(SHIFT));
    let n = z - c(SHIFT);
    let b = (-n).mul_add(c(LN2_LO), (-n).mul_add(c(LN2_HI), x)); // x - n ln2
    let e = z.to_bits() << 23;
    let k = f32::from_bits(e.wrapping_add(1.0f32.to_bits())); // 2^n when it is a normal float
    let u = b * b;
    let j = c(P5)
        .mul_add(b, c(P4))
        .mul_add(u, c(P3).mul_add(b, c(P2)))
        .mul_add(u, c(P1) * b); // e^b - 1
    if n.abs() <= 126.0 {
        return j.mul_add(k, k);
    }
    // 2^n is out of the normal range: build it as a product of two scales, or saturate.
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f32::from_bits(g.wrapping_add(0x7f00_0000));
    let s2 = f32::from_bits(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        s1 * s1
    } else {
        s2.mul_add(j, s2) * s1
    }
}

/// Scalar reference: every element replaced by its exponential.
pub(crate) fn exp_scalar(x: &mut [f32]) {
    for v in x {
        *v = exp_one(*v);
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::*;

    /// Eight lanes of [`exp_one`].
    #[target_feature(enable = "avx2,fma,f16c")]
    fn exp8(x: __m256) -> __m256 {
        let set = |bits: u32| _mm256_set1_ps(c(bits));
        let z = _mm256_fmadd_ps(x, set(INV_LN2), set(SHIFT));
        let n = _mm256_sub_ps(z, set(SHIFT));
        let b = _mm256_fnmadd_ps(n, set(LN2_LO), _mm256_fnmadd_ps(n, set(LN2_HI), x));
        let e = _mm256_slli_epi32::<23>(_mm256_castps_si256(z));
        let k = _mm256_castsi256_ps(_mm256_add_epi32(
            e,
            _mm256_castps_si256(_mm256_set1_ps(1.0)),
        ));
        let abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n);
        let big = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(126.0));
        let u = _mm256_mul_ps(b, b);
        let j = _mm256_fmadd_ps(
            _mm256_fmadd_ps(
                _mm256_fmadd_ps(set(P5), b, set(P4)),
                u,
                _mm256_fmadd_ps(set(P3), b, set(P2)),
            ),
            u,
            _mm256_mul_ps(set(P1), b),
        );
        let normal = _mm256_fmadd_ps(j, k, k);
        if _mm256_movemask_ps(big) == 0 {
            return normal;
        }
        let g = _mm256_and_si256(
            _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps())),
            _mm256_set1_epi32(0x8200_0000u32 as i32),
        );
        let s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f00_0000)));
        let s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
        let huge = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(192.0));
        let scaled = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
        let r = _mm256_blendv_ps(normal, scaled, big);
        _mm256_blendv_ps(r, _mm256_mul_ps(s1, s1), huge)
    }

    /// AVX2 exp in place: 8 lanes at a time, the scalar reference for the tail.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn exp(x: &mut [f32]) {
        let mut chunks = x.chunks_exact_mut(8);
        for ch in &mut chunks {
            // SAFETY: the chunk holds exactly 8 floats, read and written in place.
            unsafe {
                let p = ch.as_mut_ptr();
                _mm256_storeu_ps(p, exp8(_mm256_loadu_ps(p)));
            }
        }
        super::exp_scalar(chunks.into_remainder());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{random_f32, rng};

    fn inputs() -> Vec<f32> {
        let mut x = random_f32(&mut rng(7), 1001, 20.0);
        x.extend([
            0.0, -0.0, 88.0, 88.5, 100.0, -87.0, -100.0, -104.0, -150.0, -200.0,
        ]);
        x.extend([f32::NEG_INFINITY, 1e-8, -1e-8, 0.5, -0.5]);
        x
    }

    #[test]
    fn scalar_is_within_two_ulp_of_exp() {
        for &x in &inputs() {
            let (got, want) = (exp_one(x), (x as f64).exp());
            if want < f32::MIN_POSITIVE as f64 || want > f32::MAX as f64 {
                continue; // denormal or overflowing results: only the range ends are promised
            }
            let ulp = (want as f32).to_bits().abs_diff(got.to_bits());
            assert!(ulp <= 2, "exp({x}) = {got}, want {want} ({ulp} ulp)");
        }
        assert_eq!(exp_one(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_one(-200.0), 0.0);
        assert_eq!(exp_one(100.0), f32::INFINITY);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_equals_scalar_bit_for_bit() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let x = inputs();
        let mut want = x.clone();
        exp_scalar(&mut want);
        for len in [0, 1, 7, 8, 9, 31, x.len()] {
            let mut got = x[..len].to_vec();
            // SAFETY: AVX2, FMA and F16C were detected above.
            unsafe { avx2::exp(&mut got) };
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "exp({})", x[i]);
            }
        }
    }
}
