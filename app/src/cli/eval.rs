//! `kostant eval`: the safety eval suites of `kostant-evals` from the terminal, offline, with a
//! progress bar, resumable (each finished item is appended to the run directory's
//! results.jsonl and skipped on the next start), writing report.{json,md,svg}; `--prompts` runs
//! any prompt list through the same guarded pipeline; `--compare` runs the suites over
//! requantizations of one model and puts the numbers side by side.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;

use kostant_engine::encoder::Encoder;
use kostant_engine::{CancelHandle, KvType, Model};
use kostant_evals::calibration::judges;
use kostant_evals::perplexity::{perplexity, Perplexity};
use kostant_evals::retrieval::{run_retrieval_eval, RetrievalReport};
use kostant_evals::runner::{run_suite, Progress};
use kostant_evals::{
    compare_markdown, summarise, EvalError, ItemResult, Meta, ResultsFile, RunOptions, RunReport,
    Runner, Skipped, SuiteName, SuiteSource, Summary,
};

use kostant_app::assistant::documents::{embedder_path, DocsError};
use kostant_app::assistant::feature_adapters::{FeatureAdapters, NoAdapter};
use kostant_app::features::Feature;

use super::guard::{load_guard_named, GuardArgs, HeadId};
use super::{load_model, load_model_kv, KvArgs, ModelArgs};

#[derive(Args, Debug)]
pub struct EvalArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub guard: GuardArgs,
    /// The kv cache of every session the run makes (the suites' replies and perplexity).
    #[command(flatten)]
    pub kv: KvArgs,
    /// Where the encrypted history lives, which stores each finished run's report.
    ///
    /// Default: $XDG_DATA_HOME/kostant or ~/.local/share/kostant.
    #[arg(long, env = "KOSTANT_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Do not store the report in the encrypted history.
    #[arg(long)]
    pub no_history: bool,
    /// Suites to run: all, or a comma-separated list.
    ///
    /// The suites are harmful, benign_edgy, benign_everyday, provocation, jailbreak,
    /// multiturn, long, perplexity and retrieval (ask your documents).
    #[arg(long, default_value = "all")]
    pub suite: String,
    /// The app feature whose system prompt the replies run under.
    ///
    /// One of chat, summarize, reply, rewrite and proofread. A comma-separated list (or all)
    /// runs each into <out>/<feature>/ and writes features.md with them side by side.
    #[arg(long, default_value = "chat")]
    pub feature: String,
    /// Run each feature on its system prompt alone, without its shipped adapter.
    #[arg(long)]
    pub no_adapter: bool,
    /// The run directory, or the output JSONL file with --prompts.
    ///
    /// Default: eval-runs/<model file name>.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// At most this many items per suite, a fixed sample spread over the suite.
    ///
    /// Perplexity reads limit x 32 tokens.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Most tokens generated per reply.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Run the prompts of this JSONL file instead of the suites.
    ///
    /// One {"id":…,"prompt":…} a line.
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// Requantize --model into each of these formats and run the suites on each.
    ///
    /// The formats are those `kostant quantize` writes, comma-separated; the report gives the
    /// deltas against the model as given.
    #[arg(long)]
    pub compare: Option<String>,
    /// Where the suites are (default: assets/evals of this repository).
    #[arg(long)]
    pub suites_dir: Option<PathBuf>,
    /// Jailbreak items: harmful items x templates, sampled deterministically.
    #[arg(long, default_value_t = 200)]
    pub jailbreak_sample: usize,
    /// Tokens of assets/evals/perplexity.txt scored for perplexity.
    #[arg(long, default_value_t = 2048)]
    pub perplexity_tokens: usize,
    /// Also write the model's unscreened words (`generated`) to the results.
    ///
    /// A withdrawn reply's text among them. Without it the results hold only what the user
    /// saw.
    #[arg(long)]
    pub keep_unscreened: bool,
}

fn suites_dir(args: &EvalArgs) -> Result<PathBuf> {
    if let Some(d) = &args.suites_dir {
        return Ok(d.clone());
    }
    match assets_evals_dir() {
        Some(d) => Ok(d),
        None => bail!("cannot find the eval suites (assets/evals); pass --suites-dir"),
    }
}

/// The repository's assets/evals: from the working directory, or next to a cargo-built binary
/// (<repo>/target/<profile>/kostant).
pub(super) fn assets_evals_dir() -> Option<PathBuf> {
    super::repo_assets("evals", "suites")
}

