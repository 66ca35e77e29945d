//! Which model the app's guard reads with. The built-in head was trained on one model's
//! hidden states (the default model's). A chat on that model is screened on its own passes;
//! a chat on any other model the engine runs (Gemma 3, say) is screened by the guard reading
//! the same text on the head's own model, in a session of its own, as the terminal chat does.
//! The app never answers unscreened: without the head's model there is no chat.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kostant_engine::Model;
use kostant_safety::head::{Head, HeadInfo};
use kostant_safety::Guard;

use super::model_cache::shared_model;
use crate::error::AppError;

/// The built-in head.
pub fn builtin_head() -> Result<Head, AppError> {
    Head::from_bytes(kostant_assets::GUARD_HEAD)
        .map_err(|e| AppError::ModelNotReady(format!("the built-in guard head is damaged: {e}")))
}

/// The guard for the chat model `chat` (mapped from `chat_path`): on `chat` itself when the
/// head reads it, else on the head's own model found by [`guard_model_path`].
pub fn guard_for(chat: &Arc<Model>, chat_path: &Path) -> Result<Guard, AppError> {
    let head = builtin_head()?;
    if head.info.reads(&chat.name(), chat.hparams.n_embd) {
        return Ok(Guard::new(chat.clone(), head)?);
    }
    let Some(path) = guard_model_path(chat_path) else {
        return Err(AppError::ModelNotReady(missing_guard_model(&head.info)));
    };
    Ok(Guard::new(shared_model(&path)?, head)?)
}

/// The file of the head's own model (the manifest's default model): beside the chat model
/// first, then in the models directories. `None` when it is installed nowhere.
pub fn guard_model_path(chat_path: &Path) -> Option<PathBuf> {
    guard_model_path_in(chat_path, &super::model_dirs::search_dirs())
}

/// [`guard_model_path`] searching `dirs` after the chat model's own directory.
pub fn guard_model_path_in(chat_path: &Path, dirs: &[PathBuf]) -> Option<PathBuf> {
    let manifest = kostant_assets::ModelManifest::builtin().ok()?;
    let file = &manifest.default_model().ok()?.file;
    chat_path
        .parent()
        .into_iter()
        .chain(dirs.iter().map(PathBuf::as_path))
        .map(|dir| dir.join(file))
        .find(|p| p.is_file())
}

/// Bytes the guard holds beside a chat on `chat` with a context of `n_ctx` tokens: its own
/// session's kv cache and scratch ([`Guard::own_session_plan`]; a guard riding along makes it
/// too, for a quantized cache, an adapter below a tap, or the first message with Unicode tricks
/// or a hidden payload to read apart, and keeps it) with the session a long message is read on,
/// and, when it reads with another model than `chat`, that model's weights. On the chat's own
/// model a message is at most `n_ctx` tokens; on another, its length in the guard model's
/// tokens is not bounded by the chat's context, so the guard's whole context counts.
pub fn guard_bytes(guard: &Guard, chat: &Arc<Model>, n_ctx: usize) -> u64 {
    let bytes = match Arc::ptr_eq(guard.model(), chat) {
        true => {
            let own = guard.own_session_plan_for(n_ctx);
            own.kv + own.scratch
        }
        false => guard.own_session_plan().total(),
    };
    bytes as u64
}

/// The head's own model as a person knows it: the manifest's name for the default model
/// ("SmolLM2 135M Instruct"), else the name the head records.
pub fn guard_model_name(head: &HeadInfo) -> String {
    kostant_assets::ModelManifest::builtin()
        .ok()
        .and_then(|m| m.default_model().ok().map(|d| d.name.clone()))
        .unwrap_or_else(|| head.model_name.clone())
}

/// Why a model the head does not read cannot be screened: its own model is not installed.
pub fn missing_guard_model(head: &HeadInfo) -> String {
    format!(
        "the safety guard reads with {} and that model is not installed beside this one",
        guard_model_name(head)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_model_is_named_as_a_person_knows_it() {
        let head = builtin_head().unwrap().info;
        assert_eq!(guard_model_name(&head), "SmolLM2 135M Instruct");
        let why = missing_guard_model(&head);
        assert_eq!(
            why,
            "the safety guard reads with SmolLM2 135M Instruct and that model is not installed beside this one"
        );
        // Not the GGUF's general.name ("Smollm2 135M 8k Lc100K Mix1 Ep2").
        assert!(!why.contains(&head.model_name), "{why}");
    }
}
