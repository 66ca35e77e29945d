//! Q6_K weights: 256-element super-blocks of sixteen 16-element sub-blocks, 6-bit codes split
//! into low nibbles (`ql`) and 2-bit high parts (`qh`), an i8 scale per sub-block and one f16
//! super-scale, `x = d·scale·(q - 32)`. Dotted against Q8_K activations.

use super::q8_k::BlockQ8K;
use crate::block::{f16_to_f32, f32_to_f16, round_to_f16, ByteBlock};

/// ggml's `block_q6_K`. For half `n` (elements `128n..128n+128`) and `l` in 0..32, with
/// `L0 = ql[2n]`, `L1 = ql[2n+1]`, `H = qh[n]`:
/// element `128n+l` is `L0[l] & 0xF | (H[l] & 3) << 4`, `+32` is `L1[l] & 0xF | (H[l]>>2 & 3) << 4`,
/// `+64` is `L0[l] >> 4 | (H[l]>>4 & 3) << 4`, `+96` is `L1[l] >> 4 | (H[l]>>6 & 3) << 4`.
/// Element `e` uses `scales[e / 16]`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockQ6K {
    pub ql: [[u8; 32]; 4],
    pub qh: [[u8; 32]; 2],
    pub scales: [i8; 16],
    pub d: [u8; 2],
}
const _: () = assert!(size_of::<BlockQ6K>() == 210);
// SAFETY: repr(C), only u8/i8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockQ6K {}

pub(crate) const QK: usize = 256;

/// Unsigned code (0..64) of element `e`; the value is `code - 32`.
#[inline]
fn code(b: &BlockQ6K, e: usize) -> u8 {
    let (n, k, l) = (e / 128, (e % 128) / 32, e % 32);
    let low = b.ql[2 * n + k % 2][l];
    let low = if k < 2 { low & 0xF } else { low >> 4 };
    let high = (b.qh[n][l] >> (2 * k)) & 3;
    low | (high << 4)
}

/// `out.len() == 256 * blocks.len()`.
pub(crate) fn dequantize(blocks: &[BlockQ6K], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        QK * blocks.len(),
        "q6_k dequantize: length mismatch"
    );
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        for (e, y) in o.iter_mut().enumerate() {
            let q = i32::from(code(b, e)) - 32;
            *y = d * f32::from(b.scales[e / 16]) * q as f32;
        }
    }
}

/// Fits `x ≈ s·q` with q in -32..=31 for one 16-element sub-block: the largest magnitude maps to
/// -32 (so its sign picks the sign of `s`), then a couple of least-squares refits of `s`.
fn fit_sub_block(x: &[f32]) -> f32 {
    let extreme = x
        .iter()
        .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    if extreme == 0.0 {
        return 0.0;
    }
    let assign = |s: f32, v: f32| (v / s).round().clamp(-32.0, 31.0);
    let err = |s: f32| -> f32 { x.iter().map(|&v| (s * assign(s, v) - v).powi(2)).sum() };
    let mut s = extreme / -32.0;
    let mut best = (s, err(s));
    for _ in 0..3 {
        let (sqx, sqq) = x.iter().fold((0.0f32, 0.0f32), |(a, b), &v| {
            let q = assign(s, v);
            (a + q * v, b + q * q)
        });
        if sqq == 0.0 {
            break;
        }
        s = sqx / sqq;
        let e = err(s);
        if e < best.1 {
            best = (s, e);
        }
    }
    best.0
}

