//! The testers' Safety evals screen: pick suites, run them off the UI thread with progress and
//! cancel, see per-category refusal and over-refusal rates with 95% Wilson intervals, compare
//! with the previous run, export the report.
//!
//! The suites and their runner come from `kostant-evals` (issue 5) through [`EvalRunner`]. Until
//! that crate exposes one, the app has no runner and the screen says the evals are pending:
//! a stand-in that scored the guard-less model on made-up prompts would show numbers that mean
//! nothing.

use std::sync::mpsc;
use std::thread::JoinHandle;

use kostant_engine::CancelHandle;

use super::{AppError, Notify};

/// A suite the runner offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuiteInfo {
    pub id: String,
    pub title: String,
    pub cases: usize,
}

/// What a category's rate measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateKind {
    /// Harmful prompts refused (higher is better).
    Refusal,
    /// Benign prompts refused (lower is better).
    OverRefusal,
}

/// One category's count: `hits` of `n` cases.
#[derive(Clone, Debug, PartialEq)]
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

    /// The 95% Wilson score interval of the rate.
    pub fn interval(&self) -> (f64, f64) {
        wilson_95(self.hits, self.n)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct EvalReport {
    pub suites: Vec<String>,
    pub results: Vec<CategoryResult>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub done: usize,
    pub total: usize,
}

/// Runs eval suites; lives on the evals worker thread. `kostant-evals` implements it.
pub trait EvalRunner: Send {
    fn suites(&self) -> Vec<SuiteInfo>;
    /// Runs `suites`, reporting progress, until done or `cancel` is set (then `Err("cancelled")`).
    fn run(
        &mut self,
        suites: &[String],
        cancel: &CancelHandle,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<EvalReport, String>;
}

/// The 95% Wilson score interval for `k` successes in `n` trials; (0, 1) when n is 0.
pub fn wilson_95(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let z = 1.959_963_984_540_054_f64;
    let (n, p) = (n as f64, k as f64 / n as f64);
    let denom = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denom;
    let half = z * ((p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt()) / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// The screen's state.
#[derive(Clone, Debug, PartialEq)]
pub enum EvalState {
    /// No runner in this build (issue 5 pending).
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
    state: EvalState,
    jobs: Option<mpsc::Sender<Vec<String>>>,
    events: Option<mpsc::Receiver<Msg>>,
    worker: Option<JoinHandle<()>>,
    cancel: CancelHandle,
    latest: Option<EvalReport>,
    previous: Option<EvalReport>,
}

impl EvalsController {
    /// Without a runner the screen shows the evals as pending.
    pub fn new(runner: Option<Box<dyn EvalRunner>>, notify: Notify) -> EvalsController {
        let cancel = CancelHandle::new();
        let mut c = EvalsController {
            suites: Vec::new(),
            selected: Vec::new(),
            state: EvalState::Unavailable,
            jobs: None,
            events: None,
            worker: None,
            cancel: cancel.clone(),
            latest: None,
            previous: None,
        };
        let Some(mut runner) = runner else { return c };
        c.suites = runner.suites();
        c.selected = vec![true; c.suites.len()];
        let (job_tx, job_rx) = mpsc::channel::<Vec<String>>();
        let (ev_tx, ev_rx) = mpsc::channel();
        let worker = std::thread::Builder::new()
            .name("kostant-evals".into())
            .spawn(move || {
                for suites in job_rx {
                    let tx = ev_tx.clone();
                    let n = notify.clone();
                    let result = runner.run(&suites, &cancel, &mut |p| {
                        // The controller being gone means the app is closing.
                        let _ = tx.send(Msg::Progress(p));
                        n();
                    });
                    let _ = ev_tx.send(Msg::Done(result));
                    notify();
                }
            });
        if let Ok(w) = worker {
            c.worker = Some(w);
            c.jobs = Some(job_tx);
            c.events = Some(ev_rx);
            c.state = EvalState::Idle;
        }
        c
    }

    pub fn state(&self) -> &EvalState {
        &self.state
    }

    pub fn suites(&self) -> &[SuiteInfo] {
        &self.suites
    }

    pub fn selected(&self) -> &[bool] {
        &self.selected
    }

    pub fn toggle(&mut self, index: usize) {
        if let Some(s) = self.selected.get_mut(index) {
            *s = !*s;
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
            EvalState::Unavailable => return Err(AppError::Nothing("eval runner (issue 5)")),
            EvalState::Running(_) => return Err(AppError::Busy),
            _ => {}
        }
        let chosen: Vec<String> = self
            .suites
            .iter()
            .zip(&self.selected)
            .filter(|(_, on)| **on)
            .map(|(s, _)| s.id.clone())
            .collect();
        if chosen.is_empty() {
            return Err(AppError::Nothing("suite selected"));
        }
        let total = self
            .suites
            .iter()
            .filter(|s| chosen.contains(&s.id))
            .map(|s| s.cases)
            .sum();
        self.cancel.reset();
        let sent = self.jobs.as_ref().map(|j| j.send(chosen));
        if !matches!(sent, Some(Ok(()))) {
            return Err(AppError::WorkerGone("evals"));
        }
        self.state = EvalState::Running(Progress { done: 0, total });
        Ok(())
    }

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
            Msg::Progress(p) => self.state = EvalState::Running(p),
            Msg::Done(Ok(report)) => {
                self.previous = self.latest.take();
                self.latest = Some(report);
                self.state = EvalState::Finished;
            }
            Msg::Done(Err(e)) if self.cancel.is_cancelled() => {
                let _ = e;
                self.state = EvalState::Cancelled
            }
            Msg::Done(Err(e)) => self.state = EvalState::Failed(e),
        }
    }

    /// The latest report as JSON (with the previous run's, for comparison).
    pub fn export_json(&self) -> Option<String> {
        let report = |r: &EvalReport| {
            serde_json::json!({
                "suites": r.suites,
                "categories": r.results.iter().map(|c| {
                    let (lo, hi) = c.interval();
                    serde_json::json!({
                        "category": c.category,
                        "kind": match c.kind { RateKind::Refusal => "refusal", RateKind::OverRefusal => "over_refusal" },
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

    #[test]
    fn wilson_interval_matches_known_values() {
        // 8 of 10: Wilson 95% is (0.4902, 0.9433).
        let (lo, hi) = wilson_95(8, 10);
        assert!(
            (lo - 0.4902).abs() < 1e-4 && (hi - 0.9433).abs() < 1e-4,
            "{lo} {hi}"
        );
        // 0 of 20: lower bound 0, upper 0.1611.
        let (lo, hi) = wilson_95(0, 20);
        assert_eq!(lo, 0.0);
        assert!((hi - 0.1611).abs() < 1e-4, "{hi}");
        assert_eq!(wilson_95(0, 0), (0.0, 1.0));
    }

    #[test]
    fn without_a_runner_the_screen_is_pending() {
        let mut c = EvalsController::new(None, super::super::no_notify());
        assert_eq!(c.state(), &EvalState::Unavailable);
        assert!(c.start().is_err());
        assert!(c.export_json().is_none());
    }
}
