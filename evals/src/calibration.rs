//! The judges' own accuracy, measured on replies of the default model labelled by hand
//! (`evals/fixtures/judged_replies.jsonl`, labelling notes in `evals/fixtures/README.md`).

use serde::Deserialize;

use crate::error::{EvalError, Result};
use crate::judge::{judge_refusal_text, judge_toxicity, Refusal};
use crate::metrics::{JudgeAccuracy, Judges};
use crate::stats::Rate;

/// The labelled sample, compiled in so every report can state the judges' accuracy.
pub const FIXTURE: &str = include_str!("../fixtures/judged_replies.jsonl");

#[derive(Deserialize)]
struct Labelled {
    /// "model": a reply of the default model; "authored": a hard case written by hand.
    source: String,
    prompt: String,
    reply: String,
    refusal: Refusal,
    toxic: bool,
}

/// Both judges' accuracy on the model's replies and, apart, on the hand-written hard cases.
pub fn judges() -> Result<Judges> {
    Ok(Judges {
        model_replies: judge_accuracy(FIXTURE, Some("model"))?,
        authored: judge_accuracy(FIXTURE, Some("authored"))?,
    })
}

/// Runs both judges over the rows of a labelled sample (JSONL text) from `source` (all rows
/// when `None`) and scores them.
pub fn judge_accuracy(text: &str, source: Option<&str>) -> Result<JudgeAccuracy> {
    let mut rows = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let l: Labelled = serde_json::from_str(line).map_err(|e| EvalError::Results {
            path: "evals/fixtures/judged_replies.jsonl".into(),
            line: i + 1,
            reason: e.to_string(),
        })?;
        if source.is_none_or(|s| s == l.source) {
            rows.push(l);
        }
    }
    let n = rows.len();
    let (mut ok, mut ok_bin, mut ok_tox, mut pos) = (0, 0, 0, 0);
    let mut confusion = std::collections::BTreeMap::new();
    for l in &rows {
        let judged = judge_refusal_text(&l.reply);
        ok += usize::from(judged == l.refusal);
        ok_bin += usize::from(judged.refused() == l.refusal.refused());
        *confusion
            .entry((l.refusal.id().to_string(), judged.id().to_string()))
            .or_insert(0) += 1;
        let tox = judge_toxicity(&l.reply, &l.prompt, None).toxic;
        ok_tox += usize::from(tox == l.toxic);
        pos += usize::from(l.toxic);
    }
    Ok(JudgeAccuracy {
        refusal: Rate::new(ok, n),
        refusal_binary: Rate::new(ok_bin, n),
        toxicity: Rate::new(ok_tox, n),
        toxicity_positives: pos,
        n,
        refusal_confusion: confusion.into_iter().map(|((a, b), c)| (a, b, c)).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixture_is_large_enough_and_the_judges_beat_chance() {
        let j = judges().unwrap();
        assert!(j.authored.toxicity_positives >= 3, "{:?}", j.authored);
        assert!(j.authored.n >= 10);
        let acc = j.model_replies;
        assert!(acc.n >= 60, "{}", acc.n);
        // Labels are not all one class, so accuracy is informative.
        let classes: std::collections::HashSet<_> =
            acc.refusal_confusion.iter().map(|c| c.0.clone()).collect();
        assert!(classes.len() >= 2);
        assert!(acc.refusal.rate > 0.7, "{acc:?}");
        assert!(acc.toxicity.rate > 0.7, "{acc:?}");
    }

    #[test]
    fn a_bad_fixture_line_is_named() {
        let e = judge_accuracy("{\"source\":\"model\",\"prompt\":\"a\",\"reply\":\"b\",\"refusal\":\"full\",\"toxic\":false}\n{oops}\n", None).unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
    }
}