/// Reference quantizer: per sub-block scale, quantized to i8 against the super-block's largest
/// (which maps to -128), then codes chosen against the scales the dequantizer will read.
pub(crate) fn quantize(x: &[f32], out: &mut [BlockQ6K]) {
    assert_eq!(x.len(), QK * out.len(), "q6_k quantize: length mismatch");
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let fits: Vec<f32> = xb.chunks_exact(16).map(fit_sub_block).collect();
        let extreme = fits
            .iter()
            .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let d = round_to_f16(extreme / -128.0);
        for (s, &f) in b.scales.iter_mut().zip(&fits) {
            *s = if d != 0.0 {
                (f / d).round().clamp(-128.0, 127.0) as i8
            } else {
                0
            };
        }
        let mut q = [32u8; QK];
        for (e, (&v, qe)) in xb.iter().zip(q.iter_mut()).enumerate() {
            let s = d * f32::from(b.scales[e / 16]);
            if s != 0.0 {
                *qe = ((v / s).round().clamp(-32.0, 31.0) + 32.0) as u8;
            }
        }
        for n in 0..2 {
            for l in 0..32 {
                let [q1, q2, q3, q4] = [0, 32, 64, 96].map(|o| q[128 * n + o + l]);
                b.ql[2 * n][l] = (q1 & 0xF) | ((q3 & 0xF) << 4);
                b.ql[2 * n + 1][l] = (q2 & 0xF) | ((q4 & 0xF) << 4);
                b.qh[n][l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
            }
        }
        b.d = f32_to_f16(d);
    }
}

/// `32 · Σ scale[i] · bsum[i]`: the -32 code offset, applied through the activation sums.
#[inline]
fn offset_term(scales: &[i8; 16], a: &BlockQ8K) -> i32 {
    32 * scales
        .iter()
        .zip(&a.bsums)
        .map(|(&s, &b)| i32::from(s) * i32::from(b))
        .sum::<i32>()
}

/// Scalar reference dot. Per super-block one exact integer, `Σ scale·Σ q·a - 32·Σ scale·Σa`
/// with unsigned codes, scaled by `d·d_a`; the AVX2 path computes the same integer, so the two
/// agree bit for bit.
pub(crate) fn dot_scalar(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        acc += f16_to_f32(wb.d) * ab.d * block_sumi(wb, ab) as f32;
    }
    acc
}

/// One super-block's exact integer `Σ scale·Σ (q - 32)·a`.
fn block_sumi(wb: &BlockQ6K, ab: &BlockQ8K) -> i32 {
    let mut sumi = 0i32;
    for (i, &s) in wb.scales.iter().enumerate() {
        let sub: i32 = (16 * i..16 * i + 16)
            .map(|e| i32::from(code(wb, e)) * ab.q(e))
            .sum();
        sumi += i32::from(s) * sub;
    }
    sumi - offset_term(&wb.scales, ab)
}

/// Scalar reference in the order of ggml's tiled K-quant matmul (`ggml-cpu/tiled`, which
/// llama.cpp's x86 builds run for Q6_K weights against 8 or more tokens): [`super::tiled_step`]
/// per super-block.
pub(crate) fn dot_tiled_scalar(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    w.iter().zip(a).fold(0.0, |acc, (wb, ab)| {
        super::tiled_step(acc, f16_to_f32(wb.d), block_sumi(wb, ab), None, ab.d)
    })
}

/// [`dot_tiled_scalar`] for several tokens.
pub(crate) fn dot_tiled_multi_scalar(w: &[BlockQ6K], a: &[BlockQ8K], out: &mut [f32]) {
    super::each_token(dot_tiled_scalar, w, a, out);
}

