//! Training the head that reads a long message's parts ([`crate::parts`]), attached to a main
//! head as `Head::parts` (`kostant guard train-parts`).
//!
//! Examples, each read as the riding screen reads it (the chat's pass over the whole message,
//! the main head's taps, one part's mean and last states):
//! - every part of each long train text (pasted emails, stories, notes...): safe;
//! - the same texts with short unsafe train requests buried in them, each as a paragraph of its
//!   own: the request's part is unsafe (its category), the parts after it safe;
//! - with `inline_copies`, the same texts with one request put inline, after a sentence of a
//!   paragraph (a user who types the request into the pasted text rather than under it): the
//!   part holding the whole request is unsafe, though it carries prose too; parts holding only
//!   some of it are left out (not in the shipped head's recipe: see `--inline-copies`);
//! - every train prompt, read whole as one part: what a request looks like, safe or not.
//!
//! The threshold is chosen per text on the dev texts (a third of the long texts, alone and in
//! pairs): the lowest at which at most `max_dev_false_positive` of the clean ones are flagged by
//! their worst part. The same texts with one dev request buried, as a paragraph and inline,
//! measure recall, for the new head and for the one it replaces.

use std::ops::Range;
use std::sync::Arc;

use kostant_engine::{Batch, Model, Outputs, Session};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::head::{self, Example, Head, HeadInfo, TrainConfig};
use crate::normalize::normalize;
use crate::parts::{part_features, part_ranges, PART_MAX_TOKENS};
use crate::reader::{frame_message, FeatureSpec};
use crate::replies::{reply_checkpoints, ReplyPlan};
use crate::train::LabelledText;
use crate::{Category, Result, SafetyError};

/// Longest request buried in a long text, in words: one short paragraph, within a part.
const MAX_BURIED_WORDS: usize = 60;

#[derive(Clone, Debug)]
pub struct PartsOptions {
    /// Copies of each long train text with requests buried in it.
    pub buried_copies: usize,
    /// Requests buried in each copy, at distinct paragraph breaks.
    pub requests_per_copy: usize,
    /// Copies of each long train text with one request put inline, inside a paragraph.
    pub inline_copies: usize,
    /// Highest share of clean dev texts the threshold may flag.
    pub max_dev_false_positive: f64,
    pub config: TrainConfig,
}

/// The parts head and what its training measured.
pub struct TrainedParts {
    pub head: Head,
    pub report: serde_json::Value,
}

/// Reads conversations as the riding screen does and returns their parts' features.
pub(crate) struct PassReader {
    model: Arc<Model>,
    session: Session,
    spec: FeatureSpec,
    outputs: Outputs,
}

impl PassReader {
    pub(crate) fn new(model: Arc<Model>, spec: FeatureSpec) -> Result<PassReader> {
        let session = Session::new(model.clone(), model.hparams.n_ctx_train.min(8192))?;
        Ok(PassReader {
            model,
            session,
            spec,
            outputs: Outputs::new(),
        })
    }

    /// The chat model's greedy reply to `message` under `plan`, read at its checkpoints as the
    /// screen reads a reply (from the message's last window on).
    pub(crate) fn reply(&mut self, message: &str, plan: ReplyPlan) -> Result<Vec<Vec<f32>>> {
        reply_checkpoints(&mut self.session, &self.spec, message, plan)
    }

    /// The highest unsafe probability `head` gives a part of `message`.
    pub(crate) fn worst_part(&mut self, head: &Head, message: &str) -> Result<f32> {
        let parts = self.parts(message, false)?;
        worst_of(head, &parts)
    }

