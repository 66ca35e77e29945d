//! The crate's one error type.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("unknown suite {0:?} (known: harmful, benign_edgy, benign_everyday, provocation, jailbreak, multiturn, long, perplexity, retrieval, all)")]
    UnknownSuite(String),
    #[error("{path}: no usable items ({skipped} lines skipped)")]
    EmptySuite { path: PathBuf, skipped: usize },
    #[error("results file {path} line {line}: {reason}")]
    Results {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("questions file {path} line {line}: {reason}")]
    Questions {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error(transparent)]
    Documents(#[from] kostant_documents::IngestError),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Safety(#[from] kostant_safety::SafetyError),
    #[error(transparent)]
    Engine(#[from] kostant_engine::EngineError),
    #[error("cancelled")]
    Cancelled,
}

pub type Result<T> = std::result::Result<T, EvalError>;

pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> EvalError + '_ {
    move |source| EvalError::Io {
        path: path.to_path_buf(),
        source,
    }
}
