//! The guard: a trained [`Head`] over the hidden states of the guard model, reading the
//! conversation as the chat model sees it (see [`crate::reader`]).
//!
//! Screening a reply goes through [`ReplyScreen`], an engine `Observer`: it judges the user's
//! message when the prompt has run and the reply as it streams, and stops generation the
//! moment either is flagged. When the guard model is the chat model it reads the states of the
//! chat's own pass (riding along); otherwise it reads the text on its own session.

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use kostant_engine::model::MemoryPlan;
use kostant_engine::{Judgement, KvType, Model, Observer, Session};
use serde::Serialize;

use crate::confidence::{shown_category, CategoryRules};
use crate::head::Head;
use crate::normalize::{hidden_payloads, normalize};
use crate::parts::{part_features, part_ranges};
use crate::reader::{frame_message, window_ranges, Features, Reader, REPLY_ROOM};
use crate::scores::Scores;
use crate::{Category, Result, SafetyError};

/// The guard's judgement of one text.
#[derive(Clone, Debug, Serialize)]
pub struct Screening {
    pub flagged: bool,
    /// Probability that the text is unsafe (the highest over its windows and payloads).
    pub score: f32,
    /// The hazard category the user may be shown: set only when the text was flagged and the
    /// head is confident in one category (its [`CategoryRules`](crate::confidence::CategoryRules));
    /// None means the neutral refusal.
    pub category: Option<Category>,
    /// The head's most likely category when flagged, confident or not: a guess for diagnostics
    /// (`kostant guard screen`, `kostant chat --json`), never shown in text a user reads.
    pub category_guess: Option<Category>,
    /// Tokens the guard read for this judgement.
    pub tokens: usize,
    pub ms: f64,
}

impl Screening {
    fn nothing() -> Screening {
        Screening {
            flagged: false,
            score: 0.0,
            category: None,
            category_guess: None,
            tokens: 0,
            ms: 0.0,
        }
    }
}

pub struct Guard {
    reader: Reader,
    head: Head,
    input_threshold: f32,
    output_threshold: f32,
    /// The message judge, when there is one: a guard of its own (another model's states, a
    /// messages-only head) that judges every message this guard reads in one window, in its
    /// head's place ([`Guard::with_message_judge`]). Longer messages and every reply stay
    /// with this guard's heads.
    messages: Option<Box<Guard>>,
}

impl Guard {
    /// A guard reading with `model` through `head`. Fails if the head was trained on another
    /// model.
    pub fn new(model: Arc<Model>, head: Head) -> Result<Guard> {
        let info = &head.info;
        if !info.reads(&model.name(), model.hparams.n_embd) {
            return Err(SafetyError::Mismatch(format!(
                "the guard head was trained on {} (width {}), but the guard model is {} (width {})",
                info.model_name,
                info.n_embd,
                model.name(),
                model.hparams.n_embd
            )));
        }
        let reader = Reader::new(model, info.spec.clone())?;
        if reader.spec().dim(info.n_embd) != head.dim() {
            return Err(SafetyError::Head("head and feature spec disagree".into()));
        }
        let input = info.threshold;
        // Replies to messages read whole are judged by the reply head when there is one.
        let output = match &head.replies {
            Some(replies) => replies.info.output_threshold,
            None => info.output_threshold,
        }
        .unwrap_or(input);
        Ok(Guard {
            reader,
            head,
            input_threshold: input,
            output_threshold: output,
            messages: None,
        })
    }

    /// This guard with `judge` judging the messages it reads in one window, on the judge's own
    /// session (one prefill a message), instead of this guard's message head. Why a second
    /// model: a larger model's states may separate harmful requests better than the chat
    /// model's, while replies, read token by token, stay near free riding on the chat's pass.
    /// Tried with Gemma 3 270M and not shipped (scripts/safety-data/round-5-rule.md; its costs
    /// in BENCHMARKS.md).
    pub fn with_message_judge(mut self, judge: Guard) -> Result<Guard> {
        if judge.messages.is_some() {
            return Err(SafetyError::Head(
                "a message judge cannot have a message judge of its own".into(),
            ));
        }
        self.messages = Some(Box::new(judge));
        Ok(self)
    }

    /// The message judge, when there is one ([`Guard::with_message_judge`]).
    pub fn message_judge(&self) -> Option<&Guard> {
        self.messages.as_deref()
    }

