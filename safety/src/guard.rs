//! The guard: a [`Reader`] on the guard model and a trained [`Head`]. It screens a prompt as a
//! whole (in windows when it is long, and again for anything hidden in base64), and a reply
//! as it streams ([`OutputScreen`]), extending its own cache with each new piece.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use kostant_engine::Model;
use serde::Serialize;

use crate::head::{Head, Scores};
use crate::normalize::{hidden_payloads, normalize};
use crate::reader::{Reader, Role};
use crate::{Category, Result, SafetyError};

/// Windows after the first start this many tokens before the previous one ends, so a phrase
/// cut by a window boundary is still read whole in one of them.
const WINDOW_OVERLAP: usize = 16;

/// The guard's judgement of one text.
#[derive(Clone, Debug, Serialize)]
pub struct Screening {
    pub flagged: bool,
    /// Probability that the text is unsafe (the highest over its windows and payloads).
    pub score: f32,
    /// The most likely hazard category of the worst window; set when flagged.
    pub category: Option<Category>,
    /// Tokens the guard read for this judgement.
    pub tokens: usize,
    pub ms: f64,
}

pub struct Guard {
    reader: Reader,
    head: Head,
    input_threshold: f32,
    output_threshold: f32,
}

impl Guard {
    /// A guard reading with `model` through `head`. Fails if the head was trained on another
    /// model.
    pub fn new(model: Arc<Model>, head: Head) -> Result<Guard> {
        let info = &head.info;
        if model.hparams.n_embd != info.n_embd || model.name() != info.model_name {
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
        let t = head.info.threshold;
        Ok(Guard {
            reader,
            head,
            input_threshold: t,
            output_threshold: t,
        })
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

    /// The unsafe probabilities at or above which a message and a reply are flagged (both the
    /// head's dev-chosen threshold unless set).
    pub fn thresholds(&self) -> (f32, f32) {
        (self.input_threshold, self.output_threshold)
    }

    pub fn set_thresholds(&mut self, input: f32, output: f32) {
        self.input_threshold = input;
        self.output_threshold = output;
    }

    fn threshold(&self, role: Role) -> f32 {
        match role {
            Role::Input => self.input_threshold,
            Role::Output => self.output_threshold,
        }
    }

    /// Memory the guard holds of its own: its KV cache and the head's weights (the model's
    /// weights are mapped, and shared when the chat model is the same file).
    pub fn resident_bytes(&self) -> usize {
        self.reader.kv_bytes() + self.head.weight_bytes()
    }

    /// Screens a user's message: all of it, however long, plus any payload hidden in it.
    pub fn screen_input(&mut self, text: &str) -> Result<Screening> {
        self.screen(Role::Input, text)
    }

    /// Screens a whole reply at once (what [`OutputScreen`] does piece by piece).
    pub fn screen_output(&mut self, text: &str) -> Result<Screening> {
        self.screen(Role::Output, text)
    }

    fn screen(&mut self, role: Role, text: &str) -> Result<Screening> {
        let start = Instant::now();
        let mut views = vec![normalize(text)];
        views.extend(hidden_payloads(text));
        let mut worst: Option<Scores> = None;
        let mut tokens = 0;
        for view in &views {
            // Whitespace alone says nothing; the head was never shown it, so do not ask it.
            if view.trim().is_empty() {
                continue;
            }
            let ids = self.reader.model().tokenizer.encode(view, false)?;
            if ids.is_empty() {
                continue;
            }
            let window = self.reader.spec().window;
            let mut begin = 0;
            loop {
                let end = (begin + window).min(ids.len());
                self.reader.start(role)?;
                self.reader.push(&ids[begin..end])?;
                tokens += end - begin;
                let s = self.scores()?;
                if worst.as_ref().is_none_or(|w| s.unsafe_prob > w.unsafe_prob) {
                    worst = Some(s);
                }
                if end == ids.len() {
                    break;
                }
                begin = end - WINDOW_OVERLAP;
            }
        }
        Ok(self.judge(role, worst, tokens, start))
    }

    fn scores(&self) -> Result<Scores> {
        let f = self
            .reader
            .features()
            .ok_or_else(|| SafetyError::Head("no text was read".into()))?;
        self.head.scores(&f)
    }

    fn judge(
        &self,
        role: Role,
        scores: Option<Scores>,
        tokens: usize,
        start: Instant,
    ) -> Screening {
        let ms = start.elapsed().as_secs_f64() * 1e3;
        match scores {
            // Nothing readable (empty or whitespace): nothing to flag.
            None => Screening {
                flagged: false,
                score: 0.0,
                category: None,
                tokens,
                ms,
            },
            Some(s) => {
                let flagged = s.unsafe_prob >= self.threshold(role);
                Screening {
                    flagged,
                    score: s.unsafe_prob,
                    category: flagged.then(|| s.top_category()),
                    tokens,
                    ms,
                }
            }
        }
    }

    /// Starts screening a reply that is about to stream.
    pub fn output_screen(&mut self, every_tokens: usize) -> Result<OutputScreen<'_>> {
        self.reader.start(Role::Output)?;
        Ok(OutputScreen {
            guard: self,
            pending: String::new(),
            read_tokens: Vec::new(),
            every_tokens: every_tokens.max(1),
            worst: 0.0,
            ms: 0.0,
            checks: 0,
        })
    }
}

/// Screens a reply as it streams. Text is buffered until a sentence ends or `every_tokens`
/// tokens have arrived, then read into the guard's cache (only the new tokens run) and judged.
pub struct OutputScreen<'g> {
    guard: &'g mut Guard,
    pending: String,
    /// Token ids of the text read in the current window (to start the next one overlapped).
    read_tokens: Vec<u32>,
    every_tokens: usize,
    worst: f32,
    ms: f64,
    checks: usize,
}

