//! The services behind the screens, with no UI state: the guarded responder and the chat's
//! worker thread, the document index, the process-wide model cache, prompt fitting, the eval suite runner, which
//! model the guard reads with, the installed models and the features' shipped adapters.
//! Controllers (`crate::controllers`) own handles to these and translate between them and what
//! a screen shows; the CLI calls them directly.

pub mod ask;
pub mod choices;
pub mod documents;
pub mod feature_adapters;
pub mod guard_model;
pub mod installed_models;
pub mod model_cache;
pub mod model_dirs;
pub mod notices;
pub mod prefixes;
pub mod prompt;
pub mod proofread;
pub mod responder;
pub mod suite_runner;
pub mod worker;

use std::sync::Arc;

/// Called by worker threads when they have something for the UI thread to pump.
pub type Notify = Arc<dyn Fn() + Send + Sync>;

/// A `Notify` that does nothing: for tests that pump by waiting.
pub fn no_notify() -> Notify {
    Arc::new(|| {})
}
