//! Q8_0 weights: 32 elements per block as i8 codes with one f16 scale, `x = q * d`. The default
//! model's token embedding, which doubles as the 49152-row output projection.

use super::q8_1::BlockQ8_1;
use crate::block::{f16_to_f32, f32_to_f16, round_to_f16, ByteBlock};

/// ggml's `block_q8_0`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockQ8_0 {
    pub d: [u8; 2],
    pub qs: [i8; 32],
}
const _: () = assert!(size_of::<BlockQ8_0>() == 34);
// SAFETY: repr(C), only u8/i8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockQ8_0 {}

pub(crate) const QK: usize = 32;

/// `out.len() == 32 * blocks.len()`.
pub(crate) fn dequantize(blocks: &[BlockQ8_0], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        QK * blocks.len(),
        "q8_0 dequantize: length mismatch"
    );
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        for (y, &q) in o.iter_mut().zip(&b.qs) {
            *y = f32::from(q) * d;
        }
    }
}

/// Symmetric absmax quantizer: the largest magnitude maps to ±127.
pub(crate) fn quantize(x: &[f32], out: &mut [BlockQ8_0]) {
    assert_eq!(x.len(), QK * out.len(), "q8_0 quantize: length mismatch");
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = round_to_f16(amax / 127.0);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            *q = (v * id).round().clamp(-127.0, 127.0) as i8;
        }
        b.d = f32_to_f16(d);
    }
}

/// Scalar reference dot: exact integer `Σ q·a` per block, scaled by `d·d_a`.
pub(crate) fn dot_scalar(w: &[BlockQ8_0], a: &[BlockQ8_1]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        let sumi: i32 = wb
            .qs
            .iter()
            .zip(&ab.qs)
            .map(|(&x, &y)| i32::from(x) * i32::from(y))
            .sum();
        acc += f16_to_f32(wb.d) * ab.d * sumi as f32;
    }
    acc
}

/// Scalar reference for several tokens: one [`dot_scalar`] per token.
/// Many rows against one token (decode): `out[r] = dot(row r, a)`.
pub(crate) fn dot_rows_scalar(w: &[BlockQ8_0], a: &[BlockQ8_1], out: &mut [f32]) {
    super::each_row(dot_scalar, w, a, out)
}