/// The command line as typed, for the report.
pub(super) fn command_line() -> String {
    let mut args = std::env::args();
    args.next();
    std::iter::once("kostant".to_string())
        .chain(args)
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn run(args: EvalArgs) -> Result<()> {
    if args.max_tokens == 0 {
        bail!("--max-tokens must be at least 1");
    }
    if args.prompts.is_none() {
        // An unknown suite is reported before the model is loaded.
        SuiteName::parse_list(&args.suite)?;
    }
    let features = parse_features(&args.feature)?;
    if features.len() > 1 && (args.prompts.is_some() || args.compare.is_some()) {
        bail!("--prompts and --compare take one --feature");
    }
    let cancel = CancelHandle::new();
    {
        let c = Mutex::new(cancel.clone());
        ctrlc::set_handler(move || {
            if let Ok(c) = c.lock() {
                if c.is_cancelled() {
                    std::process::exit(130);
                }
                eprintln!(
                    "\nstopping after this item (finished items are kept; run again to resume)"
                );
                c.cancel();
            }
        })
        .context("cannot install the Ctrl-C handler")?;
    }
    if let Some(list) = &args.compare {
        return run_compare(&args, list, features[0], &cancel);
    }
    let path = crate::model_path::resolve(args.model.model.as_deref())?;
    let model = load_model_kv(&args.model, args.kv.kv_type)?;
    if features.len() > 1 {
        return run_features(&args, &features, &model, &path, &cancel);
    }
    let feature = features[0];
    let (guard, head) = load_guard_named(&args.guard, &model, &path)?;
    let mut runner = Runner::new(model.clone(), guard, run_options(&args, &model, feature)?)?;
    if let Some(prompts) = &args.prompts {
        let out = args
            .out
            .clone()
            .ok_or_else(|| anyhow::anyhow!("--prompts needs --out FILE.jsonl"))?;
        return run_prompts(&mut runner, prompts, &out, args.limit, &cancel);
    }
    let dir = match &args.out {
        Some(d) => d.clone(),
        None => {
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            let name = match feature {
                Feature::Chat => stem.to_string(),
                f => format!("{stem}-{}", f.id()),
            };
            PathBuf::from("eval-runs").join(name)
        }
    };
    let report = run_suites(&args, &mut runner, &path, &dir, feature, &head, &cancel)?;
    eprintln!("{}", headline(&report));
    if let Some(line) = report.xstest_line() {
        eprintln!("{line}");
    }
    eprintln!("report: {}", dir.join("report.md").display());
    if report.meta.partial {
        bail!("the run stopped before every suite finished; run the same command again to resume");
    }
    Ok(())
}

/// `--feature`: one feature, a comma-separated list, or all.
fn parse_features(list: &str) -> Result<Vec<Feature>> {
    let mut out = Vec::new();
    for id in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if id == "all" {
            return Ok(Feature::ALL.to_vec());
        }
        let f = Feature::parse(id).map_err(|e| anyhow::anyhow!("--feature: {e}"))?;
        if !out.contains(&f) {
            out.push(f);
        }
    }
    if out.is_empty() {
        bail!("--feature needs a feature: chat, summarize, reply, rewrite or proofread");
    }
    Ok(out)
}

/// Greedy replies under `feature`'s system prompt and its shipped adapter (unless
/// --no-adapter, or the model is not the adapter's base), exactly as the app sends them.
fn run_options(args: &EvalArgs, model: &Arc<Model>, feature: Feature) -> Result<RunOptions> {
    let adapter = match args.no_adapter {
        true => None,
        false => match FeatureAdapters::new(model.clone()).get(feature)? {
            Ok(a) => Some(a),
            Err(NoAdapter::NoneShipped) => None,
            Err(why) => {
                eprintln!("kostant: {}: {why}", feature.id());
                None
            }
        },
    };
    Ok(RunOptions {
        max_tokens: args.max_tokens,
        n_ctx: args.model.ctx.min(model.hparams.n_ctx_train.max(256)),
        system: feature.system_prompt(),
        keep_unscreened: args.keep_unscreened,
        kv_type: args.kv.kv_type,
        adapter,
    })
}

