//! One forward pass per architecture, each readable top to bottom over the shared blocks
//! (`model/blocks.rs`): `llama.rs` for Llama, Qwen2 and Qwen3, `gemma3.rs` for Gemma 3.

mod gemma3;
mod llama;

use kostant_kernels::attention::F16SumOrder;

use super::blocks::{Pass, Workspace};
use super::hparams::Arch;
use super::Model;
use crate::kv_cache::KvCache;
use crate::{EngineError, Result};

/// How far a pass goes: the first `layers` layers, and of the model's last layer only the last
/// `last_rows` rows past attention (llama.cpp's `inp_out_ids`: the rows whose logits are
/// wanted). The feed-forward matmuls' kernels, like llama.cpp's, depend on how many rows they
/// multiply, so running as many rows as llama.cpp does keeps its bits.
#[derive(Clone, Copy, Debug)]
pub(super) struct Extent {
    pub layers: usize,
    pub last_rows: usize,
}

/// The transformer blocks of `model`'s architecture: embeds `tokens`, runs the layers `extent`
/// asks for (calling `after_layer(l, x)` with the residual stream after layer `l`), appends the
/// keys and values to the cache and leaves the last run layer's residual stream, (n, n_embd)
/// (the last `extent.last_rows` rows where the model's last layer ran on fewer), before the
/// final norm, in `ws.x`. A cache filled with fewer than all layers only serves later calls
/// that also stop early.
pub(super) fn transformer(
    model: &Pass,
    kv: &mut KvCache,
    tokens: &[u32],
    extent: Extent,
    order: F16SumOrder,
    ws: &mut Workspace,
    after_layer: impl FnMut(usize, &[f32]),
) -> Result<()> {
    match model.hparams.arch {
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 => {
            llama::transformer(model, kv, tokens, extent, order, ws, after_layer)
        }
        Arch::Gemma3 => gemma3::transformer(model, kv, tokens, extent, order, ws, after_layer),
    }
}

/// At the model's last layer, once attention has run on every row: keeps only the last `rows`
/// rows of the residual stream `x` and of the attention output `att` (both (n, n_embd)), as
/// llama.cpp's `inp_out_ids` does, and returns how many rows go on (n in every other layer).
fn rows_past_attention(
    model: &Model,
    l: usize,
    extent: Extent,
    n: usize,
    x: &mut Vec<f32>,
    att: &mut [f32],
) -> usize {
    let e = model.hparams.n_embd;
    if l + 1 != model.hparams.n_layer || extent.last_rows >= n {
        return n;
    }
    let rows = extent.last_rows;
    x.drain(..(n - rows) * e);
    att.copy_within((n - rows) * e.., 0);
    rows
}

/// The pass's length and first position, once it is known to hold tokens and to fit the cache.
fn check_room(kv: &KvCache, tokens: &[u32]) -> Result<(usize, usize)> {
    let (n, pos) = (tokens.len(), kv.len());
    if n == 0 {
        return Err(EngineError::InvalidRequest("no tokens to run".into()));
    }
    if pos + n > kv.capacity() {
        return Err(EngineError::ContextOverflow {
            prompt_tokens: pos + n,
            context: kv.capacity(),
        });
    }
    Ok((n, pos))
}
