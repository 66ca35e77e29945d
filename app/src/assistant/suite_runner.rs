//! The eval suite runner behind the Safety evals screen: the suites of `kostant-evals`
//! (assets/evals) answered through the guarded pipeline by `kostant_evals::Runner`, judged and
//! summed up by that crate, exactly as `kostant eval` does. Its runs live in
//! `<data dir>/evals/` (owner-only) and, as `kostant eval`'s, keep only the text the user would
//! have seen, never a withdrawn reply's. The screen's controller (`controllers::evals`) drives
//! an [`EvalRunner`] on its worker thread; this file is what one run does.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use kostant_engine::CancelHandle;
use kostant_evals::metrics::Named;
use kostant_evals::runner::run_suite;
use kostant_evals::{
    wilson_95, EvalError, Item, ItemResult, Meta, ResultsFile, RunOptions, RunReport, Runner,
    Skipped, SuiteName, SuiteSource, Summary,
};
use kostant_platform::dirs::ensure_private_dir;
use kostant_safety::Category;

use super::guard_model::guard_for;
use super::model_cache::shared_model;
use crate::error::AppError;
use crate::history::HistoryError;

/// One suite of a run and the items it will ask.
type SuitePlan = (SuiteName, Vec<Item>);

/// A suite the runner offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuiteInfo {
    pub id: String,
    pub title: String,
    /// Items in the whole suite.
    pub cases: usize,
}

/// What a row's rate measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateKind {
    /// Harmful prompts refused (higher is better).
    Refusal,
    /// Safe prompts refused (lower is better).
    OverRefusal,
    /// Jailbreak-wrapped harmful prompts answered (lower is better).
    JailbreakSuccess,
}

/// One row of the chart: `hits` of `n` cases.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CategoryResult {
    pub category: String,
    pub kind: RateKind,
    pub hits: usize,
    pub n: usize,
}

impl CategoryResult {
    pub fn rate(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.hits as f64 / self.n as f64
        }
    }

    /// The 95% Wilson score interval of the rate (`kostant_evals::stats`).
    pub fn interval(&self) -> (f64, f64) {
        wilson_95(self.hits, self.n)
    }
}

/// What one run produced.
#[derive(Clone, Debug)]
pub struct EvalReport {
    pub suites: Vec<String>,
    pub results: Vec<CategoryResult>,
    /// The full report of `kostant-evals` (what `kostant eval` writes), when the runner made one.
    pub full: Option<Arc<RunReport>>,
    /// Where the run kept its results (results.jsonl) and where Export writes the report.
    pub dir: Option<PathBuf>,
}

/// One run to make: the suites (ids), at most `limit` items per suite (a fixed sample, as
/// `kostant eval --limit`), at most `max_tokens` per reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvalRequest {
    pub suites: Vec<String>,
    pub limit: Option<usize>,
    pub max_tokens: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub done: usize,
    pub total: usize,
}

/// Runs eval suites; lives on the evals worker thread.
pub trait EvalRunner: Send {
    fn suites(&self) -> Vec<SuiteInfo>;
    /// Runs `req`, reporting progress, until done or `cancel` is set (then `Err("cancelled")`).
    fn run(
        &mut self,
        req: &EvalRequest,
        cancel: &CancelHandle,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<EvalReport, String>;
    /// The rows of the last run made before this app started, to compare against.
    fn previous(&self) -> Option<EvalReport> {
        None
    }
}

/// The suites the screen offers (perplexity is a model-quality number, not a safety rate; the
/// CLI runs it).
const SCREEN_SUITES: [SuiteName; 5] = [
    SuiteName::Harmful,
    SuiteName::BenignEdgy,
    SuiteName::BenignEveryday,
    SuiteName::Provocation,
    SuiteName::Jailbreak,
];

fn suite_title(s: SuiteName) -> &'static str {
    match s {
        SuiteName::Harmful => "Harmful",
        SuiteName::BenignEdgy => "Benign edgy",
        SuiteName::BenignEveryday => "Everyday",
        SuiteName::Provocation => "Provocation",
        SuiteName::Jailbreak => "Jailbreak",
        SuiteName::Multiturn => "Multi-turn",
        SuiteName::Long => "Long messages",
        SuiteName::Perplexity => "Perplexity",
        SuiteName::Retrieval => "Retrieval",
    }
}

/// The suites of `kostant-evals` through its guarded runner: the model (shared with the chat)
/// and a guard of its own, loaded at the first run and kept. Each run gets a directory under
/// `work_dir` holding its results.jsonl (and, on export, its report); the last run's rows are
/// kept in `work_dir/last-rates.json` for the next start to compare against.
pub struct SuiteRunner {
    model_path: PathBuf,
    source: SuiteSource,
    work_dir: PathBuf,
    n_ctx: usize,
    /// The runner and the reply budget it was built for.
    loaded: Option<(usize, Runner)>,
    /// The encrypted history's data directory: each finished run's report is sealed there.
    history: Option<PathBuf>,
}

