//! Q4_0 weights: 32 elements per block as 4-bit codes around 8 with one f16 scale,
//! `x = (q - 8) * d`. Dotted against Q8_1-style activations.

use super::q8_1::BlockQ8_1;
use crate::block::{f16_to_f32, f32_to_f16, round_to_f16, ByteBlock};

/// ggml's `block_q4_0`: element `j < 16` is `qs[j] & 0xF`, element `j + 16` is `qs[j] >> 4`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockQ4_0 {
    pub d: [u8; 2],
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ4_0>() == 18);
// SAFETY: repr(C), only u8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockQ4_0 {}

pub(crate) const QK: usize = 32;

/// `out.len() == 32 * blocks.len()`.
pub(crate) fn dequantize(blocks: &[BlockQ4_0], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        QK * blocks.len(),
        "q4_0 dequantize: length mismatch"
    );
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        for (j, &q) in b.qs.iter().enumerate() {
            o[j] = (i32::from(q & 0xF) - 8) as f32 * d;
            o[j + 16] = (i32::from(q >> 4) - 8) as f32 * d;
        }
    }
}

/// ggml's rule: the element of largest magnitude maps to code 0 (-8 * d), so its sign picks the
/// sign of `d` and the asymmetric range [-8, 7] is used where it matters.
pub(crate) fn quantize(x: &[f32], out: &mut [BlockQ4_0]) {
    assert_eq!(x.len(), QK * out.len(), "q4_0 quantize: length mismatch");
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let extreme = xb
            .iter()
            .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let d = round_to_f16(extreme / -8.0);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let code = |v: f32| ((v * id).round() + 8.0).clamp(0.0, 15.0) as u8;
        for j in 0..16 {
            b.qs[j] = code(xb[j]) | (code(xb[j + 16]) << 4);
        }
        b.d = f32_to_f16(d);
    }
}

/// Scalar reference dot. Per block: the exact integer `Σ q·a` on unsigned codes, scaled by
/// `d·d_a`; the -8 offset is applied once at the end through the activations' `s = d_a·Σa`.
pub(crate) fn dot_scalar(w: &[BlockQ4_0], a: &[BlockQ8_1]) -> f32 {
    let mut acc = 0.0f32;
    let mut off = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        let d = f16_to_f32(wb.d);
        let mut sumi = 0i32;
        for j in 0..16 {
            sumi += i32::from(wb.qs[j] & 0xF) * i32::from(ab.qs[j]);
            sumi += i32::from(wb.qs[j] >> 4) * i32::from(ab.qs[j + 16]);
        }
        acc += d * ab.d * sumi as f32;
        off += d * ab.s;
    }
    acc - 8.0 * off
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{BlockQ4_0, BlockQ8_1};
    use crate::x86::{f16_to_f32, hsum_ps, load_i8x32, mul_sum_u8_i8, unpack_nibbles_32};

    /// AVX2 twin of [`super::dot_scalar`]: same integer sums, f32 accumulation in 8 lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot(w: &[BlockQ4_0], a: &[BlockQ8_1]) -> f32 {
        // Two accumulators so consecutive blocks' FMAs do not wait on each other.
        let mut acc = [_mm256_setzero_ps(); 2];
        let mut off = 0.0f32;
        for (i, (wb, ab)) in w.iter().zip(a).enumerate() {
            let d = f16_to_f32(wb.d);
            let p = mul_sum_u8_i8(unpack_nibbles_32(&wb.qs), load_i8x32(&ab.qs));
            let k = i & 1;
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d * ab.d), _mm256_cvtepi32_ps(p), acc[k]);
            off += d * ab.s;
        }
        hsum_ps(_mm256_add_ps(acc[0], acc[1])) - 8.0 * off
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    #[test]
    fn dequantize_matches_the_layout() {
        let b = BlockQ4_0 {
            d: f32_to_f16(0.5),
            qs: std::array::from_fn(|j| (j as u8) | (((15 - j) as u8) << 4)),
        };
        let mut out = [0.0f32; 32];
        dequantize(&[b], &mut out);
        for j in 0..16 {
            assert_eq!(out[j], (j as f32 - 8.0) * 0.5);
            assert_eq!(out[j + 16], (7.0 - j as f32) * 0.5);
        }
    }

    #[test]
    fn round_trip_error_within_one_step() {
        let mut r = rng(10);
        let x = random_f32(&mut r, 32 * 64, 1.0);
        let mut q = vec![
            BlockQ4_0 {
                d: [0; 2],
                qs: [0; 16]
            };
            64
        ];
        quantize(&x, &mut q);
        let mut y = vec![0.0; x.len()];
        dequantize(&q, &mut y);
        for (xb, yb) in x.chunks_exact(32).zip(y.chunks_exact(32)) {
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            // Half a step (amax/16) inside the range; a full step (amax/8) for the opposite
            // extreme, which falls just outside [-8, 7]. 1% slack for the f16 scale.
            for (a, b) in xb.iter().zip(yb) {
                assert!((a - b).abs() <= amax / 8.0 * 1.01, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn dot_within_activation_quantization_budget() {
        check_dot_budget_32(
            11,
            |x, n| {
                let mut q = vec![
                    BlockQ4_0 {
                        d: [0; 2],
                        qs: [0; 16]
                    };
                    n
                ];
                quantize(x, &mut q);
                q
            },
            dequantize,
            dot_scalar,
        );
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_matches_scalar() {
        if !crate::dispatch::has_avx2() {
            return;
        }
        let mut r = rng(12);
        for nb in [1, 2, 3, 18, 48, 49] {
            let w: Vec<BlockQ4_0> = (0..nb)
                .map(|_| BlockQ4_0 {
                    d: f32_to_f16(random_f32(&mut r, 1, 0.1)[0]),
                    qs: random_bytes(&mut r),
                })
                .collect();
            let a = random_q8_1(&mut r, nb);
            let terms: f32 = w
                .iter()
                .zip(&a)
                .map(|(wb, ab)| {
                    let d = f16_to_f32(wb.d);
                    (d * ab.d * sumi_u4(&wb.qs, &ab.qs) as f32).abs() + 8.0 * (d * ab.s).abs()
                })
                .sum();
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            let simd = unsafe { avx2::dot(&w, &a) };
            assert_reordered_sum_close(simd, dot_scalar(&w, &a), terms, 2 * nb);
        }
    }
}
