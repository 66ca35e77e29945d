//! IQ4_XS weights: IQ4_NL's non-linear 4-bit table in 256-element super-blocks of eight
//! 32-element sub-blocks, each with a 6-bit signed scale under one f16 super-scale,
//! `x = d·(ls - 32)·KVALUES[q]`. Dotted against Q8_K activations.

use super::iq4_nl::KVALUES;
use super::q8_k::BlockQ8K;
use crate::block::{f16_to_f32, f32_to_f16, round_to_f16, ByteBlock};

/// ggml's `block_iq4_xs`. Sub-block `j`'s scale has its low four bits in nibble `j % 2` of
/// `scales_l[j / 2]` and its top two bits at bits `2j..2j+2` of `scales_h` (little endian);
/// `qs[j]` holds its elements `0..16` in the low nibbles and `16..32` in the high ones.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockIq4Xs {
    pub d: [u8; 2],
    pub scales_h: [u8; 2],
    pub scales_l: [u8; 4],
    pub qs: [[u8; 16]; 8],
}
const _: () = assert!(size_of::<BlockIq4Xs>() == 136);
// SAFETY: repr(C), only u8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockIq4Xs {}

pub(crate) const QK: usize = 256;

impl BlockIq4Xs {
    /// The eight sub-block scales, recentred to -32..31.
    #[inline]
    pub(crate) fn scales(&self) -> [i32; 8] {
        let h = u16::from_le_bytes(self.scales_h);
        std::array::from_fn(|j| {
            let low = (self.scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
            let high = ((h >> (2 * j)) & 3) as u8;
            i32::from(low | (high << 4)) - 32
        })
    }

    /// Table value of element `l` (0..32) of sub-block `j`.
    #[inline]
    fn value(&self, j: usize, l: usize) -> i32 {
        let byte = self.qs[j][l % 16];
        let nibble = if l < 16 { byte & 0xF } else { byte >> 4 };
        i32::from(KVALUES[usize::from(nibble)])
    }
}

/// `out.len() == 256 * blocks.len()`.
pub(crate) fn dequantize(blocks: &[BlockIq4Xs], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        QK * blocks.len(),
        "iq4_xs dequantize: length mismatch"
    );
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = f16_to_f32(b.d);
        for (j, (&ls, o)) in b.scales().iter().zip(o.chunks_exact_mut(32)).enumerate() {
            let dl = d * ls as f32;
            for (l, y) in o.iter_mut().enumerate() {
                *y = dl * b.value(j, l) as f32;
            }
        }
    }
}

/// The table index whose value is nearest `v` (in units of the scale).
fn nearest(v: f32) -> u8 {
    let mut best = 0;
    for (i, &k) in KVALUES.iter().enumerate() {
        if (f32::from(k) - v).abs() < (f32::from(KVALUES[best]) - v).abs() {
            best = i;
        }
    }
    best as u8
}

/// Reference quantizer (simpler than ggml's search): each sub-block's scale maps its element
/// of largest magnitude to the table's end value -127; the scales are quantized to 6 signed
/// bits against the super-block's largest (which maps to -32), and indices are chosen against
/// the scales the dequantizer reads.
pub(crate) fn quantize(x: &[f32], out: &mut [BlockIq4Xs]) {
    assert_eq!(x.len(), QK * out.len(), "iq4_xs quantize: length mismatch");
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let sub_scale: [f32; 8] = std::array::from_fn(|j| {
            let extreme =
                xb[32 * j..32 * j + 32]
                    .iter()
                    .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
            extreme / -127.0
        });
        let s_extreme = sub_scale
            .iter()
            .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let d = round_to_f16(s_extreme / -32.0);
        let ls: [i32; 8] = std::array::from_fn(|j| {
            if d != 0.0 {
                (sub_scale[j] / d).round().clamp(-32.0, 31.0) as i32
            } else {
                0
            }
        });
        let (mut h, mut l) = (0u16, [0u8; 4]);
        for (j, &s) in ls.iter().enumerate() {
            let u = (s + 32) as u8;
            l[j / 2] |= (u & 0xF) << (4 * (j % 2));
            h |= u16::from(u >> 4) << (2 * j);
        }
        b.scales_l = l;
        b.scales_h = h.to_le_bytes();
        b.d = f32_to_f16(d);
        for (j, xs) in xb.chunks_exact(32).enumerate() {
            let dl = d * ls[j] as f32;
            let id = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            let idx: [u8; 32] = std::array::from_fn(|e| nearest(xs[e] * id));
            b.qs[j] = std::array::from_fn(|e| idx[e] | (idx[e + 16] << 4));
        }
    }
}

