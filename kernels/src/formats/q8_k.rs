//! Q8_K activation blocks: 256 activations with one f32 scale and i16 sums per 16, the partner
//! format for Q4_K and Q6_K weights. The per-16 sums let the K-quant dots apply Q4_K's sub-block
//! minimums and Q6_K's -32 offset with a handful of integer multiplies per super-block.
//!
//! The scale rule is ggml's (`quantize_row_q8_K_ref`, which its x86 build also uses): the
//! element of largest magnitude (the first, on ties) maps to -127, `d = 1 / iscale`. Matching it
//! makes our blocks identical to ggml's, so with ggml's lane order in the AVX2 dots a K-quant
//! matmul row equals llama.cpp's bit for bit on x86.

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

/// Blocks whose largest magnitude is below this quantize to zero: `-127 / max` would overflow
/// to infinity for subnormal maxima. (ggml only special-cases exact zero.)
const MIN_AMAX: f32 = 1e-30;

/// The element of largest magnitude, the first one on ties, as ggml picks it; 0.0 for a block
/// that quantizes to zero. (The quantizers reach it through [`block_max`].)
#[cfg(test)]
pub(crate) fn signed_max(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax >= MIN_AMAX && amax.is_finite() {
        max
    } else {
        0.0
    }
}

/// The largest magnitude, positive if it occurs positive anywhere in `x`: the rule of ggml's
/// AVX2 `ggml_quantize_mat_q8_K_4x8` (the activations of its repacked Q4_K gemm), which differs
/// from [`signed_max`] only when both `+amax` and `-amax` occur and the negative comes first.
/// `amax` is the block's largest magnitude as the caller found it.
#[inline]
pub(crate) fn positive_tie_max(x: &[f32], amax: f32) -> f32 {
    if !(amax >= MIN_AMAX && amax.is_finite()) {
        0.0
    } else if x.contains(&amax) {
        amax
    } else {
        -amax
    }
}

/// Which element of largest magnitude sets a block's sign (see [`positive_tie_max`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ties {
    /// The first one, as `quantize_row_q8_K` (every K-quant dot and ggml's repacked gemv).
    First,
    /// A positive one if any, as `ggml_quantize_mat_q8_K_4x8` (ggml's repacked Q4_K gemm).
    Positive,
}

/// The block maximum `quantize` scales by, under `ties`.
#[inline]
fn block_max(x: &[f32], amax: f32, ties: Ties) -> f32 {
    match ties {
        Ties::First if amax >= MIN_AMAX && amax.is_finite() => {
            x.iter().copied().find(|v| v.abs() == amax).unwrap_or(0.0)
        }
        Ties::First => 0.0,
        Ties::Positive => positive_tie_max(x, amax),
    }
}

/// Per-16 sums of the codes (each within ±16·127, well inside i16).
#[inline]
pub(crate) fn block_sums(qs: &[[i8; 32]; 8]) -> [i16; 16] {
    std::array::from_fn(|i| {
        qs[i / 2][16 * (i % 2)..16 * (i % 2) + 16]
            .iter()
            .map(|&q| i32::from(q))
            .sum::<i32>() as i16
    })
}

/// Scalar reference: `x.len() == 256 * out.len()`. Codes are `iscale·x` rounded half to even
/// (ggml's `nearest_int`), which the SIMD paths reproduce exactly.
pub(crate) fn quantize_scalar(x: &[f32], out: &mut [BlockQ8K]) {
    quantize_scalar_ties(x, out, Ties::First)
}

/// [`quantize_scalar`] with ggml's 4-row gemm quantizer's sign rule ([`Ties::Positive`]).
pub(crate) fn quantize_4x8_scalar(x: &[f32], out: &mut [BlockQ8K]) {
    quantize_scalar_ties(x, out, Ties::Positive)
}

