//! Q5_1 weights: 32 elements per block as 5-bit codes with an f16 scale and an f16 minimum,
//! `x = q * d + m`; the low four bits are packed two to a byte, the fifth bits in one 32-bit
//! word. Dotted against Q8_1-style activations, as Q4_1 is.

use super::q8_1::BlockQ8_1;
use crate::block::{f16_to_f32, f32_to_f16, round_to_f16, ByteBlock};

/// ggml's `block_q5_1`: element `j < 16` is `qs[j] & 0xF` with bit `j` of `qh` (read as a
/// little-endian u32) on top, element `j + 16` is `qs[j] >> 4` with bit `j + 16`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockQ5_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ5_1>() == 24);
// SAFETY: repr(C), only u8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockQ5_1 {}

pub(crate) const QK: usize = 32;

impl BlockQ5_1 {
    /// The 32 unsigned codes 0..31, in element order.
    #[inline]
    pub(crate) fn codes(&self) -> [i32; 32] {
        let qh = u32::from_le_bytes(self.qh);
        std::array::from_fn(|j| {
            let nibble = if j < 16 {
                self.qs[j] & 0xF
            } else {
                self.qs[j - 16] >> 4
            };
            i32::from(nibble) | (((qh >> j) & 1) << 4) as i32
        })
    }

    /// `d` then `m`: the block's first four bytes, for widening both in one instruction.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    pub(crate) fn dm_bytes(&self) -> &[u8; 4] {
        const { assert!(std::mem::offset_of!(BlockQ5_1, m) == 2) };
        // SAFETY: repr(C), alignment 1, `d` at offset 0 and `m` at offset 2 (asserted): the
        // first four bytes of the block are exactly `d` then `m`, borrowed for `self`'s life.
        unsafe { &*(self as *const Self).cast::<[u8; 4]>() }
    }
}

/// `out.len() == 32 * blocks.len()`.
pub(crate) fn dequantize(blocks: &[BlockQ5_1], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        QK * blocks.len(),
        "q5_1 dequantize: length mismatch"
    );
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (f16_to_f32(b.d), f16_to_f32(b.m));
        for (o, q) in o.iter_mut().zip(b.codes()) {
            *o = q as f32 * d + m;
        }
    }
}

/// Min/max quantizer (ggml's rule): codes 0 and 31 land on the block's minimum and maximum.
/// Codes are chosen against the f16 values the dequantizer will read.
pub(crate) fn quantize(x: &[f32], out: &mut [BlockQ5_1]) {
    assert_eq!(x.len(), QK * out.len(), "q5_1 quantize: length mismatch");
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let lo = xb.iter().copied().fold(f32::INFINITY, f32::min);
        let hi = xb.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let m = round_to_f16(lo);
        let d = round_to_f16((hi - lo) / 31.0);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let code = |v: f32| ((v - m) * id).round().clamp(0.0, 31.0) as u32;
        let mut qh = 0u32;
        for j in 0..16 {
            let (lo, hi) = (code(xb[j]), code(xb[j + 16]));
            b.qs[j] = ((lo & 0xF) | ((hi & 0xF) << 4)) as u8;
            qh |= ((lo >> 4) << j) | ((hi >> 4) << (j + 16));
        }
        b.qh = qh.to_le_bytes();
        b.d = f32_to_f16(d);
        b.m = f32_to_f16(m);
    }
}

/// Scalar reference dot. Per block: exact integer `Σ q·a`, scaled by `d·d_a`, plus the minimum
/// term `m·s` (`s = d_a·Σa` from the activation block), summed separately and added at the end.
pub(crate) fn dot_scalar(w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
    let mut acc = 0.0f32;
    let mut off = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        let sumi: i32 = wb
            .codes()
            .iter()
            .zip(&ab.qs)
            .map(|(&q, &y)| q * i32::from(y))
            .sum();
        acc += f16_to_f32(wb.d) * ab.d * sumi as f32;
        off += f16_to_f32(wb.m) * ab.s;
    }
    acc + off
}

