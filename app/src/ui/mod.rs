//! The Slint app's wiring: builds the controllers, copies their state into the `.slint`
//! globals (app/ui/state.slint) and forwards the screens' callbacks to them. No logic lives
//! here that a controller test could not see.
//!
//! Threads: the controllers live on the UI thread. Their workers call a `Notify` that queues
//! one `Bridge.pump` on the event loop (`slint::invoke_from_event_loop`), which applies every
//! pending report and refreshes the screens. Closing the window returns from the event loop;
//! [`App::shutdown`] then cancels a running reply or eval and joins the workers.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use slint::{ComponentHandle, Model as _, ModelRc, SharedString, VecModel};

use crate::controllers::chat::{
    guarded_factory, ChatController, Feature, LoadResult, MessageStatus, ModelState,
    ResponderFactory,
};
use crate::controllers::evals::{
    EvalRunner, EvalSettings, EvalState, EvalsController, RateKind, SuiteRunner,
};
use crate::controllers::history::HistoryController;
use crate::controllers::lifecycle::{Lifecycle, SavedState};
use crate::controllers::network::NetworkBadge;
use crate::controllers::settings::SettingsController;
use crate::controllers::{AppError, Notify, SharedStore};
use crate::history::Role;
use crate::preferences::Preferences;

slint::include_modules!();

/// Where the app gets its model and keeps its history.
pub struct AppConfig {
    /// The model to load, or why none was found (shown on screen instead of a chat).
    pub model: Result<PathBuf, String>,
    /// The history's data directory (`None`: `$XDG_DATA_HOME/kostant` or the like).
    pub data_dir: Option<PathBuf>,
    /// Save chats to the encrypted history.
    pub history: bool,
    pub dark: bool,
    /// How replies are produced; `None` runs the model behind the guard (`guarded_factory`).
    pub responder: Option<ResponderFactory>,
    /// The safety eval runner; `None` runs the suites of `kostant-evals` on the model
    /// ([`SuiteRunner`]), keeping its runs under the data directory's `evals/`.
    pub evals: Option<Box<dyn EvalRunner>>,
    /// Where the eval suites are (`None`: assets/evals found from the working directory).
    pub suites_dir: Option<PathBuf>,
    /// The quick run's size and the reply budget of eval runs.
    pub eval_settings: EvalSettings,
}

impl AppConfig {
    pub fn new(model: Result<PathBuf, String>) -> AppConfig {
        AppConfig {
            model,
            data_dir: None,
            history: true,
            dark: false,
            responder: None,
            evals: None,
            suites_dir: None,
            eval_settings: EvalSettings::default(),
        }
    }
}

/// What the wiring needs of a root window; both `DesktopApp` and `PhoneApp` have it.
pub trait AppRoot: ComponentHandle + 'static {
    fn chat_state(&self) -> ChatState<'_>;
    fn history_state(&self) -> HistoryState<'_>;
    fn evals_state(&self) -> EvalsState<'_>;
    fn settings_state(&self) -> SettingsState<'_>;
    fn nav(&self) -> Nav<'_>;
    fn keyboard(&self) -> Keyboard<'_>;
    fn theme(&self) -> Theme<'_>;
    fn bridge(&self) -> Bridge<'_>;
    fn copy_to_clipboard(&self, text: &str);
}

macro_rules! app_root {
    ($root:ty) => {
        impl AppRoot for $root {
            fn chat_state(&self) -> ChatState<'_> {
                self.global::<ChatState>()
            }
            fn history_state(&self) -> HistoryState<'_> {
                self.global::<HistoryState>()
            }
            fn evals_state(&self) -> EvalsState<'_> {
                self.global::<EvalsState>()
            }
            fn settings_state(&self) -> SettingsState<'_> {
                self.global::<SettingsState>()
            }
            fn nav(&self) -> Nav<'_> {
                self.global::<Nav>()
            }
            fn keyboard(&self) -> Keyboard<'_> {
                self.global::<Keyboard>()
            }
            fn theme(&self) -> Theme<'_> {
                self.global::<Theme>()
            }
            fn bridge(&self) -> Bridge<'_> {
                self.global::<Bridge>()
            }
            fn copy_to_clipboard(&self, text: &str) {
                self.invoke_copy_text(text.into());
            }
        }
    };
}
app_root!(DesktopApp);
app_root!(PhoneApp);