/// `--feature a,b,…`: the suites under each feature's system prompt, each in its own run
/// directory, then their numbers side by side (features.md).
fn run_features(
    args: &EvalArgs,
    features: &[Feature],
    model: &Arc<Model>,
    path: &Path,
    cancel: &CancelHandle,
) -> Result<()> {
    let root = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("eval-runs").join(format!(
            "features-{}",
            path.file_stem().unwrap_or_default().to_string_lossy()
        ))
    });
    let mut reports = Vec::new();
    for &feature in features {
        eprintln!("== feature {}", feature.id());
        let (guard, head) = load_guard_named(&args.guard, model, path)?;
        let mut runner = Runner::new(model.clone(), guard, run_options(args, model, feature)?)?;
        let dir = root.join(feature.id());
        let r = run_suites(args, &mut runner, path, &dir, feature, &head, cancel)?;
        eprintln!("{}", headline(&r));
        if let Some(line) = r.xstest_line() {
            eprintln!("{line}");
        }
        let stop = r.meta.partial;
        reports.push((feature.id().to_string(), r));
        if stop {
            break;
        }
    }
    let refs: Vec<(String, &RunReport)> = reports.iter().map(|(l, r)| (l.clone(), r)).collect();
    let md = format!(
        "# Safety evals per feature (each under the app's system prompt for it)\n\ncommand: `{}`\n\nDeltas are against the first feature.\n\n{}",
        command_line(),
        compare_markdown(&refs)
    );
    std::fs::create_dir_all(&root)?;
    let p = root.join("features.md");
    std::fs::write(&p, md).with_context(|| format!("cannot write {}", p.display()))?;
    eprintln!("features side by side: {}", p.display());
    if reports.iter().any(|(_, r)| r.meta.partial) || reports.len() < features.len() {
        bail!(
            "the run stopped before every feature finished; run the same command again to resume"
        );
    }
    Ok(())
}

fn headline(r: &RunReport) -> String {
    let s = &r.summary;
    let mut parts = Vec::new();
    if let Some(h) = &s.harmful {
        parts.push(format!("harmful refused {}", h.overall.refused.display()));
    }
    if let Some(b) = &s.benign_edgy {
        parts.push(format!("edgy over-refused {}", b.overall.refused.display()));
    }
    if let Some(b) = &s.benign_everyday {
        parts.push(format!(
            "everyday over-refused {}",
            b.overall.refused.display()
        ));
    }
    if let Some(j) = &s.jailbreak {
        parts.push(format!("jailbreaks succeeded {}", j.success.display()));
    }
    if let Some(p) = &s.provocation {
        parts.push(format!("toxic under provocation {}", p.toxic.display()));
    }
    if let Some(m) = &s.multiturn {
        if let Some(h) = &m.harmful_after_benign {
            parts.push(format!(
                "multi-turn harmful refused {}",
                h.refused.display()
            ));
        }
        if let Some(b) = &m.benign_after_refusal {
            parts.push(format!(
                "multi-turn benign after a refusal over-refused {}",
                b.refused.display()
            ));
        }
    }
    if let Some(p) = &s.perplexity {
        parts.push(format!("perplexity {:.3}", p.perplexity));
    }
    if let Some(r) = &s.retrieval {
        parts.push(format!(
            "documents: answer in the top {} {}, in the top passage {}",
            r.k,
            r.recall_at_k.display(),
            r.citation_holds_answer.display()
        ));
    }
    parts.join("; ")
}

/// A one-line progress bar on stderr (redrawn on a terminal, a line per 25 items otherwise).
struct Bar {
    tty: bool,
    start: Instant,
    last_line: usize,
}

impl Bar {
    fn new() -> Bar {
        Bar {
            tty: std::io::stderr().is_terminal(),
            start: Instant::now(),
            last_line: usize::MAX,
        }
    }

    fn show(&mut self, what: &str, done: usize, total: usize) {
        let width = 30;
        let filled = (done * width)
            .checked_div(total)
            .unwrap_or(width)
            .min(width);
        let bar = format!("{}{}", "#".repeat(filled), "-".repeat(width - filled));
        let line = format!(
            "{what:>15} [{bar}] {done}/{total} {:.0} s",
            self.start.elapsed().as_secs_f64()
        );
        let mut e = std::io::stderr().lock();
        if self.tty {
            let _ = write!(e, "\r{line}\x1b[K");
            if done == total {
                let _ = writeln!(e);
            }
        } else if done == total || done / 25 != self.last_line {
            self.last_line = done / 25;
            let _ = writeln!(e, "{line}");
        }
        let _ = e.flush();
    }
}

