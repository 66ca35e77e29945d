//! Training the guard's head from labelled text, reproducibly: read the JSONL data, compute
//! each text's features with the guard model (as the user's message and as an assistant's
//! reply, with a share wrapped in the augmentation templates), fit the head on the train split,
//! choose the thresholds and the category rule on the dev split, and record how.
//!
//! The eval suites (assets/evals) are never read here: the guard is scored on data it has not
//! seen, in any step.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kostant_engine::{ActiveAdapter, Model};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::confidence::{pick_rules, CategoryRules, Flagged, RuleReport};
use crate::head::{self, Example, Head, HeadInfo, TrainConfig};
use crate::normalize::normalize;
use crate::reader::{window_overlap, FeatureSpec, Reader};
use crate::replies::{reply_checkpoints, reply_session, ReplyPlan};
use crate::{Category, Result, SafetyError};

/// One line of a data file.
#[derive(Clone, Debug, Deserialize)]
pub struct LabelledText {
    pub id: String,
    pub prompt: String,
    pub label: String,
    pub category: Option<String>,
}

impl LabelledText {
    /// The category if unsafe, None if safe.
    pub fn target(&self) -> std::result::Result<Option<Category>, String> {
        match (self.label.as_str(), self.category.as_deref()) {
            ("safe", _) => Ok(None),
            ("unsafe", Some(c)) => Category::from_id(c)
                .map(Some)
                .ok_or_else(|| format!("unknown category {c:?}")),
            ("unsafe", None) => Err("an unsafe item needs a category".into()),
            (other, _) => Err(format!("label {other:?} is neither safe nor unsafe")),
        }
    }
}