/// The controllers of one window.
pub struct App {
    pub chat: RefCell<ChatController>,
    pub history: Option<RefCell<HistoryController>>,
    pub settings: RefCell<SettingsController>,
    pub evals: RefCell<EvalsController>,
    data_dir: Option<PathBuf>,
    badge: NetworkBadge,
    messages: Rc<VecModel<ChatItem>>,
    /// The model state last shown, to notice when loading finishes.
    shown_model: RefCell<ModelState>,
    /// What a model switch needs to build the new model's chat and eval workers.
    notify: Notify,
    suites_dir: Option<PathBuf>,
    eval_settings: EvalSettings,
}

impl App {
    /// Cancels a running reply or eval and joins the workers.
    pub fn shutdown(&self) {
        self.chat.borrow_mut().shutdown();
        self.evals.borrow_mut().shutdown();
    }

    /// Handles an event of the app's life (`controllers::lifecycle`); for `SaveState`, returns
    /// the bytes for the OS to keep.
    pub fn lifecycle(&self, event: Lifecycle) -> Option<Vec<u8>> {
        match event {
            Lifecycle::SaveState => {
                let chat = self.chat.borrow();
                Some(
                    SavedState {
                        conversation: chat.conversation(),
                        feature: chat.feature(),
                    }
                    .to_bytes(),
                )
            }
            Lifecycle::Destroy => {
                self.finish();
                None
            }
            // In the background a reply goes on, and is saved when it ends.
            Lifecycle::Resume | Lifecycle::Pause | Lifecycle::Stop => None,
        }
    }

    /// Stops a reply being written and waits until it has ended, so that what it wrote is
    /// saved with its context; then joins the workers.
    pub fn finish(&self) {
        {
            let mut chat = self.chat.borrow_mut();
            chat.stop();
            // A worker that is gone has nothing left to save.
            let _ = chat.wait_idle();
        }
        self.shutdown();
    }
}

/// Continues where the app was when the OS ended it: the conversation kept in `saved`
/// ([`App::lifecycle`]'s `SaveState`) reopened from the history with its saved context, under
/// its feature. Only into an empty chat (a resume of a running app changes nothing). State that
/// does not read, or a conversation deleted since, is an error and leaves a new chat; the
/// history is untouched.
pub fn restore_state<R: AppRoot>(ui: &R, app: &App, saved: &[u8]) -> Result<(), String> {
    if !app.chat.borrow().messages().is_empty() {
        return Ok(());
    }
    let state = SavedState::from_bytes(saved)?;
    app.chat.borrow_mut().set_feature(state.feature);
    if let Some(id) = state.conversation {
        open_conversation(ui, app, id)?;
    }
    refresh_chat(ui, app);
    Ok(())
}

/// Shows conversation `id` of the history in the chat, with its saved context.
fn open_conversation<R: AppRoot>(ui: &R, app: &App, id: i64) -> Result<(), String> {
    let h = app.history.as_ref().ok_or("the history is off")?;
    h.borrow()
        .open(id)
        .and_then(|turns| app.chat.borrow_mut().open_conversation(id, turns))
        .map_err(|e| e.to_string())?;
    ui.chat_state().set_editing(false);
    ui.nav().set_page(0);
    ui.keyboard().set_wanted(false);
    refresh_chat(ui, app);
    Ok(())
}

/// A `Notify` that queues one `Bridge.pump` on the event loop, however many reports arrive
/// before it runs.
fn notifier<R: AppRoot>(ui: &R) -> Notify {
    let weak = ui.as_weak();
    let queued = Arc::new(AtomicBool::new(false));
    Arc::new(move || {
        if queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = weak.clone();
        let queued = queued.clone();
        // Fails only when the event loop has ended: the app is closing, nothing to refresh.
        let _ = slint::invoke_from_event_loop(move || {
            // Cleared before pumping, so a report that lands during the pump queues another.
            queued.store(false, Ordering::Release);
            if let Some(ui) = weak.upgrade() {
                ui.bridge().invoke_pump();
            }
        });
    })
}

