//! `kostant guard`: train the guard's head, screen text with it, and say what is loaded.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;

use kostant_engine::Model;
use kostant_safety::confidence::RuleReport;
use kostant_safety::head::Head;
use kostant_safety::head::TrainConfig;
use kostant_safety::replies::ReplyPlan;
use kostant_safety::train::{
    pick_categories, read_jsonl, train_head, Context as TrainContext, LabelledText, TrainOptions,
};
use kostant_safety::train_long_replies::{train_long_reply_head, LongReplyOptions};
use kostant_safety::train_parts::{train_parts_head, PartsData, PartsOptions};
use kostant_safety::Guard;

use super::{load_model, ModelArgs};

#[derive(Args, Debug, Clone)]
pub struct GuardArgs {
    /// The guard's model (default: the embedded default model).
    ///
    /// Shared with the chat model when they are the same file.
    #[arg(long, env = "KOSTANT_GUARD_MODEL")]
    pub guard_model: Option<PathBuf>,
    /// The guard's trained head (default: the one built into this binary).
    ///
    /// The built-in head is assets/safety/guard-head.bin.
    #[arg(long, env = "KOSTANT_GUARD_HEAD")]
    pub guard_head: Option<PathBuf>,
    /// A message judge's head, for experiments (default: none).
    ///
    /// It judges every message the guard reads in one window, on a model of its own
    /// (`--message-model`), in place of the guard's head. It is off by default; why:
    /// scripts/safety-data/round-5-rule.md.
    #[arg(long, env = "KOSTANT_MESSAGE_HEAD", requires = "message_model")]
    pub message_head: Option<PathBuf>,
    /// The message judge's model.
    ///
    /// Shared with the chat or guard model when it is the same file.
    #[arg(long, env = "KOSTANT_MESSAGE_MODEL", requires = "message_head")]
    pub message_model: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct GuardCommandArgs {
    #[command(subcommand)]
    pub command: GuardCommand,
    #[command(flatten)]
    pub guard: GuardArgs,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// The data a long-message head learns from, and where the head goes.
#[derive(Args, Debug, Clone)]
pub struct LongTextData {
    #[arg(long, default_value = "assets/safety")]
    data: PathBuf,
    /// Files of pasted texts, read in order.
    ///
    /// A request line, a blank line, the text; one a line, newlines as \n. Give it again for
    /// more files (every third text of the whole is dev).
    #[arg(
        long,
        default_value = "scripts/safety-data/authored/summarize_long_texts.txt"
    )]
    long_texts: Vec<PathBuf>,
    #[arg(long, default_value = "assets/safety/guard-head.bin")]
    out: PathBuf,
}

impl LongTextData {
    /// The long texts and the main head's train and dev splits.
    fn read(&self) -> Result<(Vec<String>, Vec<LabelledText>, Vec<LabelledText>)> {
        Ok((
            read_long_text_files(&self.long_texts)?,
            read_jsonl(&self.data.join("train.jsonl"))?,
            read_jsonl(&self.data.join("dev.jsonl"))?,
        ))
    }
}

/// How a head is trained: its width and how long, and how many seeds are averaged.
#[derive(Args, Debug, Clone, Copy)]
pub struct HeadShape {
    /// Hidden layer width (0: a linear head).
    #[arg(long, default_value_t = 256)]
    hidden: usize,
    #[arg(long, default_value_t = 20)]
    epochs: usize,
    /// Heads trained from consecutive seeds and averaged into one.
    ///
    /// They are stored as one head this many times as wide.
    #[arg(long, default_value_t = 3)]
    members: usize,
}

impl HeadShape {
    fn apply(self, config: &mut TrainConfig) {
        config.hidden = self.hidden;
        config.epochs = self.epochs;
        config.members = self.members;
    }
}

