//! What went wrong in the app: one error type for the controllers, the services behind them
//! and the UI wiring.

use crate::history::HistoryError;

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
