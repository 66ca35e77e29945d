//! Rotary position embedding of one token's heads: each pair `(x0, x1)` turns by its angle,
//! `x0' = x0·cos - x1·sin`, `x1' = x0·sin + x1·cos`, with the first product fused into the
//! add (`fma(x0, cos, -(x1·sin))`, `fma(x0, sin, x1·cos)`), as llama.cpp's compiled C rounds
//! it (GCC contracts those statements), so the rotated bits agree with it.
//!
//! A scalar reference and an AVX2+FMA twin doing the very same operations per pair, so the
//! same bits; without the FMA instruction the scalar `mul_add` is a libm call per value (it
//! was 3% of a prompt's time on x86).

/// Where a head keeps a pair: adjacent values (Llama's GGUF layout), or `i` and `i + d/2`
/// (NeoX's: Gemma 3, Qwen3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairLayout {
    Adjacent,
    NeoX,
}

/// Rotates every head of `row` (heads of `head_dim` values, one after another) by the angles
/// whose cosines and sines are `cos` and `sin`, one per rotated pair: the first
/// `2 * cos.len()` values of each head turn, the rest stay.
///
/// # Panics
/// If `row` is not whole heads, or `cos` and `sin` differ in length or hold more pairs than
/// a head: shapes are the caller's to get right.
pub fn rope(row: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32], layout: PairLayout) {
    let half = cos.len();
    assert!(
        head_dim > 0 && row.len().is_multiple_of(head_dim),
        "rope: whole heads"
    );
    assert!(
        sin.len() == half && 2 * half <= head_dim,
        "rope: one angle per pair"
    );
    #[cfg(target_arch = "x86_64")]
    if crate::dispatch::kernels().path.is_x86_simd() && half.is_multiple_of(8) {
        // SAFETY: every x86 SIMD table implies AVX2 and FMA; the shapes are checked above.
        unsafe { avx2::rope(row, head_dim, cos, sin, layout) };
        return;
    }
    rope_scalar(row, head_dim, cos, sin, layout)
}

/// The reference: pair by pair.
pub(crate) fn rope_scalar(
    row: &mut [f32],
    head_dim: usize,
    cos: &[f32],
    sin: &[f32],
    layout: PairLayout,
) {
    let half = cos.len();
    for head in row.chunks_exact_mut(head_dim) {
        for i in 0..half {
            let (a, b) = match layout {
                PairLayout::Adjacent => (2 * i, 2 * i + 1),
                PairLayout::NeoX => (i, i + half),
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0.mul_add(cos[i], -(x1 * sin[i]));
            head[b] = x0.mul_add(sin[i], x1 * cos[i]);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::PairLayout;

    /// [`super::rope_scalar`], eight pairs at a time (`cos.len()` is a multiple of 8).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn rope(
        row: &mut [f32],
        head_dim: usize,
        cos: &[f32],
        sin: &[f32],
        layout: PairLayout,
    ) {
        let half = cos.len();
        // Each of four pairs' angle twice, for a register of adjacent pairs.
        let first = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
        let second = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
        for head in row.chunks_exact_mut(head_dim) {
            let p = head.as_mut_ptr();
            for i in (0..half).step_by(8) {
                // SAFETY: i + 8 <= half = cos.len() = sin.len(), and 2·half <= head_dim, so
                // every load and store stays within this head (2i + 16 <= head_dim and
                // i + half + 8 <= head_dim).
                unsafe {
                    let c = _mm256_loadu_ps(cos.as_ptr().add(i));
                    let s = _mm256_loadu_ps(sin.as_ptr().add(i));
                    match layout {
                        PairLayout::NeoX => {
                            let x0 = _mm256_loadu_ps(p.add(i));
                            let x1 = _mm256_loadu_ps(p.add(i + half));
                            let r0 = _mm256_fmadd_ps(x0, c, neg(_mm256_mul_ps(x1, s)));
                            let r1 = _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c));
                            _mm256_storeu_ps(p.add(i), r0);
                            _mm256_storeu_ps(p.add(i + half), r1);
                        }
                        PairLayout::Adjacent => {
                            for (j, idx) in [(0, first), (8, second)] {
                                let at = p.add(2 * i + j);
                                // x0 x1 x0 x1 ..., and the same swapped: x1 x0 x1 x0 ...
                                let v = _mm256_loadu_ps(at);
                                let w = _mm256_permute_ps::<0b10_11_00_01>(v);
                                let cc = _mm256_permutevar8x32_ps(c, idx);
                                let ss = _mm256_permutevar8x32_ps(s, idx);
                                // Even lanes x0·c - x1·s, odd lanes x0·s + x1·c.
                                let even = _mm256_fmadd_ps(v, cc, neg(_mm256_mul_ps(w, ss)));
                                let odd = _mm256_fmadd_ps(w, ss, _mm256_mul_ps(v, cc));
                                _mm256_storeu_ps(at, _mm256_blend_ps::<0b1010_1010>(even, odd));
                            }
                        }
                    }
                }
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn neg(x: __m256) -> __m256 {
        _mm256_xor_ps(x, _mm256_set1_ps(-0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{random_f32, rng};

    /// The dispatched kernel equals the reference bit for bit, both layouts, rotating whole
    /// heads and part of each (as partial rotary embeddings do).
    #[test]
    fn simd_equals_the_reference_bit_for_bit() {
        for (head_dim, pairs) in [(64, 32), (128, 64), (256, 128), (64, 16), (40, 20)] {
            for layout in [PairLayout::Adjacent, PairLayout::NeoX] {
                let mut r = rng(head_dim as u64 + pairs as u64);
                let x = random_f32(&mut r, 3 * head_dim, 4.0);
                let angles = random_f32(&mut r, pairs, 40.0);
                let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
                let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
                let mut want = x.clone();
                rope_scalar(&mut want, head_dim, &cos, &sin, layout);
                let mut got = x.clone();
                rope(&mut got, head_dim, &cos, &sin, layout);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{layout:?}, {head_dim}, {pairs} pairs"
                );
                assert_ne!(bits(&got), bits(&x), "something turned");
                #[cfg(target_arch = "x86_64")]
                if pairs.is_multiple_of(8) && crate::required::test_needs("avx2") {
                    let mut simd = x.clone();
                    // SAFETY: detected by `test_needs`; shapes as `rope` checks them.
                    unsafe { avx2::rope(&mut simd, head_dim, &cos, &sin, layout) };
                    assert_eq!(bits(&simd), bits(&want), "avx2 {layout:?}, {head_dim}");
                }
            }
        }
    }

    /// The pair layouts differ: a check that the test above compares something real.
    #[test]
    fn the_layouts_rotate_different_pairs() {
        let x: Vec<f32> = (0..16).map(|i| i as f32).collect();
        let (cos, sin) = (vec![0.0; 8], vec![1.0; 8]);
        let mut a = x.clone();
        rope_scalar(&mut a, 16, &cos, &sin, PairLayout::Adjacent);
        assert_eq!(&a[..4], &[-1.0, 0.0, -3.0, 2.0]);
        let mut n = x.clone();
        rope_scalar(&mut n, 16, &cos, &sin, PairLayout::NeoX);
        assert_eq!((n[0], n[8]), (-8.0, 0.0));
    }
}