/// Scalar reference dot: per super-block one exact integer `Σ_j (ls_j - 32)·Σ KVALUES[q]·a`,
/// scaled by `d·d_a` (one f32 step per super-block, as for Q4_K).
pub(crate) fn dot_scalar(w: &[BlockIq4Xs], a: &[BlockQ8K]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        acc += f16_to_f32(wb.d) * ab.d * block_sumi(wb, ab) as f32;
    }
    acc
}

/// One super-block's exact integer `Σ_j (ls_j - 32)·Σ KVALUES[q]·a`.
fn block_sumi(wb: &BlockIq4Xs, ab: &BlockQ8K) -> i32 {
    let mut sumi = 0i32;
    for (j, &ls) in wb.scales().iter().enumerate() {
        let sub: i32 = (0..32)
            .map(|l| wb.value(j, l) * i32::from(ab.qs[j][l]))
            .sum();
        sumi += ls * sub;
    }
    sumi
}

/// Scalar reference in the order of ggml's tiled K-quant matmul: [`super::tiled_step`] per
/// super-block. (ggml's kernel multiplies the table values with the sign trick, exact since
/// activations never reach -128, so its `s1` is this exact integer.)
pub(crate) fn dot_tiled_scalar(w: &[BlockIq4Xs], a: &[BlockQ8K]) -> f32 {
    w.iter().zip(a).fold(0.0, |acc, (wb, ab)| {
        super::tiled_step(acc, f16_to_f32(wb.d), block_sumi(wb, ab), None, ab.d)
    })
}

/// [`dot_tiled_scalar`] for several tokens.
pub(crate) fn dot_tiled_multi_scalar(w: &[BlockIq4Xs], a: &[BlockQ8K], out: &mut [f32]) {
    super::each_token(dot_tiled_scalar, w, a, out);
}

/// Scalar reference for several tokens: one [`dot_scalar`] per token.
pub(crate) fn dot_multi_scalar(w: &[BlockIq4Xs], a: &[BlockQ8K], out: &mut [f32]) {
    super::each_token(dot_scalar, w, a, out);
}