/// The identity of a run directory: resuming with another model or settings would mix results.
fn check_run_identity(dir: &Path, ident: &serde_json::Value) -> Result<()> {
    let p = dir.join("run.json");
    match std::fs::read_to_string(&p) {
        Ok(text) => {
            let old: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is damaged", p.display()))?;
            if &old != ident {
                bail!(
                    "{} holds a run of another model or settings ({old}); use another --out or delete it",
                    dir.display()
                );
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::write(&p, serde_json::to_string_pretty(ident)?)
                .with_context(|| format!("cannot write {}", p.display()))?;
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", p.display())),
    }
    Ok(())
}

/// What a run of the suites gathers as it goes, for its report.
struct Gathered {
    /// Every item result of the run directory, those of earlier invocations included.
    done: Vec<ItemResult>,
    /// The run directory's results.jsonl, each new result appended as it comes.
    file: ResultsFile,
    skipped: Vec<Skipped>,
    /// The suites this invocation ran, in order.
    ran: Vec<String>,
    ppl: Option<Perplexity>,
    retrieval: Option<RetrievalReport>,
    /// Whether a suite did not finish (stopped, or unreadable).
    partial: bool,
}

/// How one suite's run ended.
enum SuiteEnd {
    Finished,
    /// Its file could not be read: named in the report, and the other suites still run.
    Unreadable,
    /// Stopped by Ctrl-C: the run ends here.
    Cancelled,
}

fn run_suites(
    args: &EvalArgs,
    runner: &mut Runner,
    model_path: &Path,
    dir: &Path,
    feature: Feature,
    head: &HeadId,
    cancel: &CancelHandle,
) -> Result<RunReport> {
    let suites = SuiteName::parse_list(&args.suite)?;
    let mut src = SuiteSource::new(suites_dir(args)?);
    src.jailbreak_sample = args.jailbreak_sample;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let model = runner.model().clone();
    check_run_identity(
        dir,
        &json!({
            "model": model.name(),
            "model_file": model_path.file_name().map(|f| f.to_string_lossy().to_string()),
            "model_bytes": model.file_bytes(),
            "max_tokens": args.max_tokens,
            "n_ctx": runner.options().n_ctx,
            "jailbreak_sample": args.jailbreak_sample,
            "feature": feature.id(),
            "guard_head_sha256": head.sha256,
        }),
    )?;
    let start = Instant::now();
    let results_path = dir.join("results.jsonl");
    let done = resume(&results_path)?;
    let already_done = done.len();
    let mut g = Gathered {
        done,
        file: ResultsFile::append(&results_path)?,
        skipped: Vec::new(),
        ran: Vec::new(),
        ppl: None,
        retrieval: None,
        partial: false,
    };
    let mut bar = Bar::new();
    for suite in suites {
        g.ran.push(suite.id().to_string());
        let end = match suite {
            SuiteName::Perplexity => {
                match measure_perplexity(args, runner, &src, dir, cancel, &mut bar)? {
                    Some(p) => {
                        g.ppl = Some(p);
                        SuiteEnd::Finished
                    }
                    None => SuiteEnd::Cancelled,
                }
            }
            SuiteName::Retrieval => {
                g.retrieval = Some(measure_retrieval(&src, dir)?);
                SuiteEnd::Finished
            }
            _ => run_item_suite(args, runner, &src, suite, &mut g, cancel, &mut bar)?,
        };
        match end {
            SuiteEnd::Finished => {}
            SuiteEnd::Unreadable => g.partial = true,
            SuiteEnd::Cancelled => {
                g.partial = true;
                break;
            }
        }
    }
    // Only the suites asked for this time are summarised (the file may hold more).
    let ran = &g.ran;
    g.done.retain(|r| ran.iter().any(|s| s == r.suite.id()));
    let report = RunReport {
        meta: Meta {
            model: model.name(),
            model_file: model_path.display().to_string(),
            quantization: model.quantization().to_string(),
            suites: g.ran,
            feature: feature.id().to_string(),
            adapter: runner
                .options()
                .adapter
                .as_ref()
                .map(|a| a.adapter.name().to_string()),
            max_tokens: args.max_tokens,
            n_ctx: runner.options().n_ctx,
            limit: args.limit,
            command: command_line(),
            wall_s: start.elapsed().as_secs_f64(),
            peak_rss_mb: super::peak_rss_mb(),
            partial: g.partial,
            notes: run_notes(args, feature, head),
        },
        summary: Summary {
            retrieval: g.retrieval,
            ..summarise(&g.done, g.ppl, g.skipped)
        },
        judges: judges()?,
    };
    report.write(dir, "report")?;
    // Stored once, by the invocation that finished it (a rerun that only re-reports does not
    // store a copy).
    if !args.no_history && !report.meta.partial && g.done.len() > already_done {
        store_report(args, &report)?;
    }
    Ok(report)
}

/// The results an earlier invocation left in `results_path`, saying what it resumes and which
/// lines it could not read.
fn resume(results_path: &Path) -> Result<Vec<ItemResult>> {
    let loaded = ResultsFile::load(results_path)?;
    if !loaded.bad_lines.is_empty() {
        eprintln!(
            "{}: lines {:?} could not be read (cut short?); their items run again",
            results_path.display(),
            loaded.bad_lines
        );
    }
    if !loaded.results.is_empty() {
        eprintln!(
            "resuming: {} items already done in {}",
            loaded.results.len(),
            results_path.display()
        );
    }
    Ok(loaded.results)
}

/// The perplexity suite: reused from the run directory when the same measurement is there,
/// else measured and saved. `None` when Ctrl-C stopped it.
fn measure_perplexity(
    args: &EvalArgs,
    runner: &mut Runner,
    src: &SuiteSource,
    dir: &Path,
    cancel: &CancelHandle,
    bar: &mut Bar,
) -> Result<Option<Perplexity>> {
    let tokens = args.limit.map_or(args.perplexity_tokens, |l| {
        (l * 32).min(args.perplexity_tokens)
    });
    // Named by its token budget (and a cache other than f16), so a resumed run reuses only
    // the same measurement.
    let kv = args.kv.kv_type;
    let p = match kv {
        KvType::F16 => dir.join(format!("perplexity-{tokens}.json")),
        _ => dir.join(format!("perplexity-{tokens}-{kv}.json")),
    };
    if let Some(old) = std::fs::read_to_string(&p)
        .ok()
        .and_then(|t| serde_json::from_str::<Perplexity>(&t).ok())
    {
        return Ok(Some(old));
    }
    let mut session = runner.new_session()?;
    let text = src.perplexity_text()?;
    match perplexity(&mut session, &text, 512, tokens, cancel, &mut |d, t| {
        bar.show("perplexity", d, t)
    }) {
        Ok(v) => {
            std::fs::write(&p, serde_json::to_string_pretty(&v)?)?;
            Ok(Some(v))
        }
        Err(EvalError::Cancelled) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The retrieval suite (ask your documents): the eval's documents indexed with the sentence
/// encoder the app uses and each question searched, top 5; reused from the run directory when
/// it is there.
fn measure_retrieval(src: &SuiteSource, dir: &Path) -> Result<RetrievalReport> {
    let saved = dir.join("retrieval.json");
    if let Some(old) = std::fs::read_to_string(&saved)
        .ok()
        .and_then(|t| serde_json::from_str::<RetrievalReport>(&t).ok())
    {
        return Ok(old);
    }
    let path = embedder_path().ok_or(DocsError::NoEmbedder)?;
    let encoder = Encoder::load(&path)
        .with_context(|| format!("cannot load the sentence encoder {}", path.display()))?;
    eprintln!("retrieval: indexing the eval's documents and searching each question …");
    let report = run_retrieval_eval(&src.dir.join("retrieval"), &encoder, RETRIEVAL_K)?;
    std::fs::write(&saved, serde_json::to_string_pretty(&report)?)?;
    Ok(report)
}

/// Passages read per question in the retrieval suite: the "5" of recall@5.
const RETRIEVAL_K: usize = 5;

/// One suite of items: each item not yet in `g.done` answered, judged and appended to its file.
fn run_item_suite(
    args: &EvalArgs,
    runner: &mut Runner,
    src: &SuiteSource,
    suite: SuiteName,
    g: &mut Gathered,
    cancel: &CancelHandle,
    bar: &mut Bar,
) -> Result<SuiteEnd> {
    let (mut items, bad) = match src.load(suite) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("suite {}: {e}; skipped", suite.id());
            g.skipped.push(Skipped {
                file: suite.id().to_string(),
                line: 0,
                reason: e.to_string(),
            });
            return Ok(SuiteEnd::Unreadable);
        }
    };
    for b in &bad {
        eprintln!("skipped {b}");
    }
    g.skipped.extend(bad);
    if let Some(l) = args.limit {
        items = kostant_evals::suite::sample(suite, items, l);
    }
    let mut answer = |it: &kostant_evals::Item, c: &CancelHandle| runner.run_item(suite, it, c);
    let r = run_suite(
        &mut answer,
        suite,
        &items,
        &mut g.file,
        &mut g.done,
        cancel,
        &mut |p: Progress<'_>| bar.show(p.suite.id(), p.done, p.total),
    );
    match r {
        Ok(()) => Ok(SuiteEnd::Finished),
        Err(EvalError::Cancelled) => Ok(SuiteEnd::Cancelled),
        Err(e) => Err(e.into()),
    }
}

/// The report's notes: how the run judged and framed what it sent, and what it left out.
fn run_notes(args: &EvalArgs, feature: Feature, head: &HeadId) -> Vec<String> {
    let mut notes = vec![
        "judges run on this device: rules over the reply text plus the guard's verdict (kostant-evals judge.rs)".to_string(),
        "provocation dialogues are sent as one user message (their turns joined by newlines)".to_string(),
        "multi-turn conversations send their earlier turns as chat history through the chat template; an exchange the guard refused leaves the model's context, as in the chat and the app; the guard reads the last user message".to_string(),
        format!("system prompt: the app's {} feature (kostant_app::features)", feature.id()),
        format!("guard: {head}"),
    ];
    if args.kv.kv_type != KvType::F16 {
        notes.push(format!("kv cache: {}", args.kv.kv_type));
    }
    if let Some(l) = args.limit {
        notes.push(format!("at most {l} items per suite: a fixed hashed sample (kostant_evals::suite::sample), not the whole suite"));
    }
    notes.push(format!(
        "the guard reads with {} (the chat model's file only when they are the same file)",
        args.guard
            .guard_model
            .as_ref()
            .map_or("the default model".to_string(), |p| p.display().to_string())
    ));
    notes
}

/// Stores a finished run's report in the encrypted history (`kostant history evals`).
fn store_report(args: &EvalArgs, report: &RunReport) -> Result<()> {
    let data = crate::history::data_dir(args.data_dir.as_deref())?;
    let mut store = crate::history::open_default(&data)?;
    let id = store.save_eval_run(&report.to_json()?)?;
    eprintln!("report stored in the encrypted history as eval run {id} (kostant history evals)");
    Ok(())
}

/// `--prompts FILE --out FILE`: every good line answered and judged; a bad line is reported
/// with its number and the run goes on. Ids already in the output are skipped (resume).
fn run_prompts(
    runner: &mut Runner,
    input: &Path,
    out: &Path,
    limit: Option<usize>,
    cancel: &CancelHandle,
) -> Result<()> {
    let file =
        std::fs::File::open(input).with_context(|| format!("cannot open {}", input.display()))?;
    let done = answered_ids(out);
    let mut w = open_for_append(out)?;
    let lines: Vec<String> = std::io::BufReader::new(file)
        .lines()
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("cannot read {}", input.display()))?;
    let total = lines.iter().filter(|l| !l.trim().is_empty()).count();
    let total = limit.map_or(total, |l| l.min(total));
    let (mut n, mut bad, mut ran) = (0usize, 0usize, 0usize);
    let mut bar = Bar::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if n == total {
            break;
        }
        n += 1;
        let Some((id, prompt)) = prompt_line(input, i + 1, line) else {
            bad += 1;
            continue;
        };
        if done.contains(&id.to_string()) {
            continue;
        }
        bar.show("prompts", n - 1, total);
        let a = match runner.answer(&prompt, cancel) {
            Ok(a) => a,
            Err(EvalError::Cancelled) => {
                bail!("stopped; {ran} prompts answered, run again to resume")
            }
            Err(e) => return Err(e.into()),
        };
        let mut o = serde_json::to_value(&a)?;
        if let Some(m) = o.as_object_mut() {
            m.insert("id".into(), id.clone());
            m.insert("prompt".into(), prompt.into());
            m.insert("toxic".into(), a.toxicity.toxic.into());
        }
        writeln!(w, "{}", serde_json::to_string(&o)?)?;
        w.flush()?;
        ran += 1;
    }
    bar.show("prompts", total, total);
    eprintln!(
        "{ran} prompts answered into {}; {bad} bad lines skipped",
        out.display()
    );
    Ok(())
}

