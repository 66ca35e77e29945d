//! Requantizing a GGUF into another weight format the kernels run: what `kostant quantize`
//! writes, and how the tests make a real model in every format to check against llama.cpp
//! (`engine/tests/quant_golden.rs`).
//!
//! Every 2-D weight matrix is dequantized and requantized with the kernels' reference
//! quantizers, which write ggml's block layouts (their choice of codes is simpler than
//! llama-quantize's, so the bytes differ from its files). Following llama.cpp's
//! `llama_tensor_get_type`, the output matrix (or the token embedding when it doubles as the
//! output) gets Q6_K (the file's own type for Q8_0 and the float types), and a matrix whose rows
//! are not a whole number of a 256-element format's blocks falls back as llama.cpp's does
//! (Q2_K, Q3_K and IQ4_XS to IQ4_NL, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0); norms and other
//! 1-D tensors are copied unchanged.

use std::path::Path;

use super::{GgmlType, Gguf, GgufWriter, TensorInfo, Value};
use crate::{EngineError, Result};

/// The weight formats a file can be requantized to: every format the kernels run but F32.
pub const TARGETS: [GgmlType; 14] = [
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q6_K,
    GgmlType::Q5_K,
    GgmlType::Q5_1,
    GgmlType::Q5_0,
    GgmlType::Q4_K,
    GgmlType::Q4_1,
    GgmlType::Q4_0,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::Q3_K,
    GgmlType::Q2_K,
];

/// The target format named `s` (any case); `None` if it is not one of [`TARGETS`].
pub fn parse_target(s: &str) -> Option<GgmlType> {
    TARGETS
        .into_iter()
        .find(|t| t.name().eq_ignore_ascii_case(s.trim()))
}

/// llama.cpp's `llama_ftype` number for a file whose matrices are mostly `ty` (the "_S"
/// mixes for the K-quants: one type throughout).
pub fn file_type(ty: GgmlType) -> u32 {
    match ty {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q4_0 => 2,
        GgmlType::Q4_1 => 3,
        GgmlType::Q8_0 => 7,
        GgmlType::Q5_0 => 8,
        GgmlType::Q5_1 => 9,
        GgmlType::Q2_K => 10,
        GgmlType::Q3_K => 11,
        GgmlType::Q4_K => 14,
        GgmlType::Q5_K => 16,
        GgmlType::Q6_K => 18,
        GgmlType::IQ4_NL => 25,
        GgmlType::IQ4_XS => 30,
        GgmlType::BF16 => 32,
    }
}

/// llama.cpp's fallback for a matrix whose rows are not a whole number of `ty`'s 256-element
/// blocks (`llama_tensor_get_type`); `ty` itself for the 32-element and float formats.
fn fallback(ty: GgmlType) -> GgmlType {
    match ty {
        GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::IQ4_XS => GgmlType::IQ4_NL,
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        other => other,
    }
}

/// What one tensor becomes.
fn target_type(info: &TensorInfo, ty: GgmlType, has_output: bool) -> GgmlType {
    if info.dims.len() != 2 || !info.name.ends_with(".weight") {
        return info.ty;
    }
    let is_output =
        info.name == "output.weight" || (!has_output && info.name == "token_embd.weight");
    let float = matches!(ty, GgmlType::F16 | GgmlType::BF16);
    let mut goal = if is_output && !float && ty != GgmlType::Q8_0 {
        GgmlType::Q6_K
    } else {
        ty
    };
    if !info.cols().is_multiple_of(goal.block_len()) {
        goal = fallback(goal);
    }
    // A row that is still not a whole number of blocks stays as it is (llama.cpp's own last
    // resort is a float type).
    if !info.cols().is_multiple_of(goal.block_len()) {
        info.ty
    } else {
        goal
    }
}

#[derive(Debug, Default)]
pub struct QuantizeStats {
    pub requantized: usize,
    pub copied: usize,
    /// Relative RMS error of the requantized matrices against their source values.
    pub rel_rms_error: f64,
    pub bytes_in: usize,
    pub bytes_out: usize,
}

/// Requantizes `input` into `out` at `ty` (one of [`TARGETS`]).
pub fn requantize(input: &Path, out: &Path, ty: GgmlType) -> Result<QuantizeStats> {
    if !TARGETS.contains(&ty) {
        return Err(EngineError::Model(format!(
            "cannot requantize into {}: not a target format",
            ty.name()
        )));
    }
    let g = Gguf::open(input)?;
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata() {
        w.metadata(k, v.clone());
    }
    w.metadata("general.file_type", Value::U32(file_type(ty)));
    let has_output = g.tensor("output.weight").is_some();
    let mut stats = QuantizeStats {
        bytes_in: g.file_bytes(),
        ..Default::default()
    };
    let (mut err2, mut ref2) = (0f64, 0f64);
    for info in g.tensors() {
        let data = g.tensor_data(info);
        let goal = target_type(info, ty, has_output);
        if goal == info.ty {
            w.tensor(&info.name, &info.dims, info.ty, data.to_vec());
            stats.copied += 1;
            continue;
        }
        let (rows, cols) = (info.rows(), info.cols());
        let in_row = data.len() / rows;
        let mut packed = Vec::with_capacity(rows * goal.row_bytes(cols).unwrap_or(0));
        let mut src = vec![0f32; cols];
        let mut back = vec![0f32; cols];
        let bad = |e: kostant_kernels::KernelError| {
            EngineError::Gguf(format!("tensor {}: {e}", info.name))
        };
        for r in 0..rows {
            kostant_kernels::dequantize_row(info.ty, &data[r * in_row..(r + 1) * in_row], &mut src)
                .map_err(bad)?;
            let q = kostant_kernels::quantize_row(goal, &src).map_err(bad)?;
            kostant_kernels::dequantize_row(goal, &q, &mut back).map_err(bad)?;
            for (a, b) in src.iter().zip(&back) {
                err2 += ((a - b) as f64).powi(2);
                ref2 += (*a as f64).powi(2);
            }
            packed.extend_from_slice(&q);
        }
        w.tensor(&info.name, &info.dims, goal, packed);
        stats.requantized += 1;
    }
    stats.rel_rms_error = if ref2 > 0.0 {
        (err2 / ref2).sqrt()
    } else {
        0.0
    };
    w.write_to(out)?;
    stats.bytes_out = std::fs::metadata(out)
        .map(|m| m.len() as usize)
        .unwrap_or(0);
    Ok(stats)
}
