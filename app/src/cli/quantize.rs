//! `kostant quantize`: [`kostant_engine::gguf::requantize`] from the command line, so the safety
//! evals can be re-run on exactly what a smaller build would ship. The result is loaded and
//! made to generate (a sentence encoder: to embed a sentence) before we call it done.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;

use kostant_engine::gguf::requantize::{self, requantize, TARGETS};
use kostant_engine::gguf::{GgmlType, Gguf};
use kostant_engine::{
    encoder, CancelHandle, Encoder, GenerateRequest, Model, SamplingParams, Session, Speculation,
};

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The GGUF to read.
    #[arg(long = "in")]
    pub input: PathBuf,
    /// Where to write the requantized GGUF.
    #[arg(long)]
    pub out: PathBuf,
    /// Target format, Q4_0 say.
    ///
    /// One of F16, BF16, Q8_0, Q6_K, Q5_K, Q5_1, Q5_0, Q4_K, Q4_1, Q4_0, IQ4_NL, IQ4_XS, Q3_K
    /// or Q2_K.
    #[arg(long = "type")]
    pub ty: String,
}

/// The target format named `s` (any case), or an error listing them.
pub fn parse_type(s: &str) -> Result<GgmlType> {
    requantize::parse_target(s).ok_or_else(|| {
        let names: Vec<&str> = TARGETS.iter().map(|t| t.name()).collect();
        anyhow::anyhow!(
            "unknown quantization type {s:?} (supported: {})",
            names.join(", ")
        )
    })
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

/// Whether the GGUF at `path` is a sentence encoder rather than a chat model.
fn is_encoder(path: &Path) -> Result<bool> {
    let meta = Gguf::read_metadata(path)?;
    let arch = meta.get("general.architecture").and_then(|v| v.as_str());
    Ok(arch == Some(encoder::ARCH))
}

/// Loads the encoder at `path` and embeds a sentence: the file must load and give a unit
/// vector.
fn verify_encoder(path: &Path) -> Result<String> {
    let enc = Encoder::load(path)
        .with_context(|| format!("the written encoder {} does not load", path.display()))?;
    let v = enc.embed(&["The capital of France is Paris."])?;
    let norm = v[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    let unit = (norm - 1.0).abs() < 1e-3;
    if !unit {
        bail!(
            "the written encoder {} gives a vector of length {norm}",
            path.display()
        );
    }
    Ok(format!(
        "embeds a sentence as a unit vector of {}",
        enc.dim()
    ))
}

pub fn run(args: QuantizeArgs) -> Result<()> {
    let ty = parse_type(&args.ty)?;
    if !args.input.is_file() {
        bail!("model file {} not found", args.input.display());
    }
    let start = std::time::Instant::now();
    let s = requantize(&args.input, &args.out, ty)?;
    let said = if is_encoder(&args.out)? {
        verify_encoder(&args.out)?
    } else {
        format!(
            "continues \"The capital of France is\" with {:?}",
            verify(&args.out)?
        )
    };
    eprintln!(
        "wrote {} ({}): {} matrices requantized, {} tensors copied, relative RMS error {:.4}, {:.1} MB -> {:.1} MB in {:.1} s; it loads and {}",
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
    fn the_sentence_encoder_requantizes_and_embeds() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/all-MiniLM-L6-v2.F16.gguf");
        assert!(
            src.is_file(),
            "{} is missing: run scripts/setup.sh",
            src.display()
        );
        let dir = std::env::temp_dir().join(format!("kostant-quantize-enc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("encoder.Q8_0.gguf");
        requantize(&src, &out, GgmlType::Q8_0).unwrap();
        assert!(is_encoder(&out).unwrap());
        assert!(!is_encoder(&kostant_engine::testing::real_model_path()).unwrap());
        let said = verify_encoder(&out).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(said.contains("unit vector of 384"), "{said}");
    }

    #[test]
    fn requantized_tiny_model_loads_generates_and_keeps_norms() {
        use kostant_engine::gguf::requantize::file_type;
        use kostant_engine::gguf::Gguf;
        use kostant_engine::testing::{tiny_model_bytes, TinySpec};
        let dir = std::env::temp_dir().join(format!("kostant-quantize-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("in.gguf");
        // f32 matrices, so every target format is a real requantization; rows of 256, so the
        // K-quants apply.
        let spec = TinySpec {
            matrix_type: GgmlType::F32,
            n_embd: 256,
            n_ff: 256,
            ..Default::default()
        };
        std::fs::write(&src, tiny_model_bytes(&spec).unwrap()).unwrap();
        for ty in TARGETS {
            let out = dir.join(format!("{}.gguf", ty.name()));
            let s = requantize(&src, &out, ty).unwrap();
            assert!(s.requantized > 0 && s.copied > 0, "{s:?}");
            // Q2_K's codes are 2 bits: its error is the largest.
            assert!(s.rel_rms_error < 0.4, "{ty:?}: {s:?}");
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
        // Rows of 64: the 256-element formats fall back as llama.cpp's do.
        let narrow = dir.join("narrow.gguf");
        let spec = TinySpec {
            matrix_type: GgmlType::F32,
            ..Default::default()
        };
        assert!(!spec.n_embd.is_multiple_of(256));
        std::fs::write(&narrow, tiny_model_bytes(&spec).unwrap()).unwrap();
        for (ty, want) in [
            (GgmlType::Q4_K, GgmlType::Q5_0),
            (GgmlType::Q5_K, GgmlType::Q5_1),
            (GgmlType::Q6_K, GgmlType::Q8_0),
            (GgmlType::IQ4_XS, GgmlType::IQ4_NL),
            (GgmlType::Q2_K, GgmlType::IQ4_NL),
        ] {
            let out = dir.join(format!("narrow-{}.gguf", ty.name()));
            requantize(&narrow, &out, ty).unwrap();
            let g = Gguf::open(&out).unwrap();
            let q = g.tensor("blk.0.attn_q.weight").unwrap();
            assert_eq!(q.ty, want, "{ty:?}");
            verify(&out).unwrap();
        }
        assert_eq!(parse_type("q4_k").unwrap(), GgmlType::Q4_K);
        assert_eq!(parse_type("iq4_xs").unwrap(), GgmlType::IQ4_XS);
        let err = parse_type("q1_0").unwrap_err().to_string();
        assert!(
            err.contains("unknown quantization type") && err.contains("IQ4_XS"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
