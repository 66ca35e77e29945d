//! The process-wide model cache: a model file is mapped once however many parts of the app
//! read it (the chat, its guard, the eval runner).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use kostant_engine::Model;

use crate::error::AppError;

/// The model at `path`, mapped once however many parts of the app ask (the chat and its
/// guard, the eval runner): later calls get the same `Arc` while any holder keeps it alive.
pub fn shared_model(path: &Path) -> Result<Arc<Model>, AppError> {
    static LOADED: Mutex<Vec<(PathBuf, Weak<Model>)>> = Mutex::new(Vec::new());
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    // A poisoned lock only means another loader panicked; the list itself is still sound.
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    loaded.retain(|(_, w)| w.strong_count() > 0);
    if let Some(m) = loaded
        .iter()
        .find(|(p, _)| *p == key)
        .and_then(|(_, w)| w.upgrade())
    {
        return Ok(m);
    }
    let model = Model::load(path)?;
    loaded.push((key, Arc::downgrade(&model)));
    Ok(model)
}
