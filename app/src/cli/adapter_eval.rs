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
