//! Q3_K weights: 256-element super-blocks of sixteen 16-element sub-blocks, each with a 6-bit
//! signed scale under one f16 super-scale, and 3-bit codes `q` in -4..3 (two low bits plus a
//! high bit that, when clear, subtracts 4): `x = d·(sc - 32)·q`. Dotted against Q8_K.

use super::q8_k::BlockQ8K;
use crate::block::{f16_to_f32, f32_to_f16, round_to_f16, ByteBlock};

/// ggml's `block_q3_K` (note `d` comes last). Element `e` lies in 32-element chunk
/// `c = e / 32` at position `l = e % 32`: its two low bits are bits `2(c % 4)..` of
/// `qs[c / 4][l]`, its high bit is bit `c` of `hmask[l]`, and its scale is number `e / 16`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockQ3K {
    pub hmask: [u8; 32],
    pub qs: [[u8; 32]; 2],
    /// Sixteen 6-bit scales: low four bits in the nibbles of bytes 0..8, top two bits in
    /// bytes 8..12.
    pub scales: [u8; 12],
    pub d: [u8; 2],
}
const _: () = assert!(size_of::<BlockQ3K>() == 110);
// SAFETY: repr(C), only u8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockQ3K {}

pub(crate) const QK: usize = 256;

/// The sixteen sub-block scales, recentred to -32..31. Scale `i` has its low four bits in
/// the low nibble of byte `i` (i < 8) or the high nibble of byte `i - 8`, and its top two bits
/// at bits `2(i / 4)..` of byte `8 + i % 4`.
#[inline]
pub(crate) fn unpack_scales(s: &[u8; 12]) -> [i32; 16] {
    std::array::from_fn(|i| {
        let low = if i < 8 { s[i] & 0xF } else { s[i - 8] >> 4 };
        let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        i32::from(low | (high << 4)) - 32
    })
}

/// Inverse of [`unpack_scales`]; every value must be in -32..31.
fn pack_scales(sc: &[i32; 16]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for (i, &v) in sc.iter().enumerate() {
        let u = (v + 32) as u8;
        if i < 8 {
            s[i] |= u & 0xF;
        } else {
            s[i - 8] |= (u & 0xF) << 4;
        }
        s[8 + i % 4] |= (u >> 4) << (2 * (i / 4));
    }
    s
}

/// Code of element `e` (0..256), -4..3.
#[inline]
fn code(b: &BlockQ3K, e: usize) -> i32 {
    let (c, l) = (e / 32, e % 32);
    let low = (b.qs[c / 4][l] >> (2 * (c % 4))) & 3;
    let high = (b.hmask[l] >> c) & 1;
    i32::from(low) - if high == 1 { 0 } else { 4 }
}

/// `out.len() == 256 * blocks.len()`.
pub(crate) fn dequantize(blocks: &[BlockQ3K], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        QK * blocks.len(),
        "q3_k dequantize: length mismatch"
    );
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        let sc = unpack_scales(&b.scales);
        for (e, y) in o.iter_mut().enumerate() {
            *y = d * sc[e / 16] as f32 * code(b, e) as f32;
        }
    }
}

/// Reference quantizer (simpler than ggml's): each sub-block's scale maps its element of
/// largest magnitude to code -4; the scales are quantized to 6 signed bits against the
/// super-block's largest (which maps to -32), and codes are chosen against the scales the
/// dequantizer reads.
pub(crate) fn quantize(x: &[f32], out: &mut [BlockQ3K]) {
    assert_eq!(x.len(), QK * out.len(), "q3_k quantize: length mismatch");
    let extreme = |v: &[f32]| {
        v.iter()
            .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m })
    };
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let sub: [f32; 16] = std::array::from_fn(|i| extreme(&xb[16 * i..16 * i + 16]) / -4.0);
        let d = round_to_f16(extreme(&sub) / -32.0);
        let sc: [i32; 16] = std::array::from_fn(|i| {
            if d != 0.0 {
                (sub[i] / d).round().clamp(-32.0, 31.0) as i32
            } else {
                0
            }
        });
        *b = BlockQ3K {
            hmask: [0; 32],
            qs: [[0; 32]; 2],
            scales: pack_scales(&sc),
            d: f32_to_f16(d),
        };
        for (e, &v) in xb.iter().enumerate() {
            let s = d * sc[e / 16] as f32;
            let q = if s != 0.0 {
                (v / s).round().clamp(-4.0, 3.0) as i32
            } else {
                0
            };
            let u = (q + 4) as u8;
            let (c, l) = (e / 32, e % 32);
            b.qs[c / 4][l] |= (u & 3) << (2 * (c % 4));
            b.hmask[l] |= (u >> 2) << c;
        }
    }
}