/// The body of the tiled kernels, written once for both ways of adding a sub-block's scaled
/// pair sums (`$scaled_add(s, pairs, scale)`).
#[cfg(target_arch = "x86_64")]
macro_rules! tiled_multi {
    ($w:ident, $a:ident, $out:ident, $scaled_add:expr) => {{
        let table = table();
        let n = $w.len();
        $out.fill(0.0);
        for (b, wb) in $w.iter().enumerate() {
            let d = f16_to_f32(wb.d);
            // Table values, their magnitudes (the unsigned side of `maddubs`) and scales.
            let mut values = [_mm256_setzero_si256(); 8];
            let mut mags = [_mm256_setzero_si256(); 8];
            let mut scales = [_mm256_setzero_si256(); 8];
            for (j, &ls) in wb.scales().iter().enumerate() {
                values[j] = _mm256_shuffle_epi8(table, unpack_nibbles_32(&wb.qs[j]));
                mags[j] = _mm256_sign_epi8(values[j], values[j]);
                scales[j] = _mm256_set1_epi16(ls as i16);
            }
            for (t, o) in $out.iter_mut().enumerate() {
                let ab = &$a[t * n + b];
                let mut s1 = _mm256_setzero_si256();
                for j in 0..8 {
                    // The values' signs moved onto the activations (never -128): exact, and
                    // pair sums within 2·127·127.
                    let y = _mm256_sign_epi8(load_i8x32(&ab.qs[j]), values[j]);
                    let p = _mm256_maddubs_epi16(mags[j], y);
                    s1 = $scaled_add(s1, p, scales[j]);
                }
                *o = tiled_step(*o, d, hsum_epi32(s1), None, ab.d);
            }
        }
    }};
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{BlockIq4Xs, BlockQ8K, KVALUES};
    use crate::formats::tiled_step;
    use crate::x86::{
        f16_to_f32, hsum_epi32, hsum_ps, load_i8x32, mul_sum_i8_i8, unpack_nibbles_32,
    };

    /// One row against `out.len()` tokens, one [`dot`] each.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot_multi(w: &[BlockIq4Xs], a: &[BlockQ8K], out: &mut [f32]) {
        crate::formats::each_token(|w, a| dot(w, a), w, a, out)
    }

    /// One row against `out.len()` tokens in the tiled matmul's order, one
    /// [`super::dot_tiled_scalar`] each: each super-block unpacked once for all the tokens, then
    /// per token the same exact integer, so the same bits.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot_tiled_multi(w: &[BlockIq4Xs], a: &[BlockQ8K], out: &mut [f32]) {
        // Each sub-block's i16 pair sums times its scale, added into `s` as i32 pairs.
        tiled_multi!(w, a, out, |s, p, scale| _mm256_add_epi32(
            s,
            _mm256_madd_epi16(p, scale)
        ))
    }

    /// [`dot_tiled_multi`] with AVX-512 VNNI's `vpdpwssd` (the scale's multiply and the add in
    /// one instruction): the same exact integers, so the same bits.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
    pub(crate) fn dot_tiled_multi_vnni(w: &[BlockIq4Xs], a: &[BlockQ8K], out: &mut [f32]) {
        tiled_multi!(w, a, out, |s, p, scale| _mm256_dpwssd_epi32(s, p, scale))
    }

    /// [`KVALUES`] in both 128-bit lanes, for `shuffle_epi8`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn table() -> __m256i {
        // SAFETY: KVALUES is 16 readable bytes, the width of the load.
        let t = unsafe { _mm_loadu_si128(KVALUES.as_ptr().cast()) };
        _mm256_set_m128i(t, t)
    }

    /// AVX2 dot in ggml's order for `vec_dot_iq4_xs_q8_K`: per super-block the scaled table
    /// products as exact integers in 8 lanes, fused-multiply-added into one 8-lane accumulator,
    /// added across lanes at the end. On x86 a row's result equals llama.cpp's bit for bit.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot(w: &[BlockIq4Xs], a: &[BlockQ8K]) -> f32 {
        let table = table();
        let mut acc = _mm256_setzero_ps();
        for (wb, ab) in w.iter().zip(a) {
            crate::x86::prefetch_ahead_by::<{ crate::x86::K_QUANT_PREFETCH_BYTES }, _>(wb);
            let mut sumi = _mm256_setzero_si256();
            for (j, &ls) in wb.scales().iter().enumerate() {
                let v = _mm256_shuffle_epi8(table, unpack_nibbles_32(&wb.qs[j]));
                // Lane sums of |products| <= 4·127·127 times |ls| <= 32: far inside i32.
                let p = mul_sum_i8_i8(v, load_i8x32(&ab.qs[j]));
                sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(p, _mm256_set1_epi32(ls)));
            }
            let d = f16_to_f32(wb.d) * ab.d;
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_ps(acc)
    }
}

