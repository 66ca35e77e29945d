//! Q4_K repacked for the x86 kernels: eight rows interleaved super-block by super-block, as
//! llama.cpp repacks every Q4_K matrix of a multiple of 8 rows on AVX2 (`block_q4_Kx8`), and
//! multiplied in the float order of its `ggml_gemv_q4_K_8x8_q8_K` (one token) and
//! `ggml_gemm_q4_K_8x8_q8_K` (four tokens), so that a repacked matmul equals llama.cpp's bit
//! for bit.
//!
//! Numerics, per row and token (ggml's AVX2 kernels; the integers are exact in both):
//! - gemv: per super-block the exact integers `sumi = Σ_j sc_j·Σ q·a` and
//!   `summ = Σ_j m_j·Σ a`, then `acc = fma(sumi, d·d_a, acc)`, `acc_m = fma(summ, dmin·d_a,
//!   acc_m)`; the result is `acc - acc_m`.
//! - gemm: the same, but the two FMAs run once per pair of sub-blocks (four per super-block).
//!
//! The GGUF row dot ([`super::q4_k::avx2::dot`]) sums in another order, so the three differ in
//! the last bits. Which kernel a token meets follows ggml's `forward_mul_mat`: a batch's first
//! `4·⌊n/4⌋` tokens go through the gemm, quantized by `ggml_quantize_mat_q8_K_4x8` (whose
//! sign rule differs from `quantize_row_q8_K` on ties, see [`super::q8_k::Ties`]), the rest
//! through the gemv, quantized by `quantize_row_q8_K`. Each output row is computed on its own,
//! so the split of rows over threads does not change its bits (nor does ggml's chunking).
//!
//! Layout (ours; ggml's `block_q4_Kx8` holds the same numbers): the 8 rows' f16 `d` and
//! `dmin`, their sub-block scales and minimums unpacked to bytes (`scales[j][r]`), then for each
//! pair of sub-blocks `c` 256 bytes where byte `32k + 4r + i` is byte `4k + i` of row r's GGUF
//! `qs[c]`: low nibble element `64c + 4k + i`, high nibble element `64c + 32 + 4k + i`. One
//! 32-byte load then holds four consecutive codes of each row, lane per row, for two
//! sub-blocks, to be met by four activations broadcast to every lane.
//!
//! NEON has no kernel of its own here: ggml repacks Q4_K there with other kernels (and other
//! sums), so the engine does not repack Q4_K on aarch64; the scalar reference serves a forced
//! repack there.

use super::q4_k::{unpack_scales, BlockQ4K};
use super::q8_k::BlockQ8K;
use crate::block::{f16_to_f32, ByteBlock};

/// Rows per interleaved group.
pub(crate) const ROWS: usize = 8;
/// Tokens in one call of ggml's gemm (the kernels here take 1 to 4 with the gemm's order).
pub(crate) const GEMM_TOKENS: usize = 4;

/// Q4_K, 8 rows interleaved: `x = d·sc·q - dmin·m`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockQ4Kx8 {
    pub d: [[u8; 2]; ROWS],
    pub dmin: [[u8; 2]; ROWS],
    /// `scales[j][r]`: row r's 6-bit scale of sub-block j.
    pub scales: [[u8; ROWS]; 8],
    /// `mins[j][r]`: row r's 6-bit minimum of sub-block j.
    pub mins: [[u8; ROWS]; 8],
    pub qs: [[u8; 32 * ROWS]; 4],
}
// The GGUF bytes plus 32 per group: the 6-bit scales unpacked once at load.
const _: () = assert!(size_of::<BlockQ4Kx8>() == ROWS * size_of::<BlockQ4K>() + 32);
// SAFETY: repr(C), only u8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockQ4Kx8 {}

