//! A LoRA pair's side path: `out (n, rows) += scale * ((x A^T) B^T)` with A (r, cols) and
//! B (rows, r) float matrices (F32, F16, BF16) and r small (8 to 64).
//!
//! The sums are ggml's: `x` is rounded to A's type before A, `x A^T` to B's type before B
//! (what ggml does to the activations of an F16 or BF16 matmul), and every dot runs in the
//! order of this table's `dot_f16` / `dot_bf16` / `dot_f32`. So the result is bit for bit what
//! two [`crate::matmul_input`] calls and an add give; this kernel only drops their costs, which
//! dwarfed the arithmetic at this size: a fork-join of the pool per call (a decode step makes
//! ~60 of them), an f16 widening per weight per token, and a call with its own horizontal sum
//! for each of B's rows of r values. Here one call runs both stages for a run of tokens, on
//! the calling thread for one token (only a large B's rows split over the pool), over the pool
//! (tokens split) for many; B's rows are summed eight at a time ([`Kernels::lora_rows_f16`]).

use std::cell::Cell;

use rayon::prelude::*;

use crate::attention_group::round_to_f16;
use crate::block::{cast_blocks, f32_view};
use crate::dispatch::{kernels, Kernels};
use crate::formats::bf16::BF16;
use crate::formats::f16::{self, F16};
use crate::norm::{rms_norm_row, rms_scale, Input};
use crate::{GgmlType, KernelError, Weights};