pub(crate) fn dot_multi_scalar(w: &[BlockQ8_0], a: &[BlockQ8_1], out: &mut [f32]) {
    super::each_token(dot_scalar, w, a, out);
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{BlockQ8_0, BlockQ8_1};
    use crate::x86::{
        f16_to_f32, for_token_groups, hsum_ps, load_i8x32, mul_sum_i8_i8, mul_sum_u8_i8,
    };

    /// One row against one token. Per block: the exact integer dot, accumulated in one 8-lane
    /// FMA chain in block order, which is ggml's AVX2 order, so on x86 a row's result equals
    /// llama.cpp's bit for bit.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot(w: &[BlockQ8_0], a: &[BlockQ8_1]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for (wb, ab) in w.iter().zip(a) {
            let d = f16_to_f32(wb.d) * ab.d;
            let p = mul_sum_i8_i8(load_i8x32(&wb.qs), load_i8x32(&ab.qs));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc);
        }
        hsum_ps(acc)
    }

    /// Many rows against one token (decode), one whole row after another: `out[r] = dot(row r, a)`.
    /// (Interleaving four rows' block streams measured 1.7x slower on this machine's AMD EPYC:
    /// `cargo bench -p kostant-kernels --bench matvec -- decode_token`.)
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot_rows(w: &[BlockQ8_0], a: &[BlockQ8_1], out: &mut [f32]) {
        crate::formats::each_row(|w, a| dot(w, a), w, a, out)
    }

    /// One row against `out.len()` tokens (`a` holds them one after another).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot_multi(w: &[BlockQ8_0], a: &[BlockQ8_1], out: &mut [f32]) {
        for_token_groups!(dot, dot_n, w, a, out);
    }

    /// [`dot`] for `N` tokens at once, sharing each block's load and
    /// sign split. Per token: the same exact block integers, accumulated in one 8-lane FMA chain
    /// in block order, which is ggml's AVX2 order, so on x86 a row's result equals llama.cpp's
    /// bit for bit, and does not depend on `N`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn dot_n<const N: usize>(w: &[BlockQ8_0], a: &[BlockQ8_1], out: &mut [f32]) {
        let nb = w.len();
        assert_eq!(a.len(), N * nb, "activation blocks for {N} tokens");
        let mut acc = [_mm256_setzero_ps(); N];
        for (i, wb) in w.iter().enumerate() {
            let dw = f16_to_f32(wb.d);
            let x = load_i8x32(&wb.qs);
            // maddubs wants one unsigned side: |x| (<= 128) times y carrying x's sign
            // (activations stay within ±127, so the negation cannot overflow).
            let ax = _mm256_sign_epi8(x, x);
            for (t, acc) in acc.iter_mut().enumerate() {
                // SAFETY: t < N and i < nb, so t·nb + i < N·nb = a.len() (asserted above).
                let ab = unsafe { a.get_unchecked(t * nb + i) };
                let p = mul_sum_u8_i8(ax, _mm256_sign_epi8(load_i8x32(&ab.qs), x));
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * ab.d), _mm256_cvtepi32_ps(p), *acc);
            }
        }
        for (o, acc) in out.iter_mut().zip(acc) {
            *o = hsum_ps(acc);
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon {
    /// The NEON kernels, written once for both flavours of the exact integer dot:
    /// `widen` (baseline NEON) and `sdot` (the dotprod extension).
    macro_rules! kernels {
        ($features:literal, $flavour:ident) => {
            use crate::block::f16_to_f32;
            use crate::formats::q8_0::{BlockQ8_0, BlockQ8_1};
            use crate::neon::load_i8x32;
            use crate::neon::$flavour::sum_i8x32;

            /// Many rows against one token (decode): one exact [`dot`] each.
            #[allow(unused_unsafe)]
            #[target_feature(enable = $features)]
            pub(crate) fn dot_rows(w: &[BlockQ8_0], a: &[BlockQ8_1], out: &mut [f32]) {
                // SAFETY: this function runs only where its target features are enabled, and
                // they are `dot`'s (a closure does not inherit them, hence the block; the
                // baseline flavour's call needs none).
                crate::formats::each_row(|w, a| unsafe { dot(w, a) }, w, a, out)
            }

            /// One row against `out.len()` tokens, one exact [`dot`] each (NEON gains little from
            /// sharing the unpacking, which is a couple of instructions per block).
            #[allow(unused_unsafe)]
            #[target_feature(enable = $features)]
            pub(crate) fn dot_multi(w: &[BlockQ8_0], a: &[BlockQ8_1], out: &mut [f32]) {
                // SAFETY: as in `dot_rows`: the features are this function's.
                crate::formats::each_token(|w, a| unsafe { dot(w, a) }, w, a, out)
            }

            /// NEON twin of the scalar `dot_scalar`, bit-identical to it.
            #[target_feature(enable = $features)]
            pub(crate) fn dot(w: &[BlockQ8_0], a: &[BlockQ8_1]) -> f32 {
                let mut acc = 0.0f32;
                for (wb, ab) in w.iter().zip(a) {
                    let sumi = sum_i8x32(load_i8x32(&wb.qs), load_i8x32(&ab.qs));
                    acc += f16_to_f32(wb.d) * ab.d * sumi as f32;
                }
                acc
            }
        };
    }

    kernels!("neon", widen);

    /// The same kernels on SDOT (ARMv8.2 dotprod): the same exact integers, so the same bits.
    pub(crate) mod dotprod {
        kernels!("neon,dotprod", sdot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    fn zeroed(n: usize) -> Vec<BlockQ8_0> {
        vec![
            BlockQ8_0 {
                d: [0; 2],
                qs: [0; 32]
            };
            n
        ]
    }

    #[test]
    fn round_trip_error_within_half_a_step() {
        let mut r = rng(30);
        let x = random_f32(&mut r, 32 * 64, 1.0);
        let mut q = zeroed(64);
        quantize(&x, &mut q);
        let mut y = vec![0.0; x.len()];
        dequantize(&q, &mut y);
        for (xb, yb) in x.chunks_exact(32).zip(y.chunks_exact(32)) {
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            // Half a step of amax/127; 1% slack for the f16 scale.
            for (a, b) in xb.iter().zip(yb) {
                assert!((a - b).abs() <= amax / 254.0 * 1.01, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn dot_within_activation_quantization_budget() {
        check_dot_budget_32(
            31,
            |x, n| {
                let mut q = zeroed(n);
                quantize(x, &mut q);
                q
            },
            dequantize,
            dot_scalar,
        );
    }

    /// Raw random bytes include -128, which the SIMD paths must still handle.
    fn random_blocks(r: &mut Rng, nb: usize) -> Vec<BlockQ8_0> {
        (0..nb)
            .map(|_| BlockQ8_0 {
                d: f32_to_f16(random_f32(r, 1, 0.1)[0]),
                qs: random_bytes::<32>(r).map(|b| b as i8),
            })
            .collect()
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_is_bit_identical_to_scalar() {
        let mut r = rng(33);
        for nb in [1, 2, 3, 18, 49] {
            let (w, a) = (random_blocks(&mut r, nb), random_q8_1(&mut r, nb));
            // SAFETY: NEON is part of the aarch64 baseline.
            let simd = unsafe { neon::dot(&w, &a) };
            if crate::required::test_needs("dotprod") {
                // SAFETY: dotprod was just detected.
                let sdot = unsafe { neon::dotprod::dot(&w, &a) };
                assert_eq!(sdot.to_bits(), simd.to_bits(), "sdot against NEON");
            }
            assert_eq!(simd.to_bits(), dot_scalar(&w, &a).to_bits());
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_matches_scalar() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let mut r = rng(32);
        for nb in [1, 2, 3, 18, 48, 49] {
            let w = random_blocks(&mut r, nb);
            let a = random_q8_1(&mut r, nb);
            let terms: f32 = w
                .iter()
                .zip(&a)
                .map(|(wb, ab)| {
                    let sumi: i32 = wb
                        .qs
                        .iter()
                        .zip(&ab.qs)
                        .map(|(&x, &y)| i32::from(x) * i32::from(y))
                        .sum();
                    (f16_to_f32(wb.d) * ab.d * sumi as f32).abs()
                })
                .sum();
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            let simd = unsafe { avx2::dot(&w, &a) };
            assert_reordered_sum_close(simd, dot_scalar(&w, &a), terms, nb);
        }
    }

    /// The multi-token kernel shares weight unpacking across tokens but keeps each token's
    /// accumulation order, so it equals one-token calls bit for bit, for any token count.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_multi_token_equals_single_token() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let mut r = rng(34);
        let nb = 18;
        let w = random_blocks(&mut r, nb);
        for n in 1..=9 {
            let a = random_q8_1(&mut r, n * nb);
            let mut multi = vec![0.0f32; n];
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            unsafe { avx2::dot_multi(&w, &a, &mut multi) };
            for (t, &m) in multi.iter().enumerate() {
                // SAFETY: as above.
                let single = unsafe { avx2::dot(&w, &a[t * nb..(t + 1) * nb]) };
                assert_eq!(m.to_bits(), single.to_bits(), "{n} tokens, token {t}");
            }
        }
    }
}