#[derive(Subcommand, Debug)]
pub enum GuardCommand {
    /// Train the head from labelled data.
    ///
    /// It reads train.jsonl, dev.jsonl and augment_templates.jsonl in --data.
    Train(TrainArgs),
    /// Choose the threshold for screening replies and write it into the head.
    ///
    /// It is chosen on the replies to the dev prompts.
    Calibrate(CalibrateArgs),
    /// Pick when the head may name a hazard category to the user.
    ///
    /// A rule per category over its category outputs, chosen on the dev split so that no
    /// flagged safe dev text is shown a category; the head is written with them, its weights
    /// and thresholds unchanged.
    PickCategories(PickCategoriesArgs),
    /// Screen text and print the guard's judgement.
    ///
    /// The text is --text, or one message per stdin line.
    Screen(ScreenArgs),
    /// Train the head that judges a long message part by part.
    ///
    /// A message longer than one window is judged by its parts (lines, and sentences of long
    /// lines), on the loaded head's taps; the loaded head is written with it attached, its
    /// weights, thresholds and rules unchanged.
    TrainParts(TrainPartsArgs),
    /// Train the head that judges the replies to long messages.
    ///
    /// It judges the reply to a message the parts head judged (longer than one window), on the
    /// loaded head's taps; the loaded head (which must have a parts head) is written with it
    /// attached, everything else unchanged.
    TrainLongReplies(TrainLongRepliesArgs),
    /// Write the loaded head with another head file's long-message heads.
    ///
    /// That file's parts and long-reply heads take the place of the loaded head's own, so a
    /// main head retrained on short texts keeps the long-message heads it was measured with;
    /// everything else unchanged.
    CarryLongHeads(CarryLongHeadsArgs),
    /// Write the loaded head with another head file's main head judging replies.
    ///
    /// That head's weights, reply threshold and category rules judge replies to messages read
    /// whole; the loaded head keeps judging messages. A head retrained on the features' replies
    /// (`train --feature-replies`) can so judge replies without changing what messages pass.
    TakeReplyHead(TakeReplyHeadArgs),
    /// Show the loaded head: its model, features, threshold, training record, memory.
    Info,
}

#[derive(Args, Debug)]
pub struct TrainArgs {
    #[arg(long, default_value = "assets/safety")]
    data: PathBuf,
    #[arg(long, default_value = "assets/safety/guard-head.bin")]
    out: PathBuf,
    #[command(flatten)]
    shape: HeadShape,
    /// Highest share of dev safe prompts the chosen threshold may flag.
    #[arg(long, default_value_t = 0.08)]
    max_dev_false_positive: f64,
    /// Lowest recall on the dev prompts, reached by flagging more safe prompts.
    ///
    /// Where the false-positive cap leaves the recall lower, the threshold is lowered until it
    /// is reached (not in the shipped recipe; scripts/safety-data/round-4-rule.md).
    #[arg(long, value_parser = parse_share)]
    min_dev_recall: Option<f64>,
    /// Tokens of the chat model's reply to each prompt that the head also learns from.
    ///
    /// The greedy reply to each train and dev prompt, read as the screen reads a streaming
    /// reply; 0 learns messages only.
    #[arg(long, default_value_t = 48)]
    reply_tokens: usize,
    /// Highest share of replies to safe dev prompts the reply threshold may stop.
    #[arg(long, default_value_t = 0.02)]
    max_dev_reply_false_positive: f64,
    /// Keep computed features here between runs (keyed by model, features and data).
    #[arg(long)]
    features_cache: Option<PathBuf>,
    /// Copies of each window of a long safe text with an unsafe request buried in it.
    ///
    /// This many per window, each request from the same split (0: none, as the committed
    /// head).
    #[arg(long, default_value_t = 0)]
    buried_per_window: usize,
    /// Most tokens of a message read in one window.
    ///
    /// A longer message is read in windows overlapping by half, the worst deciding; the
    /// default is the spec new heads ship with.
    #[arg(long)]
    window: Option<usize>,
    /// Layers whose hidden states the head reads, comma-separated.
    ///
    /// 0 is the embeddings, n_layer is after the final norm; the default is the spec new heads
    /// ship with.
    #[arg(long, value_delimiter = ',')]
    taps: Option<Vec<usize>>,
    /// The features' data, DIR/<feature>/{train,dev}.jsonl.
    ///
    /// Each feature's inputs are learned as safe messages under its system prompt, and a share
    /// of the guard's own texts is read under the features' prompts too.
    #[arg(long, default_value = "assets/adapters")]
    feature_data: PathBuf,
    /// Train under the default system prompt alone, not the features' prompts too.
    #[arg(long)]
    no_feature_contexts: bool,
    /// Also learn the chat model's replies to each feature's own inputs.
    ///
    /// The replies are read under the feature's prompt, and the reply cap holds on each
    /// feature's dev replies apart (not in the shipped recipe;
    /// scripts/safety-data/pending/README.md).
    #[arg(long, conflicts_with = "no_feature_contexts")]
    feature_replies: bool,
}

