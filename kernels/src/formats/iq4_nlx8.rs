//! IQ4_NL repacked for the x86 kernels: eight rows interleaved block by block, in
//! [`super::q4x8`]'s layout (the 8 rows' f16 scales, then the 4-bit indices interleaved four
//! bytes at a time). llama.cpp repacks IQ4_NL 8 rows to a block on AVX2 too (`block_iq4_nlx8`,
//! in its own byte order) and then runs every IQ4_NL matmul through its repacked kernels, a
//! prompt's and a decoded token's alike, so ours follow their arithmetic rather than the GGUF
//! row dot's.
//!
//! Numerics, llama.cpp's repacked ones: per row and block the exact integer
//! `Σ KVALUES[q]·a`, then `acc = fma(sumi, d·d_a, acc)` in block order. The GGUF layout's dot
//! ([`super::iq4_nl::avx2::dot`], `vec_dot_iq4_nl_q8_0`'s order) adds in another order.

use super::iq4_nl::{BlockIq4Nl, KVALUES};
use super::q4x8::{interleave_qs, ROWS};
use super::q8_1::BlockQ8_1;
use crate::block::{f16_to_f32, ByteBlock};

/// Most tokens one kernel call takes ([`crate::dispatch::GemmEntry::TOKENS`]).
pub(crate) const TOKENS_PER_CALL: usize = 8;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockIq4Nlx8 {
    pub d: [[u8; 2]; ROWS],
    pub qs: [u8; 16 * ROWS],
}
const _: () = assert!(size_of::<BlockIq4Nlx8>() == ROWS * size_of::<BlockIq4Nl>());
// SAFETY: repr(C), only u8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockIq4Nlx8 {}

impl BlockIq4Nlx8 {
    /// Row r's table value of element `e`.
    fn value(&self, r: usize, e: usize) -> i32 {
        let i = e % 16;
        let byte = self.qs[32 * (i / 4) + 4 * r + i % 4];
        let index = if e < 16 { byte & 0xF } else { byte >> 4 };
        i32::from(KVALUES[usize::from(index)])
    }
}

/// Interleaves a whole matrix (8g rows of `nb` GGUF blocks, row after row) into `g * nb`
/// blocks, group after group, in parallel (see [`super::q4x8::pack`]).
pub(crate) fn pack(rows: &[BlockIq4Nl], nb: usize) -> Vec<BlockIq4Nlx8> {
    super::q4x8::interleave_all(rows.len(), nb, |g, b| {
        let blocks: [&BlockIq4Nl; ROWS] = std::array::from_fn(|r| &rows[(g * ROWS + r) * nb + b]);
        BlockIq4Nlx8 {
            d: blocks.map(|b| b.d),
            qs: interleave_qs(blocks.map(|b| &b.qs)),
        }
    })
}

/// Scalar reference: one group of 8 rows (`w`, `nb` blocks) against `t = out.len() / 8` tokens
/// (`a`: `t * nb` blocks, token after token; `_sums` unused here, the VNNI kernel reads each
/// activation block's sum).
pub(crate) fn gemm_scalar(w: &[BlockIq4Nlx8], a: &[BlockQ8_1], _sums: &[i32], out: &mut [f32]) {
    let nb = w.len();
    for (t, o) in out.chunks_exact_mut(ROWS).enumerate() {
        let a = &a[t * nb..(t + 1) * nb];
        for (r, o) in o.iter_mut().enumerate() {
            let mut acc = 0.0f32;
            for (wb, ab) in w.iter().zip(a) {
                let sumi: i32 = (0..32).map(|e| wb.value(r, e) * i32::from(ab.qs[e])).sum();
                acc = (sumi as f32).mul_add(f16_to_f32(wb.d[r]) * ab.d, acc);
            }
            *o = acc;
        }
    }
}

/// Scalar reference for decode: every group of 8 rows in `w` (`out.len() / 8` groups of
/// `a.len()` blocks, group after group) against the one token `a`.
pub(crate) fn gemv_scalar(w: &[BlockIq4Nlx8], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
    for (wg, o) in w.chunks_exact(a.len()).zip(out.chunks_exact_mut(ROWS)) {
        gemm_scalar(wg, a, sums, o);
    }
}

/// The table with `shift` added to each value, as bytes (the VNNI kernels read it unsigned).
#[cfg(target_arch = "x86_64")]
pub(crate) const fn shifted_table(shift: i16) -> [u8; 16] {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (KVALUES[i] as i16 + shift) as u8;
        i += 1;
    }
    t
}

