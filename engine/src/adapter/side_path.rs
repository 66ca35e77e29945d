//! The adapter's side path on one linear layer: `out += scale * (x A^T) B^T`, computed after
//! the base matmul wrote `out`, in llama.cpp's order (`B (A x)`, scaled, then added).
//!
//! `x` may be an `Input::RmsNormed` (the forward pass never stores normalised rows): for F32
//! pairs the kernels normalise it again as they multiply by A, as they do for the base matrix.
//! ggml multiplies an F16 (BF16) matrix by activations first rounded to F16 (BF16), both
//! `x` before A and `A x` before B; the side path rounds the same way (into a buffer of its
//! own), since without it replies drift from llama.cpp's `--lora` within a few tokens.

use std::cell::Cell;

use kostant_kernels::norm::{rms_norm_row, rms_scale};
use kostant_kernels::{matmul_input, GgmlType, Input};

use super::ActiveAdapter;
use crate::Result;

thread_local! {
    /// `x` rounded as the pair's type, (n, cols); `x A^T`, (n, r); and `(x A^T) B^T`, (n,
    /// rows): reused from call to call, so a decode step with an adapter on allocates nothing
    /// once the first step has sized them.
    static SIDE: Cell<[Vec<f32>; 3]> = const { Cell::new([Vec::new(), Vec::new(), Vec::new()]) };
}

/// Adds `active`'s side path for the matrix in `slot` to `out`, (n, rows), if the adapter
/// targets it.
pub(crate) fn add_side_path(
    active: &ActiveAdapter,
    slot: Option<usize>,
    x: Input,
    n: usize,
    out: &mut [f32],
) -> Result<()> {
    let adapter = &active.adapter;
    let Some(pair) = slot.and_then(|s| adapter.pair(s)) else {
        return Ok(());
    };
    let scale = adapter.pair_scale(pair, active.scale);
    let file = adapter.file();
    let [mut xr, mut xa, mut d] = SIDE.take();
    let result = (|| {
        resize(&mut xa, n * pair.rank);
        if pair.a.ty == GgmlType::F32 {
            matmul_input(&pair.a.weights(file), x, n, &mut xa)?; // (n, r)
        } else {
            let cols = pair.a.cols;
            resize(&mut xr, n * cols);
            match x {
                Input::Rows(rows) => xr.copy_from_slice(rows),
                Input::RmsNormed { rows, weight, eps } => {
                    for (row, o) in rows.chunks_exact(cols).zip(xr.chunks_exact_mut(cols)) {
                        rms_norm_row(row, weight, rms_scale(row, eps), o);
                    }
                }
            }
            round_as(pair.a.ty, &mut xr);
            matmul_input(&pair.a.weights(file), Input::Rows(&xr), n, &mut xa)?;
        }
        round_as(pair.b.ty, &mut xa);
        resize(&mut d, n * pair.b.rows);
        matmul_input(&pair.b.weights(file), Input::Rows(&xa), n, &mut d)?; // (n, rows)
        for (o, d) in out.iter_mut().zip(&d) {
            *o += d * scale;
        }
        Ok(())
    })();
    SIDE.set([xr, xa, d]);
    result
}

/// Rounds `v` to the precision ggml converts activations to for a matrix of type `ty`.
fn round_as(ty: GgmlType, v: &mut [f32]) {
    match ty {
        GgmlType::F16 => v
            .iter_mut()
            .for_each(|x| *x = half::f16::from_f32(*x).to_f32()),
        GgmlType::BF16 => v
            .iter_mut()
            .for_each(|x| *x = half::bf16::from_f32(*x).to_f32()),
        _ => {}
    }
}

/// `buf` at length `len`; growing allocates once, shrinking keeps the capacity.
fn resize(buf: &mut Vec<f32>, len: usize) {
    if buf.len() != len {
        buf.resize(len, 0.0);
    }
}
