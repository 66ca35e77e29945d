//! The testers' Safety evals screen: pick suites, run them off the UI thread with progress and
//! cancel, see per-category refusal and over-refusal rates with 95% Wilson intervals, compare
//! with the previous run, export the report.
//!
//! The controller talks to an [`EvalRunner`] on its worker thread. The app's runner is
//! [`SuiteRunner`]: the suites of `kostant-evals` (assets/evals) answered through the guarded
//! pipeline by `kostant_evals::Runner`, judged and summed up by that crate, exactly as
//! `kostant eval` does; this file only picks, caps, reports progress and shapes the bars. Its
//! runs live in `<data dir>/evals/` (owner-only) and, as `kostant eval`'s, keep only the text the
//! user would have seen, never a withdrawn reply's.

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use kostant_engine::CancelHandle;
use kostant_evals::metrics::Named;
use kostant_evals::runner::run_suite;
use kostant_evals::{
    wilson_95, EvalError, ItemResult, Meta, ResultsFile, RunOptions, RunReport, Runner, SuiteName,
    SuiteSource, Summary,
};
use kostant_platform::dirs::ensure_private_dir;
use kostant_safety::Category;

use super::{AppError, Notify};
use crate::history::HistoryError;

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

impl RateKind {
    pub fn label(self) -> &'static str {
        match self {
            RateKind::Refusal => "refusal",
            RateKind::OverRefusal => "over-refusal",
            RateKind::JailbreakSuccess => "jailbreak success",
        }
    }
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

/// How big a run is: the quick run testers make on a phone, or whole suites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvalSettings {
    /// Items per suite in a quick run.
    pub quick_limit: usize,
    /// Most tokens per reply (`kostant eval --max-tokens`).
    pub max_tokens: usize,
    /// Start with the quick run selected.
    pub quick: bool,
}

impl Default for EvalSettings {
    fn default() -> Self {
        EvalSettings {
            quick_limit: 20,
            max_tokens: 64,
            quick: true,
        }
    }
}

/// The screen's state.
#[derive(Clone, Debug, PartialEq)]
pub enum EvalState {
    /// No runner in this build (no model, or no suites).
    Unavailable,
    Idle,
    Running(Progress),
    Finished,
    Cancelled,
    Failed(String),
}

enum Msg {
    Progress(Progress),
    Done(Result<EvalReport, String>),
}

pub struct EvalsController {
    suites: Vec<SuiteInfo>,
    selected: Vec<bool>,
    settings: EvalSettings,
    state: EvalState,
    jobs: Option<mpsc::Sender<EvalRequest>>,
    events: Option<mpsc::Receiver<Msg>>,
    worker: Option<JoinHandle<()>>,
    cancel: CancelHandle,
    latest: Option<EvalReport>,
    previous: Option<EvalReport>,
    /// Why there is no runner, for the screen.
    unavailable: String,
}

impl EvalsController {
    /// Without a runner the screen says why (`why`).
    pub fn new(
        runner: Result<Box<dyn EvalRunner>, String>,
        settings: EvalSettings,
        notify: Notify,
    ) -> EvalsController {
        let cancel = CancelHandle::new();
        let mut c = EvalsController {
            suites: Vec::new(),
            selected: Vec::new(),
            settings,
            state: EvalState::Unavailable,
            jobs: None,
            events: None,
            worker: None,
            cancel: cancel.clone(),
            latest: None,
            previous: None,
            unavailable: String::new(),
        };
        let mut runner = match runner {
            Ok(r) => r,
            Err(why) => {
                c.unavailable = why;
                return c;
            }
        };
        c.suites = runner.suites();
        c.previous = runner.previous();
        // The first suite alone: a full selection is a long run on a phone.
        c.selected = (0..c.suites.len()).map(|i| i == 0).collect();
        let (job_tx, job_rx) = mpsc::channel::<EvalRequest>();
        let (ev_tx, ev_rx) = mpsc::channel();
        let worker = std::thread::Builder::new()
            .name("kostant-evals".into())
            .spawn(move || {
                for req in job_rx {
                    let tx = ev_tx.clone();
                    let n = notify.clone();
                    let result = runner.run(&req, &cancel, &mut |p| {
                        // The controller being gone means the app is closing.
                        let _ = tx.send(Msg::Progress(p));
                        n();
                    });
                    let _ = ev_tx.send(Msg::Done(result));
                    notify();
                }
            });
        match worker {
            Ok(w) => {
                c.worker = Some(w);
                c.jobs = Some(job_tx);
                c.events = Some(ev_rx);
                c.state = EvalState::Idle;
            }
            Err(e) => c.unavailable = format!("cannot start a thread: {e}"),
        }
        c
    }