/// Builds the controllers for `ui`, wires every callback and shows the initial state.
pub fn attach<R: AppRoot>(ui: &R, mut cfg: AppConfig) -> Rc<App> {
    let notify = notifier(ui);
    let found_data_dir = crate::history::data_dir(cfg.data_dir.as_deref());
    let data_dir = found_data_dir.as_ref().ok().cloned();
    let (store, history_status): (Option<SharedStore>, Result<String, String>) = if !cfg.history {
        (None, Err("turned off for this run".into()))
    } else {
        match data_dir.as_deref().map(crate::history::open_default) {
            Some(Ok(s)) => {
                let key = s.key_location();
                (Some(Rc::new(RefCell::new(s))), Ok(key))
            }
            Some(Err(e)) => (None, Err(e.to_string())),
            None => (None, Err("no data directory (set KOSTANT_DATA_DIR)".into())),
        }
    };
    let evals = match cfg.evals.take() {
        Some(r) => Ok(r),
        None => SuiteRunner::for_app(
            &cfg.model,
            cfg.suites_dir.clone(),
            &found_data_dir,
            store.is_some(),
        ),
    };
    let factory: ResponderFactory = match (cfg.responder.take(), cfg.model) {
        (Some(f), _) => f,
        (None, Ok(path)) => guarded_factory(path),
        (None, Err(why)) => Box::new(move || -> LoadResult { Err(AppError::ModelNotReady(why)) }),
    };
    let mut chat = ChatController::new(factory, store.clone(), notify.clone());
    let mut settings = SettingsController::new(chat.settings.clone(), history_status);
    // Last run's choices (the cache type above all: a saved context restores only under it).
    if let Some(dir) = &data_dir {
        Preferences::load(dir).apply(&mut settings);
        chat.settings = settings.generation().clone();
    }
    let app = Rc::new(App {
        chat: RefCell::new(chat),
        history: store.map(|s| RefCell::new(HistoryController::new(s))),
        settings: RefCell::new(settings),
        evals: RefCell::new(EvalsController::new(
            evals,
            cfg.eval_settings,
            notify.clone(),
        )),
        data_dir,
        badge: NetworkBadge::current(),
        messages: Rc::new(VecModel::default()),
        shown_model: RefCell::new(ModelState::Loading),
        notify: notify.clone(),
        suites_dir: cfg.suites_dir,
        eval_settings: cfg.eval_settings,
    });
    ui.theme().set_dark(cfg.dark);
    wire_chat(ui, &app);
    wire_history(ui, &app);
    wire_settings(ui, &app);
    wire_evals(ui, &app);
    let (weak, a) = (ui.as_weak(), app.clone());
    ui.bridge().on_pump(move || {
        if let Some(ui) = weak.upgrade() {
            pump(&ui, &a, &notify);
        }
    });
    ui.chat_state()
        .set_messages(ModelRc::from(app.messages.clone()));
    refresh_all(ui, &app);
    app
}

/// Applies the workers' reports and refreshes what they touched.
fn pump<R: AppRoot>(ui: &R, app: &App, notify: &Notify) {
    let mut chat = app.chat.borrow_mut();
    let was_busy = chat.is_busy();
    let chat_changed = chat.pump();
    let model = chat.model().clone();
    let finished = was_busy && !chat.is_busy();
    drop(chat);
    if *app.shown_model.borrow() != model {
        if let ModelState::Ready(summary) = &model {
            let mut settings = app.settings.borrow_mut();
            settings.model_loaded(summary.clone(), notify.clone());
            settings.list_models(Some(&summary.path), notify.clone());
            drop(settings);
            // The budget has picked the context: the chat uses what Settings shows.
            app.chat.borrow_mut().settings = app.settings.borrow().generation().clone();
        }
        *app.shown_model.borrow_mut() = model;
        refresh_settings(ui, app);
    }
    if chat_changed {
        refresh_chat(ui, app);
    }
    if finished {
        if let Some(h) = &app.history {
            h.borrow_mut().refresh();
        }
        refresh_history(ui, app);
    }
    if app.settings.borrow_mut().pump() {
        refresh_settings(ui, app);
    }
    if app.evals.borrow_mut().pump() {
        refresh_evals(ui, app);
    }
}

