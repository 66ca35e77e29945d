//! One module per tensor format: weight formats (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0,
//! iq4_nl, q4_k, q5_k, q6_k, iq4_xs, q2_k, q3_k), their 8-row repacks for the x86 kernels
//! (q4x8 for q4_0 and q4_1, q5_0x8, iq4_nlx8, q8_0x8, q4_kx8), and the activation formats they are dotted
//! against (q8_1, q8_k); bf16_pairs (BF16 on AVX512_BF16) and x8_pairs (two repacked groups
//! on 512-bit registers, Q4_0 and IQ4_NL; Q5_0's and Q8_0's are in q5_0x8 and q8_0x8) hold
//! AVX-512 kernels of formats above.

pub(crate) mod bf16;
pub(crate) mod bf16_pairs;
pub(crate) mod f16;
pub(crate) mod f32;
pub(crate) mod iq4_nl;
pub(crate) mod iq4_nlx8;
pub(crate) mod iq4_xs;
#[cfg(target_arch = "x86_64")]
pub(crate) mod k_lanes;
pub(crate) mod q2_k;
pub(crate) mod q3_k;
pub(crate) mod q4_0;
pub(crate) mod q4_1;
pub(crate) mod q4_k;
pub(crate) mod q4_kx8;
pub(crate) mod q4x8;
pub(crate) mod q5_0;
pub(crate) mod q5_0x8;
pub(crate) mod q5_1;
#[cfg(target_arch = "x86_64")]
pub(crate) mod q5_1_lanes;
pub(crate) mod q5_k;
pub(crate) mod q6_k;
pub(crate) mod q8_0;
pub(crate) mod q8_0x8;
pub(crate) mod q8_1;
pub(crate) mod q8_k;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x8_pairs;

/// `out[t] = dot(w, token t of a)` where `a` holds `out.len()` tokens of `w.len()` units each:
/// the multi-token form of a one-token kernel that has no shared-work version.
#[inline]
pub(crate) fn each_token<W, A>(dot: impl Fn(&[W], &[A]) -> f32, w: &[W], a: &[A], out: &mut [f32]) {
    let n = w.len();
    for (t, o) in out.iter_mut().enumerate() {
        *o = dot(w, &a[t * n..(t + 1) * n]);
    }
}

/// `out[r] = dot(row r of w, a)` for one token `a`; `w` holds `out.len()` rows of `a.len()`.
pub(crate) fn each_row<W, A>(dot: impl Fn(&[W], &[A]) -> f32, w: &[W], a: &[A], out: &mut [f32]) {
    let n = a.len();
    if n == 0 {
        out.fill(0.0);
        return;
    }
    for (o, row) in out.iter_mut().zip(w.chunks_exact(n)) {
        *o = dot(row, a);
    }
}

/// One 256-element super-block's float step in ggml's tiled K-quant matmul (the epilogue of
/// `tiled_run_microtile_avx2`, which llama.cpp's x86 builds run against
/// [`crate::matmul::TILED_MIN_TOKENS`] or more tokens), from the block's exact integer
/// `s1 = Σ scale·Σ q·a` and, for formats with minimums, `(dmin, s2 = Σ min·Σ a)`:
/// `res = d·s1`, then `res - dmin·s2` in one rounding, then `acc + res·d_a` in one rounding.
#[inline(always)]
pub(crate) fn tiled_step(acc: f32, d: f32, s1: i32, min: Option<(f32, i32)>, d_a: f32) -> f32 {
    let mut res = d * s1 as f32;
    if let Some((dmin, s2)) = min {
        res = (-dmin).mul_add(s2 as f32, res);
    }
    res.mul_add(d_a, acc)
}
