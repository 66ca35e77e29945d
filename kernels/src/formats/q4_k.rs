//! Q4_K weights: 256-element super-blocks of eight 32-element sub-blocks, each with a 6-bit
//! scale and a 6-bit minimum under two f16 super-scales, `x = d·sc·q - dmin·m`. Dotted against
//! Q8_K activations, whose per-16 sums carry the minimum term.

use super::q8_k::BlockQ8K;
use crate::block::{f16_to_f32, f32_to_f16, round_to_f16, ByteBlock};

/// ggml's `block_q4_K`. `qs[c]` holds elements `64c..64c+32` in its low nibbles and
/// `64c+32..64c+64` in its high nibbles; sub-block `j` covers elements `32j..32j+32`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockQ4K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    /// Eight 6-bit scales and eight 6-bit minimums, packed as in ggml's `get_scale_min_k4`.
    pub scales: [u8; 12],
    pub qs: [[u8; 32]; 4],
}
const _: () = assert!(size_of::<BlockQ4K>() == 144);
// SAFETY: repr(C), only u8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockQ4K {}

pub(crate) const QK: usize = 256;

// Only the AVX2 path widens both halves at once.
#[cfg(target_arch = "x86_64")]
impl BlockQ4K {
    /// `d` then `dmin`: the block's first four bytes, for widening both in one instruction.
    #[inline]
    pub(crate) fn d_dmin_bytes(&self) -> &[u8; 4] {
        const { assert!(std::mem::offset_of!(BlockQ4K, dmin) == 2) };
        // SAFETY: repr(C), alignment 1, `d` at offset 0 and `dmin` at offset 2 (asserted): the
        // first four bytes of the block are exactly `d` then `dmin`, borrowed for `self`'s life.
        unsafe { &*(self as *const Self).cast::<[u8; 4]>() }
    }
}

/// Unpacks the 12 scale bytes into (scales, mins) for sub-blocks 0..8. Sub-blocks 0..4 keep
/// their values in the low 6 bits of bytes 0..8; sub-blocks 4..8 have their low 4 bits in bytes
/// 8..12 and their top 2 bits in the spare high bits of bytes 0..8.
#[inline]
pub(crate) fn unpack_scales(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    for j in 0..4 {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0xF) | ((s[j] >> 6) << 4);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
    (sc, mn)
}

/// Inverse of [`unpack_scales`]; every value must be < 64.
pub(crate) fn pack_scales(sc: &[u8; 8], mn: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        s[j + 4] = mn[j] | ((mn[j + 4] >> 4) << 6);
        s[j + 8] = (sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4);
    }
    s
}

/// Code of element `e` (0..256).
#[inline]
fn code(b: &BlockQ4K, e: usize) -> u8 {
    let byte = b.qs[e / 64][e % 32];
    if e % 64 < 32 {
        byte & 0xF
    } else {
        byte >> 4
    }
}

/// `out.len() == 256 * blocks.len()`.
pub(crate) fn dequantize(blocks: &[BlockQ4K], out: &mut [f32]) {
    assert_eq!(
        out.len(),
        QK * blocks.len(),
        "q4_k dequantize: length mismatch"
    );
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let (d, dmin) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
        let (sc, mn) = unpack_scales(&b.scales);
        for (e, y) in o.iter_mut().enumerate() {
            let j = e / 32;
            *y = d * f32::from(sc[j]) * f32::from(code(b, e)) - dmin * f32::from(mn[j]);
        }
    }
}

