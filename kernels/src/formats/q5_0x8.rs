//! Q5_0 repacked for the x86 kernels: eight rows interleaved block by block, as
//! [`super::q4x8`] does for the 4-bit formats. Gemma 3 270M keeps 81 of its matrices in Q5_0
//! (its 640-wide rows are no multiple of 256, so its quantizer fell back from the K-quants),
//! and their prompt matmul was a dot per row and token.
//!
//! Layout of one [`BlockQ5_0x8`]: the 8 rows' f16 scales; then 32 bytes of fifth bits where
//! bit `j` of byte `4r + i` is row r's fifth bit of element `4j + i`; then the low nibbles
//! interleaved as [`super::q4x8`] does (byte `32k + 4r + i` is byte `4k + i` of row r's GGUF
//! `qs`: element `4k + i` in its low nibble, element `16 + 4k + i` in its high one). So code
//! vector `j` (the low nibbles of load `j` for j < 4, the high nibbles of load `j - 4` after)
//! holds elements `4j..4j + 4` of every row, lane r for row r, and its fifth bits are bit `j`
//! of the one 32-byte load of the bits.
//!
//! Numerics: ggml's order, as the GGUF layout's AVX2 dot ([`super::q5_0::avx2::dot`]) adds:
//! per block, lane j's exact i32 sum of elements `4j..4j + 4` scaled into its own accumulator
//! with a fused multiply-add, the eight lanes added at the end as ggml's `hsum` adds them. Every
//! row equals that dot, and llama.cpp's, bit for bit. The kernels keep the codes unsigned
//! (0..31) and fold the offset of 16 in through each lane's activation sum
//! ([`lane_offsets`]): `Σ (q - 16)·a = Σ q·a - 16·Σ a`, the same exact integer.

use super::q4x8::ROWS;
use super::q5_0::BlockQ5_0;
use super::q8_1::BlockQ8_1;
use crate::block::{f16_to_f32, ByteBlock};

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockQ5_0x8 {
    pub d: [[u8; 2]; ROWS],
    pub qh: [u8; 4 * ROWS],
    pub qs: [u8; 16 * ROWS],
}
const _: () = assert!(size_of::<BlockQ5_0x8>() == ROWS * size_of::<BlockQ5_0>());
// SAFETY: repr(C), only u8 arrays: alignment 1, no padding, every bit pattern valid.
unsafe impl ByteBlock for BlockQ5_0x8 {}

impl BlockQ5_0x8 {
    /// One interleaved block from block b of each of 8 rows.
    fn interleave(rows: [&BlockQ5_0; ROWS]) -> Self {
        let mut out = BlockQ5_0x8 {
            d: rows.map(|b| b.d),
            qh: [0; 4 * ROWS],
            qs: [0; 16 * ROWS],
        };
        for (r, src) in rows.iter().enumerate() {
            let qh = u32::from_le_bytes(src.qh);
            for i in 0..4 {
                out.qh[4 * r + i] = (0..8).fold(0u8, |byte, j| {
                    byte | ((((qh >> (4 * j + i)) & 1) as u8) << j)
                });
            }
            for k in 0..4 {
                let at = 32 * k + 4 * r;
                out.qs[at..at + 4].copy_from_slice(&src.qs[4 * k..4 * k + 4]);
            }
        }
        out
    }

    /// Row r's code of element `e`, recentred to -16..15.
    fn code(&self, r: usize, e: usize) -> i32 {
        let (j, i) = (e / 4, e % 4);
        let byte = self.qs[32 * (j % 4) + 4 * r + i];
        let nibble = if j < 4 { byte & 0xF } else { byte >> 4 };
        let fifth = (self.qh[4 * r + i] >> j) & 1;
        i32::from(nibble | (fifth << 4)) - 16
    }
}

/// Integers per activation block in [`lane_offsets`]: one per ggml lane.
pub(crate) const OFFSETS_PER_BLOCK: usize = 8;