fn quantize_scalar_ties(x: &[f32], out: &mut [BlockQ8K], ties: Ties) {
    assert_eq!(x.len(), QK * out.len(), "q8_k quantize: length mismatch");
    for (xb, ob) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let max = block_max(xb, amax, ties);
        if max == 0.0 {
            *ob = BlockQ8K::default();
            continue;
        }
        let iscale = -127.0 / max;
        for (g, group) in xb.chunks_exact(32).enumerate() {
            for (q, &v) in ob.qs[g].iter_mut().zip(group) {
                // |iscale·v| <= 127 (plus rounding), so the cast never saturates.
                *q = (iscale * v).round_ties_even() as i32 as i8;
            }
        }
        ob.bsums = block_sums(&ob.qs);
        ob.d = 1.0 / iscale;
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{block_max, BlockQ8K, Ties, QK};
    use crate::formats::q8_1::avx2::{amax_32, quantize_32};

    /// AVX2 twin of [`super::quantize_scalar`], bit-identical to it for finite input.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn quantize(x: &[f32], out: &mut [BlockQ8K]) {
        quantize_ties(x, out, Ties::First)
    }

    /// AVX2 twin of [`super::quantize_4x8_scalar`], bit-identical to it for finite input.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn quantize_4x8(x: &[f32], out: &mut [BlockQ8K]) {
        quantize_ties(x, out, Ties::Positive)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn quantize_ties(x: &[f32], out: &mut [BlockQ8K], ties: Ties) {
        assert_eq!(x.len(), QK * out.len(), "q8_k quantize: length mismatch");
        for (xb, ob) in x.chunks_exact(QK).zip(out.iter_mut()) {
            let groups = xb
                .chunks_exact(32)
                .map(|g| <&[f32; 32]>::try_from(g).expect("256 = 8 x 32"));
            // The vector max finds the magnitude; a scan finds the sign `ties` asks for.
            let amax = groups.clone().fold(0.0f32, |m, g| m.max(amax_32(g)));
            let max = block_max(xb, amax, ties);
            if max == 0.0 {
                *ob = BlockQ8K::default();
                continue;
            }
            let iscale = -127.0 / max;
            for (g, group) in groups.enumerate() {
                let (q, lo, hi) = quantize_32(group, iscale);
                // SAFETY: `ob.qs[g]` is 32 writable bytes, the width of an unaligned store.
                unsafe { _mm256_storeu_si256(ob.qs[g].as_mut_ptr().cast(), q) };
                // Each sum of 16 codes is within ±16·127, well inside i16.
                ob.bsums[2 * g] = lo as i16;
                ob.bsums[2 * g + 1] = hi as i16;
            }
            ob.d = 1.0 / iscale;
        }
    }
}