#[derive(Args, Debug)]
pub struct CalibrateArgs {
    #[arg(long, default_value = "assets/safety")]
    data: PathBuf,
    #[arg(long, default_value = "assets/safety/guard-head.bin")]
    out: PathBuf,
    /// Tokens generated per dev reply.
    #[arg(long, default_value_t = 48)]
    max_tokens: usize,
    /// Highest share of replies to safe dev prompts the threshold may stop.
    #[arg(long, default_value_t = 0.02)]
    max_dev_false_positive: f64,
}

#[derive(Args, Debug)]
pub struct PickCategoriesArgs {
    #[arg(long, default_value = "assets/safety")]
    data: PathBuf,
    #[arg(long, default_value = "assets/safety/guard-head.bin")]
    out: PathBuf,
    /// Tokens of the chat model's reply to each dev prompt read as well.
    ///
    /// The greedy reply, so that the rule also covers replies the guard withdraws (as
    /// training reads them); 0 reads messages only.
    #[arg(long, default_value_t = 48)]
    reply_tokens: usize,
    /// Keep computed features here between runs (shared with `guard train`).
    #[arg(long)]
    features_cache: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ScreenArgs {
    #[arg(long)]
    text: Option<String>,
    /// Screen as an assistant's reply to this message rather than as a user's message.
    #[arg(long, value_name = "MESSAGE")]
    reply_to: Option<String>,
    /// Read the text under this feature's system prompt, as the app's chip frames it.
    ///
    /// Default: the prompt the head was trained with.
    #[arg(long, value_parser = super::parse_feature)]
    feature: Option<kostant_app::features::Feature>,
}

#[derive(Args, Debug)]
pub struct TrainPartsArgs {
    #[command(flatten)]
    texts: LongTextData,
    #[command(flatten)]
    shape: HeadShape,
    /// Copies of each long train text with requests buried in it.
    #[arg(long, default_value_t = 3)]
    buried_copies: usize,
    /// Requests buried in each copy.
    #[arg(long, default_value_t = 3)]
    requests_per_copy: usize,
    /// Copies of each long train text with one request inline, inside a paragraph.
    ///
    /// 0 in the shipped recipe; why: scripts/safety-data/pending/README.md.
    #[arg(long, default_value_t = 0)]
    inline_copies: usize,
    /// Highest share of clean dev texts the threshold may flag.
    #[arg(long, default_value_t = 0.03)]
    max_dev_false_positive: f64,
}

#[derive(Args, Debug)]
pub struct TrainLongRepliesArgs {
    // The same texts and train/dev split as train-parts.
    #[command(flatten)]
    texts: LongTextData,
    #[command(flatten)]
    shape: HeadShape,
    /// Most tokens of each reply learned and judged (the eval's replies are 64).
    #[arg(long, default_value_t = 64)]
    reply_tokens: usize,
    /// Train prompts whose replies are learned too, a random sample.
    #[arg(long, default_value_t = 400)]
    reply_prompts: usize,
    /// Highest share of replies to clean dev texts the threshold may stop.
    #[arg(long, default_value_t = 0.03)]
    max_dev_false_positive: f64,
}

#[derive(Args, Debug)]
pub struct CarryLongHeadsArgs {
    /// The head file whose parts and long-reply heads are carried over.
    #[arg(long, default_value = "assets/safety/guard-head.bin")]
    from: PathBuf,
    #[arg(long)]
    out: PathBuf,
    /// Carry only the long-reply head, keeping the loaded head's parts head.
    ///
    /// For a head just through train-parts, which drops the long-reply head.
    #[arg(long)]
    long_replies_only: bool,
}

#[derive(Args, Debug)]
pub struct TakeReplyHeadArgs {
    /// The head file whose main head judges the replies.
    #[arg(long)]
    from: PathBuf,
    #[arg(long)]
    out: PathBuf,
}

/// Which head a guard runs: the one built into the binary or a file given by `--guard-head` /
/// `KOSTANT_GUARD_HEAD`, with the start of its sha256, so a swapped head is never mistaken for
/// the shipped one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeadId {
    /// `None`: the built-in head.
    pub path: Option<PathBuf>,
    /// The first 12 hex digits of the head file's sha256.
    pub sha256: String,
    /// The message judge's head, when the guard has one.
    pub messages: Option<Box<HeadId>>,
}