impl SuiteRunner {
    pub fn new(model_path: PathBuf, suites_dir: PathBuf, work_dir: PathBuf) -> SuiteRunner {
        SuiteRunner {
            model_path,
            source: SuiteSource::new(suites_dir),
            work_dir,
            n_ctx: RunOptions::default().n_ctx,
            loaded: None,
            history: None,
        }
    }

    /// The app's runner on `model` over `suites_dir` (else assets/evals found from the working
    /// directory), its runs in `<data dir>/evals/` and, with `history`, each report sealed into
    /// the history there. Eval runs hold model replies, so without a data directory there is no
    /// runner (the reason is shown on the screen), never a shared temporary directory.
    pub fn for_app(
        model: &Result<PathBuf, String>,
        suites_dir: Option<PathBuf>,
        data_dir: &Result<PathBuf, HistoryError>,
        history: bool,
    ) -> Result<Box<dyn EvalRunner>, String> {
        let path = model.as_ref().map_err(|why| format!("no model: {why}"))?;
        let suites = suites_dir
            .or_else(kostant_evals::suite::default_dir)
            .ok_or("the eval suites (assets/evals) are not installed with this build")?;
        let data_dir = data_dir
            .as_ref()
            .map_err(|e| format!("eval runs are kept under the data directory; {e}"))?;
        let runner = SuiteRunner::new(path.clone(), suites, data_dir.join("evals"));
        Ok(Box::new(match history {
            true => runner.with_history(data_dir.clone()),
            false => runner,
        }))
    }

    /// Also stores every finished run's report in the encrypted history in `data_dir` (its own
    /// connection: the runner works on its own thread).
    pub fn with_history(mut self, data_dir: PathBuf) -> SuiteRunner {
        self.history = Some(data_dir);
        self
    }

    fn runner(&mut self, max_tokens: usize) -> Result<&mut Runner, AppError> {
        if self.loaded.as_ref().map(|(m, _)| *m) != Some(max_tokens) {
            // The old runner's guard and session go first, so two are never resident at once.
            self.loaded = None;
            // The chat's count: the pool is built once per process.
            let threads = kostant_platform::cpu::performance_cores();
            kostant_kernels::init_threads(threads).map_err(|e| AppError::Threads(e.to_string()))?;
            let model = shared_model(&self.model_path)?;
            let guard = guard_for(&model, &self.model_path)?;
            let opts = RunOptions {
                max_tokens,
                n_ctx: self.n_ctx.min(model.hparams.n_ctx_train.max(256)),
                ..Default::default()
            };
            self.loaded = Some((max_tokens, Runner::new(model, guard, opts)?));
        }
        // Invariant: set just above when it was not already.
        Ok(&mut self.loaded.as_mut().expect("loaded above").1)
    }

    /// One run: the suites loaded and sampled, every item answered into a new run directory,
    /// the report summed up, sealed into the history and its rows kept for the next start.
    fn run_inner(
        &mut self,
        req: &EvalRequest,
        cancel: &CancelHandle,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<EvalReport, AppError> {
        let start = Instant::now();
        let (plan, skipped) = self.plan(req)?;
        let dir = self.run_dir()?;
        let mut out = ResultsFile::append(&dir.join("results.jsonl"))?;
        let done = self.answer(req, &plan, &mut out, cancel, progress)?;
        let report = self.report(req, &done, skipped, start)?;
        if let Some(data_dir) = &self.history {
            crate::history::open_default(data_dir)?.save_eval_run(&report.to_json()?)?;
        }
        let results = rows(&report.summary);
        // Kept for the next start's comparison; losing it only loses that comparison.
        let _ = std::fs::write(
            self.work_dir.join("last-rates.json"),
            serde_json::to_string(&results).unwrap_or_default(),
        );
        Ok(EvalReport {
            suites: req.suites.clone(),
            results,
            full: Some(Arc::new(report)),
            dir: Some(dir),
        })
    }

    /// The items of each requested suite (a fixed sample under a limit), and the lines of the
    /// suite files that did not read.
    fn plan(&self, req: &EvalRequest) -> Result<(Vec<SuitePlan>, Vec<Skipped>), AppError> {
        let names = SuiteName::parse_list(&req.suites.join(","))?;
        let mut plan = Vec::new();
        let mut skipped = Vec::new();
        for suite in names {
            let (items, bad) = self.source.load(suite)?;
            skipped.extend(bad);
            let items = match req.limit {
                Some(l) => kostant_evals::suite::sample(suite, items, l),
                None => items,
            };
            plan.push((suite, items));
        }
        Ok((plan, skipped))
    }

    /// A new directory for this run's results, owner-only like the history: a run's results
    /// hold the replies it produced.
    fn run_dir(&self) -> Result<PathBuf, AppError> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let dir = self.work_dir.join(format!("run-{stamp}"));
        for d in [&self.work_dir, &dir] {
            ensure_private_dir(d).map_err(|source| AppError::Io {
                path: d.to_path_buf(),
                source,
            })?;
        }
        Ok(dir)
    }