/// Fits `x ≈ s·q - m` with q in 0..=nmax, s >= 0, m >= 0 for one sub-block: start from the
/// min/max fit, then alternate assigning codes and solving least squares for (s, m), keeping
/// the best. Returns (s, m). (Q4_K uses nmax 15, Q5_K 31.)
pub(crate) fn fit_sub_block(x: &[f32], nmax: u8) -> (f32, f32) {
    let top = f32::from(nmax);
    let lo = x.iter().copied().fold(0.0f32, f32::min);
    let hi = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if hi <= lo {
        return (0.0, -lo);
    }
    let err = |s: f32, m: f32| -> f32 {
        x.iter()
            .map(|&v| {
                let q = ((v + m) / s).round().clamp(0.0, top);
                (s * q - m - v).powi(2)
            })
            .sum()
    };
    let (mut s, mut m) = ((hi - lo) / top, -lo);
    let mut best = (s, m, err(s, m));
    for _ in 0..4 {
        let n = x.len() as f32;
        let (mut sq, mut sqq, mut sx, mut sqx) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
        for &v in x {
            let q = ((v + m) / s).round().clamp(0.0, top);
            sq += q;
            sqq += q * q;
            sx += v;
            sqx += q * v;
        }
        let det = n * sqq - sq * sq;
        if det <= 0.0 {
            break;
        }
        s = (n * sqx - sq * sx) / det;
        m = (sq * sqx - sqq * sx) / det;
        if m < 0.0 {
            // The offset must be a non-negative minimum; refit the scale alone through zero.
            m = 0.0;
            s = sqx / sqq;
        }
        if s <= 0.0 {
            break;
        }
        let e = err(s, m);
        if e < best.2 {
            best = (s, m, e);
        }
    }
    (best.0, best.1)
}

/// Reference quantizer: per sub-block least-squares (scale, min), both quantized to 6 bits
/// against the super-block's largest, then codes chosen against the values the dequantizer
/// will actually compute.
pub(crate) fn quantize(x: &[f32], out: &mut [BlockQ4K]) {
    assert_eq!(x.len(), QK * out.len(), "q4_k quantize: length mismatch");
    for (xb, b) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let fits: Vec<(f32, f32)> = xb.chunks_exact(32).map(|s| fit_sub_block(s, 15)).collect();
        let max_s = fits.iter().fold(0.0f32, |a, f| a.max(f.0));
        let max_m = fits.iter().fold(0.0f32, |a, f| a.max(f.1));
        let d = round_to_f16(max_s / 63.0);
        let dmin = round_to_f16(max_m / 63.0);
        let six_bits = |v: f32, unit: f32| {
            if unit > 0.0 {
                (v / unit).round().clamp(0.0, 63.0) as u8
            } else {
                0
            }
        };
        let sc: [u8; 8] = std::array::from_fn(|j| six_bits(fits[j].0, d));
        let mn: [u8; 8] = std::array::from_fn(|j| six_bits(fits[j].1, dmin));
        let mut q = [0u8; QK];
        for (e, (&v, qe)) in xb.iter().zip(q.iter_mut()).enumerate() {
            let s = d * f32::from(sc[e / 32]);
            let m = dmin * f32::from(mn[e / 32]);
            *qe = if s > 0.0 {
                ((v + m) / s).round().clamp(0.0, 15.0) as u8
            } else {
                0
            };
        }
        for c in 0..4 {
            for l in 0..32 {
                b.qs[c][l] = q[64 * c + l] | (q[64 * c + 32 + l] << 4);
            }
        }
        b.scales = pack_scales(&sc, &mn);
        b.d = f32_to_f16(d);
        b.dmin = f32_to_f16(dmin);
    }
}

/// Σ over sub-blocks of `mn[j]` times the activation sum of that sub-block: the integer part of
/// the minimum term, from the activations' per-16 sums.
#[inline]
pub(crate) fn min_term(mn: &[u8; 8], a: &BlockQ8K) -> i32 {
    (0..8)
        .map(|j| i32::from(mn[j]) * (i32::from(a.bsums[2 * j]) + i32::from(a.bsums[2 * j + 1])))
        .sum()
}

/// Scalar reference dot. Per super-block, two exact integers (`Σ sc·Σq·a` and `Σ m·Σa`) are
/// combined in f32 as `d·d_a·sumi - dmin·d_a·summ`; the AVX2 path computes the same integers,
/// so the two agree bit for bit.
pub(crate) fn dot_scalar(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    let mut acc = 0.0f32;
    for (wb, ab) in w.iter().zip(a) {
        let (sc, mn) = unpack_scales(&wb.scales);
        let mut sumi = 0i32;
        for (j, &s) in sc.iter().enumerate() {
            let sub: i32 = (32 * j..32 * j + 32)
                .map(|e| i32::from(code(wb, e)) * ab.q(e))
                .sum();
            sumi += i32::from(s) * sub;
        }
        let summ = min_term(&mn, ab);
        acc += f16_to_f32(wb.d) * ab.d * sumi as f32 - f16_to_f32(wb.dmin) * ab.d * summ as f32;
    }
    acc
}

