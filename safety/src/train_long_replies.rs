//! Training the head that judges the reply to a long message (`Head::long_replies`,
//! `kostant guard train-long-replies`).
//!
//! Why a head of its own: the main head learned replies to short messages, read after the
//! whole message. After a long pasted text the screen reads the reply on from the message's
//! last window, a window of prose the main head calls unsafe, so it withdrew replies to one long
//! benign text in seven (docs/eval-report.md). Mixed into the parts head, the same
//! reply examples cost it on messages (dev: clean texts flagged 1 -> 4 of 64, texts with a
//! request buried 62 -> 59 of 64; scripts/safety-data/pending/README.md), so replies get a head
//! apart, reading the same taps.
//!
//! Examples, each a checkpoint of the chat model's greedy reply read as the screen reads it:
//! - replies to the long train texts: safe;
//! - replies to the same texts with one train request buried in their last paragraphs (inside
//!   the last window the reply is read with): unsafe, the request's category, as the main head
//!   labels a reply by its message;
//! - replies to a sample of the train prompts, labelled by their prompts: what a reply to a
//!   harmful request looks like.
//!
//! The threshold stops at most `max_dev_false_positive` of the replies to the dev texts (alone
//! and in pairs) that the parts head lets through, a reply's worst checkpoint deciding.

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::sync::Arc;

use kostant_engine::Model;

use crate::head::{self, Example, Head, TrainConfig};
use crate::replies::ReplyPlan;
use crate::train::LabelledText;
use crate::train_parts::{body, buriable, pick_threshold, split_texts, untrained_info, PassReader};
use crate::{Category, Result, SafetyError};

#[derive(Clone, Debug)]
pub struct LongReplyOptions {
    /// How replies are drawn and read.
    pub plan: ReplyPlan,
    /// Train prompts whose replies are learned too (a random sample of this many).
    pub prompts: usize,
    /// Highest share of replies to clean dev texts the threshold may stop.
    pub max_dev_false_positive: f64,
    pub config: TrainConfig,
}

/// The long-reply head and what its training measured.
pub struct TrainedLongReplies {
    pub head: Head,
    pub report: serde_json::Value,
}

/// A last paragraph of at most this many words (under 150 tokens) leaves room for a request
/// before it within the last 256 tokens.
const LAST_PARAGRAPH_WORDS: usize = 100;

/// `text` with `request` put in as a paragraph of its own before its last paragraph, or after
/// it when that paragraph is long: within the last 256 tokens, which the message's last window
/// always holds (`reader::window_ranges`: windows start every half window).
fn bury_near_end(text: &str, request: &str) -> String {
    match text.rsplit_once("\n\n") {
        Some((head, last)) if last.split_whitespace().count() <= LAST_PARAGRAPH_WORDS => {
            format!("{head}\n\n{request}\n\n{last}")
        }
        _ => format!("{text}\n\n{request}"),
    }
}

