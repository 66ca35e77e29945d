//! The one error type of the engine crate. Messages start lower case and name what was wrong.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The file could not be opened or read at all.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The GGUF file is malformed, truncated, hostile or uses something we do not support.
    #[error("gguf: {0}")]
    Gguf(String),
    /// The GGUF is well formed but does not describe a model we can run.
    #[error("model: {0}")]
    Model(String),
    /// The vocabulary in the GGUF cannot be turned into a tokenizer, or text cannot be tokenized.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template in the GGUF cannot be rendered.
    #[error("chat template: {0}")]
    Template(String),
    /// The prompt (plus the tokens to generate) does not fit the context window.
    #[error("prompt is {prompt_tokens} tokens but the context holds {context} (reserve room to generate, or shorten the conversation)")]
    ContextOverflow {
        prompt_tokens: usize,
        context: usize,
    },
    /// A LoRA adapter file that cannot be used: malformed, or made for another base model. The
    /// message names the adapter and, for a mismatch, the model.
    #[error("adapter: {0}")]
    Adapter(String),
    /// A context snapshot that cannot be restored: malformed, or made for another model, cache
    /// or adapter. The message says which, for a person.
    #[error("context snapshot: {0}")]
    Snapshot(String),
    /// A request that cannot be served as asked (empty prompt, bad sampling parameter).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// Loading the model with this context would need more memory than the budget allows.
    #[error("model needs {planned_mb} MB (weights {weights_mb} MB, kv cache {kv_mb} MB for {n_ctx} tokens, scratch {scratch_mb} MB) but the memory budget is {budget_mb} MB: use a smaller model or context, or raise the budget")]
    MemoryBudget {
        planned_mb: usize,
        weights_mb: usize,
        kv_mb: usize,
        scratch_mb: usize,
        n_ctx: usize,
        budget_mb: usize,
    },
    /// A GBNF grammar that cannot be used: malformed (the message gives its line and column),
    /// left-recursive, referring to an undefined rule, or past a size cap.
    #[error("{0}")]
    Grammar(String),
    /// A JSON schema that cannot become a grammar: malformed JSON (with its line and column) or
    /// a keyword the converter does not support.
    #[error("json schema: {0}")]
    JsonSchema(String),
    #[error("kernel: {0}")]
    Kernel(#[from] kostant_kernels::KernelError),
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