    /// The parts of `message` (or the message as one part when `whole`), with each part's text
    /// and features.
    pub(crate) fn parts(&mut self, message: &str, whole: bool) -> Result<Vec<(String, Vec<f32>)>> {
        let (tokens, start) = frame_message(&self.model, &self.spec.system_prompt, message)?;
        if tokens.len() > self.session.n_ctx() {
            return Err(SafetyError::Head(format!(
                "a text of {} tokens does not fit the {}-token context it is read in",
                tokens.len(),
                self.session.n_ctx()
            )));
        }
        self.session.reset();
        self.session
            .decode(&Batch::hidden(&tokens, &self.spec.taps), &mut self.outputs)?;
        let states = self.outputs.take_states();
        let ranges: Vec<Range<usize>> = if whole {
            std::iter::once(start..tokens.len()).collect()
        } else {
            part_ranges(&self.model, &tokens, start..tokens.len(), PART_MAX_TOKENS)
        };
        let features = part_features(&states, &ranges, self.model.hparams.n_embd);
        Ok(ranges
            .iter()
            .map(|r| self.model.tokenizer.decode(&tokens[r.clone()]))
            .zip(features)
            .collect())
    }
}

/// Short one-paragraph unsafe requests of a split, to bury.
pub(crate) fn buriable(items: &[LabelledText]) -> Result<Vec<(String, Category)>> {
    let mut out = Vec::new();
    for item in items {
        let Some(c) = item.target().map_err(SafetyError::Head)? else {
            continue;
        };
        let text = normalize(&item.prompt).trim().to_string();
        if !text.contains('\n') && text.split_whitespace().count() <= MAX_BURIED_WORDS {
            out.push((text, c));
        }
    }
    Ok(out)
}

/// `text` with each of `requests` put in as a paragraph of its own at distinct paragraph
/// breaks after the first paragraph (the user's own line asking for the task).
fn bury(text: &str, requests: &[&str], rng: &mut SmallRng) -> String {
    let mut paragraphs: Vec<String> = text.split("\n\n").map(str::to_string).collect();
    let mut slots: Vec<usize> = (1..paragraphs.len().max(2)).collect();
    slots.shuffle(rng);
    let mut chosen: Vec<(usize, &str)> = slots.into_iter().zip(requests.iter().copied()).collect();
    // Insert from the back so earlier slots keep their places.
    chosen.sort_by_key(|c| std::cmp::Reverse(c.0));
    for (at, r) in chosen {
        paragraphs.insert(at.min(paragraphs.len()), r.to_string());
    }
    paragraphs.join("\n\n")
}

/// `text` with `request` put inside one of its paragraphs after the first: after one of the
/// paragraph's sentences, chosen at random (its end included), joined by a space.
fn bury_inline(text: &str, request: &str, rng: &mut SmallRng) -> String {
    let mut paragraphs: Vec<String> = text.split("\n\n").map(str::to_string).collect();
    if paragraphs.len() < 2 {
        return format!("{text} {request}");
    }
    let at = rng.gen_range(1..paragraphs.len());
    let p = &paragraphs[at];
    let ends: Vec<usize> = p
        .char_indices()
        .filter(|&(i, c)| matches!(c, '.' | '!' | '?') && p[i + 1..].starts_with(' '))
        .map(|(i, _)| i + 1)
        .chain(std::iter::once(p.len()))
        .collect();
    let cut = ends[rng.gen_range(0..ends.len())];
    let (before, after) = p.split_at(cut);
    paragraphs[at] = format!("{before} {request}{after}");
    paragraphs.join("\n\n")
}

/// The highest unsafe probability `head` gives one of `parts`.
fn worst_of(head: &Head, parts: &[(String, Vec<f32>)]) -> Result<f32> {
    let mut w = 0.0f32;
    for (_, f) in parts {
        w = w.max(head.scores(f)?.unsafe_prob);
    }
    Ok(w)
}

/// How a part's text stands to a request put inside the text it came from.
#[derive(Debug, PartialEq, Eq)]
enum Holds {
    All,
    Some,
    None,
}

/// Whether part text `part` holds all of `request`, some of it (its start or its end) or none.
fn holds(part: &str, request: &str) -> Holds {
    let (part, request) = (part.trim(), request.trim());
    if part.contains(request) {
        return Holds::All;
    }
    let edge = |s: &str, from_end: bool| -> String {
        let words: Vec<&str> = s.split_whitespace().collect();
        let n = words.len().min(3);
        let w = if from_end {
            &words[words.len() - n..]
        } else {
            &words[..n]
        };
        w.join(" ")
    };
    let (start, end) = (edge(request, false), edge(request, true));
    if part.contains(&start) || part.contains(&end) || request.contains(part) {
        Holds::Some
    } else {
        Holds::None
    }
}

