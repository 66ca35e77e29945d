//! The adapter's side path on one linear layer: `out += scale * (x A^T) B^T`, computed after
//! the base matmul wrote `out`, in llama.cpp's order (`B (A x)`, scaled, then added), by the
//! kernels' [`lora_add`].
//!
//! `x` may be an `Input::RmsNormed` (the forward pass never stores normalised rows): the
//! kernel normalises each token's row again on its way into A, as the base matmul does.
//! ggml multiplies an F16 (BF16) matrix by activations first rounded to F16 (BF16), both
//! `x` before A and `A x` before B; the kernel rounds the same way, since without it replies
//! drift from llama.cpp's `--lora` within a few tokens.

use kostant_kernels::attention::F16SumOrder;
use kostant_kernels::{lora_add, Input};

use super::ActiveAdapter;
use crate::Result;

/// Adds `active`'s side path for the matrix in `slot` to `out`, (n, rows), if the adapter
/// targets it, summing in the pass's `order` (a verification pass sums as single steps do).
pub(crate) fn add_side_path(
    active: &ActiveAdapter,
    slot: Option<usize>,
    x: Input,
    (n, order): (usize, F16SumOrder),
    out: &mut [f32],
) -> Result<()> {
    let adapter = &active.adapter;
    let Some(pair) = slot.and_then(|s| adapter.pair(s)) else {
        return Ok(());
    };
    let scale = adapter.pair_scale(pair, active.scale);
    let file = adapter.file();
    lora_add(
        &pair.a.weights(file),
        &pair.b.weights(file),
        x,
        n,
        order,
        scale,
        out,
    )?;
    Ok(())
}
