//! GeGLU's activation, `gate = gelu(gate) · up`, as ggml computes GELU on CPUs: the input
//! rounded to f16, GELU's tanh form (Hendrycks & Gimpel 2016) in f32 read from a table of
//! every f16 input, the result rounded to f16; at or below -10 it is 0 and at or above 10 the
//! input itself. The table holds each value already widened to f32 (exact), so a lookup is
//! one load; the AVX2 twin rounds eight inputs to f16 at once and gathers their values, the
//! same values, so the same bits.

use half::f16;

/// `gate[i] = gelu(gate[i]) · up[i]`.
///
/// # Panics
/// If the lengths differ: a shape bug in the caller.
pub fn gelu_mul(gate: &mut [f32], up: &[f32]) {
    assert_eq!(
        gate.len(),
        up.len(),
        "gelu_mul: one up value per gate value"
    );
    let table = table();
    #[cfg(target_arch = "x86_64")]
    if crate::dispatch::kernels().path.is_x86_simd() {
        // SAFETY: every x86 SIMD table implies AVX2 and F16C; the lengths are checked above.
        unsafe { avx2::gelu_mul(gate, up, table) };
        return;
    }
    gelu_mul_scalar(gate, up, table)
}

/// The reference, value by value.
fn gelu_mul_scalar(gate: &mut [f32], up: &[f32], table: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = *g;
        *g = if x <= -10.0 {
            0.0
        } else if x >= 10.0 {
            x * u
        } else {
            table[usize::from(f16::from_f32(x).to_bits())] * u
        };
    }
}

/// GELU of every f16 value, rounded to f16 and widened back to f32, indexed by the f16 bits.
fn table() -> &'static [f32] {
    static TABLE: std::sync::OnceLock<Vec<f32>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        const SQRT_2_OVER_PI: f32 = 0.797_884_6;
        const COEF_A: f32 = 0.044_715;
        (0..=u16::MAX)
            .map(|bits| {
                let x = f16::from_bits(bits).to_f32();
                // The inner product-and-add fused, as GCC contracts ggml's expression.
                let inner = (COEF_A * x).mul_add(x, 1.0);
                f16::from_f32(0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * inner).tanh())).to_f32()
            })
            .collect()
    })
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// [`super::gelu_mul_scalar`], eight values at a time.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn gelu_mul(gate: &mut [f32], up: &[f32], table: &[f32]) {
        assert_eq!(table.len(), 1 << 16);
        let low = _mm256_set1_ps(-10.0);
        let high = _mm256_set1_ps(10.0);
        let mut g = gate.chunks_exact_mut(8);
        let mut u = up.chunks_exact(8);
        for (g, u) in (&mut g).zip(&mut u) {
            // SAFETY: 8 floats in each chunk, the width of the loads and the store; every
            // gathered index is an f16's bits, below 65536 = table.len() (asserted).
            unsafe {
                let x = _mm256_loadu_ps(g.as_ptr());
                let uv = _mm256_loadu_ps(u.as_ptr());
                let bits = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
                let idx = _mm256_cvtepu16_epi32(bits);
                let looked = _mm256_i32gather_ps::<4>(table.as_ptr(), idx);
                let mid = _mm256_mul_ps(looked, uv);
                let big = _mm256_mul_ps(x, uv);
                // x >= 10: x·u; x <= -10: 0; otherwise the table's value times u.
                let r = _mm256_blendv_ps(mid, big, _mm256_cmp_ps::<_CMP_GE_OQ>(x, high));
                let r = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(x, low), r);
                _mm256_storeu_ps(g.as_mut_ptr(), r);
            }
        }
        super::gelu_mul_scalar(g.into_remainder(), u.remainder(), table);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{random_f32, rng};

    /// The dispatched kernel equals the reference bit for bit: both sides of ±10, on them,
    /// values that round to f16 subnormals or infinities, NaN, and a ragged tail.
    #[test]
    fn simd_equals_the_reference_bit_for_bit() {
        let mut gate = random_f32(&mut rng(9), 1003, 8.0);
        let specials = [
            -10.0,
            10.0,
            -10.5,
            10.5,
            9.999,
            -9.999,
            1e-7,
            -3e-8,
            70000.0,
            -70000.0,
            0.0,
            -0.0,
            f32::NAN,
        ];
        gate[..specials.len()].copy_from_slice(&specials);
        let up = random_f32(&mut rng(10), 1003, 2.0);
        let mut want = gate.clone();
        gelu_mul_scalar(&mut want, &up, table());
        let mut got = gate.clone();
        gelu_mul(&mut got, &up);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want));
        // Something real was compared: GELU(1)·1 is about 0.841.
        let mut one = [1.0f32];
        gelu_mul(&mut one, &[1.0]);
        assert!((one[0] - 0.8413).abs() < 1e-3, "{}", one[0]);
    }
}
