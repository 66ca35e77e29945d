//! Q4_0 repacked for the AVX2 kernels: eight rows interleaved block by block, so one kernel
//! call multiplies 8 rows by up to 4 tokens with every 32-bit lane holding one row.
//!
//! Why: in GGUF order each row is dotted on its own, and every block pays for a horizontal sum,
//! a scale conversion and the sign trick that `maddubs` needs. Interleaved, the 8 rows' scales
//! convert in one instruction, the integer sums land lane per row (no horizontal sum), the
//! codes stay unsigned (the `-8` offset is folded in through each activation block's integer
//! sum), and the unpacked weights are reused by up to 4 tokens. Weights are repacked once at
//! load; the bytes per block are the same as GGUF's (8 x 18).
//!
//! Layout of one [`BlockQ4_0x8`] (block index b of rows 8g..8g+8): the 8 rows' f16 scales, then
//! 128 bytes where byte `32k + 4r + i` is byte `4k + i` of row r's GGUF block (k < 4, i < 4).
//! Its low nibble is row r's element `4k + i` and its high nibble element `16 + 4k + i`, so one
//! 32-byte load split into nibbles gives two vectors whose lane r holds four consecutive codes
//! of row r: elements 4k.. and 16+4k.., to be met by the same four activations broadcast.
//!
//! Numerics: per row and block the exact integer `Σ (q - 8)·a`, scaled as `d·d_a·sumi` and added
//! in block order: the arithmetic of [`super::q4_0::dot_scalar`], so every path here equals it
//! bit for bit.

use super::q4_0::BlockQ4_0;
use super::q8_1::BlockQ8_1;
use crate::block::{f16_to_f32, ByteBlock};

/// Rows per interleaved group.
pub(crate) const ROWS: usize = 8;
/// Most tokens one kernel call takes (its accumulators stay in registers).
pub(crate) const MAX_TOKENS: usize = 4;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockQ4_0x8 {
    pub d: [[u8; 2]; ROWS],
    pub qs: [u8; 16 * ROWS],
}
const _: () = assert!(size_of::<BlockQ4_0x8>() == ROWS * size_of::<BlockQ4_0>());
// SAFETY: repr(C), only u8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockQ4_0x8 {}

/// Interleaves 8 rows of `nb` GGUF blocks each (`rows.len() == 8 * nb`, row after row) into
/// `out` (`nb` blocks).
pub(crate) fn pack(rows: &[BlockQ4_0], out: &mut [BlockQ4_0x8]) {
    let nb = out.len();
    assert_eq!(rows.len(), ROWS * nb, "q4_0x8 pack: length mismatch");
    for (b, o) in out.iter_mut().enumerate() {
        for r in 0..ROWS {
            let src = &rows[r * nb + b];
            o.d[r] = src.d;
            for k in 0..4 {
                let at = 32 * k + 4 * r;
                o.qs[at..at + 4].copy_from_slice(&src.qs[4 * k..4 * k + 4]);
            }
        }
    }
}

/// The code of row `r`, element `j` of a packed block (0..16, offset 8 not removed).
fn code(b: &BlockQ4_0x8, r: usize, j: usize) -> i32 {
    let (half, e) = (j / 16, j % 16);
    let byte = b.qs[32 * (e / 4) + 4 * r + e % 4];
    i32::from(if half == 0 { byte & 0xF } else { byte >> 4 })
}

/// Integer sum of each activation block's codes, which folds the weights' `-8` offset in:
/// `Σ (q - 8)·a = Σ q·a - 8·Σ a`. `out.len() == a.len()`.
pub(crate) fn activation_sums(a: &[BlockQ8_1], out: &mut [i32]) {
    for (o, b) in out.iter_mut().zip(a) {
        *o = b.qs.iter().map(|&q| i32::from(q)).sum();
    }
}

