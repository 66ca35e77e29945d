//! Q8_0 repacked for the AVX2 kernels: eight rows interleaved block by block, as
//! [`super::q4x8`] does for the 4-bit formats. For the default model this is the 49152-row lm
//! head (its tied embedding), a third of the bytes each decoded token reads.
//!
//! Layout of one [`BlockQ8_0x8`]: the 8 rows' f16 scales, then 256 bytes where byte
//! `32k + 4r + i` is row r's element `4k + i` (k < 8, i < 4): one 32-byte load is quad k of all
//! 8 rows, lane r holding row r's.
//!
//! Numerics: ggml's order, as the GGUF layout's AVX2 dot ([`super::q8_0`]) adds: per block, lane
//! k's i32 sum of elements 4k..4k+4 (through the same sign trick, so the same saturation rules)
//! scaled into its own accumulator with a fused multiply-add, the eight lanes added at the end
//! as ggml's `hsum` adds them. Every row equals that dot, and llama.cpp's, bit for bit.

use super::q4x8::ROWS;
use super::q8_0::BlockQ8_0;
use super::q8_1::BlockQ8_1;
use crate::block::{f16_to_f32, ByteBlock};

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockQ8_0x8 {
    pub d: [[u8; 2]; ROWS],
    pub qs: [i8; 32 * ROWS],
}
const _: () = assert!(size_of::<BlockQ8_0x8>() == ROWS * size_of::<BlockQ8_0>());
// SAFETY: repr(C), only u8/i8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockQ8_0x8 {}

/// Interleaves a whole matrix (8g rows of `nb` GGUF blocks, row after row) into `g * nb`
/// blocks, group after group, in parallel (see [`super::q4x8::pack`]).
pub(crate) fn pack(rows: &[BlockQ8_0], nb: usize) -> Vec<BlockQ8_0x8> {
    super::q4x8::interleave_all(rows.len(), nb, |g, b| {
        let mut out = BlockQ8_0x8 {
            d: [[0; 2]; ROWS],
            qs: [0; 32 * ROWS],
        };
        for r in 0..ROWS {
            let src = &rows[(g * ROWS + r) * nb + b];
            out.d[r] = src.d;
            for k in 0..8 {
                let at = 32 * k + 4 * r;
                out.qs[at..at + 4].copy_from_slice(&src.qs[4 * k..4 * k + 4]);
            }
        }
        out
    })
}

/// Scalar reference: one group of 8 rows (`w`, `nb` blocks) against `t = out.len() / 8` tokens
/// (`a`: `t * nb` blocks, token after token; `_sums` unused, Q8_0 has no offset).
pub(crate) fn gemm_scalar(w: &[BlockQ8_0x8], a: &[BlockQ8_1], _sums: &[i32], out: &mut [f32]) {
    let nb = w.len();
    for (t, o) in out.chunks_exact_mut(ROWS).enumerate() {
        let a = &a[t * nb..(t + 1) * nb];
        for (r, o) in o.iter_mut().enumerate() {
            let mut lanes = [0.0f32; 8];
            for (wb, ab) in w.iter().zip(a) {
                let dd = f16_to_f32(wb.d[r]) * ab.d;
                for (k, lane) in lanes.iter_mut().enumerate() {
                    let quad: i32 = (0..4)
                        .map(|i| i32::from(wb.qs[32 * k + 4 * r + i]) * i32::from(ab.qs[4 * k + i]))
                        .sum();
                    *lane = dd.mul_add(quad as f32, *lane);
                }
            }
            *o = crate::attention::hsum8(&lanes);
        }
    }
}

