//! `kostant bench --guard`: what the guard costs a user. The same chat prompt is answered with
//! the plain engine and through the guarded pipeline, back to back; the differences in time to
//! first token and in decode speed are the guard's price (issue 3 asks for under 10% of each).

use std::sync::Arc;

use anyhow::Result;
use serde_json::{json, Value};

use kostant_engine::{
    generate, CancelHandle, GenerateRequest, Generation, Message, Model, Role, SamplingParams,
    Session, Speculation,
};
use kostant_safety::{policy, respond};

use super::guard::{load_guard, GuardArgs};

/// A benign request of about the length people type; with the system prompt and the template
/// the prompt is about 64 tokens.
const MESSAGE: &str = "Can you help me plan a relaxed weekend in Lisbon? I like small museums, \
good coffee and long walks by the river, and I need to be home by Sunday evening.";

/// Answers the same prompt plain and guarded on `session` (the chat's context size, cache type
/// and adapter, as the caller made it) and reports the differences.
pub fn measure(
    model: &Arc<Model>,
    model_path: &std::path::Path,
    args: &GuardArgs,
    adapter: &super::adapter::AdapterArgs,
    mut session: Session,
    gen_tokens: usize,
    repetitions: usize,
) -> Result<Value> {
    let mut guard = load_guard(args, model, model_path)?;
    let messages = [
        Message::new(Role::System, policy::default_system_prompt()),
        Message::new(Role::User, MESSAGE),
    ];
    let prompt = model
        .chat_template
        .render(&model.tokenizer, &messages, true)?
        .tokens;
    let req = GenerateRequest {
        prompt: prompt.clone(),
        max_tokens: gen_tokens,
        sampling: SamplingParams::greedy(),
        speculation: Speculation::Off,
    };
    // With an adapter below the head's taps, or a quantized cache, the guard reads on its own
    // f16 base session (see `Guard::rides_on`): what that costs is what this measures then.
    adapter.apply(&mut session)?;
    let cancel = CancelHandle::new();
    let mut plain: Vec<Generation> = Vec::new();
    let mut guarded: Vec<Generation> = Vec::new();
    let (mut input_ms, mut output_ms, mut checks) = (Vec::new(), Vec::new(), Vec::new());
    // One unmeasured round of each pages everything in.
    for round in 0..=repetitions {
        session.reset();
        let g = generate(&mut session, &req, &cancel, |_, _| {})?;
        session.reset();
        let r = respond(&mut session, &mut guard, &req, MESSAGE, &cancel, |_| {})?;
        anyhow::ensure!(
            r.generation.is_some(),
            "the guard refused the benchmark's benign message ({:?})",
            r.verdict.category()
        );
        if round > 0 {
            plain.push(g);
            // Invariant: checked just above.
            guarded.push(r.generation.unwrap());
            input_ms.push(r.guard.input_ms);
            output_ms.push(r.guard.output_ms);
            checks.push(r.guard.output_checks as f64);
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let stat =
        |gs: &[Generation], f: fn(&Generation) -> f64| mean(&gs.iter().map(f).collect::<Vec<_>>());
    let ttft_plain = stat(&plain, |g| g.stats.ttft_ms);
    let ttft_guarded = stat(&guarded, |g| g.stats.ttft_ms);
    let decode_plain = stat(&plain, |g| g.stats.decode_tok_s);
    let decode_guarded = stat(&guarded, |g| g.stats.decode_tok_s);
    // One judgement of the reply: what judging every token (instead of holding text to the
    // next sentence end or 16 tokens) would add to each decode step.
    let check_ms = mean(&output_ms) / mean(&checks).max(1.0);
    let step_ms = 1e3 / decode_plain.max(f64::MIN_POSITIVE);
    Ok(json!({
        "rides_on_chat_pass": guard.rides_on(&session),
        "prompt_tokens": prompt.len(),
        "generated_tokens": stat(&guarded, |g| g.tokens.len() as f64),
        "ttft_ms_plain": ttft_plain,
        "ttft_ms_guarded": ttft_guarded,
        // The whole input screening as the pipeline times it, and what it adds to TTFT.
        "input_screen_ms": mean(&input_ms),
        "input_overhead_fraction": (ttft_guarded - ttft_plain) / ttft_plain,
        "decode_tok_s_plain": decode_plain,
        "decode_tok_s_guarded": decode_guarded,
        "output_screen_ms": mean(&output_ms),
        "output_overhead_fraction": decode_plain / decode_guarded - 1.0,
        "output_checks": mean(&checks),
        "output_check_ms": check_ms,
        "per_token_check_fraction": check_ms / step_ms,
        // Text is shown only once judged: when the first of it appears, and the most tokens
        // held back at once.
        "first_shown_ms_guarded": stat(&guarded, |g| g.stats.first_shown_ms),
        "max_held_tokens": guarded.iter().map(|g| g.stats.max_held_tokens).max().unwrap_or(0),
        "guard_resident_mb": guard.resident_bytes() as f64 / (1024.0 * 1024.0),
    }))
}