/// Many rows against one token (decode): `out[r] = dot(row r, a)`.
pub(crate) fn dot_rows_scalar(w: &[BlockQ5_1], a: &[BlockQ8_1], out: &mut [f32]) {
    super::each_row(dot_scalar, w, a, out)
}

/// Scalar reference for several tokens: one [`dot_scalar`] per token.
pub(crate) fn dot_multi_scalar(w: &[BlockQ5_1], a: &[BlockQ8_1], out: &mut [f32]) {
    super::each_token(dot_scalar, w, a, out);
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{BlockQ5_1, BlockQ8_1};
    use crate::x86::{
        bits_to_bytes_32, f16x2_to_f32, for_token_groups, hsum_ps, load_i8x32, mul_sum_u8_i8,
        unpack_nibbles_32,
    };

    /// A block's 32 unsigned codes 0..31 as bytes: the nibbles with 0x10 where the fifth bit
    /// is set.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn codes(wb: &BlockQ5_1) -> __m256i {
        let high = _mm256_and_si256(bits_to_bytes_32(&wb.qh), _mm256_set1_epi8(0x10));
        _mm256_or_si256(unpack_nibbles_32(&wb.qs), high)
    }

    /// One row against one token. Per block: the exact integer dot of the unsigned codes with
    /// the activations in 8 i32 lanes, accumulated in one 8-lane FMA chain in block order, the
    /// minimum terms summed separately and added last: ggml's AVX2 order for
    /// `vec_dot_q5_1_q8_1`, so on x86 a row's result equals llama.cpp's bit for bit.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot(w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let mut off = 0.0f32;
        for (wb, ab) in w.iter().zip(a) {
            let (d, m) = f16x2_to_f32(wb.dm_bytes());
            off += m * ab.s;
            let p = mul_sum_u8_i8(codes(wb), load_i8x32(&ab.qs));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * ab.d), _mm256_cvtepi32_ps(p), acc);
        }
        hsum_ps(acc) + off
    }

    /// Many rows against one token (decode), one whole row after another: `out[r] = dot(row r, a)`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot_rows(w: &[BlockQ5_1], a: &[BlockQ8_1], out: &mut [f32]) {
        crate::formats::each_row(|w, a| dot(w, a), w, a, out)
    }

    /// One row against `out.len()` tokens (`a` holds them one after another).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot_multi(w: &[BlockQ5_1], a: &[BlockQ8_1], out: &mut [f32]) {
        for_token_groups!(dot, dot_n, w, a, out);
    }

    /// [`dot`] for `N` tokens at once, sharing each block's unpacking; per token the same
    /// integers in the same order, so the result does not depend on `N`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn dot_n<const N: usize>(w: &[BlockQ5_1], a: &[BlockQ8_1], out: &mut [f32]) {
        let nb = w.len();
        assert_eq!(a.len(), N * nb, "activation blocks for {N} tokens");
        let mut acc = [_mm256_setzero_ps(); N];
        let mut off = [0.0f32; N];
        for (i, wb) in w.iter().enumerate() {
            let (d, m) = f16x2_to_f32(wb.dm_bytes());
            let q = codes(wb);
            for t in 0..N {
                // SAFETY: t < N and i < nb, so t·nb + i < N·nb = a.len() (asserted above).
                let ab = unsafe { a.get_unchecked(t * nb + i) };
                off[t] += m * ab.s;
                let p = mul_sum_u8_i8(q, load_i8x32(&ab.qs));
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * ab.d), _mm256_cvtepi32_ps(p), acc[t]);
            }
        }
        for t in 0..N {
            out[t] = hsum_ps(acc[t]) + off[t];
        }
    }
}