/// Scalar reference for decode: every group of 8 rows in `w` (`out.len() / 8` groups of
/// `a.len()` blocks, group after group) against the one token `a`.
pub(crate) fn gemv_scalar(w: &[BlockQ8_0x8], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
    for (wg, o) in w.chunks_exact(a.len()).zip(out.chunks_exact_mut(ROWS)) {
        gemm_scalar(wg, a, sums, o);
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{BlockQ8_0x8, BlockQ8_1, ROWS};
    use crate::x86::mul_sum_i8_i8;

    /// [`super::gemm_scalar`] with AVX2, two tokens per pass (eight accumulators each).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn gemm(w: &[BlockQ8_0x8], a: &[BlockQ8_1], _sums: &[i32], out: &mut [f32]) {
        let nb = w.len();
        for (a, out) in a.chunks(2 * nb).zip(out.chunks_mut(2 * ROWS)) {
            match out.len() / ROWS {
                1 => gemm_n::<1>(w, a, out),
                _ => gemm_n::<2>(w, a, out),
            }
        }
    }

    /// [`super::gemv_scalar`] with AVX2: one call for a whole slice of groups.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn gemv(w: &[BlockQ8_0x8], a: &[BlockQ8_1], _sums: &[i32], out: &mut [f32]) {
        for (wg, o) in w.chunks_exact(a.len()).zip(out.chunks_exact_mut(ROWS)) {
            gemm_n::<1>(wg, a, o);
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn gemm_n<const T: usize>(w: &[BlockQ8_0x8], a: &[BlockQ8_1], out: &mut [f32]) {
        let nb = w.len();
        assert!(a.len() >= T * nb && out.len() >= T * ROWS);
        let mut acc = [[_mm256_setzero_ps(); 8]; T];
        for (b, wb) in w.iter().enumerate() {
            if T == 1 {
                crate::x86::prefetch_ahead(wb);
            }
            // SAFETY: 8 halves are 16 readable bytes, the width of the load.
            let d = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(wb.d.as_ptr().cast()) });
            for k in 0..8 {
                // SAFETY: 32k + 32 <= 256, the length of `qs`.
                let v = unsafe { _mm256_loadu_si256(wb.qs.as_ptr().add(32 * k).cast()) };
                for (t, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: t < T and b < nb, so t·nb + b < T·nb <= a.len() (asserted).
                    let ab = unsafe { a.get_unchecked(t * nb + b) };
                    // SAFETY: 4k + 4 <= 32, the activation block's length.
                    let four = unsafe { ab.qs.as_ptr().add(4 * k).cast::<i32>().read_unaligned() };
                    let p = mul_sum_i8_i8(v, _mm256_set1_epi32(four));
                    let dd = _mm256_mul_ps(d, _mm256_set1_ps(ab.d));
                    acc[k] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc[k]);
                }
            }
        }
        for (t, l) in acc.iter().enumerate() {
            let r = crate::x86::hsum_lanes(l);
            // SAFETY: 8t + 8 <= T·8 <= out.len() (asserted above).
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(ROWS * t), r) };
        }
    }
}

