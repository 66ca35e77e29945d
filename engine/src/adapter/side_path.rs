//! The adapter's side path on one linear layer: `out += scale * (x A^T) B^T`, computed after
//! the base matmul wrote `out`, in llama.cpp's order (`B (A x)`, scaled, then added).
//!
//! Per token: the input row (normalised here when it is an `Input::RmsNormed`, which the forward
//! pass never stores), r dots with A's rows, then r axpys of B's columns into the output. The
//! matrices are tiny beside the base's, so a token's side path runs on one thread, and a
//! prompt's tokens split over the pool. ggml multiplies an F16 (BF16) matrix by activations
//! first rounded to F16 (BF16), both `x` before A and `A x` before B; the side path rounds the
//! same way, since without it replies drift from llama.cpp's `--lora` within a few tokens.

use rayon::prelude::*;

use kostant_kernels::norm::{rms_norm_row, rms_scale};
use kostant_kernels::{axpy_f32, dot_f32, GgmlType, Input};

use super::ActiveAdapter;
use crate::Result;

/// Most ranks a token's `A x` is kept for on the stack; larger ranks (none in practice) take
/// a heap buffer.
const STACK_RANK: usize = 128;

/// Adds `active`'s side path for the matrix in `slot` to `out`, (n, rows), if the adapter
/// targets it. Allocates nothing for ranks up to [`STACK_RANK`] and rows up to 8192 wide.
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
    let (cols, rows) = (pair.a.cols, pair.b.rows);
    let one = |(t, o): (usize, &mut [f32])| {
        let mut row_buf = [0.0f32; 8192];
        let mut heap = Vec::new();
        let xr: &mut [f32] = if cols <= row_buf.len() {
            &mut row_buf[..cols]
        } else {
            heap.resize(cols, 0.0);
            &mut heap
        };
        match x {
            Input::Rows(v) => xr.copy_from_slice(&v[t * cols..(t + 1) * cols]),
            Input::RmsNormed {
                rows: v,
                weight,
                eps,
            } => {
                let row = &v[t * cols..(t + 1) * cols];
                rms_norm_row(row, weight, rms_scale(row, eps), xr);
            }
        }
        round_as(pair.a.ty, xr);
        let mut xa_buf = [0.0f32; STACK_RANK];
        let mut xa_heap = Vec::new();
        let xa: &mut [f32] = if pair.rank <= STACK_RANK {
            &mut xa_buf[..pair.rank]
        } else {
            xa_heap.resize(pair.rank, 0.0);
            &mut xa_heap
        };
        for (j, v) in xa.iter_mut().enumerate() {
            *v = dot_f32(&pair.a32[j * cols..(j + 1) * cols], xr);
        }
        round_as(pair.b.ty, xa);
        // ggml scales B (A x) and then adds it; scaling each term first differs only in the
        // last bits.
        for (j, &v) in xa.iter().enumerate() {
            axpy_f32(v * scale, &pair.bt32[j * rows..(j + 1) * rows], o);
        }
    };
    if n == 1 {
        one((0, out));
    } else {
        out.par_chunks_mut(rows).enumerate().for_each(one);
    }
    Ok(())
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