/// `out[8b + j] = -16 · Σ a_b[4j..4j + 4]`: lane j's share of Q5_0's offset for activation
/// block b. `out.len() == 8 * a.len()`.
pub(crate) fn lane_offsets(a: &[BlockQ8_1], out: &mut [i32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::dispatch::kernels().path.is_x86_simd() {
        // SAFETY: every x86 SIMD table implies AVX2.
        unsafe { lane_offsets_avx2(a, out) };
        return;
    }
    for (o, b) in out.chunks_exact_mut(OFFSETS_PER_BLOCK).zip(a) {
        for (o, q) in o.iter_mut().zip(b.qs.chunks_exact(4)) {
            *o = -16 * q.iter().map(|&v| i32::from(v)).sum::<i32>();
        }
    }
}

/// [`lane_offsets`] on AVX2 (exact integers, so the same values).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn lane_offsets_avx2(a: &[BlockQ8_1], out: &mut [i32]) {
    use std::arch::x86_64::*;
    for (o, b) in out.chunks_exact_mut(OFFSETS_PER_BLOCK).zip(a) {
        let v = _mm256_mullo_epi32(crate::x86::quad_sums(&b.qs), _mm256_set1_epi32(-16));
        // SAFETY: `o` is 8 i32s, the width of the store.
        unsafe { _mm256_storeu_si256(o.as_mut_ptr().cast(), v) };
    }
}

/// Interleaves a whole matrix (8g rows of `nb` GGUF blocks, row after row) into `g * nb`
/// blocks, group after group, in parallel (see [`super::q4x8::pack`]).
pub(crate) fn pack(rows: &[BlockQ5_0], nb: usize) -> Vec<BlockQ5_0x8> {
    super::q4x8::interleave_all(rows.len(), nb, |g, b| {
        BlockQ5_0x8::interleave(std::array::from_fn(|r| &rows[(g * ROWS + r) * nb + b]))
    })
}

