//! The Gemma 3 pass (Gemma Team 2025; llama.cpp's `src/models/gemma3.cpp` is the reference it
//! follows), read top to bottom: embed scaled by sqrt(n_embd) -> for each layer { rms_norm,
//! attention (per-head Q/K norm, rope; five layers in six see only a sliding window and rotate
//! with their own base), rms_norm of its output, residual, rms_norm, geglu feed-forward,
//! rms_norm of its output, residual }. The final norm and the lm head (tied to the embedding)
//! are the shared ones.

use kostant_kernels::attention::F16SumOrder;

use super::super::blocks::Pass;
use super::super::blocks::{
    add_in_place, attention, embed, geglu, rms_norm, rms_norm_in_place, scale_in_place,
    AttentionSpec, Workspace,
};
use super::{check_room, rows_past_attention, Extent};
use crate::kv_cache::KvCache;
use crate::{EngineError, Result};

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
    let sliding_rope = model.rope_swa.as_ref().ok_or_else(|| {
        EngineError::Model("gemma3 model loaded without its windowed rope".into())
    })?;

    let Workspace {
        x,
        angles,
        angles_swa,
        scratch,
        ..
    } = ws;
    // x: (n, n_embd)
    embed(model, tokens, x)?;
    scale_in_place(x, (hp.n_embd as f32).sqrt());
    model.rope.angles_for(hp, pos, n, angles);
    sliding_rope.angles_for(hp, pos, n, angles_swa);
    for (l, layer) in w.layers.iter().enumerate().take(extent.layers) {
        let missing = || EngineError::Model(format!("gemma3 layer {l} lost a norm"));
        let post_attn_norm = layer.post_attn_norm.as_deref().ok_or_else(missing)?;
        let post_ffn_norm = layer.post_ffn_norm.as_deref().ok_or_else(missing)?;

        let xn = rms_norm(x, &layer.attn_norm, hp.rms_eps);
        let window = hp.window(l);
        let how = AttentionSpec {
            angles: if window.is_some() { angles_swa } else { angles },
            window,
        };
        let att = attention(model, layer, l, kv, xn, n, pos, order, how, scratch)?;
        let rows = rows_past_attention(model, l, extent, n, x, att);
        let att = &mut att[..rows * hp.n_embd];
        rms_norm_in_place(att, post_attn_norm, hp.rms_eps);
        add_in_place(x, att);

        let xn = rms_norm(x, &layer.ffn_norm, hp.rms_eps);
        let ffn = geglu(model, layer, xn, rows, scratch)?;
        rms_norm_in_place(ffn, post_ffn_norm, hp.rms_eps);
        add_in_place(x, ffn);
        after_layer(l, x);
    }
    kv.advance(n);
    Ok(())
}