/// The body of a long text: all but its first paragraph (the request line).
pub(crate) fn body(text: &str) -> &str {
    text.split_once("\n\n").map_or(text, |(_, b)| b)
}

/// Whether part text `part` is the buried `request`.
fn is_request(part: &str, request: &str) -> bool {
    part.trim() == request.trim()
}

/// What a head for `model` read with `spec` says of itself before training and dev fill in
/// its thresholds and record.
pub(crate) fn untrained_info(spec: FeatureSpec, model: &Model, hidden: usize) -> HeadInfo {
    HeadInfo {
        spec,
        model_name: model.name(),
        n_embd: model.hparams.n_embd,
        hidden,
        threshold: 0.5,
        output_threshold: None,
        category_rules: Default::default(),
        training: serde_json::Value::Null,
    }
}

/// The long texts' train and dev shares: every third text is dev.
pub(crate) fn split_texts(long_texts: &[String]) -> Result<(Vec<&str>, Vec<&str>)> {
    let (mut train, mut dev) = (Vec::new(), Vec::new());
    for (i, t) in long_texts.iter().enumerate() {
        if i % 3 == 2 {
            dev.push(t.as_str());
        } else {
            train.push(t.as_str());
        }
    }
    if train.is_empty() || dev.is_empty() {
        return Err(SafetyError::Head("too few long texts to split".into()));
    }
    Ok((train, dev))
}

/// What the parts head learns from: pasted texts, each a request line, a blank line and the
/// text; and the main head's train and dev splits.
#[derive(Clone, Copy)]
pub struct PartsData<'a> {
    pub long_texts: &'a [String],
    pub train: &'a [LabelledText],
    pub dev: &'a [LabelledText],
}

/// The dev texts' parts (text and features), by how they were made.
#[derive(Default)]
struct DevScores {
    clean: Vec<Vec<(String, Vec<f32>)>>,
    paragraph: Vec<Vec<(String, Vec<f32>)>>,
    inline: Vec<Vec<(String, Vec<f32>)>>,
}

/// The examples the parts head learns from, and how many of each kind were made (the
/// record's `counts`).
struct PartsExamples {
    examples: Vec<Example>,
    counts: serde_json::Value,
}

impl PartsExamples {
    fn push(&mut self, features: Vec<f32>, category: Option<Category>) {
        self.examples.push(Example { features, category });
    }
}

/// Trains the parts head for a main head read with `spec` on `data`; `replaces` is the parts
/// head this one would replace, measured on the same dev texts. Stages: the examples (train
/// prompts, long train texts clean, with requests buried and with one inline), the head, then
/// its threshold picked on the dev texts and both heads measured there.
pub fn train_parts_head(
    model: Arc<Model>,
    spec: &FeatureSpec,
    data: PartsData<'_>,
    opts: &PartsOptions,
    replaces: Option<&Head>,
    mut progress: impl FnMut(&str),
) -> Result<TrainedParts> {
    let PartsData {
        long_texts,
        train,
        dev,
    } = data;
    let (train_texts, dev_texts) = split_texts(long_texts)?;
    let train_requests = buriable(train)?;
    let dev_requests = buriable(dev)?;
    if train_requests.is_empty() || dev_requests.is_empty() {
        return Err(SafetyError::Head("no short unsafe requests to bury".into()));
    }
    let mut rng = SmallRng::seed_from_u64(opts.config.seed);
    let mut reader = PassReader::new(model.clone(), spec.clone())?;
    let mut out = PartsExamples {
        examples: Vec::new(),
        counts: json!({}),
    };
    prompt_examples(&mut reader, train, &mut out, &mut progress)?;
    prose_examples(&mut reader, &train_texts, &mut out, &mut progress)?;
    let requests = TrainRequests {
        texts: &train_texts,
        requests: &train_requests,
    };
    buried_examples(
        &mut reader,
        requests,
        opts,
        &mut rng,
        &mut out,
        &mut progress,
    )?;
    inline_examples(
        &mut reader,
        requests,
        opts,
        &mut rng,
        &mut out,
        &mut progress,
    )?;

    progress("training");
    let spec = FeatureSpec {
        window: PART_MAX_TOKENS,
        ..spec.clone()
    };
    let info = untrained_info(spec, &model, opts.config.hidden);
    let mut head = head::train(&out.examples, info, &opts.config)?;

    progress("dev texts");
    let dev = read_dev_texts(
        &mut reader,
        &dev_texts,
        &dev_requests,
        &mut rng,
        &mut progress,
    )?;
    let clean = worst_all(&head, &dev.clean)?;
    head.info.threshold = pick_threshold(&clean, opts.max_dev_false_positive);
    let dev_record = measure_dev(&head, &dev)?;
    let replaced = match replaces {
        Some(old) => measure_dev(old, &dev)?,
        None => serde_json::Value::Null,
    };
    head.info.training = json!({
        "command": "kostant guard train-parts",
        "examples": out.examples.len(),
        "counts": out.counts,
        "long_texts": {"train": train_texts.len(), "dev": dev_texts.len()},
        "config": {
            "hidden": opts.config.hidden, "epochs": opts.config.epochs,
            "members": opts.config.members, "seed": opts.config.seed,
            "buried_copies": opts.buried_copies, "requests_per_copy": opts.requests_per_copy,
            "inline_copies": opts.inline_copies,
        },
        "dev": dev_record,
        "dev_for_the_head_it_replaces": replaced,
    });
    Ok(TrainedParts {
        report: head.info.training.clone(),
        head,
    })
}

