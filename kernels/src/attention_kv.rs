//! The one path attention takes over a quantized kv cache, generic over the cache's block
//! format ([`KvBlock`]: Q8_0 in [`crate::attention_q8`], Q4_0 in [`crate::attention_q4`]). A
//! format says only how a block's 32 codes read as signed integers (scalar, AVX2 and NEON);
//! the order of every sum lives here once, so both formats give the scalar reference's bits:
//! - Scores: each 32-block's dot with the query's Q8_0 block is an exact i32, and the blocks
//!   are combined in f32 in block order, `acc += (d_k * d_q) * sumi`, then times `scale`.
//! - Values: `out[d] += (p_j * d_j) * code_j[d]` over positions in order, each step one fused
//!   multiply-add.

#[cfg(target_arch = "aarch64")]
use std::arch::aarch64::int8x16_t;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::__m256i;

use crate::attention_q8::KvBlockQ8_0;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use crate::dispatch::kernels;

/// Values per block, in every kv format.
pub(crate) const KV_BLOCK: usize = 32;

/// A kv cache block: an f16 scale and 32 codes that read as small signed integers.
pub(crate) trait KvBlock: Copy {
    /// The format's name, in panic messages.
    const NAME: &'static str;

    /// The block's scale as f32.
    fn scale(&self) -> f32;

    /// The 32 codes as signed integers, in value order (the scalar reference's view).
    fn codes(&self) -> [i32; KV_BLOCK];

    /// [`KvBlock::codes`] as signed bytes, in value order.
    ///
    /// # Safety
    /// The CPU must have avx2, fma and f16c.
    #[cfg(target_arch = "x86_64")]
    unsafe fn codes_avx2(&self) -> __m256i;

    /// [`KvBlock::codes`] as two vectors of signed bytes: values 0..16, then 16..32.
    ///
    /// # Safety
    /// The CPU must have neon.
    #[cfg(target_arch = "aarch64")]
    unsafe fn codes_neon(&self) -> (int8x16_t, int8x16_t);
}