impl HeadId {
    fn of(path: Option<&std::path::Path>, bytes: &[u8]) -> HeadId {
        let mut sha256 = kostant_assets::sha256_hex(bytes);
        sha256.truncate(12);
        HeadId {
            path: path.map(|p| p.to_path_buf()),
            sha256,
            messages: None,
        }
    }

    pub fn json(&self) -> serde_json::Value {
        json!({
            "source": if self.path.is_some() { "file" } else { "built-in" },
            "path": self.path.as_ref().map(|p| p.display().to_string()),
            "sha256": self.sha256,
            "message_head": self.messages.as_ref().map(|m| m.json()),
        })
    }
}

impl std::fmt::Display for HeadId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.path {
            None => write!(f, "built-in head (sha256 {})", self.sha256)?,
            Some(p) => write!(f, "head {} (sha256 {})", p.display(), self.sha256)?,
        }
        match &self.messages {
            Some(m) => write!(f, "; messages: {m}"),
            None => Ok(()),
        }
    }
}

/// A head file and its bytes (the bytes name it: `HeadId`); either error names the file.
fn read_head_file(path: &Path) -> Result<(Head, Vec<u8>)> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read the guard head {}", path.display()))?;
    let head = Head::from_bytes(&bytes)
        .map_err(|e| anyhow::anyhow!("guard head file {}: {e}", path.display()))?;
    Ok((head, bytes))
}

/// The guard of the model `model` names (the default one when none), for the guard's own
/// commands.
fn guard_of(model: &ModelArgs, guard: &GuardArgs) -> Result<Guard> {
    let path = crate::model_path::resolve(model.model.as_deref())?;
    let chat = load_model(model)?;
    load_guard(guard, &chat, &path)
}

/// The guard for `chat_model`: the same model when the guard model is the same file.
pub fn load_guard(
    args: &GuardArgs,
    chat_model: &Arc<Model>,
    chat_path: &std::path::Path,
) -> Result<Guard> {
    Ok(load_guard_named(args, chat_model, chat_path)?.0)
}

/// [`load_guard`], and which head it runs.
pub fn load_guard_named(
    args: &GuardArgs,
    chat_model: &Arc<Model>,
    chat_path: &std::path::Path,
) -> Result<(Guard, HeadId)> {
    // The default model when it is installed; otherwise the chat model itself, which the
    // head accepts only if it is the model the head was trained on.
    let guard_path = match &args.guard_model {
        Some(p) => p.clone(),
        None => crate::model_path::resolve(None).unwrap_or_else(|_| chat_path.to_path_buf()),
    };
    let model = if same_file(&guard_path, chat_path) {
        chat_model.clone()
    } else {
        Model::load(&guard_path)
            .with_context(|| format!("cannot load the guard model {}", guard_path.display()))?
    };
    let (head, id) = match &args.guard_head {
        Some(p) => {
            let (head, bytes) = read_head_file(p)?;
            (head, HeadId::of(Some(p.as_path()), &bytes))
        }
        None => (
            Head::from_bytes(kostant_assets::GUARD_HEAD)
                .map_err(|e| anyhow::anyhow!("the built-in guard head is damaged: {e}"))?,
            HeadId::of(None, kostant_assets::GUARD_HEAD),
        ),
    };
    let guard = Guard::new(model.clone(), head).context("cannot start the guard")?;
    let loaded = [(chat_model, chat_path), (&model, guard_path.as_path())];
    match load_message_judge(args, &loaded)? {
        Some((judge, judge_id)) => Ok((
            guard
                .with_message_judge(judge)
                .context("cannot start the guard")?,
            HeadId {
                messages: Some(Box::new(judge_id)),
                ..id
            },
        )),
        None => Ok((guard, id)),
    }
}

