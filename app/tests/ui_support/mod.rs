//! Shared by the headless UI tests: the Slint testing backend (no display; the software
//! renderer for pictures), finding and pressing elements by accessible label, and running the
//! event loop until the app reaches a state.
#![allow(dead_code)]

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use i_slint_backend_testing::{ElementHandle, ElementRoot};
use kostant_app::ui::AppRoot;

/// Installs the testing backend with real time (generation runs on real threads) and the
/// software renderer (for `take_snapshot`). Once per test process.
pub fn init_backend() {
    slint::platform::set_platform(Box::new(i_slint_backend_testing::TestingBackend::new(
        i_slint_backend_testing::TestingBackendOptions {
            mock_time: false,
            threading: true,
            renderer_name: Some("software".into()),
        },
    )))
    .expect("the platform is set once per test process");
}

/// Every element with accessible label `label`.
pub fn all(ui: &impl ElementRoot, label: &str) -> Vec<ElementHandle> {
    ElementHandle::find_by_accessible_label(ui, label).collect()
}

/// The one element labelled `label` (the first if several).
pub fn find(ui: &impl ElementRoot, label: &str) -> ElementHandle {
    all(ui, label)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no element labelled {label:?}"))
}

pub fn exists(ui: &impl ElementRoot, label: &str) -> bool {
    !all(ui, label).is_empty()
}

/// Presses the control labelled `label` (its accessible default action, as a screen reader
/// would).
pub fn press(ui: &impl ElementRoot, label: &str) {
    let e = find(ui, label);
    assert_ne!(e.accessible_enabled(), Some(false), "{label:?} is disabled");
    e.invoke_accessible_default_action();
}

/// Types `text` into the field labelled `label`.
pub fn type_into(ui: &impl ElementRoot, label: &str, text: &str) {
    find(ui, label).set_accessible_value(text);
}

/// The accessible value of the last element labelled `label` (the newest chat reply, say).
pub fn last_value(ui: &impl ElementRoot, label: &str) -> String {
    all(ui, label)
        .last()
        .and_then(|e| e.accessible_value())
        .map(|v| v.to_string())
        .unwrap_or_default()
}

/// Runs the event loop until `cond` holds. The 10-minute cap only turns a hang into a
/// failure; it is not a timing assertion.
///
/// The loop is quit exactly once per wait. The testing backend's `quit_event_loop` queues a
/// quit event, and its loop runs due timers before it acts on the event it popped: a repeated
/// timer that asked to quit could fire again before the loop ended (an event that took longer
/// than the period, a loaded machine) and queue a second quit, which then ended the *next*
/// wait before it had looked at its condition once.
pub fn run_until(what: &str, cond: impl Fn() -> bool + 'static) {
    if cond() {
        return;
    }
    #[derive(Clone, Copy, PartialEq)]
    enum Wait {
        Waiting,
        Met,
        TimedOut,
    }
    let state = Rc::new(Cell::new(Wait::Waiting));
    // A ceiling on the wait, not a speed check: counted in real time, because the testing
    // backend may fire the timer faster than its period when the machine is loaded (counting
    // polls gave up early under a concurrent benchmark).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    let timer = slint::Timer::default();
    let s = state.clone();
    timer.start(
        slint::TimerMode::Repeated,
        std::time::Duration::from_millis(5),
        move || {
            if s.get() != Wait::Waiting {
                return;
            }
            if cond() {
                s.set(Wait::Met);
            } else if std::time::Instant::now() > deadline {
                s.set(Wait::TimedOut);
            } else {
                return;
            }
            let _ = slint::quit_event_loop();
        },
    );
    slint::run_event_loop().expect("the testing event loop runs");
    timer.stop();
    match state.get() {
        Wait::Met => {}
        Wait::TimedOut => panic!("gave up waiting for: {what}"),
        Wait::Waiting => {
            panic!("the event loop was quit by something else while waiting for: {what}")
        }
    }
}

/// A fresh data directory and a key directory apart from it, removed at the end; the key
/// directory is published as `KOSTANT_KEY_DIR` (one UI test per process, so no races).
pub struct Scratch {
    pub root: PathBuf,
}

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let root = std::env::temp_dir().join(format!("kostant-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("keys")).unwrap();
        std::env::set_var("KOSTANT_KEY_DIR", root.join("keys"));
        Scratch { root }
    }

    pub fn data(&self) -> PathBuf {
        self.root.join("data")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The app config for a UI test: the real model, history in `data`.
pub fn config(data: &Path) -> kostant_app::ui::AppConfig {
    let mut cfg = kostant_app::ui::AppConfig::new(Ok(kostant_engine::testing::real_model_path()));
    cfg.data_dir = Some(data.to_path_buf());
    cfg
}

/// Shows `ui` on the app with the real model and history in `data`, waits for the model, and
/// makes replies greedy and at most `max_tokens` long.
pub fn open_greedy<R: AppRoot>(
    ui: R,
    data: &Path,
    max_tokens: usize,
) -> (R, std::rc::Rc<kostant_app::ui::App>) {
    ui.show().expect("the testing backend shows windows");
    let app = kostant_app::ui::attach(&ui, config(data));
    wait_ready(&ui);
    {
        let mut chat = app.chat.borrow_mut();
        chat.settings.temperature = 0.0;
        chat.settings.max_tokens = max_tokens;
    }
    (ui, app)
}

/// Waits until the model has loaded and the chat is ready.
pub fn wait_ready<R: AppRoot>(ui: &R) {
    let w = ui.as_weak();
    run_until("the model loads", move || {
        w.upgrade().is_some_and(|ui| ui.chat_state().get_ready())
    });
}
