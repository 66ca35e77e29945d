//! The adapter's side path on one linear layer: `out += scale * (x A^T) B^T`, computed after
//! the base matmul wrote `out`, in llama.cpp's order (`B (A x)`, scaled, then added).
//!
//! `x` may be an `Input::RmsNormed` (the forward pass never stores normalised rows): the
//! kernels normalise it again as they multiply by A, exactly as they do for the base matrix,
//! so the side path needs no copy of the rows.

use std::cell::Cell;

use kostant_kernels::{matmul_input, Input};

use super::ActiveAdapter;
use crate::Result;

thread_local! {
    /// `x A^T`, (n, r), and `(x A^T) B^T`, (n, rows): reused from call to call, so a decode
    /// step with an adapter on allocates nothing once the first step has sized them.
    static SIDE: Cell<(Vec<f32>, Vec<f32>)> = const { Cell::new((Vec::new(), Vec::new())) };
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
    let (mut xa, mut d) = SIDE.take();
    let result = (|| {
        resize(&mut xa, n * pair.rank);
        matmul_input(&pair.a.weights(file), x, n, &mut xa)?; // (n, r)
        resize(&mut d, n * pair.b.rows);
        matmul_input(&pair.b.weights(file), Input::Rows(&xa), n, &mut d)?; // (n, rows)
        for (o, d) in out.iter_mut().zip(&d) {
            *o += d * scale;
        }
        Ok(())
    })();
    SIDE.set((xa, d));
    result
}

/// `buf` at length `len`; growing allocates once, shrinking keeps the capacity.
fn resize(buf: &mut Vec<f32>, len: usize) {
    if buf.len() != len {
        buf.resize(len, 0.0);
    }
}
