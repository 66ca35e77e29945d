//! `kostant adapter eval`: each feature's held-out test split through the guarded pipeline,
//! with the feature's system prompt alone and with its shipped adapter, scored against the
//! references (kostant_evals::feature_eval), written as docs/adapters-report.{md,json}.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;

use kostant_app::assistant::feature_adapters::FeatureAdapters;
use kostant_app::features::Feature;
use kostant_engine::{ActiveAdapter, CancelHandle, Model};
use kostant_evals::feature_eval::{self, FeatureReport, FeatureRow, Task};
use kostant_evals::{RunOptions, Runner};

use super::guard::{load_guard_named, GuardArgs};
use super::{load_model, ModelArgs};

#[derive(Args, Debug)]
pub struct AdapterEvalArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub guard: GuardArgs,
    /// Features to score: all, or a comma-separated list.
    ///
    /// The features are summarize, proofread, reply and rewrite.
    #[arg(long, default_value = "all")]
    pub feature: String,
    /// The split to score: test (the report's) or dev.
    #[arg(long, default_value = "test")]
    pub split: String,
    /// At most this many examples per feature (the first ones).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Most tokens per reply.
    #[arg(long, default_value_t = 192)]
    pub max_tokens: usize,
    /// Where the features' data is (default: assets/adapters of this repository).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Write the report here (.md, and .json beside it).
    ///
    /// Without it, the Markdown is printed.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Score this GGUF LoRA adapter in place of the feature's shipped one.
    ///
    /// A candidate, say, before it ships; its side paths are scaled by SCALE (default 1). One
    /// --feature only.
    #[arg(long, value_name = "FILE[:SCALE]")]
    pub adapter: Option<String>,
    /// Proofread only: score the proofreader that never invents (a sentence at a time, each
    /// change checked) beside the free one and the input left as it is.
    #[arg(long)]
    pub constrained: bool,
}

fn data_dir(args: &AdapterEvalArgs) -> Result<PathBuf> {
    if let Some(d) = &args.data {
        return Ok(d.clone());
    }
    super::repo_assets("adapters", "proofread")
        .context("cannot find the features' data (assets/adapters); pass --data")
}

fn tasks(list: &str) -> Result<Vec<Task>> {
    if list.trim() == "all" {
        return Ok(Task::ALL.to_vec());
    }
    let mut out = Vec::new();
    for id in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some(t) = Task::parse(id) else {
            bail!("--feature {id:?}: the features scored against reference outputs are summarize, proofread, reply and rewrite");
        };
        out.push(t);
    }
    if out.is_empty() {
        bail!("--feature needs a feature");
    }
    Ok(out)
}

