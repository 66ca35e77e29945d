//! The `kostant` command line: the same jobs as the app, for terminals, scripts and CI.

pub mod adapter;
mod adapter_eval;
pub mod bench;
mod bench_documents;
mod bench_grammar;
mod bench_guard;
mod bench_snapshot;
mod bench_speculative;
pub mod chat;
pub mod complete;
pub mod docs;
pub mod doctor;
pub mod eval;
pub mod guard;
mod guard_calibrate;
pub mod history;
pub mod models;
pub mod quantize;
pub mod synth;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use kostant_engine::{KvType, Speculation};

#[derive(Parser, Debug)]
#[command(
    name = "kostant",
    version,
    about = "A private assistant that runs entirely on this device."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Chat with the model: interactive, or one answer with --prompt.
    Chat(ChatArgs),
    /// Continue a text as it is, with no chat template and no system prompt.
    ///
    /// As llama.cpp's llama-completion does: how to check a model file against another engine.
    Complete(complete::CompleteArgs),
    /// List the model files in the models directory and whether they run here.
    ///
    /// Each with its architecture, size, quantization and licence, and why it does not run
    /// when it does not.
    Models(models::ModelsArgs),
    /// Measure prefill and decode speed, time to first token and peak memory.
    Bench(BenchArgs),
    /// List, show, search, delete or export the encrypted chat history.
    History(history::HistoryArgs),
    /// Add your documents to a sealed index, search them, and ask them with citations.
    Docs(docs::DocsArgs),
    /// Check that the network is denied and the model is intact.
    ///
    /// Also that local files and sockets still work.
    Doctor(doctor::DoctorArgs),
    /// Write a GGUF with random weights and a real model's shape, for benchmarks.
    ///
    /// For speed and memory benchmarks only: it is never used to answer anything.
    Synth(synth::SynthArgs),
    /// Train, inspect or try the guard that screens every message and reply.
    Guard(guard::GuardCommandArgs),
    /// Run the safety eval suites through the guarded pipeline and report.
    ///
    /// With --prompts, a prompt file instead of the suites.
    Eval(eval::EvalArgs),
    /// Requantize a GGUF into another weight format (Q8_0, Q4_0, Q4_K, IQ4_XS, ...).
    ///
    /// For the safety evals across quantizations and the per-format checks against llama.cpp.
    Quantize(quantize::QuantizeArgs),
    /// Import, describe or synthesize LoRA adapters for the model.
    Adapter(adapter::AdapterCommandArgs),
}

#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// GGUF model to run (default: the one scripts/setup.sh installs).
    #[arg(long, env = "KOSTANT_MODEL")]
    pub model: Option<PathBuf>,
    /// Worker threads for the matrix kernels (default: the performance cores).
    ///
    /// The performance cores are those within 75% of the fastest core's top speed; every core
    /// where the system does not say.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Context window in tokens (capped at the model's training context).
    #[arg(long, default_value_t = 4096)]
    pub ctx: usize,
    /// Refuse to load a model whose planned footprint exceeds this many MB.
    ///
    /// The footprint is the weights read, the kv cache for --ctx and the scratch buffers.
    #[arg(long, env = "KOSTANT_MEMORY_BUDGET_MB", default_value_t = 3072)]
    pub memory_budget: usize,
}

/// The kv cache's storage, for the commands that run a model (chat, complete, bench, eval).
#[derive(Args, Debug, Clone)]
pub struct KvArgs {
    /// How the kv cache stores keys and values: f16, q8_0 or q4_0.
    ///
    /// f16 is llama.cpp's default (greedy replies match it token for token); q8_0 takes 17/32
    /// of the memory (replies barely change); q4_0 takes 9/32 (replies change noticeably: on
    /// the default model perplexity rises about a twelfth, docs/benchmarks-log.md). q8_0 and q4_0 need
    /// heads a multiple of 32 wide; with them the guard reads on its own f16 session, which
    /// slows decoding a little.
    #[arg(long, default_value_t = KvType::F16)]
    pub kv_type: KvType,
}