    /// Whether the message judge, not this guard's heads, judges `message`: there is one and
    /// this guard reads the message in one window.
    fn judged_apart(&self, message: &str) -> Result<bool> {
        if self.messages.is_none() {
            return Ok(false);
        }
        self.reader.fits_one_window(&normalize(message))
    }

    pub fn load(model: Arc<Model>, head_path: &Path) -> Result<Guard> {
        Guard::new(model, Head::load(head_path)?)
    }

    pub fn head(&self) -> &Head {
        &self.head
    }

    pub fn model(&self) -> &Arc<Model> {
        self.reader.model()
    }

    /// Whether the guard can read the states of `chat`'s own passes: its model is the guard
    /// model, its cache is f16, and an adapter on it, if any, leaves every layer the head
    /// reads untouched. The head was trained on the base model's states; an adapter below a
    /// tap would show it states it never saw, so the guard then reads on its own base session
    /// instead.
    pub fn rides_on(&self, chat: &Session) -> bool {
        if !Arc::ptr_eq(chat.model(), self.model()) {
            return false;
        }
        // The head was trained on states computed over the f16 cache. A quantized cache moves
        // every state after the first layer's attention (with q4_0 the guard over-refused
        // markedly more: docs/eval-kv-types.md), so the guard then reads on its own session,
        // whose cache is f16.
        if chat.kv_type() != KvType::F16 {
            return false;
        }
        let Some(active) = chat.adapter() else {
            return true;
        };
        // Tap t reads the residual stream after layer t (the final norm's output for
        // t = n_layer, which every layer feeds): an adapter starting above it cannot reach it.
        let last_layer = chat.model().hparams.n_layer.saturating_sub(1);
        let deepest = self.head.info.spec.taps.iter().max().copied().unwrap_or(0);
        active.adapter.first_layer() > deepest.min(last_layer)
    }

    /// Makes the guard read on its own session under `system_prompt` instead of the one its
    /// head was trained with: what riding on a chat under that prompt (a feature's) shows it.
    pub fn read_under(&mut self, system_prompt: &str) -> Result<()> {
        let mut spec = self.head.info.spec.clone();
        spec.system_prompt = system_prompt.to_string();
        self.reader = Reader::new(self.reader.model().clone(), spec)?;
        if let Some(judge) = &mut self.messages {
            judge.read_under(system_prompt)?;
        }
        Ok(())
    }

    /// The unsafe probabilities at or above which a message and a reply are flagged.
    pub fn thresholds(&self) -> (f32, f32) {
        (self.input_threshold, self.output_threshold)
    }

    pub fn set_thresholds(&mut self, input: f32, output: f32) {
        self.input_threshold = input;
        self.output_threshold = output;
    }

    /// Memory the guard holds of its own: its KV cache and the head's weights (the model's
    /// weights are mapped, and shared when the chat model is the same file).
    pub fn resident_bytes(&self) -> usize {
        let judge = self.messages.as_ref().map_or(0, |j| j.resident_bytes());
        self.reader.kv_bytes() + self.head.weight_bytes() + judge
    }

    /// What the guard's own session holds once made (`Session::new`, so an f16 cache): the
    /// guard model's weights, the cache for [`Reader::n_ctx`] tokens and one prefill chunk's
    /// scratch. It is made at the first text the guard reads apart from the chat's pass (every
    /// text when it does not ride along; riding, a message with a view the chat's pass cannot
    /// show, [`Guard::screen_hidden`]) and kept.
    ///
    /// With a parts head, a message longer than a window is read on a second session sized to
    /// it with room for the reply, which is read on it, and dropped at the next message
    /// ([`Reader::read_whole`]); the plan counts that session at the most it can hold (the
    /// guard model's training context), its cache and scratch beside the kept one's and the
    /// tapped states it returns, since for a while both are held.
    pub fn own_session_plan(&self) -> MemoryPlan {
        self.own_session_plan_for(usize::MAX)
    }