/// Scalar reference for several tokens: one [`dot_scalar`] per token.
pub(crate) fn dot_multi_scalar(w: &[BlockQ4K], a: &[BlockQ8K], out: &mut [f32]) {
    super::each_token(dot_scalar, w, a, out);
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{unpack_scales, BlockQ4K, BlockQ8K};
    use crate::x86::{f16x2_to_f32, hsum_ps, load_i8x32, load_u8x32};

    /// One row against `out.len()` tokens, one [`dot`] each.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot_multi(w: &[BlockQ4K], a: &[BlockQ8K], out: &mut [f32]) {
        let n = w.len();
        for (t, o) in out.iter_mut().enumerate() {
            *o = dot(w, &a[t * n..(t + 1) * n]);
        }
    }

    /// AVX2 twin of [`super::dot_scalar`]: the same exact integers per 8-lane group, combined
    /// in ggml's order (scale sums in an 8-lane FMA accumulator, minimum sums in a 4-lane one,
    /// one step per super-block), so on x86 a row's result equals llama.cpp's bit for bit.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn dot(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
        let low4 = _mm256_set1_epi8(0x0F);
        let mut acc = _mm256_setzero_ps();
        let mut acc_m = _mm_setzero_ps();
        for (wb, ab) in w.iter().zip(a) {
            // Read in the GGUF layout straight from memory in decode: ask for it ahead, as the
            // Q6_K dot does.
            crate::x86::prefetch_ahead_by::<{ crate::x86::K_QUANT_PREFETCH_BYTES }, _>(wb);
            let (d, dmin) = f16x2_to_f32(wb.d_dmin_bytes());
            let (sc, mn) = unpack_scales(&wb.scales);
            // Minimum term: lane k = m[2k]·(b[4k]+b[4k+1]) + m[2k+1]·(b[4k+2]+b[4k+3]).
            // SAFETY: `bsums` is 16 i16, 32 readable bytes; each load reads 16 of them.
            let (b_lo, b_hi) = unsafe {
                let p = ab.bsums.as_ptr();
                (_mm_loadu_si128(p.cast()), _mm_loadu_si128(p.add(8).cast()))
            };
            // SAFETY: `mn` is 8 readable bytes, the width of a 64-bit load.
            let mins = _mm_cvtepu8_epi16(unsafe { _mm_loadl_epi64(mn.as_ptr().cast()) });
            let prod = _mm_madd_epi16(mins, _mm_hadd_epi16(b_lo, b_hi));
            acc_m = _mm_fmadd_ps(_mm_set1_ps(-ab.d * dmin), _mm_cvtepi32_ps(prod), acc_m);
            let mut sumi = _mm256_setzero_si256();
            for c in 0..4 {
                let q = load_u8x32(&wb.qs[c]);
                let lo = _mm256_and_si256(q, low4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), low4);
                // Codes <= 15 and activations >= -127: i16 pair sums stay far from saturation,
                // and the second madd applies the sub-block's 6-bit scale while widening.
                let p_lo = _mm256_maddubs_epi16(lo, load_i8x32(&ab.qs[2 * c]));
                let p_hi = _mm256_maddubs_epi16(hi, load_i8x32(&ab.qs[2 * c + 1]));
                let p_lo = _mm256_madd_epi16(p_lo, _mm256_set1_epi16(i16::from(sc[2 * c])));
                let p_hi = _mm256_madd_epi16(p_hi, _mm256_set1_epi16(i16::from(sc[2 * c + 1])));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p_lo, p_hi));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(ab.d * d), _mm256_cvtepi32_ps(sumi), acc);
        }
        let acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
        let acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
        hsum_ps(acc) + _mm_cvtss_f32(acc_m)
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
            use crate::formats::q4_k::{min_term, unpack_scales, BlockQ4K, BlockQ8K};
            use crate::neon::$flavour::sum_i8x32;
            use crate::neon::{load_i8x32, load_u8x32};

            /// One row against `out.len()` tokens, one exact [`dot`] each (NEON gains little from
            /// sharing the unpacking, which is a couple of instructions per block).
            #[allow(unused_unsafe)]
            #[target_feature(enable = $features)]
            pub(crate) fn dot_multi(w: &[BlockQ4K], a: &[BlockQ8K], out: &mut [f32]) {
                // SAFETY: as in `dot_rows`: the features are this function's.
                crate::formats::each_token(|w, a| unsafe { dot(w, a) }, w, a, out)
            }

            /// NEON twin of the scalar `dot_scalar`, bit-identical to it.
            #[target_feature(enable = $features)]
            pub(crate) fn dot(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
                let low4 = vdupq_n_u8(0x0F);
                let mut acc = 0.0f32;
                for (wb, ab) in w.iter().zip(a) {
                    let (sc, mn) = unpack_scales(&wb.scales);
                    let mut sumi = 0i32;
                    for c in 0..4 {
                        let q = load_u8x32(&wb.qs[c]);
                        let lo = (
                            vreinterpretq_s8_u8(vandq_u8(q.0, low4)),
                            vreinterpretq_s8_u8(vandq_u8(q.1, low4)),
                        );
                        let hi = (
                            vreinterpretq_s8_u8(vshrq_n_u8::<4>(q.0)),
                            vreinterpretq_s8_u8(vshrq_n_u8::<4>(q.1)),
                        );
                        sumi += i32::from(sc[2 * c]) * sum_i8x32(lo, load_i8x32(&ab.qs[2 * c]));
                        sumi +=
                            i32::from(sc[2 * c + 1]) * sum_i8x32(hi, load_i8x32(&ab.qs[2 * c + 1]));
                    }
                    let summ = min_term(&mn, ab);
                    acc += f16_to_f32(wb.d) * ab.d * sumi as f32
                        - f16_to_f32(wb.dmin) * ab.d * summ as f32;
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

    pub(crate) fn zeroed(n: usize) -> Vec<BlockQ4K> {
        vec![
            BlockQ4K {
                d: [0; 2],
                dmin: [0; 2],
                scales: [0; 12],
                qs: [[0; 32]; 4]
            };
            n
        ]
    }

    #[test]
    fn scale_packing_round_trips_all_six_bit_values() {
        for base in 0..64u8 {
            let b = usize::from(base);
            let sc: [u8; 8] = std::array::from_fn(|j| ((b + 7 * j) % 64) as u8);
            let mn: [u8; 8] = std::array::from_fn(|j| ((3 * b + 11 * j) % 64) as u8);
            assert_eq!(unpack_scales(&pack_scales(&sc, &mn)), (sc, mn));
        }
    }

    #[test]
    fn unpack_follows_ggml_get_scale_min_k4() {
        // ggml's formula written out per index, on arbitrary bytes.
        let mut r = rng(40);
        for _ in 0..100 {
            let q: [u8; 12] = random_bytes(&mut r);
            let (sc, mn) = unpack_scales(&q);
            for j in 0..8 {
                let (d, m) = if j < 4 {
                    (q[j] & 63, q[j + 4] & 63)
                } else {
                    (
                        (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
                        (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
                    )
                };
                assert_eq!((sc[j], mn[j]), (d, m));
            }
        }
    }

    #[test]
    fn dequantize_matches_the_layout() {
        // Scale 1 and min 0 everywhere except sub-block 5 (scale 2, min 3); code = e % 16.
        let mut sc = [1u8; 8];
        let mut mn = [0u8; 8];
        sc[5] = 2;
        mn[5] = 3;
        let mut b = zeroed(1)[0];
        b.d = f32_to_f16(1.0);
        b.dmin = f32_to_f16(0.5);
        b.scales = pack_scales(&sc, &mn);
        for c in 0..4 {
            for l in 0..32 {
                b.qs[c][l] = ((64 * c + l) % 16) as u8 | ((((64 * c + 32 + l) % 16) as u8) << 4);
            }
        }
        let mut out = [0.0f32; 256];
        dequantize(&[b], &mut out);
        for (e, &y) in out.iter().enumerate() {
            let want = if e / 32 == 5 {
                2.0 * (e % 16) as f32 - 1.5
            } else {
                (e % 16) as f32
            };
            assert_eq!(y, want, "element {e}");
        }
    }

    #[test]
    fn round_trip_rms_error_budget() {
        // Budget: RMS error under 9% of the data's RMS on Gaussian-like weights (this seed
        // measures 8.1%). For scale: uniform rounding over a 32-value block's range of about
        // ±2.4σ in 15 steps alone costs 0.32σ/√12 ≈ 9%; the least-squares fit recovers a bit.
        let mut r = rng(41);
        let x = random_f32(&mut r, 256 * 32, 1.0);
        let mut q = zeroed(32);
        quantize(&x, &mut q);
        let mut y = vec![0.0; x.len()];
        dequantize(&q, &mut y);
        let rel = rms_diff(&x, &y) / rms(&x);
        assert!(rel < 0.09, "relative rms error {rel}");
        // And no single element is off by more than a full step of its super-block's range.
        for (xb, yb) in x.chunks_exact(256).zip(y.chunks_exact(256)) {
            let lo = xb.iter().copied().fold(0.0f32, f32::min);
            let hi = xb.iter().copied().fold(0.0f32, f32::max);
            for (a, b) in xb.iter().zip(yb) {
                assert!((a - b).abs() <= (hi - lo) / 15.0, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn dot_within_activation_quantization_budget() {
        check_dot_budget_k(
            42,
            |x, n| {
                let mut q = zeroed(n);
                quantize(x, &mut q);
                q
            },
            dequantize,
            dot_scalar,
        );
    }

    /// Fully random bytes: every scale/min/code combination the format can express.
    fn random_blocks(r: &mut Rng, nb: usize) -> Vec<BlockQ4K> {
        (0..nb)
            .map(|_| BlockQ4K {
                d: f32_to_f16(random_f32(r, 1, 0.01)[0]),
                dmin: f32_to_f16(random_f32(r, 1, 0.01)[0]),
                scales: random_bytes(r),
                qs: std::array::from_fn(|_| random_bytes(r)),
            })
            .collect()
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_is_bit_identical_to_scalar() {
        let mut r = rng(44);
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

    /// Σ of the magnitudes of every product the SIMD lanes add up: a bound on Σ|lane terms|.
    #[cfg(target_arch = "x86_64")]
    fn abs_terms(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
        w.iter()
            .zip(a)
            .map(|(wb, ab)| {
                let (sc, mn) = unpack_scales(&wb.scales);
                let (d, dmin) = (f16_to_f32(wb.d).abs(), f16_to_f32(wb.dmin).abs());
                let codes: f32 = (0..256)
                    .map(|e| {
                        f32::from(sc[e / 32]) * f32::from(code(wb, e)) * (ab.q(e) as f32).abs()
                    })
                    .sum();
                let mins: f32 = (0..16)
                    .map(|i| f32::from(mn[i / 2]) * f32::from(ab.bsums[i]).abs())
                    .sum();
                ab.d.abs() * (d * codes + dmin * mins)
            })
            .sum()
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_matches_scalar() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let mut r = rng(43);
        for nb in [1, 2, 3, 6, 7] {
            let w = random_blocks(&mut r, nb);
            let a = random_q8_k(&mut r, nb);
            // SAFETY: guarded by the avx2+fma+f16c detection above.
            let simd = unsafe { avx2::dot(&w, &a) };
            // 8 + 4 lanes per super-block, accumulated in a different order than the reference.
            assert_reordered_sum_close(simd, dot_scalar(&w, &a), abs_terms(&w, &a), 12 * nb);
        }
    }
}
