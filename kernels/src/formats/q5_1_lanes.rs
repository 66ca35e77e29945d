//! Q5_1 prompts with tokens in the lanes (x86 with AVX-512 VNNI), as [`super::k_lanes`] does for
//! the K-quants: 16 tokens' Q8_1 activations transposed once per matmul ([`Q8_1Lanes`]), each
//! row's blocks unpacked once ([`Unpacked`]), four codes broadcast against one register of
//! activations in one `vpdpbusd`.
//!
//! Numerics: the row dot's (ggml's AVX2 `vec_dot_q5_1_q8_1`), lane for lane. Per (row, token)
//! that dot keeps eight lane accumulators, lane k taking each block's four-element products
//! `4k..4k+4` by one FMA with `d·d_a`, and a separate `Σ m·s` added last; here accumulator k is
//! a register of 16 tokens, so each token sees the same operations, and the eight are added in
//! `hsum_ps`'s pairs. Every result equals [`super::q5_1::avx2::dot`] bit for bit (tested).

pub(crate) use super::k_lanes::LANES;
use super::k_lanes::{quad, transpose_with};
use super::q5_1::BlockQ5_1;
use super::q8_1::BlockQ8_1;

/// One block of 16 tokens' Q8_1 activations, transposed: `quads[k][t]` holds token t's
/// elements `4k..4k+4` (four i8 in one i32), `d[t]` and `s[t]` its scale and `d·Σq`. Lanes past
/// the group's tokens are zero.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(crate) struct Q8_1Lanes {
    pub quads: [[i32; LANES]; 8],
    pub d: [f32; LANES],
    pub s: [f32; LANES],
}

impl Default for Q8_1Lanes {
    fn default() -> Self {
        Q8_1Lanes {
            quads: [[0; LANES]; 8],
            d: [0.0; LANES],
            s: [0.0; LANES],
        }
    }
}

/// Transposes up to [`LANES`] tokens of activations (`a`: token after token, `out.len()` blocks
/// each) into `out`.
pub(crate) fn transpose(a: &[BlockQ8_1], out: &mut [Q8_1Lanes]) {
    transpose_with(a, out, |ab, t, o| {
        for (k, q) in o.quads.iter_mut().enumerate() {
            q[t] = quad(&ab.qs[4 * k..4 * k + 4]);
        }
        o.d[t] = ab.d;
        o.s[t] = ab.s;
    });
}

/// One weight block unpacked: the 32 codes (0..31) as bytes, four to an i32, and `d`, `m`.
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
pub(crate) struct Unpacked {
    pub quads: [i32; 8],
    pub d: f32,
    pub m: f32,
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512vnni {
    use std::arch::x86_64::*;

    use super::{BlockQ5_1, Q8_1Lanes, Unpacked, LANES};

    /// One block unpacked (the AVX2 kernel's codes).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn unpack(b: &BlockQ5_1, u: &mut Unpacked) {
        let codes = crate::formats::q5_1::avx2::codes(b);
        // SAFETY: 8 i32 are 32 writable bytes, the width of the store.
        unsafe { _mm256_storeu_si256(u.quads.as_mut_ptr().cast(), codes) };
        (u.d, u.m) = crate::x86::f16x2_to_f32(b.dm_bytes());
    }