    /// [`Guard::own_session_plan`] when no message is longer than `message_tokens` of the
    /// guard model's tokens (a chat on the guard's own model cannot take a message longer
    /// than its context). The guard frames the message with its head's system prompt, not the
    /// chat's, so its session holds that frame on top of the message.
    pub fn own_session_plan_for(&self, message_tokens: usize) -> MemoryPlan {
        let model = self.model();
        let mut plan = model.memory_plan(self.reader.n_ctx());
        // Should the empty frame not render, count the whole context: the plan errs high.
        let frame = frame_message(model, &self.head.info.spec.system_prompt, "")
            .map_or(model.hparams.n_ctx_train, |(tokens, _)| tokens.len());
        let n = model.hparams.n_ctx_train.min(
            message_tokens
                .saturating_add(frame)
                .saturating_add(REPLY_ROOM),
        );
        if self.head.parts.is_some() && n > self.reader.n_ctx() {
            let parts = model.memory_plan(n);
            let states = n * self.head.info.spec.taps.len() * model.hparams.n_embd * 4;
            plan.kv += parts.kv;
            plan.scratch += parts.scratch + states;
        }
        plan
    }

    /// Screens a user's message on the guard's own session: all of it, however long (in
    /// windows), and any payload hidden in it. A message in one window goes to the message
    /// judge when there is one.
    pub fn screen_input(&mut self, text: &str) -> Result<Screening> {
        if self.judged_apart(text)? {
            if let Some(judge) = &mut self.messages {
                return judge.screen_input(text);
            }
        }
        let mut views = vec![normalize(text)];
        views.extend(hidden_payloads(text));
        self.screen_views(&views)
    }

    /// Screens only what riding on the chat's pass cannot see: the message with its Unicode
    /// tricks undone, when that changes it, and payloads hidden in it. A message the message
    /// judge takes is read by it whole, every view ([`Guard::screen_input`]): riding then
    /// judges the message no more ([`Guard::reply_screen`]).
    pub fn screen_hidden(&mut self, text: &str) -> Result<Screening> {
        if self.judged_apart(text)? {
            return self.screen_input(text);
        }
        let mut views = Vec::new();
        let plain = normalize(text);
        if plain.trim() != text.trim() {
            views.push(plain);
        }
        views.extend(hidden_payloads(text));
        self.screen_views(&views)
    }

    fn screen_views(&mut self, views: &[String]) -> Result<Screening> {
        let start = Instant::now();
        let mut worst: Option<Scores> = None;
        let mut worst_part: Option<Scores> = None;
        let mut tokens = 0;
        for view in views {
            // Whitespace alone says nothing; the head was never shown it, so do not ask it.
            if view.trim().is_empty() {
                continue;
            }
            let windows = self.reader.windows(view)?;
            // Longer than a window: part by part, as the riding screen judges it, when the
            // head has a parts head and the guard model can hold the whole message.
            if windows.len() > 1 {
                if let Some((n, s)) = self.worst_part(view)? {
                    tokens += n;
                    keep_worse(&mut worst_part, s);
                    continue;
                }
            }
            for window in windows {
                tokens += self.reader.read_message(&window)?;
                keep_worse(&mut worst, self.scores(self.reader.features())?);
            }
        }
        let read_whole = worst.is_some();
        let whole = self.judge(worst, self.input_threshold);
        let mut s = match (&self.head.parts, worst_part) {
            (Some(parts), Some(w)) => {
                let by_parts =
                    judge_with(Some(w), parts.info.threshold, &parts.info.category_rules);
                // Each head at its own threshold; a flag from either stands.
                if by_parts.flagged && !whole.flagged || !read_whole {
                    by_parts
                } else {
                    whole
                }
            }
            _ => whole,
        };
        s.tokens = tokens;
        s.ms = ms_since(start);
        Ok(s)
    }

    /// The parts head's worst scores over `message`'s parts, read in one pass on a session of
    /// its own sized to the message ([`Reader::read_whole`], kept for the reply to it), with the
    /// tokens read. None when the head has no parts head or the message and a reply's room do
    /// not fit the guard model's context: then it is read window by window.
    fn worst_part(&mut self, message: &str) -> Result<Option<(usize, Scores)>> {
        let Some(parts) = self.head.parts.as_deref() else {
            return Ok(None);
        };
        let Some(whole) = self.reader.read_whole(message)? else {
            return Ok(None);
        };
        let worst = worst_part_scores(
            parts,
            self.reader.model(),
            &whole.tokens,
            whole.start,
            &whole.states,
        )?;
        Ok(worst.map(|w| (whole.tokens.len() - whole.start, w)))
    }

