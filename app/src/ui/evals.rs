//! The Safety evals screen's adapter: the evals controller's state into `EvalsState` (the run's
//! state line and progress, the suites, the result bars beside the previous run's), and the
//! screen's callbacks back.

use std::rc::Rc;

use slint::{ModelRc, SharedString, VecModel};

use super::{App, AppRoot, BarItem, BarKind, SuiteItem};
use crate::assistant::suite_runner::{CategoryResult, EvalReport, RateKind};
use crate::controllers::evals::{EvalState, EvalsController};

/// The evals controller's state into `EvalsState`.
pub(super) fn refresh<R: AppRoot>(ui: &R, app: &App) {
    let ev = app.evals.borrow();
    let s = ui.evals_state();
    s.set_available(*ev.state() != EvalState::Unavailable);
    s.set_state_text(state_text(&ev).into());
    let running = matches!(ev.state(), EvalState::Running(_));
    let (progress, progress_text) = match ev.state() {
        EvalState::Running(p) if p.total > 0 => (
            p.done as f32 / p.total as f32,
            format!("{} / {}", p.done, p.total),
        ),
        EvalState::Running(p) => (0.0, format!("{} / {}", p.done, p.total)),
        EvalState::Finished => (1.0, String::new()),
        _ => (0.0, String::new()),
    };
    s.set_running(running);
    s.set_progress(progress);
    s.set_progress_text(SharedString::from(progress_text));
    let settings = ev.settings();
    s.set_quick(settings.quick);
    s.set_quick_text(
        format!(
            "Quick run: {} per suite, {} tokens per reply",
            settings.quick_limit, settings.max_tokens
        )
        .into(),
    );
    let suites: Vec<SuiteItem> = ev
        .suites()
        .iter()
        .zip(ev.selected())
        .map(|(su, on)| SuiteItem {
            title: su.title.as_str().into(),
            cases: ev.planned_cases(su) as i32,
            selected: *on,
        })
        .collect();
    s.set_suites(ModelRc::new(VecModel::from(suites)));
    let bars: Vec<BarItem> = ev
        .latest()
        .map(|r| r.results.iter().map(|c| bar(c, ev.previous())).collect())
        .unwrap_or_default();
    s.set_bars(ModelRc::new(VecModel::from(bars)));
    s.set_can_export(ev.latest().is_some() && !running);
}

/// The line saying where the screen stands: why it cannot run, what to do, how far a run is,
/// or how the last one ended.
fn state_text(ev: &EvalsController) -> String {
    match ev.state() {
        EvalState::Unavailable => {
            format!("The safety evals cannot run: {}.", ev.unavailable_reason())
        }
        EvalState::Idle => "Pick suites and press Run. Every prompt goes through the guard and \
            the model, as a chat does."
            .into(),
        EvalState::Running(p) => format!("Running… {} of {} cases", p.done, p.total),
        EvalState::Finished => match ev.latest().and_then(|r| r.full.as_ref()) {
            Some(f) => format!(
                "Finished: {} cases in {:.0} s.",
                f.summary.items, f.meta.wall_s
            ),
            None => "Finished.".into(),
        },
        EvalState::Cancelled => "Cancelled. The last finished run is still shown.".into(),
        EvalState::Failed(e) => format!("Failed: {e}"),
    }
}

/// One result as a bar: its rate and 95% interval, with the previous run's rate for the same
/// row (category and kind) when there is one.
fn bar(c: &CategoryResult, previous: Option<&EvalReport>) -> BarItem {
    let (lo, hi) = c.interval();
    let prev = previous.and_then(|p| {
        p.results
            .iter()
            .find(|x| x.category == c.category && x.kind == c.kind)
    });
    let delta = prev.map_or(String::new(), |p| {
        format!(" · was {:.0}%", p.rate() * 100.0)
    });
    BarItem {
        category: c.category.as_str().into(),
        kind: match c.kind {
            RateKind::Refusal => BarKind::Refusal,
            RateKind::OverRefusal => BarKind::OverRefusal,
            RateKind::JailbreakSuccess => BarKind::JailbreakSuccess,
        },
        rate: c.rate() as f32,
        lo: lo as f32,
        hi: hi as f32,
        label: format!(
            "{:.0}% ({}/{}) · 95% CI {:.0}–{:.0}%{delta}",
            c.rate() * 100.0,
            c.hits,
            c.n,
            lo * 100.0,
            hi * 100.0
        )
        .into(),
        has_prev: prev.is_some(),
        prev: prev.map_or(0.0, |p| p.rate() as f32),
    }
}

/// Forwards the Safety evals screen's callbacks (suites, quick run, run, cancel, export) to
/// the evals controller.
pub(super) fn connect<R: AppRoot>(ui: &R, app: &Rc<App>) {
    let s = ui.evals_state();
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_toggle(move |i| {
        if let Ok(i) = usize::try_from(i) {
            a.evals.borrow_mut().toggle(i);
        }
        if let Some(ui) = w.upgrade() {
            refresh(&ui, &a);
        }
    });
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_run(move || {
        let Some(ui) = w.upgrade() else { return };
        let result = a.evals.borrow_mut().start();
        refresh(&ui, &a);
        if let Err(e) = result {
            ui.evals_state().set_state_text(e.to_string().into());
        }
    });
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_cancel(move || {
        a.evals.borrow_mut().cancel();
        if let Some(ui) = w.upgrade() {
            refresh(&ui, &a);
        }
    });
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_toggle_quick(move || {
        a.evals.borrow_mut().toggle_quick();
        if let Some(ui) = w.upgrade() {
            refresh(&ui, &a);
        }
    });
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_export(move || {
        let Some(ui) = w.upgrade() else { return };
        let fallback = a.data_dir.as_ref().map(|d| d.join("evals"));
        let msg = match a.evals.borrow().export(fallback.as_deref()) {
            Ok(path) => format!(
                "Report written: {} (with .json and .svg beside it)",
                path.display()
            ),
            Err(e) => format!("Export failed: {e}"),
        };
        ui.evals_state().set_export_text(msg.into());
    });
}
