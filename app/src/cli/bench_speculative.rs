//! `kostant bench --speculative lookup`: what drafting buys on each task. Every prompt of each
//! set (a JSONL file of `{"id", "prompt"}`, named by its file) is answered greedily twice, plain
//! and speculative, back to back and in alternating order, under the system prompt of the
//! feature the set exercises; the two replies must be identical. Reported per set: decode
//! tokens/s of each, the speedup, the share of drafted tokens accepted and tokens per pass.
//!
//! `kostant bench --verify-cost`: the time of one pass over 1 + k tokens (a token and k drafts,
//! rows as steps, logits for all) against one decode step, k = 1..16, after `--depth` tokens:
//! what a given acceptance rate can buy on this machine and model.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use kostant_engine::chat_template::RenderedPrompt;
use kostant_engine::{
    generate, Batch, CancelHandle, GenerateRequest, Generation, Message, Model, Outputs, Role,
    SamplingParams, Session, Speculation,
};

use kostant_app::features::Feature;

/// A set of prompts: its name (the file's stem) and its prompts, as (id, text).
struct PromptSet {
    name: String,
    prompts: Vec<(String, String)>,
}

/// The sets in `path`: one JSONL file, or every `.jsonl` file of a directory, by name.
fn read_sets(path: &Path, limit: Option<usize>) -> Result<Vec<PromptSet>> {
    let files: Vec<PathBuf> = if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("reading {}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .collect();
        v.sort();
        v
    } else {
        vec![path.to_path_buf()]
    };
    if files.is_empty() {
        bail!("no .jsonl prompt sets in {}", path.display());
    }
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("reading prompt set {}", f.display()))?;
            let mut prompts = Vec::new();
            for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
                let v: Value = serde_json::from_str(line)
                    .with_context(|| format!("{} line {}: not JSON", f.display(), i + 1))?;
                let (Some(id), Some(prompt)) = (v["id"].as_str(), v["prompt"].as_str()) else {
                    bail!(
                        "{} line {}: needs \"id\" and \"prompt\"",
                        f.display(),
                        i + 1
                    );
                };
                prompts.push((id.to_string(), prompt.to_string()));
            }
            prompts.truncate(limit.unwrap_or(usize::MAX));
            let name = f
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            Ok(PromptSet { name, prompts })
        })
        .collect()
}

/// The feature whose system prompt a set runs under (chat and code edits: the chat's own).
fn feature_for(set: &str) -> Feature {
    Feature::parse(set).unwrap_or(Feature::Chat)
}

/// The prompt for `message` under `feature`, as the app sends it.
fn render(model: &Model, feature: Feature, message: &str) -> Result<RenderedPrompt> {
    let messages = [
        Message::new(Role::System, feature.system_prompt()),
        Message::new(Role::User, message),
    ];
    Ok(model
        .chat_template
        .render(&model.tokenizer, &messages, true)?)
}

/// Sums over a set's replies for one way of decoding.
#[derive(Default)]
struct Totals {
    tokens: usize,
    decode_ms: f64,
    drafted: usize,
    accepted: usize,
    passes: usize,
}

impl Totals {
    fn add(&mut self, g: &Generation) {
        // Decode time covers the tokens after the first (which comes from the prompt's pass).
        self.tokens += g.stats.generated_tokens.saturating_sub(1);
        self.decode_ms += g.stats.decode_ms;
        self.drafted += g.stats.drafted;
        self.accepted += g.stats.accepted;
        self.passes += g.stats.passes;
    }

    fn tok_s(&self) -> f64 {
        if self.decode_ms > 0.0 {
            self.tokens as f64 * 1e3 / self.decode_ms
        } else {
            0.0
        }
    }
}

/// Where the prompt sets are by default: assets/evals/speculative of this repository.
pub fn default_sets() -> Result<PathBuf> {
    match super::eval::assets_evals_dir() {
        Some(d) => Ok(d.join("speculative")),
        None => bail!("cannot find the prompt sets (assets/evals/speculative); pass --prompt-set"),
    }
}

