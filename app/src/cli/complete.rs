//! `kostant complete`: raw text continuation, with no chat template and no system prompt (as
//! llama.cpp's `llama-completion -no-cnv`). The prompt is tokenized with special tokens
//! recognised and BOS added as the GGUF says; the guard screens the prompt and the output as
//! it does every chat. It is how a user, or a test, checks any model file against llama.cpp.

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;

use kostant_engine::tokenizer::Tokenizer;
use kostant_engine::{CancelHandle, GenerateRequest, SamplingParams, Session, Speculation};
use kostant_safety::pipeline::{self, Reply, ReplyEvent, RunningReply, StreamEvent};

use super::{guard, load_model_kv, peak_rss_mb, KvArgs, ModelArgs};

#[derive(Args, Debug)]
pub struct CompleteArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    #[command(flatten)]
    pub adapter: super::adapter::AdapterArgs,
    /// The text to continue.
    #[arg(
        long,
        conflicts_with = "prompt_file",
        required_unless_present = "prompt_file"
    )]
    pub prompt: Option<String>,
    /// Read the text to continue from this file (byte for byte; `-` reads stdin).
    #[arg(long)]
    pub prompt_file: Option<PathBuf>,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy (llama.cpp's greedy sampler, token for token).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Random seed for temperatures above 0 (default 0).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// One JSON object per line: a line per token, then a final "done" line.
    ///
    /// A token's line is {"event":"token","text"}, a withdrawal's {"event":"withdraw","from",
    /// "to","notice"}; the last is {"event":"done","text","ids","verdict","model","adapter",
    /// "stats"}.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub grammar: super::GrammarArgs,
    #[command(flatten)]
    pub guard: guard::GuardArgs,
}

pub fn run(args: CompleteArgs) -> Result<()> {
    let text = read_prompt(&args)?;
    if text.is_empty() {
        bail!("the prompt is empty");
    }
    if args.max_tokens == 0 {
        bail!("--max-tokens must be at least 1");
    }
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        repeat_penalty: 1.0,
        repeat_last_n: 0,
        seed: args.seed,
        grammar: args.grammar.load()?,
    };
    sampling.validate()?;
    let model = load_model_kv(&args.model, args.kv.kv_type)?;
    let path = crate::model_path::resolve(args.model.model.as_deref())?;
    let (guard, _) = guard::load_guard_named(&args.guard, &model, &path)?;
    let mut session = Session::with_kv_type(model.clone(), args.model.ctx, args.kv.kv_type)?;
    let adapter = args.adapter.apply(&mut session)?;
    let prompt = encode_prompt(&model.tokenizer, &text, session.n_ctx())?;
    let req = GenerateRequest {
        max_tokens: args.max_tokens.min(session.n_ctx() - prompt.len()),
        prompt,
        sampling,
        speculation: Speculation::Off,
    };
    let running = pipeline::spawn(session, guard, req, text, CancelHandle::new());
    let r = stream(running, args.json)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", done_json(&r, &model.name(), adapter))?;
    } else {
        writeln!(out, "{}", r.text)?;
    }
    Ok(())
}

/// The text to continue: `--prompt`, or `--prompt-file` (`-` for stdin).
fn read_prompt(args: &CompleteArgs) -> Result<String> {
    Ok(match (&args.prompt, &args.prompt_file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) if f.as_os_str() == "-" => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("cannot read the prompt from stdin (is it UTF-8 text?)")?;
            s
        }
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("cannot read the prompt file {}", f.display()))?,
        (None, None) => bail!("give --prompt TEXT or --prompt-file FILE"),
    })
}

/// The prompt's tokens, special tokens recognised and BOS first when the GGUF asks for it;
/// refused when it leaves no room in the context.
fn encode_prompt(tok: &Tokenizer, text: &str, n_ctx: usize) -> Result<Vec<u32>> {
    let mut prompt = tok.encode(text, true)?;
    if let (true, Some(bos)) = (tok.add_bos(), tok.bos_id()) {
        if prompt.first() != Some(&bos) {
            prompt.insert(0, bos);
        }
    }
    if prompt.len() >= n_ctx {
        bail!(
            "the prompt is {} tokens, and the context holds {} (raise --ctx or shorten it)",
            prompt.len(),
            n_ctx
        );
    }
    Ok(prompt)
}

/// Follows the reply to its end, printing each token and withdrawal as a JSON line when
/// `json`; returns the finished reply.
fn stream(mut running: RunningReply, json: bool) -> Result<Reply> {
    let stdout = std::io::stdout();
    let mut outcome = None;
    while let Some(ev) = running.events.blocking_recv() {
        let mut out = stdout.lock();
        match ev {
            StreamEvent::Reply(ReplyEvent::Token(t)) if json => {
                let _ = writeln!(out, "{}", json!({"event": "token", "text": t}));
            }
            StreamEvent::Reply(ReplyEvent::Withdraw { from, to, notice }) if json => {
                let _ = writeln!(
                    out,
                    "{}",
                    json!({"event": "withdraw", "from": from, "to": to, "notice": notice})
                );
            }
            StreamEvent::Reply(_) => {}
            StreamEvent::Done(r) => outcome = Some(Ok(*r)),
            StreamEvent::Error(e) => outcome = Some(Err(anyhow::anyhow!(e))),
        }
    }
    running
        .join
        .join()
        .map_err(|_| anyhow::anyhow!("the generation thread panicked"))?;
    outcome.context("generation ended without a result")?
}

/// `--json`'s final line: the text, its token ids, the verdict and the run's numbers.
fn done_json(r: &Reply, model: &str, adapter: Option<String>) -> serde_json::Value {
    let ids = r
        .generation
        .as_ref()
        .map(|g| g.tokens.clone())
        .unwrap_or_default();
    let stats = r.generation.as_ref().map(|g| {
        json!({
            "prompt_tokens": g.stats.prompt_tokens,
            "generated_tokens": g.stats.generated_tokens,
            "ttft_ms": g.stats.ttft_ms,
            "prefill_tok_s": g.stats.prefill_tok_s,
            "decode_tok_s": g.stats.decode_tok_s,
            "stop_reason": g.stop,
            "peak_rss_mb": peak_rss_mb(),
        })
    });
    json!({
        "event": "done",
        "text": r.text,
        "ids": ids,
        "verdict": r.verdict,
        "model": model,
        "adapter": adapter,
        "stats": stats,
    })
}