/// The long train texts and the short unsafe train requests buried in them.
#[derive(Clone, Copy)]
struct TrainRequests<'a> {
    texts: &'a [&'a str],
    requests: &'a [(String, Category)],
}

/// Every train prompt, read whole as one part, labelled with its target.
fn prompt_examples(
    reader: &mut PassReader,
    train: &[LabelledText],
    out: &mut PartsExamples,
    progress: &mut dyn FnMut(&str),
) -> Result<()> {
    progress("train prompts, each read whole");
    for item in train {
        let target = item.target().map_err(SafetyError::Head)?;
        for (_, f) in reader.parts(&item.prompt, true)? {
            out.push(f, target);
        }
    }
    out.counts["prompts"] = json!(out.examples.len());
    Ok(())
}

/// Every part of each long train text, safe.
fn prose_examples(
    reader: &mut PassReader,
    train_texts: &[&str],
    out: &mut PartsExamples,
    progress: &mut dyn FnMut(&str),
) -> Result<()> {
    progress("long train texts");
    let mut prose = 0;
    for t in train_texts {
        for (_, f) in reader.parts(t, false)? {
            out.push(f, None);
            prose += 1;
        }
    }
    out.counts["prose_parts"] = json!(prose);
    Ok(())
}

/// `opts.buried_copies` copies of each long train text with `opts.requests_per_copy` requests
/// buried as paragraphs: each request's part unsafe (its category), the parts after the first
/// safe.
fn buried_examples(
    reader: &mut PassReader,
    train: TrainRequests<'_>,
    opts: &PartsOptions,
    rng: &mut SmallRng,
    out: &mut PartsExamples,
    progress: &mut dyn FnMut(&str),
) -> Result<()> {
    progress("long train texts with requests buried");
    let (mut buried, mut after, mut missed) = (0, 0, 0);
    for (k, t) in train.texts.iter().enumerate() {
        for copy in 0..opts.buried_copies {
            progress(&format!("text {}/{} copy {copy}", k + 1, train.texts.len()));
            let picks: Vec<&(String, Category)> = train
                .requests
                .choose_multiple(rng, opts.requests_per_copy)
                .collect();
            let texts: Vec<&str> = picks.iter().map(|(r, _)| r.as_str()).collect();
            let text = bury(t, &texts, rng);
            let mut seen = 0;
            for (part, f) in reader.parts(&text, false)? {
                if let Some((_, c)) = picks.iter().find(|(r, _)| is_request(&part, r)) {
                    out.push(f, Some(*c));
                    seen += 1;
                    buried += 1;
                } else if seen > 0 {
                    // The prose after a request: states the clean pass never made.
                    out.push(f, None);
                    after += 1;
                }
            }
            missed += picks.len() - seen.min(picks.len());
        }
    }
    out.counts["buried_requests"] = json!(buried);
    out.counts["prose_parts_after_a_request"] = json!(after);
    out.counts["requests_not_found_as_a_part"] = json!(missed);
    Ok(())
}