/// Decode on 512-bit registers: two sub-blocks' 32 bytes of nibbles spread over one register
/// (each 16-byte run twice, the second copy's high nibbles), looked up in the table plus 128
/// (`vpdpbusd` reads the weights unsigned) against the activations as they are, each product
/// starting from the prepared `-128·Σa` ([`crate::formats::q8_k::avx512::Neg128`]); the
/// scales unpacked with vector steps. Folding the two halves gives the AVX2 dot's eight lanes
/// (the same exact integers), then its very float steps: a row equals [`avx2::dot`] bit for
/// bit.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512vnni {
    use std::arch::x86_64::*;

    use super::{BlockIq4Xs, BlockQ8K};
    use crate::formats::q8_k::avx512::{prepared_rows, Neg128};
    use crate::x86::{f16_to_f32, hsum_ps};

    /// Many rows against one token (decode), one whole row after another.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn dot_rows(w: &[BlockIq4Xs], a: &[BlockQ8K], out: &mut [f32]) {
        // Rows too long for the prepared activations take the AVX2 dot: the same bits.
        let prepared = |w: &[_], a: &[BlockQ8K], p: &[Neg128]| dot(w, a, p);
        prepared_rows(w, a, out, prepared, |w, a| super::avx2::dot(w, a));
    }

    /// The eight scales (-32..31) in i32 lanes 0..8.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    fn scales(b: &BlockIq4Xs) -> __m512i {
        let l = _mm_cvtsi32_si128(i32::from_le_bytes(b.scales_l));
        let nibble = _mm_set1_epi8(0x0F);
        // Byte j: the low four bits of scale j (byte j / 2's low nibble for even j).
        let low = _mm_unpacklo_epi8(
            _mm_and_si128(l, nibble),
            _mm_and_si128(_mm_srli_epi16::<4>(l), nibble),
        );
        let low = _mm_cvtepu8_epi16(low);
        let h = _mm_set1_epi16(i16::from_le_bytes(b.scales_h));
        let high = _mm_srlv_epi16(h, _mm_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14));
        let high = _mm_slli_epi16::<4>(_mm_and_si128(high, _mm_set1_epi16(3)));
        let sc = _mm_sub_epi16(_mm_or_si128(low, high), _mm_set1_epi16(32));
        _mm512_zextsi256_si512(_mm256_cvtepi16_epi32(sc))
    }

    /// One row against one token's prepared activations.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    fn dot(w: &[BlockIq4Xs], a: &[BlockQ8K], p: &[Neg128]) -> f32 {
        const VALUES: [u8; 16] = crate::formats::iq4_nlx8::shifted_table(128);
        // SAFETY: the table is 16 readable bytes, the width of the load.
        let table = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(VALUES.as_ptr().cast()) });
        let nibble = _mm512_set1_epi8(0x0F);
        // 128-bit lanes 1 and 3 take the high nibbles.
        let shifts = _mm512_setr_epi64(
            0,
            0,
            0x0004_0004_0004_0004,
            0x0004_0004_0004_0004,
            0,
            0,
            0x0004_0004_0004_0004,
            0x0004_0004_0004_0004,
        );
        let mut acc = _mm256_setzero_ps();
        for ((wb, ab), pb) in w.iter().zip(a).zip(p) {
            crate::x86::prefetch_ahead_by::<{ crate::x86::K_QUANT_PREFETCH_BYTES }, _>(wb);
            let sc = scales(wb);
            let mut sum = _mm512_setzero_si512();
            for k in 0..4 {
                // SAFETY: sub-blocks 2k and 2k + 1 are 32 readable bytes of `qs`, their
                // activations 64 of `qs`, `neg128[k]` 64: the widths of the loads.
                let (q, x, start) = unsafe {
                    (
                        _mm256_loadu_si256(wb.qs[2 * k].as_ptr().cast()),
                        _mm512_loadu_si512(ab.qs[2 * k].as_ptr().cast()),
                        _mm512_load_si512(pb.neg128[k].as_ptr().cast()),
                    )
                };
                // 128-bit lanes: sub-block 2k's bytes twice, then 2k + 1's twice.
                let q = _mm512_castsi256_si512(q);
                let q = _mm512_shuffle_i64x2::<0b01_01_00_00>(q, q);
                let index = _mm512_and_si512(_mm512_srlv_epi16(q, shifts), nibble);
                let values = _mm512_shuffle_epi8(table, index);
                let prod = _mm512_dpbusd_epi32(start, values, x);
                let idx = _mm512_setr_epi32(
                    2 * k as i32,
                    2 * k as i32,
                    2 * k as i32,
                    2 * k as i32,
                    2 * k as i32,
                    2 * k as i32,
                    2 * k as i32,
                    2 * k as i32,
                    2 * k as i32 + 1,
                    2 * k as i32 + 1,
                    2 * k as i32 + 1,
                    2 * k as i32 + 1,
                    2 * k as i32 + 1,
                    2 * k as i32 + 1,
                    2 * k as i32 + 1,
                    2 * k as i32 + 1,
                );
                let scale = _mm512_permutexvar_epi32(idx, sc);
                // Lane sums within 4·127·127, times |scale| <= 32: far inside i32.
                sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(prod, scale));
            }
            let lanes = _mm256_add_epi32(
                _mm512_castsi512_si256(sum),
                _mm512_extracti64x4_epi64::<1>(sum),
            );
            let d = f16_to_f32(wb.d) * ab.d;
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
            use crate::formats::iq4_xs::{BlockIq4Xs, BlockQ8K, KVALUES};
            use crate::neon::$flavour::sum_i8x32;
            use crate::neon::{load_i8x32, load_u8x16};

            /// One row against `out.len()` tokens, one exact [`dot`] each.
            #[allow(unused_unsafe)]
            #[target_feature(enable = $features)]
            pub(crate) fn dot_multi(w: &[BlockIq4Xs], a: &[BlockQ8K], out: &mut [f32]) {
                // SAFETY: this function runs only where its target features are enabled, and
                // they are `dot`'s (a closure does not inherit them, hence the block; the
                // baseline flavour's call needs none).
                crate::formats::each_token(|w, a| unsafe { dot(w, a) }, w, a, out)
            }

            /// NEON twin of the scalar `dot_scalar`, bit-identical to it.
            #[target_feature(enable = $features)]
            pub(crate) fn dot(w: &[BlockIq4Xs], a: &[BlockQ8K]) -> f32 {
                // SAFETY: KVALUES is 16 readable bytes, the width of the load.
                let table = unsafe { vld1q_s8(KVALUES.as_ptr()) };
                let low4 = vdupq_n_u8(0x0F);
                let mut acc = 0.0f32;
                for (wb, ab) in w.iter().zip(a) {
                    let mut sumi = 0i32;
                    for (j, &ls) in wb.scales().iter().enumerate() {
                        let q = load_u8x16(&wb.qs[j]);
                        let values = (
                            vqtbl1q_s8(table, vandq_u8(q, low4)),
                            vqtbl1q_s8(table, vshrq_n_u8::<4>(q)),
                        );
                        sumi += ls * sum_i8x32(values, load_i8x32(&ab.qs[j]));
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

    fn zeroed(n: usize) -> Vec<BlockIq4Xs> {
        vec![
            BlockIq4Xs {
                d: [0; 2],
                scales_h: [0; 2],
                scales_l: [0; 4],
                qs: [[0; 16]; 8]
            };
            n
        ]
    }

    #[test]
    fn scales_follow_the_layout() {
        // Sub-block j's 6-bit scale u_j = 8j + 3 (3, 11, ..., 59): low nibble in scales_l,
        // top two bits in scales_h.
        let u: [u8; 8] = std::array::from_fn(|j| (8 * j + 3) as u8);
        let mut b = zeroed(1)[0];
        let mut h = 0u16;
        for (j, &uj) in u.iter().enumerate() {
            b.scales_l[j / 2] |= (uj & 0xF) << (4 * (j % 2));
            h |= u16::from(uj >> 4) << (2 * j);
        }
        b.scales_h = h.to_le_bytes();
        let want: [i32; 8] = std::array::from_fn(|j| i32::from(u[j]) - 32);
        assert_eq!(b.scales(), want);
    }

    #[test]
    fn dequantize_matches_the_layout() {
        let mut b = zeroed(1)[0];
        b.d = f32_to_f16(0.5);
        // Every scale 33 (ls - 32 = 1) but sub-block 3's, 30 (-2).
        let u = |j: usize| if j == 3 { 30u8 } else { 33 };
        let mut h = 0u16;
        for j in 0..8 {
            b.scales_l[j / 2] |= (u(j) & 0xF) << (4 * (j % 2));
            h |= u16::from(u(j) >> 4) << (2 * j);
        }
        b.scales_h = h.to_le_bytes();
        for j in 0..8 {
            b.qs[j] = std::array::from_fn(|l| ((l + j) % 16) as u8 | (((15 - l) as u8) << 4));
        }
        let mut out = [0.0f32; 256];
        dequantize(&[b], &mut out);
        for (e, &y) in out.iter().enumerate() {
            let (j, l) = (e / 32, e % 32);
            let idx = if l < 16 { (l + j) % 16 } else { 15 - (l - 16) };
            let ls = if j == 3 { -2.0 } else { 1.0 };
            assert_eq!(y, 0.5 * ls * f32::from(KVALUES[idx]), "element {e}");
        }
    }

    #[test]
    fn round_trip_rms_error_budget() {
        // Budget: RMS error under 10% of the data's RMS on Gaussian-like weights (IQ4_NL's
        // levels, with each sub-block's scale rounded to 1/32 of the largest one).
        let mut r = rng(90);
        let x = random_f32(&mut r, 256 * 32, 1.0);
        let mut q = zeroed(32);
        quantize(&x, &mut q);
        let mut y = vec![0.0; x.len()];
        dequantize(&q, &mut y);
        let rel = rms_diff(&x, &y) / rms(&x);
        assert!(rel < 0.1, "relative rms error {rel}");
    }

    #[test]
    fn dot_within_activation_quantization_budget() {
        check_dot_budget_k(
            91,
            |x, n| {
                let mut q = zeroed(n);
                quantize(x, &mut q);
                q
            },
            dequantize,
            dot_scalar,
        );
    }

    /// Fully random bytes: every scale and index the format can express.
    fn random_blocks(r: &mut Rng, nb: usize) -> Vec<BlockIq4Xs> {
        (0..nb)
            .map(|_| BlockIq4Xs {
                d: f32_to_f16(random_f32(r, 1, 0.001)[0]),
                scales_h: random_bytes(r),
                scales_l: random_bytes(r),
                qs: std::array::from_fn(|_| random_bytes(r)),
            })
            .collect()
    }

    /// The 512-bit decode equals the AVX2 dot (llama.cpp's order) bit for bit on every row,
    /// with random and extreme blocks, and past the prepared path's length.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_rows_equal_the_avx2_dot() {
        check_rows_equal_the_avx2_dot(
            96,
            random_blocks,
            // Every value -127 and every scale -32.
            |b| (b.scales_h, b.scales_l, b.qs) = ([0; 2], [0; 4], [[0; 16]; 8]),
            avx512vnni::dot_rows,
            avx2::dot,
        );
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_is_bit_identical_to_scalar() {
        let mut r = rng(94);
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
        let mut r = rng(93);
        for nb in [1, 2, 3, 6, 7] {
            let w = random_blocks(&mut r, nb);
            let a = random_q8_k(&mut r, nb);
            // Lane k of a super-block: Σ over sub-blocks of scale × products 4k..4k+4.
            let blocks = || {
                w.iter().zip(&a).map(|(wb, ab)| {
                    let ls = wb.scales();
                    let lanes: [i32; 8] = std::array::from_fn(|k| {
                        (0..8)
                            .map(|j| {
                                let p: i32 = (4 * k..4 * k + 4)
                                    .map(|l| wb.value(j, l) * i32::from(ab.qs[j][l]))
                                    .sum();
                                ls[j] * p
                            })
                            .sum()
                    });
                    (f16_to_f32(wb.d) * ab.d, lanes)
                })
            };
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            let simd = unsafe { avx2::dot(&w, &a) };
            assert_eq!(simd.to_bits(), avx2_lanes_order(blocks()).to_bits(), "{nb}");
            assert_reordered_sum_close(simd, dot_scalar(&w, &a), lanes_terms(blocks()), nb + 8);
        }
    }

    /// The tiled matmul's order: [`check_tiled_order`] with random and extreme weights.
    #[test]
    fn tiled_order_avx2_equals_scalar_and_is_close_to_the_dot() {
        check_tiled_order(TiledOrder {
            seed: 95,
            random: random_blocks,
            // Every value -127 and every scale -32: the largest magnitudes the format makes.
            extreme: |b| (b.scales_h, b.scales_l, b.qs) = ([0; 2], [0; 4], [[0; 16]; 8]),
            terms: |wb, ab| (ab.d * f16_to_f32(wb.d) * block_sumi(wb, ab) as f32).abs(),
            steps: |nb| nb + 2,
            dot: dot_scalar,
            tiled: dot_tiled_multi_scalar,
            #[cfg(target_arch = "x86_64")]
            avx2: avx2::dot_tiled_multi,
            #[cfg(target_arch = "x86_64")]
            vnni: Some(avx2::dot_tiled_multi_vnni),
            #[cfg(target_arch = "x86_64")]
            lanes: Some(crate::formats::k_lanes::avx512vnni::dot_multi::<BlockIq4Xs>),
        });
    }
}
