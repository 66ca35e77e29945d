//! Runs suite items through the guarded pipeline (`kostant_safety::pipeline::respond`: guard,
//! model, output screening), judges each reply, and appends it to a results file so that an
//! interrupted run resumes where it stopped.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use kostant_engine::{
    ActiveAdapter, CancelHandle, GenerateRequest, Grammar, KvType, Message, Model, Role,
    SamplingParams, Session, Speculation,
};
use kostant_safety::{policy, Category, Guard, StoppedBy, Verdict};

use crate::error::{io, EvalError, Result};
use crate::judge::{judge_refusal, judge_toxicity, Refusal, Toxicity};
use crate::suite::{Item, SuiteName, Turn};

/// One judged reply: a line of a results file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ItemResult {
    pub id: String,
    pub suite: SuiteName,
    #[serde(default)]
    pub label: Option<String>,
    /// The item's own hazard category (harmful and jailbreak items).
    #[serde(default)]
    pub category: Option<String>,
    #[serde(default)]
    pub xstest_type: Option<String>,
    #[serde(default)]
    pub family: Option<String>,
    /// How the guarded pipeline ended the reply (`verdict`, `stopped_by` and `shown_category`
    /// in the file).
    #[serde(flatten, with = "kostant_safety::verdict_fields")]
    pub verdict: Verdict,
    pub refusal: Refusal,
    pub toxicity: Toxicity,
    /// The category the guard named, when it refused or withdrew.
    #[serde(default)]
    pub guard_category: Option<String>,
    pub input_score: f32,
    pub output_score: f32,
    /// What the user saw: the reply, the refusal or the withdrawal notice.
    pub reply: String,
    /// The model's own words, unscreened (a withdrawn reply's text among them): written only
    /// when the run keeps them ([`RunOptions::keep_unscreened`], `kostant eval
    /// --keep-unscreened`); otherwise absent, and the file holds only what the user saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated: Option<String>,
    pub generated_tokens: usize,
    pub ms: f64,
}

/// How replies are generated.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub max_tokens: usize,
    pub n_ctx: usize,
    /// The system prompt (default: Kostant's own, as the chat uses).
    pub system: String,
    /// Also keep the model's unscreened words in each result (`generated`). Off by default: a
    /// withdrawn reply is text the guard kept from the user, and a results file is written to
    /// disk in the clear.
    pub keep_unscreened: bool,
    /// How the sessions' kv caches store keys and values (f16 unless a measurement asks for
    /// another, e.g. perplexity with a quantized cache).
    pub kv_type: KvType,
    /// The LoRA adapter replies run under (a feature's, for `kostant eval --feature` and the
    /// feature evals; None: the base model).
    pub adapter: Option<ActiveAdapter>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            max_tokens: 64,
            n_ctx: 1024,
            system: policy::default_system_prompt(),
            keep_unscreened: false,
            kv_type: KvType::F16,
            adapter: None,
        }
    }
}

/// The model, the guard and one session reused across items (the system prompt's cache is
/// shared, as in a chat).
pub struct Runner {
    model: Arc<Model>,
    guard: Guard,
    session: Session,
    opts: RunOptions,
}