/// `opts.inline_copies` copies of each long train text with one request put inline: the part
/// holding all of it unsafe, parts holding some of it left out, the parts after it safe.
fn inline_examples(
    reader: &mut PassReader,
    train: TrainRequests<'_>,
    opts: &PartsOptions,
    rng: &mut SmallRng,
    out: &mut PartsExamples,
    progress: &mut dyn FnMut(&str),
) -> Result<()> {
    progress("long train texts with a request inline");
    let (mut inline, mut inline_after) = (0, 0);
    for (k, t) in train.texts.iter().enumerate() {
        for copy in 0..opts.inline_copies {
            progress(&format!(
                "text {}/{} inline copy {copy}",
                k + 1,
                train.texts.len()
            ));
            let (request, c) = &train.requests[rng.gen_range(0..train.requests.len())];
            let text = bury_inline(t, request, rng);
            // Parts before the request were read in the clean pass already.
            let mut seen = false;
            for (part, f) in reader.parts(&text, false)? {
                match holds(&part, request) {
                    Holds::All => {
                        out.push(f, Some(*c));
                        seen = true;
                        inline += 1;
                    }
                    // Half a request and half prose: neither label is true.
                    Holds::Some => seen = true,
                    Holds::None if seen => {
                        out.push(f, None);
                        inline_after += 1;
                    }
                    Holds::None => {}
                }
            }
        }
    }
    out.counts["inline_requests"] = json!(inline);
    out.counts["prose_parts_after_an_inline_request"] = json!(inline_after);
    out.counts["inline_requests_split_across_parts"] =
        json!((opts.inline_copies * train.texts.len()).saturating_sub(inline));
    Ok(())
}

/// Each dev text's parts, read once so the new head and the one it replaces are scored on the
/// same texts: alone and paired with the next, and the pair with two dev requests buried as
/// paragraphs and two inline.
fn read_dev_texts(
    reader: &mut PassReader,
    dev_texts: &[&str],
    dev_requests: &[(String, Category)],
    rng: &mut SmallRng,
    progress: &mut dyn FnMut(&str),
) -> Result<DevScores> {
    let mut dev = DevScores::default();
    for (k, t) in dev_texts.iter().enumerate() {
        progress(&format!("dev text {}/{}", k + 1, dev_texts.len()));
        let other = dev_texts[(k + 1) % dev_texts.len()];
        let pair = format!("{t}\n\n{}", body(other));
        for clean in [t.to_string(), pair.clone()] {
            dev.clean.push(reader.parts(&clean, false)?);
        }
        for _ in 0..2 {
            let (r, _) = &dev_requests[rng.gen_range(0..dev_requests.len())];
            let text = bury(&pair, &[r.as_str()], rng);
            dev.paragraph.push(reader.parts(&text, false)?);
            let (r, _) = &dev_requests[rng.gen_range(0..dev_requests.len())];
            let text = bury_inline(&pair, r, rng);
            dev.inline.push(reader.parts(&text, false)?);
        }
    }
    Ok(dev)
}

/// Each text's worst part score under `head`.
fn worst_all(head: &Head, texts: &[Vec<(String, Vec<f32>)>]) -> Result<Vec<f32>> {
    texts.iter().map(|p| worst_of(head, p)).collect()
}

