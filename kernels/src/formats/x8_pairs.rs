//! Two groups of 8 interleaved 4-bit rows at once on 512-bit registers, for the formats whose
//! repacked blocks share the layout of [`super::q4x8`] (8 rows' f16 scales, then their codes
//! four bytes at a time) and whose block sum is one exact integer: Q4_0 and IQ4_NL. The first
//! group's rows go in the low half of each register and the second's in the high half, so each
//! lane does the 256-bit VNNI kernel's very operations (the same integers, then the format's
//! own float steps), with half the instructions and one broadcast of each activation quad for
//! 16 rows. On a CPU that runs 512-bit `vpdpbusd` as often as 256-bit (Zen 5, measured by
//! `examples/instruction_rates.rs`) that is twice the multiply-adds an instruction (docs/benchmarks-log.md);
//! measured on Zen 5 only.

use super::iq4_nlx8::BlockIq4Nlx8;
use super::q4x8::{BlockQ4_0x8, ROWS};

/// A repacked 4-bit format the paired kernel takes.
pub(crate) trait PairedBlock: Copy + Sync + 'static {
    /// The codes' values as unsigned bytes (`vpdpbusd` reads them unsigned): a table lookup,
    /// or `None` for the codes themselves.
    const TABLE: Option<[u8; 16]>;
    /// What each value exceeds the format's signed value by: a block's integer starts at
    /// `-OFFSET·Σa`.
    const OFFSET: i32;
    /// Whether a block's scaled integer is added with one FMA (IQ4_NL, as llama.cpp's
    /// repacked kernel) or a multiply then an add (Q4_0, as its row dot).
    const FUSED: bool;
    fn d(&self) -> &[[u8; 2]; ROWS];
    fn qs(&self) -> &[u8; 16 * ROWS];
}

impl PairedBlock for BlockIq4Nlx8 {
    const TABLE: Option<[u8; 16]> = Some(super::iq4_nlx8::shifted_table(128));
    const OFFSET: i32 = 128;
    const FUSED: bool = true;
    fn d(&self) -> &[[u8; 2]; ROWS] {
        &self.d
    }
    fn qs(&self) -> &[u8; 16 * ROWS] {
        &self.qs
    }
}

impl PairedBlock for BlockQ4_0x8 {
    const TABLE: Option<[u8; 16]> = None;
    const OFFSET: i32 = 8;
    const FUSED: bool = false;
    fn d(&self) -> &[[u8; 2]; ROWS] {
        &self.d
    }
    fn qs(&self) -> &[u8; 16 * ROWS] {
        &self.qs
    }
}

pub(crate) mod avx512vnni {
    use std::arch::x86_64::*;

    use super::{PairedBlock, ROWS};
    use crate::formats::iq4_nlx8::TOKENS_PER_CALL;
    use crate::formats::q8_1::BlockQ8_1;
    use crate::x86::pairs;

    /// Tokens one pass keeps in registers.
    const PASS: usize = 4;

    /// The format's 256-bit VNNI gemm for two groups: `w` holds group g's `nb` blocks then
    /// group g + 1's, `sums` each activation block's integer sum, `out` each token's 16 rows
    /// (g's 8, then g + 1's); up to [`TOKENS_PER_CALL`] tokens, [`PASS`] at a time.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn gemm<B: PairedBlock>(w: &[B], a: &[BlockQ8_1], sums: &[i32], out: &mut [f32]) {
        let nb = w.len() / 2;
        let (w0, w1) = w.split_at(nb);
        let t = (out.len() / (2 * ROWS)).min(TOKENS_PER_CALL);
        let mut t0 = 0;
        while t0 < t {
            let n = (t - t0).min(PASS);
            let (a, s) = (&a[t0 * nb..], &sums[t0 * nb..]);
            let o = &mut out[t0 * 2 * ROWS..(t0 + n) * 2 * ROWS];
            match n {
                1 => gemm_n::<B, 1>(w0, w1, a, s, o),
                2 => gemm_n::<B, 2>(w0, w1, a, s, o),
                3 => gemm_n::<B, 3>(w0, w1, a, s, o),
                _ => gemm_n::<B, PASS>(w0, w1, a, s, o),
            }
            t0 += n;
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    fn gemm_n<B: PairedBlock, const T: usize>(
        w0: &[B],
        w1: &[B],
        a: &[BlockQ8_1],
        sums: &[i32],
        out: &mut [f32],
    ) {
        let nb = w0.len();
        assert!(w1.len() == nb && a.len() >= T * nb && sums.len() >= T * nb);
        assert!(out.len() >= T * 2 * ROWS);
        let low4 = _mm512_set1_epi8(0x0F);
        let table = B::TABLE.map(|t| {
            // SAFETY: the table is 16 readable bytes, the width of the load.
            _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(t.as_ptr().cast()) })
        });
        let mut acc = [_mm512_setzero_ps(); T];
        for (b, (wb0, wb1)) in w0.iter().zip(w1).enumerate() {
            // Each token's block starts at -OFFSET·Σa.
            let mut sumi: [__m512i; T] = std::array::from_fn(|t| {
                // SAFETY: t < T and b < nb, so t·nb + b < T·nb <= sums.len() (asserted).
                let s = unsafe { *sums.get_unchecked(t * nb + b) };
                _mm512_set1_epi32(-B::OFFSET * s)
            });
            for k in 0..4 {
                let l = pairs::join(&wb0.qs()[32 * k..], &wb1.qs()[32 * k..]);
                let indices = [
                    (k, _mm512_and_si512(l, low4)),
                    (k + 4, _mm512_and_si512(_mm512_srli_epi16::<4>(l), low4)),
                ];
                for (j, index) in indices {
                    // Lane r: row r's values of elements 4j..4j+4 (rows 8..16: group g + 1's).
                    let values = match table {
                        Some(table) => _mm512_shuffle_epi8(table, index),
                        None => index,
                    };
                    for (t, sumi) in sumi.iter_mut().enumerate() {
                        // SAFETY: as above; 4j + 4 <= 32, the activation block's length.
                        let four = unsafe {
                            let ab = a.get_unchecked(t * nb + b);
                            ab.qs.as_ptr().add(4 * j).cast::<i32>().read_unaligned()
                        };
                        *sumi = _mm512_dpbusd_epi32(*sumi, values, _mm512_set1_epi32(four));
                    }
                }
            }
            let d = pairs::scales(wb0.d(), wb1.d());
            for (t, acc) in acc.iter_mut().enumerate() {
                // SAFETY: as above.
                let da = unsafe { a.get_unchecked(t * nb + b) }.d;
                let dd = _mm512_mul_ps(d, _mm512_set1_ps(da));
                let x = _mm512_cvtepi32_ps(sumi[t]);
                *acc = if B::FUSED {
                    _mm512_fmadd_ps(x, dd, *acc)
                } else {
                    _mm512_add_ps(*acc, _mm512_mul_ps(dd, x))
                };
            }
        }
        for (t, acc) in acc.iter().enumerate() {
            // SAFETY: 16t + 16 <= T·16 <= out.len() (asserted above).
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(2 * ROWS * t), *acc) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::cast_blocks_mut;
    use crate::formats::iq4_nl::{self, BlockIq4Nl};
    use crate::formats::q4_0::{self, BlockQ4_0};
    use crate::formats::q4x8::{self, pack};
    use crate::formats::q8_1::BlockQ8_1;
    use crate::formats::{iq4_nlx8, iq4_nlx8::TOKENS_PER_CALL};
    use crate::testutil::{random_f32, random_q8_1, rng};