fn refresh_all<R: AppRoot>(ui: &R, app: &App) {
    refresh_chat(ui, app);
    refresh_history(ui, app);
    refresh_settings(ui, app);
    refresh_evals(ui, app);
}

/// Makes `model` hold `items`, touching only the rows that changed (a streaming reply changes
/// one row per token; rebuilding the list would rebuild every bubble).
fn sync_rows<T: Clone + PartialEq + 'static>(model: &VecModel<T>, items: Vec<T>) {
    let n = items.len();
    for (i, item) in items.into_iter().enumerate() {
        match model.row_data(i) {
            Some(old) if old == item => {}
            Some(_) => model.set_row_data(i, item),
            None => model.push(item),
        }
    }
    while model.row_count() > n {
        model.remove(model.row_count() - 1);
    }
}

fn status_name(s: MessageStatus) -> &'static str {
    match s {
        MessageStatus::Done => "done",
        MessageStatus::Streaming => "streaming",
        MessageStatus::Stopped => "stopped",
        MessageStatus::Withdrawn => "withdrawn",
        MessageStatus::Refused => "refused",
        MessageStatus::Failed => "failed",
    }
}

fn refresh_chat<R: AppRoot>(ui: &R, app: &App) {
    let chat = app.chat.borrow();
    let s = ui.chat_state();
    let items = chat
        .messages()
        .iter()
        .map(|m| ChatItem {
            role: if m.role == Role::User {
                "user"
            } else {
                "assistant"
            }
            .into(),
            text: m.text.as_str().into(),
            status: status_name(m.status).into(),
            caption: match (m.status, m.verdict) {
                (MessageStatus::Failed, _) => "Error".into(),
                (_, Some(v)) => v.caption().into(),
                (_, None) => SharedString::new(),
            },
        })
        .collect();
    sync_rows(&app.messages, items);
    s.set_busy(chat.is_busy());
    let (ready, model_status) = match chat.model() {
        ModelState::Loading => (false, "Loading the model…".to_string()),
        ModelState::Ready(m) => (
            true,
            format!("{} · {} · on this device", m.name, m.quantization),
        ),
        ModelState::Failed(e) => (false, format!("No model: {e}")),
    };
    s.set_ready(ready);
    s.set_model_status(model_status.into());
    s.set_readout(chat.readout().into());
    s.set_status_line(chat.status().unwrap_or("").into());
    s.set_badge_text(app.badge.text.as_str().into());
    s.set_badge_ok(app.badge.enforced);
    s.set_feature(chat.feature().index() as i32);
    s.set_scroll_tick(s.get_scroll_tick().wrapping_add(1));
}

fn wire_chat<R: AppRoot>(ui: &R, app: &Rc<App>) {
    let s = ui.chat_state();
    let names: Vec<SharedString> = Feature::CHIPS.iter().map(|f| f.label().into()).collect();
    s.set_features(ModelRc::new(VecModel::from(names)));

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_send(move |text| {
        let Some(ui) = w.upgrade() else { return };
        let editing = ui.chat_state().get_editing();
        let result = {
            let mut chat = a.chat.borrow_mut();
            if editing {
                chat.edit_last(&text)
            } else {
                chat.send(&text)
            }
        };
        match result {
            Ok(()) => {
                ui.chat_state().set_draft("".into());
                ui.chat_state().set_editing(false);
            }
            Err(e) => ui.chat_state().set_status_line(e.to_string().into()),
        }
        refresh_chat(&ui, &a);
    });

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_stop(move || {
        a.chat.borrow_mut().stop();
        if let Some(ui) = w.upgrade() {
            refresh_chat(&ui, &a);
        }
    });

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_regenerate(move || {
        let Some(ui) = w.upgrade() else { return };
        let result = a.chat.borrow_mut().regenerate();
        refresh_chat(&ui, &a);
        if let Err(e) = result {
            ui.chat_state().set_status_line(e.to_string().into());
        }
    });

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_edit_last(move || {
        let Some(ui) = w.upgrade() else { return };
        let text = a.chat.borrow().last_user_text().map(str::to_string);
        if let Some(text) = text {
            ui.chat_state().set_draft(text.into());
            ui.chat_state().set_editing(true);
        }
    });

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_copy(move |i| {
        let Some(ui) = w.upgrade() else { return };
        let text = usize::try_from(i)
            .ok()
            .and_then(|i| a.chat.borrow().copy_text(i));
        if let Some(text) = text {
            ui.copy_to_clipboard(&text);
            ui.chat_state().set_status_line("copied".into());
        }
    });

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_set_feature(move |i| {
        let f = usize::try_from(i)
            .ok()
            .and_then(|i| Feature::CHIPS.get(i).copied());
        if let Some(f) = f {
            a.chat.borrow_mut().set_feature(f);
        }
        if let Some(ui) = w.upgrade() {
            refresh_chat(&ui, &a);
        }
    });

    let (w, a) = (ui.as_weak(), app.clone());
    s.on_new_chat(move || {
        let Some(ui) = w.upgrade() else { return };
        let result = a.chat.borrow_mut().new_chat();
        if let Err(e) = result {
            ui.chat_state().set_status_line(e.to_string().into());
        }
        ui.chat_state().set_editing(false);
        refresh_chat(&ui, &a);
    });
}