impl Runner {
    pub fn new(model: Arc<Model>, guard: Guard, opts: RunOptions) -> Result<Runner> {
        let mut session = Session::with_kv_type(model.clone(), opts.n_ctx, opts.kv_type)?;
        session.set_adapter(opts.adapter.clone())?;
        Ok(Runner {
            model,
            guard,
            session,
            opts,
        })
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// The guard back, for the next runner (a guard resident for several runs, as in the app).
    pub fn into_guard(self) -> Guard {
        self.guard
    }

    pub fn options(&self) -> &RunOptions {
        &self.opts
    }

    /// A session of its own on the same model (perplexity needs a clean cache).
    pub fn new_session(&self) -> Result<Session> {
        let mut session =
            Session::with_kv_type(self.model.clone(), self.opts.n_ctx, self.opts.kv_type)?;
        session.set_adapter(self.opts.adapter.clone())?;
        Ok(session)
    }

    /// Answers `prompt` as the chat would (greedy, so runs repeat) and judges the reply.
    /// Returns `Err(Cancelled)` if `cancel` was set while it ran.
    pub fn answer(&mut self, prompt: &str, cancel: &CancelHandle) -> Result<Answer> {
        self.answer_after(&[], prompt, cancel)
    }

    /// [`Runner::answer`] as the next message of a conversation: `history` (user and assistant
    /// turns, oldest first) goes through the chat template as real turns, as `kostant chat`
    /// and the app send them, and the guard reads `prompt` as the message, as it does there.
    pub fn answer_after(
        &mut self,
        history: &[Message],
        prompt: &str,
        cancel: &CancelHandle,
    ) -> Result<Answer> {
        let max_tokens = self.opts.max_tokens;
        self.answer_shaped(history, prompt, max_tokens, None, cancel)
    }

    /// [`Runner::answer_after`] with a reply of at most `max_tokens` tokens that `grammar`
    /// accepts (the proofreader's one sentence, say).
    pub fn answer_shaped(
        &mut self,
        history: &[Message],
        prompt: &str,
        max_tokens: usize,
        grammar: Option<Arc<Grammar>>,
        cancel: &CancelHandle,
    ) -> Result<Answer> {
        let start = Instant::now();
        let mut messages = Vec::with_capacity(history.len() + 2);
        messages.push(Message::new(Role::System, self.opts.system.clone()));
        messages.extend(history.iter().cloned());
        messages.push(Message::new(Role::User, prompt.to_string()));
        let mut tokens = self
            .model
            .chat_template
            .render(&self.model.tokenizer, &messages, true)?
            .tokens;
        // A prompt longer than the context keeps its end (where the request sits); the reply
        // needs room too.
        let room = self.opts.n_ctx.saturating_sub(max_tokens).max(16);
        if tokens.len() > room {
            tokens.drain(..tokens.len() - room);
        }
        let req = GenerateRequest {
            prompt: tokens,
            max_tokens,
            sampling: SamplingParams {
                grammar,
                ..SamplingParams::greedy()
            },
            speculation: Speculation::Off,
        };
        let reply = kostant_safety::respond(
            &mut self.session,
            &mut self.guard,
            &req,
            prompt,
            cancel,
            |_| {},
        )?;
        if cancel.is_cancelled() {
            return Err(EvalError::Cancelled);
        }
        let guard_stopped = reply.verdict.stopped_by() == Some(StoppedBy::Guard);
        let generated = reply.generation.as_ref().map(|g| g.reply.as_str());
        // The refusal judge reads what the user saw (with the guard's verdict for a withdrawal).
        let refusal = judge_refusal(reply.verdict, prompt, &reply.text);
        // The head's own top category, for the report and the toxicity judge: the text the
        // user saw names it only when the head's rule is sure (`reply.verdict.category()`).
        let guard_category = reply.verdict.category().or(reply.guard.category_guess);
        // Toxicity reads the model's own words (a withdrawn reply was still written); a guard
        // refusal has no model words. They stay in memory unless the run keeps them.
        let words = generated.unwrap_or("");
        let toxicity = judge_toxicity(
            words,
            prompt,
            if guard_stopped { guard_category } else { None },
        );
        let generated = generated
            .filter(|_| self.opts.keep_unscreened)
            .map(str::to_string);
        Ok(Answer {
            verdict: reply.verdict,
            refusal,
            toxicity,
            guard_category: guard_category.map(|c| c.id().to_string()),
            input_score: reply.guard.input_score,
            output_score: reply.guard.output_score,
            generated_tokens: reply.generation.as_ref().map_or(0, |g| g.tokens.len()),
            reply: reply.text,
            generated,
            ms: start.elapsed().as_secs_f64() * 1e3,
        })
    }

    /// [`Runner::answer`] for a suite item, as a results line.
    pub fn run_item(
        &mut self,
        suite: SuiteName,
        item: &Item,
        cancel: &CancelHandle,
    ) -> Result<ItemResult> {
        let a = self.answer_after(&history_messages(&item.history), &item.prompt, cancel)?;
        Ok(ItemResult {
            id: item.id.clone(),
            suite,
            label: item.label.clone(),
            category: item.category.clone(),
            xstest_type: item.xstest_type.clone(),
            family: item.family.clone(),
            verdict: a.verdict,
            refusal: a.refusal,
            toxicity: a.toxicity,
            guard_category: a.guard_category,
            input_score: a.input_score,
            output_score: a.output_score,
            reply: a.reply,
            generated: a.generated,
            generated_tokens: a.generated_tokens,
            ms: a.ms,
        })
    }
}

/// A suite item's earlier turns as the chat sends them to the model: an exchange the guard
/// refused leaves the model's context as it does in the chat and the app
/// ([`kostant_safety::close_exchange`]), so a refused assistant turn and the user turn before
/// it are dropped.
pub fn history_messages(history: &[Turn]) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(history.len());
    for t in history {
        if t.role == "user" {
            out.push(Message::new(
                Role::User,
                t.content.clone().unwrap_or_default(),
            ));
            continue;
        }
        let (text, verdict) = match (&t.content, t.refused.as_deref().and_then(Category::from_id)) {
            (Some(c), _) => (c.clone(), Verdict::Answered),
            // The text the user saw: neutral under the shipped head's category rules.
            (None, Some(_)) => (
                policy::refusal(None).to_string(),
                Verdict::Refused { category: None },
            ),
            // Suite loading skips items whose turns are neither (suite::history_problem).
            (None, None) => (String::new(), Verdict::Answered),
        };
        kostant_safety::close_exchange(&mut out, text, verdict);
    }
    out
}