    pub fn state(&self) -> &EvalState {
        &self.state
    }

    /// Why the evals cannot run (with [`EvalState::Unavailable`]).
    pub fn unavailable_reason(&self) -> &str {
        &self.unavailable
    }

    pub fn suites(&self) -> &[SuiteInfo] {
        &self.suites
    }

    pub fn selected(&self) -> &[bool] {
        &self.selected
    }

    pub fn settings(&self) -> &EvalSettings {
        &self.settings
    }

    pub fn toggle(&mut self, index: usize) {
        if let Some(s) = self.selected.get_mut(index) {
            *s = !*s;
        }
    }

    /// Switches between the quick run (a capped sample per suite) and whole suites.
    pub fn toggle_quick(&mut self) {
        self.settings.quick = !self.settings.quick;
    }

    /// Items a run of suite `s` answers under the current settings.
    pub fn planned_cases(&self, s: &SuiteInfo) -> usize {
        match self.settings.quick {
            true => s.cases.min(self.settings.quick_limit),
            false => s.cases,
        }
    }

    pub fn latest(&self) -> Option<&EvalReport> {
        self.latest.as_ref()
    }

    pub fn previous(&self) -> Option<&EvalReport> {
        self.previous.as_ref()
    }

    pub fn start(&mut self) -> Result<(), AppError> {
        match self.state {
            EvalState::Unavailable => return Err(AppError::Nothing("eval runner")),
            EvalState::Running(_) => return Err(AppError::Busy),
            _ => {}
        }
        let chosen: Vec<&SuiteInfo> = self
            .suites
            .iter()
            .zip(&self.selected)
            .filter(|(_, on)| **on)
            .map(|(s, _)| s)
            .collect();
        if chosen.is_empty() {
            return Err(AppError::Nothing("suite selected"));
        }
        let total = chosen.iter().map(|s| self.planned_cases(s)).sum();
        let req = EvalRequest {
            suites: chosen.iter().map(|s| s.id.clone()).collect(),
            limit: self.settings.quick.then_some(self.settings.quick_limit),
            max_tokens: self.settings.max_tokens,
        };
        self.cancel.reset();
        let sent = self.jobs.as_ref().map(|j| j.send(req));
        if !matches!(sent, Some(Ok(()))) {
            return Err(AppError::WorkerGone("evals"));
        }
        self.state = EvalState::Running(Progress { done: 0, total });
        Ok(())
    }

    /// Stops the run at the next token; the items already answered stay in its results file.
    pub fn cancel(&mut self) {
        if matches!(self.state, EvalState::Running(_)) {
            self.cancel.cancel();
        }
    }

    /// Applies the worker's reports. Returns whether anything changed.
    pub fn pump(&mut self) -> bool {
        let mut changed = false;
        while let Some(m) = self.events.as_ref().and_then(|e| e.try_recv().ok()) {
            self.apply(m);
            changed = true;
        }
        changed
    }

    /// Blocks until the running eval has ended (tests).
    pub fn wait_idle(&mut self) -> Result<(), AppError> {
        while matches!(self.state, EvalState::Running(_)) {
            let m = self
                .events
                .as_ref()
                .and_then(|e| e.recv().ok())
                .ok_or(AppError::WorkerGone("evals"))?;
            self.apply(m);
        }
        Ok(())
    }

    fn apply(&mut self, m: Msg) {
        match m {
            Msg::Progress(p) => {
                if matches!(self.state, EvalState::Running(_)) {
                    self.state = EvalState::Running(p)
                }
            }
            Msg::Done(Ok(report)) => {
                if let Some(old) = self.latest.take() {
                    self.previous = Some(old);
                }
                self.latest = Some(report);
                self.state = EvalState::Finished;
            }
            Msg::Done(Err(_)) if self.cancel.is_cancelled() => self.state = EvalState::Cancelled,
            Msg::Done(Err(e)) => self.state = EvalState::Failed(e),
        }
    }

