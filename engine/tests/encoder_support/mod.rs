//! Helpers of the encoder tests: the real encoder's path, a tiny random-weight `bert` GGUF in
//! llama.cpp's layout, and cosine similarity.
#![allow(dead_code)]

use std::path::PathBuf;

use kostant_engine::gguf::{GgmlType, GgufWriter, Value};
use kostant_kernels::quantize_row;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// `models/all-MiniLM-L6-v2.F16.gguf` at the workspace root; panics, with the command that
/// makes it, if missing: real-model tests fail rather than skip.
pub fn real_encoder_path() -> PathBuf {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/all-MiniLM-L6-v2.F16.gguf");
    assert!(
        path.is_file(),
        "{} is missing: run scripts/setup.sh first (it fetches and converts the encoder)",
        path.display()
    );
    path
}

pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    (dot / (na * nb)) as f32
}

/// The shape of a tiny encoder.
#[derive(Clone, Debug)]
pub struct TinyBert {
    pub n_embd: usize,
    pub n_head: usize,
    pub n_ff: usize,
    pub n_layer: usize,
    pub n_ctx: usize,
    pub matrix_type: GgmlType,
    pub seed: u64,
}

impl Default for TinyBert {
    fn default() -> Self {
        TinyBert {
            n_embd: 64,
            n_head: 4,
            n_ff: 128,
            n_layer: 2,
            n_ctx: 16,
            matrix_type: GgmlType::F16,
            seed: 7,
        }
    }
}

/// The tiny encoder's vocabulary, phantom-space spelled as llama.cpp's converter writes it:
/// the five control tokens at BERT's ids would need a 30k table, so here they sit at 0..5.
pub const TINY_TOKENS: [&str; 16] = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "\u{2581}the",
    "\u{2581}cat",
    "\u{2581}sat",
    "\u{2581}on",
    "\u{2581}mat",
    "s",
    "\u{2581}dog",
    "\u{2581}.",
    "\u{2581}a",
    "\u{2581}run",
    "ning",
];

/// A writer holding a whole tiny encoder; tests remove or replace pieces before writing it.
pub fn tiny_writer(spec: &TinyBert) -> GgufWriter {
    let mut rng = SmallRng::seed_from_u64(spec.seed);
    let mut w = GgufWriter::new();
    metadata(&mut w, spec);
    let e = spec.n_embd;
    matrix(
        &mut w,
        &mut rng,
        "token_embd.weight",
        TINY_TOKENS.len(),
        e,
        spec.matrix_type,
    );
    matrix(&mut w, &mut rng, "token_types.weight", 2, e, GgmlType::F32);
    matrix(
        &mut w,
        &mut rng,
        "position_embd.weight",
        spec.n_ctx,
        e,
        GgmlType::F32,
    );
    norm(&mut w, &mut rng, "token_embd_norm", e);
    for i in 0..spec.n_layer {
        let n = |s: &str| format!("blk.{i}.{s}");
        for (name, rows, cols) in [
            ("attn_q", e, e),
            ("attn_k", e, e),
            ("attn_v", e, e),
            ("attn_output", e, e),
        ] {
            linear(&mut w, &mut rng, &n(name), rows, cols, spec.matrix_type);
        }
        norm(&mut w, &mut rng, &n("attn_output_norm"), e);
        linear(
            &mut w,
            &mut rng,
            &n("ffn_up"),
            spec.n_ff,
            e,
            spec.matrix_type,
        );
        linear(
            &mut w,
            &mut rng,
            &n("ffn_down"),
            e,
            spec.n_ff,
            spec.matrix_type,
        );
        norm(&mut w, &mut rng, &n("layer_output_norm"), e);
    }
    w
}

pub fn tiny_bytes(spec: &TinyBert) -> Vec<u8> {
    tiny_writer(spec).to_bytes().expect("write tiny encoder")
}

fn metadata(w: &mut GgufWriter, spec: &TinyBert) {
    let u = |v: usize| Value::U32(v as u32);
    let types = TINY_TOKENS
        .iter()
        .enumerate()
        .map(|(i, _)| Value::I32(if i < 5 { 3 } else { 1 }))
        .collect();
    w.metadata("general.architecture", Value::String("bert".into()))
        .metadata("bert.context_length", u(spec.n_ctx))
        .metadata("bert.embedding_length", u(spec.n_embd))
        .metadata("bert.feed_forward_length", u(spec.n_ff))
        .metadata("bert.block_count", u(spec.n_layer))
        .metadata("bert.attention.head_count", u(spec.n_head))
        .metadata("bert.attention.layer_norm_epsilon", Value::F32(1e-12))
        .metadata("bert.attention.causal", Value::Bool(false))
        .metadata("bert.pooling_type", u(1))
        .metadata("tokenizer.ggml.token_type_count", u(2))
        .metadata("tokenizer.ggml.model", Value::String("bert".into()))
        .metadata(
            "tokenizer.ggml.tokens",
            Value::Array(
                TINY_TOKENS
                    .iter()
                    .map(|t| Value::String((*t).into()))
                    .collect(),
            ),
        )
        .metadata("tokenizer.ggml.token_type", Value::Array(types))
        .metadata("tokenizer.ggml.padding_token_id", u(0))
        .metadata("tokenizer.ggml.unknown_token_id", u(1))
        .metadata("tokenizer.ggml.cls_token_id", u(2))
        .metadata("tokenizer.ggml.seperator_token_id", u(3))
        .metadata("tokenizer.ggml.mask_token_id", u(4));
}

fn values(rng: &mut SmallRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-scale..scale)).collect()
}

fn matrix(
    w: &mut GgufWriter,
    rng: &mut SmallRng,
    name: &str,
    rows: usize,
    cols: usize,
    ty: GgmlType,
) {
    let v = values(rng, rows * cols, 0.5);
    let data = v
        .chunks_exact(cols)
        .flat_map(|row| quantize_row(ty, row).expect("quantize"))
        .collect();
    w.tensor(name, &[cols, rows], ty, data);
}

fn linear(
    w: &mut GgufWriter,
    rng: &mut SmallRng,
    name: &str,
    rows: usize,
    cols: usize,
    ty: GgmlType,
) {
    matrix(w, rng, &format!("{name}.weight"), rows, cols, ty);
    vector(w, rng, &format!("{name}.bias"), rows, 0.5);
}

fn norm(w: &mut GgufWriter, rng: &mut SmallRng, name: &str, len: usize) {
    let weight: Vec<f32> = (0..len).map(|_| rng.gen_range(0.8..1.2)).collect();
    let data = weight.iter().flat_map(|x| x.to_le_bytes()).collect();
    w.tensor(&format!("{name}.weight"), &[len], GgmlType::F32, data);
    vector(w, rng, &format!("{name}.bias"), len, 0.1);
}

/// A 1-D f32 tensor of values in -scale..scale, as converters write biases.
fn vector(w: &mut GgufWriter, rng: &mut SmallRng, name: &str, len: usize, scale: f32) {
    let data = values(rng, len, scale)
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    w.tensor(name, &[len], GgmlType::F32, data);
}