/// Trains the long-reply head for `main` (read with its spec; it must have a parts head).
/// `long_texts`, `train` and `dev` as in [`crate::train_parts::PartsData`]. Stages: the
/// examples (replies to train prompts, to the long train texts and to them with a request near
/// the end), the head, its threshold on the replies to the clean dev texts the parts head lets
/// through, then how it stops replies to dev texts with a request near the end.
pub fn train_long_reply_head(
    model: Arc<Model>,
    main: &Head,
    long_texts: &[String],
    train: &[LabelledText],
    dev: &[LabelledText],
    opts: &LongReplyOptions,
    mut progress: impl FnMut(&str),
) -> Result<TrainedLongReplies> {
    let spec = &main.info.spec;
    let parts = main
        .parts
        .as_deref()
        .ok_or_else(|| SafetyError::Head("the head has no parts head to train beside".into()))?;
    let (train_texts, dev_texts) = split_texts(long_texts)?;
    let train_requests = buriable(train)?;
    let dev_requests = buriable(dev)?;
    if train_requests.is_empty() || dev_requests.is_empty() {
        return Err(SafetyError::Head("no short unsafe requests to bury".into()));
    }
    let plan = opts.plan;
    let mut rng = SmallRng::seed_from_u64(opts.config.seed);
    let mut reader = PassReader::new(model.clone(), spec.clone())?;
    let mut examples = Vec::new();
    let mut counts = prompt_reply_examples(
        &mut reader,
        train,
        opts,
        &mut rng,
        &mut examples,
        &mut progress,
    )?;
    let texts = LongTexts {
        texts: &train_texts,
        requests: &train_requests,
    };
    let text_counts = text_reply_examples(
        &mut reader,
        texts,
        plan,
        &mut rng,
        &mut examples,
        &mut progress,
    )?;
    for (k, v) in text_counts {
        counts[k] = json!(v);
    }

    progress("training");
    let info = untrained_info(spec.clone(), &model, opts.config.hidden);
    let mut head = head::train(&examples, info, &opts.config)?;

    progress("replies to the dev texts");
    let screens = Screens {
        parts,
        head: &head,
        plan,
    };
    let (clean_replies, refused_on_sight) =
        dev_clean_replies(&mut reader, screens, &dev_texts, &mut progress)?;
    let threshold = pick_threshold(&clean_replies, opts.max_dev_false_positive);
    head.info.threshold = threshold;
    head.info.output_threshold = Some(threshold);
    let screens = Screens {
        parts,
        head: &head,
        plan,
    };
    let dev_texts_requests = LongTexts {
        texts: &dev_texts,
        requests: &dev_requests,
    };
    let (near_end_on_sight, near_end_stopped) = dev_near_end(
        &mut reader,
        screens,
        threshold,
        dev_texts_requests,
        &mut rng,
    )?;
    let stopped = clean_replies.iter().filter(|&&s| s >= threshold).count();
    head.info.training = json!({
        "command": "kostant guard train-long-replies",
        "examples": examples.len(),
        "counts": counts,
        "long_texts": {"train": train_texts.len(), "dev": dev_texts.len()},
        "config": {
            "hidden": opts.config.hidden, "epochs": opts.config.epochs,
            "members": opts.config.members, "seed": opts.config.seed, "plan": plan,
        },
        "dev": {
            "threshold": threshold,
            "clean_texts_refused_on_sight": refused_on_sight,
            "clean_replies": clean_replies.len(),
            "clean_replies_stopped": stopped,
            "texts_with_a_request_near_the_end": dev_texts.len(),
            "of_them_refused_on_sight": near_end_on_sight,
            "of_the_rest_replies_stopped": near_end_stopped,
        },
    });
    Ok(TrainedLongReplies {
        report: head.info.training.clone(),
        head,
    })
}

/// Long texts and the short unsafe requests of the same split to bury in them.
#[derive(Clone, Copy)]
struct LongTexts<'a> {
    texts: &'a [&'a str],
    requests: &'a [(String, Category)],
}

/// The parts head that refuses a text on sight, and the long-reply head reading the replies
/// to what it lets through, at their checkpoints under `plan`.
#[derive(Clone, Copy)]
struct Screens<'a> {
    parts: &'a Head,
    head: &'a Head,
    plan: ReplyPlan,
}

impl Screens<'_> {
    /// Whether the parts head refuses `text` on sight.
    fn refused_on_sight(&self, reader: &mut PassReader, text: &str) -> Result<bool> {
        Ok(reader.worst_part(self.parts, text)? >= self.parts.info.threshold)
    }

    /// The worst score of the reply to `text` over its checkpoints.
    fn reply_worst(&self, reader: &mut PassReader, text: &str) -> Result<f32> {
        let mut w = 0.0f32;
        for f in reader.reply(text, self.plan)? {
            w = w.max(self.head.scores(&f)?.unsafe_prob);
        }
        Ok(w)
    }
}