/// The x86 kernels, written once for both flavours. A flavour module supplies `SHIFT`, what
/// it adds to the table's values, and `quad(acc, values, four)`, which adds to each lane four
/// table values times four activations:
/// - AVX2 (`SHIFT` 0): the signed values through the sign trick into `maddubs` + `madd` (a
///   shifted table would saturate its i16 pairs);
/// - AVX-512 VNNI (`SHIFT` 128): `vpdpbusd` sums unsigned-by-signed bytes into i32 with nothing
///   to saturate, so the table is read unsigned (1..241) and each token's block starts at
///   `-128·Σa` (the activation block's sum in `sums`) instead of a sign flip per four bytes.
///
/// Either way the same exact integers, so the same bits.
#[cfg(target_arch = "x86_64")]
macro_rules! x86_kernels {
    ($features:literal, $pass:literal) => {
        use super::{BlockIq4Nlx8, BlockQ8_1, ROWS, TOKENS_PER_CALL};

        /// Tokens one pass over the blocks keeps in registers.
        const PASS: usize = $pass;

        /// The table with this flavour's shift, as the kernels read it.
        const SHIFTED: [u8; 16] = super::shifted_table(SHIFT);

        /// [`super::gemm_scalar`] with this flavour: up to [`TOKENS_PER_CALL`] tokens per
        /// call, [`PASS`] at a time; `sums` holds each activation block's integer sum.
        #[target_feature(enable = $features)]
        pub(crate) fn gemm(w: &[BlockIq4Nlx8], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
            let t = (out.len() / ROWS).min(TOKENS_PER_CALL);
            crate::formats::q4x8::gemm_in_passes!(gemm_n, PASS, t, w, a, sums, out);
        }

        /// [`super::gemv_scalar`] with this flavour: one call for a whole slice of groups.
        #[target_feature(enable = $features)]
        pub(crate) fn gemv(w: &[BlockIq4Nlx8], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
            for (wg, o) in w.chunks_exact(a.len()).zip(out.chunks_exact_mut(ROWS)) {
                gemm_n::<1>(wg, a, sums, o);
            }
        }

        #[inline]
        #[target_feature(enable = $features)]
        fn gemm_n<const T: usize>(
            w: &[BlockIq4Nlx8],
            a: &[BlockQ8_1],
            sums: &[i32],
            out: &mut [f32],
        ) {
            const { assert!(T <= TOKENS_PER_CALL) };
            let nb = w.len();
            assert!(a.len() >= T * nb && sums.len() >= T * nb && out.len() >= T * ROWS);
            let low4 = _mm256_set1_epi8(0x0F);
            // SAFETY: `SHIFTED` is 16 readable bytes, the width of the load.
            let t16 = unsafe { _mm_loadu_si128(SHIFTED.as_ptr().cast()) };
            let table = _mm256_set_m128i(t16, t16);
            let mut acc = [_mm256_setzero_ps(); T];
            for (b, wb) in w.iter().enumerate() {
                if T == 1 {
                    crate::x86::prefetch_ahead(wb);
                }
                // Each token's block starts at -SHIFT·Σa, the table's shift taken off.
                let mut sumi: [__m256i; T] = std::array::from_fn(|t| {
                    // SAFETY: t < T and b < nb, so t·nb + b < T·nb <= sums.len() (asserted).
                    let s = unsafe { *sums.get_unchecked(t * nb + b) };
                    _mm256_set1_epi32(-i32::from(SHIFT) * s)
                });
                for k in 0..4 {
                    // SAFETY: 32k + 32 <= 128, the length of `qs`.
                    let l = unsafe { _mm256_loadu_si256(wb.qs.as_ptr().add(32 * k).cast()) };
                    let indices = [
                        (k, _mm256_and_si256(l, low4)),
                        (k + 4, _mm256_and_si256(_mm256_srli_epi16::<4>(l), low4)),
                    ];
                    for (j, index) in indices {
                        // Lane r: row r's table values of elements 4j..4j+4.
                        let values = _mm256_shuffle_epi8(table, index);
                        for (t, sumi) in sumi.iter_mut().enumerate() {
                            // SAFETY: as above; 4j + 4 <= 32, the activation block's length.
                            let four = unsafe {
                                let ab = a.get_unchecked(t * nb + b);
                                ab.qs.as_ptr().add(4 * j).cast::<i32>().read_unaligned()
                            };
                            *sumi = quad(*sumi, values, _mm256_set1_epi32(four));
                        }
                    }
                }
                // SAFETY: 8 halves are 16 readable bytes, the width of the load.
                let d = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(wb.d.as_ptr().cast()) });
                for (t, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: as above.
                    let da = unsafe { a.get_unchecked(t * nb + b) }.d;
                    let dd = _mm256_mul_ps(d, _mm256_set1_ps(da));
                    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t]), dd, *acc);
                }
            }
            for (t, acc) in acc.iter().enumerate() {
                // SAFETY: 8t + 8 <= T·8 <= out.len() (asserted above).
                unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(ROWS * t), *acc) };
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    const SHIFT: i16 = 0;

    /// `acc` plus, per lane, four signed table values times four activations through the sign
    /// trick (each pair's i16 sum is at most 2·127·127, under the `maddubs` limit).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn quad(acc: __m256i, values: __m256i, four: __m256i) -> __m256i {
        let magnitude = _mm256_sign_epi8(values, values);
        let signed = _mm256_sign_epi8(four, values);
        _mm256_add_epi32(acc, crate::x86::mul_sum_u8_i8(magnitude, signed))
    }

    // Sixteen registers: four tokens' accumulators at a time.
    x86_kernels!("avx2,fma,f16c", 4);
}

