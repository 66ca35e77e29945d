//! The Slint app's wiring: builds the controllers and hands each screen to its adapter
//! (`chat`, `history`, `documents`, `evals`, `settings`: `connect` wires the screen's callbacks to its
//! controller, `refresh` copies the controller's state into the screen's `.slint` global,
//! app/ui/state.slint). No logic lives here that a controller test could not see.
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

use slint::{ComponentHandle, ModelRc, VecModel};

use crate::assistant::ask::{library_adder, with_documents, SharedLibrary};
use crate::assistant::responder::{guarded_factory, LoadResult, ResponderFactory};
use crate::assistant::suite_runner::{EvalRunner, SuiteRunner};
use crate::assistant::worker::ModelState;
use crate::assistant::Notify;
use crate::controllers::chat::ChatController;
use crate::controllers::documents::DocumentsController;
use crate::controllers::evals::{EvalSettings, EvalsController};
use crate::controllers::history::HistoryController;
use crate::controllers::lifecycle::{Lifecycle, SavedState};
use crate::controllers::network::NetworkBadge;
use crate::controllers::settings::SettingsController;
use crate::controllers::SharedStore;
use crate::error::AppError;
use crate::preferences::Preferences;

mod chat;
mod documents;
mod evals;
mod history;
mod settings;

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
    /// A history opened already (a locked one, with the passphrase the dialog was given).
    pub opened_history: Option<crate::history::Store>,
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
            opened_history: None,
        }
    }
}

/// What the wiring needs of a root window; both `DesktopApp` and `PhoneApp` have it.
pub trait AppRoot: ComponentHandle + 'static {
    fn chat_state(&self) -> ChatState<'_>;
    fn history_state(&self) -> HistoryState<'_>;
    fn documents_state(&self) -> DocumentsState<'_>;
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
            fn documents_state(&self) -> DocumentsState<'_> {
                self.global::<DocumentsState>()
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
    /// The Documents screen; `None` when the history, which keeps the documents, is off.
    pub documents: Option<RefCell<DocumentsController>>,
    pub settings: RefCell<SettingsController>,
    pub evals: RefCell<EvalsController>,
    /// Settings' Privacy section and its "Erase everything".
    pub privacy: RefCell<crate::controllers::privacy::PrivacyController>,
    /// The Privacy section's rows, changed in place as the facts are read again.
    privacy_facts: Rc<VecModel<FactItem>>,
    data_dir: Option<PathBuf>,
    /// The sentence encoder, shared by the chat's questions and the Documents screen.
    library: SharedLibrary,
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
    /// Cancels a running reply or eval and joins the workers (an add of a document ends
    /// first: it is stored whole or not at all).
    pub fn shutdown(&self) {
        self.chat.borrow_mut().shutdown();
        self.evals.borrow_mut().shutdown();
        if let Some(d) = &self.documents {
            d.borrow_mut().shutdown();
        }
    }

    /// The chat's responder from `factory`, able to answer "Ask documents" questions from
    /// the documents in the history (none when the history is off).
    pub(crate) fn chat_factory(&self, factory: ResponderFactory) -> ResponderFactory {
        let dir = self.history.as_ref().and(self.data_dir.clone());
        with_documents(factory, dir, self.library.clone())
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
        chat::open_conversation(ui, app, id)?;
    }
    chat::refresh(ui, app);
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
        let opened = cfg.opened_history.take().map(Ok);
        match opened.or_else(|| data_dir.as_deref().map(crate::history::open_default)) {
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
    let library = SharedLibrary::default();
    let docs_dir = store.as_ref().and(data_dir.clone());
    let factory = with_documents(factory, docs_dir.clone(), library.clone());
    let mut chat = ChatController::new(factory, store.clone(), notify.clone());
    let mut settings = SettingsController::new(chat.settings.clone(), history_status);
    // Last run's choices (the cache type above all: a saved context restores only under it).
    if let Some(dir) = &data_dir {
        Preferences::load(dir).apply(&mut settings);
        chat.settings = settings.generation().clone();
    }
    let app = Rc::new(App {
        chat: RefCell::new(chat),
        documents: store.clone().zip(docs_dir).map(|(s, dir)| {
            let adder = library_adder(dir, library.clone());
            RefCell::new(DocumentsController::new(s, adder, notify.clone()))
        }),
        history: store.map(|s| RefCell::new(HistoryController::new(s))),
        settings: RefCell::new(settings),
        evals: RefCell::new(EvalsController::new(
            evals,
            cfg.eval_settings,
            notify.clone(),
        )),
        privacy: RefCell::new(crate::controllers::privacy::PrivacyController::new(
            data_dir.clone(),
            None,
        )),
        privacy_facts: Rc::new(VecModel::default()),
        data_dir,
        library,
        badge: NetworkBadge::current(),
        messages: Rc::new(VecModel::default()),
        shown_model: RefCell::new(ModelState::Loading),
        notify: notify.clone(),
        suites_dir: cfg.suites_dir,
        eval_settings: cfg.eval_settings,
    });
    ui.theme().set_dark(cfg.dark);
    chat::connect(ui, &app);
    history::connect(ui, &app);
    documents::connect(ui, &app);
    settings::connect(ui, &app);
    evals::connect(ui, &app);
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
        settings::refresh(ui, app);
    }
    if chat_changed {
        chat::refresh(ui, app);
    }
    if finished {
        if let Some(h) = &app.history {
            h.borrow_mut().refresh();
        }
        history::refresh(ui, app);
    }
    if app.settings.borrow_mut().pump() {
        settings::refresh(ui, app);
    }
    if app.evals.borrow_mut().pump() {
        evals::refresh(ui, app);
    }
    if app
        .documents
        .as_ref()
        .is_some_and(|d| d.borrow_mut().pump())
    {
        documents::refresh(ui, app);
    }
}