    /// The latest rows as JSON, with the previous run's (the export of a runner that made no
    /// full report).
    pub fn export_json(&self) -> Option<String> {
        let report = |r: &EvalReport| {
            serde_json::json!({
                "suites": r.suites,
                "categories": r.results.iter().map(|c| {
                    let (lo, hi) = c.interval();
                    serde_json::json!({
                        "category": c.category, "kind": c.kind,
                        "hits": c.hits, "n": c.n, "rate": c.rate(), "wilson95": [lo, hi],
                    })
                }).collect::<Vec<_>>(),
            })
        };
        let latest = self.latest.as_ref()?;
        let v = serde_json::json!({
            "latest": report(latest),
            "previous": self.previous.as_ref().map(report),
        });
        serde_json::to_string_pretty(&v).ok()
    }

    /// Writes the latest report: report.json, report.md and report.svg (and, when the previous
    /// run has a full report too, compare.md) into the run's directory, else into `fallback`.
    /// Returns the Markdown (or JSON) file written.
    pub fn export(&self, fallback: Option<&Path>) -> Result<PathBuf, AppError> {
        let latest = self
            .latest
            .as_ref()
            .ok_or(AppError::Nothing("eval report"))?;
        let dir = latest
            .dir
            .as_deref()
            .or(fallback)
            .ok_or(AppError::Nothing("directory to export into"))?;
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| AppError::Io { path, source }
        };
        ensure_private_dir(dir).map_err(io(dir))?;
        let Some(full) = &latest.full else {
            let p = dir.join("report.json");
            let json = self.export_json().unwrap_or_default();
            std::fs::write(&p, json).map_err(io(&p))?;
            return Ok(p);
        };
        full.write(dir, "report")?;
        if let Some(prev) = self.previous.as_ref().and_then(|p| p.full.as_ref()) {
            let runs = [
                ("previous".to_string(), &**prev),
                ("latest".into(), &**full),
            ];
            let p = dir.join("compare.md");
            let md = format!(
                "# Safety evals: this run against the previous one\n\n{}",
                kostant_evals::compare_markdown(&runs)
            );
            std::fs::write(&p, md).map_err(io(&p))?;
        }
        Ok(dir.join("report.md"))
    }

    pub fn shutdown(&mut self) {
        self.cancel.cancel();
        self.jobs = None;
        if let Some(w) = self.worker.take() {
            // A panicked runner leaves nothing to clean up; the app is closing.
            let _ = w.join();
        }
    }
}

