//! How well the assistant does each feature's job (issue 21): a feature's held-out test split
//! (assets/adapters/<feature>/test.jsonl) run through the guarded pipeline users get, each
//! reply scored against its reference with the feature's metric ([`crate::quality`]). The
//! same split runs with and without the feature's adapter, so the report can say whether the
//! adapter beats the prompt alone.

use std::path::Path;

use serde::{Deserialize, Serialize};

use kostant_engine::CancelHandle;
use kostant_safety::features::Feature;
use kostant_safety::Verdict;

use crate::error::{io, EvalError, Result};
use crate::quality::{self, Mean};
use crate::runner::Runner;

/// A feature with a scored test split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    Summarize,
    Proofread,
    Reply,
    Rewrite,
}

impl Task {
    pub const ALL: [Task; 4] = [Task::Summarize, Task::Proofread, Task::Reply, Task::Rewrite];

    /// The feature this task scores (its id, label and system prompt are the feature's).
    pub fn feature(self) -> Feature {
        match self {
            Task::Summarize => Feature::Summarize,
            Task::Proofread => Feature::Proofread,
            Task::Reply => Feature::Reply,
            Task::Rewrite => Feature::Rewrite,
        }
    }

    /// The task of a feature with a scored split (chat has none).
    pub fn of(feature: Feature) -> Option<Task> {
        Task::ALL.into_iter().find(|t| t.feature() == feature)
    }

    pub fn id(self) -> &'static str {
        self.feature().id()
    }

    pub fn parse(id: &str) -> Option<Task> {
        Feature::parse(id).ok().and_then(Task::of)
    }

    /// The headline metric's name, as the report prints it.
    pub fn metric(self) -> &'static str {
        match self {
            Task::Summarize => "ROUGE-L",
            Task::Proofread => "exact match",
            Task::Reply | Task::Rewrite => "chrF",
        }
    }

    /// The second number each feature reports: the character error rate for proofreading
    /// (lower is better); for the others the share of replies that keep the facts (see
    /// [`keeps_facts`]).
    pub fn check(self) -> &'static str {
        match self {
            Task::Proofread => "character error rate",
            Task::Rewrite => "keeps the facts (same numbers; \"shorter\" ≤ 0.7 × input)",
            Task::Summarize | Task::Reply => "invents no number",
        }
    }
}

/// One line of a feature's split.
#[derive(Clone, Debug, Deserialize)]
pub struct Example {
    pub input: String,
    pub output: String,
    /// Rewrite only: friendlier, more formal, shorter or clearer.
    #[serde(default)]
    pub tone: Option<String>,
    /// Rewrite only: false when the user sends the bare text (the app's chip), no tone line.
    #[serde(default)]
    pub tone_line: Option<bool>,
}

impl Example {
    /// The user's message for this example, as users type it and as the adapters were trained
    /// on it (scripts/adapters/common.py `user_message`): the text itself; for a rewrite, a
    /// line asking for the tone, then the text.
    pub fn user_message(&self, task: Task) -> String {
        match (&self.tone, task, self.tone_line.unwrap_or(true)) {
            (Some(tone), Task::Rewrite, true) => format!("Make it {tone}:\n{}", self.input),
            _ => self.input.clone(),
        }
    }
}

/// Reads a split file; a bad line is an error naming it (the splits are ours, and a silently
/// shorter test set would change every number).
pub fn load_split(path: &Path) -> Result<Vec<Example>> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let ex: Example = serde_json::from_str(line).map_err(|e| EvalError::Results {
            path: path.to_path_buf(),
            line: i + 1,
            reason: e.to_string(),
        })?;
        out.push(ex);
    }
    if out.is_empty() {
        return Err(EvalError::EmptySuite {
            path: path.to_path_buf(),
            skipped: 0,
        });
    }
    Ok(out)
}

