//! `kostant guard calibrate`: chooses the threshold for screening replies. A reply is judged on
//! the message and the reply so far, which reads differently from the message alone, so the
//! message's threshold does not carry over. The dev prompts are answered through the real
//! pipeline (greedy, replies never stopped), each reply's worst score is kept, and the lowest
//! threshold that stops at most the given share of replies to safe prompts is written into
//! the head.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use serde_json::json;

use kostant_engine::{
    CancelHandle, GenerateRequest, Message, Model, Role, SamplingParams, Session, Speculation,
};
use kostant_safety::train::{choose_threshold, read_jsonl, split_scores};
use kostant_safety::{policy, respond, Guard, Verdict};

pub fn run(
    model: &Arc<Model>,
    mut guard: Guard,
    data: &Path,
    out: &Path,
    max_tokens: usize,
    max_false_positive: f64,
) -> Result<()> {
    anyhow::ensure!(max_tokens >= 1, "--max-tokens must be at least 1");
    let dev = read_jsonl(&data.join("dev.jsonl"))?;
    let (input_threshold, _) = guard.thresholds();
    // Scores are wanted for whole replies: nothing is stopped while calibrating.
    guard.set_thresholds(input_threshold, f32::INFINITY);
    let mut session = Session::new(model.clone(), 1024)?;
    let cancel = CancelHandle::new();
    let mut scores = Vec::new();
    let start = std::time::Instant::now();
    for (i, item) in dev.iter().enumerate() {
        let messages = [
            Message::new(Role::System, policy::default_system_prompt()),
            Message::new(Role::User, item.prompt.clone()),
        ];
        let prompt = model
            .chat_template
            .render(&model.tokenizer, &messages, true)?
            .tokens;
        let req = GenerateRequest {
            prompt,
            max_tokens,
            sampling: SamplingParams::greedy(),
            speculation: Speculation::Off,
        };
        session.reset();
        let r = respond(
            &mut session,
            &mut guard,
            &req,
            &item.prompt,
            &cancel,
            |_| {},
        )?;
        // A refused message has no reply to score.
        if !matches!(r.verdict, Verdict::Refused { .. }) {
            scores.push((r.guard.output_score, item.label == "unsafe"));
        }
        if (i + 1) % 50 == 0 || i + 1 == dev.len() {
            eprintln!(
                "dev: {}/{} prompts, {:.0} s",
                i + 1,
                dev.len(),
                start.elapsed().as_secs_f64()
            );
        }
    }
    let threshold = choose_threshold(&scores, max_false_positive);
    let dev_scores = split_scores(&scores, threshold);
    let mut head = guard.head().clone();
    // The threshold belongs to the head that judged these replies.
    match head.replies.as_deref_mut() {
        Some(replies) => replies.info.output_threshold = Some(threshold),
        None => head.info.output_threshold = Some(threshold),
    }
    head.info.training["output_calibration"] = json!({
        "command": format!(
            "kostant guard calibrate --data {} --out {} --max-tokens {max_tokens} --max-dev-false-positive {max_false_positive}",
            data.display(),
            out.display()
        ),
        "rule": format!(
            "lowest reply threshold that stops at most {max_false_positive} of the replies to safe dev prompts the message screening let through"
        ),
        "replies": scores.len(),
        "dev": &dev_scores,
    });
    super::guard::write_head(&head, out, || {
        Ok(format!(
            ": reply threshold {threshold:.4} (message threshold {input_threshold:.4}); on dev replies: {:.3} of unsafe stopped, {:.3} of safe stopped ({} unsafe, {} safe)",
            dev_scores.recall,
            dev_scores.false_positive_rate,
            dev_scores.n_unsafe,
            dev_scores.n_safe
        ))
    })
}