fn refresh_all<R: AppRoot>(ui: &R, app: &App) {
    chat::refresh(ui, app);
    history::refresh(ui, app);
    documents::refresh(ui, app);
    settings::refresh(ui, app);
    evals::refresh(ui, app);
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
    let Some(dir) = locked_history(&cfg) else {
        if let Err(e) = ui.show() {
            return Ok(Launch::NoWindow(e.to_string()));
        }
        let app = attach(&ui, cfg);
        let result = slint::run_event_loop().map_err(|e| AppError::Ui(e.to_string()));
        // The window may close mid-reply: stop it and wait for the worker before returning.
        app.shutdown();
        drop(ui);
        return result.map(|()| Launch::Closed);
    };
    let dialog = match UnlockWindow::new() {
        Ok(d) => d,
        Err(e) => return Ok(Launch::NoWindow(e.to_string())),
    };
    if let Err(e) = dialog.show() {
        return Ok(Launch::NoWindow(e.to_string()));
    }
    let attached: Attached<R> = Rc::default();
    connect_unlock(&dialog, ui, cfg, dir, attached.clone());
    let result = slint::run_event_loop().map_err(|e| AppError::Ui(e.to_string()));
    if let Some((ui, app)) = attached.borrow_mut().take() {
        app.shutdown();
        drop(ui);
    }
    result.map(|()| Launch::Closed)
}

/// The app's window and wiring once the dialog let it open, kept until the loop ends.
type Attached<R> = Rc<RefCell<Option<(R, Rc<App>)>>>;

/// The data directory of a history that is locked and was given no passphrase
/// (`KOSTANT_PASSPHRASE_FILE`): the app asks for it first.
fn locked_history(cfg: &AppConfig) -> Option<PathBuf> {
    if !cfg.history || std::env::var_os(crate::history::PASSPHRASE_ENV).is_some() {
        return None;
    }
    let dir = crate::history::data_dir(cfg.data_dir.as_deref()).ok()?;
    let inspected = crate::history::store::inspect(&dir.join(crate::history::DB_FILE));
    matches!(inspected, Ok(Some(i)) if i.locked).then_some(dir)
}

/// What the dialog says first, and after a passphrase that does not open the history.
pub const UNLOCK_ASK: &str =
    "Give its passphrase to open your saved chats and documents. Nothing is saved until you do.";
pub const UNLOCK_WRONG: &str =
    "That passphrase does not open the history. Nothing was changed; try again.";

/// Opens the locked history in `dir` with `typed`, or says why not in the dialog's words.
pub fn try_unlock(dir: &std::path::Path, typed: &str) -> Result<crate::history::Store, String> {
    let pass = crate::history::Passphrase::new(typed).map_err(|_| UNLOCK_ASK.to_string())?;
    match crate::history::open_with_passphrase(dir, Some(pass)) {
        Ok(store) => Ok(store),
        Err(crate::history::HistoryError::WrongPassphrase) => Err(UNLOCK_WRONG.into()),
        Err(e) => Err(format!("The history could not be opened: {e}")),
    }
}

/// The dialog's callbacks: the right passphrase opens the app on the history; Continue
/// without history opens it with the history off.
fn connect_unlock<R: AppRoot>(
    dialog: &UnlockWindow,
    ui: R,
    cfg: AppConfig,
    dir: PathBuf,
    attached: Attached<R>,
) {
    dialog.set_message(UNLOCK_ASK.into());
    let pending = Rc::new(RefCell::new(Some((ui, cfg))));
    let open = {
        let (pending, attached, weak) = (pending.clone(), attached.clone(), dialog.as_weak());
        move |store: Option<crate::history::Store>| {
            let Some((ui, mut cfg)) = pending.borrow_mut().take() else {
                return;
            };
            match store {
                Some(s) => cfg.opened_history = Some(s),
                None => cfg.history = false,
            }
            // The app's window first, so the loop never runs without a window.
            let _ = ui.show();
            let app = attach(&ui, cfg);
            *attached.borrow_mut() = Some((ui, app));
            if let Some(d) = weak.upgrade() {
                let _ = d.hide();
            }
        }
    };
    let open = Rc::new(open);
    let (o, weak) = (open.clone(), dialog.as_weak());
    dialog.on_unlock(move |typed| match try_unlock(&dir, &typed) {
        Ok(store) => o(Some(store)),
        Err(why) => {
            if let Some(d) = weak.upgrade() {
                d.set_message(why.into());
            }
        }
    });
    dialog.on_skip(move || open(None));
}