fn refresh_history<R: AppRoot>(ui: &R, app: &App) {
    let s = ui.history_state();
    let Some(h) = &app.history else {
        s.set_items(ModelRc::default());
        s.set_status_line("History is off: chats are not saved (no data directory or key).".into());
        return;
    };
    let h = h.borrow();
    let items: Vec<HistoryItem> = h
        .items()
        .iter()
        .map(|c| HistoryItem {
            id: c.id as i32,
            title: c.title.as_str().into(),
            when: c.when.as_str().into(),
            count: c.messages as i32,
        })
        .collect();
    s.set_items(ModelRc::new(VecModel::from(items)));
    s.set_confirming(h.confirming_delete_all());
    s.set_status_line(h.status().unwrap_or("").into());
}

fn wire_history<R: AppRoot>(ui: &R, app: &Rc<App>) {
    let s = ui.history_state();
    // Each handler runs `f` on the history controller, then refreshes the screen.
    fn with_history<R: AppRoot>(
        ui: &R,
        app: &Rc<App>,
        f: impl Fn(&R, &App, &mut HistoryController) -> Result<(), AppError> + 'static,
    ) -> impl Fn() {
        let (w, a) = (ui.as_weak(), app.clone());
        move || {
            let Some(ui) = w.upgrade() else { return };
            let Some(h) = &a.history else { return };
            let result = f(&ui, &a, &mut h.borrow_mut());
            refresh_history(&ui, &a);
            if let Err(e) = result {
                ui.history_state().set_status_line(e.to_string().into());
            }
        }
    }
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_search(move |q| {
        if let (Some(ui), Some(h)) = (w.upgrade(), &a.history) {
            h.borrow_mut().search(&q);
            refresh_history(&ui, &a);
        }
    });
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_open(move |id| {
        let Some(ui) = w.upgrade() else { return };
        if let Err(e) = open_conversation(&ui, &a, i64::from(id)) {
            ui.history_state().set_status_line(e.into());
        }
    });
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_delete(move |id| {
        let (Some(ui), Some(h)) = (w.upgrade(), &a.history) else {
            return;
        };
        let result = h.borrow_mut().delete(i64::from(id));
        a.chat.borrow_mut().forget_conversation(Some(i64::from(id)));
        refresh_history(&ui, &a);
        if let Err(e) = result {
            ui.history_state().set_status_line(e.to_string().into());
        }
    });
    s.on_request_delete_all(with_history(ui, app, |_, _, h| {
        h.request_delete_all();
        Ok(())
    }));
    s.on_cancel_delete_all(with_history(ui, app, |_, _, h| {
        h.cancel_delete_all();
        Ok(())
    }));
    s.on_confirm_delete_all(with_history(ui, app, |_, a, h| {
        h.confirm_delete_all()?;
        a.chat.borrow_mut().forget_conversation(None);
        Ok(())
    }));
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn refresh_settings<R: AppRoot>(ui: &R, app: &App) {
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
    s.set_verified(matches!(
        st.verification(),
        crate::controllers::settings::Verification::Verified { .. }
    ));
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
        .switch_model(guarded_factory(path.clone()), app.notify.clone())
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
    refresh_settings(ui, app);
}

fn wire_settings<R: AppRoot>(ui: &R, app: &Rc<App>) {
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
        refresh_all(&ui, &a);
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

fn refresh_evals<R: AppRoot>(ui: &R, app: &App) {
    let ev = app.evals.borrow();
    let s = ui.evals_state();
    let available = *ev.state() != EvalState::Unavailable;
    s.set_available(available);
    let text = match ev.state() {
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
    };
    s.set_state_text(text.into());
    let (running, progress) = match ev.state() {
        EvalState::Running(p) if p.total > 0 => (true, p.done as f32 / p.total as f32),
        EvalState::Running(_) => (true, 0.0),
        EvalState::Finished => (false, 1.0),
        _ => (false, 0.0),
    };
    s.set_running(running);
    s.set_progress(progress);
    let (done, total) = match ev.state() {
        EvalState::Running(p) => (p.done, p.total),
        _ => (0, 0),
    };
    s.set_progress_text(if running {
        format!("{done} / {total}").into()
    } else {
        SharedString::new()
    });
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
        .map(|r| {
            r.results
                .iter()
                .map(|c| {
                    let (lo, hi) = c.interval();
                    let prev = ev.previous().and_then(|p| {
                        p.results
                            .iter()
                            .find(|x| x.category == c.category && x.kind == c.kind)
                    });
                    let delta = prev.map_or(String::new(), |p| {
                        format!(" · was {:.0}%", p.rate() * 100.0)
                    });
                    BarItem {
                        category: c.category.as_str().into(),
                        kind: c.kind.label().into(),
                        good_high: c.kind == RateKind::Refusal,
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
                })
                .collect()
        })
        .unwrap_or_default();
    s.set_bars(ModelRc::new(VecModel::from(bars)));
    s.set_can_export(ev.latest().is_some() && !running);
}

fn wire_evals<R: AppRoot>(ui: &R, app: &Rc<App>) {
    let s = ui.evals_state();
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_toggle(move |i| {
        if let Ok(i) = usize::try_from(i) {
            a.evals.borrow_mut().toggle(i);
        }
        if let Some(ui) = w.upgrade() {
            refresh_evals(&ui, &a);
        }
    });
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_run(move || {
        let Some(ui) = w.upgrade() else { return };
        let result = a.evals.borrow_mut().start();
        refresh_evals(&ui, &a);
        if let Err(e) = result {
            ui.evals_state().set_state_text(e.to_string().into());
        }
    });
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_cancel(move || {
        a.evals.borrow_mut().cancel();
        if let Some(ui) = w.upgrade() {
            refresh_evals(&ui, &a);
        }
    });
    let (w, a) = (ui.as_weak(), app.clone());
    s.on_toggle_quick(move || {
        a.evals.borrow_mut().toggle_quick();
        if let Some(ui) = w.upgrade() {
            refresh_evals(&ui, &a);
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

/// How a desktop launch went.
pub enum Launch {
    /// The window opened and has been closed.
    Closed,
    /// No window could be opened (no display, no backend): the caller falls back.
    NoWindow(String),
}

/// Opens the desktop window (or, with `phone`, the phone layout in a window) and runs it until
/// it is closed; then cancels any reply and joins the workers.
pub fn run_window(cfg: AppConfig, phone: bool) -> Result<Launch, AppError> {
    if phone {
        match PhoneApp::new() {
            Ok(ui) => run_root(ui, cfg),
            Err(e) => Ok(Launch::NoWindow(e.to_string())),
        }
    } else {
        match DesktopApp::new() {
            Ok(ui) => run_root(ui, cfg),
            Err(e) => Ok(Launch::NoWindow(e.to_string())),
        }
    }
}

fn run_root<R: AppRoot>(ui: R, cfg: AppConfig) -> Result<Launch, AppError> {
    if let Err(e) = ui.show() {
        return Ok(Launch::NoWindow(e.to_string()));
    }
    let app = attach(&ui, cfg);
    let result = slint::run_event_loop().map_err(|e| AppError::Ui(e.to_string()));
    // The window may close mid-reply: stop it and wait for the worker before returning.
    app.shutdown();
    drop(ui);
    result.map(|()| Launch::Closed)
}
