//! One module per tensor format: weight formats (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0,
//! iq4_nl, q4_k, q5_k, q6_k, iq4_xs, q2_k, q3_k), their 8-row repacks for the x86 kernels
//! (q4x8 for q4_0 and q4_1, q5_0x8, q8_0x8, q4_kx8), and the activation formats they are dotted
//! against (q8_1, q8_k).

pub(crate) mod bf16;
pub(crate) mod f16;
pub(crate) mod f32;
pub(crate) mod iq4_nl;
pub(crate) mod iq4_xs;
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
pub(crate) mod q5_k;
pub(crate) mod q6_k;
pub(crate) mod q8_0;
pub(crate) mod q8_0x8;
pub(crate) mod q8_1;
pub(crate) mod q8_k;

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
