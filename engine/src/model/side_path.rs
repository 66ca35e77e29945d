//! A side path on one linear layer (a LoRA adapter's): `out += scale * (x A^T) B^T`, computed after
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
use kostant_kernels::{
    lora_add_fused, lora_one_token_then, Input, LoraPair, LoraSide, RowsThen, Weights,
};

use crate::Result;

/// The low-rank side paths a pass adds to its linear layers: for a linear slot of the model
/// (`model::weights::linear_slot`), the A and B matrices and the scale, if one is targeted.
/// The model owns this contract and an adapter fulfils it, so the forward pass never depends
/// on how adapters are loaded or checked.
pub trait SidePaths: Sync {
    /// A (r x cols), B (rows x r) and the scale applied to `B (A x)` for `slot`, or None
    /// where no side path is targeted.
    fn side_path(&self, slot: usize) -> Option<(Weights<'_>, Weights<'_>, f32)>;
}

/// Adds `active`'s side paths for the matrices in `slots` to their `outs`, each (n, rows), for
/// those the adapter targets, summing in the pass's `order` (a verification pass sums as single
/// steps do). All of them read `x`.
pub(crate) fn add_side_paths<const N: usize>(
    active: &dyn SidePaths,
    slots: [Option<usize>; N],
    x: Input,
    (n, order): (usize, F16SumOrder),
    outs: [&mut [f32]; N],
) -> Result<()> {
    let mut pairs: [Option<LoraPair>; N] = [const { None }; N];
    for ((p, m), out) in pairs.iter_mut().zip(targeted(active, slots)).zip(outs) {
        *p = m.map(|(a, b, scale)| LoraPair { a, b, scale, out });
    }
    lora_add_fused(pairs, x, n, order)?;
    Ok(())
}

/// The adapter's A, B and scale for each of `slots` it targets (`None` for the others).
fn targeted<'a, const N: usize>(
    active: &'a dyn SidePaths,
    slots: [Option<usize>; N],
) -> [Option<(Weights<'a>, Weights<'a>, f32)>; N] {
    slots.map(|slot| active.side_path(slot?))
}

/// For one token: runs the A stages of `active`'s side paths on the matrices in `slots` (of
/// `rows` outputs each), then `then` with the adder of their B stages, which the base
/// matmul's tasks call on the rows they have just written ([`lora_one_token_then`]). The
/// same sums as [`add_side_paths`] for one token, in one fork-join of the pool fewer.
pub(crate) fn with_side_paths_one_token<const N: usize, R>(
    active: &dyn SidePaths,
    slots: [Option<usize>; N],
    x: Input,
    (rows, order): ([usize; N], F16SumOrder),
    then: impl FnOnce(&RowsThen<'_>) -> R,
) -> Result<R> {
    let mut sides: [Option<LoraSide>; N] = [None; N];
    for ((side, m), out_len) in sides.iter_mut().zip(targeted(active, slots)).zip(rows) {
        *side = m.map(|(a, b, scale)| LoraSide {
            a,
            b,
            scale,
            out_len,
        });
    }
    Ok(lora_one_token_then(sides, x, order, then)?)
}
