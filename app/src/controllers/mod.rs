//! The app's logic in plain Rust, tested without a UI: each screen has a controller that owns
//! its state and exposes what the screen shows as plain data; `ui/` only copies that data into
//! Slint models and forwards clicks.
//!
//! Controllers live on the UI thread. Anything slow (generation, model loading, hashing the
//! model file, eval runs) runs on a worker thread that reports back over a channel; the worker
//! calls a `notify` hook after each report so the UI can schedule a `pump` on its event loop.

pub mod chat;
pub mod evals;
pub mod history;
pub mod lifecycle;
pub mod network;
pub mod prefixes;
pub mod settings;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::history::{HistoryError, Store};

/// The encrypted history, shared by the chat (which saves exchanges) and the History screen
/// (which lists and deletes). One connection, so that `delete_all`'s new data key is the one
/// the next save uses.
pub type SharedStore = Rc<RefCell<Store>>;

/// Called by worker threads when they have something for the UI thread to pump.
pub type Notify = Arc<dyn Fn() + Send + Sync>;

/// A `Notify` that does nothing: for tests that pump by waiting.
pub fn no_notify() -> Notify {
    Arc::new(|| {})
}

/// What went wrong in the app. Messages name the thing that was wrong.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    History(#[from] HistoryError),
    #[error(transparent)]
    Engine(#[from] kostant_engine::EngineError),
    #[error(transparent)]
    Asset(#[from] kostant_assets::AssetError),
    #[error("the safety guard: {0}")]
    Safety(#[from] kostant_safety::SafetyError),
    #[error("the safety evals: {0}")]
    Eval(#[from] kostant_evals::EvalError),
    #[error("kernel threads: {0}")]
    Threads(String),
    #[error("a reply is being generated; stop it first")]
    Busy,
    #[error("the message is empty")]
    EmptyMessage,
    #[error("there is no {0} to act on")]
    Nothing(&'static str),
    #[error("the model is not loaded: {0}")]
    ModelNotReady(String),
    #[error("the {0} worker thread has stopped")]
    WorkerGone(&'static str),
    #[error("the history is off (no data directory or key)")]
    HistoryOff,
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("ui: {0}")]
    Ui(String),
}

#[cfg(test)]
mod tests;
