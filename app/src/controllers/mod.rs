//! The app's logic in plain Rust, tested without a UI: each screen has a controller that owns
//! its state and exposes what the screen shows as plain data; `ui/` only copies that data into
//! Slint models and forwards clicks.
//!
//! Controllers live on the UI thread. Anything slow (generation, model loading, hashing the
//! model file, eval runs) runs on a worker thread that reports back over a channel; the worker
//! calls a `notify` hook after each report so the UI can schedule a `pump` on its event loop.

pub mod chat;
pub mod documents;
pub mod evals;
pub mod history;
pub mod lifecycle;
pub mod message;
pub mod network;
pub mod privacy;
pub mod proofread;
pub mod settings;

use std::cell::RefCell;
use std::rc::Rc;

use crate::history::Store;

/// The encrypted history, shared by the chat (which saves exchanges) and the History screen
/// (which lists and deletes). One connection, so that `delete_all`'s new data key is the one
/// the next save uses.
pub type SharedStore = Rc<RefCell<Store>>;

pub use crate::assistant::{no_notify, Notify};
pub use crate::error::AppError;

#[cfg(test)]
mod tests;