    /// Screens a whole reply to `message` at once, on the guard's own session (what
    /// [`ReplyScreen`] does as the reply streams).
    pub fn screen_output(&mut self, message: &str, reply: &str) -> Result<Screening> {
        let start = Instant::now();
        let long = self.read_context(message)?;
        let ids = self.model().tokenizer.encode(&normalize(reply), false)?;
        self.reader.read_reply(&ids)?;
        let f = self
            .reader
            .features()
            .ok_or_else(|| SafetyError::Head("no text was read".into()))?;
        // As the reply screen judges it.
        let (head, threshold) = self.reply_head(long);
        let mut s = judge_with(Some(head.scores(&f)?), threshold, &head.info.category_rules);
        s.tokens = ids.len();
        s.ms = ms_since(start);
        Ok(s)
    }

    /// Reads the message a reply answers, as riding reads it: a message longer than a window
    /// whole when the head has a parts head and it fits (kept from `screen_input`, or read
    /// again), the reply then read on from its last window; otherwise its last window alone.
    /// Returns whether the message was judged part by part, so its reply gets the long-reply
    /// head.
    fn read_context(&mut self, message: &str) -> Result<bool> {
        let message = normalize(message);
        let windows = self.reader.windows(&message)?;
        let long = windows.len() > 1 && self.head.parts.is_some();
        if long
            && (self.reader.reread_whole(&message)? || self.reader.read_whole(&message)?.is_some())
        {
            return Ok(true);
        }
        let last = windows.last().cloned().unwrap_or_default();
        self.reader.read_message(&last)?;
        Ok(long)
    }

    /// The head that judges a reply, and its threshold: after a message judged part by part
    /// (`after_long`), the long-reply head when there is one, since the others learned
    /// replies to short messages only; else the reply head when there is one, else the main
    /// head, at the guard's reply threshold (the one `set_thresholds` sets).
    fn reply_head(&self, after_long: bool) -> (&Head, f32) {
        let short = (
            self.head.replies.as_deref().unwrap_or(&self.head),
            self.output_threshold,
        );
        self.head
            .long_replies
            .as_deref()
            .filter(|_| after_long)
            .and_then(|h| Some((h, h.info.output_threshold?)))
            .unwrap_or(short)
    }

    fn scores(&self, features: Option<Vec<f32>>) -> Result<Scores> {
        let f = features.ok_or_else(|| SafetyError::Head("no text was read".into()))?;
        self.head.scores(&f)
    }

    fn judge(&self, scores: Option<Scores>, threshold: f32) -> Screening {
        judge_with(scores, threshold, &self.head.info.category_rules)
    }

    /// Starts screening one reply to `message`. With `riding: Some((prompt, start))` the
    /// screen reads the states of the chat's pass over `prompt`, whose user message begins at
    /// token `start` (the caller makes sure that token and all after it run); with `None` it
    /// reads the message and the reply on the guard's own session.
    pub fn reply_screen(
        &mut self,
        message: &str,
        riding: Option<(usize, usize)>,
        every_tokens: usize,
    ) -> Result<ReplyScreen<'_>> {
        let mode = match riding {
            Some((prompt_len, start)) => Mode::Riding {
                prompt_len,
                start,
                features: Features::new(self.head.info.spec.taps.len(), self.head.info.n_embd),
                long: false,
                judged_apart: self.judged_apart(message)?,
            },
            None => {
                // As riding: a message the parts head judged gets the long-reply head.
                let long = self.read_context(message)?;
                Mode::Own {
                    pending: String::new(),
                    long,
                }
            }
        };
        Ok(ReplyScreen {
            guard: self,
            mode,
            every_tokens: every_tokens.max(1),
            since_check: 0,
            input: None,
            worst: 0.0,
            flagged: None,
            input_ms: 0.0,
            ms: 0.0,
            checks: 0,
            error: None,
        })
    }
}

/// The screening a head's worst scores give at `threshold`, with the category `rules` say
/// the user may be shown.
fn judge_with(scores: Option<Scores>, threshold: f32, rules: &CategoryRules) -> Screening {
    match scores {
        // Nothing readable (empty or whitespace): nothing to flag.
        None => Screening::nothing(),
        Some(s) => {
            let flagged = s.unsafe_prob >= threshold;
            Screening {
                flagged,
                score: s.unsafe_prob,
                category: flagged.then(|| shown_category(rules, &s)).flatten(),
                category_guess: flagged.then(|| s.top_category()),
                tokens: 0,
                ms: 0.0,
            }
        }
    }
}