/// The message judge `args` ask for (`--message-head` on `--message-model`), if any. A model
/// already loaded (`loaded`) is shared when it is the same file.
fn load_message_judge(
    args: &GuardArgs,
    loaded: &[(&Arc<Model>, &Path)],
) -> Result<Option<(Guard, HeadId)>> {
    let (Some(head_path), Some(path)) = (&args.message_head, &args.message_model) else {
        return Ok(None);
    };
    let (head, bytes) = read_head_file(head_path)?;
    let id = HeadId::of(Some(head_path.as_path()), &bytes);
    let model = match loaded.iter().find(|(_, p)| same_file(p, path)) {
        Some((m, _)) => (*m).clone(),
        None => Model::load(path)
            .with_context(|| format!("cannot load the message judge's model {}", path.display()))?,
    };
    let judge = Guard::new(model, head).context("cannot start the message judge")?;
    Ok(Some((judge, id)))
}

/// Whether two paths name the same existing file (so its model is mapped once).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Each feature's system prompt with its train and dev inputs as users send them
/// (`Example::user_message`), for [`TrainOptions::contexts`]; the test splits stay unread.
/// With `replies_on` (the chat's model), each context also gets the feature's shipped adapter for
/// that model, under which its replies are generated; messages never need it.
fn feature_contexts(
    dir: &std::path::Path,
    replies_on: Option<&Arc<Model>>,
) -> Result<Vec<TrainContext>> {
    use kostant_app::features::Feature;
    use kostant_evals::feature_eval::{load_split, Task};
    let mut adapters = replies_on
        .map(|m| kostant_app::assistant::feature_adapters::FeatureAdapters::new(m.clone()));
    let mut out = Vec::new();
    for task in Task::ALL {
        let feature = Feature::parse(task.id()).map_err(anyhow::Error::msg)?;
        let split = |name: &str| -> Result<Vec<String>> {
            let path = dir.join(task.id()).join(format!("{name}.jsonl"));
            let examples = load_split(&path)
                .with_context(|| format!("reading {} (--feature-data)", path.display()))?;
            Ok(examples.iter().map(|e| e.user_message(task)).collect())
        };
        out.push(TrainContext {
            name: task.id().to_string(),
            system_prompt: feature.system_prompt(),
            train: split("train")?,
            dev: split("dev")?,
            // The shipped adapter for this model, as the app runs the feature; none when this
            // model has none (the prompt alone, as the app falls back).
            adapter: match &mut adapters {
                Some(adapters) => adapters.get(feature)?.ok(),
                None => None,
            },
        });
    }
    Ok(out)
}

/// The texts of every file in `paths`, in order: the first file's texts keep their places (and
/// so their train/dev split) when more files follow.
fn read_long_text_files(paths: &[PathBuf]) -> Result<Vec<String>> {
    let mut texts = Vec::new();
    for path in paths {
        texts.extend(read_long_texts(path)?);
    }
    Ok(texts)
}

/// Pasted texts, one a line with newlines written as `\n`; `#` lines are comments.
fn read_long_texts(path: &std::path::Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading {} (--long-texts)", path.display()))?;
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.replace("\\n", "\n"))
        .collect())
}

/// A share from 0 to 1, as `--min-dev-recall` takes it.
fn parse_share(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{s} is not a share from 0 to 1 (0.98 is 98%)")),
    }
}

pub fn run(args: GuardCommandArgs) -> Result<()> {
    let (model, guard) = (&args.model, &args.guard);
    match args.command {
        GuardCommand::Train(a) => train(model, a),
        GuardCommand::PickCategories(a) => pick_head_categories(model, guard, a),
        GuardCommand::Calibrate(a) => calibrate(model, guard, a),
        GuardCommand::Screen(a) => screen(model, guard, a),
        GuardCommand::TrainParts(a) => train_parts(model, guard, a),
        GuardCommand::TrainLongReplies(a) => train_long_replies(model, guard, a),
        GuardCommand::CarryLongHeads(a) => carry_long_heads(model, guard, a),
        GuardCommand::TakeReplyHead(a) => take_reply_head(model, guard, a),
        GuardCommand::Info => info(model, guard),
    }
}

/// Saves `head` to `out` and says so on stderr: "wrote OUT" followed by `report`'s text, made
/// once the file is written (so a time in it counts the writing).
pub(super) fn write_head(
    head: &Head,
    out: &Path,
    report: impl FnOnce() -> Result<String>,
) -> Result<()> {
    head.save(out)?;
    eprintln!("wrote {}{}", out.display(), report()?);
    Ok(())
}