/// `scores[p] = scale * dot(q, row p)` where row p is `cache[p * stride + offset ..][..q.len()]`
/// (in blocks) and `q` is the query head quantized to Q8_0.
///
/// # Panics
/// If a row's blocks would run past `cache`.
pub(crate) fn dot_rows<B: KvBlock>(
    q: &[KvBlockQ8_0],
    cache: &[B],
    stride: usize,
    offset: usize,
    scale: f32,
    scores: &mut [f32],
) {
    check_rows::<B>(cache.len(), stride, offset, q.len(), scores.len());
    #[cfg(target_arch = "x86_64")]
    if kernels().path.is_x86_simd() {
        // SAFETY: an x86 SIMD table is only selected after detecting avx2+fma+f16c; every row's
        // blocks were checked to lie inside `cache` above.
        unsafe { avx2::dot_rows(q, cache, stride, offset, scale, scores) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    if kernels().path.is_neon() {
        // SAFETY: the NEON tables are only selected after detecting neon; rows checked above.
        unsafe { neon::dot_rows(q, cache, stride, offset, scale, scores) };
        return;
    }
    dot_rows_scalar(q, cache, stride, offset, scale, scores);
}

/// `out = Σ_p probs[p] * dequantized row p` (rows as in [`dot_rows`], `out.len() / 32`
/// blocks wide).
///
/// # Panics
/// If `out.len()` is not a multiple of 32 or a row would run past `cache`.
pub(crate) fn weighted_sum_rows<B: KvBlock>(
    probs: &[f32],
    cache: &[B],
    stride: usize,
    offset: usize,
    out: &mut [f32],
) {
    assert!(
        out.len().is_multiple_of(KV_BLOCK),
        "{} weighted sum: {} outputs is not whole blocks",
        B::NAME,
        out.len()
    );
    check_rows::<B>(
        cache.len(),
        stride,
        offset,
        out.len() / KV_BLOCK,
        probs.len(),
    );
    out.fill(0.0);
    #[cfg(target_arch = "x86_64")]
    if kernels().path.is_x86_simd() {
        // SAFETY: as in `dot_rows`.
        unsafe { avx2::weighted_sum_rows(probs, cache, stride, offset, out) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    if kernels().path.is_neon() {
        // SAFETY: as in `dot_rows`.
        unsafe { neon::weighted_sum_rows(probs, cache, stride, offset, out) };
        return;
    }
    weighted_sum_rows_scalar(probs, cache, stride, offset, out);
}

fn check_rows<B: KvBlock>(len: usize, stride: usize, offset: usize, width: usize, rows: usize) {
    if rows > 0 {
        let end = (rows - 1) * stride + offset + width;
        assert!(
            end <= len,
            "{} attention rows: {rows} rows of {width} blocks at offset {offset}, stride {stride}, run past a cache of {len}",
            B::NAME
        );
    }
}

/// The reference every SIMD path equals bit for bit.
pub(crate) fn dot_rows_scalar<B: KvBlock>(
    q: &[KvBlockQ8_0],
    cache: &[B],
    stride: usize,
    offset: usize,
    scale: f32,
    scores: &mut [f32],
) {
    let nb = q.len();
    for (p, s) in scores.iter_mut().enumerate() {
        let k = &cache[p * stride + offset..p * stride + offset + nb];
        let mut acc = 0.0f32;
        for (kb, qb) in k.iter().zip(q) {
            let sumi: i32 = kb
                .codes()
                .iter()
                .zip(&qb.qs)
                .map(|(&a, &b)| a * i32::from(b))
                .sum();
            acc += (kb.scale() * qb.d.to_f32()) * sumi as f32;
        }
        *s = acc * scale;
    }
}

/// The reference every SIMD path equals bit for bit.
pub(crate) fn weighted_sum_rows_scalar<B: KvBlock>(
    probs: &[f32],
    cache: &[B],
    stride: usize,
    offset: usize,
    out: &mut [f32],
) {
    let nb = out.len() / KV_BLOCK;
    for (p, &prob) in probs.iter().enumerate() {
        let v = &cache[p * stride + offset..p * stride + offset + nb];
        for (vb, o) in v.iter().zip(out.chunks_exact_mut(KV_BLOCK)) {
            let w = prob * vb.scale();
            for (o, &q) in o.iter_mut().zip(&vb.codes()) {
                *o = w.mul_add(q as f32, *o);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{KvBlock, KV_BLOCK};
    use crate::attention_q8::KvBlockQ8_0;
    use crate::x86::{hsum_epi32, load_i8x32, mul_sum_i8_i8};

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot_rows<B: KvBlock>(
        q: &[KvBlockQ8_0],
        cache: &[B],
        stride: usize,
        offset: usize,
        scale: f32,
        scores: &mut [f32],
    ) {
        let nb = q.len();
        for (p, s) in scores.iter_mut().enumerate() {
            let k = &cache[p * stride + offset..p * stride + offset + nb];
            let mut acc = 0.0f32;
            for (kb, qb) in k.iter().zip(q) {
                // SAFETY: this function's features are the ones `codes_avx2` needs.
                let codes = unsafe { kb.codes_avx2() };
                // Codes within ±127 (Q8_0) or [-8, 7] (Q4_0) against query codes within ±127:
                // the bounds `mul_sum_i8_i8` needs.
                let sumi = hsum_epi32(mul_sum_i8_i8(codes, load_i8x32(&qb.qs)));
                acc += (kb.scale() * qb.d.to_f32()) * sumi as f32;
            }
            *s = acc * scale;
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn weighted_sum_rows<B: KvBlock>(
        probs: &[f32],
        cache: &[B],
        stride: usize,
        offset: usize,
        out: &mut [f32],
    ) {
        let nb = out.len() / KV_BLOCK;
        for (p, &prob) in probs.iter().enumerate() {
            let v = &cache[p * stride + offset..p * stride + offset + nb];
            for (vb, o) in v.iter().zip(out.chunks_exact_mut(KV_BLOCK)) {
                let w = _mm256_set1_ps(prob * vb.scale());
                // SAFETY: this function's features are the ones `codes_avx2` needs.
                let codes = unsafe { vb.codes_avx2() };
                let lo = _mm256_castsi256_si128(codes);
                let hi = _mm256_extracti128_si256::<1>(codes);
                let parts = [
                    _mm256_cvtepi8_epi32(lo),
                    _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(lo, lo)),
                    _mm256_cvtepi8_epi32(hi),
                    _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(hi, hi)),
                ];
                for (i, part) in parts.into_iter().enumerate() {
                    // SAFETY: 8i + 8 <= 32 = o.len().
                    unsafe {
                        let ptr = o.as_mut_ptr().add(8 * i);
                        let a = _mm256_fmadd_ps(w, _mm256_cvtepi32_ps(part), _mm256_loadu_ps(ptr));
                        _mm256_storeu_ps(ptr, a);
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon {
    use std::arch::aarch64::*;

    use super::{KvBlock, KV_BLOCK};
    use crate::attention_q8::KvBlockQ8_0;
    use crate::neon::{load_i8x32, sum_i8x32};

    #[target_feature(enable = "neon")]
    pub(crate) fn dot_rows<B: KvBlock>(
        q: &[KvBlockQ8_0],
        cache: &[B],
        stride: usize,
        offset: usize,
        scale: f32,
        scores: &mut [f32],
    ) {
        let nb = q.len();
        for (p, s) in scores.iter_mut().enumerate() {
            let k = &cache[p * stride + offset..p * stride + offset + nb];
            let mut acc = 0.0f32;
            for (kb, qb) in k.iter().zip(q) {
                // SAFETY: this function's features are the ones `codes_neon` needs.
                let codes = unsafe { kb.codes_neon() };
                let sumi = sum_i8x32(codes, load_i8x32(&qb.qs));
                acc += (kb.scale() * qb.d.to_f32()) * sumi as f32;
            }
            *s = acc * scale;
        }
    }

    /// Eight codes widened to two f32x4.
    #[inline]
    #[target_feature(enable = "neon")]
    fn widen8(c: int8x8_t) -> (float32x4_t, float32x4_t) {
        let h = vmovl_s8(c);
        (
            vcvtq_f32_s32(vmovl_s16(vget_low_s16(h))),
            vcvtq_f32_s32(vmovl_high_s16(h)),
        )
    }

    #[target_feature(enable = "neon")]
    pub(crate) fn weighted_sum_rows<B: KvBlock>(
        probs: &[f32],
        cache: &[B],
        stride: usize,
        offset: usize,
        out: &mut [f32],
    ) {
        let nb = out.len() / KV_BLOCK;
        for (p, &prob) in probs.iter().enumerate() {
            let v = &cache[p * stride + offset..p * stride + offset + nb];
            for (vb, o) in v.iter().zip(out.chunks_exact_mut(KV_BLOCK)) {
                let w = vdupq_n_f32(prob * vb.scale());
                // SAFETY: this function's features are the ones `codes_neon` needs.
                let (c0, c1) = unsafe { vb.codes_neon() };
                let eights = [
                    vget_low_s8(c0),
                    vget_high_s8(c0),
                    vget_low_s8(c1),
                    vget_high_s8(c1),
                ];
                for (i, c) in eights.into_iter().enumerate() {
                    let (a, b) = widen8(c);
                    // SAFETY: 8i + 8 <= 32 = o.len(); each access reads or writes 4 floats.
                    unsafe {
                        let ptr = o.as_mut_ptr().add(8 * i);
                        vst1q_f32(ptr, vfmaq_f32(vld1q_f32(ptr), a, w));
                        let ptr = ptr.add(4);
                        vst1q_f32(ptr, vfmaq_f32(vld1q_f32(ptr), b, w));
                    }
                }
            }
        }
    }
}
