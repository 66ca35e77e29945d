//! Q5_0 weights: 32 elements per block as 5-bit codes around 16 with one f16 scale,
//! `x = (q - 16) * d`; the low four bits are packed two to a byte, the fifth bits in one
//! 32-bit word. Dotted against Q8_1-style activations (ggml's Q8_0: only `d` and `qs` are read).

use super::q8_1::BlockQ8_1;
use crate::block::{f16_to_f32, f32_to_f16, round_to_f16, ByteBlock};

/// ggml's `block_q5_0`: element `j < 16` is `qs[j] & 0xF` with bit `j` of `qh` (read as a
/// little-endian u32) on top, element `j + 16` is `qs[j] >> 4` with bit `j + 16`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockQ5_0 {
    pub d: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ5_0>() == 22);
// SAFETY: repr(C), only u8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockQ5_0 {}

pub(crate) const QK: usize = 32;

impl BlockQ5_0 {
    /// The 32 codes recentred to -16..15, in element order.
    #[inline]
    pub(crate) fn codes(&self) -> [i32; 32] {
        let qh = u32::from_le_bytes(self.qh);
        std::array::from_fn(|j| {
            let nibble = if j < 16 {
                self.qs[j] & 0xF
            } else {
                self.qs[j - 16] >> 4
            };
            (i32::from(nibble) | (((qh >> j) & 1) << 4) as i32) - 16
        })
    }
}

/// `out.len() == 32 * blocks.len()`.
pub(crate) fn dequantize(blocks: &[BlockQ5_0], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        QK * blocks.len(),
        "q5_0 dequantize: length mismatch"
    );
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        for (o, q) in o.iter_mut().zip(b.codes()) {
            *o = q as f32 * d;
        }
    }
}

/// ggml's rule, as for Q4_0: the element of largest magnitude maps to code 0 (-16 * d), so
/// its sign picks the sign of `d` and the asymmetric range [-16, 15] is used where it matters.
/// Codes are chosen against the f16 scale the dequantizer reads.
pub(crate) fn quantize(x: &[f32], out: &mut [BlockQ5_0]) {
    assert_eq!(x.len(), QK * out.len(), "q5_0 quantize: length mismatch");
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let extreme = xb
            .iter()
            .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let d = round_to_f16(extreme / -16.0);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let code = |v: f32| ((v * id).round() + 16.0).clamp(0.0, 31.0) as u32;
        let mut qh = 0u32;
        for j in 0..16 {
            let (lo, hi) = (code(xb[j]), code(xb[j + 16]));
            b.qs[j] = ((lo & 0xF) | ((hi & 0xF) << 4)) as u8;
            qh |= ((lo >> 4) << j) | ((hi >> 4) << (j + 16));
        }
        b.qh = qh.to_le_bytes();
        b.d = f32_to_f16(d);
    }
}

/// Scalar reference dot: per block the exact integer `Σ (q - 16)·a`, scaled by `d·d_a`.
pub(crate) fn dot_scalar(w: &[BlockQ5_0], a: &[BlockQ8_1]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        let sumi: i32 = wb
            .codes()
            .iter()
            .zip(&ab.qs)
            .map(|(&q, &y)| q * i32::from(y))
            .sum();
        acc += f16_to_f32(wb.d) * ab.d * sumi as f32;
    }
    acc
}

/// Many rows against one token (decode): `out[r] = dot(row r, a)`.
pub(crate) fn dot_rows_scalar(w: &[BlockQ5_0], a: &[BlockQ8_1], out: &mut [f32]) {
    super::each_row(dot_scalar, w, a, out)
}