/// `write_head`'s report for a long-message head: the time since `start`, then the training
/// report as pretty JSON.
fn timed_report(start: std::time::Instant, report: &impl serde::Serialize) -> Result<String> {
    Ok(format!(
        " in {:.0} s\n{}",
        start.elapsed().as_secs_f64(),
        serde_json::to_string_pretty(report)?
    ))
}

/// `kostant guard train`: trains a head on the chat model and writes it.
fn train(model_args: &ModelArgs, a: TrainArgs) -> Result<()> {
    if a.feature_replies && a.reply_tokens == 0 {
        bail!("--feature-replies learns replies: it needs --reply-tokens above 0");
    }
    let model = load_model(model_args)?;
    let opts = train_options(&a, &model)?;
    let start = std::time::Instant::now();
    let trained = train_head(model, &opts, &mut progress_printer())?;
    write_head(&trained.head, &a.out, || {
        Ok(format!(
            " in {:.0} s: threshold {:.3}; dev recall {:.3}, dev false positives {:.3} ({} unsafe, {} safe)",
            start.elapsed().as_secs_f64(),
            trained.head.info.threshold,
            trained.dev.recall,
            trained.dev.false_positive_rate,
            trained.dev.n_unsafe,
            trained.dev.n_safe
        ))
    })?;
    if let (Some(t), Some(r)) = (trained.head.info.output_threshold, &trained.dev_replies) {
        eprintln!(
            "reply threshold {t:.3}; dev replies stopped: {:.3} of unsafe, {:.3} of safe ({} unsafe, {} safe)",
            r.recall, r.false_positive_rate, r.n_unsafe, r.n_safe
        );
    }
    print_category_rules(&trained.head, &trained.categories);
    Ok(())
}

/// `guard train`'s arguments as the trainer's options (the features' contexts read here).
fn train_options(a: &TrainArgs, model: &Arc<Model>) -> Result<TrainOptions> {
    let mut opts = TrainOptions::new(a.data.clone());
    if !a.no_feature_contexts {
        opts.contexts = feature_contexts(&a.feature_data, a.feature_replies.then_some(model))?;
    }
    opts.context_replies = a.feature_replies;
    opts.buried_per_window = a.buried_per_window;
    if let Some(taps) = &a.taps {
        opts.spec.taps = taps.clone();
    }
    if let Some(window) = a.window {
        opts.spec.window = window;
    }
    a.shape.apply(&mut opts.config);
    opts.max_dev_false_positive = a.max_dev_false_positive;
    opts.min_dev_recall = a.min_dev_recall;
    opts.max_dev_reply_false_positive = a.max_dev_reply_false_positive;
    opts.replies = opts
        .replies
        .filter(|_| a.reply_tokens > 0)
        .map(|plan| ReplyPlan {
            max_tokens: a.reply_tokens,
            ..plan
        });
    opts.cache = a.features_cache.clone();
    Ok(opts)
}

/// `kostant guard pick-categories`: the loaded head with new category rules.
fn pick_head_categories(model: &ModelArgs, guard: &GuardArgs, a: PickCategoriesArgs) -> Result<()> {
    let guard = guard_of(model, guard)?;
    let mut head = guard.head().clone();
    let replies = (a.reply_tokens > 0).then_some(ReplyPlan {
        max_tokens: a.reply_tokens,
        every_tokens: kostant_safety::pipeline::OUTPUT_CHECK_EVERY,
    });
    let report = pick_categories(
        guard.model().clone(),
        &mut head,
        &a.data,
        replies,
        a.features_cache.as_deref(),
        &mut progress_printer(),
    )?;
    write_head(&head, &a.out, || Ok(String::new()))?;
    print_category_rules(&head, &report);
    Ok(())
}

/// `kostant guard calibrate`: the loaded head with a reply threshold chosen on dev replies.
fn calibrate(model_args: &ModelArgs, guard: &GuardArgs, a: CalibrateArgs) -> Result<()> {
    let path = crate::model_path::resolve(model_args.model.as_deref())?;
    let model = load_model(model_args)?;
    let guard = load_guard(guard, &model, &path)?;
    super::guard_calibrate::run(
        &model,
        guard,
        &a.data,
        &a.out,
        a.max_tokens,
        a.max_dev_false_positive,
    )
}