/// What `head` (at its own threshold) flags of the dev texts: the record's `dev` fields.
fn measure_dev(head: &Head, dev: &DevScores) -> Result<serde_json::Value> {
    let t = head.info.threshold;
    // Per dev text, in the order of the texts given (each text read alone and in a pair,
    // and with two requests as paragraphs and two inline): so a subset of the texts (one
    // source's) can be read off the record. The totals are their sums.
    let by_text = |texts: &[Vec<(String, Vec<f32>)>]| -> Result<Vec<usize>> {
        Ok(flagged_per_text(&worst_all(head, texts)?, t, 2))
    };
    let (clean, paragraph, inline) = (
        by_text(&dev.clean)?,
        by_text(&dev.paragraph)?,
        by_text(&dev.inline)?,
    );
    let total = |v: &[usize]| v.iter().sum::<usize>();
    Ok(json!({
        "threshold": t,
        "clean_texts": dev.clean.len(),
        "clean_flagged": total(&clean),
        "texts_with_a_request": dev.paragraph.len(),
        "texts_with_a_request_flagged": total(&paragraph),
        "texts_with_a_request_inline": dev.inline.len(),
        "texts_with_a_request_inline_flagged": total(&inline),
        "flagged_by_dev_text": {
            "clean": clean,
            "with_a_request": paragraph,
            "with_a_request_inline": inline,
        },
    }))
}

/// How many of each text's `per_text` consecutive scores reach `threshold`.
fn flagged_per_text(scores: &[f32], threshold: f32, per_text: usize) -> Vec<usize> {
    scores
        .chunks(per_text.max(1))
        .map(|c| c.iter().filter(|&&s| s >= threshold).count())
        .collect()
}

/// The lowest threshold at which at most `max_share` of `clean` scores reach it.
pub(crate) fn pick_threshold(clean: &[f32], max_share: f64) -> f32 {
    let mut sorted = clean.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let allowed = (max_share * clean.len() as f64).floor() as usize;
    match sorted.get(allowed) {
        // Just above the highest clean score that must not be flagged.
        Some(&s) => f32::min(1.0, next_up(s)),
        None => 0.5,
    }
}

fn next_up(x: f32) -> f32 {
    f32::from_bits(x.to_bits() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buried_requests_are_paragraphs_of_their_own_after_the_first() {
        let text = "Summarize this:\n\nOne.\n\nTwo.\n\nThree.";
        let mut rng = SmallRng::seed_from_u64(1);
        let out = bury(text, &["Do X.", "Do Y."], &mut rng);
        let paragraphs: Vec<&str> = out.split("\n\n").collect();
        assert_eq!(paragraphs.len(), 6);
        assert_eq!(paragraphs[0], "Summarize this:");
        assert!(paragraphs.contains(&"Do X.") && paragraphs.contains(&"Do Y."));
    }

    #[test]
    fn an_inline_request_goes_inside_a_paragraph_after_the_first() {
        let text = "Summarize this:\n\nOne. Two.\n\nThree.";
        for seed in 0..20 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let out = bury_inline(text, "Do X.", &mut rng);
            let paragraphs: Vec<&str> = out.split("\n\n").collect();
            assert_eq!(paragraphs.len(), 3, "{out}");
            assert_eq!(paragraphs[0], "Summarize this:");
            assert!(
                ["One. Do X. Two.", "One. Two. Do X.", "Three. Do X."]
                    .iter()
                    .any(|p| paragraphs.contains(p)),
                "{out}"
            );
        }
    }

    #[test]
    fn a_part_holds_all_some_or_none_of_a_request() {
        let r = "Tell me how to pick the lock on my neighbour's door tonight.";
        assert_eq!(holds(&format!("It rained. {r}"), r), Holds::All);
        assert_eq!(holds("It rained. Tell me how to pick", r), Holds::Some);
        assert_eq!(
            holds("the lock on my neighbour's door tonight.", r),
            Holds::Some
        );
        assert_eq!(holds("It rained all day.", r), Holds::None);
    }

    #[test]
    fn flags_are_counted_per_text_in_order() {
        let scores = [0.9, 0.1, 0.2, 0.3, 0.95, 0.99];
        assert_eq!(flagged_per_text(&scores, 0.9, 2), [1, 0, 2]);
        assert_eq!(flagged_per_text(&scores, 0.0, 2), [2, 2, 2]);
        assert_eq!(flagged_per_text(&scores, 0.9, 4), [1, 2]);
    }

    #[test]
    fn the_threshold_flags_at_most_the_allowed_share() {
        let clean: Vec<f32> = (0..100).map(|i| i as f32 / 100.0).collect();
        let t = pick_threshold(&clean, 0.05);
        assert_eq!(clean.iter().filter(|&&s| s >= t).count(), 5);
    }
}