/// Whether a reply keeps to its input's facts, as far as a rule can tell: a rewrite keeps the
/// same numbers (and a "shorter" one is at most 0.7 × the input's characters); a summary or a
/// reply adds no number its input lacks.
pub fn keeps_facts(task: Task, ex: &Example, reply: &str) -> bool {
    let (ours, theirs) = (quality::numbers(reply), quality::numbers(&ex.input));
    match task {
        Task::Rewrite => {
            let short_enough = ex.tone.as_deref() != Some("shorter")
                || reply.trim().chars().count() as f64
                    <= 0.7 * ex.input.trim().chars().count() as f64;
            ours == theirs && short_enough
        }
        Task::Summarize | Task::Reply => ours.is_subset(&theirs),
        Task::Proofread => true,
    }
}

/// One scored reply.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Scored {
    pub index: usize,
    pub reply: String,
    /// The feature's headline metric for this reply (exact match as 0 or 1).
    pub score: f64,
    /// Proofread: the character error rate; the others: 1 if it keeps the facts, else 0.
    pub check: f64,
    /// The guard refused the message or withdrew the reply.
    pub stopped: bool,
    pub tokens: usize,
}

/// Scores `reply` to `ex`.
pub fn score(task: Task, ex: &Example, reply: &str) -> (f64, f64) {
    let reply = reply.trim();
    match task {
        Task::Summarize => (
            quality::rouge_l(reply, &ex.output),
            f64::from(u8::from(keeps_facts(task, ex, reply))),
        ),
        Task::Proofread => (
            f64::from(u8::from(quality::exact_match(reply, &ex.output))),
            quality::char_error_rate(reply, &ex.output),
        ),
        Task::Reply | Task::Rewrite => (
            quality::chrf(reply, &ex.output),
            f64::from(u8::from(keeps_facts(task, ex, reply))),
        ),
    }
}

/// Runs every example through `runner` (its system prompt and adapter as configured) and
/// scores the replies; `progress` hears each one.
pub fn run(
    runner: &mut Runner,
    task: Task,
    examples: &[Example],
    cancel: &CancelHandle,
    mut progress: impl FnMut(usize, &Scored),
) -> Result<Vec<Scored>> {
    let mut out = Vec::with_capacity(examples.len());
    for (index, ex) in examples.iter().enumerate() {
        let a = runner.answer(&ex.user_message(task), cancel)?;
        let (score, check) = score(task, ex, &a.reply);
        let s = Scored {
            index,
            stopped: a.verdict != Verdict::Answered,
            reply: a.reply,
            score,
            check,
            tokens: a.generated_tokens,
        };
        progress(index, &s);
        out.push(s);
    }
    Ok(out)
}

/// One configuration's results on a feature's test split.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Column {
    /// "prompt only" or the adapter's name.
    pub label: String,
    pub adapter: Option<String>,
    pub metric: Mean,
    pub check: Mean,
    pub stopped: usize,
    pub mean_tokens: f64,
}

impl Column {
    pub fn of(label: &str, adapter: Option<String>, scored: &[Scored]) -> Column {
        let n = scored.len().max(1) as f64;
        Column {
            label: label.to_string(),
            adapter,
            metric: Mean::bootstrap(&scored.iter().map(|s| s.score).collect::<Vec<_>>()),
            check: Mean::bootstrap(&scored.iter().map(|s| s.check).collect::<Vec<_>>()),
            stopped: scored.iter().filter(|s| s.stopped).count(),
            mean_tokens: scored.iter().map(|s| s.tokens as f64).sum::<f64>() / n,
        }
    }
}

/// A feature's row of the report: the prompt alone against the prompt with the adapter.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FeatureRow {
    pub feature: Task,
    pub metric: String,
    pub check: String,
    pub n: usize,
    pub base: Column,
    pub adapted: Option<Column>,
    /// The headline metric over the examples the guard stopped in neither run: what each
    /// writes when it gets to write (prompt only, adapter).
    #[serde(default)]
    pub answered_both: Option<(Mean, Mean)>,
}

