//! A LoRA pair's side path: `out (n, rows) += scale * ((x A^T) B^T)` with A (r, cols) and
//! B (rows, r) float matrices (F32, F16, BF16) and r small (8 to 64).
//!
//! The sums are ggml's: `x` is rounded to A's type before A, `x A^T` to B's type before B
//! (what ggml does to the activations of an F16 or BF16 matmul), and each F16 dot runs in the
//! order ggml's CPU matmul gives it on x86: for two tokens or more, llamafile's tinyBLAS order
//! ([`Kernels::dots_f16_tiny_blas`]) where tinyBLAS takes the matrix ([`sum_order`]: every pair of
//! every shipped adapter); for one token (decode, and the last layer's feed-forward of a
//! prompt, which llama.cpp runs for the output row only) and wherever tinyBLAS declines,
//! `ggml_vec_dot_f16`'s ([`Kernels::dot_f16`]). That is what makes our greedy replies with an
//! adapter llama.cpp's, token for token (engine/tests/adapter_golden.rs). F32 and BF16 pairs
//! keep `ggml_vec_dot`'s order for any number of tokens (llama.cpp runs tinyBLAS for those
//! too; no adapter we know of ships them).
//!
//! This kernel only drops the costs of two plain matmul calls, which dwarfed the arithmetic at
//! this size: a fork-join of the pool per call (a decode step makes ~60 of them), an f16
//! widening per weight per token, and a call with its own horizontal sum for each of B's rows
//! of r values. Here one call ([`driver`]) runs both stages of every pair that reads the same
//! input, for a run of tokens: for one token on the calling thread, or each stage over the
//! pool when its matrices are large; for many, tokens split over the pool. In tinyBLAS order
//! eight of B's rows are read once for all of a task's tokens ([`Kernels::lora_tokens_f16`]).

mod driver;

pub use driver::{lora_add, lora_add_fused, lora_one_token_then, LoraPair, LoraSide};

use crate::attention::F16SumOrder;
use crate::attention_group::round_to_f16;
use crate::block::{cast_blocks, f32_view};
use crate::dispatch::Kernels;
use crate::formats::bf16::BF16;
use crate::formats::f16::{self, F16};
use crate::{GgmlType, KernelError, Weights};