impl BlockQ4Kx8 {
    /// One interleaved block from super-block b of each of 8 rows.
    fn interleave(rows: [&BlockQ4K; ROWS]) -> Self {
        let mut out = BlockQ4Kx8 {
            d: rows.map(|b| b.d),
            dmin: rows.map(|b| b.dmin),
            scales: [[0; ROWS]; 8],
            mins: [[0; ROWS]; 8],
            qs: [[0; 32 * ROWS]; 4],
        };
        for (r, b) in rows.iter().enumerate() {
            let (sc, mn) = unpack_scales(&b.scales);
            for j in 0..8 {
                out.scales[j][r] = sc[j];
                out.mins[j][r] = mn[j];
            }
            for c in 0..4 {
                for k in 0..8 {
                    let at = 32 * k + 4 * r;
                    out.qs[c][at..at + 4].copy_from_slice(&b.qs[c][4 * k..4 * k + 4]);
                }
            }
        }
        out
    }

    /// Row r's code of element e (0..256).
    fn code(&self, r: usize, e: usize) -> i32 {
        let (c, l) = (e / 64, e % 32);
        let byte = self.qs[c][32 * (l / 4) + 4 * r + l % 4];
        i32::from(if e % 64 < 32 { byte & 0xF } else { byte >> 4 })
    }
}

/// Interleaves a whole Q4_K matrix (`rows.len() == 8g * nb`: 8g rows of `nb` super-blocks, row
/// after row) into `g * nb` blocks, group after group; on the rayon pool (start-up work).
pub(crate) fn pack(rows: &[BlockQ4K], nb: usize) -> Vec<BlockQ4Kx8> {
    use rayon::prelude::*;
    assert!(
        nb > 0 || rows.is_empty(),
        "interleave: rows of no blocks hold nothing"
    );
    assert_eq!(
        rows.len() % (ROWS * nb.max(1)),
        0,
        "interleave: partial row group"
    );
    (0..rows.len() / ROWS)
        .into_par_iter()
        .map(|i| {
            let (g, b) = (i / nb, i % nb);
            BlockQ4Kx8::interleave(std::array::from_fn(|r| &rows[(ROWS * g + r) * nb + b]))
        })
        .collect()
}

/// Row r's exact integers for sub-blocks 2c and 2c+1 against one token's block:
/// (`Σ sc·Σ q·a`, `Σ m·Σ a`).
fn pair_sums(wb: &BlockQ4Kx8, r: usize, ab: &BlockQ8K, c: usize) -> (i32, i32) {
    let mut sumi = 0;
    let mut summ = 0;
    for j in [2 * c, 2 * c + 1] {
        let dot: i32 = (32 * j..32 * j + 32).map(|e| wb.code(r, e) * ab.q(e)).sum();
        sumi += i32::from(wb.scales[j][r]) * dot;
        let bsum = i32::from(ab.bsums[2 * j]) + i32::from(ab.bsums[2 * j + 1]);
        summ += i32::from(wb.mins[j][r]) * bsum;
    }
    (sumi, summ)
}

/// Scalar reference of one row against one token in ggml's order: one FMA per super-block
/// (`per_pair == false`, the gemv) or per pair of sub-blocks (the gemm).
fn row_dot(w: &[BlockQ4Kx8], r: usize, a: &[BlockQ8K], per_pair: bool) -> f32 {
    let (mut acc, mut acc_m) = (0.0f32, 0.0f32);
    for (wb, ab) in w.iter().zip(a) {
        let dd = f16_to_f32(wb.d[r]) * ab.d;
        let dm = f16_to_f32(wb.dmin[r]) * ab.d;
        if per_pair {
            for c in 0..4 {
                let (sumi, summ) = pair_sums(wb, r, ab, c);
                acc = (sumi as f32).mul_add(dd, acc);
                acc_m = (summ as f32).mul_add(dm, acc_m);
            }
        } else {
            let (mut sumi, mut summ) = (0, 0);
            for c in 0..4 {
                let (i, m) = pair_sums(wb, r, ab, c);
                sumi += i;
                summ += m;
            }
            acc = (sumi as f32).mul_add(dd, acc);
            acc_m = (summ as f32).mul_add(dm, acc_m);
        }
    }
    acc - acc_m
}

