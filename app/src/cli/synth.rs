//! `kostant synth`: writes a GGUF with random weights and a real model's shape (Llama-3.2-3B,
//! Gemma-3-1B, Qwen3-1.7B), to measure speed and memory at the target size without downloading
//! that model. The file answers nothing: its weights are noise and its vocabulary is synthetic.
//!
//! The file is streamed: each matrix is quantized row by row straight into the output, so
//! writing 2 GB of weights needs a few MB of memory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use kostant_engine::gguf::{GgmlType, GgufWriter, Value};

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// The architecture to copy.
    #[arg(long, value_enum)]
    pub shape: Shape,
    /// Type of the attention and feed-forward matrices.
    #[arg(long, value_enum, default_value_t = Quant::Q4_0)]
    pub quant: Quant,
    /// Type of the token embedding (tied to the output projection).
    ///
    /// Q6_K is what llama.cpp's quantizer picks for a tied embedding, so the file's size
    /// matches a real Q4_0 model's.
    #[arg(long, value_enum, default_value_t = Quant::Q6_K)]
    pub embd_quant: Quant,
    /// Where to write the GGUF.
    #[arg(long)]
    pub out: PathBuf,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Shape {
    /// Llama-3.2-3B: 28 layers, 3072 wide, 24 heads over 8 kv heads, ff 8192, vocab 128256.
    #[value(name = "llama-3.2-3b")]
    Llama32_3b,
    /// Gemma 3 1B: 26 layers, 1152 wide, 4 heads of 256 over 1 kv head, ff 6912.
    ///
    /// Vocab 262144; five sliding-window layers (512) in six.
    #[value(name = "gemma-3-1b")]
    Gemma3_1b,
    /// Qwen3 1.7B: 28 layers, 2048 wide, 16 heads of 128 over 8 kv heads, ff 6144, vocab 151936.
    #[value(name = "qwen3-1.7b")]
    Qwen3_1_7b,
    /// The same layout at toy size (2 layers, 256 wide, vocab 1024), for tests.
    #[value(name = "tiny")]
    Tiny,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
#[allow(non_camel_case_types)]
pub enum Quant {
    #[value(name = "Q4_0")]
    Q4_0,
    #[value(name = "Q4_1")]
    Q4_1,
    #[value(name = "Q4_K")]
    Q4_K,
    #[value(name = "Q6_K")]
    Q6_K,
    #[value(name = "Q8_0")]
    Q8_0,
}

impl Quant {
    fn ggml(self) -> GgmlType {
        match self {
            Quant::Q4_0 => GgmlType::Q4_0,
            Quant::Q4_1 => GgmlType::Q4_1,
            Quant::Q4_K => GgmlType::Q4_K,
            Quant::Q6_K => GgmlType::Q6_K,
            Quant::Q8_0 => GgmlType::Q8_0,
        }
    }
}

/// The hyper-parameters of a shape.
struct Dims {
    name: &'static str,
    /// `general.architecture`: llama, gemma3 or qwen3.
    arch: &'static str,
    /// Width of a head (the attention is n_head * head_dim wide, not always n_embd).
    head_dim: usize,
    /// Gemma 3's sliding window (0: none).
    sliding_window: usize,
    n_layer: usize,
    n_embd: usize,
    n_head: usize,
    n_head_kv: usize,
    n_ff: usize,
    n_vocab: usize,
    n_ctx_train: usize,
    rope_theta: f32,
    /// Llama 3's rope scaling: factor, low and high frequency factors, original context
    /// (llama only).
    rope_scaling: (f32, f32, f32, f32),
}

impl Shape {
    fn dims(self) -> Dims {
        match self {
            Shape::Llama32_3b => Dims {
                name: "synthetic Llama-3.2-3B shape (random weights)",
                arch: "llama",
                head_dim: 128,
                sliding_window: 0,
                n_layer: 28,
                n_embd: 3072,
                n_head: 24,
                n_head_kv: 8,
                n_ff: 8192,
                n_vocab: 128256,
                n_ctx_train: 131072,
                rope_theta: 500000.0,
                rope_scaling: (32.0, 1.0, 4.0, 8192.0),
            },
            Shape::Gemma3_1b => Dims {
                name: "synthetic Gemma-3-1B shape (random weights)",
                arch: "gemma3",
                head_dim: 256,
                sliding_window: 512,
                n_layer: 26,
                n_embd: 1152,
                n_head: 4,
                n_head_kv: 1,
                n_ff: 6912,
                n_vocab: 262144,
                n_ctx_train: 32768,
                rope_theta: 1_000_000.0,
                rope_scaling: (1.0, 1.0, 1.0, 0.0),
            },
            Shape::Qwen3_1_7b => Dims {
                name: "synthetic Qwen3-1.7B shape (random weights)",
                arch: "qwen3",
                head_dim: 128,
                sliding_window: 0,
                n_layer: 28,
                n_embd: 2048,
                n_head: 16,
                n_head_kv: 8,
                n_ff: 6144,
                n_vocab: 151936,
                n_ctx_train: 40960,
                rope_theta: 1_000_000.0,
                rope_scaling: (1.0, 1.0, 1.0, 0.0),
            },
            Shape::Tiny => Dims {
                name: "synthetic tiny shape (random weights)",
                arch: "llama",
                head_dim: 64,
                sliding_window: 0,
                n_layer: 2,
                n_embd: 256,
                n_head: 4,
                n_head_kv: 2,
                n_ff: 512,
                n_vocab: 1024,
                n_ctx_train: 4096,
                rope_theta: 500000.0,
                rope_scaling: (32.0, 1.0, 4.0, 8192.0),
            },
        }
    }
}

/// Llama 3's control tokens (the first 256 ids after the BPE vocabulary), as named there.
fn special_token(i: usize) -> String {
    match i {
        0 => "<|begin_of_text|>".into(),
        1 => "<|end_of_text|>".into(),
        6 => "<|start_header_id|>".into(),
        7 => "<|end_header_id|>".into(),
        9 => "<|eot_id|>".into(),
        _ => format!("<|reserved_special_token_{i}|>"),
    }
}

/// The GPT-2 byte-to-character map that byte-level BPE vocabularies are written in.
fn byte_char(b: u8) -> char {
    let printable = |b: u8| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    if printable(b) {
        return b as char;
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap_or('?')
}

/// A byte-level BPE vocabulary of `n_vocab` tokens: the 256 bytes, then every pair of bytes,
/// then byte triples, each reachable by one merge, then 256 control tokens (Llama 3's layout
/// of ids; the pieces themselves are synthetic). Returns (tokens, types, merges).
fn vocabulary(n_vocab: usize) -> Result<(Vec<String>, Vec<i32>, Vec<String>)> {
    let n_special = 256.min(n_vocab / 4);
    let n_bpe = n_vocab - n_special;
    if n_bpe < 256 {
        bail!("a vocabulary of {n_vocab} tokens cannot hold the 256 byte tokens");
    }
    let chars: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    let mut tokens = chars.clone();
    let mut merges = Vec::new();
    'fill: for len in 2.. {
        // Extend every token of length len-1 (in id order) by every byte.
        let prev: Vec<String> = tokens
            .iter()
            .filter(|t| t.chars().count() == len - 1)
            .cloned()
            .collect();
        for p in &prev {
            for c in &chars {
                if tokens.len() == n_bpe {
                    break 'fill;
                }
                merges.push(format!("{p} {c}"));
                tokens.push(format!("{p}{c}"));
            }
        }
    }
    let mut types = vec![1; tokens.len()];
    for i in 0..n_special {
        tokens.push(special_token(i));
        types.push(3);
    }
    Ok((tokens, types, merges))
}

/// Llama 3's per-frequency rope divisors, as llama.cpp's converter computes them. Like the
/// converter's files, ours carry them only as the `rope_freqs` tensor, with no
/// `rope.scaling.type` key (llama.cpp refuses the value "llama3" there).
fn llama3_rope_factors(head_dim: usize, theta: f32, scaling: (f32, f32, f32, f32)) -> Vec<f32> {
    let (factor, low, high, old_ctx) = scaling;
    let (low_wavelen, high_wavelen) = (old_ctx / low, old_ctx / high);
    (0..head_dim / 2)
        .map(|i| {
            let freq = 1.0 / theta.powf((2 * i) as f32 / head_dim as f32);
            let wavelen = 2.0 * std::f32::consts::PI / freq;
            if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (old_ctx / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect()
}

const TEMPLATE: &str = "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}\
<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}\
<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}";

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A matrix deferred to the streaming pass: (name, type, rows, cols).
type Matrix = (String, GgmlType, usize, usize);

pub fn run(args: SynthArgs) -> Result<()> {
    let start = Instant::now();
    let d = args.shape.dims();
    let (mt, et) = (args.quant.ggml(), args.embd_quant.ggml());
    let mut w = GgufWriter::new();
    write_hparams(&mut w, &d);
    write_tokenizer(&mut w, d.n_vocab)?;
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let matrices = lay_out_tensors(&mut w, &d, mt, et, &mut rng);
    stream_matrices(&w, &args.out, &matrices, &mut rng)?;
    let bytes = std::fs::metadata(&args.out)?.len();
    eprintln!(
        "wrote {} ({:.1} MB, {} matrices, {} embedding) in {:.1} s; random weights: \
         for benchmarks only, it answers nothing",
        args.out.display(),
        bytes as f64 / 1e6,
        mt.name(),
        et.name(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The file's name and the architecture's hyper-parameters, under llama.cpp's keys.
fn write_hparams(w: &mut GgufWriter, d: &Dims) {
    let a = d.arch;
    let hd = d.head_dim;
    let key = |k: &str| format!("{a}.{k}");
    let u32v = |v: usize| Value::U32(v as u32);
    w.metadata("general.architecture", Value::String(a.into()))
        .metadata("general.name", Value::String(d.name.into()))
        .metadata(
            "general.description",
            Value::String("written by kostant synth for benchmarks; random weights".into()),
        )
        .metadata(&key("context_length"), u32v(d.n_ctx_train))
        .metadata(&key("embedding_length"), u32v(d.n_embd))
        .metadata(&key("block_count"), u32v(d.n_layer))
        .metadata(&key("feed_forward_length"), u32v(d.n_ff))
        .metadata(&key("attention.head_count"), u32v(d.n_head))
        .metadata(&key("attention.head_count_kv"), u32v(d.n_head_kv))
        .metadata(&key("attention.key_length"), u32v(hd))
        .metadata(&key("attention.value_length"), u32v(hd))
        .metadata(&key("rope.dimension_count"), u32v(hd))
        .metadata(&key("rope.freq_base"), Value::F32(d.rope_theta))
        .metadata(
            &key("attention.layer_norm_rms_epsilon"),
            Value::F32(if a == "llama" { 1e-5 } else { 1e-6 }),
        )
        .metadata(&key("vocab_size"), u32v(d.n_vocab));
    if d.sliding_window > 0 {
        w.metadata(&key("attention.sliding_window"), u32v(d.sliding_window));
    }
}

/// The synthetic byte-level BPE vocabulary with Llama 3's control tokens and chat template.
fn write_tokenizer(w: &mut GgufWriter, n_vocab: usize) -> Result<()> {
    let (tokens, types, merges) = vocabulary(n_vocab)?;
    let n_bpe = tokens.len() - types.iter().filter(|&&t| t == 3).count();
    let u32v = |v: usize| Value::U32(v as u32);
    w.metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
        .metadata("tokenizer.ggml.pre", Value::String("llama-bpe".into()))
        .metadata(
            "tokenizer.ggml.tokens",
            Value::Array(tokens.into_iter().map(Value::String).collect()),
        )
        .metadata(
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        )
        .metadata(
            "tokenizer.ggml.merges",
            Value::Array(merges.into_iter().map(Value::String).collect()),
        )
        .metadata("tokenizer.ggml.bos_token_id", u32v(n_bpe))
        .metadata("tokenizer.ggml.eos_token_id", u32v(n_bpe + 9))
        .metadata("tokenizer.ggml.eot_token_id", u32v(n_bpe + 9))
        .metadata("tokenizer.ggml.add_bos_token", Value::Bool(true))
        .metadata("tokenizer.chat_template", Value::String(TEMPLATE.into()));
    Ok(())
}

/// Every tensor in llama.cpp's order: the small vectors (norms, rope factors) are written
/// whole from `rng`; the matrices are deferred and returned, to be produced row by row.
fn lay_out_tensors(
    w: &mut GgufWriter,
    d: &Dims,
    mt: GgmlType,
    et: GgmlType,
    rng: &mut SmallRng,
) -> Vec<Matrix> {
    let (a, hd) = (d.arch, d.head_dim);
    let (q_dim, kv_dim) = (d.n_head * hd, d.n_head_kv * hd);
    let mut matrices: Vec<Matrix> = Vec::new();
    let mut defer = |w: &mut GgufWriter, name: String, ty, rows, cols| {
        w.deferred_tensor(&name, &[cols, rows], ty);
        matrices.push((name, ty, rows, cols));
    };
    let norm = |rng: &mut SmallRng| {
        f32_bytes(
            &(0..d.n_embd)
                .map(|_| rng.gen_range(0.8..1.2))
                .collect::<Vec<_>>(),
        )
    };
    defer(w, "token_embd.weight".into(), et, d.n_vocab, d.n_embd);
    if a == "llama" {
        w.tensor(
            "rope_freqs.weight",
            &[hd / 2],
            GgmlType::F32,
            f32_bytes(&llama3_rope_factors(hd, d.rope_theta, d.rope_scaling)),
        );
    }
    let head_norm = |rng: &mut SmallRng| {
        f32_bytes(&(0..hd).map(|_| rng.gen_range(0.8..1.2)).collect::<Vec<_>>())
    };
    for i in 0..d.n_layer {
        let n = |x: &str| format!("blk.{i}.{x}");
        w.tensor(
            &n("attn_norm.weight"),
            &[d.n_embd],
            GgmlType::F32,
            norm(rng),
        );
        defer(w, n("attn_q.weight"), mt, q_dim, d.n_embd);
        defer(w, n("attn_k.weight"), mt, kv_dim, d.n_embd);
        defer(w, n("attn_v.weight"), mt, kv_dim, d.n_embd);
        if a != "llama" {
            for name in ["attn_q_norm.weight", "attn_k_norm.weight"] {
                w.tensor(&n(name), &[hd], GgmlType::F32, head_norm(rng));
            }
        }
        defer(w, n("attn_output.weight"), mt, d.n_embd, q_dim);
        if a == "gemma3" {
            let name = n("post_attention_norm.weight");
            w.tensor(&name, &[d.n_embd], GgmlType::F32, norm(rng));
        }
        w.tensor(&n("ffn_norm.weight"), &[d.n_embd], GgmlType::F32, norm(rng));
        defer(w, n("ffn_gate.weight"), mt, d.n_ff, d.n_embd);
        defer(w, n("ffn_up.weight"), mt, d.n_ff, d.n_embd);
        defer(w, n("ffn_down.weight"), mt, d.n_embd, d.n_ff);
        if a == "gemma3" {
            let name = n("post_ffw_norm.weight");
            w.tensor(&name, &[d.n_embd], GgmlType::F32, norm(rng));
        }
    }
    w.tensor("output_norm.weight", &[d.n_embd], GgmlType::F32, norm(rng));
    matrices
}

/// Writes the file to `out`, producing the deferred `matrices` row by row from `rng` and
/// quantizing each row straight into the file.
fn stream_matrices(
    w: &GgufWriter,
    out_path: &Path,
    matrices: &[Matrix],
    rng: &mut SmallRng,
) -> Result<()> {
    let mut row = Vec::new();
    let mut next = 0;
    w.write_streaming_to(out_path, |name, _size, out: &mut dyn Write| {
        let (expected, ty, rows, cols) = &matrices[next];
        next += 1;
        assert_eq!(
            name, expected,
            "deferred tensors are produced in file order"
        );
        // Uniform weights of the spread a trained matrix has (about 1/sqrt(cols)), so
        // activations stay finite through every layer.
        let scale = 1.0 / (*cols as f32).sqrt();
        for _ in 0..*rows {
            row.clear();
            row.extend((0..*cols).map(|_| rng.gen_range(-scale..scale)));
            let packed = kostant_kernels::quantize_row(*ty, &row).map_err(std::io::Error::other)?;
            out.write_all(&packed)?;
        }
        Ok(())
    })
    .with_context(|| format!("cannot write {}", out_path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vocabulary_has_the_asked_size_and_unique_tokens() {
        let (tokens, types, merges) = vocabulary(128256).unwrap();
        assert_eq!(tokens.len(), 128256);
        assert_eq!(types.len(), 128256);
        assert_eq!(merges.len(), 128000 - 256);
        let unique: std::collections::HashSet<_> = tokens.iter().collect();
        assert_eq!(unique.len(), tokens.len());
        assert_eq!(tokens[128000], "<|begin_of_text|>");
        assert_eq!(tokens[128009], "<|eot_id|>");
    }

    #[test]
    fn rope_factors_run_from_one_to_the_scaling_factor() {
        let f = llama3_rope_factors(128, 500000.0, (32.0, 1.0, 4.0, 8192.0));
        assert_eq!(f.len(), 64);
        assert_eq!(f[0], 1.0);
        assert_eq!(f[63], 32.0);
        assert!(f.windows(2).all(|w| w[0] <= w[1]));
    }
}