/// How a reply's tokens are picked, for the commands that answer (`chat`, `docs ask`).
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 is greedy and deterministic.
    #[arg(long, default_value_t = 0.7, allow_negative_numbers = true)]
    pub temperature: f32,
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    #[arg(long, default_value_t = 1.1)]
    pub repeat_penalty: f32,
    /// Random seed (default: a new one each run).
    #[arg(long)]
    pub seed: Option<u64>,
}

/// Also a `Parser`, so that `kostant` with no subcommand can build the default chat arguments.
#[derive(Parser, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    #[command(flatten)]
    pub adapter: adapter::AdapterArgs,
    /// Answer this one prompt and exit. Without it, chat interactively.
    #[arg(long)]
    pub prompt: Option<String>,
    /// Most tokens to generate per reply.
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// System prompt (default: Kostant's own).
    ///
    /// The tone rules are always added to it. A prompt of your own runs without the chat's
    /// shipped adapter, which learned under Kostant's.
    #[arg(long, conflicts_with = "feature")]
    pub system: Option<String>,
    /// What to do, as the app's chips: chat, summarize, proofread, reply or rewrite.
    ///
    /// The feature's system prompt, and its shipped adapter when the model is the one it was
    /// trained on (see `kostant adapter list`).
    #[arg(long, value_parser = parse_feature)]
    pub feature: Option<kostant_app::features::Feature>,
    /// The feature's system prompt only, not its shipped adapter.
    ///
    /// Plain chat's adapter included.
    #[arg(long, conflicts_with = "adapter")]
    pub no_adapter: bool,
    /// With --feature summarize: a summary of exactly 3 bullets (short) or 5 (medium).
    ///
    /// Each bullet one line starting with "- ", held so by a grammar.
    #[arg(long, value_name = "short|medium")]
    pub length: Option<kostant_app::assistant::choices::SummaryLength>,
    /// With --feature rewrite: the tone, friendlier, formal or shorter.
    ///
    /// A grammar keeps the rewrite to the text itself: its first line cannot end with a colon,
    /// as "Here is the rewritten text:" does.
    #[arg(long, value_name = "friendlier|formal|shorter")]
    pub tone: Option<kostant_app::assistant::choices::Tone>,
    /// One JSON object per line on stdout: a line per token, then a final "done" line.
    #[arg(long)]
    pub json: bool,
    /// Speculative decoding: 'lookup' drafts tokens, 'off' decodes one per pass.
    ///
    /// 'lookup' drafts tokens by looking the conversation's last words up earlier in it and
    /// verifies them in one pass. Replies are the same either way (greedy: token for token;
    /// sampled: in distribution).
    #[arg(long, default_value_t = Speculation::default())]
    pub speculative: Speculation,
    /// A smaller model of the same vocabulary drafts the tokens instead of lookup.
    ///
    /// A smaller file of the same family, say; the reply is the one the main model would write
    /// alone.
    #[arg(long, value_name = "FILE", conflicts_with = "speculative")]
    pub draft_model: Option<PathBuf>,
    #[command(flatten)]
    pub grammar: GrammarArgs,
    #[command(flatten)]
    pub guard: guard::GuardArgs,
    /// Do not save this conversation to the encrypted history.
    #[arg(long)]
    pub no_history: bool,
    /// Go on with conversation ID from the history (`kostant history list`).
    ///
    /// Its saved context is restored instead of read again, and new exchanges are appended to
    /// it.
    #[arg(long = "continue", value_name = "ID", conflicts_with = "no_history")]
    pub continue_id: Option<i64>,
    /// A temporary chat: nothing of it is written anywhere (no messages, no saved context).
    ///
    /// Implies --no-history; what it said is gone when the chat ends.
    #[arg(long, conflicts_with = "continue_id")]
    pub temporary: bool,
    /// Where the history lives.
    ///
    /// Default: $XDG_DATA_HOME/kostant or ~/.local/share/kostant.
    #[arg(long, env = "KOSTANT_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    /// Measure with this adapter on (prefill, decode and time to first token).
    #[command(flatten)]
    pub adapter: adapter::AdapterArgs,
    /// Prompt length for the prefill measurement.
    #[arg(long, default_value_t = 512)]
    pub prompt_tokens: usize,
    /// Tokens generated for the decode measurement.
    #[arg(long, default_value_t = 128)]
    pub gen_tokens: usize,
    /// Tokens already in the context when each measurement starts (llama-bench's -d).
    ///
    /// A later turn of a long chat: prefill, time to first token and decode all run after this
    /// many random tokens.
    #[arg(long, default_value_t = 0)]
    pub depth: usize,
    /// Runs of each measurement; the report gives their mean.
    #[arg(long, default_value_t = 3)]
    pub repetitions: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Also measure the machine's read bandwidth and decode's share of it.
    ///
    /// The bandwidth is measured STREAM-style over 1 GiB; decode's weight traffic is reported
    /// as a fraction of it.
    #[arg(long)]
    pub bandwidth: bool,
    /// Also measure what the guard costs.
    ///
    /// Time to first token and decode speed of a chat reply to a 64-token prompt, with the
    /// guard and without.
    #[arg(long)]
    pub guard: bool,
    #[command(flatten)]
    pub guard_args: guard::GuardArgs,
    /// Instead of the above: the speedup of this drafter on the prompt sets.
    ///
    /// Each prompt of the sets is answered greedily, plain and with the drafter, back to back,
    /// and the speedup is reported per set (replies must be identical). --gen-tokens caps each
    /// reply.
    #[arg(long)]
    pub speculative: Option<Speculation>,
    /// The prompt sets for --speculative (default: assets/evals/speculative).
    ///
    /// A JSONL file of {"id", "prompt"} or a directory of them.
    #[arg(long)]
    pub prompt_set: Option<PathBuf>,
    /// Use only the first N prompts of each set.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Also write each rendered prompt to DIR/<id>.txt.
    ///
    /// To give other engines the same text.
    #[arg(long)]
    pub dump_prompts: Option<PathBuf>,
    /// Instead of the above: time a verify pass against one decode step.
    ///
    /// One pass over a token and k drafts (k = 1..16), after --depth tokens of context.
    #[arg(long)]
    pub verify_cost: bool,
    /// Instead of the above: time restoring a saved context against reading it again.
    ///
    /// The context is opened sealed and its rows copied in, at 512, 2,000 and 4,000 tokens
    /// (those that fit --ctx); also its bytes per token and the time a reply adds to save its
    /// new rows.
    #[arg(long)]
    pub snapshot: bool,
    /// Instead of the above, with --grammar-file or --json-schema: decode speed with the
    /// grammar against without it, on the same completion prompt.
    #[command(flatten)]
    pub grammar: GrammarArgs,
    /// The text the grammar benchmark continues (no chat template).
    #[arg(
        long,
        default_value = "A fictional person described as a JSON object:\n"
    )]
    pub grammar_prompt: String,
    /// Instead of the above: the documents feature's indexing, query and embedding speed.
    #[command(flatten)]
    pub documents: bench_documents::DocumentsBenchArgs,
}