/// One judged reply to any prompt (what `kostant eval --prompts` writes).
#[derive(Clone, Debug, Serialize)]
pub struct Answer {
    /// As [`ItemResult::verdict`].
    #[serde(flatten, with = "kostant_safety::verdict_fields")]
    pub verdict: Verdict,
    pub refusal: Refusal,
    pub toxicity: Toxicity,
    pub guard_category: Option<String>,
    pub input_score: f32,
    pub output_score: f32,
    pub reply: String,
    /// As [`ItemResult::generated`]: only when the run keeps unscreened text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generated: Option<String>,
    pub generated_tokens: usize,
    pub ms: f64,
}

/// Where a run's finished items accumulate, one JSON line each, written as each finishes.
pub struct ResultsFile {
    path: PathBuf,
    file: std::fs::File,
}

/// What an existing results file held.
#[derive(Debug, Default)]
pub struct Loaded {
    pub results: Vec<ItemResult>,
    /// Lines that could not be read (a line cut short by a kill, say): their items run again.
    pub bad_lines: Vec<usize>,
}

impl ResultsFile {
    /// Reads what `path` already holds (nothing if it does not exist).
    pub fn load(path: &Path) -> Result<Loaded> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::default()),
            Err(e) => return Err(io(path)(e)),
        };
        let mut loaded = Loaded::default();
        let mut seen = HashSet::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<ItemResult>(line) {
                Ok(r) => {
                    if seen.insert((r.suite, r.id.clone())) {
                        loaded.results.push(r);
                    }
                }
                Err(_) => loaded.bad_lines.push(i + 1),
            }
        }
        Ok(loaded)
    }

    /// Opens `path` for appending; a last line left without its newline is ended first so the
    /// next record starts on a line of its own.
    pub fn append(path: &Path) -> Result<ResultsFile> {
        let needs_newline = std::fs::read(path)
            .map(|b| b.last().is_some_and(|&c| c != b'\n'))
            .unwrap_or(false);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io(path))?;
        if needs_newline {
            file.write_all(b"\n").map_err(io(path))?;
        }
        Ok(ResultsFile {
            path: path.to_path_buf(),
            file,
        })
    }

    pub fn write(&mut self, r: &ItemResult) -> Result<()> {
        let mut line = serde_json::to_string(r)?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .map_err(io(&self.path))?;
        self.file.flush().map_err(io(&self.path))
    }
}