pub fn run(args: AdapterEvalArgs) -> Result<()> {
    if args.max_tokens == 0 {
        bail!("--max-tokens must be at least 1");
    }
    if args.split != "test" && args.split != "dev" {
        bail!("--split {:?}: use test or dev", args.split);
    }
    let tasks = tasks(&args.feature)?;
    if args.constrained {
        if tasks != [Task::Proofread] {
            bail!("--constrained scores the proofreader: use it with --feature proofread");
        }
        return constrained::run(&args);
    }
    if args.adapter.is_some() && tasks.len() != 1 {
        bail!("--adapter scores one adapter for one feature: name it with --feature");
    }
    let dir = data_dir(&args)?;
    let model = load_model(&args.model)?;
    let candidate = super::adapter::AdapterArgs {
        adapter: args.adapter.clone(),
    }
    .load(&model)?;
    let path = crate::model_path::resolve(args.model.model.as_deref())?;
    let mut adapters = FeatureAdapters::new(model.clone());
    let cancel = CancelHandle::new();
    let mut rows = Vec::new();
    // One guard for every run, as the app keeps one resident; each runner hands it back.
    let (guard, head) = load_guard_named(&args.guard, &model, &path)?;
    let head_name = head.to_string();
    let mut guard = Some(guard);
    for task in tasks {
        let feature = task.feature();
        let split = dir.join(task.id()).join(format!("{}.jsonl", args.split));
        let mut examples = feature_eval::load_split(&split)?;
        if let Some(n) = args.limit {
            examples.truncate(n);
        }
        let adapter = match (&candidate, adapters.get(feature)?) {
            (Some(c), _) => Some(c.clone()),
            (None, Ok(a)) => Some(a),
            (None, Err(why)) => {
                eprintln!("kostant: {}: {why}", task.id());
                None
            }
        };
        let mut score = |adapter: Option<ActiveAdapter>| -> Result<Vec<_>> {
            let lent = guard
                .take()
                .context("the guard was lost to an earlier failure")?;
            let mut runner = Runner::new(
                model.clone(),
                lent,
                options(&args, &model, feature, adapter),
            )?;
            let label = runner
                .options()
                .adapter
                .as_ref()
                .map_or("prompt only".into(), |a| a.adapter.name().to_string());
            let n = examples.len();
            let scored = feature_eval::run(&mut runner, task, &examples, &cancel, |i, s| {
                eprintln!(
                    "{} [{label}] {}/{n}: {} {:.3}",
                    task.id(),
                    i + 1,
                    task.metric(),
                    s.score
                );
            })?;
            guard = Some(runner.into_guard());
            Ok(scored)
        };
        let base = score(None)?;
        let adapted = match &adapter {
            Some(a) => Some(score(Some(a.clone()))?),
            None => None,
        };
        let name = adapter.as_ref().map(|a| a.adapter.name().to_string());
        rows.push(FeatureRow::new(
            task,
            &base,
            name.as_deref().zip(adapted.as_deref()),
        ));
    }
    let report = FeatureReport {
        command: super::eval::command_line(),
        split: args.split.clone(),
        model: format!("{} ({})", model.name(), model.quantization()),
        guard_head: head_name,
        max_tokens: args.max_tokens,
        rows,
    };
    let md = report.markdown();
    match &args.out {
        Some(out) => {
            std::fs::write(out, &md).with_context(|| format!("cannot write {}", out.display()))?;
            let json = out.with_extension("json");
            std::fs::write(&json, serde_json::to_string_pretty(&report)? + "\n")
                .with_context(|| format!("cannot write {}", json.display()))?;
            eprintln!("report: {} and {}", out.display(), json.display());
        }
        None => print!("{md}"),
    }
    Ok(())
}

/// Greedy replies under the feature's system prompt, as the app sends it, with or without
/// its adapter; the context fits the longest summarize input and its reply.
fn options(
    args: &AdapterEvalArgs,
    model: &Arc<Model>,
    feature: Feature,
    adapter: Option<ActiveAdapter>,
) -> RunOptions {
    RunOptions {
        max_tokens: args.max_tokens,
        n_ctx: args.model.ctx.min(model.hparams.n_ctx_train.max(256)),
        system: feature.system_prompt(),
        adapter,
        ..Default::default()
    }
}

/// `--constrained`: the proofread split scored three ways, written as its own report.
mod constrained {
    use anyhow::{Context, Result};
    use serde::Serialize;

    use kostant_app::assistant::feature_adapters::FeatureAdapters;
    use kostant_app::assistant::proofread::{self, sentence_grammar, token_budget};
    use kostant_engine::CancelHandle;
    use kostant_evals::feature_eval::{self, Example, Task};
    use kostant_evals::quality::Mean;
    use kostant_evals::{Rate, Runner};

    use super::super::guard::load_guard_named;
    use super::super::load_model;
    use super::{data_dir, options, AdapterEvalArgs};

    /// One way of proofreading, scored on the split.
    #[derive(Serialize)]
    struct Column {
        label: &'static str,
        exact: Rate,
        cer: Mean,
        sentences_added: usize,
        sentences_dropped: usize,
        stopped: usize,
        replies: Vec<String>,
    }

    impl Column {
        fn of(
            label: &'static str,
            examples: &[Example],
            replies: Vec<String>,
            stopped: usize,
        ) -> Column {
            let mut exact = 0;
            let mut cer = Vec::new();
            let (mut added, mut dropped) = (0, 0);
            for (ex, reply) in examples.iter().zip(&replies) {
                let (em, c) = feature_eval::score(Task::Proofread, ex, reply);
                exact += usize::from(em == 1.0);
                cer.push(c);
                let (n_in, n_out) = (
                    proofread::sentences(&ex.input).len(),
                    proofread::sentences(reply).len(),
                );
                added += n_out.saturating_sub(n_in);
                dropped += n_in.saturating_sub(n_out);
            }
            Column {
                label,
                exact: Rate::new(exact, examples.len()),
                cer: Mean::bootstrap(&cer),
                sentences_added: added,
                sentences_dropped: dropped,
                stopped,
                replies,
            }
        }
    }