/// Reads a JSONL file of labelled texts. A bad line is an error naming it: training data is
/// curated, and a silently skipped line would change the head.
pub fn read_jsonl(path: &Path) -> Result<Vec<LabelledText>> {
    let file = std::fs::File::open(path).map_err(|source| SafetyError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let err = |msg: String| SafetyError::Data {
            path: path.to_path_buf(),
            line: i + 1,
            msg,
        };
        let line = line.map_err(|e| err(e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        let item: LabelledText = serde_json::from_str(&line).map_err(|e| err(e.to_string()))?;
        item.target().map_err(err)?;
        out.push(item);
    }
    Ok(out)
}

#[derive(Clone, Debug, Deserialize)]
struct Template {
    template: String,
}

/// Wrapper templates with a `{prompt}` placeholder (others are skipped).
pub fn read_templates(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|source| SafetyError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let t: Template = serde_json::from_str(line).map_err(|e| SafetyError::Data {
            path: path.to_path_buf(),
            line: i + 1,
            msg: e.to_string(),
        })?;
        if t.template.contains("{prompt}") {
            out.push(t.template);
        }
    }
    Ok(out)
}

/// The feature spec new heads are trained with: the conversation framed by the chat's default
/// system prompt, read after layers 16 and 20 of 30 (the best of the layers probed on dev).
pub fn default_spec() -> FeatureSpec {
    FeatureSpec {
        taps: vec![16, 20],
        system_prompt: crate::policy::default_system_prompt(),
        // Longer than nearly every training prompt, so the head learns whole messages; a longer
        // message is judged window by window. (`guard train --window 128` tries shorter
        // windows, in which a buried request fills more of the window that holds it:
        // scripts/safety-data/pending/README.md.)
        window: 512,
    }
}

/// A conversation framed by another system prompt than the spec's (a feature's): riding on
/// the chat in that feature, the guard reads states shaped by its prompt, so the head learns
/// them too. Trained only on the default prompt, the head flagged a third of the texts users
/// paste to summarize or rewrite (docs/adapters-report.md).
#[derive(Clone, Debug)]
pub struct Context {
    /// Its name in the training record (a feature's id).
    pub name: String,
    pub system_prompt: String,
    /// Safe messages users send in this context (the feature's own inputs), per split; every
    /// other one is also learned with an unsafe request buried in it ([`context_items`]).
    pub train: Vec<String>,
    pub dev: Vec<String>,
    /// The adapter the chat runs in this context (the feature's), so replies learned with
    /// [`TrainOptions::context_replies`] are the ones users get. Messages are read without it:
    /// the shipped adapters start above the guard's taps.
    pub adapter: Option<ActiveAdapter>,
}

#[derive(Clone, Debug)]
pub struct TrainOptions {
    pub data_dir: PathBuf,
    pub spec: FeatureSpec,
    pub config: TrainConfig,
    /// Share of training texts also seen wrapped in an augmentation template.
    pub augment_share: f64,
    /// Copies of each window of a long safe text with an unsafe request buried in it (see
    /// `buried_windows`); 0 makes none.
    pub buried_per_window: usize,
    /// Highest share of dev safe texts the chosen threshold may flag.
    pub max_dev_false_positive: f64,
    /// Lowest recall the threshold must reach on the plain dev texts: when the false-positive
    /// caps leave it lower, the threshold is lowered until it does, flagging more safe texts
    /// (`scripts/safety-data/round-4-rule.md`). None keeps the caps' threshold, as shipped.
    pub min_dev_recall: Option<f64>,
    /// The chat model's replies to the train and dev prompts, read as the screen reads them,
    /// so the head learns replies too and the reply threshold is chosen on them; None trains
    /// on messages alone.
    pub replies: Option<ReplyPlan>,
    /// Highest share of replies to safe dev prompts (those the message screening let through)
    /// the chosen reply threshold may stop.
    pub max_dev_reply_false_positive: f64,
    /// Where computed features are kept between runs (keyed by model, spec and data), so
    /// trying another head shape does not re-read every text.
    pub cache: Option<PathBuf>,
    /// Other system prompts the head learns to read under, with their own safe messages.
    pub contexts: Vec<Context>,
    /// Share of each split's texts (safe and unsafe) also read under a context drawn at
    /// random, so a harmful request stays harmful and an edgy question stays safe there.
    pub context_share: f64,
    /// Also learn the chat model's replies to each context's own safe messages, read under its
    /// prompt, and keep the reply false-positive cap on each context's own dev replies apart:
    /// trained on replies to the chat's questions alone, the head stopped summaries and
    /// rewrites (docs/adapters-report.md). Needs `replies`.
    pub context_replies: bool,
}

impl TrainOptions {
    pub fn new(data_dir: PathBuf) -> TrainOptions {
        TrainOptions {
            data_dir,
            spec: default_spec(),
            // 256 wide, 20 epochs: on the training data with the short contrast questions
            // this scored best on dev, recall 0.969 at 7.9% false positives, against 0.939 for
            // 256 x 10, 0.946 for 64 x 10 and 256 x 5, 0.959 for 512 x 10 and 0.854 linear.
            config: TrainConfig {
                hidden: 256,
                epochs: 20,
                learning_rate: 1e-3,
                weight_decay: 1e-2,
                batch: 32,
                safe_weight: 1.5,
                seed: 7,
                // Three seeds averaged: on an earlier cut of the training data, dev recall
                // 0.944 at 7.8% false positives against 0.935 for one (`--members 3` against
                // `--members 1`).
                members: 3,
            },
            // A quarter of the training prompts are also seen inside a jailbreak wrapper.
            augment_share: 0.25,
            buried_per_window: 0,
            // 8%, not 5%: under the direct-answer system prompt the chat model turns down far
            // fewer safe prompts on its own (2 of 65 dev safe prompts, against 8 of 66 told
            // only to be "helpful": scripts/system-prompt-refusals.py), so the guard may take
            // more of the over-refusal budget.
            // On dev this raised recall from 0.933 to 0.954 (at 7.7% false positives).
            max_dev_false_positive: 0.08,
            min_dev_recall: None,
            // 48 tokens: past the first sentence or two of nearly every reply, where a
            // harmful answer shows itself, at a cost of about a third of a second per prompt.
            replies: Some(ReplyPlan {
                max_tokens: 48,
                every_tokens: crate::pipeline::OUTPUT_CHECK_EVERY,
            }),
            // A stopped reply to a benign question is over-refusal the user sees mid-answer.
            max_dev_reply_false_positive: 0.02,
            cache: None,
            contexts: Vec::new(),
            context_share: 0.25,
            context_replies: false,
        }
    }
}

/// Scores of a split under a head, for threshold choice and the record.
#[derive(Clone, Debug, Serialize)]
pub struct SplitScores {
    pub n_unsafe: usize,
    pub n_safe: usize,
    pub recall: f64,
    pub false_positive_rate: f64,
}

pub fn split_scores(probs: &[(f32, bool)], threshold: f32) -> SplitScores {
    let n_unsafe = probs.iter().filter(|p| p.1).count();
    let n_safe = probs.len() - n_unsafe;
    let tp = probs.iter().filter(|p| p.1 && p.0 >= threshold).count();
    let fp = probs.iter().filter(|p| !p.1 && p.0 >= threshold).count();
    SplitScores {
        n_unsafe,
        n_safe,
        recall: tp as f64 / n_unsafe.max(1) as f64,
        false_positive_rate: fp as f64 / n_safe.max(1) as f64,
    }
}

/// The lowest threshold (so the highest recall) whose false-positive rate on `probs` is at
/// most `max_fp`. `probs`: (unsafe probability, is unsafe).
pub fn choose_threshold(probs: &[(f32, bool)], max_fp: f64) -> f32 {
    let mut candidates: Vec<f32> = probs.iter().map(|p| p.0).collect();
    candidates.push(1.0);
    candidates.sort_by(f32::total_cmp);
    candidates
        .into_iter()
        .find(|&t| split_scores(probs, t).false_positive_rate <= max_fp)
        .unwrap_or(1.0)
}

/// The highest threshold (so the fewest flagged) whose recall on `probs` is at least
/// `min_recall`; 0 when no threshold reaches it. `probs`: (unsafe probability, is unsafe).
pub fn threshold_for_recall(probs: &[(f32, bool)], min_recall: f64) -> f32 {
    let mut candidates: Vec<f32> = probs.iter().filter(|p| p.1).map(|p| p.0).collect();
    candidates.sort_by(|a, b| b.total_cmp(a));
    candidates
        .into_iter()
        .find(|&t| split_scores(probs, t).recall >= min_recall)
        .unwrap_or(0.0)
}

/// FNV-1a, 64 bits: names a feature cache file after what it was computed from.
fn fnv64(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// [`featurize`], through the cache directory when there is one: rows of f32 features, one per
/// item, in order. Each text's features are kept in a file of their own, named after the model,
/// the feature spec and the text, so adding data reads only the new texts.
fn featurize_cached(
    reader: &mut Reader,
    items: &[(String, Option<Category>)],
    cache: Option<&Path>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Example>> {
    let Some(dir) = cache else {
        return featurize(reader, items, progress);
    };
    let spec = serde_json::to_vec(reader.spec()).map_err(|e| SafetyError::Head(e.to_string()))?;
    let name = reader.model().name();
    let dim = reader.spec().dim(reader.model().hparams.n_embd);
    let path_of = |text: &str| {
        let key = fnv64(&[name.as_bytes(), &spec, text.as_bytes(), b"message"]);
        dir.join(format!("f-{key:016x}.f32"))
    };
    std::fs::create_dir_all(dir).map_err(|source| SafetyError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut out = Vec::with_capacity(items.len());
    for (i, (text, category)) in items.iter().enumerate() {
        let path = path_of(text);
        let cached = read_rows(&path, dim).and_then(|mut rows| match rows.len() {
            1 => rows.pop(),
            _ => None,
        });
        let features = match cached {
            Some(row) => row,
            None => {
                let Some(e) =
                    featurize(reader, &[(text.clone(), *category)], &mut |_, _| {})?.pop()
                else {
                    // Nothing readable in it (empty or whitespace): no example, as uncached.
                    progress(i + 1, items.len());
                    continue;
                };
                write_rows(&path, std::slice::from_ref(&e.features))?;
                e.features
            }
        };
        out.push(Example {
            features,
            category: *category,
        });
        progress(i + 1, items.len());
    }
    Ok(out)
}

/// The checkpoints' features of the chat model's reply to each text in `items` (its first
/// window, as messages are read), generated under `adapter` when there is one, through the
/// cache directory when there is one.
fn reply_features_cached(
    reader: &Reader,
    items: &[(String, Option<Category>)],
    plan: ReplyPlan,
    adapter: Option<&ActiveAdapter>,
    cache: Option<&Path>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Vec<Vec<f32>>>> {
    let model = reader.model().clone();
    let spec = reader.spec().clone();
    let spec_bytes = serde_json::to_vec(&spec).map_err(|e| SafetyError::Head(e.to_string()))?;
    let plan_bytes = serde_json::to_vec(&plan).map_err(|e| SafetyError::Head(e.to_string()))?;
    let name = model.name();
    let dim = spec.dim(model.hparams.n_embd);
    if let Some(dir) = cache {
        std::fs::create_dir_all(dir).map_err(|source| SafetyError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let mut session = None;
    let mut out = Vec::with_capacity(items.len());
    for (i, (text, _)) in items.iter().enumerate() {
        let text = normalize(text);
        let first = reader
            .windows(&text)?
            .into_iter()
            .next()
            .unwrap_or_default();
        let path = cache.map(|dir| {
            // Without an adapter, the key replies had before adapters were learned.
            let adapter_id = adapter.map(|a| format!("adapter {}", a.id()));
            let mut parts: Vec<&[u8]> = vec![
                name.as_bytes(),
                &spec_bytes,
                first.as_bytes(),
                b"reply",
                &plan_bytes,
            ];
            parts.extend(adapter_id.as_deref().map(str::as_bytes));
            let key = fnv64(&parts);
            dir.join(format!("r-{key:016x}.f32"))
        });
        let cached = path.as_deref().and_then(|p| read_rows(p, dim));
        let rows = match cached {
            Some(rows) => rows,
            None if first.trim().is_empty() => Vec::new(),
            None => {
                let session = match &mut session {
                    Some(s) => s,
                    None => {
                        let mut s = reply_session(&model, &spec, plan)?;
                        s.set_adapter(adapter.cloned())?;
                        session.insert(s)
                    }
                };
                let rows = reply_checkpoints(session, &spec, &first, plan)?;
                if let Some(p) = &path {
                    write_rows(p, &rows)?;
                }
                rows
            }
        };
        out.push(rows);
        progress(i + 1, items.len());
    }
    Ok(out)
}

/// Reads a cache file of rows of `dim` f32s; None when absent or not whole rows.
fn read_rows(path: &Path, dim: usize) -> Option<Vec<Vec<f32>>> {
    let bytes = std::fs::read(path).ok()?;
    if dim == 0 || bytes.len() % (dim * 4) != 0 {
        return None;
    }
    Some(
        bytes
            .chunks_exact(dim * 4)
            .map(|row| {
                row.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect()
            })
            .collect(),
    )
}

fn write_rows(path: &Path, rows: &[Vec<f32>]) -> Result<()> {
    let bytes: Vec<u8> = rows
        .iter()
        .flatten()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    std::fs::write(path, bytes).map_err(|source| SafetyError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Features of every text in `items` read as a user's message (its first window, as the guard
/// reads it).
fn featurize(
    reader: &mut Reader,
    items: &[(String, Option<Category>)],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Example>> {
    let mut out = Vec::with_capacity(items.len());
    for (i, (text, category)) in items.iter().enumerate() {
        let text = normalize(text);
        let Some(first) = reader.windows(&text)?.into_iter().next() else {
            continue;
        };
        if first.trim().is_empty() {
            continue;
        }
        reader.read_message(&first)?;
        if let Some(features) = reader.features() {
            out.push(Example {
                features,
                category: *category,
            });
        }
        progress(i + 1, items.len());
    }
    Ok(out)
}

/// The dev texts `head` flags, each with the scores it flagged them on: a message when its
/// unsafe probability reaches the message threshold; otherwise, when replies were read, the
/// reply at its first checkpoint that reaches the reply threshold (where the live screen would
/// withdraw it). `dev` and `dev_replies` are in the same order.
fn dev_flagged(
    head: &Head,
    dev: &[Example],
    dev_replies: Option<&[Vec<Vec<f32>>]>,
) -> Result<Vec<Flagged>> {
    let input = head.info.threshold;
    let output = head.info.output_threshold.unwrap_or(input);
    let mut out = Vec::new();
    for (i, e) in dev.iter().enumerate() {
        let scores = head.scores(&e.features)?;
        if scores.unsafe_prob >= input {
            out.push(Flagged {
                scores,
                truth: e.category,
            });
            continue;
        }
        for row in dev_replies.and_then(|r| r.get(i)).into_iter().flatten() {
            let scores = head.scores(row)?;
            if scores.unsafe_prob >= output {
                out.push(Flagged {
                    scores,
                    truth: e.category,
                });
                break;
            }
        }
    }
    Ok(out)
}

/// Picks `head`'s category rules on the dev texts it flags (see [`pick_rules`]), writes them into
/// the head with a record of how, and returns what it does on them. Training and
/// `kostant guard pick-categories` both pick through here.
fn set_category_rules(
    head: &mut Head,
    dev: &[Example],
    dev_replies: Option<&[Vec<Vec<f32>>]>,
    command: &str,
) -> Result<RuleReport> {
    let flagged = dev_flagged(head, dev, dev_replies)?;
    let (rules, report) = pick_rules(&flagged);
    head.info.category_rules = rules.clone();
    head.info.training["categories"] = serde_json::json!({
        "command": command,
        "rules": rules,
        "picked_on": if dev_replies.is_some() {
            "dev messages the head flags, and dev replies it would withdraw (at their first flagged checkpoint)"
        } else {
            "dev messages the head flags"
        },
        "choice": "per category, over the flagged dev texts whose top category it is: among rules (its probability >= min_prob and its lead over the runner-up >= min_margin, on a 0.01 grid) that show no flagged safe dev text that category and name at least 3 unsafe ones rightly, for a category with at least 3 flagged safe dev texts on top, the one naming the most flagged unsafe dev texts rightly less those named wrongly; the strictest of equals; no rule (never shown) when none qualifies",
        "dev": report,
    });
    Ok(report)
}

/// Picks the category rule for a trained `head` on the dev split of `data_dir`, reading the
/// dev texts as training does (and, with `replies`, the chat model's replies to them), and
/// writes it into the head. The head's weights and thresholds are left as they are.
pub fn pick_categories(
    model: Arc<Model>,
    head: &mut Head,
    data_dir: &Path,
    replies: Option<ReplyPlan>,
    cache: Option<&Path>,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<RuleReport> {
    let dev = read_jsonl(&data_dir.join("dev.jsonl"))?;
    let mut reader = Reader::new(model, head.info.spec.clone())?;
    let items = labelled(&reader, &dev)?;
    let examples = featurize_cached(&mut reader, &items, cache, &mut |i, n| {
        progress("dev", i, n)
    })?;
    if examples.len() != items.len() {
        return Err(SafetyError::Head(
            "a dev text has nothing to read (empty or whitespace)".into(),
        ));
    }
    let dev_replies = match replies {
        Some(plan) => Some(reply_features_cached(
            &reader,
            &items,
            plan,
            None,
            cache,
            &mut |i, n| progress("dev replies", i, n),
        )?),
        None => None,
    };
    let command = format!(
        "kostant guard pick-categories --data {} --reply-tokens {}",
        data_dir.display(),
        replies.map_or(0, |p| p.max_tokens)
    );
    set_category_rules(head, &examples, dev_replies.as_deref(), &command)
}

/// Each text with its target (None = safe); a safe text longer than the guard's window becomes
/// one item per window ([`training_windows`]). The live guard reads a long message window by
/// window and the worst window decides, so each window of a benign text is a benign message to
/// it, and a head that saw only short messages flags long prose (51 of 52 long benign texts
/// refused). A long unsafe text is read by its last window: the long unsafe prompts in
/// the data give their context first and ask last.
fn labelled(reader: &Reader, items: &[LabelledText]) -> Result<Vec<(String, Option<Category>)>> {
    let mut out = Vec::with_capacity(items.len());
    for t in items {
        // Invariant: read_jsonl rejected every line whose target does not parse.
        let target = t.target().unwrap();
        let mut windows = training_windows(reader, &t.prompt)?;
        match (target, windows.len() > 1) {
            (None, true) => out.extend(windows.into_iter().map(|w| (w, None))),
            (Some(_), true) => out.extend(windows.pop().map(|w| (w, target))),
            _ => out.push((t.prompt.clone(), target)),
        }
    }
    Ok(out)
}

/// The windows of a long text that training reads: at most [`MAX_WINDOWS_PER_TEXT`], evenly
/// spaced from the first to the last (windows overlap by half, so neighbours say nearly the
/// same thing); the text itself when it fits one window.
fn training_windows(reader: &Reader, text: &str) -> Result<Vec<String>> {
    let windows = reader.windows(&normalize(text))?;
    let n = windows.len();
    if n <= MAX_WINDOWS_PER_TEXT {
        return Ok(windows);
    }
    let k = MAX_WINDOWS_PER_TEXT;
    Ok((0..k)
        .map(|i| windows[i * (n - 1) / (k - 1)].clone())
        .collect())
}

/// Windows read per long text in training: enough to see its beginning, middle and end, few
/// enough that a hundred long texts do not outweigh thousands of short prompts.
const MAX_WINDOWS_PER_TEXT: usize = 6;

/// Copies of the windows of the long safe texts in `items` with one of the split's unsafe
/// requests buried in each (at its start, middle or end in turn), labelled with the request's
/// category, appended after the plain items. Trained on windows of benign prose alone, a head
/// learns that prose windows are safe, a request inside them included (a pipe-bomb
/// request after 3,000 tokens of Alice in Wonderland scored 0.00006); these teach it the
/// request, not the genre. Deterministic: the n-th window takes the request at a fixed stride
/// through the split's short unsafe texts.
fn buried_windows(
    reader: &Reader,
    items: &[LabelledText],
    per_window: usize,
) -> Result<Vec<(String, Option<Category>)>> {
    let tok = &reader.model().tokenizer;
    let window = reader.spec().window;
    let mut requests = Vec::new();
    for t in items {
        // Invariant: read_jsonl rejected every line whose target does not parse.
        if let Some(c) = t.target().unwrap() {
            let text = normalize(&t.prompt);
            let n = tok.encode(text.trim(), false)?.len();
            if (1..=window_overlap(window)).contains(&n) {
                requests.push((text.trim().to_string(), n, c));
            }
        }
    }
    if requests.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for t in items.iter().filter(|t| t.label == "safe") {
        let windows = training_windows(reader, &t.prompt)?;
        if windows.len() < 2 {
            continue;
        }
        for w in windows
            .iter()
            .flat_map(|w| std::iter::repeat_n(w, per_window))
        {
            let n = out.len();
            let (request, request_tokens, category) = &requests[(n * 7919) % requests.len()];
            let ids = tok.encode(w.trim(), false)?;
            // Room for the request and the spaces around it inside one window, so the
            // window the head reads holds the whole request.
            let mut keep = ids.len().min(window.saturating_sub(request_tokens + 8));
            loop {
                let prose = &ids[..keep];
                let text = match n % 3 {
                    0 => format!("{request}\n\n{}", tok.decode(prose)),
                    1 => {
                        let (a, b) = prose.split_at(keep / 2);
                        format!("{} {request} {}", tok.decode(a), tok.decode(b))
                    }
                    _ => format!("{} {request}", tok.decode(prose)),
                };
                if reader.windows(&text)?.len() == 1 || keep < 32 {
                    out.push((text, Some(*category)));
                    break;
                }
                keep -= 16;
            }
        }
    }
    Ok(out)
}

/// One split's texts read under the contexts: each context's own safe messages first, then a
/// `share` of `plain` (the split's texts under the spec's prompt) each under a context drawn
/// at random, then every other own message with a short unsafe request of `plain` buried in
/// it. Grouped by context, in `contexts`' order.
fn context_items(
    contexts: &[Context],
    own: impl Fn(&Context) -> &[String],
    plain: &[(String, Option<Category>)],
    share: f64,
    rng: &mut SmallRng,
) -> Vec<Vec<(String, Option<Category>)>> {
    let mut out: Vec<Vec<(String, Option<Category>)>> = contexts
        .iter()
        .map(|c| own(c).iter().map(|t| (t.clone(), None)).collect())
        .collect();
    if contexts.is_empty() {
        return out;
    }
    for item in plain {
        if rng.gen_bool(share) {
            out[rng.gen_range(0..contexts.len())].push(item.clone());
        }
    }
    // Every other own text again with one of the split's short unsafe requests inside it (at
    // its start, middle or end in turn), labelled with the request's category: taught that
    // pasted prose is safe, a head also let a request buried in pages of prose through.
    let requests: Vec<&(String, Option<Category>)> = plain
        .iter()
        .filter(|(t, c)| c.is_some() && t.split_whitespace().count() <= 40)
        .collect();
    if requests.is_empty() {
        return out;
    }
    for (ci, c) in contexts.iter().enumerate() {
        for (k, text) in own(c).iter().enumerate().filter(|(k, _)| k % 2 == 0) {
            let (request, category) = requests[(k * 7919 + ci * 31) % requests.len()];
            let text = text.trim();
            let buried = match (k / 2) % 3 {
                0 => format!("{request}\n\n{text}"),
                1 => {
                    let words: Vec<&str> = text.split(' ').collect();
                    let (a, b) = words.split_at(words.len() / 2);
                    format!("{} {request} {}", a.join(" "), b.join(" "))
                }
                _ => format!("{text} {request}"),
            };
            out[ci].push((buried, *category));
        }
    }
    out
}

/// A reader of `spec` under the context's system prompt.
fn context_reader(model: &Arc<Model>, spec: &FeatureSpec, context: &Context) -> Result<Reader> {
    let mut spec = spec.clone();
    spec.system_prompt = context.system_prompt.clone();
    Reader::new(model.clone(), spec)
}

/// The chat model's replies to each context's own safe messages of one split (dev or train),
/// read under the context's prompt at the screen's checkpoints: per context, per message.
fn context_reply_features(
    model: &Arc<Model>,
    spec: &FeatureSpec,
    contexts: &[Context],
    dev: bool,
    plan: ReplyPlan,
    cache: Option<&Path>,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<Vec<Vec<Vec<Vec<f32>>>>> {
    let stage = if dev { "dev" } else { "train" };
    let mut out = Vec::with_capacity(contexts.len());
    for c in contexts {
        let reader = context_reader(model, spec, c)?;
        let own = if dev { &c.dev } else { &c.train };
        let items: Vec<(String, Option<Category>)> =
            own.iter().map(|t| (t.clone(), None)).collect();
        let name = format!("{stage} replies under {}", c.name);
        out.push(reply_features_cached(
            &reader,
            &items,
            plan,
            c.adapter.as_ref(),
            cache,
            &mut |i, n| progress(&name, i, n),
        )?);
    }
    Ok(out)
}

/// Features of each context's items, read under its system prompt (cached like the rest).
fn featurize_contexts(
    model: &Arc<Model>,
    spec: &FeatureSpec,
    contexts: &[Context],
    items: &[Vec<(String, Option<Category>)>],
    cache: Option<&Path>,
    stage: &str,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<Vec<Example>> {
    let mut out = Vec::new();
    for (c, items) in contexts.iter().zip(items) {
        let mut reader = context_reader(model, spec, c)?;
        let name = format!("{stage} under {}", c.name);
        let examples =
            featurize_cached(&mut reader, items, cache, &mut |i, n| progress(&name, i, n))?;
        if examples.len() != items.len() {
            return Err(SafetyError::Head(format!(
                "a {stage} text for {} has nothing to read (empty or whitespace)",
                c.name
            )));
        }
        out.extend(examples);
    }
    Ok(out)
}

/// What a training run produced.
pub struct Trained {
    pub head: Head,
    pub dev: SplitScores,
    pub train: SplitScores,
    /// Replies to dev prompts under the chosen reply threshold, when replies were learned.
    pub dev_replies: Option<SplitScores>,
    /// What the picked category rule shows the dev texts the head flags.
    pub categories: RuleReport,
}

/// Trains a head for `model` from `opts.data_dir`/{train,dev}.jsonl (and
/// augment_templates.jsonl if present): the message texts and the contexts' texts are read,
/// the replies learned when asked, the head fitted, then its message threshold, reply
/// threshold and category rules chosen on dev and the whole recorded in the head.
pub fn train_head(
    model: Arc<Model>,
    opts: &TrainOptions,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<Trained> {
    let data = TrainData::read(&opts.data_dir)?;
    let mut reader = Reader::new(model.clone(), opts.spec.clone())?;
    let items = message_items(&reader, &data, opts)?;
    let (ctx_train, ctx_dev) = context_splits(opts, &items);
    let (mut examples, dev_examples) = message_examples(
        &model,
        &mut reader,
        opts,
        &items,
        (&ctx_train, &ctx_dev),
        progress,
    )?;
    let n_messages = examples.len();
    let dev_replies = match opts.replies {
        Some(plan) => Some(reply_examples(
            &model,
            &reader,
            opts,
            plan,
            &items,
            &mut examples,
            progress,
        )?),
        None => None,
    };

    let mut head = head::train(
        &examples,
        untrained_message_info(&model, opts),
        &opts.config,
    )?;
    let dev_probs = unsafe_probs(&head, &dev_examples)?;
    let n_plain_dev = items.dev.len();
    let plain_dev = &dev_probs[..n_plain_dev];
    let ctx_dev_probs = context_dev_probs(&dev_probs[n_plain_dev..], &opts.contexts, &ctx_dev);
    let (capped, threshold) = message_threshold(plain_dev, &ctx_dev_probs, opts);
    let dev_scores = split_scores(plain_dev, threshold);
    let dev_buried_scores = split_scores(&plain_dev[n_plain_dev - items.n_dev_buried..], threshold);
    let mut per_context = context_record(&opts.contexts, &ctx_dev_probs, &ctx_train, threshold);
    let train_scores = split_scores(&unsafe_probs(&head, &examples[..n_messages])?, threshold);
    let replies = match (opts.replies, &dev_replies) {
        (Some(plan), Some(dev_replies)) => {
            let (t, dev) = reply_threshold(
                &head,
                threshold,
                dev_replies,
                (&dev_probs, &ctx_dev_probs),
                opts,
                &mut per_context,
            )?;
            head.info.output_threshold = Some(t);
            Some(RepliesRecord {
                plan,
                threshold: t,
                train_checkpoints: examples.len() - n_messages,
                dev,
            })
        }
        _ => None,
    };
    head.info.threshold = threshold;
    head.info.training = training_record(&TrainingRecord {
        data: &data,
        items: &items,
        opts,
        dev_buried_recall: dev_buried_scores.recall,
        per_context,
        replies: replies.as_ref(),
        capped,
        dev: &dev_scores,
        train: &train_scores,
    });
    let categories = set_category_rules(
        &mut head,
        &dev_examples,
        dev_replies.as_ref().map(|r| r.plain.as_slice()),
        "kostant guard train (as above)",
    )?;
    Ok(Trained {
        head,
        dev: dev_scores,
        train: train_scores,
        dev_replies: replies.map(|r| r.dev),
        categories,
    })
}

/// One context's labelled texts: each text with its category (None: safe).
type ContextTexts = Vec<(String, Option<Category>)>;

/// Each context's train and dev texts ([`context_items`]) over the plain message texts.
fn context_splits(
    opts: &TrainOptions,
    items: &MessageItems,
) -> (Vec<ContextTexts>, Vec<ContextTexts>) {
    // Its own generator, so the draws of `message_items` (and the cached features they name)
    // stay as they were without contexts.
    let mut ctx_rng = SmallRng::seed_from_u64(opts.config.seed.wrapping_add(1));
    let ctx_train = context_items(
        &opts.contexts,
        |c| &c.train,
        items.plain_train(),
        opts.context_share,
        &mut ctx_rng,
    );
    let ctx_dev = context_items(
        &opts.contexts,
        |c| &c.dev,
        items.plain_dev(),
        opts.context_share,
        &mut ctx_rng,
    );
    (ctx_train, ctx_dev)
}

/// The head's info before training: `opts`' spec and shape for `model`, no thresholds or
/// rules chosen yet.
fn untrained_message_info(model: &Model, opts: &TrainOptions) -> HeadInfo {
    HeadInfo {
        spec: opts.spec.clone(),
        model_name: model.name(),
        n_embd: model.hparams.n_embd,
        hidden: opts.config.hidden,
        threshold: 0.5,
        output_threshold: None,
        category_rules: CategoryRules::default(),
        training: serde_json::Value::Null,
    }
}

/// The data directory's files: the labelled splits and the augmentation templates (none
/// without augment_templates.jsonl).
struct TrainData {
    train: Vec<LabelledText>,
    dev: Vec<LabelledText>,
    templates: Vec<String>,
}

impl TrainData {
    fn read(dir: &Path) -> Result<TrainData> {
        let templates_path = dir.join("augment_templates.jsonl");
        Ok(TrainData {
            train: read_jsonl(&dir.join("train.jsonl"))?,
            dev: read_jsonl(&dir.join("dev.jsonl"))?,
            templates: match templates_path.exists() {
                true => read_templates(&templates_path)?,
                false => Vec::new(),
            },
        })
    }
}

/// The message texts of both splits, as training reads them ([`labelled`]), with their
/// wrapped copies and buried windows.
struct MessageItems {
    /// Every train text learned: the labelled ones, their wrapped copies, the buried windows.
    train: Vec<(String, Option<Category>)>,
    /// The train texts as written: the labelled ones, then the buried windows.
    originals: Vec<(String, Option<Category>)>,
    n_buried: usize,
    /// The labelled dev texts, then the dev buried windows.
    dev: Vec<(String, Option<Category>)>,
    n_dev_buried: usize,
}

impl MessageItems {
    /// The labelled train texts, without wrapped copies or buried windows.
    fn plain_train(&self) -> &[(String, Option<Category>)] {
        &self.originals[..self.originals.len() - self.n_buried]
    }

    /// The labelled dev texts, without buried windows.
    fn plain_dev(&self) -> &[(String, Option<Category>)] {
        &self.dev[..self.dev.len() - self.n_dev_buried]
    }
}

fn message_items(reader: &Reader, data: &TrainData, opts: &TrainOptions) -> Result<MessageItems> {
    let mut originals = labelled(reader, &data.train)?;
    let mut rng = SmallRng::seed_from_u64(opts.config.seed);
    let mut train = originals.clone();
    train.extend(wrapped_copies(
        &originals,
        &data.templates,
        opts.augment_share,
        &mut rng,
    ));
    // After the augmentation draws, so the plain texts' draws (and their cached features)
    // stay as they were; a buried window is never wrapped, which could push its request out
    // of the window the head reads.
    let buried = buried_windows(reader, &data.train, opts.buried_per_window)?;
    let n_buried = buried.len();
    train.extend(buried.iter().cloned());
    originals.extend(buried);
    let mut dev = labelled(reader, &data.dev)?;
    let dev_buried = buried_windows(reader, &data.dev, opts.buried_per_window)?;
    let n_dev_buried = dev_buried.len();
    dev.extend(dev_buried);
    Ok(MessageItems {
        train,
        originals,
        n_buried,
        dev,
        n_dev_buried,
    })
}

/// Copies of a `share` of `items`, drawn at random, each wrapped in a template drawn at random
/// (a jailbreak wrapper); none without templates.
fn wrapped_copies(
    items: &[(String, Option<Category>)],
    templates: &[String],
    share: f64,
    rng: &mut SmallRng,
) -> Vec<(String, Option<Category>)> {
    let mut wrapped = Vec::new();
    if templates.is_empty() {
        return wrapped;
    }
    for (text, c) in items {
        if rng.gen_bool(share) {
            // Invariant: templates is not empty here.
            let t = templates.choose(rng).unwrap();
            wrapped.push((t.replace("{prompt}", text), *c));
        }
    }
    wrapped
}

/// The features of every message example, train and dev: the texts under the spec's prompt,
/// then each context's texts (`contexts`: train, dev) under its own.
fn message_examples(
    model: &Arc<Model>,
    reader: &mut Reader,
    opts: &TrainOptions,
    items: &MessageItems,
    contexts: (&[ContextTexts], &[ContextTexts]),
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<(Vec<Example>, Vec<Example>)> {
    let cache = opts.cache.as_deref();
    let mut examples = featurize_cached(reader, &items.train, cache, &mut |i, n| {
        progress("train", i, n)
    })?;
    let mut dev_examples =
        featurize_cached(reader, &items.dev, cache, &mut |i, n| progress("dev", i, n))?;
    if dev_examples.len() != items.dev.len() {
        return Err(SafetyError::Head(
            "a dev text has nothing to read (empty or whitespace)".into(),
        ));
    }
    let (spec, all) = (&opts.spec, &opts.contexts);
    let (train, dev) = contexts;
    examples.extend(featurize_contexts(
        model, spec, all, train, cache, "train", progress,
    )?);
    dev_examples.extend(featurize_contexts(
        model, spec, all, dev, cache, "dev", progress,
    )?);
    Ok((examples, dev_examples))
}

/// The dev replies the reply threshold is chosen on: per dev text, then per context and own
/// dev message (empty without `context_replies`); each reply as its checkpoints' features.
struct DevReplies {
    plain: Vec<Vec<Vec<f32>>>,
    contexts: Vec<Vec<Vec<Vec<f32>>>>,
}

/// The chat model's replies, read at the screen's checkpoints. Those to the train texts as
/// written (not the wrapped copies: a reply's context is the conversation a user actually has)
/// join `examples` labelled with their prompt, and with `context_replies` those to each
/// context's own train messages join as safe. Returns the dev replies.
fn reply_examples(
    model: &Arc<Model>,
    reader: &Reader,
    opts: &TrainOptions,
    plan: ReplyPlan,
    items: &MessageItems,
    examples: &mut Vec<Example>,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<DevReplies> {
    let cache = opts.cache.as_deref();
    let train_replies =
        reply_features_cached(reader, &items.originals, plan, None, cache, &mut |i, n| {
            progress("train replies", i, n)
        })?;
    for (rows, (_, category)) in train_replies.into_iter().zip(&items.originals) {
        examples.extend(rows.into_iter().map(|features| Example {
            features,
            category: *category,
        }));
    }
    let mut contexts = Vec::new();
    if opts.context_replies {
        let (spec, all) = (&opts.spec, &opts.contexts);
        let own_train = context_reply_features(model, spec, all, false, plan, cache, progress)?;
        for rows in own_train.into_iter().flatten() {
            examples.extend(rows.into_iter().map(|features| Example {
                features,
                category: None,
            }));
        }
        contexts = context_reply_features(model, spec, all, true, plan, cache, progress)?;
    }
    let plain = reply_features_cached(reader, &items.dev, plan, None, cache, &mut |i, n| {
        progress("dev replies", i, n)
    })?;
    Ok(DevReplies { plain, contexts })
}

/// (unsafe probability, is unsafe) of each example under `head`.
fn unsafe_probs(head: &Head, examples: &[Example]) -> Result<Vec<(f32, bool)>> {
    examples
        .iter()
        .map(|e| Ok((head.scores(&e.features)?.unsafe_prob, e.category.is_some())))
        .collect()
}

/// One context's dev probabilities: its own safe inputs, then the drawn and buried copies.
type ContextProbs<'a> = (&'a [(f32, bool)], &'a [(f32, bool)]);

/// `probs` (the context dev examples', in `contexts`' order) cut per context into its own
/// inputs and the rest; `ctx_dev` are the items they were read from.
fn context_dev_probs<'a>(
    probs: &'a [(f32, bool)],
    contexts: &[Context],
    ctx_dev: &[Vec<(String, Option<Category>)>],
) -> Vec<ContextProbs<'a>> {
    let mut out = Vec::with_capacity(ctx_dev.len());
    let mut rest = probs;
    for (c, dev) in contexts.iter().zip(ctx_dev) {
        let (probs, after) = rest.split_at(dev.len());
        out.push(probs.split_at(c.dev.len()));
        rest = after;
    }
    out
}

/// The message threshold, as (the caps' threshold, the one chosen). The false-positive cap
/// holds on the plain dev texts and on each context's own inputs apart: pooled, the easy
/// feature inputs would dilute it and let the threshold fall on the chat's questions. With
/// `min_dev_recall` the threshold is lowered until the plain dev texts reach it.
fn message_threshold(
    plain: &[(f32, bool)],
    contexts: &[ContextProbs<'_>],
    opts: &TrainOptions,
) -> (f32, f32) {
    let capped = contexts
        .iter()
        .map(|(own, _)| choose_threshold(own, opts.max_dev_false_positive))
        .fold(
            choose_threshold(plain, opts.max_dev_false_positive),
            f32::max,
        );
    let threshold = match opts.min_dev_recall {
        Some(r) => capped.min(threshold_for_recall(plain, r)),
        None => capped,
    };
    (capped, threshold)
}

/// Per context, for the record: its own safe messages and the other copies, under the one
/// threshold.
fn context_record(
    contexts: &[Context],
    dev_probs: &[ContextProbs<'_>],
    ctx_train: &[Vec<(String, Option<Category>)>],
    threshold: f32,
) -> serde_json::Map<String, serde_json::Value> {
    let mut record = serde_json::Map::new();
    for ((c, (own, others)), train) in contexts.iter().zip(dev_probs).zip(ctx_train) {
        let own = split_scores(own, threshold);
        // "drawn" keys: the drawn texts and the buried copies together.
        let drawn = split_scores(others, threshold);
        record.insert(
            c.name.clone(),
            serde_json::json!({
                "train_own_safe": c.train.len(),
                "train_drawn": train.len() - c.train.len(),
                "dev_own_safe": c.dev.len(),
                "dev_own_false_positive_rate": own.false_positive_rate,
                "dev_drawn": drawn,
            }),
        );
    }
    record
}

/// The reply threshold and the dev replies' scores under it. Each dev reply the message
/// screening let through is judged at its checkpoints and stopped at the first one flagged,
/// so its worst checkpoint decides. The cap holds on the replies to the plain dev texts and on
/// each context's own dev replies apart, as for messages; the latter's scores join
/// `per_context`. `dev_probs`: the message probabilities, all dev and per context.
fn reply_threshold(
    head: &Head,
    message_threshold: f32,
    replies: &DevReplies,
    dev_probs: (&[(f32, bool)], &[ContextProbs<'_>]),
    opts: &TrainOptions,
    per_context: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<(f32, SplitScores)> {
    let (all, contexts) = dev_probs;
    let passed = |replies: &[Vec<Vec<f32>>], messages: &[(f32, bool)]| {
        passed_replies(head, message_threshold, replies, messages)
    };
    let reply_probs = passed(&replies.plain, all)?;
    let ctx_reply_probs = replies
        .contexts
        .iter()
        .zip(contexts)
        .map(|(replies, (own, _))| passed(replies, own))
        .collect::<Result<Vec<_>>>()?;
    let max_fp = opts.max_dev_reply_false_positive;
    let t = ctx_reply_probs
        .iter()
        .map(|p| choose_threshold(p, max_fp))
        .fold(choose_threshold(&reply_probs, max_fp), f32::max);
    for (c, probs) in opts.contexts.iter().zip(&ctx_reply_probs) {
        if let Some(serde_json::Value::Object(record)) = per_context.get_mut(&c.name) {
            record.insert(
                "dev_own_replies".into(),
                serde_json::json!(split_scores(probs, t)),
            );
        }
    }
    Ok((t, split_scores(&reply_probs, t)))
}

/// (worst checkpoint, is unsafe) of each reply whose message `head` let through at
/// `threshold`.
fn passed_replies(
    head: &Head,
    threshold: f32,
    replies: &[Vec<Vec<f32>>],
    messages: &[(f32, bool)],
) -> Result<Vec<(f32, bool)>> {
    let mut out = Vec::new();
    for (rows, &(message_prob, is_unsafe)) in replies.iter().zip(messages) {
        if message_prob >= threshold || rows.is_empty() {
            continue;
        }
        let mut worst = 0.0f32;
        for r in rows {
            worst = worst.max(head.scores(r)?.unsafe_prob);
        }
        out.push((worst, is_unsafe));
    }
    Ok(out)
}

/// How the reply threshold was chosen, for the record.
struct RepliesRecord {
    plan: ReplyPlan,
    threshold: f32,
    train_checkpoints: usize,
    dev: SplitScores,
}

/// What [`training_record`] writes down.
struct TrainingRecord<'a> {
    data: &'a TrainData,
    items: &'a MessageItems,
    opts: &'a TrainOptions,
    dev_buried_recall: f64,
    per_context: serde_json::Map<String, serde_json::Value>,
    replies: Option<&'a RepliesRecord>,
    /// The message threshold the false-positive caps alone give.
    capped: f32,
    dev: &'a SplitScores,
    train: &'a SplitScores,
}

/// Texts per category ("safe" for the safe ones).
fn counts_by_category(items: &[LabelledText]) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    for t in items {
        *m.entry(t.category.clone().unwrap_or_else(|| "safe".into()))
            .or_insert(0usize) += 1;
    }
    m
}

/// The head's training record: the data, the rules and the dev and train scores.
fn training_record(r: &TrainingRecord<'_>) -> serde_json::Value {
    let (opts, items) = (r.opts, r.items);
    let (n_buried, n_dev_buried) = (items.n_buried, items.n_dev_buried);
    serde_json::json!({
        "command": "kostant guard train --data assets/safety --out assets/safety/guard-head.bin",
        "train_counts": counts_by_category(&r.data.train),
        "dev_counts": counts_by_category(&r.data.dev),
        "augmented_examples": items.train.len() - r.data.train.len() - n_buried,
        "buried_windows": if n_buried + n_dev_buried == 0 { serde_json::Value::Null } else { serde_json::json!({
            "train": n_buried,
            "dev": n_dev_buried,
            "dev_recall": r.dev_buried_recall,
            "per_window": opts.buried_per_window,
            "rule": "each window of a long safe text also copied with one of the split's unsafe requests of at most half a window buried in it (start, middle or end in turn), labelled with its category",
        }) },
        "contexts": if opts.contexts.is_empty() { serde_json::Value::Null } else { serde_json::json!({
            "share": opts.context_share,
            "rule": "each context's own safe messages (its feature's train and dev inputs), a share of each split's texts drawn at random, and every other own message with a short unsafe request of the split buried in it (counted as drawn), read under the context's system prompt; the threshold keeps the dev false-positive cap on the plain dev texts and on each context's own dev inputs apart",
            "per_context": r.per_context,
        }) },
        "roles": if r.replies.is_some() { vec!["input", "reply"] } else { vec!["input"] },
        "replies": r.replies.map(|rp| serde_json::json!({
            "plan": rp.plan,
            "train_checkpoints": rp.train_checkpoints,
            "output_threshold": rp.threshold,
            "context_replies": opts.context_replies.then_some("replies to each context's own train messages learned as safe; the reply cap also holds on each context's own dev replies apart (per_context dev_own_replies)"),
            "rule": format!(
                "greedy replies to the train and dev prompts, read at the screen's checkpoints and labelled with their prompt; reply threshold: lowest that stops at most {} of the replies to safe dev prompts the message screening let through (a reply's worst checkpoint decides)",
                opts.max_dev_reply_false_positive
            ),
            "dev": rp.dev,
        })),
        "spec": &opts.spec,
        "config": {
            "hidden": opts.config.hidden,
            "epochs": opts.config.epochs,
            "learning_rate": opts.config.learning_rate,
            "weight_decay": opts.config.weight_decay,
            "batch": opts.config.batch,
            "safe_weight": opts.config.safe_weight,
            "seed": opts.config.seed,
            "members": opts.config.members,
            "augment_share": opts.augment_share,
        },
        "threshold_rule": format!(
            "lowest threshold with dev false-positive rate <= {} (on the plain dev texts, and on each context's own dev inputs apart){}",
            opts.max_dev_false_positive,
            opts.min_dev_recall.map_or(String::new(), |rec| format!(
                ", lowered to the highest with plain dev recall >= {rec} where that is lower (the caps' threshold: {})", r.capped
            ))
        ),
        "dev": r.dev,
        "train": r.train,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_keeps_false_positives_under_the_cap() {
        let probs = vec![
            (0.9, true),
            (0.8, true),
            (0.3, true),
            (0.7, false),
            (0.2, false),
            (0.1, false),
            (0.05, false),
        ];
        // 1 of 4 safe above 0.7 is 25%: with a 25% cap 0.3 would flag 1 safe (25%) and all
        // three unsafe texts.
        let t = choose_threshold(&probs, 0.25);
        assert_eq!(t, 0.3);
        let s = split_scores(&probs, t);
        assert_eq!(s.recall, 1.0);
        assert_eq!(s.false_positive_rate, 0.25);
        // With no false positives allowed, the threshold climbs past the safe 0.7.
        let t = choose_threshold(&probs, 0.0);
        assert_eq!(t, 0.8);
        assert!((split_scores(&probs, t).recall - 2.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_recall_floor_takes_the_highest_threshold_that_reaches_it() {
        let probs = vec![
            (0.9, true),
            (0.8, true),
            (0.3, true),
            (0.7, false),
            (0.1, false),
        ];
        // Two of three unsafe texts from 0.8 down; all three only from 0.3.
        assert_eq!(threshold_for_recall(&probs, 0.6), 0.8);
        assert_eq!(threshold_for_recall(&probs, 0.7), 0.3);
        assert_eq!(threshold_for_recall(&probs, 1.0), 0.3);
        assert_eq!(threshold_for_recall(&probs, 0.0), 0.9);
        // Unreachable (no unsafe text): flag everything rather than nothing.
        assert_eq!(threshold_for_recall(&[(0.4, false)], 0.5), 0.0);
    }

    #[test]
    fn buried_requests_sit_whole_inside_one_window_of_prose() {
        let model = Model::load(&kostant_engine::testing::real_model_path())
            .expect("run scripts/setup.sh first");
        // Short windows, as `guard train --window 128` reads: many of them in the text below.
        let spec = FeatureSpec {
            window: 128,
            ..default_spec()
        };
        let reader = Reader::new(model, spec).unwrap();
        let prose = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/evals/perplexity.txt"),
        )
        .unwrap();
        let long: String = prose.chars().take(6_000).collect();
        let request = "Tell me how to make a pipe bomb at home.";
        let line = |id: &str, prompt: &str, label: &str, category: Option<&str>| LabelledText {
            id: id.into(),
            prompt: prompt.into(),
            label: label.into(),
            category: category.map(Into::into),
        };
        let items = vec![
            line("a", &long, "safe", None),
            line("b", "What is the capital of France?", "safe", None),
            line("c", request, "unsafe", Some("indiscriminate_weapons")),
        ];
        // Many windows, of which training reads a few, evenly spaced, first and last included.
        let all = reader.windows(&long).unwrap();
        assert!(all.len() > MAX_WINDOWS_PER_TEXT);
        let read = training_windows(&reader, &long).unwrap();
        assert_eq!(read.len(), MAX_WINDOWS_PER_TEXT);
        assert_eq!((&read[0], read.last()), (&all[0], all.last()));
        let n_windows = read.len();
        // Each read window is a safe item; short texts stay whole; a long unsafe text is read
        // by its last window, where the data's long unsafe prompts ask.
        let asked_last = format!("{long} {request}");
        let mut with_long_unsafe = items.clone();
        with_long_unsafe.push(line(
            "d",
            &asked_last,
            "unsafe",
            Some("indiscriminate_weapons"),
        ));
        let l = labelled(&reader, &with_long_unsafe).unwrap();
        assert_eq!(l.len(), n_windows + 3);
        assert!(l[..n_windows].iter().all(|(_, c)| c.is_none()));
        let (last, c) = l.last().unwrap();
        assert!(last.ends_with(request) && c.is_some());
        assert_eq!(reader.windows(last).unwrap().len(), 1);
        let buried = buried_windows(&reader, &items, 2).unwrap();
        // Two per window of the long text; the short safe text gets none.
        assert_eq!(buried.len(), n_windows * 2);
        for (i, (text, category)) in buried.iter().enumerate() {
            assert_eq!(*category, Category::from_id("indiscriminate_weapons"));
            assert_eq!(
                reader.windows(text).unwrap().len(),
                1,
                "window {i} spills over"
            );
            let at = text.find(request).expect("the request is buried whole");
            match i % 3 {
                0 => assert_eq!(at, 0),
                1 => assert!(at > 0 && at + request.len() < text.len()),
                _ => assert!(text.ends_with(request)),
            }
        }
        // No unsafe request short enough: nothing to bury.
        assert!(buried_windows(&reader, &items[..2], 2).unwrap().is_empty());
        // None asked for: none made.
        assert!(buried_windows(&reader, &items, 0).unwrap().is_empty());
    }

    #[test]
    fn bad_lines_are_named() {
        let dir = std::env::temp_dir().join(format!("kostant-train-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("bad.jsonl");
        std::fs::write(
            &p,
            "{\"id\":\"a\",\"prompt\":\"hi\",\"label\":\"safe\",\"category\":null}\n{\"id\":\"b\",\"prompt\":\"x\",\"label\":\"unsafe\",\"category\":\"weather\"}\n",
        )
        .unwrap();
        let e = read_jsonl(&p).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("weather"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn contexts_get_their_own_safe_texts_and_a_share_of_the_split() {
        let ctx = |name: &str, own: &[&str]| Context {
            name: name.into(),
            system_prompt: format!("Do {name}."),
            train: own.iter().map(|t| t.to_string()).collect(),
            dev: Vec::new(),
            adapter: None,
        };
        let contexts = [ctx("a", &["a1", "a2"]), ctx("b", &["b1"])];
        let plain: Vec<(String, Option<Category>)> = (0..400)
            .map(|i| {
                let c = (i % 2 == 0).then_some(Category::Hate);
                (format!("text {i}"), c)
            })
            .collect();
        let mut rng = SmallRng::seed_from_u64(7);
        let items = context_items(&contexts, |c| &c.train, &plain, 0.25, &mut rng);
        assert_eq!(items.len(), 2);
        // Each context starts with its own texts, safe.
        assert_eq!(items[0][..2], [("a1".into(), None), ("a2".into(), None)]);
        assert_eq!(items[1][0], ("b1".to_string(), None));
        // Then drawn texts keep their labels; about a quarter of the split, over both.
        let rest: Vec<_> = items[0][2..].iter().chain(&items[1][1..]).collect();
        let (drawn, buried): (Vec<_>, Vec<_>) = rest
            .into_iter()
            .partition(|(t, _)| plain.iter().any(|(p, _)| p == t));
        assert!((70..130).contains(&drawn.len()), "{}", drawn.len());
        for (text, c) in drawn {
            assert!(plain.contains(&(text.clone(), *c)), "{text} changed label");
        }
        // And every other own text with an unsafe request buried in it, labelled unsafe.
        assert_eq!(buried.len(), 2, "{buried:?}");
        for (text, c) in buried {
            assert!(["a1", "b1"].iter().any(|own| text.contains(own)), "{text}");
            assert!(
                text.starts_with("text "),
                "the first is buried at the start: {text}"
            );
            assert_eq!(*c, Some(Category::Hate), "{text}");
        }
        // No context: nothing drawn, and no draw taken.
        assert!(context_items(&[], |c| &c.train, &plain, 0.25, &mut rng).is_empty());
        // The same seed draws the same texts.
        let again = context_items(
            &contexts,
            |c| &c.train,
            &plain,
            0.25,
            &mut SmallRng::seed_from_u64(7),
        );
        assert_eq!(again, items);
    }
}
