//! The adapter's side path on one linear layer: `out += scale * (x A^T) B^T`, computed after
//! the base matmul wrote `out`, in llama.cpp's order (`B (A x)`, scaled, then added), by the
//! kernels' [`lora_add_fused`].
//!
//! `x` may be an `Input::RmsNormed` (the forward pass never stores normalised rows): the
//! kernel normalises each token's row again on its way into A, as the base matmul does, once
//! for all the layers that read the same input (q, k and v; gate and up).
//! ggml multiplies an F16 (BF16) matrix by activations first rounded to F16 (BF16), both
//! `x` before A and `A x` before B; the kernel rounds the same way, since without it replies
//! drift from llama.cpp's `--lora` within a few tokens.

use kostant_kernels::attention::F16SumOrder;
use kostant_kernels::{lora_add_fused, lora_one_token_then, Input, LoraPair, LoraSide, RowsThen};

use super::ActiveAdapter;
use crate::Result;

/// Adds `active`'s side paths for the matrices in `slots` to their `outs`, each (n, rows), for
/// those the adapter targets, summing in the pass's `order` (a verification pass sums as single
/// steps do). All of them read `x`.
pub(crate) fn add_side_paths<const N: usize>(
    active: &ActiveAdapter,
    slots: [Option<usize>; N],
    x: Input,
    (n, order): (usize, F16SumOrder),
    outs: [&mut [f32]; N],
) -> Result<()> {
    let adapter = &active.adapter;
    let file = adapter.file();
    let mut pairs: [Option<LoraPair>; N] = [const { None }; N];
    for ((p, slot), out) in pairs.iter_mut().zip(slots).zip(outs) {
        if let Some(pair) = slot.and_then(|s| adapter.pair(s)) {
            *p = Some(LoraPair {
                a: pair.a.weights(file),
                b: pair.b.weights(file),
                scale: adapter.pair_scale(pair, active.scale),
                out,
            });
        }
    }
    lora_add_fused(pairs, x, n, order)?;
    Ok(())
}

/// For one token: runs the A stages of `active`'s side paths on the matrices in `slots` (of
/// `rows` outputs each), then `then` with the adder of their B stages, which the base
/// matmul's tasks call on the rows they have just written ([`lora_one_token_then`]). The
/// same sums as [`add_side_paths`] for one token, in one fork-join of the pool fewer.
pub(crate) fn with_side_paths_one_token<const N: usize, R>(
    active: &ActiveAdapter,
    slots: [Option<usize>; N],
    x: Input,
    (rows, order): ([usize; N], F16SumOrder),
    then: impl FnOnce(&RowsThen<'_>) -> R,
) -> Result<R> {
    let adapter = &active.adapter;
    let file = adapter.file();
    let mut sides: [Option<LoraSide>; N] = [None; N];
    for ((side, slot), out_len) in sides.iter_mut().zip(slots).zip(rows) {
        if let Some(pair) = slot.and_then(|s| adapter.pair(s)) {
            *side = Some(LoraSide {
                a: pair.a.weights(file),
                b: pair.b.weights(file),
                scale: adapter.pair_scale(pair, active.scale),
                out_len,
            });
        }
    }
    Ok(lora_one_token_then(sides, x, order, then)?)
}