/// The ids already answered in `--prompts`' output (none when it does not exist yet).
fn answered_ids(out: &Path) -> std::collections::HashSet<String> {
    let mut done = std::collections::HashSet::new();
    if let Ok(text) = std::fs::read_to_string(out) {
        for line in text.lines() {
            if let Some(id) = serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|v| v.get("id").cloned())
            {
                done.insert(id.to_string());
            }
        }
    }
    done
}

/// `--prompts`' output opened for appending, a line cut short by a kill ended first.
fn open_for_append(out: &Path) -> Result<std::fs::File> {
    let needs_newline = std::fs::read(out)
        .map(|b| b.last().is_some_and(|&c| c != b'\n'))
        .unwrap_or(false);
    let mut w = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out)
        .with_context(|| format!("cannot write {}", out.display()))?;
    if needs_newline {
        writeln!(w)?;
    }
    Ok(w)
}

/// Line `number` of the `--prompts` file as its id and prompt; `None`, said on stderr, when it
/// is not JSON or lacks either.
fn prompt_line(input: &Path, number: usize, line: &str) -> Option<(serde_json::Value, String)> {
    let v: serde_json::Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => {
            eprintln!(
                "\n{} line {number}: not JSON ({e}); skipped",
                input.display()
            );
            return None;
        }
    };
    let id = v.get("id").cloned().unwrap_or(serde_json::Value::Null);
    let prompt = v
        .get("prompt")
        .and_then(|p| p.as_str())
        .filter(|p| !p.trim().is_empty());
    let Some(prompt) = prompt.filter(|_| !id.is_null()) else {
        eprintln!(
            "\n{} line {number}: needs an \"id\" and a non-empty string \"prompt\"; skipped",
            input.display()
        );
        return None;
    };
    Some((id, prompt.to_string()))
}

