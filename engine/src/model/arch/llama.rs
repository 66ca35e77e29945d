//! The Llama-family pass (Llama 2/3, SmolLM2, Qwen2.5, Qwen3), read top to bottom:
//! embed -> for each layer { rms_norm, attention with rope over the kv cache, residual,
//! rms_norm, swiglu feed-forward, residual }. Qwen2's Q/K/V bias and Qwen3's per-head Q/K norm
//! are applied by the attention block when the layer has them.

use kostant_kernels::attention::F16SumOrder;

use super::super::blocks::Pass;
use super::super::blocks::{
    add_in_place, attention, embed, rms_norm, swiglu, AttentionSpec, Workspace,
};
use super::{check_room, rows_past_attention, Extent};
use crate::kv_cache::KvCache;
use crate::Result;

/// See [`super::transformer`].
pub(super) fn transformer(
    model: &Pass,
    kv: &mut KvCache,
    tokens: &[u32],
    extent: Extent,
    order: F16SumOrder,
    ws: &mut Workspace,
    mut after_layer: impl FnMut(usize, &[f32]),
) -> Result<()> {
    let hp = &model.hparams;
    let w = &model.weights;
    let (n, pos) = check_room(kv, tokens)?;

    let Workspace {
        x, angles, scratch, ..
    } = ws;
    // x: (n, n_embd). Every layer rotates the same positions: their angles are computed once
    // per pass.
    embed(model, tokens, x)?;
    model.rope.angles_for(hp, pos, n, angles);
    for (l, layer) in w.layers.iter().enumerate().take(extent.layers) {
        let xn = rms_norm(x, &layer.attn_norm, hp.rms_eps);
        let how = AttentionSpec {
            angles,
            window: None,
        };
        let att = attention(model, layer, l, kv, xn, n, pos, order, how, scratch)?;
        let rows = rows_past_attention(model, l, extent, n, x, att);
        add_in_place(x, &att[..rows * hp.n_embd]);

        let xn = rms_norm(x, &layer.ffn_norm, hp.rms_eps);
        let ffn = swiglu(model, layer, xn, rows, scratch)?;
        add_in_place(x, ffn);
        after_layer(l, x);
    }
    kv.advance(n);
    Ok(())
}