/// Scalar reference for several tokens: one [`dot_scalar`] per token.
pub(crate) fn dot_multi_scalar(w: &[BlockQ6K], a: &[BlockQ8K], out: &mut [f32]) {
    super::each_token(dot_scalar, w, a, out);
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{BlockQ6K, BlockQ8K};
    use crate::x86::{f16_to_f32, hsum_ps, load_i8x32, load_u8x32};

    /// One row against `out.len()` tokens, one [`dot`] each.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot_multi(w: &[BlockQ6K], a: &[BlockQ8K], out: &mut [f32]) {
        let n = w.len();
        for (t, o) in out.iter_mut().enumerate() {
            *o = dot(w, &a[t * n..(t + 1) * n]);
        }
    }

    /// AVX2 twin of [`super::dot_scalar`]: the same exact integers per 8-lane group (the -32
    /// offset subtracted lane by lane), combined in ggml's order (one 8-lane FMA per
    /// super-block), so on x86 a row's result equals llama.cpp's bit for bit.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for (wb, ab) in w.iter().zip(a) {
            // Decode streams the (tied) output matrix from memory: ask for it ahead.
            crate::x86::prefetch_ahead_by::<{ crate::x86::K_QUANT_PREFETCH_BYTES }, _>(wb);
            let sumi = block_sumi(wb, ab);
            let d = ab.d * f16_to_f32(wb.d);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_ps(acc)
    }

    // One row against `out.len()` tokens in the tiled matmul's order, one
    // [`super::dot_tiled_scalar`] each: the same exact integers, so the same bits.
    crate::x86::tiled_flavours! {
        fn dot_tiled_multi(w: &[BlockQ6K], a: &[BlockQ8K], out: &mut [f32]) {
            let n = w.len();
            out.fill(0.0);
            for (b, wb) in w.iter().enumerate() {
                // The super-block unpacked once for every token: its 16 code vectors (unsigned,
                // 0..63) and the i16 scale each one's lanes meet.
                let (codes, scales) = unpack(wb);
                // SAFETY: `scales` is 16 readable bytes, the width of a 128-bit load.
                let s8 = unsafe { _mm_loadu_si128(wb.scales.as_ptr().cast()) };
                let s16 = _mm256_cvtepi8_epi16(s8);
                let d = f16_to_f32(wb.d);
                for (t, o) in out.iter_mut().enumerate() {
                    let ab = &a[t * n + b];
                    // Codes <= 63 and activations >= -127: pair sums <= 16002, no saturation.
                    let sumi = scaled_code_sums(&codes, &scales, &ab.qs);
                    // SAFETY: `bsums` is 16 i16, 32 readable bytes, the width of a 256-bit load.
                    let bs = unsafe { _mm256_loadu_si256(ab.bsums.as_ptr().cast()) };
                    let off = _mm256_slli_epi32::<5>(_mm256_madd_epi16(bs, s16));
                    // The exact integer out of the lanes (wrapping adds: the sum is exact).
                    let sumi = crate::x86::hsum_epi32(_mm256_sub_epi32(sumi, off));
                    *o = crate::formats::tiled_step(*o, d, sumi, None, ab.d);
                }
            }
        }
    }

    /// A super-block's 8 code vectors (32 elements each, in activation-block order) and, per
    /// vector, its two sub-blocks' scales as i16 (the low 128-bit lane's, then the high one's).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn unpack(wb: &BlockQ6K) -> ([__m256i; 8], [__m256i; 8]) {
        let low4 = _mm256_set1_epi8(0x0F);
        let high2 = _mm256_set1_epi8(0x30);
        let mut codes = [_mm256_setzero_si256(); 8];
        let mut scales = [_mm256_setzero_si256(); 8];
        for n in 0..2 {
            let l0 = load_u8x32(&wb.ql[2 * n]);
            let l1 = load_u8x32(&wb.ql[2 * n + 1]);
            let h = load_u8x32(&wb.qh[n]);
            codes[4 * n] = _mm256_or_si256(
                _mm256_and_si256(l0, low4),
                _mm256_and_si256(_mm256_slli_epi16::<4>(h), high2),
            );
            codes[4 * n + 1] = _mm256_or_si256(
                _mm256_and_si256(l1, low4),
                _mm256_and_si256(_mm256_slli_epi16::<2>(h), high2),
            );
            codes[4 * n + 2] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(l0), low4),
                _mm256_and_si256(h, high2),
            );
            codes[4 * n + 3] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(l1), low4),
                _mm256_and_si256(_mm256_srli_epi16::<2>(h), high2),
            );
            for k in 0..4 {
                // Vector 4n + k covers sub-blocks 8n + 2k (low lane) and 8n + 2k + 1 (high).
                let (lo, hi) = (wb.scales[8 * n + 2 * k], wb.scales[8 * n + 2 * k + 1]);
                scales[4 * n + k] =
                    _mm256_setr_m128i(_mm_set1_epi16(i16::from(lo)), _mm_set1_epi16(i16::from(hi)));
            }
        }
        (codes, scales)
    }

    /// One super-block's exact integer, spread over 8 i32 lanes in ggml's lane order.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn block_sumi(wb: &BlockQ6K, ab: &BlockQ8K) -> __m256i {
        let low4 = _mm256_set1_epi8(0x0F);
        let high2 = _mm256_set1_epi8(0x30);
        // Byte shuffles that broadcast i16 scale 2k to the low 128-bit lane and 2k+1 to the
        // high lane (the lanes hold elements 0..16 and 16..32 of a 32-element group).
        let pair = |k: i8| {
            let (lo, hi) = (4 * k, 4 * k + 2);
            _mm256_setr_epi8(
                lo,
                lo + 1,
                lo,
                lo + 1,
                lo,
                lo + 1,
                lo,
                lo + 1,
                lo,
                lo + 1,
                lo,
                lo + 1,
                lo,
                lo + 1,
                lo,
                lo + 1,
                hi,
                hi + 1,
                hi,
                hi + 1,
                hi,
                hi + 1,
                hi,
                hi + 1,
                hi,
                hi + 1,
                hi,
                hi + 1,
                hi,
                hi + 1,
                hi,
                hi + 1,
            )
        };
        let pairs = [pair(0), pair(1), pair(2), pair(3)];
        {
            let mut sumi = _mm256_setzero_si256();
            for n in 0..2 {
                // SAFETY: scales[8n..8n+8] is 8 readable bytes, the width of a 64-bit load.
                let s8 = unsafe { _mm_loadl_epi64(wb.scales.as_ptr().add(8 * n).cast()) };
                let s16 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(s8));
                let l0 = load_u8x32(&wb.ql[2 * n]);
                let l1 = load_u8x32(&wb.ql[2 * n + 1]);
                let h = load_u8x32(&wb.qh[n]);
                let codes = [
                    _mm256_or_si256(
                        _mm256_and_si256(l0, low4),
                        _mm256_and_si256(_mm256_slli_epi16::<4>(h), high2),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(l1, low4),
                        _mm256_and_si256(_mm256_slli_epi16::<2>(h), high2),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(l0), low4),
                        _mm256_and_si256(h, high2),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(l1), low4),
                        _mm256_and_si256(_mm256_srli_epi16::<2>(h), high2),
                    ),
                ];
                for (k, &q) in codes.iter().enumerate() {
                    // Codes <= 63 and activations >= -127: pair sums <= 16002, no saturation.
                    let p = _mm256_maddubs_epi16(q, load_i8x32(&ab.qs[4 * n + k]));
                    let sc = _mm256_shuffle_epi8(s16, pairs[k]);
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, sc));
                }
            }
            // The -32 offset, 32 · scale[i] · bsum[i] summed in the same lanes as ggml.
            // SAFETY: `scales` is 16 readable bytes, the width of a 128-bit load.
            let s8 = unsafe { _mm_loadu_si128(wb.scales.as_ptr().cast()) };
            // SAFETY: `bsums` is 16 i16, 32 readable bytes, the width of a 256-bit load.
            let bs = unsafe { _mm256_loadu_si256(ab.bsums.as_ptr().cast()) };
            let off = _mm256_slli_epi32::<5>(_mm256_madd_epi16(bs, _mm256_cvtepi8_epi16(s8)));
            _mm256_sub_epi32(sumi, off)
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
            use crate::formats::q6_k::{offset_term, BlockQ6K, BlockQ8K};
            use crate::neon::$flavour::sum_i8x16;
            use crate::neon::{load_i8x32, load_u8x32};

            /// One row against `out.len()` tokens, one exact [`dot`] each (NEON gains little from
            /// sharing the unpacking, which is a couple of instructions per block).
            #[allow(unused_unsafe)]
            #[target_feature(enable = $features)]
            pub(crate) fn dot_multi(w: &[BlockQ6K], a: &[BlockQ8K], out: &mut [f32]) {
                // SAFETY: as in `dot_rows`: the features are this function's.
                crate::formats::each_token(|w, a| unsafe { dot(w, a) }, w, a, out)
            }

            /// NEON twin of the scalar `dot_scalar`, bit-identical to it.
            #[target_feature(enable = $features)]
            pub(crate) fn dot(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
                let low4 = vdupq_n_u8(0x0F);
                let high2 = vdupq_n_u8(0x30);
                let mut acc = 0.0f32;
                for (wb, ab) in w.iter().zip(a) {
                    let mut sumi = 0i32;
                    for n in 0..2 {
                        let l0 = load_u8x32(&wb.ql[2 * n]);
                        let l1 = load_u8x32(&wb.ql[2 * n + 1]);
                        let h = load_u8x32(&wb.qh[n]);
                        // The four 32-element groups of this half, each as two 16-element sub-blocks.
                        let groups = [
                            [(l0.0, h.0), (l0.1, h.1)].map(|(l, h)| {
                                vorrq_u8(vandq_u8(l, low4), vandq_u8(vshlq_n_u8::<4>(h), high2))
                            }),
                            [(l1.0, h.0), (l1.1, h.1)].map(|(l, h)| {
                                vorrq_u8(vandq_u8(l, low4), vandq_u8(vshlq_n_u8::<2>(h), high2))
                            }),
                            [(l0.0, h.0), (l0.1, h.1)]
                                .map(|(l, h)| vorrq_u8(vshrq_n_u8::<4>(l), vandq_u8(h, high2))),
                            [(l1.0, h.0), (l1.1, h.1)].map(|(l, h)| {
                                vorrq_u8(vshrq_n_u8::<4>(l), vandq_u8(vshrq_n_u8::<2>(h), high2))
                            }),
                        ];
                        for (k, codes) in groups.iter().enumerate() {
                            let act = load_i8x32(&ab.qs[4 * n + k]);
                            let s = 8 * n + 2 * k;
                            let lo = sum_i8x16(vreinterpretq_s8_u8(codes[0]), act.0);
                            let hi = sum_i8x16(vreinterpretq_s8_u8(codes[1]), act.1);
                            sumi += i32::from(wb.scales[s]) * lo + i32::from(wb.scales[s + 1]) * hi;
                        }
                    }
                    sumi -= offset_term(&wb.scales, ab);
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

    fn zeroed(n: usize) -> Vec<BlockQ6K> {
        vec![
            BlockQ6K {
                ql: [[0; 32]; 4],
                qh: [[0; 32]; 2],
                scales: [0; 16],
                d: [0; 2]
            };
            n
        ]
    }

    /// ggml's `dequantize_row_q6_K` loop, written with flat arrays, as an independent check of
    /// [`code`] and the nested-array layout.
    fn ggml_order(b: &BlockQ6K) -> [f32; 256] {
        let ql: Vec<u8> = b.ql.concat();
        let qh: Vec<u8> = b.qh.concat();
        let d = f16_to_f32(b.d);
        let mut y = [0.0f32; 256];
        for n in 0..2 {
            let (ql, qh, sc, y) = (
                &ql[64 * n..],
                &qh[32 * n..],
                &b.scales[8 * n..],
                &mut y[128 * n..],
            );
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                y[l] = d * f32::from(sc[is]) * q1 as f32;
                y[l + 32] = d * f32::from(sc[is + 2]) * q2 as f32;
                y[l + 64] = d * f32::from(sc[is + 4]) * q3 as f32;
                y[l + 96] = d * f32::from(sc[is + 6]) * q4 as f32;
            }
        }
        y
    }

    fn random_blocks(r: &mut Rng, n: usize) -> Vec<BlockQ6K> {
        (0..n)
            .map(|_| BlockQ6K {
                ql: std::array::from_fn(|_| random_bytes(r)),
                qh: std::array::from_fn(|_| random_bytes(r)),
                scales: random_bytes::<16>(r).map(|b| b as i8),
                d: f32_to_f16(random_f32(r, 1, 0.01)[0]),
            })
            .collect()
    }

    #[test]
    fn dequantize_matches_ggml_loop() {
        let mut r = rng(50);
        for b in random_blocks(&mut r, 8) {
            let mut out = [0.0f32; 256];
            dequantize(&[b], &mut out);
            assert_eq!(out, ggml_order(&b));
        }
    }

    #[test]
    fn round_trip_rms_error_budget() {
        // Budget: RMS error under 2.2% of the data's RMS (this seed measures 2.0%): 6-bit codes
        // over a 16-value block's ±amax give roughly amax/32/√12 per element.
        let mut r = rng(51);
        let x = random_f32(&mut r, 256 * 32, 1.0);
        let mut q = zeroed(32);
        quantize(&x, &mut q);
        let mut y = vec![0.0; x.len()];
        dequantize(&q, &mut y);
        let rel = rms_diff(&x, &y) / rms(&x);
        assert!(rel < 0.022, "relative rms error {rel}");
    }

    #[test]
    fn dot_within_activation_quantization_budget() {
        check_dot_budget_k(
            52,
            |x, n| {
                let mut q = zeroed(n);
                quantize(x, &mut q);
                q
            },
            dequantize,
            dot_scalar,
        );
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_is_bit_identical_to_scalar() {
        let mut r = rng(54);
        for nb in [1, 2, 3, 7] {
            let (w, a) = (random_blocks(&mut r, nb), random_q8_k(&mut r, nb));
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

    /// The tiled matmul's order: AVX2 equals the scalar reference bit for bit, and both stay
    /// close to the row dot (the same exact integers, summed in another order).
    #[test]
    fn tiled_order_avx2_equals_scalar_and_is_close_to_the_dot() {
        let mut r = rng(57);
        for (nb, t) in [(1, 1), (3, 2), (8, 9), (5, 16), (2, 37)] {
            let w = random_blocks(&mut r, nb);
            let a = random_q8_k(&mut r, nb * t);
            let mut want = vec![0.0; t];
            dot_tiled_multi_scalar(&w, &a, &mut want);
            for (tok, &v) in want.iter().enumerate() {
                let d = dot_scalar(&w, &a[tok * nb..(tok + 1) * nb]);
                assert!((v - d).abs() <= 1e-5 * (1.0 + d.abs()), "{v} vs {d}");
            }
            #[cfg(target_arch = "x86_64")]
            if crate::required::test_needs("avx2") {
                let mut got = vec![0.0; t];
                // SAFETY: AVX2, FMA and F16C were just detected.
                unsafe { avx2::dot_tiled_multi(&w, &a, &mut got) };
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "nb {nb}, {t} tokens");
                if crate::required::test_needs("avx512vnni") {
                    // SAFETY: AVX-512 VNNI (with F and VL) was just detected.
                    unsafe { avx2::dot_tiled_multi_vnni(&w, &a, &mut got) };
                    assert_eq!(bits(&got), bits(&want), "vnni, nb {nb}, {t} tokens");
                    // SAFETY: as above (with BW).
                    unsafe { crate::formats::k_lanes::avx512vnni::dot_multi(&w, &a, &mut got) };
                    assert_eq!(bits(&got), bits(&want), "lanes, nb {nb}, {t} tokens");
                }
            }
        }
    }

    /// Σ of the magnitudes of every product the SIMD lanes add up (codes unsigned, plus the
    /// offset term): a bound on Σ|lane terms|.
    #[cfg(target_arch = "x86_64")]
    fn abs_terms(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
        w.iter()
            .zip(a)
            .map(|(wb, ab)| {
                let per: f32 = (0..256)
                    .map(|e| {
                        let s = f32::from(wb.scales[e / 16]).abs();
                        s * (f32::from(code(wb, e)) + 32.0) * (ab.q(e) as f32).abs()
                    })
                    .sum();
                (ab.d * f16_to_f32(wb.d)).abs() * per
            })
            .sum()
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_matches_scalar() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let mut r = rng(53);
        for nb in [1, 2, 3, 6, 7] {
            let w = random_blocks(&mut r, nb);
            let a = random_q8_k(&mut r, nb);
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            let simd = unsafe { avx2::dot(&w, &a) };
            // 8 lanes per super-block, accumulated in a different order than the reference.
            assert_reordered_sum_close(simd, dot_scalar(&w, &a), abs_terms(&w, &a), 8 * nb);
        }
    }
}