    pub(super) fn run(args: &AdapterEvalArgs) -> Result<()> {
        let split = data_dir(args)?
            .join("proofread")
            .join(format!("{}.jsonl", args.split));
        let mut examples = feature_eval::load_split(&split)?;
        if let Some(n) = args.limit {
            examples.truncate(n);
        }
        let model = load_model(&args.model)?;
        let path = crate::model_path::resolve(args.model.model.as_deref())?;
        let feature = Task::Proofread.feature();
        let adapter = FeatureAdapters::new(model.clone())
            .get(feature)?
            .map_err(|why| anyhow::anyhow!("proofread: {why}"))?;
        let (guard, _) = load_guard_named(&args.guard, &model, &path)?;
        let mut runner = Runner::new(
            model.clone(),
            guard,
            options(args, &model, feature, Some(adapter)),
        )?;
        let cancel = CancelHandle::new();
        let n = examples.len();
        let as_is = examples.iter().map(|e| e.input.clone()).collect();
        let as_is = Column::of("input left as it is", &examples, as_is, 0);

        let (mut free, mut free_stopped) = (Vec::new(), 0);
        for (i, ex) in examples.iter().enumerate() {
            let a = runner.answer(&ex.input, &cancel)?;
            free_stopped += usize::from(a.verdict != kostant_safety::Verdict::Answered);
            eprintln!("proofread [free] {}/{n}: {}", i + 1, a.reply);
            free.push(a.reply);
        }
        let free = Column::of("adapter, free (as shipped)", &examples, free, free_stopped);

        let (mut held, mut held_stopped) = (Vec::new(), 0);
        for (i, ex) in examples.iter().enumerate() {
            let p = proofread::proofread(&ex.input, |sentence| -> Result<String> {
                let tokens = model.tokenizer.encode(sentence, false)?.len();
                let a = runner.answer_shaped(
                    &[],
                    sentence,
                    token_budget(tokens),
                    Some(sentence_grammar()),
                    &cancel,
                )?;
                // A sentence the guard stopped stays as it was.
                if a.verdict != kostant_safety::Verdict::Answered {
                    held_stopped += 1;
                    return Ok(sentence.to_string());
                }
                Ok(a.reply)
            })?;
            eprintln!("proofread [constrained] {}/{n}: {}", i + 1, p.corrected);
            held.push(p.corrected);
        }
        let held = Column::of("adapter, constrained", &examples, held, held_stopped);
        write(args, &model, [as_is, free, held])
    }

    fn write(
        args: &AdapterEvalArgs,
        model: &kostant_engine::Model,
        columns: [Column; 3],
    ) -> Result<()> {
        let mut md = format!(
            "# Proofread, constrained\n\nThe proofread {} split ({} examples) scored three ways: the input left as it is, the shipped adapter writing freely, and the proofreader that never invents (app/src/assistant/proofread.rs: a sentence at a time under a one-sentence grammar, every change checked word by word, all but local corrections reverted). Model: {} ({}), greedy.\n\nCommand: `{}`\n\n",
            args.split,
            columns[0].replies.len(),
            model.name(),
            model.quantization(),
            super::super::eval::command_line(),
        );
        md.push_str("| run | exact match | character error rate | sentences added | sentences dropped | stopped by the guard |\n|---|---|---|---|---|---|\n");
        for c in &columns {
            md.push_str(&format!(
                "| {} | {}/{} = {:.3} [{:.3}, {:.3}] | {} | {} | {} | {} |\n",
                c.label,
                c.exact.k,
                c.exact.n,
                c.exact.rate,
                c.exact.lo,
                c.exact.hi,
                c.cer.display(),
                c.sentences_added,
                c.sentences_dropped,
                c.stopped,
            ));
        }
        md.push_str("\nIntervals: 95% (Wilson for exact match, bootstrap for the character error rate, lower is better). Sentences added or dropped: the reply's sentences against the input's. Stopped by the guard: replies for the free run; sentences for the constrained one, each then kept as written.\n");
        match &args.out {
            Some(out) => {
                std::fs::write(out, &md)
                    .with_context(|| format!("cannot write {}", out.display()))?;
                let json = out.with_extension("json");
                std::fs::write(&json, serde_json::to_string_pretty(&columns)? + "\n")
                    .with_context(|| format!("cannot write {}", json.display()))?;
                eprintln!("report: {} and {}", out.display(), json.display());
            }
            None => print!("{md}"),
        }
        Ok(())
    }
}
