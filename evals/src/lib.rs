//! The on-device safety eval suite (issue 5): suites from assets/evals, run through the same
//! guarded pipeline users get (`kostant_safety::pipeline::respond`), judged on device, summed up
//! with 95% Wilson intervals, and reported as JSON, Markdown and SVG. Beside it, the retrieval
//! eval of "ask your documents" (`retrieval`).
//!
//! Dependency rule: this crate depends on `kostant-safety`, `kostant-engine` and
//! `kostant-documents` only.
#![forbid(unsafe_code)]

pub mod calibration;
pub mod error;
pub mod feature_eval;
pub mod judge;
pub mod metrics;
pub mod perplexity;
pub mod quality;
pub mod report;
pub mod retrieval;
pub mod runner;
pub mod stats;
pub mod suite;

pub use error::{EvalError, Result};
pub use judge::{Refusal, Toxicity};
pub use metrics::{summarise, Summary};
pub use report::{compare_markdown, Meta, RunReport};
pub use runner::{ItemResult, ResultsFile, RunOptions, Runner};
pub use stats::{wilson_95, Rate};
pub use suite::{Item, Skipped, SuiteName, SuiteSource};
