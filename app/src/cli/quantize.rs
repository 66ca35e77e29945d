//! `kostant quantize`: requantize a GGUF into another of the formats our kernels run (Q8_0,
//! Q4_0, Q4_1), so the safety evals can be re-run on exactly what a smaller build would ship.
//!
//! Every 2-D weight matrix is dequantized and requantized with the kernels' reference
//! quantizers, which write ggml's block layouts. Following llama.cpp's `llama_tensor_get_type`,
//! the output matrix (or the token embedding when it doubles as the output) gets Q6_K when its
//! rows are a multiple of 256 and Q8_0 otherwise (Q8_0 in a Q8_0 file); norms and other 1-D
//! tensors are copied unchanged. The result is loaded and made to generate before we call it done.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;

use kostant_engine::gguf::{GgmlType, Gguf, GgufWriter, Value};
use kostant_engine::{CancelHandle, GenerateRequest, Model, SamplingParams, Session, Speculation};

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The GGUF to read.
    #[arg(long = "in")]
    pub input: PathBuf,
    /// Where to write the requantized GGUF.
    #[arg(long)]
    pub out: PathBuf,
    /// Target format: Q8_0, Q4_0 or Q4_1.
    #[arg(long = "type")]
    pub ty: String,
}

/// The weight formats a file can be requantized to.
pub fn parse_type(s: &str) -> Result<GgmlType> {
    match s.to_ascii_uppercase().as_str() {
        "Q8_0" => Ok(GgmlType::Q8_0),
        "Q4_0" => Ok(GgmlType::Q4_0),
        "Q4_1" => Ok(GgmlType::Q4_1),
        _ => bail!("unknown quantization type {s:?} (supported: Q8_0, Q4_0, Q4_1)"),
    }
}

/// llama.cpp's `llama_ftype` number for a file whose matrices are mostly `ty`.
fn file_type(ty: GgmlType) -> u32 {
    match ty {
        GgmlType::Q4_0 => 2,
        GgmlType::Q4_1 => 3,
        GgmlType::Q8_0 => 7,
        _ => 0,
    }
}

/// What one tensor becomes.
fn target_type(
    info: &kostant_engine::gguf::TensorInfo,
    ty: GgmlType,
    has_output: bool,
) -> GgmlType {
    if info.dims.len() != 2 || !info.name.ends_with(".weight") {
        return info.ty;
    }
    let is_output =
        info.name == "output.weight" || (!has_output && info.name == "token_embd.weight");
    let goal = if is_output {
        if ty == GgmlType::Q8_0 || !info.cols().is_multiple_of(256) {
            GgmlType::Q8_0
        } else {
            GgmlType::Q6_K
        }
    } else {
        ty
    };
    // A row that is not a whole number of blocks stays as it is (llama.cpp falls back too).
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

/// Requantizes `input` into `out` at `ty`.
pub fn requantize(input: &Path, out: &Path, ty: GgmlType) -> Result<QuantizeStats> {
    let g = Gguf::open(input).with_context(|| format!("cannot read {}", input.display()))?;
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
        for r in 0..rows {
            kostant_kernels::dequantize_row(info.ty, &data[r * in_row..(r + 1) * in_row], &mut src)
                .with_context(|| format!("tensor {}: row {r}", info.name))?;
            let q = kostant_kernels::quantize_row(goal, &src)
                .with_context(|| format!("tensor {}: row {r}", info.name))?;
            kostant_kernels::dequantize_row(goal, &q, &mut back)?;
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
    w.write_to(out)
        .with_context(|| format!("cannot write {}", out.display()))?;
    stats.bytes_out = std::fs::metadata(out)
        .map(|m| m.len() as usize)
        .unwrap_or(0);
    Ok(stats)
}

/// Loads `path` and greedily continues a short prompt: the file must load and say something.
pub fn verify(path: &Path) -> Result<String> {
    let model: Arc<Model> = Model::load(path)
        .with_context(|| format!("the written model {} does not load", path.display()))?;
    let mut prompt = Vec::new();
    if let (Some(b), true) = (model.tokenizer.bos_id(), model.tokenizer.add_bos()) {
        prompt.push(b);
    }
    prompt.extend(model.tokenizer.encode("The capital of France is", false)?);
    let mut session = Session::new(model.clone(), 256)?;
    let req = GenerateRequest {
        prompt,
        max_tokens: 8,
        sampling: SamplingParams::greedy(),
        speculation: Speculation::Off,
    };
    let g = kostant_engine::generate(&mut session, &req, &CancelHandle::new(), |_, _| {})?;
    if g.tokens.is_empty() {
        bail!("the written model {} generated nothing", path.display());
    }
    Ok(g.reply)
}

pub fn run(args: QuantizeArgs) -> Result<()> {
    let ty = parse_type(&args.ty)?;
    if !args.input.is_file() {
        bail!("model file {} not found", args.input.display());
    }
    let start = std::time::Instant::now();
    let s = requantize(&args.input, &args.out, ty)?;
    let said = verify(&args.out)?;
    eprintln!(
        "wrote {} ({}): {} matrices requantized, {} tensors copied, relative RMS error {:.4}, {:.1} MB -> {:.1} MB in {:.1} s; it loads and continues \"The capital of France is\" with {:?}",
        args.out.display(),
        ty.name(),
        s.requantized,
        s.copied,
        s.rel_rms_error,
        s.bytes_in as f64 / 1e6,
        s.bytes_out as f64 / 1e6,
        start.elapsed().as_secs_f64(),
        said
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requantized_tiny_model_loads_generates_and_keeps_norms() {
        use kostant_engine::testing::{tiny_model_bytes, TinySpec};
        let dir = std::env::temp_dir().join(format!("kostant-quantize-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("in.gguf");
        // f32 matrices, so every target format is a real requantization.
        let spec = TinySpec {
            matrix_type: GgmlType::F32,
            ..Default::default()
        };
        std::fs::write(&src, tiny_model_bytes(&spec).unwrap()).unwrap();
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1] {
            let out = dir.join(format!("{}.gguf", ty.name()));
            let s = requantize(&src, &out, ty).unwrap();
            assert!(s.requantized > 0 && s.copied > 0, "{s:?}");
            assert!(s.rel_rms_error < 0.2, "{s:?}");
            let g = Gguf::open(&out).unwrap();
            let before = Gguf::open(&src).unwrap();
            for t in g.tensors() {
                let old = before.tensor(&t.name).unwrap();
                assert_eq!(t.dims, old.dims, "{}", t.name);
                if t.dims.len() == 1 {
                    assert_eq!(t.ty, old.ty, "{}", t.name);
                    assert_eq!(g.tensor_data(t), before.tensor_data(old), "{}", t.name);
                }
            }
            assert!(g.tensors().iter().any(|t| t.ty == ty), "{ty:?}");
            assert_eq!(
                g.get_u32_opt("general.file_type").unwrap(),
                Some(file_type(ty))
            );
            verify(&out).unwrap();
        }
        assert!(parse_type("q4_k")
            .unwrap_err()
            .to_string()
            .contains("unknown quantization type"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
