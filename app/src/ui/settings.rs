//! The Settings screen's adapter: the settings controller's state into `SettingsState`, and
//! the screen's callbacks back; a choice made here reaches the chat's next reply and is kept
//! in the preferences file.

use std::path::PathBuf;
use std::rc::Rc;

use slint::{Model as _, ModelRc, VecModel};

use super::{AdapterItem, App, AppRoot, FactItem, KvItem, LicenceItem, ModelItem};
use crate::assistant::responder::guarded_factory;
use crate::assistant::suite_runner::SuiteRunner;
use crate::assistant::worker::ModelState;
use crate::controllers::evals::{EvalState, EvalsController};
use crate::controllers::settings::{SettingsController, Verification};
use crate::preferences::Preferences;

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The privacy facts as they are now into the rows `SettingsState` shows (called as the
/// screen is shown and when the chat's mode changes).
pub(super) fn refresh_privacy(app: &App) {
    let temporary = app.chat.borrow().mode() == crate::controllers::chat::ChatMode::Temporary;
    let facts: Vec<FactItem> = app
        .privacy
        .borrow()
        .facts(temporary)
        .lines()
        .into_iter()
        .map(|(what, value)| FactItem {
            what: what.into(),
            value: value.into(),
        })
        .collect();
    // Rows changed in place: the screen's rows, made when it opened, take the new values.
    let model = &app.privacy_facts;
    for (i, f) in facts.iter().enumerate() {
        match i < model.row_count() {
            true => model.set_row_data(i, f.clone()),
            false => model.push(f.clone()),
        }
    }
    while model.row_count() > facts.len() {
        model.remove(model.row_count() - 1);
    }
}

/// The erase confirmation's state into `SettingsState`.
fn refresh_erase<R: AppRoot>(ui: &R, app: &App) {
    let p = app.privacy.borrow();
    let s = ui.settings_state();
    s.set_erase_confirming(p.confirming_erase());
    s.set_erase_question(p.erase_question().into());
    s.set_erased_text(p.erased().unwrap_or("").into());
}

/// Forwards the Privacy section's callbacks: the facts read again, and "Erase everything".
fn connect_privacy<R: AppRoot>(ui: &R, app: &Rc<App>) {
    let s = ui.settings_state();
    s.set_privacy_facts(ModelRc::from(app.privacy_facts.clone()));
    refresh_privacy(app);
    let a = app.clone();
    s.on_refresh_privacy(move || refresh_privacy(&a));
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_request_erase(move || {
        a.privacy.borrow_mut().request_erase();
        if let Some(ui) = w.upgrade() {
            refresh_erase(&ui, &a);
        }
    });
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_cancel_erase(move || {
        a.privacy.borrow_mut().cancel_erase();
        if let Some(ui) = w.upgrade() {
            refresh_erase(&ui, &a);
        }
    });
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_confirm_erase(move || {
        // A reply going on would save into what is being erased: it stops first.
        a.chat.borrow_mut().stop();
        let result = a.privacy.borrow_mut().confirm_erase();
        let Some(ui) = w.upgrade() else { return };
        match result {
            Ok(_) => {
                // What is on screen goes too; the app closes from the notice.
                let _ = a.chat.borrow_mut().new_chat();
                super::chat::refresh(&ui, &a);
            }
            Err(e) => ui
                .settings_state()
                .set_notice(format!("Not everything could be erased: {e}").into()),
        }
        refresh_erase(&ui, &a);
    });
    s.on_close_app(|| {
        let _ = slint::quit_event_loop();
    });
}

/// The settings controller's state into `SettingsState`.
pub(super) fn refresh<R: AppRoot>(ui: &R, app: &App) {
    let st = app.settings.borrow();
    let s = ui.settings_state();
    match st.model() {
        Some(m) => {
            s.set_model_name(m.name.as_str().into());
            s.set_quantization(m.quantization.as_str().into());
            s.set_size(format!("{} · {}", mib(m.file_bytes), m.path.display()).into());
        }
        None => {
            let status = match &*app.shown_model.borrow() {
                ModelState::Failed(e) => format!("not loaded: {e}"),
                _ => "loading…".into(),
            };
            s.set_model_name(status.into());
        }
    }
    s.set_verification(st.verification().text().into());
    s.set_verified(matches!(st.verification(), Verification::Verified { .. }));
    s.set_memory(st.memory_in_use().into());
    let g = st.generation();
    s.set_temperature(format!("{:.1}", g.temperature).into());
    s.set_top_p(format!("{:.2}", g.top_p).into());
    s.set_max_tokens(g.max_tokens.to_string().into());
    s.set_budget(format!("{} MiB", st.memory_budget_mb()).into());
    s.set_context(format!("{} tokens (fits the budget)", g.n_ctx).into());
    let kv_types: Vec<KvItem> = st
        .kv_choices()
        .into_iter()
        .map(|k| KvItem {
            label: k.label.into(),
            detail: k.detail.into(),
            chosen: k.chosen,
        })
        .collect();
    s.set_kv_types(ModelRc::new(VecModel::from(kv_types)));
    s.set_key_status(st.history_status().into());
    s.set_network(app.badge.detail.as_str().into());
    let adapters: Vec<AdapterItem> = st
        .adapters()
        .into_iter()
        .map(|a| AdapterItem {
            feature: a.feature.into(),
            detail: a.detail.into(),
        })
        .collect();
    s.set_adapters(ModelRc::new(VecModel::from(adapters)));
    let current = st.model().map(|m| m.path.as_path());
    let models: Vec<ModelItem> = st
        .installed()
        .iter()
        .map(|m| {
            let in_use = current == Some(m.path.as_path());
            ModelItem {
                file: m.file.as_str().into(),
                detail: format!("{} · {}", m.detail, mib(m.size_bytes)).into(),
                in_use,
                usable: m.supported && !in_use && current.is_some(),
            }
        })
        .collect();
    s.set_models(ModelRc::new(VecModel::from(models)));
    let licences: Vec<LicenceItem> = st
        .licences()
        .into_iter()
        .map(|l| LicenceItem {
            what: l.what.into(),
            licence: l.licence.into(),
        })
        .collect();
    s.set_licences(ModelRc::new(VecModel::from(licences)));
}

/// Runs the model at `path` in the chat and the eval screen; the history and the conversation
/// on screen stay. Refused, with a line for the screen, while a reply or an eval run goes on.
fn switch_model(app: &App, path: PathBuf) -> Result<(), String> {
    if matches!(app.evals.borrow().state(), EvalState::Running(_)) {
        return Err("A safety eval is running: cancel it or let it finish, then switch.".into());
    }
    app.chat
        .borrow_mut()
        .switch_model(
            app.chat_factory(guarded_factory(path.clone())),
            app.notify.clone(),
        )
        .map_err(|_| "A reply is being written: stop it or let it finish, then switch.")?;
    app.settings.borrow_mut().model_switching();
    *app.shown_model.borrow_mut() = ModelState::Loading;
    let data_dir = app
        .data_dir
        .clone()
        .ok_or(crate::history::HistoryError::NoDataDir);
    let history_on = app.history.is_some();
    let runner = SuiteRunner::for_app(&Ok(path), app.suites_dir.clone(), &data_dir, history_on);
    let mut evals = app.evals.borrow_mut();
    evals.shutdown();
    *evals = EvalsController::new(runner, app.eval_settings, app.notify.clone());
    Ok(())
}

/// A Settings choice was made: the chat's next reply uses it, and it is kept for the next
/// start (a failure to keep it is said on the screen; the choice still applies now).
fn settings_changed<R: AppRoot>(ui: &R, app: &App) {
    let settings = app.settings.borrow();
    app.chat.borrow_mut().settings = settings.generation().clone();
    let kept = match &app.data_dir {
        Some(dir) => Preferences::of(&settings).save(dir).err(),
        None => None,
    };
    drop(settings);
    ui.settings_state()
        .set_notice(kept.map(|e| e.to_string()).unwrap_or_default().into());
    refresh(ui, app);
}

/// Forwards the Settings screen's callbacks (model picker, steppers, context memory, theme)
/// to the settings controller, and what they change to the chat.
pub(super) fn connect<R: AppRoot>(ui: &R, app: &Rc<App>) {
    connect_privacy(ui, app);
    let s = ui.settings_state();
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_use_model(move |i| {
        let Some(ui) = w.upgrade() else { return };
        let Some(m) = usize::try_from(i)
            .ok()
            .and_then(|i| a.settings.borrow().installed().get(i).cloned())
        else {
            return;
        };
        let status = match m.supported {
            true => switch_model(&a, m.path).err().unwrap_or_default(),
            false => format!("{}: {}", m.file, m.detail),
        };
        ui.settings_state().set_models_status(status.into());
        super::refresh_all(&ui, &a);
    });
    // Each step edits the settings controller, then hands the result to the chat.
    fn stepper<R: AppRoot>(
        ui: &R,
        app: &Rc<App>,
        f: impl Fn(&mut SettingsController, i32) + 'static,
    ) -> impl Fn(i32) {
        let (w, a) = (ui.as_weak(), app.clone());
        move |dir| {
            let Some(ui) = w.upgrade() else { return };
            f(&mut a.settings.borrow_mut(), dir.signum());
            settings_changed(&ui, &a);
        }
    }
    s.on_temperature_step(stepper(ui, app, |s, d| {
        s.set_temperature(s.generation().temperature + 0.1 * d as f32)
    }));
    s.on_top_p_step(stepper(ui, app, |s, d| {
        s.set_top_p(s.generation().top_p + 0.05 * d as f32)
    }));
    s.on_max_tokens_step(stepper(ui, app, |s, d| {
        let n = s.generation().max_tokens as i64 + 64 * i64::from(d);
        s.set_max_tokens(n.max(0) as usize)
    }));
    s.on_budget_step(stepper(ui, app, |s, d| {
        let mb = i64::from(s.memory_budget_mb()) + 256 * i64::from(d);
        s.set_memory_budget_mb(mb.clamp(0, i64::from(u32::MAX)) as u32)
    }));
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_set_kv_type(move |i| {
        let Some(ui) = w.upgrade() else { return };
        let chosen = usize::try_from(i)
            .ok()
            .and_then(|i| a.settings.borrow().kv_choices().get(i).map(|k| k.kv_type));
        if let Some(kv_type) = chosen {
            a.settings.borrow_mut().set_kv_type(kv_type);
            settings_changed(&ui, &a);
        }
    });
    let w = ui.as_weak();
    s.on_set_dark(move |dark| {
        if let Some(ui) = w.upgrade() {
            ui.theme().set_dark(dark);
        }
    });
}