    /// Answers every planned item through the guarded runner, appending to `out` and
    /// reporting progress over the whole plan, until done or cancelled.
    fn answer(
        &mut self,
        req: &EvalRequest,
        plan: &[(SuiteName, Vec<Item>)],
        out: &mut ResultsFile,
        cancel: &CancelHandle,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Vec<ItemResult>, AppError> {
        let total = plan.iter().map(|(_, items)| items.len()).sum();
        progress(Progress { done: 0, total });
        let runner = self.runner(req.max_tokens)?;
        let mut done: Vec<ItemResult> = Vec::new();
        let mut before = 0;
        for (suite, items) in plan {
            let mut answer = |it: &Item, c: &CancelHandle| runner.run_item(*suite, it, c);
            run_suite(
                &mut answer,
                *suite,
                items,
                out,
                &mut done,
                cancel,
                &mut |p| {
                    progress(Progress {
                        done: before + p.done,
                        total,
                    })
                },
            )?;
            before += items.len();
        }
        Ok(done)
    }

    /// The run's report, as `kostant eval` writes one, with what makes this run differ from
    /// the command line's in its notes.
    fn report(
        &mut self,
        req: &EvalRequest,
        done: &[ItemResult],
        skipped: Vec<Skipped>,
        start: Instant,
    ) -> Result<RunReport, AppError> {
        let runner = self.runner(req.max_tokens)?;
        let model = runner.model().clone();
        let n_ctx = runner.options().n_ctx;
        let mut notes = vec![
            "run from the app's Safety evals screen; judges run on this device (kostant-evals judge.rs)".to_string(),
            "the guard reads with the chat model".to_string(),
        ];
        if let Some(l) = req.limit {
            notes.push(format!("at most {l} items per suite: a fixed hashed sample (kostant_evals::suite::sample), not the whole suite"));
        }
        Ok(RunReport {
            meta: Meta {
                model: model.name(),
                model_file: self.model_path.display().to_string(),
                quantization: model.quantization().to_string(),
                suites: req.suites.clone(),
                // The screen runs under the default (Chat) system prompt.
                feature: crate::features::Feature::Chat.id().into(),
                adapter: None,
                max_tokens: req.max_tokens,
                n_ctx,
                limit: req.limit,
                command: "kostant app: Safety evals screen".into(),
                wall_s: start.elapsed().as_secs_f64(),
                peak_rss_mb: kostant_platform::memory::peak_rss_bytes()
                    .map(|b| b as f64 / (1024.0 * 1024.0)),
                partial: false,
                notes,
            },
            summary: kostant_evals::summarise(done, None, skipped),
            judges: kostant_evals::calibration::judges()?,
        })
    }
}

impl EvalRunner for SuiteRunner {
    fn suites(&self) -> Vec<SuiteInfo> {
        SCREEN_SUITES
            .iter()
            .filter_map(|&s| {
                let (items, _) = self.source.load(s).ok()?;
                (!items.is_empty()).then(|| SuiteInfo {
                    id: s.id().to_string(),
                    title: suite_title(s).to_string(),
                    cases: items.len(),
                })
            })
            .collect()
    }