/// The same kernels on AVX-512 VNNI (256-bit registers through AVX-512VL).
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512vnni {
    use std::arch::x86_64::*;

    const SHIFT: i16 = 128;

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
    fn quad(acc: __m256i, values: __m256i, four: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, values, four)
    }

    // Thirty-two registers: eight tokens at a time, each block's table values serving twice
    // as many tokens.
    x86_kernels!("avx2,fma,f16c,avx512f,avx512vl,avx512vnni", 8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{cast_blocks, cast_blocks_mut};
    use crate::formats::iq4_nl;
    use crate::testutil::{random_f32, random_q8_1, rng};

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    fn random_rows(seed: u64, rows: usize, nb: usize) -> Vec<u8> {
        let w = random_f32(&mut rng(seed), rows * 32 * nb, 0.05);
        let mut wq = vec![0u8; rows * nb * size_of::<BlockIq4Nl>()];
        iq4_nl::quantize(&w, cast_blocks_mut(&mut wq));
        wq
    }

    #[test]
    fn interleaved_values_are_the_gguf_values() {
        let wq = random_rows(1, ROWS, 3);
        let rows = cast_blocks::<BlockIq4Nl>(&wq);
        let p = pack(rows, 3);
        for (b, pb) in p.iter().enumerate() {
            for r in 0..ROWS {
                let got: Vec<i32> = (0..32).map(|e| pb.value(r, e)).collect();
                assert_eq!(got, rows[r * 3 + b].values(), "row {r}, block {b}");
            }
        }
    }

    /// The SIMD kernels equal the scalar model of llama.cpp's order bit for bit, which is the
    /// GGUF dot to rounding; extreme activations (all -127) included.
    #[test]
    fn kernels_equal_the_scalar_model_bit_for_bit() {
        for (nb, t) in [
            (1, 1),
            (2, 2),
            (18, 3),
            (20, 4),
            (7, 1),
            (20, 5),
            (18, 8),
            (3, 7),
        ] {
            let wq = random_rows(40 + nb as u64, ROWS, nb);
            let rows = cast_blocks::<BlockIq4Nl>(&wq);
            let mut a = random_q8_1(&mut rng(50 + t as u64), t * nb);
            a[0].qs = [-127; 32];
            let p = pack(rows, nb);
            let mut want = vec![0.0; ROWS * t];
            gemm_scalar(&p, &a, &[], &mut want);
            for tok in 0..t {
                for row in 0..ROWS {
                    let gguf = iq4_nl::dot_scalar(
                        &rows[row * nb..(row + 1) * nb],
                        &a[tok * nb..(tok + 1) * nb],
                    );
                    let g = want[tok * ROWS + row];
                    assert!(
                        (g - gguf).abs() <= 1e-5 * (1.0 + gguf.abs()),
                        "{g} vs {gguf}"
                    );
                }
            }
            #[cfg(target_arch = "x86_64")]
            if crate::required::test_needs("avx2") {
                let mut sums = vec![0; a.len()];
                crate::formats::q4x8::activation_sums(&a, &mut sums);
                let mut got = vec![0.0; ROWS * t];
                // SAFETY: detected by `test_needs`.
                unsafe { avx2::gemm(&p, &a, &sums, &mut got) };
                assert_eq!(bits(&got), bits(&want), "avx2, nb {nb}, {t} tokens");
                if crate::required::test_needs("avx512vnni") {
                    unsafe { avx512vnni::gemm(&p, &a, &sums, &mut got) };
                    assert_eq!(bits(&got), bits(&want), "vnni, nb {nb}, {t} tokens");
                }
            }
        }
    }

    /// Decode's many-groups call equals one call per group, bit for bit.
    #[test]
    fn gemv_equals_a_gemm_per_group_bit_for_bit() {
        let nb = 20;
        let wq = random_rows(7, 3 * ROWS, nb);
        let p = pack(cast_blocks::<BlockIq4Nl>(&wq), nb);
        let a = random_q8_1(&mut rng(8), nb);
        let mut want = vec![0.0; 3 * ROWS];
        for (wg, o) in p.chunks_exact(nb).zip(want.chunks_exact_mut(ROWS)) {
            gemm_scalar(wg, &a, &[], o);
        }
        let mut got = vec![0.0; 3 * ROWS];
        gemv_scalar(&p, &a, &[], &mut got);
        assert_eq!(bits(&got), bits(&want), "scalar");
        #[cfg(target_arch = "x86_64")]
        if crate::required::test_needs("avx2") {
            let mut sums = vec![0; a.len()];
            crate::formats::q4x8::activation_sums(&a, &mut sums);
            // SAFETY: detected by `test_needs`.
            unsafe { avx2::gemv(&p, &a, &sums, &mut got) };
            assert_eq!(bits(&got), bits(&want), "avx2");
            if crate::required::test_needs("avx512vnni") {
                // SAFETY: detected by `test_needs`.
                unsafe { avx512vnni::gemv(&p, &a, &sums, &mut got) };
                assert_eq!(bits(&got), bits(&want), "vnni");
            }
        }
    }
}