/// Scalar reference dot: per super-block one exact integer `Σ_i sc_i·Σ q·a` over the 16
/// sub-blocks, scaled by `d·d_a` (one f32 step per super-block).
pub(crate) fn dot_scalar(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        acc += f16_to_f32(wb.d) * ab.d * block_sumi(wb, ab) as f32;
    }
    acc
}

/// One super-block's exact integer `Σ sc·Σ q·a`.
fn block_sumi(wb: &BlockQ3K, ab: &BlockQ8K) -> i32 {
    let sc = unpack_scales(&wb.scales);
    let mut sumi = 0i32;
    for (i, &s) in sc.iter().enumerate() {
        let sub: i32 = (16 * i..16 * i + 16).map(|e| code(wb, e) * ab.q(e)).sum();
        sumi += s * sub;
    }
    sumi
}

/// Scalar reference in the order of ggml's tiled K-quant matmul: [`super::tiled_step`] per
/// super-block. (ggml's kernel biases the activations by +128 and subtracts the bias's
/// products again in integers, so its `s1` is this exact integer.)
pub(crate) fn dot_tiled_scalar(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
    w.iter().zip(a).fold(0.0, |acc, (wb, ab)| {
        super::tiled_step(acc, f16_to_f32(wb.d), block_sumi(wb, ab), None, ab.d)
    })
}

/// [`dot_tiled_scalar`] for several tokens.
pub(crate) fn dot_tiled_multi_scalar(w: &[BlockQ3K], a: &[BlockQ8K], out: &mut [f32]) {
    super::each_token(dot_tiled_scalar, w, a, out);
}