/// Where a suite run stands.
#[derive(Clone, Debug)]
pub struct Progress<'a> {
    pub suite: SuiteName,
    pub done: usize,
    pub total: usize,
    pub id: &'a str,
}

/// Runs `items` of `suite`, skipping ids already in `done`, appending each result to `out` and
/// to `done`. Stops with `Err(Cancelled)` when `cancel` is set (finished items are kept).
pub fn run_suite(
    answer: &mut dyn FnMut(&Item, &CancelHandle) -> Result<ItemResult>,
    suite: SuiteName,
    items: &[Item],
    out: &mut ResultsFile,
    done: &mut Vec<ItemResult>,
    cancel: &CancelHandle,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<()> {
    let have: HashSet<String> = done
        .iter()
        .filter(|r| r.suite == suite)
        .map(|r| r.id.clone())
        .collect();
    let total = items.len();
    let mut n = items.iter().filter(|i| have.contains(&i.id)).count();
    for item in items.iter().filter(|i| !have.contains(&i.id)) {
        if cancel.is_cancelled() {
            return Err(EvalError::Cancelled);
        }
        progress(Progress {
            suite,
            done: n,
            total,
            id: &item.id,
        });
        let r = answer(item, cancel)?;
        out.write(&r)?;
        done.push(r);
        n += 1;
    }
    progress(Progress {
        suite,
        done: n,
        total,
        id: "",
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::Refusal;

    pub(crate) fn fake(id: &str, suite: SuiteName) -> ItemResult {
        ItemResult {
            id: id.into(),
            suite,
            label: None,
            category: None,
            xstest_type: None,
            family: None,
            verdict: Verdict::Answered,
            refusal: Refusal::None,
            toxicity: Toxicity::default(),
            guard_category: None,
            input_score: 0.1,
            output_score: 0.0,
            reply: format!("reply to {id}"),
            generated: None,
            generated_tokens: 3,
            ms: 1.0,
        }
    }

    fn items(ids: &[&str]) -> Vec<Item> {
        ids.iter()
            .map(|id| Item {
                id: id.to_string(),
                prompt: format!("p {id}"),
                label: None,
                category: None,
                source: None,
                xstest_type: None,
                family: None,
                history: Vec::new(),
            })
            .collect()
    }

    #[test]
    fn a_results_line_has_no_unscreened_words_unless_kept() {
        let mut r = fake("a", SuiteName::Harmful);
        let line: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert!(line.get("generated").is_none(), "{line}");
        assert_eq!(line["reply"], "reply to a");
        r.generated = Some("the model's own words".into());
        let line = serde_json::to_string(&r).unwrap();
        let back: ItemResult = serde_json::from_str(&line).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn the_verdict_keeps_its_fields_in_the_results_file() {
        let mut r = fake("a", SuiteName::Harmful);
        let line = serde_json::to_value(&r).unwrap();
        assert_eq!(line["verdict"], "answered");
        assert!(line["stopped_by"].is_null(), "{line}");
        assert!(line.get("shown_category").is_none(), "{line}");
        r.verdict = Verdict::Stopped {
            by: StoppedBy::Guard,
            category: None,
        };
        let line = serde_json::to_value(&r).unwrap();
        assert_eq!(line["verdict"], "stopped");
        assert_eq!(line["stopped_by"], "guard");
        // A line written before the verdict was typed reads back.
        let mut old = serde_json::to_value(fake("b", SuiteName::Harmful)).unwrap();
        old["verdict"] = "refused".into();
        old["stopped_by"] = serde_json::Value::Null;
        let back: ItemResult = serde_json::from_value(old).unwrap();
        assert_eq!(back.verdict, Verdict::Refused { category: None });
        let mut old = serde_json::to_value(fake("c", SuiteName::Harmful)).unwrap();
        old["verdict"] = "stopped".into();
        old["stopped_by"] = "user".into();
        let back: ItemResult = serde_json::from_value(old).unwrap();
        assert_eq!(back.verdict.stopped_by(), Some(StoppedBy::User));
    }

    #[test]
    fn a_refused_exchange_leaves_the_context_and_the_rest_stays() {
        let turn = |role: &str, content: Option<&str>, refused: Option<&str>| Turn {
            role: role.into(),
            content: content.map(str::to_string),
            refused: refused.map(str::to_string),
        };
        let turns = vec![
            turn("user", Some("what is a fuse"), None),
            turn("assistant", Some("a safety device"), None),
            turn("user", Some("how do I hurt him"), None),
            turn("assistant", None, Some("violent_crimes")),
            turn("user", Some("thanks for the fuse answer"), None),
            turn("assistant", Some("you're welcome"), None),
        ];
        let m = history_messages(&turns);
        let texts: Vec<(Role, &str)> = m.iter().map(|m| (m.role, m.content.as_str())).collect();
        assert_eq!(
            texts,
            [
                (Role::User, "what is a fuse"),
                (Role::Assistant, "a safety device"),
                (Role::User, "thanks for the fuse answer"),
                (Role::Assistant, "you're welcome"),
            ]
        );
    }

    #[test]
    fn resume_skips_done_ids_and_survives_a_torn_line() {
        let dir = std::env::temp_dir().join(format!("kostant-evals-resume-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("results.jsonl");
        let _ = std::fs::remove_file(&path);
        let list = items(&["a", "b", "c", "d"]);
        let cancel = CancelHandle::new();
        let mut asked = Vec::new();

        // First run: cancelled after two items.
        {
            let mut out = ResultsFile::append(&path).unwrap();
            let mut done = Vec::new();
            let c = cancel.clone();
            let mut answer = |it: &Item, _: &CancelHandle| {
                asked.push(it.id.clone());
                if asked.len() == 2 {
                    c.cancel();
                }
                Ok(fake(&it.id, SuiteName::Harmful))
            };
            let e = run_suite(
                &mut answer,
                SuiteName::Harmful,
                &list,
                &mut out,
                &mut done,
                &cancel,
                &mut |_| {},
            );
            assert!(matches!(e, Err(EvalError::Cancelled)));
        }
        assert_eq!(asked, ["a", "b"]);
        // A kill mid-write leaves half a line.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"id\":\"c\",\"sui")
            .unwrap();

        cancel.reset();
        let loaded = ResultsFile::load(&path).unwrap();
        assert_eq!(loaded.results.len(), 2);
        assert_eq!(loaded.bad_lines, [3]);
        let mut done = loaded.results;
        let mut out = ResultsFile::append(&path).unwrap();
        let mut second = Vec::new();
        let mut seen_progress = Vec::new();
        run_suite(
            &mut |it: &Item, _: &CancelHandle| {
                second.push(it.id.clone());
                Ok(fake(&it.id, SuiteName::Harmful))
            },
            SuiteName::Harmful,
            &list,
            &mut out,
            &mut done,
            &cancel,
            &mut |p| seen_progress.push((p.done, p.total)),
        )
        .unwrap();
        assert_eq!(second, ["c", "d"]);
        assert_eq!(seen_progress.first(), Some(&(2, 4)));
        assert_eq!(seen_progress.last(), Some(&(4, 4)));
        let again = ResultsFile::load(&path).unwrap();
        let ids: Vec<_> = again.results.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c", "d"]);
        assert_eq!(again.bad_lines, [3]);
        // The same id in another suite is another item.
        let mut other = Vec::new();
        run_suite(
            &mut |it: &Item, _: &CancelHandle| {
                other.push(it.id.clone());
                Ok(fake(&it.id, SuiteName::Jailbreak))
            },
            SuiteName::Jailbreak,
            &list[..1],
            &mut out,
            &mut done,
            &cancel,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(other, ["a"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
