//! The always-resident guard: a classification head over the hidden states of a small model run
//! by our own engine. It screens every prompt before generation and the reply while it streams,
//! and the policy turns a flag into a short, warm refusal.
//!
//! Dependency rule: this crate depends on `kostant-engine` (and through it the kernels) and on
//! no other crate of ours.
#![forbid(unsafe_code)]

pub mod confidence;
pub mod error;
pub mod features;
pub mod guard;
pub mod head;
pub mod normalize;
pub mod parts;
pub mod pipeline;
pub mod policy;
pub mod reader;
pub mod replies;
pub mod scores;
pub mod taxonomy;
pub mod train;
pub mod train_long_replies;
pub mod train_parts;

pub use error::{Result, SafetyError};
pub use guard::{Guard, ReplyScreen, Screening};
pub use pipeline::{
    close_exchange, respond, verdict_fields, GuardReport, Reply, ReplyEvent, RunningReply,
    StoppedBy, StreamEvent, Verdict,
};
pub use taxonomy::Category;
