//! The testers' Safety evals screen: pick suites, run them off the UI thread with progress and
//! cancel, see per-category refusal and over-refusal rates with 95% Wilson intervals, compare
//! with the previous run, export the report.
//!
//! The controller talks to an [`EvalRunner`] on its worker thread (the app's is
//! [`crate::assistant::suite_runner::SuiteRunner`]); this file only picks, caps, reports
//! progress and keeps the latest and previous reports for the bars and the export.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use kostant_engine::CancelHandle;
use kostant_platform::dirs::ensure_private_dir;

use super::{AppError, Notify};
use crate::assistant::suite_runner::{EvalReport, EvalRequest, EvalRunner, Progress, SuiteInfo};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assistant::suite_runner::{CategoryResult, RateKind};

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