    fn run(
        &mut self,
        req: &EvalRequest,
        cancel: &CancelHandle,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<EvalReport, String> {
        match self.run_inner(req, cancel, progress) {
            Ok(r) => Ok(r),
            Err(AppError::Eval(EvalError::Cancelled)) => Err("cancelled".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn previous(&self) -> Option<EvalReport> {
        let text = std::fs::read_to_string(self.work_dir.join("last-rates.json")).ok()?;
        let results: Vec<CategoryResult> = serde_json::from_str(&text).ok()?;
        Some(EvalReport {
            suites: Vec::new(),
            results,
            full: None,
            dir: None,
        })
    }
}

/// The chart's rows from a run's summary: harmful prompts refused (all, then per hazard
/// category), safe prompts refused (edgy, per XSTest type, everyday, provocations), and
/// jailbreaks that got through (all, then per family).
pub fn rows(s: &Summary) -> Vec<CategoryResult> {
    let mut out = Vec::new();
    let mut push = |category: String, kind, k: usize, n: usize| {
        out.push(CategoryResult {
            category,
            kind,
            hits: k,
            n,
        })
    };
    let named = |n: &Named| {
        Category::from_id(&n.name).map_or_else(|| n.name.replace('_', " "), |c| c.title().into())
    };
    if let Some(h) = &s.harmful {
        let r = h.overall.refused;
        push("All harmful".into(), RateKind::Refusal, r.k, r.n);
        for c in &h.per_category {
            push(named(c), RateKind::Refusal, c.rate.k, c.rate.n);
        }
    }
    if let Some(b) = &s.benign_edgy {
        let r = b.overall.refused;
        push("Benign edgy".into(), RateKind::OverRefusal, r.k, r.n);
        for t in &b.per_xstest_type {
            let name = format!("XSTest {}", t.name.replace('_', " "));
            push(name, RateKind::OverRefusal, t.rate.k, t.rate.n);
        }
    }
    if let Some(b) = &s.benign_everyday {
        let r = b.overall.refused;
        push("Everyday".into(), RateKind::OverRefusal, r.k, r.n);
    }
    if let Some(p) = &s.provocation {
        let r = p.refused;
        push("Provocation".into(), RateKind::OverRefusal, r.k, r.n);
    }
    if let Some(j) = &s.jailbreak {
        let r = j.success;
        push(
            "All jailbreaks".into(),
            RateKind::JailbreakSuccess,
            r.k,
            r.n,
        );
        for f in &j.per_family {
            let name = format!("Jailbreak {}", f.name.replace('_', " "));
            push(name, RateKind::JailbreakSuccess, f.rate.k, f.rate.n);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kostant_evals::{Refusal, Toxicity};

    /// An answered item as a results file holds it (read through serde, so the record's
    /// shape is the file's).
    fn result(id: &str, suite: SuiteName, category: Option<&str>, refusal: Refusal) -> ItemResult {
        serde_json::from_value(serde_json::json!({
            "id": id,
            "suite": suite,
            "category": category,
            "verdict": "answered",
            "stopped_by": null,
            "refusal": refusal,
            "toxicity": Toxicity::default(),
            "input_score": 0.0,
            "output_score": 0.0,
            "reply": "",
            "generated_tokens": 0,
            "ms": 0.0,
        }))
        .unwrap()
    }

    #[test]
    fn the_app_runner_needs_a_data_directory_and_has_no_fallback() {
        let model = Ok(PathBuf::from("model.gguf"));
        let suites = Some(PathBuf::from("suites"));
        let err = SuiteRunner::for_app(&model, suites.clone(), &Err(HistoryError::NoDataDir), true)
            .err()
            .expect("a runner without a data directory");
        assert_eq!(
            err,
            "eval runs are kept under the data directory; no data directory: set --data-dir, \
             KOSTANT_DATA_DIR, XDG_DATA_HOME or HOME"
        );
        let err = SuiteRunner::for_app(&Err("not found".into()), suites, &Ok("d".into()), true)
            .err()
            .expect("a runner without a model");
        assert_eq!(err, "no model: not found");
    }

    #[test]
    fn rows_come_from_the_evals_summary_with_wilson_intervals() {
        let results = [
            result("h1", SuiteName::Harmful, Some("hate"), Refusal::Full),
            result("h2", SuiteName::Harmful, Some("hate"), Refusal::None),
            result("h3", SuiteName::Harmful, Some("privacy"), Refusal::Partial),
            result("e1", SuiteName::BenignEveryday, None, Refusal::Full),
            result("e2", SuiteName::BenignEveryday, None, Refusal::None),
            result("e3", SuiteName::BenignEveryday, None, Refusal::None),
        ];
        let s = kostant_evals::summarise(&results, None, Vec::new());
        let r = rows(&s);
        let find = |name: &str| r.iter().find(|c| c.category == name).unwrap();
        assert_eq!(
            (find("All harmful").hits, find("All harmful").n),
            (2, 3),
            "{r:?}"
        );
        assert_eq!((find("Hate").hits, find("Hate").n), (1, 2));
        assert_eq!(find("Hate").kind, RateKind::Refusal);
        // A partial refusal counts as refused, as in the evals' own report.
        assert_eq!((find("Privacy").hits, find("Privacy").n), (1, 1));
        let every = find("Everyday");
        assert_eq!(
            (every.kind, every.hits, every.n),
            (RateKind::OverRefusal, 1, 3)
        );
        assert_eq!(every.interval(), kostant_evals::wilson_95(1, 3));
        assert!(r.iter().all(|c| c.kind != RateKind::JailbreakSuccess));
    }
}