/// Decode on 512-bit registers, one group of 8 rows after another (one sequential stream:
/// pairing groups made decode slower, docs/benchmarks-log.md): each register holds quads k and k + 1 of
/// the 8 rows, against activation quad k broadcast to the low half and k + 1 to the high half.
/// Each lane's integer is [`avx2`]'s (the sign moved onto the activations by a masked
/// negation, as in [`avx512vnni_pairs`]), then the same FMA per lane and block into the same
/// eight accumulators (two to a register), and the same sum of them: equal to
/// [`avx2::gemv`] bit for bit.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512vnni {
    use std::arch::x86_64::*;

    use super::{BlockQ8_0x8, BlockQ8_1, ROWS};

    /// [`super::gemv_scalar`]'s order: every group of 8 rows in `w` against the one token `a`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn gemv(w: &[BlockQ8_0x8], a: &[BlockQ8_1], _sums: &[i32], out: &mut [f32]) {
        for (wg, o) in w.chunks_exact(a.len()).zip(out.chunks_exact_mut(ROWS)) {
            group(wg, a, o);
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    fn group(w: &[BlockQ8_0x8], a: &[BlockQ8_1], out: &mut [f32]) {
        assert!(a.len() == w.len() && out.len() >= ROWS);
        let zero = _mm512_setzero_si512();
        // Lanes 0..8 take an activation quad, lanes 8..16 the next one.
        let spread: [__m512i; 4] = std::array::from_fn(|m| {
            let (k0, k1) = (2 * m as i32, 2 * m as i32 + 1);
            _mm512_setr_epi32(
                k0, k0, k0, k0, k0, k0, k0, k0, k1, k1, k1, k1, k1, k1, k1, k1,
            )
        });
        let mut acc = [_mm512_setzero_ps(); 4];
        for (wb, ab) in w.iter().zip(a) {
            crate::x86::prefetch_ahead(wb);
            // SAFETY: 8 halves are 16 readable bytes, the activation block 32: the widths of
            // the loads.
            let (d, x) = unsafe {
                (
                    _mm256_cvtph_ps(_mm_loadu_si128(wb.d.as_ptr().cast())),
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(ab.qs.as_ptr().cast())),
                )
            };
            let dd = _mm256_mul_ps(d, _mm256_set1_ps(ab.d));
            let dd = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(dd)));
            for (m, acc) in acc.iter_mut().enumerate() {
                // SAFETY: 64m + 64 <= 256, the length of `qs`.
                let v = unsafe { _mm512_loadu_si512(wb.qs.as_ptr().add(64 * m).cast()) };
                let four = _mm512_permutexvar_epi32(spread[m], x);
                // The activations with each weight's sign (its zeros multiply |0|).
                let signed = _mm512_mask_sub_epi8(four, _mm512_movepi8_mask(v), zero, four);
                let p = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(v), signed);
                *acc = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(p), *acc);
            }
        }
        // The eight accumulators of [`avx2`]: quad 2m's in the low half of `acc[m]`.
        let l: [__m256; 8] = std::array::from_fn(|k| {
            let z = acc[k / 2];
            if k % 2 == 0 {
                _mm512_castps512_ps256(z)
            } else {
                _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(z)))
            }
        });
        let r = crate::x86::hsum_lanes(&l);
        // SAFETY: 8 writable floats (asserted above), the width of the store.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), r) };
    }
}