/// Q8_K activations laid out for the 512-bit row dots of Q2_K, Q3_K and IQ4_XS (decode), once
/// per matmul, on the stack.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;

    use super::BlockQ8K;

    /// Super-blocks a row may have for the prepared path (rows of up to 16,384 elements):
    /// the prepared activations live on the stack, 32 KiB at most.
    pub(crate) const MAX_BLOCKS: usize = 64;

    /// A layout of one super-block's activations.
    pub(crate) trait Prepared: Sized {
        /// # Safety
        /// The CPU must have AVX-512 F, VL, BW and VNNI.
        unsafe fn prepare(ab: &BlockQ8K) -> Self;
    }

    /// For Q2_K and Q3_K, which keep 32-element chunks c and c + 4 in one 64-byte run of bit
    /// planes: `pairs[c]` holds chunks c and c + 4 (c < 4) side by side; `neg4[c]` minus four
    /// times each four-element sum of `pairs[c]`, lane by lane (what a code biased by +4 adds).
    #[repr(C, align(64))]
    pub(crate) struct ChunkPairs {
        pub pairs: [[i8; 64]; 4],
        pub neg4: [[i32; 16]; 4],
    }

    impl Prepared for ChunkPairs {
        unsafe fn prepare(ab: &BlockQ8K) -> Self {
            let mut p = ChunkPairs {
                pairs: [[0; 64]; 4],
                neg4: [[0; 16]; 4],
            };
            for c in 0..4 {
                p.pairs[c][..32].copy_from_slice(&ab.qs[c]);
                p.pairs[c][32..].copy_from_slice(&ab.qs[c + 4]);
                // SAFETY: the caller guarantees the features.
                p.neg4[c] = unsafe { neg_quad_sums::<4>(&p.pairs[c]) };
            }
            p
        }
    }

    /// For IQ4_XS, whose values are stored plus 128: `neg128[k]` minus 128 times each
    /// four-element sum of the 64 activations from `64k` on, lane by lane.
    #[repr(C, align(64))]
    pub(crate) struct Neg128 {
        pub neg128: [[i32; 16]; 4],
    }

    impl Prepared for Neg128 {
        unsafe fn prepare(ab: &BlockQ8K) -> Self {
            let mut p = Neg128 {
                neg128: [[0; 16]; 4],
            };
            for (k, n) in p.neg128.iter_mut().enumerate() {
                let bytes: [i8; 64] = std::array::from_fn(|i| ab.qs[2 * k + i / 32][i % 32]);
                // SAFETY: the caller guarantees the features.
                *n = unsafe { neg_quad_sums::<128>(&bytes) };
            }
            p
        }
    }

    /// Minus `SCALE` times each four-byte sum of `x`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    fn neg_quad_sums<const SCALE: i32>(x: &[i8; 64]) -> [i32; 16] {
        // SAFETY: 64 readable bytes, the width of the load.
        let x = unsafe { _mm512_loadu_si512(x.as_ptr().cast()) };
        let sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), x);
        let neg = _mm512_mullo_epi32(sums, _mm512_set1_epi32(-SCALE));
        let mut out = [0; 16];
        // SAFETY: 16 writable i32, the width of the store.
        unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), neg) };
        out
    }

    /// Rows of `w` (each `a.len()` blocks) against the one token `a`, one per `out` entry:
    /// `dot(row, a, prepared)` on `a` prepared once (one `T` per block), or, for rows longer
    /// than [`MAX_BLOCKS`], `fallback(row, a)`, which must give the same bits.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn prepared_rows<W, T: Prepared>(
        w: &[W],
        a: &[BlockQ8K],
        out: &mut [f32],
        dot: impl Fn(&[W], &[BlockQ8K], &[T]) -> f32,
        fallback: impl Fn(&[W], &[BlockQ8K]) -> f32,
    ) {
        let nb = a.len();
        if nb > MAX_BLOCKS {
            crate::formats::each_row(fallback, w, a, out);
            return;
        }
        let mut buf: [MaybeUninit<T>; MAX_BLOCKS] = [const { MaybeUninit::uninit() }; MAX_BLOCKS];
        for (ab, slot) in a.iter().zip(buf.iter_mut()) {
            // SAFETY: this function's features are `prepare`'s.
            slot.write(unsafe { T::prepare(ab) });
        }
        // SAFETY: the first `a.len()` slots were written just above, and `MaybeUninit<T>` has
        // `T`'s layout.
        let ready = unsafe { &*(&raw const buf[..nb] as *const [T]) };
        for (o, row) in out.iter_mut().zip(w.chunks_exact(nb.max(1))) {
            *o = dot(row, a, ready);
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon {
    use super::{block_max, BlockQ8K, Ties, QK};
    use crate::formats::q8_1::neon::quantize_32;

    /// NEON twin of [`super::quantize_scalar`], bit-identical to it for finite input.
    #[target_feature(enable = "neon")]
    pub(crate) fn quantize(x: &[f32], out: &mut [BlockQ8K]) {
        quantize_ties(x, out, Ties::First)
    }

    /// NEON twin of [`super::quantize_4x8_scalar`], bit-identical to it for finite input.
    #[target_feature(enable = "neon")]
    pub(crate) fn quantize_4x8(x: &[f32], out: &mut [BlockQ8K]) {
        quantize_ties(x, out, Ties::Positive)
    }

    #[inline]
    #[target_feature(enable = "neon")]
    fn quantize_ties(x: &[f32], out: &mut [BlockQ8K], ties: Ties) {
        assert_eq!(x.len(), QK * out.len(), "q8_k quantize: length mismatch");
        for (xb, ob) in x.chunks_exact(QK).zip(out.iter_mut()) {
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let max = block_max(xb, amax, ties);
            if max == 0.0 {
                *ob = BlockQ8K::default();
                continue;
            }
            let iscale = -127.0 / max;
            for (g, group) in xb.chunks_exact(32).enumerate() {
                let group = <&[f32; 32]>::try_from(group).expect("256 = 8 x 32");
                let (lo, hi) = quantize_32(group, iscale, &mut ob.qs[g]);
                // Each sum of 16 codes is within ±16·127, well inside i16.
                ob.bsums[2 * g] = lo as i16;
                ob.bsums[2 * g + 1] = hi as i16;
            }
            ob.d = 1.0 / iscale;
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
            let max = signed_max(xb);
            assert_eq!(b.q(xb.iter().position(|&v| v == max).unwrap()), -127);
            for (j, &v) in xb.iter().enumerate() {
                assert!((v - b.d * b.q(j) as f32).abs() <= b.d.abs() * 0.5001);
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
        if !crate::required::test_needs("avx2") {
            return;
        }
        let mut r = rng(4);
        let mut x = random_f32(&mut r, 256 * 7, 5.0);
        // A NaN is skipped by the scale and coded 0; an infinity zeroes its block; ties of
        // magnitude resolve to the first element.
        x[10] = f32::NAN;
        x[300] = f32::NEG_INFINITY;
        x[600] = 50.0;
        x[601] = -50.0;
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

    /// The 4-row gemm quantizer's rule: a magnitude that occurs with both signs scales as the
    /// positive one, wherever it is; without such a tie (block 1 here) the two rules agree. Every SIMD twin equals the
    /// scalar one.
    #[test]
    fn the_4x8_rule_prefers_a_positive_maximum() {
        let mut x = random_f32(&mut rng(8), 256 * 3, 1.0);
        x[5] = -30.0;
        x[200] = 30.0;
        let mut first = vec![BlockQ8K::default(); 3];
        let mut pos = vec![BlockQ8K::default(); 3];
        quantize_scalar(&x, &mut first);
        quantize_4x8_scalar(&x, &mut pos);
        assert_eq!(first[0].q(5), -127);
        assert_eq!(pos[0].q(200), -127);
        assert_eq!(pos[0].q(5), 127);
        assert_eq!(format!("{:?}", &first[1]), format!("{:?}", &pos[1]));
        let mut simd = vec![BlockQ8K::default(); 3];
        #[cfg(target_arch = "x86_64")]
        if crate::required::test_needs("avx2") {
            // SAFETY: AVX2, FMA and F16C were just detected.
            unsafe { avx2::quantize_4x8(&x, &mut simd) };
            assert_eq!(format!("{simd:?}"), format!("{pos:?}"));
        }
        #[cfg(target_arch = "aarch64")]
        {
            // SAFETY: NEON is part of the aarch64 baseline.
            unsafe { neon::quantize_4x8(&x, &mut simd) };
            assert_eq!(format!("{simd:?}"), format!("{pos:?}"));
        }
        let _ = &mut simd;
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_is_bit_identical_to_scalar() {
        let mut r = rng(6);
        let n = 7;
        let mut x = random_f32(&mut r, QK * n, 5.0);
        x[10] = f32::NAN;
        x[300] = f32::INFINITY;
        let mut a = vec![BlockQ8K::default(); n];
        let mut b = vec![BlockQ8K::default(); n];
        quantize_scalar(&x, &mut a);
        // SAFETY: NEON is part of the aarch64 baseline.
        unsafe { neon::quantize(&x, &mut b) };
        for (p, q) in a.iter().zip(&b) {
            assert_eq!(format!("{p:?}"), format!("{q:?}"));
        }
    }
}