/// Scalar reference of ggml's gemm order: one group of 8 rows (`w`, `nb` blocks) against
/// `t = out.len() / 8` tokens (`a`: `t * nb` blocks, token after token), `t <= 4`.
/// `out[8t + r]` = row r dot token t.
pub(crate) fn gemm_scalar(w: &[BlockQ4Kx8], a: &[BlockQ8K], out: &mut [f32]) {
    let nb = w.len();
    for (t, o) in out.chunks_exact_mut(ROWS).enumerate() {
        for (r, o) in o.iter_mut().enumerate() {
            *o = row_dot(w, r, &a[t * nb..(t + 1) * nb], true);
        }
    }
}

/// Scalar reference of ggml's gemv order: every group of 8 rows in `w` (`out.len() / 8` groups
/// of `a.len()` blocks, group after group) against the one token `a`.
pub(crate) fn gemv_scalar(w: &[BlockQ4Kx8], a: &[BlockQ8K], out: &mut [f32]) {
    for (wg, o) in w.chunks_exact(a.len()).zip(out.chunks_exact_mut(ROWS)) {
        for (r, o) in o.iter_mut().enumerate() {
            *o = row_dot(wg, r, a, false);
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{BlockQ4Kx8, BlockQ8K, ROWS};

    /// The 8 rows' f16 values as f32 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn f16x8(h: &[[u8; 2]; ROWS]) -> __m256 {
        // SAFETY: `h` is 16 readable bytes, the width of the load.
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(h.as_ptr().cast()) })
    }

    /// Eight u8 lanes' values as i16 pairs `(v, v)` per 32-bit lane, for `madd_epi16`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn pairs(v: &[u8; ROWS]) -> __m256i {
        // SAFETY: `v` is 8 readable bytes, the width of the load.
        let x = _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(v.as_ptr().cast()) });
        _mm256_or_si256(x, _mm256_slli_epi32::<16>(x))
    }

    /// Four activations (elements `4k..4k+4` of `q`) broadcast to every lane.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn quad(q: &[i8; 32], k: usize) -> __m256i {
        let b = [q[4 * k], q[4 * k + 1], q[4 * k + 2], q[4 * k + 3]];
        _mm256_set1_epi32(i32::from_le_bytes(b.map(|x| x as u8)))
    }

    /// The exact integers of one super-block against `T` tokens (`a[t]` their blocks), added
    /// per pair of sub-blocks into `sumi`/`summ` lanes (lane r: row r), then folded into the
    /// float accumulators `acc`/`acc_m` after every pair (`PER_PAIR`, the gemm) or once (gemv).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn block<const T: usize, const PER_PAIR: bool>(
        wb: &BlockQ4Kx8,
        a: [&BlockQ8K; T],
        acc: &mut [__m256; T],
        acc_m: &mut [__m256; T],
    ) {
        let low4 = _mm256_set1_epi8(0x0F);
        let d = f16x8(&wb.d);
        let dmin = f16x8(&wb.dmin);
        let dd: [__m256; T] = std::array::from_fn(|t| _mm256_mul_ps(d, _mm256_set1_ps(a[t].d)));
        let dm: [__m256; T] = std::array::from_fn(|t| _mm256_mul_ps(dmin, _mm256_set1_ps(a[t].d)));
        let mut sumi = [_mm256_setzero_si256(); T];
        let mut summ = [_mm256_setzero_si256(); T];
        for c in 0..4 {
            // i16 lanes: each pair of a row's products of four codes (<= 15) by four
            // activations (|a| <= 128), eight of them: |sum| <= 8·2·15·128 < 2^15, exact.
            let mut lo = [_mm256_setzero_si256(); T];
            let mut hi = [_mm256_setzero_si256(); T];
            for k in 0..8 {
                // SAFETY: 32k + 32 <= 256, the length of `qs[c]`.
                let q = unsafe { _mm256_loadu_si256(wb.qs[c].as_ptr().add(32 * k).cast()) };
                let ql = _mm256_and_si256(q, low4);
                let qh = _mm256_and_si256(_mm256_srli_epi16::<4>(q), low4);
                for t in 0..T {
                    let al = quad(&a[t].qs[2 * c], k);
                    let ah = quad(&a[t].qs[2 * c + 1], k);
                    lo[t] = _mm256_add_epi16(lo[t], _mm256_maddubs_epi16(ql, al));
                    hi[t] = _mm256_add_epi16(hi[t], _mm256_maddubs_epi16(qh, ah));
                }
            }
            let (s0, s1) = (pairs(&wb.scales[2 * c]), pairs(&wb.scales[2 * c + 1]));
            // Lane r: (m[2c][r], m[2c+1][r]) as i16, met by the two sub-blocks' sums of 32.
            // SAFETY: each `mins[j]` is 8 readable bytes, the width of a 64-bit load.
            let m01 = _mm256_cvtepu8_epi16(unsafe {
                _mm_unpacklo_epi8(
                    _mm_loadl_epi64(wb.mins[2 * c].as_ptr().cast()),
                    _mm_loadl_epi64(wb.mins[2 * c + 1].as_ptr().cast()),
                )
            });
            for t in 0..T {
                let s =
                    _mm256_add_epi32(_mm256_madd_epi16(lo[t], s0), _mm256_madd_epi16(hi[t], s1));
                let bs = |j: usize| a[t].bsums[2 * j].wrapping_add(a[t].bsums[2 * j + 1]);
                let b01 = _mm256_set1_epi32(
                    i32::from(bs(2 * c) as u16) | (i32::from(bs(2 * c + 1) as u16) << 16),
                );
                let m = _mm256_madd_epi16(m01, b01);
                if PER_PAIR {
                    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dd[t], acc[t]);
                    acc_m[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), dm[t], acc_m[t]);
                } else {
                    sumi[t] = _mm256_add_epi32(sumi[t], s);
                    summ[t] = _mm256_add_epi32(summ[t], m);
                }
            }
        }
        if !PER_PAIR {
            for t in 0..T {
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t]), dd[t], acc[t]);
                acc_m[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(summ[t]), dm[t], acc_m[t]);
            }
        }
    }

    /// One group against `T` tokens, `out[8t + r]`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn group<const T: usize, const PER_PAIR: bool>(
        w: &[BlockQ4Kx8],
        a: &[BlockQ8K],
        out: &mut [f32],
    ) {
        let nb = w.len();
        assert!(a.len() >= T * nb && out.len() >= T * ROWS);
        let mut acc = [_mm256_setzero_ps(); T];
        let mut acc_m = [_mm256_setzero_ps(); T];
        for (b, wb) in w.iter().enumerate() {
            block::<T, PER_PAIR>(
                wb,
                std::array::from_fn(|t| &a[t * nb + b]),
                &mut acc,
                &mut acc_m,
            );
        }
        for t in 0..T {
            // SAFETY: 8t + 8 <= out.len() (asserted above).
            unsafe {
                _mm256_storeu_ps(
                    out.as_mut_ptr().add(ROWS * t),
                    _mm256_sub_ps(acc[t], acc_m[t]),
                )
            };
        }
    }

    /// [`super::gemm_scalar`]: one group of 8 rows against 1 to 4 tokens, ggml's gemm order.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn gemm(w: &[BlockQ4Kx8], a: &[BlockQ8K], out: &mut [f32]) {
        match out.len() / ROWS {
            0 => {}
            1 => group::<1, true>(w, a, out),
            2 => group::<2, true>(w, a, out),
            3 => group::<3, true>(w, a, out),
            _ => group::<4, true>(w, a, out),
        }
    }

    /// [`super::gemv_scalar`]: every group against one token, ggml's gemv order.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn gemv(w: &[BlockQ4Kx8], a: &[BlockQ8K], out: &mut [f32]) {
        for (wg, o) in w.chunks_exact(a.len()).zip(out.chunks_exact_mut(ROWS)) {
            group::<1, false>(wg, a, o);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{cast_blocks, cast_blocks_mut};
    use crate::formats::q4_k;
    use crate::formats::q8_k::quantize_scalar;
    use crate::testutil::{random_f32, rng};

    /// `groups` groups of 8 random Q4_K rows of `nb` super-blocks (GGUF and interleaved) and
    /// `t` random tokens quantized to Q8_K.
    fn setup(
        groups: usize,
        nb: usize,
        t: usize,
        seed: u64,
    ) -> (Vec<u8>, Vec<BlockQ4Kx8>, Vec<BlockQ8K>) {
        let mut r = rng(seed);
        let w = random_f32(&mut r, groups * ROWS * 256 * nb, 0.05);
        let mut wq = vec![0u8; groups * ROWS * nb * size_of::<BlockQ4K>()];
        q4_k::quantize(&w, cast_blocks_mut(&mut wq));
        let x = random_f32(&mut r, t * 256 * nb, 1.0);
        let mut a = vec![BlockQ8K::default(); t * nb];
        quantize_scalar(&x, &mut a);
        // Extreme activations: the i16 partial sums' worst case.
        a[0].qs = [[127; 32]; 8];
        a[0].bsums = [16 * 127; 16];
        if a.len() > 1 {
            a[1].qs = [[-127; 32]; 8];
            a[1].bsums = [-16 * 127; 16];
        }
        let packed = pack(cast_blocks::<BlockQ4K>(&wq), nb);
        (wq, packed, a)
    }

    /// The interleaved scalar reference computes the GGUF row's exact integers: with one
    /// super-block its result is the GGUF scalar dot's up to the fused last step.
    #[test]
    fn the_scalar_reference_is_the_q4_k_dot() {
        for nb in [1, 3, 5] {
            let (wq, p, a) = setup(2, nb, 1, 3 + nb as u64);
            let rows = cast_blocks::<BlockQ4K>(&wq);
            let mut got = vec![0.0; 2 * ROWS];
            gemv_scalar(&p, &a, &mut got);
            for (r, g) in got.iter().enumerate() {
                let want = q4_k::dot_scalar(&rows[r * nb..(r + 1) * nb], &a);
                assert!(
                    (g - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "{g} vs {want}"
                );
            }
        }
    }

    /// AVX2 gemm and gemv equal the scalar reference of ggml's orders bit for bit: gemm for 1
    /// to 4 tokens, gemv over several groups.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_equals_the_scalar_reference_bit_for_bit() {
        if !crate::required::test_needs("avx2") {
            return;
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (groups, nb, t) in [
            (1, 1, 1),
            (2, 2, 2),
            (3, 3, 3),
            (1, 5, 4),
            (5, 4, 4),
            (2, 1, 4),
        ] {
            let (_, p, a) = setup(groups, nb, t, 11 + (nb * t) as u64);
            for g in 0..groups {
                let w = &p[g * nb..(g + 1) * nb];
                let mut want = vec![0.0; ROWS * t];
                gemm_scalar(w, &a, &mut want);
                let mut got = vec![0.0; ROWS * t];
                // SAFETY: AVX2, FMA and F16C were detected above.
                unsafe { avx2::gemm(w, &a, &mut got) };
                assert_eq!(bits(&got), bits(&want), "gemm, nb {nb}, {t} tokens");
            }
            let a1 = &a[..nb];
            let mut want = vec![0.0; ROWS * groups];
            gemv_scalar(&p, a1, &mut want);
            let mut got = vec![0.0; ROWS * groups];
            // SAFETY: as above.
            unsafe { avx2::gemv(&p, a1, &mut got) };
            assert_eq!(bits(&got), bits(&want), "gemv, nb {nb}, {groups} groups");
        }
    }
}
