//! The Chat screen's logic: send, stream, stop, regenerate, edit-and-resend, copy, feature
//! chips, the TTFT and tok/s readout, saving to the encrypted history. An "Ask documents"
//! reply arrives with its sources ([`ReplyEvent::Sources`]), kept on the reply's message; the
//! history saves the question as typed and the reply, never the passages.
//!
//! Replies come from a responder (`crate::assistant::responder`) on the chat's worker thread,
//! as [`ReplyEvent`]s: tokens, `Withdrawn` (the guard took back what was shown; its notice
//! replaces it) and a final [`Verdict`] with the category the guard may show, which the
//! message keeps ([`MessageState`]). The app's responder is the model behind the
//! always-resident guard, through the same pipeline as the terminal chat.
//! Tests script the seam instead (controllers/tests.rs).

use std::time::Instant;

use kostant_engine::Message;
use kostant_safety::Verdict;

use super::message::{ChatMessage, MessageState};
use super::proofread::ChangeReview;
use super::{AppError, Notify, SharedStore};
use crate::assistant::ask::Source;
use crate::assistant::choices::{Shape, SummaryLength, Tone};
use crate::assistant::responder::{
    ContextOrigin, GenerationSettings, ModelSummary, ReplyEvent, ReplyRequest, ReplyStats,
    ResponderFactory,
};
use crate::assistant::worker::{ChatWorker, ModelState, WorkerMsg};
use crate::features::Feature;
use crate::history::context::ContextSave;
use crate::history::Role;

/// The conversation on screen as the model is sent it: without failed messages, and without
/// an exchange the guard refused or withdrew (the user's message and the refusal or notice),
/// which stays on screen and in the history but leaves the model's context
/// ([`kostant_safety::close_exchange`]).
pub(crate) fn model_context(messages: &[ChatMessage]) -> Vec<Message> {
    let mut turns: Vec<Message> = Vec::with_capacity(messages.len());
    for m in messages {
        if m.role == Role::System || m.state == MessageState::Failed {
            continue;
        }
        if m.role == Role::User {
            turns.push(Message::new(kostant_engine::Role::User, m.text.clone()));
            continue;
        }
        let verdict = m.state.verdict().unwrap_or(Verdict::Answered);
        kostant_safety::close_exchange(&mut turns, m.text.clone(), verdict);
    }
    turns
}

/// Whether the chat is saved to the history or temporary: a temporary chat writes nothing (no
/// messages, no saved context) and is forgotten, by the screen and the responder, on leaving.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChatMode {
    #[default]
    Saved,
    Temporary,
}

/// Whether a finished reply adds an exchange to the history or replaces the last one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Save {
    Append,
    ReplaceLast,
}

struct Running {
    job: u64,
    save: Save,
    /// The shape the reply was asked in: its items are read off the text when it ends.
    shape: Option<Shape>,
    started: Instant,
    first_token: Option<Instant>,
    tokens: usize,
}

pub struct ChatController {
    worker: ChatWorker,
    model: ModelState,
    messages: Vec<ChatMessage>,
    feature: Feature,
    /// The Summarize chip's length and the Rewrite chip's tone (none: the feature writes
    /// freely).
    length: Option<SummaryLength>,
    tone: Option<Tone>,
    pub settings: GenerationSettings,
    running: Option<Running>,
    next_job: u64,
    last_stats: Option<ReplyStats>,
    store: Option<SharedStore>,
    conversation: Option<i64>,
    /// Set when another conversation is opened or a new one started: the next request tells
    /// the responder (see [`ContextOrigin`]).
    switched: Option<ContextOrigin>,
    /// The context to save with the exchange that just ended.
    pending_context: Option<ContextSave>,
    /// The last problem worth a line on screen (a failed save, a failed reply).
    status: Option<String>,
    mode: ChatMode,
}

impl ChatController {
    /// Starts the worker thread, which first builds the responder with `factory`.
    pub fn new(factory: ResponderFactory, store: Option<SharedStore>, notify: Notify) -> Self {
        let (worker, model) = ChatWorker::spawn(factory, notify);
        ChatController {
            worker,
            model,
            messages: Vec::new(),
            feature: Feature::Chat,
            length: None,
            tone: None,
            settings: GenerationSettings::default(),
            running: None,
            next_job: 0,
            last_stats: None,
            store,
            conversation: None,
            switched: None,
            pending_context: None,
            status: None,
            mode: ChatMode::Saved,
        }
    }

