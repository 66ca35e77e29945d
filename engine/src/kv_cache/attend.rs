//! Attention over one kv head's stored rows, in the cache's own storage format: the cache
//! knows how its keys and values are kept (f16 values, Q8_0 blocks, rotated Q4_0 blocks), so
//! it is the one that pairs a query with them, in the orders llama.cpp uses for each format.

use kostant_kernels::attention::{hsum8, F16SumOrder};
use kostant_kernels::attention_group::{
    dot_f16_rows_group, round_to_f16, weighted_sum_f16_rows_group,
};
use kostant_kernels::attention_q4::{dot_q4_0_rows, weighted_sum_q4_0_rows};
use kostant_kernels::attention_q8::{
    dot_q8_0_rows, quantize_q8_0_kv, weighted_sum_q8_0_rows, KvBlockQ8_0, Q8_0_BLOCK,
};
use kostant_kernels::exp_f32;

use super::{rotation, HeadView};

/// One task's scratch, each cut to the task's size by the caller: the group's query heads
/// (f16-rounded or rotated copies), their scores (group, visible), the weighted sums' lanes,
/// one query head as Q8_0 blocks.
pub(crate) struct HeadBuffers<'s> {
    pub q_h: &'s mut [f32],
    pub probs: &'s mut [f32],
    pub lanes: &'s mut [f32],
    pub q_blocks: &'s mut [KvBlockQ8_0],
}

/// Which of a head's rows a task reads and how it scores them.
#[derive(Clone, Copy)]
pub(crate) struct HeadSpan {
    /// Width of a head.
    pub hd: usize,
    /// Rows of the head to pass over before the first visible one.
    pub skip: usize,
    /// Rows each query sees, from `skip` on.
    pub visible: usize,
    /// What the scores are multiplied by.
    pub scale: f32,
    pub order: F16SumOrder,
}

impl HeadView<'_> {
    /// Attention of the group's query heads `q_group` (side by side, `hd` wide each) over this
    /// kv head's visible rows, into `o` (the same shape as `q_group`).
    pub(crate) fn attend(&self, q_group: &[f32], span: HeadSpan, buf: HeadBuffers, o: &mut [f32]) {
        let HeadSpan {
            hd,
            skip,
            visible,
            scale,
            order,
        } = span;
        let HeadBuffers {
            q_h,
            probs,
            lanes,
            q_blocks,
        } = buf;
        match *self {
            HeadView::F16 { k, v } => {
                // The queries meet the f16 keys at f16 precision, as in llama.cpp. The
                // group shares each key and value row as it is read (the same bits as
                // head by head).
                q_h.copy_from_slice(q_group);
                round_to_f16(q_h);
                let (k, v) = (&k[skip * hd..], &v[skip * hd..]);
                dot_f16_rows_group(q_h, hd, k, hd, 0, scale, order, probs);
                probs.chunks_exact_mut(visible).for_each(softmax);
                weighted_sum_f16_rows_group(probs, hd, v, hd, 0, order, lanes, o);
            }
            HeadView::Q8_0 { k, v } => {
                let probs = &mut probs[..visible];
                let stride = hd / Q8_0_BLOCK;
                let (k, v) = (&k[skip * stride..], &v[skip * stride..]);
                for (q_src, o_h) in q_group.chunks_exact(hd).zip(o.chunks_exact_mut(hd)) {
                    // The query is quantized like the keys, so each block's dot is exact
                    // in integers (as llama.cpp does with a q8_0 K cache). The cache made
                    // sure heads are whole blocks.
                    quantize_q8_0_kv(q_src, q_blocks);
                    dot_q8_0_rows(q_blocks, k, stride, 0, scale, probs);
                    softmax(probs);
                    weighted_sum_q8_0_rows(probs, v, stride, 0, o_h);
                }
            }
            HeadView::Q4_0 { k, v } => {
                // As for Q8_0: the query as Q8_0 blocks, so each block's dot against the
                // 4-bit keys is exact in integers (llama.cpp's pairing for a q4_0 K cache).
                // The rows are stored rotated (see `rotation`): the query is rotated to
                // match, and the output rotated back.
                let probs = &mut probs[..visible];
                let stride = hd / Q8_0_BLOCK;
                let (k, v) = (&k[skip * stride..], &v[skip * stride..]);
                let q_rot = &mut q_h[..hd];
                for (q_src, o_h) in q_group.chunks_exact(hd).zip(o.chunks_exact_mut(hd)) {
                    q_rot.copy_from_slice(q_src);
                    rotation::rotate(q_rot);
                    quantize_q8_0_kv(q_rot, q_blocks);
                    dot_q4_0_rows(q_blocks, k, stride, 0, scale, probs);
                    softmax(probs);
                    weighted_sum_q4_0_rows(probs, v, stride, 0, o_h);
                    rotation::unrotate(o_h);
                }
            }
        }
    }
}

/// Softmax in place, subtracting the max for stability, computed as ggml computes it: its
/// polynomial exp ([`exp_f32`]), each group of 8 terms added in f32 in its SIMD lane order, the
/// group sums accumulated in f64, then one multiply by the f32 reciprocal.
pub(crate) fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for v in x.iter_mut() {
        *v -= max;
    }
    exp_f32(x);
    let mut sum = 0.0f64;
    for chunk in x.chunks(8) {
        let mut lanes = [0.0f32; 8]; // ggml's rows are padded with masked (zero) terms
        lanes[..chunk.len()].copy_from_slice(chunk);
        sum += hsum8(&lanes) as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}