/// `--compare Q8_0,Q4_0 --model BASE`: the base model and each requantization, side by side.
fn run_compare(args: &EvalArgs, list: &str, feature: Feature, cancel: &CancelHandle) -> Result<()> {
    let base = crate::model_path::resolve(args.model.model.as_deref())?;
    let types: Vec<_> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(super::quantize::parse_type)
        .collect::<Result<_>>()?;
    let root = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("eval-runs").join(format!(
            "compare-{}",
            base.file_stem().unwrap_or_default().to_string_lossy()
        ))
    });
    std::fs::create_dir_all(&root)?;
    let base_model = load_model(&args.model)?;
    let mut models: Vec<(String, PathBuf)> =
        vec![(format!("base {}", base_model.quantization()), base.clone())];
    for ty in types {
        let p = root.join(format!("{}.gguf", ty.name()));
        if !p.is_file() {
            eprintln!("requantizing {} to {} ...", base.display(), ty.name());
            kostant_engine::gguf::requantize::requantize(&base, &p, ty)?;
            super::quantize::verify(&p)?;
        }
        models.push((ty.name().to_string(), p));
    }
    drop(base_model);
    let mut reports = Vec::new();
    for (label, path) in &models {
        eprintln!("== {label}: {}", path.display());
        let model: Arc<Model> =
            Model::load(path).with_context(|| format!("cannot load {}", path.display()))?;
        // The guard keeps reading with its own model, as a build that requantizes only the chat
        // model would ship it.
        let (guard, head) = load_guard_named(&args.guard, &model, path)?;
        let opts = run_options(args, &model, feature)?;
        let mut runner = Runner::new(model, guard, opts)?;
        let dir = root.join(label.replace(' ', "-"));
        let r = run_suites(args, &mut runner, path, &dir, feature, &head, cancel)?;
        eprintln!("{}", headline(&r));
        let stop = r.meta.partial;
        reports.push((label.clone(), r));
        if stop {
            break;
        }
    }
    let refs: Vec<(String, &RunReport)> = reports.iter().map(|(l, r)| (l.clone(), r)).collect();
    let md = format!(
        "# Safety evals across quantizations\n\ncommand: `{}`\n\n{}",
        command_line(),
        compare_markdown(&refs)
    );
    let p = root.join("compare.md");
    std::fs::write(&p, md).with_context(|| format!("cannot write {}", p.display()))?;
    eprintln!("comparison: {}", p.display());
    if reports.iter().any(|(_, r)| r.meta.partial) || reports.len() < models.len() {
        bail!("the comparison stopped early; run the same command again to resume");
    }
    Ok(())
}