/// The checkpoints of greedy replies to `opts.prompts` train prompts drawn at random, labelled
/// with their prompt; the record's counts of them.
fn prompt_reply_examples(
    reader: &mut PassReader,
    train: &[LabelledText],
    opts: &LongReplyOptions,
    rng: &mut SmallRng,
    examples: &mut Vec<Example>,
    progress: &mut dyn FnMut(&str),
) -> Result<serde_json::Value> {
    let mut order: Vec<usize> = (0..train.len()).collect();
    order.shuffle(rng);
    order.truncate(opts.prompts);
    let (mut safe, mut unsafe_) = (0, 0);
    for (k, &i) in order.iter().enumerate() {
        if k % 100 == 0 {
            progress(&format!("replies to train prompts {k}/{}", order.len()));
        }
        let target = train[i].target().map_err(SafetyError::Head)?;
        for features in reader.reply(&train[i].prompt, opts.plan)? {
            match target {
                Some(_) => unsafe_ += 1,
                None => safe += 1,
            }
            examples.push(Example {
                features,
                category: target,
            });
        }
    }
    Ok(json!({
        "prompts": order.len(),
        "prompt_checkpoints_safe": safe,
        "prompt_checkpoints_unsafe": unsafe_,
    }))
}

/// The checkpoints of replies to each long train text (safe) and to it with a train request
/// near the end (the request's category); the record's counts of them.
fn text_reply_examples(
    reader: &mut PassReader,
    train: LongTexts<'_>,
    plan: ReplyPlan,
    rng: &mut SmallRng,
    examples: &mut Vec<Example>,
    progress: &mut dyn FnMut(&str),
) -> Result<[(&'static str, usize); 2]> {
    let (mut clean, mut near_end) = (0, 0);
    for (k, t) in train.texts.iter().enumerate() {
        progress(&format!(
            "replies to long train text {}/{}",
            k + 1,
            train.texts.len()
        ));
        for features in reader.reply(t, plan)? {
            examples.push(Example {
                features,
                category: None,
            });
            clean += 1;
        }
        let (request, category) = &train.requests[rng.gen_range(0..train.requests.len())];
        for features in reader.reply(&bury_near_end(t, request), plan)? {
            examples.push(Example {
                features,
                category: Some(*category),
            });
            near_end += 1;
        }
    }
    Ok([
        ("long_text_checkpoints", clean),
        (
            "long_text_with_a_request_near_the_end_checkpoints",
            near_end,
        ),
    ])
}

/// Each dev text alone and followed by the next one's body; only what the parts head lets
/// through gets a reply. The worst scores of those replies, and how many texts were refused on
/// sight.
fn dev_clean_replies(
    reader: &mut PassReader,
    screens: Screens<'_>,
    dev_texts: &[&str],
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<f32>, usize)> {
    let (mut clean_replies, mut refused_on_sight) = (Vec::new(), 0);
    for (k, t) in dev_texts.iter().enumerate() {
        progress(&format!("dev text {}/{}", k + 1, dev_texts.len()));
        let other = dev_texts[(k + 1) % dev_texts.len()];
        for text in [t.to_string(), format!("{t}\n\n{}", body(other))] {
            if screens.refused_on_sight(reader, &text)? {
                refused_on_sight += 1;
            } else {
                clean_replies.push(screens.reply_worst(reader, &text)?);
            }
        }
    }
    Ok((clean_replies, refused_on_sight))
}

/// A dev request in the last window the reply is read with: how many such texts the parts head
/// refuses on sight, and how many of the rest have their reply stopped at `threshold`.
fn dev_near_end(
    reader: &mut PassReader,
    screens: Screens<'_>,
    threshold: f32,
    dev: LongTexts<'_>,
    rng: &mut SmallRng,
) -> Result<(usize, usize)> {
    let (mut on_sight, mut stopped) = (0, 0);
    for t in dev.texts {
        let (r, _) = &dev.requests[rng.gen_range(0..dev.requests.len())];
        let text = bury_near_end(t, r);
        if screens.refused_on_sight(reader, &text)? {
            on_sight += 1;
        } else if screens.reply_worst(reader, &text)? >= threshold {
            stopped += 1;
        }
    }
    Ok((on_sight, stopped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_buried_near_the_end_goes_before_a_short_last_paragraph_or_after_a_long_one() {
        let short = bury_near_end("Summarize this:\n\nOne.\n\nTwo.", "Do X.");
        assert_eq!(short, "Summarize this:\n\nOne.\n\nDo X.\n\nTwo.");
        let long_last = format!("Summarize this:\n\nOne.\n\n{}", "word ".repeat(150));
        let out = bury_near_end(&long_last, "Do X.");
        assert!(out.ends_with("\n\nDo X."), "{out}");
    }
}