impl FeatureRow {
    /// The row for `feature` from the scored replies of both runs (same examples, same order).
    pub fn new(feature: Task, base: &[Scored], adapted: Option<(&str, &[Scored])>) -> FeatureRow {
        let answered_both = adapted.map(|(_, a)| {
            let both: Vec<(f64, f64)> = base
                .iter()
                .zip(a)
                .filter(|(b, a)| !b.stopped && !a.stopped)
                .map(|(b, a)| (b.score, a.score))
                .collect();
            (
                Mean::bootstrap(&both.iter().map(|p| p.0).collect::<Vec<_>>()),
                Mean::bootstrap(&both.iter().map(|p| p.1).collect::<Vec<_>>()),
            )
        });
        FeatureRow {
            feature,
            metric: feature.metric().into(),
            check: feature.check().into(),
            n: base.len(),
            base: Column::of("prompt only", None, base),
            adapted: adapted.map(|(name, s)| Column::of(name, Some(name.to_string()), s)),
            answered_both,
        }
    }

    /// Whether the adapter beats the prompt alone with non-overlapping 95% intervals.
    pub fn adapter_wins(&self) -> Option<bool> {
        self.adapted
            .as_ref()
            .map(|a| a.metric.lo > self.base.metric.hi)
    }
}

/// The whole report (docs/adapters-report.{md,json}).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FeatureReport {
    pub command: String,
    /// The split scored: test (the report's) or dev.
    pub split: String,
    pub model: String,
    pub guard_head: String,
    pub max_tokens: usize,
    pub rows: Vec<FeatureRow>,
}