    /// Runs another model: joins the worker and starts one that builds its responder with
    /// `factory`. Not while a reply runs (stop it first). The conversation stays on screen and
    /// in the history; the next reply reads it anew under the new model.
    pub fn switch_model(
        &mut self,
        factory: ResponderFactory,
        notify: Notify,
    ) -> Result<(), AppError> {
        if self.running.is_some() {
            return Err(AppError::Busy);
        }
        self.shutdown();
        (self.worker, self.model) = ChatWorker::spawn(factory, notify);
        self.pending_context = None;
        self.last_stats = None;
        self.switched = Some(ContextOrigin::Switched(None));
        Ok(())
    }

    pub fn model(&self) -> &ModelState {
        &self.model
    }

    pub fn messages(&self) -> &[ChatMessage] {
        &self.messages
    }

    pub fn is_busy(&self) -> bool {
        self.running.is_some()
    }

    pub fn feature(&self) -> Feature {
        self.feature
    }

    /// Applies to the next reply: the system prompt is part of every prompt.
    pub fn set_feature(&mut self, f: Feature) {
        self.feature = f;
    }

    pub fn length(&self) -> Option<SummaryLength> {
        self.length
    }

    /// Applies to the next Summarize reply: that many bullets, or free sentences with `None`.
    pub fn set_length(&mut self, length: Option<SummaryLength>) {
        self.length = length;
    }

    pub fn tone(&self) -> Option<Tone> {
        self.tone
    }

    /// Applies to the next Rewrite reply: that tone, or a plain rewrite with `None`.
    pub fn set_tone(&mut self, tone: Option<Tone>) {
        self.tone = tone;
    }

    /// The small choice beside the active chip: its name and its options, the first being the
    /// feature as it writes unshaped ("Sentences", "Clearer"); `None` for chips without one.
    pub fn shape_options(&self) -> Option<(&'static str, Vec<&'static str>)> {
        match self.feature {
            Feature::Summarize => Some((
                "Length",
                std::iter::once("Sentences")
                    .chain(SummaryLength::ALL.map(SummaryLength::label))
                    .collect(),
            )),
            Feature::Rewrite => Some((
                "Tone",
                std::iter::once("Clearer")
                    .chain(Tone::ALL.map(Tone::label))
                    .collect(),
            )),
            _ => None,
        }
    }

    /// Which of [`ChatController::shape_options`] is chosen (0: unshaped).
    pub fn shape_option(&self) -> usize {
        let at = |i: Option<usize>| i.map_or(0, |i| i + 1);
        match self.feature {
            Feature::Summarize => at(self
                .length
                .and_then(|l| SummaryLength::ALL.iter().position(|x| *x == l))),
            Feature::Rewrite => at(self
                .tone
                .and_then(|t| Tone::ALL.iter().position(|x| *x == t))),
            _ => 0,
        }
    }

    /// Chooses option `i` of [`ChatController::shape_options`] for the active chip; an index
    /// past the options is ignored.
    pub fn set_shape_option(&mut self, i: usize) {
        let pick = |n: usize| i.checked_sub(1).filter(|k| *k < n);
        match self.feature {
            Feature::Summarize if i <= SummaryLength::ALL.len() => {
                self.length = pick(SummaryLength::ALL.len()).map(|k| SummaryLength::ALL[k])
            }
            Feature::Rewrite if i <= Tone::ALL.len() => {
                self.tone = pick(Tone::ALL.len()).map(|k| Tone::ALL[k])
            }
            _ => {}
        }
    }

    /// Suggestion `n` under message `index`, for the composer (a Reply reply's chip).
    pub fn choice(&self, index: usize, n: usize) -> Option<&str> {
        self.messages.get(index)?.choices.get(n).map(String::as_str)
    }

    /// The conversation this chat saves into, if it was saved or opened from the history.
    pub fn conversation(&self) -> Option<i64> {
        self.conversation
    }

    pub fn status(&self) -> Option<&str> {
        self.status.as_deref()
    }

    pub fn last_stats(&self) -> Option<&ReplyStats> {
        self.last_stats.as_ref()
    }