/// The rows of one of the pair's matrices, viewed in their type.
#[derive(Clone, Copy)]
enum Rows<'a> {
    F32(&'a [f32]),
    F16(&'a [F16]),
    BF16(&'a [BF16]),
}

impl<'a> Rows<'a> {
    /// `w`'s elements (F32 bytes through [`f32_view`], which may copy into `copy`).
    fn of(
        w: &Weights<'a>,
        what: &'static str,
        copy: &'a mut Vec<f32>,
    ) -> Result<Self, KernelError> {
        Ok(match w.ty {
            GgmlType::F32 => Rows::F32(f32_view(w.data, copy)),
            GgmlType::F16 => Rows::F16(cast_blocks::<F16>(w.data)),
            GgmlType::BF16 => Rows::BF16(cast_blocks::<BF16>(w.data)),
            ty => return Err(KernelError::Type { what, ty }),
        })
    }

    /// Rounds `v` to this type's precision (nothing for F32), as ggml converts activations.
    fn round(self, v: &mut [f32]) {
        match self {
            Rows::F32(_) => {}
            Rows::F16(_) => round_to_f16(v),
            Rows::BF16(_) => v
                .iter_mut()
                .for_each(|x| *x = half::bf16::from_f32(*x).to_f32()),
        }
    }

    /// `out[i] = dot(row i, x)` for the `out.len()` rows of `x.len()` values.
    fn dots(self, k: &Kernels, x: &[f32], out: &mut [f32]) {
        let n = x.len();
        match self {
            Rows::F32(w) => rows_each(w, n, out, |row| k.dot_f32(row, x)),
            Rows::F16(w) => rows_each(w, n, out, |row| k.dot_f16(row, x)),
            Rows::BF16(w) => rows_each(w, n, out, |row| k.dot_bf16(row, x)),
        }
    }

    /// Rows `first..first + count` of `n` values each.
    fn sub(self, first: usize, count: usize, n: usize) -> Self {
        let r = first * n..(first + count) * n;
        match self {
            Rows::F32(w) => Rows::F32(&w[r]),
            Rows::F16(w) => Rows::F16(&w[r]),
            Rows::BF16(w) => Rows::BF16(&w[r]),
        }
    }

    /// `out[i] += dot(row i, x) * scale`.
    fn add_dots(self, k: &Kernels, x: &[f32], scale: f32, out: &mut [f32]) {
        let n = x.len();
        let add = |o: &mut f32, d: f32| *o += d * scale;
        match self {
            Rows::F16(w) => k.lora_rows_f16(w, x, scale, out),
            Rows::F32(w) => out
                .iter_mut()
                .zip(w.chunks_exact(n))
                .for_each(|(o, row)| add(o, k.dot_f32(row, x))),
            Rows::BF16(w) => out
                .iter_mut()
                .zip(w.chunks_exact(n))
                .for_each(|(o, row)| add(o, k.dot_bf16(row, x))),
        }
    }
}

fn rows_each<W>(w: &[W], n: usize, out: &mut [f32], dot: impl Fn(&[W]) -> f32) {
    for (o, row) in out.iter_mut().zip(w.chunks_exact(n)) {
        *o = dot(row);
    }
}

thread_local! {
    /// One token's `x` (normalised, rounded) and `x A^T`: per thread, reused from call to call,
    /// so decode allocates nothing once the first call has sized them.
    static SCRATCH: Cell<(Vec<f32>, Vec<f32>)> = const { Cell::new((Vec::new(), Vec::new())) };
}

/// Bytes of weights times tokens below which the pool's fork-join costs more than it saves.
const PAR_MIN_WORK: usize = 256 * 1024;

/// For one token, a B of at least this many bytes has its rows split over the pool: one core
/// reads a 3B model's 8192-row B far slower than the memory bus allows (BENCHMARKS.md,
/// issue 21), while the default model's largest (1536 rows, 48 KiB) is done before a
/// fork-join would be.
const PAR_MIN_B_BYTES: usize = 64 * 1024;

/// Adds the side path of the pair `a` (r, cols), `b` (rows, r) for `n` tokens of `x` (n, cols)
/// to `out` (n, rows): `out += scale * ((x A^T) B^T)`, rounded and summed as ggml does (see
/// the module's comment). A and B may be F32, F16 or BF16, each on its own.
pub fn lora_add(
    a: &Weights,
    b: &Weights,
    x: Input,
    n: usize,
    scale: f32,
    out: &mut [f32],
) -> Result<(), KernelError> {
    a.check()?;
    b.check()?;
    x.check(n, a.cols)?;
    if b.cols != a.rows {
        return Err(KernelError::Length {
            what: "lora_b's columns (the rank of lora_a)",
            unit: "columns",
            expected: a.rows,
            got: b.cols,
        });
    }
    let expected = n.checked_mul(b.rows).ok_or(KernelError::Overflow {
        what: "out",
        rows: n,
        cols: b.rows,
    })?;
    if out.len() != expected {
        return Err(KernelError::Length {
            what: "out",
            unit: "values",
            expected,
            got: out.len(),
        });
    }
    let (mut copy_a, mut copy_b) = (Vec::new(), Vec::new());
    let ra = Rows::of(a, "lora_a", &mut copy_a)?;
    let rb = Rows::of(b, "lora_b", &mut copy_b)?;
    if out.is_empty() {
        return Ok(());
    }
    let k = kernels();
    let (cols, rank, rows) = (a.cols, a.rows, b.rows);
    let threads = rayon::current_num_threads();
    // B's rows are split over the pool for one token only when large (`PAR_MIN_B_BYTES`).
    let split_b = n == 1 && b.data.len() >= PAR_MIN_B_BYTES && threads > 1;
    let tokens = |first: usize, out: &mut [f32]| {
        let (mut xr, mut xa) = SCRATCH.take();
        xr.resize(cols, 0.0);
        xa.resize(rank, 0.0);
        for (t, o) in out.chunks_exact_mut(rows).enumerate() {
            let t = first + t;
            match x {
                Input::Rows(all) => xr.copy_from_slice(&all[t * cols..(t + 1) * cols]),
                Input::RmsNormed {
                    rows: all,
                    weight,
                    eps,
                } => {
                    let row = &all[t * cols..(t + 1) * cols];
                    rms_norm_row(row, weight, rms_scale(row, eps), &mut xr);
                }
            }
            ra.round(&mut xr);
            ra.dots(k, &xr, &mut xa);
            rb.round(&mut xa);
            if split_b {
                // Chunks of whole 8-row groups, so each row is summed as it is unsplit.
                let chunk = rows.div_ceil(4 * threads).next_multiple_of(8);
                let xa = &xa;
                o.par_chunks_mut(chunk)
                    .enumerate()
                    .for_each(|(c, o)| rb.sub(c * chunk, o.len(), rank).add_dots(k, xa, scale, o));
            } else {
                rb.add_dots(k, &xa, scale, o);
            }
        }
        SCRATCH.set((xr, xa));
    };
    let work = (a.data.len() + b.data.len()).saturating_mul(n);
    if n == 1 || work < PAR_MIN_WORK || threads < 2 {
        tokens(0, out);
    } else {
        let per_task = n.div_ceil(4 * threads).max(1);
        out.par_chunks_mut(per_task * rows)
            .enumerate()
            .for_each(|(c, o)| tokens(c * per_task, o));
    }
    Ok(())
}

/// Scalar reference of [`Kernels::lora_rows_f16`]: `out[i] += dot(row i of w, x) * scale`,
/// each dot the scalar `dot_f16`.
pub(crate) fn rows_f16_scalar(w: &[F16], x: &[f32], scale: f32, out: &mut [f32]) {
    let n = x.len().max(1);
    for (o, row) in out.iter_mut().zip(w.chunks_exact(n)) {
        *o += f16::dot_scalar(row, x) * scale;
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use crate::formats::f16::avx2::{dot, lanes};
    use crate::formats::f16::F16;

    /// `a`'s and `b`'s 8 lanes folded to 4 each as `hsum_ps` folds them (lane i plus lane
    /// i + 4), in the order [a0, a2, a1, a3 | b0, b2, b1, b3], ready for two `hadd`s.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn fold_pair(a: __m256, b: __m256) -> __m256 {
        let lo = _mm256_permute2f128_ps::<0x20>(a, b);
        let hi = _mm256_permute2f128_ps::<0x31>(a, b);
        _mm256_permute_ps::<0b11_01_10_00>(_mm256_add_ps(lo, hi))
    }

    /// `out[i] += dot(row i of w, x) * scale`, bit for bit as [`dot`] and a scalar multiply-add
    /// would give, eight rows at a time: their accumulators are reduced together (two `hadd`s
    /// pair the lanes as `hsum_ps` does), then scaled and added as one vector.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) fn rows_f16(w: &[F16], x: &[f32], scale: f32, out: &mut [f32]) {
        let n = x.len();
        if n == 0 || !n.is_multiple_of(8) {
            for (o, row) in out.iter_mut().zip(w.chunks_exact(n.max(1))) {
                *o += dot(row, x) * scale;
            }
            return;
        }
        let rows = out.len().min(w.len() / n);
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let vscale = _mm256_set1_ps(scale);
        let mut r = 0;
        while r + 8 <= rows {
            let acc: [__m256; 8] =
                std::array::from_fn(|i| lanes(&w[(r + i) * n..(r + i + 1) * n], x));
            let h0 = _mm256_hadd_ps(fold_pair(acc[0], acc[1]), fold_pair(acc[2], acc[3]));
            let h1 = _mm256_hadd_ps(fold_pair(acc[4], acc[5]), fold_pair(acc[6], acc[7]));
            // Lanes [s0, s2, s4, s6 | s1, s3, s5, s7], put back in row order.
            let sums = _mm256_permutevar8x32_ps(_mm256_hadd_ps(h0, h1), order);
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
        for (o, row) in out[r..rows].iter_mut().zip(w[r * n..].chunks_exact(n)) {
            *o += dot(row, x) * scale;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul_input;
    use crate::testutil::*;

    fn halves(v: &[f32]) -> Vec<u8> {
        v.iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect()
    }

    fn floats(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// The side path as two matmuls and an add, the way the engine computed it before this
    /// kernel: the reference the kernel must equal bit for bit.
    fn two_matmuls(a: &Weights, b: &Weights, x: Input, n: usize, scale: f32, out: &mut [f32]) {
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
        let mut xa = vec![0.0; n * a.rows];
        matmul_input(a, Input::Rows(&xr), n, &mut xa).unwrap();
        round(b.ty, &mut xa);
        let mut d = vec![0.0; n * b.rows];
        matmul_input(b, Input::Rows(&xa), n, &mut d).unwrap();
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
                for input in [
                    Input::Rows(&x),
                    Input::RmsNormed {
                        rows: &x,
                        weight: &norm,
                        eps: 1e-5,
                    },
                ] {
                    let (mut got, mut want) = (start.clone(), start.clone());
                    lora_add(&a, &b, input, n, 1.75, &mut got).unwrap();
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
            (5, 11),
            (0, 3),
        ] {
            let w = halves(&random_f32(&mut r, n * rows, 0.5));
            let w = cast_blocks::<F16>(&w);
            let x = random_f32(&mut r, n, 1.0);
            let start = random_f32(&mut r, rows, 1.0);
            let (mut got, mut want) = (start.clone(), start.clone());
            // SAFETY: the test returned above unless the CPU has avx2 (every x86 table implies fma
            // and f16c with it).
            unsafe { avx2::rows_f16(w, &x, 0.37, &mut got) };
            for (o, row) in want.iter_mut().zip(w.chunks_exact(n.max(1))) {
                // SAFETY: as above.
                *o += unsafe { f16::avx2::dot(row, &x) } * 0.37;
            }
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(g, w)| g.to_bits() == w.to_bits()),
                "n {n} rows {rows}"
            );
        }
    }

    #[test]
    fn a_pair_that_does_not_fit_is_an_error() {
        let da = halves(&[0.0; 4 * 8]);
        let db = halves(&[0.0; 6 * 3]);
        let a = Weights::new(GgmlType::F16, &da, 4, 8).unwrap();
        let b = Weights::new(GgmlType::F16, &db, 6, 3).unwrap();
        let err = lora_add(&a, &b, Input::Rows(&[0.0; 8]), 1, 1.0, &mut [0.0; 6]).unwrap_err();
        assert!(err.to_string().contains("lora_b"), "{err}");
        let dq = vec![0u8; 18];
        let q = Weights::new(GgmlType::Q4_0, &dq, 1, 32).unwrap();
        let db = halves(&[0.0; 2]);
        let b = Weights::new(GgmlType::F16, &db, 2, 1).unwrap();
        let err = lora_add(&q, &b, Input::Rows(&[0.0; 32]), 1, 1.0, &mut [0.0; 2]).unwrap_err();
        assert!(err.to_string().contains("Q4_0"), "{err}");
    }
}