/// Scalar reference: one group of 8 rows (`w`, `nb` blocks) against `t = out.len() / 8` tokens
/// (`a`: `t * nb` blocks, token after token; `_sums` unused: the codes here are recentred).
pub(crate) fn gemm_scalar(w: &[BlockQ5_0x8], a: &[BlockQ8_1], _sums: &[i32], out: &mut [f32]) {
    let nb = w.len();
    for (t, o) in out.chunks_exact_mut(ROWS).enumerate() {
        let a = &a[t * nb..(t + 1) * nb];
        for (r, o) in o.iter_mut().enumerate() {
            let mut lanes = [0.0f32; 8];
            for (wb, ab) in w.iter().zip(a) {
                let dd = f16_to_f32(wb.d[r]) * ab.d;
                for (j, lane) in lanes.iter_mut().enumerate() {
                    let quad: i32 = (4 * j..4 * j + 4)
                        .map(|e| wb.code(r, e) * i32::from(ab.qs[e]))
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
pub(crate) fn gemv_scalar(w: &[BlockQ5_0x8], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
    for (wg, o) in w.chunks_exact(a.len()).zip(out.chunks_exact_mut(ROWS)) {
        gemm_scalar(wg, a, sums, o);
    }
}

/// The x86 kernels, written once for each way of multiplying four unsigned codes by four
/// signed activations and adding them to a lane (`quad_dot(init, u, s)`): AVX2's `maddubs` +
/// `madd` + add, or AVX-512 VNNI's `vpdpbusd`. Both give the same exact integers, so the same
/// bits.
#[cfg(target_arch = "x86_64")]
macro_rules! x86_kernels {
    ($features:literal) => {
        use super::{BlockQ5_0x8, BlockQ8_1, OFFSETS_PER_BLOCK, ROWS};

        /// [`super::gemm_scalar`] with this flavour, two tokens per pass (eight accumulators
        /// each); `sums` holds [`super::lane_offsets`] of `a`.
        #[target_feature(enable = $features)]
        pub(crate) fn gemm(w: &[BlockQ5_0x8], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
            let nb = w.len();
            let per_pass = 2 * nb * OFFSETS_PER_BLOCK;
            let passes = a.chunks(2 * nb).zip(sums.chunks(per_pass));
            for ((a, sums), out) in passes.zip(out.chunks_mut(2 * ROWS)) {
                match out.len() / ROWS {
                    1 => gemm_n::<1>(w, a, sums, out),
                    _ => gemm_n::<2>(w, a, sums, out),
                }
            }
        }

        /// [`super::gemv_scalar`] with this flavour: one call for a whole slice of groups.
        #[target_feature(enable = $features)]
        pub(crate) fn gemv(w: &[BlockQ5_0x8], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
            for (wg, o) in w.chunks_exact(a.len()).zip(out.chunks_exact_mut(ROWS)) {
                gemm_n::<1>(wg, a, sums, o);
            }
        }

        /// The fifth bits of code vector `j` (bit `j` of each byte) moved to bit 4, the rest of
        /// the byte cleared. 16-bit shifts: no shift here carries a neighbour byte's bit into
        /// bit 4.
        #[inline]
        #[target_feature(enable = $features)]
        fn fifth_bits(fifth: __m256i, j: usize) -> __m256i {
            let at4 = match j {
                0 => _mm256_slli_epi16::<4>(fifth),
                1 => _mm256_slli_epi16::<3>(fifth),
                2 => _mm256_slli_epi16::<2>(fifth),
                3 => _mm256_slli_epi16::<1>(fifth),
                4 => fifth,
                5 => _mm256_srli_epi16::<1>(fifth),
                6 => _mm256_srli_epi16::<2>(fifth),
                _ => _mm256_srli_epi16::<3>(fifth),
            };
            _mm256_and_si256(at4, _mm256_set1_epi8(0x10))
        }

        #[inline]
        #[target_feature(enable = $features)]
        fn gemm_n<const T: usize>(
            w: &[BlockQ5_0x8],
            a: &[BlockQ8_1],
            sums: &[i32],
            out: &mut [f32],
        ) {
            let nb = w.len();
            assert!(
                a.len() >= T * nb
                    && sums.len() >= T * nb * OFFSETS_PER_BLOCK
                    && out.len() >= T * ROWS
            );
            let low4 = _mm256_set1_epi8(0x0F);
            let mut acc = [[_mm256_setzero_ps(); 8]; T];
            for (b, wb) in w.iter().enumerate() {
                if T == 1 {
                    crate::x86::prefetch_ahead(wb);
                }
                // SAFETY: 8 halves are 16 readable bytes, the width of the load.
                let d = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(wb.d.as_ptr().cast()) });
                let dd: [__m256; T] = std::array::from_fn(|t| {
                    // SAFETY: t < T and b < nb, so t·nb + b < T·nb <= a.len() (asserted).
                    _mm256_mul_ps(d, _mm256_set1_ps(unsafe { a.get_unchecked(t * nb + b) }.d))
                });
                // SAFETY: `qh` is 32 bytes, the width of the load.
                let fifth = unsafe { _mm256_loadu_si256(wb.qh.as_ptr().cast()) };
                for k in 0..4 {
                    // SAFETY: 32k + 32 <= 128, the length of `qs`.
                    let l = unsafe { _mm256_loadu_si256(wb.qs.as_ptr().add(32 * k).cast()) };
                    let nibbles = [
                        (k, _mm256_and_si256(l, low4)),
                        (k + 4, _mm256_and_si256(_mm256_srli_epi16::<4>(l), low4)),
                    ];
                    for (j, nibble) in nibbles {
                        // The unsigned codes 0..31 of elements 4j..4j+4, lane r for row r.
                        let codes = _mm256_or_si256(nibble, fifth_bits(fifth, j));
                        for (t, acc) in acc.iter_mut().enumerate() {
                            let at = t * nb + b;
                            // SAFETY: at < T·nb (as above), so 8·at + j < T·nb·8 <= sums.len();
                            // 4j + 4 <= 32, the activation block's length.
                            let (four, offset) = unsafe {
                                let ab = a.get_unchecked(at);
                                (
                                    ab.qs.as_ptr().add(4 * j).cast::<i32>().read_unaligned(),
                                    *sums.get_unchecked(OFFSETS_PER_BLOCK * at + j),
                                )
                            };
                            let p =
                                quad_dot(_mm256_set1_epi32(offset), codes, _mm256_set1_epi32(four));
                            acc[j] = _mm256_fmadd_ps(dd[t], _mm256_cvtepi32_ps(p), acc[j]);
                        }
                    }
                }
            }
            for (t, l) in acc.iter().enumerate() {
                let r = crate::x86::hsum_lanes(l);
                // SAFETY: 8t + 8 <= T·8 <= out.len() (asserted above).
                unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(ROWS * t), r) };
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    /// Per lane, `init` plus four unsigned codes times four signed activations (each pair's i16
    /// sum is at most 2·31·127 in magnitude, far from saturating).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn quad_dot(init: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_add_epi32(init, crate::x86::mul_sum_u8_i8(u, s))
    }

    x86_kernels!("avx2,fma,f16c");
}

/// The same kernels on AVX-512 VNNI (256-bit registers through AVX-512VL, which also doubles
/// the registers the two tokens' sixteen accumulators live in).
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512vnni {
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
    fn quad_dot(init: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(init, u, s)
    }

    x86_kernels!("avx2,fma,f16c,avx512f,avx512vl,avx512vnni");
}

/// Two groups of 8 rows at once on 512-bit registers (the first group's rows in the low half,
/// the second's in the high half): each lane does [`avx512vnni`]'s operations, so the same
/// bits, as `super::x8_pairs` does for Q4_0 and IQ4_NL.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512vnni_pairs {
    use std::arch::x86_64::*;

    use super::{BlockQ5_0x8, BlockQ8_1, OFFSETS_PER_BLOCK, ROWS};
    use crate::x86::pairs;

    /// Tokens one pass keeps in registers (eight accumulators each).
    const PASS: usize = 2;

    /// [`super::gemm_scalar`] for two groups: `w` holds group g's `nb` blocks then group
    /// g + 1's, `sums` [`super::lane_offsets`] of `a`, `out` each token's 16 rows.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn gemm(w: &[BlockQ5_0x8], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
        let nb = w.len() / 2;
        let (w0, w1) = w.split_at(nb);
        let per_pass = PASS * nb * OFFSETS_PER_BLOCK;
        let passes = a.chunks(PASS * nb).zip(sums.chunks(per_pass));
        for ((a, sums), out) in passes.zip(out.chunks_mut(PASS * 2 * ROWS)) {
            match out.len() / (2 * ROWS) {
                1 => gemm_n::<1>(w0, w1, a, sums, out),
                _ => gemm_n::<PASS>(w0, w1, a, sums, out),
            }
        }
    }

    /// [`avx512vnni`]'s fifth bits, on both halves.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    fn fifth_bits(fifth: __m512i, j: usize) -> __m512i {
        let at4 = match j {
            0 => _mm512_slli_epi16::<4>(fifth),
            1 => _mm512_slli_epi16::<3>(fifth),
            2 => _mm512_slli_epi16::<2>(fifth),
            3 => _mm512_slli_epi16::<1>(fifth),
            4 => fifth,
            5 => _mm512_srli_epi16::<1>(fifth),
            6 => _mm512_srli_epi16::<2>(fifth),
            _ => _mm512_srli_epi16::<3>(fifth),
        };
        _mm512_and_si512(at4, _mm512_set1_epi8(0x10))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    fn gemm_n<const T: usize>(
        w0: &[BlockQ5_0x8],
        w1: &[BlockQ5_0x8],
        a: &[BlockQ8_1],
        sums: &[i32],
        out: &mut [f32],
    ) {
        let nb = w0.len();
        assert!(
            w1.len() == nb
                && a.len() >= T * nb
                && sums.len() >= T * nb * OFFSETS_PER_BLOCK
                && out.len() >= T * 2 * ROWS
        );
        let low4 = _mm512_set1_epi8(0x0F);
        let mut acc = [[_mm512_setzero_ps(); 8]; T];
        for (b, (wb0, wb1)) in w0.iter().zip(w1).enumerate() {
            let d = pairs::scales(&wb0.d, &wb1.d);
            let dd: [__m512; T] = std::array::from_fn(|t| {
                // SAFETY: t < T and b < nb, so t·nb + b < T·nb <= a.len() (asserted).
                _mm512_mul_ps(d, _mm512_set1_ps(unsafe { a.get_unchecked(t * nb + b) }.d))
            });
            let fifth = pairs::join(&wb0.qh, &wb1.qh);
            for k in 0..4 {
                let l = pairs::join(&wb0.qs[32 * k..], &wb1.qs[32 * k..]);
                let nibbles = [
                    (k, _mm512_and_si512(l, low4)),
                    (k + 4, _mm512_and_si512(_mm512_srli_epi16::<4>(l), low4)),
                ];
                for (j, nibble) in nibbles {
                    // The unsigned codes 0..31 of elements 4j..4j+4, lane r for row r.
                    let codes = _mm512_or_si512(nibble, fifth_bits(fifth, j));
                    for (t, acc) in acc.iter_mut().enumerate() {
                        let at = t * nb + b;
                        // SAFETY: at < T·nb (as above), so 8·at + j < T·nb·8 <= sums.len();
                        // 4j + 4 <= 32, the activation block's length.
                        let (four, offset) = unsafe {
                            let ab = a.get_unchecked(at);
                            (
                                ab.qs.as_ptr().add(4 * j).cast::<i32>().read_unaligned(),
                                *sums.get_unchecked(OFFSETS_PER_BLOCK * at + j),
                            )
                        };
                        let init = _mm512_set1_epi32(offset);
                        let p = _mm512_dpbusd_epi32(init, codes, _mm512_set1_epi32(four));
                        acc[j] = _mm512_fmadd_ps(dd[t], _mm512_cvtepi32_ps(p), acc[j]);
                    }
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
    use crate::formats::q5_0;
    use crate::testutil::{random_f32, random_q8_1, rng};

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// `rows` rows of `nb` blocks, quantized from random values (some blocks all one sign, so
    /// both the shortest and the longest codes occur).
    fn random_rows(seed: u64, rows: usize, nb: usize) -> Vec<u8> {
        let mut r = rng(seed);
        let mut w = random_f32(&mut r, rows * 32 * nb, 0.05);
        for v in w.iter_mut().take(32) {
            *v = v.abs();
        }
        let mut wq = vec![0u8; rows * nb * size_of::<BlockQ5_0>()];
        q5_0::quantize(&w, cast_blocks_mut(&mut wq));
        wq
    }

    #[test]
    fn interleaved_codes_are_the_gguf_codes() {
        let wq = random_rows(1, ROWS, 3);
        let rows = cast_blocks::<BlockQ5_0>(&wq);
        let p = pack(rows, 3);
        for (b, pb) in p.iter().enumerate() {
            for r in 0..ROWS {
                let want = rows[r * 3 + b].codes();
                let got: Vec<i32> = (0..32).map(|e| pb.code(r, e)).collect();
                assert_eq!(got, want, "row {r}, block {b}");
                assert_eq!(pb.d[r], rows[r * 3 + b].d);
            }
        }
    }

    /// Every path equals the GGUF layout's dot bit for bit: its AVX2 dot (llama.cpp's order)
    /// where the CPU has one, its scalar reference to rounding elsewhere.
    #[test]
    fn packed_rows_equal_the_gguf_row_dot() {
        for (nb, t) in [(1, 1), (2, 2), (20, 3), (20, 1), (7, 4), (64, 2)] {
            let wq = random_rows(80 + nb as u64, ROWS, nb);
            let rows = cast_blocks::<BlockQ5_0>(&wq);
            let mut a = random_q8_1(&mut rng(90 + t as u64), t * nb);
            a[0].qs = [-127; 32];
            let p = pack(rows, nb);
            let mut got = vec![0.0; ROWS * t];
            gemm_scalar(&p, &a, &[], &mut got);
            #[cfg(target_arch = "x86_64")]
            if crate::required::test_needs("avx2") {
                let dot = |row: usize, tok: usize| {
                    let (w, a) = (
                        &rows[row * nb..(row + 1) * nb],
                        &a[tok * nb..(tok + 1) * nb],
                    );
                    // SAFETY: AVX2, FMA and F16C were detected by `test_needs`.
                    unsafe { q5_0::avx2::dot(w, a) }
                };
                let want: Vec<f32> = (0..t)
                    .flat_map(|tok| (0..ROWS).map(move |row| (row, tok)))
                    .map(|(row, tok)| dot(row, tok))
                    .collect();
                assert_eq!(bits(&got), bits(&want), "scalar, nb {nb}, {t} tokens");
                let mut sums = vec![0; OFFSETS_PER_BLOCK * a.len()];
                lane_offsets(&a, &mut sums);
                let mut simd = vec![0.0; ROWS * t];
                // SAFETY: detected above.
                unsafe { avx2::gemm(&p, &a, &sums, &mut simd) };
                assert_eq!(bits(&simd), bits(&want), "avx2, nb {nb}, {t} tokens");
                if crate::required::test_needs("avx512vnni") {
                    let mut vnni = vec![0.0; ROWS * t];
                    // SAFETY: AVX-512 F, VL and VNNI were detected by `test_needs`.
                    unsafe { avx512vnni::gemm(&p, &a, &sums, &mut vnni) };
                    assert_eq!(bits(&vnni), bits(&want), "vnni, nb {nb}, {t} tokens");
                }
                continue;
            }
            for tok in 0..t {
                for row in 0..ROWS {
                    let want = q5_0::dot_scalar(
                        &rows[row * nb..(row + 1) * nb],
                        &a[tok * nb..(tok + 1) * nb],
                    );
                    let g = got[tok * ROWS + row];
                    assert!(
                        (g - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "{g} vs {want}"
                    );
                }
            }
        }
    }

    /// Decode's many-groups call equals one call per group, bit for bit.
    #[test]
    fn gemv_equals_a_gemm_per_group_bit_for_bit() {
        let nb = 20;
        let wq = random_rows(7, 3 * ROWS, nb);
        let p = pack(cast_blocks::<BlockQ5_0>(&wq), nb);
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
            let mut sums = vec![0; OFFSETS_PER_BLOCK * a.len()];
            lane_offsets(&a, &mut sums);
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

    /// Two groups on 512-bit registers equal a 256-bit VNNI call per group, bit for bit.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_pair_of_groups_equals_a_call_per_group_bit_for_bit() {
        if !crate::required::test_needs("avx512vnni") {
            return;
        }
        let t_max = crate::formats::q4x8::MAX_TOKENS;
        for (seed, nb) in [(21u64, 1usize), (22, 20), (23, 48)] {
            let wq = random_rows(seed, 2 * ROWS, nb);
            let p = pack(cast_blocks::<BlockQ5_0>(&wq), nb);
            let a = random_q8_1(&mut rng(seed + 100), t_max * nb);
            let mut sums = vec![0; a.len() * OFFSETS_PER_BLOCK];
            lane_offsets(&a, &mut sums);
            for t in 1..=t_max {
                let (a, sums) = (&a[..t * nb], &sums[..t * nb * OFFSETS_PER_BLOCK]);
                let mut want = vec![0.0; 2 * ROWS * t];
                for (g, wg) in p.chunks_exact(nb).enumerate() {
                    let mut o = vec![0.0; ROWS * t];
                    // SAFETY: detected by `test_needs`.
                    unsafe { avx512vnni::gemm(wg, a, sums, &mut o) };
                    for (tok, w) in want.chunks_exact_mut(2 * ROWS).enumerate() {
                        w[g * ROWS..(g + 1) * ROWS]
                            .copy_from_slice(&o[tok * ROWS..(tok + 1) * ROWS]);
                    }
                }
                let mut got = vec![0.0; 2 * ROWS * t];
                // SAFETY: as above.
                unsafe { avx512vnni_pairs::gemm(&p, a, sums, &mut got) };
                assert_eq!(bits(&got), bits(&want), "nb {nb}, {t} tokens");
            }
        }
    }
}