/// Scalar reference: one group of 8 rows (`w`, `nb` blocks) against `t = out.len() / 8` tokens
/// (`a`, `sums`: `t * nb` blocks, token after token). `out[8t + r]` = row r dot token t.
pub(crate) fn gemm_scalar(w: &[BlockQ4_0x8], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
    let nb = w.len();
    for (t, o) in out.chunks_exact_mut(ROWS).enumerate() {
        let (a, sums) = (&a[t * nb..(t + 1) * nb], &sums[t * nb..(t + 1) * nb]);
        for (r, o) in o.iter_mut().enumerate() {
            let mut acc = 0.0f32;
            for ((wb, ab), &s) in w.iter().zip(a).zip(sums) {
                let mut sumi = 0i32;
                for (j, &q) in ab.qs.iter().enumerate() {
                    sumi += code(wb, r, j) * i32::from(q);
                }
                sumi -= 8 * s;
                acc += f16_to_f32(wb.d[r]) * ab.d * sumi as f32;
            }
            *o = acc;
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{BlockQ4_0x8, BlockQ8_1, MAX_TOKENS, ROWS};

    /// [`super::gemm_scalar`] with AVX2: up to [`MAX_TOKENS`] tokens per call.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn gemm(w: &[BlockQ4_0x8], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
        match out.len() / ROWS {
            0 => {}
            1 => gemm_n::<1>(w, a, sums, out),
            2 => gemm_n::<2>(w, a, sums, out),
            3 => gemm_n::<3>(w, a, sums, out),
            _ => gemm_n::<4>(w, a, sums, out),
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn gemm_n<const T: usize>(w: &[BlockQ4_0x8], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
        const { assert!(T <= MAX_TOKENS) };
        let nb = w.len();
        assert!(a.len() >= T * nb && sums.len() >= T * nb && out.len() >= T * ROWS);
        let low4 = _mm256_set1_epi8(0x0F);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); T];
        for (b, wb) in w.iter().enumerate() {
            // SAFETY: `d` is 16 readable bytes and `qs` 128, the widths of the loads below.
            let d = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(wb.d.as_ptr().cast()) });
            let mut v = [_mm256_setzero_si256(); 8];
            for k in 0..4 {
                // SAFETY: 32k + 32 <= 128.
                let l = unsafe { _mm256_loadu_si256(wb.qs.as_ptr().add(32 * k).cast()) };
                v[k] = _mm256_and_si256(l, low4);
                v[k + 4] = _mm256_and_si256(_mm256_srli_epi16::<4>(l), low4);
            }
            for (t, acc) in acc.iter_mut().enumerate() {
                // SAFETY: t < T and b < nb, so t·nb + b < T·nb <= a.len(), sums.len() (asserted).
                let (ab, s) =
                    unsafe { (a.get_unchecked(t * nb + b), *sums.get_unchecked(t * nb + b)) };
                let q = ab.qs.as_ptr();
                // Unsigned codes times signed activations, pairs summed to i16: each pair is at
                // most 2·15·127 in magnitude, so eight of them (30480) still fit an i16.
                let mut s16 = _mm256_setzero_si256();
                for (k, v) in v.iter().enumerate() {
                    let off = if k < 4 { 4 * k } else { 16 + 4 * (k - 4) };
                    // SAFETY: off + 4 <= 32, the activation block's length.
                    let four = unsafe { q.add(off).cast::<i32>().read_unaligned() };
                    let p = _mm256_maddubs_epi16(*v, _mm256_set1_epi32(four));
                    s16 = _mm256_add_epi16(s16, p);
                }
                let sumi = _mm256_sub_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(8 * s));
                // (d·d_a)·sumi, then added: the scalar reference's rounding, lane per row.
                let scaled = _mm256_mul_ps(
                    _mm256_mul_ps(d, _mm256_set1_ps(ab.d)),
                    _mm256_cvtepi32_ps(sumi),
                );
                *acc = _mm256_add_ps(*acc, scaled);
            }
        }
        for (t, acc) in acc.iter().enumerate() {
            // SAFETY: 8t + 8 <= T·8 <= out.len() (asserted above).
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(ROWS * t), *acc) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{cast_blocks, cast_blocks_mut};
    use crate::formats::q4_0;
    use crate::testutil::{random_f32, random_q8_1, rng};

    /// 8 random rows of `nb` Q4_0 blocks, and `t` random tokens quantized to Q8_1.
    fn setup(nb: usize, t: usize, seed: u64) -> (Vec<BlockQ4_0>, Vec<BlockQ8_1>) {
        let mut r = rng(seed);
        let w = random_f32(&mut r, ROWS * 32 * nb, 0.05);
        let mut wq = vec![0u8; ROWS * nb * size_of::<BlockQ4_0>()];
        q4_0::quantize(&w, cast_blocks_mut(&mut wq));
        let a = random_q8_1(&mut r, t * nb);
        (cast_blocks::<BlockQ4_0>(&wq).to_vec(), a)
    }

    fn packed(rows: &[BlockQ4_0], nb: usize) -> Vec<BlockQ4_0x8> {
        let mut out = vec![
            BlockQ4_0x8 {
                d: [[0; 2]; ROWS],
                qs: [0; 128]
            };
            nb
        ];
        pack(rows, &mut out);
        out
    }

    #[test]
    fn the_scalar_kernel_equals_the_gguf_row_dot_bit_for_bit() {
        for (nb, t) in [(1, 1), (3, 2), (18, 4), (48, 3)] {
            let (rows, a) = setup(nb, t, 7 + nb as u64);
            let p = packed(&rows, nb);
            let mut sums = vec![0; a.len()];
            activation_sums(&a, &mut sums);
            let mut out = vec![0.0; ROWS * t];
            gemm_scalar(&p, &a, &sums, &mut out);
            for tok in 0..t {
                for r in 0..ROWS {
                    let want =
                        q4_0::dot_scalar(&rows[r * nb..(r + 1) * nb], &a[tok * nb..(tok + 1) * nb]);
                    assert_eq!(
                        out[ROWS * tok + r].to_bits(),
                        want.to_bits(),
                        "nb {nb} token {tok} row {r}"
                    );
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_equals_scalar_bit_for_bit() {
        if !crate::dispatch::has_avx2() {
            return;
        }
        for (nb, t) in [(1, 1), (2, 2), (18, 3), (18, 4), (48, 1), (7, 4)] {
            let (rows, mut a) = setup(nb, t, 100 + nb as u64);
            // Extreme activations: the i16 partial sums' worst case.
            a[0].qs = [127; 32];
            if a.len() > 1 {
                a[1].qs = [-127; 32];
            }
            let p = packed(&rows, nb);
            let mut sums = vec![0; a.len()];
            activation_sums(&a, &mut sums);
            let mut want = vec![0.0; ROWS * t];
            gemm_scalar(&p, &a, &sums, &mut want);
            let mut got = vec![0.0; ROWS * t];
            // SAFETY: AVX2, FMA and F16C were detected above.
            unsafe { avx2::gemm(&p, &a, &sums, &mut got) };
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "nb {nb} tokens {t}");
        }
    }
}
