//! `kostant bench --grammar-file FILE` (or `--json-schema FILE`): what a grammar costs decode.
//! The same completion prompt (no chat template, as `kostant complete`) is continued greedily
//! with the grammar and without it, back to back, `--repetitions` times after one unmeasured
//! round of each; decode speed counts the steps after the first token, as everywhere.

use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::json;

use kostant_engine::{
    generate, CancelHandle, GenerateRequest, Generation, Model, SamplingParams, Session,
    Speculation,
};

use super::BenchArgs;

pub fn run(args: &BenchArgs, model: &Arc<Model>) -> Result<()> {
    let grammar = args
        .grammar
        .load()?
        .context("give --grammar-file or --json-schema")?;
    let tok = &model.tokenizer;
    let mut prompt = tok.encode(&args.grammar_prompt, true)?;
    if let (true, Some(bos)) = (tok.add_bos(), tok.bos_id()) {
        if prompt.first() != Some(&bos) {
            prompt.insert(0, bos);
        }
    }
    let plain = GenerateRequest {
        prompt,
        max_tokens: args.gen_tokens,
        sampling: SamplingParams::greedy(),
        speculation: Speculation::Off,
    };
    let constrained = GenerateRequest {
        sampling: SamplingParams {
            grammar: Some(grammar),
            ..SamplingParams::greedy()
        },
        ..plain.clone()
    };
    let mut session = Session::with_kv_type(model.clone(), args.model.ctx, args.kv.kv_type)?;
    let cancel = CancelHandle::new();
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for round in 0..=args.repetitions {
        session.reset();
        let a = generate(&mut session, &plain, &cancel, |_, _| {})?;
        session.reset();
        let b = generate(&mut session, &constrained, &cancel, |_, _| {})?;
        if round > 0 {
            without.push(a);
            with.push(b);
        }
    }
    report(args, &without, &with);
    Ok(())
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn report(args: &BenchArgs, without: &[Generation], with: &[Generation]) {
    let rate = |g: &[Generation]| mean(g.iter().map(|x| x.stats.decode_tok_s));
    // The grammar's own time, a share of decode that noise from other work cannot blur.
    let share = mean(
        with.iter()
            .map(|g| g.stats.grammar_ms / g.stats.decode_ms.max(1e-9)),
    ) * 100.0;
    let per_token = mean(
        with.iter()
            .map(|g| g.stats.grammar_ms / g.tokens.len().max(1) as f64),
    );
    let masks = with.first().map_or(0, |g| g.stats.grammar_masks);
    let tokens = |g: &[Generation]| g.first().map_or(0, |x| x.tokens.len());
    let (plain, constrained) = (rate(without), rate(with));
    let slower = if constrained > 0.0 {
        (plain / constrained - 1.0) * 100.0
    } else {
        0.0
    };
    let file = args
        .grammar
        .grammar_file
        .as_ref()
        .or(args.grammar.json_schema.as_ref())
        .map(|p| p.display().to_string());
    let reply = with.first().map(|g| g.reply.clone()).unwrap_or_default();
    if args.json {
        let j = json!({
            "grammar": file,
            "prompt": args.grammar_prompt,
            "decode_tok_s_plain": plain,
            "decode_tok_s_grammar": constrained,
            "tokens_plain": tokens(without),
            "tokens_grammar": tokens(with),
            "grammar_slower_percent": slower,
            "grammar_ms_per_token": per_token,
            "grammar_share_of_decode_percent": share,
            "grammar_masks": masks,
            "reply_grammar": reply,
            "repetitions": args.repetitions,
        });
        println!("{j}");
        return;
    }
    println!(
        "decode plain   {plain:>8.1} tok/s  ({} tokens)",
        tokens(without)
    );
    println!(
        "decode grammar {constrained:>8.1} tok/s  ({} tokens, {slower:+.1}% time a token)",
        tokens(with)
    );
    println!(
        "grammar's own  {per_token:>8.3} ms a token ({share:.2}% of decode; {masks} of {} tokens masked the vocabulary)",
        tokens(with)
    );
    println!("grammar reply  {reply:?}");
}
