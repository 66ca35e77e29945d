//! Q8_K activation blocks: 256 activations with one f32 scale and i16 sums per 16, the partner
//! format for Q4_K and Q6_K weights. The per-16 sums let the K-quant dots apply Q4_K's sub-block
//! minimums and Q6_K's -32 offset with a handful of integer multiplies per super-block.

use super::q8_1::act_scale;

/// 256 activations as `x ≈ d * q`; `bsums[i] = Σ qs[16i .. 16i+16]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BlockQ8K {
    pub d: f32,
    /// 8 groups of 32 so SIMD code can take 32-byte chunks without slicing.
    pub qs: [[i8; 32]; 8],
    pub bsums: [i16; 16],
}
const _: () = assert!(size_of::<BlockQ8K>() == 292);

pub(crate) const QK: usize = 256;

impl BlockQ8K {
    /// Code number `i` (0..256).
    #[inline]
    pub(crate) fn q(&self, i: usize) -> i32 {
        i32::from(self.qs[i / 32][i % 32])
    }
}

/// Scalar reference: `x.len() == 256 * out.len()`. Same scale rule and rounding (half to even)
/// as the 32-element activation blocks, so scalar and SIMD agree bit for bit.
pub(crate) fn quantize_scalar(x: &[f32], out: &mut [BlockQ8K]) {
    assert_eq!(x.len(), QK * out.len(), "q8_k quantize: length mismatch");
    for (xb, ob) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let (d, id) = act_scale(amax);
        for (g, group) in xb.chunks_exact(32).enumerate() {
            for (q, &v) in ob.qs[g].iter_mut().zip(group) {
                *q = (v * id).round_ties_even() as i32 as i8;
            }
        }
        let qs = ob.qs;
        for (i, s) in ob.bsums.iter_mut().enumerate() {
            // Sums of 16 codes are within ±16·127, well inside i16.
            *s = qs[i / 2][16 * (i % 2)..16 * (i % 2) + 16]
                .iter()
                .map(|&q| i32::from(q))
                .sum::<i32>() as i16;
        }
        ob.d = d;
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{act_scale, BlockQ8K, QK};
    use crate::formats::q8_1::avx2::{amax_32, quantize_32};

    /// AVX2 twin of [`super::quantize_scalar`], bit-identical to it for finite input.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn quantize(x: &[f32], out: &mut [BlockQ8K]) {
        assert_eq!(x.len(), QK * out.len(), "q8_k quantize: length mismatch");
        for (xb, ob) in x.chunks_exact(QK).zip(out.iter_mut()) {
            let groups = xb
                .chunks_exact(32)
                .map(|g| <&[f32; 32]>::try_from(g).expect("256 = 8 x 32"));
            let amax = groups.clone().fold(0.0f32, |m, g| m.max(amax_32(g)));
            let (d, id) = act_scale(amax);
            for (g, group) in groups.enumerate() {
                let (q, lo, hi) = quantize_32(group, id);
                // SAFETY: `ob.qs[g]` is 32 writable bytes, the width of an unaligned store.
                unsafe { _mm256_storeu_si256(ob.qs[g].as_mut_ptr().cast(), q) };
                // Each sum of 16 codes is within ±16*127, well inside i16.
                ob.bsums[2 * g] = lo as i16;
                ob.bsums[2 * g + 1] = hi as i16;
            }
            ob.d = d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{random_f32, rng};

    #[test]
    fn block_sums_and_error_bound() {
        let mut r = rng(3);
        let x = random_f32(&mut r, 256 * 5, 2.0);
        let mut q = vec![BlockQ8K::default(); 5];
        quantize_scalar(&x, &mut q);
        for (xb, b) in x.chunks_exact(256).zip(&q) {
            for (j, &v) in xb.iter().enumerate() {
                assert!((v - b.d * b.q(j) as f32).abs() <= b.d * 0.5001);
            }
            for i in 0..16 {
                let s: i32 = (16 * i..16 * i + 16).map(|j| b.q(j)).sum();
                assert_eq!(i32::from(b.bsums[i]), s);
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_is_bit_identical_to_scalar() {
        if !crate::dispatch::has_avx2() {
            return;
        }
        let mut r = rng(4);
        let x = random_f32(&mut r, 256 * 7, 5.0);
        let mut a = vec![BlockQ8K::default(); 7];
        let mut b = vec![BlockQ8K::default(); 7];
        quantize_scalar(&x, &mut a);
        // SAFETY: guarded by the avx2+fma+f16c detection above.
        unsafe { avx2::quantize(&x, &mut b) };
        for (p, q) in a.iter().zip(&b) {
            assert_eq!(p.qs, q.qs);
            assert_eq!(p.bsums, q.bsums);
            assert_eq!(p.d.to_bits(), q.d.to_bits());
        }
    }
}