/// The parts head's worst scores over the parts of the message at `tokens[first..]`, from the
/// states of one pass over `tokens` (the chat's, riding; the guard's own otherwise).
fn worst_part_scores(
    parts: &Head,
    model: &Model,
    tokens: &[u32],
    first: usize,
    states: &[Vec<f32>],
) -> Result<Option<Scores>> {
    let ranges = part_ranges(model, tokens, first..tokens.len(), parts.info.spec.window);
    let mut worst: Option<Scores> = None;
    for f in part_features(states, &ranges, parts.info.n_embd) {
        keep_worse(&mut worst, parts.scores(&f)?);
    }
    Ok(worst)
}

/// Keeps the more unsafe of `worst` and `s`: a message read in windows (or views) is as
/// unsafe as its worst one, since averaged whole, a harmful line buried in pages of benign
/// text would vanish in the mean.
fn keep_worse(worst: &mut Option<Scores>, s: Scores) {
    if worst.as_ref().is_none_or(|w| s.unsafe_prob > w.unsafe_prob) {
        *worst = Some(s);
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

enum Mode {
    Riding {
        prompt_len: usize,
        start: usize,
        features: Features,
        /// The message was judged part by part (longer than a window): its reply is judged by
        /// the long-reply head when the head has one.
        long: bool,
        /// The message judge judged the message before the pass ([`Guard::screen_hidden`]):
        /// read in one window here too, it is not judged again.
        judged_apart: bool,
    },
    Own {
        /// Reply text not read yet.
        pending: String,
        /// As in `Riding`: the message was longer than a window and judged part by part.
        long: bool,
    },
}

/// Screens one reply as it is generated: an engine [`Observer`] that stops the generation when
/// the message (riding along) or the reply so far is flagged. The reply is judged when a
/// sentence ends or every `every_tokens` tokens (the points the reply threshold was picked
/// at) and once more when it ends; the text in between is held back until its judgement, so
/// nothing unjudged is shown.
pub struct ReplyScreen<'g> {
    guard: &'g mut Guard,
    mode: Mode,
    every_tokens: usize,
    since_check: usize,
    /// The message's screening, when riding along (it is judged from the prompt's states).
    input: Option<Screening>,
    worst: f32,
    flagged: Option<Screening>,
    input_ms: f64,
    ms: f64,
    checks: usize,
    /// A guard that cannot read must not let text through: the first error stops the reply.
    error: Option<SafetyError>,
}

impl ReplyScreen<'_> {
    /// The message's screening from the chat's pass (riding along; None otherwise or before
    /// the prompt ran).
    pub fn input(&self) -> Option<&Screening> {
        self.input.as_ref()
    }

    /// The screening that flagged the reply, if one did.
    pub fn flagged(&self) -> Option<&Screening> {
        self.flagged.as_ref()
    }

    /// The highest unsafe probability of the reply so far.
    pub fn worst_score(&self) -> f32 {
        self.worst
    }

    /// Time spent judging the message while riding along.
    pub fn input_ms(&self) -> f64 {
        self.input_ms
    }

    /// Time spent screening the reply.
    pub fn ms(&self) -> f64 {
        self.ms
    }

    pub fn checks(&self) -> usize {
        self.checks
    }

    /// The first error, if reading ever failed (the reply was stopped there, and nothing
    /// after the last judgement was shown).
    pub fn take_error(&mut self) -> Option<SafetyError> {
        self.error.take()
    }

    /// Judges the reply so far: Show when it passes, Stop when it is flagged or cannot be read
    /// (the error is kept for [`ReplyScreen::take_error`]).
    fn check(&mut self) -> Judgement {
        match self.try_check() {
            Ok(j) => j,
            Err(e) => {
                self.error = Some(e);
                Judgement::Stop
            }
        }
    }

    fn try_check(&mut self) -> Result<Judgement> {
        let start = Instant::now();
        let after_long;
        let features = match &mut self.mode {
            Mode::Riding { features, long, .. } => {
                after_long = *long;
                features.vector()
            }
            Mode::Own { pending, long } => {
                after_long = *long;
                // Trailing whitespace waits for the next word: read apart, it would tokenize
                // differently from the reply as a whole.
                let keep = pending.len() - pending.trim_end().len();
                let rest = pending.split_off(pending.len() - keep);
                let text = normalize(&std::mem::replace(pending, rest));
                let ids = self.guard.model().tokenizer.encode(&text, false)?;
                self.guard.reader.read_reply(&ids)?;
                self.guard.reader.features()
            }
        };
        let f = features.ok_or_else(|| SafetyError::Head("no text was read".into()))?;
        let (head, threshold) = self.guard.reply_head(after_long);
        let scores = head.scores(&f)?;
        self.checks += 1;
        self.since_check = 0;
        self.worst = self.worst.max(scores.unsafe_prob);
        let mut s = judge_with(Some(scores), threshold, &head.info.category_rules);
        s.ms = ms_since(start);
        self.ms += s.ms;
        if s.flagged {
            self.flagged = Some(s);
            return Ok(Judgement::Stop);
        }
        Ok(Judgement::Show)
    }

    /// Judges the message from the states of the chat's pass over it: window by window as the
    /// guard's own session reads it, or part by part when it is longer than a window and the
    /// head has a parts head; the reply is then read on from the last window. Returns whether
    /// it was flagged.
    fn judge_message(&mut self, tokens: &[u32], states: &[Vec<f32>]) -> Result<bool> {
        let Mode::Riding {
            prompt_len,
            start,
            features,
            long,
            judged_apart,
        } = &mut self.mode
        else {
            return Ok(false);
        };
        let t = Instant::now();
        let ran_from = *prompt_len - tokens.len();
        if ran_from > *start {
            return Err(SafetyError::Head(
                "the chat reused part of the message's states".into(),
            ));
        }
        let first = *start - ran_from;
        let windows = window_ranges(first, tokens.len(), self.guard.head.info.spec.window);
        // Longer than a window: judged part by part when the head has a parts head
        // ([`crate::parts`]); otherwise window by window, the worst deciding. Either way the
        // reply is read on from the message's last window.
        let parts_head = self.guard.head.parts.as_deref();
        let mut s = match parts_head.filter(|_| windows.len() > 1) {
            Some(parts) => {
                *long = true;
                let worst = worst_part_scores(parts, self.guard.model(), tokens, first, states)?;
                if let Some(last) = windows.last() {
                    features.clear();
                    features.add_rows(states, last.clone());
                }
                judge_with(worst, parts.info.threshold, &parts.info.category_rules)
            }
            // Judged already by the message judge: only the reply's reading starts here. (Read
            // here in more than one window, which a tokenization at the edge can do, it is
            // judged again below: a flag from either stands, and no message goes unjudged.)
            None if *judged_apart && windows.len() == 1 => {
                features.clear();
                features.add_rows(states, windows[0].clone());
                self.input_ms = ms_since(t);
                return Ok(false);
            }
            None => {
                let mut worst: Option<Scores> = None;
                for rows in windows {
                    features.clear();
                    features.add_rows(states, rows);
                    keep_worse(&mut worst, self.guard.scores(features.vector())?);
                }
                self.guard.judge(worst, self.guard.input_threshold)
            }
        };
        s.tokens = *prompt_len - *start;
        s.ms = ms_since(t);
        self.input_ms = s.ms;
        let flagged = s.flagged;
        self.input = Some(s);
        Ok(flagged)
    }
}

