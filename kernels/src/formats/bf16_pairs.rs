//! BF16 on AVX512_BF16's `vdpbf16ps`, in the orders llama.cpp's AVX-512 builds use. The
//! instruction adds two products of bfloat16 pairs into each f32 lane: the odd pair's first,
//! then the even pair's, each add rounded once (a product of two bfloat16 is exact in f32),
//! denormal inputs read as zero and denormal results flushed ([`dp_lane`], checked against the
//! CPU bit for bit below). Activations are bfloat16 here, packed: half the f32 path's bytes.
//!
//! - One token: `ggml_vec_dot_bf16` with AVX512BF16: two 16-lane accumulators over runs of 64,
//!   each reduced as GCC's `_mm512_reduce_add_ps` into an f64 sum, the tail added one f32
//!   product at a time in f64 ([`vec_dot_scalar`]).
//! - A batch: llamafile's tinyBLAS with 32-element steps, one accumulator per row and token,
//!   reduced the same way ([`tiny_blas_scalar`]); llama.cpp runs it for two tokens or more when
//!   a row's length is a multiple of [`STEP`] and the row count of [`TILE_ROWS`].
//!
//! The AVX2 path ([`super::bf16`]) widens to f32 and sums in the AVX2 build's orders; what the
//! other orders mean for the golden replies: `engine/tests/quant_golden.rs`.
//!
//! No table runs the scalar models: the scalar table keeps the AVX2 order, the one llama.cpp's
//! portable builds share. They are what the AVX-512 kernels are tested against.
#![cfg_attr(any(not(test), not(target_arch = "x86_64")), allow(dead_code))]

use super::bf16::{bf16_to_f32, BF16};

/// tinyBLAS's step (elements per `vdpbf16ps` on 512 bits).
pub(crate) const STEP: usize = 32;
/// Rows of one batch-kernel call (tinyBLAS's tile height on 32 vector registers).
pub(crate) const TILE_ROWS: usize = 4;
/// At most this many tokens per batch-kernel call: a 4×4 tile keeps its 16 accumulators in
/// registers (tinyBLAS's 4×6, and 4×5, spilled them to the stack here: docs/benchmarks-log.md).
pub(crate) const TILE_TOKENS: usize = 4;
// The tile kernel loads its rows by hand.
const _: () = assert!(TILE_ROWS == 4);

/// A denormal read as zero, as `vdpbf16ps` reads its inputs and writes its results.
fn daz(v: f32) -> f32 {
    if v.is_subnormal() {
        0.0f32.copysign(v)
    } else {
        v
    }
}

/// One f32 lane of `vdpbf16ps`: `acc` plus the odd pair's product, then the even pair's.
pub(crate) fn dp_lane(acc: f32, w: [BF16; 2], x: [BF16; 2]) -> f32 {
    let term = |k: usize| (daz(bf16_to_f32(w[k])), daz(bf16_to_f32(x[k])));
    let (w1, x1) = term(1);
    let odd = daz(w1.mul_add(x1, daz(acc)));
    let (w0, x0) = term(0);
    daz(w0.mul_add(x0, odd))
}

/// `vdpbf16ps` on 512 bits: 16 lanes, 32 pairs.
fn dp16(acc: &mut [f32; 16], w: &[BF16], x: &[BF16]) {
    for (j, a) in acc.iter_mut().enumerate() {
        *a = dp_lane(*a, [w[2 * j], w[2 * j + 1]], [x[2 * j], x[2 * j + 1]]);
    }
}

/// GCC's `_mm512_reduce_add_ps`: the halves added, then the quarters, then lanes 0 + 2 and
/// 1 + 3, then those two.
pub(crate) fn reduce16(v: &[f32; 16]) -> f32 {
    let h: [f32; 8] = std::array::from_fn(|j| v[8 + j] + v[j]);
    let q: [f32; 4] = std::array::from_fn(|j| h[4 + j] + h[j]);
    (q[0] + q[2]) + (q[1] + q[3])
}