/// `kostant guard screen`: one JSON line of judgement per text.
fn screen(model: &ModelArgs, guard: &GuardArgs, a: ScreenArgs) -> Result<()> {
    let mut guard = guard_of(model, guard)?;
    if let Some(f) = a.feature {
        guard.read_under(&f.system_prompt())?;
    }
    let mut screen = |t: &str| -> Result<()> {
        let s = match &a.reply_to {
            Some(message) => guard.screen_output(message, t)?,
            None => guard.screen_input(t)?,
        };
        println!(
            "{}",
            json!({"flagged": s.flagged, "score": s.score, "category": s.category, "category_guess": s.category_guess, "tokens": s.tokens, "ms": s.ms})
        );
        Ok(())
    };
    match a.text {
        Some(t) => screen(&t),
        None => {
            for (i, line) in std::io::stdin().lock().split(b'\n').enumerate() {
                let line = line?;
                match String::from_utf8(line) {
                    Ok(l) => screen(&l)?,
                    Err(_) => bail!("stdin line {} is not valid UTF-8", i + 1),
                }
            }
            Ok(())
        }
    }
}

/// `kostant guard train-parts`: the loaded head with a new parts head.
fn train_parts(model: &ModelArgs, guard: &GuardArgs, a: TrainPartsArgs) -> Result<()> {
    let guard = guard_of(model, guard)?;
    let mut head = guard.head().clone();
    let (texts, train, dev) = a.texts.read()?;
    let mut opts = PartsOptions {
        buried_copies: a.buried_copies,
        requests_per_copy: a.requests_per_copy,
        inline_copies: a.inline_copies,
        max_dev_false_positive: a.max_dev_false_positive,
        config: TrainConfig::default(),
    };
    a.shape.apply(&mut opts.config);
    let start = std::time::Instant::now();
    let trained = train_parts_head(
        guard.model().clone(),
        &head.info.spec,
        PartsData {
            long_texts: &texts,
            train: &train,
            dev: &dev,
        },
        &opts,
        guard.head().parts.as_deref(),
        |msg| eprintln!("[parts] {msg}"),
    )?;
    head.parts = Some(Box::new(trained.head));
    if head.long_replies.take().is_some() {
        eprintln!(
            "the long-reply head was dropped: its threshold was picked behind the old \
             parts head (retrain it: kostant guard train-long-replies)"
        );
    }
    write_head(&head, &a.texts.out, || timed_report(start, &trained.report))
}

/// `kostant guard train-long-replies`: the loaded head with a new long-reply head.
fn train_long_replies(model: &ModelArgs, guard: &GuardArgs, a: TrainLongRepliesArgs) -> Result<()> {
    let guard = guard_of(model, guard)?;
    let mut head = guard.head().clone();
    if head.parts.is_none() {
        bail!("the head has no parts head: train one first (kostant guard train-parts)");
    }
    if a.reply_tokens == 0 {
        bail!("--reply-tokens must be at least 1");
    }
    let (texts, train, dev) = a.texts.read()?;
    let mut opts = LongReplyOptions {
        plan: ReplyPlan {
            max_tokens: a.reply_tokens,
            every_tokens: kostant_safety::pipeline::OUTPUT_CHECK_EVERY,
        },
        prompts: a.reply_prompts,
        max_dev_false_positive: a.max_dev_false_positive,
        config: TrainConfig::default(),
    };
    a.shape.apply(&mut opts.config);
    let start = std::time::Instant::now();
    let trained = train_long_reply_head(
        guard.model().clone(),
        &head,
        &texts,
        &train,
        &dev,
        &opts,
        |msg| eprintln!("[long replies] {msg}"),
    )?;
    head.long_replies = Some(Box::new(trained.head));
    write_head(&head, &a.texts.out, || timed_report(start, &trained.report))
}

/// `kostant guard carry-long-heads`: the loaded head with another file's long-message heads.
fn carry_long_heads(model: &ModelArgs, guard: &GuardArgs, a: CarryLongHeadsArgs) -> Result<()> {
    let guard = guard_of(model, guard)?;
    let mut head = guard.head().clone();
    let (source, _) = read_head_file(&a.from)?;
    let (carried, what) = match a.long_replies_only {
        true => (head.carry_long_reply_head(&source), "the long-reply head"),
        false => (
            head.carry_long_heads(&source),
            "the parts and long-reply heads",
        ),
    };
    carried.map_err(|e| anyhow::anyhow!("cannot carry {}'s heads: {e}", a.from.display()))?;
    write_head(&head, &a.out, || {
        Ok(format!(" with {what} of {}", a.from.display()))
    })
}