    type Gemm<B> = unsafe fn(&[B], &[BlockQ8_1], &[i32], &mut [f32]);

    /// The paired kernel on two groups equals the format's 256-bit VNNI kernel on each group
    /// (itself the scalar reference, bit for bit: the formats' own tests), for every token
    /// count a call takes.
    fn pairs_equal_single_groups<B: PairedBlock>(p: &[B], nb: usize, single: Gemm<B>, seed: u64) {
        let a = random_q8_1(&mut rng(seed), TOKENS_PER_CALL * nb);
        let mut sums = vec![0; a.len()];
        q4x8::activation_sums(&a, &mut sums);
        for t in 1..=TOKENS_PER_CALL {
            let mut want = vec![0.0; 2 * ROWS * t];
            for (g, wg) in p.chunks_exact(nb).enumerate() {
                let mut o = vec![0.0; ROWS * t];
                // The single-group kernels take up to their own call size: a token at a time.
                for tok in 0..t {
                    let at = tok * nb;
                    let oo = &mut o[tok * ROWS..(tok + 1) * ROWS];
                    // SAFETY: detected by the caller's `test_needs`.
                    unsafe { single(wg, &a[at..at + nb], &sums[at..at + nb], oo) };
                }
                for (tok, w) in want.chunks_exact_mut(2 * ROWS).enumerate() {
                    w[g * ROWS..(g + 1) * ROWS].copy_from_slice(&o[tok * ROWS..(tok + 1) * ROWS]);
                }
            }
            let mut got = vec![0.0; 2 * ROWS * t];
            // SAFETY: as above.
            unsafe { avx512vnni::gemm(p, &a[..t * nb], &sums[..t * nb], &mut got) };
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "nb {nb}, {t} tokens");
        }
    }

    #[test]
    fn a_pair_of_groups_equals_a_call_per_group_bit_for_bit() {
        if !crate::required::test_needs("avx512vnni") {
            return;
        }
        for (seed, nb) in [(11u64, 1usize), (12, 18), (13, 48)] {
            let w = random_f32(&mut rng(seed), 2 * ROWS * 32 * nb, 0.05);
            let mut nl = vec![0u8; 2 * ROWS * nb * size_of::<BlockIq4Nl>()];
            iq4_nl::quantize(&w, cast_blocks_mut(&mut nl));
            let nl = iq4_nlx8::pack(crate::block::cast_blocks(&nl), nb);
            pairs_equal_single_groups(&nl, nb, iq4_nlx8::avx512vnni::gemm, seed + 100);
            let mut q = vec![0u8; 2 * ROWS * nb * size_of::<BlockQ4_0>()];
            q4_0::quantize(&w, cast_blocks_mut(&mut q));
            let q = pack::<BlockQ4_0x8>(crate::block::cast_blocks(&q), nb);
            pairs_equal_single_groups(&q, nb, q4x8::avx512vnni::gemm::<BlockQ4_0x8>, seed + 200);
        }
    }
}