    /// One row (`u`, `a.len()` unpacked blocks) against one group of 16 tokens (`a`); `out[t]`
    /// is the row dot token t (lanes past the group's tokens hold nothing of use).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn row(u: &[Unpacked], a: &[Q8_1Lanes], out: &mut [f32; LANES]) {
        assert!(u.len() >= a.len(), "q5_1 lanes: short row");
        let zero = _mm512_setzero_si512();
        let mut acc = [_mm512_setzero_ps(); 8];
        let mut off = _mm512_setzero_ps();
        for (ub, ab) in u.iter().zip(a) {
            // SAFETY: 16 f32 are 64 readable bytes, aligned by `Q8_1Lanes`' alignment.
            let (da, s) = unsafe { (_mm512_load_ps(ab.d.as_ptr()), _mm512_load_ps(ab.s.as_ptr())) };
            off = _mm512_add_ps(off, _mm512_mul_ps(_mm512_set1_ps(ub.m), s));
            let dd = _mm512_mul_ps(_mm512_set1_ps(ub.d), da);
            for (k, acc) in acc.iter_mut().enumerate() {
                // SAFETY: as above.
                let x = unsafe { _mm512_load_si512(ab.quads[k].as_ptr().cast()) };
                let p = _mm512_dpbusd_epi32(zero, _mm512_set1_epi32(ub.quads[k]), x);
                *acc = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(p), *acc);
            }
        }
        // `hsum_ps`'s pairs: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
        let h: [__m512; 4] = std::array::from_fn(|k| _mm512_add_ps(acc[k], acc[k + 4]));
        let sum = _mm512_add_ps(_mm512_add_ps(h[0], h[2]), _mm512_add_ps(h[1], h[3]));
        // SAFETY: 16 writable f32, the width of the store.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), _mm512_add_ps(sum, off)) };
    }

    /// One row against `out.len()` tokens (`a`: token after token), through the same
    /// unpacking, transposition and kernel as a matmul: for the tests.
    #[cfg(test)]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub(crate) fn dot_multi(
        w: &[BlockQ5_1],
        a: &[crate::formats::q8_1::BlockQ8_1],
        out: &mut [f32],
    ) {
        let nb = w.len();
        let mut u = vec![Unpacked::default(); nb];
        for (b, u) in w.iter().zip(&mut u) {
            unpack(b, u);
        }
        let mut lanes = vec![Q8_1Lanes::default(); nb];
        for (t0, o) in (0..out.len()).step_by(LANES).zip(out.chunks_mut(LANES)) {
            super::transpose(&a[t0 * nb..(t0 + o.len()) * nb], &mut lanes);
            let mut r = [0.0; LANES];
            row(&u, &lanes, &mut r);
            o.copy_from_slice(&r[..o.len()]);
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::formats::q5_1;
    use crate::testutil::{random_bytes, random_f32, random_q8_1, rng};

    /// Every token of a group, and the tails of a group, equal the row dot bit for bit, with
    /// random blocks (every code and fifth bit) and blocks at the largest codes.
    #[test]
    fn lanes_equal_the_row_dot_bit_for_bit() {
        if !crate::required::test_needs("avx512vnni") {
            return;
        }
        let mut r = rng(300);
        for (nb, t) in [(1, 1), (3, 9), (18, 16), (5, 37)] {
            let mut w: Vec<BlockQ5_1> = (0..nb)
                .map(|_| BlockQ5_1 {
                    d: crate::block::f32_to_f16(random_f32(&mut r, 1, 0.01)[0]),
                    m: crate::block::f32_to_f16(random_f32(&mut r, 1, 0.01)[0]),
                    qh: random_bytes(&mut r),
                    qs: random_bytes(&mut r),
                })
                .collect();
            w[0].qh = [0xFF; 4];
            w[0].qs = [0xFF; 16];
            let a = random_q8_1(&mut r, nb * t);
            let mut got = vec![0.0; t];
            // SAFETY: detected above.
            unsafe { avx512vnni::dot_multi(&w, &a, &mut got) };
            for (tok, g) in got.iter().enumerate() {
                // SAFETY: AVX-512 VNNI implies the AVX2 dot's features here.
                let want = unsafe { q5_1::avx2::dot(&w, &a[tok * nb..(tok + 1) * nb]) };
                assert_eq!(g.to_bits(), want.to_bits(), "nb {nb}, token {tok} of {t}");
            }
        }
    }

    /// A whole matmul with 8 or more tokens (transposition, groups, tails of tokens, rows
    /// split over threads) equals the row dot on every (row, token), bit for bit.
    #[test]
    fn a_batch_equals_the_row_dot_bit_for_bit() {
        if !crate::required::test_needs("avx512vnni") {
            return;
        }
        use crate::block::cast_blocks;
        use crate::formats::q8_1;
        use crate::{matmul, GgmlType, Weights};
        let mut r = rng(301);
        let pools: Vec<_> = [1, 3]
            .map(|n| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build()
                    .unwrap()
            })
            .into();
        for (rows, cols, n_tok) in [(5, 64, 8), (131, 576, 17), (20, 96, 40)] {
            let w = random_f32(&mut r, rows * cols, 0.05);
            let data = crate::quantize_row(GgmlType::Q5_1, &w).unwrap();
            let x = random_f32(&mut r, n_tok * cols, 1.0);
            let nb = cols / 32;
            let mut act = vec![BlockQ8_1::default(); n_tok * nb];
            q8_1::quantize_scalar(&x, &mut act);
            let blocks = cast_blocks::<BlockQ5_1>(&data);
            let want: Vec<u32> = (0..n_tok * rows)
                .map(|i| {
                    let (t, row) = (i / rows, i % rows);
                    let (w, a) = (
                        &blocks[row * nb..(row + 1) * nb],
                        &act[t * nb..(t + 1) * nb],
                    );
                    // SAFETY: AVX-512 VNNI implies the AVX2 dot's features here.
                    unsafe { q5_1::avx2::dot(w, a) }.to_bits()
                })
                .collect();
            for pool in &pools {
                let mut out = vec![f32::NAN; n_tok * rows];
                let wt = Weights::new(GgmlType::Q5_1, &data, rows, cols).unwrap();
                pool.install(|| matmul(&wt, &x, n_tok, &mut out)).unwrap();
                let got: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "{rows} rows, {n_tok} tokens");
            }
        }
    }
}