/// Scalar reference for several tokens: one [`dot_scalar`] per token.
pub(crate) fn dot_multi_scalar(w: &[BlockQ3K], a: &[BlockQ8K], out: &mut [f32]) {
    super::each_token(dot_scalar, w, a, out);
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{unpack_scales, BlockQ3K, BlockQ8K};
    use crate::formats::tiled_step;
    use crate::x86::{f16_to_f32, hsum_epi32, hsum_ps, load_i8x32, load_u8x32, mul_sum_i8_i8};

    /// One row against `out.len()` tokens, one [`dot`] each.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot_multi(w: &[BlockQ3K], a: &[BlockQ8K], out: &mut [f32]) {
        crate::formats::each_token(|w, a| dot(w, a), w, a, out)
    }

    // One row against `out.len()` tokens in the tiled matmul's order, one
    // [`super::dot_tiled_scalar`] each: each super-block unpacked once for all the tokens, then
    // per token the same exact integer, so the same bits.
    crate::x86::tiled_flavours! {
        fn dot_tiled_multi(w: &[BlockQ3K], a: &[BlockQ8K], out: &mut [f32]) {
            let n = w.len();
            out.fill(0.0);
            for (b, wb) in w.iter().enumerate() {
                let d = f16_to_f32(wb.d);
                let sc = unpack_scales(&wb.scales);
                let hm = load_u8x32(&wb.hmask);
                let q = [load_u8x32(&wb.qs[0]), load_u8x32(&wb.qs[1])];
                // Codes biased to 0..7 for `maddubs`; the bias, 4·Σ sc·Σ a, comes off through the
                // activation sums.
                let mut codes = [_mm256_setzero_si256(); 8];
                let mut scales = [_mm256_setzero_si256(); 8];
                for c in 0..8 {
                    codes[c] = biased_codes(q, hm, c);
                    // The chunk's first 16 elements (low 128 bits) are sub-block 2c, the rest 2c + 1.
                    let s = |i: usize| _mm_set1_epi16(sc[i] as i16);
                    scales[c] = _mm256_set_m128i(s(2 * c + 1), s(2 * c));
                }
                let s16: [i16; 16] = std::array::from_fn(|i| sc[i] as i16);
                // SAFETY: `s16` is 16 i16, 32 readable bytes, the width of the load.
                let sc16 = unsafe { _mm256_loadu_si256(s16.as_ptr().cast()) };
                for (t, o) in out.iter_mut().enumerate() {
                    let ab = &a[t * n + b];
                    let s1 = scaled_code_sums(&codes, &scales, &ab.qs);
                    // SAFETY: `bsums` is 16 i16, 32 readable bytes, the width of the load.
                    let bs = unsafe { _mm256_loadu_si256(ab.bsums.as_ptr().cast()) };
                    let bias = _mm256_slli_epi32::<2>(_mm256_madd_epi16(bs, sc16));
                    let s1 = hsum_epi32(_mm256_sub_epi32(s1, bias));
                    *o = tiled_step(*o, d, s1, None, ab.d);
                }
            }
        }
    }

    /// The 32 codes of 32-element chunk `c` plus 4 (0..7: the two low bits from the block's
    /// `qs` rows, the high bit from its `hmask`, both loaded).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn biased_codes(q: [__m256i; 2], hm: __m256i, c: usize) -> __m256i {
        let shifted = match c % 4 {
            0 => q[c / 4],
            1 => _mm256_srli_epi16::<2>(q[c / 4]),
            2 => _mm256_srli_epi16::<4>(q[c / 4]),
            _ => _mm256_srli_epi16::<6>(q[c / 4]),
        };
        let low = _mm256_and_si256(shifted, _mm256_set1_epi8(3));
        let bit = _mm256_set1_epi8((1u8 << c) as i8);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
        _mm256_or_si256(low, _mm256_and_si256(set, _mm256_set1_epi8(4)))
    }

    /// AVX2 dot in ggml's order for `vec_dot_q3_K_q8_K`: per super-block the scaled code
    /// products as exact integers in 8 lanes (lanes 0..4 hold the first 16 elements of each
    /// 32-element chunk, lanes 4..8 the second), fused-multiply-added into one 8-lane
    /// accumulator, added across lanes at the end. On x86 a row's result equals llama.cpp's
    /// bit for bit.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
        let four = _mm256_set1_epi8(4);
        let mut acc = _mm256_setzero_ps();
        for (wb, ab) in w.iter().zip(a) {
            crate::x86::prefetch_ahead_by::<{ crate::x86::K_QUANT_PREFETCH_BYTES }, _>(wb);
            let sc = unpack_scales(&wb.scales);
            let hm = load_u8x32(&wb.hmask);
            let q = [load_u8x32(&wb.qs[0]), load_u8x32(&wb.qs[1])];
            let mut sumi = _mm256_setzero_si256();
            for c in 0..8 {
                // The code in -4..3.
                let v = _mm256_sub_epi8(biased_codes(q, hm, c), four);
                let p = mul_sum_i8_i8(v, load_i8x32(&ab.qs[c]));
                let (s0, s1) = (sc[2 * c], sc[2 * c + 1]);
                let scales = _mm256_setr_epi32(s0, s0, s0, s0, s1, s1, s1, s1);
                sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(p, scales));
            }
            let d = ab.d * f16_to_f32(wb.d);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_ps(acc)
    }
}