/// Two groups of 8 rows at once on 512-bit registers (the first group's rows in the low half,
/// the second's in the high half), as `q5_0x8::avx512vnni_pairs` does for Q5_0. Each lane's
/// integer is [`avx2`]'s: AVX2 sums `|v|` times `a` with `v`'s sign through `maddubs` and
/// `madd`, whose i16 pairs never saturate here (at most 2·128·127: the activations are never
/// -128); `vpdpbusd` sums the same products in i32, the sign applied by a masked negation
/// (512-bit registers have no `vpsignb`). Then the same FMA per lane and block, and the same
/// sum of the eight lanes.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512vnni_pairs {
    use std::arch::x86_64::*;

    use super::{BlockQ8_0x8, BlockQ8_1, ROWS};
    use crate::x86::pairs;

    /// Tokens one pass keeps in registers (eight accumulators each).
    const PASS: usize = 2;

    /// [`super::gemm_scalar`] for two groups: `w` holds group g's `nb` blocks then group
    /// g + 1's, `out` each token's 16 rows.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn gemm(w: &[BlockQ8_0x8], a: &[BlockQ8_1], _sums: &[i32], out: &mut [f32]) {
        let nb = w.len() / 2;
        let (w0, w1) = w.split_at(nb);
        for (a, out) in a.chunks(PASS * nb).zip(out.chunks_mut(PASS * 2 * ROWS)) {
            match out.len() / (2 * ROWS) {
                1 => gemm_n::<1>(w0, w1, a, out),
                _ => gemm_n::<PASS>(w0, w1, a, out),
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    fn gemm_n<const T: usize>(
        w0: &[BlockQ8_0x8],
        w1: &[BlockQ8_0x8],
        a: &[BlockQ8_1],
        out: &mut [f32],
    ) {
        let nb = w0.len();
        assert!(w1.len() == nb && a.len() >= T * nb && out.len() >= T * 2 * ROWS);
        let zero = _mm512_setzero_si512();
        let mut acc = [[_mm512_setzero_ps(); 8]; T];
        for (b, (wb0, wb1)) in w0.iter().zip(w1).enumerate() {
            let d = pairs::scales(&wb0.d, &wb1.d);
            let dd: [__m512; T] = std::array::from_fn(|t| {
                // SAFETY: t < T and b < nb, so t·nb + b < T·nb <= a.len() (asserted).
                _mm512_mul_ps(d, _mm512_set1_ps(unsafe { a.get_unchecked(t * nb + b) }.d))
            });
            for k in 0..8 {
                let v = pairs::join(&wb0.qs[32 * k..], &wb1.qs[32 * k..]);
                let magnitude = _mm512_abs_epi8(v);
                let negative = _mm512_movepi8_mask(v);
                for (t, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: as above; 4k + 4 <= 32, the activation block's length.
                    let four = unsafe {
                        let ab = a.get_unchecked(t * nb + b);
                        ab.qs.as_ptr().add(4 * k).cast::<i32>().read_unaligned()
                    };
                    let x = _mm512_set1_epi32(four);
                    // The activations with each weight's sign (its zeros multiply |0|).
                    let signed = _mm512_mask_sub_epi8(x, negative, zero, x);
                    let p = _mm512_dpbusd_epi32(zero, magnitude, signed);
                    acc[k] = _mm512_fmadd_ps(dd[t], _mm512_cvtepi32_ps(p), acc[k]);
                }
            }
        }
        for (t, l) in acc.iter().enumerate() {
            let r = pairs::hsum_lanes(l);
            // SAFETY: 16t + 16 <= T·16 <= out.len() (asserted above).
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(2 * ROWS * t), r) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{cast_blocks, cast_blocks_mut};
    use crate::formats::q8_0;
    use crate::testutil::{random_f32, random_q8_1, rng};

    /// Decode's many-groups call equals one call per group, bit for bit.
    #[test]
    fn gemv_equals_a_gemm_per_group_bit_for_bit() {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for nb in [1, 18] {
            let mut r = rng(70 + nb as u64);
            let w = random_f32(&mut r, 3 * ROWS * 32 * nb, 0.05);
            let mut wq = vec![0u8; 3 * ROWS * nb * size_of::<BlockQ8_0>()];
            q8_0::quantize(&w, cast_blocks_mut(&mut wq));
            let p = pack(cast_blocks::<BlockQ8_0>(&wq), nb);
            let a = random_q8_1(&mut r, nb);
            let mut want = vec![0.0; 3 * ROWS];
            for (wg, o) in p.chunks_exact(nb).zip(want.chunks_exact_mut(ROWS)) {
                gemm_scalar(wg, &a, &[], o);
            }
            let mut got = vec![0.0; 3 * ROWS];
            gemv_scalar(&p, &a, &[], &mut got);
            assert_eq!(bits(&got), bits(&want), "scalar, nb {nb}");
            #[cfg(target_arch = "x86_64")]
            if crate::required::test_needs("avx2") {
                for (wg, o) in p.chunks_exact(nb).zip(want.chunks_exact_mut(ROWS)) {
                    // SAFETY: AVX2, FMA and F16C were detected just above.
                    unsafe { avx2::gemm(wg, &a, &[], o) };
                }
                // SAFETY: as above.
                unsafe { avx2::gemv(&p, &a, &[], &mut got) };
                assert_eq!(bits(&got), bits(&want), "avx2, nb {nb}");
                if crate::required::test_needs("avx512vnni") {
                    // SAFETY: just detected.
                    unsafe { avx512vnni::gemv(&p, &a, &[], &mut got) };
                    assert_eq!(bits(&got), bits(&want), "avx512vnni, nb {nb}");
                }
            }
        }
    }

    #[test]
    fn packed_rows_equal_the_gguf_row_dot() {
        for (nb, t) in [(1, 1), (2, 2), (18, 3), (18, 1), (7, 4)] {
            let mut r = rng(60 + nb as u64);
            let w = random_f32(&mut r, ROWS * 32 * nb, 0.05);
            let mut wq = vec![0u8; ROWS * nb * size_of::<BlockQ8_0>()];
            q8_0::quantize(&w, cast_blocks_mut(&mut wq));
            let rows = cast_blocks::<BlockQ8_0>(&wq);
            let mut a = random_q8_1(&mut r, t * nb);
            a[0].qs = [-127; 32];
            let p = pack(rows, nb);
            let dot = |row: usize, tok: usize| {
                let (w, a) = (
                    &rows[row * nb..(row + 1) * nb],
                    &a[tok * nb..(tok + 1) * nb],
                );
                #[cfg(target_arch = "x86_64")]
                if crate::dispatch::has_avx2() {
                    // SAFETY: AVX2, FMA and F16C were detected just above.
                    return unsafe { q8_0::avx2::dot(w, a) };
                }
                q8_0::dot_scalar(w, a)
            };
            let want: Vec<f32> = (0..t)
                .flat_map(|tok| (0..ROWS).map(move |row| (row, tok)))
                .map(|(row, tok)| dot(row, tok))
                .collect();
            let mut got = vec![0.0; ROWS * t];
            gemm_scalar(&p, &a, &[], &mut got);
            #[cfg(target_arch = "x86_64")]
            if crate::required::test_needs("avx2") {
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "scalar, nb {nb}, {t} tokens");
                let mut simd = vec![0.0; ROWS * t];
                // SAFETY: detected above.
                unsafe { avx2::gemm(&p, &a, &[], &mut simd) };
                assert_eq!(bits(&simd), bits(&want), "avx2, nb {nb}, {t} tokens");
                continue;
            }
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{g} vs {w}");
            }
        }
    }

    /// Two groups on 512-bit registers equal an AVX2 call per group, bit for bit, with weights
    /// of -128 (the magnitude that needs care) and zeros among them.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_pair_of_groups_equals_a_call_per_group_bit_for_bit() {
        if !crate::required::test_needs("avx512vnni") {
            return;
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let t_max = crate::formats::q4x8::MAX_TOKENS;
        for nb in [1usize, 18, 48] {
            let mut r = rng(90 + nb as u64);
            let w = random_f32(&mut r, 2 * ROWS * 32 * nb, 0.05);
            let mut wq = vec![0u8; 2 * ROWS * nb * size_of::<BlockQ8_0>()];
            q8_0::quantize(&w, cast_blocks_mut(&mut wq));
            let mut p = pack(cast_blocks::<BlockQ8_0>(&wq), nb);
            for (i, q) in p[0].qs.iter_mut().enumerate().take(24) {
                *q = if i % 3 == 0 { -128 } else { 0 };
            }
            let a = random_q8_1(&mut r, t_max * nb);
            for t in 1..=t_max {
                let a = &a[..t * nb];
                let mut want = vec![0.0; 2 * ROWS * t];
                for (g, wg) in p.chunks_exact(nb).enumerate() {
                    let mut o = vec![0.0; ROWS * t];
                    // SAFETY: detected by `test_needs`.
                    unsafe { avx2::gemm(wg, a, &[], &mut o) };
                    for (tok, w) in want.chunks_exact_mut(2 * ROWS).enumerate() {
                        w[g * ROWS..(g + 1) * ROWS]
                            .copy_from_slice(&o[tok * ROWS..(tok + 1) * ROWS]);
                    }
                }
                let mut got = vec![0.0; 2 * ROWS * t];
                // SAFETY: as above.
                unsafe { avx512vnni_pairs::gemm(&p, a, &[], &mut got) };
                assert_eq!(bits(&got), bits(&want), "nb {nb}, {t} tokens");
            }
        }
    }
}