/// Where a reply may be judged: after a sentence or a line ends.
pub(crate) fn ends_sentence(text: &str) -> bool {
    text.contains(['.', '!', '?', '\n', '。', '！', '？', ':', ';'])
}

impl Observer for ReplyScreen<'_> {
    fn taps(&self) -> Vec<usize> {
        match self.mode {
            Mode::Riding { .. } => self.guard.head.info.spec.taps.clone(),
            Mode::Own { .. } => Vec::new(),
        }
    }

    fn prompt(&mut self, tokens: &[u32], states: &[Vec<f32>]) -> ControlFlow<()> {
        match self.judge_message(tokens, states) {
            Ok(false) => ControlFlow::Continue(()),
            Ok(true) => ControlFlow::Break(()),
            Err(e) => {
                self.error = Some(e);
                ControlFlow::Break(())
            }
        }
    }

    fn token(&mut self, _id: u32, text: &str, states: &[Vec<f32>]) -> Judgement {
        match &mut self.mode {
            Mode::Riding { features, .. } => features.add(states, 0),
            Mode::Own { pending, .. } => pending.push_str(text),
        }
        self.since_check += 1;
        if ends_sentence(text) || self.since_check >= self.every_tokens {
            return self.check();
        }
        Judgement::Hold
    }

    fn finish(&mut self) -> Judgement {
        if self.error.is_some() || self.flagged.is_some() {
            return Judgement::Stop;
        }
        if self.since_check == 0 {
            return Judgement::Show;
        }
        self.check()
    }
}