/// The rows of one of the pair's matrices, viewed in their type.
#[derive(Clone, Copy)]
enum Rows<'a> {
    F32(&'a [f32]),
    /// With the order ggml sums this matrix's dots in for this call ([`sum_order`]).
    F16(&'a [F16], F16SumOrder),
    /// Summed as a BF16 matmul is on AVX2, one token or a batch ([`crate::matmul`]'s BF16
    /// path): on every x86 CPU, AVX512_BF16 or not (no adapter we know of is BF16, and its
    /// side path is not worth a second set of kernels).
    BF16(&'a [BF16], F16SumOrder),
}

/// The order ggml's CPU matmul sums an F16 matrix of `rows` rows of `cols` values times
/// `n_tokens` tokens in on x86 (AVX2 and F16C), within a pass that sums in `pass`:
/// llamafile's tinyBLAS takes it for two tokens or more ([`F16SumOrder::for_batch`]: "only
/// enable sgemm for prompt processing") where its run of 8 divides the rows' length and its
/// tiles of 4 rows their number (ggml-cpu/llamafile/sgemm.cpp); `ggml_vec_dot_f16` does the
/// rest, and all of a pass in one row's order.
fn sum_order(rows: usize, cols: usize, n_tokens: usize, pass: F16SumOrder) -> F16SumOrder {
    match (pass, F16SumOrder::for_batch(n_tokens)) {
        (F16SumOrder::TinyBlas, F16SumOrder::TinyBlas)
            if cols.is_multiple_of(8) && rows.is_multiple_of(4) =>
        {
            F16SumOrder::TinyBlas
        }
        _ => F16SumOrder::VecDot,
    }
}

impl<'a> Rows<'a> {
    /// `w`'s elements (F32 bytes through [`f32_view`], which may copy into `copy`), to be
    /// multiplied by `n_tokens` tokens in a pass summing in `pass`.
    fn of(
        w: &Weights<'a>,
        what: &'static str,
        (n_tokens, pass): (usize, F16SumOrder),
        copy: &'a mut Vec<f32>,
    ) -> Result<Self, KernelError> {
        Ok(match w.ty {
            GgmlType::F32 => Rows::F32(f32_view(w.data, copy)),
            GgmlType::F16 => Rows::F16(
                cast_blocks::<F16>(w.data),
                sum_order(w.rows, w.cols, n_tokens, pass),
            ),
            GgmlType::BF16 => Rows::BF16(
                cast_blocks::<BF16>(w.data),
                sum_order(w.rows, w.cols, n_tokens, pass),
            ),
            ty => return Err(KernelError::Type { what, ty }),
        })
    }

    /// Whether this matrix rounds its input as `other` does (the same type).
    fn rounds_as(self, other: Rows) -> bool {
        std::mem::discriminant(&self) == std::mem::discriminant(&other)
    }

    /// Rounds `v` to this type's precision (nothing for F32), as ggml converts activations.
    fn round(self, v: &mut [f32]) {
        match self {
            Rows::F32(_) => {}
            Rows::F16(..) => round_to_f16(v),
            Rows::BF16(..) => v
                .iter_mut()
                .for_each(|x| *x = half::bf16::from_f32(*x).to_f32()),
        }
    }

    /// `out[i] = dot(row i, x)` for the `out.len()` rows of `x.len()` values.
    fn dots(self, k: &Kernels, x: &[f32], out: &mut [f32]) {
        let n = x.len();
        match self {
            Rows::F32(w) => rows_each(w, n, out, |row| k.dot_f32(row, x)),
            Rows::F16(w, F16SumOrder::TinyBlas) => k.dots_f16_tiny_blas(w, x, out),
            Rows::F16(w, F16SumOrder::VecDot) => rows_each(w, n, out, |row| k.dot_f16(row, x)),
            Rows::BF16(w, order) => rows_each(w, n, out, |row| bf16_dot(k, order, row, x)),
        }
    }

    /// Rows `first..first + count` of `n` values each.
    fn sub(self, first: usize, count: usize, n: usize) -> Self {
        let r = first * n..(first + count) * n;
        match self {
            Rows::F32(w) => Rows::F32(&w[r]),
            Rows::F16(w, order) => Rows::F16(&w[r], order),
            Rows::BF16(w, order) => Rows::BF16(&w[r], order),
        }
    }

    /// [`Self::add_dots`] for each of several tokens: `x` holds them one after another, `r`
    /// values each, and `out` their `rows` outputs, one token's after another's. In tinyBLAS
    /// order the F16 rows are read once for all the tokens ([`Kernels::lora_tokens_f16`]).
    fn add_dots_tokens(
        self,
        k: &Kernels,
        x: &[f32],
        (r, rows): (usize, usize),
        scale: f32,
        out: &mut [f32],
    ) {
        match self {
            Rows::F16(w, F16SumOrder::TinyBlas) if r > 0 => k.lora_tokens_f16(w, x, r, scale, out),
            _ => {
                for (t, o) in out.chunks_exact_mut(rows.max(1)).enumerate() {
                    self.add_dots(k, &x[t * r..(t + 1) * r], scale, o);
                }
            }
        }
    }

    /// `out[i] += dot(row i, x) * scale`.
    fn add_dots(self, k: &Kernels, x: &[f32], scale: f32, out: &mut [f32]) {
        let n = x.len();
        let add = |o: &mut f32, d: f32| *o += d * scale;
        match self {
            Rows::F16(w, order) => k.lora_rows_f16(w, x, scale, out, order),
            Rows::F32(w) => out
                .iter_mut()
                .zip(w.chunks_exact(n))
                .for_each(|(o, row)| add(o, k.dot_f32(row, x))),
            Rows::BF16(w, order) => out
                .iter_mut()
                .zip(w.chunks_exact(n))
                .for_each(|(o, row)| add(o, bf16_dot(k, order, row, x))),
        }
    }
}

/// One BF16 row against one token in the order `order` names: tinyBLAS's or
/// `ggml_vec_dot_bf16`'s.
fn bf16_dot(k: &Kernels, order: F16SumOrder, row: &[BF16], x: &[f32]) -> f32 {
    match order {
        F16SumOrder::TinyBlas => {
            let mut o = [0.0];
            k.dot_bf16_batch(row, x, &mut o);
            o[0]
        }
        F16SumOrder::VecDot => k.dot_bf16_token(row, x),
    }
}

fn rows_each<W>(w: &[W], n: usize, out: &mut [f32], dot: impl Fn(&[W]) -> f32) {
    for (o, row) in out.iter_mut().zip(w.chunks_exact(n)) {
        *o = dot(row);
    }
}

/// Scalar reference of [`Kernels::lora_rows_f16`]: `out[i] += dot(row i of w, x) * scale`,
/// each dot `f16::tiny_blas_dot_scalar` or `f16::dot_scalar`, as `order` says.
pub(crate) fn rows_f16_scalar(
    w: &[F16],
    x: &[f32],
    scale: f32,
    out: &mut [f32],
    order: F16SumOrder,
) {
    let n = x.len().max(1);
    let dot = match order {
        F16SumOrder::TinyBlas => f16::tiny_blas_dot_scalar,
        F16SumOrder::VecDot => f16::dot_scalar,
    };
    for (o, row) in out.iter_mut().zip(w.chunks_exact(n)) {
        *o += dot(row, x) * scale;
    }
}

/// Scalar reference of [`Kernels::lora_tokens_f16`]: for each token of `x` (`r` values each),
/// [`rows_f16_scalar`] in tinyBLAS order into that token's rows of `out`.
pub(crate) fn tokens_f16_scalar(w: &[F16], x: &[f32], r: usize, scale: f32, out: &mut [f32]) {
    let tokens = x.len() / r.max(1);
    let rows = out.len() / tokens.max(1);
    for (x, o) in x
        .chunks_exact(r.max(1))
        .zip(out.chunks_exact_mut(rows.max(1)))
    {
        rows_f16_scalar(w, x, scale, o, F16SumOrder::TinyBlas);
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use crate::attention::F16SumOrder;
    use crate::formats::f16::avx2::{dot, tiny_blas_dot};
    use crate::formats::f16::F16;

    /// For each token of `x` (`r` values each) `out[t][i] += tiny_blas_dot(row i of w, x_t) *
    /// scale`, bit for bit. Eight rows at a time are transposed once for all the tokens, so
    /// that a column of the eight rows is one vector: tinyBLAS's lane l of row i is then lane i
    /// of the l-th accumulator, fed the same FMAs in the same order, and its final sum of the
    /// lanes ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)) is seven vertical adds instead of a
    /// horizontal sum per output.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn tokens_f16(w: &[F16], x: &[f32], r: usize, scale: f32, out: &mut [f32]) {
        let tokens = x.len() / r.max(1);
        let rows = out.len() / tokens.max(1);
        if r == 0 || !r.is_multiple_of(8) || r > MAX_RANK || tokens == 0 {
            for (x, o) in x
                .chunks_exact(r.max(1))
                .zip(out.chunks_exact_mut(rows.max(1)))
            {
                rows_f16(w, x, scale, o, F16SumOrder::TinyBlas);
            }
            return;
        }
        let rows = rows.min(w.len() / r);
        let vscale = _mm256_set1_ps(scale);
        let mut columns = [_mm256_setzero_ps(); MAX_RANK];
        let mut g = 0;
        while g + 8 <= rows {
            for c in (0..r).step_by(8) {
                let p: [__m256; 8] = std::array::from_fn(|i| {
                    // SAFETY: row g + i < rows <= w.len() / r and c + 8 <= r: 8 halves inside w.
                    let h = unsafe { _mm_loadu_si128(w.as_ptr().add((g + i) * r + c).cast()) };
                    _mm256_cvtph_ps(h)
                });
                columns[c..c + 8].copy_from_slice(&transpose8(p));
            }
            for t in 0..tokens {
                let xt = &x[t * r..(t + 1) * r];
                let mut q = [_mm256_setzero_ps(); 8];
                for (run, xs) in columns[..r].chunks_exact(8).zip(xt.chunks_exact(8)) {
                    for ((q, &column), &v) in q.iter_mut().zip(run).zip(xs) {
                        *q = _mm256_fmadd_ps(column, _mm256_set1_ps(v), *q);
                    }
                }
                let sum = _mm256_add_ps(
                    _mm256_add_ps(_mm256_add_ps(q[0], q[4]), _mm256_add_ps(q[2], q[6])),
                    _mm256_add_ps(_mm256_add_ps(q[1], q[5]), _mm256_add_ps(q[3], q[7])),
                );
                let o = &mut out[t * rows + g..t * rows + g + 8];
                // SAFETY: `o` is 8 floats.
                unsafe {
                    let v = _mm256_add_ps(_mm256_loadu_ps(o.as_ptr()), _mm256_mul_ps(sum, vscale));
                    _mm256_storeu_ps(o.as_mut_ptr(), v);
                }
            }
            g += 8;
        }
        for t in 0..tokens {
            let xt = &x[t * r..(t + 1) * r];
            for i in g..rows {
                out[t * rows + i] += tiny_blas_dot(&w[i * r..(i + 1) * r], xt) * scale;
            }
        }
    }

    /// The largest rank [`tokens_f16`] keeps a transposed group of on the stack for (larger
    /// ones go token by token).
    const MAX_RANK: usize = 64;

    /// [`dot`] of eight rows of `x.len()` values (a multiple of 8 below 32) side by side. Rows
    /// that short are all leftovers to `ggml_vec_dot_f16`: their products added one by one in
    /// f64. So each run of 8 columns is multiplied row by row, transposed so that a column of
    /// the eight rows is one vector, and added column after column into two f64 vectors of
    /// four rows each: the same additions in the same order as [`dot`] makes, eight rows at once.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn short_vec_dots8(w: &[F16], x: &[f32]) -> __m256 {
        let n = x.len();
        assert!(
            w.len() >= 8 * n && n.is_multiple_of(8),
            "short_vec_dots8: shapes"
        );
        let (mut lo, mut hi) = (_mm256_setzero_pd(), _mm256_setzero_pd());
        for c in (0..n).step_by(8) {
            // SAFETY: c + 8 <= n: 8 floats of x; row i's halves c..c + 8 lie inside w's 8 rows.
            let xv = unsafe { _mm256_loadu_ps(x.as_ptr().add(c)) };
            let p: [__m256; 8] = std::array::from_fn(|i| {
                // SAFETY: as above.
                let h = unsafe { _mm_loadu_si128(w.as_ptr().add(i * n + c).cast()) };
                _mm256_mul_ps(_mm256_cvtph_ps(h), xv)
            });
            for column in transpose8(p) {
                lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(column)));
                hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(column)));
            }
        }
        _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo))
    }

    /// The 8x8 transpose: lane i of output j is lane j of input i.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
        let t: [__m256; 8] = std::array::from_fn(|i| {
            let (a, b) = (r[2 * (i / 2)], r[2 * (i / 2) + 1]);
            if i % 2 == 0 {
                _mm256_unpacklo_ps(a, b)
            } else {
                _mm256_unpackhi_ps(a, b)
            }
        });
        // t: lo01, hi01, lo23, hi23, lo45, hi45, lo67, hi67; u[k] holds column k of rows 0-3
        // (k = 0..4) in its low half and column k + 4 in its high half, u[k + 4] rows 4-7.
        let q = |a: __m256, b: __m256, hi: bool| {
            if hi {
                _mm256_shuffle_ps::<0xEE>(a, b)
            } else {
                _mm256_shuffle_ps::<0x44>(a, b)
            }
        };
        let u = [
            q(t[0], t[2], false),
            q(t[0], t[2], true),
            q(t[1], t[3], false),
            q(t[1], t[3], true),
            q(t[4], t[6], false),
            q(t[4], t[6], true),
            q(t[5], t[7], false),
            q(t[5], t[7], true),
        ];
        [
            _mm256_permute2f128_ps::<0x20>(u[0], u[4]),
            _mm256_permute2f128_ps::<0x20>(u[1], u[5]),
            _mm256_permute2f128_ps::<0x20>(u[2], u[6]),
            _mm256_permute2f128_ps::<0x20>(u[3], u[7]),
            _mm256_permute2f128_ps::<0x31>(u[0], u[4]),
            _mm256_permute2f128_ps::<0x31>(u[1], u[5]),
            _mm256_permute2f128_ps::<0x31>(u[2], u[6]),
            _mm256_permute2f128_ps::<0x31>(u[3], u[7]),
        ]
    }

    /// `out[i] += dot(row i of w, x) * scale`, bit for bit as [`tiny_blas_dot`] or [`dot`] (as
    /// `order` says) and a scalar multiply-add would give. In `ggml_vec_dot_f16`'s order (one
    /// token) short rows go eight at a time ([`short_vec_dots8`]); tinyBLAS's order is a
    /// prompt's, whose rows [`tokens_f16`] reads once for all its tokens, so here it is row by
    /// row.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn rows_f16(w: &[F16], x: &[f32], scale: f32, out: &mut [f32], order: F16SumOrder) {
        let n = x.len();
        if order == F16SumOrder::VecDot {
            let mut r = 0;
            if n > 0 && n < 32 && n.is_multiple_of(8) {
                let rows = out.len().min(w.len() / n);
                let vscale = _mm256_set1_ps(scale);
                while r + 8 <= rows {
                    let sums = short_vec_dots8(&w[r * n..(r + 8) * n], x);
                    // SAFETY: r + 8 <= rows <= out.len().
                    unsafe {
                        let o = out.as_mut_ptr().add(r);
                        _mm256_storeu_ps(
                            o,
                            _mm256_add_ps(_mm256_loadu_ps(o), _mm256_mul_ps(sums, vscale)),
                        );
                    }
                    r += 8;
                }
            }
            for (o, row) in out[r..].iter_mut().zip(w[r * n..].chunks_exact(n.max(1))) {
                *o += dot(row, x) * scale;
            }
            return;
        }
        for (o, row) in out.iter_mut().zip(w.chunks_exact(n.max(1))) {
            *o += tiny_blas_dot(row, x) * scale;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::bf16;
    use crate::matmul_input;
    use crate::norm::{rms_norm_row, rms_scale, Input};
    use crate::testutil::*;

    pub(super) fn halves(v: &[f32]) -> Vec<u8> {
        v.iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect()
    }

    fn floats(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// One stage of the reference, `x (n, w.cols) W^T`: an F16 matrix that ggml hands to
    /// tinyBLAS dotted in its order by the scalar reference, any other by `matmul_input`.
    fn stage(w: &Weights, x: &[f32], n: usize) -> Vec<f32> {
        let mut out = vec![0.0; n * w.rows];
        let pass = F16SumOrder::for_batch(n);
        if w.ty == GgmlType::F16 && sum_order(w.rows, w.cols, n, pass) == F16SumOrder::TinyBlas {
            let h = cast_blocks::<F16>(w.data);
            for (xr, o) in x.chunks_exact(w.cols).zip(out.chunks_exact_mut(w.rows)) {
                for (o, row) in o.iter_mut().zip(h.chunks_exact(w.cols)) {
                    *o = f16::tiny_blas_dot_scalar(row, xr);
                }
            }
        } else if w.ty == GgmlType::BF16 && crate::dispatch::kernels().bf16_pairs().is_some() {
            // The AVX2 build's orders, which the side path keeps on every x86 CPU, where a
            // BF16 matmul on AVX512_BF16 sums in the AVX-512 build's instead.
            let h = cast_blocks::<BF16>(w.data);
            let order = sum_order(w.rows, w.cols, n, pass);
            for (xr, o) in x.chunks_exact(w.cols).zip(out.chunks_exact_mut(w.rows)) {
                for (o, row) in o.iter_mut().zip(h.chunks_exact(w.cols)) {
                    *o = match order {
                        F16SumOrder::TinyBlas => bf16::tiny_blas_scalar(row, xr),
                        F16SumOrder::VecDot => bf16::vec_dot_scalar(row, xr),
                    };
                }
            }
        } else {
            matmul_input(w, Input::Rows(x), n, &mut out).unwrap();
        }
        out
    }

    /// `x` as it is and RMS-normalised by `norm`: the two inputs a side path is given.
    pub(super) fn both_inputs<'a>(x: &'a [f32], norm: &'a [f32]) -> [Input<'a>; 2] {
        [
            Input::Rows(x),
            Input::RmsNormed {
                rows: x,
                weight: norm,
                eps: 1e-5,
            },
        ]
    }

    /// The side path as two matmuls and an add, each as ggml runs it: the reference the
    /// kernel must equal bit for bit.
    pub(super) fn two_matmuls(
        a: &Weights,
        b: &Weights,
        x: Input,
        n: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        let round = |ty: GgmlType, v: &mut [f32]| match ty {
            GgmlType::F16 => v
                .iter_mut()
                .for_each(|x| *x = half::f16::from_f32(*x).to_f32()),
            GgmlType::BF16 => v
                .iter_mut()
                .for_each(|x| *x = half::bf16::from_f32(*x).to_f32()),
            _ => {}
        };
        let mut xr = vec![0.0; n * a.cols];
        match x {
            Input::Rows(r) => xr.copy_from_slice(r),
            Input::RmsNormed { rows, weight, eps } => {
                for (row, o) in rows.chunks_exact(a.cols).zip(xr.chunks_exact_mut(a.cols)) {
                    rms_norm_row(row, weight, rms_scale(row, eps), o);
                }
            }
        }
        round(a.ty, &mut xr);
        let mut xa = stage(a, &xr, n);
        round(b.ty, &mut xa);
        let d = stage(b, &xa, n);
        for (o, d) in out.iter_mut().zip(&d) {
            *o += d * scale;
        }
    }

    #[test]
    fn equals_two_matmuls_bit_for_bit() {
        let mut r = rng(90);
        for (rank, cols, rows, n) in [
            (16, 576, 1536, 1),
            (16, 64, 4100, 1),
            (16, 576, 576, 7),
            (8, 64, 37, 3),
            (32, 96, 70, 40),
            (64, 128, 24, 1),
            (5, 33, 19, 2),
            (13, 40, 9, 65),
            (8, 36, 40, 2),
        ] {
            for (ta, tb) in [
                (GgmlType::F16, GgmlType::F16),
                (GgmlType::F32, GgmlType::F16),
                (GgmlType::BF16, GgmlType::F32),
            ] {
                let bytes = |ty: GgmlType, v: &[f32]| match ty {
                    GgmlType::F16 => halves(v),
                    GgmlType::F32 => floats(v),
                    _ => v
                        .iter()
                        .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                        .collect(),
                };
                let da = bytes(ta, &random_f32(&mut r, rank * cols, 0.1));
                let db = bytes(tb, &random_f32(&mut r, rows * rank, 0.1));
                let a = Weights::new(ta, &da, rank, cols).unwrap();
                let b = Weights::new(tb, &db, rows, rank).unwrap();
                let x = random_f32(&mut r, n * cols, 2.0);
                let norm = random_f32(&mut r, cols, 1.0);
                let start = random_f32(&mut r, n * rows, 1.0);
                for input in both_inputs(&x, &norm) {
                    let (mut got, mut want) = (start.clone(), start.clone());
                    let order = F16SumOrder::for_batch(n);
                    lora_add(&a, &b, input, n, order, 1.75, &mut got).unwrap();
                    two_matmuls(&a, &b, input, n, 1.75, &mut want);
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(g, w)| g.to_bits() == w.to_bits());
                    assert!(
                        same,
                        "rank {rank} cols {cols} rows {rows} n {n} {ta:?}/{tb:?}"
                    );
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_rows_equal_the_dot_per_row() {
        if !crate::test_needs("avx2") {
            return;
        }
        let mut r = rng(91);
        for (n, rows) in [
            (16, 1536),
            (8, 9),
            (32, 17),
            (64, 8),
            (24, 7),
            (24, 16),
            (16, 13),
            (5, 11),
            (0, 3),
        ] {
            let w = halves(&random_f32(&mut r, n * rows, 0.5));
            let w = cast_blocks::<F16>(&w);
            let x = random_f32(&mut r, n, 1.0);
            let start = random_f32(&mut r, rows, 1.0);
            for order in [F16SumOrder::TinyBlas, F16SumOrder::VecDot] {
                let (mut got, mut want) = (start.clone(), start.clone());
                // SAFETY: the test returned above unless the CPU has avx2 (every x86 table
                // implies fma and f16c with it).
                unsafe { avx2::rows_f16(w, &x, 0.37, &mut got, order) };
                for (o, row) in want.iter_mut().zip(w.chunks_exact(n.max(1))) {
                    // SAFETY: as above.
                    let d = unsafe {
                        match order {
                            F16SumOrder::TinyBlas => f16::avx2::tiny_blas_dot(row, &x),
                            F16SumOrder::VecDot => f16::avx2::dot(row, &x),
                        }
                    };
                    *o += d * 0.37;
                }
                assert!(
                    got.iter()
                        .zip(&want)
                        .all(|(g, w)| g.to_bits() == w.to_bits()),
                    "n {n} rows {rows} {order:?}"
                );
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_tokens_equal_the_rows_token_by_token() {
        if !crate::test_needs("avx2") {
            return;
        }
        let mut r = rng(92);
        for (rank, rows, tokens) in [
            (16, 1536, 5),
            (16, 13, 2),
            (8, 40, 3),
            (24, 17, 4),
            (64, 9, 2),
            (72, 8, 2),
            (12, 8, 3),
        ] {
            let w = halves(&random_f32(&mut r, rank * rows, 0.5));
            let w = cast_blocks::<F16>(&w);
            let x = random_f32(&mut r, rank * tokens, 1.0);
            let start = random_f32(&mut r, rows * tokens, 1.0);
            let (mut got, mut want) = (start.clone(), start.clone());
            // SAFETY: the test returned above unless the CPU has avx2 (with fma and f16c).
            unsafe { avx2::tokens_f16(w, &x, rank, 0.37, &mut got) };
            for (x, o) in x.chunks_exact(rank).zip(want.chunks_exact_mut(rows)) {
                // SAFETY: as above.
                unsafe { avx2::rows_f16(w, x, 0.37, o, F16SumOrder::TinyBlas) };
            }
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(g, w)| g.to_bits() == w.to_bits()),
                "rank {rank} rows {rows} tokens {tokens}"
            );
        }
    }

    const VEC: F16SumOrder = F16SumOrder::VecDot;

    #[test]
    fn a_pass_in_one_rows_order_gives_each_token_the_bits_of_a_step() {
        let mut r = rng(93);
        let (rank, cols, rows, n) = (16, 576, 1536, 5);
        let da = halves(&random_f32(&mut r, rank * cols, 0.1));
        let db = halves(&random_f32(&mut r, rows * rank, 0.1));
        let a = Weights::new(GgmlType::F16, &da, rank, cols).unwrap();
        let b = Weights::new(GgmlType::F16, &db, rows, rank).unwrap();
        let x = random_f32(&mut r, n * cols, 2.0);
        let mut batch = vec![0.0; n * rows];
        lora_add(&a, &b, Input::Rows(&x), n, VEC, 1.0, &mut batch).unwrap();
        let mut prompt = vec![0.0; n * rows];
        let tiny = F16SumOrder::TinyBlas;
        lora_add(&a, &b, Input::Rows(&x), n, tiny, 1.0, &mut prompt).unwrap();
        for (t, (xt, o)) in x
            .chunks_exact(cols)
            .zip(batch.chunks_exact(rows))
            .enumerate()
        {
            let mut step = vec![0.0; rows];
            lora_add(&a, &b, Input::Rows(xt), 1, tiny, 1.0, &mut step).unwrap();
            assert!(
                o.iter().zip(&step).all(|(g, w)| g.to_bits() == w.to_bits()),
                "token {t}"
            );
        }
        assert_ne!(
            batch, prompt,
            "the prompt's order gave a step's bits: nothing tested"
        );
    }

    #[test]
    fn a_pair_that_does_not_fit_is_an_error() {
        let da = halves(&[0.0; 4 * 8]);
        let db = halves(&[0.0; 6 * 3]);
        let a = Weights::new(GgmlType::F16, &da, 4, 8).unwrap();
        let b = Weights::new(GgmlType::F16, &db, 6, 3).unwrap();
        let err = lora_add(&a, &b, Input::Rows(&[0.0; 8]), 1, VEC, 1.0, &mut [0.0; 6]).unwrap_err();
        assert!(err.to_string().contains("lora_b"), "{err}");
        let dq = vec![0u8; 18];
        let q = Weights::new(GgmlType::Q4_0, &dq, 1, 32).unwrap();
        let db = halves(&[0.0; 2]);
        let b = Weights::new(GgmlType::F16, &db, 2, 1).unwrap();
        let err =
            lora_add(&q, &b, Input::Rows(&[0.0; 32]), 1, VEC, 1.0, &mut [0.0; 2]).unwrap_err();
        assert!(err.to_string().contains("Q4_0"), "{err}");
    }
}