/// Scalar model of `ggml_vec_dot_bf16` built with AVX512BF16.
pub(crate) fn vec_dot_scalar(w: &[BF16], x: &[BF16]) -> f32 {
    let n = w.len().min(x.len());
    let mut c = [[0.0f32; 16]; 2];
    let mut i = 0;
    while i + 64 <= n {
        dp16(&mut c[0], &w[i..i + 32], &x[i..i + 32]);
        dp16(&mut c[1], &w[i + 32..i + 64], &x[i + 32..i + 64]);
        i += 64;
    }
    let mut sum = f64::from(reduce16(&c[0]));
    sum += f64::from(reduce16(&c[1]));
    for j in i..n {
        sum += f64::from(bf16_to_f32(w[j]) * bf16_to_f32(x[j]));
    }
    sum as f32
}

/// [`vec_dot_scalar`] for `out.len()` rows of `w` against one token `x`.
pub(crate) fn vec_dot_rows_scalar(w: &[BF16], x: &[BF16], out: &mut [f32]) {
    let n = x.len();
    for (o, row) in out.iter_mut().zip(w.chunks_exact(n)) {
        *o = vec_dot_scalar(row, x);
    }
}

/// Scalar model of tinyBLAS's BF16 dot built with AVX512BF16: one 16-lane accumulator over
/// steps of [`STEP`]. The row's length must be a multiple of [`STEP`].
pub(crate) fn tiny_blas_scalar(w: &[BF16], x: &[BF16]) -> f32 {
    assert_eq!(
        w.len() % STEP,
        0,
        "tinyBLAS BF16: length not a multiple of {STEP}"
    );
    let mut acc = [0.0f32; 16];
    for (wr, xr) in w.chunks_exact(STEP).zip(x.chunks_exact(STEP)) {
        dp16(&mut acc, wr, xr);
    }
    reduce16(&acc)
}