/// `kostant guard take-reply-head`: the loaded head with another file's main head judging
/// replies.
fn take_reply_head(model: &ModelArgs, guard: &GuardArgs, a: TakeReplyHeadArgs) -> Result<()> {
    let guard = guard_of(model, guard)?;
    let mut head = guard.head().clone();
    let (source, _) = read_head_file(&a.from)?;
    head.take_reply_head(&source)
        .map_err(|e| anyhow::anyhow!("cannot take the reply head of {}: {e}", a.from.display()))?;
    write_head(&head, &a.out, || {
        Ok(format!(
            " with the main head of {} judging replies",
            a.from.display()
        ))
    })
}

/// `kostant guard info`: the loaded head as pretty JSON.
fn info(model: &ModelArgs, guard: &GuardArgs) -> Result<()> {
    let guard = guard_of(model, guard)?;
    let info = &guard.head().info;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(&json!({
            "model": info.model_name,
            "features": guard.head().dim(),
            "taps": info.spec.taps,
            "hidden": info.hidden,
            "threshold": info.threshold,
            "reply_threshold": guard.thresholds().1,
            "category_rules": info.category_rules,
            "resident_bytes": guard.resident_bytes(),
            "training": info.training,
            "parts": guard.head().parts.as_ref().map(|p| json!({
                "threshold": p.info.threshold,
                "hidden": p.info.hidden,
                "max_tokens_a_part": p.info.spec.window,
                "training": p.info.training,
            })),
            "long_replies": guard.head().long_replies.as_ref().map(|h| json!({
                "reply_threshold": h.info.output_threshold,
                "training": h.info.training,
            })),
            "replies": guard.head().replies.as_ref().map(|h| json!({
                "reply_threshold": h.info.output_threshold,
                "hidden": h.info.hidden,
                "category_rules": h.info.category_rules,
                "training": h.info.training,
            })),
        }))?
    )?;
    Ok(())
}

/// Prints a stage's progress every 100 texts and at its end.
fn progress_printer() -> impl FnMut(&str, usize, usize) {
    let mut last = String::new();
    move |stage, i, n| {
        if i == n || i % 100 == 0 {
            let line = format!("{stage}: {i}/{n}");
            if line != last {
                eprintln!("{line}");
                last = line;
            }
        }
    }
}

/// Says which rules the head names categories by, and what they show the flagged dev texts.
fn print_category_rules(head: &Head, r: &RuleReport) {
    let rules = &head.info.category_rules;
    if rules.is_empty() {
        eprintln!("category rules: none (every refusal is neutral)");
    }
    for (c, rule) in &rules.0 {
        eprintln!(
            "category rule: {} shown when it is the top category at >= {:.2} and ahead of the next by >= {:.2}",
            c.id(),
            rule.min_prob,
            rule.min_margin
        );
    }
    eprintln!(
        "flagged dev texts shown a category: safe {}/{}; unsafe {}/{} ({} the right one)",
        r.safe_named, r.flagged_safe, r.unsafe_named, r.flagged_unsafe, r.unsafe_named_right
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_from_several_files_are_read_in_order() {
        let dir = std::env::temp_dir().join(format!("kostant-long-texts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a.txt"), dir.join("b.txt"));
        std::fs::write(
            &a,
            "# a header\nSummarize:\\n\\nOne.\n\nProofread:\\n\\nTwo.\n",
        )
        .unwrap();
        std::fs::write(&b, "# b\nShorten:\\n\\nThree.\n").unwrap();
        let texts = read_long_text_files(&[a.clone(), b]).unwrap();
        assert_eq!(
            texts,
            [
                "Summarize:\n\nOne.",
                "Proofread:\n\nTwo.",
                "Shorten:\n\nThree."
            ]
        );
        let err = read_long_text_files(&[a, dir.join("missing.txt")]).unwrap_err();
        assert!(format!("{err:#}").contains("missing.txt"), "{err:#}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