/// Runs every set plain and with `speculation`; the report as JSON.
pub fn measure(
    model: &Arc<Model>,
    n_ctx: usize,
    speculation: Speculation,
    sets: &Path,
    limit: Option<usize>,
    gen_tokens: usize,
    dump_prompts: Option<&Path>,
) -> Result<Value> {
    let sets = read_sets(sets, limit)?;
    let mut session = Session::new(model.clone(), n_ctx)?;
    let cancel = CancelHandle::new();
    let mut report = Vec::new();
    for set in &sets {
        let feature = feature_for(&set.name);
        let (mut plain, mut spec) = (Totals::default(), Totals::default());
        let mut prompt_tokens = Vec::new();
        for (i, (id, text)) in set.prompts.iter().enumerate() {
            let rendered = render(model, feature, text)?;
            if let Some(dir) = dump_prompts {
                std::fs::create_dir_all(dir)?;
                std::fs::write(dir.join(format!("{id}.txt")), &rendered.text)?;
            }
            let prompt = rendered.tokens;
            anyhow::ensure!(
                prompt.len() + gen_tokens <= session.n_ctx(),
                "{id}: {} prompt tokens and {gen_tokens} to generate exceed the context of {} (raise --ctx)",
                prompt.len(),
                session.n_ctx()
            );
            prompt_tokens.push(prompt.len());
            let mut run = |speculation| -> Result<Generation> {
                session.reset();
                let req = GenerateRequest {
                    prompt: prompt.clone(),
                    max_tokens: gen_tokens,
                    sampling: SamplingParams::greedy(),
                    speculation,
                };
                Ok(generate(&mut session, &req, &cancel, |_, _| {})?)
            };
            // Alternate which goes first, so drift in the machine's speed falls on both.
            let (a, b) = if i % 2 == 0 {
                let a = run(Speculation::Off)?;
                (a, run(speculation)?)
            } else {
                let b = run(speculation)?;
                (run(Speculation::Off)?, b)
            };
            if a.tokens != b.tokens {
                bail!(
                    "{id}: the {speculation} reply differs from the plain one (a bug: greedy replies must be identical)"
                );
            }
            plain.add(&a);
            spec.add(&b);
        }
        let n = prompt_tokens.len().max(1);
        report.push(json!({
            "set": set.name,
            "prompts": set.prompts.len(),
            "mean_prompt_tokens": prompt_tokens.iter().sum::<usize>() as f64 / n as f64,
            "min_prompt_tokens": prompt_tokens.iter().min(),
            "max_prompt_tokens": prompt_tokens.iter().max(),
            "generated_tokens": plain.tokens,
            "plain_tok_s": plain.tok_s(),
            "speculative_tok_s": spec.tok_s(),
            "speedup": spec.tok_s() / plain.tok_s(),
            "drafted": spec.drafted,
            "accepted": spec.accepted,
            "acceptance": spec.accepted as f64 / spec.drafted.max(1) as f64,
            "tokens_per_pass": spec.tokens as f64 / spec.passes.max(1) as f64,
        }));
    }
    Ok(json!({ "speculative": speculation.name(), "gen_tokens": gen_tokens, "sets": report }))
}

/// Times one pass over 1 + k tokens against one step, k = 1..=16, after `depth` tokens.
pub fn verify_cost(
    model: &Arc<Model>,
    n_ctx: usize,
    depth: usize,
    repetitions: usize,
) -> Result<Value> {
    let n_vocab = model.hparams.n_vocab as u32;
    let context: Vec<u32> = (0..depth.max(1) as u32)
        .map(|i| (i * 7919 + 11) % n_vocab)
        .collect();
    let burst: Vec<u32> = (0..17u32).map(|i| (i * 104_729 + 3) % n_vocab).collect();
    let mut session = Session::new(model.clone(), n_ctx)?;
    anyhow::ensure!(
        context.len() + burst.len() <= session.n_ctx(),
        "--depth {depth} plus 17 tokens exceeds the context of {} (raise --ctx)",
        session.n_ctx()
    );
    let mut out = Outputs::new();
    session.decode(&Batch::prompt(&context), &mut out)?;
    let base = session.tokens().len();
    // The best of the repetitions: the least disturbed by the rest of the machine.
    let mut time = |tokens: &[u32]| -> Result<f64> {
        let mut best = f64::INFINITY;
        for _ in 0..=repetitions {
            session.truncate(base);
            let batch = match tokens.len() {
                1 => Batch::step(&tokens[0]),
                _ => Batch::verify(tokens),
            };
            let t = Instant::now();
            session.decode(&batch, &mut out)?;
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(best)
    };
    let step_ms = time(&burst[..1])?;
    let mut rows = Vec::new();
    for k in 1..=16 {
        let ms = time(&burst[..=k])?;
        rows.push(json!({ "k": k, "ms": ms, "relative_to_step": ms / step_ms }));
    }
    Ok(json!({ "depth": depth, "step_ms": step_ms, "verify": rows }))
}