impl Drop for EvalsController {
    fn drop(&mut self) {
        self.shutdown();
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
            let model = super::chat::shared_model(&self.model_path)?;
            let guard = crate::guard_model::guard_for(&model, &self.model_path)?;
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

    fn run_inner(
        &mut self,
        req: &EvalRequest,
        cancel: &CancelHandle,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<EvalReport, AppError> {
        let start = Instant::now();
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
        let total = plan.iter().map(|(_, items)| items.len()).sum();
        progress(Progress { done: 0, total });
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        // Owner-only, like the history: a run's results hold the replies it produced.
        let dir = self.work_dir.join(format!("run-{stamp}"));
        for d in [&self.work_dir, &dir] {
            ensure_private_dir(d).map_err(|source| AppError::Io {
                path: d.to_path_buf(),
                source,
            })?;
        }
        let mut out = ResultsFile::append(&dir.join("results.jsonl"))?;
        let runner = self.runner(req.max_tokens)?;
        let mut done: Vec<ItemResult> = Vec::new();
        let mut before = 0;
        let mut answered = Ok(());
        for (suite, items) in &plan {
            let mut answer =
                |it: &kostant_evals::Item, c: &CancelHandle| runner.run_item(*suite, it, c);
            answered = run_suite(
                &mut answer,
                *suite,
                items,
                &mut out,
                &mut done,
                cancel,
                &mut |p| {
                    progress(Progress {
                        done: before + p.done,
                        total,
                    })
                },
            );
            if answered.is_err() {
                break;
            }
            before += items.len();
        }
        answered?;
        let model = runner.model().clone();
        let n_ctx = runner.options().n_ctx;
        let mut notes = vec![
            "run from the app's Safety evals screen; judges run on this device (kostant-evals judge.rs)".to_string(),
            "the guard reads with the chat model".to_string(),
        ];
        if let Some(l) = req.limit {
            notes.push(format!("at most {l} items per suite: a fixed hashed sample (kostant_evals::suite::sample), not the whole suite"));
        }
        let report = RunReport {
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
            summary: kostant_evals::summarise(&done, None, skipped),
            judges: kostant_evals::calibration::judges()?,
        };
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

    fn result(id: &str, suite: SuiteName, category: Option<&str>, refusal: Refusal) -> ItemResult {
        ItemResult {
            id: id.into(),
            suite,
            label: None,
            category: category.map(str::to_string),
            xstest_type: None,
            family: None,
            verdict: "answered".into(),
            stopped_by: None,
            refusal,
            toxicity: Toxicity::default(),
            guard_category: None,
            input_score: 0.0,
            output_score: 0.0,
            reply: String::new(),
            generated: None,
            generated_tokens: 0,
            ms: 0.0,
        }
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

    #[test]
    fn without_a_runner_the_screen_says_why() {
        let mut c = EvalsController::new(
            Err("no model".into()),
            EvalSettings::default(),
            super::super::no_notify(),
        );
        assert_eq!(c.state(), &EvalState::Unavailable);
        assert_eq!(c.unavailable_reason(), "no model");
        assert!(c.start().is_err());
        assert!(c.export_json().is_none());
    }

    /// Answers every item of every suite after a short pause, or stops when cancelled.
    struct Counting;

    impl EvalRunner for Counting {
        fn suites(&self) -> Vec<SuiteInfo> {
            ["harmful", "benign_everyday"]
                .iter()
                .map(|id| SuiteInfo {
                    id: id.to_string(),
                    title: id.to_string(),
                    cases: 50,
                })
                .collect()
        }

        fn run(
            &mut self,
            req: &EvalRequest,
            cancel: &CancelHandle,
            progress: &mut dyn FnMut(Progress),
        ) -> Result<EvalReport, String> {
            let total = req.suites.len() * req.limit.unwrap_or(50);
            for done in 0..=total {
                if cancel.is_cancelled() {
                    return Err("cancelled".into());
                }
                progress(Progress { done, total });
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Ok(EvalReport {
                suites: req.suites.clone(),
                results: vec![CategoryResult {
                    category: "All harmful".into(),
                    kind: RateKind::Refusal,
                    hits: req.max_tokens,
                    n: 100,
                }],
                full: None,
                dir: None,
            })
        }
    }

    #[test]
    fn quick_runs_cap_the_suites_report_progress_cancel_and_compare() {
        let settings = EvalSettings {
            quick_limit: 3,
            max_tokens: 7,
            quick: true,
        };
        let mut c =
            EvalsController::new(Ok(Box::new(Counting)), settings, super::super::no_notify());
        assert_eq!(
            c.selected(),
            [true, false],
            "the first suite alone at first"
        );
        c.toggle(1);
        c.start().unwrap();
        assert_eq!(
            c.state(),
            &EvalState::Running(Progress { done: 0, total: 6 })
        );
        assert!(matches!(c.start(), Err(AppError::Busy)));
        c.wait_idle().unwrap();
        assert_eq!(c.state(), &EvalState::Finished);
        assert_eq!(
            c.latest().unwrap().results[0].hits,
            7,
            "max_tokens reached the runner"
        );

        // Whole suites, cancelled part way: the last report stays.
        c.toggle_quick();
        c.start().unwrap();
        assert_eq!(
            c.state(),
            &EvalState::Running(Progress {
                done: 0,
                total: 100
            })
        );
        while !matches!(c.state(), EvalState::Running(p) if p.done > 2) {
            c.pump();
        }
        c.cancel();
        c.wait_idle().unwrap();
        assert_eq!(c.state(), &EvalState::Cancelled);
        assert!(c.previous().is_none());

        // A second finished run becomes the latest; the first is the one compared against.
        c.toggle_quick();
        c.start().unwrap();
        c.wait_idle().unwrap();
        assert!(c.previous().is_some() && c.latest().is_some());
        let dir = std::env::temp_dir().join(format!("kostant-evals-export-{}", std::process::id()));
        let p = c.export(Some(&dir)).unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(json["latest"]["categories"][0]["kind"], "refusal");
        assert!(json["previous"].is_object());
        std::fs::remove_dir_all(&dir).unwrap();
        c.shutdown();
    }
}