/// Decode on 512-bit registers: a super-block's 64 bytes of 2-bit planes in one register, so
/// chunks c and c + 4 come out side by side (against [`crate::formats::q8_k::avx512`]'s
/// activation pairs), the high bits by a byte mask test, the biased codes' excess taken off by
/// the prepared `-4·Σa` each product starts from, the sixteen scales unpacked with vector
/// steps and applied with `vpdpwssd`. Folding the two halves gives the AVX2 dot's eight lanes
/// (the same exact integers), then its very float steps: a row equals [`avx2::dot`] bit for
/// bit.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512vnni {
    use std::arch::x86_64::*;

    use super::{BlockQ3K, BlockQ8K};
    use crate::formats::q8_k::avx512::{prepared_rows, ChunkPairs};
    use crate::x86::{f16_to_f32, hsum_ps};

    /// Many rows against one token (decode), one whole row after another.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn dot_rows(w: &[BlockQ3K], a: &[BlockQ8K], out: &mut [f32]) {
        // Rows too long for the prepared activations take the AVX2 dot: the same bits.
        let prepared = |w: &[_], a: &[BlockQ8K], p: &[ChunkPairs]| dot(w, a, p);
        prepared_rows(w, a, out, prepared, |w, a| super::avx2::dot(w, a));
    }

    /// The sixteen scales (-32..31) as i32 lanes whose high 16 bits are zero, for `vpdpwssd`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn scales(s: &[u8; 12]) -> __m512i {
        let low_bytes = u64::from_le_bytes(std::array::from_fn(|i| s[i]));
        let x = _mm_cvtsi64_si128(low_bytes as i64);
        let nibble = _mm_set1_epi8(0x0F);
        // Bytes 0..8: the low nibbles of bytes 0..8, then their high nibbles.
        let low = _mm_unpacklo_epi64(
            _mm_and_si128(x, nibble),
            _mm_and_si128(_mm_srli_epi16::<4>(x), nibble),
        );
        // Byte 4g + b: bits 2g.. of byte 8 + b, the top two bits of scale 4g + b.
        let top = _mm_set1_epi32(i32::from_le_bytes([s[8], s[9], s[10], s[11]]));
        let top = _mm_srlv_epi32(top, _mm_setr_epi32(0, 2, 4, 6));
        let top = _mm_and_si128(top, _mm_set1_epi8(3));
        let sc = _mm_sub_epi8(
            _mm_or_si128(low, _mm_slli_epi16::<4>(top)),
            _mm_set1_epi8(32),
        );
        _mm512_cvtepu16_epi32(_mm256_cvtepi8_epi16(sc))
    }

    /// Lane m of pair register c multiplies elements of scale `2c + m / 4` (m < 8, chunk c)
    /// or `2c + 8 + (m - 8) / 4` (chunk c + 4).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn scale_lanes(sc: __m512i, c: i32) -> __m512i {
        let (a, b, x, y) = (2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9);
        let idx = _mm512_setr_epi32(a, a, a, a, b, b, b, b, x, x, x, x, y, y, y, y);
        _mm512_permutexvar_epi32(idx, sc)
    }

    /// One row against one token's prepared activations.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    fn dot(w: &[BlockQ3K], a: &[BlockQ8K], p: &[ChunkPairs]) -> f32 {
        let three = _mm512_set1_epi8(3);
        let four = _mm512_set1_epi8(4);
        let mut acc = _mm256_setzero_ps();
        for ((wb, ab), pb) in w.iter().zip(a).zip(p) {
            crate::x86::prefetch_ahead_by::<{ crate::x86::K_QUANT_PREFETCH_BYTES }, _>(wb);
            // SAFETY: `qs` is 64 readable bytes, `hmask` 32, `pairs` and `neg4` 64 each: the
            // widths of the loads.
            let (planes, high) = unsafe {
                (
                    _mm512_loadu_si512(wb.qs.as_ptr().cast()),
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(wb.hmask.as_ptr().cast())),
                )
            };
            let sc = scales(&wb.scales);
            let mut sum = _mm512_setzero_si512();
            for c in 0..4 {
                let shifted = match c {
                    0 => planes,
                    1 => _mm512_srli_epi16::<2>(planes),
                    2 => _mm512_srli_epi16::<4>(planes),
                    _ => _mm512_srli_epi16::<6>(planes),
                };
                let low = _mm512_and_si512(shifted, three);
                // Chunk c's high bit is bit c of `hmask`, chunk c + 4's bit c + 4.
                let bits = _mm512_inserti64x4::<1>(
                    _mm512_set1_epi8(1 << c),
                    _mm256_set1_epi8((1u8 << (c + 4)) as i8),
                );
                let set = _mm512_test_epi8_mask(high, bits);
                let codes = _mm512_mask_add_epi8(low, set, low, four);
                // SAFETY: as above.
                let (x, start) = unsafe {
                    (
                        _mm512_load_si512(pb.pairs[c].as_ptr().cast()),
                        _mm512_load_si512(pb.neg4[c].as_ptr().cast()),
                    )
                };
                // Four products of codes in -4..3: within ±2,032, an i16.
                let prod = _mm512_dpbusd_epi32(start, codes, x);
                sum = _mm512_dpwssd_epi32(sum, prod, scale_lanes(sc, c as i32));
            }
            let lanes = _mm256_add_epi32(
                _mm512_castsi512_si256(sum),
                _mm512_extracti64x4_epi64::<1>(sum),
            );
            let d = ab.d * f16_to_f32(wb.d);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
        }
        hsum_ps(acc)
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
            use crate::formats::q3_k::{unpack_scales, BlockQ3K, BlockQ8K};
            use crate::neon::$flavour::sum_i8x16;
            use crate::neon::{load_i8x32, load_u8x32};

            /// One row against `out.len()` tokens, one exact [`dot`] each.
            #[allow(unused_unsafe)]
            #[target_feature(enable = $features)]
            pub(crate) fn dot_multi(w: &[BlockQ3K], a: &[BlockQ8K], out: &mut [f32]) {
                // SAFETY: this function runs only where its target features are enabled, and
                // they are `dot`'s (a closure does not inherit them, hence the block; the
                // baseline flavour's call needs none).
                crate::formats::each_token(|w, a| unsafe { dot(w, a) }, w, a, out)
            }

            /// NEON twin of the scalar `dot_scalar`, bit-identical to it.
            #[target_feature(enable = $features)]
            pub(crate) fn dot(w: &[BlockQ3K], a: &[BlockQ8K]) -> f32 {
                let three = vdupq_n_u8(3);
                let four = vdupq_n_u8(4);
                let mut acc = 0.0f32;
                for (wb, ab) in w.iter().zip(a) {
                    let sc = unpack_scales(&wb.scales);
                    let hm = load_u8x32(&wb.hmask);
                    let q = [load_u8x32(&wb.qs[0]), load_u8x32(&wb.qs[1])];
                    let mut sumi = 0i32;
                    for c in 0..8 {
                        let shift = vdupq_n_s8(-2 * (c % 4) as i8);
                        let bit = vdupq_n_u8(1 << c);
                        // One 16-element half: (low | 4·high) - 4, the code in -4..3.
                        let code = |q: uint8x16_t, h: uint8x16_t| {
                            let low = vandq_u8(vshlq_u8(q, shift), three);
                            let high = vandq_u8(vtstq_u8(h, bit), four);
                            vsubq_s8(
                                vreinterpretq_s8_u8(vorrq_u8(low, high)),
                                vreinterpretq_s8_u8(four),
                            )
                        };
                        let y = load_i8x32(&ab.qs[c]);
                        let qc = q[c / 4];
                        sumi += sc[2 * c] * sum_i8x16(code(qc.0, hm.0), y.0);
                        sumi += sc[2 * c + 1] * sum_i8x16(code(qc.1, hm.1), y.1);
                    }
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

    fn zeroed(n: usize) -> Vec<BlockQ3K> {
        vec![
            BlockQ3K {
                hmask: [0; 32],
                qs: [[0; 32]; 2],
                scales: [0; 12],
                d: [0; 2]
            };
            n
        ]
    }

    #[test]
    fn scale_packing_round_trips_and_follows_ggml() {
        let mut r = rng(100);
        for _ in 0..100 {
            let s: [u8; 12] = random_bytes(&mut r);
            let sc = unpack_scales(&s);
            assert_eq!(pack_scales(&sc), s);
            // ggml's formula, written out per index over 32-bit words.
            let w: [u32; 3] = std::array::from_fn(|k| {
                u32::from_le_bytes([s[4 * k], s[4 * k + 1], s[4 * k + 2], s[4 * k + 3]])
            });
            let (m1, m2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
            let words = [
                (w[0] & m2) | ((w[2] & m1) << 4),
                (w[1] & m2) | (((w[2] >> 2) & m1) << 4),
                ((w[0] >> 4) & m2) | (((w[2] >> 4) & m1) << 4),
                ((w[1] >> 4) & m2) | (((w[2] >> 6) & m1) << 4),
            ];
            for (i, &v) in sc.iter().enumerate() {
                let byte = words[i / 4].to_le_bytes()[i % 4];
                assert_eq!(v, i32::from(byte) - 32, "scale {i}");
            }
        }
    }

    #[test]
    fn dequantize_matches_the_layout() {
        // Scale 1 everywhere but sub-block 9 (-3); code of element e = (e * 5 + e / 32) % 8 - 4.
        let mut sc = [1i32; 16];
        sc[9] = -3;
        let want = |e: usize| ((e * 5 + e / 32) % 8) as i32 - 4;
        let mut b = zeroed(1)[0];
        b.d = f32_to_f16(0.5);
        b.scales = pack_scales(&sc);
        for e in 0..256 {
            let u = (want(e) + 4) as u8;
            let (c, l) = (e / 32, e % 32);
            b.qs[c / 4][l] |= (u & 3) << (2 * (c % 4));
            b.hmask[l] |= (u >> 2) << c;
        }
        let mut out = [0.0f32; 256];
        dequantize(&[b], &mut out);
        for (e, &y) in out.iter().enumerate() {
            assert_eq!(y, 0.5 * sc[e / 16] as f32 * want(e) as f32, "element {e}");
        }
    }

    #[test]
    fn round_trip_rms_error_budget() {
        // Budget: RMS error under 25% of the data's RMS on Gaussian-like weights (8 levels
        // per 16 elements; this seed measures about 20%).
        let mut r = rng(101);
        let x = random_f32(&mut r, 256 * 32, 1.0);
        let mut q = zeroed(32);
        quantize(&x, &mut q);
        let mut y = vec![0.0; x.len()];
        dequantize(&q, &mut y);
        let rel = rms_diff(&x, &y) / rms(&x);
        assert!(rel < 0.25, "relative rms error {rel}");
    }

    #[test]
    fn dot_within_activation_quantization_budget() {
        check_dot_budget_k(
            102,
            |x, n| {
                let mut q = zeroed(n);
                quantize(x, &mut q);
                q
            },
            dequantize,
            dot_scalar,
        );
    }

    /// Fully random bytes: every scale and code the format can express.
    fn random_blocks(r: &mut Rng, nb: usize) -> Vec<BlockQ3K> {
        (0..nb)
            .map(|_| BlockQ3K {
                hmask: random_bytes(r),
                qs: std::array::from_fn(|_| random_bytes(r)),
                scales: random_bytes(r),
                d: f32_to_f16(random_f32(r, 1, 0.001)[0]),
            })
            .collect()
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_is_bit_identical_to_scalar() {
        let mut r = rng(104);
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

    /// The AVX2 dot adds in ggml's order, not the reference's: it equals a scalar model of
    /// that order bit for bit, and the reference within the reordering bound.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_matches_scalar() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let mut r = rng(103);
        for nb in [1, 2, 3, 6, 7] {
            let w = random_blocks(&mut r, nb);
            let a = random_q8_k(&mut r, nb);
            // Lane k of a super-block: Σ over 32-element chunks of the scale of elements
            // 4k..4k+4 of the chunk times their products.
            let blocks = || {
                w.iter().zip(&a).map(|(wb, ab)| {
                    let sc = unpack_scales(&wb.scales);
                    let lanes: [i32; 8] = std::array::from_fn(|k| {
                        (0..8)
                            .map(|c| {
                                let e0 = 32 * c + 4 * k;
                                let p: i32 = (e0..e0 + 4).map(|e| code(wb, e) * ab.q(e)).sum();
                                sc[e0 / 16] * p
                            })
                            .sum()
                    });
                    (ab.d * f16_to_f32(wb.d), lanes)
                })
            };
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            let simd = unsafe { avx2::dot(&w, &a) };
            assert_eq!(simd.to_bits(), avx2_lanes_order(blocks()).to_bits(), "{nb}");
            assert_reordered_sum_close(simd, dot_scalar(&w, &a), lanes_terms(blocks()), nb + 8);
        }
    }

    /// The 512-bit decode equals the AVX2 dot (llama.cpp's order) bit for bit on every row,
    /// with random and extreme blocks, and past the prepared path's length.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_rows_equal_the_avx2_dot() {
        check_rows_equal_the_avx2_dot(
            106,
            random_blocks,
            // Every code -4 and every scale -32.
            |b| (b.hmask, b.qs, b.scales) = ([0; 32], [[0; 32]; 2], [0; 12]),
            avx512vnni::dot_rows,
            avx2::dot,
        );
    }

    /// The tiled matmul's order: [`check_tiled_order`] with random and extreme weights.
    #[test]
    fn tiled_order_avx2_equals_scalar_and_is_close_to_the_dot() {
        check_tiled_order(TiledOrder {
            seed: 105,
            random: random_blocks,
            // Every code -4 and every scale -32: the largest magnitudes the format makes.
            extreme: |b| (b.hmask, b.qs, b.scales) = ([0; 32], [[0; 32]; 2], [0; 12]),
            terms: |wb, ab| (ab.d * f16_to_f32(wb.d) * block_sumi(wb, ab) as f32).abs(),
            steps: |nb| nb + 2,
            dot: dot_scalar,
            tiled: dot_tiled_multi_scalar,
            #[cfg(target_arch = "x86_64")]
            avx2: avx2::dot_tiled_multi,
            #[cfg(target_arch = "x86_64")]
            vnni: Some(avx2::dot_tiled_multi_vnni),
            #[cfg(target_arch = "x86_64")]
            lanes: Some(crate::formats::k_lanes::avx512vnni::dot_multi::<BlockQ3K>),
        });
    }
}
