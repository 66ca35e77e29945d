//! Tiny random-weight models written as real GGUF files, for fast hermetic tests here and in
//! the crates above (they exercise the same loader, tokenizer and forward pass as a real model).
//! Behind the `testing` feature: not part of the engine's API for users.

use kostant_kernels::{quantize_row, GgmlType};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::gguf::{GgufWriter, Value};
use crate::Result;

#[derive(Clone, Debug)]
pub struct TinySpec {
    pub arch: &'static str,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub n_ff: usize,
    pub n_layer: usize,
    pub n_ctx: usize,
    /// Type of the attention and feed-forward matrices.
    pub matrix_type: GgmlType,
    /// Type of the token embedding (also the tied output projection).
    pub embd_type: GgmlType,
    /// Give Q, K and V a bias (as Qwen2 does).
    pub qkv_bias: bool,
    /// Head width written as `attention.key_length`/`value_length`; None leaves it implied
    /// (n_embd / n_head), as Llama files do.
    pub head_dim: Option<usize>,
    /// Gemma 3's `attention.sliding_window` (written only for gemma3; 0 writes none).
    pub sliding_window: usize,
    pub seed: u64,
}

impl Default for TinySpec {
    fn default() -> Self {
        TinySpec {
            arch: "llama",
            n_embd: 64,
            n_head: 4,
            n_head_kv: 2,
            n_ff: 128,
            n_layer: 2,
            n_ctx: 256,
            matrix_type: GgmlType::Q4_1,
            embd_type: GgmlType::Q8_0,
            qkv_bias: false,
            head_dim: None,
            sliding_window: 0,
            seed: 1,
        }
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

const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// Vocabulary: three ChatML control tokens, the 256 byte tokens, then a few merges.
fn vocab() -> (Vec<String>, Vec<i32>, Vec<String>) {
    let mut tokens: Vec<String> = SPECIALS.iter().map(|s| s.to_string()).collect();
    let mut types = vec![3; SPECIALS.len()];
    for b in 0..=255u8 {
        tokens.push(byte_char(b).to_string());
        types.push(1);
    }
    let merges = vec!["h e".to_string(), "l l".to_string(), "he ll".to_string()];
    for m in &merges {
        tokens.push(m.replace(' ', ""));
        types.push(1);
    }
    (tokens, types, merges)
}

fn random_matrix(
    rng: &mut SmallRng,
    rows: usize,
    cols: usize,
    ty: GgmlType,
    scale: f32,
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for _ in 0..rows {
        let row: Vec<f32> = (0..cols).map(|_| rng.gen_range(-scale..scale)).collect();
        out.extend(quantize_row(ty, &row)?);
    }
    Ok(out)
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Builds the GGUF bytes of a tiny model with random weights.
pub fn tiny_model_bytes(spec: &TinySpec) -> Result<Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(spec.seed);
    let (tokens, types, merges) = vocab();
    let n_vocab = tokens.len();
    let mut w = GgufWriter::new();
    write_hparams(&mut w, spec);
    write_tokenizer(&mut w, tokens, types, merges);
    w.tensor(
        "token_embd.weight",
        &[spec.n_embd, n_vocab],
        spec.embd_type,
        random_matrix(&mut rng, n_vocab, spec.n_embd, spec.embd_type, 1.0)?,
    );
    for i in 0..spec.n_layer {
        write_layer(&mut w, &mut rng, spec, i)?;
    }
    w.tensor(
        "output_norm.weight",
        &[spec.n_embd],
        GgmlType::F32,
        norm_weights(&mut rng, spec.n_embd),
    );
    w.to_bytes()
}

/// Head width: the spec's, else implied by the embedding width.
fn head_dim(spec: &TinySpec) -> usize {
    spec.head_dim.unwrap_or(spec.n_embd / spec.n_head)
}

/// A norm's weights, near 1.
fn norm_weights(rng: &mut SmallRng, n: usize) -> Vec<u8> {
    f32_bytes(&(0..n).map(|_| rng.gen_range(0.8..1.2)).collect::<Vec<_>>())
}

/// The architecture's hyperparameters, under its own key prefix.
fn write_hparams(w: &mut GgufWriter, spec: &TinySpec) {
    let p = spec.arch;
    let u32v = |v: usize| Value::U32(v as u32);
    w.metadata("general.architecture", Value::String(p.into()))
        .metadata("general.name", Value::String("tiny test model".into()))
        .metadata(&format!("{p}.context_length"), u32v(spec.n_ctx))
        .metadata(&format!("{p}.embedding_length"), u32v(spec.n_embd))
        .metadata(&format!("{p}.block_count"), u32v(spec.n_layer))
        .metadata(&format!("{p}.feed_forward_length"), u32v(spec.n_ff))
        .metadata(&format!("{p}.attention.head_count"), u32v(spec.n_head))
        .metadata(
            &format!("{p}.attention.head_count_kv"),
            u32v(spec.n_head_kv),
        )
        .metadata(&format!("{p}.rope.freq_base"), Value::F32(10000.0))
        .metadata(
            &format!("{p}.attention.layer_norm_rms_epsilon"),
            Value::F32(1e-5),
        );
    if let Some(hd) = spec.head_dim {
        w.metadata(&format!("{p}.attention.key_length"), u32v(hd))
            .metadata(&format!("{p}.attention.value_length"), u32v(hd));
    }
    if p == "gemma3" && spec.sliding_window > 0 {
        w.metadata(
            &format!("{p}.attention.sliding_window"),
            u32v(spec.sliding_window),
        );
    }
}

/// A byte-level BPE tokenizer over [`vocab`], ChatML's control tokens as bos and eos.
fn write_tokenizer(w: &mut GgufWriter, tokens: Vec<String>, types: Vec<i32>, merges: Vec<String>) {
    w.metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
        .metadata("tokenizer.ggml.pre", Value::String("smollm".into()))
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
        .metadata("tokenizer.ggml.bos_token_id", Value::U32(1))
        .metadata("tokenizer.ggml.eos_token_id", Value::U32(2))
        .metadata("tokenizer.ggml.add_bos_token", Value::Bool(false));
}

/// Layer `i`: attention (with the architecture's extra biases and norms), then the
/// feed-forward block, each random matrix drawn in the order a reader lists them.
fn write_layer(w: &mut GgufWriter, rng: &mut SmallRng, spec: &TinySpec, i: usize) -> Result<()> {
    let p = spec.arch;
    let hd = head_dim(spec);
    let (q_dim, kv_dim) = (spec.n_head * hd, spec.n_head_kv * hd);
    let n = |x: &str| format!("blk.{i}.{x}");
    let mt = spec.matrix_type;
    let s = 0.3;
    let e = spec.n_embd;
    w.tensor(
        &n("attn_norm.weight"),
        &[e],
        GgmlType::F32,
        norm_weights(rng, e),
    );
    for (name, rows) in [
        ("attn_q.weight", q_dim),
        ("attn_k.weight", kv_dim),
        ("attn_v.weight", kv_dim),
    ] {
        w.tensor(
            &n(name),
            &[e, rows],
            mt,
            random_matrix(rng, rows, e, mt, s)?,
        );
    }
    if spec.qkv_bias {
        for (name, len) in [
            ("attn_q.bias", q_dim),
            ("attn_k.bias", kv_dim),
            ("attn_v.bias", kv_dim),
        ] {
            let b: Vec<f32> = (0..len).map(|_| rng.gen_range(-0.1..0.1)).collect();
            w.tensor(&n(name), &[len], GgmlType::F32, f32_bytes(&b));
        }
    }
    if matches!(p, "qwen3" | "gemma3") {
        for name in ["attn_q_norm.weight", "attn_k_norm.weight"] {
            w.tensor(&n(name), &[hd], GgmlType::F32, norm_weights(rng, hd));
        }
    }
    if p == "gemma3" {
        for name in ["post_attention_norm.weight", "post_ffw_norm.weight"] {
            w.tensor(&n(name), &[e], GgmlType::F32, norm_weights(rng, e));
        }
    }
    w.tensor(
        &n("attn_output.weight"),
        &[q_dim, e],
        mt,
        random_matrix(rng, e, q_dim, mt, s)?,
    );
    w.tensor(
        &n("ffn_norm.weight"),
        &[e],
        GgmlType::F32,
        norm_weights(rng, e),
    );
    for name in ["ffn_gate.weight", "ffn_up.weight"] {
        w.tensor(
            &n(name),
            &[e, spec.n_ff],
            mt,
            random_matrix(rng, spec.n_ff, e, mt, s)?,
        );
    }
    w.tensor(
        &n("ffn_down.weight"),
        &[spec.n_ff, e],
        mt,
        random_matrix(rng, e, spec.n_ff, mt, s)?,
    );
    Ok(())
}

/// The real default model for tests: `KOSTANT_MODEL`, else `models/` at the workspace root.
/// Panics, with the command that installs it, if the file is missing: real-model tests fail
/// rather than skip.
pub fn real_model_path() -> std::path::PathBuf {
    match std::env::var_os("KOSTANT_MODEL") {
        Some(path) => present(path.into(), "run scripts/setup.sh first"),
        None => workspace_model(
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "run scripts/setup.sh first",
        ),
    }
}

/// Gemma 3 270M (Q4_K_M), the real SentencePiece vocabulary the tokenizer golden test runs
/// on, at `models/gemma-3-270m-Q4_K_M.gguf` under the workspace root. Panics if missing.
pub fn gemma3_model_path() -> std::path::PathBuf {
    workspace_model(
        "gemma-3-270m-Q4_K_M.gguf",
        "run scripts/setup.sh --test-models (it fetches Gemma 3 270M Q4_K_M and checks its \
         sha256); the Gemma 3 tests need it",
    )
}

/// `models/<name>` at the workspace root, which must exist (`how` says how to get it).
fn workspace_model(name: &str, how: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../models")
        .join(name);
    present(path, how)
}

fn present(path: std::path::PathBuf, how: &str) -> std::path::PathBuf {
    assert!(path.is_file(), "{} is missing: {how}", path.display());
    path
}

/// `n` token ids in the tiny models' vocabulary, varied by `salt`: a deterministic prompt.
pub fn sample_tokens(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| 3 + (i * 37 + salt * 11) % 250)
        .collect()
}

/// Tests' shorthand for the prompt path: keeps the cached prefix `prompt` starts with, decodes
/// the rest, and returns the logits after `prompt` and how many tokens were reused.
pub fn prefill(session: &mut crate::Session, prompt: &[u32]) -> crate::Result<(Vec<f32>, usize)> {
    let (logits, reused, _) = prefill_tapped(session, prompt, &[])?;
    Ok((logits, reused))
}

/// [`prefill`] that also returns the hidden states at `taps` of the tokens it ran.
pub fn prefill_tapped(
    session: &mut crate::Session,
    prompt: &[u32],
    taps: &[usize],
) -> crate::Result<(Vec<f32>, usize, Vec<Vec<f32>>)> {
    if prompt.is_empty() {
        return Err(crate::EngineError::InvalidRequest(
            "the prompt is empty".into(),
        ));
    }
    let reused = session.keep_prefix(prompt)?;
    let mut out = crate::Outputs::new();
    session.decode(
        &crate::Batch::prompt(&prompt[reused..]).with_taps(taps),
        &mut out,
    )?;
    Ok((out.last_logits().to_vec(), reused, out.take_states()))
}

/// Tests' shorthand for one decode step: the logits after `token`.
pub fn step(session: &mut crate::Session, token: u32) -> crate::Result<Vec<f32>> {
    let (logits, _) = step_tapped(session, token, &[])?;
    Ok(logits)
}

/// The greedy reply to `prompt`, decoded, up to `max` tokens or an end-of-generation token:
/// what a golden test compares with llama.cpp's `llama-completion --temp 0` text.
pub fn greedy_reply(
    session: &mut crate::Session,
    prompt: &[u32],
    max: usize,
) -> crate::Result<String> {
    let model = session.model().clone();
    let stop = model.tokenizer.end_of_generation_ids();
    let (mut logits, _) = prefill(session, prompt)?;
    let mut text = String::new();
    let mut decoder = crate::tokenizer::StreamDecoder::new(&model.tokenizer);
    for _ in 0..max {
        let id = crate::sampling::argmax(&logits);
        if stop.contains(&id) {
            break;
        }
        text.push_str(&decoder.push(id));
        logits = step(session, id)?;
    }
    Ok(text)
}

/// [`step`] that also returns the token's hidden states at `taps`.
pub fn step_tapped(
    session: &mut crate::Session,
    token: u32,
    taps: &[usize],
) -> crate::Result<(Vec<f32>, Vec<Vec<f32>>)> {
    let mut out = crate::Outputs::new();
    session.decode(&crate::Batch::step(&token).with_taps(taps), &mut out)?;
    Ok((out.last_logits().to_vec(), out.take_states()))
}

/// Tests' shorthand for a classifier's read: hidden states at `taps`, no logits.
pub fn hidden(
    session: &mut crate::Session,
    tokens: &[u32],
    taps: &[usize],
) -> crate::Result<Vec<Vec<f32>>> {
    let mut out = crate::Outputs::new();
    session.decode(&crate::Batch::hidden(tokens, taps), &mut out)?;
    Ok(out.take_states())
}

/// A session whose sliding-window layers keep the whole context, as the cache did before it
/// kept a ring per windowed layer: the reference a ring session must equal bit for bit (the
/// layers still attend through their window).
pub fn session_with_full_cache(
    model: std::sync::Arc<crate::Model>,
    n_ctx: usize,
    kv_type: crate::KvType,
) -> crate::Result<crate::Session> {
    let n_layer = model.hparams.n_layer;
    crate::Session::with_cache_windows(model, n_ctx, kv_type, &vec![None; n_layer])
}
