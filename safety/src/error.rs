use thiserror::Error;

#[derive(Debug, Error)]
pub enum SafetyError {
    #[error(transparent)]
    Engine(#[from] kostant_engine::EngineError),
    #[error("guard head: {0}")]
    Head(String),
    #[error("guard head file {path}: {msg}")]
    HeadFile {
        path: std::path::PathBuf,
        msg: String,
    },
    #[error("training data {path}, line {line}: {msg}")]
    Data {
        path: std::path::PathBuf,
        line: usize,
        msg: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("the guard and the chat model disagree: {0}")]
    Mismatch(String),
}

pub type Result<T, E = SafetyError> = std::result::Result<T, E>;