    /// Sends a user message and starts the reply.
    pub fn send(&mut self, text: &str) -> Result<(), AppError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(AppError::EmptyMessage);
        }
        self.ready()?;
        self.messages
            .push(ChatMessage::new(Role::User, text, MessageState::SENT));
        self.start(Save::Append)
    }

    /// Stops the reply being generated at the next token; what was generated stays.
    pub fn stop(&mut self) {
        if self.running.is_some() {
            self.worker.cancel();
        }
    }

    /// Drops the last reply and generates it again (for the same user message).
    pub fn regenerate(&mut self) -> Result<(), AppError> {
        self.ready()?;
        match self.messages.last() {
            Some(m) if m.role == Role::Assistant => {}
            _ => return Err(AppError::Nothing("reply to regenerate")),
        }
        let old = self.messages.pop();
        let save = match old {
            Some(m) if m.saved => Save::ReplaceLast,
            _ => Save::Append,
        };
        self.start(save)
    }

    /// The text of the last user message, for the edit box.
    pub fn last_user_text(&self) -> Option<&str> {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(|m| m.text.as_str())
    }

    /// Replaces the last user message (and drops its reply), then replies to the new text.
    pub fn edit_last(&mut self, text: &str) -> Result<(), AppError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(AppError::EmptyMessage);
        }
        self.ready()?;
        let Some(at) = self.messages.iter().rposition(|m| m.role == Role::User) else {
            return Err(AppError::Nothing("message to edit"));
        };
        let was_saved = self.messages[at + 1..].iter().any(|m| m.saved);
        self.messages.truncate(at);
        self.messages
            .push(ChatMessage::new(Role::User, text, MessageState::SENT));
        self.start(if was_saved {
            Save::ReplaceLast
        } else {
            Save::Append
        })
    }

    /// The text of message `index`, for the clipboard; a proofread reply's is the user's text
    /// with the changes they accepted.
    pub fn copy_text(&self, index: usize) -> Option<String> {
        let m = self.messages.get(index)?;
        Some(
            m.review
                .as_ref()
                .map_or_else(|| m.text.clone(), ChangeReview::text),
        )
    }

    /// Accepts change `change` of proofread reply `index`, or takes it back.
    pub fn toggle_change(&mut self, index: usize, change: usize) {
        if let Some(r) = self.messages.get_mut(index).and_then(|m| m.review.as_mut()) {
            r.toggle(change);
        }
    }

    /// Accepts every change of proofread reply `index`.
    pub fn accept_all_changes(&mut self, index: usize) {
        if let Some(r) = self.messages.get_mut(index).and_then(|m| m.review.as_mut()) {
            r.accept_all();
        }
    }

    /// Source `n` (0-based, as listed) under message `index`, for the passage panel.
    pub fn source(&self, index: usize, n: usize) -> Option<&Source> {
        self.messages.get(index)?.sources.get(n)
    }

    pub fn mode(&self) -> ChatMode {
        self.mode
    }

    /// Turns the temporary mode on or off. Either way the chat on screen is left: a new, empty
    /// one starts, and the responder forgets the context it kept (a temporary chat's memory
    /// is cleared when it closes; a saved chat is not carried into a temporary one).
    pub fn set_mode(&mut self, mode: ChatMode) -> Result<(), AppError> {
        if mode == self.mode {
            return Ok(());
        }
        self.new_chat()?;
        self.mode = mode;
        Ok(())
    }

    /// Starts an empty conversation (the next exchange creates a new history entry).
    pub fn new_chat(&mut self) -> Result<(), AppError> {
        if self.running.is_some() {
            return Err(AppError::Busy);
        }
        self.messages.clear();
        self.conversation = None;
        self.switched = Some(ContextOrigin::Switched(None));
        self.last_stats = None;
        self.status = None;
        Ok(())
    }

    /// Shows a conversation from the history; the next exchange is appended to it.
    pub fn open_conversation(
        &mut self,
        id: i64,
        turns: Vec<(Role, String)>,
    ) -> Result<(), AppError> {
        if self.running.is_some() {
            return Err(AppError::Busy);
        }
        self.messages = turns
            .into_iter()
            .filter(|(r, _)| *r != Role::System)
            .map(|(role, text)| ChatMessage::new(role, text, MessageState::SENT))
            .collect();
        if let Some(last) = self.messages.last_mut() {
            last.saved = last.role == Role::Assistant;
        }
        self.conversation = Some(id);
        // A saved conversation is saved to: opening one leaves a temporary chat behind.
        self.mode = ChatMode::Saved;
        self.last_stats = None;
        self.status = None;
        // Its saved context, restored by the responder before the next reply; one that does
        // not open is said, and the conversation is read again.
        let saved = match self.store.as_ref().map(|s| s.borrow().saved_context(id)) {
            Some(Ok(saved)) => saved.map(Box::new),
            Some(Err(e)) => {
                self.status = Some(format!(
                    "This conversation's saved context could not be used ({e}), so it will be read again."
                ));
                None
            }
            None => None,
        };
        self.switched = Some(ContextOrigin::Switched(saved));
        Ok(())
    }

    /// The history entry `id` is gone: later exchanges start a new one.
    pub fn forget_conversation(&mut self, id: Option<i64>) {
        if id.is_none() || self.conversation == id {
            self.conversation = None;
            self.switched = Some(ContextOrigin::Switched(None));
            for m in &mut self.messages {
                m.saved = false;
            }
        }
    }

    /// Time to first token and decode speed: live while a reply streams, then the engine's.
    pub fn readout(&self) -> String {
        if let Some(r) = &self.running {
            return match r.first_token {
                None => format!("first token… {} ms", r.started.elapsed().as_millis()),
                Some(first) => {
                    let ttft = first.duration_since(r.started).as_secs_f64() * 1000.0;
                    let secs = first.elapsed().as_secs_f64();
                    let rate = if secs > 0.0 && r.tokens > 1 {
                        (r.tokens - 1) as f64 / secs
                    } else {
                        0.0
                    };
                    format!("TTFT {ttft:.0} ms · {rate:.1} tok/s")
                }
            };
        }
        match &self.last_stats {
            Some(s) => {
                let adapter = s
                    .adapter
                    .as_ref()
                    .map_or(String::new(), |a| format!(" · {a} adapter"));
                format!(
                    "TTFT {:.0} ms · {:.1} tok/s · {} tokens{adapter}",
                    s.ttft_ms, s.decode_tok_s, s.generated_tokens
                )
            }
            None => String::new(),
        }
    }

    /// Applies everything the worker has reported so far. Returns whether anything changed.
    pub fn pump(&mut self) -> bool {
        let mut changed = false;
        while let Some(m) = self.worker.try_recv() {
            self.apply(m);
            changed = true;
        }
        changed
    }

    /// Blocks until the model has loaded (or failed to). For tests and the terminal.
    pub fn wait_ready(&mut self) -> Result<&ModelSummary, AppError> {
        while self.model == ModelState::Loading {
            let m = self.worker.recv()?;
            self.apply(m);
        }
        match &self.model {
            ModelState::Ready(s) => Ok(s),
            ModelState::Failed(e) => Err(AppError::ModelNotReady(e.clone())),
            ModelState::Loading => Err(AppError::ModelNotReady("still loading".into())),
        }
    }

    /// Blocks until the running reply has ended, applying its events.
    pub fn wait_idle(&mut self) -> Result<(), AppError> {
        while self.running.is_some() {
            let m = self.worker.recv()?;
            self.apply(m);
        }
        Ok(())
    }

    /// Blocks for the next report from the worker and applies it.
    pub fn wait_event(&mut self) -> Result<(), AppError> {
        let m = self.worker.recv()?;
        self.apply(m);
        Ok(())
    }

    /// Cancels any reply and joins the worker (closing the window mid-reply ends here).
    pub fn shutdown(&mut self) {
        self.worker.shutdown();
    }

    fn ready(&self) -> Result<(), AppError> {
        if self.running.is_some() {
            return Err(AppError::Busy);
        }
        match &self.model {
            ModelState::Ready(_) => Ok(()),
            ModelState::Loading => Err(AppError::ModelNotReady("still loading".into())),
            ModelState::Failed(e) => Err(AppError::ModelNotReady(e.clone())),
        }
    }

    fn start(&mut self, save: Save) -> Result<(), AppError> {
        let turns = model_context(&self.messages);
        let shape = Shape::of(self.feature, self.length, self.tone);
        let req = ReplyRequest {
            system: shape.map_or_else(|| self.feature.system_prompt(), Shape::system_prompt),
            feature: self.feature,
            shape,
            turns,
            settings: self.settings.clone(),
            conversation: self.conversation,
            origin: self.switched.take().unwrap_or_default(),
        };
        let job = self.next_job;
        self.next_job += 1;
        if !self.worker.submit(job, req) {
            self.status = Some("the chat worker has stopped".into());
            return Err(AppError::WorkerGone("chat"));
        }
        self.messages.push(ChatMessage::new(
            Role::Assistant,
            "",
            MessageState::Streaming,
        ));
        self.status = None;
        self.running = Some(Running {
            job,
            save,
            shape,
            started: Instant::now(),
            first_token: None,
            tokens: 0,
        });
        Ok(())
    }

    fn apply(&mut self, m: WorkerMsg) {
        let (job, ev) = match m {
            WorkerMsg::Ready(s) => return self.model = ModelState::Ready(s),
            WorkerMsg::LoadFailed(e) => return self.model = ModelState::Failed(e),
            WorkerMsg::Reply(job, ev) => (job, ev),
        };
        let Some(run) = self.running.as_mut().filter(|r| r.job == job) else {
            return;
        };
        let Some(reply) = self.messages.last_mut() else {
            return;
        };
        match ev {
            ReplyEvent::Token(t) => {
                if reply.state == MessageState::Streaming {
                    reply.text.push_str(&t);
                    run.tokens += 1;
                    run.first_token.get_or_insert_with(Instant::now);
                }
            }
            ReplyEvent::Sources(sources) => reply.sources = sources,
            ReplyEvent::Changes(p) => reply.review = Some(ChangeReview::new(p)),
            ReplyEvent::Withdrawn { from, to, notice } => {
                replace_range(&mut reply.text, from, to, &notice);
                reply.state = MessageState::WITHDRAWN;
            }
            ReplyEvent::Done(outcome) => {
                // A reply the guard withdrew while it streamed stays withdrawn; the outcome
                // names the category.
                let ended = MessageState::Finished(outcome.verdict);
                reply.state = match reply.state.is_withdrawn() && !ended.is_withdrawn() {
                    true => MessageState::WITHDRAWN,
                    false => ended,
                };
                // The outcome's text is what the user should end up seeing (the refusal, the
                // notice, the reply); a responder that only withdrew keeps the patched text.
                if !outcome.text.is_empty() || !reply.state.is_withdrawn() {
                    reply.text = outcome.text;
                }
                if run.shape == Some(Shape::Choices) {
                    reply.choices = Shape::Choices
                        .items(&reply.text, outcome.verdict)
                        .unwrap_or_default();
                }
                self.last_stats = outcome.stats;
                let save = run.save;
                self.running = None;
                self.pending_context = outcome.context;
                self.save_last(save);
                if let Some(n) = outcome.notice {
                    self.status.get_or_insert(n);
                }
            }
            ReplyEvent::Failed(e) => {
                reply.state = MessageState::Failed;
                if reply.text.is_empty() {
                    reply.text = format!("(no reply: {e})");
                }
                self.status = Some(e);
                self.running = None;
            }
        }
    }

    /// Saves the exchange that just ended; a failed save is shown, not fatal.
    fn save_last(&mut self, save: Save) {
        if self.mode == ChatMode::Temporary {
            self.pending_context = None;
            return;
        }
        let Some(store) = &self.store else { return };
        let n = self.messages.len();
        if n < 2 || self.messages[n - 1].text.trim().is_empty() {
            return;
        }
        let (user, reply) = (&self.messages[n - 2].text, &self.messages[n - 1].text);
        let result = match (save, self.conversation) {
            (Save::ReplaceLast, Some(c)) => store
                .borrow_mut()
                .replace_last_exchange(c, user, reply)
                .map(|()| c),
            _ => store
                .borrow_mut()
                .append_exchange(self.conversation, user, reply),
        };
        match result {
            Ok(id) => {
                self.conversation = Some(id);
                for m in &mut self.messages {
                    m.saved = false;
                }
                self.messages[n - 1].saved = true;
                if let Some(ctx) = self.pending_context.take() {
                    let context = model_context(&self.messages);
                    // A context that did not save costs the next open a re-read, no more;
                    // the responder starts its next snapshot over.
                    if let Err(e) = ctx.write(&mut store.borrow_mut(), id, &context) {
                        self.switched = Some(ContextOrigin::Switched(None));
                        self.status = Some(format!("context not saved: {e}"));
                    }
                }
            }
            Err(e) => {
                self.pending_context = None;
                self.switched = Some(ContextOrigin::Switched(None));
                self.status = Some(format!("not saved to the history: {e}"));
            }
        }
    }
}

impl Drop for ChatController {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Replaces bytes `from..to` of `text` with `with`, the range clamped to the text and
/// widened to character boundaries (a withdrawal never splits a character).
fn replace_range(text: &mut String, from: usize, to: usize, with: &str) {
    let mut to = to.min(text.len());
    while !text.is_char_boundary(to) {
        to += 1;
    }
    let mut from = from.min(to);
    while !text.is_char_boundary(from) {
        from -= 1;
    }
    text.replace_range(from..to, with);
}