/// Decode on AVX-512: the fifth bits merged in with one masked add (AVX-512BW), and each
/// block's lane sums by `vpdpbusd`, the same four products per lane as AVX2's `maddubs` +
/// `madd`. The same exact integers in the same FMA chain, so the same bits as [`avx2::dot`]
/// (and so a prompt's rows, which stay on AVX2, equal a decoded token's).
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512vnni {
    use std::arch::x86_64::*;

    use super::{BlockQ5_1, BlockQ8_1};
    use crate::x86::{f16x2_to_f32, hsum_ps, load_i8x32, unpack_nibbles_32};

    /// [`super::avx2::dot`] on VNNI.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn dot(w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
        let sixteen = _mm256_set1_epi8(0x10);
        let mut acc = _mm256_setzero_ps();
        let mut off = 0.0f32;
        for (wb, ab) in w.iter().zip(a) {
            let (d, m) = f16x2_to_f32(wb.dm_bytes());
            off += m * ab.s;
            let nibbles = unpack_nibbles_32(&wb.qs);
            let codes = _mm256_mask_add_epi8(nibbles, u32::from_le_bytes(wb.qh), nibbles, sixteen);
            let p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), codes, load_i8x32(&ab.qs));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * ab.d), _mm256_cvtepi32_ps(p), acc);
        }
        hsum_ps(acc) + off
    }

    /// Many rows against one token (decode), one whole row after another (two rows side by
    /// side decoded slower: see docs/benchmarks-log.md).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn dot_rows(w: &[BlockQ5_1], a: &[BlockQ8_1], out: &mut [f32]) {
        crate::formats::each_row(|w, a| dot(w, a), w, a, out)
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
            use crate::formats::q5_1::{BlockQ5_1, BlockQ8_1};
            use crate::neon::$flavour::sum_i8x32;
            use crate::neon::{bits_to_bytes_32, load_i8x32, load_u8x16};

            /// Many rows against one token (decode): one exact [`dot`] each.
            #[allow(unused_unsafe)]
            #[target_feature(enable = $features)]
            pub(crate) fn dot_rows(w: &[BlockQ5_1], a: &[BlockQ8_1], out: &mut [f32]) {
                // SAFETY: this function runs only where its target features are enabled, and
                // they are `dot`'s (a closure does not inherit them, hence the block; the
                // baseline flavour's call needs none).
                crate::formats::each_row(|w, a| unsafe { dot(w, a) }, w, a, out)
            }

            /// One row against `out.len()` tokens, one exact [`dot`] each.
            #[allow(unused_unsafe)]
            #[target_feature(enable = $features)]
            pub(crate) fn dot_multi(w: &[BlockQ5_1], a: &[BlockQ8_1], out: &mut [f32]) {
                // SAFETY: as in `dot_rows`: the features are this function's.
                crate::formats::each_token(|w, a| unsafe { dot(w, a) }, w, a, out)
            }

            /// NEON twin of the scalar `dot_scalar`, bit-identical to it: the same exact block
            /// integers, combined in the same order.
            #[target_feature(enable = $features)]
            pub(crate) fn dot(w: &[BlockQ5_1], a: &[BlockQ8_1]) -> f32 {
                let low4 = vdupq_n_u8(0x0F);
                let mut acc = 0.0f32;
                let mut off = 0.0f32;
                for (wb, ab) in w.iter().zip(a) {
                    let q = load_u8x16(&wb.qs);
                    let (h0, h1) = bits_to_bytes_32(&wb.qh, 0x10);
                    let codes = (
                        vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, low4), h0)),
                        vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8::<4>(q), h1)),
                    );
                    let sumi = sum_i8x32(codes, load_i8x32(&ab.qs));
                    acc += f16_to_f32(wb.d) * ab.d * sumi as f32;
                    off += f16_to_f32(wb.m) * ab.s;
                }
                acc + off
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

    fn zeroed(n: usize) -> Vec<BlockQ5_1> {
        vec![
            BlockQ5_1 {
                d: [0; 2],
                m: [0; 2],
                qh: [0; 4],
                qs: [0; 16]
            };
            n
        ]
    }

    #[test]
    fn dequantize_matches_the_layout() {
        // Element j's code is 31 - j: nibble (31 - j) & 15, fifth bit set for j < 16.
        let b = BlockQ5_1 {
            d: f32_to_f16(0.25),
            m: f32_to_f16(-1.0),
            qh: 0x0000_FFFFu32.to_le_bytes(),
            qs: std::array::from_fn(|j| ((15 - j) as u8) | (((15 - j) as u8) << 4)),
        };
        let mut out = [0.0f32; 32];
        dequantize(&[b], &mut out);
        for (j, &v) in out.iter().enumerate() {
            assert_eq!(v, (31 - j) as f32 * 0.25 - 1.0, "element {j}");
        }
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
            let lo = xb.iter().copied().fold(f32::INFINITY, f32::min);
            let hi = xb.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            // Half a step of (hi - lo) / 31, plus what f16 rounding of d and m can shift a code
            // boundary by (under 1% of the range here).
            let bound = (hi - lo) / 62.0 + (hi - lo) * 0.01;
            for (a, b) in xb.iter().zip(yb) {
                assert!((a - b).abs() <= bound, "{a} vs {b}");
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

    fn random_blocks(r: &mut Rng, nb: usize) -> Vec<BlockQ5_1> {
        (0..nb)
            .map(|_| BlockQ5_1 {
                d: f32_to_f16(random_f32(r, 1, 0.05)[0].abs()),
                m: f32_to_f16(random_f32(r, 1, 0.5)[0]),
                qh: random_bytes(r),
                qs: random_bytes(r),
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

    /// The AVX2 dot adds in ggml's 8-lane order, not the reference's: it equals a scalar model
    /// of that order bit for bit, and the reference within the reordering bound.
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
            let blocks = || {
                w.iter().zip(&a).map(|(wb, ab)| {
                    let q = wb.codes();
                    let prods: [i32; 32] = std::array::from_fn(|j| q[j] * i32::from(ab.qs[j]));
                    (f16_to_f32(wb.d) * ab.d, prods)
                })
            };
            let offs = || w.iter().zip(&a).map(|(wb, ab)| f16_to_f32(wb.m) * ab.s);
            let off = offs().fold(0.0f32, |s, t| s + t);
            let off_terms: f32 = offs().map(f32::abs).sum();
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            let simd = unsafe { avx2::dot(&w, &a) };
            let model = avx2_lane_order(blocks()) + off;
            assert_eq!(simd.to_bits(), model.to_bits(), "{nb}");
            let terms = lane_terms(blocks()) + off_terms;
            assert_reordered_sum_close(simd, dot_scalar(&w, &a), terms, 2 * nb + 8);
        }
    }

    /// The AVX-512 decode kernel equals the AVX2 one bit for bit (extreme blocks included).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vnni_decode_equals_avx2() {
        if !crate::required::test_needs("avx2") || !crate::required::test_needs("avx512vnni") {
            return;
        }
        let mut r = rng(35);
        for nb in [1, 2, 18, 49] {
            let mut w = random_blocks(&mut r, nb);
            w[0].qh = [0xFF; 4];
            w[0].qs = [0xFF; 16];
            let mut a = random_q8_1(&mut r, 3 * nb);
            a[0].qs = [-127; 32];
            let mut want = vec![0.0f32; 3];
            let mut got = vec![0.0f32; 3];
            for t in 0..3 {
                let a = &a[t * nb..(t + 1) * nb];
                // SAFETY: AVX2 and AVX-512 VNNI (with F, VL and BW) were detected above.
                unsafe {
                    want[t] = avx2::dot(&w, a);
                    got[t] = avx512vnni::dot(&w, a);
                }
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{nb} blocks");
            // Distinct rows, an odd and an even count (rows go two at a time).
            for n_rows in [4, 5] {
                let rows = random_blocks(&mut r, n_rows * nb);
                let mut rows_out = vec![0.0f32; n_rows];
                // SAFETY: as above.
                unsafe { avx512vnni::dot_rows(&rows, &a[..nb], &mut rows_out) };
                for (row, &g) in rows.chunks_exact(nb).zip(&rows_out) {
                    // SAFETY: as above.
                    let want = unsafe { avx2::dot(row, &a[..nb]) };
                    assert_eq!(g.to_bits(), want.to_bits(), "{nb} blocks, {n_rows} rows");
                }
            }
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