/// Scalar reference for several tokens: one [`dot_scalar`] per token.
pub(crate) fn dot_multi_scalar(w: &[BlockQ5_0], a: &[BlockQ8_1], out: &mut [f32]) {
    super::each_token(dot_scalar, w, a, out);
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{BlockQ5_0, BlockQ8_1};
    use crate::x86::{
        bits_to_bytes_32, f16_to_f32, for_token_groups, hsum_ps, load_i8x32, mul_sum_i8_i8,
        unpack_nibbles_32,
    };

    /// A block's 32 codes recentred to -16..15 as signed bytes: a nibble whose fifth bit is
    /// clear is `nibble - 16`, which in two's complement is the nibble with 0xF0 set on top.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn codes(wb: &BlockQ5_0) -> __m256i {
        let clear = _mm256_andnot_si256(bits_to_bytes_32(&wb.qh), _mm256_set1_epi8(0xF0u8 as i8));
        _mm256_or_si256(unpack_nibbles_32(&wb.qs), clear)
    }

    /// One row against one token. Per block: the exact integer dot of the recentred codes with
    /// the activations in 8 i32 lanes, accumulated in one 8-lane FMA chain in block order,
    /// which is ggml's AVX2 order for `vec_dot_q5_0_q8_0`, so on x86 a row's result equals
    /// llama.cpp's bit for bit.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot(w: &[BlockQ5_0], a: &[BlockQ8_1]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for (wb, ab) in w.iter().zip(a) {
            let d = f16_to_f32(wb.d) * ab.d;
            let p = mul_sum_i8_i8(codes(wb), load_i8x32(&ab.qs));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc);
        }
        hsum_ps(acc)
    }

    /// Many rows against one token (decode), one whole row after another: `out[r] = dot(row r, a)`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot_rows(w: &[BlockQ5_0], a: &[BlockQ8_1], out: &mut [f32]) {
        crate::formats::each_row(|w, a| dot(w, a), w, a, out)
    }

    /// One row against `out.len()` tokens (`a` holds them one after another).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot_multi(w: &[BlockQ5_0], a: &[BlockQ8_1], out: &mut [f32]) {
        for_token_groups!(dot, dot_n, w, a, out);
    }

    /// [`dot`] for `N` tokens at once, sharing each block's unpacking; per token the same
    /// integers in the same order, so the result does not depend on `N`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn dot_n<const N: usize>(w: &[BlockQ5_0], a: &[BlockQ8_1], out: &mut [f32]) {
        let nb = w.len();
        assert_eq!(a.len(), N * nb, "activation blocks for {N} tokens");
        let mut acc = [_mm256_setzero_ps(); N];
        for (i, wb) in w.iter().enumerate() {
            let dw = f16_to_f32(wb.d);
            let q = codes(wb);
            for (t, acc) in acc.iter_mut().enumerate() {
                // SAFETY: t < N and i < nb, so t·nb + i < N·nb = a.len() (asserted above).
                let ab = unsafe { a.get_unchecked(t * nb + i) };
                let p = mul_sum_i8_i8(q, load_i8x32(&ab.qs));
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
            use std::arch::aarch64::*;

            use crate::block::f16_to_f32;
            use crate::formats::q5_0::{BlockQ5_0, BlockQ8_1};
            use crate::neon::$flavour::sum_i8x32;
            use crate::neon::{bits_to_bytes_32, load_i8x32, load_u8x16};

            /// Many rows against one token (decode): one exact [`dot`] each.
            #[allow(unused_unsafe)]
            #[target_feature(enable = $features)]
            pub(crate) fn dot_rows(w: &[BlockQ5_0], a: &[BlockQ8_1], out: &mut [f32]) {
                // SAFETY: this function runs only where its target features are enabled, and
                // they are `dot`'s (a closure does not inherit them, hence the block; the
                // baseline flavour's call needs none).
                crate::formats::each_row(|w, a| unsafe { dot(w, a) }, w, a, out)
            }

            /// One row against `out.len()` tokens, one exact [`dot`] each.
            #[allow(unused_unsafe)]
            #[target_feature(enable = $features)]
            pub(crate) fn dot_multi(w: &[BlockQ5_0], a: &[BlockQ8_1], out: &mut [f32]) {
                // SAFETY: as in `dot_rows`: the features are this function's.
                crate::formats::each_token(|w, a| unsafe { dot(w, a) }, w, a, out)
            }

            /// NEON twin of the scalar `dot_scalar`, bit-identical to it: the same exact block
            /// integers, combined in the same order.
            #[target_feature(enable = $features)]
            pub(crate) fn dot(w: &[BlockQ5_0], a: &[BlockQ8_1]) -> f32 {
                let low4 = vdupq_n_u8(0x0F);
                let sixteen = vdupq_n_s8(16);
                let mut acc = 0.0f32;
                for (wb, ab) in w.iter().zip(a) {
                    let q = load_u8x16(&wb.qs);
                    let (h0, h1) = bits_to_bytes_32(&wb.qh, 0x10);
                    let codes = (
                        vsubq_s8(
                            vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, low4), h0)),
                            sixteen,
                        ),
                        vsubq_s8(
                            vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8::<4>(q), h1)),
                            sixteen,
                        ),
                    );
                    let sumi = sum_i8x32(codes, load_i8x32(&ab.qs));
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

    fn zero_blocks(n: usize) -> Vec<BlockQ5_0> {
        vec![
            BlockQ5_0 {
                d: [0; 2],
                qh: [0; 4],
                qs: [0; 16]
            };
            n
        ]
    }

    #[test]
    fn dequantize_matches_the_layout() {
        // Element j's code is j (0..31): nibble j & 15, fifth bit j >> 4.
        let qs = std::array::from_fn(|j| (j as u8) | (((j as u8 + 16) & 0xF) << 4));
        let b = BlockQ5_0 {
            d: f32_to_f16(0.5),
            qh: 0xFFFF_0000u32.to_le_bytes(),
            qs,
        };
        let mut out = [0.0f32; 32];
        dequantize(&[b], &mut out);
        for (j, &v) in out.iter().enumerate() {
            assert_eq!(v, (j as f32 - 16.0) * 0.5, "element {j}");
        }
        // One fifth bit alone: element 5 and element 21.
        let b = BlockQ5_0 {
            d: f32_to_f16(1.0),
            qh: ((1u32 << 5) | (1 << 21)).to_le_bytes(),
            qs: [0; 16],
        };
        dequantize(&[b], &mut out);
        for (j, &v) in out.iter().enumerate() {
            let want = if j == 5 || j == 21 { 0.0 } else { -16.0 };
            assert_eq!(v, want, "element {j}");
        }
    }

    #[test]
    fn round_trip_error_within_one_step() {
        let mut r = rng(20);
        let x = random_f32(&mut r, 32 * 64, 1.0);
        let mut q = zero_blocks(64);
        quantize(&x, &mut q);
        let mut y = vec![0.0; x.len()];
        dequantize(&q, &mut y);
        for (xb, yb) in x.chunks_exact(32).zip(y.chunks_exact(32)) {
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            // Half a step (amax/32) inside the range; a full step (amax/16) for the opposite
            // extreme, which falls just outside [-16, 15]. 1% slack for the f16 scale.
            for (a, b) in xb.iter().zip(yb) {
                assert!((a - b).abs() <= amax / 16.0 * 1.01, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn dot_within_activation_quantization_budget() {
        check_dot_budget_32(
            21,
            |x, n| {
                let mut q = zero_blocks(n);
                quantize(x, &mut q);
                q
            },
            dequantize,
            dot_scalar,
        );
    }

    fn random_blocks(r: &mut Rng, nb: usize) -> Vec<BlockQ5_0> {
        (0..nb)
            .map(|_| BlockQ5_0 {
                d: f32_to_f16(random_f32(r, 1, 0.1)[0]),
                qh: random_bytes(r),
                qs: random_bytes(r),
            })
            .collect()
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_is_bit_identical_to_scalar() {
        let mut r = rng(23);
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

    /// The AVX2 dot adds in ggml's 8-lane order, not the reference's: it equals a scalar model
    /// of that order bit for bit, and the reference within the reordering bound.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_matches_scalar() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let mut r = rng(22);
        for nb in [1, 2, 3, 18, 48, 49] {
            let w = random_blocks(&mut r, nb);
            let a = random_q8_1(&mut r, nb);
            let blocks = || {
                w.iter().zip(&a).map(|(wb, ab)| {
                    let q = wb.codes();
                    let prods: [i32; 32] = std::array::from_fn(|j| q[j] * i32::from(ab.qs[j]));
                    (f16_to_f32(wb.d) * ab.d, prods)
                })
            };
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            let simd = unsafe { avx2::dot(&w, &a) };
            assert_eq!(simd.to_bits(), avx2_lane_order(blocks()).to_bits(), "{nb}");
            assert_reordered_sum_close(simd, dot_scalar(&w, &a), lane_terms(blocks()), nb + 8);
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
        let mut r = rng(24);
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