impl OutputScreen<'_> {
    /// Adds streamed text; returns a flagging screening as soon as the reply so far is judged
    /// unsafe, None while it is fine (or no check was due).
    pub fn push(&mut self, text: &str) -> Result<Option<Screening>> {
        self.pending.push_str(text);
        // About four bytes a token for English; only the cadence depends on it.
        let pending_tokens = self.pending.len() / 4;
        let sentence_end = text.contains(['.', '!', '?', '\n', '。', '！', '？', ':', ';']);
        if sentence_end || pending_tokens >= self.every_tokens {
            return self.check();
        }
        Ok(None)
    }

    /// Reads whatever is pending and judges the reply so far. Call once more at the end.
    pub fn check(&mut self) -> Result<Option<Screening>> {
        if self.pending.trim().is_empty() {
            return Ok(None);
        }
        let start = Instant::now();
        let text = normalize(&std::mem::take(&mut self.pending));
        let ids = self.guard.reader.model().tokenizer.encode(&text, false)?;
        let mut rest = &ids[..];
        while !rest.is_empty() {
            if self.guard.reader.room() == 0 {
                // The window is full: start a new one that repeats the last few tokens.
                let keep = self.read_tokens.len().min(WINDOW_OVERLAP);
                let tail = self.read_tokens[self.read_tokens.len() - keep..].to_vec();
                self.guard.reader.start(Role::Output)?;
                self.guard.reader.push(&tail)?;
                self.read_tokens = tail;
            }
            let n = rest.len().min(self.guard.reader.room());
            self.guard.reader.push(&rest[..n])?;
            self.read_tokens.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
        }
        let scores = self.guard.scores()?;
        self.checks += 1;
        self.worst = self.worst.max(scores.unsafe_prob);
        let screening = self
            .guard
            .judge(Role::Output, Some(scores), ids.len(), start);
        self.ms += screening.ms;
        Ok(screening.flagged.then_some(screening))
    }

    /// The highest unsafe probability seen in this reply.
    pub fn worst_score(&self) -> f32 {
        self.worst
    }

    /// Time spent screening this reply.
    pub fn ms(&self) -> f64 {
        self.ms
    }

    pub fn checks(&self) -> usize {
        self.checks
    }
}