/// Constrains a reply to a grammar (`chat`, `complete`, `bench`).
#[derive(Args, Debug, Clone, Default)]
pub struct GrammarArgs {
    /// Only text this GBNF grammar (llama.cpp's format) accepts may be generated.
    ///
    /// The reply ends where the grammar is complete and allows nothing more.
    #[arg(long, value_name = "FILE", conflicts_with = "json_schema")]
    pub grammar_file: Option<PathBuf>,
    /// Only JSON that this JSON schema accepts may be generated.
    ///
    /// The schema becomes a grammar: objects, arrays, strings, numbers, booleans, null, enum,
    /// const, required, additionalProperties, minItems/maxItems, minLength/maxLength and local
    /// $ref; other keywords are refused by name.
    #[arg(long, value_name = "FILE")]
    pub json_schema: Option<PathBuf>,
}

impl GrammarArgs {
    pub fn is_set(&self) -> bool {
        self.grammar_file.is_some() || self.json_schema.is_some()
    }

    /// Reads and compiles the grammar (no model needed, so a malformed file is refused before
    /// one loads), naming the file and the line and column of the problem.
    pub fn load(&self) -> anyhow::Result<Option<std::sync::Arc<kostant_engine::Grammar>>> {
        use anyhow::Context;
        use kostant_engine::Grammar;
        let (path, compile): (_, fn(&str) -> kostant_engine::Result<Grammar>) =
            match (&self.grammar_file, &self.json_schema) {
                (Some(p), _) => (p, Grammar::parse),
                (None, Some(p)) => (p, Grammar::from_json_schema),
                (None, None) => return Ok(None),
            };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let grammar = compile(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(Some(std::sync::Arc::new(grammar)))
    }
}

/// The draft model at `path` for `model` (`--draft-model`): it must load, fit the memory
/// budget and share the model's vocabulary, each refused with a reason.
pub fn load_draft(
    path: &std::path::Path,
    model: &kostant_engine::Model,
    args: &ModelArgs,
) -> anyhow::Result<kostant_engine::speculative::draft::DraftModel> {
    use anyhow::Context;
    let draft = kostant_engine::Model::load(path)
        .with_context(|| format!("cannot load the draft model {}", path.display()))?;
    draft
        .check_memory_budget_with_kv(args.ctx, KvType::F16, args.memory_budget << 20)
        .with_context(|| format!("cannot load the draft model {}", path.display()))?;
    Ok(kostant_engine::speculative::draft::DraftModel::new(
        draft, model, args.ctx,
    )?)
}

/// Sets the kernel thread count, finds the model and maps it, its budget checked with the
/// default f16 kv cache.
pub fn load_model(args: &ModelArgs) -> anyhow::Result<std::sync::Arc<kostant_engine::Model>> {
    load_model_kv(args, KvType::F16)
}

/// [`load_model`] for a session whose kv cache is stored as `kv_type`.
pub fn load_model_kv(
    args: &ModelArgs,
    kv_type: KvType,
) -> anyhow::Result<std::sync::Arc<kostant_engine::Model>> {
    use anyhow::Context;
    init_threads(args)?;
    let path = crate::model_path::resolve(args.model.as_deref())?;
    let model = kostant_engine::Model::load(&path)
        .with_context(|| format!("cannot load model {}", path.display()))?;
    model
        .check_memory_budget_with_kv(args.ctx, kv_type, args.memory_budget << 20)
        .with_context(|| format!("cannot load model {}", path.display()))?;
    Ok(model)
}

/// Sets the kernel thread count from `--threads` (default: the performance cores) and returns
/// it; [`load_model`] calls it, and so do the commands that run no chat model.
pub fn init_threads(args: &ModelArgs) -> anyhow::Result<usize> {
    let threads = match args.threads {
        Some(0) => anyhow::bail!("--threads must be at least 1"),
        Some(n) => n,
        None => kostant_platform::cpu::performance_cores(),
    };
    kostant_kernels::init_threads(threads)?;
    let _ = THREADS.set(threads);
    Ok(threads)
}

pub fn peak_rss_mb() -> Option<f64> {
    kostant_platform::memory::peak_rss_bytes().map(|b| b as f64 / (1024.0 * 1024.0))
}

static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// The kernel thread count chosen by [`load_model`].
pub fn threads() -> usize {
    THREADS.get().copied().unwrap_or(1)
}

/// `--feature`'s value parser: the error names the features there are.
pub(crate) fn parse_feature(
    id: &str,
) -> std::result::Result<kostant_app::features::Feature, String> {
    kostant_app::features::Feature::parse(id)
}

/// The repository's `assets/<name>` (recognised by `marker` inside it): from the working
/// directory or its parent, else up from the binary (target/<profile>/kostant in a checkout).
pub(crate) fn repo_assets(name: &str, marker: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok();
    let beside_exe = exe
        .iter()
        .flat_map(|e| e.ancestors().skip(1).take(4).map(|up| up.join("assets")));
    [PathBuf::from("assets"), PathBuf::from("../assets")]
        .into_iter()
        .chain(beside_exe)
        .map(|assets| assets.join(name))
        .find(|d| d.join(marker).exists())
}