/// [`TILE_ROWS`] rows of `w` against the tokens of `x` (at most [`TILE_TOKENS`]), each in
/// [`tiny_blas_scalar`]'s order; token `t`'s results go to `out[t·ld..t·ld + TILE_ROWS]`.
pub(crate) fn tile_scalar(w: &[BF16], x: &[BF16], out: &mut [f32], ld: usize) {
    let n = w.len() / TILE_ROWS;
    for (t, xt) in x.chunks_exact(n).enumerate() {
        for r in 0..TILE_ROWS {
            out[t * ld + r] = tiny_blas_scalar(&w[r * n..(r + 1) * n], xt);
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512bf16 {
    use std::arch::x86_64::*;

    use super::{bf16_to_f32, BF16, STEP, TILE_ROWS, TILE_TOKENS};

    /// 32 bfloat16 at `p`.
    ///
    /// # Safety
    /// `p` must point to 64 readable bytes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn load(p: *const BF16) -> __m512bh {
        // SAFETY: the caller guarantees 64 readable bytes; both types are 512 plain bits.
        unsafe { std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(p.cast())) }
    }

    /// [`super::reduce16`]: GCC's `_mm512_reduce_add_ps`, pair for pair.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bf16")]
    fn reduce(v: __m512) -> f32 {
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
        let h = _mm256_add_ps(hi, _mm512_castps512_ps256(v));
        let q = _mm_add_ps(_mm256_extractf128_ps::<1>(h), _mm256_castps256_ps128(h));
        let e = _mm_add_ps(q, _mm_movehl_ps(q, q));
        _mm_cvtss_f32(_mm_add_ss(e, _mm_movehdup_ps(e)))
    }

    /// [`super::vec_dot_scalar`] bit for bit, for the row of `n` at `pw`.
    ///
    /// # Safety
    /// `pw` and `px` must each hold `n` readable bfloat16.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn row_dot(pw: *const BF16, px: *const BF16, n: usize) -> f32 {
        let mut c = [_mm512_setzero_ps(); 2];
        let mut i = 0;
        while i + 64 <= n {
            // SAFETY: i + 64 <= n: both halves lie inside the row and the token.
            unsafe {
                c[0] = _mm512_dpbf16_ps(c[0], load(pw.add(i)), load(px.add(i)));
                c[1] = _mm512_dpbf16_ps(c[1], load(pw.add(i + 32)), load(px.add(i + 32)));
            }
            i += 64;
        }
        let mut sum = f64::from(reduce(c[0]));
        sum += f64::from(reduce(c[1]));
        for j in i..n {
            // SAFETY: j < n, inside the row and the token.
            let (w, x) = unsafe { (*pw.add(j), *px.add(j)) };
            sum += f64::from(bf16_to_f32(w) * bf16_to_f32(x));
        }
        sum as f32
    }

    /// [`super::vec_dot_rows_scalar`] bit for bit: `out.len()` rows of `w` against the token
    /// `x`, one row after another, so the matrix is one sequential stream the prefetcher
    /// follows (four rows side by side decoded slower: 94 against 129 tok/s, docs/benchmarks-log.md).
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(crate) fn vec_dot_rows(w: &[BF16], x: &[BF16], out: &mut [f32]) {
        let n = x.len();
        assert!(w.len() >= out.len() * n, "bf16 rows: too few weights");
        let (pw, px) = (w.as_ptr(), x.as_ptr());
        for (r, o) in out.iter_mut().enumerate() {
            // SAFETY: row r lies inside `w` (asserted), the token is `x`.
            *o = unsafe { row_dot(pw.add(r * n), px, n) };
        }
    }

    /// [`TILE_ROWS`] rows against `T` tokens, every (row, token) in tinyBLAS's order.
    ///
    /// # Safety
    /// `pw` must hold `TILE_ROWS·n` and `px` `T·n` readable bfloat16, `n` a multiple of
    /// [`STEP`]; `out` must hold `(T - 1)·ld + TILE_ROWS` floats.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn tile_of<const T: usize>(
        pw: *const BF16,
        px: *const BF16,
        n: usize,
        out: &mut [f32],
        ld: usize,
    ) {
        // Index loops over constant bounds: unrolled, every accumulator stays in a register.
        let mut c = [[_mm512_setzero_ps(); TILE_ROWS]; T];
        let mut l = 0;
        while l < n {
            // SAFETY: row r < TILE_ROWS starts at r·n, and l + STEP <= n.
            let a = unsafe {
                [
                    load(pw.add(l)),
                    load(pw.add(n + l)),
                    load(pw.add(2 * n + l)),
                    load(pw.add(3 * n + l)),
                ]
            };
            #[allow(clippy::needless_range_loop)]
            for t in 0..T {
                // SAFETY: token t < T starts at t·n, and l + STEP <= n.
                let b = unsafe { load(px.add(t * n + l)) };
                for r in 0..TILE_ROWS {
                    c[t][r] = _mm512_dpbf16_ps(c[t][r], a[r], b);
                }
            }
            l += STEP;
        }
        if T == 4 {
            // SAFETY: T == 4: the accumulators are those `reduce_tile` takes.
            let r = reduce_tile(unsafe { &*c.as_ptr().cast::<[[__m512; TILE_ROWS]; 4]>() });
            for (t, r) in r.iter().enumerate() {
                out[t * ld..t * ld + TILE_ROWS].copy_from_slice(r);
            }
            return;
        }
        #[allow(clippy::needless_range_loop)]
        for t in 0..T {
            for r in 0..TILE_ROWS {
                out[t * ld + r] = reduce(c[t][r]);
            }
        }
    }

    /// [`reduce`] of a whole 4×4 tile at once (`c[t][r]`), each sum added pair for pair as
    /// GCC's `_mm512_reduce_add_ps` adds it, but two to four sums per instruction: the
    /// epilogue cost as much as a fifth of a tile of 576-element rows one sum at a time.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bf16")]
    fn reduce_tile(c: &[[__m512; TILE_ROWS]; 4]) -> [[f32; TILE_ROWS]; 4] {
        // Step 1, per sum v: h[j] = v[8 + j] + v[j]; two sums to a register (t = 0, 1 and
        // t = 2, 3 of each row r).
        let h: [[__m512; 2]; TILE_ROWS] = std::array::from_fn(|r| {
            std::array::from_fn(|p| {
                let (a, b) = (c[2 * p][r], c[2 * p + 1][r]);
                let lo = _mm512_shuffle_f32x4::<0b01_00_01_00>(a, b);
                let hi = _mm512_shuffle_f32x4::<0b11_10_11_10>(a, b);
                _mm512_add_ps(hi, lo)
            })
        });
        // Step 2: q[j] = h[4 + j] + h[j]; 128-bit lane t holds row r's sum with token t.
        let q: [__m512; TILE_ROWS] = std::array::from_fn(|r| {
            let (h1, h2) = (h[r][0], h[r][1]);
            let lo = _mm512_shuffle_f32x4::<0b10_00_10_00>(h1, h2);
            let hi = _mm512_shuffle_f32x4::<0b11_01_11_01>(h1, h2);
            _mm512_add_ps(hi, lo)
        });
        // Step 3: (q0 + q2) + (q1 + q3); lane 4t + r ends with row r's sum with token t.
        let s = |a: __m512, b: __m512| {
            let p = _mm512_shuffle_ps::<0b01_00_01_00>(a, b);
            let r = _mm512_shuffle_ps::<0b11_10_11_10>(a, b);
            _mm512_add_ps(p, r)
        };
        let (s01, s23) = (s(q[0], q[1]), s(q[2], q[3]));
        let u = _mm512_shuffle_ps::<0b10_00_10_00>(s01, s23);
        let v = _mm512_shuffle_ps::<0b11_01_11_01>(s01, s23);
        let mut out = [[0.0f32; TILE_ROWS]; 4];
        // SAFETY: 16 writable floats, the width of the store.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().cast(), _mm512_add_ps(u, v)) };
        out
    }

    /// [`super::tile_scalar`] bit for bit: [`TILE_ROWS`] rows of `w` against the 1 to
    /// [`TILE_TOKENS`] tokens of `x`, token `t`'s results at `out[t·ld..]`.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(crate) fn tile(w: &[BF16], x: &[BF16], out: &mut [f32], ld: usize) {
        let n = w.len() / TILE_ROWS;
        let t = x.len() / n.max(1);
        assert!(
            n > 0
                && n.is_multiple_of(STEP)
                && w.len() == TILE_ROWS * n
                && x.len() == t * n
                && (1..=TILE_TOKENS).contains(&t)
                && ld >= TILE_ROWS
                && out.len() >= (t - 1) * ld + TILE_ROWS,
            "bf16 tile: bad shape"
        );
        let (pw, px) = (w.as_ptr(), x.as_ptr());
        // SAFETY: the shape is asserted above; each arm's T is the token count.
        unsafe {
            match t {
                1 => tile_of::<1>(pw, px, n, out, ld),
                2 => tile_of::<2>(pw, px, n, out, ld),
                3 => tile_of::<3>(pw, px, n, out, ld),
                _ => tile_of::<TILE_TOKENS>(pw, px, n, out, ld),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::bf16::{f32_to_bf16, quantize};
    use crate::testutil::*;

    fn random_bf16(r: &mut Rng, n: usize, scale: f32) -> Vec<BF16> {
        let mut h = vec![BF16([0; 2]); n];
        quantize(&random_f32(r, n, scale), &mut h);
        h
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn the_reduction_pairs_lanes_as_gcc_does() {
        // Values whose sum depends on the order: 2^24 + 1 is lost unless the ones meet first.
        let mut v = [0.0f32; 16];
        v[0] = 16_777_216.0;
        v[8] = -16_777_216.0;
        v[1] = 1.0;
        v[9] = 1.0;
        // (v0 + v8) = 0 and (v1 + v9) = 2 survive; a sequential sum would lose the ones.
        assert_eq!(reduce16(&v), 2.0);
        let seq: f32 = v.iter().sum();
        assert_ne!(seq, 2.0);
    }

    #[test]
    fn a_lane_adds_the_odd_pair_first_and_flushes_denormals() {
        let b = f32_to_bf16;
        // 2^24 + 1 + (-1): odd first gives 2^24 + 1 rounded to 2^24, then 2^24 - 1.
        let got = dp_lane(16_777_216.0, [b(-1.0), b(1.0)], [b(1.0), b(1.0)]);
        assert_eq!(got, 16_777_215.0);
        // Even first would give (2^24 - 1) + 1 = 2^24.
        let tiny = f32::from_bits(0x0040_0000); // 2^-127, a denormal in both formats
        assert_eq!(dp_lane(tiny, [b(0.0), b(0.0)], [b(0.0), b(0.0)]), 0.0);
        // Read as it is, a denormal weight times 2^100 would give 2^-27; read as zero, 0.
        let big = 2f32.powi(100);
        assert_eq!(dp_lane(0.0, [b(tiny), b(0.0)], [b(big), b(0.0)]), 0.0);
    }

    /// On a CPU with AVX512_BF16: one `vdpbf16ps` equals [`dp_lane`] on every lane, for
    /// ordinary values, values whose order matters, and denormals.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_lane_model_is_the_instruction() {
        use std::arch::x86_64::*;
        if !crate::required::test_needs("avx512bf16") {
            return;
        }
        #[target_feature(enable = "avx512f,avx512bf16")]
        fn hw(acc: &[f32; 16], w: &[BF16], x: &[BF16]) -> [f32; 16] {
            let mut out = [0.0f32; 16];
            // SAFETY: 32 bfloat16 (64 bytes) in `w` and `x`, 16 floats in `acc` and `out`.
            unsafe {
                let c = _mm512_loadu_ps(acc.as_ptr());
                let a =
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(w.as_ptr().cast()));
                let b =
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(x.as_ptr().cast()));
                _mm512_storeu_ps(out.as_mut_ptr(), _mm512_dpbf16_ps(c, a, b));
            }
            out
        }
        let mut r = rng(90);
        for round in 0..2000 {
            // Every third round near the bottom of the exponent range, so denormals occur.
            let scale = if round % 3 == 0 { 1e-38 } else { 100.0 };
            let w = random_bf16(&mut r, 32, scale);
            let x = random_bf16(&mut r, 32, if round % 3 == 0 { 1.0 } else { 100.0 });
            let acc: [f32; 16] = std::array::from_fn(|_| random_f32(&mut r, 1, scale * 1e4)[0]);
            let mut want = acc;
            dp16(&mut want, &w, &x);
            // SAFETY: detected by `test_needs`.
            let got = unsafe { hw(&acc, &w, &x) };
            assert_eq!(bits(&got), bits(&want), "round {round}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_dots_equal_their_models_bit_for_bit() {
        if !crate::required::test_needs("avx512bf16") {
            return;
        }
        let mut r = rng(91);
        for n in [1, 31, 63, 64, 65, 576, 1536, 1001] {
            let rows = 7;
            let w = random_bf16(&mut r, rows * n, 1.0);
            let x = random_bf16(&mut r, n, 1.0);
            let (mut got, mut want) = (vec![0.0; rows], vec![0.0; rows]);
            // SAFETY: detected by `test_needs`.
            unsafe { avx512bf16::vec_dot_rows(&w, &x, &mut got) };
            vec_dot_rows_scalar(&w, &x, &mut want);
            assert_eq!(bits(&got), bits(&want), "rows, n {n}");
            // The f32 model of the AVX2 order is within reordering of the same products.
            let xf: Vec<f32> = x.iter().map(|&h| bf16_to_f32(h)).collect();
            let terms: f32 = w[..n]
                .iter()
                .zip(&xf)
                .map(|(&h, v)| (bf16_to_f32(h) * v).abs())
                .sum();
            let avx2_order = crate::formats::bf16::vec_dot_scalar(&w[..n], &xf);
            assert_reordered_sum_close(want[0], avx2_order, terms, n);
        }
        for n in [32, 576, 1536] {
            let w = random_bf16(&mut r, TILE_ROWS * n, 1.0);
            let x = random_bf16(&mut r, TILE_TOKENS * n, 1.0);
            for t in 1..=TILE_TOKENS {
                // A stride wider than the tile: the gaps stay untouched.
                let ld = TILE_ROWS + 3;
                let (mut got, mut want) = (vec![-1.0; t * ld], vec![-1.0; t * ld]);
                // SAFETY: detected by `test_needs`.
                unsafe { avx512bf16::tile(&w, &x[..t * n], &mut got, ld) };
                tile_scalar(&w, &x[..t * n], &mut want, ld);
                assert_eq!(bits(&got), bits(&want), "tile, n {n}, {t} tokens");
                assert!(want
                    .chunks(ld)
                    .all(|c| c[TILE_ROWS..].iter().all(|&v| v == -1.0)));
            }
        }
    }
}