impl FeatureReport {
    pub fn markdown(&self) -> String {
        let mut md = format!(
            "# Feature adapters: each feature's {} split, with and without its adapter\n\n",
            self.split
        );
        md.push_str(&format!(
            "Command: `{}`\n\nModel: {}. Guard head: {}. Greedy replies of at most {} tokens, \
             through the guarded pipeline users get (a reply the guard stopped scores what the \
             user saw). Intervals are 95% percentile bootstraps over the examples ({} \
             resamples). The adapters were trained on the train splits and chosen on dev loss; \
             the test splits were never trained on nor used to choose anything.\n\n",
            self.command,
            self.model,
            self.guard_head,
            self.max_tokens,
            quality::BOOTSTRAP_RESAMPLES
        ));
        md.push_str("| feature | n | metric | prompt only | with adapter | adapter wins |\n|---|---|---|---|---|---|\n");
        for r in &self.rows {
            let adapted = r
                .adapted
                .as_ref()
                .map_or("—".into(), |a| a.metric.display());
            let wins = match r.adapter_wins() {
                Some(true) => "yes",
                Some(false) => "no",
                None => "no adapter",
            };
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                r.feature.id(),
                r.n,
                r.metric,
                r.base.metric.display(),
                adapted,
                wins
            ));
        }
        md.push_str(
            "\nOn the examples the guard stopped in neither run (what each writes when it gets to write):\n\n\
             | feature | n | metric | prompt only | with adapter |\n|---|---|---|---|---|\n",
        );
        for r in &self.rows {
            if let Some((b, a)) = &r.answered_both {
                md.push_str(&format!(
                    "| {} | {} | {} | {} | {} |\n",
                    r.feature.id(),
                    b.n,
                    r.metric,
                    b.display(),
                    a.display()
                ));
            }
        }
        md.push_str("\n| feature | check | prompt only | with adapter | stopped by the guard (prompt only / adapter) | mean reply tokens |\n|---|---|---|---|---|---|\n");
        for r in &self.rows {
            let a = r.adapted.as_ref();
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} / {} | {:.0} / {} |\n",
                r.feature.id(),
                r.check,
                r.base.check.display(),
                a.map_or("—".into(), |a| a.check.display()),
                r.base.stopped,
                a.map_or("—".into(), |a| a.stopped.to_string()),
                r.base.mean_tokens,
                a.map_or("—".into(), |a| format!("{:.0}", a.mean_tokens)),
            ));
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_is_a_feature_and_chat_has_none() {
        for t in Task::ALL {
            assert_eq!(Task::of(t.feature()), Some(t));
            assert_eq!(Task::parse(t.id()), Some(t));
        }
        assert_eq!(Task::of(Feature::Chat), None);
        assert_eq!(Task::parse("chat"), None);
        assert_eq!(Task::parse("shout"), None);
        let scored: Vec<Feature> = Feature::ALL
            .into_iter()
            .filter(|f| Task::of(*f).is_some())
            .collect();
        assert_eq!(scored.len(), Task::ALL.len());
    }

    fn ex(input: &str, output: &str, tone: Option<&str>) -> Example {
        Example {
            input: input.into(),
            output: output.into(),
            tone: tone.map(String::from),
            tone_line: None,
        }
    }

    #[test]
    fn a_rewrite_asks_for_its_tone_unless_the_line_says_not_to() {
        let mut e = ex(
            "Pay by Friday.",
            "Please pay by Friday.",
            Some("friendlier"),
        );
        assert_eq!(
            e.user_message(Task::Rewrite),
            "Make it friendlier:\nPay by Friday."
        );
        e.tone_line = Some(false);
        assert_eq!(e.user_message(Task::Rewrite), "Pay by Friday.");
        assert_eq!(e.user_message(Task::Summarize), "Pay by Friday.");
    }

    #[test]
    fn facts_are_numbers_kept_and_a_shorter_rewrite_is_shorter() {
        let e = ex(
            "The bus leaves at 7 from stop 12, please be on time.",
            "",
            Some("shorter"),
        );
        assert!(keeps_facts(Task::Rewrite, &e, "Bus: 7, stop 12."));
        assert!(!keeps_facts(Task::Rewrite, &e, "Bus: 8, stop 12."));
        assert!(!keeps_facts(
            Task::Rewrite,
            &e,
            "The bus leaves at 7 from stop 12; please do be on time today."
        ));
        let s = ex("We met 3 times.", "", None);
        assert!(keeps_facts(Task::Summarize, &s, "They met."));
        assert!(!keeps_facts(Task::Summarize, &s, "They met 4 times."));
    }

    #[test]
    fn each_task_scores_with_its_own_metric() {
        let p = ex("I has two cat.", "I have two cats.", None);
        assert_eq!(score(Task::Proofread, &p, " I have two cats. "), (1.0, 0.0));
        let (exact, cer) = score(Task::Proofread, &p, "I has two cat.");
        assert_eq!(exact, 0.0);
        assert!(cer > 0.1);
        let s = ex("long text", "the cat sat", None);
        assert_eq!(score(Task::Summarize, &s, "the cat sat").0, 1.0);
        let r = ex("msg", "See you at noon!", None);
        assert!(score(Task::Reply, &r, "See you at noon!").0 > 0.99);
    }

    #[test]
    fn answered_in_both_leaves_out_what_either_run_stopped() {
        let s = |score: f64, stopped: bool| Scored {
            index: 0,
            reply: String::new(),
            score,
            check: 0.0,
            stopped,
            tokens: 0,
        };
        let base = [s(0.2, false), s(0.0, true), s(0.4, false)];
        let adapted = [s(0.6, false), s(0.9, false), s(0.0, true)];
        let row = FeatureRow::new(Task::Reply, &base, Some(("reply", &adapted)));
        let (b, a) = row.answered_both.unwrap();
        assert_eq!((b.n, a.n), (1, 1));
        assert_eq!((b.mean, a.mean), (0.2, 0.6));
        assert_eq!(row.n, 3);
        assert_eq!(row.adapted.unwrap().adapter.as_deref(), Some("reply"));
    }

    #[test]
    fn an_adapter_wins_only_when_the_intervals_part() {
        let col = |v: f64, spread: f64| Column {
            label: String::new(),
            adapter: None,
            metric: Mean {
                mean: v,
                lo: v - spread,
                hi: v + spread,
                n: 10,
            },
            check: Mean::bootstrap(&[1.0]),
            stopped: 0,
            mean_tokens: 0.0,
        };
        let row = |a: Column| FeatureRow {
            feature: Task::Reply,
            metric: "chrF".into(),
            check: String::new(),
            n: 10,
            base: col(0.3, 0.05),
            adapted: Some(a),
            answered_both: None,
        };
        assert_eq!(row(col(0.5, 0.05)).adapter_wins(), Some(true));
        assert_eq!(row(col(0.38, 0.05)).adapter_wins(), Some(false));
    }
}
